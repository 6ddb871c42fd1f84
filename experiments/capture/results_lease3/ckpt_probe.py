import argparse, cProfile, io, json, os, pstats, statistics, sys, time
sys.path.insert(0, "experiments/realworld"); sys.path.insert(0, "experiments/capture")
import torch, hf_run, capture_run
out = sys.argv[1]
res = {}
for name, cfg, prec, seq, b in (("gpt2-large-bf16", "gpt2-large.json", "bf16", 1024, 4),
                                ("qwen2.5-0.5b-amp", "qwen2.5-0.5b.json", "amp", 2048, 4)):
    a = argparse.Namespace(config="experiments/realworld/configs/" + cfg, precision=prec, seq=seq,
                           batch=b, mode="keep")
    x, model, opt, hooks = capture_run.setup(a, torch, hf_run)
    ha = argparse.Namespace(config=a.config, precision=prec, seed=0)
    def timed(n=5):
        f, bw, w = [], [], []
        for _ in range(n):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            loss = hf_run.forward_loss(model, x, ha, torch)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step(); opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize(); t3 = time.perf_counter()
            f.append(t1 - t0); bw.append(t2 - t1); w.append(t3 - t0)
        return dict(fwd_ms=1e3 * statistics.median(f), bwd_ms=1e3 * statistics.median(bw),
                    wall_ms=1e3 * statistics.median(w))
    def prof(tag):
        torch.cuda.synchronize()
        pr = cProfile.Profile(); pr.enable()
        loss = hf_run.forward_loss(model, x, ha, torch)
        loss.backward()
        pr.disable()
        opt.step(); opt.zero_grad(set_to_none=True); torch.cuda.synchronize()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
        with open(os.path.join(out, name + "." + tag + ".prof.txt"), "w") as fh: fh.write(s.getvalue())
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45)
        with open(os.path.join(out, name + "." + tag + ".cum.txt"), "w") as fh: fh.write(s.getvalue())
    for _ in range(3): hf_run.step(model, opt, x, ha, torch, None)
    r = {"plain": timed()}; prof("plain")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for _ in range(2): hf_run.step(model, opt, x, ha, torch, None)
    r["ckpt"] = timed(); prof("ckpt")
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):
        r["ckpt_noearly"] = timed()
    res[name] = r
    print(name, r, flush=True)
    del model, opt, x; torch.cuda.empty_cache()
json.dump(res, open(os.path.join(out, "ckpt_probe.json"), "w"), indent=1)

import argparse, gc, json, os, statistics, sys, time
sys.path.insert(0, "experiments/realworld"); sys.path.insert(0, "experiments/capture")
import torch, hf_run, capture_run
out = sys.argv[1]
res = {}
ev = []
t_start = [0.0]
def cb(phase, info):
    if phase == "start": t_start[0] = time.perf_counter()
    else: ev.append((info["generation"], time.perf_counter() - t_start[0], info.get("collected", 0)))
gc.callbacks.append(cb)
for name, cfg, prec, seq, b in (("gpt2-large-bf16", "gpt2-large.json", "bf16", 1024, 4),
                                ("qwen2.5-0.5b-amp", "qwen2.5-0.5b.json", "amp", 2048, 4)):
    a = argparse.Namespace(config="experiments/realworld/configs/" + cfg, precision=prec, seq=seq,
                           batch=b, mode="keep")
    x, model, opt, hooks = capture_run.setup(a, torch, hf_run)
    ha = argparse.Namespace(config=a.config, precision=prec, seed=0)
    def timed(n=9):
        f, bw, w, g = [], [], [], []
        for _ in range(n):
            torch.cuda.synchronize(); del ev[:]
            t0 = time.perf_counter()
            loss = hf_run.forward_loss(model, x, ha, torch)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step(); opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize(); t3 = time.perf_counter()
            f.append(t1 - t0); bw.append(t2 - t1); w.append(t3 - t0)
            g.append([sum(1 for e in ev if e[0] == k) for k in range(3)] +
                     [sum(e[1] for e in ev if e[0] == k) * 1e3 for k in range(3)])
        med = lambda v: 1e3 * statistics.median(v)
        return dict(fwd_ms=med(f), bwd_ms=med(bw), wall_ms=med(w), all_wall_ms=[1e3 * v for v in w],
                    gc_per_step=g)
    r = {}
    for _ in range(3): hf_run.step(model, opt, x, ha, torch, None)
    gc.collect()
    r["objects"] = len(gc.get_objects())
    for gen in (0, 1, 2):
        t0 = time.perf_counter(); gc.collect(gen); r["collect%d_ms" % gen] = 1e3 * (time.perf_counter() - t0)
    r["threshold"] = gc.get_threshold()
    r["plain"] = timed()
    gc.disable(); r["plain_nogc"] = timed(); gc.enable()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for _ in range(2): hf_run.step(model, opt, x, ha, torch, None)
    r["ckpt"] = timed()
    gc.disable(); r["ckpt_nogc"] = timed(); gc.enable()
    gc.freeze(); r["ckpt_frozen"] = timed(); gc.unfreeze()
    res[name] = r
    print(name, json.dumps({k: (v if not isinstance(v, dict) else {kk: vv for kk, vv in v.items() if kk != "gc_per_step" and kk != "all_wall_ms"}) for k, v in r.items()}), flush=True)
    del model, opt, x; gc.collect(); torch.cuda.empty_cache()
json.dump(res, open(os.path.join(out, "gc_probe.json"), "w"), indent=1)

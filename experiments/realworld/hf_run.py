#!/usr/bin/env python3
"""hf_run.py — one real training configuration of a Hugging Face model on a GPU, measured: the
ground truth of experiments/realworld (run.sh predicts the same configuration with memsim and
prints both). Runs on a GPU machine with PyTorch 2.x and transformers; needs no network: the
model is built from a config.json with random weights (nothing is downloaded) and the tokens
come from torch.randint with a fixed seed.

What it runs is what a user's training loop does in PyTorch eager:
  model = AutoModelForCausalLM.from_config(config)   (built on the GPU in its dtype,
                    as from_pretrained(device_map="cuda", dtype=...) loads it; for
                    model_type bert AutoModelForMaskedLM, labels the input ids: the
                    masked-LM loss over every token)
  --precision amp:  fp32 parameters, torch.autocast("cuda", dtype=torch.bfloat16) around the
                    forward and the loss; --precision bf16: the model built in bf16
  --ckpt:           model.gradient_checkpointing_enable(use_reentrant=False)
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4)      (PyTorch's default: foreach)
  per step: loss = model(input_ids=x, labels=x).loss; loss.backward(); opt.step();
            opt.zero_grad()
SDPA attention (transformers' default), use_cache False, model.train() (dropout as the config
says).

Measured: PyTorch's own peak allocated and peak reserved bytes of the whole process
(torch.cuda.memory_stats, reset before the model reaches the GPU), the median step time over
--steps timed steps after --warmup untimed ones (torch.cuda.synchronize around each), and the
status: ok, or oom with where it happened. Optionally (--record) the allocator trace as
traces/capture/record_snapshot.py writes it ({"snapshot", "memory_stats", "meta"}) and
(--profile) one extra step under torch.profiler with every GPU kernel's name and duration.

Output: one JSON object (--out), also printed on one line.
"""

import argparse
import contextlib
import gzip
import json
import os
import platform
import statistics
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Measure one HF training configuration.")
    p.add_argument("--config", required=True, help="a Hugging Face config.json")
    p.add_argument("--name", default="", help="name of the case in the results")
    p.add_argument("--precision", choices=["amp", "bf16"], default="amp")
    p.add_argument("--ckpt", action="store_true", help="gradient_checkpointing_enable()")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", default="", help="write the allocator trace here (.json.gz)")
    p.add_argument("--frames", action="store_true", help="with --record: Python frames too")
    p.add_argument("--profile", default="", help="write per-kernel times here (.csv)")
    p.add_argument("--profile-ops", default="",
                   help="write GPU time per aten op and input shapes here (.csv)")
    p.add_argument("--out", default="", help="write the result JSON here")
    a = p.parse_args(argv)
    for k in ("seq", "batch", "steps"):
        if getattr(a, k) <= 0:
            p.error("--%s must be positive" % k)
    return a


def build(a, torch):
    import transformers
    with open(a.config) as f:
        d = json.load(f)
    mt = d.pop("model_type")
    cfg = transformers.AutoConfig.for_model(mt, **d)
    cfg.use_cache = False
    torch.manual_seed(a.seed)
    # Built on the GPU in its training dtype, as from_pretrained(..., device_map="cuda",
    # dtype=...) loads a model: one allocation per parameter in module order (random
    # initialization on the CPU takes minutes for billions of parameters).
    dt = torch.bfloat16 if a.precision == "bf16" else torch.float32
    auto = (transformers.AutoModelForMaskedLM if mt == "bert"
            else transformers.AutoModelForCausalLM)
    with torch.device("cuda"):
        try:
            model = auto.from_config(cfg, attn_implementation="sdpa", dtype=dt)
        except TypeError:  # transformers < 5 names it torch_dtype
            model = auto.from_config(cfg, attn_implementation="sdpa", torch_dtype=dt)
    p0 = next(model.parameters())
    if p0.dtype != dt:
        model = model.to(dt)
    if p0.device.type != "cuda":
        model = model.to("cuda")
    return model, cfg


def forward_loss(model, x, a, torch, saved=None):
    """The forward and the loss of one training step (bf16 autocast for amp); saved (a
    context manager factory, e.g. save_on_cpu) wraps them, where autograd saves its
    tensors."""
    with saved() if saved else contextlib.nullcontext():
        if a.precision == "amp":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(input_ids=x, labels=x).loss
        return model(input_ids=x, labels=x).loss


def step(model, opt, x, a, torch, saved=None):
    """One training step (forward_loss, backward, AdamW step, zero_grad)."""
    loss = forward_loss(model, x, a, torch, saved)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def kernel_profile(model, opt, x, a, torch, path):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(model, opt, x, a, torch)
        torch.cuda.synchronize()
    agg = {}
    for e in prof.events():
        if getattr(e, "device_type", None) is None or str(e.device_type) != "DeviceType.CUDA":
            continue
        k = agg.setdefault(e.name, [0, 0.0])
        k[0] += 1
        k[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    with open(path, "w") as f:
        f.write("kernel\tcount\ttotal_us\n")
        for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            f.write("%s\t%d\t%.3f\n" % (n.replace("\t", " ")[:300], c, t))


def op_profile(model, opt, x, a, torch, path):
    """GPU time of one step per aten op and its input shapes (the kernels an op launched,
    self time: a kernel counts for the innermost op that launched it)."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        step(model, opt, x, a, torch)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        dev = getattr(e, "self_device_time_total", None)
        if dev is None:
            dev = e.self_cuda_time_total
        if dev <= 0:
            continue
        rows.append((dev, e.key, str(e.input_shapes), e.count))
    rows.sort(key=lambda r: -r[0])
    with open(path, "w") as f:
        f.write("op\tshapes\tcount\tself_device_us\n")
        for dev, k, sh, c in rows:
            f.write("%s\t%s\t%d\t%.3f\n" % (k, sh.replace("\t", " ")[:300], c, dev))


def strip_frames(snap):
    for dev in snap.get("device_traces", []):
        for e in dev:
            e.pop("frames", None)
    for seg in snap.get("segments", []):
        seg.pop("frames", None)
        for b in seg.get("blocks", []):
            b.pop("frames", None)


def main(argv=None):
    a = parse_args(argv)
    import torch
    import transformers
    if not torch.cuda.is_available():
        print("hf_run.py: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    res = dict(name=a.name or os.path.basename(a.config), config=os.path.basename(a.config),
               precision=a.precision, ckpt=int(a.ckpt), seq=a.seq, batch=a.batch,
               torch=torch.__version__, transformers=transformers.__version__,
               cuda=torch.version.cuda, device=torch.cuda.get_device_name(0),
               device_bytes=torch.cuda.get_device_properties(0).total_memory,
               python=platform.python_version(), status="ok", where="")
    torch.cuda.reset_peak_memory_stats(dev)
    with open(a.config) as f:
        vocab = json.load(f)["vocab_size"]
    gen = torch.Generator().manual_seed(a.seed)
    xs = torch.randint(0, vocab, (a.batch, a.seq), generator=gen)
    if a.record:
        torch.cuda.memory._record_memory_history(
            enabled="all", context="all" if a.frames else None, stacks="python",
            max_entries=2000000)
    times = []
    where = "build"
    try:
        model, cfg = build(a, torch)
        res["setup_allocated"] = torch.cuda.memory_allocated()
        res["setup_reserved"] = torch.cuda.memory_reserved()
        res["params"] = sum(p.numel() for p in model.parameters())
        where = "setup"
        model.train()
        if a.ckpt:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        where = "input"
        x = xs.to(dev)
        for i in range(a.warmup + a.steps):
            where = "step %d" % i
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = step(model, opt, x, a, torch)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            if i >= a.warmup:
                times.append(t1 - t0)
            res["loss"] = float(loss)
            del loss
    except torch.OutOfMemoryError as e:
        res["status"] = "oom"
        res["where"] = where
        res["oom_message"] = str(e).split("\n")[0][:300]
    st = torch.cuda.memory_stats(dev)
    res["peak_allocated"] = st.get("allocated_bytes.all.peak", 0)
    res["peak_reserved"] = st.get("reserved_bytes.all.peak", 0)
    res["segments"] = st.get("segment.all.allocated", 0)
    res["alloc_retries"] = st.get("num_alloc_retries", 0)
    res["num_ooms"] = st.get("num_ooms", 0)
    res["step_times_s"] = times
    res["step_s"] = statistics.median(times) if times else None
    if a.record:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        if not a.frames:
            strip_frames(snap)
        meta = {k: v for k, v in res.items() if not isinstance(v, list)}
        tmp = a.record + ".tmp"
        with gzip.open(tmp, "wt") as f:
            json.dump({"snapshot": snap, "memory_stats": st, "meta": meta}, f)
        os.replace(tmp, a.record)
    line = json.dumps(res, sort_keys=True)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    if a.profile_ops and res["status"] == "ok":
        try:
            op_profile(model, opt, x, a, torch, a.profile_ops)
        except Exception as e:  # the measurement above stands without the profile
            print("hf_run.py: op profile failed: %s" % e, file=sys.stderr)
    if a.profile and res["status"] == "ok":
        try:
            kernel_profile(model, opt, x, a, torch, a.profile)
        except Exception as e:  # the measurement above stands without the profile
            print("hf_run.py: profile failed: %s" % e, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""probe_host.py — the host side of PyTorch training steps on the GPU machine, without any
profiler (docs/CAPTURE.md, "Host time"):

  --framework   the host time PyTorch's autograd hooks add: non-reentrant checkpointing
                through transformers' GradientCheckpointingLayer (per layer and per saved
                tensor, forward and backward) and save_on_cpu(pin_memory=True) (per saved
                tensor), on chains of torch.sin, the machine profile's host.ckpt_*,
                host.recompute_layer_us and host.save_* (experiments/capture/
                framework_h200.json is what the H200 gave);
  (default)     each case of cases.tsv, plain and checkpointed: host time stamps at the phase
                boundaries of --reps plain steps in a fresh process (forward from the first
                block's pre-hook, backward, optimizer), the medians: what a capture's timed
                step (memsim.capture(host_timing=True)) measures, without the capture.

Prints one JSON object per case (and --out). Run with experiments/realworld on PYTHONPATH."""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "realworld"))


def _chain_model(torch, n_layers, k, ckpt):
    """n_layers blocks of k torch.sin each (one saved tensor per op), as transformers'
    GradientCheckpointingLayer with gradient_checkpointing_enable()'s settings when ckpt."""
    import functools
    import torch.utils.checkpoint as tuc
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer as Base
    except Exception:                     # older transformers: plain modules, plain checkpoint
        Base = torch.nn.Module

    class Blk(Base):
        def __init__(self):
            super().__init__()

        def forward(self, y):
            for _ in range(k):
                y = torch.sin(y)
            return y

    blocks = torch.nn.ModuleList(Blk() for _ in range(n_layers))
    for b in blocks:
        b.gradient_checkpointing = ckpt
        b._gradient_checkpointing_func = functools.partial(tuc.checkpoint, use_reentrant=False)
    blocks.train()
    return blocks


def _chain_times(torch, blocks, w, x, hooks, reps):
    """Median host seconds of the forward call and of the backward call (the GPU's tiny
    kernels finish before the host issues the next: the host's own time)."""
    fw, bw = [], []
    for i in range(reps + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with hooks() if hooks else contextlib.nullcontext():
            y = x * w
            for b in blocks:
                y = b(y)
            loss = y.sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        w.grad = None
        if i >= 3:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
    return statistics.median(fw), statistics.median(bw)


def _fit(ks, ys):
    """Least squares y = a + b k."""
    n = len(ks)
    mk, my = sum(ks) / n, sum(ys) / n
    b = sum((k - mk) * (y - my) for k, y in zip(ks, ys)) / sum((k - mk) ** 2 for k in ks)
    return my - b * mk, b


def framework_costs(torch, n_layers=16, ks=(1, 4, 16, 32), reps=15):
    """The host time PyTorch's non-reentrant checkpoint (through transformers'
    GradientCheckpointingLayer) and save_on_cpu(pin_memory=True) add, per layer and per
    saved tensor, on chains of torch.sin (one op, one saved tensor): microseconds.
    ckpt forward: a + b k per layer beyond the plain forward; ckpt backward: c + d k per
    layer beyond the plain backward and the replayed forward's own host time (the plain
    forward's); save_on_cpu: per saved tensor in the forward (pack: pinned buffer, blocking
    copy) and in the backward (unpack: copy back)."""
    x = torch.randn(256, device="cuda")
    w = torch.ones(256, device="cuda", requires_grad=True)
    rows = []
    for k in ks:
        plain = _chain_times(torch, _chain_model(torch, n_layers, k, False), w, x, None, reps)
        ck = _chain_times(torch, _chain_model(torch, n_layers, k, True), w, x, None, reps)
        soc = _chain_times(torch, _chain_model(torch, n_layers, k, False), w, x,
                           lambda: torch.autograd.graph.save_on_cpu(pin_memory=True), reps)
        rows.append(dict(k=k, plain_fwd_us=plain[0] * 1e6, plain_bwd_us=plain[1] * 1e6,
                         ckpt_fwd_us=ck[0] * 1e6, ckpt_bwd_us=ck[1] * 1e6,
                         soc_fwd_us=soc[0] * 1e6, soc_bwd_us=soc[1] * 1e6))
    L = float(n_layers)
    a, b = _fit(ks, [(r["ckpt_fwd_us"] - r["plain_fwd_us"]) / L for r in rows])
    c, d = _fit(ks, [(r["ckpt_bwd_us"] - r["plain_bwd_us"] - r["plain_fwd_us"]) / L
                     for r in rows])
    _, e = _fit(ks, [(r["soc_fwd_us"] - r["plain_fwd_us"]) / L for r in rows])
    _, f = _fit(ks, [(r["soc_bwd_us"] - r["plain_bwd_us"]) / L for r in rows])
    _, op = _fit(ks, [r["plain_fwd_us"] / L for r in rows])
    return dict(layers=n_layers, rows=rows, ckpt_fwd_layer_us=a, ckpt_fwd_save_us=b,
                recompute_layer_us=c, ckpt_bwd_save_us=d, save_pack_us=e, save_unpack_us=f,
                plain_op_us=op)


def phases(model, opt, x, a, torch, hooks, block):
    """One step with host time stamps at the phase boundaries (seconds; the forward from the
    first block's pre-hook, after the model's early host synchronization) and its wall time."""
    import hf_run
    st = {}

    def pre(_m, _args):
        if "pre" not in st:
            st["pre"] = time.perf_counter()
    h = block.register_forward_pre_hook(pre)
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = hf_run.forward_loss(model, x, a, torch, hooks)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        opt.zero_grad()
        t4 = time.perf_counter()
        torch.cuda.synchronize()
        t5 = time.perf_counter()
    finally:
        h.remove()
    p = st.get("pre", t0)
    return dict(pre_s=p - t0, fwd_s=t1 - p, bwd_s=t2 - t1, opt_s=t3 - t2, zero_s=t4 - t3,
                host_s=t4 - p, wall_s=t5 - t0, tail_s=t5 - t4)


def first_block(model):
    for m in model.modules():
        if isinstance(m, torch_nn_modulelist()) and len(m) > 1:
            return m[0]
    return None


def torch_nn_modulelist():
    import torch
    return torch.nn.ModuleList


def run_case(a, torch, hf_run):
    import capture_run
    x, model, opt, hooks = capture_run.setup(a, torch, hf_run)
    block = first_block(model)
    for _ in range(3):
        phases(model, opt, x, a, torch, hooks, block)
    plain = [phases(model, opt, x, a, torch, hooks, block) for _ in range(a.reps)]
    med = lambda k: statistics.median(r[k] for r in plain)
    out = dict(case=a.name, mode=a.mode, config=os.path.basename(a.config),
               precision=a.precision, seq=a.seq, batch=a.batch, step_s=med("wall_s"),
               host={k: med(k) for k in ("pre_s", "fwd_s", "bwd_s", "opt_s", "host_s")},
               plain=plain, torch=torch.__version__, device=torch.cuda.get_device_name(0))
    del model, opt
    torch.cuda.empty_cache()
    return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="", help="cases.tsv")
    p.add_argument("--configs", default="")
    p.add_argument("--modes", default="keep,ckpt")
    p.add_argument("--only", default="", help="comma-separated case names")
    p.add_argument("--reps", type=int, default=5, help="timed steps per case (median)")
    p.add_argument("--out", default="")
    p.add_argument("--framework", action="store_true",
                   help="measure the checkpoint and save_on_cpu hooks' host costs instead")
    a = p.parse_args(argv)
    import torch
    import hf_run
    if not torch.cuda.is_available():
        print("probe_host.py: no CUDA device", file=sys.stderr)
        return 2
    if a.framework:
        fc = framework_costs(torch)
        fc.update(torch=torch.__version__, device=torch.cuda.get_device_name(0))
        try:
            import transformers
            fc["transformers"] = transformers.__version__
        except Exception:
            pass
        print(json.dumps(fc), flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(fc, f, indent=1, sort_keys=True)
        return 0
    res = dict(cases=[])
    only = set(filter(None, a.only.split(",")))
    for line in open(a.cases):
        if line.startswith("#") or not line.strip():
            continue
        name, cfg, prec, seq, batch = line.split()[:5]
        if only and name not in only:
            continue
        for mode in a.modes.split(","):
            ca = argparse.Namespace(name=name, config=os.path.join(a.configs, cfg),
                                    precision=prec, seq=int(seq), batch=int(batch), mode=mode,
                                    reps=a.reps)
            try:
                r = run_case(ca, torch, hf_run)
            except Exception as e:  # one case's failure is reported, the others still run
                r = dict(case=name, mode=mode, error=repr(e)[:300])
            res["cases"].append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "plain"}),
                  flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

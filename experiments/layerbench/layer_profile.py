#!/usr/bin/env python3
"""layer_profile.py — where PyTorch eager's time goes in the layer of `memsim run --math real
--bench-layer` (experiments/layerbench/layer_torch.py's layer), to set beside the per-op
table that memsim's --bench-layer prints.

Runs the layer's step (forward + autograd.grad against the input and every parameter) in
eager mode: warm-up steps, the step's median with CUDA events, then --steps steps under
torch.profiler. Prints, per step: the GPU time of the kernels launched under each forward
op of the layer (named as memsim names them: ln1, qkv, attn, proj, add1, ln2, fc1, act, fc2,
add2; scoped with record_function, which launches nothing), the backward's kernels by the
autograd node that launched them and their operands' shapes, and the largest kernels by name.

  python3 experiments/layerbench/layer_profile.py --seq 32768 [--steps 3] [--warmup 3]
Exit status: 0 done, 1 no GPU, 2 usage.
"""
import argparse
import collections
import os
import sys


def scope_forward(layer, h, heads):
    """Replaces layer_torch.make_layer's forward by the same ops, each in a record_function
    scope named as memsim's op (the scopes launch nothing)."""
    import torch.nn.functional as F
    from torch.profiler import record_function as rf
    m = layer

    def forward(x):
        b, s, _ = x.shape
        with rf("ln1"):
            y = m.ln1(x)
        with rf("qkv"):
            q, k, v = m.qkv(y).split(h, dim=-1)
            q, k, v = (t.view(b, s, heads, h // heads).transpose(1, 2) for t in (q, k, v))
        with rf("attn"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with rf("proj"):
            p = m.proj(a.transpose(1, 2).reshape(b, s, h))
        with rf("add1"):
            x = x + p
        with rf("ln2"):
            y = m.ln2(x)
        with rf("fc1"):
            y = m.fc1(y)
        with rf("act"):
            y = F.gelu(y, approximate="tanh")
        with rf("fc2"):
            y = m.fc2(y)
        with rf("add2"):
            return x + y

    layer.forward = forward
    return layer


FWD = ("ln1", "qkv", "attn", "proj", "add1", "ln2", "fc1", "act", "fc2", "add2")


def owner(e):
    """(forward op name, None) for a kernel launched under a forward scope; (None, the
    autograd node, the operator that launched it and its operands' shapes) for one launched
    in the backward. e: the CPU event the kernel is correlated with (an operator or the
    runtime's launch call inside one)."""
    p, launcher = e, None
    while p is not None:
        if p.name in FWD:
            return p.name, None
        if launcher is None and not p.name.startswith("cuda"):
            launcher = p
        if p.name.startswith("autograd::engine::evaluate_function: "):
            node = p.name.split(": ", 1)[1]
            shapes = [tuple(s) for s in (launcher.input_shapes or []) if s] if launcher else []
            return None, f"{node} {launcher.name if launcher else '?'} {shapes}"
        p = p.cpu_parent
    return None, "other"


def kernels(prof):
    """(kernel name, microseconds, the CPU event it is correlated with) of every kernel."""
    out = []
    for e in prof.events():
        if e.device_type.name == "CPU":
            for k in getattr(e, "kernels", None) or []:
                out.append((k.name, k.duration, e))
    if not out:   # a profiler that links the kernels' events to their CPU parents instead
        for e in prof.events():
            if e.device_type.name == "CUDA":
                us = getattr(e, "device_time", None)
                out.append((e.name, us if us is not None else e.cuda_time, e.cpu_parent))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    if not torch.cuda.is_available():
        print("no GPU")
        return 1
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from layer_torch import make_layer, timed
    layer = scope_forward(make_layer(a.hidden, a.heads, a.ffn), a.hidden, a.heads)
    x = torch.randn(1, a.seq, a.hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(1, a.seq, a.hidden, device="cuda", dtype=torch.bfloat16) * 0.01
    params = [x] + list(layer.parameters())

    def step():
        torch.autograd.grad(layer(x), params, dy)

    med, lo, hi = timed(step, a.warmup, max(a.steps, 3))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    fwd, bwd, kern = collections.Counter(), collections.Counter(), collections.Counter()
    for name, us, e in kernels(prof):
        kern[name[:100]] += us
        f, b = owner(e) if e is not None else (None, "other")
        if f:
            fwd[f] += us
        else:
            bwd[b] += us
    n = a.steps
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}")
    print(f"PyTorch eager, one layer (h {a.hidden}, {a.heads} heads, ffn {a.ffn}), seq "
          f"{a.seq} x batch 1: step median {med:.3f} ms (min {lo:.3f}, max {hi:.3f}) with "
          f"CUDA events; kernels under torch.profiler, ms per step:")
    for o in FWD:
        print(f"  {o:<8} {fwd[o] / 1e3 / n:9.3f}")
    print("  backward, by autograd node, launching operator and its operands' shapes:")
    for k, us in sorted(bwd.items(), key=lambda kv: -kv[1]):
        print(f"  {us / 1e3 / n:9.3f}  {k}")
    tot = (sum(fwd.values()) + sum(bwd.values())) / 1e3 / n
    print(f"  sum of kernels {tot:.3f} (forward {sum(fwd.values()) / 1e3 / n:.3f})")
    print("largest kernels, ms per step:")
    for k, us in kern.most_common(16):
        print(f"  {us / 1e3 / n:9.3f}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

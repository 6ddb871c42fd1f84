#!/usr/bin/env python3
"""sdpa_probe.py — measures PyTorch's fused causal attention (torch.nn.functional.
scaled_dot_product_attention, which dispatches to its FlashAttention kernels for bf16 on
sm_80+) on this GPU, forward and backward, over sequence lengths, as the fraction of the dense
bf16 peak that memsim's op-time model calls gpu.attn_eff. FLOPs are counted as memsim's
generator counts them (traces/gen.c): forward 2*B*S^2*H*D (causal), backward 2.5 x forward.
Prints CSV: what,batch,heads,seq,head_dim,ms,tflops,eff. Needs no network.

Used to put a measured figure beside the profiles' assumed gpu.attn_eff (docs/RUNTIME.md).

Example: python3 sdpa_probe.py --peak 989.4e12 > sdpa.csv
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def timed(fn, reps):
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peak", type=float, default=989.4e12, help="dense bf16 peak, FLOP/s")
    ap.add_argument("--tokens", type=int, default=32768, help="batch x sequence per shape")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=8)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_probe.py: no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    H, D = a.heads, a.head_dim
    print("what,batch,heads,seq,head_dim,ms,tflops,eff")
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}", file=sys.stderr)
    for S in (2048, 4096, 8192, 16384, 32768):
        B = max(1, a.tokens // S)
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        fwd_flops = 2.0 * B * S * S * H * D
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(out)

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def bwd():
            torch.autograd.grad(out, (q, k, v), g, retain_graph=True)

        for name, fn, fl in (("fwd", fwd, fwd_flops), ("bwd", bwd, 2.5 * fwd_flops)):
            ms = timed(fn, a.reps)
            tf = fl / (ms * 1e-3)
            print(f"sdpa_{name},{B},{H},{S},{D},{ms:.4f},{tf / 1e12:.1f},{tf / a.peak:.4f}")
        del q, k, v, out, g
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

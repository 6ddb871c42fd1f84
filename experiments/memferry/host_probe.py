#!/usr/bin/env python3
"""host_probe.py — measures on a real GPU machine the two MemFerry figures that memsim's
machine profiles otherwise assume: how fast a GEMM runs when its weight lives in pinned host
memory read over PCIe (Direct Host Access, `dha.gemm_eff`), and how many parameters per
second a vectorized CPU Adam updates per core (`host.adam_params_per_s`).

It prints four tables (CSV, also written under --out):
  link       the host link as these kernels see it: a streaming read of mapped host memory
             (`sum`) and a pinned H2D copy, 256 MiB each, GB/s;
  dha_gemm   cuBLAS GEMMs as nn.Linear runs them, the weight in GPU memory vs in mapped
             host memory: forward (Y = X W^T) and the input gradient (dX = dY W) over weight
             shapes and token counts; `eff` is the weight's bytes over the host time, as a
             share of the streaming read rate (memsim's DHA read flow runs at
             dha.read_Bps x dha.gemm_eff beside the GEMM's compute);
  dha_embed  an embedding lookup with the table on the GPU vs in mapped host memory (does
             the kernel read the rows it gathers or more?);
  cpu_adam   torch.optim.Adam over fp32 parameters on the CPU (fused and foreach) with 1..N
             threads: parameters per second.

memsim uses these for the h200-sxm profile's dha.gemm_eff and host.adam_params_per_s
(docs/MEMFERRY.md, "Measured on an H200"), and as evidence for the assumed values of the
paper machines' profiles.

Example: python3 host_probe.py --reps 8 --out /tmp/hp
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

from dha_common import emit, host_mapped_zeros, per_call_ms

LOOP = 10  # kernels per timed sample (dha_common.per_call_ms)
MiB = 1 << 20

# (in, out) of the Linear weights of the models memsim reproduces MemFerry on, and of the
# validation workload (docs/VALIDATION.md): bert-base, bert-large / gpt2-medium, the 1.3B
# GPT, the 6.7B TransformerXL shape.
SHAPES = [(768, 3072), (3072, 768), (1024, 4096), (4096, 1024), (1024, 3072),
          (2048, 8192), (8192, 2048), (4096, 16384)]
TOKENS = [512, 2048, 4096, 8192, 16384, 32768]


def link(out, reps):
    n = 256 * MiB // 2
    dev = torch.empty(n, device="cuda", dtype=torch.float16)
    h = host_mapped_zeros(dev)
    pinned = h._pinned_owner
    t_sum = per_call_ms(lambda: h.sum(), reps, LOOP)
    t_copy = per_call_ms(lambda: dev.copy_(pinned, non_blocking=True), reps, LOOP)
    rows = ["what,bytes,ms,GBps",
            f"dha_read_sum,{2 * n},{t_sum:.4f},{2 * n / (t_sum * 1e-3) / 1e9:.2f}",
            f"h2d_copy,{2 * n},{t_copy:.4f},{2 * n / (t_copy * 1e-3) / 1e9:.2f}"]
    emit(out, "link.csv", rows)
    return 2 * n / (t_sum * 1e-3)


def dha_gemm(out, reps, read_Bps, tokens):
    rows = ["op,in,out,tokens,w_bytes,dev_us,host_us,host_w_GBps,eff"]
    for k, n in SHAPES:
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
        wh = host_mapped_zeros(w)
        wh.copy_(w)
        wb = w.numel() * 2
        for m in tokens:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            dy = torch.randn(m, n, device="cuda", dtype=torch.float16)
            cases = (("fwd", lambda W: F.linear(x, W)), ("dgrad", lambda W: dy @ W))
            for name, f in cases:
                td = per_call_ms(lambda: f(w), reps, LOOP)
                th = per_call_ms(lambda: f(wh), reps, LOOP)
                gbps = wb / (th * 1e-3) / 1e9
                rows.append(f"{name},{k},{n},{m},{wb},{td * 1e3:.1f},{th * 1e3:.1f},"
                            f"{gbps:.2f},{gbps * 1e9 / read_Bps:.4f}")
            del x, dy
        del w, wh
    emit(out, "dha_gemm.csv", rows)


def dha_embed(out, reps):
    rows = ["vocab,hidden,tokens,table_bytes,rows_bytes,dev_us,host_us"]
    for v, hdim in ((30522, 768), (50257, 1024)):
        t = torch.randn(v, hdim, device="cuda", dtype=torch.float16)
        th = host_mapped_zeros(t)
        th.copy_(t)
        for m in (512, 4096, 32768):
            ids = torch.randint(0, v, (m,), device="cuda")
            td = per_call_ms(lambda: F.embedding(ids, t), reps, LOOP)
            tt = per_call_ms(lambda: F.embedding(ids, th), reps, LOOP)
            rows.append(f"{v},{hdim},{m},{v * hdim * 2},{m * hdim * 2},{td * 1e3:.1f},"
                        f"{tt * 1e3:.1f}")
    emit(out, "dha_embed.csv", rows)


def cpu_adam(out, reps, nparams, max_threads):
    rows = ["impl,threads,params,step_ms,params_per_s"]
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(nparams))
    p.grad = torch.randn(nparams) * 1e-3
    threads = [t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t <= max_threads]
    for impl in ("fused", "foreach"):
        kw = {"fused": True} if impl == "fused" else {"foreach": True}
        try:
            opt = torch.optim.Adam([p], lr=1e-4, **kw)
            opt.step()
        except (RuntimeError, ValueError) as e:
            rows.append(f"{impl},0,{nparams},nan,unsupported: {str(e).splitlines()[0][:60]}")
            continue
        for t in threads:
            torch.set_num_threads(t)
            opt.step()
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                opt.step()
                ts.append(time.perf_counter() - t0)
            ms = sorted(ts)[len(ts) // 2] * 1e3
            rows.append(f"{impl},{t},{nparams},{ms:.2f},{nparams / (ms * 1e-3):.4g}")
    emit(out, "cpu_adam.csv", rows)


def launch(out, reps):
    """What a kernel costs beyond its work: GPU time per tiny kernel queued back to back
    (`gpu_us`), the host's time per launch (`host_us`), and one kernel's launch-to-finish time
    with a synchronization (`sync_us`), for PyTorch's elementwise add on 1 to 2^20 elements."""
    rows = ["elements,gpu_us,host_us,sync_us"]
    calls = 1000
    for n in (1, 1024, 65536, 1 << 20):
        x = torch.zeros(n, device="cuda")
        gpu = per_call_ms(lambda: x.add_(1), reps, calls) * 1e3
        hs, ss = [], []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                x.add_(1)
            hs.append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(100):
                x.add_(1)
                torch.cuda.synchronize()
            ss.append((time.perf_counter() - t0) / 100 * 1e6)
        rows.append(f"{n},{gpu:.2f},{sorted(hs)[reps // 2]:.2f},{sorted(ss)[reps // 2]:.2f}")
    emit(out, "launch.csv", rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=8, help="timed samples per point (median)")
    ap.add_argument("--adam-params", type=int, default=64 * 1024 * 1024,
                    help="fp32 parameters in the CPU Adam test (default 64M)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="most CPU threads in the CPU Adam test (default: all cores)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)),
                    help="rows of the GEMMs' other operand (default %(default)s; the 32768-row "
                    "host GEMMs take most of the 4 minutes on an H200)")
    ap.add_argument("--skip", default="", help="comma list of tables not to run")
    ap.add_argument("--out", default="", help="directory for the CSV files")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    if not skip >= {"link", "dha_gemm", "dha_embed"}:
        if not torch.cuda.is_available():
            raise SystemExit("host_probe.py: no CUDA device (use --skip link,dha_gemm,dha_embed)")
        print(f"# device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
        read_Bps = link(args.out, args.reps)
        if "dha_gemm" not in skip:
            dha_gemm(args.out, args.reps, read_Bps, [int(x) for x in args.tokens.split(",")])
        if "dha_embed" not in skip:
            dha_embed(args.out, args.reps)
        if "launch" not in skip:
            launch(args.out, args.reps)
    if "cpu_adam" not in skip:
        print(f"# cpu: {os.cpu_count()} logical cores", flush=True)
        cpu_adam(args.out, args.reps, args.adam_params, args.threads)


if __name__ == "__main__":
    main()

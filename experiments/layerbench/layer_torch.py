#!/usr/bin/env python3
"""layer_torch.py — the layer of `memsim run --math real --bench-layer` in PyTorch, for the
side-by-side benchmark of experiments/layerbench/run.sh.

The layer is the runtime's (runtime/model_rt.c): a pre-norm GPT layer, LayerNorm, fused QKV
with bias, causal attention (scaled_dot_product_attention), projection with bias, residual
add, LayerNorm, fc1 with bias, GeLU (tanh form), fc2 with bias, residual add; bf16 parameters
and activations, batch 1. One step is its forward and backward (autograd.grad of the output
against the input and every parameter, with a fixed random output gradient), timed with CUDA
events around each step: warm-up steps, then the median of the timed ones. Modes: eager
(cuBLAS linears, SDPA's default backend) and compile (torch.compile of the layer, default
mode). MFU counts the model FLOPs as memsim does (MEMO §5.1 for one layer: 6 T P_layer +
6 b h s^2, P_layer = 4 h^2 + 2 h f + 9 h + f) over the dense bf16 peak.

--sdpa S measures attention alone at sequence S (batch 1, the layer's heads and head dim),
forward and backward, with SDPA's FLASH_ATTENTION backend forced and with its default
choice, FLOPs as memsim's probe counts them (forward 2 b s^2 h causal, backward 2.5 x).

--table DIR prints the side-by-side table from the files run.sh wrote in DIR (no GPU):
DIR/torch.csv (this script's rows) and DIR/memsim_TOKENS[_KERNELS].log (memsim's).

Prints CSV rows: what,tokens,median_ms,min_ms,max_ms,tflops,mfu. Exit status: 0 done, 1 no
GPU or a failed mode, 2 usage.
"""
import argparse
import csv
import glob
import os
import re
import sys


def model_flops(tokens, h, f, batch=1):
    """MEMO §5.1 for one GPT layer, forward + backward, causal attention."""
    p = 4 * h * h + 2 * h * f + 9 * h + f
    s = tokens // batch
    return 6.0 * tokens * p + 6.0 * batch * h * s * s


def timed(fn, warmup, reps):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    n = len(t)
    med = t[n // 2] if n % 2 else 0.5 * (t[n // 2 - 1] + t[n // 2])
    return med, t[0], t[-1]


def make_layer(h, heads, f):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)
            self.ln2 = nn.LayerNorm(h)
            self.fc1 = nn.Linear(h, f)
            self.fc2 = nn.Linear(f, h)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
            q, k, v = (t.view(b, s, heads, h // heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    torch.manual_seed(7)
    return Layer().cuda().to(torch.bfloat16)


def bench_layer(a, seq, mode):
    import torch
    layer = make_layer(a.hidden, a.heads, a.ffn)
    run = torch.compile(layer) if mode == "compile" else layer
    x = torch.randn(1, seq, a.hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(1, seq, a.hidden, device="cuda", dtype=torch.bfloat16) * 0.01
    params = [x] + list(layer.parameters())

    def step():
        torch.autograd.grad(run(x), params, dy)

    warm, reps = (a.warmup, a.reps) if seq < 65536 else (a.warmup_long, a.reps_long)
    med, lo, hi = timed(step, max(warm, 1), reps)
    fl = model_flops(seq, a.hidden, a.ffn)
    del layer, run, x, dy, params
    torch.cuda.empty_cache()
    return med, lo, hi, fl


def bench_sdpa(a, seq):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d = a.hidden // a.heads
    q, k, v = (torch.randn(1, a.heads, seq, d, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    g = torch.randn(1, a.heads, seq, d, device="cuda", dtype=torch.bfloat16)
    fwd = 2.0 * seq * seq * a.hidden
    rows = []
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("default", None)):
        def call():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if backend is None:
            ctx = _null
        else:
            ctx = lambda: sdpa_kernel(backend)  # noqa: E731
        with ctx():
            with torch.no_grad():
                m = timed(call, a.warmup, a.reps)
            rows.append((f"sdpa_{name}_fwd", m, fwd))
            out = call()
            m = timed(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True),
                      a.warmup, a.reps)
            rows.append((f"sdpa_{name}_bwd", m, 2.5 * fwd))
            del out
    return rows


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def emit(what, tokens, m, fl, peak):
    med, lo, hi = m
    tf = fl / (med * 1e-3)
    print(f"{what},{tokens},{med:.4f},{lo:.4f},{hi:.4f},{tf / 1e12:.1f},{tf / peak:.4f}",
          flush=True)


def measure(a):
    import torch
    if not torch.cuda.is_available():
        print("layer_torch.py: no CUDA device", file=sys.stderr)
        return 1
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA "
          f"{torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}", file=sys.stderr)
    print("what,tokens,median_ms,min_ms,max_ms,tflops,mfu", flush=True)
    rc = 0
    if a.sdpa:
        for what, m, fl in bench_sdpa(a, a.sdpa):
            emit(what, a.sdpa, m, fl, a.peak)
    for seq in a.seq:
        for mode in a.modes.split(","):
            try:
                med, lo, hi, fl = bench_layer(a, seq, mode)
            except Exception as e:  # a mode that fails is reported, the others still run
                print(f"layer_torch.py: {mode} at {seq}: {type(e).__name__}: {e}",
                      file=sys.stderr)
                rc = 1
                continue
            emit(f"torch_{mode}", seq, (med, lo, hi), fl, a.peak)
    return rc


# ---- the table (reads run.sh's files; no torch) ----

def read_csv(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    for line in open(path):
        p = line.strip().split(",")
        if len(p) == 7 and p[0] != "what":
            rows[(p[0], int(p[1]))] = (float(p[2]), float(p[6]))
    return rows


def read_memsim(path):
    """median ms, MFU and the per-op attention times of one --bench-layer log."""
    r = {}
    for line in open(path):
        m = re.match(r"time: median ([0-9.]+) ms", line)
        if m:
            r["median"] = float(m.group(1))
        m = re.match(r"MFU ([0-9.]+)%", line)
        if m:
            r["mfu"] = float(m.group(1)) / 100
        m = re.match(r"(attn|attn\.bwd)\s+([0-9.]+)\s", line)
        if m:
            r[m.group(1)] = float(m.group(2))
        m = re.match(r"attention kernels: ([\w-]+)", line)
        if m:
            r["kernels"] = m.group(1)
    return r


def clock_line(path, busy_w=450.0):
    """The SM clock while the GPU drew more than busy_w watts, from run.sh's nvidia-smi
    samples (columns found by their names: clocks.sm, power.draw and, where present,
    power.limit); None without them."""
    if not os.path.exists(path):
        return None
    rows = list(csv.reader(open(path)))
    if not rows:
        return None
    head = [h.strip() for h in rows[0]]
    col = {k: next((i for i, h in enumerate(head) if h.startswith(k)), None)
           for k in ("clocks.current.sm", "power.draw", "power.limit")}
    if col["clocks.current.sm"] is None or col["power.draw"] is None:
        return None
    mhz, watts, limit = [], [], None
    for row in rows[1:]:
        try:
            f = float(row[col["clocks.current.sm"]].split()[0])
            w = float(row[col["power.draw"]].split()[0])
            if col["power.limit"] is not None:
                limit = float(row[col["power.limit"]].split()[0])
        except (IndexError, ValueError):
            continue   # a sample nvidia-smi could not take
        if w > busy_w:
            mhz.append(f)
            watts.append(w)
    if not mhz:
        return None
    mhz.sort()
    of = f" of a {limit:.0f} W limit" if limit else ""
    return (f"SM clock while the GPU drew more than {busy_w:.0f} W ({len(mhz)} samples): "
            f"median {mhz[len(mhz) // 2]:.0f} MHz (min {mhz[0]:.0f}, max {mhz[-1]:.0f}); "
            f"power up to {max(watts):.0f} W{of}")


def table(a):
    d = a.table
    torch_rows = read_csv(os.path.join(d, "torch.csv"))
    print(f"one GPT layer (h {a.hidden}, {a.heads} heads, ffn {a.ffn}), forward + backward, "
          f"median ms; MFU = model FLOPs (MEMO 5.1) / median / {a.peak / 1e12:.1f} TFLOP/s")
    print(f"{'tokens':>7} {'memsim':>10} {'MFU':>6} {'eager':>10} {'MFU':>6} {'compile':>10} "
          f"{'MFU':>6} {'eager/memsim':>12} {'compile/memsim':>14}  memsim kernels")
    for f in sorted(glob.glob(os.path.join(d, "memsim_*.log")),
                    key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0])):
        tok = int(re.findall(r"\d+", os.path.basename(f))[0])
        kind = os.path.basename(f)[len("memsim_"):].split(".")[0].split("_")
        if len(kind) > 1:   # the other kernel sets, for the attention lines
            continue
        m = read_memsim(f)
        if "median" not in m:
            print(f"{tok:>7} {'failed':>10}")
            continue
        e = torch_rows.get(("torch_eager", tok))
        c = torch_rows.get(("torch_compile", tok))

        def cell(x):
            return f"{x[0]:>10.2f} {100 * x[1]:>5.1f}%" if x else f"{'-':>10} {'-':>6}"

        def ratio(x):
            return f"{x[0] / m['median']:.3f}" if x else "-"
        print(f"{tok:>7} {m['median']:>10.2f} {100 * m['mfu']:>5.1f}% {cell(e)} {cell(c)} "
              f"{ratio(e):>12} {ratio(c):>14}  {m.get('kernels', '?')}")
    sd = {k: v for k, v in torch_rows.items() if k[0].startswith("sdpa_")}
    if sd:
        s = next(iter(sd))[1]
        mm = {}
        for f in glob.glob(os.path.join(d, f"memsim_{s}*.log")):
            r = read_memsim(f)
            if "attn" in r:
                mm[r.get("kernels", "?")] = r
        fl = 2.0 * s * s * a.hidden
        print(f"\nattention alone at {s} tokens (batch 1, {a.heads} heads of "
              f"{a.hidden // a.heads}), ms and TFLOP/s (forward 2 s^2 h causal, backward 2.5x)")
        for name in ("flash", "default"):
            fw, bw = sd.get((f"sdpa_{name}_fwd", s)), sd.get((f"sdpa_{name}_bwd", s))
            if fw and bw:
                print(f"  PyTorch SDPA {name:<8} forward {fw[0]:8.3f} ({fl / fw[0] / 1e9:6.1f})"
                      f"  backward {bw[0]:8.3f} ({2.5 * fl / bw[0] / 1e9:6.1f})")
        fw, bw = sd.get(("sdpa_flash_fwd", s)), sd.get(("sdpa_flash_bwd", s))
        for k, r in sorted(mm.items()):
            line = (f"  memsim {k:<14} forward {r['attn']:8.3f} ({fl / r['attn'] / 1e9:6.1f})"
                    f"  backward {r['attn.bwd']:8.3f} ({2.5 * fl / r['attn.bwd'] / 1e9:6.1f})")
            if fw and bw:
                line += (f"   x flash: forward {fw[0] / r['attn']:.3f}, backward "
                         f"{bw[0] / r['attn.bwd']:.3f}")
            print(line)
    cl = clock_line(os.path.join(d, "smi.csv"))
    if cl:
        print("\n" + cl)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=16384)
    ap.add_argument("--seq", type=int, action="append", default=[],
                    help="tokens (batch 1); repeatable")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--sdpa", type=int, default=0, help="attention alone at this sequence")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--warmup-long", type=int, default=1, help="at 64K tokens and more")
    ap.add_argument("--reps-long", type=int, default=5)
    ap.add_argument("--peak", type=float, default=989.4e12, help="dense bf16 peak, FLOP/s")
    ap.add_argument("--table", metavar="DIR", help="print the table from run.sh's files")
    a = ap.parse_args()
    if a.table:
        return table(a)
    if not a.seq and not a.sdpa:
        ap.error("nothing to measure: give --seq or --sdpa")
    return measure(a)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""probe_eager.py — measures what PyTorch eager costs the host and what its elementwise
kernels reach on the GPU, the two rates behind a step time that the op-time model does not
see from FLOPs and bytes alone. Ground truth for experiments/realworld (the machine profile's
host-dispatch and per-kind memory-efficiency lines are read off its output; nothing here is
fitted to a step time).

Seven parts, one JSON object on stdout (and --out):
  host:  host microseconds per call of common aten ops on tiny CUDA tensors (the GPU is idle,
         so the loop's wall time is the host's: Python + dispatcher + launch), median of 5
         loops of 2,000 calls after a warm-up; `autograd` is per backward node of a chain of
         small ops; `foreach_per_tensor` the extra cost of one more tensor in a _foreach_ op.
  bw:    achieved bytes per second of memory-bound kernels on large tensors (bytes = every
         tensor read and written once), CUDA events over 20 calls after warm-up, beside the
         device's nominal bandwidth (--peak-gbs).
  sdpa:  scaled_dot_product_attention (causal, bf16) forward and backward without and with
         dropout 0.1 at a few training shapes: what the dropout path costs.
  sdpa_hd: the same without dropout at head dim 64, 128 and 256 (equal FLOPs): what the
         head dim costs (GPT-NeoX's 256, LLaMA's 128, small models' 64).
  gemm:  torch.mm in fp32 (no TF32, PyTorch's default) and bf16 at the three forms of a
         linear layer (forward x W^T, the input gradient dy W, the weight gradient dy^T x) over
         rows M = 64 .. 16384 at a few (N, K) of real models: achieved FLOP/s of each shape
         (10 calls back to back between CUDA events after warm-up), the rate the op-time model's
         GEMM ramp describes; and torch.nn.functional.grouped_mm in fp32 (the MoE experts
         under amp, PyTorch's per-group fallback) and bf16 at E groups of M/E rows.
  colsum: the column sums behind the weight gradients of norms and biases (x.sum(0) over
         [rows, width], fp32 and bf16 in, fp32 out, as RMSNorm's and LayerNorm's weight
         gradients and a bias's reduce): achieved bytes per second over rows 2K-64K and
         widths 64-8192, as a fraction of --peak-gbs (the op-time model reads them at
         gpu.mem_eff; measured nowhere yet).
  step:  for each --config given, a training step at a tiny shape (host-bound by design):
         wall time per step and the number of GPU kernels it launched (torch.profiler), so
         host microseconds per kernel of a real transformers step.
"""

import argparse
import json
import math
import statistics
import sys
import time


def host_rates(torch):
    dev = "cuda"
    a = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    b = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    f = torch.randn(64, 64, device=dev)
    idx = torch.randint(0, 64, (32,), device=dev)
    w = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    q = torch.randn(1, 4, 16, 64, device=dev, dtype=torch.bfloat16)
    tgt = torch.randint(0, 64, (64,), device=dev)
    tl = [torch.randn(64, device=dev) for _ in range(100)]
    tl2 = [torch.randn(64, device=dev) for _ in range(100)]
    F = torch.nn.functional
    ops = {
        "add": lambda: a + b,
        "mul_scalar": lambda: a * 0.5,
        "silu": lambda: F.silu(a),
        "cast_bf16_fp32": lambda: a.float(),
        "view_transpose": lambda: a.view(64, 4, 16).transpose(0, 1),
        "contiguous": lambda: a.t().contiguous(),
        "mm": lambda: a @ b,
        "linear": lambda: F.linear(a, w),
        "softmax": lambda: torch.softmax(f, -1),
        "rmsnorm_hf": lambda: (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * a,
        "topk": lambda: torch.topk(f, 2, dim=-1),
        "index_select": lambda: a.index_select(0, idx),
        "cat": lambda: torch.cat([a, b], 0),
        "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "embedding": lambda: F.embedding(idx, w),
        "cross_entropy": lambda: F.cross_entropy(f, tgt),
        "nonzero_sync": lambda: torch.nonzero(idx),
        "foreach_add_100": lambda: torch._foreach_add_(tl, tl2),
        "foreach_add_1": lambda: torch._foreach_add_(tl[:1], tl2[:1]),
    }
    out = {}
    for name, fn in ops.items():
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        laps = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            laps.append((t1 - t0) / 2000 * 1e6)
        out[name] = round(statistics.median(laps), 3)
    out["foreach_per_tensor"] = round((out["foreach_add_100"] - out["foreach_add_1"]) / 99, 4)
    # autograd: per backward node of a chain of 200 small ops
    x = torch.randn(64, 64, device=dev, requires_grad=True)
    laps = []
    for r in range(8):
        y = x
        for _ in range(200):
            y = y * 1.0001
        s = y.sum()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        s.backward()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        if r >= 3:
            laps.append((t1 - t0) / 201 * 1e6)
    out["autograd_node"] = round(statistics.median(laps), 3)
    return out


def bw_rates(torch, mib):
    dev = "cuda"
    n = mib * 2**20 // 4  # fp32 elements of the reference size
    F = torch.nn.functional
    x32 = torch.randn(n, device=dev)
    y32 = torch.randn(n, device=dev)
    x16 = x32.to(torch.bfloat16)
    y16 = y32.to(torch.bfloat16)
    h = 2048
    m16 = x16.view(-1, h)
    m32 = x32.view(-1, h)
    w16 = torch.randn(h, device=dev, dtype=torch.bfloat16)
    k = 64
    lst = list(x32.chunk(k))
    lst2 = list(y32.chunk(k))
    lst3 = [t.clone() for t in lst]
    b16, b32 = n * 2, n * 4
    col32 = torch.randn(m32.shape[0], 1, device=dev)
    col16 = col32.to(torch.bfloat16)
    e16 = x16.view(-1, 8, h // 8)                      # tokens x experts x width
    emask = torch.rand(e16.shape[0], 8, 1, device=dev) < 0.25
    r16 = x16.view(2, 16, -1, 128)                     # batch x heads x seq x head_dim
    cos16 = torch.randn(2, 1, r16.shape[2], 128, device=dev, dtype=torch.bfloat16)
    t16 = x16.view(2, -1, 16, 128)                     # batch x seq x heads x head_dim

    def rms(v):  # transformers' LlamaRMSNorm under bf16: fp32 upcast, pow, mean, rsqrt, mul
        t = v.float()
        t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)
        return w16 * t.to(torch.bfloat16)
    cases = {  # name: (fn, bytes moved by the kernel(s) as the op-time model counts them)
        "copy_bf16": (lambda: x16.clone(), 2 * b16),
        "add_bf16": (lambda: x16 + y16, 3 * b16),
        "add_fp32": (lambda: x32 + y32, 3 * b32),
        "mul_scalar_fp32": (lambda: x32 * 0.5, 2 * b32),
        "cast_fp32_bf16": (lambda: x32.to(torch.bfloat16), b32 + b16),
        "cast_bf16_fp32": (lambda: x16.float(), b16 + b32),
        "silu_bf16": (lambda: F.silu(x16), 2 * b16),
        "swiglu_bf16": (lambda: F.silu(x16) * y16, 5 * b16),
        "gelu_tanh_bf16": (lambda: F.gelu(x16, approximate="tanh"), 2 * b16),
        "rmsnorm_hf_bf16": (lambda: rms(m16), 2 * b16),
        "layernorm_bf16": (lambda: F.layer_norm(m16, (h,)), 2 * b16),
        "softmax_fp32": (lambda: torch.softmax(m32, -1), 2 * b32),
        "sum_fp32": (lambda: x32.sum(), b32),
        "dropout_bf16": (lambda: F.dropout(x16, 0.1), 2 * b16 + n),
        "foreach_mul_fp32": (lambda: torch._foreach_mul_(lst, 0.999), 2 * b32),
        "foreach_addcmul_fp32": (lambda: torch._foreach_addcmul_(lst, lst2, lst3, value=0.1), 4 * b32),
        "foreach_lerp_fp32": (lambda: torch._foreach_lerp_(lst, lst2, 0.1), 3 * b32),
        "foreach_sqrt_fp32": (lambda: torch._foreach_sqrt(lst), 2 * b32),
        # broadcast operands: PyTorch's TensorIterator takes its non-vectorized path
        # (elementwise_kernel with an offset calculator) when an input has a zero stride
        "bcast_mul_row_bf16": (lambda: w16 * m16, 2 * b16),
        "bcast_mul_col_fp32": (lambda: m32 * col32, 2 * b32),
        "bcast_mul_col_bf16": (lambda: m16 * col16, 2 * b16),
        "bcast_masked_fill_bf16": (lambda: e16.masked_fill(emask, 0.0), 2 * b16 + n // 8),
        "bcast_rope_mul_bf16": (lambda: r16 * cos16, 2 * b16),
        "mixed_mul_fp32_bf16": (lambda: x32 * y16, b32 + b16 + b32),
        "transpose_copy_bf16": (lambda: t16.transpose(1, 2).contiguous(), 2 * b16),
    }
    out = {}
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for name, (fn, nbytes) in cases.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ev0.record()
        for _ in range(20):
            fn()
        ev1.record()
        torch.cuda.synchronize()
        us = ev0.elapsed_time(ev1) * 1000 / 20
        out[name] = {"us": round(us, 2), "bytes": nbytes, "gbs": round(nbytes / us / 1e3, 1)}
    return out


SDPA_SHAPES = ((8, 16, 1024, 64), (2, 16, 4096, 64), (2, 25, 8192, 64), (4, 32, 2048, 128),
               (1, 32, 8192, 128))


def _fwd_bwd_us(torch, fwd):
    """Microseconds of one call of fwd() and of its backward alone: 3 warm-up rounds, then
    10 forwards and 10 forward + backward rounds between CUDA events."""
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g = torch.randn_like(fwd())
    for _ in range(3):
        fwd().backward(g)
    torch.cuda.synchronize()
    ev0.record()
    for _ in range(10):
        fwd()
    ev1.record()
    torch.cuda.synchronize()
    f_us = ev0.elapsed_time(ev1) * 100
    ev0.record()
    for _ in range(10):
        fwd().backward(g)
    ev1.record()
    torch.cuda.synchronize()
    return {"fwd_us": round(f_us, 1), "bwd_us": round(ev0.elapsed_time(ev1) * 100 - f_us, 1)}


def _qkv(torch, b, h, s, d):
    return tuple(torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16,
                             requires_grad=True) for _ in range(3))


def sdpa_rates(torch):
    """SDPA (causal, bf16, the backend PyTorch picks) forward and backward times without and
    with dropout 0.1 at a few training shapes: the cost of the dropout path."""
    F = torch.nn.functional
    out = {}
    for b, h, s, d in SDPA_SHAPES:
        q, k, v = _qkv(torch, b, h, s, d)
        row = {}
        for p in (0.0, 0.1):
            row["p%.1f" % p] = _fwd_bwd_us(torch, lambda: F.scaled_dot_product_attention(
                q, k, v, dropout_p=p, is_causal=True))
        row["fwd_ratio"] = round(row["p0.0"]["fwd_us"] / row["p0.1"]["fwd_us"], 4)
        row["bwd_ratio"] = round(row["p0.0"]["bwd_us"] / row["p0.1"]["bwd_us"], 4)
        out["%dx%dx%dx%d" % (b, h, s, d)] = row
        del q, k, v
    return out


def sdpa_hd_rates(torch):
    """SDPA (causal, bf16, no dropout) forward and backward at head dim 64, 128 and 256 with
    the width heads x dim fixed at 2048 (so the FLOPs are the same at each dim), batch 2,
    2K-16K tokens: the time at 128 over the time at 64 or 256 is that dim's efficiency
    relative to 128."""
    F = torch.nn.functional
    out = {}
    for s in (2048, 4096, 8192, 16384):
        row = {}
        for d in (64, 128, 256):
            q, k, v = _qkv(torch, 2, 2048 // d, s, d)
            row["d%d" % d] = _fwd_bwd_us(torch, lambda: F.scaled_dot_product_attention(
                q, k, v, is_causal=True))
            del q, k, v
        for d in (64, 256):
            for ph in ("fwd", "bwd"):
                row["hd%d_%s" % (d, ph)] = round(row["d128"][ph + "_us"] /
                                                 row["d%d" % d][ph + "_us"], 4)
        out["s%d" % s] = row
    return out


GEMM_NK = ((1536, 2048), (2048, 768), (4096, 4096), (14336, 4096), (50257, 1280))
GEMM_M = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def _event_us(torch, fn, reps=10):
    """Microseconds of one fn() call on the GPU: 2 warm-up calls, then reps calls back to back
    between one pair of CUDA events, the elapsed time over reps. (Events around each single
    call would also time the host's dispatch of it, which the GPU waits for: about 20 us of
    torch.mm's on the H200, a third of a 256-row fp32 GEMM; the probe of 2026-12-02,
    probes/h200-gemm.json, was taken that way.)"""
    for _ in range(2):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1000.0 / reps


def gemm_rates(torch):
    """Achieved FLOP/s of torch.mm per (dtype, form, M, N, K), and of grouped_mm."""
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for dt, dn in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for n, k in GEMM_NK:
            w = torch.randn(n, k, device="cuda", dtype=dt)
            for m in GEMM_M:
                x = torch.randn(m, k, device="cuda", dtype=dt)
                dy = torch.randn(m, n, device="cuda", dtype=dt)
                forms = (("fwd", lambda: torch.mm(x, w.t())), ("dgrad", lambda: torch.mm(dy, w)),
                         ("wgrad", lambda: torch.mm(dy.t(), x)))
                for form, fn in forms:
                    us = _event_us(torch, fn)
                    fl = 2.0 * m * n * k
                    rows.append({"dtype": dn, "form": form, "m": m, "n": n, "k": k,
                                 "us": round(us, 2), "tflops": round(fl / us * 1e-6, 2)})
                del x, dy
            del w
    grouped = []
    gm = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    if gm is not None:
        for dt, dn in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            for e, n, k, m in ((128, 1536, 2048, 32768), (128, 2048, 768, 32768),
                               (8, 14336, 4096, 16384), (64, 1536, 2048, 8192)):
                x = torch.randn(m, k, device="cuda", dtype=dt)
                w = torch.randn(e, k, n, device="cuda", dtype=dt)
                offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * (m // e)
                try:
                    us = _event_us(torch, lambda: gm(x, w, offs=offs), reps=5)
                    grouped.append({"dtype": dn, "e": e, "m": m, "n": n, "k": k,
                                    "us": round(us, 2),
                                    "tflops": round(2.0 * m * n * k / us * 1e-6, 2)})
                except Exception as ex:    # a dtype or shape this build does not run
                    grouped.append({"dtype": dn, "e": e, "m": m, "n": n, "k": k,
                                    "error": str(ex).split("\n")[0][:200]})
                del x, w
    return {"mm": rows, "grouped": grouped}



def colsum_rates(torch, peak_gbs):
    """Achieved read bandwidth of x.sum(0) (the weight-gradient column sums), per dtype, rows
    and width: bytes read once over the median time of 10 calls between CUDA events."""
    rows_out = []
    for dt, dn in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for width in (64, 128, 1024, 2048, 3072, 4096, 8192):
            for rows in (2048, 8192, 16384, 65536):
                x = torch.randn(rows, width, device="cuda", dtype=dt)
                us = _event_us(torch, lambda: x.sum(0, dtype=torch.float32))
                gbs = x.numel() * x.element_size() / us * 1e-3
                rows_out.append({"dtype": dn, "rows": rows, "width": width, "us": round(us, 2),
                                 "gbs": round(gbs, 1),
                                 "of_peak": round(gbs / peak_gbs, 4) if peak_gbs else None})
                del x
    return rows_out


def step_rates(torch, configs, seq, batch):
    from transformers import AutoConfig, AutoModelForCausalLM
    from torch.profiler import profile, ProfilerActivity
    out = {}
    for path in configs:
        cfg = AutoConfig.from_pretrained(path)
        cfg.use_cache = False
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                     dtype=torch.bfloat16)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")

        def step():
            loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        laps = []
        for _ in range(5):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            laps.append(time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            step()
            torch.cuda.synchronize()
        kernels = 0
        gpu_us = 0.0
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kernels += 1
                gpu_us += e.device_time
        wall = statistics.median(laps)
        out[path.rsplit("/", 1)[-1]] = {
            "seq": seq, "batch": batch, "step_us": round(wall * 1e6, 1), "kernels": kernels,
            "gpu_busy_us": round(gpu_us, 1),
            "host_us_per_kernel": round(wall * 1e6 / max(kernels, 1), 3)}
        del model, opt
        torch.cuda.empty_cache()
    return out


NV_CASES = ("bcast_mul_row_bf16", "bcast_mul_col_fp32", "bcast_mul_col_bf16",
            "bcast_masked_fill_bf16", "bcast_rope_mul_bf16", "mixed_mul_fp32_bf16",
            "transpose_copy_bf16", "cast_bf16_fp32")


def median(v):
    v = sorted(v)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def fp32_gemm_fit(mm, peak):
    """Least squares in log rate of eff * F / (F + half) * peak over the fp32 mm rows (F the
    FLOPs): a grid over eff 0.30-0.99 and half 1e7-1e11 FLOPs, refined once around the best.
    Returns (eff, half, rms log error, n)."""
    pts = [(2.0 * r["m"] * r["n"] * r["k"], r["tflops"] * 1e12) for r in mm
           if r["dtype"] == "fp32" and r["tflops"] > 0]
    if not pts:
        return None

    def err(e, h):
        return sum(math.log(r / (peak * e * f / (f + h))) ** 2 for f, r in pts)
    best = None
    for e in (0.30 + 0.01 * i for i in range(70)):
        for lh in (7.0 + 0.02 * i for i in range(201)):
            v = err(e, 10 ** lh)
            if best is None or v < best[0]:
                best = (v, e, lh)
    _, e0, lh0 = best
    for e in (e0 - 0.01 + 0.0005 * i for i in range(41)):
        for lh in (lh0 - 0.02 + 0.001 * i for i in range(41)):
            v = err(e, 10 ** lh)
            if v < best[0]:
                best = (v, e, lh)
    v, e, lh = best
    return e, 10 ** lh, math.sqrt(v / len(pts)), len(pts)


def machine_lines(res, mib, peak_fp32=67e12):
    """The profile lines read off a probe: the median element rate of the kernels PyTorch runs
    on its non-vectorized element-wise path (one output element per input element); the
    median ratios of SDPA's time without dropout over with it."""
    lines = []
    if "sdpa" in res:
        for d in ("fwd", "bwd"):
            r = [v["%s_ratio" % d] for v in res["sdpa"].values()]
            lines.append("gpu.sdpa_dropout_%s  %.4f  # %s, PyTorch %s: SDPA %s time without "
                         "dropout over with dropout 0.1, median of %d causal bf16 shapes "
                         "(%.3f-%.3f), experiments/realworld/probe_eager.py --only sdpa" % (
                             d, median(r), res.get("device", "?"), res.get("torch", "?"),
                             "forward" if d == "fwd" else "backward", len(r), min(r), max(r)))
    if "sdpa_hd" in res:
        for ph in ("fwd", "bwd"):
            r = [v["hd256_%s" % ph] for v in res["sdpa_hd"].values()]
            lines.append("gpu.sdpa_hd256_%s  %.4f  # %s, PyTorch %s: SDPA %s time at head dim "
                         "128 over 256 (width 2048, causal bf16, batch 2), median of 2K-16K "
                         "tokens (%.3f-%.3f), experiments/realworld/probe_eager.py --only "
                         "sdpa_hd" % (ph, median(r), res.get("device", "?"),
                                      res.get("torch", "?"),
                                      "forward" if ph == "fwd" else "backward", min(r), max(r)))
    fit = fp32_gemm_fit(res["gemm"]["mm"], peak_fp32) if "gemm" in res else None
    if fit:
        e, h, rms, npts = fit
        src = "%s, PyTorch %s: torch.mm fp32 (no TF32), %d shapes (M 64-16384 rows, forward, " \
              "input and weight gradient forms), eff * F / (F + half) of gpu.peak_fp32_flops " \
              "fitted in log rate (rms %.3f), experiments/realworld/probe_eager.py --only gemm" % (
                  res.get("device", "?"), res.get("torch", "?"), npts, rms)
        lines.append("gpu.fp32_gemm_eff  %.4f  # %s" % (e, src))
        lines.append("gpu.fp32_gemm_half_flops  %.4g  # the same fit" % h)
    if "bw" not in res:
        return "\n".join(lines)
    n = mib * 2**20 // 4
    rates = sorted(n / (res["bw"][k]["us"] * 1e-6) for k in NV_CASES if k in res["bw"])
    # (one sorted list: its ends are printed)
    if not rates:
        return "\n".join(lines)
    med = median(rates)
    return "\n".join(lines + ["gpu.ew_nv_elems_per_s  %.4g  # %s, PyTorch %s: median element rate of %d "
            "non-vectorized element-wise kernels (%s; %.3g-%.3g) on %d M elements, "
            "experiments/realworld/probe_eager.py" % (
                med, res.get("device", "?"), res.get("torch", "?"), len(rates),
                ", ".join(k for k in NV_CASES if k in res["bw"]), rates[0], rates[-1],
                n // 1000000)])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=256, help="reference tensor size (fp32 MiB)")
    p.add_argument("--config", action="append", default=[], help="config.json for the step part")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--out", default="")
    p.add_argument("--only", choices=["all", "sdpa", "sdpa_hd", "gemm", "colsum"], default="all")
    p.add_argument("--peak-gbs", type=float, default=4225.2,
                   help="the profile's gpu.hbm_Bps in GB/s, for the colsum part's fractions "
                        "(default: h200-sxm's 4225.2)")
    p.add_argument("--peak-fp32", type=float, default=67e12,
                   help="the profile's gpu.peak_fp32_flops, for the fp32 GEMM fit (default: "
                        "H200 SXM's 67e12)")
    p.add_argument("--machine-lines", default="", metavar="JSON",
                   help="print the machine-profile line of a saved probe and exit")
    a = p.parse_args()
    if a.machine_lines:
        with open(a.machine_lines) as fh:
            print(machine_lines(json.load(fh), a.mib, a.peak_fp32))
        return
    import torch
    if not torch.cuda.is_available():
        sys.exit("probe_eager.py: no CUDA device")
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    if a.only == "all":
        res["host"] = host_rates(torch)
        res["bw"] = bw_rates(torch, a.mib)
    if a.only in ("all", "sdpa"):
        res["sdpa"] = sdpa_rates(torch)
    if a.only in ("all", "sdpa_hd"):
        res["sdpa_hd"] = sdpa_hd_rates(torch)
    if a.only in ("all", "gemm"):
        res["gemm"] = gemm_rates(torch)
    if a.only in ("all", "colsum"):
        res["colsum"] = colsum_rates(torch, a.peak_gbs)
    if a.config:
        res["step"] = step_rates(torch, a.config, a.seq, a.batch)
    try:
        import transformers
        res["transformers"] = transformers.__version__
    except ImportError:
        pass
    text = json.dumps(res, indent=1, sort_keys=True)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

"""hf_probe.py — how long the GPU computes one training step of the Hugging Face models of
MemFerry's Fig. 9, measured, to set beside memsim's op-time model (traces/roofline.h) for the
same workloads: `experiments/memferry/run.sh` prints the two side by side.

For each model at Fig. 9's batch (fp16 weights, as DeepSpeed's fp16 mode runs them; random
tokens; training mode, so dropout runs) the forward and backward of one step are profiled with
torch.profiler and every CUDA kernel's duration is summed, by kind: GEMM (cuBLAS / CUTLASS),
attention (the fused SDPA kernels, or the eager softmax path's matmuls counted as GEMMs),
and the rest (element-wise, normalization, dropout, embedding, loss, reductions). The sum is
the GPU's busy time, whether or not the Python host keeps up; the step's wall time (CUDA
events, the median of --reps) is written beside it.

usage: python3 hf_probe.py [--models a,b] [--attn sdpa|eager] [--batch N] [--reps N] --out DIR
       python3 hf_probe.py --gemm-align [--reps N] --out DIR   (gemm-align.csv: an LM head's
       fp16 GEMMs with the vocabulary a multiple of 8, 4 or 2 elements, or odd)
(models: bert-base, roberta-base, bert-large, gpt2-medium, and ProTrain's gpt2-1b at 2 sequences
per GPU, its Table 4 batch 8 on 4 GPUs) writes DIR/hf-ATTN[-MODELS][-bN].csv (MODELS when not
the default four): model,batch,seq,attn,params,gpu_ms,gemm_ms,attn_ms,other_ms,kernels,
wall_ms. Needs PyTorch with CUDA and transformers; no network (models built from configs).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dha_common import emit, timed_ms  # noqa: E402
from go_probe import SHAPES, build  # noqa: E402

GEMM_KEYS = ("gemm", "cutlass", "xmma", "cublas", "s16816", "s1688", "wgmma", "sm90_", "sm80_")
ATTN_KEYS = ("flash", "fmha", "attention", "mem_eff", "cudnn_generated_fort_native_sdpa")


def kind(name):
    n = name.lower()
    if any(k in n for k in ATTN_KEYS):
        return "attn"
    if any(k in n for k in GEMM_KEYS):
        return "gemm"
    return "other"


def profile_step(step):
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    sums = {"gemm": 0.0, "attn": 0.0, "other": 0.0}
    count = 0
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        dur = getattr(ev, "device_time", None)
        if dur is None:
            dur = ev.cuda_time
        if "memcpy" in ev.name.lower() or "memset" in ev.name.lower():
            sums["other"] += dur / 1e3
        else:
            sums[kind(ev.name)] += dur / 1e3
        count += 1
    return sums, count


# ProTrain's GPT2-1B (traces/models.c gpt2-1b: 32 blocks, hidden 1536, 16 heads) per GPU
EXTRA = {"gpt2-1b": (1024, 2)}


def build_any(name):
    if name in EXTRA:
        import transformers as tf
        cfg = tf.GPT2Config(n_embd=1536, n_layer=32, n_head=16)
        return tf.GPT2LMHeadModel(cfg), 50257
    return build(name)


def run(name, attn, reps, batch_arg):
    import transformers as tf  # noqa: F401 (build imports it)
    model, vocab = build_any(name)
    seq, batch = SHAPES[name] if name in SHAPES else EXTRA[name]
    batch = batch_arg or batch
    if hasattr(model.config, "_attn_implementation"):
        model.config._attn_implementation = attn
    model = model.half().cuda().train()
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")

    def step():
        model.zero_grad(set_to_none=False)
        model(input_ids=ids, labels=ids).loss.backward()

    sums, count = profile_step(step)
    wall = timed_ms(step, reps)
    params = sum(p.numel() for p in model.parameters())
    gpu = sum(sums.values())
    del model
    torch.cuda.empty_cache()
    return (f"{name},{batch},{seq},{attn},{params},{gpu:.3f},{sums['gemm']:.3f},"
            f"{sums['attn']:.3f},{sums['other']:.3f},{count},{wall:.3f}")


def gemm_align(out, reps):
    """fp16 GEMMs of a language-model head, [T, h] x [h, V]^T and its two backward products,
    with V's alignment varied (a multiple of 8 elements, of 4, of 2, odd): each one's time
    against the same product at the next multiple of 64, per FLOP."""
    from dha_common import per_call_ms
    rows = ["T,h,V,align,fwd_ms,dgrad_ms,wgrad_ms,rate_vs_aligned"]
    for T, h in ((4096, 768), (4096, 1024), (32768, 1024), (2048, 1536), (16384, 1536)):
        x = torch.randn(T, h, device="cuda", dtype=torch.float16)
        ref = None
        for V in (50304, 50264, 50260, 50258, 50257, 30528, 30524, 30522, 30521):
            w = torch.randn(V, h, device="cuda", dtype=torch.float16)
            dy = torch.randn(T, V, device="cuda", dtype=torch.float16)
            f = per_call_ms(lambda: torch.matmul(x, w.t()), reps, 5)
            d = per_call_ms(lambda: torch.matmul(dy, w), reps, 5)
            g = per_call_ms(lambda: torch.matmul(dy.t(), x), reps, 5)
            al = 8 if V % 8 == 0 else 4 if V % 4 == 0 else 2 if V % 2 == 0 else 1
            tot = f + d + g
            if V in (50304, 30528):
                ref = tot / V
            rows.append(f"{T},{h},{V},{al},{f:.4f},{d:.4f},{g:.4f},{ref * V / tot:.3f}")
            del w, dy
        del x
        torch.cuda.empty_cache()
    emit(out, "gemm-align.csv", rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="bert-base,roberta-base,bert-large,gpt2-medium")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=0, help="override every model's batch")
    ap.add_argument("--gemm-align", action="store_true",
                    help="only the GEMM alignment sweep (gemm-align.csv)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("hf_probe.py: no CUDA device")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    if a.gemm_align:
        gemm_align(a.out, a.reps)
        return
    rows = ["model,batch,seq,attn,params,gpu_ms,gemm_ms,attn_ms,other_ms,kernels,wall_ms"]
    for name in a.models.split(","):
        rows.append(run(name, a.attn, a.reps, a.batch))
    default = ap.get_default("models")
    tag = "" if a.models == default else "-" + a.models.replace(",", "+")
    emit(a.out, f"hf-{a.attn}{tag}{'-b%d' % a.batch if a.batch else ''}.csv", rows)


if __name__ == "__main__":
    main()

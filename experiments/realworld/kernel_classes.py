#!/usr/bin/env python3
"""kernel_classes.py — where memsim's op-time model is short or long, at the level of
kernels: one real training step's GPU kernels (h200/CASE.kernels.csv, written by hf_run.py
--profile: every kernel's name, count and total time) grouped into classes, beside the sum of
memsim's modelled op durations of the same classes for the same step (`memsim simulate ...
--iters 1 --timeline`, every compute and recompute span; each op's kind from `memsim trace
gen` of the same workload, joined by op id).

The classes follow what the kernels are, not the module that launched them: an RMSNorm is
PyTorch's casts, multiplies and a mean (element-wise, copies, reductions), a LayerNorm its
fused kernels (norm). memsim's ops are put in the same classes by their kind and name
(OP_RULES); a real kernel by its name (KERNEL_RULES). One memsim op can stand for several
kernels (a foreach AdamW op is one launch group, a linear layer's backward both its GEMMs):
the counts are printed beside the times, the times are what is compared.

memsim's durations include gpu.kernel_launch_us per op (the profile's 1.1 us kernel plus the
GPU's 2.2 us idle between kernels); the measured ones are kernel time only, and the step's
other time (the GPU idle between kernels, host-bound stretches) is the last row.

Usage: kernel_classes.py [--memsim PATH] [CASE ...]   (default: the three cases below)
Runs anywhere with python3 and a memsim build (default: the build's sim/memsim); no GPU.
Same inputs, same output.
"""

import csv
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CASES = ("py-amp-8k-b8", "q3-amp-2k-b8", "phi3-bf16-ck-8k-b1")

# (class, regex on the kernel name), first match wins. GEMMs: cuBLAS's nvjet / cutlass
# tensor-core kernels are bf16 in these runs; fp32 GEMMs (no TF32) run as sgemm / FFMA.
KERNEL_RULES = [
    ("gemm fp32", r"sgemm|_ffma_|gemm_f32|gemmSN_|splitKreduce_kernel<32, 16, int, float, float"),
    ("gemm bf16", r"^nvjet|cutlass.*gemm|gemm_bf16|xmma_gemm|cublasLt|splitKreduce"),
    ("attn fwd", r"sdpa.*fprop|flash_fwd|fmha.*fwd|flash_fprop|philox::unpack_cudnn"),
    # cuDNN's backward: the main kernel, its dO.O and dQ-conversion kernels, and with grouped
    # KV heads the reduction of dK / dV over each group's query heads
    ("attn bwd", r"sdpa.*bprop|flash_bwd|fmha.*bwd|compute_dot_do_o|convert_dq_to_16bits|"
                 r"fmha_reduce_head"),
    ("adamw", r"multi_tensor_apply_kernel|fused_adam"),
    ("loss", r"SoftMax|softmax|nll_loss"),
    ("embedding", r"embedding|compute_grad_weight|sum_and_scatter|krn_partial|"
                  r"compute_num_of_partial_segments|radix_sort|RadixSort|unique_by_key|"
                  r"DeviceScan|DeviceCompact|scan_innermost|vectorized_gather|indexSelect"),
    ("norm", r"layer_norm|GammaBeta|rms_norm|RowwiseMoments"),
    ("reduce", r"reduce_kernel"),
    ("memset/fill", r"^Memset|FillFunctor"),
    ("copy/cast", r"direct_copy|_copy_kernel|CatArray|^Memcpy|copy_kernel"),
    ("elementwise", r"elementwise|Functor|kernel"),
]

# memsim's ops: (class, op kind or None for any, regex on the op name without its layer
# prefix), first match wins. The names are the hf generator's (traces/gen_hf*.c).
OP_RULES = [
    ("gemm fp32", "gemm", r"^rope\.freqs$|experts"),  # fp32 under autocast / amp experts
    ("gemm bf16", "gemm", r""),
    ("attn fwd", "attn", r"^(?!.*\.bwd$)"),
    ("attn bwd", "attn", r"\.bwd$"),
    ("attn bwd", None, r"^sdpa\.bwd\."),  # cuDNN's GQA reduction of dK / dV over heads
    ("adamw", "optim", r""),
    ("loss", "loss", r""),
    ("embedding", "embed", r""),
    ("embedding", None, r"^embed_bwd\.(?!zero)"),
    ("memset/fill", None, r"\.zero$|zero_"),
    ("reduce", None, r"\.mean$|bias_bwd|bwd_rs_sum$|^norm\.wgrad$"),
    ("copy/cast", None, r"cast|\.to_fp32$|\.to_in$|\.bwd_up$|\.bwd_down$|contiguous|cat$|"
                        r"^logits\.float|\.view\.bwd$|split\.bwd$|\.to$|slice\.bwd$|"
                        r"rope_bwd_rot$|\.float$"),
    ("norm", "norm", r"layernorm|layer_norm|ln_f|ln_\d|final_layer_norm|LayerNorm"),
    ("elementwise", None, r""),
]

ORDER = ["gemm bf16", "gemm fp32", "attn fwd", "attn bwd", "norm", "elementwise", "copy/cast",
         "reduce", "memset/fill", "adamw", "embedding", "loss", "other"]


def kernel_class(name):
    for cls, rx in KERNEL_RULES:
        if re.search(rx, name):
            return cls
    return "other"


def op_class(kind, name):
    base = re.sub(r"^L\d+\.", "", name)
    for cls, k, rx in OP_RULES:
        if k is not None and k != kind:
            continue
        if re.search(rx, base):
            return cls
    return "other"


def jget(case):
    with open(os.path.join(HERE, "h200", case + ".json")) as f:
        return json.load(f)


def measured(case):
    """{class: [count, us]} of the case's kernel profile, and the kernels' total us."""
    out = {}
    total = 0.0
    with open(os.path.join(HERE, "h200", case + ".kernels.csv")) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            c = out.setdefault(kernel_class(r["kernel"]), [0, 0.0])
            c[0] += int(r["count"])
            c[1] += float(r["total_us"])
            total += float(r["total_us"])
    return out, total


def memsim_args(res):
    pol = "full-recompute" if res["ckpt"] else "keep-all"
    return ["--model-config", os.path.join(HERE, "configs", res["config"]), "--framework",
            "hf", "--precision", res["precision"], "--seq", str(res["seq"]), "--batch",
            str(res["batch"]), "--machine", "h200-sxm"], pol


def modelled(memsim, res, tmp):
    """{class: [count, us]} of memsim's compute and recompute spans of one step, the spans'
    total us and the step time memsim predicts (s)."""
    args, pol = memsim_args(res)
    tl, tr, cs = (os.path.join(tmp, n) for n in ("t.json", "t.trace", "r.csv"))
    subprocess.run([memsim, "simulate"] + args + ["--policy", pol, "--iters", "1",
                    "--timeline", tl, "--quiet"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([memsim, "simulate"] + args + ["--policy", pol, "--csv", cs, "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([memsim, "trace", "gen"] + args + ["--iters", "1", "-o", tr], check=True)
    kinds = {}
    with open(tr) as f:
        for line in f:
            if line.startswith("op "):
                p = line.split()
                kinds[int(p[1])] = p[2]
    with open(tl) as f:
        events = json.load(f)["traceEvents"]
    out = {}
    total = 0.0
    for e in events:
        if e.get("cat") not in ("compute", "recompute"):
            continue
        name = e["name"][len("recompute "):] if e["cat"] == "recompute" else e["name"]
        c = out.setdefault(op_class(kinds.get(e["args"]["op"], "other"), name), [0, 0.0])
        c[0] += 1
        c[1] += e["dur"]
        total += e["dur"]
    with open(cs) as f:
        row = next(csv.DictReader(f))
    return out, total, float(row["iter_time_s"])


def table(memsim, case):
    res = jget(case)
    meas, mtot = measured(case)
    with tempfile.TemporaryDirectory() as tmp:
        mod, ptot, pstep = modelled(memsim, res, tmp)
    step_us = res["step_s"] * 1e6
    lines = ["%s: %s, %s, seq %d, batch %d%s; measured step %.1f ms, memsim %.1f ms (%+.1f %%)"
             % (case, res["config"], res["precision"], res["seq"], res["batch"],
                ", checkpointing" if res["ckpt"] else "", step_us / 1e3, pstep * 1e3,
                (pstep * 1e6 - step_us) / step_us * 100),
             "%-12s %8s %11s %8s %11s %8s %8s %8s" % ("class", "kernels", "measured_ms", "ops",
                                                      "memsim_ms", "ratio", "diff_ms",
                                                      "%step")]
    for cls in ORDER:
        mc, mu = meas.get(cls, [0, 0.0])
        pc, pu = mod.get(cls, [0, 0.0])
        if mc == 0 and pc == 0:
            continue
        ratio = "%.3f" % (pu / mu) if mu > 0 else "-"
        lines.append("%-12s %8d %11.2f %8d %11.2f %8s %+8.2f %+7.1f%%"
                     % (cls, mc, mu / 1e3, pc, pu / 1e3, ratio, (pu - mu) / 1e3,
                        (pu - mu) / step_us * 100))
    lines.append("%-12s %8d %11.2f %8d %11.2f %8.3f %+8.2f %+7.1f%%"
                 % ("all kernels", sum(c for c, _ in meas.values()), mtot / 1e3,
                    sum(c for c, _ in mod.values()), ptot / 1e3, ptot / mtot,
                    (ptot - mtot) / 1e3, (ptot - mtot) / step_us * 100))
    lines.append("%-12s %8s %11.2f %8s %11.2f %8s %+8.2f %+7.1f%%"
                 % ("not kernels", "", (step_us - mtot) / 1e3, "", (pstep * 1e6 - ptot) / 1e3,
                    "", (pstep * 1e6 - ptot - step_us + mtot) / 1e3,
                    (pstep * 1e6 - ptot - step_us + mtot) / step_us * 100))
    return "\n".join(lines)


def main():
    argv = sys.argv[1:]
    memsim = os.path.join(ROOT, "sim", "memsim")
    if argv[:1] == ["--memsim"]:
        memsim, argv = argv[1], argv[2:]
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if not os.access(memsim, os.X_OK):
        print("kernel_classes.py: %s not found: build memsim first or pass --memsim" % memsim,
              file=sys.stderr)
        return 4
    out = []
    for case in argv or CASES:
        out.append(table(memsim, case))
    print("\n\n".join(out))
    print("\nratio: memsim / measured; diff_ms and %step: memsim - measured, in ms and as a "
          "share of the measured step. memsim's op times include gpu.kernel_launch_us; the "
          "kernels' do not (their idle gaps are in 'not kernels').")
    return 0


if __name__ == "__main__":
    sys.exit(main())

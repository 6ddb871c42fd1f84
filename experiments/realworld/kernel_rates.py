#!/usr/bin/env python3
"""kernel_rates.py — per-kernel rates read off the kernel profiles of real HF training steps
(h200/*.kernels.csv, written by hf_run.py --profile: every GPU kernel of one step, by name,
with its count and total time), at the level of single kernels, never of the whole step:

  stream    the achieved bandwidth of torch.optim.AdamW's foreach kernels, whose bytes are
            known exactly (each touches every fp32 parameter a fixed number of times), as a
            fraction of the profile's gpu.hbm_Bps: the machine profile's gpu.mem_eff
  launch    the shortest kernels' duration (memsets) and the GPU's idle time per kernel
            between kernels in a step bound by the GPU (the step's time less its kernels'
            time, over their count): PyTorch eager's cost per kernel, gpu.kernel_launch_us

  sdpa      PyTorch's fused attention: eff * S / (S + half) fitted to the profile's sdpa_*
            probe rows (traces/machines/h200-sxm.probe.csv, head dim 128, 2K-32K keys), and
            head dim 64 against 128 at 2K keys and 256 against 128 at 8K keys from the cuDNN
            SDPA kernels of the training steps (gpu.sdpa_*)

Usage: kernel_rates.py [--machine-lines] [HBM_Bps]   (default: h200-sxm's gpu.hbm_Bps,
       4225200629727.662); --machine-lines prints the machine-profile lines these give.
Runs anywhere with python3; needs no GPU.
"""

import csv
import json
import os
import statistics
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h200")

# AdamW foreach kernels of torch/optim/adamw.py's _multi_tensor_adamw (PyTorch 2.11) and the
# bytes each moves per fp32 parameter: (substring of the kernel name, bytes per parameter per
# launch group, launch groups per step).
ADAM = [
    ("BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies", 8, 2),  # param *= 1-lr*wd; v *= b2
    ("TernaryOpScalarFunctor<float, 2, 2, 0>, at::native::LerpFunctor", 12, 1),  # m.lerp_(g)
    ("PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies", 12, 1),  # v.addcmul_(g, g)
    ("UnaryOpFunctor<float, 2, 1, 1>, at::native::Sqrt", 8, 1),  # sqrt(v), out of place
    ("BinaryOpScalarListFunctor<float, 1, 1, 0>, std::divides", 8, 1),  # / bias_correction2
    ("BinaryOpScalarFunctor<float, 1, 1, 0>, std::plus", 8, 1),  # + eps
    ("PointwiseOpScalarListFunctor<float, 3, 3, 0>, std::divides", 16, 1),  # p.addcdiv_(m, d)
]


def rows(name):
    with open(os.path.join(HERE, name + ".kernels.csv")) as f:
        return list(csv.DictReader(f, delimiter="\t"))


PEAK_BF16 = 989.4e12
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "traces",
                     "machines", "h200-sxm.probe.csv")
# The training steps' attention shapes at head dim 64: case -> (batch, seq, heads, dim, layers).
SDPA64 = {"l1b-amp-2k-b4": (4, 2048, 32, 64, 16), "mx-amp-2k-b4": (4, 2048, 16, 64, 16)}
# ... and at head dim 256 (GPT-NeoX as Pythia-1B, 8K keys; the probe has an 8K row).
SDPA256 = {"py-amp-8k-b8": (8, 8192, 8, 256, 16)}


def probe_rates():
    """The probe's sdpa rows: {('fwd'|'bwd', seq): FLOP/s} at head dim 128."""
    out = {}
    with open(PROBE) as f:
        for line in f:
            if not line.startswith("sdpa_"):
                continue
            key, _, rate, _ = line.strip().split(",")
            kind = "fwd" if key.startswith("sdpa_fwd") else "bwd"
            seq = int(key.split(".s")[1].split(".")[0])
            out[(kind, seq)] = float(rate)
    return out


def fit(points):
    """eff * S / (S + half) by least squares over half in steps of 10."""
    best = None
    for half in range(0, 20001, 10):
        xs = [s / (s + half) for s, _ in points]
        ys = [y for _, y in points]
        e = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
        err = sum((e * x - y) ** 2 for x, y in zip(xs, ys))
        if best is None or err < best[0]:
            best = (err, e, half)
    return best[1], best[2]


def sdpa_lines():
    pr = probe_rates()
    lines = []
    for kind in ("fwd", "bwd"):
        pts = sorted((s, r / PEAK_BF16) for (k, s), r in pr.items() if k == kind)
        e, half = fit(pts)
        lines.append(("gpu.sdpa_%s_eff" % kind, "%.4f" % e))
        lines.append(("gpu.sdpa_%s_half_seq" % kind, "%d" % half))
    for dim, cases in (("64", SDPA64), ("256", SDPA256)):
        for kind in ("fwd", "bwd"):
            ratios = [hd_ratio(pr, case, shape, kind) for case, shape in cases.items()]
            lines.append(("gpu.sdpa_hd%s_%s" % (dim, kind), "%.3f" % statistics.mean(ratios)))
    return lines


def hd_ratio(pr, case, shape, kind):
    """A training step's cuDNN SDPA kernels (the main fprop / bprop kernel) as a fraction of
    peak, over the probe's head-dim-128 row at the same sequence length."""
    b, s, h, d, layers = shape
    t = sum(float(r["total_us"]) for r in rows(case)
            if "sdpa" in r["kernel"] and ("%sprop" % kind[0]) in r["kernel"])
    flops = 4.0 * b * s * s * h * d / 2 * layers * (2.5 if kind == "bwd" else 1.0)
    eff = flops / (t * 1e-6) / PEAK_BF16
    print("sdpa\t%s\t%s head dim %d: %.3f of peak, probe %.3f at head dim 128"
          % (case, kind, d, eff, pr[(kind, s)] / PEAK_BF16))
    return eff / (pr[(kind, s)] / PEAK_BF16)


def main():
    args = [a for a in sys.argv[1:] if a != "--machine-lines"]
    hbm = float(args[0]) if args else 4225200629727.662
    effs = []
    print("case\tkernel\tbytes\ttime_us\tGB/s\tfraction_of_hbm")
    for case in ("gpt2m-amp-1k-b8", "l1b-amp-2k-b4", "mx-amp-2k-b4"):
        with open(os.path.join(HERE, case + ".json")) as f:
            res = json.load(f)
        params = res["params"]
        rs = rows(case)
        for key, bpp, groups in ADAM:
            t = sum(float(r["total_us"]) for r in rs if key in r["kernel"])
            if t == 0:
                continue
            b = bpp * params * groups
            eff = b / (t * 1e-6) / hbm
            effs.append(eff)
            print("%s\t%s\t%d\t%.1f\t%.0f\t%.3f" % (case, key.split(",")[-1].strip(), b, t,
                                                   b / (t * 1e-6) / 1e9, eff))
        n = sum(int(r["count"]) for r in rs)
        ksum = sum(float(r["total_us"]) for r in rs)
        ms = [float(r["total_us"]) / int(r["count"]) for r in rs if "Memset" in r["kernel"]]
        print("%s\tlaunch\tkernels %d, kernel time %.1f ms, step %.1f ms, idle %.2f us per "
              "kernel, memset %.2f us" % (case, n, ksum / 1e3, res["step_s"] * 1e3,
                                          (res["step_s"] * 1e6 - ksum) / n,
                                          ms[0] if ms else float("nan")))
    print("stream: median %.3f, range %.3f-%.3f of %.4g B/s over %d kernels groups"
          % (statistics.median(effs), min(effs), max(effs), hbm, len(effs)))
    sd = sdpa_lines()
    for k, v in sd:
        print("sdpa\t%s\t%s" % (k, v))
    if "--machine-lines" in sys.argv[1:]:
        print("%-27s %-21s # experiments/realworld/kernel_rates.py" % ("gpu.mem_eff",
                                                                     "%.3f" % statistics.median(effs)))
        for k, v in sd:
            print("%-27s %-21s # experiments/realworld/kernel_rates.py" % (k, v))


if __name__ == "__main__":
    main()

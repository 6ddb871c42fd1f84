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

Usage: kernel_rates.py [HBM_Bps]   (default: h200-sxm's gpu.hbm_Bps, 4225200629727.662)
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


def main():
    hbm = float(sys.argv[1]) if len(sys.argv) > 1 else 4225200629727.662
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


if __name__ == "__main__":
    main()

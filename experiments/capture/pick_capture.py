#!/usr/bin/env python3
"""pick_capture.py — of a case's captures taken in several processes (run.sh gpu with
CAPTURES=N: OUTDIR/NAME.cK.trace.gz, K = 1..N, each with its NAME.cK.capture.json and
NAME.cK.host.json.gz), the one whose own plain steps (captured.step_wall_us, the timed steps
whole, to the GPU drained; else captured.host_steps_us) have the median median: its files
are copied to NAME.trace.gz, NAME.capture.json and NAME.host.json.gz, which run.sh predicts
from, and NAME.captures.txt says what each process measured and which was taken. The host
runs the same step 10-20 % apart from one process to the next on the GPU machine
(README.md); the median process is the capture's best guess of a typical one, chosen from
the captures alone, never from the measured runs.

  python3 pick_capture.py OUTDIR NAME     (exit 0; 1 when no capture of NAME is readable)
"""

import glob
import gzip
import os
import re
import shutil
import statistics
import sys


def own_step_us(path):
    """The median of the capture's timed steps (whole, else host), and which key it read."""
    meta = {}
    with gzip.open(path, "rt") as f:
        for ln in f:
            if not ln.startswith("meta "):
                if meta:
                    break
                continue
            k, _, v = ln[5:].strip().partition(" ")
            meta[k] = v
    for key in ("captured.step_wall_us", "captured.host_steps_us"):
        if key in meta:
            return statistics.median(float(x) for x in meta[key].split(",")), key
    return None, None


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    out, name = argv[1], argv[2]
    found = []
    for p in sorted(glob.glob(os.path.join(out, name + ".c*.trace.gz"))):
        m = re.search(r"\.c(\d+)\.trace\.gz$", p)
        if not m:
            continue
        try:
            us, key = own_step_us(p)
        except (OSError, EOFError, ValueError) as e:
            print("pick_capture.py: %s: %s" % (p, e), file=sys.stderr)
            continue
        if us is not None:
            found.append((us, int(m.group(1)), key))
    if not found:
        print("pick_capture.py: no readable capture of %s in %s" % (name, out), file=sys.stderr)
        return 1
    ranked = sorted(found)
    us, k, key = ranked[(len(ranked) - 1) // 2]
    for ext in ("trace.gz", "capture.json", "host.json.gz"):
        src = os.path.join(out, "%s.c%d.%s" % (name, k, ext))
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(out, "%s.%s" % (name, ext)))
    with open(os.path.join(out, name + ".captures.txt"), "w") as f:
        f.write("# %s: each capture's own plain step (median of its timed steps, %s)\n"
                % (name, key))
        for u, kk, _ in sorted(found, key=lambda x: x[1]):
            f.write("c%d %.1f us%s\n" % (kk, u, "  <- taken (the median)" if kk == k else ""))
    print("%s: capture c%d taken (%.1f ms, the median of %d)" % (name, k, us / 1000,
                                                               len(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

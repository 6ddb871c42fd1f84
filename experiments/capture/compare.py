#!/usr/bin/env python3
"""compare.py — one row of experiments/capture's table: the measured run (capture_run.py's
JSON) beside memsim's prediction (a row of `memsim compare --csv`), with the difference in
percent of the measurement. Where the run was measured in several processes (run.sh gpu
with REPEATS: NAME.MODE.json and NAME.MODE.rN.json beside it), the step time is the median of
the processes' step times and a line under the row gives each one; the peaks are the first
process's (the allocator's peaks repeat exactly from process to process). Called by run.sh;
exits 0 even when a side is missing (the row says so). Under the keep-all row a second line
gives the capture's own peak reserved (NAME.capture.json, the capturing process) and plain
steps (captured.step_wall_us of NAME.trace.gz: the same step in the capturing process,
whole, to the GPU drained) and the prediction's difference from them: the host runs the same step 10-30 % apart from one process to the next, and the
capture knows only its own."""

import csv
import glob
import json
import os
import statistics
import sys

from pick_capture import own_step_us


def pct(meas, pred):
    if not meas or pred is None:
        return "-"
    return "%+.1f" % (100.0 * (pred - meas) / meas)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def repeats(meas_path):
    """The step times of the run's later processes (NAME.MODE.rN.json), in round order."""
    if not meas_path.endswith(".json"):
        return []
    paths = glob.glob(meas_path[:-len(".json")] + ".r[0-9]*.json")
    paths.sort(key=lambda p: int(p.rsplit(".r", 1)[1][:-len(".json")]))
    return [load(p).get("step_s") for p in paths]


def own_step_s(trace_path):
    """The median of the capture's own whole plain steps in seconds, or None."""
    try:
        us, key = own_step_us(trace_path)
    except (OSError, ValueError, EOFError):
        return None
    return us / 1e6 if key == "captured.step_wall_us" else None


def main(name, mode, policy, meas_path, csv_path):
    m = load(meas_path)
    p = {}
    try:
        with open(csv_path) as f:
            for row in csv.DictReader(f):
                if row.get("policy") == policy:
                    p = row
    except OSError:
        pass
    ok = p.get("status") == "ok"
    pr = int(p["peak_reserved_bytes"]) if ok else None
    pa = int(p["peak_allocated_bytes"]) if ok else None
    ps = float(p["iter_time_s"]) if ok else None
    mr, ma, ms = m.get("peak_reserved"), m.get("peak_allocated"), m.get("step_s")
    steps = [x for x in [ms] + repeats(meas_path) if x is not None]
    if len(steps) > 1:
        ms = statistics.median(steps)
    gib = lambda b: "-" if b is None else "%.3f" % (b / 2**30)
    sec = lambda s: "-" if s is None else "%.4f" % s
    print("%-22s %-12s %-10s %12s %12s %7s %12s %12s %7s %9s %9s %7s" % (
        name, mode, policy if ok else policy + "!", gib(mr), gib(pr), pct(mr, pr), gib(ma),
        gib(pa), pct(ma, pa), sec(ms), sec(ps), pct(ms, ps)))
    if len(steps) > 1:
        print("%-22s   step_meas is the median of %d processes: %s" % (
            "", len(steps), " ".join(sec(x) for x in steps)))
    base = os.path.join(os.path.dirname(meas_path), name)
    own = own_step_s(base + ".trace.gz")
    cap_r = load(base + ".capture.json").get("peak_reserved")
    if mode == "keep" and (own is not None or cap_r is not None):
        print("%-22s   the capture's own process: peak reserved %s (keep-all predicted %s%%), "
              "plain steps %s s median (%s%%)" % ("", gib(cap_r), pct(cap_r, pr), sec(own),
                                                   pct(own, ps)))


if __name__ == "__main__":
    main(*sys.argv[1:6])

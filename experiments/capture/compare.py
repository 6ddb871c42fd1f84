#!/usr/bin/env python3
"""compare.py — one row of experiments/capture's table: the measured run (capture_run.py's
JSON) beside memsim's prediction (a row of `memsim compare --csv`), with the difference in
percent of the measurement. Called by run.sh; exits 0 even when a side is missing (the row
says so)."""

import csv
import json
import sys


def pct(meas, pred):
    if not meas or pred is None:
        return "-"
    return "%+.1f" % (100.0 * (pred - meas) / meas)


def main(name, mode, policy, meas_path, csv_path):
    try:
        with open(meas_path) as f:
            m = json.load(f)
    except (OSError, ValueError):
        m = {}
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
    gib = lambda b: "-" if b is None else "%.3f" % (b / 2**30)
    sec = lambda s: "-" if s is None else "%.4f" % s
    print("%-22s %-12s %-10s %12s %12s %7s %12s %12s %7s %9s %9s %7s" % (
        name, mode, policy if ok else policy + "!", gib(mr), gib(pr), pct(mr, pr), gib(ma),
        gib(pa), pct(ma, pa), sec(ms), sec(ps), pct(ms, ps)))


if __name__ == "__main__":
    main(*sys.argv[1:6])

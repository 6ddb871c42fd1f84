#!/usr/bin/env python3
"""speed.py — measures memsim's own speed side by side, for BENCHMARKS.md: whole-process
replay of the 1,344,000-event trace from its text, .gz and binary forms, the 192- and
15-configuration sweeps at -j 1 and -j 2 (and the first length alone, so that the rate
beyond process start and the first point is printed too), the planners' slow cases (MEMO's plan and
simulation at 896K on experiments/memo's workload, the somas-pangu DSA instance at --gap 0.5)
and (when it can run here) Calculon's rate on a comparable GPT configuration. Each command runs --runs times, the builds (and rows)
interleaved run by run, the builds' order alternating; it prints a markdown table of median wall time (min - max), the
median CPU time of the process (user + system, from getrusage) and the rates.

  python3 benchmarks/speed.py [--memsim sim/memsim] [--before OLD/memsim] [--runs 11]
                              [--work DIR] [--rows replay,sweep,quick,planners,calculon]
                              [--calculon DIR] [--calculon-python /usr/bin/python3]
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
EVENTS = 1344000


def run_once(cmd):
    """Wall seconds and CPU seconds (user + system) of one run of cmd, output discarded."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1):
        return None  # this build cannot run it (an older build and the binary form)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu


def make_traces(memsim, work):
    """The trace of BENCHMARKS.md in its three forms (made once, kept in work)."""
    os.makedirs(work, exist_ok=True)
    txt = os.path.join(work, "big.trace")
    if not os.path.exists(txt):
        snap = os.path.join(work, "snap.json")
        with open(snap, "w") as f:
            subprocess.run(["sh", os.path.join(SRC, "experiments/bench/make_snapshot.sh"),
                            "3500", "48"], stdout=f, check=True)
        subprocess.run([memsim, "trace", "import", "--from", "pytorch-snapshot", snap, "-o",
                        txt], check=True, stderr=subprocess.DEVNULL)
        os.remove(snap)
    gz = txt + ".gz"
    if not os.path.exists(gz):
        with open(gz, "wb") as f:
            subprocess.run(["gzip", "-1", "-c", txt], stdout=f, check=True)
    binary = os.path.join(work, "big.btrace")
    if not os.path.exists(binary):
        subprocess.run([memsim, "trace", "convert", txt, binary, "--to", "binary"], check=True,
                       stderr=subprocess.DEVNULL)
    return txt, gz, binary


def sweep_cmd(memsim, seqs, jobs):
    return [memsim, "sweep", "--model", "gpt-7b", "--tp", "4", "--cp", "2", "--seqs", seqs,
            "--policies", "full-recompute,full-swap,keep-all", "--iters", "1", "--quiet",
            "-j", str(jobs)]


def rows_for(args, memsim, work):
    """(label, command, unit count, unit name) for each row asked for."""
    rows = []
    want = args.rows.split(",")
    if "replay" in want:
        txt, gz, binary = make_traces(memsim, work)
        for form, path in (("binary", binary), ("text", txt), (".gz text", gz)):
            rows.append(("replay, %s" % form,
                         [memsim, "replay", "--trace", path, "--allocator", "caching"],
                         EVENTS, "events"))
    seq192 = ",".join("%dK" % k for k in range(16, 1025, 16))
    seq15 = "64K,128K,256K,512K,1M"
    if "sweep" in want:
        rows.append(("192 configurations, -j 1", sweep_cmd(memsim, seq192, 1), 192, "configs"))
        rows.append(("192 configurations, -j 2", sweep_cmd(memsim, seq192, 2), 192, "configs"))
        rows.append((FIRST, sweep_cmd(memsim, "16K", 1), 3, "configs"))
    if "quick" in want:
        rows.append(("quickstart, 15 configurations, -j 1", sweep_cmd(memsim, seq15, 1), 15,
                     "configs"))
    if "planners" in want:
        machine = os.path.join(work, "a800-memo.machine")
        subprocess.run(["sh", os.path.join(SRC, "experiments/memo/profile.sh"), machine],
                       check=True)
        rows.append(("MEMO plan + simulation, 896K (experiments/memo's workload)",
                     [memsim, "simulate", "--model", "gpt-7b", "--tp", "4", "--cp", "2",
                      "--machine", machine, "--gen", "framework=megatron", "--gen",
                      "loss=fused", "--seq", "896K", "--policy", "memo", "--quiet"], 0, "s"))
        rows.append(("somas-pangu DSA, --gap 0.5",
                     [memsim, "dsa", os.path.join(SRC, "experiments/dsa/instances/"
                                                  "somas-pangu_2.6B.csv"), "--gap", "0.5"],
                     0, "s"))
    return rows


# the sweep's first length alone: what process start and the first point cost, which the
# marginal rate below leaves out, as Calculon's in-process rate leaves out its interpreter's
# start, its imports and its system's set-up
FIRST = "the first length alone (16K), 3 configurations, -j 1"
SWEEP = "192 configurations, -j 1"


def marginal(res, builds):
    """Lines giving each build's per-configuration time beyond its first length's."""
    out = []
    for b, _ in builds:
        if None in res.get((SWEEP, b), [None]) or None in res.get((FIRST, b), [None]):
            continue
        for k, name in ((0, "wall"), (1, "CPU")):
            t192 = statistics.median(x[k] for x in res[(SWEEP, b)])
            t3 = statistics.median(x[k] for x in res[(FIRST, b)])
            per = (t192 - t3) / 189
            out.append("%s, %s: the 189 configurations beyond the first length's 3 (medians' "
                       "difference) %.4f ms per configuration, %s" % (b, name, per * 1e3,
                                                                     fmt_rate(189, t192 - t3,
                                                                              "configs")))
    return out


def rate(n, s):
    return n / s if s > 0 else float("inf")


def fmt_rate(n, s, unit):
    r = rate(n, s)
    if unit == "events":
        return "%.1f M events/s" % (r / 1e6)
    return "{:,.0f}/s".format(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memsim", default=os.path.join(SRC, "sim/memsim"))
    ap.add_argument("--before", help="another build's memsim, measured beside it")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "memsim-speed"),
                    help="where the traces are made and kept between runs")
    ap.add_argument("--rows", default="replay,sweep,quick,planners,calculon")
    ap.add_argument("--calculon", default=os.environ.get("CALCULON_DIR"),
                    help="a Calculon checkout (github.com/calculon-ai/calculon)")
    ap.add_argument("--calculon-python", default="/usr/bin/python3",
                    help="a Python with numpy, pandas and psutil (Calculon imports them)")
    args = ap.parse_args()
    builds = [("after", args.memsim)]
    if args.before:
        builds.insert(0, ("before", args.before))
    rows = rows_for(args, args.memsim, args.work)
    res = {}  # (row, build) -> [(wall, cpu)]
    for i in range(args.runs):
        for label, cmd, _, _ in rows:
            # the builds' order alternates run by run: on a small box the one that runs
            # second in a pair was measured 2-5 % apart from the first with the same binary
            for b, path in (builds if i % 2 == 0 else builds[::-1]):
                got = res.setdefault((label, b), [])
                if None in got:
                    continue
                got.append(run_once([path] + cmd[1:]))
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    print("%d runs of each, interleaved, the builds' order alternating; wall: median (min - "
          "max); CPU: median of user + system\n" % args.runs)
    head = "| what |" + "".join(" %s: wall | %s: CPU |" % (b, b) for b, _ in builds)
    print(head)
    print("|---|" + "---|---|" * len(builds))
    for label, _, n, unit in rows:
        line = "| %s |" % label
        for b, _ in builds:
            if None in res[(label, b)]:
                line += " — | — |"
                continue
            w = [x[0] for x in res[(label, b)]]
            c = [x[1] for x in res[(label, b)]]
            mw, mc = statistics.median(w), statistics.median(c)
            if unit == "s":  # one job (a planner's case): its time is the figure
                line += " %.0f ms (%.0f - %.0f) | %.0f ms |" % (
                    mw * 1e3, min(w) * 1e3, max(w) * 1e3, mc * 1e3)
                continue
            line += " %.0f ms (%.0f - %.0f), %s | %.0f ms, %s |" % (
                mw * 1e3, min(w) * 1e3, max(w) * 1e3, fmt_rate(n, mw, unit), mc * 1e3,
                fmt_rate(n, mc, unit))
        print(line)
    for line in marginal(res, builds):
        print(line)
    if "calculon" in args.rows.split(","):
        print()
        cmd = [args.calculon_python, os.path.join(HERE, "calculon_rate.py"), "--runs",
               str(args.runs)]
        if args.calculon:
            cmd += ["--calculon", args.calculon]
        subprocess.run(cmd)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""retime.py — a captured trace's host times computed again from the host profiles its
capture wrote (memsim.capture's host_profiles; run.sh gpu writes NAME.host.json.gz), with
this checkout's python/memsim/_host.py: how a change to the match moves the host times and
the predictions without a GPU. Each op's host_us and host_sync are replaced, each phase's
sum scaled to the timed bound the trace holds (captured.host_phase.P, second number) as the
capture does, and the host_* meta lines rewritten; all else is copied as it is.

  python3 retime.py TRACE PROFILES -o OUT     (exit 0; 1 on an unreadable input, naming it)
"""

import argparse
import gzip
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from memsim import _host, _phases   # noqa: E402  (after the path)

HOST = re.compile(r" host_us=\S+( host_sync=1)?")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("profiles")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args(argv)
    try:
        cap, plain, ops = _host.load_profiles(a.profiles)
        with gzip.open(a.trace, "rt") as f:
            lines = f.read().split("\n")
    except (ValueError, OSError, EOFError) as e:
        print("retime.py: %s" % e, file=sys.stderr)
        return 1
    meta = {}
    for ln in lines:
        if ln.startswith("meta captured.host_"):
            k, _, v = ln[5:].partition(" ")
            meta[k] = v
    cost = float(meta.get("captured.host_call_cost_us", "0"))
    info = _host.host_times(cap, plain, ops, True, cost)
    timed = {k.rsplit(".", 1)[1]: float(v.split()[1]) for k, v in meta.items()
             if k.startswith("captured.host_phase.")}
    phases = _phases.scale_host(ops, timed)
    by_id = {o.id: o for o in ops}
    out = []
    for ln in lines:
        if ln.startswith("op "):
            o = by_id.get(int(ln.split()[1]))
            if o is not None:
                ln = HOST.sub("", ln) + " host_us=%r" % o.host_us + \
                    (" host_sync=1" if o.host_sync else "")
        elif ln.startswith("meta captured.host_matched "):
            ln = "meta captured.host_matched %d/%d" % (info["matched"], info["ops"])
        elif ln.startswith("meta captured.host_syncs "):
            ln = "meta captured.host_syncs %d" % info["syncs"]
        elif ln.startswith("meta captured.host_step_us "):
            ln = "meta captured.host_step_us %.1f" % info["step_us"]
        elif ln.startswith("meta captured.host_phase."):
            p = ln.split()[1].rsplit(".", 1)[1]
            if p in phases:
                ln = "meta captured.host_phase.%s %.1f %.1f %.4f" % ((p,) + phases[p])
        out.append(ln)
    tmp = a.out + ".tmp"
    with gzip.open(tmp, "wt") as f:
        f.write("\n".join(out))
    os.replace(tmp, a.out)
    print("%s: %d/%d ops matched, %d syncs; phases %s" % (
        a.out, info["matched"], info["ops"], info["syncs"],
        " ".join("%s %.1f->%.1f (x%.2f)" % ((p,) + phases[p]) for p in sorted(phases))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

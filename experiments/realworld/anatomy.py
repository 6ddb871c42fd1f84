#!/usr/bin/env python3
"""anatomy.py — reads a PyTorch allocator trace with Python frames (hf_run.py --record FILE
--frames: h200/an-*.trace.json.gz) and prints every allocation in program order, one line
each: event number, size in bytes, the number of the event that frees it (its lifetime in
allocations in between), the innermost transformers frame (file:line function) and the
innermost torch frame, so that the program a model's training step runs can be read off.

usage: anatomy.py TRACE.json.gz [--from N] [--to N] [--min BYTES] [--frees]
Lines: '#ev  size  live-until(ev)  +allocs-between  transformers-frame | torch-frame'.
Events are numbered over allocations and frees (free_completed) only; 'live' means never
freed in the trace."""
import argparse
import gzip
import json
import os


def short(fr):
    return "%s:%d %s" % (os.path.basename(fr["filename"]), fr["line"], fr["name"])


def frames_of(ev):
    tf, pt = "", ""
    for fr in ev.get("frames", []):
        fn = fr["filename"]
        if not tf and "/transformers/" in fn:
            tf = short(fr)
        if not pt and "/torch/" in fn and "/nn/modules/module.py" not in fn:
            pt = short(fr)
        if not tf and "hf_run.py" in fn:
            tf = short(fr)
    return tf, pt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--from", dest="lo", type=int, default=0)
    p.add_argument("--to", dest="hi", type=int, default=1 << 60)
    p.add_argument("--min", type=int, default=0)
    p.add_argument("--frees", action="store_true", help="print the frees too ('-' lines)")
    a = p.parse_args()
    d = json.load(gzip.open(a.trace, "rt"))
    evs = [e for e in d["snapshot"]["device_traces"][0]
           if e["action"] in ("alloc", "free_completed")]
    live, freed_at, whose = {}, {}, {}
    for i, e in enumerate(evs):
        if e["action"] == "alloc":
            live[e["addr"]] = i
        else:
            j = live.pop(e["addr"], None)
            if j is not None:
                freed_at[j] = i
                whose[i] = j
    nalloc = [0] * (len(evs) + 1)
    for i, e in enumerate(evs):
        nalloc[i + 1] = nalloc[i] + (e["action"] == "alloc")
    cur = 0
    for i, e in enumerate(evs):
        if e["action"] == "alloc":
            cur += e["size"]
        else:
            cur -= e["size"]
        if e["size"] < a.min or not (a.lo <= i <= a.hi):
            continue
        if e["action"] != "alloc":
            if a.frees:
                print("-%-5d %12d frees #%-6s cur=%d" % (i, e["size"], whose.get(i, "?"), cur))
            continue
        tf, pt = frames_of(e)
        f = freed_at.get(i)
        life = "live" if f is None else "%d +%d" % (f, nalloc[f] - nalloc[i] - 1)
        print("#%-5d %12d %-13s cur=%-11d %s | %s" % (i, e["size"], life, cur, tf, pt))


if __name__ == "__main__":
    main()

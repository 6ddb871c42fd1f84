#!/usr/bin/env python3
"""reqdiff.py — lines up a recorded PyTorch allocator trace (hf_run.py --record, h200/*.trace
.json.gz) with memsim's program for the same run, request by request: every allocation and
free in order by size, aligned by a diff, and prints the blocks where they differ with a few
matching requests around them (the recorded side with its innermost transformers / torch
frame when the trace has Python frames, memsim's with the tensor's name, class and layer).
This is how the hf profile's programs were made to match (docs/VALIDATION.md).

usage: reqdiff.py RECORDED.trace.json.gz MEMSIM.trace [--iters N] [--min BYTES] [--max N]
                  [--ctx N] [--sched SCHEDULE.txt]
  MEMSIM.trace   `memsim trace gen --model-config ... --framework hf ... --iters N -o FILE`
                 (text form); its first N iterations are compared (the recording's steps)
  --sched FILE   compare the lowered schedule instead (`memsim simulate --trace MEMSIM.trace
                 --policy full-recompute --schedule FILE`: a checkpointed run); the trace
                 names its tensors
  --min BYTES    leave out requests below BYTES (small-pool noise)
Prints, last, the peak of requested bytes live on each side."""
import argparse
import difflib
import gzip
import json
import os


def frames_of(ev):
    tf, pt = "", ""
    for fr in ev.get("frames", []):
        fn = fr["filename"]
        s = "%s:%d %s" % (os.path.basename(fn), fr["line"], fr["name"])
        if not tf and ("/transformers/" in fn or "hf_run.py" in fn):
            tf = s
        if not pt and "/torch/" in fn and "/nn/modules/module.py" not in fn:
            pt = s
    return (tf + " | " + pt) if (tf or pt) else ""


def recorded(path):
    d = json.load(gzip.open(path, "rt"))
    out, live = [], {}
    for e in d["snapshot"]["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = len(out)
            out.append(("+", e["size"], frames_of(e)))
        elif e["action"] == "free_completed":
            j = live.pop(e["addr"], None)
            if j is not None:
                out.append(("-", out[j][1], "free #%d %s" % (j, out[j][2])))
    return out


def opener(path):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def generated(path, iters):
    out, live = [], {}
    for line in opener(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "mark" and f[1] == "iter" and int(f[2]) >= iters:
            break
        if f[0] == "alloc":
            live[f[1]] = len(out)
            out.append(("+", int(f[2]), "%s %s L%s" % (f[-1], f[3], f[4])))
        elif f[0] == "free":
            j = live.pop(f[1], None)
            if j is not None:
                out.append(("-", out[j][1], "free #%d %s" % (j, out[j][2])))
    return out


def trace_names(path):
    names = {}
    for line in opener(path):
        f = line.split()
        if f and f[0] == "alloc":
            names[f[1]] = f[-1]
    return names


def field(tok):
    return tok.split("=", 1)[1]


def schedule(path, iters, names):
    out, live = [], {}
    for line in open(path):
        f = line.split()
        if len(f) < 3:
            continue
        if f[2] == "mark" and "kind=iter" in line and int(field(f[4])) >= iters:
            break
        if f[2] == "alloc":
            t = field(f[3])
            live[t] = len(out)
            out.append(("+", int(field(f[4])), "%s %s" % (names.get(t, "t" + t), f[5])))
        elif f[2] == "free":
            j = live.pop(field(f[3]), None)
            if j is not None:
                out.append(("-", out[j][1], "free #%d %s" % (j, out[j][2])))
    return out


def peak(events):
    cur = top = 0
    for e in events:
        cur += e[1] if e[0] == "+" else -e[1]
        top = max(top, cur)
    return top


def show(tag, side, k, e):
    print("%s %s%-6d %s%-12d %s" % (tag, side, k, e[0], e[1], e[2][:110]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("recorded")
    p.add_argument("generated")
    p.add_argument("--iters", type=int, default=1)
    p.add_argument("--ctx", type=int, default=3)
    p.add_argument("--max", type=int, default=30, help="difference blocks to print")
    p.add_argument("--min", type=int, default=0, help="leave out requests below BYTES")
    p.add_argument("--sched", help="a lowered schedule to compare instead")
    a = p.parse_args()
    R = [e for e in recorded(a.recorded) if e[1] >= a.min]
    if a.sched:
        G = schedule(a.sched, a.iters, trace_names(a.generated))
    else:
        G = generated(a.generated, a.iters)
    G = [e for e in G if e[1] >= a.min]
    sm = difflib.SequenceMatcher(None, ["%s%d" % e[:2] for e in R], ["%s%d" % e[:2] for e in G],
                                 autojunk=False)
    n = 0
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        n += 1
        if n > a.max:
            continue
        print("=== %s recorded[%d:%d] memsim[%d:%d]" % (tag, i1, i2, j1, j2))
        for i in range(max(0, i1 - a.ctx), i1):
            show("  ", "r", i, R[i])
        for i in range(i1, i2):
            show(" R", "r", i, R[i])
        for j in range(j1, j2):
            show(" G", "g", j, G[j])
    print("blocks differing: %d; peak requested bytes: recorded %d, memsim %d" %
          (n, peak(R), peak(G)))


if __name__ == "__main__":
    main()

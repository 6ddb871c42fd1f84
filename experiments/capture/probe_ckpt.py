#!/usr/bin/env python3
"""probe_ckpt.py — the host side of a checkpointed Hugging Face training step on the GPU
machine, by phase, in one process per call (results_lease3/ holds what the H200 gave):

  --what phases  each case plain, then with gradient_checkpointing_enable(use_reentrant=
                 False), then the same without checkpoint's early stop: the host time of the
                 forward (to the loss), of backward() and the step's wall time, medians of 5
                 steps, and a cProfile listing of one plain and one checkpointed step
                 (NAME.{plain,ckpt}.{prof,cum}.txt) -> ckpt_probe.json
  --what gc      each case plain and checkpointed with Python's garbage collector on, off
                 and frozen, 9 steps each with every collection timed (gc.callbacks), and the
                 time of a full collection of the process's objects -> gc_probe.json

Cases: GPT-2 large bf16 (b4 x 1024) and Qwen2.5-0.5B amp (b4 x 2048), built as capture_run.py
builds them. Run from the repository root: python3 experiments/capture/probe_ckpt.py
--what phases OUTDIR. Needs PyTorch with CUDA and transformers."""

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "experiments", "realworld"))
sys.path.insert(0, os.path.join(ROOT, "experiments", "capture"))

CASES = (("gpt2-large-bf16", "gpt2-large.json", "bf16", 1024, 4),
         ("qwen2.5-0.5b-amp", "qwen2.5-0.5b.json", "amp", 2048, 4))


class Case:
    """One case's model, optimizer and batch, and its timed step."""

    def __init__(self, torch, cfg, prec, seq, batch):
        import capture_run
        import hf_run
        self.torch, self.hf_run = torch, hf_run
        a = argparse.Namespace(config=os.path.join(ROOT, "experiments", "realworld", "configs",
                                                   cfg), precision=prec, seq=seq, batch=batch,
                               mode="keep")
        self.x, self.model, self.opt, _ = capture_run.setup(a, torch, hf_run)
        self.ha = argparse.Namespace(config=a.config, precision=prec, seed=0)
        self.gc_events = None

    def step(self):
        self.hf_run.step(self.model, self.opt, self.x, self.ha, self.torch, None)

    def timed(self, n):
        """Host seconds of the forward, of backward() and the wall time of n steps (each
        begun on a drained GPU), and per step the collections [n0, n1, n2, ms0, ms1, ms2]
        when gc events are being recorded."""
        torch, f, b, w, g = self.torch, [], [], [], []
        for _ in range(n):
            torch.cuda.synchronize()
            if self.gc_events is not None:
                del self.gc_events[:]
            t0 = time.perf_counter()
            loss = self.hf_run.forward_loss(self.model, self.x, self.ha, torch)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            f.append(t1 - t0)
            b.append(t2 - t1)
            w.append(t3 - t0)
            if self.gc_events is not None:
                ev = self.gc_events
                g.append([sum(1 for e in ev if e[0] == k) for k in range(3)] +
                         [sum(e[1] for e in ev if e[0] == k) * 1e3 for k in range(3)])
        med = lambda v: 1e3 * statistics.median(v)
        out = dict(fwd_ms=med(f), bwd_ms=med(b), wall_ms=med(w))
        if self.gc_events is not None:
            out.update(all_wall_ms=[1e3 * v for v in w], gc_per_step=g)
        return out

    def checkpointed(self, warm=2):
        self.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
        for _ in range(warm):
            self.step()


def profile_step(case, path_stem):
    """cProfile of one step, by own time and by cumulative time."""
    torch = case.torch
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    loss = case.hf_run.forward_loss(case.model, case.x, case.ha, torch)
    loss.backward()
    pr.disable()
    case.opt.step()
    case.opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    for how, tag in (("tottime", "prof"), ("cumulative", "cum")):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(how).print_stats(45 if tag == "cum" else 30)
        with open("%s.%s.txt" % (path_stem, tag), "w") as fh:
            fh.write(s.getvalue())


def phases(torch, name, case, out):
    import torch.utils.checkpoint as tuc
    for _ in range(3):
        case.step()
    r = {"plain": case.timed(5)}
    profile_step(case, os.path.join(out, name + ".plain"))
    case.checkpointed()
    r["ckpt"] = case.timed(5)
    profile_step(case, os.path.join(out, name + ".ckpt"))
    with tuc.set_checkpoint_early_stop(False):
        r["ckpt_noearly"] = case.timed(5)
    return r


def collector(torch, name, case, out):
    case.gc_events = []
    start = [0.0]

    def cb(phase, info):
        if phase == "start":
            start[0] = time.perf_counter()
        else:
            case.gc_events.append((info["generation"], time.perf_counter() - start[0]))
    gc.callbacks.append(cb)
    try:
        for _ in range(3):
            case.step()
        gc.collect()
        r = {"objects": len(gc.get_objects()), "threshold": gc.get_threshold()}
        for gen in (0, 1, 2):
            t0 = time.perf_counter()
            gc.collect(gen)
            r["collect%d_ms" % gen] = 1e3 * (time.perf_counter() - t0)
        r["plain"] = case.timed(9)
        gc.disable()
        r["plain_nogc"] = case.timed(9)
        gc.enable()
        case.checkpointed()
        r["ckpt"] = case.timed(9)
        gc.disable()
        r["ckpt_nogc"] = case.timed(9)
        gc.enable()
        gc.freeze()
        r["ckpt_frozen"] = case.timed(9)
        gc.unfreeze()
    finally:
        gc.callbacks.remove(cb)
        gc.enable()
    return r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--what", choices=("phases", "gc"), required=True)
    p.add_argument("out", help="directory for the JSON (and the cProfile listings)")
    a = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("probe_ckpt.py: no CUDA device", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    fn = phases if a.what == "phases" else collector
    res = {}
    for name, cfg, prec, seq, batch in CASES:
        case = Case(torch, cfg, prec, seq, batch)
        res[name] = fn(torch, name, case, a.out)
        print(name, json.dumps({k: v for k, v in res[name].items()
                                if not isinstance(v, dict)}), flush=True)
        del case
        gc.collect()
        torch.cuda.empty_cache()
    path = os.path.join(a.out, "ckpt_probe.json" if a.what == "phases" else "gc_probe.json")
    with open(path, "w") as fh:
        json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

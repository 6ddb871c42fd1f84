#!/usr/bin/env python3
"""capture_run.py — one case of experiments/capture on the GPU: builds the Hugging Face
model from its config in random initialization exactly as experiments/realworld/hf_run.py
does (on the GPU in its dtype, SDPA, AdamW, bf16 autocast for amp), then in one process
per mode:
  --mode capture     the warm-up steps, memsim.capture over the next (keep-all) step (with
                     --host-timing one step before it, timed by phase, and one after it, run
                     plain under torch.profiler, for each op's host time: host_us,
                     host_sync; docs/CAPTURE.md, "Host time"), then an uncaptured step
                     timed for the capture's overhead; writes the trace
  --mode keep        the plain step measured (peak reserved, peak allocated, median step)
  --mode ckpt        model.gradient_checkpointing_enable(use_reentrant=False), measured
  --mode save_on_cpu torch.autograd.graph.save_on_cpu(pin_memory=True) around the forward
                     and the loss, measured
Prints one JSON object (also --out). Needs PyTorch >= 2.2 with CUDA, transformers, and the
memsim package installed (run.sh gpu installs it with pip install ./python; the source tree
is not on the path, so the run exercises the installed package)."""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "realworld"))


def setup(a, torch, hf_run):
    """A case's input batch (seeded token ids on the GPU), its model in random
    initialization in training mode (checkpointed for mode ckpt), AdamW, and the
    saved-tensor hooks of its mode (save_on_cpu, else None); probe_host.py shares it."""
    with open(a.config) as f:
        vocab = json.load(f)["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab, (a.batch, a.seq), generator=gen).to(torch.device("cuda", 0))
    ha = argparse.Namespace(config=a.config, precision=a.precision, seed=0)
    model, _ = hf_run.build(ha, torch)
    model.train()
    if a.mode == "ckpt":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    hooks = (lambda: torch.autograd.graph.save_on_cpu(pin_memory=True)) \
        if a.mode == "save_on_cpu" else None
    return x, model, opt, hooks


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--precision", choices=["amp", "bf16"], default="amp")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--mode", choices=["capture", "keep", "ckpt", "save_on_cpu"], required=True)
    p.add_argument("--trace", default="", help="--mode capture: the trace to write")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", default="")
    p.add_argument("--host-steps", type=int, default=1,
                   help="--mode capture --host-timing: plain steps timed before the captured "
                   "one (memsim.capture's host_steps: each phase's median is taken)")
    p.add_argument("--program", choices=["keep", "ckpt"], default="keep",
                   help="--mode capture: the program captured (ckpt: with "
                   "gradient_checkpointing_enable(), to compare what really ran with what "
                   "memsim's full-recompute predicts from the keep-all capture)")
    p.add_argument("--snapshot", default="",
                   help="--mode keep/ckpt/save_on_cpu: also record the caching allocator's "
                   "history of every step (torch.cuda.memory._record_memory_history, no "
                   "stacks) and dump it to this pickle; the steps' times are then not the "
                   "plain ones (the allocator trace is on)")
    p.add_argument("--host-timing", action="store_true",
                   help="--mode capture: run a second step plain under torch.profiler for "
                   "each op's host time (experimental: docs/CAPTURE.md, 'Host time')")
    p.add_argument("--host-profiles", default="",
                   help="--mode capture --host-timing: also write the two profiles the host "
                   "times were matched from to this file (memsim.capture's host_profiles)")
    a = p.parse_args(argv)
    import torch
    import hf_run
    import memsim
    if not torch.cuda.is_available():
        print("capture_run.py: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats(dev)
    if a.snapshot:      # from before the model is built: a replay needs every live block
        torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                 stacks="python", max_entries=2000000)
    sa = argparse.Namespace(**vars(a))
    if a.mode == "capture" and a.program == "ckpt":
        sa.mode = "ckpt"
    x, model, opt, hooks = setup(sa, torch, hf_run)
    ha = argparse.Namespace(config=a.config, precision=a.precision, seed=0)

    def step():
        hf_run.step(model, opt, x, ha, torch, hooks)

    res = dict(config=os.path.basename(a.config), precision=a.precision, seq=a.seq,
               batch=a.batch, mode=a.mode, program=a.program, torch=torch.__version__,
               device=torch.cuda.get_device_name(0), status="ok",
               memsim=os.path.dirname(memsim.__file__),
               transformers=sys.modules["transformers"].__version__
               if "transformers" in sys.modules else None)
    times = []
    try:
        if a.mode == "capture":
            for _ in range(a.warmup):
                step()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with memsim.capture(a.trace, model=model, optimizer=opt,
                                host_timing=a.host_timing,
                                host_steps=a.host_steps if a.host_timing else 1,
                                host_profiles=a.host_profiles or None):
                for _ in range(a.host_steps if a.host_timing else 0):
                    step()              # plain, timed by phase (its optimizer phase runs to
                                        # the next step's forward: no synchronize)
                step()                  # captured
                torch.cuda.synchronize()
                if a.host_timing:
                    t1 = time.perf_counter()
                    step()              # plain, profiled: the host times
                    torch.cuda.synchronize()
                    res["host_profiled_step_s"] = time.perf_counter() - t1
            torch.cuda.synchronize()
            res["capture_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            res["plain_step_s"] = time.perf_counter() - t0
        else:
            pre = torch.cuda.memory_stats(dev)      # the set-up's peaks, kept in the overall
            res["setup_peak_reserved"] = pre.get("reserved_bytes.all.peak", 0)
            res["setup_peak_allocated"] = pre.get("allocated_bytes.all.peak", 0)
            res["step_peak_reserved"] = []
            res["step_peak_allocated"] = []
            res["all_step_s"] = []
            for i in range(a.warmup + a.steps):
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(dev)   # per-step peaks; the overall
                t0 = time.perf_counter()                  # peak is their maximum
                step()
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                sst = torch.cuda.memory_stats(dev)
                res["step_peak_reserved"].append(sst.get("reserved_bytes.all.peak", 0))
                res["step_peak_allocated"].append(sst.get("allocated_bytes.all.peak", 0))
                res["all_step_s"].append(dt)
                if i >= a.warmup:
                    times.append(dt)
            if a.snapshot:
                torch.cuda.memory._dump_snapshot(a.snapshot)
                torch.cuda.memory._record_memory_history(enabled=None)
    except torch.OutOfMemoryError as e:
        res["status"] = "oom"
        res["oom_message"] = str(e).split("\n")[0][:300]
    st = torch.cuda.memory_stats(dev)
    res["peak_allocated"] = st.get("allocated_bytes.all.peak", 0)
    res["peak_reserved"] = st.get("reserved_bytes.all.peak", 0)
    if res.get("step_peak_reserved"):      # the peaks were reset at each step's start
        res["peak_allocated"] = max([res["peak_allocated"], res["setup_peak_allocated"]] +
                                    res["step_peak_allocated"])
        res["peak_reserved"] = max([res["peak_reserved"], res["setup_peak_reserved"]] +
                                   res["step_peak_reserved"])
    res["step_s"] = statistics.median(times) if times else None
    line = json.dumps(res, sort_keys=True)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""contention_probe.py — does a CPU Adam running on the host slow the GPU's training step?

ProTrain (and ZeRO-Offload, MemFerry) hide the host Adam of offloaded parameters under the GPU's
backward. memsim's simulator gives the host Adam its own engine: it takes no time from the
thread that launches the GPU's kernels. On a real host the two share cores, caches and memory
bandwidth. This probe measures how much of that is visible: it runs the forward and backward of
a Hugging Face GPT-2 (random weights, fp16, eager attention, no network) on one GPU, alone and
while a CPU Adam (torch.optim.Adam, fused when available) steps a large fp32 parameter on the
host with T threads, in a thread of the training process (as an optimizer overlapped with the
backward runs) or in a separate process.

    python3 contention_probe.py --out DIR [--layers 8 --hidden 1536 --heads 16 --seq 1024
                                           --batches 2,16 --threads 4,8,15 --reps 12]

Writes DIR/contention.csv, one row per (batch, background):

  batch, background (none | thread | process), threads, iter_ms (median), issue_ms (median host
  time until backward() returns, every kernel queued: a step whose issue_ms nears iter_ms is
  bound by the host),
  slowdown (iter_ms over the mean of the undisturbed runs just before and after, minus 1; for
  a none row its own drift), adam_params_per_s (the background's rate while the step ran; empty
  for none), host_cores

PyTorch and transformers, one GPU.
"""
import argparse
import multiprocessing as mp
import os
import statistics
import threading
import time

import torch

ADAM_PARAMS = 64 * 1024 * 1024


def make_adam(threads):
    torch.set_num_threads(threads)
    p = torch.zeros(ADAM_PARAMS, dtype=torch.float32, requires_grad=True)
    p.grad = torch.randn(ADAM_PARAMS, dtype=torch.float32) * 1e-3
    try:
        opt = torch.optim.Adam([p], lr=1e-4, fused=True)
        opt.step()
    except (RuntimeError, TypeError):
        opt = torch.optim.Adam([p], lr=1e-4, foreach=True)
        opt.step()
    return opt


def adam_loop(threads, stop, steps, seconds, ready):
    opt = make_adam(threads)
    ready.set()
    n = 0
    t0 = time.perf_counter()
    while not stop.is_set():
        opt.step()
        n += 1
    steps.value = n
    seconds.value = time.perf_counter() - t0


class Shared:
    def __init__(self):
        self.value = 0


def build_model(layers, hidden, heads, seq):
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(n_embd=hidden, n_head=heads, n_layer=layers, n_positions=seq,
                     activation_function="gelu_new")
    try:
        cfg._attn_implementation = "eager"
    except AttributeError:
        pass
    return GPT2Model(cfg).half().cuda().train()


def step_times(model, batch, seq, reps):
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device="cuda")
    times = []
    for i in range(reps + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids).last_hidden_state
        loss = out.float().pow(2).mean()
        loss.backward()
        issued = time.perf_counter() - t0
        torch.cuda.synchronize()
        if i >= 3:
            times.append((time.perf_counter() - t0, issued))
        model.zero_grad(set_to_none=True)
    return times


def medians(pairs):
    """Median step time and median host time to issue the step (when the host returns from
    backward(): every kernel queued), both in seconds."""
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))


def run_case(model, batch, seq, reps, mode, threads):
    if mode == "none":
        return step_times(model, batch, seq, reps), None
    if mode == "thread":
        stop, ready = threading.Event(), threading.Event()
        steps, secs = Shared(), Shared()
        worker = threading.Thread(target=adam_loop, args=(threads, stop, steps, secs, ready))
    else:
        ctx = mp.get_context("spawn")
        stop, ready = ctx.Event(), ctx.Event()
        steps, secs = ctx.Value("l", 0), ctx.Value("d", 0.0)
        worker = ctx.Process(target=adam_loop, args=(threads, stop, steps, secs, ready))
    worker.start()
    ready.wait()
    time.sleep(0.5)
    times = step_times(model, batch, seq, reps)
    stop.set()
    worker.join()
    rate = steps.value * ADAM_PARAMS / secs.value if secs.value > 0 else 0.0
    return times, rate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batches", default="2,16")
    ap.add_argument("--threads", default="4,8,15")
    ap.add_argument("--modes", default="thread,process")
    ap.add_argument("--reps", type=int, default=12)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    model = build_model(a.layers, a.hidden, a.heads, a.seq)
    rows = []
    for batch in [int(x) for x in a.batches.split(",")]:
        step_times(model, batch, a.seq, a.reps)  # warm the allocator and the kernels
        cases = [(m, int(t)) for m in a.modes.split(",") for t in a.threads.split(",")]
        before, issue = medians(run_case(model, batch, a.seq, a.reps, "none", 0)[0])
        rows.append((batch, "none", 0, before * 1e3, issue * 1e3, 0.0, None))
        for mode, threads in cases:
            times, rate = run_case(model, batch, a.seq, a.reps, mode, threads)
            # The baseline drifts between runs (clocks, the allocator): each case is compared
            # with the mean of the undisturbed runs just before and just after it.
            after, issue_after = medians(run_case(model, batch, a.seq, a.reps, "none", 0)[0])
            base = 0.5 * (before + after)
            med, issue = medians(times)
            rows.append((batch, mode, threads, med * 1e3, issue * 1e3, med / base - 1.0, rate))
            rows.append((batch, "none", 0, after * 1e3, issue_after * 1e3, after / base - 1.0,
                         None))
            print(f"batch {batch:3d} {mode:8s} T={threads:2d}  {med*1e3:8.2f} ms "
                  f"(issued in {issue*1e3:8.2f}, undisturbed {before*1e3:.2f} / "
                  f"{after*1e3:.2f})  slowdown {100*(med/base-1):+6.2f} %  "
                  f"adam {rate or 0:.3e}/s", flush=True)
            before = after
    cores = os.cpu_count()
    with open(os.path.join(a.out, "contention.csv"), "w") as f:
        f.write("batch,background,threads,iter_ms,issue_ms,slowdown,adam_params_per_s,"
                "host_cores\n")
        for r in rows:
            rate = f"{r[6]:.4e}" if r[6] is not None else ""
            f.write(f"{r[0]},{r[1]},{r[2]},{r[3]:.3f},{r[4]:.3f},{r[5]:.4f},{rate},{cores}\n")


if __name__ == "__main__":
    main()

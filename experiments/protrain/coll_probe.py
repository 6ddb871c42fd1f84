#!/usr/bin/env python3
"""coll_probe.py — what a data-parallel collective through host memory costs against the host
link: the measurement behind the machine key the ProTrain lowering reads as `coll_link_eff`
(docs/PROTRAIN.md §3: without peer access NCCL moves a ring all-gather or reduce-scatter
through host shared memory, (dp-1)/dp of the chunk each way over each GPU's PCIe link, at
coll_link_eff of the link's pinned-copy rate).

Run under torchrun on one host with two or more GPUs, once with NCCL's defaults and once with
peer access off (NCCL_P2P_DISABLE=1, so that NCCL takes its SHM transport as on GPUs without
P2P, such as ProTrain's RTX 3090 testbed):

    torchrun --nproc_per_node 2 coll_probe.py --tag p2p --out DIR
    NCCL_P2P_DISABLE=1 torchrun --nproc_per_node 2 coll_probe.py --tag shm --out DIR

Writes DIR/coll_TAG.csv: per operation and message size (the gathered / reduced tensor's
bytes) the median time of --reps runs, the bus bandwidth NCCL's tests define ((n-1)/n of the
bytes over the time) and its ratio to rank 0's pinned host-to-device and device-to-host copy
rates, measured first on the same GPU (link.csv). Used by experiments/protrain (README: the
collective's share of the link); PyTorch with NCCL, no network.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def copy_rates(nbytes, reps):
    """Median pinned H2D and D2H copy rates (B/s) of one nbytes copy on this GPU."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    out = {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        ts = []
        for i in range(reps + 2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            if i >= 2:
                ts.append(time.perf_counter() - t0)
        out[name] = nbytes / statistics.median(ts)
    return out


def time_op(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for i in range(reps + 3):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            ts.append(start.elapsed_time(end) / 1e3)
    t = torch.tensor([statistics.median(ts)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's median
    return t.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", required=True, help="name of this run (p2p, shm, ...)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--sizes-mib", default="16,64,256,1024",
                    help="gathered / reduced tensor sizes, MiB (default 16,64,256,1024)")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    os.makedirs(a.out, exist_ok=True)
    link = copy_rates(256 << 20, a.reps) if rank == 0 else None
    rows = []
    for mib in (int(x) for x in a.sizes_mib.split(",")):
        total = (mib << 20) // 2 // n * n          # fp16 elements, divisible by n
        full = torch.ones(total, dtype=torch.float16, device="cuda")
        part = torch.empty(total // n, dtype=torch.float16, device="cuda")
        ops = (("all_gather", lambda: dist.all_gather_into_tensor(full, part)),
               ("reduce_scatter", lambda: dist.reduce_scatter_tensor(part, full)))
        for name, fn in ops:
            t = time_op(fn, a.reps)
            busbw = total * 2 * (n - 1) / n / t
            rows.append((name, total * 2, n, t, busbw))
        del full, part
        torch.cuda.empty_cache()
    if rank == 0:
        with open(os.path.join(a.out, "link.csv"), "a") as f:
            if f.tell() == 0:
                f.write("tag,gpu,h2d_Bps,d2h_Bps\n")
            f.write("%s,%s,%.4g,%.4g\n" % (a.tag, torch.cuda.get_device_name(), link["h2d"],
                                          link["d2h"]))
        with open(os.path.join(a.out, "coll_%s.csv" % a.tag), "w") as f:
            f.write("op,bytes,ranks,time_s,busbw_Bps,busbw_over_h2d,busbw_over_d2h\n")
            for name, nb, r, t, bw in rows:
                f.write("%s,%d,%d,%.6g,%.4g,%.3f,%.3f\n" % (name, nb, r, t, bw, bw / link["h2d"],
                                                           bw / link["d2h"]))
                print("%-14s %6d MiB  %d ranks  %8.3f ms  busbw %6.1f GB/s  %.2f of H2D" %
                      (name, nb >> 20, r, t * 1e3, bw / 1e9, bw / link["h2d"]), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

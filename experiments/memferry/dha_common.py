"""dha_common.py — what the GPU probes of experiments/memferry (go_probe.py, host_probe.py)
share: PyTorch views of pinned host memory mapped into the GPU's address space (Direct Host
Access), GPU timing with CUDA events, and writing a table both to standard output and to a
CSV file."""
import os
import sys

import torch


class _Mapped:
    """A CUDA view of pinned host memory: with unified addressing the host pointer of a
    cudaHostAlloc'ed block is valid on the device, so kernels read and write it over PCIe."""

    def __init__(self, host):
        typestr = {torch.float16: "<f2", torch.float32: "<f4", torch.bfloat16: "<V2"}[host.dtype]
        self.host = host
        self.__cuda_array_interface__ = {
            "shape": tuple(host.shape), "typestr": typestr,
            "data": (host.data_ptr(), False), "version": 2, "strides": None,
        }


def host_mapped_zeros(like):
    host = torch.zeros(like.shape, dtype=like.dtype, pin_memory=True)
    view = torch.as_tensor(_Mapped(host), device=like.device)
    view._pinned_owner = host  # keep the host block alive as long as the view
    return view


def timed_ms(fn, reps, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in ev)
    return t[len(t) // 2]


def per_call_ms(fn, reps, calls):
    """Median GPU time of one call of fn: each timed sample issues `calls` calls back to back,
    so launches queue ahead and the GPU's time is measured, not the host's."""
    def many():
        for _ in range(calls):
            fn()
    return timed_ms(many, reps) / calls


def emit(out, fname, rows):
    text = "\n".join(rows) + "\n"
    sys.stdout.write(f"# {fname}\n{text}")
    sys.stdout.flush()
    if out:
        with open(os.path.join(out, fname), "w") as f:
            f.write(text)

"""_cuda.py — the CUDA caching allocator's own requests during a capture: the allocator's
allocation and free callbacks (torch.cuda._gpu_trace, the hooks PyTorch's CUDA sanitizer
uses) put every request into the trace in program order, between the ops that made them,
including workspaces no tensor shows (cuBLAS, cuDNN); the allocator's history
(torch.cuda.memory._record_memory_history) then gives each request its size as the caller
asked it, before the allocator's rounding, which memsim's caching allocator replays.
Used by memsim.capture on a CUDA model; the CPU path needs none of it."""


def _trace_module():
    try:
        import torch.cuda._gpu_trace as gt          # PyTorch >= 2.2
        return gt, gt.MemoryAllocationCallbacks, gt.MemoryDeallocationCallbacks, \
            "_activate_gpu_trace"
    except (ImportError, AttributeError):
        pass
    try:
        import torch.utils._cuda_trace as gt        # PyTorch 2.0, 2.1
        return gt, gt.CUDAMemoryAllocationCallbacks, gt.CUDAMemoryDeallocationCallbacks, \
            "_activate_cuda_trace"
    except (ImportError, AttributeError):
        return None


def supported():
    """None when this PyTorch has what the CUDA capture needs, else why not."""
    import torch
    if _trace_module() is None:
        return ("PyTorch %s has no allocator callbacks (torch.cuda._gpu_trace, PyTorch >= 2.0)"
                % torch.__version__)
    if not hasattr(torch.cuda.memory, "_record_memory_history"):
        return "PyTorch %s has no torch.cuda.memory._record_memory_history" % torch.__version__
    return None


class AllocatorEvents:
    """Calls on_alloc(ptr) and on_free(ptr) for each caching-allocator request on `device`
    between start() and stop(); sizes() afterwards returns the requested bytes of the
    allocations in the order they were seen."""

    def __init__(self, device, on_alloc, on_free):
        self.device = device
        self.on_alloc = on_alloc
        self.on_free = on_free
        self.addrs = []
        self._regs = None
        self.start_blocks = []

    def start(self, max_entries=4000000):
        import torch
        gt, areg, dreg, act = _trace_module()
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=max_entries)
        snap = torch.cuda.memory._snapshot()
        idx = self.device.index if self.device.index is not None else torch.cuda.current_device()
        for seg in snap.get("segments", []):
            if seg.get("device", idx) != idx:
                continue
            addr = seg["address"]
            for b in seg.get("blocks", []):
                if b.get("state") == "active_allocated":
                    self.start_blocks.append((addr, b.get("requested_size", b["size"])))
                addr += b["size"]
        self._alloc_cb = lambda ptr: self._alloc(ptr)
        self._free_cb = lambda ptr: self._free(ptr)
        areg.add_callback(self._alloc_cb)
        dreg.add_callback(self._free_cb)
        self._regs = (areg, dreg)
        getattr(torch._C, act)()

    def _alloc(self, ptr):
        self.addrs.append(ptr)
        self.on_alloc(ptr)

    def _free(self, ptr):
        self.on_free(ptr)

    def stop(self):
        """Unhooks and returns the history's alloc entries (addr, size) of this device."""
        import torch
        if self._regs is None:
            return []
        areg, dreg = self._regs
        for reg, cb in ((areg, self._alloc_cb), (dreg, self._free_cb)):
            try:
                reg.callback_list.remove(cb)
            except (AttributeError, ValueError):
                pass
        self._regs = None
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        # PyTorch cannot turn the GPU trace off again (c10::impl::GPUTrace is set once per
        # process): from now on each allocation and free calls into Python with no callback
        # left to run (docs/CAPTURE.md, "What capturing costs")
        idx = self.device.index if self.device.index is not None else torch.cuda.current_device()
        traces = snap.get("device_traces", [])
        ent = traces[idx] if idx < len(traces) else []
        return [(e["addr"], e["size"]) for e in ent if e.get("action") == "alloc"]

    def sizes(self, allocs):
        """Requested sizes of self.addrs from the history's alloc entries: the last entries
        of the history are the capture's (aligned from the end, address by address);
        None where the history lost an entry (its ring buffer filled)."""
        out = [None] * len(self.addrs)
        j = len(allocs) - 1
        for i in range(len(self.addrs) - 1, -1, -1):
            k = j
            while k >= 0 and allocs[k][0] != self.addrs[i]:
                k -= 1
            if k < 0:
                break
            out[i] = allocs[k][1]
            j = k - 1
        return out


"""_timing.py — each captured op's GPU time from a torch.profiler run of the captured
iteration: capture wraps every op it records in a record_function range "memsim#ID", and
the kernels PyTorch's profiler attributes to the ops inside that range are that op's. Used
by memsim.capture on CUDA; the host times are _host.py's."""


def kernel_times(events):
    """{op id: microseconds of GPU kernels launched inside its range}, from the profile's
    events (prof.events())."""
    out = {}
    for e in events:
        name = getattr(e, "name", "")
        if not name.startswith("memsim#"):
            continue
        try:
            oid = int(name[7:])
        except ValueError:
            continue
        out[oid] = out.get(oid, 0.0) + _subtree_us(e)
    return out


def _subtree_us(e):
    total, stack = 0.0, [e]
    while stack:
        x = stack.pop()
        for k in getattr(x, "kernels", []) or []:
            total += float(getattr(k, "duration", 0.0) or 0.0)
        stack.extend(getattr(x, "cpu_children", []) or [])
    return total

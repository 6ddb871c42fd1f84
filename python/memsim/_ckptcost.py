"""_ckptcost.py — what gradient checkpointing costs the host on the program's own block, in
its own process: one of the model's repeated blocks (its layers) is run on the inputs it
had in the last timed plain step, forward then backward, plainly and under
torch.utils.checkpoint (non-reentrant, the way transformers' gradient_checkpointing_enable()
wraps a GradientCheckpointingLayer), and the host time of each is taken without a profiler.
Per checkpointed layer:

  fwd_us  the checkpointed forward's host time less the plain forward's (the wrapper, the
          RNG and device-state stash, a pack hook per saved tensor, less the saving it
          avoids);
  bwd_us  the checkpointed backward's less the plain backward's and less the plain forward's
          (the recomputation's own ops are charged again from their captured host times;
          this is the unpack hooks, the recomputation's frame and its pack hooks).

memsim charges these where the trace gives them instead of the machine profile's
host.ckpt_* and host.recompute_layer_us (sim/exec_fw.c; docs/CAPTURE.md, "Checkpointing's
host cost"). Used by memsim.capture (_capture.py) with host timing; knows no trace format.
The block's parameters' gradients, the input's gradient and the RNG states are put back, so
the program's step after it runs as it would have."""

import functools
import statistics
import time


class Recorder:
    """A forward pre-hook on one block keeping the inputs of its last call (detached: the
    autograd graph of that step is not held)."""

    def __init__(self, torch, block):
        self.torch, self.block, self.inputs = torch, block, None
        try:
            self.handle = block.register_forward_pre_hook(self._hook, with_kwargs=True)
        except TypeError:       # PyTorch before 2.0: no keyword arguments to the hooks
            self.handle = block.register_forward_pre_hook(
                lambda m, args: self._hook(m, args, {}))

    def _hook(self, _m, args, kwargs):
        from torch.utils._pytree import tree_map as tmap

        def cut(v):
            return v.detach() if isinstance(v, self.torch.Tensor) else v
        self.inputs = (tmap(cut, tuple(args)), tmap(cut, dict(kwargs)))

    def remove(self):
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


def _checkpointed(torch, block):
    """A callable running block under non-reentrant checkpoint: transformers' own path where
    the block is a GradientCheckpointingLayer (its flag and function set around that call
    alone, as gradient_checkpointing_enable() sets them for good), else checkpoint()."""
    import torch.utils.checkpoint as tuc
    ck = functools.partial(tuc.checkpoint, use_reentrant=False)
    if "GradientCheckpointingLayer" not in [c.__name__ for c in type(block).__mro__]:
        return lambda a, k: ck(block, *a, **k)

    def run(a, k):
        old = (block.__dict__.get("gradient_checkpointing"),
               block.__dict__.get("_gradient_checkpointing_func"))
        block.gradient_checkpointing = True
        block._gradient_checkpointing_func = ck
        try:
            return block(*a, **k)
        finally:
            for name, v in zip(("gradient_checkpointing", "_gradient_checkpointing_func"), old):
                if v is None:
                    block.__dict__.pop(name, None)
                else:
                    setattr(block, name, v)
    return run


def measure(torch, block, inputs, device, reps=5, warmup=2):
    """Host microseconds of the block's plain and checkpointed forward and backward
    (medians of reps, alternating, after warmup of each), and the per-layer costs fwd_us,
    bwd_us (see the module's comment); None when the block's output has no tensor that
    needs a gradient."""
    from ._capture import _first_tensor     # the capture's own (ModelOutput included)
    args, kwargs = inputs
    if not args or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
        return None
    cuda = device is not None and getattr(device, "type", "") == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    rng = torch.get_rng_state()
    rng_dev = torch.cuda.get_rng_state(device) if cuda else None
    params = list(block.parameters())
    grads = [p.grad for p in params]
    for p in params:        # kept aside: a backward would add into them in place
        p.grad = None
    h = args[0].detach().requires_grad_(True)
    a = (h,) + tuple(args[1:])
    ck_run = _checkpointed(torch, block)
    runs = {"plain": lambda: block(*a, **kwargs), "ckpt": lambda: ck_run(a, kwargs)}
    times = {m: ([], []) for m in runs}
    try:
        for i in range(warmup + reps):
            for mode, run in runs.items():
                sync()
                t0 = time.perf_counter()
                y = _first_tensor(run(), torch)
                t1 = time.perf_counter()
                if y is None or not y.requires_grad:
                    return None
                torch.autograd.backward(y, grad_tensors=torch.ones_like(y))
                t2 = time.perf_counter()
                sync()
                del y
                h.grad = None
                for p in params:
                    p.grad = None
                if i >= warmup:
                    times[mode][0].append((t1 - t0) * 1e6)
                    times[mode][1].append((t2 - t1) * 1e6)
    finally:
        for p, g in zip(params, grads):
            p.grad = g
        torch.set_rng_state(rng)
        if cuda:
            torch.cuda.set_rng_state(rng_dev, device)
    med = {m: (statistics.median(f), statistics.median(b)) for m, (f, b) in times.items()}
    (pf, pb), (cf, cb) = med["plain"], med["ckpt"]
    return dict(plain_fwd_us=pf, plain_bwd_us=pb, ckpt_fwd_us=cf, ckpt_bwd_us=cb,
                fwd_us=max(cf - pf, 0.0), bwd_us=max(cb - pb - pf, 0.0), reps=reps)

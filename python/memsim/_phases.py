"""_phases.py — the host time of each phase (forward, backward, optimizer) of plain training
steps, by time stamps alone: a forward pre-hook on the model, a wrapper around
torch.autograd.backward and one around the optimizer's step, nothing per op. The host is
delayed by the GPU only where the program synchronizes or CUDA's launch queue is full, so a
phase's time here is an upper bound of the host's own time for it that no profiler inflates;
each timed step starts on a drained device (the timer synchronizes before its forward,
outside its time), so that bound holds no wait for an earlier step's kernels
(torch.profiler adds to every op it sees, even with CUDA activity alone). memsim.capture
(_capture.py) runs these steps first, before it installs anything (its allocator trace
stays on for the rest of the process), then the captured and the profiled ones, and scales
the profiled ops' host times of a phase down to this bound (scale_host); knows no trace
format."""

import time

PHASES = ("fwd", "bwd", "opt")


class PhaseTimer:
    """Times `iterations` plain steps from the next forward call on; on_done(module, args)
    is called from the forward pre-hook of the call after the last (the timer's hooks are
    gone by then)."""

    def __init__(self, torch, model, optimizer, iterations, on_done, drain=None):
        self.torch, self.model, self.opt = torch, model, optimizer
        self.iterations, self.on_done = iterations, on_done
        self.drain = drain         # called between a step's end and the next one's start
        self.steps = []            # per step: {"fwd0", "bwd0", "opt0", "end"} perf_counter s
        self.cur = None
        self.handle = None
        self.orig_backward = None
        self.orig_step = None
        self.done = False

    def arm(self):
        """Installs the hooks; the next forward call begins the first step."""
        torch, timer = self.torch, self
        self.cur = None
        self.armed = True
        self.handle = self.model.register_forward_pre_hook(self._model_pre)
        self.orig_backward = torch.autograd.backward

        def backward(*a, **k):
            if timer.cur is not None and "bwd0" not in timer.cur:
                timer.cur["bwd0"] = time.perf_counter()
            return timer.orig_backward(*a, **k)
        torch.autograd.backward = backward
        if self.opt is not None:
            self.orig_step = self.opt.step

            def step(*a, **k):
                if timer.cur is not None and "opt0" not in timer.cur:
                    timer.cur["opt0"] = time.perf_counter()
                return timer.orig_step(*a, **k)
            self.opt.step = step

    def _model_pre(self, m, args):
        now = time.perf_counter()
        if self.done:
            return
        # each timed step starts on an idle device, outside its time: steps run back to
        # back would otherwise begin behind the last one's kernels, and the first wait (a
        # .item(), a full launch queue) would count the GPU's time as the host's. The
        # drain also ends the step before it on the GPU: forward to drained is that step's
        # whole time in this process (wall_us), what a prediction from it is of.
        if self.drain is not None:
            self.drain()
        if self.cur is not None:
            self.cur["end"] = now
            if self.drain is not None:
                self.cur["drained"] = time.perf_counter()
            self.steps.append(self.cur)
        if len(self.steps) >= self.iterations:
            self.cur = None
            self.remove()
            self.done = True
            self.on_done(m, args)
        else:
            self.cur = {"fwd0": time.perf_counter()}

    def finish(self):
        """The block ended before the step after the last timed one: the open step ends now."""
        if self.cur is not None:
            self.cur["end"] = time.perf_counter()
            self.steps.append(self.cur)
            self.cur = None
        self.remove()

    def remove(self):
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        if self.orig_backward is not None:
            self.torch.autograd.backward = self.orig_backward
            self.orig_backward = None
        if self.orig_step is not None:
            try:
                del self.opt.step          # the class's step again
            except AttributeError:
                self.opt.step = self.orig_step
            self.orig_step = None

    def phase_us(self):
        """{phase: the median over the timed steps of its host time, microseconds}, only the
        phases every step showed (a step without backward or optimizer has fewer)."""
        per = {p: [] for p in PHASES}
        for s in self.steps:
            b, o, e = s.get("bwd0"), s.get("opt0"), s.get("end")
            if b is not None:
                per["fwd"].append(b - s["fwd0"])
            if b is not None and o is not None:
                per["bwd"].append(o - b)
            if o is not None and e is not None:
                per["opt"].append(e - o)
        out = {}
        for p, v in per.items():
            if v and len(v) == len(self.steps):
                v = sorted(v)
                out[p] = 1e6 * v[len(v) // 2]
        return out


def step_us(timer):
    """Each timed step's host time, forward to the end of its optimizer phase (the next
    forward call), microseconds, in the order they ran; [] when a step lacks a phase."""
    out = []
    for s in timer.steps:
        if s.get("end") is None or s.get("fwd0") is None:
            return []
        out.append(1e6 * (s["end"] - s["fwd0"]))
    return out


def scale_host(ops, phase_us):
    """Scales each phase's ops' host_us so that their sum is at most the phase's timed host
    time (never up: the timed time is an upper bound, the GPU may have held the host).
    Returns {phase: (profiled sum us, timed us, factor)}."""
    out = {}
    for p, bound in phase_us.items():
        mine = [o for o in ops if o.phase == p and o.host_us]
        total = sum(o.host_us for o in mine)
        f = min(1.0, bound / total) if total > 0 else 1.0
        for o in mine:
            o.host_us *= f
        out[p] = (total, bound, f)
    return out



def wall_us(timer):
    """Each timed step's whole time in microseconds, forward to the device drained after its
    optimizer (host and GPU), in the order they ran; [] without a drain or when a step
    lacks it."""
    out = []
    for st in timer.steps:
        if st.get("drained") is None or st.get("fwd0") is None:
            return []
        out.append(1e6 * (st["drained"] - st["fwd0"]))
    return out

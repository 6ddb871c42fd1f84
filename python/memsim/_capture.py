"""_capture.py — records training iterations of a PyTorch program as a memsim workload trace
(traces/FORMAT.md) that every policy can plan: each allocation and free, each tensor's class
and layer, the aten ops in program order with phase, FLOPs and (on CUDA) measured kernel
time, and the iteration, phase and layer marks the hf generator writes (traces/gen_hf.c).
The public entry points are memsim.capture (a context manager) and memsim.Capture
(start/stop); docs/CAPTURE.md says what is recorded and what is not.

How: a TorchDispatchMode sees every aten op below autograd, forward and backward, in
program order; torch.autograd.graph.saved_tensors_hooks tells which forward tensors autograd
saves (skeletal activations); module hooks on the model's repeated block give the layers
(forward pre/post hooks, and gradient hooks on each block's input and output for the
backward); torch.autograd.backward and optimizer.step are wrapped for the phases. On CPU a
storage's lifetime is the lifetime of the tensors that hold it (weak-reference finalizers);
on CUDA the caching allocator's own requests are the allocations (memsim._cuda)."""

import gc
import os
import sys
import threading
import warnings
import weakref

from . import _layers, _ops, _pyrefs
from ._trace import Trace

MIN_TORCH = (1, 13)


class CaptureError(RuntimeError):
    """Capture cannot run here (no GPU where one is asked for, an unsupported PyTorch, CUDA
    graph capture in progress) or was used wrongly; the message says which."""


def _torch_version(torch):
    v = torch.__version__.split("+")[0].split(".")
    try:
        return int(v[0]), int("".join(c for c in v[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def _storage(t):
    """(data pointer, bytes) of a tensor's storage, or None (no storage: sparse, meta,
    nested, a tensor subclass without one)."""
    try:
        s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        n = s.nbytes()
        p = s.data_ptr()
    except Exception:
        return None
    if not p or not n:
        return None
    return p, int(n)


def _no_modes():
    try:
        from torch.utils._python_dispatch import _disable_current_modes
        return _disable_current_modes()
    except ImportError:                                   # PyTorch 1.13
        from torch.utils._python_dispatch import _pop_mode_temporarily
        return _pop_mode_temporarily()


def _tensors(obj, torch):
    from torch.utils._pytree import tree_flatten
    flat, _ = tree_flatten(obj)
    return [x for x in flat if isinstance(x, torch.Tensor)]


def _first_tensor(obj, torch):
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        for x in obj:
            t = _first_tensor(x, torch)
            if t is not None:
                return t
    if hasattr(obj, "to_tuple"):
        return _first_tensor(obj.to_tuple(), torch)
    return None


def _early_stop_off(torch):
    """Turns torch.utils.checkpoint's early stop off for the rest of the process (PyTorch 2.1
    and later; a warning the first time). A non-reentrant checkpoint's recomputation with
    early stop ends by raising through the ops it runs; each tensor freed on the way calls the
    allocator trace's Python hooks with that exception set, and PyTorch fails there (a
    SystemError from dropout: GPT-2 large with gradient_checkpointing_enable() on the H200).
    Those hooks stay for the rest of the process once a CUDA capture has begun (PyTorch cannot
    turn its GPU trace off again: _cuda.py), so early stop cannot come back after the
    capture either: the plain steps after it, and any later checkpointed training in the
    process, recompute each block's whole forward."""
    import torch.utils.checkpoint as cp
    if not hasattr(cp, "_enable_checkpoint_early_stop") or \
            cp._enable_checkpoint_early_stop is False:
        return
    cp._enable_checkpoint_early_stop = False
    warnings.warn("memsim.capture: torch.utils.checkpoint's early stop is off for the rest of "
                  "this process (after a CUDA capture PyTorch calls the allocator trace's "
                  "Python hooks on every allocation and free, and an early stop raising "
                  "through them fails: docs/CAPTURE.md)", RuntimeWarning, stacklevel=3)


class Capture:
    """Records from start() to stop() (or `iterations` iterations, whichever ends first)
    and writes the trace at stop(ok=True). See memsim.capture for the arguments."""

    def __init__(self, path, model=None, optimizer=None, iterations=1, timing=True,
                 layers=None, device=None, host_timing=None, host_steps=1,
                 host_profiles=None):
        import torch
        self.torch = torch
        if _torch_version(torch) < MIN_TORCH:
            raise CaptureError("memsim.capture needs PyTorch >= %d.%d; this is %s" %
                               (MIN_TORCH + (torch.__version__,)))
        if not isinstance(iterations, int) or iterations < 1:
            raise CaptureError("iterations must be a positive integer, got %r" % (iterations,))
        if isinstance(host_steps, bool) or not isinstance(host_steps, int) or host_steps < 1:
            raise CaptureError("host_steps must be a positive integer, got %r" % (host_steps,))
        self.host_steps = host_steps
        # host timing: where the two profiles it matched go (_host.dump_profiles), for
        # studying the match away from the GPU; None writes nothing
        self.host_profiles = os.fspath(host_profiles) if host_profiles else None
        self.path = os.fspath(path)
        self.model = model
        self.opt = optimizer
        self.iterations = iterations
        self.timing = bool(timing)
        self.blocks = _layers.resolve(model, layers)
        self.device = self._device(device)
        self.cuda = self.device.type == "cuda"
        if host_timing not in (None, True, False, "launches", "ops"):
            raise CaptureError("host_timing must be True, False, 'launches' or 'ops', got %r"
                               % (host_timing,))
        self.host_how = host_timing if isinstance(host_timing, str) else None
        # off unless asked for: it needs the block to run the step three times (timed,
        # captured, profiled); experiments/capture uses it (docs/CAPTURE.md, "Host time")
        self.host_timing = bool(host_timing)
        if self.cuda:
            from . import _cuda
            why = _cuda.supported()
            if why:
                raise CaptureError(why)
        self.trace = Trace()
        self.live = {}             # storage pointer -> its Tensor record
        self.refs = {}             # CPU: storage pointer -> live tensors we hold weakly
        self.lock = threading.RLock()
        self.tls = threading.local()
        self.recording = False
        self.started = False
        self.phase, self.layer = "fwd", -1       # what the next record belongs to
        self.emitted = (None, None)
        self.iter = 0
        self.cur_op = None
        self.mod_stack = []
        self.handles = []
        self.param_info = {}       # storage pointer -> (name, layer)
        self.tokens = None         # (batch, seq) of the model's integer input
        self.autocast = False
        self.unknown_frees = 0
        self.unseen = 0
        self.prof = None
        self.kernel_us = {}
        self.cap_events = None     # the captured iterations' profile (CUDA timing)
        self.plain_prof = None     # the plain iterations after them (host timing)
        self.timer = None          # the plain iterations timed by phase before those
        self.allocs = None         # CUDA: the allocator history, taken when recording ends
        self.host_info = None
        self.ckpt_rec = None       # host timing: the inputs of one block, for _ckptcost
        self.ckpt_cost = None
        # when the forward lets go of each saved tensor (_pyrefs.py); None where the
        # interpreter's reference counts cannot say
        self.pyrefs = _pyrefs.Tracker() if _pyrefs.available() else None
        self.n_pyrefs = 0

    # ---- setup ----

    def _device(self, device):
        torch = self.torch
        if device is not None:
            d = torch.device(device)
        elif self.model is not None and any(True for _ in self.model.parameters()):
            d = next(self.model.parameters()).device
        else:
            d = torch.device("cpu")
        if d.type == "cuda":
            if not torch.cuda.is_available():
                raise CaptureError("the model is on %s but CUDA is not available" % d)
            if hasattr(torch.cuda, "is_current_stream_capturing") and \
                    torch.cuda.is_current_stream_capturing():
                raise CaptureError("cannot capture inside CUDA graph capture: the graph's "
                                   "replays allocate nothing; capture the eager step")
            if d.index is None:
                d = torch.device("cuda", torch.cuda.current_device())
        elif d.type != "cpu":
            raise CaptureError("capture records CUDA or CPU tensors; the model is on %s" % d)
        return d

    def _on_device(self, t):
        return t.device.type == self.device.type and \
            (self.device.type != "cuda" or t.device.index == self.device.index)

    def _busy(self):
        return getattr(self.tls, "busy", 0)

    def _enter(self):
        self.tls.busy = getattr(self.tls, "busy", 0) + 1

    def _leave(self):
        self.tls.busy -= 1

    def start(self):
        if self.started:
            raise CaptureError("this capture was already started")
        self.started = True
        if self.host_timing:
            # the first iterations run plain, timed by phase, before anything of the
            # capture is installed (its allocator trace cannot be removed again: _cuda.py)
            from . import _phases
            dev = self.device
            drain = (lambda: self.torch.cuda.synchronize(dev)) if self.cuda else None
            self.timer = _phases.PhaseTimer(self.torch, self.model, self.opt,
                                            self.host_steps, self._start_recording,
                                            drain=drain)
            self.timer.arm()
            if self.blocks and self.model is not None:
                from . import _ckptcost
                self.ckpt_rec = _ckptcost.Recorder(self.torch,
                                                   self.blocks[1 if len(self.blocks) > 1 else 0])
            return self
        self._start_recording()
        return self

    def _start_recording(self, m=None, args=None):
        """Installs the capture and begins the first recorded iteration: at start(), or
        with host timing at the forward call after the timed iterations (m, args: that
        call's model pre-hook arguments)."""
        torch = self.torch
        self._ckpt_probe()
        self._enter()
        try:
            self._note_params()
            self._prelude()
            self._meta()
            self._install()
            self.recording = True
            self._mark_iter()
        except BaseException:
            self._uninstall()
            raise
        finally:
            self._leave()
        if m is not None:
            self._model_pre(m, args)       # this call's own pre-hook ran before the install

    def _ckpt_probe(self):
        """With host timing, before anything is installed: what checkpointing would cost
        the host on one of the model's blocks, on its last timed step's inputs
        (_ckptcost.py)."""
        rec, self.ckpt_rec = self.ckpt_rec, None
        if rec is None:
            return
        rec.remove()
        if rec.inputs is None or not self.model.training:
            return
        from . import _ckptcost
        try:
            self.ckpt_cost = _ckptcost.measure(self.torch, rec.block, rec.inputs,
                                               self.device if self.cuda else None)
            if self.ckpt_cost is not None:
                self.ckpt_cost["layer"] = self.blocks.index(rec.block)
        except Exception as e:          # the program's block does not run on its own
            print("memsim.capture: checkpointing's host cost not measured (%s: %s)" %
                  (type(e).__name__, e), file=sys.stderr)
            self.ckpt_cost = None

    def _note_params(self):
        blk_of = {}
        for i, b in enumerate(self.blocks):
            for p in b.parameters():
                blk_of[id(p)] = i
        if self.model is not None:
            root = [b for b in self.blocks]
            names = {}
            for n, m in self.model.named_modules():
                for i, b in enumerate(root):
                    if m is b:
                        names[i] = n
            for n, p in self.model.named_parameters():
                st = _storage(p)
                if st is None:
                    continue
                layer = blk_of.get(id(p), -1)
                short = n
                if layer >= 0 and names.get(layer) and n.startswith(names[layer] + "."):
                    short = "L%d.%s" % (layer, n[len(names[layer]) + 1:])
                self.param_info[st[0]] = (short, layer)

    def _opt_params(self):
        if self.opt is None:
            return []
        return [p for g in self.opt.param_groups for p in g["params"]]

    def _prelude_tensor(self, t, cls, name, layer=-1):
        st = _storage(t)
        if st is None or not self._on_device(t) or st[0] in self.live:
            return
        rec = self.trace.new_tensor(st[1], cls, layer, "none", None, name, prelude=True)
        rec.key = st[0]
        self.live[st[0]] = rec
        self._hold(t, st[0])

    def _prelude(self):
        """Tensors live when the capture starts: parameters, buffers, gradients, optimizer
        states (in module order, as a model built on the device allocated them); on CUDA
        also every other block the allocator holds (workspaces, inputs)."""
        if self.model is not None:
            for n, p in self.model.named_parameters():
                st = _storage(p)
                name, layer = self.param_info.get(st[0], (n, -1)) if st else (n, -1)
                self._prelude_tensor(p, "param", name, layer)
            for n, b in self.model.named_buffers():
                self._prelude_tensor(b, "other", n)
        params = list(self.model.parameters()) if self.model is not None else []
        params += [p for p in self._opt_params() if all(p is not q for q in params)]
        for p in params:
            if p.grad is not None:
                st = _storage(p)
                name, layer = self.param_info.get(st[0], ("p", -1)) if st else ("p", -1)
                self._prelude_tensor(p.grad, "grad", name + ".grad", layer)
        for p, state in (self.opt.state.items() if self.opt is not None else []):
            st = _storage(p)
            name, layer = self.param_info.get(st[0], ("p", -1)) if st else ("p", -1)
            for k, v in state.items():
                if isinstance(v, self.torch.Tensor):
                    self._prelude_tensor(v, "optstate", "%s.%s" % (name, k), layer)
        if self.cuda:
            from . import _cuda
            self.alloc_events = _cuda.AllocatorEvents(self.device, self._cuda_alloc,
                                                      self._cuda_free)
            self.alloc_events.start()
            for addr, size in self.alloc_events.start_blocks:
                if addr not in self.live and size:
                    rec = self.trace.new_tensor(size, "other", -1, "none", None, "live_at_start",
                                                prelude=True)
                    rec.key = addr
                    self.live[addr] = rec
            # the allocator's sizes for the tensors found above, as it was asked for them
            sizes = dict(self.alloc_events.start_blocks)
            for rec in self.trace.prelude:
                if rec.key in sizes and sizes[rec.key]:
                    rec.bytes = sizes[rec.key]

    def _meta(self):
        tr, torch = self.trace, self.torch
        name = type(self.model).__name__ if self.model is not None else "pytorch-program"
        cfg = getattr(self.model, "config", None)
        tr.set_meta("model", getattr(cfg, "name_or_path", "") or name)
        tr.set_meta("tp", 1)
        tr.set_meta("cp", 1)
        tr.set_meta("dp", 1)
        if self.blocks:
            tr.set_meta("layers", len(self.blocks))
        for key, attr in (("hidden", "hidden_size"), ("heads", "num_attention_heads"),
                          ("kv_heads", "num_key_value_heads"), ("vocab", "vocab_size")):
            v = getattr(cfg, attr, None)
            if isinstance(v, int) and v > 0:
                tr.set_meta(key, v)
        if self.model is not None:
            tr.set_meta("params", sum(p.numel() for p in self.model.parameters()))
            active = self._active_params(cfg)
            if active:
                tr.set_meta("active_params", active)
        tr.set_meta("iterations", self.iterations)
        tr.set_meta("generator", "memsim-capture-1")
        tr.set_meta("framework", "pytorch")
        tr.set_meta("captured.torch", torch.__version__)
        tr.set_meta("captured.device", torch.cuda.get_device_name(self.device)
                    if self.cuda else "cpu")
        tr.set_meta("captured.model_class", name)

    # ---- hooks ----

    def _install(self):
        torch = self.torch
        from torch.utils._python_dispatch import TorchDispatchMode
        cap = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return cap._on_op(func, args, kwargs or {})

        self.mode = _Mode()
        self.saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self.saved_hooks.__enter__()
        self.mode.__enter__()
        if self.cuda:
            _early_stop_off(torch)
        self.fmode = None
        if self.pyrefs is not None:
            # the tensors the program itself holds: a view autograd makes is another
            # object than the one the dispatch mode below it sees (_pyrefs.py)
            from torch.overrides import TorchFunctionMode

            class _FMode(TorchFunctionMode):
                def __torch_function__(self, func, types, args=(), kwargs=None):
                    out = func(*args, **(kwargs or {}))
                    try:
                        cap._track_all(out)
                    except Exception:      # bookkeeping never breaks the program: this
                        pass               # tensor is then held by no tracked object
                    return out

            self.fmode = _FMode()
            self.fmode.__enter__()
        if self.model is not None:
            try:       # model(**batch): the token ids come as keywords (PyTorch >= 2.0)
                h = self.model.register_forward_pre_hook(self._model_pre, with_kwargs=True)
            except TypeError:
                h = self.model.register_forward_pre_hook(self._model_pre)
            self.handles.append(h)
            for n, m in self.model.named_modules():
                self.handles.append(m.register_forward_pre_hook(self._mod_push(n, m)))
                self.handles.append(m.register_forward_hook(self._mod_pop))
        for i, b in enumerate(self.blocks):
            self.handles.append(b.register_forward_pre_hook(self._block_pre(i)))
            self.handles.append(b.register_forward_hook(self._block_post(i)))
        self.orig_backward = torch.autograd.backward

        def backward(*a, **k):
            with cap.lock:
                if cap.recording:
                    cap._let_go()              # what the forward dropped before this
                    if cap.pyrefs is not None:
                        cap.pyrefs.clear()
                    cap.phase, cap.layer = "bwd", -1
            return cap.orig_backward(*a, **k)
        torch.autograd.backward = backward
        if self.opt is not None:
            self.orig_step = self.opt.step

            def step(*a, **k):
                cap._step_pre()
                r = cap.orig_step(*a, **k)
                cap._step_post()
                return r
            self.opt.step = step
        if self.cuda and self.timing:
            self._start_profiler()

    def _uninstall(self, keep_saved=False):
        """Removes what _install put in place; keep_saved leaves the saved-tensor hooks (a
        step's own saved_tensors_hooks may lie above them; they do nothing unrecorded)."""
        torch = self.torch
        for h in self.handles:
            h.remove()
        self.handles = []
        if getattr(self, "fmode", None) is not None:
            self.fmode.__exit__(None, None, None)
            self.fmode = None
        if getattr(self, "mode", None) is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
        if getattr(self, "saved_hooks", None) is not None and not keep_saved:
            self.saved_hooks.__exit__(None, None, None)
            self.saved_hooks = None
        if getattr(self, "orig_backward", None) is not None:
            torch.autograd.backward = self.orig_backward
            self.orig_backward = None
        if getattr(self, "orig_step", None) is not None:
            try:
                del self.opt.step          # the class's step again
            except AttributeError:
                self.opt.step = self.orig_step
            self.orig_step = None

    def _mod_push(self, name, mod):
        tname = type(mod).__name__

        def hook(m, args):
            self.mod_stack.append((name, tname))
        return hook

    def _mod_pop(self, m, args, out):
        if self.mod_stack:
            self.mod_stack.pop()

    def _model_pre(self, m, args, kwargs=None):
        torch = self.torch
        with self.lock:
            if self.phase in ("bwd", "opt") and self.recording:
                self.iter += 1
                if self.iter >= self.iterations:
                    self.recording = False
                    self._stop_profiler()
                    if self.host_timing:
                        self._begin_plain()
                else:
                    self._mark_iter()
            if self.tokens is None:
                kw = kwargs or {}
                # input_ids first: position_ids (1, S) may come before it among the keywords
                self._find_tokens(_tensors((kw.get("input_ids"), args, kw), torch))
            if torch.is_autocast_enabled():
                self.autocast = True

    def _active_params(self, cfg):
        """A mixture of experts' parameters a token passes through (the model FLOPs of MFU,
        as the generator's meta active_params): all but the experts' parameters, and k of
        every E of those, E and k from the config (num_local_experts or num_experts, and
        num_experts_per_tok); the experts are the parameters under a module named
        `experts`. None for a dense model or one whose config does not say."""
        e = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
        k = getattr(cfg, "num_experts_per_tok", None)
        if not (isinstance(e, int) and isinstance(k, int) and 0 < k < e):
            return None
        params = dict(self.model.named_parameters())
        total = sum(p.numel() for p in params.values())
        expert = sum(p.numel() for n, p in params.items() if ".experts." in "." + n)
        if not expert:
            return None
        return total - expert + expert * k // e

    def _find_tokens(self, tensors):
        """(batch, seq) from the first 2-D integer tensor: the model's token ids."""
        torch = self.torch
        for t in tensors:
            if t.dtype in (torch.int64, torch.int32) and t.dim() == 2:
                self.tokens = (int(t.shape[0]), int(t.shape[1]))
                return

    def _mark_iter(self):
        self.trace.mark("iter %d" % self.iter)
        self.phase, self.layer = "fwd", -1
        self.emitted = (None, None)
        self._sync_marks()

    def _sync_marks(self):
        """Marks are written when a record follows them, so that a layer entered and left
        without records leaves no empty section; a phase mark is followed by its layer's."""
        ph, ly = self.emitted
        if ph != self.phase:
            self.trace.mark("phase " + self.phase)
            ly = None
        if ly != self.layer:
            self.trace.mark("layer %d" % self.layer)
        self.emitted = (self.phase, self.layer)

    def _block_pre(self, i):
        torch = self.torch

        def hook(m, args):
            with self.lock:
                if not self.recording or self.phase != "fwd":
                    return
                self.layer = i
                x = _first_tensor(args, torch)
                if x is None:
                    return
                st = _storage(x)
                rec = self.live.get(st[0]) if st else None
                if rec is not None and rec.cls is None:
                    rec.name = "L%d.input" % i
                    rec.layer = i
                    rec.saved = True        # checkpointing keeps it: a skeletal tensor
                if x.requires_grad:
                    x.register_hook(self._grad_hook_in(i))
        return hook

    def _block_post(self, i):
        torch = self.torch

        def hook(m, args, out):
            with self.lock:
                if not self.recording or self.phase != "fwd":
                    return
                self._let_go()                 # the block's locals went as it returned
                self.layer = -1
                y = _first_tensor(out, torch)
                st = _storage(y) if y is not None else None
                rec = self.live.get(st[0]) if st else None
                if rec is not None and rec.cls is None and rec.layer == i:
                    # what the block hands on belongs to what uses it next: the next
                    # block's input (renamed by its pre-hook) or the head's
                    rec.layer = -1
                    rec.name = "L%d.output" % i
                if y is not None and y.requires_grad:
                    y.register_hook(self._grad_hook_out(i))
        return hook

    def _grad_hook_out(self, i):
        def hook(g):
            with self.lock:
                if self.recording and self.phase == "bwd":
                    self.layer = i
        return hook

    def _grad_hook_in(self, i):
        def hook(g):
            with self.lock:
                if self.recording and self.phase == "bwd" and self.layer == i:
                    self.layer = -1
        return hook

    def _step_pre(self):
        with self.lock:
            if not self.recording:
                return
            self.phase, self.layer = "opt", -1
            for p in self._opt_params():
                if p.grad is None:
                    continue
                st, pst = _storage(p.grad), _storage(p)
                rec = self.live.get(st[0]) if st else None
                if rec is not None and rec.cls is None:
                    rec.cls = "grad"
                    info = self.param_info.get(pst[0]) if pst else None
                    if info:
                        rec.name, rec.layer = info[0] + ".grad", info[1]

    def _step_post(self):
        with self.lock:
            if not self.recording:
                return
            for p, state in self.opt.state.items():
                pst = _storage(p)
                info = self.param_info.get(pst[0], ("p", -1)) if pst else ("p", -1)
                for k, v in state.items():
                    st = _storage(v) if isinstance(v, self.torch.Tensor) else None
                    rec = self.live.get(st[0]) if st else None
                    if rec is not None and rec.cls is None:
                        rec.cls = "optstate"
                        rec.name, rec.layer = "%s.%s" % (info[0], k), info[1]

    # ---- saved tensors ----

    def _pack(self, t):
        if getattr(self, "mode", None) is None:
            return t                  # the plain iterations after the captured ones
        if t.dim() == 0 and t.device.type == "cpu":
            # a Python number autograd saved (x / 2.0): kept as a number, since PyTorch 1.13
            # hands such a tensor to a dispatch mode as a float and then fails on it
            with _no_modes():
                return ("memsim-scalar", t.item(), t.dtype)
        if self._busy() or not self.recording:
            return t
        with self.lock:
            st = _storage(t)
            rec = None
            if st is not None and self.phase == "fwd":
                rec = self.live.get(st[0])
                if rec is not None:
                    rec.saved = True
            if self.cuda or st is None:
                if rec is not None and self.pyrefs is not None:
                    self.pyrefs.packed(t, st[0], rec)    # autograd holds t itself
                return t
            if rec is not None and self.pyrefs is not None:
                self.pyrefs.track(t, st[0], rec)
            # CPU: autograd keeps a saved output through a shallow copy that no Python
            # object holds; a detached tensor held here keeps the storage's count right
            self._enter()
            try:
                d = t.detach()
            finally:
                self._leave()
            self._hold(d, st[0])
            return d

    def _unpack(self, p):
        if isinstance(p, tuple) and len(p) == 3 and p[0] == "memsim-scalar":
            with _no_modes():
                return self.torch.tensor(p[1], dtype=p[2])
        return p

    # ---- storage lifetimes ----

    def _hold(self, t, key):
        """CPU: counts t as a holder of the storage at key; the storage is freed when the
        last holder dies."""
        if self.cuda:
            return
        self.refs[key] = self.refs.get(key, 0) + 1
        weakref.finalize(t, self._release, key)

    def _release(self, key):
        with self.lock:
            n = self.refs.get(key, 0) - 1
            if n > 0:
                self.refs[key] = n
                return
            self.refs.pop(key, None)
            rec = self.live.pop(key, None)
            if rec is not None and self.recording:
                self._sync_marks()
                self.trace.free(rec)

    # ---- the forward's own references (_pyrefs.py) ----

    def _track(self, t, key):
        if self.pyrefs is not None and self.phase == "fwd":
            rec = self.live.get(key)
            if rec is not None:
                self.pyrefs.track(t, key, rec)

    def _track_all(self, out):
        """The tensors a torch function handed the program (the function mode above
        autograd: the very objects its variables hold)."""
        if self.pyrefs is None or self._busy() or not self.recording or self.phase != "fwd":
            return
        with self.lock:
            for t in _tensors(out, self.torch):
                if self._on_device(t):
                    st = _storage(t)
                    if st is not None:
                        self._track(t, st[0])

    def _let_go(self):
        """A zero-time `pyrefs` op, here in program order, reading the saved storages the
        forward's Python references have all let go of since the last one."""
        if self.pyrefs is None or self.phase != "fwd" or not self.recording:
            return
        # only a block's own tensors, while the block runs: a layer's policies may move or
        # drop its tensors once its forward ends, and no plan recomputes outside blocks
        # (and only what an op of the capture made: a tensor from before, such as the
        # model's input, has holders no mode saw)
        recs = [r for r in self.pyrefs.let_go(self.live)
                if r.cls is None and r.producer is not None and r.layer >= 0 and
                r.layer == self.layer]
        if not recs:
            return
        self._sync_marks()
        op = self.trace.new_op("elem", "fwd", self.layer, "pyrefs", "pyrefs")
        op.ins = [r.id for r in recs]
        op.dur_us = 0.0
        self.n_pyrefs += len(recs)

    def _cuda_alloc(self, ptr):
        with self.lock:
            if not self.recording:
                return
            self._sync_marks()
            old = self.live.pop(ptr, None)
            if old is not None:          # a block we thought live: its free was not seen
                self.trace.free(old)
                self.unknown_frees += 1
            op = self.cur_op
            rec = self.trace.new_tensor(0, None, self.layer, self.phase,
                                        op.id if op is not None else None,
                                        (op.name + ".ws") if op is not None else "alloc")
            rec.key = ptr
            rec.saved = None             # not yet a tensor: a workspace unless one claims it
            self.live[ptr] = rec

    def _cuda_free(self, ptr):
        with self.lock:
            rec = self.live.pop(ptr, None)
            if rec is None:
                return
            if self.recording:
                self._sync_marks()
                self.trace.free(rec)

    # ---- ops ----

    def _op_name(self, aname):
        prefix = "L%d." % self.layer if self.layer >= 0 else ""
        where = ""
        if self.phase == "fwd" and self.mod_stack:
            full = self.mod_stack[-1][0]
            if self.layer >= 0:
                parts = full.split(".")
                # the path inside the block: after the block's own index
                for j, p in enumerate(parts):
                    if p == str(self.layer) and j + 1 < len(parts):
                        where = ".".join(parts[j + 1:])
                        break
            else:
                where = full
        elif self.phase == "bwd":
            node = getattr(self.torch._C, "_current_autograd_node", None)
            try:
                n = node() if node else None
                where = n.name() if n is not None else "bwd"
            except Exception:
                where = "bwd"
        return prefix + (where + "." if where else "") + aname

    def _module_type(self):
        return self.mod_stack[-1][1] if self.mod_stack and self.phase == "fwd" else ""

    def _on_op(self, func, args, kwargs):
        torch = self.torch
        if self._busy() or not self.recording:
            return func(*args, **kwargs)
        self._enter()
        try:
            with self.lock:
                ins = [t for t in _tensors((args, kwargs), torch) if self._on_device(t)]
                for t in ins:
                    self._see_input(t)
                view = _ops.is_view(func)
                op = None
                if not view:
                    self._let_go()
                    self._sync_marks()
                    aname = _ops.base_name(func)
                    if self.tokens is None and aname == "embedding" and len(ins) > 1:
                        # a model called with keywords where the forward hook cannot see
                        # them (PyTorch < 2.0): the first embedding's ids are the tokens
                        self._find_tokens(ins[1:2])
                    op = self.trace.new_op(_ops.kind_of(aname, self.phase, self._module_type()),
                                           self.phase, self.layer, self._op_name(aname), aname)
                    self.trace.recs.pop()            # appended again after its outputs
                    self.cur_op = op
            if op is not None and self.prof is not None:
                with torch.autograd.profiler.record_function("memsim#%d" % op.id):
                    self._leave()
                    try:
                        out = func(*args, **kwargs)
                    finally:
                        self._enter()
            else:
                self._leave()
                try:
                    out = func(*args, **kwargs)
                finally:
                    self._enter()
            with self.lock:
                self.cur_op = None
                if not self.recording:
                    return out
                outs = [t for t in _tensors(out, torch) if self._on_device(t)]
                if view:
                    for t in outs:
                        st = _storage(t)
                        if st is not None and st[0] in self.live:
                            self._hold(t, st[0])
                            self._track(t, st[0])
                    return out
                self._finish_op(func, op, args, kwargs, ins, outs)
            return out
        finally:
            self._leave()

    def _see_input(self, t):
        st = _storage(t)
        if st is None or st[0] in self.live:
            return
        info = self.param_info.get(st[0])
        if info or self.cuda:
            # a parameter, or (CUDA, where every request during the capture is seen) a
            # tensor that was there before: live from the start
            cls, name, layer = ("param", info[0], info[1]) if info else ("other", "input", -1)
            rec = self.trace.new_tensor(st[1], cls, layer, "none", None, name, prelude=True)
        else:
            # CPU: made where no op shows it (torch.tensor, from_numpy, a DataLoader) or
            # before the capture: live from its first use; its class from the phase, or
            # the optimizer's state
            self.unseen += 1
            self._sync_marks()
            rec = self.trace.new_tensor(st[1], None, self.layer, self.phase, None, "input")
        rec.key = st[0]
        self.live[st[0]] = rec
        self._hold(t, st[0])

    def _finish_op(self, func, op, args, kwargs, ins, outs):
        aname = op.aten
        mut = _ops.is_mutating(func)
        in_ids, out_ids = [], []
        for t in ins:
            rec = self.live.get(_storage(t)[0]) if _storage(t) else None
            if rec is not None and rec.id not in in_ids:
                in_ids.append(rec.id)
            op.br += t.numel() * t.element_size()
        for k, t in enumerate(outs):
            st = _storage(t)
            if st is None:
                continue
            rec = self.live.get(st[0])
            if rec is None or (self.cuda and rec.saved is None):
                rec = self._new_output(rec, st, op, k, len(outs), t, args)
            self._hold(t, st[0])
            self._track(t, st[0])
            if rec.id not in out_ids:
                out_ids.append(rec.id)
            op.bw += t.numel() * t.element_size()
        if not mut and out_ids and all(i in in_ids for i in out_ids) and \
                not any(r.producer == op.id for r in (self.live.get(k) for k in [
                    _storage(t)[0] for t in outs if _storage(t)]) if r is not None):
            return                    # a view PyTorch does not declare (_unsafe_view)
        op.ins, op.outs = in_ids, out_ids
        op.flops = _ops.flops(func, aname, args, kwargs, outs)
        self._sync_marks()
        self.trace.recs.append(("o", op))

    def _new_output(self, rec, st, op, k, nout, t, args):
        """The record of an op's new storage: made here on CPU; on CUDA the allocation the
        allocator callback recorded during the op, now known to be this tensor."""
        if rec is None:
            self._sync_marks()
            rec = self.trace.new_tensor(st[1], None, self.layer, self.phase, op.id)
            rec.key = st[0]
            self.live[st[0]] = rec
        rec.saved = False
        rec.producer = op.id
        rec.hint = st[1]
        rec.name = self._tensor_name(op, k, nout, args)
        rec.tokshape = self._tok(t)
        return rec

    def _tensor_name(self, op, k, nout, args):
        aname = op.aten
        pre = "L%d." % op.layer if op.layer >= 0 else ""
        if op.kind == "attn" and self.phase == "fwd" and k < 2:
            return pre + ("attn_out" if k == 0 else "attn_lse")
        if aname in ("_to_copy", "to", "copy") and self.phase == "fwd" and args:
            src = args[0]
            st = _storage(src) if isinstance(src, self.torch.Tensor) else None
            info = self.param_info.get(st[0]) if st else None
            if info:
                return info[0] + ".wcast"     # autocast's cached copy of a weight
        base = op.name + ("_out" if nout == 1 else "_out%d" % k)
        return base

    def _tok(self, t):
        """Whether the tensor's size scales with the tokens: its shape has the batch and
        sequence dimensions (or their product) of the model's integer input."""
        if self.tokens is None:
            return False
        b, s = self.tokens
        shape = list(t.shape)
        if b * s in shape:
            return True
        return s in shape and (b in shape or b == 1)

    # ---- timing (CUDA) ----

    def _start_profiler(self):
        torch = self.torch
        try:
            from torch.profiler import profile, ProfilerActivity
            self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            self.prof.__enter__()
        except Exception as e:
            print("memsim.capture: no kernel timing (%s)" % e, file=sys.stderr)
            self.prof = None

    def _stop_profiler(self):
        if self.prof is None or getattr(self, "_prof_done", False):
            return
        self._prof_done = True
        self.torch.cuda.synchronize(self.device)
        self.prof.__exit__(None, None, None)
        from ._timing import kernel_times
        try:
            self.cap_events = list(self.prof.events())
        except Exception:
            self.cap_events = None
        self.kernel_us = kernel_times(self.cap_events or [])

    # ---- host timing: the plain iterations after the captured ones ----

    def _begin_plain(self):
        """The captured iterations are over: the rest of the block runs as the program
        does, without the dispatch mode, the hooks and the allocator callbacks, under a
        profiler whose CPU events and CUDA calls give each op's host time (_host.py)."""
        if self.cuda and self.allocs is None:
            self.allocs = self.alloc_events.stop()
        self._uninstall(keep_saved=True)
        # the capture's records and the profile's events are many Python objects: the
        # collector's full passes over them would land in the profiled step's host times
        gc.collect()
        gc.freeze()
        self.gc_frozen = True
        try:
            from torch.profiler import profile, ProfilerActivity
            from . import _host
            how = self.host_how
            if how is None:
                # CUDA calls alone cost the host least; the aten events only where the
                # captured profile shows no launch to match
                cap = _host.Profile(self.cap_events or [])
                how = "launches" if self.cuda and cap.launches() else "ops"
            acts = ([ProfilerActivity.CPU] if how == "ops" or not self.cuda else []) + \
                ([ProfilerActivity.CUDA] if self.cuda else [])
            self.plain_acts = acts
            self.plain_prof = profile(activities=acts)
            self.plain_prof.__enter__()
        except Exception as e:
            print("memsim.capture: no host timing (%s)" % e, file=sys.stderr)
            self.plain_prof = None

    def _end_plain(self):
        from . import _host, _phases
        ops = self.trace.ops()
        for o in ops:
            if o.aten == "pyrefs":          # no op ran there: no host time of its own
                o.host_us = 0.0
        ops = [o for o in ops if o.aten != "pyrefs"]
        if self.plain_prof is None:
            if self.host_timing:
                print("memsim.capture: no host times: run the step once more inside the "
                      "with block (%d more iteration%s: plain, under the profiler, after the "
                      "captured ones)" % (self.iterations, "s" if self.iterations > 1 else ""),
                      file=sys.stderr)
            return
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
        self.plain_prof.__exit__(None, None, None)
        try:
            events = list(self.plain_prof.events())
        except Exception as e:
            print("memsim.capture: no host timing (%s)" % e, file=sys.stderr)
            return
        self.plain_prof = None
        cost = 0.0
        if self.cuda:
            try:
                cost = _host.profiler_call_cost_us(self.torch, self.device, self.plain_acts)
            except Exception as e:
                print("memsim.capture: the profiler's own cost not measured (%s)" % e,
                      file=sys.stderr)
        plain = _host.Profile(events)
        cap = _host.Profile(self.cap_events) if self.cap_events is not None else None
        self.host_info = _host.host_times(cap, plain, ops, self.cuda, cost)
        if self.host_profiles:
            try:
                _host.dump_profiles(self.host_profiles, cap, plain, ops)
            except OSError as e:
                print("memsim.capture: host profiles not written (%s)" % e, file=sys.stderr)
        self.host_info["call_cost_us"] = cost
        timed = self.timer.phase_us() if getattr(self, "timer", None) is not None else {}
        # the trace's ops are `iterations` steps'; the timed bound is one step's (a median)
        timed = {p: v * self.iterations for p, v in timed.items()}
        self.host_info["phases"] = _phases.scale_host(ops, timed)
        if self.host_info["matched"] == 0 and ops:
            print("memsim.capture: no host times: none of the %d ops matched the plain "
                  "step's profile (%d events)%s" % (len(ops), len(events),
                  "; host_timing='ops' matches by aten name" if self.cuda else ""),
                  file=sys.stderr)

    # ---- the end ----

    def stop(self, ok=True):
        """Ends the capture; with ok the trace is written (PATH appears complete or not at
        all), without it nothing is written."""
        if not self.started:
            raise CaptureError("stop() before start()")
        self._enter()
        try:
            with self.lock:
                self.recording = False
            if self.ckpt_rec is not None:     # the block ended before the captured step
                self.ckpt_rec.remove()
                self.ckpt_rec = None
            if getattr(self, "timer", None) is not None and not self.timer.done:
                self.timer.finish()           # nothing of the capture was installed yet
                if ok:
                    raise CaptureError(
                        "host_timing: the with block ran %d step%s; it needs %d: %d timed, "
                        "then %d captured, then %d profiled" % (
                            len(self.timer.steps), "" if len(self.timer.steps) == 1 else "s",
                            self.host_steps + 2 * self.iterations, self.host_steps,
                            self.iterations, self.iterations))
                return
            if getattr(self, "gc_frozen", False):
                gc.unfreeze()
                self.gc_frozen = False
            self._uninstall()
            if self.cuda:
                self._stop_profiler()
                if self.allocs is None:
                    self.allocs = self.alloc_events.stop()
                self._cuda_sizes(self.allocs)
            if ok and self.host_timing:
                self._end_plain()
            elif self.plain_prof is not None:
                self.plain_prof.__exit__(None, None, None)
                self.plain_prof = None
            if ok:
                self._finish()
                self.trace.write(self.path)
        finally:
            self._leave()

    def _cuda_sizes(self, allocs):
        sizes = self.alloc_events.sizes(allocs)
        recs = [r for k, r in self.trace.recs if k == "a" and r.key is not None and
                r.bytes == 0]
        by_ptr = {}
        for r in recs:
            by_ptr.setdefault(r.key, []).append(r)
        order = {}
        lost = 0
        for ptr, size in zip(self.alloc_events.addrs, sizes):
            lst = by_ptr.get(ptr)
            if not lst:
                continue
            i = order.get(ptr, 0)
            if i < len(lst):
                r = lst[i]
                order[ptr] = i + 1
                if size:
                    r.bytes = size
                else:
                    r.bytes = getattr(r, "hint", 0) or 512
                    lost += 1
        for r in recs:
            if r.bytes == 0:
                r.bytes = getattr(r, "hint", 0) or 512
                lost += 1
        if lost:
            self.trace.set_meta("captured.unsized_allocs", lost)

    def _finish(self):
        tr = self.trace
        if self.tokens:
            tr.set_meta("batch", self.tokens[0])
            tr.set_meta("seq", self.tokens[1])
        if self.autocast:
            tr.set_meta("precision", "amp")
            tr.set_meta("autocast_cache", 1)
        tr.set_meta("captured.timing", "kernels" if self.kernel_us else "none")
        if self.host_timing:
            h = self.host_info or {"method": "none", "matched": 0, "ops": 0, "syncs": 0,
                                   "step_us": 0.0}
            tr.set_meta("captured.host_timing", h["method"])
            tr.set_meta("captured.host_matched", "%d/%d" % (h["matched"], h["ops"]))
            tr.set_meta("captured.host_syncs", h["syncs"])
            tr.set_meta("captured.host_step_us", "%.1f" % h["step_us"])
            tr.set_meta("captured.host_call_cost_us", "%.3f" % h.get("call_cost_us", 0.0))
            for p, (prof_us, timed_us, f) in sorted(h.get("phases", {}).items()):
                # the profiled host time of the phase, its plain steps' timed bound, the
                # factor its ops' host_us were scaled by (docs/CAPTURE.md, "Host time")
                tr.set_meta("captured.host_phase." + p,
                            "%.1f %.1f %.4f" % (prof_us, timed_us, f))
            if getattr(self, "timer", None) is not None:
                from . import _phases
                st = _phases.step_us(self.timer)
                if st:
                    # how much the host moved from step to step: the spread a prediction of
                    # a host-bound step carries (docs/CAPTURE.md, "Host time")
                    tr.set_meta("captured.host_steps_us", ",".join("%.1f" % v for v in st))
                wt = _phases.wall_us(self.timer)
                if wt:
                    # the same steps whole, to the GPU drained: what this process itself
                    # took per plain step, beside which a keep-all prediction is an error of
                    # the model and not of the host's process-to-process spread
                    tr.set_meta("captured.step_wall_us", ",".join("%.1f" % v for v in wt))
            c = self.ckpt_cost
            if c:
                # checkpointing's host cost per layer on this block (docs/CAPTURE.md,
                # "Checkpointing's host cost"); the raw medians after them
                tr.set_meta("captured.ckpt_fwd_layer_us", "%.1f" % c["fwd_us"])
                tr.set_meta("captured.ckpt_bwd_layer_us", "%.1f" % c["bwd_us"])
                tr.set_meta("captured.ckpt_probe",
                            "layer %d plain %.1f %.1f ckpt %.1f %.1f reps %d" % (
                                c["layer"], c["plain_fwd_us"], c["plain_bwd_us"],
                                c["ckpt_fwd_us"], c["ckpt_bwd_us"], c["reps"]))
            if not self.host_info:
                for op in tr.ops():
                    op.host_us, op.host_sync = None, 0
        tr.set_meta("captured.unseen_inputs", self.unseen)
        # saved tensors whose last Python reference in the forward a `pyrefs` op marks
        tr.set_meta("captured.pyrefs", self.n_pyrefs if self.pyrefs is not None else "off")
        for r in tr.tensors():
            if r.cls is None:
                if r.saved is None:
                    r.cls = "workspace"
                elif r.phase == "fwd":
                    r.cls = "act_skel" if r.saved else "act_trans"
                elif r.phase == "bwd":
                    r.cls = "act_trans"
                elif r.phase == "opt":
                    r.cls = "workspace"
                else:
                    r.cls = "other"
            r.tok = 1 if r.cls in ("act_skel", "act_trans") and getattr(r, "tokshape", False) \
                else 0
        if self.kernel_us:
            for op in tr.ops():
                op.dur_us = self.kernel_us.get(op.id, 0.0)


class capture:
    """Context manager: records the training iterations run inside the with block as a
    memsim workload trace at `path` (gzip when it ends in .gz).

        with memsim.capture("step.trace.gz", model=model, optimizer=opt):
            loss = model(**batch).loss; loss.backward(); opt.step(); opt.zero_grad()

    model: the torch.nn.Module trained (its parameters, its blocks for layers, its forward
    for the iteration boundaries); optimizer: its torch.optim.Optimizer (the optimizer
    phase, its states); iterations: how many iterations to record (a forward after a
    backward begins the next; the rest of the block runs unrecorded); timing: on CUDA,
    each op's kernel time from torch.profiler; layers: the model's blocks (a ModuleList,
    a list of modules or an attribute path such as "model.layers") when the automatic
    search (the largest ModuleList of one module class) is not what is wanted;
    host_timing (default off): each op's host (CPU) time and the ops the host synchronizes
    on, measured on plain iterations: the block's first `host_steps` (default 1; each
    phase's median is taken) run before anything is installed, timed by phase alone
    (forward, backward, optimizer), the next `iterations` are captured, the `iterations`
    after them run under torch.profiler, whose per-op host times are scaled down to the
    timed phases' (the profiler adds to each op); so the block runs the step
    host_steps + 2 x iterations times, three by default (docs/CAPTURE.md, "Host time");
    "launches" or "ops" chooses how they are matched (default: launches on CUDA where the
    captured profile has them, else ops); host_profiles: a path where the two profiles
    host timing matched are written (gzip'd JSON, docs/CAPTURE.md), for studying the match.
    An exception inside the block leaves no trace file."""

    def __init__(self, path, model=None, optimizer=None, iterations=1, timing=True,
                 layers=None, device=None, host_timing=None, host_steps=1,
                 host_profiles=None):
        self._cap = Capture(path, model=model, optimizer=optimizer, iterations=iterations,
                            timing=timing, layers=layers, device=device,
                            host_timing=host_timing, host_steps=host_steps,
                            host_profiles=host_profiles)

    def __enter__(self):
        self._cap.start()
        return self._cap

    def __exit__(self, et, ev, tb):
        self._cap.stop(ok=et is None)
        return False

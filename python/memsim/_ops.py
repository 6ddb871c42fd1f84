"""_ops.py — what capture says about one aten op: its trace KIND, its FLOPs (PyTorch's own
torch.utils.flop_counter formulas where the installed PyTorch has them, else the counts
below for the matrix products, attention and convolution, one per output element for the
rest), and whether it is a view that neither allocates nor computes. Used by
memsim.capture."""

import math

_GEMM = {"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "convolution",
         "_convolution", "convolution_backward", "cudnn_convolution", "addbmm", "_addmm_activation"}
_ATTN_PREFIX = ("_scaled_dot_product", "scaled_dot_product", "_flash_attention",
                "_efficient_attention", "_cudnn_attention")
_NORM = {"native_layer_norm", "native_layer_norm_backward", "layer_norm", "rms_norm",
         "_fused_rms_norm", "_fused_rms_norm_backward", "native_group_norm",
         "native_batch_norm", "native_group_norm_backward", "native_batch_norm_backward"}
_ACT = {"gelu", "gelu_backward", "silu", "silu_backward", "relu", "threshold_backward",
        "tanh", "tanh_backward", "sigmoid", "sigmoid_backward", "softplus", "mish",
        "leaky_relu", "hardswish", "elu", "glu"}
_EMBED = {"embedding", "embedding_dense_backward", "embedding_backward"}
_LOSS = {"nll_loss_forward", "nll_loss_backward", "nll_loss", "nll_loss2d_forward",
         "_log_softmax", "_log_softmax_backward_data", "log_softmax", "cross_entropy_loss",
         "_softmax", "_softmax_backward_data"}


def base_name(func):
    """aten op name without namespace and overload: 'mm' for aten.mm.default."""
    try:
        return func._schema.name.split("::")[-1]
    except AttributeError:
        return str(func).split(".")[1] if "." in str(func) else str(func)


def kind_of(name, phase, module_type=""):
    if phase == "opt":
        return "optim"
    if name in _GEMM:
        return "gemm"
    if name.startswith(_ATTN_PREFIX):
        return "attn"
    if name in _NORM or "norm" in module_type.lower():
        return "norm"
    if name in _ACT:
        return "act"
    if name in _EMBED:
        return "embed"
    if name in _LOSS:
        return "loss"
    if name.startswith(("all_reduce", "all_gather", "reduce_scatter", "broadcast", "_c10d")):
        return "comm"
    return "elem"


def is_view(func):
    """True for an op whose every result aliases an argument without writing it (view,
    transpose, detach, expand ...): no allocation, no kernel."""
    try:
        s = func._schema
    except AttributeError:
        return False
    if not s.returns:
        return False
    for a in s.arguments:
        if a.alias_info is not None and a.alias_info.is_write:
            return False
    return all(r.alias_info is not None and not r.alias_info.is_write for r in s.returns)


def is_mutating(func):
    try:
        return any(a.alias_info is not None and a.alias_info.is_write
                   for a in func._schema.arguments)
    except AttributeError:
        return False


def _shape(t):
    return list(t.shape) if hasattr(t, "shape") else None


def _numel(t):
    try:
        return int(t.numel())
    except Exception:
        return 0


def _registry():
    try:
        from torch.utils.flop_counter import flop_registry
        return flop_registry
    except Exception:
        return None


_REG = None
_REG_LOADED = False


def _torch_flops(func, args, kwargs, out):
    global _REG, _REG_LOADED
    if not _REG_LOADED:
        _REG, _REG_LOADED = _registry(), True
    if not _REG:
        return None
    f = _REG.get(getattr(func, "overloadpacket", None))
    if f is None:
        return None
    try:
        return float(f(*args, **(kwargs or {}), out_val=out))
    except Exception:
        return None


def _own_flops(name, args, kwargs, outs):
    """FLOPs of the ops that dominate training (2 per multiply-add), for a PyTorch without
    torch.utils.flop_counter."""
    sh = [_shape(a) for a in args]
    try:
        if name == "mm":
            (m, k), (_, n) = sh[0], sh[1]
            return 2.0 * m * n * k
        if name == "addmm":
            (m, k), (_, n) = sh[1], sh[2]
            return 2.0 * m * n * k
        if name in ("bmm", "baddbmm"):
            a, b = (sh[0], sh[1]) if name == "bmm" else (sh[1], sh[2])
            return 2.0 * a[0] * a[1] * a[2] * b[2]
        if name.startswith(_ATTN_PREFIX):
            q, k = sh[0], sh[1]
            if not q or not k or len(q) < 3:
                return 0.0
            heads_batch = math.prod(q[:-2])
            f = 4.0 * heads_batch * q[-2] * k[-2] * q[-1]
            causal = bool((kwargs or {}).get("is_causal", False)) or \
                any(a is True for a in args[3:6] if isinstance(a, bool))
            if causal:
                f /= 2
            if "backward" in name:
                f *= 2.5
            return f
        if name in ("convolution", "_convolution", "convolution_backward"):
            w = sh[1]
            o = _shape(outs[0]) if outs else None
            if not w or not o:
                return 0.0
            f = 2.0 * math.prod(o) * math.prod(w[1:])
            return f * (2 if name == "convolution_backward" else 1)
    except (TypeError, ValueError, IndexError):
        return 0.0
    return None


def flops(func, name, args, kwargs, outs):
    # attention first: the generator's count (causal halves it) is the one the machine
    # profiles' attention efficiencies were measured in
    f = _own_flops(name, args, kwargs, outs) if name.startswith(_ATTN_PREFIX) else None
    if f is None:
        f = _torch_flops(func, args, kwargs, outs[0] if len(outs) == 1 else tuple(outs))
    if f is None:
        f = _own_flops(name, args, kwargs, outs)
    if f is None:
        f = float(sum(_numel(o) for o in outs))   # element-wise: one per output element
    return max(0.0, float(f))

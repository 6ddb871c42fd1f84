"""memsim — the Python side of memsim, the simulator of GPU memory management in LLM
training (the repository's README.md): memsim.capture records a PyTorch training step as a
workload trace that `memsim compare --trace` plans under every policy; memsim.convert turns
a torch.cuda.memory._dump_snapshot() pickle into the JSON `memsim trace import` reads.
Needs nothing beyond PyTorch (imported only when capture is used)."""

__version__ = "0.1.0"

from .convert import convert, ConvertError                     # noqa: F401


def __getattr__(name):
    # capture imports torch: loaded on first use, so that `python -m memsim convert` and
    # the bindings work where PyTorch is not installed
    if name in ("capture", "Capture", "CaptureError"):
        from . import _capture as _c
        return getattr(_c, name)
    raise AttributeError("module 'memsim' has no attribute %r" % name)


# ---- bindings over libmemsim (python/memsim/api.py): the library is loaded on first call ----
from .api import simulate, compare, replay, plan, Error        # noqa: F401

"""_pyrefs.py — when the Python program lets go of a tensor autograd saved. A keep-all step
frees a saved tensor only in the backward, so its allocator history cannot show when the
forward's own Python references went (a local that outlives its last op, a function's
return, a variable reassigned); under torch.utils.checkpoint, which saves nothing in the
forward, that is when the block is freed, and under save_on_cpu when the device copy goes.
memsim.capture (_capture.py) tracks each forward tensor object here and, at each op of the
forward, asks which saved storages no Python reference outside autograd still holds; it
writes a zero-time `pyrefs` op reading them there (traces/FORMAT.md), which changes nothing
for keep-all and is the last forward use the lowerings free at (planners/lower_drop.c).

How a reference is counted without holding one: each tracked object is held weakly; while
it lives, sys.getrefcount of a temporary strong reference, less that reference and the
call's own, less the references autograd's saved-tensor hooks hold (each pack that returned
the object itself, as the capture's hook does on CUDA), is what the program holds. A
storage is let go when every tracked object on it is dead or so held (a view the program
keeps holds its base's storage). CPython only (other interpreters: the tracker is off)."""

import platform
import sys
import weakref


def available():
    """Counting references as above needs CPython's reference counts (and not a
    free-threaded build, whose counts are split)."""
    if platform.python_implementation() != "CPython":
        return False
    gil = getattr(sys, "_is_gil_enabled", None)
    return gil is None or gil()


class Tracker:
    """Storage key -> the tensor objects on it; per object the packs that returned it."""

    def __init__(self):
        self.keys = {}        # key -> [rec, [[weakref, packs], ...]]
        self.by_obj = {}      # id(obj) -> its entry (checked against the weakref: ids recur)
        self.done = set()     # ids of records already reported

    def track(self, t, key, rec):
        """Object t (a forward op's output, a view of one, or a tensor autograd saves) lies
        on storage key, whose trace record is rec."""
        e = self.by_obj.get(id(t))
        if e is not None and e[0]() is t:
            return e
        slot = self.keys.get(key)
        if slot is None or slot[0] is not rec:
            slot = self.keys[key] = [rec, []]
        try:
            e = [weakref.ref(t), 0]
        except TypeError:
            return None
        slot[1].append(e)
        self.by_obj[id(t)] = e
        return e

    def packed(self, t, key, rec):
        """Autograd's hook stored t itself: one reference that is not the program's."""
        e = self.track(t, key, rec)
        if e is not None:
            e[1] += 1

    @staticmethod
    def _held(e):
        o = e[0]()
        if o is None:
            return False
        return sys.getrefcount(o) - 2 > e[1]     # less o and the argument

    def let_go(self, live):
        """The records of saved, live storages no Python reference outside autograd holds
        any longer, each once, in the order they were first tracked; live: key -> the
        record now on that storage (a freed or reused storage is forgotten)."""
        out = []
        for key in list(self.keys):
            rec, objs = self.keys[key]
            if live.get(key) is not rec or not getattr(rec, "live", True):
                del self.keys[key]
                continue
            if not rec.saved or rec.id in self.done:
                continue
            if any(self._held(e) for e in objs):
                continue
            self.done.add(rec.id)
            del self.keys[key]
            out.append(rec)
        return out

    def clear(self):
        self.keys.clear()
        self.by_obj.clear()

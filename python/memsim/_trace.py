"""_trace.py — the workload trace as capture builds it: records kept in program order in
memory (so that a tensor's class can still change when the optimizer step shows it is a
gradient), then written once as traces/FORMAT.md says, to a temporary name renamed at the end.
Used by memsim.capture; knows nothing of PyTorch."""

import gzip
import os

NAME_MAX = 47            # traces/trace.h TRACE_NAME_MAX - 1
CLASSES = ("param", "grad", "optstate", "act_skel", "act_trans", "workspace", "other")
KINDS = ("gemm", "attn", "norm", "act", "elem", "embed", "loss", "optim", "comm", "other")
PHASES = ("none", "fwd", "bwd", "opt")


def fmt_real(x):
    """Shortest of %.15g, %.16g, %.17g that reads back to the same double (FORMAT.md)."""
    x = float(x)
    for p in (15, 16, 17):
        s = "%.*g" % (p, x)
        if float(s) == x:
            return s
    return "%.17g" % x


def token(name):
    """A NAME field: no blanks, at most NAME_MAX characters (the end kept: it is the most
    specific part), '-' for none."""
    s = "".join(c if c.isprintable() and not c.isspace() else "_" for c in str(name))
    if not s:
        return "-"
    return s[-NAME_MAX:] if len(s) > NAME_MAX else s


class Tensor:
    """One allocation: its fields stay editable until the trace is written."""
    __slots__ = ("id", "bytes", "cls", "layer", "tok", "stream", "producer", "name",
                 "phase", "saved", "key", "live", "hint", "tokshape")

    def __init__(self, tid, nbytes, cls, layer, phase, producer=None, name=""):
        self.id = tid
        self.bytes = int(nbytes)
        self.cls = cls
        self.layer = layer
        self.tok = 0
        self.stream = 0
        self.producer = producer
        self.name = name
        self.phase = phase
        self.saved = False
        self.key = None
        self.live = True
        self.hint = 0
        self.tokshape = False

    def line(self):
        prod = "-" if self.producer is None else str(self.producer)
        return "alloc %d %d %s %d %d %d %s %s" % (self.id, self.bytes, self.cls, self.layer,
                                                self.tok, self.stream, prod, token(self.name))


class Op:
    __slots__ = ("id", "kind", "phase", "layer", "flops", "br", "bw", "dur_us", "ins",
                 "outs", "name", "aten", "host_us", "host_sync")

    def __init__(self, oid, kind, phase, layer, name, aten):
        self.id = oid
        self.kind = kind
        self.phase = phase
        self.layer = layer
        self.flops = 0.0
        self.br = 0
        self.bw = 0
        self.dur_us = None
        self.ins = []
        self.outs = []
        self.name = name
        self.aten = aten
        self.host_us = None        # host time before its kernels can be issued; None: not timed
        self.host_sync = 0         # 1: the host waits for the GPU after issuing it

    def line(self):
        dur = "-" if self.dur_us is None else fmt_real(max(0.0, self.dur_us))
        ins = ",".join(str(i) for i in self.ins[:4096]) or "-"
        outs = ",".join(str(i) for i in self.outs[:4096]) or "-"
        s = "op %d %s %s %d %s %d %d %s %s %s %s" % (
            self.id, self.kind, self.phase, self.layer, fmt_real(self.flops), self.br, self.bw,
            dur, ins, outs, token(self.name))
        if self.host_us is not None:            # written for every op a capture timed
            s += " host_us=" + fmt_real(max(0.0, self.host_us))
        if self.host_sync:
            s += " host_sync=1"
        return s


class Trace:
    """Records in program order: ('a', Tensor), ('f', Tensor), ('o', Op), ('m', text)."""

    def __init__(self):
        self.meta = []          # (key, value) in order
        self.prelude = []       # tensors live before the first recorded record
        self.recs = []
        self.next_tid = 1
        self.next_oid = 1

    def set_meta(self, key, value):
        value = " ".join(str(value).split())
        for i, (k, _) in enumerate(self.meta):
            if k == key:
                self.meta[i] = (key, value)
                return
        self.meta.append((key, value))

    def new_tensor(self, nbytes, cls, layer, phase, producer=None, name="", prelude=False):
        t = Tensor(self.next_tid, nbytes, cls, layer, phase, producer, name)
        self.next_tid += 1
        if prelude:
            self.prelude.append(t)
        else:
            self.recs.append(("a", t))
        return t

    def free(self, t):
        if t.live:
            t.live = False
            self.recs.append(("f", t))

    def new_op(self, kind, phase, layer, name, aten):
        o = Op(self.next_oid, kind, phase, layer, name, aten)
        self.next_oid += 1
        self.recs.append(("o", o))
        return o

    def mark(self, text):
        self.recs.append(("m", text))

    def ops(self):
        return [r for k, r in self.recs if k == "o"]

    def tensors(self):
        return self.prelude + [r for k, r in self.recs if k == "a"]

    def lines(self):
        yield "memsim-trace 1"
        for k, v in self.meta:
            yield ("meta %s %s" % (k, v)).rstrip()
        for t in self.prelude:
            yield t.line()
        for kind, r in self.recs:
            if kind == "a":
                yield r.line()
            elif kind == "f":
                yield "free %d" % r.id
            elif kind == "o":
                yield r.line()
            else:
                yield "mark " + r

    def write(self, path):
        """Writes PATH.tmp.PID and renames it to PATH: a reader never sees half a trace.
        gzip when the name ends in .gz, with no time stamp, so that the same records give
        the same bytes."""
        path = os.fspath(path)
        tmp = "%s.tmp.%d" % (path, os.getpid())
        try:
            with open(tmp, "wb") as raw:
                if path.endswith(".gz"):
                    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
                        for ln in self.lines():
                            f.write(ln.encode("utf-8") + b"\n")
                else:
                    for ln in self.lines():
                        raw.write(ln.encode("utf-8") + b"\n")
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

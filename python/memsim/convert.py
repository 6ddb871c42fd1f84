"""convert.py — turns the pickle torch.cuda.memory._dump_snapshot() writes into the JSON
`memsim trace import --from pytorch-snapshot` reads (traces/import_pytorch.c: the snapshot's
own dict, "device_traces" and "segments", as JSON; Python stack frames left out unless
asked for, since they make files orders of magnitude larger and the importer does not use
them). Also checks and re-writes a JSON snapshot. The pickle is read with an unpickler that
builds only plain data (dicts, lists, strings, numbers): a pickle naming any Python class is
refused, never executed. Used by memsim.convert and `python -m memsim convert`."""

import gzip
import io
import json
import math
import os
import pickle

MAX_INPUT_BYTES = 2 << 30        # the importer's own limit (FORMAT.md)


class ConvertError(Exception):
    """Bad input: the message is 'FILE: problem'. status is the exit status of `python -m
    memsim convert` for it (3: the file is not a usable snapshot; 4: it cannot be read or
    the output cannot be written)."""

    def __init__(self, msg, status=3):
        super().__init__(msg)
        self.status = status


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError("it refers to the Python object %s.%s: a memory "
                                     "snapshot holds only plain data" % (module, name))


def _read(path):
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise ConvertError("%s: cannot read: %s" % (path, e.strerror or e), 4)
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
                data = g.read(MAX_INPUT_BYTES + 1)
        except (OSError, EOFError) as e:
            raise ConvertError("%s: corrupted gzip data: %s" % (path, e))
    if len(data) > MAX_INPUT_BYTES:
        raise ConvertError("%s: larger than the import limit of 2 GiB" % path)
    return data


def _load(path, data):
    if not data.strip():
        raise ConvertError("%s: empty file" % path)
    if data[:1] == b"\x80":
        try:
            return _PlainUnpickler(io.BytesIO(data)).load(), "pickle"
        except RecursionError:
            raise ConvertError("%s: the pickle is nested too deeply" % path)
        except Exception as e:   # every unpickling failure is bad input, never a traceback
            raise ConvertError("%s: not a readable pickle: %s" % (path, e or type(e).__name__))
    first = data.lstrip()[:1]
    if first in (b"{", b"["):
        try:
            return json.loads(data.decode("utf-8")), "json"
        except UnicodeDecodeError as e:
            raise ConvertError("%s: not UTF-8 text at byte %d" % (path, e.start))
        except json.JSONDecodeError as e:
            raise ConvertError("%s:%d:%d: invalid JSON: %s" % (path, e.lineno, e.colno, e.msg))
        except RecursionError:
            raise ConvertError("%s: the JSON is nested too deeply" % path)
    raise ConvertError("%s: neither a pickle (torch.cuda.memory._dump_snapshot()) nor JSON "
                       "(first byte 0x%02x)" % (path, data[0]))


def _check(path, snap):
    inner = snap.get("snapshot") if isinstance(snap, dict) else None
    s = inner if isinstance(inner, dict) else snap
    if not isinstance(s, dict):
        raise ConvertError("%s: the snapshot must be a dict (JSON object), found %s" %
                           (path, type(s).__name__))
    if "device_traces" not in s:
        raise ConvertError("%s: no \"device_traces\": not a torch.cuda.memory._snapshot() "
                           "(record with torch.cuda.memory._record_memory_history())" % path)
    dt = s["device_traces"]
    if not isinstance(dt, list) or not all(isinstance(d, list) for d in dt):
        raise ConvertError("%s: \"device_traces\" must be a list of lists" % path)
    for i, d in enumerate(dt):
        for j, e in enumerate(d):
            if not isinstance(e, dict) or not isinstance(e.get("action"), str):
                raise ConvertError("%s: device_traces[%d][%d] is not an entry with an "
                                   "\"action\"" % (path, i, j))
    if not isinstance(s.get("segments", []), list):
        raise ConvertError("%s: \"segments\" must be a list" % path)


def _plain(x, keep_frames):
    """JSON-ready copy: frames dropped, keys as strings, non-finite numbers as null."""
    if isinstance(x, dict):
        return {str(k): _plain(v, keep_frames) for k, v in x.items()
                if keep_frames or k != "frames"}
    if isinstance(x, (list, tuple)):
        return [_plain(v, keep_frames) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (bytes, bytearray)):
        return x.decode("utf-8", "replace")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def convert(src, dst, keep_frames=False):
    """Converts the snapshot at src (pickle or JSON, plain or gzip) to JSON at dst (gzip
    when dst ends in .gz). dst appears only when complete. Raises ConvertError('FILE:
    problem') on bad input; returns a dict of counts (devices, entries, segments)."""
    src, dst = os.fspath(src), os.fspath(dst)
    snap, _ = _load(src, _read(src))
    _check(src, snap)
    out = _plain(snap, keep_frames)
    s = out.get("snapshot", out) if isinstance(out.get("snapshot"), dict) else out
    counts = {"devices": len(s["device_traces"]),
              "entries": sum(len(d) for d in s["device_traces"]),
              "segments": len(s.get("segments", []))}
    text = json.dumps(out, separators=(",", ":"), sort_keys=False).encode("utf-8")
    tmp = "%s.tmp.%d" % (dst, os.getpid())
    try:
        with open(tmp, "wb") as raw:
            if dst.endswith(".gz"):
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as g:
                    g.write(text)
            else:
                raw.write(text)
        os.replace(tmp, dst)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ConvertError("%s: cannot write: %s" % (dst, e.strerror or e), 4)
    return counts

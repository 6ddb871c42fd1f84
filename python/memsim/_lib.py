"""_lib.py — finds and loads memsim's shared C library, libmemsim.so, with ctypes, and calls
its API (sim/api.h): the options go in as strings, the results come back as a JSON document.
Used only by memsim/api.py.

Where it looks, first found wins:
  1. $MEMSIM_LIB (a path to the file; an error if it cannot be loaded),
  2. next to this package (an installed copy: memsim/libmemsim.so),
  3. the build tree this package sits in (python/../libmemsim.so, after `make`),
  4. the system's library paths (after `make install`; LD_LIBRARY_PATH, ldconfig's cache),
     then /usr/local/lib (make install's default prefix, before ldconfig has run).
"""

import ctypes
import ctypes.util
import json
import os
import threading

LIB_NAME = "libmemsim.so"
API_VERSION = 1  # the document form this package reads (API_VERSION in sim/api.h)
ERR_BYTES = 4096


class Error(Exception):
    """A call memsim refused or could not finish: the C library's message, as the memsim
    command prints it after "memsim CMD: ". status is the C status's name ("invalid argument"
    for an option the command refuses, "not found", "I/O error", ...), None for errors of this
    package's own."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = status


_here = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()  # the C calls share getopt's globals: one at a time
_lib = None


def candidates():
    """The places looked in, in order, as (where, path-or-name)."""
    out = []
    env = os.environ.get("MEMSIM_LIB")
    if env:
        out.append(("MEMSIM_LIB", env))
    out.append(("next to the package", os.path.join(_here, LIB_NAME)))
    out.append(("the build tree", os.path.join(os.path.dirname(os.path.dirname(_here)), LIB_NAME)))
    found = ctypes.util.find_library("memsim")
    out.append(("the system's library paths", found or LIB_NAME))
    # make install's default prefix, which dlopen searches only once ldconfig has run
    out.append(("the default install prefix", "/usr/local/lib/" + LIB_NAME))
    return out


def _declare(lib):
    for name in ("api_simulate", "api_compare", "api_replay", "api_plan"):
        f = getattr(lib, name)
        f.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_void_p),
                      ctypes.c_char_p, ctypes.c_size_t]
        f.restype = ctypes.c_int
    lib.api_free.argtypes = [ctypes.c_void_p]
    lib.api_free.restype = None
    lib.api_version.argtypes = []
    lib.api_version.restype = ctypes.c_int
    lib.api_status_name.argtypes = [ctypes.c_int]
    lib.api_status_name.restype = ctypes.c_char_p
    lib.api_exit_code.argtypes = [ctypes.c_int]
    lib.api_exit_code.restype = ctypes.c_int


def _open(where, path):
    lib = ctypes.CDLL(path)
    try:
        _declare(lib)
    except AttributeError as e:
        raise Error("%s (%s): %s is not memsim's library (%s)" % (path, where, LIB_NAME, e))
    if lib.api_version() != API_VERSION:
        raise Error("%s (%s): API version %d, this package reads version %d; rebuild one or "
                    "the other" % (path, where, lib.api_version(), API_VERSION))
    return lib


def load():
    """The loaded library (loaded once). Raises Error naming every place tried."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for where, path in candidates():
        if where != "MEMSIM_LIB" and os.sep in path and not os.path.exists(path):
            tried.append("%s: %s (absent)" % (where, path))
            continue
        try:
            _lib = _open(where, path)
            return _lib
        except OSError as e:
            if where == "MEMSIM_LIB":
                raise Error("MEMSIM_LIB=%s: cannot load it: %s" % (path, e))
            tried.append("%s: %s (%s)" % (where, path, e))
    raise Error("memsim's C library (%s) was not found; build it with ./configure && make in "
                "the source tree (it needs the lp-solve package for a shared lp_solve), install "
                "it with make install, or set MEMSIM_LIB to its path. Looked in:\n  %s"
                % (LIB_NAME, "\n  ".join(tried)))


def call(command, options):
    """Runs api_<command> with the option strings; returns the decoded document."""
    lib = load()
    fn = getattr(lib, "api_" + command)
    enc = [o.encode("utf-8") for o in options]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    out = ctypes.c_void_p()
    err = ctypes.create_string_buffer(ERR_BYTES)
    with _lock:
        st = fn(argv, ctypes.byref(out), err, ERR_BYTES)
    if st != 0:
        raise Error(err.value.decode("utf-8", "replace"),
                    lib.api_status_name(st).decode("utf-8", "replace"))
    try:
        text = ctypes.string_at(out.value).decode("utf-8", "replace")
    finally:
        lib.api_free(out)
    return json.loads(text)

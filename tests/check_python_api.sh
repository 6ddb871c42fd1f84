#!/bin/sh
# check_python_api.sh — make check's run of python/tests/test_api.py: the Python bindings
# (python/memsim/api.py) over the build tree's libmemsim.so, their results against the memsim
# command's CSV, plan and replay report, as TAP. Skips, saying why, without python3 or
# without the shared library (configure builds it only when lp_solve links as a shared
# object: Debian's lp-solve package).
top=${srcdir:-.}
build=$(dirname "${MEMSIM:-./sim/memsim}")/..
if ! command -v python3 >/dev/null 2>&1; then
    echo "1..0 # SKIP python3 not found"
    exit 0
fi
lib=${MEMSIM_LIB:-$build/libmemsim.so}
if [ ! -f "$lib" ]; then
    echo "1..0 # SKIP $lib not built (configure found no shared lp_solve; Debian: lp-solve)"
    exit 0
fi
# no __pycache__ in the source tree (make distcheck's is read-only)
MEMSIM_LIB=$lib PYTHONDONTWRITEBYTECODE=1 exec python3 "$top/python/tests/test_api.py" --tap

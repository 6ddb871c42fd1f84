#!/bin/sh
# tests/check_python.sh — runs the Python package's tests (python/tests, plain unittest) as
# TAP, one line per test module, with unittest's summary. Uses the first of $MEMSIM_PYTHON,
# /usr/bin/python3 and python3 that imports torch (Debian's python3-torch CPU build is
# enough); with none, the capture tests skip saying so and the rest (convert, build) run.
# Skipped whole without a Python >= 3.9.
M=${MEMSIM:-./sim/memsim}
S=${srcdir:-.}
PY=
for p in "$MEMSIM_PYTHON" /usr/bin/python3 python3; do
    [ -n "$p" ] || continue
    command -v "$p" >/dev/null 2>&1 || continue
    "$p" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null || continue
    [ -z "$PY" ] && PY=$p
    if "$p" -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "1..0 # SKIP no Python >= 3.9"; exit 0; }
MEMSIM=$(cd "$(dirname "$M")" && pwd)/$(basename "$M"); export MEMSIM
T=$(mktemp -d /tmp/memsim-py-XXXXXX) || exit 99
trap 'rm -rf "$T"' EXIT
TESTS=$(cd "$S/python/tests" && pwd)
n=0; bad=0
for t in test_convert test_capture test_host test_phases; do
    n=$((n + 1))
    (cd "$TESTS" && PYTHONDONTWRITEBYTECODE=1 "$PY" -m unittest -v "$t") > "$T/$t.log" 2>&1
    r=$?
    sum=$(grep -E '^(OK|FAILED)' "$T/$t.log" | tail -1)
    ran=$(sed -n 's/^Ran \([0-9]*\) test.*/\1/p' "$T/$t.log")
    if [ $r = 0 ]; then
        echo "ok $n - $t ($PY): $ran tests, $sum"
        grep 'skipped ' "$T/$t.log" | sed 's/^/#   /' | sort -u | head -5
    else
        echo "not ok $n - $t ($PY): $sum"; bad=1
        tail -40 "$T/$t.log" | sed 's/^/#   /'
    fi
done
echo "1..$n"
exit $bad

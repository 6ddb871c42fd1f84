#!/bin/sh
# run.sh — reproduces the result tables of docs/DSA.md: `memsim dsa --table` on the offline
# dynamic storage allocation benchmarks (11 MiniMalloc "challenging" instances and 4 compiler
# traces), in three settings: minimize the peak, decide capacity 1048576 for the MiniMalloc
# instances, and the compiler traces with a 0.5 % gap target.
#
# usage: experiments/dsa/run.sh [BENCH_DIR]
#   BENCH_DIR   folder with the instance CSVs (default $MEMSIM_DSA_DIR, else
#               experiments/dsa/instances, the public instances kept in the repository)
#   MEMSIM      the memsim binary (default: memsim on PATH; e.g. MEMSIM=./sim/memsim)
#   TIME_LIMIT  --time-limit of the minimize and capacity runs (default 10)
#   MEMSIM_JOBS instance files solved at once (memsim dsa -j; default 1; `memsim experiment
#               dsa -j N` sets it). The rows are the same but for the times; with N > 1
#               a progress line per file goes to standard error
# Prints Markdown on stdout. memsim's exit status 1 (an instance does not fit or is
# undecided) is reported in the output, not treated as a failure of this script.
set -u
MEMSIM=${MEMSIM:-memsim}
root=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${1:-${MEMSIM_DSA_DIR:-}}
if [ -z "$DIR" ]; then
    for d in "$root/experiments/dsa/instances"; do
        [ -d "$d" ] && { DIR=$d; break; }
    done
fi
TL=${TIME_LIMIT:-10}
JOBS=${MEMSIM_JOBS:-1}
if [ -z "$DIR" ] || [ ! -d "$DIR" ]; then
    echo "usage: $0 BENCH_DIR (or set MEMSIM_DSA_DIR)" >&2
    exit 2
fi
case $MEMSIM in
*/*) MEMSIM=$(cd "$(dirname "$MEMSIM")" && pwd)/$(basename "$MEMSIM") ;;
esac
cd "$DIR" || exit 2
MM=$(ls minimalloc-*.csv 2>/dev/null)
REAL=$(ls somas-*.csv iopddl-*.csv 2>/dev/null)
if [ -z "$MM$REAL" ]; then
    echo "$0: no minimalloc-*.csv, somas-*.csv or iopddl-*.csv in $DIR" >&2
    exit 2
fi

run() { # prints the table, then memsim's exit status if not 0
    "$MEMSIM" dsa --table -j "$JOBS" "$@"
    rc=$?
    [ $rc -eq 0 ] || echo "(memsim dsa exit status $rc)"
}

echo "machine: $(uname -m), $(nproc 2>/dev/null || echo '?') cores, $(uname -sr); date: $(date -u +%Y-%m-%d)"
echo
echo "### Minimize the peak (--time-limit $TL)"
echo
# shellcheck disable=SC2086
run --time-limit "$TL" $MM $REAL
echo
echo "### Decide capacity 1048576 (MiniMalloc instances, --time-limit $TL)"
echo
# shellcheck disable=SC2086
run --capacity 1048576 --time-limit "$TL" $MM
echo
echo "### Compiler traces, stop within 0.5 % of LOAD (--gap 0.5 --time-limit 1)"
echo
# shellcheck disable=SC2086
run --gap 0.5 --time-limit 1 $REAL

#!/bin/sh
# experiments/memo/profile.sh — writes the machine profile of MEMO's testbed as
# experiments/memo/run.sh uses it: traces/machines/a800-8gpu.machine with the figures of
# a800-memo.overrides replaced (an override's first word is the key it replaces; an override
# that matches no key is an error). Called by run.sh, and by the test suite
# (tests/check_cli.sh), which checks that memsim reads the result, so that an override memsim
# no longer accepts fails the tests rather than the 8-minute experiment.
# usage: experiments/memo/profile.sh OUTFILE     (exit 2 usage, 3 an override matches no key)
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUTFILE" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
tmp="$1.tmp.$$"
trap 'rm -f "$tmp"' EXIT
awk 'NR == FNR { if ($0 !~ /^#/ && NF) ov[$1] = $0; next }
     NF && $0 !~ /^#/ && ($1 in ov) { print ov[$1]; done[$1] = 1; next }
     { print }
     END { for (k in ov) if (!(k in done)) { print "profile.sh: override " k " matches no key" > "/dev/stderr"; exit 3 } }' \
    "$here/a800-memo.overrides" "$here/../../traces/machines/a800-8gpu.machine" > "$tmp"
mv "$tmp" "$1"

#!/usr/bin/env bash
# tests/run.sh — sets up a fresh Debian machine (as root: installs the build dependencies),
# builds memsim and runs the whole test suite (`make check`), then prints a closing line
# "N passed, N failed, N skipped" counted from Automake's TAP logs. The README's second
# command and .ci/run call it. Options: --no-install (skip apt), --distcheck (also run
# `make distcheck`).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup-lib.sh

install=1
distcheck=0
for a in "$@"; do
    case "$a" in
    --no-install) install=0 ;;
    --distcheck) distcheck=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "tests/run.sh: unknown option '$a'" >&2; exit 2 ;;
    esac
done

[ "$install" = 1 ] && memsim_install_deps "$MEMSIM_TEST_PACKAGES"
memsim_build

status=0
memsim_stage "testing (make -j2 check; a few minutes)"
make -j2 check || status=$?
if [ "$distcheck" = 1 ]; then
    memsim_stage "testing a tarball (make -j2 distcheck)"
    make -j2 distcheck || status=$?
fi

# Count TAP results over every test log (each "ok"/"not ok" line is one test).
pass=0; fail=0; skip=0
if [ -f test-suite.log ]; then
    while read -r key n; do
        case "$key" in
        PASS:) pass=$n ;;
        SKIP:) skip=$n ;;
        FAIL:|ERROR:|XPASS:) fail=$((fail + n)) ;;
        esac
    done < <(sed -n 's/^# \(PASS:\|SKIP:\|FAIL:\|ERROR:\|XPASS:\) *\([0-9]*\)$/\1 \2/p' test-suite.log)
fi
if [ "$status" != 0 ] && [ "$fail" = 0 ]; then
    fail=1   # the build or harness itself failed
fi
echo "$pass passed, $fail failed, $skip skipped"
exit "$status"

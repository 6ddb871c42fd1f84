#!/bin/sh
# tests/check_readme.sh — every `memsim ...` command of the README's "Using it" code blocks,
# run exactly as written (a command continues over lines ending in '\'), in order, with the
# built sim/ first on the PATH; each must exit 0. TAP output.
#
# The README is read when the test runs. The commands run in a temporary directory, so that
# what they write (p.plan, w.trace.gz, out/, ...) lands there; in it `experiments` is a link
# to the source tree's experiments/, so that relative inputs such as
# experiments/dsa/instances/*.csv resolve. Inputs the README assumes the reader has are
# provided: config.json (experiments/realworld/configs/llama3.2-1b.json) and snap.json.gz
# (tests/fixtures/gpt2-plain.json.gz). Skipped: the commands that need a GPU (`memsim run`,
# `memsim probe`, `memsim validate gpu` / `compare`) where no GPU and GPU runtime are here, and
# those that take longer than a few minutes on a small build machine (listed in SLOW; none
# now: `memsim experiment memo`, the longest, takes about 36 s on 2 idle cores, and an
# experiment gets 15 minutes where other commands get 5).
SRC=$(cd "${srcdir:-.}" && pwd)
M=${MEMSIM:-./sim/memsim}
[ -x "$M" ] || { echo "1..0 # SKIP memsim not built"; exit 0; }
BIN=$(cd "$(dirname "$M")" && pwd)
README=$SRC/README.md
[ -f "$README" ] || { echo "1..0 # SKIP no README.md"; exit 0; }
T=$(mktemp -d /tmp/memsim-readme-XXXXXX) || exit 99
trap 'rm -rf "$T"' EXIT

# Commands skipped for their time (an extended regular expression; empty: none).
SLOW=''
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
    [ -x "$BIN/../runtime/memsim-run" ]; then gpu=1; fi

# The code blocks of the "## Using it" section, continuation lines joined.
awk '/^## Using it/ { f = 1; next }
     f && /^## / { exit }
     f && /^```/ { b = !b; next }
     f && b { if (sub(/\\$/, "")) { acc = acc $0; next } print acc $0; acc = "" }' "$README" |
    grep '^memsim ' > "$T/commands"

mkdir "$T/run"
ln -s "$SRC/experiments" "$T/run/experiments"
cp "$SRC/experiments/realworld/configs/llama3.2-1b.json" "$T/run/config.json"
cp "$SRC/tests/fixtures/gpt2-plain.json.gz" "$T/run/snap.json.gz"

n=0; bad=0
[ -s "$T/commands" ]; r=$?
n=$((n + 1)); if [ $r = 0 ]; then echo "ok $n - the README's \"Using it\" block has memsim commands";
else echo "not ok $n - no memsim command found in the README's \"Using it\" block"; bad=1; fi
while IFS= read -r c; do
    n=$((n + 1))
    short=$(printf '%s' "$c" | sed 's/ *#.*//; s/  */ /g' | cut -c1-90)
    case $c in
    "memsim run "*|"memsim probe"*|"memsim validate gpu"*|"memsim validate compare"*)
        if [ $gpu = 0 ]; then echo "ok $n # SKIP needs a GPU: $short"; continue; fi ;;
    esac
    if [ -n "$SLOW" ] && printf '%s\n' "$c" | grep -Eq "^($SLOW)"; then
        echo "ok $n # SKIP takes too long here: $short"; continue
    fi
    limit=300
    case $c in "memsim experiment "*) limit=900 ;; esac
    (cd "$T/run" && PATH="$BIN:$PATH" timeout $limit sh -c "$c") </dev/null >"$T/out" 2>"$T/err"
    r=$?
    if [ $r = 0 ]; then echo "ok $n - $short"
    else
        echo "not ok $n - $short"
        echo "#   exit $r: $(tail -c 400 "$T/err" | tr '\n' ' ')"
        bad=1
    fi
done < "$T/commands"
echo "1..$n"
exit $bad

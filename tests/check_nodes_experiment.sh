#!/bin/sh
# tests/check_nodes_experiment.sh — experiments/nodes/run.sh's comparison on results made up
# from the simulator's own: a GPU directory whose per-rank rows are the simulator's with rank r's
# iteration 2 (r + 1) % longer and its peak reserved r % lower must give those errors (the
# median over ranks, the worst rank), the node's host memory as the ranks' sum, and the medians
# against the goals; `list` names every case. TAP output.
M=${MEMSIM:-./sim/memsim}
[ -x "$M" ] || { echo "1..0 # SKIP memsim not built"; exit 0; }
S=${srcdir:-.}/experiments/nodes/run.sh
T=$(mktemp -d /tmp/memsim-nodes-XXXXXX) || exit 99
trap 'rm -rf "$T"' EXIT
n=0; bad=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; bad=1; fi; }
abs_m=$(cd "$(dirname "$M")" && pwd)/$(basename "$M")

MEMSIM=$abs_m bash "$S" list > "$T/list" 2>&1
[ "$(grep -c 'memsim run|simulate' "$T/list")" = 16 ] && grep -q 'tp2cp2-memo .* 4 GPUs' "$T/list"
ok $? "list: the 16 cases, the TP 2 x CP 2 ones on 4 GPUs"

# tp2-full-swap: 2 ranks, made up from the simulator's row
echo h200-sxm > "$T/profile.txt"
"$M" simulate --machine h200-sxm --model gpt-7b --seq 40K --tp 2 --cp 1 --dp 1 --iters 3 \
    --policy full-swap --issue-ahead 8 --csv "$T/s.csv" > /dev/null 2>&1
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; print $0 ",rank,world"; next }
    { for (r = 0; r < 2; r++) {
        line = ""
        for (i = 1; i <= NF; i++) {
            v = $i
            if (i == c["iter_time_s"]) v = sprintf("%.9f", v * (1 + 0.02 * (r + 1)))
            if (i == c["peak_reserved_bytes"]) v = sprintf("%.0f", v * (1 - 0.01 * r))
            line = line (i > 1 ? "," : "") v
        }
        print line "," r ",2" } }' "$T/s.csv" > "$T/tp2-full-swap.csv"
MEMSIM=$abs_m NODES_ONLY='^tp2-full-swap$' bash "$S" compare "$T" > "$T/out" 2>&1
grep -q '^| tp2-full-swap | ok / ok,ok | .* | -2.91 % | .* | +1.01 % | .* | +0.00 % |$' "$T/out"
ok $? "compare: the median rank's iteration (-2.91 %), the worst rank's reserved (+1.01 %), the node's host memory"
grep -q 'median |error| over 1 cases: iteration 2.91 % (goal 5 %), peak reserved 1.01 % (goal 2 %)' "$T/out"
ok $? "compare: the medians against the goals"
[ -f "$T/sim/tp2-full-swap.csv" ]
ok $? "compare keeps the simulator's CSV"
MEMSIM=$abs_m bash "$S" compare "$T/none" > "$T/out2" 2>&1
[ $? = 2 ] && grep -q "not a run.sh gpu directory" "$T/out2"
ok $? "compare of a directory without results: exit 2 and why"
echo "1..$n"
exit $bad

#!/bin/sh
# tests/check_layerbench.sh — experiments/layerbench's table (layer_torch.py --table) made again
# from the logs of a committed invocation equals the table committed with them, the SM clock
# line from its nvidia-smi samples included; a directory without samples has no clock line.
# Needs python3 (no torch: the table reads files only). TAP output.
src=${srcdir:-.}
d=$src/experiments/layerbench/results/2026-12-04/layer-repeat
py=$src/experiments/layerbench/layer_torch.py
n=0; bad=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; bad=1; fi; }
if ! command -v python3 > /dev/null; then echo "1..0 # SKIP no python3"; exit 0; fi
T=$(mktemp -d /tmp/memsim-lb-XXXXXX) || exit 99
trap 'rm -rf "$T"' EXIT
python3 "$py" --table "$d" > "$T/table.txt" 2> "$T/err"
ok $? "layer_torch.py --table reads a committed invocation's files"
cmp -s "$T/table.txt" "$d/table.txt"
ok $? "... and prints the table committed with them"
grep -q "^SM clock while the GPU drew more than 450 W (147 samples): median 1650 MHz" "$T/table.txt"
ok $? "... with the SM clock of its nvidia-smi samples"
mkdir "$T/nosmi" && cp "$d"/memsim_*.log "$d/torch.csv" "$T/nosmi/" &&
    python3 "$py" --table "$T/nosmi" > "$T/nosmi.txt" && ! grep -q "SM clock" "$T/nosmi.txt" &&
    grep -q "^  32768 " "$T/nosmi.txt"
ok $? "without samples: the table, no clock line"
# an invocation with GEMM algorithms measured per length (GEMMS=tune, 2026-12-04, late)
g=$src/experiments/layerbench/results/2026-12-04b/final2
python3 "$py" --table "$g" > "$T/tuned.txt" 2> "$T/err" && cmp -s "$T/tuned.txt" "$g/table.txt"
ok $? "an invocation with tuned GEMMs: the table again from its files"
grep -q "^GEMMs: algorithms measured into .*gemms_32768.txt" "$g/memsim_32768.log" &&
    [ "$(sed -n 2p "$g/gemms_32768.txt")" = "memsim-gemm-algos 1" ] &&
    [ "$(grep -c '^gemm ' "$g/gemms_32768.txt")" = 12 ]
ok $? "... whose log names its GEMM algorithms' file, 12 shapes in memsim-gemm-algos 1 form"
echo "1..$n"
exit $bad

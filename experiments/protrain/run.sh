#!/usr/bin/env bash
# experiments/protrain/run.sh — reproduces ProTrain's (Yang et al., ../shared/papers/protrain.txt)
# Table 4 (configurations its search picks for GPT2-1B at batch 8 and 64 and GPT2-10B at batch 8
# on 4 x RTX 3090 and 4 x A100), Table 2 (largest trainable GPT-2 per backend on 1 and 4 GPUs of
# each testbed), Figure 3 (best throughput of ProTrain, DeepSpeed ZeRO-3 offload, Colossal-AI
# Gemini and FSDP offload on Table 1's models) and Figure 6 (cost model against the simulation
# over the searched configurations) with `memsim protrain` (sim/cmd_protrain.c). Prints the
# paper-vs-memsim comparison cell by cell with differences and draws the figures (PNG and SVG).
# About 95 s on a 2-core machine with a progress line per step on standard error.
#
# usage: experiments/protrain/run.sh [OUTDIR]   (default: out/protrain in the repository;
#        MEMSIM=path/to/memsim; extra memsim protrain options in PT_OPTS, e.g.
#        PT_OPTS="--knob coll_link_eff=1" or "--flash")
# Writes OUTDIR/table4.tsv, table4_validation.tsv (every configuration each Table 4 search
# evaluated, simulated), appendix/ (those and fig6.tsv under ProTrain's appendix formula),
# search_times.txt, table2.tsv, fig3.tsv, fig6.tsv (a sample of Figure
# 6's configurations), compare.txt (the printed comparison), the plot data (*.dat) and
# protrain_table2, protrain_fig3, protrain_fig6 as .png and .svg.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/out/protrain}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac   # relative to the caller's directory
cd "$root"
MEMSIM=${MEMSIM:-$root/sim/memsim}
if [ ! -x "$MEMSIM" ]; then
    echo "run.sh: $MEMSIM not found: build memsim first (make) or set MEMSIM" >&2
    exit 2
fi
if ! "$MEMSIM" protrain --help > /dev/null 2>&1; then
    echo "run.sh: $MEMSIM has no 'protrain' subcommand (sim/cmd_protrain.c not built in)" >&2
    exit 2
fi
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$root/traces}
mkdir -p "$out"
read -r -a opts <<< "${PT_OPTS:-}"
start=$(date +%s)
# memsim protrain's progress lines ("memsim protrain: WHAT [i/n] ...") go to the terminal's
# standard error; the rest of its standard error is kept as the step wants it (to_err FILE).
to_err() { # to_err FILE: progress lines of stdin to stderr, the others to FILE
    local l
    while IFS= read -r l; do
        case "$l" in
        "memsim protrain: "*" ["[0-9]*/[0-9]*"] "*) printf '%s\n' "$l" >&2 ;;
        *) printf '%s\n' "$l" >> "$1" ;;
        esac
    done
}
exec 3>&1

# 1. Table 4: the searches' picks and wall times (search_times.txt: not deterministic), then
#    every configuration whose memory fits simulated against its prediction, over a superset
#    of what the searches evaluate (search_bound=0: not only those the time bound keeps;
#    swap_bw=0: every n_swap the swap interval allows, not only those the bandwidth bound does).
val() { # val DIR KNOBS...: the validation table of the searches with KNOBS into DIR
    local d=$1
    shift
    mkdir -p "$d/.val"
    "$MEMSIM" protrain table4 --knob search_bound=0 --knob swap_bw=0 "$@" --validate -1 \
        -o "$d/.val" "${opts[@]}" 2>&1 >&3 | to_err /dev/null
    mv "$d/.val/table4_validation.tsv" "$d/table4_validation.tsv"
    rm -rf "$d/.val"
}
: > "$out/search_times.txt"
"$MEMSIM" protrain table4 -o "$out" "${opts[@]}" 2>&1 >&3 | to_err "$out/search_times.txt"
val "$out"
#    The same searches under ProTrain's appendix runtime model as written (cost_model=appendix:
#    per-chunk max of compute and communication, no queues; docs/PROTRAIN.md §4), simulated too.
mkdir -p "$out/appendix"
"$MEMSIM" protrain table4 --knob cost_model=appendix -o "$out/appendix" "${opts[@]}" 2>&1 >&3 \
    | to_err /dev/null
val "$out/appendix" --knob cost_model=appendix
# 2. Table 2: the largest GPT-2 (hidden 8192, 1..128 blocks) each backend trains at batch 1 per GPU.
"$MEMSIM" protrain table2 -o "$out" "${opts[@]}"
# 3. Figure 3: best throughput over per-GPU batches 1..64 (and each baseline's variants).
"$MEMSIM" protrain fig3 -o "$out" "${opts[@]}"
# 4. Figure 6: GPT2-10B, batch 8, both testbeds: an even sample of 150 evaluated configurations
#    per testbed for the plot (table4_validation.tsv has the statistics over all of them).
"$MEMSIM" protrain fig6 --model gpt2-10b --batch 8 --validate 150 --knob search_bound=0 \
    --knob swap_bw=0 -o "$out" "${opts[@]}"
#    The same configurations predicted by ProTrain's appendix formula (the search is unbounded
#    in both, so it evaluates the same configurations and the sample is the same).
"$MEMSIM" protrain fig6 --model gpt2-10b --batch 8 --validate 150 --knob search_bound=0 \
    --knob swap_bw=0 --knob cost_model=appendix -o "$out/appendix" "${opts[@]}"

# 5. The comparison and the plot data.
awk -f "$here/compare.awk" -v outdir="$out" "$here/reference.tsv" "$out/table4.tsv" \
    "$out/table4_validation.tsv" "$out/appendix/table4.tsv" "$out/appendix/table4_validation.tsv" \
    "$out/table2.tsv" "$out/fig3.tsv" "$out/search_times.txt" > "$out/compare.txt"
for hw in RTX3090 A100; do
    # the appendix formula's prediction of each configuration joined on (testbed, configuration)
    awk -F'\t' -v hw="$hw" 'FNR == 1 { f++; next }
        f == 1 { app[$1 SUBSEP $2 SUBSEP $3 SUBSEP $4 SUBSEP $5] = $6; next }
        $1 == hw && $11 == "ok" { k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4 SUBSEP $5
            print $8 "\t" $6 "\t" $7 "\t" $9 "\t" ((k in app) ? app[k] : "NaN") }' \
        "$out/appendix/fig6.tsv" "$out/fig6.tsv" | sort -g |
        awk -F'\t' 'BEGIN { print "# index pred_s sim_s pred_peak_gib sim_peak_gib appendix_pred_s" }
        { print NR "\t" $2 "\t" $3 "\t" $1 "\t" $4 "\t" $5 }' > "$out/fig6_$hw.dat"
done

# 6. Figures.
if command -v gnuplot > /dev/null 2>&1; then
    for fmt in png svg; do
        gnuplot -e "datafile='$out/table2.dat'; outfile='$out/protrain_table2.$fmt'; fmt='$fmt'" \
            plots/protrain_table2.gp
        gnuplot -e "dir='$out'; outfile='$out/protrain_fig3.$fmt'; fmt='$fmt'" plots/protrain_fig3.gp
        gnuplot -e "dir='$out'; outfile='$out/protrain_fig6.$fmt'; fmt='$fmt'" plots/protrain_fig6.gp
    done
else
    echo "run.sh: gnuplot not found: figures skipped (data in $out/*.dat)" >&2
fi

cat "$out/compare.txt"
echo
echo "run.sh: done in $(( $(date +%s) - start )) s; results in $out"

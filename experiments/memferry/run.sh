#!/usr/bin/env bash
# experiments/memferry/run.sh — reproduces MemFerry's evaluation (Yao et al., INFOCOM 2025, §V,
# Figs. 9-13) in memsim, in one command:
#   1. builds memsim if ./sim/memsim is missing (set MEMSIM=path to use another binary);
#   2. runs `memsim memferry` (experiments/memferry/driver.c): DeepSpeed, Native-Offload, MemFerry and
#      GO-MemFerry on BERT-base, BERT-large, RoBERTa and GPT-2-medium (Figs. 9, 10(b), 12),
#      TransformerXL 0.7B-6.7B (Fig. 13) on MemFerry's A100 with PCIe 3.0, and the largest
#      model each trains on its V100 32 GB (Fig. 11), plus the sensitivity of Fig. 9 to the
#      two inputs the paper does not give (host Adam rate, batch);
#   3. prints the paper-vs-memsim table (reference.tsv; summary.txt);
#   4. draws the figures (plots/memferry_*.gp, PNG and SVG).
# usage: experiments/memferry/run.sh [OUTDIR] [memsim memferry options]
# Everything lands in OUTDIR (default $OUT, else out/memferry/; plans/ holds every plan: the
# shadow models). The other arguments go to `memsim memferry` (see `memsim memferry --help`).
# About 2 s on a 2-core x86-64 box. Exit status: 0 when the runs completed (rows that miss the
# paper are marked MISS in summary.txt), else memsim's error status.
set -euo pipefail
# An optional first argument not starting with '-' is the output directory (as for the other
# experiments), relative to the caller's directory; else $OUT, else out/memferry.
out_arg=
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    out_arg=$1
    shift
    case "$out_arg" in /*) ;; *) out_arg="$PWD/$out_arg" ;; esac
fi
cd "$(dirname "$0")/../.."
out=${out_arg:-${OUT:-out/memferry}}
start=$(date +%s)

if [ -z "${MEMSIM:-}" ]; then
    MEMSIM=./sim/memsim
    if [ ! -x "$MEMSIM" ]; then
        echo "run.sh: building memsim" >&2
        . tests/setup-lib.sh
        memsim_build
    fi
fi
if ! "$MEMSIM" memferry --help >/dev/null 2>&1; then
    echo "run.sh: $MEMSIM has no 'memferry' subcommand (experiments/memferry/driver.c not wired in)" >&2
    exit 2
fi
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$PWD/traces}
mkdir -p "$out"

echo "run.sh: memsim memferry (Figs. 9-13)" >&2
status=0
"$MEMSIM" memferry --out "$out" --quiet "$@" >/dev/null || status=$?
if [ "$status" -gt 1 ]; then
    echo "run.sh: memsim memferry failed (status $status)" >&2
    exit "$status"
fi
{
    echo "MemFerry (INFOCOM'25) in memsim — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "host: $(uname -srm), $(nproc) cores; machines: traces/machines/a100-80g-pcie3.machine, v100-32g-pcie3.machine"
    echo
    cat "$out/summary.txt"
    echo
    echo "== Fig. 9: iteration time (ms) and MemFerry's speedup"
    awk -F, 'NR > 1 { printf "%-13s b=%-3s %-15s %9.2f ms  x%.3f  peak %6.2f GiB  %s\n", $1, $3, $4, $6, $7, $9, $17 }' "$out/fig9.csv"
    if [ -f "$out/fig9_sensitivity.csv" ]; then
        echo
        echo "== Fig. 9 sensitivity: MemFerry faster than DeepSpeed / Native-Offload (%) by batch and host Adam rate; DeepSpeed's GPU utilization"
        awk -F, 'NR > 1 { printf "%-13s batch %-3s adam %-8s  %6.1f%% / %5.1f%%  MemFerry fastest: %-3s  DeepSpeed util %5.1f%%\n", $1, $3, $4, $9, $10, ($11 ? "yes" : "no"), $12 }' "$out/fig9_sensitivity.csv"
    fi
} | tee "$out/report.txt"

# GO-MemFerry's gradient writes against the GPU: the same Fig. 10(b) sweep on the H200
# profile, beside what go_probe.py measured on that H200 (PyTorch AccumulateGrad into mapped
# host memory, parameters kept in model precision on the GPU; go_probe_h200/): the time the
# host gradients add at each reserve factor, over keeping every gradient on the GPU.
h200="$out/h200"
if "$MEMSIM" memferry --a100 h200-sxm --figs 10 --no-sensitivity --quiet --out "$h200" >/dev/null 2>&1 ||
   [ -s "$h200/fig10b.csv" ]; then
    awk -F, 'FNR == 1 { f++; next }
        f == 1 { sim[$1 SUBSEP $2] = $3; next }
        $2 == "cost" { hw[$1 SUBSEP $3] = $5; seen[$1] = 1 }
        END {
            print "== GO gradient writes on the H200: time added over all gradients on the GPU (ms), measured vs memsim"
            n = split("bert-large gpt2-medium", M, " ")
            for (i = 1; i <= n; i++) {
                m = M[i]
                if (!(m in seen)) continue
                printf "%-12s reserve", m
                for (r = 0; r <= 10; r++) printf " %6.1f", r / 10
                printf "\n%-12s measured", ""
                for (r = 0; r <= 10; r++) printf " %6.2f", hw[m SUBSEP sprintf("%.1f", r / 10)] - hw[m SUBSEP "1.0"]
                printf "\n%-12s memsim  ", ""
                for (r = 0; r <= 10; r++) printf " %6.2f", sim[m SUBSEP sprintf("%.1f", r / 10)] - sim[m SUBSEP "1.0"]
                printf "\n"
            }
        }' "$h200/fig10b.csv" experiments/memferry/go_probe_h200/sweep-*.csv | tee -a "$out/report.txt"
else
    echo "run.sh: the H200 comparison could not run (memsim memferry --a100 h200-sxm)" >&2
fi
# memsim's op times against the GPU time Hugging Face's models take (hf_probe.py on an H200)
experiments/memferry/hf_compare.sh "$out" | tee -a "$out/report.txt" ||
    echo "run.sh: the op-time comparison could not run (experiments/memferry/hf_compare.sh)" >&2
if command -v gnuplot >/dev/null 2>&1; then
    for fmt in png svg; do
        gnuplot -e "datafile='$out/fig9.dat'; outfile='$out/memferry_fig9.$fmt'; fmt='$fmt'" plots/memferry_fig9.gp
        gnuplot -e "datafile='$out/fig12.dat'; outfile='$out/memferry_fig12.$fmt'; fmt='$fmt'; \
ylabel='peak allocated (GiB)'; title='Fig. 12: peak GPU memory (A100 80GB, PCIe 3.0)'" plots/memferry_fig9.gp
        gnuplot -e "datafile='$out/fig10a.dat'; outfile='$out/memferry_fig10a.$fmt'; fmt='$fmt'; \
ylabel='GPU utilization (%)'; title='Fig. 10(a): GPU utilization (A100 80GB, PCIe 3.0; the paper shows GPT-2)'" plots/memferry_fig9.gp
        gnuplot -e "datafile='$out/fig10b.dat'; outfile='$out/memferry_fig10b.$fmt'; fmt='$fmt'" plots/memferry_fig10b.gp
        gnuplot -e "datafile='$out/fig11.dat'; outfile='$out/memferry_fig11.$fmt'; fmt='$fmt'" plots/memferry_fig11.gp
        gnuplot -e "datafile='$out/fig13.dat'; outfile='$out/memferry_fig13.$fmt'; fmt='$fmt'" plots/memferry_fig13.gp
    done
    echo "figures: $out/memferry_fig*.png and .svg" >&2
else
    echo "run.sh: gnuplot not found, figures skipped" >&2
fi
echo "run.sh: done in $(( $(date +%s) - start )) s; results in $out/" >&2

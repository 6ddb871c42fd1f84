#!/usr/bin/env bash
# experiments/memferry/hf_compare.sh — memsim's op-time model (traces/roofline.h) against the
# GPU time Hugging Face's models take on an H200, as hf_probe.py measured it (hf_probe_h200/):
# for every measured row, memsim generates the same workload on the h200-sxm profile (flash
# attention for the SDPA rows, eager attention for the eager ones) and sums the durations of
# the last iteration's forward and backward ops, by kind (GEMM, attention, the rest), beside
# the measured kernel time of the same kinds. Called by run.sh; prints the table and writes
# OUTDIR/hf_h200.csv.
#
# usage: hf_compare.sh OUTDIR        (MEMSIM=path to use another build)
# Exit status: 0, 2 for bad usage, 1 when memsim cannot generate a workload.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MEMSIM=${MEMSIM:-$root/sim/memsim}
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$root/traces}
[ $# -eq 1 ] || { echo "usage: hf_compare.sh OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fwd + bwd op time (ms) of the last iteration by kind: "gemm attn other"
op_sums() { # trace
    awk '$1 == "mark" && $2 == "iter" { g = a = o = 0 }
         $1 == "op" && ($4 == "fwd" || $4 == "bwd") && $9 >= 0 {
             if ($3 == "gemm") g += $9; else if ($3 == "attn") a += $9; else o += $9 }
         END { printf "%.3f %.3f %.3f\n", g / 1e3, a / 1e3, o / 1e3 }' "$1"
}

csv="$out/hf_h200.csv"
echo "model,batch,seq,attn,hw_gpu_ms,sim_ms,hw_gemm_ms,sim_gemm_ms,hw_attn_ms,sim_attn_ms,hw_other_ms,sim_other_ms" > "$csv"
for f in "$here"/hf_probe_h200/hf-*.csv; do
    tail -n +2 "$f" | while IFS=, read -r model batch seq attn _params gpu gemm at other _k _wall; do
        impl=flash; [ "$attn" = eager ] && impl=eager
        "$MEMSIM" trace gen --model "$model" --seq "$seq" --batch "$batch" --machine h200-sxm \
            --gen attn_impl=$impl -o "$tmp/w.trace" > /dev/null || exit 1
        read -r sg sa so < <(op_sums "$tmp/w.trace")
        st=$(awk -v g="$sg" -v a="$sa" -v o="$so" 'BEGIN { printf "%.3f\n", g + a + o }')
        echo "$model,$batch,$seq,$attn,$gpu,$st,$gemm,$sg,$at,$sa,$other,$so" >> "$csv"
    done
done
echo "== memsim's op times against Hugging Face's kernels on the H200 (forward + backward, ms; hf_probe.py, PyTorch 2.11, fp16)"
awk -F, 'NR > 1 {
    r = $6 > 0 ? $5 / $6 : 0
    printf "%-13s b=%-3s %-6s measured %8.2f  memsim %8.2f  x%.2f   GEMM %7.2f / %7.2f  attention %6.2f / %6.2f  other %7.2f / %7.2f\n",
        $1, $2, $4, $5, $6, r, $7, $8, $9, $10, $11, $12 }' "$csv"

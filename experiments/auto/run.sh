#!/usr/bin/env bash
# experiments/auto/run.sh — the `auto` policy (sim/auto.c, docs/POLICIES.md) beside every
# single policy on a grid of workloads: MEMO's GPT-7B 64K-1M on the A800 node (TP 4, CP 2,
# Megatron profile), a LLaMA-3-8B-shaped and a Mixtral-style hf model at 8K-128K tokens on
# h200-sxm and h100-sxm, ProTrain's GPT2-1B / GPT2-10B settings on its RTX 3090 and A100
# profiles, and MemFerry's GPT-2-medium / TransformerXL settings on its A100 PCIe 3 and V100
# profiles. For every point it prints each single policy's simulated iteration time (or oom /
# oohm / error) beside auto's, auto's choice, how far it is ahead of the best single policy,
# and the wall time of the search (memsim plan --policy auto, the only clock here: the
# simulator reads none).
#
# usage: experiments/auto/run.sh [OUTDIR]   (default: out/auto; MEMSIM=path/to/memsim;
#        AUTO_QUICK=1 runs the first 6 points only)
# Writes OUTDIR/grid.tsv (a row per point and policy: point, policy, status, iter_s) and
# OUTDIR/table.txt (the printed table), OUTDIR/runs/*.csv (memsim compare's rows).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/out/auto}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cd "$root"
MEMSIM=${MEMSIM:-$root/sim/memsim}
if [ ! -x "$MEMSIM" ]; then
    echo "run.sh: $MEMSIM not found: build memsim first (make) or set MEMSIM" >&2
    exit 1
fi
mkdir -p "$out/runs"
singles=$("$MEMSIM" list | awk '/^policies:/ {p = 1; next} /^[a-z]/ {p = 0} p && /^  [a-z]/ {print $1}' | paste -sd, -)
cfg=experiments/realworld/configs
hf="--framework hf --precision amp"
# name | memsim options
points=$(cat <<P
memo-64K|--model gpt-7b --seq 64K --tp 4 --cp 2 --gen framework=megatron --machine a800-8gpu
memo-128K|--model gpt-7b --seq 128K --tp 4 --cp 2 --gen framework=megatron --machine a800-8gpu
memo-256K|--model gpt-7b --seq 256K --tp 4 --cp 2 --gen framework=megatron --machine a800-8gpu
memo-512K|--model gpt-7b --seq 512K --tp 4 --cp 2 --gen framework=megatron --machine a800-8gpu
memo-768K|--model gpt-7b --seq 768K --tp 4 --cp 2 --gen framework=megatron --machine a800-8gpu
memo-1M|--model gpt-7b --seq 1M --tp 4 --cp 2 --gen framework=megatron --machine a800-8gpu
llama8b-8K-h200|--model-config $cfg/llama3-8b.json $hf --seq 8K --machine h200-sxm
llama8b-32K-h200|--model-config $cfg/llama3-8b.json $hf --seq 32K --machine h200-sxm
llama8b-128K-h200|--model-config $cfg/llama3-8b.json $hf --seq 128K --machine h200-sxm
llama8b-8K-h100|--model-config $cfg/llama3-8b.json $hf --seq 8K --machine h100-sxm
llama8b-32K-h100|--model-config $cfg/llama3-8b.json $hf --seq 32K --machine h100-sxm
mixtral-8K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 8K --machine h200-sxm
mixtral-32K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 32K --machine h200-sxm
mixtral-128K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 128K --machine h200-sxm
mixtral-8K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 8K --machine h100-sxm
mixtral-32K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 32K --machine h100-sxm
protrain-1b-b8-3090|--model gpt2-1b --seq 1024 --batch 8 --machine rtx3090-pcie3
protrain-1b-b64-3090|--model gpt2-1b --seq 1024 --batch 64 --machine rtx3090-pcie3
protrain-1b-b64-a100|--model gpt2-1b --seq 1024 --batch 64 --machine a100-80g-pcie4
protrain-10b-b8-a100|--model gpt2-10b --seq 1024 --batch 8 --machine a100-80g-pcie4
memferry-gpt2m-a100|--model gpt2-medium --seq 1024 --batch 32 --machine a100-80g-pcie3
memferry-txl6.7b-a100|--model transformerxl-6.7b --seq 1024 --batch 8 --machine a100-80g-pcie3
memferry-txl4.3b-v100|--model transformerxl-4.3b --seq 1024 --batch 8 --machine v100-32g-pcie3
memferry-txl1b-v100|--model transformerxl-1b --seq 1024 --batch 8 --machine v100-32g-pcie3
P
)
[ "${AUTO_QUICK:-0}" = 1 ] && points=$(printf '%s\n' "$points" | head -6)
: > "$out/grid.tsv"
{
printf '%-22s %-44s %9s %9s %7s %8s  %s\n' point "auto's choice" auto best1 "gain%" search_s "best single policy"
while IFS='|' read -r name opts; do
    [ -n "$name" ] || continue
    echo "run.sh: $name" >&2
    # shellcheck disable=SC2086
    "$MEMSIM" compare $opts --policies "$singles,auto" --csv "$out/runs/$name.csv" --quiet 2>/dev/null || true
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$MEMSIM" plan $opts --policy auto --quiet -o "$out/runs/$name.plan" 2>/dev/null || true
    t1=$(date +%s.%N)
    chosen=$(awk '$1 == "knob" && $2 == "auto.chosen" {$1 = $2 = ""; sub(/^ +/, ""); print}' "$out/runs/$name.plan" 2>/dev/null)
    awk -F, -v n="$name" 'NR > 1 {printf "%s\t%s\t%s\t%s\n", n, $1, $10, ($10 == "ok" ? $11 : "-")}' \
        "$out/runs/$name.csv" >> "$out/grid.tsv"
    awk -F, -v n="$name" -v c="${chosen:--}" -v s="$(echo "$t1 - $t0" | bc)" '
        NR > 1 && $1 == "auto" { a = ($10 == "ok") ? $11 : -1 }
        NR > 1 && $1 != "auto" && $10 == "ok" && (b == "" || $11 < b) { b = $11; bp = $1 }
        END {
            g = (a > 0 && b > 0) ? sprintf("%.2f", (b - a) / b * 100) : "-"
            printf "%-22s %-44s %9s %9s %7s %8.2f  %s\n", n, (a > 0 ? c : "nothing fits"),
                   (a > 0 ? sprintf("%.4f", a) : "-"), (b > 0 ? sprintf("%.4f", b) : "-"), g, s,
                   (bp == "" ? "-" : bp)
        }' "$out/runs/$name.csv"
done < <(printf "%s\n" "$points")
} | tee "$out/table.txt"
echo
echo "per point and policy (iteration seconds or status): $out/grid.tsv"
awk -F'\t' '{k = $1; if (!(k in seen)) {seen[k] = 1; order[++n] = k}
             v[k] = v[k] sprintf(" %s=%s", $2, ($3 == "ok" ? $4 : $3))}
            END {for (i = 1; i <= n; i++) print order[i] ":" v[order[i]]}' "$out/grid.tsv"

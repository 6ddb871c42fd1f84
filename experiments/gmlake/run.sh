#!/usr/bin/env bash
# experiments/gmlake/run.sh — reproduces GMLake's fragmentation study (ASPLOS'24 §5: Figs. 10,
# 11, 13, 14) in memsim, plus the replay of the four recorded PyTorch traces, in one command:
#   1. builds memsim if ./sim/memsim is missing (set MEMSIM=path to use another binary);
#   2. imports tests/fixtures/gpt2-*.json.gz with `memsim trace import`;
#   3. runs `memsim gmlake` (experiments/gmlake/driver.c): generated fine-tuning workloads (LoRA,
#      recomputation, offload over ZeRO-3; traces/gen.c) replayed through the caching,
#      stitching, expandable and static allocators on an A100 80 GB, and the imported traces;
#   4. prints the comparison with the paper (compare.sh against reference.tsv);
#   5. draws the figures (plots/gmlake_*.gp, PNG and SVG).
# usage: experiments/gmlake/run.sh [OUTDIR] [memsim gmlake options]
# Everything lands in OUTDIR (default $OUT, else out/gmlake/; summary.txt is the printed
# comparison). The other arguments go to `memsim gmlake` (see `memsim gmlake --help`). About
# 15 s on a 2-core x86-64 box.
set -euo pipefail
# An optional first argument not starting with '-' is the output directory (as for the other
# experiments), relative to the caller's directory; else $OUT, else out/gmlake.
out_arg=
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    out_arg=$1
    shift
    case "$out_arg" in /*) ;; *) out_arg="$PWD/$out_arg" ;; esac
fi
cd "$(dirname "$0")/../.."
out=${out_arg:-${OUT:-out/gmlake}}
start=$(date +%s)

if [ -z "${MEMSIM:-}" ]; then
    MEMSIM=./sim/memsim
    if [ ! -x "$MEMSIM" ]; then
        echo "run.sh: building memsim" >&2
        . tests/setup-lib.sh
        memsim_build
    fi
fi
# The subcommand: `memsim gmlake`, or `memsim experiment gmlake` where it is wired that way.
if "$MEMSIM" gmlake --help >/dev/null 2>&1; then
    gm=("$MEMSIM" gmlake)
elif "$MEMSIM" experiment gmlake --help >/dev/null 2>&1; then
    gm=("$MEMSIM" experiment gmlake)
else
    echo "run.sh: $MEMSIM has no 'gmlake' subcommand (experiments/gmlake/driver.c not wired in)" >&2
    exit 2
fi
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$PWD/traces}

mkdir -p "$out/traces"
real=()
for f in tests/fixtures/gpt2-plain.json.gz tests/fixtures/gpt2-checkpoint.json.gz \
         tests/fixtures/gpt2-lora.json.gz tests/fixtures/gpt2-plain-expandable.json.gz; do
    t="$out/traces/$(basename "$f" .json.gz).trace"
    "$MEMSIM" trace import --from pytorch-snapshot "$f" -o "$t" >/dev/null
    real+=(--real "$t")
done

echo "run.sh: memsim gmlake (Figs. 10, 11, 13, 14 and the recorded traces)" >&2
# progress on standard error as it happens, and kept in progress.log
"${gm[@]}" --out "$out" --figs all "${real[@]}" "$@" 2> >(tee "$out/progress.log" >&2)

# Sensitivity: the same Fig. 10 (batch 32) and Fig. 14 workloads with Megatron's fused loss
# instead of HF transformers' loss tensors (--hf-loss 0).
"${gm[@]}" --out "$out/fused-loss" --figs 10,14 --batch 32 --hf-loss 0 \
    --allocators caching,stitching 2> >(tee -a "$out/progress.log" >&2)

{
    echo "GMLake (ASPLOS'24) fragmentation study in memsim — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "host: $(uname -srm), $(nproc) cores; device model: traces/machines/a100-80g-pcie4.machine"
    echo
    experiments/gmlake/compare.sh "$out"
    echo
    echo "== Sensitivity: the loss as HF transformers computes it (default) vs Megatron's fused loss"
    echo "   (Fig. 10, batch 32; Fig. 14): utilization caching -> stitching, reserved saved"
    awk -F, 'FNR == 1 { f++; next }
        $1 == 10 && $6 == 32 { k = $2 " " $3; if (!(k in s)) { s[k] = 1; n++; key[n] = k }
            u[f, k, $7] = ($8 == "ok") ? sprintf("%.1f%%", 100 * $11) : "OOM"; r[f, k, $7] = $10; o[f, k, $7] = $8 }
        END {
            printf "%-22s %-26s %-26s\n", "model strategy", "HF loss (default)", "fused loss (--hf-loss 0)"
            for (i = 1; i <= n; i++) {
                k = key[i]; line = sprintf("%-22s", k)
                for (g = 1; g <= 2; g++) {
                    sv = (o[g, k, "caching"] == "ok" && o[g, k, "stitching"] == "ok") ? sprintf("%5.2fG", r[g, k, "caching"] - r[g, k, "stitching"]) : "    -"
                    line = line sprintf(" %6s -> %6s  %s ", u[g, k, "caching"], u[g, k, "stitching"], sv)
                }
                print line
            }
        }' "$out/fig10.csv" "$out/fused-loss/fig10.csv"
    awk -F, 'FNR == 1 { f++; next } { if ($7 == "oom") bad[f, $5] = 1; res[f, $5] = $13; st[f, $5] = st[f, $5] " " $8 }
        END {
            for (g = 1; g <= 2; g++)
                printf "Fig. 14 %-8s caching reserved %6.2fG, stitching %6.2fG; stitches per iteration:%s\n", g == 1 ? "HF loss" : "fused", res[g, "caching"], res[g, "stitching"], st[g, "stitching"]
        }' "$out/fig14.csv" "$out/fused-loss/fig14.csv"
} | tee "$out/summary.txt"

experiments/gmlake/plotdata.sh "$out"
if command -v gnuplot >/dev/null 2>&1; then
    for fmt in png svg; do
        for d in "$out"/fig10_b*.dat; do
            b=${d##*_b}; b=${b%.dat}
            gnuplot -e "datafile='$d'; outfile='$out/gmlake_fig10_b$b.$fmt'; fmt='$fmt'; \
title='Fig. 10: strategy combinations, ZeRO-3 on 4 GPUs, batch $b'" plots/gmlake_fig10.gp
        done
        m11=$(awk 'NR > 1 && NF && !s[$1]++ { printf "%s ", $1 }' "$out/fig11.dat")
        gnuplot -e "datafile='$out/fig11.dat'; outfile='$out/gmlake_fig11.$fmt'; fmt='$fmt'; \
models='$m11'" plots/gmlake_fig11.gp
        m13=$(awk 'NR > 1 && NF && !s[$1]++ { printf "%s ", $1 }' "$out/fig13.dat")
        gnuplot -e "datafile='$out/fig13.dat'; outfile='$out/gmlake_fig13.$fmt'; fmt='$fmt'; \
models='$m13'" plots/gmlake_fig13.gp
        gnuplot -e "seriesfile='$out/fig14_series.csv'; stitchfile='$out/fig14_stitches.dat'; \
outfile='$out/gmlake_fig14.$fmt'; fmt='$fmt'" plots/gmlake_fig14.gp
    done
    echo "figures: $out/gmlake_fig*.png and .svg" >&2
else
    echo "run.sh: gnuplot not found, figures skipped" >&2
fi
echo "run.sh: done in $(( $(date +%s) - start )) s; results in $out/" >&2

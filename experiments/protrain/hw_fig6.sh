#!/usr/bin/env bash
# experiments/protrain/hw_fig6.sh — ProTrain's Figure 6 against a real GPU: the cost model's
# prediction and memsim's simulation against the measured iteration time, over an even sample
# of the configurations the protrain search evaluates on one GPU, on the validation workload
# (experiments/validate: the 1.3 B GPT, 3 iterations, spin kernels of the modelled durations, so
# that what is measured is the schedule: gathers and offloads over the real link, swaps, the
# host Adam beside the backward, the caching allocator). The GPU runs go through the validation
# harness with a cases file of their own (VALIDATE_CASES).
#
# usage:
#   hw_fig6.sh cases MACHINE SEQ GPU_BYTES N > FILE
#       here: N configurations evenly sampled from the search under a GPU_BYTES device budget
#       (and the one it picks), as validation cases (plans are made where they run)
#   VALIDATE_CASES=FILE experiments/validate/run.sh gpu DIR            (on the GPU machine)
#   VALIDATE_CASES=FILE experiments/validate/run.sh compare DIR --out SIMDIR     (here)
#   hw_fig6.sh report DIR SIMDIR [OUTDIR]
#       here: per configuration the plan's prediction, the simulation and the GPU, their
#       errors, OUTDIR/fig6_hw.tsv and protrain_fig6_hw.png / .svg (default OUTDIR: SIMDIR)
# Exit status: 0, 2 for bad usage or a missing input.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MEMSIM=${MEMSIM:-$root/sim/memsim}
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$root/traces}
VAWK=$root/experiments/validate/compare.awk
# the validation workload's model (one definition: experiments/validate/run.sh)
DIMS=$(sed -n 's/^DIMS=//p' "$root/experiments/validate/run.sh")

die() { echo "hw_fig6.sh: $*" >&2; exit 2; }

cmd_cases() { # machine seq gpu_bytes n
    [ $# -eq 4 ] || die "usage: hw_fig6.sh cases MACHINE SEQ GPU_BYTES N"
    local tmp n=$2
    case "$n" in *[kK]) n=$(( ${n%[kK]} * 1024 )) ;; esac   # memsim protrain takes plain numbers
    tmp=$(mktemp)
    trap 'rm -f "$tmp"' RETURN
    "$MEMSIM" protrain search --model "dims:$DIMS" --gpus 1 --batch 1 --seq "$n" --flash \
        --machine "$1" --knob "gpu_bytes=$3" --knob search_bound=0 --validate "$4" \
        --csv "$tmp" > /dev/null
    printf '# hw_fig6.sh cases %s %s %s %s: the protrain search'"'"'s configurations on one GPU\n' "$@"
    printf 'id\tpolicy\tseq\tallocator\tplan\trole\tmath\n'
    awk -F'\t' -v seq="$2" 'NR > 1 && $11 == "ok" {
        printf "pt-%s-%d-%d-%d-%d\tprotrain+n_persist=%d+n_buffer=%d+n_swap=%d+n_checkpoint=%d\t%s\t-\tfile\tchunks\tspin\n",
            seq, $2, $3, $4, $5, $2, $3, $4, $5, seq }' "$tmp"
}

field() { awk -f "$VAWK" -v mode=field -v col="$2" "$1"; }

cmd_report() { # gpudir simdir [outdir]
    [ $# -ge 2 ] || die "usage: hw_fig6.sh report DIR SIMDIR [OUTDIR]"
    local gpu=$1 sim=$2 out=${3:-$2} id pred g s
    [ -f "$gpu/cases.tsv" ] || die "$gpu/cases.tsv: no GPU results there (run.sh gpu writes it)"
    mkdir -p "$out"
    {
        printf 'id\tpred_s\tsim_s\tgpu_s\n'
        for id in $(awk -F'\t' '!/^#/ && $1 != "id" && NF { print $1 }' "$gpu/cases.tsv"); do
            [ -f "$gpu/$id.csv" ] && [ -f "$sim/$id.csv" ] && [ -f "$gpu/plans/$id.plan" ] || continue
            [ "$(field "$gpu/$id.csv" status)" = ok ] || continue
            pred=$(awk '($1 == "predict" || $1 == "knob") && $2 == "pred_iter_s" { print $3 }' "$gpu/plans/$id.plan")
            g=$(field "$gpu/$id.csv" iter_time_s)
            s=$(field "$sim/$id.csv" iter_time_s)
            printf '%s\t%s\t%s\t%s\n' "$id" "$pred" "$s" "$g"
        done
    } > "$out/fig6_hw.tsv"
    awk -F'\t' 'NR > 1 {
        n++; ep = ($2 - $4) / $4 * 100; es = ($3 - $4) / $4 * 100
        sp += (ep < 0 ? -ep : ep); ss += (es < 0 ? -es : es)
        if ((ep < 0 ? -ep : ep) > mp) mp = (ep < 0 ? -ep : ep)
        if ((es < 0 ? -es : es) > ms) ms = (es < 0 ? -es : es)
        printf "  %-26s predicted %8.4f s  simulated %8.4f s  GPU %8.4f s  %+6.2f %%  %+6.2f %%\n", $1, $2, $3, $4, ep, es }
        END {
            if (!n) { print "  no configuration ran"; exit }
            printf "%d configurations: cost model vs GPU |error| mean %.2f %%, max %.2f %%; simulator vs GPU mean %.2f %%, max %.2f %% (ProTrain: within 4 %%)\n",
                n, sp / n, mp, ss / n, ms }' "$out/fig6_hw.tsv"
    if command -v gnuplot > /dev/null 2>&1; then
        for fmt in png svg; do
            gnuplot -e "datafile='$out/fig6_hw.tsv'; outfile='$out/protrain_fig6_hw.$fmt'; fmt='$fmt'" \
                "$root/plots/protrain_fig6_hw.gp"
        done
    else
        echo "hw_fig6.sh: gnuplot not found: figure skipped" >&2
    fi
}

case "${1:-}" in
    cases) shift; cmd_cases "$@" ;;
    report) shift; cmd_report "$@" ;;
    *) sed -n '/^# usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

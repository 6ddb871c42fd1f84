#!/usr/bin/env bash
# experiments/layerbench/run.sh — memsim's real-kernel GPT layer (memsim run --math real
# --bench-layer: the runtime's own attention, cuBLAS GEMMs) beside the same layer in PyTorch,
# eager and under torch.compile, in one invocation on one GPU: both medians, their ratio and
# each one's MFU at every sequence length, then attention alone at SDPA_SEQ tokens (PyTorch's
# SDPA FLASH_ATTENTION backend and its default choice beside memsim's attention forward and
# backward from the layer's per-op times). README.md says what is measured and how.
#
# usage: run.sh [OUTDIR]     on the GPU machine, from a build with runtime/memsim-run (the
#                            device needs nothing built there); writes OUTDIR/memsim_*.log,
#                            OUTDIR/torch.csv, OUTDIR/gpu.txt, OUTDIR/smi.csv (SM clock and
#                            power every 250 ms) and OUTDIR/table.txt, prints
#                            the table last (default OUTDIR: out/layerbench)
# environment: SEQS (default "8192 32768 131072"), MODES (eager,compile), SDPA_SEQ (32768),
#   ATTN (memsim's attention kernels for the table: auto), EXTRA (other kernel sets memsim also
#   runs at SDPA_SEQ, for the attention lines: "wgmma-inline wgmma-two wgmma-overlap wgmma-basic mma"), MEMSIM_RUN (default
#   runtime/memsim-run), PYTHON (python3), DIMS (1,4096,32,16384,50257), TIMEOUT (seconds per
#   memsim run, 600), GEMMS (tune, the default: memsim's run at each length first measures
#   its GEMMs' algorithms into OUTDIR/gemms_TOKENS.txt, --tune-gemms, and runs with them;
#   default: cuBLAS's own choice)
# Exit status: 0 done (a failed run is named on stderr and left out of the table), 2 usage.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
case "${1:-}" in
-h|--help) sed -n '/^# usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
out=${1:-out/layerbench}
seqs=${SEQS:-8192 32768 131072}
modes=${MODES:-eager,compile}
sdpa=${SDPA_SEQ:-32768}
dims=${DIMS:-1,4096,32,16384,50257}
run=${MEMSIM_RUN:-$root/runtime/memsim-run}
py=${PYTHON:-python3}
IFS=, read -r _ hidden heads ffn _ <<< "$dims"
mkdir -p "$out"
out=$(cd "$out" && pwd)   # memsim runs from the source root: its files by absolute path
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  } > "$out/gpu.txt" 2>&1
# the SM clock and the power through the whole invocation: a sustained step holds an H200 at
# its power limit below its maximum clock, by an amount that differs lease by lease
# (BENCHMARKS.md, 2026-12-04), so the table says what clock each invocation ran at
smi=
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit --format=csv -lms 250 \
        > "$out/smi.csv" 2>&1 &
    smi=$!
fi
# memsim: warm-up and repetitions as PyTorch's below (fewer at 64K tokens and more)
gemms=${GEMMS:-tune}
case "$gemms" in tune|default) ;; *) echo "layerbench: GEMMS is tune or default" >&2; exit 2 ;; esac
bench() { # tokens kernels [log]
    local s=$1 k=$2 reps=12 warm=3 log=${3:-$out/memsim_${1}_$2.log} g=()
    [ "$s" -ge 65536 ] && { reps=5; warm=1; }
    if [ "$gemms" = tune ]; then   # measured once per length, then reused
        if [ -f "$out/gemms_$s.txt" ]; then g=(--gemm-algos "$out/gemms_$s.txt")
        else g=(--tune-gemms "$out/gemms_$s.txt"); fi
    fi
    (cd "$root" && timeout "${TIMEOUT:-600}" "$run" run --machine h200-sxm --math real \
        --bench-layer --dims "$dims" --seq "$s" --reps "$reps" --warmup "$warm" --attn "$k" \
        "${g[@]}") > "$log" 2>&1 ||
        echo "layerbench: memsim at $s tokens ($k attention): status $?" >&2
}
for s in $seqs; do bench "$s" "${ATTN:-auto}" "$out/memsim_$s.log"; done
for k in ${EXTRA-wgmma-inline wgmma-two wgmma-overlap wgmma-basic mma}; do bench "$sdpa" "$k"; done
args=(--hidden "$hidden" --heads "$heads" --ffn "$ffn" --modes "$modes" --sdpa "$sdpa")
for s in $seqs; do args+=(--seq "$s"); done
PYTHONUNBUFFERED=1 "$py" "$here/layer_torch.py" "${args[@]}" > "$out/torch.csv" ||
    echo "layerbench: layer_torch.py: status $?" >&2
[ -n "$smi" ] && kill "$smi" 2> /dev/null
"$py" "$here/layer_torch.py" --hidden "$hidden" --heads "$heads" --ffn "$ffn" --table "$out" |
    tee "$out/table.txt"
exit 0

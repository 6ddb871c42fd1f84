#!/usr/bin/env bash
# experiments/capture/run.sh — the closed loop of memsim.capture: for each case of
# cases.tsv (GPT-2, LLaMA-style GQA + SwiGLU, Mistral, Mixtral-style MoE, Qwen2; random
# initialization), a keep-all step captured once on the GPU, and from that capture alone
# memsim predicts keep-all, gradient_checkpointing_enable() (policy full-recompute: keep
# each block's input, recompute the rest in its backward, as PyTorch's non-reentrant
# checkpoint of each decoder layer does) and torch.autograd.graph.save_on_cpu(pin_memory=
# True) (policy save-on-cpu: every tensor a backward op reads that was there before the
# backward, parameters and weight casts included, copied to pinned host memory when saved,
# once per backward op that reads it, on the compute stream, and back just before that op),
# beside the real runs.
#
#   run.sh gpu OUTDIR   on the GPU machine: captures and measurements into OUTDIR
#                       (OUTDIR/NAME.trace.gz, OUTDIR/NAME.MODE.json), one process each
#   run.sh [OUTDIR]     anywhere: predictions from OUTDIR's captures (default: the
#                       committed results/), printed beside the measurements with the
#                       difference; the table also goes to OUTDIR/comparison.txt
# Environment: MEMSIM (the memsim command, default sim/memsim), PYTHON (default python3),
# CASES (default cases.tsv), MACHINE (default h200-sxm), CKPT_HOST (profile, the default, or
# measured: checkpointing's host cost as the capture measured it on the model's own block,
# memsim --ckpt-host), VENV (run.sh gpu: where
# pip install ./python goes, default a new /tmp/memsim-venv-*), REPEATS (run.sh gpu: each
# measured run in this many processes, NAME.MODE.json then NAME.MODE.rN.json, rounds over all
# cases one after another; the table's step time is the median of the processes' medians,
# default 1), CAPTURES (run.sh gpu: each case captured in this many processes, NAME.cK.*,
# and the one whose own plain steps are the median taken as NAME.trace.gz by
# pick_capture.py; default 1), FROM_ROUND (run.sh gpu: the first round run, default 1: more
# processes added to an OUTDIR that has the rounds before), TO_ROUND (run.sh gpu: the last
# round run, default all: a long set split over several sessions of the GPU), MODES (run.sh gpu: the
# runs, default "capture keep ckpt save_on_cpu"; MODES=capture captures again beside
# measurements already in OUTDIR), HOST_TIMING (run.sh gpu: default 1, captures with host
# times, a timed step before the captured one and a profiled one after it; 0: kernel times
# alone, as results_kernels/ was captured), HOST_STEPS (run.sh gpu: the plain steps timed
# before the captured one, each phase's median taken; default 5).
#   run.sh snapshots OUTDIR [CASE...]
#                       on the GPU machine: the keep, ckpt and save_on_cpu runs of the named
#                       cases (default all) again with the caching allocator's history
#                       recorded over every step (OUTDIR/NAME.MODE.snapshot.pickle; their
#                       times are not plain), for memsim replay of what really ran, and a
#                       capture of the checkpointed program itself (NAME.ckpt-program.trace.gz)
#   run.sh ckpt-program OUTDIR [CASE...]
#                       on the GPU machine: that capture of the checkpointed program alone
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MEMSIM=${MEMSIM:-$ROOT/sim/memsim}
PYTHON=${PYTHON:-python3}
CASES=${CASES:-$HERE/cases.tsv}
MACHINE=${MACHINE:-h200-sxm}
CONFIGS=$ROOT/experiments/realworld/configs

cases() { grep -v '^#' "$CASES" | grep -v '^[[:space:]]*$'; }

# The package as a user gets it: pip install ./python (offline, no build isolation) into a
# virtual environment that sees the system's PyTorch and transformers, or, where venv is
# missing, into the user's site-packages; capture_run.py imports that, not the source tree.
install() {
    local venv=${VENV:-$(mktemp -d /tmp/memsim-venv-XXXXXX)}
    if "$PYTHON" -m venv --system-site-packages "$venv" >/dev/null 2>&1 &&
        "$venv/bin/python" -c 'import torch' 2>/dev/null; then
        PY="$venv/bin/python"
        "$PY" -m pip install --no-build-isolation --no-index --force-reinstall "$ROOT/python" >&2
    elif "$PYTHON" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
        # PYTHON is itself a virtual environment's (where PyTorch lives, as on the GPU
        # machine): a venv made from it would not see its packages; install beside them
        PY=$PYTHON
        export PYTHONPATH="$venv${PYTHONPATH:+:$PYTHONPATH}"
        "$PY" -m pip install --no-build-isolation --no-index --target "$venv" "$ROOT/python" >&2
    else
        PY=$PYTHON
        "$PY" -m pip install --user --no-build-isolation --no-index --force-reinstall \
            "$ROOT/python" >&2
    fi || {
        # the run still happens, on the source tree, and says so
        echo "run.sh: pip install ./python FAILED; running on the source tree instead" >&2
        PY=$PYTHON
        export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
    }
    (cd / && "$PY" -c 'import memsim, sys; print("memsim from", memsim.__file__, file=sys.stderr)')
}

gpu() {
    local out=$1 round
    mkdir -p "$out"
    install
    # Round 1 captures and measures; rounds 2..REPEATS measure the runs again, each in a new
    # process, after every case's round before (a slow minute of the host then touches one
    # process of each run, not all of them).
    # With CAPTURES=N every case is also captured in N processes (NAME.cK.*, one a round,
    # the rounds after the measured runs' first ones), and pick_capture.py takes the one whose
    # own plain steps are the median: the host's speed moves from process to process.
    local rounds=$(( ${REPEATS:-1} > ${CAPTURES:-1} ? ${REPEATS:-1} : ${CAPTURES:-1} ))
    for round in $(seq "${FROM_ROUND:-1}" "${TO_ROUND:-$rounds}"); do
        while IFS=$'\t' read -r name cfg prec seq batch; do
            for mode in ${MODES:-capture keep ckpt save_on_cpu}; do
                [ "$mode" = capture ] && [ "$round" -gt "${CAPTURES:-1}" ] && continue
                [ "$mode" != capture ] && [ "$round" -gt "${REPEATS:-1}" ] && continue
                local json="$out/$name.$mode.json" base="$out/$name"
                [ "$round" -gt 1 ] && json="$out/$name.$mode.r$round.json"
                if [ "$mode" = capture ] && [ "${CAPTURES:-1}" -gt 1 ]; then
                    base="$out/$name.c$round"
                    json="$base.capture.json"
                fi
                echo "== $name $mode (round $round, $(date +%T))" >&2
                extra=()
                [ "$mode" = capture ] && extra=(--trace "$base.trace.gz")
                [ "$mode" = capture ] && [ "${HOST_TIMING:-1}" != 0 ] &&
                    extra+=(--host-timing --host-steps "${HOST_STEPS:-5}"
                            --host-profiles "$base.host.json.gz")
                "$PY" "$HERE/capture_run.py" --config "$CONFIGS/$cfg" --precision "$prec" \
                    --seq "$seq" --batch "$batch" --mode "$mode" --out "$json" \
                    "${extra[@]}" || echo "$name $mode: failed (status $?)" >&2
            done
        done < <(cases)
    done
    if [ "${CAPTURES:-1}" -gt 1 ] && [[ " ${MODES:-capture} " == *" capture "* ]] &&
        [ "${TO_ROUND:-$rounds}" -ge "$rounds" ]; then
        while IFS=$'\t' read -r name _; do
            "$PY" "$HERE/pick_capture.py" "$out" "$name" >&2 || true
        done < <(cases)
    fi
}

# Whether case NAME is among the ones named after it (all when none is).
picked() {
    local name=$1; shift
    [ $# = 0 ] || printf '%s\n' "$@" | grep -x "$name" >/dev/null
}

snapshots() {
    local out=$1; shift
    mkdir -p "$out"
    install
    while IFS=$'\t' read -r name cfg prec seq batch; do
        picked "$name" "$@" || continue
        for mode in keep ckpt save_on_cpu; do
            echo "== $name $mode (allocator history)" >&2
            "$PY" "$HERE/capture_run.py" --config "$CONFIGS/$cfg" --precision "$prec" \
                --seq "$seq" --batch "$batch" --mode "$mode" \
                --out "$out/$name.$mode.snap.json" \
                --snapshot "$out/$name.$mode.snapshot.pickle" ||
                echo "$name $mode: failed (status $?)" >&2
        done
        ckpt_program "$out" "$name" "$cfg" "$prec" "$seq" "$batch"
    done < <(cases)
}

# A capture of the checkpointed program itself (gradient_checkpointing_enable()), to line up
# what really ran with what full-recompute predicts from the keep-all capture.
ckpt_program() {
    local out=$1 name=$2 cfg=$3 prec=$4 seq=$5 batch=$6
    echo "== $name capture of the checkpointed program" >&2
    "$PY" "$HERE/capture_run.py" --config "$CONFIGS/$cfg" --precision "$prec" \
        --seq "$seq" --batch "$batch" --mode capture --program ckpt \
        --host-timing --host-steps "${HOST_STEPS:-5}" \
        --trace "$out/$name.ckpt-program.trace.gz" \
        --out "$out/$name.ckpt-program.capture.json" ||
        echo "$name ckpt-program capture: failed (status $?)" >&2
}

ckpt_programs() {
    local out=$1; shift
    mkdir -p "$out"
    install
    while IFS=$'\t' read -r name cfg prec seq batch; do
        picked "$name" "$@" || continue
        ckpt_program "$out" "$name" "$cfg" "$prec" "$seq" "$batch"
    done < <(cases)
}

predict() {
    local dir=$1
    local tab="$dir/comparison.txt"
    {
        printf '%-22s %-12s %-10s %12s %12s %7s %12s %12s %7s %9s %9s %7s\n' case run policy \
            resv_meas resv_pred diff% alloc_meas alloc_pred diff% step_meas step_pred diff%
        while IFS=$'\t' read -r name cfg prec seq batch; do
            tr="$dir/$name.trace.gz"
            [ -f "$tr" ] || { echo "# $name: no capture in $dir" ; continue; }
            csv=$(mktemp)
            "$MEMSIM" compare --trace "$tr" --machine "$MACHINE" --ckpt-host "${CKPT_HOST:-profile}" \
                --policies keep-all,full-recompute,save-on-cpu --csv "$csv" >/dev/null 2>&1 || true
            for pair in keep:keep-all ckpt:full-recompute save_on_cpu:save-on-cpu; do
                mode=${pair%%:*}; pol=${pair#*:}
                "$PYTHON" "$HERE/compare.py" "$name" "$mode" "$pol" "$dir/$name.$mode.json" "$csv"
            done
            rm -f "$csv"
        done < <(cases)
    } | tee "$tab"
}

case "${1:-}" in
gpu) [ $# = 2 ] || { echo "usage: run.sh gpu OUTDIR" >&2; exit 2; }; gpu "$2" ;;
snapshots) [ $# -ge 2 ] || { echo "usage: run.sh snapshots OUTDIR [CASE...]" >&2; exit 2; }
    shift; snapshots "$@" ;;
ckpt-program) [ $# -ge 2 ] || { echo "usage: run.sh ckpt-program OUTDIR [CASE...]" >&2; exit 2; }
    shift; ckpt_programs "$@" ;;
-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' ;;
*) predict "${1:-$HERE/results}" ;;
esac

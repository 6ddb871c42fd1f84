#!/usr/bin/env bash
# experiments/validate/run.sh — memsim's validation: runs the cases of cases.tsv on a real GPU
# (`memsim run`, the runtime) and in the simulator (`memsim simulate`) and prints predicted
# against measured iteration time, peak reserved bytes and host-link busy time, with the
# errors, their medians and the host-link benchmark of the swap cases (docs/VALIDATION.md).
# `memsim validate` runs this script (MEMSIM in its environment is that memsim binary).
#
# usage:
#   run.sh gpu OUTDIR                  on the GPU machine: memsim run for every case, writes
#                                      OUTDIR/ID.csv and ID.log, device.csv, meta.tsv, runs.tsv,
#                                      the profile it ran with and the plan files it used
#   run.sh compare GPUDIR [--write-doc] [--out DIR]
#                                      here: memsim simulate for the same cases with the
#                                      profile of the device they ran on, prints the report;
#                                      --write-doc also rewrites the generated part of
#                                      docs/VALIDATION.md; DIR keeps the simulator's files
#                                      (default out/validate/sim)
#   run.sh plans [MACHINE...]          here (needs lp_solve): writes plans/MACHINE/ID.plan for
#                                      the cases whose plan column is `file` (default machines:
#                                      h100-sxm h200-sxm)
#   run.sh list                        the cases and the commands they run
#
# Environment: MEMSIM (memsim; default sim/memsim), MEMSIM_RUN (the runtime program, called as
# `$MEMSIM_RUN run ...`; default runtime/memsim-run, else `$MEMSIM run`), VALIDATE_ONLY (an
# extended regular expression: only the case ids it matches), VALIDATE_MACHINE (profile name
# instead of the one picked from the GPU's name), VALIDATE_MATH (spin | real: the compute actions
# of the cases' schedules as spin kernels of the modelled durations, the default, or as real
# kernels, once the runtime executes schedules that way), VALIDATE_REAL (no: skip the
# real-kernel runs, see real_math below), VALIDATE_RUN_OPTS (more options for every memsim run, for
# a diagnostic run such as --alloc-sync), VALIDATE_CASE_TIMEOUT (seconds per case, default 300).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$root/traces}
MEMSIM=${MEMSIM:-$root/sim/memsim}
CASES=$here/cases.tsv
AWK=$here/compare.awk

# The workload every case shares, and how the runtime issues it: at most 8 compute actions
# ahead of the GPU (what the simulator's stream-time frees model; docs/RUNTIME.md), the
# allocator capped at the profile's usable bytes (the simulator's device capacity).
DIMS=24,2048,16,8192,50257
ITERS=3
MAX_AHEAD=8

die() { echo "run.sh: $*" >&2; exit 2; }

usage() { sed -n '/^# usage:/,/^# Environment/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# Prints the cases as "id policy seq allocator plan role" lines, VALIDATE_ONLY applied.
cases() {
    awk -F'\t' -v only="${VALIDATE_ONLY:-}" '
        /^#/ || !NF || $1 == "id" { next }
        NF != 6 { printf "%s:%d: expected 6 tab-separated columns, found %d\n", FILENAME, FNR, NF > "/dev/stderr"; bad = 1; exit }
        only == "" || $1 ~ only { print $1, $2, $3, $4, $5, $6 }
        END { if (bad) exit 3 }' "$CASES"
}

# The policy options of one case: --policy NAME, or --plan FILE when a plan file is given.
policy_args() { # policy allocator planfile
    local a=()
    if [ -n "$3" ]; then a+=(--plan "$3"); else a+=(--policy "$1"); fi
    [ "$2" = - ] || a+=(--allocator "$2")
    echo "${a[@]}"
}

# The machine profile of a GPU, from its name (nvidia-smi's or the results CSV's device).
machine_of() {
    if [ -n "${VALIDATE_MACHINE:-}" ]; then echo "$VALIDATE_MACHINE"; return; fi
    case "$1" in
        *H100*) echo h100-sxm ;;
        *H200*) echo h200-sxm ;;
        *) echo "run.sh: no profile for the GPU '$1': set VALIDATE_MACHINE" >&2; return 1 ;;
    esac
}

cmd_list() {
    cases | while read -r id pol seq alloc plan role; do
        local pf=""
        [ "$plan" = file ] && pf="plans/MACHINE/$id.plan"
        printf '%-30s %-9s memsim run|simulate --dims %s --seq %s --iters %s %s\n' "$id" "$role" \
            "$DIMS" "$seq" "$ITERS" "$(policy_args "$pol" "$alloc" "$pf")"
    done
}

cmd_plans() {
    local machines=("$@")
    [ ${#machines[@]} -gt 0 ] || machines=(h100-sxm h200-sxm)
    [ -x "$MEMSIM" ] || die "$MEMSIM not found: build memsim first (make) or set MEMSIM"
    for m in "${machines[@]}"; do
        mkdir -p "$here/plans/$m"
        cases | while read -r id pol seq alloc plan role; do
            [ "$plan" = file ] || continue
            "$MEMSIM" plan --machine "$m" --dims "$DIMS" --seq "$seq" --iters "$ITERS" \
                --policy "$pol" -o "$here/plans/$m/$id.plan"
            echo "plans/$m/$id.plan"
        done
    done
}

cmd_gpu() {
    local out=${1:-}
    [ -n "$out" ] || die "usage: run.sh gpu OUTDIR"
    mkdir -p "$out/plans"
    out=$(cd "$out" && pwd)
    local run=()
    if [ -n "${MEMSIM_RUN:-}" ]; then run=("$MEMSIM_RUN" run)
    elif [ -x "$root/runtime/memsim-run" ]; then run=("$root/runtime/memsim-run" run)
    else run=("$MEMSIM" run); fi

    local dev="" m math=${VALIDATE_MATH:-spin} mathargs=()
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm \
            --format=csv > "$out/device.csv" 2> /dev/null || true
        dev=$(sed -n 2p "$out/device.csv" | cut -d, -f1)
    fi
    m=$(machine_of "$dev") || exit 1
    [ "$math" = spin ] || mathargs=(--math "$math")
    cp "$MEMSIM_DATADIR/machines/$m.machine" "$out/"
    [ -f "$MEMSIM_DATADIR/machines/$m.probe.csv" ] && cp "$MEMSIM_DATADIR/machines/$m.probe.csv" "$out/"
    cp "$CASES" "$out/cases.tsv"
    {
        printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'device\t%s\n' "${dev:-unknown}"
        printf 'machine\t%s\n' "$m"
        printf 'math\t%s\n' "$math"
        printf 'dims\t%s\n' "$DIMS"
        printf 'iters\t%s\n' "$ITERS"
        printf 'max_ahead\t%s\n' "$MAX_AHEAD"
        printf 'runtime\t%s\n' "${run[*]}"
        printf 'run_opts\t%s\n' "${VALIDATE_RUN_OPTS:-}"
        printf 'kernel\t%s\n' "$(uname -r)"
    } > "$out/meta.tsv"
    printf 'id\trc\twall_s\tplan\n' > "$out/runs.tsv"
    echo "validate: ${dev:-unknown GPU} -> profile $m, compute: $math, $(cases | wc -l) cases"
    local t_all=$SECONDS
    cases | while read -r id pol seq alloc plan role; do
        local pf="" how=policy
        if [ "$plan" = file ]; then
            pf="$here/plans/$m/$id.plan"
            if [ ! -f "$pf" ]; then
                # No plan made here for this profile: make one if memsim plans on this machine;
                # otherwise the runtime plans from the policy (then the report says so).
                pf="$out/plans/$id.plan"
                if ! "$MEMSIM" plan --machine "$m" --dims "$DIMS" --seq "$seq" --iters "$ITERS" \
                        --policy "$pol" -o "$pf" 2> /dev/null; then
                    pf=""; how=runtime-planned
                fi
            fi
            if [ -n "$pf" ]; then
                [ "$pf" = "$out/plans/$id.plan" ] || cp "$pf" "$out/plans/$id.plan"
                how=file
            fi
        fi
        local t0=$SECONDS rc=0
        # shellcheck disable=SC2046
        timeout "${VALIDATE_CASE_TIMEOUT:-300}" "${run[@]}" --machine "$m" --dims "$DIMS" \
            --seq "$seq" --iters "$ITERS" $(policy_args "$pol" "$alloc" "$pf") \
            --max-ahead "$MAX_AHEAD" --capacity machine "${mathargs[@]}" ${VALIDATE_RUN_OPTS:-} \
            --schedule "$out/$id.sched" --csv "$out/$id.csv" > "$out/$id.log" 2>&1 < /dev/null || rc=$?
        [ -f "$out/$id.sched" ] && gzip -f "$out/$id.sched"
        printf '%s\t%s\t%s\t%s\n' "$id" "$rc" "$((SECONDS - t0))" "$how" >> "$out/runs.tsv"
        printf '%-30s rc %-3s %4ss  %s\n' "$id" "$rc" "$((SECONDS - t0))" \
            "$(grep -m1 '^result:' "$out/$id.log" || tail -n1 "$out/$id.log")"
    done
    real_math "$out" "$m" "${run[@]}"
    echo "validate: all cases in $((SECONDS - t_all)) s; results in $out"
}

# Real kernels, where the runtime has them (`memsim run --math real` with --bench-layer and
# --train): one layer's forward and backward per sequence length (per-op times against the op-time
# model) and REAL_STEPS training steps of the whole model for the keep-all and full-recompute
# cases (the step time against the simulated iteration). VALIDATE_REAL=no skips them.
REAL_STEPS=5
real_math() {
    local out=$1 m=$2; shift 2
    local run=("$@")
    [ "${VALIDATE_REAL:-auto}" != no ] || return 0
    if ! "${run[@]}" --help 2>&1 | grep -q -- '--train'; then
        echo "validate: this runtime has no real-kernel training (--math real --train): skipped"
        return 0
    fi
    printf 'real_steps\t%s\n' "$REAL_STEPS" >> "$out/meta.tsv"
    local done_seqs=" "
    cases | while read -r id pol seq alloc plan role; do
        [ "$role" = matrix ] || continue
        case "$pol" in keep-all|full-recompute) ;; *) continue ;; esac
        local t0=$SECONDS rc=0
        if [ "${done_seqs#* $seq }" = "$done_seqs" ]; then
            done_seqs="$done_seqs$seq "
            timeout "${VALIDATE_CASE_TIMEOUT:-300}" "${run[@]}" --machine "$m" --dims "$DIMS" \
                --seq "$seq" --math real --bench-layer > "$out/bench-$seq.log" 2>&1 < /dev/null || rc=$?
            printf '%s\t%s\t%s\t%s\n' "bench-$seq" "$rc" "$((SECONDS - t0))" real >> "$out/runs.tsv"
            printf '%-30s rc %-3s %4ss  %s\n' "bench-$seq" "$rc" "$((SECONDS - t0))" \
                "$(grep -m1 '^time:' "$out/bench-$seq.log" || tail -n1 "$out/bench-$seq.log")"
            t0=$SECONDS; rc=0
        fi
        timeout "${VALIDATE_CASE_TIMEOUT:-300}" "${run[@]}" --machine "$m" --dims "$DIMS" \
            --seq "$seq" --policy "$pol" --math real --train "$REAL_STEPS" \
            > "$out/$id.train.log" 2>&1 < /dev/null || rc=$?
        printf '%s\t%s\t%s\t%s\n' "$id.train" "$rc" "$((SECONDS - t0))" real >> "$out/runs.tsv"
        printf '%-30s rc %-3s %4ss  %s\n' "$id.train" "$rc" "$((SECONDS - t0))" \
            "$(tail -n2 "$out/$id.train.log" | head -n1)"
    done
}

cmd_compare() {
    local gpu="" doc=0 sim=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --write-doc) doc=1 ;;
            --out) shift; sim=${1:-} ;;
            -*) die "compare: unknown option $1" ;;
            *) [ -z "$gpu" ] || die "compare: one GPUDIR only"; gpu=$1 ;;
        esac
        shift
    done
    [ -n "$gpu" ] && [ -d "$gpu" ] || die "usage: run.sh compare GPUDIR [--write-doc] [--out DIR]"
    [ -x "$MEMSIM" ] || die "$MEMSIM not found: build memsim first (make) or set MEMSIM"
    gpu=$(cd "$gpu" && pwd)
    sim=${sim:-$root/out/validate/sim}
    mkdir -p "$sim"
    sim=$(cd "$sim" && pwd)
    # The cases as they were run (the GPU directory's copy), VALIDATE_ONLY applied.
    [ -f "$gpu/cases.tsv" ] && CASES=$gpu/cases.tsv
    local args=(kind=cases "$CASES") machine="" n=0
    [ -f "$gpu/meta.tsv" ] && args+=(kind=meta "$gpu/meta.tsv")
    [ -f "$gpu/device.csv" ] && args+=(kind=device "$gpu/device.csv")
    [ -f "$gpu/runs.tsv" ] && args+=(kind=runs "$gpu/runs.tsv")
    : > "$sim/same.tsv"
    rm -f "$sim"/trace-*.ops
    while read -r id pol seq alloc plan role; do
        [ -f "$gpu/$id.csv" ] || { echo "run.sh: no GPU result for $id ($gpu/$id.csv)" >&2; continue; }
        local dev m prof pf=""
        dev=$(awk -f "$AWK" -v mode=field -v col=device "$gpu/$id.csv")
        m=$(machine_of "$dev") || exit 1
        if [ -n "$machine" ] && [ "$m" != "$machine" ]; then
            die "$id ran on '$dev' ($m), earlier cases on $machine: one device per GPUDIR"
        fi
        machine=$m
        # The profile the runtime ran with (its copy in GPUDIR), else the tree's.
        prof=$gpu/$m.machine
        [ -f "$prof" ] || prof=$MEMSIM_DATADIR/machines/$m.machine
        if [ "$plan" = file ]; then
            if [ -f "$gpu/plans/$id.plan" ]; then pf=$gpu/plans/$id.plan
            elif [ -f "$here/plans/$m/$id.plan" ]; then pf=$here/plans/$m/$id.plan; fi
        fi
        # shellcheck disable=SC2046
        "$MEMSIM" simulate --machine "$prof" --dims "$DIMS" --seq "$seq" --iters "$ITERS" \
            $(policy_args "$pol" "$alloc" "$pf") --csv "$sim/$id.csv" \
            --schedule "$sim/$id.sched" --quiet
        # The simulator must execute the schedule the GPU executed (same generator, planner and
        # lowering): a build that changed between the two runs shows here.
        local same=unknown
        if [ -f "$gpu/$id.sched.gz" ]; then
            if gzip -dc "$gpu/$id.sched.gz" | cmp -s - "$sim/$id.sched"; then same=yes; else same=no
                echo "run.sh: $id: the simulator's schedule differs from the one the GPU ran" >&2; fi
        fi
        printf '%s\t%s\n' "$id" "$same" >> "$sim/same.tsv"
        # Only the copies are needed (the host-link benchmark's transfer sizes).
        awk '$3 == "copy_h2d" || $3 == "copy_d2h" { sub(/^bytes=/, "", $5); print $3, $5 }' \
            "$sim/$id.sched" > "$sim/$id.copies"
        rm -f "$sim/$id.sched"
        args+=(kind=gpu id="$id" "$gpu/$id.csv" kind=sim id="$id" "$sim/$id.csv"
               kind=copies id="$id" "$sim/$id.copies")
        [ -f "$gpu/$id.log" ] && args+=(kind=log id="$id" "$gpu/$id.log")
        [ -f "$gpu/$id.train.log" ] && args+=(kind=train id="$id" "$gpu/$id.train.log")
        if [ -f "$gpu/bench-$seq.log" ] && [ ! -f "$sim/trace-$seq.ops" ]; then
            # The op-time model's durations of layer 0, for the one-layer benchmark.
            "$MEMSIM" trace gen --machine "$prof" --dims "$DIMS" --seq "$seq" --iters 1 \
                -o "$sim/trace-$seq.trace"
            awk '$1 == "op" && $NF ~ /^L0\./ { print substr($NF, 4), $9 }' "$sim/trace-$seq.trace" \
                > "$sim/trace-$seq.ops"
            rm -f "$sim/trace-$seq.trace"
            args+=(kind=ops seq="$seq" "$sim/trace-$seq.ops" kind=bench seq="$seq" "$gpu/bench-$seq.log")
        fi
        n=$((n + 1))
    done < <(cases)
    [ "$n" -gt 0 ] || die "no case of $CASES has a result in $gpu"
    local probe=$gpu/$machine.probe.csv
    [ -f "$probe" ] || probe=$MEMSIM_DATADIR/machines/$machine.probe.csv
    [ -f "$probe" ] && args+=(kind=probe "$probe")
    local prof=$gpu/$machine.machine
    [ -f "$prof" ] || prof=$MEMSIM_DATADIR/machines/$machine.machine
    args+=(kind=machine "$prof")
    args+=(kind=same "$sim/same.tsv")
    if [ -f "$gpu/$machine.machine" ] && ! cmp -s "$gpu/$machine.machine" "$MEMSIM_DATADIR/machines/$machine.machine"; then
        echo "run.sh: note: $gpu/$machine.machine (what the GPU ran with, used here) differs from the tree's profile" >&2
    fi
    local report=$sim/report.md
    awk -f "$AWK" -v mode=report -v dims="$DIMS" -v iters="$ITERS" -v machine="$machine" \
        "${args[@]}" > "$report"
    cat "$report"
    if [ "$doc" = 1 ]; then
        local docf=$root/docs/VALIDATION.md
        [ -f "$docf" ] || die "$docf not found (it holds the hand-written analysis around the generated part)"
        awk -v rep="$report" '
            /<!-- BEGIN GENERATED/ { print; while ((getline l < rep) > 0) print l; skip = 1; found = 1; next }
            /<!-- END GENERATED/ { skip = 0 }
            !skip { print }
            END { if (!found) { print "run.sh: no <!-- BEGIN GENERATED --> marker in the doc" > "/dev/stderr"; exit 1 } }' \
            "$docf" > "$docf.tmp.$$" && mv "$docf.tmp.$$" "$docf"
        echo "run.sh: wrote the generated part of $docf" >&2
    fi
}

case "${1:-}" in
    gpu) shift; cmd_gpu "$@" ;;
    compare) shift; cmd_compare "$@" ;;
    plans) shift; cmd_plans "$@" ;;
    list) cmd_list ;;
    -h|--help|help) usage ;;
    *) usage >&2; exit 2 ;;
esac

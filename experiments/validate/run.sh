#!/usr/bin/env bash
# experiments/validate/run.sh — memsim's validation: runs the cases of cases.tsv on a real GPU
# (`memsim run`, the runtime) and in the simulator (`memsim simulate`) and prints predicted
# against measured iteration time, peak reserved bytes and host-link busy time, with the
# errors, their medians, the op-time model against real kernels, and the host-link benchmark
# of the swap cases (docs/VALIDATION.md). `memsim validate` runs this script (MEMSIM in its
# environment is that memsim binary).
#
# usage:
#   run.sh gpu OUTDIR                  on the GPU machine: memsim run for every case; writes
#                                      OUTDIR/ID.csv, ID.log, ID.sched.gz (and ID.ops.csv for
#                                      real-kernel cases), device.csv, meta.tsv, runs.tsv, the
#                                      profile, plan files and traces it ran with
#   run.sh compare GPUDIR [--write-doc] [--out DIR]
#                                      here: memsim simulate for the same cases with the
#                                      profile of the device they ran on, prints the report;
#                                      --write-doc also rewrites the generated part of
#                                      docs/VALIDATION.md; DIR keeps the simulator's files
#                                      (default out/validate/sim)
#   run.sh prepare [MACHINE...]        here (needs lp_solve and the built library): writes
#                                      traces/MACHINE/real-SEQ.trace.gz for the real-kernel
#                                      cases, traces/MACHINE/offload-SEQ.trace.gz for the
#                                      host-offload cases, and plans/MACHINE/ID.plan for the
#                                      cases whose plan column is `file` (default machines:
#                                      h100-sxm h200-sxm)
#   run.sh list                        the cases and the commands they run
#
# Environment: VALIDATE_CASES (another cases file in cases.tsv's format, e.g. a sweep's; its
# plan=file cases without a file in plans/MACHINE are planned where they run), MEMSIM (memsim;
# default sim/memsim), MEMSIM_RUN (the runtime program, called as
# `$MEMSIM_RUN run ...`; default runtime/memsim-run, else `$MEMSIM run`; the file must be named
# memsim-run, which is how it takes the subcommand from its first argument), VALIDATE_ONLY (an
# extended regular expression: only the case ids it matches), VALIDATE_MACHINE (profile name
# instead of the one picked from the GPU's name), VALIDATE_RUN_OPTS (more options for every
# memsim run, for a diagnostic run such as --max-ahead 1), VALIDATE_CASE_TIMEOUT (seconds per
# case, default 300), VALIDATE_SIM_OPTS (options for every memsim simulate of `compare`; default
# `--issue-ahead 8`: the host issue model with the runtime's bound, so that allocator calls
# happen at issue time on both sides; set it empty for the stream-time model).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$root/traces}
MEMSIM=${MEMSIM:-$root/sim/memsim}
CASES=${VALIDATE_CASES:-$here/cases.tsv}
AWK=$here/compare.awk

# The workload every case shares, and how the runtime issues it: at most 8 compute actions
# ahead of the GPU (what the simulator's stream-time frees model; docs/RUNTIME.md), the
# allocator capped at the profile's usable bytes (the simulator's device capacity).
# Vocabulary 50304: GPT-2's 50257 padded to a multiple of 128, as Megatron-LM and nanoGPT do
# (at 50257 the logits' rows are 2-byte aligned and cuBLAS takes kernels 5-8x slower: measured
# on an H200, docs/VALIDATION.md).
DIMS=24,2048,16,8192,50304
ITERS=3
MAX_AHEAD=8
# The simulator's options in `compare`: the host issue model at the runtime's bound, unless
# VALIDATE_SIM_OPTS says otherwise (set and empty: the stream-time model).
SIM_OPTS=${VALIDATE_SIM_OPTS---issue-ahead $MAX_AHEAD}

die() { echo "run.sh: $*" >&2; exit 2; }

usage() { sed -n '/^# usage:/,/^# Environment/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# Prints the cases as "id policy seq allocator plan role math" lines, VALIDATE_ONLY applied.
cases() {
    awk -F'\t' -v only="${VALIDATE_ONLY:-}" '
        /^#/ || !NF || $1 == "id" { next }
        NF != 7 { printf "%s:%d: expected 7 tab-separated columns, found %d\n", FILENAME, FNR, NF > "/dev/stderr"; bad = 1; exit }
        $2 ~ /[+]/ && $5 != "file" { printf "%s:%d: policy %s has knobs: its plan column must be file\n", FILENAME, FNR, $2 > "/dev/stderr"; bad = 1; exit }
        $7 != "spin" && $7 != "real" { printf "%s:%d: math must be spin or real, not %s\n", FILENAME, FNR, $7 > "/dev/stderr"; bad = 1; exit }
        only == "" || $1 ~ only { print $1, $2, $3, $4, $5, $6, $7 }
        END { if (bad) exit 3 }' "$CASES"
}

# The trace file a case runs on, by name (empty: the generator's workload): a real-kernel case
# reads real-SEQ (the generator with fp32 gradients and the small saved tensors, as memsim run
# --math real generates it); a host-offload policy (zero-offload, memferry, go-memferry: their
# plans need the generator's ZeRO-Offload trace, `--gen offload=1`) reads offload-SEQ. Both
# are made by `run.sh prepare`; a real-kernel host-offload case reads real-offload-SEQ (both,
# its host Adam ops timed by the profile's rt.host_adam_params_per_s, the runtime's own step).
trace_name() { # seq math policy
    local off=""
    is_offload "$3" && off=offload-
    if [ "$2" = real ]; then echo "real-$off$1.trace.gz"; return; fi
    [ -n "$off" ] && echo "offload-$1.trace.gz"
    return 0
}

# The policy name of a policy column: the text before the first '+', except for the MEMO
# variants whose names hold one (full-recompute+plan, full-swap+plan).
pol_name() { # policy
    case "$1" in
        full-recompute+plan|full-recompute+plan+*) echo full-recompute+plan ;;
        full-swap+plan|full-swap+plan+*) echo full-swap+plan ;;
        *) echo "${1%%+*}" ;;
    esac
}

# Whether a policy column names a host-offload policy (its plans need the ZeRO-Offload trace).
is_offload() { # policy
    case "$(pol_name "$1")" in zero-offload|memferry|go-memferry) return 0 ;; esac
    return 1
}

# The workload options of one case: --trace FILE when it has one, else the generator's.
workload_args() { # seq tracefile
    if [ -n "$2" ]; then echo --trace "$2"
    else echo --dims "$DIMS" --seq "$1" --iters "$ITERS"; fi
}

# The policy options of one case: --policy NAME, or --plan FILE when a plan file is given.
# The policy column may carry knobs after the name (go-memferry+reserve=0.5): they reach the
# planner of `run.sh prepare` (memsim plan --knob), so such a case needs a plan file.
policy_args() { # policy allocator planfile
    local a=()
    if [ -n "$3" ]; then a+=(--plan "$3"); else a+=(--policy "$(pol_name "$1")"); fi
    [ "$2" = - ] || a+=(--allocator "$2")
    echo "${a[@]}"
}

# The planner options of a policy column: --policy NAME and a --knob per +KEY=VALUE.
plan_args() { # policy
    local name rest a
    name=$(pol_name "$1")
    rest=${1#"$name"}
    a=(--policy "$name")
    while [ "$rest" != "${rest#*+}" ]; do
        rest=${rest#*+}
        a+=(--knob "${rest%%+*}")
    done
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
    cases | while read -r id pol seq alloc plan role math; do
        local pf="" tn
        [ "$plan" = file ] && pf="plans/MACHINE/$id.plan"
        tn=$(trace_name "$seq" "$math" "$pol")
        printf '%-28s %-9s %-4s memsim run|simulate %s %s\n' "$id" "$role" "$math" \
            "$(workload_args "$seq" "${tn:+traces/MACHINE/$tn}")" \
            "$(policy_args "$pol" "$alloc" "$pf")"
    done
}

# The generator helper (gentrace.c) against the built library.
gentrace_bin() {
    local b=$root/out/validate/gentrace
    mkdir -p "$root/out/validate"
    if [ ! -x "$b" ] || [ "$here/gentrace.c" -nt "$b" ] || [ "$root/libmemsim.a" -nt "$b" ]; then
        [ -f "$root/libmemsim.a" ] || die "libmemsim.a not found: build memsim first (make)"
        # the libraries configure found for the library (jansson for config.json, ...)
        local libs
        libs=$(sed -n 's/^\(LPSOLVE\|GSL\|JANSSON\|ZLIB\)_LIBS = //p' "$root/Makefile" 2> /dev/null |
            tr '\n' ' ')
        # shellcheck disable=SC2086
        ${CC:-gcc} -std=c11 -O2 -I"$root" "$here/gentrace.c" "$root/libmemsim.a" \
            ${libs:--ljansson -lz} -lm -o "$b" || die "cannot build $b"
    fi
    echo "$b"
}

cmd_prepare() {
    local machines=("$@")
    [ ${#machines[@]} -gt 0 ] || machines=(h100-sxm h200-sxm)
    [ -x "$MEMSIM" ] || die "$MEMSIM not found: build memsim first (make) or set MEMSIM"
    local gt
    gt=$(gentrace_bin)
    for m in "${machines[@]}"; do
        mkdir -p "$here/plans/$m" "$here/traces/$m"
        cases | while read -r id pol seq alloc plan role math; do
            local tn tf=""
            tn=$(trace_name "$seq" "$math" "$pol")
            [ -n "$tn" ] && tf=$here/traces/$m/$tn
            if [ "$math" = real ] && is_offload "$pol" && [ ! -f "$tf" ] &&
                ! grep -q '^rt.host_adam_params_per_s' "$MEMSIM_DATADIR/machines/$m.machine"; then
                echo "$id: profile $m has no rt.host_adam_params_per_s (memsim probe --host-adam" \
                    "on that machine): skipped" >&2
                continue
            fi
            if [ "$math" = real ] && [ ! -f "$tf" ]; then
                # the op times of memsim's own kernels, as memsim probe measured them
                local og=()
                is_offload "$pol" && og=(--gen offload=1)
                "$gt" --machine "$m" --dims "$DIMS" --seq "$seq" --iters "$ITERS" \
                    --gen kernels=runtime "${og[@]}" -o "$tf"
                echo "traces/$m/$tn"
            elif [ -n "$tf" ] && [ ! -f "$tf" ]; then
                "$MEMSIM" trace gen --machine "$m" --dims "$DIMS" --seq "$seq" --iters "$ITERS" \
                    --gen offload=1 -o "$tf"
                echo "traces/$m/$tn"
            fi
            [ "$plan" = file ] || continue
            # shellcheck disable=SC2046
            "$MEMSIM" plan --machine "$m" $(workload_args "$seq" "$tf") \
                $(plan_args "$pol") -o "$here/plans/$m/$id.plan"
            echo "plans/$m/$id.plan"
        done
    done
}

# A one-stream real-kernel run (keep-all, recomputation) prints its result but writes no CSV:
# the columns the comparison reads, from the log.
csv_from_log() { # log csv id policy allocator
    awk -v pol="$3" -v alc="$4" '
        /^device: / { d = $0; sub(/^device: /, "", d); sub(/ \(.*/, "", d) }
        /^workload: / && match($0, /allocator [a-z]+/) { alc = substr($0, RSTART + 10, RLENGTH - 10) }
        /^iter [0-9]+ / { nom = $4 / 1000 }
        /^memory: peak allocated / { pa = $4 * 1073741824; pr = $7 * 1073741824 }
        /^result: ok, iteration / { st = "ok"; it = $4 }
        END {
            print "policy,allocator,status,iter_time_s,peak_allocated_bytes,peak_reserved_bytes,peak_active_bytes,fragmentation,host_peak_bytes,h2d_busy_s,d2h_busy_s,executor,device,nominal_iter_s,h2d_large_Bps,d2h_large_Bps"
            if (st == "") { st = "error"; it = 0 }
            printf "%s,%s,%s,%s,%.0f,%.0f,%.0f,%s,0,0,0,gpu-one-stream,%s,%s,0,0\n", pol, alc, st, it, pa, pr, pa,
                (pr > 0 ? 1 - pa / pr : 0), d, nom
        }' "$1" > "$2"
}

cmd_gpu() {
    local out=${1:-}
    [ -n "$out" ] || die "usage: run.sh gpu OUTDIR"
    cases > /dev/null || exit 3
    mkdir -p "$out/plans" "$out/traces"
    out=$(cd "$out" && pwd)
    local run=()
    if [ -n "${MEMSIM_RUN:-}" ]; then run=("$MEMSIM_RUN" run)
    elif [ -x "$root/runtime/memsim-run" ]; then run=("$root/runtime/memsim-run" run)
    else run=("$MEMSIM" run); fi

    local dev="" m
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm \
            --format=csv > "$out/device.csv" 2> /dev/null || true
        dev=$(sed -n 2p "$out/device.csv" | cut -d, -f1)
    fi
    m=$(machine_of "$dev") || exit 1
    cp "$MEMSIM_DATADIR/machines/$m.machine" "$out/"
    [ -f "$MEMSIM_DATADIR/machines/$m.probe.csv" ] && cp "$MEMSIM_DATADIR/machines/$m.probe.csv" "$out/"
    cp "$CASES" "$out/cases.tsv"
    {
        printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'device\t%s\n' "${dev:-unknown}"
        printf 'machine\t%s\n' "$m"
        printf 'dims\t%s\n' "$DIMS"
        printf 'iters\t%s\n' "$ITERS"
        printf 'max_ahead\t%s\n' "$MAX_AHEAD"
        printf 'runtime\t%s\n' "${run[*]}"
        printf 'run_opts\t%s\n' "${VALIDATE_RUN_OPTS:-}"
        printf 'kernel\t%s\n' "$(uname -r)"
    } > "$out/meta.tsv"
    [ -f "$out/runs.tsv" ] || printf 'id\trc\twall_s\tplan\n' > "$out/runs.tsv"
    echo "validate: ${dev:-unknown GPU} -> profile $m, $(cases | wc -l) cases"
    local t_all=$SECONDS smi=""
    # the SM clock and the power through the cases (smi.csv, every 250 ms): the real-kernel
    # cases run at the clock the GPU holds under its power limit, which the profile's burst
    # rates do not see (docs/VALIDATION.md, 2026-12-04)
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit \
            --format=csv -lms 250 > "$out/smi.csv" 2> /dev/null &
        smi=$!
    fi
    cases | while read -r id pol seq alloc plan role math; do
        local pf="" how=policy tf="" tn extra=()
        tn=$(trace_name "$seq" "$math" "$pol")
        if [ -n "$tn" ]; then
            tf=$here/traces/$m/$tn
            if [ ! -f "$tf" ]; then
                printf '%s\t%s\t%s\t%s\n' "$id" 3 0 no-trace >> "$out/runs.tsv"
                echo "$id: no trace $tf (run.sh prepare $m): skipped"
                continue
            fi
            cp "$tf" "$out/traces/"
            tf=$out/traces/$tn
        fi
        if [ "$math" = real ]; then
            extra=(--math real)
            # One-stream plans also time every op (their events are there anyway).
            case "$pol" in keep-all|full-recompute) extra+=(--ops-csv "$out/$id.ops.csv") ;; esac
        fi
        if [ "$plan" = file ]; then
            pf="$here/plans/$m/$id.plan"
            if [ ! -f "$pf" ]; then
                # No plan made here for this profile: make one if memsim plans on this machine;
                # otherwise the runtime plans from the policy (then the report says so).
                pf="$out/plans/$id.plan"
                # shellcheck disable=SC2046
                if ! "$MEMSIM" plan --machine "$m" $(workload_args "$seq" "$tf") \
                        $(plan_args "$pol") -o "$pf" 2> /dev/null; then
                    pf=""; how=runtime-planned
                fi
            fi
            if [ -n "$pf" ]; then
                [ "$pf" = "$out/plans/$id.plan" ] || cp "$pf" "$out/plans/$id.plan"
                how="file"
            fi
        fi
        rm -f "$out/$id.csv"
        local t0=$SECONDS rc=0
        # shellcheck disable=SC2046,SC2086  # the options split into words on purpose
        timeout "${VALIDATE_CASE_TIMEOUT:-300}" "${run[@]}" --machine "$m" \
            $(workload_args "$seq" "$tf") $(policy_args "$pol" "$alloc" "$pf") \
            --max-ahead "$MAX_AHEAD" --capacity machine "${extra[@]}" ${VALIDATE_RUN_OPTS:-} \
            --schedule "$out/$id.sched" --csv "$out/$id.csv" > "$out/$id.log" 2>&1 < /dev/null || rc=$?
        [ -f "$out/$id.sched" ] && gzip -f "$out/$id.sched"
        if [ ! -f "$out/$id.csv" ] && [ "$math" = real ]; then
            csv_from_log "$out/$id.log" "$out/$id.csv" "$pol" "$alloc"
        fi
        printf '%s\t%s\t%s\t%s\n' "$id" "$rc" "$((SECONDS - t0))" "$how" >> "$out/runs.tsv"
        printf '%-28s rc %-3s %4ss  %s\n' "$id" "$rc" "$((SECONDS - t0))" \
            "$(grep -m1 '^result:' "$out/$id.log" || tail -n1 "$out/$id.log")"
        printf '%s\t%s\n' "$id" "$(date -u +%H:%M:%S)" >> "$out/times.tsv"
    done
    [ -n "$smi" ] && kill "$smi" 2> /dev/null
    echo "validate: all cases in $((SECONDS - t_all)) s; results in $out"
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
    [ -n "$gpu" ] || die "usage: run.sh compare GPUDIR [--write-doc] [--out DIR]"
    if [ ! -d "$gpu" ]; then echo "run.sh: compare: $gpu: not a directory (the folder run.sh gpu wrote)" >&2; exit 4; fi
    [ -x "$MEMSIM" ] || die "$MEMSIM not found: build memsim first (make) or set MEMSIM"
    gpu=$(cd "$gpu" && pwd)
    # The cases as they were run (the GPU directory's copy), VALIDATE_ONLY applied.
    [ -f "$gpu/cases.tsv" ] && CASES=$gpu/cases.tsv
    cases > /dev/null || exit 3
    # Inputs before outputs: without a single GPU result nothing below may touch the output.
    local any=0 cid
    for cid in $(cases | awk '{print $1}'); do [ -f "$gpu/$cid.csv" ] && any=1; done
    if [ $any = 0 ]; then
        echo "run.sh: compare: no GPU results (CASE.csv of the selected cases) in $gpu" >&2
        exit 3
    fi
    sim=${sim:-$root/out/validate/sim}
    mkdir -p "$sim"
    sim=$(cd "$sim" && pwd)
    # The report lists the cases VALIDATE_ONLY selects (the header and comments kept).
    awk -F'\t' -v only="${VALIDATE_ONLY:-}" '/^#/ || !NF || $1 == "id" || only == "" || $1 ~ only' \
        "$CASES" > "$sim/cases.tsv"
    local args=(kind=cases "$sim/cases.tsv") machine="" n=0
    [ -f "$gpu/meta.tsv" ] && args+=(kind=meta "$gpu/meta.tsv")
    [ -f "$gpu/device.csv" ] && args+=(kind=device "$gpu/device.csv")
    [ -f "$gpu/runs.tsv" ] && args+=(kind=runs "$gpu/runs.tsv")
    : > "$sim/same.tsv"
    rm -f "$sim"/cal-*.trace.gz
    while read -r id pol seq alloc plan role math; do
        [ -f "$gpu/$id.csv" ] || { echo "run.sh: no GPU result for $id ($gpu/$id.csv)" >&2; continue; }
        local dev m prof pf="" tf="" tn
        dev=$(awk -f "$AWK" -v mode=field -v col=device "$gpu/$id.csv")
        m=$(machine_of "$dev") || exit 1
        if [ -n "$machine" ] && [ "$m" != "$machine" ]; then
            die "$id ran on '$dev' ($m), earlier cases on $machine: one device per GPUDIR"
        fi
        machine=$m
        # The profile, plan file and trace the runtime ran with (their copies in GPUDIR).
        prof=$gpu/$m.machine
        [ -f "$prof" ] || prof=$MEMSIM_DATADIR/machines/$m.machine
        if [ "$plan" = file ]; then
            if [ -f "$gpu/plans/$id.plan" ]; then pf=$gpu/plans/$id.plan
            elif [ -f "$here/plans/$m/$id.plan" ]; then pf=$here/plans/$m/$id.plan; fi
        fi
        tn=$(trace_name "$seq" "$math" "$pol")
        if [ -n "$tn" ]; then
            tf=$gpu/traces/$tn
            [ -f "$tf" ] || tf=$here/traces/$m/$tn
        fi
        # shellcheck disable=SC2046
        "$MEMSIM" simulate --machine "$prof" $(workload_args "$seq" "$tf") \
            $(policy_args "$pol" "$alloc" "$pf") $SIM_OPTS --csv "$sim/$id.csv" \
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
        [ -f "$gpu/$id.ops.csv" ] && args+=(kind=ops id="$id" "$gpu/$id.ops.csv")
        # Real kernels: simulated once more with the op times the keep-all real-kernel run of
        # this length measured (the trace's durations replaced by them, op by op); not the
        # host-offload traces, whose ops differ from keep-all's.
        local ops=$gpu/keep-all-$seq-real.ops.csv
        if [ "$math" = real ] && [ -f "$ops" ] && ! is_offload "$pol"; then
            local ct=$sim/cal-$seq.trace.gz
            if [ ! -f "$ct" ] || [ "$ops" -nt "$ct" ]; then
                gzip -dc "$tf" | awk -f "$AWK" -v mode=calibrate "$ops" - | gzip > "$ct"
            fi
            # shellcheck disable=SC2046
            "$MEMSIM" simulate --machine "$prof" --trace "$ct" $(policy_args "$pol" "$alloc" "$pf") \
                $SIM_OPTS --csv "$sim/$id.cal.csv" --quiet
            args+=(kind=cal id="$id" "$sim/$id.cal.csv")
        fi
        # Real-kernel host-offload cases: simulated once more with the trace's host AdamW steps
        # scaled to the rate the run's last iteration measured (its log's host_ms over
        # host_nominal_ms), to tell the host's speed on the day from the rest of the model.
        local hr=""
        if [ "$math" = real ] && is_offload "$pol" && [ -n "$tf" ] && [ -f "$gpu/$id.log" ]; then
            hr=$(awk -f "$AWK" -v mode=hostratio "$gpu/$id.log")
        fi
        if [ -n "$hr" ]; then
            local ht=$sim/$id.host.trace.gz
            gzip -dc "$tf" | awk -f "$AWK" -v mode=hostscale -v f="$hr" | gzip > "$ht"
            # shellcheck disable=SC2046
            "$MEMSIM" simulate --machine "$prof" --trace "$ht" $(policy_args "$pol" "$alloc" "$pf") \
                $SIM_OPTS --csv "$sim/$id.hcal.csv" --quiet
            rm -f "$ht"
            args+=(kind=hcal id="$id" "$sim/$id.hcal.csv")
        fi
        n=$((n + 1))
    done < <(cases)
    [ "$n" -gt 0 ] || die "no case of $CASES has a result in $gpu"
    local probe=$gpu/$machine.probe.csv
    [ -f "$probe" ] || probe=$MEMSIM_DATADIR/machines/$machine.probe.csv
    [ -f "$probe" ] && args+=(kind=probe "$probe")
    local prof=$gpu/$machine.machine
    [ -f "$prof" ] || prof=$MEMSIM_DATADIR/machines/$machine.machine
    args+=(kind=machine "$prof" kind=same "$sim/same.tsv")
    if [ -f "$gpu/$machine.machine" ] && ! cmp -s "$gpu/$machine.machine" "$MEMSIM_DATADIR/machines/$machine.machine"; then
        echo "run.sh: note: $gpu/$machine.machine (what the GPU ran with, used here) differs from the tree's profile" >&2
    fi
    local report=$sim/report.md
    awk -f "$AWK" -v mode=report -v dims="$DIMS" -v iters="$ITERS" -v machine="$machine" \
        -v simopts="$SIM_OPTS" "${args[@]}" > "$report"
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
    prepare|plans) shift; cmd_prepare "$@" ;;
    list) cmd_list ;;
    -h|--help|help) usage ;;
    *) usage >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# experiments/nodes/run.sh — the node model validated: the cases of cases.tsv (GPT-7B at TP 2,
# DP 2, TP 4 and TP 2 x CP 2; keep-all, full recomputation, full swap, memo) run on several GPUs
# of one node (`memsim run`, one process per GPU, NCCL's collectives) after `memsim probe
# --collectives` has measured the node, then simulated with that profile (`memsim simulate`),
# predicted against measured iteration time, peak reserved per rank and the node's pinned host
# memory (docs/VALIDATION.md, "Several GPUs of one node").
#
# usage:
#   run.sh prepare                 here (needs lp_solve): plans/h200-sxm/ID.plan for the cases
#                                  whose plan column is file
#   run.sh gpu OUTDIR              on a machine of 2, 4 or 8 GPUs: the probe (OUTDIR/h200-Ngpu
#                                  .machine, probe-collectives.csv), then every case whose
#                                  layout fits the GPUs: OUTDIR/ID.csv (a row per rank), ID.log;
#                                  runs.tsv; a case with a CSV already is not run again
#   run.sh compare OUTDIR          here or there: memsim simulate for every case with a result,
#                                  with OUTDIR's profile, and the comparison (Markdown)
#   run.sh list                    the cases and their commands
#
# Environment: MEMSIM (default sim/memsim), NODES_ONLY (an extended regular expression: only
# the case ids it matches), NODES_CASE_TIMEOUT (seconds per case, default 900), NODES_MACHINE
# (the profile for the runs instead of the probe's, e.g. h200-sxm), NODES_PROBE=0 (no probe:
# the runs take NODES_MACHINE or h200-sxm).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export MEMSIM_DATADIR=${MEMSIM_DATADIR:-$root/traces}
MEMSIM=${MEMSIM:-$root/sim/memsim}
CASES=$here/cases.tsv
MODEL=gpt-7b
ITERS=3
MAX_AHEAD=8
BASE=h200-sxm
# NVLink multicast off in everything this script starts (the runtime sets it too)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

die() { echo "run.sh: $*" >&2; exit 2; }
usage() { sed -n '/^# usage:/,/^# Environment/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# The cases as "id tp cp dp policy seq plan" lines, NODES_ONLY applied.
cases() {
    awk -F'\t' -v only="${NODES_ONLY:-}" '
        /^#/ || !NF || $1 == "id" { next }
        NF != 7 { printf "%s:%d: expected 7 tab-separated columns, found %d\n", FILENAME, FNR, NF > "/dev/stderr"; bad = 1; exit }
        only == "" || $1 ~ only { print $1, $2, $3, $4, $5, $6, $7 }
        END { if (bad) exit 3 }' "$CASES"
}

workload() { # tp cp dp seq
    echo --model "$MODEL" --seq "$4" --tp "$1" --cp "$2" --dp "$3" --iters "$ITERS"
}

policy_args() { # id policy plan
    if [ "$3" = file ]; then echo --plan "$here/plans/$BASE/$1.plan"; else echo --policy "$2"; fi
}

cmd_list() {
    cases | while read -r id tp cp dp pol seq plan; do
        printf '%-22s %2d GPUs  memsim run|simulate %s %s\n' "$id" $((tp * cp * dp)) \
            "$(workload "$tp" "$cp" "$dp" "$seq")" "$(policy_args "$id" "$pol" "$plan")"
    done
}

cmd_prepare() {
    [ -x "$MEMSIM" ] || die "$MEMSIM not found: build memsim first (make) or set MEMSIM"
    mkdir -p "$here/plans/$BASE"
    cases | while read -r id tp cp dp pol seq plan; do
        [ "$plan" = file ] || continue
        # shellcheck disable=SC2046
        "$MEMSIM" plan --machine "$BASE" $(workload "$tp" "$cp" "$dp" "$seq") --policy "$pol" \
            -o "$here/plans/$BASE/$id.plan"
        echo "plans/$BASE/$id.plan"
    done
}

gpus_here() {
    if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
    else echo 0; fi
}

# The probe of the node, once: OUTDIR/h200-Ngpu.machine (its name in profile.txt).
probe() { # outdir ngpus
    local name=h200-$2gpu
    if [ -n "${NODES_MACHINE:-}" ] || [ "${NODES_PROBE:-1}" = 0 ]; then
        echo "${NODES_MACHINE:-$BASE}" > "$1/profile.txt"
        return
    fi
    if [ ! -f "$1/$name.machine" ]; then
        "$MEMSIM" probe --collectives --base "$BASE" --name "$name" -o "$1/$name.machine" \
            --raw "$1/probe-collectives.csv" > "$1/probe.log" 2>&1 ||
            { cat "$1/probe.log" >&2; die "memsim probe --collectives failed (probe.log)"; }
    fi
    echo "$1/$name.machine" > "$1/profile.txt"
}

cmd_gpu() {
    local out=${1:?run.sh gpu OUTDIR}
    mkdir -p "$out"
    local n
    n=$(gpus_here)
    [ "$n" -ge 2 ] || die "this machine shows $n GPUs: the node cases need 2 or more"
    probe "$out" "$n"
    local prof
    prof=$(cat "$out/profile.txt")
    [ -f "$out/runs.tsv" ] || printf 'id\tgpus\trc\twall_s\n' > "$out/runs.tsv"
    nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv \
        > "$out/device.csv" 2>/dev/null || true
    cases | while read -r id tp cp dp pol seq plan; do
        local w=$((tp * cp * dp))
        if [ "$w" -gt "$n" ]; then echo "$id: needs $w GPUs, $n here: skipped"; continue; fi
        [ -f "$out/$id.csv" ] && { echo "$id: done before"; continue; }
        local t0 rc=0
        t0=$(date +%s)
        # shellcheck disable=SC2046
        timeout "${NODES_CASE_TIMEOUT:-900}" "$MEMSIM" run --machine "$prof" \
            $(workload "$tp" "$cp" "$dp" "$seq") $(policy_args "$id" "$pol" "$plan") \
            --max-ahead "$MAX_AHEAD" --capacity machine --csv "$out/$id.csv" \
            > "$out/$id.log" 2>&1 || rc=$?
        printf '%s\t%d\t%d\t%d\n' "$id" "$w" "$rc" $(($(date +%s) - t0)) >> "$out/runs.tsv"
        echo "$id: exit $rc"
    done
}

# One case's comparison line from the GPU's CSV (a row per rank) and the simulator's (one row):
# the median over ranks of the measured iteration, the worst rank's peak reserved error, the
# node's pinned host memory (the ranks' host peaks summed) against the simulator's per-GPU
# peak times the ranks.
compare_one() { # id gpu.csv sim.csv world
    awk -F, -v id="$1" -v world="$4" '
        function col(n) { return (n in c) ? $c[n] : "" }
        function isort(a, n,   i, j, v) {
            for (i = 2; i <= n; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
            return n }
        FNR == 1 { delete c; for (i = 1; i <= NF; i++) c[$i] = i; f++; next }
        f == 1 { it[++nr] = col("iter_time_s") + 0; res[nr] = col("peak_reserved_bytes") + 0
                 host += col("host_peak_bytes"); st = st (st ? "," : "") col("status") }
        f == 2 { sit = col("iter_time_s") + 0; sres = col("peak_reserved_bytes") + 0
                 shost = col("host_peak_bytes") * world; sst = col("status") }
        END {
            n = isort(it, nr)
            med = n % 2 ? it[(n + 1) / 2] : (it[n / 2] + it[n / 2 + 1]) / 2
            worst = 0
            for (r = 1; r <= nr; r++) {
                e = sres > 0 ? 100 * (sres - res[r]) / res[r] : 0
                if (e < 0 ? -e > (worst < 0 ? -worst : worst) : e > (worst < 0 ? -worst : worst)) worst = e
            }
            terr = med > 0 ? 100 * (sit - med) / med : 0
            herr = host > 0 ? 100 * (shost - host) / host : 0
            printf "| %s | %s / %s | %.4f | %.4f | %+.2f %% | %.3f | %+.2f %% | %.2f | %.2f | %+.2f %% |\n",
                id, sst, st, sit, med, terr, sres / 2^30, worst, shost / 2^30, host / 2^30, herr
            printf "%s\t%.6f\t%.6f\n", id, terr, worst > "/dev/stderr"
        }' "$2" "$3"
}

cmd_compare() {
    local out=${1:?run.sh compare OUTDIR}
    [ -f "$out/profile.txt" ] || die "$out has no profile.txt: not a run.sh gpu directory"
    local prof
    prof=$(cat "$out/profile.txt")
    mkdir -p "$out/sim"
    echo "| case | status (sim / ranks) | predicted s | measured s (median of ranks) | error | predicted reserved GiB | worst rank's error | predicted host GiB (node) | measured host GiB (node) | error |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    : > "$out/sim/errors.tsv"
    cases | while read -r id tp cp dp pol seq plan; do
        [ -f "$out/$id.csv" ] || continue
        # shellcheck disable=SC2046
        "$MEMSIM" simulate --machine "$prof" $(workload "$tp" "$cp" "$dp" "$seq") \
            $(policy_args "$id" "$pol" "$plan") --issue-ahead "$MAX_AHEAD" \
            --csv "$out/sim/$id.csv" > "$out/sim/$id.log" 2>&1 || true
        compare_one "$id" "$out/$id.csv" "$out/sim/$id.csv" $((tp * cp * dp)) \
            2>> "$out/sim/errors.tsv"
    done
    awk -F'\t' '
        function isort(a, n,   i, j, v) {
            for (i = 2; i <= n; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
            return n }
        { t[++n] = ($2 < 0 ? -$2 : $2); r[n] = ($3 < 0 ? -$3 : $3) }
        END {
            if (!n) { print "\nno case has results"; exit }
            isort(t, n); isort(r, n)
            mt = n % 2 ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2
            mr = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
            printf "\nmedian |error| over %d cases: iteration %.2f %% (goal 5 %%), peak reserved %.2f %% (goal 2 %%)\n", n, mt, mr
        }' "$out/sim/errors.tsv"
}

case "${1:-}" in
    prepare) shift; cmd_prepare "$@" ;;
    gpu) shift; cmd_gpu "$@" ;;
    compare) shift; cmd_compare "$@" ;;
    list) cmd_list ;;
    -h|--help|help) usage ;;
    *) usage >&2; exit 2 ;;
esac

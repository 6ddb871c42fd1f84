#!/usr/bin/env bash
# experiments/auto/gpu.sh — auto's plans executed on a GPU beside their simulation. Each point
# of gpu/points.txt has its workload trace (gpu/NAME.trace.gz, memsim trace gen with the
# point's options) and the plan `memsim plan --policy auto` chose for it (gpu/NAME.plan).
#
# usage:
#   gpu.sh gpu OUTDIR      on the GPU machine (runtime/memsim-run built, or MEMSIM_RUN):
#                          runs every plan with the runtime (spin kernels of the profile's
#                          op times, --max-ahead 8, the allocator capped at the profile's
#                          usable bytes), writes OUTDIR/NAME.csv and OUTDIR/gpu.csv
#   gpu.sh compare OUTDIR  here: memsim simulate of each plan beside OUTDIR/NAME.csv
# Exit status: 0 done, 2 usage, 3 missing input.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MEMSIM=${MEMSIM:-$root/sim/memsim}
pts=$here/gpu/points.txt

usage() { sed -n '/^# usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
points() { grep -v '^#' "$pts" | grep -v '^[[:space:]]*$'; }
machine_of() { sed 's/.*--machine \([^ ]*\).*/\1/' <<< "$1"; }

# status, iteration seconds, peak reserved and peak allocated bytes of a results CSV
fields() { # file
    sed 's/"[^"]*"/q/g' "$1" | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if (!(($i) in h)) h[$i] = i }
        NR == 2 { print $h["status"], $h["iter_time_s"], $h["peak_reserved_bytes"], $h["peak_allocated_bytes"] }'
}

cmd_gpu() { # outdir
    local out=$1 run n a
    if [ -n "${MEMSIM_RUN:-}" ]; then run=("$MEMSIM_RUN" run)
    else run=("$root/runtime/memsim-run" run); fi
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1 || true
    points | while IFS='|' read -r n a; do
        echo "== $n" >&2
        timeout 240 "${run[@]}" --trace "$here/gpu/$n.trace.gz" --plan "$here/gpu/$n.plan" \
            --machine "$(machine_of "$a")" --capacity machine --max-ahead 8 \
            --csv "$out/$n.csv" > "$out/$n.log" 2>&1 || echo "$n: status $?" >&2
    done
}

cmd_compare() { # outdir
    local out=$1 n a
    tmp=$(mktemp -d) # global: the EXIT trap reads it after the function returns
    trap 'rm -rf "$tmp"' EXIT
    printf '%-22s %-10s %-10s %10s %10s %7s %12s %12s %7s %12s %12s %7s\n' point "GPU st" \
        "sim st" "GPU iter_s" "sim iter_s" diff% "GPU resv GB" "sim resv GB" diff% \
        "GPU alloc GB" "sim alloc GB" diff%
    points | while IFS='|' read -r n a; do
        [ -s "$out/$n.csv" ] || { echo "$n: no $out/$n.csv" >&2; continue; }
        "$MEMSIM" simulate --trace "$here/gpu/$n.trace.gz" --plan "$here/gpu/$n.plan" \
            --machine "$(machine_of "$a")" --issue-ahead 8 --quiet --csv "$tmp/s.csv"
        read -r gs gt gr ga <<< "$(fields "$out/$n.csv")"
        read -r ss st sr sa <<< "$(fields "$tmp/s.csv")"
        awk -v n="$n" -v gs="$gs" -v ss="$ss" -v gt="$gt" -v st="$st" -v gr="$gr" -v sr="$sr" \
            -v ga="$ga" -v sa="$sa" 'function d(m, p) { return m > 0 ? sprintf("%+.1f", 100 * (p / m - 1)) : "-" }
            BEGIN { printf "%-22s %-10s %-10s %10.4f %10.4f %7s %12.3f %12.3f %7s %12.3f %12.3f %7s\n",
                    n, gs, ss, gt, st, d(gt, st), gr / 1e9, sr / 1e9, d(gr, sr), ga / 1e9, sa / 1e9, d(ga, sa) }'
    done
}

[ $# -ge 2 ] || usage
case $1 in
    gpu) cmd_gpu "$2" ;;
    compare) cmd_compare "$2" ;;
    *) usage ;;
esac

#!/usr/bin/env bash
# experiments/validate/boundary.sh — does the longest sequence a policy fits, as `memsim sweep
# --longest` predicts it, hold on a real GPU? Scans each policy in 1K steps around the
# prediction with the runtime (memsim run, spin kernels), once with the allocator capped at the
# profile's usable bytes (--capacity machine) and once at the GPU's physical memory
# (--capacity 1000GiB: cudaMalloc fails first), and compares status, peak reserved and peak
# allocated bytes with the simulator's for the same runs (docs/VALIDATION.md, "Longest
# sequence that fits").
#
# The runs use a copy of the GPU's profile with 100x its compute and HBM rates, so that spin
# kernels are 100x shorter and a scan takes seconds: memory does not depend on them (the
# predicted boundaries are the same with the profile as probed; keep-all and full-recompute
# run on one compute stream).
#
# usage:
#   boundary.sh gpu OUTDIR [MACHINE]   on the GPU machine (runtime/memsim-run built, or
#                                      MEMSIM_RUN): writes OUTDIR/gpu.tsv and OUTDIR/gpu.csv
#                                      (nvidia-smi); MACHINE (the GPU's profile) h100-sxm
#                                      (default) or h200-sxm, or any with BOUNDARY_SCANS
#   boundary.sh compare OUTDIR [MACHINE]
#                                      here: memsim sweep --longest's prediction and memsim
#                                      simulate for every scanned case, beside OUTDIR/gpu.tsv
# OUTDIR/knobs, if present, holds plan knobs (KEY=VALUE, one per line, # comments) that every run
# and every prediction of that directory uses: the program the recorded runs executed.
# Exit status: 0 every case agrees, 1 some case differs, 2 usage, 3 missing input.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MEMSIM=${MEMSIM:-$root/sim/memsim}
W=(--dims 24,2048,16,8192,50304 --iters 3)
# The scans per machine: policy, then the first and last length (K tokens), 2K either side of
# `memsim sweep --longest`'s prediction on the fast profile (BOUNDARY_SCANS, "POLICY LO HI;...",
# overrides them; `compare` reads the cases from gpu.tsv and prints the prediction beside it).
scans_of() { # machine
    if [ -n "${BOUNDARY_SCANS:-}" ]; then echo "$BOUNDARY_SCANS"; return; fi
    case $1 in
        h100-sxm) echo "keep-all 34 38;full-recompute 227 231" ;;
        h200-sxm) echo "keep-all 72 76;full-recompute 464 468" ;;
        *) echo "boundary.sh: no scans known for $1: set BOUNDARY_SCANS" >&2; exit 3 ;;
    esac
}

# --knob arguments from OUTDIR/knobs into the array K
read_knobs() { # outdir
    K=()
    [ -f "$1/knobs" ] || return 0
    local kv
    while read -r kv; do
        case $kv in ''|'#'*) continue ;; esac
        K+=(--knob "$kv")
    done < "$1/knobs"
}

usage() { sed -n '/^# usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# The fast copy of the profile: compute and HBM rates x100, its name changed.
fast_profile() { # machine-name outfile
    awk -v n="$1-fast" '$1 == "name" { $2 = n } ($1 == "gpu.peak_bf16_flops" || $1 == "gpu.peak_fp32_flops" || $1 == "gpu.hbm_Bps") { $2 = sprintf("%.6g", $2 * 100) } { print }' \
        "$root/traces/machines/$1.machine" > "$2"
}

# status, peak reserved and peak allocated bytes of a results CSV (quoted fields, such as the
# model's dims, hold commas: replaced before splitting)
csv_fields() { # file
    sed 's/"[^"]*"/q/g' "$1" | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if (!(($i) in h)) h[$i] = i }
        NR == 2 { print $h["status"] "\t" $h["peak_reserved_bytes"] "\t" $h["peak_allocated_bytes"] }'
}

cmd_gpu() { # outdir machine
    local out=$1 m=$2 run
    if [ -n "${MEMSIM_RUN:-}" ]; then run=("$MEMSIM_RUN" run)
    elif [ -x "$root/runtime/memsim-run" ]; then run=("$root/runtime/memsim-run" run)
    else run=("$MEMSIM" run); fi
    mkdir -p "$out/runs"
    read_knobs "$out"
    fast_profile "$m" "$out/fast.machine"
    nvidia-smi --query-gpu=name,memory.total,memory.used,memory.free,driver_version \
        --format=csv > "$out/gpu.csv" 2>&1 || true
    printf 'policy\tseq_k\tcapacity\trc\tstatus\tpeak_reserved_bytes\tpeak_allocated_bytes\n' > "$out/gpu.tsv"
    local s pol lo hi k cap f rc scans
    scans=$(scans_of "$m")
    IFS=';' read -r -a scans <<< "$scans"
    for s in "${scans[@]}"; do
        read -r pol lo hi <<< "$s"
        for k in $(seq "$lo" "$hi"); do
            for cap in machine 1000GiB; do
                f="$out/runs/$pol-${k}K-$cap"
                rc=0
                timeout 300 "${run[@]}" --machine "$out/fast.machine" "${W[@]}" --seq "${k}K" \
                    --policy "$pol" ${K[@]+"${K[@]}"} --max-ahead 8 --capacity "$cap" --csv "$f.csv" > "$f.log" 2>&1 || rc=$?
                printf '%s\t%s\t%s\t%s\t%s\n' "$pol" "$k" "$cap" "$rc" \
                    "$( [ -f "$f.csv" ] && csv_fields "$f.csv" || printf 'error\t-\t-')" >> "$out/gpu.tsv"
            done
        done
    done
    cat "$out/gpu.tsv"
}

cmd_compare() { # outdir machine
    local out=$1 m=$2
    [ -f "$out/gpu.tsv" ] || { echo "boundary.sh: $out/gpu.tsv missing (run 'boundary.sh gpu' on the GPU)" >&2; exit 3; }
    tmp=$(mktemp -d) # global: the EXIT trap reads it after the function returns
    trap 'rm -rf "$tmp"' EXIT
    fast_profile "$m" "$tmp/fast.machine"
    read_knobs "$out"
    local pols pol k
    pols=$(awk -F'\t' 'NR > 1 && !seen[$1]++ { printf "%s%s", n++ ? "," : "", $1 }' "$out/gpu.tsv")
    echo "memsim sweep --longest on $m (compute x100), the prediction:"
    "$MEMSIM" sweep --machine "$tmp/fast.machine" "${W[@]}" --seqs 32K,64K,128K,256K,512K \
        --policies "$pols" ${K[@]+"${K[@]}"} --longest --issue-ahead 8 2> /dev/null | sed -n '/^longest/,$p'
    awk -F'\t' 'NR > 1 && !seen[$1 FS $2]++ { print $1, $2 }' "$out/gpu.tsv" |
        while read -r pol k; do
            "$MEMSIM" simulate --machine "$tmp/fast.machine" "${W[@]}" --seq "${k}K" --policy "$pol" \
                ${K[@]+"${K[@]}"} --issue-ahead 8 --quiet --csv "$tmp/s.csv"
            printf '%s\t%s\t%s\n' "$pol" "$k" "$(csv_fields "$tmp/s.csv")"
        done > "$tmp/sim.tsv"
    echo
    echo "policy          seq   capacity   GPU status   sim status   GPU peak reserved   sim peak reserved   GPU peak allocated   sim peak allocated"
    awk -F'\t' 'NR == FNR { st[$1 "," $2] = $3; rs[$1 "," $2] = $4; al[$1 "," $2] = $5; next }
        FNR == 1 { next }
        { k = $1 "," $2; same = ($5 == st[k] && $6 == rs[k] && $7 == al[k])
          # a failure at the physical limit: the simulator stops at the profile'"'"'s cap, so only
          # the status and the allocated bytes at the failing action can agree
          phys = (!same && $3 != "machine" && $5 == "oom" && st[k] == "oom" && $7 == al[k])
          bad += !(same || phys); nphys += phys; n++
          printf "%-15s %4sK  %-9s  %-11s  %-11s  %18s  %18s  %19s  %19s%s\n", $1, $2, $3, $5, st[k], $6, rs[k], $7, al[k], same ? "" : phys ? "  (reserved: the GPU grew to its physical limit)" : "  DIFFERS" }
        END { printf "\n%d of %d runs agree in status, peak reserved and peak allocated bytes", n - bad - nphys, n
              if (nphys) printf "; %d more fail at the physical limit too, with the same allocated bytes, having reserved what the GPU had (the simulator stops at the profile'"'"'s cap)", nphys
              printf "\n"; exit (bad > 0) }' \
        "$tmp/sim.tsv" "$out/gpu.tsv"
}

[ $# -ge 2 ] || usage
case $1 in
    gpu) cmd_gpu "$2" "${3:-h100-sxm}" ;;
    compare) cmd_compare "$2" "${3:-h100-sxm}" ;;
    *) usage ;;
esac

#!/usr/bin/env bash
# experiments/auto/run.sh — the `auto` policy (sim/auto.c, docs/POLICIES.md) beside every
# single policy on a grid of 61 workloads: MEMO's GPT-7B 64K-1M on the A800 node (TP 4, CP 2,
# Megatron profile), a LLaMA-3-8B-shaped and a Mixtral-style hf model at 4K-128K tokens on
# h200-sxm and h100-sxm, ProTrain's Table 2 ladder (GPT-2 at hidden 8192, batch 1) and Table 4
# models on its RTX 3090 and A100 profiles, and MemFerry's models on its A100 PCIe 3 and V100
# profiles with Fig. 11's scan (the TransformerXL-2.4B shape, batch 1, eager attention, host
# memory not limiting). For every point it prints each single policy's simulated iteration
# time (or oom / oohm / error) beside auto's, auto's choice, how far it is ahead of the best
# single policy, and the time of the search (memsim plan --policy auto: wall and CPU seconds,
# the only clock here: the simulator reads none). Then, by bisection with the same simulator,
# the longest sequence (MEMO's setting) and the largest model (ProTrain's Table 2, MemFerry's
# Fig. 11) the best single policy and auto train.
#
# usage: experiments/auto/run.sh [OUTDIR]   (default: out/auto; MEMSIM=path/to/memsim;
#        AUTO_QUICK=1 runs the first 6 points and no bisection; AUTO_LIMITS=0 skips the
#        bisection)
# Writes OUTDIR/grid.tsv (a row per point and policy: point, policy, status, iter_s),
# OUTDIR/table.txt (the printed grid), OUTDIR/limits.txt (the bisections), OUTDIR/runs/*.csv
# (memsim compare's rows) and OUTDIR/runs/*.plan (auto's plans).
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
# the registered policies: memsim list's policies but auto
singles=$("$MEMSIM" list | awk '/^policies:/ {p = 1; next} /^[a-z]/ {p = 0}
                               p && /^  [a-z]/ && $1 != "auto" {print $1}' | paste -sd, -)
cfg=experiments/realworld/configs
hf="--framework hf --precision amp"
memo="--model gpt-7b --tp 4 --cp 2 --gen framework=megatron --machine a800-8gpu"
# MemFerry's Fig. 11 machine: the V100 profile with host memory that does not limit (the
# paper's failures are GPU-memory overflows; experiments/memferry does the same)
v100big="$out/v100-32g-pcie3-bighost.machine"
sed -e 's/^name .*/name v100-32g-pcie3-bighost/' -e 's/^host\.mem_bytes .*/host.mem_bytes 4TiB/' \
    traces/machines/v100-32g-pcie3.machine > "$v100big"
txl="--gen attn_impl=eager --seq 768 --batch 1 --machine $v100big"
txl_dims() { echo "--dims $1,2560,40,10240,65536"; }
pt2_dims() { echo "--dims $1,8192,64,32768,50257"; }
# name | memsim options
points=$(cat <<P
memo-64K|$memo --seq 64K
memo-128K|$memo --seq 128K
memo-192K|$memo --seq 192K
memo-256K|$memo --seq 256K
memo-320K|$memo --seq 320K
memo-384K|$memo --seq 384K
memo-448K|$memo --seq 448K
memo-512K|$memo --seq 512K
memo-576K|$memo --seq 576K
memo-640K|$memo --seq 640K
memo-768K|$memo --seq 768K
memo-896K|$memo --seq 896K
memo-1M|$memo --seq 1M
llama8b-4K-h200|--model-config $cfg/llama3-8b.json $hf --seq 4K --machine h200-sxm
llama8b-8K-h200|--model-config $cfg/llama3-8b.json $hf --seq 8K --machine h200-sxm
llama8b-16K-h200|--model-config $cfg/llama3-8b.json $hf --seq 16K --machine h200-sxm
llama8b-32K-h200|--model-config $cfg/llama3-8b.json $hf --seq 32K --machine h200-sxm
llama8b-64K-h200|--model-config $cfg/llama3-8b.json $hf --seq 64K --machine h200-sxm
llama8b-128K-h200|--model-config $cfg/llama3-8b.json $hf --seq 128K --machine h200-sxm
llama8b-4K-h100|--model-config $cfg/llama3-8b.json $hf --seq 4K --machine h100-sxm
llama8b-8K-h100|--model-config $cfg/llama3-8b.json $hf --seq 8K --machine h100-sxm
llama8b-16K-h100|--model-config $cfg/llama3-8b.json $hf --seq 16K --machine h100-sxm
llama8b-32K-h100|--model-config $cfg/llama3-8b.json $hf --seq 32K --machine h100-sxm
llama8b-64K-h100|--model-config $cfg/llama3-8b.json $hf --seq 64K --machine h100-sxm
llama8b-128K-h100|--model-config $cfg/llama3-8b.json $hf --seq 128K --machine h100-sxm
mixtral-4K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 4K --machine h200-sxm
mixtral-8K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 8K --machine h200-sxm
mixtral-16K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 16K --machine h200-sxm
mixtral-32K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 32K --machine h200-sxm
mixtral-64K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 64K --machine h200-sxm
mixtral-128K-h200|--model-config $cfg/mixtral-mini.json $hf --seq 128K --machine h200-sxm
mixtral-4K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 4K --machine h100-sxm
mixtral-8K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 8K --machine h100-sxm
mixtral-16K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 16K --machine h100-sxm
mixtral-32K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 32K --machine h100-sxm
mixtral-64K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 64K --machine h100-sxm
mixtral-128K-h100|--model-config $cfg/mixtral-mini.json $hf --seq 128K --machine h100-sxm
protrain-t2-8-3090|$(pt2_dims 8) --seq 1024 --machine rtx3090-pcie3
protrain-t2-16-3090|$(pt2_dims 16) --seq 1024 --machine rtx3090-pcie3
protrain-t2-32-3090|$(pt2_dims 32) --seq 1024 --machine rtx3090-pcie3
protrain-t2-40-3090|$(pt2_dims 40) --seq 1024 --machine rtx3090-pcie3
protrain-t2-16-a100|$(pt2_dims 16) --seq 1024 --machine a100-80g-pcie4
protrain-t2-32-a100|$(pt2_dims 32) --seq 1024 --machine a100-80g-pcie4
protrain-t2-64-a100|$(pt2_dims 64) --seq 1024 --machine a100-80g-pcie4
protrain-t2-88-a100|$(pt2_dims 88) --seq 1024 --machine a100-80g-pcie4
protrain-1b-b8-3090|--model gpt2-1b --seq 1024 --batch 8 --machine rtx3090-pcie3
protrain-1b-b64-3090|--model gpt2-1b --seq 1024 --batch 64 --machine rtx3090-pcie3
protrain-1b-b64-a100|--model gpt2-1b --seq 1024 --batch 64 --machine a100-80g-pcie4
protrain-10b-b8-3090|--model gpt2-10b --seq 1024 --batch 8 --machine rtx3090-pcie3
protrain-10b-b8-a100|--model gpt2-10b --seq 1024 --batch 8 --machine a100-80g-pcie4
protrain-mistral7b-b8-a100|--model mistral-7b --seq 1024 --batch 8 --machine a100-80g-pcie4
memferry-gpt2m-a100|--model gpt2-medium --seq 1024 --batch 32 --machine a100-80g-pcie3
memferry-txl2.4b-a100|--model transformerxl-2.4b --seq 768 --batch 8 --machine a100-80g-pcie3
memferry-txl6.7b-a100|--model transformerxl-6.7b --seq 1024 --batch 8 --machine a100-80g-pcie3
memferry-txl0.7b-v100|--model transformerxl-0.7b --seq 378 --batch 8 --machine v100-32g-pcie3
memferry-txl1b-v100|--model transformerxl-1b --seq 1024 --batch 8 --machine v100-32g-pcie3
memferry-txl4.3b-v100|--model transformerxl-4.3b --seq 1024 --batch 8 --machine v100-32g-pcie3
memferry-f11-14-v100|$(txl_dims 14) $txl
memferry-f11-28-v100|$(txl_dims 28) $txl
memferry-f11-42-v100|$(txl_dims 42) $txl
memferry-f11-56-v100|$(txl_dims 56) $txl
P
)
[ "${AUTO_QUICK:-0}" = 1 ] && points=$(printf '%s\n' "$points" | head -6)

# the CPU and wall seconds of one command, into the globals cpu_s and wall_s
timed() {
    local TIMEFORMAT='%R %U %S' t
    t=$( { time "$@" > /dev/null 2>&1 || true; } 2>&1 )
    read -r wall_s u s <<< "$t"
    cpu_s=$(echo "$u + $s" | bc)
}

: > "$out/grid.tsv"
{
printf '%-26s %-58s %9s %9s %7s %6s %6s  %s\n' point "auto's choice" auto best1 "gain%" wall_s cpu_s "best single policy"
while IFS='|' read -r name opts; do
    [ -n "$name" ] || continue
    echo "run.sh: $name" >&2
    # shellcheck disable=SC2086
    "$MEMSIM" compare $opts --policies "$singles" --csv "$out/runs/$name.csv" --quiet 2>/dev/null || true
    # shellcheck disable=SC2086
    timed "$MEMSIM" plan $opts --policy auto --quiet -o "$out/runs/$name.plan"
    chosen=$(awk '$1 == "knob" && $2 == "auto.chosen" {$1 = $2 = ""; sub(/^ +/, ""); print}' "$out/runs/$name.plan" 2>/dev/null)
    # auto's own row: the plan's time re-simulated (memsim simulate --plan runs it unchanged)
    a=-
    if [ -n "$chosen" ]; then
        # shellcheck disable=SC2086
        "$MEMSIM" simulate $opts --plan "$out/runs/$name.plan" --csv "$out/runs/$name.auto.csv" --quiet 2>/dev/null || true
        a=$(awk -F, ' { gsub(/"[^"]*"/, "q") } NR > 1 && $10 == "ok" {print $11}' "$out/runs/$name.auto.csv" 2>/dev/null)
        [ -n "$a" ] || a=-
    fi
    awk -F, -v n="$name" ' { gsub(/"[^"]*"/, "q") } NR > 1 {printf "%s\t%s\t%s\t%s\n", n, $1, $10, ($10 == "ok" ? $11 : "-")}' \
        "$out/runs/$name.csv" >> "$out/grid.tsv"
    printf '%s\tauto\t%s\t%s\n' "$name" "$([ "$a" = - ] && echo oom || echo ok)" "$a" >> "$out/grid.tsv"
    awk -F, -v n="$name" -v c="${chosen:--}" -v a="$a" -v w="$wall_s" -v u="$cpu_s" ' { gsub(/"[^"]*"/, "q") } 
        NR > 1 && $10 == "ok" && (b == "" || $11 < b) { b = $11; bp = $1 }
        END {
            g = (a != "-" && b != "") ? sprintf("%.2f", (b - a) / b * 100) : "-"
            printf "%-26s %-58s %9s %9s %7s %6.2f %6.2f  %s\n", n, (a != "-" ? c : "nothing fits"),
                   (a != "-" ? sprintf("%.4f", a) : "-"), (b != "" ? sprintf("%.4f", b) : "-"), g,
                   w, u, (bp == "" ? "-" : bp)
        }' "$out/runs/$name.csv"
done < <(printf "%s\n" "$points")
} | tee "$out/table.txt"

# the summary the issue's Done means asks for
awk 'NR > 1 && NF >= 8 {      # columns from the right: the choice has blanks
        n++
        a = $(NF - 5); b = $(NF - 4)
        if (a == "-" && b != "-") lost++          # a single fits, auto does not
        if (a != "-" && b == "-") extra++         # auto fits where no single does
        if (a != "-" && b != "-") {
            g = (b - a) / b * 100
            if (g < -0.5) slow++
            if (a < b) { faster++; if (g > gmax) gmax = g }
        }
        w[n] = $(NF - 2); u[n] = $(NF - 1)
        if ($(NF - 2) > wmax) wmax = $(NF - 2)
        if ($(NF - 1) > umax) umax = $(NF - 1)
     }
     function median(a, k,   i, j, t) {
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
     }
     END {
        printf "\n%d points: auto strictly faster than every single policy on %d (%.0f %%, up to %.2f %%); fits where none does on %d; ", n, faster, faster * 100 / n, gmax, extra
        printf "a single fits and auto not on %d; more than 0.5 %% slower than the best single on %d\n", lost, slow
        printf "search: median %.2f s wall (%.2f s CPU), worst %.2f s wall (%.2f s CPU)\n", median(w, n), median(u, n), wmax, umax
     }' "$out/table.txt" | tee -a "$out/table.txt"

echo
echo "per point and policy (iteration seconds or status): $out/grid.tsv"

[ "${AUTO_QUICK:-0}" = 1 ] || [ "${AUTO_LIMITS:-1}" = 0 ] && exit 0

# ---- the longest sequence and the largest model, by bisection ----

# fits OPTS: runs every single policy and auto on OPTS; sets fit_single (1 when one fits),
# fit_auto and best_pol (the fastest single that fits)
fits() {
    local csv="$out/runs/limit.csv"
    # shellcheck disable=SC2086
    "$MEMSIM" compare $1 --policies "$singles,auto" --csv "$csv" --quiet 2>/dev/null || true
    fit_single=$(awk -F, ' { gsub(/"[^"]*"/, "q") } NR > 1 && $1 != "auto" && $10 == "ok" {f = 1} END {print f + 0}' "$csv" 2>/dev/null || echo 0)
    fit_auto=$(awk -F, ' { gsub(/"[^"]*"/, "q") } NR > 1 && $1 == "auto" && $10 == "ok" {f = 1} END {print f + 0}' "$csv" 2>/dev/null || echo 0)
    best_pol=$(awk -F, ' { gsub(/"[^"]*"/, "q") } NR > 1 && $1 != "auto" && $10 == "ok" && (b == "" || $11 < b) {b = $11; p = $1} END {print (p == "" ? "-" : p)}' "$csv" 2>/dev/null || echo -)
}

# largest NAME LO HI MAKE: the largest n in [LO, HI] at which a single policy fits and the
# largest at which auto does (bisection; MAKE n prints the options for n; LO is taken to fit
# when it does, HI tried first)
largest() {
    local name=$1 lo=$2 hi=$3 make=$4 mid s_lo=0 a_lo=0 s_pol=-
    fits "$($make "$hi")"
    if [ "$fit_auto" = 1 ]; then a_lo=$hi; fi
    if [ "$fit_single" = 1 ]; then s_lo=$hi; s_pol=$best_pol; fi
    local l=$((lo - 1)) h=$hi
    if [ "$s_lo" = 0 ]; then
        while [ $((h - l)) -gt 1 ]; do
            mid=$(((l + h) / 2))
            fits "$($make "$mid")"
            if [ "$fit_single" = 1 ]; then l=$mid; s_pol=$best_pol; [ "$fit_auto" = 1 ] && a_lo=$mid
            else h=$mid; [ "$fit_auto" = 1 ] && [ "$mid" -gt "$a_lo" ] && a_lo=$mid; fi
        done
        s_lo=$l
    fi
    # auto from the single policies' largest up (it fits wherever one does)
    l=$s_lo; [ "$a_lo" -gt "$l" ] && l=$a_lo
    h=$hi; [ "$a_lo" = "$hi" ] && h=$l
    while [ $((h - l)) -gt 1 ]; do
        mid=$(((l + h) / 2))
        fits "$($make "$mid")"
        if [ "$fit_auto" = 1 ]; then l=$mid; else h=$mid; fi
    done
    [ "$l" -gt "$a_lo" ] && a_lo=$l
    # at the top of the range: "HI+" (the scan's end, not a limit found)
    [ "$s_lo" = "$hi" ] && s_lo="$hi+"
    [ "$a_lo" = "$hi" ] && a_lo="$hi+"
    printf '%-44s %12s %12s  %s\n' "$name" "$s_lo" "$a_lo" "$s_pol"
}
memo_at() { echo "$memo --seq $(($1 * 64))K"; }
pt2_3090() { echo "$(pt2_dims "$1") --seq 1024 --machine rtx3090-pcie3"; }
pt2_a100() { echo "$(pt2_dims "$1") --seq 1024 --machine a100-80g-pcie4"; }
f11_at() { echo "$(txl_dims "$1") $txl"; }
f11_host() { echo "$(txl_dims "$1") ${txl/$v100big/v100-32g-pcie3}"; }
{
echo
printf '%-44s %12s %12s  %s\n' "limit (bisection, same simulator)" "best single" auto "best single policy there"
largest "MEMO GPT-7B longest seq (x 64K)" 1 32 memo_at
largest "ProTrain T2 RTX 3090 blocks (h 8192)" 1 128 pt2_3090
largest "ProTrain T2 A100 blocks (h 8192)" 1 128 pt2_a100
largest "MemFerry Fig.11 V100 layers (TXL-2.4B)" 1 1024 f11_at
largest "the same with the profile's 92 GiB host" 1 256 f11_host
} | tee "$out/limits.txt"

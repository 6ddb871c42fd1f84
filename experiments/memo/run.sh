#!/usr/bin/env bash
# experiments/memo/run.sh — reproduces MEMO's (Zhao et al., SIGMOD 2025) Table 4 (MFU of full
# recomputation, full recomputation + memory plan, full swapping + memory plan and MEMO from 64K
# to 896K tokens), Table 5 (MFU over the offloaded fraction alpha at 192K-384K), the sequence
# length above which one layer's full offload stops costing time, and the count of memory
# reorganizations of full recomputation under PyTorch's caching allocator, for GPT-7B on one
# node of 8 A800 (TP 4, CP 2). The traces are generated with the generator's megatron profile
# (--gen framework=megatron: Megatron-LM ccfeda47cb + TransformerEngine 1.3 allocations,
# docs/GENERATOR.md §9; MEMO's executor with a cross entropy in place on the bf16 logits,
# MEMO_LOSS). Prints paper-vs-memsim tables cell by cell with differences and draws them (PNG
# and SVG); then Table 4 again under four other assumptions (the stock loss everywhere,
# PyTorch's power-of-two pinned host buffers, the generic program, Megatron's distributed
# optimizer) for comparison. A few minutes on a 2-core machine.
#
# usage: experiments/memo/run.sh [OUTDIR]   (default: out/memo in the repository; MEMSIM=path/to/memsim;
#        MEMO_ISSUE_AHEAD=N|unbounded simulates the host thread issuing the program, at most N
#        compute actions ahead of the GPU: memsim's --issue-ahead, default 0 = off;
#        MEMO_LOSS=fused|megatron: the loss of MEMO's executor's traces, default fused)
# Writes OUTDIR/a800-memo.machine (the profile used), results.tsv (memsim's cells in
# reference.tsv's layout), compare.txt (the printed comparison), runs/*.csv (memsim's result
# rows), table4.dat, table5.dat and the figures memo_table4.{png,svg}, memo_table5.{png,svg};
# variants.txt and variants/*.csv (Table 4 under the other trace assumptions).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/out/memo}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac   # relative to the caller's directory
cd "$root"
MEMSIM=${MEMSIM:-$root/sim/memsim}
if [ ! -x "$MEMSIM" ]; then
    echo "run.sh: $MEMSIM not found: build memsim first (make) or set MEMSIM" >&2
    exit 2
fi
if ! "$MEMSIM" simulate --help 2>&1 | grep -q -- '--gen'; then
    echo "run.sh: $MEMSIM has no --gen option (generator knobs): rebuild memsim" >&2
    exit 2
fi
mkdir -p "$out/runs" "$out/variants"
machine="$out/a800-memo.machine"
# The traces: Megatron-LM + TransformerEngine as MEMO's systems run them (docs/GENERATOR.md §9),
# Megatron's own defaults otherwise (no distributed optimizer). Full recomputation without a
# plan runs Megatron's stock fp32 cross entropy (10 bytes per logit live); MEMO's executor (MEMO,
# full swapping + plan, full recomputation + plan) a cross entropy in place on the bf16 logits
# (MEMO_LOSS, default fused: docs/MEMO.md "MEMO's executor"), because its reported runs (896K
# here, 1M tokens in its Table 3) cannot hold the stock loss's fp32 copies of the logits.
gen=(--gen framework=megatron)
memo_gen=(--gen framework=megatron --gen "loss=${MEMO_LOSS:-fused}")
exec_pols=full-recompute+plan,full-swap+plan,memo
issue=()
[ -z "${MEMO_ISSUE_AHEAD:-}" ] || issue=(--issue-ahead "$MEMO_ISSUE_AHEAD")
base=(--model gpt-7b --tp 4 --cp 2 --machine "$machine" --quiet ${issue[@]+"${issue[@]}"})
common=("${base[@]}" "${memo_gen[@]}")

# 1. The machine profile: the shipped a800-8gpu with the overrides (first word = key).
awk 'NR == FNR { if ($0 !~ /^#/ && NF) ov[$1] = $0; next }
     NF && $0 !~ /^#/ && ($1 in ov) { print ov[$1]; done[$1] = 1; next }
     { print }
     END { for (k in ov) if (!(k in done)) { print "run.sh: override " k " matches no key" > "/dev/stderr"; exit 1 } }' \
    "$here/a800-memo.overrides" traces/machines/a800-8gpu.machine > "$machine"

# Rows of memsim's results CSV -> "policy seqK status mfu% retries_per_iter stall_s iter_s".
# Columns (docs/SIMULATOR.md): 1 policy, 5 seq, 10 status, 11 iter_time_s, 12 mfu,
# 23 alloc_retries_per_iter, 26 stall_s; the failure text (45) may hold commas: no column after it is read.
rows() {
    awk -F, 'FNR > 1 { printf "%s %dK %s %.2f %s %s %s\n", $1, $5 / 1024, $10, 100 * $12, $23, $26, $11 }' "$@"
}

res="$out/results.tsv"
: > "$res"

# 2. Table 4: the four methods at each sequence length (one trace per length).
seqs4="64K 128K 256K 384K 512K 640K 768K 896K"
for s in $seqs4; do
    "$MEMSIM" simulate "${base[@]}" "${gen[@]}" --seq "$s" --policy full-recompute \
        --csv "$out/runs/table4-$s.csv"
    "$MEMSIM" compare "${common[@]}" --seq "$s" --policies "$exec_pols" \
        --csv "$out/runs/table4x-$s.csv"
done
rows "$out"/runs/table4-*.csv "$out"/runs/table4x-*.csv | awk '{ v = ($3 == "ok") ? $4 : toupper($3); print "table4\t" $1 "\t" $2 "\t" v }' >> "$res"
rows "$out"/runs/table4-*.csv | awk '$1 == "full-recompute" && ($2 == "128K" || $2 == "256K") {
    print "reorg\tfull-recompute\t" $2 "\t" (($3 == "ok") ? $5 : toupper($3)) }' >> "$res"

# 3. Table 5: MEMO with alpha fixed.
for s in 192K 256K 320K 384K; do
    for a in 0 0.125 0.25 0.375 0.5 0.625 0.75 0.875 1; do
        "$MEMSIM" simulate "${common[@]}" --seq "$s" --policy memo --alpha "$a" \
            --csv "$out/runs/table5-$s-$a.csv"
        rows "$out/runs/table5-$s-$a.csv" | awk -v a="$a" '{ v = ($3 == "ok") ? $4 : toupper($3)
            printf "table5\t%s\t%.3f\t%s\n", $2, a, v }' >> "$res"
    done
done

# 4. Where one layer's full offload stops costing time: full-swap+plan's compute stalls (waits
# for copies) below 1% of the iteration from this length on; and MEMO's LP view of it (the
# time constraint allows alpha = 1: alpha_lp_time >= 1).
cross_sim="" cross_lp=""
for k in $(seq 64 16 320); do
    "$MEMSIM" simulate "${common[@]}" --seq "${k}K" --policy full-swap+plan \
        --csv "$out/runs/offload-${k}K.csv"
    # stall fraction; runs that do not fit (OOHM) say nothing about the overlap
    f=$(rows "$out/runs/offload-${k}K.csv" | awk '{ print ($3 == "ok" && $7 > 0) ? $6 / $7 : "-" }')
    if [ "$f" != "-" ]; then
        if awk -v f="$f" 'BEGIN { exit !(f < 0.01) }'; then
            [ -n "$cross_sim" ] || cross_sim="${k}K"
        else
            cross_sim=""
        fi
    fi
    at=$("$MEMSIM" plan --model gpt-7b --tp 4 --cp 2 --machine "$machine" --seq "${k}K" "${memo_gen[@]}" \
         --policy memo --knob memory_plan=0 | awk '$1 == "knob" && $2 == "alpha_lp_time" { print $3 }')
    if [ -z "$cross_lp" ] && awk -v a="$at" 'BEGIN { exit !(a >= 1) }'; then cross_lp="${k}K"; fi
done
printf "crossover\tfull-offload\tseq\t%s\n" "${cross_sim:-none}" >> "$res"
printf "crossover\tfull-offload-lp\tseq\t%s\n" "${cross_lp:-none}" >> "$res"

# 5. The comparison, and the figures' data.
awk -f "$here/compare.awk" -v outdir="$out" "$here/reference.tsv" "$res" | tee "$out/compare.txt"

# 6. Table 4 under other assumptions, status and MFU per cell next to the paper's:
# "stock-loss": every row on Megatron's stock cross entropy (MEMO's executor too);
# "pytorch-host": MEMO's executor's pinned host buffers from PyTorch's caching host allocator
# (power-of-two sizes, knob host_pow2=1) instead of exact sizes; "generic": the generator's lean
# default program (MEMO's 16bsh accounting); "dist-opt": the stock program with Megatron's
# distributed optimizer (states sharded over dp*cp = 2). Also the caching allocator's reserved
# peak and retries of full recomputation.
variant() {
    name=$1 pols=$2; shift 2
    for s in $seqs4; do
        "$MEMSIM" compare "${base[@]}" "$@" --seq "$s" --policies "$pols" \
            --csv "$out/variants/$name-$s.csv"
    done
    rows "$out"/variants/"$name"-*.csv | awk -v v="$name" '{ print v "\t" $1 "\t" $2 "\t" (($3 == "ok") ? $4 : toupper($3)) }'
}
all4=full-recompute,$exec_pols
{
    rows "$out"/runs/table4-*.csv "$out"/runs/table4x-*.csv | awk '{ print "main\t" $1 "\t" $2 "\t" (($3 == "ok") ? $4 : toupper($3)) }'
    variant stock-loss "$all4" "${gen[@]}"
    variant pytorch-host "full-swap+plan,memo" "${memo_gen[@]}" --knob host_pow2=1
    variant generic "$all4"
    variant dist-opt "$all4" "${gen[@]}" --gen dist_opt=1
} > "$out/variants.tsv"
awk -F'\t' '
    FNR == NR { if ($1 == "table4") ref[$2 SUBSEP $3] = $4; next }
    { v[$1 SUBSEP $2 SUBSEP $3] = $4; has[$1 SUBSEP $2] = 1; if (!($1 in seen)) { seen[$1] = 1; order[++nv] = $1 } }
    END {
        n = split("64K 128K 256K 384K 512K 640K 768K 896K", sq, " ")
        m = split("full-recompute full-recompute+plan full-swap+plan memo", me, " ")
        print "\nTable 4 under other assumptions (MFU %, or OOM / OOHM; * = status differs from the paper)"
        for (i = 1; i <= m; i++) {
            printf "\n%s\n  %-12s", me[i], "variant"
            for (j = 1; j <= n; j++) printf " %8s", sq[j]
            printf "\n  %-12s", "paper"
            for (j = 1; j <= n; j++) printf " %8s", ref[me[i] SUBSEP sq[j]]
            printf "\n"
            for (k = 1; k <= nv; k++) {
                if (!((order[k] SUBSEP me[i]) in has)) continue
                printf "  %-12s", order[k]
                for (j = 1; j <= n; j++) {
                    a = ref[me[i] SUBSEP sq[j]]; b = v[order[k] SUBSEP me[i] SUBSEP sq[j]]
                    bad = ((a ~ /^[0-9.]+$/) != (b ~ /^[0-9.]+$/)) || (a !~ /^[0-9.]+$/ && a != b)
                    printf " %8s", b (bad ? "*" : "")
                }
                printf "\n"
            }
        }
    }' "$here/reference.tsv" "$out/variants.tsv" | tee "$out/variants.txt"
awk -F, 'FNR > 1 && $1 == "full-recompute" {
        n = split(FILENAME, p, "/"); f = p[n]; sub(/\.csv$/, "", f)
        printf "  %-18s %-6s reserved peak %6.1f GiB, allocated peak %6.1f GiB, retries per iteration %s\n", \
            f, $10, $15 / 2^30, $14 / 2^30, $23 }' "$out"/runs/table4-*.csv \
    | sort -t- -k2 -n | { echo; echo "full recomputation on the caching allocator (megatron trace, stock loss)"; cat; } \
    | tee -a "$out/variants.txt"

if command -v gnuplot > /dev/null; then
    for f in png svg; do
        gnuplot -e "datafile='$out/table4.dat'; outfile='$out/memo_table4.$f'; fmt='$f'" plots/memo_table4.gp
        gnuplot -e "datafile='$out/table5.dat'; outfile='$out/memo_table5.$f'; fmt='$f'" plots/memo_table5.gp
    done
    echo "figures: $out/memo_table4.png/.svg, $out/memo_table5.png/.svg"
else
    echo "gnuplot not found: no figures (data in $out/table4.dat, $out/table5.dat)"
fi

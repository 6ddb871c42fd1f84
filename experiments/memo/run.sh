#!/usr/bin/env bash
# experiments/memo/run.sh — reproduces MEMO's (Zhao et al., SIGMOD 2025) Table 4 (MFU of full
# recomputation, full recomputation + memory plan, full swapping + memory plan and MEMO from 64K
# to 896K tokens), Table 5 (MFU over the offloaded fraction alpha at 192K-384K), the sequence
# length above which one layer's full offload stops costing time, and the count of memory
# reorganizations of full recomputation under PyTorch's caching allocator (c10d's recordStream
# on collectives' tensors and per-stream pools, the host thread running ahead of the GPU), for
# GPT-7B on one node of 8 A800 (TP 4, CP 2). The traces are generated with the generator's
# megatron profile (--gen framework=megatron: Megatron-LM ccfeda47cb + TransformerEngine 1.3
# allocations, docs/GENERATOR.md §9; MEMO's executor with a cross entropy in place on the bf16
# logits, MEMO_LOSS). Prints paper-vs-memsim tables cell by cell with differences and draws
# them (PNG and SVG); then Table 4 again under other assumptions (the stock loss everywhere, no
# reorganization model, the three other readings of MEMO's pinned host buffers, the generic
# program, Megatron's distributed optimizer, full recomputation + plan without MEMO's idle
# rounding buffer), the four host-buffer readings side by side, and each method's longest
# sequence (memsim sweep --longest) beside the interval the paper's Table 4 leaves for it.
# About 36 s on an idle 2-core x86-64 machine (66 s of CPU; 3 minutes with both cores shared
# with other work, load average 7); progress lines go to standard error (MEMO_QUIET=1
# silences them). The runs of a step are independent memsim processes,
# MEMSIM_JOBS of them at once (`memsim experiment memo -j N`; default: the online cores);
# the outputs are the same whatever the count.
#
# usage: experiments/memo/run.sh [OUTDIR]   (default: out/memo in the repository; MEMSIM=path/to/memsim;
#        MEMO_ISSUE_AHEAD=N|unbounded simulates the host thread issuing the program, at most N
#        compute actions ahead of the GPU: memsim's --issue-ahead, default 0 = off, for every
#        run but full recomputation without a plan, which runs MEMO_REORG_AHEAD (default
#        unbounded: PyTorch does not throttle the CPU) with recordStream and per-stream pools;
#        MEMO_LOSS=fused|megatron: the loss of MEMO's executor's traces, default fused)
# Writes OUTDIR/a800-memo.machine (the profile used), results.tsv (memsim's cells in
# reference.tsv's layout), compare.txt (the printed comparison), runs/*.csv (memsim's result
# rows), table4.dat, table5.dat and the figures memo_table4.{png,svg}, memo_table5.{png,svg};
# variants.txt and variants/*.csv (Table 4 under the other trace assumptions); host_readings.tsv
# and readings.txt (the four readings of MEMO's pinned host buffers compared); longest.txt and
# longest_compare.txt (the longest sequence per method).
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
# grep reads the whole help (no -q): under pipefail an early exit would fail memsim's write
if ! "$MEMSIM" simulate --help 2>&1 | grep -- '--gen' >/dev/null; then
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
model=(--model gpt-7b --tp 4 --cp 2 --machine "$machine" --quiet)
base=("${model[@]}" ${issue[@]+"${issue[@]}"})
common=("${base[@]}" "${memo_gen[@]}")
# Full recomputation without a plan runs on PyTorch's caching allocator as Megatron-LM drives
# it (docs/ALLOCATORS.md, "Reorganizations"): c10d records its NCCL stream on a collective's
# tensors (plan knob record_stream=1), TE's cp-stream tensors come from that stream's own pool
# (stream_pools=1), and the host thread issues the program ahead of the GPU without a bound
# (PyTorch has none: the CPU waits only at synchronizations, a reorganization's among them).
reorg=(--knob record_stream=1 --knob stream_pools=1 --issue-ahead "${MEMO_REORG_AHEAD:-unbounded}")

# Independent runs go to the background, at most JOBS at once; settle waits for them all and
# stops the script if one failed (set -e does not see a background command's status).
JOBS=${MEMSIM_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
case "$JOBS" in ''|*[!0-9]*|0) JOBS=1 ;; esac
failed="$out/.failed.$$"
rm -f "$failed"
spawn() {
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    { "$@" || { echo "run.sh: failed: $*" >&2; touch "$failed"; }; } &
}
settle() {
    wait
    if [ -e "$failed" ]; then rm -f "$failed"; exit 1; fi
}

# 1. The machine profile: the shipped a800-8gpu with the overrides (first word = key).
"$here/profile.sh" "$machine"

# Rows of memsim's results CSV -> "policy seqK status mfu% retries_per_iter stall_s iter_s".
# Columns (docs/SIMULATOR.md): 1 policy, 5 seq, 10 status, 11 iter_time_s, 12 mfu,
# 23 alloc_retries_per_iter, 26 stall_s; the failure text (45) may hold commas: no column after it is read.
rows() {
    awk -F, 'FNR > 1 { printf "%s %dK %s %.2f %s %s %s\n", $1, $5 / 1024, $10, 100 * $12, $23, $26, $11 }' "$@"
}

res="$out/results.tsv"
: > "$res"
t0=$(date +%s)
# One progress line on standard error per step: what runs now and the time so far.
progress() {
    [ -n "${MEMO_QUIET:-}" ] || echo "run.sh: [$1/8] $2 ($(( $(date +%s) - t0 )) s so far)" >&2
}

# 2. Table 4: the four methods at each sequence length (one trace per length).
seqs4="64K 128K 256K 384K 512K 640K 768K 896K"
for s in $seqs4; do
    progress 2 "Table 4 at $s"
    spawn "$MEMSIM" simulate "${model[@]}" "${reorg[@]}" "${gen[@]}" --seq "$s" --policy full-recompute \
        --csv "$out/runs/table4-$s.csv"
    spawn "$MEMSIM" compare "${common[@]}" --seq "$s" --policies "$exec_pols" \
        --csv "$out/runs/table4x-$s.csv"
done
settle
rows "$out"/runs/table4-*.csv "$out"/runs/table4x-*.csv | awk '{ v = ($3 == "ok") ? $4 : toupper($3); print "table4\t" $1 "\t" $2 "\t" v }' >> "$res"
rows "$out"/runs/table4-*.csv | awk '$1 == "full-recompute" && ($2 == "128K" || $2 == "256K") {
    print "reorg\tfull-recompute\t" $2 "\t" (($3 == "ok") ? $5 : toupper($3)) }' >> "$res"
# what the reorganizations cost: the host thread's time in allocator calls per iteration (the
# synchronizes of release-and-retry, while the GPU runs its queue) against the iteration
awk -F, 'FNR > 1 && $1 == "full-recompute" && ($5 == 131072 || $5 == 262144) {
    printf "reorg-host\tfull-recompute\t%dK\t%.1f\nreorg-iter\tfull-recompute\t%dK\t%.2f\n", \
        $5 / 1024, $27, $5 / 1024, $11 }' "$out"/runs/table4-*.csv >> "$res"

# 3. Table 5: MEMO with alpha fixed.
for s in 192K 256K 320K 384K; do
    progress 3 "Table 5 at $s"
    for a in 0 0.125 0.25 0.375 0.5 0.625 0.75 0.875 1; do
        spawn "$MEMSIM" simulate "${common[@]}" --seq "$s" --policy memo --alpha "$a" \
            --csv "$out/runs/table5-$s-$a.csv"
    done
done
settle
for s in 192K 256K 320K 384K; do
    for a in 0 0.125 0.25 0.375 0.5 0.625 0.75 0.875 1; do
        rows "$out/runs/table5-$s-$a.csv" | awk -v a="$a" '{ v = ($3 == "ok") ? $4 : toupper($3)
            printf "table5\t%s\t%.3f\t%s\n", $2, a, v }' >> "$res"
    done
done

# 4. Where one layer's full offload stops costing time: full-swap+plan's compute stalls (waits
# for copies) below 1% of the iteration from this length on; and MEMO's LP view of it (the
# time constraint allows alpha = 1: alpha_lp_time >= 1).
cross_sim="" cross_lp=""
progress 4 "full-offload cross-over, 64K..320K"
for k in $(seq 64 16 320); do
    spawn "$MEMSIM" simulate "${common[@]}" --seq "${k}K" --policy full-swap+plan \
        --csv "$out/runs/offload-${k}K.csv"
    spawn "$MEMSIM" plan --model gpt-7b --tp 4 --cp 2 --machine "$machine" --seq "${k}K" "${memo_gen[@]}" \
        --policy memo --knob memory_plan=0 -o "$out/runs/offload-lp-${k}K.plan"
done
settle
for k in $(seq 64 16 320); do
    # stall fraction; runs that do not fit (OOHM) say nothing about the overlap
    f=$(rows "$out/runs/offload-${k}K.csv" | awk '{ print ($3 == "ok" && $7 > 0) ? $6 / $7 : "-" }')
    if [ "$f" != "-" ]; then
        if awk -v f="$f" 'BEGIN { exit !(f < 0.01) }'; then
            [ -n "$cross_sim" ] || cross_sim="${k}K"
        else
            cross_sim=""
        fi
    fi
    at=$(awk '$1 == "knob" && $2 == "alpha_lp_time" { print $3 }' "$out/runs/offload-lp-${k}K.plan")
    rm -f "$out/runs/offload-lp-${k}K.plan"
    if [ -z "$cross_lp" ] && awk -v a="$at" 'BEGIN { exit !(a >= 1) }'; then cross_lp="${k}K"; fi
done
printf "crossover\tfull-offload\tseq\t%s\n" "${cross_sim:-none}" >> "$res"
printf "crossover\tfull-offload-lp\tseq\t%s\n" "${cross_lp:-none}" >> "$res"

# 5. The comparison, and the figures' data.
progress 5 "comparison"
awk -f "$here/compare.awk" -v outdir="$out" "$here/reference.tsv" "$res" | tee "$out/compare.txt"

# 6. Table 4 under other assumptions, status and MFU per cell next to the paper's:
# "stock-loss": every row on Megatron's stock cross entropy (MEMO's executor too);
# "stream-time": full recomputation without the reorganization model (no recordStream, one
# pool, allocator calls at stream time); "host-exact", "host-layer", "host-tensor": MEMO's
# executor's pinned host buffers under the three other readings instead of the default
# buffer_pow2 (knob host_round=exact: exact bytes in 4 KiB pages; layer_pow2: one
# power-of-two buffer per layer, statistics included; tensor_pow2: one per tensor slice);
# "inplace-loss": MEMO's executor on Megatron-LM's cross entropy from June 2024 (the max
# subtracted in place on the fp32 copy: 6 bytes per logit at the peak, loss=megatron-inplace);
# "fr-one-buffer": full recomputation + plan without MEMO's second rounding buffer (knob
# fr_buffers=1: only the layer in use holds its recomputed activations);
# "generic": the generator's lean default program (MEMO's 16bsh accounting); "dist-opt": the
# stock program with Megatron's distributed optimizer (states sharded over dp*cp = 2). Also the
# caching allocator's reserved peak and retries of full recomputation. Full recomputation runs
# apart, with fr_opts (the reorganization model, as in the main table, unless said otherwise).
fr_opts=("${reorg[@]}")
variant() {
    name=$1 pols=$2; shift 2
    progress 6 "Table 4 variant $name"
    rest=$(echo "$pols" | awk -F, '{ for (i = 1; i <= NF; i++) if ($i != "full-recompute") o = o (o ? "," : "") $i; print o }')
    for s in $seqs4; do
        case ",$pols," in *,full-recompute,*)
            spawn "$MEMSIM" simulate "${model[@]}" ${fr_opts[@]+"${fr_opts[@]}"} "$@" --seq "$s" \
                --policy full-recompute --csv "$out/variants/$name-fr-$s.csv" ;;
        esac
        [ -z "$rest" ] || spawn "$MEMSIM" compare "${base[@]}" "$@" --seq "$s" --policies "$rest" \
            --csv "$out/variants/$name-$s.csv"
    done
    settle
    rows "$out"/variants/"$name"-*.csv | awk -v v="$name" '{ print v "\t" $1 "\t" $2 "\t" (($3 == "ok") ? $4 : toupper($3)) }'
}
all4=full-recompute,$exec_pols
{
    rows "$out"/runs/table4-*.csv "$out"/runs/table4x-*.csv | awk '{ print "main\t" $1 "\t" $2 "\t" (($3 == "ok") ? $4 : toupper($3)) }'
    variant stock-loss "$all4" "${gen[@]}"
    fr_opts=(${issue[@]+"${issue[@]}"})
    variant stream-time full-recompute "${gen[@]}"
    fr_opts=("${reorg[@]}")
    variant host-exact "full-swap+plan,memo" "${memo_gen[@]}" --knob host_round=exact
    variant host-layer "full-swap+plan,memo" "${memo_gen[@]}" --knob host_round=layer_pow2
    variant host-tensor "full-swap+plan,memo" "${memo_gen[@]}" --knob host_round=tensor_pow2
    variant inplace-loss "$exec_pols" "${gen[@]}" --gen loss=megatron-inplace
    variant fr-one-buffer full-recompute+plan "${memo_gen[@]}" --knob fr_buffers=1
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
        printf "  %-12s %-4s reserved peak %4.1f GiB, allocated peak %4.1f GiB, retries per iteration %2s, host in allocator calls %5.1f s of %5.1f s\n", \
            f, $10, $15 / 2^30, $14 / 2^30, $23, $27, $11 }' "$out"/runs/table4-*.csv \
    | sort -t- -k2 -n | { echo; echo "full recomputation on the caching allocator (megatron trace, stock loss; recordStream, per-stream pools, host issue unbounded)"; cat; } \
    | tee -a "$out/variants.txt"

# 7. The four readings of MEMO's host buffers (knob host_round) side by side: Table 5's host
# cells from the plan's host need at each alpha (memsim plan: the buffers as lowering allocates
# them, (n - 2) offloaded layers) against the host each GPU has (lp_host_bytes); Table 4's
# executor rows from the main run and the host-exact / host-layer / host-tensor variants. The
# host reading changes no time (pinned allocations are taken as made before training), so a Table 5 cell
# that fits has the main run's MFU under every reading.
progress 7 "MEMO's host buffers under four readings"
for r in exact layer_pow2 tensor_pow2 buffer_pow2; do
    for s in 192K 256K 320K 384K; do
        for a in 0 0.125 0.25 0.375 0.5 0.625 0.75 0.875 1; do
            spawn "$MEMSIM" plan --model gpt-7b --tp 4 --cp 2 --machine "$machine" --seq "$s" "${memo_gen[@]}" \
                --policy memo --alpha "$a" --knob memory_plan=0 --knob host_round="$r" \
                -o "$out/runs/host-$r-$s-$a.plan"
        done
    done
done
settle
for r in exact layer_pow2 tensor_pow2 buffer_pow2; do
    for s in 192K 256K 320K 384K; do
        for a in 0 0.125 0.25 0.375 0.5 0.625 0.75 0.875 1; do
            awk -v r="$r" -v s="$s" -v a="$a" '$1 == "knob" && $2 == "host_need_bytes" { n = $3 }
                    $1 == "knob" && $2 == "lp_host_bytes" { c = $3 }
                    END { printf "%s\t%s\t%.3f\t%.1f\t%.1f\n", r, s, a, n / 2^30, c / 2^30 }' \
                "$out/runs/host-$r-$s-$a.plan"
            rm -f "$out/runs/host-$r-$s-$a.plan"
        done
    done
done > "$out/host_readings.tsv"
# Table 5 cells that fit under a reading but not under the main run's: simulated under it.
: > "$out/table5-readings.tsv"
awk -F'\t' 'FNR == NR { if ($1 == "table5") v[$2 SUBSEP $3] = $4; next }
    $1 != "buffer_pow2" && $4 <= $5 && v[$2 SUBSEP $3] !~ /^[0-9.]+$/ { print $1, $2, $3 }' \
    "$res" "$out/host_readings.tsv" | while read -r r s a; do
    "$MEMSIM" simulate "${common[@]}" --seq "$s" --policy memo --alpha "$a" --knob host_round="$r" \
        --csv "$out/runs/table5-$r-$s-$a.csv"
    rows "$out/runs/table5-$r-$s-$a.csv" | awk -v r="$r" -v a="$a" '{
        printf "%s\t%s\t%.3f\t%s\n", r, $2, a, ($3 == "ok") ? $4 : toupper($3) }' >> "$out/table5-readings.tsv"
done
awk -F'\t' -v res="$res" -v vt="$out/variants.tsv" -v t5x="$out/table5-readings.tsv" \
    -f "$here/readings.awk" "$here/reference.tsv" "$out/host_readings.tsv" | tee "$out/readings.txt"

# 8. The longest sequence each method fits, bisected in 8K steps by memsim sweep --longest, beside
# the interval the paper's Table 4 cells put it in (the last length that ran, the first that
# failed). Full recomputation without a plan as in Table 4's first row (stock loss, the
# reorganization model); the executor rows on MEMO's loss.
progress 8 "longest sequence per method"
sw=(--model gpt-7b --tp 4 --cp 2 --machine "$machine") # as model, without --quiet
{
    "$MEMSIM" sweep -j "$JOBS" "${sw[@]}" "${reorg[@]}" "${gen[@]}" --policies full-recompute \
        --seqs 256K,384K,512K --longest --step 8K 2> /dev/null
    "$MEMSIM" sweep -j "$JOBS" "${sw[@]}" ${issue[@]+"${issue[@]}"} "${memo_gen[@]}" --policies "$exec_pols" \
        --seqs 256K,384K,512K,640K,768K,896K,1024K --longest --step 8K 2> /dev/null
} | awk '/^longest/ { on = 1; next } /^seq/ { on = 0; next } on && NF >= 2 { print }' > "$out/longest.txt"
awk -F'\t' 'FNR == NR { if ($1 == "table4") { k = $3; sub(/K$/, "", k); k += 0
                   if ($4 ~ /^[0-9.]+$/) { if (k > ok[$2]) ok[$2] = k }
                   else if (!($2 in fail) || k < fail[$2]) fail[$2] = k }
               next }
    { line = $0; sub(/^ +/, "", line); split(line, w, " "); m = w[1]
      fits = line; sub(/^[^ ]+ +/, "", fits)
      n = (fits ~ /^[0-9]+K/) ? substr(fits, 1, index(fits, "K") - 1) + 0 : -1
      lo = ok[m]; hi = (m in fail) ? fail[m] : 0
      paper = hi ? sprintf("%dK to %dK", lo, hi - 1) : sprintf(">= %dK", lo)
      inside = (n < 0) ? "fits all tried" : (n >= lo && (!hi || n < hi)) ? "yes" : "no"
      if (inside == "yes") agree++
      printf "  %-20s %-16s %-26s %s\n", m, paper, fits, inside; rows++ }
    END { printf "memsim inside the paper'"'"'s interval for %d of %d methods\n", agree, rows }' \
    "$here/reference.tsv" "$out/longest.txt" \
  | { echo; echo "Longest sequence that fits (memsim sweep --longest, 8K steps; the paper: from its Table 4 cells)"
      printf '  %-20s %-16s %-26s %s\n' method paper memsim inside; cat; } | tee "$out/longest_compare.txt"

if command -v gnuplot > /dev/null; then
    for f in png svg; do
        gnuplot -e "datafile='$out/table4.dat'; outfile='$out/memo_table4.$f'; fmt='$f'" plots/memo_table4.gp
        gnuplot -e "datafile='$out/table5.dat'; outfile='$out/memo_table5.$f'; fmt='$f'" plots/memo_table5.gp
    done
    echo "figures: $out/memo_table4.png/.svg, $out/memo_table5.png/.svg"
else
    echo "gnuplot not found: no figures (data in $out/table4.dat, $out/table5.dat)"
fi

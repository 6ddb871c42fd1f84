#!/usr/bin/env bash
# experiments/realworld/run.sh — memsim's predictions of real Hugging Face training runs beside
# what those runs measured on a GPU. Each measured case (h200/NAME.json, written by hf_run.py:
# a transformers model in random initialization, PyTorch eager, AdamW, amp or bf16, with or
# without gradient_checkpointing_enable()) is predicted from its config.json, framework,
# precision, sequence, batch and policy alone:
#   memsim simulate --model-config configs/CFG.json --framework hf --precision P --seq S
#       --batch B --machine h200-sxm --policy keep-all | full-recompute (with checkpointing)
# and printed beside the measurement: status (ok / oom), peak allocated and peak reserved
# bytes, step time (median of the timed steps), each with memsim's error. Cases whose
# allocator trace was recorded (fx-*: one timed step under _record_memory_history) are compared
# in memory only. A summary gives the median and worst error of each column and how many
# statuses agree. Nothing is fitted: the run's numbers are read, never fed back.
#
# usage: experiments/realworld/run.sh [OUTDIR]      compare (default OUTDIR out/realworld):
#            writes OUTDIR/compare.txt (what is printed) and OUTDIR/results.tsv
#        experiments/realworld/run.sh gpu DIR [LIST] [STEPS]
#            on a GPU machine: measure every case of LIST (default cases2.tsv) into DIR
#            (gpu.sh: one fresh Python process per case)
# MEMSIM=path/to/memsim (default: the build's sim/memsim); MEASURED=DIR (default h200/).
# About 10 s on a 2-core machine.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ "${1:-}" = gpu ]; then
    [ $# -ge 2 ] || { echo "usage: run.sh gpu DIR [LIST] [STEPS]" >&2; exit 2; }
    exec bash "$here/gpu.sh" "${3:-$here/cases2.tsv}" "$2" "${4:-5}"
fi
case "${1:-}" in -h|--help) sed -n '2,22p' "$0"; exit 0 ;; esac
out=${1:-$root/out/realworld}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
MEMSIM=${MEMSIM:-$root/sim/memsim}
meas=${MEASURED:-$here/h200}
if [ ! -x "$MEMSIM" ]; then
    echo "run.sh: $MEMSIM not found: build memsim first (make) or set MEMSIM" >&2
    exit 4
fi
mkdir -p "$out/runs" || exit 4

# jget FILE KEY: the value of KEY in hf_run.py's one-line JSON (flat; strings unquoted).
jget() {
    sed -n 's/.*"'"$2"'": \("[^"]*"\|[^,}]*\).*/\1/p' "$1" | tr -d '"'
}

tsv="$out/results.tsv.tmp"
printf 'case\tconfig\tprecision\tckpt\tseq\tbatch\tstatus_meas\tstatus_pred\tpeak_alloc_meas\tpeak_alloc_pred\tpeak_resv_meas\tpeak_resv_pred\tstep_s_meas\tstep_s_pred\n' > "$tsv"
n=0
for f in "$meas"/*.json; do
    name=$(basename "$f" .json)
    case "$name" in an-*) continue ;; esac   # anatomy recordings: 2-layer toys with frames
    cfg=$(jget "$f" config); cfg=${cfg%.json}
    prec=$(jget "$f" precision); ck=$(jget "$f" ckpt); seq=$(jget "$f" seq); b=$(jget "$f" batch)
    st=$(jget "$f" status); pa=$(jget "$f" peak_allocated); pr=$(jget "$f" peak_reserved)
    ts=$(jget "$f" step_s)
    case "$name" in fx-*) ts=None ;; esac      # one step under allocator recording: not timed
    pol=keep-all; [ "$ck" = 1 ] && pol=full-recompute
    csv="$out/runs/$name.csv"
    n=$((n + 1))
    [ -n "${REALWORLD_QUIET:-}" ] || echo "[$n] $name" >&2
    if "$MEMSIM" simulate --model-config "$here/configs/$cfg.json" --framework hf \
        --precision "$prec" --seq "$seq" --batch "$b" --machine h200-sxm --policy "$pol" \
        --csv "$csv" --quiet 2> "$out/runs/$name.err"; then :; fi
    if [ -s "$csv" ]; then
        row=$(sed -n 2p "$csv")
        pst=$(echo "$row" | cut -d, -f10); pt=$(echo "$row" | cut -d, -f11)
        ppa=$(echo "$row" | cut -d, -f14); ppr=$(echo "$row" | cut -d, -f15)
    else
        pst="error: $(head -1 "$out/runs/$name.err" | tr '\t' ' ')"; pt=-; ppa=-; ppr=-
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$cfg" "$prec" \
        "$ck" "$seq" "$b" "$st" "$pst" "$pa" "$ppa" "$pr" "$ppr" "$ts" "$pt" >> "$tsv"
done
mv "$tsv" "$out/results.tsv"

awk -F'\t' -v dev="$(jget "$(ls "$meas"/*.json | head -1)" device)" \
    -v tv="$(jget "$(ls "$meas"/*.json | head -1)" torch)" \
    -v hv="$(jget "$(ls "$meas"/*.json | head -1)" transformers)" '
function pct(p, m) { return (p - m) / m * 100 }
function absv(x) { return x < 0 ? -x : x }
function med(a, k,   i, j, t) {
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return k == 0 ? 0 : (k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2)
}
function mx(a, k,   i, m) { m = 0; for (i = 1; i <= k; i++) if (a[i] > m) m = a[i]; return m }
function cell(p, m, arr, kk) {
    if (p == "-" || m == "None" || m == "" || p == "") return sprintf("%9s %9s %7s", m == "None" ? "-" : m, p, "")
    return sprintf("%9.3f %9.3f %+6.1f%%", m, p, pct(p, m))
}
NR == 1 { next }
{
    G = 1073741824
    okm = ($7 == "ok"); okp = ($8 == "ok")
    same = ($7 == $8); nst++; if (same) nsame++
    if (okm && okp) {
        ea[++na] = absv(pct($10, $9)); er[++nr] = absv(pct($12, $11))
        if ($13 != "None" && $13 != "") et[++nt] = absv(pct($14, $13))
    }
    am = okm ? sprintf("%9.3f", $9 / G) : sprintf("%9s", "-")
    ap = ($10 != "-" && okp) ? sprintf("%9.3f", $10 / G) : sprintf("%9s", "-")
    ad = (okm && okp) ? sprintf("%+6.1f%%", pct($10, $9)) : "      "
    rm = okm ? sprintf("%9.3f", $11 / G) : sprintf("%9s", "-")
    rp = ($12 != "-" && okp) ? sprintf("%9.3f", $12 / G) : sprintf("%9s", "-")
    rd = (okm && okp) ? sprintf("%+6.1f%%", pct($12, $11)) : "      "
    if ($13 != "None" && $13 != "" && okm && okp) {
        tm = sprintf("%8.4f", $13); tp = sprintf("%8.4f", $14); td = sprintf("%+6.1f%%", pct($14, $13))
    } else { tm = sprintf("%8s", "-"); tp = (okp && $14 != "-") ? sprintf("%8.4f", $14) : sprintf("%8s", "-"); td = "      " }
    pstat = $8; if (length(pstat) > 40) pstat = substr(pstat, 1, 40) "..."
    rows[++nrow] = sprintf("%-24s %-5s %-2s %6s %3s  %-4s %-5s%s | %s %s %s | %s %s %s | %s %s %s", $1, $3, ($4 == 1 ? "ck" : "-"), $5, $6, $7, (same ? "" : "!"), pstat, am, ap, ad, rm, rp, rd, tm, tp, td)
}
END {
    printf "memsim vs real Hugging Face training runs on %s (PyTorch %s, transformers %s)\n", dev, tv, hv
    printf "predicted from config.json, --framework hf --precision P --seq --batch, policy keep-all or full-recompute (checkpointing); machine h200-sxm\n\n"
    printf "%-24s %-5s %-2s %6s %3s  %-10s | %-9s %-9s %-7s | %-9s %-9s %-7s | %-8s %-8s %-7s\n", "case", "prec", "ck", "seq", "b", "status m/p", "alloc GiB", "memsim", "err", "resv GiB", "memsim", "err", "step s", "memsim", "err"
    for (i = 1; i <= nrow; i++) print rows[i]
    printf "\nstatus (fits / out of memory) right in %d of %d cases\n", nsame, nst
    printf "peak allocated: median |err| %.2f %%, worst %.2f %% (%d cases both ok)\n", med(ea, na), mx(ea, na), na
    printf "peak reserved:  median |err| %.2f %%, worst %.2f %% (%d cases)\n", med(er, nr), mx(er, nr), nr
    printf "step time:      median |err| %.2f %%, worst %.2f %% (%d timed cases)\n", med(et, nt), mx(et, nt), nt
}' "$out/results.tsv" > "$out/compare.txt.tmp" && mv "$out/compare.txt.tmp" "$out/compare.txt"
cat "$out/compare.txt"

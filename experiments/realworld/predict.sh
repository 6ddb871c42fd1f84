#!/bin/sh
# predict.sh — memsim's prediction of every measured case of cases2.tsv and fixtures.tsv
# that has a result in h200/ (framework hf, the case's precision, full-recompute for the
# checkpointed ones), printed beside the measurement with the relative error:
# peak allocated, peak reserved (GB), status and step time (s). Cases whose model family the
# hf profile does not model print memsim's refusal.
# usage: predict.sh [MEMSIM] [NAME-SUBSTRING...]   (MEMSIM default: ../../sim/memsim)
here=$(cd "$(dirname "$0")" && pwd)
ms=${1:-$here/../../sim/memsim}
[ $# -gt 0 ] && shift
printf '%-24s %-9s %-22s %-22s %s\n' case status "alloc GB pred/meas" "resv GB pred/meas" \
    "step s pred/meas"
for tsv in "$here/cases2.tsv" "$here/fixtures.tsv"; do
    grep -v '^#' "$tsv" | while IFS='	' read -r name cfg prec ck seq batch extra; do
        res="$here/h200/$name.json"
        [ -f "$res" ] || continue
        if [ $# -gt 0 ]; then
            hit=0
            for p in "$@"; do case $name in *"$p"*) hit=1 ;; esac; done
            [ $hit = 1 ] || continue
        fi
        pol=keep-all
        [ "$ck" = 1 ] && pol=full-recompute
        out=$("$ms" simulate --model-config "$here/configs/$cfg.json" --gen framework=hf \
              --gen precision="$prec" --seq "$seq" --batch "$batch" --machine h200-sxm \
              --policy "$pol" 2>&1 | grep -E "^$pol |error|refus|not model" | head -1)
        python3 - "$res" "$pol" "$name" "$out" <<'PY'
import json, sys
res, pol, name, out = sys.argv[1:5]
m = json.load(open(res))
f = out.split()
if not out.startswith(pol + " "):
    print("%-24s %s" % (name, out[:110]))
    sys.exit(0)
st, it, resv, alloc = f[2], float(f[3]), float(f[6]) * 2**30, float(f[7]) * 2**30
ma, mr, ms = m["peak_allocated"], m["peak_reserved"], m.get("step_s")
step = "%.3f/%.3f %+.0f%%" % (it, ms, 100 * (it / ms - 1)) if ms else "-"
print("%-24s %-4s/%-4s %6.2f/%6.2f %+5.1f%% %6.2f/%6.2f %+5.1f%% %s" % (
    name, st, m["status"], alloc / 1e9, ma / 1e9, 100 * (alloc / ma - 1), resv / 1e9,
    mr / 1e9, 100 * (resv / mr - 1), step))
PY
    done
done

#!/bin/sh
# plotdata.sh — reshapes the CSV files of `memsim gmlake` (one row per workload and allocator)
# into the whitespace tables plots/gmlake_*.gp draw (one row per workload, one column per
# allocator; "?" where the allocator ran out of memory). Used by run.sh:
#     experiments/gmlake/plotdata.sh out/gmlake
set -eu
out=${1:-out/gmlake}
for f in fig10.csv fig11.csv fig13.csv fig14.csv; do
    [ -r "$out/$f" ] || { echo "plotdata.sh: $out/$f missing" >&2; exit 3; }
done

# Columns of every table after its key columns: utilization % then reserved GiB of caching,
# stitching, expandable, static.
awk -F, -v out="$out" '
function cell(k, a, what) {
    if (!((k, a) in st) || st[k, a] != "ok") return "?"
    return what == "u" ? sprintf("%.2f", 100 * ut[k, a]) : sprintf("%.3f", res[k, a])
}
function row(k,   j, s) {
    s = ""
    for (j = 1; j <= 4; j++) s = s " " cell(k, al[j], "u")
    for (j = 1; j <= 4; j++) s = s " " cell(k, al[j], "r")
    return s
}
BEGIN { split("caching stitching expandable static", al, " ") }
FNR == 1 { next }
{
    k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4 SUBSEP $6
    if (!(k in seen)) { seen[k] = 1; n++; keys[n] = k }
    st[k, $7] = $8; ut[k, $7] = $11; res[k, $7] = $10
}
END {
    hdr = "u_caching u_stitching u_expandable u_static r_caching r_stitching r_expandable r_static"
    # Fig. 10: one file per batch, rows "model/strategy".
    for (i = 1; i <= n; i++) {
        split(keys[i], p, SUBSEP)
        if (p[1] != "10") continue
        f = out "/fig10_b" p[5] ".dat"
        if (!(f in started)) { started[f] = 1; print "# label " hdr > f }
        print p[2] "/" p[3] row(keys[i]) > f
    }
    # Figs. 11 and 13: one block per model (gnuplot index), rows by GPUs / batch.
    for (i = 1; i <= n; i++) {
        split(keys[i], p, SUBSEP)
        if (p[1] != "11" && p[1] != "13") continue
        f = out "/fig" p[1] ".dat"
        if (!(f in started)) { started[f] = 1; print "# model x " hdr > f; last[f] = "" }
        if (last[f] != "" && last[f] != p[2]) print "\n" > f
        last[f] = p[2]
        print p[2] " " (p[1] == "11" ? p[4] : p[5]) row(keys[i]) > f
    }
}' "$out/fig10.csv" "$out/fig11.csv" "$out/fig13.csv"

# Fig. 14: stitches and new physical chunks per iteration, one row per iteration.
awk -F, -v out="$out" '
FNR == 1 { next }
{ s[$5, $6] = $8; c[$5, $6] = $9; if ($6 + 1 > n) n = $6 + 1 }
END {
    f = out "/fig14_stitches.dat"
    print "# iteration stitches new_chunks (stitching)" > f
    for (i = 0; i < n; i++) print i, s["stitching", i] + 0, c["stitching", i] + 0 > f
}' "$out/fig14.csv"

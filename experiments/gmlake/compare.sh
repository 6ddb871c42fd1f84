#!/bin/sh
# compare.sh — prints the GMLake comparison: for each figure, the paper's number (reference.tsv)
# beside memsim's (the CSV files `memsim gmlake` wrote into OUTDIR) and their difference, then
# the per-configuration tables the figures are drawn from. Used by run.sh; runs on its own:
#     experiments/gmlake/compare.sh out/gmlake
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-out/gmlake}
for f in fig10.csv fig11.csv fig13.csv fig13_maxbatch.csv fig14.csv; do
    [ -r "$out/$f" ] || { echo "compare.sh: $out/$f missing (run memsim gmlake first)" >&2; exit 3; }
done
real="$out/real.csv"
[ -r "$real" ] || real=/dev/null
realgen="$out/real_gen.csv"
[ -r "$realgen" ] || realgen=/dev/null

exec awk -F'\t' -v OFS='\t' '
function pct(x) { return sprintf("%.1f", 100 * x) }
function num(x, d) { return sprintf("%." d "f", x) }
# ---- reading the CSV files (comma separated) ----
FILENAME ~ /reference\.tsv$/ {
    if ($0 ~ /^#/ || NF < 8) next
    nref++; rid[nref] = $1; rfig[nref] = $2; rq[nref] = $3; rk[nref] = $4
    rlo[nref] = $5; rhi[nref] = $6; ru[nref] = $7; rsrc[nref] = $8
    next
}
FNR == 1 { npp = split(FILENAME, pp, "/"); base = pp[npp]; next }
{
    n = split($0, c, ",")
}
base == "fig10.csv" || base == "fig11.csv" || base == "fig13.csv" {
    key = c[1] SUBSEP c[2] SUBSEP c[3] SUBSEP c[4] SUBSEP c[6]
    if (!(key in seen)) { seen[key] = 1; nkeys++; keys[nkeys] = key }
    st[key, c[7]] = c[8]; act[key, c[7]] = c[9]; res[key, c[7]] = c[10]; ut[key, c[7]] = c[11]
    stitches[key, c[7]] = c[13]; allocs[key, c[7]] = c[18]; msize[key, c[7]] = c[19]
    next
}
base == "fig13_maxbatch.csv" { mb[c[1], c[4]] = c[5]; if (!(c[1] in mbm)) { mbm[c[1]] = 1; nmb++; mbmodel[nmb] = c[1] }; next }
base == "fig14.csv" {
    a = c[5]; it = c[6] + 0
    f14model = c[1]; f14batch = c[4]; f14gpus = c[2]
    f14st[a, it] = c[8]; if (c[7] == "oom") f14oom[a] = 1
    f14n[a] = (it + 1 > f14n[a]) ? it + 1 : f14n[a]
    f14act[a] = c[12]; f14res[a] = c[13]; f14seen[a] = 1
    next
}
base == "real_gen.csv" {
    ngen++; gtr[ngen] = c[1]; gmode[ngen] = c[2]; gal[ngen] = c[3]; gpa[ngen] = c[4]; gpr[ngen] = c[5]
    grr[ngen] = c[6]; gga[ngen] = c[7]; ggr[ngen] = c[8]; gna[ngen] = c[9]; gng[ngen] = c[10]
    next
}
base == "real.csv" {
    nreal++; rtr[nreal] = c[1]; rmode[nreal] = c[2]; ralloc[nreal] = c[3]; rst[nreal] = c[4]
    rpt[nreal] = c[5]; rms[nreal] = c[7]; rut[nreal] = c[9]
    next
}
# ---- metrics ----
function both_ok(k) { return st[k, "caching"] == "ok" && st[k, "stitching"] == "ok" }
function add_range(name, v) {
    if (!(name in mn) || v < mn[name]) mn[name] = v
    if (!(name in mx) || v > mx[name]) mx[name] = v
    sum[name] += v; cnt[name]++
}
function metrics(   i, k, f, parts, gain, saved, m) {
    for (i = 1; i <= nkeys; i++) {
        k = keys[i]; split(k, parts, SUBSEP); f = parts[1]; m = parts[2]
        if (st[k, "stitching"] == "ok") {
            add_range("gml_util." f, ut[k, "stitching"])
            if (f == "13" && m != "opt-1.3b") add_range("gml_util_big.13", ut[k, "stitching"])
        }
        if (st[k, "caching"] == "ok") add_range("pt_util." f, ut[k, "caching"])
        if (f == "10") {
            # Fig. 10 is summarized per batch size.
            if (!((parts[5]) in f10seen)) { f10seen[parts[5]] = 1; nf10++; f10b[nf10] = parts[5] + 0 }
            if (st[k, "stitching"] == "ok") add_range("gml_util.10." parts[5], ut[k, "stitching"])
            if (st[k, "caching"] == "ok") add_range("pt_util.10." parts[5], ut[k, "caching"])
        }
        if (!both_ok(k)) continue
        gain = 100 * (ut[k, "stitching"] - ut[k, "caching"])
        saved = res[k, "caching"] - res[k, "stitching"]
        add_range("gain." f, gain); add_range("saved." f, saved)
        if (f == "10") { add_range("gain.10." parts[5], gain); add_range("saved.10." parts[5], saved) }
        add_range("gain.all", gain); add_range("saved.all", saved)
        if (f == "11" && m == "gpt-neox-20b") { add_range("gain.11neox", gain); add_range("saved.11neox", saved) }
    }
}
function f11util(model, gpus,   i, k, parts) {
    for (i = 1; i <= nkeys; i++) {
        k = keys[i]; split(k, parts, SUBSEP)
        if (parts[1] == "11" && parts[2] == model && parts[4] == gpus && st[k, "caching"] == "ok")
            return ut[k, "caching"]
    }
    return -1
}
function f11trend(   i, k, parts, lo, hi, models, cntm, mm) {
    for (i = 1; i <= nkeys; i++) {
        k = keys[i]; split(k, parts, SUBSEP)
        if (parts[1] != "11" || st[k, "caching"] != "ok") continue
        models[parts[2]] = 1
        if (!((parts[2]) in lo) || parts[4] + 0 < lo[parts[2]]) { lo[parts[2]] = parts[4] + 0; ulo[parts[2]] = ut[k, "caching"] }
        if (!((parts[2]) in hi) || parts[4] + 0 > hi[parts[2]]) { hi[parts[2]] = parts[4] + 0; uhi[parts[2]] = ut[k, "caching"] }
    }
    cntm = 0; for (mm in models) if (uhi[mm] < ulo[mm]) cntm++
    return cntm
}
function converge(   i, last) {
    if (!("stitching" in f14seen)) return -1
    last = -1
    for (i = 0; i < f14n["stitching"]; i++) if (f14st["stitching", i] + 0 > 0) last = i
    return last + 1
}
# value for a reference id: "memsim text" TAB "difference text"
function value(id, k, lo, hi,   v, a, b, i) {
    if (id == "fig10.util_gain") return rng("gain.10." curb, 1, lo, hi)
    if (id == "fig10.res_saved_typ") return one(cnt["saved.10." curb] ? sum["saved.10." curb] / cnt["saved.10." curb] : "", lo, 2)
    if (id == "fig10.res_saved_max") return one(mx["saved.10." curb], lo, 2)
    if (id == "fig10.gml_frag") { a = 100 * (1 - mx["gml_util.10." curb]); b = 100 * (1 - mn["gml_util.10." curb]); return num(a, 1) ".." num(b, 1) "\t" sprintf("%+.1f / %+.1f", a - lo, b - hi) }
    if (id == "fig10.pt_frag_max") return bound(100 * (1 - mn["pt_util.10." curb]), lo, "atleast")
    if (id == "fig11.gml_util") { a = 100 * mn["gml_util.11"]; b = 100 * mx["gml_util.11"]; return num(a, 1) ".." num(b, 1) "\t" sprintf("%+.1f / %+.1f", a - lo, b - hi) }
    if (id == "fig11.neox_util_gain_max") return one(mx["gain.11neox"], lo, 1)
    if (id == "fig11.neox_res_saved_max") return one(mx["saved.11neox"], lo, 2)
    if (id == "fig11.pt_opt13b_util_1") return bound(100 * f11util("opt-13b", 1), lo, "atleast")
    if (id == "fig11.pt_opt13b_util_16") return one(100 * f11util("opt-13b", 16), lo, 1)
    if (id == "fig11.pt_trend") { v = f11trend(); return v " of 3\t" sprintf("%+d", v - lo) }
    if (id == "fig13.gml_util_min_big") return bound(100 * mn["gml_util_big.13"], lo, "atleast")
    if (id == "fig13.pt_util_max") return bound(100 * mx["pt_util.13"], hi, "atmost")
    if (id == "fig13.oom_models") { v = 0; for (i = 1; i <= nmb; i++) if (mb[mbmodel[i], "stitching"] + 0 > mb[mbmodel[i], "caching"] + 0) v++; return v " of " nmb "\t" sprintf("%+d", v - lo) }
    if (id == "fig14.pt_status") { v = ("caching" in f14oom) ? "oom" : "ok"; return v "\t" (v == lo ? "same" : "differs") }
    if (id == "fig14.gml_status") { v = ("stitching" in f14oom) ? "oom" : "ok"; return v "\t" (v == lo ? "same" : "differs") }
    if (id == "fig14.pt_max_batch") return mbound(mb[f14model, "caching"], hi, "atmost")
    if (id == "fig14.gml_max_batch") return mbound(mb[f14model, "stitching"], lo, "atleast")
    if (id == "fig14.converge_iter") { v = converge(); return v "\t" sprintf("%+d", v - lo) }
    if (id == "all.frag_reduction_avg") return one(cnt["gain.all"] ? sum["gain.all"] / cnt["gain.all"] : "", lo, 1)
    if (id == "all.frag_reduction_max") return one(mx["gain.all"], lo, 1)
    if (id == "all.res_saved_avg") return one(cnt["saved.all"] ? sum["saved.all"] / cnt["saved.all"] : "", lo, 2)
    if (id == "all.res_saved_max") return one(mx["saved.all"], lo, 2)
    return "-\t-"
}
function rng(name, d, lo, hi,   a, b) {
    if (!(name in mn)) return "no data\t-"
    a = mn[name]; b = mx[name]
    return num(a, d) ".." num(b, d) "\t" sprintf("%+." d "f / %+." d "f", a - lo, b - hi)
}
function one(v, ref, d) { if (v == "") return "no data\t-"; return num(v, d) "\t" sprintf("%+." d "f", v - ref) }
function bound(v, ref, kind) {
    if (v < 0) return "no data\t-"
    return num(v, 1) "\t" sprintf("%+.1f", v - ref) ((kind == "atleast" ? v >= ref : v <= ref) ? " (holds)" : " (does not hold)")
}
function mbound(v, ref, kind) {
    if (v == "") return "no data\t-"
    return v "\t" sprintf("%+d", v - ref) ((kind == "atleast" ? v + 0 >= ref + 0 : v + 0 <= ref + 0) ? " (holds)" : " (does not hold)")
}
function paper(i) {
    if (rk[i] == "range") return rlo[i] ".." rhi[i]
    if (rk[i] == "atleast") return ">= " rlo[i]
    if (rk[i] == "atmost") return "<= " rhi[i]
    return rlo[i]
}
function line(a, b, c, d, e) { printf "%-66s %-8s %-13s %-22s %s\n", a, b, c, d, e }
function figtitle(f) {
    if (f == "all") return "-- All workloads of Figs. 10, 11, 13 (the paper: 76 workloads, 8 models)"
    return "-- Figure " f
}
function refrow(i,   vv) {
    split(value(rid[i], rk[i], rlo[i], rhi[i]), vv, "\t")
    line(rq[i] (rfig[i] == "10" ? " [batch " curb "]" : ""), paper(i), vv[1], vv[2], ru[i])
}
END {
    metrics()
    print "== memsim vs GMLake (ASPLOS24): the paper'"'"'s stated numbers"
    print "   utilization = peak active / peak reserved; PyTorch = caching, GMLake = stitching; memory in GiB"
    # Fig. 10 batches in increasing order.
    for (i = 2; i <= nf10; i++) for (j = i; j > 1 && f10b[j] < f10b[j - 1]; j--) { t = f10b[j]; f10b[j] = f10b[j - 1]; f10b[j - 1] = t }
    lastfig = ""
    for (i = 1; i <= nref; i++) {
        if (rfig[i] == lastfig) continue
        lastfig = rfig[i]
        print ""; print figtitle(rfig[i])
        line("quantity", "paper", "memsim", "difference (memsim - paper)", "unit")
        nb = rfig[i] == "10" ? nf10 : 1
        for (b = 1; b <= nb; b++) {
            curb = f10b[b]
            for (j = i; j <= nref && rfig[j] == rfig[i]; j++) refrow(j)
        }
    }
    print ""
    print "== Per configuration (the data behind the figures; the paper gives no per-bar numbers)"
    printf "%-4s %-13s %-4s %4s %5s | %-16s %-16s %-16s %-16s | %7s %8s\n", "fig", "model", "str", "gpus", "batch", "caching", "stitching", "expandable", "static", "gain pp", "saved"
    for (i = 1; i <= nkeys; i++) {
        k = keys[i]; split(k, parts, SUBSEP)
        printf "%-4s %-13s %-4s %4s %5s |", parts[1], parts[2], parts[3], parts[4], parts[5]
        split("caching stitching expandable static", al, " ")
        for (j = 1; j <= 4; j++) {
            a = al[j]
            if (!((k, a) in st)) printf " %-16s", "-"
            else if (st[k, a] == "oom") printf " %-16s", "OOM"
            else printf " %-16s", sprintf("%.1f%% %6.2fG", 100 * ut[k, a], res[k, a])
        }
        if (both_ok(k)) printf " | %7.1f %7.2fG\n", 100 * (ut[k, "stitching"] - ut[k, "caching"]), res[k, "caching"] - res[k, "stitching"]
        else printf " | %7s %8s\n", "-", "-"
    }
    print ""
    print "== Figure 13: the largest batch that runs (LR, ZeRO-3)"
    printf "%-14s %9s %10s %11s %7s\n", "model", "caching", "stitching", "expandable", "static"
    for (i = 1; i <= nmb; i++) printf "%-14s %9s %10s %11s %7s\n", mbmodel[i], mb[mbmodel[i], "caching"], mb[mbmodel[i], "stitching"], mb[mbmodel[i], "expandable"], mb[mbmodel[i], "static"]
    print ""
    print "== Figure 14: " f14model ", LR, " f14gpus " GPUs, batch " f14batch ": stitches per iteration"
    printf "%-11s", "allocator"; for (i = 0; i < f14n["stitching"]; i++) printf " %5s", "it" i; printf " %9s %9s %6s\n", "active", "reserved", "status"
    split("caching stitching expandable", al, " ")
    for (j = 1; j <= 3; j++) {
        a = al[j]; if (!(a in f14seen)) continue
        printf "%-11s", a
        for (i = 0; i < f14n["stitching"]; i++) {
            v = "-"
            if ((a, i) in f14st) v = f14st[a, i]
            printf " %5s", v
        }
        v = "ok"
        if (a in f14oom) v = "oom"
        printf " %8.2fG %8.2fG %6s\n", f14act[a], f14res[a], v
    }
    if (nreal) {
        print ""
        print "== Recorded PyTorch traces (GPT-2 on an H200) replayed: peak reserved, MiB"
        printf "%-28s %-17s %-11s %9s %9s %9s %6s\n", "trace", "mode", "allocator", "PyTorch", "memsim", "diff", "util"
        for (i = 1; i <= nreal; i++) {
            d = 0
            if (rpt[i] > 0) d = 100 * (rms[i] - rpt[i]) / rpt[i]
            printf "%-28s %-17s %-11s %9.1f %9.1f %+8.1f%% %5.1f%%\n", rtr[i], rmode[i], ralloc[i], rpt[i], rms[i], d, 100 * rut[i]
        }
    }
    if (ngen) {
        print ""
        print "== The generator against the recordings: the same GPT-2 runs generated (traces/gen.c) and"
        print "   replayed through the allocator PyTorch used; MiB (allocations: all steps)"
        printf "%-28s %-17s %21s %21s %10s %8s %8s\n", "trace", "mode", "peak allocated", "peak reserved", "frag", "allocs", ""
        printf "%-28s %-17s %10s %10s %10s %10s %10s %8s %8s\n", "", "", "PyTorch", "generated", "PyTorch", "generated", "PT / gen", "PyTorch", "gen"
        for (i = 1; i <= ngen; i++) {
            fp = gpr[i] > 0 ? 100 * (1 - gpa[i] / gpr[i]) : 0
            fg = ggr[i] > 0 ? 100 * (1 - gga[i] / ggr[i]) : 0
            printf "%-28s %-17s %10.1f %10.1f %10.1f %10.1f %4.1f/%4.1f%% %8d %8d\n", gtr[i], gmode[i], gpa[i], gga[i], gpr[i], ggr[i], fp, fg, gna[i], gng[i]
        }
    }
}' "$here/reference.tsv" "$out/fig10.csv" "$out/fig11.csv" "$out/fig13.csv" \
    "$out/fig13_maxbatch.csv" "$out/fig14.csv" "$real" "$realgen"

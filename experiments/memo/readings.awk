# readings.awk — compares the four readings of MEMO's pinned host buffers (knob host_round:
# exact, layer_pow2, tensor_pow2, buffer_pow2) on Tables 4 and 5: Table 5's host cells (the plan's host need
# against the host each GPU has), Table 4's executor rows, and per reading the counts the main
# comparison gives (failure cells that match, MFU cells within 15 %, best method). Input:
# reference.tsv, then host_readings.tsv (reading, seq, alpha, need GiB, host GiB); -v res=
# results.tsv (the main run, buffer_pow2), -v vt=variants.tsv (host-exact, host-layer,
# host-tensor rows),
# -v t5x=FILE (Table 5 cells simulated under a reading where the main run failed: reading,
# seq, alpha, value). Used by experiments/memo/run.sh.
BEGIN { FS = "\t" }
/^#/ || NF < 4 { next }
FNR == NR { ref[$1 SUBSEP $2 SUBSEP $3] = $4; next }
{ need[$1 SUBSEP $2 SUBSEP $3] = $4; host[$1 SUBSEP $2 SUBSEP $3] = $5 }

function isnum(v) { return v ~ /^-?[0-9.]+$/ }

END {
    while ((getline l < res) > 0) {
        split(l, f, "\t")
        main[f[1] SUBSEP f[2] SUBSEP f[3]] = f[4]
    }
    while ((getline l < vt) > 0) {
        split(l, f, "\t")
        var[f[1] SUBSEP f[2] SUBSEP f[3]] = f[4]
    }
    while (t5x != "" && (getline l < t5x) > 0) {
        split(l, f, "\t")
        extra[f[1] SUBSEP f[2] SUBSEP f[3]] = f[4]
    }
    nr = split("exact layer_pow2 tensor_pow2 buffer_pow2", rd, " ")
    vname["exact"] = "host-exact"; vname["layer_pow2"] = "host-layer"
    vname["tensor_pow2"] = "host-tensor"; vname["buffer_pow2"] = "main"
    n4 = split("full-recompute full-recompute+plan full-swap+plan memo", m4, " ")
    ns = split("64K 128K 256K 384K 512K 640K 768K 896K", s4, " ")
    n5 = split("192K 256K 320K 384K", s5, " ")
    print "\nMEMO's pinned host buffers under four readings (knob host_round; default buffer_pow2)"
    print "\nTable 5: host need of (n - 2) offloaded layers, GiB (host per GPU " host["exact" SUBSEP "192K" SUBSEP "0.000"] " GiB); * = OOHM; paper's OOHM marked P"
    printf "  %-12s %-5s", "reading", "seq"
    for (a = 0; a <= 8; a++) printf " %7.3f", a / 8
    printf "\n"
    for (i = 1; i <= nr; i++)
        for (j = 1; j <= n5; j++) {
            printf "  %-12s %-5s", rd[i], s5[j]
            for (a = 0; a <= 8; a++) {
                al = sprintf("%.3f", a / 8); k = rd[i] SUBSEP s5[j] SUBSEP al
                p = ref["table5" SUBSEP s5[j] SUBSEP al]
                printf " %7s", sprintf("%.0f%s%s", need[k], need[k] > host[k] ? "*" : "", isnum(p) ? "" : "P")
            }
            printf "\n"
        }
    print "\nPer reading (Table 4 executor rows from the main run / variants host-exact, host-layer, host-tensor; Table 5 from the host need above,"
    print "MFU from the main run or, where only this reading fits, its own simulation)"
    printf "  %-12s %-22s %-20s %-20s %-16s %s\n", "reading", "failure cells match", "MFU within 15%", "best method agrees", "MEMO 384K", "full-swap+plan 256K / 384K"
    for (i = 1; i <= nr; i++) {
        r = rd[i]; st = 0; sok = 0; nn = 0; nw = 0; bw = 0; be = 0
        for (j = 1; j <= ns; j++) {
            bpv = -1; bsv = -1; bp = "-"; bs = "-"
            for (m = 1; m <= n4; m++) {
                p = ref["table4" SUBSEP m4[m] SUBSEP s4[j]]
                v = (m4[m] ~ /^(full-swap|memo)/) && r != "buffer_pow2" ? var[vname[r] SUBSEP m4[m] SUBSEP s4[j]] \
                                                                       : main["table4" SUBSEP m4[m] SUBSEP s4[j]]
                t4[r SUBSEP m4[m] SUBSEP s4[j]] = v
                tally(p, v)
                if (isnum(p)) { if (p > bpv + 0.005) { bpv = p; bp = m4[m] } else if (p >= bpv - 0.005) bp = bp "=" m4[m] }
                if (isnum(v)) { if (v > bsv + 0.005) { bsv = v; bs = m4[m] } else if (v >= bsv - 0.005) bs = bs "=" m4[m] }
            }
            if (bp == bs) be++
            if (bp == bs || index(bp, bs) || index(bs, bp)) bw++
        }
        for (j = 1; j <= n5; j++)
            for (a = 0; a <= 8; a++) {
                al = sprintf("%.3f", a / 8); k = r SUBSEP s5[j] SUBSEP al
                p = ref["table5" SUBSEP s5[j] SUBSEP al]
                mv = main["table5" SUBSEP s5[j] SUBSEP al]
                v = need[k] > host[k] ? "OOHM" : (isnum(mv) ? mv : extra[k])
                if (v == "") v = "ok"
                tally(p, v)
            }
        printf "  %-12s %-22s %-20s %-20s %-16s %s / %s\n", r, sok " of " st, nw " of " nn, be " of " ns " (" bw " with ties)", \
            t4[r SUBSEP "memo" SUBSEP "384K"], t4[r SUBSEP "full-swap+plan" SUBSEP "256K"], t4[r SUBSEP "full-swap+plan" SUBSEP "384K"]
    }
}

# Counts one cell: a status cell where either side fails, or an MFU cell where both ran.
function tally(p, v) {
    if (p == "" || v == "") return
    if (isnum(p) && isnum(v)) { nn++; if ((v - p) / p <= 0.15 && (v - p) / p >= -0.15) nw++; return }
    if (isnum(p) && v == "ok") return
    st++
    if (p == v) sok++
}

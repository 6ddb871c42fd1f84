# experiments/validate/compare.awk — the comparison step of experiments/validate/run.sh: reads
# the cases, the GPU's results (memsim run's CSV and log per case), the simulator's results
# (memsim simulate's CSV and the schedule's copies per case) and the profile's probe samples,
# and prints the validation report in Markdown (docs/VALIDATION.md's generated part).
# POSIX awk (mawk and gawk). Results CSVs are read by column name: memsim run writes the
# simulator's leading columns, then its own (traces/FORMAT.md, docs/RUNTIME.md).
#
#   awk -f compare.awk -v mode=field -v col=NAME FILE.csv     one column of the first row
#   awk -f compare.awk -v mode=calibrate OPS.csv TRACE        the trace with every op's duration
#       replaced by its measured time in the last iteration of OPS.csv (memsim run --ops-csv of
#       a real-kernel run), matched by op name
#   awk -f compare.awk -v mode=hostratio ID.log               the last iteration's real host
#       steps over their trace durations (memsim run's log; nothing when it shows none)
#   awk -f compare.awk -v mode=hostscale -v f=X TRACE         the trace with every host
#       optimizer step's duration (ops named *.optim.host) multiplied by X
#   awk -f compare.awk -v mode=report [-v dims=.. iters=.. machine=..] \
#       kind=cases cases.tsv [kind=meta meta.tsv] [kind=device device.csv] [kind=runs runs.tsv] \
#       { kind=gpu id=ID ID.csv  kind=sim id=ID ID.csv  kind=copies id=ID ID.copies \
#         [kind=log id=ID ID.log] [kind=cal id=ID ID.cal.csv] [kind=hcal id=ID ID.hcal.csv] }...
#       [kind=probe MACHINE.probe.csv]
#
# Errors are (simulated - measured) / measured. Goals: |iteration-time error| <= 5 % and
# |peak-reserved error| <= 2 % for each case and for the median over the cases.

BEGIN {
    GIB = 1073741824
    LARGE = 33554432          # memsim run's link statistics count copies of >= 32 MiB
    GOAL_T = 5; GOAL_M = 2    # percent
    FS = "\n"                 # whole lines: each kind splits its own
}

# Splits one RFC 4180 line into f[1..n]; returns n.
function csv_split(line, f,    n, i, c, q, cur, len) {
    n = 0; cur = ""; q = 0; len = length(line)
    for (i = 1; i <= len; i++) {
        c = substr(line, i, 1)
        if (q) {
            if (c == "\"") {
                if (substr(line, i + 1, 1) == "\"") { cur = cur "\""; i++ }
                else q = 0
            } else cur = cur c
        } else if (c == "\"") q = 1
        else if (c == ",") { f[++n] = cur; cur = "" }
        else cur = cur c
    }
    f[++n] = cur
    return n
}

function trim(s) { gsub(/^[ \t\r]+|[ \t\r]+$/, "", s); return s }
function absv(x) { return x < 0 ? -x : x }
function err(sim, gpu) { return (sim - gpu) / gpu * 100 }
function pct(x) { return sprintf("%+.2f %%", x) }
function gib(b) { return sprintf("%.3f", b / GIB) }
# Prints c[1..n] joined by single spaces (a trace line with a field replaced).
function print_fields(c, n,    line, k) {
    line = c[1]
    for (k = 2; k <= n; k++) line = line " " c[k]
    print line
}
# A results CSV (memsim's columns by name): its header on line 1, the result on line 2, kept as
# A[id, column]; returns 1 on the result line.
function result_row(A,    v, i) {
    if (FNR == 1) { nh = csv_split($0, hd); return 0 }
    if (FNR != 2) return 0
    csv_split($0, v)
    for (i = 1; i <= nh; i++) A[id, hd[i]] = v[i]
    return 1
}

# ---- field mode ----
mode == "field" {
    if (FNR == 1) { nh = csv_split($0, hd); for (i = 1; i <= nh; i++) col_at[hd[i]] = i; next }
    if (FNR == 2) { csv_split($0, v); if (col in col_at) print v[col_at[col]]; exit }
    next
}

# ---- calibrate mode ----
mode == "calibrate" && FNR == NR {
    if (FNR == 1) next
    split($0, c, ",")
    if (c[3] == "zero_grad") { nz++; for (k in meas) delete meas[k] }
    if (c[4] == "0") meas[c[3]] = c[6]     # forward, backward and optimizer ops, not replays
    next
}
mode == "calibrate" {
    # the durations below are the GPU's, at the clock it held: no power model on top of them
    if (FNR == 1) { print; print "meta op_times measured"; next }
    n = split($0, c, " ")
    if (c[1] == "op" && n >= 12 && (c[n] in meas)) {
        c[9] = meas[c[n]]
        print_fields(c, n)
    } else print
    next
}

# ---- hostratio and hostscale modes ----
mode == "hostratio" {
    n = split($0, c, " ")
    if (c[1] == "iter" && n >= 13 && c[13] + 0 > 0) r = (c[12] + 0) / (c[13] + 0)
    next
}
mode == "hostscale" {
    n = split($0, c, " ")
    if (c[1] == "op" && n >= 12 && c[n] ~ /[.]optim[.]host$/) {
        c[9] = sprintf("%.17g", c[9] * f)
        print_fields(c, n)
    } else print
    next
}

# ---- report mode: inputs ----
kind == "cases" {
    if ($0 ~ /^#/ || $0 ~ /^[ \t]*$/) next
    split($0, c, "\t")
    if (c[1] == "id") next
    ncase++; ids[ncase] = c[1]; pol[c[1]] = c[2]; seqs[c[1]] = c[3]; alc[c[1]] = c[4]
    planhow[c[1]] = c[5]; role[c[1]] = c[6]; math[c[1]] = c[7]
    next
}
kind == "meta" { split($0, c, "\t"); meta[c[1]] = c[2]; next }
kind == "machine" { split($0, c, " "); if (c[1] == "link.h2d_Bps") prof_h2d = c[2] + 0; if (c[1] == "link.d2h_Bps") prof_d2h = c[2] + 0; next }
kind == "same" { split($0, c, "\t"); same[c[1]] = c[2]; next }
kind == "device" {
    if (FNR == 2) { split($0, c, ","); dev_name = trim(c[1]); dev_driver = trim(c[2])
        dev_mem = trim(c[3]); dev_gen = trim(c[4]); dev_width = trim(c[5]); dev_clock = trim(c[6]) }
    next
}
kind == "runs" { if (FNR > 1) { split($0, c, "\t"); rc[c[1]] = c[2]; wall[c[1]] = c[3]; runhow[c[1]] = c[4]; wall_all += c[3] } next }
kind == "gpu" { if (result_row(G)) hasg[id] = 1; next }
kind == "sim" { if (result_row(S)) hass[id] = 1; next }
kind == "copies" {
    split($0, c, " ")
    if (c[2] + 0 >= LARGE) {
        d = (c[1] == "copy_h2d") ? "h2d" : "d2h"
        key = id SUBSEP d SUBSEP c[2]
        if (!(key in ncp)) { nsz[id, d]++; szat[id, d, nsz[id, d]] = c[2] }
        ncp[key]++
    }
    next
}
kind == "log" {
    if ($0 ~ /^iter [0-9]+ /) {
        split($0, c, " "); nit[id]++; itms[id, nit[id]] = c[3] + 0
        # the real host steps' wall time and their trace durations (ms; the last iteration's)
        if (12 in c) { hstg[id] = c[12] / 1000; hstn[id] = c[13] / 1000 }
    }
    else if ($0 ~ /^device: /) { logdev = $0 }
    else if ($0 ~ /^spin kernel: /) { calib[id] = $0 }
    else if ($0 ~ /^  (H2D|D2H): [0-9]+ copies/) {
        d = ($0 ~ /^  H2D/) ? "h2d" : "d2h"
        if (match($0, /median [0-9.]+/)) lmed[id, d] = substr($0, RSTART + 7, RLENGTH - 7) * 1e9
        if (match($0, /min [0-9.]+/)) lmin[id, d] = substr($0, RSTART + 4, RLENGTH - 4) * 1e9
        if (match($0, /: [0-9]+ copies/)) lcnt[id, d] = substr($0, RSTART + 2, RLENGTH - 9) + 0
    }
    next
}
kind == "ops" {
    # action,op,name,recompute,asked_us,measured_us over all iterations: the last iteration
    # starts at the last zero_grad.
    if (FNR == 1) next
    split($0, c, ",")
    if (c[3] == "zero_grad") { hasops[id] = 1 }
    nm_ = c[3]; sub(/^L[0-9]+\./, "", nm_)
    if (c[4] == "1") nm_ = nm_ " (recompute)"
    if (!((id, nm_) in opask)) { nop[id]++; opname[id, nop[id]] = nm_ }
    if (c[3] == "zero_grad") for (k = 1; k <= nop[id]; k++) { opask[id, opname[id, k]] = 0; opmeas[id, opname[id, k]] = 0; opcnt[id, opname[id, k]] = 0 }
    opask[id, nm_] += c[5]; opmeas[id, nm_] += c[6]; opcnt[id, nm_]++
    next
}
kind == "cal" { if (result_row(C)) hasc[id] = 1; next }
kind == "hcal" { if (result_row(H)) hash_[id] = 1; next }
kind == "probe" {
    split($0, c, ",")
    if (c[1] == "h2d_pinned_us" || c[1] == "d2h_pinned_us") {
        d = substr(c[1], 1, 3); np[d]++; psz[d, np[d]] = c[2] + 0; pus[d, np[d]] = c[3] + 0
    }
    next
}

# ---- report mode: helpers ----

# Probe time (us) of one pinned copy of b bytes in direction d: linear in the size between the
# two nearest probed sizes (latency + bytes / rate), extended by the largest two beyond them.
function probe_us(d, b,    i, j) {
    if (np[d] < 2) return -1
    for (i = 1; i < np[d] - 1 && psz[d, i + 1] < b; i++) ;
    j = i + 1
    return pus[d, i] + (b - psz[d, i]) * (pus[d, j] - pus[d, i]) / (psz[d, j] - psz[d, i])
}

# Probe rate (B/s) of the case's large copies in direction d: their bytes over the sum of the
# probe's times for their sizes. Sets probe_bytes and probe_n.
function probe_rate(idc, d,    k, s, n, t, u) {
    probe_bytes = 0; probe_n = 0; t = 0
    for (k = 1; k <= nsz[idc, d]; k++) {
        s = szat[idc, d, k]; n = ncp[idc, d, s]; u = probe_us(d, s)
        if (u <= 0) return -1
        probe_bytes += n * s; probe_n += n; t += n * u
    }
    return t > 0 ? probe_bytes / (t * 1e-6) : -1
}

function sort_num(a, n,    i, j, x) {
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
}
function median(a, n) {
    if (n == 0) return -1
    sort_num(a, n)
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}

# Spread of the measured iterations after the first (the first makes the allocator's segments):
# (max - min) / last.
function spread(idc,    k, lo, hi) {
    if (nit[idc] < 3) return ""
    lo = hi = itms[idc, 2]
    for (k = 3; k <= nit[idc]; k++) { if (itms[idc, k] < lo) lo = itms[idc, k]; if (itms[idc, k] > hi) hi = itms[idc, k] }
    return sprintf("%.2f %%", (hi - lo) / itms[idc, nit[idc]] * 100)
}

# DHA schedules (MemFerry, GO-MemFerry): the simulator's busy time of a direction counts the
# link's DHA traffic too, the runtime's only its copies' events: shown, not compared.
function has_dha(idc) { return pol[idc] ~ /memferry/ }

function busy_cell(idc, col,    g, s) {
    g = G[idc, col] + 0; s = S[idc, col] + 0
    if (g == 0 && s == 0) return "0 | 0 | —"
    if (has_dha(idc)) return sprintf("%.4f | %.4f ᵈ | —", g, s)
    if (g == 0) return sprintf("0 | %.4f | —", s)
    return sprintf("%.4f | %.4f | %s", g, s, pct(err(s, g)))
}

# A real-kernel case whose log shows real host steps (host-offload schedules).
function host_steps(idc) { return math[idc] == "real" && hstg[idc] > 0 && hstn[idc] > 0 }

function allocname(idc) { return G[idc, "allocator"] != "" ? G[idc, "allocator"] : alc[idc] }

# ---- report mode: output ----
END {
    if (mode == "hostratio" && r > 0) printf "%.9g\n", r
    if (mode != "report") exit
    dt = meta["date"] != "" ? meta["date"] : "unknown date"
    dn = dev_name
    for (k = 1; k <= ncase && dn == ""; k++) if (hasg[ids[k]]) dn = G[ids[k], "device"]
    if (dn == "") dn = "unknown device"
    print "### Run"
    print ""
    printf "- GPU run: %s on one %s", dt, dn
    if (dev_mem != "") printf " (%s", dev_mem
    if (dev_driver != "") printf ", driver %s", dev_driver
    if (dev_gen != "") printf ", PCIe Gen%s x%s", dev_gen, dev_width
    if (dev_mem != "") printf ")"
    if (meta["kernel"] != "") printf ", Linux %s", meta["kernel"]
    print ""
    if (logdev != "") { sub(/^device: /, "", logdev); sub(/driver /, "CUDA driver API ", logdev); print "- runtime's view: " logdev }
    printf "- profile: `traces/machines/%s.machine` (the GPU run's copy); simulator: `memsim simulate`, same options and plan files%s\n", machine, simopts != "" ? ", and `" simopts "` (the host issue model with the runtime's bound)" : " (stream-time allocator calls)"
    nsp = nre_ = 0
    for (k = 1; k <= ncase; k++) if (hasg[ids[k]]) { if (math[ids[k]] == "real") nre_++; else nsp++ }
    printf "- workload: `--dims %s`, micro-batch 1, `--iters %s` (the last iteration reported); runtime: `memsim run --max-ahead %s --capacity machine`\n",
        dims, iters, meta["max_ahead"] != "" ? meta["max_ahead"] : 8
    printf "- compute: %d cases with spin kernels of the modelled durations (they test everything but the op-time model), %d with the real kernels (`--math real`, on a trace with fp32 gradients and the small saved tensors, which the simulator reads too)\n", nsp, nre_
    nsame = ndiff = 0; difl = ""
    for (k = 1; k <= ncase; k++) {
        i = ids[k]
        if (same[i] == "yes") nsame++
        else if (same[i] == "no") { ndiff++; difl = difl " " i; miss[++nmiss] = i ": the simulator's schedule differs from the GPU's (rebuilt code between the runs?)" }
    }
    if (nsame + ndiff) printf "- schedules: the simulator executed the very schedule the GPU executed (dumps identical) in %d of %d cases%s\n", nsame, nsame + ndiff, ndiff ? "; different:" difl : ""
    if (meta["run_opts"] != "") printf "- extra runtime options: `%s`\n", meta["run_opts"]
    if (wall_all > 0) printf "- wall time of the GPU runs: %d s for %d cases (each: start, pinned pool, calibration, %s iterations)\n", wall_all, ncase, iters
    print ""

    # Time table.
    print "### Iteration time and host-link busy time (last iteration)"
    print ""
    print "| case | policy | allocator | seq | compute | status GPU / sim | schedule compute (s) | GPU (s) | sim (s) | error | GPU spread | H2D busy GPU (s) | sim (s) | error | D2H busy GPU (s) | sim (s) | error |"
    print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    nt = nm = nh2 = nd2 = 0
    for (k = 1; k <= ncase; k++) {
        i = ids[k]
        if (!hasg[i] || !hass[i]) {
            printf "| %s | %s | %s | %s | %s | %s | | | | | | | | | | | |\n", i, pol[i], alc[i], seqs[i], math[i],
                (hasg[i] ? G[i, "status"] : (i in rc ? "no result (rc " rc[i] ")" : "not run")) " / " (hass[i] ? S[i, "status"] : "not simulated")
            miss[++nmiss] = i ": no result on " (hasg[i] ? "the simulator" : "the GPU") (i in rc ? " (memsim run exit " rc[i] ")" : "")
            continue
        }
        gs = G[i, "status"]; ss = S[i, "status"]
        both = (gs == "ok" && ss == "ok")
        nomc = (G[i, "nominal_iter_s"] + 0 > 0) ? sprintf("%.4f", G[i, "nominal_iter_s"]) : ""
        line = sprintf("| %s | %s | %s | %s | %s | %s / %s | %s |", i, pol[i], allocname(i), seqs[i], math[i], gs, ss, nomc)
        if (both) {
            g = G[i, "iter_time_s"] + 0; s = S[i, "iter_time_s"] + 0; e = err(s, g)
            te[i] = e
            if (math[i] == "real") etr[++ntr] = absv(e); else et[++nt] = absv(e)
            line = line sprintf(" %.4f | %.4f | %s | %s |", g, s, pct(e), spread(i))
            line = line " " busy_cell(i, "h2d_busy_s") " | " busy_cell(i, "d2h_busy_s") " |"
            if (G[i, "h2d_busy_s"] > 0 && !has_dha(i)) eh2[++nh2] = absv(err(S[i, "h2d_busy_s"], G[i, "h2d_busy_s"]))
            if (G[i, "d2h_busy_s"] > 0 && !has_dha(i)) ed2[++nd2] = absv(err(S[i, "d2h_busy_s"], G[i, "d2h_busy_s"]))
            if (has_dha(i)) ndha++
        } else {
            line = line " | | | | | | | | | |"
            if (gs != ss) miss[++nmiss] = i ": status " gs " on the GPU, " ss " in the simulator"
        }
        print line
    }
    print ""
    print "Schedule compute: the sum of the schedule's compute durations (the op-time model's prediction"
    print "of compute alone). GPU spread: (max - min) / last over the measured iterations after the first."
    if (ndha) {
        print "ᵈ A DHA schedule: the simulator's busy time counts the kernels' host reads and writes on the"
        print "link as well as the copies; the runtime times the copies only. Not compared (not in the medians)."
    }
    print ""

    # Host steps of real-kernel host-offload cases: the step the probe times, on the critical
    # path of these schedules, so the first place to look when their iteration misses.
    nhs = 0
    for (k = 1; k <= ncase; k++) if (host_steps(ids[k])) nhs++
    if (nhs) {
        print "### Host optimizer steps (real kernels, last iteration)"
        print ""
        print "| case | host steps GPU (s) | trace (s) | GPU / trace | iteration GPU (s) | sim (s) | error | sim at the run's host rate (s) | error |"
        print "|---|---|---|---|---|---|---|---|---|"
        nhc = 0
        for (k = 1; k <= ncase; k++) {
            i = ids[k]
            if (!host_steps(i)) continue
            g = G[i, "iter_time_s"] + 0; s0 = S[i, "iter_time_s"] + 0
            printf "| %s | %.3f | %.3f | %.2f | %.4f | %.4f | %s |", i, hstg[i], hstn[i],
                hstg[i] / hstn[i], g, s0, (g > 0 ? pct(err(s0, g)) : "—")
            if (hash_[i] && H[i, "status"] == "ok" && g > 0) {
                s1 = H[i, "iter_time_s"] + 0
                printf " %.4f | %s |\n", s1, pct(err(s1, g))
                hce[++nhc] = absv(err(s1, g)); hc0[nhc] = absv(err(s0, g))
            } else printf " — | |\n"
        }
        print ""
        print "The trace times each host AdamW step at the profile's `rt.host_adam_params_per_s` (`memsim"
        print "probe --host-adam`, which also records its slowest and fastest pass in the raw CSV)."
        print "\"At the run's host rate\": the same plan simulated once more on the trace with every host step"
        print "scaled by the run's GPU / trace ratio (its last iteration), which separates the host's speed"
        print "on the day from the rest of the model."
        if (nhc) printf "Median |error| over these %d cases: %.2f %% as predicted, %.2f %% at the run's host rate.\n", nhc, median(hc0, nhc), median(hce, nhc)
        print ""
    }

    # Memory table.
    print "### Memory (whole run)"
    print ""
    print "| case | peak reserved GPU (GiB) | sim (GiB) | error | peak allocated GPU (GiB) | sim (GiB) | error | fragmentation GPU / sim | host peak GPU / sim (GiB) | goals (time ≤ 5 %, reserved ≤ 2 %) |"
    print "|---|---|---|---|---|---|---|---|---|---|"
    for (k = 1; k <= ncase; k++) {
        i = ids[k]
        if (!hasg[i] || !hass[i]) continue
        if (G[i, "status"] != S[i, "status"]) {
            printf "| %s | — | — | | — | — | | | | status differs (above) |\n", i
            continue
        }
        gr = G[i, "peak_reserved_bytes"] + 0; sr = S[i, "peak_reserved_bytes"] + 0
        ga = G[i, "peak_allocated_bytes"] + 0; sa = S[i, "peak_allocated_bytes"] + 0
        er = gr > 0 ? err(sr, gr) : 0; ea = ga > 0 ? err(sa, ga) : 0
        ok = 1; why = ""
        if (G[i, "status"] == "ok" && S[i, "status"] == "ok") {
            if (absv(te[i]) > GOAL_T) { ok = 0; why = why sprintf(" iteration %s;", pct(te[i])) }
            if (math[i] == "real") emr[++nmr] = absv(er); else em[++nm] = absv(er)
        }
        if (absv(er) > GOAL_M) { ok = 0; why = why sprintf(" reserved %s;", pct(er)) }
        if (!ok) { sub(/;$/, "", why); miss[++nmiss] = i ":" why }
        printf "| %s | %s | %s | %s | %s | %s | %s | %.2f %% / %.2f %% | %s / %s | %s |\n", i, gib(gr), gib(sr), pct(er),
            gib(ga), gib(sa), pct(ea), 100 * G[i, "fragmentation"], 100 * S[i, "fragmentation"],
            gib(G[i, "host_peak_bytes"]), gib(S[i, "host_peak_bytes"]), ok ? "met" : "**missed**"
    }
    print ""

    # What the peak holds, by kind (planners/blockmix.h; both CSVs carry peak_<kind>_bytes from
    # 2026-11-28 on): equal kind by kind, or the largest difference.
    nk = split("params grads optstates chunks act_skel act_trans workspace rbuf idle staging other", kk, " ")
    nkc = 0; nke = 0
    for (k = 1; k <= ncase; k++) {
        i = ids[k]
        if (!hasg[i] || !hass[i] || G[i, "peak_params_bytes"] == "" || S[i, "peak_params_bytes"] == "") continue
        if (!nkc++) {
            print "### What the peak holds, by kind"
            print ""
            print "The device bytes live at the peak (requested bytes; at the failing request for an oom), by"
            print "kind, as the runtime and the simulator count them with the same code."
            print ""
            print "| case | GPU total (GiB) | sim total (GiB) | kinds equal to the byte | largest difference |"
            print "|---|---|---|---|---|"
        }
        gt = 0; st = 0; keq = 0; dmax = -1; dk = ""
        for (q = 1; q <= nk; q++) {
            col = "peak_" kk[q] "_bytes"
            gv = G[i, col] + 0; sv = S[i, col] + 0
            gt += gv; st += sv; keq += (gv == sv)
            d = absv(gv - sv); if (d > dmax) { dmax = d; dk = kk[q] }
        }
        nke += (keq == nk)
        printf "| %s | %s | %s | %d of %d | %s |\n", i, gib(gt), gib(st), keq, nk,
            (dmax > 0 ? sprintf("%s: %.3f GiB", dk, dmax / 1073741824) : "none")
    }
    if (nkc) { printf "\n%d of %d cases hold the same bytes of every kind.\n\n", nke, nkc }

    # Real kernels: the simulator with measured op times.
    ncal = 0
    for (k = 1; k <= ncase; k++) {
        i = ids[k]
        if (!hasc[i] || !hasg[i] || G[i, "status"] != "ok" || C[i, "status"] != "ok") continue
        if (!ncal++) {
            print "### Real kernels: the simulator with measured op times"
            print ""
            print "The same real-kernel cases simulated once more on their trace with every op's duration"
            print "replaced by the time it took in the last iteration of the keep-all real-kernel run of the"
            print "same length (`--ops-csv`; recomputed ops take their forward op's time): what is left is"
            print "the error of everything but the op-time model, on policies other than the one measured."
            print ""
            print "| case | GPU (s) | sim, roofline op times (s) | error | sim, measured op times (s) | error | peak reserved GPU (GiB) | sim, measured op times (GiB) | error |"
            print "|---|---|---|---|---|---|---|---|---|"
        }
        g = G[i, "iter_time_s"] + 0; s0 = S[i, "iter_time_s"] + 0; s1 = C[i, "iter_time_s"] + 0
        gr = G[i, "peak_reserved_bytes"] + 0; cr = C[i, "peak_reserved_bytes"] + 0
        ec = err(s1, g); src = (pol[i] == "keep-all")
        if (!src) { ecal[++necal] = absv(ec); if (gr > 0) ecalm[++necalm] = absv(err(cr, gr)) }
        printf "| %s%s | %.4f | %.4f | %s | %.4f | %s | %s | %s | %s |\n", i, (src ? " (source)" : ""), g, s0, pct(err(s0, g)), s1, pct(ec),
            gib(gr), gib(cr), (gr > 0 ? pct(err(cr, gr)) : "—")
    }
    if (ncal) print "\n(source): the case whose op times are used, so its row checks only the replay itself; the\nmedians below leave these rows out.\n"

    # Real kernels: the op-time model per op, one column group per keep-all real-kernel case.
    nkc = 0
    for (k = 1; k <= ncase; k++) if (hasops[ids[k]] && pol[ids[k]] == "keep-all") kc[++nkc] = ids[k]
    if (nkc) {
        print "### Real kernels: the op-time model per op (last iteration)"
        print ""
        print "Every compute action of the keep-all real-kernel cases timed with events (`memsim run"
        print "--math real --ops-csv`), summed per op name over the layers, against the schedule's"
        print "modelled durations (traces/roofline.h on the profile); ratio = measured / modelled."
        print ""
        hdr = "| op | count"; sep = "|---|---"
        for (q = 1; q <= nkc; q++) { hdr = hdr " | " seqs[kc[q]] " modelled (ms) | measured (ms) | ratio"; sep = sep "|---|---|---" }
        print hdr " |"; print sep "|"
        i0 = kc[1]
        for (j = 1; j <= nop[i0]; j++) {
            o = opname[i0, j]; line = sprintf("| %s | %d", o, opcnt[i0, o])
            for (q = 1; q <= nkc; q++) {
                i = kc[q]; a_ = opask[i, o]; m_ = opmeas[i, o]
                line = line sprintf(" | %.3f | %.3f | %s", a_ / 1000, m_ / 1000, (a_ > 0 ? sprintf("%.2f", m_ / a_) : "—"))
            }
            print line " |"
        }
        line = "| **all** |"
        for (q = 1; q <= nkc; q++) {
            i = kc[q]; ta = tmeas = 0
            for (j = 1; j <= nop[i]; j++) { ta += opask[i, opname[i, j]]; tmeas += opmeas[i, opname[i, j]] }
            line = line sprintf(" | %.2f | %.2f | %.2f", ta / 1000, tmeas / 1000, (ta > 0 ? tmeas / ta : 0))
        }
        print line " |"
        print ""
    }

    # Medians.
    mt = median(et, nt); mr = median(em, nm); mh = median(eh2, nh2); md = median(ed2, nd2)
    print "### Median errors"
    print ""
    print "| quantity | cases | median \\|error\\| | goal | |"
    print "|---|---|---|---|---|"
    printf "| iteration time, spin kernels | %d | %.2f %% | ≤ %d %% | %s |\n", nt, mt, GOAL_T, (nt && mt <= GOAL_T) ? "met" : "**missed**"
    printf "| peak reserved bytes, spin kernels | %d | %.2f %% | ≤ %d %% | %s |\n", nm, mr, GOAL_M, (nm && mr <= GOAL_M) ? "met" : "**missed**"
    if (ntr) { x = median(etr, ntr); printf "| iteration time, real kernels | %d | %.2f %% | ≤ %d %% | %s |\n", ntr, x, GOAL_T, (x <= GOAL_T) ? "met" : "**missed**" }
    if (nmr) { x = median(emr, nmr); printf "| peak reserved bytes, real kernels | %d | %.2f %% | ≤ %d %% | %s |\n", nmr, x, GOAL_M, (x <= GOAL_M) ? "met" : "**missed**" }
    if (necal) { x = median(ecal, necal); printf "| iteration time, real kernels, simulated with measured op times (other policies) | %d | %.2f %% | ≤ %d %% | %s |\n", necal, x, GOAL_T, (x <= GOAL_T) ? "met" : "**missed**" }
    if (necalm) { x = median(ecalm, necalm); printf "| peak reserved bytes, real kernels, simulated with measured op times (other policies) | %d | %.2f %% | ≤ %d %% | %s |\n", necalm, x, GOAL_M, (x <= GOAL_M) ? "met" : "**missed**" }
    if (nh2) printf "| H2D busy time (cases with copies) | %d | %.2f %% | — | |\n", nh2, mh
    if (nd2) printf "| D2H busy time (cases with copies) | %d | %.2f %% | — | |\n", nd2, md
    print ""

    # Host-link benchmark.
    print "### Host link under a swap schedule"
    print ""
    print "Copies of at least 32 MiB over all iterations, measured by `memsim run` (bytes over the"
    print "event-timed copy durations) against the probe's pinned-copy times for the same sizes"
    print "(`" machine ".probe.csv`, interpolated). Goal: at least 90 %."
    print ""
    print "| case | direction | copies | GiB | measured GB/s | median copy GB/s | slowest copy GB/s | probe GB/s at these sizes | measured / probe | ≥ 90 % | measured / profile's link rate |"
    print "|---|---|---|---|---|---|---|---|---|---|---|"
    nl = 0
    for (k = 1; k <= ncase; k++) {
        i = ids[k]
        if (!hasg[i]) continue
        for (dd = 1; dd <= 2; dd++) {
            d = dd == 1 ? "h2d" : "d2h"
            mB = G[i, d "_large_Bps"] + 0
            if (mB <= 0) continue
            pB = probe_rate(i, d)
            r = pB > 0 ? mB / pB * 100 : -1
            nl++
            ncop = ((i, d) in lcnt) ? lcnt[i, d] : probe_n
            cmed = ((i, d) in lmed) ? sprintf("%.2f", lmed[i, d] / 1e9) : ""
            cmin = ((i, d) in lmin) ? sprintf("%.2f", lmin[i, d] / 1e9) : ""
            plink = (d == "h2d") ? prof_h2d : prof_d2h
            printf "| %s | %s | %d | %.2f | %.2f | %s | %s | %s | %s | %s | %s |\n", i, toupper(d),
                ncop, probe_bytes / GIB, mB / 1e9, cmed, cmin,
                (pB > 0 ? sprintf("%.2f", pB / 1e9) : "no probe"), (r >= 0 ? sprintf("%.1f %%", r) : ""),
                (r >= 90 ? "met" : (r >= 0 ? "**missed**" : "")),
                (plink > 0 ? sprintf("%.1f %% of %.2f GB/s", mB / plink * 100, plink / 1e9) : "")
            if (r >= 0 && r < 90) miss[++nmiss] = i ": host link " toupper(d) sprintf(" %.1f %%", r) " of the probe"
        }
    }
    if (!nl) print "| (no case moved copies of 32 MiB or more) | | | | | | | | | | |"
    print ""

    print "### Cases that miss a goal"
    print ""
    if (!nmiss) print "None."
    for (k = 1; k <= nmiss; k++) print "- " miss[k]
}

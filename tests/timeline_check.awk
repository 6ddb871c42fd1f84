# tests/timeline_check.awk — checks a memsim Chrome-trace timeline (one event per line, as
# sim/timeline.c writes it): every "X" slice's ts and dur are microseconds with exactly three
# decimals (whole nanoseconds), and no two slices on one (pid, tid) track overlap. Prints one
# line per problem and, at the end, "processes:" with each process_name; exits 1 on a problem.
function field(s, key,    m) {
    if (match(s, "\"" key "\":[^,}]*")) { m = substr(s, RSTART + length(key) + 3, RLENGTH - length(key) - 3); return m }
    return ""
}
function ns(v,    a) {
    if (v !~ /^[0-9]+\.[0-9][0-9][0-9]$/) { print "line " NR ": not whole nanoseconds: " v; bad = 1; return 0 }
    split(v, a, "."); return a[1] * 1000 + a[2]
}
/"ph":"M"/ && /"name":"process_name"/ {
    if (match($0, /"args":\{"name":"[^"]*"/)) names = names " " substr($0, RSTART + 16, RLENGTH - 17)
}
/"ph":"X"/ {
    k = field($0, "pid") "/" field($0, "tid")
    s = ns(field($0, "ts")); e = s + ns(field($0, "dur"))
    if ((k in end) && s < end[k]) {
        print "line " NR ": slice on track " k " starts at " s " ns, before the previous one ends (" end[k] " ns)"; bad = 1
    }
    if (!(k in end) || e > end[k]) end[k] = e
    slices++
}
END { print "processes:" names; print "slices: " slices + 0; exit bad }

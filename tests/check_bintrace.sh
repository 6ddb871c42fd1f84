#!/bin/sh
# tests/check_bintrace.sh — the workload trace's binary form through the memsim command, on
# every trace the repository holds (experiments/validate/traces, experiments/capture/results*): text ->
# binary -> text byte for byte, the same `trace stats`, `replay` (three allocators) and
# `simulate` from both forms, and the command's refusals of damaged binary files as
# "FILE: record N: problem" with exit 3. TAP output.
M=${MEMSIM:-./sim/memsim}
[ -x "$M" ] || { echo "1..0 # SKIP memsim not built"; exit 0; }
cd "${srcdir:-.}" || exit 99
T=$(mktemp -d /tmp/memsim-bintrace-XXXXXX) || exit 99
trap 'rm -rf "$T"' EXIT
n=0; bad=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; bad=1; fi; }
expect() {
    want=$1; desc=$2; shift 3
    "$@" >"$T/out" 2>"$T/err"; got=$?
    [ "$got" = "$want" ]; r=$?
    [ $r = 0 ] || echo "#   exit $got, wanted $want: $(head -c 300 "$T/err")"
    ok $r "$desc"
}
# the command's output with the trace's own name taken out
same_output() { sed "s|$1|TRACE|g" "$2"; }

fixtures=$(ls experiments/validate/traces/*/*.trace.gz experiments/capture/results/*.trace.gz experiments/capture/results_kernels/*.trace.gz experiments/capture/results_host/*.trace.gz 2>/dev/null | grep -v '\.c[0-9]*\.trace\.gz$')
count=$(echo "$fixtures" | grep -c .)
[ "$count" -ge 10 ]; ok $? "the repository's traces are found ($count)"
rt=0; stats=0; rep=0; fails=""; canonical=0
for f in $fixtures; do
    b="$T/x.btrace"
    # the binary form gives back the text writer's own spelling of the trace, which is the
    # file itself where the file was written by memsim (Python's capture writes host_us=0
    # where memsim leaves it out, and its host times in Python's spelling)
    "$M" trace convert "$f" "$T/canon.trace" --to text 2>/dev/null &&
        "$M" trace convert "$f" "$b" --to binary 2>/dev/null &&
        "$M" trace convert "$b" "$T/x.trace" --to text 2>/dev/null &&
        cmp -s "$T/canon.trace" "$T/x.trace" || { rt=1; fails="$fails rt:$f"; }
    gzip -dc "$f" | cmp -s - "$T/x.trace" && canonical=$((canonical + 1))
    case $f in experiments/capture/results_host/*|experiments/capture/results/*) ;; *)
        gzip -dc "$f" | cmp -s - "$T/x.trace" || { rt=1; fails="$fails verbatim:$f"; } ;;
    esac
    "$M" trace stats "$f" > "$T/s1" 2>&1; "$M" trace stats "$b" > "$T/s2" 2>&1
    [ "$(same_output "$f" "$T/s1")" = "$(same_output "$b" "$T/s2")" ] || { stats=1; fails="$fails stats:$f"; }
    "$M" replay --trace "$f" --allocator caching,stitching,expandable > "$T/r1" 2>&1
    "$M" replay --trace "$b" --allocator caching,stitching,expandable > "$T/r2" 2>&1
    [ "$(same_output "$f" "$T/r1")" = "$(same_output "$b" "$T/r2")" ] || { rep=1; fails="$fails replay:$f"; }
done
[ -n "$fails" ] && echo "#  differ:$fails"
ok $rt "each repository trace: text -> binary -> text is byte-identical ($canonical of $count verbatim, the rest equal to the text writer's own rewrite)"
ok $stats "each repository trace: trace stats the same from both forms"
ok $rep "each repository trace: replay through caching, stitching and expandable the same from both forms"
for f in experiments/validate/traces/h100-sxm/real-8K.trace.gz experiments/validate/traces/h200-sxm/offload-8K.trace.gz; do
    m=$(echo "$f" | sed 's|.*/traces/\([^/]*\)/.*|\1|')
    "$M" trace convert "$f" "$T/y.btrace" --to binary 2>/dev/null
    "$M" compare --trace "$f" --machine "$m" --policies keep-all,full-recompute,full-swap > "$T/a" 2>&1; s1=$?
    "$M" compare --trace "$T/y.btrace" --machine "$m" --policies keep-all,full-recompute,full-swap > "$T/b" 2>&1; s2=$?
    [ "$s1" = 0 ] && [ "$s2" = 0 ] && [ "$(same_output "$f" "$T/a")" = "$(same_output "$T/y.btrace" "$T/b")" ]
    ok $? "compare (keep-all, full-recompute, full-swap) of $(basename "$f") the same from both forms"
done
# the form is told by the first bytes, not by the name
cp "$T/y.btrace" "$T/named.trace.gz"
expect 0 "a binary trace named .trace.gz is read as binary" -- "$M" trace check "$T/named.trace.gz"
gzip -c "$T/y.btrace" > "$T/y.btrace.gz"
expect 0 "a gzip-compressed binary trace is read" -- "$M" replay --trace "$T/y.btrace.gz"

# damaged files: FILE: record N: problem, exit 3
sz=$(wc -c < "$T/y.btrace")
head -c $((sz - 4)) "$T/y.btrace" > "$T/cut.btrace"
expect 3 "a cut binary trace: exit 3" -- "$M" replay --trace "$T/cut.btrace"
grep -q "^memsim replay: $T/cut.btrace: record [0-9]*: truncated" "$T/err"; ok $? "... named FILE: record N: truncated"
expect 3 "trace check of a cut binary trace: exit 3" -- "$M" trace check "$T/cut.btrace"
{ printf '\211MSTR\r\n\032\002\000'; tail -c +11 "$T/y.btrace"; } > "$T/v2.btrace"
expect 3 "a newer major version: exit 3" -- "$M" trace stats "$T/v2.btrace"
grep -q "version 2.0 is newer than this reader" "$T/err"; ok $? "... says the version"
{ printf '\211MSTX'; tail -c +6 "$T/y.btrace"; } > "$T/magic.btrace"
expect 3 "a damaged magic: exit 3" -- "$M" simulate --trace "$T/magic.btrace"
grep -q "bad magic" "$T/err"; ok $? "... says bad magic"
expect 3 "convert of a damaged file: exit 3" -- "$M" trace convert "$T/cut.btrace" "$T/out.trace" --to text
[ ! -e "$T/out.trace" ]; ok $? "... and writes no output"
expect 2 "convert --to bogus: exit 2" -- "$M" trace convert "$T/y.btrace" "$T/o" --to bogus
expect 2 "convert without --to: exit 2" -- "$M" trace convert "$T/y.btrace" "$T/o"
expect 0 "convert --help" -- "$M" trace convert --help
echo "1..$n"
exit $bad

#!/bin/sh
# tests/check_layers.sh — enforces the include rule of docs/ARCHITECTURE.md: includes point only
# down (experiments -> sim, runtime -> planners, whose family folders include its contracts ->
# memory, traces -> base); sim/ and runtime/ never include each other, nor memory/ and traces/;
# the experiments' C code (the paper drivers) includes sim/ and below, never runtime/; a family
# folder of planners/ never includes another's (but for MEMO's memory-plan pass); no include
# cycle between source files; no source file over 1,500 lines but the generator and the kernels.
# One TAP test per folder, one for the opening comments, one for the cycle walk on a planted
# cycle, one for the length check on a planted file, one for the lengths of the tree, one for
# the cycles of the tree.
cd "${srcdir:-.}" || exit 99
n=0; bad=0
# the planners/ family folders, one per policy family
families=$(for d in planners/*/; do [ -d "$d" ] && basename "$d"; done)
check() { # folder, forbidden-pattern[, allowed header]
    n=$((n + 1))
    hits=$(grep -nE "#[[:space:]]*include[[:space:]]*\"($2)/" "$1"/*.[ch] "$1"/*.cu 2>/dev/null |
        grep -vF "\"${3:-/}\"")
    if [ -n "$hits" ]; then
        echo "not ok $n - $1/ includes only what lies below it"
        echo "$hits" | sed 's/^/#   /'
        bad=1
    else
        echo "ok $n - $1/ includes only what lies below it"
    fi
}
check base 'traces|memory|planners|sim|runtime|experiments|plots'
check traces 'memory|planners|sim|runtime|experiments|plots'
check memory 'traces|planners|sim|runtime|experiments|plots'
check planners 'planners/[a-z_]+|sim|runtime|experiments|plots'
for f in $families; do
    others=$(for g in $families; do [ "$g" != "$f" ] && printf '|planners/%s' "$g"; done)
    # MEMO's memory-plan pass (memo_post_plan), declared by the rows of the baseline and
    # ProTrain families too, is the one header a family takes from another
    check "planners/$f" "sim|runtime|experiments|plots$others" planners/memo/policy_memo.h
done
check sim 'runtime|experiments|plots'
check runtime 'sim|experiments|plots'
# the experiments' programs (experiments/main.c, the paper drivers experiments/NAME/driver.c)
# run on the simulator's library: sim/ and what lies below it, not the GPU runtime
n=$((n + 1))
hits=$(grep -nE '#[[:space:]]*include[[:space:]]*"(runtime|plots)/' experiments/*.[ch] \
    experiments/*/*.[ch] 2>/dev/null)
if [ -n "$hits" ]; then
    echo "not ok $n - experiments/ includes sim/ and below only"; echo "$hits" | sed 's/^/#   /'
    bad=1
else
    echo "ok $n - experiments/ includes sim/ and below only"
fi
# every source file starts with a comment saying what it is for
n=$((n + 1))
sources=$(echo base/*.[ch] traces/*.[ch] memory/*.[ch] planners/*.[ch] planners/*/*.[ch] sim/*.[ch] \
        runtime/*.cu runtime/*.[ch] experiments/*.[ch] experiments/*/*.[ch])
missing=$(for f in $sources; do
    [ -f "$f" ] || continue
    head -c 2 "$f" | grep -q '/\*' || echo "$f"
done)
if [ -n "$missing" ]; then
    echo "not ok $n - every source file opens with a comment"; echo "$missing" | sed 's/^/#   /'; bad=1
else
    echo "ok $n - every source file opens with a comment"
fi
# ... that states one role: a second one tacked on ("Also ...", "and also", "This file holds
# A and B") is a file to split. Whether a comment names one role is not mechanical; these are
# the forms a second role took before.
n=$((n + 1))
several=$(for f in $sources; do
    [ -f "$f" ] || continue
    awk 'NR == 1, /\*\//' "$f" | tr '\n' ' ' | sed 's/[[:space:]]*\*[[:space:]]/ /g' |
        grep -qE '(^|[.;:] +)Also |[^a-z]and also |This file (holds|also)' && echo "$f"
done)
if [ -n "$several" ]; then
    echo "not ok $n - no opening comment adds a second role"; echo "$several" | sed 's/^/#   /'; bad=1
else
    echo "ok $n - no opening comment adds a second role"
fi

# Include cycles between files. A module is a source file with its header (foo.c or foo.cu,
# foo.h); module A uses module B when A's source or header includes B's header. A header
# without a source file of its own (an interface such as memory/membackend.h, an internal
# header such as traces/gen_hf_int.h) passes its includes on to the modules that include it.
# find_cycle DIR prints one cycle among DIR's base/ traces/ memory/ planners/ (with its family
# folders) sim/ runtime/ experiments/ modules, as
# "a -> b -> a", or nothing.
find_cycle() (
    cd "$1" || exit 99
    for f in base/*.[ch] traces/*.[ch] memory/*.[ch] planners/*.[ch] planners/*/*.[ch] sim/*.[ch] \
            runtime/*.[ch] runtime/*.cu experiments/*.[ch] experiments/*/*.[ch]; do
        [ -f "$f" ] || continue
        s=${f%.*}
        [ -f "$s.c" ] || [ -f "$s.cu" ] || echo "H $s"
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)\.h".*/\1/p' "$f" |
            while read -r t; do [ "$t" != "$s" ] && [ -f "$t.h" ] && echo "E $s $t"; done
    done | sort -u | awk '
        function note(v) { if (!(v in node)) { node[v] = 1; order[++nn] = v } }
        $1 == "H" { hdr[$2] = 1; next }
        $1 == "E" { note($2); note($3); adj[$2] = adj[$2] " " $3 }
        # the modules a uses, looking through header-only ones
        function expand(a, v,   m, i, w) {
            m = split(adj[v], w, " ")
            for (i = 1; i <= m; i++) {
                if (w[i] in seen) continue
                seen[w[i]] = 1
                if (w[i] in hdr) expand(a, w[i])
                else if (w[i] != a) uses[a] = uses[a] " " w[i]
            }
        }
        # depth-first; a module met again while on the stack closes a cycle
        function visit(v,   m, i, w, p) {
            color[v] = 1; stack[++sp] = v
            m = split(uses[v], w, " ")
            for (i = 1; i <= m && found == ""; i++) {
                if (color[w[i]] == 1) {
                    found = w[i]
                    for (p = sp; stack[p] != w[i]; p--) found = stack[p] " -> " found
                    found = w[i] " -> " found
                } else if (!color[w[i]]) visit(w[i])
            }
            sp--; color[v] = 2
        }
        END {
            for (k = 1; k <= nn; k++) if (!(order[k] in hdr)) { split("", seen); expand(order[k], order[k]) }
            for (k = 1; k <= nn && found == ""; k++)
                if (!(order[k] in hdr) && !color[order[k]]) visit(order[k])
            if (found != "") print found
        }'
)

# the walk finds a cycle planted through an interface header, and none in its acyclic twin
n=$((n + 1))
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_layers.XXXXXX") || exit 99
mkdir "$tmp/planners"
printf '#include "planners/iface.h"\n' > "$tmp/planners/a.c"
printf '#include "planners/b.h"\n' > "$tmp/planners/iface.h"
printf '#include "planners/a.h"\n' > "$tmp/planners/b.h"
: > "$tmp/planners/a.h"; : > "$tmp/planners/b.c"
planted=$(find_cycle "$tmp")
: > "$tmp/planners/b.h"
twin=$(find_cycle "$tmp")
rm -rf "$tmp"
if [ "$planted" = "planners/a -> planners/b -> planners/a" ] && [ -z "$twin" ]; then
    echo "ok $n - the cycle walk finds a planted cycle through an interface header"
else
    echo "not ok $n - the cycle walk finds a planted cycle through an interface header"
    echo "#   planted: '$planted', acyclic twin: '$twin'"; bad=1
fi
# long_files DIR FILE... prints each FILE under DIR over 1,500 lines, with its count, but the
# generator (traces/gen.c): one file over that holds more than one role and is split by role.
long_files() (
    cd "$1" || exit 99
    shift
    for f in "$@"; do
        case $f in traces/gen.c) continue ;; esac
        [ -f "$f" ] || continue
        lines=$(wc -l < "$f")
        [ "$lines" -gt 1500 ] && echo "$f: $lines lines"
    done
    return 0
)
# the length check finds a planted 1,501-line file, passes one of 1,500 and the exempt one
n=$((n + 1))
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_layers.XXXXXX") || exit 99
mkdir "$tmp/sim" "$tmp/traces"
awk 'BEGIN { for (i = 0; i < 1501; i++) print "x" }' > "$tmp/sim/long.c"
awk 'BEGIN { for (i = 0; i < 1500; i++) print "x" }' > "$tmp/sim/short.c"
cp "$tmp/sim/long.c" "$tmp/traces/gen.c"
planted=$(long_files "$tmp" sim/long.c sim/short.c traces/gen.c)
rm -rf "$tmp"
if [ "$planted" = "sim/long.c: 1501 lines" ]; then
    echo "ok $n - the length check finds a planted 1,501-line file and only it"
else
    echo "not ok $n - the length check finds a planted 1,501-line file and only it"
    echo "#   found: '$planted'"; bad=1
fi
# the tracked sources (git's list in a checkout; the same kinds of file found in a tarball)
n=$((n + 1))
if git rev-parse --show-toplevel >/dev/null 2>&1; then
    tracked=$(git ls-files -- '*.c' '*.h' '*.cu' '*.py')
else
    tracked=$(find . \( -name '*.[ch]' -o -name '*.cu' -o -name '*.py' \) -type f | sed 's|^\./||')
fi
long=$(long_files . $tracked)
if [ -n "$long" ]; then
    echo "not ok $n - no source file over 1,500 lines but traces/gen.c"
    echo "$long" | sed 's/^/#   /'; bad=1
else
    echo "ok $n - no source file over 1,500 lines but traces/gen.c"
fi
n=$((n + 1))
cycle=$(find_cycle .)
if [ -n "$cycle" ]; then
    echo "not ok $n - no include cycle between source files"; echo "#   $cycle"; bad=1
else
    echo "ok $n - no include cycle between source files"
fi
echo "1..$n"
exit $bad

#!/bin/sh
# tests/check_layers.sh — enforces the include rule of docs/ARCHITECTURE.md: includes point only
# down (experiments, plots -> sim, runtime -> planners -> traces); sim/ and runtime/ never
# include each other. One TAP test per folder.
cd "${srcdir:-.}" || exit 99
n=0; bad=0
check() { # folder, forbidden-pattern
    n=$((n + 1))
    hits=$(grep -nE "#[[:space:]]*include[[:space:]]*\"($2)/" "$1"/*.[ch] "$1"/*.cu 2>/dev/null)
    if [ -n "$hits" ]; then
        echo "not ok $n - $1/ includes only what lies below it"
        echo "$hits" | sed 's/^/#   /'
        bad=1
    else
        echo "ok $n - $1/ includes only what lies below it"
    fi
}
check traces 'planners|sim|runtime|experiments|plots'
check planners 'sim|runtime|experiments|plots'
check sim 'runtime|experiments|plots'
check runtime 'sim|experiments|plots'
# every source file starts with a comment saying what it is for
n=$((n + 1))
missing=$(for f in traces/*.[ch] planners/*.[ch] sim/*.[ch] runtime/*.cu runtime/*.[ch]; do
    [ -f "$f" ] || continue
    head -c 2 "$f" | grep -q '/\*' || echo "$f"
done)
if [ -n "$missing" ]; then
    echo "not ok $n - every source file opens with a comment"; echo "$missing" | sed 's/^/#   /'; bad=1
else
    echo "ok $n - every source file opens with a comment"
fi
echo "1..$n"
exit $bad

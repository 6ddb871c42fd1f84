#!/bin/sh
# tests/check_mpi.sh — `mpirun -n 2 memsim sweep` (./configure --with-mpi): the grid's points
# spread over two ranks, and the table, the --longest lines, the CSV and the exit status byte
# for byte those of one process. TAP; skipped when memsim is built without MPI.
M=${MEMSIM:-./sim/memsim}
[ -x "$M" ] || { echo "1..0 # SKIP memsim not built"; exit 0; }
"$M" sweep --help | grep -q mpirun || { echo "1..0 # SKIP memsim built without MPI (./configure --with-mpi)"; exit 0; }
R=${MEMSIM_MPIRUN:-mpirun}
command -v "$R" >/dev/null 2>&1 || { echo "1..0 # SKIP no mpirun on the PATH"; exit 0; }
T=$(mktemp -d /tmp/memsim-mpi-XXXXXX) || exit 99
trap 'rm -rf "$T"' EXIT
# a test may run as root in a container, on one machine: shared memory between the ranks
OMPI_ALLOW_RUN_AS_ROOT=1; OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; OMPI_MCA_btl=self,vader
OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_btl OMPI_MCA_rmaps_base_oversubscribe
n=0; bad=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; bad=1; fi; }
W="sweep --model gpt-7b --tp 4 --cp 2 --iters 1 --seqs 64K,128K,256K,512K,1M --policies full-recompute,full-swap,no-such-policy,keep-all --longest"
"$M" $W --csv "$T/one.csv" > "$T/one.out" 2> "$T/one.err"; r1=$?
[ $r1 = 3 ]; ok $? "one process: exit 3 (a policy that does not exist: error cells)"
timeout 120 "$R" -n 2 "$M" $W --csv "$T/two.csv" > "$T/two.out" 2> "$T/two.err"; r2=$?
[ $r2 = 3 ]; r=$?; [ $r = 0 ] || head -c 600 "$T/two.err" | sed 's/^/#   /'
ok $r "mpirun -n 2: the same exit status (got $r2)"
cmp -s "$T/one.out" "$T/two.out"; ok $? "mpirun -n 2: the table and the --longest lines equal one process's"
cmp -s "$T/one.csv" "$T/two.csv"; ok $? "mpirun -n 2: the CSV equals one process's"
grep -q "finished at 128K tokens (2/5, rank 1)" "$T/two.err"; ok $? "mpirun -n 2: rank 1 ran the second point"
grep "no-such-policy at" "$T/one.err" > "$T/e1"; grep "no-such-policy at" "$T/two.err" > "$T/e2"
cmp -s "$T/e1" "$T/e2" && [ -s "$T/e1" ]; ok $? "mpirun -n 2: the error messages, once, in the order of the points"
timeout 120 "$R" -n 2 "$M" $W --csv "$T/three.csv" -j 2 > "$T/three.out" 2> "$T/three.err"
cmp -s "$T/one.out" "$T/three.out" && cmp -s "$T/one.csv" "$T/three.csv"; ok $? "mpirun -n 2 with -j 2 (the bisections in rank 0's pool): the same outputs"
echo "1..$n"
exit $bad

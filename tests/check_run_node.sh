#!/bin/sh
# tests/check_run_node.sh — `memsim run` and `memsim probe` on several GPUs as far as a machine
# without them allows: the options and launchers' variables refused with their messages and
# documented statuses, a layout of more GPUs than the machine shows refused naming both
# numbers, `memsim probe --collectives` refused on fewer than 2 GPUs, `memsim probe --attn`
# refused beside another partial probe and without a GPU, its --warm-ms checked, `memsim
# probe --power` likewise with its --power-ms; and no
# source that calls cuMulticastCreate. Where the CUDA driver is
# missing (a build box) memsim-run is started against the toolkit's stub libcuda, whose calls
# all fail as a machine without a driver's do. TAP output; skipped without the runtime.
M=${MEMSIM:-./sim/memsim}
R=$(dirname "$M")/../runtime/memsim-run
n=0; bad=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; bad=1; fi; }
# NVLink multicast can take a shared host's GPUs out of service: no source may create it
hits=$(grep -rln "cuMulticastCreate" "${srcdir:-.}"/base "${srcdir:-.}"/traces "${srcdir:-.}"/memory \
    "${srcdir:-.}"/planners "${srcdir:-.}"/sim "${srcdir:-.}"/runtime "${srcdir:-.}"/experiments \
    --include='*.c' --include='*.h' --include='*.cu' --include='*.py' 2>/dev/null)
[ -z "$hits" ]
ok $? "no source calls cuMulticastCreate${hits:+: $hits}"
if [ ! -x "$M" ] || [ ! -x "$R" ]; then
    echo "ok 2 # SKIP the GPU runtime (memsim-run) is not built"; echo "1..2"; exit $bad
fi
T=$(mktemp -d /tmp/memsim-node-XXXXXX) || exit 99
trap 'rm -rf "$T"' EXIT
"$R" run --help >/dev/null 2>&1
if [ $? = 127 ]; then
    stub=
    for d in "${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" /usr/local/cuda/lib64/stubs; do
        [ -f "$d/libcuda.so" ] && stub="$d/libcuda.so" && break
    done
    [ -n "$stub" ] || { echo "ok 2 # SKIP memsim-run cannot load libcuda and no stub is found"
                        echo "1..2"; exit $bad; }
    ln -s "$stub" "$T/libcuda.so.1"
    LD_LIBRARY_PATH="$T${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; export LD_LIBRARY_PATH
fi
for v in RANK WORLD_SIZE LOCAL_RANK OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE \
         OMPI_COMM_WORLD_LOCAL_RANK MEMSIM_RANK MEMSIM_WORLD_SIZE MEMSIM_LOCAL_RANK \
         MEMSIM_NCCL_ID_FILE TORCHELASTIC_RUN_ID PMIX_NAMESPACE; do unset $v; done
# expect STATUS PATTERN DESCRIPTION -- command...: the status, and PATTERN (grep -E) on stderr
expect() {
    want=$1; pat=$2; desc=$3; shift 4
    "$@" >"$T/out" 2>"$T/err"; got=$?
    [ "$got" = "$want" ] && grep -qE "$pat" "$T/err"; r=$?
    [ $r = 0 ] || echo "#   exit $got, wanted $want and /$pat/: $(head -c 300 "$T/err")"
    ok $r "$desc"
}
W="--model gpt2-1b --seq 1024 --machine h200-sxm"

expect 2 "expected nccl or spin" "--collectives takes nccl or spin" -- \
    "$M" run $W --tp 2 --collectives bogus
expect 1 "no NVIDIA driver|holds 2 GPUs .* shows [01]" \
    "tp 2 on this machine: no driver, or fewer GPUs than the layout, named" -- "$M" run $W --tp 2
expect 1 "no NVIDIA driver|holds 8 GPUs .* shows [0-7]|holds 8 GPUs" \
    "tp 4 x cp 2 (8 GPUs) likewise" -- "$M" run $W --tp 4 --cp 2
expect 1 "no NVIDIA driver|no usable CUDA device" \
    "--collectives spin runs the layout on one GPU (none here)" -- \
    "$M" run $W --tp 2 --collectives spin
expect 2 "torchrun started 4 processes .* 2 GPUs" "torchrun's world must be the layout's" -- \
    env RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 "$M" run $W --tp 2
expect 2 "set MEMSIM_NCCL_ID_FILE" "an external launcher needs MEMSIM_NCCL_ID_FILE" -- \
    env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 "$M" run $W --tp 2
expect 2 "OMPI_COMM_WORLD_LOCAL_RANK" "mpirun's variables incomplete" -- \
    env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 MEMSIM_NCCL_ID_FILE="$T/id" \
    "$M" run $W --tp 2
expect 2 "math real runs on one GPU" "a rank refuses --math real (no real math across ranks)" -- \
    env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MEMSIM_NCCL_ID_FILE="$T/id" "$M" run $W --tp 2 \
    --math real
[ -f "$T/id.stop" ] && grep -q "rank 1: bad options" "$T/id.stop"
ok $? "the refusing rank leaves the notice that stops the others"
expect 2 "each rank uses the GPU of its local rank" "a rank refuses --device" -- \
    env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MEMSIM_NCCL_ID_FILE="$T/id2" "$M" run $W --tp 2 \
    --device 1
expect 2 "separate probes" "probe: --collectives and --host-adam are separate" -- \
    "$M" probe --collectives --host-adam
expect 2 "unexpected argument" "probe: a stray argument" -- "$M" probe --collectives extra
expect 1 "needs a machine of several GPUs|no CUDA device" \
    "probe --collectives on fewer than 2 GPUs is refused" -- \
    "$M" probe --collectives --raw "$T/raw.csv" -o "$T/p.machine"
[ ! -f "$T/p.machine" ]
ok $? "... and writes no profile"
"$M" run --help | grep -q -- "--collectives MODE" && "$M" probe --help | grep -q -- "--collectives"
ok $? "both --help texts name --collectives"
# memsim probe --attn (memsim's attention kernels alone) beside the other partial probes
expect 2 "separate probes" "probe: --attn and --host-adam are separate" -- \
    "$M" probe --attn --host-adam
expect 2 "give it with --attn" "probe: --warm-ms without --attn is refused" -- \
    "$M" probe --warm-ms 100
expect 2 "is not a time in ms" "probe: --warm-ms takes milliseconds" -- \
    "$M" probe --attn --warm-ms soon
expect 1 "no CUDA device|no NVIDIA driver" "probe --attn without a usable GPU is refused" -- \
    "$M" probe --attn --base h200-sxm --raw "$T/raw2.csv" -o "$T/a.machine"
[ ! -f "$T/a.machine" ]
ok $? "... and writes no profile"
"$M" probe --help | grep -q -- "--attn .*only memsim's attention kernels"
ok $? "probe --help names --attn"
# memsim probe --power (the board's power under each kernel class)
expect 2 "separate probes" "probe: --power and --attn are separate" -- \
    "$M" probe --power --attn
expect 2 "give it with --power" "probe: --power-ms without --power is refused" -- \
    "$M" probe --power-ms 3000
expect 2 "is not a time in ms" "probe: --power-ms takes 1000..60000 ms" -- \
    "$M" probe --power --power-ms 10
expect 1 "no CUDA device|no NVIDIA driver" "probe --power without a usable GPU is refused" -- \
    "$M" probe --power --base h200-sxm --raw "$T/raw3.csv" -o "$T/w.machine"
[ ! -f "$T/w.machine" ]
ok $? "... and writes no profile"
"$M" probe --help | grep -q -- "--power .*only the board's power"
ok $? "probe --help names --power"
echo "1..$n"
exit $bad

#!/bin/sh
# make_snapshot.sh — writes a synthetic PyTorch memory snapshot (the JSON that
# torch.cuda.memory._snapshot() returns, device_traces only) of a transformer-like
# training loop: per iteration, LAYERS layers of activations allocated in forward and
# freed in reverse in backward, a short-lived temporary per layer and pass, a gradient
# per layer. Deterministic; the input of BENCHMARKS.md's text-trace measurements.
#   sh experiments/bench/make_snapshot.sh ITERS LAYERS > snap.json
#   gzip -1 snap.json && memsim trace import --from pytorch-snapshot snap.json.gz -o big.trace
# 8 events per layer and iteration: ITERS=3500 LAYERS=48 gives 1,344,000 alloc/free events.
iters=${1:-3500}
layers=${2:-48}
awk -v iters="$iters" -v layers="$layers" 'BEGIN {
    base = 139637976727552; t = 1000; first = 1
    printf "{\"device_traces\": [[\n"
    for (it = 0; it < iters; it++) {
        for (l = 0; l < layers; l++) {                 # forward
            ev("alloc", base + l * 67108864, 4194304 + (l % 7) * 65536 + (it % 5) * 512)
            ev("alloc", base + 4294967296, 1048576 + (l % 3) * 4096)
            ev("free_completed", base + 4294967296, 1048576 + (l % 3) * 4096)
        }
        for (l = layers - 1; l >= 0; l--) {            # backward
            ev("alloc", base + 8589934592 + l * 2097152, 2097152 - (l % 4) * 1024)
            ev("alloc", base + 4294967296, 2097152 + (l % 5) * 8192)
            ev("free_completed", base + 4294967296, 2097152 + (l % 5) * 8192)
            ev("free_completed", base + l * 67108864, 4194304 + (l % 7) * 65536 + (it % 5) * 512)
        }
        for (l = 0; l < layers; l++)                   # optimizer step frees the gradients
            ev("free_completed", base + 8589934592 + l * 2097152, 2097152 - (l % 4) * 1024)
    }
    printf "\n]]}\n"
}
function ev(action, addr, size) {
    printf "%s{\"action\": \"%s\", \"addr\": %.0f, \"size\": %d, \"stream\": 0, \"time_us\": %d}",
        first ? "" : ",\n", action, addr, size, t++
    first = 0
}'

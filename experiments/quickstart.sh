#!/usr/bin/env bash
# experiments/quickstart.sh — the README's first command: installs the Debian packages memsim
# needs (as root), builds it, and runs the main job on the bundled defaults: a what-if
# comparison of the baseline policies (keep-all, full-recompute, full-swap) for GPT-7B at 256K
# tokens on MEMO's 8 x A800 node (TP 4, CP 2). Prints the table and writes the results CSV and
# figures (PNG and SVG) to out/quickstart/. Extra arguments go to `memsim compare`.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup-lib.sh
memsim_install_deps
memsim_build
mkdir -p out/quickstart
memsim_stage "running memsim compare (GPT-7B at 256K tokens on a800-8gpu, 3 policies)"
./sim/memsim compare --model gpt-7b --seq 256K --machine a800-8gpu --tp 4 --cp 2 \
    --policies keep-all,full-recompute,full-swap \
    --csv out/quickstart/results.csv --plot out/quickstart "$@"
echo "figures and results in out/quickstart/"
echo "memsim is at sim/memsim; to run the README's commands as written, put it on the PATH:"
echo "  export PATH=$PWD/sim:\$PATH     (or: make install)"

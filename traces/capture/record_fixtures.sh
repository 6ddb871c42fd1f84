#!/bin/sh
# record_fixtures.sh — records memsim's three reference PyTorch allocator traces (GPT-2,
# 4 layers, hidden 256, seq 256, batch 4, 3 AdamW steps: plain, gradient checkpointing, LoRA)
# into the directory given as $1, one fresh Python process per trace so each starts from an
# empty caching allocator. Run on a GPU machine with PyTorch, transformers and peft; no
# network is needed. Usage: traces/capture/record_fixtures.sh OUTDIR [python]
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [PYTHON]" >&2
    exit 2
fi
out=$1
py=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"

for mode in plain checkpoint lora; do
    "$py" "$here/record_snapshot.py" --mode "$mode" --layers 4 --hidden 256 --seq 256 \
        --batch 4 --steps 3 --seed 0 --out "$out/gpt2-$mode.json.gz"
done

# Fixtures are committed: keep each well under 2 MB.
for f in "$out"/gpt2-plain.json.gz "$out"/gpt2-checkpoint.json.gz "$out"/gpt2-lora.json.gz; do
    size=$(wc -c < "$f")
    if [ "$size" -gt 2000000 ]; then
        echo "$f: $size bytes, over the 2 MB fixture budget" >&2
        exit 1
    fi
done
echo "recorded: $(ls "$out"/gpt2-*.json.gz | tr '\n' ' ')"

#!/usr/bin/env bash
# Runs the same memsim commands with two builds and compares everything they print and write:
# standard output, exit status and every file a command writes (CSVs, timelines, memory CSVs),
# byte for byte. Used before a change to memsim's speed is committed, to show that it changes
# no result. Usage: benchmarks/same_outputs.sh OLD/sim/memsim NEW/sim/memsim [WORKDIR]
# Run from the source directory (the HF config and the captured traces are read from it).
set -u
old=$(realpath "$1") new=$(realpath "$2")
work=${3:-$(mktemp -d)}
src=$PWD
seq192=$(python3 -c 'print(",".join("%dK" % k for k in range(16, 1025, 16)))')
hf="--model-config $src/experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp"
sw="sweep --model gpt-7b --tp 4 --cp 2 --iters 1"

cmds=(
  "$sw --seqs $seq192 --policies full-recompute,full-swap,keep-all --quiet -j 1 --csv out.csv"
  "$sw --seqs $seq192 --policies full-recompute,full-swap,keep-all --quiet -j 2 --csv out.csv"
  "$sw --seqs 64K,128K,256K,512K,1M --policies full-recompute,full-swap,memo --longest -j 1 --csv out.csv"
  "$sw --seqs 64K,128K,256K,512K,1M --policies full-recompute,full-swap,memo --longest -j 2 --csv out.csv"
  "sweep --model gpt2-1b --seq 1024 --batches 8,16,32,64 --machine h100-sxm --longest --csv out.csv"
  "sweep --model gpt2-1b --seq 1024 --batches 1,2,4,6,8,12,16,24,32 --policies keep-all,full-recompute,full-swap,memo,save-on-cpu --csv out.csv"
  "$sw --seqs 16K,33K,48K,100000,129K --policies full-recompute,full-swap,keep-all --csv out.csv"
  "$sw --seqs 64K,128K,256K --policies full-recompute,keep-all --alpha 0.5 --csv out.csv"
  "$sw --seqs 64K,128K,256K --policies full-recompute,full-swap --issue-ahead 8 --csv out.csv"
  "$sw --seqs 64K,128K,256K --policies full-recompute,full-swap --allocator expandable --csv out.csv"
  "$sw --seqs 32K,64K,96K --policies full-recompute,full-swap --no-reuse --csv out.csv"
  "compare --model gpt-7b --seq 256K --machine a800-8gpu --tp 4 --cp 2 --policies keep-all,full-recompute,full-swap --breakdown --csv out.csv"
  "compare --model gpt-7b --seq 256K --tp 4 --cp 2 --policies full-recompute+plan,memo --breakdown -j 2"
  "compare --model mixtral-8x7b --seq 4096 --machine h200-sxm --tp 2 --dp 8 --ep 8 --framework megatron --policies keep-all,full-recompute"
  "compare --model gpt2-10b --seq 1024 --batch 4 --machine a100-80g-pcie4 --policies keep-all,full-recompute,protrain,zero3-offload,zero-offload,memferry,go-memferry"
  "compare $hf --seq 4096 --batch 8 --machine h200-sxm --policies keep-all,full-recompute,save-on-cpu --csv out.csv"
  "simulate $hf --seq 4096 --batch 8 --machine h200-sxm --policy keep-all --csv out.csv --timeline t.json --memcsv m.csv"
  "simulate --model gpt-13b --seq 128K --tp 8 --policy full-swap --timeline t.json --memcsv m.csv --breakdown"
  "simulate --model gpt-7b --seq 256K --tp 4 --cp 2 --policy keep-all --timeline t.json --memcsv m.csv"
  "simulate --model gpt-7b --seq 64K --tp 4 --cp 2 --policy full-recompute --issue-ahead 8 --timeline t.json --memcsv m.csv"
  "simulate --model gpt-7b --seq 64K --tp 4 --cp 2 --policy full-recompute+plan --allocator stitching --memcsv m.csv"
  "simulate --model gpt2-1b --seq 1024 --batch 8 --policy auto --csv out.csv"
  "simulate --model gpt-7b --seq 64K --tp 4 --cp 2 --framework megatron --iters 2 --policy memo --timeline t.json --memcsv m.csv"
  "simulate --dims 24,2048,16,8192,50257 --seq 8K --timeline t.json --memcsv m.csv"
  "trace gen --model gpt2-1b --seq 1024 --batch 8 -o w.trace"
  "trace gen --model gpt-7b --seq 64K --tp 4 --cp 2 --framework megatron --iters 2 -o w.trace"
  "trace gen $hf --seq 4096 --batch 8 -o w.trace"
)
for f in "$src"/experiments/capture/results/*.trace.gz; do
  case $f in *.c[0-9].trace.gz) continue ;; esac   # the other processes' captures
  cmds+=("compare --trace $f --policies keep-all,full-recompute --csv out.csv")
done

fail=0 i=0
for c in "${cmds[@]}"; do
  i=$((i + 1))
  for side in old new; do
    d="$work/$i.$side"
    rm -rf "$d" && mkdir -p "$d"
    bin=$old; [ $side = new ] && bin=$new
    (cd "$d" && $bin $c >stdout 2>stderr; echo $? >rc)
    # -j 2's progress lines follow the jobs' finishing order (and count in it): compare
    # standard error sorted, without the counts
    sed -E 's/ \([0-9]+\/[0-9]+\)$//' "$d/stderr" | sort >"$d/stderr.sorted" && rm "$d/stderr"
  done
  if diff -r "$work/$i.old" "$work/$i.new" >/dev/null; then
    echo "same  $i: memsim $c" | cut -c1-150
  else
    echo "DIFF  $i: memsim $c"
    diff -r "$work/$i.old" "$work/$i.new" | head -5
    fail=1
  fi
done
echo "$i commands, $([ $fail = 0 ] && echo 'all the same' || echo 'SOME DIFFER')"
exit $fail

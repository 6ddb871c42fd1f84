#!/bin/bash
# gpu.sh LIST OUTDIR [STEPS] — runs every case of LIST (cases.tsv's columns) with hf_run.py,
# each in a fresh Python process (the caching allocator's state and cuBLAS's workspace belong
# to the process), writing OUTDIR/NAME.json (+ .trace.json.gz, .kernels.csv). Runs on the GPU
# machine; a case that fails for another reason than running out of memory leaves NAME.err.
set -u
list=$1; out=$2; steps=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
n=$(grep -vc '^#' "$list"); i=0
grep -v '^#' "$list" | while IFS=$'\t' read -r name cfg prec ck seq batch extra; do
    i=$((i + 1))
    args=(--config "$here/configs/$cfg.json" --name "$name" --precision "$prec" --seq "$seq"
          --batch "$batch" --steps "$steps" --out "$out/$name.json")
    [ "$ck" = 1 ] && args+=(--ckpt)
    case ",$extra," in *,record,*) args+=(--record "$out/$name.trace.json.gz" --steps 1 --warmup 2);; esac
    case ",$extra," in *,frames,*) args+=(--frames);; esac
    case ",$extra," in *,profile,*) args+=(--profile "$out/$name.kernels.csv");; esac
    t0=$(date +%s)
    timeout 300 python3 "$here/hf_run.py" "${args[@]}" >"$out/$name.log" 2>&1 || mv "$out/$name.log" "$out/$name.err"
    echo "[$i/$n] $name $(($(date +%s) - t0)) s" >&2
done

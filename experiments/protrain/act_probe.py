#!/usr/bin/env python3
"""act_probe.py — what one Hugging Face GPT-2 block keeps for its backward, and what its
activation function costs: the measurement behind the activation bytes `memsim protrain` gives
ProTrain's HF workloads (experiments/protrain/driver.c, add_hf: eager attention and GPT-2's `gelu_new`).

ProTrain trained Hugging Face models. Their GPT-2 runs eager attention and `gelu_new`
(transformers' NewGELUActivation, a Python expression of eight element-wise ops, not a fused
kernel). Korthikanti et al.'s count of the bytes a block keeps, 34sbh + 5as^2b, assumes a fused
GeLU that keeps only its input. This probe builds one GPT2Block in fp16 (transformers, no
network: the configuration is made here, the weights are random), runs its forward in train
mode (dropout on) under a saved-tensor hook and with the caching allocator's counters, and
reports per batch:

  kept_bytes      memory_allocated after the forward minus before, less the block's output
  saved_bytes     the distinct storages autograd saved for the backward (the hook's view)
  korthikanti     34sbh + 5as^2b bytes
  gelu_extra      6 s b f bytes (f = the MLP width): the three extra tensors gelu_new keeps

and the forward and backward times of the block with `gelu_new` and with the fused tanh GeLU
(torch.nn.functional.gelu(approximate="tanh"), the same function) swapped in, medians of
--reps runs.

    python3 act_probe.py --out DIR [--hidden 1536 --heads 16 --seq 1024 --batches 1,2,4,8]

Writes DIR/act.csv and prints it. PyTorch and transformers, one GPU, no network.
"""
import argparse
import os
import statistics
import time

import torch


def build_block(hidden, heads, seq, act):
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    cfg = GPT2Config(n_embd=hidden, n_head=heads, n_positions=seq, n_layer=1,
                     activation_function=act)
    try:
        cfg._attn_implementation = "eager"
    except Exception:
        pass
    blk = GPT2Block(cfg, layer_idx=0).cuda().half()
    blk.train()
    return blk, cfg


def first(out):
    """The hidden states of a block's output (a tuple in most transformers versions)."""
    return out[0] if isinstance(out, (tuple, list)) else out


def kept_bytes(blk, x):
    """Bytes the forward leaves allocated (output excluded) and bytes autograd saved."""
    storages = {}

    def pack(t):
        if t.is_cuda:
            s = t.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
        return t

    torch.cuda.synchronize()
    m0 = torch.cuda.memory_allocated()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = first(blk(x))
    torch.cuda.synchronize()
    m1 = torch.cuda.memory_allocated()
    out = y.untyped_storage().nbytes()
    saved = sum(v for k, v in storages.items() if k != x.untyped_storage().data_ptr())
    del y
    return m1 - m0 - out, saved


def times(blk, x, reps):
    """Median forward and backward seconds of the block."""
    fw, bw = [], []
    for i in range(reps + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = first(blk(x))
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        y.backward(torch.ones_like(y))
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        x.grad = None
        for p in blk.parameters():
            p.grad = None
        if i >= 2:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
    return statistics.median(fw), statistics.median(bw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import transformers
    rows = []
    h, nh, s = a.hidden, a.heads, a.seq
    f = 4 * h
    for act in ("gelu_new", "gelu_pytorch_tanh"):
        blk, cfg = build_block(h, nh, s, act)
        for b in [int(v) for v in a.batches.split(",")]:
            x = torch.randn(b, s, h, device="cuda", dtype=torch.float16, requires_grad=True)
            kept, saved = kept_bytes(blk, x)
            fw, bw = times(blk, x, a.reps)
            rows.append((act, b, kept, saved, 34 * s * b * h + 5 * nh * s * s * b,
                         6 * s * b * f, fw, bw))
            del x
        del blk
        torch.cuda.empty_cache()
    path = os.path.join(a.out, "act.csv")
    with open(path, "w") as fo:
        fo.write("# GPT2Block fp16 train mode, eager attention, hidden %d heads %d seq %d; "
                 "torch %s transformers %s on %s\n" % (h, nh, s, torch.__version__,
                                                      transformers.__version__,
                                                      torch.cuda.get_device_name()))
        fo.write("activation,batch,kept_bytes,saved_bytes,korthikanti_bytes,gelu_extra_bytes,"
                 "fwd_s,bwd_s\n")
        for r in rows:
            fo.write("%s,%d,%d,%d,%d,%d,%.6f,%.6f\n" % r)
    print(open(path).read(), end="")


if __name__ == "__main__":
    main()

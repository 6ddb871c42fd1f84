#!/usr/bin/env python3
"""record_snapshot.py — records PyTorch's CUDA caching-allocator trace of a few training steps
of a small GPT-2 and writes it as JSON for memsim's importer (traces/import_pytorch.c,
`memsim trace import --from pytorch-snapshot`). Runs on a GPU machine with PyTorch 2.x,
transformers and (for --mode lora) peft installed; needs no network: the model is built from a
config with random weights and the tokens come from torch.randint with a fixed seed.

Output: {"snapshot": torch.cuda.memory._snapshot(), "memory_stats": torch.cuda.memory_stats(),
"meta": {versions, device name, mode, dimensions, ...}}, gzip-compressed when the name ends in
.gz. Stack frames are not recorded (context=None) and any that appear are removed, so a few
training steps of a small model stay well under a megabyte compressed.

Modes:
  plain       full activations kept for the backward pass
  checkpoint  model.gradient_checkpointing_enable(): layer inputs kept, the rest recomputed
  lora        peft LoRA (r=8) on the attention projection c_attn; base weights frozen

Example:
  python3 record_snapshot.py --mode plain --layers 4 --hidden 256 --seq 256 --batch 4 \\
      --steps 3 --out gpt2-plain.json.gz
"""

import argparse
import gzip
import json
import os
import platform
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Record a PyTorch CUDA allocator trace of GPT-2 training steps as JSON.")
    p.add_argument("--mode", choices=["plain", "checkpoint", "lora"], default="plain")
    p.add_argument("--layers", type=int, default=4, help="transformer layers (n_layer)")
    p.add_argument("--hidden", type=int, default=256, help="hidden size (n_embd)")
    p.add_argument("--heads", type=int, default=0,
                   help="attention heads (n_head); 0: hidden / 64, at least 1")
    p.add_argument("--vocab", type=int, default=50257, help="vocabulary size")
    p.add_argument("--seq", type=int, default=256, help="sequence length in tokens")
    p.add_argument("--batch", type=int, default=4, help="sequences per step")
    p.add_argument("--steps", type=int, default=3, help="training steps recorded")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="dtype of the model weights")
    p.add_argument("--lora-r", type=int, default=8, help="LoRA rank (--mode lora)")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and tokens")
    p.add_argument("--max-entries", type=int, default=1000000,
                   help="allocator trace ring-buffer size (_record_memory_history max_entries)")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--expandable-segments", action="store_true",
                   help="record with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    p.add_argument("--keep-frames", action="store_true",
                   help="record Python stack frames too (much larger output)")
    p.add_argument("--out", required=True, help="output file (.json or .json.gz)")
    a = p.parse_args(argv)
    for name in ("layers", "hidden", "vocab", "seq", "batch", "steps", "max_entries", "lora_r"):
        if getattr(a, name) <= 0:
            p.error("--%s must be positive" % name.replace("_", "-"))
    if a.heads == 0:
        a.heads = max(1, a.hidden // 64)
    if a.hidden % a.heads:
        p.error("--hidden must be a multiple of --heads")
    return a


def strip_frames(snapshot):
    """Removes stack frames from trace entries, segments and blocks (they dominate the size
    and the importer does not use them)."""
    for dev in snapshot.get("device_traces", []):
        for e in dev:
            e.pop("frames", None)
    for seg in snapshot.get("segments", []):
        seg.pop("frames", None)
        for b in seg.get("blocks", []):
            b.pop("frames", None)
            for h in b.get("history", []) or []:
                h.pop("frames", None)


def build_model(a, torch):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads,
                     vocab_size=a.vocab, n_positions=max(1024, a.seq), use_cache=False)
    model = GPT2LMHeadModel(cfg)
    if a.dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    if a.mode == "checkpoint":
        # Non-reentrant checkpointing: inputs need not require grad, as in current trainers.
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    if a.mode == "lora":
        from peft import LoraConfig, get_peft_model

        # GPT-2's c_attn is a transformers Conv1D (weight stored in x out): fan_in_fan_out.
        lcfg = LoraConfig(r=a.lora_r, lora_alpha=2 * a.lora_r, lora_dropout=0.0,
                          target_modules=["c_attn"], fan_in_fan_out=True,
                          task_type="CAUSAL_LM")
        model = get_peft_model(model, lcfg)
    return model, cfg


def package_version(name):
    try:
        mod = __import__(name)
        return str(getattr(mod, "__version__", "unknown"))
    except Exception:  # the package is optional unless its mode is used
        return "absent"


def main(argv=None):
    a = parse_args(argv)
    if a.expandable_segments:
        # Must be set before torch initialises CUDA.
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    if not torch.cuda.is_available():
        print("record_snapshot.py: no CUDA device", file=sys.stderr)
        return 2
    torch.cuda.set_device(a.device)
    torch.cuda.init()
    dev = torch.device("cuda", a.device)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    tokens = torch.randint(0, a.vocab, (a.steps, a.batch, a.seq), generator=gen)

    # Recording starts before anything of the model exists on the GPU, so the trace holds
    # every allocation of the run and PyTorch's reserved memory starts from zero.
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all" if a.keep_frames else None, stacks="python",
        max_entries=a.max_entries)
    torch.cuda.reset_peak_memory_stats(dev)

    model, cfg = build_model(a, torch)
    model.to(dev)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr)

    losses, step_s = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        ids = tokens[step].to(dev)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(dev)
        step_s.append(time.perf_counter() - t0)
        loss = float(out.loss.detach())
        losses.append(loss if loss == loss and abs(loss) != float("inf") else None)
        del out, ids

    snapshot = torch.cuda.memory._snapshot()
    stats = torch.cuda.memory_stats(dev)
    torch.cuda.memory._record_memory_history(enabled=None)
    if not a.keep_frames:
        strip_frames(snapshot)

    entries = len(snapshot["device_traces"][a.device]) \
        if a.device < len(snapshot.get("device_traces", [])) else 0
    if entries >= a.max_entries:
        print("record_snapshot.py: warning: the trace filled its ring buffer (%d entries); "
              "the oldest were dropped: raise --max-entries" % entries, file=sys.stderr)
    prop = torch.cuda.get_device_properties(dev)
    meta = {
        "tool": "memsim traces/capture/record_snapshot.py",
        "torch_version": torch.__version__,
        "cuda_version": str(torch.version.cuda),
        "transformers_version": package_version("transformers"),
        "peft_version": package_version("peft") if a.mode == "lora" else "unused",
        "python_version": platform.python_version(),
        "device_name": prop.name,
        "device_index": a.device,
        "device_total_bytes": int(prop.total_memory),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF",
                                     os.environ.get("PYTORCH_ALLOC_CONF", "")),
        "model": "gpt2",
        "attn_implementation": str(getattr(cfg, "_attn_implementation", "unknown")),
        "mode": a.mode,
        "layers": a.layers,
        "hidden": a.hidden,
        "heads": a.heads,
        "vocab": a.vocab,
        "seq": a.seq,
        "batch": a.batch,
        "steps": a.steps,
        "dtype": a.dtype,
        "lora_r": a.lora_r if a.mode == "lora" else 0,
        "optimizer": "AdamW",
        "lr": a.lr,
        "seed": a.seed,
        "max_entries": a.max_entries,
        "trace_entries": entries,
        "params_total": sum(p.numel() for p in model.parameters()),
        "params_trainable": sum(p.numel() for p in params),
        "losses": losses,
        "step_s": step_s,
    }
    doc = {"snapshot": snapshot, "memory_stats": dict(stats), "meta": meta}
    tmp = a.out + ".tmp"
    opener = gzip.open if a.out.endswith(".gz") else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        # default=str keeps unexpected objects (new snapshot fields) from aborting the dump.
        json.dump(doc, f, separators=(",", ":"), default=str)
        f.write("\n")
    os.replace(tmp, a.out)
    print("%s: mode %s, %d entries, reserved peak %d B, allocated peak %d B, %d segments, "
          "%d bytes" % (a.out, a.mode, entries, stats.get("reserved_bytes.all.peak", 0),
                        stats.get("allocated_bytes.all.peak", 0),
                        stats.get("segment.all.allocated", 0), os.path.getsize(a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

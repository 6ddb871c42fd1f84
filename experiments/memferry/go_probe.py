#!/usr/bin/env python3
"""go_probe.py — measures on a real GPU what GO-MemFerry's gradient offload costs per module:
the weight gradients of chosen parameters live in pinned host memory mapped into the GPU's
address space (Direct Host Access), so PyTorch's AccumulateGrad adds each new gradient into
host memory across the PCIe link (`param.grad += new_grad`, one elementwise kernel on the
compute stream), while the other parameters accumulate into GPU buffers the same way.

It prints three tables (CSV, also written under --out):
  micro   the accumulate kernel alone, `grad += new` into GPU vs mapped host memory, over sizes;
  kinds   per parameter kind (one tensor name across all layers, e.g. every layer's FFN
          weight): its gradient bytes, the forward+backward time with that kind's gradients
          on the host minus the time with none there, and that cost per gradient byte;
  sweep   forward+backward time over the reserve factor (the share of gradient bytes kept on
          the GPU, 0..1), the kept parameters chosen by measured cost per byte, most costly
          kept first (the choice GO-MemFerry's DP makes when items differ in cost per byte),
          and, for contrast, kept in model order.

memsim uses these to check its DHA gradient-write model (docs/MEMFERRY.md, "Gradient writes
measured"): whether modules differ in cost per gradient byte, and whether the iteration
time over the reserve factor is convex (MemFerry Fig. 10(b)) on hardware.

Models are built from their configurations (no network): bert-base, bert-large,
roberta-base, gpt2-medium, fp16, random inputs, training mode.

Example: python3 go_probe.py --models bert-base --reps 10 --out /tmp/go
"""
import argparse
import os
import re

import torch

from dha_common import emit, host_mapped_zeros, per_call_ms, timed_ms

SHAPES = {
    # name: (seq, default batch: experiments/memferry's Fig. 9 batches)
    "bert-base": (512, 8),
    "roberta-base": (512, 8),
    "bert-large": (512, 64),
    "gpt2-medium": (1024, 32),
}


def build(name):
    import transformers as tf
    if name == "bert-base":
        return tf.BertForMaskedLM(tf.BertConfig()), 30522
    if name == "bert-large":
        cfg = tf.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                            intermediate_size=4096)
        return tf.BertForMaskedLM(cfg), 30522
    if name == "roberta-base":
        cfg = tf.RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1)
        return tf.RobertaForMaskedLM(cfg), 50265
    if name == "gpt2-medium":
        cfg = tf.GPT2Config(n_embd=1024, n_layer=24, n_head=16)
        return tf.GPT2LMHeadModel(cfg), 50257
    raise SystemExit(f"go_probe.py: unknown model {name}")


LOOP = 20  # kernels per timed sample (dha_common.per_call_ms)


def micro(out, reps):
    rows = ["what,bytes,gpu_us,host_us,host_GBps"]
    for kib in (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 65536, 131072):
        n = kib * 1024 // 2
        new = torch.randn(n, device="cuda", dtype=torch.float16)
        g = torch.zeros(n, device="cuda", dtype=torch.float16)
        h = host_mapped_zeros(g)
        tg = per_call_ms(lambda: g.add_(new), reps, LOOP)
        th = per_call_ms(lambda: h.add_(new), reps, LOOP)
        # the kernel reads and writes the host gradient: 2 bytes moved per gradient byte
        rows.append(f"accumulate,{2 * n},{tg * 1e3:.2f},{th * 1e3:.2f},{2 * 2 * n / (th * 1e-3) / 1e9:.2f}")
    emit(out, "micro.csv", rows)


def kind_of(name):
    return re.sub(r"\.\d+\.", ".*.", name)


class Probe:
    def __init__(self, model_name, batch, reps):
        model, vocab = build(model_name)
        seq, dflt = SHAPES[model_name]
        self.batch = batch or dflt
        self.seq = seq
        self.model = model.half().cuda().train()
        self.ids = torch.randint(0, vocab, (self.batch, seq), device="cuda")
        self.params = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.gpu = {n: torch.zeros_like(p) for n, p in self.params}
        self.host = {n: host_mapped_zeros(p) for n, p in self.params}
        self.reps = reps
        self.name = model_name

    def step(self):
        loss = self.model(input_ids=self.ids, labels=self.ids).loss
        loss.backward()

    def time_with(self, on_host):
        for n, p in self.params:
            p.grad = self.host[n] if n in on_host else self.gpu[n]
        return timed_ms(self.step, self.reps)

    def kinds(self):
        ks = {}
        for n, p in self.params:
            ks.setdefault(kind_of(n), []).append(n)
        return ks


def run_model(args, model_name, out):
    pr = Probe(model_name, args.batch, args.reps)
    nbytes = {n: p.numel() * p.element_size() for n, p in pr.params}
    total = sum(nbytes.values())
    base = [pr.time_with(set())]
    rows = ["model,batch,seq,kind,tensors,grad_bytes,share,delta_ms,ns_per_byte"]
    cost = {}
    for i, (k, names) in enumerate(sorted(pr.kinds().items())):
        t = pr.time_with(set(names))
        if i % 6 == 5:
            base.append(pr.time_with(set()))
        b = sum(nbytes[n] for n in names)
        cost[k] = (t, b, names)
    base_ms = sorted(base)[len(base) // 2]
    for k, (t, b, names) in sorted(cost.items()):
        d = t - base_ms
        rows.append(f"{model_name},{pr.batch},{pr.seq},{k},{len(names)},{b},{b / total:.4f},"
                    f"{d:.3f},{d * 1e6 / b:.4f}")
    rows.append(f"{model_name},{pr.batch},{pr.seq},baseline,0,0,0,{base_ms:.3f},"
                f"spread {min(base):.3f}..{max(base):.3f} over {len(base)}")
    emit(out, f"kinds-{model_name}.csv", rows)

    # the reserve sweep: every parameter an item of cost (its kind's ns per byte) x bytes
    per_byte = {n: (cost[kind_of(n)][0] - base_ms) / cost[kind_of(n)][1] for n, _ in pr.params}
    by_cost = sorted((n for n, _ in pr.params), key=lambda n: (-per_byte[n], n))
    in_order = [n for n, _ in pr.params]
    srows = ["model,order,reserve,kept_share,iter_ms,predicted_ms"]
    all_host = cost_all = None
    for order_name, order in (("cost", by_cost), ("model", in_order)):
        for r10 in range(0, 11):
            r = r10 / 10
            kept, used = set(), 0
            for n in order:  # first-fit in the order: items that fit the budget are kept
                if used + nbytes[n] <= r * total + 0.5:
                    kept.add(n)
                    used += nbytes[n]
            on_host = {n for n, _ in pr.params} - kept
            t = pr.time_with(on_host)
            pred = base_ms + sum(per_byte[n] * nbytes[n] for n in on_host)
            srows.append(f"{model_name},{order_name},{r:.1f},{used / total:.4f},{t:.3f},{pred:.3f}")
    emit(out, f"sweep-{model_name}.csv", srows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="bert-base,roberta-base,bert-large,gpt2-medium")
    ap.add_argument("--batch", type=int, default=0, help="override every model's batch")
    ap.add_argument("--reps", type=int, default=8, help="timed iterations per point (median)")
    ap.add_argument("--out", default="", help="directory for the CSV files")
    ap.add_argument("--no-micro", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("go_probe.py: no CUDA device")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    print(f"# device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    if not args.no_micro:
        micro(args.out, args.reps)
    for m in args.models.split(","):
        run_model(args, m, args.out)


if __name__ == "__main__":
    main()

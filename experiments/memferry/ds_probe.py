"""ds_probe.py — what DeepSpeed's ZeRO-2 CPU offload does per parameter, timed on this GPU and
host for the four models of MemFerry's Fig. 9 at their memsim batches (experiments/memferry/
README.md). memsim models DeepSpeed's gradients per reduce bucket (one fp32 cast and one copy
to the host per bucket); DeepSpeed's stage_1_and_2.py (cpu_offload, at the gradient
accumulation boundary, for every parameter of a reduced bucket) runs:
    set_norm_for_param_grad_in_gpu:        grad.view(-1).double().norm(2)
    update_overflow_tracker_for_param_grad: gpu_sum = gpu_sum + grad.float().sum()  (overlap_comm)
    async_inplace_copy_grad_to_fp32_buffer_from_gpu:
                                           fp32_partition[off].copy_(grad.float(), non_blocking=True)
                                           param.grad = None
and, in the backward, copies each gradient into the contiguous reduce bucket
(reduce_independent_p_g_buckets_and_remove_grads). This probe re-enacts those calls in plain
PyTorch (DeepSpeed itself is not installed here) and reports, per model:
    fwd_bwd_ms        forward and backward, gradients left in place (median, GPU time)
    bucket_ms         the same with each gradient copied into a bucket by a hook, less fwd_bwd
    tail_ms           the per-parameter tail above after the backward (GPU time to its end)
    tail_host_ms      the host's time issuing that tail (the Python loop alone)
    params            parameter tensors
    tail_per_param_us tail_host_ms per parameter
Usage: python3 ds_probe.py [--out DIR] [--reps N] [--models a,b]. Needs PyTorch with CUDA and
transformers (no network: the models are built from their public configurations)."""
import argparse
import time

import torch

from dha_common import emit, timed_ms

FIG9 = {  # model: (batch, seq), memsim's Fig. 9 defaults
    "bert-base": (8, 512), "bert-large": (64, 512), "roberta-base": (8, 512),
    "gpt2-medium": (32, 1024),
}


def build(name):
    import transformers as tf
    if name == "bert-base":
        m = tf.BertForMaskedLM(tf.BertConfig())
    elif name == "bert-large":
        m = tf.BertForMaskedLM(tf.BertConfig(hidden_size=1024, num_hidden_layers=24,
                                             num_attention_heads=16, intermediate_size=4096))
    elif name == "roberta-base":
        m = tf.RobertaForMaskedLM(tf.RobertaConfig(vocab_size=50265, max_position_embeddings=514,
                                                   type_vocab_size=1))
    else:
        m = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=1024, n_layer=24, n_head=16))
    return m


def probe(name, reps):
    batch, seq = FIG9[name]
    dev = torch.device("cuda")
    model = build(name).to(dev).half()
    model.train()
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq), device=dev)
    params = [p for p in model.parameters() if p.requires_grad]
    pinned = [torch.empty(p.numel(), dtype=torch.float32, pin_memory=True) for p in params]
    bucket = torch.empty(sum(p.numel() for p in params), dtype=torch.float16, device=dev)
    state = {"off": 0}

    def step():
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()

    def clear():
        for p in params:
            p.grad = None

    def plain():
        step()
        clear()

    def hook(p):
        off = state["off"]
        dst = bucket.narrow(0, off, p.numel())
        dst.copy_(p.grad.view(-1))
        p.grad.data = dst.view_as(p.grad)
        state["off"] = off + p.numel()

    def tail():
        norms = []
        gpu_sum = torch.zeros((), device=dev)
        for p, h in zip(params, pinned):
            g = p.grad.view(-1)
            norms.append(g.double().norm(2))
            gpu_sum = gpu_sum + g.float().sum()
            h.copy_(g.float(), non_blocking=True)
            p.grad = None
        return gpu_sum

    t_plain = timed_ms(plain, reps)
    handles = [p.register_post_accumulate_grad_hook(hook) for p in params]

    def bucketed():
        state["off"] = 0
        step()
        clear()
    t_bucket = timed_ms(bucketed, reps)
    for h in handles:
        h.remove()
    # the tail alone: after a backward, GPU time and host issue time
    gpu, host = [], []
    for i in range(reps + 2):
        step()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t0 = time.perf_counter()
        tail()
        t1 = time.perf_counter()
        e.record()
        torch.cuda.synchronize()
        if i >= 2:
            gpu.append(s.elapsed_time(e))
            host.append((t1 - t0) * 1e3)
    gpu.sort()
    host.sort()
    n = len(params)
    tg, th = gpu[len(gpu) // 2], host[len(host) // 2]
    return (f"{name},{batch},{seq},{n},{t_plain:.3f},{t_bucket - t_plain:.3f},{tg:.3f},{th:.3f},"
            f"{th / n * 1e3:.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--models", default=",".join(FIG9))
    a = ap.parse_args()
    rows = ["# " + torch.cuda.get_device_name(0),
            "model,batch,seq,params,fwd_bwd_ms,bucket_ms,tail_ms,tail_host_ms,tail_per_param_us"]
    for name in a.models.split(","):
        rows.append(probe(name, a.reps))
        torch.cuda.empty_cache()
    emit(a.out, "ds_probe.csv", rows)


if __name__ == "__main__":
    main()

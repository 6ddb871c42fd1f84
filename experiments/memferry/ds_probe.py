"""ds_probe.py — what DeepSpeed's ZeRO-2 CPU offload does per parameter, timed on this GPU and
host for the four models of MemFerry's Fig. 9 at their memsim batches (experiments/memferry/
README.md). DeepSpeed's stage_1_and_2.py (cpu_offload, at the gradient accumulation boundary,
reduce_ipg_grads -> copy_grads_in_partition, for every parameter of a reduced bucket, on the
reduction stream with overlap_comm, which first waits for the compute stream) runs:
    set_norm_for_param_grad_in_gpu:        grad.view(-1).double().norm(2)
    update_overflow_tracker_for_param_grad: if _has_inf_or_nan(grad): ...
        _has_inf_or_nan, DeepSpeed 0.3 (2020) to 0.13 (Feb 2024): float(x.float().sum());
        later: a tensor (isnan | isinf).max() that the `if` turns into a bool. Either way the
        host synchronizes with the reduction stream once per parameter.
    async_inplace_copy_grad_to_fp32_buffer_from_gpu:
                                           fp32_partition[off].copy_(grad.float(), non_blocking=True)
                                           param.grad = None
and, in the backward, copies each gradient into the contiguous reduce bucket
(reduce_independent_p_g_buckets_and_remove_grads). This probe re-enacts those calls in plain
PyTorch (DeepSpeed itself is not installed here) and reports, per model (ds_probe.csv):
    fwd_bwd_ms        forward and backward, gradients left in place (median, GPU time)
    bucket_ms         the same with each gradient copied into a bucket by a hook, less fwd_bwd
    tail_ms           the per-parameter tail without the synchronization (GPU time to its end)
    tail_host_ms      the host's time issuing that tail (the Python loop alone)
    params            parameter tensors
    tail_per_param_us tail_host_ms per parameter
    sync_tail_ms      the tail as DeepSpeed runs it: reduction stream, one synchronization per
                      parameter (host time from its start to the last copy's end)
    copy_ms           the fp32 copies alone, back to back on one stream (GPU time)
    pre_us, wait_us, post_us  medians per parameter of the host's time issuing the norm and the
                      overflow kernels, waiting in the synchronization, and from its return to
                      the copy issued (cast, copy, grad = None)
ds_sync_params.csv has the three host times of every parameter of every model (the last rep).
A "tiny" workload (--tiny N: N parameters of 768 elements, no model) gives the per-parameter
cost when the copies take no time.
Usage: python3 ds_probe.py [--out DIR] [--reps N] [--models a,b] [--tiny N]. Needs PyTorch with
CUDA and transformers (no network: the models are built from their public configurations)."""
import argparse
import os
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
    st, per = sync_tail(name, params, pinned, step, reps)
    return (f"{name},{batch},{seq},{n},{t_plain:.3f},{t_bucket - t_plain:.3f},{tg:.3f},{th:.3f},"
            f"{th / n * 1e3:.1f},{st}"), per


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def sync_tail(name, params, pinned, prepare, reps):
    """DeepSpeed's tail with its per-parameter synchronization (module docstring): returns the
    CSV columns sync_tail_ms,copy_ms,pre_us,wait_us,post_us and the per-parameter rows."""
    red = torch.cuda.Stream()
    total, pre, wait, post, rows = [], [], [], [], []
    for r in range(reps + 2):
        prepare()
        torch.cuda.synchronize()
        ph = []
        t0 = time.perf_counter()
        red.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(red):
            for p, h in zip(params, pinned):
                a = time.perf_counter()
                g = p.grad.view(-1)
                g.double().norm(2)
                s = g.float().sum()
                b = time.perf_counter()
                v = float(s)  # the synchronization
                c = time.perf_counter()
                if v != v or v in (float("inf"), float("-inf")):
                    pass
                h.copy_(g.float(), non_blocking=True)
                p.grad = None
                d = time.perf_counter()
                ph.append((p.numel(), (b - a) * 1e6, (c - b) * 1e6, (d - c) * 1e6))
        red.synchronize()
        t1 = time.perf_counter()
        if r >= 2:
            total.append((t1 - t0) * 1e3)
            pre += [x[1] for x in ph]
            wait += [x[2] for x in ph]
            post += [x[3] for x in ph]
            rows = ph
    # the copies alone
    src = [torch.empty(h.numel(), dtype=torch.float32, device="cuda") for h in pinned]

    def copies():
        for x, h in zip(src, pinned):
            h.copy_(x, non_blocking=True)
    cm = timed_ms(copies, reps)
    del src
    per = [f"{name},{i},{n},{a:.1f},{b:.1f},{c:.1f}" for i, (n, a, b, c) in enumerate(rows)]
    return (f"{median(total):.3f},{cm:.3f},{median(pre):.1f},{median(wait):.1f},"
            f"{median(post):.1f}"), per


def tiny(n, reps):
    """n parameters of 768 fp16 elements with gradients, no model: the tail's fixed cost."""
    dev = torch.device("cuda")
    params = [torch.zeros(768, dtype=torch.float16, device=dev, requires_grad=True)
              for _ in range(n)]
    pinned = [torch.empty(768, dtype=torch.float32, pin_memory=True) for _ in range(n)]

    def prepare():
        for p in params:
            p.grad = torch.ones_like(p)
    st, per = sync_tail("tiny", params, pinned, prepare, reps)
    return f"tiny,0,0,{n},,,,,,{st}", per


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--models", default=",".join(FIG9))
    ap.add_argument("--tiny", type=int, default=200, help="parameters of the tiny workload (0: none)")
    a = ap.parse_args()
    rows = ["# " + torch.cuda.get_device_name(0),
            "model,batch,seq,params,fwd_bwd_ms,bucket_ms,tail_ms,tail_host_ms,tail_per_param_us,"
            "sync_tail_ms,copy_ms,pre_us,wait_us,post_us"]
    per = ["model,index,numel,pre_us,wait_us,post_us"]
    for name in filter(None, a.models.split(",")):
        row, p = probe(name, a.reps)
        rows.append(row)
        per += p
        torch.cuda.empty_cache()
    if a.tiny:
        row, p = tiny(a.tiny, a.reps)
        rows.append(row)
        per += p
    emit(a.out, "ds_probe.csv", rows)
    if a.out:  # per parameter: to the file only
        with open(os.path.join(a.out, "ds_sync_params.csv"), "w") as f:
            f.write("\n".join(per) + "\n")


if __name__ == "__main__":
    main()

/* gen_config.h — what the workload-trace generator is asked for (gen_config): the model, the
 * parallel layout, precision, the framework profile and its choices, plain data without
 * code. Shared by the generator (traces/gen.h, its defaults, knob setter and checks) and
 * the hf profile's families (traces/gen_hf.h), which read it without depending on the
 * generator that dispatches to them. Fields and defaults: docs/GENERATOR.md. */
#ifndef MEMSIM_GEN_CONFIG_H
#define MEMSIM_GEN_CONFIG_H

#include <stdint.h>

#include "traces/model.h"
#include "traces/roofline.h"

/* Whose memory behaviour the trace reproduces (docs/GENERATOR.md §9). */
typedef enum gen_framework {
    GEN_FW_GENERIC = 0,   /* the lean program of §3: exactly MEMO's 16bsh skeletal tensors and
                             the transients a fused implementation needs */
    GEN_FW_MEGATRON,      /* Megatron-LM ccfeda47cb + TransformerEngine 1.3 with FlashAttention
                             and bf16 mixed precision: fp32 main gradients, lazily made Adam
                             states, the vocab-parallel cross entropy on fp32 logits, TE's
                             saved and transient tensors, the CP ring's buffers (on TE's cp
                             stream for odd steps), the global all-gather buffer of the output
                             layer, dummy weight gradients */
    GEN_FW_HF             /* PyTorch 2.11 eager + Hugging Face transformers 5 on one GPU, as a
                             user's training loop runs it (docs/GENERATOR.md "The hf
                             profile"): autocast's weight casts, fp32 norms and loss, SDPA,
                             torch.optim.AdamW (foreach); precision picks the dtypes */
} gen_framework;

/* framework hf: the training precision (hf_run.py --precision). */
typedef enum gen_precision {
    GEN_PREC_AUTO = 0,    /* amp */
    GEN_PREC_AMP,         /* fp32 parameters, gradients and AdamW states; forward and loss
                             under torch.autocast("cuda", dtype=torch.bfloat16) */
    GEN_PREC_BF16,        /* the model and AdamW states in bf16, no casts */
    GEN_PREC_FP32         /* everything fp32, no autocast */
} gen_precision;

/* How the attention core (softmax(Q K^T / sqrt(d)) V) runs (docs/GENERATOR.md, "Eager
 * attention"). */
typedef enum gen_attn {
    GEN_ATTN_FLASH = 0,   /* one fused kernel (FlashAttention): no [s, s] tensor is stored */
    GEN_ATTN_EAGER        /* Hugging Face's eager attention under PyTorch autograd
                             (GPT2Attention._attn / BertSelfAttention.forward): the scores
                             [b, heads, s, s] materialized, softmax and dropout out of place,
                             their outputs (and dropout's mask) saved for the backward; what a
                             GPU without FlashAttention (V100, sm_70) and PyTorch < 2.0 run */
} gen_attn;

/* The loss program of a decoder's head. */
typedef enum gen_loss {
    GEN_LOSS_AUTO = 0,    /* the framework's: generic FUSED, megatron MEGATRON */
    GEN_LOSS_FUSED,       /* cross entropy in place on the model-dtype logits (what a fused
                             kernel does; the generic program) */
    GEN_LOSS_MEGATRON,    /* Megatron's vocab_parallel_cross_entropy(logits.float()): an fp32
                             copy of the logits and an out-of-place max subtraction whose
                             result becomes the saved softmax (fp32) */
    GEN_LOSS_MEGATRON_INPLACE /* Megatron-LM from June 2024: the max subtracted in place, so the
                             fp32 copy itself becomes the saved softmax (6 bytes per logit at
                             the peak instead of 10) */
} gen_loss;

typedef struct gen_config {
    model_t model;            /* by value: a registry copy or model_from_dims */
    uint64_t seq;             /* global sequence length s (tokens per sample) */
    uint64_t micro_batch;     /* samples per micro-batch b */
    int tp, cp, dp;           /* tensor (with sequence parallelism), context, data parallel */
    int ep;                   /* expert parallel (MoE models, framework generic or megatron):
                                 the experts sharded over ep of the dp ranks (Megatron's rule:
                                 ep divides dp and the number of experts); 1 = every rank holds
                                 every expert; 0 counts as 1 */
    int dtype_bytes;          /* parameters and activations; bf16 = 2 */
    int grad_bytes;           /* gradient buffer element; default dtype_bytes (ZeRO's 2+2+12
                                 accounting); Megatron's fp32 main grads: 4 */
    int opt_bytes_per_param;  /* optimizer states per parameter: fp32 master + Adam m, v = 12 */
    int iterations;           /* default 2 */
    double attn_bwd_factor;   /* attention backward FLOPs / forward FLOPs (FA2: 2.5) */
    int save_small;           /* 1: also emit the small saved tensors (norm statistics,
                                 attention log-sum-exp) as skeletal; 0 (default) matches
                                 MEMO's 16bsh accounting, which leaves them out */
    int lora;                 /* 1: LoRA fine-tuning: every base weight frozen (no gradient,
                                 no optimizer state); adapters A (in x r), B (r x out) on the
                                 QKV and output projections, trained */
    int lora_rank;            /* r (default 8, peft's); 1..hidden */
    int lora_mlp;             /* 1: adapters on fc1 and fc2 too (DeepSpeed-Chat's
                                 "decoder.layers." adapts every linear); default 0 (peft's
                                 attention-only default) */
    int zero3;                /* 1: ZeRO-3: parameters, gradients and optimizer states
                                 sharded 1/dp at setup; each group's parameters all-gathered
                                 into a fresh buffer before its forward and again before its
                                 backward, freed after use; a full-size gradient buffer per
                                 layer backward, reduce-scattered into the shard and freed */
    int offload;              /* 1: ZeRO-Offload: optimizer states and fp32 master on the host
                                 (not in the GPU trace: meta host_opt_bytes); gradients copied
                                 to the host after the backward; Adam on the host (ops named
                                 "*.optim.host"), updated fp16 parameters copied back */
    int hf_loss;              /* 1: the loss as HF transformers computes it (tp = cp = 1,
                                 decoders): log-softmax of the logits saved, nll and
                                 log-softmax gradients as full [T, V] tensors, the logits held
                                 by the model's outputs; 0 (default): Megatron's fused
                                 vocab-parallel cross entropy, in place on the logits */
    int hf_loss_shift;        /* with hf_loss: transformers <= 4.45's contiguous copy of the
                                 shifted logits (and the zero-filled full-size gradient of the
                                 slice in the backward) */
    int hf_loss_fp32;         /* with hf_loss: logits upcast to fp32 first (LLaMA in 4.3x;
                                 every model from 4.46 on) */
    int hf_logits_hold;       /* with hf_loss: 0 the logits are freed at the end of the
                                 backward; 1 at the end of the next iteration's forward (a
                                 training loop that reassigns `outputs = model(...)`) */
    int framework;            /* gen_framework (default GEN_FW_GENERIC) */
    int dist_opt;             /* framework megatron: 1 = --use-distributed-optimizer (fp32
                                 master and Adam states sharded over dp*cp, gradients
                                 reduce-scattered, parameters all-gathered); 0 (Megatron's
                                 default) = full states on every rank, gradients all-reduced
                                 over dp*cp */
    int loss;                 /* gen_loss (default GEN_LOSS_AUTO) */
    int attn_impl;            /* gen_attn (default GEN_ATTN_FLASH); eager needs framework
                                 generic, cp = 1 and kv_heads = heads */
    int attn_dropout;         /* eager: 1 (default) = attention dropout > 0 (HF's defaults:
                                 attn_pdrop 0.1 for GPT-2, attention_probs_dropout_prob 0.1
                                 for BERT): a 1-byte mask and the dropped probabilities saved;
                                 0 = p 0: dropout returns its input, nothing more saved */
    int attn_softmax_saves_input; /* eager: 1 (default) = PyTorch <= 1.10's autograd, whose
                                 softmax backward node also keeps its input (the masked
                                 scores; pytorch/pytorch#64000), as the paper's PyTorch 1.9;
                                 0 = later releases: only the output */
    int precision;            /* framework hf: gen_precision (default auto = amp) */
    double moe_imbalance;     /* MoE layers: framework hf, tokens of the busiest expert over
                                 the mean; generic and megatron with ep > 1, rows this
                                 (the busiest) rank receives over the mean (>= 1; 0 or 1 =
                                 balanced routing) */
    roof_params roof;         /* op-time knobs */
} gen_config;

#endif

/* gen.h — the workload-trace generator: from a model shape, a parallel layout (TP with
 * sequence parallelism, CP, DP with a ZeRO-1 sharded optimizer or ZeRO-3 sharded parameters)
 * and a machine, the in-memory trace of ONE rank's training iterations in program order:
 * setup allocations, then per iteration the forward, backward and optimizer ops with every
 * tensor's alloc and free, FLOPs, bytes and a roofline duration. Fine-tuning patterns
 * (GMLake §5): LoRA adapters on frozen weights, ZeRO-3, ZeRO-Offload of the optimizer. A
 * "megatron" profile reproduces Megatron-LM + TransformerEngine's allocations. Used by
 * `memsim gen`, the planners' tests and the experiments. What it emits and why:
 * docs/GENERATOR.md. */
#ifndef MEMSIM_GEN_H
#define MEMSIM_GEN_H

#include "base/knobtab.h"
#include "traces/gen_config.h"
#include "traces/machine.h"
#include "traces/models.h"
#include "traces/roofline.h"
#include "traces/trace.h"

#define GEN_VERSION "memsim-gen-1"

/* Defaults for everything but the model: seq = 0 (the model's default_seq is taken),
 * micro_batch 1, tp = cp = dp = 1, bf16, grad_bytes 0 (= dtype_bytes; framework megatron:
 * 4), 12 optimizer bytes, 2 iterations, attn_bwd_factor 2.5; lora, zero3, offload off,
 * lora_rank 8; framework generic, loss auto, dist_opt 0; attn_impl flash (with eager:
 * attn_dropout 1, attn_softmax_saves_input 1). */
void gen_config_default(gen_config *c);

/* Sets one knob by name, as a command line hands them over ("--gen KEY=VALUE"): a key of
 * gen_knob_table (its rows give each knob's values, default and meaning; docs/GENERATOR.md
 * shows them as a table generated from it). MS_ERR_INVALID naming the key for an unknown key
 * or a bad value; the combination is checked later by gen_validate. */
ms_status gen_config_set(gen_config *c, const char *key, const char *value, ms_error *err);

/* The keys gen_config_set accepts, comma-separated, an enum's values in parentheses (for
 * help texts), from gen_knob_table. */
const char *gen_config_keys(void);
/* The generator's knob table (base/knobtab.h). */
extern const knobtab gen_knob_table;

/* Checks the configuration: all sizes positive, tp divides heads, kv heads (or kv heads
 * divide tp: replicated) and ffn; cp divides seq; tp divides the per-rank sequence (sequence
 * parallelism); seq within a learned position table; every tensor size and FLOP count fits.
 * MS_ERR_INVALID / MS_ERR_UNSUPPORTED with a message naming the field. */
ms_status gen_validate(const gen_config *c, ms_error *err);

/* Generates the trace. m may be NULL: durations are then -1 (unknown) and meta machine is
 * "none". On error *out is NULL and nothing leaks. */
ms_status gen_trace(const gen_config *c, const machine_t *m, trace_t **out, ms_error *err);
/* The trace gen_trace makes, made as a trace of like's structure (traces/trace_shape.h):
 * each record compared with like's at its place instead of checked and indexed afresh, the
 * numbers the generator's own. MS_OK with *out; MS_ERR_LIMIT with *out NULL (err untouched
 * or not: the caller generates afresh, which tells why) when the trace would differ from
 * like's in structure or cannot be made. */
ms_status gen_trace_like(const gen_config *c, const machine_t *m, const trace_t *like,
                         trace_t **out, ms_error *err);

/* Skeletal activation bytes of one transformer layer on this rank (the sum the generator
 * emits for that layer): 16*b*(s/cp)*h*dtype/tp for an MHA model with f = 4h, plus with LoRA
 * each adapter's saved [T, r] intermediate, plus with save_small or framework megatron the
 * fp32 norm statistics and attention log-sum-exp, plus with eager attention the saved
 * [b, heads, s, s] tensors (gen_layer_eager_attn_bytes). */
uint64_t gen_layer_skel_bytes(const gen_config *c);

/* Eager attention's saved [b, heads/tp, s, s] bytes of one layer: the softmax output (D
 * bytes an element), with attn_dropout its mask (1) and output (D), with
 * attn_softmax_saves_input the masked scores (D); 0 with flash attention. */
uint64_t gen_layer_eager_attn_bytes(const gen_config *c);

/* Parameters of one transformer layer on this rank before any DP sharding (TP-local): all of
 * them, and those trained (the adapters under LoRA, else all). */
uint64_t gen_layer_params(const gen_config *c);
uint64_t gen_layer_trainable_params(const gen_config *c);

#endif

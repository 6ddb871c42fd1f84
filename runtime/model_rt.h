/* model_rt.h — a GPT model trained on the GPU with the runtime's real kernels
 * (runtime/kernels.h): pre-norm layers (LayerNorm, fused QKV with bias, causal flash
 * attention, projection, GeLU MLP, residual adds), tied embeddings, a final norm, the LM head
 * with softmax cross-entropy, AdamW; bf16 weights and activations, fp32 master weights,
 * moments and gradients. One training step runs keep-all (every activation saved) or
 * full-recompute (only each layer's input saved; the backward replays the layer's forward
 * ops first). Weights are seeded random, data a seeded token stream. Also the one-layer
 * benchmark (forward and backward of a keep-all layer, per-op times, MFU), and the op
 * dispatcher and one-stream schedule walker that run generated traces' ops with these
 * kernels. Used by runtime/rt_run.c (`memsim run --math real`) and tests/test_kernels.c. */
#ifndef MEMSIM_MODEL_RT_H
#define MEMSIM_MODEL_RT_H

#include <stddef.h>
#include <stdint.h>

#include "memory/alloc.h"
#include "planners/plan.h"
#include "planners/schedule.h"
#include "runtime/kernels.h"
#include "runtime/rt_check.h"
#include "runtime/rt_exec.h"
#include "traces/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrt_config {
    int layers, hidden, heads, ffn, vocab;
    int seq, batch;           /* tokens per step T = seq * batch */
    uint64_t seed;            /* weights */
    float init_std;           /* 0.02; proj and fc2 scaled by 1/sqrt(2 layers) as GPT-2 */
    float ln_eps;             /* 1e-5 */
    kn_adamw_cfg adam;        /* step is counted by the model */
} mrt_config;

/* A tiny GPT: 2 layers, hidden 128, 2 heads, ffn 512, vocab 512, seq 128, batch 2; AdamW
 * lr 2e-3, no weight decay. */
void mrt_config_default(mrt_config *c);

typedef struct mrt_model mrt_model;

/* Checks the shape (hidden = heads * 64 or 128, seq a multiple of 128, widths multiples of
 * 8), allocates everything and initializes the weights. stream: a cudaStream_t or NULL. */
rt_status mrt_new(const mrt_config *c, void *stream, mrt_model **out, ms_error *err);
void mrt_free(mrt_model *m);
size_t mrt_param_count(const mrt_model *m);   /* padded vocabulary rows included */
size_t mrt_tokens(const mrt_model *m);        /* T */
uint64_t mrt_device_bytes(const mrt_model *m);

/* The next inputs: T token ids and T labels (the following token; < 0: ignored). */
rt_status mrt_set_batch(mrt_model *m, const int32_t *tokens, const int32_t *labels, ms_error *err);

/* One step: zero the gradients, forward, loss, backward (recompute: replaying each layer's
 * forward before its backward), and with update the AdamW step. Waits for the GPU; *loss is
 * the mean over the labelled tokens. */
rt_status mrt_step(mrt_model *m, int recompute, int update, float *loss, ms_error *err);

/* Copies of the fp32 gradients / master weights (mrt_param_count floats) to the host. */
rt_status mrt_grads(const mrt_model *m, float *host, ms_error *err);
rt_status mrt_master(const mrt_model *m, float *host, ms_error *err);

/* The seeded token stream: a first-order Markov chain over the vocabulary in which each token
 * has 4 successors (drawn once from seed); so the best achievable loss is about ln 4 = 1.386
 * against ln V at the start. Fills batch sequences of seq tokens and their labels for step
 * `step` (every step draws fresh sequences). */
void mrt_stream(uint64_t seed, uint64_t step, int vocab, int seq, int batch, int32_t *tokens,
                int32_t *labels);

/* ---- generated traces with real kernels ---- */

/* The op dispatcher: maps each op of a generated GPT trace (traces/gen.c, docs/GENERATOR.md
 * §3) by name to the real kernels, its tensors given as device addresses (the allocator's
 * blocks). Supported traces: a GPT model (LayerNorm, GeLU, biases, tied embeddings, full
 * multi-head attention) with tp = cp = dp = 1, no LoRA / ZeRO-3 / offload / HF loss, fp32
 * gradients (gen grad_bytes 4) and the small saved tensors (gen save_small 1: the norm
 * statistics and the attention log-sum-exp). Parameters are initialized (seeded) the first
 * time an op reads them, the optimizer's fp32 master copy at a group's first AdamW step;
 * tokens and labels come from mrt_stream(seed, iteration). The per-token log-sum-exp of the
 * loss lives in the dispatcher's own T floats (the trace keeps only the logits). */
typedef struct mrt_ops mrt_ops;
rt_status mrt_ops_new(const trace_t *t, uint64_t seed, mrt_ops **out, ms_error *err);
void mrt_ops_free(mrt_ops *o);
/* The iteration the next ops belong to (the executor's `mark iter`). */
void mrt_ops_set_iter(mrt_ops *o, int iter);
/* AdamW's knobs (step is counted per group); default: mrt_config_default's. */
void mrt_ops_set_adam(mrt_ops *o, const kn_adamw_cfg *c);
/* Threads of the host optimizer steps of an offload trace (rt_pool_new's count: 0 = the
 * online CPUs less one, the default); 0 when the trace has no host steps. */
rt_status mrt_ops_set_host_threads(mrt_ops *o, int threads, ms_error *err);
int mrt_ops_host_threads(const mrt_ops *o);
/* Enqueues op on stream (a cudaStream_t); in_addr[i] / out_addr[j] are the device addresses
 * of op->in[i] / op->out[j]. RT_ERR_INVALID names an op that has no kernel here. */
rt_status mrt_ops_run(mrt_ops *o, void *stream, const trace_op *op, const uint64_t *in_addr,
                      const uint64_t *out_addr, ms_error *err);
/* mrt_ops_run for an op writing gradient buffers split by module (rt_exec_opts
 * compute_split): out_host[j] the mapped address of output j's whole host home, 0 when it is
 * not split. */
rt_status mrt_ops_run_split(mrt_ops *o, void *stream, const trace_op *op, const uint64_t *in_addr,
                            const uint64_t *out_addr, const uint64_t *out_host, ms_error *err);
/* Takes plan p's module-level host gradients (lower_dha's grad_host.N knobs: parameters
 * whose gradients lie in pinned host memory while the rest of their buffer stays on the
 * GPU). Such a buffer is laid out with the GPU parameters' gradients first, then the host
 * ones (each in group order), in the device block and the host home alike: the block is the
 * home's prefix, the one gradient copy of lower_dha brings it home, and the host step reads
 * every gradient at its place. Call before running; plans without the knobs change nothing.
 * RT_ERR_INVALID for an id that is not a parameter of the trace. */
rt_status mrt_ops_set_plan(mrt_ops *o, const plan_t *p, ms_error *err);
/* MEMO's token-wise partial replay of forward op (schedule field replay_frac = frac): runs
 * it on the token rows [(1 - frac) T, T) only (layer norm with its two statistics arrays,
 * the linear GEMMs, residual adds, GeLU; anything else, attention included, is refused with
 * a message, as is a frac * T that is not a whole number). in_part[j] / out_part[j]: the
 * operand's block holds only those rows (a replay transient), else it is full size and is
 * offset by (1 - frac) T rows in each of its arrays; weights are used as they are. */
rt_status mrt_ops_run_rows(mrt_ops *o, void *stream, const trace_op *op, const uint64_t *in_addr,
                           const uint64_t *out_addr, const uint8_t *in_part,
                           const uint8_t *out_part, double frac, ms_error *err);
/* The token-row layout of trace tensor `tensor`: 1 with *arrays arrays of T rows of
 * *row_bytes (norm statistics: 2 arrays of fp32), 0 for weights, attention's per-head
 * log-sum-exp and anything whose bytes are not token rows. */
int mrt_ops_token_rows(const mrt_ops *o, uint64_t tensor, unsigned *arrays,
                       uint64_t *row_bytes);
/* The two as rt_exec_opts hooks (ctx: the mrt_ops). */
rt_status mrt_ops_rows_hook(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                            const uint64_t *out, const uint8_t *in_part,
                            const uint8_t *out_part, double frac, ms_error *err);
int mrt_ops_token_rows_hook(void *ctx, uint64_t tensor, unsigned *arrays, uint64_t *row_bytes);
/* DHA and host-optimizer plans (planners/memferry/lower_dha.c) on offload traces (gen offload 1):
 * mrt_ops_host_init seeds a parameter (as its first read would) or zeroes a gradient in its
 * pinned host home, at dev_addr (the mapped address), on stream; other tensors are left.
 * mrt_ops_host_prepare, for a `<group>.optim.host` op, lists the host ranges the step uses
 * (the group's gradient buffer, the host optimizer state dha_synth_id(0), the parameters)
 * and counts the group's step into *tag; -1 for any other op. mrt_ops_host_compute runs the
 * step on those host addresses (any thread; it touches only the group's host memory):
 * kn_adamw_host per parameter, then the host gradient zeroed. */
rt_status mrt_ops_host_init(mrt_ops *o, void *stream, uint64_t tensor, uint64_t dev_addr,
                            uint64_t bytes, ms_error *err);
int mrt_ops_host_prepare(mrt_ops *o, const trace_op *op, uint64_t *ids, size_t max,
                         int64_t *tag, ms_error *err);
rt_status mrt_ops_host_compute(mrt_ops *o, const trace_op *op, int64_t tag,
                               const uint64_t *addr, const uint64_t *bytes, size_t n,
                               ms_error *err);
/* The three as rt_exec_opts hooks (ctx: the mrt_ops). */
rt_status mrt_ops_host_init_hook(void *ctx, void *stream, uint64_t tensor, uint64_t dev_addr,
                                 uint64_t bytes, ms_error *err);
int mrt_ops_host_prepare_hook(void *ctx, const trace_op *op, uint64_t *ids, size_t max,
                              int64_t *tag, ms_error *err);
rt_status mrt_ops_host_compute_hook(void *ctx, const trace_op *op, int64_t tag,
                                    const uint64_t *addr, const uint64_t *bytes, size_t n,
                                    ms_error *err);
/* Sets every real-kernel hook of the executor to this dispatcher (ctx o): each compute
 * action's op (mrt_ops_run), iteration marks, token-row replays, host-resident operands and
 * host optimizer steps; no spin credit. The one wiring memsim run and the GPU tests share. */
void mrt_ops_exec_hooks(mrt_ops *o, rt_exec_opts *x);
/* Mean loss of iterations 0 .. n-1 (waits for the device). */
rt_status mrt_ops_losses(mrt_ops *o, float *host, int n, ms_error *err);

#define MRT_MAX_ITERS 64

typedef struct mrt_op_time {
    size_t action;
    int64_t op;
    double req_us, meas_us;   /* the schedule's (modelled) and the measured duration */
    int recompute;
} mrt_op_time;

typedef struct mrt_sched_result {
    int n_iter;
    double iter_ms[MRT_MAX_ITERS];      /* measured from each `mark iter` to the next / end */
    double nominal_ms[MRT_MAX_ITERS];   /* sum of the compute actions' dur_us */
    float loss[MRT_MAX_ITERS];
    double setup_ms;                    /* before the first iteration */
    mrt_op_time *ops;                   /* every compute action, in order */
    size_t n_ops;
    alloc_stats astats;
} mrt_sched_result;

/* Executes a one-stream schedule (every action on the compute stream: keep-all and
 * recomputation plans) with real kernels: allocations through allocator `allocator` over
 * backend be (the executor's allocator code), each compute action through the dispatcher,
 * events around every compute action and at every `mark iter`. RT_ERR_INVALID for a schedule
 * with copies or other streams (those run through the executor; docs/RUNTIME.md). Device
 * memory is given back before it returns. adam: the optimizer's knobs (NULL: the tiny model's,
 * lr 2e-3 without weight decay; larger models want less). */
rt_status mrt_sched_run(const schedule_t *s, const trace_t *t, const mb_backend *be,
                        const char *allocator, const alloc_config *cfg, uint64_t seed,
                        const kn_adamw_cfg *adam, mrt_sched_result *r, ms_error *err);
void mrt_sched_result_release(mrt_sched_result *r);

/* ---- the one-layer benchmark ---- */

typedef struct mrt_bench_cfg {
    int hidden, heads, ffn, seq, batch;
    int warmup, iters;        /* timed repetitions of forward + backward (median reported) */
    uint64_t seed;
} mrt_bench_cfg;

#define MRT_BENCH_OPS 32

typedef struct mrt_bench_op {
    char name[24];
    double ms;                /* median over the per-op runs */
    double flops;             /* executed FLOPs (matrix products), 0 for memory-bound ops */
} mrt_bench_op;

typedef struct mrt_bench_result {
    double model_flops;       /* MEMO §5.1 for one layer: 6 T P_layer + 6 b h s^2 */
    double exec_flops;        /* executed: GEMMs 3x forward, attention 2 + 7 causal products */
    double median_ms, min_ms, max_ms;
    int n_times;
    double times_ms[64];      /* every timed repetition, in order */
    int n_ops;
    mrt_bench_op ops[MRT_BENCH_OPS];
    double ops_sum_ms;
    uint64_t device_bytes;
} mrt_bench_result;

void mrt_bench_default(mrt_bench_cfg *c);   /* hidden 4096, 32 heads, ffn 16384, 8K x 1 */
/* Runs forward + backward of one keep-all layer on random inputs: warm-up, then iters timed
 * with events around each repetition, then 5 repetitions with events between the ops. */
rt_status mrt_bench_layer(const mrt_bench_cfg *c, void *stream, mrt_bench_result *r, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

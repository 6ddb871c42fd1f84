/* model_rt.h — a GPT model trained on the GPU with the runtime's real kernels
 * (runtime/kernels.h): pre-norm layers (LayerNorm, fused QKV with bias, causal flash
 * attention, projection, GeLU MLP, residual adds), tied embeddings, a final norm, the LM head
 * with softmax cross-entropy, AdamW; bf16 weights and activations, fp32 master weights,
 * moments and gradients. One training step runs keep-all (every activation saved) or
 * full-recompute (only each layer's input saved; the backward replays the layer's forward
 * ops first), and its layer timed alone (the one-layer benchmark: forward and backward of a
 * keep-all layer, per-op times, MFU). Weights are seeded random, data a seeded token stream.
 * Generated traces run on these kernels through model_rt_ops.h and model_rt_walk.h. Used by runtime/rt_run.c (`memsim run --math real`) and tests/test_kernels.c. */
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
/* The model's GEMMs with the algorithms of a file (kn_gemm_algos_load). */
rt_status mrt_load_gemm_algos(mrt_model *m, const char *path, ms_error *err);

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

/* ---- the one-layer benchmark ---- */

typedef struct mrt_bench_cfg {
    int hidden, heads, ffn, seq, batch;
    int warmup, iters;        /* timed repetitions of forward + backward (median reported) */
    uint64_t seed;
    kn_attn_impl attn;        /* attention kernels (KN_ATTN_AUTO: the device's) */
    const char *gemm_algos;   /* NULL, or a file of GEMM algorithms (kn_gemm_algos_load) */
    const char *tune_gemms;   /* NULL, or: a first pass measures the GEMMs, written here */
    int attn_qchunk;          /* > 0: the attention backward's query chunk (kn_ctx_set_attn_qchunk) */
} mrt_bench_cfg;

#define MRT_BENCH_OPS 32

typedef struct mrt_bench_op {
    char name[24];
    double ms;                /* median over the per-op runs */
    double flops;             /* executed FLOPs (matrix products), 0 for memory-bound ops */
} mrt_bench_op;

typedef struct mrt_bench_result {
    double model_flops;       /* MEMO §5.1 for one layer: 6 T P_layer + 6 b h s^2 */
    double exec_flops;        /* executed: GEMMs 3x forward, attention 2 + bwd_products causal products */
    int bwd_products;         /* causal products of the attention backward: 5 or 7 */
    double median_ms, min_ms, max_ms;
    int n_times;
    kn_attn_impl attn;        /* the attention kernels that ran */
    double times_ms[64];      /* every timed repetition, in order */
    int n_ops;
    mrt_bench_op ops[MRT_BENCH_OPS];
    double ops_sum_ms;
    uint64_t device_bytes;
    int qchunk;               /* the attention backward's query chunk in tiles (0: one) */
    int n_gemms;              /* the GEMM algorithms in use (tuned or read), by shape */
    kn_gemm_info gemms[MRT_BENCH_OPS];
} mrt_bench_result;

void mrt_bench_default(mrt_bench_cfg *c);   /* hidden 4096, 32 heads, ffn 16384, 8K x 1 */
/* Runs forward + backward of one keep-all layer on random inputs: warm-up, then iters timed
 * with events around each repetition, then 5 repetitions with events between the ops. */
rt_status mrt_bench_layer(const mrt_bench_cfg *c, void *stream, mrt_bench_result *r, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

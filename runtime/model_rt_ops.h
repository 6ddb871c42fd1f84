/* model_rt_ops.h — the op dispatcher for generated traces: runs each op of a trace with the
 * runtime's real kernels (runtime/kernels.h) on the addresses the executor gives it, with
 * the parameters, inputs and host optimizer groups the trace implies, as rt_exec_opts hooks.
 * Implemented by runtime/model_rt_ops.c; used by runtime/rt_run.c (`memsim run --math
 * real`), the one-stream walker (model_rt_walk.h) and the tests. */
#ifndef MEMSIM_MODEL_RT_OPS_H
#define MEMSIM_MODEL_RT_OPS_H

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

/* The most iterations a run with real kernels keeps losses and times of. */
#define MRT_MAX_ITERS 64

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
/* The ops' GEMMs with the algorithms of a file (kn_gemm_algos_load). */
rt_status mrt_ops_load_gemm_algos(mrt_ops *o, const char *path, ms_error *err);
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

#ifdef __cplusplus
}
#endif

#endif

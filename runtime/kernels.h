/* kernels.h — the transformer kernels the GPU runtime trains with: embedding (and its
 * scatter-add backward), layer norm, GEMMs through cuBLAS (bf16 in, fp32 compute), causal
 * attention that never materializes the s x s scores (online softmax, log-sum-exp saved) with
 * its backward, GeLU, residual adds, softmax cross-entropy tiled over the vocabulary, column
 * sums (bias and norm-weight gradients) and AdamW on the GPU and on the host. Storage is bf16
 * (kn_bf16 holds the bits), accumulation fp32; every matrix is row-major. Each kernel has a
 * CPU reference in runtime/kernels_ref.h. Used by runtime/model_rt.c (the GPT model),
 * runtime/rt_run.c (`memsim run --math real`) and tests/test_kernels.c.
 *
 * Every function enqueues work on the context's stream and returns at once; it checks its
 * arguments (RT_ERR_INVALID) and the launch (RT_ERR_CUDA), filling err at the failing call.
 * Nothing here uses atomics: every kernel is deterministic, so the same inputs give the same bits
 * (cuBLAS is deterministic for one handle, stream and workspace). Shape limits: vectorized
 * kernels need widths that are multiples of 8 and 16-byte aligned pointers; attention needs
 * head dim 64 or 128 and a sequence length that is a multiple of 128. */
#ifndef MEMSIM_KERNELS_H
#define MEMSIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_check.h"
#include "runtime/rt_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t kn_bf16;   /* bfloat16 bits */

/* A kernel context: the stream, a cuBLAS handle and its workspace, and scratch memory for
 * the two-pass column reductions and attention's backward. One per stream. */
typedef struct kn_ctx kn_ctx;

/* stream: a cudaStream_t (NULL: the default stream). */
rt_status kn_ctx_new(void *stream, kn_ctx **out, ms_error *err);
void kn_ctx_free(kn_ctx *k);
rt_status kn_ctx_set_stream(kn_ctx *k, void *stream, ms_error *err);
void *kn_ctx_stream(const kn_ctx *k);
/* Makes sure the scratch holds a problem of up to rows x cols and b*h*s attention rows of
 * sequences of up to attn_seq tokens, so that no allocation happens while kernels are timed. */
rt_status kn_ctx_reserve(kn_ctx *k, size_t rows, size_t cols, size_t attn_rows, size_t attn_seq,
                         ms_error *err);

/* ---- embedding ---- */
/* out[t][:] = wte[tok[t]][:]; tok in [0, rows of wte). */
rt_status kn_embed_fwd(kn_ctx *k, kn_bf16 *out, const int32_t *tok, const kn_bf16 *wte,
                       size_t T, size_t h, ms_error *err);
/* dwte[tok[t]][:] += dout[t][:] for every t, each id's rows summed in token order (no
 * atomics): the ids sorted, one CTA per distinct id (runtime/embed_bwd.h); rows that are not
 * whole 16-byte vectors take a slower kernel with one thread per column. */
rt_status kn_embed_bwd(kn_ctx *k, float *dwte, const int32_t *tok, const kn_bf16 *dout,
                       size_t T, size_t h, ms_error *err);

/* ---- layer norm (over the last dim h) ---- */
/* y = (x - mean) * rstd * g + b; mean and rstd (fp32, [T]) are saved for the backward. */
rt_status kn_ln_fwd(kn_ctx *k, kn_bf16 *y, float *mean, float *rstd, const kn_bf16 *x,
                    const kn_bf16 *g, const kn_bf16 *b, size_t T, size_t h, float eps,
                    ms_error *err);
/* dx = the norm's input gradient (+ dres when not NULL: the residual branch); dg, db
 * (fp32) accumulate sum_t dy * xhat and sum_t dy. dx may alias dres. */
rt_status kn_ln_bwd(kn_ctx *k, kn_bf16 *dx, float *dg, float *db, const kn_bf16 *dy,
                    const kn_bf16 *x, const kn_bf16 *g, const float *mean, const float *rstd,
                    const kn_bf16 *dres, size_t T, size_t h, ms_error *err);

/* ---- GEMM through cuBLAS ---- */
/* C[M,N] = op(A) op(B) + beta * C, row-major, op(X) = X^T when tX; A, B bf16, C bf16 or fp32
 * (c_fp32), fp32 accumulation. lda etc. are row strides in elements. */
rt_status kn_gemm(kn_ctx *k, int ta, int tb, size_t M, size_t N, size_t K, const kn_bf16 *A,
                  size_t lda, const kn_bf16 *B, size_t ldb, float beta, void *C, size_t ldc,
                  int c_fp32, ms_error *err);

/* GEMM algorithms chosen by measurement (docs/RUNTIME.md "GEMM algorithms"). With tuning on,
 * each GEMM shape not yet chosen is timed at its first call, cuBLAS's default against
 * cuBLASLt's heuristic candidates, on that call's operands: its C is overwritten (and
 * accumulated into repeatedly where beta != 0), so tuning is for a pass whose results are
 * thrown away. The choices are kept per shape and used by every later kn_gemm of the shape;
 * a file carries them to other runs (the same cuBLASLt version and device only). */
typedef struct kn_gemm_info {
    int ta, tb, c_fp32, beta1, bias;
    size_t M, N, K;
    double default_ms, best_ms;   /* medians measured at tuning (read back from a file) */
    int candidates, chosen;       /* chosen: the heuristic's candidate in use, -1: the default */
} kn_gemm_info;
/* margin: a candidate replaces the default only when that fraction faster (KN_GEMM_TUNE_MARGIN;
 * below 0, the fastest candidate is taken even where the default is faster: the tests' way to
 * run cuBLASLt's algorithms on small shapes). */
#define KN_GEMM_TUNE_MARGIN 0.02
void kn_ctx_set_gemm_tune(kn_ctx *k, int on, double margin);
size_t kn_gemm_algos_count(const kn_ctx *k);
void kn_gemm_algo_info(const kn_ctx *k, size_t i, kn_gemm_info *out);
/* Written atomically; loading checks the version, cuBLASLt and device lines and each algorithm
 * (cuBLASLt's own check), naming the file and line of what is wrong (RT_ERR_INVALID). */
rt_status kn_gemm_algos_save(const kn_ctx *k, const char *path, ms_error *err);
rt_status kn_gemm_algos_load(kn_ctx *k, const char *path, ms_error *err);

/* C[M,N] = op(A) op(B) + bias[N] broadcast over the rows, bf16 C: one GEMM with cuBLASLt's
 * bias epilogue where the shape's tuned algorithm is one (GEMM algorithms above), else
 * cuBLAS's default GEMM and kn_bias_add. N, ldc multiples of 8; C, bias 16-byte aligned. */
rt_status kn_gemm_bias(kn_ctx *k, int ta, int tb, size_t M, size_t N, size_t K,
                       const kn_bf16 *A, size_t lda, const kn_bf16 *B, size_t ldb, kn_bf16 *C,
                       size_t ldc, const kn_bf16 *bias, ms_error *err);

/* ---- element-wise ---- */
/* y[t][c] += bias[c] for c < n, rows of stride ld. */
rt_status kn_bias_add(kn_ctx *k, kn_bf16 *y, const kn_bf16 *bias, size_t T, size_t n,
                      size_t ld, ms_error *err);
/* out = a + b (+ bias[c] when bias is not NULL). out may alias a or b. */
rt_status kn_add(kn_ctx *k, kn_bf16 *out, const kn_bf16 *a, const kn_bf16 *b,
                 const kn_bf16 *bias, size_t T, size_t n, ms_error *err);
/* GeLU, tanh form (GPT-2, Megatron): y = gelu(x + bias); bias may be NULL. */
rt_status kn_gelu_fwd(kn_ctx *k, kn_bf16 *y, const kn_bf16 *x, const kn_bf16 *bias, size_t T,
                      size_t n, ms_error *err);
/* dx = dy * gelu'(x + bias); dx may alias dy. */
rt_status kn_gelu_bwd(kn_ctx *k, kn_bf16 *dx, const kn_bf16 *dy, const kn_bf16 *x,
                      const kn_bf16 *bias, size_t T, size_t n, ms_error *err);
/* out[c] += sum_t a[t][c] (fp32), in a fixed order (two passes through the scratch). */
rt_status kn_colsum(kn_ctx *k, float *out, const kn_bf16 *a, size_t T, size_t n, ms_error *err);

/* ---- causal attention ---- */
/* Implementations: wgmma with TMA (FlashAttention-3's producer / consumer warpgroups, the
 * forward's consumers taking turns, the backward at head dim 128 in one kernel with dq summed
 * in a fixed order, each query tile's dQ product issued beside the next tile's dK, a head's
 * query range in chunks where its dq accumulator exceeds half the L2, at head dim 64 in two
 * kernels; runtime/attn_sm90.h), chosen on devices of compute capability 9.0;
 * wgmma-onepass: the same without query chunks (the default until 2026-12-04, the same
 * bits); other forms kept for comparison (inline: the one pass with
 * each tile's dQ issued beside its own dK, and two kernels where a head's fp32 dq does not fit
 * L2, the default until 2026-12-04, the same bits as wgmma's where it runs the one pass;
 * two: the backward always in two kernels, the default until 2026-12-03;
 * basic: the forward's consumers each in sequence, the two-kernel backward; overlap: two's
 * backward with its products kept in flight while each warpgroup computes P and dS, the same
 * bits as two's); and mma.sync (FlashAttention-2's loop
 * order) elsewhere. All deterministic, the same results within rounding (not bit for bit:
 * the products are summed in other orders). */
typedef enum kn_attn_impl {
    KN_ATTN_AUTO = 0, KN_ATTN_MMA, KN_ATTN_WGMMA, KN_ATTN_WGMMA_BASIC, KN_ATTN_WGMMA_ONEPASS,
    KN_ATTN_WGMMA_OVERLAP, KN_ATTN_WGMMA_TWO, KN_ATTN_WGMMA_INLINE
} kn_attn_impl;
/* KN_ATTN_AUTO: the device's; the wgmma ones on another device: RT_ERR_INVALID. */
rt_status kn_ctx_set_attn(kn_ctx *k, kn_attn_impl impl, ms_error *err);
/* The L2 size the attention backward's rules assume (the device's; a test sets a smaller one
 * to run the query-chunked one pass at short lengths: attn90_bwd_qchunk). */
size_t kn_ctx_l2_bytes(const kn_ctx *k);
void kn_ctx_set_l2_bytes(kn_ctx *k, size_t bytes);
kn_attn_impl kn_ctx_attn(const kn_ctx *k);
/* The one-pass backward's query chunk forced to `tiles` query tiles of 64 (even; 0: the L2
 * rule's, attn90_bwd_qchunk), where the kernels in use chunk at all: a knob for measuring. */
rt_status kn_ctx_set_attn_qchunk(kn_ctx *k, int tiles, ms_error *err);
const char *kn_attn_name(kn_attn_impl impl);
/* The causal products the backward of the kernels in use computes for s tokens at head dim
 * d: 5 in one pass (dq through ordered reductions; attn90_bwd_onepass says where), 7 in the
 * two-kernel forms (S and dP computed twice). */
int kn_attn_bwd_products(const kn_ctx *k, size_t s, size_t d);
/* Query tiles of 64 in each chunk of the one-pass backward at s tokens and head dim d, or 0
 * where a head is one chunk (runtime/attn_sm90.h, attn90_bwd_qchunk). */
int kn_attn_bwd_qchunk(const kn_ctx *k, size_t s, size_t d);
/* The wgmma kernels' layout self-test (runtime/attn_sm90.h: three products and the TMA tile
 * against the host, relative errors); RT_ERR_INVALID without the wgmma kernels. */
enum { KN_ATTN_NTEST = 4 };
rt_status kn_attn_selftest(kn_ctx *k, double rel[KN_ATTN_NTEST], ms_error *err);

/* Token t = b*S + i; head hd of token t is q[t*ld_qkv + hd*D .. +D) (likewise k, v) and
 * o[t*ld_o + hd*D ..]. lse[(b*H + hd)*S + i] = log sum_j exp(q_i . k_j / sqrt(D)) over
 * j <= i (natural log), fp32. */
rt_status kn_attn_fwd(kn_ctx *k, kn_bf16 *o, float *lse, const kn_bf16 *q, const kn_bf16 *kk,
                      const kn_bf16 *v, size_t ld_qkv, size_t ld_o, size_t B, size_t H,
                      size_t S, size_t D, ms_error *err);
/* dq, dk, dv (stride ld_qkv, may be the column blocks of one [T, 3h] matrix) from do
 * (stride ld_o), recomputing the scores from q, k and lse. Two kernels: one per key block
 * (dk, dv), one per query block (dq), so no accumulation needs atomics. */
rt_status kn_attn_bwd(kn_ctx *k, kn_bf16 *dq, kn_bf16 *dk, kn_bf16 *dv, const kn_bf16 *dout,
                      const kn_bf16 *q, const kn_bf16 *kk, const kn_bf16 *v, const kn_bf16 *o,
                      const float *lse, size_t ld_qkv, size_t ld_o, size_t B, size_t H,
                      size_t S, size_t D, ms_error *err);

/* ---- softmax cross-entropy over a vocabulary of V (rows of stride ldl >= V) ---- */
/* loss[t] = lse[t] - logits[t][label[t]], lse[t] = log sum_{v<V} exp(logits[t][v]) (one
 * pass, online max, vocabulary tiled over the block); label < 0: loss 0 (ignored). */
rt_status kn_ce_fwd(kn_ctx *k, float *loss, float *lse, const kn_bf16 *logits, size_t ldl,
                    const int32_t *labels, size_t T, size_t V, ms_error *err);
/* dlogits[t][v] = scale * (softmax - onehot) for v < V, 0 for V <= v < ldl and for ignored
 * rows; dlogits may alias logits (in place, as Megatron's fused loss keeps them). */
rt_status kn_ce_bwd(kn_ctx *k, kn_bf16 *dlogits, const kn_bf16 *logits, size_t ldl,
                    const float *lse, const int32_t *labels, size_t T, size_t V, float scale,
                    ms_error *err);
/* out[0] = sum of x[0..n) in a fixed order (one block). */
rt_status kn_sum(kn_ctx *k, float *out, const float *x, size_t n, ms_error *err);

/* ---- AdamW (decoupled weight decay, bias-corrected moments) ---- */
typedef struct kn_adamw_cfg {
    float lr, beta1, beta2, eps, weight_decay;
    int step;          /* 1 for the first update */
    float grad_scale;  /* the gradient is multiplied by this first (1: none) */
    int flush_denormals; /* host step only: subnormal inputs and results read as 0 (x86
                          * FTZ and DAZ) while it runs; the GPU kernel keeps them */
} kn_adamw_cfg;
/* lr 3e-4, 0.9, 0.95, 1e-8, wd 0.1, step 1, flush_denormals 1 */
void kn_adamw_default(kn_adamw_cfg *c);
/* master, m, v: fp32; grad fp32; param (bf16, may be NULL): the rounded master copy. */
rt_status kn_adamw(kn_ctx *k, kn_bf16 *param, float *master, float *m, float *v,
                   const float *grad, size_t n, const kn_adamw_cfg *c, ms_error *err);
/* The same update on host arrays (ZeRO-Offload's CPU optimizer), the same float expression
 * (nvcc may contract the kernel's to FMA: the last bit can differ, docs/RUNTIME.md). With
 * flush_denormals (the default) subnormal inputs and results are 0, unlike the kernel's. Why: an x86 core takes a microcode assist per subnormal operand or result, and
 * squared gradients below about 1e-19 are subnormal: measured on the H200's Xeon host, a
 * pass over such gradients ran 30x slower (60e6 instead of 1.8e9 parameters/s), which made
 * the step's time depend on the gradients' values and not on the probed rate. */
void kn_adamw_host(kn_bf16 *param, float *master, float *m, float *v, const float *grad,
                   size_t n, const kn_adamw_cfg *c);
/* kn_adamw_host split over pool's threads (NULL: this thread alone); the same bits. */
void kn_adamw_host_pool(rt_pool *pool, kn_bf16 *param, float *master, float *m, float *v,
                        const float *grad, size_t n, const kn_adamw_cfg *c);
/* x[0 .. n) = 0 on pool's threads (the host step's gradient reset). */
void kn_zero_host_pool(rt_pool *pool, float *x, size_t n);

/* ---- helpers ---- */
/* x[i] = bf16 of a seeded uniform in [-scale, scale): kref_uniform(seed, i) * scale, the
 * same counter-based numbers the host draws (runtime/kernels_ref.h). */
rt_status kn_fill_uniform(kn_ctx *k, kn_bf16 *x, size_t n, uint64_t seed, float scale,
                          ms_error *err);
rt_status kn_fill_f32(kn_ctx *k, float *x, size_t n, float value, ms_error *err);
rt_status kn_fill_bf16(kn_ctx *k, kn_bf16 *x, size_t n, float value, ms_error *err);
/* fp32 -> bf16 (round to nearest even), on the device. */
rt_status kn_f32_to_bf16(kn_ctx *k, kn_bf16 *dst, const float *src, size_t n, ms_error *err);
rt_status kn_bf16_to_f32(kn_ctx *k, float *dst, const kn_bf16 *src, size_t n, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

/* kernels_ref.h — CPU references of the runtime's transformer kernels (runtime/kernels.h),
 * in float storage with double accumulation, plus the host side of bf16 (conversion and
 * rounding), the counter-based random numbers both sides draw, and the relative-error
 * measure the checks use. Used by tests/test_kernels.c and runtime/model_rt.cu (data). */
#ifndef MEMSIM_KERNELS_REF_H
#define MEMSIM_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bf16 bits <-> float: round to nearest even; NaN stays a (quiet) NaN. */
uint16_t kref_f2bf(float f);
float kref_bf2f(uint16_t b);
/* Rounds every element to the nearest bf16 value (kept as float). */
void kref_round_bf16(float *x, size_t n);
/* A uniform number in [-1, 1) from (seed, i): splitmix64 of seed + i * golden ratio, top 24
 * bits. kn_fill_uniform draws the same numbers on the GPU. */
float kref_uniform(uint64_t seed, uint64_t i);
/* ||out - ref|| / ||ref|| in double; +inf when out holds a NaN or an infinity (a NaN never
 * passes), 0 when both are all zero. */
double kref_rel_err(const float *out, const float *ref, size_t n);

void kref_embed_fwd(float *out, const int32_t *tok, const float *wte, size_t T, size_t h);
void kref_embed_bwd(float *dwte, const int32_t *tok, const float *dout, size_t T, size_t h);
void kref_ln_fwd(float *y, float *mean, float *rstd, const float *x, const float *g,
                 const float *b, size_t T, size_t h, float eps);
/* dx (+ dres when not NULL); dg, db accumulate. Statistics recomputed in double. */
void kref_ln_bwd(float *dx, float *dg, float *db, const float *dy, const float *x,
                 const float *g, const float *dres, size_t T, size_t h, float eps);
/* C[M,N] = op(A) op(B) + beta C, row-major with row strides. */
void kref_gemm(int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda,
               const float *B, size_t ldb, float beta, float *C, size_t ldc);
void kref_bias_add(float *y, const float *bias, size_t T, size_t n, size_t ld);
void kref_add(float *out, const float *a, const float *b, const float *bias, size_t T,
              size_t n);
void kref_gelu_fwd(float *y, const float *x, const float *bias, size_t T, size_t n);
void kref_gelu_bwd(float *dx, const float *dy, const float *x, const float *bias, size_t T,
                   size_t n);
void kref_colsum(float *out, const float *a, size_t T, size_t n);
/* Causal attention, layout as kn_attn_fwd. */
void kref_attn_fwd(float *o, float *lse, const float *q, const float *k, const float *v,
                   size_t ld_qkv, size_t ld_o, size_t B, size_t H, size_t S, size_t D);
/* Gradients from the exact (double) forward; dq, dk, dv are overwritten. */
void kref_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, size_t ld_qkv, size_t ld_o, size_t B,
                   size_t H, size_t S, size_t D);
void kref_ce_fwd(float *loss, float *lse, const float *logits, size_t ldl,
                 const int32_t *labels, size_t T, size_t V);
void kref_ce_bwd(float *dlogits, const float *logits, size_t ldl, const int32_t *labels,
                 size_t T, size_t V, float scale);
/* AdamW in double (param: the updated master rounded to bf16 values, may be NULL). */
void kref_adamw(float *param, float *master, float *m, float *v, const float *grad, size_t n,
                const kn_adamw_cfg *c);

#ifdef __cplusplus
}
#endif

#endif

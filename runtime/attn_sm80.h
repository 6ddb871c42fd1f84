/* attn_sm80.h — causal flash attention on mma.sync (FlashAttention-2's loop order), the
 * runtime's attention on GPUs other than compute capability 9.0 (runtime/attn_sm90.h serves
 * those), with the same arguments and results as kn_attn_fwd / kn_attn_bwd
 * (runtime/kernels.h), which dispatch here; and dvec = rowsum(dO * O), the first step of both
 * backward passes. Used by runtime/kernels.cu.
 *
 * Tensors are bf16 bits (uint16_t), row-major, token t = b * S + i, head hd at columns
 * hd * D .. hd * D + D of a row; head dim 64 or 128; S a multiple of 128; pointers 16-byte
 * aligned, row strides multiples of 8 elements (the caller checks). Deterministic: no
 * atomics. */
#ifndef MEMSIM_ATTN_SM80_H
#define MEMSIM_ATTN_SM80_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raises the kernels' shared-memory limits (once per process is enough). */
rt_status attn80_setup(ms_error *err);

/* o and lse as kn_attn_fwd. */
rt_status attn80_fwd(void *stream, uint16_t *o, float *lse, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, size_t ld_qkv, size_t ld_o, size_t B, size_t H, size_t S,
                     size_t D, ms_error *err);

/* dvec[(b * H + hd) * S + i] = sum over the head's columns of dout * o (fp32). */
rt_status attn80_dvec(void *stream, float *dvec, const uint16_t *dout, const uint16_t *o,
                      size_t ld_o, size_t B, size_t H, size_t S, size_t D, ms_error *err);

/* dq, dk, dv as kn_attn_bwd, from dvec (attn80_dvec): a dk/dv kernel per 64 keys and a dq
 * kernel per 64 queries (7 causal products). */
rt_status attn80_bwd(void *stream, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                     const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, const float *lse, const float *dvec, size_t ld_qkv,
                     size_t ld_o, size_t B, size_t H, size_t S, size_t D, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

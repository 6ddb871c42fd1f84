/* attn_sm90.h — causal flash attention for Hopper (compute capability 9.0): forward and
 * backward on the warpgroup tensor-core instructions (wgmma) with the bulk tensor copy engine
 * (TMA) feeding them, one producer warpgroup and two consumer warpgroups per CTA. The same
 * arguments and results as kn_attn_fwd / kn_attn_bwd (runtime/kernels.h), which dispatch here
 * on such a GPU; runtime/kernels.cu keeps the mma.sync kernels for the others. The layout
 * self-test of what the kernels rest on is runtime/attn_sm90_test.h.
 *
 * Tensors are bf16 bits (uint16_t), row-major, token t = b * S + i, head hd at columns
 * hd * D .. hd * D + D of a row; head dim 64 or 128; S a multiple of 128; every pointer 16-byte
 * aligned and every row stride a multiple of 8 elements (the caller checks). */
#ifndef MEMSIM_ATTN_SM90_H
#define MEMSIM_ATTN_SM90_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Looks up the driver's tensor-map encoder (through the CUDA runtime, so nothing links
 * libcuda) and raises the kernels' shared-memory limits. *encode is the handle the calls
 * below take. Call only on a device of compute capability 9.0. */
rt_status attn90_setup(void **encode, ms_error *err);

/* flags: the kernels' forms. ATTN90_PINGPONG: the forward's consumer warpgroups take turns
 * issuing their products, and within each the softmax of one tile runs while the previous
 * tile's P V product does (else each runs its products and softmax in sequence). ATTN90_ONEPASS: the backward in one
 * kernel of 5 products per tile, dq summed in fp32 in a fixed order, at head dim 128 (else,
 * and at 64, 7 products in two kernels: dk and dv per 128 keys, dq per 128 queries).
 * ATTN90_BWD_OVERLAP: in the two-kernel form, each consumer warpgroup keeps products in
 * flight while it computes P and dS (else it waits for each batch); the same bits as without.
 * ATTN90_DQ_DEFER: in the one-pass form, each query tile's dQ product is issued beside the
 * next tile's dK (else beside its own); the same bits. ATTN90_QCHUNK: in the one-pass form,
 * a head's query range in chunks where its dq accumulator exceeds half the L2
 * (attn90_bwd_qchunk); the same bits. Every form is deterministic. */
enum {
    ATTN90_PINGPONG = 1, ATTN90_ONEPASS = 2, ATTN90_BWD_OVERLAP = 4, ATTN90_DQ_DEFER = 8,
    ATTN90_QCHUNK = 16
};

/* o and lse as kn_attn_fwd. */
rt_status attn90_fwd(void *encode, void *stream, int flags, uint16_t *o, float *lse,
                     const uint16_t *q, const uint16_t *k, const uint16_t *v, size_t ld_qkv,
                     size_t ld_o, size_t B, size_t H, size_t S, size_t D, ms_error *err);

/* Whether the one-pass form (5 causal products) is the faster one for these flags at this
 * shape on a GPU of l2_bytes of L2 cache: with ATTN90_ONEPASS at head dim 128, with
 * ATTN90_DQ_DEFER at every length, without it while one head's fp32 dq accumulator
 * (S x D x 4 bytes) fits the L2; else the two-kernel form (7). The caller clears
 * ATTN90_ONEPASS where this says no (attn90_bwd runs the one pass whenever the flag is set at
 * head dim 128). The CTAs of one head run together, so the reductions of a head whose
 * accumulator fits stay in L2; past it they go to memory. Measured on H200s (32 heads): with
 * every head's accumulator live, 64.9 ms at 32K tokens against 52.1 with one head's; at 128K
 * tokens (64 MB a head against 50 MB of L2) the one pass with dQ in its tile's iteration 842
 * ms against the two-kernel form's 817 (2026-12-03), with dQ beside the next tile's dK
 * 776.9 against 807.8 (2026-12-04, two runs each). */
int attn90_bwd_onepass(int flags, size_t S, size_t D, size_t l2_bytes);

/* Query tiles (of 64) in a chunk of the one-pass backward for these flags at this shape on
 * a GPU of l2_bytes of L2, or 0 for one chunk a head. With ATTN90_QCHUNK, where a head's fp32
 * dq accumulator (S x D x 4 bytes) exceeds half the L2, the key blocks of a head visit its
 * query tiles chunk by chunk, each chunk's Q, dO and accumulator (64 KB a tile at D 128)
 * within half the L2, and carry their fp32 dK, dV from chunk to chunk: the CTAs in flight
 * read and add into one chunk, which stays in L2, instead of the whole head's, which went to
 * memory (at 128K tokens, 203 GB of DRAM traffic against 1.3 GB at 32K: Nsight Compute, H200,
 * 2026-12-04). The sums and their order are unchanged: the same bits. */
int attn90_bwd_qchunk(int flags, size_t S, size_t D, size_t l2_bytes);

/* Device floats of the backward's scratch (the one-pass form's fp32 dq, its counters and,
 * with query chunks, the dK, dV carried between them). */
size_t attn90_bwd_scratch_floats(size_t B, size_t H, size_t S, size_t D, int qchunk);

/* dq, dk, dv as kn_attn_bwd; dvec[(b * H + hd) * S + i] = sum_c dout * o of that row (fp32,
 * computed by the caller); scratch: attn90_bwd_scratch_floats device floats (with
 * ATTN90_ONEPASS); qchunk: attn90_bwd_qchunk's (0: one chunk). No floating-point atomics:
 * the same inputs give the same bits. */
rt_status attn90_bwd(void *encode, void *stream, int flags, uint16_t *dq, uint16_t *dk,
                     uint16_t *dv, const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, const float *lse, const float *dvec, float *scratch,
                     int qchunk, size_t ld_qkv, size_t ld_o, size_t B, size_t H, size_t S,
                     size_t D, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

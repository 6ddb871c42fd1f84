/* attn_sm90.cu — causal flash attention on Hopper's warpgroup MMA (attn_sm90.h), written here
 * from FlashAttention-2's loop order and FlashAttention-3's division of labour: in each CTA one
 * producer warpgroup, of which one thread issues the bulk tensor copies (TMA, 128-byte swizzle)
 * into a ring of shared-memory stages that complete on mbarriers, and two consumer warpgroups
 * of 64 rows each that run the products on wgmma (bf16 in, fp32 accumulate) and the online
 * softmax in registers; a consumer hands a stage back by arriving on its "empty" barrier. The
 * scores' accumulators become the next product's register A operand without leaving the
 * registers. Backward at head dim 128 (while a head's fp32 dq fits L2: attn90_bwd_onepass): one
 * kernel per 128 keys that also sums dq through bulk reductions in a fixed order (5 causal
 * products); else dk/dv per 128 keys and dq per 128 queries, as the mma.sync kernels of
 * runtime/kernels.cu do (7). Neither sums in an order left to chance: the same inputs give the
 * same bits. Compiled for sm_90a; called by runtime/kernels.cu on devices of compute
 * capability 9.0. */
#include "runtime/attn_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/attn_sm90_util.h"
#include "runtime/sm90_ptx.h"

/* ======================= forward ======================= */

/* CTA: 128 queries of one (batch, head); key tiles of 128 in a ring of FWD_NST stages. Three
 * stages (224 KB of the 227 KB a CTA may have at head dim 128) ran the forward at 32K tokens
 * in 14.4 ms against 15.5 ms with two (H200, 2026-12-02, docs/RUNTIME.md). */
#define FWD_BR 128
#define FWD_BC 128
#define FWD_NST 3

/* Barriers at BAR: Q full, then per stage K full, V full, K empty, V empty (8 bytes each). */
template <int D> struct fwd_cfg {
    static constexpr uint32_t Q = a90_layout::tile(FWD_BR, D), KV = a90_layout::tile(FWD_BC, D);
    static constexpr uint32_t K0 = Q, V0 = K0 + FWD_NST * KV, BAR = V0 + FWD_NST * KV;
    static constexpr uint32_t SMEM = BAR + 8 * (1 + 4 * FWD_NST) + 1024;
};
static_assert(fwd_cfg<128>::SMEM <= 227 * 1024, "the forward's ring exceeds a CTA's shared memory");

/* The named barriers of the consumers' turns (ping-pong) */
#define A90_BAR_TURN0 1

struct fwd_args {
    bf16 *o;
    float *lse;
    int ldo, H, S;
    float sl2;   /* log2(e) / sqrt(D) */
};

struct fwd_bars {
    uint32_t q, k, v, ek, ev;   /* the first stage's; stage s at + 8 s */
};

template <int D> __device__ __forceinline__ fwd_bars fwd_bars_at(uint32_t base)
{
    const uint32_t b = base + fwd_cfg<D>::BAR;
    return {b, b + 8, b + 8 + 8 * FWD_NST, b + 8 + 16 * FWD_NST, b + 8 + 24 * FWD_NST};
}

template <int D>
__device__ __forceinline__ void fwd_produce(const CUtensorMap *tq, const CUtensorMap *tk,
                                            const CUtensorMap *tv, uint32_t base, int row0,
                                            int q0, int c0, int nkt)
{
    using C = fwd_cfg<D>;
    const fwd_bars b = fwd_bars_at<D>(base);
    p90_bar_expect(b.q, C::Q);
    a90_load<D>(base, FWD_BR, tq, b.q, c0, row0 + q0);
    for (int j = 0; j < nkt; j++) {
        const int s = j % FWD_NST;
        const uint32_t back = (uint32_t)(j / FWD_NST - 1) & 1u;   /* the stage's last use */
        if (j >= FWD_NST) p90_bar_wait(b.ek + 8 * s, back);
        p90_bar_expect(b.k + 8 * s, C::KV);
        a90_load<D>(base + C::K0 + s * C::KV, FWD_BC, tk, b.k + 8 * s, c0, row0 + j * FWD_BC);
        if (j >= FWD_NST) p90_bar_wait(b.ev + 8 * s, back);
        p90_bar_expect(b.v + 8 * s, C::KV);
        a90_load<D>(base + C::V0 + s * C::KV, FWD_BC, tv, b.v + 8 * s, c0, row0 + j * FWD_BC);
    }
}

template <int D>
__device__ __forceinline__ void fwd_finish(const fwd_args &a, const float (&oacc)[D / 2],
                                           const float (&mr)[2], float (&lr)[2], int bh,
                                           int row0, int r0, int c0, int t);

/* The first half of the online softmax of one tile's scores (in place: s becomes P): the
 * running max mr (base 2, scaled) and sum lr of this thread's two rows, and alpha, the factor
 * by which the output accumulated so far is to be rescaled (fwd_rescale), which this half
 * leaves alone so that it may run while a product into the output is in flight. The scale
 * is folded into the exponent's FMA (exp2(s sl2 - m)), so the raw scores are compared.
 * k0: the tile's first key; diag: mask keys above row r0 (+ 8). */
__device__ __forceinline__ void fwd_scores(float (&s)[FWD_BC / 2], float (&mr)[2], float (&lr)[2],
                                           float (&alpha)[2], float sl2, int k0, bool diag,
                                           int r0, int t)
{
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < FWD_BC / 2; i++) {
        const int e = i % 4;
        if (diag && k0 + 8 * (i / 4) + 2 * t + (e & 1) > r0 + 8 * (e >> 1)) s[i] = -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[i]);
    }
    float ms[2], rs[2] = {0, 0};
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mr[r], a90_quad_max(mx[r]) * sl2);
        ms[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
        alpha[r] = p90_exp2(mr[r] - ms[r]);
        mr[r] = mx[r];
    }
#pragma unroll
    for (int i = 0; i < FWD_BC / 2; i++) {
        const float p = p90_exp2(fmaf(s[i], sl2, -ms[(i % 4) >> 1]));
        s[i] = p;
        rs[(i % 4) >> 1] += p;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) lr[r] = lr[r] * alpha[r] + rs[r];
}

/* The second half: the output accumulated so far times alpha, row by row. */
template <int D>
__device__ __forceinline__ void fwd_rescale(float (&oacc)[D / 2], const float (&alpha)[2])
{
#pragma unroll
    for (int i = 0; i < D / 2; i++) oacc[i] *= alpha[(i % 4) >> 1];
}

/* Both halves, for a consumer whose products are all complete. */
template <int D>
__device__ __forceinline__ void fwd_softmax(float (&s)[FWD_BC / 2], float (&oacc)[D / 2],
                                            float (&mr)[2], float (&lr)[2], float sl2, int k0,
                                            bool diag, int r0, int t)
{
    float alpha[2];
    fwd_scores(s, mr, lr, alpha, sl2, k0, diag, r0, t);
    fwd_rescale<D>(oacc, alpha);
}

/* One consumer warpgroup (cw 0 or 1: queries q0 + 64 cw ..) over every key tile, its products
 * and softmax in sequence. */
template <int D>
__device__ __forceinline__ void fwd_consume(const fwd_args &a, uint32_t base, int bh, int row0,
                                            int q0, int c0, int nkt)
{
    using C = fwd_cfg<D>;
    const fwd_bars b = fwd_bars_at<D>(base);
    const int ct = threadIdx.x - A90_WG, cw = ct / A90_WG, warp = (ct / 32) % 4, lane = ct % 32;
    const int g = lane / 4, t = lane % 4, rw = q0 + 64 * cw, r0 = rw + 16 * warp + g;
    float oacc[D / 2], sacc[FWD_BC / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) oacc[i] = 0;
    float mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0, 0};
    p90_bar_wait(b.q, 0);
    for (int j = 0; j < nkt; j++) {
        const int s = j % FWD_NST;
        const uint32_t ph = (uint32_t)(j / FWD_NST) & 1u;
        const uint32_t kt = base + C::K0 + s * C::KV, vt = base + C::V0 + s * C::KV;
        p90_bar_wait(b.k + 8 * s, ph);
        p90_keep(sacc);
        p90_wg_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
            wg_ss128(sacc, a90_desc_k(base, FWD_BR, 64 * cw, ks), a90_desc_k(kt, FWD_BC, 0, ks),
                     ks > 0);
        p90_wg_commit();
        p90_wg_wait<0>();
        p90_keep(sacc);
        const int k0 = j * FWD_BC;
        fwd_softmax<D>(sacc, oacc, mr, lr, a.sl2, k0, k0 + FWD_BC - 1 > rw, r0, t);
        uint32_t pf[FWD_BC / 16][4];
        a90_pack<FWD_BC>(pf, sacc);
        p90_bar_wait(b.v + 8 * s, ph);
        p90_keep(oacc);
        p90_wg_fence();
#pragma unroll
        for (int kk = 0; kk < FWD_BC / 16; kk++)
            a90_rs<D>(oacc, pf[kk], a90_desc_n(vt, FWD_BC, kk));
        p90_wg_commit();
        p90_wg_wait<0>();
        p90_keep(oacc);
        p90_keep_u(pf);
        __syncwarp();
        if (lane == 0) {
            p90_bar_arrive(b.ek + 8 * s);
            p90_bar_arrive(b.ev + 8 * s);
        }
    }
    fwd_finish<D>(a, oacc, mr, lr, bh, row0, r0, c0, t);
}

/* Issues the scores of consumer warpgroup cw's 64 queries against the key tile at kt. */
template <int D>
__device__ __forceinline__ void fwd_qk(float (&sacc)[FWD_BC / 2], uint32_t base, int cw,
                                       uint32_t kt)
{
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        wg_ss128(sacc, a90_desc_k(base, FWD_BR, 64 * cw, ks), a90_desc_k(kt, FWD_BC, 0, ks),
                 ks > 0);
}

/* The same with FlashAttention-3's two overlaps. Between warpgroups: the consumer
 * warpgroups take turns issuing their products (named barriers A90_BAR_TURN0 + cw; warpgroup
 * 1 lets 0 go first and 0 takes 1's last turn at the end), so that one's softmax runs beside
 * the other's products. Within a warpgroup: the scores of tile j are issued, then the P V
 * product of tile j - 1 as a second group; the softmax of tile j starts once the scores are
 * in (wait for all but the last group) while P V still runs, and only the rescale of the
 * output and the packing of the new P (whose registers P V reads) wait for it. */
template <int D>
__device__ __forceinline__ void fwd_consume_pp(const fwd_args &a, uint32_t base, int bh,
                                               int row0, int q0, int c0, int nkt)
{
    using C = fwd_cfg<D>;
    const fwd_bars b = fwd_bars_at<D>(base);
    const int ct = threadIdx.x - A90_WG, cw = ct / A90_WG, warp = (ct / 32) % 4, lane = ct % 32;
    const int g = lane / 4, t = lane % 4, rw = q0 + 64 * cw, r0 = rw + 16 * warp + g;
    float oacc[D / 2], sacc[FWD_BC / 2];
    uint32_t pf[FWD_BC / 16][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) oacc[i] = 0;
    float mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0, 0};
    float alpha[2];
    if (cw == 1) p90_named_arrive(A90_BAR_TURN0, 2 * A90_WG);
    p90_bar_wait(b.q, 0);
    /* Tile 0 alone (scores only), so that every later tile has both groups in flight and the
     * compiler sees one wait per path (it serializes the products otherwise, C7514). */
    p90_bar_wait(b.k, 0);
    p90_named_sync(A90_BAR_TURN0 + cw, 2 * A90_WG);
    p90_keep(sacc);
    p90_wg_fence();
    fwd_qk<D>(sacc, base, cw, base + C::K0);
    p90_wg_commit();
    p90_named_arrive(A90_BAR_TURN0 + 1 - cw, 2 * A90_WG);
    p90_wg_wait<0>();
    p90_keep(sacc);
    __syncwarp();
    if (lane == 0) p90_bar_arrive(b.ek);
    fwd_scores(sacc, mr, lr, alpha, a.sl2, 0, FWD_BC - 1 > rw, r0, t);
    a90_pack<FWD_BC>(pf, sacc);
    for (int j = 1; j < nkt; j++) {
        const int s = j % FWD_NST, sp = (j + FWD_NST - 1) % FWD_NST;
        const uint32_t ph = (uint32_t)(j / FWD_NST) & 1u;
        const uint32_t kt = base + C::K0 + s * C::KV, vp = base + C::V0 + sp * C::KV;
        p90_bar_wait(b.k + 8 * s, ph);
        p90_bar_wait(b.v + 8 * sp, (uint32_t)((j - 1) / FWD_NST) & 1u);
        p90_named_sync(A90_BAR_TURN0 + cw, 2 * A90_WG);
        p90_keep(sacc);
        p90_keep(oacc);
        p90_wg_fence();
        fwd_qk<D>(sacc, base, cw, kt);
        p90_wg_commit();
#pragma unroll
        for (int kk = 0; kk < FWD_BC / 16; kk++) a90_rs<D>(oacc, pf[kk], a90_desc_n(vp, FWD_BC, kk));
        p90_wg_commit();
        p90_named_arrive(A90_BAR_TURN0 + 1 - cw, 2 * A90_WG);
        p90_wg_wait<1>();
        p90_keep(sacc);
        __syncwarp();
        if (lane == 0) p90_bar_arrive(b.ek + 8 * s);
        const int k0 = j * FWD_BC;
        fwd_scores(sacc, mr, lr, alpha, a.sl2, k0, k0 + FWD_BC - 1 > rw, r0, t);
        p90_wg_wait<0>();
        p90_keep(oacc);
        p90_keep_u(pf);
        __syncwarp();
        if (lane == 0) p90_bar_arrive(b.ev + 8 * sp);
        fwd_rescale<D>(oacc, alpha);
        a90_pack<FWD_BC>(pf, sacc);
    }
    if (cw == 0) p90_named_sync(A90_BAR_TURN0, 2 * A90_WG);
    const int sl = (nkt - 1) % FWD_NST;
    p90_bar_wait(b.v + 8 * sl, (uint32_t)((nkt - 1) / FWD_NST) & 1u);
    p90_keep(oacc);
    p90_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FWD_BC / 16; kk++)
        a90_rs<D>(oacc, pf[kk], a90_desc_n(base + C::V0 + sl * C::KV, FWD_BC, kk));
    p90_wg_commit();
    p90_wg_wait<0>();
    p90_keep(oacc);
    p90_keep_u(pf);
    fwd_finish<D>(a, oacc, mr, lr, bh, row0, r0, c0, t);
}

/* The epilogue: O / l and the log-sum-exp of this thread's two rows. */
template <int D>
__device__ __forceinline__ void fwd_finish(const fwd_args &a, const float (&oacc)[D / 2],
                                           const float (&mr)[2], float (&lr)[2], int bh,
                                           int row0, int r0, int c0, int t)
{
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lr[r] = a90_quad_sum(lr[r]);
        inv[r] = 1.0f / lr[r];
    }
    a90_store<D>(a.o, (size_t)a.ldo, (size_t)row0 + r0, c0, oacc, inv[0], inv[1], t);
    if (t == 0) {
        a.lse[(size_t)bh * a.S + r0] = (mr[0] + log2f(lr[0])) * A90_LN2;
        a.lse[(size_t)bh * a.S + r0 + 8] = (mr[1] + log2f(lr[1])) * A90_LN2;
    }
}

template <int D, bool PP>
__global__ void __launch_bounds__(A90_NT, 1)
attn90_fwd_k(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
             const __grid_constant__ CUtensorMap tv, const fwd_args a)
{
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = a90_base(smem_raw);
    const int nq = a.S / FWD_BR, qt = nq - 1 - (int)blockIdx.x, bh = (int)blockIdx.y;
    const int row0 = bh / a.H * a.S, c0 = bh % a.H * D, q0 = qt * FWD_BR;
    const int nkt = (q0 + FWD_BR + FWD_BC - 1) / FWD_BC;
    if (threadIdx.x == 0) {
        const fwd_bars b = fwd_bars_at<D>(base);
        p90_bar_init(b.q, 1);
        for (int s = 0; s < FWD_NST; s++) {
            p90_bar_init(b.k + 8 * s, 1);
            p90_bar_init(b.v + 8 * s, 1);
            p90_bar_init(b.ek + 8 * s, 8);   /* empty: one arrival per consumer warp */
            p90_bar_init(b.ev + 8 * s, 8);
        }
        p90_bar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x < A90_WG) {
        p90_regs_dec<A90_REGS_PRODUCER>();
        if (threadIdx.x == 0) fwd_produce<D>(&tq, &tk, &tv, base, row0, q0, c0, nkt);
    } else {
        p90_regs_inc<A90_REGS_CONSUMER>();
        if (PP) fwd_consume_pp<D>(a, base, bh, row0, q0, c0, nkt);
        else fwd_consume<D>(a, base, bh, row0, q0, c0, nkt);
    }
}

/* ======================= backward: dq ======================= */

/* CTA: 128 queries (Q and dO resident); key tiles of 128 (K and V) in a ring. */
#define DQ_BQ 128
#define DQ_BK 128
#define DQ_NST 2

template <int D> struct dq_cfg {
    static constexpr uint32_t Q = a90_layout::tile(DQ_BQ, D), KV = a90_layout::tile(DQ_BK, D);
    static constexpr uint32_t DO = Q, K0 = 2 * Q, V0 = K0 + DQ_NST * KV, BAR = V0 + DQ_NST * KV;
    static constexpr uint32_t SMEM = BAR + 8 * (1 + 3 * DQ_NST) + 1024;
};

struct bwd_args {
    bf16 *dq, *dk, *dv;
    const float *lse, *dvec;
    int ldqkv, H, S;
    float sl2, scale;   /* log2(e) / sqrt(D), 1 / sqrt(D) */
    float *dqacc;       /* one pass: fp32 dq, [b h][s][D] */
    int *sem;           /* one pass: contributions added, per (b h, 64-query tile) */
    /* The one pass in query chunks (dkv_item): qchunk query tiles a chunk, nitems CTAs a
     * head; semk: chunks of a key block done, per (b h, key block); done: a head's CTAs
     * finished, per b h; part: the fp32 dK, dV a key block carries between its chunks, in
     * DKV_RING heads' slots (NULL with one chunk). */
    int qchunk, nitems;
    int *semk, *done;
    float *part;
};

template <int D>
__device__ __forceinline__ void dq_produce(const CUtensorMap *tq, const CUtensorMap *tdo,
                                           const CUtensorMap *tk, const CUtensorMap *tv,
                                           uint32_t base, int row0, int q0, int c0, int nkt)
{
    using C = dq_cfg<D>;
    const uint32_t bq = base + C::BAR, bk = bq + 8, bv = bk + 8 * DQ_NST, be = bv + 8 * DQ_NST;
    p90_bar_expect(bq, 2 * C::Q);
    a90_load<D>(base, DQ_BQ, tq, bq, c0, row0 + q0);
    a90_load<D>(base + C::DO, DQ_BQ, tdo, bq, c0, row0 + q0);
    for (int j = 0; j < nkt; j++) {
        const int s = j % DQ_NST;
        if (j >= DQ_NST) p90_bar_wait(be + 8 * s, (uint32_t)(j / DQ_NST - 1) & 1u);
        p90_bar_expect(bk + 8 * s, C::KV);
        a90_load<D>(base + C::K0 + s * C::KV, DQ_BK, tk, bk + 8 * s, c0, row0 + j * DQ_BK);
        p90_bar_expect(bv + 8 * s, C::KV);
        a90_load<D>(base + C::V0 + s * C::KV, DQ_BK, tv, bv + 8 * s, c0, row0 + j * DQ_BK);
    }
}

template <int D>
__device__ __forceinline__ void dq_consume(const bwd_args &a, uint32_t base, int bh, int row0,
                                           int q0, int c0, int nkt)
{
    using C = dq_cfg<D>;
    const uint32_t bq = base + C::BAR, bk = bq + 8, bv = bk + 8 * DQ_NST, be = bv + 8 * DQ_NST;
    const int ct = threadIdx.x - A90_WG, cw = ct / A90_WG, warp = (ct / 32) % 4, lane = ct % 32;
    const int g = lane / 4, t = lane % 4, rw = q0 + 64 * cw, r0 = rw + 16 * warp + g;
    float l2[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l2[r] = a.lse[(size_t)bh * a.S + r0 + 8 * r] * A90_LOG2E;
        dr[r] = a.dvec[(size_t)bh * a.S + r0 + 8 * r];
    }
    float dqa[D / 2], sacc[DQ_BK / 2], dpa[DQ_BK / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dqa[i] = 0;
    p90_bar_wait(bq, 0);
    for (int j = 0; j < nkt; j++) {
        const int s = j % DQ_NST;
        const uint32_t ph = (uint32_t)(j / DQ_NST) & 1u;
        const uint32_t kt = base + C::K0 + s * C::KV, vt = base + C::V0 + s * C::KV;
        p90_bar_wait(bk + 8 * s, ph);
        p90_keep(sacc);
        p90_keep(dpa);
        p90_wg_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)   /* S = Q K^T */
            wg_ss128(sacc, a90_desc_k(base, DQ_BQ, 64 * cw, ks), a90_desc_k(kt, DQ_BK, 0, ks),
                     ks > 0);
        p90_bar_wait(bv + 8 * s, ph);
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)   /* dP = dO V^T */
            wg_ss128(dpa, a90_desc_k(base + C::DO, DQ_BQ, 64 * cw, ks),
                     a90_desc_k(vt, DQ_BK, 0, ks), ks > 0);
        p90_wg_commit();
        p90_wg_wait<0>();
        p90_keep(sacc);
        p90_keep(dpa);
        /* dS = P * (dP - D), P from the saved log-sum-exp, zero above the diagonal */
        const int k0 = j * DQ_BK;
        const bool diag = k0 + DQ_BK - 1 > rw;
#pragma unroll
        for (int i = 0; i < DQ_BK / 2; i++) {
            const int e = i % 4, r = e >> 1;
            float p = p90_exp2(sacc[i] * a.sl2 - l2[r]);
            if (diag && k0 + 8 * (i / 4) + 2 * t + (e & 1) > r0 + 8 * r) p = 0.0f;
            sacc[i] = p * (dpa[i] - dr[r]);
        }
        uint32_t df[DQ_BK / 16][4];
        a90_pack<DQ_BK>(df, sacc);
        p90_keep(dqa);
        p90_wg_fence();
#pragma unroll
        for (int kk = 0; kk < DQ_BK / 16; kk++)   /* dQ += dS K */
            a90_rs<D>(dqa, df[kk], a90_desc_n(kt, DQ_BK, kk));
        p90_wg_commit();
        p90_wg_wait<0>();
        p90_keep(dqa);
        p90_keep_u(df);
        __syncwarp();
        if (lane == 0) p90_bar_arrive(be + 8 * s);
    }
    a90_store<D>(a.dq, (size_t)a.ldqkv, (size_t)row0 + r0, c0, dqa, a.scale, a.scale, t);
}

/* P and dS of key tile j (k0) in place over the scores: dS = P * (dP - D), P from the saved
 * log-sum-exp, zero above the diagonal. Waits for the scores (all groups but the last, dP's)
 * and then for dP, so that the exponentials run while dP is computed. */
__device__ __forceinline__ void dq_ds(float (&sacc)[DQ_BK / 2], float (&dpa)[DQ_BK / 2],
                                      const float (&l2)[2], const float (&dr)[2], float sl2,
                                      int k0, int rw, int r0, int t)
{
    const bool diag = k0 + DQ_BK - 1 > rw;
    p90_wg_wait<1>();
    p90_keep(sacc);
#pragma unroll
    for (int i = 0; i < DQ_BK / 2; i++) {
        const int e = i % 4, r = e >> 1;
        float p = p90_exp2(sacc[i] * sl2 - l2[r]);
        if (diag && k0 + 8 * (i / 4) + 2 * t + (e & 1) > r0 + 8 * r) p = 0.0f;
        sacc[i] = p;
    }
    p90_wg_wait<0>();
    p90_keep(dpa);
#pragma unroll
    for (int i = 0; i < DQ_BK / 2; i++) sacc[i] *= dpa[i] - dr[(i % 4) >> 1];
}

/* Issues S = Q K^T and dP = dO V^T of the key tile in stage s as two groups. */
template <int D>
__device__ __forceinline__ void dq_sdp(float (&sacc)[DQ_BK / 2], float (&dpa)[DQ_BK / 2],
                                       uint32_t base, int cw, int s, uint32_t ph)
{
    using C = dq_cfg<D>;
    const uint32_t bk = base + C::BAR + 8, bv = bk + 8 * DQ_NST;
    const uint32_t kt = base + C::K0 + s * C::KV, vt = base + C::V0 + s * C::KV;
    p90_bar_wait(bk + 8 * s, ph);
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        wg_ss128(sacc, a90_desc_k(base, DQ_BQ, 64 * cw, ks), a90_desc_k(kt, DQ_BK, 0, ks),
                 ks > 0);
    p90_wg_commit();
    p90_bar_wait(bv + 8 * s, ph);
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        wg_ss128(dpa, a90_desc_k(base + C::DO, DQ_BQ, 64 * cw, ks),
                 a90_desc_k(vt, DQ_BK, 0, ks), ks > 0);
    p90_wg_commit();
}

/* dq with the exponentials overlapped: S and dP of a key tile are issued as two groups, and
 * P is computed once S is in while dP runs. The same arithmetic as dq_consume: the same bits.
 * (Issuing dQ(j) with S(j + 1) and dP(j + 1) behind it, FlashAttention-3's deeper overlap,
 * needs more registers than the 64 x 128 tiles leave: ptxas serializes the products, C7512.) */
template <int D>
__device__ __forceinline__ void dq_consume_pp(const bwd_args &a, uint32_t base, int bh,
                                              int row0, int q0, int c0, int nkt)
{
    using C = dq_cfg<D>;
    const uint32_t bq = base + C::BAR, be = bq + 8 + 16 * DQ_NST;
    const int ct = threadIdx.x - A90_WG, cw = ct / A90_WG, warp = (ct / 32) % 4, lane = ct % 32;
    const int g = lane / 4, t = lane % 4, rw = q0 + 64 * cw, r0 = rw + 16 * warp + g;
    float l2[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l2[r] = a.lse[(size_t)bh * a.S + r0 + 8 * r] * A90_LOG2E;
        dr[r] = a.dvec[(size_t)bh * a.S + r0 + 8 * r];
    }
    float dqa[D / 2], sacc[DQ_BK / 2], dpa[DQ_BK / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dqa[i] = 0;
    p90_bar_wait(bq, 0);
    for (int j = 0; j < nkt; j++) {
        const int s = j % DQ_NST;
        p90_keep(sacc);
        p90_keep(dpa);
        p90_wg_fence();
        dq_sdp<D>(sacc, dpa, base, cw, s, (uint32_t)(j / DQ_NST) & 1u);
        dq_ds(sacc, dpa, l2, dr, a.sl2, j * DQ_BK, rw, r0, t);
        uint32_t df[DQ_BK / 16][4];
        a90_pack<DQ_BK>(df, sacc);
        p90_keep(dqa);
        p90_wg_fence();
#pragma unroll
        for (int kk = 0; kk < DQ_BK / 16; kk++)   /* dQ += dS K */
            a90_rs<D>(dqa, df[kk], a90_desc_n(base + C::K0 + s * C::KV, DQ_BK, kk));
        p90_wg_commit();
        p90_wg_wait<0>();
        p90_keep(dqa);
        p90_keep_u(df);
        __syncwarp();
        if (lane == 0) p90_bar_arrive(be + 8 * s);
    }
    a90_store<D>(a.dq, (size_t)a.ldqkv, (size_t)row0 + r0, c0, dqa, a.scale, a.scale, t);
}

template <int D, bool PP>
__global__ void __launch_bounds__(A90_NT, 1)
attn90_dq_k(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
            const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
            const bwd_args a)
{
    using C = dq_cfg<D>;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = a90_base(smem_raw);
    const int nq = a.S / DQ_BQ, qt = nq - 1 - (int)blockIdx.x, bh = (int)blockIdx.y;
    const int row0 = bh / a.H * a.S, c0 = bh % a.H * D, q0 = qt * DQ_BQ;
    const int nkt = (q0 + DQ_BQ + DQ_BK - 1) / DQ_BK;
    if (threadIdx.x == 0) {
        const uint32_t bq = base + C::BAR;
        p90_bar_init(bq, 1);
        for (int s = 0; s < DQ_NST; s++) {
            p90_bar_init(bq + 8 + 8 * s, 1);
            p90_bar_init(bq + 8 + 8 * (DQ_NST + s), 1);
            p90_bar_init(bq + 8 + 8 * (2 * DQ_NST + s), 8);
        }
        p90_bar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x < A90_WG) {
        p90_regs_dec<A90_REGS_PRODUCER>();
        if (threadIdx.x == 0) dq_produce<D>(&tq, &tdo, &tk, &tv, base, row0, q0, c0, nkt);
    } else {
        p90_regs_inc<A90_REGS_CONSUMER>();
        if constexpr (PP) dq_consume_pp<D>(a, base, bh, row0, q0, c0, nkt);
        else dq_consume<D>(a, base, bh, row0, q0, c0, nkt);
    }
}

/* ======================= backward: dk, dv (and dq in one pass) ======================= */

/* CTA: 128 keys (K and V resident); query tiles of 64 (Q with its log-sum-exp, dO with its
 * dvec) in a ring, from the diagonal down. Products in the transposed orientation (S^T = K Q^T)
 * so that P^T and dS^T are register A operands of dV += P^T dO and dK += dS^T Q.
 *
 * ONE (one pass, 5 products instead of 7): the consumers also put dS^T (bf16, the 128 keys x
 * 64 queries) in shared memory and compute the tile's dQ contribution dS K, each warpgroup 64
 * of the head's columns, into an fp32 staging buffer; a writer thread of the producer
 * warpgroup adds it to the fp32 dq accumulator (a bulk reduction in the memory system) in a
 * fixed order: for query tile i, key block jmax(i) = the diagonal's first (a plain store),
 * then jmax - 1, ... down to 0, each waiting on the tile's counter (acquire) and advancing it
 * after its add is complete (release). So the sums, and the bits, are the same on every run.
 * A head's CTAs start with its highest key block (each waits only on CTAs that started
 * before it). */
#define DKV_BK 128
#define DKV_BQ 64

/* PP: the two-kernel form with the products overlapped within each warpgroup
 * (dkv_consume_pp); it holds a query tile one iteration longer, so its ring has three stages
 * (the one-pass form's staging buffers leave room for two only). */
/* PP: in the two-kernel form, the products overlapped within a warpgroup (a ring of three
 * stages); in the one-pass form, each tile's dQ issued beside the next tile's dK (the same
 * two stages and buffers). */
template <int D, bool ONE, bool PP = false> struct dkv_cfg {
    static constexpr int NST = PP && !ONE ? 3 : 2;
    static constexpr uint32_t KV = a90_layout::tile(DKV_BK, D), Q = a90_layout::tile(DKV_BQ, D);
    static constexpr uint32_t VEC = DKV_BQ * 4;
    static constexpr uint32_t V0 = KV, Q0 = 2 * KV, DO0 = Q0 + NST * Q;
    static constexpr uint32_t L0 = DO0 + NST * Q, DV0 = L0 + NST * VEC;
    static constexpr uint32_t DSB = DKV_BK * DKV_BQ * 2, DQB = DKV_BQ * D * 4;
    static constexpr uint32_t DS0 = DV0 + NST * VEC;          /* 2 x dS^T, 1024-aligned */
    static constexpr uint32_t DQ0 = DS0 + (ONE ? 2 * DSB : 0); /* 2 x dQ contribution, fp32 */
    static constexpr uint32_t BAR = DQ0 + (ONE ? 2 * DQB : 0);
    static constexpr uint32_t SMEM = BAR + 8 * (1 + 5 * NST + 4) + 1024;
};
static_assert(dkv_cfg<128, false, true>::SMEM <= 227 * 1024, "dk/dv's ring exceeds shared memory");
static_assert(dkv_cfg<128, true>::SMEM <= 227 * 1024, "the one pass exceeds shared memory");
static_assert(dkv_cfg<128, true, true>::SMEM == dkv_cfg<128, true>::SMEM,
              "the one pass's two orders share one layout");

/* K+V full; per stage Q full, dO full, stage empty; per staging buffer dQ full, dQ empty; per
 * dS buffer (the one pass) dS^T full, dS^T read. */
struct dkv_bars {
    uint32_t kv, q, o, e, dqf, dqe, dsf, dse;
};

template <int D, bool ONE, bool PP = false>
__device__ __forceinline__ dkv_bars dkv_bars_at(uint32_t base)
{
    constexpr int N = dkv_cfg<D, ONE, PP>::NST;
    const uint32_t b = base + dkv_cfg<D, ONE, PP>::BAR;
    return {b,           b + 8,       b + 8 + 8 * N, b + 8 + 16 * N, b + 8 + 24 * N, b + 8 + 32 * N,
            b + 8 + 40 * N, b + 8 + 40 * N + 16};
}

/* One CTA's work: a key block of a head and the query tiles [qa, qb) it visits. The
 * two-kernel form: the grid's (x, y), the query tiles from the diagonal to the end. The one
 * pass: a flat index, head by head, so that the reductions of the head in flight stay in L2
 * (every head's key blocks interleaved, the accumulators went to memory: 64.9 against 52.1 ms
 * at 32K tokens on the H200); within a head, chunk by chunk of qchunk query tiles, and within
 * a chunk the highest key block first, as the fixed order of dq's sums needs. A key block
 * visits the query tiles of a chunk from its diagonal's on: with one chunk (qchunk 0) the
 * whole range, as before chunks. Chunks keep what the CTAs in flight read and reduce into
 * (a chunk's Q, dO and dq accumulator) in L2 where a head's does not fit: at 128K tokens, 8
 * heads, the unchunked one pass moved 203 GB through DRAM (L2 hit rate 78 %) against cuDNN's
 * 7.8 GB (99 %), 208.4 against 183.5 ms under Nsight Compute (H200, 2026-12-04). */
struct dkv_work {
    int kb, bh, qa, qb;
    int first, last;   /* the key block's first and last chunk: none before, none after */
};

/* Query tiles in a chunk of a head of S tokens (the whole head with qchunk 0), and the key
 * blocks of chunk c: those whose diagonal comes before its end. */
__host__ __device__ inline int dkv_chunk_tiles(int S, int qchunk)
{
    const int nq = S / DKV_BQ;
    return qchunk > 0 && qchunk < nq ? qchunk : nq;
}

__host__ __device__ inline int dkv_chunk_blocks(int S, int ch, int c)
{
    const int m = (c + 1) * ch / (DKV_BK / DKV_BQ), nkb = S / DKV_BK;
    return m < nkb ? m : nkb;
}

__device__ __forceinline__ dkv_work dkv_item(const bwd_args &a, bool one)
{
    const int nq = a.S / DKV_BQ;
    dkv_work w;
    if (!one) {
        w.kb = (int)blockIdx.x;
        w.bh = (int)blockIdx.y;
        w.qa = w.kb * (DKV_BK / DKV_BQ);
        w.qb = nq;
        w.first = w.last = 1;
        return w;
    }
    w.bh = (int)blockIdx.x / a.nitems;
    int x = (int)blockIdx.x % a.nitems, c = 0;
    const int ch = dkv_chunk_tiles(a.S, a.qchunk);
    for (;; c++) {
        const int m = dkv_chunk_blocks(a.S, ch, c);
        if (x < m) {
            w.kb = m - 1 - x;
            break;
        }
        x -= m;
    }
    const int diag = w.kb * (DKV_BK / DKV_BQ);
    w.qa = max(diag, c * ch);
    w.qb = min(nq, (c + 1) * ch);
    w.first = w.qa == diag;
    w.last = w.qb == nq;
    return w;
}

/* CTAs of one head in the one pass: each chunk's key blocks up to its end (dkv_item). */
static int dkv_items(int S, int qchunk)
{
    const int ch = dkv_chunk_tiles(S, qchunk);
    int n = 0;
    for (int c = 0; c * ch < S / DKV_BQ; c++) n += dkv_chunk_blocks(S, ch, c);
    return n;
}

/* P^T of a query tile over the scores' registers (S^T = K Q^T, unscaled): exp2 of the scaled
 * score less the row's log-sum-exp, zero where a key is after the query. */
__device__ __forceinline__ void dkv_probs(float (&sacc)[DKV_BQ / 2], const float *sl, float sl2,
                                          int kw, int kr, int q0, int t)
{
    const bool diag = kw + 63 > q0;
#pragma unroll
    for (int j = 0; j < DKV_BQ / 8; j++) {   /* queries 8 j + 2 t and + 1: one 8-byte load */
        const float2 l = *reinterpret_cast<const float2 *>(sl + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int x = 4 * j + e, qi = 8 * j + 2 * t + (e & 1);
            float p = p90_exp2(sacc[x] * sl2 - (e & 1 ? l.y : l.x) * A90_LOG2E);
            if (diag && kr + 8 * (e >> 1) > q0 + qi) p = 0.0f;
            sacc[x] = p;
        }
    }
}

template <int D, bool ONE, bool PP>
__device__ __forceinline__ void dkv_produce(const CUtensorMap *tk, const CUtensorMap *tv,
                                            const CUtensorMap *tq, const CUtensorMap *tdo,
                                            const bwd_args &a, uint32_t base, int bh, int row0,
                                            int k0, int c0, int qt0, int nqt)
{
    using C = dkv_cfg<D, ONE, PP>;
    const dkv_bars b = dkv_bars_at<D, ONE, PP>(base);
    p90_bar_expect(b.kv, 2 * C::KV);
    a90_load<D>(base, DKV_BK, tk, b.kv, c0, row0 + k0);
    a90_load<D>(base + C::V0, DKV_BK, tv, b.kv, c0, row0 + k0);
    for (int i = 0; i < nqt; i++) {
        const int s = i % C::NST, q0 = (qt0 + i) * DKV_BQ;
        if (i >= C::NST) p90_bar_wait(b.e + 8 * s, (uint32_t)(i / C::NST - 1) & 1u);
        p90_bar_expect(b.q + 8 * s, C::Q + C::VEC);
        a90_load<D>(base + C::Q0 + s * C::Q, DKV_BQ, tq, b.q + 8 * s, c0, row0 + q0);
        p90_bulk(base + C::L0 + s * C::VEC, a.lse + (size_t)bh * a.S + q0, C::VEC, b.q + 8 * s);
        p90_bar_expect(b.o + 8 * s, C::Q + C::VEC);
        a90_load<D>(base + C::DO0 + s * C::Q, DKV_BQ, tdo, b.o + 8 * s, c0, row0 + q0);
        p90_bulk(base + C::DV0 + s * C::VEC, a.dvec + (size_t)bh * a.S + q0, C::VEC, b.o + 8 * s);
    }
}

/* The one-pass form's writer: each query tile's dQ contribution, in the fixed order. Each
 * reduction is waited for as soon as it is issued and the tile's counter advanced at once:
 * the next key block's CTA reaches the tile two iterations later, and holding the counter
 * until the next tile's reduction was issued cost it that margin (the consumers lose nothing:
 * with two staging buffers they stage the next tile meanwhile). */
template <int D>
__device__ __forceinline__ void dkv_write_dq(const bwd_args &a, uint32_t base, int bh, int kb,
                                             int qt0, int nqt)
{
    using C = dkv_cfg<D, true>;
    const dkv_bars b = dkv_bars_at<D, true>(base);
    for (int i = 0; i < nqt; i++) {
        const int x = i % 2, qt = qt0 + i, turn = qt * DKV_BQ / DKV_BK - kb;
        int *sem = a.sem + (size_t)bh * (a.S / DKV_BQ) + qt;
        float *dst = a.dqacc + ((size_t)bh * a.S + (size_t)qt * DKV_BQ) * D;
        p90_bar_wait(b.dqf + 8 * x, (uint32_t)(i / 2) & 1u);
        if (turn > 0)
            while (p90_ld_acquire(sem) != turn) __nanosleep(32);
        p90_fence_async();
        if (turn == 0) p90_bulk_store(dst, base + C::DQ0 + x * C::DQB, C::DQB);
        else p90_bulk_add_f32(dst, base + C::DQ0 + x * C::DQB, C::DQB);
        p90_bulk_commit();
        p90_bulk_wait<0>();
        p90_fence_async();
        p90_add_release(sem, 1);
        p90_bar_arrive(b.dqe + 8 * x);
    }
}

/* Query tile i of a dk/dv CTA, up to its dS^T: waits for the tile's stage, computes
 * S^T = K Q^T, P, dV += P^T dO, dP^T = V dO^T and leaves dS^T = P^T * (dP^T - D) in pf (bf16, the
 * register A operand of dK += dS^T Q); zeros when none of this warpgroup's keys is seen by a
 * query of the tile. */
template <int D> __device__ __forceinline__ void dkv_dq_publish(uint32_t base, int x2, int lane);

/* pend (the one pass): a dQ staging buffer whose stores are to be published (dkv_dq_publish)
 * once this tile's S^T product is issued, so that the fence's wait for those stores runs
 * beside the tensor cores' work; -1: none. */
template <int D, bool ONE>
__device__ __forceinline__ void dkv_tile_ds(const bwd_args &a, unsigned char *gsm, uint32_t base,
                                            int i, int cw, int t, int kw, int kr, int qt0,
                                            float (&dva)[D / 2], float (&sacc)[DKV_BQ / 2],
                                            float (&dpa)[DKV_BQ / 2], uint32_t (&pf)[DKV_BQ / 16][4],
                                            int pend = -1, int lane = 0)
{
    using C = dkv_cfg<D, ONE>;
    const dkv_bars b = dkv_bars_at<D, ONE>(base);
    const int s = i % C::NST, q0 = (qt0 + i) * DKV_BQ;
    const uint32_t ph = (uint32_t)(i / C::NST) & 1u;
    const uint32_t qt = base + C::Q0 + s * C::Q, ot = base + C::DO0 + s * C::Q;
    const float *sl = reinterpret_cast<const float *>(gsm + C::L0 + s * C::VEC);
    const float *sd = reinterpret_cast<const float *>(gsm + C::DV0 + s * C::VEC);
    p90_bar_wait(b.q + 8 * s, ph);
    if (q0 + DKV_BQ - 1 >= kw) {   /* a query of the tile sees one of our keys */
        p90_keep(sacc);
        p90_wg_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)   /* S^T = K Q^T */
            wg_ss64(sacc, a90_desc_k(base, DKV_BK, 64 * cw, ks), a90_desc_k(qt, DKV_BQ, 0, ks),
                    ks > 0);
        p90_wg_commit();
        if (ONE && pend >= 0) dkv_dq_publish<D>(base, pend, lane);
        p90_wg_wait<0>();
        p90_keep(sacc);
        dkv_probs(sacc, sl, a.sl2, kw, kr, q0, t);
        a90_pack<DKV_BQ>(pf, sacc);
        p90_bar_wait(b.o + 8 * s, ph);
        p90_keep(dva);
        p90_keep(dpa);
        p90_wg_fence();
#pragma unroll
        for (int kk = 0; kk < DKV_BQ / 16; kk++)   /* dV += P^T dO */
            a90_rs<D>(dva, pf[kk], a90_desc_n(ot, DKV_BQ, kk));
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)   /* dP^T = V dO^T */
            wg_ss64(dpa, a90_desc_k(base + C::V0, DKV_BK, 64 * cw, ks),
                    a90_desc_k(ot, DKV_BQ, 0, ks), ks > 0);
        p90_wg_commit();
        p90_wg_wait<0>();
        p90_keep(dva);
        p90_keep(dpa);
        p90_keep_u(pf);
        /* dS^T = P^T * (dP^T - D), P as the bf16 the dV product used */
#pragma unroll
        for (int kk = 0; kk < DKV_BQ / 16; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int x = 8 * kk + 2 * r, qi = 8 * (x / 4) + 2 * t;
                const float2 p = p90_unpack(pf[kk][r]);
                const float2 d = *reinterpret_cast<const float2 *>(sd + qi);   /* 8-byte aligned */
                pf[kk][r] = p90_pack(p.x * (dpa[x] - d.x), p.y * (dpa[x + 1] - d.y));
            }
    } else {
        if (ONE && pend >= 0) dkv_dq_publish<D>(base, pend, lane);
        p90_bar_wait(b.o + 8 * s, ph);   /* the stage's copies must land before it is reused */
#pragma unroll
        for (int kk = 0; kk < DKV_BQ / 16; kk++)
            pf[kk][0] = pf[kk][1] = pf[kk][2] = pf[kk][3] = 0u;   /* no keys of ours seen */
    }
}

/* The one-pass form: this warpgroup's dS^T rows of tile i (keys 64 cw .., queries of the tile;
 * 128-byte swizzled rows) into dS buffer i % 2, once both warpgroups have read what tile
 * i - 2 left there (dkv_ds_publish then announces them). */
template <int D>
__device__ __forceinline__ void dkv_ds_put(uint32_t base, unsigned char *gsm,
                                           const uint32_t (&pf)[DKV_BQ / 16][4], int i, int cw,
                                           int warp, int lane)
{
    using C = dkv_cfg<D, true>;
    const dkv_bars b = dkv_bars_at<D, true>(base);
    const int g = lane / 4, t = lane % 4, x2 = i % 2;
    const uint32_t ds = C::DS0 + x2 * C::DSB;
    if (i >= 2) p90_bar_wait(b.dse + 8 * x2, (uint32_t)(i / 2 - 1) & 1u);
#pragma unroll
    for (int kk = 0; kk < DKV_BQ / 16; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int x = 8 * kk + 2 * r, row = 64 * cw + 16 * warp + g + 8 * ((x % 4) >> 1);
            const uint32_t off = ds + row * 128 + (((x / 4) ^ (row % 8)) * 16) + 4 * t;
            *reinterpret_cast<uint32_t *>(gsm + off) = pf[kk][r];
        }
}

/* dS buffer i % 2's stores made visible to the products (the async proxy) and announced on
 * its "full" barrier. The fence waits for this thread's stores to land: issued after the
 * tile's dK product, it waits beside that product, not before it (Nsight Compute at 16K, 8
 * heads: 2.4 % of the kernel's stall samples at this fence when it came first). */
template <int D>
__device__ __forceinline__ void dkv_ds_publish(uint32_t base, int i, int lane)
{
    const dkv_bars b = dkv_bars_at<D, true>(base);
    p90_fence_async_smem();
    __syncwarp();
    if (lane == 0) p90_bar_arrive(b.dsf + 8 * (i % 2));
}

/* Issues dQ[:, 64 cw ..) = dS K of tile i over the 128 keys (dS^T of both warpgroups, in dS
 * buffer i % 2), once both have put it there. The caller commits and waits. */
template <int D>
__device__ __forceinline__ void dkv_dq_mma(uint32_t base, float (&dqp)[32], int i, int cw)
{
    using C = dkv_cfg<D, true>;
    const dkv_bars b = dkv_bars_at<D, true>(base);
    const uint32_t ds = base + C::DS0 + (uint32_t)(i % 2) * C::DSB;
    p90_bar_wait(b.dsf + 8 * (i % 2), (uint32_t)(i / 2) & 1u);
#pragma unroll
    for (int kk = 0; kk < DKV_BK / 16; kk++)
        wg_ss64tt(dqp, a90_desc_n(ds, DKV_BK, kk),
                  a90_desc_n(base + (uint32_t)cw * DKV_BK * 128, DKV_BK, kk), kk > 0);
}

/* Hands dS buffer i % 2 back and puts this warpgroup's half of tile i's dQ contribution into
 * staging buffer i % 2 for the writer (dkv_dq_publish then announces it). In fragment
 * order: float4 j of consumer thread ct = 128 cw + 32 warp + lane at 16 (256 j + ct) bytes,
 * so a warp's stores are 512 consecutive bytes, free of bank conflicts (attn90_dq_out_k reads
 * that order back). */
template <int D>
__device__ __forceinline__ void dkv_dq_store(uint32_t base, unsigned char *gsm,
                                             const float (&dqp)[32], int i, int cw, int warp,
                                             int lane)
{
    using C = dkv_cfg<D, true>;
    const dkv_bars b = dkv_bars_at<D, true>(base);
    const int x2 = i % 2, ct = 128 * cw + 32 * warp + lane;
    __syncwarp();
    if (lane == 0) p90_bar_arrive(b.dse + 8 * x2);
    if (i >= 2) p90_bar_wait(b.dqe + 8 * x2, (uint32_t)(i / 2 - 1) & 1u);
    float4 *dq = reinterpret_cast<float4 *>(gsm + C::DQ0 + x2 * C::DQB);
#pragma unroll
    for (int j = 0; j < 8; j++)
        dq[256 * j + ct] = make_float4(dqp[4 * j], dqp[4 * j + 1], dqp[4 * j + 2], dqp[4 * j + 3]);
}

/* Staging buffer x2's stores made visible to the writer's bulk reduction (the async proxy)
 * and announced on its "full" barrier. The fence waits for this thread's 8 16-byte stores to
 * land (Nsight Compute at 16K, 8 heads: 7.2 % of the kernel's stall samples at this fence
 * right after the stores); the one pass with dQ deferred publishes a buffer in the next
 * tile's front, once that tile's S^T product is issued (dkv_tile_ds's pend). */
template <int D>
__device__ __forceinline__ void dkv_dq_publish(uint32_t base, int x2, int lane)
{
    const dkv_bars b = dkv_bars_at<D, true>(base);
    p90_fence_async_smem();
    __syncwarp();
    if (lane == 0) p90_bar_arrive(b.dqf + 8 * x2);
}

/* The one-pass consumer's front of query tile i: dS^T (dkv_tile_ds), put in the dS buffer for
 * the dQ product, and dK += dS^T Q issued after a fence; the caller may issue more products
 * before it commits and waits. */
template <int D>
__device__ __forceinline__ void dkv_one_front(const bwd_args &a, unsigned char *gsm,
                                              uint32_t base, int i, int cw, int warp, int lane,
                                              int kw, int kr, int qt0, float (&dka)[D / 2],
                                              float (&dva)[D / 2], float (&sacc)[DKV_BQ / 2],
                                              float (&dpa)[DKV_BQ / 2], float (&dqp)[32],
                                              uint32_t (&pf)[DKV_BQ / 16][4], int pend)
{
    using C = dkv_cfg<D, true>;
    const int s = i % C::NST, t = lane % 4;
    dkv_tile_ds<D, true>(a, gsm, base, i, cw, t, kw, kr, qt0, dva, sacc, dpa, pf, pend, lane);
    dkv_ds_put<D>(base, gsm, pf, i, cw, warp, lane);
    p90_keep(dka);
    p90_keep(dqp);
    p90_wg_fence();
#pragma unroll
    for (int kk = 0; kk < DKV_BQ / 16; kk++)   /* dK += dS^T Q */
        a90_rs<D>(dka, pf[kk], a90_desc_n(base + C::Q0 + s * C::Q, DKV_BQ, kk));
    dkv_ds_publish<D>(base, i, lane);
}

/* Waits for the products in flight; hands stage s (Q and dO of its tile) back to the producer. */
template <int D>
__device__ __forceinline__ void dkv_one_done(uint32_t base, int s, int lane, float (&dka)[D / 2],
                                             float (&dqp)[32], uint32_t (&pf)[DKV_BQ / 16][4])
{
    const dkv_bars b = dkv_bars_at<D, true>(base);
    p90_wg_commit();
    p90_wg_wait<0>();
    p90_keep(dka);
    p90_keep(dqp);
    p90_keep_u(pf);
    __syncwarp();
    if (lane == 0) p90_bar_arrive(b.e + 8 * s);
}

/* ---- the chunked one pass's carried dK, dV (dkv_item) ---- */

#define DKV_RING 2        /* heads whose key blocks' fp32 dK, dV may be carried at once */
#define DKV_BAR_PART 1    /* named barrier of the two consumer warpgroups */

/* Key block w.kb's slot of carried dK, dV: 2 x 128 x D fp32 in DKV_RING heads' slots, or
 * NULL when the head is one chunk. */
template <int D> __device__ __forceinline__ float4 *dkv_part_at(const bwd_args &a, const dkv_work &w)
{
    if (!a.part || (w.first && w.last)) return NULL;
    const size_t slot = (size_t)(w.bh % DKV_RING) * (a.S / DKV_BK) + w.kb;
    return reinterpret_cast<float4 *>(a.part + slot * 2 * DKV_BK * D);
}

/* This consumer thread's dK, dV accumulators to or from the slot: float4 j of thread ct at
 * 16 (256 j + ct) bytes, so a warp's accesses are 512 consecutive bytes; through L2 only
 * (.cg), since another SM wrote them or will read them. */
template <int D>
__device__ __forceinline__ void dkv_part_io(float4 *p, float (&dka)[D / 2], float (&dva)[D / 2],
                                            int ct, bool store)
{
#pragma unroll
    for (int j = 0; j < D / 4; j++) {   /* D / 2 floats of each accumulator */
        float *acc = j < D / 8 ? &dka[4 * j] : &dva[4 * (j - D / 8)];
        float4 *q = p + 2 * A90_WG * j + ct;
        if (store) {
            __stcg(q, make_float4(acc[0], acc[1], acc[2], acc[3]));
        } else {
            const float4 v = __ldcg(q);
            acc[0] = v.x;
            acc[1] = v.y;
            acc[2] = v.z;
            acc[3] = v.w;
        }
    }
}

/* Before a CTA touches its slot: the head DKV_RING before, which used the slot, finished
 * (its CTAs started before this one's, so the wait ends), and the key block's earlier chunks
 * put their dK, dV there (a head's chunks start in order); then, past its first chunk, the
 * carried dK, dV into the accumulators. One thread waits; the two consumer warpgroups meet
 * at a named barrier. */
template <int D>
__device__ __forceinline__ void dkv_part_enter(const bwd_args &a, const dkv_work &w, float4 *p,
                                               float (&dka)[D / 2], float (&dva)[D / 2], int ct)
{
    if (!p) return;
    if (ct == 0) {
        if (w.bh >= DKV_RING)
            while (p90_ld_acquire(a.done + w.bh - DKV_RING) != a.nitems) __nanosleep(64);
        const int c = w.qa / a.qchunk, c1 = w.kb * (DKV_BK / DKV_BQ) / a.qchunk;
        const int *sk = a.semk + (size_t)w.bh * (a.S / DKV_BK) + w.kb;
        while (p90_ld_acquire(sk) < c - c1) __nanosleep(64);
    }
    p90_named_sync(DKV_BAR_PART, 2 * A90_WG);
    if (!w.first) dkv_part_io<D>(p, dka, dva, ct, false);
}

/* After the CTA's last access of its slot: the key block's chunk is counted (when it left
 * its dK, dV in the slot) and so is the head's CTA (every CTA of a chunked head, slot or
 * not), each released at GPU scope once both consumer warpgroups are past their accesses. */
__device__ __forceinline__ void dkv_item_done(const bwd_args &a, const dkv_work &w,
                                              const float4 *p, int ct)
{
    if (!a.part) return;   /* heads of one chunk: no slots, nothing waits */
    if (p) p90_named_sync(DKV_BAR_PART, 2 * A90_WG);
    if (ct == 0) {
        __threadfence();
        if (!w.last) p90_add_release(a.semk + (size_t)w.bh * (a.S / DKV_BK) + w.kb, 1);
        p90_add_release(a.done + w.bh, 1);
    }
}

/* The one-pass consumer: per query tile, dS^T, then dK += dS^T Q and dQ = dS K (once both
 * warpgroups' dS^T of the tile is there: an mbarrier, so that a warpgroup may run up to a
 * tile ahead), then dQ to the writer. DEFER = false: tile i's dQ in one batch with its own
 * dK; then the dS^T barrier waits for the other warpgroup's half of the tile just made.
 * DEFER = true: tile i's dQ beside tile i + 1's dK (tile 0 peeled, the last tile's dQ
 * after the loop, so that no product is issued under a branch), by which time the other
 * half is there; the contribution reaches the writer an iteration later, and the next key
 * block's CTA, which adds to the same dQ tile two iterations after this one, keeps one
 * iteration of margin (the writer advances the tile's counter as soon as its reduction is
 * done). The products and their order are the same in both: the same bits. */
template <int D, bool DEFER>
__device__ __forceinline__ void dkv_consume_one(const bwd_args &a, unsigned char *raw,
                                                uint32_t base, const dkv_work &w, int row0,
                                                int k0, int c0, int qt0, int nqt)
{
    static_assert(D == 128, "each consumer warpgroup takes 64 of dq's columns");
    using C = dkv_cfg<D, true>;
    const dkv_bars b = dkv_bars_at<D, true>(base);
    const int ct = threadIdx.x - A90_WG, cw = ct / A90_WG, warp = (ct / 32) % 4, lane = ct % 32;
    const int g = lane / 4, t = lane % 4, kw = k0 + 64 * cw, kr = kw + 16 * warp + g;
    unsigned char *gsm = raw + (base - p90_smem(raw));   /* generic view of the base */
    float dka[D / 2], dva[D / 2], sacc[DKV_BQ / 2], dpa[DKV_BQ / 2], dqp[32];
    uint32_t pf[DKV_BQ / 16][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dka[i] = dva[i] = 0;
    float4 *part = dkv_part_at<D>(a, w);
    dkv_part_enter<D>(a, w, part, dka, dva, ct);
    p90_bar_wait(b.kv, 0);
    if constexpr (DEFER) {   /* nqt >= 2: a chunk's first key block sees two query tiles */
        /* tile i's dQ: issued in iteration i + 1, stored at its end, published in the front of
         * iteration i + 2 (after the loop for the last two) */
        dkv_one_front<D>(a, gsm, base, 0, cw, warp, lane, kw, kr, qt0, dka, dva, sacc, dpa, dqp,
                         pf, -1);
        dkv_one_done<D>(base, 0, lane, dka, dqp, pf);
        for (int i = 1; i < nqt; i++) {
            dkv_one_front<D>(a, gsm, base, i, cw, warp, lane, kw, kr, qt0, dka, dva, sacc, dpa,
                             dqp, pf, i >= 2 ? (i - 2) % 2 : -1);
            dkv_dq_mma<D>(base, dqp, i - 1, cw);
            dkv_one_done<D>(base, i % C::NST, lane, dka, dqp, pf);
            dkv_dq_store<D>(base, gsm, dqp, i - 1, cw, warp, lane);
        }
        dkv_dq_publish<D>(base, (nqt - 2) % 2, lane);
        p90_keep(dqp);
        p90_wg_fence();
        dkv_dq_mma<D>(base, dqp, nqt - 1, cw);
        p90_wg_commit();
        p90_wg_wait<0>();
        p90_keep(dqp);
        dkv_dq_store<D>(base, gsm, dqp, nqt - 1, cw, warp, lane);
        dkv_dq_publish<D>(base, (nqt - 1) % 2, lane);
    } else {
        for (int i = 0; i < nqt; i++) {
            dkv_one_front<D>(a, gsm, base, i, cw, warp, lane, kw, kr, qt0, dka, dva, sacc, dpa,
                             dqp, pf, -1);
            dkv_dq_mma<D>(base, dqp, i, cw);
            dkv_one_done<D>(base, i % C::NST, lane, dka, dqp, pf);
            dkv_dq_store<D>(base, gsm, dqp, i, cw, warp, lane);
            dkv_dq_publish<D>(base, i % 2, lane);
        }
    }
    if (w.last) {
        a90_store<D>(a.dk, (size_t)a.ldqkv, (size_t)row0 + kr, c0, dka, a.scale, a.scale, t);
        a90_store<D>(a.dv, (size_t)a.ldqkv, (size_t)row0 + kr, c0, dva, 1.0f, 1.0f, t);
    } else {
        dkv_part_io<D>(part, dka, dva, ct, true);
    }
    dkv_item_done(a, w, part, ct);
}

/* The two-kernel form's dK / dV, each product waited for in turn. */
template <int D>
__device__ __forceinline__ void dkv_consume(const bwd_args &a, unsigned char *raw,
                                            uint32_t base, int row0, int k0, int c0, int qt0,
                                            int nqt)
{
    using C = dkv_cfg<D, false>;
    const dkv_bars b = dkv_bars_at<D, false>(base);
    const int ct = threadIdx.x - A90_WG, cw = ct / A90_WG, warp = (ct / 32) % 4, lane = ct % 32;
    const int g = lane / 4, t = lane % 4, kw = k0 + 64 * cw, kr = kw + 16 * warp + g;
    unsigned char *gsm = raw + (base - p90_smem(raw));   /* generic view of the base */
    float dka[D / 2], dva[D / 2], sacc[DKV_BQ / 2], dpa[DKV_BQ / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dka[i] = dva[i] = 0;
    p90_bar_wait(b.kv, 0);
    for (int i = 0; i < nqt; i++) {
        const int s = i % C::NST;
        uint32_t pf[DKV_BQ / 16][4];
        dkv_tile_ds<D, false>(a, gsm, base, i, cw, t, kw, kr, qt0, dva, sacc, dpa, pf);
        if ((qt0 + i) * DKV_BQ + DKV_BQ - 1 >= kw) {
            p90_keep(dka);
            p90_wg_fence();
#pragma unroll
            for (int kk = 0; kk < DKV_BQ / 16; kk++)   /* dK += dS^T Q */
                a90_rs<D>(dka, pf[kk], a90_desc_n(base + C::Q0 + s * C::Q, DKV_BQ, kk));
            p90_wg_commit();
            p90_wg_wait<0>();
            p90_keep(dka);
            p90_keep_u(pf);
        }
        __syncwarp();
        if (lane == 0) p90_bar_arrive(b.e + 8 * s);
    }
    a90_store<D>(a.dk, (size_t)a.ldqkv, (size_t)row0 + kr, c0, dka, a.scale, a.scale, t);
    a90_store<D>(a.dv, (size_t)a.ldqkv, (size_t)row0 + kr, c0, dva, 1.0f, 1.0f, t);
}

/* The two-kernel form's dK / dV with FlashAttention-3's overlap within a warpgroup:
 * iteration i issues S^T(i) and then dK(i - 1) (whose dS^T is still in pf) as two groups and
 * computes P(i) in fp32 once S^T(i) is in (wait for all but the last group) while dK(i - 1)
 * runs; packing P into pf waits for it. Then dP^T(i) and dV(i) as two groups, and dS^T(i) in
 * fp32 over the scores' registers once dP^T(i) is in while dV(i) runs (pf, its operand, is
 * packed from them after). The products of each accumulator come in the old form's order
 * and dS is the same arithmetic, so the bits are the old form's. (A second 16-register array
 * for dS beside P makes ptxas serialize the products, C7512.) A ring of
 * three stages, since a query tile is held until the next iteration's dK. Warpgroup 1's keys
 * are above every query of tile 0: it skips that tile, so every path issues and waits the
 * same groups (no wgmma under a branch, C7514). */
template <int D>
__device__ __forceinline__ void dkv_consume_pp(const bwd_args &a, unsigned char *raw,
                                               uint32_t base, int row0, int k0, int c0,
                                               int qt0, int nqt)
{
    using C = dkv_cfg<D, false, true>;
    constexpr int NS = C::NST;
    const dkv_bars b = dkv_bars_at<D, false, true>(base);
    const int ct = threadIdx.x - A90_WG, cw = ct / A90_WG, warp = (ct / 32) % 4, lane = ct % 32;
    const int g = lane / 4, t = lane % 4, kw = k0 + 64 * cw, kr = kw + 16 * warp + g;
    unsigned char *gsm = raw + (base - p90_smem(raw));   /* generic view of the base */
    float dka[D / 2], dva[D / 2], sacc[DKV_BQ / 2], dpa[DKV_BQ / 2];
    uint32_t pf[DKV_BQ / 16][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dka[i] = dva[i] = 0;
#pragma unroll
    for (int kk = 0; kk < DKV_BQ / 16; kk++) pf[kk][0] = pf[kk][1] = pf[kk][2] = pf[kk][3] = 0u;
    p90_bar_wait(b.kv, 0);
    if (cw == 1) {   /* tile 0: nothing of ours; its copies must land before it is reused */
        p90_bar_wait(b.q, 0);
        p90_bar_wait(b.o, 0);
        __syncwarp();
        if (lane == 0) p90_bar_arrive(b.e);
    }
    uint32_t qprev = 0;
    for (int i = cw; i < nqt; i++) {
        const int s = i % NS, q0 = (qt0 + i) * DKV_BQ;
        const uint32_t ph = (uint32_t)(i / NS) & 1u;
        const uint32_t qt = base + C::Q0 + s * C::Q, ot = base + C::DO0 + s * C::Q;
        const float *sl = reinterpret_cast<const float *>(gsm + C::L0 + s * C::VEC);
        const float *sd = reinterpret_cast<const float *>(gsm + C::DV0 + s * C::VEC);
        const bool first = i == cw;
        p90_bar_wait(b.q + 8 * s, ph);
        p90_keep(sacc);
        p90_keep(dka);
        p90_keep_u(pf);
        p90_wg_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)   /* S^T = K Q^T */
            wg_ss64(sacc, a90_desc_k(base, DKV_BK, 64 * cw, ks), a90_desc_k(qt, DKV_BQ, 0, ks),
                    ks > 0);
        p90_wg_commit();
        /* dK += dS^T Q of the previous tile (on the first, pf is zeros: adds 0) */
#pragma unroll
        for (int kk = 0; kk < DKV_BQ / 16; kk++)
            a90_rs<D>(dka, pf[kk], a90_desc_n(first ? qt : qprev, DKV_BQ, kk));
        p90_wg_commit();
        p90_wg_wait<1>();
        p90_keep(sacc);
        dkv_probs(sacc, sl, a.sl2, kw, kr, q0, t);
        p90_wg_wait<0>();
        p90_keep(dka);
        p90_keep_u(pf);
        if (!first) {   /* the previous tile's Q is no longer read */
            __syncwarp();
            if (lane == 0) p90_bar_arrive(b.e + 8 * ((i + NS - 1) % NS));
        }
        a90_pack<DKV_BQ>(pf, sacc);
        p90_bar_wait(b.o + 8 * s, ph);
        p90_keep(dva);
        p90_keep(dpa);
        p90_wg_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)   /* dP^T = V dO^T */
            wg_ss64(dpa, a90_desc_k(base + C::V0, DKV_BK, 64 * cw, ks),
                    a90_desc_k(ot, DKV_BQ, 0, ks), ks > 0);
        p90_wg_commit();
#pragma unroll
        for (int kk = 0; kk < DKV_BQ / 16; kk++)   /* dV += P^T dO */
            a90_rs<D>(dva, pf[kk], a90_desc_n(ot, DKV_BQ, kk));
        p90_wg_commit();
        p90_wg_wait<1>();
        p90_keep(dpa);
        /* dS^T = P^T * (dP^T - D) in fp32 over the scores' registers while dV runs, P rounded
         * to bf16 as the dV product reads it */
#pragma unroll
        for (int x = 0; x < DKV_BQ / 2; x++) {
            const int qi = 8 * (x / 4) + 2 * t + (x & 1);
            sacc[x] = __bfloat162float(__float2bfloat16_rn(sacc[x])) * (dpa[x] - sd[qi]);
        }
        p90_wg_wait<0>();
        p90_keep(dva);
        p90_keep_u(pf);
        a90_pack<DKV_BQ>(pf, sacc);
        qprev = qt;
    }
    p90_keep(dka);
    p90_keep_u(pf);
    p90_wg_fence();
#pragma unroll
    for (int kk = 0; kk < DKV_BQ / 16; kk++)   /* dK += dS^T Q of the last tile */
        a90_rs<D>(dka, pf[kk], a90_desc_n(qprev, DKV_BQ, kk));
    p90_wg_commit();
    p90_wg_wait<0>();
    p90_keep(dka);
    p90_keep_u(pf);
    __syncwarp();
    if (lane == 0) p90_bar_arrive(b.e + 8 * ((nqt - 1) % NS));
    a90_store<D>(a.dk, (size_t)a.ldqkv, (size_t)row0 + kr, c0, dka, a.scale, a.scale, t);
    a90_store<D>(a.dv, (size_t)a.ldqkv, (size_t)row0 + kr, c0, dva, 1.0f, 1.0f, t);
}

template <int D, bool ONE, bool PP>
__global__ void __launch_bounds__(A90_NT, 1)
attn90_dkv_k(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
             const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
             const bwd_args a)
{
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = a90_base(smem_raw);
    const dkv_work w = dkv_item(a, ONE);
    const int kb = w.kb, bh = w.bh;
    const int row0 = bh / a.H * a.S, c0 = bh % a.H * D;
    const int k0 = kb * DKV_BK, qt0 = w.qa, nqt = w.qb - w.qa;
    if (threadIdx.x == 0) {
        const dkv_bars b = dkv_bars_at<D, ONE, PP>(base);
        p90_bar_init(b.kv, 1);
        for (int s = 0; s < dkv_cfg<D, ONE, PP>::NST; s++) {
            p90_bar_init(b.q + 8 * s, 1);
            p90_bar_init(b.o + 8 * s, 1);
            p90_bar_init(b.e + 8 * s, 8);     /* one arrival per consumer warp */
            p90_bar_init(b.dqf + 8 * s, 8);
            p90_bar_init(b.dqe + 8 * s, 1);   /* the writer */
        }
        for (int x = 0; x < 2; x++) {   /* the one pass's dS buffers: one arrival per consumer warp */
            p90_bar_init(b.dsf + 8 * x, 8);
            p90_bar_init(b.dse + 8 * x, 8);
        }
        p90_bar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x < A90_WG) {
        p90_regs_dec<A90_REGS_PRODUCER>();
        if (threadIdx.x == 0)
            dkv_produce<D, ONE, PP>(&tk, &tv, &tq, &tdo, a, base, bh, row0, k0, c0, qt0, nqt);
        else if constexpr (ONE) {
            if (threadIdx.x == 32) dkv_write_dq<D>(a, base, bh, kb, qt0, nqt);
        }
    } else {
        p90_regs_inc<A90_REGS_CONSUMER>();
        if constexpr (PP && !ONE) dkv_consume_pp<D>(a, smem_raw, base, row0, k0, c0, qt0, nqt);
        else if constexpr (ONE)
            dkv_consume_one<D, PP>(a, smem_raw, base, w, row0, k0, c0, qt0, nqt);
        else dkv_consume<D>(a, smem_raw, base, row0, k0, c0, qt0, nqt);
    }
}

/* dq (bf16, token-major) = the one-pass form's fp32 accumulator x scale. The accumulator holds
 * each (b h, 64-query tile) as 32 KB in the consumers' fragment order (dkv_dq_part): float4 j
 * of thread ct = 128 cw + 32 warp + lane is query 16 warp + lane / 4 (and + 8), columns
 * 64 cw + 8 j + 2 (lane % 4) (and + 1). One block of 256 threads per tile, thread ct reading
 * what consumer thread ct wrote. */
template <int D>
__global__ void __launch_bounds__(256) attn90_dq_out_k(bf16 *__restrict__ dq, int ldqkv,
                                                       const float *__restrict__ acc, int H,
                                                       int S, float scale)
{
    static_assert(D == 128, "the one-pass form's fragment order is for head dim 128");
    const int ct = threadIdx.x, cw = ct / 128, warp = (ct / 32) % 4, lane = ct % 32;
    const size_t tile = blockIdx.x, bh = tile / (S / DKV_BQ);
    const int q0 = (int)(tile % (S / DKV_BQ)) * DKV_BQ + 16 * warp + lane / 4;
    const float4 *src = reinterpret_cast<const float4 *>(acc + tile * DKV_BQ * D);
    bf16 *row = dq + (bh / H * S + q0) * (size_t)ldqkv + (bh % H) * D + 64 * cw + 2 * (lane % 4);
    float4 v[8];   /* every load in flight before the first store */
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = __ldg(src + 256 * j + ct);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        *reinterpret_cast<uint32_t *>(row + 8 * j) = p90_pack(v[j].x * scale, v[j].y * scale);
        *reinterpret_cast<uint32_t *>(row + 8 * (size_t)ldqkv + 8 * j) =
            p90_pack(v[j].z * scale, v[j].w * scale);
    }
}

/* ======================= host side ======================= */

template <int D> static rt_status a90_attrs(ms_error *err)
{
    RT_TRY(a90_smem(attn90_fwd_k<D, false>, fwd_cfg<D>::SMEM, err));
    RT_TRY(a90_smem(attn90_fwd_k<D, true>, fwd_cfg<D>::SMEM, err));
    RT_TRY(a90_smem(attn90_dq_k<D, false>, dq_cfg<D>::SMEM, err));
    RT_TRY(a90_smem(attn90_dq_k<D, true>, dq_cfg<D>::SMEM, err));
    RT_TRY(a90_smem(attn90_dkv_k<D, false, false>, dkv_cfg<D, false>::SMEM, err));
    RT_TRY(a90_smem(attn90_dkv_k<D, false, true>, dkv_cfg<D, false, true>::SMEM, err));
    if constexpr (D == 128) {
        RT_TRY(a90_smem(attn90_dkv_k<D, true, false>, dkv_cfg<D, true>::SMEM, err));
        RT_TRY(a90_smem(attn90_dkv_k<D, true, true>, dkv_cfg<D, true, true>::SMEM, err));
    }
    return RT_OK;
}

rt_status attn90_setup(void **encode, ms_error *err)
{
    *encode = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fp = NULL;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fp, 12000,
                                                     cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fp)
        return a90_fail("cudaGetDriverEntryPointByVersion", "cuTensorMapEncodeTiled not found",
                        err);
    RT_TRY(a90_attrs<64>(err));
    RT_TRY(a90_attrs<128>(err));
    RT_TRY(a90_selftest_attrs(err));
    *encode = fp;
    return RT_OK;
}

rt_status attn90_fwd(void *encode, void *stream, int flags, uint16_t *o, float *lse,
                     const uint16_t *q, const uint16_t *k, const uint16_t *v, size_t ld_qkv,
                     size_t ld_o, size_t B, size_t H, size_t S, size_t D, ms_error *err)
{
    CUtensorMap tq, tk, tv;
    const size_t T = B * S, w = H * D;
    RT_TRY(a90_map(encode, &tq, q, w, T, ld_qkv, FWD_BR, err));
    RT_TRY(a90_map(encode, &tk, k, w, T, ld_qkv, FWD_BC, err));
    RT_TRY(a90_map(encode, &tv, v, w, T, ld_qkv, FWD_BC, err));
    fwd_args a = {(bf16 *)o, lse, (int)ld_o, (int)H, (int)S, A90_LOG2E / sqrtf((float)D)};
    dim3 grid((unsigned)(S / FWD_BR), (unsigned)(B * H));
    cudaStream_t s = (cudaStream_t)stream;
    const bool pp = flags & ATTN90_PINGPONG;
    if (D == 64 && pp)
        attn90_fwd_k<64, true><<<grid, A90_NT, fwd_cfg<64>::SMEM, s>>>(tq, tk, tv, a);
    else if (D == 64)
        attn90_fwd_k<64, false><<<grid, A90_NT, fwd_cfg<64>::SMEM, s>>>(tq, tk, tv, a);
    else if (pp)
        attn90_fwd_k<128, true><<<grid, A90_NT, fwd_cfg<128>::SMEM, s>>>(tq, tk, tv, a);
    else
        attn90_fwd_k<128, false><<<grid, A90_NT, fwd_cfg<128>::SMEM, s>>>(tq, tk, tv, a);
    return a90_launched("attn90_fwd_k", err);
}

static size_t a90_up(size_t n) { return (n + 63) / 64 * 64; }

int attn90_bwd_onepass(int flags, size_t S, size_t D, size_t l2_bytes)
{
    if (!(flags & ATTN90_ONEPASS) || D != 128) return 0;
    return (flags & ATTN90_DQ_DEFER) || S * D * sizeof(float) <= l2_bytes;
}

int attn90_bwd_qchunk(int flags, size_t S, size_t D, size_t l2_bytes)
{
    if (!(flags & ATTN90_QCHUNK) || !(flags & ATTN90_ONEPASS) || D != 128 || !l2_bytes)
        return 0;
    if (S * D * sizeof(float) <= l2_bytes / 2) return 0;
    size_t c = l2_bytes / 2 / (DKV_BQ * D * 8);   /* Q and dO in bf16, the fp32 accumulator */
    c -= c % 2;                                   /* whole key blocks of 2 query tiles */
    if (c < 2) c = 2;
    return c >= S / DKV_BQ ? 0 : (int)c;
}

/* The one pass's counters, as ints at the scratch's start: per (b h, query tile), per
 * (b h, key block), per b h. */
static size_t a90_counters(size_t B, size_t H, size_t S)
{
    return B * H * (S / DKV_BQ) + B * H * (S / DKV_BK) + B * H;
}

size_t attn90_bwd_scratch_floats(size_t B, size_t H, size_t S, size_t D, int qchunk)
{
    const size_t ring = qchunk ? (size_t)DKV_RING * (S / DKV_BK) * 2 * DKV_BK * D : 0;
    return a90_up(a90_counters(B, H, S)) + B * H * S * D + ring;
}

/* The two-kernel form, its products overlapped within each warpgroup (PP) or not. */
template <int D, bool PP>
static rt_status a90_bwd_two(const bwd_args &a, const CUtensorMap *m, unsigned nkb,
                             unsigned bhs, size_t S, cudaStream_t s, ms_error *err)
{
    attn90_dkv_k<D, false, PP><<<dim3(nkb, bhs), A90_NT, dkv_cfg<D, false, PP>::SMEM, s>>>(
        m[0], m[1], m[2], m[3], a);
    RT_TRY(a90_launched("attn90_dkv_k", err));
    attn90_dq_k<D, PP><<<dim3((unsigned)(S / DQ_BQ), bhs), A90_NT, dq_cfg<D>::SMEM, s>>>(
        m[4], m[5], m[0], m[1], a);
    return a90_launched("attn90_dq_k", err);
}

template <int D>
static rt_status a90_bwd_launch(const bwd_args &a, int flags, const CUtensorMap *m, size_t B,
                                size_t H, size_t S, cudaStream_t s, ms_error *err)
{
    const unsigned bhs = (unsigned)(B * H), nkb = (unsigned)(S / DKV_BK);
    if constexpr (D == 128) if (flags & ATTN90_ONEPASS) {
        const unsigned n = (unsigned)a.nitems * bhs;
        if (flags & ATTN90_DQ_DEFER)
            attn90_dkv_k<D, true, true><<<n, A90_NT, dkv_cfg<D, true>::SMEM, s>>>(
                m[0], m[1], m[2], m[3], a);
        else
            attn90_dkv_k<D, true, false><<<n, A90_NT, dkv_cfg<D, true>::SMEM, s>>>(
                m[0], m[1], m[2], m[3], a);
        RT_TRY(a90_launched("attn90_dkv_k (one pass)", err));
        attn90_dq_out_k<D><<<(unsigned)(B * H * (S / DKV_BQ)), 256, 0, s>>>(
            a.dq, a.ldqkv, a.dqacc, (int)H, (int)S, a.scale);
        return a90_launched("attn90_dq_out_k", err);
    }
    if (flags & ATTN90_BWD_OVERLAP) return a90_bwd_two<D, true>(a, m, nkb, bhs, S, s, err);
    return a90_bwd_two<D, false>(a, m, nkb, bhs, S, s, err);
}

rt_status attn90_bwd(void *encode, void *stream, int flags, uint16_t *dq, uint16_t *dk,
                     uint16_t *dv, const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, const float *lse, const float *dvec, float *scratch,
                     int qchunk, size_t ld_qkv, size_t ld_o, size_t B, size_t H, size_t S,
                     size_t D, ms_error *err)
{
    /* maps: K, V (128-row boxes), Q, dO (64-row boxes) for dk/dv; Q, dO (128) for dq */
    CUtensorMap m[6];
    const size_t T = B * S, w = H * D;
    const int one = (flags & ATTN90_ONEPASS) && D == 128;   /* D 64: the two-kernel form */
    RT_TRY(a90_map(encode, &m[0], k, w, T, ld_qkv, DKV_BK, err));
    RT_TRY(a90_map(encode, &m[1], v, w, T, ld_qkv, DKV_BK, err));
    RT_TRY(a90_map(encode, &m[2], q, w, T, ld_qkv, DKV_BQ, err));
    RT_TRY(a90_map(encode, &m[3], dout, w, T, ld_o, DKV_BQ, err));
    if (!one) {
        RT_TRY(a90_map(encode, &m[4], q, w, T, ld_qkv, DQ_BQ, err));
        RT_TRY(a90_map(encode, &m[5], dout, w, T, ld_o, DQ_BQ, err));
    }
    if (qchunk < 0 || qchunk % 2 || !one || (size_t)qchunk >= S / DKV_BQ) qchunk = 0;
    const size_t nsem = B * H * (S / DKV_BQ), nc = a90_counters(B, H, S);
    bwd_args a = {(bf16 *)dq, (bf16 *)dk, (bf16 *)dv, lse, dvec, (int)ld_qkv, (int)H, (int)S,
                  A90_LOG2E / sqrtf((float)D), 1.0f / sqrtf((float)D),
                  scratch + a90_up(nc), (int *)scratch,
                  qchunk, dkv_items((int)S, qchunk), (int *)scratch + nsem,
                  (int *)scratch + nsem + B * H * (S / DKV_BK),
                  qchunk ? scratch + a90_up(nc) + B * H * S * D : NULL};
    cudaStream_t s = (cudaStream_t)stream;
    if (one) RT_CHECK(err, cudaMemsetAsync(a.sem, 0, nc * sizeof(int), s));
    const int f = one ? flags & (ATTN90_ONEPASS | ATTN90_DQ_DEFER) : flags & ~ATTN90_ONEPASS;
    if (D == 64) return a90_bwd_launch<64>(a, f, m, B, H, S, s, err);
    return a90_bwd_launch<128>(a, f, m, B, H, S, s, err);
}

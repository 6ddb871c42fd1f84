/* attn_sm80.cu — causal flash attention on the tensor cores' mma.sync (attn_sm80.h), the
 * runtime's kernels for GPUs other than compute capability 9.0 (and its reference form there):
 * FlashAttention-2's loop order written here from the papers' algorithm, mma.sync m16n8k16
 * bf16 with ldmatrix from padded shared rows and cp.async double buffering; the backward in
 * two kernels (dk/dv per key block, dq per query block), no atomics, after its first step,
 * dvec = rowsum(dO * O), which the sm_90 kernels share. Compiled for CUDA_ARCH; called by
 * runtime/kernels.cu. */
#include "runtime/attn_sm80.h"

#include "runtime/bf16_dev.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

static rt_status launched(const char *what, ms_error *err)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, what, cudaGetErrorString(e));
    return RT_OK;
}


/* ======================= attention ======================= */
/* Tensor-core building blocks (PTX ISA: mma.m16n8k16 fragments, ldmatrix, cp.async).
 * Fragment layouts, lane = 4 * g + t4:
 *   A (16x16, row): a0 = (g, 2t4..+1), a1 = (g+8, 2t4..), a2 = (g, 8+2t4..), a3 = (g+8, 8+2t4..)
 *   B (16x8, col):  b0 = (k 2t4..+1, n g), b1 = (k 8+2t4..+1, n g)
 *   C (16x8):       c0,c1 = (g, 2t4..+1), c2,c3 = (g+8, 2t4..+1)
 * so the C fragments of two adjacent 8-column tiles are, packed to bf16 pairs, exactly the
 * A fragment of the 16-column block they form: scores never leave the registers. Shared
 * memory rows are padded by 16 bytes (DP = D + 8) so that ldmatrix's eight row addresses
 * fall in distinct banks. */

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldsm4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm4t(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(uint32_t saddr, const void *g)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(g) : "memory");
}

__device__ __forceinline__ void cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float2 unpack_bf16(uint32_t u)
{
    __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162 *>(&u);
    return __bfloat1622float2(v);
}

/* R rows of D columns from global (row stride ld) into shared (row stride D + 8). */
template <int R, int D, int NT>
__device__ __forceinline__ void load_tile(bf16 *s, const bf16 *g, size_t ld, int tid)
{
    constexpr int CH = D / 8;
    static_assert(R * CH % NT == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int it = 0; it < R * CH / NT; it++) {
        int i = tid + it * NT, r = i / CH, c = (i % CH) * 8;
        cp_async16(smem_u32(s + r * (D + 8) + c), g + (size_t)r * ld + c);
    }
}

/* n fp32 values (n a multiple of 4) into shared memory. */
template <int N, int NT>
__device__ __forceinline__ void load_vec(float *s, const float *g, int tid)
{
    static_assert(N / 4 <= NT, "one chunk per thread");
    if (tid < N / 4) cp_async16(smem_u32(s + tid * 4), g + tid * 4);
}

/* Address of the A fragment (16 rows from row0, k block ks) for ldsm4, stride DP. */
template <int DP>
__device__ __forceinline__ uint32_t a_addr(const bf16 *s, int row0, int ks, int lane)
{
    return smem_u32(s + (row0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * DP + ks * 16 +
                    (lane >> 4) * 8);
}

/* B fragments of two adjacent n tiles nt, nt+1 from a matrix stored [n][k] (ldsm4). */
template <int DP>
__device__ __forceinline__ uint32_t bn_addr(const bf16 *s, int nt, int ks, int lane)
{
    return smem_u32(s + ((nt + (lane >> 4)) * 8 + (lane & 7)) * DP + ks * 16 +
                    ((lane >> 3) & 1) * 8);
}

/* B fragments of two adjacent n tiles dt, dt+1 from a matrix stored [k][n] (ldsm4t),
 * k block kk. */
template <int DP>
__device__ __forceinline__ uint32_t bt_addr(const bf16 *s, int kk, int dt, int lane)
{
    return smem_u32(s + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * DP +
                    (dt + (lane >> 4)) * 8);
}

/* ---- forward: CTA = 128 queries of one (batch, head), 8 warps of 16 rows; key tiles of
 * 64 double-buffered; heaviest query tiles first. ---- */
#define AF_BR 128
#define AF_BC 64
#define AF_NT 256

template <int D>
__global__ void __launch_bounds__(AF_NT, 1)
attn_fwd_k(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int ldqkv, int ldo,
           int H, int S, float scale_log2)
{
    constexpr int DP = D + 8, NKT = D / 16, NDT = D / 8, NST = AF_BC / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sK = sQ + AF_BR * DP;
    bf16 *sV = sK + 2 * AF_BC * DP;
    const int nq = S / AF_BR, qt = nq - 1 - (int)blockIdx.x, bh = blockIdx.y;
    const int b = bh / H, hd = bh % H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int q0 = qt * AF_BR, roww = q0 + warp * 16;
    const size_t tok0 = (size_t)b * S;
    const bf16 *kg = k + tok0 * ldqkv + hd * D, *vg = v + tok0 * ldqkv + hd * D;
    const int nkt = (q0 + AF_BR) / AF_BC;

    load_tile<AF_BR, D, AF_NT>(sQ, q + (tok0 + q0) * ldqkv + hd * D, ldqkv, tid);
    load_tile<AF_BC, D, AF_NT>(sK, kg, ldqkv, tid);
    load_tile<AF_BC, D, AF_NT>(sV, vg, ldqkv, tid);
    cp_commit();

    uint32_t qf[NKT][4];
    float oacc[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0;
    float mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0, 0};

    for (int j = 0; j < nkt; j++) {
        if (j + 1 < nkt) {
            int nb = (j + 1) & 1;
            load_tile<AF_BC, D, AF_NT>(sK + nb * AF_BC * DP, kg + (size_t)(j + 1) * AF_BC * ldqkv,
                                       ldqkv, tid);
            load_tile<AF_BC, D, AF_NT>(sV + nb * AF_BC * DP, vg + (size_t)(j + 1) * AF_BC * ldqkv,
                                       ldqkv, tid);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int ks = 0; ks < NKT; ks++) ldsm4(qf[ks], a_addr<DP>(sQ, warp * 16, ks, lane));
        }
        const int k0 = j * AF_BC;
        if (k0 <= roww + 15) {
            const bf16 *cK = sK + (j & 1) * AF_BC * DP, *cV = sV + (j & 1) * AF_BC * DP;
            float s[NST][4];
#pragma unroll
            for (int i = 0; i < NST; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0;
#pragma unroll
            for (int ks = 0; ks < NKT; ks++)
#pragma unroll
                for (int nt = 0; nt < NST; nt += 2) {
                    uint32_t r[4];
                    ldsm4(r, bn_addr<DP>(cK, nt, ks, lane));
                    mma16816(s[nt], qf[ks], r[0], r[1]);
                    mma16816(s[nt + 1], qf[ks], r[2], r[3]);
                }
            const bool diag = k0 + AF_BC - 1 > roww;
            float mx[2] = {mr[0], mr[1]};
#pragma unroll
            for (int nt = 0; nt < NST; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = s[nt][e] * scale_log2;
                    if (diag && k0 + nt * 8 + 2 * t4 + (e & 1) > roww + g + (e >> 1) * 8)
                        x = -INFINITY;
                    s[nt][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float ms[2], alpha[2], rs[2] = {0, 0};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                ms[i] = mx[i] == -INFINITY ? 0.0f : mx[i];
                alpha[i] = exp2f(mr[i] - ms[i]);
                mr[i] = mx[i];
            }
#pragma unroll
            for (int nt = 0; nt < NST; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(s[nt][e] - ms[e >> 1]);
                    s[nt][e] = p;
                    rs[e >> 1] += p;
                }
#pragma unroll
            for (int i = 0; i < 2; i++) lr[i] = lr[i] * alpha[i] + rs[i];
#pragma unroll
            for (int dt = 0; dt < NDT; dt++) {
                oacc[dt][0] *= alpha[0];
                oacc[dt][1] *= alpha[0];
                oacc[dt][2] *= alpha[1];
                oacc[dt][3] *= alpha[1];
            }
#pragma unroll
            for (int kk = 0; kk < AF_BC / 16; kk++) {
                uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]),
                                 pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                 pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                 pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int dt = 0; dt < NDT; dt += 2) {
                    uint32_t r[4];
                    ldsm4t(r, bt_addr<DP>(cV, kk, dt, lane));
                    mma16816(oacc[dt], a, r[0], r[1]);
                    mma16816(oacc[dt + 1], a, r[2], r[3]);
                }
            }
        }
        __syncthreads();
    }
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        lr[i] += __shfl_xor_sync(0xffffffffu, lr[i], 1);
        lr[i] += __shfl_xor_sync(0xffffffffu, lr[i], 2);
        inv[i] = 1.0f / lr[i];
    }
    const size_t r0 = tok0 + roww + g, r1 = r0 + 8;
#pragma unroll
    for (int dt = 0; dt < NDT; dt++) {
        int c = hd * D + dt * 8 + 2 * t4;
        *reinterpret_cast<uint32_t *>(o + r0 * ldo + c) =
            pack_bf16(oacc[dt][0] * inv[0], oacc[dt][1] * inv[0]);
        *reinterpret_cast<uint32_t *>(o + r1 * ldo + c) =
            pack_bf16(oacc[dt][2] * inv[1], oacc[dt][3] * inv[1]);
    }
    if (t4 == 0) {
        lse[(size_t)bh * S + roww + g] = (mr[0] + log2f(lr[0])) * LN2;
        lse[(size_t)bh * S + roww + g + 8] = (mr[1] + log2f(lr[1])) * LN2;
    }
}

/* ---- backward, preprocessing: dvec[bh][i] = sum_c do * o (FlashAttention-2's D). ---- */
template <int D>
__global__ void attn_dvec_k(float *dvec, const bf16 *dout, const bf16 *o, int ldo, int H, int S,
                            size_t rows)
{
    size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x;   /* r = t * H + hd */
    if (r >= rows) return;
    size_t t = r / H;
    int hd = (int)(r % H);
    const bf16 *a = dout + t * ldo + hd * D, *b = o + t * ldo + hd * D;
    float s = 0;
#pragma unroll
    for (int c = 0; c < D; c += 8) {
        float x[8], y[8];
        ld8(a + c, x);
        ld8(b + c, y);
#pragma unroll
        for (int i = 0; i < 8; i++) s += x[i] * y[i];
    }
    size_t bi = t / S, i = t % S;
    dvec[(bi * H + hd) * S + i] = s;
}

/* ---- backward, dk and dv: CTA = 64 keys of one (batch, head), 4 warps of 16 keys, in the
 * transposed orientation (S^T = K Q^T) so that P^T and dS^T are A fragments in registers;
 * query tiles of 64 from the diagonal down, double-buffered. ---- */
#define AB_BK 64
#define AB_BQ 64
#define AB_NT 128

template <int D>
__global__ void __launch_bounds__(AB_NT, 1)
attn_bwd_dkv_k(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
               const bf16 *dout, const float *lse, const float *dvec, int ldqkv, int ldo, int H,
               int S, float scale_log2, float scale)
{
    constexpr int DP = D + 8, NKT = D / 16, NDT = D / 8, NST = AB_BQ / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sV = sK + AB_BK * DP;
    bf16 *sQ = sV + AB_BK * DP;                  /* 2 buffers */
    bf16 *sO = sQ + 2 * AB_BQ * DP;              /* dO, 2 buffers */
    float *sL = reinterpret_cast<float *>(sO + 2 * AB_BQ * DP);   /* lse * log2e, 2 x 64 */
    float *sD = sL + 2 * AB_BQ;                                   /* dvec, 2 x 64 */
    const int kt = blockIdx.x, bh = blockIdx.y, b = bh / H, hd = bh % H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int k0 = kt * AB_BK, kw = k0 + warp * 16;
    const size_t tok0 = (size_t)b * S;
    const bf16 *qg = q + tok0 * ldqkv + hd * D, *og = dout + tok0 * ldo + hd * D;
    const float *lg = lse + (size_t)bh * S, *dg = dvec + (size_t)bh * S;
    const int qt0 = k0 / AB_BQ, nqt = S / AB_BQ;

    load_tile<AB_BK, D, AB_NT>(sK, k + (tok0 + k0) * ldqkv + hd * D, ldqkv, tid);
    load_tile<AB_BK, D, AB_NT>(sV, v + (tok0 + k0) * ldqkv + hd * D, ldqkv, tid);
    load_tile<AB_BQ, D, AB_NT>(sQ, qg + (size_t)qt0 * AB_BQ * ldqkv, ldqkv, tid);
    load_tile<AB_BQ, D, AB_NT>(sO, og + (size_t)qt0 * AB_BQ * ldo, ldo, tid);
    load_vec<AB_BQ, AB_NT>(sL, lg + qt0 * AB_BQ, tid);
    load_vec<AB_BQ, AB_NT>(sD, dg + qt0 * AB_BQ, tid);
    cp_commit();

    float dka[NDT][4], dva[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[i][e] = dva[i][e] = 0;

    for (int qt = qt0; qt < nqt; qt++) {
        const int cur = (qt - qt0) & 1;
        if (qt + 1 < nqt) {
            int nb = cur ^ 1;
            load_tile<AB_BQ, D, AB_NT>(sQ + nb * AB_BQ * DP, qg + (size_t)(qt + 1) * AB_BQ * ldqkv,
                                       ldqkv, tid);
            load_tile<AB_BQ, D, AB_NT>(sO + nb * AB_BQ * DP, og + (size_t)(qt + 1) * AB_BQ * ldo,
                                       ldo, tid);
            load_vec<AB_BQ, AB_NT>(sL + nb * AB_BQ, lg + (qt + 1) * AB_BQ, tid);
            load_vec<AB_BQ, AB_NT>(sD + nb * AB_BQ, dg + (qt + 1) * AB_BQ, tid);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const int q0 = qt * AB_BQ;
        if (kw <= q0 + AB_BQ - 1) {
            const bf16 *cQ = sQ + cur * AB_BQ * DP, *cO = sO + cur * AB_BQ * DP;
            const float *cL = sL + cur * AB_BQ, *cD = sD + cur * AB_BQ;
            float s[NST][4];
#pragma unroll
            for (int i = 0; i < NST; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0;
#pragma unroll
            for (int ks = 0; ks < NKT; ks++) {
                uint32_t a[4];
                ldsm4(a, a_addr<DP>(sK, warp * 16, ks, lane));
#pragma unroll
                for (int nt = 0; nt < NST; nt += 2) {
                    uint32_t r[4];
                    ldsm4(r, bn_addr<DP>(cQ, nt, ks, lane));
                    mma16816(s[nt], a, r[0], r[1]);
                    mma16816(s[nt + 1], a, r[2], r[3]);
                }
            }
            const bool diag = kw + 15 > q0;
            /* P^T (keys x queries), packed to bf16 A fragments */
            uint32_t pf[AB_BQ / 16][4];
#pragma unroll
            for (int nt = 0; nt < NST; nt++) {
                float p[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int qi = nt * 8 + 2 * t4 + (e & 1);
                    float x = exp2f(s[nt][e] * scale_log2 - cL[qi] * LOG2E);
                    if (diag && kw + g + (e >> 1) * 8 > q0 + qi) x = 0.0f;
                    p[e] = x;
                }
                pf[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(p[0], p[1]);
                pf[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(p[2], p[3]);
            }
            /* dV += P^T dO */
#pragma unroll
            for (int kk = 0; kk < AB_BQ / 16; kk++)
#pragma unroll
                for (int dt = 0; dt < NDT; dt += 2) {
                    uint32_t r[4];
                    ldsm4t(r, bt_addr<DP>(cO, kk, dt, lane));
                    mma16816(dva[dt], pf[kk], r[0], r[1]);
                    mma16816(dva[dt + 1], pf[kk], r[2], r[3]);
                }
            /* dP^T = V dO^T */
#pragma unroll
            for (int i = 0; i < NST; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0;
#pragma unroll
            for (int ks = 0; ks < NKT; ks++) {
                uint32_t a[4];
                ldsm4(a, a_addr<DP>(sV, warp * 16, ks, lane));
#pragma unroll
                for (int nt = 0; nt < NST; nt += 2) {
                    uint32_t r[4];
                    ldsm4(r, bn_addr<DP>(cO, nt, ks, lane));
                    mma16816(s[nt], a, r[0], r[1]);
                    mma16816(s[nt + 1], a, r[2], r[3]);
                }
            }
            /* dS^T = P^T * (dP^T - D), packed (reuses pf) */
#pragma unroll
            for (int nt = 0; nt < NST; nt++) {
                float2 p01 = unpack_bf16(pf[nt >> 1][(nt & 1) * 2 + 0]);
                float2 p23 = unpack_bf16(pf[nt >> 1][(nt & 1) * 2 + 1]);
                int qi = nt * 8 + 2 * t4;
                float d0 = cD[qi], d1 = cD[qi + 1];
                pf[nt >> 1][(nt & 1) * 2 + 0] =
                    pack_bf16(p01.x * (s[nt][0] - d0), p01.y * (s[nt][1] - d1));
                pf[nt >> 1][(nt & 1) * 2 + 1] =
                    pack_bf16(p23.x * (s[nt][2] - d0), p23.y * (s[nt][3] - d1));
            }
            /* dK += dS^T Q */
#pragma unroll
            for (int kk = 0; kk < AB_BQ / 16; kk++)
#pragma unroll
                for (int dt = 0; dt < NDT; dt += 2) {
                    uint32_t r[4];
                    ldsm4t(r, bt_addr<DP>(cQ, kk, dt, lane));
                    mma16816(dka[dt], pf[kk], r[0], r[1]);
                    mma16816(dka[dt + 1], pf[kk], r[2], r[3]);
                }
        }
        __syncthreads();
    }
    const size_t r0 = tok0 + kw + g, r1 = r0 + 8;
#pragma unroll
    for (int dt = 0; dt < NDT; dt++) {
        int c = hd * D + dt * 8 + 2 * t4;
        *reinterpret_cast<uint32_t *>(dk + r0 * ldqkv + c) =
            pack_bf16(dka[dt][0] * scale, dka[dt][1] * scale);
        *reinterpret_cast<uint32_t *>(dk + r1 * ldqkv + c) =
            pack_bf16(dka[dt][2] * scale, dka[dt][3] * scale);
        *reinterpret_cast<uint32_t *>(dv + r0 * ldqkv + c) = pack_bf16(dva[dt][0], dva[dt][1]);
        *reinterpret_cast<uint32_t *>(dv + r1 * ldqkv + c) = pack_bf16(dva[dt][2], dva[dt][3]);
    }
}

/* ---- backward, dq: CTA = 64 queries, 4 warps of 16 rows; key tiles of 64 up to the
 * diagonal, double-buffered; heaviest first. ---- */
template <int D>
__global__ void __launch_bounds__(AB_NT, 1)
attn_bwd_dq_k(bf16 *dq, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
              const float *lse, const float *dvec, int ldqkv, int ldo, int H, int S,
              float scale_log2, float scale)
{
    constexpr int DP = D + 8, NKT = D / 16, NDT = D / 8, NST = AB_BK / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sO = sQ + AB_BQ * DP;
    bf16 *sK = sO + AB_BQ * DP;              /* 2 buffers */
    bf16 *sV = sK + 2 * AB_BK * DP;          /* 2 buffers */
    const int nq = S / AB_BQ, qt = nq - 1 - (int)blockIdx.x, bh = blockIdx.y;
    const int b = bh / H, hd = bh % H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int q0 = qt * AB_BQ, roww = q0 + warp * 16;
    const size_t tok0 = (size_t)b * S;
    const bf16 *kg = k + tok0 * ldqkv + hd * D, *vg = v + tok0 * ldqkv + hd * D;
    const int nkt = (q0 + AB_BQ) / AB_BK;

    load_tile<AB_BQ, D, AB_NT>(sQ, q + (tok0 + q0) * ldqkv + hd * D, ldqkv, tid);
    load_tile<AB_BQ, D, AB_NT>(sO, dout + (tok0 + q0) * ldo + hd * D, ldo, tid);
    load_tile<AB_BK, D, AB_NT>(sK, kg, ldqkv, tid);
    load_tile<AB_BK, D, AB_NT>(sV, vg, ldqkv, tid);
    cp_commit();

    float lr[2], dr[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        lr[i] = lse[(size_t)bh * S + roww + g + i * 8] * LOG2E;
        dr[i] = dvec[(size_t)bh * S + roww + g + i * 8];
    }
    float dqa[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0;

    for (int j = 0; j < nkt; j++) {
        if (j + 1 < nkt) {
            int nb = (j + 1) & 1;
            load_tile<AB_BK, D, AB_NT>(sK + nb * AB_BK * DP, kg + (size_t)(j + 1) * AB_BK * ldqkv,
                                       ldqkv, tid);
            load_tile<AB_BK, D, AB_NT>(sV + nb * AB_BK * DP, vg + (size_t)(j + 1) * AB_BK * ldqkv,
                                       ldqkv, tid);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const int k0 = j * AB_BK;
        if (k0 <= roww + 15) {
            const bf16 *cK = sK + (j & 1) * AB_BK * DP, *cV = sV + (j & 1) * AB_BK * DP;
            float s[NST][4], dp[NST][4];
#pragma unroll
            for (int i = 0; i < NST; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[i][e] = dp[i][e] = 0;
#pragma unroll
            for (int ks = 0; ks < NKT; ks++) {
                uint32_t a[4], c[4];
                ldsm4(a, a_addr<DP>(sQ, warp * 16, ks, lane));
                ldsm4(c, a_addr<DP>(sO, warp * 16, ks, lane));
#pragma unroll
                for (int nt = 0; nt < NST; nt += 2) {
                    uint32_t r[4];
                    ldsm4(r, bn_addr<DP>(cK, nt, ks, lane));
                    mma16816(s[nt], a, r[0], r[1]);
                    mma16816(s[nt + 1], a, r[2], r[3]);
                    ldsm4(r, bn_addr<DP>(cV, nt, ks, lane));
                    mma16816(dp[nt], c, r[0], r[1]);
                    mma16816(dp[nt + 1], c, r[2], r[3]);
                }
            }
            const bool diag = k0 + AB_BK - 1 > roww;
            uint32_t df[AB_BK / 16][4];
#pragma unroll
            for (int nt = 0; nt < NST; nt++) {
                float d[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e >> 1;
                    float p = exp2f(s[nt][e] * scale_log2 - lr[i]);
                    if (diag && k0 + nt * 8 + 2 * t4 + (e & 1) > roww + g + i * 8) p = 0.0f;
                    d[e] = p * (dp[nt][e] - dr[i]);
                }
                df[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(d[0], d[1]);
                df[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(d[2], d[3]);
            }
#pragma unroll
            for (int kk = 0; kk < AB_BK / 16; kk++)
#pragma unroll
                for (int dt = 0; dt < NDT; dt += 2) {
                    uint32_t r[4];
                    ldsm4t(r, bt_addr<DP>(cK, kk, dt, lane));
                    mma16816(dqa[dt], df[kk], r[0], r[1]);
                    mma16816(dqa[dt + 1], df[kk], r[2], r[3]);
                }
        }
        __syncthreads();
    }
    const size_t r0 = tok0 + roww + g, r1 = r0 + 8;
#pragma unroll
    for (int dt = 0; dt < NDT; dt++) {
        int c = hd * D + dt * 8 + 2 * t4;
        *reinterpret_cast<uint32_t *>(dq + r0 * ldqkv + c) =
            pack_bf16(dqa[dt][0] * scale, dqa[dt][1] * scale);
        *reinterpret_cast<uint32_t *>(dq + r1 * ldqkv + c) =
            pack_bf16(dqa[dt][2] * scale, dqa[dt][3] * scale);
    }
}

template <int D> static size_t fwd_smem(void) { return (size_t)(AF_BR + 4 * AF_BC) * (D + 8) * 2; }
template <int D> static size_t dkv_smem(void)
{
    return (size_t)(2 * AB_BK + 4 * AB_BQ) * (D + 8) * 2 + 4 * AB_BQ * sizeof(float);
}
template <int D> static size_t dq_smem(void) { return (size_t)(2 * AB_BQ + 4 * AB_BK) * (D + 8) * 2; }

template <int D> static rt_status attn_setup_d(ms_error *err)
{
    RT_CHECK(err, cudaFuncSetAttribute(attn_fwd_k<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)fwd_smem<D>()));
    RT_CHECK(err, cudaFuncSetAttribute(attn_bwd_dkv_k<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)dkv_smem<D>()));
    RT_CHECK(err, cudaFuncSetAttribute(attn_bwd_dq_k<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)dq_smem<D>()));
    return RT_OK;
}

rt_status attn80_setup(ms_error *err)
{
    RT_TRY(attn_setup_d<64>(err));
    return attn_setup_d<128>(err);
}

rt_status attn80_fwd(void *stream, uint16_t *o, float *lse, const uint16_t *q, const uint16_t *kk,
                     const uint16_t *v, size_t ld_qkv, size_t ld_o, size_t B, size_t H, size_t S,
                     size_t D, ms_error *err)
{
    cudaStream_t s = (cudaStream_t)stream;
    dim3 grid((unsigned)(S / AF_BR), (unsigned)(B * H));
    float sl2 = LOG2E / sqrtf((float)D);
    if (D == 64)
        attn_fwd_k<64><<<grid, AF_NT, fwd_smem<64>(), s>>>(
            (bf16 *)o, lse, (const bf16 *)q, (const bf16 *)kk, (const bf16 *)v, (int)ld_qkv,
            (int)ld_o, (int)H, (int)S, sl2);
    else
        attn_fwd_k<128><<<grid, AF_NT, fwd_smem<128>(), s>>>(
            (bf16 *)o, lse, (const bf16 *)q, (const bf16 *)kk, (const bf16 *)v, (int)ld_qkv,
            (int)ld_o, (int)H, (int)S, sl2);
    return launched("attn_fwd_k", err);
}

rt_status attn80_dvec(void *stream, float *dvec, const uint16_t *dout, const uint16_t *o,
                      size_t ld_o, size_t B, size_t H, size_t S, size_t D, ms_error *err)
{
    size_t rows = B * S * H;
    unsigned gr = (unsigned)((rows + 255) / 256);
    cudaStream_t s = (cudaStream_t)stream;
    if (D == 64)
        attn_dvec_k<64><<<gr, 256, 0, s>>>(dvec, (const bf16 *)dout, (const bf16 *)o, (int)ld_o,
                                           (int)H, (int)S, rows);
    else
        attn_dvec_k<128><<<gr, 256, 0, s>>>(dvec, (const bf16 *)dout, (const bf16 *)o, (int)ld_o,
                                            (int)H, (int)S, rows);
    return launched("attn_dvec_k", err);
}

rt_status attn80_bwd(void *stream, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                     const uint16_t *dout, const uint16_t *q, const uint16_t *kk,
                     const uint16_t *v, const float *lse, const float *dvec, size_t ld_qkv,
                     size_t ld_o, size_t B, size_t H, size_t S, size_t D, ms_error *err)
{
    cudaStream_t s = (cudaStream_t)stream;
    float sl2 = LOG2E / sqrtf((float)D), sc = 1.0f / sqrtf((float)D);
    dim3 gkv((unsigned)(S / AB_BK), (unsigned)(B * H)), gq((unsigned)(S / AB_BQ), (unsigned)(B * H));
    if (D == 64) {
        attn_bwd_dkv_k<64><<<gkv, AB_NT, dkv_smem<64>(), s>>>(
            (bf16 *)dk, (bf16 *)dv, (const bf16 *)q, (const bf16 *)kk, (const bf16 *)v,
            (const bf16 *)dout, lse, dvec, (int)ld_qkv, (int)ld_o, (int)H, (int)S, sl2, sc);
        RT_TRY(launched("attn_bwd_dkv_k", err));
        attn_bwd_dq_k<64><<<gq, AB_NT, dq_smem<64>(), s>>>(
            (bf16 *)dq, (const bf16 *)q, (const bf16 *)kk, (const bf16 *)v, (const bf16 *)dout,
            lse, dvec, (int)ld_qkv, (int)ld_o, (int)H, (int)S, sl2, sc);
    } else {
        attn_bwd_dkv_k<128><<<gkv, AB_NT, dkv_smem<128>(), s>>>(
            (bf16 *)dk, (bf16 *)dv, (const bf16 *)q, (const bf16 *)kk, (const bf16 *)v,
            (const bf16 *)dout, lse, dvec, (int)ld_qkv, (int)ld_o, (int)H, (int)S, sl2, sc);
        RT_TRY(launched("attn_bwd_dkv_k", err));
        attn_bwd_dq_k<128><<<gq, AB_NT, dq_smem<128>(), s>>>(
            (bf16 *)dq, (const bf16 *)q, (const bf16 *)kk, (const bf16 *)v, (const bf16 *)dout,
            lse, dvec, (int)ld_qkv, (int)ld_o, (int)H, (int)S, sl2, sc);
    }
    return launched("attn_bwd_dq_k", err);
}

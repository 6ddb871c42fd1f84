/* attn_sm90_test.cu — the Hopper attention kernels' layout self-test (attn_sm90_test.h): one warpgroup multiplies seeded bf16 tiles placed in shared memory by
 * the 128-byte swizzle the kernels of runtime/attn_sm90.cu assume, and compares with the
 * host's double products and TMA's copy of a tile. Called by runtime/kernels.cu
 * (kn_attn_selftest), which tests/test_kernels runs; compiled for sm_90a. */
#include "runtime/attn_sm90_test.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/attn_sm90_util.h"
#include "runtime/sm90_ptx.h"

/* ======================= layout self-test ======================= */

#define ST_A 0u            /* 64 x 128, K-major */
#define ST_B 16384u        /* 128 x 128, K-major (also the N-major V of the P V product) */
#define ST_T 49152u        /* 128 x 128 as TMA writes it */
#define ST_BAR 81920u
#define ST_SMEM (ST_BAR + 64 + 1024)

/* Offset of row r, 16-byte chunk c (of 16) of a [rows][128] tile at offset tile, by the
 * 128-byte swizzle. */
__device__ __forceinline__ uint32_t st_chunk(uint32_t tile, int rows, int r, int c)
{
    return tile + (uint32_t)(c / 8) * rows * 128 + (uint32_t)r * 128 +
           (uint32_t)((c % 8) ^ (r % 8)) * 16;
}

/* out[0..64x128): A B^T (n128); out[8192..+4096): A B[0:64]^T (n64); out[12288..+8192): P V with
 * P = A's values as registers and V = B read N-major; bad[thread]: the 4-byte words where TMA's
 * copy of B differs from the hand-swizzled one. */
__global__ void __launch_bounds__(A90_WG, 1)
attn90_selftest_k(const __grid_constant__ CUtensorMap tb, const bf16 *A, const bf16 *Bm,
                  float *out, int *bad_words)
{
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = a90_base(smem_raw);
    unsigned char *gsm = smem_raw + (base - p90_smem(smem_raw));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    for (int i = tid; i < 64 * 16; i += A90_WG) {
        const int r = i / 16, c = i % 16;
        *reinterpret_cast<uint4 *>(gsm + st_chunk(ST_A, 64, r, c)) =
            *reinterpret_cast<const uint4 *>(A + r * 128 + c * 8);
    }
    for (int i = tid; i < 128 * 16; i += A90_WG) {
        const int r = i / 16, c = i % 16;
        *reinterpret_cast<uint4 *>(gsm + st_chunk(ST_B, 128, r, c)) =
            *reinterpret_cast<const uint4 *>(Bm + r * 128 + c * 8);
    }
    const uint32_t bar = base + ST_BAR;
    if (tid == 0) {
        p90_bar_init(bar, 1);
        p90_bar_init_fence();
    }
    p90_fence_async_smem();
    __syncthreads();
    if (tid == 0) {
        p90_bar_expect(bar, 128 * 128 * 2);
        a90_load<128>(base + ST_T, 128, &tb, bar, 0, 0);
    }
    float c1[64], c2[32], c3[64];
    p90_wg_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ks++) {
        const uint64_t da = a90_desc_k(base + ST_A, 64, 0, ks);
        const uint64_t db = a90_desc_k(base + ST_B, 128, 0, ks);
        wg_ss128(c1, da, db, ks > 0);
        wg_ss64(c2, da, db, ks > 0);
    }
    p90_wg_commit();
    p90_wg_wait<0>();
    p90_keep(c1);
    p90_keep(c2);
    /* P = A as register fragments: rows 16 w + g (+ 8), k = 16 kk + 2 t (+ 8) */
    uint32_t pf[8][4];
    const bf16 *ar = A + (16 * warp + g) * 128;
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const int k = 16 * kk + 2 * t;
        pf[kk][0] = *reinterpret_cast<const uint32_t *>(ar + k);
        pf[kk][1] = *reinterpret_cast<const uint32_t *>(ar + 8 * 128 + k);
        pf[kk][2] = *reinterpret_cast<const uint32_t *>(ar + k + 8);
        pf[kk][3] = *reinterpret_cast<const uint32_t *>(ar + 8 * 128 + k + 8);
    }
#pragma unroll
    for (int i = 0; i < 64; i++) c3[i] = 0;
    p90_keep(c3);
    p90_wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) wg_rs128t(c3, pf[kk], a90_desc_n(base + ST_B, 128, kk), 1);
    p90_wg_commit();
    p90_wg_wait<0>();
    p90_keep(c3);
    p90_keep_u(pf);
    const int r = 16 * warp + g;
    for (int i = 0; i < 64; i++) {
        const int col = 8 * (i / 4) + 2 * t + (i & 1), row = r + 8 * ((i % 4) >> 1);
        out[row * 128 + col] = c1[i];
        out[12288 + row * 128 + col] = c3[i];
        if (i < 32) out[8192 + row * 64 + col] = c2[i];
    }
    p90_bar_wait(bar, 0);
    int bad = 0;
    for (int i = tid; i < 128 * 128 * 2 / 16; i += A90_WG) {
        const uint4 x = *reinterpret_cast<const uint4 *>(gsm + ST_B + 16 * i);
        const uint4 y = *reinterpret_cast<const uint4 *>(gsm + ST_T + 16 * i);
        bad += (x.x != y.x) + (x.y != y.y) + (x.z != y.z) + (x.w != y.w);
    }
    bad_words[tid] = bad;
}

rt_status a90_selftest_attrs(ms_error *err)
{
    return a90_smem(attn90_selftest_k, ST_SMEM, err);
}

static float st_val(uint64_t seed, size_t i)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 31;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 29;
    return (float)((double)(z >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static uint16_t st_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static double st_f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double st_rel(const float *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
        if (got[i] != got[i]) return INFINITY;
    }
    return den > 0 ? sqrt(num / den) : INFINITY;
}

rt_status attn90_selftest(void *encode, double rel[ATTN90_NTEST], ms_error *err)
{
    enum { NA = 64 * 128, NB = 128 * 128, NOUT = 8192 + 4096 + 8192 };
    uint16_t *ha = (uint16_t *)malloc(NA * 2), *hb = (uint16_t *)malloc(NB * 2);
    float *hout = (float *)malloc(NOUT * 4);
    double *want = (double *)malloc(NOUT * sizeof(double));
    bf16 *da = NULL, *db = NULL;
    float *dout = NULL;
    int *dbad = NULL, hbad[A90_WG], nbad = -1;
    rt_status st = RT_OK;
    for (int i = 0; i < ATTN90_NTEST; i++) rel[i] = INFINITY;
    if (!ha || !hb || !hout || !want) {
        st = rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "malloc", "out of memory");
        goto out;
    }
    for (size_t i = 0; i < NA; i++) ha[i] = st_bf16(st_val(11, i));
    for (size_t i = 0; i < NB; i++) hb[i] = st_bf16(st_val(12, i));
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 128; j++) {
            double s = 0, pv = 0;
            for (int k = 0; k < 128; k++) {
                s += st_f(ha[i * 128 + k]) * st_f(hb[j * 128 + k]);
                pv += st_f(ha[i * 128 + k]) * st_f(hb[k * 128 + j]);
            }
            want[i * 128 + j] = s;
            want[12288 + i * 128 + j] = pv;
            if (j < 64) want[8192 + i * 64 + j] = s;
        }
    {
        CUtensorMap tb;
        if (cudaMalloc(&da, NA * 2) != cudaSuccess || cudaMalloc(&db, NB * 2) != cudaSuccess ||
            cudaMalloc(&dout, NOUT * 4) != cudaSuccess ||
            cudaMalloc(&dbad, sizeof hbad) != cudaSuccess) {
            st = rt_fail(err, RT_ERR_OOM, __FILE__, __LINE__, "cudaMalloc", "self-test buffers");
            goto out;
        }
        if ((st = a90_map(encode, &tb, db, 128, 128, 128, 128, err)) != RT_OK) goto out;
        RT_CHECK(err, cudaMemcpy(da, ha, NA * 2, cudaMemcpyHostToDevice));
        RT_CHECK(err, cudaMemcpy(db, hb, NB * 2, cudaMemcpyHostToDevice));
        RT_CHECK(err, cudaMemset(dout, 0xff, NOUT * 4));
        RT_CHECK(err, cudaMemset(dbad, 0xff, sizeof hbad));
        attn90_selftest_k<<<1, A90_WG, ST_SMEM>>>(tb, da, db, dout, dbad);
        if ((st = a90_launched("attn90_selftest_k", err)) != RT_OK) goto out;
        RT_CHECK(err, cudaMemcpy(hout, dout, NOUT * 4, cudaMemcpyDeviceToHost));
        RT_CHECK(err, cudaMemcpy(hbad, dbad, sizeof hbad, cudaMemcpyDeviceToHost));
        nbad = 0;
        for (int i = 0; i < A90_WG; i++) nbad = hbad[i] < 0 || nbad < 0 ? -1 : nbad + hbad[i];
    }
    rel[0] = st_rel(hout, want, 8192);
    rel[1] = st_rel(hout + 8192, want + 8192, 4096);
    rel[2] = st_rel(hout + 12288, want + 12288, 8192);
    rel[3] = nbad < 0 ? INFINITY : (double)nbad / (NB * 2 / 4);
out:
    free(ha);
    free(hb);
    free(hout);
    free(want);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
    cudaFree(dbad);
    return st;
}

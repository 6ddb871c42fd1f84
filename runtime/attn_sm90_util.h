/* attn_sm90_util.h — what the Hopper attention kernels (runtime/attn_sm90.cu) and their layout
 * self-test (runtime/attn_sm90_test.cu) share: the warpgroup constants, the shared-memory
 * descriptors and tile helpers on the device, and the host's error, tensor-map and
 * shared-memory helpers. Included by those two files only (sm_90a builds). */
#ifndef MEMSIM_ATTN_SM90_UTIL_H
#define MEMSIM_ATTN_SM90_UTIL_H

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "runtime/rt_check.h"
#include "runtime/sm90_ptx.h"

typedef __nv_bfloat16 bf16;

#define A90_WG 128            /* threads of a warpgroup */
#define A90_NT (3 * A90_WG)   /* producer + two consumers */
#define A90_LOG2E 1.4426950408889634f
#define A90_LN2 0.6931471805599453f

/* Register budgets after the split (setmaxnreg): 24 x 128 + 240 x 256 <= 64K registers. */
#define A90_REGS_PRODUCER 24
#define A90_REGS_CONSUMER 240

/* ======================= shared helpers ======================= */

/* Offsets (bytes from the 1024-aligned base) of one kernel's tiles and barriers. A tile of R
 * rows and D columns is D / 64 column blocks of R x 128 bytes (sm90_ptx.h). */
struct a90_layout {
    static constexpr uint32_t tile(int rows, int D) { return (uint32_t)rows * D * 2; }
};

__device__ __forceinline__ uint32_t a90_base(unsigned char *raw)
{
    return (p90_smem(raw) + 1023u) & ~1023u;
}

/* B operand of a register-sourced product: k rows 16 kk .. 16 kk + 15 of an N-major tile of
 * `rows` rows (its 64-column blocks `rows` x 128 bytes apart). */
__device__ __forceinline__ uint64_t a90_desc_n(uint32_t tile, int rows, int kk)
{
    return p90_desc(tile + (uint32_t)kk * 16 * 128, (uint32_t)rows * 128, 1024);
}

/* A or B operand of a shared-memory product: k block ks (16 columns) of rows row0.. of a
 * K-major tile of `rows` rows. */
__device__ __forceinline__ uint64_t a90_desc_k(uint32_t tile, int rows, int row0, int ks)
{
    return p90_desc(tile + (uint32_t)(ks / 4) * rows * 128 + (uint32_t)row0 * 128 +
                        (uint32_t)(ks % 4) * 32,
                    16, 1024);
}

template <int N>
__device__ __forceinline__ void a90_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db)
{
    if constexpr (N == 128) wg_rs128t(d, a, db, 1);
    else wg_rs64t(d, a, db, 1);
}

template <int N>
__device__ __forceinline__ void a90_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int acc)
{
    if constexpr (N == 128) wg_ss128(d, da, db, acc);
    else wg_ss64(d, da, db, acc);
}

/* Accumulators of 16-column block kk as a register A operand (sm90_ptx.h). */
template <int N>
__device__ __forceinline__ void a90_pack(uint32_t (&a)[N / 16][4], const float (&s)[N / 2])
{
#pragma unroll
    for (int kk = 0; kk < N / 16; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) a[kk][r] = p90_pack(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

/* One thread's rows of a 64 x D accumulator (rows r and r + 8 of token base t0) as bf16 pairs
 * at columns c0.., times s0 and s1. */
template <int D>
__device__ __forceinline__ void a90_store(bf16 *out, size_t ld, size_t t0, int c0,
                                          const float (&acc)[D / 2], float s0, float s1, int t)
{
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        int c = c0 + 8 * j + 2 * t;
        *reinterpret_cast<uint32_t *>(out + t0 * ld + c) =
            p90_pack(acc[4 * j] * s0, acc[4 * j + 1] * s0);
        *reinterpret_cast<uint32_t *>(out + (t0 + 8) * ld + c) =
            p90_pack(acc[4 * j + 2] * s1, acc[4 * j + 3] * s1);
    }
}

/* Row max and sum over the four threads that share a row. */
__device__ __forceinline__ float a90_quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float a90_quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* Loads one tile (rows r0.., the D columns from c0) of a tensor map into dst, on bar. */
template <int D>
__device__ __forceinline__ void a90_load(uint32_t dst, int rows, const CUtensorMap *m,
                                         uint32_t bar, int c0, int r0)
{
#pragma unroll
    for (int h = 0; h < D / 64; h++)
        p90_tma2d(dst + (uint32_t)h * rows * 128, m, bar, c0 + 64 * h, r0);
}

/* ======================= host side ======================= */

typedef CUresult (*a90_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                  const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static inline rt_status a90_fail(const char *what, const char *msg, ms_error *err)
{
    return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, what, msg);
}

static inline rt_status a90_launched(const char *what, ms_error *err)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? RT_OK : a90_fail(what, cudaGetErrorString(e), err);
}

/* A 2-D map over a [rows][cols] bf16 matrix of row stride ld (elements), boxes of 64 columns x
 * box_rows rows, 128-byte swizzle (the layout sm90_ptx.h describes). */
static inline rt_status a90_map(void *encode, CUtensorMap *m, const void *p, size_t cols, size_t rows,
                         size_t ld, unsigned box_rows, ms_error *err)
{
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {64, box_rows}, step[2] = {1, 1};
    CUresult r = ((a90_encode_fn)encode)(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims,
                                         strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         CU_TENSOR_MAP_SWIZZLE_128B,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        char msg[64];
        snprintf(msg, sizeof msg, "CUresult %d", (int)r);
        return a90_fail("cuTensorMapEncodeTiled", msg, err);
    }
    return RT_OK;
}

template <typename K> static inline rt_status a90_smem(K kernel, uint32_t bytes, ms_error *err)
{
    RT_CHECK(err, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)bytes));
    return RT_OK;
}

/* Sets the self-test kernel's shared-memory size (attn_sm90_test.cu); attn90_setup calls it. */
rt_status a90_selftest_attrs(ms_error *err);

#endif

/* sm90_ptx.h — Hopper (sm_90a) building blocks as inline PTX for the runtime's wgmma kernels
 * (runtime/attn_sm90.cu): mbarriers, the bulk tensor copy engine (TMA, cp.async.bulk.tensor)
 * and plain bulk copies completing on an mbarrier, shared-memory matrix descriptors for
 * 128-byte-swizzled tiles, and warpgroup MMAs (wgmma.mma_async m64nNk16, bf16 in, fp32
 * accumulate). Device code only; included by .cu files compiled for sm_90a.
 *
 * Tile layout every descriptor here assumes (what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B):
 * a tile of R rows x 64 bf16 columns is R rows of 128 bytes, 1024-byte aligned; the 16-byte
 * chunk c of row r sits at chunk c ^ (r % 8). A tile with 128 columns is two such tiles, the
 * second (columns 64..127) right after the first. */
#ifndef MEMSIM_SM90_PTX_H
#define MEMSIM_SM90_PTX_H

#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t p90_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- mbarriers (shared::cta) ---- */

__device__ __forceinline__ void p90_bar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* Makes the initialized barriers visible to the copy engine (before the CTA syncs). */
__device__ __forceinline__ void p90_bar_init_fence(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* One arrival that also announces `bytes` to come from copies completing on this barrier. */
__device__ __forceinline__ void p90_bar_expect(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void p90_bar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Waits until the barrier's phase of the given parity has completed. */
__device__ __forceinline__ void p90_bar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done = 0;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* ---- copies that complete on an mbarrier ---- */

/* A box of the 2-D tensor map (columns c0.., rows r0..) into shared memory at dst. */
__device__ __forceinline__ void p90_tma2d(uint32_t dst, const void *tmap, uint32_t bar, int c0,
                                          int r0)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                 "l"((uint64_t)(uintptr_t)tmap), "r"(bar), "r"(c0), "r"(r0)
                 : "memory");
}

/* bytes (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst. */
__device__ __forceinline__ void p90_bulk(uint32_t dst, const void *src, uint32_t bytes,
                                         uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"((uint64_t)(uintptr_t)src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* Orders this thread's ordinary shared-memory writes before later reads by the tensor cores
 * or the copy engine (the async proxy). */
__device__ __forceinline__ void p90_fence_async_smem(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* The bytes of a shared-memory buffer to global memory (store, or fp32 add done by the memory
 * system: a reduction whose order is the order of the calls), tracked as a bulk group. */
__device__ __forceinline__ void p90_bulk_store(void *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(
                     (uint64_t)(uintptr_t)dst),
                 "r"(src), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void p90_bulk_add_f32(float *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::
                     "l"((uint64_t)(uintptr_t)dst),
                 "r"(src), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void p90_bulk_commit(void)
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's bulk groups are pending (the others complete, their
 * writes performed). */
template <int N> __device__ __forceinline__ void p90_bulk_wait(void)
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Orders this thread's accesses through the async proxy (bulk copies, TMA) against its
 * ordinary ones, in every state space. */
__device__ __forceinline__ void p90_fence_async(void)
{
    asm volatile("fence.proxy.async;\n" ::: "memory");
}

/* A counter in global memory other CTAs publish through (acquire / release at GPU scope). */
__device__ __forceinline__ int p90_ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void p90_add_release(int *p, int v)
{
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* Named barriers (ids 1..15; 0 is __syncthreads) over `threads` threads: sync waits for the
 * barrier, arrive counts this warp's threads in without waiting. */
__device__ __forceinline__ void p90_named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void p90_named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* ---- warpgroup register budget (needs __launch_bounds__(threads, 1)) ---- */

template <int N> __device__ __forceinline__ void p90_regs_dec(void)
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N> __device__ __forceinline__ void p90_regs_inc(void)
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* ---- warpgroup MMA ---- */

/* Descriptor of a 128-byte-swizzled operand starting at shared address addr: lbo and sbo in
 * bytes. K-major: sbo = 1024 (eight rows of 128 bytes), lbo unused (16). N-major: lbo = the
 * distance between 64-column blocks, sbo = 1024 (eight k rows). */
__device__ __forceinline__ uint64_t p90_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32 | 1ull << 62;
}

/* Before the first wgmma of a batch whose register operands this thread wrote. */
__device__ __forceinline__ void p90_wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void p90_wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Waits until at most N committed wgmma groups are pending. */
template <int N> __device__ __forceinline__ void p90_wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accesses of these registers across a wgmma issue or wait:
 * the tensor cores read and write them asynchronously. */
template <int N> __device__ __forceinline__ void p90_keep(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

template <int N> __device__ __forceinline__ void p90_keep_u(uint32_t (&a)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) asm volatile("" : "+r"(a[i][j])::"memory");
}

/* 2^x on the special-function unit (subnormal results flush to 0). */
__device__ __forceinline__ float p90_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Two floats as a bf16 pair (round to nearest even), lo in the low half. */
__device__ __forceinline__ uint32_t p90_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float2 p90_unpack(uint32_t u)
{
    __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162 *>(&u);
    return __bfloat1622float2(v);
}

/* Accumulator layout of every wgmma below (per thread; warp w of the warpgroup, lane =
 * 4 g + t): d[4 j + e] is row 16 w + g + 8 (e / 2), column 8 j + 2 t + e % 2, so that the
 * accumulators of columns 16 k .. 16 k + 15, packed to bf16 pairs, are the A operand of a
 * register-sourced wgmma over k block k (a0 = d[8k], d[8k+1]; a1 = d[8k+2], d[8k+3];
 * a2 = d[8k+4], d[8k+5]; a3 = d[8k+6], d[8k+7]). */

/* D (64 x 64, fp32) = A B (+ D when acc): A 64 x 16 and B 16 x 64 in shared memory, both
 * K-major (descriptors da, db). */
__device__ __forceinline__ void wg_ss64(float (&d)[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}

/* D (64 x 64, fp32) = A B (+ D when acc): A 64 x 16 in registers (four bf16 pairs per thread,
 * mma.sync's A layout per warp), B 16 x 64 in shared memory, N-major (descriptor db). */
__device__ __forceinline__ void wg_rs64t(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                          int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

/* D (64 x 128, fp32) = A B (+ D when acc): A 64 x 16 and B 16 x 128 in shared memory, both
 * K-major (descriptors da, db). */
__device__ __forceinline__ void wg_ss128(float (&d)[64], uint64_t da, uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
          "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
          "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
          "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(acc));
}

/* D (64 x 128, fp32) = A B (+ D when acc): A 64 x 16 in registers (four bf16 pairs per thread,
 * mma.sync's A layout per warp), B 16 x 128 in shared memory, N-major (descriptor db). */
__device__ __forceinline__ void wg_rs128t(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                          int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
          "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
          "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
          "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

/* D (64 x 64, fp32) = A B (+ D when acc): A 64 x 16 M-major and B 16 x 64 N-major, both in
 * shared memory (descriptors da, db; the transposed forms, bf16 only). */
__device__ __forceinline__ void wg_ss64tt(float (&d)[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}

#endif

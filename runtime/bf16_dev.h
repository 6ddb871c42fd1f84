/* bf16_dev.h — device-side bfloat16 helpers the runtime's CUDA translation units share
 * (runtime/kernels.cu's element-wise kernels, runtime/attn_sm80.cu's attention): the bf16
 * type name and an 8-wide vector load widened to fp32. Header only: CUDA C. */
#ifndef MEMSIM_RUNTIME_BF16_DEV_H
#define MEMSIM_RUNTIME_BF16_DEV_H

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* Loads 8 consecutive bf16 values (16-byte aligned) as fp32. */
__device__ __forceinline__ void ld8(const bf16 *p, float f[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

#endif

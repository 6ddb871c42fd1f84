/* embed_bwd.cu — the embedding's sorted scatter-add backward (embed_bwd.h): the ids sorted with
 * their token positions by CUB's stable radix sort, then one CTA per run of equal ids reading
 * its tokens' gradient rows in token order (16-byte loads) and writing its table row once.
 * Every byte moves once: dout read, each touched row of the table read and written. Used by
 * runtime/kernels.cu. */
#include "runtime/embed_bwd.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define EBW_THREADS 256

static size_t ebw_align(size_t n) { return (n + 255) / 256 * 256; }

/* Bytes of CUB's temporary storage for T pairs (no work is done with NULL storage). */
static size_t ebw_cub_bytes(size_t T)
{
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(NULL, bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                    (const uint32_t *)NULL, (uint32_t *)NULL, (int)T);
    return bytes;
}

size_t embed_bwd_scratch_bytes(size_t T)
{
    return 3 * ebw_align(T * 4) + ebw_align(ebw_cub_bytes(T));
}

__global__ void ebw_iota_k(uint32_t *v, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        v[i] = (uint32_t)i;
}

/* CTA p: if sorted position p starts a run of equal ids, the run's rows summed in order. */
__global__ void __launch_bounds__(EBW_THREADS)
ebw_scatter_k(float *dwte, const uint32_t *ids, const uint32_t *pos, const __nv_bfloat16 *dout,
              size_t T, size_t h)
{
    const size_t p = blockIdx.x;
    const uint32_t id = ids[p];
    if (p > 0 && ids[p - 1] == id) return;
    size_t end = p + 1;
    while (end < T && ids[end] == id) end++;
    for (size_t c = 8 * (size_t)threadIdx.x; c < h; c += 8 * EBW_THREADS) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t q = p; q < end; q++) {
            const uint4 u = *reinterpret_cast<const uint4 *>(dout + (size_t)pos[q] * h + c);
            const __nv_bfloat162 *b = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 f = __bfloat1622float2(b[i]);
                acc[2 * i] += f.x;
                acc[2 * i + 1] += f.y;
            }
        }
        float4 *row = reinterpret_cast<float4 *>(dwte + (size_t)id * h + c);
        float4 a = row[0], b = row[1];
        a.x += acc[0]; a.y += acc[1]; a.z += acc[2]; a.w += acc[3];
        b.x += acc[4]; b.y += acc[5]; b.z += acc[6]; b.w += acc[7];
        row[0] = a;
        row[1] = b;
    }
}

rt_status embed_bwd_run(void *stream, void *scratch, size_t scratch_bytes, float *dwte,
                        const int32_t *tok, const uint16_t *dout, size_t T, size_t h,
                        ms_error *err)
{
    if (!T) return RT_OK;
    if (T > 0x7fffffffu || scratch_bytes < embed_bwd_scratch_bytes(T))
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "embed_bwd_run",
                       "scratch too small or too many tokens");
    cudaStream_t s = (cudaStream_t)stream;
    char *b = (char *)scratch;
    uint32_t *ids = (uint32_t *)b, *pos_in = (uint32_t *)(b + ebw_align(T * 4));
    uint32_t *pos = (uint32_t *)(b + 2 * ebw_align(T * 4));
    void *tmp = b + 3 * ebw_align(T * 4);
    size_t tmp_bytes = scratch_bytes - 3 * ebw_align(T * 4);
    unsigned g = (unsigned)((T + 255) / 256 < 4096 ? (T + 255) / 256 : 4096);
    ebw_iota_k<<<g, 256, 0, s>>>(pos_in, T);
    RT_CHECK(err, cudaGetLastError());
    RT_CHECK(err, cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, (const uint32_t *)tok, ids,
                                                  (const uint32_t *)pos_in, pos, (int)T, 0, 32, s));
    ebw_scatter_k<<<(unsigned)T, EBW_THREADS, 0, s>>>(dwte, ids, pos,
                                                      (const __nv_bfloat16 *)dout, T, h);
    RT_CHECK(err, cudaGetLastError());
    return RT_OK;
}

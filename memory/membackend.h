/* membackend.h — the memory-backend interface the allocators are written against.
 * Two implementations: sim/simbackend.c (a simulated address space that charges the machine
 * profile's latencies) and runtime/ (cudaMalloc, the cuMem* VMM calls, pinned host memory).
 * Allocators in planners/ call only these functions, so the same allocator code runs in
 * the simulator and on a GPU. */
#ifndef MEMSIM_MEMBACKEND_H
#define MEMSIM_MEMBACKEND_H

#include "base/util.h"

/* Every call returns MS_OK, MS_ERR_OOM when the device (or host, for host_alloc: MS_ERR_OOHM)
 * has no room, or another error. Addresses and handles are opaque 64-bit numbers. */
typedef struct mb_ops {
    /* cudaMalloc / cudaFree. cudaFree synchronizes the device. */
    ms_status (*dev_malloc)(void *ctx, uint64_t bytes, uint64_t *addr);
    ms_status (*dev_free)(void *ctx, uint64_t addr);
    /* CUDA VMM: cuMemAddressReserve / cuMemAddressFree */
    ms_status (*va_reserve)(void *ctx, uint64_t bytes, uint64_t *va);
    ms_status (*va_free)(void *ctx, uint64_t va, uint64_t bytes);
    /* cuMemCreate / cuMemRelease of one physical allocation of `bytes` (a granule multiple) */
    ms_status (*phys_create)(void *ctx, uint64_t bytes, uint64_t *handle);
    ms_status (*phys_release)(void *ctx, uint64_t handle);
    /* cuMemMap of a whole physical allocation at va, then cuMemSetAccess (read/write) */
    ms_status (*map)(void *ctx, uint64_t va, uint64_t bytes, uint64_t handle);
    ms_status (*set_access)(void *ctx, uint64_t va, uint64_t bytes);
    ms_status (*unmap)(void *ctx, uint64_t va, uint64_t bytes);
    /* cudaDeviceSynchronize (or a stream synchronize the allocator needs) */
    ms_status (*synchronize)(void *ctx);
    /* pinned host memory (cudaHostAlloc / cudaFreeHost) */
    ms_status (*host_alloc)(void *ctx, uint64_t bytes, uint64_t *addr);
    ms_status (*host_free)(void *ctx, uint64_t addr);
} mb_ops;

typedef struct mb_backend {
    const mb_ops *ops;
    void *ctx;
    uint64_t granularity_bytes;   /* VMM granularity (2 MiB on current GPUs) */
    uint64_t capacity_bytes;      /* device bytes an allocator may take in all */
} mb_backend;

#endif

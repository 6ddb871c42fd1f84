/* rt_backend.h — the real memory backend: memory/membackend.h's mb_backend over CUDA
 * (cudaMalloc / cudaFree, the cuMem* virtual memory calls, cudaDeviceSynchronize, pinned host
 * memory), with an optional device-byte cap, per-call counts and times, and the GPU check
 * every GPU command runs first. Used by the schedule executor (runtime/rt_exec.c), the
 * `memsim run` command (runtime/rt_run.c) and the GPU tests.
 *
 * The driver's cuMem* entry points are looked up through the runtime
 * (cudaGetDriverEntryPointByVersion), so programs that use this backend need not link
 * libcuda: on a machine without a driver they start, and rt_gpu_check says why no GPU is
 * usable. */
#ifndef MEMSIM_RT_BACKEND_H
#define MEMSIM_RT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "memory/membackend.h"

/* ---- the GPU check ---- */

typedef struct rt_gpu_info {
    char name[256];
    int device;
    int cc_major, cc_minor;
    int sms;
    uint64_t total_bytes, free_bytes;  /* cudaMemGetInfo at the check */
    int driver_version;                /* cudaDriverGetVersion, e.g. 13000 */
    int runtime_version;               /* cudaRuntimeGetVersion of this build */
    int vmm_supported;                 /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
} rt_gpu_info;

/* Checks that a driver is loaded, new enough for this build's runtime, and that `device`
 * exists and is at least compute capability 9.0 (the kernels are built for sm_90). RT_OK and
 * info filled, or RT_ERR_NODEV with a one-line reason in err. */
rt_status rt_gpu_check(int device, rt_gpu_info *info, ms_error *err);
/* The CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies), without making a context
 * on any: what a launcher asks before it starts one process per GPU. RT_ERR_NODEV without a
 * driver. */
rt_status rt_gpu_count(int *count, ms_error *err);

/* ---- the backend ---- */

typedef enum rt_bcall {
    RB_DEV_MALLOC = 0, RB_DEV_FREE, RB_VA_RESERVE, RB_VA_FREE, RB_PHYS_CREATE, RB_PHYS_RELEASE,
    RB_MAP, RB_SET_ACCESS, RB_UNMAP, RB_SYNC, RB_HOST_ALLOC, RB_HOST_FREE, RB_NCALLS
} rt_bcall;

typedef struct rt_bcall_stats {
    uint64_t calls;       /* every call, failed ones included */
    uint64_t failures;    /* calls that returned an error (OOM included) */
    uint64_t ooms;        /* of which out of memory (the cap or the device) */
    uint64_t bytes;       /* bytes asked for by successful calls (where the call has a size) */
    double total_us;      /* host time inside the call */
    double max_us;
} rt_bcall_stats;

typedef struct rt_backend_opts {
    int device;                /* CUDA device ordinal */
    uint64_t capacity_bytes;   /* device bytes the allocator may take (cudaMalloc + cuMemCreate);
                                  0: free memory at creation minus headroom_bytes */
    uint64_t headroom_bytes;   /* left free for kernels, events and the context (default 512 MiB) */
    int sync_before_unmap;     /* 1 (default): cudaDeviceSynchronize before cuMemUnmap, because
                                  unmapping does not wait for kernels still using the range
                                  (PyTorch's expandable segments synchronize there too) */
} rt_backend_opts;

void rt_backend_opts_default(rt_backend_opts *o);

typedef struct rt_backend rt_backend;

/* Creates the backend on o->device (NULL: defaults). RT_ERR_NODEV / RT_ERR_CUDA with err
 * filled when the device or the driver's VMM entry points are unusable. */
rt_status rt_backend_new(const rt_backend_opts *o, rt_backend **out, ms_error *err);
/* Frees the bookkeeping. Memory still held by callers is NOT freed (the allocator owns it):
 * rt_backend_outstanding_bytes tells whether something leaked. NULL: no-op. */
void rt_backend_free(rt_backend *b);

/* The ops table for allocators (alloc_new(name, cfg, rt_backend_mb(b), ...)). The pointer
 * stays valid until rt_backend_free. */
const mb_backend *rt_backend_mb(const rt_backend *b);

/* The backend's last failed call ("file:line: call: message"; empty when none failed): an
 * mb_ops call returns a status only, so its caller reads what failed here. */
const ms_error *rt_backend_error(const rt_backend *b);

const char *rt_bcall_name(rt_bcall k);
const rt_bcall_stats *rt_backend_stats(const rt_backend *b, rt_bcall k);
void rt_backend_reset_stats(rt_backend *b);
/* Device bytes held now (cudaMalloc'd + cuMemCreate'd) and at most; pinned host bytes held;
 * live VA reservations and mappings. All zero after a clean teardown. */
uint64_t rt_backend_device_bytes(const rt_backend *b);
uint64_t rt_backend_device_peak_bytes(const rt_backend *b);
uint64_t rt_backend_host_bytes(const rt_backend *b);
uint64_t rt_backend_outstanding(const rt_backend *b); /* allocations + reservations + maps */
/* Device synchronizes done on the backend's own initiative (sync_before_unmap). */
uint64_t rt_backend_implicit_syncs(const rt_backend *b);
/* One line per call kind that was called: calls, failures, total and mean time. */
void rt_backend_print_stats(const rt_backend *b, FILE *f);

#ifdef __cplusplus
}
#endif

#endif

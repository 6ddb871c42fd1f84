/* alloc_caching.h — the caching allocator, a faithful model of PyTorch's
 * CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp, native backend, expandable
 * segments off): 512-byte rounding, a small pool (<= 1 MiB, 2 MiB segments) and a large pool
 * (20 MiB segments below 10 MiB, else 2 MiB-rounded), best fit by (stream, size, address),
 * split and coalesce, max_split_size, release-cached-and-retry before OOM, and PyTorch's
 * statistics. Registered as "caching" in alloc.c; used through alloc.h by sim/ (replay,
 * the executor), runtime/ and the tests. The rounding helpers are exported because the
 * tests and the other allocators that share PyTorch's size classes use them. */
#ifndef MEMSIM_ALLOC_CACHING_H
#define MEMSIM_ALLOC_CACHING_H

#include "memory/alloc.h"

/* PyTorch's constants (CUDACachingAllocator.cpp). */
#define ALLOC_CACHING_MIN_BLOCK_BYTES 512ULL            /* kMinBlockSize */
#define ALLOC_CACHING_SMALL_SIZE_BYTES (1ULL << 20)     /* kSmallSize: largest small request */
#define ALLOC_CACHING_SMALL_BUFFER_BYTES (2ULL << 20)   /* kSmallBuffer: small segment */
#define ALLOC_CACHING_MIN_LARGE_ALLOC_BYTES (10ULL << 20) /* kMinLargeAlloc */
#define ALLOC_CACHING_LARGE_BUFFER_BYTES (20ULL << 20)  /* kLargeBuffer: large segment < 10 MiB */
#define ALLOC_CACHING_ROUND_LARGE_BYTES (2ULL << 20)    /* kRoundLarge */
/* max_non_split_rounding_mb's default: an oversize request may take a cached oversize
 * block only if it is less than this much larger (older versions hard-wire kLargeBuffer). */
#define ALLOC_CACHING_MAX_NON_SPLIT_ROUNDING_BYTES (20ULL << 20)

extern const alloc_vtable alloc_caching_vt;

/* PyTorch's round_size: < 512 -> 512; with roundup_power2_divisions d > 1 and
 * bytes > 512 * d the next power-of-two division; else the next multiple of 512. */
uint64_t alloc_caching_round_size(uint64_t bytes, unsigned roundup_power2_divisions);
/* PyTorch's get_allocation_size: the cudaMalloc size for a rounded request. */
uint64_t alloc_caching_segment_bytes(uint64_t rounded_bytes);

/* PyTorch's synchronize_and_free_events: release_cached_blocks (the retry path of malloc and
 * empty_cache) synchronizes the device and then returns every block whose free was waiting
 * for stream events (recordStream) to its pool, before it frees the cached segments. This
 * model keeps no events itself: a caller that holds such frees back (sim/exec.c's deferred
 * frees) registers a hook with alloc_set_events_hook (the allocator has
 * ALLOC_CAP_EVENTS_HOOK), which it calls right after that synchronize; the hook gives the
 * blocks back with alloc_release. */

#endif

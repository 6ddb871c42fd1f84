/* alloc_expandable.h — PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=
 * expandable_segments:True; c10/cuda/CUDACachingAllocator.cpp, struct ExpandableSegment and
 * the expandable paths of DeviceCachingAllocator): per (stream, pool) one virtual range of
 * expandable_va_factor x device memory reserved up front, physical pages (2 MiB for the small
 * pool, 20 MiB for the large pool) created and mapped on demand at the lowest address that
 * fits, PyTorch's block rules inside the range (best fit, split, coalesce), fully free pages
 * unmapped and released when cached memory is released (empty_cache, the OOM retry).
 * Registered as "expandable" in alloc.c; used through alloc.h by sim/, runtime/ and the
 * tests. Deviations: docs/ALLOCATORS.md. */
#ifndef MEMSIM_ALLOC_EXPANDABLE_H
#define MEMSIM_ALLOC_EXPANDABLE_H

#include "memory/alloc.h"

extern const alloc_vtable alloc_expandable_vt;

/* PyTorch's page sizes (kSmallBuffer, kLargeBuffer), rounded up to the backend granularity. */
#define ALLOC_EXPANDABLE_SMALL_PAGE_BYTES (2ULL << 20)
#define ALLOC_EXPANDABLE_LARGE_PAGE_BYTES (20ULL << 20)

/* For tests and reports: pages mapped now (small + large pools) and segments (VA ranges)
 * alive. 0 if a is not an expandable allocator. */
size_t alloc_expandable_mapped_pages(const alloc_t *a);
size_t alloc_expandable_num_segments(const alloc_t *a);

#endif

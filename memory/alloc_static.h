/* alloc_static.h — the static arena: every tensor at the offset a memory plan gives
 * (alloc_config static_ids / static_offsets, sorted by id; the tag of alloc_block is the
 * tensor id), inside one device allocation of the arena size made at creation. Tensors the
 * plan does not place go to an internal "caching" allocator (counted separately). Also a
 * greedy best-fit planner over tensor lifetimes that fills such a plan. Registered as
 * "static" in alloc.c; used by sim/, runtime/, the planners and the tests. Rules and
 * deviations: docs/ALLOCATORS.md. */
#ifndef MEMSIM_ALLOC_STATIC_H
#define MEMSIM_ALLOC_STATIC_H

#include "memory/alloc.h"

extern const alloc_vtable alloc_static_vt;

/* Offsets the greedy planner produces are multiples of this (PyTorch's kMinBlockSize). */
#define ALLOC_STATIC_ALIGN_BYTES 512ULL

/* Greedy best-fit offline placement: tensors in order of decreasing size (ties: earlier
 * first use, then lower id) each go into the smallest gap, among the tensors already placed
 * whose lifetimes [first_use, last_use] (inclusive) intersect its own, that holds it; if
 * none does, above the highest of them. offsets[i] is for ids[i]; *arena_bytes is the
 * highest end. MS_ERR_INVALID if first_use > last_use or ids repeat; MS_ERR_NOMEM. */
ms_status alloc_static_plan_greedy(const uint64_t *ids, const uint64_t *bytes,
                                   const uint64_t *first_use, const uint64_t *last_use,
                                   size_t n, uint64_t *offsets, uint64_t *arena_bytes);

/* The internal fallback allocator's stats (tensors without an offset, zero-byte requests)
 * and how many requests went there; the arena's size in bytes (0 until it exists). NULL / 0
 * if a is not a static allocator. */
const alloc_stats *alloc_static_fallback_stats(const alloc_t *a);
uint64_t alloc_static_num_fallbacks(const alloc_t *a);
uint64_t alloc_static_arena_bytes(const alloc_t *a);

#endif

/* alloc_static.h — the static arena: every tensor at the offset a memory plan gives
 * (alloc_config static_ids / static_offsets, sorted by id; the tag of alloc_block is the
 * tensor id), inside one device allocation of the arena size made at creation. Tensors the
 * plan does not place go to an internal "caching" allocator (counted separately); a plan
 * for it comes from MEMO's memory planner or alloc_static_plan.h's greedy one. Registered as
 * "static" in alloc.c; used by sim/, runtime/, the planners and the tests. Rules and
 * deviations: docs/ALLOCATORS.md. */
#ifndef MEMSIM_ALLOC_STATIC_H
#define MEMSIM_ALLOC_STATIC_H

#include "memory/alloc.h"

extern const alloc_vtable alloc_static_vt;

/* The internal fallback allocator's stats (tensors without an offset, zero-byte requests)
 * and how many requests went there; the arena's size in bytes (0 until it exists). NULL / 0
 * if a is not a static allocator. */
const alloc_stats *alloc_static_fallback_stats(const alloc_t *a);
uint64_t alloc_static_num_fallbacks(const alloc_t *a);
uint64_t alloc_static_arena_bytes(const alloc_t *a);

#endif

/* alloc_static_plan.h — a greedy best-fit offline planner over tensor lifetimes that fills a
 * static arena's plan (memory/alloc_static.h) where no memory plan is made: the GMLake study's
 * static baseline, the allocator tests. Implemented by memory/alloc_static_plan.c. */
#ifndef MEMSIM_ALLOC_STATIC_PLAN_H
#define MEMSIM_ALLOC_STATIC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

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

#endif

/* alloc_static_plan.c — the greedy best-fit offline planner of alloc_static_plan.h: tensors
 * by decreasing size, each in the smallest gap among those whose lifetimes meet its own. */
#include "memory/alloc_static_plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct gp_item {
    uint64_t bytes, first, id;
    size_t idx;
} gp_item;

/* Decreasing size, then earlier first use, then lower id. */
static int cmp_order(const void *x, const void *y)
{
    const gp_item *p = x, *q = y;
    if (p->bytes != q->bytes) return p->bytes > q->bytes ? -1 : 1;
    if (p->first != q->first) return p->first < q->first ? -1 : 1;
    return p->id < q->id ? -1 : p->id > q->id;
}

static uint64_t round_align(uint64_t b)
{
    return (b + ALLOC_STATIC_ALIGN_BYTES - 1) / ALLOC_STATIC_ALIGN_BYTES * ALLOC_STATIC_ALIGN_BYTES;
}

ms_status alloc_static_plan_greedy(const uint64_t *ids, const uint64_t *bytes,
                                   const uint64_t *first_use, const uint64_t *last_use,
                                   size_t n, uint64_t *offsets, uint64_t *arena_bytes)
{
    *arena_bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (first_use[i] > last_use[i] || bytes[i] > UINT64_MAX / 2) return MS_ERR_INVALID;
    gp_item *order = malloc((n + 1) * sizeof *order);
    size_t *placed = malloc((n + 1) * sizeof *placed);   /* by offset */
    uint64_t *sorted_ids = malloc((n + 1) * sizeof *sorted_ids);
    if (!order || !placed || !sorted_ids) {
        free(order);
        free(placed);
        free(sorted_ids);
        return MS_ERR_NOMEM;
    }
    memcpy(sorted_ids, ids, n * sizeof *ids);
    qsort(sorted_ids, n, sizeof *sorted_ids, ms_cmp_u64);
    ms_status st = MS_OK;
    for (size_t i = 1; i < n; i++)
        if (sorted_ids[i - 1] == sorted_ids[i]) st = MS_ERR_INVALID;
    for (size_t i = 0; i < n; i++) order[i] = (gp_item){bytes[i], first_use[i], ids[i], i};
    qsort(order, n, sizeof *order, cmp_order);
    size_t np = 0;
    uint64_t top = 0;
    for (size_t k = 0; k < n && !st; k++) {
        size_t t = order[k].idx;
        uint64_t size = round_align(bytes[t]);
        /* walk the placed tensors in offset order; only lifetime conflicts occupy space */
        uint64_t end = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
        for (size_t q = 0; q < np; q++) {
            size_t p = placed[q];
            if (first_use[p] > last_use[t] || first_use[t] > last_use[p]) continue;
            if (offsets[p] > end) {
                uint64_t gap = offsets[p] - end;
                if (gap >= size && gap < best_gap) {
                    best_gap = gap;
                    best = end;
                }
            }
            uint64_t pe = offsets[p] + round_align(bytes[p]);
            if (pe > end) end = pe;
        }
        offsets[t] = best != UINT64_MAX ? best : end;
        if (offsets[t] + size > top) top = offsets[t] + size;
        size_t pos = np;   /* keep placed sorted by offset */
        while (pos > 0 && offsets[placed[pos - 1]] > offsets[t]) {
            placed[pos] = placed[pos - 1];
            pos--;
        }
        placed[pos] = t;
        np++;
    }
    free(order);
    free(placed);
    free(sorted_ids);
    if (!st) *arena_bytes = top;
    return st;
}

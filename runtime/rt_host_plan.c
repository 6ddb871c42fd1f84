/* rt_host_plan.c — the pinned host pool plan (rt_host_plan_make in rt_exec.h): where each
 * HOST_ALLOC's bytes live in the runtime's one pinned pool, first fit in program order. Used
 * by the executor's setup (rt_exec.c) and tests/test_rt_exec.c. Plain C. */
#include "runtime/rt_exec.h"

#include "base/u64map.h"

#include <stdlib.h>
#include <string.h>

typedef struct hole {
    uint64_t off, len;
} hole;

typedef struct hplan_state {
    hole *h;
    size_t n, cap;
    uint64_t top;
} hplan_state;

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* First fit: the lowest hole that holds sz, else the top (growing a hole that ends there). */
static uint64_t hp_take(hplan_state *p, uint64_t sz)
{
    for (size_t k = 0; k < p->n; k++) {
        if (p->h[k].len < sz) continue;
        uint64_t off = p->h[k].off;
        p->h[k].off += sz;
        p->h[k].len -= sz;
        if (!p->h[k].len) {
            memmove(&p->h[k], &p->h[k + 1], (p->n - k - 1) * sizeof *p->h);
            p->n--;
        }
        return off;
    }
    if (p->n && p->h[p->n - 1].off + p->h[p->n - 1].len == p->top) {
        uint64_t off = p->h[--p->n].off;
        p->top = off + sz;
        return off;
    }
    uint64_t off = p->top;
    p->top += sz;
    return off;
}

/* Returns [off, off + sz) to the holes, kept sorted and coalesced. */
static ms_status hp_give(hplan_state *p, uint64_t off, uint64_t sz)
{
    size_t k = 0;
    while (k < p->n && p->h[k].off < off) k++;
    if (k > 0 && p->h[k - 1].off + p->h[k - 1].len == off) {
        p->h[k - 1].len += sz;
        if (k < p->n && off + sz == p->h[k].off) {
            p->h[k - 1].len += p->h[k].len;
            memmove(&p->h[k], &p->h[k + 1], (p->n - k - 1) * sizeof *p->h);
            p->n--;
        }
        return MS_OK;
    }
    if (k < p->n && off + sz == p->h[k].off) {
        p->h[k].off = off;
        p->h[k].len += sz;
        return MS_OK;
    }
    if (ms_grow((void **)&p->h, &p->cap, p->n + 1, sizeof *p->h) != MS_OK) return MS_ERR_NOMEM;
    memmove(&p->h[k + 1], &p->h[k], (p->n - k) * sizeof *p->h);
    p->h[k].off = off;
    p->h[k].len = sz;
    p->n++;
    return MS_OK;
}

void rt_host_plan_release(rt_host_plan *hp)
{
    if (!hp) return;
    free(hp->offsets);
    free(hp->stream_mask);
    memset(hp, 0, sizeof *hp);
}

/* One pass in program order: a map from each live host tensor to its HOST_ALLOC action. A
 * D2H copy finds its host range under the block's own id or, failing that, under the id
 * lowering gives the host copy (lower_id_host_copy: MEMO's rounding buffers, memory_plan). */
ms_status rt_host_plan_make(const schedule_t *s, uint64_t align_bytes, rt_host_plan *hp,
                            ms_error *err)
{
    memset(hp, 0, sizeof *hp);
    size_t n = sched_count(s);
    uint64_t al = align_bytes ? align_bytes : 4096;
    hp->offsets = (uint64_t *)malloc((n ? n : 1) * sizeof *hp->offsets);
    hp->stream_mask = (uint8_t *)calloc(n ? n : 1, 1);
    u64map *at = u64map_new(256);   /* tensor -> HOST_ALLOC action index */
    hplan_state p;
    memset(&p, 0, sizeof p);
    ms_status st = MS_OK;
    if (!hp->offsets || !hp->stream_mask || !at) st = MS_ERR_NOMEM;
    uint64_t used = 0, scratch = 0;
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        const sched_action *a = sched_get(s, i);
        hp->offsets[i] = UINT64_MAX;
        uint64_t ai;
        int live = u64map_get(at, a->tensor, &ai);
        /* an offload writes the host copy named for the block its prefetch will make */
        if (!live && a->kind == SA_COPY_D2H)
            live = u64map_get(at, lower_id_host_copy(a->tensor), &ai);
        switch (a->kind) {
        case SA_HOST_ALLOC:
            if (live) {
                st = ms_fail(err, MS_ERR_INVALID, "schedule action %zu: tensor %llu already "
                             "holds host memory", i, (unsigned long long)a->tensor);
                break;
            }
            hp->offsets[i] = hp_take(&p, align_up(a->bytes ? a->bytes : 1, al));
            if (u64map_put(at, a->tensor, i)) st = MS_ERR_NOMEM;
            used += a->bytes;
            if (used > hp->peak_bytes) hp->peak_bytes = used;
            break;
        case SA_HOST_FREE: {
            if (!live) {
                st = ms_fail(err, MS_ERR_INVALID, "schedule action %zu: tensor %llu holds no "
                             "host memory", i, (unsigned long long)a->tensor);
                break;
            }
            const sched_action *h = sched_get(s, ai);
            hp->stream_mask[ai] |= (uint8_t)(1u << a->stream);
            st = hp_give(&p, hp->offsets[ai], align_up(h->bytes ? h->bytes : 1, al));
            used -= h->bytes;
            u64map_del(at, a->tensor, NULL);
            break;
        }
        case SA_COPY_D2H:
        case SA_COPY_H2D:
            if (live) hp->stream_mask[ai] |= (uint8_t)(1u << a->stream);
            else if (a->bytes > scratch) scratch = a->bytes;
            break;
        default:
            break;
        }
    }
    if (st == MS_OK) {
        hp->scratch_off = p.top;
        hp->scratch_bytes = scratch ? align_up(scratch, al) : 0;
        hp->pool_bytes = p.top + hp->scratch_bytes;
    }
    free(p.h);
    u64map_free(at);
    if (st != MS_OK) {
        if (st == MS_ERR_NOMEM) ms_fail(err, st, "out of memory planning the pinned pool");
        rt_host_plan_release(hp);
    }
    return st;
}

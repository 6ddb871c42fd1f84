/* alloc_static.c — the static arena (see alloc_static.h): tensors placed at the offsets of a
 * memory plan inside one arena, the rest served by an internal caching allocator. Called
 * through the alloc.h vtable by sim/, runtime/ and the tests.
 *
 * The arena. With static_arena_bytes > 0 it is one dev_malloc of that size, made at
 * creation; empty_cache gives it back when no planned tensor is live and the next planned
 * allocation makes it again (so an idle allocator holds nothing, like the others). With
 * static_arena_bytes == 0 the arena's size is not known in advance (the plan gives offsets,
 * not sizes): a VA range of the device's size is reserved at the first planned allocation
 * and 2 MiB chunks are mapped on demand up to the highest offset + bytes seen, so reserved
 * memory is exactly max(offset + bytes) rounded to the granule. */
#include "memory/alloc_static.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

enum { K_ARENA = 1, K_FALLBACK = 2 };

typedef struct srec {
    uint64_t off, bytes;
    int live;
} srec;

typedef struct sa_t {
    uint64_t base;            /* arena address; valid when have_arena */
    int have_arena;
    int lazy;                 /* static_arena_bytes == 0: VMM-grown arena */
    uint64_t arena_bytes;     /* fixed size, or bytes mapped so far (lazy) */
    uint64_t va_bytes;        /* lazy: reserved VA */
    uint64_t *chunks; size_t nchunks, capchunks;   /* lazy: mapped handles in order */
    srec *rec; size_t nrec, caprec;
    uint32_t *freerec; size_t nfreerec, capfreerec;
    size_t n_arena_live;
    u64map *live;             /* address -> (kind << 32) | record */
    alloc_t *inner;           /* tensors without an offset */
    uint64_t n_fallbacks;
} sa_t;


static int find_offset(const alloc_config *c, uint64_t id, uint64_t *off)
{
    size_t lo = 0, hi = c->static_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->static_ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    if (lo < c->static_n && c->static_ids[lo] == id) {
        *off = c->static_offsets[lo];
        return 1;
    }
    return 0;
}

/* ---- the arena ---- */

static ms_status arena_fixed_make(alloc_t *a)
{
    sa_t *s = a->impl;
    ms_status st = a->be.ops->dev_malloc(a->be.ctx, s->arena_bytes, &s->base);
    if (st) return st;
    s->have_arena = 1;
    alloc_stat_add(&a->stats.reserved_bytes, &a->stats.reserved_peak_bytes, s->arena_bytes);
    a->stats.num_segment_allocs++;
    return MS_OK;
}

/* Lazy arena: maps chunks until `end` bytes from the base are backed. */
static ms_status arena_grow(alloc_t *a, uint64_t end)
{
    sa_t *s = a->impl;
    const mb_ops *o = a->be.ops;
    uint64_t g = a->be.granularity_bytes ? a->be.granularity_bytes : 2ULL << 20;
    if (!s->have_arena) {
        uint64_t va = (a->be.capacity_bytes + g - 1) / g * g;
        if (va == 0) return MS_ERR_OOM;
        ms_status st = o->va_reserve(a->be.ctx, va, &s->base);
        if (st) return st;
        s->va_bytes = va;
        s->have_arena = 1;
        s->arena_bytes = 0;
    }
    if (end > s->va_bytes) return MS_ERR_OOM;
    uint64_t first = s->arena_bytes;
    while (s->arena_bytes < end) {
        uint64_t h;
        ms_status st = o->phys_create(a->be.ctx, g, &h);
        if (!st) {
            a->stats.num_new_chunks++;
            st = o->map(a->be.ctx, s->base + s->arena_bytes, g, h);
            if (st) o->phys_release(a->be.ctx, h);
        }
        if (!st) st = o->set_access(a->be.ctx, s->base + s->arena_bytes, g);
        if (!st && ms_grow((void **)&s->chunks, &s->capchunks, s->nchunks + 1, sizeof *s->chunks))
            st = MS_ERR_NOMEM;
        if (st) return st;   /* chunks mapped so far stay: they are counted as reserved */
        a->stats.num_maps++;
        s->chunks[s->nchunks++] = h;
        s->arena_bytes += g;
        alloc_stat_add(&a->stats.reserved_bytes, &a->stats.reserved_peak_bytes, g);
    }
    if (s->arena_bytes > first) a->stats.num_segment_allocs++;
    return MS_OK;
}

/* Gives the idle arena back (empty_cache, destroy). */
static ms_status arena_release(alloc_t *a)
{
    sa_t *s = a->impl;
    const mb_ops *o = a->be.ops;
    if (!s->have_arena) return MS_OK;
    ms_status err = MS_OK, st;
    if (!s->lazy) {
        err = o->dev_free(a->be.ctx, s->base);
        alloc_stat_sub(&a->stats.reserved_bytes, s->arena_bytes);
    } else {
        uint64_t g = a->be.granularity_bytes ? a->be.granularity_bytes : 2ULL << 20;
        for (size_t i = 0; i < s->nchunks; i++) {
            if ((st = o->unmap(a->be.ctx, s->base + i * g, g)) && !err) err = st;
            a->stats.num_unmaps++;
            if ((st = o->phys_release(a->be.ctx, s->chunks[i])) && !err) err = st;
        }
        if ((st = o->va_free(a->be.ctx, s->base, s->va_bytes)) && !err) err = st;
        if (s->nchunks) a->stats.num_syncs++;   /* cuMemUnmap waits for the GPU */
        alloc_stat_sub(&a->stats.reserved_bytes, s->arena_bytes);
        s->nchunks = 0;
        s->arena_bytes = 0;
    }
    a->stats.num_segment_frees++;
    s->have_arena = 0;
    return err;
}

/* ---- vtable ---- */

static ms_status fallback_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag,
                                uint64_t *addr)
{
    sa_t *s = a->impl;
    alloc_stats before = s->inner->stats;
    ms_status st = alloc_block(s->inner, bytes, stream, tag, addr);
    alloc_stats_absorb(&a->stats, &before, &s->inner->stats);
    if (st) return st;
    if (u64map_get(s->live, *addr, NULL) || u64map_put(s->live, *addr, (uint64_t)K_FALLBACK << 32))
        return MS_ERR_INVALID;
    s->n_fallbacks++;
    return MS_OK;
}

static ms_status sa_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr)
{
    sa_t *s = a->impl;
    uint64_t off;
    *addr = 0;
    if (bytes == 0) return MS_OK;   /* as the caching allocator (PyTorch): null, no block */
    if (bytes > a->be.capacity_bytes) return MS_ERR_OOM;
    if (!find_offset(&a->cfg, tag, &off)) return fallback_block(a, bytes, stream, tag, addr);
    if (off > UINT64_MAX - bytes || (!s->lazy && off + bytes > s->arena_bytes))
        return alloc_fail(a, MS_ERR_INVALID, "the plan puts tensor %" PRIu64 " (%" PRIu64
                          " bytes) at offset %" PRIu64 ", beyond its arena of %" PRIu64
                          " bytes: plan and trace disagree", tag, bytes, off, s->arena_bytes);
    ms_status st;
    if (!s->lazy) {
        if (!s->have_arena && (st = arena_fixed_make(a))) return st;
    } else if ((st = arena_grow(a, off + bytes))) {
        return st;
    }
    uint64_t ad = s->base + off;
    if (u64map_get(s->live, ad, NULL))
        return alloc_fail(a, MS_ERR_INVALID, "the plan puts tensor %" PRIu64 " at offset %" PRIu64
                          ", where a live tensor starts: plan and trace disagree", tag, off);
    uint32_t r;
    if (s->nfreerec) {
        r = s->freerec[--s->nfreerec];
    } else {
        if (ms_grow((void **)&s->rec, &s->caprec, s->nrec + 1, sizeof *s->rec)) return MS_ERR_NOMEM;
        r = (uint32_t)s->nrec++;
    }
    s->rec[r] = (srec){off, bytes, 1};
    if (u64map_put(s->live, ad, (uint64_t)K_ARENA << 32 | r)) return MS_ERR_NOMEM;
    s->n_arena_live++;
    alloc_stat_add(&a->stats.allocated_bytes, &a->stats.allocated_peak_bytes, bytes);
    alloc_stat_add(&a->stats.active_bytes, &a->stats.active_peak_bytes, bytes);
    alloc_stat_add(&a->stats.requested_bytes, &a->stats.requested_peak_bytes, bytes);
    *addr = ad;
    return MS_OK;
}

static ms_status sa_release(alloc_t *a, uint64_t addr)
{
    sa_t *s = a->impl;
    uint64_t code;
    if (addr == 0) return MS_OK;    /* free(nullptr) */
    if (!u64map_get(s->live, addr, &code)) return MS_ERR_INVALID;
    if (code >> 32 == K_FALLBACK) {
        alloc_stats before = s->inner->stats;
        ms_status st = alloc_release(s->inner, addr);
        alloc_stats_absorb(&a->stats, &before, &s->inner->stats);
        if (st) return st;
        u64map_del(s->live, addr, NULL);
        return MS_OK;
    }
    uint32_t r = (uint32_t)code;
    alloc_stat_sub(&a->stats.allocated_bytes, s->rec[r].bytes);
    alloc_stat_sub(&a->stats.active_bytes, s->rec[r].bytes);
    alloc_stat_sub(&a->stats.requested_bytes, s->rec[r].bytes);
    s->rec[r].live = 0;
    u64map_del(s->live, addr, NULL);
    s->n_arena_live--;
    if (ms_grow((void **)&s->freerec, &s->capfreerec, s->nfreerec + 1, sizeof *s->freerec))
        return MS_ERR_NOMEM;
    s->freerec[s->nfreerec++] = r;
    return MS_OK;
}

static ms_status sa_empty_cache(alloc_t *a)
{
    sa_t *s = a->impl;
    alloc_stats before = s->inner->stats;
    ms_status st = alloc_empty_cache(s->inner);
    alloc_stats_absorb(&a->stats, &before, &s->inner->stats);
    ms_status r = s->n_arena_live ? MS_OK : arena_release(a);
    return st ? st : r;
}


static int cmp_rec_off(const void *x, const void *y)
{
    const srec *p = x, *q = y;
    return p->off < q->off ? -1 : p->off > q->off;
}

static ms_status sa_check(const alloc_t *a, char *why, size_t wn)
{
    const sa_t *s = a->impl;
    srec *v = malloc((s->n_arena_live + 1) * sizeof *v);
    if (!v) return MS_ERR_NOMEM;
    size_t k = 0, fallbacks = 0;
    uint64_t allocated = 0;
    uint64_t key, val;
    ms_status st = MS_OK;
    for (size_t it = 0; u64map_next(s->live, &it, &key, &val);) {
        if (val >> 32 == K_FALLBACK) {
            fallbacks++;
            continue;
        }
        const srec *r = &s->rec[(uint32_t)val];
        if ((uint32_t)val >= s->nrec || !r->live || k >= s->n_arena_live || !s->have_arena ||
            key != s->base + r->off) {
            st = alloc_check_fail(why, wn, "live map entry 0x%llx does not match a live arena tensor",
                     (unsigned long long)key);
            break;
        }
        if (r->off + r->bytes > s->arena_bytes) {
            st = alloc_check_fail(why, wn, "tensor at offset %llu ends past the arena", (unsigned long long)r->off);
            break;
        }
        v[k++] = *r;
        allocated += r->bytes;
    }
    if (!st && k != s->n_arena_live) st = alloc_check_fail(why, wn, "%zu live arena tensors, counted %zu", s->n_arena_live, k);
    if (!st) {
        qsort(v, k, sizeof *v, cmp_rec_off);
        for (size_t i = 1; i < k && !st; i++)
            if (v[i - 1].off + v[i - 1].bytes > v[i].off)
                st = alloc_check_fail(why, wn, "live tensors overlap in the arena at offsets %llu (+%llu) and %llu",
                         (unsigned long long)v[i - 1].off, (unsigned long long)v[i - 1].bytes,
                         (unsigned long long)v[i].off);
    }
    free(v);
    if (st) return st;
    const alloc_stats *in = &s->inner->stats;
    if ((st = s->inner->vt->check(s->inner, why, wn))) return st;
    const alloc_stats *t = &a->stats;
    uint64_t reserved = s->have_arena ? s->arena_bytes : 0;
    if (t->reserved_bytes != reserved + in->reserved_bytes ||
        t->allocated_bytes != allocated + in->allocated_bytes ||
        t->active_bytes != allocated + in->active_bytes ||
        t->requested_bytes != allocated + in->requested_bytes ||
        t->inactive_split_bytes != in->inactive_split_bytes)
        return alloc_check_fail(why, wn, "stats disagree with a recount (reserved %llu, recount %llu)",
                   (unsigned long long)t->reserved_bytes, (unsigned long long)(reserved + in->reserved_bytes));
    (void)fallbacks;
    return MS_OK;
}

static void sa_dump(const alloc_t *a, FILE *f)
{
    const sa_t *s = a->impl;
    fprintf(f, "static: arena %llu bytes (%s, %s), %zu planned tensors live, %llu fallbacks; "
            "reserved %llu allocated %llu\n",
            (unsigned long long)s->arena_bytes, s->lazy ? "grown on demand" : "fixed",
            s->have_arena ? "held" : "released", s->n_arena_live,
            (unsigned long long)s->n_fallbacks, (unsigned long long)a->stats.reserved_bytes,
            (unsigned long long)a->stats.allocated_bytes);
    for (size_t i = 0; i < s->nrec; i++)
        if (s->rec[i].live)
            fprintf(f, "  offset %llu bytes %llu\n", (unsigned long long)s->rec[i].off,
                    (unsigned long long)s->rec[i].bytes);
    fprintf(f, "  fallback:\n");
    alloc_dump(s->inner, f);
}

static ms_status sa_create(alloc_t *a)
{
    const alloc_config *c = &a->cfg;
    if (c->static_n && (!c->static_ids || !c->static_offsets)) return MS_ERR_INVALID;
    for (size_t i = 1; i < c->static_n; i++)
        if (c->static_ids[i - 1] >= c->static_ids[i]) return MS_ERR_INVALID;  /* sorted, unique */
    sa_t *s = calloc(1, sizeof *s);
    if (!s) return MS_ERR_NOMEM;
    a->impl = s;
    s->live = u64map_new(1024);
    alloc_config ic = *c;
    ic.check_every_op = 0;   /* our check() runs the inner check */
    ic.static_ids = ic.static_offsets = NULL;
    ic.static_n = 0;
    ms_status st = s->live ? alloc_new("caching", &ic, &a->be, &s->inner, NULL) : MS_ERR_NOMEM;
    s->lazy = c->static_arena_bytes == 0;
    s->arena_bytes = c->static_arena_bytes;
    if (!st && !s->lazy) st = arena_fixed_make(a);
    if (st) {
        alloc_free(s->inner);
        u64map_free(s->live);
        free(s);
        a->impl = NULL;
    }
    return st;
}

static void sa_destroy(alloc_t *a)
{
    sa_t *s = a->impl;
    if (!s) return;
    arena_release(a);
    alloc_free(s->inner);
    u64map_free(s->live);
    free(s->chunks);
    free(s->rec);
    free(s->freerec);
    free(s);
    a->impl = NULL;
}

const alloc_stats *alloc_static_fallback_stats(const alloc_t *a)
{
    return a->vt == &alloc_static_vt ? &((const sa_t *)a->impl)->inner->stats : NULL;
}

uint64_t alloc_static_num_fallbacks(const alloc_t *a)
{
    return a->vt == &alloc_static_vt ? ((const sa_t *)a->impl)->n_fallbacks : 0;
}

uint64_t alloc_static_arena_bytes(const alloc_t *a)
{
    if (a->vt != &alloc_static_vt) return 0;
    const sa_t *s = a->impl;
    return s->have_arena ? s->arena_bytes : 0;
}

const alloc_vtable alloc_static_vt = {
    "static",
    "static arena: every tensor at its planned offset in one allocation, the rest via caching",
    "offline memory plan (MEMO's bi-level plan; greedy best-fit placement until then)",
    sa_create, sa_destroy, sa_block, sa_release, sa_empty_cache, sa_check, sa_dump,
    ALLOC_CAP_STATIC_PLAN, NULL,
    NULL, NULL, /* no handles: released by address */
};

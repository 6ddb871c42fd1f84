/* alloc.c — the allocator registry and the thin dispatch layer of alloc.h: argument checks,
 * request/allocation counters common to all allocators, and the optional invariant check
 * after every call (tests turn it on). Used by sim/, runtime/ and the tests. */
#include "memory/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registry: X(its vtable), defined in planners/alloc_NAME.c, in `memsim list` order. The
 * vtables are declared here, not through the allocators' headers, so that the registry
 * depends on no allocator (they all include alloc.h). */
#define ALLOC_LIST(X)      \
    X(alloc_caching_vt)    \
    X(alloc_stitch_vt)     \
    X(alloc_expandable_vt) \
    X(alloc_static_vt)

#define ALLOC_DECLARE(v) extern const alloc_vtable v;
#define ALLOC_ENTRY(v) &v,
ALLOC_LIST(ALLOC_DECLARE)
static const alloc_vtable *const registry[] = { ALLOC_LIST(ALLOC_ENTRY) };

const alloc_vtable *const *alloc_registry(size_t *n)
{
    *n = sizeof registry / sizeof *registry;
    return registry;
}

const alloc_vtable *alloc_find(const char *name)
{
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

void alloc_config_default(alloc_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_split_size_bytes = UINT64_MAX;
    c->roundup_power2_divisions = 0;
    /* GMLake: the paper says 128 MB; the released glake code defaults to 512 MiB. We take
     * the paper's value (see docs/ALLOCATORS.md); it is a knob. */
    c->frag_limit_bytes = 128ULL << 20;
    c->stitch_limit_bytes = UINT64_MAX;
    c->expandable_va_factor = 1.125; /* PyTorch reserves 1.125 x device memory per pool */
}

const char *alloc_config_problem(const alloc_config *c)
{
    unsigned d = c->roundup_power2_divisions;
    if (c->max_split_size_bytes < ALLOC_MIN_MAX_SPLIT_BYTES)
        return "max_split_size must be at least 20 MiB (PyTorch's max_split_size_mb >= 20)";
    if (d > 64 || (d > 1 && (d & (d - 1))))
        return "roundup_power2_divisions must be 0, 1 or a power of two up to 64";
    if (!(c->expandable_va_factor >= 1 && c->expandable_va_factor <= 64))
        return "expandable_va_factor must be in [1, 64] (the virtual range per device byte)";
    return NULL;
}

ms_status alloc_new(const char *name, const alloc_config *cfg, const mb_backend *be,
                    alloc_t **out, ms_error *err)
{
    *out = NULL;
    const alloc_vtable *vt = alloc_find(name);
    if (!vt) return ms_fail(err, MS_ERR_NOTFOUND, "unknown allocator '%s' (memsim list)", name);
    alloc_t *a = calloc(1, sizeof *a);
    if (!a) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    a->vt = vt;
    if (cfg) a->cfg = *cfg;
    else alloc_config_default(&a->cfg);
    a->be = *be;
    ms_status st = vt->create(a);
    if (st != MS_OK) {
        const char *why = st == MS_ERR_INVALID ? alloc_config_problem(&a->cfg) : NULL;
        free(a);
        return ms_fail(err, st, "cannot create allocator '%s': %s", name,
                       why ? why : ms_status_str(st));
    }
    *out = a;
    return MS_OK;
}

void alloc_free(alloc_t *a)
{
    if (!a) return;
    a->vt->destroy(a);
    free(a);
}

/* With check_every_op, an invariant violation is reported as MS_ERR_INVALID and printed:
 * tests treat it as a failure; it never happens in a correct allocator. Out of line, so
 * that the calls without the check (every replay's) pay one test of the flag. */
static __attribute__((noinline)) ms_status checked_op(alloc_t *a, ms_status st)
{
    char why[256];
    if (a->vt->check(a, why, sizeof why) != MS_OK) {
        fprintf(stderr, "allocator %s: invariant violated: %s\n", a->vt->name, why);
        return MS_ERR_INVALID;
    }
    return st;
}

static inline ms_status after_op(alloc_t *a, ms_status st)
{
    return a->cfg.check_every_op ? checked_op(a, st) : st;
}

const char *alloc_problem(const alloc_t *a)
{
    return a->problem;
}

ms_status alloc_fail(alloc_t *a, ms_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->problem, sizeof a->problem, fmt, ap);
    va_end(ap);
    return st;
}

ms_status alloc_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr)
{
    a->problem[0] = '\0';
    ms_status st = a->vt->block(a, bytes, stream, tag, addr);
    if (st == MS_OK) {
        a->stats.num_allocs++;
    } else if (st == MS_ERR_OOM) {
        a->stats.num_ooms++;
    }
    return after_op(a, st);
}

ms_status alloc_release(alloc_t *a, uint64_t addr)
{
    a->problem[0] = '\0';
    ms_status st = a->vt->release(a, addr);
    if (st == MS_OK) a->stats.num_frees++;
    return after_op(a, st);
}

ms_status alloc_block_h(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr,
                        uint32_t *handle)
{
    *handle = ALLOC_NO_HANDLE;
    if (!a->vt->block_h) return alloc_block(a, bytes, stream, tag, addr);
    a->problem[0] = '\0';
    ms_status st = a->vt->block_h(a, bytes, stream, tag, addr, handle);
    if (st == MS_OK) {
        a->stats.num_allocs++;
    } else if (st == MS_ERR_OOM) {
        a->stats.num_ooms++;
    }
    return after_op(a, st);
}

ms_status alloc_release_h(alloc_t *a, uint64_t addr, uint32_t handle)
{
    if (!a->vt->release_h || handle == ALLOC_NO_HANDLE) return alloc_release(a, addr);
    a->problem[0] = '\0';
    ms_status st = a->vt->release_h(a, addr, handle);
    if (st == MS_OK) a->stats.num_frees++;
    return after_op(a, st);
}

ms_status alloc_empty_cache(alloc_t *a) { return after_op(a, a->vt->empty_cache(a)); }
const alloc_stats *alloc_get_stats(const alloc_t *a) { return &a->stats; }
const char *alloc_name(const alloc_t *a) { return a->vt->name; }
unsigned alloc_caps(const alloc_t *a) { return a->vt->caps; }

int alloc_set_events_hook(alloc_t *a, alloc_events_fn fn, void *ctx)
{
    if (!a || !(a->vt->caps & ALLOC_CAP_EVENTS_HOOK) || !a->vt->set_events_hook) return 0;
    a->vt->set_events_hook(a, fn, ctx);
    return 1;
}
ms_status alloc_check(const alloc_t *a, char *why, size_t n) { return a->vt->check(a, why, n); }
void alloc_dump(const alloc_t *a, FILE *f) { a->vt->dump(a, f); }

void alloc_stat_delta(uint64_t *cur, uint64_t *peak, uint64_t before, uint64_t after)
{
    if (after > before) alloc_stat_add(cur, peak, after - before);
    else alloc_stat_sub(cur, before - after);
}

void alloc_stats_absorb(alloc_stats *s, const alloc_stats *b, const alloc_stats *n)
{
    alloc_stat_delta(&s->allocated_bytes, &s->allocated_peak_bytes, b->allocated_bytes,
               n->allocated_bytes);
    alloc_stat_delta(&s->requested_bytes, &s->requested_peak_bytes, b->requested_bytes,
               n->requested_bytes);
    alloc_stat_delta(&s->reserved_bytes, &s->reserved_peak_bytes, b->reserved_bytes,
               n->reserved_bytes);
    alloc_stat_delta(&s->active_bytes, &s->active_peak_bytes, b->active_bytes, n->active_bytes);
    alloc_stat_delta(&s->inactive_split_bytes, &s->inactive_split_peak_bytes,
               b->inactive_split_bytes, n->inactive_split_bytes);
    s->num_alloc_retries += n->num_alloc_retries - b->num_alloc_retries;
    s->num_segment_allocs += n->num_segment_allocs - b->num_segment_allocs;
    s->num_segment_frees += n->num_segment_frees - b->num_segment_frees;
    s->num_syncs += n->num_syncs - b->num_syncs;
}

ms_status alloc_check_fail(char *why, size_t n, const char *fmt, ...)
{
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return MS_ERR_INVALID;
}

/* alloc_stitch.c — GMLake's virtual-memory stitching allocator (see alloc_stitch.h and
 * docs/ALLOCATORS.md). Called through the alloc.h vtable by sim/, runtime/ and the tests.
 *
 * Data model. A segment is what the paper's Alloc creates: one VA reservation with k
 * physical chunks of one granule each (2 MiB) mapped in order. A segment is cut into
 * pBlocks (contiguous chunk runs) by Split; a Split only moves a boundary, as in glake (the
 * paper's "new VA and remapped chunks" would cost VMM calls for no gain). An sBlock is a
 * further VA reservation that maps the chunks of several free pBlocks again. Chunk state
 * is the truth: a chunk is busy while the pBlock holding it is handed to a tensor (ALLOC)
 * or is part of an sBlock handed to a tensor (STITCHED); an sBlock is available for an
 * exact match when none of its chunks is busy. Every sBlock keeps a count of its busy
 * chunks and every chunk the list of sBlocks that map it, so Update on free costs one pass
 * over the freed chunks. */
#include "memory/alloc_stitch.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "memory/alloc_caching.h"
#include "base/u64map.h"

#define NONE UINT32_MAX

enum { PB_FREE = 0, PB_ALLOC, PB_STITCHED };
enum { K_PBLOCK = 1, K_SBLOCK = 2, K_SMALL = 3 };           /* kinds in the live map */
enum { S_EXACT = 1, S_SINGLE, S_MULTI, S_INSUFF, S_OOM };  /* BestFit states */

typedef struct chunk {
    uint64_t handle;
    uint32_t pb;            /* pBlock that holds this chunk */
    uint32_t nsb;           /* sBlocks that also map this chunk */
    size_t capsb;
    uint32_t *sb;
} chunk;

typedef struct segment {
    uint64_t va;
    uint32_t n, nfree;      /* chunks; chunks not busy */
    uint32_t pool;
    int live;
    chunk *c;
} segment;

typedef struct pblock {
    uint32_t seg, first, n;
    int state;
    uint32_t owner;         /* sBlock when STITCHED */
    uint32_t sprev, snext;  /* neighbours in the segment, address order */
    uint32_t qprev, qnext;  /* size bucket of the pPool (FREE only) */
    uint64_t req_bytes;     /* requested bytes while ALLOC */
    int live;
} pblock;

typedef struct sblock {
    uint64_t va;
    uint32_t n, nbusy;
    uint32_t pool;
    int live, active, in_avail, in_lru;
    uint64_t *ref;          /* (segment << 32) | chunk index, in VA order */
    uint32_t aprev, anext;  /* available list of its size */
    uint32_t lprev, lnext;  /* LRU list of inactive sBlocks, oldest first */
    uint64_t req_bytes;
} sblock;

/* One stream's pools. pPool: free pBlocks in buckets by chunk count, address order inside
 * a bucket, with a two-level bitmap of non-empty buckets for best-fit searches. sPool:
 * available sBlocks by chunk count (u64map n -> list head). */
typedef struct spool {
    int stream;
    uint32_t nb;
    uint32_t *head;
    uint64_t *w0, *w1;
    size_t n0, n1;
    u64map *avail;
} spool;

typedef struct st_t {
    alloc_stitch_knobs k;
    uint64_t gran;
    uint32_t nb;                    /* buckets: chunk counts 0 .. nb-1 */
    segment *seg; size_t nseg, capseg;
    pblock *pb; size_t npb, cappb;
    sblock *sb; size_t nsb, capsb;
    uint32_t *free_seg; size_t nfree_seg, capfree_seg;
    uint32_t *free_pb; size_t nfree_pb, capfree_pb;
    uint32_t *free_sb; size_t nfree_sb, capfree_sb;
    spool *pools; size_t npools, cappools;
    u64map *live;                   /* address -> (kind << 32) | id */
    uint32_t lru_head, lru_tail;
    uint64_t stitched_bytes;        /* VA of all sBlocks */
    uint64_t n_small_live;
    uint64_t state_count[6];
    uint32_t *cand; size_t capcand; /* BestFit's candidate list (workspace) */
    alloc_t *inner;                 /* small requests (PyTorch's small pool) */
} st_t;

/* ---- stats helpers: own changes and the inner allocator's changes go to a->stats ---- */


/* ---- bucket bitmap ---- */

static void bs_set(spool *p, uint32_t i)
{
    p->w0[i >> 6] |= 1ULL << (i & 63);
    p->w1[i >> 12] |= 1ULL << ((i >> 6) & 63);
}

static void bs_clear(spool *p, uint32_t i)
{
    p->w0[i >> 6] &= ~(1ULL << (i & 63));
    if (!p->w0[i >> 6]) p->w1[i >> 12] &= ~(1ULL << ((i >> 6) & 63));
}

/* Smallest non-empty bucket >= i, or NONE. */
static uint32_t bs_next(const spool *p, uint32_t i)
{
    if (i >= p->nb) return NONE;
    size_t k = i >> 6;
    uint64_t m = p->w0[k] & (~0ULL << (i & 63));
    if (m) return (uint32_t)(k * 64 + (size_t)__builtin_ctzll(m));
    size_t j = k + 1;                       /* next word of w0 to consider */
    for (size_t k1 = j >> 6; k1 < p->n1; k1++) {
        uint64_t m1 = p->w1[k1];
        if (k1 == j >> 6) m1 &= ~0ULL << (j & 63);
        if (m1) {
            size_t w = k1 * 64 + (size_t)__builtin_ctzll(m1);
            return (uint32_t)(w * 64 + (size_t)__builtin_ctzll(p->w0[w]));
        }
    }
    return NONE;
}

/* Largest non-empty bucket <= i, or NONE. */
static uint32_t bs_prev(const spool *p, uint32_t i)
{
    if (i >= p->nb) i = p->nb - 1;
    size_t k = i >> 6;
    unsigned b = i & 63;
    uint64_t m = p->w0[k] & (b == 63 ? ~0ULL : ((1ULL << (b + 1)) - 1));
    if (m) return (uint32_t)(k * 64 + 63 - (size_t)__builtin_clzll(m));
    if (k == 0) return NONE;
    size_t j = k - 1;
    for (size_t k1 = (j >> 6) + 1; k1-- > 0;) {
        uint64_t m1 = p->w1[k1];
        if (k1 == j >> 6) {
            unsigned jb = j & 63;
            m1 &= jb == 63 ? ~0ULL : ((1ULL << (jb + 1)) - 1);
        }
        if (m1) {
            size_t w = k1 * 64 + 63 - (size_t)__builtin_clzll(m1);
            return (uint32_t)(w * 64 + 63 - (size_t)__builtin_clzll(p->w0[w]));
        }
    }
    return NONE;
}

/* ---- slots ---- */

static ms_status slot_new(void **arr, size_t *n, size_t *cap, size_t elem, uint32_t **fl,
                          size_t *nfl, uint32_t *id)
{
    if (*nfl) {
        *id = (*fl)[--*nfl];
    } else {
        if (*n >= NONE - 1) return MS_ERR_NOMEM;
        if (ms_grow(arr, cap, *n + 1, elem)) return MS_ERR_NOMEM;
        *id = (uint32_t)(*n)++;
    }
    memset((char *)*arr + (size_t)*id * elem, 0, elem);
    return MS_OK;
}

static ms_status slot_release(uint32_t **fl, size_t *nfl, size_t *cap, uint32_t id)
{
    if (ms_grow((void **)fl, cap, *nfl + 1, sizeof **fl)) return MS_ERR_NOMEM;
    (*fl)[(*nfl)++] = id;
    return MS_OK;
}

static uint64_t pb_addr(const st_t *s, const pblock *p)
{
    return s->seg[p->seg].va + (uint64_t)p->first * s->gran;
}

static chunk *ref_chunk(const st_t *s, uint64_t ref)
{
    return &s->seg[ref >> 32].c[(uint32_t)ref];
}

/* ---- pools ---- */

static spool *pool_get(st_t *s, int stream, uint32_t *idx)
{
    for (size_t i = 0; i < s->npools; i++)
        if (s->pools[i].stream == stream) {
            *idx = (uint32_t)i;
            return &s->pools[i];
        }
    if (ms_grow((void **)&s->pools, &s->cappools, s->npools + 1, sizeof *s->pools)) return NULL;
    spool *p = &s->pools[s->npools];
    memset(p, 0, sizeof *p);
    p->stream = stream;
    p->nb = s->nb;
    p->n0 = (p->nb + 63) / 64;
    p->n1 = (p->n0 + 63) / 64;
    p->head = malloc(p->nb * sizeof *p->head);
    p->w0 = calloc(p->n0, sizeof *p->w0);
    p->w1 = calloc(p->n1, sizeof *p->w1);
    p->avail = u64map_new(16);
    if (!p->head || !p->w0 || !p->w1 || !p->avail) {
        free(p->head);
        free(p->w0);
        free(p->w1);
        u64map_free(p->avail);
        return NULL;
    }
    for (uint32_t i = 0; i < p->nb; i++) p->head[i] = NONE;
    *idx = (uint32_t)s->npools++;
    return p;
}

/* Inserts a FREE pBlock into its bucket, keeping address order. */
static void pp_insert(st_t *s, uint32_t id)
{
    pblock *b = &s->pb[id];
    spool *p = &s->pools[s->seg[b->seg].pool];
    uint64_t addr = pb_addr(s, b);
    uint32_t prev = NONE, cur = p->head[b->n];
    while (cur != NONE && pb_addr(s, &s->pb[cur]) < addr) {
        prev = cur;
        cur = s->pb[cur].qnext;
    }
    b->qprev = prev;
    b->qnext = cur;
    if (cur != NONE) s->pb[cur].qprev = id;
    if (prev != NONE) s->pb[prev].qnext = id;
    else p->head[b->n] = id;
    bs_set(p, b->n);
}

static void pp_remove(st_t *s, uint32_t id)
{
    pblock *b = &s->pb[id];
    spool *p = &s->pools[s->seg[b->seg].pool];
    if (b->qprev != NONE) s->pb[b->qprev].qnext = b->qnext;
    else p->head[b->n] = b->qnext;
    if (b->qnext != NONE) s->pb[b->qnext].qprev = b->qprev;
    if (p->head[b->n] == NONE) bs_clear(p, b->n);
    b->qprev = b->qnext = NONE;
}

static ms_status avail_push(st_t *s, uint32_t id)
{
    sblock *x = &s->sb[id];
    spool *p = &s->pools[x->pool];
    uint64_t h;
    uint32_t head = u64map_get(p->avail, x->n, &h) ? (uint32_t)h : NONE;
    x->aprev = NONE;
    x->anext = head;
    if (head != NONE) s->sb[head].aprev = id;
    x->in_avail = 1;
    return u64map_put(p->avail, x->n, id) ? MS_ERR_NOMEM : MS_OK;
}

static void avail_remove(st_t *s, uint32_t id)
{
    sblock *x = &s->sb[id];
    spool *p = &s->pools[x->pool];
    if (x->aprev != NONE) {
        s->sb[x->aprev].anext = x->anext;
    } else if (x->anext != NONE) {
        u64map_put(p->avail, x->n, x->anext); /* overwrite: cannot fail */
    } else {
        u64map_del(p->avail, x->n, NULL);
    }
    if (x->anext != NONE) s->sb[x->anext].aprev = x->aprev;
    x->in_avail = 0;
    x->aprev = x->anext = NONE;
}

static void lru_append(st_t *s, uint32_t id)
{
    sblock *x = &s->sb[id];
    x->lprev = s->lru_tail;
    x->lnext = NONE;
    if (s->lru_tail != NONE) s->sb[s->lru_tail].lnext = id;
    else s->lru_head = id;
    s->lru_tail = id;
    x->in_lru = 1;
}

static void lru_remove(st_t *s, uint32_t id)
{
    sblock *x = &s->sb[id];
    if (x->lprev != NONE) s->sb[x->lprev].lnext = x->lnext;
    else s->lru_head = x->lnext;
    if (x->lnext != NONE) s->sb[x->lnext].lprev = x->lprev;
    else s->lru_tail = x->lprev;
    x->in_lru = 0;
    x->lprev = x->lnext = NONE;
}

/* ---- chunk busy state ---- */

/* inactive_split: free bytes of segments that also hold busy chunks (they cannot be
 * released), PyTorch's meaning of the statistic. */
static uint64_t seg_split_bytes(const st_t *s, const segment *g)
{
    return g->nfree < g->n ? (uint64_t)g->nfree * s->gran : 0;
}

static ms_status chunks_busy(alloc_t *a, uint32_t pbid, int busy)
{
    st_t *s = a->impl;
    pblock *b = &s->pb[pbid];
    segment *g = &s->seg[b->seg];
    uint64_t before = seg_split_bytes(s, g);
    uint32_t end = b->first + b->n;
    /* neighbouring chunks usually carry the same sBlock list (sBlocks take whole pBlocks):
     * such a run updates each sBlock once */
    for (uint32_t i = b->first, len; i < end; i += len) {
        const chunk *c = &g->c[i];
        for (len = 1; i + len < end && g->c[i + len].nsb == c->nsb &&
                      (c->nsb == 0 || memcmp(g->c[i + len].sb, c->sb, c->nsb * sizeof *c->sb) == 0);
             len++)
            ;
        for (uint32_t j = 0; j < c->nsb; j++) {
            uint32_t id = c->sb[j];
            sblock *x = &s->sb[id];
            if (busy) {
                if (x->nbusy == 0 && x->in_avail) avail_remove(s, id);
                x->nbusy += len;
            } else if ((x->nbusy -= len) == 0 && !x->active) {
                if (avail_push(s, id)) return MS_ERR_NOMEM;
            }
        }
    }
    if (busy) g->nfree -= b->n;
    else g->nfree += b->n;
    alloc_stat_delta(&a->stats.inactive_split_bytes, &a->stats.inactive_split_peak_bytes, before,
               seg_split_bytes(s, g));
    return MS_OK;
}

/* ---- pBlock operations ---- */

static ms_status pb_new(st_t *s, uint32_t *id)
{
    ms_status st = slot_new((void **)&s->pb, &s->npb, &s->cappb, sizeof *s->pb, &s->free_pb,
                            &s->nfree_pb, id);
    if (st == MS_OK) {
        pblock *b = &s->pb[*id];
        b->live = 1;
        b->owner = b->sprev = b->snext = b->qprev = b->qnext = NONE;
    }
    return st;
}

static ms_status pb_drop(st_t *s, uint32_t id)
{
    s->pb[id].live = 0;
    return slot_release(&s->free_pb, &s->nfree_pb, &s->capfree_pb, id);
}

/* Split: a FREE pBlock keeps its first k chunks; the rest becomes a new FREE pBlock after
 * it. No VMM call: the chunks stay mapped where they are. *right gets the new id. */
static ms_status pb_split(alloc_t *a, uint32_t id, uint32_t k, uint32_t *right)
{
    st_t *s = a->impl;
    uint32_t r;
    if (pb_new(s, &r)) return MS_ERR_NOMEM;
    pblock *b = &s->pb[id], *q = &s->pb[r];
    pp_remove(s, id);
    q->seg = b->seg;
    q->first = b->first + k;
    q->n = b->n - k;
    q->state = PB_FREE;
    q->sprev = id;
    q->snext = b->snext;
    if (b->snext != NONE) s->pb[b->snext].sprev = r;
    b->snext = r;
    b->n = k;
    segment *g = &s->seg[b->seg];
    for (uint32_t i = q->first; i < q->first + q->n; i++) g->c[i].pb = r;
    pp_insert(s, id);
    pp_insert(s, r);
    a->stats.num_splits++;
    if (right) *right = r;
    return MS_OK;
}

/* Merges FREE pBlock `r` (right after `l` in the segment) into FREE pBlock `l`. */
static ms_status pb_merge(st_t *s, uint32_t l, uint32_t r)
{
    pblock *b = &s->pb[l], *q = &s->pb[r];
    pp_remove(s, l);
    pp_remove(s, r);
    segment *g = &s->seg[b->seg];
    for (uint32_t i = q->first; i < q->first + q->n; i++) g->c[i].pb = l;
    b->n += q->n;
    b->snext = q->snext;
    if (q->snext != NONE) s->pb[q->snext].sprev = l;
    pp_insert(s, l);
    return pb_drop(s, r);
}

/* Makes a FREE pBlock busy (ALLOC, or STITCHED into sBlock owner). */
static ms_status pb_take(alloc_t *a, uint32_t id, int state, uint32_t owner)
{
    st_t *s = a->impl;
    pp_remove(s, id);
    s->pb[id].state = state;
    s->pb[id].owner = owner;
    return chunks_busy(a, id, 1);
}

/* Update: a busy pBlock becomes FREE again (merged with free neighbours if coalescing). */
static ms_status pb_give_back(alloc_t *a, uint32_t id)
{
    st_t *s = a->impl;
    pblock *b = &s->pb[id];
    b->state = PB_FREE;
    b->owner = NONE;
    b->req_bytes = 0;
    pp_insert(s, id);
    ms_status st = chunks_busy(a, id, 0);
    if (st || !s->k.coalesce) return st;
    uint32_t nx = s->pb[id].snext, pv = s->pb[id].sprev;
    if (nx != NONE && s->pb[nx].state == PB_FREE && (st = pb_merge(s, id, nx))) return st;
    if (pv != NONE && s->pb[pv].state == PB_FREE) st = pb_merge(s, pv, id);
    return st;
}

/* ---- VMM: segments (Alloc) ---- */

static ms_status undo_map(alloc_t *a, uint64_t va, uint32_t nmapped)
{
    ms_status st = MS_OK;
    for (uint32_t i = 0; i < nmapped; i++) {
        ms_status u = a->be.ops->unmap(a->be.ctx, va + (uint64_t)i * a->be.granularity_bytes,
                                       a->be.granularity_bytes);
        a->stats.num_unmaps++;
        if (u && !st) st = u;
    }
    return st;
}

/* Alloc: reserves VA for k chunks, creates and maps them; adds one FREE pBlock. On any
 * failure everything made so far is released and nothing changes. */
static ms_status seg_alloc(alloc_t *a, uint32_t pool, uint32_t k, uint32_t *pbid)
{
    st_t *s = a->impl;
    const mb_ops *o = a->be.ops;
    uint64_t g = s->gran, va = 0, bytes = (uint64_t)k * g;
    chunk *c = calloc(k, sizeof *c);
    if (!c) return MS_ERR_NOMEM;
    ms_status st = o->va_reserve(a->be.ctx, bytes, &va);
    if (st) {
        free(c);
        return st;
    }
    uint32_t made = 0, mapped = 0;
    for (; made < k && !st; made++) {
        st = o->phys_create(a->be.ctx, g, &c[made].handle);
        if (st) break;
        a->stats.num_new_chunks++;
    }
    for (; !st && mapped < k; mapped++) {
        st = o->map(a->be.ctx, va + (uint64_t)mapped * g, g, c[mapped].handle);
        if (st) break;
        a->stats.num_maps++;
    }
    if (!st) st = o->set_access(a->be.ctx, va, bytes);
    uint32_t id = NONE, sid = NONE;
    if (!st) st = slot_new((void **)&s->seg, &s->nseg, &s->capseg, sizeof *s->seg, &s->free_seg,
                           &s->nfree_seg, &sid);
    if (!st && (st = pb_new(s, &id)) != MS_OK)
        slot_release(&s->free_seg, &s->nfree_seg, &s->capfree_seg, sid);
    if (st) {
        undo_map(a, va, mapped);
        for (uint32_t i = 0; i < made; i++) o->phys_release(a->be.ctx, c[i].handle);
        o->va_free(a->be.ctx, va, bytes);
        free(c);
        return st;
    }
    segment *sg = &s->seg[sid];
    sg->va = va;
    sg->n = sg->nfree = k;
    sg->pool = pool;
    sg->live = 1;
    sg->c = c;
    for (uint32_t i = 0; i < k; i++) c[i].pb = id;
    pblock *b = &s->pb[id];
    b->seg = sid;
    b->first = 0;
    b->n = k;
    b->state = PB_FREE;
    pp_insert(s, id);
    alloc_stat_add(&a->stats.reserved_bytes, &a->stats.reserved_peak_bytes, bytes);
    a->stats.num_segment_allocs++;
    *pbid = id;
    return MS_OK;
}

/* ---- sBlocks (Stitch / StitchFree) ---- */

/* StitchFree of one inactive sBlock: unmap its VA (the chunks stay with their pBlocks). */
static ms_status sb_release(alloc_t *a, uint32_t id)
{
    st_t *s = a->impl;
    sblock *x = &s->sb[id];
    if (x->in_avail) avail_remove(s, id);
    if (x->in_lru) lru_remove(s, id);
    for (uint32_t i = 0; i < x->n; i++) {
        chunk *c = ref_chunk(s, x->ref[i]);
        for (uint32_t j = 0; j < c->nsb; j++)
            if (c->sb[j] == id) {
                c->sb[j] = c->sb[--c->nsb];
                break;
            }
        if (c->nsb == 0) a->stats.mapped_twice_bytes -= s->gran;
    }
    uint64_t bytes = (uint64_t)x->n * s->gran;
    ms_status st = undo_map(a, x->va, x->n);
    ms_status f = a->be.ops->va_free(a->be.ctx, x->va, bytes);
    s->stitched_bytes -= bytes;
    a->stats.num_stitch_frees++;
    free(x->ref);
    x->ref = NULL;
    x->live = 0;
    ms_status r = slot_release(&s->free_sb, &s->nfree_sb, &s->capfree_sb, id);
    return st ? st : f ? f : r;
}

/* Releases least-recently-used inactive sBlocks until `goal` bytes are released (all
 * with goal UINT64_MAX) or none is left. Returns the bytes released. */
static uint64_t stitch_free(alloc_t *a, uint64_t goal, ms_status *err)
{
    st_t *s = a->impl;
    uint64_t done = 0;
    while (done < goal && s->lru_head != NONE) {
        uint32_t id = s->lru_head;
        done += (uint64_t)s->sb[id].n * s->gran;
        ms_status st = sb_release(a, id);
        if (st && !*err) *err = st;
    }
    return done;
}

static void stitch_limit(alloc_t *a, ms_status *err)
{
    st_t *s = a->impl;
    if (s->stitched_bytes > a->cfg.stitch_limit_bytes)
        stitch_free(a, s->stitched_bytes - a->cfg.stitch_limit_bytes, err);
}

/* Stitch, VMM part: maps the chunks of the candidate pBlocks (the last one only in part,
 * `last_use` chunks) into a new VA range of n chunks. Nothing else changes. */
static ms_status stitch_map(alloc_t *a, const uint32_t *cand, size_t nc, uint32_t last_use,
                            uint32_t n, uint64_t *va_out)
{
    st_t *s = a->impl;
    const mb_ops *o = a->be.ops;
    uint64_t g = s->gran, va = 0;
    ms_status st = o->va_reserve(a->be.ctx, (uint64_t)n * g, &va);
    if (st) return st;
    uint32_t done = 0;
    for (size_t i = 0; i < nc && !st; i++) {
        const pblock *b = &s->pb[cand[i]];
        uint32_t use = i + 1 == nc ? last_use : b->n;
        for (uint32_t j = 0; j < use && !st; j++) {
            st = o->map(a->be.ctx, va + (uint64_t)done * g, g,
                        s->seg[b->seg].c[b->first + j].handle);
            if (!st) {
                done++;
                a->stats.num_maps++;
            }
        }
    }
    if (!st) st = o->set_access(a->be.ctx, va, (uint64_t)n * g);
    if (st) {
        undo_map(a, va, done);
        o->va_free(a->be.ctx, va, (uint64_t)n * g);
        return st;
    }
    *va_out = va;
    return MS_OK;
}

/* Records a new sBlock over the candidates (whole pBlocks by now) and hands it out. On a
 * host out-of-memory the VA range is released again. */
static ms_status stitch_commit(alloc_t *a, uint32_t pool, const uint32_t *cand, size_t nc,
                               uint32_t n, uint64_t va, uint64_t req, uint64_t *addr)
{
    st_t *s = a->impl;
    uint64_t g = s->gran;
    uint32_t id;
    uint64_t *ref = malloc((size_t)n * sizeof *ref);
    if (!ref || slot_new((void **)&s->sb, &s->nsb, &s->capsb, sizeof *s->sb, &s->free_sb,
                         &s->nfree_sb, &id)) {
        free(ref);
        undo_map(a, va, n);
        a->be.ops->va_free(a->be.ctx, va, (uint64_t)n * g);
        return MS_ERR_NOMEM;
    }
    sblock *x = &s->sb[id];
    x->va = va;
    x->n = n;
    x->pool = pool;
    x->live = x->active = 1;
    x->ref = ref;
    x->aprev = x->anext = x->lprev = x->lnext = NONE;
    x->req_bytes = req;
    uint32_t k = 0;
    for (size_t i = 0; i < nc; i++) {
        const pblock *b = &s->pb[cand[i]];
        for (uint32_t j = 0; j < b->n; j++) {
            ref[k++] = (uint64_t)b->seg << 32 | (b->first + j);
            chunk *c = &s->seg[b->seg].c[b->first + j];
            if (ms_grow((void **)&c->sb, &c->capsb, c->nsb + 1, sizeof *c->sb))
                return MS_ERR_NOMEM;
            if (c->nsb == 0) a->stats.mapped_twice_bytes += g;
            c->sb[c->nsb++] = id;
        }
    }
    s->stitched_bytes += (uint64_t)n * g;
    a->stats.num_stitches++;
    ms_status st = MS_OK;
    for (size_t i = 0; i < nc && !st; i++) st = pb_take(a, cand[i], PB_STITCHED, id);
    if (!st && u64map_put(s->live, va, (uint64_t)K_SBLOCK << 32 | id)) st = MS_ERR_NOMEM;
    if (st) return st;
    alloc_stat_add(&a->stats.allocated_bytes, &a->stats.allocated_peak_bytes, (uint64_t)n * g);
    alloc_stat_add(&a->stats.active_bytes, &a->stats.active_peak_bytes, (uint64_t)n * g);
    alloc_stat_add(&a->stats.requested_bytes, &a->stats.requested_peak_bytes, req);
    *addr = va;
    stitch_limit(a, &st);
    return st;
}

/* Exact match on an sBlock: its chunks become busy again. With coalescing the free pBlocks
 * may have grown past the sBlock's runs; they are cut back to the runs first. */
static ms_status sb_activate(alloc_t *a, uint32_t id, uint64_t req, uint64_t *addr)
{
    st_t *s = a->impl;
    sblock *x = &s->sb[id];
    x->active = 1;
    x->req_bytes = req;
    avail_remove(s, id);
    lru_remove(s, id);
    ms_status st = MS_OK;
    for (uint32_t i = 0; i < x->n && !st;) {
        uint32_t idx = (uint32_t)x->ref[i];
        uint32_t pbid = ref_chunk(s, x->ref[i])->pb;
        const pblock *b = &s->pb[pbid];
        uint32_t len = 1;
        while (i + len < x->n && x->ref[i + len] == x->ref[i] + len && idx + len < b->first + b->n)
            len++;
        if (b->first < idx) st = pb_split(a, pbid, idx - b->first, &pbid);
        if (!st && s->pb[pbid].n > len) st = pb_split(a, pbid, len, NULL);
        if (!st) st = pb_take(a, pbid, PB_STITCHED, id);
        i += len;
    }
    if (!st && u64map_put(s->live, x->va, (uint64_t)K_SBLOCK << 32 | id)) st = MS_ERR_NOMEM;
    if (st) return st;
    uint64_t bytes = (uint64_t)x->n * s->gran;
    alloc_stat_add(&a->stats.allocated_bytes, &a->stats.allocated_peak_bytes, bytes);
    alloc_stat_add(&a->stats.active_bytes, &a->stats.active_peak_bytes, bytes);
    alloc_stat_add(&a->stats.requested_bytes, &a->stats.requested_peak_bytes, req);
    *addr = x->va;
    return MS_OK;
}

/* Update on free of an sBlock: its pBlocks become free; it waits in the sPool and LRU. */
static ms_status sb_deactivate(alloc_t *a, uint32_t id)
{
    st_t *s = a->impl;
    sblock *x = &s->sb[id];
    uint64_t bytes = (uint64_t)x->n * s->gran;
    alloc_stat_sub(&a->stats.allocated_bytes, bytes);
    alloc_stat_sub(&a->stats.active_bytes, bytes);
    alloc_stat_sub(&a->stats.requested_bytes, x->req_bytes);
    x->req_bytes = 0;
    x->active = 0;
    lru_append(s, id);
    ms_status st = MS_OK;
    for (uint32_t i = 0; i < s->sb[id].n && !st;) {
        uint32_t pbid = ref_chunk(s, s->sb[id].ref[i])->pb;
        i += s->pb[pbid].n;     /* the pBlock is exactly one run of this sBlock */
        st = pb_give_back(a, pbid);
    }
    return st;
}

/* Hands a FREE pBlock to a tensor. */
static ms_status pb_give(alloc_t *a, uint32_t id, uint64_t req, uint64_t *addr)
{
    st_t *s = a->impl;
    ms_status st = pb_take(a, id, PB_ALLOC, NONE);
    if (st) return st;
    pblock *b = &s->pb[id];
    b->req_bytes = req;
    *addr = pb_addr(s, b);
    if (u64map_put(s->live, *addr, (uint64_t)K_PBLOCK << 32 | id)) return MS_ERR_NOMEM;
    uint64_t bytes = (uint64_t)b->n * s->gran;
    alloc_stat_add(&a->stats.allocated_bytes, &a->stats.allocated_peak_bytes, bytes);
    alloc_stat_add(&a->stats.active_bytes, &a->stats.active_peak_bytes, bytes);
    alloc_stat_add(&a->stats.requested_bytes, &a->stats.requested_peak_bytes, req);
    return MS_OK;
}

/* ---- segment release (empty_cache, OOM retry, destroy) ---- */

/* Releases a segment: first the sBlocks that map any of its chunks, then the chunks and
 * the VA. Without force every pBlock must be FREE (the caller checked nfree == n). */
static ms_status seg_release(alloc_t *a, uint32_t sid, int force)
{
    st_t *s = a->impl;
    ms_status err = MS_OK, st;
    for (uint32_t i = 0; i < s->seg[sid].n; i++)
        while (s->seg[sid].c[i].nsb)
            if ((st = sb_release(a, s->seg[sid].c[i].sb[0])) && !err) err = st;
    segment *g = &s->seg[sid];
    for (uint32_t id = g->c[0].pb; id != NONE;) {
        uint32_t nx = s->pb[id].snext;
        if (s->pb[id].state == PB_FREE) pp_remove(s, id);
        else if (!force) err = MS_ERR_INVALID;
        if ((st = pb_drop(s, id)) && !err) err = st;
        id = nx;
    }
    const mb_ops *o = a->be.ops;
    if ((st = undo_map(a, g->va, g->n)) && !err) err = st;
    for (uint32_t i = 0; i < g->n; i++) {
        if ((st = o->phys_release(a->be.ctx, g->c[i].handle)) && !err) err = st;
        free(g->c[i].sb);
    }
    uint64_t bytes = (uint64_t)g->n * s->gran;
    if ((st = o->va_free(a->be.ctx, g->va, bytes)) && !err) err = st;
    free(g->c);
    g->c = NULL;
    g->live = 0;
    if (!force) {
        alloc_stat_sub(&a->stats.reserved_bytes, bytes);
        a->stats.num_segment_frees++;
    }
    if ((st = slot_release(&s->free_seg, &s->nfree_seg, &s->capfree_seg, sid)) && !err)
        err = st;
    return err;
}

/* PyTorch's release_cached_blocks for this allocator: wholly free segments go back to the
 * device (with the sBlocks on them), the inner allocator empties its cache; with
 * all_sblocks every inactive sBlock is dropped too (glake's emptyCache). */
static ms_status release_cached(alloc_t *a, int all_sblocks)
{
    st_t *s = a->impl;
    ms_status err = MS_OK, st;
    if (all_sblocks) stitch_free(a, UINT64_MAX, &err);
    for (size_t i = 0; i < s->nseg; i++)
        if (s->seg[i].live && s->seg[i].nfree == s->seg[i].n &&
            (st = seg_release(a, (uint32_t)i, 0)) && !err)
            err = st;
    if (s->inner) {
        alloc_stats before = s->inner->stats;
        if ((st = alloc_empty_cache(s->inner)) && !err) err = st;
        alloc_stats_absorb(&a->stats, &before, &s->inner->stats);
    }
    return err;
}

/* ---- BestFit ---- */

static uint32_t limit_chunks(const alloc_t *a)
{
    const st_t *s = a->impl;
    uint64_t f = a->cfg.frag_limit_bytes;
    uint64_t l = f / s->gran + (f % s->gran != 0);
    if (l < 1) l = 1;
    return l > s->nb ? s->nb : (uint32_t)l;
}

/* glake's garbage collection of fused blocks on a failed VMM call: try t releases LRU
 * sBlocks worth 4x, then 16x the request, then all. Returns whether any was released. */
static int gc_fused(alloc_t *a, int t, uint64_t req_bytes)
{
    ms_status err = MS_OK;
    uint64_t goal = t == 0 ? 4 * req_bytes : t == 1 ? 16 * req_bytes : UINT64_MAX;
    return stitch_free(a, goal, &err) > 0;
}

static ms_status stitch_map_gc(alloc_t *a, const uint32_t *cand, size_t nc, uint32_t last_use,
                               uint32_t n, uint64_t *va)
{
    ms_status st;
    for (int t = 0;; t++) {
        st = stitch_map(a, cand, nc, last_use, n, va);
        if (st != MS_ERR_OOM || t == 3 || !gc_fused(a, t, (uint64_t)n * ((st_t *)a->impl)->gran))
            return st;
    }
}

/* Alloc with glake's retry: fused blocks are collected only when the device still has room
 * for the request (the failure was not a plain lack of memory). */
static ms_status seg_alloc_gc(alloc_t *a, uint32_t pool, uint32_t k, uint32_t *pbid)
{
    st_t *s = a->impl;
    uint64_t bytes = (uint64_t)k * s->gran;
    ms_status st;
    for (int t = 0;; t++) {
        st = seg_alloc(a, pool, k, pbid);
        if (st != MS_ERR_OOM || t == 3) return st;
        uint64_t used = a->stats.reserved_bytes;
        if (used > a->be.capacity_bytes || a->be.capacity_bytes - used < bytes) return st;
        if (!gc_fused(a, t, bytes)) return st;
    }
}

/* The paper's Algorithm 1 plus the post-processing of Fig. 9 for one request of n chunks. */
static ms_status serve(alloc_t *a, uint32_t pool, uint32_t n, uint64_t req, uint64_t *addr)
{
    st_t *s = a->impl;
    spool *p = &s->pools[pool];
    uint64_t g = s->gran, h;
    uint32_t lim = limit_chunks(a);
    ms_status st;
    /* S1: exact match, a pBlock first (no extra mapping), then an sBlock */
    if (p->head[n] != NONE) {
        s->state_count[S_EXACT]++;
        return pb_give(a, p->head[n], req, addr);
    }
    if (u64map_get(p->avail, n, &h)) {
        s->state_count[S_EXACT]++;
        return sb_activate(a, (uint32_t)h, req, addr);
    }
    /* S2: the smallest larger pBlock that may be split */
    uint32_t lo = n + 1;
    if (s->k.frag_rule == ALLOC_STITCH_FRAG_BLOCKS && lo < lim) lo = lim;
    uint32_t b = bs_next(p, lo);
    if (b != NONE) {
        uint32_t id = p->head[b];
        s->state_count[S_SINGLE]++;
        if ((st = pb_split(a, id, n, NULL))) return st;
        return pb_give(a, id, req, addr);
    }
    /* S3/S4: candidates for stitching, largest first */
    int may_stitch = s->k.frag_rule == ALLOC_STITCH_FRAG_BLOCKS ||
                     (uint64_t)n * g >= a->cfg.frag_limit_bytes;
    uint32_t floor = s->k.frag_rule == ALLOC_STITCH_FRAG_BLOCKS ? lim : 1;
    size_t nc = 0;
    uint64_t sum = 0;
    for (uint32_t bk = may_stitch ? bs_prev(p, p->nb - 1) : NONE;
         bk != NONE && bk >= floor && sum < n; bk = bs_prev(p, bk - 1)) {
        for (uint32_t id = p->head[bk]; id != NONE && sum < n; id = s->pb[id].qnext) {
            if (ms_grow((void **)&s->cand, &s->capcand, nc + 2, sizeof *s->cand))
                return MS_ERR_NOMEM;
            s->cand[nc++] = id;
            sum += bk;
        }
    }
    uint64_t va;
    if (sum >= n) {                                   /* S3: multiple blocks */
        uint32_t last = s->cand[nc - 1];
        uint32_t last_use = s->pb[last].n - (uint32_t)(sum - n);
        s->state_count[S_MULTI]++;
        if ((st = stitch_map_gc(a, s->cand, nc, last_use, n, &va))) return st;
        if (last_use < s->pb[last].n && (st = pb_split(a, last, last_use, NULL))) return st;
        return stitch_commit(a, pool, s->cand, nc, n, va, req, addr);
    }
    s->state_count[S_INSUFF]++;                       /* S4: insufficient blocks */
    uint32_t id;
    if (s->k.s4_shortfall && may_stitch && nc > 0) {
        if ((st = seg_alloc_gc(a, pool, n - (uint32_t)sum, &id))) return st;
        uint32_t sid = s->pb[id].seg;
        s->cand[nc++] = id;
        if ((st = stitch_map_gc(a, s->cand, nc, s->pb[id].n, n, &va))) {
            ms_status r = seg_release(a, sid, 0);
            return r ? r : st;
        }
        return stitch_commit(a, pool, s->cand, nc, n, va, req, addr);
    }
    uint32_t k = n;
    if (s->k.pytorch_sizes && req < ALLOC_CACHING_MIN_LARGE_ALLOC_BYTES) {
        uint64_t kb = ALLOC_CACHING_LARGE_BUFFER_BYTES / g + (ALLOC_CACHING_LARGE_BUFFER_BYTES % g != 0);
        if (kb > k && kb < s->nb) k = (uint32_t)kb;
    }
    if ((st = seg_alloc_gc(a, pool, k, &id))) return st;
    if (k > n && (st = pb_split(a, id, n, NULL))) return st;
    return pb_give(a, id, req, addr);
}

/* ---- vtable: block / release / empty_cache ---- */

/* cuMemUnmap waits for the GPU (the backend charges it as a synchronization): a call that
 * unmapped anything caused one, unless an explicit synchronize in the same call (the inner
 * allocator's release) already did. */
static void count_unmap_sync(alloc_t *a, uint64_t unmaps_before, uint64_t syncs_before)
{
    if (a->stats.num_unmaps != unmaps_before && a->stats.num_syncs == syncs_before)
        a->stats.num_syncs++;
}

static ms_status small_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag,
                             uint64_t *addr)
{
    st_t *s = a->impl;
    alloc_stats before = s->inner->stats;
    ms_status st = alloc_block(s->inner, bytes, stream, tag, addr);
    alloc_stats_absorb(&a->stats, &before, &s->inner->stats);
    if (st == MS_ERR_OOM) {   /* the VMM side may hold free segments the small pool needs */
        ms_status r = release_cached(a, 0);
        if (r) return r;
        before = s->inner->stats;
        st = alloc_block(s->inner, bytes, stream, tag, addr);
        alloc_stats_absorb(&a->stats, &before, &s->inner->stats);
    }
    if (st) return st;
    if (u64map_get(s->live, *addr, NULL) ||
        u64map_put(s->live, *addr, (uint64_t)K_SMALL << 32))
        return MS_ERR_INVALID; /* an address handed out twice: never in a correct run */
    s->n_small_live++;
    return MS_OK;
}

static ms_status st_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr)
{
    st_t *s = a->impl;
    uint64_t g = s->gran, unmaps = a->stats.num_unmaps, syncs = a->stats.num_syncs;
    ms_status st;
    *addr = 0;
    if (bytes == 0) return MS_OK;   /* as the caching allocator (PyTorch): null, no block */
    if (bytes > a->be.capacity_bytes) {
        s->state_count[S_OOM]++;
        return MS_ERR_OOM;   /* can never fit: fail without touching the pools */
    }
    if (s->inner && bytes <= ALLOC_CACHING_SMALL_SIZE_BYTES) {
        st = small_block(a, bytes, stream, tag, addr);
    } else {
        uint32_t pool, n = (uint32_t)(bytes / g + (bytes % g != 0));
        if (!pool_get(s, stream, &pool)) return MS_ERR_NOMEM;
        st = serve(a, pool, n, bytes, addr);
        if (st == MS_ERR_OOM) {  /* release cached memory and retry, as PyTorch does */
            ms_status r = release_cached(a, 0);
            a->stats.num_alloc_retries++;
            st = r ? r : serve(a, pool, n, bytes, addr);
        }
        if (st == MS_ERR_OOM) s->state_count[S_OOM]++;
    }
    count_unmap_sync(a, unmaps, syncs);
    return st;
}

static ms_status st_release(alloc_t *a, uint64_t addr)
{
    st_t *s = a->impl;
    uint64_t code;
    if (addr == 0) return MS_OK;    /* free(nullptr), the zero-byte block */
    if (!u64map_get(s->live, addr, &code)) return MS_ERR_INVALID;
    uint32_t id = (uint32_t)code;
    switch (code >> 32) {
    case K_SMALL: {
        alloc_stats before = s->inner->stats;
        ms_status st = alloc_release(s->inner, addr);
        alloc_stats_absorb(&a->stats, &before, &s->inner->stats);
        if (st) return st;
        u64map_del(s->live, addr, NULL);
        s->n_small_live--;
        return MS_OK;
    }
    case K_PBLOCK: {
        pblock *b = &s->pb[id];
        uint64_t bytes = (uint64_t)b->n * s->gran;
        alloc_stat_sub(&a->stats.allocated_bytes, bytes);
        alloc_stat_sub(&a->stats.active_bytes, bytes);
        alloc_stat_sub(&a->stats.requested_bytes, b->req_bytes);
        u64map_del(s->live, addr, NULL);
        return pb_give_back(a, id);
    }
    default:
        u64map_del(s->live, addr, NULL);
        return sb_deactivate(a, id);
    }
}

static ms_status st_empty_cache(alloc_t *a)
{
    uint64_t unmaps = a->stats.num_unmaps, syncs = a->stats.num_syncs;
    ms_status st = release_cached(a, 1);
    count_unmap_sync(a, unmaps, syncs);
    return st;
}

/* ---- check ---- */


typedef struct vrange { uint64_t va, bytes; } vrange;

static int cmp_vrange(const void *x, const void *y)
{
    const vrange *p = x, *q = y;
    return p->va < q->va ? -1 : p->va > q->va;
}

typedef struct recount {
    uint64_t reserved, allocated, requested, split, twice, stitched;
    size_t n_alloc, n_free, n_active, n_avail, n_inactive, n_pb;
} recount;

/* Segments tile into pBlocks; chunk -> pBlock links; free counts; live entries. */
static ms_status check_segments(const alloc_t *a, recount *r, char *why, size_t wn)
{
    const st_t *s = a->impl;
    for (size_t sid = 0; sid < s->nseg; sid++) {
        const segment *g = &s->seg[sid];
        if (!g->live) continue;
        if (g->n == 0 || g->pool >= s->npools) return alloc_check_fail(why, wn, "segment %zu malformed", sid);
        uint32_t pos = 0, nfree = 0, prev = NONE;
        for (uint32_t id = g->c[0].pb; id != NONE; id = s->pb[id].snext) {
            const pblock *b = &s->pb[id];
            if (id >= s->npb || !b->live || b->seg != sid || b->first != pos || b->n == 0 ||
                b->sprev != prev || pos + b->n > g->n)
                return alloc_check_fail(why, wn, "segment %zu: pBlock chain broken at chunk %u", sid, pos);
            for (uint32_t i = b->first; i < b->first + b->n; i++)
                if (g->c[i].pb != id)
                    return alloc_check_fail(why, wn, "segment %zu chunk %u not linked to its pBlock", sid, i);
            if (b->state == PB_FREE) {
                nfree += b->n;
                r->n_free++;
                if (s->k.coalesce && prev != NONE && s->pb[prev].state == PB_FREE)
                    return alloc_check_fail(why, wn, "segment %zu: adjacent free pBlocks not coalesced", sid);
            } else if (b->state == PB_ALLOC) {
                uint64_t code;
                if (!u64map_get(s->live, pb_addr(s, b), &code) ||
                    code != ((uint64_t)K_PBLOCK << 32 | id))
                    return alloc_check_fail(why, wn, "allocated pBlock %u missing from the live map", id);
                r->allocated += (uint64_t)b->n * s->gran;
                r->requested += b->req_bytes;
                r->n_alloc++;
            } else if (b->state == PB_STITCHED) {
                if (b->owner >= s->nsb || !s->sb[b->owner].live || !s->sb[b->owner].active)
                    return alloc_check_fail(why, wn, "stitched pBlock %u has no active owner", id);
            } else {
                return alloc_check_fail(why, wn, "pBlock %u in unknown state %d", id, b->state);
            }
            r->n_pb++;
            pos += b->n;
            prev = id;
        }
        if (pos != g->n) return alloc_check_fail(why, wn, "segment %zu: pBlocks cover %u of %u chunks", sid, pos, g->n);
        if (nfree != g->nfree) return alloc_check_fail(why, wn, "segment %zu: free chunks %u, recount %u", sid, g->nfree, nfree);
        r->reserved += (uint64_t)g->n * s->gran;
        r->split += seg_split_bytes(s, g);
        /* the chunks' sBlock lists are checked against the sBlocks in check_sblocks */
        for (uint32_t i = 0; i < g->n; i++) r->twice += g->c[i].nsb ? s->gran : 0;
    }
    return MS_OK;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* No chunk owned by two live tensors; sBlock counters and lists; chunk back-links (per
 * chunk, a hash-sum of the sBlocks that map it must equal that of the sBlocks it lists). */
static ms_status check_sblocks(const alloc_t *a, recount *r, char *why, size_t wn)
{
    const st_t *s = a->impl;
    size_t *off = calloc(s->nseg + 1, sizeof *off);
    if (!off) return MS_ERR_NOMEM;
    for (size_t i = 0; i < s->nseg; i++) off[i + 1] = off[i] + (s->seg[i].live ? s->seg[i].n : 0);
    size_t nch = off[s->nseg];
    /* compact per-chunk copies (state, stitching owner) so the walk over the sBlocks' many
     * references stays in cache */
    uint8_t *own = calloc(nch + 1, 1), *state = calloc(nch + 1, 1);
    uint32_t *owner = calloc(nch + 1, sizeof *owner);
    uint64_t *hs = calloc(nch + 1, sizeof *hs);
    if (!own || !state || !owner || !hs) {
        free(own);
        free(state);
        free(owner);
        free(hs);
        free(off);
        return MS_ERR_NOMEM;
    }
    ms_status st = MS_OK;
    for (size_t i = 0; i < s->npb; i++) {
        const pblock *b = &s->pb[i];
        if (!b->live) continue;
        for (uint32_t j = 0; j < b->n; j++) {
            size_t k = off[b->seg] + b->first + j;
            state[k] = (uint8_t)b->state;
            owner[k] = b->owner;
            own[k] += b->state == PB_ALLOC;
        }
    }
    for (size_t id = 0; id < s->nsb && !st; id++) {
        const sblock *x = &s->sb[id];
        if (!x->live) continue;
        uint32_t busy = 0;
        uint64_t h = mix64(id + 1);
        for (uint32_t i = 0; i < x->n; i++) {
            uint32_t sg = (uint32_t)(x->ref[i] >> 32), ci = (uint32_t)x->ref[i];
            if (sg >= s->nseg || !s->seg[sg].live || ci >= s->seg[sg].n) {
                st = alloc_check_fail(why, wn, "sBlock %zu maps a chunk of a dead segment", id);
                break;
            }
            size_t k = off[sg] + ci;
            hs[k] += h;
            busy += state[k] != PB_FREE;
            if (x->active) {
                if (++own[k] > 1) {
                    st = alloc_check_fail(why, wn, "a chunk is owned by two live tensors (sBlock %zu)", id);
                    break;
                }
                if (state[k] != PB_STITCHED || owner[k] != id) {
                    st = alloc_check_fail(why, wn, "active sBlock %zu maps a chunk it does not own", id);
                    break;
                }
            }
        }
        if (st) break;
        if (busy != x->nbusy) st = alloc_check_fail(why, wn, "sBlock %zu busy %u, recount %u", id, x->nbusy, busy);
        else if (x->active && (x->in_avail || x->in_lru))
            st = alloc_check_fail(why, wn, "active sBlock %zu is in the sPool or LRU", id);
        else if (!x->active && !x->in_lru) st = alloc_check_fail(why, wn, "inactive sBlock %zu not in the LRU", id);
        else if (x->in_avail != (!x->active && busy == 0))
            st = alloc_check_fail(why, wn, "sBlock %zu availability wrong", id);
        if (st) break;
        if (x->active) {
            uint64_t code;
            if (!u64map_get(s->live, x->va, &code) || code != ((uint64_t)K_SBLOCK << 32 | id))
                st = alloc_check_fail(why, wn, "active sBlock %zu missing from the live map", id);
            r->allocated += (uint64_t)x->n * s->gran;
            r->requested += x->req_bytes;
            r->n_active++;
        } else {
            r->n_inactive++;
        }
        r->n_avail += x->in_avail;
        r->stitched += (uint64_t)x->n * s->gran;
    }
    /* a busy chunk is owned exactly once, a free chunk not at all; back-links match */
    for (size_t sid = 0; sid < s->nseg && !st; sid++) {
        const segment *g = &s->seg[sid];
        if (!g->live) continue;
        for (uint32_t i = 0; i < g->n && !st; i++) {
            const chunk *c = &g->c[i];
            if ((state[off[sid] + i] != PB_FREE) != (own[off[sid] + i] == 1))
                st = alloc_check_fail(why, wn, "segment %zu chunk %u: busy state and owners disagree", sid, i);
            uint64_t h = 0;
            for (uint32_t j = 0; j < c->nsb; j++) h += mix64((uint64_t)c->sb[j] + 1);
            if (!st && h != hs[off[sid] + i])
                st = alloc_check_fail(why, wn, "segment %zu chunk %u: its sBlock list disagrees with the sBlocks", sid, i);
        }
    }
    free(hs);
    free(own);
    free(state);
    free(owner);
    free(off);
    return st;
}

/* Pools sorted: buckets by size, address order inside; bitmaps; sPool lists; LRU. */
static ms_status check_pools(const alloc_t *a, const recount *r, char *why, size_t wn)
{
    const st_t *s = a->impl;
    size_t listed = 0, avail = 0, lru = 0;
    for (size_t pi = 0; pi < s->npools; pi++) {
        const spool *p = &s->pools[pi];
        /* walk the non-empty buckets by the bitmap; a listed block missing from the walk
         * (a head without its bit) shows up in the count below */
        for (uint32_t bk = bs_next(p, 0); bk != NONE; bk = bs_next(p, bk + 1)) {
            if (p->head[bk] == NONE) return alloc_check_fail(why, wn, "pool %zu bucket %u bit set but empty", pi, bk);
            uint64_t last = 0;
            uint32_t prev = NONE;
            for (uint32_t id = p->head[bk]; id != NONE; id = s->pb[id].qnext) {
                const pblock *b = &s->pb[id];
                if (!b->live || b->state != PB_FREE || b->n != bk || s->seg[b->seg].pool != pi ||
                    b->qprev != prev || (prev != NONE && pb_addr(s, b) <= last))
                    return alloc_check_fail(why, wn, "pPool %zu bucket %u unsorted or holds a bad pBlock", pi, bk);
                last = pb_addr(s, b);
                prev = id;
                listed++;
            }
        }
        for (size_t w = 0; w < p->n0; w++)
            if (((p->w1[w >> 6] >> (w & 63)) & 1) != (p->w0[w] != 0))
                return alloc_check_fail(why, wn, "pool %zu summary bitmap wrong", pi);
        uint64_t key, val;
        for (size_t it = 0; u64map_next(p->avail, &it, &key, &val);) {
            uint32_t prev = NONE;
            for (uint32_t id = (uint32_t)val; id != NONE; id = s->sb[id].anext) {
                const sblock *x = &s->sb[id];
                if (!x->live || !x->in_avail || x->n != key || x->pool != pi || x->aprev != prev)
                    return alloc_check_fail(why, wn, "sPool %zu list of %llu chunks holds a bad sBlock", pi,
                               (unsigned long long)key);
                prev = id;
                avail++;
            }
        }
    }
    if (listed != r->n_free) return alloc_check_fail(why, wn, "pPool lists %zu of %zu free pBlocks", listed, r->n_free);
    if (avail != r->n_avail) return alloc_check_fail(why, wn, "sPool lists %zu of %zu available sBlocks", avail, r->n_avail);
    uint32_t prev = NONE;
    for (uint32_t id = s->lru_head; id != NONE; id = s->sb[id].lnext) {
        if (!s->sb[id].live || s->sb[id].active || s->sb[id].lprev != prev || lru > s->nsb)
            return alloc_check_fail(why, wn, "LRU list broken at sBlock %u", id);
        prev = id;
        lru++;
    }
    if (prev != s->lru_tail || lru != r->n_inactive)
        return alloc_check_fail(why, wn, "LRU holds %zu of %zu inactive sBlocks", lru, r->n_inactive);
    return MS_OK;
}

/* Distinct VA reservations never overlap (segments and sBlocks). */
static ms_status check_ranges(const alloc_t *a, char *why, size_t wn)
{
    const st_t *s = a->impl;
    vrange *v = malloc((s->nseg + s->nsb + 1) * sizeof *v);
    if (!v) return MS_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < s->nseg; i++)
        if (s->seg[i].live) v[k++] = (vrange){s->seg[i].va, (uint64_t)s->seg[i].n * s->gran};
    for (size_t i = 0; i < s->nsb; i++)
        if (s->sb[i].live) v[k++] = (vrange){s->sb[i].va, (uint64_t)s->sb[i].n * s->gran};
    qsort(v, k, sizeof *v, cmp_vrange);
    ms_status st = MS_OK;
    for (size_t i = 1; i < k && !st; i++)
        if (v[i - 1].va + v[i - 1].bytes > v[i].va)
            st = alloc_check_fail(why, wn, "VA ranges overlap at 0x%llx", (unsigned long long)v[i].va);
    free(v);
    return st;
}

static ms_status st_check(const alloc_t *a, char *why, size_t wn)
{
    const st_t *s = a->impl;
    recount r;
    memset(&r, 0, sizeof r);
    ms_status st = check_segments(a, &r, why, wn);
    if (!st) st = check_sblocks(a, &r, why, wn);
    if (!st) st = check_pools(a, &r, why, wn);
    if (!st) st = check_ranges(a, why, wn);
    if (st) return st;
    size_t npb = 0;
    for (size_t i = 0; i < s->npb; i++) npb += s->pb[i].live;
    if (npb != r.n_pb) return alloc_check_fail(why, wn, "%zu live pBlocks, %zu in segments", npb, r.n_pb);
    if (u64map_count(s->live) != r.n_alloc + r.n_active + s->n_small_live)
        return alloc_check_fail(why, wn, "live map holds %zu entries, recount %zu", u64map_count(s->live),
                   (size_t)(r.n_alloc + r.n_active + s->n_small_live));
    if (r.stitched != s->stitched_bytes) return alloc_check_fail(why, wn, "stitched bytes disagree with a recount");
    alloc_stats in;
    memset(&in, 0, sizeof in);
    if (s->inner) {
        in = s->inner->stats;
        if ((st = s->inner->vt->check(s->inner, why, wn))) return st;
    }
    const alloc_stats *t = &a->stats;
    if (t->reserved_bytes != r.reserved + in.reserved_bytes)
        return alloc_check_fail(why, wn, "reserved %llu, recount %llu", (unsigned long long)t->reserved_bytes,
                   (unsigned long long)(r.reserved + in.reserved_bytes));
    if (t->allocated_bytes != r.allocated + in.allocated_bytes ||
        t->active_bytes != r.allocated + in.active_bytes)
        return alloc_check_fail(why, wn, "allocated/active %llu/%llu, recount %llu",
                   (unsigned long long)t->allocated_bytes, (unsigned long long)t->active_bytes,
                   (unsigned long long)(r.allocated + in.allocated_bytes));
    if (t->requested_bytes != r.requested + in.requested_bytes)
        return alloc_check_fail(why, wn, "requested bytes disagree with a recount");
    if (t->inactive_split_bytes != r.split + in.inactive_split_bytes)
        return alloc_check_fail(why, wn, "inactive_split bytes disagree with a recount");
    if (t->mapped_twice_bytes != r.twice) return alloc_check_fail(why, wn, "mapped_twice bytes disagree with a recount");
    if (t->reserved_peak_bytes < t->reserved_bytes || t->allocated_peak_bytes < t->allocated_bytes ||
        t->active_peak_bytes < t->active_bytes)
        return alloc_check_fail(why, wn, "a peak is below its current value");
    return MS_OK;
}

/* ---- dump ---- */

static const char *pb_state_name(int st)
{
    return st == PB_FREE ? "free" : st == PB_ALLOC ? "alloc" : "stitched";
}

static void st_dump(const alloc_t *a, FILE *f)
{
    const st_t *s = a->impl;
    const alloc_stats *t = &a->stats;
    fprintf(f, "stitching: reserved %llu allocated %llu stitched %llu splits %llu stitches %llu "
            "new_chunks %llu stitch_frees %llu states %llu/%llu/%llu/%llu/%llu\n",
            (unsigned long long)t->reserved_bytes, (unsigned long long)t->allocated_bytes,
            (unsigned long long)s->stitched_bytes, (unsigned long long)t->num_splits,
            (unsigned long long)t->num_stitches, (unsigned long long)t->num_new_chunks,
            (unsigned long long)t->num_stitch_frees, (unsigned long long)s->state_count[1],
            (unsigned long long)s->state_count[2], (unsigned long long)s->state_count[3],
            (unsigned long long)s->state_count[4], (unsigned long long)s->state_count[5]);
    for (size_t sid = 0; sid < s->nseg; sid++) {
        const segment *g = &s->seg[sid];
        if (!g->live) continue;
        fprintf(f, "  segment %zu stream %d va 0x%llx chunks %u free %u:", sid,
                s->pools[g->pool].stream, (unsigned long long)g->va, g->n, g->nfree);
        for (uint32_t id = g->c[0].pb; id != NONE; id = s->pb[id].snext)
            fprintf(f, " [%u %s %u]", id, pb_state_name(s->pb[id].state), s->pb[id].n);
        fputc('\n', f);
    }
    for (size_t id = 0; id < s->nsb; id++) {
        const sblock *x = &s->sb[id];
        if (x->live)
            fprintf(f, "  sBlock %zu va 0x%llx chunks %u %s busy %u\n", id,
                    (unsigned long long)x->va, x->n, x->active ? "active" : "inactive", x->nbusy);
    }
    if (s->inner) {
        fprintf(f, "  small requests (internal allocator):\n");
        alloc_dump(s->inner, f);
    }
}

/* ---- create / destroy / knobs ---- */

void alloc_stitch_knobs_default(alloc_stitch_knobs *k)
{
    /* glake's reading of the fragmentation limit and glake's coalescing (the paper's literal
     * readings are knobs; docs/ALLOCATORS.md has the measurements behind this choice) */
    k->frag_rule = ALLOC_STITCH_FRAG_REQUEST;
    k->coalesce = 1;
    k->s4_shortfall = 1;
    k->pytorch_sizes = 0;
    k->small_via_caching = 1;
}

void alloc_stitch_knobs_glake(alloc_stitch_knobs *k)
{
    k->frag_rule = ALLOC_STITCH_FRAG_REQUEST;
    k->coalesce = 1;
    k->s4_shortfall = 0;
    k->pytorch_sizes = 1;
    k->small_via_caching = 1;
}

ms_status alloc_stitch_knobs_parse(alloc_stitch_knobs *k, const char *key, const char *value)
{
    if (strcmp(key, "frag_rule") == 0) {
        if (strcmp(value, "blocks") == 0) k->frag_rule = ALLOC_STITCH_FRAG_BLOCKS;
        else if (strcmp(value, "request") == 0) k->frag_rule = ALLOC_STITCH_FRAG_REQUEST;
        else return MS_ERR_PARSE;
        return MS_OK;
    }
    int *dst = strcmp(key, "coalesce") == 0            ? &k->coalesce
               : strcmp(key, "s4_shortfall") == 0      ? &k->s4_shortfall
               : strcmp(key, "pytorch_sizes") == 0     ? &k->pytorch_sizes
               : strcmp(key, "small_via_caching") == 0 ? &k->small_via_caching
                                                       : NULL;
    if (!dst) return MS_ERR_NOTFOUND;
    if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0) return MS_ERR_PARSE;
    *dst = value[0] == '1';
    return MS_OK;
}

static ms_status inner_new(alloc_t *a)
{
    st_t *s = a->impl;
    alloc_config c = a->cfg;
    c.check_every_op = 0;   /* our check() runs the inner check */
    c.static_ids = c.static_offsets = NULL;
    c.static_n = 0;
    return alloc_new("caching", &c, &a->be, &s->inner, NULL);
}

static ms_status st_create(alloc_t *a)
{
    st_t *s = calloc(1, sizeof *s);
    if (!s) return MS_ERR_NOMEM;
    a->impl = s;
    alloc_stitch_knobs_default(&s->k);
    s->gran = a->be.granularity_bytes ? a->be.granularity_bytes : 2ULL << 20;
    uint64_t nb = a->be.capacity_bytes / s->gran + 3;
    if (nb >= NONE / 2) {
        free(s);
        return MS_ERR_INVALID;
    }
    s->nb = (uint32_t)nb;
    s->lru_head = s->lru_tail = NONE;
    s->live = u64map_new(1024);
    ms_status st = s->live ? inner_new(a) : MS_ERR_NOMEM;
    if (st) {
        u64map_free(s->live);
        free(s);
        a->impl = NULL;
    }
    return st;
}

static void st_destroy(alloc_t *a)
{
    st_t *s = a->impl;
    if (!s) return;
    for (size_t i = 0; i < s->nsb; i++)
        if (s->sb[i].live) sb_release(a, (uint32_t)i);
    for (size_t i = 0; i < s->nseg; i++)
        if (s->seg[i].live) seg_release(a, (uint32_t)i, 1);
    alloc_free(s->inner);
    for (size_t i = 0; i < s->npools; i++) {
        free(s->pools[i].head);
        free(s->pools[i].w0);
        free(s->pools[i].w1);
        u64map_free(s->pools[i].avail);
    }
    free(s->pools);
    free(s->seg);
    free(s->pb);
    free(s->sb);
    free(s->free_seg);
    free(s->free_pb);
    free(s->free_sb);
    free(s->cand);
    u64map_free(s->live);
    free(s);
    a->impl = NULL;
}

ms_status alloc_stitch_set_knobs(alloc_t *a, const alloc_stitch_knobs *k)
{
    if (a->vt != &alloc_stitch_vt) return MS_ERR_UNSUPPORTED;
    st_t *s = a->impl;
    if (u64map_count(s->live)) return MS_ERR_INVALID;
    ms_status st = release_cached(a, 1);
    if (st) return st;
    if (s->inner && !k->small_via_caching) {
        alloc_stats zero;
        memset(&zero, 0, sizeof zero);
        alloc_stats_absorb(&a->stats, &s->inner->stats, &zero);
        alloc_free(s->inner);
        s->inner = NULL;
    }
    s->k = *k;
    if (!s->inner && k->small_via_caching) return inner_new(a);
    return MS_OK;
}

uint64_t alloc_stitch_state_count(const alloc_t *a, int state)
{
    if (a->vt != &alloc_stitch_vt || state < 1 || state > 5) return 0;
    return ((const st_t *)a->impl)->state_count[state];
}

size_t alloc_stitch_num_sblocks(const alloc_t *a)
{
    if (a->vt != &alloc_stitch_vt) return 0;
    const st_t *s = a->impl;
    size_t n = 0;
    for (size_t i = 0; i < s->nsb; i++) n += s->sb[i].live;
    return n;
}

uint64_t alloc_stitch_stitched_bytes(const alloc_t *a)
{
    return a->vt == &alloc_stitch_vt ? ((const st_t *)a->impl)->stitched_bytes : 0;
}

const alloc_vtable alloc_stitch_vt = {
    "stitching",
    "GMLake: 2 MiB chunks in pBlocks, free pBlocks stitched into sBlocks by VMM remapping",
    "Guo et al., GMLake, ASPLOS'24, sections 3-4; glake GMLake/src/CUDACachingAllocator.cpp",
    st_create, st_destroy, st_block, st_release, st_empty_cache, st_check, st_dump,
    0, NULL,
    NULL, NULL, /* no handles: released by address */
};

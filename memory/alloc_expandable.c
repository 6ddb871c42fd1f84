/* alloc_expandable.c — PyTorch's expandable segments (see alloc_expandable.h), modelled on
 * c10/cuda/CUDACachingAllocator.cpp: ExpandableSegment (map, unmap, the 1 1/8 x device
 * memory address space) and the expandable paths of DeviceCachingAllocator (malloc,
 * get_free_block with its expandable_size walk, alloc_found_block, find_expandable_block,
 * map_block, try_allocate_expandable_block, free_block, try_merge_blocks, unmap_block,
 * release_blocks, release_expandable_segment). Called through the alloc.h vtable by sim/,
 * runtime/ and the tests.
 *
 * Every block of a segment is a node of one arena array, named by index. A pool (stream,
 * small/large) keeps its free mapped blocks in a treap ordered by (size, address) — PyTorch's
 * BlockComparatorSize — and its unmapped blocks in a treap ordered by address
 * (BlockComparatorAddress); allocated blocks are found by address in a u64map.
 *
 * Deviations (docs/ALLOCATORS.md): no CUDA events or recordStream (active == allocated); no
 * graph pools, IPC or peer access; release_available_cached_blocks is skipped (PyTorch's
 * release_block asserts on expandable blocks, so with expandable segments it only works
 * when max_split_size is unset, where it does nothing); a segment left wholly unmapped by a
 * failed map is released by empty_cache (PyTorch keeps its address space until reuse). */
#include "memory/alloc_expandable.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "memory/alloc_caching.h"
#include "base/u64map.h"

#define NONE UINT32_MAX

typedef struct xblock {
    uint64_t addr, size, req_bytes;
    uint32_t prev, next;      /* address neighbours in the segment */
    uint32_t seg;
    uint32_t left, right, prio;  /* treap */
    uint8_t mapped, allocated, live, in_set;
} xblock;

typedef struct xseg {
    uint64_t va, bytes, page;
    size_t npages, mapped_pages;
    uint64_t *handle;         /* per page, 0 = not mapped; hcap pages long, grown as pages
                                 are mapped (a segment spans the device, few pages map) */
    size_t hcap;
    uint32_t pool, head;
    int live;
} xseg;

typedef struct xpool {
    int stream, small;
    uint32_t blocks;          /* free mapped blocks by (size, address) */
    uint32_t unmapped;        /* unmapped blocks by address */
} xpool;

typedef struct xp_t {
    xblock *b; size_t nb, capb;
    uint32_t *freeb; size_t nfreeb, capfreeb;
    xseg *seg; size_t nseg, capseg;
    xpool *pools; size_t npools, cappools;
    u64map *live;             /* address -> block of allocated blocks */
    u64map *poolidx;          /* (stream, small) -> index in pools */
    uint32_t *tmp; size_t captmp;
    uint32_t prio_seed;
} xp_t;

/* ---- treap over the block arena ---- */

typedef struct tkey { uint64_t k1, k2; } tkey;

static tkey key_of(const xp_t *x, uint32_t id, int by_addr)
{
    const xblock *b = &x->b[id];
    return by_addr ? (tkey){b->addr, 0} : (tkey){b->size, b->addr};
}

static int kless(tkey p, tkey q) { return p.k1 < q.k1 || (p.k1 == q.k1 && p.k2 < q.k2); }

/* Splits t into nodes < k (l) and nodes >= k (r). */
static void t_split(xp_t *x, uint32_t t, tkey k, int by_addr, uint32_t *l, uint32_t *r)
{
    if (t == NONE) {
        *l = *r = NONE;
    } else if (kless(key_of(x, t, by_addr), k)) {
        t_split(x, x->b[t].right, k, by_addr, &x->b[t].right, r);
        *l = t;
    } else {
        t_split(x, x->b[t].left, k, by_addr, l, &x->b[t].left);
        *r = t;
    }
}

static uint32_t t_merge(xp_t *x, uint32_t l, uint32_t r)
{
    if (l == NONE) return r;
    if (r == NONE) return l;
    if (x->b[l].prio > x->b[r].prio) {
        x->b[l].right = t_merge(x, x->b[l].right, r);
        return l;
    }
    x->b[r].left = t_merge(x, l, x->b[r].left);
    return r;
}

static void t_insert(xp_t *x, uint32_t *root, uint32_t id, int by_addr)
{
    uint32_t l, r;
    x->b[id].left = x->b[id].right = NONE;
    x->b[id].in_set = 1;
    t_split(x, *root, key_of(x, id, by_addr), by_addr, &l, &r);
    *root = t_merge(x, t_merge(x, l, id), r);
}

static void t_remove(xp_t *x, uint32_t *root, uint32_t id, int by_addr)
{
    uint32_t l, m, r;
    tkey k = key_of(x, id, by_addr);
    t_split(x, *root, k, by_addr, &l, &m);
    k.k2++;
    t_split(x, m, k, by_addr, &m, &r);
    *root = t_merge(x, l, r);
    x->b[id].in_set = 0;
    x->b[id].left = x->b[id].right = NONE;
}

/* The first node with key >= k, or NONE. */
static uint32_t t_lower(const xp_t *x, uint32_t t, tkey k, int by_addr)
{
    uint32_t best = NONE;
    while (t != NONE) {
        if (kless(key_of(x, t, by_addr), k)) {
            t = x->b[t].right;
        } else {
            best = t;
            t = x->b[t].left;
        }
    }
    return best;
}

static uint32_t t_next(const xp_t *x, uint32_t root, uint32_t id, int by_addr)
{
    tkey k = key_of(x, id, by_addr);
    k.k2++;
    return t_lower(x, root, k, by_addr);
}

/* ---- blocks ---- */

static ms_status blk_new(xp_t *x, uint32_t *id)
{
    if (x->nfreeb) {
        *id = x->freeb[--x->nfreeb];
    } else {
        if (x->nb >= NONE - 1 || ms_grow((void **)&x->b, &x->capb, x->nb + 1, sizeof *x->b))
            return MS_ERR_NOMEM;
        *id = (uint32_t)x->nb++;
    }
    xblock *b = &x->b[*id];
    memset(b, 0, sizeof *b);
    b->prev = b->next = b->left = b->right = NONE;
    b->live = 1;
    x->prio_seed = x->prio_seed * 1664525u + 1013904223u;  /* deterministic priorities */
    b->prio = x->prio_seed;
    return MS_OK;
}

static void blk_drop(xp_t *x, uint32_t id)
{
    x->b[id].live = 0;
    /* growing the free list only fails on host OOM; the slot is then just not reused */
    if (!ms_grow((void **)&x->freeb, &x->capfreeb, x->nfreeb + 1, sizeof *x->freeb))
        x->freeb[x->nfreeb++] = id;
}

static xpool *pool_of(xp_t *x, uint32_t id) { return &x->pools[x->seg[x->b[id].seg].pool]; }

static void set_insert(xp_t *x, uint32_t id)
{
    xpool *p = pool_of(x, id);
    if (x->b[id].mapped) t_insert(x, &p->blocks, id, 0);
    else t_insert(x, &p->unmapped, id, 1);
}

static void set_remove(xp_t *x, uint32_t id)
{
    xpool *p = pool_of(x, id);
    if (x->b[id].mapped) t_remove(x, &p->blocks, id, 0);
    else t_remove(x, &p->unmapped, id, 1);
}

/* Inserts new block n into the segment list right after block `after` (or first). */
static void splice_after(xp_t *x, uint32_t n, uint32_t after)
{
    xblock *b = &x->b[n];
    if (after == NONE) {
        xseg *g = &x->seg[b->seg];
        b->prev = NONE;
        b->next = g->head;
        if (g->head != NONE) x->b[g->head].prev = n;
        g->head = n;
        return;
    }
    b->prev = after;
    b->next = x->b[after].next;
    if (b->next != NONE) x->b[b->next].prev = n;
    x->b[after].next = n;
}

/* PyTorch's try_merge_blocks: src (a neighbour of dst, neither in a set... src is taken
 * out of its set here) joins dst when it is free and mapped alike. */
static void try_merge(xp_t *x, uint32_t dst, uint32_t src)
{
    if (src == NONE) return;
    xblock *d = &x->b[dst], *s = &x->b[src];
    if (s->allocated || s->mapped != d->mapped) return;
    set_remove(x, src);
    if (d->prev == src) {
        d->addr = s->addr;
        d->prev = s->prev;
        if (d->prev != NONE) x->b[d->prev].next = dst;
        else x->seg[d->seg].head = dst;
    } else {
        d->next = s->next;
        if (d->next != NONE) x->b[d->next].prev = dst;
    }
    d->size += s->size;
    blk_drop(x, src);
}

/* ---- pools and segments ---- */

static ms_status pool_get(xp_t *x, int stream, int small, uint32_t *idx)
{
    uint64_t key = (uint64_t)(uint32_t)stream << 1 | (uint64_t)(small != 0), v;
    if (u64map_get(x->poolidx, key, &v)) {
        *idx = (uint32_t)v;
        return MS_OK;
    }
    if (ms_grow((void **)&x->pools, &x->cappools, x->npools + 1, sizeof *x->pools) ||
        u64map_put(x->poolidx, key, x->npools))
        return MS_ERR_NOMEM;
    x->pools[x->npools] = (xpool){stream, small, NONE, NONE};
    *idx = (uint32_t)x->npools++;
    return MS_OK;
}

/* The handle of page i of g: 0 (unmapped) beyond the pages mapped so far. */
static uint64_t seg_handle(const xseg *g, size_t i)
{
    return i < g->hcap ? g->handle[i] : 0;
}

/* Makes room for the handles of pages [0, end) of g, zero-filled. */
static ms_status seg_handles(xseg *g, size_t end)
{
    if (end <= g->hcap) return MS_OK;
    size_t cap = g->hcap ? g->hcap : 16;
    while (cap < end) cap *= 2;
    if (cap > g->npages) cap = g->npages;
    uint64_t *h = realloc(g->handle, cap * sizeof *h);
    if (!h) return MS_ERR_NOMEM;
    memset(h + g->hcap, 0, (cap - g->hcap) * sizeof *h);
    g->handle = h;
    g->hcap = cap;
    return MS_OK;
}

static uint64_t page_bytes(const alloc_t *a, int small)
{
    uint64_t p = small ? ALLOC_EXPANDABLE_SMALL_PAGE_BYTES : ALLOC_EXPANDABLE_LARGE_PAGE_BYTES;
    uint64_t g = a->be.granularity_bytes ? a->be.granularity_bytes : 2ULL << 20;
    return (p + g - 1) / g * g;
}

/* ExpandableSegment's constructor: address space for expandable_va_factor x the device,
 * nothing mapped. Returns the one unmapped block covering it. */
static ms_status seg_new(alloc_t *a, uint32_t pool, uint64_t need, uint32_t *blk)
{
    xp_t *x = a->impl;
    uint64_t page = page_bytes(a, x->pools[pool].small);
    double want = (double)a->be.capacity_bytes * a->cfg.expandable_va_factor / (double)page;
    uint64_t npages = want < 1 ? 1 : (uint64_t)want;
    if ((double)npages < want) npages++;   /* ceil without libm */
    if (want * (double)page > 9e18 || npages * page < need) return MS_ERR_OOM;
    uint64_t va;
    ms_status st = a->be.ops->va_reserve(a->be.ctx, npages * page, &va);
    if (st) return st;
    uint32_t sid = (uint32_t)x->nseg, id;
    if (ms_grow((void **)&x->seg, &x->capseg, x->nseg + 1, sizeof *x->seg) || blk_new(x, &id)) {
        a->be.ops->va_free(a->be.ctx, va, npages * page);
        return MS_ERR_NOMEM;
    }
    x->nseg++;
    x->seg[sid] = (xseg){va, npages * page, page, npages, 0, NULL, 0, pool, id, 1};
    xblock *b = &x->b[id];
    b->addr = va;
    b->size = npages * page;
    b->seg = sid;
    set_insert(x, id);
    *blk = id;
    return MS_OK;
}

/* ExpandableSegment::map + map_block: pages covering [addr, addr + size) of unmapped block
 * id are created, mapped and made accessible; the rest stays an unmapped block after it;
 * the mapped block merges with free neighbours and joins the free set. */
static ms_status map_block(alloc_t *a, uint32_t id, uint64_t size)
{
    xp_t *x = a->impl;
    const mb_ops *o = a->be.ops;
    xseg *g = &x->seg[x->b[id].seg];
    uint64_t page = g->page, off = x->b[id].addr - g->va;
    size_t begin = off / page, end = (off + size + page - 1) / page, made = begin;
    ms_status st = seg_handles(g, end);
    if (st) return st;
    for (; made < end; made++) {
        uint64_t h = 0;
        if ((st = o->phys_create(a->be.ctx, page, &h))) break;
        g->handle[made] = h;
        a->stats.num_new_chunks++;
    }
    if (st) {   /* cuMemCreate out of memory: release this call's pages */
        for (size_t j = begin; j < made; j++) {
            o->phys_release(a->be.ctx, g->handle[j]);
            g->handle[j] = 0;
        }
        return st;
    }
    size_t m = begin;
    for (; m < end && !st; m++) {
        st = o->map(a->be.ctx, g->va + m * page, page, g->handle[m]);
        if (st) break;
        a->stats.num_maps++;
    }
    if (!st) st = o->set_access(a->be.ctx, g->va + begin * page, (end - begin) * page);
    if (st) {   /* only a backend bug gets here; undo and report */
        for (size_t j = begin; j < m; j++) {
            o->unmap(a->be.ctx, g->va + j * page, page);
            a->stats.num_unmaps++;
        }
        for (size_t j = begin; j < end; j++) {
            o->phys_release(a->be.ctx, g->handle[j]);
            g->handle[j] = 0;
        }
        return st;
    }
    g->mapped_pages += end - begin;
    uint64_t mapped = (end - begin) * page;
    set_remove(x, id);
    x->b[id].mapped = 1;
    if (mapped < x->b[id].size) {
        uint32_t r;
        if (blk_new(x, &r)) return MS_ERR_NOMEM;
        xblock *b = &x->b[id], *q = &x->b[r];
        q->addr = b->addr + mapped;
        q->size = b->size - mapped;
        q->seg = b->seg;
        splice_after(x, r, id);
        set_insert(x, r);
        b->size = mapped;
    }
    try_merge(x, id, x->b[id].prev);
    try_merge(x, id, x->b[id].next);
    set_insert(x, id);
    alloc_stat_add(&a->stats.reserved_bytes, &a->stats.reserved_peak_bytes, mapped);
    a->stats.num_segment_allocs++;   /* PyTorch's num_device_alloc */
    return MS_OK;
}

static int allocatable(const xp_t *x, uint32_t id) { return id != NONE && !x->b[id].allocated; }

/* find_expandable_block: the lowest address with enough free and unmapped space. */
static ms_status find_expandable(alloc_t *a, uint32_t pool, uint64_t size, uint32_t *out)
{
    xp_t *x = a->impl;
    xpool *p = &x->pools[pool];
    for (uint32_t u = t_lower(x, p->unmapped, (tkey){0, 0}, 1); u != NONE;
         u = t_next(x, p->unmapped, u, 1)) {
        uint32_t c = allocatable(x, x->b[u].prev) ? x->b[u].prev : u;
        uint64_t bytes = 0;
        for (uint32_t b = c; bytes < size && allocatable(x, b); b = x->b[b].next) bytes += x->b[b].size;
        if (bytes >= size) {
            *out = c;
            return MS_OK;
        }
    }
    return seg_new(a, pool, size, out);
}

/* try_allocate_expandable_block */
static ms_status try_allocate(alloc_t *a, uint32_t pool, uint64_t size, uint32_t *out)
{
    xp_t *x = a->impl;
    uint32_t c;
    ms_status st = find_expandable(a, pool, size, &c);
    if (st) return st;
    if (!x->b[c].mapped) {
        uint64_t s = x->b[c].size < size ? x->b[c].size : size;
        if ((st = map_block(a, c, s))) return st;
    }
    while (x->b[c].size < size) {   /* free -> unmapped -> ...: map and merge forward */
        uint32_t nx = x->b[c].next;
        uint64_t rem = size - x->b[c].size;
        if ((st = map_block(a, nx, rem < x->b[nx].size ? rem : x->b[nx].size))) return st;
        c = nx;
    }
    set_remove(x, c);
    *out = c;
    return MS_OK;
}

/* get_free_block for an expandable pool. */
static uint32_t get_free_block(alloc_t *a, uint32_t pool, uint64_t size)
{
    xp_t *x = a->impl;
    xpool *p = &x->pools[pool];
    uint32_t it = t_lower(x, p->blocks, (tkey){size, 0}, 0);
    if (it == NONE) return NONE;
    /* best fit by the size a block can grow to: a block followed by unmapped space counts
     * that space, so blocks that would not grow the segment are preferred */
#define EXPANDABLE_SIZE(i) (x->b[i].size + (x->b[i].next != NONE && !x->b[x->b[i].next].mapped ? \
                                              x->b[x->b[i].next].size : 0))
    for (uint32_t nx = t_next(x, p->blocks, it, 0); nx != NONE && EXPANDABLE_SIZE(nx) < EXPANDABLE_SIZE(it);
         nx = t_next(x, p->blocks, it, 0))
        it = nx;
#undef EXPANDABLE_SIZE
    uint64_t msplit = a->cfg.max_split_size_bytes;
    if (size < msplit && x->b[it].size >= msplit) return NONE;
    if (size >= msplit && x->b[it].size >= size + ALLOC_CACHING_MAX_NON_SPLIT_ROUNDING_BYTES)
        return NONE;
    set_remove(x, it);
    return it;
}

/* ---- release: unmap_block, release_blocks ---- */

/* Unmaps the whole pages inside free mapped block id (ExpandableSegment::unmap preceded by
 * the stream synchronize PyTorch does there); partial pages stay as free mapped blocks. */
static ms_status unmap_block(alloc_t *a, uint32_t id)
{
    xp_t *x = a->impl;
    const mb_ops *o = a->be.ops;
    xseg *g = &x->seg[x->b[id].seg];
    uint64_t page = g->page, off = x->b[id].addr - g->va;
    size_t begin = (off + page - 1) / page, end = (off + x->b[id].size) / page;
    if (begin >= end) return MS_OK;
    set_remove(x, id);
    ms_status err = o->synchronize(a->be.ctx), st;
    a->stats.num_syncs++;
    for (size_t i = begin; i < end; i++) {
        if ((st = o->unmap(a->be.ctx, g->va + i * page, page)) && !err) err = st;
        a->stats.num_unmaps++;
        if ((st = o->phys_release(a->be.ctx, g->handle[i])) && !err) err = st;
        g->handle[i] = 0;
    }
    g->mapped_pages -= end - begin;
    uint64_t ustart = g->va + begin * page, usize = (end - begin) * page;
    xblock *b = &x->b[id];
    if (ustart > b->addr) {   /* prev? -> before_free -> block */
        uint32_t n;
        if (blk_new(x, &n)) return MS_ERR_NOMEM;
        b = &x->b[id];
        x->b[n].addr = b->addr;
        x->b[n].size = ustart - b->addr;
        x->b[n].seg = b->seg;
        x->b[n].mapped = 1;
        splice_after(x, n, b->prev);
        set_insert(x, n);
    }
    b = &x->b[id];
    if (b->addr + b->size > ustart + usize) {   /* block -> after_free -> next? */
        uint32_t n;
        if (blk_new(x, &n)) return MS_ERR_NOMEM;
        b = &x->b[id];
        x->b[n].addr = ustart + usize;
        x->b[n].size = b->addr + b->size - (ustart + usize);
        x->b[n].seg = b->seg;
        x->b[n].mapped = 1;
        splice_after(x, n, id);
        set_insert(x, n);
    }
    b = &x->b[id];
    b->addr = ustart;
    b->size = usize;
    b->mapped = 0;
    try_merge(x, id, b->prev);
    try_merge(x, id, x->b[id].next);
    set_insert(x, id);
    alloc_stat_sub(&a->stats.reserved_bytes, usize);
    a->stats.num_segment_frees++;   /* PyTorch's num_device_free */
    return err;
}

/* release_expandable_segment: the segment is one unmapped block again. */
static ms_status seg_release(alloc_t *a, uint32_t sid)
{
    xp_t *x = a->impl;
    xseg *g = &x->seg[sid];
    uint32_t id = g->head;
    set_remove(x, id);
    blk_drop(x, id);
    ms_status st = a->be.ops->va_free(a->be.ctx, g->va, g->bytes);
    free(g->handle);
    g->handle = NULL;
    g->hcap = 0;
    g->live = 0;
    return st;
}

static void collect(xp_t *x, uint32_t t, size_t *n)
{
    if (t == NONE) return;
    collect(x, x->b[t].left, n);
    x->tmp[(*n)++] = t;
    collect(x, x->b[t].right, n);
}

static size_t tree_size(const xp_t *x, uint32_t t)
{
    return t == NONE ? 0 : 1 + tree_size(x, x->b[t].left) + tree_size(x, x->b[t].right);
}

/* release_cached_blocks: one synchronize (as the caching allocator models
 * synchronize_and_free_events), then every free block of every pool gives up its whole
 * pages; segments left with nothing mapped are released. */
static ms_status release_cached(alloc_t *a)
{
    xp_t *x = a->impl;
    ms_status err = a->be.ops->synchronize(a->be.ctx), st;
    a->stats.num_syncs++;
    for (int small = 0; small < 2; small++)
        for (size_t pi = 0; pi < x->npools; pi++) {
            if (x->pools[pi].small != small) continue;
            size_t n = 0;
            if (ms_grow((void **)&x->tmp, &x->captmp, tree_size(x, x->pools[pi].blocks) + 1,
                        sizeof *x->tmp))
                return MS_ERR_NOMEM;
            collect(x, x->pools[pi].blocks, &n);
            for (size_t i = 0; i < n; i++) {
                uint32_t id = x->tmp[i];
                if ((st = unmap_block(a, id)) && !err) err = st;
            }
        }
    for (size_t sid = 0; sid < x->nseg; sid++) {
        xseg *g = &x->seg[sid];
        if (g->live && x->b[g->head].next == NONE && !x->b[g->head].mapped &&
            (st = seg_release(a, (uint32_t)sid)) && !err)
            err = st;
    }
    return err;
}

/* ---- vtable ---- */

static ms_status xp_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr)
{
    (void)tag;
    xp_t *x = a->impl;
    *addr = 0;
    if (bytes == 0) return MS_OK;   /* as the caching allocator (PyTorch): null, no block */
    if (bytes > a->be.capacity_bytes) return MS_ERR_OOM;
    uint64_t size = alloc_caching_round_size(bytes, a->cfg.roundup_power2_divisions);
    uint32_t pool, id;
    ms_status st = pool_get(x, stream, size <= ALLOC_CACHING_SMALL_SIZE_BYTES, &pool);
    if (st) return st;
    id = get_free_block(a, pool, size);
    if (id == NONE) {
        st = try_allocate(a, pool, size, &id);
        if (st == MS_ERR_OOM) {   /* release_cached_blocks, then alloc_block(isRetry) */
            ms_status r = release_cached(a);
            a->stats.num_alloc_retries++;
            st = r ? r : try_allocate(a, pool, size, &id);
        }
        if (st) return st;
    }
    /* alloc_found_block: with expandable segments any remainder >= 512 B is split off */
    xblock *b = &x->b[id];
    if (b->size - size >= ALLOC_CACHING_MIN_BLOCK_BYTES) {
        uint32_t r;
        if (blk_new(x, &r)) return MS_ERR_NOMEM;
        b = &x->b[id];
        x->b[r].addr = b->addr + size;
        x->b[r].size = b->size - size;
        x->b[r].seg = b->seg;
        x->b[r].mapped = 1;
        splice_after(x, r, id);
        set_insert(x, r);
        b->size = size;
    }
    b->allocated = 1;
    b->req_bytes = bytes;
    if (u64map_put(x->live, b->addr, id)) return MS_ERR_NOMEM;
    alloc_stat_add(&a->stats.allocated_bytes, &a->stats.allocated_peak_bytes, b->size);
    alloc_stat_add(&a->stats.active_bytes, &a->stats.active_peak_bytes, b->size);
    alloc_stat_add(&a->stats.requested_bytes, &a->stats.requested_peak_bytes, bytes);
    *addr = b->addr;
    return MS_OK;
}

/* free + free_block: merge with free neighbours (mapped alike), back into the pool. */
static ms_status xp_release(alloc_t *a, uint64_t addr)
{
    xp_t *x = a->impl;
    uint64_t v;
    if (addr == 0) return MS_OK;    /* free(nullptr) */
    if (!u64map_del(x->live, addr, &v)) return MS_ERR_INVALID;
    uint32_t id = (uint32_t)v;
    xblock *b = &x->b[id];
    alloc_stat_sub(&a->stats.allocated_bytes, b->size);
    alloc_stat_sub(&a->stats.active_bytes, b->size);
    alloc_stat_sub(&a->stats.requested_bytes, b->req_bytes);
    b->allocated = 0;
    b->req_bytes = 0;
    try_merge(x, id, b->prev);
    try_merge(x, id, x->b[id].next);
    set_insert(x, id);
    return MS_OK;
}

static ms_status xp_empty_cache(alloc_t *a) { return release_cached(a); }


/* In-order walk: keys strictly increasing, heap order, flags; returns node count or -1. */
static long check_tree(const xp_t *x, uint32_t t, int by_addr, uint32_t pool, int mapped,
                       tkey *last, int *have_last)
{
    if (t == NONE) return 0;
    const xblock *b = &x->b[t];
    if (!b->live || !b->in_set || b->allocated || b->mapped != mapped ||
        x->seg[b->seg].pool != pool)
        return -1;
    if ((b->left != NONE && x->b[b->left].prio > b->prio) ||
        (b->right != NONE && x->b[b->right].prio > b->prio))
        return -1;
    long l = check_tree(x, b->left, by_addr, pool, mapped, last, have_last);
    if (l < 0) return -1;
    tkey k = key_of(x, t, by_addr);
    if (*have_last && !kless(*last, k)) return -1;
    *last = k;
    *have_last = 1;
    long r = check_tree(x, b->right, by_addr, pool, mapped, last, have_last);
    return r < 0 ? -1 : l + r + 1;
}

static ms_status xp_check(const alloc_t *a, char *why, size_t wn)
{
    const xp_t *x = a->impl;
    uint64_t reserved = 0, allocated = 0, requested = 0;
    size_t n_free = 0, n_unmapped = 0, n_alloc = 0, n_live = 0;
    for (size_t sid = 0; sid < x->nseg; sid++) {
        const xseg *g = &x->seg[sid];
        if (!g->live) continue;
        uint64_t pos = g->va;
        uint32_t prev = NONE;
        size_t pages = 0, counted_to = 0;   /* distinct pages under mapped blocks */
        for (uint32_t id = g->head; id != NONE; id = x->b[id].next) {
            const xblock *b = &x->b[id];
            if (!b->live || b->seg != sid || b->addr != pos || b->size == 0 || b->prev != prev)
                return alloc_check_fail(why, wn, "segment %zu: block list broken at 0x%llx", sid,
                           (unsigned long long)pos);
            size_t p0 = (b->addr - g->va) / g->page, p1 = (b->addr + b->size - g->va + g->page - 1) / g->page;
            if (b->mapped) {
                for (size_t i = p0; i < p1; i++)
                    if (!seg_handle(g, i)) return alloc_check_fail(why, wn, "mapped block 0x%llx has an unmapped page",
                                                  (unsigned long long)b->addr);
                pages += p1 - (p0 > counted_to ? p0 : counted_to);
                counted_to = p1;
            } else {
                /* the pages of an unmapped block are not scanned one by one (the tail block
                 * spans the device): its ends are, and the page count below closes the gap */
                if ((b->addr - g->va) % g->page || b->size % g->page || b->allocated)
                    return alloc_check_fail(why, wn, "unmapped block 0x%llx not page aligned", (unsigned long long)b->addr);
                if (seg_handle(g, p0) || seg_handle(g, p1 - 1))
                    return alloc_check_fail(why, wn, "unmapped block 0x%llx has a mapped page",
                               (unsigned long long)b->addr);
            }
            if (prev != NONE && !b->allocated && !x->b[prev].allocated && x->b[prev].mapped == b->mapped)
                return alloc_check_fail(why, wn, "adjacent free blocks 0x%llx not merged", (unsigned long long)b->addr);
            if (b->allocated) {
                uint64_t v;
                if (b->in_set || !u64map_get(x->live, b->addr, &v) || v != id)
                    return alloc_check_fail(why, wn, "allocated block 0x%llx not in the live map", (unsigned long long)b->addr);
                allocated += b->size;
                requested += b->req_bytes;
                n_alloc++;
            } else if (!b->in_set) {
                return alloc_check_fail(why, wn, "free block 0x%llx in no pool set", (unsigned long long)b->addr);
            } else if (b->mapped) {
                n_free++;
            } else {
                n_unmapped++;
            }
            n_live++;
            pos += b->size;
            prev = id;
        }
        if (pos != g->va + g->bytes) return alloc_check_fail(why, wn, "segment %zu: blocks do not cover it", sid);
        if (pages != g->mapped_pages) return alloc_check_fail(why, wn, "segment %zu: mapped page count wrong", sid);
        reserved += pages * g->page;
    }
    size_t live_blocks = 0;
    for (size_t i = 0; i < x->nb; i++) live_blocks += x->b[i].live;
    if (live_blocks != n_live) return alloc_check_fail(why, wn, "%zu live blocks, %zu in segments", live_blocks, n_live);
    size_t in_free = 0, in_unmapped = 0;
    for (size_t pi = 0; pi < x->npools; pi++) {
        tkey last = {0, 0};
        int have = 0;
        long c = check_tree(x, x->pools[pi].blocks, 0, (uint32_t)pi, 1, &last, &have);
        if (c < 0) return alloc_check_fail(why, wn, "pool %zu: free set unsorted or holds a wrong block", pi);
        in_free += (size_t)c;
        have = 0;
        c = check_tree(x, x->pools[pi].unmapped, 1, (uint32_t)pi, 0, &last, &have);
        if (c < 0) return alloc_check_fail(why, wn, "pool %zu: unmapped set unsorted or wrong", pi);
        in_unmapped += (size_t)c;
    }
    if (in_free != n_free || in_unmapped != n_unmapped)
        return alloc_check_fail(why, wn, "pool sets hold %zu/%zu of %zu/%zu free/unmapped blocks", in_free,
                   in_unmapped, n_free, n_unmapped);
    if (u64map_count(x->live) != n_alloc) return alloc_check_fail(why, wn, "live map size wrong");
    const alloc_stats *s = &a->stats;
    if (s->reserved_bytes != reserved || s->allocated_bytes != allocated ||
        s->active_bytes != allocated || s->requested_bytes != requested)
        return alloc_check_fail(why, wn, "stats (reserved %llu allocated %llu) disagree with a recount (%llu %llu)",
                   (unsigned long long)s->reserved_bytes, (unsigned long long)s->allocated_bytes,
                   (unsigned long long)reserved, (unsigned long long)allocated);
    if (s->inactive_split_bytes != 0) return alloc_check_fail(why, wn, "inactive_split is not tracked here");
    return MS_OK;
}

static void xp_dump(const alloc_t *a, FILE *f)
{
    const xp_t *x = a->impl;
    const alloc_stats *s = &a->stats;
    fprintf(f, "expandable: reserved %llu allocated %llu requested %llu maps %llu unmaps %llu "
            "syncs %llu retries %llu\n",
            (unsigned long long)s->reserved_bytes, (unsigned long long)s->allocated_bytes,
            (unsigned long long)s->requested_bytes, (unsigned long long)s->num_maps,
            (unsigned long long)s->num_unmaps, (unsigned long long)s->num_syncs,
            (unsigned long long)s->num_alloc_retries);
    for (size_t sid = 0; sid < x->nseg; sid++) {
        const xseg *g = &x->seg[sid];
        if (!g->live) continue;
        const xpool *p = &x->pools[g->pool];
        fprintf(f, "  segment %zu stream %d %s va 0x%llx page %llu mapped %zu/%zu:", sid, p->stream,
                p->small ? "small" : "large", (unsigned long long)g->va,
                (unsigned long long)g->page, g->mapped_pages, g->npages);
        for (uint32_t id = g->head; id != NONE; id = x->b[id].next)
            fprintf(f, " [%s %llu]",
                    x->b[id].allocated ? "alloc" : x->b[id].mapped ? "free" : "unmapped",
                    (unsigned long long)x->b[id].size);
        fputc('\n', f);
    }
}

static ms_status xp_create(alloc_t *a)
{
    if (alloc_config_problem(&a->cfg)) return MS_ERR_INVALID;
    xp_t *x = calloc(1, sizeof *x);
    if (!x) return MS_ERR_NOMEM;
    x->live = u64map_new(1024);
    x->poolidx = u64map_new(16);
    if (!x->live || !x->poolidx) {
        u64map_free(x->live);
        u64map_free(x->poolidx);
        free(x);
        return MS_ERR_NOMEM;
    }
    x->prio_seed = 0x9e3779b9u;
    a->impl = x;
    return MS_OK;
}

/* ~ExpandableSegment for every segment: unmap what is mapped, free the address space. */
static void xp_destroy(alloc_t *a)
{
    xp_t *x = a->impl;
    if (!x) return;
    const mb_ops *o = a->be.ops;
    for (size_t sid = 0; sid < x->nseg; sid++) {
        xseg *g = &x->seg[sid];
        if (!g->live) continue;
        for (size_t i = 0; i < g->hcap; i++)
            if (g->handle[i]) {
                o->unmap(a->be.ctx, g->va + i * g->page, g->page);
                o->phys_release(a->be.ctx, g->handle[i]);
            }
        o->va_free(a->be.ctx, g->va, g->bytes);
        free(g->handle);
    }
    free(x->seg);
    free(x->b);
    free(x->freeb);
    free(x->pools);
    free(x->tmp);
    u64map_free(x->live);
    u64map_free(x->poolidx);
    free(x);
    a->impl = NULL;
}

size_t alloc_expandable_mapped_pages(const alloc_t *a)
{
    if (a->vt != &alloc_expandable_vt) return 0;
    const xp_t *x = a->impl;
    size_t n = 0;
    for (size_t i = 0; i < x->nseg; i++)
        if (x->seg[i].live) n += x->seg[i].mapped_pages;
    return n;
}

size_t alloc_expandable_num_segments(const alloc_t *a)
{
    if (a->vt != &alloc_expandable_vt) return 0;
    const xp_t *x = a->impl;
    size_t n = 0;
    for (size_t i = 0; i < x->nseg; i++) n += x->seg[i].live;
    return n;
}

const alloc_vtable alloc_expandable_vt = {
    "expandable",
    "PyTorch expandable segments: one growing VA range per (stream, pool), pages mapped on demand",
    "PyTorch c10/cuda/CUDACachingAllocator.cpp (ExpandableSegment, expandable_segments:True)",
    xp_create, xp_destroy, xp_block, xp_release, xp_empty_cache, xp_check, xp_dump,
    0, NULL,
    NULL, NULL, /* no handles: released by address */
};

/* alloc_caching.c — the caching allocator (see alloc_caching.h): a model of PyTorch's
 * CUDACachingAllocator, DeviceCachingAllocator with the native backend, written from its
 * rules (malloc, get_free_block, should_split, alloc_found_block, free_block,
 * try_merge_blocks, alloc_block, release_available_cached_blocks, release_cached_blocks,
 * release_block, round_size, get_allocation_size) as of v2.11 (an older 2.x version has the
 * same rules, with the 20 MiB oversize rounding limit hard-wired as kLargeBuffer).
 * Registered in alloc.c; reached through alloc.h by sim/, runtime/ and tests.
 *
 * Checked against PyTorch 2.11.0 on an H200 (caching_allocator_alloc/delete replays of
 * 0.3-2 M events, three streams, with and without a memory fraction, max_split_size_mb and
 * roundup_power2_divisions): handed the addresses the real cudaMalloc returned, this model
 * ends with every statistic equal (peaks, current values, retries, segment allocs and frees,
 * the OOM event). Best fit breaks ties between equal-size blocks by address, and cudaMalloc
 * does not hand out increasing addresses (mostly decreasing ones), so over the simulated
 * backend's bump addresses the results can differ; memsim replay hands the allocator the
 * addresses a recorded run got (docs/ALLOCATORS.md, "Segment addresses"), and so reproduces
 * the 18 H200 training runs of experiments/realworld/h200 exactly.
 *
 * Data structures (the replay of long traces calls this millions of times):
 *  - every block (free or allocated piece of a segment) lives in one arena array and is
 *    named by its index; freed slots go on a free list;
 *  - each pool (small, large) keeps its FREE blocks ordered by (stream, size, address) —
 *    PyTorch's BlockComparatorSize — so a request is a lower_bound, as PyTorch's
 *    std::set::lower_bound; the order is kept as one ordered set per stream of the pool
 *    (memory/bset.h), ordered by (size, address): a request only ever searches its own
 *    stream's blocks;
 *  - a block's segment neighbours are the prev/next indices (PyTorch's Block::prev/next);
 *  - allocated blocks are found by address in a u64map (PyTorch's allocated_blocks).
 *
 * Deviations from PyTorch (each one a modelling choice):
 *  - No CUDA events / recordStream inside the allocator: a freed block is free at once, so
 *    "active" equals "allocated" (PyTorch counts blocks awaiting their end-of-life events as
 *    active). A caller that models the events holds such frees back itself and registers an
 *    events hook (alloc_set_events_hook) that release_cached calls after its
 *    synchronize, where PyTorch's synchronize_and_free_events returns those blocks.
 *  - No expandable segments (that is alloc_expandable.c), no CUDA-graph private pools,
 *    no mempools, no IPC, no set_per_process_memory_fraction: the backend's capacity is the
 *    only limit, so garbage_collection_threshold (active only with a fraction) is not
 *    modelled, and neither are the FreeMemoryCallbacks (trigger_free_memory_callbacks).
 *  - release_cached_blocks calls the backend's synchronize once before freeing, standing in
 *    for synchronize_and_free_events (PyTorch syncs outstanding events there, a no-op
 *    without recordStream; the backend charges device_sync_us for it). Each cudaFree is a
 *    device synchronization too; num_syncs counts both.
 *  - max_non_split_rounding_mb is fixed at its default (20 MiB, ALLOC_CACHING_MAX_NON_
 *    SPLIT_ROUNDING_BYTES): alloc_config has no field for it.
 *  - roundup_power2_divisions is one value for every size interval (PyTorch's
 *    "roundup_power2_divisions:N" form; its per-interval list form is not modelled).
 *  - A zero-byte request returns address 0 without allocating and releasing address 0 is
 *    a no-op, as PyTorch's allocate() returns a null DataPtr for size 0 and free(nullptr)
 *    returns. Requests of 1 EiB or more fail with MS_ERR_OOM before anything is touched
 *    (PyTorch raises OutOfMemoryError there without counting an OOM; alloc.c counts one).
 *  - Only the "all" (aggregate) byte statistics are kept: not the per-pool ones, not the
 *    block/segment counts, not oversize_allocations/oversize_segments.
 */
#include "memory/alloc_caching.h"

#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"
#include "memory/bset.h"

#define NIL UINT32_MAX
#define ONE_EIB (1ULL << 60)
/* The calls made for every request, block_common and the two releases (by handle, the
 * executor's; by address, the replay's), are flattened: the free set's operations
 * (memory/bset.c, through the link-time optimization) and the helpers inlined into them,
 * which saves each call's register saves and lets the searches' results stay in registers.
 * OUTLINE keeps the paths a request seldom takes (a new segment, a retry, a new tree, a
 * growing arena, the fallback of the release by handle) out of them, and so out of the
 * instruction cache's way. */
#define FLAT __attribute__((flatten))
#define OUTLINE __attribute__((noinline))

typedef struct cblk {
    uint64_t addr, size;
    uint64_t requested;      /* unrounded request while allocated */
    uint32_t prev, next;     /* neighbours in the segment, address order; NIL at the ends */
    uint32_t tree;           /* its pool and stream's free set (caching.trees), fixed for life */
    int32_t stream;
    uint8_t allocated, small, live;
    uint8_t unmapped;        /* allocated by caching_block_h: no entry in caching.live, the
                                caller holds its index as the handle */
} cblk;

typedef struct ctree {       /* the free blocks of one pool on one stream */
    bset *set;
    int32_t stream;
    int small;
} ctree;

typedef struct cpool {
    size_t n;                /* free blocks, over all of the pool's streams */
    int small;
} cpool;

#define TREE_HINTS 8         /* recently used trees per pool, by stream & (TREE_HINTS - 1) */

typedef struct caching {
    cblk *b;
    size_t nb, capb;         /* arena: slots in use or on the free list, capacity */
    uint32_t free_slot;      /* free-list head (through .next) */
    cpool small, large;
    ctree *trees;            /* one per (pool, stream) that ever had a segment */
    size_t ntrees, cap_trees;
    u64map *tree_of;         /* small << 32 | stream -> index into trees */
    uint32_t hint[2][TREE_HINTS]; /* [small][stream & 7]: a tree index to try first, or NIL */
    u64map *live;            /* addr -> index of allocated blocks */
    u64map *segs;            /* segment base -> bytes */
    uint64_t max_split;
    unsigned divisions;
    uint32_t *scratch;       /* release_blocks / check work list */
    size_t cap_scratch;
    uint32_t *order;         /* a pool's trees in stream order (pool_trees) */
    size_t cap_order;
    alloc_events_fn ev_fn; /* the caller's deferred frees, returned at release_cached */
    void *ev_ctx;
} caching;

/* ---------------------------------------------------------------- rounding */

static int is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

static unsigned floor_log2(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

/* PyTorch's roundup_power2_next_division: the interval [2^k, 2^(k+1)) is cut into
 * `divisions` equal parts and the size goes up to the next cut. */
static uint64_t roundup_power2_next_division(uint64_t size, unsigned divisions)
{
    if (is_pow2(size)) return size;
    uint64_t floor2 = 1ULL << floor_log2(size);
    uint64_t step = floor2 >> floor_log2(divisions);
    if (step == 0) return floor2 << 1;
    uint64_t down = size & ~(step - 1);
    return down == size ? size : down + step;
}

uint64_t alloc_caching_round_size(uint64_t bytes, unsigned divisions)
{
    const uint64_t mb = ALLOC_CACHING_MIN_BLOCK_BYTES;
    if (bytes < mb) return mb;
    if (divisions > 1 && bytes > mb * divisions)
        return roundup_power2_next_division(bytes, divisions);
    return mb * ((bytes + mb - 1) / mb);
}

uint64_t alloc_caching_segment_bytes(uint64_t rounded)
{
    if (rounded <= ALLOC_CACHING_SMALL_SIZE_BYTES) return ALLOC_CACHING_SMALL_BUFFER_BYTES;
    if (rounded < ALLOC_CACHING_MIN_LARGE_ALLOC_BYTES) return ALLOC_CACHING_LARGE_BUFFER_BYTES;
    const uint64_t r = ALLOC_CACHING_ROUND_LARGE_BYTES;
    return r * ((rounded + r - 1) / r);
}

/* ---------------------------------------------------------------- arena */

/* A slot past the arena's end, growing it; NIL when out of memory. Out of line: most new
 * blocks reuse a recycled slot. */
static OUTLINE uint32_t blk_append(caching *c)
{
    if (c->nb >= NIL - 1) return NIL;
    if (ms_grow((void **)&c->b, &c->capb, c->nb + 1, sizeof *c->b) != MS_OK) return NIL;
    return (uint32_t)c->nb++;
}

static uint32_t blk_new(caching *c)
{
    uint32_t i;
    if (c->free_slot != NIL) {
        i = c->free_slot;
        c->free_slot = c->b[i].next;
    } else {
        i = blk_append(c);
        if (i == NIL) return NIL;
    }
    cblk *b = &c->b[i];
    memset(b, 0, sizeof *b);
    b->prev = b->next = NIL;
    b->live = 1;
    return i;
}

static void blk_recycle(caching *c, uint32_t i)
{
    c->b[i].live = 0;
    c->b[i].next = c->free_slot;
    c->free_slot = i;
}

/* ---------------------------------------------------------------- free sets */

static cpool *pool_of(caching *c, const cblk *b) { return b->small ? &c->small : &c->large; }

static bset *set_of(const caching *c, const cblk *b) { return c->trees[b->tree].set; }

/* Puts free block n into its set; -1 when out of memory, which cannot happen when the
 * caller reserved room (bset_reserve) before it took anything out. */
static int pool_insert(caching *c, uint32_t n)
{
    const cblk *b = &c->b[n];
    if (bset_insert(set_of(c, b), b->size, b->addr, n)) return -1;
    pool_of(c, b)->n++;
    return 0;
}

/* Removes free block n (found by its key). Returns -1 if it is not in the pool. */
static int pool_erase(caching *c, uint32_t n)
{
    const cblk *b = &c->b[n];
    if (!bset_erase(set_of(c, b), b->size, b->addr, n)) return -1;
    pool_of(c, b)->n--;
    return 0;
}

/* tree_find past its hint: the map, then a new tree. */
static OUTLINE uint32_t tree_lookup(caching *c, int small, int32_t stream, int create,
                                 uint32_t *hint)
{
    uint64_t key = (uint64_t)small << 32 | (uint32_t)stream, v;
    if (u64map_get(c->tree_of, key, &v)) return *hint = (uint32_t)v;
    if (!create || c->ntrees >= NIL - 1) return NIL;
    if (ms_grow((void **)&c->trees, &c->cap_trees, c->ntrees + 1, sizeof *c->trees) != MS_OK)
        return NIL;
    bset *set = bset_new();
    if (!set || u64map_put(c->tree_of, key, c->ntrees)) {
        bset_free(set);
        return NIL;
    }
    c->trees[c->ntrees] = (ctree){set, stream, small};
    return *hint = (uint32_t)c->ntrees++;
}

/* The tree of (pool, stream); NIL when it has none (create: makes it; NIL when out of
 * memory). Trees are never removed: a stream's pool keeps its set once it had a request. */
static uint32_t tree_find(caching *c, int small, int32_t stream, int create)
{
    uint32_t *hint = &c->hint[small][(uint32_t)stream & (TREE_HINTS - 1)];
    if (*hint != NIL && c->trees[*hint].stream == stream) return *hint;
    return tree_lookup(c, small, stream, create, hint);
}

/* The pool's trees in stream order into c->order; returns their count (-1: no memory). */
static long pool_trees(caching *c, const cpool *p)
{
    if (ms_grow((void **)&c->order, &c->cap_order, c->ntrees + 1, sizeof *c->order) != MS_OK)
        return -1;
    size_t k = 0;
    for (size_t t = 0; t < c->ntrees; t++) {
        if (c->trees[t].small != p->small) continue;
        size_t j = k++; /* insertion by stream: a pool has few streams */
        while (j > 0 && c->trees[c->order[j - 1]].stream > c->trees[t].stream) {
            c->order[j] = c->order[j - 1];
            j--;
        }
        c->order[j] = (uint32_t)t;
    }
    return (long)k;
}

/* In-order list of a pool's free blocks, by (stream, size, addr), into c->scratch (a
 * workspace, so check() may use it too); returns the count, or -1 when out of memory or the
 * sets disagree with p->n. */
static long pool_collect(caching *c, const cpool *p)
{
    long nt = pool_trees(c, p);
    if (nt < 0 ||
        ms_grow((void **)&c->scratch, &c->cap_scratch, p->n + 1, sizeof *c->scratch) != MS_OK)
        return -1;
    size_t n = 0;
    for (long k = 0; k < nt; k++) {
        const bset *set = c->trees[c->order[k]].set;
        n += bset_ids(set, c->scratch + (n < p->n ? n : p->n), n < p->n ? p->n - n : 0);
    }
    return n == p->n ? (long)n : -1;
}

/* ---------------------------------------------------------------- the allocator */

static caching *impl(const alloc_t *a) { return a->impl; }

static int is_split(const cblk *b) { return b->prev != NIL || b->next != NIL; }

/* get_free_block: best fit by lower_bound, same stream, and the max_split_size rules. The
 * block stays in its set, at *at, for alloc_found to take out or to give the key of the
 * remainder of a split. */
static uint32_t get_free_block(caching *c, uint32_t tree, uint64_t size, bset_pos *at)
{
    uint64_t bsize;
    uint32_t i = bset_lower_bound(c->trees[tree].set, size, at, &bsize);
    if (i == BSET_NONE) return NIL;
    /* Do not hand an oversize block to a request below max_split_size. */
    if (size < c->max_split && bsize >= c->max_split) return NIL;
    /* An oversize request may take a larger cached block, but only within a limit. */
    if (size >= c->max_split && bsize >= size + ALLOC_CACHING_MAX_NON_SPLIT_ROUNDING_BYTES)
        return NIL;
    return i;
}

/* alloc_block: one cudaMalloc of a whole segment. MS_ERR_OOM when the device is full. */
static OUTLINE ms_status alloc_segment(alloc_t *a, int small, int32_t stream, uint32_t tree,
                               uint64_t bytes, int is_retry, uint32_t *out)
{
    caching *c = impl(a);
    if (is_retry) a->stats.num_alloc_retries++;
    uint64_t addr;
    ms_status st = a->be.ops->dev_malloc(a->be.ctx, bytes, &addr);
    if (st != MS_OK) return st;
    uint32_t i = blk_new(c);
    if (i == NIL || u64map_put(c->segs, addr, bytes)) {
        if (i != NIL) blk_recycle(c, i);
        a->be.ops->dev_free(a->be.ctx, addr);
        return MS_ERR_NOMEM;
    }
    cblk *b = &c->b[i];
    b->addr = addr;
    b->size = bytes;
    b->stream = stream;
    b->small = (uint8_t)small;
    b->tree = tree;
    a->stats.num_segment_allocs++;
    alloc_stat_add(&a->stats.reserved_bytes, &a->stats.reserved_peak_bytes, bytes);
    *out = i;
    return MS_OK;
}

/* release_block: cudaFree of a whole free segment (the block must be unsplit and in its
 * pool). cudaFree synchronizes the device. */
static ms_status release_block(alloc_t *a, uint32_t i)
{
    caching *c = impl(a);
    cblk *b = &c->b[i];
    ms_status st = a->be.ops->dev_free(a->be.ctx, b->addr);
    if (st != MS_OK) return st;
    a->stats.num_segment_frees++;
    a->stats.num_syncs++;
    alloc_stat_sub(&a->stats.reserved_bytes, b->size);
    u64map_del(c->segs, b->addr, NULL);
    pool_erase(c, i);
    blk_recycle(c, i);
    return MS_OK;
}

/* release_available_cached_blocks: with max_split_size set, free oversize cached blocks of
 * this stream — the smallest one big enough, else the largest ones until enough is freed.
 * Sets *freed to whether the caller should retry. */
static OUTLINE ms_status release_available(alloc_t *a, uint32_t tree, uint64_t size, int *freed)
{
    caching *c = impl(a);
    *freed = 0;
    if (c->max_split == UINT64_MAX) return MS_OK;
    uint64_t key = size < c->max_split ? c->max_split : size;
    const bset *set = c->trees[tree].set;
    bset_pos at;
    uint64_t found;
    uint32_t i = bset_lower_bound(set, key, &at, &found);
    if (i != BSET_NONE) {
        /* Oversize free blocks are whole segments: a split leaves pieces below
         * max_split_size (PyTorch relies on the same fact). */
        if (is_split(&c->b[i])) return MS_OK;
        ms_status st = release_block(a, i);
        if (st == MS_OK) *freed = 1;
        return st;
    }
    uint64_t released = 0;
    uint32_t cur = bset_pred(set, key, 0);
    while (cur != BSET_NONE && released < key && c->b[cur].size >= c->max_split) {
        cblk *b = &c->b[cur];
        uint32_t before = bset_pred(set, b->size, b->addr);
        if (!is_split(b)) {
            released += b->size;
            ms_status st = release_block(a, cur);
            if (st != MS_OK) return st;
        }
        cur = before;
    }
    *freed = released >= key;
    return MS_OK;
}

/* release_blocks: cudaFree every cached block that is a whole segment, in pool order. */
static ms_status release_pool(alloc_t *a, cpool *p)
{
    caching *c = impl(a);
    long n = pool_collect(c, p);
    if (n < 0) return MS_ERR_NOMEM;
    for (long k = 0; k < n; k++) {
        uint32_t i = c->scratch[k];
        if (is_split(&c->b[i])) continue;
        ms_status st = release_block(a, i);
        if (st != MS_OK) return st;
    }
    return MS_OK;
}

/* release_cached_blocks (= empty_cache): synchronize, return the blocks waiting for events
 * (the caller's hook: every event is complete after the synchronize), then free whole cached
 * segments of the large pool and then the small pool. */
static OUTLINE ms_status release_cached(alloc_t *a)
{
    caching *c = impl(a);
    ms_status st = a->be.ops->synchronize(a->be.ctx);
    if (st != MS_OK) return st;
    a->stats.num_syncs++;
    if (c->ev_fn) c->ev_fn(c->ev_ctx);
    st = release_pool(a, &c->large);
    if (st == MS_OK) st = release_pool(a, &c->small);
    return st;
}

/* should_split: small pool when >= 512 bytes remain; large pool when more than 1 MiB
 * remains and the request is below max_split_size. */
static int should_split(const caching *c, const cblk *b, uint64_t size)
{
    uint64_t remaining = b->size - size;
    if (b->small) return remaining >= ALLOC_CACHING_MIN_BLOCK_BYTES;
    return size < c->max_split && remaining > ALLOC_CACHING_SMALL_SIZE_BYTES;
}

/* Enters allocated block i in the map by address (the release by address finds it there). */
static OUTLINE int live_put(caching *c, uint64_t addr, uint32_t i)
{
    return u64map_put(c->live, addr, i);
}

/* alloc_found_block: split off the request at the block's low end if should_split, mark
 * it allocated and update the statistics as PyTorch does. at: where block i lies in its
 * set (a cached block), or NULL (a new segment, in no set): the remainder of a split keeps
 * block i's index, so a cached block's entry takes the remainder's key in place. */
static ms_status alloc_found(alloc_t *a, uint32_t i, const bset_pos *at, uint64_t size,
                             uint64_t orig_bytes, uint64_t *addr, uint32_t *handle)
{
    caching *c = impl(a);
    int already_split = is_split(&c->b[i]);
    if (should_split(c, &c->b[i], size)) {
        uint32_t n = blk_new(c);
        if (n == NIL) return MS_ERR_NOMEM; /* nothing changed yet */
        cblk *rem = &c->b[i], *blk = &c->b[n];
        blk->addr = rem->addr;
        blk->size = size;
        blk->stream = rem->stream;
        blk->small = rem->small;
        blk->tree = rem->tree;
        blk->prev = rem->prev;
        if (blk->prev != NIL) c->b[blk->prev].next = n;
        blk->next = i;
        rem->prev = n;
        rem->addr += size;
        rem->size -= size;
        if (at) bset_rekey_at(set_of(c, rem), *at, rem->size, rem->addr, i);
        else if (pool_insert(c, i)) return MS_ERR_NOMEM;
        if (already_split) /* an inactive split piece shrinks by size */
            alloc_stat_sub(&a->stats.inactive_split_bytes, size);
        else /* a whole segment becomes split: its remainder is an inactive split piece */
            alloc_stat_add(&a->stats.inactive_split_bytes, &a->stats.inactive_split_peak_bytes,
                           rem->size);
        a->stats.num_splits++;
        i = n;
    } else {
        if (at) { /* handed out whole: out of its set */
            bset_erase_at(set_of(c, &c->b[i]), *at);
            pool_of(c, &c->b[i])->n--;
        }
        if (already_split) alloc_stat_sub(&a->stats.inactive_split_bytes, c->b[i].size);
    }
    cblk *b = &c->b[i];
    b->allocated = 1;
    b->requested = orig_bytes;
    b->unmapped = handle != NULL;
    if (handle) *handle = i; /* found by it at the release: no entry by address */
    else if (live_put(c, b->addr, i)) return MS_ERR_NOMEM;
    alloc_stat_add(&a->stats.allocated_bytes, &a->stats.allocated_peak_bytes, b->size);
    alloc_stat_add(&a->stats.active_bytes, &a->stats.active_peak_bytes, b->size);
    alloc_stat_add(&a->stats.requested_bytes, &a->stats.requested_peak_bytes, orig_bytes);
    *addr = b->addr;
    return MS_OK;
}

/* caching_block, and with handle (not NULL) caching_block_h. */
static FLAT ms_status block_common(alloc_t *a, uint64_t bytes, int stream, uint64_t tag,
                              uint64_t *addr, uint32_t *handle)
{
    (void)tag;
    caching *c = impl(a);
    *addr = 0;
    if (bytes == 0) return MS_OK;        /* PyTorch: null pointer, nothing allocated */
    if (bytes >= ONE_EIB) return MS_ERR_OOM;
    uint64_t size = alloc_caching_round_size(bytes, c->divisions);
    int small = size <= ALLOC_CACHING_SMALL_SIZE_BYTES;
    int32_t s = (int32_t)stream;
    /* the stream's set, with room for the remainder of a split, before anything changes */
    uint32_t tree = tree_find(c, small, s, 1);
    if (tree == NIL || bset_reserve(c->trees[tree].set)) return MS_ERR_NOMEM;
    bset_pos at;
    uint32_t i = get_free_block(c, tree, size, &at);
    const bset_pos *found = i == NIL ? NULL : &at;
    if (i == NIL) {
        uint64_t seg = alloc_caching_segment_bytes(size);
        ms_status st = alloc_segment(a, small, s, tree, seg, 0, &i);
        if (st == MS_ERR_OOM) {
            int freed;
            st = release_available(a, tree, size, &freed);
            if (st != MS_OK) return st;
            st = freed ? alloc_segment(a, small, s, tree, seg, 0, &i) : MS_ERR_OOM;
        }
        if (st == MS_ERR_OOM) {
            st = release_cached(a);
            if (st != MS_OK) return st;
            st = alloc_segment(a, small, s, tree, seg, 1, &i);
        }
        if (st != MS_OK) return st;
    }
    return alloc_found(a, i, found, size, bytes, addr, handle);
}

static ms_status caching_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag,
                               uint64_t *addr)
{
    return block_common(a, bytes, stream, tag, addr, NULL);
}

static ms_status caching_block_h(alloc_t *a, uint64_t bytes, int stream, uint64_t tag,
                                 uint64_t *addr, uint32_t *handle)
{
    *handle = ALLOC_NO_HANDLE; /* a zero-byte request, or a failure */
    return block_common(a, bytes, stream, tag, addr, handle);
}

/* try_merge_blocks: absorb free neighbour src into dst (the caller sees to their set
 * entries); returns the bytes absorbed. */
static uint64_t absorb(caching *c, uint32_t dst, uint32_t src)
{
    cblk *d = &c->b[dst], *s = &c->b[src];
    if (d->prev == src) {
        d->addr = s->addr;
        d->prev = s->prev;
        if (d->prev != NIL) c->b[d->prev].next = dst;
    } else {
        d->next = s->next;
        if (d->next != NIL) c->b[d->next].prev = dst;
    }
    uint64_t absorbed = s->size;
    d->size += absorbed;
    blk_recycle(c, src);
    return absorbed;
}

/* Inlined into both ways of releasing, so that the way by address (the replay's) saves no
 * registers twice: 8.8 M fewer instructions in the binary replay of BENCHMARKS.md. */
static inline __attribute__((always_inline)) ms_status free_block(alloc_t *a, uint32_t i);

/* The allocated block at addr that caching_block_h gave (a search: their callers release
 * them by handle); NIL when none. */
static OUTLINE uint32_t find_unmapped(const caching *c, uint64_t addr)
{
    for (size_t i = 0; i < c->nb; i++) {
        const cblk *b = &c->b[i];
        if (b->live && b->allocated && b->unmapped && b->addr == addr) return (uint32_t)i;
    }
    return NIL;
}

static FLAT ms_status caching_release(alloc_t *a, uint64_t addr)
{
    caching *c = impl(a);
    if (addr == 0) return MS_OK;         /* free(nullptr) */
    uint64_t v;
    if (u64map_del(c->live, addr, &v)) {
        if (bset_reserve(set_of(c, &c->b[v]))) { /* room to put it back, before anything
                                                    changes */
            u64map_put(c->live, addr, v); /* the slot it left: no growth, cannot fail */
            return MS_ERR_NOMEM;
        }
        return free_block(a, (uint32_t)v);
    }
    uint32_t i = find_unmapped(c, addr);
    if (i == NIL) return MS_ERR_INVALID;
    if (bset_reserve(set_of(c, &c->b[i]))) return MS_ERR_NOMEM;
    c->b[i].unmapped = 0;
    return free_block(a, i);
}

/* caching_release kept out of caching_release_h, which falls back on it. */
static OUTLINE ms_status release_by_addr(alloc_t *a, uint64_t addr)
{
    return caching_release(a, addr);
}

static FLAT ms_status caching_release_h(alloc_t *a, uint64_t addr, uint32_t handle)
{
    caching *c = impl(a);
    if (addr == 0) return MS_OK;
    const cblk *b = handle < c->nb ? &c->b[handle] : NULL;
    if (!b || !b->live || !b->allocated || !b->unmapped || b->addr != addr)
        return release_by_addr(a, addr); /* not the handle of the block at addr */
    if (bset_reserve(set_of(c, b))) return MS_ERR_NOMEM; /* before anything changes */
    c->b[handle].unmapped = 0;
    return free_block(a, handle);
}

/* free + free_block, for block i, out of the live blocks (room in its set reserved):
 * coalesce with free neighbours and return the block to its pool. A free neighbour's set
 * entry (the one below's, where both are free) becomes the merged block's, with its new
 * key. */
static inline __attribute__((always_inline)) ms_status free_block(alloc_t *a, uint32_t i)
{
    caching *c = impl(a);
    cblk *b = &c->b[i];
    uint64_t orig_size = b->size, requested = b->requested;
    b->allocated = 0;
    b->requested = 0;
    alloc_stat_sub(&a->stats.allocated_bytes, orig_size);
    int64_t net_split_bytes = 0;
    uint32_t prev = b->prev, next = b->next;
    int prev_free = prev != NIL && !c->b[prev].allocated;
    int next_free = next != NIL && !c->b[next].allocated;
    if (prev_free && next_free) pool_erase(c, next);
    uint32_t host = prev_free ? prev : next_free ? next : NIL;
    bset_pos at;
    int hosted = host != NIL &&
                 bset_find(set_of(c, b), c->b[host].size, c->b[host].addr, host, &at);
    if (prev_free) net_split_bytes -= (int64_t)absorb(c, i, prev);
    if (next_free) net_split_bytes -= (int64_t)absorb(c, i, next);
    b = &c->b[i];
    if (hosted) bset_rekey_at(set_of(c, b), at, b->size, b->addr, i);
    else if (pool_insert(c, i)) return MS_ERR_NOMEM;
    if (is_split(b)) net_split_bytes += (int64_t)b->size;
    if (net_split_bytes > 0)
        alloc_stat_add(&a->stats.inactive_split_bytes, &a->stats.inactive_split_peak_bytes,
                       (uint64_t)net_split_bytes);
    else if (net_split_bytes < 0)
        alloc_stat_sub(&a->stats.inactive_split_bytes, (uint64_t)-net_split_bytes);
    alloc_stat_sub(&a->stats.active_bytes, orig_size);
    alloc_stat_sub(&a->stats.requested_bytes, requested);
    return MS_OK;
}

static ms_status caching_empty_cache(alloc_t *a) { return release_cached(a); }

static void caching_set_events_hook(alloc_t *a, alloc_events_fn fn, void *ctx)
{
    if (!a->impl) return;
    impl(a)->ev_fn = fn;
    impl(a)->ev_ctx = ctx;
}

static ms_status caching_create(alloc_t *a)
{
    const alloc_config *cfg = &a->cfg;
    /* PyTorch's config parser's rules (alloc_config_problem says which is broken). */
    if (alloc_config_problem(cfg)) return MS_ERR_INVALID;
    if (!a->be.ops || !a->be.ops->dev_malloc || !a->be.ops->dev_free ||
        !a->be.ops->synchronize)
        return MS_ERR_INVALID;
    caching *c = calloc(1, sizeof *c);
    if (!c) return MS_ERR_NOMEM;
    c->free_slot = NIL;
    c->small.small = 1;
    memset(c->hint, 0xff, sizeof c->hint); /* NIL: no tree yet */
    c->max_split = cfg->max_split_size_bytes;
    c->divisions = cfg->roundup_power2_divisions;
    c->live = u64map_new(64); /* grows with the live blocks; small stays in cache */
    /* room for a run's segments without growing (a gpt-7b simulation makes about 220) */
    c->segs = u64map_new(256);
    c->tree_of = u64map_new(8);
    if (!c->live || !c->segs || !c->tree_of) {
        u64map_free(c->live);
        u64map_free(c->segs);
        u64map_free(c->tree_of);
        free(c);
        return MS_ERR_NOMEM;
    }
    a->impl = c;
    return MS_OK;
}

/* Destroying the allocator does not free device memory (the backend owns it and is
 * destroyed with it), like a process exit; call empty_cache first to return segments. */
static void caching_destroy(alloc_t *a)
{
    caching *c = impl(a);
    if (!c) return;
    u64map_free(c->live);
    u64map_free(c->segs);
    u64map_free(c->tree_of);
    for (size_t t = 0; t < c->ntrees; t++) bset_free(c->trees[t].set);
    free(c->b);
    free(c->trees);
    free(c->scratch);
    free(c->order);
    free(c);
    a->impl = NULL;
}

/* ---------------------------------------------------------------- check and dump */

typedef struct segref { uint64_t addr; uint32_t head; } segref;

static int segref_cmp(const void *x, const void *y)
{
    const segref *p = x, *q = y;
    return p->addr < q->addr ? -1 : p->addr > q->addr;
}

/* Segment heads sorted by address (malloc'ed; NULL with *n = 0 on no memory). */
static segref *segment_heads(const caching *c, size_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < c->nb; i++)
        if (c->b[i].live && c->b[i].prev == NIL) k++;
    segref *v = malloc((k ? k : 1) * sizeof *v);
    *n = 0;
    if (!v) return NULL;
    for (size_t i = 0; i < c->nb; i++)
        if (c->b[i].live && c->b[i].prev == NIL)
            v[(*n)++] = (segref){c->b[i].addr, (uint32_t)i};
    qsort(v, *n, sizeof *v, segref_cmp);
    return v;
}

typedef struct recount {
    uint64_t allocated, requested, reserved, inactive_split;
    size_t nfree, nalloc, nblocks;
    size_t nunmapped;        /* allocated blocks held by handle (not in caching.live) */
} recount;

#define ULL(x) ((unsigned long long)(x))
#define BAD(...) (snprintf(why, n, __VA_ARGS__), -1)

/* One block of tree t as check_pool finds it: free, of the tree's pool and stream. */
static int check_free_block(const caching *c, const cpool *p, uint32_t t, const cblk *b,
                            char *why, size_t n)
{
    const char *name = p->small ? "small" : "large";
    if (!b->live || b->allocated || b->small != p->small)
        return BAD("%s pool holds block 0x%llx that is %s", name, ULL(b->addr),
                   !b->live ? "dead" : b->allocated ? "allocated" : "of the other pool");
    if (b->tree != t || b->stream != c->trees[t].stream)
        return BAD("%s pool: block 0x%llx in the set of another stream", name, ULL(b->addr));
    return 0;
}

static int check_pool(caching *c, const cpool *p, char *why, size_t n)
{
    const char *name = p->small ? "small" : "large";
    long nt = pool_trees(c, p);
    if (nt < 0 ||
        ms_grow((void **)&c->scratch, &c->cap_scratch, p->n + 1, sizeof *c->scratch) != MS_OK)
        return BAD("out of memory");
    size_t total = 0;
    for (long k = 0; k < nt; k++) {
        uint32_t t = c->order[k];
        const char *bad = bset_check(c->trees[t].set);
        if (bad) return BAD("%s pool, stream %d: %s", name, (int)c->trees[t].stream, bad);
        size_t m = bset_ids(c->trees[t].set, c->scratch, p->n + 1);
        if (m > p->n - total) break;
        for (size_t j = 0; j < m; j++)
            if (check_free_block(c, p, t, &c->b[c->scratch[j]], why, n)) return -1;
        total += m;
    }
    if (total != p->n)
        return BAD("%s pool: its sets hold more or fewer than %zu blocks", name, p->n);
    return 0;
}

/* The blocks of one segment: linked both ways, tiling it exactly, one stream and pool,
 * no two free neighbours; adds them to the recount. */
static int check_segment(const caching *c, const segref *sg, recount *rc, char *why, size_t n)
{
    uint64_t bytes, end = sg->addr;
    if (!u64map_get(c->segs, sg->addr, &bytes))
        return BAD("segment 0x%llx is not a device allocation", ULL(sg->addr));
    const cblk *first = &c->b[sg->head];
    size_t pieces = 0;
    for (uint32_t i = sg->head, last = NIL; i != NIL; last = i, i = c->b[i].next) {
        const cblk *b = &c->b[i];
        if (!b->live || b->prev != last) return BAD("broken links in segment 0x%llx",
                                                    ULL(sg->addr));
        if (b->addr != end) return BAD("block 0x%llx does not follow its neighbour (0x%llx)",
                                       ULL(b->addr), ULL(end));
        if (b->stream != first->stream || b->small != first->small || b->size == 0)
            return BAD("block 0x%llx: empty, or stream or pool differs from its segment",
                       ULL(b->addr));
        if (!b->allocated && last != NIL && !c->b[last].allocated)
            return BAD("adjacent free blocks at 0x%llx not coalesced", ULL(b->addr));
        end += b->size;
        pieces++;
    }
    if (end - sg->addr != bytes)
        return BAD("blocks of segment 0x%llx cover %llu bytes, the segment has %llu",
                   ULL(sg->addr), ULL(end - sg->addr), ULL(bytes));
    rc->reserved += bytes;
    for (uint32_t i = sg->head; i != NIL; i = c->b[i].next) {
        const cblk *b = &c->b[i];
        uint64_t v;
        rc->nblocks++;
        if (!b->allocated) {
            rc->nfree++;
            if (pieces > 1) rc->inactive_split += b->size;
            continue;
        }
        if (b->unmapped) rc->nunmapped++;
        else if (!u64map_get(c->live, b->addr, &v) || v != i)
            return BAD("allocated block 0x%llx missing from the address map", ULL(b->addr));
        if (b->requested > b->size)
            return BAD("block 0x%llx smaller than its request", ULL(b->addr));
        rc->nalloc++;
        rc->allocated += b->size;
        rc->requested += b->requested;
    }
    return 0;
}

static int check_counts(const alloc_t *a, const recount *rc, char *why, size_t n)
{
    const caching *c = impl(a);
    const alloc_stats *s = &a->stats;
    size_t nlive = 0;
    for (size_t i = 0; i < c->nb; i++) nlive += c->b[i].live;
    if (nlive != rc->nblocks) return BAD("%zu live blocks, %zu in segments", nlive, rc->nblocks);
    if (rc->nfree != c->small.n + c->large.n)
        return BAD("%zu free blocks, pools hold %zu", rc->nfree, c->small.n + c->large.n);
    if (rc->nalloc != u64map_count(c->live) + rc->nunmapped)
        return BAD("%zu allocated blocks, address map holds %zu and handles %zu", rc->nalloc,
                   u64map_count(c->live), rc->nunmapped);
    if (s->allocated_bytes != rc->allocated || s->requested_bytes != rc->requested ||
        s->reserved_bytes != rc->reserved || s->active_bytes != rc->allocated ||
        s->inactive_split_bytes != rc->inactive_split)
        return BAD("stats (allocated %llu requested %llu reserved %llu active %llu inactive "
                   "split %llu) differ from a recount (%llu %llu %llu %llu %llu)",
                   ULL(s->allocated_bytes), ULL(s->requested_bytes), ULL(s->reserved_bytes),
                   ULL(s->active_bytes), ULL(s->inactive_split_bytes), ULL(rc->allocated),
                   ULL(rc->requested), ULL(rc->reserved), ULL(rc->allocated),
                   ULL(rc->inactive_split));
    if (s->allocated_peak_bytes < s->allocated_bytes ||
        s->reserved_peak_bytes < s->reserved_bytes || s->active_peak_bytes < s->active_bytes ||
        s->requested_peak_bytes < s->requested_bytes ||
        s->inactive_split_peak_bytes < s->inactive_split_bytes)
        return BAD("a peak is below its current value");
    return 0;
}

static ms_status caching_check(const alloc_t *a, char *why, size_t n)
{
    caching *c = impl(a);
    if (check_pool(c, &c->small, why, n) || check_pool(c, &c->large, why, n))
        return MS_ERR_INVALID;
    size_t nseg = 0;
    segref *segs = segment_heads(c, &nseg);
    if (!segs) {
        snprintf(why, n, "out of memory");
        return MS_ERR_NOMEM;
    }
    recount rc = {0};
    int bad = 0;
    for (size_t k = 0; k < nseg && !bad; k++) bad = check_segment(c, &segs[k], &rc, why, n);
    /* Heads are sorted by address: each segment must end before the next one starts. */
    for (size_t k = 0; k + 1 < nseg && !bad; k++) {
        uint64_t bytes = 0;
        u64map_get(c->segs, segs[k].addr, &bytes);
        if (segs[k].addr + bytes > segs[k + 1].addr)
            bad = BAD("segments 0x%llx and 0x%llx overlap", ULL(segs[k].addr),
                      ULL(segs[k + 1].addr));
    }
    if (!bad && nseg != u64map_count(c->segs))
        bad = BAD("%zu segments, %zu device allocations", nseg, u64map_count(c->segs));
    if (!bad) bad = check_counts(a, &rc, why, n);
    free(segs);
    return bad ? MS_ERR_INVALID : MS_OK;
}

static void caching_dump(const alloc_t *a, FILE *f)
{
    caching *c = impl(a);
    const alloc_stats *s = &a->stats;
    char b1[32], b2[32], b3[32], b4[32];
    fprintf(f, "caching allocator: allocated %s, reserved %s, requested %s, inactive split %s\n",
            ms_fmt_bytes(s->allocated_bytes, b1, sizeof b1),
            ms_fmt_bytes(s->reserved_bytes, b2, sizeof b2),
            ms_fmt_bytes(s->requested_bytes, b3, sizeof b3),
            ms_fmt_bytes(s->inactive_split_bytes, b4, sizeof b4));
    fprintf(f, "  peaks: allocated %llu reserved %llu; segments %llu allocated / %llu freed; "
            "retries %llu; free blocks small %zu large %zu\n",
            (unsigned long long)s->allocated_peak_bytes,
            (unsigned long long)s->reserved_peak_bytes,
            (unsigned long long)s->num_segment_allocs, (unsigned long long)s->num_segment_frees,
            (unsigned long long)s->num_alloc_retries, c->small.n, c->large.n);
    size_t nseg = 0;
    segref *segs = segment_heads(c, &nseg);
    if (!segs) return;
    for (size_t k = 0; k < nseg; k++) {
        uint64_t bytes = 0;
        u64map_get(c->segs, segs[k].addr, &bytes);
        const cblk *h = &c->b[segs[k].head];
        fprintf(f, "segment 0x%llx %llu bytes (%s) %s pool stream %d\n",
                (unsigned long long)segs[k].addr, (unsigned long long)bytes,
                ms_fmt_bytes(bytes, b1, sizeof b1), h->small ? "small" : "large",
                (int)h->stream);
        for (uint32_t i = segs[k].head; i != NIL; i = c->b[i].next) {
            const cblk *b = &c->b[i];
            if (b->allocated)
                fprintf(f, "  0x%llx +%llu %llu allocated (requested %llu)\n",
                        (unsigned long long)b->addr, (unsigned long long)(b->addr - segs[k].addr),
                        (unsigned long long)b->size, (unsigned long long)b->requested);
            else
                fprintf(f, "  0x%llx +%llu %llu free\n", (unsigned long long)b->addr,
                        (unsigned long long)(b->addr - segs[k].addr),
                        (unsigned long long)b->size);
        }
    }
    free(segs);
}

/* alloc_config_problem (alloc.c) checks max_split_size against the same constant. */
_Static_assert(ALLOC_MIN_MAX_SPLIT_BYTES == ALLOC_CACHING_LARGE_BUFFER_BYTES,
               "PyTorch's max_split_size floor is its kLargeBuffer");

const alloc_vtable alloc_caching_vt = {
    "caching",
    "PyTorch's caching allocator: 512 B rounding, small/large pools, best fit, split, "
    "coalesce, free-cached-and-retry",
    "PyTorch CUDACachingAllocator (c10/cuda), v2.11",
    caching_create,
    caching_destroy,
    caching_block,
    caching_release,
    caching_empty_cache,
    caching_check,
    caching_dump,
    ALLOC_CAP_EVENTS_HOOK,
    caching_set_events_hook,
    caching_block_h,
    caching_release_h,
};

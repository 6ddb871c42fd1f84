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
 *  - each pool (small, large) keeps its FREE blocks in a treap ordered by
 *    (stream, size, address) — PyTorch's BlockComparatorSize — so a request is a
 *    lower_bound, as PyTorch's std::set::lower_bound;
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

#define NIL UINT32_MAX
#define ONE_EIB (1ULL << 60)

typedef struct cblk {
    uint64_t addr, size;
    uint64_t requested;      /* unrounded request while allocated */
    uint32_t prev, next;     /* neighbours in the segment, address order; NIL at the ends */
    uint32_t left, right;    /* treap children while free */
    uint32_t prio;           /* treap priority (max-heap) */
    int32_t stream;
    uint8_t allocated, small, live;
} cblk;

typedef struct cpool {
    uint32_t root;           /* treap of free blocks by (stream, size, addr) */
    size_t n;
    int small;
} cpool;

typedef struct caching {
    cblk *b;
    size_t nb, capb;         /* arena: slots in use or on the free list, capacity */
    uint32_t free_slot;      /* free-list head (through .next) */
    cpool small, large;
    u64map *live;            /* addr -> index of allocated blocks */
    u64map *segs;            /* segment base -> bytes */
    uint32_t rng;            /* treap priorities: deterministic xorshift */
    uint64_t max_split;
    unsigned divisions;
    uint32_t *scratch;       /* release_blocks / check work list */
    size_t cap_scratch;
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

static uint32_t next_prio(caching *c)
{
    uint32_t x = c->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return c->rng = x;
}

static uint32_t blk_new(caching *c)
{
    uint32_t i;
    if (c->free_slot != NIL) {
        i = c->free_slot;
        c->free_slot = c->b[i].next;
    } else {
        if (c->nb >= NIL - 1) return NIL;
        if (ms_grow((void **)&c->b, &c->capb, c->nb + 1, sizeof *c->b) != MS_OK) return NIL;
        i = (uint32_t)c->nb++;
    }
    cblk *b = &c->b[i];
    memset(b, 0, sizeof *b);
    b->prev = b->next = b->left = b->right = NIL;
    b->prio = next_prio(c);
    b->live = 1;
    return i;
}

static void blk_recycle(caching *c, uint32_t i)
{
    c->b[i].live = 0;
    c->b[i].next = c->free_slot;
    c->free_slot = i;
}

/* ---------------------------------------------------------------- treap */

static inline int key_lt(int32_t s1, uint64_t z1, uint64_t a1, int32_t s2, uint64_t z2,
                         uint64_t a2)
{
    if (s1 != s2) return s1 < s2;
    if (z1 != z2) return z1 < z2;
    return a1 < a2;
}

static inline int blk_lt(const cblk *x, const cblk *y)
{
    return key_lt(x->stream, x->size, x->addr, y->stream, y->size, y->addr);
}

/* Splits treap t into nodes < k (to *l) and nodes >= k (to *r). */
static void tsplit(cblk *B, uint32_t t, const cblk *k, uint32_t *l, uint32_t *r)
{
    while (t != NIL) {
        if (blk_lt(&B[t], k)) {
            *l = t;
            l = &B[t].right;
            t = B[t].right;
        } else {
            *r = t;
            r = &B[t].left;
            t = B[t].left;
        }
    }
    *l = *r = NIL;
}

/* Joins treaps a and b where every key of a is below every key of b. */
static uint32_t tmerge(cblk *B, uint32_t a, uint32_t b)
{
    uint32_t root = NIL, *link = &root;
    while (a != NIL && b != NIL) {
        if (B[a].prio > B[b].prio) {
            *link = a;
            link = &B[a].right;
            a = B[a].right;
        } else {
            *link = b;
            link = &B[b].left;
            b = B[b].left;
        }
    }
    *link = a != NIL ? a : b;
    return root;
}

static void pool_insert(caching *c, cpool *p, uint32_t n)
{
    cblk *B = c->b;
    uint32_t *link = &p->root;
    while (*link != NIL && B[*link].prio >= B[n].prio)
        link = blk_lt(&B[n], &B[*link]) ? &B[*link].left : &B[*link].right;
    tsplit(B, *link, &B[n], &B[n].left, &B[n].right);
    *link = n;
    p->n++;
}

/* Removes free block n (found by its key). Returns -1 if it is not in the pool. */
static int pool_erase(caching *c, cpool *p, uint32_t n)
{
    cblk *B = c->b;
    uint32_t *link = &p->root;
    while (*link != n) {
        if (*link == NIL) return -1;
        link = blk_lt(&B[n], &B[*link]) ? &B[*link].left : &B[*link].right;
    }
    *link = tmerge(B, B[n].left, B[n].right);
    B[n].left = B[n].right = NIL;
    p->n--;
    return 0;
}

/* The first free block with key >= (stream, size, addr); *at: the link that points to
 * it (so that it can be taken out without a second descent). */
static uint32_t pool_lower_bound(caching *c, cpool *p, int32_t stream, uint64_t size,
                                 uint64_t addr, uint32_t **at)
{
    cblk *B = c->b;
    uint32_t *link = &p->root, best = NIL;
    *at = NULL;
    while (*link != NIL) {
        uint32_t t = *link;
        if (key_lt(B[t].stream, B[t].size, B[t].addr, stream, size, addr)) {
            link = &B[t].right;
        } else {
            best = t;
            *at = link;
            link = &B[t].left;
        }
    }
    return best;
}

/* The last free block with key < (stream, size, addr). */
static uint32_t pool_pred(const caching *c, const cpool *p, int32_t stream, uint64_t size,
                          uint64_t addr)
{
    const cblk *B = c->b;
    uint32_t t = p->root, best = NIL;
    while (t != NIL) {
        if (key_lt(B[t].stream, B[t].size, B[t].addr, stream, size, addr)) {
            best = t;
            t = B[t].right;
        } else {
            t = B[t].left;
        }
    }
    return best;
}

static void collect_rec(const cblk *B, uint32_t t, uint32_t *out, size_t *n, size_t max)
{
    while (t != NIL && *n <= max) {
        collect_rec(B, B[t].left, out, n, max);
        if (*n < max) out[*n] = t;
        (*n)++;
        t = B[t].right;
    }
}

/* In-order list of a pool's free blocks into c->scratch (a workspace, so check() may use
 * it too); returns the count, or -1 when out of memory or the tree disagrees with p->n. */
static long pool_collect(caching *c, const cpool *p)
{
    if (ms_grow((void **)&c->scratch, &c->cap_scratch, p->n + 1, sizeof *c->scratch) != MS_OK)
        return -1;
    size_t n = 0;
    collect_rec(c->b, p->root, c->scratch, &n, p->n);
    return n == p->n ? (long)n : -1;
}

/* ---------------------------------------------------------------- the allocator */

static caching *impl(const alloc_t *a) { return a->impl; }

static cpool *pool_of(caching *c, const cblk *b) { return b->small ? &c->small : &c->large; }

static int is_split(const cblk *b) { return b->prev != NIL || b->next != NIL; }

/* get_free_block: best fit by lower_bound, same stream, and the max_split_size rules. */
static uint32_t get_free_block(caching *c, cpool *p, int32_t stream, uint64_t size)
{
    uint32_t *at;
    uint32_t i = pool_lower_bound(c, p, stream, size, 0, &at);
    if (i == NIL || c->b[i].stream != stream) return NIL;
    uint64_t bsize = c->b[i].size;
    /* Do not hand an oversize block to a request below max_split_size. */
    if (size < c->max_split && bsize >= c->max_split) return NIL;
    /* An oversize request may take a larger cached block, but only within a limit. */
    if (size >= c->max_split && bsize >= size + ALLOC_CACHING_MAX_NON_SPLIT_ROUNDING_BYTES)
        return NIL;
    cblk *B = c->b; /* pool_erase's unlink, at the link the search found */
    *at = tmerge(B, B[i].left, B[i].right);
    B[i].left = B[i].right = NIL;
    p->n--;
    return i;
}

/* alloc_block: one cudaMalloc of a whole segment. MS_ERR_OOM when the device is full. */
static ms_status alloc_segment(alloc_t *a, int small, int32_t stream, uint64_t bytes,
                               int is_retry, uint32_t *out)
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
    pool_erase(c, pool_of(c, b), i);
    blk_recycle(c, i);
    return MS_OK;
}

/* release_available_cached_blocks: with max_split_size set, free oversize cached blocks of
 * this stream — the smallest one big enough, else the largest ones until enough is freed.
 * Sets *freed to whether the caller should retry. */
static ms_status release_available(alloc_t *a, cpool *p, int32_t stream, uint64_t size,
                                   int *freed)
{
    caching *c = impl(a);
    *freed = 0;
    if (c->max_split == UINT64_MAX) return MS_OK;
    uint64_t key = size < c->max_split ? c->max_split : size;
    uint32_t *at;
    uint32_t i = pool_lower_bound(c, p, stream, key, 0, &at);
    if (i != NIL && c->b[i].stream == stream) {
        /* Oversize free blocks are whole segments: a split leaves pieces below
         * max_split_size (PyTorch relies on the same fact). */
        if (is_split(&c->b[i])) return MS_OK;
        ms_status st = release_block(a, i);
        if (st == MS_OK) *freed = 1;
        return st;
    }
    uint64_t released = 0;
    uint32_t cur = pool_pred(c, p, stream, key, 0);
    while (cur != NIL && released < key && c->b[cur].size >= c->max_split &&
           c->b[cur].stream == stream) {
        cblk *b = &c->b[cur];
        uint32_t before = pool_pred(c, p, b->stream, b->size, b->addr);
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
static ms_status release_cached(alloc_t *a)
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

/* alloc_found_block: split off the request at the block's low end if should_split, mark
 * it allocated and update the statistics as PyTorch does. */
static ms_status alloc_found(alloc_t *a, uint32_t i, uint64_t size, uint64_t orig_bytes,
                             uint64_t *addr)
{
    caching *c = impl(a);
    int already_split = is_split(&c->b[i]);
    if (should_split(c, &c->b[i], size)) {
        uint32_t n = blk_new(c);
        if (n == NIL) {
            pool_insert(c, pool_of(c, &c->b[i]), i);
            return MS_ERR_NOMEM;
        }
        cblk *rem = &c->b[i], *blk = &c->b[n];
        blk->addr = rem->addr;
        blk->size = size;
        blk->stream = rem->stream;
        blk->small = rem->small;
        blk->prev = rem->prev;
        if (blk->prev != NIL) c->b[blk->prev].next = n;
        blk->next = i;
        rem->prev = n;
        rem->addr += size;
        rem->size -= size;
        pool_insert(c, pool_of(c, rem), i);
        if (already_split) /* an inactive split piece shrinks by size */
            alloc_stat_sub(&a->stats.inactive_split_bytes, size);
        else /* a whole segment becomes split: its remainder is an inactive split piece */
            alloc_stat_add(&a->stats.inactive_split_bytes, &a->stats.inactive_split_peak_bytes,
                           rem->size);
        a->stats.num_splits++;
        i = n;
    } else if (already_split) {
        alloc_stat_sub(&a->stats.inactive_split_bytes, c->b[i].size);
    }
    cblk *b = &c->b[i];
    b->allocated = 1;
    b->requested = orig_bytes;
    if (u64map_put(c->live, b->addr, i)) return MS_ERR_NOMEM;
    alloc_stat_add(&a->stats.allocated_bytes, &a->stats.allocated_peak_bytes, b->size);
    alloc_stat_add(&a->stats.active_bytes, &a->stats.active_peak_bytes, b->size);
    alloc_stat_add(&a->stats.requested_bytes, &a->stats.requested_peak_bytes, orig_bytes);
    *addr = b->addr;
    return MS_OK;
}

static ms_status caching_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag,
                               uint64_t *addr)
{
    (void)tag;
    caching *c = impl(a);
    *addr = 0;
    if (bytes == 0) return MS_OK;        /* PyTorch: null pointer, nothing allocated */
    if (bytes >= ONE_EIB) return MS_ERR_OOM;
    uint64_t size = alloc_caching_round_size(bytes, c->divisions);
    int small = size <= ALLOC_CACHING_SMALL_SIZE_BYTES;
    cpool *p = small ? &c->small : &c->large;
    int32_t s = (int32_t)stream;
    uint32_t i = get_free_block(c, p, s, size);
    if (i == NIL) {
        uint64_t seg = alloc_caching_segment_bytes(size);
        ms_status st = alloc_segment(a, small, s, seg, 0, &i);
        if (st == MS_ERR_OOM) {
            int freed;
            st = release_available(a, p, s, size, &freed);
            if (st != MS_OK) return st;
            st = freed ? alloc_segment(a, small, s, seg, 0, &i) : MS_ERR_OOM;
        }
        if (st == MS_ERR_OOM) {
            st = release_cached(a);
            if (st != MS_OK) return st;
            st = alloc_segment(a, small, s, seg, 1, &i);
        }
        if (st != MS_OK) return st;
    }
    return alloc_found(a, i, size, bytes, addr);
}

/* try_merge_blocks: absorb free neighbour src into dst; returns the bytes absorbed. */
static uint64_t try_merge(caching *c, uint32_t dst, uint32_t src)
{
    if (src == NIL || c->b[src].allocated) return 0;
    cblk *d = &c->b[dst], *s = &c->b[src];
    pool_erase(c, pool_of(c, s), src);
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

/* free + free_block: coalesce with free neighbours and return the block to its pool. */
static ms_status caching_release(alloc_t *a, uint64_t addr)
{
    caching *c = impl(a);
    if (addr == 0) return MS_OK;         /* free(nullptr) */
    uint64_t v;
    if (!u64map_del(c->live, addr, &v)) return MS_ERR_INVALID;
    uint32_t i = (uint32_t)v;
    cblk *b = &c->b[i];
    uint64_t orig_size = b->size, requested = b->requested;
    b->allocated = 0;
    b->requested = 0;
    alloc_stat_sub(&a->stats.allocated_bytes, orig_size);
    int64_t net_split_bytes = 0;
    uint32_t prev = b->prev, next = b->next;
    net_split_bytes -= (int64_t)try_merge(c, i, prev);
    net_split_bytes -= (int64_t)try_merge(c, i, next);
    b = &c->b[i];
    pool_insert(c, pool_of(c, b), i);
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
    c->small.root = c->large.root = NIL;
    c->small.small = 1;
    c->rng = 0x9e3779b9u;
    c->max_split = cfg->max_split_size_bytes;
    c->divisions = cfg->roundup_power2_divisions;
    c->live = u64map_new(64); /* grows with the live blocks; small stays in cache */
    c->segs = u64map_new(64);
    if (!c->live || !c->segs) {
        u64map_free(c->live);
        u64map_free(c->segs);
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
    free(c->b);
    free(c->scratch);
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
} recount;

#define ULL(x) ((unsigned long long)(x))
#define BAD(...) (snprintf(why, n, __VA_ARGS__), -1)

static int check_pool(caching *c, const cpool *p, char *why, size_t n)
{
    const char *name = p->small ? "small" : "large";
    long k = pool_collect(c, p);
    if (k < 0) return BAD("%s pool: tree holds more or fewer than %zu blocks", name, p->n);
    for (long j = 0; j < k; j++) {
        const cblk *b = &c->b[c->scratch[j]];
        if (!b->live || b->allocated || b->small != p->small)
            return BAD("%s pool holds block 0x%llx that is %s", name, ULL(b->addr),
                       !b->live ? "dead" : b->allocated ? "allocated" : "of the other pool");
        if (j > 0 && !blk_lt(&c->b[c->scratch[j - 1]], b))
            return BAD("%s pool out of order at block 0x%llx", name, ULL(b->addr));
        if ((b->left != NIL && c->b[b->left].prio > b->prio) ||
            (b->right != NIL && c->b[b->right].prio > b->prio))
            return BAD("%s pool: heap order broken at 0x%llx", name, ULL(b->addr));
    }
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
        if (!u64map_get(c->live, b->addr, &v) || v != i)
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
    if (rc->nalloc != u64map_count(c->live))
        return BAD("%zu allocated blocks, address map holds %zu", rc->nalloc,
                   u64map_count(c->live));
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
};

/* bset.c — the ordered set of free blocks (see bset.h), used by the caching allocator's
 * pools (memory/alloc_caching.c), which call it at every allocation and free.
 *
 * Layout: a directory of the distinct sizes, ascending, in one array, and for each size a
 * bucket of its entries ordered by address. A pool's free blocks come in few sizes (the
 * 192-configuration sweep of BENCHMARKS.md: 128-255 free blocks of 8-15 sizes in most of
 * its sets; the 1.34 M-event replay: 8-31 blocks of up to 31 sizes), so best fit is a short
 * search of the size array and the bucket's first entry, and an insertion or erasure
 * searches and moves the few entries of one size, 16 bytes each. (size, address) order is
 * the directory's order and then the bucket's.
 *
 * Memory: a bucket keeps room for one more entry, the set keeps a spare array for a new
 * bucket and the directory a free slot (the set is "ready"); an insertion restores that
 * after itself, and where it cannot (out of memory) bset_reserve restores it before the
 * next. Arrays of emptied buckets are kept for new ones, a few of them.
 *
 * Large sets: the moves grow with a bucket's entries and with the directory's sizes, so a
 * set of many blocks of one size or of many sizes (200,000 free blocks took 20 s of churn
 * against 0.09 s in a B+-tree) becomes a B+-tree (memory/bset_tree.c) once a bucket holds
 * more than BUCKET_ENTRIES_MAX entries or the directory more than SIZES_MAX sizes, and stays
 * one. The change is made by bset_reserve, so positions do not outlive it. */
#include "memory/bset.h"
#include "memory/bset_tree.h"

#include <stdlib.h>
#include <string.h>

/* The tree form, a set not ready and a growth are rare (see the top): laid out off the
 * straight path of the caching allocator's calls, into which these functions are inlined. */
#define UNLIKELY(c) __builtin_expect(!!(c), 0)

/* A new bucket's room: 16 entries (256 bytes), so that fewer buckets grow a doubling at a
 * time: with 4, 4,146 of a 192-configuration sweep's 4,969 reallocations were buckets
 * growing (BENCHMARKS.md, 2026-12-04). */
#define BUCKET_MIN 16
#define SPARE_MAX 8          /* emptied buckets' arrays kept for new buckets */
#define BUCKET_ENTRIES_MAX 256   /* past these, the set becomes a tree (see the top) */
#define SIZES_MAX 256

typedef struct bent {
    uint64_t addr;
    uint32_t id;
} bent;

typedef struct bbucket {
    bent *e;                 /* by address, n of cap */
    uint32_t n, cap;
} bbucket;

struct bset {
    uint64_t *sz;            /* the distinct sizes, ascending */
    bbucket *bk;             /* bk[k]: the entries of size sz[k] */
    size_t nb, capb;         /* buckets, and the capacity of sz[] and bk[] */
    size_t n;                /* entries */
    bent *spare[SPARE_MAX];  /* arrays for new buckets, each of spare_cap[] entries */
    uint32_t spare_cap[SPARE_MAX];
    unsigned nspare;
    int ready;               /* the next insertion needs no memory (see the top) */
    int big;                 /* past a limit: the next reserve makes the tree */
    bset_tree *t;            /* the set as a tree, once it is one (the rest is unused) */
};

bset *bset_new(void) { return calloc(1, sizeof(bset)); }

void bset_free(bset *s)
{
    if (!s) return;
    bset_tree_free(s->t);
    for (size_t k = 0; k < s->nb; k++) free(s->bk[k].e);
    for (unsigned j = 0; j < s->nspare; j++) free(s->spare[j]);
    free(s->sz);
    free(s->bk);
    free(s);
}

size_t bset_count(const bset *s) { return s->t ? bset_tree_count(s->t) : s->n; }

_Static_assert(BSET_NONE == BSET_TREE_NONE, "the two forms say none alike");

/* A position in the tree's terms and back (the same two numbers). */
static inline bset_tree_pos tpos(bset_pos p) { return (bset_tree_pos){ p.unit, p.at }; }
static inline bset_pos fpos(bset_tree_pos p) { return (bset_pos){ p.leaf, p.at }; }

/* ---------------------------------------------------------------- room */

static __attribute__((noinline)) int grow_dir(bset *s)
{
    size_t cap = s->capb ? s->capb * 2 : 8;
    uint64_t *z = realloc(s->sz, cap * sizeof *z);
    if (!z) return -1;
    s->sz = z;
    bbucket *b = realloc(s->bk, cap * sizeof *b);
    if (!b) return -1;
    s->bk = b;
    s->capb = cap;
    return 0;
}

static __attribute__((noinline)) int grow_bucket(bbucket *b)
{
    if (b->cap > UINT32_MAX / 2) return -1;
    uint32_t cap = b->cap * 2;
    bent *e = realloc(b->e, cap * sizeof *e);
    if (!e) return -1;
    b->e = e;
    b->cap = cap;
    return 0;
}

static __attribute__((noinline)) int add_spare(bset *s)
{
    bent *e = malloc(BUCKET_MIN * sizeof *e);
    if (!e) return -1;
    s->spare[0] = e;
    s->spare_cap[0] = BUCKET_MIN;
    s->nspare = 1;
    return 0;
}

/* Makes the set ready: a free directory slot, a spare array, room in every bucket. */
/* The buckets' entries into a new tree, in key order, and the buckets freed; the set is
 * unchanged where memory runs out. */
static __attribute__((noinline)) int make_tree(bset *s)
{
    bset_tree *t = bset_tree_new();
    if (!t) return -1;
    for (size_t k = 0; k < s->nb; k++)
        for (uint32_t j = 0; j < s->bk[k].n; j++)
            if (bset_tree_reserve(t) ||
                bset_tree_insert(t, s->sz[k], s->bk[k].e[j].addr, s->bk[k].e[j].id)) {
                bset_tree_free(t);
                return -1;
            }
    for (size_t k = 0; k < s->nb; k++) free(s->bk[k].e);
    for (unsigned j = 0; j < s->nspare; j++) free(s->spare[j]);
    free(s->sz);
    free(s->bk);
    s->sz = NULL;
    s->bk = NULL;
    s->nb = s->capb = s->n = 0;
    s->nspare = 0;
    s->t = t;
    return 0;
}

static __attribute__((noinline)) int reserve_slow(bset *s)
{
    if (s->t) return bset_tree_reserve(s->t);
    if (s->big) return make_tree(s) ? -1 : bset_tree_reserve(s->t);
    if (s->nb >= s->capb && grow_dir(s)) return -1;
    if (!s->nspare && add_spare(s)) return -1;
    for (size_t k = 0; k < s->nb; k++)
        if (s->bk[k].n >= s->bk[k].cap && grow_bucket(&s->bk[k])) return -1;
    s->ready = 1;
    return 0;
}

int bset_reserve(bset *s) { return s->ready ? 0 : reserve_slow(s); }

/* After an insertion into bucket b: the room the next one may need (see the top). */
static inline void restore_room(bset *s, bbucket *b)
{
    if (UNLIKELY(b->n > BUCKET_ENTRIES_MAX || s->nb > SIZES_MAX)) {
        s->big = 1;
        s->ready = 0;
    }
    if (UNLIKELY(b->n == b->cap && grow_bucket(b))) s->ready = 0;
    if (UNLIKELY(!s->nspare && add_spare(s))) s->ready = 0;
    if (UNLIKELY(s->nb == s->capb && grow_dir(s))) s->ready = 0;
}

/* ---------------------------------------------------------------- searches */

/* The first bucket whose size is >= z; nb when there is none. Branch-free steps: the
 * comparison's outcome is data, not control. */
static inline size_t size_find(const bset *s, uint64_t z)
{
    const uint64_t *sz = s->sz;
    size_t lo = 0, len = s->nb;
    while (len > 0) {
        size_t half = len / 2;
        int lt = sz[lo + half] < z;
        lo = lt ? lo + half + 1 : lo;
        len = lt ? len - half - 1 : half;
    }
    return lo;
}

/* The first position of bucket b whose address is >= a; b->n when there is none. Unlike
 * size_find, branch-free: a bucket holds 1-3 entries in most searches, so the chain of
 * loads is short, and the addresses' order is data that a jump would guess wrong. The
 * range halves a fixed number of times for its length, the base moving by a mask (a
 * conditional expression here was compiled to a jump). The sizes' search stays a binary
 * search with jumps: made branch-free (4 steps over 8-15 sizes, a longer chain) or a count
 * of the smaller sizes, the 192-configuration sweep of BENCHMARKS.md was 6-8 % slower. */
static inline uint32_t addr_find(const bbucket *b, uint64_t a)
{
    const bent *base = b->e;
    uint32_t n = b->n;
    if (n == 0) return 0;
    while (n > 1) {
        uint32_t half = n / 2;
        base += half & (0u - (uint32_t)(base[half].addr < a));
        n -= half;
    }
    return (uint32_t)(base - b->e) + (base->addr < a);
}

/* ---------------------------------------------------------------- buckets */

/* Opens bucket k for size z (the directory has a free slot and a spare array is there). */
static bbucket *bucket_open(bset *s, size_t k, uint64_t z)
{
    for (size_t j = s->nb; j > k; j--) {
        s->sz[j] = s->sz[j - 1];
        s->bk[j] = s->bk[j - 1];
    }
    s->nb++;
    unsigned j = --s->nspare;
    s->sz[k] = z;
    s->bk[k] = (bbucket){ s->spare[j], 0, s->spare_cap[j] };
    return &s->bk[k];
}

/* Takes empty bucket k out of the directory; its array is kept as a spare, or freed. */
static void bucket_close(bset *s, size_t k)
{
    bbucket b = s->bk[k];
    for (size_t j = k; j + 1 < s->nb; j++) {
        s->sz[j] = s->sz[j + 1];
        s->bk[j] = s->bk[j + 1];
    }
    s->nb--;
    if (s->nspare < SPARE_MAX) {
        s->spare[s->nspare] = b.e;
        s->spare_cap[s->nspare++] = b.cap;
    } else {
        free(b.e);
    }
}

/* Entries at..n-1 of e one place up, and one place down: a plain loop for a few (a library
 * call's dispatch would cost more than the copy), memmove's wide copies for more. */
#define ENT_LOOP_MAX 8

static inline void ent_up(bent *e, uint32_t at, uint32_t n)
{
    if (n - at > ENT_LOOP_MAX) {
        memmove(&e[at + 1], &e[at], (n - at) * sizeof *e);
        return;
    }
    for (uint32_t j = n; j > at; j--) e[j] = e[j - 1];
}

static inline void ent_down(bent *e, uint32_t at, uint32_t n)
{
    if (n - at - 1 > ENT_LOOP_MAX) {
        memmove(&e[at], &e[at + 1], (n - at - 1) * sizeof *e);
        return;
    }
    for (uint32_t j = at; j + 1 < n; j++) e[j] = e[j + 1];
}

/* ---------------------------------------------------------------- operations */

int bset_insert(bset *s, uint64_t size, uint64_t addr, uint32_t id)
{
    if (UNLIKELY(!s->ready)) {   /* also the way to the tree: a tree's set is never ready */
        if (reserve_slow(s)) return -1;
        if (s->t) return bset_tree_insert(s->t, size, addr, id);
    }
    size_t k = size_find(s, size);
    bbucket *b = k < s->nb && s->sz[k] == size ? &s->bk[k] : bucket_open(s, k, size);
    uint32_t at = addr_find(b, addr);
    ent_up(b->e, at, b->n);
    b->e[at] = (bent){ addr, id };
    b->n++;
    s->n++;
    restore_room(s, b);
    return 0;
}

void bset_erase_at(bset *s, bset_pos pos)
{
    if (UNLIKELY(s->t)) {
        bset_tree_erase_at(s->t, tpos(pos));
        return;
    }
    bbucket *b = &s->bk[pos.unit];
    ent_down(b->e, pos.at, b->n);
    b->n--;
    s->n--;
    if (b->n == 0) bucket_close(s, pos.unit);
}

int bset_find(const bset *s, uint64_t size, uint64_t addr, uint32_t id, bset_pos *pos)
{
    if (UNLIKELY(s->t)) {
        bset_tree_pos tp;
        if (!bset_tree_find(s->t, size, addr, id, &tp)) return 0;
        *pos = fpos(tp);
        return 1;
    }
    size_t k = size_find(s, size);
    if (k == s->nb || s->sz[k] != size) return 0;
    const bbucket *b = &s->bk[k];
    uint32_t at = addr_find(b, addr);
    if (at == b->n || b->e[at].addr != addr || b->e[at].id != id) return 0;
    *pos = (bset_pos){ (uint32_t)k, at };
    return 1;
}

int bset_erase(bset *s, uint64_t size, uint64_t addr, uint32_t id)
{
    if (UNLIKELY(s->t)) return bset_tree_erase(s->t, size, addr, id);
    bset_pos pos;
    if (!bset_find(s, size, addr, id, &pos)) return 0;
    bset_erase_at(s, pos);
    return 1;
}

/* A split's remainder and a merged block change size, so the entry changes bucket: an
 * erasure and an insertion (the emptied bucket's array is the spare a new one takes). */
void bset_rekey_at(bset *s, bset_pos pos, uint64_t size, uint64_t addr, uint32_t id)
{
    if (UNLIKELY(s->t)) {
        bset_tree_rekey_at(s->t, tpos(pos), size, addr, id);
        return;
    }
    size_t k = pos.unit;
    if (s->bk[k].n == 1 && (k == 0 || s->sz[k - 1] < size) &&
        (k + 1 == s->nb || size < s->sz[k + 1])) {
        /* the entry is its bucket's only one and its new size falls between the neighbours':
         * the bucket takes the new size in place */
        s->sz[k] = size;
        s->bk[k].e[0] = (bent){ addr, id };
        return;
    }
    bset_erase_at(s, pos);
    bset_insert(s, size, addr, id); /* reserved: cannot fail */
}

uint32_t bset_lower_bound(const bset *s, uint64_t size, bset_pos *pos, uint64_t *found_size)
{
    if (UNLIKELY(s->t)) {
        bset_tree_pos tp;
        uint32_t id = bset_tree_lower_bound(s->t, size, &tp, found_size);
        if (id != BSET_NONE) *pos = fpos(tp);
        return id;
    }
    size_t k = size_find(s, size);
    if (k == s->nb) return BSET_NONE;
    *pos = (bset_pos){ (uint32_t)k, 0 };
    *found_size = s->sz[k];
    return s->bk[k].e[0].id;
}

uint32_t bset_pred(const bset *s, uint64_t size, uint64_t addr)
{
    if (UNLIKELY(s->t)) return bset_tree_pred(s->t, size, addr);
    size_t k = size_find(s, size);
    if (k < s->nb && s->sz[k] == size) {
        uint32_t at = addr_find(&s->bk[k], addr);
        if (at > 0) return s->bk[k].e[at - 1].id;
    }
    if (k == 0) return BSET_NONE;
    const bbucket *p = &s->bk[k - 1];
    return p->e[p->n - 1].id;
}

size_t bset_ids(const bset *s, uint32_t *out, size_t max)
{
    if (s->t) return bset_tree_ids(s->t, out, max);
    size_t n = 0;
    for (size_t k = 0; k < s->nb; k++)
        for (uint32_t j = 0; j < s->bk[k].n; j++, n++)
            if (n < max) out[n] = s->bk[k].e[j].id;
    return n;
}

const char *bset_check(const bset *s)
{
    if (s->t) return bset_tree_check(s->t);
    size_t total = 0;
    for (size_t k = 0; k < s->nb; k++) {
        const bbucket *b = &s->bk[k];
        if (b->n == 0 || b->n > b->cap) return "a bucket is empty or overfull";
        if (k > 0 && s->sz[k - 1] >= s->sz[k]) return "sizes out of order";
        for (uint32_t j = 1; j < b->n; j++)
            if (b->e[j - 1].addr >= b->e[j].addr) return "addresses out of order";
        total += b->n;
    }
    if (s->nb > s->capb) return "more buckets than the directory holds";
    return total == s->n ? NULL : "the entry count differs from the buckets'";
}

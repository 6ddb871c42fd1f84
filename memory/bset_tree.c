/* bset_tree.c — the free-block set's large form (see bset_tree.h), which memory/bset.c
 * turns a set into once it outgrows its buckets by size.
 *
 * Layout: a two-level B+-tree. Leaves are sorted arrays of up to LEAF_CAP entries; a
 * directory holds the leaves in key order with each one's last key. A lookup is a binary
 * search of the directory and then of one leaf; an insertion or erasure moves the entries
 * after it within its leaf. Leaves split when full and merge with a neighbour when the two
 * fit in half a leaf, so that the directory stays within a few entries per leaf's worth of
 * keys: every operation is logarithmic in the entries plus a move of at most a leaf and of
 * the directory's pointers, whatever the mix of sizes. */
#include "memory/bset_tree.h"

#include <stdlib.h>
#include <string.h>

#define LEAF_CAP 32

typedef struct bkey { uint64_t size, addr; } bkey;

typedef struct bent {
    uint64_t size, addr;
    uint32_t id;
} bent;

typedef struct bleaf {
    uint32_t n;
    bent e[LEAF_CAP];
} bleaf;

struct bset_tree {
    bleaf **leaf;            /* in key order, each holding 1..LEAF_CAP entries */
    bkey *last;              /* last[k]: the greatest key of leaf[k] */
    size_t nleaf, cap;       /* leaves, and the capacity of leaf[] and last[] */
    size_t n;                /* entries */
    bleaf *spare[2];         /* empty leaves for the next splits (so that they cannot
                              * fail) and for a set that empties and fills again */
};

/* (z1, a1) < (z2, a2), compiled to one 128-bit comparison where the compiler has one. */
static inline int key_lt(uint64_t z1, uint64_t a1, uint64_t z2, uint64_t a2)
{
#ifdef __SIZEOF_INT128__
    return ((unsigned __int128)z1 << 64 | a1) < ((unsigned __int128)z2 << 64 | a2);
#else
    return (z1 < z2) | ((z1 == z2) & (a1 < a2));
#endif
}

bset_tree *bset_tree_new(void) { return calloc(1, sizeof(bset_tree)); }

void bset_tree_free(bset_tree *s)
{
    if (!s) return;
    for (size_t k = 0; k < s->nleaf; k++) free(s->leaf[k]);
    free(s->leaf);
    free(s->last);
    free(s->spare[0]);
    free(s->spare[1]);
    free(s);
}

size_t bset_tree_count(const bset_tree *s) { return s->n; }

/* An insertion can take a spare leaf and one more directory slot without allocating. */
static inline int has_room(const bset_tree *s) { return s->spare[0] && s->nleaf < s->cap; }

/* bset_tree_reserve's allocation, out of line: the check before it is small enough for its
 * callers (every allocator call) to take inline. */
static __attribute__((noinline)) int reserve_slow(bset_tree *s)
{
    if (!s->spare[0] && !(s->spare[0] = malloc(sizeof *s->spare[0]))) return -1;
    if (s->nleaf + 1 <= s->cap) return 0;
    size_t cap = s->cap ? s->cap * 2 : 4;
    bleaf **l = realloc(s->leaf, cap * sizeof *l);
    if (!l) return -1;
    s->leaf = l;
    bkey *k = realloc(s->last, cap * sizeof *k);
    if (!k) return -1;
    s->last = k;
    s->cap = cap;
    return 0;
}

int bset_tree_reserve(bset_tree *s) { return has_room(s) ? 0 : reserve_slow(s); }

/* The first leaf whose last key is >= (z, a); nleaf when there is none. Branch-free steps:
 * the comparison's outcome is data, not control. */
static size_t dir_find(const bset_tree *s, uint64_t z, uint64_t a)
{
    size_t lo = 0, len = s->nleaf;
    while (len > 0) {
        size_t half = len / 2;
        int lt = key_lt(s->last[lo + half].size, s->last[lo + half].addr, z, a);
        lo = lt ? lo + half + 1 : lo;
        len = lt ? len - half - 1 : half;
    }
    return lo;
}

/* The first position of leaf L whose key is >= (z, a); L->n when there is none. */
static uint32_t leaf_find(const bleaf *L, uint64_t z, uint64_t a)
{
    uint32_t lo = 0, len = L->n;
    while (len > 0) {
        uint32_t half = len / 2;
        int lt = key_lt(L->e[lo + half].size, L->e[lo + half].addr, z, a);
        lo = lt ? lo + half + 1 : lo;
        len = lt ? len - half - 1 : half;
    }
    return lo;
}

/* dir_find and leaf_find for the key (z, 0), as a best fit asks: no key is below address 0,
 * so (size, addr) < (z, 0) is size < z, one 64-bit comparison a step where the full key
 * takes a 128-bit one (bset_tree_lower_bound runs at every allocation). */
static size_t dir_find_size(const bset_tree *s, uint64_t z)
{
    size_t lo = 0, len = s->nleaf;
    while (len > 0) {
        size_t half = len / 2;
        int lt = s->last[lo + half].size < z;
        lo = lt ? lo + half + 1 : lo;
        len = lt ? len - half - 1 : half;
    }
    return lo;
}

static uint32_t leaf_find_size(const bleaf *L, uint64_t z)
{
    uint32_t lo = 0, len = L->n;
    while (len > 0) {
        uint32_t half = len / 2;
        int lt = L->e[lo + half].size < z;
        lo = lt ? lo + half + 1 : lo;
        len = lt ? len - half - 1 : half;
    }
    return lo;
}

static void set_last(bset_tree *s, size_t k)
{
    const bent *e = &s->leaf[k]->e[s->leaf[k]->n - 1];
    s->last[k] = (bkey){e->size, e->addr};
}

/* Opens directory slot k (capacity reserved) for leaf L. */
static void dir_insert(bset_tree *s, size_t k, bleaf *L)
{
    memmove(&s->leaf[k + 1], &s->leaf[k], (s->nleaf - k) * sizeof *s->leaf);
    memmove(&s->last[k + 1], &s->last[k], (s->nleaf - k) * sizeof *s->last);
    s->leaf[k] = L;
    s->nleaf++;
    set_last(s, k);
}

/* The spare leaf for a split or a first entry (reserved: never NULL). */
static bleaf *take_spare(bset_tree *s)
{
    bleaf *L = s->spare[0];
    s->spare[0] = s->spare[1];
    s->spare[1] = NULL;
    return L;
}

/* Takes leaf k out of the directory; it is kept as a spare, or freed. */
static void dir_remove(bset_tree *s, size_t k)
{
    bleaf *L = s->leaf[k];
    memmove(&s->leaf[k], &s->leaf[k + 1], (s->nleaf - k - 1) * sizeof *s->leaf);
    memmove(&s->last[k], &s->last[k + 1], (s->nleaf - k - 1) * sizeof *s->last);
    s->nleaf--;
    if (!s->spare[0]) s->spare[0] = L;
    else if (!s->spare[1]) s->spare[1] = L;
    else free(L);
}

/* Entries at..n-1 of e one place up, and one place down: a plain loop for a few (a library
 * call's dispatch would cost more than the copy), memmove's wide copies for more. */
#define ENT_LOOP_MAX 6

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

/* Splits full leaf k in two halves, the upper one into the spare as leaf k + 1. */
static void leaf_split(bset_tree *s, size_t k)
{
    bleaf *L = s->leaf[k], *R = take_spare(s);
    R->n = LEAF_CAP / 2;
    memcpy(R->e, &L->e[LEAF_CAP - LEAF_CAP / 2], (LEAF_CAP / 2) * sizeof *R->e);
    L->n = LEAF_CAP - LEAF_CAP / 2;
    set_last(s, k);
    dir_insert(s, k + 1, R);
}

int bset_tree_insert(bset_tree *s, uint64_t size, uint64_t addr, uint32_t id)
{
    if (!has_room(s) && bset_tree_reserve(s)) return -1;
    size_t k;
    if (s->nleaf == 0) {
        bleaf *L = take_spare(s);
        L->n = 0;
        s->leaf[0] = L;
        s->nleaf = 1;
        k = 0;
    } else {
        k = dir_find(s, size, addr);
        if (k == s->nleaf) k--; /* above every key: the last leaf grows */
        if (s->leaf[k]->n == LEAF_CAP) {
            leaf_split(s, k);
            if (key_lt(s->last[k].size, s->last[k].addr, size, addr)) k++;
        }
    }
    bleaf *L = s->leaf[k];
    uint32_t at = leaf_find(L, size, addr);
    ent_up(L->e, at, L->n);
    L->e[at] = (bent){size, addr, id};
    L->n++;
    if (at == L->n - 1) s->last[k] = (bkey){size, addr};
    s->n++;
    if (!s->spare[0]) s->spare[0] = malloc(sizeof *s->spare[0]); /* NULL: reserve retries */
    return 0;
}

/* After an erasure from leaf k: a leaf that fits in half a leaf with a neighbour merges
 * into it, so that many erasures do not leave a long directory of nearly empty leaves. */
static void leaf_rebalance(bset_tree *s, size_t k)
{
    if (k + 1 < s->nleaf && s->leaf[k]->n + s->leaf[k + 1]->n <= LEAF_CAP / 2) {
        /* k absorbs k + 1 */
    } else if (k > 0 && s->leaf[k - 1]->n + s->leaf[k]->n <= LEAF_CAP / 2) {
        k--;
    } else {
        return;
    }
    bleaf *L = s->leaf[k], *R = s->leaf[k + 1];
    memcpy(&L->e[L->n], R->e, R->n * sizeof *R->e);
    L->n += R->n;
    s->last[k] = s->last[k + 1];
    dir_remove(s, k + 1);
}

void bset_tree_erase_at(bset_tree *s, bset_tree_pos pos)
{
    bleaf *L = s->leaf[pos.leaf];
    ent_down(L->e, pos.at, L->n);
    L->n--;
    s->n--;
    if (L->n == 0) {
        dir_remove(s, pos.leaf);
        return;
    }
    if (pos.at == L->n) set_last(s, pos.leaf);
    leaf_rebalance(s, pos.leaf);
}

int bset_tree_find(const bset_tree *s, uint64_t size, uint64_t addr, uint32_t id,
                   bset_tree_pos *pos)
{
    size_t k = dir_find(s, size, addr);
    if (k == s->nleaf) return 0;
    const bleaf *L = s->leaf[k];
    uint32_t at = leaf_find(L, size, addr);
    if (at == L->n || L->e[at].size != size || L->e[at].addr != addr || L->e[at].id != id)
        return 0;
    *pos = (bset_tree_pos){(uint32_t)k, at};
    return 1;
}

int bset_tree_erase(bset_tree *s, uint64_t size, uint64_t addr, uint32_t id)
{
    bset_tree_pos pos;
    if (!bset_tree_find(s, size, addr, id, &pos)) return 0;
    bset_tree_erase_at(s, pos);
    return 1;
}

/* Whether key (z, a) belongs in leaf k: above the previous leaf's keys, below the next's. */
static int in_leaf(const bset_tree *s, size_t k, uint64_t z, uint64_t a)
{
    if (k > 0 && !key_lt(s->last[k - 1].size, s->last[k - 1].addr, z, a)) return 0;
    if (k + 1 < s->nleaf) {
        const bent *f = &s->leaf[k + 1]->e[0];
        if (!key_lt(z, a, f->size, f->addr)) return 0;
    }
    return 1;
}

void bset_tree_rekey_at(bset_tree *s, bset_tree_pos pos, uint64_t size, uint64_t addr,
                        uint32_t id)
{
    if (!in_leaf(s, pos.leaf, size, addr)) {
        bset_tree_erase_at(s, pos);
        bset_tree_insert(s, size, addr, id); /* reserved: cannot fail */
        return;
    }
    bleaf *L = s->leaf[pos.leaf];
    bent *e = L->e;
    uint32_t p = pos.at, q;
    if (key_lt(size, addr, e[p].size, e[p].addr)) {
        /* down: the entries from the new place up to p move one up */
        for (q = p; q > 0 && key_lt(size, addr, e[q - 1].size, e[q - 1].addr); q--)
            e[q] = e[q - 1];
    } else {
        /* up: the entries after p below the new key move one down */
        for (q = p; q + 1 < L->n && key_lt(e[q + 1].size, e[q + 1].addr, size, addr); q++)
            e[q] = e[q + 1];
    }
    e[q] = (bent){size, addr, id};
    if (q == L->n - 1 || p == L->n - 1) set_last(s, pos.leaf);
}

uint32_t bset_tree_lower_bound(const bset_tree *s, uint64_t size, bset_tree_pos *pos,
                               uint64_t *found_size)
{
    size_t k = dir_find_size(s, size);
    if (k == s->nleaf) return BSET_TREE_NONE;
    const bleaf *L = s->leaf[k];
    uint32_t at = leaf_find_size(L, size); /* < L->n: the leaf's last key is >= (size, 0) */
    *pos = (bset_tree_pos){(uint32_t)k, at};
    *found_size = L->e[at].size;
    return L->e[at].id;
}

uint32_t bset_tree_pred(const bset_tree *s, uint64_t size, uint64_t addr)
{
    size_t k = dir_find(s, size, addr);
    if (k < s->nleaf) {
        uint32_t at = leaf_find(s->leaf[k], size, addr);
        if (at > 0) return s->leaf[k]->e[at - 1].id;
    }
    if (k == 0) return BSET_TREE_NONE;
    const bleaf *P = s->leaf[k - 1];
    return P->e[P->n - 1].id;
}

size_t bset_tree_ids(const bset_tree *s, uint32_t *out, size_t max)
{
    size_t n = 0;
    for (size_t k = 0; k < s->nleaf; k++)
        for (uint32_t j = 0; j < s->leaf[k]->n; j++, n++)
            if (n < max) out[n] = s->leaf[k]->e[j].id;
    return n;
}

const char *bset_tree_check(const bset_tree *s)
{
    size_t total = 0;
    const bent *prev = NULL;
    for (size_t k = 0; k < s->nleaf; k++) {
        const bleaf *L = s->leaf[k];
        if (L->n == 0 || L->n > LEAF_CAP) return "a leaf is empty or overfull";
        for (uint32_t j = 0; j < L->n; prev = &L->e[j], j++)
            if (prev && !key_lt(prev->size, prev->addr, L->e[j].size, L->e[j].addr))
                return "keys out of order";
        if (s->last[k].size != prev->size || s->last[k].addr != prev->addr)
            return "the directory's last key differs from its leaf's";
        total += L->n;
    }
    return total == s->n ? NULL : "the entry count differs from the leaves'";
}

/* u64map.c — linear-probing hash map with backward-shift deletion (no tombstones, so a
 * long replay that allocates and frees forever keeps probe lengths short). See u64map.h.
 * A slot is 16 bytes: the key is stored plus one, so that 0 marks an empty slot and a
 * fresh array is calloc's zeros; the one key that would store as 0 (2^64 - 1) is kept
 * beside the array. Lookups are memory-bound (the first probe is a cache miss in a large
 * map), so a third less memory than slots with a flag byte is a third fewer misses. */
#include "base/u64map.h"

#include <stdlib.h>
#include <string.h>

typedef struct slot { uint64_t skey, value; } slot; /* skey = key + 1; 0: empty */

struct u64map {
    slot *s;             /* the array, or unmade: see none */
    size_t cap;          /* power of two */
    size_t want;         /* the capacity of the array its first insertion makes */
    unsigned shift;      /* 64 - log2(cap) */
    size_t n;            /* keys held, the one beside included */
    int has_top;         /* key 2^64 - 1 is present ... */
    uint64_t top_value;  /* ... with this value */
};

#define TOP UINT64_MAX

/* The home slot of a stored key: Fibonacci hashing, the top bits of the key times
 * 2^64 / phi. Consecutive ids and aligned addresses, the keys memsim has, land evenly
 * apart, so probe runs stay short; two instructions where a full mixer took nine. */
static inline size_t home_of(const u64map *m, uint64_t skey)
{
    return (size_t)((skey * 0x9e3779b97f4a7c15ULL) >> m->shift);
}

/* The array of a map before its first insertion: empty slots, read and never written. Many
 * maps stay empty (a simulation makes about twenty and uses a few of them: the rest serve
 * other allocators and backends' calls), so the array is made, at the capacity asked for,
 * when the first key goes in; until then lookups find nothing in these slots. */
#define NONE_CAP 16
static slot none[NONE_CAP];

static void set_cap(u64map *m, slot *s, size_t cap)
{
    m->s = s;
    m->cap = cap;
    m->shift = 64u - (unsigned)__builtin_ctzll((unsigned long long)cap);
}

u64map *u64map_new(size_t expected)
{
    u64map *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    m->want = cap;
    set_cap(m, none, NONE_CAP);
    return m;
}

void u64map_free(u64map *m)
{
    if (!m) return;
    if (m->s != none) free(m->s);
    free(m);
}

/* Slot count in the array (the key beside it not counted). */
static size_t in_array(const u64map *m) { return m->n - (size_t)m->has_top; }

/* Puts a stored key known to be absent into a fresh array (no growth check). */
static void place(u64map *m, uint64_t skey, uint64_t value)
{
    size_t mask = m->cap - 1, i = home_of(m, skey);
    while (m->s[i].skey) i = (i + 1) & mask;
    m->s[i].skey = skey;
    m->s[i].value = value;
}

static int grow(u64map *m)
{
    size_t oc = m->cap;
    slot *os = m->s;
    slot *ns = calloc(oc * 2, sizeof *ns);
    if (!ns) return -1;
    m->s = ns;
    m->cap = oc * 2;
    m->shift--;
    for (size_t i = 0; i < oc; i++)
        if (os[i].skey) place(m, os[i].skey, os[i].value);
    free(os);
    return 0;
}

/* An unmade array counts at the capacity it will have, as when it was made at once. */
size_t u64map_bytes(const u64map *m)
{
    if (!m) return 0;
    return (m->s == none ? m->want : m->cap) * sizeof *m->s;
}

int u64map_put_grows(const u64map *m) { return (in_array(m) + 1) * 4 > m->cap * 3; }

/* u64map_slot's rare paths, out of line so that its common path (a probe of the array)
 * saves no registers. */
static __attribute__((noinline)) uint64_t *top_slot(u64map *m, int *added)
{
    *added = 0;
    if (!m->has_top) {
        m->has_top = 1;
        m->top_value = 0;
        m->n++;
        *added = 1;
    }
    return &m->top_value;
}

/* Doubles the array, then puts stored key sk (absent) into it. */
static __attribute__((noinline)) uint64_t *slot_after_grow(u64map *m, uint64_t sk, int *added)
{
    *added = 0;
    if (grow(m)) return NULL;
    size_t mask = m->cap - 1, i = home_of(m, sk);
    while (m->s[i].skey) i = (i + 1) & mask;
    m->s[i].skey = sk;
    m->s[i].value = 0;
    m->n++;
    *added = 1;
    return &m->s[i].value;
}

/* The first insertion: makes the array, then puts stored key sk into it. */
static __attribute__((noinline)) uint64_t *slot_after_make(u64map *m, uint64_t sk, int *added)
{
    *added = 0;
    slot *s = calloc(m->want, sizeof *s);
    if (!s) return NULL;
    set_cap(m, s, m->want);
    size_t i = home_of(m, sk);
    s[i].skey = sk;
    s[i].value = 0;
    m->n++;
    *added = 1;
    return &s[i].value;
}

uint64_t *u64map_slot(u64map *m, uint64_t key, int *added)
{
    if (key == TOP) return top_slot(m, added);
    uint64_t sk = key + 1;
    slot *s = m->s;
    size_t mask = m->cap - 1, i = home_of(m, sk);
    while (s[i].skey) {
        if (s[i].skey == sk) {
            *added = 0;
            return &s[i].value;
        }
        i = (i + 1) & mask;
    }
    if (s == none) return slot_after_make(m, sk, added);
    if ((in_array(m) + 1) * 4 > m->cap * 3) return slot_after_grow(m, sk, added);
    s[i].skey = sk;
    s[i].value = 0;
    m->n++;
    *added = 1;
    return &s[i].value;
}

int u64map_put(u64map *m, uint64_t key, uint64_t value)
{
    int added;
    uint64_t *v = u64map_slot(m, key, &added);
    if (!v) return -1;
    *v = value;
    return 0;
}

int u64map_get(const u64map *m, uint64_t key, uint64_t *value)
{
    if (key == TOP) {
        if (m->has_top && value) *value = m->top_value;
        return m->has_top;
    }
    uint64_t sk = key + 1;
    size_t mask = m->cap - 1, i = home_of(m, sk);
    for (;; i = (i + 1) & mask) {
        uint64_t s = m->s[i].skey;
        if (s == sk) {
            if (value) *value = m->s[i].value;
            return 1;
        }
        if (!s) return 0;
    }
}

int u64map_del(u64map *m, uint64_t key, uint64_t *value)
{
    if (key == TOP) {
        if (!m->has_top) return 0;
        if (value) *value = m->top_value;
        m->has_top = 0;
        m->n--;
        return 1;
    }
    uint64_t sk = key + 1;
    size_t mask = m->cap - 1, i = home_of(m, sk);
    while (m->s[i].skey && m->s[i].skey != sk) i = (i + 1) & mask;
    if (!m->s[i].skey) return 0;
    if (value) *value = m->s[i].value;
    /* Backward-shift: move later members of the probe run into the hole. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->s[j].skey) break;
        size_t home = home_of(m, m->s[j].skey);
        /* j's entry may fill the hole if its home is not cyclically in (hole, j]. */
        int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            m->s[hole] = m->s[j];
            hole = j;
        }
    }
    m->s[hole].skey = 0;
    m->n--;
    return 1;
}

size_t u64map_count(const u64map *m) { return m->n; }

void u64map_clear(u64map *m)
{
    if (m->s != none) memset(m->s, 0, m->cap * sizeof *m->s);
    m->has_top = 0;
    m->n = 0;
}

int u64map_next(const u64map *m, size_t *it, uint64_t *key, uint64_t *value)
{
    while (*it < m->cap) {
        size_t i = (*it)++;
        if (m->s[i].skey) {
            if (key) *key = m->s[i].skey - 1;
            if (value) *value = m->s[i].value;
            return 1;
        }
    }
    if (*it == m->cap && m->has_top) { /* the key beside the array comes last */
        (*it)++;
        if (key) *key = TOP;
        if (value) *value = m->top_value;
        return 1;
    }
    return 0;
}

/* u64map.c — linear-probing hash map with backward-shift deletion (no tombstones, so a
 * long replay that allocates and frees forever keeps probe lengths short). See u64map.h. */
#include "base/u64map.h"

#include <stdlib.h>

typedef struct slot { uint64_t key, value; uint8_t used; } slot;

struct u64map {
    slot *s;
    size_t cap;   /* power of two */
    unsigned shift; /* 64 - log2(cap) */
    size_t n;
};

/* The home slot of k: Fibonacci hashing, the top bits of k times 2^64 / phi. Consecutive
 * ids and aligned addresses, the keys memsim has, land evenly apart, so probe runs stay
 * short; two instructions where a full mixer took nine. */
static inline size_t home_of(const u64map *m, uint64_t k)
{
    return (size_t)((k * 0x9e3779b97f4a7c15ULL) >> m->shift);
}

u64map *u64map_new(size_t expected)
{
    u64map *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    m->s = calloc(cap, sizeof *m->s);
    if (!m->s) { free(m); return NULL; }
    m->cap = cap;
    m->shift = 64u - (unsigned)__builtin_ctzll((unsigned long long)cap);
    return m;
}

void u64map_free(u64map *m)
{
    if (!m) return;
    free(m->s);
    free(m);
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
    m->n = 0;
    for (size_t i = 0; i < oc; i++)
        if (os[i].used) u64map_put(m, os[i].key, os[i].value);
    free(os);
    return 0;
}

size_t u64map_bytes(const u64map *m) { return m ? m->cap * sizeof *m->s : 0; }

int u64map_put_grows(const u64map *m) { return (m->n + 1) * 4 > m->cap * 3; }

int u64map_put(u64map *m, uint64_t key, uint64_t value)
{
    if (u64map_put_grows(m) && grow(m)) return -1;
    size_t mask = m->cap - 1, i = home_of(m, key);
    while (m->s[i].used) {
        if (m->s[i].key == key) { m->s[i].value = value; return 0; }
        i = (i + 1) & mask;
    }
    m->s[i].used = 1;
    m->s[i].key = key;
    m->s[i].value = value;
    m->n++;
    return 0;
}

uint64_t *u64map_slot(u64map *m, uint64_t key, int *added)
{
    if (u64map_put_grows(m) && grow(m)) return NULL;
    size_t mask = m->cap - 1, i = home_of(m, key);
    *added = 0;
    while (m->s[i].used) {
        if (m->s[i].key == key) return &m->s[i].value;
        i = (i + 1) & mask;
    }
    m->s[i].used = 1;
    m->s[i].key = key;
    m->s[i].value = 0;
    m->n++;
    *added = 1;
    return &m->s[i].value;
}

int u64map_get(const u64map *m, uint64_t key, uint64_t *value)
{
    size_t mask = m->cap - 1, i = home_of(m, key);
    while (m->s[i].used) {
        if (m->s[i].key == key) {
            if (value) *value = m->s[i].value;
            return 1;
        }
        i = (i + 1) & mask;
    }
    return 0;
}

int u64map_del(u64map *m, uint64_t key, uint64_t *value)
{
    size_t mask = m->cap - 1, i = home_of(m, key);
    while (m->s[i].used && m->s[i].key != key) i = (i + 1) & mask;
    if (!m->s[i].used) return 0;
    if (value) *value = m->s[i].value;
    /* Backward-shift: move later members of the probe run into the hole. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->s[j].used) break;
        size_t home = home_of(m, m->s[j].key);
        /* j's entry may fill the hole if its home is not cyclically in (hole, j]. */
        int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            m->s[hole] = m->s[j];
            hole = j;
        }
    }
    m->s[hole].used = 0;
    m->n--;
    return 1;
}

size_t u64map_count(const u64map *m) { return m->n; }

void u64map_clear(u64map *m)
{
    for (size_t i = 0; i < m->cap; i++) m->s[i].used = 0;
    m->n = 0;
}

int u64map_next(const u64map *m, size_t *it, uint64_t *key, uint64_t *value)
{
    while (*it < m->cap) {
        size_t i = (*it)++;
        if (m->s[i].used) {
            if (key) *key = m->s[i].key;
            if (value) *value = m->s[i].value;
            return 1;
        }
    }
    return 0;
}

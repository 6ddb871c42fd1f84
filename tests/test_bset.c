/* test_bset.c — unit tests for memory/bset.c, the caching allocator's ordered set of free
 * blocks: every operation checked against a plain sorted array under seeded random
 * insertions and erasures, small sets and large ones (buckets of a size opened, grown and
 * closed, directories that grow, then the tree a large set becomes), sizes with many equal
 * keys, and the structure's own check after each step; and that a large set's churn stays
 * far from quadratic. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/bset.h"
#include "tests/tap.h"

typedef struct ment { uint64_t size, addr; uint32_t id; } ment;

typedef struct model {
    ment *e;
    size_t n, cap;
} model;

static int ment_lt(const ment *x, uint64_t z, uint64_t a)
{
    return x->size < z || (x->size == z && x->addr < a);
}

/* First index with key >= (z, a). */
static size_t model_find(const model *m, uint64_t z, uint64_t a)
{
    size_t i = 0;
    while (i < m->n && ment_lt(&m->e[i], z, a)) i++;
    return i;
}

static void model_insert(model *m, uint64_t z, uint64_t a, uint32_t id)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->e = realloc(m->e, m->cap * sizeof *m->e);
    }
    size_t i = model_find(m, z, a);
    memmove(&m->e[i + 1], &m->e[i], (m->n - i) * sizeof *m->e);
    m->e[i] = (ment){z, a, id};
    m->n++;
}

static void model_erase_at(model *m, size_t i)
{
    memmove(&m->e[i], &m->e[i + 1], (m->n - i - 1) * sizeof *m->e);
    m->n--;
}

static uint64_t rng_state = 88172645463325252ULL;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A size from few distinct values (many equal sizes: ties broken by address). */
static uint64_t rnd_size(unsigned distinct) { return 512 * (1 + rnd() % distinct); }

/* The whole set equals the model: count, ids in order, check passes. */
static int same(const bset *s, const model *m, uint32_t *buf)
{
    if (bset_count(s) != m->n || bset_check(s)) return 0;
    if (bset_ids(s, buf, m->n) != m->n) return 0;
    for (size_t i = 0; i < m->n; i++)
        if (buf[i] != m->e[i].id) return 0;
    return 1;
}

/* One random step; returns 0 when the set and the model disagree on its answer. */
static int step(bset *s, model *m, unsigned distinct, int grow_bias, uint32_t *next_id)
{
    uint64_t z = rnd_size(distinct);
    int r = (int)(rnd() % 100);
    if (r < grow_bias) { /* insert a fresh key */
        uint64_t a = rnd() & ~0xfffULL;
        size_t i = model_find(m, z, a);
        if (i < m->n && m->e[i].size == z && m->e[i].addr == a) return 1; /* taken */
        if (bset_reserve(s) || bset_insert(s, z, a, *next_id)) return 0;
        model_insert(m, z, a, (*next_id)++);
        return 1;
    }
    if (r < grow_bias + 15) { /* lower_bound, and take it */
        bset_pos pos;
        uint64_t got;
        uint32_t id = bset_lower_bound(s, z, &pos, &got);
        size_t i = model_find(m, z, 0);
        if (i == m->n) return id == BSET_NONE;
        if (id != m->e[i].id || got != m->e[i].size) return 0;
        bset_erase_at(s, pos);
        model_erase_at(m, i);
        return 1;
    }
    if (r < grow_bias + 25) { /* predecessor of a key present or not */
        uint64_t a = m->n && rnd() % 2 ? m->e[rnd() % m->n].addr : rnd();
        size_t i = model_find(m, z, a);
        uint32_t want = i ? m->e[i - 1].id : BSET_NONE;
        return bset_pred(s, z, a) == want;
    }
    if (m->n == 0) return bset_erase(s, z, 0, 0) == 0;
    if (r < grow_bias + 40) { /* rekey an entry, near its key or anywhere */
        size_t i = rnd() % m->n;
        ment e = m->e[i];
        uint64_t nz = rnd() % 2 ? e.size + 512 * (rnd() % 5) - 1024 : z;
        uint64_t na = rnd() % 2 ? e.addr + (rnd() % 64) * 4096 : rnd() & ~0xfffULL;
        if (nz == 0 || nz > (1ULL << 62)) nz = 512;
        size_t j = model_find(m, nz, na);
        if (j < m->n && m->e[j].size == nz && m->e[j].addr == na) return 1; /* taken */
        bset_pos pos;
        if (!bset_find(s, e.size, e.addr, e.id, &pos) || bset_reserve(s)) return 0;
        bset_rekey_at(s, pos, nz, na, e.id + 1000000);
        model_erase_at(m, i);
        model_insert(m, nz, na, e.id + 1000000);
        return 1;
    }
    size_t i = rnd() % m->n; /* erase by key: a wrong id first, which must not erase */
    ment e = m->e[i];
    if (bset_erase(s, e.size, e.addr, e.id + 1) != 0) return 0;
    if (bset_erase(s, e.size, e.addr, e.id) != 1) return 0;
    model_erase_at(m, i);
    return 1;
}

static void run_phase(const char *what, unsigned distinct, size_t steps, int grow_bias,
                      size_t target)
{
    bset *s = bset_new();
    model m = {0};
    uint32_t next_id = 0, *buf = malloc((steps + 1) * sizeof *buf);
    int ok = s && buf;
    size_t peak = 0;
    for (size_t k = 0; ok && k < steps; k++) {
        /* grow towards target, then hover around it */
        int bias = m.n < target ? grow_bias : 100 - grow_bias - 25;
        ok = step(s, &m, distinct, bias, &next_id);
        if (ok && (k % 97 == 0 || m.n < 70)) ok = same(s, &m, buf);
        if (!ok) TAP_NOTE("%s: disagree at step %zu (%zu entries)", what, k, m.n);
        if (m.n > peak) peak = m.n;
    }
    ok = ok && same(s, &m, buf);
    /* drain it: erasures close the buckets down to none */
    while (ok && m.n) {
        size_t i = rnd() % m.n;
        ok = bset_erase(s, m.e[i].size, m.e[i].addr, m.e[i].id) == 1;
        model_erase_at(&m, i);
        if (ok && m.n % 31 == 0) ok = same(s, &m, buf);
    }
    ok = ok && same(s, &m, buf) && bset_count(s) == 0;
    TAP_OK(ok, "%s: %zu random steps up to %zu entries agree with a sorted array", what, steps,
           peak);
    bset_free(s);
    free(m.e);
    free(buf);
}

static void test_basics(void)
{
    bset *s = bset_new();
    bset_pos pos;
    uint64_t got;
    TAP_OK(s && bset_count(s) == 0 && bset_lower_bound(s, 1, &pos, &got) == BSET_NONE &&
               bset_pred(s, 1, 1) == BSET_NONE && !bset_check(s),
           "an empty set finds nothing");
    bset_insert(s, 4096, 0x3000, 1);
    bset_insert(s, 4096, 0x1000, 2);
    bset_insert(s, 1024, 0x9000, 3);
    bset_insert(s, 8192, 0x0, 4);
    uint32_t ids[8];
    TAP_OK(bset_ids(s, ids, 8) == 4 && ids[0] == 3 && ids[1] == 2 && ids[2] == 1 && ids[3] == 4,
           "order: by size, then by address");
    TAP_OK(bset_lower_bound(s, 2048, &pos, &got) == 2 && got == 4096,
           "best fit: the smallest size that fits, the lowest address among equals");
    TAP_OK(bset_lower_bound(s, 8193, &pos, &got) == BSET_NONE, "nothing fits above the largest");
    TAP_OK(bset_pred(s, 4096, 0x3000) == 2 && bset_pred(s, 4096, 0x1000) == 3 &&
               bset_pred(s, 1024, 0x9000) == BSET_NONE && bset_pred(s, 1 << 20, 0) == 4,
           "predecessor by key");
    TAP_OK(bset_erase(s, 4096, 0x1000, 9) == 0 && bset_count(s) == 4,
           "erasing a key under another id erases nothing");
    TAP_OK(bset_erase(s, 4096, 0x1000, 2) == 1 && bset_erase(s, 4096, 0x1000, 2) == 0 &&
               bset_count(s) == 3 && !bset_check(s),
           "erase by key, once");
    bset_free(s);
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* 200,000 free blocks of distinct sizes, then a round of erase, best fit, reserve and insert
 * for each: about 0.1 s on the build box; sorted arrays by size, moved at every change,
 * took 20 s. The bound leaves a slow machine 50 times the time. */
static void test_large_churn(void)
{
    enum { N = 200000 };
    bset *s = bset_new();
    uint64_t *z = malloc(N * sizeof *z);
    int ok = s && z;
    uint64_t x = 88172645463325252ULL;
    double t0 = seconds();
    for (uint32_t i = 0; ok && i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        z[i] = 512 * (1 + x % 1000000);
        ok = bset_reserve(s) == 0 && bset_insert(s, z[i], (uint64_t)i << 22, i) == 0;
    }
    for (uint32_t i = 0; ok && i < N; i++) {
        bset_pos pos;
        uint64_t got;
        ok = bset_erase(s, z[i], (uint64_t)i << 22, i) == 1 &&
             bset_lower_bound(s, z[(i * 7u) % N], &pos, &got) != BSET_NONE &&
             bset_reserve(s) == 0 && bset_insert(s, z[i], (uint64_t)i << 22, i) == 0;
    }
    double dt = seconds() - t0;
    ok = ok && bset_count(s) == N && bset_check(s) == NULL;
    TAP_OK(ok && dt < 5.0, "200000 free blocks of distinct sizes: filled and churned in %.3f s "
           "(bound 5 s)", dt);
    bset_free(s);
    free(z);
}

int main(void)
{
    test_basics();
    run_phase("a small set", 8, 20000, 40, 20);
    run_phase("hundreds of entries", 64, 40000, 60, 300);
    run_phase("thousands, few distinct sizes (large buckets, then a tree)", 4, 60000, 60, 5000);
    run_phase("thousands, distinct sizes (many buckets, then a tree)", 1u << 20, 60000, 60, 5000);
    test_large_churn();
    return tap_done();
}

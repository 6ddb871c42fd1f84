/* test_alloc_stitch.c — unit tests of the GMLake stitching allocator (memory/alloc_stitch.c)
 * over the simulated backend: each BestFit state on a hand scenario, Split, the
 * fragmentation limit in both readings, StitchFree LRU under a stitch limit, VMM failure
 * injection, bad input, and convergence to exact matches on a repeated pattern (GMLake
 * Fig. 14). Run by `make check`. */
#include <stdlib.h>
#include <string.h>

#include "memory/alloc_stitch.h"
#include "sim/simbackend.h"
#include "tests/tap.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

typedef struct fx {
    simbe_t *be;
    alloc_t *a;
} fx;

static fx make(uint64_t cap, uint64_t frag_limit, uint64_t stitch_limit,
               const alloc_stitch_knobs *k)
{
    fx f;
    alloc_config c;
    alloc_config_default(&c);
    c.frag_limit_bytes = frag_limit;
    c.stitch_limit_bytes = stitch_limit;
    c.check_every_op = 1;
    f.be = simbe_new(NULL, cap, 0);
    f.a = NULL;
    ms_error err;
    if (!f.be || alloc_new("stitching", &c, simbe_backend(f.be), &f.a, &err) != MS_OK) {
        printf("Bail out! cannot create the stitching allocator\n");
        exit(99);
    }
    if (k && alloc_stitch_set_knobs(f.a, k) != MS_OK) {
        printf("Bail out! cannot set knobs\n");
        exit(99);
    }
    return f;
}

static void done(fx *f)
{
    alloc_free(f->a);
    simbe_free(f->be);
}

static int ok_check(const alloc_t *a)
{
    char why[256];
    if (alloc_check(a, why, sizeof why) == MS_OK) return 1;
    TAP_NOTE("check: %s", why);
    return 0;
}

static uint64_t st(const alloc_t *a, int s) { return alloc_stitch_state_count(a, s); }

static uint64_t get(alloc_t *a, uint64_t bytes)
{
    uint64_t addr = 0;
    if (alloc_block(a, bytes, 0, 0, &addr) != MS_OK) return 0;
    return addr;
}

/* S4 without candidates, S1 on a pBlock, S2 Split. */
static void test_alloc_exact_split(void)
{
    fx f = make(8 * GiB, 128 * MiB, UINT64_MAX, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t a1 = get(f.a, 256 * MiB);
    TAP_OK(a1 && st(f.a, 4) == 1 && s->num_new_chunks == 128 && s->reserved_bytes == 256 * MiB,
           "insufficient state on an empty pool creates 128 chunks for 256 MiB");
    TAP_OK(s->num_maps == 128 && simbe_live_handles(f.be) == 128, "one map per chunk");
    alloc_release(f.a, a1);
    uint64_t a2 = get(f.a, 256 * MiB - 100);
    TAP_OK(a2 == a1 && st(f.a, 1) == 1 && s->num_new_chunks == 128,
           "exact match reuses the free pBlock (same address, no new chunks)");
    alloc_release(f.a, a2);
    uint64_t b1 = get(f.a, 100 * MiB);
    TAP_OK(b1 == a1 && st(f.a, 2) == 1 && s->num_splits == 1 && s->num_new_chunks == 128,
           "single-block state splits the 256 MiB pBlock for 100 MiB");
    TAP_OK(s->allocated_bytes == 100 * MiB && s->requested_bytes == 100 * MiB,
           "allocated and requested bytes after the split");
    uint64_t b2 = get(f.a, 156 * MiB);
    TAP_OK(b2 == a1 + 100 * MiB && st(f.a, 1) == 2 && s->num_new_chunks == 128,
           "the 156 MiB remainder is an exact match at the next address");
    TAP_OK(s->inactive_split_bytes == 0 && ok_check(f.a), "invariant holds, nothing free in use");
    alloc_release(f.a, b1);
    TAP_OK(s->inactive_split_bytes == 100 * MiB, "a free piece of a busy segment is inactive_split");
    alloc_release(f.a, b2);
    alloc_empty_cache(f.a);
    TAP_OK(s->reserved_bytes == 0 && simbe_live_handles(f.be) == 0 &&
           simbe_live_mappings(f.be) == 0 && simbe_live_reservations(f.be) == 0,
           "empty_cache returns every chunk, mapping and reservation");
    done(&f);
}

/* S3: two free 64 MiB pBlocks stitched for 128 MiB; exact match reuses the sBlock. */
static void test_stitch(void)
{
    fx f = make(8 * GiB, 64 * MiB, UINT64_MAX, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t p1 = get(f.a, 64 * MiB), p2 = get(f.a, 64 * MiB);
    alloc_release(f.a, p1);
    alloc_release(f.a, p2);
    uint64_t maps = s->num_maps;
    uint64_t c = get(f.a, 128 * MiB);
    TAP_OK(c && st(f.a, 3) == 1 && s->num_stitches == 1 && s->num_new_chunks == 64,
           "multiple-blocks state stitches 64 + 64 MiB without new chunks");
    TAP_OK(c != p1 && c != p2 && s->num_maps == maps + 64 && s->mapped_twice_bytes == 128 * MiB,
           "the sBlock is a new VA range mapping the same 64 chunks again");
    TAP_OK(s->reserved_bytes == 128 * MiB && s->allocated_bytes == 128 * MiB,
           "stitching does not grow reserved memory");
    uint64_t other = get(f.a, 64 * MiB);
    TAP_OK(other && other != p1 && other != p2 && s->num_new_chunks == 96 && ok_check(f.a),
           "chunks of an active sBlock are not handed out again");
    alloc_release(f.a, other);
    alloc_release(f.a, c);
    uint64_t d = get(f.a, 128 * MiB);
    TAP_OK(d == c && s->num_stitches == 1 && st(f.a, 1) == 1,
           "exact match reuses the sBlock with zero new stitches");
    uint64_t q = get(f.a, 64 * MiB);
    TAP_OK(q == other && ok_check(f.a), "a free pBlock beside the active sBlock is still usable");
    alloc_release(f.a, q);
    alloc_release(f.a, d);
    uint64_t e = get(f.a, 64 * MiB);
    TAP_OK(e == p1 && alloc_stitch_num_sblocks(f.a) == 1, "pBlock exact match is taken before splitting");
    TAP_OK(ok_check(f.a), "the sBlock waits while one of its chunks is busy");
    alloc_release(f.a, e);
    alloc_empty_cache(f.a);
    TAP_OK(alloc_stitch_num_sblocks(f.a) == 0 && simbe_live_handles(f.be) == 0 &&
           simbe_live_reservations(f.be) == 0 && s->mapped_twice_bytes == 0,
           "empty_cache drops sBlocks and segments");
    done(&f);
}

/* S4 with candidates: new chunks only for the shortfall, stitched with the free pBlock. */
static void test_insufficient(void)
{
    fx f = make(8 * GiB, 64 * MiB, UINT64_MAX, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t p = get(f.a, 64 * MiB);
    alloc_release(f.a, p);
    uint64_t x = get(f.a, 192 * MiB);
    TAP_OK(x && st(f.a, 4) == 2 && s->num_new_chunks == 32 + 64 && s->num_stitches == 1,
           "insufficient state allocates 128 MiB of new chunks and stitches them with 64 MiB");
    TAP_OK(s->reserved_bytes == 192 * MiB && ok_check(f.a), "reserved equals the request");
    alloc_release(f.a, x);
    done(&f);
}

/* The fragmentation limit: glake's reading (the default) and the paper's literal one. */
static void test_frag_limit(void)
{
    fx f = make(8 * GiB, 128 * MiB, UINT64_MAX, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t p1 = get(f.a, 64 * MiB), p2 = get(f.a, 64 * MiB);
    alloc_release(f.a, p1);
    alloc_release(f.a, p2);
    uint64_t small = get(f.a, 100 * MiB);
    TAP_OK(small && s->num_stitches == 0 && s->reserved_bytes == 228 * MiB,
           "a 100 MiB request below the 128 MiB limit is not stitched: new chunks");
    uint64_t d = get(f.a, 32 * MiB);
    TAP_OK(d == p1 && s->num_splits == 1, "a free 64 MiB pBlock is split for 32 MiB");
    alloc_release(f.a, small);
    alloc_release(f.a, d);
    uint64_t big = get(f.a, 128 * MiB);
    TAP_OK(big && s->num_stitches == 1 && s->reserved_bytes == 228 * MiB,
           "128 MiB at the limit stitches the largest free pBlocks (100 + 64 MiB, split)");
    alloc_release(f.a, big);
    done(&f);

    f = make(8 * GiB, 128 * MiB, UINT64_MAX, NULL);
    s = alloc_get_stats(f.a);
    p1 = get(f.a, 64 * MiB);
    uint64_t sep = get(f.a, 2 * MiB);
    p2 = get(f.a, 64 * MiB);
    alloc_release(f.a, p1);
    alloc_release(f.a, p2);
    big = get(f.a, 128 * MiB);
    TAP_OK(big && s->num_stitches == 1 && s->reserved_bytes == 130 * MiB,
           "a 128 MiB request stitches two 64 MiB pBlocks below the limit");
    alloc_release(f.a, big);
    alloc_release(f.a, sep);
    done(&f);

    alloc_stitch_knobs k;
    alloc_stitch_knobs_default(&k);
    k.frag_rule = ALLOC_STITCH_FRAG_BLOCKS;
    f = make(8 * GiB, 128 * MiB, UINT64_MAX, &k);
    s = alloc_get_stats(f.a);
    p1 = get(f.a, 64 * MiB);
    sep = get(f.a, 2 * MiB);
    p2 = get(f.a, 64 * MiB);
    alloc_release(f.a, p1);
    alloc_release(f.a, p2);
    big = get(f.a, 128 * MiB);
    TAP_OK(big && s->num_stitches == 0 && s->reserved_bytes == 258 * MiB,
           "paper's literal rule: 64 MiB pBlocks below the limit are not stitched");
    d = get(f.a, 32 * MiB);
    TAP_OK(d && s->num_splits == 0 && s->reserved_bytes == 290 * MiB,
           "paper's literal rule: a 64 MiB pBlock below the limit is not split");
    alloc_release(f.a, big);
    alloc_release(f.a, d);
    alloc_release(f.a, sep);
    TAP_OK(ok_check(f.a), "invariant holds under the literal rule");
    done(&f);
}

/* Coalescing (glake, the default) against none (the paper's literal Update). */
static void test_coalesce(void)
{
    fx f = make(8 * GiB, 64 * MiB, UINT64_MAX, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t a = get(f.a, 256 * MiB);
    alloc_release(f.a, a);
    uint64_t b = get(f.a, 100 * MiB);
    alloc_release(f.a, b);
    uint64_t c = get(f.a, 256 * MiB);
    TAP_OK(c == a && s->num_stitches == 0 && s->num_splits == 1,
           "with coalescing the split pieces merge back into one 256 MiB pBlock");
    alloc_release(f.a, c);
    done(&f);

    alloc_stitch_knobs k;
    alloc_stitch_knobs_default(&k);
    k.coalesce = 0;
    f = make(8 * GiB, 64 * MiB, UINT64_MAX, &k);
    s = alloc_get_stats(f.a);
    a = get(f.a, 256 * MiB);
    alloc_release(f.a, a);
    b = get(f.a, 100 * MiB);
    alloc_release(f.a, b);
    c = get(f.a, 256 * MiB);
    TAP_OK(c && c != a && s->num_stitches == 1 && s->num_new_chunks == 128,
           "without coalescing the pieces are stitched back into an sBlock");
    alloc_release(f.a, c);
    uint64_t d = get(f.a, 100 * MiB);
    TAP_OK(d == a && s->num_splits == 1 && ok_check(f.a),
           "without coalescing the 100 MiB piece is an exact match again");
    alloc_release(f.a, d);
    done(&f);
}

/* StitchFree: LRU inactive sBlocks go when stitched bytes exceed the limit. */
static void test_stitch_free_lru(void)
{
    fx f = make(8 * GiB, 64 * MiB, 384 * MiB, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t p[4];
    for (int i = 0; i < 4; i++) p[i] = get(f.a, 64 * MiB);
    for (int i = 0; i < 4; i++) alloc_release(f.a, p[i]);
    uint64_t x = get(f.a, 128 * MiB), y = get(f.a, 128 * MiB);
    TAP_OK(x && y && s->num_stitches == 2 && alloc_stitch_stitched_bytes(f.a) == 256 * MiB,
           "two 128 MiB sBlocks over four 64 MiB pBlocks");
    alloc_release(f.a, x);
    alloc_release(f.a, y);
    uint64_t z = get(f.a, 192 * MiB);
    TAP_OK(z && s->num_stitches == 3 && s->num_stitch_frees == 1 &&
           alloc_stitch_stitched_bytes(f.a) == 320 * MiB,
           "a third stitch passes the 384 MiB limit: one sBlock released");
    alloc_release(f.a, z);
    uint64_t w = get(f.a, 128 * MiB);
    TAP_OK(w == y && s->num_stitches == 3, "the least recently used one (x) went, y is reused");
    TAP_OK(ok_check(f.a) && s->reserved_bytes == 256 * MiB, "StitchFree keeps the chunks");
    alloc_release(f.a, w);
    done(&f);
}

/* State for the failure tests: two free 64 MiB pBlocks and an inactive 128 MiB sBlock. */
static fx failure_setup(void)
{
    fx f = make(8 * GiB, 64 * MiB, UINT64_MAX, NULL);
    uint64_t p1 = get(f.a, 64 * MiB), p2 = get(f.a, 64 * MiB);
    alloc_release(f.a, p1);
    alloc_release(f.a, p2);
    uint64_t c = get(f.a, 128 * MiB);
    alloc_release(f.a, c);
    return f;
}

/* VMM failures injected at every point of an insufficient-state stitch and an Alloc. */
static void test_failures(void)
{
    fx f = failure_setup();
    const alloc_stats *s = alloc_get_stats(f.a);
    size_t handles = simbe_live_handles(f.be), resv = simbe_live_reservations(f.be);
    simbe_fail_after(f.be, 0);
    uint64_t x = 1;
    ms_status r = alloc_block(f.a, 512 * MiB, 0, 0, &x);
    TAP_OK(r == MS_ERR_OOM && ok_check(f.a), "a request failing in every VMM call is a clean OOM");
    TAP_OK(s->num_stitch_frees >= 1 && alloc_stitch_num_sblocks(f.a) == 0,
           "a failed VMM call triggers StitchFree of the inactive sBlock");
    TAP_OK(simbe_live_handles(f.be) <= handles && simbe_live_reservations(f.be) <= resv &&
           simbe_live_handles(f.be) * 2 * MiB == s->reserved_bytes,
           "nothing leaked by the failed request");
    simbe_fail_after(f.be, UINT64_MAX);
    uint64_t again = get(f.a, 256 * MiB);
    TAP_OK(again && ok_check(f.a), "the allocator works again once the backend recovers");
    done(&f);

    /* 160 MiB = 128 MiB of free pBlocks + 16 new chunks, then 32 MiB = 16 new chunks. */
    int all_ok = 1, n_oom = 0, n_done = 0;
    for (uint64_t k = 0; k < 40; k++) {
        f = failure_setup();
        simbe_fail_after(f.be, k);
        uint64_t y = 0, z = 0;
        ms_status r1 = alloc_block(f.a, 160 * MiB, 0, 0, &y);
        ms_status r2 = alloc_block(f.a, 32 * MiB, 0, 0, &z);
        simbe_fail_after(f.be, UINT64_MAX);
        if (!ok_check(f.a)) all_ok = 0;
        if ((r1 != MS_OK && r1 != MS_ERR_OOM) || (r2 != MS_OK && r2 != MS_ERR_OOM)) all_ok = 0;
        n_oom += (r1 == MS_ERR_OOM) + (r2 == MS_ERR_OOM);
        n_done += (r1 == MS_OK) + (r2 == MS_OK);
        if (r1 == MS_OK && alloc_release(f.a, y) != MS_OK) all_ok = 0;
        if (r2 == MS_OK && alloc_release(f.a, z) != MS_OK) all_ok = 0;
        if (alloc_empty_cache(f.a) != MS_OK) all_ok = 0;
        if (simbe_live_handles(f.be) || simbe_live_mappings(f.be) ||
            simbe_live_reservations(f.be) || simbe_live_segments(f.be))
            all_ok = 0;
        done(&f);
    }
    TAP_NOTE("failure storm: %d OOM, %d served", n_oom, n_done);
    TAP_OK(all_ok && n_oom > 0 && n_done > 0,
           "failures injected after 0..39 backend calls: OOM or success, no corruption, no leak");
}

/* Bad input: too large, zero bytes, unknown and double free; small requests; streams. */
static void test_bad_input(void)
{
    fx f = make(4 * GiB, 128 * MiB, UINT64_MAX, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t keep = get(f.a, 300 * MiB);
    alloc_stats before = *s;
    uint64_t x = 0;
    TAP_OK(alloc_block(f.a, 5 * GiB, 0, 0, &x) == MS_ERR_OOM && s->reserved_bytes == before.reserved_bytes,
           "a request larger than the device is OOM and changes nothing");
    TAP_OK(alloc_block(f.a, UINT64_MAX, 0, 0, &x) == MS_ERR_OOM, "UINT64_MAX bytes is OOM");
    before = *s;
    TAP_OK(alloc_release(f.a, 0xdeadbeef) == MS_ERR_INVALID && memcmp(&before, s, sizeof before) == 0,
           "free of an unknown address is MS_ERR_INVALID with the pool unchanged");
    uint64_t z1 = 1;
    before = *s;
    TAP_OK(alloc_block(f.a, 0, 0, 0, &z1) == MS_OK && z1 == 0 &&
           s->reserved_bytes == before.reserved_bytes && s->allocated_bytes == before.allocated_bytes,
           "a zero-byte request is the null block, as in the caching allocator");
    TAP_OK(alloc_release(f.a, 0) == MS_OK, "freeing the null block is a no-op");
    uint64_t sm = get(f.a, 4096);
    TAP_OK(sm && simbe_segment_count(f.be) >= 1 && s->reserved_bytes == 300 * MiB + 2 * MiB,
           "a 4 KiB request goes to the small pool (one 2 MiB cudaMalloc segment)");
    TAP_OK(alloc_release(f.a, sm) == MS_OK && alloc_release(f.a, sm) == MS_ERR_INVALID,
           "double free is MS_ERR_INVALID");
    alloc_release(f.a, keep);
    uint64_t s1 = 0;
    TAP_OK(alloc_block(f.a, 300 * MiB, 1, 0, &s1) == MS_OK && s1 != keep &&
           s->reserved_bytes == 600 * MiB + 2 * MiB,
           "a block freed on stream 0 is not reused on stream 1");
    alloc_release(f.a, s1);
    TAP_OK(ok_check(f.a), "invariant holds after bad input");
    alloc_empty_cache(f.a);
    TAP_OK(simbe_live_segments(f.be) == 0 && simbe_live_handles(f.be) == 0,
           "empty_cache releases the small pool's segment and the chunks");
    done(&f);
}

/* A training-like pattern repeated 10 times converges to exact matches (GMLake Fig. 14). */
static void test_convergence(void)
{
    fx f = make(64 * GiB, 128 * MiB, UINT64_MAX, NULL);
    const alloc_stats *s = alloc_get_stats(f.a);
    enum { N = 48 };
    uint64_t size[N];
    int free_after[N];
    uint64_t seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size[i] = (128 + (seed >> 33) % 896) * MiB + (seed >> 20) % 4096;
        free_after[i] = i + 1 + (int)((seed >> 40) % 6); /* freed some ops later */
    }
    uint64_t stitches[10], chunks[10], splits[10], maps[10];
    int all_ok = 1;
    for (int it = 0; it < 10; it++) {
        uint64_t st0 = s->num_stitches, ch0 = s->num_new_chunks, sp0 = s->num_splits;
        uint64_t mp0 = s->num_maps;
        uint64_t addr[N];
        memset(addr, 0, sizeof addr);
        for (int i = 0; i < N + 8; i++) {
            for (int j = 0; j < N; j++)
                if (free_after[j] == i && addr[j]) {
                    if (alloc_release(f.a, addr[j]) != MS_OK) all_ok = 0;
                    addr[j] = 0;
                }
            if (i < N && alloc_block(f.a, size[i], 0, (uint64_t)i, &addr[i]) != MS_OK) all_ok = 0;
        }
        for (int j = 0; j < N; j++)
            if (addr[j]) alloc_release(f.a, addr[j]);
        stitches[it] = s->num_stitches - st0;
        chunks[it] = s->num_new_chunks - ch0;
        splits[it] = s->num_splits - sp0;
        maps[it] = s->num_maps - mp0;
        TAP_NOTE("iteration %d: %llu new stitches, %llu new chunks, %llu maps, %llu splits", it,
                 (unsigned long long)stitches[it], (unsigned long long)chunks[it],
                 (unsigned long long)maps[it], (unsigned long long)splits[it]);
    }
    TAP_OK(all_ok && ok_check(f.a), "ten iterations of the pattern run without error");
    TAP_OK(stitches[0] + stitches[1] > 0, "the first iterations stitch");
    int conv = 1;
    for (int it = 4; it < 10; it++) conv &= stitches[it] == 0 && chunks[it] == 0 && maps[it] == 0;
    TAP_OK(conv, "after four iterations: zero new stitches, chunks and VMM maps per iteration");
    TAP_NOTE("reserved %llu MiB, active peak %llu MiB", (unsigned long long)(s->reserved_bytes >> 20),
             (unsigned long long)(s->active_peak_bytes >> 20));
    TAP_OK(s->reserved_bytes <= s->active_peak_bytes * 3 / 2,
           "reserved stays within 1.5x of the active peak");
    done(&f);
}

int main(void)
{
    TAP_OK(alloc_find("stitching") == &alloc_stitch_vt, "registered as \"stitching\"");
    test_alloc_exact_split();
    test_stitch();
    test_insufficient();
    test_frag_limit();
    test_coalesce();
    test_stitch_free_lru();
    test_failures();
    test_bad_input();
    test_convergence();
    alloc_stitch_knobs k;
    alloc_stitch_knobs_default(&k);
    TAP_OK(alloc_stitch_knobs_parse(&k, "frag_rule", "request") == MS_OK &&
           k.frag_rule == ALLOC_STITCH_FRAG_REQUEST &&
           alloc_stitch_knobs_parse(&k, "coalesce", "2") == MS_ERR_PARSE &&
           alloc_stitch_knobs_parse(&k, "nope", "1") == MS_ERR_NOTFOUND,
           "knobs parse from text");
    return tap_done();
}

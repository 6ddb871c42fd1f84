/* test_alloc_caching.c — unit tests of the caching allocator (memory/alloc_caching.c)
 * over the simulated backend: each PyTorch rule with hand-computed sizes and addresses,
 * the statistics after every step of a small scenario, the OOM path, blocks held by handle
 * against blocks held by address, and a randomized run with the invariant check after every
 * call. Run by `make check`. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "memory/alloc.h"
#include "memory/alloc_caching.h"
#include "sim/simbackend.h"
#include "tests/tap.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define B0 0x100000000000ULL   /* the simulated backend's first segment address */

typedef struct fx {
    simbe_t *be;
    alloc_t *a;
} fx;

static fx fx_new(uint64_t cap, uint64_t max_split, unsigned div)
{
    fx f = {simbe_new(NULL, cap, 0), NULL};
    alloc_config cfg;
    alloc_config_default(&cfg);
    cfg.max_split_size_bytes = max_split;
    cfg.roundup_power2_divisions = div;
    cfg.check_every_op = 1;
    ms_error err;
    if (!f.be || alloc_new("caching", &cfg, simbe_backend(f.be), &f.a, &err) != MS_OK) {
        fprintf(stderr, "cannot set up the allocator\n");
        exit(99);
    }
    return f;
}

static void fx_free(fx *f)
{
    alloc_free(f->a);
    simbe_free(f->be);
}

static uint64_t A(fx *f, uint64_t bytes, int stream)
{
    uint64_t addr = 0;
    ms_status st = alloc_block(f->a, bytes, stream, 0, &addr);
    if (st != MS_OK) return UINT64_MAX;
    return addr;
}

static int F(fx *f, uint64_t addr) { return alloc_release(f->a, addr) == MS_OK; }

static const alloc_stats *S(fx *f) { return alloc_get_stats(f->a); }

static int checks(fx *f)
{
    char why[256];
    if (alloc_check(f->a, why, sizeof why) == MS_OK) return 1;
    TAP_NOTE("check: %s", why);
    return 0;
}

static void test_rounding(void)
{
    TAP_OK(alloc_caching_round_size(1, 0) == 512, "round 1 -> 512");
    TAP_OK(alloc_caching_round_size(511, 0) == 512, "round 511 -> 512");
    TAP_OK(alloc_caching_round_size(512, 0) == 512, "round 512 -> 512");
    TAP_OK(alloc_caching_round_size(513, 0) == 1024, "round 513 -> 1024");
    TAP_OK(alloc_caching_round_size(MiB + 1, 0) == MiB + 512, "round 1 MiB + 1 -> 1 MiB + 512");

    fx f = fx_new(GiB, UINT64_MAX, 0);
    uint64_t p = A(&f, 1, 0);
    TAP_OK(p == B0 && S(&f)->allocated_bytes == 512 && S(&f)->requested_bytes == 1,
           "a 1-byte request holds 512 bytes and requests 1");
    TAP_OK(simbe_segment_count(f.be) == 1 && simbe_segment_bytes(f.be, 0) == 2 * MiB,
           "the first small request cudaMallocs one 2 MiB segment");
    fx_free(&f);
}

static void test_pools_and_segments(void)
{
    fx f = fx_new(GiB, UINT64_MAX, 0);
    /* One stream each, so that no request fits into an earlier segment's remainder. */
    A(&f, MiB, 0);
    A(&f, MiB + 1, 1);
    A(&f, 10 * MiB - 512, 2);
    A(&f, 10 * MiB, 3);
    A(&f, 10 * MiB + 1, 4);
    A(&f, 11 * MiB, 5);
    TAP_OK(simbe_segment_bytes(f.be, 0) == 2 * MiB, "exactly 1 MiB is small: 2 MiB segment");
    TAP_OK(simbe_segment_bytes(f.be, 1) == 20 * MiB, "1 MiB + 1 is large: 20 MiB segment");
    TAP_OK(simbe_segment_bytes(f.be, 2) == 20 * MiB, "10 MiB - 512: 20 MiB segment");
    TAP_OK(simbe_segment_bytes(f.be, 3) == 10 * MiB, "exactly 10 MiB: its own 10 MiB segment");
    TAP_OK(simbe_segment_bytes(f.be, 4) == 12 * MiB, "10 MiB + 1: 2 MiB-rounded, 12 MiB");
    TAP_OK(simbe_segment_bytes(f.be, 5) == 12 * MiB && simbe_segment_count(f.be) == 6,
           "11 MiB: 12 MiB segment; six segments in all");
    TAP_OK(checks(&f), "invariants hold");
    fx_free(&f);
}

static void test_split_thresholds(void)
{
    /* Small pool: a remainder of exactly 512 bytes is split off and reused. */
    fx f = fx_new(GiB, UINT64_MAX, 0);
    uint64_t a = A(&f, MiB, 0), b = A(&f, MiB - 512, 0), c = A(&f, 512, 0);
    TAP_OK(a == B0 && b == B0 + MiB, "small: pieces at the low end, one after another");
    TAP_OK(c == B0 + 2 * MiB - 512 && simbe_segment_count(f.be) == 1,
           "small: the 512-byte remainder was split off and takes a 512-byte request");
    TAP_OK(S(&f)->inactive_split_bytes == 0 && S(&f)->allocated_bytes == 2 * MiB,
           "small: segment fully allocated, nothing inactive");
    fx_free(&f);

    /* Large pool: 1 MiB remainder stays, 1 MiB + 512 is split. */
    f = fx_new(GiB, UINT64_MAX, 0);
    A(&f, 19 * MiB, 0);
    TAP_OK(S(&f)->allocated_bytes == 20 * MiB && S(&f)->inactive_split_bytes == 0,
           "large: remainder of exactly 1 MiB is not split (block of 20 MiB handed out)");
    A(&f, 19 * MiB - 512, 0);
    TAP_OK(S(&f)->allocated_bytes == 39 * MiB - 512 &&
           S(&f)->inactive_split_bytes == MiB + 512,
           "large: remainder of 1 MiB + 512 is split off");
    TAP_OK(S(&f)->requested_bytes == 38 * MiB - 512, "requested counts unrounded bytes");
    fx_free(&f);
}

static void test_split_addresses_and_coalescing(void)
{
    fx f = fx_new(GiB, UINT64_MAX, 0);
    uint64_t x = A(&f, 3 * MiB, 0), y = A(&f, 5 * MiB, 0), z = A(&f, 4 * MiB, 0);
    TAP_OK(x == B0 && y == B0 + 3 * MiB && z == B0 + 8 * MiB,
           "split pieces at increasing addresses inside one 20 MiB segment");
    TAP_OK(S(&f)->inactive_split_bytes == 8 * MiB && simbe_segment_count(f.be) == 1,
           "one segment, 8 MiB remainder inactive");
    F(&f, x);
    TAP_OK(S(&f)->inactive_split_bytes == 11 * MiB, "freeing x: inactive split 3 + 8 MiB");
    F(&f, z);
    TAP_OK(S(&f)->inactive_split_bytes == 15 * MiB && checks(&f),
           "freeing z merges it with the free remainder above (3 + 12 MiB inactive)");
    F(&f, y);
    TAP_OK(S(&f)->inactive_split_bytes == 0 && S(&f)->allocated_bytes == 0 && checks(&f),
           "freeing y merges both sides: one unsplit free 20 MiB block");
    uint64_t w = A(&f, 19 * MiB, 0);
    TAP_OK(w == B0 && simbe_segment_count(f.be) == 1 && S(&f)->allocated_bytes == 20 * MiB,
           "the coalesced 20 MiB block serves a 19 MiB request whole (1 MiB left, not split)");
    fx_free(&f);
}

static void test_best_fit(void)
{
    fx f = fx_new(GiB, UINT64_MAX, 0);
    uint64_t s0 = A(&f, 12 * MiB, 0), s1 = A(&f, 14 * MiB, 0), s2 = A(&f, 12 * MiB, 0);
    TAP_OK(s0 == B0 && s1 == B0 + 12 * MiB && s2 == B0 + 26 * MiB, "three whole segments");
    F(&f, s1);
    F(&f, s2);
    F(&f, s0);
    uint64_t r1 = A(&f, 11 * MiB, 0), r2 = A(&f, 11 * MiB, 0), r3 = A(&f, 11 * MiB, 0);
    TAP_OK(r1 == s0, "best fit: the smallest fitting block, lowest address among equals");
    TAP_OK(r2 == s2, "best fit: the other 12 MiB block before the larger 14 MiB one");
    TAP_OK(r3 == s1 && simbe_segment_count(f.be) == 3,
           "best fit: the 14 MiB block last; no new segment");
    TAP_OK(S(&f)->allocated_bytes == 12 * MiB + 12 * MiB + 11 * MiB,
           "12 MiB blocks not split (1 MiB left), 14 MiB split (3 MiB left)");
    fx_free(&f);
}

static void test_streams(void)
{
    fx f = fx_new(GiB, UINT64_MAX, 0);
    uint64_t a = A(&f, KiB, 0);
    F(&f, a);
    uint64_t b = A(&f, KiB, 1);
    TAP_OK(b == B0 + 2 * MiB && simbe_segment_count(f.be) == 2,
           "a block freed on stream 0 is not reused by stream 1 (new segment)");
    uint64_t c = A(&f, KiB, 0);
    TAP_OK(c == a, "stream 0 reuses its own block");
    fx_free(&f);
}

static void test_max_split(void)
{
    fx f = fx_new(GiB, 32 * MiB, 0);
    uint64_t big = A(&f, 40 * MiB, 0);
    TAP_OK(S(&f)->allocated_bytes == 40 * MiB && simbe_segment_bytes(f.be, 0) == 40 * MiB,
           "oversize request: its own 40 MiB segment");
    F(&f, big);
    A(&f, 12 * MiB, 0);
    TAP_OK(simbe_segment_count(f.be) == 2 && simbe_segment_bytes(f.be, 1) == 12 * MiB,
           "a cached oversize block is not handed to a request below max_split_size");
    fx_free(&f);

    f = fx_new(GiB, 32 * MiB, 0);
    uint64_t b64 = A(&f, 64 * MiB, 0);
    F(&f, b64);
    A(&f, 44 * MiB, 0);
    TAP_OK(simbe_segment_count(f.be) == 2,
           "oversize request 44 MiB does not take a 64 MiB block (64 >= 44 + 20)");
    uint64_t r = A(&f, 45 * MiB, 0);
    TAP_OK(r == b64 && simbe_segment_count(f.be) == 2 &&
           S(&f)->allocated_bytes == 44 * MiB + 64 * MiB,
           "45 MiB takes the 64 MiB block whole, unsplit");
    TAP_OK(checks(&f), "invariants hold");
    fx_free(&f);

    f = fx_new(GiB, 32 * MiB, 0);
    uint64_t m = A(&f, 5 * MiB, 0);
    TAP_OK(S(&f)->allocated_bytes == 5 * MiB && S(&f)->inactive_split_bytes == 15 * MiB,
           "20 MiB segment (not oversize at 32 MiB) splits for 5 MiB");
    F(&f, m);
    fx_free(&f);
}

static void test_release_available(void)
{
    /* One oversize block big enough: the smallest one (lowest address) is freed. */
    fx f = fx_new(100 * MiB, 32 * MiB, 0);
    uint64_t a = A(&f, 40 * MiB, 0), b = A(&f, 40 * MiB, 0);
    F(&f, a);
    F(&f, b);
    uint64_t c = A(&f, 30 * MiB, 0);
    TAP_OK(c != UINT64_MAX && S(&f)->num_segment_frees == 1 && S(&f)->num_alloc_retries == 0,
           "max_split set: one cached oversize block freed, no retry counted");
    TAP_OK(S(&f)->reserved_bytes == 70 * MiB && simbe_live_segments(f.be) == 2,
           "40 MiB freed, 30 MiB taken: 70 MiB reserved");
    TAP_OK(A(&f, 40 * MiB, 0) == b, "the other oversize block is still cached");
    fx_free(&f);

    /* No single block big enough: the largest ones are freed until enough. */
    f = fx_new(100 * MiB, 32 * MiB, 0);
    a = A(&f, 36 * MiB, 0);
    b = A(&f, 34 * MiB, 0);
    F(&f, a);
    F(&f, b);
    c = A(&f, 70 * MiB, 0);
    TAP_OK(c != UINT64_MAX && S(&f)->num_segment_frees == 2 && S(&f)->num_alloc_retries == 0,
           "36 + 34 MiB oversize blocks freed for a 70 MiB request, no retry counted");
    TAP_OK(S(&f)->reserved_bytes == 70 * MiB && checks(&f), "70 MiB reserved after");
    fx_free(&f);
}

static void test_retry_and_oom(void)
{
    fx f = fx_new(60 * MiB, UINT64_MAX, 0);
    uint64_t x = A(&f, 30 * MiB, 0), y = A(&f, 2 * KiB, 0), z = A(&f, 5 * MiB, 0);
    TAP_OK(S(&f)->reserved_bytes == 52 * MiB, "30 + 2 + 20 MiB reserved");
    F(&f, x);
    F(&f, y);
    uint64_t syncs = S(&f)->num_syncs;
    uint64_t w = A(&f, 40 * MiB, 0);
    TAP_OK(w != UINT64_MAX && S(&f)->num_alloc_retries == 1,
           "cudaMalloc fails, cached blocks released, retry succeeds: num_alloc_retries 1");
    TAP_OK(S(&f)->num_segment_frees == 2 && simbe_live_segments(f.be) == 2,
           "only whole cached segments freed (30 MiB and the small one), not z's split one");
    TAP_OK(S(&f)->num_syncs == syncs + 3, "one synchronize and two cudaFrees counted as syncs");
    TAP_OK(S(&f)->reserved_bytes == 60 * MiB && checks(&f), "60 MiB reserved (20 + 40)");

    alloc_stats before = *S(&f);
    uint64_t addr = 1;
    ms_status st = alloc_block(f.a, 30 * MiB, 0, 0, &addr);
    TAP_OK(st == MS_ERR_OOM, "nothing to free: MS_ERR_OOM");
    const alloc_stats *s = S(&f);
    TAP_OK(s->allocated_bytes == before.allocated_bytes &&
           s->reserved_bytes == before.reserved_bytes &&
           s->requested_bytes == before.requested_bytes &&
           s->active_bytes == before.active_bytes &&
           s->inactive_split_bytes == before.inactive_split_bytes,
           "OOM leaves allocated/reserved/requested/active/inactive unchanged");
    TAP_OK(s->num_ooms == before.num_ooms + 1 && s->num_alloc_retries == 2 && checks(&f),
           "OOM counted once, the retry counted, invariants hold");
    TAP_OK(F(&f, z) && F(&f, w), "live blocks can still be freed after the OOM");
    fx_free(&f);
}

static void test_roundup_power2(void)
{
    TAP_OK(alloc_caching_round_size(MiB + 1, 4) == MiB + 256 * KiB, "div 4: 1 MiB + 1 -> 1.25 MiB");
    TAP_OK(alloc_caching_round_size(5 * MiB + 1, 4) == 6 * MiB, "div 4: 5 MiB + 1 -> 6 MiB");
    TAP_OK(alloc_caching_round_size(4 * MiB, 8) == 4 * MiB, "div 8: a power of two stays");
    TAP_OK(alloc_caching_round_size(100 * MiB + 1, 8) == 104 * MiB, "div 8: 100 MiB + 1 -> 104 MiB");
    TAP_OK(alloc_caching_round_size(3 * MiB + 1, 2) == 4 * MiB, "div 2: 3 MiB + 1 -> 4 MiB");
    TAP_OK(alloc_caching_round_size(1200, 4) == 1536 && alloc_caching_round_size(2048, 4) == 2048,
           "div 4: sizes <= 512 * 4 use plain 512 rounding (1200 -> 1536, 2048 -> 2048)");
    TAP_OK(alloc_caching_round_size(2049, 4) == 2560, "div 4: 2049 -> 2560 (division 512)");
    TAP_OK(alloc_caching_round_size(5 * MiB + 1, 1) == 5 * MiB + 512, "div 1: off");

    fx f = fx_new(GiB, UINT64_MAX, 4);
    A(&f, 5 * MiB + 1, 0);
    TAP_OK(S(&f)->allocated_bytes == 6 * MiB && S(&f)->requested_bytes == 5 * MiB + 1,
           "allocator with div 4 hands out 6 MiB for 5 MiB + 1");
    fx_free(&f);

    simbe_t *be = simbe_new(NULL, GiB, 0);
    alloc_config cfg;
    alloc_config_default(&cfg);
    cfg.roundup_power2_divisions = 3;
    alloc_t *a = NULL;
    ms_error err;
    TAP_OK(alloc_new("caching", &cfg, simbe_backend(be), &a, &err) != MS_OK,
           "divisions must be a power of two (PyTorch's rule)");
    alloc_config_default(&cfg);
    cfg.max_split_size_bytes = 10 * MiB;
    TAP_OK(alloc_new("caching", &cfg, simbe_backend(be), &a, &err) != MS_OK,
           "max_split_size below 20 MiB is rejected (PyTorch's rule)");
    simbe_free(be);
}

static void test_stats_scenario(void)
{
    fx f = fx_new(GiB, UINT64_MAX, 0);
    const alloc_stats *s = S(&f);
    uint64_t a = A(&f, 1000, 0);
    TAP_OK(a == B0 && s->allocated_bytes == 1024 && s->reserved_bytes == 2 * MiB &&
           s->active_bytes == 1024 && s->inactive_split_bytes == 2 * MiB - 1024 &&
           s->requested_bytes == 1000, "step 1: alloc 1000");
    uint64_t b = A(&f, 3000, 0);
    TAP_OK(b == B0 + 1024 && s->allocated_bytes == 4096 && s->reserved_bytes == 2 * MiB &&
           s->active_bytes == 4096 && s->inactive_split_bytes == 2 * MiB - 4096 &&
           s->requested_bytes == 4000, "step 2: alloc 3000 after it");
    F(&f, a);
    TAP_OK(s->allocated_bytes == 3072 && s->active_bytes == 3072 &&
           s->inactive_split_bytes == 2 * MiB - 3072 && s->requested_bytes == 3000,
           "step 3: free the first");
    uint64_t c = A(&f, 512, 0);
    TAP_OK(c == B0 && s->allocated_bytes == 3584 && s->active_bytes == 3584 &&
           s->inactive_split_bytes == 2 * MiB - 3584 && s->requested_bytes == 3512,
           "step 4: 512 bytes best-fit into the freed 1024 (split, 512 left)");
    F(&f, b);
    TAP_OK(s->allocated_bytes == 512 && s->inactive_split_bytes == 2 * MiB - 512 &&
           s->requested_bytes == 512 && checks(&f), "step 5: free the middle, merges both sides");
    F(&f, c);
    TAP_OK(s->allocated_bytes == 0 && s->inactive_split_bytes == 0 && s->active_bytes == 0 &&
           s->reserved_bytes == 2 * MiB, "step 6: all free, one whole cached segment");
    TAP_OK(s->allocated_peak_bytes == 4096 && s->reserved_peak_bytes == 2 * MiB &&
           s->requested_peak_bytes == 4000 && s->inactive_split_peak_bytes == 2 * MiB - 512,
           "peaks (allocated 4096 at step 2, inactive split 2 MiB - 512 at step 5)");
    TAP_OK(alloc_empty_cache(f.a) == MS_OK && s->reserved_bytes == 0 &&
           simbe_live_segments(f.be) == 0 && s->num_segment_frees == 1 && s->num_splits == 3,
           "step 7: empty_cache returns the segment");
    fx_free(&f);
}

static void test_edge_cases(void)
{
    fx f = fx_new(GiB, UINT64_MAX, 0);
    uint64_t addr = 7;
    TAP_OK(alloc_block(f.a, 0, 0, 0, &addr) == MS_OK && addr == 0 &&
           simbe_segment_count(f.be) == 0 && S(&f)->allocated_bytes == 0,
           "zero bytes: null address, nothing allocated (PyTorch)");
    TAP_OK(alloc_release(f.a, 0) == MS_OK, "releasing the null address is a no-op");
    uint64_t p = A(&f, 4096, 0);
    alloc_stats before = *S(&f);
    TAP_OK(alloc_release(f.a, p + 512) == MS_ERR_INVALID, "unknown address: MS_ERR_INVALID");
    TAP_OK(memcmp(&before, S(&f), sizeof before) == 0 && checks(&f),
           "unknown address leaves the allocator unchanged");
    char why[256];
    f.a->stats.allocated_bytes += 512;
    TAP_OK(alloc_check(f.a, why, sizeof why) == MS_ERR_INVALID && strstr(why, "recount"),
           "check catches stats that differ from a recount (%s)", why);
    f.a->stats.allocated_bytes -= 512;
    TAP_OK(F(&f, p) && alloc_release(f.a, p) == MS_ERR_INVALID, "double free: MS_ERR_INVALID");
    TAP_OK(alloc_block(f.a, 1ULL << 62, 0, 0, &addr) == MS_ERR_OOM,
           "a request of more than 1 EiB is an OOM");
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    A(&f, 5 * MiB, 0);
    alloc_dump(f.a, mf);
    fclose(mf);
    TAP_OK(buf && strstr(buf, "segment 0x100000000000") && strstr(buf, "allocated (requested"),
           "dump lists segments and blocks");
    free(buf);
    fx_free(&f);
}

/* Randomized: mixed sizes, three streams, capacity pressure, the full check after every
 * call (check_every_op), and our own overlap check of the live ranges. */
typedef struct live { uint64_t addr, bytes; } live;

static int live_cmp(const void *x, const void *y)
{
    const live *p = x, *q = y;
    return p->addr < q->addr ? -1 : p->addr > q->addr;
}

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t rand_bytes(void)
{
    uint64_t r = rnd() % 100;
    if (r < 55) return 1 + rnd() % MiB;                 /* small pool */
    if (r < 85) return MiB + rnd() % (9 * MiB);         /* large, 20 MiB segments */
    return 10 * MiB + rnd() % (50 * MiB);               /* large, own segments */
}

static void test_random(uint64_t max_split, unsigned div, int nops)
{
    fx f = fx_new(320 * MiB, max_split, div);
    live *lv = calloc(128, sizeof *lv), *tmp = calloc(128, sizeof *tmp);
    size_t nl = 0;
    int bad = 0, overlap = 0, ooms = 0;
    for (int op = 0; op < nops && !bad; op++) {
        uint64_t r = rnd() % 1000;
        if (r < 2) {
            bad |= alloc_empty_cache(f.a) != MS_OK;
        } else if (nl > 0 && (r < 480 || nl == 128)) {
            size_t k = rnd() % nl;
            bad |= alloc_release(f.a, lv[k].addr) != MS_OK;
            lv[k] = lv[--nl];
        } else {
            uint64_t bytes = rand_bytes(), addr;
            ms_status st = alloc_block(f.a, bytes, (int)(rnd() % 3), 0, &addr);
            if (st == MS_ERR_OOM) ooms++;
            else if (st != MS_OK) bad = 1;
            else lv[nl++] = (live){addr, bytes};
        }
        if (op % 997 == 0) {
            memcpy(tmp, lv, nl * sizeof *lv);
            qsort(tmp, nl, sizeof *tmp, live_cmp);
            for (size_t k = 1; k < nl; k++)
                if (tmp[k - 1].addr + tmp[k - 1].bytes > tmp[k].addr) overlap = 1;
        }
    }
    TAP_OK(!bad, "random (max_split %llu, div %u): %d calls, every check passed",
           (unsigned long long)(max_split == UINT64_MAX ? 0 : max_split / MiB), div, nops);
    TAP_OK(!overlap, "random: live ranges never overlap");
    TAP_OK(ooms > 0 && S(&f)->num_alloc_retries > 0,
           "random: capacity pressure exercised retries (%llu) and OOMs (%d)",
           (unsigned long long)S(&f)->num_alloc_retries, ooms);
    for (size_t k = 0; k < nl; k++) bad |= alloc_release(f.a, lv[k].addr) != MS_OK;
    bad |= alloc_empty_cache(f.a) != MS_OK;
    TAP_OK(!bad && simbe_live_segments(f.be) == 0 && S(&f)->reserved_bytes == 0 &&
           S(&f)->allocated_bytes == 0 && S(&f)->inactive_split_bytes == 0 &&
           simbe_device_used_bytes(f.be) == 0,
           "random: after freeing all and empty_cache nothing is left");
    free(lv);
    free(tmp);
    fx_free(&f);
}

/* Blocks held by handle (alloc_block_h, alloc_release_h, as the executor holds them): the
 * same addresses, statistics and OOMs as by address over one random program, the invariant
 * check after every call (which counts the blocks held by handle); frees mixed across the
 * two ways; the handle a hint. */
static int same_stats(const alloc_stats *x, const alloc_stats *y)
{
    return x->allocated_bytes == y->allocated_bytes && x->reserved_bytes == y->reserved_bytes &&
           x->active_bytes == y->active_bytes && x->requested_bytes == y->requested_bytes &&
           x->inactive_split_bytes == y->inactive_split_bytes &&
           x->allocated_peak_bytes == y->allocated_peak_bytes &&
           x->reserved_peak_bytes == y->reserved_peak_bytes && x->num_allocs == y->num_allocs &&
           x->num_frees == y->num_frees && x->num_ooms == y->num_ooms &&
           x->num_alloc_retries == y->num_alloc_retries && x->num_splits == y->num_splits;
}

static void test_handles(void)
{
    fx f = fx_new(320 * MiB, UINT64_MAX, 0), g = fx_new(320 * MiB, UINT64_MAX, 0);
    typedef struct hl { uint64_t addr; uint32_t h; } hl;
    hl *lv = calloc(128, sizeof *lv);
    size_t nl = 0;
    int bad = 0, differ = 0, handles = 1;
    for (int op = 0; op < 40000 && !bad; op++) {
        uint64_t r = rnd() % 1000;
        if (r < 2) {
            bad |= alloc_empty_cache(f.a) != MS_OK || alloc_empty_cache(g.a) != MS_OK;
        } else if (nl > 0 && (r < 480 || nl == 128)) {
            size_t k = rnd() % nl;
            /* one free in ten by address: a block held by handle is found by a search */
            ms_status sg = r % 10 == 0 ? alloc_release(g.a, lv[k].addr)
                                       : alloc_release_h(g.a, lv[k].addr, lv[k].h);
            bad |= alloc_release(f.a, lv[k].addr) != MS_OK || sg != MS_OK;
            lv[k] = lv[--nl];
        } else {
            uint64_t bytes = rand_bytes(), af = 0, ag = 0;
            uint32_t h;
            int stream = (int)(rnd() % 3);
            ms_status sf = alloc_block(f.a, bytes, stream, 0, &af);
            ms_status sg = alloc_block_h(g.a, bytes, stream, 0, &ag, &h);
            differ |= sf != sg || af != ag;
            if (sf == MS_OK && sg == MS_OK) {
                handles &= h != ALLOC_NO_HANDLE;
                lv[nl++] = (hl){ag, h};
            } else if (sf != MS_ERR_OOM) {
                bad = 1;
            }
        }
        differ |= !same_stats(S(&f), S(&g));
    }
    TAP_OK(!bad && !differ && handles,
           "by handle: the same addresses, statistics and OOMs as by address, every check "
           "passed");
    for (size_t k = 0; k < nl; k++) bad |= alloc_release_h(g.a, lv[k].addr, lv[k].h) != MS_OK;
    TAP_OK(!bad && S(&g)->allocated_bytes == 0 && checks(&g), "by handle: all freed");
    free(lv);
    fx_free(&f);

    uint64_t p, q, z;
    uint32_t hp, hq, hz;
    int ok = alloc_block_h(g.a, 4 * MiB, 0, 0, &p, &hp) == MS_OK &&
             alloc_block_h(g.a, 4 * MiB, 0, 0, &q, &hq) == MS_OK &&
             alloc_block_h(g.a, 0, 0, 0, &z, &hz) == MS_OK;
    TAP_OK(ok && z == 0 && hz == ALLOC_NO_HANDLE, "a zero-byte request: address 0, no handle");
    TAP_OK(alloc_release_h(g.a, p, hq) == MS_OK && checks(&g),
           "another block's handle: a hint only, the block at the address is freed");
    TAP_OK(alloc_release_h(g.a, p, hp) == MS_ERR_INVALID,
           "a freed block by its old handle: MS_ERR_INVALID");
    TAP_OK(alloc_release_h(g.a, q + 512, hq) == MS_ERR_INVALID && checks(&g),
           "an address that is no block's, with a live handle: MS_ERR_INVALID, nothing freed");
    TAP_OK(alloc_release_h(g.a, q, ALLOC_NO_HANDLE) == MS_OK && S(&g)->allocated_bytes == 0,
           "no handle: freed by address");
    uint64_t r;
    TAP_OK(alloc_block(g.a, MiB, 0, 0, &r) == MS_OK && alloc_release_h(g.a, r, 7) == MS_OK &&
           checks(&g), "a block allocated by address, freed with a handle it never had");
    fx_free(&g);
}

/* The executor's deferred frees: the hook gives a held block back when the allocator asks. */
typedef struct held {
    alloc_t *a;
    uint64_t addr;
    int calls;
} held;

static void give_back(void *ctx)
{
    held *h = ctx;
    h->calls++;
    if (h->addr) alloc_release(h->a, h->addr);
    h->addr = 0;
}

/* Capability bits instead of names: only the caching allocator takes an events hook, only
 * the static arena places tensors by plan; the hook runs inside the retry and its frees cure
 * the OOM. */
static void test_caps_and_events_hook(void)
{
    size_t n;
    const alloc_vtable *const *reg = alloc_registry(&n);
    int right = 1;
    for (size_t k = 0; k < n; k++) {
        int caching = !strcmp(reg[k]->name, "caching"), arena = !strcmp(reg[k]->name, "static");
        right &= !!(reg[k]->caps & ALLOC_CAP_EVENTS_HOOK) == caching &&
                 (reg[k]->set_events_hook != NULL) == caching &&
                 !!(reg[k]->caps & ALLOC_CAP_STATIC_PLAN) == arena;
    }
    TAP_OK(right, "caps: events hook on caching only, static plan on the static arena only");
    fx f = fx_new(40 * MiB, UINT64_MAX, 0);
    TAP_OK(alloc_caps(f.a) == ALLOC_CAP_EVENTS_HOOK, "alloc_caps reads the vtable's bits");
    held h = {f.a, A(&f, 30 * MiB, 0), 0};
    TAP_OK(alloc_set_events_hook(f.a, give_back, &h) == 1, "caching takes the hook");
    uint64_t w = A(&f, 30 * MiB, 0);
    TAP_OK(w != UINT64_MAX && h.calls == 1 && h.addr == 0 && S(&f)->num_alloc_retries == 1,
           "the retry calls the hook once; the block it gives back makes room");
    TAP_OK(alloc_set_events_hook(f.a, NULL, NULL) == 1 && F(&f, w) && checks(&f),
           "the hook can be removed");
    fx_free(&f);
    simbe_t *be = simbe_new(NULL, GiB, 0);
    alloc_t *st = NULL;
    ms_error err;
    if (!be || alloc_new("stitching", NULL, simbe_backend(be), &st, &err) != MS_OK) exit(99);
    TAP_OK(alloc_set_events_hook(st, give_back, &h) == 0 && !(alloc_caps(st) & ALLOC_CAP_EVENTS_HOOK),
           "stitching has no events hook: refused, nothing stored");
    alloc_free(st);
    simbe_free(be);
}

int main(void)
{
    test_rounding();
    test_pools_and_segments();
    test_split_thresholds();
    test_split_addresses_and_coalescing();
    test_best_fit();
    test_streams();
    test_max_split();
    test_release_available();
    test_retry_and_oom();
    test_roundup_power2();
    test_stats_scenario();
    test_edge_cases();
    test_caps_and_events_hook();
    test_handles();
    test_random(UINT64_MAX, 0, 140000);
    test_random(40 * MiB, 4, 60000);
    return tap_done();
}

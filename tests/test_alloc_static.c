/* test_alloc_static.c — unit tests of the static arena and the greedy best-fit planner
 * (memory/alloc_static.c) over the simulated backend: planned offsets honoured, one
 * cudaMalloc of the arena, the fallback for unplanned tensors, overlap caught by check(), the
 * lazily grown arena, bad input, and the planner against a brute-force validity check.
 * Run by `make check`. */
#include <stdlib.h>
#include <string.h>

#include "memory/alloc_static.h"
#include "memory/alloc_static_plan.h"
#include "sim/simbackend.h"
#include "tests/tap.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

typedef struct fx {
    simbe_t *be;
    alloc_t *a;
} fx;

static ms_status make(fx *f, const uint64_t *ids, const uint64_t *offs, size_t n,
                      uint64_t arena, int check_every_op)
{
    alloc_config c;
    alloc_config_default(&c);
    c.static_ids = ids;
    c.static_offsets = offs;
    c.static_n = n;
    c.static_arena_bytes = arena;
    c.check_every_op = check_every_op;
    f->be = simbe_new(NULL, 4 * GiB, 0);
    f->a = NULL;
    return alloc_new("static", &c, simbe_backend(f->be), &f->a, NULL);
}

static void done(fx *f)
{
    alloc_free(f->a);
    simbe_free(f->be);
}

static uint64_t get(alloc_t *a, uint64_t bytes, uint64_t tag)
{
    uint64_t addr = 0;
    if (alloc_block(a, bytes, 0, tag, &addr) != MS_OK) return 0;
    return addr;
}

static int no_leak(const fx *f)
{
    return simbe_live_handles(f->be) == 0 && simbe_live_mappings(f->be) == 0 &&
           simbe_live_reservations(f->be) == 0 && simbe_live_segments(f->be) == 0;
}

static void test_offsets(void)
{
    static const uint64_t ids[] = {1, 2, 3, 7}, offs[] = {0, 1 * MiB, 3 * MiB, 0};
    fx f;
    TAP_OK(make(&f, ids, offs, 4, 8 * MiB, 1) == MS_OK && simbe_segment_count(f.be) == 1 &&
           simbe_segment_bytes(f.be, 0) == 8 * MiB,
           "one cudaMalloc of the 8 MiB arena at creation");
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t a = get(f.a, 1 * MiB, 1), b = get(f.a, 2 * MiB, 2), c = get(f.a, 5 * MiB, 3);
    TAP_OK(a && b == a + 1 * MiB && c == a + 3 * MiB, "tensors sit at their planned offsets");
    TAP_OK(s->reserved_bytes == 8 * MiB && s->allocated_bytes == 8 * MiB &&
           simbe_segment_count(f.be) == 1, "no further device memory for planned tensors");
    uint64_t x = get(f.a, 3 * MiB, 99);
    TAP_OK(x && (x < a || x >= a + 8 * MiB) && alloc_static_num_fallbacks(f.a) == 1 &&
           alloc_static_fallback_stats(f.a)->allocated_bytes == 3 * MiB,
           "a tensor without an offset goes to the fallback allocator");
    TAP_OK(s->reserved_bytes == 8 * MiB + alloc_static_fallback_stats(f.a)->reserved_bytes,
           "totals include the fallback, which is also counted on its own");
    uint64_t dup = 1;
    TAP_OK(alloc_block(f.a, 1 * MiB, 0, 1, &dup) == MS_ERR_INVALID,
           "a second live tensor at the same planned address is MS_ERR_INVALID");
    TAP_OK(alloc_block(f.a, 6 * MiB, 0, 3, &dup) == MS_ERR_INVALID,
           "a tensor that ends past the arena is MS_ERR_INVALID");
    alloc_release(f.a, c);
    uint64_t c2 = get(f.a, 5 * MiB, 3);
    TAP_OK(c2 == c, "a freed tensor comes back to its offset");
    alloc_stats before = *s;
    TAP_OK(alloc_release(f.a, a + 4096) == MS_ERR_INVALID && memcmp(&before, s, sizeof before) == 0,
           "free of an unknown address is MS_ERR_INVALID, nothing changes");
    TAP_OK(alloc_block(f.a, 0, 0, 1, &dup) == MS_OK && dup == 0 && alloc_release(f.a, 0) == MS_OK,
           "zero bytes: the null block, as the caching allocator");
    TAP_OK(alloc_block(f.a, 5 * GiB, 0, 7, &dup) == MS_ERR_OOM, "more than the device is OOM");
    alloc_release(f.a, a);
    alloc_release(f.a, b);
    alloc_release(f.a, c2);
    alloc_release(f.a, x);
    alloc_empty_cache(f.a);
    TAP_OK(no_leak(&f) && s->reserved_bytes == 0, "an idle arena is given back by empty_cache");
    uint64_t again = get(f.a, 1 * MiB, 2);
    TAP_OK(again && s->reserved_bytes == 8 * MiB && simbe_segment_count(f.be) == 3,
           "the next planned tensor makes the arena again");
    alloc_release(f.a, again);
    done(&f);
}

static void test_overlap(void)
{
    static const uint64_t ids[] = {1, 2}, offs[] = {0, 1 * MiB};
    fx f;
    make(&f, ids, offs, 2, 4 * MiB, 0);
    uint64_t a = get(f.a, 2 * MiB, 1), b = get(f.a, 1 * MiB, 2);
    char why[256] = "";
    TAP_OK(a && b && alloc_check(f.a, why, sizeof why) == MS_ERR_INVALID && strstr(why, "overlap"),
           "two live tensors overlapping in the arena are caught by check()");
    TAP_NOTE("check: %s", why);
    alloc_release(f.a, b);
    TAP_OK(alloc_check(f.a, why, sizeof why) == MS_OK, "the invariant holds again once one is freed");
    alloc_release(f.a, a);
    done(&f);

    make(&f, ids, offs, 2, 4 * MiB, 1);
    a = get(f.a, 2 * MiB, 1);
    uint64_t bb = 0;
    TAP_OK(alloc_block(f.a, 1 * MiB, 0, 2, &bb) == MS_ERR_INVALID,
           "with check_every_op the overlapping allocation reports MS_ERR_INVALID");
    done(&f);
}

static void test_lazy(void)
{
    static const uint64_t ids[] = {4, 5}, offs[] = {10 * MiB, 0};
    fx f;
    TAP_OK(make(&f, ids, offs, 2, 0, 1) == MS_OK && simbe_live_reservations(f.be) == 0 &&
           alloc_static_arena_bytes(f.a) == 0, "arena size 0: nothing reserved at creation");
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t a = get(f.a, 5 * MiB, 4);
    TAP_OK(a && s->reserved_bytes == 16 * MiB && simbe_live_handles(f.be) == 8,
           "the first tensor maps chunks up to offset + bytes (15 MiB -> 16 MiB)");
    uint64_t b = get(f.a, 1 * MiB, 5);
    TAP_OK(b == a - 10 * MiB && s->reserved_bytes == 16 * MiB, "a lower offset needs no growth");
    alloc_release(f.a, a);
    alloc_release(f.a, b);
    alloc_empty_cache(f.a);
    TAP_OK(no_leak(&f), "empty_cache unmaps and releases the grown arena");
    done(&f);
    static const uint64_t bad_ids[] = {5, 4};
    fx g;
    TAP_OK(make(&g, bad_ids, offs, 2, 0, 0) != MS_OK, "unsorted static_ids are rejected");
    simbe_free(g.be);
}

/* Brute force: no two tensors with intersecting lifetimes overlap in space. */
static int plan_valid(const uint64_t *bytes, const uint64_t *fu, const uint64_t *lu, size_t n,
                      const uint64_t *off, uint64_t arena)
{
    for (size_t i = 0; i < n; i++) {
        if (off[i] % ALLOC_STATIC_ALIGN_BYTES || off[i] + bytes[i] > arena) return 0;
        for (size_t j = i + 1; j < n; j++) {
            int live_together = fu[i] <= lu[j] && fu[j] <= lu[i];
            int space = off[i] < off[j] + bytes[j] && off[j] < off[i] + bytes[i];
            if (live_together && space && bytes[i] && bytes[j]) return 0;
        }
    }
    return 1;
}

static void test_planner(void)
{
    uint64_t ids[] = {10, 11, 12}, by[] = {4 * MiB, 4 * MiB, 4 * MiB};
    uint64_t fu[] = {0, 1, 3}, lu[] = {2, 3, 4}, off[3], arena;
    TAP_OK(alloc_static_plan_greedy(ids, by, fu, lu, 3, off, &arena) == MS_OK && off[0] == 0 &&
           off[1] == 4 * MiB && off[2] == 0 && arena == 8 * MiB,
           "greedy plan: the third tensor reuses the first one's space");
    uint64_t dup[] = {10, 10, 12};
    TAP_OK(alloc_static_plan_greedy(dup, by, fu, lu, 3, off, &arena) == MS_ERR_INVALID,
           "repeated ids are rejected");
    uint64_t bad_lu[] = {2, 0, 4};
    TAP_OK(alloc_static_plan_greedy(ids, by, fu, bad_lu, 3, off, &arena) == MS_ERR_INVALID,
           "a lifetime ending before it starts is rejected");

    enum { N = 300 };
    static uint64_t rid[N], rb[N], rf[N], rl[N], ro[N];
    uint64_t seed = 42, peak = 0;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        rid[i] = 1000 + i;
        rb[i] = 1 + (seed >> 20) % (64 * MiB);
        rf[i] = (seed >> 50) % 500;
        rl[i] = rf[i] + (seed >> 8) % 40;
    }
    for (uint64_t t = 0; t < 540; t++) {
        uint64_t live = 0;
        for (size_t i = 0; i < N; i++)
            if (rf[i] <= t && t <= rl[i]) live += rb[i];
        if (live > peak) peak = live;
    }
    ms_status st = alloc_static_plan_greedy(rid, rb, rf, rl, N, ro, &arena);
    TAP_OK(st == MS_OK && plan_valid(rb, rf, rl, N, ro, arena),
           "a random 300-tensor plan has no overlap among tensors alive together");
    TAP_NOTE("greedy arena %llu MiB, peak live %llu MiB", (unsigned long long)(arena >> 20),
             (unsigned long long)(peak >> 20));
    TAP_OK(arena >= peak && arena <= peak * 3 / 2, "the arena is within 1.5x of the peak live bytes");

    /* the plan drives the allocator: replay the lifetimes through the static arena */
    fx f;
    TAP_OK(make(&f, rid, ro, N, arena, 1) == MS_OK, "allocator made from the greedy plan");
    static uint64_t addr[N];
    int all_ok = 1;
    for (uint64_t t = 0; t < 541 && all_ok; t++) {
        for (size_t i = 0; i < N; i++)   /* frees of step t-1 before the allocations of t */
            if (rl[i] + 1 == t && alloc_release(f.a, addr[i]) != MS_OK) all_ok = 0;
        for (size_t i = 0; i < N; i++)
            if (rf[i] == t && alloc_block(f.a, rb[i], 0, rid[i], &addr[i]) != MS_OK) all_ok = 0;
    }
    TAP_OK(all_ok && alloc_static_num_fallbacks(f.a) == 0 &&
           alloc_get_stats(f.a)->reserved_peak_bytes == arena,
           "the replay stays inside the arena with the invariant checked at every call");
    done(&f);
}

int main(void)
{
    TAP_OK(alloc_find("static") == &alloc_static_vt, "registered as \"static\"");
    test_offsets();
    test_overlap();
    test_lazy();
    test_planner();
    return tap_done();
}

/* test_alloc_expandable.c — unit tests of PyTorch's expandable segments
 * (memory/alloc_expandable.c) over the simulated backend: pages mapped on demand at the
 * lowest address, reserved growing in 20 MiB (large) and 2 MiB (small) pages, best fit and
 * coalescing inside the segment, unmapping of whole free pages on empty_cache and on the
 * OOM retry, failure injection and bad input. Run by `make check`. */
#include <stdlib.h>
#include <string.h>

#include "memory/alloc_expandable.h"
#include "sim/simbackend.h"
#include "tests/tap.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

typedef struct fx {
    simbe_t *be;
    alloc_t *a;
} fx;

static fx make(uint64_t cap)
{
    fx f;
    alloc_config c;
    alloc_config_default(&c);
    c.check_every_op = 1;
    f.be = simbe_new(NULL, cap, 0);
    f.a = NULL;
    ms_error err;
    if (!f.be || alloc_new("expandable", &c, simbe_backend(f.be), &f.a, &err) != MS_OK) {
        printf("Bail out! cannot create the expandable allocator\n");
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

static uint64_t get(alloc_t *a, uint64_t bytes, int stream)
{
    uint64_t addr = 0;
    if (alloc_block(a, bytes, stream, 0, &addr) != MS_OK) return 0;
    return addr;
}

static int no_leak(const fx *f)
{
    return simbe_live_handles(f->be) == 0 && simbe_live_mappings(f->be) == 0 &&
           simbe_live_reservations(f->be) == 0 && simbe_live_segments(f->be) == 0;
}

static void test_growth(void)
{
    fx f = make(16 * GiB);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t a = get(f.a, 30 * MiB, 0);
    TAP_OK(a && s->reserved_bytes == 40 * MiB && s->num_new_chunks == 2 && s->num_maps == 2,
           "30 MiB maps two 20 MiB pages");
    TAP_OK(simbe_live_reservations(f.be) == 1 && alloc_expandable_num_segments(f.a) == 1 &&
           simbe_segment_count(f.be) == 0, "one VA reservation, no cudaMalloc");
    uint64_t b = get(f.a, 10 * MiB, 0);
    TAP_OK(b == a + 30 * MiB && s->reserved_bytes == 40 * MiB,
           "10 MiB fits in the mapped remainder right after the first block");
    uint64_t c = get(f.a, 25 * MiB, 0);
    TAP_OK(c == a + 40 * MiB && s->reserved_bytes == 80 * MiB && alloc_expandable_mapped_pages(f.a) == 4,
           "25 MiB grows the segment by two pages at its end");
    TAP_OK(s->reserved_bytes % (20 * MiB) == 0 && s->num_segment_allocs == 2,
           "reserved grows in whole 20 MiB pages, one map_block per growth");
    alloc_release(f.a, b);
    uint64_t d = get(f.a, 8 * MiB, 0);
    TAP_OK(d == b && s->reserved_bytes == 80 * MiB, "a freed block is reused by best fit");
    uint64_t e = get(f.a, 2 * MiB, 0);
    TAP_OK(e == b + 8 * MiB && ok_check(f.a), "the split remainder serves the next request");
    alloc_release(f.a, d);
    alloc_release(f.a, e);
    alloc_release(f.a, a);
    TAP_OK(ok_check(f.a) && s->allocated_bytes == 25 * MiB, "free blocks coalesce in the segment");
    uint64_t big = get(f.a, 40 * MiB, 0);
    TAP_OK(big == a && s->reserved_bytes == 80 * MiB, "the coalesced 40 MiB at the start is reused");
    alloc_release(f.a, big);
    alloc_release(f.a, c);
    uint64_t syncs = s->num_syncs, unmaps = s->num_unmaps;
    alloc_empty_cache(f.a);
    TAP_OK(s->reserved_bytes == 0 && s->num_unmaps == unmaps + 4 && s->num_syncs > syncs,
           "empty_cache unmaps every page, with a synchronize");
    TAP_OK(no_leak(&f) && alloc_expandable_num_segments(f.a) == 0,
           "the empty segment's address space is released");
    done(&f);
}

static void test_small_and_partial(void)
{
    fx f = make(16 * GiB);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t x = get(f.a, 4096, 0), y = get(f.a, 600 * 1024, 0);
    TAP_OK(x && y == x + 4096 && s->reserved_bytes == 2 * MiB && s->num_new_chunks == 1,
           "small requests share one 2 MiB page of the small pool's segment");
    uint64_t z = get(f.a, 1500 * 1024, 0);
    TAP_OK(z && s->reserved_bytes == 2 * MiB + 20 * MiB && alloc_expandable_num_segments(f.a) == 2,
           "a 1.5 MiB request goes to the large pool's own segment");
    alloc_release(f.a, x);
    alloc_release(f.a, y);
    alloc_release(f.a, z);
    alloc_empty_cache(f.a);
    TAP_OK(no_leak(&f), "both segments released");

    uint64_t a = get(f.a, 30 * MiB, 0), b = get(f.a, 30 * MiB, 0);
    TAP_OK(b == a + 30 * MiB && s->reserved_bytes == 60 * MiB, "two 30 MiB blocks on three pages");
    alloc_release(f.a, a);
    alloc_empty_cache(f.a);
    TAP_OK(s->reserved_bytes == 40 * MiB && ok_check(f.a),
           "only the page wholly inside the free block is unmapped");
    uint64_t c = get(f.a, 15 * MiB, 0);
    TAP_OK(c == a && s->reserved_bytes == 60 * MiB,
           "the hole at the lowest address is mapped again first");
    alloc_release(f.a, c);
    alloc_release(f.a, b);
    alloc_empty_cache(f.a);
    TAP_OK(no_leak(&f) && s->reserved_bytes == 0, "nothing left after empty_cache");
    done(&f);
}

static void test_oom_retry(void)
{
    fx f = make(100 * MiB);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t a = get(f.a, 60 * MiB, 0);
    alloc_release(f.a, a);
    TAP_OK(s->reserved_bytes == 60 * MiB, "60 MiB stay mapped after the free");
    uint64_t b = get(f.a, 80 * MiB, 1);
    TAP_OK(b && s->num_alloc_retries == 1 && s->reserved_bytes == 80 * MiB,
           "stream 1 needs the memory: cached pages unmapped, then the retry succeeds");
    uint64_t c = 1;
    TAP_OK(alloc_block(f.a, 40 * MiB, 0, 0, &c) == MS_ERR_OOM && ok_check(f.a),
           "a request beyond the capacity is OOM after the retry");
    alloc_release(f.a, b);
    alloc_empty_cache(f.a);
    TAP_OK(no_leak(&f), "no leak after the OOM");
    done(&f);
}

static void test_failures(void)
{
    int all_ok = 1, n_oom = 0, n_done = 0;
    for (uint64_t k = 0; k < 12; k++) {
        fx f = make(4 * GiB);
        uint64_t keep = get(f.a, 50 * MiB, 0);
        simbe_fail_after(f.be, k);
        uint64_t y = 0, z = 0;
        ms_status r1 = alloc_block(f.a, 100 * MiB, 0, 0, &y);
        ms_status r2 = alloc_block(f.a, 3 * MiB, 2, 0, &z);
        simbe_fail_after(f.be, UINT64_MAX);
        if (!ok_check(f.a)) all_ok = 0;
        if ((r1 != MS_OK && r1 != MS_ERR_OOM) || (r2 != MS_OK && r2 != MS_ERR_OOM)) all_ok = 0;
        n_oom += (r1 != MS_OK) + (r2 != MS_OK);
        n_done += (r1 == MS_OK) + (r2 == MS_OK);
        if (r1 == MS_OK) alloc_release(f.a, y);
        if (r2 == MS_OK) alloc_release(f.a, z);
        alloc_release(f.a, keep);
        alloc_empty_cache(f.a);
        if (!no_leak(&f) || alloc_get_stats(f.a)->reserved_bytes) all_ok = 0;
        done(&f);
    }
    TAP_NOTE("failure injection: %d OOM, %d served", n_oom, n_done);
    TAP_OK(all_ok && n_oom && n_done, "failures injected after 0..11 calls: OOM or success, no leak");
}

static void test_bad_input(void)
{
    fx f = make(1 * GiB);
    const alloc_stats *s = alloc_get_stats(f.a);
    uint64_t a = get(f.a, 5 * MiB, 0), x = 1;
    alloc_stats before = *s;
    TAP_OK(alloc_block(f.a, 2 * GiB, 0, 0, &x) == MS_ERR_OOM && s->reserved_bytes == before.reserved_bytes,
           "a request larger than the device is a clean OOM");
    before = *s;
    TAP_OK(alloc_release(f.a, a + 512) == MS_ERR_INVALID && memcmp(&before, s, sizeof before) == 0,
           "free of an unknown address is MS_ERR_INVALID, nothing changes");
    TAP_OK(alloc_block(f.a, 0, 0, 0, &x) == MS_OK && x == 0 && alloc_release(f.a, 0) == MS_OK,
           "zero bytes: the null block, as the caching allocator");
    TAP_OK(alloc_release(f.a, a) == MS_OK && alloc_release(f.a, a) == MS_ERR_INVALID,
           "double free is MS_ERR_INVALID");
    uint64_t r = get(f.a, 1000, 0);
    TAP_OK(r && s->allocated_bytes == 1024 && s->requested_bytes == 1000,
           "sizes round to 512 bytes (PyTorch's round_size)");
    alloc_release(f.a, r);
    done(&f);
}

int main(void)
{
    TAP_OK(alloc_find("expandable") == &alloc_expandable_vt, "registered as \"expandable\"");
    test_growth();
    test_small_and_partial();
    test_oom_retry();
    test_failures();
    test_bad_input();
    return tap_done();
}

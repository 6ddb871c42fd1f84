/* test_replay.c — tests of sim/replay.c: a small trace file written here replayed through
 * the caching allocator (events, peaks, segment sequence, charged time), an OOM reported as
 * a result with the failing request and the allocator's state, bad traces as FILE:LINE
 * errors, and the benchmark workload (deterministic, replays cleanly under the invariant
 * check). Run by `make check`. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/replay.h"
#include "sim/replay_bench.h"
#include "tests/tap.h"
#include "traces/trace.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static char dir[64];

/* Field by field: the struct has padding. */
static int same_events(const replay_event *a, const replay_event *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].id != b[i].id || a[i].bytes != b[i].bytes || a[i].stream != b[i].stream ||
            a[i].is_alloc != b[i].is_alloc)
            return 0;
    return 1;
}

static void add_alloc(trace_t *t, uint64_t id, uint64_t bytes, int stream)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    r.u.alloc.id = id;
    r.u.alloc.bytes = bytes;
    r.u.alloc.cls = TC_OTHER;
    r.u.alloc.layer = -1;
    r.u.alloc.stream = stream;
    r.u.alloc.producer = -1;
    if (trace_append(t, &r) != MS_OK) exit(99);
}

static void add_free(trace_t *t, uint64_t id)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = id;
    if (trace_append(t, &r) != MS_OK) exit(99);
}

static void add_mark(trace_t *t)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_MARK;
    r.u.mark.kind = TM_ITER;
    r.u.mark.value = 0;
    if (trace_append(t, &r) != MS_OK) exit(99);
}

/* alloc 1 (1000 B), alloc 2 (3000 B), mark, free 1, alloc 3 (5 MiB), free 2, free 3. */
static const char *write_small(void)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/small.trace", dir);
    trace_t *t = trace_new();
    add_alloc(t, 1, 1000, 0);
    add_alloc(t, 2, 3000, 0);
    add_mark(t);
    add_free(t, 1);
    add_alloc(t, 3, 5 * MiB, 0);
    add_free(t, 2);
    add_free(t, 3);
    ms_error err;
    if (trace_write(t, path, &err) != MS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        exit(99);
    }
    trace_free(t);
    return path;
}

/* The line of the first record starting with `prefix` (1-based), 0 if none. */
static uint64_t line_of(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    char buf[512];
    uint64_t n = 0, found = 0;
    while (f && !found && fgets(buf, sizeof buf, f)) {
        n++;
        if (strncmp(buf, prefix, strlen(prefix)) == 0) found = n;
    }
    if (f) fclose(f);
    return found;
}

/* Best fit breaks ties between free blocks of one size by address, so where cudaMalloc puts
 * segments matters: P (30 MiB) makes segment S1, Q (40 MiB) segment S2; Q freed, A (10 MiB)
 * splits S2; P freed: two free 30 MiB blocks, S1 and the rest of S2. R (30 MiB) takes the
 * lower one; A freed; T (40 MiB) reuses S2 if R took S1 (70 MiB reserved), else needs a third
 * segment (110 MiB). `script`: the value of meta pytorch.segment_allocs.0, or NULL. */
static const char *write_ties(const char *script, const char *name)
{
    static char path[3][128];
    static int k;
    char *p = path[k++ % 3];
    snprintf(p, sizeof path[0], "%s/%s.trace", dir, name);
    trace_t *t = trace_new();
    if (script && trace_set_meta(t, "pytorch.segment_allocs.0", script) != MS_OK) exit(99);
    add_alloc(t, 1, 30 * MiB, 0);
    add_alloc(t, 2, 40 * MiB, 0);
    add_free(t, 2);
    add_alloc(t, 3, 10 * MiB, 0);
    add_free(t, 1);
    add_alloc(t, 4, 30 * MiB, 0);
    add_free(t, 3);
    add_alloc(t, 5, 40 * MiB, 0);
    ms_error err;
    if (trace_write(t, p, &err) != MS_OK) exit(99);
    trace_free(t);
    return p;
}

static void test_addresses(void)
{
    const char *plain = write_ties(NULL, "ties");
    const char *scripted = write_ties("0x7f0000000000:31457280,0x7e0000000000:41943040",
                                      "ties-script");
    const char *bad = write_ties("0x7f0000000000;31457280", "ties-bad");
    replay_opts o;
    replay_opts_default(&o);
    o.capacity_bytes = GiB;
    o.check_every_op = 1;
    replay_result r;
    replay_result_init(&r);
    ms_error err;
    ms_status st = replay_file(plain, &o, &r, &err);
    TAP_OK(st == MS_OK && r.peak_reserved_bytes == 70 * MiB && r.n_segments == 2 &&
           r.recorded_addresses == 0,
           "ascending addresses: R takes S1, T reuses S2 (70 MiB reserved, got %llu)",
           (unsigned long long)r.peak_reserved_bytes);
    o.descending_addresses = 1;
    st = replay_file(plain, &o, &r, &err);
    TAP_OK(st == MS_OK && r.peak_reserved_bytes == 110 * MiB && r.n_segments == 3,
           "descending addresses: R takes S2's rest, T needs a third segment (110 MiB)");
    o.descending_addresses = 0;
    st = replay_file(scripted, &o, &r, &err);
    TAP_OK(st == MS_OK && r.peak_reserved_bytes == 110 * MiB && r.n_segments == 3 &&
           r.recorded_addresses == 2 && r.recorded_addresses_used == 2,
           "recorded addresses from the trace's meta: both used, 110 MiB");
    o.ignore_recorded_addresses = 1;
    st = replay_file(scripted, &o, &r, &err);
    TAP_OK(st == MS_OK && r.peak_reserved_bytes == 70 * MiB && r.recorded_addresses == 0,
           "ignore_recorded_addresses: ascending again");
    /* A script whose sizes differ from the replay's calls is left at the first difference. */
    const uint64_t addrs[2] = {0x7f0000000000ULL, 0x7e0000000000ULL};
    const uint64_t sizes[2] = {30 * MiB, 42 * MiB};
    o.segment_addrs = addrs;
    o.segment_sizes = sizes;
    o.n_segment_addrs = 2;
    st = replay_file(plain, &o, &r, &err);
    TAP_OK(st == MS_OK && r.recorded_addresses == 2 && r.recorded_addresses_used == 1 &&
           r.peak_reserved_bytes == 70 * MiB,
           "a script that differs is used up to the difference only (%zu used)",
           r.recorded_addresses_used);
    o.segment_addrs = NULL;
    o.ignore_recorded_addresses = 0;
    st = replay_file(bad, &o, &r, &err);
    TAP_OK(st == MS_ERR_PARSE && strstr(err.msg, "pytorch.segment_allocs"),
           "a malformed segment_allocs line is an error (%s)", st == MS_OK ? "ok" : err.msg);
    replay_result_clear(&r);
}

static void test_small_trace(void)
{
    const char *path = write_small();
    replay_opts o;
    replay_opts_default(&o);
    o.capacity_bytes = GiB;
    o.check_every_op = 1;
    replay_result r;
    replay_result_init(&r);
    ms_error err;
    ms_status st = replay_file(path, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == REPLAY_OK, "small trace replays (%s)",
           st == MS_OK ? "ok" : err.msg);
    TAP_OK(r.events == 6 && r.allocs == 3 && r.frees == 3, "6 events: 3 allocs, 3 frees");
    TAP_OK(r.peak_allocated_bytes == 5 * MiB + 3072,
           "peak allocated: 3072 (tensor 2) + 5 MiB (tensor 3)");
    TAP_OK(r.peak_requested_bytes == 5 * MiB + 3000, "peak requested: 3000 + 5 MiB");
    TAP_OK(r.peak_active_bytes == r.peak_allocated_bytes, "peak active equals peak allocated");
    TAP_OK(r.peak_reserved_bytes == 22 * MiB && r.device_peak_bytes == 22 * MiB,
           "peak reserved: a 2 MiB small and a 20 MiB large segment");
    TAP_OK(r.n_segments == 2 && r.segment_bytes[0] == 2 * MiB && r.segment_bytes[1] == 20 * MiB,
           "segment sequence 2 MiB, 20 MiB");
    TAP_OK(r.stats.allocated_bytes == 0 && r.stats.reserved_bytes == 22 * MiB &&
           r.stats.num_allocs == 3 && r.stats.num_frees == 3,
           "final stats: nothing allocated, segments still cached");
    TAP_OK(r.alloc_time_us == 0 && r.oom_dump == NULL, "no machine: no time charged");
    replay_result_clear(&r);

    /* With a machine: cudaMalloc costs base + per GiB, charged per segment. */
    machine_profile *mp = machine_profile_new();
    mp->m.gpu_hbm_bytes = 2 * GiB;
    mp->m.gpu_reserved_bytes = GiB;
    mp->m.cuda_malloc_base_us = 100;
    mp->m.cuda_malloc_per_gib_us = 1024;
    o.machine = &mp->m;
    o.capacity_bytes = 0;
    st = replay_file(path, &o, &r, &err);
    TAP_OK(st == MS_OK && r.alloc_time_us > 222 - 1e-9 && r.alloc_time_us < 222 + 1e-9,
           "machine: two cudaMallocs charged 100 + 2 and 100 + 20 us (%.3f)", r.alloc_time_us);
    replay_result_clear(&r);
    machine_profile_free(mp);
}

static void test_oom(void)
{
    const char *path = write_small();
    replay_opts o;
    replay_opts_default(&o);
    o.capacity_bytes = 16 * MiB;
    replay_result r;
    replay_result_init(&r);
    ms_error err;
    ms_status st = replay_file(path, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == REPLAY_OOM, "capacity 16 MiB: OOM is a result, not an error");
    TAP_OK(r.oom_index == 3 && r.oom_id == 3 && r.oom_bytes == 5 * MiB && r.oom_stream == 0,
           "the failing request: event 3, tensor 3, 5 MiB");
    TAP_OK(r.oom_line == line_of(path, "alloc 3 ") && r.oom_line > 0,
           "the failing request's trace line (%llu)", (unsigned long long)r.oom_line);
    TAP_OK(r.events == 3 && r.stats.num_ooms == 1 && r.stats.num_alloc_retries == 1,
           "replay stopped at the OOM after one retry");
    TAP_OK(r.oom_dump && strstr(r.oom_dump, "segment 0x") && strstr(r.oom_dump, "small pool"),
           "the allocator's state is in the result");
    TAP_OK(r.peak_reserved_bytes == 2 * MiB && r.n_segments == 1, "only the small segment");
    replay_result_clear(&r);
}

static void test_bad_traces(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/bad.trace", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "memsim-trace 1\nalloc 5 4096 other -1 0 0 - -\nfree 6\n");
    fclose(f);
    replay_opts o;
    replay_opts_default(&o);
    o.capacity_bytes = GiB;
    replay_result r;
    replay_result_init(&r);
    ms_error err;
    char want[160];
    snprintf(want, sizeof want, "%s:3:", path);
    ms_status st = replay_file(path, &o, &r, &err);
    TAP_OK(st != MS_OK && strstr(err.msg, want) && strstr(err.msg, "not live"),
           "free of an unknown tensor: FILE:LINE error (%s)", err.msg);
    TAP_OK(r.events == 0 && r.segment_bytes == NULL, "the result is cleared on error");

    f = fopen(path, "w");
    fprintf(f, "memsim-trace 1\nalloc 5 4096 other -1 0 0 - -\nalloc 5 512 other -1 0 0 - -\n");
    fclose(f);
    st = replay_file(path, &o, &r, &err);
    TAP_OK(st != MS_OK && strstr(err.msg, want) && strstr(err.msg, "allocated while live"),
           "an id allocated twice: FILE:LINE error (%s)", err.msg);

    f = fopen(path, "w");
    fprintf(f, "memsim-trace 1\nalloc 5 4096 other -1 0 0 - -\nalloc 6 x other -1 0 0 - -\n");
    fclose(f);
    st = replay_file(path, &o, &r, &err);
    TAP_OK(st == MS_ERR_PARSE && strstr(err.msg, want), "malformed record: the reader's "
           "FILE:LINE error (%s)", err.msg);

    o.allocator = "no-such-allocator";
    st = replay_file(path, &o, &r, &err);
    TAP_OK(st == MS_ERR_NOTFOUND, "unknown allocator: MS_ERR_NOTFOUND");
    replay_opts_default(&o);
    st = replay_file(path, &o, &r, &err);
    TAP_OK(st == MS_ERR_INVALID, "neither capacity nor machine: MS_ERR_INVALID");
    snprintf(path, sizeof path, "%s/missing.trace", dir);
    o.capacity_bytes = GiB;
    st = replay_file(path, &o, &r, &err);
    TAP_OK(st == MS_ERR_IO, "missing file: MS_ERR_IO");
}

static void test_events_and_bench(void)
{
    replay_event *ev = NULL, *ev2 = NULL;
    size_t n = 0, n2 = 0;
    ms_error err;
    TAP_OK(replay_bench_workload(7, 300000, &ev, &n, &err) == MS_OK && n == 300000,
           "bench workload: 300000 events");
    TAP_OK(replay_bench_workload(7, 300000, &ev2, &n2, &err) == MS_OK && n2 == n &&
           same_events(ev, ev2, n), "bench workload is reproducible from its seed");
    free(ev2);
    ev2 = NULL;
    TAP_OK(replay_bench_workload(8, 300000, &ev2, &n2, &err) == MS_OK &&
           !same_events(ev, ev2, n), "another seed gives another workload");
    free(ev2);
    size_t small_allocs = 0, allocs = 0, stream1 = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].is_alloc) {
            allocs++;
            small_allocs += ev[i].bytes <= MiB;
            stream1 += ev[i].stream == 1;
        }
    TAP_OK(allocs > n / 3 && small_allocs > allocs / 4 && stream1 > 0,
           "workload mixes small-pool and large-pool requests and two streams");

    replay_opts o;
    replay_opts_default(&o);
    o.capacity_bytes = 80 * GiB;
    o.check_every_op = 1;
    replay_result r;
    replay_result_init(&r);
    ms_status st = replay_events(ev, 30000, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == REPLAY_OK && r.events == 30000,
           "30000 workload events replay under the invariant check (%s)",
           st == MS_OK ? "ok" : err.msg);
    replay_result_clear(&r);
    o.check_every_op = 0;
    st = replay_events(ev, n, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == REPLAY_OK && r.peak_allocated_bytes > 4 * GiB &&
           r.peak_reserved_bytes >= r.peak_allocated_bytes &&
           r.peak_reserved_bytes < 2 * r.peak_allocated_bytes,
           "whole workload: peak allocated %.2f GiB, reserved %.2f GiB",
           (double)r.peak_allocated_bytes / GiB, (double)r.peak_reserved_bytes / GiB);
    TAP_OK(r.stats.num_segment_allocs > 0 && r.stats.num_segment_allocs < 2000,
           "the cache works: %llu segments for %llu allocations",
           (unsigned long long)r.stats.num_segment_allocs, (unsigned long long)r.allocs);
    replay_result_clear(&r);
    o.capacity_bytes = 3 * GiB;
    st = replay_events(ev, n, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == REPLAY_OOM && r.oom_line == 0 && r.oom_dump,
           "in-memory events: OOM as a result at event %llu", (unsigned long long)r.oom_index);
    replay_result_clear(&r);
    free(ev);

    replay_bench_result b;
    st = replay_bench(NULL, NULL, 200000, 1, 1, &b, &err);
    TAP_OK(st == MS_OK && b.events == 200000 && b.events_per_s > 0 && b.best_s > 0,
           "bench: %.2f M events/s", b.events_per_s / 1e6);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_replay.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        printf("Bail out! cannot create a temporary directory\n");
        return 99;
    }
    test_small_trace();
    test_addresses();
    test_oom();
    test_bad_traces();
    test_events_and_bench();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) TAP_NOTE("could not remove %s", dir);
    return tap_done();
}

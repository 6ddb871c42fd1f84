/* test_pytorch_replay.c — the fidelity test of the caching allocator: real PyTorch 2.11
 * allocator traces (GPT-2 style training, plain / activation checkpointing / LoRA, recorded on
 * an H200 with traces/capture/record_fixtures.sh) are imported and replayed through memsim's
 * "caching" allocator, which must reproduce PyTorch's segment sizes in order, its peak
 * reserved bytes and its peak allocated bytes exactly (as memory_stats() reported them). The
 * expandable-segments recording is replayed through "expandable" and compared the same way.
 * Then every trace of experiments/realworld/h200 (Hugging Face training runs: TinyLlama,
 * LLaMA, GPT-2, Qwen, Mistral and MoE shapes, amp / bf16, with and without checkpointing;
 * $MEMSIM_REALWORLD) is replayed the same way, with the segment addresses cudaMalloc returned
 * in the recording. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "sim/replay.h"
#include "tests/tap.h"
#include "traces/import_pytorch.h"
#include "traces/trace.h"

/* The trace's alloc/free records as replay events. */
static replay_event *to_events(const trace_t *t, size_t *n)
{
    replay_event *ev = calloc(trace_count(t) + 1, sizeof *ev);
    *n = 0;
    for (size_t i = 0; ev && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC) {
            ev[*n].id = r->u.alloc.id;
            ev[*n].bytes = r->u.alloc.bytes;
            ev[*n].stream = r->u.alloc.stream;
            ev[*n].is_alloc = 1;
            (*n)++;
        } else if (r->type == TR_FREE) {
            ev[*n].id = r->u.free_id;
            (*n)++;
        }
    }
    return ev;
}

static void check_fixture(const char *dir, const char *name, const char *allocator,
                          int check_segments, int recorded_addresses, int check_every_op)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    trace_t *t = NULL;
    imp_result res;
    memset(&res, 0, sizeof res);
    ms_error err;
    ms_status st = imp_pytorch_load(path, NULL, &t, &res, &err);
    TAP_OK(st == MS_OK, "%s imports (%s)", name, st == MS_OK ? "ok" : err.msg);
    if (st != MS_OK) return;
    TAP_OK(res.has & IMP_HAS_STATS_RESERVED_PEAK, "%s carries PyTorch's memory_stats", name);
    size_t n;
    replay_event *ev = to_events(t, &n);
    replay_opts o;
    replay_opts_default(&o);
    o.allocator = allocator;
    o.capacity_bytes = 80ULL << 30;
    o.check_every_op = check_every_op;
    if (recorded_addresses) {
        o.segment_addrs = res.segment_addrs;
        o.segment_sizes = res.segment_sizes;
        o.n_segment_addrs = res.segments;
    }
    replay_result r;
    replay_result_init(&r);
    st = replay_events(ev, n, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == REPLAY_OK, "%s replays through %s with invariants held",
           name, allocator);
    TAP_OK(r.peak_reserved_bytes == res.stats_reserved_peak_bytes,
           "%s/%s: peak reserved %llu == PyTorch's %llu", name, allocator,
           (unsigned long long)r.peak_reserved_bytes,
           (unsigned long long)res.stats_reserved_peak_bytes);
    TAP_OK(r.peak_allocated_bytes == res.stats_allocated_peak_bytes,
           "%s/%s: peak allocated %llu == PyTorch's %llu", name, allocator,
           (unsigned long long)r.peak_allocated_bytes,
           (unsigned long long)res.stats_allocated_peak_bytes);
    if (recorded_addresses)
        TAP_OK(r.recorded_addresses_used == res.segments,
               "%s: every recorded segment address used (%zu of %llu)", name,
               r.recorded_addresses_used, (unsigned long long)res.segments);
    if (check_segments) {
        int same = r.n_segments == res.segments;
        size_t first_diff = 0;
        for (size_t i = 0; same && i < r.n_segments; i++)
            if (r.segment_bytes[i] != res.segment_sizes[i]) same = 0, first_diff = i;
        TAP_OK(same, "%s: %zu segments, sizes in PyTorch's order (%zu recorded%s)", name,
               r.n_segments, (size_t)res.segments, same ? "" : ", first difference noted");
        if (!same && first_diff < r.n_segments && first_diff < res.segments)
            TAP_NOTE("segment %zu: memsim %llu, PyTorch %llu", first_diff,
                     (unsigned long long)r.segment_bytes[first_diff],
                     (unsigned long long)res.segment_sizes[first_diff]);
    }
    replay_result_clear(&r);
    free(ev);
    imp_result_release(&res);
    trace_free(t);
}

static int name_cmp(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Every *.trace.json.gz of the H200 runs, in name order. */
static void check_realworld(void)
{
    const char *dir = getenv("MEMSIM_REALWORLD");
    if (!dir) dir = "experiments/realworld/h200";
    DIR *d = opendir(dir);
    TAP_OK(d != NULL, "%s lists the recorded H200 traces", dir);
    if (!d) return;
    char *names[256];
    size_t n = 0;
    const char *suffix = ".trace.json.gz";
    for (struct dirent *e; (e = readdir(d)) && n < sizeof names / sizeof *names;) {
        size_t l = strlen(e->d_name), k = strlen(suffix);
        if (l > k && !strcmp(e->d_name + l - k, suffix)) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    TAP_OK(n >= 18, "%zu recorded traces (18 expected at least)", n);
    /* The invariant check after every call only on the two short traces (an-*): on all of
     * them it takes 7 s instead of 1.5 s on a 2-core box. */
    for (size_t i = 0; i < n; i++) {
        if (names[i])
            check_fixture(dir, names[i], "caching", 1, 1, !strncmp(names[i], "an-", 3));
        free(names[i]);
    }
}

int main(void)
{
    const char *dir = getenv("MEMSIM_FIXTURES");
    if (!dir) dir = "tests/fixtures";
    check_fixture(dir, "gpt2-plain.json.gz", "caching", 1, 0, 1);
    check_fixture(dir, "gpt2-checkpoint.json.gz", "caching", 1, 0, 1);
    check_fixture(dir, "gpt2-lora.json.gz", "caching", 1, 0, 1);
    check_fixture(dir, "gpt2-plain-expandable.json.gz", "expandable", 0, 0, 1);
    check_realworld();
    return tap_done();
}

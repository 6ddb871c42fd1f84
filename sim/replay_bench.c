/* replay_bench.c — the replay benchmark of replay_bench.h: the seeded synthetic workload and
 * its timed replays. */
#define _POSIX_C_SOURCE 200809L
#include "sim/replay_bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- benchmark workload */

typedef struct gen {
    replay_event *ev;
    size_t n, cap, max;
    uint64_t next_id, rng;
    int nomem;
} gen;

static uint64_t g_rand(gen *g)
{
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return g->rng;
}

static int g_full(const gen *g) { return g->n >= g->max || g->nomem; }

static void g_push(gen *g, replay_event e)
{
    if (g_full(g)) return;
    if (ms_grow((void **)&g->ev, &g->cap, g->n + 1, sizeof *g->ev) != MS_OK) {
        g->nomem = 1;
        return;
    }
    g->ev[g->n++] = e;
}

/* Returns the new id, or 0 when the program is complete (then its free is dropped too). */
static uint64_t g_alloc(gen *g, uint64_t bytes, int stream)
{
    if (g_full(g)) return 0;
    uint64_t id = ++g->next_id;
    g_push(g, (replay_event){id, bytes, stream, 1});
    return id;
}

static void g_free(gen *g, uint64_t id)
{
    if (id) g_push(g, (replay_event){id, 0, 0, 0});
}

/* A transient: made and freed at once (scratch buffers, small scalars, casts). */
static void g_transient(gen *g, uint64_t bytes) { g_free(g, g_alloc(g, bytes, 0)); }

#define BENCH_LAYERS 24
#define BENCH_HIDDEN 2048ULL
#define BENCH_SAVED 9              /* activations kept per layer for backward */
#define BENCH_PARAMS 6             /* parameter tensors per layer */

/* One training iteration over `tok` tokens; params and grads persist across iterations. */
static void g_iteration(gen *g, uint64_t tok, uint64_t grads[][BENCH_PARAMS],
                        const uint64_t *param_bytes)
{
    const uint64_t h = BENCH_HIDDEN, bf16 = 2, th = tok * h * bf16;
    /* Saved activations: norm, qkv, attention out, softmax stats, residual, norm, fc1,
     * activation, residual (bytes as in a GPT layer, sizes scale with tokens). */
    const uint64_t saved_bytes[BENCH_SAVED] = {th, 3 * th, th, tok * 16 * 4, th, th,
                                               4 * th, 4 * th, th};
    uint64_t saved[BENCH_LAYERS][BENCH_SAVED];
    for (int l = 0; l < BENCH_LAYERS; l++) {
        for (int k = 0; k < BENCH_SAVED; k++) {
            saved[l][k] = g_alloc(g, saved_bytes[k], 0);
            /* small temporaries around each op: scalars, norms' stats, casts */
            g_transient(g, 4 + g_rand(g) % 4096);
            if (k == 2) g_transient(g, th + tok * 64);         /* attention workspace */
            if (k == 7) g_transient(g, 4 * th);                 /* fc2 input cast */
        }
    }
    uint64_t logits = g_alloc(g, tok * 32000 * 2, 0);           /* LM head, freed after loss */
    g_transient(g, tok * 4);
    g_free(g, logits);
    uint64_t dgrad = g_alloc(g, th, 0);
    int bucket_fill = 0;
    for (int l = BENCH_LAYERS - 1; l >= 0; l--) {
        for (int k = BENCH_SAVED - 1; k >= 0; k--) {
            uint64_t d = g_alloc(g, saved_bytes[k], 0);         /* gradient of the input */
            g_transient(g, 4 + g_rand(g) % 2048);
            g_free(g, saved[l][k]);
            if (k % 3 == 0) {
                g_free(g, dgrad);
                dgrad = d;
            } else {
                g_free(g, d);
            }
        }
        for (int p = 0; p < BENCH_PARAMS; p++) {
            if (!grads[l][p]) grads[l][p] = g_alloc(g, param_bytes[p], 0);
            else g_transient(g, param_bytes[p]);                /* accumulate: temporary */
        }
        if (++bucket_fill == 4) {                               /* all-reduce bucket */
            bucket_fill = 0;
            uint64_t b = g_alloc(g, 25ULL << 20, 1);
            g_transient(g, 512);
            g_free(g, b);
        }
    }
    g_free(g, dgrad);
    for (int l = 0; l < BENCH_LAYERS; l++)                      /* optimizer step */
        for (int p = 0; p < BENCH_PARAMS; p++) {
            uint64_t t = g_alloc(g, param_bytes[p] * 2, 0);     /* fp32 update scratch */
            g_transient(g, 4);
            g_free(g, t);
        }
}

ms_status replay_bench_workload(uint64_t seed, size_t n_events, replay_event **out,
                                size_t *n_out, ms_error *err)
{
    gen g = {0};
    g.max = n_events;
    g.rng = seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
    if (g.rng == 0) g.rng = 1;
    const uint64_t h = BENCH_HIDDEN;
    const uint64_t param_bytes[BENCH_PARAMS] = {3 * h * h * 2, h * h * 2, 4 * h * h * 2,
                                                4 * h * h * 2, h * 2, h * 2};
    uint64_t grads[BENCH_LAYERS][BENCH_PARAMS];
    memset(grads, 0, sizeof grads);
    for (int l = 0; l < BENCH_LAYERS; l++)      /* parameters: allocated once, never freed */
        for (int p = 0; p < BENCH_PARAMS; p++) g_alloc(&g, param_bytes[p], 0);
    while (!g_full(&g)) {
        /* Mostly the nominal sequence, sometimes a shorter or longer one (packing). */
        uint64_t tok = 2048;
        if (g_rand(&g) % 10 < 3) tok = 1024 + 64 * (g_rand(&g) % 49);
        g_iteration(&g, tok, grads, param_bytes);
    }
    if (g.nomem) {
        free(g.ev);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    *out = g.ev;
    *n_out = g.n;
    return MS_OK;
}

/* ---------------------------------------------------------------- throughput */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ms_status replay_bench(const char *allocator, const alloc_config *cfg, size_t n_events,
                       uint64_t seed, int runs, replay_bench_result *out, ms_error *err)
{
    memset(out, 0, sizeof *out);
    if (runs < 1) runs = 1;
    replay_event *ev = NULL;
    size_t n = 0;
    ms_status st = replay_bench_workload(seed, n_events, &ev, &n, err);
    if (st != MS_OK) return st;
    replay_opts o;
    replay_opts_default(&o);
    if (allocator) o.allocator = allocator;
    o.cfg = cfg;
    o.capacity_bytes = 1ULL << 40; /* the workload needs ~5 GiB; never the limit here */
    replay_result r;
    replay_result_init(&r);
    double total = 0, best = 0;
    for (int k = 0; k < runs && st == MS_OK; k++) {
        double t0 = now_s();
        st = replay_events(ev, n, &o, &r, err);
        double dt = now_s() - t0;
        total += dt;
        if (k == 0 || dt < best) best = dt;
        if (st == MS_OK && r.status != REPLAY_OK)
            st = ms_fail(err, MS_ERR_OOM, "bench workload ran out of memory");
    }
    if (st == MS_OK) {
        out->events = r.events;
        out->runs = runs;
        out->best_s = best;
        out->mean_s = total / runs;
        out->events_per_s = best > 0 ? (double)r.events / best : 0;
        out->peak_allocated_bytes = r.peak_allocated_bytes;
        out->peak_reserved_bytes = r.peak_reserved_bytes;
        out->num_segment_allocs = r.stats.num_segment_allocs;
    }
    replay_result_clear(&r);
    free(ev);
    return st;
}

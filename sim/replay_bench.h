/* replay_bench.h — how many events per second memsim itself replays: a synthetic
 * transformer-like alloc/free program replayed through an allocator and timed (the one
 * wall-clock measurement in memsim besides `memsim bench`'s own; it times memsim, never the
 * simulated machine). Used by `memsim bench` and the tests. */
#ifndef MEMSIM_REPLAY_BENCH_H
#define MEMSIM_REPLAY_BENCH_H

#include "sim/replay.h"

/* A synthetic transformer-like alloc/free program of n_events events (seeded, byte-for-
 * byte reproducible): parameters allocated once, per-layer activations of a few distinct
 * sizes kept from the forward pass and freed in reverse during the backward pass, small
 * and large transients inside each layer, gradients, gradient buckets on a second stream,
 * optimizer temporaries, and a sequence length that varies between iterations. *out is
 * malloc'ed. */
ms_status replay_bench_workload(uint64_t seed, size_t n_events, replay_event **out,
                                size_t *n_out, ms_error *err);

typedef struct replay_bench_result {
    uint64_t events;             /* events per run */
    int runs;
    double best_s, mean_s;       /* wall-clock seconds of one replay */
    double events_per_s;         /* events / best_s */
    uint64_t peak_allocated_bytes, peak_reserved_bytes;
    uint64_t num_segment_allocs;
} replay_bench_result;

/* Replays replay_bench_workload(seed, n_events) `runs` times through `allocator` (NULL:
 * "caching", cfg NULL: defaults) on one thread over the backend without latencies and
 * measures wall-clock time with CLOCK_MONOTONIC. The workload's generation is not timed. */
ms_status replay_bench(const char *allocator, const alloc_config *cfg, size_t n_events,
                       uint64_t seed, int runs, replay_bench_result *out, ms_error *err);

#endif

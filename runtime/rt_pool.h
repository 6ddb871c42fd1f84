/* rt_pool.h — a fixed pool of host worker threads that splits a loop over [0, n) into
 * contiguous chunks, about 8 per thread, handed out as threads come free. The runtime's host
 * optimizer step (model_rt.c, AdamW on the pinned host copies of offloaded parameters) and
 * `memsim probe`'s measurement of it (probe.cu) run on it, so the probed rate is the rate
 * of the step the runtime runs. Elementwise work gives the same bits for any thread count. */
#ifndef MEMSIM_RT_POOL_H
#define MEMSIM_RT_POOL_H

#include <stddef.h>

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_pool rt_pool;

/* The body of a loop: handles [lo, hi) of the range given to rt_pool_for. */
typedef void (*rt_pool_fn)(void *ctx, size_t lo, size_t hi);

/* threads: how many threads share a loop, the calling one included (1: no workers are
 * started, loops run on the caller); 0: the online CPUs less one, at least 1 (one core stays
 * with the thread that issues GPU work). RT_ERR_HOST when a thread cannot be started. */
rt_status rt_pool_new(int threads, rt_pool **out, ms_error *err);
void rt_pool_free(rt_pool *p);
int rt_pool_threads(const rt_pool *p);

/* Runs fn over [0, n) split into about 8 chunks per thread (none shorter than `grain`
 * items) and returns when all are done. One loop at a time per pool: the caller
 * serializes. */
void rt_pool_for(rt_pool *p, size_t n, size_t grain, rt_pool_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif

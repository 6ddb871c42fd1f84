/* rt_pool.c — host worker threads for the runtime's host optimizer step (rt_pool.h). Each
 * loop is one "generation": the caller publishes it under the lock, wakes the workers, takes
 * chunks itself like any worker and waits until every worker has reported done. The loop is
 * cut into about 8 chunks per thread handed out by an atomic counter, not one fixed range per
 * thread: the step runs beside the thread issuing GPU work and the driver's threads, and a
 * fixed split would make every step as slow as its one descheduled thread. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct rt_pool {
    int threads;             /* the caller included */
    int started;             /* workers running */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;       /* loops published */
    int left;                /* workers still busy with the current loop */
    int stop;
    /* the current loop */
    size_t n, chunk;
    size_t next;             /* the next chunk to hand out (atomic) */
    rt_pool_fn fn;
    void *ctx;
};

/* Takes chunks of the current loop until none is left. */
static void run_chunks(rt_pool *p)
{
    for (;;) {
        size_t i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (i >= (p->n + p->chunk - 1) / p->chunk) return;
        size_t lo = i * p->chunk;
        size_t hi = lo + p->chunk < p->n ? lo + p->chunk : p->n;
        p->fn(p->ctx, lo, hi);
    }
}

static void *worker_main(void *arg)
{
    rt_pool *p = (rt_pool *)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->left == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 1 ? (int)(n - 1) : 1;
}

rt_status rt_pool_new(int threads, rt_pool **out, ms_error *err)
{
    *out = NULL;
    if (threads < 0) return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "rt_pool_new",
                                         "a negative thread count");
    rt_pool *p = calloc(1, sizeof *p);
    if (!p) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    p->threads = threads ? threads : default_threads();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->th = calloc((size_t)p->threads, sizeof *p->th);
    if (!p->th) {
        rt_pool_free(p);
        return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    }
    for (int i = 1; i < p->threads; i++) {
        if (pthread_create(&p->th[p->started], NULL, worker_main, p) != 0) {
            rt_pool_free(p);
            return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "pthread_create",
                                "cannot start a host worker thread");
        }
        p->started++;
    }
    *out = p;
    return RT_OK;
}

void rt_pool_free(rt_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

int rt_pool_threads(const rt_pool *p) { return p ? p->threads : 1; }

void rt_pool_for(rt_pool *p, size_t n, size_t grain, rt_pool_fn fn, void *ctx)
{
    if (!n) return;
    if (grain < 1) grain = 1;
    /* Too little work for the threads (or none started): run it here. */
    if (!p || p->started == 0 || n < 2 * grain) {
        fn(ctx, 0, n);
        return;
    }
    size_t pieces = (size_t)p->threads * 8;
    size_t chunk = (n + pieces - 1) / pieces;
    if (chunk < grain) chunk = grain;
    pthread_mutex_lock(&p->mu);
    p->n = n;
    p->chunk = chunk;
    p->next = 0;
    p->fn = fn;
    p->ctx = ctx;
    p->left = p->started;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p);
    pthread_mutex_lock(&p->mu);
    while (p->left > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

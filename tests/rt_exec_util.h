/* rt_exec_util.h — what the runtime executor's tests without a GPU (tests/test_rt_exec.c,
 * tests/test_rt_exec_data.c) share: a fake device with a virtual clock (streams, events,
 * copies, kernels in CUDA's ordering rules, a model of the copied bytes), a fake memory
 * backend, hand-made schedule actions and the run wrapper. Header-only, used only by
 * tests/. */
#ifndef MEMSIM_RT_EXEC_UTIL_H
#define MEMSIM_RT_EXEC_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planners/lower.h"
#include "planners/memferry/lower_dha.h"
#include "planners/policy.h"
#include "runtime/rt_exec.h"
#include "sim/exec.h"
#include "tests/tap.h"
#include "traces/gen.h"
#include "traces/machine.h"
#include "traces/models.h"
#include "base/u64map.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAKS_IGNORED_BEGIN() __lsan_disable()
#define LEAKS_IGNORED_END() __lsan_enable()
#else
#define LEAKS_IGNORED_BEGIN() ((void)0)
#define LEAKS_IGNORED_END() ((void)0)
#endif

/* ---------------- fake device: virtual microseconds ---------------- */

typedef struct fstream {
    double t;          /* when its queued work ends */
} fstream;

typedef struct fevent {
    double t;          /* when its last record is reached; -1: never recorded */
} fevent;

typedef struct fcopy {
    uint64_t dst, src, bytes;
    int d2h;
} fcopy;

typedef struct fdev {
    rt_dev_ops ops;
    double now;                  /* host time */
    double issue_us;             /* host time each enqueue costs */
    double bw_Bpus;              /* copy bytes per microsecond */
    double empty_us;             /* calibration's shortest kernel */
    double kernel_grow;          /* kernel n lasts (1 + kernel_grow * (n + 1)) x its asked time, so
                                    every action's measurement differs from the others' */
    long streams, events;        /* alive */
    long kernels;
    fcopy copies[4096];
    size_t n_copies;
    double kernel_dur[8192];
    size_t n_kernels;
    /* swap checksums (fdev_sums_on): a model of the bytes, one value per copied range keyed
     * by its start address, moved by the copies; the sum of a range mixes its value with its
     * stream position and length */
    u64map *dval, *hval;
    uint64_t *sums;
    size_t n_sums;
    long sum_calls, sums_live, n_d2h;
    long corrupt_d2h;            /* > 0: the host bytes of this D2H copy (1-based) change after
                                    the copy, before any prefetch reads them */
} fdev;

static inline double start_at(fdev *f, fstream *s)
{
    f->now += f->issue_us;
    return s->t > f->now ? s->t : f->now;
}

static inline rt_status f_stream_new(void *ctx, void **s, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = calloc(1, sizeof *x);
    f->streams++;
    *s = x;
    return RT_OK;
}
static inline void f_stream_free(void *ctx, void *s)
{
    ((fdev *)ctx)->streams--;
    free(s);
}
static inline rt_status f_event_new(void *ctx, int timing, void **e, ms_error *err)
{
    (void)err;
    (void)timing;
    fdev *f = ctx;
    fevent *x = calloc(1, sizeof *x);
    x->t = -1;
    f->events++;
    *e = x;
    return RT_OK;
}
static inline void f_event_free(void *ctx, void *e)
{
    ((fdev *)ctx)->events--;
    free(e);
}
static inline rt_status f_record(void *ctx, void *e, void *s, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    ((fevent *)e)->t = start_at(f, s);
    return RT_OK;
}
static inline rt_status f_wait(void *ctx, void *s, void *e, ms_error *err)
{
    (void)err;
    (void)ctx;
    fstream *x = s;
    double t = ((fevent *)e)->t;
    if (t > x->t) x->t = t;
    return RT_OK;
}
static inline int f_query(void *ctx, void *e, ms_error *err)
{
    (void)err;
    return ((fevent *)e)->t <= ((fdev *)ctx)->now;
}
/* The host waits: its clock moves to the event; a never-reached one times out for real. */
static inline int f_host_wait(void *ctx, void *e, double timeout_s, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    double t = ((fevent *)e)->t;
    if (isinf(t)) {
        struct timespec ts = {(time_t)timeout_s, (long)((timeout_s - (time_t)timeout_s) * 1e9)};
        nanosleep(&ts, NULL);
        return 0;
    }
    if (t > f->now) f->now = t;
    return 1;
}
static inline rt_status f_elapsed(void *ctx, void *e0, void *e1, float *ms, ms_error *err)
{
    (void)err;
    (void)ctx;
    *ms = (float)((((fevent *)e1)->t - ((fevent *)e0)->t) / 1e3);
    return RT_OK;
}
static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The modelled contents of a device range: what a copy wrote there, else a function of the
 * address and length (bytes no copy wrote). */
static inline uint64_t f_dev_value(const fdev *f, uint64_t addr, uint64_t bytes)
{
    uint64_t v;
    return u64map_get(f->dval, addr, &v) ? v : mix64(addr ^ mix64(bytes));
}

static inline void f_move(fdev *f, uint64_t dst, uint64_t src, uint64_t bytes, int d2h)
{
    uint64_t v;
    if (d2h) {
        v = f_dev_value(f, src, bytes);
        if (++f->n_d2h == f->corrupt_d2h) v ^= 1; /* a flipped bit in pinned memory */
        if (u64map_put(f->hval, dst, v)) abort();
    } else {
        if (!u64map_get(f->hval, src, &v)) v = mix64(src ^ mix64(bytes) ^ 1);
        if (u64map_put(f->dval, dst, v)) abort();
    }
}

static inline rt_status f_copy(void *ctx, void *s, uint64_t dst, uint64_t src, uint64_t bytes,
                               int d2h, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = s;
    if (f->dval) f_move(f, dst, src, bytes, d2h);
    x->t = start_at(f, x) + (double)bytes / f->bw_Bpus;
    if (f->n_copies < 4096) {
        fcopy c = {dst, src, bytes, d2h};
        f->copies[f->n_copies++] = c;
    }
    return RT_OK;
}
static inline rt_status f_kernel(void *ctx, void *s, const rt_kernel_args *k, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = s;
    double d = k->dur_us;
    if (d < f->empty_us) d = f->empty_us;
    if (d < 1e12) d *= 1 + f->kernel_grow * (double)(f->kernels + 1);
    x->t = d >= 1e12 ? INFINITY : start_at(f, x) + d;
    if (f->n_kernels < 8192) f->kernel_dur[f->n_kernels++] = d;
    f->kernels++;
    return RT_OK;
}
static inline rt_status f_host(void *ctx, void *s, double dur_us, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = s;
    x->t = start_at(f, x) + dur_us;
    return RT_OK;
}
/* Real host work: runs at issue, the stream's clock as for host work of no duration. */
static inline rt_status f_host_call(void *ctx, void *s, void (*fn)(void *), void *arg,
                                    ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = s;
    x->t = start_at(f, x);
    fn(arg);
    return RT_OK;
}
static inline rt_status f_calibrate(void *ctx, rt_calib *c, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    memset(c, 0, sizeof *c);
    c->valid = 1;
    c->slope = 1;
    c->empty_us = f->empty_us;
    return RT_OK;
}

static inline rt_status f_sum_begin(void *ctx, size_t n, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    f->sums = calloc(n ? n : 1, sizeof *f->sums);
    if (!f->sums) return RT_ERR_HOST;
    f->n_sums = n;
    f->sums_live++;
    return RT_OK;
}
static inline rt_status f_sum_add(void *ctx, void *s, size_t k, uint64_t dev, uint64_t bytes,
                                  uint64_t pos, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = s;
    if (k >= f->n_sums) return RT_ERR_INVALID;
    x->t = start_at(f, x) + (double)bytes / (20 * f->bw_Bpus);
    f->sums[k] += mix64(f_dev_value(f, dev, bytes) ^ mix64(pos ^ mix64(bytes)));
    f->sum_calls++;
    return RT_OK;
}
static inline rt_status f_sum_read(void *ctx, uint64_t *out, size_t n, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    if (n > f->n_sums) return RT_ERR_INVALID;
    memcpy(out, f->sums, n * sizeof *out);
    return RT_OK;
}
static inline void f_sum_end(void *ctx)
{
    fdev *f = ctx;
    free(f->sums);
    f->sums = NULL;
    f->n_sums = 0;
    f->sums_live--;
}

static inline void fdev_init(fdev *f)
{
    memset(f, 0, sizeof *f);
    rt_dev_ops *o = &f->ops;
    o->ctx = f;
    o->name = "fake";
    o->stream_new = f_stream_new;
    o->stream_free = f_stream_free;
    o->event_new = f_event_new;
    o->event_free = f_event_free;
    o->record = f_record;
    o->wait = f_wait;
    o->query = f_query;
    o->host_wait = f_host_wait;
    o->elapsed_ms = f_elapsed;
    o->copy = f_copy;
    o->kernel = f_kernel;
    o->host_work = f_host;
    o->calibrate = f_calibrate;
    o->host_call = f_host_call;
    f->bw_Bpus = 50e3; /* 50 GB/s */
}

/* ---------------- fake memory backend ---------------- */

typedef struct fbe {
    mb_backend mb;
    u64map *sizes;
    uint64_t next, used, cap;
    long dev_allocs, phys, vas, hosts, maps;
    uint64_t host_next;
} fbe;

static inline ms_status b_malloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    fbe *b = ctx;
    if (b->used + bytes > b->cap) return MS_ERR_OOM;
    b->used += bytes;
    *addr = b->next;
    b->next += (bytes + 0xfffff) & ~0xfffffULL;
    b->dev_allocs++;
    return u64map_put(b->sizes, *addr, bytes) ? MS_ERR_NOMEM : MS_OK;
}
static inline ms_status b_free(void *ctx, uint64_t addr)
{
    fbe *b = ctx;
    uint64_t bytes;
    if (!u64map_del(b->sizes, addr, &bytes)) return MS_ERR_INVALID;
    b->used -= bytes;
    b->dev_allocs--;
    return MS_OK;
}
static inline ms_status b_va_reserve(void *ctx, uint64_t bytes, uint64_t *va)
{
    fbe *b = ctx;
    *va = b->next;
    b->next += (bytes + 0x1fffff) & ~0x1fffffULL;
    b->vas++;
    return MS_OK;
}
static inline ms_status b_va_free(void *ctx, uint64_t va, uint64_t bytes)
{
    (void)va, (void)bytes;
    ((fbe *)ctx)->vas--;
    return MS_OK;
}
static inline ms_status b_create(void *ctx, uint64_t bytes, uint64_t *h)
{
    fbe *b = ctx;
    if (b->used + bytes > b->cap) return MS_ERR_OOM;
    b->used += bytes;
    b->phys++;
    *h = (bytes << 20) | (uint64_t)b->phys; /* remembers its size */
    return MS_OK;
}
static inline ms_status b_release(void *ctx, uint64_t h)
{
    fbe *b = ctx;
    b->used -= h >> 20;
    b->phys--;
    return MS_OK;
}
static inline ms_status b_map(void *ctx, uint64_t va, uint64_t bytes, uint64_t h)
{
    (void)va, (void)bytes, (void)h;
    ((fbe *)ctx)->maps++;
    return MS_OK;
}
static inline ms_status b_access(void *ctx, uint64_t va, uint64_t bytes)
{
    (void)ctx, (void)va, (void)bytes;
    return MS_OK;
}
static inline ms_status b_unmap(void *ctx, uint64_t va, uint64_t bytes)
{
    (void)va, (void)bytes;
    ((fbe *)ctx)->maps--;
    return MS_OK;
}
static inline ms_status b_sync(void *ctx)
{
    (void)ctx;
    return MS_OK;
}
static inline ms_status b_host_alloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    fbe *b = ctx;
    *addr = b->host_next;
    b->host_next += bytes + 4096;
    b->hosts++;
    return MS_OK;
}
static inline ms_status b_host_free(void *ctx, uint64_t addr)
{
    (void)addr;
    ((fbe *)ctx)->hosts--;
    return MS_OK;
}

static const mb_ops fops = {b_malloc, b_free, b_va_reserve, b_va_free, b_create, b_release,
                            b_map, b_access, b_unmap, b_sync, b_host_alloc, b_host_free};

static inline void fbe_init(fbe *b, uint64_t cap)
{
    static u64map *sizes;
    if (!sizes) sizes = u64map_new(64);
    u64map_clear(sizes);
    memset(b, 0, sizeof *b);
    b->sizes = sizes;
    b->mb.ops = &fops;
    b->mb.ctx = b;
    b->mb.granularity_bytes = 2ULL << 20;
    b->mb.capacity_bytes = cap;
    b->cap = cap;
    b->next = 1ULL << 40;
    b->host_next = 1ULL << 44;
}

/* ---------------- schedule building ---------------- */

static inline void act(schedule_t *s, sched_kind k, sched_stream st, uint64_t t, uint64_t bytes,
                       double dur, uint32_t ev)
{
    sched_action a;
    memset(&a, 0, sizeof a);
    a.kind = k;
    a.stream = st;
    a.tensor = t;
    a.bytes = bytes;
    a.dur_us = dur;
    a.event = ev;
    a.op = k == SA_COMPUTE ? 1 : -1;
    a.layer = -1;
    if (sched_add(s, &a) != MS_OK) abort();
}

static inline void mark_iter(schedule_t *s, int64_t v)
{
    sched_action a;
    memset(&a, 0, sizeof a);
    a.kind = SA_MARK;
    a.stream = SS_COMPUTE;
    a.mark = TM_ITER;
    a.mark_value = v;
    a.op = -1;
    if (sched_add(s, &a) != MS_OK) abort();
}

/* One iteration that swaps one 64 MiB tensor out and back:
 * compute 100 | d2h (wait e1): host_alloc, copy 64 MiB, free | compute 300 | h2d: alloc, copy,
 * host_free | compute waits e4, 50 us | free. 64 MiB at 50 GB/s = 1342 us. */
static inline schedule_t *swap_schedule(int iters)
{
    schedule_t *s = sched_new();
    const uint64_t B = 64ULL << 20;
    for (int it = 0; it < iters; it++) {
        mark_iter(s, it);
        uint32_t e1 = sched_new_event(s), e2 = sched_new_event(s), e3 = sched_new_event(s),
                 e4 = sched_new_event(s);
        act(s, SA_ALLOC, SS_COMPUTE, 10, B, 0, 0);
        act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 100, 0);
        act(s, SA_RECORD, SS_COMPUTE, 0, 0, 0, e1);
        act(s, SA_WAIT, SS_D2H, 0, 0, 0, e1);
        act(s, SA_HOST_ALLOC, SS_D2H, 10, B, 0, 0);
        act(s, SA_COPY_D2H, SS_D2H, 10, B, 0, 0);
        act(s, SA_FREE, SS_D2H, 10, 0, 0, 0);
        act(s, SA_RECORD, SS_D2H, 0, 0, 0, e2);
        act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 300, 0);
        act(s, SA_RECORD, SS_COMPUTE, 0, 0, 0, e3);
        act(s, SA_WAIT, SS_H2D, 0, 0, 0, e3);
        act(s, SA_WAIT, SS_H2D, 0, 0, 0, e2);
        act(s, SA_ALLOC, SS_H2D, 10, B, 0, 0);
        act(s, SA_COPY_H2D, SS_H2D, 10, B, 0, 0);
        act(s, SA_HOST_FREE, SS_H2D, 10, 0, 0, 0);
        act(s, SA_RECORD, SS_H2D, 0, 0, 0, e4);
        act(s, SA_WAIT, SS_COMPUTE, 0, 0, 0, e4);
        act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
        act(s, SA_FREE, SS_COMPUTE, 10, 0, 0, 0);
    }
    return s;
}

static inline rt_status run(const schedule_t *s, const rt_exec_opts *o, fdev *f, fbe *b,
                            rt_exec_result *r, ms_error *err)
{
    return rt_exec_run(s, o, &f->ops, &b->mb, r, err);
}

static inline int clean(const fdev *f, const fbe *b)
{
    return f->streams == 0 && f->events == 0 && b->dev_allocs == 0 && b->phys == 0 &&
           b->vas == 0 && b->hosts == 0 && b->maps == 0;
}

/* The h200-sxm profile and a small generated workload's config (model dims, seq, micro-batch
 * 1, the generator's defaults otherwise); 0 (one failed check) when the profile is missing. */
static inline int small_workload(const char *dims, uint64_t seq, machine_profile **mp,
                                 gen_config *c)
{
    ms_error err;
    if (machine_load_named("h200-sxm", mp, &err) != MS_OK) {
        TAP_OK(0, "load h200-sxm: %s", err.msg);
        return 0;
    }
    gen_config_default(c);
    if (model_lookup(dims, &c->model, &err) != MS_OK) abort();
    c->seq = seq;
    return 1;
}

#endif

/* test_rt_exec.c — the runtime executor's host-side logic (runtime/rt_exec.h) without a GPU:
 * a fake device with a virtual clock (streams, events, copies, kernels as in CUDA's ordering
 * rules) and a fake memory backend run hand-made and generated schedules. Checks the pinned
 * pool plan, issue order and measured windows, deferred frees (record_stream), the copy
 * addresses, the spin credit, per-op timing, alloc_sync, OOM / OOHM as clean results, the
 * watchdog, the static arena's planned addresses under deferred frees (release, retry,
 * fences), the real-kernel hook's operands through MEMO's rounding buffers, and that every
 * stream, event and allocation is released. Runs everywhere. */
#define _POSIX_C_SOURCE 200809L
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

static double start_at(fdev *f, fstream *s)
{
    f->now += f->issue_us;
    return s->t > f->now ? s->t : f->now;
}

static rt_status f_stream_new(void *ctx, void **s, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = calloc(1, sizeof *x);
    f->streams++;
    *s = x;
    return RT_OK;
}
static void f_stream_free(void *ctx, void *s)
{
    ((fdev *)ctx)->streams--;
    free(s);
}
static rt_status f_event_new(void *ctx, int timing, void **e, ms_error *err)
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
static void f_event_free(void *ctx, void *e)
{
    ((fdev *)ctx)->events--;
    free(e);
}
static rt_status f_record(void *ctx, void *e, void *s, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    ((fevent *)e)->t = start_at(f, s);
    return RT_OK;
}
static rt_status f_wait(void *ctx, void *s, void *e, ms_error *err)
{
    (void)err;
    (void)ctx;
    fstream *x = s;
    double t = ((fevent *)e)->t;
    if (t > x->t) x->t = t;
    return RT_OK;
}
static int f_query(void *ctx, void *e, ms_error *err)
{
    (void)err;
    return ((fevent *)e)->t <= ((fdev *)ctx)->now;
}
/* The host waits: its clock moves to the event; a never-reached one times out for real. */
static int f_host_wait(void *ctx, void *e, double timeout_s, ms_error *err)
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
static rt_status f_elapsed(void *ctx, void *e0, void *e1, float *ms, ms_error *err)
{
    (void)err;
    (void)ctx;
    *ms = (float)((((fevent *)e1)->t - ((fevent *)e0)->t) / 1e3);
    return RT_OK;
}
static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The modelled contents of a device range: what a copy wrote there, else a function of the
 * address and length (bytes no copy wrote). */
static uint64_t f_dev_value(const fdev *f, uint64_t addr, uint64_t bytes)
{
    uint64_t v;
    return u64map_get(f->dval, addr, &v) ? v : mix64(addr ^ mix64(bytes));
}

static void f_move(fdev *f, uint64_t dst, uint64_t src, uint64_t bytes, int d2h)
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

static rt_status f_copy(void *ctx, void *s, uint64_t dst, uint64_t src, uint64_t bytes, int d2h,
                        ms_error *err)
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
static rt_status f_kernel(void *ctx, void *s, const rt_kernel_args *k, ms_error *err)
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
static rt_status f_host(void *ctx, void *s, double dur_us, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = s;
    x->t = start_at(f, x) + dur_us;
    return RT_OK;
}
/* Real host work: runs at issue, the stream's clock as for host work of no duration. */
static rt_status f_host_call(void *ctx, void *s, void (*fn)(void *), void *arg, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    fstream *x = s;
    x->t = start_at(f, x);
    fn(arg);
    return RT_OK;
}
static rt_status f_calibrate(void *ctx, rt_calib *c, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    memset(c, 0, sizeof *c);
    c->valid = 1;
    c->slope = 1;
    c->empty_us = f->empty_us;
    return RT_OK;
}

static rt_status f_sum_begin(void *ctx, size_t n, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    f->sums = calloc(n ? n : 1, sizeof *f->sums);
    if (!f->sums) return RT_ERR_HOST;
    f->n_sums = n;
    f->sums_live++;
    return RT_OK;
}
static rt_status f_sum_add(void *ctx, void *s, size_t k, uint64_t dev, uint64_t bytes,
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
static rt_status f_sum_read(void *ctx, uint64_t *out, size_t n, ms_error *err)
{
    (void)err;
    fdev *f = ctx;
    if (n > f->n_sums) return RT_ERR_INVALID;
    memcpy(out, f->sums, n * sizeof *out);
    return RT_OK;
}
static void f_sum_end(void *ctx)
{
    fdev *f = ctx;
    free(f->sums);
    f->sums = NULL;
    f->n_sums = 0;
    f->sums_live--;
}

static void fdev_init(fdev *f)
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

static ms_status b_malloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    fbe *b = ctx;
    if (b->used + bytes > b->cap) return MS_ERR_OOM;
    b->used += bytes;
    *addr = b->next;
    b->next += (bytes + 0xfffff) & ~0xfffffULL;
    b->dev_allocs++;
    return u64map_put(b->sizes, *addr, bytes) ? MS_ERR_NOMEM : MS_OK;
}
static ms_status b_free(void *ctx, uint64_t addr)
{
    fbe *b = ctx;
    uint64_t bytes;
    if (!u64map_del(b->sizes, addr, &bytes)) return MS_ERR_INVALID;
    b->used -= bytes;
    b->dev_allocs--;
    return MS_OK;
}
static ms_status b_va_reserve(void *ctx, uint64_t bytes, uint64_t *va)
{
    fbe *b = ctx;
    *va = b->next;
    b->next += (bytes + 0x1fffff) & ~0x1fffffULL;
    b->vas++;
    return MS_OK;
}
static ms_status b_va_free(void *ctx, uint64_t va, uint64_t bytes)
{
    (void)va, (void)bytes;
    ((fbe *)ctx)->vas--;
    return MS_OK;
}
static ms_status b_create(void *ctx, uint64_t bytes, uint64_t *h)
{
    fbe *b = ctx;
    if (b->used + bytes > b->cap) return MS_ERR_OOM;
    b->used += bytes;
    b->phys++;
    *h = (bytes << 20) | (uint64_t)b->phys; /* remembers its size */
    return MS_OK;
}
static ms_status b_release(void *ctx, uint64_t h)
{
    fbe *b = ctx;
    b->used -= h >> 20;
    b->phys--;
    return MS_OK;
}
static ms_status b_map(void *ctx, uint64_t va, uint64_t bytes, uint64_t h)
{
    (void)va, (void)bytes, (void)h;
    ((fbe *)ctx)->maps++;
    return MS_OK;
}
static ms_status b_access(void *ctx, uint64_t va, uint64_t bytes)
{
    (void)ctx, (void)va, (void)bytes;
    return MS_OK;
}
static ms_status b_unmap(void *ctx, uint64_t va, uint64_t bytes)
{
    (void)va, (void)bytes;
    ((fbe *)ctx)->maps--;
    return MS_OK;
}
static ms_status b_sync(void *ctx)
{
    (void)ctx;
    return MS_OK;
}
static ms_status b_host_alloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    fbe *b = ctx;
    *addr = b->host_next;
    b->host_next += bytes + 4096;
    b->hosts++;
    return MS_OK;
}
static ms_status b_host_free(void *ctx, uint64_t addr)
{
    (void)addr;
    ((fbe *)ctx)->hosts--;
    return MS_OK;
}

static const mb_ops fops = {b_malloc, b_free, b_va_reserve, b_va_free, b_create, b_release,
                            b_map, b_access, b_unmap, b_sync, b_host_alloc, b_host_free};

static void fbe_init(fbe *b, uint64_t cap)
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

static void act(schedule_t *s, sched_kind k, sched_stream st, uint64_t t, uint64_t bytes,
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

static void mark_iter(schedule_t *s, int64_t v)
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
static schedule_t *swap_schedule(int iters)
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

static void test_host_plan(void)
{
    schedule_t *s = sched_new();
    act(s, SA_ALLOC, SS_COMPUTE, 1, 1000, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 2, 1000, 0, 0);
    act(s, SA_HOST_ALLOC, SS_D2H, 1, 5000, 0, 0);     /* [0, 8192) */
    act(s, SA_HOST_ALLOC, SS_D2H, 2, 100, 0, 0);      /* [8192, 12288) */
    act(s, SA_COPY_D2H, SS_D2H, 1, 1000, 0, 0);
    act(s, SA_HOST_FREE, SS_H2D, 1, 0, 0, 0);         /* frees [0, 8192) */
    act(s, SA_HOST_ALLOC, SS_D2H, 1, 3000, 0, 0);     /* first fit: 0 */
    act(s, SA_COPY_D2H, SS_D2H, 2, 700, 0, 0);        /* tensor 2 has host memory */
    act(s, SA_FREE, SS_COMPUTE, 2, 0, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 3, 900, 0, 0);
    act(s, SA_COPY_D2H, SS_D2H, 3, 900, 0, 0);        /* no host memory: scratch */
    rt_host_plan hp;
    ms_error err;
    ms_status st = rt_host_plan_make(s, 4096, &hp, &err);
    TAP_OK(st == MS_OK, "host plan made");
    if (st == MS_OK) {
        TAP_OK(hp.offsets[2] == 0 && hp.offsets[3] == 8192, "first two host ranges: 0 and 8192 "
               "(got %llu, %llu)", (unsigned long long)hp.offsets[2],
               (unsigned long long)hp.offsets[3]);
        TAP_OK(hp.offsets[6] == 0, "a freed range is reused first fit (got %llu)",
               (unsigned long long)hp.offsets[6]);
        TAP_OK(hp.offsets[0] == UINT64_MAX && hp.offsets[4] == UINT64_MAX,
               "non host-alloc actions have no offset");
        TAP_OK(hp.peak_bytes == 5100, "peak host bytes 5100 (got %llu)",
               (unsigned long long)hp.peak_bytes);
        TAP_OK(hp.scratch_off == 12288 && hp.scratch_bytes == 4096 && hp.pool_bytes == 16384,
               "scratch after the top: off %llu bytes %llu pool %llu",
               (unsigned long long)hp.scratch_off, (unsigned long long)hp.scratch_bytes,
               (unsigned long long)hp.pool_bytes);
        TAP_OK(hp.stream_mask[2] == ((1u << SS_D2H) | (1u << SS_H2D)),
               "stream mask of the first host range: its copy and its free (0x%x)",
               hp.stream_mask[2]);
        rt_host_plan_release(&hp);
    }
    sched_free(s);
}

static rt_status run(const schedule_t *s, const rt_exec_opts *o, fdev *f, fbe *b,
                     rt_exec_result *r, ms_error *err)
{
    return rt_exec_run(s, o, &f->ops, &b->mb, r, err);
}

static int clean(const fdev *f, const fbe *b)
{
    return f->streams == 0 && f->events == 0 && b->dev_allocs == 0 && b->phys == 0 &&
           b->vas == 0 && b->hosts == 0 && b->maps == 0;
}

static void test_swap(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = swap_schedule(2);
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    rt_exec_result r;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK, "swap schedule runs (%s)", r.failure);
    TAP_OK(r.n_win == 3, "three windows: setup and two iterations (%zu)", r.n_win);
    double copy_us = (double)(64ULL << 20) / f.bw_Bpus;
    /* compute 100, then the D2H copy; compute 300 overlaps it; the H2D copy starts after both
     * (it waits e2 and e3); then 50 us of compute */
    double want = 100 + copy_us + copy_us + 50;
    TAP_OK(fabs(r.iter_time_s * 1e6 - want) < 5, "iteration time %.1f us, as the stream rules "
           "give (%.1f)", r.iter_time_s * 1e6, want);
    TAP_OK(fabs(r.nominal_s * 1e6 - 450) < 1e-6, "nominal compute 450 us (%.3f)",
           r.nominal_s * 1e6);
    TAP_OK(fabs(r.d2h_busy_s * 1e6 - copy_us) < 1 && fabs(r.h2d_busy_s * 1e6 - copy_us) < 1,
           "copy busy times from the copy events (%.1f, %.1f us)", r.d2h_busy_s * 1e6,
           r.h2d_busy_s * 1e6);
    TAP_OK(r.deferred_frees == 4, "the D2H-stream free and the compute free of the H2D block "
           "are deferred, twice (%llu)", (unsigned long long)r.deferred_frees);
    TAP_OK(r.host_peak_bytes == (64ULL << 20) && r.host_pool_bytes == (64ULL << 20),
           "pinned pool = peak host bytes = 64 MiB");
    TAP_OK(r.h2d_large.n == 2 && r.d2h_large.n == 2 && fabs(r.h2d_large.agg_Bps - 50e9) < 1e8,
           "link statistics of large copies: %llu + %llu copies, %.3g B/s",
           (unsigned long long)r.h2d_large.n, (unsigned long long)r.d2h_large.n,
           r.h2d_large.agg_Bps);
    /* copy addresses: the D2H of iteration 0 and the H2D that follows use the same host bytes;
     * device sides are the tensor's blocks */
    int ok = f.n_copies == 4;
    if (ok) {
        const fcopy *d = &f.copies[0], *h = &f.copies[1];
        ok = d->d2h && !h->d2h && d->dst == h->src && d->dst >= (1ULL << 44) &&
             d->src >= (1ULL << 40) && d->src < (1ULL << 44) && h->dst >= (1ULL << 40) &&
             d->bytes == (64ULL << 20);
    }
    TAP_OK(ok, "copies move between the tensor's device block and its pinned range");
    TAP_OK(clean(&f, &b), "everything released: streams %ld events %ld allocs %ld hosts %ld",
           f.streams, f.events, b.dev_allocs, b.hosts);
    TAP_OK(r.astats.num_allocs == 4 && r.astats.num_frees == 4, "allocator saw 4 allocs and 4 "
           "frees (%llu, %llu)", (unsigned long long)r.astats.num_allocs,
           (unsigned long long)r.astats.num_frees);
    rt_exec_result_release(&r);

    /* alloc_sync: no deferral, the host waits */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    o.alloc_sync = 1;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.deferred_frees == 0 && r.alloc_waits == 8,
           "alloc_sync: ok, nothing deferred, one wait per allocator call (%llu)",
           (unsigned long long)r.alloc_waits);
    TAP_OK(clean(&f, &b), "alloc_sync: everything released");
    rt_exec_result_release(&r);

    /* per-op events */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    o.alloc_sync = 0;
    o.per_op = 1;
    st = run(s, &o, &f, &b, &r, &err);
    ok = st == RT_OK && r.n_ops == 6;
    for (size_t k = 0; ok && k < r.n_ops; k++) ok = fabs(r.ops[k].meas_us - r.ops[k].req_us) < 0.01;
    TAP_OK(ok, "per-op: 6 compute actions, each measured at its duration");
    TAP_OK(fabs(r.compute_busy_s * 1e6 - 450) < 0.01, "per-op compute busy 450 us (%.3f)",
           r.compute_busy_s * 1e6);
    TAP_OK(clean(&f, &b), "per-op: every event released");
    rt_exec_result_release(&r);
    sched_free(s);
}

static void test_credit(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = sched_new();
    mark_iter(s, 0);
    for (int k = 0; k < 10; k++) act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 2, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 100, 0);
    fdev f;
    fbe b;
    rt_exec_opts o;
    rt_exec_result r;
    rt_exec_opts_default(&o);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    f.empty_us = 10;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && fabs(r.iter_time_s * 1e6 - 120) < 0.5,
           "spin credit: 10 x 2 us + 100 us with a 10 us shortest kernel takes 120 us (%.2f)",
           r.iter_time_s * 1e6);
    rt_exec_result_release(&r);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    f.empty_us = 10;
    o.spin_credit = 0;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && fabs(r.iter_time_s * 1e6 - 200) < 0.5,
           "without the credit it takes 200 us (%.2f)", r.iter_time_s * 1e6);
    rt_exec_result_release(&r);
    sched_free(s);
}

static void test_failures(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = swap_schedule(2);
    fdev f;
    fbe b;
    rt_exec_opts o;
    rt_exec_result r;
    rt_exec_opts_default(&o);
    /* OOM: 40 MiB of device memory cannot hold the 64 MiB block */
    fdev_init(&f);
    fbe_init(&b, 40ULL << 20);
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OOM, "OOM is a result (%s)", rt_outcome_name(r.outcome));
    TAP_OK(strstr(r.failure, "out of device memory allocating tensor 10") != NULL,
           "the failure names the request: %s", r.failure);
    TAP_OK(clean(&f, &b), "after an OOM everything is released (streams %ld events %ld "
           "allocs %ld hosts %ld)", f.streams, f.events, b.dev_allocs, b.hosts);
    TAP_OK(r.iter_time_s == 0, "no iteration time after an OOM");
    rt_exec_result_release(&r);

    /* deferred frees are waited for before an OOM is final */
    fdev_init(&f);
    fbe_init(&b, 100ULL << 20);
    f.issue_us = 0;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.oom_drains >= 1,
           "a 100 MiB device fits after waiting for the deferred free (%s, drains %llu)",
           rt_outcome_name(r.outcome), (unsigned long long)r.oom_drains);
    TAP_OK(clean(&f, &b), "and releases everything");
    rt_exec_result_release(&r);

    /* OOHM */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    o.host_limit_bytes = 1ULL << 20;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OOHM && strstr(r.failure, "pinned pool"),
           "a pinned pool over the host limit is out of host memory (%s)", r.failure);
    TAP_OK(clean(&f, &b), "OOHM: everything released");
    rt_exec_result_release(&r);
    o.host_limit_bytes = 0;
    sched_free(s);

    /* invalid schedule */
    s = sched_new();
    uint32_t e = sched_new_event(s);
    act(s, SA_WAIT, SS_COMPUTE, 0, 0, 0, e);
    act(s, SA_RECORD, SS_D2H, 0, 0, 0, e);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_ERR_INVALID && strstr(r.failure, "deadlock"),
           "a schedule that would deadlock is refused: %s", r.failure);
    TAP_OK(clean(&f, &b), "nothing created for an invalid schedule");
    sched_free(s);

    /* watchdog */
    s = sched_new();
    mark_iter(s, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 1, 1 << 20, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 1e13, 0);
    act(s, SA_FREE, SS_COMPUTE, 1, 0, 0, 0);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    o.watchdog_s = 0.3;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    LEAKS_IGNORED_BEGIN(); /* a hung run leaves its allocator to the process exit, by design */
    st = run(s, &o, &f, &b, &r, &err);
    LEAKS_IGNORED_END();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    TAP_OK(st == RT_ERR_CUDA && r.outcome == RTX_ERROR && strstr(r.failure, "watchdog") &&
           r.leaked, "a hung kernel trips the watchdog: %s", r.failure);
    TAP_OK(dt < 3.0, "and the run returns (%.2f s)", dt);
    TAP_OK(f.streams == 0 && f.events == 0, "streams and events are still destroyed");
    rt_exec_result_release(&r);
    sched_free(s);
}

/* The h200-sxm profile and a small generated workload's config (model dims, seq, micro-batch
 * 1, the generator's defaults otherwise); 0 (one failed check) when the profile is missing. */
static int small_workload(const char *dims, uint64_t seq, machine_profile **mp, gen_config *c)
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

/* A generated workload through planning and lowering, every allocator. */
static void test_generated(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,256,4,1024,1000", 512, &mp, &c)) return;
    c.iterations = 2;
    trace_t *t = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(st == MS_OK, "tiny trace generated (%s)", st == MS_OK ? "" : err.msg);
    const char *pols[] = {"keep-all", "full-swap", "full-recompute"};
    const char *allocs[] = {"caching", "stitching", "expandable"};
    for (size_t p = 0; t && p < 3; p++) {
        plan_t *plan = NULL;
        schedule_t *s = NULL;
        st = pol_plan(pols[p], t, &mp->m, NULL, &plan, &err);
        if (st == MS_OK) st = lower_schedule(t, plan, &mp->m, NULL, &s, &err);
        TAP_OK(st == MS_OK, "%s: planned and lowered (%s)", pols[p], st == MS_OK ? "" : err.msg);
        if (st != MS_OK) {
            plan_free(plan);
            continue;
        }
        double want = 0;
        int seen = 0;
        for (size_t i = 0; i < sched_count(s); i++) {
            const sched_action *a = sched_get(s, i);
            if (a->kind == SA_MARK && a->mark == TM_ITER && a->stream == SS_COMPUTE) {
                want = 0;
                seen = 1;
            }
            if (seen && a->kind == SA_COMPUTE) want += a->dur_us;
        }
        for (size_t k = 0; k < 3; k++) {
            fdev f;
            fbe b;
            fdev_init(&f);
            fbe_init(&b, 8ULL << 30);
            rt_exec_opts o;
            rt_exec_opts_default(&o);
            o.allocator = allocs[k];
            o.trace = t;
            rt_exec_result r;
            rt_status rs = run(s, &o, &f, &b, &r, &err);
            TAP_OK(rs == RT_OK && r.outcome == RTX_OK && r.n_win == 3 &&
                   fabs(r.nominal_s * 1e6 - want) < 1e-3 * want &&
                   r.iter_time_s >= r.nominal_s * 0.999 && r.astats.allocated_peak_bytes > 0,
                   "%s / %s: ok, last iteration %.3f ms for %.3f ms of compute, peak "
                   "allocated %llu (%s)", pols[p], allocs[k], r.iter_time_s * 1e3,
                   r.nominal_s * 1e3, (unsigned long long)r.astats.allocated_peak_bytes,
                   r.failure);
            TAP_OK(clean(&f, &b), "%s / %s: everything released (allocs %ld phys %ld vas %ld "
                   "maps %ld)", pols[p], allocs[k], b.dev_allocs, b.phys, b.vas, b.maps);
            if (k == 0 && p != 1) {
                /* one stream, program order on both sides: the runtime's breakdown of the
                 * peak is the simulator's (planners/blockmix.h on both) */
                sim_opts so;
                sim_opts_default(&so);
                so.trace = t;
                sim_result sr;
                machine_t big = mp->m;
                big.gpu_hbm_bytes = 8ULL << 30;
                big.gpu_reserved_bytes = 0;
                ms_status ss = sim_execute(s, &big, &so, &sr, &err);
                uint64_t sum = 0;
                for (int q = 0; q < BM_COUNT; q++) sum += r.peak_live_bytes[q];
                TAP_OK(ss == MS_OK && sr.status == RS_OK && sum > 0 &&
                       r.peak_live_bytes[BM_PARAM] > 0 && r.peak_live_bytes[BM_ACT_SKEL] > 0 &&
                       !memcmp(sr.peak_live_bytes, r.peak_live_bytes, sizeof sr.peak_live_bytes),
                       "%s: the runtime's breakdown of the peak equals the simulator's (%llu "
                       "bytes live)", pols[p], (unsigned long long)sum);
            }
            if (p == 1 && k == 0) {
                TAP_OK(r.copies > 0 && r.deferred_frees > 0 && r.host_peak_bytes > 0,
                       "full-swap copies (%llu), defers frees (%llu), uses host memory",
                       (unsigned long long)r.copies, (unsigned long long)r.deferred_frees);
                /* a host that runs ahead keeps offloaded blocks until the copies end; a host
                 * held close to the GPU (or waiting at each allocator call) frees them about
                 * where the schedule does */
                uint64_t ahead_peak = r.astats.allocated_peak_bytes;
                for (int mode = 0; mode < 2; mode++) {
                    rt_exec_result r2;
                    fdev_init(&f);
                    f.issue_us = 0.5;
                    fbe_init(&b, 8ULL << 30);
                    rt_exec_opts o2 = o;
                    o2.max_ahead = mode == 0 ? 1 : 0;
                    o2.alloc_sync = mode == 1;
                    rs = run(s, &o2, &f, &b, &r2, &err);
                    /* alloc_sync stalls the issuing thread at H2D-stream allocations, so
                     * only max_ahead keeps the iteration time */
                    TAP_OK(rs == RT_OK && r2.outcome == RTX_OK &&
                           r2.astats.allocated_peak_bytes < ahead_peak &&
                           (mode || fabs(r2.iter_time_s - r.iter_time_s) < 0.02 * r.iter_time_s),
                           "full-swap with %s: peak allocated %llu < %llu running ahead, "
                           "iteration %.3f ms (%.3f ahead)", mode ? "alloc_sync" : "max_ahead 1",
                           (unsigned long long)r2.astats.allocated_peak_bytes,
                           (unsigned long long)ahead_peak, r2.iter_time_s * 1e3,
                           r.iter_time_s * 1e3);
                    TAP_OK(clean(&f, &b) && (mode ? r2.alloc_waits : r2.ahead_waits) > 0,
                           "full-swap with %s: waited, everything released",
                           mode ? "alloc_sync" : "max_ahead 1");
                    rt_exec_result_release(&r2);
                }
            }
            rt_exec_result_release(&r);
        }
        sched_free(s);
        plan_free(plan);
    }
    trace_free(t);
    machine_profile_free(mp);
}

/* Is a the same record as b, but for an op's dur_us? */
static int same_but_dur(const trace_rec *a, const trace_rec *b)
{
    if (a->type != b->type) return 0;
    switch (a->type) {
    case TR_ALLOC:
        return a->u.alloc.id == b->u.alloc.id && a->u.alloc.bytes == b->u.alloc.bytes &&
               a->u.alloc.cls == b->u.alloc.cls && a->u.alloc.layer == b->u.alloc.layer &&
               a->u.alloc.producer == b->u.alloc.producer &&
               !strcmp(a->u.alloc.name, b->u.alloc.name);
    case TR_FREE: return a->u.free_id == b->u.free_id;
    case TR_MARK: return a->u.mark.kind == b->u.mark.kind && a->u.mark.value == b->u.mark.value;
    case TR_OP:
        if (a->u.op.id != b->u.op.id || a->u.op.n_in != b->u.op.n_in ||
            a->u.op.n_out != b->u.op.n_out || a->u.op.kind != b->u.op.kind ||
            strcmp(a->u.op.name, b->u.op.name))
            return 0;
        for (uint32_t i = 0; i < a->u.op.n_in; i++)
            if (a->u.op.in[i] != b->u.op.in[i]) return 0;
        for (uint32_t i = 0; i < a->u.op.n_out; i++)
            if (a->u.op.out[i] != b->u.op.out[i]) return 0;
        return 1;
    }
    return 0;
}

/* `memsim run --record`: a run on the fake device (every kernel a different length) recorded
 * as a trace, written, loaded back: the program is unchanged, every op carries the
 * measurement of the very action that ran it (iteration k's op iteration k's time), the
 * recompute replays do not override the forward's time, and the recorded.* meta are there. */
static void test_record(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,256,4,1024,1000", 512, &mp, &c)) return;
    c.iterations = 3;
    trace_t *t = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(st == MS_OK, "record: trace generated");
    const char *pols[] = {"full-swap", "full-recompute"};
    for (int p = 0; t && p < 2; p++) {
        plan_t *plan = NULL;
        schedule_t *s = NULL;
        st = pol_plan(pols[p], t, &mp->m, NULL, &plan, &err);
        if (st == MS_OK) st = lower_schedule(t, plan, &mp->m, NULL, &s, &err);
        if (st != MS_OK) {
            TAP_OK(0, "record %s: planned (%s)", pols[p], err.msg);
            plan_free(plan);
            continue;
        }
        fdev f;
        fbe b;
        fdev_init(&f);
        f.kernel_grow = 1e-3;
        fbe_init(&b, 8ULL << 30);
        rt_exec_opts o;
        rt_exec_opts_default(&o);
        o.trace = t;
        o.per_op = 1;
        o.spin_credit = 0;
        rt_exec_result r;
        rt_status rs = run(s, &o, &f, &b, &r, &err);
        TAP_OK(rs == RT_OK && r.outcome == RTX_OK && r.n_ops > 0, "record %s: run ok, %zu "
               "compute actions timed", pols[p], r.n_ops);
        size_t n_re = 0;
        for (size_t k = 0; k < r.n_ops; k++) n_re += r.ops[k].recompute;
        rt_record_info info = {"Fake GPU", "2026-11-21", "spin", "memsim run --policy x"};
        trace_t *rec = NULL;
        size_t measured = 0, n_op = 0;
        st = rt_record_trace(t, r.ops, r.n_ops, &info, &rec, &measured, &err);
        for (size_t i = 0; i < trace_count(t); i++) n_op += trace_get(t, i)->type == TR_OP;
        TAP_OK(st == MS_OK && measured == n_op && measured == r.n_ops - n_re,
               "record %s: all %zu ops measured (%zu; %zu recompute actions skipped)", pols[p],
               n_op, measured, n_re);
        if (p == 1) TAP_OK(n_re > 0, "record %s: the plan recomputes (%zu actions)", pols[p], n_re);
        char path[128];
        snprintf(path, sizeof path, "/tmp/test_rt_exec_record_%ld_%d.trace.gz",
                 (long)getpid(), p);
        trace_t *back = NULL;
        if (st == MS_OK) st = trace_write(rec, path, &err);
        if (st == MS_OK) st = trace_load(path, &back, &err);
        unlink(path);
        TAP_OK(st == MS_OK && back && trace_count(back) == trace_count(t),
               "record %s: written and loaded back, %zu records (%s)", pols[p],
               back ? trace_count(back) : 0, st == MS_OK ? "" : err.msg);
        /* every op's duration: the non-recompute action of that op id */
        size_t same = 0, right = 0, changed = 0, ops_seen = 0, timed = 0;
        for (size_t i = 0; back && i < trace_count(t); i++) {
            const trace_rec *a = trace_get(t, i), *x = trace_get(back, i);
            same += same_but_dur(a, x);
            if (a->type != TR_OP) continue;
            ops_seen++;
            double want = -2, re = -2;
            for (size_t k = 0; k < r.n_ops; k++)
                if (r.ops[k].op == (int64_t)a->u.op.id) {
                    if (r.ops[k].recompute) re = r.ops[k].meas_us;
                    else if (want == -2) want = r.ops[k].meas_us;
                }
            /* the writer prints %.17g-exact numbers or rounds: allow 1e-9 relative */
            right += fabs(x->u.op.dur_us - want) <= 1e-9 * fabs(want) + 1e-9 &&
                     (re == -2 || fabs(x->u.op.dur_us - re) > 1e-6);
            timed += a->u.op.dur_us > 0;   /* a zero-length op stays zero on the fake */
            changed += a->u.op.dur_us > 0 && fabs(x->u.op.dur_us - a->u.op.dur_us) > 1e-6;
        }
        TAP_OK(back && same == trace_count(t), "record %s: the program is unchanged (%zu of "
               "%zu records equal but for durations)", pols[p], same, trace_count(t));
        TAP_OK(back && right == ops_seen && changed == timed && timed > ops_seen / 2,
               "record %s: %zu of %zu ops carry their own action's measurement, %zu of %zu "
               "differ from the modelled time", pols[p], right, ops_seen, changed, timed);
        const char *dv = back ? trace_get_meta(back, "recorded.device") : NULL;
        const char *mv = back ? trace_get_meta(back, "recorded.math") : NULL;
        const char *fv = back ? trace_get_meta(back, "recorded.from") : NULL;
        const char *dt = back ? trace_get_meta(back, "recorded.date") : NULL;
        const char *mo = back ? trace_get_meta(back, "model") : NULL;
        TAP_OK(dv && !strcmp(dv, "Fake GPU") && mv && !strcmp(mv, "spin") && fv &&
               !strcmp(fv, "memsim run --policy x") && dt && !strcmp(dt, "2026-11-21") && mo &&
               !strcmp(mo, trace_get_meta(t, "model")),
               "record %s: recorded.* meta written, the workload's meta kept", pols[p]);
        /* the recorded trace plans and lowers again (what memsim simulate --trace does) */
        plan_t *p2 = NULL;
        schedule_t *s2 = NULL;
        st = back ? pol_plan(pols[p], back, &mp->m, NULL, &p2, &err) : MS_ERR_INVALID;
        if (st == MS_OK) st = lower_schedule(back, p2, &mp->m, NULL, &s2, &err);
        double sum_rec = 0, sum_meas = 0;
        int seen = 0;
        for (size_t i = 0; s2 && i < sched_count(s2); i++) {
            const sched_action *a = sched_get(s2, i);
            if (a->kind == SA_MARK && a->mark == TM_ITER && a->stream == SS_COMPUTE) {
                sum_rec = 0;
                seen = 1;
            }
            if (seen && a->kind == SA_COMPUTE && !a->recompute) sum_rec += a->dur_us;
        }
        size_t last = 0;
        for (size_t i = 0; i < sched_count(s); i++) {
            const sched_action *a = sched_get(s, i);
            if (a->kind == SA_MARK && a->mark == TM_ITER && a->stream == SS_COMPUTE) last = i;
        }
        for (size_t k = 0; k < r.n_ops; k++)
            if (r.ops[k].action > last && !r.ops[k].recompute) sum_meas += r.ops[k].meas_us;
        TAP_OK(st == MS_OK && fabs(sum_rec - sum_meas) <= 1e-6 * sum_meas,
               "record %s: re-planned from the record, its last iteration's ops sum to the "
               "measured %.3f ms (%.3f)", pols[p], sum_meas * 1e-3, sum_rec * 1e-3);
        sched_free(s2);
        plan_free(p2);
        trace_free(back);
        trace_free(rec);
        rt_exec_result_release(&r);
        sched_free(s);
        plan_free(plan);
    }
    trace_free(t);
    machine_profile_free(mp);
}

/* Host work on the host stream between events, and DHA computes (the fake ignores their
 * link time): the stream order gives 1000 + 3000 + 2000 + 100 us. */
static void test_host_stream(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s), e1 = sched_new_event(s);
    mark_iter(s, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 1, 1 << 20, 0, 0);
    sched_action dha; /* the first compute reads 8 MiB of host memory */
    memset(&dha, 0, sizeof dha);
    dha.kind = SA_COMPUTE;
    dha.stream = SS_COMPUTE;
    dha.op = 1;
    dha.dur_us = 1000;
    dha.host_read_bytes = 8 << 20;
    dha.dha_eff = 1;
    dha.layer = -1;
    if (sched_add(s, &dha) != MS_OK) abort();
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 3000, 0);
    act(s, SA_RECORD, SS_COMPUTE, 0, 0, 0, e0);
    act(s, SA_WAIT, SS_HOST, 0, 0, 0, e0);
    act(s, SA_HOST_COMPUTE, SS_HOST, 0, 0, 2000, 0);
    act(s, SA_RECORD, SS_HOST, 0, 0, 0, e1);
    act(s, SA_WAIT, SS_COMPUTE, 0, 0, 0, e1);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 100, 0);
    act(s, SA_FREE, SS_COMPUTE, 1, 0, 0, 0);
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    rt_exec_result r;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && fabs(r.iter_time_s * 1e6 - 6100) < 0.5 &&
           fabs(r.host_busy_s * 1e6 - 2000) < 1e-6 && r.host_pool_bytes == 0,
           "host work runs in its stream's order between events: %.1f us (6100), host %.1f us",
           r.iter_time_s * 1e6, r.host_busy_s * 1e6);
    TAP_OK(clean(&f, &b), "the DHA buffer is given back (hosts %ld)", b.hosts);
    rt_exec_result_release(&r);
    sched_free(s);
}


/* ---------------- the static arena and deferred frees ---------------- */

static rt_status run_static(const schedule_t *s, const uint64_t *ids, const uint64_t *offs,
                            size_t n, uint64_t arena, fdev *f, fbe *b, rt_exec_result *r,
                            ms_error *err)
{
    alloc_config cfg;
    alloc_config_default(&cfg);
    cfg.static_ids = ids;
    cfg.static_offsets = offs;
    cfg.static_n = n;
    cfg.static_arena_bytes = arena;
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    o.allocator = "static";
    o.alloc_cfg = &cfg;
    fdev_init(f);
    fbe_init(b, 1ULL << 34);
    return run(s, &o, f, b, r, err);
}

/* Tensor `t` computed on, then offloaded and freed on the D2H stream (a deferred free: the
 * copy and the compute stream used it); e2 is recorded after the free. */
static void offload(schedule_t *s, uint64_t t, uint64_t bytes, double us, uint32_t e1,
                    uint32_t e2)
{
    act(s, SA_ALLOC, SS_COMPUTE, t, bytes, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, us, 0);
    act(s, SA_RECORD, SS_COMPUTE, 0, 0, 0, e1);
    act(s, SA_WAIT, SS_D2H, 0, 0, 0, e1);
    act(s, SA_HOST_ALLOC, SS_D2H, t, bytes, 0, 0);
    act(s, SA_COPY_D2H, SS_D2H, t, bytes, 0, 0);
    act(s, SA_FREE, SS_D2H, t, 0, 0, 0);
    act(s, SA_RECORD, SS_D2H, 0, 0, 0, e2);
}

/* MEMO's rounding buffers under the static arena: the next buffer block is planned at the
 * address of one whose free still waits for the offload when the host allocates it. */
static void test_static_deferred(void)
{
    ms_error err;
    ms_error_clear(&err);
    const uint64_t B = 64ULL << 20;
    const double copy_us = (double)B / 50e3;
    uint64_t ids[4] = {10, 11, 12, 13}, offs[4] = {0, 0, 32ULL << 20, B};
    fdev f;
    fbe b;
    rt_exec_result r;

    /* 11 at 10's offset, after the schedule's wait for 10's offload (the memo case) */
    schedule_t *s = sched_new();
    mark_iter(s, 0);
    uint32_t e1 = sched_new_event(s), e2 = sched_new_event(s);
    offload(s, 10, B, 100, e1, e2);
    act(s, SA_WAIT, SS_COMPUTE, 0, 0, 0, e2);
    act(s, SA_ALLOC, SS_COMPUTE, 11, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_FREE, SS_COMPUTE, 11, 0, 0, 0);
    act(s, SA_HOST_FREE, SS_D2H, 10, 0, 0, 0);
    rt_status st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.oom_drains == 1 && r.alloc_fences == 1,
           "static arena: a planned address held by a block whose free waits for the offload "
           "is released, fenced and allocated (%s; drains %llu, fences %llu)", r.failure,
           (unsigned long long)r.oom_drains, (unsigned long long)r.alloc_fences);
    TAP_OK(fabs(r.iter_time_s * 1e6 - (100 + copy_us + 50)) < 1 && r.astats.num_frees == 2,
           "and the iteration keeps the schedule's order: %.1f us (%.1f)", r.iter_time_s * 1e6,
           100 + copy_us + 50);
    TAP_OK(clean(&f, &b), "static arena after the retry: everything released");
    rt_exec_result_release(&r);
    sched_free(s);

    /* 12 overlaps 10's bytes at another address (the arena sees no collision) and the
     * schedule does not wait: the fence alone makes compute wait for the copy */
    s = sched_new();
    mark_iter(s, 0);
    e1 = sched_new_event(s), e2 = sched_new_event(s);
    offload(s, 10, B, 100, e1, e2);
    act(s, SA_ALLOC, SS_COMPUTE, 12, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 1000, 0);
    act(s, SA_FREE, SS_COMPUTE, 12, 0, 0, 0);
    act(s, SA_HOST_FREE, SS_D2H, 10, 0, 0, 0);
    st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    double want = 100 + copy_us + 1050;
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.oom_drains == 0 && r.alloc_fences == 1 &&
           fabs(r.iter_time_s * 1e6 - want) < 1,
           "a planned block overlapping bytes whose free waits: its stream waits on the free's "
           "events, %.1f us (%.1f; unfenced %.1f)", r.iter_time_s * 1e6, want, 100 + copy_us);
    TAP_OK(clean(&f, &b), "fenced run: everything released");
    rt_exec_result_release(&r);
    sched_free(s);

    /* a real overlap: 11 at 10's address while 10 is live, no free pending */
    s = sched_new();
    mark_iter(s, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 10, B, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 11, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_FREE, SS_COMPUTE, 11, 0, 0, 0);
    act(s, SA_FREE, SS_COMPUTE, 10, 0, 0, 0);
    st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    TAP_OK(st != RT_OK && r.outcome == RTX_ERROR && r.oom_drains == 0 &&
           strstr(r.failure, "action 2: allocating") && strstr(r.failure, "tensor 11"),
           "two live tensors at one planned address, no free pending: an error (%s)",
           r.failure);
    TAP_OK(clean(&f, &b), "after the error: everything released");
    rt_exec_result_release(&r);
    sched_free(s);

    /* the same with another block's free pending: released, retried, still an error */
    s = sched_new();
    mark_iter(s, 0);
    e1 = sched_new_event(s), e2 = sched_new_event(s);
    offload(s, 13, B, 100, e1, e2);
    act(s, SA_ALLOC, SS_COMPUTE, 10, B, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 11, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_FREE, SS_COMPUTE, 11, 0, 0, 0);
    act(s, SA_FREE, SS_COMPUTE, 10, 0, 0, 0);
    act(s, SA_HOST_FREE, SS_D2H, 13, 0, 0, 0);
    st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    TAP_OK(st != RT_OK && r.outcome == RTX_ERROR && r.oom_drains == 1 &&
           strstr(r.failure, "tensor 11"),
           "a real overlap while an unrelated free is pending: retried once, still an error "
           "(drains %llu: %s)", (unsigned long long)r.oom_drains, r.failure);
    TAP_OK(clean(&f, &b), "after the retried error: everything released");
    rt_exec_result_release(&r);
    sched_free(s);
}

/* ---------------- real-kernel operands through rounding buffers ---------------- */

/* Every H2D copy reads host bytes an earlier D2H copy of the same size wrote (a prefetch
 * brings back what its offload stored, not the scratch area's or another range's bytes). */
static int copies_paired(const fdev *f, int *n_h2d)
{
    int ok = 1;
    *n_h2d = 0;
    for (size_t i = 0; i < f->n_copies; i++) {
        if (f->copies[i].d2h) continue;
        int found = 0;
        for (size_t j = i; j-- > 0 && !found;)
            found = f->copies[j].d2h && f->copies[j].dst == f->copies[i].src &&
                    f->copies[j].bytes == f->copies[i].bytes;
        ok &= found;
        (*n_h2d)++;
    }
    return ok && f->n_copies < 4096;
}

#define HOOK_GROUPS 64

/* A fake real-kernel hook: checks that every operand that is a rounding-buffer member lies
 * at its place in one block per group at a time (the forward block, then the prefetched
 * one), and counts the calls. */
typedef struct hook {
    const lower_rb_map *m;
    long calls, member_ops, bad;
    uint64_t base[HOOK_GROUPS];
    int changes[HOOK_GROUPS];
} hook;

static rt_status hook_compute(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                              const uint64_t *out, ms_error *err)
{
    (void)err;
    (void)stream;
    hook *h = ctx;
    h->calls++;
    int member = 0;
    for (uint32_t k = 0; k < op->n_in + op->n_out; k++) {
        uint64_t id = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
        uint64_t addr = k < op->n_in ? in[k] : out[k - op->n_in];
        lower_rb_place pl;
        if (!addr) h->bad++;
        if (lower_rb_find(h->m, id, &pl, 1) != 1) continue;
        member = 1;
        size_t g = (size_t)pl.pass * 8 + (size_t)pl.layer;
        if (g >= HOOK_GROUPS || addr < pl.offset_bytes) {
            h->bad++;
            continue;
        }
        uint64_t base = addr - pl.offset_bytes;
        if (h->base[g] && h->base[g] != base) h->changes[g]++;
        h->base[g] = base;
    }
    h->member_ops += member;
    return RT_OK;
}

/* The trace's skeletal activations swapped through rounding buffers as memo plans them: the
 * layer input and the attention output whole (alpha 1), the rest recomputed token-wise
 * (alpha 0) into the prefetched block; re-allocations under fresh ids. */
static plan_t *rb_plan(const trace_t *t)
{
    plan_t *p = plan_new("memo", "caching");
    if (!p) abort();
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC || r->u.alloc.cls != TC_ACT_SKEL || r->u.alloc.layer < 0)
            continue;
        const char *n = r->u.alloc.name;
        int whole = strstr(n, ".input") || strstr(n, ".attn_out");
        if (plan_set_tensor(p, r->u.alloc.id, PD_SWAP, whole ? 1.0 : 0.0) != MS_OK) abort();
    }
    if (plan_set_knob(p, "rounding_buffers", "1") || plan_set_knob(p, "memory_plan", "1") ||
        plan_set_knob(p, "tokenwise", "chain"))
        abort();
    plan_sort(p);
    return p;
}

static void test_rb_operands(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,256,4,1024,1000", 512, &mp, &c)) return;
    c.iterations = 2;
    trace_t *t = NULL;
    plan_t *p = NULL;
    schedule_t *s = NULL;
    lower_rb_map *m = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    if (st == MS_OK) p = rb_plan(t);
    if (st == MS_OK) st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
    if (st == MS_OK) st = lower_rb_map_new(t, p, &m, &err);
    TAP_OK(st == MS_OK && lower_rb_map_count(m) > 0, "rounding-buffer plan lowered, %zu members "
           "placed (%s)", lower_rb_map_count(m), st == MS_OK ? "" : err.msg);
    if (st != MS_OK) goto out;

    /* the layout: within each block, the members swapped whole are the offloaded prefix */
    int layout_ok = 1, groups = 0, renamed = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        uint32_t pass;
        int32_t layer;
        uint64_t tid;
        if (a->kind == SA_ALLOC && lower_id_synthetic(a->tensor, &tid) && tid != UINT64_MAX)
            renamed++;
        if (a->kind != SA_COPY_D2H || !lower_id_is_rbuf(a->tensor, &pass, &layer)) continue;
        groups++;
        uint64_t whole = 0, block = 0;
        for (size_t j = 0; j < sched_count(s); j++) {
            const sched_action *b2 = sched_get(s, j);
            if (b2->kind == SA_ALLOC && b2->tensor == a->tensor) block = b2->bytes;
        }
        for (size_t j = 0; j < trace_count(t); j++) {
            const trace_rec *r = trace_get(t, j);
            lower_rb_place pl;
            if (r->type != TR_ALLOC || lower_rb_find(m, r->u.alloc.id, &pl, 1) != 1 ||
                pl.pass != pass || pl.layer != layer)
                continue;
            int w = strstr(r->u.alloc.name, ".input") || strstr(r->u.alloc.name, ".attn_out");
            if (w) whole += pl.bytes;
            layout_ok &= pl.offset_bytes + pl.bytes <= block && pl.bytes == r->u.alloc.bytes;
            layout_ok &= w ? pl.offset_bytes + pl.bytes <= a->bytes : pl.offset_bytes >= a->bytes;
        }
        layout_ok &= whole == a->bytes;
    }
    TAP_OK(layout_ok && groups == 4, "each of %d offloaded blocks holds the members swapped "
           "whole in its copied prefix, the rest after it, all inside the block", groups);

    /* the real-kernel hook finds every operand: members in the forward block, then in the
     * prefetched one; re-allocated tensors under their fresh ids */
    hook h;
    memset(&h, 0, sizeof h);
    h.m = m;
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 8ULL << 30);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    o.trace = t;
    o.compute = hook_compute;
    o.compute_ctx = &h;
    o.rb_map = m;
    rt_exec_result r;
    rt_status rs = run(s, &o, &f, &b, &r, &err);
    int changes_ok = 1;
    for (size_t g = 0; g < HOOK_GROUPS; g++) changes_ok &= h.changes[g] <= 1;
    int moved = 0;
    for (size_t g = 0; g < HOOK_GROUPS; g++) moved += h.changes[g];
    TAP_OK(rs == RT_OK && r.outcome == RTX_OK && h.calls == (long)r.kernels && h.bad == 0 &&
           h.member_ops > 0 && renamed > 0,
           "real-kernel hook: every operand resolved (%ld ops, %ld with members, %d "
           "re-allocations under fresh ids; %s)", h.calls, h.member_ops, renamed, r.failure);
    TAP_OK(changes_ok && moved == groups, "members stay at their places in one block per group "
           "and move once, to the prefetched block (%d moves, %d offloaded groups)", moved,
           groups);
    int n_h2d = 0, paired = copies_paired(&f, &n_h2d);
    TAP_OK(paired && n_h2d == groups && r.host_pool_bytes == r.host_peak_bytes,
           "each block's prefetch reads the pinned bytes its offload wrote (%d prefetches; pool "
           "%llu = host peak %llu, no scratch)", n_h2d, (unsigned long long)r.host_pool_bytes,
           (unsigned long long)r.host_peak_bytes);
    TAP_OK(clean(&f, &b), "rounding-buffer run: everything released");
    rt_exec_result_release(&r);

    /* without the map the members have no address */
    memset(&h, 0, sizeof h);
    h.m = m;
    fdev_init(&f);
    fbe_init(&b, 8ULL << 30);
    o.rb_map = NULL;
    rs = run(s, &o, &f, &b, &r, &err);
    TAP_OK(rs != RT_OK && r.outcome == RTX_ERROR && strstr(r.failure, "holds no device block") &&
           strstr(r.failure, "op embed"), "without lowering's map the embedding's output has "
           "no address: %s", r.failure);
    TAP_OK(clean(&f, &b), "and everything is released");
    rt_exec_result_release(&r);
    /* memory_plan without rounding buffers: an offload names the block, its host copy the id
     * of the block the prefetch makes */
    plan_t *q = NULL;
    schedule_t *s2 = NULL;
    st = pol_plan("full-swap", t, &mp->m, NULL, &q, &err);
    if (st == MS_OK) st = plan_set_knob(q, "memory_plan", "1");
    if (st == MS_OK) st = lower_schedule(t, q, &mp->m, NULL, &s2, &err);
    if (st == MS_OK) {
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_opts_default(&o);
        o.trace = t;
        rs = run(s2, &o, &f, &b, &r, &err);
        paired = copies_paired(&f, &n_h2d);
        TAP_OK(rs == RT_OK && r.outcome == RTX_OK && paired && n_h2d > 0 &&
               r.host_pool_bytes == r.host_peak_bytes,
               "full-swap with memory_plan: each prefetch reads what its offload wrote (%d "
               "prefetches; %s)", n_h2d, r.failure);
        rt_exec_result_release(&r);
    } else {
        TAP_OK(0, "full-swap with memory_plan lowered: %s", err.msg);
    }
    sched_free(s2);
    plan_free(q);
out:
    lower_rb_map_free(m);
    sched_free(s);
    plan_free(p);
    trace_free(t);
    machine_profile_free(mp);
}

/* ---------------- token-wise partial replays (MEMO, alpha strictly inside (0, 1)) ------- */

typedef struct rhook {
    const trace_t *t;
    long whole, rows, bad_frac, targets_full, transients_part, bad_part;
    double frac;
} rhook;

static rt_status rhook_compute(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                               const uint64_t *out, ms_error *err)
{
    (void)err;
    (void)stream; (void)op; (void)in; (void)out;
    ((rhook *)ctx)->whole++;
    return RT_OK;
}

/* A replayed op: its outputs that are rounding-buffer members (skeletal: written in place)
 * come full size, the others (the replay's transients) as partial blocks. */
static rt_status rhook_rows(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                            const uint64_t *out, const uint8_t *in_part,
                            const uint8_t *out_part, double frac, ms_error *err)
{
    (void)err;
    (void)stream; (void)in;
    rhook *h = ctx;
    h->rows++;
    if (frac != h->frac) h->bad_frac++;
    /* only the kinds the dispatcher runs on a row range (runtime/model_rt_ops.c) */
    const char *b = strchr(op->name, '.') ? strchr(op->name, '.') + 1 : op->name;
    int known = op->phase == TP_FWD &&
                (op->kind == TK_NORM || op->kind == TK_ACT ||
                 (op->kind == TK_GEMM && strcmp(b, "lm_head")) ||
                 (op->kind == TK_ELEM && (!strcmp(b, "add1") || !strcmp(b, "add2"))));
    if (!known) h->bad_part++;
    for (uint32_t k = 0; k < op->n_out; k++) {
        const trace_tensor *x = trace_find_tensor(h->t, op->out[k]);
        if (!out[k] || !x) h->bad_part++;
        else if (x->cls == TC_ACT_SKEL) out_part[k] ? h->bad_part++ : h->targets_full++;
        else out_part[k] ? h->transients_part++ : h->bad_part++;
    }
    for (uint32_t k = 0; k < op->n_in; k++) {
        const trace_tensor *x = trace_find_tensor(h->t, op->in[k]);
        if (x && x->cls != TC_ACT_TRANS && in_part[k]) h->bad_part++;
    }
    return RT_OK;
}

static int rhook_token_rows(void *ctx, uint64_t id, unsigned *arrays, uint64_t *row_bytes)
{
    const trace_tensor *x = trace_find_tensor(((rhook *)ctx)->t, id);
    const uint64_t T = 256;
    if (!x || (x->cls != TC_ACT_SKEL && x->cls != TC_ACT_TRANS) || strstr(x->name, "attn_lse"))
        return 0;
    *arrays = strstr(x->name, "_stats") ? 2 : 1;
    if (x->bytes % (*arrays * T)) return 0;
    *row_bytes = x->bytes / (*arrays * T);
    return 1;
}

/* Executor options with the row-range hooks on h (reset, replaying frac of the rows). */
static void rhook_opts(rhook *h, const trace_t *t, double frac, const plan_t *p,
                       const lower_rb_map *m, rt_exec_opts *o)
{
    memset(h, 0, sizeof *h);
    h->t = t;
    h->frac = frac;
    rt_exec_opts_default(o);
    o->trace = t;
    o->compute = rhook_compute;
    o->compute_rows = rhook_rows;
    o->token_rows = rhook_token_rows;
    o->plan = p;
    o->compute_ctx = h;
    o->rb_map = m;
}

static plan_t *partial_plan(const trace_t *t, double alpha)
{
    plan_t *p = plan_new("memo", "caching");
    if (!p) abort();
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC || r->u.alloc.cls != TC_ACT_SKEL || r->u.alloc.layer < 0)
            continue;
        const char *n = r->u.alloc.name;
        int whole = strstr(n, ".input") || strstr(n, ".attn_out") || strstr(n, "attn_lse");
        if (plan_set_tensor(p, r->u.alloc.id, PD_SWAP, whole ? 1.0 : alpha) != MS_OK) abort();
    }
    if (plan_set_knob(p, "rounding_buffers", "1") || plan_set_knob(p, "memory_plan", "1") ||
        plan_set_knob(p, "tokenwise", "chain"))
        abort();
    plan_sort(p);
    return p;
}

/* The device bytes each D2H copy of block `blk` must read: every member's first
 * ceil(alpha T) rows of each row array (whole members: all), at its place in the block. */
static int pieces_expected(const trace_t *t, const lower_rb_map *m, const plan_t *p,
                           uint32_t pass, int32_t layer, uint64_t base, const fdev *f,
                           size_t c0, size_t c1)
{
    uint64_t want = 0, got = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        lower_rb_place pl;
        if (r->type != TR_ALLOC || lower_rb_find(m, r->u.alloc.id, &pl, 1) != 1 ||
            pl.pass != pass || pl.layer != layer)
            continue;
        double alpha = 1;
        plan_decision_for(p, pl.tensor, &alpha);
        unsigned k = strstr(r->u.alloc.name, "_stats") ? 2 : 1;
        uint64_t arr = pl.bytes / k, cb = (uint64_t)(alpha * (double)arr);
        for (unsigned j = 0; j < k; j++) {
            uint64_t lo = base + pl.offset_bytes + j * arr, hi = lo + cb;
            want += cb;
            /* the copies of [c0, c1) must cover [lo, hi) */
            uint64_t cov = 0;
            for (size_t c = c0; c < c1; c++) {
                uint64_t a = f->copies[c].src, b = a + f->copies[c].bytes;
                uint64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
                if (y > x) cov += y - x;
            }
            if (cov != cb) return 0;
        }
    }
    for (size_t c = c0; c < c1; c++) got += f->copies[c].bytes;
    return got == want;
}

static void test_partial_replay(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    /* the shape tests/test_rt_partial runs on the GPU: T = 128 x 2 token rows */
    if (!small_workload("dims:2,128,2,512,512", 128, &mp, &c)) return;
    c.micro_batch = 2;
    c.iterations = 2;
    c.grad_bytes = 4;
    c.save_small = 1;
    trace_t *t = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(st == MS_OK, "partial replay: trace generated (%s)", st == MS_OK ? "" : err.msg);
    if (st != MS_OK) {
        machine_profile_free(mp);
        return;
    }
    const double alphas[3] = { 0.5, 0.75, 0.875 };
    for (int ai = 0; ai < 3; ai++) {
        plan_t *p = partial_plan(t, alphas[ai]);
        schedule_t *s = NULL;
        lower_rb_map *m = NULL;
        st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
        if (st == MS_OK) st = lower_rb_map_new(t, p, &m, &err);
        size_t n_partial = 0, bad_frac = 0;
        for (size_t i = 0; st == MS_OK && i < sched_count(s); i++) {
            const sched_action *a = sched_get(s, i);
            if (a->kind != SA_COMPUTE || a->replay_frac == 0) continue;
            n_partial++;
            bad_frac += !a->recompute || fabs(a->replay_frac - (1 - alphas[ai])) > 1e-12;
        }
        TAP_OK(st == MS_OK && n_partial > 0 && bad_frac == 0, "alpha %g: lowered, %zu compute actions carry "
               "replay_frac %g (%s)", alphas[ai], n_partial, 1 - alphas[ai],
               st == MS_OK ? "" : err.msg);
        if (st != MS_OK) goto next;
        rhook h;
        rt_exec_opts o;
        rhook_opts(&h, t, 1 - alphas[ai], p, m, &o);
        fdev f;
        fbe b;
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_result r;
        rt_status rs = run(s, &o, &f, &b, &r, &err);
        TAP_OK(rs == RT_OK && r.outcome == RTX_OK && h.rows == (long)n_partial &&
               h.bad_frac == 0 && h.bad_part == 0 && h.targets_full > 0 && h.transients_part > 0,
               "alpha %g: every replayed op runs on the row range (%ld of %ld ops; in-place "
               "targets full size %ld, partial transients %ld, wrong %ld; %s)", alphas[ai],
               h.rows, h.rows + h.whole, h.targets_full, h.transients_part, h.bad_part,
               r.failure);
        /* each offload reads each member's leading rows per array; its prefetch writes the
         * same pieces back from the same host bytes */
        int ok = 1, blocks = 0;
        for (size_t i = 0; i < f.n_copies; i++) {
            if (!f.copies[i].d2h) continue;
            /* one block's offload: the shortest run of D2H pieces from i that is exactly some
             * group's expected pieces (consecutive offloads follow each other directly) */
            size_t j = i + 1;
            uint64_t host0 = f.copies[i].dst, dev0 = f.copies[i].src;
            int found = 0;
            for (; !found && j <= f.n_copies && f.copies[j - 1].d2h; j++)
                for (size_t q = 0; q < trace_count(t) && !found; q++) {
                    const trace_rec *rr = trace_get(t, q);
                    lower_rb_place pl;
                    if (rr->type != TR_ALLOC || lower_rb_find(m, rr->u.alloc.id, &pl, 1) != 1 ||
                        pl.offset_bytes != 0)
                        continue;
                    found = pieces_expected(t, m, p, pl.pass, pl.layer, dev0, &f, i, j);
                }
            j--;
            blocks++;
            ok &= found;
            /* the H2D pieces reading this host range mirror the D2H ones */
            size_t n_back = 0;
            for (size_t q = j; q < f.n_copies && !(q > j && f.copies[q].d2h &&
                                                     f.copies[q].dst == host0); q++)
                if (!f.copies[q].d2h && f.copies[q].src >= host0 &&
                    f.copies[q].src < host0 + (f.copies[j - 1].dst + f.copies[j - 1].bytes - host0))
                    for (size_t u = i; u < j; u++)
                        n_back += f.copies[u].dst == f.copies[q].src &&
                                  f.copies[u].bytes == f.copies[q].bytes;
            ok &= n_back == j - i;
            if (!ok) TAP_NOTE("block at copy %zu: found %d, %zu pieces, %zu back", i, found, j - i, n_back);
            i = j - 1;
        }
        TAP_OK(ok && blocks > 0, "alpha %g: %d offloads move each member's leading rows of "
               "each row array (norm statistics: 2 arrays), the prefetches put the same pieces "
               "back", alphas[ai], blocks);
        TAP_OK(clean(&f, &b), "alpha %g: everything released", alphas[ai]);
        rt_exec_result_release(&r);
        /* without the row-range hook the run stops with the reason */
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        o.compute_rows = NULL;
        rs = run(s, &o, &f, &b, &r, &err);
        TAP_OK(rs != RT_OK && r.outcome == RTX_ERROR && strstr(r.failure, "token-wise") &&
               clean(&f, &b), "alpha %g: without a row-range hook: %s", alphas[ai], r.failure);
        rt_exec_result_release(&r);
    next:
        lower_rb_map_free(m);
        sched_free(s);
        plan_free(p);
    }
    /* an alpha that is not a whole number of rows (0.3 of 256) stops at the first offload */
    {
        plan_t *p = partial_plan(t, 0.3);
        schedule_t *s = NULL;
        lower_rb_map *m = NULL;
        st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
        if (st == MS_OK) st = lower_rb_map_new(t, p, &m, &err);
        rhook h;
        rt_exec_opts o;
        rhook_opts(&h, t, 0.7, p, m, &o);
        fdev f;
        fbe b;
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_result r;
        rt_status rs = st == MS_OK ? run(s, &o, &f, &b, &r, &err) : RT_ERR_INVALID;
        TAP_OK(st == MS_OK && rs != RT_OK && r.outcome == RTX_ERROR &&
               strstr(r.failure, "whole number") && clean(&f, &b),
               "alpha 0.3 of 256 rows: %s", st == MS_OK ? r.failure : err.msg);
        if (st == MS_OK) rt_exec_result_release(&r);
        lower_rb_map_free(m);
        sched_free(s);
        plan_free(p);
    }
    trace_free(t);
    machine_profile_free(mp);
}

/* ---------------- DHA and host-optimizer plans (lower_dha) ---------------- */

typedef struct dhook {
    const trace_t *t;
    uint64_t host_lo;             /* fake pinned addresses are at or above this */
    long calls, inits, bad_init, steps, bad_step, prepared;
    int emb_host, l0fwd_host, l0bwd_w_dev, l0bwd_g_host, l1_dev, l1_g_dev, head_host;
    int fail_prepare;
    int64_t seq[64];              /* the ops of the host steps, in the order they ran */
} dhook;

static int is_host(const dhook *h, uint64_t a) { return a >= h->host_lo; }

/* Records where the executor put the operands of a few ops of the mixed plan below. */
static rt_status dh_compute(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                            const uint64_t *out, ms_error *err)
{
    (void)err;
    (void)stream;
    dhook *h = ctx;
    h->calls++;
    if (!strcmp(op->name, "embed")) h->emb_host += is_host(h, in[1]);
    if (!strcmp(op->name, "L0.qkv")) h->l0fwd_host += is_host(h, in[1]);
    if (!strcmp(op->name, "L0.qkv.bwd")) {
        h->l0bwd_w_dev += !is_host(h, in[3]);
        h->l0bwd_g_host += is_host(h, out[1]);
    }
    if (!strcmp(op->name, "L1.fc1")) h->l1_dev += !is_host(h, in[1]);
    if (!strcmp(op->name, "L1.fc1.bwd")) h->l1_g_dev += !is_host(h, out[1]);
    if (!strcmp(op->name, "lm_head")) h->head_host += is_host(h, in[1]);
    return RT_OK;
}

static rt_status dh_init(void *ctx, void *stream, uint64_t tensor, uint64_t dev, uint64_t bytes,
                         ms_error *err)
{
    (void)err;
    (void)stream;
    dhook *h = ctx;
    const trace_tensor *x = trace_find_tensor(h->t, tensor);
    h->inits++;
    h->bad_init += !x || x->bytes > bytes || !is_host(h, dev);
    return RT_OK;
}

static int dh_prepare(void *ctx, const trace_op *op, uint64_t *ids, size_t max, int64_t *tag,
                      ms_error *err)
{
    dhook *h = ctx;
    if (h->fail_prepare) {
        rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "test", "no host math here");
        return -1;
    }
    /* the group's gradient buffer and parameters, from the trace's copies */
    char g[96];
    size_t n = strlen(op->name) - strlen(".optim.host");
    snprintf(g, sizeof g, "%.*s.grad.d2h", (int)n, op->name);
    size_t k = 0;
    for (size_t i = 0; i < trace_count(h->t) && !k; i++) {
        const trace_rec *r = trace_get(h->t, i);
        if (r->type == TR_OP && !strcmp(r->u.op.name, g) && r->u.op.n_in == 1 && max > 0)
            ids[k++] = r->u.op.in[0];
    }
    ids[k++] = dha_synth_id(0);
    *tag = (int64_t)op->layer + 1;
    h->prepared++;
    return (int)k;
}

static rt_status dh_step(void *ctx, const trace_op *op, int64_t tag, const uint64_t *addr,
                         const uint64_t *bytes, size_t n, ms_error *err)
{
    (void)err;
    dhook *h = ctx;
    h->steps++;
    h->bad_step += n != 2 || tag != (int64_t)op->layer + 1 || !bytes[0] || !bytes[1];
    for (size_t k = 0; k < n; k++) h->bad_step += !is_host(h, addr[k]);
    if (h->steps <= 64) h->seq[h->steps - 1] = (int64_t)op->id;
    return RT_OK;
}

static void test_dha(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,128,2,512,512", 128, &mp, &c)) return;
    c.micro_batch = 2;
    c.iterations = 3;
    c.grad_bytes = 4;
    c.save_small = 1;
    c.offload = 1;
    trace_t *t = NULL;
    schedule_t *s = NULL;
    plan_t *p = plan_new("manual", "caching");
    ms_status st = p ? gen_trace(&c, &mp->m, &t, &err) : MS_ERR_NOMEM;
    if (st == MS_OK && (plan_set_lowering(p, "dha") || plan_set_knob(p, "host_params", "1") ||
                        plan_set_layer(p, -1, PM_DHA, 0) || plan_set_layer(p, 0, PM_DFGB, 1) ||
                        plan_set_layer(p, 1, PM_GFGB, 0) || plan_set_layer(p, 2, PM_DHA, 1)))
        st = MS_ERR_NOMEM;
    if (st == MS_OK) {
        plan_sort(p);
        st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
    }
    TAP_OK(st == MS_OK, "offload trace (the shape of test_rt_dha) lowered under a plan with "
           "DHA, DFGB and GFGB units, gradients on the GPU and on the host (%s)",
           st == MS_OK ? "" : err.msg);
    if (st != MS_OK) goto out;
    size_t n_host = 0, n_homes = 0, n_ops = 0;
    int64_t want[64];
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        const trace_tensor *x = trace_find_tensor(t, a->tensor);
        if (a->kind == SA_HOST_COMPUTE && n_host < 64) want[n_host] = a->op;
        n_host += a->kind == SA_HOST_COMPUTE;
        n_ops += a->kind == SA_COMPUTE && a->op >= 0;
        n_homes += a->kind == SA_HOST_ALLOC && x;
    }
    for (int neg = 0; neg < 2; neg++) {
        dhook h;
        memset(&h, 0, sizeof h);
        h.t = t;
        h.host_lo = 1ULL << 44;
        h.fail_prepare = neg;
        fdev f;
        fbe b;
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_opts o;
        rt_exec_opts_default(&o);
        o.trace = t;
        o.compute = dh_compute;
        o.host_init = dh_init;
        o.host_prepare = dh_prepare;
        o.host_compute = dh_step;
        o.compute_ctx = &h;
        rt_exec_result r;
        rt_status rs = run(s, &o, &f, &b, &r, &err);
        if (neg) {
            TAP_OK(rs != RT_OK && r.outcome == RTX_ERROR && strstr(r.failure, "optim.host") &&
                   strstr(r.failure, "no host math here") && clean(&f, &b),
                   "a host step the hook refuses stops the run naming the op and why, "
                   "everything released (%s)", r.failure);
        } else {
            TAP_OK(rs == RT_OK && r.outcome == RTX_OK && h.calls == (long)n_ops &&
                   r.host_operands > 0, "DHA plan through the real-kernel hook: %ld ops, %llu "
                   "operands in pinned host memory (%s)", h.calls,
                   (unsigned long long)r.host_operands, r.failure);
            TAP_OK(h.emb_host == 3 && h.l0fwd_host == 3 && h.head_host == 3,
                   "DHA reads: the embedding lookup, layer 0's forward (DFGB) and the head get "
                   "their weights in pinned host memory in each of 3 iterations (%d %d %d)",
                   h.emb_host, h.l0fwd_host, h.head_host);
            TAP_OK(h.l0bwd_w_dev == 3 && h.l1_dev == 3 && h.l1_g_dev == 3 && h.l0bwd_g_host == 3,
                   "GPU copies: layer 0's backward (DFGB) and layer 1 (GFGB) read device "
                   "weights; layer 0's gradient (grad=host) goes to host memory, layer 1's "
                   "(grad=gpu) to the device (%d %d %d %d)", h.l0bwd_w_dev, h.l1_dev,
                   h.l1_g_dev, h.l0bwd_g_host);
            TAP_OK(h.inits == (long)n_homes && r.host_inits == n_homes && h.bad_init == 0,
                   "host_init once per host home of a trace tensor, at a mapped address, "
                   "with its bytes (%ld of %zu)", h.inits, n_homes);
            int order = n_host <= 64 && !memcmp(want, h.seq, n_host * sizeof *want);
            TAP_OK(h.steps == (long)n_host && r.host_steps == n_host && n_host == 12 &&
                   h.bad_step == 0 && order,
                   "every host AdamW step (%ld of %zu: 4 groups x 3 iterations) ran through "
                   "host_compute with its pinned ranges, in the schedule's order (bad %ld, order %d)",
                   h.steps, n_host, h.bad_step, order);
            TAP_OK(clean(&f, &b), "everything released");
        }
        rt_exec_result_release(&r);
    }
out:
    sched_free(s);
    plan_free(p);
    trace_free(t);
    machine_profile_free(mp);
}

/* ---------------- swap checksums (verify_swaps) ---------------- */

/* The fake device with the checksum entries and its model of the bytes. */
static void fdev_sums_on(fdev *f, long corrupt_d2h)
{
    static u64map *dv, *hv;
    if (!dv) dv = u64map_new(256);
    if (!hv) hv = u64map_new(256);
    if (!dv || !hv) abort();
    u64map_clear(dv);
    u64map_clear(hv);
    f->dval = dv;
    f->hval = hv;
    f->corrupt_d2h = corrupt_d2h;
    f->ops.sum_begin = f_sum_begin;
    f->ops.sum_add = f_sum_add;
    f->ops.sum_read = f_sum_read;
    f->ops.sum_end = f_sum_end;
}

static void test_verify_swaps(void)
{
    ms_error err;
    ms_error_clear(&err);
    /* the host reference: pieces add up, position matters, one changed byte shows */
    unsigned char buf[100];
    for (int k = 0; k < 100; k++) buf[k] = (unsigned char)(k * 37 + 11);
    uint64_t whole = rt_checksum(buf, 100, 0);
    TAP_OK(rt_checksum(buf, 13, 0) + rt_checksum(buf + 13, 51, 13) + rt_checksum(buf + 64, 36, 64)
           == whole, "rt_checksum: pieces at their positions add up to the whole (0x%016llx)",
           (unsigned long long)whole);
    uint64_t at8 = rt_checksum(buf, 100, 8);
    buf[57] ^= 0x80;
    TAP_OK(at8 != whole && rt_checksum(buf, 100, 0) != whole, "rt_checksum: another position "
           "or one flipped bit gives another sum");
    buf[57] ^= 0x80;

    schedule_t *s = swap_schedule(2);
    fdev f;
    fbe b;
    rt_exec_opts o;
    rt_exec_result r;
    fdev_init(&f);
    fdev_sums_on(&f, 0);
    fbe_init(&b, 1ULL << 34);
    rt_exec_opts_default(&o);
    o.verify_swaps = 1;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.swap_sums == 4 && r.swap_verified == 2 &&
           r.swap_mismatches == 0 && r.swap_unpaired == 0 && f.sum_calls == 4,
           "verify_swaps: 4 copies checksummed, both prefetches match their offloads (sums %llu "
           "verified %llu mismatches %llu unpaired %llu; %s)", (unsigned long long)r.swap_sums,
           (unsigned long long)r.swap_verified, (unsigned long long)r.swap_mismatches,
           (unsigned long long)r.swap_unpaired, r.failure);
    TAP_OK(clean(&f, &b) && f.sums_live == 0, "verify_swaps: the sums are released too");
    rt_exec_result_release(&r);

    /* the second offload's pinned bytes change before its prefetch reads them */
    fdev_init(&f);
    fdev_sums_on(&f, 2);
    fbe_init(&b, 1ULL << 34);
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_ERR_CUDA && r.outcome == RTX_ERROR && r.swap_mismatches == 1 &&
           r.swap_verified == 1 && strstr(r.failure, "came back different") &&
           strstr(r.failure, "tensor 10 ") && strstr(r.failure, "action 26 ") &&
           strstr(r.failure, "action 34 ") && strstr(r.failure, "checksum 0x"),
           "corrupted host bytes: the prefetch's sum differs: %s", r.failure);
    TAP_OK(clean(&f, &b) && f.sums_live == 0 && r.iter_time_s == 0,
           "after the mismatch everything is released");
    rt_exec_result_release(&r);

    /* a device without the checksum entries refuses the option */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_ERR_INVALID && r.outcome == RTX_ERROR &&
           strstr(r.failure, "cannot checksum") && clean(&f, &b),
           "verify_swaps without device support: %s", r.failure);
    rt_exec_result_release(&r);
    sched_free(s);

    /* generated plans: memo's gathered row pieces (alpha 0.75) and full-swap */
    machine_profile *mp;
    gen_config c;
    if (!small_workload("dims:2,128,2,512,512", 128, &mp, &c)) return;
    c.micro_batch = 2;
    c.iterations = 2;
    c.grad_bytes = 4;
    c.save_small = 1;
    trace_t *t = NULL;
    ms_status ms = gen_trace(&c, &mp->m, &t, &err);
    for (int k = 0; ms == MS_OK && k < 2; k++) {
        plan_t *p = NULL;
        if (k == 0) p = partial_plan(t, 0.75);
        else if (pol_plan("full-swap", t, &mp->m, NULL, &p, &err) != MS_OK) p = NULL;
        schedule_t *gs = NULL;
        lower_rb_map *m = NULL;
        ms_status ls = p ? lower_schedule(t, p, &mp->m, NULL, &gs, &err) : MS_ERR_INVALID;
        if (ls == MS_OK) ls = lower_rb_map_new(t, p, &m, &err);
        if (ls != MS_OK) {
            TAP_OK(0, "verify_swaps: plan %d lowered: %s", k, err.msg);
        } else {
            rhook h;
            rhook_opts(&h, t, 0.25, p, m, &o);
            fdev_init(&f);
            fdev_sums_on(&f, 0);
            fbe_init(&b, 8ULL << 30);
            o.verify_swaps = 1;
            st = run(gs, &o, &f, &b, &r, &err);
            size_t n_h2d = 0;
            for (size_t i = 0; i < sched_count(gs); i++)
                n_h2d += sched_get(gs, i)->kind == SA_COPY_H2D && sched_get(gs, i)->bytes;
            TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.swap_mismatches == 0 &&
                   r.swap_verified == n_h2d && n_h2d > 0 &&
                   (k == 0 ? f.sum_calls > (long)r.swap_sums : f.sum_calls == (long)r.swap_sums),
                   "verify_swaps %s: every one of %zu prefetches matches its offload (verified "
                   "%llu, unpaired %llu, %ld pieces summed in %llu copies; %s)",
                   k ? "full-swap" : "memo alpha 0.75", n_h2d,
                   (unsigned long long)r.swap_verified, (unsigned long long)r.swap_unpaired,
                   f.sum_calls, (unsigned long long)r.swap_sums, r.failure);
            TAP_OK(clean(&f, &b) && f.sums_live == 0, "verify_swaps %s: everything released",
                   k ? "full-swap" : "memo");
            rt_exec_result_release(&r);
        }
        lower_rb_map_free(m);
        sched_free(gs);
        plan_free(p);
    }
    TAP_OK(ms == MS_OK, "verify_swaps: trace generated");
    trace_free(t);
    machine_profile_free(mp);
}

int main(void)
{
    test_host_stream();
    test_host_plan();
    test_swap();
    test_credit();
    test_failures();
    test_generated();
    test_static_deferred();
    test_rb_operands();
    test_partial_replay();
    test_record();
    test_dha();
    test_verify_swaps();
    return tap_done();
}

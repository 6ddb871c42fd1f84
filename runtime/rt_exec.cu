/* rt_exec.cu — the runtime's schedule executor (rt_exec.h): the host-side issue loop over a
 * device interface, and the CUDA device (streams, events, copies, the calibrated spin kernel,
 * DHA streaming reads, host work on a CPU thread in stream order). Semantics, including how
 * frees of blocks other streams used are deferred (PyTorch's record_stream), are in
 * docs/RUNTIME.md. Used by runtime/rt_run.c (`memsim run`) and the tests. C-style CUDA. */
#include "runtime/rt_exec.h"

#include "planners/blockmix.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "planners/lower.h"
#include "base/u64map.h"
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ======================= the pinned host pool plan ======================= */

typedef struct hole {
    uint64_t off, len;
} hole;

typedef struct hplan_state {
    hole *h;
    size_t n, cap;
    uint64_t top;
} hplan_state;

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* First fit: the lowest hole that holds sz, else the top (growing a hole that ends there). */
static uint64_t hp_take(hplan_state *p, uint64_t sz)
{
    for (size_t k = 0; k < p->n; k++) {
        if (p->h[k].len < sz) continue;
        uint64_t off = p->h[k].off;
        p->h[k].off += sz;
        p->h[k].len -= sz;
        if (!p->h[k].len) {
            memmove(&p->h[k], &p->h[k + 1], (p->n - k - 1) * sizeof *p->h);
            p->n--;
        }
        return off;
    }
    if (p->n && p->h[p->n - 1].off + p->h[p->n - 1].len == p->top) {
        uint64_t off = p->h[--p->n].off;
        p->top = off + sz;
        return off;
    }
    uint64_t off = p->top;
    p->top += sz;
    return off;
}

/* Returns [off, off + sz) to the holes, kept sorted and coalesced. */
static ms_status hp_give(hplan_state *p, uint64_t off, uint64_t sz)
{
    size_t k = 0;
    while (k < p->n && p->h[k].off < off) k++;
    if (k > 0 && p->h[k - 1].off + p->h[k - 1].len == off) {
        p->h[k - 1].len += sz;
        if (k < p->n && off + sz == p->h[k].off) {
            p->h[k - 1].len += p->h[k].len;
            memmove(&p->h[k], &p->h[k + 1], (p->n - k - 1) * sizeof *p->h);
            p->n--;
        }
        return MS_OK;
    }
    if (k < p->n && off + sz == p->h[k].off) {
        p->h[k].off = off;
        p->h[k].len += sz;
        return MS_OK;
    }
    if (ms_grow((void **)&p->h, &p->cap, p->n + 1, sizeof *p->h) != MS_OK) return MS_ERR_NOMEM;
    memmove(&p->h[k + 1], &p->h[k], (p->n - k) * sizeof *p->h);
    p->h[k].off = off;
    p->h[k].len = sz;
    p->n++;
    return MS_OK;
}

void rt_host_plan_release(rt_host_plan *hp)
{
    if (!hp) return;
    free(hp->offsets);
    free(hp->stream_mask);
    memset(hp, 0, sizeof *hp);
}

/* One pass in program order: a map from each live host tensor to its HOST_ALLOC action. A
 * D2H copy finds its host range under the block's own id or, failing that, under the id
 * lowering gives the host copy (lower_id_host_copy: MEMO's rounding buffers, memory_plan). */
ms_status rt_host_plan_make(const schedule_t *s, uint64_t align_bytes, rt_host_plan *hp,
                            ms_error *err)
{
    memset(hp, 0, sizeof *hp);
    size_t n = sched_count(s);
    uint64_t al = align_bytes ? align_bytes : 4096;
    hp->offsets = (uint64_t *)malloc((n ? n : 1) * sizeof *hp->offsets);
    hp->stream_mask = (uint8_t *)calloc(n ? n : 1, 1);
    u64map *at = u64map_new(256);   /* tensor -> HOST_ALLOC action index */
    hplan_state p;
    memset(&p, 0, sizeof p);
    ms_status st = MS_OK;
    if (!hp->offsets || !hp->stream_mask || !at) st = MS_ERR_NOMEM;
    uint64_t used = 0, scratch = 0;
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        const sched_action *a = sched_get(s, i);
        hp->offsets[i] = UINT64_MAX;
        uint64_t ai;
        int live = u64map_get(at, a->tensor, &ai);
        /* an offload writes the host copy named for the block its prefetch will make */
        if (!live && a->kind == SA_COPY_D2H)
            live = u64map_get(at, lower_id_host_copy(a->tensor), &ai);
        switch (a->kind) {
        case SA_HOST_ALLOC:
            if (live) {
                st = ms_fail(err, MS_ERR_INVALID, "schedule action %zu: tensor %llu already "
                             "holds host memory", i, (unsigned long long)a->tensor);
                break;
            }
            hp->offsets[i] = hp_take(&p, align_up(a->bytes ? a->bytes : 1, al));
            if (u64map_put(at, a->tensor, i)) st = MS_ERR_NOMEM;
            used += a->bytes;
            if (used > hp->peak_bytes) hp->peak_bytes = used;
            break;
        case SA_HOST_FREE: {
            if (!live) {
                st = ms_fail(err, MS_ERR_INVALID, "schedule action %zu: tensor %llu holds no "
                             "host memory", i, (unsigned long long)a->tensor);
                break;
            }
            const sched_action *h = sched_get(s, ai);
            hp->stream_mask[ai] |= (uint8_t)(1u << a->stream);
            st = hp_give(&p, hp->offsets[ai], align_up(h->bytes ? h->bytes : 1, al));
            used -= h->bytes;
            u64map_del(at, a->tensor, NULL);
            break;
        }
        case SA_COPY_D2H:
        case SA_COPY_H2D:
            if (live) hp->stream_mask[ai] |= (uint8_t)(1u << a->stream);
            else if (a->bytes > scratch) scratch = a->bytes;
            break;
        default:
            break;
        }
    }
    if (st == MS_OK) {
        hp->scratch_off = p.top;
        hp->scratch_bytes = scratch ? align_up(scratch, al) : 0;
        hp->pool_bytes = p.top + hp->scratch_bytes;
    }
    free(p.h);
    u64map_free(at);
    if (st != MS_OK) {
        if (st == MS_ERR_NOMEM) ms_fail(err, st, "out of memory planning the pinned pool");
        rt_host_plan_release(hp);
    }
    return st;
}

/* ======================= swap checksums ======================= */

uint64_t rt_checksum(const void *p, uint64_t bytes, uint64_t pos)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t acc = 0, j = 0;
    for (; j < bytes && ((pos + j) & 7); j++)
        acc += ((uint64_t)b[j] << (8 * ((pos + j) & 7))) * (2 * ((pos + j) >> 3) + 1);
    for (; j + 8 <= bytes; j += 8) {
        uint64_t w = 0;
        for (int l = 0; l < 8; l++) w |= (uint64_t)b[j + l] << (8 * l); /* little-endian */
        acc += w * (2 * ((pos + j) >> 3) + 1);
    }
    for (; j < bytes; j++)
        acc += ((uint64_t)b[j] << (8 * ((pos + j) & 7))) * (2 * ((pos + j) >> 3) + 1);
    return acc;
}

/* ======================= the executor ======================= */

typedef struct dlive {
    uint64_t addr, bytes;
    int stream;        /* the allocating stream (the allocator's pool) */
    unsigned users;    /* streams that used the block, bit per schedule stream */
} dlive;

typedef struct hlive {
    uint64_t off, bytes;   /* the range (at least 1 byte) */
    uint64_t req;          /* bytes asked for (host accounting) */
    unsigned users;
    size_t last_d2h;       /* verify_swaps: 1 + the copy index of the last D2H copy into the
                              range, 0 when none (or host work used the range since) */
} hlive;

/* A free waiting for events on other streams: a device block (released to the allocator when
 * the last event is reached) or a pinned range (reusable by later HOST_ALLOCs without waiting
 * once reached; until then they make their streams wait on the events). A device block can
 * be released early, when an allocation fails while it waits (release_deferred): it then
 * stays a fence until its events are reached, and a stream handed overlapping bytes waits on
 * them (fence_block). */
typedef struct pend {
    int host, active, outstanding;
    int released;      /* device: already given back to the allocator */
    uint64_t addr, off, bytes;
    void *ev[SS_COUNT];
    int n_ev;
} pend;

typedef struct fitem {
    void *ev;
    uint32_t pend;
} fitem;

/* Events recorded on one stream reach in record order: only the head needs querying. */
typedef struct fifo {
    fitem *v;
    size_t head, n, cap;
} fifo;

typedef struct tev {
    void *e0, *e1;
    size_t action, win;
    uint64_t bytes;
    int d2h;
    double req_us;
    uint64_t tensor;   /* copies: the copied block's id */
    size_t pair;       /* verify_swaps, H2D: 1 + the index of the D2H copy read back */
    int summed, read_back;
} tev;

typedef struct ex {
    const schedule_t *s;
    rt_exec_opts o;
    const rt_dev_ops *d;
    const mb_backend *be;
    rt_exec_result *r;
    alloc_t *alloc;
    blockmix *mix;                         /* what the peak holds (planners/blockmix.h) */
    rt_host_plan hp;
    uint64_t pool, dha_buf, dha_bytes;     /* host addresses */
    uint64_t pool_dev;                     /* the pool's mapped device address */
    struct hstep **steps;                  /* real host steps issued (freed at the end) */
    size_t n_steps, cap_steps;
    int step_fail;                         /* a host step failed (set on the host thread) */
    char step_msg[256];
    void *st[SS_COUNT];
    void **sev;
    uint32_t n_sev;
    void **wev;                 /* window start events; [0] is the run's start */
    size_t n_win, cur_win;
    void *ev_end;
    tev *cp;                    /* copies */
    size_t n_cp, used_cp;
    tev *op;                    /* per-op events */
    size_t n_op, used_op;
    void **pool_ev;             /* every pool event made (destroyed at the end) */
    size_t n_pool_ev, cap_pool_ev;
    void **free_ev;             /* pool events ready for reuse */
    size_t n_free_ev, cap_free_ev;
    u64map *dmap, *hmap;        /* tensor -> slot */
    dlive *dl;
    size_t n_dl, cap_dl;
    uint32_t *dl_free;
    size_t n_dl_free, cap_dl_free;
    hlive *hl;
    size_t n_hl, cap_hl;
    uint32_t *hl_free;
    size_t n_hl_free, cap_hl_free;
    pend *pd;
    size_t n_pd, cap_pd;
    uint32_t *pd_free;
    size_t n_pd_free, cap_pd_free;
    uint64_t pending_dev;       /* active device pends still holding their block */
    uint64_t fenced_dev;        /* active device pends already released (fences) */
    u64map *alias;              /* trace tensor id -> its latest re-allocation's id
                                   (memory_plan renaming), for the real-kernel hook */
    fifo q[SS_COUNT];
    void **ahead;               /* max_ahead: events after the last compute actions, a ring */
    size_t ahead_head, ahead_n;
    uint64_t host_used;
    uint64_t retries_at_mark;
    double debt_us, empty_us;
    double deadline, t0;
    int stop, hung;
    int sums_on;                /* verify_swaps: the device holds a sum slot per copy */
} ex;

void rt_exec_opts_default(rt_exec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->allocator = "caching";
    o->spin_credit = 1;
    o->large_copy_bytes = 32ULL << 20;
}

const char *rt_outcome_name(rt_outcome o)
{
    switch (o) {
    case RTX_OK: return "ok";
    case RTX_OOM: return "oom";
    case RTX_OOHM: return "oohm";
    case RTX_ERROR: return "error";
    }
    return "unknown";
}

void rt_exec_result_release(rt_exec_result *r)
{
    if (!r) return;
    free(r->win);
    free(r->ops);
    r->win = NULL;
    r->ops = NULL;
    r->n_win = r->n_ops = 0;
}

/* ---- failures ---- */

static rt_status fail(ex *x, rt_outcome oc, rt_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static rt_status fail(ex *x, rt_outcome oc, rt_status st, const char *fmt, ...)
{
    if (!x->stop) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->r->failure, sizeof x->r->failure, fmt, ap);
        va_end(ap);
        x->r->outcome = oc;
    }
    x->stop = 1;
    return st;
}

static rt_status fail_dev(ex *x, size_t i, const char *what, ms_error *err)
{
    return fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: %s: %s", i, what,
                err->msg);
}

/* What the backend's last failed call was (an allocator or mb_ops call returns a status
 * only): rt_exec_opts.backend_error, where the caller gave one. */
static const char *be_why(const ex *x)
{
    const ms_error *e = x->o.backend_error;
    return e && e->msg[0] ? e->msg : "no error";
}

static const char *tname(const ex *x, uint64_t id, char *buf, size_t n)
{
    const trace_tensor *t = x->o.trace ? trace_find_tensor(x->o.trace, id) : NULL;
    snprintf(buf, n, "%s", t && t->name[0] ? t->name : "-");
    return buf;
}

/* ---- waiting, with the watchdog ---- */

static rt_status wait_ev(ex *x, void *e, const char *what, ms_error *err)
{
    double left = x->deadline - mono_s();
    int q = x->d->host_wait(x->d->ctx, e, left > 0 ? left : 0, err);
    if (q > 0) return RT_OK;
    if (q < 0)
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "waiting for %s: %s", what, err->msg);
    x->hung = 1;
    return fail(x, RTX_ERROR, RT_ERR_CUDA,
                "watchdog: %s was not reached within %.0f s of the run's start (the GPU may "
                "be hung); device resources are left to process exit", what, x->o.watchdog_s);
}

/* ---- event pool (untimed events for deferred frees and joins) ---- */

static void *pool_get(ex *x, ms_error *err)
{
    if (x->n_free_ev) return x->free_ev[--x->n_free_ev];
    void *e = NULL;
    if (x->d->event_new(x->d->ctx, 0, &e, err) != RT_OK) return NULL;
    if (ms_grow((void **)&x->pool_ev, &x->cap_pool_ev, x->n_pool_ev + 1, sizeof(void *)) !=
        MS_OK) {
        x->d->event_free(x->d->ctx, e);
        return NULL;
    }
    x->pool_ev[x->n_pool_ev++] = e;
    return e;
}

static void pool_put(ex *x, void *e)
{
    /* cannot fail: free_ev never holds more than pool_ev */
    if (ms_grow((void **)&x->free_ev, &x->cap_free_ev, x->n_free_ev + 1, sizeof(void *)) ==
        MS_OK)
        x->free_ev[x->n_free_ev++] = e;
}

/* ---- live tables ---- */

static ms_status slot_new(uint32_t **fr, size_t *nfr, size_t *n, size_t *cap, void **arr,
                          size_t elem, uint32_t *slot)
{
    if (*nfr) {
        *slot = (*fr)[--*nfr];
        return MS_OK;
    }
    if (ms_grow(arr, cap, *n + 1, elem) != MS_OK) return MS_ERR_NOMEM;
    *slot = (uint32_t)(*n)++;
    return MS_OK;
}

static ms_status slot_del(uint32_t **fr, size_t *nfr, size_t *cap, uint32_t slot)
{
    if (ms_grow((void **)fr, cap, *nfr + 1, sizeof **fr) != MS_OK) return MS_ERR_NOMEM;
    (*fr)[(*nfr)++] = slot;
    return MS_OK;
}

static dlive *dev_live(ex *x, uint64_t tensor)
{
    uint64_t slot;
    return u64map_get(x->dmap, tensor, &slot) ? &x->dl[slot] : NULL;
}

static hlive *host_live(ex *x, uint64_t tensor)
{
    uint64_t slot;
    return u64map_get(x->hmap, tensor, &slot) ? &x->hl[slot] : NULL;
}

/* ---- deferred frees ---- */

static rt_status pend_new(ex *x, uint32_t *idx, ms_error *err)
{
    if (slot_new(&x->pd_free, &x->n_pd_free, &x->n_pd, &x->cap_pd, (void **)&x->pd,
                 sizeof *x->pd, idx) != MS_OK)
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    memset(&x->pd[*idx], 0, sizeof x->pd[*idx]);
    x->pd[*idx].active = 1;
    return RT_OK;
}

/* Records an event on stream k that the pend waits for. */
static rt_status pend_event(ex *x, uint32_t idx, int k, size_t i, ms_error *err)
{
    void *e = pool_get(x, err);
    if (!e) return fail_dev(x, i, "creating an event", err);
    if (x->d->record(x->d->ctx, e, x->st[k], err) != RT_OK) return fail_dev(x, i, "recording", err);
    fifo *f = &x->q[k];
    if (ms_grow((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v) != MS_OK)
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    f->v[f->n].ev = e;
    f->v[f->n].pend = idx;
    f->n++;
    pend *p = &x->pd[idx];
    p->ev[p->n_ev++] = e;
    p->outstanding++;
    return RT_OK;
}

static rt_status pend_done(ex *x, uint32_t idx, ms_error *err)
{
    pend *p = &x->pd[idx];
    p->active = 0;
    if (!p->host && p->released) {
        x->fenced_dev--;
    } else if (!p->host) {
        x->pending_dev--;
        ms_status st = alloc_release(x->alloc, p->addr);
        if (st != MS_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "releasing a deferred block 0x%llx: %s (%s)",
                        (unsigned long long)p->addr, ms_status_str(st), be_why(x));
        bm_release(x->mix, p->addr);
    }
    if (slot_del(&x->pd_free, &x->n_pd_free, &x->cap_pd_free, idx) != MS_OK)
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    return RT_OK;
}

/* Completes the deferred frees whose events were reached; block = wait for all of them. */
static rt_status poll_pending(ex *x, int block, ms_error *err)
{
    for (int k = 0; k < SS_COUNT; k++) {
        fifo *f = &x->q[k];
        while (f->head < f->n) {
            fitem it = f->v[f->head];
            if (block) {
                RT_TRY(wait_ev(x, it.ev, "a deferred free's event", err));
            } else {
                int q = x->d->query(x->d->ctx, it.ev, err);
                if (q < 0)
                    return fail(x, RTX_ERROR, RT_ERR_CUDA, "event query: %s", err->msg);
                if (!q) break;
            }
            f->head++;
            pend *p = &x->pd[it.pend];
            for (int j = 0; j < p->n_ev; j++)
                if (p->ev[j] == it.ev) p->ev[j] = NULL; /* reached: may be reused from now */
            pool_put(x, it.ev);
            if (--p->outstanding == 0) RT_TRY(pend_done(x, it.pend, err));
        }
        if (f->head == f->n) f->head = f->n = 0;
    }
    return RT_OK;
}

/* alloc_sync: the host waits until stream k has reached this point. */
static rt_status sync_stream(ex *x, int k, size_t i, ms_error *err)
{
    void *e = pool_get(x, err);
    if (!e) return fail_dev(x, i, "creating an event", err);
    if (x->d->record(x->d->ctx, e, x->st[k], err) != RT_OK) return fail_dev(x, i, "recording", err);
    rt_status st = wait_ev(x, e, "the stream before an allocator call", err);
    if (st == RT_OK) pool_put(x, e);
    x->r->alloc_waits++;
    return st;
}

/* ---- actions ---- */

static rt_status oom_result(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    bm_failed(x->mix);
    const alloc_stats *s = alloc_get_stats(x->alloc);
    char b0[32], b1[32], b2[32], b3[32], b4[32], tn[48];
    uint64_t cached = s->reserved_bytes > s->allocated_bytes
                          ? s->reserved_bytes - s->allocated_bytes : 0;
    return fail(x, RTX_OOM, RT_OK,
                "out of device memory allocating tensor %llu '%s' of %llu bytes (%s) on stream "
                "%s at action %zu: allocated %s, reserved %s, free cached %s (reserved - "
                "allocated), backend capacity %s",
                (unsigned long long)a->tensor, tname(x, a->tensor, tn, sizeof tn),
                (unsigned long long)a->bytes, ms_fmt_bytes(a->bytes, b0, sizeof b0),
                sched_stream_name(a->stream), i, ms_fmt_bytes(s->allocated_bytes, b1, sizeof b1),
                ms_fmt_bytes(s->reserved_bytes, b2, sizeof b2),
                ms_fmt_bytes(cached, b3, sizeof b3),
                ms_fmt_bytes(x->be->capacity_bytes, b4, sizeof b4));
}

/* An allocation failed while device frees wait for other streams' events: every one is given
 * to the allocator now, without the host waiting; each stays a fence (see fence_block) until
 * its events are reached, so whichever stream gets its bytes first waits for them on the GPU.
 * (PyTorch's retry path synchronizes the outstanding events on the host instead; the order
 * on the GPU is the same.) An allocator that frees cached segments on the retry does it
 * through cudaFree, which synchronizes the device, or through cuMemUnmap, preceded by a
 * synchronize (rt_backend_opts.sync_before_unmap). */
static rt_status release_deferred(ex *x, size_t i, ms_error *err)
{
    for (size_t p = 0; p < x->n_pd; p++) {
        pend *q = &x->pd[p];
        if (!q->active || q->host || q->released) continue;
        q->released = 1;
        x->pending_dev--;
        x->fenced_dev++;
        ms_status st = alloc_release(x->alloc, q->addr);
        if (st != MS_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: releasing a deferred "
                        "block 0x%llx: %s (%s)", i, (unsigned long long)q->addr,
                        ms_status_str(st), be_why(x));
        bm_release(x->mix, q->addr);
    }
    return RT_OK;
}

/* The stream handed [addr, addr + bytes) waits for the events of every deferred free whose
 * bytes overlap it: released fences, and with the static arena (which places tensors at
 * their planned offsets, not where the allocator has room) blocks whose free still waits. */
static rt_status fence_block(ex *x, size_t i, int stream, uint64_t addr, uint64_t bytes,
                             ms_error *err)
{
    if (!addr || !(x->pending_dev + x->fenced_dev)) return RT_OK;
    uint64_t end = addr + (bytes ? bytes : 1);
    for (size_t p = 0; p < x->n_pd; p++) {
        const pend *q = &x->pd[p];
        if (!q->active || q->host || q->addr >= end || addr >= q->addr + q->bytes) continue;
        int waited = 0;
        for (int j = 0; j < q->n_ev; j++) {
            if (!q->ev[j]) continue;
            if (x->d->wait(x->d->ctx, x->st[stream], q->ev[j], err) != RT_OK)
                return fail_dev(x, i, "waiting for a deferred free's event", err);
            waited = 1;
        }
        x->r->alloc_fences += (uint64_t)waited;
    }
    return RT_OK;
}

/* Failures that releasing the deferred frees can cure: no room (OOM), or for the static arena
 * its planned address still held by a tensor whose free waits ("two live tensors, one
 * address"; a real overlap fails again on the retry). */
static int retry_after_release(const ex *x, ms_status st)
{
    return st == MS_ERR_OOM ||
           (st == MS_ERR_INVALID && (alloc_caps(x->alloc) & ALLOC_CAP_STATIC_PLAN));
}

static rt_status do_alloc(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    if (dev_live(x, a->tensor))
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu is already "
                    "allocated", i, (unsigned long long)a->tensor);
    if (x->o.alloc_sync) RT_TRY(sync_stream(x, a->stream, i, err));
    RT_TRY(poll_pending(x, 0, err));
    uint64_t addr = 0;
    ms_status st = alloc_block(x->alloc, a->bytes, a->stream, a->tensor, &addr);
    if (st != MS_OK && x->pending_dev && retry_after_release(x, st)) {
        RT_TRY(release_deferred(x, i, err));
        x->r->oom_drains++;
        st = alloc_block(x->alloc, a->bytes, a->stream, a->tensor, &addr);
    }
    if (st == MS_ERR_OOM) return oom_result(x, i, a, err);
    if (st != MS_OK) {
        char tn[48];
        int arena = st == MS_ERR_INVALID && (alloc_caps(x->alloc) & ALLOC_CAP_STATIC_PLAN);
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: allocating %llu bytes for "
                    "tensor %llu '%s' on stream %s: %s (%s)", i, (unsigned long long)a->bytes,
                    (unsigned long long)a->tensor, tname(x, a->tensor, tn, sizeof tn),
                    sched_stream_name(a->stream), ms_status_str(st),
                    arena ? "static arena: its planned address is held by a live tensor, or "
                            "the plan's offsets do not fit the arena" : be_why(x));
    }
    uint32_t slot;
    if (slot_new(&x->dl_free, &x->n_dl_free, &x->n_dl, &x->cap_dl, (void **)&x->dl,
                 sizeof *x->dl, &slot) != MS_OK || u64map_put(x->dmap, a->tensor, slot) ||
        !bm_alloc(x->mix, a->tensor, (sched_block)a->block, addr, a->bytes)) {
        alloc_release(x->alloc, addr);
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    }
    dlive *d = &x->dl[slot];
    d->addr = addr;
    d->bytes = a->bytes;
    d->stream = a->stream;
    d->users = 1u << a->stream;
    uint64_t tid;
    if (x->alias && lower_id_synthetic(a->tensor, &tid) && tid != UINT64_MAX &&
        u64map_put(x->alias, tid, a->tensor))
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    return fence_block(x, i, a->stream, addr, a->bytes, err);
}

/* A block another stream used must not be reused before that use ends: record an event on
 * every such stream and release the block when all are reached (PyTorch record_stream). The
 * compute stream counts as a user of every block, since kernels there read and write them. */
static rt_status do_free(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    uint64_t slot;
    if (!u64map_del(x->dmap, a->tensor, &slot))
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu holds no "
                    "device block", i, (unsigned long long)a->tensor);
    dlive d = x->dl[slot];
    if (slot_del(&x->dl_free, &x->n_dl_free, &x->cap_dl_free, (uint32_t)slot) != MS_OK)
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    unsigned others = 0;
    if (x->o.alloc_sync) {
        RT_TRY(sync_stream(x, a->stream, i, err));
    } else {
        unsigned users = d.users | (1u << a->stream) | (1u << SS_COMPUTE);
        others = users & ~(1u << d.stream);
    }
    if (!others || !d.addr) {
        ms_status st = alloc_release(x->alloc, d.addr);
        if (st != MS_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: freeing: %s (%s)", i,
                        ms_status_str(st), be_why(x));
        bm_release(x->mix, d.addr);
        return RT_OK;
    }
    uint32_t p;
    RT_TRY(pend_new(x, &p, err));
    x->pd[p].addr = d.addr;
    x->pd[p].bytes = d.bytes ? d.bytes : 1;
    x->pending_dev++;
    x->r->deferred_frees++;
    for (int k = 0; k < SS_COUNT; k++)
        if (others & (1u << k)) RT_TRY(pend_event(x, p, k, i, err));
    return RT_OK;
}

/* The pinned range is placed by the plan; streams that will use it wait for the earlier
 * users of overlapping ranges whose frees are not reached yet. */
static rt_status do_host_alloc(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    RT_TRY(poll_pending(x, 0, err));
    uint64_t off = x->hp.offsets[i], end = off + (a->bytes ? a->bytes : 1);
    unsigned mask = x->hp.stream_mask[i];
    for (size_t p = 0; p < x->n_pd; p++) {
        const pend *q = &x->pd[p];
        if (!q->active || !q->host || q->off >= end || off >= q->off + q->bytes) continue;
        for (int k = 0; k < SS_COUNT; k++)
            if (mask & (1u << k))
                for (int j = 0; j < q->n_ev; j++)
                    if (q->ev[j] && x->d->wait(x->d->ctx, x->st[k], q->ev[j], err) != RT_OK)
                        return fail_dev(x, i, "waiting for a pinned range's earlier user", err);
    }
    uint32_t slot;
    if (slot_new(&x->hl_free, &x->n_hl_free, &x->n_hl, &x->cap_hl, (void **)&x->hl,
                 sizeof *x->hl, &slot) != MS_OK || u64map_put(x->hmap, a->tensor, slot))
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    x->hl[slot].off = off;
    x->hl[slot].bytes = end - off;
    x->hl[slot].req = a->bytes;
    x->hl[slot].users = 0;
    x->hl[slot].last_d2h = 0;
    x->host_used += a->bytes;
    if (x->host_used > x->r->host_peak_bytes) x->r->host_peak_bytes = x->host_used;
    if (x->o.host_init && x->o.trace && trace_find_tensor(x->o.trace, a->tensor)) {
        if (x->o.host_init(x->o.compute_ctx, x->st[a->stream], a->tensor, x->pool_dev + off,
                           a->bytes, err) != RT_OK) {
            char tn[48];
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: initializing the host "
                        "home of tensor %llu '%s': %s", i, (unsigned long long)a->tensor,
                        tname(x, a->tensor, tn, sizeof tn), err->msg);
        }
        x->r->host_inits++;
    }
    return RT_OK;
}

static rt_status do_host_free(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    uint64_t slot;
    if (!u64map_del(x->hmap, a->tensor, &slot))
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu holds no "
                    "host memory", i, (unsigned long long)a->tensor);
    hlive h = x->hl[slot];
    if (slot_del(&x->hl_free, &x->n_hl_free, &x->cap_hl_free, (uint32_t)slot) != MS_OK)
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    x->host_used -= h.req;
    unsigned users = h.users | (1u << a->stream);
    uint32_t p;
    RT_TRY(pend_new(x, &p, err));
    x->pd[p].host = 1;
    x->pd[p].off = h.off;
    x->pd[p].bytes = h.bytes;
    for (int k = 0; k < SS_COUNT; k++)
        if (users & (1u << k)) RT_TRY(pend_event(x, p, k, i, err));
    return RT_OK;
}

/* ---- copies of partially swapped tensors (real kernels) ---- */

/* ceil(frac * bytes), as lowering sizes a replay's transients and swapped bytes (planners/lower.c). */
static uint64_t frac_bytes(uint64_t bytes, double frac)
{
    if (frac >= 1.0) return bytes;
    double b = ceil(frac * (double)bytes);
    return b >= (double)bytes ? bytes : (uint64_t)b;
}


typedef struct cmember {
    uint64_t tensor, off, bytes;
} cmember;

static int cmp_cmember(const void *a, const void *b)
{
    const cmember *p = (const cmember *)a, *q = (const cmember *)b;
    return p->off < q->off ? -1 : p->off > q->off;
}

/* The trace tensors a copied block holds, in layout order: a rounding-buffer block's members
 * (lower_rb_find over the trace's skeletal activations of its layer), else the tensor itself
 * when the block's id is a trace id. Returns how many (at most max), 0 for none known. */
static size_t copy_members(ex *x, uint64_t block, cmember *m, size_t max)
{
    uint32_t pass;
    int32_t layer;
    size_t n = 0;
    if (!lower_id_is_rbuf(block, &pass, &layer)) {
        const trace_tensor *t = trace_find_tensor(x->o.trace, block);
        if (!t || max < 1) return 0;
        m[0].tensor = block;
        m[0].off = 0;
        m[0].bytes = t->bytes;
        return 1;
    }
    for (size_t r = 0; r < trace_count(x->o.trace); r++) {
        const trace_rec *rec = trace_get(x->o.trace, r);
        if (rec->type != TR_ALLOC || rec->u.alloc.layer != layer ||
            rec->u.alloc.cls != TC_ACT_SKEL)
            continue;
        lower_rb_place pl[4];
        size_t k = lower_rb_find(x->o.rb_map, rec->u.alloc.id, pl, 4);
        for (size_t j = 0; j < k && j < 4; j++) {
            if (pl[j].pass != pass || pl[j].layer != layer) continue;
            int dup = 0;
            for (size_t q = 0; q < n; q++) dup |= m[q].tensor == pl[j].tensor;
            if (dup) continue;
            if (n == max) return max + 1;
            m[n].tensor = pl[j].tensor;
            m[n].off = pl[j].offset_bytes;
            m[n].bytes = pl[j].bytes;
            n++;
        }
    }
    qsort(m, n, sizeof *m, cmp_cmember);
    return n;
}

/* One piece of a gathered copy; adjacent pieces are merged into one cudaMemcpyAsync. */
typedef struct cpiece {
    uint64_t dev, host, bytes;
} cpiece;

static rt_status piece_add(cpiece *p, size_t *n, size_t max, uint64_t dev, uint64_t host,
                           uint64_t bytes, ms_error *err)
{
    if (!bytes) return RT_OK;
    if (*n && p[*n - 1].dev + p[*n - 1].bytes == dev && p[*n - 1].host + p[*n - 1].bytes == host) {
        p[*n - 1].bytes += bytes;
        return RT_OK;
    }
    if (*n == max) return RT_ERR_INVALID;
    p[*n].dev = dev;
    p[*n].host = host;
    p[*n].bytes = bytes;
    (*n)++;
    return RT_OK;
}

/* With real kernels a copy of a block that holds partially swapped tensors moves, of each
 * tensor, the first ceil(alpha * T) rows of each of its row arrays (members swapped whole:
 * all their bytes), packed on the host in the block's layout order; the prefetch puts them
 * back where they were. The rows a token-wise replay does not recompute are then exactly the
 * ones that came back. The schedule's byte count must be the sum (lowering's copy bytes), and
 * each tensor's share a whole number of rows, else the run stops: computing on rows that are
 * neither copied nor recomputed would be silently wrong. *n = 0: a plain copy will do. */
#define RT_MAX_PIECES 256
static rt_status copy_plan(ex *x, size_t i, const sched_action *a, uint64_t dev,
                           uint64_t host, cpiece *p, size_t *n, ms_error *err)
{
    *n = 0;
    if (!x->o.compute || !x->o.plan || !x->o.token_rows || !x->o.trace) return RT_OK;
    cmember m[64];
    size_t nm = copy_members(x, a->tensor, m, 64);
    if (nm == 0) return RT_OK;
    if (nm > 64)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: block %llu holds more "
                    "than 64 tensors", i, (unsigned long long)a->tensor);
    int partial = 0;
    uint64_t sum = 0, hoff = 0;
    for (size_t k = 0; k < nm; k++) {
        double alpha = 1;
        plan_decision dec = plan_decision_for(x->o.plan, m[k].tensor, &alpha);
        uint64_t cb = dec == PD_SWAP ? frac_bytes(m[k].bytes, alpha) : m[k].bytes;
        if (dec == PD_SWAP && cb < m[k].bytes) partial = 1;
        sum += cb;
    }
    if (!partial) return RT_OK;
    if (sum != a->bytes)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: copy of block %llu: "
                    "%llu bytes, its tensors' swapped rows are %llu bytes", i,
                    (unsigned long long)a->tensor, (unsigned long long)a->bytes,
                    (unsigned long long)sum);
    for (size_t k = 0; k < nm; k++) {
        double alpha = 1;
        plan_decision dec = plan_decision_for(x->o.plan, m[k].tensor, &alpha);
        uint64_t cb = dec == PD_SWAP ? frac_bytes(m[k].bytes, alpha) : m[k].bytes;
        rt_status st = RT_OK;
        if (cb == m[k].bytes) {
            st = piece_add(p, n, RT_MAX_PIECES, dev + m[k].off, host + hoff, cb, err);
        } else {
            unsigned arrays = 0;
            uint64_t rowb = 0;
            char tn[48];
            if (!x->o.token_rows(x->o.compute_ctx, m[k].tensor, &arrays, &rowb) || !arrays ||
                !rowb || m[k].bytes % arrays || cb % arrays || (cb / arrays) % rowb)
                return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu "
                            "'%s' is swapped with alpha %g, which is not a whole number of its "
                            "token rows (or its bytes are not token rows)", i,
                            (unsigned long long)m[k].tensor, tname(x, m[k].tensor, tn, sizeof tn),
                            alpha);
            uint64_t arr = m[k].bytes / arrays, piece = cb / arrays;
            for (unsigned j = 0; j < arrays && st == RT_OK; j++)
                st = piece_add(p, n, RT_MAX_PIECES, dev + m[k].off + j * arr,
                               host + hoff + j * piece, piece, err);
        }
        if (st != RT_OK)
            return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: copy of block %llu "
                        "in more than %d pieces", i, (unsigned long long)a->tensor,
                        RT_MAX_PIECES);
        hoff += cb;
    }
    return RT_OK;
}

/* verify_swaps: the checksum of a copy's device pieces into its slot, each piece at its
 * position in the copied stream (its offset in the pinned range), so that an offload and the
 * prefetch of the same bytes give the same sum whatever the device addresses. */
static rt_status sum_pieces(ex *x, size_t i, size_t slot, void *s, const cpiece *pc,
                            size_t np, uint64_t host, ms_error *err)
{
    for (size_t k = 0; k < np; k++)
        if (x->d->sum_add(x->d->ctx, s, slot, pc[k].dev, pc[k].bytes, pc[k].host - host, err) !=
            RT_OK)
            return fail_dev(x, i, "checksumming a copy", err);
    x->cp[slot].summed = 1;
    x->r->swap_sums++;
    return RT_OK;
}

static rt_status do_copy(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    dlive *d = dev_live(x, a->tensor);
    if (!d)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: copy of tensor %llu, "
                    "which holds no device block", i, (unsigned long long)a->tensor);
    hlive *h = host_live(x, a->tensor);
    int d2h = a->kind == SA_COPY_D2H;
    if (!h && d2h) h = host_live(x, lower_id_host_copy(a->tensor)); /* as the pool plan */
    if (!h && !d2h)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: H2D copy of tensor "
                    "%llu, which has no host copy", i, (unsigned long long)a->tensor);
    uint64_t host = x->pool + (h ? h->off : x->hp.scratch_off);
    d->users |= 1u << a->stream;
    if (h) h->users |= 1u << a->stream;
    if (!a->bytes || !d->addr) return RT_OK;
    size_t ci = x->used_cp++;
    tev *t = &x->cp[ci];
    t->action = i;
    t->win = x->cur_win;
    t->bytes = a->bytes;
    t->d2h = d2h;
    t->tensor = a->tensor;
    void *s = x->st[a->stream];
    cpiece pc[RT_MAX_PIECES];
    size_t np = 0;
    RT_TRY(copy_plan(x, i, a, d->addr, host, pc, &np, err));
    if (!np) pc[np++] = (cpiece){ d->addr, host, a->bytes };
    /* verify_swaps: the device bytes an offload reads, summed on its stream just before */
    if (x->sums_on && d2h) RT_TRY(sum_pieces(x, i, ci, s, pc, np, host, err));
    if (x->d->record(x->d->ctx, t->e0, s, err) != RT_OK) return fail_dev(x, i, "recording", err);
    for (size_t k = 0; k < np; k++)
        if (x->d->copy(x->d->ctx, s, d2h ? pc[k].host : pc[k].dev, d2h ? pc[k].dev : pc[k].host,
                       pc[k].bytes, d2h, err) != RT_OK)
            return fail_dev(x, i, d2h ? "device-to-host copy" : "host-to-device copy", err);
    if (x->d->record(x->d->ctx, t->e1, s, err) != RT_OK) return fail_dev(x, i, "recording", err);
    /* ... and the bytes a prefetch wrote, just after (before the schedule's next record) */
    if (x->sums_on && !d2h) RT_TRY(sum_pieces(x, i, ci, s, pc, np, host, err));
    if (x->sums_on && h) {
        if (d2h) {
            h->last_d2h = ci + 1;
        } else if (h->last_d2h) {
            t->pair = h->last_d2h;
            x->cp[h->last_d2h - 1].read_back = 1;
        }
    }
    rt_window *w = &x->r->win[x->cur_win];
    w->n_copies++;
    if (d2h) w->d2h_bytes += a->bytes;
    else w->h2d_bytes += a->bytes;
    x->r->copies++;
    return RT_OK;
}

/* max_ahead: marks the end of this compute action and waits while more than max_ahead
 * compute actions are issued but not done. */
static rt_status hold_back(ex *x, size_t i, void *s, ms_error *err)
{
    size_t cap = (size_t)x->o.max_ahead + 1;
    void *e = pool_get(x, err);
    if (!e) return fail_dev(x, i, "creating an event", err);
    if (x->d->record(x->d->ctx, e, s, err) != RT_OK) return fail_dev(x, i, "recording", err);
    x->ahead[(x->ahead_head + x->ahead_n++) % cap] = e;
    while (x->ahead_n > (size_t)x->o.max_ahead) {
        void *old = x->ahead[x->ahead_head];
        RT_TRY(wait_ev(x, old, "a compute action (max_ahead)", err));
        x->ahead_head = (x->ahead_head + 1) % cap;
        x->ahead_n--;
        pool_put(x, old);
        x->r->ahead_waits++;
    }
    return RT_OK;
}

/* Kernel time after the credit: an op shorter than the shortest kernel runs that long, and
 * what it ran over is taken off the next ops. */
static double credited(ex *x, double req)
{
    if (!x->o.spin_credit) return req;
    double want = req - x->debt_us;
    double run = want > x->empty_us ? want : x->empty_us;
    x->debt_us += run - req;
    return run;
}

/* The device address of trace tensor id for the real-kernel hook: its own block, else the
 * block of its latest re-allocation (memory_plan gives those fresh ids), else its slice of a
 * rounding-buffer block (lower_rb_find; the forward block or the prefetched one, whichever is
 * live). In a token-wise replay (0 < frac < 1) a block smaller than the tensor but of the
 * replay's size holds only the replayed rows (*part = 1). With host set (outputs), a
 * gradient whose block is smaller than it and whose pinned home holds all of it is split by
 * module (lower_dha's grad_host knobs): the block, *part = 3, *host = the home's mapped
 * address. 0 when none holds it; *why says why. */
static uint64_t resolve(ex *x, uint64_t id, double frac, uint8_t *part, const char **why,
                        uint64_t *host)
{
    const trace_tensor *t = trace_find_tensor(x->o.trace, id);
    uint64_t need = t ? t->bytes : 0, sid;
    *part = 0;
    *why = "holds no device block (its own, a re-allocation's or a rounding buffer's)";
    const dlive *d = dev_live(x, id);
    if ((!d || !d->addr) && x->alias && u64map_get(x->alias, id, &sid)) d = dev_live(x, sid);
    if (d && d->addr) {
        if (d->bytes >= need) return d->addr;
        if (frac > 0 && frac < 1 && d->bytes >= frac_bytes(need, frac)) {
            *part = 1;
            return d->addr;
        }
        /* A gradient buffer split by module: its GPU modules here, the rest at home. */
        hlive *h = host && !(frac > 0 && frac < 1) ? host_live(x, id) : NULL;
        if (h && h->req >= need && t && t->cls == TC_GRAD) {
            *part = 3;
            *host = x->pool_dev + h->off;
            h->last_d2h = 0;
            return d->addr;
        }
        *why = frac > 0 && frac < 1 ? "has a block smaller than the replayed fraction of the "
               "tensor" : "has a block smaller than the tensor outside a token-wise replay";
        return 0;
    }
    /* DHA: no device block, but a pinned host home under its own id (lower_dha: a parameter
     * read over the link, a gradient written to the host): the kernel gets the mapped
     * address of that range. Not in token-wise replays (those operands are activations). */
    hlive *h = host_live(x, id);
    if (h && !(frac > 0 && frac < 1)) {
        if (h->req >= need) {
            *part = 2;
            h->last_d2h = 0; /* a kernel may write it: a later prefetch is not a swap back */
            return x->pool_dev + h->off;
        }
        *why = "has a pinned host range smaller than the tensor";
        return 0;
    }
    lower_rb_place pl[4];
    size_t n = lower_rb_find(x->o.rb_map, id, pl, 4);
    for (size_t k = 0; k < n && k < 4; k++)
        for (unsigned b = 0; b < 2; b++) {
            d = dev_live(x, lower_id_rbuf(pl[k].pass, pl[k].layer, b));
            if (!d || !d->addr) continue;
            if (pl[k].offset_bytes + pl[k].bytes <= d->bytes) return d->addr + pl[k].offset_bytes;
            *why = "lies beyond its rounding-buffer block";
        }
    return 0;
}

/* The operands' device addresses; host (NULL for inputs) gets the host homes of split
 * gradient buffers (0 for the others). */
static rt_status op_addrs(ex *x, size_t i, const trace_op *op, const uint64_t *ids, uint32_t n,
                          double frac, uint64_t *addr, uint8_t *part, uint64_t *host, ms_error *err)
{
    for (uint32_t j = 0; j < n; j++) {
        const char *why = "";
        if (host) host[j] = 0;
        if ((addr[j] = resolve(x, ids[j], frac, &part[j], &why, host ? &host[j] : NULL)) == 0) {
            char tn[48];
            return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: op %s: tensor %llu "
                        "'%s' %s", i, op->name, (unsigned long long)ids[j],
                        tname(x, ids[j], tn, sizeof tn), why);
        }
        if (part[j] == 2 || part[j] == 3) { /* (partly) in pinned host memory */
            part[j] = 0;
            x->r->host_operands++;
        }
    }
    return RT_OK;
}

/* A compute action run by the real-kernel hook: no spin credit, no calibration. */
static rt_status do_compute_real(ex *x, size_t i, const sched_action *a, const trace_op *op,
                                 ms_error *err)
{
    enum { MAXT = 64 };
    uint64_t in[MAXT], out[MAXT], out_host[MAXT];
    if (op->n_in > MAXT || op->n_out > MAXT)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "op %s: too many tensors for real kernels",
                    op->name);
    uint8_t in_part[MAXT], out_part[MAXT];
    double frac = a->replay_frac > 0 && a->replay_frac < 1 ? a->replay_frac : 0;
    if (frac > 0 && !x->o.compute_rows)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: op %s is a token-wise "
                    "partial replay (fraction %g of its rows) and the real-kernel hook has no "
                    "row-range entry", i, op->name, frac);
    RT_TRY(op_addrs(x, i, op, op->in, op->n_in, frac, in, in_part, NULL, err));
    RT_TRY(op_addrs(x, i, op, op->out, op->n_out, frac, out, out_part, out_host, err));
    int split = 0;
    for (uint32_t j = 0; j < op->n_out; j++) split |= out_host[j] != 0;
    if (split && !x->o.compute_split)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: op %s writes a gradient "
                    "buffer split between the GPU and the host (grad_host knobs) and the "
                    "real-kernel hook has no entry for it", i, op->name);
    void *s = x->st[a->stream];
    double req = a->dur_us > 0 ? a->dur_us : 0;
    tev *t = NULL;
    if (x->o.per_op) {
        t = &x->op[x->used_op++];
        t->action = i;
        t->win = x->cur_win;
        t->req_us = req;
        if (x->d->record(x->d->ctx, t->e0, s, err) != RT_OK) return fail_dev(x, i, "recording",
                                                                             err);
    }
    rt_status cs = frac > 0 ? x->o.compute_rows(x->o.compute_ctx, s, op, in, out, in_part,
                                                out_part, frac, err)
                   : split  ? x->o.compute_split(x->o.compute_ctx, s, op, in, out, out_host, err)
                            : x->o.compute(x->o.compute_ctx, s, op, in, out, err);
    if (cs != RT_OK)
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: op %s: %s", i, op->name,
                    err->msg);
    if (t && x->d->record(x->d->ctx, t->e1, s, err) != RT_OK) return fail_dev(x, i, "recording",
                                                                              err);
    if (x->o.max_ahead > 0) RT_TRY(hold_back(x, i, s, err));
    rt_window *w = &x->r->win[x->cur_win];
    w->nominal_s += req * 1e-6;
    if (a->recompute) w->recompute_nominal_s += req * 1e-6;
    w->n_compute++;
    x->r->kernels++;
    return RT_OK;
}

static rt_status do_compute(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    if (x->o.compute && x->o.trace && a->op >= 0) {
        const trace_op *rop = trace_find_op(x->o.trace, (uint64_t)a->op);
        if (rop) return do_compute_real(x, i, a, rop, err);
    }
    rt_kernel_args k;
    memset(&k, 0, sizeof k);
    double req = a->dur_us > 0 ? a->dur_us : 0;
    /* With the real-kernel hook an action without an op that moves host bytes is an
     * AccumulateGrad of host gradients (lower_dha's put_accumulate): the op's real kernel
     * already added its gradient into the mapped home (beta = 1), so the host traffic is
     * done; only the action's own time remains. Without the hook the spin kernel moves it. */
    int dha = (a->host_read_bytes || a->host_write_bytes) && !(x->o.compute && a->op < 0);
    k.dur_us = dha ? req : credited(x, req);
    if (dha) {
        k.dha_read_host = x->dha_buf;
        k.dha_read_bytes = a->host_read_bytes < x->dha_bytes ? a->host_read_bytes : x->dha_bytes;
        k.dha_write_host = x->dha_buf;
        k.dha_write_bytes =
            a->host_write_bytes < x->dha_bytes ? a->host_write_bytes : x->dha_bytes;
    }
    const trace_op *op = (x->o.trace && a->op >= 0) ? trace_find_op(x->o.trace, (uint64_t)a->op)
                                                    : NULL;
    for (uint32_t j = 0; op && j < op->n_out && k.n_touch < RT_TOUCH_MAX; j++) {
        dlive *d = dev_live(x, op->out[j]);
        if (!d || !d->addr || !d->bytes) continue;
        k.touch_addr[k.n_touch] = d->addr;
        k.touch_bytes[k.n_touch++] = d->bytes;
    }
    void *s = x->st[a->stream];
    tev *t = NULL;
    if (x->o.per_op) {
        t = &x->op[x->used_op++];
        t->action = i;
        t->win = x->cur_win;
        t->req_us = req;
        if (x->d->record(x->d->ctx, t->e0, s, err) != RT_OK) return fail_dev(x, i, "recording",
                                                                             err);
    }
    if (x->d->kernel(x->d->ctx, s, &k, err) != RT_OK) return fail_dev(x, i, "launching a kernel",
                                                                      err);
    if (t && x->d->record(x->d->ctx, t->e1, s, err) != RT_OK) return fail_dev(x, i, "recording",
                                                                              err);
    if (x->o.max_ahead > 0) RT_TRY(hold_back(x, i, s, err));
    rt_window *w = &x->r->win[x->cur_win];
    w->nominal_s += req * 1e-6;
    if (a->recompute) w->recompute_nominal_s += req * 1e-6;
    w->n_compute++;
    x->r->kernels++;
    return RT_OK;
}

/* ---- host compute with real math ---- */

#define RT_STEP_MAX 64

/* One host step handed to the device's host thread: the hook, its op and the host ranges
 * found at issue time. Kept by the executor until every stream is drained. */
typedef struct hstep {
    ex *x;
    const trace_op *op;
    int64_t tag;
    size_t win;          /* the window it was issued in: its wall time is added there */
    size_t n;
    uint64_t addr[RT_STEP_MAX], bytes[RT_STEP_MAX];
} hstep;

/* Runs on the host thread: a failure is kept for the issuing thread (first one wins). */
static void host_step_run(void *arg)
{
    hstep *h = (hstep *)arg;
    ex *x = h->x;
    if (__atomic_load_n(&x->step_fail, __ATOMIC_ACQUIRE)) return;
    double t0 = mono_s();
    ms_error herr; /* this thread's own: the issuing thread runs on meanwhile */
    ms_error_clear(&herr);
    rt_status st = x->o.host_compute(x->o.compute_ctx, h->op, h->tag, h->addr, h->bytes, h->n,
                                     &herr);
    /* one host thread runs every step, and the issuing thread reads the sums only after
     * every stream has drained */
    x->r->win[h->win].host_measured_s += mono_s() - t0;
    if (st == RT_OK) return;
    int no = 0;
    if (__atomic_compare_exchange_n(&x->step_fail, &no, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        snprintf(x->step_msg, sizeof x->step_msg, "host step %s: %s", h->op->name,
                 herr.msg);
}

static rt_status do_host_step(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    const trace_op *op = trace_find_op(x->o.trace, (uint64_t)a->op);
    if (!op)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host compute of op "
                    "%lld, which the trace lacks", i, (long long)a->op);
    if (!x->d->host_call)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host step %s: the "
                    "device %s cannot run host calls", i, op->name, x->d->name);
    uint64_t ids[RT_STEP_MAX];
    int64_t tag = 0;
    int n = x->o.host_prepare(x->o.compute_ctx, op, ids, RT_STEP_MAX, &tag, err);
    if (n < 0)
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host step %s: %s", i,
                    op->name, err->msg);
    hstep *h = (hstep *)calloc(1, sizeof *h);
    if (!h || ms_grow((void **)&x->steps, &x->cap_steps, x->n_steps + 1, sizeof *x->steps) !=
                  MS_OK) {
        free(h);
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    }
    x->steps[x->n_steps++] = h;
    h->x = x;
    h->op = op;
    h->tag = tag;
    h->win = x->cur_win;
    h->n = (size_t)n;
    for (int k = 0; k < n; k++) {
        hlive *l = host_live(x, ids[k]);
        if (!l) {
            char tn[48];
            return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host step %s: "
                        "tensor %llu '%s' has no pinned host range", i, op->name,
                        (unsigned long long)ids[k], tname(x, ids[k], tn, sizeof tn));
        }
        h->addr[k] = x->pool + l->off;
        h->bytes[k] = l->req;
        l->last_d2h = 0; /* the host step rewrites it (parameters, gradients) */
    }
    if (x->d->host_call(x->d->ctx, x->st[a->stream], host_step_run, h, err) != RT_OK)
        return fail_dev(x, i, "host step", err);
    x->r->host_steps++;
    return RT_OK;
}

static rt_status issue(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    void *s = x->st[a->stream];
    switch (a->kind) {
    case SA_COMPUTE:
        return do_compute(x, i, a, err);
    case SA_ALLOC:
        return do_alloc(x, i, a, err);
    case SA_FREE:
        return do_free(x, i, a, err);
    case SA_COPY_D2H:
    case SA_COPY_H2D:
        return do_copy(x, i, a, err);
    case SA_HOST_ALLOC:
        return do_host_alloc(x, i, a, err);
    case SA_HOST_FREE:
        return do_host_free(x, i, a, err);
    case SA_HOST_COMPUTE:
        x->r->win[x->cur_win].host_nominal_s += (a->dur_us > 0 ? a->dur_us : 0) * 1e-6;
        if (x->o.host_compute && x->o.host_prepare && x->o.trace && a->op >= 0)
            return do_host_step(x, i, a, err);
        if (x->d->host_work(x->d->ctx, s, a->dur_us > 0 ? a->dur_us : 0, err) != RT_OK)
            return fail_dev(x, i, "host work", err);
        return RT_OK;
    case SA_RECORD:
        if (x->d->record(x->d->ctx, x->sev[a->event], s, err) != RT_OK)
            return fail_dev(x, i, "recording an event", err);
        return RT_OK;
    case SA_WAIT:
        if (x->d->wait(x->d->ctx, s, x->sev[a->event], err) != RT_OK)
            return fail_dev(x, i, "waiting on an event", err);
        return RT_OK;
    case SA_MARK:
        if (a->mark == TM_ITER && a->stream == SS_COMPUTE && x->o.set_iter)
            x->o.set_iter(x->o.compute_ctx, (int)a->mark_value);
        if (a->mark == TM_ITER && a->stream == SS_COMPUTE && x->cur_win + 1 < x->n_win) {
            x->cur_win++;
            x->retries_at_mark = alloc_get_stats(x->alloc)->num_alloc_retries;
            if (x->d->record(x->d->ctx, x->wev[x->cur_win], s, err) != RT_OK)
                return fail_dev(x, i, "recording an iteration mark", err);
        }
        return RT_OK;
    default:
        return fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: unknown kind %d", i,
                    (int)a->kind);
    }
}

/* ---- setup ---- */

typedef struct counts {
    size_t compute, copies, marks;
    uint64_t dha_bytes;
    double work_us;     /* compute + host durations, for the watchdog */
    uint64_t copy_bytes;
} counts;

static void count_actions(const schedule_t *s, counts *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_COMPUTE) {
            c->compute++;
            if (a->host_read_bytes > c->dha_bytes) c->dha_bytes = a->host_read_bytes;
            if (a->host_write_bytes > c->dha_bytes) c->dha_bytes = a->host_write_bytes;
        }
        if (a->kind == SA_COMPUTE || a->kind == SA_HOST_COMPUTE)
            c->work_us += a->dur_us > 0 ? a->dur_us : 0;
        if (a->kind == SA_COPY_D2H || a->kind == SA_COPY_H2D) {
            c->copies++;
            c->copy_bytes += a->bytes;
        }
        if (a->kind == SA_MARK && a->mark == TM_ITER && a->stream == SS_COMPUTE) c->marks++;
    }
}

static rt_status make_events(ex *x, void **v, size_t n, int timing, ms_error *err)
{
    for (size_t k = 0; k < n; k++)
        if (x->d->event_new(x->d->ctx, timing, &v[k], err) != RT_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "creating events: %s", err->msg);
    return RT_OK;
}

static rt_status setup(ex *x, const counts *c, ms_error *err)
{
    rt_exec_result *r = x->r;
    x->n_win = c->marks + 1;
    r->win = (rt_window *)calloc(x->n_win, sizeof *r->win);
    r->n_win = x->n_win;
    x->n_sev = sched_event_count(x->s);
    x->sev = (void **)calloc(x->n_sev ? x->n_sev : 1, sizeof(void *));
    x->wev = (void **)calloc(x->n_win, sizeof(void *));
    x->n_cp = c->copies;
    x->cp = (tev *)calloc(x->n_cp ? x->n_cp : 1, sizeof *x->cp);
    x->n_op = x->o.per_op ? c->compute : 0;
    x->op = (tev *)calloc(x->n_op ? x->n_op : 1, sizeof *x->op);
    x->dmap = u64map_new(1024);
    x->hmap = u64map_new(256);
    x->mix = bm_new(x->o.trace);
    if (x->o.compute && !(x->alias = u64map_new(256)))
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    if (x->o.max_ahead < 0) x->o.max_ahead = 0;
    x->ahead = (void **)calloc((size_t)x->o.max_ahead + 1, sizeof(void *));
    if (!x->ahead || !r->win || !x->sev || !x->wev || !x->cp || !x->op || !x->dmap || !x->hmap ||
        !x->mix)
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    if (x->d->calibrate && x->d->calibrate(x->d->ctx, &r->calib, err) != RT_OK)
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "calibrating the spin kernel: %s",
                    err->msg);
    x->empty_us = r->calib.valid ? r->calib.empty_us : 0;
    for (int k = 0; k < SS_COUNT; k++)
        if (x->d->stream_new(x->d->ctx, &x->st[k], err) != RT_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "creating streams: %s", err->msg);
    if (x->o.verify_swaps) {
        if (!x->d->sum_begin || !x->d->sum_add || !x->d->sum_read || !x->d->sum_end)
            return fail(x, RTX_ERROR, RT_ERR_INVALID, "verify_swaps: the device %s cannot "
                        "checksum copies", x->d->name);
        if (x->d->sum_begin(x->d->ctx, x->n_cp, err) != RT_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "verify_swaps: %s", err->msg);
        x->sums_on = 1;
    }
    RT_TRY(make_events(x, x->sev, x->n_sev, 0, err));
    RT_TRY(make_events(x, x->wev, x->n_win, 1, err));
    RT_TRY(make_events(x, &x->ev_end, 1, 1, err));
    for (size_t k = 0; k < x->n_cp; k++) {
        RT_TRY(make_events(x, &x->cp[k].e0, 1, 1, err));
        RT_TRY(make_events(x, &x->cp[k].e1, 1, 1, err));
    }
    for (size_t k = 0; k < x->n_op; k++) {
        RT_TRY(make_events(x, &x->op[k].e0, 1, 1, err));
        RT_TRY(make_events(x, &x->op[k].e1, 1, 1, err));
    }
    /* the pinned pool (one allocation, sized by the plan) and the DHA buffer */
    r->host_pool_bytes = x->hp.pool_bytes;
    if (x->o.host_limit_bytes && x->hp.pool_bytes > x->o.host_limit_bytes) {
        char b0[32], b1[32];
        return fail(x, RTX_OOHM, RT_OK, "out of host memory: the schedule needs a pinned pool "
                    "of %s, above the host limit of %s",
                    ms_fmt_bytes(x->hp.pool_bytes, b0, sizeof b0),
                    ms_fmt_bytes(x->o.host_limit_bytes, b1, sizeof b1));
    }
    ms_status st = MS_OK;
    if (x->hp.pool_bytes) st = x->be->ops->host_alloc(x->be->ctx, x->hp.pool_bytes, &x->pool);
    x->pool_dev = x->pool;
    if (st == MS_OK && x->pool && x->d->host_map &&
        x->d->host_map(x->d->ctx, x->pool, &x->pool_dev, err) != RT_OK)
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "mapping the pinned pool: %s", err->msg);
    if (st == MS_OK && c->dha_bytes) {
        x->dha_bytes = c->dha_bytes;
        st = x->be->ops->host_alloc(x->be->ctx, x->dha_bytes, &x->dha_buf);
    }
    if (st != MS_OK) {
        char b0[32];
        return fail(x, st == MS_ERR_OOHM ? RTX_OOHM : RTX_ERROR, st == MS_ERR_OOHM ? RT_OK
                    : RT_ERR_CUDA, "cannot allocate %s of pinned host memory: %s",
                    ms_fmt_bytes(x->hp.pool_bytes + x->dha_bytes, b0, sizeof b0),
                    be_why(x));
    }
    ms_error le; /* the library's */
    ms_error_clear(&le);
    st = alloc_new(x->o.allocator ? x->o.allocator : "caching", x->o.alloc_cfg, x->be,
                   &x->alloc, &le);
    if (st != MS_OK) return fail(x, RTX_ERROR, RT_ERR_INVALID, "%s", le.msg);
    return RT_OK;
}

/* ---- the end: measurements and clean-up ---- */

static void link_stat(rt_link_stat *l, double *bps, size_t n)
{
    l->agg_Bps = l->busy_s > 0 ? (double)l->bytes / l->busy_s : 0;
    if (!n) return;
    l->min_Bps = l->max_Bps = bps[0];
    for (size_t k = 1; k < n; k++) {
        if (bps[k] < l->min_Bps) l->min_Bps = bps[k];
        if (bps[k] > l->max_Bps) l->max_Bps = bps[k];
    }
    l->median_Bps = median_of(bps, n);
}

static rt_status elapsed_s(ex *x, void *e0, void *e1, double *s, ms_error *err)
{
    float ms = 0;
    if (x->d->elapsed_ms(x->d->ctx, e0, e1, &ms, err) != RT_OK)
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "reading event times: %s", err->msg);
    *s = ms * 1e-3;
    return RT_OK;
}

static rt_status measure(ex *x, ms_error *err)
{
    rt_exec_result *r = x->r;
    for (size_t w = 0; w < x->n_win; w++)
        RT_TRY(elapsed_s(x, x->wev[w], w + 1 < x->n_win ? x->wev[w + 1] : x->ev_end,
                         &r->win[w].time_s, err));
    double *bps[2];
    size_t nb[2] = {0, 0};
    bps[0] = (double *)calloc(x->used_cp + 1, sizeof(double));
    bps[1] = (double *)calloc(x->used_cp + 1, sizeof(double));
    if (!bps[0] || !bps[1]) {
        free(bps[0]);
        free(bps[1]);
        return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    }
    rt_status st = RT_OK;
    for (size_t k = 0; st == RT_OK && k < x->used_cp; k++) {
        const tev *t = &x->cp[k];
        double s = 0;
        if ((st = elapsed_s(x, t->e0, t->e1, &s, err)) != RT_OK) break;
        rt_window *w = &r->win[t->win];
        if (t->d2h) w->d2h_busy_s += s;
        else w->h2d_busy_s += s;
        if (t->bytes < x->o.large_copy_bytes || s <= 0) continue;
        rt_link_stat *l = t->d2h ? &r->d2h_large : &r->h2d_large;
        l->n++;
        l->bytes += t->bytes;
        l->busy_s += s;
        bps[t->d2h][nb[t->d2h]++] = (double)t->bytes / s;
    }
    link_stat(&r->h2d_large, bps[0], nb[0]);
    link_stat(&r->d2h_large, bps[1], nb[1]);
    free(bps[0]);
    free(bps[1]);
    RT_TRY(st);
    if (x->used_op) {
        r->ops = (rt_op_time *)calloc(x->used_op, sizeof *r->ops);
        if (!r->ops) return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
        r->n_ops = x->used_op;
    }
    for (size_t k = 0; k < x->used_op; k++) {
        const tev *t = &x->op[k];
        double s = 0;
        RT_TRY(elapsed_s(x, t->e0, t->e1, &s, err));
        const sched_action *a = sched_get(x->s, t->action);
        r->ops[k].action = t->action;
        r->ops[k].op = a->op;
        r->ops[k].req_us = t->req_us;
        r->ops[k].meas_us = s * 1e6;
        r->ops[k].recompute = a->recompute;
        r->win[t->win].compute_measured_s += s;
    }
    const rt_window *l = &r->win[x->n_win - 1];
    r->iter_time_s = l->time_s;
    r->nominal_s = l->nominal_s;
    r->compute_busy_s = x->o.per_op ? l->compute_measured_s : l->nominal_s;
    r->recompute_s = l->recompute_nominal_s;
    r->host_busy_s = l->host_nominal_s;
    r->h2d_busy_s = l->h2d_busy_s;
    r->d2h_busy_s = l->d2h_busy_s;
    return RT_OK;
}

/* verify_swaps, once every stream is done: each prefetch's sum against its offload's. The
 * first difference is the error; all are counted. */
static rt_status verify_sums(ex *x, ms_error *err)
{
    rt_exec_result *r = x->r;
    if (!x->used_cp) return RT_OK;
    uint64_t *v = (uint64_t *)calloc(x->used_cp, sizeof *v);
    if (!v) return fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    if (x->d->sum_read(x->d->ctx, v, x->used_cp, err) != RT_OK) {
        free(v);
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "verify_swaps: reading the sums: %s",
                    err->msg);
    }
    char msg[sizeof r->failure] = "";
    for (size_t k = 0; k < x->used_cp; k++) {
        const tev *t = &x->cp[k];
        if (!t->summed) continue;
        if (t->d2h) {
            if (!t->read_back) r->swap_unpaired++;
            continue;
        }
        if (!t->pair) {
            r->swap_unpaired++;
            continue;
        }
        const tev *o = &x->cp[t->pair - 1];
        if (v[k] == v[t->pair - 1] && t->bytes == o->bytes) {
            r->swap_verified++;
            continue;
        }
        if (!r->swap_mismatches++) {
            char n0[48], n1[48];
            snprintf(msg, sizeof msg, "swapped bytes came back different: tensor %llu '%s' "
                     "offloaded by schedule action %zu (%llu bytes, checksum 0x%016llx), "
                     "prefetched as tensor %llu '%s' by action %zu (%llu bytes, checksum "
                     "0x%016llx)", (unsigned long long)o->tensor,
                     tname(x, o->tensor, n0, sizeof n0), o->action,
                     (unsigned long long)o->bytes, (unsigned long long)v[t->pair - 1],
                     (unsigned long long)t->tensor, tname(x, t->tensor, n1, sizeof n1),
                     t->action, (unsigned long long)t->bytes, (unsigned long long)v[k]);
        }
    }
    free(v);
    if (r->swap_mismatches)
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "%s; %llu of %llu prefetches differ", msg,
                    (unsigned long long)r->swap_mismatches,
                    (unsigned long long)(r->swap_mismatches + r->swap_verified));
    return RT_OK;
}

/* Waits until every stream has done all that was issued to it. */
static rt_status drain_streams(ex *x, ms_error *err)
{
    for (int k = 0; k < SS_COUNT; k++) {
        if (!x->st[k]) continue;
        void *e = pool_get(x, err);
        if (!e || x->d->record(x->d->ctx, e, x->st[k], err) != RT_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "synchronizing streams: %s",
                        err->msg);
        RT_TRY(wait_ev(x, e, "the end of a stream's work", err));
        pool_put(x, e);
    }
    return RT_OK;
}

/* The normal end: the compute stream waits for the others, then the end event. */
static rt_status finish(ex *x, ms_error *err)
{
    void *j[SS_COUNT];
    for (int k = 0; k < SS_COUNT; k++) {
        if (k == SS_COMPUTE) continue;
        j[k] = pool_get(x, err);
        if (!j[k] || x->d->record(x->d->ctx, j[k], x->st[k], err) != RT_OK ||
            x->d->wait(x->d->ctx, x->st[SS_COMPUTE], j[k], err) != RT_OK)
            return fail(x, RTX_ERROR, RT_ERR_CUDA, "joining the streams: %s", err->msg);
    }
    if (x->d->record(x->d->ctx, x->ev_end, x->st[SS_COMPUTE], err) != RT_OK)
        return fail(x, RTX_ERROR, RT_ERR_CUDA, "recording the end: %s", err->msg);
    x->r->issue_s = mono_s() - x->t0;
    RT_TRY(wait_ev(x, x->ev_end, "the end of the schedule", err));
    x->r->wall_s = mono_s() - x->t0;
    for (int k = 0; k < SS_COUNT; k++)
        if (k != SS_COMPUTE) pool_put(x, j[k]);
    return RT_OK;
}

static void free_events(ex *x, void **v, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        if (v[k]) x->d->event_free(x->d->ctx, v[k]);
}

/* Releases everything. After a watchdog timeout the device memory and pinned buffers are left
 * alone (freeing them could wait forever for the hung work); the process exit reclaims them. */
static void teardown(ex *x)
{
    if (!x->hung) {
        if (x->alloc) {
            size_t it = 0;
            uint64_t key, slot;
            while (u64map_next(x->dmap, &it, &key, &slot))
                alloc_release(x->alloc, x->dl[slot].addr);
            for (size_t p = 0; p < x->n_pd; p++)
                if (x->pd[p].active && !x->pd[p].host && !x->pd[p].released)
                    alloc_release(x->alloc, x->pd[p].addr);
            alloc_empty_cache(x->alloc);
            alloc_free(x->alloc);
        }
        if (x->pool) x->be->ops->host_free(x->be->ctx, x->pool);
        if (x->sums_on) x->d->sum_end(x->d->ctx);
        if (x->dha_buf) x->be->ops->host_free(x->be->ctx, x->dha_buf);
        for (size_t k = 0; k < x->n_steps; k++) free(x->steps[k]);
    } else {
        x->r->leaked = 1; /* the host thread may still hold the steps */
    }
    free(x->steps);
    free_events(x, x->sev, x->n_sev);
    free_events(x, x->wev, x->n_win);
    free_events(x, &x->ev_end, 1);
    for (size_t k = 0; x->cp && k < x->n_cp; k++) free_events(x, &x->cp[k].e0, 2);
    for (size_t k = 0; x->op && k < x->n_op; k++) free_events(x, &x->op[k].e0, 2);
    free_events(x, x->pool_ev, x->n_pool_ev);
    for (int k = 0; k < SS_COUNT; k++) {
        if (x->st[k]) x->d->stream_free(x->d->ctx, x->st[k]);
        free(x->q[k].v);
    }
    free(x->sev);
    free(x->ahead);
    free(x->wev);
    free(x->cp);
    free(x->op);
    free(x->pool_ev);
    free(x->free_ev);
    u64map_free(x->dmap);
    bm_free(x->mix);
    u64map_free(x->hmap);
    u64map_free(x->alias);
    free(x->dl);
    free(x->dl_free);
    free(x->hl);
    free(x->hl_free);
    free(x->pd);
    free(x->pd_free);
    rt_host_plan_release(&x->hp);
}

static rt_status exec_run(const schedule_t *s, const rt_exec_opts *o, const rt_dev_ops *dev,
                          const mb_backend *be, rt_exec_result *r, ms_error *err)
{
    memset(r, 0, sizeof *r);
    r->outcome = RTX_ERROR;
    if (!s || !dev || !be) {
        snprintf(r->failure, sizeof r->failure, "rt_exec_run: no schedule, device or backend");
        return RT_ERR_INVALID;
    }
    ms_error le; /* the library's */
    ms_error_clear(&le);
    if (sched_validate(s, &le) != MS_OK) {
        snprintf(r->failure, sizeof r->failure, "%s", le.msg);
        return RT_ERR_INVALID;
    }
    ex x;
    memset(&x, 0, sizeof x);
    x.s = s;
    x.d = dev;
    x.be = be;
    x.r = r;
    if (o) x.o = *o;
    else rt_exec_opts_default(&x.o);
    if (!x.o.large_copy_bytes) x.o.large_copy_bytes = 32ULL << 20;
    r->outcome = RTX_OK;
    if (rt_host_plan_make(s, 4096, &x.hp, &le) != MS_OK) {
        r->outcome = RTX_ERROR;
        snprintf(r->failure, sizeof r->failure, "%s", le.msg);
        return RT_ERR_INVALID;
    }
    counts c;
    count_actions(s, &c);
    /* generous: the work at a tenth of its speed, copies at 10 GB/s, plus half a minute */
    if (!(x.o.watchdog_s > 0))
        x.o.watchdog_s = 30.0 + 4.0 * (c.work_us * 1e-6 + (double)c.copy_bytes / 10e9);
    rt_status st = setup(&x, &c, err);
    size_t n = sched_count(s);
    if (st == RT_OK && !x.stop) {
        x.t0 = mono_s();
        x.deadline = x.t0 + x.o.watchdog_s;
        if (x.d->record(x.d->ctx, x.wev[0], x.st[SS_COMPUTE], err) != RT_OK)
            st = fail(&x, RTX_ERROR, RT_ERR_CUDA, "recording the start: %s", err->msg);
        for (size_t i = 0; st == RT_OK && !x.stop && i < n; i++) st = issue(&x, i, sched_get(s, i),
                                                                            err);
        if (st == RT_OK && !x.stop) st = finish(&x, err);
        if (st == RT_OK && !x.stop) st = poll_pending(&x, 1, err);
        if (st == RT_OK && !x.stop && __atomic_load_n(&x.step_fail, __ATOMIC_ACQUIRE))
            st = fail(&x, RTX_ERROR, RT_ERR_HOST, "%s", x.step_msg);
        if (st == RT_OK && !x.stop && x.sums_on) st = verify_sums(&x, err);
        if (st == RT_OK && !x.stop) st = measure(&x, err);
    }
    if (x.stop && !x.hung && x.t0 > 0) {
        /* stopped early (OOM, an error): let every stream finish what was issued first */
        char first[sizeof r->failure];
        rt_outcome oc = r->outcome;
        memcpy(first, r->failure, sizeof first);
        x.stop = 0;
        rt_status s2 = drain_streams(&x, err);
        if (s2 == RT_OK) s2 = poll_pending(&x, 1, err);
        if (s2 != RT_OK) {
            char now[sizeof r->failure];
            memcpy(now, r->failure, sizeof now);
            snprintf(r->failure, sizeof r->failure, "%.500s (while stopping after: %.480s)", now,
                     first);
            st = s2;
        } else {
            memcpy(r->failure, first, sizeof first);
            r->outcome = oc;
        }
        x.stop = 1;
    }
    if (x.mix) bm_peak(x.mix, r->peak_live_bytes, &r->peak_live_at_failure);
    if (x.alloc) {
        r->astats = *alloc_get_stats(x.alloc);
        r->alloc_retries_per_iter = r->astats.num_alloc_retries - x.retries_at_mark;
    }
    if (!r->host_peak_bytes) r->host_peak_bytes = x.hp.peak_bytes;
    teardown(&x);
    if (r->outcome != RTX_OK) {
        r->iter_time_s = 0;
        if (st == RT_OK && r->outcome == RTX_ERROR) st = RT_ERR_CUDA;
    }
    return st;
}

rt_status rt_exec_run(const schedule_t *s, const rt_exec_opts *o, const rt_dev_ops *dev,
                      const mb_backend *be, rt_exec_result *r, ms_error *err)
{
    ms_error dev_err; /* what a device call filled; the report names it in r->failure */
    ms_error_clear(&dev_err);
    rt_status st = exec_run(s, o, dev, be, r, &dev_err);
    if (st != RT_OK) ms_fail(err, MS_ERR_INVALID, "%s", r->failure);
    return st;
}

/* ======================= the CUDA device ======================= */

typedef struct touch_set {
    unsigned long long p[RT_TOUCH_MAX], n[RT_TOUCH_MAX];
    int k;
} touch_set;

__device__ unsigned g_rt_sink;

static __device__ __forceinline__ unsigned long long gtimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Thread 0 of every block spins on the global timer (nanoseconds) for spin_ns; max_clk
 * cycles bound the spin should the timer not advance. Block 0's next threads read-modify-
 * write the first and last 16 bytes of each touched range. With src / dst, all threads first
 * stream over mapped pinned host memory (DHA). */
__global__ void rt_work_kernel(unsigned long long spin_ns, unsigned long long max_clk,
                               touch_set t, const uint4 *src, unsigned long long nr, uint4 *dst,
                               unsigned long long nw)
{
    unsigned long long t0 = gtimer();
    long long c0 = clock64();
    if (blockIdx.x == 0 && threadIdx.x >= 1 && (int)threadIdx.x <= 2 * t.k) {
        int i = ((int)threadIdx.x - 1) / 2, last = ((int)threadIdx.x - 1) & 1;
        unsigned long long n = t.n[i];
        if (n >= 16) {
            uint4 *q = (uint4 *)(t.p[i] + (last ? ((n - 16) & ~15ULL) : 0));
            uint4 v = *q;
            v.x += 1;
            *q = v;
        } else if (n && !last) {
            unsigned char *q = (unsigned char *)t.p[i];
            *q = (unsigned char)(*q + 1);
        }
    }
    if (nr || nw) {
        unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
        unsigned long long i0 = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
        unsigned acc = 0;
        for (unsigned long long i = i0; i < nr; i += stride) {
            uint4 v = src[i];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        for (unsigned long long i = i0; i < nw; i += stride)
            dst[i] = make_uint4((unsigned)i, acc, 0u, 0u);
        if (acc == 0x9e3779b9u) g_rt_sink = acc; /* keeps the reads */
    }
    if (threadIdx.x == 0)
        while (gtimer() - t0 < spin_ns && (unsigned long long)(clock64() - c0) < max_clk) {
        }
}

/* rt_checksum of n bytes at p, stream position pos onwards, added to *slot: 8-byte words
 * when p and pos are both 8-aligned (the usual case: blocks are 512-aligned and copy pieces
 * whole rows), bytes otherwise and for the tail. Integer sums, so the atomicAdd of each
 * block's partial sum is deterministic. */
__global__ void rt_sum_kernel(unsigned long long *slot, const unsigned char *p,
                              unsigned long long n, unsigned long long pos)
{
    unsigned long long acc = 0, head = 0;
    unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    if (!(((uintptr_t)p | pos) & 7)) {
        const unsigned long long *w = (const unsigned long long *)p;
        unsigned long long nw = n >> 3, w0 = pos >> 3;
        for (unsigned long long i = tid; i < nw; i += stride) acc += w[i] * (2 * (w0 + i) + 1);
        head = nw << 3;
    }
    for (unsigned long long j = head + tid; j < n; j += stride) {
        unsigned long long q = pos + j;
        acc += ((unsigned long long)p[j] << (8 * (q & 7))) * (2 * (q >> 3) + 1);
    }
    __shared__ unsigned long long part[32];
    for (int o = 16; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < (blockDim.x + 31) / 32 ? part[threadIdx.x] : 0;
        for (int o = 16; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0 && acc) atomicAdd(slot, acc);
    }
}

typedef CUresult (*fn_waitval)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

typedef struct hjob {
    cudaEvent_t ev;             /* recorded on the stream where the work belongs */
    unsigned long long ns;
    uint32_t seq;
    void (*fn)(void *);         /* real host work instead of the spin, or NULL */
    void *arg;
} hjob;

/* RT_HOST_THREAD: the worker and its FIFO of jobs. */
typedef struct hworker {
    int on, stop;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hjob *q;
    size_t head, n, cap;
    uint32_t *flag;             /* pinned, mapped: the last finished job's seq */
    CUdeviceptr flag_dev;
    uint32_t issued;
    fn_waitval waitval;
} hworker;

typedef struct cuda_dev {
    rt_dev_ops ops;
    int device, sms;
    int calibrated;
    rt_calib calib;
    uint64_t map_host, map_dev;     /* last host -> device pointer translation */
    rt_host_mode host_mode;
    hworker hw;
    unsigned long long *sums;       /* verify_swaps: one slot per copy (device memory) */
    size_t n_sums;
} cuda_dev;

static rt_status cu_stream_new(void *ctx, void **s, ms_error *err)
{
    (void)ctx;
    cudaStream_t st;
    RT_CHECK(err, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *s = (void *)st;
    return RT_OK;
}

static void cu_stream_free(void *ctx, void *s)
{
    (void)ctx;
    cudaStreamDestroy((cudaStream_t)s);
}

static rt_status cu_event_new(void *ctx, int timing, void **e, ms_error *err)
{
    (void)ctx;
    cudaEvent_t ev;
    RT_CHECK(err, cudaEventCreateWithFlags(&ev,
                                           timing ? cudaEventDefault : cudaEventDisableTiming));
    *e = (void *)ev;
    return RT_OK;
}

static void cu_event_free(void *ctx, void *e)
{
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)e);
}

static rt_status cu_record(void *ctx, void *e, void *s, ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
    return RT_OK;
}

static rt_status cu_wait(void *ctx, void *s, void *e, ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0));
    return RT_OK;
}

static int cu_query(void *ctx, void *e, ms_error *err)
{
    (void)ctx;
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaSuccess) return 1;
    if (r == cudaErrorNotReady) return 0;
    rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaEventQuery", cudaGetErrorString(r));
    return -1;
}

/* Polls with a short back-off: never blocks in the driver, so a hung GPU cannot hang the
 * host past the timeout. */
static int cu_host_wait(void *ctx, void *e, double timeout_s, ms_error *err)
{
    double end = mono_s() + timeout_s;
    for (unsigned spin = 0;; spin++) {
        int q = cu_query(ctx, e, err);
        if (q) return q;
        if (mono_s() > end) return 0;
        if (spin < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

static rt_status cu_elapsed(void *ctx, void *e0, void *e1, float *ms, ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaEventElapsedTime(ms, (cudaEvent_t)e0, (cudaEvent_t)e1));
    return RT_OK;
}

static rt_status cu_copy(void *ctx, void *s, uint64_t dst, uint64_t src, uint64_t bytes, int d2h,
                         ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaMemcpyAsync((void *)(uintptr_t)dst, (const void *)(uintptr_t)src,
                                  (size_t)bytes,
                             d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                             (cudaStream_t)s));
    return RT_OK;
}

static rt_status launched(ms_error *err)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && e != cudaErrorNotReady)
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "rt_work_kernel<<<>>>",
                            cudaGetErrorString(e));
    return RT_OK;
}

static unsigned long long spin_ns_for(const cuda_dev *c, double dur_us)
{
    double us = c->calibrated ? (dur_us - c->calib.overhead_us) / c->calib.slope : dur_us;
    return us > 0 ? (unsigned long long)(us * 1e3 + 0.5) : 0ULL;
}

static unsigned long long max_clk_for(unsigned long long ns) { return ns * 4ULL + 4000000ULL; }

static rt_status host_ptr(cuda_dev *c, uint64_t host, uint64_t *dev, ms_error *err)
{
    if (host != c->map_host) {
        void *p = NULL;
        RT_CHECK(err, cudaHostGetDevicePointer(&p, (void *)(uintptr_t)host, 0));
        c->map_host = host;
        c->map_dev = (uint64_t)(uintptr_t)p;
    }
    *dev = c->map_dev;
    return RT_OK;
}

static rt_status cu_kernel(void *ctx, void *s, const rt_kernel_args *k, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    touch_set t;
    memset(&t, 0, sizeof t);
    t.k = k->n_touch < RT_TOUCH_MAX ? k->n_touch : RT_TOUCH_MAX;
    for (int i = 0; i < t.k; i++) {
        t.p[i] = k->touch_addr[i];
        t.n[i] = k->touch_bytes[i];
    }
    unsigned long long ns = spin_ns_for(c, k->dur_us);
    const uint4 *src = NULL;
    uint4 *dst = NULL;
    uint64_t dp;
    if (k->dha_read_bytes) {
        RT_TRY(host_ptr(c, k->dha_read_host, &dp, err));
        src = (const uint4 *)(uintptr_t)dp;
    }
    if (k->dha_write_bytes) {
        RT_TRY(host_ptr(c, k->dha_write_host, &dp, err));
        dst = (uint4 *)(uintptr_t)dp;
    }
    int dha = src || dst;
    rt_work_kernel<<<dha ? c->sms * 4 : c->sms, dha ? 512 : 64, 0, (cudaStream_t)s>>>(
        ns, max_clk_for(ns), t, src, k->dha_read_bytes / 16, dst, k->dha_write_bytes / 16);
    return launched(err);
}

static void CUDART_CB host_spin(void *arg)
{
    unsigned long long ns = (unsigned long long)(uintptr_t)arg;
    double end = mono_s() + (double)ns * 1e-9;
    if (ns > 2000000ULL) { /* sleep most of a long wait, spin the rest for accuracy */
        unsigned long long sl = ns - 1000000ULL;
        struct timespec ts = {(time_t)(sl / 1000000000ULL), (long)(sl % 1000000000ULL)};
        nanosleep(&ts, NULL);
    }
    while (mono_s() < end) {
    }
}

static void *worker_main(void *arg)
{
    cuda_dev *c = (cuda_dev *)arg;
    hworker *w = &c->hw;
    cudaSetDevice(c->device);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->stop && w->head == w->n) pthread_cond_wait(&w->cv, &w->mu);
        if (w->head == w->n) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        hjob j = w->q[w->head++];
        if (w->head == w->n) w->head = w->n = 0;
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        for (unsigned spin = 0; !stop; spin++) {
            cudaError_t e = cudaEventQuery(j.ev);
            if (e != cudaErrorNotReady) break; /* reached, or an error: release the stream */
            if (spin < 256) {
                sched_yield();
            } else {
                struct timespec ts = {0, 5000};
                nanosleep(&ts, NULL);
            }
            pthread_mutex_lock(&w->mu);
            stop = w->stop;
            pthread_mutex_unlock(&w->mu);
        }
        if (!stop && j.fn) j.fn(j.arg);
        else if (!stop) host_spin((void *)(uintptr_t)j.ns);
        /* Release the stream before any CUDA call: cudaEventDestroy takes the driver's lock
         * for writing, and the issuing thread may hold it for reading inside a launch that
         * waits for room in a queue only this stream's progress frees (seen on an H200 with
         * GO-MemFerry's real kernels: the launch spinning, the GPU idle on this wait). */
        __atomic_store_n(w->flag, j.seq, __ATOMIC_RELEASE);
        cudaEventDestroy(j.ev);
    }
    return NULL;
}

static rt_status worker_start(cuda_dev *c, ms_error *err)
{
    hworker *w = &c->hw;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fp = NULL;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fp, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess || q != cudaDriverEntryPointSuccess ||
        !fp) {
        cudaGetLastError();
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cuStreamWaitValue32",
                            "the driver does not provide this entry point");
    }
    w->waitval = (fn_waitval)fp;
    void *h = NULL, *d = NULL;
    RT_CHECK(err, cudaHostAlloc(&h, sizeof(uint32_t), cudaHostAllocPortable | cudaHostAllocMapped));
    cudaError_t e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(h);
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaHostGetDevicePointer",
                            cudaGetErrorString(e));
    }
    w->flag = (uint32_t *)h;
    *w->flag = 0;
    w->issued = 0;
    w->flag_dev = (CUdeviceptr)(uintptr_t)d;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->stop = 0;
    if (pthread_create(&w->th, NULL, worker_main, c) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        cudaFreeHost(h);
        w->flag = NULL;
        return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "pthread_create",
                            "cannot start the host-work thread");
    }
    w->on = 1;
    return RT_OK;
}

/* Stops the worker: jobs not started are released without their work, so no stream waits
 * forever on the counter. */
static void worker_stop(cuda_dev *c)
{
    hworker *w = &c->hw;
    if (!w->on) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    cudaFreeHost(w->flag);
    free(w->q);
    memset(w, 0, sizeof *w);
}

static rt_status host_thread_work(cuda_dev *c, cudaStream_t s, unsigned long long ns,
                                  void (*fn)(void *), void *arg, ms_error *err)
{
    hworker *w = &c->hw;
    cudaEvent_t ev;
    RT_CHECK(err, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, s);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaEventRecord",
                            cudaGetErrorString(e));
    }
    pthread_mutex_lock(&w->mu);
    if (ms_grow((void **)&w->q, &w->cap, w->n + 1, sizeof *w->q) != MS_OK) {
        pthread_mutex_unlock(&w->mu);
        cudaEventDestroy(ev);
        return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "host work", "out of memory");
    }
    uint32_t seq = ++w->issued;
    hjob j = {ev, ns, seq, fn, arg};
    w->q[w->n++] = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    CUresult r = w->waitval((CUstream)s, w->flag_dev, seq, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
        char msg[64];
        snprintf(msg, sizeof msg, "CUDA driver error %d", (int)r);
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cuStreamWaitValue32", msg);
    }
    return RT_OK;
}

static rt_status cu_host_work(void *ctx, void *s, double dur_us, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    unsigned long long ns = dur_us > 0 ? (unsigned long long)(dur_us * 1e3) : 0ULL;
    /* a driver without stream memory operations falls back to the callback */
    if (c->host_mode == RT_HOST_THREAD && !c->hw.on && worker_start(c, err) != RT_OK)
        c->host_mode = RT_HOST_CALLBACK;
    if (c->host_mode == RT_HOST_THREAD) return host_thread_work(c, (cudaStream_t)s, ns, NULL, NULL,
                                                                err);
    RT_CHECK(err, cudaLaunchHostFunc((cudaStream_t)s, host_spin, (void *)(uintptr_t)ns));
    return RT_OK;
}

/* Real host work (a host optimizer step) in the stream's order, on the same thread as the
 * spun host work: the worker, or the driver's callback thread. */
static rt_status cu_host_call(void *ctx, void *s, void (*fn)(void *), void *arg, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (c->host_mode == RT_HOST_THREAD && !c->hw.on && worker_start(c, err) != RT_OK)
        c->host_mode = RT_HOST_CALLBACK;
    if (c->host_mode == RT_HOST_THREAD) return host_thread_work(c, (cudaStream_t)s, 0, fn, arg,
                                                                err);
    RT_CHECK(err, cudaLaunchHostFunc((cudaStream_t)s, fn, arg));
    return RT_OK;
}

static rt_status cu_host_map(void *ctx, uint64_t host, uint64_t *dev, ms_error *err)
{
    (void)ctx;
    void *p = NULL;
    RT_CHECK(err, cudaHostGetDevicePointer(&p, (void *)(uintptr_t)host, 0));
    *dev = (uint64_t)(uintptr_t)p;
    return RT_OK;
}

/* ---- swap checksums ---- */

static rt_status cu_sum_begin(void *ctx, size_t n, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (c->sums) cudaFree(c->sums);
    c->sums = NULL;
    c->n_sums = 0;
    size_t bytes = (n ? n : 1) * sizeof *c->sums;
    RT_CHECK(err, cudaMalloc((void **)&c->sums, bytes));
    c->n_sums = n;
    RT_CHECK(err, cudaMemset(c->sums, 0, bytes));
    RT_CHECK(err, cudaDeviceSynchronize()); /* the run's streams do not wait for the null stream */
    return RT_OK;
}

static rt_status cu_sum_add(void *ctx, void *s, size_t k, uint64_t dev, uint64_t bytes,
                            uint64_t pos, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (k >= c->n_sums)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "cu_sum_add", "no such slot");
    if (!bytes) return RT_OK;
    unsigned long long blocks = (bytes + 256ULL * 64 - 1) / (256ULL * 64);
    unsigned long long most = (unsigned long long)(c->sms > 0 ? c->sms : 1) * 4;
    if (blocks > most) blocks = most;
    rt_sum_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)s>>>(
        c->sums + k, (const unsigned char *)(uintptr_t)dev, bytes, pos);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "rt_sum_kernel<<<>>>",
                            cudaGetErrorString(e));
    return RT_OK;
}

static rt_status cu_sum_read(void *ctx, uint64_t *out, size_t n, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (n > c->n_sums)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "cu_sum_read", "no such slot");
    if (n) RT_CHECK(err, cudaMemcpy(out, c->sums, n * sizeof *out, cudaMemcpyDeviceToHost));
    return RT_OK;
}

static void cu_sum_end(void *ctx)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (c->sums) cudaFree(c->sums);
    c->sums = NULL;
    c->n_sums = 0;
}

void rt_cuda_dev_set_host_mode(rt_dev_ops *d, rt_host_mode m)
{
    if (d) ((cuda_dev *)d)->host_mode = m; /* ops is the first member of cuda_dev */
}

/* n back-to-back spin kernels of spin_us each: mean stream time per kernel. */
static rt_status b2b(cuda_dev *c, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, double spin_us,
                     int n, double *per_us, ms_error *err)
{
    touch_set t;
    memset(&t, 0, sizeof t);
    unsigned long long ns = spin_us > 0 ? (unsigned long long)(spin_us * 1e3 + 0.5) : 0ULL;
    RT_CHECK(err, cudaEventRecord(e0, s));
    for (int i = 0; i < n; i++) {
        rt_work_kernel<<<c->sms, 64, 0, s>>>(ns, max_clk_for(ns), t, NULL, 0, NULL, 0);
        RT_TRY(launched(err));
    }
    RT_CHECK(err, cudaEventRecord(e1, s));
    RT_CHECK(err, cudaEventSynchronize(e1));
    float ms;
    RT_CHECK(err, cudaEventElapsedTime(&ms, e0, e1));
    *per_us = ms * 1e3 / n;
    return RT_OK;
}

static double spin_of(const rt_calib *cal, double req_us)
{
    double us = (req_us - cal->overhead_us) / cal->slope;
    return us > 0 ? us : 0;
}

static rt_status calibrate_on(cuda_dev *c, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1,
                              ms_error *err)
{
    rt_calib *cal = &c->calib;
    double w;
    RT_TRY(b2b(c, s, e0, e1, 10, 50, &w, err)); /* warm-up: module load, clocks */
    static const double xs[] = {50, 200, 1000, 3000};
    static const int ns[] = {100, 40, 10, 5};
    double y[4], sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < 4; i++) {
        RT_TRY(b2b(c, s, e0, e1, xs[i], ns[i], &y[i], err));
        sx += xs[i];
        sy += y[i];
        sxx += xs[i] * xs[i];
        sxy += xs[i] * y[i];
    }
    cal->slope = (4 * sxy - sx * sy) / (4 * sxx - sx * sx);
    cal->overhead_us = (sy - cal->slope * sx) / 4;
    if (!(cal->slope > 0.5 && cal->slope < 2.0))
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "spin calibration",
                            "the GPU's global timer does not advance as expected");
    RT_TRY(b2b(c, s, e0, e1, 0, 200, &cal->empty_us, err));
    static const double req[RT_CALIB_CHECKS] = {10, 100, 1000, 10000};
    static const int nb[RT_CALIB_CHECKS] = {200, 50, 10, 3};
    for (int i = 0; i < RT_CALIB_CHECKS; i++) {
        double sp = spin_of(cal, req[i]);
        cal->check_req_us[i] = req[i];
        RT_TRY(b2b(c, s, e0, e1, sp, nb[i], &cal->check_b2b_us[i], err));
        double one[5];
        for (int r = 0; r < 5; r++) RT_TRY(b2b(c, s, e0, e1, sp, 1, &one[r], err));
        cal->check_single_us[i] = median_of(one, 5);
    }
    cal->valid = 1;
    return RT_OK;
}

static rt_status cu_calibrate(void *ctx, rt_calib *out, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (!c->calibrated) {
        cudaStream_t s;
        cudaEvent_t e0, e1;
        RT_CHECK(err, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        RT_CHECK(err, cudaEventCreate(&e0));
        RT_CHECK(err, cudaEventCreate(&e1));
        rt_status st = calibrate_on(c, s, e0, e1, err);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cudaStreamDestroy(s);
        if (st != RT_OK) return st;
        c->calibrated = 1;
    }
    *out = c->calib;
    return RT_OK;
}

rt_status rt_cuda_dev_new(int device, rt_dev_ops **out, ms_error *err)
{
    *out = NULL;
    RT_CHECK(err, cudaSetDevice(device));
    int sms = 0;
    RT_CHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    struct cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, rt_work_kernel);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return rt_fail(err, RT_ERR_NODEV, __FILE__, __LINE__, "cudaFuncGetAttributes",
                            "this build has no kernel image for this GPU (rebuild with "
                            "CUDA_ARCH set to its architecture)");
    }
    cuda_dev *c = (cuda_dev *)calloc(1, sizeof *c);
    if (!c) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    c->device = device;
    c->sms = sms;
    c->host_mode = RT_HOST_THREAD;
    rt_dev_ops *o = &c->ops;
    o->ctx = c;
    o->name = "cuda";
    o->stream_new = cu_stream_new;
    o->stream_free = cu_stream_free;
    o->event_new = cu_event_new;
    o->event_free = cu_event_free;
    o->record = cu_record;
    o->wait = cu_wait;
    o->query = cu_query;
    o->host_wait = cu_host_wait;
    o->elapsed_ms = cu_elapsed;
    o->copy = cu_copy;
    o->kernel = cu_kernel;
    o->host_work = cu_host_work;
    o->calibrate = cu_calibrate;
    o->host_call = cu_host_call;
    o->host_map = cu_host_map;
    o->sum_begin = cu_sum_begin;
    o->sum_add = cu_sum_add;
    o->sum_read = cu_sum_read;
    o->sum_end = cu_sum_end;
    *out = o;
    return RT_OK;
}

void rt_cuda_dev_free(rt_dev_ops *d)
{
    if (!d) return;
    worker_stop((cuda_dev *)d); /* ops is the first member of cuda_dev */
    cu_sum_end(d->ctx);
    free(d);
}

/* ---- recording ---- */

/* op id -> measured microseconds (as bits) of the first non-recompute action of that op. */
static ms_status record_times(const rt_op_time *ops, size_t n, u64map **out)
{
    u64map *m = u64map_new(n ? n : 1);
    if (!m) return MS_ERR_NOMEM;
    for (size_t k = 0; k < n; k++) {
        if (ops[k].op < 0 || ops[k].recompute || !(ops[k].meas_us >= 0)) continue;
        if (u64map_get(m, (uint64_t)ops[k].op, NULL)) continue;
        uint64_t bits;
        memcpy(&bits, &ops[k].meas_us, sizeof bits);
        if (u64map_put(m, (uint64_t)ops[k].op, bits) != 0) {
            u64map_free(m);
            return MS_ERR_NOMEM;
        }
    }
    *out = m;
    return MS_OK;
}

static ms_status record_meta(const trace_t *t, const rt_record_info *info, trace_t *o)
{
    ms_status st = MS_OK;
    for (size_t i = 0; i < trace_meta_count(t) && st == MS_OK; i++)
        st = trace_set_meta(o, trace_meta_key(t, i), trace_meta_value(t, i));
    const char *keys[4] = {"recorded.device", "recorded.date", "recorded.math",
                           "recorded.from"};
    const char *vals[4] = {info ? info->device : NULL, info ? info->date : NULL,
                           info ? info->math : NULL, info ? info->from : NULL};
    for (int i = 0; i < 4 && st == MS_OK; i++)
        st = trace_set_meta(o, keys[i], vals[i] && vals[i][0] ? vals[i] : "-");
    return st;
}

ms_status rt_record_trace(const trace_t *t, const rt_op_time *ops, size_t n_ops,
                          const rt_record_info *info, trace_t **out, size_t *n_measured,
                          ms_error *err)
{
    *out = NULL;
    if (n_measured) *n_measured = 0;
    u64map *m = NULL;
    trace_t *o = trace_new();
    ms_status st = o ? record_times(ops, n_ops, &m) : MS_ERR_NOMEM;
    if (st == MS_OK && (st = record_meta(t, info, o)) != MS_OK) {
        ms_fail(err, st, "recorded trace: cannot set its meta data (%s)", ms_status_str(st));
        u64map_free(m);
        trace_free(o);
        return st;
    }
    size_t measured = 0;
    for (size_t i = 0; i < trace_count(t) && st == MS_OK; i++) {
        trace_rec r = *trace_get(t, i);
        uint64_t bits;
        if (r.type == TR_OP && u64map_get(m, r.u.op.id, &bits)) {
            memcpy(&r.u.op.dur_us, &bits, sizeof bits);
            measured++;
        }
        st = trace_append(o, &r);
    }
    u64map_free(m);
    if (st != MS_OK) {
        trace_free(o);
        return ms_fail(err, st, "recorded trace: %s", ms_status_str(st));
    }
    if (n_measured) *n_measured = measured;
    *out = o;
    return MS_OK;
}

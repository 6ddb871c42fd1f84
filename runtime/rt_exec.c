/* rt_exec.c — the runtime's schedule executor (rt_exec.h), host side: the issue loop that
 * walks the actions in program order over a device interface (rt_dev_ops), with its live
 * tables, deferred frees (PyTorch's record_stream), allocations, the watchdog, setup,
 * measurements and clean-up; plain C, no CUDA. The data actions are in rt_exec_ops.c, the
 * CUDA device in rt_cuda_dev.cu. Semantics are in docs/RUNTIME.md. Used by runtime/rt_run.c
 * (`memsim run`) and the tests. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_exec_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double rt_mono_s(void)
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

double rt_median_of(double *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

rt_status rtx_fail(ex *x, rt_outcome oc, rt_status st, const char *fmt, ...)
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

rt_status rtx_fail_dev(ex *x, size_t i, const char *what, ms_error *err)
{
    return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: %s: %s", i, what,
                    err->msg);
}

/* What the backend's last failed call was (an allocator or mb_ops call returns a status
 * only): rt_exec_opts.backend_error, where the caller gave one. */
static const char *be_why(const ex *x)
{
    const ms_error *e = x->o.backend_error;
    return e && e->msg[0] ? e->msg : "no error";
}

const char *rtx_tname(const ex *x, uint64_t id, char *buf, size_t n)
{
    const trace_tensor *t = x->o.trace ? trace_find_tensor(x->o.trace, id) : NULL;
    snprintf(buf, n, "%s", t && t->name[0] ? t->name : "-");
    return buf;
}

/* ---- waiting, with the watchdog ---- */

rt_status rtx_wait_ev(ex *x, void *e, const char *what, ms_error *err)
{
    double left = x->deadline - rt_mono_s();
    int q = x->d->host_wait(x->d->ctx, e, left > 0 ? left : 0, err);
    if (q > 0) return RT_OK;
    if (q < 0)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "waiting for %s: %s", what, err->msg);
    x->hung = 1;
    return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA,
                    "watchdog: %s was not reached within %.0f s of the run's start (the GPU may "
                    "be hung); device resources are left to process exit", what, x->o.watchdog_s);
}

/* ---- event pool (untimed events for deferred frees and joins) ---- */

void *rtx_pool_get(ex *x, ms_error *err)
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

void rtx_pool_put(ex *x, void *e)
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

dlive *rtx_dev_live(ex *x, uint64_t tensor)
{
    uint64_t slot;
    return u64map_get(x->dmap, tensor, &slot) ? &x->dl[slot] : NULL;
}

hlive *rtx_host_live(ex *x, uint64_t tensor)
{
    uint64_t slot;
    return u64map_get(x->hmap, tensor, &slot) ? &x->hl[slot] : NULL;
}

/* ---- deferred frees ---- */

static rt_status pend_new(ex *x, uint32_t *idx, ms_error *err)
{
    (void)err; /* the signature its callers share */
    if (slot_new(&x->pd_free, &x->n_pd_free, &x->n_pd, &x->cap_pd, (void **)&x->pd,
                 sizeof *x->pd, idx) != MS_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    memset(&x->pd[*idx], 0, sizeof x->pd[*idx]);
    x->pd[*idx].active = 1;
    return RT_OK;
}

/* Records an event on stream k that the pend waits for. */
static rt_status pend_event(ex *x, uint32_t idx, int k, size_t i, ms_error *err)
{
    void *e = rtx_pool_get(x, err);
    if (!e) return rtx_fail_dev(x, i, "creating an event", err);
    if (x->d->record(x->d->ctx, e, x->st[k], err) != RT_OK)
        return rtx_fail_dev(x, i, "recording", err);
    fifo *f = &x->q[k];
    if (ms_grow((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v) != MS_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
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
    (void)err; /* the signature its callers share */
    pend *p = &x->pd[idx];
    p->active = 0;
    if (!p->host && p->released) {
        x->fenced_dev--;
    } else if (!p->host) {
        x->pending_dev--;
        ms_status st = alloc_release(x->alloc, p->addr);
        if (st != MS_OK)
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "releasing a deferred block 0x%llx: %s (%s)",
                            (unsigned long long)p->addr, ms_status_str(st), be_why(x));
        bm_release(x->mix, p->addr);
    }
    if (slot_del(&x->pd_free, &x->n_pd_free, &x->cap_pd_free, idx) != MS_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
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
                RT_TRY(rtx_wait_ev(x, it.ev, "a deferred free's event", err));
            } else {
                int q = x->d->query(x->d->ctx, it.ev, err);
                if (q < 0)
                    return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "event query: %s", err->msg);
                if (!q) break;
            }
            f->head++;
            pend *p = &x->pd[it.pend];
            for (int j = 0; j < p->n_ev; j++)
                if (p->ev[j] == it.ev) p->ev[j] = NULL; /* reached: may be reused from now */
            rtx_pool_put(x, it.ev);
            if (--p->outstanding == 0) RT_TRY(pend_done(x, it.pend, err));
        }
        if (f->head == f->n) f->head = f->n = 0;
    }
    return RT_OK;
}

/* alloc_sync: the host waits until stream k has reached this point. */
static rt_status sync_stream(ex *x, int k, size_t i, ms_error *err)
{
    void *e = rtx_pool_get(x, err);
    if (!e) return rtx_fail_dev(x, i, "creating an event", err);
    if (x->d->record(x->d->ctx, e, x->st[k], err) != RT_OK)
        return rtx_fail_dev(x, i, "recording", err);
    rt_status st = rtx_wait_ev(x, e, "the stream before an allocator call", err);
    if (st == RT_OK) rtx_pool_put(x, e);
    x->r->alloc_waits++;
    return st;
}

/* ---- actions ---- */

static rt_status oom_result(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    (void)err; /* the signature its callers share */
    bm_failed(x->mix);
    const alloc_stats *s = alloc_get_stats(x->alloc);
    char b0[32], b1[32], b2[32], b3[32], b4[32], tn[48];
    uint64_t cached = s->reserved_bytes > s->allocated_bytes
                          ? s->reserved_bytes - s->allocated_bytes : 0;
    return rtx_fail(x, RTX_OOM, RT_OK,
                    "out of device memory allocating tensor %llu '%s' of %llu bytes (%s) on stream "
                    "%s at action %zu: allocated %s, reserved %s, free cached %s (reserved - "
                    "allocated), backend capacity %s",
                    (unsigned long long)a->tensor, rtx_tname(x, a->tensor, tn, sizeof tn),
                    (unsigned long long)a->bytes, ms_fmt_bytes(a->bytes, b0, sizeof b0),
                    sched_stream_name(a->stream), i,
                    ms_fmt_bytes(s->allocated_bytes, b1, sizeof b1),
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
    (void)err; /* the signature its callers share */
    for (size_t p = 0; p < x->n_pd; p++) {
        pend *q = &x->pd[p];
        if (!q->active || q->host || q->released) continue;
        q->released = 1;
        x->pending_dev--;
        x->fenced_dev++;
        ms_status st = alloc_release(x->alloc, q->addr);
        if (st != MS_OK)
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: releasing a deferred "
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
                return rtx_fail_dev(x, i, "waiting for a deferred free's event", err);
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
    if (rtx_dev_live(x, a->tensor))
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu is already "
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
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: allocating %llu bytes for "
                        "tensor %llu '%s' on stream %s: %s (%s)", i, (unsigned long long)a->bytes,
                        (unsigned long long)a->tensor, rtx_tname(x, a->tensor, tn, sizeof tn),
                        sched_stream_name(a->stream), ms_status_str(st),
                        arena ? "static arena: its planned address is held by a live tensor, or "
                            "the plan's offsets do not fit the arena" : be_why(x));
    }
    uint32_t slot;
    if (slot_new(&x->dl_free, &x->n_dl_free, &x->n_dl, &x->cap_dl, (void **)&x->dl,
                 sizeof *x->dl, &slot) != MS_OK || u64map_put(x->dmap, a->tensor, slot) ||
        !bm_alloc(x->mix, a->tensor, (sched_block)a->block, addr, a->bytes)) {
        alloc_release(x->alloc, addr);
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    }
    dlive *d = &x->dl[slot];
    d->addr = addr;
    d->bytes = a->bytes;
    d->stream = a->stream;
    d->users = 1u << a->stream;
    uint64_t tid;
    if (x->alias && lower_id_synthetic(a->tensor, &tid) && tid != UINT64_MAX &&
        u64map_put(x->alias, tid, a->tensor))
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    return fence_block(x, i, a->stream, addr, a->bytes, err);
}

/* A block another stream used must not be reused before that use ends: record an event on
 * every such stream and release the block when all are reached (PyTorch record_stream). The
 * compute stream counts as a user of every block, since kernels there read and write them. */
static rt_status do_free(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    uint64_t slot;
    if (!u64map_del(x->dmap, a->tensor, &slot))
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu holds no "
                        "device block", i, (unsigned long long)a->tensor);
    dlive d = x->dl[slot];
    if (slot_del(&x->dl_free, &x->n_dl_free, &x->cap_dl_free, (uint32_t)slot) != MS_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
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
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: freeing: %s (%s)", i,
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
                        return rtx_fail_dev(x, i, "waiting for a pinned range's earlier user", err);
    }
    uint32_t slot;
    if (slot_new(&x->hl_free, &x->n_hl_free, &x->n_hl, &x->cap_hl, (void **)&x->hl,
                 sizeof *x->hl, &slot) != MS_OK || u64map_put(x->hmap, a->tensor, slot))
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
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
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: initializing the host "
                            "home of tensor %llu '%s': %s", i, (unsigned long long)a->tensor,
                            rtx_tname(x, a->tensor, tn, sizeof tn), err->msg);
        }
        x->r->host_inits++;
    }
    return RT_OK;
}

static rt_status do_host_free(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    uint64_t slot;
    if (!u64map_del(x->hmap, a->tensor, &slot))
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu holds no "
                        "host memory", i, (unsigned long long)a->tensor);
    hlive h = x->hl[slot];
    if (slot_del(&x->hl_free, &x->n_hl_free, &x->cap_hl_free, (uint32_t)slot) != MS_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
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

static rt_status issue(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    void *s = x->st[a->stream];
    switch (a->kind) {
    case SA_COMPUTE:
        return rtx_do_compute(x, i, a, err);
    case SA_ALLOC:
        return do_alloc(x, i, a, err);
    case SA_FREE:
        return do_free(x, i, a, err);
    case SA_COPY_D2H:
    case SA_COPY_H2D:
        return rtx_do_copy(x, i, a, err);
    case SA_HOST_ALLOC:
        return do_host_alloc(x, i, a, err);
    case SA_HOST_FREE:
        return do_host_free(x, i, a, err);
    case SA_HOST_COMPUTE:
        x->r->win[x->cur_win].host_nominal_s += (a->dur_us > 0 ? a->dur_us : 0) * 1e-6;
        if (x->o.host_compute && x->o.host_prepare && x->o.trace && a->op >= 0)
            return rtx_do_host_step(x, i, a, err);
        if (x->d->host_work(x->d->ctx, s, a->dur_us > 0 ? a->dur_us : 0, err) != RT_OK)
            return rtx_fail_dev(x, i, "host work", err);
        return RT_OK;
    case SA_RECORD:
        if (x->d->record(x->d->ctx, x->sev[a->event], s, err) != RT_OK)
            return rtx_fail_dev(x, i, "recording an event", err);
        return RT_OK;
    case SA_WAIT:
        if (x->d->wait(x->d->ctx, s, x->sev[a->event], err) != RT_OK)
            return rtx_fail_dev(x, i, "waiting on an event", err);
        return RT_OK;
    case SA_MARK:
        if (a->mark == TM_ITER && a->stream == SS_COMPUTE && x->o.set_iter)
            x->o.set_iter(x->o.compute_ctx, (int)a->mark_value);
        if (a->mark == TM_ITER && a->stream == SS_COMPUTE && x->cur_win + 1 < x->n_win) {
            x->cur_win++;
            x->retries_at_mark = alloc_get_stats(x->alloc)->num_alloc_retries;
            if (x->d->record(x->d->ctx, x->wev[x->cur_win], s, err) != RT_OK)
                return rtx_fail_dev(x, i, "recording an iteration mark", err);
        }
        return RT_OK;
    default:
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: unknown kind %d", i,
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
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "creating events: %s", err->msg);
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
    if ((x->o.compute || x->o.coll_run) && !(x->alias = u64map_new(256)))
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    if (x->o.max_ahead < 0) x->o.max_ahead = 0;
    x->ahead = (void **)calloc((size_t)x->o.max_ahead + 1, sizeof(void *));
    if (!x->ahead || !r->win || !x->sev || !x->wev || !x->cp || !x->op || !x->dmap || !x->hmap ||
        !x->mix)
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    if (x->d->calibrate && x->d->calibrate(x->d->ctx, &r->calib, err) != RT_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "calibrating the spin kernel: %s",
                        err->msg);
    x->empty_us = r->calib.valid ? r->calib.empty_us : 0;
    for (int k = 0; k < SS_COUNT; k++)
        if (x->d->stream_new(x->d->ctx, &x->st[k], err) != RT_OK)
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "creating streams: %s", err->msg);
    if (x->o.coll_find && x->o.coll_run && x->d->stream_new(x->d->ctx, &x->side, err) != RT_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "creating the side stream: %s", err->msg);
    if (x->o.verify_swaps) {
        if (!x->d->sum_begin || !x->d->sum_add || !x->d->sum_read || !x->d->sum_end)
            return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "verify_swaps: the device %s cannot "
                            "checksum copies", x->d->name);
        if (x->d->sum_begin(x->d->ctx, x->n_cp, err) != RT_OK)
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "verify_swaps: %s", err->msg);
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
        return rtx_fail(x, RTX_OOHM, RT_OK, "out of host memory: the schedule needs a pinned pool "
                        "of %s, above the host limit of %s",
                        ms_fmt_bytes(x->hp.pool_bytes, b0, sizeof b0),
                        ms_fmt_bytes(x->o.host_limit_bytes, b1, sizeof b1));
    }
    ms_status st = MS_OK;
    if (x->hp.pool_bytes) st = x->be->ops->host_alloc(x->be->ctx, x->hp.pool_bytes, &x->pool);
    x->pool_dev = x->pool;
    if (st == MS_OK && x->pool && x->d->host_map &&
        x->d->host_map(x->d->ctx, x->pool, &x->pool_dev, err) != RT_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "mapping the pinned pool: %s", err->msg);
    if (st == MS_OK && c->dha_bytes) {
        x->dha_bytes = c->dha_bytes;
        st = x->be->ops->host_alloc(x->be->ctx, x->dha_bytes, &x->dha_buf);
    }
    if (st != MS_OK) {
        char b0[32];
        return rtx_fail(x, st == MS_ERR_OOHM ? RTX_OOHM : RTX_ERROR, st == MS_ERR_OOHM ? RT_OK
                        : RT_ERR_CUDA, "cannot allocate %s of pinned host memory: %s",
                        ms_fmt_bytes(x->hp.pool_bytes + x->dha_bytes, b0, sizeof b0),
                        be_why(x));
    }
    ms_error le; /* the library's */
    ms_error_clear(&le);
    st = alloc_new(x->o.allocator ? x->o.allocator : "caching", x->o.alloc_cfg, x->be,
                   &x->alloc, &le);
    if (st != MS_OK) return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "%s", le.msg);
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
    l->median_Bps = rt_median_of(bps, n);
}

static rt_status elapsed_s(ex *x, void *e0, void *e1, double *s, ms_error *err)
{
    float ms = 0;
    if (x->d->elapsed_ms(x->d->ctx, e0, e1, &ms, err) != RT_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "reading event times: %s", err->msg);
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
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
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
        if (!r->ops) return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
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
    if (!v) return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    if (x->d->sum_read(x->d->ctx, v, x->used_cp, err) != RT_OK) {
        free(v);
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "verify_swaps: reading the sums: %s",
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
                     rtx_tname(x, o->tensor, n0, sizeof n0), o->action,
                     (unsigned long long)o->bytes, (unsigned long long)v[t->pair - 1],
                     (unsigned long long)t->tensor, rtx_tname(x, t->tensor, n1, sizeof n1),
                     t->action, (unsigned long long)t->bytes, (unsigned long long)v[k]);
        }
    }
    free(v);
    if (r->swap_mismatches)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "%s; %llu of %llu prefetches differ", msg,
                        (unsigned long long)r->swap_mismatches,
                        (unsigned long long)(r->swap_mismatches + r->swap_verified));
    return RT_OK;
}

/* Waits until every stream has done all that was issued to it. */
static rt_status drain_streams(ex *x, ms_error *err)
{
    for (int k = 0; k <= SS_COUNT; k++) {
        void *st = k < SS_COUNT ? x->st[k] : x->side;
        if (!st) continue;
        void *e = rtx_pool_get(x, err);
        if (!e || x->d->record(x->d->ctx, e, st, err) != RT_OK)
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "synchronizing streams: %s",
                            err->msg);
        RT_TRY(rtx_wait_ev(x, e, "the end of a stream's work", err));
        rtx_pool_put(x, e);
    }
    return RT_OK;
}

/* The normal end: the compute stream waits for the others, then the end event. */
static rt_status finish(ex *x, ms_error *err)
{
    void *j[SS_COUNT];
    for (int k = 0; k < SS_COUNT; k++) {
        if (k == SS_COMPUTE) continue;
        j[k] = rtx_pool_get(x, err);
        if (!j[k] || x->d->record(x->d->ctx, j[k], x->st[k], err) != RT_OK ||
            x->d->wait(x->d->ctx, x->st[SS_COMPUTE], j[k], err) != RT_OK)
            return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "joining the streams: %s", err->msg);
    }
    if (x->d->record(x->d->ctx, x->ev_end, x->st[SS_COMPUTE], err) != RT_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "recording the end: %s", err->msg);
    x->r->issue_s = rt_mono_s() - x->t0;
    RT_TRY(rtx_wait_ev(x, x->ev_end, "the end of the schedule", err));
    x->r->wall_s = rt_mono_s() - x->t0;
    for (int k = 0; k < SS_COUNT; k++)
        if (k != SS_COMPUTE) rtx_pool_put(x, j[k]);
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
    if (x->side) x->d->stream_free(x->d->ctx, x->side);
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
        x.t0 = rt_mono_s();
        x.deadline = x.t0 + x.o.watchdog_s;
        if (x.d->record(x.d->ctx, x.wev[0], x.st[SS_COMPUTE], err) != RT_OK)
            st = rtx_fail(&x, RTX_ERROR, RT_ERR_CUDA, "recording the start: %s", err->msg);
        for (size_t i = 0; st == RT_OK && !x.stop && i < n; i++) st = issue(&x, i, sched_get(s, i),
                                                                            err);
        if (st == RT_OK && !x.stop) st = finish(&x, err);
        if (st == RT_OK && !x.stop) st = poll_pending(&x, 1, err);
        if (st == RT_OK && !x.stop && __atomic_load_n(&x.step_fail, __ATOMIC_ACQUIRE))
            st = rtx_fail(&x, RTX_ERROR, RT_ERR_HOST, "%s", x.step_msg);
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

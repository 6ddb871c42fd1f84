/* exec_host.c — the host side of the schedule executor (see exec_int.h): the host thread
 * of the issue model (sim_opts.issue_ahead: it issues the program in order, makes the
 * allocator calls and pays their latencies, waits for the run-ahead bound, synchronizes and
 * deferred frees) and the host clock of the stream-time model where the trace's ops give
 * host times (trace_op.host_us, host_sync). Semantics in docs/SIMULATOR.md. Used by
 * sim/exec.c. */
#include "sim/exec_int.h"

#include <string.h>

/* Host time to issue compute action a: its op's host_us where the trace gives host times
 * (sim_opts.eager_host_us for each op with a kernel where the pipeline gives that instead),
 * else dflt_us; with host times also the recomputation's cost (exfw_recompute_us: the trace's
 * measured one, else the profile's host.recompute_layer_us) where a
 * recomputation of a layer begins (a replayed action after an action that was not one, or of
 * another layer) and the autograd hooks' costs (exec_fw.c).
 * Called once per compute action, in program order. */
static double compute_host_us(ex *x, const sched_action *a, double dflt_us)
{
    double us = dflt_us;
    if (x->host_times) {
        const trace_op *t = ex_action_op(x, a);
        if (x->o.eager_host_us > 0) us = t && t->dur_us > 0 ? x->o.eager_host_us : 0;
        else us = t ? t->host_us : 0;
        us += exfw_compute_us(x->fw, a, t);
        if (a->recompute && (!x->hc_last_rec || a->layer != x->hc_last_layer))
            us += exfw_recompute_us(x->fw, x->m);
    }
    x->hc_last_rec = a->recompute != 0;
    x->hc_last_layer = a->layer;
    return us;
}

/* The host waits for this copy before it goes on (a blocking copy), where the trace gives
 * host times: without them no host is modelled in stream time, and the issue model keeps
 * its old behaviour. */
int exh_action_host_wait(const ex *x, const sched_action *a)
{
    return x->host_times && a->host_wait &&
           (a->kind == SA_COPY_D2H || a->kind == SA_COPY_H2D);
}

/* The host waits for the GPU to finish this compute action before it goes on. */
int exh_compute_host_sync(const ex *x, const sched_action *a)
{
    const trace_op *t = x->host_times ? ex_action_op(x, a) : NULL;
    return t && t->host_sync;
}

/* ---------- the host thread (issue model) ----------
 *
 * One thread walks the program in order. A GPU action costs it issue_us and is then
 * enqueued on its stream; ALLOC / FREE / HOST_ALLOC / HOST_FREE run on it at issue time and
 * their backend latency is its own busy time. It waits while more than `ahead` compute
 * actions are issued and unfinished (the runtime's --max-ahead), until every stream has run
 * all it was given after a synchronizing allocator call (cudaFree), and, when an allocation
 * fails while frees are deferred, until their uses have run (then it retries once). The
 * runtime (runtime/rt_exec.c) follows the same rules on a real GPU. */

static void host_step(ex *x);

static void host_kick_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    (void)arg;
    ex *x = ctx;
    x->h.kick_pending = 0;
    host_step(x);
}

/* Lets the host thread go on, from an event at the current time (never by recursion from
 * stream code). */
void exh_kick(ex *x)
{
    if (x->h.kick_pending || x->stop) return;
    if (!eng_post_after(x->eng, 0, host_kick_cb, x, 0)) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
        return;
    }
    x->h.kick_pending = 1;
}

/* The host thread waits, because of action idx. */
static void host_wait(ex *x, h_state st, size_t idx)
{
    x->h.state = st;
    x->h.t0 = eng_now(x->eng);
    x->h.wait_idx = idx;
    x->h.waits++;
}

static void host_resume(ex *x, const char *what)
{
    ex_add_span(x, TRACK_HOST_THREAD, x->h.t0, eng_now(x->eng), x->h.wait_idx, what, "wait");
    x->h.state = H_READY;
    exh_kick(x);
}

static void host_busy_cb(eng_t *e, void *ctx, uint64_t arg);

/* The host thread is busy for dur_us; then it enqueues action `next` (an issue cost) or
 * just goes on (an allocator call's latency). */
static void host_busy(ex *x, double dur_us, int enqueue_after, int alloc_busy)
{
    hthread *h = &x->h;
    h->state = H_BUSY;
    h->t0 = eng_now(x->eng);
    h->enqueue_after = enqueue_after;
    h->alloc_busy = alloc_busy;
    if (!eng_post_after(x->eng, dur_us > 0 ? dur_us : 0, host_busy_cb, x, 0))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

/* Every stream has run all the host gave it (a device synchronize returns). */
static int streams_drained(const ex *x)
{
    for (int k = 0; k < SS_COUNT; k++)
        if (x->st[k].pos < x->st[k].nissued) return 0;
    return 1;
}

/* Called whenever a stream made progress: ends the host thread's wait if it is over. */
void exh_check(ex *x)
{
    hthread *h = &x->h;
    switch (h->state) {
    case H_AHEAD:
        if ((int64_t)(h->c_issued - h->c_done) <= h->ahead) host_resume(x, "wait run-ahead");
        break;
    case H_OPSYNC:
        if (x->st[h->sync_stream].pos >= x->st[h->sync_stream].nissued)
            host_resume(x, "wait sync op");
        break;
    case H_DRAIN:
        if (streams_drained(x)) host_busy(x, h->drain_cost_us, 0, 1);
        break;
    case H_FREES:
        /* the wait is part of the allocator call (PyTorch synchronizes events inside
         * malloc), so its span and time are the call's; then the call is made again */
        if (h->frees_synced ? streams_drained(x) : ex_pending_all_done(x)) {
            h->call_idx = h->next;
            h->call_t0 = h->t0;
            h->call_synced = h->frees_synced;
            host_busy(x, h->frees_cost_us, 0, 1);
        }
        break;
    default:
        break;
    }
}

/* A copy makes its stream a user of the tensor's device block and host memory. */
static void note_use(ex *x, uint64_t tensor, int k)
{
    uint64_t u;
    if (u64map_get(x->duse, tensor, &u) && u64map_put(x->duse, tensor, u | (1ULL << (k + 8))))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
    if (u64map_get(x->huse, tensor, &u) && u64map_put(x->huse, tensor, u | (1ULL << k)))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
}

/* Action i is issued: its stream may run it. A compute action may make the host wait. */
static void host_enqueue(ex *x, size_t i)
{
    hthread *h = &x->h;
    const sched_action *a = ex_act(x, i);
    int k = (int)a->stream;
    if (a->kind == SA_COPY_D2H || a->kind == SA_COPY_H2D) note_use(x, a->tensor, k);
    x->st[k].nissued++;
    h->next++;
    h->retried = 0;
    if (x->st[k].starving) ex_kick(x, k);
    if (a->kind == SA_COMPUTE) h->c_issued++;
    h->sync_stream = k;
    if (a->kind == SA_COMPUTE ? exh_compute_host_sync(x, a) : exh_action_host_wait(x, a))
        host_wait(x, H_OPSYNC, i); /* a compute action's implies the run-ahead bound */
    else if (a->kind == SA_COMPUTE && (int64_t)(h->c_issued - h->c_done) > h->ahead)
        host_wait(x, H_AHEAD, i);
}

static void host_busy_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)arg;
    ex *x = ctx;
    hthread *h = &x->h;
    if (h->alloc_busy && ex_pace_mapping(x, &h->sa_left, host_busy_cb, 0)) return;
    double now = eng_now(e);
    h->busy_us += now - h->t0;
    if (h->alloc_busy) {
        /* the span and the allocator time include a synchronize's drain */
        if (ex_spans_on(x)) {
            const sched_action *a = ex_act(x, h->call_idx);
            char name[TL_NAME_MAX], tn[48];
            snprintf(name, sizeof name, "%s%s %s%s", h->call_synced ? "sync (" : "",
                     a->kind == SA_FREE ? "free" : a->kind == SA_HOST_ALLOC ? "host alloc"
                                                                            : "alloc",
                     ex_tensor_name(x, a->tensor, tn, sizeof tn), h->call_synced ? ")" : "");
            ex_add_span(x, TRACK_HOST_THREAD, h->call_t0, now, h->call_idx, name,
                        h->call_synced ? "sync" : "alloc");
        }
        h->alloc_us += now - h->call_t0;
    }
    if (now > x->t_end) x->t_end = now;
    h->state = H_READY;
    if (h->enqueue_after) {
        h->enqueue_after = 0;
        host_enqueue(x, h->next);
    }
    host_step(x);
}

/* After an allocator call on the host thread (action idx): its latency is the thread's busy
 * time; a synchronize first waits until every stream has run all it was given. */
static void host_after_call(ex *x, size_t idx)
{
    hthread *h = &x->h;
    int synced = 0;
    double paced;
    double cost = ex_take_call_cost(x, &synced, &paced);
    h->call_idx = idx;
    h->call_t0 = eng_now(x->eng);
    h->call_synced = synced;
    if (synced) {
        h->drain_cost_us = cost > 0 ? cost : 0;
        host_wait(x, H_DRAIN, idx);
        exh_check(x);
    } else if (cost > 0 || paced > 0) {
        h->sa_left = paced;
        host_busy(x, cost, 0, 1);
    }
}

static void host_alloc(ex *x, size_t i, const sched_action *a)
{
    hthread *h = &x->h;
    int s = (int)a->stream;
    if (u64map_get(x->dev, a->tensor, NULL)) {
        ex_fail_at(x, MS_ERR_INVALID, i, "tensor is already allocated");
        return;
    }
    if (!ex_process_pending(x)) return;
    uint64_t addr = 0;
    ms_status st = alloc_block(x->alloc, a->bytes, ex_pool_stream(s, a->pool), a->tensor, &addr);
    if ((st == MS_ERR_OOM || st == MS_ERR_INVALID) && !h->retried && x->n_live[0]) {
        /* PyTorch's retry path synchronizes outstanding events before giving up; the
         * runtime waits for every deferred free and retries once (its oom_drains). A static
         * arena refuses (MS_ERR_INVALID) a planned offset whose previous tensor's free is
         * still deferred: the same wait lets it go on, where the runtime stops today
         * (docs/VALIDATION.md, item 1, names this as the smaller of two fixes). */
        h->retried = 1;
        /* a synchronize in the failed call (the allocator's own free-and-retry) drains every
         * stream, which completes every deferred free too */
        h->frees_cost_us = simbe_take_cost_us(x->be, &h->frees_synced);
        host_wait(x, H_FREES, h->next);
        exh_check(x);
        return;
    }
    if (st == MS_ERR_OOM) {
        ex_oom_failure(x, s, i, a);
        ex_end_as(x, RS_OOM);
        return;
    }
    if (st != MS_OK) {
        ex_fail_at(x, st, i, ex_alloc_why(x, st));
        return;
    }
    if (u64map_put(x->dev, a->tensor, addr) || !bm_alloc(x->mix, a->tensor, (sched_block)a->block, addr, a->bytes) ||
        u64map_put(x->duse, a->tensor, (uint64_t)s | (1ULL << (s + 8)))) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
        return;
    }
    ex_mem_sample(x);
    host_enqueue(x, i); /* a no-op for the stream */
    host_after_call(x, i);
}

/* A block another stream used goes back only when that use has run (the runtime's rule:
 * the compute stream counts as a user of every block, the allocating stream needs no event
 * because its pool serves only its own later requests, in stream order). */
static void host_free(ex *x, size_t i, const sched_action *a)
{
    uint64_t addr, u = 0;
    if (!u64map_del(x->dev, a->tensor, &addr)) {
        ex_fail_at(x, MS_ERR_INVALID, i,
                "tensor is not allocated at this point of the program (never allocated or "
                "already freed)");
        return;
    }
    u64map_del(x->duse, a->tensor, &u);
    unsigned alloc_stream = (unsigned)(u & 0xff);
    unsigned users = (unsigned)(u >> 8) | (1u << a->stream) | (1u << SS_COMPUTE);
    unsigned others = users & ~(1u << alloc_stream) & ((1u << SS_COUNT) - 1);
    /* recordStream by a collective (plan knob record_stream): the NCCL stream's event is
     * reached when the GPU has run the collectives issued before the free; the compute stream
     * stands for it (c10d orders the NCCL stream after the compute stream at each collective
     * and back). Deviation: the event waits for all compute work issued before the free,
     * not only up to the last collective (a few kernels more). */
    if (a->side_use && x->side_defer) others |= 1u << SS_COMPUTE;
    if (others && addr) {
        if (!ex_pend_add(x, a->tensor, addr, others, 0)) return;
        x->h.deferred++;
    } else {
        ms_status st = alloc_release(x->alloc, addr);
        if (st != MS_OK) {
            ex_fail_at(x, st, i, ex_alloc_why(x, st));
            return;
        }
        bm_release(x->mix, addr);
        ex_mem_sample(x);
    }
    host_enqueue(x, i); /* a no-op for the stream */
    host_after_call(x, i);
}

static void host_host_alloc(ex *x, size_t i, const sched_action *a)
{
    hthread *h = &x->h;
    if (u64map_get(x->host, a->tensor, NULL)) {
        ex_fail_at(x, MS_ERR_INVALID, i, "tensor already has host memory");
        return;
    }
    if (!ex_process_pending(x)) return;
    if (x->host_cap && a->bytes > x->host_cap - x->host_used) {
        if (!h->retried && x->n_live[1]) {
            h->retried = 1;
            h->frees_synced = 0;
            h->frees_cost_us = 0;
            host_wait(x, H_FREES, h->next);
            exh_check(x);
            return;
        }
        ex_oohm_failure(x, (int)a->stream, i, a);
        return;
    }
    if (u64map_put(x->host, a->tensor, a->bytes) || u64map_put(x->huse, a->tensor, 0)) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
        return;
    }
    x->host_used += a->bytes;
    if (x->host_used > x->host_peak) x->host_peak = x->host_used;
    ex_mem_sample(x);
    host_enqueue(x, i); /* a no-op for the stream */
}

/* Pinned memory goes back when the copies that used it and the freeing stream's earlier
 * work have run (PyTorch's caching host allocator records an event per using stream). */
static void host_host_free(ex *x, size_t i, const sched_action *a)
{
    uint64_t bytes, users = 0;
    if (!u64map_del(x->host, a->tensor, &bytes)) {
        ex_fail_at(x, MS_ERR_INVALID, i,
                "tensor has no host memory at this point of the program (never reserved or "
                "already released)");
        return;
    }
    u64map_del(x->huse, a->tensor, &users);
    if (!ex_pend_add(x, a->tensor, bytes, (unsigned)users | (1u << a->stream), 1)) return;
    host_enqueue(x, i); /* a no-op for the stream */
}

/* The host's view of the last iteration starts when it issues the iteration mark. */
static void host_iter_mark(ex *x)
{
    x->h.busy_us = x->h.alloc_us = 0;
    x->h.retries0 = alloc_get_stats(x->alloc)->num_alloc_retries;
}

/* Issues actions in program order until the thread is busy, waits, or is done. */
static void host_step(ex *x)
{
    hthread *h = &x->h;
    size_t n = x->nacts;
    while (!x->stop && h->state == H_READY) {
        if (h->next >= n) {
            h->state = H_DONE;
            return;
        }
        size_t i = h->next;
        const sched_action *a = ex_act(x, i);
        switch (a->kind) {
        case SA_COMPUTE: {
            double us = compute_host_us(x, a, x->o.issue_us > 0 ? x->o.issue_us : 0);
            if (us > 0) {
                host_busy(x, us, 1, 0);
                return;
            }
            host_enqueue(x, i);
            break;
        }
        case SA_COPY_D2H:
        case SA_COPY_H2D:
        case SA_HOST_COMPUTE:
        case SA_RECORD:
        case SA_WAIT:
            if (x->o.issue_us > 0) {
                host_busy(x, x->o.issue_us, 1, 0);
                return;
            }
            host_enqueue(x, i);
            break;
        case SA_MARK:
            if (a->stream == SS_COMPUTE && a->mark == TM_ITER) host_iter_mark(x);
            host_enqueue(x, i);
            break;
        case SA_ALLOC: host_alloc(x, i, a); break;
        case SA_FREE: host_free(x, i, a); break;
        case SA_HOST_ALLOC: host_host_alloc(x, i, a); break;
        case SA_HOST_FREE: host_host_free(x, i, a); break;
        default:
            ex_fail_at(x, MS_ERR_INVALID, i, "unknown action kind");
            return;
        }
    }
}

/* Issue model: stream s gets work again after waiting for the host thread; the compute
 * stream's wait is a stall. */
void exh_end_starve(ex *x, int s)
{
    stream *t = &x->st[s];
    double now = eng_now(x->eng);
    t->starving = 0;
    if (s == SS_COMPUTE) {
        ex_acc(x, &x->w.stall_us, t->starve_since, now);
        ex_add_span(x, s, t->starve_since, now, t->q[t->pos], "wait host", "wait");
    }
}

static void hc_wake_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    ex *x = ctx;
    x->st[arg].hc_wake_pending = 0;
    ex_advance(x, (int)arg);
}

/* Stream-time model with host times: compute action a at the head of stream s may start once
 * the host has issued it. The host clock runs on its own, one compute action after another
 * (hc_t += its host time, and the latency of the allocator calls it makes), held back only
 * by the ops and allocator calls that synchronize and the iteration marks; the kernel starts
 * at max(the GPU free, the host's issue). Returns 1 when it may
 * start now, else the stream waits for the host ("wait host") and 0. */
int exh_clock_ready(ex *x, int s, const sched_action *a)
{
    stream *t = &x->st[s];
    double now = eng_now(x->eng);
    if (t->hc_pos != t->pos + 1) {
        x->hc_t += compute_host_us(x, a, 0);
        t->hc_pos = t->pos + 1;
        t->hc_ready = x->hc_t;
    }
    if (!(t->hc_ready > now)) return 1;
    if (!t->starving) {
        t->starving = 1;
        t->starve_since = now;
    }
    if (!t->hc_wake_pending) {
        if (!eng_post(x->eng, t->hc_ready, hc_wake_cb, x, (uint64_t)s)) {
            ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
            return 0;
        }
        t->hc_wake_pending = 1;
    }
    return 0;
}

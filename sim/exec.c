/* exec.c — the schedule executor of the simulator (see exec.h): splits the schedule into
 * per-stream queues, runs each stream's actions in order on the discrete-event engine
 * (compute on the GPU, copies and DHA traffic as flows on the host link, host CPU work in
 * FIFO order, events, allocator calls over the simulated memory backend with their latencies
 * and device synchronizes), and fills a sim_result. With sim_opts.issue_ahead set, a host
 * thread issues the program: streams run only what it has issued, and allocator calls,
 * their latencies and synchronizes happen on it, with frees of blocks other streams use
 * deferred until those uses end. Where the trace's ops give host times (captured traces), a
 * host clock decides when each kernel may start, or the host thread pays them. Semantics in
 * docs/SIMULATOR.md. Used by the memsim command, experiments/ and the validation driver. */
#include "sim/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/engine.h"
#include "sim/link.h"
#include "sim/simbackend.h"
#include "sim/timeline.h"
#include "base/u64map.h"

typedef enum st_state {
    ST_IDLE = 0,    /* may start its next action */
    ST_RUN,         /* an action is in progress */
    ST_WAIT,        /* blocked on a WAIT whose event is not reached */
    ST_SYNC_DRAIN,  /* made a synchronizing allocator call; other streams are draining */
    ST_SYNC_COST,   /* drained; paying the call's charged latency */
    ST_DONE
} st_state;

typedef struct stream {
    uint32_t *q;        /* schedule indices, program order */
    size_t n, pos;
    st_state state;
    int parts;          /* parts of the running action still going (timer, DHA flows) */
    double t_start;     /* when the running action (or the wait / sync) began */
    double t_exec;      /* HOST_COMPUTE: when the CPU took it (FIFO) */
    double t_end_exec;
    uint32_t wait_event;
    int held;           /* wanted to go on but a synchronize holds every stream */
    double held_since;
    int kick_pending;
    double sa_left;     /* cuMemSetAccess mappings of its allocator call still to pace */
    /* host issue model */
    size_t nissued;     /* queue entries the host thread has issued to this stream */
    int starving;       /* idle until the host issues more */
    double starve_since;
    /* host clock (stream-time model with host times) */
    size_t hc_pos;      /* 1 + the queue position whose issue time hc_ready is */
    double hc_ready;
    int hc_wake_pending;
} stream;

/* The host thread of the issue model. */
typedef enum h_state {
    H_READY = 0,    /* may issue its next action */
    H_BUSY,         /* paying an issue cost or an allocator call's latency */
    H_AHEAD,        /* more than issue_ahead compute actions issued and unfinished */
    H_DRAIN,        /* a synchronizing allocator call: every stream must finish its work */
    H_FREES,        /* an allocation failed: waits for the uses of every deferred free */
    H_OPSYNC,       /* an action the host waits for (trace op host_sync, a host_wait copy) is
                       not finished: stream sync_stream has not run all it was given */
    H_DONE
} h_state;

typedef struct hthread {
    size_t next;            /* the next action to issue, program order */
    h_state state;
    int kick_pending;
    int enqueue_after;      /* H_BUSY: issue action `next` when the busy time ends */
    int alloc_busy;         /* H_BUSY: the busy time is an allocator call's */
    double t0;              /* start of the busy time or wait */
    size_t wait_idx;        /* the action a wait is about */
    double drain_cost_us;   /* H_DRAIN: the call's latency, paid once drained */
    size_t call_idx;        /* the allocator call being paid for */
    double call_t0;         /* when it began */
    int call_synced;        /* it synchronized the device */
    int frees_synced;       /* H_FREES: the failed call synchronized: wait for all streams */
    double frees_cost_us;   /* H_FREES: the failed call's latency, paid after the wait */
    int retried;            /* the action at `next` already waited for deferred frees */
    double sa_left;         /* cuMemSetAccess mappings of the call still to pace */
    uint64_t c_issued, c_done; /* compute actions issued, finished */
    int sync_stream;        /* H_OPSYNC: the stream of the action waited for */
    int64_t ahead;          /* the bound; INT64_MAX when unbounded */
    /* from the host's issue of the last iteration mark */
    double busy_us, alloc_us;
    uint64_t retries0;
    /* whole run */
    uint64_t waits, deferred;
} hthread;

/* A free held back until the uses issued on other streams before it have run (PyTorch's
 * record_stream): one "event" per such stream, reached when that stream has passed the
 * actions issued to it before the free. Completed at the next allocation, as PyTorch's
 * process_events does. */
typedef struct pend_free {
    uint64_t tensor;
    uint64_t value;         /* device: the block's address; host: bytes */
    int outstanding;        /* events not yet seen reached */
    uint8_t host;
} pend_free;

/* A stream's events of deferred frees, in the order they were made: their targets never
 * decrease, so only the head can be the next one reached (the runtime keeps the same
 * per-stream FIFOs of CUDA events and polls them in stream order). */
#define PEND_DONE UINT32_MAX  /* pend_ev.pend of an event completed out of turn (flush) */

typedef struct pend_ev {
    uint32_t pend;          /* slot in ex.pd; PEND_DONE: already completed */
    size_t target;          /* reached when the stream's pos >= target */
} pend_ev;

typedef struct pend_fifo {
    pend_ev *v;
    size_t head, n, cap;
} pend_fifo;

/* Time sums over the measured window (the last iteration, see win_t0). */
typedef struct window {
    double compute_us, recompute_us, host_us, stall_us, alloc_us;
} window;

typedef struct ex {
    const schedule_t *s;
    const machine_t *m;
    sim_opts o;
    eng_t *eng;
    link_t *link;
    simbe_t *be;
    alloc_t *alloc;
    tl_t *tl;
    stream st[SS_COUNT];
    uint32_t *qbuf;
    uint8_t *reached;
    uint32_t nevents;
    u64map *dev;         /* tensor id -> device address */
    blockmix *mix;       /* what the peak holds (sim_result.peak_live_bytes) */
    u64map *host;        /* tensor id -> host bytes */
    uint64_t host_used, host_peak, host_cap;
    double host_free_at; /* the host CPU is a FIFO server */
    int sync_owner;      /* stream holding everything, -1: none */
    double sync_cost_us;
    /* host issue model (o.issue_ahead != 0) */
    int issue;
    hthread h;
    /* host times of the trace's ops (trace_op.host_us, host_sync; captured traces) */
    int host_times;      /* the trace gives some: COMPUTE issues cost them, not issue_us */
    int host_clock;      /* stream-time model: compute waits for the host's issue time */
    double hc_t;         /* the host clock: when it issued the last compute action */
    int hc_last_rec;     /* the last compute action issued was a recomputation ... */
    int32_t hc_last_layer; /* ... of this layer */
    pend_free *pd;       /* deferred frees (slots; free slots listed in pd_free) */
    size_t n_pd, cap_pd;
    uint32_t *pd_free;
    size_t n_pd_free, cap_pd_free;
    size_t n_live[2];    /* deferred frees not yet done: device, host */
    pend_fifo fq[SS_COUNT];
    u64map *duse;        /* tensor -> allocating stream | streams that used it << 8 */
    u64map *huse;        /* tensor -> streams that used its host memory */
    int side_defer;      /* FREE.side_use defers: a PyTorch allocator (not one with
                            ALLOC_CAP_STATIC_PLAN, whose planned addresses no recordStream
                            touches) */
    /* measured window: from the last TM_ITER mark on the compute stream (or 0) */
    double win_t0;
    window w;
    double h2d0_us, d2h0_us;
    uint64_t retries0;
    double t_end;
    /* how the run ended */
    int stop;
    res_status rstatus;
    ms_status fatal;
    char failure[512];
    ms_error *err;
} ex;

/* Track SS_COUNT is the host thread of the issue model. */
#define TRACK_HOST_THREAD SS_COUNT
static const char *const track_names[SS_COUNT + 1] = { "compute", "d2h copy", "h2d copy",
                                                       "host cpu", "host thread" };

void sim_opts_default(sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->allocator = "caching";
    o->host_sharers = 1;
    o->issue_us = SIM_ISSUE_US_DEFAULT;
}

/* ---------- small helpers ---------- */

static void acc(const ex *x, double *field, double s_us, double e_us)
{
    double a = s_us > x->win_t0 ? s_us : x->win_t0;
    if (e_us > a) *field += e_us - a;
}

static void fail_run(ex *x, ms_status st, const char *fmt_msg)
{
    if (x->fatal == MS_OK) {
        x->fatal = st;
        ms_fail(x->err, st, "%s", fmt_msg);
    }
    x->stop = 1;
    eng_stop(x->eng);
}

static void fail_at(ex *x, ms_status st, size_t idx, const char *what)
{
    char msg[600];
    const sched_action *a = sched_get(x->s, idx);
    snprintf(msg, sizeof msg, "schedule action %zu (%s on stream %s): %s", idx,
             sched_kind_name(a->kind), sched_stream_name(a->stream), what);
    fail_run(x, st, msg);
}

/* The allocator's own reason for a failed call where it gives one (the static arena: plan
 * and trace disagree), else the status's name. */
static const char *alloc_why(const ex *x, ms_status st)
{
    const char *why = alloc_problem(x->alloc);
    return why[0] ? why : ms_status_str(st);
}

static void end_as(ex *x, res_status rs)
{
    x->rstatus = rs;
    x->stop = 1;
    eng_stop(x->eng);
}

/* The trace op a compute action runs (NULL when the schedule names none or no trace). */
static const trace_op *action_op(const ex *x, const sched_action *a)
{
    return (x->o.trace && a->op >= 0) ? trace_find_op(x->o.trace, (uint64_t)a->op) : NULL;
}

/* Host time to issue compute action a: its op's host_us where the trace gives host times,
 * else dflt_us; plus the profile's host.recompute_layer_us where a recomputation of a layer
 * begins (a replayed action after an action that was not one, or of another layer).
 * Called once per compute action, in program order. */
static double compute_host_us(ex *x, const sched_action *a, double dflt_us)
{
    double us = dflt_us;
    if (x->host_times) {
        const trace_op *t = action_op(x, a);
        us = t ? t->host_us : 0;
    }
    if (a->recompute && (!x->hc_last_rec || a->layer != x->hc_last_layer))
        us += x->m->host_recompute_layer_us;
    x->hc_last_rec = a->recompute != 0;
    x->hc_last_layer = a->layer;
    return us;
}

/* The host waits for this copy before it goes on (a blocking copy), where the trace gives
 * host times: without them no host is modelled in stream time, and the issue model keeps
 * its old behaviour. */
static int action_host_wait(const ex *x, const sched_action *a)
{
    return x->host_times && a->host_wait &&
           (a->kind == SA_COPY_D2H || a->kind == SA_COPY_H2D);
}

/* The host waits for the GPU to finish this compute action before it goes on. */
static int compute_host_sync(const ex *x, const sched_action *a)
{
    const trace_op *t = x->host_times ? action_op(x, a) : NULL;
    return t && t->host_sync;
}

static const char *op_name(const ex *x, int64_t op, char *buf, size_t n)
{
    const trace_op *t = (x->o.trace && op >= 0) ? trace_find_op(x->o.trace, (uint64_t)op) : NULL;
    if (t && t->name[0]) snprintf(buf, n, "%s", t->name);
    else snprintf(buf, n, "op %lld", (long long)op);
    return buf;
}

static const char *tensor_name(const ex *x, uint64_t id, char *buf, size_t n)
{
    const trace_tensor *t = x->o.trace ? trace_find_tensor(x->o.trace, id) : NULL;
    if (t && t->name[0]) snprintf(buf, n, "%s", t->name);
    else snprintf(buf, n, "t%llu", (unsigned long long)id);
    return buf;
}

static void mem_sample(ex *x)
{
    if (!x->tl) return;
    const alloc_stats *a = alloc_get_stats(x->alloc);
    uint64_t kinds[BM_COUNT];
    bm_live(x->mix, kinds);
    if (tl_mem(x->tl, eng_now(x->eng), a->allocated_bytes, a->reserved_bytes, a->active_bytes,
               x->host_used, kinds) != MS_OK)
        fail_run(x, MS_ERR_NOMEM, "out of memory recording the memory time series");
}

/* Spans are recorded (and their names formatted) only for a timeline or an intervals CSV. */
static int spans_on(const ex *x)
{
    return x->tl && (x->o.timeline_path || x->o.timeline_out || x->o.intervals_path);
}

static void add_span(ex *x, int track, double s_us, double e_us, size_t idx, const char *name,
                     const char *cat)
{
    if (!spans_on(x) || !(e_us > s_us)) return;
    const sched_action *a = sched_get(x->s, idx);
    int has_t = a->kind != SA_COMPUTE && a->kind != SA_HOST_COMPUTE && a->kind != SA_WAIT;
    tl_span_info si = { track, s_us, e_us, name, cat, (int64_t)idx,
                        a->kind == SA_COMPUTE ? a->op : -1, a->tensor, has_t,
                        a->kind == SA_COMPUTE ? a->host_read_bytes + a->host_write_bytes
                                              : a->bytes };
    if (tl_span(x->tl, &si) != MS_OK)
        fail_run(x, MS_ERR_NOMEM, "out of memory recording the timeline");
}

static void advance(ex *x, int s);

static void kick_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    ex *x = ctx;
    x->st[arg].kick_pending = 0;
    advance(x, (int)arg);
}

/* Lets stream s look at its queue again, from an event at the current time (never by
 * recursion, so the order of simultaneous wake-ups is the engine's sequence order). */
static void kick(ex *x, int s)
{
    if (x->st[s].kick_pending || x->stop) return;
    if (!eng_after(x->eng, 0, kick_cb, x, (uint64_t)s)) {
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
        return;
    }
    x->st[s].kick_pending = 1;
}

/* ---------- synchronizes ---------- */

static void sync_done_cb(eng_t *e, void *ctx, uint64_t arg);

/* The caller's drain is over when no other stream has an action in progress. */
static void check_drain(ex *x)
{
    int s = x->sync_owner;
    if (s < 0 || x->st[s].state != ST_SYNC_DRAIN) return;
    for (int k = 0; k < SS_COUNT; k++)
        if (k != s && x->st[k].state == ST_RUN) return;
    x->st[s].state = ST_SYNC_COST;
    if (!eng_after(x->eng, x->sync_cost_us, sync_done_cb, x, (uint64_t)s))
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

static void sync_done_cb(eng_t *e, void *ctx, uint64_t arg)
{
    ex *x = ctx;
    int s = (int)arg;
    stream *t = &x->st[s];
    double now = eng_now(e);
    size_t idx = t->q[t->pos];
    acc(x, &x->w.alloc_us, t->t_start, now);
    if (s == SS_COMPUTE) acc(x, &x->w.stall_us, t->t_start, now);
    if (spans_on(x)) {
        char name[TL_NAME_MAX], tn[48];
        snprintf(name, sizeof name, "sync (%s %s)",
                 sched_get(x->s, idx)->kind == SA_FREE ? "free" : "alloc",
                 tensor_name(x, sched_get(x->s, idx)->tensor, tn, sizeof tn));
        add_span(x, s, t->t_start, now, idx, name, "sync");
    }
    x->sync_owner = -1;
    t->state = ST_IDLE;
    t->pos++;
    if (now > x->t_end) x->t_end = now;
    if (x->host_clock && x->hc_t < now) x->hc_t = now;
    for (int k = 0; k < SS_COUNT; k++) {
        if (x->st[k].held) {
            if (k == SS_COMPUTE) acc(x, &x->w.stall_us, x->st[k].held_since, now);
            x->st[k].held = 0;
        }
        kick(x, k);
    }
}

/* ---------- action completion ---------- */

static void action_done(ex *x, int s)
{
    stream *t = &x->st[s];
    double now = eng_now(x->eng);
    size_t idx = t->q[t->pos];
    const sched_action *a = sched_get(x->s, idx);
    char name[TL_NAME_MAX], nb[48];
    int sp = spans_on(x);
    switch (a->kind) {
    case SA_COMPUTE:
        x->h.c_done++;
        if (x->host_clock && now > x->hc_t && compute_host_sync(x, a)) x->hc_t = now;
        acc(x, &x->w.compute_us, t->t_start, now);
        if (a->recompute) acc(x, &x->w.recompute_us, t->t_start, now);
        if (!sp) break;
        snprintf(name, sizeof name, "%s%s", a->recompute ? "recompute " : "",
                 op_name(x, a->op, nb, sizeof nb));
        add_span(x, s, t->t_start, now, idx, name, a->recompute ? "recompute" : "compute");
        break;
    case SA_HOST_COMPUTE:
        acc(x, &x->w.host_us, t->t_exec, t->t_end_exec);
        if (!sp) break;
        snprintf(name, sizeof name, "host %s", a->op >= 0 ? op_name(x, a->op, nb, sizeof nb)
                                                          : "compute");
        add_span(x, s, t->t_exec, t->t_end_exec, idx, name, "host");
        break;
    case SA_COPY_D2H:
    case SA_COPY_H2D:
        if (x->host_clock && now > x->hc_t && action_host_wait(x, a)) x->hc_t = now;
        if (!sp) break;
        snprintf(name, sizeof name, "%s %s", a->kind == SA_COPY_D2H ? "d2h" : "h2d",
                 tensor_name(x, a->tensor, nb, sizeof nb));
        add_span(x, s, t->t_start, now, idx, name, "copy");
        break;
    default: /* ALLOC / FREE paying the backend's latency */
        acc(x, &x->w.alloc_us, t->t_start, now);
        if (!sp) break;
        snprintf(name, sizeof name, "%s %s", a->kind == SA_FREE ? "free" : "alloc",
                 tensor_name(x, a->tensor, nb, sizeof nb));
        add_span(x, s, t->t_start, now, idx, name, "alloc");
        break;
    }
    t->state = ST_IDLE;
    t->pos++;
    if (now > x->t_end) x->t_end = now;
    check_drain(x);
    advance(x, s);
}

static void part_done(ex *x, int s)
{
    if (--x->st[s].parts == 0) action_done(x, s);
}

static void timer_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    part_done(ctx, (int)arg);
}

static void flow_cb(void *ctx, uint64_t arg) { part_done(ctx, (int)arg); }

/* ---------- starting actions ---------- */

static void start_flow(ex *x, int s, link_dir dir, uint64_t bytes, double cap_Bps)
{
    ms_status st = link_start(x->link, dir, bytes, cap_Bps, flow_cb, x, (uint64_t)s, NULL);
    if (st != MS_OK) fail_run(x, st, "cannot start a link flow (out of memory)");
}

/* DHA traffic shares the link with copies by the profile's weight (measured unfair on
 * Hopper: the kernel's reads win over a concurrent copy). */
static void start_dha_flow(ex *x, int s, link_dir dir, uint64_t bytes, double cap_Bps)
{
    ms_status st = link_start_dha(x->link, dir, bytes, cap_Bps, flow_cb, x, (uint64_t)s, NULL);
    if (st != MS_OK) fail_run(x, st, "cannot start a DHA link flow (out of memory)");
}

static void start_timer(ex *x, int s, double dur_us)
{
    if (!eng_after(x->eng, dur_us, timer_cb, x, (uint64_t)s))
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

/* A DHA kernel's efficiency applies to the link rate its reads and writes get; a missing
 * (<= 0) efficiency is taken as 1 rather than as a kernel that never finishes. */
static void start_compute(ex *x, int s, const sched_action *a)
{
    double eff = a->dha_eff > 0 ? a->dha_eff : 1.0;
    stream *t = &x->st[s];
    t->parts = 1 + (a->host_read_bytes > 0) + (a->host_write_bytes > 0);
    start_timer(x, s, a->dur_us > 0 ? a->dur_us : 0);
    if (a->host_read_bytes)
        start_dha_flow(x, s, LINK_H2D, a->host_read_bytes, x->m->dha_read_Bps * eff);
    if (a->host_write_bytes)
        start_dha_flow(x, s, LINK_D2H, a->host_write_bytes, x->m->dha_write_Bps * eff);
}

static void copy_lat_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    ex *x = ctx;
    int s = (int)arg;
    const sched_action *a = sched_get(x->s, x->st[s].q[x->st[s].pos]);
    if (a->kind == SA_COPY_H2D) start_flow(x, s, LINK_H2D, a->bytes, x->m->link_h2d_Bps);
    else start_flow(x, s, LINK_D2H, a->bytes, x->m->link_d2h_Bps);
}

static void start_copy(ex *x, int s)
{
    x->st[s].parts = 1;
    double lat = x->m->link_small_copy_us > 0 ? x->m->link_small_copy_us : 0;
    if (!eng_after(x->eng, lat, copy_lat_cb, x, (uint64_t)s))
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

static void start_host(ex *x, int s, const sched_action *a)
{
    stream *t = &x->st[s];
    double now = eng_now(x->eng);
    t->t_exec = x->host_free_at > now ? x->host_free_at : now;
    t->t_end_exec = t->t_exec + (a->dur_us > 0 ? a->dur_us : 0);
    x->host_free_at = t->t_end_exec;
    t->parts = 1;
    if (!eng_at(x->eng, t->t_end_exec, timer_cb, x, (uint64_t)s))
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

/* ---------- allocator and host memory ---------- */

static void oom_failure(ex *x, int s, size_t idx, const sched_action *a)
{
    bm_failed(x->mix);
    const alloc_stats *st = alloc_get_stats(x->alloc);
    char b0[32], b1[32], b2[32], b3[32], b4[32], tn[48];
    uint64_t cached = st->reserved_bytes > st->allocated_bytes
                          ? st->reserved_bytes - st->allocated_bytes : 0;
    snprintf(x->failure, sizeof x->failure,
             "out of device memory allocating tensor %llu '%s' of %llu bytes (%s) on stream %s "
             "at action %zu, t=%.3f us: allocated %s, reserved %s, free cached %s "
             "(reserved - allocated), capacity %s",
             (unsigned long long)a->tensor, tensor_name(x, a->tensor, tn, sizeof tn),
             (unsigned long long)a->bytes, ms_fmt_bytes(a->bytes, b0, sizeof b0),
             sched_stream_name((sched_stream)s), idx, eng_now(x->eng),
             ms_fmt_bytes(st->allocated_bytes, b1, sizeof b1),
             ms_fmt_bytes(st->reserved_bytes, b2, sizeof b2), ms_fmt_bytes(cached, b3, sizeof b3),
             ms_fmt_bytes(simbe_backend(x->be)->capacity_bytes, b4, sizeof b4));
}

/* One cuMemSetAccess mapping's time, decided as it starts: slower while a device-to-host copy
 * is on the link (the profile's vmm.set_access_d2h_us; sim/simbackend.c). */
static double set_access_step_us(const ex *x)
{
    return link_copies_left_us(x->link, LINK_D2H) > 0 ? x->m->vmm_set_access_d2h_us
                                                       : x->m->vmm_set_access_us;
}

/* Paces the next of *left mappings: one step, then cb(arg) again. Returns 0 when none is left. */
static int pace_mapping(ex *x, double *left, eng_fn cb, uint64_t arg)
{
    if (!(*left > 0)) return 0;
    *left -= 1;
    if (!eng_after(x->eng, set_access_step_us(x), cb, x, arg))
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
    return 1;
}

/* An allocator call's charged latency, and in *paced its cuMemSetAccess mappings to pace; after
 * a synchronize in the call the device has drained (no copy runs), so those cost the plain
 * rate at once. */
static double take_call_cost(ex *x, int *synced, double *paced)
{
    *paced = simbe_take_set_access_mappings(x->be);
    double cost = simbe_take_cost_us(x->be, synced);
    if (*synced) {
        cost += *paced * x->m->vmm_set_access_us;
        *paced = 0;
    }
    return cost;
}

/* The end of an allocator call's latency on stream s: its paced mappings, one by one, then
 * the action is done. */
static void alloc_timer_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    ex *x = ctx;
    if (!pace_mapping(x, &x->st[(int)arg].sa_left, alloc_timer_cb, arg)) part_done(x, (int)arg);
}

/* After an allocator call: a synchronize holds every stream; a plain latency occupies the
 * calling stream. Returns 1 when the stream may go straight on to its next action. */
static int after_alloc_call(ex *x, int s)
{
    int synced = 0;
    double paced;
    double cost = take_call_cost(x, &synced, &paced);
    stream *t = &x->st[s];
    t->t_start = eng_now(x->eng);
    /* the program's host thread made the call: its latency delays the host's later issues
     * (a synchronizing call's, at its end: sync_done_cb) */
    if (x->host_clock && !synced)
        x->hc_t += (cost > 0 ? cost : 0) + paced * x->m->vmm_set_access_us;
    if (synced) {
        x->sync_owner = s;
        x->sync_cost_us = cost > 0 ? cost : 0;
        t->state = ST_SYNC_DRAIN;
        check_drain(x);
        return 0;
    }
    if (cost > 0 || paced > 0) {
        t->state = ST_RUN;
        t->parts = 1;
        t->sa_left = paced;
        if (!eng_after(x->eng, cost > 0 ? cost : 0, alloc_timer_cb, x, (uint64_t)s))
            fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
        return 0;
    }
    t->pos++;
    return 1;
}

/* The stream whose pools serve an ALLOC: its own, or a framework side stream's (pool k > 0,
 * numbered after the executor's streams). */
static int pool_stream(int s, const sched_action *a)
{
    return a->pool > 0 ? SS_COUNT - 1 + a->pool : s;
}

static int do_alloc(ex *x, int s, size_t idx, const sched_action *a)
{
    if (u64map_get(x->dev, a->tensor, NULL)) {
        fail_at(x, MS_ERR_INVALID, idx, "tensor is already allocated");
        return 0;
    }
    uint64_t addr = 0;
    ms_status st = alloc_block(x->alloc, a->bytes, pool_stream(s, a), a->tensor, &addr);
    if (st == MS_ERR_OOM) {
        oom_failure(x, s, idx, a);
        end_as(x, RS_OOM);
        return 0;
    }
    if (st != MS_OK) {
        fail_at(x, st, idx, alloc_why(x, st));
        return 0;
    }
    if (u64map_put(x->dev, a->tensor, addr) || !bm_alloc(x->mix, a->tensor, (sched_block)a->block, addr, a->bytes)) {
        fail_run(x, MS_ERR_NOMEM, "out of memory");
        return 0;
    }
    mem_sample(x);
    return after_alloc_call(x, s);
}

static int do_free(ex *x, int s, size_t idx, const sched_action *a)
{
    uint64_t addr;
    if (!u64map_del(x->dev, a->tensor, &addr)) {
        fail_at(x, MS_ERR_INVALID, idx,
                "tensor is not allocated at this point of the run (never allocated, already "
                "freed, or its ALLOC is on another stream that has not reached it: a "
                "missing WAIT)");
        return 0;
    }
    ms_status st = alloc_release(x->alloc, addr);
    if (st != MS_OK) {
        fail_at(x, st, idx, alloc_why(x, st));
        return 0;
    }
    bm_release(x->mix, addr);
    mem_sample(x);
    return after_alloc_call(x, s);
}

static void oohm_failure(ex *x, int s, size_t idx, const sched_action *a)
{
    char b0[32], b1[32], b2[32], tn[48];
    snprintf(x->failure, sizeof x->failure,
             "out of host memory reserving %llu bytes (%s) for tensor %llu '%s' on stream "
             "%s at action %zu, t=%.3f us: host in use %s of this GPU's %s",
             (unsigned long long)a->bytes, ms_fmt_bytes(a->bytes, b0, sizeof b0),
             (unsigned long long)a->tensor, tensor_name(x, a->tensor, tn, sizeof tn),
             sched_stream_name((sched_stream)s), idx, eng_now(x->eng),
             ms_fmt_bytes(x->host_used, b1, sizeof b1), ms_fmt_bytes(x->host_cap, b2, sizeof b2));
    end_as(x, RS_OOHM);
}

/* Host memory is accounted, not timed: pinned buffers are taken as allocated before the
 * measured iterations (cudaHostAlloc costs ~0.5 s/GiB and frameworks pool it). */
static int do_host_alloc(ex *x, int s, size_t idx, const sched_action *a)
{
    if (u64map_get(x->host, a->tensor, NULL)) {
        fail_at(x, MS_ERR_INVALID, idx, "tensor already has host memory");
        return 0;
    }
    if (x->host_cap && a->bytes > x->host_cap - x->host_used) {
        oohm_failure(x, s, idx, a);
        return 0;
    }
    if (u64map_put(x->host, a->tensor, a->bytes)) {
        fail_run(x, MS_ERR_NOMEM, "out of memory");
        return 0;
    }
    x->host_used += a->bytes;
    if (x->host_used > x->host_peak) x->host_peak = x->host_used;
    mem_sample(x);
    x->st[s].pos++;
    return 1;
}

static int do_host_free(ex *x, int s, size_t idx, const sched_action *a)
{
    uint64_t bytes;
    if (!u64map_del(x->host, a->tensor, &bytes)) {
        fail_at(x, MS_ERR_INVALID, idx,
                "tensor has no host memory at this point of the run (never reserved, "
                "already released, or its HOST_ALLOC is on another stream that has not "
                "reached it: a missing WAIT)");
        return 0;
    }
    x->host_used -= bytes;
    mem_sample(x);
    x->st[s].pos++;
    return 1;
}

/* The stream-time model: allocator and host-memory calls when the stream reaches them. */
static int stream_mem_action(ex *x, int s, size_t idx, const sched_action *a)
{
    switch (a->kind) {
    case SA_ALLOC: return do_alloc(x, s, idx, a);
    case SA_FREE: return do_free(x, s, idx, a);
    case SA_HOST_ALLOC: return do_host_alloc(x, s, idx, a);
    default: return do_host_free(x, s, idx, a);
    }
}

/* ---------- events, marks ---------- */

static void record_event(ex *x, uint32_t ev)
{
    double now = eng_now(x->eng);
    x->reached[ev] = 1;
    for (int k = 0; k < SS_COUNT; k++) {
        stream *t = &x->st[k];
        if (t->state != ST_WAIT || t->wait_event != ev) continue;
        if (k == SS_COMPUTE) acc(x, &x->w.stall_us, t->t_start, now);
        if (spans_on(x)) {
            char name[TL_NAME_MAX];
            snprintf(name, sizeof name, "wait e%u", ev);
            add_span(x, k, t->t_start, now, t->q[t->pos], name, "wait");
        }
        t->state = ST_IDLE;
        t->pos++;
        kick(x, k);
    }
}

/* A TM_ITER mark on the compute stream opens a new measured window. */
static void iter_mark(ex *x)
{
    x->win_t0 = eng_now(x->eng);
    /* the measured step begins with the host and the GPU in step (a timed step synchronizes
     * before it; a loop that reads its loss does at the end of each step) */
    if (x->host_clock && x->hc_t < x->win_t0) x->hc_t = x->win_t0;
    memset(&x->w, 0, sizeof x->w);
    x->h2d0_us = link_busy_us(x->link, LINK_H2D);
    x->d2h0_us = link_busy_us(x->link, LINK_D2H);
    x->retries0 = alloc_get_stats(x->alloc)->num_alloc_retries;
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
static void host_kick(ex *x)
{
    if (x->h.kick_pending || x->stop) return;
    if (!eng_after(x->eng, 0, host_kick_cb, x, 0)) {
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
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
    add_span(x, TRACK_HOST_THREAD, x->h.t0, eng_now(x->eng), x->h.wait_idx, what, "wait");
    x->h.state = H_READY;
    host_kick(x);
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
    if (!eng_after(x->eng, dur_us > 0 ? dur_us : 0, host_busy_cb, x, 0))
        fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

/* Every stream has run all the host gave it (a device synchronize returns). */
static int streams_drained(const ex *x)
{
    for (int k = 0; k < SS_COUNT; k++)
        if (x->st[k].pos < x->st[k].nissued) return 0;
    return 1;
}

/* Every deferred free's uses have run (each stream passed its last event's target). */
static int pending_all_done(const ex *x)
{
    for (int k = 0; k < SS_COUNT; k++) {
        const pend_fifo *f = &x->fq[k];
        if (f->head < f->n && x->st[k].pos < f->v[f->n - 1].target) return 0;
    }
    return 1;
}

/* Holds a free back until the uses issued so far on the streams in mask have run. */
static int pend_add(ex *x, uint64_t tensor, uint64_t value, unsigned mask, int host)
{
    uint32_t slot;
    if (x->n_pd_free) {
        slot = x->pd_free[--x->n_pd_free];
    } else {
        if (x->n_pd >= UINT32_MAX ||
            ms_grow((void **)&x->pd, &x->cap_pd, x->n_pd + 1, sizeof *x->pd) != MS_OK)
            goto nomem;
        slot = (uint32_t)x->n_pd++;
    }
    pend_free *p = &x->pd[slot];
    p->tensor = tensor;
    p->value = value;
    p->host = (uint8_t)host;
    p->outstanding = 0;
    for (int k = 0; k < SS_COUNT; k++) {
        if (!(mask & (1u << k))) continue;
        pend_fifo *f = &x->fq[k];
        if (ms_grow((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v) != MS_OK) goto nomem;
        f->v[f->n].pend = slot;
        f->v[f->n].target = x->st[k].nissued;
        f->n++;
        p->outstanding++;
    }
    x->n_live[host]++;
    return 1;
nomem:
    fail_run(x, MS_ERR_NOMEM, "out of memory");
    return 0;
}

/* A deferred free whose events are all reached goes back. */
static int pend_release(ex *x, uint32_t slot)
{
    pend_free *p = &x->pd[slot];
    x->n_live[p->host]--;
    if (p->host) {
        x->host_used -= p->value;
    } else {
        ms_status st = alloc_release(x->alloc, p->value);
        if (st != MS_OK) {
            char msg[300];
            snprintf(msg, sizeof msg, "releasing the deferred block of tensor %llu: %s",
                     (unsigned long long)p->tensor, alloc_why(x, st));
            fail_run(x, st, msg);
            return 0;
        }
        bm_release(x->mix, p->value);
    }
    if (ms_grow((void **)&x->pd_free, &x->cap_pd_free, x->n_pd_free + 1, sizeof *x->pd_free) !=
        MS_OK) {
        fail_run(x, MS_ERR_NOMEM, "out of memory");
        return 0;
    }
    x->pd_free[x->n_pd_free++] = slot;
    return 1;
}

/* PyTorch's process_events, in the runtime's order: each stream's reached events, streams
 * in order; a free goes back when its last event is seen. */
static int process_pending(ex *x)
{
    int released = 0;
    for (int k = 0; k < SS_COUNT; k++) {
        pend_fifo *f = &x->fq[k];
        while (f->head < f->n && x->st[k].pos >= f->v[f->head].target) {
            uint32_t slot = f->v[f->head++].pend;
            if (slot == PEND_DONE) continue;
            if (--x->pd[slot].outstanding == 0) {
                if (!pend_release(x, slot)) return 0;
                released = 1;
            }
        }
        if (f->head == f->n) f->head = f->n = 0;
    }
    if (released) mem_sample(x);
    return 1;
}

/* The caching allocator's events hook: it synchronized the device inside release_cached
 * (PyTorch's synchronize_and_free_events), so every deferred device free goes back now, before
 * it frees its cached segments. Pinned frees stay for the host allocator's next allocation. */
static void flush_device_frees(void *ctx)
{
    ex *x = ctx;
    int released = 0;
    for (int k = 0; k < SS_COUNT && !x->stop; k++) {
        pend_fifo *f = &x->fq[k];
        for (size_t j = f->head; j < f->n && !x->stop; j++) {
            uint32_t slot = f->v[j].pend;
            if (slot == PEND_DONE || x->pd[slot].host) continue;
            f->v[j].pend = PEND_DONE;
            if (--x->pd[slot].outstanding == 0) {
                if (!pend_release(x, slot)) return;
                released = 1;
            }
        }
    }
    if (released) mem_sample(x);
}

/* Called whenever a stream made progress: ends the host thread's wait if it is over. */
static void host_check(ex *x)
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
        if (h->frees_synced ? streams_drained(x) : pending_all_done(x)) {
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
        fail_run(x, MS_ERR_NOMEM, "out of memory");
    if (u64map_get(x->huse, tensor, &u) && u64map_put(x->huse, tensor, u | (1ULL << k)))
        fail_run(x, MS_ERR_NOMEM, "out of memory");
}

/* Action i is issued: its stream may run it. A compute action may make the host wait. */
static void host_enqueue(ex *x, size_t i)
{
    hthread *h = &x->h;
    const sched_action *a = sched_get(x->s, i);
    int k = (int)a->stream;
    if (a->kind == SA_COPY_D2H || a->kind == SA_COPY_H2D) note_use(x, a->tensor, k);
    x->st[k].nissued++;
    h->next++;
    h->retried = 0;
    if (x->st[k].starving) kick(x, k);
    if (a->kind == SA_COMPUTE) h->c_issued++;
    h->sync_stream = k;
    if (a->kind == SA_COMPUTE ? compute_host_sync(x, a) : action_host_wait(x, a))
        host_wait(x, H_OPSYNC, i); /* a compute action's implies the run-ahead bound */
    else if (a->kind == SA_COMPUTE && (int64_t)(h->c_issued - h->c_done) > h->ahead)
        host_wait(x, H_AHEAD, i);
}

static void host_busy_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)arg;
    ex *x = ctx;
    hthread *h = &x->h;
    if (h->alloc_busy && pace_mapping(x, &h->sa_left, host_busy_cb, 0)) return;
    double now = eng_now(e);
    h->busy_us += now - h->t0;
    if (h->alloc_busy) {
        /* the span and the allocator time include a synchronize's drain */
        if (spans_on(x)) {
            const sched_action *a = sched_get(x->s, h->call_idx);
            char name[TL_NAME_MAX], tn[48];
            snprintf(name, sizeof name, "%s%s %s%s", h->call_synced ? "sync (" : "",
                     a->kind == SA_FREE ? "free" : a->kind == SA_HOST_ALLOC ? "host alloc"
                                                                            : "alloc",
                     tensor_name(x, a->tensor, tn, sizeof tn), h->call_synced ? ")" : "");
            add_span(x, TRACK_HOST_THREAD, h->call_t0, now, h->call_idx, name,
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
    double cost = take_call_cost(x, &synced, &paced);
    h->call_idx = idx;
    h->call_t0 = eng_now(x->eng);
    h->call_synced = synced;
    if (synced) {
        h->drain_cost_us = cost > 0 ? cost : 0;
        host_wait(x, H_DRAIN, idx);
        host_check(x);
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
        fail_at(x, MS_ERR_INVALID, i, "tensor is already allocated");
        return;
    }
    if (!process_pending(x)) return;
    uint64_t addr = 0;
    ms_status st = alloc_block(x->alloc, a->bytes, pool_stream(s, a), a->tensor, &addr);
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
        host_check(x);
        return;
    }
    if (st == MS_ERR_OOM) {
        oom_failure(x, s, i, a);
        end_as(x, RS_OOM);
        return;
    }
    if (st != MS_OK) {
        fail_at(x, st, i, alloc_why(x, st));
        return;
    }
    if (u64map_put(x->dev, a->tensor, addr) || !bm_alloc(x->mix, a->tensor, (sched_block)a->block, addr, a->bytes) ||
        u64map_put(x->duse, a->tensor, (uint64_t)s | (1ULL << (s + 8)))) {
        fail_run(x, MS_ERR_NOMEM, "out of memory");
        return;
    }
    mem_sample(x);
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
        fail_at(x, MS_ERR_INVALID, i,
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
        if (!pend_add(x, a->tensor, addr, others, 0)) return;
        x->h.deferred++;
    } else {
        ms_status st = alloc_release(x->alloc, addr);
        if (st != MS_OK) {
            fail_at(x, st, i, alloc_why(x, st));
            return;
        }
        bm_release(x->mix, addr);
        mem_sample(x);
    }
    host_enqueue(x, i); /* a no-op for the stream */
    host_after_call(x, i);
}

static void host_host_alloc(ex *x, size_t i, const sched_action *a)
{
    hthread *h = &x->h;
    if (u64map_get(x->host, a->tensor, NULL)) {
        fail_at(x, MS_ERR_INVALID, i, "tensor already has host memory");
        return;
    }
    if (!process_pending(x)) return;
    if (x->host_cap && a->bytes > x->host_cap - x->host_used) {
        if (!h->retried && x->n_live[1]) {
            h->retried = 1;
            h->frees_synced = 0;
            h->frees_cost_us = 0;
            host_wait(x, H_FREES, h->next);
            host_check(x);
            return;
        }
        oohm_failure(x, (int)a->stream, i, a);
        return;
    }
    if (u64map_put(x->host, a->tensor, a->bytes) || u64map_put(x->huse, a->tensor, 0)) {
        fail_run(x, MS_ERR_NOMEM, "out of memory");
        return;
    }
    x->host_used += a->bytes;
    if (x->host_used > x->host_peak) x->host_peak = x->host_used;
    mem_sample(x);
    host_enqueue(x, i); /* a no-op for the stream */
}

/* Pinned memory goes back when the copies that used it and the freeing stream's earlier
 * work have run (PyTorch's caching host allocator records an event per using stream). */
static void host_host_free(ex *x, size_t i, const sched_action *a)
{
    uint64_t bytes, users = 0;
    if (!u64map_del(x->host, a->tensor, &bytes)) {
        fail_at(x, MS_ERR_INVALID, i,
                "tensor has no host memory at this point of the program (never reserved or "
                "already released)");
        return;
    }
    u64map_del(x->huse, a->tensor, &users);
    if (!pend_add(x, a->tensor, bytes, (unsigned)users | (1u << a->stream), 1)) return;
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
    size_t n = sched_count(x->s);
    while (!x->stop && h->state == H_READY) {
        if (h->next >= n) {
            h->state = H_DONE;
            return;
        }
        size_t i = h->next;
        const sched_action *a = sched_get(x->s, i);
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
            fail_at(x, MS_ERR_INVALID, i, "unknown action kind");
            return;
        }
    }
}

/* Issue model: stream s gets work again after waiting for the host thread; the compute
 * stream's wait is a stall. */
static void end_starve(ex *x, int s)
{
    stream *t = &x->st[s];
    double now = eng_now(x->eng);
    t->starving = 0;
    if (s == SS_COMPUTE) {
        acc(x, &x->w.stall_us, t->starve_since, now);
        add_span(x, s, t->starve_since, now, t->q[t->pos], "wait host", "wait");
    }
}

static void hc_wake_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    ex *x = ctx;
    x->st[arg].hc_wake_pending = 0;
    advance(x, (int)arg);
}

/* Stream-time model with host times: compute action a at the head of stream s may start once
 * the host has issued it. The host clock runs on its own, one compute action after another
 * (hc_t += its host time, and the latency of the allocator calls it makes), held back only
 * by the ops and allocator calls that synchronize and the iteration marks; the kernel starts
 * at max(the GPU free, the host's issue). Returns 1 when it may
 * start now, else the stream waits for the host ("wait host") and 0. */
static int host_clock_ready(ex *x, int s, const sched_action *a)
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
        if (!eng_at(x->eng, t->hc_ready, hc_wake_cb, x, (uint64_t)s)) {
            fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
            return 0;
        }
        t->hc_wake_pending = 1;
    }
    return 0;
}

/* Runs stream s's instantaneous actions and starts its next timed one. Returns when the
 * stream is busy, blocked, held by a synchronize, waiting for the host thread to issue more
 * (issue model), or done. */
static void advance_stream(ex *x, int s)
{
    stream *t = &x->st[s];
    while (!x->stop && t->state == ST_IDLE) {
        if (t->pos >= t->n) {
            t->state = ST_DONE;
            return;
        }
        if (x->issue && t->pos >= t->nissued) {
            if (!t->starving) {
                t->starving = 1;
                t->starve_since = eng_now(x->eng);
            }
            return;
        }
        if (t->starving) end_starve(x, s);
        if (x->sync_owner >= 0 && x->sync_owner != s) {
            if (!t->held) {
                t->held = 1;
                t->held_since = eng_now(x->eng);
            }
            return;
        }
        size_t idx = t->q[t->pos];
        const sched_action *a = sched_get(x->s, idx);
        t->t_start = eng_now(x->eng);
        switch (a->kind) {
        case SA_RECORD:
        case SA_WAIT:
            if (a->event >= x->nevents) {
                fail_at(x, MS_ERR_INVALID, idx, "event id out of range");
                return;
            }
            if (a->kind == SA_RECORD) {
                t->pos++;
                record_event(x, a->event);
            } else if (x->reached[a->event]) {
                t->pos++;
            } else {
                t->state = ST_WAIT;
                t->wait_event = a->event;
                return;
            }
            break;
        case SA_MARK:
            t->pos++;
            if (s == SS_COMPUTE && a->mark == TM_ITER) iter_mark(x);
            break;
        case SA_COMPUTE:
            if (x->host_clock && !host_clock_ready(x, s, a)) return;
            t->state = ST_RUN;
            start_compute(x, s, a);
            return;
        case SA_COPY_D2H:
        case SA_COPY_H2D:
            t->state = ST_RUN;
            start_copy(x, s);
            return;
        case SA_HOST_COMPUTE:
            t->state = ST_RUN;
            start_host(x, s, a);
            return;
        case SA_ALLOC:
        case SA_FREE:
        case SA_HOST_ALLOC:
        case SA_HOST_FREE:
            if (!x->issue) {
                if (!stream_mem_action(x, s, idx, a)) return;
            } else {
                t->pos++; /* the host thread ran it when it issued it */
            }
            break;
        default:
            fail_at(x, MS_ERR_INVALID, idx, "unknown action kind");
            return;
        }
    }
}

static void advance(ex *x, int s)
{
    advance_stream(x, s);
    if (x->issue) host_check(x);
}

/* ---------- setup, run, results ---------- */

/* Per-stream queues in program order, in one buffer. */
static ms_status split_streams(ex *x)
{
    size_t n = sched_count(x->s);
    size_t cnt[SS_COUNT] = { 0 };
    for (size_t i = 0; i < n; i++) {
        const sched_action *a = sched_get(x->s, i);
        if ((unsigned)a->stream >= SS_COUNT)
            return ms_fail(x->err, MS_ERR_INVALID, "schedule action %zu: bad stream %d", i,
                           (int)a->stream);
        if ((unsigned)a->kind >= SA_COUNT)
            return ms_fail(x->err, MS_ERR_INVALID, "schedule action %zu: bad kind %d", i,
                           (int)a->kind);
        if ((a->kind == SA_COMPUTE || a->kind == SA_HOST_COMPUTE) && !isfinite(a->dur_us))
            return ms_fail(x->err, MS_ERR_INVALID, "schedule action %zu: non-finite duration",
                           i);
        if (a->kind == SA_COMPUTE && a->stream != SS_COMPUTE)
            return ms_fail(x->err, MS_ERR_INVALID,
                           "schedule action %zu: compute on stream %s (kernels run only on "
                           "the compute stream)", i, sched_stream_name(a->stream));
        cnt[a->stream]++;
    }
    x->qbuf = malloc((n ? n : 1) * sizeof *x->qbuf);
    if (!x->qbuf) return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
    size_t off = 0;
    for (int k = 0; k < SS_COUNT; k++) {
        x->st[k].q = x->qbuf + off;
        off += cnt[k];
    }
    for (size_t i = 0; i < n; i++) {
        stream *t = &x->st[sched_get(x->s, i)->stream];
        t->q[t->n++] = (uint32_t)i;
    }
    return MS_OK;
}

static int has_side_use(const schedule_t *s)
{
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_FREE && a->side_use) return 1;
    }
    return 0;
}

/* Some compute action's trace op gives a host time or a host synchronize. */
static int has_host_times(const ex *x)
{
    if (!x->o.trace) return 0;
    for (size_t i = 0; i < sched_count(x->s); i++) {
        const sched_action *a = sched_get(x->s, i);
        const trace_op *t = a->kind == SA_COMPUTE ? action_op(x, a) : NULL;
        if (t && (t->host_us > 0 || t->host_sync)) return 1;
    }
    return 0;
}

static ms_status setup(ex *x)
{
    if (sched_count(x->s) > UINT32_MAX)
        return ms_fail(x->err, MS_ERR_LIMIT, "schedule too long");
    x->nevents = sched_event_count(x->s);
    x->reached = calloc(x->nevents ? x->nevents : 1, 1);
    x->eng = eng_new();
    x->dev = u64map_new(64);
    x->mix = bm_new(x->o.trace);
    x->host = u64map_new(64);
    if (!x->reached || !x->eng || !x->dev || !x->mix || !x->host)
        return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
    x->link = link_new(x->eng, x->m->link_h2d_Bps, x->m->link_d2h_Bps, x->m->link_duplex_Bps);
    if (x->link && x->m->dha_link_weight > 0) link_set_dha_weight(x->link, x->m->dha_link_weight);
    x->be = simbe_new(x->m, 0, 0);
    if (!x->link || !x->be) return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
    /* The allocator's best fit breaks ties between equal free blocks by address, so the
     * order in which the driver hands out segments decides which block is reused. */
    if (x->m->malloc_top_down) simbe_set_descending(x->be, 1);
    ms_status st = alloc_new(x->o.allocator ? x->o.allocator : "caching", x->o.alloc_cfg,
                             simbe_backend(x->be), &x->alloc, x->err);
    if (st != MS_OK) return st;
    x->side_defer = !(alloc_caps(x->alloc) & ALLOC_CAP_STATIC_PLAN);
    /* A schedule that models recordStream (FREE.side_use, plan knob record_stream) gets
     * PyTorch's release_cached_blocks for all its deferred frees: they go back inside the
     * allocator's retry, after its synchronize. Without it the host waits for them after the
     * failed call and retries once more, as memsim's runtime does (its oom_drains). */
    if (x->o.issue_ahead != 0 && has_side_use(x->s))
        alloc_set_events_hook(x->alloc, flush_device_frees, x);
    if (x->o.timeline_path || x->o.timeline_out || x->o.memcsv_path || x->o.intervals_path) {
        x->tl = tl_new();
        if (!x->tl) return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
    }
    uint64_t gpus = x->m->node_gpus > 0 ? (uint64_t)x->m->node_gpus : 1;
    x->host_cap = x->o.host_capacity_bytes ? x->o.host_capacity_bytes
                                           : x->m->host_mem_bytes / gpus;
    x->sync_owner = -1;
    x->issue = x->o.issue_ahead != 0;
    x->host_times = has_host_times(x);
    x->host_clock = !x->issue && (x->host_times || x->m->host_recompute_layer_us > 0);
    if (x->issue) {
        x->h.ahead = x->o.issue_ahead < 0 ? INT64_MAX : (int64_t)x->o.issue_ahead;
        x->duse = u64map_new(64);
        x->huse = u64map_new(64);
        if (!x->duse || !x->huse) return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
        if (!(x->o.issue_us <= 1e12)) x->o.issue_us = 0; /* NaN or absurd: free */
    }
    return split_streams(x);
}

static void teardown(ex *x)
{
    alloc_free(x->alloc);
    simbe_free(x->be);
    link_free(x->link);
    eng_free(x->eng);
    tl_free(x->tl);
    u64map_free(x->dev);
    bm_free(x->mix);
    u64map_free(x->host);
    u64map_free(x->duse);
    u64map_free(x->huse);
    free(x->pd);
    free(x->pd_free);
    for (int k = 0; k < SS_COUNT; k++) free(x->fq[k].v);
    free(x->reached);
    free(x->qbuf);
}

/* Why the run stopped with streams unfinished although no event is left. */
static ms_status report_stuck(ex *x)
{
    for (int k = 0; k < SS_COUNT; k++) {
        stream *t = &x->st[k];
        if (t->state == ST_WAIT)
            return ms_fail(x->err, MS_ERR_INVALID,
                           "schedule deadlock: stream %s blocks at action %u (WAIT event %u), "
                           "and the event is never recorded",
                           sched_stream_name((sched_stream)k), t->q[t->pos], t->wait_event);
    }
    static const char *const why[] = { "ready", "busy", "for the run-ahead bound",
                                       "for a synchronize", "for deferred frees",
                                       "for an op it synchronizes on", "done" };
    if (x->issue && x->h.state != H_DONE)
        return ms_fail(x->err, MS_ERR_INVALID,
                       "simulation stuck: the host thread waits %s at action %zu",
                       why[x->h.state], x->h.next);
    for (int k = 0; k < SS_COUNT; k++) {
        stream *t = &x->st[k];
        if (t->state != ST_DONE)
            return ms_fail(x->err, MS_ERR_INVALID,
                           "simulation stuck: stream %s at action %u of %zu",
                           sched_stream_name((sched_stream)k),
                           t->pos < t->n ? t->q[t->pos] : 0u, t->n);
    }
    return MS_OK;
}

static void fill_result(ex *x, sim_result *r)
{
    const alloc_stats *a = alloc_get_stats(x->alloc);
    r->status = x->rstatus;
    snprintf(r->failure, sizeof r->failure, "%s", x->failure);
    snprintf(r->allocator, sizeof r->allocator, "%s", alloc_name(x->alloc));
    if (!r->machine[0]) snprintf(r->machine, sizeof r->machine, "%s", x->m->name);
    r->iter_time_s = x->rstatus == RS_OK ? (x->t_end - x->win_t0) * 1e-6 : 0;
    r->compute_busy_s = x->w.compute_us * 1e-6;
    r->recompute_s = x->w.recompute_us * 1e-6;
    r->host_busy_s = x->w.host_us * 1e-6;
    r->stall_s = x->w.stall_us * 1e-6;
    r->alloc_time_s = x->w.alloc_us * 1e-6;
    r->h2d_busy_s = (link_busy_us(x->link, LINK_H2D) - x->h2d0_us) * 1e-6;
    r->d2h_busy_s = (link_busy_us(x->link, LINK_D2H) - x->d2h0_us) * 1e-6;
    r->astats = *a;
    r->peak_allocated_bytes = a->allocated_peak_bytes;
    bm_peak(x->mix, r->peak_live_bytes, &r->peak_live_at_failure);
    r->peak_reserved_bytes = a->reserved_peak_bytes;
    r->peak_active_bytes = a->active_peak_bytes;
    r->fragmentation = a->reserved_peak_bytes
                           ? 1.0 - (double)a->active_peak_bytes / (double)a->reserved_peak_bytes
                           : 0;
    r->host_peak_bytes = x->host_peak;
    r->host_node_peak_bytes = x->host_peak * (uint64_t)(x->o.host_sharers > 1
                                                            ? x->o.host_sharers : 1);
    r->alloc_retries_per_iter = a->num_alloc_retries - x->retries0;
    r->issue_ahead = 0;
    r->issue_busy_s = 0;
    r->issue_waits = r->deferred_frees = 0;
    if (x->issue) {
        /* allocator calls are the host's: counted from its issue of the last mark */
        r->alloc_time_s = x->h.alloc_us * 1e-6;
        r->alloc_retries_per_iter = a->num_alloc_retries - x->h.retries0;
        r->issue_ahead = x->o.issue_ahead < 0 ? SIM_ISSUE_UNBOUNDED : x->o.issue_ahead;
        r->issue_busy_s = x->h.busy_us * 1e-6;
        r->issue_waits = x->h.waits;
        r->deferred_frees = x->h.deferred;
    }
}

static ms_status write_outputs(ex *x)
{
    ms_status st = MS_OK;
    size_t ntracks = x->issue ? SS_COUNT + 1 : SS_COUNT;
    if (x->o.timeline_out && x->o.timeline_first) {
        st = tl_write_json_events(x->tl, x->o.timeline_out, x->o.timeline_pid,
                                  x->o.timeline_process ? x->o.timeline_process : "memsim",
                                  track_names, ntracks, x->o.timeline_first);
        if (st != MS_OK) st = ms_fail(x->err, st, "out of memory writing the timeline");
    }
    else if (x->o.timeline_path)
        st = tl_write_json(x->tl, x->o.timeline_path, track_names, ntracks, x->err);
    if (st == MS_OK && x->o.memcsv_path) st = tl_write_memcsv(x->tl, x->o.memcsv_path, x->err);
    if (st == MS_OK && x->o.intervals_path)
        st = tl_write_intervals(x->tl, x->o.intervals_path, x->err);
    return st;
}

ms_status sim_execute(const schedule_t *s, const machine_t *m, const sim_opts *o,
                      sim_result *r, ms_error *err)
{
    if (!r) return ms_fail(err, MS_ERR_INVALID, "sim_execute: no result to fill");
    r->status = RS_ERROR;
    if (!s || !m) return ms_fail(err, MS_ERR_INVALID, "sim_execute: no schedule or machine");
    ex x;
    memset(&x, 0, sizeof x);
    x.s = s;
    x.m = m;
    x.err = err;
    if (o) x.o = *o;
    else sim_opts_default(&x.o);
    r->status = RS_ERROR;
    r->failure[0] = 0;
    ms_status st = setup(&x);
    if (st == MS_OK) {
        mem_sample(&x);
        for (int k = 0; k < SS_COUNT; k++) kick(&x, k);
        if (x.issue) host_kick(&x);
        eng_run(x.eng);
        st = x.fatal;
        if (st == MS_OK && x.rstatus == RS_OK) st = report_stuck(&x);
    }
    if (st == MS_OK) {
        fill_result(&x, r);
        st = write_outputs(&x);
    }
    if (st != MS_OK) r->status = RS_ERROR;
    teardown(&x);
    return st;
}

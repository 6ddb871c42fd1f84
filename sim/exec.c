/* exec.c — the schedule executor of the simulator (see exec.h): splits the schedule into
 * per-stream queues, runs each stream's actions in order on the discrete-event engine
 * (compute on the GPU, copies and DHA traffic as flows on the host link, host CPU work in
 * FIFO order, events, allocator calls over the simulated memory backend with their latencies
 * and device synchronizes, the deferred frees of the issue model) and fills a sim_result.
 * The host side (the host thread that issues the program, the host clock of traces with host
 * times) is sim/exec_host.c, over the state in sim/exec_int.h. Semantics in
 * docs/SIMULATOR.md. Used by the memsim command, experiments/ and the validation driver. */
#include "sim/exec_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


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

void ex_acc(const ex *x, double *field, double s_us, double e_us)
{
    double a = s_us > x->win_t0 ? s_us : x->win_t0;
    if (e_us > a) *field += e_us - a;
}

void ex_fail_run(ex *x, ms_status st, const char *fmt_msg)
{
    if (x->fatal == MS_OK) {
        x->fatal = st;
        ms_fail(x->err, st, "%s", fmt_msg);
    }
    x->stop = 1;
    eng_stop(x->eng);
}

void ex_fail_at(ex *x, ms_status st, size_t idx, const char *what)
{
    char msg[600];
    const sched_action *a = ex_act(x, idx);
    snprintf(msg, sizeof msg, "schedule action %zu (%s on stream %s): %s", idx,
             sched_kind_name(a->kind), sched_stream_name(a->stream), what);
    ex_fail_run(x, st, msg);
}

/* The allocator's own reason for a failed call where it gives one (the static arena: plan
 * and trace disagree), else the status's name. */
const char *ex_alloc_why(const ex *x, ms_status st)
{
    const char *why = alloc_problem(x->alloc);
    return why[0] ? why : ms_status_str(st);
}

void ex_end_as(ex *x, res_status rs)
{
    x->rstatus = rs;
    x->stop = 1;
    eng_stop(x->eng);
}

/* The trace op a compute action runs (NULL when the schedule names none or no trace). */
const trace_op *ex_action_op(const ex *x, const sched_action *a)
{
    return (x->o.trace && a->op >= 0) ? trace_find_op(x->o.trace, (uint64_t)a->op) : NULL;
}

static const char *op_name(const ex *x, int64_t op, char *buf, size_t n)
{
    const trace_op *t = (x->o.trace && op >= 0) ? trace_find_op(x->o.trace, (uint64_t)op) : NULL;
    if (t && t->name[0]) snprintf(buf, n, "%s", t->name);
    else snprintf(buf, n, "op %lld", (long long)op);
    return buf;
}

const char *ex_tensor_name(const ex *x, uint64_t id, char *buf, size_t n)
{
    const trace_tensor *t = x->o.trace ? trace_find_tensor(x->o.trace, id) : NULL;
    if (t && t->name[0]) snprintf(buf, n, "%s", t->name);
    else snprintf(buf, n, "t%llu", (unsigned long long)id);
    return buf;
}

void ex_mem_sample(ex *x)
{
    if (!x->tl) return;
    const alloc_stats *a = alloc_get_stats(x->alloc);
    uint64_t kinds[BM_COUNT];
    bm_live(x->mix, kinds);
    if (tl_mem(x->tl, eng_now(x->eng), a->allocated_bytes, a->reserved_bytes, a->active_bytes,
               x->host_used, kinds) != MS_OK)
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory recording the memory time series");
}

/* Spans are recorded (and their names formatted) only for a timeline or an intervals CSV. */
int ex_spans_on(const ex *x)
{
    return x->tl && (x->o.timeline_path || x->o.timeline_out || x->o.intervals_path);
}

void ex_add_span(ex *x, int track, double s_us, double e_us, size_t idx, const char *name,
                 const char *cat)
{
    if (!ex_spans_on(x) || !(e_us > s_us)) return;
    const sched_action *a = ex_act(x, idx);
    int has_t = a->kind != SA_COMPUTE && a->kind != SA_HOST_COMPUTE && a->kind != SA_WAIT;
    tl_span_info si = { track, s_us, e_us, name, cat, (int64_t)idx,
                        a->kind == SA_COMPUTE ? a->op : -1, a->tensor, has_t,
                        a->kind == SA_COMPUTE ? a->host_read_bytes + a->host_write_bytes
                                              : ex_bytes(x, idx) };
    if (tl_span(x->tl, &si) != MS_OK)
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory recording the timeline");
}

static void kick_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    ex *x = ctx;
    x->st[arg].kick_pending = 0;
    ex_advance(x, (int)arg);
}

/* Lets stream s look at its queue again, from an event at the current time (never by
 * recursion, so the order of simultaneous wake-ups is the engine's sequence order). */
void ex_kick(ex *x, int s)
{
    if (x->st[s].kick_pending || x->stop) return;
    if (!eng_post_after(x->eng, 0, kick_cb, x, (uint64_t)s)) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
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
    if (!eng_post_after(x->eng, x->sync_cost_us, sync_done_cb, x, (uint64_t)s))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

static void sync_done_cb(eng_t *e, void *ctx, uint64_t arg)
{
    ex *x = ctx;
    int s = (int)arg;
    stream *t = &x->st[s];
    double now = eng_now(e);
    size_t idx = t->q[t->pos];
    ex_acc(x, &x->w.alloc_us, t->t_start, now);
    if (s == SS_COMPUTE) ex_acc(x, &x->w.stall_us, t->t_start, now);
    if (ex_spans_on(x)) {
        char name[TL_NAME_MAX], tn[48];
        snprintf(name, sizeof name, "sync (%s %s)",
                 ex_act(x, idx)->kind == SA_FREE ? "free" : "alloc",
                 ex_tensor_name(x, ex_act(x, idx)->tensor, tn, sizeof tn));
        ex_add_span(x, s, t->t_start, now, idx, name, "sync");
    }
    x->sync_owner = -1;
    t->state = ST_IDLE;
    t->pos++;
    if (now > x->t_end) x->t_end = now;
    if (x->host_clock && x->hc_t < now) x->hc_t = now;
    for (int k = 0; k < SS_COUNT; k++) {
        if (x->st[k].held) {
            if (k == SS_COMPUTE) ex_acc(x, &x->w.stall_us, x->st[k].held_since, now);
            x->st[k].held = 0;
        }
        ex_kick(x, k);
    }
}

/* ---------- action briefs ---------- */

/* Action idx's brief: the index's (a re-bound template's), else made in *tmp from the
 * action, of the fields its kind uses alone (a schedule run once is briefed as it runs:
 * a pass briefing all of it first read every line of every action once more). Not
 * sched_brief_put, which copies every field: on sweeps with --no-reuse that ran 1.4 % more
 * instructions (18 configurations) and took 1.4 % longer (the 192; build box). */
static inline const sched_brief *ex_brief(const ex *x, size_t idx, sched_brief *tmp)
{
    if (x->brief) return &x->brief[idx];
    const sched_action *a = ex_act(x, idx);
    tmp->kind = (uint8_t)a->kind;
    switch (a->kind) {
    case SA_RECORD:
    case SA_WAIT: tmp->id = a->event; break;
    case SA_MARK: tmp->iter = a->mark == TM_ITER; break;
    case SA_COMPUTE:
        tmp->recompute = a->recompute;
        tmp->dha = (a->host_read_bytes | a->host_write_bytes) != 0;
        break;
    case SA_ALLOC:
        tmp->pool = a->pool;
        tmp->block = a->block;
        /* fall through */
    default: tmp->id = a->tensor; break;
    }
    return tmp;
}

/* ---------- action completion ---------- */

static void action_done(ex *x, int s)
{
    stream *t = &x->st[s];
    double now = eng_now(x->eng);
    size_t idx = t->q[t->pos];
    const sched_action *a = ex_act(x, idx); /* read for the host clock and the spans alone */
    sched_brief tmp;
    const sched_brief *b = ex_brief(x, idx, &tmp);
    char name[TL_NAME_MAX], nb[48];
    int sp = ex_spans_on(x);
    switch (b->kind) {
    case SA_COMPUTE:
        x->h.c_done++;
        if (x->host_clock && now > x->hc_t && exh_compute_host_sync(x, a)) x->hc_t = now;
        ex_acc(x, &x->w.compute_us, t->t_start, now);
        if (b->recompute) ex_acc(x, &x->w.recompute_us, t->t_start, now);
        if (!sp) break;
        snprintf(name, sizeof name, "%s%s", a->recompute ? "recompute " : "",
                 op_name(x, a->op, nb, sizeof nb));
        ex_add_span(x, s, t->t_start, now, idx, name, a->recompute ? "recompute" : "compute");
        break;
    case SA_HOST_COMPUTE:
        ex_acc(x, &x->w.host_us, t->t_exec, t->t_end_exec);
        if (!sp) break;
        snprintf(name, sizeof name, "host %s", a->op >= 0 ? op_name(x, a->op, nb, sizeof nb)
                                                          : "compute");
        ex_add_span(x, s, t->t_exec, t->t_end_exec, idx, name, "host");
        break;
    case SA_COPY_D2H:
    case SA_COPY_H2D:
        if (x->host_clock && exh_action_host_wait(x, a)) {
            if (now > x->hc_t) x->hc_t = now;
            x->hc_t += exfw_pack_us(x->fw); /* save_on_cpu's pack hook around its copy */
        }
        if (!sp) break;
        snprintf(name, sizeof name, "%s %s", a->kind == SA_COPY_D2H ? "d2h" : "h2d",
                 ex_tensor_name(x, a->tensor, nb, sizeof nb));
        ex_add_span(x, s, t->t_start, now, idx, name, "copy");
        break;
    default: /* ALLOC / FREE paying the backend's latency */
        ex_acc(x, &x->w.alloc_us, t->t_start, now);
        if (!sp) break;
        snprintf(name, sizeof name, "%s %s", a->kind == SA_FREE ? "free" : "alloc",
                 ex_tensor_name(x, a->tensor, nb, sizeof nb));
        ex_add_span(x, s, t->t_start, now, idx, name, "alloc");
        break;
    }
    t->state = ST_IDLE;
    t->pos++;
    if (now > x->t_end) x->t_end = now;
    check_drain(x);
    ex_advance(x, s);
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
    if (st != MS_OK) ex_fail_run(x, st, "cannot start a link flow (out of memory)");
}

/* DHA traffic shares the link with copies by the profile's weight (measured unfair on
 * Hopper: the kernel's reads win over a concurrent copy). */
static void start_dha_flow(ex *x, int s, link_dir dir, uint64_t bytes, double cap_Bps)
{
    ms_status st = link_start_dha(x->link, dir, bytes, cap_Bps, flow_cb, x, (uint64_t)s, NULL);
    if (st != MS_OK) ex_fail_run(x, st, "cannot start a DHA link flow (out of memory)");
}

static void start_timer(ex *x, int s, double dur_us)
{
    if (!eng_post_after(x->eng, dur_us, timer_cb, x, (uint64_t)s))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

/* A DHA kernel's efficiency applies to the link rate its reads and writes get; a missing
 * (<= 0) efficiency is taken as 1 rather than as a kernel that never finishes. */
static double dha_eff(const sched_action *a) { return a->dha_eff > 0 ? a->dha_eff : 1.0; }

static void start_compute(ex *x, int s, size_t idx, const sched_action *a,
                          const sched_brief *b)
{
    stream *t = &x->st[s];
    /* the DHA bytes, in the action's line, read by a DHA kernel alone (its brief says so) */
    uint64_t rd = b->dha ? a->host_read_bytes : 0, wr = b->dha ? a->host_write_bytes : 0;
    t->parts = 1 + (rd > 0) + (wr > 0);
    double dur = ex_dur_us(x, idx);
    dur = dur > 0 ? dur : 0;
    if (x->o.dur_scale) dur *= x->o.dur_scale[idx];
    if (x->o.start_us) x->o.start_us[idx] = eng_now(x->eng);
    start_timer(x, s, dur);
    /* dha_eff, in the action's next cache line, read only by a DHA kernel */
    if (rd) start_dha_flow(x, s, LINK_H2D, rd, x->m->dha_read_Bps * dha_eff(a));
    if (wr) start_dha_flow(x, s, LINK_D2H, wr, x->m->dha_write_Bps * dha_eff(a));
}

static void copy_lat_cb(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    ex *x = ctx;
    int s = (int)arg;
    size_t idx = x->st[s].q[x->st[s].pos];
    sched_brief tmp;
    const sched_brief *b = ex_brief(x, idx, &tmp);
    if (b->kind == SA_COPY_H2D) start_flow(x, s, LINK_H2D, ex_bytes(x, idx), x->m->link_h2d_Bps);
    else start_flow(x, s, LINK_D2H, ex_bytes(x, idx), x->m->link_d2h_Bps);
}

static void start_copy(ex *x, int s)
{
    x->st[s].parts = 1;
    double lat = x->m->link_small_copy_us > 0 ? x->m->link_small_copy_us : 0;
    if (!eng_post_after(x->eng, lat, copy_lat_cb, x, (uint64_t)s))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

static void start_host(ex *x, int s, size_t idx)
{
    stream *t = &x->st[s];
    double now = eng_now(x->eng);
    double dur = ex_dur_us(x, idx);
    t->t_exec = x->host_free_at > now ? x->host_free_at : now;
    t->t_end_exec = t->t_exec + (dur > 0 ? dur : 0);
    x->host_free_at = t->t_end_exec;
    t->parts = 1;
    if (!eng_post(x->eng, t->t_end_exec, timer_cb, x, (uint64_t)s))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
}

/* ---------- allocator and host memory ---------- */

void ex_oom_failure(ex *x, int s, size_t idx, const sched_action *a)
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
             (unsigned long long)a->tensor, ex_tensor_name(x, a->tensor, tn, sizeof tn),
             (unsigned long long)ex_bytes(x, idx), ms_fmt_bytes(ex_bytes(x, idx), b0, sizeof b0),
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
int ex_pace_mapping(ex *x, double *left, eng_fn cb, uint64_t arg)
{
    if (!(*left > 0)) return 0;
    *left -= 1;
    if (!eng_post_after(x->eng, set_access_step_us(x), cb, x, arg))
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
    return 1;
}

/* An allocator call's charged latency, and in *paced its cuMemSetAccess mappings to pace; after
 * a synchronize in the call the device has drained (no copy runs), so those cost the plain
 * rate at once. */
double ex_take_call_cost(ex *x, int *synced, double *paced)
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
    if (!ex_pace_mapping(x, &x->st[(int)arg].sa_left, alloc_timer_cb, arg)) part_done(x, (int)arg);
}

/* After an allocator call: a synchronize holds every stream; a plain latency occupies the
 * calling stream. Returns 1 when the stream may go straight on to its next action. Inlined
 * into its callers (every device allocator call; most pay no latency and go straight on):
 * 4.9 M fewer instructions in the 192-configuration sweep of BENCHMARKS.md. */
static inline __attribute__((always_inline)) int after_alloc_call(ex *x, int s)
{
    int synced = 0;
    double paced;
    double cost = ex_take_call_cost(x, &synced, &paced);
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
        if (!eng_post_after(x->eng, cost > 0 ? cost : 0, alloc_timer_cb, x, (uint64_t)s))
            ex_fail_run(x, MS_ERR_NOMEM, "out of memory scheduling an event");
        return 0;
    }
    t->pos++;
    return 1;
}

/* The stream whose pools serve an ALLOC of stream s from pool (sched_action.pool): its own,
 * or a framework side stream's (pool k > 0, numbered after the executor's streams). */
int ex_pool_stream(int s, int32_t pool) { return pool > 0 ? SS_COUNT - 1 + pool : s; }

/* The stream-time model's device calls keep each live tensor's address, blockmix token and
 * allocator handle in a table by id where the ids are compact (the generators' and
 * lowerings' are): one indexed load where the maps by id and by address were a probe each,
 * and a deletion each at the free, and the allocator finds the block by its handle instead
 * of its own map by address. Sparse ids keep the map (dev_ids_dense); handle NULL: none. */
static inline __attribute__((always_inline)) int alloc_call(ex *x, int s, size_t idx,
                                                          const sched_action *a,
                                                          const sched_brief *b,
                                                          uint64_t *addr, uint32_t *handle)
{
    int pool = ex_pool_stream(s, b->pool);
    uint64_t bytes = ex_bytes(x, idx);
    ms_status st = handle ? alloc_block_h(x->alloc, bytes, pool, b->id, addr, handle)
                          : alloc_block(x->alloc, bytes, pool, b->id, addr);
    if (st == MS_ERR_OOM) {
        ex_oom_failure(x, s, idx, a);
        ex_end_as(x, RS_OOM);
        return 0;
    }
    if (st != MS_OK) {
        ex_fail_at(x, st, idx, ex_alloc_why(x, st));
        return 0;
    }
    return 1;
}

static int do_alloc_dense(ex *x, int s, size_t idx, const sched_action *a,
                          const sched_brief *b)
{
    uint64_t *w = &x->dlive[b->id / 64], bit = UINT64_C(1) << (b->id % 64);
    if (*w & bit) { /* the tensor below ndtab: setup saw every ALLOC */
        ex_fail_at(x, MS_ERR_INVALID, idx, "tensor is already allocated");
        return 0;
    }
    uint64_t addr = 0;
    uint32_t h;
    if (!alloc_call(x, s, idx, a, b, &addr, &h)) return 0;
    dev_ent *e = &x->dtab[b->id];
    *w |= bit;
    e->addr = addr;
    e->handle = h;
    e->mix = bm_add(x->mix, b->id, (sched_block)b->block, ex_bytes(x, idx));
    ex_mem_sample(x);
    return after_alloc_call(x, s);
}

static int do_alloc(ex *x, int s, size_t idx, const sched_action *a, const sched_brief *b)
{
    if (x->dtab) return do_alloc_dense(x, s, idx, a, b);
    int added; /* one probe checks the tensor is not live and makes its entry */
    uint64_t *slot = u64map_slot(x->dev, a->tensor, &added);
    if (!slot) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
        return 0;
    }
    if (!added) {
        ex_fail_at(x, MS_ERR_INVALID, idx, "tensor is already allocated");
        return 0;
    }
    uint64_t addr = 0;
    if (!alloc_call(x, s, idx, a, b, &addr, NULL)) {
        u64map_del(x->dev, a->tensor, NULL);
        return 0;
    }
    *slot = addr; /* the map is untouched since u64map_slot */
    if (!bm_alloc(x->mix, a->tensor, (sched_block)a->block, addr, ex_bytes(x, idx))) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
        return 0;
    }
    ex_mem_sample(x);
    return after_alloc_call(x, s);
}

/* Takes tensor id's device block out of the table or map: 0 when it holds none. */
static int dev_take(ex *x, uint64_t id, uint64_t *addr, uint64_t *mix, uint32_t *handle)
{
    *handle = ALLOC_NO_HANDLE;
    if (!x->dtab) {
        *mix = 0;
        return u64map_del(x->dev, id, addr);
    }
    uint64_t bit = UINT64_C(1) << (id % 64);
    if (id >= x->ndtab || !(x->dlive[id / 64] & bit)) return 0;
    x->dlive[id / 64] &= ~bit;
    *addr = x->dtab[id].addr;
    *mix = x->dtab[id].mix;
    *handle = x->dtab[id].handle;
    return 1;
}

static int do_free(ex *x, int s, size_t idx, const sched_brief *b)
{
    uint64_t addr, mix;
    uint32_t h;
    if (!dev_take(x, b->id, &addr, &mix, &h)) {
        ex_fail_at(x, MS_ERR_INVALID, idx,
                "tensor is not allocated at this point of the run (never allocated, already "
                "freed, or its ALLOC is on another stream that has not reached it: a "
                "missing WAIT)");
        return 0;
    }
    ms_status st = alloc_release_h(x->alloc, addr, h);
    if (st != MS_OK) {
        ex_fail_at(x, st, idx, ex_alloc_why(x, st));
        return 0;
    }
    if (x->dtab) bm_sub(x->mix, mix);
    else bm_release(x->mix, addr);
    ex_mem_sample(x);
    return after_alloc_call(x, s);
}

void ex_oohm_failure(ex *x, int s, size_t idx, const sched_action *a)
{
    char b0[32], b1[32], b2[32], tn[48];
    snprintf(x->failure, sizeof x->failure,
             "out of host memory reserving %llu bytes (%s) for tensor %llu '%s' on stream "
             "%s at action %zu, t=%.3f us: host in use %s of this GPU's %s",
             (unsigned long long)ex_bytes(x, idx), ms_fmt_bytes(ex_bytes(x, idx), b0, sizeof b0),
             (unsigned long long)a->tensor, ex_tensor_name(x, a->tensor, tn, sizeof tn),
             sched_stream_name((sched_stream)s), idx, eng_now(x->eng),
             ms_fmt_bytes(x->host_used, b1, sizeof b1), ms_fmt_bytes(x->host_cap, b2, sizeof b2));
    ex_end_as(x, RS_OOHM);
}

/* Host memory is accounted, not timed: pinned buffers are taken as allocated before the
 * measured iterations (cudaHostAlloc costs ~0.5 s/GiB and frameworks pool it). */
/* The host-memory calls read the tensor from the brief (b->id) and the bytes by ex_bytes:
 * the action's own line is read only for a failure's message. */
static int do_host_alloc(ex *x, int s, size_t idx, const sched_action *a,
                         const sched_brief *b)
{
    if (u64map_get(x->host, b->id, NULL)) {
        ex_fail_at(x, MS_ERR_INVALID, idx, "tensor already has host memory");
        return 0;
    }
    uint64_t bytes = ex_bytes(x, idx);
    if (x->host_cap && bytes > x->host_cap - x->host_used) {
        ex_oohm_failure(x, s, idx, a);
        return 0;
    }
    if (u64map_put(x->host, b->id, bytes)) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
        return 0;
    }
    x->host_used += bytes;
    if (x->host_used > x->host_peak) x->host_peak = x->host_used;
    ex_mem_sample(x);
    x->st[s].pos++;
    return 1;
}

static int do_host_free(ex *x, int s, size_t idx, const sched_brief *b)
{
    uint64_t bytes;
    if (!u64map_del(x->host, b->id, &bytes)) {
        ex_fail_at(x, MS_ERR_INVALID, idx,
                "tensor has no host memory at this point of the run (never reserved, "
                "already released, or its HOST_ALLOC is on another stream that has not "
                "reached it: a missing WAIT)");
        return 0;
    }
    x->host_used -= bytes;
    ex_mem_sample(x);
    x->st[s].pos++;
    return 1;
}

/* The stream-time model: allocator and host-memory calls when the stream reaches them. */
static int stream_mem_action(ex *x, int s, size_t idx, const sched_action *a,
                             const sched_brief *b)
{
    switch (b->kind) {
    case SA_ALLOC: return do_alloc(x, s, idx, a, b);
    case SA_FREE: return do_free(x, s, idx, b);
    case SA_HOST_ALLOC: return do_host_alloc(x, s, idx, a, b);
    default: return do_host_free(x, s, idx, b);
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
        if (k == SS_COMPUTE) ex_acc(x, &x->w.stall_us, t->t_start, now);
        if (ex_spans_on(x)) {
            char name[TL_NAME_MAX];
            snprintf(name, sizeof name, "wait e%u", ev);
            ex_add_span(x, k, t->t_start, now, t->q[t->pos], name, "wait");
        }
        t->state = ST_IDLE;
        t->pos++;
        ex_kick(x, k);
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

/* ---------- deferred frees (issue model) ---------- */

/* Every deferred free's uses have run (each stream passed its last event's target). */
int ex_pending_all_done(const ex *x)
{
    for (int k = 0; k < SS_COUNT; k++) {
        const pend_fifo *f = &x->fq[k];
        if (f->head < f->n && x->st[k].pos < f->v[f->n - 1].target) return 0;
    }
    return 1;
}

/* Holds a free back until the uses issued so far on the streams in mask have run. */
int ex_pend_add(ex *x, uint64_t tensor, uint64_t value, unsigned mask, int host)
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
    ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
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
                     (unsigned long long)p->tensor, ex_alloc_why(x, st));
            ex_fail_run(x, st, msg);
            return 0;
        }
        bm_release(x->mix, p->value);
    }
    if (ms_grow((void **)&x->pd_free, &x->cap_pd_free, x->n_pd_free + 1, sizeof *x->pd_free) !=
        MS_OK) {
        ex_fail_run(x, MS_ERR_NOMEM, "out of memory");
        return 0;
    }
    x->pd_free[x->n_pd_free++] = slot;
    return 1;
}

/* PyTorch's process_events, in the runtime's order: each stream's reached events, streams
 * in order; a free goes back when its last event is seen. */
int ex_process_pending(ex *x)
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
    if (released) ex_mem_sample(x);
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
    if (released) ex_mem_sample(x);
}

/* ---------- streams ---------- */

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
        if (t->starving) exh_end_starve(x, s);
        if (x->sync_owner >= 0 && x->sync_owner != s) {
            if (!t->held) {
                t->held = 1;
                t->held_since = eng_now(x->eng);
            }
            return;
        }
        size_t idx = t->q[t->pos];
        const sched_action *a = ex_act(x, idx); /* read for its numbers alone */
        sched_brief tmp;
        const sched_brief *b = ex_brief(x, idx, &tmp);
        t->t_start = eng_now(x->eng);
        switch (b->kind) {
        case SA_RECORD:
        case SA_WAIT:
            if (b->id >= x->nevents) {
                ex_fail_at(x, MS_ERR_INVALID, idx, "event id out of range");
                return;
            }
            if (b->kind == SA_RECORD) {
                t->pos++;
                record_event(x, (uint32_t)b->id);
            } else if (x->reached[b->id]) {
                t->pos++;
            } else {
                t->state = ST_WAIT;
                t->wait_event = (uint32_t)b->id;
                return;
            }
            break;
        case SA_MARK:
            t->pos++;
            if (s == SS_COMPUTE && b->iter) iter_mark(x);
            break;
        case SA_COMPUTE:
            if (x->host_clock && !exh_clock_ready(x, s, a)) return;
            t->state = ST_RUN;
            start_compute(x, s, idx, a, b);
            return;
        case SA_COPY_D2H:
        case SA_COPY_H2D:
            t->state = ST_RUN;
            start_copy(x, s);
            return;
        case SA_HOST_COMPUTE:
            t->state = ST_RUN;
            start_host(x, s, idx);
            return;
        case SA_ALLOC:
        case SA_FREE:
        case SA_HOST_ALLOC:
        case SA_HOST_FREE:
            if (!x->issue) {
                if (!stream_mem_action(x, s, idx, a, b)) return;
            } else {
                t->pos++; /* the host thread ran it when it issued it */
            }
            break;
        default:
            ex_fail_at(x, MS_ERR_INVALID, idx, "unknown action kind");
            return;
        }
    }
}

void ex_advance(ex *x, int s)
{
    advance_stream(x, s);
    if (x->issue) exh_check(x);
}

/* ---------- setup, run, results ---------- */

/* Per-stream queues in program order, in one buffer; in the same pass, the largest ALLOC
 * id into *top (*any: there is an ALLOC) for dev_ids_dense. The first pass notes each
 * action's stream in a byte after the queues, so that the second reads those n bytes
 * instead of the actions again (120 bytes each: a gpt-7b schedule, 0.45-0.71 MB, is larger
 * than the L2 and does not stay in it between the passes). */
static ms_status split_streams(ex *x, uint64_t *top, int *any)
{
    size_t n = x->nacts;
    size_t cnt[SS_COUNT] = { 0 };
    *top = 0;
    *any = 0;
    x->qbuf = malloc((n ? n : 1) * (sizeof *x->qbuf + 1));
    if (!x->qbuf) return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
    uint8_t *sid = (uint8_t *)(x->qbuf + (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        const sched_action *a = ex_act(x, i);
        if (a->kind == SA_ALLOC) {
            *any = 1;
            if (a->tensor > *top) *top = a->tensor;
        }
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
        sid[i] = (uint8_t)a->stream;
    }
    /* filled through locals: stores through x->st[] made the compiler reload them */
    uint32_t *q[SS_COUNT];
    size_t off = 0;
    for (int k = 0; k < SS_COUNT; k++) {
        x->st[k].q = q[k] = x->qbuf + off;
        off += cnt[k];
    }
    for (size_t i = 0; i < n; i++) *q[sid[i]]++ = (uint32_t)i;
    for (int k = 0; k < SS_COUNT; k++) x->st[k].n = cnt[k];
    return MS_OK;
}

/* split_streams for a schedule with its own index (sched_index: a sweep's re-bound template
 * has one): the queues are the index's, and of the checks only the durations', numbers that
 * each binding changes, are made again, over the timed actions alone. The index exists only
 * where every action passed split_streams' other checks, so the first failure is the one
 * split_streams would report. */
static ms_status streams_of_index(ex *x, const sched_index *ix, uint64_t *top, int *any)
{
    for (size_t j = 0; j < ix->n_timed; j++) {
        size_t i = ix->timed[j];
        if (!isfinite(ex_dur_us(x, i)))
            return ms_fail(x->err, MS_ERR_INVALID, "schedule action %zu: non-finite duration",
                           i);
    }
    for (int k = 0; k < SS_COUNT; k++) {
        x->st[k].q = ix->q[k];
        x->st[k].n = ix->n[k];
    }
    x->brief = ix->brief;
    *top = ix->top_alloc;
    *any = ix->any_alloc;
    return MS_OK;
}

static int has_side_use(const ex *x)
{
    for (size_t i = 0; i < x->nacts; i++)
        if (x->acts[i].kind == SA_FREE && x->acts[i].side_use) return 1;
    return 0;
}

/* Some compute action's trace op gives a host time or a host synchronize. */
static int has_host_times(const ex *x)
{
    if (!x->o.trace) return 0;
    /* most traces have no op with a host time at all: the trace says so without looking
     * each compute action's op up */
    if (!trace_has_host_times(x->o.trace)) return 0;
    for (size_t i = 0; i < x->nacts; i++) {
        const sched_action *a = ex_act(x, i);
        const trace_op *t = a->kind == SA_COMPUTE ? ex_action_op(x, a) : NULL;
        if (t && (t->host_us > 0 || t->host_sync)) return 1;
    }
    return 0;
}

/* Whether the ALLOC actions' ids (the largest is top, any: there is one) are compact enough
 * for a table by id (ex.dtab): the largest below a few per action; sets ndtab to it plus
 * one. */
static int dev_ids_dense(ex *x, uint64_t top, int any)
{
    if (any && top >= 4 * (uint64_t)x->nacts + 4096) return 0;
    x->ndtab = any ? (size_t)top + 1 : 0;
    return 1;
}

static ms_status setup(ex *x)
{
    x->acts = sched_actions_unbound(x->s, &x->nacts); /* the numbers: below */
    if (x->nacts > UINT32_MAX)
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
    if (x->o.issue_ahead != 0 && has_side_use(x))
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
    x->host_times = has_host_times(x) || x->o.eager_host_us > 0;
    x->host_clock = !x->issue && x->host_times;
    if (x->host_times) {
        ms_status fst = exfw_new(x->o.trace, x->s, x->m, x->o.ckpt_host_measured, &x->fw, x->err);
        if (fst != MS_OK) return fst;
    }
    if (x->issue) {
        x->h.ahead = x->o.issue_ahead < 0 ? INT64_MAX : (int64_t)x->o.issue_ahead;
        x->duse = u64map_new(64);
        x->huse = u64map_new(64);
        if (!x->duse || !x->huse) return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
        if (!(x->o.issue_us <= 1e12)) x->o.issue_us = 0; /* NaN or absurd: free */
    }
    uint64_t top = 0;
    int any = 0;
    const sched_index *ix = sched_get_index(x->s);
    /* A run that records spans or models the host reads actions' numbers in more places:
     * it reads them from the actions, brought up to date. */
    if (ix && !x->tl && !x->issue && !x->host_times) x->num = ix->num;
    else x->acts = sched_actions(x->s, &x->nacts);
    st = ix ? streams_of_index(x, ix, &top, &any) : split_streams(x, &top, &any);
    if (st != MS_OK) return st;
    /* the host issue model keeps the map */
    if (!x->issue && dev_ids_dense(x, top, any)) {
        x->dtab = malloc((x->ndtab ? x->ndtab : 1) * sizeof *x->dtab);
        x->dlive = calloc(x->ndtab / 64 + 1, sizeof *x->dlive);
        if (!x->dtab || !x->dlive) return ms_fail(x->err, MS_ERR_NOMEM, "out of memory");
    }
    return MS_OK;
}

static void teardown(ex *x)
{
    alloc_free(x->alloc);
    simbe_free(x->be);
    link_free(x->link);
    eng_free(x->eng);
    tl_free(x->tl);
    u64map_free(x->dev);
    free(x->dtab);
    free(x->dlive);
    bm_free(x->mix);
    exfw_free(x->fw);
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
        ex_mem_sample(&x);
        for (int k = 0; k < SS_COUNT; k++) ex_kick(&x, k);
        if (x.issue) exh_kick(&x);
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

/* test_rt_node.c — the executor with the collective hooks (runtime/rt_exec.c, rt_exec_ops.c
 * over runtime/rt_coll.c) on the fake device of tests/rt_exec_util.h and the fake NCCL of
 * tests/fake_nccl.c: a generated TP 2 x CP 2 workload's schedule, keep-all and full
 * recomputation, runs every collective of the schedule as NCCL calls (all-gathers and
 * reduce-scatters on the compute stream, each ring on the side stream beside its attention's
 * spin, with the attention's own time), with the ring merge off on the compute stream; a
 * failing NCCL call stops the run with its message; full swap and memo (its static arena,
 * collectives' operands in its rounding buffers) likewise. No GPU needed (CUDA builds only, as
 * tests/test_rt_exec). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_coll.h"
#include "tests/fake_nccl_log.h"
#include "tests/rt_exec_util.h"

#include <stdio.h>


/* The distinct stream=0x... values of the lines that start with `call`: 1 when all equal,
 * with it in *stream. */
static int one_stream_of(const char *log, const char *call, char *stream, size_t n)
{
    int same = 1;
    stream[0] = 0;
    for (const char *l = log; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        if (strncmp(l, call, strlen(call))) continue;
        const char *s = strstr(l, "stream=");
        const char *e = s ? strchr(s, '\n') : NULL;
        if (!s || !e) continue;
        char v[32];
        snprintf(v, sizeof v, "%.*s", (int)(e - s), s);
        if (!stream[0]) snprintf(stream, n, "%s", v);
        else same &= !strcmp(stream, v);
    }
    return same && stream[0];
}

typedef struct counts {
    int ag, rs, ring_ops, merged;
} counts;

/* What the schedule asks: its collective actions by kind, rings merged into attention. */
static counts expected(const schedule_t *s, const trace_t *t, const rt_ranks *r)
{
    counts c = {0, 0, 0, 0};
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind != SA_COMPUTE || a->op < 0) continue;
        const trace_op *op = trace_find_op(t, (uint64_t)a->op);
        if (a->ovl) {
            c.ring_ops++;
            c.merged++;
        }
        if (!op || op->kind != TK_COMM) continue;
        rt_coll_class k;
        ms_error err;
        if (rt_coll_classify(t, op, r, &k, &err) != MS_OK) continue;
        c.ag += k.kind == RC_ALL_GATHER;
        c.rs += k.kind == RC_REDUCE_SCATTER;
        c.ring_ops += k.kind == RC_RING;
    }
    return c;
}

static void run_policy(const char *pol, int overlap, trace_t *t, const machine_t *m,
                       rt_nccl *n)
{
    plan_t *plan = NULL;
    schedule_t *s = NULL;
    ms_error err;
    ms_status st = pol_plan(pol, t, m, NULL, &plan, &err);
    lower_opts lo;
    lower_opts_default(&lo);
    lo.overlap_ovl = overlap;
    if (st == MS_OK) st = lower_schedule(t, plan, m, &lo, &s, &err);
    jobview v;
    jobview_of(t, m, &v);
    rt_ranks *r = NULL;
    rt_coll *c = NULL;
    if (st == MS_OK) st = rt_ranks_new(&v, 0, &r, &err);
    if (st == MS_OK) st = rt_coll_new(t, r, 1, &c, &err);
    if (st != MS_OK) {
        TAP_OK(0, "%s: planned, lowered, collectives classified (%s)", pol, err.msg);
        plan_free(plan);
        sched_free(s);
        rt_ranks_free(r);
        return;
    }
    rt_nccl_id id;
    void *comm[RG_COUNT] = {0};
    rt_nccl_unique_id(n, &id, &err);
    for (int k = 0; k < RG_COUNT; k++)
        if (rt_coll_uses(c, (rt_group_kind)k)) {
            rt_nccl_comm_init(n, rt_ranks_size(r, (rt_group_kind)k), &id, 1, &comm[k], &err);
            rt_coll_set_comm(c, (rt_group_kind)k, n, comm[k]);
        }
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 64ULL << 30);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    o.trace = t;
    rt_coll_hooks(c, &o);
    lower_rb_map *rbm = NULL; /* memo: operands in its rounding buffers */
    if (lower_rb_map_new(t, plan, &rbm, &err) == MS_OK) o.rb_map = rbm;
    alloc_config cfg;
    uint64_t *ids = NULL, *offs = NULL;
    if (plan_alloc_config(plan, &cfg, &ids, &offs) == MS_OK) {
        o.allocator = plan->allocator;
        o.alloc_cfg = &cfg;
    }
    take_log();
    rt_exec_result res;
    rt_status rs = run(s, &o, &f, &b, &res, &err);
    char *log = take_log();
    counts want = expected(s, t, r);
    int ag = count(log, "allgather"), rsn = count(log, "reducescatter");
    int ring_groups = count(log, "group_start");
    rt_coll_stats cs;
    rt_coll_get_stats(c, &cs);
    TAP_OK(rs == RT_OK && res.outcome == RTX_OK && ag == want.ag && rsn == want.rs &&
           (int)cs.ops[RC_RING] == want.ring_ops && (int)res.collectives_beside == want.merged &&
           want.ring_ops > 0 && want.ag > 0,
           "%s%s: every collective of the schedule ran: %d all-gathers, %d reduce-scatters, %d "
           "rings (%d beside attention; %d NCCL groups)", pol, overlap ? "" : " (merge off)",
           ag, rsn, want.ring_ops, want.merged, ring_groups);
    char s_ag[40], s_ring[40];
    int ag_one = one_stream_of(log, "allgather", s_ag, sizeof s_ag);
    int ring_one = one_stream_of(log, "send", s_ring, sizeof s_ring);
    if (overlap)
        TAP_OK(ag_one && ring_one && strcmp(s_ag, s_ring),
               "%s: the TP collectives on one stream (%s), the rings on another (%s)", pol, s_ag,
               s_ring);
    else
        TAP_OK(ag_one && ring_one && !strcmp(s_ag, s_ring) && res.collectives_beside == 0,
               "%s, merge off: the rings serialized on the compute stream with the rest", pol);
    /* the spin kernels in launch order: a collective alone launches none; an attention
     * beside its ring spins its own time, not the merged action's larger one */
    size_t kn = 0;
    int bad = 0, longer = 0;
    for (size_t i = 0; i < sched_count(s) && kn < f.n_kernels; i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind != SA_COMPUTE) continue;
        const trace_op *op = a->op >= 0 ? trace_find_op(t, (uint64_t)a->op) : NULL;
        rt_coll_class cl;
        if (op && op->kind == TK_COMM && rt_coll_classify(t, op, r, &cl, &err) == MS_OK &&
            cl.kind != RC_NONE)
            continue;
        double f_rows = a->replay_frac > 0 && a->replay_frac < 1 ? a->replay_frac : 1;
        double own = a->ovl && op ? op->dur_us * f_rows : a->dur_us;
        if (own > a->dur_us) own = a->dur_us;
        longer += a->ovl && a->dur_us > own + 1e-6;
        bad += fabs(f.kernel_dur[kn++] - own) > 1e-6 * (own + 1);
    }
    TAP_OK(!bad && kn == f.n_kernels && (!overlap || longer > 0),
           "%s: every spin kernel lasts its action's time, an attention beside its ring its "
           "own (%d rings longer than their attention; %d mismatches)", pol, longer, bad);
    TAP_OK(clean(&f, &b), "%s: every stream (the side stream too), event and block released",
           pol);
    rt_exec_result_release(&res);
    lower_rb_map_free(rbm);
    free(ids);
    free(offs);
    for (int k = 0; k < RG_COUNT; k++) rt_nccl_comm_destroy(n, comm[k]);
    rt_coll_free(c);
    rt_ranks_free(r);
    sched_free(s);
    plan_free(plan);
}

static void test_failure(trace_t *t, const machine_t *m, rt_nccl *n)
{
    plan_t *plan = NULL;
    schedule_t *s = NULL;
    ms_error err;
    jobview v;
    jobview_of(t, m, &v);
    rt_ranks *r = NULL;
    rt_coll *c = NULL;
    ms_status st = pol_plan("keep-all", t, m, NULL, &plan, &err);
    if (st == MS_OK) st = lower_schedule(t, plan, m, NULL, &s, &err);
    if (st == MS_OK) st = rt_ranks_new(&v, 0, &r, &err);
    if (st == MS_OK) st = rt_coll_new(t, r, 0, &c, &err);
    void *comm = NULL;
    rt_nccl_id id;
    rt_nccl_unique_id(n, &id, &err);
    rt_nccl_comm_init(n, 2, &id, 0, &comm, &err);
    if (c) {
        rt_coll_set_comm(c, RG_TP, n, comm);
        rt_coll_set_comm(c, RG_CP, n, comm);
    }
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 64ULL << 30);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    o.trace = t;
    if (c) rt_coll_hooks(c, &o);
    setenv("FAKE_NCCL_FAIL", "ncclReduceScatter", 1);
    rt_exec_result res;
    rt_status rs = st == MS_OK ? run(s, &o, &f, &b, &res, &err) : RT_ERR_INVALID;
    unsetenv("FAKE_NCCL_FAIL");
    TAP_OK(rs == RT_ERR_CUDA && res.outcome == RTX_ERROR && strstr(res.failure, "collective") &&
           strstr(res.failure, "fake internal error") && clean(&f, &b),
           "a failing NCCL call stops the run with its message, everything released: %.160s",
           res.failure);
    take_log();
    if (st == MS_OK) rt_exec_result_release(&res);
    rt_nccl_comm_destroy(n, comm);
    rt_coll_free(c);
    rt_ranks_free(r);
    sched_free(s);
    plan_free(plan);
}

int main(void)
{
    const char *fake = getenv("MEMSIM_FAKE_NCCL");
    if (!fake || access(fake, R_OK)) TAP_SKIP_ALL("MEMSIM_FAKE_NCCL names no fake NCCL library");
    snprintf(log_path, sizeof log_path, "test_rt_node.%ld.log", (long)getpid());
    setenv("FAKE_NCCL_LOG", log_path, 1);
    setenv("MEMSIM_NCCL", fake, 1);
    rt_nccl *n = NULL;
    ms_error err;
    machine_profile *mp = NULL;
    gen_config c;
    if (rt_nccl_load(&n, &err) != RT_OK) {
        TAP_OK(0, "the fake NCCL loads: %s", err.msg);
        return tap_done();
    }
    if (!small_workload("dims:2,256,4,1024,1000", 2048, &mp, &c)) return tap_done();
    c.tp = 2;
    c.cp = 2;
    /* a slow NVLink, so that some rings outlast their attention kernel */
    mp->m.nvlink_Bps = 2e9;
    c.iterations = 2;
    trace_t *t = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(st == MS_OK, "a TP 2 x CP 2 trace (%s)", st == MS_OK ? "generated" : err.msg);
    if (t) {
        run_policy("keep-all", 1, t, &mp->m, n);
        run_policy("full-recompute", 1, t, &mp->m, n);
        run_policy("keep-all", 0, t, &mp->m, n);
        run_policy("full-swap", 1, t, &mp->m, n);
        run_policy("memo", 1, t, &mp->m, n);
        test_failure(t, &mp->m, n);
    }
    trace_free(t);
    machine_profile_free(mp);
    rt_nccl_free(n);
    remove(log_path);
    return tap_done();
}

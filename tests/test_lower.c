/* test_lower.c — tests of the policy registry (planners/policy.c), the baseline policies
 * (planners/baseline/policy_baseline.c) and lowering (planners/lower.c) on a hand-built 3-layer trace:
 * keep-all is the trace 1:1, full-recompute frees and rebuilds, full-swap offloads and
 * prefetches on the right streams and at the right places, alpha < 1 splits copy and
 * recomputation, the plan knob host_round sizes host buffers, schedules validate and dump
 * deterministically, bad plans are reported, and the simulator sees full-recompute lower the
 * peak. TAP output for `make check`. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planners/lower.h"
#include "planners/policy.h"
#include "sim/exec.h"
#include "tests/tap.h"
#include "traces/gen.h"

#define NL 3
#define MiB (1024ull * 1024ull)

/* ---- the hand-built trace ---- */

/* Ids: parameters 1000 + l (head 1100); per iteration `it` base B = 10000 * (it + 1):
 * layer l input B + 10l, a = B + 10l + 1 (skeletal), tmp = B + 10l + 2 (transient),
 * attn_out = B + 10l + 3 (skeletal); ops B + 100 + 10l + k for k = 1..4. */
#define BASE(it) (10000u * ((uint64_t)(it) + 1))
#define T_IN(it, l) (BASE(it) + 10u * (l))
#define T_A(it, l) (BASE(it) + 10u * (l) + 1)
#define T_TMP(it, l) (BASE(it) + 10u * (l) + 2)
#define T_B(it, l) (BASE(it) + 10u * (l) + 3)
#define OP(it, l, k) (BASE(it) + 100u + 10u * (l) + (k))
#define OP_BWD(it, l) (BASE(it) + 700u + (l))

static const uint64_t SZ_IN = 1 * MiB, SZ_A = 4 * MiB, SZ_TMP = 2 * MiB, SZ_B = 1 * MiB;
static const double D_OP1 = 10, D_OP2 = 5, D_OP3 = 20, D_OP4 = 3, D_BWD = 30;

static int build_failed;
/* 1: no backward op reads a layer's input; the trace frees it in the forward phase, after
 * its layer's section (a bf16 capture: nothing saved it, the layer's call held it) */
static int input_dies_at_return;

static void t_rec(trace_t *t, const trace_rec *r)
{
    if (trace_append(t, r) != MS_OK) build_failed = 1;
}

static void t_mark(trace_t *t, trace_markkind k, int64_t v)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_MARK;
    r.u.mark.kind = k;
    r.u.mark.value = v;
    t_rec(t, &r);
}

static void t_alloc(trace_t *t, uint64_t id, uint64_t bytes, trace_class c, int layer,
                    int64_t producer, const char *name)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    r.u.alloc.id = id;
    r.u.alloc.bytes = bytes;
    r.u.alloc.cls = c;
    r.u.alloc.layer = layer;
    r.u.alloc.producer = producer;
    snprintf(r.u.alloc.name, sizeof r.u.alloc.name, "%s", name);
    t_rec(t, &r);
}

static void t_free(trace_t *t, uint64_t id)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = id;
    t_rec(t, &r);
}

static void t_op(trace_t *t, uint64_t id, trace_opkind k, trace_phase ph, int layer, double dur,
                 const uint64_t *in, uint32_t nin, const uint64_t *out, uint32_t nout,
                 const char *name)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    r.u.op.id = id;
    r.u.op.kind = k;
    r.u.op.phase = ph;
    r.u.op.layer = layer;
    r.u.op.flops = 1e9;
    r.u.op.bytes_read = 1 << 20;
    r.u.op.bytes_written = 1 << 20;
    r.u.op.dur_us = dur;
    r.u.op.n_in = nin;
    r.u.op.in = in;
    r.u.op.n_out = nout;
    r.u.op.out = out;
    snprintf(r.u.op.name, sizeof r.u.op.name, "%s", name);
    t_rec(t, &r);
}

#define IDS(...) (const uint64_t[]){ __VA_ARGS__ }, sizeof((const uint64_t[]){ __VA_ARGS__ }) / 8

static void layer_fwd(trace_t *t, int it, int l, int named, double op1_dur)
{
    char n[48];
    t_mark(t, TM_LAYER, l);
    if (input_dies_at_return && l > 0) t_free(t, T_IN(it, l - 1));
    snprintf(n, sizeof n, "L%d.a", l);
    t_alloc(t, T_A(it, l), SZ_A, TC_ACT_SKEL, l, (int64_t)OP(it, l, 1), n);
    t_op(t, OP(it, l, 1), TK_GEMM, TP_FWD, l, op1_dur, IDS(T_IN(it, l), 1000u + l),
         IDS(T_A(it, l)), "op1");
    t_alloc(t, T_TMP(it, l), SZ_TMP, TC_ACT_TRANS, l, (int64_t)OP(it, l, 2), "tmp");
    t_op(t, OP(it, l, 2), TK_NORM, TP_FWD, l, D_OP2, IDS(T_A(it, l)), IDS(T_TMP(it, l)), "op2");
    snprintf(n, sizeof n, "L%d.attn_out", l);
    t_alloc(t, T_B(it, l), SZ_B, TC_ACT_SKEL, l, (int64_t)OP(it, l, 3), n);
    t_op(t, OP(it, l, 3), TK_ATTN, TP_FWD, l, D_OP3, IDS(T_TMP(it, l)), IDS(T_B(it, l)), "op3");
    t_free(t, T_TMP(it, l));
    int last = l == NL - 1;
    if (last) snprintf(n, sizeof n, "final_in");
    else snprintf(n, sizeof n, named ? "L%d.input" : "L%d.x", l + 1);
    t_alloc(t, T_IN(it, l + 1), SZ_IN, TC_ACT_SKEL, last ? -1 : l + 1, (int64_t)OP(it, l, 4), n);
    t_op(t, OP(it, l, 4), TK_ELEM, TP_FWD, l, D_OP4, IDS(T_B(it, l), T_IN(it, l)),
         IDS(T_IN(it, l + 1)), "op4");
}

static void layer_bwd(trace_t *t, int it, int l)
{
    t_mark(t, TM_LAYER, l);
    uint64_t g = BASE(it) + 600u + l;
    t_alloc(t, g, 512 * 1024, TC_ACT_TRANS, l, (int64_t)OP_BWD(it, l), "grad_in");
    if (input_dies_at_return)
        t_op(t, OP_BWD(it, l), TK_GEMM, TP_BWD, l, D_BWD,
             IDS(T_B(it, l), T_A(it, l), 1000u + l), IDS(g), "bwd");
    else
        t_op(t, OP_BWD(it, l), TK_GEMM, TP_BWD, l, D_BWD,
             IDS(T_B(it, l), T_A(it, l), T_IN(it, l), 1000u + l), IDS(g), "bwd");
    t_free(t, T_B(it, l));
    t_free(t, T_A(it, l));
    if (!input_dies_at_return) t_free(t, T_IN(it, l));
    t_free(t, g);
}

/* named: layer inputs are called "L<l>.input" (else the fallback rule must find them).
 * op1_dur: duration of op1 (-1: unknown). */
static trace_t *build(int iters, int named, double op1_dur)
{
    trace_t *t = trace_new();
    for (int l = 0; l < NL; l++) t_alloc(t, 1000u + l, 3 * MiB, TC_PARAM, l, -1, "w");
    t_alloc(t, 1100, 2 * MiB, TC_PARAM, -1, -1, "head.w");
    for (int it = 0; it < iters; it++) {
        t_mark(t, TM_ITER, it);
        t_mark(t, TM_PHASE, TP_FWD);
        t_alloc(t, T_IN(it, 0), SZ_IN, TC_ACT_SKEL, 0, (int64_t)(BASE(it) + 900),
                named ? "L0.input" : "L0.x");
        t_op(t, BASE(it) + 900, TK_EMBED, TP_FWD, -1, 1, NULL, 0, IDS(T_IN(it, 0)), "embed");
        for (int l = 0; l < NL; l++) layer_fwd(t, it, l, named, op1_dur);
        t_mark(t, TM_LAYER, -1);
        if (input_dies_at_return) t_free(t, T_IN(it, NL - 1));
        uint64_t loss = BASE(it) + 500;
        t_alloc(t, loss, 4096, TC_ACT_TRANS, -1, (int64_t)(BASE(it) + 901), "loss");
        t_op(t, BASE(it) + 901, TK_LOSS, TP_FWD, -1, 4, IDS(T_IN(it, NL), 1100), IDS(loss),
             "head");
        t_mark(t, TM_PHASE, TP_BWD);
        t_mark(t, TM_LAYER, -1);
        t_op(t, BASE(it) + 902, TK_GEMM, TP_BWD, -1, 8, IDS(loss, T_IN(it, NL)), NULL, 0,
             "head.bwd");
        t_free(t, loss);
        t_free(t, T_IN(it, NL));
        for (int l = NL - 1; l >= 0; l--) layer_bwd(t, it, l);
        t_mark(t, TM_PHASE, TP_OPT);
        t_op(t, BASE(it) + 903, TK_OPTIM, TP_OPT, -1, 2, IDS(1000, 1001, 1002, 1100), NULL, 0,
             "adam");
    }
    return t;
}

/* ---- schedule queries ---- */

static size_t count_kind(const schedule_t *s, sched_kind k)
{
    size_t n = 0;
    for (size_t i = 0; i < sched_count(s); i++) n += sched_get(s, i)->kind == k;
    return n;
}

/* Index of the first action matching (kind, stream, tensor) at or after `from`, or SIZE_MAX.
 * tensor UINT64_MAX: any. */
static size_t find(const schedule_t *s, size_t from, sched_kind k, int stream, uint64_t tensor)
{
    for (size_t i = from; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == k && (stream < 0 || (int)a->stream == stream) &&
            (tensor == UINT64_MAX || a->tensor == tensor))
            return i;
    }
    return SIZE_MAX;
}

static size_t find_op(const schedule_t *s, size_t from, int64_t op, int recompute)
{
    for (size_t i = from; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_COMPUTE && a->op == op && a->recompute == recompute) return i;
    }
    return SIZE_MAX;
}

/* Index of the n-th MARK of (kind, value) within phase ph (n from 0). */
static size_t find_mark(const schedule_t *s, trace_markkind k, int64_t v, trace_phase ph)
{
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_MARK && a->mark == k && a->mark_value == v && a->phase == ph) return i;
    }
    return SIZE_MAX;
}

static size_t count_match(const schedule_t *s, sched_kind k, int stream, uint64_t tensor)
{
    size_t n = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        n += a->kind == k && (int)a->stream == stream && a->tensor == tensor;
    }
    return n;
}

static char *dump_str(const schedule_t *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sched_dump(s, f);
    fclose(f);
    return buf;
}

/* Plans with policy `pol` (alpha < 0: none) and lowers; returns the schedule or NULL. */
static schedule_t *plan_lower(const trace_t *t, const char *pol, double alpha, lower_report *rep,
                              plan_t **plan_out)
{
    pol_opts po;
    pol_opts_default(&po);
    po.alpha = alpha;
    plan_t *p = NULL;
    ms_error err;
    if (pol_plan(pol, t, NULL, &po, &p, &err) != MS_OK) {
        TAP_NOTE("plan %s: %s", pol, err.msg);
        return NULL;
    }
    lower_opts lo;
    lower_opts_default(&lo);
    lo.report = rep;
    schedule_t *s = NULL;
    if (lower_schedule(t, p, NULL, &lo, &s, &err) != MS_OK) TAP_NOTE("lower %s: %s", pol, err.msg);
    if (plan_out) *plan_out = p;
    else plan_free(p);
    return s;
}

/* ---- tests ---- */

static void test_registry(void)
{
    size_t n;
    const pol_policy *const *r = pol_registry(&n);
    int ok = n >= 3;
    for (size_t i = 0; i < n; i++) {
        /* its own knob table, when it has one, is one of the tables --knob is checked against */
        int own_listed = !r[i]->own_knobs;
        for (const knobtab *const *k = r[i]->knob_tables; k && *k; k++)
            own_listed |= *k == r[i]->own_knobs;
        ok &= r[i]->name && r[i]->desc && r[i]->source && own_listed && r[i]->plan &&
              pol_find(r[i]->name) == r[i];
    }
    TAP_OK(ok, "registry: %zu policies, each with name, description, source and its own knob "
           "table among its knob tables", n);
    TAP_OK(pol_find("keep-all") && pol_find("full-recompute") && pol_find("full-swap") &&
           !pol_find("no-such-policy"), "pol_find knows the baselines only by their names");
    trace_t *t = build(1, 1, D_OP1);
    plan_t *p = NULL;
    ms_error err;
    TAP_OK(pol_plan("nope", t, NULL, NULL, &p, &err) == MS_ERR_NOTFOUND && !p &&
           strstr(err.msg, "nope"), "unknown policy: MS_ERR_NOTFOUND naming it");
    pol_opts po;
    pol_opts_default(&po);
    po.alpha = 1.5;
    TAP_OK(pol_plan("full-swap", t, NULL, &po, &p, &err) == MS_ERR_INVALID,
           "alpha above 1 is rejected");
    trace_free(t);
}

static void test_plans(void)
{
    trace_t *t = build(1, 1, D_OP1);
    plan_t *p = NULL;
    ms_error err;
    pol_opts po;
    pol_opts_default(&po);
    pol_knob kn[] = { { "note", "hello" } };
    po.knobs = kn;
    po.n_knobs = 1;
    ms_status st = pol_plan("full-recompute", t, NULL, &po, &p, &err);
    int ok = st == MS_OK && p && p->n_tensors == 3 * NL && p->default_decision == PD_KEEP;
    for (int l = 0; ok && l < NL; l++) {
        const plan_tensor *in = plan_find_tensor(p, T_IN(0, l));
        const plan_tensor *a = plan_find_tensor(p, T_A(0, l));
        const plan_tensor *b = plan_find_tensor(p, T_B(0, l));
        ok = in && a && b && in->decision == PD_KEEP && a->decision == PD_RECOMPUTE &&
             b->decision == PD_RECOMPUTE;
    }
    TAP_OK(ok, "full-recompute: layer inputs kept, other skeletal tensors recomputed");
    TAP_OK(p && strcmp(p->policy, "full-recompute") == 0 && strcmp(p->allocator, "caching") == 0 &&
           plan_get_knob(p, "note") && strcmp(plan_get_knob(p, "note"), "hello") == 0,
           "the plan records policy, allocator and knobs");
    TAP_OK(p && !plan_find_tensor(p, T_IN(0, NL)) && !plan_find_tensor(p, T_TMP(0, 0)),
           "no entries for non-layer or transient tensors");
    plan_free(p);
    trace_free(t);

    /* Without ".input" names the fallback finds the tensor made outside the layer. */
    t = build(1, 0, D_OP1);
    st = pol_plan("full-recompute", t, NULL, NULL, &p, &err);
    ok = st == MS_OK;
    for (int l = 0; ok && l < NL; l++)
        ok = plan_find_tensor(p, T_IN(0, l))->decision == PD_KEEP &&
             plan_find_tensor(p, T_A(0, l))->decision == PD_RECOMPUTE;
    TAP_OK(ok, "fallback rule: the input is the skeletal tensor produced outside the layer");
    plan_free(p);
    trace_free(t);
}

static void test_keep_all(void)
{
    trace_t *t = build(1, 1, D_OP1);
    size_t na = 0, nf = 0, no = 0, nm = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        trace_rtype ty = trace_get(t, i)->type;
        na += ty == TR_ALLOC, nf += ty == TR_FREE, no += ty == TR_OP, nm += ty == TR_MARK;
    }
    lower_report rep;
    schedule_t *s = plan_lower(t, "keep-all", -1, &rep, NULL);
    TAP_OK(s && sched_count(s) == trace_count(t) && count_kind(s, SA_ALLOC) == na &&
           count_kind(s, SA_FREE) == nf && count_kind(s, SA_COMPUTE) == no &&
           count_kind(s, SA_MARK) == nm && sched_event_count(s) == 0,
           "keep-all equals the trace 1:1 (%zu allocs, %zu frees, %zu ops, %zu marks)", na, nf,
           no, nm);
    int same = s != NULL;
    for (size_t i = 0; same && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        const sched_action *a = sched_get(s, i);
        if (r->type == TR_OP) same = a->op == (int64_t)r->u.op.id && a->dur_us == r->u.op.dur_us;
        if (r->type == TR_ALLOC) same = a->tensor == r->u.alloc.id && a->bytes == r->u.alloc.bytes;
        same &= a->stream == SS_COMPUTE;
    }
    TAP_OK(same, "keep-all keeps order, ids, bytes and durations on the compute stream");
    ms_error err;
    TAP_OK(s && sched_validate(s, &err) == MS_OK, "keep-all schedule validates");

    /* Without markers: the same program minus the marks. */
    lower_opts lo;
    lower_opts_default(&lo);
    lo.emit_marks = 0;
    schedule_t *s2 = NULL;
    TAP_OK(lower_schedule(t, NULL, NULL, &lo, &s2, &err) == MS_OK &&
           count_kind(s2, SA_MARK) == 0 && sched_count(s2) == trace_count(t) - nm,
           "emit_marks = 0 drops only the marks (NULL plan = keep all)");
    sched_free(s2);
    sched_free(s);
    trace_free(t);
}

/* drop_at=layer: the recomputed tensors live to their layer's forward end. */
static void test_full_recompute_layer_end(void)
{
    trace_t *t = build(1, 1, D_OP1);
    pol_opts po;
    pol_opts_default(&po);
    pol_knob k = { "drop_at", "layer" };
    po.knobs = &k;
    po.n_knobs = 1;
    plan_t *p = NULL;
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = NULL;
    lower_opts lo;
    lower_opts_default(&lo);
    int ok = pol_plan("full-recompute", t, NULL, &po, &p, &err) == MS_OK &&
             lower_schedule(t, p, NULL, &lo, &s, &err) == MS_OK;
    for (int l = 0; ok && l < NL; l++) {
        size_t op4 = find_op(s, 0, (int64_t)OP(0, l, 4), 0);
        size_t next = find_mark(s, TM_LAYER, l + 1 < NL ? l + 1 : -1, TP_FWD);
        ok = op4 != SIZE_MAX && find(s, op4, SA_FREE, SS_COMPUTE, T_A(0, l)) < next &&
             find(s, op4, SA_FREE, SS_COMPUTE, T_B(0, l)) < next;
    }
    TAP_OK(ok, "drop_at=layer: full-recompute frees a and attn_out at each layer's forward end "
           "%s", err.msg);
    sched_free(s);
    plan_free(p);
    trace_free(t);
}

static void test_full_recompute(void)
{
    trace_t *t = build(1, 1, D_OP1);
    lower_report rep;
    schedule_t *s = plan_lower(t, "full-recompute", -1, &rep, NULL);
    ms_error err;
    ms_error_clear(&err);
    TAP_OK(s && sched_validate(s, &err) == MS_OK, "full-recompute schedule validates %s",
           err.msg);
    if (!s) return;
    int fwd_ok = 1, bwd_ok = 1;
    for (int l = 0; l < NL; l++) {
        /* drop_at=use (full-recompute's default): a dies after op2, its last forward use,
           before op3 allocates attn_out; attn_out after op4 */
        size_t op2 = find_op(s, 0, (int64_t)OP(0, l, 2), 0);
        size_t op4 = find_op(s, 0, (int64_t)OP(0, l, 4), 0);
        size_t b_at = find(s, op2, SA_ALLOC, SS_COMPUTE, T_B(0, l));
        size_t next = find_mark(s, TM_LAYER, l + 1 < NL ? l + 1 : -1, TP_FWD);
        size_t fa = find(s, op2, SA_FREE, SS_COMPUTE, T_A(0, l));
        size_t fb = find(s, op4, SA_FREE, SS_COMPUTE, T_B(0, l));
        fwd_ok &= op2 != SIZE_MAX && op4 != SIZE_MAX && fa < b_at && fb < next &&
                  find(s, op4, SA_FREE, SS_COMPUTE, T_IN(0, l)) > next;
        size_t bm = find_mark(s, TM_LAYER, l, TP_BWD);
        size_t bw = find_op(s, 0, (int64_t)OP_BWD(0, l), 0);
        size_t ra = find(s, bm, SA_ALLOC, SS_COMPUTE, T_A(0, l));
        size_t rb = find(s, bm, SA_ALLOC, SS_COMPUTE, T_B(0, l));
        size_t r1 = find_op(s, bm, (int64_t)OP(0, l, 1), 1);
        size_t r3 = find_op(s, bm, (int64_t)OP(0, l, 3), 1);
        bwd_ok &= bm != SIZE_MAX && ra > bm && rb > bm && ra < r1 && rb < r3 && r1 < bw &&
                  r3 < bw && find_op(s, bm, (int64_t)OP(0, l, 4), 1) == SIZE_MAX;
    }
    TAP_OK(fwd_ok, "full-recompute frees a and attn_out after their last forward use, not the "
           "input");
    TAP_OK(bwd_ok, "full-recompute re-allocates and recomputes them after the backward mark, "
           "before the layer's backward op (op4 not replayed)");
    double rec_us = 0;
    size_t rec_n = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_COMPUTE && a->recompute) rec_us += a->dur_us, rec_n++;
    }
    double want = NL * (D_OP1 + D_OP2 + D_OP3);
    TAP_OK(rec_n == 3 * NL && fabs(rec_us - want) < 1e-9 && fabs(rep.recompute_us - want) < 1e-9,
           "recompute COMPUTE actions: %zu of %g us in all (want %d of %g)", rec_n, rec_us,
           3 * NL, want);
    TAP_OK(rep.dropped == 2 * NL && rep.rebuilt == 2 * NL && rep.swapped == 0,
           "report: %llu dropped, %llu rebuilt", (unsigned long long)rep.dropped,
           (unsigned long long)rep.rebuilt);
    size_t tmp_allocs = 0;
    for (int l = 0; l < NL; l++) tmp_allocs += count_match(s, SA_ALLOC, SS_COMPUTE, T_TMP(0, l));
    TAP_OK(tmp_allocs == 2 * NL, "the transient its producers need is re-allocated (and freed)");
    sched_free(s);
    trace_free(t);
    test_full_recompute_layer_end();
}

static void test_full_swap(void)
{
    trace_t *t = build(1, 1, D_OP1);
    lower_report rep;
    schedule_t *s = plan_lower(t, "full-swap", -1, &rep, NULL);
    ms_error err;
    ms_error_clear(&err);
    TAP_OK(s && sched_validate(s, &err) == MS_OK, "full-swap schedule validates %s", err.msg);
    if (!s) return;
    int copies_ok = 1, place_ok = 1, wait_ok = 1, free_ok = 1;
    for (int l = 0; l < NL; l++) {
        uint64_t ids[3] = { T_IN(0, l), T_A(0, l), T_B(0, l) };
        uint64_t sz[3] = { SZ_IN, SZ_A, SZ_B };
        size_t bm = find_mark(s, TM_LAYER, l, TP_BWD);
        size_t prev = l == NL - 1 ? find_mark(s, TM_PHASE, TP_BWD, TP_BWD)
                                  : find_mark(s, TM_LAYER, l + 1, TP_BWD);
        size_t bw = find_op(s, 0, (int64_t)OP_BWD(0, l), 0);
        for (int k = 0; k < 3; k++) {
            size_t d = find(s, 0, SA_COPY_D2H, SS_D2H, ids[k]);
            size_t h = find(s, 0, SA_COPY_H2D, SS_H2D, ids[k]);
            copies_ok &= count_match(s, SA_COPY_D2H, SS_D2H, ids[k]) == 1 &&
                         count_match(s, SA_COPY_H2D, SS_H2D, ids[k]) == 1 &&
                         sched_get(s, d)->bytes == sz[k] && sched_get(s, h)->bytes == sz[k];
            place_ok &= prev != SIZE_MAX && h > prev && h < bm;
            free_ok &= count_match(s, SA_FREE, SS_D2H, ids[k]) == 1 &&
                       count_match(s, SA_FREE, SS_COMPUTE, ids[k]) == 1 &&
                       find(s, 0, SA_FREE, SS_COMPUTE, ids[k]) > bw;
        }
        /* the compute stream waits, between the backward mark and the op, on the event the
         * H2D stream records after this layer's copies */
        size_t w = find(s, bm, SA_WAIT, SS_COMPUTE, UINT64_MAX);
        size_t last_h2d = find(s, 0, SA_COPY_H2D, SS_H2D, T_B(0, l));
        size_t rec = find(s, last_h2d, SA_RECORD, SS_H2D, UINT64_MAX);
        wait_ok &= w < bw && rec != SIZE_MAX && sched_get(s, w)->event == sched_get(s, rec)->event;
    }
    TAP_OK(copies_ok, "full-swap: one D2H copy on d2h and one H2D copy on h2d of full bytes per "
           "skeletal tensor");
    TAP_OK(place_ok, "layer L's prefetch is placed after layer L+1's backward mark (phase bwd "
           "for the last layer) and before L's own");
    TAP_OK(wait_ok, "compute waits for layer L's prefetch before L's backward op");
    TAP_OK(free_ok, "device block freed on d2h after the offload, and once on compute after "
           "the backward (the prefetched block)");
    TAP_OK(rep.swapped == 3 * NL && rep.prefetched == 3 * NL &&
           rep.d2h_bytes == NL * (SZ_IN + SZ_A + SZ_B) && rep.h2d_bytes == rep.d2h_bytes &&
           rep.recompute_ops == 0, "report: %llu swapped, %llu bytes each way",
           (unsigned long long)rep.swapped, (unsigned long long)rep.d2h_bytes);
    size_t ha = 0, hf = 0;
    for (int l = 0; l < NL; l++) {
        ha += count_match(s, SA_HOST_ALLOC, SS_D2H, T_A(0, l));
        hf += count_match(s, SA_HOST_FREE, SS_H2D, T_A(0, l));
    }
    TAP_OK(ha == NL && hf == NL, "host memory taken on d2h, given back on h2d");

    char *d1 = dump_str(s);
    schedule_t *s2 = plan_lower(t, "full-swap", -1, NULL, NULL);
    char *d2 = s2 ? dump_str(s2) : NULL;
    TAP_OK(d1 && d2 && strcmp(d1, d2) == 0 && strlen(d1) > 100,
           "two lowerings give byte-identical dumps (%zu bytes)", d1 ? strlen(d1) : 0);
    free(d1);
    free(d2);
    sched_free(s2);

    lower_opts lo;
    lower_opts_default(&lo);
    lo.prefetch_alloc_on_compute = 1;
    plan_t *p = NULL;
    pol_plan("full-swap", t, NULL, NULL, &p, &err);
    s2 = NULL;
    ms_status st = lower_schedule(t, p, NULL, &lo, &s2, &err);
    TAP_OK(st == MS_OK && sched_validate(s2, &err) == MS_OK &&
           count_match(s2, SA_ALLOC, SS_H2D, T_A(0, 1)) == 0 &&
           count_match(s2, SA_ALLOC, SS_COMPUTE, T_A(0, 1)) == 2,
           "prefetch_alloc_on_compute moves the prefetch ALLOC to the compute stream");
    plan_free(p);
    sched_free(s2);
    sched_free(s);
    trace_free(t);
}

/* Plan knob host_round sizes the pinned host buffers: a swapped tensor's own buffer (no
 * rounding buffers) is its copied bytes with exact, their power of two otherwise. */
static void test_host_round(void)
{
    trace_t *t = build(1, 1, D_OP1);
    static const char *const vals[] = { "exact", "layer_pow2", "tensor_pow2" };
    const uint64_t want[] = { 3 * MiB, 4 * MiB, 4 * MiB };
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        pol_opts o;
        pol_opts_default(&o);
        o.alpha = 0.75; /* a's 4 MiB: 3 MiB copied */
        plan_t *p = NULL;
        schedule_t *s = NULL;
        ms_error err;
        ms_status st = pol_plan("full-swap", t, NULL, &o, &p, &err);
        if (st == MS_OK) plan_set_knob(p, "host_round", vals[i]);
        if (st == MS_OK) st = lower_schedule(t, p, NULL, NULL, &s, &err);
        size_t h = st == MS_OK ? find(s, 0, SA_HOST_ALLOC, SS_D2H, T_A(0, 1)) : SIZE_MAX;
        size_t d = st == MS_OK ? find(s, 0, SA_COPY_D2H, SS_D2H, T_A(0, 1)) : SIZE_MAX;
        ok &= h != SIZE_MAX && d != SIZE_MAX && sched_get(s, h)->bytes == want[i] &&
              sched_get(s, d)->bytes == 3 * MiB;
        sched_free(s);
        plan_free(p);
    }
    TAP_OK(ok, "host_round: a 3 MiB copy takes 3 MiB of host (exact), 4 MiB (layer_pow2, "
           "tensor_pow2); the copy stays 3 MiB");
    const char *bad[][2] = { { "host_round", "pow2" }, { "host_pow2", "1" } };
    int refused = 0;
    for (int i = 0; i < 2; i++) {
        plan_t *p = NULL;
        schedule_t *s = NULL;
        ms_error err;
        ms_status st = pol_plan("full-swap", t, NULL, NULL, &p, &err);
        if (st == MS_OK) plan_set_knob(p, bad[i][0], bad[i][1]);
        if (st == MS_OK && i == 1) plan_set_knob(p, "host_round", "exact");
        if (st == MS_OK) st = lower_schedule(t, p, NULL, NULL, &s, &err);
        refused += st == MS_ERR_INVALID && strstr(err.msg, "host_round") != NULL;
        sched_free(s);
        plan_free(p);
    }
    TAP_OK(refused == 2, "an unknown host_round, or one that contradicts host_pow2, is refused");
    trace_free(t);
}

static void test_alpha(void)
{
    trace_t *t = build(1, 1, D_OP1);
    lower_report rep;
    schedule_t *s = plan_lower(t, "full-swap", 0.5, &rep, NULL);
    ms_error err;
    TAP_OK(s && sched_validate(s, &err) == MS_OK, "alpha 0.5 schedule validates");
    if (!s) return;
    int ok = 1;
    for (int l = 0; l < NL; l++) {
        size_t d = find(s, 0, SA_COPY_D2H, SS_D2H, T_A(0, l));
        size_t h = find(s, 0, SA_COPY_H2D, SS_H2D, T_A(0, l));
        size_t al = find(s, 0, SA_ALLOC, SS_H2D, T_A(0, l));
        ok &= sched_get(s, d)->bytes == SZ_A / 2 && sched_get(s, h)->bytes == SZ_A / 2 &&
              sched_get(s, al)->bytes == SZ_A &&
              sched_get(s, find(s, 0, SA_COPY_D2H, SS_D2H, T_B(0, l)))->bytes == SZ_B &&
              sched_get(s, find(s, 0, SA_COPY_D2H, SS_D2H, T_IN(0, l)))->bytes == SZ_IN;
    }
    TAP_OK(ok, "alpha 0.5 halves a's copies (block still whole); input and attn_out stay whole");
    int rec_ok = 1;
    for (int l = 0; l < NL; l++) {
        size_t bm = find_mark(s, TM_LAYER, l, TP_BWD);
        size_t r = find_op(s, bm, (int64_t)OP(0, l, 1), 1);
        size_t bw = find_op(s, 0, (int64_t)OP_BWD(0, l), 0);
        rec_ok &= r != SIZE_MAX && r < bw && fabs(sched_get(s, r)->dur_us - 0.5 * D_OP1) < 1e-12;
    }
    TAP_OK(rec_ok && rep.recompute_ops == NL && fabs(rep.recompute_us - NL * 0.5 * D_OP1) < 1e-9,
           "alpha 0.5 recomputes half of the producer's duration before the layer's backward");
    sched_free(s);
    trace_free(t);
}

/* A layer input no op saves, freed by the trace after its layer's forward: full-recompute
 * holds it through the layer's backward (PyTorch's checkpoint keeps the arguments it reruns
 * the layer on until the layer's saved-tensor holders are gone), replays the layer from it
 * and frees it once the layer's backward has run; keep-all frees it where the trace does. */
static void test_input_freed_after_layer(void)
{
    input_dies_at_return = 1;
    trace_t *t = build(1, 1, D_OP1);
    input_dies_at_return = 0;
    lower_report rep;
    memset(&rep, 0, sizeof rep);
    schedule_t *keep = plan_lower(t, "keep-all", -1, &rep, NULL);
    int keep_ok = keep != NULL;
    for (int l = 0; keep && l < NL; l++)
        keep_ok &= find(keep, 0, SA_FREE, SS_COMPUTE, T_IN(0, l)) <
                   find_mark(keep, TM_PHASE, TP_BWD, TP_BWD);
    TAP_OK(keep_ok, "keep-all frees each layer input in the forward, as the trace does");
    memset(&rep, 0, sizeof rep);
    schedule_t *s = plan_lower(t, "full-recompute", -1, &rep, NULL);
    ms_error err;
    ms_error_clear(&err);
    TAP_OK(s && sched_validate(s, &err) == MS_OK, "full-recompute lowers it %s", err.msg);
    int ok = s != NULL;
    for (int l = 0; s && l < NL; l++) {
        size_t bm = find_mark(s, TM_LAYER, l, TP_BWD);
        size_t r1 = find_op(s, bm, (int64_t)OP(0, l, 1), 1);
        size_t fin = find(s, 0, SA_FREE, SS_COMPUTE, T_IN(0, l));
        size_t bw = find_op(s, 0, (int64_t)OP_BWD(0, l), 0);
        ok &= bm != SIZE_MAX && r1 != SIZE_MAX && bw != SIZE_MAX && fin > r1 && fin > bw &&
              count_match(s, SA_FREE, SS_COMPUTE, T_IN(0, l)) == 1;
    }
    TAP_OK(ok && rep.rebuilt == 2 * NL, "each input is held through its layer's backward and "
           "freed after it, not at the replay that reads it (%llu rebuilt)",
           (unsigned long long)rep.rebuilt);
    sched_free(s);
    sched_free(keep);
    trace_free(t);
}

static void test_bad_plans(void)
{
    trace_t *t = build(1, 1, D_OP1);
    ms_error err;
    schedule_t *s = NULL;
    plan_t *p = plan_new("hand", "caching");
    plan_set_tensor(p, 424242, PD_RECOMPUTE, 0);
    plan_sort(p);
    TAP_OK(lower_schedule(t, p, NULL, NULL, &s, &err) == MS_ERR_INVALID && !s &&
           strstr(err.msg, "424242"), "unknown tensor id in the plan is reported: %s", err.msg);
    lower_opts lo;
    lower_opts_default(&lo);
    lower_report rep;
    lo.report = &rep;
    lo.ignore_unknown_ids = 1;
    TAP_OK(lower_schedule(t, p, NULL, &lo, &s, &err) == MS_OK && rep.unknown_ids == 1 &&
           sched_count(s) == trace_count(t), "... or counted and ignored on request");
    sched_free(s);
    s = NULL;
    plan_free(p);

    p = plan_new("hand", "caching");
    plan_set_tensor(p, T_A(0, 1), PD_DHA, 0);
    plan_sort(p);
    TAP_OK(lower_schedule(t, p, NULL, NULL, &s, &err) == MS_ERR_UNSUPPORTED &&
           strstr(err.msg, "DHA lowering is not implemented yet"), "DHA: %s", err.msg);
    plan_free(p);

    p = plan_new("hand", "caching");
    plan_set_tensor(p, T_IN(0, 1), PD_RECOMPUTE, 0);
    plan_sort(p);
    TAP_OK(lower_schedule(t, p, NULL, NULL, &s, &err) == MS_ERR_INVALID &&
           strstr(err.msg, "made before layer 1"), "recomputing a layer input: %s", err.msg);
    plan_free(p);

    p = plan_new("hand", "caching");
    plan_set_tensor(p, T_IN(0, NL), PD_SWAP, 1);
    plan_sort(p);
    TAP_OK(lower_schedule(t, p, NULL, NULL, &s, &err) == MS_ERR_INVALID &&
           strstr(err.msg, "no transformer layer"), "swapping a non-layer tensor: %s", err.msg);
    plan_free(p);
    trace_free(t);

    t = build(1, 1, -1);
    TAP_OK(lower_schedule(t, NULL, NULL, NULL, &s, &err) == MS_ERR_INVALID &&
           strstr(err.msg, "has no duration"), "op without duration and no machine: %s",
           err.msg);
    machine_t m;
    memset(&m, 0, sizeof m);
    m.gpu_peak_bf16_flops = 989e12;
    m.gpu_peak_fp32_flops = 67e12;
    m.gpu_hbm_Bps = 3.35e12;
    m.gpu_gemm_eff = 0.7;
    m.gpu_attn_eff = 0.5;
    m.gpu_mem_eff = 0.8;
    TAP_OK(lower_schedule(t, NULL, &m, NULL, &s, &err) == MS_OK &&
           sched_get(s, find_op(s, 0, (int64_t)OP(0, 0, 1), 0))->dur_us > 0,
           "with a machine the roofline gives it a duration");
    sched_free(s);
    trace_free(t);
}

static void test_iterations(void)
{
    trace_t *t = build(2, 1, D_OP1);
    lower_opts lo;
    lower_opts_default(&lo);
    lo.iter_first = 1;
    plan_t *p = NULL;
    ms_error err;
    pol_plan("full-recompute", t, NULL, NULL, &p, &err);
    schedule_t *s = NULL;
    ms_status st = lower_schedule(t, p, NULL, &lo, &s, &err);
    size_t iters = 0, it1 = 0;
    for (size_t i = 0; st == MS_OK && i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_MARK && a->mark == TM_ITER) iters++, it1 += a->mark_value == 1;
    }
    TAP_OK(st == MS_OK && sched_validate(s, &err) == MS_OK && iters == 1 && it1 == 1 &&
           find_op(s, 0, (int64_t)OP(0, 0, 1), 0) == SIZE_MAX &&
           find_op(s, 0, (int64_t)OP(1, 0, 1), 1) != SIZE_MAX &&
           count_match(s, SA_ALLOC, SS_COMPUTE, 1000) == 1,
           "iter_first = 1 lowers only iteration 1 (parameters still allocated)");
    sched_free(s);
    lo.iter_first = 0;
    lo.iter_count = 1;
    s = NULL;
    st = lower_schedule(t, p, NULL, &lo, &s, &err);
    TAP_OK(st == MS_OK && sched_validate(s, &err) == MS_OK &&
           find_op(s, 0, (int64_t)OP(1, 0, 1), 0) == SIZE_MAX &&
           find_op(s, 0, (int64_t)OP(0, 0, 1), 1) != SIZE_MAX,
           "iter_count = 1 lowers only iteration 0");
    sched_free(s);
    plan_free(p);
    trace_free(t);
}


/* MEMO's tensor-level choice with alpha = 0 written by hand: swap the layer input and the
 * attention output, recompute the rest. Only the op that makes `a` is replayed, after the
 * prefetch of the layer is waited for. */
static void test_mixed(void)
{
    trace_t *t = build(1, 1, D_OP1);
    plan_t *p = plan_new("hand", "caching");
    for (int l = 0; l < NL; l++) {
        plan_set_tensor(p, T_IN(0, l), PD_SWAP, 1);
        plan_set_tensor(p, T_B(0, l), PD_SWAP, 1);
        plan_set_tensor(p, T_A(0, l), PD_RECOMPUTE, 0);
    }
    plan_sort(p);
    schedule_t *s = NULL;
    ms_error err;
    lower_report rep;
    lower_opts lo;
    lower_opts_default(&lo);
    lo.report = &rep;
    ms_status st = lower_schedule(t, p, NULL, &lo, &s, &err);
    ms_error_clear(&err);
    TAP_OK(st == MS_OK && sched_validate(s, &err) == MS_OK, "mixed swap/recompute plan lowers "
           "and validates %s", err.msg);
    int ok = st == MS_OK && rep.recompute_ops == NL && rep.swapped == 2 * NL &&
             rep.dropped == NL;
    for (int l = 0; ok && l < NL; l++) {
        size_t bm = find_mark(s, TM_LAYER, l, TP_BWD);
        size_t w = find(s, bm, SA_WAIT, SS_COMPUTE, UINT64_MAX);
        size_t r1 = find_op(s, bm, (int64_t)OP(0, l, 1), 1);
        ok = w < r1 && r1 < find_op(s, 0, (int64_t)OP_BWD(0, l), 0) &&
             find_op(s, 0, (int64_t)OP(0, l, 2), 1) == SIZE_MAX &&
             find_op(s, 0, (int64_t)OP(0, l, 3), 1) == SIZE_MAX;
    }
    TAP_OK(ok, "only a's producer is replayed, after the wait for the prefetched input");
    sched_free(s);
    plan_free(p);
    trace_free(t);

    /* A tensor of layer 0 read by layer 1's forward cannot be offloaded after layer 0. */
    t = trace_new();
    t_mark(t, TM_PHASE, TP_FWD);
    t_mark(t, TM_LAYER, 0);
    t_alloc(t, 1, 1024, TC_ACT_SKEL, 0, 11, "L0.x");
    t_op(t, 11, TK_GEMM, TP_FWD, 0, 1, NULL, 0, IDS(1), "make");
    t_mark(t, TM_LAYER, 1);
    t_op(t, 12, TK_GEMM, TP_FWD, 1, 1, IDS(1), NULL, 0, "late_use");
    p = plan_new("hand", "caching");
    plan_set_tensor(p, 1, PD_SWAP, 1);
    plan_sort(p);
    s = NULL;
    TAP_OK(lower_schedule(t, p, NULL, NULL, &s, &err) == MS_ERR_INVALID && !s &&
           strstr(err.msg, "late_use"), "use of an offloaded tensor is reported: %s", err.msg);
    plan_free(p);
    trace_free(t);
}

/* The real generator's trace (2 layers, TP 2, 2 iterations): every baseline lowers to a
 * valid schedule, full-recompute rebuilds all it drops, full-swap brings back all it swaps. */
/* Plan knobs record_stream and stream_pools: FREEs of blocks a collective used are marked
 * side_use, ALLOCs of tensors the trace makes on a side stream carry its pool. */
static const schedule_t *fs_lower(const trace_t *t, const char *rs, const char *sp,
                                  schedule_t **out, ms_error *err)
{
    plan_t *p = NULL;
    pol_opts po;
    pol_opts_default(&po);
    *out = NULL;
    if (pol_plan("keep-all", t, NULL, &po, &p, err) != MS_OK) return NULL;
    if (rs) plan_set_knob(p, "record_stream", rs);
    if (sp) plan_set_knob(p, "stream_pools", sp);
    lower_schedule(t, p, NULL, NULL, out, err);
    plan_free(p);
    return *out;
}

static const sched_action *fs_act(const schedule_t *s, sched_kind k, uint64_t tensor)
{
    size_t i = find(s, 0, k, -1, tensor);
    return i == SIZE_MAX ? NULL : sched_get(s, i);
}

static void test_framework_streams(void)
{
    trace_t *t = trace_new();
    t_mark(t, TM_ITER, 0);
    t_alloc(t, 1, 100 << 20, TC_ACT_TRANS, -1, -1, "x");
    t_alloc(t, 2, 400 << 20, TC_ACT_TRANS, -1, 1, "x_full");
    t_op(t, 1, TK_COMM, TP_FWD, -1, 10, IDS(1), IDS(2), "x.ag");
    t_free(t, 1);
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    r.u.alloc.id = 3;
    r.u.alloc.bytes = 100 << 20;
    r.u.alloc.cls = TC_ACT_TRANS;
    r.u.alloc.layer = -1;
    r.u.alloc.stream = 1;
    r.u.alloc.producer = 2;
    snprintf(r.u.alloc.name, sizeof r.u.alloc.name, "side");
    t_rec(t, &r);
    t_op(t, 2, TK_GEMM, TP_FWD, -1, 10, IDS(2), IDS(3), "g");
    t_free(t, 2);
    t_free(t, 3);
    ms_error err;
    schedule_t *s0 = NULL, *s1 = NULL, *s2 = NULL;
    fs_lower(t, NULL, NULL, &s0, &err);
    fs_lower(t, "1", "1", &s1, &err);
    TAP_OK(s0 && s1 && !build_failed, "framework streams: lowered with and without the knobs");
    if (s0 && s1) {
        int none = 1;
        for (size_t i = 0; i < sched_count(s0); i++)
            none &= !sched_get(s0, i)->side_use && !sched_get(s0, i)->pool;
        TAP_OK(none, "default: no side_use, no pool");
        const sched_action *f1 = fs_act(s1, SA_FREE, 1), *f2 = fs_act(s1, SA_FREE, 2),
                           *f3 = fs_act(s1, SA_FREE, 3), *a3 = fs_act(s1, SA_ALLOC, 3),
                           *a1 = fs_act(s1, SA_ALLOC, 1);
        TAP_OK(f1 && f2 && f3 && f1->side_use && f2->side_use && !f3->side_use,
               "record_stream=1: the collective's input and output are side_use, the GEMM's "
               "output is not");
        TAP_OK(a1 && a3 && a1->pool == 0 && a3->pool == 1,
               "stream_pools=1: the side stream's tensor takes pool 1");
        char *d = dump_str(s1);
        TAP_OK(d && strstr(d, "side_use=1") && strstr(d, "pool=1"),
               "the dump shows side_use and pool");
        free(d);
    }
    TAP_OK(!fs_lower(t, "maybe", NULL, &s2, &err) &&
               strstr(err.msg, "record_stream"),
           "a bad record_stream value is an error: %s", err.msg);
    sched_free(s0);
    sched_free(s1);
    sched_free(s2);
    trace_free(t);
}

static void fill_machine(machine_t *m);
static void test_generated(void)
{
    machine_t m;
    fill_machine(&m);
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    trace_t *t = NULL;
    if (model_from_dims(2, 256, 4, 1024, 1000, &c.model, &err) != MS_OK ||
        (c.seq = 512, c.tp = 2, gen_trace(&c, &m, &t, &err)) != MS_OK) {
        TAP_OK(0, "generated trace: %s", err.msg);
        return;
    }
    const char *pols[] = { "keep-all", "full-recompute", "full-swap" };
    for (int i = 0; i < 3; i++) {
        lower_report rep;
        memset(&rep, 0, sizeof rep);
        schedule_t *s = plan_lower(t, pols[i], i == 2 ? 0.25 : -1, &rep, NULL);
        ms_error_clear(&err);
        TAP_OK(s && sched_validate(s, &err) == MS_OK && rep.rebuilt == rep.dropped &&
               rep.prefetched == rep.swapped && rep.ignored == 0 &&
               (i == 0 ? sched_count(s) == trace_count(t)
                       : i == 1 ? rep.dropped > 0 : rep.swapped > 0 && rep.recompute_ops > 0),
               "generated trace under %s: %llu actions, %llu dropped, %llu swapped %s",
               pols[i], (unsigned long long)rep.actions, (unsigned long long)rep.dropped,
               (unsigned long long)rep.swapped, err.msg);
        sched_free(s);
    }
    trace_free(t);
}

static void fill_machine(machine_t *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "test");
    m->gpu_hbm_bytes = 80ull << 30;
    m->gpu_peak_bf16_flops = 989e12;
    m->gpu_peak_fp32_flops = 67e12;
    m->gpu_hbm_Bps = 3.35e12;
    m->gpu_gemm_eff = 0.7;
    m->gpu_attn_eff = 0.5;
    m->gpu_mem_eff = 0.8;
    m->link_h2d_Bps = 55e9;
    m->link_d2h_Bps = 55e9;
    m->link_duplex_Bps = 100e9;
    m->dha_read_Bps = 51e9;
    m->dha_write_Bps = 52e9;
    m->dha_gemm_eff = 1;
    m->dha_other_eff = 1;
    m->host_mem_bytes = 1ull << 40;
    m->host_cpu_cores = 64;
    m->node_gpus = 1;
    m->node_gpus_per_switch = 1;
    m->vmm_granularity_bytes = 2 << 20;
}

static int simulate(const schedule_t *s, const machine_t *m, sim_result *r)
{
    sim_opts so;
    sim_opts_default(&so);
    so.allocator = "caching";
    res_init(r);
    ms_error err;
    ms_status st = sim_execute(s, m, &so, r, &err);
    if (st != MS_OK) TAP_NOTE("sim_execute: %s", err.msg);
    return st == MS_OK && r->status == RS_OK;
}

static void test_end_to_end(void)
{
    if (!alloc_find("caching")) {
        TAP_NOTE("no caching allocator in this build: end-to-end check skipped");
        return;
    }
    machine_t m;
    fill_machine(&m);
    trace_t *t = build(1, 1, D_OP1);
    schedule_t *keep = plan_lower(t, "keep-all", -1, NULL, NULL);
    schedule_t *rec = plan_lower(t, "full-recompute", -1, NULL, NULL);
    schedule_t *swp = plan_lower(t, "full-swap", -1, NULL, NULL);
    sim_result rk, rr, rs;
    int ok = keep && rec && swp && simulate(keep, &m, &rk) && simulate(rec, &m, &rr) &&
             simulate(swp, &m, &rs);
    TAP_OK(ok && rr.peak_allocated_bytes < rk.peak_allocated_bytes,
           "simulated: full-recompute peak allocated %llu < keep-all %llu",
           ok ? (unsigned long long)rr.peak_allocated_bytes : 0ull,
           ok ? (unsigned long long)rk.peak_allocated_bytes : 0ull);
    TAP_OK(ok && rr.recompute_s > 0 && rk.recompute_s == 0 && rs.d2h_busy_s > 0 &&
           rs.peak_allocated_bytes < rk.peak_allocated_bytes,
           "simulated: recompute time only under full-recompute; full-swap uses the link and "
           "lowers the peak (%llu)", ok ? (unsigned long long)rs.peak_allocated_bytes : 0ull);
    sched_free(keep);
    sched_free(rec);
    sched_free(swp);
    trace_free(t);
}

int main(void)
{
    trace_t *probe = build(1, 1, D_OP1);
    TAP_OK(probe && !build_failed, "hand-built 3-layer trace (%zu records)",
           probe ? trace_count(probe) : 0);
    trace_free(probe);
    test_registry();
    test_plans();
    test_keep_all();
    test_full_recompute();
    test_full_swap();
    test_alpha();
    test_input_freed_after_layer();
    test_host_round();
    test_bad_plans();
    test_iterations();
    test_mixed();
    test_generated();
    test_end_to_end();
    test_framework_streams();
    return tap_done();
}

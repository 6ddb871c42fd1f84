/* test_lower_reuse.c — TAP tests of the schedules a sweep re-binds (planners/lower_reuse.c,
 * lower_bind in planners/lower.c): on generated traces of one structure at several lengths
 * the re-bound schedule equals a fresh lowering's, byte for byte, under keep-all,
 * full-recompute, full-swap and a partial swap (alpha 0.5: token-wise recomputation), with
 * the CP ring's collectives merged into their attention kernels; a trace that differs in
 * structure (layers, a tensor's class, a name), a plan that differs (a knob) and rounding buffers
 * are lowered afresh, and a size that differs alone is re-bound; the binding of packed
 * sources (lower_srcs_pack) is the binding of the unpacked. For `make check`. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "planners/lower_reuse.h"
#include "planners/policy.h"
#include "tests/gen_util.h"
#include "tests/tap.h"
#include "traces/gen.h"
#include "traces/models.h"

static trace_t *gen(const char *model, uint64_t seq, const machine_t *m)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup(model, &c.model, &err) != MS_OK) return NULL;
    c.seq = seq;
    c.tp = 2;
    c.cp = 2;
    c.iterations = 1;
    trace_t *t = NULL;
    if (gen_validate(&c, &err) != MS_OK || gen_trace(&c, m, &t, &err) != MS_OK) {
        TAP_NOTE("gen %s %llu: %s", model, (unsigned long long)seq, err.msg);
        return NULL;
    }
    return t;
}

static plan_t *plan_of(const char *policy, double alpha, const trace_t *t, const machine_t *m)
{
    pol_opts o;
    pol_opts_default(&o);
    o.alpha = alpha;
    plan_t *p = NULL;
    ms_error err;
    if (pol_plan(policy, t, m, &o, &p, &err) != MS_OK) {
        TAP_NOTE("plan %s: %s", policy, err.msg);
        return NULL;
    }
    return p;
}

/* 1 when a and b have the same actions, byte for byte, and the same events. */
static int same_sched(const schedule_t *a, const schedule_t *b)
{
    size_t na, nb;
    const sched_action *x = sched_actions(a, &na), *y = sched_actions(b, &nb);
    return na == nb && sched_event_count(a) == sched_event_count(b) &&
           (!na || !memcmp(x, y, na * sizeof *x));
}

/* Lowers (t, p) through c and afresh; 1 when both succeed with equal schedules. *kind gets
 * which counter of c moved: 'h' hit, 'm' miss, 'o' once, '?' none or several. */
static int lower_both(lreuse *c, const trace_t *t, const plan_t *p, const machine_t *m,
                      char *kind, schedule_t **fresh_out)
{
    lreuse_stats a, b;
    lreuse_get_stats(c, &a);
    schedule_t *r = NULL, *f = NULL;
    int borrowed = 0;
    ms_error err;
    ms_status s1 = lreuse_lower(c, t, p, m, NULL, &r, &borrowed, &err);
    ms_status s2 = lower_schedule(t, p, m, NULL, &f, &err);
    lreuse_get_stats(c, &b);
    uint64_t dh = b.hits - a.hits, dm = b.misses - a.misses, d1 = b.once - a.once;
    *kind = dh + dm + d1 != 1 ? '?' : dh ? 'h' : dm ? 'm' : 'o';
    int ok = s1 == MS_OK && s2 == MS_OK && same_sched(r, f);
    if (!borrowed) sched_free(r);
    if (fresh_out) *fresh_out = f;
    else sched_free(f);
    return ok;
}

/* A copy of t with record i changed by edit (NULL: unchanged). */
static trace_t *copy_edit(const trace_t *t, size_t at, void (*edit)(trace_rec *))
{
    trace_t *o = trace_new();
    if (!o) return NULL;
    for (size_t i = 0; i < trace_meta_count(t); i++)
        if (trace_set_meta(o, trace_meta_key(t, i), trace_meta_value(t, i)) != MS_OK) goto bad;
    size_t n;
    const trace_rec *recs = trace_records(t, &n);
    for (size_t i = 0; i < n; i++) {
        trace_rec r = recs[i];
        if (i == at && edit) edit(&r);
        if (trace_append(o, &r) != MS_OK) goto bad;
    }
    return o;
bad:
    trace_free(o);
    return NULL;
}

static void double_bytes(trace_rec *r) { r->u.alloc.bytes *= 2; }
static void make_transient(trace_rec *r) { r->u.alloc.cls = TC_ACT_TRANS; }
static void rename_op(trace_rec *r) { strcpy(r->u.op.name, "renamed.op"); }

/* The first record of type ty, at or after `from`, whose tensor class is cls (any for ops). */
static size_t find_rec(const trace_t *t, trace_rtype ty, trace_class cls, size_t from)
{
    size_t n;
    const trace_rec *recs = trace_records(t, &n);
    for (size_t i = from; i < n; i++)
        if (recs[i].type == ty && (ty != TR_ALLOC || recs[i].u.alloc.cls == cls)) return i;
    return SIZE_MAX;
}

static const struct { const char *policy; double alpha; } rows[] = {
    { "keep-all", -1 }, { "full-recompute", -1 }, { "full-swap", -1 }, { "full-swap", 0.5 },
};
#define NROWS (sizeof rows / sizeof *rows)
static const uint64_t seqs[] = { 2048, 4096, 6144, 16384 };
#define NSEQ (sizeof seqs / sizeof *seqs)
static const char *const model = "dims:3,512,8,2048,1000";

/* Re-bound equals fresh at every length, hits after the first; the numbers change. */
static void test_lengths(lreuse *c, const machine_t *m)
{
    int all_same = 1, kinds_ok = 1, ovl = 0, partial = 0, differs = 0;
    uint64_t first_alloc_bytes[NROWS] = { 0 };
    for (size_t k = 0; k < NSEQ; k++) {
        trace_t *t = gen(model, seqs[k], m);
        if (!t) {
            all_same = 0;
            continue;
        }
        lreuse_point(c, t);
        for (size_t j = 0; j < NROWS; j++) {
            plan_t *p = plan_of(rows[j].policy, rows[j].alpha, t, m);
            char kind = '?';
            schedule_t *f = NULL;
            if (!p || !lower_both(c, t, p, m, &kind, &f)) {
                all_same = 0;
                TAP_NOTE("%s alpha %g at %llu: re-bound and fresh differ", rows[j].policy,
                         rows[j].alpha, (unsigned long long)seqs[k]);
            }
            if (kind != (k ? 'h' : 'm')) kinds_ok = 0;
            size_t n;
            const sched_action *a = f ? sched_actions(f, &n) : NULL;
            uint64_t fb = 0;
            for (size_t i = 0; a && i < n; i++) {
                if (a[i].kind == SA_COMPUTE && a[i].ovl) ovl = 1;
                if (a[i].kind == SA_COMPUTE && a[i].recompute && rows[j].alpha == 0.5) partial = 1;
                if (!fb && a[i].kind == SA_ALLOC && a[i].block == SB_ACT_SKEL) fb = a[i].bytes;
            }
            if (!k) first_alloc_bytes[j] = fb;
            else if (fb != first_alloc_bytes[j]) differs = 1;
            sched_free(f);
            plan_free(p);
        }
        lreuse_point(c, NULL);
        trace_free(t);
    }
    TAP_OK(all_same, "re-bound schedules equal fresh lowerings at %zu lengths x %zu plans",
           (size_t)NSEQ, (size_t)NROWS);
    TAP_OK(kinds_ok, "the first length lowers and keeps a template per plan, the others hit");
    TAP_OK(ovl, "the CP ring's .ovl collectives were merged into attention kernels");
    TAP_OK(partial, "alpha 0.5 recomputes the rest token-wise (a recompute per swapped tensor)");
    TAP_OK(differs, "the lengths' schedules differ in their sizes");
}

/* What changes the structure misses; a size alone is re-bound. */
static void test_misses(lreuse *c, const machine_t *m)
{
    char kind;
    trace_t *t = gen(model, 4096, m);
    plan_t *p = t ? plan_of("full-swap", -1, t, m) : NULL;
    TAP_OK(t && p && lower_both(c, t, p, m, &kind, NULL) && kind == 'h',
           "a length the templates have not seen, same structure: a hit");
    if (!t || !p) {
        trace_free(t);
        plan_free(p);
        return;
    }
    size_t act = find_rec(t, TR_ALLOC, TC_ACT_SKEL, 0);
    trace_t *e = act == SIZE_MAX ? NULL : copy_edit(t, act, double_bytes);
    TAP_OK(e && lower_both(c, e, p, m, &kind, NULL) && kind == 'h',
           "one tensor twice its size: still a hit, equal to the fresh lowering");
    trace_free(e);
    e = act == SIZE_MAX ? NULL : copy_edit(t, act, make_transient);
    TAP_OK(e && lower_both(c, e, p, m, &kind, NULL) && kind == 'm',
           "one skeletal activation made transient (full-swap no longer swaps it): a miss");
    trace_free(e);
    size_t op = find_rec(t, TR_OP, TC_PARAM, 0);
    e = op == SIZE_MAX ? NULL : copy_edit(t, op, rename_op);
    TAP_OK(e && lower_both(c, e, p, m, &kind, NULL) && kind == 'm', "an op renamed: a miss");
    trace_free(e);
    plan_t *q = plan_of("full-swap", -1, t, m);
    TAP_OK(q && plan_set_knob(q, "host_round", "tensor_pow2") == MS_OK &&
           lower_both(c, t, q, m, &kind, NULL) && kind == 'm',
           "the plan knob host_round changed: a miss, its host buffers sized as fresh");
    plan_free(q);
    q = plan_of("full-swap", 0.25, t, m);
    TAP_OK(q && lower_both(c, t, q, m, &kind, NULL) && kind == 'm', "another alpha: a miss");
    plan_free(q);
    trace_t *u = gen("dims:4,512,8,2048,1000", 4096, m);
    q = u ? plan_of("full-swap", -1, u, m) : NULL;
    TAP_OK(q && lower_both(c, u, q, m, &kind, NULL) && kind == 'm', "one layer more: a miss");
    plan_free(q);
    trace_free(u);
    q = plan_of("memo", -1, t, m);
    TAP_OK(q && lower_both(c, t, q, m, &kind, NULL) && kind == 'o',
           "MEMO's rounding buffers (shaped by the sizes): lowered afresh, never kept");
    plan_free(q);
    plan_free(p);
    trace_free(t);
}

/* The memo of one point: a trace changed between points is compared again. */
static void test_points(const machine_t *m)
{
    lreuse *c = lreuse_new(2);
    trace_t *t = gen(model, 2048, m);
    plan_t *p = t ? plan_of("full-recompute", -1, t, m) : NULL;
    char k1 = '?', k2 = '?', k3 = '?';
    int ok = c && p;
    lreuse_point(c, t);
    ok = ok && lower_both(c, t, p, m, &k1, NULL) && lower_both(c, t, p, m, &k2, NULL);
    lreuse_point(c, NULL);
    size_t op = t ? find_rec(t, TR_OP, TC_PARAM, 0) : SIZE_MAX;
    trace_t *e = op == SIZE_MAX ? NULL : copy_edit(t, op, rename_op);
    lreuse_point(c, e);
    ok = ok && e && lower_both(c, e, p, m, &k3, NULL);
    lreuse_point(c, NULL);
    TAP_OK(ok && k1 == 'm' && k2 == 'h' && k3 == 'm',
           "within a point the records are compared once; the next point's trace again "
           "(%c %c %c)", k1, k2, k3);
    trace_free(e);
    plan_free(p);
    trace_free(t);
    lreuse_free(c);
}

/* A copy of t's first n records (the rest dropped). */
static trace_t *copy_head(const trace_t *t, size_t n)
{
    trace_t *o = trace_new();
    size_t nr;
    const trace_rec *recs = trace_records(t, &nr);
    for (size_t i = 0; o && i < n && i < nr; i++)
        if (trace_append(o, &recs[i]) != MS_OK) {
            trace_free(o);
            return NULL;
        }
    return o;
}

/* lower_bind with the sources packed (lower_srcs_pack) gives what it gives unpacked: the
 * fresh lowering's schedule at another length, and for a trace that lacks a record the
 * sources name the same failure, naming the same action. */
static void test_packed(const machine_t *m)
{
    trace_t *t = gen(model, 2048, m), *u = gen(model, 6144, m);
    plan_t *p = t ? plan_of("full-swap", 0.5, t, m) : NULL;
    lower_srcs S;
    memset(&S, 0, sizeof S);
    lower_opts o;
    lower_opts_default(&o);
    o.srcs = &S;
    schedule_t *s = NULL, *f = NULL, *s2 = NULL;
    ms_error e1, e2;
    int ok = t && u && p && lower_schedule(t, p, m, &o, &s, &e1) == MS_OK && S.ok &&
             lower_schedule(u, p, m, NULL, &f, &e1) == MS_OK &&
             lower_schedule(t, p, m, NULL, &s2, &e1) == MS_OK;
    ok = ok && lower_srcs_pack(&S) == MS_OK && S.bound && S.n_bound > S.n_bound_bytes &&
         S.n_bound_bytes > 0;
    ok = ok && lower_bind(s, &S, u, m, &e1) == MS_OK && same_sched(s, f) &&
         lower_bind_same(s, &S, u, m);
    TAP_OK(ok, "packed, the sources bind another length as a fresh lowering does");
    schedule_t *s3 = NULL;
    int ok3 = ok && lower_schedule(t, p, m, NULL, &s3, &e1) == MS_OK &&
              sched_index_build(s3) == MS_OK && lower_srcs_fit(&S, s3) &&
              lower_bind(s3, &S, u, m, &e1) == MS_OK;
    size_t n3 = 0, stale = 0; /* bound into the index: the actions not yet */
    const sched_action *a3 = ok3 ? sched_actions_unbound(s3, &n3) : NULL;
    for (size_t i = 0; i < n3; i++) stale += memcmp(&a3[i], sched_get(f, i), sizeof *a3) != 0;
    ok3 = ok3 && stale > 0 && same_sched(s3, f) && lower_bind_same(s3, &S, u, m);
    TAP_OK(ok3, "into an indexed schedule's numbers, the same (%zu actions bound there)", stale);
    sched_free(s3);
    size_t nr = 0;
    if (t) trace_records(t, &nr);
    trace_t *h = ok ? copy_head(t, nr / 2) : NULL;
    ms_status p1 = h ? lower_bind(s, &S, h, m, &e1) : MS_OK;
    free(S.bound);
    S.bound = NULL;
    ms_status p2 = h ? lower_bind(s2, &S, h, m, &e2) : MS_OK;
    TAP_OK(h && p1 == MS_ERR_INVALID && p2 == MS_ERR_INVALID && !strcmp(e1.msg, e2.msg),
           "a trace lacking records fails the same, packed or not: %s", h ? e1.msg : "");
    trace_free(h);
    sched_free(s);
    sched_free(s2);
    sched_free(f);
    free(S.v);
    free(S.pool);
    plan_free(p);
    trace_free(t);
    trace_free(u);
}

int main(void)
{
    machine_t m = test_machine();
    m.gpu_hbm_bytes = 80ull << 30;
    m.host_mem_bytes = 1ull << 40;
    m.link_h2d_Bps = m.link_d2h_Bps = 50e9;
    lreuse *c = lreuse_new(0);
    TAP_OK(c != NULL, "a cache");
    if (c) {
        test_lengths(c, &m);
        test_misses(c, &m);
    }
    lreuse_free(c);
    test_points(&m);
    test_packed(&m);
    return tap_done();
}

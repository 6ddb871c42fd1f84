/* test_gen_reuse.c — TAP tests of the generator's traces made after a template's structure
 * (traces/gen_reuse.c, gen_trace_like, traces/trace_shape.c): across lengths and batch sizes
 * of the generic, megatron and hf programs a re-bound trace equals a fresh one field by field
 * (tshape_equal) and answers the same look-ups; a template of another structure (layers, a
 * knob) gives no trace and the cache generates afresh; a record that differs from the
 * template's in structure, a missing record or an invalid number fails the binding; a bound
 * trace appended to afterwards indexes its own records; a bound trace freed gives its records
 * back and the next one made after the template is made in them, failures included; the
 * lowering's reuse is told the structure by tshape_of; the policies' skeletal list of a
 * re-bound trace, kept with its template, is the one listed afresh. For `make check`. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "planners/lower_reuse.h"
#include "planners/policy.h"
#include "tests/gen_util.h"
#include "tests/tap.h"
#include "traces/gen_reuse.h"
#include "traces/models.h"
#include "traces/trace_shape.h"

static gen_config config(const char *model, const char *framework, uint64_t seq,
                         uint64_t batch)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup(model, &c.model, &err) != MS_OK) TAP_NOTE("model %s: %s", model, err.msg);
    c.seq = seq;
    c.micro_batch = batch;
    c.tp = 2;
    c.cp = 2;
    c.iterations = 1;
    if (framework) gen_config_set(&c, "framework", framework, &err);
    return c;
}

/* A tiny llama-shaped model under the hf program (amp). */
static gen_config hf_config(uint64_t seq, uint64_t batch)
{
    return tiny_llama_hf("amp", seq, batch, 4096);
}

static trace_t *fresh(const gen_config *c, const machine_t *m)
{
    trace_t *t = NULL;
    ms_error err;
    if (gen_trace(c, m, &t, &err) != MS_OK) TAP_NOTE("gen: %s", err.msg);
    return t;
}

/* 1 when every tensor and op of a is found in b at the same record. */
static int same_lookups(const trace_t *a, const trace_t *b)
{
    size_t n;
    const trace_rec *r = trace_records(a, &n);
    const trace_rec *rb = trace_records(b, &n);
    for (size_t i = 0; i < n; i++) {
        if (r[i].type == TR_ALLOC) {
            const trace_tensor *x = trace_find_tensor(a, r[i].u.alloc.id);
            const trace_tensor *y = trace_find_tensor(b, r[i].u.alloc.id);
            if (!x || !y || x - &r[0].u.alloc != y - &rb[0].u.alloc) return 0;
        } else if (r[i].type == TR_OP) {
            const trace_op *x = trace_find_op(a, r[i].u.op.id);
            const trace_op *y = trace_find_op(b, r[i].u.op.id);
            if (!x || !y || x - &r[0].u.op != y - &rb[0].u.op) return 0;
        }
    }
    return trace_find_tensor(b, UINT64_MAX) == NULL && trace_find_op(b, UINT64_MAX) == NULL;
}

/* Points of one configuration through one cache: each equal to a fresh trace. */
static void points(const char *what, gen_config (*mk)(uint64_t, uint64_t, const void *),
                   const void *arg, const uint64_t *seqs, const uint64_t *batches, size_t n,
                   const machine_t *m, int one_structure)
{
    greuse *c = greuse_new();
    int equal = 1, looked = 1, shaped = 1, made = 1;
    for (size_t i = 0; i < n; i++) {
        gen_config cfg = mk(seqs[i], batches[i], arg);
        trace_t *a = fresh(&cfg, m), *b = NULL;
        ms_error err;
        made &= a && greuse_trace(c, &cfg, m, &b, &err) == MS_OK && b;
        if (a && b) {
            equal &= tshape_equal(a, b);
            looked &= same_lookups(a, b);
            shaped &= trace_has_host_times(a) == trace_has_host_times(b);
        }
        trace_free(a);
        trace_free(b);
    }
    greuse_stats st;
    greuse_get_stats(c, &st);
    TAP_OK(made, "%s: every point generated through the cache", what);
    TAP_OK(equal, "%s: every trace equals the fresh one, field by field", what);
    TAP_OK(looked && shaped, "%s: the same tensor and op look-ups and host-time flag", what);
    /* the hf program's structure follows the sizes in places: some points are templates */
    if (one_structure)
        TAP_OK(st.misses == 1 && st.hits == n - 1 && st.once == 0,
               "%s: one template, %zu re-bound (%llu kept, %llu re-bound, %llu once)", what,
               n - 1, (unsigned long long)st.misses, (unsigned long long)st.hits,
               (unsigned long long)st.once);
    else
        TAP_OK(st.misses + st.hits + st.once == n && st.misses >= 1,
               "%s: %llu templates, %llu re-bound, %llu once", what,
               (unsigned long long)st.misses, (unsigned long long)st.hits,
               (unsigned long long)st.once);
    greuse_free(c);
}

static gen_config mk_named(uint64_t seq, uint64_t batch, const void *arg)
{
    const char *const *a = arg;
    return config(a[0], a[1], seq, batch);
}

static gen_config mk_hf(uint64_t seq, uint64_t batch, const void *arg)
{
    (void)arg;
    return hf_config(seq, batch);
}

static void test_points(const machine_t *m)
{
    uint64_t seqs[] = { 4096, 8192, 12288, 65536, 4096 }, ones[] = { 1, 1, 1, 1, 1 };
    const char *gpt[] = { "gpt-7b", NULL }, *mg[] = { "gpt-7b", "megatron" };
    points("generic, lengths", mk_named, gpt, seqs, ones, 5, m, 1);
    points("megatron, lengths", mk_named, mg, seqs, ones, 5, m, 1);
    const char *small[] = { "gpt2-1b", NULL };
    uint64_t s4[] = { 1024, 1024, 1024, 512 }, b4[] = { 1, 2, 8, 3 };
    points("generic, batch sizes", mk_named, small, s4, b4, 4, m, 1);
    uint64_t hs[] = { 64, 128, 512, 96, 128 }, hb[] = { 2, 2, 1, 4, 2 };
    points("hf, lengths and batch sizes", mk_hf, NULL, hs, hb, 5, m, 0);
    points("hf without a machine (unknown durations)", mk_hf, NULL, hs, hb, 5, NULL, 0);
}

/* Templates of another structure: no trace from gen_trace_like, a fresh one from the cache. */
static void test_misses(const machine_t *m)
{
    gen_config a = config("gpt-7b", NULL, 4096, 1), b = a;
    b.model.layers = a.model.layers - 1;
    trace_t *ta = fresh(&a, m), *tb = fresh(&b, m), *out = (trace_t *)1;
    ms_error err;
    TAP_OK(ta && tb && gen_trace_like(&b, m, ta, &out, &err) == MS_ERR_LIMIT && !out,
           "fewer layers than the template's: not made after it");
    out = (trace_t *)1;
    TAP_OK(gen_trace_like(&a, m, tb, &out, &err) == MS_ERR_LIMIT && !out,
           "more layers than the template's: not made after it");
    gen_config z = a;
    gen_config_set(&z, "framework", "megatron", &err);
    out = (trace_t *)1;
    TAP_OK(gen_trace_like(&z, m, ta, &out, &err) == MS_ERR_LIMIT && !out,
           "another program (megatron's): not made after it");

    /* the same, each made in the records a bound trace gave back (the generator then
       compares its fields in place): no trace, and a good one still made after each */
    gen_config a8 = config("gpt-7b", NULL, 8192, 1), b8 = b, z8 = z;
    b8.seq = z8.seq = 8192;
    const gen_config *other[] = { &b8, &z8 };
    int in_place = 1, good = 1;
    for (size_t k = 0; k < 2; k++) {
        trace_t *g = NULL;
        good &= gen_trace_like(&a8, m, ta, &g, &err) == MS_OK; /* gives its records back */
        trace_free(g);
        out = (trace_t *)1;
        in_place &= gen_trace_like(other[k], m, ta, &out, &err) == MS_ERR_LIMIT && !out;
        g = NULL;
        good &= gen_trace_like(&a8, m, ta, &g, &err) == MS_OK && g;
        trace_t *f = fresh(&a8, m);
        good &= f && g && tshape_equal(f, g);
        trace_free(f);
        trace_free(g);
    }
    TAP_OK(in_place && good, "in given-back records: fewer layers and another program not "
           "made after the template; the template's own made after it as before");

    /* the cache: a template whose key matches (same model, same knobs) but not its layers */
    greuse *c = greuse_new();
    trace_t *t1 = NULL, *t2 = NULL, *t3 = NULL;
    int ok = greuse_trace(c, &a, m, &t1, &err) == MS_OK; /* kept */
    gen_config a2 = config("gpt-7b", NULL, 8192, 1);
    ok &= greuse_trace(c, &a2, m, &t2, &err) == MS_OK; /* re-bound */
    greuse_stats st;
    greuse_get_stats(c, &st);
    TAP_OK(ok && st.misses == 1 && st.hits == 1, "the cache: one template, one re-bound");
    trace_t *f3 = fresh(&z, m);
    ok = greuse_trace(c, &z, m, &t3, &err) == MS_OK && t3 && f3 && tshape_equal(t3, f3);
    greuse_get_stats(c, &st);
    TAP_OK(ok && st.misses == 2, "another key: generated afresh, equal to gen_trace's");
    trace_free(f3);
    trace_free(t3);
    trace_free(t2);
    trace_free(t1);
    greuse_free(c);
    trace_free(ta);
    trace_free(tb);
}

/* The binding itself on a hand-made base. */
static void test_binding(void)
{
    trace_t *base = trace_new();
    trace_rec r;
    trace_alloc_rec(&r, 1, 4096, TC_ACT_SKEL, 0, -1, 1, "x");
    int ok = trace_append(base, &r) == MS_OK;
    trace_rec op;
    memset(&op, 0, sizeof op);
    op.type = TR_OP;
    uint64_t ins[] = { 1 };
    op.u.op.id = 7;
    op.u.op.kind = TK_GEMM;
    op.u.op.flops = 1e9;
    op.u.op.dur_us = 10;
    op.u.op.n_in = 1;
    op.u.op.in = ins;
    snprintf(op.u.op.name, sizeof op.u.op.name, "L0.mm");
    ok &= trace_append(base, &op) == MS_OK;
    ok &= trace_append_mark(base, TM_ITER, 0) == MS_OK;
    TAP_OK(ok, "a base of three records");

    /* the same structure, other numbers */
    trace_t *t = tshape_new_like(base);
    trace_rec r2 = r, op2 = op;
    r2.u.alloc.bytes = 8192;
    op2.u.op.flops = 2e9;
    op2.u.op.dur_us = 20;
    uint64_t ins2[] = { 1 };
    op2.u.op.in = ins2;
    ok = trace_append(t, &r2) == MS_OK && trace_append(t, &op2) == MS_OK &&
         trace_append_mark(t, TM_ITER, 0) == MS_OK && tshape_end(t);
    TAP_OK(ok && tshape_of(t) == base && trace_find_tensor(t, 1)->bytes == 8192 &&
           trace_find_op(t, 7)->flops == 2e9, "other numbers: bound, base's structure");
    TAP_OK(!tshape_equal(t, base), "... and not equal to the base, whose numbers differ");
    size_t n_am;
    const tshape_ref *am = tshape_alloc_marks(t, &n_am);
    TAP_OK(am && n_am == 2 && am[0].at == 0 && am[0].type == TR_ALLOC &&
               am[0].cls == TC_ACT_SKEL && am[1].at == 2 && am[1].type == TR_MARK,
           "its alloc and mark records listed (the base's list), the alloc with its class");
    /* appended to afterwards: its own indexes, its own structure */
    trace_alloc_rec(&r2, 9, 512, TC_WORKSPACE, -1, -1, 0, "w");
    ok = trace_append(t, &r2) == MS_OK;
    TAP_OK(ok && trace_find_tensor(t, 9) && trace_find_tensor(t, 1)->bytes == 8192 &&
           !trace_find_tensor(base, 9) && tshape_of(t) == t,
           "appended to after the binding: indexes of its own, base unchanged");
    TAP_OK(!tshape_alloc_marks(t, &n_am) && n_am == 0, "... and no list of base's");
    trace_free(t);
    trace_t *plain = trace_new();
    TAP_OK(plain && !tshape_alloc_marks(plain, &n_am), "a trace made afresh has no list");
    trace_free(plain);

    /* a bound trace freed gives its records to base; the next one is made in them */
    int given = 1, own = 1;
    for (int k = 0; k < 3; k++) {
        t = tshape_new_like(base);
        trace_rec a = r, o = op;
        a.u.alloc.bytes = 4096u << k;
        o.u.op.dur_us = 10.0 + k;
        given &= trace_append(t, &a) == MS_OK && trace_append(t, &o) == MS_OK &&
                 trace_append_mark(t, TM_ITER, 0) == MS_OK && tshape_end(t) &&
                 tshape_of(t) == base;
        own &= trace_find_tensor(t, 1) && trace_find_tensor(t, 1)->bytes == 4096u << k &&
               trace_find_op(t, 7) && trace_find_op(t, 7)->dur_us == 10.0 + k &&
               trace_find_op(t, 7)->in[0] == 1;
        trace_free(t);
    }
    TAP_OK(given && own, "traces made in the records a freed one gave back: bound, each "
           "with its own numbers");

    /* structure differences, a missing record, an invalid number; each made in the records
       a bound trace gave back, then a good one made after it */
    struct { const char *what; int field; } cases[] = {
        { "another name", 0 }, { "another input", 1 }, { "another class", 2 },
        { "a record missing", 3 }, { "an infinite duration", 4 }, { "a record more", 5 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        t = tshape_new_like(base);
        int good = trace_append(t, &r) == MS_OK && trace_append(t, &op) == MS_OK &&
                   trace_append_mark(t, TM_ITER, 0) == MS_OK && tshape_end(t);
        trace_free(t); /* gives its records back */
        t = tshape_new_like(base);
        trace_rec a = r, o = op;
        uint64_t other[] = { 2 };
        if (cases[k].field == 0) snprintf(o.u.op.name, sizeof o.u.op.name, "L0.mn");
        if (cases[k].field == 1) o.u.op.in = other;
        if (cases[k].field == 2) a.u.alloc.cls = TC_ACT_TRANS;
        if (cases[k].field == 4) o.u.op.dur_us = 1.0 / 0.0;
        int st = trace_append(t, &a) == MS_OK;
        st &= trace_append(t, &o) == MS_OK;
        if (cases[k].field != 3) st &= trace_append_mark(t, TM_ITER, 0) == MS_OK;
        if (cases[k].field == 5) st &= trace_append_mark(t, TM_ITER, 1) == MS_OK;
        int bound = tshape_end(t);
        am = tshape_alloc_marks(t, &n_am);
        TAP_OK(!st || !bound, "%s: the binding fails", cases[k].what);
        size_t below = trace_count(t), want = (below > 0) + (below > 2); /* of records 0, 2 */
        TAP_OK(am && n_am == want && (!want || am[0].at == 0),
               "%s: the list is base's up to the records it has", cases[k].what);
        TAP_OK(!bound && tshape_of(t) == t, "%s: not told base's structure", cases[k].what);
        trace_free(t); /* a failed binding's records are not given back */
        t = tshape_new_like(base);
        good &= trace_append(t, &r) == MS_OK && trace_append(t, &op) == MS_OK &&
                trace_append_mark(t, TM_ITER, 0) == MS_OK && tshape_end(t);
        TAP_OK(good, "%s: bound traces before and after it", cases[k].what);
        trace_free(t);
    }
    TAP_OK(tshape_new_like(NULL) == NULL, "no base: no trace");
    trace_free(base);
}

/* The lowering's reuse on traces made after one template: the same schedules as lowered
 * afresh (its records are not compared again, so this checks the shortcut is sound). */
static void test_lowering(const machine_t *m)
{
    greuse *g = greuse_new();
    lreuse *c = lreuse_new(0);
    uint64_t seqs[] = { 4096, 8192, 16384 };
    int same = 1, made = 1;
    for (size_t i = 0; i < 3; i++) {
        gen_config cfg = config("gpt-7b", NULL, seqs[i], 1);
        trace_t *t = NULL;
        ms_error err;
        made &= greuse_trace(g, &cfg, m, &t, &err) == MS_OK;
        pol_opts o;
        pol_opts_default(&o);
        plan_t *p = NULL;
        made &= t && pol_plan("full-swap", t, m, &o, &p, &err) == MS_OK;
        schedule_t *s1 = NULL, *s2 = NULL;
        int borrowed = 0;
        made &= p && lreuse_lower(c, t, p, m, NULL, &s1, &borrowed, &err) == MS_OK &&
                lower_schedule(t, p, m, NULL, &s2, &err) == MS_OK;
        if (s1 && s2) {
            size_t na, nb;
            const sched_action *x = sched_actions(s1, &na), *y = sched_actions(s2, &nb);
            same &= na == nb && !memcmp(x, y, na * sizeof *x);
        }
        if (!borrowed) sched_free(s1);
        sched_free(s2);
        plan_free(p);
        trace_free(t);
    }
    lreuse_stats st;
    lreuse_get_stats(c, &st);
    TAP_OK(made && same, "lowered through the cache from re-bound traces: as lowered afresh");
    TAP_OK(st.hits == 2, "... two of the three schedules re-bound (%llu)",
           (unsigned long long)st.hits);
    lreuse_free(c);
    greuse_free(g);
}

/* The skeletal list of a re-bound trace (kept with its template, tshape_keep_derived) is
 * the one listed afresh from an equal fresh trace, its tensors in the re-bound trace's own
 * records. */
static void test_skeletal(const machine_t *m)
{
    greuse *g = greuse_new();
    uint64_t seqs[] = { 4096, 8192, 16384, 32768 };
    int same = 1, made = 1, own = 1;
    for (size_t i = 0; i < 4; i++) {
        gen_config cfg = config("gpt-7b", i % 2 ? "megatron" : NULL, seqs[i], 1);
        cfg.iterations = 2;
        trace_t *t = NULL, *f = fresh(&cfg, m);
        ms_error err;
        made &= greuse_trace(g, &cfg, m, &t, &err) == MS_OK && t && f;
        for (int rep = 0; t && f && rep < 2; rep++) { /* the second from the kept list */
            pol_skel *a = NULL, *b = NULL;
            size_t na = 0, nb = 0, nr;
            made &= pol_skeletal(t, &a, &na, &err) == MS_OK &&
                    pol_skeletal(f, &b, &nb, &err) == MS_OK;
            same &= na == nb && na > 0;
            const trace_rec *r = trace_records(t, &nr);
            for (size_t k = 0; k < na && k < nb; k++) {
                same &= a[k].id == b[k].id && a[k].layer == b[k].layer &&
                        a[k].pass == b[k].pass && a[k].is_input == b[k].is_input &&
                        a[k].is_attn_out == b[k].is_attn_out && a[k].is_whole == b[k].is_whole;
                own &= a[k].t == trace_find_tensor(t, a[k].id) &&
                       (const void *)a[k].t >= (const void *)r &&
                       (const void *)a[k].t < (const void *)(r + nr) &&
                       a[k].t->bytes == b[k].t->bytes;
            }
            free(a);
            free(b);
        }
        trace_free(f);
        trace_free(t);
    }
    TAP_OK(made && same, "re-bound traces (generic, megatron): the skeletal list as listed "
           "afresh");
    TAP_OK(own, "... its tensors in the trace's own records, with its own sizes");
    greuse_free(g);
}

int main(void)
{
    machine_t m = test_machine();
    test_points(&m);
    test_misses(&m);
    test_binding();
    test_lowering(&m);
    test_skeletal(&m);
    return tap_done();
}

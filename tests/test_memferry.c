/* test_memferry.c — unit tests (TAP) of MemFerry in memsim: Algorithm 1 against hand cases
 * and against exhaustive search over every GFGB/DHA assignment; MemFerry's full choice
 * (Algorithm 1 + the greedy DFGB choice) against exhaustive search over all 3^L mode
 * assignments, by the planner's own timing model and by the simulator on a small trace; the
 * GO-MemFerry dynamic program against brute force (random instances and the per-module
 * items of a small model); module-level gradient offload; the shadow-model lowering's structure
 * (planners/memferry/lower_dha.c); the plans of memferry, go-memferry and zero-offload; bad input.
 * How often and by how much the algorithms miss the optimum is printed as TAP notes. Part of
 * `make check` (links the simulator: it is the reference for the 3^L search). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planners/memferry/lower_dha.h"
#include "planners/memferry/lower_dha_model.h"
#include "planners/memferry/policy_memferry.h"
#include "planners/memferry/policy_zero_offload.h"
#include "sim/exec.h"
#include "tests/tap.h"
#include "traces/gen.h"

/* A deterministic generator (xorshift64*) for the random instances. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static double rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

/* ---- Algorithm 1 ---- */

static void test_alg1_hand(void)
{
    plan_pmode m[3];
    double t_all, t_res;
    /* Fig. 4's two layers: layer 1 is cheaper over DHA (5) than loaded (2 + 10); layer 2
     * is not (DHA 30 vs 10 + 4) and its load (4) fits in the reserved overlap time (5). */
    mf_prof two[2] = { { 10, 2, 5, 0, 0, 0, 0 }, { 4, 10, 30, 0, 0, 0, 0 } };
    mf_alg1(two, 2, 0, m, &t_all, &t_res);
    TAP_OK(m[0] == PM_DHA && m[1] == PM_GFGB, "Fig. 4: layer 1 DHA, layer 2 GFGB");
    TAP_OK(t_all == 15 && t_res == 5 + 10 - 4,
           "Fig. 4: T_all 15 (DHA 5 + compute 10, no stall), T_res 11 (got %g, %g)", t_all,
           t_res);
    TAP_OK(mf_fp_time(two, 2, m, NULL) == 15, "the exact forward time agrees: 15");

    /* Backtracking: three layers, none cheaper over DHA on its own; the third's load (30)
     * does not fit the reserve; turning the first GFGB layer to DHA frees its load and
     * shortens the forward. */
    mf_prof bt[3] = { { 6, 2, 9, 0, 0, 0, 0 }, { 3, 20, 60, 0, 0, 0, 0 },
                      { 30, 5, 80, 0, 0, 0, 0 } };
    mf_alg1(bt, 3, 0, m, &t_all, NULL);
    plan_pmode all_g[3] = { PM_GFGB, PM_GFGB, PM_GFGB };
    TAP_OK(m[0] == PM_DHA && m[1] == PM_GFGB && m[2] == PM_GFGB,
           "backtracking turns layer 0 to DHA (modes %d %d %d)", m[0], m[1], m[2]);
    TAP_OK(mf_fp_time(bt, 3, m, NULL) < mf_fp_time(bt, 3, all_g, NULL),
           "and that is faster than all GFGB (%g < %g)", mf_fp_time(bt, 3, m, NULL),
           mf_fp_time(bt, 3, all_g, NULL));
    /* Its estimate charges the conversion locally (41); shifting the other loads earlier
     * makes the exact forward shorter (38). */
    TAP_OK(t_all == 41 && mf_fp_time(bt, 3, m, NULL) == 38,
           "Algorithm 1's own estimate 41 (Fig. 7's local accounting), exact time 38 (got %g)",
           t_all);
}

/* Random instances shaped like transformer layers: load vs compute ratios from 0.1 to 10,
 * DHA 1..4x the load time or 1..2x compute. */
static void random_prof(mf_prof *u, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double tr = 1 + 99 * rnd(), fp = tr * (0.1 + 3 * rnd());
        double dha = fp + tr * (0.2 + 2 * rnd());
        if (rnd() < 0.2) dha = fp * (1 + rnd()) + tr * 0.1; /* an embedding-like layer */
        double bp = 2 * fp;
        u[i] = (mf_prof){ tr, fp, dha, fp * rnd(), bp, bp + tr * rnd(), bp * rnd() };
    }
}

static void test_alg1_exhaustive(int literal)
{
    int cases = 0, miss = 0, worse = 0;
    double sum_gap = 0, max_gap = 0;
    rng_state = 0x9e3779b97f4a7c15ULL;
    for (size_t n = 2; n <= 12; n++)
        for (int k = 0; k < 300; k++) {
            mf_prof u[12];
            plan_pmode m[12], best[12];
            random_prof(u, n);
            mf_alg1(u, n, literal, m, NULL, NULL);
            double a = mf_fp_time(u, n, m, NULL), o = mf_fp_exhaustive(u, n, best);
            double gap = (a - o) / o;
            cases++;
            if (a < o - 1e-9) worse++;
            if (gap > 1e-9) {
                miss++;
                sum_gap += gap;
                if (gap > max_gap) max_gap = gap;
            }
        }
    TAP_NOTE("Algorithm 1 (line 3 %s) vs exhaustive search (2^L, L = 2..12, %d random "
             "instances): misses the optimum in %d (%.1f%%), by %.2f%% on average when it "
             "misses, %.2f%% at most", literal ? "as printed" : "with the stall", cases, miss,
             100.0 * miss / cases, miss ? 100 * sum_gap / miss : 0, 100 * max_gap);
    TAP_OK(worse == 0, "no assignment beats the exhaustive optimum (sanity of the search)");
    if (literal) {
        TAP_OK(max_gap < 1.0, "as printed: never twice the optimum (worst %.1f%% slower)",
               100 * max_gap);
        return;
    }
    TAP_OK(miss * 5 < cases, "Algorithm 1 finds the optimum in over 80%% of the instances "
           "(%d of %d)", cases - miss, cases);
    TAP_OK(max_gap < 0.25, "and is never more than 25%% slower than it (worst %.1f%%)",
           100 * max_gap);
}

/* 3^L by the planner's own model (mf_iter_time): MemFerry's choice vs the best. */
static void test_iter_exhaustive(void)
{
    int cases = 0, miss = 0;
    double sum_gap = 0, max_gap = 0;
    for (size_t n = 2; n <= 8; n++)
        for (int k = 0; k < 100; k++) {
            mf_prof u[8];
            plan_pmode m[8], c[8];
            random_prof(u, n);
            mf_alg1(u, n, 0, m, NULL, NULL);
            mf_dfgb_greedy(u, n, m);
            double a = mf_iter_time(u, n, m), best = INFINITY;
            size_t tot = 1;
            for (size_t i = 0; i < n; i++) tot *= 3;
            for (size_t s = 0; s < tot; s++) {
                size_t x = s;
                for (size_t i = 0; i < n; i++, x /= 3) c[i] = (plan_pmode)(x % 3);
                double t = mf_iter_time(u, n, c);
                if (t < best) best = t;
            }
            double gap = (a - best) / best;
            cases++;
            if (gap > 1e-9) {
                miss++;
                sum_gap += gap;
                if (gap > max_gap) max_gap = gap;
            }
        }
    TAP_NOTE("MemFerry (Algorithm 1 + greedy DFGB) vs exhaustive 3^L (L = 2..8, %d instances, "
             "the planner's forward+backward model): misses in %d (%.1f%%), by %.2f%% on "
             "average when it misses, %.2f%% at most", cases, miss, 100.0 * miss / cases,
             miss ? 100 * sum_gap / miss : 0, 100 * max_gap);
    TAP_OK(miss * 5 < cases && max_gap < 0.25, "MemFerry's choice is the 3^L optimum in over "
           "80%% of the instances and within 25%% of it (worst %.1f%%)", 100 * max_gap);
}

/* The greedy's promise: the DFGB units it picks never stall the backward. */
static void test_greedy(void)
{
    /* Three units; unit 0 is DHA and costly in the backward over DHA (bp_dha 50 vs bp 10),
     * its load (5) fits long before its backward; unit 2's DHA backward costs little more. */
    mf_prof u[3] = { { 5, 1, 2, 0, 10, 50, 0 }, { 4, 10, 30, 0, 20, 20, 0 },
                     { 50, 1, 3, 0, 2, 2.5, 0 } };
    plan_pmode m[3] = { PM_DHA, PM_GFGB, PM_DHA };
    size_t made = mf_dfgb_greedy(u, 3, m);
    TAP_OK(made == 1 && m[0] == PM_DFGB && m[2] == PM_DHA,
           "greedy: unit 0 DFGB (saves 40), unit 2 stays DHA (its 50-long load would stall)");
    int stalled = 0;
    for (int k = 0; k < 200; k++) {
        mf_prof r[8];
        plan_pmode mm[8], g[8];
        random_prof(r, 8);
        mf_alg1(r, 8, 0, mm, NULL, NULL);
        memcpy(g, mm, sizeof g);
        mf_dfgb_greedy(r, 8, g);
        if (mf_iter_time(r, 8, g) > mf_iter_time(r, 8, mm) + 1e-9) stalled++;
    }
    TAP_OK(stalled == 0, "on 200 random instances the greedy never makes the iteration longer");
}

/* ---- GO-MemFerry's dynamic program ---- */

static void test_dp(void)
{
    int bad = 0, infeasible = 0;
    for (int k = 0; k < 2000; k++) {
        size_t n = 1 + (size_t)(rnd() * 12);
        double g[12];
        uint64_t s[12], used = 0, total = 0;
        int keep[12], keep_b[12];
        for (size_t i = 0; i < n; i++) {
            g[i] = rnd() < 0.1 ? 0 : 100 * rnd();
            s[i] = 1 + (uint64_t)(20 * rnd());
            total += s[i];
        }
        uint64_t cap = (uint64_t)(rnd() * (double)total);
        double best;
        if (mf_go_dp(g, s, n, cap, keep, &best) != MS_OK) {
            bad++;
            continue;
        }
        double bb = mf_go_brute(g, s, n, cap, keep_b), sum = 0;
        for (size_t i = 0; i < n; i++)
            if (keep[i]) {
                used += s[i];
                sum += g[i];
            }
        if (fabs(best - bb) > 1e-9 || fabs(sum - best) > 1e-9) bad++;
        if (used > cap) infeasible++;
    }
    TAP_OK(bad == 0, "DP optimum == brute force on 2000 random instances (%d differ)", bad);
    TAP_OK(infeasible == 0, "the DP's kept set always fits the capacity");
    double g[3] = { 5, 4, 3 };
    uint64_t s[3] = { 4, 3, 2 };
    int keep[3];
    double best;
    mf_go_dp(g, s, 3, 5, keep, &best);
    TAP_OK(best == 7 && !keep[0] && keep[1] && keep[2],
           "hand case: capacity 5 keeps units 1 and 2 (gain 7), not unit 0 (gain 5)");
    TAP_OK(mf_go_dp(g, s, 3, UINT64_C(1) << 40, keep, NULL) == MS_ERR_LIMIT,
           "an oversized table is refused (MS_ERR_LIMIT)");
}

/* ---- traces, lowering, simulation ---- */

static machine_profile *mach;

static trace_t *tiny_trace(uint64_t layers, uint64_t batch)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_from_dims(layers, 512, 8, 2048, 8000, &c.model, &err)) return NULL;
    c.seq = 256;
    c.micro_batch = batch;
    c.offload = 1;
    trace_t *t = NULL;
    if (gen_trace(&c, &mach->m, &t, &err)) TAP_NOTE("gen: %s", err.msg);
    return t;
}

static plan_t *plan_of(const pol_policy *p, const trace_t *t, const char *k, const char *v,
                       ms_error *err)
{
    pol_knob kn = { k, v };
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = k ? &kn : NULL;
    o.n_knobs = k ? 1 : 0;
    plan_t *pl = NULL;
    if (p->plan(t, &mach->m, &o, &pl, err) != MS_OK) return NULL;
    plan_sort(pl);
    return pl;
}

/* Blocks the DHA lowering makes (ids the trace does not hold) must say what they are: every
 * such ALLOC is staging (buckets, casts, held gradients, copies in flight). */
static size_t synth_allocs, synth_wrong; /* over every schedule simulate() saw */

static void count_synthetic_kinds(const trace_t *t, const schedule_t *s)
{
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind != SA_ALLOC || trace_find_tensor(t, a->tensor)) continue;
        synth_allocs++;
        synth_wrong += a->block != SB_STAGING;
    }
}

static double simulate(const trace_t *t, const plan_t *p, sim_result *out)
{
    ms_error err;
    schedule_t *s;
    if (lower_dha(t, p, &mach->m, NULL, &s, &err)) {
        TAP_NOTE("lower: %s", err.msg);
        return -1;
    }
    count_synthetic_kinds(t, s);
    sim_opts so;
    sim_opts_default(&so);
    so.host_sharers = 1;
    so.trace = t;
    sim_result r;
    res_init(&r);
    ms_status st = sim_execute(s, &mach->m, &so, &r, &err);
    sched_free(s);
    if (out) *out = r;
    return st || r.status != RS_OK ? -1 : r.iter_time_s;
}

/* 3^U exhaustive search by simulation on a 2-layer model (4 units: 81 plans). */
static void test_sim_exhaustive(void)
{
    trace_t *t = tiny_trace(2, 4);
    ms_error err;
    plan_t *mf = t ? plan_of(&pol_memferry, t, NULL, NULL, &err) : NULL;
    if (!mf) {
        TAP_OK(0, "memferry plans the small trace");
        trace_free(t);
        return;
    }
    double tm = simulate(t, mf, NULL), best = INFINITY, worst = 0;
    size_t nu = mf->n_layers, tot = 1, rank = 0;
    for (size_t i = 0; i < nu; i++) tot *= 3;
    for (size_t s = 0; s < tot; s++) {
        plan_t *p = plan_new("memferry", "caching");
        for (size_t k = 0; k < mf->n_knobs; k++) plan_set_knob(p, mf->knobs[k].key, mf->knobs[k].value);
        size_t x = s;
        for (size_t i = 0; i < nu; i++, x /= 3)
            plan_set_layer(p, mf->layers[i].layer, (plan_pmode)(x % 3), 0);
        plan_sort(p);
        double ti = simulate(t, p, NULL);
        plan_free(p);
        if (ti <= 0) continue;
        if (ti < best) best = ti;
        if (ti > worst) worst = ti;
        if (ti < tm - 1e-12) rank++;
    }
    TAP_NOTE("simulated 3^%zu = %zu mode assignments of a 2-layer model: MemFerry %.3f ms, best "
             "%.3f ms (+%.1f%%), worst %.3f ms; %zu assignments beat MemFerry's", nu, tot,
             tm * 1e3, best * 1e3, 100 * (tm - best) / best, worst * 1e3, rank);
    TAP_OK(tm > 0 && tm <= best * 1.25, "MemFerry's plan within 25%% of the simulated optimum");
    TAP_OK(tm < worst, "and better than the worst assignment");
    plan_free(mf);
    trace_free(t);
}

static size_t count(const schedule_t *s, sched_kind k, sched_stream st)
{
    size_t n = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        n += a->kind == k && a->stream == st;
    }
    return n;
}

static void test_lowering(void)
{
    trace_t *t = tiny_trace(3, 2);
    if (!t) {
        TAP_OK(0, "small trace");
        return;
    }
    ms_error err;
    dha_model *d;
    TAP_OK(dha_model_new(t, &mach->m, &d, &err) == MS_OK && dha_model_units(d) == 5 &&
               dha_model_unit(d, 0)->layer == -1 && dha_model_unit(d, 4)->layer == 3,
           "a 3-layer trace has 5 units: -1 (embedding), 0..2, 3 (head)");
    const dha_unit *e = dha_model_unit(d, 0), *l0 = dha_model_unit(d, 1);
    TAP_OK(e->t_fp_dha_us < e->t_fp_us + e->t_trans_us,
           "the embedding lookup is cheaper over DHA (%.1f us) than loaded (%.1f us)",
           e->t_fp_dha_us, e->t_fp_us + e->t_trans_us);
    TAP_OK(l0->param_bytes > 0 && l0->grad_bytes == l0->own_param_bytes && l0->adam_us > 0,
           "a layer owns its parameters and gradients and has a host Adam time");
    dha_model_free(d);

    /* Hand-made plan: embedding DHA, layer 0 DFGB, layer 1 GFGB with host gradients. */
    plan_t *p = plan_new("memferry", "caching");
    plan_set_knob(p, "host_params", "1");
    plan_set_layer(p, -1, PM_DHA, 0);
    plan_set_layer(p, 0, PM_DFGB, 0);
    plan_set_layer(p, 1, PM_GFGB, 1);
    plan_sort(p);
    const lower_backend *b = plan_set_lowering(p, "dha") == MS_OK ? lower_find(p->lowering) : NULL;
    TAP_OK(b && b->lower == lower_dha, "a plan naming the dha lowering is lowered by lower_dha");
    schedule_t *s = NULL;
    lower_report rep;
    lower_opts lo;
    lower_opts_default(&lo);
    lo.report = &rep;
    ms_status st = lower_dha(t, p, &mach->m, &lo, &s, &err);
    TAP_OK(st == MS_OK && sched_validate(s, &err) == MS_OK, "the schedule lowers and validates");
    if (st) {
        TAP_NOTE("%s", err.msg);
        plan_free(p);
        trace_free(t);
        return;
    }
    /* DHA reads: the embedding op reads gathered rows (< its table). */
    uint64_t emb_rd = 0, table = 0, lay_rd = 0, wr = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "embed.w")) table = r->u.alloc.bytes;
    }
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind != SA_COMPUTE) continue;
        const trace_op *op = a->op >= 0 ? trace_find_op(t, (uint64_t)a->op) : NULL;
        if (op && op->kind == TK_EMBED && op->phase == TP_FWD && a->host_read_bytes > emb_rd)
            emb_rd = a->host_read_bytes;
        if (op && op->layer == 0 && op->phase == TP_FWD) lay_rd += a->host_read_bytes;
        if (op && op->layer == 0 && op->phase == TP_BWD && a->host_read_bytes)
            lay_rd = 0; /* a DFGB layer must read its GPU copy in the backward */
        wr += a->host_write_bytes;
    }
    TAP_OK(emb_rd > 0 && emb_rd < table, "the DHA embedding reads %llu bytes of its %llu-byte "
           "table", (unsigned long long)emb_rd, (unsigned long long)table);
    TAP_OK(lay_rd > 0, "the DFGB layer reads its parameters over DHA in the forward only");
    TAP_OK(wr > 0, "host gradients are written over DHA (accumulate kernels)");
    /* DFGB: ALLOC on the copy stream, then its copy; the H2D stream starts with a WAIT. */
    size_t first_h2d = SIZE_MAX, dfgb_alloc = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->stream == SS_H2D && first_h2d == SIZE_MAX) first_h2d = i;
        dfgb_alloc += a->stream == SS_H2D && a->kind == SA_ALLOC;
    }
    TAP_OK(first_h2d != SIZE_MAX && sched_get(s, first_h2d)->kind == SA_WAIT,
           "GFGB loads wait for the forward's start");
    TAP_OK(dfgb_alloc == 2 * 6, "the DFGB layer's 6 tensors are allocated on the copy stream, "
           "each iteration (%zu)", dfgb_alloc);
    /* Gradients: layer 1's on the host (no copy), the others copied back. */
    size_t d2h = count(s, SA_COPY_D2H, SS_D2H), hostc = count(s, SA_HOST_COMPUTE, SS_HOST);
    TAP_OK(d2h == 2 * 4, "gradients copied back: 4 units x 2 iterations, not layer 1's (%zu)",
           d2h);
    TAP_OK(hostc == 2 * 5, "one host Adam step per unit and iteration (%zu)", hostc);
    /* DFGB loads come after the last GFGB load on the copy stream. */
    size_t last_gfgb_copy = 0, first_dfgb_copy = SIZE_MAX;
    int seen_alloc = 0;
    for (size_t i = 0; i < sched_count(s) && first_dfgb_copy == SIZE_MAX; i++) {
        const sched_action *a = sched_get(s, i);
        if (a->stream != SS_H2D) continue;
        if (a->kind == SA_ALLOC) seen_alloc = 1;
        if (a->kind == SA_COPY_H2D) {
            if (seen_alloc) first_dfgb_copy = i;
            else last_gfgb_copy = i;
        }
    }
    TAP_OK(last_gfgb_copy < first_dfgb_copy && first_dfgb_copy != SIZE_MAX,
           "the DFGB load follows the GFGB loads on the copy stream");
    sched_free(s);

    /* The plan file shows the shadow model and reproduces the schedule. */
    char path[] = "/tmp/memsim-test-memferry-XXXXXX";
    int fd = mkstemp(path);
    plan_t *q = NULL;
    if (fd >= 0) close(fd);
    st = fd >= 0 ? plan_write(p, path, &err) : MS_ERR_IO;
    if (!st) st = plan_load(path, &q, &err);
    schedule_t *s1 = NULL, *s2 = NULL;
    if (!st) st = lower_dha(t, p, &mach->m, NULL, &s1, &err);
    if (!st) st = lower_dha(t, q, &mach->m, NULL, &s2, &err);
    int same = !st && sched_count(s1) == sched_count(s2);
    for (size_t i = 0; same && i < sched_count(s1); i++)
        same = !memcmp(sched_get(s1, i), sched_get(s2, i), sizeof(sched_action));
    const plan_layer *pl = q ? plan_find_layer(q, 1) : NULL;
    TAP_OK(same && pl && pl->pmode == PM_GFGB && pl->grad_on_host,
           "a written plan (layer lines = shadow model) lowers to the same schedule");
    if (fd >= 0) remove(path);
    sched_free(s1);
    sched_free(s2);
    plan_free(q);
    plan_free(p);
    trace_free(t);
}

/* The zero-offload plan of t with the given realloc, or NULL after a failed test point (t
 * freed). */
static plan_t *zo_plan_or_fail(trace_t *t, const char *realloc)
{
    ms_error err;
    plan_t *p = t ? plan_of(&pol_zero_offload, t, "realloc", realloc, &err) : NULL;
    if (!p) {
        TAP_OK(0, "zero-offload realloc=%s plans the small trace", realloc);
        trace_free(t);
    }
    return p;
}

/* The host update's three schedules on one Native-Offload plan: pipelined with the backward
 * (each unit as its gradients land), after_bp (from the end of the backward's kernels, each
 * unit as its gradients land, so the step overlaps the last copies) and after_bwd (once every
 * gradient is home). Each later start can only lengthen the iteration; with host Adam slow
 * next to the backward the first gap is strict, and the last gradient copy makes the second. */
static void test_update_modes(void)
{
    double rate = mach->m.host_adam_params_per_s;
    mach->m.host_adam_params_per_s = rate / 20; /* the trace's host steps: slow */
    trace_t *t = tiny_trace(3, 64);             /* a backward longer than one copy */
    mach->m.host_adam_params_per_s = rate;
    plan_t *p = zo_plan_or_fail(t, "0");
    if (!p) return;
    static const char *const mode[3] = { "pipelined", "after_bp", "after_bwd" };
    double T[3];
    sim_result r[3];
    for (int i = 0; i < 3; i++) {
        plan_set_knob(p, "update", mode[i]);
        plan_sort(p);
        T[i] = simulate(t, p, &r[i]);
    }
    TAP_NOTE("update pipelined %.4f ms, after_bp %.4f ms, after_bwd %.4f ms", T[0] * 1e3,
             T[1] * 1e3, T[2] * 1e3);
    TAP_OK(T[0] > 0 && T[0] < T[1] && T[1] < T[2],
           "pipelined < after_bp < after_bwd in iteration time");
    TAP_OK(fabs(r[0].host_busy_s - r[1].host_busy_s) < 1e-9 * r[0].host_busy_s &&
               fabs(r[1].host_busy_s - r[2].host_busy_s) < 1e-9 * r[0].host_busy_s,
           "the same host work in each (only its start moves): %.6f %.6f %.6f s",
           r[0].host_busy_s, r[1].host_busy_s, r[2].host_busy_s);
    plan_free(p);
    trace_free(t);
}

/* DeepSpeed's per-parameter flush (ds_sync=1, the zero-offload policy's default): with the
 * host's time per parameter far above every copy, the flush is host-bound, so raising the
 * issue time by 5 ms lengthens the iteration by 5 ms per framework parameter tensor (the
 * trace's meta param_tensors: 3 layers x 16 + 3 for this decoder). */
static void test_ds_flush(void)
{
    trace_t *t = tiny_trace(3, 8);
    ms_error err;
    plan_t *p = zo_plan_or_fail(t, "1");
    if (!p) return;
    uint64_t n = trace_meta_u64(t, "param_tensors", 0);
    TAP_OK(n == 3 * 16 + 3 && trace_meta_u64(t, "param_tensors_layer", 0) == 16,
           "the trace counts the framework's parameter tensors (%llu)", (unsigned long long)n);
    const char *v = plan_get_knob(p, "ds_sync");
    TAP_OK(v && !strcmp(v, "1"), "DeepSpeed's plan flushes per parameter (ds_sync=1)");
    double T[4];
    static const char *const pre[3] = { "10000", "5000", "66" };
    for (int i = 0; i < 3; i++) {
        plan_set_knob(p, "ds_pre_us", pre[i]);
        plan_sort(p);
        T[i] = simulate(t, p, NULL);
    }
    plan_set_knob(p, "ds_sync", "0");
    plan_sort(p);
    T[3] = simulate(t, p, NULL);
    double want = (double)n * 5e-3;
    TAP_NOTE("issue 10 ms: %.3f ms, 5 ms: %.3f ms, 66 us: %.3f ms, no synchronization: %.3f ms",
             T[0] * 1e3, T[1] * 1e3, T[2] * 1e3, T[3] * 1e3);
    TAP_OK(T[1] > 0 && fabs((T[0] - T[1]) - want) < 1e-6 * want,
           "host-bound: 5 ms more per parameter adds %.1f ms (%llu x 5 ms)",
           (T[0] - T[1]) * 1e3, (unsigned long long)n);
    TAP_OK(T[3] > 0 && T[2] > T[3], "the synchronizations lengthen the iteration (%.3f > %.3f ms)",
           T[2] * 1e3, T[3] * 1e3);
    plan_set_knob(p, "ds_sync", "1");
    plan_set_knob(p, "ds_post_us", "-1");
    plan_sort(p);
    schedule_t *s = NULL;
    ms_status st = lower_dha(t, p, &mach->m, NULL, &s, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "ds_post_us=-1"),
           "a negative host time is refused: %s", err.msg);
    sched_free(s);
    plan_free(p);
    trace_free(t);
}

static void test_policies(void)
{
    trace_t *t = tiny_trace(3, 8);
    ms_error err;
    plan_t *ds = plan_of(&pol_zero_offload, t, "realloc", "1", &err);
    plan_t *na = plan_of(&pol_zero_offload, t, "realloc", "0", &err);
    plan_t *mf = plan_of(&pol_memferry, t, NULL, NULL, &err);
    plan_t *go = plan_of(&pol_go_memferry, t, "reserve", "0", &err);
    plan_t *g1 = plan_of(&pol_go_memferry, t, "reserve", "1", &err);
    if (!ds || !na || !mf || !go || !g1) {
        TAP_OK(0, "all policies plan the trace: %s", err.msg);
        goto out;
    }
    int all_g = 1, host = 0, host1 = 0;
    for (size_t i = 0; i < ds->n_layers; i++) all_g &= ds->layers[i].pmode == PM_GFGB;
    for (size_t i = 0; i < go->n_layers; i++) host += go->layers[i].grad_on_host;
    for (size_t i = 0; i < g1->n_layers; i++) host1 += g1->layers[i].grad_on_host;
    TAP_OK(all_g && !strcmp(ds->lowering, "dha") && !strcmp(mf->lowering, "dha") &&
               !strcmp(go->lowering, "dha") && !strcmp(plan_get_knob(ds, "realloc"), "1"),
           "zero-offload: every layer GFGB; its plan, memferry's and go-memferry's name the "
           "shadow-model lowering");
    TAP_OK(host == (int)go->n_layers, "go-memferry reserve=0 puts every gradient on the host");
    TAP_OK(host1 == 0, "reserve=1 keeps every gradient on the GPU (= memferry)");
    sim_result rd, rn, rm, rg;
    double td = simulate(t, ds, &rd), tn = simulate(t, na, &rn), tm = simulate(t, mf, &rm),
           tg = simulate(t, go, &rg);
    TAP_NOTE("small model: DeepSpeed %.2f ms, Native-Offload %.2f, MemFerry %.2f, GO-MemFerry "
             "%.2f; peak %.0f / %.0f / %.0f / %.0f MiB", td * 1e3, tn * 1e3, tm * 1e3, tg * 1e3,
             rd.peak_allocated_bytes / MS_MiB, rn.peak_allocated_bytes / MS_MiB,
             rm.peak_allocated_bytes / MS_MiB, rg.peak_allocated_bytes / MS_MiB);
    TAP_OK(td > 0 && tn > 0 && tm > 0 && tg > 0, "all four simulate");
    TAP_OK(tm < td && tm < tn, "MemFerry is faster than DeepSpeed and Native-Offload");
    TAP_OK(rg.peak_allocated_bytes < rm.peak_allocated_bytes,
           "GO-MemFerry needs less GPU memory than MemFerry");
out:
    plan_free(ds);
    plan_free(na);
    plan_free(mf);
    plan_free(go);
    plan_free(g1);
    trace_free(t);
}

static void test_bad_input(void)
{
    trace_t *t = tiny_trace(2, 2);
    ms_error err;
    plan_t *p = plan_of(&pol_go_memferry, t, "reserve", "1.5", &err);
    TAP_OK(!p && strstr(err.msg, "outside [0,1]"), "reserve=1.5: %s", err.msg);
    p = plan_of(&pol_go_memferry, t, "reserve", "-0.1", &err);
    TAP_OK(!p && strstr(err.msg, "outside [0,1]"), "reserve=-0.1 refused");
    machine_t saved = mach->m;
    mach->m.dha_read_Bps = 0;
    p = plan_of(&pol_memferry, t, NULL, NULL, &err);
    TAP_OK(!p && strstr(err.msg, "dha.read_Bps"), "no DHA figures: %s", err.msg);
    mach->m = saved;
    /* A plain (not offload) trace. */
    gen_config c;
    gen_config_default(&c);
    model_from_dims(2, 256, 4, 1024, 1000, &c.model, &err);
    c.seq = 64;
    trace_t *plain = NULL, *untimed = NULL;
    gen_trace(&c, &mach->m, &plain, &err);
    p = plain ? plan_of(&pol_memferry, plain, NULL, NULL, &err) : NULL;
    TAP_OK(!p && strstr(err.msg, "offload"), "a trace without offload: %s", err.msg);
    /* Ops without durations and no machine: the units cannot be timed. */
    c.offload = 1;
    gen_trace(&c, NULL, &untimed, &err);
    dha_model *d = NULL;
    ms_status st = untimed ? dha_model_new(untimed, NULL, &d, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "cannot be timed"), "untimed: %s", err.msg);
    /* A plan naming a unit the trace lacks; a bad knob. */
    plan_t *q = plan_new("memferry", "caching");
    plan_set_layer(q, 7, PM_DHA, 0);
    plan_sort(q);
    schedule_t *s = NULL;
    st = lower_dha(t, q, &mach->m, NULL, &s, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "plan layer 7"), "%s", err.msg);
    plan_free(q);
    q = plan_new("memferry", "caching");
    plan_set_knob(q, "host_params", "1");
    plan_set_knob(q, "update", "sometimes");
    st = lower_dha(t, q, &mach->m, NULL, &s, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "update=sometimes"), "%s", err.msg);
    plan_free(q);
    q = plan_new("keep-all", "caching");
    plan_set_layer(q, 0, PM_GFGB, 0);
    TAP_OK(!strcmp(q->lowering, "tensor"), "a new plan names the per-tensor lowering");
    plan_free(q);
    trace_free(plain);
    trace_free(untimed);
    trace_free(t);
}

/* The machine's DHA link weight reaches the executor (sim/exec.c starts DHA flows with
 * link_start_dha). Hand case on a 50 GB/s link, DHA reads at most 40 GB/s: a DHA kernel of
 * 100 us compute reading 4 MB beside a 10 MB H2D copy. Fair (weight 1): 25 + 25 GB/s, the
 * kernel takes 4 MB / 25 GB/s = 160 us. Weight 4: the kernel's share 4/5 x 50 = 40 GB/s (its
 * cap), 100 us, the copy 10 GB/s meanwhile. Either way the copy ends at 14 MB / 50 GB/s =
 * 280 us. */
static void dha_act(schedule_t *s, sched_kind k, sched_stream st, uint64_t t, uint64_t b,
                    double dur_us, uint64_t rd)
{
    sched_action a;
    memset(&a, 0, sizeof a);
    a.kind = k;
    a.stream = st;
    a.op = -1;
    a.layer = -1;
    a.tensor = t;
    a.bytes = b;
    a.dha_eff = 1;
    a.dur_us = dur_us;
    a.host_read_bytes = rd;
    sched_add(s, &a);
}

static double dha_weight_run(double w, double *iter_us)
{
    machine_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "weightbox");
    m.gpu_hbm_bytes = UINT64_C(80) << 30;
    m.gpu_peak_bf16_flops = 1e15;
    m.link_h2d_Bps = m.link_d2h_Bps = 50e9;
    m.link_duplex_Bps = 100e9;
    m.dha_read_Bps = m.dha_write_Bps = 40e9;
    m.dha_link_weight = w;
    m.host_mem_bytes = UINT64_C(1) << 40;
    m.node_gpus = 1;
    m.vmm_granularity_bytes = 2 << 20;
    schedule_t *s = sched_new();
    dha_act(s, SA_ALLOC, SS_COMPUTE, 1, 10000000, 0, 0);
    dha_act(s, SA_HOST_ALLOC, SS_H2D, 1, 10000000, 0, 0);
    dha_act(s, SA_COPY_H2D, SS_H2D, 1, 10000000, 0, 0);
    dha_act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 100, 4000000);
    sim_opts o;
    sim_opts_default(&o);
    sim_result r;
    ms_error err;
    res_init(&r);
    ms_status st = sim_execute(s, &m, &o, &r, &err);
    sched_free(s);
    *iter_us = st ? NAN : r.iter_time_s * 1e6;
    return st ? NAN : r.compute_busy_s * 1e6;
}

static void test_dha_weight_exec(void)
{
    double it1, it4;
    double k1 = dha_weight_run(1, &it1), k4 = dha_weight_run(4, &it4);
    TAP_OK(fabs(k1 - 160) < 0.01 && fabs(it1 - 280) < 0.01,
           "exec, DHA weight 1: kernel %.2f us (hand 160), copy ends %.2f us (280)", k1, it1);
    TAP_OK(fabs(k4 - 100) < 0.01 && fabs(it4 - 280) < 0.01,
           "exec, DHA weight 4: kernel %.2f us (hand 100), copy ends %.2f us (280)", k4, it4);
}

/* ---- GO-MemFerry's per-module items (go_granularity=module, the paper's §IV-D) ---- */

static uint64_t d2h_of(const trace_t *t, const plan_t *p)
{
    ms_error err;
    schedule_t *s = NULL;
    lower_report rep;
    lower_opts o;
    lower_opts_default(&o);
    o.report = &rep;
    if (lower_dha(t, p, &mach->m, &o, &s, &err)) {
        TAP_NOTE("lower: %s", err.msg);
        return UINT64_MAX;
    }
    sched_free(s);
    return rep.d2h_bytes;
}

static void test_modules(void)
{
    ms_error err;
    trace_t *t = tiny_trace(2, 2);
    dha_model *d = NULL;
    if (!t || dha_model_new(t, &mach->m, &d, &err)) {
        TAP_OK(0, "module analysis of the small trace");
        trace_free(t);
        return;
    }
    size_t nm = dha_model_modules(d), nu = dha_model_units(d);
    int sums = 1, split = 1;
    for (size_t u = 0; u < nu; u++) {
        const dha_unit *un = dha_model_unit(d, u);
        uint64_t b = 0;
        double acc = 0, ex = 0;
        size_t k = 0;
        for (size_t i = 0; i < nm; i++) {
            const dha_module *m = dha_model_module(d, i);
            if (m->layer != un->layer) continue;
            b += m->grad_bytes;
            acc += m->t_gw_acc_us;
            ex += m->t_gw_extra_us;
            k++;
        }
        if (b != un->grad_bytes || fabs(acc - un->t_gw_acc_us) > 1e-6 * (1 + acc) ||
            fabs(ex - un->t_gw_extra_us) > 1e-6 * (1 + ex))
            sums = 0;
        if (un->layer >= 0 && un->layer < dha_model_layers(d) && k != 6) split = 0;
    }
    TAP_OK(sums, "the modules of each unit add up to its gradient bytes and write costs");
    TAP_OK(split && nm > nu, "each layer's gradient buffer splits into its 6 modules (%zu "
           "modules over %zu units)", nm, nu);
    /* Every Linear of a layer: the same accumulate cost per gradient byte up to the kernel
     * launch (the cost is link time proportional to the bytes) — why the curve stays close
     * to straight in memsim. */
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < nm; i++) {
        const dha_module *m = dha_model_module(d, i);
        if (m->layer != 0 || m->grad_bytes < 65536) continue;
        double g = m->t_gw_acc_us / (double)m->grad_bytes;
        lo = g < lo ? g : lo;
        hi = g > hi ? g : hi;
    }
    TAP_OK(hi > 0 && hi / lo < 1.1, "layer 0's Linear modules cost within 10%% per byte of "
           "each other (%.3f)", hi / lo);
    /* The DP over the module items, as the policy quantizes them, against brute force. */
    int bad = 0, tried = 0;
    if (nm <= 24) {
        double g[24];
        uint64_t sz[24], total = 0;
        int keep[24], kb[24];
        for (size_t i = 0; i < nm; i++) total += dha_model_module(d, i)->grad_bytes;
        uint64_t q = total / 4096 + 1;
        for (size_t i = 0; i < nm; i++) {
            g[i] = dha_model_module(d, i)->t_gw_acc_us;
            sz[i] = (dha_model_module(d, i)->grad_bytes + q - 1) / q;
        }
        for (int r = 1; r < 10; r++) {
            uint64_t cap = (uint64_t)floor(r / 10.0 * (double)total / (double)q);
            double best;
            tried++;
            if (mf_go_dp(g, sz, nm, cap, keep, &best) ||
                fabs(best - mf_go_brute(g, sz, nm, cap, kb)) > 1e-9 * (1 + best))
                bad++;
        }
    }
    TAP_OK(tried == 9 && bad == 0, "DP == brute force over the %zu module items of a 2-layer "
           "model at reserve 0.1..0.9 (%d differ)", nm, bad);
    /* A module-level plan: some of a unit's gradient on the host, the rest copied back. */
    plan_t *g5 = plan_of(&pol_go_memferry, t, "reserve", "0.5", &err);
    plan_t *mf = plan_of(&pol_memferry, t, NULL, NULL, &err);
    plan_t *g0 = plan_of(&pol_go_memferry, t, "reserve", "0", &err);
    int knobs = 0;
    for (size_t i = 0; g5 && i < g5->n_knobs; i++)
        knobs += !strncmp(g5->knobs[i].key, "grad_host.", 10);
    TAP_OK(g5 && knobs > 0, "reserve=0.5 puts some modules' gradients on the host (%d "
           "grad_host knobs)", knobs);
    uint64_t c5 = g5 ? d2h_of(t, g5) : UINT64_MAX, c1 = mf ? d2h_of(t, mf) : 0;
    TAP_OK(c5 > 0 && c5 < c1, "its schedule copies back only the GPU part (%llu of %llu "
           "bytes)", (unsigned long long)c5, (unsigned long long)c1);
    sim_result r5, r1, r0;
    double t5 = g5 ? simulate(t, g5, &r5) : -1, t1 = mf ? simulate(t, mf, &r1) : -1;
    double t0 = g0 ? simulate(t, g0, &r0) : -1;
    TAP_OK(t5 > 0 && t1 > 0 && t0 > 0 && t1 <= t5 && t5 <= t0,
           "and simulates between all on the host and all on the GPU (%.1f <= %.1f <= %.1f us)",
           t1 * 1e6, t5 * 1e6, t0 * 1e6);
    TAP_OK(t5 > 0 && r5.peak_allocated_bytes < r1.peak_allocated_bytes &&
           r5.peak_allocated_bytes > r0.peak_allocated_bytes,
           "its peak memory lies between theirs too");
    /* The ids the runtime's real kernels place (lower_dha_grad_host_ids): every token of
     * every grad_host knob, in knob order; a token that is not an id is refused. */
    uint64_t *gid = NULL;
    size_t ngid = 0, ntok = 0;
    ms_status gs = g5 ? lower_dha_grad_host_ids(g5, &gid, &ngid, &err) : MS_ERR_INVALID;
    for (size_t i = 0; g5 && i < g5->n_knobs; i++)
        if (!strncmp(g5->knobs[i].key, "grad_host.", 10))
            for (const char *c = g5->knobs[i].value; c; c = strchr(c, ','), c = c ? c + 1 : c)
                ntok++;
    int listed = gs == MS_OK && ngid == ntok && ngid > 0;
    for (size_t i = 0; listed && i < ngid; i++) {
        char want[24];
        snprintf(want, sizeof want, "%llu", (unsigned long long)gid[i]);
        int found = 0;
        for (size_t k = 0; k < g5->n_knobs && !found; k++)
            found = !strncmp(g5->knobs[k].key, "grad_host.", 10) && strstr(g5->knobs[k].value, want);
        listed = found;
    }
    TAP_OK(listed, "lower_dha_grad_host_ids lists the %zu ids of the grad_host knobs", ngid);
    free(gid);
    plan_t *bq = plan_new("manual", "caching");
    if (bq) plan_set_knob(bq, "grad_host.1", "12, x7");
    gs = bq ? lower_dha_grad_host_ids(bq, &gid, &ngid, &err) : MS_OK;
    TAP_OK(gs == MS_ERR_INVALID && !gid && !ngid && strstr(err.msg, "'x7'"), "%s", err.msg);
    plan_free(bq);
    /* Bad input: a knob naming no module of its unit, a unit already on the host. */
    plan_t *q = g5 ? g5 : NULL;
    if (q) {
        schedule_t *s = NULL;
        plan_set_knob(q, "grad_host.0", "999999");
        ms_status st = lower_dha(t, q, &mach->m, NULL, &s, &err);
        TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "grad_host.0"), "%s", err.msg);
        sched_free(s);
        s = NULL;
        plan_set_knob(q, "grad_host.0", "1");
        plan_set_layer(q, 0, PM_GFGB, 1);
        plan_sort(q);
        st = lower_dha(t, q, &mach->m, NULL, &s, &err);
        TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "grad=host"), "%s", err.msg);
        sched_free(s);
    } else {
        TAP_OK(0, "bad grad_host knob");
        TAP_OK(0, "grad_host with grad=host");
    }
    plan_t *bg = plan_of(&pol_go_memferry, t, "go_granularity", "layer", &err);
    TAP_OK(!bg && strstr(err.msg, "go_granularity=layer"), "%s", err.msg);
    plan_free(bg);
    plan_free(g5);
    plan_free(mf);
    plan_free(g0);
    dha_model_free(d);
    trace_free(t);
}


/* AccumulateGrad into host gradients (grad_write=accumulate): every gradient buffer is
 * accumulated once per backward, the tied LM head's contribution waiting on the GPU for the
 * embedding's dense table gradient (PyTorch sums a leaf's gradients before AccumulateGrad);
 * with dha.inflight_bytes an accumulate reads its first bytes alone and writes its last ones
 * alone (the fill and drain measured on an H200, experiments/memferry/go_probe.py). */
static void acc_stats(const trace_t *t, const plan_t *p, const machine_t *m, uint64_t *wr,
                      size_t *write_only, size_t *read_only, uint64_t *max_one_way)
{
    ms_error err;
    schedule_t *s = NULL;
    *wr = 0;
    *write_only = *read_only = 0;
    *max_one_way = 0;
    if (lower_dha(t, p, m, NULL, &s, &err)) {
        TAP_NOTE("lower: %s", err.msg);
        return;
    }
    int64_t it = -1;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_MARK && a->mark == TM_ITER) it++;
        if (it != 0 || a->kind != SA_COMPUTE || a->phase != TP_BWD) continue;
        *wr += a->host_write_bytes;
        if (a->host_write_bytes && !a->host_read_bytes) {
            ++*write_only;
            if (a->host_write_bytes > *max_one_way) *max_one_way = a->host_write_bytes;
        }
        if (a->host_read_bytes && !a->host_write_bytes) ++*read_only;
    }
    sched_free(s);
}

static void test_accumulate(void)
{
    ms_error err;
    trace_t *t = tiny_trace(2, 2);
    plan_t *p = t ? plan_of(&pol_go_memferry, t, "reserve", "0", &err) : NULL;
    dha_model *d = NULL;
    if (!p || dha_model_new(t, &mach->m, &d, &err)) {
        TAP_OK(0, "GO-MemFerry plans the small trace with every gradient on the host");
        plan_free(p);
        trace_free(t);
        return;
    }
    uint64_t gbytes = 0;
    for (size_t u = 0; u < dha_model_units(d); u++) gbytes += dha_model_unit(d, u)->grad_bytes;
    const machine_t *m = &mach->m;
    machine_t flat = *m;
    flat.dha_inflight_bytes = 0;
    uint64_t wr, wr0, one, one0;
    size_t wo, ro, wo0, ro0;
    acc_stats(t, p, m, &wr, &wo, &ro, &one);
    acc_stats(t, p, &flat, &wr0, &wo0, &ro0, &one0);
    TAP_OK(wr == gbytes && wr0 == gbytes,
           "every gradient byte is accumulated into the host once per backward, the tied head's "
           "share included (%" PRIu64 " and %" PRIu64 " bytes written, %" PRIu64 " of gradients)",
           wr, wr0, gbytes);
    TAP_OK(wo0 == 0 && ro0 == 0, "without dha.inflight_bytes an accumulate reads and writes at once");
    TAP_OK(wo > 0 && wo == ro && one > 0 && (double)one <= m->dha_inflight_bytes,
           "with it every accumulate has a read-only fill and a write-only drain (%zu, %zu) of at "
           "most one wave (largest %" PRIu64 " <= %.0f bytes)", ro, wo, one, m->dha_inflight_bytes);
    /* the embedding unit (first unit, last in the backward): its buffer accumulated once, by
     * the hand formula: one wave read then written, the rest at the duplex-bound rate */
    const dha_unit *e = dha_model_unit(d, 0);
    double b = (double)e->grad_bytes, sw = b < m->dha_inflight_bytes ? b : m->dha_inflight_bytes;
    double rd = 1 / (m->dha_read_Bps * m->dha_other_eff), wt = 1 / (m->dha_write_Bps * m->dha_other_eff);
    double both = fmax(fmax(rd, wt), 2 / m->link_duplex_Bps);
    double hand = (sw * (rd + wt) + (b - sw) * both) * 1e6 + m->gpu_kernel_launch_us;
    TAP_OK(fabs(e->t_gw_acc_us - hand) <= 1e-6 * hand,
           "the embedding's accumulate is charged once: %.2f us (hand: %.2f us for %.0f bytes)",
           e->t_gw_acc_us, hand, b);
    sim_result r0, r1;
    double t0 = -1, t1 = -1;
    machine_profile *keep = mach;
    machine_profile flat_prof = *mach;
    flat_prof.m = flat;
    t1 = simulate(t, p, &r1);
    mach = &flat_prof;
    t0 = simulate(t, p, &r0);
    mach = keep;
    TAP_OK(t1 > t0 && t0 > 0, "the fill and drain make the backward slower (%.3f ms vs %.3f ms)",
           t1 * 1e3, t0 * 1e3);
    plan_t *bad = plan_of(&pol_go_memferry, t, "go_gain", "fast", &err);
    TAP_OK(!bad && strstr(err.msg, "go_gain=fast"), "go_gain=fast is refused: %s", bad ? "" : err.msg);
    plan_free(bad);
    dha_model_free(d);
    plan_free(p);
    trace_free(t);
}

/* Host bytes the layer-0 fc1 GEMMs of an all-DHA plan read, forward and backward, with the
 * machine's dha.gemm_rows set to rows. */
static void fc1_reads(const trace_t *t, double rows, uint64_t *fwd, uint64_t *bwd)
{
    *fwd = *bwd = 0;
    machine_t m = mach->m;
    m.dha_gemm_rows = rows;
    plan_t *p = plan_new("memferry", "caching");
    plan_set_knob(p, "host_params", "1");
    for (int l = -1; l <= 2; l++) plan_set_layer(p, l, PM_DHA, 0);
    plan_sort(p);
    schedule_t *s = NULL;
    ms_error err;
    if (lower_dha(t, p, &m, NULL, &s, &err) != MS_OK) {
        TAP_NOTE("lower: %s", err.msg);
        plan_free(p);
        return;
    }
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        const trace_op *op = a->kind == SA_COMPUTE && a->op >= 0 ? trace_find_op(t, (uint64_t)a->op) : NULL;
        if (!op || op->layer != 0 || !strstr(op->name, "fc1")) continue;
        if (op->phase == TP_FWD) *fwd = a->host_read_bytes;
        if (op->phase == TP_BWD) *bwd = a->host_read_bytes;
    }
    sched_free(s);
    plan_free(p);
}

/* A GEMM reading a host weight reads it once per dha.gemm_rows rows of its other operand
 * (cuBLAS's row tiles, measured: experiments/memferry/host_probe.py); a generated backward
 * GEMM is the input gradient (reads the weight) and the weight gradient (does not). */
static void test_gemm_rereads(void)
{
    trace_t *t = tiny_trace(2, 2); /* 2 x 256 = 512 rows, hidden 512, ffn 2048 */
    if (!t) {
        TAP_OK(0, "small trace");
        return;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "L0.fc1.w")) w = r->u.alloc.bytes;
    }
    uint64_t f0, b0, f256, b256, f100, b100, f1k, b1k;
    fc1_reads(t, 0, &f0, &b0);
    fc1_reads(t, 256, &f256, &b256);
    fc1_reads(t, 100, &f100, &b100);
    fc1_reads(t, 1000, &f1k, &b1k);
    TAP_OK(w > 0 && f0 == w && b0 == w, "without dha.gemm_rows the fc1 weight (%llu B) is read "
           "once forward and backward (%llu, %llu)", (unsigned long long)w,
           (unsigned long long)f0, (unsigned long long)b0);
    TAP_OK(f256 == 2 * w && b256 == 2 * w, "512 rows in 256-row tiles: read twice, forward and "
           "backward (%llu, %llu)", (unsigned long long)f256, (unsigned long long)b256);
    TAP_OK(f100 == 6 * w && b100 == 6 * w, "512 rows in 100-row tiles: read ceil(5.12) = 6 "
           "times (%llu, %llu)", (unsigned long long)f100, (unsigned long long)b100);
    TAP_OK(f1k == w && b1k == w, "a tile taller than the rows: read once");
    trace_free(t);
}

int main(void)
{
    ms_error err;
    if (machine_load_named("a100-80g-pcie3", &mach, &err) != MS_OK) {
        printf("# %s\n", err.msg);
        return 99;
    }
    test_alg1_hand();
    test_alg1_exhaustive(0);
    test_alg1_exhaustive(1);
    test_iter_exhaustive();
    test_greedy();
    test_dp();
    test_sim_exhaustive();
    test_lowering();
    test_update_modes();
    test_policies();
    test_ds_flush();
    test_bad_input();
    test_modules();
    test_accumulate();
    test_gemm_rereads();
    test_dha_weight_exec();
    TAP_OK(synth_allocs > 0 && synth_wrong == 0, "the DHA lowering's own blocks (%zu ALLOCs) "
           "are all staging (%zu are not)", synth_allocs, synth_wrong);
    machine_profile_free(mach);
    return tap_done();
}

/* dsa_solve.c — offline dynamic storage allocation's driver: method names, options, and
 * dsa_solve(), which runs the heuristics, then branch-and-bound and the MIP where they
 * scale, under one work budget. Used by the MEMO bi-level planner (planners/), `memsim dsa`
 * (sim/cmd_dsa.c) and tests/test_dsa.c. See dsa.h. */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "memory/dsa_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================================
 * Names, options, dsa_solve
 * ====================================================================================== */

const char *dsa_method_name(dsa_method m)
{
    switch (m) {
    case DSA_GREEDY: return "greedy";
    case DSA_BB: return "bb";
    case DSA_MIP: return "mip";
    case DSA_AUTO: return "auto";
    }
    return "?";
}

int dsa_method_parse(const char *s, dsa_method *out)
{
    static const dsa_method all[] = {DSA_GREEDY, DSA_BB, DSA_MIP, DSA_AUTO};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (strcmp(s, dsa_method_name(all[k])) == 0) { *out = all[k]; return 1; }
    return 0;
}

const char *dsa_result_name(dsa_result r)
{
    switch (r) {
    case DSA_OK: return "ok";
    case DSA_INFEASIBLE: return "infeasible";
    case DSA_TIMEOUT: return "timeout";
    }
    return "?";
}

void dsa_options_default(dsa_options *o)
{
    memset(o, 0, sizeof *o);
    o->time_limit_s = 10;
    o->methods = DSA_AUTO;
    o->work_per_s = DSA_WORK_PER_S;
    o->bb_max_buffers = 2000;
    o->mip_max_buffers = 40;
}

void dsa_solution_free(dsa_solution *s)
{
    if (!s) return;
    free(s->offsets);
    s->offsets = NULL;
}

/* The state of one dsa_solve call. */
typedef struct solver {
    const dsa_instance *in;
    const dsa_options *opt;
    dsa_solution *sol;
    uint64_t *tmp;          /* scratch plan */
    uint64_t budget, used;  /* work */
    uint64_t lb;            /* proven lower bound on the minimal peak */
    int infeasible;         /* capacity mode: proven not to fit */
    double deadline;        /* wall-clock backstop of the heuristics (0: none) */
    int timed_out;          /* the heuristics stopped at the limit */
} solver;

/* The peak that ends a minimization: the lower bound, or within rel_gap of it. */
static uint64_t solver_target(const solver *v)
{
    double t = (double)v->lb * (1 + v->opt->rel_gap);
    return t >= (double)NONE64 / 2 ? NONE64 / 2 : (uint64_t)t;
}

static int solver_done(const solver *v)
{
    uint64_t cap = v->opt->capacity_bytes;
    if (v->infeasible) return 1;
    return cap ? v->sol->peak_bytes <= cap : v->sol->peak_bytes <= solver_target(v);
}

static void solver_offer(solver *v, const uint64_t *off, uint64_t peak, dsa_method m,
                         const char *how)
{
    if (peak >= v->sol->peak_bytes) return;
    memcpy(v->sol->offsets, off, v->in->n * sizeof *off);
    v->sol->peak_bytes = peak;
    v->sol->method = m;
    snprintf(v->sol->detail, sizeof v->sol->detail, "%s", how);
}

static ms_status solver_heuristics(solver *v, int bb_follows, ms_error *err)
{
    uint64_t cap = v->opt->capacity_bytes;
    uint64_t room = v->budget > v->used ? v->budget - v->used : 0;
    dsa_heur_result r;
    ms_status st = dsa_heuristics(v->in, v->tmp, cap ? cap : solver_target(v), room,
                                  v->deadline, bb_follows, &r);
    v->timed_out |= r.hit;
    v->used += r.work;
    if (st == MS_OK && r.peak < NONE64 - 1) solver_offer(v, v->tmp, r.peak, DSA_GREEDY, r.how);
    return st == MS_OK ? MS_OK : ms_fail(err, st, "out of memory");
}

/* Capacity mode: one decision. Minimize mode: LOAD first (instances packed tight are
 * often found fast), then bisection between what is ruled out and the best plan; each
 * probe gets half of the budget left. A probe that runs out rules its capacity out of
 * the search but proves nothing. */
static ms_status solver_bb(solver *v, uint64_t budget, ms_error *err)
{
    uint64_t cap = v->opt->capacity_bytes, stop = v->used + budget;
    if (cap) {
        dsa_result r;
        uint64_t w = 0;
        ms_status st = dsa_bb_decide(v->in, cap, budget, v->tmp, &r, &w, err);
        v->used += w;
        if (st != MS_OK) return st;
        if (r == DSA_OK) {
            uint64_t p;
            if ((st = dsa_check(v->in, v->tmp, cap, &p, err)) != MS_OK) return st;
            solver_offer(v, v->tmp, p, DSA_BB, "bb");
        }
        if (r == DSA_INFEASIBLE) v->infeasible = 1;
        return MS_OK;
    }
    uint64_t lo = v->lb;
    for (int first = 1; lo < v->sol->peak_bytes && v->used < stop && !solver_done(v);
         first = 0) {
        uint64_t hi = v->sol->peak_bytes - 1, c = first ? lo : lo + (hi - lo) / 2;
        uint64_t w = 0, probe = (stop - v->used) / 2 + 1;
        dsa_result r;
        ms_status st = dsa_bb_decide(v->in, c, probe, v->tmp, &r, &w, err);
        v->used += w;
        if (st != MS_OK) return st;
        if (r == DSA_OK) {
            uint64_t p;
            if ((st = dsa_check(v->in, v->tmp, c, &p, err)) != MS_OK) return st;
            solver_offer(v, v->tmp, p, DSA_BB, "bb");
        } else {
            lo = c + 1;
            if (r == DSA_INFEASIBLE && c + 1 > v->lb) v->lb = c + 1;
        }
    }
    return MS_OK;
}

static ms_status solver_mip(solver *v, uint64_t budget, ms_error *err)
{
    uint64_t cap = v->opt->capacity_bytes;
    /* capacity mode asks for any plan below cap + 1, else for one below the best */
    uint64_t upper = cap ? cap + 1 : v->sol->peak_bytes;
    if (cap && upper > v->sol->peak_bytes) upper = v->sol->peak_bytes;
    uint64_t nodes = budget / DSA_MIP_WORK_PER_NODE + 1, p = 0, bound;
    int found;
    dsa_result r;
    ms_status st = dsa_mip(v->in, v->lb, upper, nodes, v->opt->mip_integer_offsets, v->tmp, &p,
                           &bound, &found, &r, &nodes, err);
    v->used += nodes * DSA_MIP_WORK_PER_NODE;
    if (st != MS_OK) return st;
    if (found) {
        if ((st = dsa_check(v->in, v->tmp, 0, &p, err)) != MS_OK) return st;
        solver_offer(v, v->tmp, p, DSA_MIP, "mip");
    }
    if (bound > v->lb) v->lb = bound;
    if (cap && r == DSA_OK && !found && upper == cap + 1) v->infeasible = 1;
    return MS_OK;
}

static void solver_finish(solver *v)
{
    dsa_solution *s = v->sol;
    uint64_t cap = v->opt->capacity_bytes;
    if (v->lb > s->peak_bytes) v->lb = s->peak_bytes; /* cannot happen; keeps gap >= 0 */
    s->lower_bound_bytes = v->lb;
    s->gap = v->lb ? (double)(s->peak_bytes - v->lb) / (double)v->lb : 0;
    if (cap) {
        s->status = s->peak_bytes <= cap ? DSA_OK : v->infeasible ? DSA_INFEASIBLE : DSA_TIMEOUT;
        if (v->infeasible && cap + 1 > s->lower_bound_bytes) {
            s->lower_bound_bytes = cap + 1 < s->peak_bytes ? cap + 1 : s->peak_bytes;
            s->gap = (double)(s->peak_bytes - s->lower_bound_bytes) /
                     (double)s->lower_bound_bytes;
        }
    } else {
        s->status = s->peak_bytes <= solver_target(v) ? DSA_OK : DSA_TIMEOUT;
    }
    s->work = v->used;
}

ms_status dsa_solve(const dsa_instance *in, const dsa_options *opt, dsa_solution *sol,
                    ms_error *err)
{
    double t0 = dsa_wall_s();
    size_t n = in->n;
    memset(sol, 0, sizeof *sol);
    dsa_options o = *opt;
    unsigned m = o.methods ? o.methods : DSA_AUTO;
    if (o.work_per_s <= 0) o.work_per_s = DSA_WORK_PER_S;
    if (!(o.time_limit_s >= 0 && o.time_limit_s <= 1e7))
        return ms_fail(err, MS_ERR_INVALID, "time limit must be between 0 and 1e7 s");
    if (!(o.rel_gap >= 0 && o.rel_gap <= 1e3))
        return ms_fail(err, MS_ERR_INVALID, "relative gap must be between 0 and 1000");
    if ((m & ~(unsigned)DSA_AUTO) || (m == DSA_MIP && !dsa_have_mip()))
        return ms_fail(err, MS_ERR_UNSUPPORTED, m == DSA_MIP
                       ? "this build has no lp_solve (MIP unavailable)" : "unknown method");
    sol->n = n;
    sol->offsets = calloc(n + 1, sizeof *sol->offsets);
    uint64_t *tmp = malloc((n + 1) * sizeof *tmp);
    if (!sol->offsets || !tmp) {
        free(tmp);
        dsa_solution_free(sol);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    solver v = {in, &o, sol, tmp, 0, 0, 0, 0, 0, 0};
    v.budget = o.work_budget ? o.work_budget : (uint64_t)(o.time_limit_s * o.work_per_s);
    /* the work count is the limit (deterministic); the clock, where asked for, is only a
     * backstop against a machine slower than the calibration (or a loaded one) */
    if (!o.work_budget && o.clock_backstop > 0)
        v.deadline = t0 + o.clock_backstop * o.time_limit_s + 0.25;
    sol->load_bytes = v.lb = dsa_load(in);
    if (n == 0) { /* nothing to place: peak 0, which fits anything */
        free(tmp);
        sol->status = DSA_OK;
        sol->elapsed_s = dsa_wall_s() - t0;
        return MS_OK;
    }
    if (v.lb == 0) { /* only dsa_load running out of memory gives 0 for buffers of size > 0 */
        free(tmp);
        dsa_solution_free(sol);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    sol->peak_bytes = NONE64;
    sol->method = DSA_GREEDY;
    if (o.capacity_bytes && v.lb > o.capacity_bytes) v.infeasible = 1; /* LOAD proves it */
    /* auto: each exact method only where it scales; a method named alone runs up to its
     * hard limit and is an error beyond it */
    int explicit_one = m == DSA_BB || m == DSA_MIP;
    if ((m == DSA_BB && n > DSA_BB_MAX_BUFFERS) || (m == DSA_MIP && n > DSA_MIP_MAX_BUFFERS)) {
        free(tmp);
        dsa_solution_free(sol);
        return ms_fail(err, MS_ERR_LIMIT, "method %s takes at most %d buffers, got %zu",
                       dsa_method_name((dsa_method)m),
                       m == DSA_BB ? DSA_BB_MAX_BUFFERS : DSA_MIP_MAX_BUFFERS, n);
    }
    int use_bb = (m & DSA_BB) && n <= DSA_BB_MAX_BUFFERS &&
                 (explicit_one || n <= o.bb_max_buffers);
    int use_mip = (m & DSA_MIP) && dsa_have_mip() && n <= DSA_MIP_MAX_BUFFERS &&
                  (explicit_one || n <= o.mip_max_buffers);
    /* the heuristics always run first: they give the upper bound (MEMO's big-M) */
    ms_status st = solver_heuristics(&v, use_bb || use_mip, err);
    if (st == MS_OK && use_bb && !solver_done(&v)) {
        uint64_t room = v.budget > v.used ? v.budget - v.used : 0;
        st = solver_bb(&v, use_mip ? room / 2 : room, err);
    }
    if (st == MS_OK && use_mip && !solver_done(&v)) {
        uint64_t room = v.budget > v.used ? v.budget - v.used : 0;
        st = solver_mip(&v, room, err);
    }
    if (st == MS_OK) st = dsa_check(in, sol->offsets, 0, NULL, err);
    free(tmp);
    if (st != MS_OK) { dsa_solution_free(sol); return st; }
    solver_finish(&v);
    sol->elapsed_s = dsa_wall_s() - t0;
    return MS_OK;
}

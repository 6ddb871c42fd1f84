/* policy_protrain.c — the `protrain` policy of policy_protrain.h: the cost-model search of
 * planners/protrain/cost_protrain.c turned into a chunk plan. Registered in planners/policy.c. */
#define _POSIX_C_SOURCE 200809L
#include "planners/protrain/policy_protrain.h"
#include "planners/knob.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "planners/memo/policy_memo.h"
#include "traces/jobview.h"

ms_status pt_knobs_from_opts(const pol_opts *o, lc_knobs *k, ms_error *err)
{
    /* the knobs have the plan's names: read them through a scratch plan */
    plan_t *tmp = plan_new("knobs", "caching");
    if (!tmp) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_status st = MS_OK;
    for (size_t i = 0; o && i < o->n_knobs && st == MS_OK; i++)
        if (o->knobs[i].key && o->knobs[i].value &&
            plan_set_knob(tmp, o->knobs[i].key, o->knobs[i].value) != MS_OK)
            st = ms_fail(err, MS_ERR_INVALID, "knob '%s=%s' is not a valid plan knob",
                         o->knobs[i].key, o->knobs[i].value);
    if (st == MS_OK) st = lc_knobs_from_plan(tmp, k, err);
    plan_free(tmp);
    return st;
}

ms_status pt_protrain_knobs(const pol_opts *o, lc_knobs *k, ms_error *err)
{
    ms_status st = pt_knobs_from_opts(o, k, err);
    if (st) return st;
    if (!knobtab_given(&lc_knob_table, k, &k->host_bytes_per_param)) k->host_bytes_per_param = 12;
    if (!knobtab_given(&lc_knob_table, k, &k->staging_separate)) k->staging_separate = 1;
    if (!knobtab_given(&lc_knob_table, k, &k->persist_gather)) k->persist_gather = LC_PG_AUTO;
    return MS_OK;
}

int pt_config_given(const lc_knobs *k)
{
    return knobtab_given(&lc_knob_table, k, &k->n_persist) &&
           knobtab_given(&lc_knob_table, k, &k->n_buffer) &&
           knobtab_given(&lc_knob_table, k, &k->n_swap) &&
           knobtab_given(&lc_knob_table, k, &k->n_ckpt);
}

static const char *const PT_COST_MODELS[] = { "recurrence", "appendix", NULL };
static const int PT_COST_MODEL_VALS[] = { PTC_RT_RECURRENCE, PTC_RT_APPENDIX };

/* The search's knobs; absent ones keep ptc_search_opts_default's values. */
static const knobtab_row pt_search_rows[] = {
    KNOB_BYTES("gpu_bytes", pt_search_knobs, gpu_bytes, "0", 0, HUGE_VAL,
               "GPU memory the search may plan; 0: the machine's usable bytes", ""),
    KNOB_DBL("mem_margin", pt_search_knobs, mem_margin, NULL, -HUGE_VAL, HUGE_VAL,
             "fraction of it held back, in [0, 1)", ""),
    KNOB_BYTES("host_bytes", pt_search_knobs, host_bytes, NULL, 0, HUGE_VAL,
               "host memory the plan may take (absent: this GPU's share of the node's)", ""),
    KNOB_DBL("max_swap", pt_search_knobs, max_swap, NULL, -HUGE_VAL, HUGE_VAL,
             "most blocks swapped, an integer in [-1, 1e6] (-1: no cap)", ""),
    KNOB_DBL("tie_tol", pt_search_knobs, tie_tol, NULL, -HUGE_VAL, HUGE_VAL,
             "relative band within which a less memory-hungry configuration wins, in [0, 1]", ""),
    KNOB_DBL("search_bound", pt_search_knobs, search_bound, "1", -HUGE_VAL, HUGE_VAL,
             "1: the search's bandwidth bound prunes; 0: every configuration is estimated", ""),
    { "cost_model", KNOBTAB_ENUM, offsetof(pt_search_knobs, cost_model), "recurrence", 0, 0,
      PT_COST_MODELS, PT_COST_MODEL_VALS, NULL, "the runtime estimator: the recurrence or the "
      "appendix's closed form", "ProTrain App. A", 1 + KNOBTAB_MSG_IS, 0 },
    KNOB_DBL("swap_bw", pt_search_knobs, swap_bw, "1", -HUGE_VAL, HUGE_VAL,
             "1: swapping bounded by the link bandwidth (0 or 1)", ""),
};
const knobtab pt_search_knob_table = KNOBTAB("protrain search", pt_search_rows, KNOBTAB_MSG_OPT,
                                             pt_search_knobs, given);

ms_status pt_search_opts_from(const pol_opts *o, const trace_t *t, const machine_t *m,
                              ptc_search_opts *so, ms_error *err)
{
    ptc_search_opts_default(so);
    jobview jv;
    jobview_of(t, m, &jv);
    pt_search_knobs k;
    ms_status st = knob_from_opts(&pt_search_knob_table, o, &k, err);
    if (st) return st;
#define PT_GIVEN(f) knobtab_given(&pt_search_knob_table, &k, &k.f)
    so->capacity_bytes = k.gpu_bytes;
    if (PT_GIVEN(mem_margin)) so->mem_margin = k.mem_margin;
    so->host_capacity_bytes = PT_GIVEN(host_bytes) ? k.host_bytes : jv.host_share_bytes;
    double ms = PT_GIVEN(max_swap) ? k.max_swap : so->max_swap;
    if (PT_GIVEN(tie_tol)) so->tie_tol = k.tie_tol;
#undef PT_GIVEN
    if (k.swap_bw != 0 && k.swap_bw != 1)
        return ms_fail(err, MS_ERR_INVALID, "knob swap_bw=%g is not 0 or 1", k.swap_bw);
    so->swap_bw = k.swap_bw == 1;
    if (!(ms >= -1 && ms <= 1e6) || ms != floor(ms))
        return ms_fail(err, MS_ERR_INVALID, "knob max_swap=%g is not an integer in [-1, 1e6] "
                       "(-1: no cap)", ms);
    if (!(so->tie_tol >= 0 && so->tie_tol <= 1))
        return ms_fail(err, MS_ERR_INVALID, "knob tie_tol=%g is not in [0, 1]", so->tie_tol);
    if (k.search_bound != 0 && k.search_bound != 1)
        return ms_fail(err, MS_ERR_INVALID, "knob search_bound=%g is not 0 or 1", k.search_bound);
    so->max_swap = (int)ms;
    so->no_bound = k.search_bound == 0;
    so->runtime_model = k.cost_model;
    if (so->mem_margin < 0 || so->mem_margin >= 1)
        return ms_fail(err, MS_ERR_INVALID, "knob mem_margin=%g is not in [0,1)", so->mem_margin);
    return MS_OK;
}

ms_status pt_model_new(const trace_t *t, const machine_t *m, const lc_knobs *k,
                       const ptc_search_opts *so, ptc_model **out, ms_error *err)
{
    ms_status st = ptc_model_new(t, m, k, out, err);
    if (st == MS_OK) ptc_model_set_runtime(*out, so->runtime_model);
    return st;
}

lc_knobs pt_config_knobs(const ptc_model *M, const ptc_config *c, const ptc_estimate *e)
{
    lc_knobs k = *ptc_knobs(M);
    k.chunk_bytes = ptc_layout(M)->chunk_bytes;
    k.n_persist = c->n_persist;
    k.n_buffer = c->n_buffer;
    k.n_swap = c->n_swap;
    k.n_ckpt = c->n_ckpt;
    k.persist_gather = e->persist_gather;
    return k;
}

/* A predicted time as plans have always recorded it: to the microsecond. */
static double to_us(double s)
{
    char b[64];
    snprintf(b, sizeof b, "%.6f", s);
    return strtod(b, NULL);
}

ms_status pt_record_estimate(plan_t *p, const ptc_estimate *e, ms_error *err)
{
    (void)err;
    PLAN_PREDICT(p, iter_s, to_us(e->t_iter_s));
    PLAN_PREDICT(p, fwd_s, to_us(e->t_fwd_s));
    PLAN_PREDICT(p, bwd_s, to_us(e->t_bwd_s));
    PLAN_PREDICT(p, gpu_optim_s, to_us(e->t_gpu_optim_s));
    PLAN_PREDICT(p, cpu_optim_s, to_us(e->t_cpu_optim_s));
    PLAN_PREDICT(p, peak_bytes, e->peak_bytes);
    PLAN_PREDICT(p, host_bytes, e->host_bytes);
    return MS_OK;
}

/* The search's strict minimum beside its pick, so that a plan shows what the tie band
 * (tie_tol) traded: knob fastest (n_persist,n_buffer,n_swap,n_checkpoint) and its
 * predicted iteration (fastest_iter_s). Informational: lowering reads neither. */
static ms_status record_fastest(plan_t *p, const ptc_search_result *r)
{
    char b[64];
    snprintf(b, sizeof b, "%d,%d,%d,%d", r->fastest.n_persist, r->fastest.n_buffer,
             r->fastest.n_swap, r->fastest.n_ckpt);
    ms_status st = plan_set_knob(p, "fastest", b);
    PLAN_PREDICT(p, fastest_iter_s, to_us(r->fastest_est.t_iter_s));
    return st;
}

ms_status pol_protrain_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                            plan_t **out, ms_error *err)
{
    *out = NULL;
    if (!m) return ms_fail(err, MS_ERR_INVALID, "policy protrain needs a machine profile");
    lc_knobs k;
    ptc_search_opts so;
    ms_status st = pt_protrain_knobs(o, &k, err);
    if (!st) st = pt_search_opts_from(o, t, m, &so, err);
    if (st) return st;
    ptc_model *M;
    if ((st = pt_model_new(t, m, &k, &so, &M, err))) return st;
    ptc_search_result r;
    memset(&r, 0, sizeof r);
    ptc_config cfg;
    ptc_estimate est;
    int feasible;
    if (pt_config_given(&k)) {
        cfg = (ptc_config){k.n_persist, k.n_buffer, k.n_swap, k.n_ckpt};
        st = ptc_estimate_config(M, &cfg, &est, err);
        if (!st && !est.valid)
            st = ms_fail(err, MS_ERR_INVALID, "n_buffer=%d is too few buffers for this model",
                         cfg.n_buffer);
        uint64_t cap = so.capacity_bytes ? so.capacity_bytes : machine_usable_bytes(m);
        cap = (uint64_t)((double)cap * (1 - so.mem_margin));
        feasible = est.peak_bytes <= cap &&
                   (!so.host_capacity_bytes || est.host_bytes <= so.host_capacity_bytes);
    } else {
        st = ptc_search(M, &so, &r, err);
        feasible = r.found;
        cfg = r.found ? r.best : r.closest;
        est = r.found ? r.best_est : r.closest_est;
    }
    plan_t *p = NULL;
    if (!st) st = pol_plan_new("protrain", o, &p, err);
    if (!st) {
        k = pt_config_knobs(M, &cfg, &est);
        st = lc_knobs_to_plan(&k, p, err);
    }
    if (!st) st = pt_record_estimate(p, &est, err);
    char b[64];
    if (!st) {
        snprintf(b, sizeof b, "%zu", ptc_layout(M)->n_chunks);
        st = plan_set_knob(p, "n_chunk", b);
        snprintf(b, sizeof b, "%d", ptc_layout(M)->n_blocks);
        if (!st) st = plan_set_knob(p, "n_block", b);
        if (!st) PLAN_PREDICT(p, feasible, feasible);
        snprintf(b, sizeof b, "%zu", r.evaluated);
        if (!st) st = plan_set_knob(p, "search_evaluated", b);
        if (!st && r.found) st = record_fastest(p, &r);
        if (st) st = ms_fail(err, st, "out of memory");
    }
    ptc_search_result_clear(&r);
    ptc_model_free(M);
    if (st) {
        plan_free(p);
        return st;
    }
    *out = p;
    return MS_OK;
}

static const knobtab *const PT_KNOBS[] = { &lc_marker_table, &lc_knob_table,
                                           &pt_search_knob_table, &pol_common_knob_table, NULL };

const pol_policy pol_protrain = {
    "protrain",
    "chunked model states (persistent chunks, prefetch buffers, host Adam overlapped with the "
    "backward) and per-block swap/checkpoint, chosen by a cost-model search",
    "ProTrain (Yang et al., automatic memory management for LLM training), Sec. 3 and App. A",
    &pt_search_knob_table,
    pol_protrain_plan,
    PT_KNOBS,
    POL_FORM_PLAIN,
    0,
    "chunks",
    memo_post_plan,
};

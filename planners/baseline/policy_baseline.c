/* policy_baseline.c — the baseline policies: keep-all, full-recompute and full-swap. Each
 * writes one plan entry per skeletal activation of a transformer layer (the tensors MEMO §3
 * calls skeletal); everything else keeps the plan's default (keep). Lowering
 * (planners/lower.c) turns the entries into frees, replays and copies. Registered in
 * planners/policy.c; described in docs/POLICIES.md. */
#include "planners/baseline/policy_baseline.h"

#include <stdlib.h>

#include "planners/knob.h"
#include "planners/lower.h"
#include "planners/memo/policy_memo.h"

/* Shared driver: lists the skeletal tensors, asks `decide` for each, records the answer. */
typedef void (*decide_fn)(const pol_skel *s, const pol_opts *o, plan_decision *d,
                          double *alpha);

static void decide_keep(const pol_skel *s, const pol_opts *o, plan_decision *d, double *alpha);

static ms_status run_baseline(const char *name, decide_fn decide, const trace_t *t,
                              const pol_opts *o, plan_t **out, ms_error *err)
{
    *out = NULL;
    plan_t *p;
    ms_status st = pol_plan_new(name, o, &p, err);
    if (st != MS_OK) return st;
    pol_skel *sk;
    size_t n;
    st = pol_skeletal(t, &sk, &n, err);
    if (st == MS_OK && !n && decide != decide_keep) { /* say so rather than plan keep-all */
        free(sk);
        plan_free(p);
        return pol_no_skeletal(name, err);
    }
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        plan_decision d = PD_KEEP;
        double alpha = 0;
        decide(&sk[i], o, &d, &alpha);
        st = plan_set_tensor(p, sk[i].id, d, alpha);
        if (st != MS_OK) st = ms_fail(err, st, "policy %s: cannot record tensor %llu", name,
                                      (unsigned long long)sk[i].id);
    }
    free(sk);
    if (st != MS_OK) {
        plan_free(p);
        return st;
    }
    plan_sort(p);
    *out = p;
    return MS_OK;
}

static void decide_keep(const pol_skel *s, const pol_opts *o, plan_decision *d, double *alpha)
{
    (void)s, (void)o;
    *d = PD_KEEP;
    *alpha = 0;
}

/* Megatron-LM "full" recomputation (uniform, one layer per checkpoint): only the layer input
 * is kept; the whole layer forward is replayed before the layer's backward. */
static void decide_recompute(const pol_skel *s, const pol_opts *o, plan_decision *d,
                             double *alpha)
{
    (void)o;
    *d = s->is_input ? PD_KEEP : PD_RECOMPUTE;
    *alpha = 0;
}

/* Every skeletal activation swapped whole. An alpha override applies to the tensors other
 * than the layer input and the attention output, which stay whole as in MEMO §4.1: the layer
 * input cannot be recomputed inside its layer and the attention output is the costliest
 * tensor to recompute. */
static void decide_swap(const pol_skel *s, const pol_opts *o, plan_decision *d, double *alpha)
{
    *d = PD_SWAP;
    *alpha = 1.0;
    if (o && o->alpha >= 0 && !s->is_input && !s->is_attn_out && !s->is_whole) *alpha = o->alpha;
}

static ms_status plan_keep_all(const trace_t *t, const machine_t *m, const pol_opts *o,
                               plan_t **out, ms_error *err)
{
    (void)m;
    return run_baseline("keep-all", decide_keep, t, o, out, err);
}

/* Both recomputations it models free each dropped tensor at its last forward use (lowering
 * knob drop_at=use): PyTorch's non-reentrant checkpoint saves nothing in the forward and
 * Megatron-LM's CheckpointFunction runs it under no_grad. Rounding buffers hold a layer's
 * tensors in one block, so with them (or a drop_at the user gave) the knob is left alone. */
static ms_status plan_full_recompute(const trace_t *t, const machine_t *m, const pol_opts *o,
                                     plan_t **out, ms_error *err)
{
    (void)m;
    lower_knobs lk;
    ms_error e1;
    ms_status st = knob_from_opts(&lower_knob_table, o, &lk, &e1);
    if (st != MS_OK) return ms_fail(err, st, "policy full-recompute: %s", e1.msg);
    st = run_baseline("full-recompute", decide_recompute, t, o, out, err);
    if (st != MS_OK || knobtab_given(&lower_knob_table, &lk, &lk.drop_at) ||
        lk.rounding_buffers)
        return st;
    st = plan_set_knob(*out, "drop_at", "use");
    if (st != MS_OK) {
        plan_free(*out);
        *out = NULL;
        return ms_fail(err, st, "policy full-recompute: out of memory");
    }
    return MS_OK;
}

static ms_status plan_full_swap(const trace_t *t, const machine_t *m, const pol_opts *o,
                                plan_t **out, ms_error *err)
{
    (void)m;
    return run_baseline("full-swap", decide_swap, t, o, out, err);
}

/* keep-all, full-recompute and full-swap: the lowering's knobs and memory_plan=1's */
static const knobtab *const BASE_KNOBS[] = { &pol_common_knob_table, &lower_knob_table, NULL };

const pol_policy pol_keep_all = {
    "keep-all",
    "every activation stays on the GPU from its forward to its backward",
    "PyTorch eager training without checkpointing (MEMO §5 w/o recomputation)",
    "",
    plan_keep_all,
    BASE_KNOBS,
    POL_FORM_PLAIN,
    0,
    NULL,
    memo_post_plan,
};

const pol_policy pol_full_recompute = {
    "full-recompute",
    "keep each layer's input; recompute the layer's other skeletal activations before its "
    "backward",
    "Megatron-LM full activation recomputation (Korthikanti et al., MLSys 2023; MEMO §5.3.2)",
    "",
    plan_full_recompute,
    BASE_KNOBS,
    POL_FORM_PLAIN,
    0,
    NULL,
    memo_post_plan,
};

const pol_policy pol_full_swap = {
    "full-swap",
    "offload every skeletal activation after its layer's forward; prefetch it during the "
    "next-later layer's backward",
    "MEMO full swapping (Zhao et al., SIGMOD 2025, §4.3.4 Fig. 10, §5.3.2)",
    "alpha (pol_opts.alpha): token fraction swapped for tensors other than .input/.attn_out",
    plan_full_swap,
    BASE_KNOBS,
    POL_FORM_PLAIN,
    1,
    NULL,
    memo_post_plan,
};

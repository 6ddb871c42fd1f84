/* policy_toy.c — the toy policy of policy_toy.h: recompute the skeletal activations of every
 * toy_every-th layer (its own knob), keep the rest, and hand the plan to the per-tensor
 * lowering. Only the contracts of planners/ are used: the registry finds it by its row. */
#include "tests/toy_policy/policy_toy.h"

#include <stdlib.h>

#include "planners/knob.h"
#include "planners/lower.h"

typedef struct toy_knobs {
    int every;
    uint64_t given;
} toy_knobs;
static const knobtab_row toy_rows[] = {
    KNOB_INT("toy_every", toy_knobs, every, "2", 1, 1024,
             "recompute the skeletal activations of every N-th layer (layer % N == 0)", ""),
};
static const knobtab toy_knob_table = KNOBTAB("toy", toy_rows, KNOBTAB_MSG_KNOB, toy_knobs,
                                              given);

static ms_status plan_toy(const trace_t *t, const machine_t *m, const pol_opts *o,
                          plan_t **out, ms_error *err)
{
    (void)m;
    toy_knobs k;
    ms_status st = knob_from_opts(&toy_knob_table, o, &k, err);
    pol_skel *sk = NULL;
    size_t n = 0;
    if (st == MS_OK) st = pol_skeletal(t, &sk, &n, err);
    plan_t *p = NULL;
    if (st == MS_OK) st = pol_plan_new("toy", o, &p, err);
    for (size_t i = 0; st == MS_OK && i < n; i++)
        if (sk[i].layer % k.every == 0 && !sk[i].is_input)
            st = plan_set_tensor(p, sk[i].id, PD_RECOMPUTE, 0);
    free(sk);
    if (st != MS_OK) {
        plan_free(p);
        return st;
    }
    plan_sort(p);
    *out = p;
    return MS_OK;
}

static const knobtab *const TOY_KNOBS[] = { &toy_knob_table, &lower_knob_table, NULL };

const pol_policy pol_toy = {
    "toy",
    "recompute the skeletal activations of every toy_every-th layer, keep the others",
    "memsim's test of adding a policy (tests/toy_policy)",
    &toy_knob_table,
    plan_toy,
    TOY_KNOBS,
    POL_FORM_PLAIN,
    0,
    NULL,
    NULL,
};

/* knob.c — knob tables between plans or pol_opts and their typed structs (knob.h): the pairs
 * handed to knobtab_parse, and a struct written back as a plan's knob lines. Used by the
 * policies, the lowerings, the memory plan and the pipeline. */
#include "planners/knob.h"

#include <math.h>
#include <stdlib.h>

ms_status knob_from_plan(const knobtab *t, const plan_t *p, void *out, ms_error *err)
{
    size_t n = p ? p->n_knobs : 0;
    knobtab_pair *kv = n ? malloc(n * sizeof *kv) : NULL;
    if (n && !kv) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) kv[i] = (knobtab_pair){ p->knobs[i].key, p->knobs[i].value };
    ms_status st = knobtab_parse(t, kv, n, out, err);
    free(kv);
    return st;
}

ms_status knob_from_opts(const knobtab *t, const pol_opts *o, void *out, ms_error *err)
{
    size_t n = o ? o->n_knobs : 0;
    knobtab_pair *kv = n ? malloc(n * sizeof *kv) : NULL;
    if (n && !kv) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) kv[i] = (knobtab_pair){ o->knobs[i].key, o->knobs[i].value };
    ms_status st = knobtab_parse(t, kv, n, out, err);
    free(kv);
    return st;
}

ms_status knob_to_plan(const knobtab *t, const void *st, plan_t *p, ms_error *err)
{
    for (size_t i = 0; i < t->n; i++) {
        char v[128];
        if (!knobtab_format_row(&t->rows[i], st, v, sizeof v)) continue;
        ms_status s = plan_set_knob(p, t->rows[i].key, v);
        if (s != MS_OK)
            return ms_fail(err, s, "%s: cannot record knob %s=%s in the plan", t->name,
                           t->rows[i].key, v);
    }
    return MS_OK;
}

static const knobtab_row pred_rows[] = {
    KNOB_FLAG("feasible", knob_predictions, feasible, "1",
              "0: no configuration fit the planner's budget; the closest is planned", ""),
    KNOB_BYTES("pred_peak_bytes", knob_predictions, peak_bytes, "0", 0, HUGE_VAL,
               "predicted device peak", ""),
    KNOB_BYTES("pred_host_bytes", knob_predictions, host_bytes, "0", 0, HUGE_VAL,
               "predicted host memory", ""),
    KNOB_DBL("pred_iter_s", knob_predictions, iter_s, "0", -HUGE_VAL, HUGE_VAL,
             "predicted iteration time, seconds", ""),
    KNOB_DBL("est_go_cost_us", knob_predictions, go_cost_us, "0", -HUGE_VAL, HUGE_VAL,
             "time the host-written gradients add, microseconds", ""),
    KNOB_DBL("grad_gpu_frac", knob_predictions, grad_gpu_frac, "1", -HUGE_VAL, HUGE_VAL,
             "share of the gradient bytes kept on the GPU", ""),
};
const knobtab knob_predictions_table = KNOBTAB("planner predictions", pred_rows,
                                               KNOBTAB_MSG_PLAN, knob_predictions, given);

ms_status knob_predictions_of(const plan_t *p, knob_predictions *out, ms_error *err)
{
    return knob_from_plan(&knob_predictions_table, p, out, err);
}

int knob_predicted(const knob_predictions *k, const void *field)
{
    return knobtab_given(&knob_predictions_table, k, field);
}

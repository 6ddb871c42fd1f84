/* knob.c — knob tables between plans or pol_opts and their typed structs (knob.h): the pairs
 * handed to knobtab_parse, and a struct written back as a plan's knob lines. Used by the
 * policies, the lowerings, the memory plan and the pipeline. */
#include "planners/knob.h"

#include <stdlib.h>
#include <string.h>

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

ms_status knob_given_to_plan(const knobtab *t, const void *st, plan_t *p, ms_error *err)
{
    for (size_t i = 0; i < t->n; i++) {
        char v[128];
        const knobtab_row *r = &t->rows[i];
        if (!knobtab_given(t, st, (const char *)st + r->off) ||
            !knobtab_format_row(r, st, v, sizeof v))
            continue;
        ms_status s = plan_set_knob(p, r->key, v);
        if (s != MS_OK)
            return ms_fail(err, s, "%s: cannot record knob %s=%s in the plan", t->name,
                           r->key, v);
    }
    return MS_OK;
}

ms_status knob_predictions_of(const plan_t *p, knob_predictions *out, ms_error *err)
{
    (void)err;
    if (p) *out = p->pred;
    else {
        memset(out, 0, sizeof *out);
        knobtab_defaults(&plan_predictions_table, out);
    }
    return MS_OK;
}

int knob_predicted(const knob_predictions *k, const void *field)
{
    return knobtab_given(&plan_predictions_table, k, field);
}

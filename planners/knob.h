/* knob.h — knob tables (base/knobtab.h) read from where policy knobs live: a plan's knob
 * lines and the --knob options of pol_opts. The one place in planners/ that looks knobs up
 * by key; policies, lowerings and the memory plan read the typed structs these fill. */
#ifndef MEMSIM_KNOB_H
#define MEMSIM_KNOB_H

#include "planners/plan.h"
#include "planners/pol_opts.h"
#include "base/knobtab.h"

/* t's struct out from plan p's knobs (NULL p: the defaults). */
ms_status knob_from_plan(const knobtab *t, const plan_t *p, void *out, ms_error *err);
/* t's struct out from o's knobs, the last of a key given twice (NULL o: the defaults). */
ms_status knob_from_opts(const knobtab *t, const pol_opts *o, void *out, ms_error *err);

/* t's rows from struct st into plan p as knob lines, in table order (a key the plan has keeps
 * its place; knobtab_rec says which rows are written). Returns MS_ERR_INVALID when a value
 * is no valid knob value. */
ms_status knob_to_plan(const knobtab *t, const void *st, plan_t *p, ms_error *err);

/* A policy's decision for the knob at field f of struct st (a t struct): set, marked given,
 * so that knob_given_to_plan records it. */
#define KNOB_DECIDE(t, st, f, v) ((st)->f = (v), knobtab_mark_given((t), (st), &(st)->f))
/* The given rows of t's struct st into plan p as knob lines (as knob_to_plan, the others
 * left out): the decisions a policy made through KNOB_DECIDE. */
ms_status knob_given_to_plan(const knobtab *t, const void *st, plan_t *p, ms_error *err);

/* What a planner predicted, as its plan records it (plan_t.pred, the plan file's `predict`
 * lines): the pipeline, the search and the paper drivers read them without knowing which
 * planner made them. */
typedef plan_predictions knob_predictions;
/* p's predictions (NULL p: none made; feasible 1, grad_gpu_frac 1, the rest 0). */
ms_status knob_predictions_of(const plan_t *p, knob_predictions *out, ms_error *err);
/* 1 when the prediction at field (inside k) was made. */
int knob_predicted(const knob_predictions *k, const void *field);

#endif

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

/* What a planner predicted, as its plan records it (knob lines; planners write them, the
 * pipeline and the paper drivers print them without knowing which planner made them). */
typedef struct knob_predictions {
    int feasible;               /* 0: nothing fit the planner's budget (the closest planned) */
    uint64_t peak_bytes;        /* pred_peak_bytes: predicted device peak */
    uint64_t host_bytes;        /* pred_host_bytes: predicted host memory */
    double iter_s;              /* pred_iter_s: predicted iteration time */
    double go_cost_us;          /* est_go_cost_us: time the host-written gradients add */
    double grad_gpu_frac;       /* grad_gpu_frac: share of gradient bytes kept on the GPU */
    uint64_t given;
} knob_predictions;
extern const knobtab knob_predictions_table;
/* p's predictions (absent: feasible 1, the rest 0; grad_gpu_frac 1). */
ms_status knob_predictions_of(const plan_t *p, knob_predictions *out, ms_error *err);
/* 1 when the prediction at field (inside k) is in the plan. */
int knob_predicted(const knob_predictions *k, const void *field);

#endif

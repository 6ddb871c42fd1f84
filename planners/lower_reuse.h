/* lower_reuse.h — lowered schedules reused across the points of a sweep: a schedule lowered
 * for one trace and plan is kept as a template, with the sources of its numbers
 * (lower_src.h), and given to a later trace of the same structure under an equal plan by
 * re-binding its sizes and op times (lower_bind) instead of lowering again. Used by the
 * pipeline (sim/pipeline.c, pipe_policy.reuse), which `memsim sweep` gives one cache.
 *
 * The structure compared is everything the tensor lowering reads except the sizes and times
 * it only copies or scales: every record's kind, ids, names, classes, layers, phases, streams,
 * producers, inputs and outputs, marks and source lines, whether each size is zero and each
 * op's duration is unknown; the trace's meta lines but seq and batch; the whole plan but its
 * predictions; the whole machine profile; the lowering options. A template is kept only when
 * the lowering could name a source for every number of its schedule and re-binding it to
 * its own trace gives the schedule back bit for bit; the rounding buffers and swap_at=save,
 * whose shapes follow the sizes, and the other lowerings are lowered afresh every time. */
#ifndef MEMSIM_LOWER_REUSE_H
#define MEMSIM_LOWER_REUSE_H

#include "planners/lower.h"

typedef struct lreuse lreuse;

typedef struct lreuse_stats {
    uint64_t hits;           /* schedules re-bound from a template */
    uint64_t misses;         /* lowered afresh and kept as a template */
    uint64_t once;           /* lowered afresh, not reusable (see above) */
} lreuse_stats;

/* A cache of at most max_templates templates (0 or above 64: 16), the oldest replaced
 * first. NULL when out of memory. */
lreuse *lreuse_new(size_t max_templates);
void lreuse_free(lreuse *c);

/* lower_schedule(t, p, m, o, out, err), from a template when c holds one of t's structure
 * under p, m and o. *borrowed 1: *out is the template itself, re-bound for t, which the
 * caller reads and does not free, valid until the next call on c; 0: *out is the caller's.
 * With o->report or o->srcs asked for, or c NULL, it is lower_schedule itself. */
ms_status lreuse_lower(lreuse *c, const trace_t *t, const plan_t *p, const machine_t *m,
                       const lower_opts *o, schedule_t **out, int *borrowed, ms_error *err);

/* The point of a sweep that begins: trace t (its plans lowered next) stays as it is until
 * the next call, so that its records are compared with each template once, whatever the
 * number of plans; NULL (or a call with another trace) compares at every lowering. The
 * caller calls it again (with NULL at the latest) before t is freed or changed. */
void lreuse_point(lreuse *c, const trace_t *t);

void lreuse_get_stats(const lreuse *c, lreuse_stats *out);

#endif

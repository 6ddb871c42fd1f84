/* lower.h — lowering: turns a workload trace and a plan into the schedule both executors
 * run (planners/schedule.h). Keeps the trace's alloc/op/free program on the compute stream and
 * adds what the plan asks for: frees after a layer's forward and replays before its backward
 * (recompute), offload / prefetch on the copy streams with events (swap), token-wise partial
 * recomputation (swap with alpha < 1). Used by the memsim command, experiments, the runtime
 * and the tests; the rules are in docs/POLICIES.md. */
#ifndef MEMSIM_LOWER_H
#define MEMSIM_LOWER_H

#include "traces/machine.h"
#include "traces/trace.h"
#include "planners/plan.h"
#include "planners/schedule.h"

/* What lowering did (for tests, logs and `memsim plan --explain`). */
typedef struct lower_report {
    uint64_t actions, events;
    uint64_t dropped;        /* PD_RECOMPUTE tensors freed after their layer's forward */
    uint64_t rebuilt;        /* ... re-allocated and recomputed before their layer's backward */
    uint64_t swapped;        /* PD_SWAP tensors offloaded after their layer's forward */
    uint64_t prefetched;     /* ... brought back for their layer's backward */
    uint64_t recompute_ops;  /* COMPUTE actions with recompute = 1 */
    double recompute_us;     /* their total duration */
    uint64_t d2h_bytes, h2d_bytes;
    uint64_t ignored;        /* recompute/swap decisions on tensors that were not live at the
                                end of their layer's forward (nothing to save) */
    uint64_t unknown_ids;    /* plan entries naming tensors the trace never allocates */
} lower_report;

typedef struct lower_opts {
    int64_t iter_first;      /* first iteration (value of "mark iter") lowered; INT64_MIN:
                                from the start */
    int64_t iter_count;      /* iterations lowered from iter_first; <= 0: all. Records before
                                the first "mark iter" are always lowered. */
    int emit_marks;          /* 1: the trace's marks become MARK actions (default) */
    int prefetch_alloc_on_compute; /* 0: a prefetch allocates its block on the H2D stream
                                (default); 1: on the compute stream, just before the prefetch
                                is released (PyTorch code that allocates the destination on
                                the main stream and copies on a side stream) */
    int ignore_unknown_ids;  /* 0: a plan entry for a tensor the trace never allocates is
                                MS_ERR_INVALID (default); 1: counted in the report, ignored */
    lower_report *report;    /* filled when not NULL */
} lower_opts;

void lower_opts_default(lower_opts *o);

/* Lowers trace t under plan p (NULL: keep everything) for machine m. m is needed only for
 * ops without a duration, which get traces/roofline.h's kernel time. NULL o: defaults.
 * Deterministic: the same inputs give the same schedule, action for action. Errors name the
 * trace record: an op without a duration and no machine, a plan that cannot be lowered (a
 * recomputed tensor made outside its layer's forward, a tensor used while offloaded or
 * dropped, DHA decisions: MS_ERR_UNSUPPORTED for now). */
ms_status lower_schedule(const trace_t *t, const plan_t *p, const machine_t *m,
                         const lower_opts *o, schedule_t **out, ms_error *err);

#endif

/* lowerings.h — calling a lowering by the name a plan gives: what every lowering is given
 * (lower_opts) and reports (lower_report), the row it defines next to its code
 * (lower_backend), and lower_schedule, which looks the plan's lowering up and runs it. Used by every
 * caller that turns a trace and a plan into a schedule (the pipeline, the runtime, the
 * planners that lower to measure, the tests); the lowerings themselves are planners/lower.h
 * (per tensor), planners/protrain/lower_chunks.h and planners/memferry/lower_dha.h. */
#ifndef MEMSIM_LOWERINGS_H
#define MEMSIM_LOWERINGS_H

#include "traces/machine.h"
#include "traces/trace.h"
#include "planners/plan.h"
#include "planners/lower_src.h"
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
    /* MEMO variants (docs/MEMO.md) */
    uint64_t rb_blocks;      /* rounding-buffer blocks allocated (one per layer pass and one
                                per prefetch) */
    uint64_t rb_bytes;       /* size of one rounding buffer (0 without rounding_buffers) */
    uint64_t rb_offloads;    /* rounding buffers offloaded after their layer's forward */
    uint64_t idle_bytes;     /* the idle rounding buffer held for the whole schedule
                                (plan knob idle_buffer_bytes; 0: none) */
    uint64_t renamed;        /* re-allocations given a fresh id (memory_plan) */
    uint64_t overlapped;     /* ".ovl" collectives merged into their attention kernel */
    double overlap_hidden_us;/* their time hidden under the attention kernels */
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
    int overlap_ovl;         /* 1 (default): a collective whose name ends in ".ovl" (the CP
                                ring exchange) runs under the attention kernel that follows it
                                in the same layer and phase: one COMPUTE of
                                max(attention, ring) instead of two; 0: serialized. The plan
                                knob overlap_comm=0 also turns it off. */
    lower_report *report;    /* filled when not NULL */
    lower_srcs *srcs;        /* when not NULL (and empty: zeroed): the lowering says where each
                                action's numbers come from (lower_src.h), srcs->ok 1 when it
                                could for all of them; the tensor lowering can, the others
                                leave ok 0. The caller frees v and pool */
} lower_opts;

void lower_opts_default(lower_opts *o);

/* Lowers trace t under plan p (NULL: keep everything) for machine m with the lowering the
 * plan names (plan_t.lowering, looked up with lower_find; an unknown name is MS_ERR_INVALID
 * listing the known ones). m is needed only for ops without a duration, which get
 * traces/roofline.h's kernel time (the chunk and DHA lowerings need it always). NULL o:
 * defaults. Deterministic: the same inputs give the same schedule, action for action. Errors
 * name the trace record: an op without a duration and no machine, a plan that cannot be
 * lowered (a recomputed tensor made outside its layer's forward, a tensor used while
 * offloaded or dropped, DHA decisions under the tensor lowering: MS_ERR_UNSUPPORTED). */
ms_status lower_schedule(const trace_t *t, const plan_t *p, const machine_t *m,
                         const lower_opts *o, schedule_t **out, ms_error *err);

/* ---- the lowerings, by name ----
 * A lowering turns a trace and a plan into a schedule; each is one row, defined next to its
 * code (planners/lower.c's per-tensor lowering, planners/protrain/lower_chunks.c,
 * planners/memferry/lower_dha.c) and listed in lowerings.c's table, which lower_schedule
 * looks a plan's lowering up in, as alloc_new looks allocators up in memory/alloc.c. */
typedef ms_status (*lower_fn)(const trace_t *t, const plan_t *p, const machine_t *m,
                              const lower_opts *o, schedule_t **out, ms_error *err);

typedef struct lower_backend {
    const char *name;        /* what a plan's `lowering` line names, e.g. "chunks" */
    const char *desc;        /* one line */
    lower_fn lower;
    int rounding_buffers;    /* 1: its plans may put members in MEMO's rounding buffers
                                (lower_rb_map_new looks for them) */
} lower_backend;

/* The rows in table order ("tensor", "chunks", "dha"). */
const lower_backend *const *lower_registry(size_t *n);
/* NULL if no lowering has that name. */
const lower_backend *lower_find(const char *name);
#endif

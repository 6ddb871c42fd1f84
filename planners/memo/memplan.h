/* memplan.h — MEMO's bi-level static memory plan (Zhao et al., SIGMOD 2025, §4.2) over a
 * lowered schedule: every device allocation the executor will make gets an offset in one
 * arena. Level 1 solves offline dynamic storage allocation (memory/dsa.h) for the transient
 * tensors of one transformer layer's forward section and of one layer's backward section (all
 * layers with the same request sequence share one solution); level 2 solves the whole
 * schedule with each layer section replaced by one pseudo block of its level-1 peak, plus
 * every tensor that lives across sections. A tensor of a layer section is placed at its pseudo
 * block's offset plus its level-1 offset. The result is checked (no two tensors that can be
 * live at the same time share bytes) before it is returned. Used by the MEMO policies
 * (planners/memo/policy_memo.c), which store the offsets in the plan for the static arena
 * (memory/alloc_static.c); tests/test_memplan.c checks it. Details: docs/MEMO.md. */
#ifndef MEMSIM_MEMPLAN_H
#define MEMSIM_MEMPLAN_H

#include "planners/plan.h"
#include "planners/schedule.h"

typedef struct memplan_opts {
    double level1_time_s;    /* DSA effort per level-1 instance (deterministic budget; 0.5) */
    double level2_time_s;    /* DSA effort for the level-2 instance (3) */
    unsigned methods;        /* dsa_method flags (DSA_AUTO) */
    uint64_t align_bytes;    /* sizes rounded up to, offsets multiples of (512, PyTorch's
                                kMinBlockSize) */
    int strict_layers;       /* 1: all layer sections of a phase must make the same requests;
                                0 (default): distinct request patterns are solved apart */
    size_t max_patterns;     /* more distinct layer-section patterns is an error (16) */
    int single_level;        /* 1: one DSA over every tensor (the reference for tests) */
} memplan_opts;

void memplan_opts_default(memplan_opts *o);

typedef struct memplan_report {
    size_t tensors;                 /* planned allocations (ALLOCs of more than 0 bytes) */
    size_t sections;                /* layer sections (forward and backward) with transients */
    size_t patterns;                /* distinct level-1 instances solved */
    size_t level1_buffers;          /* buffers over all level-1 instances */
    uint64_t level1_fwd_peak_bytes; /* largest level-1 peak of a forward section */
    uint64_t level1_bwd_peak_bytes; /* ... of a backward section */
    uint64_t level1_fwd_load_bytes; /* their LOADs */
    uint64_t level1_bwd_load_bytes;
    int level1_proven;              /* every level-1 peak proven minimal */
    size_t level2_buffers;
    uint64_t level2_load_bytes, level2_peak_bytes;
    int level2_proven;
    uint64_t load_bytes;            /* LOAD of every tensor with its own lifetime */
    uint64_t peak_bytes;            /* the arena: highest offset + size */
    double gap;                     /* (peak - LOAD) / LOAD */
    double level1_s, level2_s;      /* wall clock, for reports only */
} memplan_report;

typedef struct memplan_result {
    uint64_t *ids;                  /* schedule tensor ids, sorted */
    uint64_t *offsets;              /* offsets[i] for ids[i] */
    size_t n;
    uint64_t arena_bytes;           /* peak */
} memplan_result;

void memplan_result_free(memplan_result *r); /* frees the arrays; NULL ok */

/* Plans the schedule. Lifetimes are positions in program order as the compute stream sees
 * them: an action on a copy stream may run later than its position, so its lifetime extends
 * from the compute position it waited for to the first compute WAIT that follows it
 * (see docs/MEMO.md). Errors (MS_ERR_INVALID, with the action index): a tensor id allocated
 * twice (lower with memory_plan=1), layer sections that differ when strict_layers is set or
 * more patterns than max_patterns, a plan that fails the check (a bug). rep may be NULL. */
ms_status memplan_schedule(const schedule_t *s, const memplan_opts *o, memplan_result *out,
                           memplan_report *rep, ms_error *err);

/* Checks a result against the schedule on its own: every planned tensor has an offset, and no
 * two tensors whose (conservative) lifetimes overlap share bytes. *peak may be NULL. */
ms_status memplan_check(const schedule_t *s, const memplan_result *r, uint64_t align_bytes,
                        uint64_t *peak_bytes, ms_error *err);

/* A conflict memplan_check_offsets found: tensor b, allocated at schedule action b_action,
 * takes bytes [b_lo, b_hi) of the arena while tensor a (allocated at a_action) holds
 * [a_lo, a_hi). */
typedef struct memplan_overlap {
    uint64_t a, a_lo, a_hi;
    size_t a_action;
    uint64_t b, b_lo, b_hi;
    size_t b_action;
} memplan_overlap;

/* Checks static offsets given by hand (a plan file's `offset` lines: ids sorted, offsets[i]
 * for ids[i]) against the schedule with memplan_schedule's conservative lifetimes, as its own
 * result is checked: no two tensors with offsets that can be live at the same time share
 * bytes. Tensors without an offset are not planned (the static arena's fallback serves them);
 * an id allocated more than once is checked at each allocation. MS_ERR_INVALID on the first
 * conflict in program order (*ov filled when not NULL), naming both tensors. */
ms_status memplan_check_offsets(const schedule_t *s, const uint64_t *ids,
                                const uint64_t *offsets, size_t n, memplan_overlap *ov,
                                ms_error *err);

/* Writes the offsets into the plan (plan_set_offset) and the arena size: arena_bytes when it
 * fits capacity_bytes (0: no limit), else 0 so that the static arena grows on demand and the
 * run reports OOM where the plan crosses the device's capacity. */
ms_status memplan_apply(const memplan_result *r, plan_t *p, uint64_t capacity_bytes,
                        ms_error *err);

#endif

/* lower_src.h — where the numbers of a lowered schedule come from: for each action, the trace
 * record whose tensor gave its bytes and the trace ops whose times gave its duration, so that
 * a schedule lowered for one trace can take the sizes and times of another trace of the same
 * structure (planners/lower_reuse.h) without being lowered again. Filled by the tensor
 * lowering (planners/lower.c, lower_replay.c) when lower_opts.srcs asks for it; read by
 * lower_bind (planners/lower.h). Plain data: no source file of its own. */
#ifndef MEMSIM_LOWER_SRC_H
#define MEMSIM_LOWER_SRC_H

#include <stddef.h>
#include <stdint.h>

typedef enum lower_src_rule {
    LSRC_NONE = 0,   /* not given: the number must be 0, else the schedule cannot be re-bound */
    LSRC_CONST,      /* the number does not depend on the trace's sizes or times (a knob's) */
    LSRC_TENSOR,     /* bytes: the tensor of record rec, scaled by frac (lower_scaled_bytes) */
    LSRC_HOST,       /* bytes: the pinned host buffer of that scaled size (lower_host_size) */
    LSRC_OPS         /* dur_us: the ops at ops[0..n_ops) in the pool, times dur_frac: the
                        largest of the ".ovl" collectives merged into the last one and the
                        last one's own, when it is an attention kernel that absorbed them
                        (sched_action.ovl), else the last one's own */
} lower_src_rule;

typedef struct lower_src {
    uint8_t bytes;           /* lower_src_rule of sched_action.bytes */
    uint8_t dur;             /* lower_src_rule of sched_action.dur_us */
    uint32_t rec;            /* LSRC_TENSOR / LSRC_HOST: the record allocating the tensor */
    double frac;             /* ... its token fraction (>= 1: the whole tensor) */
    uint32_t ops, n_ops;     /* LSRC_OPS: record indices at lower_srcs.pool[ops..ops+n_ops) */
    double dur_frac;         /* ... each op's time multiplied by it (1: the whole op) */
} lower_src;

/* A source of lower_srcs.bound: one number of action act that the trace gives. */
typedef struct lower_bound {
    uint32_t act;            /* the action */
    uint32_t at;             /* LSRC_TENSOR / LSRC_HOST: lower_src.rec; LSRC_OPS: .ops */
    uint32_t n_ops;          /* LSRC_OPS: lower_src.n_ops */
    uint8_t rule;            /* LSRC_TENSOR, LSRC_HOST or LSRC_OPS */
    double frac;             /* lower_src.frac, or for LSRC_OPS .dur_frac */
} lower_bound;

typedef struct lower_srcs {
    lower_src *v;            /* one per action, in program order (n == the schedule's count) */
    size_t n, cap;
    lower_bound *bound;      /* lower_srcs_pack: the sources of v that name the trace, the
                                bytes' (n_bound_bytes of them) then the durations', each in
                                program order; NULL: not packed */
    size_t n_bound_bytes, n_bound;
    int bound_nums;          /* lower_srcs_fit: each of bound names the number its action's
                                kind has (sched_num: an ALLOC's, copy's or HOST_ALLOC's bytes,
                                a COMPUTE's or HOST_COMPUTE's time), so that a binding may
                                write them into the schedule's index (sched_nums_edit) */
    uint32_t *pool;          /* record indices of ops, for LSRC_OPS */
    size_t n_pool, cap_pool;
    int ok;                  /* 1: every number of the schedule has its source; 0: the
                                lowering cannot say (rounding buffers, swap_at=save, another
                                lowering, out of memory) and the schedule is used once */
    int host_round;          /* lower_host_round and granule of LSRC_HOST (the plan's knobs) */
    uint64_t host_granule;
} lower_srcs;

#endif

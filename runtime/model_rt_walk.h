/* model_rt_walk.h — the one-stream schedule walker: runs a lowered schedule whose actions are
 * all on the compute stream (keep-all and recomputation plans) in program order on one CUDA
 * stream with the op dispatcher (model_rt_ops.h), timing every compute action and iteration.
 * Implemented by runtime/model_rt_walk.c; used by runtime/rt_run.c and the tests. */
#ifndef MEMSIM_MODEL_RT_WALK_H
#define MEMSIM_MODEL_RT_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "memory/alloc.h"
#include "planners/plan.h"
#include "planners/schedule.h"
#include "runtime/kernels.h"
#include "runtime/model_rt_ops.h"
#include "runtime/rt_check.h"
#include "runtime/rt_exec.h"
#include "traces/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrt_op_time {
    size_t action;
    int64_t op;
    double req_us, meas_us;   /* the schedule's (modelled) and the measured duration */
    int recompute;
} mrt_op_time;

typedef struct mrt_sched_result {
    int n_iter;
    double iter_ms[MRT_MAX_ITERS];      /* measured from each `mark iter` to the next / end */
    double nominal_ms[MRT_MAX_ITERS];   /* sum of the compute actions' dur_us */
    float loss[MRT_MAX_ITERS];
    double setup_ms;                    /* before the first iteration */
    mrt_op_time *ops;                   /* every compute action, in order */
    size_t n_ops;
    alloc_stats astats;
} mrt_sched_result;

/* Executes a one-stream schedule (every action on the compute stream: keep-all and
 * recomputation plans) with real kernels: allocations through allocator `allocator` over
 * backend be (the executor's allocator code), each compute action through the dispatcher,
 * events around every compute action and at every `mark iter`. RT_ERR_INVALID for a schedule
 * with copies or other streams (those run through the executor; docs/RUNTIME.md). Device
 * memory is given back before it returns. adam: the optimizer's knobs (NULL: the tiny model's,
 * lr 2e-3 without weight decay; larger models want less). */
rt_status mrt_sched_run(const schedule_t *s, const trace_t *t, const mb_backend *be,
                        const char *allocator, const alloc_config *cfg, uint64_t seed,
                        const kn_adamw_cfg *adam, mrt_sched_result *r, ms_error *err);
void mrt_sched_result_release(mrt_sched_result *r);

#ifdef __cplusplus
}
#endif

#endif

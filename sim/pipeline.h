/* pipeline.h — the end-to-end path the memsim command and the experiments share: obtain a
 * workload trace (generate it for a model, or load a file), run a policy's planner (or load a
 * plan file), lower trace + plan to a schedule, execute it in the simulator, and fill the
 * results with MFU and TGS (MEMO §5.1). */
#ifndef MEMSIM_PIPELINE_H
#define MEMSIM_PIPELINE_H

#include "planners/lower_reuse.h"
#include "planners/plan.h"
#include "planners/policy.h"
#include "sim/results.h"
#include "traces/gen_reuse.h"
#include "traces/machine.h"
#include "traces/trace.h"

#define PIPE_MAX_KNOBS 32

typedef struct pipe_workload {
    const char *model;        /* registry name or dims:L,H,A,F,V (when no trace_path) */
    uint64_t seq, batch;      /* 0: the model's default sequence; batch 0 = 1 */
    int tp, cp, dp;           /* parallel degrees, 0 = 1 */
    int ep;                   /* expert-parallel degree (divides dp), 0 = 1 */
    int iterations;           /* 0 = generator default (2) */
    const char *trace_path;   /* a workload trace file instead of generating one */
    pol_knob gen_knobs[PIPE_MAX_KNOBS]; /* generator knobs (gen_config_set), e.g.
                                           framework=megatron */
    size_t n_gen_knobs;
    greuse *gen_reuse;        /* generated traces made after templates of the same structure
                                 (traces/gen_reuse.h): `memsim sweep`'s; NULL: generated
                                 afresh each time. The traces are the same either way */
} pipe_workload;

typedef struct pipe_policy {
    const char *policy;       /* registry name (ignored when plan_path is given) */
    const char *plan_path;    /* a plan file made by `memsim plan` (possibly edited) */
    const char *allocator;    /* override the plan's allocator; NULL: keep */
    alloc_config alloc_cfg;   /* allocator knobs (alloc_config_default unless changed) */
    int alloc_cfg_set;        /* 1: alloc_cfg overrides the plan's knobs */
    double alpha;             /* < 0: the policy decides */
    pol_knob knobs[PIPE_MAX_KNOBS];
    size_t n_knobs;
    /* how the executor issues the program (sim/exec.h): 0 = allocator calls at stream time
     * (default); N > 0 = a host thread at most N compute actions ahead of the GPU;
     * SIM_ISSUE_UNBOUNDED = no bound; issue_us = its cost per issued GPU action */
    int issue_ahead;
    double issue_us;
    int ckpt_host_measured;   /* sim_opts.ckpt_host_measured (`--ckpt-host measured`) */
    lreuse *reuse;            /* schedules re-bound from templates of the same structure
                                 (planners/lower_reuse.h): `memsim sweep`'s; NULL: lowered
                                 afresh each time. The outputs are the same either way */
} pipe_policy;

typedef struct pipe_outputs {
    const char *timeline_path;  /* Chrome-trace JSON */
    const char *memcsv_path;    /* memory time series CSV */
    const char *intervals_path; /* stream intervals CSV for the timeline plot */
    const char *plan_path;      /* write the plan used */
    const char *schedule_path;  /* write the schedule dump */
    ms_out *timeline_out;       /* instead of timeline_path: events into this open file as
                                   process timeline_pid (sim_opts) */
    int timeline_pid;
    const char *timeline_process;
    int *timeline_first;
} pipe_outputs;

void pipe_workload_default(pipe_workload *w);
void pipe_policy_default(pipe_policy *p);

/* The trace of the workload: loaded from trace_path or generated for the model on m. */
ms_status pipe_trace(const pipe_workload *w, const machine_t *m, trace_t **out, ms_error *err);
/* The same, generated in the form a policy plans (pol_form: the ZeRO-Offload form for
 * zero-offload and the MemFerry policies) unless w sets the generator's offload knob; a
 * trace file is loaded as it is. */
ms_status pipe_trace_for(const pipe_workload *w, const machine_t *m, pol_form form,
                         trace_t **out, ms_error *err);
/* 1 when w fixes the trace's form itself (a trace file, or --gen offload=...): the policies'
 * forms then do not apply. */
int pipe_form_set(const pipe_workload *w);

/* Makes the plan: loads plan_path or runs the policy; applies allocator overrides. */
ms_status pipe_plan(const trace_t *t, const machine_t *m, const pipe_policy *p, plan_t **out,
                    ms_error *err);

/* Lowers, executes and fills r (identification fields, MFU, TGS included). OOM and OOHM are
 * results (r->status), not errors. */
ms_status pipe_simulate(const trace_t *t, const machine_t *m, const plan_t *plan,
                        const pipe_outputs *out, sim_result *r, ms_error *err);
/* The same with the executor knobs of p (issue_ahead, issue_us); p NULL: defaults. */
ms_status pipe_simulate_with(const trace_t *t, const machine_t *m, const plan_t *plan,
                             const pipe_outputs *out, const pipe_policy *p, sim_result *r,
                             ms_error *err);

/* The host time per kernel a PyTorch eager program that gives kernel times but no host
 * times (memsim.capture on a GPU without host_timing) is issued at: the profile's host.eager_kernel_us, as a generated hf
 * program's ops carry it (docs/SIMULATOR.md, "Host times"); 0 for every other trace. */
double pipe_eager_host_us(const trace_t *t, const machine_t *m);

/* Plan + simulate in one call. */
ms_status pipe_run(const trace_t *t, const machine_t *m, const pipe_policy *p,
                   const pipe_outputs *out, sim_result *r, ms_error *err);

#endif

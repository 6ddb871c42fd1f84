/* exec.h — the simulator's schedule executor: runs a lowered schedule on the simulated
 * machine (compute stream, D2H and H2D copy engines sharing one host link max-min fairly,
 * host CPU, host memory) with a real allocator over the simulated memory backend; optionally
 * with the host thread that issues the program (allocator calls at issue time, bounded
 * run-ahead, deferred frees of blocks other streams use); a kernel waits for the host's
 * issue where the trace's ops give host times (trace_op.host_us). Deterministic: simulated
 * time only, no wall clock. Used by the memsim command, experiments and the validation
 * driver. */
#ifndef MEMSIM_EXEC_H
#define MEMSIM_EXEC_H

#include "traces/machine.h"
#include "planners/schedule.h"
#include "memory/alloc.h"
#include "sim/results.h"

/* sim_opts.issue_ahead: the host thread is never held back by the GPU's progress. */
#define SIM_ISSUE_UNBOUNDED (-1)
/* sim_opts.issue_us default: host time to issue one GPU action (assumed: a CUDA launch or
 * event call costs 2-5 us of CPU time; not measured). */
#define SIM_ISSUE_US_DEFAULT 3.0

typedef struct sim_opts {
    const char *allocator;        /* registry name */
    const alloc_config *alloc_cfg;/* NULL: defaults */
    uint64_t host_capacity_bytes; /* this GPU's share of host memory; 0: node / node_gpus */
    int host_sharers;             /* GPUs whose offloads share the node's host memory (>=1) */
    const char *timeline_path;    /* Chrome-trace JSON, or NULL */
    /* Instead of timeline_path: the run's events go into this open Chrome-trace file as
     * process timeline_pid named timeline_process (compare puts one process per policy in
     * one file); *timeline_first is 1 before the file's first event. */
    ms_out *timeline_out;
    int timeline_pid;
    const char *timeline_process;
    int *timeline_first;
    const char *memcsv_path;      /* memory time series CSV, or NULL */
    const char *intervals_path;   /* lane,start_us,end_us,kind CSV for plots/timeline.gp, or NULL */
    const trace_t *trace;         /* for op names in the timeline (may be NULL) */
    /* The host issue model (docs/SIMULATOR.md, "Host issue model"). 0 (default): allocator
     * calls happen when a stream reaches them. N > 0: one host thread issues the program in
     * order, runs ALLOC / FREE at issue time and waits while more than N compute actions are
     * issued but not finished; SIM_ISSUE_UNBOUNDED (any negative value): it never waits
     * for the GPU's progress. */
    int issue_ahead;
    double issue_us;              /* host time per issued COMPUTE / COPY / HOST_COMPUTE /
                                     RECORD / WAIT in the issue model (default
                                     SIM_ISSUE_US_DEFAULT; <= 0: free) */
    /* 1: checkpointing's host cost per layer as a captured trace measured it on its own
     * block (meta captured.ckpt_*_layer_us; sim/exec_fw.h), where it has it; 0 (default):
     * the machine profile's host.ckpt_* and host.recompute_layer_us */
    int ckpt_host_measured;
    /* > 0: the trace gives no host times and is a PyTorch eager program (a capture without
     * host timing): each compute op with a kernel time takes this much host time to issue,
     * as the generator's hf programs do (the profile's host.eager_kernel_us; the pipeline
     * decides, sim/pipeline.c); 0 (default): no host modelled for such a trace */
    double eager_host_us;
    /* The power limit's clock (sim/power.h; docs/SIMULATOR.md, "Power limit"), one entry per
     * schedule action, or NULL: dur_scale multiplies a COMPUTE action's dur_us (1: the
     * clock its time was measured at), and start_us receives the simulated time each
     * COMPUTE action starts at (other entries are left as they are). */
    const double *dur_scale;
    double *start_us;
} sim_opts;

void sim_opts_default(sim_opts *o);

/* Runs s on machine m. An OOM or OOHM is a result (r->status), not an error; errors are
 * invalid schedules or I/O failures writing the optional outputs. Fills all of r except the
 * identification fields (policy, model, ...) and MFU, which the caller knows. */
ms_status sim_execute(const schedule_t *s, const machine_t *m, const sim_opts *o,
                      sim_result *r, ms_error *err);

#endif

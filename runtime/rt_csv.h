/* rt_csv.h — the results CSV of `memsim run` (runtime/rt_csv.c): its header, one run's row
 * (one GPU's, or one rank's of a run on several GPUs), and the cells the runtime's CSV files
 * share. Used by runtime/rt_run.c. */
#ifndef MEMSIM_RT_CSV_H
#define MEMSIM_RT_CSV_H

#include <stdio.h>

#include "runtime/rt_exec.h"
#include "traces/machine.h"

/* What a row takes beside the run's result: how it was issued and what it achieved. */
typedef struct rt_csv_run {
    int per_op, max_ahead, alloc_sync;
    const char *executor;    /* "gpu", "gpu-one-stream" or "gpu-nccl" */
    double mfu, tgs, flops;
} rt_csv_run;

/* The header line (newline included); with_rank: the columns rank and world after it. */
void rt_csv_header(FILE *f, int with_rank);
/* One row, without its newline. device: the GPU's name. */
void rt_csv_row(FILE *f, const rt_csv_run *x, const char *device, const machine_t *m,
                const plan_t *plan, const trace_t *t, const rt_exec_result *r);
/* A number cell with the comma before it (a string cell: base/util.h's ms_csv_str). */
void rt_csv_dbl(FILE *f, double v);
void rt_csv_u64(FILE *f, uint64_t v);

#endif

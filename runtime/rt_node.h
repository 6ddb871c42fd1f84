/* rt_node.h — one rank of `memsim run` on several GPUs of one node: its set-up once the trace
 * is known (the layout from the trace's jobview, NCCL loaded, the trace's collectives
 * classified, one communicator per group the trace uses, made from the id its first rank
 * writes to the exchange files), a watcher that ends the rank when another one stops, the
 * executor's collective hooks, and the results: every rank's written to the exchange files,
 * gathered by rank 0, which prints the table of ranks and the node's shared figures. C over
 * NCCL and CUDA's runtime API (the calling thread's current device); used by
 * runtime/rt_run.c. */
#ifndef MEMSIM_RT_NODE_H
#define MEMSIM_RT_NODE_H

#include <stdio.h>

#include "runtime/rt_coll.h"
#include "runtime/rt_launch.h"
#include "traces/machine.h"

/* One rank's results as rank 0 gathers them. */
typedef struct rt_rank_result {
    int rank, local_rank;
    char status[16];               /* ok, oom, oohm, error */
    double iter_s, nominal_s;
    uint64_t peak_reserved_bytes, peak_allocated_bytes, host_peak_bytes, host_pool_bytes;
    uint64_t collectives, beside;  /* compute actions that ran collectives; rings beside */
    char device[128];
    char failure[640];
    char csv[8192];                /* its results CSV row, no newline ("" without --csv) */
} rt_rank_result;

typedef struct rt_node rt_node;

/* The launcher (rt_launch_whoami's RL_LAUNCHER): refuses a layout of more GPUs than this
 * machine shows, else starts `world` ranks of this program (argc, argv: memsim run's
 * arguments, argv[0] the subcommand) and returns rt_launch_ranks's status. */
int rt_node_launch(int world, int argc, char **argv);

/* Rank p's set-up for trace t on profile m: the layout (tp x cp x dp must be p->world), the
 * collectives (an op no rule fits is the error), NCCL, the communicators (ids through the
 * exchange files, so every rank must call this), the watcher. Call it with the rank's GPU
 * current and before the memory backend takes the free memory: NCCL's buffers come first. */
rt_status rt_node_begin(const rt_proc *p, const trace_t *t, const machine_t *m, rt_node **out,
                        ms_error *err);
void rt_node_hooks(rt_node *n, rt_exec_opts *o);
const rt_ranks *rt_node_ranks(const rt_node *n);

/* Writes mine to the exchange files (a rank that failed: before its notice). */
rt_status rt_node_put(rt_node *n, const rt_rank_result *mine, ms_error *err);
/* rt_node_put, then at rank 0 waits for every rank's and returns them
 * in rank order in *all (world entries; the caller frees it). Other ranks: *all = NULL. */
rt_status rt_node_gather(rt_node *n, const rt_rank_result *mine, rt_rank_result **all,
                         ms_error *err);
/* Rank 0's table of the ranks and the node's figures (all: rt_node_gather's). */
void rt_node_print(const rt_node *n, const rt_rank_result *all, FILE *f);
/* The notice that stops the other ranks (p's rank failed with msg). */
void rt_node_fail(const rt_proc *p, const char *msg);
/* Ends the communicators (ncclCommAbort when !ok), NCCL, the watcher; rank 0 removes the
 * exchange files. n may be NULL. */
void rt_node_end(rt_node *n, int ok);

#endif

/* runs.h — the runs behind `memsim plan`, `simulate`, `compare` and `replay`, shared by those
 * commands (sim/cmd_run.c, sim/cmd_replay.c) and the library API (sim/api.c), so that both
 * compute the same results from the same options: the workload in each policy's form, one
 * policy's run, a comparison's runs one after the other, the results CSV, and replay's options.
 * Nothing here writes to standard output; errors come back in an ms_error. */
#ifndef MEMSIM_RUNS_H
#define MEMSIM_RUNS_H

#include "sim/cli.h"
#include "sim/replay.h"

/* The workload in the forms the policies of one command plan (pol_form), each made once:
 * generated in a policy's form unless the user fixed the form (pipe_form_set). */
typedef struct runs_forms {
    trace_t *t[2];
} runs_forms;

ms_status runs_forms_get(runs_forms *f, const pipe_workload *w, const machine_t *m, pol_form k,
                         const trace_t **t, ms_error *err);
void runs_forms_free(runs_forms *f);

/* Loads the machine and the workload in the form of a's policy (plan, simulate). On an error
 * nothing is left to free. */
ms_status runs_setup(const cli_args *a, machine_profile **mp, runs_forms *f, const trace_t **t,
                     ms_error *err);

/* The row of a policy that could not run on the workload (compare, sweep): status error, why
 * in the failure column. */
void runs_error_row(sim_result *r, const char *policy, const pipe_workload *w,
                    const machine_t *m, const char *why);

/* pipe_run, and for the policy "auto" (sim/auto.h) its search over workload w (t: its plain
 * form, borrowed) and the simulation of its choice with the outputs: the result's row is
 * named auto, its note says what was chosen and the runner-ups (or, when nothing fits, the
 * changes that fit). */
ms_status runs_run(const pipe_workload *w, const trace_t *t, const machine_t *m,
                   const pipe_policy *p, const pipe_outputs *out, sim_result *r, ms_error *err);
/* pipe_plan, and for "auto" the plan of its choice (with the auto.* knobs that say so); with
 * explain, the search's table goes there. */
ms_status runs_plan(const pipe_workload *w, const trace_t *t, const machine_t *m,
                    const pipe_policy *p, FILE *explain, plan_t **out, ms_error *err);

/* Runs one policy with a's options and outputs; with a's plot dir, also writes its per-run
 * data files there. With tl (compare's timeline, open), its events go there as process pid,
 * named after the policy. */
ms_status runs_one(const cli_args *a, const trace_t *t, const machine_t *m, const char *policy,
                   ms_out *tl, int pid, int *tl_first, sim_result *r, ms_error *err);

/* Runs a->policies one after the other into rs[0..a->n_policies): a policy that cannot run on
 * the workload gets an error row and the others still run. Unless a->quiet, a progress line
 * per policy on standard error; with report, each error as "memsim compare: why" there too.
 * Returns the exit status of the first error row (0: none). */
int runs_compare(const cli_args *a, const machine_t *m, runs_forms *f, ms_out *tl,
                 int *tl_first, sim_result *rs, int report);

/* compare's --timeline: one file, a process per policy (pid = its place in --policies, from
 * 1). Open writes the document's head, close its tail and commits it. */
ms_status runs_timeline_open(const char *path, ms_out **tl, ms_error *err);
ms_status runs_timeline_close(ms_out *tl, ms_error *err);

/* The results CSV of rs[0..n) (header and rows, sim/results.h) to path, atomically. */
ms_status runs_write_csv(const char *path, const sim_result *rs, size_t n, ms_error *err);

/* ---- memsim replay ---- */

typedef struct runs_replay_args {
    const char *trace;           /* --trace (required) */
    const char *machine;         /* --machine (default h100-sxm) */
    char allocators[256];        /* --allocator A[,B...] (default caching) */
    alloc_config cfg;
    replay_opts o;               /* capacity, check, addresses; machine and cfg unset */
    int list_segments;           /* --segments */
    int help;                    /* --help */
    int usage;                   /* the error is a missing --trace or a stray argument: the
                                    command shows its usage */
} runs_replay_args;

/* Parses replay's options (argv[0]: the command's name). 0, or an exit status with the
 * message (what the command prints after "memsim replay: ") in e. */
int runs_replay_parse(int argc, char **argv, runs_replay_args *ra, ms_error *e);

/* Replays ra's trace through one allocator over machine m (ra->o with m and ra->cfg). */
ms_status runs_replay_one(const runs_replay_args *ra, const machine_t *m, const char *allocator,
                          replay_result *r, ms_error *err);

/* PyTorch's own numbers from an imported trace's meta lines (0 where absent). */
void runs_pytorch_meta(const char *path, uint64_t *peak_reserved_bytes, uint64_t *segments,
                       uint64_t *peak_allocated_bytes);

#endif

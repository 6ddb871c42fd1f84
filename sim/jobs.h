/* jobs.h — the process pool of `-j N`: runs a command's independent jobs (a sweep's points, a
 * comparison's policies, the instance files of `memsim dsa`) in N forked worker processes,
 * each running one job at a time, and hands each job's output back to the parent in job order, so that the command
 * prints and writes exactly what it would running them one after the other. Used by
 * sim/cmd_run.c (compare, sweep) and sim/cmd_dsa.c. */
#ifndef MEMSIM_JOBS_H
#define MEMSIM_JOBS_H

#include <stddef.h>
#include <stdio.h>

#define JOBS_MAX 1024

/* What one job produced, as its worker sent it back. */
typedef struct jobs_result {
    int status;            /* the job function's return value */
    const char *out;       /* what it printed on standard output */
    size_t out_len;
    const char *err;       /* what it printed on standard error */
    size_t err_len;
    const char *data;      /* what it wrote to its data stream (results, files' bytes) */
    size_t data_len;
} jobs_result;

/* Runs job i in a worker: its standard output and error are captured; what it writes to
 * data comes back as jobs_result.data. Returns the job's status (any int). */
typedef int (*jobs_fn)(size_t i, void *ctx, FILE *data);
/* Called in the parent for job 0, 1, ... in that order, as soon as the job and all before it
 * have finished. The result's bytes are valid only during the call. */
typedef void (*jobs_done_fn)(size_t i, const jobs_result *r, void *ctx);
/* A job's name for progress lines and errors, e.g. "at 64K tokens". */
typedef void (*jobs_label_fn)(size_t i, void *ctx, char *buf, size_t n);

typedef struct jobs_spec {
    const char *cmd;       /* "sweep": messages read "memsim sweep: ..." */
    size_t n;              /* jobs 0..n-1 */
    int workers;           /* worker processes (1..JOBS_MAX; no more than n are started) */
    int quiet;             /* 1: no progress lines */
    jobs_fn run;
    jobs_done_fn done;
    jobs_label_fn label;
    void *ctx;
} jobs_spec;

/* Runs the jobs; done() has been called for every job when it returns 0. A worker that does
 * not send a job's whole result back (it crashed or was killed) is an internal error: the
 * message names the job, the other workers are ended, done() is not called for it or any
 * later job, and the return value is MS_EXIT_INTERNAL. Progress (unless quiet): a line on
 * standard error per finished job. A worker runs its jobs one after the other in one process,
 * as the parent would: what a job leaves behind (a cached workload, say) the next may reuse.
 * For tests, MEMSIM_JOBS_CRASH=K makes the worker die of SIGSEGV when given job K (from 0). */
int jobs_run(const jobs_spec *s);

/* Built with --with-mpi (MEMSIM_MPI) and started by an MPI launcher (mpirun, srun) with more
 * than one rank: the number of ranks (MPI is initialized on the first call). Else 1. */
int jobs_ranks(void);
#define JOBS_NOT_ROOT (-1)
/* With jobs_ranks() > 1: spreads the jobs over the ranks (job i on rank i mod size, run in
 * the rank's own process one after the other), gathers the frames on rank 0, which calls
 * done() in job order, and finalizes MPI. Returns JOBS_NOT_ROOT on the other ranks (which
 * print nothing: their command should return 0 at once), and on rank 0 what jobs_run would.
 * With one rank it is jobs_run. */
int jobs_run_ranks(const jobs_spec *s);
/* Runs job i in this process with its standard output and error captured, into a frame as a
 * worker sends it (malloc'd; 0 when made). jobs_deliver hands such a frame to done(); -1 when
 * it is not a whole frame. For jobs_mpi.c. */
int jobs_capture(const jobs_spec *s, size_t i, char **frame, size_t *len);
int jobs_deliver(const jobs_spec *s, size_t i, const char *frame, size_t len);


#endif

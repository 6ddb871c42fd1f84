/* rt_launch.h — the processes of a run on several GPUs of one node: who this process is (a
 * rank started by a launcher — torchrun's RANK, WORLD_SIZE, LOCAL_RANK, mpirun's
 * OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK — or by memsim itself, or the one process that
 * starts them), starting one process per rank, and what the ranks exchange through files that
 * share one path prefix: each group's NCCL id, each rank's results, the notice of a rank that
 * stopped. Files appear whole (written under a temporary name, then renamed); every wait has a
 * timeout and gives up at once when another rank has stopped, so that no rank hangs on one
 * that failed. Plain C (no CUDA, no NCCL); used by runtime/rt_node.c and
 * tests/test_rt_launch.c. */
#ifndef MEMSIM_RT_LAUNCH_H
#define MEMSIM_RT_LAUNCH_H

#include <stddef.h>
#include <stdio.h>

#include "base/util.h"

typedef enum rt_role {
    RL_SINGLE = 0,  /* a world of one: no other process */
    RL_LAUNCHER,    /* no launcher's variables: this process starts the ranks */
    RL_RANK         /* one rank of the world */
} rt_role;

#define RT_STEM_MAX 3072

typedef struct rt_proc {
    rt_role role;
    int rank, world, local_rank;
    const char *launcher;    /* "torchrun", "mpirun" or "memsim" (RL_RANK) */
    char stem[RT_STEM_MAX];  /* the exchange files' prefix: MEMSIM_NCCL_ID_FILE, with the
                                launcher's job id appended when it gives one */
    double timeout_s;        /* every wait's limit (MEMSIM_RANK_TIMEOUT_S, default 300) */
} rt_proc;

/* Who this process is in a world of `world` ranks (tp * cp * dp), from the environment.
 * MS_ERR_INVALID when a launcher's world size differs from it, its variables are incomplete
 * or not numbers, or no MEMSIM_NCCL_ID_FILE says where the ranks meet. */
ms_status rt_launch_whoami(int world, rt_proc *p, ms_error *err);

/* The launcher: makes a private directory (mode 0700, under TMPDIR or /tmp), starts `world`
 * copies of this program (/proc/self/exe with argv), rank r with MEMSIM_RANK =
 * MEMSIM_LOCAL_RANK = r, MEMSIM_WORLD_SIZE and MEMSIM_NCCL_ID_FILE in the directory, and waits
 * for them (memsim-run reads them as a launcher's). When one fails the
 * others get grace_s seconds to stop, then SIGKILL. Removes the directory. Returns rank 0's
 * exit status, or when it is 0 the first non-zero one in rank order (a rank killed by a
 * signal counts as 1); diag (may be NULL) gets a line per rank that did not exit 0. */
int rt_launch_ranks(int world, char *const *argv, double grace_s, FILE *diag);

/* Writes the exchange file STEM.name (atomically). */
ms_status rt_launch_put(const rt_proc *p, const char *name, const void *data, size_t n,
                        ms_error *err);
/* Waits for STEM.name and reads at most max bytes of it (*n: how many). MS_ERR_INVALID
 * when p->timeout_s passes first (naming the file) or a rank has stopped (its notice). */
ms_status rt_launch_get(const rt_proc *p, const char *name, void *data, size_t max, size_t *n,
                        ms_error *err);
/* Leaves the notice "rank R: msg" for the others (the first notice stays). */
void rt_launch_stop(const rt_proc *p, const char *msg);
/* 1 when another rank has left a notice (msg gets it), 0 otherwise. */
int rt_launch_stopped(const rt_proc *p, char *msg, size_t n);

/* A thread that polls for another rank's notice every 50 ms and then calls on_stop(notice,
 * arg) once, on that thread (which may end the process). */
typedef struct rt_watch rt_watch;
ms_status rt_launch_watch(const rt_proc *p, void (*on_stop)(const char *msg, void *arg),
                          void *arg, rt_watch **out, ms_error *err);
void rt_launch_unwatch(rt_watch *w);   /* stops and joins the thread */

/* Removes every exchange file of the run (rank 0, at the end). */
void rt_launch_cleanup(const rt_proc *p);

#endif

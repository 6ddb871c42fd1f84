/* jobs_mpi.c — the pool's jobs over MPI ranks (see jobs.h, jobs_run_ranks): built only with
 * ./configure --with-mpi; `mpirun -n N memsim sweep ...` (or srun) gives each rank every N-th
 * job and gathers the frames on rank 0, which prints as one process would. Used by
 * sim/cmd_run.c (the sweep's grid) through sim/jobs.c's interface. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/jobs.h"
#include "base/util.h"

static int g_size = -1, g_rank;

int jobs_ranks(void)
{
    if (g_size >= 0) return g_size;
    /* only under a launcher: a plain `memsim sweep` must not start MPI */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMI_RANK") &&
        !getenv("PMIX_RANK"))
        return g_size = 1;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS) return g_size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    if (g_size <= 1) {
        MPI_Finalize();
        g_size = 1;
    }
    return g_size;
}

/* A frame over MPI_COMM_WORLD: its length, then its bytes in pieces below INT_MAX. */
static void send_frame(const char *f, uint64_t len, int tag)
{
    MPI_Send(&len, 1, MPI_UINT64_T, 0, tag, MPI_COMM_WORLD);
    for (uint64_t off = 0; off < len;) {
        int piece = len - off > (uint64_t)INT_MAX ? INT_MAX : (int)(len - off);
        MPI_Send(f + off, piece, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
        off += (uint64_t)piece;
    }
}

static char *recv_frame(int from, int tag, uint64_t *len)
{
    MPI_Recv(len, 1, MPI_UINT64_T, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    char *f = malloc(*len ? *len : 1);
    if (!f) return NULL;
    for (uint64_t off = 0; off < *len;) {
        int piece = *len - off > (uint64_t)INT_MAX ? INT_MAX : (int)(*len - off);
        MPI_Recv(f + off, piece, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        off += (uint64_t)piece;
    }
    return f;
}

int jobs_run_ranks(const jobs_spec *s)
{
    int size = jobs_ranks();
    if (size <= 1) return jobs_run(s);
    size_t n = s->n;
    int tag_ok = n <= (size_t)INT_MAX / 2;
    if (g_rank != 0) {
        for (size_t i = (size_t)g_rank; i < n && tag_ok; i += (size_t)size) {
            char *f = NULL;
            size_t len = 0;
            if (jobs_capture(s, i, &f, &len) != 0) {
                /* rank 0 reports the job lost: an empty frame */
                send_frame("", 0, (int)i);
                continue;
            }
            send_frame(f, len, (int)i);
            free(f);
        }
        MPI_Finalize();
        return JOBS_NOT_ROOT;
    }
    char **mine = calloc(n ? n : 1, sizeof *mine);
    size_t *mlen = calloc(n ? n : 1, sizeof *mlen);
    int rc = 0;
    char label[160];
    if (!mine || !mlen || !tag_ok) {
        fprintf(stderr, "memsim %s: internal error: %s\n", s->cmd,
                tag_ok ? "out of memory" : "too many jobs for MPI tags");
        MPI_Abort(MPI_COMM_WORLD, MS_EXIT_INTERNAL);
    }
    for (size_t i = 0; i < n; i += (size_t)size) jobs_capture(s, i, &mine[i], &mlen[i]);
    for (size_t i = 0; i < n && !rc; i++) {
        int from = (int)(i % (size_t)size);
        char *f = mine[i];
        uint64_t len = mlen[i];
        if (from) f = recv_frame(from, (int)i, &len);
        if (!f || jobs_deliver(s, i, f, (size_t)len) != 0) {
            s->label(i, s->ctx, label, sizeof label);
            fprintf(stderr, "memsim %s: internal error: job %zu of %zu (%s) on rank %d did not "
                    "finish\n", s->cmd, i + 1, n, label, from);
            rc = MS_EXIT_INTERNAL;
        } else if (!s->quiet) {
            s->label(i, s->ctx, label, sizeof label);
            fprintf(stderr, "memsim %s: finished %s (%zu/%zu, rank %d)\n", s->cmd, label, i + 1,
                    n, from);
        }
        free(f);
        mine[i] = NULL;
    }
    for (size_t i = 0; i < n; i++) free(mine[i]);
    free(mine);
    free(mlen);
    if (rc) MPI_Abort(MPI_COMM_WORLD, rc); /* the other ranks may still wait to send */
    MPI_Finalize();
    return rc;
}

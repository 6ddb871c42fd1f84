/* fake_nccl.c — a stand-in for libnccl.so.2 that the runtime's multi-GPU tests load through
 * MEMSIM_NCCL on a machine without NCCL or GPUs (tests/test_rt_nccl.c, tests/test_rt_coll.c,
 * tests/test_rt_node.c): it exports the NCCL entry points runtime/rt_nccl.c binds, moves no
 * data, and appends one line per call to the file FAKE_NCCL_LOG names (the call, its
 * communicator's id and rank, counts, element type, peer, stream), so that a test can check
 * which collectives ran where. FAKE_NCCL_VERSION overrides the version code; FAKE_NCCL_FAIL
 * names one entry point (e.g. ncclAllGather) that then fails with ncclInternalError. Built as
 * a shared library for make check only. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fake_uid {
    char internal[128];
} fake_uid;

typedef struct fake_comm {
    int nranks, rank;
    char id[64];
} fake_comm;

static int id_counter;

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void log_line(const char *fmt, ...)
{
    const char *path = getenv("FAKE_NCCL_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static int fails(const char *name)
{
    const char *f = getenv("FAKE_NCCL_FAIL");
    return f && !strcmp(f, name);
}

#define FAIL_IF(name) do { if (fails(name)) return 3; } while (0)

int ncclGetVersion(int *v)
{
    const char *o = getenv("FAKE_NCCL_VERSION");
    *v = o ? atoi(o) : 22703;
    const char *nv = getenv("NCCL_NVLS_ENABLE"), *ts = getenv("TORCH_SYMM_MEM_DISABLE_MULTICAST"),
               *ns = getenv("NVSHMEM_DISABLE_NVLS");
    log_line("version env NCCL_NVLS_ENABLE=%s TORCH_SYMM_MEM_DISABLE_MULTICAST=%s "
             "NVSHMEM_DISABLE_NVLS=%s", nv ? nv : "-", ts ? ts : "-", ns ? ns : "-");
    return 0;
}

const char *ncclGetErrorString(int r)
{
    return r == 3 ? "fake internal error" : "fake error";
}

int ncclGetUniqueId(fake_uid *u)
{
    FAIL_IF("ncclGetUniqueId");
    memset(u, 0, sizeof *u);
    snprintf(u->internal, sizeof u->internal, "fake-%ld-%d", (long)getpid(), ++id_counter);
    return 0;
}

int ncclCommInitRank(fake_comm **c, int nranks, fake_uid id, int rank)
{
    FAIL_IF("ncclCommInitRank");
    fake_comm *x = calloc(1, sizeof *x);
    if (!x) return 2;
    x->nranks = nranks;
    x->rank = rank;
    snprintf(x->id, sizeof x->id, "%.60s", id.internal);
    *c = x;
    log_line("init id=%s nranks=%d rank=%d", x->id, nranks, rank);
    return 0;
}

int ncclCommInitAll(fake_comm **c, int ndev, const int *devs)
{
    FAIL_IF("ncclCommInitAll");
    for (int i = 0; i < ndev; i++) {
        fake_comm *x = calloc(1, sizeof *x);
        if (!x) return 2;
        x->nranks = ndev;
        x->rank = i;
        snprintf(x->id, sizeof x->id, "all-%d", ndev);
        c[i] = x;
    }
    log_line("init_all ndev=%d first=%d", ndev, ndev ? devs[0] : -1);
    return 0;
}

int ncclCommDestroy(fake_comm *c)
{
    log_line("destroy id=%s rank=%d", c->id, c->rank);
    free(c);
    return 0;
}

int ncclCommAbort(fake_comm *c)
{
    log_line("abort id=%s rank=%d", c->id, c->rank);
    free(c);
    return 0;
}

int ncclCommGetAsyncError(fake_comm *c, int *a)
{
    (void)c;
    *a = 0;
    return 0;
}

int ncclAllGather(const void *s, void *r, size_t n, int t, fake_comm *c, void *st)
{
    FAIL_IF("ncclAllGather");
    log_line("allgather id=%s rank=%d/%d count=%zu type=%d send=%p recv=%p stream=%p", c->id,
             c->rank, c->nranks, n, t, s, r, st);
    return 0;
}

int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, fake_comm *c, void *st)
{
    FAIL_IF("ncclReduceScatter");
    log_line("reducescatter id=%s rank=%d/%d count=%zu type=%d op=%d send=%p recv=%p "
             "stream=%p", c->id, c->rank, c->nranks, n, t, op, s, r, st);
    return 0;
}

int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, fake_comm *c, void *st)
{
    FAIL_IF("ncclAllReduce");
    log_line("allreduce id=%s rank=%d/%d count=%zu type=%d op=%d send=%p recv=%p stream=%p",
             c->id, c->rank, c->nranks, n, t, op, s, r, st);
    return 0;
}

int ncclSend(const void *b, size_t n, int t, int peer, fake_comm *c, void *st)
{
    FAIL_IF("ncclSend");
    log_line("send id=%s rank=%d/%d count=%zu type=%d peer=%d buf=%p stream=%p", c->id, c->rank,
             c->nranks, n, t, peer, b, st);
    return 0;
}

int ncclRecv(void *b, size_t n, int t, int peer, fake_comm *c, void *st)
{
    FAIL_IF("ncclRecv");
    log_line("recv id=%s rank=%d/%d count=%zu type=%d peer=%d buf=%p stream=%p", c->id, c->rank,
             c->nranks, n, t, peer, b, st);
    return 0;
}

int ncclGroupStart(void)
{
    log_line("group_start");
    return 0;
}

int ncclGroupEnd(void)
{
    FAIL_IF("ncclGroupEnd");
    log_line("group_end");
    return 0;
}

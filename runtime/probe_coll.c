/* probe_coll.c — the measurements of `memsim probe --collectives` on a machine of several
 * GPUs: NCCL's all-gather, reduce-scatter and all-reduce of 1 MiB to 1 GiB over 2, 4 and 8 of
 * the GPUs (as many as there are; one process, a communicator per GPU by ncclCommInitAll,
 * each GPU timed by its own events, a run the slowest GPU's time), and the host link while
 * 1, 2, 4, 8 GPUs copy to and from pinned memory at once and while GPU 0 copies beside each
 * other GPU in turn. The figures are fitted by runtime/probe_node.c. C over CUDA's runtime
 * API and runtime/rt_nccl.h; called by runtime/main.c. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/probe_coll.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/rt_nccl.h"

#define MAX_GPUS 8

typedef struct gpu_bufs {
    void *send, *recv;
    cudaStream_t s;
    cudaEvent_t e0, e1;
} gpu_bufs;

static rt_status cuda_fail(cudaError_t e, const char *what, ms_error *err)
{
    return rt_fail(err, e == cudaErrorMemoryAllocation ? RT_ERR_OOM : RT_ERR_CUDA, __FILE__,
                   __LINE__, what, cudaGetErrorString(e));
}

#define TRY_CUDA(call, what) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return cuda_fail(e_, what, err); } while (0)

static rt_status bufs_new(gpu_bufs *b, int dev, size_t bytes, ms_error *err)
{
    memset(b, 0, sizeof *b);
    TRY_CUDA(cudaSetDevice(dev), "cudaSetDevice");
    TRY_CUDA(cudaMalloc(&b->send, bytes), "cudaMalloc (send buffer)");
    TRY_CUDA(cudaMalloc(&b->recv, bytes), "cudaMalloc (receive buffer)");
    TRY_CUDA(cudaMemset(b->send, 1, bytes), "cudaMemset");
    TRY_CUDA(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking), "cudaStreamCreate");
    TRY_CUDA(cudaEventCreate(&b->e0), "cudaEventCreate");
    TRY_CUDA(cudaEventCreate(&b->e1), "cudaEventCreate");
    return RT_OK;
}

static void bufs_free(gpu_bufs *b, int dev)
{
    cudaSetDevice(dev);
    if (b->e0) cudaEventDestroy(b->e0);
    if (b->e1) cudaEventDestroy(b->e1);
    if (b->s) cudaStreamDestroy(b->s);
    cudaFree(b->send);
    cudaFree(b->recv);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One collective on every GPU of the communicator, between events on each GPU's stream. */
static rt_status coll_once(rt_nccl *n, void **comm, gpu_bufs *b, int p, pn_kind k,
                           uint64_t bytes, ms_error *err)
{
    for (int d = 0; d < p; d++) {
        TRY_CUDA(cudaSetDevice(d), "cudaSetDevice");
        TRY_CUDA(cudaEventRecord(b[d].e0, b[d].s), "cudaEventRecord");
    }
    RT_TRY(rt_nccl_group_start(n, err));
    for (int d = 0; d < p; d++) {
        rt_status st = RT_OK;
        if (k == PN_ALL_GATHER)
            st = rt_nccl_all_gather(n, b[d].send, b[d].recv, bytes / (uint64_t)p, comm[d], b[d].s,
                                    err);
        else if (k == PN_REDUCE_SCATTER)
            st = rt_nccl_reduce_scatter(n, b[d].send, b[d].recv, bytes / (uint64_t)p / 2, RN_BF16,
                                        comm[d], b[d].s, err);
        else
            st = rt_nccl_all_reduce(n, b[d].send, b[d].recv, bytes / 2, RN_BF16, comm[d], b[d].s,
                                    err);
        if (st != RT_OK) return st;
    }
    RT_TRY(rt_nccl_group_end(n, err));
    for (int d = 0; d < p; d++) {
        TRY_CUDA(cudaSetDevice(d), "cudaSetDevice");
        TRY_CUDA(cudaEventRecord(b[d].e1, b[d].s), "cudaEventRecord");
    }
    return RT_OK;
}

/* The median over reps of the slowest GPU's time of one collective. */
static rt_status coll_time(rt_nccl *n, void **comm, gpu_bufs *b, int p, pn_kind k,
                           uint64_t bytes, int warm, int reps, double *us, ms_error *err)
{
    double t[16];
    for (int r = 0; r < warm + reps; r++) {
        RT_TRY(coll_once(n, comm, b, p, k, bytes, err));
        double slowest = 0;
        for (int d = 0; d < p; d++) {
            float ms = 0;
            TRY_CUDA(cudaSetDevice(d), "cudaSetDevice");
            TRY_CUDA(cudaEventSynchronize(b[d].e1), "cudaEventSynchronize");
            TRY_CUDA(cudaEventElapsedTime(&ms, b[d].e0, b[d].e1), "cudaEventElapsedTime");
            if (ms > slowest) slowest = ms;
        }
        if (r >= warm) t[r - warm] = slowest * 1e3;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_dbl);
    *us = t[reps / 2];
    return RT_OK;
}

/* Every kind and size over the first p GPUs. */
static rt_status colls_at(rt_nccl *n, int p, int quick, pn_coll_sample *out, size_t *nout,
                          ms_error *err)
{
    const uint64_t max_bytes = 1ULL << 30;
    int devs[MAX_GPUS];
    void *comm[MAX_GPUS] = {0};
    gpu_bufs b[MAX_GPUS];
    memset(b, 0, sizeof b);
    for (int d = 0; d < p; d++) devs[d] = d;
    rt_status st = rt_nccl_comm_init_all(n, p, devs, comm, err);
    for (int d = 0; st == RT_OK && d < p; d++) st = bufs_new(&b[d], d, max_bytes, err);
    for (int k = 0; st == RT_OK && k < PN_KINDS; k++)
        for (uint64_t bytes = 1ULL << 20; st == RT_OK && bytes <= max_bytes;
             bytes *= quick ? 16 : 4) {
            double us = 0;
            st = coll_time(n, comm, b, p, (pn_kind)k, bytes, quick ? 1 : 3, quick ? 3 : 7, &us,
                           err);
            if (st == RT_OK) out[(*nout)++] = (pn_coll_sample){(pn_kind)k, p, bytes, us};
        }
    for (int d = 0; d < p; d++) {
        if (comm[d]) rt_nccl_comm_destroy(n, comm[d]);
        bufs_free(&b[d], d);
    }
    return st;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The GPUs in gpus[0..g) copy `bytes` each at once (h2d or d2h); GPU gpus[0]'s rate by its
 * events and the sum over the wall time, medians of reps. */
static rt_status link_at(gpu_bufs *b, void **host, const int *gpus, int g, int h2d,
                         uint64_t bytes, int reps, pn_link_sample *out, ms_error *err)
{
    double r0[8], sum[8];
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < g; i++) {
            TRY_CUDA(cudaSetDevice(gpus[i]), "cudaSetDevice");
            TRY_CUDA(cudaStreamSynchronize(b[gpus[i]].s), "cudaStreamSynchronize");
        }
        double t0 = wall_s();
        for (int i = 0; i < g; i++) {
            gpu_bufs *x = &b[gpus[i]];
            TRY_CUDA(cudaSetDevice(gpus[i]), "cudaSetDevice");
            TRY_CUDA(cudaEventRecord(x->e0, x->s), "cudaEventRecord");
            TRY_CUDA(h2d ? cudaMemcpyAsync(x->recv, host[gpus[i]], bytes, cudaMemcpyHostToDevice,
                                           x->s)
                         : cudaMemcpyAsync(host[gpus[i]], x->send, bytes, cudaMemcpyDeviceToHost,
                                           x->s), "cudaMemcpyAsync");
            TRY_CUDA(cudaEventRecord(x->e1, x->s), "cudaEventRecord");
        }
        for (int i = 0; i < g; i++) {
            TRY_CUDA(cudaSetDevice(gpus[i]), "cudaSetDevice");
            TRY_CUDA(cudaEventSynchronize(b[gpus[i]].e1), "cudaEventSynchronize");
        }
        double t1 = wall_s();
        float ms = 0;
        TRY_CUDA(cudaSetDevice(gpus[0]), "cudaSetDevice");
        TRY_CUDA(cudaEventElapsedTime(&ms, b[gpus[0]].e0, b[gpus[0]].e1), "cudaEventElapsedTime");
        r0[r] = ms > 0 ? (double)bytes / (ms * 1e-3) : 0;
        sum[r] = t1 > t0 ? (double)bytes * g / (t1 - t0) : 0;
    }
    qsort(r0, (size_t)reps, sizeof *r0, cmp_dbl);
    qsort(sum, (size_t)reps, sizeof *sum, cmp_dbl);
    out->gpu0_Bps = r0[reps / 2];
    out->sum_Bps = sum[reps / 2];
    out->gpus = g;
    out->h2d = h2d;
    out->bytes = bytes;
    return RT_OK;
}

static rt_status links(int count, int quick, pn_link_sample *out, size_t *nout, ms_error *err)
{
    const uint64_t bytes = 256ULL << 20;
    gpu_bufs b[MAX_GPUS];
    void *host[MAX_GPUS] = {0};
    memset(b, 0, sizeof b);
    rt_status st = RT_OK;
    for (int d = 0; st == RT_OK && d < count; d++) {
        st = bufs_new(&b[d], d, bytes, err);
        if (st == RT_OK && cudaHostAlloc(&host[d], bytes, cudaHostAllocPortable) != cudaSuccess)
            st = rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "cudaHostAlloc", "256 MiB pinned");
    }
    int all[MAX_GPUS], reps = quick ? 3 : 5;
    for (int d = 0; d < count; d++) all[d] = d;
    for (int g = 1; st == RT_OK && g <= count; g *= 2)
        for (int h2d = 1; st == RT_OK && h2d >= 0; h2d--) {
            st = link_at(b, host, all, g, h2d, bytes, reps, &out[*nout], err);
            out[(*nout)++].pair = 0;
        }
    for (int j = 1; st == RT_OK && j < count; j++) {
        int pair[2] = {0, j};
        st = link_at(b, host, pair, 2, 1, bytes, reps, &out[*nout], err);
        out[(*nout)++].pair = j;
    }
    for (int d = 0; d < count; d++) {
        bufs_free(&b[d], d);
        if (host[d]) cudaFreeHost(host[d]);
    }
    return st;
}

rt_status probe_coll_run(const machine_profile *p, FILE *raw, int quick, pn_fit *fit,
                         char *what, size_t what_len, ms_error *err)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    if (count < 2)
        return rt_fail(err, RT_ERR_NODEV, __FILE__, __LINE__, "memsim probe --collectives",
                       count ? "needs a machine of several GPUs; this one shows 1 (the node "
                               "figures need NCCL between GPUs)" : "no CUDA device");
    if (count > MAX_GPUS) count = MAX_GPUS;
    struct cudaDeviceProp prop;
    snprintf(what, what_len, "%d GPUs", count);
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(what, what_len, "%d x %.200s", count, prop.name);
    rt_nccl *n = NULL;
    RT_TRY(rt_nccl_load(&n, err));
    pn_coll_sample cs[3 * 3 * 8];
    pn_link_sample ls[2 * 4 + MAX_GPUS];
    size_t nc = 0, nl = 0;
    rt_status st = RT_OK;
    for (int r = 2; st == RT_OK && r <= count; r *= 2) st = colls_at(n, r, quick, cs, &nc, err);
    rt_nccl_free(n);
    if (st == RT_OK) st = links(count, quick, ls, &nl, err);
    if (st != RT_OK) return st;
    pn_write_raw(raw, cs, nc, ls, nl);
    if (pn_fit_samples(cs, nc, ls, nl, count, p->m.gpu_kernel_launch_us, fit, err) != MS_OK)
        return RT_ERR_INVALID;
    return RT_OK;
}

/* rt_node.c — one rank of a run on several GPUs of one node: set-up, communicators and their
 * warm-up (CUDA's runtime API for its buffer), the launch, results (see rt_node.h). Used by
 * runtime/rt_run.c. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_node.h"

#include "runtime/rt_backend.h"

#include <cuda_runtime_api.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct rt_node {
    rt_proc p;
    rt_ranks *r;
    rt_coll *c;
    rt_nccl *nccl;
    void *comm[RG_COUNT];
    rt_watch *watch;
};

/* Another rank stopped: this one cannot go on (its collectives would wait for it forever).
 * Runs on the watcher thread. */
static void on_stop(const char *msg, void *arg)
{
    const rt_node *n = arg;
    fprintf(stderr, "memsim run: rank %d stops: %s\n", n->p.rank, msg);
    fflush(stderr);
    _exit(MS_EXIT_FAIL);
}

/* The communicator of this rank's group of kind k: the group's first rank makes the id and
 * writes it, the others read it; then all join. */
static rt_status make_comm(rt_node *n, rt_group_kind k, ms_error *err)
{
    int world = rt_ranks_world(n->r), idx = 0;
    int *members = calloc((size_t)world, sizeof *members);
    if (!members) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    int size = rt_ranks_group(n->r, k, n->p.rank, members, world, &idx);
    char name[64];
    snprintf(name, sizeof name, "id.%s.%d", rt_group_name(k), members[0]);
    free(members);
    rt_nccl_id id;
    rt_status st = RT_OK;
    ms_status ls = MS_OK;
    if (idx == 0) {
        st = rt_nccl_unique_id(n->nccl, &id, err);
        if (st == RT_OK) ls = rt_launch_put(&n->p, name, &id, sizeof id, err);
    } else {
        size_t got = 0;
        ls = rt_launch_get(&n->p, name, &id, sizeof id, &got, err);
        if (ls == MS_OK && got != sizeof id)
            ls = ms_fail(err, MS_ERR_INVALID, "%s.%s holds %zu bytes, not an NCCL id", n->p.stem,
                         name, got);
    }
    if (st != RT_OK) return st;
    if (ls != MS_OK) return RT_ERR_INVALID;
    st = rt_nccl_comm_init(n->nccl, size, &id, idx, &n->comm[k], err);
    if (st == RT_OK) rt_coll_set_comm(n->c, k, n->nccl, n->comm[k]);
    return st;
}

/* Waits for stream s under the rank's time limit (a peer that never joins a collective would
 * make cudaStreamSynchronize wait for ever). */
static rt_status wait_stream(const rt_node *n, cudaStream_t s, ms_error *err)
{
    struct timespec t0, t1, nap = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return RT_OK;
        if (e != cudaErrorNotReady)
            return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "the warm-up collectives",
                           cudaGetErrorString(e));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) > n->p.timeout_s)
            return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "the warm-up collectives",
                           "did not end within MEMSIM_RANK_TIMEOUT_S (a rank did not join)");
        nanosleep(&nap, NULL);
    }
}

/* One small collective of each kind on each communicator, and a send and receive between
 * each pair of neighbours, so that NCCL makes its connections and their buffers before the
 * memory backend measures the free memory (NCCL connects peers lazily, at their first use). */
static rt_status warm_up(rt_node *n, ms_error *err)
{
    enum { B = 1 << 20 };
    void *buf = NULL;
    cudaStream_t s = NULL;
    if (cudaMalloc(&buf, 2 * B) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
        cudaFree(buf);
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "the warm-up's buffer",
                       "cudaMalloc or cudaStreamCreate failed");
    }
    rt_status st = RT_OK;
    char *b = buf;
    for (int k = 0; st == RT_OK && k < RG_COUNT; k++) {
        void *c = n->comm[k];
        int p = rt_ranks_size(n->r, (rt_group_kind)k), me = 0;
        if (!c) continue;
        rt_ranks_group(n->r, (rt_group_kind)k, n->p.rank, NULL, 0, &me);
        size_t share = B / (size_t)p / 4 * 4;
        st = rt_nccl_all_gather(n->nccl, b + (size_t)me * share, b, share, c, s, err);
        if (st == RT_OK)
            st = rt_nccl_reduce_scatter(n->nccl, b, b + B, share / 4, RN_F32, c, s, err);
        if (st == RT_OK) st = rt_nccl_all_reduce(n->nccl, b, b, B / 4, RN_F32, c, s, err);
        if (st == RT_OK) st = rt_nccl_group_start(n->nccl, err);
        for (int q = 0; st == RT_OK && q < p; q++)
            if (q != me) {
                st = rt_nccl_send(n->nccl, b, share, q, c, s, err);
                if (st == RT_OK) st = rt_nccl_recv(n->nccl, b + B + (size_t)q * share, share, q, c,
                                                   s, err);
            }
        if (st == RT_OK) st = rt_nccl_group_end(n->nccl, err);
    }
    if (st == RT_OK) st = wait_stream(n, s, err);
    cudaStreamDestroy(s);
    cudaFree(buf);
    return st;
}

static rt_status begin(rt_node *n, const trace_t *t, const machine_t *m, ms_error *err)
{
    jobview v;
    jobview_of(t, m, &v);
    const char *fw = trace_get_meta(t, "framework");
    if (rt_ranks_new(&v, fw && !strcmp(fw, "megatron"), &n->r, err) != MS_OK) return RT_ERR_INVALID;
    if (rt_ranks_world(n->r) != n->p.world)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "the trace's layout",
                       "holds another number of GPUs than the ranks started");
    if (rt_coll_new(t, n->r, n->p.rank, &n->c, err) != MS_OK) return RT_ERR_INVALID;
    if (rt_launch_watch(&n->p, on_stop, n, &n->watch, err) != MS_OK) return RT_ERR_HOST;
    RT_TRY(rt_nccl_load(&n->nccl, err));
    for (int k = 0; k < RG_COUNT; k++)
        if (rt_coll_uses(n->c, (rt_group_kind)k)) RT_TRY(make_comm(n, (rt_group_kind)k, err));
    return warm_up(n, err);
}

rt_status rt_node_begin(const rt_proc *p, const trace_t *t, const machine_t *m, rt_node **out,
                        ms_error *err)
{
    *out = NULL;
    rt_node *n = calloc(1, sizeof *n);
    if (!n) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    n->p = *p;
    rt_status st = begin(n, t, m, err);
    if (st != RT_OK) {
        rt_node_end(n, 0);
        return st;
    }
    *out = n;
    return RT_OK;
}

void rt_node_hooks(rt_node *n, rt_exec_opts *o) { rt_coll_hooks(n->c, o); }

const rt_ranks *rt_node_ranks(const rt_node *n) { return n->r; }

void rt_node_fail(const rt_proc *p, const char *msg)
{
    if (p->role == RL_RANK) rt_launch_stop(p, msg);
}

void rt_node_end(rt_node *n, int ok)
{
    if (!n) return;
    rt_launch_unwatch(n->watch);
    for (int k = 0; k < RG_COUNT; k++) {
        if (!n->comm[k]) continue;
        if (ok) rt_nccl_comm_destroy(n->nccl, n->comm[k]);
        else rt_nccl_comm_abort(n->nccl, n->comm[k]);
    }
    rt_nccl_free(n->nccl);
    rt_coll_free(n->c);
    rt_ranks_free(n->r);
    if (n->p.rank == 0 && ok) rt_launch_cleanup(&n->p);
    free(n);
}

/* ---- the launch ---- */

/* This process starts the ranks: one per GPU, each this program with the same arguments. */
int rt_node_launch(int world, int argc, char **argv)
{
    int count = 0;
    ms_error err;
    if (rt_gpu_count(&count, &err) != RT_OK) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        return MS_EXIT_FAIL;
    }
    if (world > count) {
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        fprintf(stderr, "memsim run: the layout holds %d GPUs (tp x cp x dp), one process each, "
                "and this machine shows %d%s%s%s; run it on a node with %d, or with "
                "--collectives spin on one GPU, its collectives spun for their modelled time\n",
                world, count, cvd ? " (CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : "",
                cvd ? ")" : "", world);
        return MS_EXIT_FAIL;
    }
    char note[512];
    if (rt_nccl_safe_env(note, sizeof note) && note[0])
        fprintf(stderr, "memsim run: %s (NVLink multicast stays off)\n", note);
    char **av = calloc((size_t)argc + 2, sizeof *av);
    if (!av) return MS_EXIT_INTERNAL;
    av[0] = "memsim-run";
    for (int i = 0; i < argc; i++) av[i + 1] = argv[i];
    int rc = rt_launch_ranks(world, av, 10.0, stderr);
    free(av);
    return rc;
}

/* ---- results ---- */

static size_t put_result(const rt_rank_result *x, char *buf, size_t n)
{
    int w = snprintf(buf, n, "memsim-rank-result 1\nrank %d\nlocal_rank %d\nstatus %s\n"
                     "iter_s %.17g\nnominal_s %.17g\npeak_reserved_bytes %" PRIu64 "\n"
                     "peak_allocated_bytes %" PRIu64 "\nhost_peak_bytes %" PRIu64 "\n"
                     "host_pool_bytes %" PRIu64 "\ncollectives %" PRIu64 "\nbeside %" PRIu64 "\n"
                     "device %s\nfailure %s\ncsv %s\n", x->rank, x->local_rank, x->status,
                     x->iter_s, x->nominal_s, x->peak_reserved_bytes, x->peak_allocated_bytes,
                     x->host_peak_bytes, x->host_pool_bytes, x->collectives, x->beside,
                     x->device, x->failure, x->csv);
    return w < 0 ? 0 : (size_t)w < n ? (size_t)w : n - 1;
}

/* The text after "key " on its line of buf into out (n bytes), or "" */
static void field(const char *buf, const char *key, char *out, size_t n)
{
    size_t k = strlen(key);
    out[0] = 0;
    for (const char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, key, k) && l[k] == ' ') {
            const char *e = strchr(l + k + 1, '\n');
            size_t len = e ? (size_t)(e - (l + k + 1)) : strlen(l + k + 1);
            if (len >= n) len = n - 1;
            memcpy(out, l + k + 1, len);
            out[len] = 0;
            return;
        }
}

static uint64_t field_u64(const char *buf, const char *key)
{
    char v[64];
    field(buf, key, v, sizeof v);
    return strtoull(v, NULL, 10);
}

static double field_dbl(const char *buf, const char *key)
{
    char v[64];
    field(buf, key, v, sizeof v);
    return strtod(v, NULL);
}

static void get_result(const char *buf, rt_rank_result *x)
{
    memset(x, 0, sizeof *x);
    x->rank = (int)field_u64(buf, "rank");
    x->local_rank = (int)field_u64(buf, "local_rank");
    field(buf, "status", x->status, sizeof x->status);
    x->iter_s = field_dbl(buf, "iter_s");
    x->nominal_s = field_dbl(buf, "nominal_s");
    x->peak_reserved_bytes = field_u64(buf, "peak_reserved_bytes");
    x->peak_allocated_bytes = field_u64(buf, "peak_allocated_bytes");
    x->host_peak_bytes = field_u64(buf, "host_peak_bytes");
    x->host_pool_bytes = field_u64(buf, "host_pool_bytes");
    x->collectives = field_u64(buf, "collectives");
    x->beside = field_u64(buf, "beside");
    field(buf, "device", x->device, sizeof x->device);
    field(buf, "failure", x->failure, sizeof x->failure);
    field(buf, "csv", x->csv, sizeof x->csv);
}

enum { RESULT_BYTES = 12288 };

rt_status rt_node_put(rt_node *n, const rt_rank_result *mine, ms_error *err)
{
    char *buf = malloc(RESULT_BYTES), name[32];
    if (!buf) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "malloc", "out of memory");
    snprintf(name, sizeof name, "result.%d", n->p.rank);
    size_t len = put_result(mine, buf, RESULT_BYTES);
    ms_status st = rt_launch_put(&n->p, name, buf, len, err);
    free(buf);
    return st == MS_OK ? RT_OK : RT_ERR_HOST;
}

rt_status rt_node_gather(rt_node *n, const rt_rank_result *mine, rt_rank_result **all,
                         ms_error *err)
{
    *all = NULL;
    RT_TRY(rt_node_put(n, mine, err));
    if (n->p.rank != 0) return RT_OK;
    enum { BUF = RESULT_BYTES };
    char *buf = malloc(BUF), name[32];
    if (!buf) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "malloc", "out of memory");
    rt_rank_result *v = calloc((size_t)n->p.world, sizeof *v);
    rt_status st = v ? RT_OK : RT_ERR_HOST;
    for (int r = 0; st == RT_OK && r < n->p.world; r++) {
        snprintf(name, sizeof name, "result.%d", r);
        size_t got = 0;
        if (rt_launch_get(&n->p, name, buf, BUF - 1, &got, err) != MS_OK) st = RT_ERR_INVALID;
        buf[got] = 0;
        if (st == RT_OK) get_result(buf, &v[r]);
    }
    free(buf);
    if (st != RT_OK) {
        free(v);
        return st;
    }
    *all = v;
    return RT_OK;
}

static double gib(uint64_t b) { return (double)b / MS_GiB; }

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_collectives(const rt_node *n, FILE *f)
{
    rt_coll_stats s;
    rt_coll_get_stats(n->c, &s);
    fprintf(f, "collectives of rank 0 (NCCL %d from %s; communicators:", rt_nccl_version(n->nccl),
            rt_nccl_path(n->nccl));
    for (int k = 0; k < RG_COUNT; k++)
        if (n->comm[k]) fprintf(f, " %s of %d", rt_group_name((rt_group_kind)k),
                                rt_ranks_size(n->r, (rt_group_kind)k));
    fprintf(f, "):");
    for (int k = 1; k < RC_COUNT; k++)
        if (s.ops[k]) fprintf(f, " %s %" PRIu64 " (%.3f GiB, %" PRIu64 " NCCL calls),",
                              rt_coll_kind_name((rt_coll_kind)k), s.ops[k], gib(s.bytes[k]),
                              s.calls[k]);
    fprintf(f, " %" PRIu64 " rings beside their attention\n", s.merged);
}

void rt_node_print(const rt_node *n, const rt_rank_result *all, FILE *f)
{
    int w = n->p.world;
    fprintf(f, "node: %d ranks, one per GPU (tp %d x cp %d x dp %d), started by %s\n", w,
            rt_ranks_size(n->r, RG_TP), rt_ranks_size(n->r, RG_CP), rt_ranks_size(n->r, RG_DP),
            n->p.launcher);
    fprintf(f, "%4s %3s %3s %3s %4s %-6s %12s %12s %13s %13s %11s %s\n", "rank", "tp", "cp", "dp",
            "gpu", "status", "iteration_s", "reserved_GiB", "allocated_GiB", "host_peak_GiB",
            "collectives", "failure");
    double *it = calloc((size_t)w, sizeof *it);
    uint64_t host = 0, resv = 0;
    int n_ok = 0, worst = 0;
    for (int r = 0; r < w; r++) {
        const rt_rank_result *x = &all[r];
        rt_coords c = rt_ranks_coords(n->r, r);
        fprintf(f, "%4d %3d %3d %3d %4d %-6s %12.6f %12.3f %13.3f %13.3f %11" PRIu64 " %s\n", r,
                c.tp, c.cp, c.dp, x->local_rank, x->status, x->iter_s,
                gib(x->peak_reserved_bytes), gib(x->peak_allocated_bytes), gib(x->host_peak_bytes),
                x->collectives, x->failure[0] ? x->failure : "-");
        host += x->host_peak_bytes;
        if (x->peak_reserved_bytes > resv) {
            resv = x->peak_reserved_bytes;
            worst = r;
        }
        if (!strcmp(x->status, "ok") && it) it[n_ok++] = x->iter_s;
    }
    if (it && n_ok) {
        qsort(it, (size_t)n_ok, sizeof *it, cmp_dbl);
        fprintf(f, "node: iteration median %.6f s, slowest %.6f s over %d ranks; peak reserved "
                "at most %.3f GiB (rank %d); pinned host memory of the node %.3f GiB (the sum of "
                "the ranks' host peaks: the host memory they share)\n",
                n_ok % 2 ? it[n_ok / 2] : (it[n_ok / 2 - 1] + it[n_ok / 2]) / 2,
                it[n_ok - 1], n_ok, gib(resv), worst, gib(host));
    }
    free(it);
    print_collectives(n, f);
}

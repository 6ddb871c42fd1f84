/* probe.cu — `memsim probe`: measures the GPU machine it runs on (pinned and pageable
 * host-link bandwidth over transfer sizes, both directions at once, DHA read/write bandwidth
 * and DHA beside a copy, cudaMalloc/cudaFree and CUDA VMM latencies, pinned host allocation,
 * device copy bandwidth, cuBLAS bf16 GEMM throughput over square shapes and over the shapes of
 * a transformer layer, the runtime's own causal attention kernels (runtime/kernels.h)
 * forward and backward over sequence lengths, and its host AdamW step), fits the latency curves
 * with GSL, and writes a machine profile whose every number names this measurement as its
 * source. Raw samples go to a CSV beside it. Called by runtime/main.c. C-style CUDA. */
#include "runtime/probe.h"

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_GSL
#include <gsl/gsl_fit.h>
#endif

#include "runtime/kernels.h"
#include "runtime/kernels_ref.h"
#include "runtime/rt_check.h"
#include "runtime/rt_nvml.h"

#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * 1024.0 * 1024.0)

typedef struct probe_ctx {
    FILE *raw;              /* raw samples CSV */
    cudaStream_t s0, s1;
    cudaEvent_t e0, e1, e2, e3;
    int reps;
    double warm_ms;         /* back-to-back calls before each timed set (time_calls) */
} probe_ctx;

static double host_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void raw(probe_ctx *c, const char *what, double size_bytes, double value, const char *unit)
{
    fprintf(c->raw, "%s,%.0f,%.6g,%s\n", what, size_bytes, value, unit);
}

/* Median time (us) of one async copy of `bytes` on stream s0, measured with events. */
static rt_status time_copy(probe_ctx *c, void *dst, const void *src, size_t bytes,
                           cudaMemcpyKind kind, double *us, ms_error *err)
{
    double t[32];
    int n = c->reps < 32 ? c->reps : 32;
    RT_CHECK(err, cudaMemcpyAsync(dst, src, bytes, kind, c->s0)); /* warm-up */
    RT_CHECK(err, cudaStreamSynchronize(c->s0));
    for (int i = 0; i < n; i++) {
        float ms;
        RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
        RT_CHECK(err, cudaMemcpyAsync(dst, src, bytes, kind, c->s0));
        RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
        RT_CHECK(err, cudaEventSynchronize(c->e1));
        RT_CHECK(err, cudaEventElapsedTime(&ms, c->e0, c->e1));
        t[i] = ms * 1e3;
    }
    *us = median(t, n);
    return RT_OK;
}

static rt_status probe_link(probe_ctx *c, machine_t *m, ms_error *err)
{
    size_t maxb = (size_t)1 << 30;
    void *h = NULL, *d = NULL, *d2 = NULL, *h2 = NULL, *pg = NULL;
    RT_CHECK(err, cudaHostAlloc(&h, maxb, cudaHostAllocDefault));
    RT_CHECK(err, cudaHostAlloc(&h2, maxb, cudaHostAllocDefault));
    RT_CHECK(err, cudaMalloc(&d, maxb));
    RT_CHECK(err, cudaMalloc(&d2, maxb));
    memset(h, 1, maxb);
    memset(h2, 2, maxb);
    double h2d_big = 0, d2h_big = 0, small_us = 0;
    for (size_t b = 4096; b <= maxb; b *= 4) {
        double us;
        RT_TRY(time_copy(c, d, h, b, cudaMemcpyHostToDevice, &us, err));
        raw(c, "h2d_pinned_us", (double)b, us, "us");
        if (b == 4096) small_us = us;
        if (b >= ((size_t)64 << 20)) h2d_big = (double)b / (us * 1e-6);
        RT_TRY(time_copy(c, h, d, b, cudaMemcpyDeviceToHost, &us, err));
        raw(c, "d2h_pinned_us", (double)b, us, "us");
        if (b >= ((size_t)64 << 20)) d2h_big = (double)b / (us * 1e-6);
    }
    m->link_h2d_Bps = h2d_big;
    m->link_d2h_Bps = d2h_big;
    m->link_small_copy_us = small_us;
    /* both directions at once: 256 MiB each way on two streams */
    size_t b = (size_t)256 << 20;
    double best = 0;
    for (int i = 0; i < 5; i++) {
        double t0 = host_now_us();
        RT_CHECK(err, cudaMemcpyAsync(d, h, b, cudaMemcpyHostToDevice, c->s0));
        RT_CHECK(err, cudaMemcpyAsync(h2, d2, b, cudaMemcpyDeviceToHost, c->s1));
        RT_CHECK(err, cudaDeviceSynchronize());
        double bw = 2.0 * (double)b / ((host_now_us() - t0) * 1e-6);
        if (bw > best) best = bw;
    }
    m->link_duplex_Bps = best;
    raw(c, "duplex_total_Bps", (double)b, best, "B/s");
    /* pageable */
    pg = malloc(b);
    if (!pg) return RT_ERR_HOST;
    memset(pg, 3, b);
    double t0 = host_now_us();
    RT_CHECK(err, cudaMemcpy(d, pg, b, cudaMemcpyHostToDevice));
    m->link_pageable_h2d_Bps = (double)b / ((host_now_us() - t0) * 1e-6);
    t0 = host_now_us();
    RT_CHECK(err, cudaMemcpy(pg, d, b, cudaMemcpyDeviceToHost));
    m->link_pageable_d2h_Bps = (double)b / ((host_now_us() - t0) * 1e-6);
    raw(c, "h2d_pageable_Bps", (double)b, m->link_pageable_h2d_Bps, "B/s");
    raw(c, "d2h_pageable_Bps", (double)b, m->link_pageable_d2h_Bps, "B/s");
    free(pg);
    /* device-to-device copy: HBM bandwidth (bytes read + written) */
    double us;
    RT_TRY(time_copy(c, d2, d, maxb, cudaMemcpyDeviceToDevice, &us, err));
    m->gpu_hbm_Bps = 2.0 * (double)maxb / (us * 1e-6);
    raw(c, "d2d_rw_Bps", (double)maxb, m->gpu_hbm_Bps, "B/s");
    RT_CHECK(err, cudaFree(d));
    RT_CHECK(err, cudaFree(d2));
    RT_CHECK(err, cudaFreeHost(h));
    RT_CHECK(err, cudaFreeHost(h2));
    return RT_OK;
}

/* DHA: a kernel that reads (sums) or writes mapped pinned host memory. */
__global__ void dha_read_kernel(const uint4 *p, size_t n, unsigned *sink)
{
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = acc; /* keeps the loads alive */
}

__global__ void dha_write_kernel(uint4 *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_uint4((unsigned)i, 1u, 2u, 3u);
}

static rt_status probe_dha(probe_ctx *c, machine_t *m, ms_error *err)
{
    size_t b = (size_t)256 << 20, n = b / sizeof(uint4);
    void *h = NULL, *hd = NULL, *h2 = NULL, *d = NULL;
    unsigned *sink = NULL;
    RT_CHECK(err, cudaHostAlloc(&h, b, cudaHostAllocMapped));
    RT_CHECK(err, cudaHostGetDevicePointer(&hd, h, 0));
    RT_CHECK(err, cudaHostAlloc(&h2, b, cudaHostAllocDefault));
    RT_CHECK(err, cudaMalloc(&d, b));
    RT_CHECK(err, cudaMalloc(&sink, sizeof *sink));
    memset(h, 7, b);
    int sms;
    RT_CHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    double tr[8], tw[8];
    for (int i = 0; i < 8; i++) {
        float ms;
        RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
        dha_read_kernel<<<sms * 4, 512, 0, c->s0>>>((const uint4 *)hd, n, sink);
        RT_CHECK(err, cudaGetLastError());
        RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
        RT_CHECK(err, cudaEventSynchronize(c->e1));
        RT_CHECK(err, cudaEventElapsedTime(&ms, c->e0, c->e1));
        tr[i] = (double)b / (ms * 1e-3);
        RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
        dha_write_kernel<<<sms * 4, 512, 0, c->s0>>>((uint4 *)hd, n);
        RT_CHECK(err, cudaGetLastError());
        RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
        RT_CHECK(err, cudaEventSynchronize(c->e1));
        RT_CHECK(err, cudaEventElapsedTime(&ms, c->e0, c->e1));
        tw[i] = (double)b / (ms * 1e-3);
    }
    m->dha_read_Bps = median(tr + 1, 7);
    m->dha_write_Bps = median(tw + 1, 7);
    raw(c, "dha_read_Bps", (double)b, m->dha_read_Bps, "B/s");
    raw(c, "dha_write_Bps", (double)b, m->dha_write_Bps, "B/s");
    /* a DHA read beside an H2D copy: do they share the link? */
    float ms_k, ms_c;
    RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
    dha_read_kernel<<<sms * 4, 512, 0, c->s0>>>((const uint4 *)hd, n, sink);
    RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
    RT_CHECK(err, cudaEventRecord(c->e2, c->s1));
    RT_CHECK(err, cudaMemcpyAsync(d, h2, b, cudaMemcpyHostToDevice, c->s1));
    RT_CHECK(err, cudaEventRecord(c->e3, c->s1));
    RT_CHECK(err, cudaDeviceSynchronize());
    RT_CHECK(err, cudaEventElapsedTime(&ms_k, c->e0, c->e1));
    RT_CHECK(err, cudaEventElapsedTime(&ms_c, c->e2, c->e3));
    raw(c, "dha_read_beside_h2d_Bps", (double)b, (double)b / (ms_k * 1e-3), "B/s");
    raw(c, "h2d_beside_dha_read_Bps", (double)b, (double)b / (ms_c * 1e-3), "B/s");
    RT_CHECK(err, cudaFreeHost(h));
    RT_CHECK(err, cudaFreeHost(h2));
    RT_CHECK(err, cudaFree(d));
    RT_CHECK(err, cudaFree(sink));
    return RT_OK;
}

/* Least-squares line through (x, y): GSL when built with it. */
static void fit_line(const double *x, const double *y, int n, double *c0, double *c1)
{
#ifdef HAVE_GSL
    double cov00, cov01, cov11, sumsq;
    gsl_fit_linear(x, 1, y, 1, (size_t)n, c0, c1, &cov00, &cov01, &cov11, &sumsq);
#else
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        sx += x[i]; sy += y[i]; sxx += x[i] * x[i]; sxy += x[i] * y[i];
    }
    *c1 = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    *c0 = (sy - *c1 * sx) / n;
#endif
}

static rt_status probe_malloc(probe_ctx *c, machine_t *m, ms_error *err)
{
    static const size_t sizes_mib[] = {2, 20, 64, 256, 1024, 4096};
    const int ns = (int)(sizeof sizes_mib / sizeof *sizes_mib);
    double x[8], ym[8], yf[8];
    for (int i = 0; i < ns; i++) {
        size_t b = sizes_mib[i] << 20;
        double tm[16], tf[16];
        for (int r = 0; r < 16; r++) {
            void *p;
            RT_CHECK(err, cudaDeviceSynchronize());
            double t0 = host_now_us();
            RT_CHECK(err, cudaMalloc(&p, b));
            double t1 = host_now_us();
            RT_CHECK(err, cudaFree(p));
            double t2 = host_now_us();
            tm[r] = t1 - t0;
            tf[r] = t2 - t1;
        }
        x[i] = (double)b / GiB;
        ym[i] = median(tm, 16);
        yf[i] = median(tf, 16);
        raw(c, "cudaMalloc_us", (double)b, ym[i], "us");
        raw(c, "cudaFree_us", (double)b, yf[i], "us");
    }
    fit_line(x, ym, ns, &m->cuda_malloc_base_us, &m->cuda_malloc_per_gib_us);
    fit_line(x, yf, ns, &m->cuda_free_base_us, &m->cuda_free_per_gib_us);
    if (m->cuda_malloc_base_us < 0) m->cuda_malloc_base_us = ym[0];
    if (m->cuda_free_base_us < 0) m->cuda_free_base_us = yf[0];
    /* pinned host allocation of 1 GiB */
    void *h;
    double t0 = host_now_us();
    RT_CHECK(err, cudaHostAlloc(&h, (size_t)1 << 30, cudaHostAllocDefault));
    m->host_alloc_per_gib_us = host_now_us() - t0;
    RT_CHECK(err, cudaFreeHost(h));
    raw(c, "cudaHostAlloc_us", GiB, m->host_alloc_per_gib_us, "us");
    /* an idle device synchronize */
    double ts[16];
    for (int r = 0; r < 16; r++) {
        t0 = host_now_us();
        RT_CHECK(err, cudaDeviceSynchronize());
        ts[r] = host_now_us() - t0;
    }
    m->device_sync_us = median(ts, 16);
    raw(c, "sync_idle_us", 0, m->device_sync_us, "us");
    return RT_OK;
}

static rt_status probe_vmm(probe_ctx *c, machine_t *m, ms_error *err)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    RT_CU(err, cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    m->vmm_granularity_bytes = gran;
    const int n = 512; /* 1 GiB in 2 MiB chunks */
    CUmemGenericAllocationHandle *hs = (CUmemGenericAllocationHandle *)calloc(n, sizeof *hs);
    if (!hs) return RT_ERR_HOST;
    CUdeviceptr va, va2;
    double t0 = host_now_us();
    RT_CU(err, cuMemAddressReserve(&va, (size_t)n * gran, 0, 0, 0));
    RT_CU(err, cuMemAddressReserve(&va2, (size_t)n * gran, 0, 0, 0));
    double t_res = (host_now_us() - t0) / 2;
    t0 = host_now_us();
    for (int i = 0; i < n; i++) RT_CU(err, cuMemCreate(&hs[i], gran, &prop, 0));
    double t_create = host_now_us() - t0;
    t0 = host_now_us();
    for (int i = 0; i < n; i++) RT_CU(err, cuMemMap(va + (size_t)i * gran, gran, 0, hs[i], 0));
    double t_map = host_now_us() - t0;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    t0 = host_now_us();
    for (int i = 0; i < n; i++) RT_CU(err, cuMemSetAccess(va + (size_t)i * gran, gran, &acc, 1));
    double t_acc = host_now_us() - t0;
    /* a stitch: map the same chunks again into a second range */
    t0 = host_now_us();
    for (int i = 0; i < n; i++) RT_CU(err, cuMemMap(va2 + (size_t)i * gran, gran, 0, hs[i], 0));
    RT_CU(err, cuMemSetAccess(va2, (size_t)n * gran, &acc, 1));
    double t_stitch = host_now_us() - t0;
    t0 = host_now_us();
    for (int i = 0; i < n; i++) RT_CU(err, cuMemUnmap(va + (size_t)i * gran, gran));
    double t_unmap = host_now_us() - t0;
    RT_CU(err, cuMemUnmap(va2, (size_t)n * gran));
    t0 = host_now_us();
    for (int i = 0; i < n; i++) RT_CU(err, cuMemRelease(hs[i]));
    double t_rel = host_now_us() - t0;
    RT_CU(err, cuMemAddressFree(va, (size_t)n * gran));
    RT_CU(err, cuMemAddressFree(va2, (size_t)n * gran));
    free(hs);
    m->vmm_reserve_us = t_res;
    m->vmm_create_us = t_create / n;
    m->vmm_map_us = t_map / n;
    m->vmm_set_access_us = t_acc / n;
    m->vmm_unmap_us = t_unmap / n;
    m->vmm_release_us = t_rel / n;
    raw(c, "cuMemCreate_us_per_chunk", (double)gran, m->vmm_create_us, "us");
    raw(c, "cuMemMap_us_per_chunk", (double)gran, m->vmm_map_us, "us");
    raw(c, "cuMemSetAccess_us_per_chunk", (double)gran, m->vmm_set_access_us, "us");
    raw(c, "stitch_remap_1GiB_us", GiB, t_stitch, "us");
    raw(c, "cuMemUnmap_us_per_chunk", (double)gran, m->vmm_unmap_us, "us");
    raw(c, "cuMemRelease_us_per_chunk", (double)gran, m->vmm_release_us, "us");
    return RT_OK;
}

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
        p[i] = __float2bfloat16(((float)(x & 0xffff) / 65536.0f - 0.5f));
    }
}

static rt_status probe_gemm(probe_ctx *c, machine_t *m, double peak_flops, ms_error *err)
{
    static const int shapes[] = {1024, 2048, 4096, 8192, 16384};
    cublasHandle_t hd;
    if (cublasCreate(&hd) != CUBLAS_STATUS_SUCCESS) return RT_ERR_CUDA;
    cublasSetStream(hd, c->s0);
    size_t maxn = 16384;
    __nv_bfloat16 *a, *b, *o;
    RT_CHECK(err, cudaMalloc(&a, maxn * maxn * 2));
    RT_CHECK(err, cudaMalloc(&b, maxn * maxn * 2));
    RT_CHECK(err, cudaMalloc(&o, maxn * maxn * 2));
    fill_bf16<<<1024, 256>>>(a, maxn * maxn, 1u);
    fill_bf16<<<1024, 256>>>(b, maxn * maxn, 2u);
    RT_CHECK(err, cudaDeviceSynchronize());
    double best = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int n = shapes[si];
        float alpha = 1, beta = 0;
        double t[10];
        for (int r = 0; r < 12; r++) {
            float ms;
            RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
            cublasStatus_t st = cublasGemmEx(hd, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a,
                                             CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, o,
                                             CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) return RT_ERR_CUDA;
            RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
            RT_CHECK(err, cudaEventSynchronize(c->e1));
            RT_CHECK(err, cudaEventElapsedTime(&ms, c->e0, c->e1));
            if (r >= 2) t[r - 2] = ms * 1e-3;
        }
        double flops = 2.0 * n * (double)n * n / median(t, 10);
        raw(c, "gemm_bf16_flops", (double)n, flops, "FLOP/s");
        if (flops > best) best = flops;
    }
    m->gpu_gemm_eff = best / peak_flops;
    RT_CHECK(err, cudaFree(a));
    RT_CHECK(err, cudaFree(b));
    RT_CHECK(err, cudaFree(o));
    cublasDestroy(hd);
    return RT_OK;
}

/* Median time (ms) of reps calls of fn(arg) on stream s0, each between two events, after
 * two warm-up calls. */
typedef rt_status (*probe_fn)(void *arg, ms_error *err);

/* Runs fn back to back for at least c->warm_ms of GPU time, so that the timed calls after it
 * see the clock a sustained load holds rather than the one an idle GPU starts at. Batches of
 * doubling size, one synchronization each. */
static rt_status warm_calls(probe_ctx *c, probe_fn fn, void *arg, ms_error *err)
{
    double done_ms = 0;
    for (int n = 1; done_ms < c->warm_ms; n = n < 1024 ? 2 * n : n) {
        float ms;
        RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
        for (int i = 0; i < n; i++) {
            rt_status st = fn(arg, err);
            if (st != RT_OK) return st;
        }
        RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
        RT_CHECK(err, cudaEventSynchronize(c->e1));
        RT_CHECK(err, cudaEventElapsedTime(&ms, c->e0, c->e1));
        done_ms += ms;
    }
    return RT_OK;
}

static rt_status time_calls(probe_ctx *c, probe_fn fn, void *arg, int reps, double *ms_out,
                            ms_error *err)
{
    double t[32];
    if (reps > 32) reps = 32;
    if (c->warm_ms > 0) {
        rt_status st = warm_calls(c, fn, arg, err);
        if (st != RT_OK) return st;
    }
    for (int r = 0; r < reps + 2; r++) {
        float ms;
        RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
        rt_status st = fn(arg, err);
        if (st != RT_OK) return st;
        RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
        RT_CHECK(err, cudaEventSynchronize(c->e1));
        RT_CHECK(err, cudaEventElapsedTime(&ms, c->e0, c->e1));
        if (r >= 2) t[r - 2] = ms;
    }
    *ms_out = median(t, reps);
    return RT_OK;
}

/* One GEMM of the runtime (kn_gemm: row-major, bf16 in, fp32 accumulation). */
typedef struct gemm_call {
    kn_ctx *k;
    int ta, tb, c_fp32;
    size_t M, N, K;
    const kn_bf16 *A, *B;
    void *C;
} gemm_call;

static rt_status run_gemm(void *p, ms_error *err)
{
    gemm_call *g = (gemm_call *)p;
    size_t lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    return kn_gemm(g->k, g->ta, g->tb, g->M, g->N, g->K, g->A, lda, g->B, ldb,
                   g->c_fp32 ? 1.0f : 0.0f, g->C, g->N, g->c_fp32, err);
}

/* The three GEMMs of an LM head [T, h] x [h, V] (forward, input and weight gradients), their
 * summed time in ms. */
static rt_status time_head(probe_ctx *c, kn_ctx *k, const kn_bf16 *a, const kn_bf16 *b, void *o,
                           size_t T, size_t h, size_t V, int quick, double *ms_out, ms_error *err)
{
    *ms_out = 0;
    for (int pass = 0; pass < 3; pass++) {
        gemm_call g = {k, pass == 2, pass == 1, pass == 2, T, V, h, a, b, o};
        if (pass == 1) { g.N = h; g.K = V; }
        if (pass == 2) { g.M = h; g.N = V; g.K = T; }
        double ms;
        rt_status st = time_calls(c, run_gemm, &g, quick ? 5 : 10, &ms, err);
        if (st != RT_OK) return st;
        *ms_out += ms;
    }
    return RT_OK;
}

/* GEMM alignment: the LM head with its vocabulary a multiple of 64 (50304), even but not a
 * multiple of 8 elements (50300, 50258) and odd (50257); gpu.gemm_even_eff is the mean rate of
 * the two even ones, gpu.gemm_odd_eff the odd one's, each over the aligned rate per FLOP
 * (cuBLAS picks slower kernels when a leading dimension is not a multiple of 16 bytes). */
static rt_status probe_gemm_align(probe_ctx *c, kn_ctx *k, machine_t *m, const kn_bf16 *a,
                                  const kn_bf16 *b, void *o, size_t T, size_t h, int quick,
                                  ms_error *err)
{
    const size_t V[4] = {50304, 50300, 50258, 50257};
    double rate[4];
    for (int i = 0; i < 4; i++) {
        double ms;
        rt_status st = time_head(c, k, a, b, o, T, h, V[i], quick, &ms, err);
        if (st != RT_OK) return st;
        rate[i] = 6.0 * (double)T * (double)h * (double)V[i] / (ms * 1e-3);
        char what[64];
        snprintf(what, sizeof what, "gemm_align_FLOPps:lm_head:T%zuxh%zuxV%zu", T, h, V[i]);
        raw(c, what, 6.0 * (double)T * (double)h * (double)V[i], rate[i], "FLOP/s");
    }
    m->gpu_gemm_even_eff = (rate[1] + rate[2]) / 2 / rate[0];
    m->gpu_gemm_odd_eff = rate[3] / rate[0];
    if (m->gpu_gemm_even_eff > 1) m->gpu_gemm_even_eff = 1;
    if (m->gpu_gemm_odd_eff > 1) m->gpu_gemm_odd_eff = 1;
    raw(c, "gemm_even_eff", 0, m->gpu_gemm_even_eff, "fraction_of_aligned");
    raw(c, "gemm_odd_eff", 0, m->gpu_gemm_odd_eff, "fraction_of_aligned");
    return RT_OK;
}

/* The GEMMs of one GPT layer and the LM head as the runtime's dispatcher issues them
 * (runtime/model_rt.c): forward Y[T,N] = X[T,K] W[K,N] (bf16 out), input gradient
 * dX[T,K] = dY W^T (bf16), weight gradient dW[K,N] += X^T dY (fp32, beta 1). Shape: hidden
 * 4096, ffn 16384, 8K tokens, vocabulary 50304 (the 4-layer model of docs/RUNTIME.md).
 * gpu.gemm_eff becomes the layer's GEMM FLOPs over their summed time, over the bf16 peak
 * (the LM head is in the raw samples only); the square sweep stays in the raw CSV. */
static rt_status probe_gemm_layer(probe_ctx *c, machine_t *m, double peak_flops, int quick,
                                  ms_error *err)
{
    const size_t T = 8192, h = 4096, f = 16384, V = 50304;
    struct { const char *name; size_t N, K; int layer; } w[] = {
        {"qkv", 3 * h, h, 1}, {"proj", h, h, 1}, {"fc1", f, h, 1}, {"fc2", h, f, 1},
        {"lm_head", V, h, 0}};
    size_t maxe = T * V;   /* the largest operand: the logits */
    kn_ctx *k = NULL;
    kn_bf16 *a = NULL, *b = NULL;
    void *o = NULL;
    rt_status st = kn_ctx_new(c->s0, &k, err);
    if (st != RT_OK) return st;
    RT_CHECK(err, cudaMalloc(&a, maxe * 2));
    RT_CHECK(err, cudaMalloc(&b, maxe * 2));
    RT_CHECK(err, cudaMalloc(&o, maxe * 4 > h * V * 4 ? maxe * 4 : h * V * 4));
    fill_bf16<<<1024, 256, 0, c->s0>>>((__nv_bfloat16 *)a, maxe, 3u);
    fill_bf16<<<1024, 256, 0, c->s0>>>((__nv_bfloat16 *)b, maxe, 4u);
    RT_CHECK(err, cudaMemsetAsync(o, 0, maxe * 4, c->s0));
    RT_CHECK(err, cudaStreamSynchronize(c->s0));
    double lf = 0, lt = 0;
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        for (int pass = 0; pass < 3; pass++) {
            /* pass 0: Y = X W; 1: dX = dY W^T; 2: dW += X^T dY */
            gemm_call g = {k, pass == 2, pass == 1, pass == 2, T, w[i].N, w[i].K, a, b, o};
            if (pass == 1) { g.N = w[i].K; g.K = w[i].N; }
            if (pass == 2) { g.M = w[i].K; g.N = w[i].N; g.K = T; }
            double ms;
            if ((st = time_calls(c, run_gemm, &g, quick ? 5 : 10, &ms, err)) != RT_OK) goto out;
            double fl = 2.0 * (double)g.M * (double)g.N * (double)g.K;
            char what[96];
            snprintf(what, sizeof what, "gemm_layer_FLOPps:%s.%s:M%zuxN%zuxK%zu:%s%s", w[i].name,
                     pass == 0 ? "fwd" : pass == 1 ? "dX" : "dW", g.M, g.N, g.K,
                     g.ta ? "t" : "n", g.tb ? "t" : "n");
            raw(c, what, fl, fl / (ms * 1e-3), "FLOP/s");
            if (w[i].layer) {
                lf += fl;
                lt += ms * 1e-3;
            }
        }
    m->gpu_gemm_eff = lf / lt / peak_flops;
    raw(c, "gemm_layer_eff", lf, m->gpu_gemm_eff, "fraction_of_peak");
    st = probe_gemm_align(c, k, m, a, b, o, T, h, quick, err);
out:
    cudaFree(a);
    cudaFree(b);
    cudaFree(o);
    kn_ctx_free(k);
    return st;
}

/* One call of the runtime's attention, forward or backward. */
typedef struct attn_call {
    kn_ctx *k;
    int bwd;
    size_t B, H, S, D;
    kn_bf16 *q, *kk, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
} attn_call;

static rt_status run_attn(void *p, ms_error *err)
{
    attn_call *x = (attn_call *)p;
    size_t ld = x->H * x->D;
    if (!x->bwd)
        return kn_attn_fwd(x->k, x->o, x->lse, x->q, x->kk, x->v, ld, ld, x->B, x->H, x->S,
                           x->D, err);
    return kn_attn_bwd(x->k, x->dq, x->dk, x->dv, x->dout, x->q, x->kk, x->v, x->o, x->lse, ld,
                       ld, x->B, x->H, x->S, x->D, err);
}

/* eff(S) = e * S / (S + half): 1/eff is linear in 1/S (1/e + half/e * 1/S); fitted by least
 * squares. A fit that does not have that shape (a <= 0 or b < 0: noise, or no ramp) falls
 * back to the best sample and no ramp. */
static void fit_ramp(const double *S, const double *eff, int n, double *e, double *half)
{
    double x[8], y[8], a = 0, b = 0, best = 0;
    for (int i = 0; i < n; i++) {
        x[i] = 1.0 / S[i];
        y[i] = 1.0 / eff[i];
        if (eff[i] > best) best = eff[i];
    }
    fit_line(x, y, n, &a, &b);
    if (a > 0 && b >= 0 && 1.0 / a <= 1.0) {
        *e = 1.0 / a;
        *half = b / a;
    } else {
        *e = best;
        *half = 0;
    }
}

/* memsim's own causal attention kernels, the device's default set (runtime/kernels.h: wgmma
 * and TMA on compute capability 9.0, else mma.sync; a deterministic backward: with wgmma at
 * head dim 128 in one pass, FlashAttention-2's 5 products with dq summed in a fixed order,
 * while a head's fp32 dq fits L2 (all the lengths here on an H200), else 7), not the vendor's
 * FlashAttention kernels:
 * one sequence (micro-batch 1, the long-sequence training case the generator's seq ramp
 * describes) of 16 heads of dim 128 at lengths 2K..32K, forward and backward. FLOPs are the model's, as the generator counts them (traces/gen.c): forward
 * 2 B S^2 H D (causal), backward 2.5 x forward. Each direction's efficiency over S is fitted
 * to e * S / (S + half) (rt.attn_{fwd,bwd}_eff, rt.attn_{fwd,bwd}_half_seq: what the generator
 * knob kernels=runtime uses); gpu.attn_eff, which describes FlashAttention-class kernels, is
 * left as the base profile has it. Every shape's sample is in the raw CSV. */
static rt_status probe_attn(probe_ctx *c, machine_t *m, double peak_flops, int quick, ms_error *err)
{
    enum { NS = 5 };
    const size_t Ttok = 32768, H = 16, D = 128, S[NS] = {2048, 4096, 8192, 16384, 32768};
    size_t e = Ttok * H * D;
    kn_ctx *k = NULL;
    kn_bf16 *buf = NULL;
    float *lse = NULL;
    double Sd[NS], eff[2][NS];
    rt_status st = kn_ctx_new(c->s0, &k, err);
    if (st != RT_OK) return st;
    if ((st = kn_ctx_reserve(k, 0, 0, Ttok * H, Ttok, err)) != RT_OK) {
        kn_ctx_free(k);
        return st;
    }
    RT_CHECK(err, cudaMalloc(&buf, 8 * e * 2));
    RT_CHECK(err, cudaMalloc(&lse, Ttok * H * sizeof *lse));
    fill_bf16<<<1024, 256, 0, c->s0>>>((__nv_bfloat16 *)buf, 8 * e, 5u);
    RT_CHECK(err, cudaStreamSynchronize(c->s0));
    for (size_t i = 0; i < NS; i++) {
        attn_call x = {k, 0, 1, H, S[i], D, buf, buf + e, buf + 2 * e, buf + 3 * e,
                       buf + 4 * e, buf + 5 * e, buf + 6 * e, buf + 7 * e, lse};
        double fwd = 2.0 * (double)x.B * (double)S[i] * (double)S[i] * (double)H * (double)D;
        Sd[i] = (double)S[i];
        for (int bwd = 0; bwd < 2; bwd++) {
            x.bwd = bwd;
            double ms, fl = bwd ? 2.5 * fwd : fwd;
            if ((st = time_calls(c, run_attn, &x, quick ? 3 : 8, &ms, err)) != RT_OK) goto out;
            char what[96];
            snprintf(what, sizeof what, "attn_%s_FLOPps:b%zu.h%zu.s%zu.d%zu.causal",
                     bwd ? "bwd" : "fwd", x.B, H, S[i], D);
            raw(c, what, fl, fl / (ms * 1e-3), "FLOP/s");
            eff[bwd][i] = fl / (ms * 1e-3) / peak_flops;
        }
    }
    fit_ramp(Sd, eff[0], NS, &m->rt_attn_fwd_eff, &m->rt_attn_fwd_half_seq);
    fit_ramp(Sd, eff[1], NS, &m->rt_attn_bwd_eff, &m->rt_attn_bwd_half_seq);
    raw(c, "rt_attn_fwd_eff", 0, m->rt_attn_fwd_eff, "fraction_of_peak");
    raw(c, "rt_attn_fwd_half_seq", 0, m->rt_attn_fwd_half_seq, "tokens");
    raw(c, "rt_attn_bwd_eff", 0, m->rt_attn_bwd_eff, "fraction_of_peak");
    raw(c, "rt_attn_bwd_half_seq", 0, m->rt_attn_bwd_half_seq, "tokens");
out:
    cudaFree(buf);
    cudaFree(lse);
    kn_ctx_free(k);
    return st;
}

/* ---- the board's power under each kernel class (power.*) ---- */

/* One block that spins for ~1 ms: the SM clock stays up while next to nothing runs. */
__global__ void idle_spin(long long cycles, unsigned *sink)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0 && sink) *sink = 1;
}

/* One operating point of a class: board power (sustained runs only), SM clock and time a
 * call, medians of the readings. */
typedef struct power_sample {
    double power_w, clock_mhz, call_ms;
} power_sample;

static rt_status power_fail(ms_error *err, rt_status st, const char *why)
{
    if (err) snprintf(err->msg, sizeof err->msg, "power probe: %s", why);
    return st;
}

static double median_of(double *v, int n)
{
    return n > 0 ? median(v, n) : 0;
}

/* Runs fn back to back for run_ms of wall time, two batches of ~25 ms in flight, and reads
 * the board's power and SM clock every ~20 ms; the medians of the second half's readings
 * and its GPU time per call go to *out. NVML's power is a one-second average on this
 * generation, so the first half is the ramp and is left out. */
static rt_status sustain(probe_ctx *c, rt_nvml *nv, probe_fn fn, void *arg, double one_ms,
                         double run_ms, power_sample *out, ms_error *err)
{
    enum { MAXS = 4096 };
    double pw[MAXS], ck[MAXS];
    int batch = (int)(25.0 / (one_ms > 1e-3 ? one_ms : 1e-3)) + 1;
    cudaEvent_t ev[2], half = NULL;
    RT_CHECK(err, cudaEventCreate(&ev[0]));
    RT_CHECK(err, cudaEventCreate(&ev[1]));
    RT_CHECK(err, cudaEventCreate(&half));
    double t0 = host_now_us(), next_read = t0;
    int ns = 0, half_set = 0;
    long calls_after_half = 0;
    rt_status st = RT_OK;
    for (int b = 0;; b++) {
        double now_ms = (host_now_us() - t0) / 1e3;
        if (now_ms >= run_ms) break;
        if (!half_set && now_ms >= run_ms / 2) {
            RT_CHECK(err, cudaEventRecord(half, c->s0));
            half_set = 1;
        }
        for (int i = 0; i < batch; i++)
            if ((st = fn(arg, err)) != RT_OK) return st;
        if (half_set) calls_after_half += batch;
        RT_CHECK(err, cudaEventRecord(ev[b & 1], c->s0));
        if (b == 0) continue; /* keep two batches queued */
        while (cudaEventQuery(ev[(b - 1) & 1]) == cudaErrorNotReady) {
            double t = host_now_us();
            if (t >= next_read && ns < MAXS) {
                double w, f;
                if (rt_nvml_power_w(nv, &w) == 0 && rt_nvml_sm_clock_mhz(nv, &f) == 0 &&
                    (t - t0) / 1e3 >= run_ms / 2) {
                    pw[ns] = w;
                    ck[ns] = f;
                    ns++;
                }
                next_read = t + 20e3;
            }
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    RT_CHECK(err, cudaEventRecord(ev[0], c->s0));
    RT_CHECK(err, cudaEventSynchronize(ev[0]));
    float ms = 0;
    if (half_set) RT_CHECK(err, cudaEventElapsedTime(&ms, half, ev[0]));
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    cudaEventDestroy(half);
    if (ns == 0 || calls_after_half == 0)
        return power_fail(err, RT_ERR_CUDA, "no NVML readings while the load ran");
    out->power_w = median_of(pw, ns);
    out->clock_mhz = median_of(ck, ns);
    out->call_ms = ms / (double)calls_after_half;
    return RT_OK;
}

typedef struct spin_call {
    cudaStream_t s;
    unsigned *sink;
    long long cycles;
} spin_call;

static rt_status run_spin(void *p, ms_error *err)
{
    spin_call *x = (spin_call *)p;
    idle_spin<<<1, 32, 0, x->s>>>(x->cycles, x->sink);
    RT_CHECK(err, cudaGetLastError());
    return RT_OK;
}

/* n calls of fn, each timed alone between two events and followed, when gap is given, by
 * a spin of gap->cycles (the duty cycle's idle part); the SM clock and board power read after
 * each call. The medians of the last half go to *out, with the fraction of that half's wall
 * time the calls took in *busy (NVML's power is a one-second average: over a run of more
 * than two seconds its second half's readings are the duty cycle's average). */
static rt_status timed_points(probe_ctx *c, rt_nvml *nv, probe_fn fn, void *arg, int n,
                              spin_call *gap, power_sample *out, double *busy, ms_error *err)
{
    enum { MAXN = 4096 };
    static double t[MAXN], f[MAXN], w[MAXN];
    int k = 0;
    double t_half = 0, sum_ms = 0;
    if (n > MAXN) n = MAXN;
    for (int i = 0; i < n; i++) {
        float ms;
        if (i == n / 2) t_half = host_now_us();
        RT_CHECK(err, cudaEventRecord(c->e0, c->s0));
        rt_status st = fn(arg, err);
        if (st != RT_OK) return st;
        RT_CHECK(err, cudaEventRecord(c->e1, c->s0));
        if (gap && (st = run_spin(gap, err)) != RT_OK) return st;
        RT_CHECK(err, cudaEventSynchronize(c->e1));
        double mhz, watt;
        if (rt_nvml_sm_clock_mhz(nv, &mhz)) mhz = 0;
        if (rt_nvml_power_w(nv, &watt)) watt = 0;
        RT_CHECK(err, cudaEventElapsedTime(&ms, c->e0, c->e1));
        if (i >= n / 2) {
            t[k] = ms;
            f[k] = mhz;
            w[k] = watt;
            sum_ms += ms;
            k++;
        }
    }
    RT_CHECK(err, cudaStreamSynchronize(c->s0));
    double wall_ms = (host_now_us() - t_half) / 1e3;
    *busy = wall_ms > 0 ? sum_ms / wall_ms : 0;
    out->call_ms = median_of(t, k);
    out->clock_mhz = median_of(f, k);
    out->power_w = median_of(w, k);
    return RT_OK;
}

/* The exponent s of time ~ clock^-s by least squares over the points' logarithms; 0 when
 * their clocks span less than 3 % (nothing to fit: the class's time is then taken as
 * independent of the clock, and the raw CSV says so). */
static double fit_time_exp(const power_sample *p, int n)
{
    double mx = 0, my = 0, sxx = 0, sxy = 0, lo = 1e30, hi = 0;
    for (int i = 0; i < n; i++) {
        mx += log(p[i].clock_mhz) / n;
        my += log(p[i].call_ms) / n;
        if (p[i].clock_mhz < lo) lo = p[i].clock_mhz;
        if (p[i].clock_mhz > hi) hi = p[i].clock_mhz;
    }
    if (hi < 1.03 * lo) return 0;
    for (int i = 0; i < n; i++) {
        double dx = log(p[i].clock_mhz) - mx, dy = log(p[i].call_ms) - my;
        sxx += dx * dx;
        sxy += dx * dy;
    }
    double s = -sxy / sxx;
    return s < 0 ? 0 : s > 1.5 ? 1.5 : s;
}

typedef struct gelu_call {
    kn_ctx *k;
    kn_bf16 *y, *x;
    size_t T, n;
} gelu_call;

static rt_status run_gelu(void *p, ms_error *err)
{
    gelu_call *g = (gelu_call *)p;
    return kn_gelu_fwd(g->k, g->y, g->x, NULL, g->T, g->n, err);
}

/* One class: the work of one call (FLOPs or bytes), what it runs, whether its power follows
 * the clock, and what was measured: a burst (8 calls after a second of a spinning block,
 * as the rate probes time their calls), a duty cycle (each call then a spin of about three
 * times its length) and a sustained run. */
typedef struct power_class {
    const char *name;
    probe_fn fn;
    void *arg;
    double work;
    int compute_bound;
    power_sample burst, duty, sus;
    double duty_busy;
    double time_exp, clock_exp, j_per_work, ref_clock;
} power_class;

static void class_raw(probe_ctx *c, const char *cls, const char *point, const power_sample *s)
{
    char w[96];
    snprintf(w, sizeof w, "sm_clock_MHz:%s.%s", cls, point);
    raw(c, w, 0, s->clock_mhz, "MHz");
    snprintf(w, sizeof w, "call_ms:%s.%s", cls, point);
    raw(c, w, 0, s->call_ms, "ms");
    if (s->power_w > 0) {
        snprintf(w, sizeof w, "power_W:%s.%s", cls, point);
        raw(c, w, 0, s->power_w, "W");
    }
    fprintf(stderr, "probe: power %-11s %-9s %6.1f W  SM %5.0f MHz  %.4f ms a call\n", cls,
            point, s->power_w, s->clock_mhz, s->call_ms);
}

static rt_status measure_class(probe_ctx *c, rt_nvml *nv, power_class *k, spin_call *sp,
                               double run_ms, ms_error *err)
{
    double one;
    rt_status st = time_calls(c, k->fn, k->arg, 3, &one, err);
    if (st != RT_OK) return st;
    sp->cycles = 2000000; /* ~1 ms a spin: a second of them keeps the clock up */
    for (int i = 0; i < 1000 && st == RT_OK; i++) st = run_spin(sp, err);
    double busy;
    if (st == RT_OK) st = timed_points(c, nv, k->fn, k->arg, 16, NULL, &k->burst, &busy, err);
    k->burst.power_w = 0; /* a one-second average: not the burst's */
    spin_call gap = *sp;
    gap.cycles = (long long)(3.0 * one * 1.98e6); /* ~3 calls' time at the maximum clock */
    int nduty = (int)(3000.0 / (4.0 * one)) + 2;
    if (st == RT_OK)
        st = timed_points(c, nv, k->fn, k->arg, nduty, &gap, &k->duty, &k->duty_busy, err);
    if (st == RT_OK) st = sustain(c, nv, k->fn, k->arg, one, run_ms, &k->sus, err);
    if (st != RT_OK) return st;
    class_raw(c, k->name, "burst", &k->burst);
    class_raw(c, k->name, "duty", &k->duty);
    class_raw(c, k->name, "sustained", &k->sus);
    char w[96];
    snprintf(w, sizeof w, "busy_fraction:%s.duty", k->name);
    raw(c, w, 0, k->duty_busy, "fraction");
    return RT_OK;
}

/* A class's figures from its points: the time exponent s fitted over the three; its power
 * above idle at the maximum clock D from the duty cycle, (P_duty - idle) / busy, where that
 * ran at the maximum clock, and its clock exponent from the sustained point,
 * (P - idle) = D x^e with x its clock over the maximum (e = default_exp and D from the
 * sustained point alone where the limit did not hold it back or the duty cycle ran
 * throttled); the energy of one unit of work there, D t(1) / work with t(1) = t x^s; the
 * burst's clock as the clock of the probed rates. */
static void class_figures(power_class *k, double idle_w, double fmax, double default_exp)
{
    power_sample pts[3] = {k->burst, k->duty, k->sus};
    k->time_exp = fit_time_exp(pts, 3);
    double x = k->sus.clock_mhz / fmax, ds = k->sus.power_w - idle_w, d;
    if (ds < 0) ds = 0;
    double dd = k->duty_busy > 0.05 ? (k->duty.power_w - idle_w) / k->duty_busy : 0;
    k->clock_exp = 0;
    if (x < 0.98 && k->duty.clock_mhz >= 0.98 * fmax && dd > ds) {
        d = dd;
        k->clock_exp = log(ds / dd) / log(x);
    } else {
        d = x > 0 ? ds / pow(x, default_exp) : ds;
    }
    double t1_s = k->sus.call_ms * 1e-3 * pow(x, k->time_exp);
    k->j_per_work = k->work > 0 ? d * t1_s / k->work : 0;
    k->ref_clock = k->burst.clock_mhz / fmax;
}

/* The controller's time scale: after a second of a spinning block, NR GEMMs back to back,
 * each between its own events; the time from the first call's start until a run of 5
 * calls averages half way from the burst's call time to the sustained one. Every call's
 * start and time go to the raw CSV. */
static rt_status power_response(probe_ctx *c, power_class *g, spin_call *sp, double *half_ms,
                                ms_error *err)
{
    enum { NR = 300 };
    static cudaEvent_t ev[NR + 1];
    double t[NR], at[NR];
    rt_status st = RT_OK;
    for (int i = 0; i <= NR; i++) RT_CHECK(err, cudaEventCreate(&ev[i]));
    sp->cycles = 2000000;
    for (int i = 0; i < 1000 && st == RT_OK; i++) st = run_spin(sp, err);
    RT_CHECK(err, cudaEventRecord(ev[0], c->s0));
    for (int i = 0; i < NR && st == RT_OK; i++) {
        st = g->fn(g->arg, err);
        if (st == RT_OK) RT_CHECK(err, cudaEventRecord(ev[i + 1], c->s0));
    }
    if (st != RT_OK) return st;
    RT_CHECK(err, cudaEventSynchronize(ev[NR]));
    double mid = 0.5 * (g->burst.call_ms + g->sus.call_ms);
    *half_ms = 0;
    for (int i = 0; i < NR; i++) {
        float a, b;
        RT_CHECK(err, cudaEventElapsedTime(&a, ev[0], ev[i]));
        RT_CHECK(err, cudaEventElapsedTime(&b, ev[i], ev[i + 1]));
        at[i] = a;
        t[i] = b;
        char w[64];
        snprintf(w, sizeof w, "gemm_response_ms:%.3f", a);
        raw(c, w, 0, b, "ms");
    }
    for (int i = 0; i + 5 <= NR && *half_ms == 0; i++) {
        double m = (t[i] + t[i + 1] + t[i + 2] + t[i + 3] + t[i + 4]) / 5;
        if (m >= mid) *half_ms = at[i] > 0 ? at[i] : t[i];
    }
    for (int i = 0; i <= NR; i++) cudaEventDestroy(ev[i]);
    fprintf(stderr, "probe: power response: half of the GEMMs' slowdown after %.1f ms\n", *half_ms);
    return RT_OK;
}

typedef struct power_bufs {
    kn_ctx *k;
    kn_bf16 *buf;
    float *lse;
    unsigned *sink;
} power_bufs;

static void power_bufs_free(power_bufs *b)
{
    cudaFree(b->buf);
    cudaFree(b->lse);
    cudaFree(b->sink);
    kn_ctx_free(b->k);
}

/* The shapes: GEMMs of a 4096-wide layer at 8K tokens (8192 x 16384 x 4096, the probe's GEMM
 * layer); memsim's causal attention over 16 heads x 16K tokens, head dim 128; the GeLU over
 * 8192 x 16384. The idle figure: a spinning block, back to back. */
static rt_status probe_power_classes(probe_ctx *c, rt_nvml *nv, double run_ms, double fmax,
                                     double clock_exp, power_bufs *b, power_class cls[4],
                                     double *idle_w, double *half_ms, ms_error *err)
{
    const size_t S = 16384, H = 16, D = 128, e = S * H * D;
    const size_t GM = 8192, GN = 16384, GK = 4096;
    size_t need = 8 * e > GM * GK + GK * GN + GM * GN ? 8 * e : GM * GK + GK * GN + GM * GN;
    rt_status st = kn_ctx_new(c->s0, &b->k, err);
    if (st != RT_OK) return st;
    if ((st = kn_ctx_reserve(b->k, 0, 0, S * H, S, err)) != RT_OK) return st;
    RT_CHECK(err, cudaMalloc(&b->buf, need * 2));
    RT_CHECK(err, cudaMalloc(&b->lse, S * H * sizeof *b->lse));
    RT_CHECK(err, cudaMalloc(&b->sink, sizeof *b->sink));
    fill_bf16<<<1024, 256, 0, c->s0>>>((__nv_bfloat16 *)b->buf, need, 7u);
    RT_CHECK(err, cudaStreamSynchronize(c->s0));
    spin_call sp = {c->s0, b->sink, 2000000};
    gemm_call g = {b->k, 0, 0, 0, GM, GN, GK, b->buf, b->buf + GM * GK,
                    b->buf + GM * GK + GK * GN};
    attn_call af = {b->k, 0, 1, H, S, D, b->buf, b->buf + e, b->buf + 2 * e, b->buf + 3 * e,
                     b->buf + 4 * e, b->buf + 5 * e, b->buf + 6 * e, b->buf + 7 * e, b->lse};
    attn_call ab = af;
    ab.bwd = 1;
    gelu_call ge = {b->k, b->buf + GM * GN, b->buf, GM, GN};
    double afl = 2.0 * (double)S * (double)S * (double)H * (double)D;
    power_class init[4] = {
        {"gemm", run_gemm, &g, 2.0 * GM * GN * (double)GK, 1},
        {"rt_attn_fwd", run_attn, &af, afl, 1},
        {"rt_attn_bwd", run_attn, &ab, 2.5 * afl, 1},
        {"mem", run_gelu, &ge, 2.0 * 2.0 * GM * (double)GN, 0},
    };
    power_sample idle;
    if ((st = sustain(c, nv, run_spin, &sp, 1.0, run_ms, &idle, err)) != RT_OK) return st;
    class_raw(c, "idle", "sustained", &idle);
    *idle_w = idle.power_w;
    for (int i = 0; i < 4; i++) {
        cls[i] = init[i];
        if ((st = measure_class(c, nv, &cls[i], &sp, run_ms, err)) != RT_OK) return st;
        class_figures(&cls[i], idle.power_w, fmax, clock_exp);
    }
    /* a GEMM of the validation's 2048-wide layer (8K tokens, fc1: 8192 x 8192 x 2048), for
     * the raw CSV alone: does the energy of a FLOP depend on the shape? */
    gemm_call gs = {b->k, 0, 0, 0, 8192, 8192, 2048, b->buf, b->buf + GM * GK,
                    b->buf + GM * GK + GK * GN};
    power_class small = {"gemm_2048", run_gemm, &gs, 2.0 * 8192.0 * 8192.0 * 2048.0, 1};
    if ((st = measure_class(c, nv, &small, &sp, run_ms, err)) != RT_OK) return st;
    class_figures(&small, idle.power_w, fmax, clock_exp);
    raw(c, "time_exp:gemm_2048", 0, small.time_exp, "exponent");
    raw(c, "clock_exp:gemm_2048", 0, small.clock_exp, "exponent");
    raw(c, "J_per_work:gemm_2048", small.work, small.j_per_work, "J/FLOP");
    return power_response(c, &cls[0], &sp, half_ms, err);
}

static void set_class(const power_class *k, double *j, double *s, double *e, double *ref)
{
    *e = k->clock_exp;
    *j = k->j_per_work;
    *s = k->time_exp;
    *ref = k->ref_clock;
}

static rt_status probe_power(probe_ctx *c, machine_t *m, double run_ms, ms_error *err)
{
    int dev = 0;
    char pci[64], why[256];
    RT_CHECK(err, cudaGetDevice(&dev));
    RT_CHECK(err, cudaDeviceGetPCIBusId(pci, sizeof pci, dev));
    rt_nvml *nv = NULL;
    if (rt_nvml_new(pci, &nv, why, sizeof why)) return power_fail(err, RT_ERR_NODEV, why);
    double fmax = 0, limit = 0;
    if (rt_nvml_sm_clock_max_mhz(nv, &fmax) || rt_nvml_power_limit_w(nv, &limit)) {
        rt_nvml_free(nv);
        return power_fail(err, RT_ERR_NODEV, "NVML gives no maximum SM clock or power limit");
    }
    double ex = m->power_clock_exp > 0 ? m->power_clock_exp : 3.0, idle_w = 0, half_ms = 0;
    power_bufs b = {0};
    power_class k[4];
    rt_status st = probe_power_classes(c, nv, run_ms, fmax, ex, &b, k, &idle_w, &half_ms, err);
    power_bufs_free(&b);
    rt_nvml_free(nv);
    if (st != RT_OK) return st;
    m->power_limit_w = limit;
    m->power_idle_w = idle_w;
    if (half_ms > 0) m->power_window_ms = half_ms;
    set_class(&k[0], &m->power_gemm_j, &m->power_gemm_time_exp, &m->power_gemm_clock_exp,
              &m->power_gemm_ref_clock);
    set_class(&k[1], &m->power_rt_attn_fwd_j, &m->power_rt_attn_fwd_time_exp,
              &m->power_rt_attn_fwd_clock_exp, &m->power_rt_attn_fwd_ref_clock);
    set_class(&k[2], &m->power_rt_attn_bwd_j, &m->power_rt_attn_bwd_time_exp,
              &m->power_rt_attn_bwd_clock_exp, &m->power_rt_attn_bwd_ref_clock);
    set_class(&k[3], &m->power_mem_j, &m->power_mem_time_exp, &m->power_mem_clock_exp,
              &m->power_mem_ref_clock);
    for (int i = 0; i < 4; i++) {
        char w[64];
        snprintf(w, sizeof w, "time_exp:%s", k[i].name);
        raw(c, w, 0, k[i].time_exp, "exponent");
        snprintf(w, sizeof w, "clock_exp:%s", k[i].name);
        raw(c, w, 0, k[i].clock_exp, "exponent");
        snprintf(w, sizeof w, "J_per_work:%s", k[i].name);
        raw(c, w, k[i].work, k[i].j_per_work, i == 3 ? "J/byte" : "J/FLOP");
    }
    raw(c, "power_limit_W", 0, limit, "W");
    raw(c, "sm_clock_max_MHz", 0, fmax, "MHz");
    return RT_OK;
}

/* ---- the runtime's host AdamW (rt.host_adam_params_per_s) ---- */

typedef struct host_arrays {
    kn_bf16 *p;
    float *master, *m, *v, *g;
} host_arrays;

static void host_fill(void *ctx, size_t lo, size_t hi)
{
    host_arrays *a = (host_arrays *)ctx;
    for (size_t i = lo; i < hi; i++) {
        a->p[i] = 0x3c00; /* bf16 0.0078125 */
        a->master[i] = 0.04f * kref_uniform(1, i); /* random mantissas, as a model's */
        a->m[i] = a->v[i] = 0.0f;
        a->g[i] = 1e-3f * kref_uniform(2, i);
    }
}

/* New gradients before each timed pass, as the D2H copies bring them before each step. */
static void host_grad_fill(void *ctx, size_t lo, size_t hi)
{
    host_arrays *a = (host_arrays *)ctx;
    for (size_t i = lo; i < hi; i++) a->g[i] = 1e-3f * kref_uniform(3, i);
}

/* The step memsim run gives every host optimizer group of an offload plan (model_rt.c:
 * AdamW on the fp32 master and moments, the bf16 parameter written back, then the fp32
 * gradient zeroed), over n parameters of host memory on the same thread pool (the online
 * CPUs less one), first-touched by it, with random weights and new random gradients before
 * every timed pass (values, not patterns: the step's speed may depend on them). The
 * generator times `*.optim.host` ops with this rate when the trace is for the runtime's
 * kernels (--gen kernels=runtime). */
static rt_status probe_host_adam(probe_ctx *c, machine_t *m, int quick, ms_error *err)
{
    size_t n = (size_t)(quick ? 16 : 64) << 20;
    host_arrays a = {(kn_bf16 *)malloc(n * sizeof(kn_bf16)), (float *)malloc(n * 4),
                     (float *)malloc(n * 4), (float *)malloc(n * 4), (float *)malloc(n * 4)};
    rt_pool *pool = NULL;
    rt_status st = RT_OK;
    if (!a.p || !a.master || !a.m || !a.v || !a.g)
        st = rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "malloc", "host AdamW arrays");
    if (st == RT_OK) st = rt_pool_new(0, &pool, err);
    if (st == RT_OK) {
        rt_pool_for(pool, n, 65536, host_fill, &a);
        kn_adamw_cfg cfg;
        kn_adamw_default(&cfg);
        enum { REPS = 7 };
        double t[REPS];
        int reps = quick ? 3 : REPS;
        for (int r = 0; r <= reps; r++) { /* the first pass warms up */
            cfg.step = r + 1;
            if (r) rt_pool_for(pool, n, 65536, host_grad_fill, &a);
            double t0 = host_now_us();
            kn_adamw_host_pool(pool, a.p, a.master, a.m, a.v, a.g, n, &cfg);
            kn_zero_host_pool(pool, a.g, n);
            if (r) t[r - 1] = host_now_us() - t0;
        }
        double us = median(t, reps), lo = t[0], hi = t[0];
        for (int r = 1; r < reps; r++) {
            if (t[r] < lo) lo = t[r];
            if (t[r] > hi) hi = t[r];
        }
        m->rt_host_adam_params_per_s = (double)n / (us * 1e-6);
        raw(c, "rt_host_adam_params_per_s", (double)n, m->rt_host_adam_params_per_s, "params/s");
        /* the spread over the passes: a shared host's step varies, and a report should be
         * able to tell that noise from a model error */
        raw(c, "rt_host_adam_params_per_s_slowest", (double)n, (double)n / (hi * 1e-6), "params/s");
        raw(c, "rt_host_adam_params_per_s_fastest", (double)n, (double)n / (lo * 1e-6), "params/s");
        raw(c, "rt_host_adam_threads", 0, rt_pool_threads(pool), "threads");
        fprintf(stderr, "probe: host AdamW %.3g parameters/s on %d threads (passes %.3g to %.3g)\n",
                m->rt_host_adam_params_per_s, rt_pool_threads(pool), (double)n / (hi * 1e-6),
                (double)n / (lo * 1e-6));
    }
    rt_pool_free(pool);
    free(a.p);
    free(a.master);
    free(a.m);
    free(a.v);
    free(a.g);
    return st;
}

rt_status probe_host_adam_run(machine_profile *p, FILE *raw_csv, int quick, ms_error *err)
{
    probe_ctx c;
    memset(&c, 0, sizeof c);
    c.raw = raw_csv;
    fprintf(raw_csv, "what,size_bytes,value,unit\n");
    rt_status st = probe_host_adam(&c, &p->m, quick, err);
    return st;
}

/* Opens the probe's streams and events on GPU 0 and sets p's GPU name, memory and peak
 * (*peak: the dense bf16 peak the efficiencies are fractions of). */
static rt_status probe_open(probe_ctx *c, machine_t *m, FILE *raw_csv, int quick, double *peak,
                            ms_error *err)
{
    memset(c, 0, sizeof *c);
    c->raw = raw_csv;
    c->reps = quick ? 5 : 20;
    cudaDeviceProp prop;
    int drv = 0;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        ms_fail(err, MS_ERR_UNSUPPORTED, "no CUDA device is usable: %s",
                cudaGetErrorString(cudaGetLastError()));
        return RT_ERR_NODEV;
    }
    cudaDriverGetVersion(&drv);
    if (cuInit(0) != CUDA_SUCCESS) {
        ms_fail(err, MS_ERR_UNSUPPORTED, "cuInit failed (driver %d)", drv);
        return RT_ERR_NODEV;
    }
    snprintf(m->gpu_name, sizeof m->gpu_name, "%s", prop.name);
    m->gpu_hbm_bytes = prop.totalGlobalMem;
    /* Datasheet peaks by chip (dense bf16); unknown chips keep what the profile had. */
    int hopper = prop.major == 9;
    *peak = hopper ? 989.4e12 : (m->gpu_peak_bf16_flops > 0 ? m->gpu_peak_bf16_flops : 312e12);
    m->gpu_peak_bf16_flops = *peak;
    fprintf(raw_csv, "what,size_bytes,value,unit\n");
    fprintf(stderr, "probe: %s, %d SMs, %.1f GiB, driver %d\n", prop.name,
            prop.multiProcessorCount, prop.totalGlobalMem / GiB, drv);
    RT_CHECK(err, cudaStreamCreateWithFlags(&c->s0, cudaStreamNonBlocking));
    RT_CHECK(err, cudaStreamCreateWithFlags(&c->s1, cudaStreamNonBlocking));
    RT_CHECK(err, cudaEventCreate(&c->e0));
    RT_CHECK(err, cudaEventCreate(&c->e1));
    RT_CHECK(err, cudaEventCreate(&c->e2));
    RT_CHECK(err, cudaEventCreate(&c->e3));
    return RT_OK;
}

static void probe_close(probe_ctx *c)
{
    if (c->e0) cudaEventDestroy(c->e0);
    if (c->e1) cudaEventDestroy(c->e1);
    if (c->e2) cudaEventDestroy(c->e2);
    if (c->e3) cudaEventDestroy(c->e3);
    if (c->s0) cudaStreamDestroy(c->s0);
    if (c->s1) cudaStreamDestroy(c->s1);
}

rt_status probe_run(machine_profile *p, FILE *raw_csv, int quick, ms_error *err)
{
    probe_ctx c;
    machine_t *m = &p->m;
    double peak = 0;
    rt_status st = probe_open(&c, m, raw_csv, quick, &peak, err);
    if (st != RT_OK) goto done;
    fprintf(stderr, "probe: host link\n");
    if ((st = probe_link(&c, m, err)) != RT_OK) goto done;
    fprintf(stderr, "probe: direct host access\n");
    if ((st = probe_dha(&c, m, err)) != RT_OK) goto done;
    fprintf(stderr, "probe: cudaMalloc / cudaFree\n");
    if ((st = probe_malloc(&c, m, err)) != RT_OK) goto done;
    fprintf(stderr, "probe: VMM\n");
    if ((st = probe_vmm(&c, m, err)) != RT_OK) goto done;
    fprintf(stderr, "probe: GEMM\n");
    if ((st = probe_gemm(&c, m, peak, err)) != RT_OK) goto done;
    fprintf(stderr, "probe: GEMM over a transformer layer's shapes\n");
    if ((st = probe_gemm_layer(&c, m, peak, quick, err)) != RT_OK) goto done;
    fprintf(stderr, "probe: attention (memsim's kernels)\n");
    if ((st = probe_attn(&c, m, peak, quick, err)) != RT_OK) goto done;
    fprintf(stderr, "probe: host AdamW (the runtime's host optimizer step)\n");
    if ((st = probe_host_adam(&c, m, quick, err)) != RT_OK) goto done;
    {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        m->gpu_reserved_bytes = tot - fr; /* what the context and cuBLAS took */
    }
done:
    probe_close(&c);
    return st;
}

rt_status probe_attn_run(machine_profile *p, FILE *raw_csv, int quick, double warm_ms,
                         ms_error *err)
{
    probe_ctx c;
    double peak = 0;
    rt_status st = probe_open(&c, &p->m, raw_csv, quick, &peak, err);
    c.warm_ms = warm_ms;
    if (st == RT_OK) {
        fprintf(stderr, "probe: attention (memsim's kernels)\n");
        st = probe_attn(&c, &p->m, peak, quick, err);
    }
    probe_close(&c);
    return st;
}

rt_status probe_power_run(machine_profile *p, FILE *raw_csv, double run_ms, ms_error *err)
{
    probe_ctx c;
    double peak = 0;
    rt_status st = probe_open(&c, &p->m, raw_csv, 0, &peak, err);
    if (st == RT_OK) {
        fprintf(stderr, "probe: board power under each kernel class, %.0f ms each\n", run_ms);
        st = probe_power(&c, &p->m, run_ms, err);
    }
    probe_close(&c);
    return st;
}

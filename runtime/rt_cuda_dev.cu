/* rt_cuda_dev.cu — the schedule executor's CUDA device (rt_cuda_dev_new in rt_exec.h):
 * streams, events, copies, the calibrated spin kernel, DHA streaming reads, host work on a
 * CPU thread in stream order, swap checksums on the GPU and the spin kernel's calibration,
 * behind rt_dev_ops; the issue loop that drives it is rt_exec.c. Used by runtime/rt_run.c
 * (`memsim run`) and the GPU tests. C-style CUDA. */
#include "runtime/rt_exec.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "runtime/rt_exec_int.h"
}

typedef struct touch_set {
    unsigned long long p[RT_TOUCH_MAX], n[RT_TOUCH_MAX];
    int k;
} touch_set;

__device__ unsigned g_rt_sink;

static __device__ __forceinline__ unsigned long long gtimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Thread 0 of every block spins on the global timer (nanoseconds) for spin_ns; max_clk
 * cycles bound the spin should the timer not advance. Block 0's next threads read-modify-
 * write the first and last 16 bytes of each touched range. With src / dst, all threads first
 * stream over mapped pinned host memory (DHA). */
__global__ void rt_work_kernel(unsigned long long spin_ns, unsigned long long max_clk,
                               touch_set t, const uint4 *src, unsigned long long nr, uint4 *dst,
                               unsigned long long nw)
{
    unsigned long long t0 = gtimer();
    long long c0 = clock64();
    if (blockIdx.x == 0 && threadIdx.x >= 1 && (int)threadIdx.x <= 2 * t.k) {
        int i = ((int)threadIdx.x - 1) / 2, last = ((int)threadIdx.x - 1) & 1;
        unsigned long long n = t.n[i];
        if (n >= 16) {
            uint4 *q = (uint4 *)(t.p[i] + (last ? ((n - 16) & ~15ULL) : 0));
            uint4 v = *q;
            v.x += 1;
            *q = v;
        } else if (n && !last) {
            unsigned char *q = (unsigned char *)t.p[i];
            *q = (unsigned char)(*q + 1);
        }
    }
    if (nr || nw) {
        unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
        unsigned long long i0 = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
        unsigned acc = 0;
        for (unsigned long long i = i0; i < nr; i += stride) {
            uint4 v = src[i];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        for (unsigned long long i = i0; i < nw; i += stride)
            dst[i] = make_uint4((unsigned)i, acc, 0u, 0u);
        if (acc == 0x9e3779b9u) g_rt_sink = acc; /* keeps the reads */
    }
    if (threadIdx.x == 0)
        while (gtimer() - t0 < spin_ns && (unsigned long long)(clock64() - c0) < max_clk) {
        }
}

/* rt_checksum of n bytes at p, stream position pos onwards, added to *slot: 8-byte words
 * when p and pos are both 8-aligned (the usual case: blocks are 512-aligned and copy pieces
 * whole rows), bytes otherwise and for the tail. Integer sums, so the atomicAdd of each
 * block's partial sum is deterministic. */
__global__ void rt_sum_kernel(unsigned long long *slot, const unsigned char *p,
                              unsigned long long n, unsigned long long pos)
{
    unsigned long long acc = 0, head = 0;
    unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    if (!(((uintptr_t)p | pos) & 7)) {
        const unsigned long long *w = (const unsigned long long *)p;
        unsigned long long nw = n >> 3, w0 = pos >> 3;
        for (unsigned long long i = tid; i < nw; i += stride) acc += w[i] * (2 * (w0 + i) + 1);
        head = nw << 3;
    }
    for (unsigned long long j = head + tid; j < n; j += stride) {
        unsigned long long q = pos + j;
        acc += ((unsigned long long)p[j] << (8 * (q & 7))) * (2 * (q >> 3) + 1);
    }
    __shared__ unsigned long long part[32];
    for (int o = 16; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < (blockDim.x + 31) / 32 ? part[threadIdx.x] : 0;
        for (int o = 16; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0 && acc) atomicAdd(slot, acc);
    }
}

typedef CUresult (*fn_waitval)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

typedef struct hjob {
    cudaEvent_t ev;             /* recorded on the stream where the work belongs */
    unsigned long long ns;
    uint32_t seq;
    void (*fn)(void *);         /* real host work instead of the spin, or NULL */
    void *arg;
} hjob;

/* RT_HOST_THREAD: the worker and its FIFO of jobs. */
typedef struct hworker {
    int on, stop;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hjob *q;
    size_t head, n, cap;
    uint32_t *flag;             /* pinned, mapped: the last finished job's seq */
    CUdeviceptr flag_dev;
    uint32_t issued;
    fn_waitval waitval;
} hworker;

typedef struct cuda_dev {
    rt_dev_ops ops;
    int device, sms;
    int calibrated;
    rt_calib calib;
    uint64_t map_host, map_dev;     /* last host -> device pointer translation */
    rt_host_mode host_mode;
    hworker hw;
    unsigned long long *sums;       /* verify_swaps: one slot per copy (device memory) */
    size_t n_sums;
} cuda_dev;

static rt_status cu_stream_new(void *ctx, void **s, ms_error *err)
{
    (void)ctx;
    cudaStream_t st;
    RT_CHECK(err, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *s = (void *)st;
    return RT_OK;
}

static void cu_stream_free(void *ctx, void *s)
{
    (void)ctx;
    cudaStreamDestroy((cudaStream_t)s);
}

static rt_status cu_event_new(void *ctx, int timing, void **e, ms_error *err)
{
    (void)ctx;
    cudaEvent_t ev;
    RT_CHECK(err, cudaEventCreateWithFlags(&ev,
                                           timing ? cudaEventDefault : cudaEventDisableTiming));
    *e = (void *)ev;
    return RT_OK;
}

static void cu_event_free(void *ctx, void *e)
{
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)e);
}

static rt_status cu_record(void *ctx, void *e, void *s, ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
    return RT_OK;
}

static rt_status cu_wait(void *ctx, void *s, void *e, ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0));
    return RT_OK;
}

static int cu_query(void *ctx, void *e, ms_error *err)
{
    (void)ctx;
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaSuccess) return 1;
    if (r == cudaErrorNotReady) return 0;
    rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaEventQuery", cudaGetErrorString(r));
    return -1;
}

/* Polls with a short back-off: never blocks in the driver, so a hung GPU cannot hang the
 * host past the timeout. */
static int cu_host_wait(void *ctx, void *e, double timeout_s, ms_error *err)
{
    double end = rt_mono_s() + timeout_s;
    for (unsigned spin = 0;; spin++) {
        int q = cu_query(ctx, e, err);
        if (q) return q;
        if (rt_mono_s() > end) return 0;
        if (spin < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

static rt_status cu_elapsed(void *ctx, void *e0, void *e1, float *ms, ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaEventElapsedTime(ms, (cudaEvent_t)e0, (cudaEvent_t)e1));
    return RT_OK;
}

static rt_status cu_copy(void *ctx, void *s, uint64_t dst, uint64_t src, uint64_t bytes, int d2h,
                         ms_error *err)
{
    (void)ctx;
    RT_CHECK(err, cudaMemcpyAsync((void *)(uintptr_t)dst, (const void *)(uintptr_t)src,
                                  (size_t)bytes,
                             d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                             (cudaStream_t)s));
    return RT_OK;
}

static rt_status launched(ms_error *err)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && e != cudaErrorNotReady)
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "rt_work_kernel<<<>>>",
                            cudaGetErrorString(e));
    return RT_OK;
}

static unsigned long long spin_ns_for(const cuda_dev *c, double dur_us)
{
    double us = c->calibrated ? (dur_us - c->calib.overhead_us) / c->calib.slope : dur_us;
    return us > 0 ? (unsigned long long)(us * 1e3 + 0.5) : 0ULL;
}

static unsigned long long max_clk_for(unsigned long long ns) { return ns * 4ULL + 4000000ULL; }

static rt_status host_ptr(cuda_dev *c, uint64_t host, uint64_t *dev, ms_error *err)
{
    if (host != c->map_host) {
        void *p = NULL;
        RT_CHECK(err, cudaHostGetDevicePointer(&p, (void *)(uintptr_t)host, 0));
        c->map_host = host;
        c->map_dev = (uint64_t)(uintptr_t)p;
    }
    *dev = c->map_dev;
    return RT_OK;
}

static rt_status cu_kernel(void *ctx, void *s, const rt_kernel_args *k, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    touch_set t;
    memset(&t, 0, sizeof t);
    t.k = k->n_touch < RT_TOUCH_MAX ? k->n_touch : RT_TOUCH_MAX;
    for (int i = 0; i < t.k; i++) {
        t.p[i] = k->touch_addr[i];
        t.n[i] = k->touch_bytes[i];
    }
    unsigned long long ns = spin_ns_for(c, k->dur_us);
    const uint4 *src = NULL;
    uint4 *dst = NULL;
    uint64_t dp;
    if (k->dha_read_bytes) {
        RT_TRY(host_ptr(c, k->dha_read_host, &dp, err));
        src = (const uint4 *)(uintptr_t)dp;
    }
    if (k->dha_write_bytes) {
        RT_TRY(host_ptr(c, k->dha_write_host, &dp, err));
        dst = (uint4 *)(uintptr_t)dp;
    }
    int dha = src || dst;
    rt_work_kernel<<<dha ? c->sms * 4 : c->sms, dha ? 512 : 64, 0, (cudaStream_t)s>>>(
        ns, max_clk_for(ns), t, src, k->dha_read_bytes / 16, dst, k->dha_write_bytes / 16);
    return launched(err);
}

static void CUDART_CB host_spin(void *arg)
{
    unsigned long long ns = (unsigned long long)(uintptr_t)arg;
    double end = rt_mono_s() + (double)ns * 1e-9;
    if (ns > 2000000ULL) { /* sleep most of a long wait, spin the rest for accuracy */
        unsigned long long sl = ns - 1000000ULL;
        struct timespec ts = {(time_t)(sl / 1000000000ULL), (long)(sl % 1000000000ULL)};
        nanosleep(&ts, NULL);
    }
    while (rt_mono_s() < end) {
    }
}

static void *worker_main(void *arg)
{
    cuda_dev *c = (cuda_dev *)arg;
    hworker *w = &c->hw;
    cudaSetDevice(c->device);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->stop && w->head == w->n) pthread_cond_wait(&w->cv, &w->mu);
        if (w->head == w->n) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        hjob j = w->q[w->head++];
        if (w->head == w->n) w->head = w->n = 0;
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        for (unsigned spin = 0; !stop; spin++) {
            cudaError_t e = cudaEventQuery(j.ev);
            if (e != cudaErrorNotReady) break; /* reached, or an error: release the stream */
            if (spin < 256) {
                sched_yield();
            } else {
                struct timespec ts = {0, 5000};
                nanosleep(&ts, NULL);
            }
            pthread_mutex_lock(&w->mu);
            stop = w->stop;
            pthread_mutex_unlock(&w->mu);
        }
        if (!stop && j.fn) j.fn(j.arg);
        else if (!stop) host_spin((void *)(uintptr_t)j.ns);
        /* Release the stream before any CUDA call: cudaEventDestroy takes the driver's lock
         * for writing, and the issuing thread may hold it for reading inside a launch that
         * waits for room in a queue only this stream's progress frees (seen on an H200 with
         * GO-MemFerry's real kernels: the launch spinning, the GPU idle on this wait). */
        __atomic_store_n(w->flag, j.seq, __ATOMIC_RELEASE);
        cudaEventDestroy(j.ev);
    }
    return NULL;
}

static rt_status worker_start(cuda_dev *c, ms_error *err)
{
    hworker *w = &c->hw;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fp = NULL;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fp, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess || q != cudaDriverEntryPointSuccess ||
        !fp) {
        cudaGetLastError();
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cuStreamWaitValue32",
                            "the driver does not provide this entry point");
    }
    w->waitval = (fn_waitval)fp;
    void *h = NULL, *d = NULL;
    RT_CHECK(err, cudaHostAlloc(&h, sizeof(uint32_t), cudaHostAllocPortable | cudaHostAllocMapped));
    cudaError_t e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(h);
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaHostGetDevicePointer",
                            cudaGetErrorString(e));
    }
    w->flag = (uint32_t *)h;
    *w->flag = 0;
    w->issued = 0;
    w->flag_dev = (CUdeviceptr)(uintptr_t)d;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->stop = 0;
    if (pthread_create(&w->th, NULL, worker_main, c) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        cudaFreeHost(h);
        w->flag = NULL;
        return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "pthread_create",
                            "cannot start the host-work thread");
    }
    w->on = 1;
    return RT_OK;
}

/* Stops the worker: jobs not started are released without their work, so no stream waits
 * forever on the counter. */
static void worker_stop(cuda_dev *c)
{
    hworker *w = &c->hw;
    if (!w->on) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    cudaFreeHost(w->flag);
    free(w->q);
    memset(w, 0, sizeof *w);
}

static rt_status host_thread_work(cuda_dev *c, cudaStream_t s, unsigned long long ns,
                                  void (*fn)(void *), void *arg, ms_error *err)
{
    hworker *w = &c->hw;
    cudaEvent_t ev;
    RT_CHECK(err, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, s);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaEventRecord",
                            cudaGetErrorString(e));
    }
    pthread_mutex_lock(&w->mu);
    if (ms_grow((void **)&w->q, &w->cap, w->n + 1, sizeof *w->q) != MS_OK) {
        pthread_mutex_unlock(&w->mu);
        cudaEventDestroy(ev);
        return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "host work", "out of memory");
    }
    uint32_t seq = ++w->issued;
    hjob j = {ev, ns, seq, fn, arg};
    w->q[w->n++] = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    CUresult r = w->waitval((CUstream)s, w->flag_dev, seq, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
        char msg[64];
        snprintf(msg, sizeof msg, "CUDA driver error %d", (int)r);
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cuStreamWaitValue32", msg);
    }
    return RT_OK;
}

static rt_status cu_host_work(void *ctx, void *s, double dur_us, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    unsigned long long ns = dur_us > 0 ? (unsigned long long)(dur_us * 1e3) : 0ULL;
    /* a driver without stream memory operations falls back to the callback */
    if (c->host_mode == RT_HOST_THREAD && !c->hw.on && worker_start(c, err) != RT_OK)
        c->host_mode = RT_HOST_CALLBACK;
    if (c->host_mode == RT_HOST_THREAD) return host_thread_work(c, (cudaStream_t)s, ns, NULL, NULL,
                                                                err);
    RT_CHECK(err, cudaLaunchHostFunc((cudaStream_t)s, host_spin, (void *)(uintptr_t)ns));
    return RT_OK;
}

/* Real host work (a host optimizer step) in the stream's order, on the same thread as the
 * spun host work: the worker, or the driver's callback thread. */
static rt_status cu_host_call(void *ctx, void *s, void (*fn)(void *), void *arg, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (c->host_mode == RT_HOST_THREAD && !c->hw.on && worker_start(c, err) != RT_OK)
        c->host_mode = RT_HOST_CALLBACK;
    if (c->host_mode == RT_HOST_THREAD) return host_thread_work(c, (cudaStream_t)s, 0, fn, arg,
                                                                err);
    RT_CHECK(err, cudaLaunchHostFunc((cudaStream_t)s, fn, arg));
    return RT_OK;
}

static rt_status cu_host_map(void *ctx, uint64_t host, uint64_t *dev, ms_error *err)
{
    (void)ctx;
    void *p = NULL;
    RT_CHECK(err, cudaHostGetDevicePointer(&p, (void *)(uintptr_t)host, 0));
    *dev = (uint64_t)(uintptr_t)p;
    return RT_OK;
}

/* ---- swap checksums ---- */

static rt_status cu_sum_begin(void *ctx, size_t n, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (c->sums) cudaFree(c->sums);
    c->sums = NULL;
    c->n_sums = 0;
    size_t bytes = (n ? n : 1) * sizeof *c->sums;
    RT_CHECK(err, cudaMalloc((void **)&c->sums, bytes));
    c->n_sums = n;
    RT_CHECK(err, cudaMemset(c->sums, 0, bytes));
    RT_CHECK(err, cudaDeviceSynchronize()); /* the run's streams do not wait for the null stream */
    return RT_OK;
}

static rt_status cu_sum_add(void *ctx, void *s, size_t k, uint64_t dev, uint64_t bytes,
                            uint64_t pos, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (k >= c->n_sums)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "cu_sum_add", "no such slot");
    if (!bytes) return RT_OK;
    unsigned long long blocks = (bytes + 256ULL * 64 - 1) / (256ULL * 64);
    unsigned long long most = (unsigned long long)(c->sms > 0 ? c->sms : 1) * 4;
    if (blocks > most) blocks = most;
    rt_sum_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)s>>>(
        c->sums + k, (const unsigned char *)(uintptr_t)dev, bytes, pos);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "rt_sum_kernel<<<>>>",
                            cudaGetErrorString(e));
    return RT_OK;
}

static rt_status cu_sum_read(void *ctx, uint64_t *out, size_t n, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (n > c->n_sums)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "cu_sum_read", "no such slot");
    if (n) RT_CHECK(err, cudaMemcpy(out, c->sums, n * sizeof *out, cudaMemcpyDeviceToHost));
    return RT_OK;
}

static void cu_sum_end(void *ctx)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (c->sums) cudaFree(c->sums);
    c->sums = NULL;
    c->n_sums = 0;
}

void rt_cuda_dev_set_host_mode(rt_dev_ops *d, rt_host_mode m)
{
    if (d) ((cuda_dev *)d)->host_mode = m; /* ops is the first member of cuda_dev */
}

/* n back-to-back spin kernels of spin_us each: mean stream time per kernel. */
static rt_status b2b(cuda_dev *c, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, double spin_us,
                     int n, double *per_us, ms_error *err)
{
    touch_set t;
    memset(&t, 0, sizeof t);
    unsigned long long ns = spin_us > 0 ? (unsigned long long)(spin_us * 1e3 + 0.5) : 0ULL;
    RT_CHECK(err, cudaEventRecord(e0, s));
    for (int i = 0; i < n; i++) {
        rt_work_kernel<<<c->sms, 64, 0, s>>>(ns, max_clk_for(ns), t, NULL, 0, NULL, 0);
        RT_TRY(launched(err));
    }
    RT_CHECK(err, cudaEventRecord(e1, s));
    RT_CHECK(err, cudaEventSynchronize(e1));
    float ms;
    RT_CHECK(err, cudaEventElapsedTime(&ms, e0, e1));
    *per_us = ms * 1e3 / n;
    return RT_OK;
}

static double spin_of(const rt_calib *cal, double req_us)
{
    double us = (req_us - cal->overhead_us) / cal->slope;
    return us > 0 ? us : 0;
}

static rt_status calibrate_on(cuda_dev *c, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1,
                              ms_error *err)
{
    rt_calib *cal = &c->calib;
    double w;
    RT_TRY(b2b(c, s, e0, e1, 10, 50, &w, err)); /* warm-up: module load, clocks */
    static const double xs[] = {50, 200, 1000, 3000};
    static const int ns[] = {100, 40, 10, 5};
    double y[4], sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < 4; i++) {
        RT_TRY(b2b(c, s, e0, e1, xs[i], ns[i], &y[i], err));
        sx += xs[i];
        sy += y[i];
        sxx += xs[i] * xs[i];
        sxy += xs[i] * y[i];
    }
    cal->slope = (4 * sxy - sx * sy) / (4 * sxx - sx * sx);
    cal->overhead_us = (sy - cal->slope * sx) / 4;
    if (!(cal->slope > 0.5 && cal->slope < 2.0))
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "spin calibration",
                            "the GPU's global timer does not advance as expected");
    RT_TRY(b2b(c, s, e0, e1, 0, 200, &cal->empty_us, err));
    static const double req[RT_CALIB_CHECKS] = {10, 100, 1000, 10000};
    static const int nb[RT_CALIB_CHECKS] = {200, 50, 10, 3};
    for (int i = 0; i < RT_CALIB_CHECKS; i++) {
        double sp = spin_of(cal, req[i]);
        cal->check_req_us[i] = req[i];
        RT_TRY(b2b(c, s, e0, e1, sp, nb[i], &cal->check_b2b_us[i], err));
        double one[5];
        for (int r = 0; r < 5; r++) RT_TRY(b2b(c, s, e0, e1, sp, 1, &one[r], err));
        cal->check_single_us[i] = rt_median_of(one, 5);
    }
    cal->valid = 1;
    return RT_OK;
}

static rt_status cu_calibrate(void *ctx, rt_calib *out, ms_error *err)
{
    cuda_dev *c = (cuda_dev *)ctx;
    if (!c->calibrated) {
        cudaStream_t s;
        cudaEvent_t e0, e1;
        RT_CHECK(err, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        RT_CHECK(err, cudaEventCreate(&e0));
        RT_CHECK(err, cudaEventCreate(&e1));
        rt_status st = calibrate_on(c, s, e0, e1, err);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cudaStreamDestroy(s);
        if (st != RT_OK) return st;
        c->calibrated = 1;
    }
    *out = c->calib;
    return RT_OK;
}

rt_status rt_cuda_dev_new(int device, rt_dev_ops **out, ms_error *err)
{
    *out = NULL;
    RT_CHECK(err, cudaSetDevice(device));
    int sms = 0;
    RT_CHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    struct cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, rt_work_kernel);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return rt_fail(err, RT_ERR_NODEV, __FILE__, __LINE__, "cudaFuncGetAttributes",
                            "this build has no kernel image for this GPU (rebuild with "
                            "CUDA_ARCH set to its architecture)");
    }
    cuda_dev *c = (cuda_dev *)calloc(1, sizeof *c);
    if (!c) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    c->device = device;
    c->sms = sms;
    c->host_mode = RT_HOST_THREAD;
    rt_dev_ops *o = &c->ops;
    o->ctx = c;
    o->name = "cuda";
    o->stream_new = cu_stream_new;
    o->stream_free = cu_stream_free;
    o->event_new = cu_event_new;
    o->event_free = cu_event_free;
    o->record = cu_record;
    o->wait = cu_wait;
    o->query = cu_query;
    o->host_wait = cu_host_wait;
    o->elapsed_ms = cu_elapsed;
    o->copy = cu_copy;
    o->kernel = cu_kernel;
    o->host_work = cu_host_work;
    o->calibrate = cu_calibrate;
    o->host_call = cu_host_call;
    o->host_map = cu_host_map;
    o->sum_begin = cu_sum_begin;
    o->sum_add = cu_sum_add;
    o->sum_read = cu_sum_read;
    o->sum_end = cu_sum_end;
    *out = o;
    return RT_OK;
}

void rt_cuda_dev_free(rt_dev_ops *d)
{
    if (!d) return;
    worker_stop((cuda_dev *)d); /* ops is the first member of cuda_dev */
    cu_sum_end(d->ctx);
    free(d);
}

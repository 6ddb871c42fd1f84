// vmm_probe.cu — what one cuMemSetAccess call costs on this GPU, and what it waits for: the
// call's time for 1..256 fresh 2 MiB-granule mappings while the GPU is idle, while a kernel
// runs, while a device-to-host or host-to-device copy runs (pinned memory), and with many
// mappings already live, and for 16 mappings of 2 MiB against 16 of 20 MiB (cases idle_xN,
// d2h_xN: N granules per mapping). For each busy case it also says whether the call returned only
// after the work in flight had finished. Used by docs/VALIDATION.md ("What cuMemSetAccess
// waits for") to explain the expandable-segments and stitching cases under full swap; the
// simulator's VMM costs are the profile's vmm.* figures.
//
// build: nvcc -O2 -arch=sm_90 -o vmm_probe vmm_probe.cu -lcuda
// run:   ./vmm_probe > vmm.csv      (one GPU, about 10 s)
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; cuGetErrorString(r_, &s_); fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_); exit(1); } } while (0)
#define RK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

static int dev;
static size_t gran;

/* n granules reserved, created and mapped (not yet accessible) */
/* n handles of `per` granules each, one range */
typedef struct { CUdeviceptr va; CUmemGenericAllocationHandle *h; int n; size_t hb; } range_t;

static range_t map_range_of(int n, int per)
{
    range_t r;
    r.n = n;
    r.hb = gran * per;
    r.h = (CUmemGenericAllocationHandle *)malloc(sizeof *r.h * n);
    CK(cuMemAddressReserve(&r.va, r.hb * n, 0, 0, 0));
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    for (int i = 0; i < n; i++) {
        CK(cuMemCreate(&r.h[i], r.hb, &p, 0));
        CK(cuMemMap(r.va + r.hb * i, r.hb, 0, r.h[i], 0));
    }
    return r;
}

static range_t map_range(int n) { return map_range_of(n, 1); }

static double set_access_us(range_t *r)
{
    CUmemAccessDesc d = {};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    double t0 = now_us();
    CK(cuMemSetAccess(r->va, r->hb * r->n, &d, 1));
    return now_us() - t0;
}

static void unmap_range(range_t *r)
{
    RK(cudaDeviceSynchronize());
    CK(cuMemUnmap(r->va, r->hb * r->n));
    for (int i = 0; i < r->n; i++) CK(cuMemRelease(r->h[i]));
    CK(cuMemAddressFree(r->va, r->hb * r->n));
    free(r->h);
}

/* Starts the busy work of `what` on stream s, returns its event (recorded after it). */
static cudaEvent_t start_busy(const char *what, cudaStream_t s, void *dbuf, void *hbuf, size_t bytes,
                              long long cycles)
{
    cudaEvent_t e;
    RK(cudaEventCreate(&e));
    if (what[0] == 'k') spin<<<1, 1, 0, s>>>(cycles);
    else if (what[0] == 'd') RK(cudaMemcpyAsync(hbuf, dbuf, bytes, cudaMemcpyDeviceToHost, s));
    else if (what[0] == 'h') RK(cudaMemcpyAsync(dbuf, hbuf, bytes, cudaMemcpyHostToDevice, s));
    RK(cudaEventRecord(e, s));
    return e;
}

int main(void)
{
    RK(cudaSetDevice(0));
    RK(cudaFree(0));
    CK(cuCtxGetDevice(&dev));
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    CK(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    int clock_khz;
    RK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    const size_t bytes = (size_t)2 << 30; /* a 2 GiB copy: about 40 ms over PCIe 5 */
    void *dbuf, *hbuf;
    RK(cudaMalloc(&dbuf, bytes));
    RK(cudaHostAlloc(&hbuf, bytes, cudaHostAllocDefault));
    cudaStream_t s;
    RK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    printf("case,granules,live_gib,busy_ms,set_access_us,busy_left_at_call_us,busy_done_at_return\n");
    const char *cases[] = {"idle", "kernel", "d2h", "h2d"};
    const int ns[] = {1, 16, 256};
    for (int rep = 0; rep < 3; rep++)
        for (int c = 0; c < 4; c++)
            for (int k = 0; k < 3; k++) {
                range_t r = map_range(ns[k]);
                double busy_ms = 0, left = 0;
                int done = -1;
                if (c == 0) {
                    double us = set_access_us(&r);
                    printf("%s,%d,0,0,%.1f,0,-1\n", cases[c], ns[k], us);
                } else {
                    /* time the busy work alone first, then again with the call behind it */
                    long long cycles = (long long)clock_khz * 40; /* 40 ms */
                    cudaEvent_t e = start_busy(cases[c], s, dbuf, hbuf, bytes, cycles);
                    double t0 = now_us();
                    RK(cudaEventSynchronize(e));
                    busy_ms = (now_us() - t0) / 1e3;
                    RK(cudaEventDestroy(e));
                    e = start_busy(cases[c], s, dbuf, hbuf, bytes, cycles);
                    double t1 = now_us();
                    double us = set_access_us(&r);
                    left = busy_ms * 1e3 - (now_us() - us - t1);
                    done = cudaEventQuery(e) == cudaSuccess;
                    RK(cudaEventSynchronize(e));
                    RK(cudaEventDestroy(e));
                    printf("%s,%d,0,%.2f,%.1f,%.0f,%d\n", cases[c], ns[k], busy_ms, us, left, done);
                }
                unmap_range(&r);
            }
    /* per handle or per granule? 16 handles of 1 and of 10 granules (20 MiB, the size of
     * PyTorch's expandable-segment steps), idle and with a D2H copy running */
    for (int rep = 0; rep < 3; rep++)
        for (int per = 1; per <= 10; per += 9)
            for (int c = 0; c < 4; c += 3) {
                range_t r = map_range_of(16, per);
                double us, left = 0;
                int done = -1;
                if (c == 0) us = set_access_us(&r);
                else {
                    cudaEvent_t e = start_busy("d2h", s, dbuf, hbuf, bytes, 0);
                    us = set_access_us(&r);
                    done = cudaEventQuery(e) == cudaSuccess;
                    RK(cudaEventSynchronize(e));
                    RK(cudaEventDestroy(e));
                }
                printf("%s_x%d,16,0,0,%.1f,%.0f,%d\n", c ? "d2h" : "idle", per, us, left, done);
                unmap_range(&r);
            }
    /* the same call with 0..48 GiB of other mappings live (accessible), GPU idle */
    const int live_gib[] = {0, 8, 24, 48};
    for (int l = 0; l < 4; l++) {
        int nl = (int)(((size_t)live_gib[l] << 30) / gran);
        range_t live = {0, NULL, 0};
        if (nl) {
            live = map_range(nl);
            set_access_us(&live);
        }
        for (int k = 0; k < 3; k++) {
            range_t r = map_range(ns[k]);
            printf("live,%d,%d,0,%.1f,0,-1\n", ns[k], live_gib[l], set_access_us(&r));
            unmap_range(&r);
        }
        if (nl) unmap_range(&live);
    }
    return 0;
}

/* rt_backend.c — the CUDA memory backend of rt_backend.h: every mb_ops call made with the real
 * CUDA call, checked, timed and counted; out of memory (from the device or from the optional
 * byte cap) returned as MS_ERR_OOM, pinned host exhaustion as MS_ERR_OOHM, any other CUDA
 * failure as MS_ERR_INVALID with the call and CUDA's message in rt_backend_error(). Used by
 * runtime/rt_exec.c, runtime/rt_run.c and the GPU tests. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_backend.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/u64map.h"

/* The driver calls we need, resolved through the runtime so that no libcuda link is needed. */
typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_afree)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*fn_gran)(size_t *, const CUmemAllocationProp *,
                           CUmemAllocationGranularity_flags);
typedef CUresult (*fn_errstr)(CUresult, const char **);
typedef CUresult (*fn_devget)(CUdevice *, int);
typedef CUresult (*fn_attr)(int *, CUdevice_attribute, CUdevice);

typedef struct drv {
    fn_reserve reserve;
    fn_afree afree;
    fn_create create;
    fn_release release;
    fn_map map;
    fn_unmap unmap;
    fn_access access;
    fn_gran gran;
    fn_errstr errstr;
    fn_devget devget;
    fn_attr attr;
} drv;

struct rt_backend {
    mb_backend mb;
    rt_backend_opts o;
    drv d;
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    u64map *dev;      /* cudaMalloc address -> bytes */
    u64map *phys;     /* cuMemCreate handle -> bytes */
    u64map *host;     /* pinned host address -> bytes */
    u64map *va;       /* reservation -> bytes */
    uint64_t dev_bytes, dev_peak, host_bytes, mapped_bytes;
    uint64_t implicit_syncs;
    rt_bcall_stats st[RB_NCALLS];
    ms_error err;     /* the last failed call, with file and line: the mb_ops interface
                         returns a status only, so its caller asks rt_backend_error */
};

static const char *const call_names[RB_NCALLS] = {
    "cudaMalloc", "cudaFree", "cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate",
    "cuMemRelease", "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cudaDeviceSynchronize",
    "cudaHostAlloc", "cudaFreeHost",
};

const ms_error *rt_backend_error(const rt_backend *b) { return &b->err; }

const char *rt_bcall_name(rt_bcall k) { return (unsigned)k < RB_NCALLS ? call_names[k] : "?"; }

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* ---- the GPU check ---- */

rt_status rt_gpu_count(int *count, ms_error *err)
{
    *count = 0;
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || !driver) {
        ms_fail(err, MS_ERR_UNSUPPORTED, "no NVIDIA driver is loaded on this machine (no GPU, or "
                "the driver is not installed)");
        return RT_ERR_NODEV;
    }
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess) {
        *count = 0;
        cudaGetLastError();
    }
    return RT_OK;
}

rt_status rt_gpu_check(int device, rt_gpu_info *info, ms_error *err)
{
    memset(info, 0, sizeof *info);
    info->device = device;
    cudaRuntimeGetVersion(&info->runtime_version);
    if (cudaDriverGetVersion(&info->driver_version) != cudaSuccess || !info->driver_version) {
        ms_fail(err, MS_ERR_UNSUPPORTED,
                "no NVIDIA driver is loaded on this machine (no GPU, or the driver is "
                         "not installed)");
        return RT_ERR_NODEV;
    }
    if (info->driver_version < info->runtime_version) {
        ms_fail(err, MS_ERR_UNSUPPORTED,
                "the NVIDIA driver supports CUDA %d.%d but this build needs %d.%d: "
                 "update the driver", info->driver_version / 1000,
                 info->driver_version % 1000 / 10, info->runtime_version / 1000,
                 info->runtime_version % 1000 / 10);
        return RT_ERR_NODEV;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        ms_fail(err, MS_ERR_UNSUPPORTED, "no usable CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
        cudaGetLastError();
        return RT_ERR_NODEV;
    }
    if (device < 0 || device >= count) {
        ms_fail(err, MS_ERR_UNSUPPORTED, "CUDA device %d does not exist (%d found)", device, count);
        return RT_ERR_NODEV;
    }
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, device)) != cudaSuccess) {
        ms_fail(err, MS_ERR_UNSUPPORTED, "cannot read CUDA device %d: %s", device,
                cudaGetErrorString(e));
        return RT_ERR_NODEV;
    }
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->sms = p.multiProcessorCount;
    if (p.major < 9) {
        ms_fail(err, MS_ERR_UNSUPPORTED,
                "%s is compute capability %d.%d; the runtime's kernels are built for "
                 "sm_90 (Hopper) and later", p.name, p.major, p.minor);
        return RT_ERR_NODEV;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaFree(NULL)) != cudaSuccess) { /* creates the context */
        ms_fail(err, MS_ERR_UNSUPPORTED, "cannot create a CUDA context on %s: %s", p.name,
                cudaGetErrorString(e));
        return RT_ERR_NODEV;
    }
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    info->free_bytes = fr;
    info->total_bytes = tot;
    fn_devget devget = NULL;
    fn_attr attr = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", (void **)&devget, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess && devget &&
        cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", (void **)&attr, 12000,
                                         cudaEnableDefault, &q) == cudaSuccess && attr) {
        CUdevice dev;
        if (devget(&dev, device) == CUDA_SUCCESS)
            attr(&info->vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                 dev);
    }
    return RT_OK;
}

/* ---- error helpers ---- */

static ms_status cuda_fail(rt_backend *b, rt_bcall k, cudaError_t e, int host)
{
    b->st[k].failures++;
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    if (e == cudaErrorMemoryAllocation) {
        b->st[k].ooms++;
        rt_fail(&b->err, RT_ERR_OOM, __FILE__, __LINE__, call_names[k], cudaGetErrorString(e));
        return host ? MS_ERR_OOHM : MS_ERR_OOM;
    }
    rt_fail(&b->err, RT_ERR_CUDA, __FILE__, __LINE__, call_names[k], cudaGetErrorString(e));
    return MS_ERR_INVALID;
}

static ms_status cu_fail(rt_backend *b, rt_bcall k, CUresult r)
{
    const char *s = "unknown CUDA driver error";
    if (b->d.errstr) b->d.errstr(r, &s);
    b->st[k].failures++;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        b->st[k].ooms++;
        rt_fail(&b->err, RT_ERR_OOM, __FILE__, __LINE__, call_names[k], s);
        return MS_ERR_OOM;
    }
    rt_fail(&b->err, RT_ERR_CUDA, __FILE__, __LINE__, call_names[k], s);
    return MS_ERR_INVALID;
}

static void timed(rt_backend *b, rt_bcall k, double t0, uint64_t bytes)
{
    double dt = now_us() - t0;
    b->st[k].calls++;
    b->st[k].total_us += dt;
    if (dt > b->st[k].max_us) b->st[k].max_us = dt;
    b->st[k].bytes += bytes;
}

/* The cap: a request that would take the held device bytes past capacity is refused as OOM
 * without asking CUDA, so a run can model a smaller GPU. */
static int over_cap(rt_backend *b, rt_bcall k, uint64_t bytes)
{
    if (b->dev_bytes + bytes <= b->mb.capacity_bytes && bytes <= b->mb.capacity_bytes)
        return 0;
    b->st[k].calls++;
    b->st[k].failures++;
    b->st[k].ooms++;
    rt_fail(&b->err, RT_ERR_OOM, __FILE__, __LINE__, call_names[k],
                 "the backend's device byte cap is reached");
    return 1;
}

static void held_add(rt_backend *b, uint64_t bytes)
{
    b->dev_bytes += bytes;
    if (b->dev_bytes > b->dev_peak) b->dev_peak = b->dev_bytes;
}

static ms_status unknown(rt_backend *b, rt_bcall k, uint64_t what)
{
    char msg[96];
    snprintf(msg, sizeof msg, "0x%llx was not returned by this backend",
             (unsigned long long)what);
    rt_fail(&b->err, RT_ERR_INVALID, __FILE__, __LINE__, call_names[k], msg);
    return MS_ERR_INVALID;
}

/* ---- the ops ---- */

static ms_status op_dev_malloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    rt_backend *b = ctx;
    if (over_cap(b, RB_DEV_MALLOC, bytes)) return MS_ERR_OOM;
    void *p = NULL;
    double t0 = now_us();
    cudaError_t e = cudaMalloc(&p, (size_t)bytes);
    timed(b, RB_DEV_MALLOC, t0, e == cudaSuccess ? bytes : 0);
    if (e != cudaSuccess) return cuda_fail(b, RB_DEV_MALLOC, e, 0);
    if (u64map_put(b->dev, (uint64_t)(uintptr_t)p, bytes)) {
        cudaFree(p);
        return MS_ERR_NOMEM;
    }
    held_add(b, bytes);
    *addr = (uint64_t)(uintptr_t)p;
    return MS_OK;
}

static ms_status op_dev_free(void *ctx, uint64_t addr)
{
    rt_backend *b = ctx;
    uint64_t bytes;
    if (!u64map_get(b->dev, addr, &bytes)) return unknown(b, RB_DEV_FREE, addr);
    double t0 = now_us();
    cudaError_t e = cudaFree((void *)(uintptr_t)addr);
    timed(b, RB_DEV_FREE, t0, 0);
    if (e != cudaSuccess) return cuda_fail(b, RB_DEV_FREE, e, 0);
    u64map_del(b->dev, addr, NULL);
    b->dev_bytes -= bytes;
    return MS_OK;
}

static ms_status op_va_reserve(void *ctx, uint64_t bytes, uint64_t *va)
{
    rt_backend *b = ctx;
    CUdeviceptr p = 0;
    double t0 = now_us();
    CUresult r = b->d.reserve(&p, (size_t)bytes, 0, 0, 0);
    timed(b, RB_VA_RESERVE, t0, r == CUDA_SUCCESS ? bytes : 0);
    if (r != CUDA_SUCCESS) return cu_fail(b, RB_VA_RESERVE, r);
    if (u64map_put(b->va, (uint64_t)p, bytes)) {
        b->d.afree(p, (size_t)bytes);
        return MS_ERR_NOMEM;
    }
    *va = (uint64_t)p;
    return MS_OK;
}

static ms_status op_va_free(void *ctx, uint64_t va, uint64_t bytes)
{
    rt_backend *b = ctx;
    if (!u64map_get(b->va, va, NULL)) return unknown(b, RB_VA_FREE, va);
    double t0 = now_us();
    CUresult r = b->d.afree((CUdeviceptr)va, (size_t)bytes);
    timed(b, RB_VA_FREE, t0, 0);
    if (r != CUDA_SUCCESS) return cu_fail(b, RB_VA_FREE, r);
    u64map_del(b->va, va, NULL);
    return MS_OK;
}

static ms_status op_phys_create(void *ctx, uint64_t bytes, uint64_t *handle)
{
    rt_backend *b = ctx;
    if (over_cap(b, RB_PHYS_CREATE, bytes)) return MS_ERR_OOM;
    CUmemGenericAllocationHandle h = 0;
    double t0 = now_us();
    CUresult r = b->d.create(&h, (size_t)bytes, &b->prop, 0);
    timed(b, RB_PHYS_CREATE, t0, r == CUDA_SUCCESS ? bytes : 0);
    if (r != CUDA_SUCCESS) return cu_fail(b, RB_PHYS_CREATE, r);
    if (u64map_put(b->phys, (uint64_t)h, bytes)) {
        b->d.release(h);
        return MS_ERR_NOMEM;
    }
    held_add(b, bytes);
    *handle = (uint64_t)h;
    return MS_OK;
}

static ms_status op_phys_release(void *ctx, uint64_t handle)
{
    rt_backend *b = ctx;
    uint64_t bytes;
    if (!u64map_get(b->phys, handle, &bytes)) return unknown(b, RB_PHYS_RELEASE, handle);
    double t0 = now_us();
    CUresult r = b->d.release((CUmemGenericAllocationHandle)handle);
    timed(b, RB_PHYS_RELEASE, t0, 0);
    if (r != CUDA_SUCCESS) return cu_fail(b, RB_PHYS_RELEASE, r);
    u64map_del(b->phys, handle, NULL);
    b->dev_bytes -= bytes;
    return MS_OK;
}

static ms_status op_map(void *ctx, uint64_t va, uint64_t bytes, uint64_t handle)
{
    rt_backend *b = ctx;
    if (!u64map_get(b->phys, handle, NULL)) return unknown(b, RB_MAP, handle);
    double t0 = now_us();
    CUresult r = b->d.map((CUdeviceptr)va, (size_t)bytes, 0,
                          (CUmemGenericAllocationHandle)handle, 0);
    timed(b, RB_MAP, t0, r == CUDA_SUCCESS ? bytes : 0);
    if (r != CUDA_SUCCESS) return cu_fail(b, RB_MAP, r);
    b->mapped_bytes += bytes;
    return MS_OK;
}

static ms_status op_set_access(void *ctx, uint64_t va, uint64_t bytes)
{
    rt_backend *b = ctx;
    double t0 = now_us();
    CUresult r = b->d.access((CUdeviceptr)va, (size_t)bytes, &b->acc, 1);
    timed(b, RB_SET_ACCESS, t0, r == CUDA_SUCCESS ? bytes : 0);
    return r == CUDA_SUCCESS ? MS_OK : cu_fail(b, RB_SET_ACCESS, r);
}

static ms_status op_synchronize(void *ctx)
{
    rt_backend *b = ctx;
    double t0 = now_us();
    cudaError_t e = cudaDeviceSynchronize();
    timed(b, RB_SYNC, t0, 0);
    return e == cudaSuccess ? MS_OK : cuda_fail(b, RB_SYNC, e, 0);
}

static ms_status op_unmap(void *ctx, uint64_t va, uint64_t bytes)
{
    rt_backend *b = ctx;
    if (b->o.sync_before_unmap) { /* timed and counted as a synchronize */
        b->implicit_syncs++;
        ms_status s = op_synchronize(b);
        if (s != MS_OK) return s;
    }
    double t0 = now_us();
    CUresult r = b->d.unmap((CUdeviceptr)va, (size_t)bytes);
    timed(b, RB_UNMAP, t0, r == CUDA_SUCCESS ? bytes : 0);
    if (r != CUDA_SUCCESS) return cu_fail(b, RB_UNMAP, r);
    b->mapped_bytes = b->mapped_bytes >= bytes ? b->mapped_bytes - bytes : 0;
    return MS_OK;
}

/* Pinned, portable and mapped: copies run at full link speed and kernels can read it (DHA). */
static ms_status op_host_alloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    rt_backend *b = ctx;
    void *p = NULL;
    double t0 = now_us();
    cudaError_t e = cudaHostAlloc(&p, (size_t)(bytes ? bytes : 1),
                                  cudaHostAllocPortable | cudaHostAllocMapped);
    timed(b, RB_HOST_ALLOC, t0, e == cudaSuccess ? bytes : 0);
    if (e != cudaSuccess) return cuda_fail(b, RB_HOST_ALLOC, e, 1);
    if (u64map_put(b->host, (uint64_t)(uintptr_t)p, bytes)) {
        cudaFreeHost(p);
        return MS_ERR_NOMEM;
    }
    b->host_bytes += bytes;
    *addr = (uint64_t)(uintptr_t)p;
    return MS_OK;
}

static ms_status op_host_free(void *ctx, uint64_t addr)
{
    rt_backend *b = ctx;
    uint64_t bytes;
    if (!u64map_get(b->host, addr, &bytes)) return unknown(b, RB_HOST_FREE, addr);
    double t0 = now_us();
    cudaError_t e = cudaFreeHost((void *)(uintptr_t)addr);
    timed(b, RB_HOST_FREE, t0, 0);
    if (e != cudaSuccess) return cuda_fail(b, RB_HOST_FREE, e, 1);
    u64map_del(b->host, addr, NULL);
    b->host_bytes -= bytes;
    return MS_OK;
}

static const mb_ops cuda_ops = {
    op_dev_malloc, op_dev_free, op_va_reserve, op_va_free, op_phys_create, op_phys_release,
    op_map, op_set_access, op_unmap, op_synchronize, op_host_alloc, op_host_free,
};

/* ---- creation ---- */

void rt_backend_opts_default(rt_backend_opts *o)
{
    memset(o, 0, sizeof *o);
    o->headroom_bytes = 512ULL << 20;
    o->sync_before_unmap = 1;
}

static rt_status resolve(const char *sym, void **fp, ms_error *err)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(sym, fp, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fp) {
        cudaGetLastError();
        return rt_fail(err, RT_ERR_NODEV, __FILE__, __LINE__, sym,
                            "the driver does not provide this entry point");
    }
    return RT_OK;
}

static rt_status resolve_all(drv *d, ms_error *err)
{
    RT_TRY(resolve("cuMemAddressReserve", (void **)&d->reserve, err));
    RT_TRY(resolve("cuMemAddressFree", (void **)&d->afree, err));
    RT_TRY(resolve("cuMemCreate", (void **)&d->create, err));
    RT_TRY(resolve("cuMemRelease", (void **)&d->release, err));
    RT_TRY(resolve("cuMemMap", (void **)&d->map, err));
    RT_TRY(resolve("cuMemUnmap", (void **)&d->unmap, err));
    RT_TRY(resolve("cuMemSetAccess", (void **)&d->access, err));
    RT_TRY(resolve("cuMemGetAllocationGranularity", (void **)&d->gran, err));
    RT_TRY(resolve("cuGetErrorString", (void **)&d->errstr, err));
    return RT_OK;
}

rt_status rt_backend_new(const rt_backend_opts *o, rt_backend **out, ms_error *err)
{
    *out = NULL;
    rt_backend *b = calloc(1, sizeof *b);
    if (!b) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    if (o) b->o = *o;
    else rt_backend_opts_default(&b->o);
    b->dev = u64map_new(256);
    b->phys = u64map_new(1024);
    b->host = u64map_new(16);
    b->va = u64map_new(64);
    rt_status st = RT_OK;
    if (!b->dev || !b->phys || !b->host || !b->va)
        st = rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "u64map_new", "out of memory");
    cudaError_t e = cudaSuccess;
    if (st == RT_OK && (e = cudaSetDevice(b->o.device)) != cudaSuccess)
        st = rt_fail(err, RT_ERR_NODEV, __FILE__, __LINE__, "cudaSetDevice",
                          cudaGetErrorString(e));
    if (st == RT_OK) st = resolve_all(&b->d, err);
    size_t gran = 0;
    if (st == RT_OK) {
        b->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        b->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        b->prop.location.id = b->o.device;
        b->acc.location = b->prop.location;
        b->acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CUresult r = b->d.gran(&gran, &b->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != CUDA_SUCCESS || !gran) {
            const char *s = "no granularity";
            b->d.errstr(r, &s);
            st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cuMemGetAllocationGranularity",
                              s);
        }
    }
    size_t fr = 0, tot = 0;
    if (st == RT_OK && (e = cudaMemGetInfo(&fr, &tot)) != cudaSuccess)
        st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaMemGetInfo",
                          cudaGetErrorString(e));
    if (st != RT_OK) {
        rt_backend_free(b);
        return st;
    }
    b->mb.ops = &cuda_ops;
    b->mb.ctx = b;
    b->mb.granularity_bytes = gran;
    uint64_t avail = fr > b->o.headroom_bytes ? fr - b->o.headroom_bytes : 0;
    b->mb.capacity_bytes = b->o.capacity_bytes ? b->o.capacity_bytes : avail;
    *out = b;
    return RT_OK;
}

void rt_backend_free(rt_backend *b)
{
    if (!b) return;
    u64map_free(b->dev);
    u64map_free(b->phys);
    u64map_free(b->host);
    u64map_free(b->va);
    free(b);
}

const mb_backend *rt_backend_mb(const rt_backend *b) { return &b->mb; }

const rt_bcall_stats *rt_backend_stats(const rt_backend *b, rt_bcall k)
{
    return (unsigned)k < RB_NCALLS ? &b->st[k] : NULL;
}

void rt_backend_reset_stats(rt_backend *b) { memset(b->st, 0, sizeof b->st); }
uint64_t rt_backend_device_bytes(const rt_backend *b) { return b->dev_bytes; }
uint64_t rt_backend_device_peak_bytes(const rt_backend *b) { return b->dev_peak; }
uint64_t rt_backend_host_bytes(const rt_backend *b) { return b->host_bytes; }
uint64_t rt_backend_implicit_syncs(const rt_backend *b) { return b->implicit_syncs; }

uint64_t rt_backend_outstanding(const rt_backend *b)
{
    return u64map_count(b->dev) + u64map_count(b->phys) + u64map_count(b->host) +
           u64map_count(b->va) + (b->mapped_bytes ? 1 : 0);
}

void rt_backend_print_stats(const rt_backend *b, FILE *f)
{
    fprintf(f, "%-22s %8s %6s %12s %10s %10s\n", "backend call", "calls", "fail", "total_ms",
            "mean_us", "max_us");
    for (int k = 0; k < RB_NCALLS; k++) {
        const rt_bcall_stats *s = &b->st[k];
        if (!s->calls) continue;
        fprintf(f, "%-22s %8llu %6llu %12.3f %10.2f %10.2f\n", call_names[k],
                (unsigned long long)s->calls, (unsigned long long)s->failures,
                s->total_us / 1e3, s->total_us / (double)s->calls, s->max_us);
    }
    if (b->implicit_syncs)
        fprintf(f, "(%llu device synchronizes before cuMemUnmap)\n",
                (unsigned long long)b->implicit_syncs);
}

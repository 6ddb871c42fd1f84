/* simbackend.c — the simulated memory backend (see simbackend.h). Device addresses come from
 * a bump pointer (ascending, or descending) so they are deterministic and never reused (a
 * stale pointer is caught), or from a recorded run's script while the calls match it;
 * physical bytes are counted against the capacity; each call adds the machine profile's
 * latency to a cost the executor drains. Used by sim/exec.c, memsim replay and the tests. */
#include "sim/simbackend.h"

#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

#define SEG_BASE 0x100000000000ULL    /* cudaMalloc'ed segments */
#define VA_BASE 0x400000000000ULL     /* cuMemAddressReserve ranges */
#define HOST_BASE 0x700000000000ULL   /* pinned host memory */
#define ALIGN_2M (2ULL << 20)

struct simbe {
    mb_backend be;
    machine_t m;
    int have_m;
    uint64_t dev_used, dev_peak, cap;
    uint64_t host_used, host_peak, host_cap;
    uint64_t next_seg, next_va, next_host, next_handle;
    u64map *segs;      /* addr -> bytes */
    u64map *handles;   /* handle -> bytes */
    u64map *maps;      /* va -> handle */
    u64map *resv;      /* va -> bytes */
    /* the reservations in address order (the bump pointer hands them out ascending), each
     * with its count of mapped granules: range lookups by binary search, not a scan */
    struct resv_ent { uint64_t va, bytes, mapped; } *rv;
    size_t n_rv, cap_rv, n_rv_freed;
    u64map *hosts;     /* addr -> bytes */
    uint64_t *seg_log; size_t n_seg_log, cap_seg_log;
    double cost_us;
    int synced;
    double sa_pending;  /* cuMemSetAccess mappings whose time the executor paces (see below) */
    uint64_t calls, fail_after;
    int descending;    /* segments handed out from the top down (simbe_set_descending) */
    /* simbe_set_segment_script: the addresses to hand out while the calls match */
    uint64_t *sc_addr, *sc_bytes;
    size_t n_sc, sc_next;
    int sc_off;
};

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Fault injection: after fail_after successful calls, every call fails. */
static int injected_failure(simbe_t *b)
{
    if (b->fail_after == UINT64_MAX) return 0;
    if (b->calls >= b->fail_after) return 1;
    b->calls++;
    return 0;
}

/* Whether [addr, addr + bytes) overlaps a live segment. */
static int seg_overlaps(const simbe_t *b, uint64_t addr, uint64_t bytes)
{
    uint64_t k, v;
    for (size_t it = 0; u64map_next(b->segs, &it, &k, &v);)
        if (k < addr + bytes && addr < k + v) return 1;
    return 0;
}

/* The script's address for this call, or 0 once a call differs from it (then never again). */
static uint64_t script_addr(simbe_t *b, uint64_t bytes)
{
    if (b->sc_off || b->sc_next >= b->n_sc) return 0;
    uint64_t a = b->sc_addr[b->sc_next];
    if (b->sc_bytes[b->sc_next] != bytes || a == 0 || a + bytes < a ||
        seg_overlaps(b, a, bytes)) {
        b->sc_off = 1;
        return 0;
    }
    b->sc_next++;
    return a;
}

static ms_status be_dev_malloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    simbe_t *b = ctx;
    if (bytes == 0) return MS_ERR_INVALID;
    if (injected_failure(b) || bytes > b->cap - b->dev_used) return MS_ERR_OOM;
    if (b->have_m) b->cost_us += machine_malloc_us(&b->m, bytes);
    *addr = script_addr(b, bytes);
    if (*addr == 0 && b->descending) {
        b->next_seg -= align_up(bytes, ALIGN_2M);
        *addr = b->next_seg;
    } else if (*addr == 0) {
        *addr = b->next_seg;
        b->next_seg += align_up(bytes, ALIGN_2M);
    }
    if (u64map_put(b->segs, *addr, bytes)) return MS_ERR_NOMEM;
    if (ms_grow((void **)&b->seg_log, &b->cap_seg_log, b->n_seg_log + 1, sizeof *b->seg_log))
        return MS_ERR_NOMEM;
    b->seg_log[b->n_seg_log++] = bytes;
    b->dev_used += bytes;
    if (b->dev_used > b->dev_peak) b->dev_peak = b->dev_used;
    return MS_OK;
}

static ms_status be_dev_free(void *ctx, uint64_t addr)
{
    simbe_t *b = ctx;
    uint64_t bytes;
    if (!u64map_del(b->segs, addr, &bytes)) return MS_ERR_INVALID;
    if (b->have_m) b->cost_us += machine_free_us(&b->m, bytes);
    b->synced = 1; /* cudaFree synchronizes the device */
    b->dev_used -= bytes;
    return MS_OK;
}

static ms_status be_va_reserve(void *ctx, uint64_t bytes, uint64_t *va)
{
    simbe_t *b = ctx;
    if (bytes == 0 || bytes % b->be.granularity_bytes) return MS_ERR_INVALID;
    if (injected_failure(b)) return MS_ERR_OOM;
    if (b->have_m) b->cost_us += b->m.vmm_reserve_us;
    if (ms_grow((void **)&b->rv, &b->cap_rv, b->n_rv + 1, sizeof *b->rv)) return MS_ERR_NOMEM;
    *va = b->next_va;
    b->next_va += align_up(bytes, ALIGN_2M) + ALIGN_2M; /* a guard gap between ranges */
    if (u64map_put(b->resv, *va, bytes)) return MS_ERR_NOMEM;
    b->rv[b->n_rv++] = (struct resv_ent){ *va, bytes, 0 };
    return MS_OK;
}

/* The live reservation holding [va, va+bytes), or NULL. */
static struct resv_ent *reservation_of(const simbe_t *b, uint64_t va, uint64_t bytes)
{
    size_t lo = 0, hi = b->n_rv;     /* the last entry starting at or below va */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->rv[mid].va <= va) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return NULL;
    struct resv_ent *r = &b->rv[lo - 1];
    return r->bytes && bytes <= r->bytes && va - r->va <= r->bytes - bytes ? r : NULL;
}

static ms_status be_va_free(void *ctx, uint64_t va, uint64_t bytes)
{
    simbe_t *b = ctx;
    uint64_t have;
    if (!u64map_get(b->resv, va, &have) || have != bytes) return MS_ERR_INVALID;
    /* freeing a range that still has mappings is an allocator bug */
    struct resv_ent *r = reservation_of(b, va, bytes);
    if (!r || r->mapped) return MS_ERR_INVALID;
    r->bytes = 0;
    if (++b->n_rv_freed > 64 && b->n_rv_freed > b->n_rv / 2) { /* drop the freed, in order */
        size_t n = 0;
        for (size_t i = 0; i < b->n_rv; i++)
            if (b->rv[i].bytes) b->rv[n++] = b->rv[i];
        b->n_rv = n;
        b->n_rv_freed = 0;
    }
    u64map_del(b->resv, va, NULL);
    return MS_OK;
}

static ms_status be_phys_create(void *ctx, uint64_t bytes, uint64_t *handle)
{
    simbe_t *b = ctx;
    if (bytes == 0 || bytes % b->be.granularity_bytes) return MS_ERR_INVALID;
    if (injected_failure(b) || bytes > b->cap - b->dev_used) return MS_ERR_OOM;
    if (b->have_m) b->cost_us += b->m.vmm_create_us; /* per call: see mappings_in */
    *handle = ++b->next_handle;
    if (u64map_put(b->handles, *handle, bytes)) return MS_ERR_NOMEM;
    b->dev_used += bytes;
    if (b->dev_used > b->dev_peak) b->dev_peak = b->dev_used;
    return MS_OK;
}

static ms_status be_phys_release(void *ctx, uint64_t handle)
{
    simbe_t *b = ctx;
    uint64_t bytes;
    if (!u64map_del(b->handles, handle, &bytes)) return MS_ERR_INVALID;
    if (b->have_m) b->cost_us += b->m.vmm_release_us;
    b->dev_used -= bytes;
    return MS_OK;
}

static ms_status be_map(void *ctx, uint64_t va, uint64_t bytes, uint64_t handle)
{
    simbe_t *b = ctx;
    uint64_t hb;
    if (!u64map_get(b->handles, handle, &hb) || hb != bytes) return MS_ERR_INVALID;
    struct resv_ent *r = reservation_of(b, va, bytes);
    if (va % b->be.granularity_bytes || !r) return MS_ERR_INVALID;
    for (uint64_t p = va; p < va + bytes; p += b->be.granularity_bytes)
        if (u64map_get(b->maps, p, NULL)) return MS_ERR_INVALID; /* already mapped */
    if (b->have_m) b->cost_us += b->m.vmm_map_us; /* one handle */
    for (uint64_t p = va; p < va + bytes; p += b->be.granularity_bytes, r->mapped++)
        if (u64map_put(b->maps, p, handle)) return MS_ERR_NOMEM;
    return MS_OK;
}

/* The mappings (one cuMemMap'd handle each) that cover [va, va + bytes), or -1 when a granule
 * of the range is not mapped. The cuMem* calls cost per handle or mapping, not per byte: on
 * this workplace's H100 16 mappings of 20 MiB took the same cuMemSetAccess time as 16 of 2 MiB,
 * idle and during a copy (experiments/validate/vmm_probe.cu), and cuMemCreate, cuMemMap,
 * cuMemUnmap and cuMemRelease of PyTorch's 20 MiB expandable pages took about what the probe's
 * 2 MiB granules take (docs/VALIDATION.md). */
static double mappings_in(const simbe_t *b, uint64_t va, uint64_t bytes)
{
    double n = 0;
    uint64_t prev = 0, h = 0;
    for (uint64_t p = va; p < va + bytes; p += b->be.granularity_bytes, prev = h) {
        if (!u64map_get(b->maps, p, &h)) return -1;
        if (p == va || h != prev) n++;
    }
    return n;
}

/* cuMemSetAccess of n mappings. Measured on the H100 and H200 (vmm_probe.cu): while a
 * device-to-host copy runs, each takes vmm.set_access_d2h_us (about 1.06 ms, against 30-34 us
 * otherwise; a running kernel or host-to-device copy barely matters). Which rate applies is
 * known only as the call runs, so with that key set the mappings are left to the executor
 * (simbe_take_set_access_mappings), which paces them one by one against the link; after a
 * synchronize in the call the copies have ended and they cost the plain rate here. */
static void set_access_cost(simbe_t *b, double n)
{
    if (b->m.vmm_set_access_d2h_us > b->m.vmm_set_access_us && !b->synced) b->sa_pending += n;
    else b->cost_us += n * b->m.vmm_set_access_us;
}

static ms_status be_set_access(void *ctx, uint64_t va, uint64_t bytes)
{
    simbe_t *b = ctx;
    double n = mappings_in(b, va, bytes);
    if (n < 0) return MS_ERR_INVALID;
    if (b->have_m) set_access_cost(b, n);
    return MS_OK;
}

static ms_status be_unmap(void *ctx, uint64_t va, uint64_t bytes)
{
    simbe_t *b = ctx;
    double n = mappings_in(b, va, bytes);
    if (n < 0) return MS_ERR_INVALID;
    struct resv_ent *r = reservation_of(b, va, bytes);
    if (b->have_m) b->cost_us += b->m.vmm_unmap_us * n;
    for (uint64_t p = va; p < va + bytes; p += b->be.granularity_bytes)
        if (u64map_del(b->maps, p, NULL) && r) r->mapped--;
    /* cuMemUnmap waits for work using the range: model it as a synchronize. */
    b->synced = 1;
    return MS_OK;
}

static ms_status be_synchronize(void *ctx)
{
    simbe_t *b = ctx;
    if (b->have_m) b->cost_us += b->m.device_sync_us;
    b->synced = 1;
    return MS_OK;
}

static ms_status be_host_alloc(void *ctx, uint64_t bytes, uint64_t *addr)
{
    simbe_t *b = ctx;
    if (bytes == 0) return MS_ERR_INVALID;
    if (injected_failure(b) || (b->host_cap && bytes > b->host_cap - b->host_used))
        return MS_ERR_OOHM;
    if (b->have_m) b->cost_us += b->m.host_alloc_per_gib_us * (double)bytes / MS_GiB;
    *addr = b->next_host;
    b->next_host += align_up(bytes, 4096);
    if (u64map_put(b->hosts, *addr, bytes)) return MS_ERR_NOMEM;
    b->host_used += bytes;
    if (b->host_used > b->host_peak) b->host_peak = b->host_used;
    return MS_OK;
}

static ms_status be_host_free(void *ctx, uint64_t addr)
{
    simbe_t *b = ctx;
    uint64_t bytes;
    if (!u64map_del(b->hosts, addr, &bytes)) return MS_ERR_INVALID;
    b->host_used -= bytes;
    return MS_OK;
}

static const mb_ops simbe_ops = {
    be_dev_malloc, be_dev_free, be_va_reserve, be_va_free, be_phys_create, be_phys_release,
    be_map, be_set_access, be_unmap, be_synchronize, be_host_alloc, be_host_free,
};

simbe_t *simbe_new(const machine_t *m, uint64_t capacity_bytes, uint64_t host_capacity_bytes)
{
    simbe_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    /* room for a run's segments without growing (a gpt-7b simulation makes about 220) */
    b->segs = u64map_new(256);
    b->handles = u64map_new(16);
    b->maps = u64map_new(16);
    b->resv = u64map_new(16);
    b->hosts = u64map_new(64);
    if (!b->segs || !b->handles || !b->maps || !b->resv || !b->hosts) {
        simbe_free(b);
        return NULL;
    }
    if (m) {
        b->m = *m;
        b->have_m = 1;
    }
    b->cap = capacity_bytes ? capacity_bytes : (m ? machine_usable_bytes(m) : 0);
    b->host_cap = host_capacity_bytes;
    b->next_seg = SEG_BASE;
    b->next_va = VA_BASE;
    b->next_host = HOST_BASE;
    b->fail_after = UINT64_MAX;
    b->be.ops = &simbe_ops;
    b->be.ctx = b;
    b->be.granularity_bytes = (m && m->vmm_granularity_bytes) ? m->vmm_granularity_bytes
                                                              : ALIGN_2M;
    b->be.capacity_bytes = b->cap;
    return b;
}

void simbe_free(simbe_t *b)
{
    if (!b) return;
    u64map_free(b->segs);
    u64map_free(b->handles);
    u64map_free(b->maps);
    u64map_free(b->resv);
    free(b->rv);
    u64map_free(b->hosts);
    free(b->seg_log);
    free(b->sc_addr);
    free(b->sc_bytes);
    free(b);
}

const mb_backend *simbe_backend(simbe_t *b) { return &b->be; }

double simbe_take_set_access_mappings(simbe_t *b)
{
    double n = b->sa_pending;
    b->sa_pending = 0;
    return n;
}

double simbe_take_cost_us(simbe_t *b, int *synced)
{
    /* mappings the caller did not take to pace: at the plain rate */
    b->cost_us += b->sa_pending * b->m.vmm_set_access_us;
    b->sa_pending = 0;
    double c = b->cost_us;
    if (synced) *synced = b->synced;
    b->cost_us = 0;
    b->synced = 0;
    return c;
}

uint64_t simbe_device_used_bytes(const simbe_t *b) { return b->dev_used; }
uint64_t simbe_device_peak_bytes(const simbe_t *b) { return b->dev_peak; }
uint64_t simbe_host_used_bytes(const simbe_t *b) { return b->host_used; }
uint64_t simbe_host_peak_bytes(const simbe_t *b) { return b->host_peak; }
size_t simbe_segment_count(const simbe_t *b) { return b->n_seg_log; }
uint64_t simbe_segment_bytes(const simbe_t *b, size_t i)
{
    return i < b->n_seg_log ? b->seg_log[i] : 0;
}
size_t simbe_live_handles(const simbe_t *b) { return u64map_count(b->handles); }
size_t simbe_live_mappings(const simbe_t *b) { return u64map_count(b->maps); }
size_t simbe_live_reservations(const simbe_t *b) { return u64map_count(b->resv); }
size_t simbe_live_segments(const simbe_t *b) { return u64map_count(b->segs); }

void simbe_fail_after(simbe_t *b, uint64_t after_calls)
{
    b->calls = 0;
    b->fail_after = after_calls;
}

void simbe_set_descending(simbe_t *b, int on)
{
    if (!b || b->n_seg_log) return;
    b->descending = on != 0;
    b->next_seg = on ? VA_BASE : SEG_BASE;
}

ms_status simbe_set_segment_script(simbe_t *b, const uint64_t *addrs, const uint64_t *bytes,
                                   size_t n)
{
    if (!b || b->n_seg_log || b->n_sc) return MS_ERR_INVALID;
    if (n == 0) return MS_OK;
    b->sc_addr = malloc(n * sizeof *b->sc_addr);
    b->sc_bytes = malloc(n * sizeof *b->sc_bytes);
    if (!b->sc_addr || !b->sc_bytes) {
        free(b->sc_addr);
        free(b->sc_bytes);
        b->sc_addr = b->sc_bytes = NULL;
        return MS_ERR_NOMEM;
    }
    memcpy(b->sc_addr, addrs, n * sizeof *addrs);
    memcpy(b->sc_bytes, bytes, n * sizeof *bytes);
    b->n_sc = n;
    /* Fallback addresses stay clear of the script's range: ascending above its end,
     * descending below its start. */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (addrs[i] < lo) lo = addrs[i];
        if (addrs[i] + bytes[i] > hi) hi = addrs[i] + bytes[i];
    }
    lo -= lo % ALIGN_2M;
    hi = align_up(hi, ALIGN_2M);
    if (b->descending && lo < b->next_seg) b->next_seg = lo;
    if (!b->descending && hi > b->next_seg) b->next_seg = hi;
    return MS_OK;
}

size_t simbe_segment_script_used(const simbe_t *b) { return b ? b->sc_next : 0; }

/* blockmix.c — the breakdown of device memory at its peak, by kind (blockmix.h), shared by the
 * simulator's and the runtime's executors. */
#include "planners/blockmix.h"

#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

struct blockmix {
    const trace_t *t;
    u64map *live;                 /* device address -> requested bytes << 4 | kind */
    uint64_t bytes[BM_COUNT];     /* live bytes by kind */
    uint64_t sum, best;           /* their sum, and its largest value so far */
    uint64_t peak[BM_COUNT];      /* the kinds when the sum was largest (or at the failure) */
    int peak_now;                 /* 1: the sum is at its largest now and peak[] is not yet
                                     written: bytes[] holds the peak's kinds */
    int failed;
};

const char *bm_kind_name(bm_kind k)
{
    static const char *const names[BM_COUNT] = {
        "parameters", "gradients", "optimizer states", "model-state chunks",
        "skeletal activations", "transient activations", "workspaces", "rounding buffers",
        "idle rounding buffer", "staging buffers", "other",
    };
    return (unsigned)k < BM_COUNT ? names[k] : "?";
}

const char *bm_kind_key(bm_kind k)
{
    static const char *const keys[BM_COUNT] = {
        "params", "grads", "optstates", "chunks", "act_skel", "act_trans", "workspace", "rbuf",
        "idle", "staging", "other",
    };
    return (unsigned)k < BM_COUNT ? keys[k] : "?";
}

bm_kind bm_kind_of(const trace_t *t, uint64_t id, sched_block block)
{
    if (block == SB_TRACE) {
        const trace_tensor *x = t ? trace_find_tensor(t, id) : NULL;
        block = sched_block_of_class(x ? x->cls : TC_OTHER);
    }
    switch (block) {
    case SB_PARAM: return BM_PARAM;
    case SB_GRAD: return BM_GRAD;
    case SB_OPTSTATE: return BM_OPTSTATE;
    case SB_CHUNK: return BM_CHUNK;
    case SB_ACT_SKEL: return BM_ACT_SKEL;
    case SB_ACT_TRANS: return BM_ACT_TRANS;
    case SB_WORKSPACE: return BM_WORKSPACE;
    case SB_RBUF: return BM_RBUF;
    case SB_IDLE: return BM_IDLE;
    case SB_STAGING: return BM_STAGING;
    default: return BM_OTHER;
    }
}

blockmix *bm_new(const trace_t *t)
{
    blockmix *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->t = t;
    if (!(b->live = u64map_new(64))) {
        free(b);
        return NULL;
    }
    return b;
}

void bm_free(blockmix *b)
{
    if (!b) return;
    u64map_free(b->live);
    free(b);
}

/* Counts a live block of `bytes` of kind k: the sums and the peak's kinds. A new peak is
 * only noted: the kinds are copied when the sum first falls below it (peak_settle), not at
 * each of the allocations in a row that raise it (most of a forward pass's). While the
 * sum is at its peak every count_in raises it again (bytes > 0), so bytes[] changes only
 * at a new peak before peak_settle. */
static void count_in(blockmix *b, bm_kind k, uint64_t bytes)
{
    b->bytes[k] += bytes;
    b->sum += bytes;
    if (b->sum > b->best && !b->failed) {
        b->best = b->sum;
        b->peak_now = 1;
    }
}

/* Before bytes[] falls: the peak's kinds into peak[], where they were only noted. */
static inline void peak_settle(blockmix *b)
{
    if (!b->peak_now) return;
    memcpy(b->peak, b->bytes, sizeof b->peak);
    b->peak_now = 0;
}

int bm_alloc(blockmix *b, uint64_t id, sched_block block, uint64_t addr, uint64_t bytes)
{
    /* an empty request gets no block (the allocators return address 0, as PyTorch a null
     * pointer), so several may share an address: none is recorded */
    if (!bytes) return 1;
    bm_kind k = bm_kind_of(b->t, id, block);
    int added;
    uint64_t *v = u64map_slot(b->live, addr, &added);
    if (!v) return 0;
    if (!added) return 1; /* cannot happen: two live blocks at one address */
    *v = bytes << 4 | (uint64_t)k;
    count_in(b, k, bytes);
    return 1;
}

void bm_release(blockmix *b, uint64_t addr)
{
    uint64_t v;
    if (!u64map_del(b->live, addr, &v)) return;
    peak_settle(b);
    b->bytes[v & 15] -= v >> 4;
    b->sum -= v >> 4;
}

uint64_t bm_add(blockmix *b, uint64_t id, sched_block block, uint64_t bytes)
{
    if (!bytes) return 0; /* as bm_alloc: an empty request is not counted */
    bm_kind k = bm_kind_of(b->t, id, block);
    count_in(b, k, bytes);
    return bytes << 4 | (uint64_t)k;
}

void bm_sub(blockmix *b, uint64_t token)
{
    peak_settle(b);
    b->bytes[token & 15] -= token >> 4;
    b->sum -= token >> 4;
}

void bm_failed(blockmix *b)
{
    memcpy(b->peak, b->bytes, sizeof b->peak);
    b->peak_now = 0;
    b->failed = 1;
}

uint64_t bm_sum(const uint64_t v[BM_COUNT])
{
    uint64_t s = 0;
    for (int k = 0; k < BM_COUNT; k++) s += v[k];
    return s;
}

void bm_live(const blockmix *b, uint64_t out[BM_COUNT])
{
    memcpy(out, b->bytes, sizeof b->bytes);
}

void bm_peak(const blockmix *b, uint64_t out[BM_COUNT], int *at_failure)
{
    memcpy(out, b->peak_now ? b->bytes : b->peak, sizeof b->peak);
    if (at_failure) *at_failure = b->failed;
}

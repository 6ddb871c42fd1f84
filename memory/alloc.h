/* alloc.h — the allocator interface and registry. Every allocator (caching, stitching,
 * expandable segments, static arena) implements alloc_vtable over an mb_backend, so the
 * simulator and the runtime run the same allocator code. Used by sim/ (replay and schedule
 * execution), runtime/ (real execution) and the tests. */
#ifndef MEMSIM_ALLOC_H
#define MEMSIM_ALLOC_H

#include "memory/membackend.h"

/* Knobs. alloc_config_default() sets PyTorch's and GMLake's defaults. */
typedef struct alloc_config {
    /* caching (PyTorch PYTORCH_CUDA_ALLOC_CONF) */
    uint64_t max_split_size_bytes;    /* UINT64_MAX: unlimited (PyTorch's default) */
    unsigned roundup_power2_divisions;/* 0 or 1: off */
    /* stitching (GMLake) */
    uint64_t frag_limit_bytes;        /* blocks below this are neither split nor stitched */
    uint64_t stitch_limit_bytes;      /* StitchFree when stitched bytes exceed this */
    /* expandable segments */
    double expandable_va_factor;      /* virtual range per (stream, pool) / device bytes */
    /* static arena: tensor id -> offset, sorted by id (from a plan) */
    const uint64_t *static_ids;
    const uint64_t *static_offsets;
    size_t static_n;
    uint64_t static_arena_bytes;      /* arena size; 0 = max(offset + bytes) seen in the plan */
    /* testing */
    int check_every_op;               /* run the expensive invariant check after every call */
} alloc_config;

void alloc_config_default(alloc_config *c);
/* The smallest max_split_size PyTorch's config parser takes (max_split_size_mb >= 20: its
 * kLargeBuffer, memory/alloc_caching.h's ALLOC_CACHING_LARGE_BUFFER_BYTES). */
#define ALLOC_MIN_MAX_SPLIT_BYTES (20ULL << 20)
/* What is wrong with cfg as PyTorch's config parser and memsim's allocators read it (a
 * sentence naming the setting), or NULL: max_split_size below 20 MiB, roundup divisions
 * other than 0, 1 or a power of two up to 64, a virtual-range factor outside [1, 64]. */
const char *alloc_config_problem(const alloc_config *c);

typedef struct alloc_stats {
    uint64_t allocated_bytes, allocated_peak_bytes;   /* handed to tensors (rounded) */
    uint64_t requested_bytes, requested_peak_bytes;   /* as asked (unrounded) */
    uint64_t reserved_bytes, reserved_peak_bytes;     /* taken from the device */
    uint64_t active_bytes, active_peak_bytes;         /* allocated + blocks awaiting free */
    uint64_t inactive_split_bytes, inactive_split_peak_bytes; /* free pieces of split blocks */
    uint64_t num_allocs, num_frees;
    uint64_t num_alloc_retries;  /* PyTorch: free cached blocks and retry ("reorganizations") */
    uint64_t num_ooms;
    uint64_t num_segment_allocs, num_segment_frees;   /* dev_malloc / dev_free calls */
    uint64_t num_syncs;          /* device synchronizations the allocator caused */
    /* stitching / VMM allocators */
    uint64_t num_splits, num_stitches, num_new_chunks, num_stitch_frees;
    uint64_t mapped_twice_bytes; /* physical bytes also mapped into an sBlock */
    uint64_t num_maps, num_unmaps;
} alloc_stats;

typedef struct alloc alloc_t;

/* What an allocator can do beyond the vtable's calls, so that executors ask for a behaviour
 * instead of comparing allocator names (alloc_caps). */
enum {
    /* tensors live at addresses a plan fixed before the run (the static arena): no
     * recordStream touches them, so a FREE marked side_use is not deferred; and
     * MS_ERR_INVALID from alloc_block means the planned address is still held, which giving
     * back deferred frees can cure */
    ALLOC_CAP_STATIC_PLAN = 1u << 0,
    /* calls the hook of alloc_set_events_hook inside its free-cached-and-retry path, right
     * after its device synchronize (PyTorch's synchronize_and_free_events) */
    ALLOC_CAP_EVENTS_HOOK = 1u << 1,
};

/* A caller's deferred frees, given back with alloc_release when the allocator asks for them
 * (ALLOC_CAP_EVENTS_HOOK). */
typedef void (*alloc_events_fn)(void *ctx);

typedef struct alloc_vtable {
    const char *name;        /* registry name, e.g. "caching" */
    const char *desc;        /* one line */
    const char *source;      /* the paper or code it follows */
    ms_status (*create)(alloc_t *a);   /* fills a->impl */
    void (*destroy)(alloc_t *a);
    ms_status (*block)(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr);
    ms_status (*release)(alloc_t *a, uint64_t addr);
    ms_status (*empty_cache)(alloc_t *a);
    ms_status (*check)(const alloc_t *a, char *why, size_t n);
    void (*dump)(const alloc_t *a, FILE *f);
    unsigned caps;           /* ALLOC_CAP_* bits */
    /* ALLOC_CAP_EVENTS_HOOK: stores fn and ctx (NULL fn: none); NULL for other allocators */
    void (*set_events_hook)(alloc_t *a, alloc_events_fn fn, void *ctx);
    /* Optional (NULL: alloc_block_h and alloc_release_h call block and release): block that
     * also gives the block's handle, by which release_h finds it without looking its address
     * up; release_h frees the block at addr as release does, its handle a hint. */
    ms_status (*block_h)(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr,
                         uint32_t *handle);
    ms_status (*release_h)(alloc_t *a, uint64_t addr, uint32_t handle);
} alloc_vtable;

/* The common part every allocator shares; impl is the allocator's own state. Allocators
 * include this header and keep `stats` current; users see alloc_t as opaque. */
struct alloc {
    const alloc_vtable *vt;
    alloc_config cfg;
    mb_backend be;
    alloc_stats stats;
    void *impl;
    char problem[200];   /* why the last failed call failed, when the allocator says (or "") */
};

const alloc_vtable *const *alloc_registry(size_t *n);
const alloc_vtable *alloc_find(const char *name);

/* Creates allocator `name` over backend be. NULL cfg: defaults. */
ms_status alloc_new(const char *name, const alloc_config *cfg, const mb_backend *be,
                    alloc_t **out, ms_error *err);
void alloc_free(alloc_t *a);
/* Allocates `bytes` for `stream`; tag is the tensor id (the static arena looks it up; the
 * others ignore it). MS_ERR_OOM when it cannot, after the allocator's own retries. A zero-byte
 * request allocates nothing and returns MS_OK with address 0, and releasing address 0 is a
 * no-op: PyTorch's CUDACachingAllocator::allocate() returns a null pointer for size 0 without
 * calling malloc, and free(nullptr) returns at once. */
ms_status alloc_block(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr);
/* Frees a block returned by alloc_block; an unknown address is MS_ERR_INVALID. */
ms_status alloc_release(alloc_t *a, uint64_t addr);
/* alloc_block that also gives the block's handle (ALLOC_NO_HANDLE where the allocator has
 * none, and for a zero-byte request), for alloc_release_h: a caller that keeps each block's
 * address keeps its handle beside it, and the caching allocator then keeps no entry by
 * address for the block, a map update less at each allocation and each free. */
#define ALLOC_NO_HANDLE UINT32_MAX
ms_status alloc_block_h(alloc_t *a, uint64_t bytes, int stream, uint64_t tag, uint64_t *addr,
                        uint32_t *handle);
/* alloc_release for a block alloc_block_h gave handle for: the same result, the handle a
 * hint (a handle that does not name the live block at addr has it found by address).
 * alloc_release also frees such a block, by a search of the allocator's blocks. */
ms_status alloc_release_h(alloc_t *a, uint64_t addr, uint32_t handle);
ms_status alloc_empty_cache(alloc_t *a);
const alloc_stats *alloc_get_stats(const alloc_t *a);
const char *alloc_name(const alloc_t *a);
/* The allocator's ALLOC_CAP_* bits. */
unsigned alloc_caps(const alloc_t *a);
/* Registers the caller's deferred frees (alloc_events_fn); returns 1 when the allocator has
 * ALLOC_CAP_EVENTS_HOOK and took fn, 0 (nothing done) otherwise. NULL fn: none. */
int alloc_set_events_hook(alloc_t *a, alloc_events_fn fn, void *ctx);
/* Expensive invariant check (pools sorted, no overlap, stats equal a recount). */
ms_status alloc_check(const alloc_t *a, char *why, size_t n);
/* Why the last alloc_block / alloc_release returned an error other than MS_ERR_OOM, where the
 * allocator says ("" where it does not): a user-facing explanation for MS_ERR_INVALID. */
const char *alloc_problem(const alloc_t *a);
/* For implementations: records the reason of the failing call and returns st. */
ms_status alloc_fail(alloc_t *a, ms_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void alloc_dump(const alloc_t *a, FILE *f);

/* Stats helpers for implementations (inline: the allocators call them on every request). */
static inline void alloc_stat_add(uint64_t *cur, uint64_t *peak, uint64_t delta)
{
    *cur += delta;
    if (*cur > *peak) *peak = *cur;
}

static inline void alloc_stat_sub(uint64_t *cur, uint64_t delta) { *cur -= delta; }
/* Moves *cur from `before` to `after` (up or down), keeping *peak. */
void alloc_stat_delta(uint64_t *cur, uint64_t *peak, uint64_t before, uint64_t after);
/* Folds an inner allocator's counter changes (before -> after) into `into`: allocators that
 * delegate part of their requests (stitching's small pool, the static arena's fallback) count
 * the inner allocator's bytes and events in their own totals. */
void alloc_stats_absorb(alloc_stats *into, const alloc_stats *before, const alloc_stats *after);
/* For check(): writes the reason into why (may be NULL) and returns MS_ERR_INVALID. */
ms_status alloc_check_fail(char *why, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

/* blockmix.h — what device memory holds at its peak, by kind: a tracker both executors (the
 * simulator, sim/exec.c, and the CUDA runtime, runtime/rt_exec.cu) feed with every device
 * block they allocate and release, so that the breakdown they report is computed by one code
 * (`memsim simulate --breakdown`, `memsim run`). A block's kind is the one its ALLOC action
 * carries (planners/schedule.h, sched_block, set by the lowering that made the block), or
 * for SB_TRACE the trace class of its tensor. */
#ifndef MEMSIM_BLOCKMIX_H
#define MEMSIM_BLOCKMIX_H

#include <stdint.h>

#include "planners/schedule.h"
#include "traces/trace.h"

typedef enum bm_kind {
    BM_PARAM = 0, BM_GRAD, BM_OPTSTATE, BM_CHUNK, BM_ACT_SKEL, BM_ACT_TRANS, BM_WORKSPACE,
    BM_RBUF, BM_IDLE, BM_STAGING, BM_OTHER, BM_COUNT
} bm_kind;

/* "parameters", "gradients", ..., "staging buffers", "other". */
const char *bm_kind_name(bm_kind k);
/* The same as identifiers, for column names: "params", "grads", "optstates", "chunks",
 * "act_skel", "act_trans", "workspace", "rbuf", "idle", "staging", "other". */
const char *bm_kind_key(bm_kind k);
/* The kind of a block of kind `block` for schedule id `id`; for SB_TRACE, t (may be NULL)
 * gives the tensor's class: without it, or for an id it does not hold, BM_OTHER. */
bm_kind bm_kind_of(const trace_t *t, uint64_t id, sched_block block);

typedef struct blockmix blockmix;

/* NULL when out of memory. t may be NULL (every trace tensor is then "other"). */
blockmix *bm_new(const trace_t *t);
void bm_free(blockmix *b);
/* A block of `bytes` requested bytes for schedule id `id`, of kind `block` (its ALLOC's), now
 * lives at device address `addr`
 * (addresses of live blocks are distinct; an empty request, which gets no block, is not
 * recorded, so its release finds nothing). Keeps the kinds at the largest sum of live bytes
 * so far, unless bm_failed was called. 0 when out of memory. */
int bm_alloc(blockmix *b, uint64_t id, sched_block block, uint64_t addr, uint64_t bytes);
/* The block at addr went back to the allocator (a deferred free: when it really went back).
 * An address it does not hold is ignored. */
void bm_release(blockmix *b, uint64_t addr);
/* The same without the map by address, for an executor that keeps a record per tensor
 * anyway (the simulator's): bm_add counts the block and returns a token that bm_sub takes
 * when the block goes back. Do not mix the two forms for one block. */
uint64_t bm_add(blockmix *b, uint64_t id, sched_block block, uint64_t bytes);
void bm_sub(blockmix *b, uint64_t token);
/* An allocation failed (out of memory): the breakdown becomes the state now, and stays. */
void bm_failed(blockmix *b);
/* The sum of a vector of bytes by kind. */
uint64_t bm_sum(const uint64_t v[BM_COUNT]);
/* The bytes by kind live now. */
void bm_live(const blockmix *b, uint64_t out[BM_COUNT]);
/* The bytes by kind at the peak (or at the failure), and whether it is the failure's. */
void bm_peak(const blockmix *b, uint64_t out[BM_COUNT], int *at_failure);

#endif

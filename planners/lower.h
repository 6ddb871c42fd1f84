/* lower.h — lowering: turns a workload trace and a plan into the schedule both executors
 * run (planners/schedule.h). Keeps the trace's alloc/op/free program on the compute stream and
 * adds what the plan asks for: frees after a layer's forward and replays before its backward
 * (recompute), offload / prefetch on the copy streams with events (swap), token-wise partial
 * recomputation (swap with alpha < 1), MEMO's two rounding buffers (plan knob
 * rounding_buffers), fresh ids for re-allocated tensors so a static memory plan can place each
 * incarnation (plan knob memory_plan), and the overlap of context-parallel ring exchanges with
 * their attention kernel. Used by the memsim command, experiments, the runtime, the MEMO
 * planner (planners/memo/policy_memo.c) and the tests; the rules are in docs/POLICIES.md and
 * docs/MEMO.md. */
#ifndef MEMSIM_LOWER_H
#define MEMSIM_LOWER_H

#include "base/knobtab.h"
#include "traces/machine.h"
#include "traces/trace.h"
#include "planners/lowerings.h"
#include "planners/plan.h"
#include "planners/schedule.h"


/* The per-tensor lowering of this file: keep / swap / recompute, rounding buffers, memory-plan
 * renaming (the row "tensor" of planners/lowerings.c's table). */
extern const lower_backend lower_backend_tensor;

/* ceil(frac * bytes), at most bytes; bytes itself when frac >= 1: a swapped tensor's token
 * fraction, a partial replay's transient. */
uint64_t lower_scaled_bytes(uint64_t bytes, double frac);

/* Gives schedule s, lowered from a trace of the same structure with sources S noted
 * (lower_opts.srcs, S->ok 1), the sizes and op times of trace t on machine m: each number
 * its source names is computed again as the lowering computes it, everything else is kept.
 * MS_ERR_INVALID when S does not describe s or t lacks a record S names (err says which;
 * s's numbers are then partly bound). */
ms_status lower_bind(schedule_t *s, const lower_srcs *S, const trace_t *t, const machine_t *m,
                     ms_error *err);
/* Packs S's sources that name the trace into S->bound, for a lower_bind that reads
 * those alone (a sweep's template binds once per point): MS_ERR_NOMEM leaves S unpacked,
 * and lower_bind then walks every action's source as before. Freed with free(S->bound). */
ms_status lower_srcs_pack(lower_srcs *S);
/* Whether the packed sources S fit indexed schedule s's numbers (lower_srcs.bound_nums,
 * set and returned; 0 without an index or packed sources): lower_bind then writes them into
 * the index (sched_nums_edit), else into the actions. */
int lower_srcs_fit(lower_srcs *S, const schedule_t *s);
/* 1 when lower_bind(s, S, t, m) would leave s as it is, bit for bit (the check that the
 * sources noted for s's own trace t account for its numbers); 0 otherwise or on error. */
int lower_bind_same(const schedule_t *s, const lower_srcs *S, const trace_t *t,
                    const machine_t *m);

/* ---- plan knobs lowering reads ----
 * They are the rows of lower_knob_table (lower.c), where a comment above each row says what
 * it does; `memsim list knobs` prints them with their defaults, docs/MEMO.md and
 * docs/POLICIES.md explain them with the policies that write them. */

/* Synthetic tensor ids made by lowering (bit 62 set; never in a trace). Incarnation k >= 1 of
 * trace tensor id (id < LOWER_ID_TRACE_LIMIT), and rounding-buffer block k of layer `layer`
 * in forward pass `pass` (k = 0: the forward block, 1: the prefetched block). */
#define LOWER_ID_SYNTH (UINT64_C(1) << 62)
#define LOWER_ID_TRACE_LIMIT (UINT64_C(1) << 48)
uint64_t lower_id_incarnation(uint64_t trace_id, unsigned k);
uint64_t lower_id_rbuf(uint32_t pass, int32_t layer, unsigned k);
/* 1 if id was made by lowering; *trace_id (may be NULL) gets the trace tensor an incarnation
 * id stands for (UINT64_MAX for a rounding-buffer block). */
int lower_id_synthetic(uint64_t id, uint64_t *trace_id);
/* 1 if id is a rounding-buffer block; *pass and *layer (may be NULL) are filled. */
int lower_id_is_rbuf(uint64_t id, uint32_t *pass, int32_t *layer);
/* An offload's D2H copy names the device block it reads, while the HOST_ALLOC before it names
 * the host copy by the id the prefetched block will have, when those differ: rounding-buffer
 * block k = 0 -> k = 1, and with memory_plan incarnation k -> k + 1 (a trace id -> incarnation
 * 1). This returns that id for device block id (id itself for other synthetic ids). Without
 * memory_plan an individually swapped tensor's host copy has the block's own id, so a caller
 * (the runtime, which must put the copied bytes where the prefetch reads them) looks the
 * block's own id up first and this one only when that holds no host memory. */
uint64_t lower_id_host_copy(uint64_t id);
/* The block of plan knob idle_buffer_bytes (one per schedule). */
uint64_t lower_id_idle_buffer(void);

/* ---- where a rounding-buffer member's bytes are ----
 * With rounding_buffers a member (a skeletal activation of layer L made in forward pass P
 * that the plan keeps or swaps) has no block of its own in the schedule: it is a slice of its
 * group's block, lower_id_rbuf(P, L, 0) during the forward and lower_id_rbuf(P, L, 1) once
 * prefetched (the same offsets in both). The schedule carries blocks, not slices, so the
 * simulator needs none of this; the runtime's real kernels do (they take operand addresses).
 * Layout, fixed here: within a group the members in decreasing alpha (swapped whole first,
 * kept members count as 1), ties in trace order, each at the running sum of the bytes
 * before it (no padding: the block's size is the sum of its members' bytes). So the block's
 * offloaded prefix (its copy bytes, the sum of ceil(alpha * bytes)) holds exactly the
 * members swapped whole, plus the first bytes of at most one partially swapped member;
 * with several partially swapped members the prefix does not hold each one's saved tokens
 * (no plan written today does that; memo's alphas are 0 or 1 per tensor). */
typedef struct lower_rb_place {
    uint64_t tensor;         /* trace tensor id */
    uint32_t pass;           /* forward pass and layer of its group (lower_id_rbuf) */
    int32_t layer;
    uint64_t offset_bytes;   /* from the block's start */
    uint64_t bytes;          /* the tensor's bytes */
} lower_rb_place;

typedef struct lower_rb_map lower_rb_map;

/* The members and their places for trace t under plan p, as lower_schedule lowers them; an
 * empty map when the plan has no rounding buffers. Fails as lower_schedule would on a plan it
 * cannot read (knobs, unknown ids). */
ms_status lower_rb_map_new(const trace_t *t, const plan_t *p, lower_rb_map **out,
                           ms_error *err);
void lower_rb_map_free(lower_rb_map *m);
size_t lower_rb_map_count(const lower_rb_map *m);
/* The places of trace tensor tensor_id (an id reused after its free can be a member of more
 * than one group): up to max into out, in pass order; returns how many there are (0: not a
 * member). NULL m: none. */
size_t lower_rb_find(const lower_rb_map *m, uint64_t tensor_id, lower_rb_place *out,
                     size_t max);

/* The plan knobs the tensor lowering reads (the list above), parsed by lower_knob_table. */
typedef struct lower_knobs {
    int rounding_buffers, memory_plan, host_pow2;
    int host_round;               /* lower_host_round */
    uint64_t host_granule, idle_buffer_bytes;
    int overlap_comm, record_stream, stream_pools;
    int tokenwise;                /* 1 chain, 0 producer */
    int swap_at;                  /* lower_swap_at */
    int swap_stream;              /* lower_swap_stream */
    int drop_at;                  /* lower_drop_at */
    uint64_t given;               /* rows given (knobtab_given) */
} lower_knobs;
extern const knobtab lower_knob_table;

/* When a swapped tensor goes to the host and comes back (plan knob swap_at). */
typedef enum lower_swap_at {
    LOWER_SWAP_LAYER = 0,    /* after its layer's forward; prefetched a layer ahead */
    LOWER_SWAP_SAVE          /* when saved; back when the backward first reads it */
} lower_swap_at;

/* When a tensor the plan recomputes is freed in the forward (plan knob drop_at). */
typedef enum lower_drop_at {
    LOWER_DROP_LAYER = 0,    /* at the end of its layer's forward */
    LOWER_DROP_USE           /* after the last forward op that uses it (lower_drop.c) */
} lower_drop_at;

/* Where swap_at=save's copies run (plan knob swap_stream). */
typedef enum lower_swap_stream {
    LOWER_SWAP_COPY = 0,     /* the D2H and H2D streams */
    LOWER_SWAP_COMPUTE       /* the compute stream */
} lower_swap_stream;

/* How an executor's pinned host buffers are sized for one offloaded rounding-buffer block
 * (plan knob host_round; MEMO's executor, docs/MEMO.md "MEMO's executor"):
 *  LOWER_HOST_EXACT        one buffer of the offloaded bytes, rounded up to a multiple of
 *                          host_granule (an executor's own cudaHostAlloc in whole pages);
 *  LOWER_HOST_LAYER_POW2   one buffer rounded up to a power of two (one torch.empty(...,
 *                          pin_memory=True): PyTorch's caching host allocator rounds with
 *                          c10::llvm::PowerOf2Ceil before cudaHostAlloc);
 *  LOWER_HOST_TENSOR_POW2  one power-of-two buffer per member tensor's slice, summed;
 *  LOWER_HOST_BUFFER_POW2  one power-of-two buffer for the slices of the block's activations
 *                          (the rounding buffer's offloaded part, copied as one) and one per
 *                          fp32 statistic (lower_is_statistic), which MEMO's rounding buffer,
 *                          sized by its 16bsh count of bf16 activations, does not hold. */
typedef enum lower_host_round {
    LOWER_HOST_EXACT = 0,
    LOWER_HOST_LAYER_POW2,
    LOWER_HOST_TENSOR_POW2,
    LOWER_HOST_BUFFER_POW2,
} lower_host_round;

/* "exact", "layer_pow2", "tensor_pow2", "buffer_pow2". */
const char *lower_host_round_name(lower_host_round r);

/* Parses a host_round value; 0 on success, -1 if `s` names none. */
int lower_host_round_parse(const char *s, lower_host_round *out);

/* Whether a skeletal tensor is a normalization's or the attention's fp32 statistic (a name
 * ending in "_stats" or ".attn_lse", as the generator writes them): small tensors that
 * autograd saves beside the bf16 activations. */
int lower_is_statistic(const char *name);

/* The slices one offloaded block copies, summed as each reading needs them. */
typedef struct lower_host_acc {
    uint64_t bytes, pow2_sum;           /* all slices: their bytes, their powers of two */
    uint64_t stat_bytes, stat_pow2_sum; /* the same over the statistics */
} lower_host_acc;

/* Adds a slice of `bytes` (0 adds nothing); is_stat: the slice is of a statistic. */
void lower_host_acc_add(lower_host_acc *a, uint64_t bytes, int is_stat);

/* The pinned host bytes of the block's offload under reading r (granule_bytes: exact's page
 * size, 0 or 1 exact). */
uint64_t lower_host_acc_bytes(const lower_host_acc *a, lower_host_round r,
                              uint64_t granule_bytes);

#endif

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
#include "planners/plan.h"
#include "planners/schedule.h"

/* What lowering did (for tests, logs and `memsim plan --explain`). */
typedef struct lower_report {
    uint64_t actions, events;
    uint64_t dropped;        /* PD_RECOMPUTE tensors freed after their layer's forward */
    uint64_t rebuilt;        /* ... re-allocated and recomputed before their layer's backward */
    uint64_t swapped;        /* PD_SWAP tensors offloaded after their layer's forward */
    uint64_t prefetched;     /* ... brought back for their layer's backward */
    uint64_t recompute_ops;  /* COMPUTE actions with recompute = 1 */
    double recompute_us;     /* their total duration */
    uint64_t d2h_bytes, h2d_bytes;
    uint64_t ignored;        /* recompute/swap decisions on tensors that were not live at the
                                end of their layer's forward (nothing to save) */
    uint64_t unknown_ids;    /* plan entries naming tensors the trace never allocates */
    /* MEMO variants (docs/MEMO.md) */
    uint64_t rb_blocks;      /* rounding-buffer blocks allocated (one per layer pass and one
                                per prefetch) */
    uint64_t rb_bytes;       /* size of one rounding buffer (0 without rounding_buffers) */
    uint64_t rb_offloads;    /* rounding buffers offloaded after their layer's forward */
    uint64_t idle_bytes;     /* the idle rounding buffer held for the whole schedule
                                (plan knob idle_buffer_bytes; 0: none) */
    uint64_t renamed;        /* re-allocations given a fresh id (memory_plan) */
    uint64_t overlapped;     /* ".ovl" collectives merged into their attention kernel */
    double overlap_hidden_us;/* their time hidden under the attention kernels */
} lower_report;

typedef struct lower_opts {
    int64_t iter_first;      /* first iteration (value of "mark iter") lowered; INT64_MIN:
                                from the start */
    int64_t iter_count;      /* iterations lowered from iter_first; <= 0: all. Records before
                                the first "mark iter" are always lowered. */
    int emit_marks;          /* 1: the trace's marks become MARK actions (default) */
    int prefetch_alloc_on_compute; /* 0: a prefetch allocates its block on the H2D stream
                                (default); 1: on the compute stream, just before the prefetch
                                is released (PyTorch code that allocates the destination on
                                the main stream and copies on a side stream) */
    int ignore_unknown_ids;  /* 0: a plan entry for a tensor the trace never allocates is
                                MS_ERR_INVALID (default); 1: counted in the report, ignored */
    int overlap_ovl;         /* 1 (default): a collective whose name ends in ".ovl" (the CP
                                ring exchange) runs under the attention kernel that follows it
                                in the same layer and phase: one COMPUTE of
                                max(attention, ring) instead of two; 0: serialized. The plan
                                knob overlap_comm=0 also turns it off. */
    lower_report *report;    /* filled when not NULL */
} lower_opts;

void lower_opts_default(lower_opts *o);

/* Lowers trace t under plan p (NULL: keep everything) for machine m with the lowering the
 * plan names (plan_t.lowering, looked up with lower_find; an unknown name is MS_ERR_INVALID
 * listing the known ones). m is needed only for ops without a duration, which get
 * traces/roofline.h's kernel time (the chunk and DHA lowerings need it always). NULL o:
 * defaults. Deterministic: the same inputs give the same schedule, action for action. Errors
 * name the trace record: an op without a duration and no machine, a plan that cannot be
 * lowered (a recomputed tensor made outside its layer's forward, a tensor used while
 * offloaded or dropped, DHA decisions under the tensor lowering: MS_ERR_UNSUPPORTED). */
ms_status lower_schedule(const trace_t *t, const plan_t *p, const machine_t *m,
                         const lower_opts *o, schedule_t **out, ms_error *err);

/* ---- the lowerings, by name ----
 * A lowering turns a trace and a plan into a schedule; each is one row, defined next to its
 * code (this file's per-tensor lowering, planners/protrain/lower_chunks.c, planners/memferry/lower_dha.c) and
 * listed in lower.c's table, which lower_schedule looks a plan's lowering up in, as
 * alloc_new looks allocators up in memory/alloc.c. */
typedef ms_status (*lower_fn)(const trace_t *t, const plan_t *p, const machine_t *m,
                              const lower_opts *o, schedule_t **out, ms_error *err);

typedef struct lower_backend {
    const char *name;        /* what a plan's `lowering` line names, e.g. "chunks" */
    const char *desc;        /* one line */
    lower_fn lower;
    int rounding_buffers;    /* 1: its plans may put members in MEMO's rounding buffers
                                (lower_rb_map_new looks for them) */
} lower_backend;

/* The rows in table order ("tensor", "chunks", "dha"). */
const lower_backend *const *lower_registry(size_t *n);
/* NULL if no lowering has that name. */
const lower_backend *lower_find(const char *name);
/* The per-tensor lowering of this file: keep / swap / recompute, rounding buffers, memory-plan
 * renaming (the row "tensor"). */
extern const lower_backend lower_backend_tensor;

/* ---- plan knobs lowering reads (docs/MEMO.md) ----
 *  rounding_buffers=1  MEMO's two rounding buffers: the skeletal activations of layer L that
 *                      the plan keeps or swaps live in one block of the buffer size (the
 *                      largest layer's skeletal bytes) instead of their own allocations; the
 *                      block of layer L is made when L first writes into it, after waiting
 *                      for the offload of layer L-2 (the buffer's previous occupant); it is
 *                      offloaded whole (alpha-weighted bytes) after L's forward and prefetched
 *                      whole during layer L+1's backward. A layer's skeletal tensors must be
 *                      all kept or all swapped.
 *  idle_buffer_bytes=B one device block of B bytes (id lower_id_idle_buffer()) allocated on
 *                      the compute stream before the first lowered record and freed after
 *                      the last: the rounding buffer that MEMO's executor holds while a
 *                      full-recomputation layer uses the other (docs/MEMO.md, "MEMO's
 *                      executor"). Default 0: none.
 *  memory_plan=1       every re-allocation of a tensor (replay, prefetch) gets a fresh
 *                      synthetic id, so each incarnation can have its own static offset.
 *  host_round=R        how pinned host buffers are sized (lower_host_round below): exact
 *                      (default), layer_pow2, tensor_pow2 or buffer_pow2. A swapped tensor
 *                      outside a block is one buffer, rounded to a power of two under every
 *                      pow2 reading.
 *  host_pow2=1         the older spelling of host_round=layer_pow2 (0: exact); must agree
 *                      with host_round when both are given.
 *  host_granule=B      with host_round=exact: pinned host buffers are rounded up to a multiple
 *                      of B bytes (default 1: exact; an executor's own cudaHostAlloc takes
 *                      whole host pages, 4096).
 *  tokenwise=chain     token-wise recomputation replays, on the (1 - alpha) tokens, every
 *                      forward op of the layer that the partially swapped tensors depend on
 *                      (MEMO §4.1); tokenwise=producer runs only each tensor's producer.
 *                      Default: chain with rounding buffers, producer otherwise.
 *  overlap_comm=0      turns the ".ovl" merge off (see lower_opts.overlap_ovl).
 *  record_stream=1     the FREE of a block that a collective (op kind comm) read or wrote
 *                      since its allocation is marked side_use: c10d's NCCL process group
 *                      records its stream on a collective's tensors (recordStream), so with
 *                      the host issue model the block goes back only when the GPU has run
 *                      what was issued before the free (docs/ALLOCATORS.md, "Reorganizations").
 *                      Default 0 (TORCH_NCCL_AVOID_RECORD_STREAMS=1, or no side stream).
 *  stream_pools=1      an ALLOC of a tensor the trace allocates on a side stream (stream k > 0,
 *                      e.g. TE's cp stream) carries pool k: the caching allocator serves it
 *                      from that stream's pools, as PyTorch's per-stream pools do. Default 0:
 *                      every trace tensor in the compute stream's pools.
 *  swap_at=save        a swapped tensor (alpha 1) goes to the host when it is saved, not at
 *                      its layer's forward end: copied out after the first forward op that
 *                      makes or reads it, its device block freed after its last forward use
 *                      (a tensor made before the forward, a parameter, keeps its block),
 *                      brought back into a new block just before the first backward op that
 *                      reads it, and that block and the host copy freed after the last one
 *                      (autograd's saved-tensor pack and unpack hooks). Default layer: the
 *                      per-layer offload and prefetch above. Not with rounding_buffers.
 *  swap_stream=compute the copies of swap_at=save run on the compute stream (a blocking
 *                      copy and a copy on the current stream); default copy: on the D2H and
 *                      H2D streams, ordered with compute by events. */

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

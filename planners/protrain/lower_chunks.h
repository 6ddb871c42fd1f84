/* lower_chunks.h — chunk-based lowering (ProTrain, Yang et al.; docs/PROTRAIN.md): turns a plain
 * workload trace and a plan carrying the knob chunks=1 into the full schedule of a chunked
 * model-state manager. Parameters are packed in execution order into fixed-size chunks; the
 * first n_persist chunks live on the GPU (gradients reduced and Adam run on the GPU, optimizer
 * states sharded over data parallelism), the others live on the host and are gathered into
 * n_buffer chunk buffers allocated once, prefetched ahead of compute, evicted in a predefined
 * (farthest-next-use) order, reused in backward when still resident, their gradients reduced
 * and copied to the host after their last backward use and updated by Adam on the host CPU
 * (SS_HOST) while the GPU runs the rest of the backward. Activations are managed per
 * transformer block: none, swap or checkpoint, in ProTrain's interleaved layout.
 *
 * The same module gives the chunk layout and the block-granular access program that the
 * ProTrain cost model (planners/protrain/cost_protrain.c) evaluates, so model and lowering agree on
 * what is loaded when. The baselines (planners/protrain/policy_offload_baselines.c: ZeRO-3 offload,
 * Gemini, FSDP offload) are other knob settings of the same lowering.
 *
 * Used by lower_schedule() (the row "chunks", lower_backend_chunks), the protrain and offload-baseline
 * policies, the `memsim protrain` driver and tests. */
#ifndef MEMSIM_LOWER_CHUNKS_H
#define MEMSIM_LOWER_CHUNKS_H

#include "planners/lower.h"
#include "planners/plan.h"
#include "planners/schedule.h"
#include "base/knobtab.h"
#include "traces/machine.h"
#include "traces/trace.h"

/* Block roles (activation handling of one transformer block). */
enum { LC_NONE = 0, LC_SWAP = 1, LC_CKPT = 2 };

/* How data-parallel collectives of chunks (parameter all-gather, gradient reduce-scatter)
 * are modelled. */
enum {
    LC_COLL_AUTO = 0,  /* link when the machine has no NVLink (node.nvlink_Bps = 0), else compute */
    LC_COLL_LINK,      /* through host memory (NCCL without peer access): copies on the PCIe
                          link of this GPU, sharing it with parameter loads and swaps */
    LC_COLL_COMPUTE,   /* NVLink: a COMPUTE action of the ring time, serialized with kernels */
    LC_COLL_STREAM     /* NVLink, overlapped: the ring time runs on the copy stream of the
                          chunk's PCIe copy (gather: before it is ready; gradients: before the
                          offload), charged as the bytes the copy engine would move in that
                          time (the simulator has no NVLink resource of its own) */
};

/* Every knob lowering reads from the plan (plan knob names in brackets). */
typedef struct lc_knobs {
    int chunk_by_layer;          /* [chunk_by=layer] one chunk per parameter group (a layer, the
                                    embedding, the head) as DeepSpeed / FSDP gather them;
                                    [chunk_by=size] (default) ProTrain's fixed-size chunks */
    uint64_t chunk_bytes;        /* [chunk_bytes] S_chunk; 0: searched (lc_chunk_search) */
    uint64_t chunk_search_bytes; /* [chunk_search] range above the largest parameter that the
                                    chunk-size search scans (default 64 MiB) */
    int n_persist, n_buffer;     /* [n_persist] [n_buffer] */
    int n_swap, n_ckpt;          /* [n_swap] [n_checkpoint] blocks swapped / checkpointed */
    double host_bytes_per_param; /* [host_bytes_per_param] host memory per parameter of a
                                    non-persistent chunk (whole model, split over dp):
                                    default 14 = fp32 master, Adam m and v, fp16 copy */
    int host_pinned_tensors;     /* [host_pinned_tensors] of host_bytes_per_param, this many
                                    tensors per chunk shard are pinned PyTorch tensors of
                                    host_pinned_bytes_per_param each, which PyTorch's
                                    CachingHostAllocator rounds up to a power of two (FSDP's
                                    pinned parameter shard and CPU gradient); default 0 */
    double host_pinned_bytes_per_param; /* [host_pinned_bytes_per_param] see above */
    int staging_separate;        /* [staging_separate] 1: the pinned buffers copies go through
                                    (one chunk per buffer) come on top of host_bytes_per_param;
                                    0 (default): they are part of it (the host chunks are pinned) */
    double gpu_opt_bytes_per_param; /* [gpu_opt_bytes_per_param] optimizer states of persistent
                                    chunks on the GPU per parameter (12: fp32 master, m, v) */
    int persist_shard;           /* [persist_shard] 1 (default): the parameters of persistent
                                    chunks stay whole on every GPU (ProTrain §3.1.1) but their
                                    optimizer states are ZeRO-sharded over dp: gradients
                                    reduce-scattered as their backward ends, Adam on the shard,
                                    updated parameters all-gathered; 0: nothing partitioned:
                                    gradients all-reduced, Adam on the whole chunk everywhere */
    int persist_gather;          /* [persist_gather=step|next|auto] with persist_shard: the
                                    updated parameters of a persistent chunk are all-gathered
                                    right after its GPU Adam and the step waits for them
                                    (LC_PG_STEP, default), or at the start of the next
                                    iteration, each waited for only before the chunk's first
                                    use (LC_PG_NEXT: the all-gather overlaps the forward, as
                                    Megatron-LM's overlap_param_gather does); LC_PG_AUTO: the
                                    cost model takes the faster per configuration (a search
                                    setting: a plan to lower gives step or next) */
    double param_xfer_bytes;     /* [param_xfer_bytes] bytes per parameter copied to the GPU
                                    when gathering a chunk (2: fp16; FSDP's fp32 shard: 4) */
    double grad_xfer_bytes;      /* [grad_xfer_bytes] bytes per parameter of the gradient
                                    shard copied to the host (2; FSDP: 4) */
    int coll;                    /* [coll=auto|link|compute|stream]; auto: link without NVLink,
                                    stream with it */
    double coll_link_eff;        /* [coll_link_eff] fraction of the link rate collectives
                                    through host memory reach (default 0.5, assumed) */
    int overlap_host_adam;       /* [overlap_host_adam] 1: host Adam of a chunk starts when its
                                    gradients are on the host (ProTrain); 0: after the backward */
    double host_adam_scale;      /* [host_adam_scale] multiplies host.adam_params_per_s */
    int step_sync;               /* [step_sync] 1: the step ends when the host Adam ends (the
                                    optimizer step synchronizes, ProTrain's T_iter) */
    int reuse_resident;          /* [reuse] 1: chunks still resident after the forward are used
                                    by the backward without reloading; 0: every chunk is
                                    gathered again (FSDP reshards after forward) */
    int prefetch_depth;          /* [prefetch_depth] how many access steps ahead a load may be
                                    issued; 0: as far as free buffers allow; -1: on demand (when
                                    the step before the one that needs it ends: no prefetch) */
    int swap_lead;               /* [swap_lead] blocks ahead of need a swapped block is
                                    prefetched in backward; 0 (default): as soon as the
                                    swapped block above it has finished its backward */
    uint64_t init_device_bytes;  /* [init_device_bytes] bytes allocated and freed on the GPU
                                    before the first iteration (model initialization) */
    uint64_t given;              /* rows of lc_knob_table given (knobtab_given) */
} lc_knobs;

enum { LC_PG_STEP = 0, LC_PG_NEXT = 1, LC_PG_AUTO = 2 };

void lc_knobs_default(lc_knobs *k);
/* Reads the knobs above from p (absent: default). MS_ERR_INVALID names a malformed knob. */
ms_status lc_knobs_from_plan(const plan_t *p, lc_knobs *k, ms_error *err);
/* Writes every knob (and chunks=1, the marker older plan files named this lowering by) into
 * p, and names this lowering as p's ("chunks"). */
ms_status lc_knobs_to_plan(const lc_knobs *k, plan_t *p, ms_error *err);

/* ---- the chunk layout and the access program ---- */

typedef struct lc_chunk {
    uint64_t used_bytes;         /* parameter bytes packed into it (<= chunk capacity) */
    uint64_t params;             /* parameter elements */
} lc_chunk;

/* One access step: a trace segment (from one `mark layer` or `mark phase` to the next) of the
 * forward or backward. A step needs every chunk its ops read parameters from or write
 * gradients into, all at its start (block granularity: the cost model and lowering agree). */
typedef struct lc_step {
    trace_phase phase;           /* TP_FWD or TP_BWD */
    int32_t block;               /* transformer block (layer) or -1 */
    double compute_us;           /* kept ops of the segment */
    uint32_t need_first, n_need; /* into lc_layout.needs */
} lc_step;

typedef struct lc_layout {
    uint64_t chunk_bytes;        /* capacity of every chunk (S_chunk) */
    size_t n_chunks;
    lc_chunk *chunks;            /* execution order */
    uint64_t max_param_bytes;
    char max_param_name[TRACE_NAME_MAX];
    uint64_t param_bytes, params;/* all parameters */
    int dp, n_blocks, dtype_bytes;
    size_t n_steps;
    lc_step *steps;              /* one iteration: forward steps then backward steps */
    uint32_t *needs;             /* chunk indices, sorted within a step */
    size_t n_needs;
    int32_t *fwd_step, *bwd_step;/* per block: its forward / backward step (-1 if none) */
    int32_t *block_chunk_lo, *block_chunk_hi; /* per block: chunks its parameters span */
    int32_t *first_use;          /* per chunk: the first step that needs it (-1: none) */
    double adam_gpu_us_per_param;/* GPU Adam time per local-shard parameter (trace optim ops) */
    double fwd_us, bwd_us;       /* total compute of the steps */
    struct u64map *managed;      /* tensor ids beyond the state classes the chunk manager
                                  * takes over (see lc_managed): id -> 1 */
    int param_bytes_per_param;   /* the trace's bytes per parameter (4: fp32 under autocast) */
} lc_layout;

/* Whether trace tensor x is a model state the chunk manager owns, so that its trace alloc,
 * free and the ops touching only such tensors are replaced by the chunks: parameters,
 * gradients and optimizer states (also when the trace allocates gradients in the backward
 * and optimizer states at the first step, as PyTorch eager does), a parameter's cast made
 * by a forward op that reads only parameters (autocast's bf16 weight copy: the chunks hold
 * the parameters in the compute dtype already), and the optimizer phase's temporaries
 * (chunk Adam replaces the trace's optimizer). Rules in docs/PROTRAIN.md §1. */
int lc_managed(const lc_layout *L, const trace_tensor *x);

/* Builds the layout of trace t under knobs k (chunk size searched when k->chunk_bytes is 0,
 * unless chunk_by_layer). m gives durations to ops without one. Errors: a trace the chunk
 * lowering cannot take (ZeRO-3 / offload / LoRA modes, several forward passes per
 * iteration, no iteration mark), a chunk size smaller than the largest parameter
 * (MS_ERR_INVALID naming it). */
ms_status lc_layout_new(const trace_t *t, const machine_t *m, const lc_knobs *k,
                        lc_layout **out, ms_error *err);
void lc_layout_free(lc_layout *L);

/* The chunk size the search picks for the parameters (bytes, in execution order; group[i]
 * >= 0 is the transformer block of parameter i, whose parameters are kept in one chunk when
 * they fit; group may be NULL): the size in [largest, largest + range] (1 MiB steps) that
 * wastes the least chunk space when they are packed in order; ties go to the smaller size.
 * ProTrain's own search (its Appendix B.1) is not in the text available here: this rule is
 * an assumption that reproduces its Table 4 chunk counts. */
uint64_t lc_chunk_search(const uint64_t *param_bytes, const int32_t *group, size_t n,
                         uint64_t range_bytes);

/* Block roles in ProTrain's interleaved layout (Fig. 2): the first n_swap + n_ckpt blocks are
 * managed, swap blocks spread evenly among them starting with block 0, checkpoint blocks in
 * between, the last blocks unmanaged. roles has n_blocks entries. MS_ERR_INVALID when
 * n_swap + n_ckpt > n_blocks or negative. */
ms_status lc_block_roles(int n_blocks, int n_swap, int n_ckpt, uint8_t *roles, ms_error *err);

/* When each swapped block's prefetch is issued in backward: at[k] is the block before whose
 * backward the swap-in of swap block k starts (in [k + 1, n_blocks]; n_blocks: at the
 * backward's first step), -1 for blocks not swapped. lead >= 1: k + lead. lead 0 ("timely",
 * ProTrain §3.1: the unmanaged blocks' backward frees memory early, "enabling timely
 * prefetching for swapping blocks"): right after the swapped block above k has finished its
 * backward, so that one swapped block at a time is back on the GPU, as with lead 1, but the
 * copy has the whole interval to hide in; the highest swapped block after the last managed
 * block's backward. Distinct swap blocks get distinct points below n_blocks. */
void lc_swap_issue(const uint8_t *roles, int n_blocks, int lead, int32_t *at);

/* ---- the buffer plan: which load fills which buffer when ---- */

enum { LC_REL_ITER = 0, LC_REL_STEP, LC_REL_OFFLOAD };

typedef struct lc_load {
    int32_t step;                /* the step that needs it */
    int32_t chunk, buffer;
    int rel_kind;                /* LC_REL_ITER: at iteration start; LC_REL_STEP: after step
                                    rel_ref finished; LC_REL_OFFLOAD: after chunk rel_ref's
                                    gradients reached the host */
    int32_t rel_ref;
    int32_t emit_after;          /* program position: -1 = iteration start, else after step */
} lc_load;

typedef struct lc_bufplan {
    lc_load *loads; size_t n_loads;
    int32_t *last_step;          /* per chunk: its last access (gradients final), -1 if none */
    int32_t *chunk_buffer;       /* per chunk: buffer holding it at its last access (-1 for a
                                    persistent chunk) */
} lc_bufplan;

/* Plans the loads of one iteration for n_persist persistent chunks and n_buffer buffers
 * (knobs give reuse_resident and prefetch_depth). MS_ERR_INVALID when a step cannot get
 * every chunk it needs (too few buffers), naming the step. */
ms_status lc_bufplan_make(const lc_layout *L, int n_persist, int n_buffer, const lc_knobs *k,
                          lc_bufplan *bp, ms_error *err);
void lc_bufplan_clear(lc_bufplan *bp);

/* The smallest n_buffer that lc_bufplan_make accepts for n_persist (0 when every chunk is
 * persistent). */
int lc_min_buffers(const lc_layout *L, int n_persist, const lc_knobs *k);

/* Host bytes of one non-persistent chunk's states, shard_params parameters of it on this
 * rank: host_bytes_per_param each, the pinned tensors among them rounded up to a power of
 * two as PyTorch's pinned allocator does (shared with the cost model). */
uint64_t lc_host_chunk_bytes(const lc_knobs *k, uint64_t shard_params);

/* ---- collectives and transfer sizes (shared with the cost model) ---- */

/* The collective mode in force on m (never LC_COLL_AUTO). */
int lc_coll_mode(const lc_knobs *k, const machine_t *m, int dp);
/* Whether the persistent chunks' all-gathers exist and are copies that can move to the next
 * iteration's start (sharded optimizer states, dp > 1, collective mode coll link or stream):
 * where persist_gather=next applies (the lowering and the cost model agree on it). */
int lc_persist_gather_movable(const lc_knobs *k, int coll, int dp);
/* Ring all-gather / reduce-scatter time over NVLink of a `bytes` buffer among dp ranks;
 * lc_allreduce_us: the ring all-reduce. */
double lc_coll_us(const machine_t *m, uint64_t bytes, int dp);
double lc_allreduce_us(const machine_t *m, uint64_t bytes, int dp);

/* Host bounce buffer of a persistent chunk's collectives through host memory (link mode):
 * their copies are cut to this size (NCCL's shared-memory transport uses small buffers). */
#define LC_COLL_STAGE_BYTES (UINT64_C(64) << 20)

/* Synthetic tensor ids of chunk lowering (bit 61 set: never a trace id nor lower.c's). */
#define LC_ID_BASE (UINT64_C(1) << 61)
enum { LC_ID_PERSIST = 1, LC_ID_POPT, LC_ID_BUFFER, LC_ID_HOST, LC_ID_INIT };
uint64_t lc_id(int kind, uint32_t index);
/* 1 if id was made by chunk lowering; *kind and *index (may be NULL) are filled. */
int lc_id_parse(uint64_t id, int *kind, uint32_t *index);

/* What lower_chunks did (tests, `memsim protrain`). */
typedef struct lc_report {
    uint64_t actions, events;
    uint64_t buffer_allocs;      /* chunk buffers allocated (once each) */
    uint64_t loads, reused;      /* chunk gathers; backward uses served from a buffer */
    uint64_t h2d_bytes, d2h_bytes;
    uint64_t host_adam, gpu_adam;/* HOST_COMPUTE / GPU Adam actions */
    uint64_t recompute_ops, swapped_tensors;
    uint64_t host_state_bytes;   /* host memory of model states (this rank) */
    uint64_t static_gpu_bytes;   /* persistent chunks, their optimizer states, buffers */
} lc_report;

/* Lowers trace t under plan p (chunks=1) for machine m (needed: link rates, collectives,
 * host Adam throughput). NULL o: lower_opts defaults. Every iteration is lowered: iter_first
 * / iter_count set is MS_ERR_UNSUPPORTED; emit_marks is honoured, the other options do not
 * apply. rep may be NULL. */
ms_status lower_chunks_report(const trace_t *t, const plan_t *p, const machine_t *m,
                              const lower_opts *o, schedule_t **out, lc_report *rep,
                              ms_error *err);
ms_status lower_chunks(const trace_t *t, const plan_t *p, const machine_t *m,
                       const lower_opts *o, schedule_t **out, ms_error *err);

/* The marker every chunk-managed plan carries (chunks=1). */
typedef struct lc_marker {
    int chunks;
    uint64_t given;
} lc_marker;
/* The chunk lowering's knob table (lc_knobs) and its marker's (lc_marker). */
extern const knobtab lc_knob_table, lc_marker_table;

#endif

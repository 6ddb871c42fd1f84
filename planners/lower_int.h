/* lower_int.h — internal to the per-tensor lowering: the walk's state (lw) and the helpers
 * that planners/lower.c (the walk, the driver) shares with planners/lower_rb.c (MEMO's
 * rounding buffers), planners/lower_replay.c (recomputation by replay) and
 * planners/lower_save.c (swap at save time). Not an interface: lower.h is what callers use. */
#ifndef MEMSIM_LOWER_INT_H
#define MEMSIM_LOWER_INT_H

#include "planners/lower.h"
#include "planners/sbuild.h"

#include "traces/roofline.h"
#include "base/u64map.h"
#include "base/util.h"

#include <stddef.h>
#include <stdint.h>

#define LOWER_MAX_LAYER (1 << 20) /* a layer index beyond this is a corrupt trace */

typedef enum tstate {
    TS_LIVE = 0,    /* holds its device block */
    TS_FREED,       /* the trace freed it */
    TS_DROPPED,     /* freed after its layer's forward for recomputation */
    TS_OFFLOADED,   /* copied to host, device block freed */
    TS_PREFETCHED,  /* device block re-allocated on the H2D stream, copy issued */
    TS_INBUF        /* lives in its rounding-buffer block (rb_group); no block of its own */
} tstate;

/* Rounding-buffer block states. */
enum { RB_NONE = 0, RB_LIVE, RB_OFFLOADED, RB_PREFETCHED, RB_FREED };

/* The skeletal tensors of one layer in one forward pass, placed in one rounding-buffer block
 * (plan knob rounding_buffers). */
typedef struct rb_group {
    uint32_t pass;
    int32_t layer;
    uint64_t bytes;          /* sum of the members' bytes */
    uint64_t copy_bytes;     /* sum of ceil(alpha * bytes) over swapped members */
    lower_host_acc host;     /* the same slices, for the pinned host buffers' size */
    uint32_t n_swap, n_keep; /* members by decision */
    uint32_t alive;          /* members allocated by the trace and not yet freed */
    uint8_t state;           /* RB_* */
    uint8_t ready;           /* RB_PREFETCHED: compute has waited for e4 */
    uint8_t waited_e2;       /* the next occupant's allocation has waited for e2 */
    uint32_t e2, e4;         /* offload done, prefetch done */
    uint64_t sid;            /* the block's current schedule id */
    uint64_t hid;            /* the host copy's id */
    double min_alpha;        /* smallest alpha among swapped members */
} rb_group;

typedef struct lw_tensor {
    const trace_tensor *meta;
    size_t alloc_rec;        /* trace record that allocated it */
    uint8_t state;           /* tstate */
    uint8_t emitted;         /* its ALLOC is in the schedule (not carried from a skipped
                                iteration) */
    uint8_t skip_freed;      /* freed by a skipped iteration after its ALLOC was emitted */
    plan_decision dec;
    double alpha;
    uint64_t swap_bytes;     /* bytes copied to host: ceil(alpha * bytes) */
    uint32_t ev;             /* PREFETCHED: the event recorded when its copy is done */
    uint8_t ready;           /* PREFETCHED: the compute stream has waited for ev */
    uint8_t incarn;          /* re-allocations so far (memory_plan renaming) */
    uint64_t sid;            /* the id its device block has in the schedule */
    uint64_t hid;            /* the id of its host copy */
    int64_t rbg;             /* index of its rounding-buffer group, -1 if none */
    uint32_t sv_back;        /* swap_at=save: its copies brought back and not yet released */
} lw_tensor;

typedef struct idx_list {
    size_t *v;
    size_t n, cap;
} idx_list;

/* swap_at=save: one save of a tensor in one forward pass, one copy on the host per backward op
 * that reads it (autograd saves a tensor once per node that saves it, and each node unpacks
 * its own copy), and the points where the copy goes out and comes back (record indices of
 * the ops they follow or precede). */
typedef struct sv_item {
    uint64_t id;             /* trace tensor */
    uint32_t pass;
    uint8_t head;            /* the tensor's first save in the pass: it drops the device block */
    uint8_t keep_device;     /* made before the pass's forward (a parameter): keeps its block */
    uint8_t out, in;         /* its host copy exists; its device copy was brought back */
    uint32_t reader;         /* 0, 1, ...: which backward read of the tensor in the pass */
    size_t out_rec, last_fwd;/* save point; last forward use (head) */
    size_t bwd_rec;          /* the backward op that reads it; SIZE_MAX: none */
    uint64_t bytes;
    uint64_t copy_id;        /* the host copy and the block it comes back into */
    uint32_t ev_out;         /* swap_stream=copy: the copy out is done */
} sv_item;

/* What happens at a record: SV_IN before the op, the others after it, in this order. */
enum { SV_IN = 0, SV_OUT, SV_DROP, SV_DONE };
typedef struct sv_event {
    size_t rec;
    uint32_t kind, item;
} sv_event;

/* drop_at=use: the last forward use (record rec) of the tensor incarnation allocated at
 * record alloc_rec. */
typedef struct du_event {
    size_t rec, alloc_rec;
    uint64_t id;
    uint32_t pass;           /* the forward pass that made it */
} du_event;

/* One transformer layer within the current forward/backward pass. */
typedef struct lw_layer {
    int fwd_state;           /* 0 not seen, 1 open, 2 closed */
    size_t fwd_begin, fwd_end;
    idx_list cand;           /* tensors (index into lw.ts) with a recompute/swap decision */
    idx_list drop, swap;     /* decided at the end of the forward */
    idx_list held;           /* rounding-buffer members of this layer the trace freed during
                                its forward while the plan recomputes in it: held to its
                                backward's recomputation */
    idx_list held_end;       /* other kept tensors so freed (the layer's input): held to the
                                end of its backward */
    uint32_t e2, e4;         /* offload done, prefetch done */
    int prefetched, waited;
} lw_layer;

typedef struct lw {
    const trace_t *t;
    const trace_rec *recs;   /* t's records (trace_records), nrecs of them */
    size_t nrecs;
    const plan_t *p;
    const machine_t *m;
    lower_opts o;
    schedule_t *s;
    sbuild *b;               /* adds to s */
    ms_error *err;
    lower_report rep;
    roof_params roof;
    u64map *plan_idx;        /* tensor id -> index in p->tensors */
    lw_tensor *ts;
    size_t n_ts, cap_ts;
    u64map *tidx;            /* tensor id -> index in ts (latest incarnation) */
    lw_layer *layers;
    size_t n_layers;
    int32_t max_layer;       /* layer indices are below this: the trace's declared layers, or
                                LOWER_MAX_LAYER when it declares none */
    trace_phase phase;
    int32_t layer;           /* program context: the last layer mark, -1 after a phase mark */
    int32_t fwd_layer;       /* layer whose forward section is open, -1 if none */
    int32_t held_end_layer;  /* layer whose backward runs, holding held_end; -1 if none */
    int seen_fwd;
    int autocast_cache;      /* trace meta autocast_cache 1: dropped "*.wcast" tensors are
                                freed at the backward phase mark (cache_held) */
    idx_list cache_held;     /* dropped weight casts autocast's cache still holds */
    uint32_t pass;           /* forward pass ordinal (one per "mark phase fwd") */
    size_t rec;              /* index of the record being lowered */
    /* plan knobs (lower.h) */
    int rb, rename, chain, overlap;
    lower_host_round host_round; /* how pinned host buffers are sized (plan knob host_round) */
    uint64_t host_granule;   /* exact host buffers rounded up to a multiple of this (1: exact) */
    /* rounding buffers */
    rb_group *groups;
    size_t n_groups, cap_groups;
    u64map *rb_rec;          /* alloc record index -> group index, for members */
    u64map *rb_key;          /* (pass << 32 | layer) -> group index */
    uint64_t rb_bytes;       /* one buffer's size */
    uint64_t idle_bytes;     /* plan knob idle_buffer_bytes */
    /* ".ovl" collectives waiting for their attention kernel */
    double ovl_us;
    int ovl_pending;
    idx_list ovl_src;        /* their record indices, while w->src notes sources */
    lower_srcs *src;         /* lower_opts.srcs: where each action's numbers come from */
    /* framework streams (plan knobs record_stream, stream_pools) */
    int rec_stream, pools;
    u64map *comm_use;        /* trace ids a collective used since their last FREE */
    /* swap_at=save (plan knobs swap_at, swap_stream) */
    int sv, sv_compute;
    sv_item *svi;
    size_t n_svi, cap_svi;
    sv_event *sve;
    size_t n_sve, cap_sve, sve_pos;
    idx_list sv_cache_held;  /* weight casts copied out that autocast's cache still holds */
    int du;                  /* drop_at=use */
    du_event *due;           /* its last uses, in record order (lower_drop.c) */
    size_t n_due, cap_due, due_pos;
} lw;

/* Trace record i (< w->nrecs). */
static inline const trace_rec *lw_rec(const lw *w, size_t i) { return &w->recs[i]; }

/* planners/lower.c */
ms_status lw_idx_push(idx_list *l, size_t v);
/* MS_ERR_* st with a message naming the record being lowered (and its trace line). */
ms_status lw_fail_rec(lw *w, ms_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ms_status lw_nomem(lw *w);
ms_status lw_note_comm(lw *w, const trace_op *op);
ms_status lw_put_tensor(lw *w, sched_kind k, sched_stream s, uint64_t id, uint64_t bytes);
ms_status lw_put_event(lw *w, sched_kind k, sched_stream s, uint32_t e);
ms_status lw_put_block(lw *w, sched_stream s, uint64_t id, uint64_t bytes, sched_block b);
ms_status lw_put_alloc(lw *w, sched_stream s, const lw_tensor *x, uint64_t bytes);
uint64_t lw_host_bytes(const lw *w, uint64_t bytes);
/* Sources of the last action's numbers (lower_src.h), when w->src asks for them: its bytes
 * by rule from the tensor meta allocated at record rec (scaled by frac), its duration from
 * the ops at records pend[0..n) (merged .ovl collectives) and rec_op, each times frac. */
void lw_src_note_bytes(lw *w, lower_src_rule rule, const trace_tensor *meta, size_t rec,
                       double frac);
static inline void lw_src_bytes(lw *w, lower_src_rule rule, const trace_tensor *meta, size_t rec,
                                double frac)
{
    if (w->src) lw_src_note_bytes(w, rule, meta, rec, frac); /* a test where no one asks */
}
void lw_src_ops(lw *w, const idx_list *pend, size_t rec_op, double frac);
/* The index of the trace record holding op (a pointer into w->recs), SIZE_MAX if none. */
size_t lw_op_rec(const lw *w, const trace_op *op);
uint64_t lw_rb_host_bytes(const lw *w, const rb_group *G);
uint64_t lw_next_sid(lw *w, lw_tensor *x);
lw_tensor *lw_find_tensor(lw *w, uint64_t id);
int32_t lw_layer_bound(const trace_t *t);
ms_status lw_layer_range(lw *w, const char *what, uint64_t id, const char *name, int32_t layer);
ms_status lw_op_us(lw *w, const trace_op *op, double *us);
ms_status lw_index_plan(lw *w);
ms_status lw_read_knobs(lw *w);
void lw_decide(const lw *w, const trace_tensor *x, plan_decision *d, double *alpha);
void lw_free(lw *w);

/* planners/lower_rb.c */
ms_status lw_rb_prescan(lw *w);
ms_status lw_rb_ready(lw *w, rb_group *G);
ms_status lw_rb_offload(lw *w, int32_t layer);
ms_status lw_rb_prefetch(lw *w, int32_t layer);
ms_status lw_rb_free_member(lw *w, lw_tensor *x);
ms_status lw_rb_backward(lw *w, lw_layer *L, int32_t layer);
ms_status lw_rb_alloc(lw *w, lw_tensor *n, uint64_t g);

/* planners/lower_replay.c */
int lw_ovl_merges(const lw *w, size_t i, size_t end, const uint8_t *needed, size_t base);
double lw_ovl_absorb(lw *w, const trace_op *op, double us, double *pending, int *have,
                     uint8_t *merged);
ms_status lw_replay_layer(lw *w, lw_layer *L, int32_t layer);
ms_status lw_chain_recompute(lw *w, lw_layer *L, int32_t layer, const idx_list *cand,
                             int want_state);
ms_status lw_tokenwise_recompute(lw *w, lw_layer *L, int32_t layer);

/* planners/lower_drop.c */
ms_status lw_du_prescan(lw *w);
ms_status lw_du_events(lw *w);

/* planners/lower_save.c */
ms_status lw_sv_prescan(lw *w);
ms_status lw_sv_events(lw *w, int before);
ms_status lw_sv_cache_release(lw *w);

#endif

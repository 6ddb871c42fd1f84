/* lower.c — lowering of a trace and a plan into a schedule (lower.h). One walk over the trace
 * in program order: the trace's own records go to the compute stream unchanged; at the end of
 * a layer's forward the plan's recomputed tensors are freed and its swapped tensors offloaded
 * on the D2H stream; at the start of a layer's backward the swapped tensors (prefetched on the
 * H2D stream one layer earlier) are waited for and the dropped ones rebuilt by replaying the
 * layer's forward ops that make them. With the plan knob rounding_buffers the skeletal
 * tensors of a layer live in one block of one of MEMO's two rounding buffers (§4.1, Fig. 5);
 * with memory_plan every re-allocation gets a fresh id for the static arena. Used by the
 * memsim command, experiments, the MEMO planner and runtime/. The rules and example
 * timelines are in docs/POLICIES.md and docs/MEMO.md. */
#include "planners/lower.h"

#include "planners/knob.h"
#include "planners/policy.h"
#include "planners/sbuild.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "traces/roofline.h"
#include "base/u64map.h"
#include "base/util.h"

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

/* One transformer layer within the current forward/backward pass. */
typedef struct lw_layer {
    int fwd_state;           /* 0 not seen, 1 open, 2 closed */
    size_t fwd_begin, fwd_end;
    idx_list cand;           /* tensors (index into lw.ts) with a recompute/swap decision */
    idx_list drop, swap;     /* decided at the end of the forward */
    idx_list held;           /* kept tensors of this layer the trace freed during its forward
                                while the plan recomputes in it: held to its backward */
    uint32_t e2, e4;         /* offload done, prefetch done */
    int prefetched, waited;
} lw_layer;

typedef struct lw {
    const trace_t *t;
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
} lw;

/* ---- small helpers ---- */

static ms_status idx_push(idx_list *l, size_t v)
{
    if (ms_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) != MS_OK) return MS_ERR_NOMEM;
    l->v[l->n++] = v;
    return MS_OK;
}

static ms_status fail_rec(lw *w, ms_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ms_status fail_rec(lw *w, ms_status st, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const trace_rec *r = trace_get(w->t, w->rec);
    if (r && r->line)
        return ms_fail(w->err, st, "trace record %zu (line %" PRIu64 "): %s", w->rec, r->line,
                       msg);
    return ms_fail(w->err, st, "trace record %zu: %s", w->rec, msg);
}

static ms_status nomem(lw *w)
{
    return ms_fail(w->err, MS_ERR_NOMEM, "out of memory while lowering");
}

static lw_tensor *find_tensor(lw *w, uint64_t id);

/* The trace tensor a schedule id stands for (an incarnation's trace id); UINT64_MAX for a
 * rounding-buffer block. */
static uint64_t trace_id_of(uint64_t sid)
{
    uint64_t tid = sid;
    if (lower_id_synthetic(sid, &tid)) return tid;
    return sid;
}

/* Framework streams on the allocator calls (plan knobs record_stream and stream_pools): an
 * ALLOC of a tensor the trace allocates on a side stream (TE's cp stream) takes that stream's
 * pool, and the FREE of a block a collective used since its allocation is marked side_use
 * (c10d's ProcessGroupNCCL calls recordStream(ncclStream) on a collective's inputs and
 * outputs unless TORCH_NCCL_AVOID_RECORD_STREAMS=1). The builder's hook: every action passes. */
static void stream_hook(void *ctx, sched_action *c)
{
    lw *w = ctx;
    if ((w->rec_stream || w->pools) && (c->kind == SA_ALLOC || c->kind == SA_FREE)) {
        uint64_t tid = trace_id_of(c->tensor);
        lw_tensor *x = tid == UINT64_MAX ? NULL : find_tensor(w, tid);
        if (c->kind == SA_ALLOC && w->pools && x && x->meta->stream > 0)
            c->pool = x->meta->stream;
        if (c->kind == SA_FREE && w->rec_stream && tid != UINT64_MAX &&
            u64map_del(w->comm_use, tid, NULL))
            c->side_use = 1;
    }
}

/* With record_stream: the tensors a collective reads and writes wait, when freed, for the
 * work issued before the free (see put). */
static ms_status note_comm(lw *w, const trace_op *op)
{
    if (!w->rec_stream || op->kind != TK_COMM) return MS_OK;
    for (uint32_t k = 0; k < op->n_in; k++)
        if (u64map_put(w->comm_use, op->in[k], 1)) return nomem(w);
    for (uint32_t k = 0; k < op->n_out; k++)
        if (u64map_put(w->comm_use, op->out[k], 1)) return nomem(w);
    return MS_OK;
}

static ms_status put_tensor(lw *w, sched_kind k, sched_stream s, uint64_t id, uint64_t bytes)
{
    return sbuild_tensor(w->b, k, s, id, bytes);
}

static ms_status put_event(lw *w, sched_kind k, sched_stream s, uint32_t e)
{
    return sbuild_event(w->b, k, s, e);
}

/* The ALLOC of a block lowering made or renamed, with what it holds (sched_block). */
static ms_status put_block(lw *w, sched_stream s, uint64_t id, uint64_t bytes, sched_block b)
{
    return sbuild_block(w->b, s, id, bytes, b);
}

/* The ALLOC of trace tensor x's block under its current schedule id (an incarnation's
 * block holds what its tensor's class says). */
static ms_status put_alloc(lw *w, sched_stream s, const lw_tensor *x, uint64_t bytes)
{
    return put_block(w, s, x->sid, bytes, sched_block_of_class(x->meta->cls));
}

/* ---- synthetic ids ---- */

#define ID_KIND_SHIFT 56
#define ID_KIND_INCARN UINT64_C(1)
#define ID_KIND_RBUF UINT64_C(2)
#define ID_KIND_IDLE UINT64_C(4) /* 3 is lower_dha.c's */

uint64_t lower_id_incarnation(uint64_t trace_id, unsigned k)
{
    return LOWER_ID_SYNTH | (ID_KIND_INCARN << ID_KIND_SHIFT) | ((uint64_t)(k & 0xff) << 48) |
           (trace_id & (LOWER_ID_TRACE_LIMIT - 1));
}

uint64_t lower_id_rbuf(uint32_t pass, int32_t layer, unsigned k)
{
    return LOWER_ID_SYNTH | (ID_KIND_RBUF << ID_KIND_SHIFT) | ((uint64_t)(k & 0xff) << 48) |
           ((uint64_t)(pass & 0xffffff) << 24) | ((uint64_t)layer & 0xffffff);
}

int lower_id_synthetic(uint64_t id, uint64_t *trace_id)
{
    if ((id >> 62) != 1) return 0;
    if (trace_id)
        *trace_id = ((id >> ID_KIND_SHIFT) & 0x3f) == ID_KIND_INCARN
                        ? id & (LOWER_ID_TRACE_LIMIT - 1) : UINT64_MAX;
    return 1;
}

int lower_id_is_rbuf(uint64_t id, uint32_t *pass, int32_t *layer)
{
    if ((id >> 62) != 1 || ((id >> ID_KIND_SHIFT) & 0x3f) != ID_KIND_RBUF) return 0;
    if (pass) *pass = (uint32_t)((id >> 24) & 0xffffff);
    if (layer) *layer = (int32_t)(id & 0xffffff);
    return 1;
}

uint64_t lower_id_idle_buffer(void)
{
    return LOWER_ID_SYNTH | (ID_KIND_IDLE << ID_KIND_SHIFT);
}

uint64_t lower_id_host_copy(uint64_t id)
{
    uint32_t pass;
    int32_t layer;
    if (lower_id_is_rbuf(id, &pass, &layer))
        return ((id >> 48) & 0xff) == 0 ? lower_id_rbuf(pass, layer, 1) : id;
    if (id < LOWER_ID_TRACE_LIMIT) return lower_id_incarnation(id, 1);
    uint64_t tid;
    if (lower_id_synthetic(id, &tid) && tid != UINT64_MAX)
        return lower_id_incarnation(tid, (unsigned)((id >> 48) & 0xff) + 1u);
    return id;
}

const char *lower_host_round_name(lower_host_round r)
{
    switch (r) {
    case LOWER_HOST_EXACT: return "exact";
    case LOWER_HOST_LAYER_POW2: return "layer_pow2";
    case LOWER_HOST_TENSOR_POW2: return "tensor_pow2";
    case LOWER_HOST_BUFFER_POW2: return "buffer_pow2";
    }
    return "?";
}

int lower_host_round_parse(const char *s, lower_host_round *out)
{
    for (int r = LOWER_HOST_EXACT; s && r <= LOWER_HOST_BUFFER_POW2; r++)
        if (!strcmp(s, lower_host_round_name((lower_host_round)r))) {
            *out = (lower_host_round)r;
            return 0;
        }
    return -1;
}

int lower_is_statistic(const char *name)
{
    return name && (ms_ends_with(name, "_stats") || ms_ends_with(name, ".attn_lse"));
}

void lower_host_acc_add(lower_host_acc *a, uint64_t bytes, int is_stat)
{
    if (!bytes) return;
    a->bytes += bytes;
    a->pow2_sum += ms_pow2_ceil(bytes);
    if (is_stat) {
        a->stat_bytes += bytes;
        a->stat_pow2_sum += ms_pow2_ceil(bytes);
    }
}

/* exact's buffer: whole granules */
static uint64_t granules(uint64_t bytes, uint64_t granule_bytes)
{
    uint64_t g = granule_bytes > 1 ? granule_bytes : 1;
    return bytes % g ? bytes + (g - bytes % g) : bytes;
}

uint64_t lower_host_acc_bytes(const lower_host_acc *a, lower_host_round r,
                              uint64_t granule_bytes)
{
    if (!a->bytes) return 0;
    switch (r) {
    case LOWER_HOST_EXACT: return granules(a->bytes, granule_bytes);
    case LOWER_HOST_LAYER_POW2: return ms_pow2_ceil(a->bytes);
    case LOWER_HOST_TENSOR_POW2: return a->pow2_sum;
    case LOWER_HOST_BUFFER_POW2: {
        uint64_t act = a->bytes - a->stat_bytes;
        return (act ? ms_pow2_ceil(act) : 0) + a->stat_pow2_sum;
    }
    }
    return a->bytes;
}

/* Pinned host bytes for one host buffer of `bytes` (a swapped tensor outside a rounding
 * buffer): a power of two under every pow2 reading, else whole host_granule pages. */
static uint64_t host_bytes(const lw *w, uint64_t bytes)
{
    if (bytes == 0) return 0;
    return w->host_round == LOWER_HOST_EXACT ? granules(bytes, w->host_granule)
                                             : ms_pow2_ceil(bytes);
}

/* Pinned host bytes of a rounding-buffer block's offload (the schedule carries them as one
 * HOST_ALLOC, since they are made and released together). */
static uint64_t rb_host_bytes(const lw *w, const rb_group *G)
{
    return lower_host_acc_bytes(&G->host, w->host_round, w->host_granule);
}

/* A fresh schedule id for a re-allocation of x (memory_plan), else its trace id. */
static uint64_t next_sid(lw *w, lw_tensor *x)
{
    if (!w->rename) return x->meta->id;
    x->incarn++;
    w->rep.renamed++;
    return lower_id_incarnation(x->meta->id, x->incarn);
}

static lw_tensor *find_tensor(lw *w, uint64_t id)
{
    uint64_t i;
    return u64map_get(w->tidx, id, &i) ? &w->ts[i] : NULL;
}

static int32_t layer_bound(const trace_t *t)
{
    int32_t d = pol_declared_layers(t);
    return d > 0 && d < LOWER_MAX_LAYER ? d : LOWER_MAX_LAYER;
}

/* A record's layer at or beyond w->max_layer: MS_ERR_INVALID naming it and the bound. */
static ms_status layer_range(lw *w, const char *what, uint64_t id, const char *name,
                             int32_t layer)
{
    char b[120];
    if (name) snprintf(b, sizeof b, "%s %" PRIu64 " (%s)", what, id, name);
    else snprintf(b, sizeof b, "%s", what);
    ms_error e = {{0}};
    if (pol_check_layer(w->t, layer, LOWER_MAX_LAYER, b, &e) == MS_OK) /* beyond LOWER_MAX_LAYER */
        snprintf(e.msg, sizeof e.msg, "%s: layer %d is out of range", b, (int)layer);
    return fail_rec(w, MS_ERR_INVALID, "%s", e.msg);
}

static lw_layer *get_layer(lw *w, int32_t layer)
{
    if (layer < 0 || layer >= w->max_layer) return NULL;
    if ((size_t)layer >= w->n_layers) {
        size_t n = (size_t)layer + 1;
        lw_layer *nl = realloc(w->layers, n * sizeof *nl);
        if (!nl) return NULL;
        memset(nl + w->n_layers, 0, (n - w->n_layers) * sizeof *nl);
        w->layers = nl;
        w->n_layers = n;
    }
    return &w->layers[layer];
}

/* A new forward pass: layer sections start over; capacity is kept. */
static void reset_layers(lw *w)
{
    for (size_t i = 0; i < w->n_layers; i++) {
        lw_layer *L = &w->layers[i];
        w->rep.ignored += L->cand.n;
        idx_list c = L->cand, d = L->drop, s = L->swap, h = L->held;
        memset(L, 0, sizeof *L);
        c.n = d.n = s.n = h.n = 0;
        L->cand = c, L->drop = d, L->swap = s, L->held = h;
    }
}

/* Op duration: the trace's, else the roofline kernel time on the machine. Collectives need
 * their group, which a trace op does not carry, so they must come with a duration. */
static ms_status op_us(lw *w, const trace_op *op, double *us)
{
    *us = roof_op_us(w->m, &w->roof, op);
    if (*us < 0)
        return fail_rec(w, MS_ERR_INVALID, "trace op %" PRIu64 " (%s) has no duration%s",
                        op->id, op->name, w->m ? " (a collective needs one)" : " and no machine is given");
    return MS_OK;
}

/* ---- plan lookups ---- */

static ms_status index_plan(lw *w)
{
    const plan_t *p = w->p;
    if (!p) return MS_OK;
    w->plan_idx = u64map_new(p->n_tensors + 16);
    if (!w->plan_idx) return nomem(w);
    for (size_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *pt = &p->tensors[i];
        if (pt->decision == PD_SWAP && !(pt->alpha >= 0 && pt->alpha <= 1))
            return ms_fail(w->err, MS_ERR_INVALID, "plan: tensor %" PRIu64
                           " is swapped with alpha %g, outside [0,1]", pt->id, pt->alpha);
        if ((unsigned)pt->decision >= PD_COUNT)
            return ms_fail(w->err, MS_ERR_INVALID, "plan: tensor %" PRIu64
                           " has an unknown decision", pt->id);
        if (!trace_find_tensor(w->t, pt->id)) {
            w->rep.unknown_ids++;
            if (!w->o.ignore_unknown_ids)
                return ms_fail(w->err, MS_ERR_INVALID, "plan names tensor %" PRIu64
                               ", which the trace never allocates (a plan for another "
                               "trace?)", pt->id);
        }
        if (u64map_put(w->plan_idx, pt->id, i)) return nomem(w);
    }
    for (size_t i = 0; i < p->n_layers; i++)
        if (p->layers[i].pmode != PM_GFGB || p->layers[i].grad_on_host)
            return ms_fail(w->err, MS_ERR_UNSUPPORTED,
                           "plan: layer %" PRId32 ": DHA lowering is not implemented yet "
                           "(parameter mode %s%s)", p->layers[i].layer,
                           plan_pmode_name(p->layers[i].pmode),
                           p->layers[i].grad_on_host ? ", gradients on host" : "");
    return MS_OK;
}

static const char *const LOWER_HOST_ROUNDS[] = { "exact", "layer_pow2", "tensor_pow2",
                                                 "buffer_pow2", NULL };
static const char *const LOWER_TOKENWISE[] = { "chain", "producer", NULL };
static const int LOWER_TOKENWISE_CHAIN[] = { 1, 0 };
static const char *const LOWER_SWAP_ATS[] = { "layer", "save", NULL };
static const char *const LOWER_SWAP_STREAMS[] = { "copy", "compute", NULL };

/* The tensor lowering's knobs (lower.h says what each does), in the order they are checked. */
static const knobtab_row lower_rows[] = {
    KNOB_BOOL("rounding_buffers", lower_knobs, rounding_buffers, "0",
              "1: MEMO's two rounding buffers hold the swapped layers' activations", "MEMO §4.1"),
    KNOB_BOOL("memory_plan", lower_knobs, memory_plan, "0",
              "1: every re-allocation gets a fresh id (one static offset per incarnation)", ""),
    KNOB_BOOL("host_pow2", lower_knobs, host_pow2, "0",
              "the older spelling of host_round=layer_pow2 (0: exact)", ""),
    KNOB_ENUM("host_round", lower_knobs, host_round, NULL, LOWER_HOST_ROUNDS,
              "how pinned host buffers are sized (absent: host_pow2's reading, exact)", ""),
    { "host_granule", KNOBTAB_BYTES, offsetof(lower_knobs, host_granule), "1", 1,
      (double)(UINT64_C(1) << 40), NULL, NULL, "bytes in [1, 2^40]",
      "with host_round=exact: pinned host buffers rounded up to a multiple of this", "", 0 },
    { "idle_buffer_bytes", KNOBTAB_BYTES, offsetof(lower_knobs, idle_buffer_bytes), "0", 0,
      (double)LOWER_ID_TRACE_LIMIT, NULL, NULL, "bytes in [0, 2^48]",
      "one device block held throughout: the rounding buffer a full-recomputation layer "
      "leaves idle", "MEMO's executor", 0 },
    KNOB_BOOL("overlap_comm", lower_knobs, overlap_comm, "1", "0: the .ovl merge off", ""),
    KNOB_BOOL("record_stream", lower_knobs, record_stream, "0",
              "1: a block a collective used is freed once the GPU has run what came before",
              "c10d recordStream"),
    KNOB_BOOL("stream_pools", lower_knobs, stream_pools, "0",
              "1: blocks are kept in per-stream pools", "PyTorch caching allocator"),
    { "tokenwise", KNOBTAB_ENUM, offsetof(lower_knobs, tokenwise), NULL, 0, 0, LOWER_TOKENWISE,
      LOWER_TOKENWISE_CHAIN, NULL, "token-wise recomputation replays the chain of forward ops "
      "or only each producer (absent: chain with rounding buffers)", "MEMO §4.1", 0 },
    KNOB_ENUM("swap_at", lower_knobs, swap_at, "layer", LOWER_SWAP_ATS,
              "when a swapped tensor goes to the host: after its layer's forward, prefetched a "
              "layer ahead (layer), or when saved, back when the backward reads it (save)",
              "torch.autograd.graph.save_on_cpu"),
    KNOB_ENUM("swap_stream", lower_knobs, swap_stream, "copy", LOWER_SWAP_STREAMS,
              "swap_at=save's copies on the copy streams (copy) or the compute stream "
              "(compute: a blocking copy, a copy on the current stream)",
              "torch.autograd.graph.save_on_cpu"),
};
const knobtab lower_knob_table = KNOBTAB("tensor lowering", lower_rows, KNOBTAB_MSG_PLAN,
                                         lower_knobs, given);

/* host_round=exact|layer_pow2|tensor_pow2|buffer_pow2 (default exact); the older
 * host_pow2=1 means layer_pow2 and must not contradict host_round. */
static ms_status read_host_round(lw *w, const lower_knobs *k)
{
    w->host_round = k->host_pow2 ? LOWER_HOST_LAYER_POW2 : LOWER_HOST_EXACT;
    if (!knobtab_given(&lower_knob_table, k, &k->host_round)) return MS_OK;
    if (knobtab_given(&lower_knob_table, k, &k->host_pow2) &&
        (lower_host_round)k->host_round != w->host_round)
        return ms_fail(w->err, MS_ERR_INVALID, "plan knobs host_round=%s and host_pow2=%d "
                       "disagree (host_pow2=1 is layer_pow2, 0 exact)",
                       lower_host_round_name((lower_host_round)k->host_round), k->host_pow2);
    w->host_round = (lower_host_round)k->host_round;
    return MS_OK;
}

static ms_status read_knobs(lw *w)
{
    lower_knobs k;
    ms_status st = knob_from_plan(&lower_knob_table, w->p, &k, w->err);
    if (st == MS_OK) st = read_host_round(w, &k);
    if (st != MS_OK) return st;
    w->rb = k.rounding_buffers;
    w->rename = k.memory_plan;
    w->host_granule = k.host_granule;
    w->idle_bytes = k.idle_buffer_bytes;
    w->overlap = w->o.overlap_ovl && k.overlap_comm;
    w->rec_stream = k.record_stream;
    w->pools = k.stream_pools;
    if (w->rec_stream && !(w->comm_use = u64map_new(256))) return nomem(w);
    w->chain = knobtab_given(&lower_knob_table, &k, &k.tokenwise) ? k.tokenwise : w->rb;
    w->sv = k.swap_at == LOWER_SWAP_SAVE;
    w->sv_compute = k.swap_stream == LOWER_SWAP_COMPUTE;
    if (w->sv && w->rename)
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "plan knobs swap_at=save and memory_plan=1 "
                       "do not go together (the saves' copies have ids of their own)");
    if (w->sv && w->rb)
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "plan knobs swap_at=save and "
                       "rounding_buffers=1 do not go together (a saved tensor has no layer "
                       "block)");
    if (w->rb && (w->o.iter_first != INT64_MIN || w->o.iter_count > 0))
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "rounding buffers: lowering a selection of "
                       "iterations is not supported (lower them all)");
    return MS_OK;
}

/* The decision for a tensor: its plan entry, else the plan's default for skeletal layer
 * activations (alpha 0, as plan.h says), else keep. */
static void decide(const lw *w, const trace_tensor *x, plan_decision *d, double *alpha)
{
    uint64_t i;
    *d = PD_KEEP;
    *alpha = 0;
    if (!w->p) return;
    if (u64map_get(w->plan_idx, x->id, &i)) {
        *d = w->p->tensors[i].decision;
        *alpha = w->p->tensors[i].alpha;
    } else if (x->cls == TC_ACT_SKEL && x->layer >= 0) {
        *d = w->p->default_decision;
    }
}

/* ---- rounding buffers: which tensors live in which block ---- */

static int64_t rb_find(const lw *w, uint32_t pass, int32_t layer)
{
    uint64_t g;
    return u64map_get(w->rb_key, ((uint64_t)pass << 32) | (uint32_t)layer, &g) ? (int64_t)g : -1;
}

static ms_status rb_member(lw *w, size_t rec, uint32_t pass, const trace_tensor *x)
{
    plan_decision d;
    double alpha;
    decide(w, x, &d, &alpha);
    if (d != PD_SWAP && d != PD_KEEP) return MS_OK; /* recomputed or DHA: own allocation */
    if (x->layer >= w->max_layer) {
        w->rec = rec;
        return layer_range(w, "tensor", x->id, x->name, x->layer);
    }
    int64_t g = rb_find(w, pass, x->layer);
    if (g < 0) {
        if (ms_grow((void **)&w->groups, &w->cap_groups, w->n_groups + 1,
                    sizeof *w->groups) != MS_OK)
            return nomem(w);
        g = (int64_t)w->n_groups++;
        rb_group *n = &w->groups[g];
        memset(n, 0, sizeof *n);
        n->pass = pass;
        n->layer = x->layer;
        n->min_alpha = 1.0;
        if (u64map_put(w->rb_key, ((uint64_t)pass << 32) | (uint32_t)x->layer, (uint64_t)g))
            return nomem(w);
    }
    rb_group *G = &w->groups[g];
    G->bytes += x->bytes;
    if (d == PD_KEEP) {
        G->n_keep++;
    } else {
        double sb = ceil(alpha * (double)x->bytes);
        uint64_t cb = sb >= (double)x->bytes ? x->bytes : (uint64_t)sb;
        G->copy_bytes += cb;
        lower_host_acc_add(&G->host, cb, lower_is_statistic(x->name));
        G->n_swap++;
        if (alpha < G->min_alpha) G->min_alpha = alpha;
    }
    if (G->n_keep && G->n_swap)
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "rounding buffers: layer %d keeps some "
                       "skeletal tensors and swaps others (tensor %" PRIu64 " %s); a layer's "
                       "block is kept or offloaded whole", (int)x->layer, x->id, x->name);
    return u64map_put(w->rb_rec, rec, (uint64_t)g) ? nomem(w) : MS_OK;
}

/* Before the walk: every skeletal activation of a layer made in a forward pass (or before any
 * phase mark) that the plan keeps or swaps becomes a member of its layer's block; the buffer
 * size is the largest block. */
static ms_status rb_prescan(lw *w)
{
    w->rb_rec = u64map_new(1024);
    w->rb_key = u64map_new(256);
    if (!w->rb_rec || !w->rb_key) return nomem(w);
    trace_phase phase = TP_NONE;
    uint32_t pass = 0;
    int seen = 0;
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < trace_count(w->t); i++) {
        const trace_rec *r = trace_get(w->t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            phase = (trace_phase)r->u.mark.value;
            if (phase == TP_FWD) {
                if (seen) pass++;
                seen = 1;
            }
        } else if (r->type == TR_ALLOC && r->u.alloc.cls == TC_ACT_SKEL &&
                   r->u.alloc.layer >= 0 && (phase == TP_FWD || phase == TP_NONE)) {
            st = rb_member(w, i, pass, &r->u.alloc);
        }
    }
    for (size_t g = 0; g < w->n_groups; g++)
        if (w->groups[g].bytes > w->rb_bytes) w->rb_bytes = w->groups[g].bytes;
    w->rep.rb_bytes = w->rb_bytes;
    return st;
}

/* The block of group G comes into existence when its first member is allocated: after the
 * offload of the previous occupant of the same buffer (layer L-2 of this pass) is done. */
static ms_status rb_open(lw *w, rb_group *G)
{
    ms_status st = MS_OK;
    int64_t prev = rb_find(w, G->pass, G->layer - 2);
    if (prev >= 0) {
        rb_group *P = &w->groups[prev];
        if (P->state == RB_OFFLOADED && !P->waited_e2) {
            P->waited_e2 = 1;
            st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, P->e2);
        }
    }
    G->sid = lower_id_rbuf(G->pass, G->layer, 0);
    G->hid = lower_id_rbuf(G->pass, G->layer, 1);
    G->state = RB_LIVE;
    w->rep.rb_blocks++;
    return st == MS_OK ? put_block(w, SS_COMPUTE, G->sid, w->rb_bytes, SB_RBUF) : st;
}

/* Compute must not touch a prefetched block before its copy is done. */
static ms_status rb_ready(lw *w, rb_group *G)
{
    if (G->state != RB_PREFETCHED || G->ready) return MS_OK;
    G->ready = 1;
    return sbuild_event(w->b, SA_WAIT, SS_COMPUTE, G->e4);
}

/* After layer L's forward: the whole block goes to host (alpha-weighted bytes), then its
 * device memory is given back on the offload stream. */
static ms_status rb_offload(lw *w, int32_t layer)
{
    int64_t g = rb_find(w, w->pass, layer);
    if (g < 0) return MS_OK;
    rb_group *G = &w->groups[g];
    if (G->state != RB_LIVE || !G->n_swap) return MS_OK;
    uint32_t e1 = sbuild_new_event(w->b);
    ms_status st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e1);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_D2H, e1);
    if (st == MS_OK && G->copy_bytes) {
        /* the host copy carries the prefetch block's id, so the H2D copy finds it */
        st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_D2H, G->hid, rb_host_bytes(w, G));
        if (st == MS_OK) st = sbuild_tensor(w->b, SA_COPY_D2H, SS_D2H, G->sid, G->copy_bytes);
    }
    if (st == MS_OK) st = sbuild_tensor(w->b, SA_FREE, SS_D2H, G->sid, 0);
    G->e2 = sbuild_new_event(w->b);
    if (st == MS_OK) st = sbuild_event(w->b, SA_RECORD, SS_D2H, G->e2);
    G->state = RB_OFFLOADED;
    w->rep.rb_offloads++;
    w->rep.swapped += G->n_swap;
    w->rep.d2h_bytes += G->copy_bytes;
    return st;
}

/* During the backward of the layer before it: the block comes back whole. */
static ms_status rb_prefetch(lw *w, int32_t layer)
{
    int64_t g = rb_find(w, w->pass, layer);
    if (g < 0) return MS_OK;
    rb_group *G = &w->groups[g];
    if (G->state != RB_OFFLOADED) return MS_OK;
    G->sid = G->hid;
    ms_status st = MS_OK;
    if (w->o.prefetch_alloc_on_compute) st = put_block(w, SS_COMPUTE, G->sid, w->rb_bytes, SB_RBUF);
    uint32_t e3 = sbuild_new_event(w->b);
    G->e4 = sbuild_new_event(w->b);
    if (st == MS_OK) st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, G->e2);
    if (st == MS_OK && !w->o.prefetch_alloc_on_compute)
        st = put_block(w, SS_H2D, G->sid, w->rb_bytes, SB_RBUF);
    if (st == MS_OK && G->copy_bytes) {
        st = sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, G->sid, G->copy_bytes);
        if (st == MS_OK) st = sbuild_tensor(w->b, SA_HOST_FREE, SS_H2D, G->hid, 0);
    }
    if (st == MS_OK) st = sbuild_event(w->b, SA_RECORD, SS_H2D, G->e4);
    G->state = RB_PREFETCHED;
    G->ready = 0;
    w->rep.rb_blocks++;
    w->rep.prefetched += G->n_swap;
    w->rep.h2d_bytes += G->copy_bytes;
    return st;
}

/* A member freed by the trace; the block goes with its last member. */
static ms_status rb_free_member(lw *w, lw_tensor *x)
{
    rb_group *G = &w->groups[x->rbg];
    x->state = TS_FREED;
    if (G->alive) G->alive--;
    if (G->alive) return MS_OK;
    ms_status st = MS_OK;
    if (G->state == RB_LIVE || G->state == RB_PREFETCHED) {
        st = rb_ready(w, G);
        if (st == MS_OK) st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, G->sid, 0);
    } else if (G->state == RB_OFFLOADED && G->copy_bytes) {
        st = sbuild_tensor(w->b, SA_HOST_FREE, SS_D2H, G->hid, 0); /* never needed again */
    }
    G->state = RB_FREED;
    return st;
}

/* ---- end of a layer's forward: drop and offload ---- */

static ms_status classify(lw *w, lw_layer *L, int32_t layer)
{
    for (size_t k = 0; k < L->cand.n; k++) {
        lw_tensor *x = &w->ts[L->cand.v[k]];
        if (x->state != TS_LIVE) {
            w->rep.ignored++;
            continue;
        }
        if (x->dec == PD_RECOMPUTE && x->alloc_rec < L->fwd_begin) {
            char b[80];
            snprintf(b, sizeof b, "%d's forward", (int)layer);
            return fail_rec(w, MS_ERR_INVALID,
                            "tensor %" PRIu64 " (%s) is planned for recomputation but is "
                            "made before layer %s (a layer input? keep or swap it)",
                            x->meta->id, x->meta->name, b);
        }
        ms_status st = idx_push(x->dec == PD_RECOMPUTE ? &L->drop : &L->swap, L->cand.v[k]);
        if (st != MS_OK) return nomem(w);
    }
    L->cand.n = 0;
    return MS_OK;
}

static ms_status end_forward(lw *w, int32_t layer)
{
    lw_layer *L = &w->layers[layer];
    L->fwd_state = 2;
    L->fwd_end = w->rec;
    ms_status st = classify(w, L, layer);
    if (st == MS_OK && w->rb) st = rb_offload(w, layer);
    uint32_t e1 = 0;
    if (st == MS_OK && L->swap.n) {
        e1 = sbuild_new_event(w->b);
        st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e1);
    }
    for (size_t k = 0; st == MS_OK && k < L->drop.n; k++) {
        lw_tensor *x = &w->ts[L->drop.v[k]];
        /* PyTorch's checkpoint drops its saved reference, but autocast's cast cache keeps a
           weight cast until the autocast region (the forward) ends */
        if (w->autocast_cache && x->rbg < 0 && ms_ends_with(x->meta->name, ".wcast"))
            st = idx_push(&w->cache_held, L->drop.v[k]) == MS_OK ? MS_OK : nomem(w);
        else
            st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
        x->state = TS_DROPPED;
        w->rep.dropped++;
    }
    if (st != MS_OK || !L->swap.n) return st;
    st = sbuild_event(w->b, SA_WAIT, SS_D2H, e1);
    for (size_t k = 0; st == MS_OK && k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        /* with memory_plan the host copy carries the id the prefetched block will have, so
           the H2D copy finds it */
        x->hid = w->rename ? lower_id_incarnation(x->meta->id, x->incarn + 1u) : x->sid;
        if (x->swap_bytes) {
            st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_D2H, x->hid, host_bytes(w, x->swap_bytes));
            if (st == MS_OK) st = sbuild_tensor(w->b, SA_COPY_D2H, SS_D2H, x->sid, x->swap_bytes);
        }
        if (st == MS_OK) st = sbuild_tensor(w->b, SA_FREE, SS_D2H, x->sid, 0);
        x->state = TS_OFFLOADED;
        w->rep.swapped++;
        w->rep.d2h_bytes += x->swap_bytes;
    }
    if (st != MS_OK) return st;
    L->e2 = sbuild_new_event(w->b);
    return sbuild_event(w->b, SA_RECORD, SS_D2H, L->e2);
}

/* ---- start of a layer's backward: prefetch, wait, recompute ---- */

static ms_status issue_prefetch(lw *w, int32_t layer)
{
    if (w->rb && layer >= 0) {
        ms_status st = rb_prefetch(w, layer);
        if (st != MS_OK) return st;
    }
    if (layer < 0 || (size_t)layer >= w->n_layers) return MS_OK;
    lw_layer *L = &w->layers[layer];
    if (L->prefetched || !L->swap.n) return MS_OK;
    L->prefetched = 1;
    ms_status st = MS_OK;
    sched_stream as = w->o.prefetch_alloc_on_compute ? SS_COMPUTE : SS_H2D;
    for (size_t k = 0; st == MS_OK && as == SS_COMPUTE && k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        if (x->state == TS_OFFLOADED) {
            x->sid = next_sid(w, x);
            st = put_alloc(w, SS_COMPUTE, x, x->meta->bytes);
        }
    }
    uint32_t e3 = sbuild_new_event(w->b);
    L->e4 = sbuild_new_event(w->b);
    if (st == MS_OK) st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, L->e2);
    for (size_t k = 0; st == MS_OK && k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        if (x->state != TS_OFFLOADED) continue; /* freed by the trace while on the host */
        if (as == SS_H2D) {
            x->sid = next_sid(w, x);
            st = put_alloc(w, SS_H2D, x, x->meta->bytes);
        }
        if (st == MS_OK && x->swap_bytes) {
            st = sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, x->sid, x->swap_bytes);
            if (st == MS_OK) st = sbuild_tensor(w->b, SA_HOST_FREE, SS_H2D, x->hid, 0);
        }
        x->state = TS_PREFETCHED;
        x->ev = L->e4;
        x->ready = 0;
        w->rep.prefetched++;
        w->rep.h2d_bytes += x->swap_bytes;
    }
    return st == MS_OK ? sbuild_event(w->b, SA_RECORD, SS_H2D, L->e4) : st;
}

/* Compute waits for layer L's prefetch; its tensors become usable. */
static ms_status wait_layer(lw *w, lw_layer *L)
{
    L->waited = 1;
    for (size_t k = 0; k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        if (x->state == TS_PREFETCHED && x->ev == L->e4) x->ready = 1;
    }
    return sbuild_event(w->b, SA_WAIT, SS_COMPUTE, L->e4);
}

/* The compute stream must not touch a prefetched block before its copy is done. */
static ms_status ensure_ready(lw *w, lw_tensor *x)
{
    if (x->state != TS_PREFETCHED || x->ready) return MS_OK;
    lw_layer *L = &w->layers[x->meta->layer];
    if (L->prefetched && L->e4 == x->ev) return wait_layer(w, L);
    x->ready = 1; /* prefetched in an earlier pass */
    return sbuild_event(w->b, SA_WAIT, SS_COMPUTE, x->ev);
}

/* ---- ".ovl" collectives: the CP ring exchange runs under its attention kernel ---- */

/* Whether op record i is a ".ovl" collective that merges into the attention kernel which is
 * the next op (the next op marked in `needed`, relative to `base`, when given) before `end`
 * and before any mark, in the same layer and phase. */
static int ovl_merges(const lw *w, size_t i, size_t end, const uint8_t *needed, size_t base)
{
    const trace_op *op = &trace_get(w->t, i)->u.op;
    if (!w->overlap || op->kind != TK_COMM || !ms_ends_with(op->name, ".ovl")) return 0;
    for (size_t j = i + 1; j < end; j++) {
        const trace_rec *r = trace_get(w->t, j);
        if (r->type == TR_MARK) return 0;
        if (r->type != TR_OP || (needed && !needed[j - base])) continue;
        return r->u.op.kind == TK_ATTN && r->u.op.layer == op->layer &&
               r->u.op.phase == op->phase;
    }
    return 0;
}

/* The duration of an attention kernel that absorbs the pending ".ovl" time. */
static double ovl_absorb(lw *w, const trace_op *op, double us, double *pending, int *have)
{
    if (!*have || op->kind != TK_ATTN) return us;
    w->rep.overlap_hidden_us += *pending < us ? *pending : us;
    us = *pending > us ? *pending : us;
    *pending = 0;
    *have = 0;
    return us;
}

/* ---- replay of a layer's forward: rebuild dropped tensors, or the (1 - alpha) tokens of
 * partially swapped ones ---- */

typedef struct replay {
    size_t b, e;             /* the forward section [b, e) */
    u64map *seg_alloc;       /* tensor id -> record index of its alloc inside the section */
    u64map *need;            /* tensors the replay allocates */
    u64map *target;          /* the tensors being rebuilt */
    uint8_t *op_needed;      /* per record of the section */
    double frac;             /* fraction of each op and transient replayed (1 - alpha) */
    int in_place;            /* targets already hold storage (prefetched block, rounding
                                buffer): only their missing tokens are recomputed into it */
} replay;

static int available(lw *w, uint64_t id)
{
    lw_tensor *x = find_tensor(w, id);
    if (x && x->state == TS_INBUF) {
        uint8_t st = w->groups[x->rbg].state;
        return st == RB_LIVE || st == RB_PREFETCHED;
    }
    return !x || x->state == TS_LIVE || x->state == TS_PREFETCHED;
}

static ms_status need_input(lw *w, replay *r, const trace_op *op, uint64_t id, int32_t layer)
{
    if (u64map_get(r->need, id, NULL) || available(w, id)) return MS_OK;
    lw_tensor *x = find_tensor(w, id);
    if (!u64map_get(r->seg_alloc, id, NULL) || x->state == TS_OFFLOADED ||
        x->state == TS_INBUF) {
        char b[120];
        snprintf(b, sizeof b, "; layer %d's forward cannot rebuild it (op %" PRIu64 ")",
                 (int)layer, op->id);
        return fail_rec(w, MS_ERR_INVALID, "recomputation needs tensor %" PRIu64
                        ", which is not on the device%s", id, b);
    }
    return u64map_put(r->need, id, 1) ? nomem(w) : MS_OK;
}

/* Backward walk: an op is needed if it writes a needed tensor; its inputs that are no longer
 * on the device become needed (and so their producers). */
static ms_status mark_needed(lw *w, replay *r, int32_t layer)
{
    for (size_t i = r->e; i-- > r->b;) {
        const trace_rec *rec = trace_get(w->t, i);
        if (rec->type != TR_OP) continue;
        const trace_op *op = &rec->u.op;
        int needed = 0;
        for (uint32_t k = 0; k < op->n_out && !needed; k++)
            needed = u64map_get(r->need, op->out[k], NULL);
        if (!needed) continue;
        r->op_needed[i - r->b] = 1;
        for (uint32_t k = 0; k < op->n_out; k++)
            if (!available(w, op->out[k]) && u64map_get(r->seg_alloc, op->out[k], NULL) &&
                u64map_put(r->need, op->out[k], 1))
                return nomem(w);
        for (uint32_t k = 0; k < op->n_in; k++) {
            ms_status st = need_input(w, r, op, op->in[k], layer);
            if (st != MS_OK) return st;
        }
    }
    return MS_OK;
}

/* Library workspaces are not op inputs, but a replayed op needs the ones live around it. */
static ms_status need_workspaces(lw *w, replay *r)
{
    for (size_t i = r->b; i < r->e; i++) {
        const trace_rec *rec = trace_get(w->t, i);
        if (rec->type != TR_ALLOC || rec->u.alloc.cls != TC_WORKSPACE) continue;
        uint64_t id = rec->u.alloc.id;
        if (available(w, id) || u64map_get(r->need, id, NULL)) continue;
        for (size_t j = i + 1; j < r->e; j++) {
            const trace_rec *q = trace_get(w->t, j);
            if (q->type == TR_FREE && q->u.free_id == id) break;
            if (q->type == TR_OP && r->op_needed[j - r->b]) {
                if (u64map_put(r->need, id, 1)) return nomem(w);
                break;
            }
        }
    }
    return MS_OK;
}

static uint64_t scaled_bytes(uint64_t bytes, double frac)
{
    if (frac >= 1.0) return bytes;
    double b = ceil(frac * (double)bytes);
    return b >= (double)bytes ? bytes : (uint64_t)b;
}

static ms_status replay_alloc(lw *w, replay *r, const trace_tensor *t, idx_list *live)
{
    uint64_t at;
    if (!u64map_get(r->need, t->id, NULL) || !u64map_get(r->seg_alloc, t->id, &at)) return MS_OK;
    int target = u64map_get(r->target, t->id, NULL);
    if (target && r->in_place) return MS_OK; /* its block is there; its tokens are filled in */
    lw_tensor *x = find_tensor(w, t->id);
    x->sid = next_sid(w, x);
    ms_status st = put_alloc(w, SS_COMPUTE, x,
                              target ? t->bytes : scaled_bytes(t->bytes, r->frac));
    if (st != MS_OK) return st;
    x->state = TS_LIVE;
    if (target) {
        w->rep.rebuilt++;
        return MS_OK;
    }
    return idx_push(live, (size_t)(x - w->ts)) == MS_OK ? MS_OK : nomem(w);
}

static ms_status replay_free(lw *w, replay *r, uint64_t id, idx_list *live)
{
    if (!u64map_get(r->need, id, NULL) || u64map_get(r->target, id, NULL)) return MS_OK;
    lw_tensor *x = find_tensor(w, id);
    for (size_t k = 0; k < live->n; k++)
        if (&w->ts[live->v[k]] == x) {
            live->v[k] = live->v[--live->n]; /* order is restored at the final frees */
            x->state = TS_FREED;
            return sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
        }
    return MS_OK;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static ms_status replay_op(lw *w, replay *r, size_t i, double *pend, int *have)
{
    const trace_op *op = &trace_get(w->t, i)->u.op;
    double us;
    ms_status st = op_us(w, op, &us);
    if (st == MS_OK) st = note_comm(w, op);
    if (st != MS_OK) return st;
    us *= r->frac;
    if (ovl_merges(w, i, r->e, r->op_needed, r->b)) {
        if (us > *pend) *pend = us;
        *have = 1;
        w->rep.overlapped++;
        return MS_OK;
    }
    us = ovl_absorb(w, op, us, pend, have);
    sched_action a = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
    a.op = (int64_t)op->id;
    a.dur_us = us;
    a.recompute = 1;
    a.layer = op->layer;
    if (r->in_place && r->frac < 1.0) a.replay_frac = r->frac; /* rows for the real kernels */
    w->rep.recompute_ops++;
    w->rep.recompute_us += us;
    return sbuild_put(w->b, &a);
}

/* Program-order pass over the section emitting the needed allocs, ops and frees. Transients
 * whose trace free lies beyond the section are freed at the end, in allocation order. */
static ms_status emit_replay(lw *w, replay *r)
{
    idx_list live = { 0 };
    ms_status st = MS_OK;
    double pend = 0;
    int have = 0;
    for (size_t i = r->b; st == MS_OK && i < r->e; i++) {
        const trace_rec *rec = trace_get(w->t, i);
        if (rec->type == TR_ALLOC) {
            uint64_t at;
            if (u64map_get(r->seg_alloc, rec->u.alloc.id, &at) && at == i)
                st = replay_alloc(w, r, &rec->u.alloc, &live);
        } else if (rec->type == TR_FREE) {
            st = replay_free(w, r, rec->u.free_id, &live);
        } else if (rec->type == TR_OP && r->op_needed[i - r->b]) {
            st = replay_op(w, r, i, &pend, &have);
        }
    }
    if (live.n > 1) qsort(live.v, live.n, sizeof *live.v, cmp_size);
    for (size_t k = 0; st == MS_OK && k < live.n; k++) {
        w->ts[live.v[k]].state = TS_FREED;
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, w->ts[live.v[k]].sid, 0);
    }
    free(live.v);
    return st;
}

/* Replays layer L's forward section for the tensors in `targets` (indices into w->ts). */
static ms_status run_replay(lw *w, lw_layer *L, int32_t layer, const idx_list *targets,
                            double frac, int in_place)
{
    replay r = { L->fwd_begin, L->fwd_end, u64map_new(256), u64map_new(256), u64map_new(64),
                 calloc(L->fwd_end - L->fwd_begin + 1, 1), frac, in_place };
    ms_status st = MS_OK;
    if (!r.seg_alloc || !r.need || !r.target || !r.op_needed) st = nomem(w);
    for (size_t i = r.b; st == MS_OK && i < r.e; i++) {
        const trace_rec *rec = trace_get(w->t, i);
        if (rec->type == TR_ALLOC && u64map_put(r.seg_alloc, rec->u.alloc.id, i)) st = nomem(w);
    }
    for (size_t k = 0; st == MS_OK && k < targets->n; k++) {
        uint64_t id = w->ts[targets->v[k]].meta->id;
        if (u64map_put(r.need, id, 1) || u64map_put(r.target, id, 1)) st = nomem(w);
    }
    if (st == MS_OK) st = mark_needed(w, &r, layer);
    if (st == MS_OK) st = need_workspaces(w, &r);
    if (st == MS_OK) st = emit_replay(w, &r);
    u64map_free(r.seg_alloc);
    u64map_free(r.need);
    u64map_free(r.target);
    free(r.op_needed);
    return st;
}

static ms_status replay_layer(lw *w, lw_layer *L, int32_t layer)
{
    idx_list t = { 0 };
    ms_status st = MS_OK;
    for (size_t k = 0; st == MS_OK && k < L->drop.n; k++)
        if (w->ts[L->drop.v[k]].state == TS_DROPPED) st = idx_push(&t, L->drop.v[k]);
    if (st != MS_OK) st = nomem(w);
    if (st == MS_OK && t.n) st = run_replay(w, L, layer, &t, 1.0, 0);
    free(t.v);
    return st;
}

/* MEMO's token-wise recomputation (§4.1, "chain"): the (1 - alpha) tokens of the partially
 * swapped tensors are rebuilt by running, on those tokens, every forward op of the layer they
 * depend on; tensors swapped whole (the layer input, the attention output) are read as they
 * are, so the attention kernel is not rerun. Each replayed op and transient takes
 * (1 - smallest alpha) of its forward time and bytes: tokens are independent in every op but
 * attention. The targets are written in place (their block already exists). */
static ms_status chain_recompute(lw *w, lw_layer *L, int32_t layer, const idx_list *cand,
                                 int want_state)
{
    idx_list t = { 0 };
    double alpha = 1.0;
    ms_status st = MS_OK;
    for (size_t k = 0; st == MS_OK && k < cand->n; k++) {
        lw_tensor *x = &w->ts[cand->v[k]];
        if (x->state != want_state || x->dec != PD_SWAP || x->alpha >= 1.0) continue;
        if (x->alloc_rec < L->fwd_begin || x->alloc_rec >= L->fwd_end)
            st = fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is swapped with alpha "
                          "< 1 but is not made in layer %d's forward, so its missing tokens "
                          "cannot be recomputed (swap it whole)", x->meta->id, x->meta->name,
                          (int)layer);
        else if (idx_push(&t, cand->v[k]) != MS_OK)
            st = nomem(w);
        if (x->alpha < alpha) alpha = x->alpha;
    }
    if (st == MS_OK && t.n) st = run_replay(w, L, layer, &t, 1.0 - alpha, 1);
    free(t.v);
    return st;
}

/* MEMO's token-wise recomputation of the (1 - alpha) part of partially swapped tensors. The
 * producer chain is approximated by the producing op alone: one COMPUTE of (1 - alpha) of its
 * duration; an op producing several such tensors runs once with the largest fraction.
 * (tokenwise=chain replays the whole chain instead: chain_recompute.) */
static ms_status tokenwise_recompute(lw *w, lw_layer *L, int32_t layer)
{
    if (w->chain) return chain_recompute(w, L, layer, &L->swap, TS_PREFETCHED);
    for (size_t k = 0; k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        if (x->state != TS_PREFETCHED || x->alpha >= 1.0) continue;
        int64_t prod = x->meta->producer;
        int seen = 0;
        double frac = 1.0 - x->alpha;
        for (size_t j = 0; j < L->swap.n; j++) {
            lw_tensor *y = &w->ts[L->swap.v[j]];
            if (y->state != TS_PREFETCHED || y->alpha >= 1.0 || y->meta->producer != prod)
                continue;
            if (j < k) seen = 1;
            if (1.0 - y->alpha > frac) frac = 1.0 - y->alpha;
        }
        if (seen) continue;
        const trace_op *op = prod >= 0 ? trace_find_op(w->t, (uint64_t)prod) : NULL;
        if (!op)
            return fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is swapped with alpha < 1 "
                            "but has no producer op to recompute the rest", x->meta->id,
                            x->meta->name);
        double us;
        ms_status st = op_us(w, op, &us);
        if (st != MS_OK) return st;
        sched_action a = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
        a.op = (int64_t)op->id;
        a.dur_us = frac * us;
        a.recompute = 1;
        a.layer = op->layer;
        if ((st = sbuild_put(w->b, &a)) != MS_OK) return st;
        w->rep.recompute_ops++;
        w->rep.recompute_us += a.dur_us;
    }
    return MS_OK;
}

/* Rounding buffers at layer L's backward start: wait for the block, then recompute the
 * missing tokens of its members. */
static ms_status rb_backward(lw *w, lw_layer *L, int32_t layer)
{
    int64_t g = rb_find(w, w->pass, layer);
    if (g < 0) return MS_OK;
    rb_group *G = &w->groups[g];
    ms_status st = rb_ready(w, G);
    if (st != MS_OK || !G->n_swap || G->min_alpha >= 1.0 || G->state != RB_PREFETCHED)
        return st;
    if (!w->chain)
        return fail_rec(w, MS_ERR_UNSUPPORTED, "rounding buffers need tokenwise=chain for "
                        "alpha < 1 (layer %d)", (int)layer);
    idx_list m = { 0 };
    for (size_t i = 0; st == MS_OK && i < w->n_ts; i++)
        if (w->ts[i].rbg == g && w->ts[i].state == TS_INBUF && idx_push(&m, i) != MS_OK)
            st = nomem(w);
    if (st == MS_OK) st = chain_recompute(w, L, layer, &m, TS_INBUF);
    free(m.v);
    return st;
}

/* The next layer whose backward starts after record i within this backward phase, or -1. */
static int32_t next_bwd_layer(lw *w, size_t i)
{
    for (size_t j = i + 1; j < trace_count(w->t); j++) {
        const trace_rec *r = trace_get(w->t, j);
        if (r->type != TR_MARK) continue;
        if (r->u.mark.kind != TM_LAYER) return -1;
        if (r->u.mark.value >= 0) return (int32_t)r->u.mark.value;
    }
    return -1;
}

static ms_status release(lw *w, lw_tensor *x, tstate was);
static ms_status sv_cache_release(lw *w);

/* At layer L's backward mark: release the prefetch of the layer whose backward comes next,
 * then make L's own swapped tensors ready and rebuild its dropped ones. */
static ms_status begin_backward(lw *w, int32_t layer)
{
    ms_status st = issue_prefetch(w, next_bwd_layer(w, w->rec));
    if (st != MS_OK || (size_t)layer >= w->n_layers) return st;
    lw_layer *L = &w->layers[layer];
    if (w->rb && (st = rb_backward(w, L, layer)) != MS_OK) return st;
    if (L->swap.n) {
        st = issue_prefetch(w, layer); /* no-op unless the trace's order was unusual */
        if (st == MS_OK && L->prefetched && !L->waited) st = wait_layer(w, L);
        if (st == MS_OK) st = tokenwise_recompute(w, L, layer);
    }
    if (st == MS_OK) st = replay_layer(w, L, layer);
    for (size_t k = 0; st == MS_OK && k < L->held.n; k++) {
        lw_tensor *x = &w->ts[L->held.v[k]];
        st = release(w, x, (tstate)x->state);
    }
    L->held.n = 0;
    return st;
}

/* At "mark phase bwd": the weight casts autocast's cache held are freed (the region has
 * ended); every layer with decisions must have had a forward section. */
static ms_status begin_backward_phase(lw *w)
{
    for (size_t k = 0; k < w->cache_held.n; k++) {
        lw_tensor *x = &w->ts[w->cache_held.v[k]];
        if (x->state != TS_DROPPED) continue;
        ms_status st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
        if (st != MS_OK) return st;
    }
    w->cache_held.n = 0;
    ms_status cst = w->sv ? sv_cache_release(w) : MS_OK;
    if (cst != MS_OK) return cst;
    for (size_t l = 0; l < w->n_layers; l++) {
        lw_layer *L = &w->layers[l];
        if (L->fwd_state != 0 || !L->cand.n) continue;
        lw_tensor *x = &w->ts[L->cand.v[0]];
        char b[160];
        snprintf(b, sizeof b, " but layer %zu has no forward section (\"mark layer %zu\" in "
                 "phase fwd) in this pass", l, l);
        return fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is planned for swap or "
                        "recomputation%s", x->meta->id, x->meta->name, b);
    }
    return issue_prefetch(w, next_bwd_layer(w, w->rec));
}

/* ---- swap at save time (plan knob swap_at=save) ----
 * autograd's saved-tensor hooks as torch.autograd.graph.save_on_cpu writes them: the pack hook
 * copies a tensor to the host when an op saves it, so its device block goes when the forward's
 * own references to it drop (its last forward use); the unpack hook copies it back when the
 * backward needs it, into a block that lives while the backward reads it. */

static ms_status sv_push_event(lw *w, size_t rec, uint32_t kind, size_t item)
{
    if (ms_grow((void **)&w->sve, &w->cap_sve, w->n_sve + 1, sizeof *w->sve) != MS_OK)
        return nomem(w);
    w->sve[w->n_sve++] = (sv_event){ rec, kind, (uint32_t)item };
    return MS_OK;
}

static int cmp_sv_event(const void *a, const void *b)
{
    const sv_event *x = a, *y = b;
    if (x->rec != y->rec) return x->rec < y->rec ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    return x->item < y->item ? -1 : x->item > y->item;
}

/* A new save of tensor x (its `reader`-th in the pass, 0 for the head) at record rec. */
static sv_item *sv_new_item(lw *w, const trace_tensor *x, uint32_t pass, int keep_device,
                            size_t rec, uint32_t reader)
{
    if (ms_grow((void **)&w->svi, &w->cap_svi, w->n_svi + 1, sizeof *w->svi) != MS_OK)
        return NULL;
    sv_item *it = &w->svi[w->n_svi++];
    memset(it, 0, sizeof *it);
    it->id = x->id;
    it->pass = pass;
    it->head = reader == 0;
    it->keep_device = (uint8_t)keep_device;
    it->reader = reader;
    it->out_rec = it->last_fwd = rec;
    it->bwd_rec = SIZE_MAX;
    it->bytes = x->bytes;
    it->copy_id = lower_id_incarnation(x->id, 1u + reader);
    return it;
}

/* A swapped tensor an op of pass `pass` touches at record rec: a forward use (a new head at
 * the first), or a backward read (a save of its own for each op reading it). cur maps the
 * tensor to its head in this pass, last to the latest item. */
static ms_status sv_touch(lw *w, u64map *cur, u64map *arec, uint64_t id, size_t rec,
                          uint32_t pass, size_t fwd_begin, int bwd)
{
    const trace_tensor *x = trace_find_tensor(w->t, id);
    if (!x) return MS_OK;
    plan_decision d;
    double alpha;
    decide(w, x, &d, &alpha);
    if (d != PD_SWAP) return MS_OK;
    uint64_t k, at = 0;
    sv_item *h = u64map_get(cur, id, &k) && w->svi[k].pass == pass ? &w->svi[k] : NULL;
    if (!h && bwd) return MS_OK; /* made in the backward: never saved */
    if (!h) {
        if (alpha < 1.0)
            return ms_fail(w->err, MS_ERR_UNSUPPORTED, "plan: tensor %" PRIu64 " (%s) is "
                           "swapped with alpha %g under swap_at=save, which copies whole "
                           "tensors", id, x->name, alpha);
        if (id >= LOWER_ID_TRACE_LIMIT)
            return ms_fail(w->err, MS_ERR_LIMIT, "tensor id %" PRIu64 " is too large for the "
                           "ids of swap_at=save's copies (limit 2^48)", id);
        int keep = !u64map_get(arec, id, &at) || at < fwd_begin;
        if (u64map_put(cur, id, w->n_svi) || !sv_new_item(w, x, pass, keep, rec, 0))
            return nomem(w);
        return MS_OK;
    }
    if (!bwd) {
        h->last_fwd = rec;
        return MS_OK;
    }
    sv_item *last = &w->svi[w->n_svi - 1];
    for (size_t j = w->n_svi; j-- > 0;) /* the tensor's latest item */
        if (w->svi[j].id == id && w->svi[j].pass == pass) {
            last = &w->svi[j];
            break;
        }
    if (last->bwd_rec == rec) return MS_OK; /* the same op reads it twice */
    if (last->bwd_rec == SIZE_MAX) {
        last->bwd_rec = rec;
        return MS_OK;
    }
    if (last->reader >= 254)
        return ms_fail(w->err, MS_ERR_LIMIT, "tensor %" PRIu64 " (%s): more than 255 backward "
                       "ops read it, beyond the copies swap_at=save names", id, x->name);
    size_t hi = (size_t)(h - w->svi);
    sv_item *n = sv_new_item(w, x, pass, h->keep_device, h->out_rec, last->reader + 1);
    if (!n) return nomem(w);
    n->bwd_rec = rec;
    n->last_fwd = w->svi[hi].last_fwd;
    return MS_OK;
}

/* Before the walk: every swapped tensor's saves, last forward use and backward reads, pass
 * by pass, as events in record order. */
static ms_status sv_prescan(lw *w)
{
    u64map *cur = u64map_new(1024), *arec = u64map_new(4096);
    ms_status st = cur && arec ? MS_OK : nomem(w);
    uint32_t pass = 0;
    size_t fwd_begin = 0;
    int seen = 0, bwd = 0;
    for (size_t i = 0; st == MS_OK && i < trace_count(w->t); i++) {
        const trace_rec *r = trace_get(w->t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            trace_phase ph = (trace_phase)r->u.mark.value;
            if (ph == TP_FWD) {
                pass += seen;
                seen = 1;
                fwd_begin = i;
                bwd = 0;
            } else if (ph == TP_BWD) {
                bwd = 1;
            }
        } else if (r->type == TR_ALLOC) {
            if (u64map_put(arec, r->u.alloc.id, i)) st = nomem(w);
        } else if (r->type == TR_OP && seen) {
            const trace_op *op = &r->u.op;
            if (bwd && op->phase != TP_BWD) continue; /* the optimizer's reads save nothing */
            for (uint32_t k = 0; st == MS_OK && k < op->n_in; k++)
                st = sv_touch(w, cur, arec, op->in[k], i, pass, fwd_begin, bwd);
            for (uint32_t k = 0; st == MS_OK && !bwd && k < op->n_out; k++)
                st = sv_touch(w, cur, arec, op->out[k], i, pass, fwd_begin, 0);
        }
    }
    for (size_t j = 0; st == MS_OK && j < w->n_svi; j++) {
        const sv_item *it = &w->svi[j];
        st = sv_push_event(w, it->out_rec, SV_OUT, j);
        if (st == MS_OK && it->head && !it->keep_device)
            st = sv_push_event(w, it->last_fwd, SV_DROP, j);
        if (st == MS_OK && it->bwd_rec != SIZE_MAX) st = sv_push_event(w, it->bwd_rec, SV_IN, j);
        if (st == MS_OK)
            st = sv_push_event(w, it->bwd_rec != SIZE_MAX ? it->bwd_rec : it->last_fwd, SV_DONE,
                               j);
    }
    if (st == MS_OK && w->n_sve > 1) qsort(w->sve, w->n_sve, sizeof *w->sve, cmp_sv_event);
    u64map_free(cur);
    u64map_free(arec);
    return st;
}

/* The copy stream of a direction, and an order from the compute stream to it. */
static ms_status sv_to_stream(lw *w, sched_stream s)
{
    if (s == SS_COMPUTE) return MS_OK;
    uint32_t e = sbuild_new_event(w->b);
    ms_status st = put_event(w, SA_RECORD, SS_COMPUTE, e);
    return st == MS_OK ? put_event(w, SA_WAIT, s, e) : st;
}

/* The pack hook: a pinned host buffer and the copy into it. */
static ms_status sv_out(lw *w, sv_item *it)
{
    lw_tensor *x = find_tensor(w, it->id);
    if (!x || x->state != TS_LIVE) {
        w->rep.ignored++;
        return MS_OK;
    }
    sched_stream s = w->sv_compute ? SS_COMPUTE : SS_D2H;
    ms_status st = sv_to_stream(w, s);
    if (st == MS_OK) st = put_tensor(w, SA_HOST_ALLOC, s, it->copy_id, host_bytes(w, it->bytes));
    if (st == MS_OK) st = put_tensor(w, SA_COPY_D2H, s, x->sid, it->bytes);
    if (st == MS_OK && s != SS_COMPUTE) {
        it->ev_out = sbuild_new_event(w->b);
        st = put_event(w, SA_RECORD, s, it->ev_out);
    }
    it->out = 1;
    w->rep.swapped++;
    w->rep.d2h_bytes += it->bytes;
    return st;
}

/* The forward's last reference is gone: the device block goes (a weight cast that autocast's
 * cache holds goes when the cache is cleared, at the backward phase). */
static ms_status sv_drop(lw *w, sv_item *it)
{
    lw_tensor *x = find_tensor(w, it->id);
    if (!it->out || !x || x->state != TS_LIVE) return MS_OK;
    ms_status st = w->sv_compute ? MS_OK : put_event(w, SA_WAIT, SS_COMPUTE, it->ev_out);
    x->state = TS_OFFLOADED;
    x->swap_bytes = 0; /* the host copies are the saves' own: the trace's free has none */
    if (st != MS_OK) return st;
    if (w->autocast_cache && ms_ends_with(x->meta->name, ".wcast"))
        return idx_push(&w->sv_cache_held, (size_t)(x - w->ts)) == MS_OK ? MS_OK : nomem(w);
    return put_tensor(w, SA_FREE, SS_COMPUTE, x->sid, 0);
}

/* The unpack hook, just before the backward op that reads this save: a new device block
 * and the copy into it. */
static ms_status sv_in(lw *w, sv_item *it)
{
    lw_tensor *x = find_tensor(w, it->id);
    if (!it->out || !x) return MS_OK;
    sched_stream s = w->sv_compute ? SS_COMPUTE : SS_H2D;
    ms_status st = sv_to_stream(w, s);
    if (st == MS_OK && s != SS_COMPUTE) st = put_event(w, SA_WAIT, s, it->ev_out);
    sched_block b = it->keep_device ? SB_STAGING : sched_block_of_class(x->meta->cls);
    if (st == MS_OK) st = put_block(w, s, it->copy_id, it->bytes, b);
    if (st == MS_OK) st = put_tensor(w, SA_COPY_H2D, s, it->copy_id, it->bytes);
    if (st == MS_OK && s != SS_COMPUTE) {
        uint32_t e = sbuild_new_event(w->b);
        st = put_event(w, SA_RECORD, s, e);
        if (st == MS_OK) st = put_event(w, SA_WAIT, SS_COMPUTE, e);
    }
    it->in = 1;
    x->sv_back++;
    w->rep.prefetched++;
    w->rep.h2d_bytes += it->bytes;
    return st;
}

/* The backward op is done with this save: the copy brought back and the host buffer go. */
static ms_status sv_done(lw *w, sv_item *it)
{
    if (!it->out) return MS_OK;
    lw_tensor *x = find_tensor(w, it->id);
    ms_status st = MS_OK;
    if (it->in) {
        st = put_tensor(w, SA_FREE, SS_COMPUTE, it->copy_id, 0);
        if (x && x->sv_back) x->sv_back--;
    } else if (!w->sv_compute) {
        st = put_event(w, SA_WAIT, SS_COMPUTE, it->ev_out);
    }
    if (st == MS_OK) st = put_tensor(w, SA_HOST_FREE, SS_COMPUTE, it->copy_id, 0);
    it->out = it->in = 0;
    return st;
}

/* The events of record w->rec: those before its op (before = 1) or after it. Events of
 * records lowering skipped (iteration selection) are passed over. */
static ms_status sv_events(lw *w, int before)
{
    ms_status st = MS_OK;
    while (w->sve_pos < w->n_sve && w->sve[w->sve_pos].rec < w->rec) w->sve_pos++;
    for (size_t j = w->sve_pos; st == MS_OK && j < w->n_sve && w->sve[j].rec == w->rec; j++) {
        const sv_event *e = &w->sve[j];
        if ((e->kind == SV_IN) != before) continue;
        sv_item *it = &w->svi[e->item];
        switch (e->kind) {
        case SV_IN: st = sv_in(w, it); break;
        case SV_OUT: st = sv_out(w, it); break;
        case SV_DROP: st = sv_drop(w, it); break;
        default: st = sv_done(w, it); break;
        }
    }
    return st;
}

/* At "mark phase bwd": autocast's cache is cleared; the weight casts it held go. */
static ms_status sv_cache_release(lw *w)
{
    ms_status st = MS_OK;
    for (size_t k = 0; st == MS_OK && k < w->sv_cache_held.n; k++) {
        lw_tensor *x = &w->ts[w->sv_cache_held.v[k]];
        if (x->state == TS_OFFLOADED) st = put_tensor(w, SA_FREE, SS_COMPUTE, x->sid, 0);
    }
    w->sv_cache_held.n = 0;
    return st;
}

/* ---- the trace's records ---- */

static ms_status do_mark(lw *w, const trace_mark *mk)
{
    ms_status st = MS_OK;
    if (w->fwd_layer >= 0) {
        int32_t l = w->fwd_layer;
        w->fwd_layer = -1;
        if ((st = end_forward(w, l)) != MS_OK) return st;
    }
    if (mk->kind == TM_ITER) {
        w->phase = TP_NONE;
        w->layer = -1;
    } else if (mk->kind == TM_PHASE) {
        w->phase = (trace_phase)mk->value;
        w->layer = -1;
        if (w->phase == TP_FWD) {
            if (w->seen_fwd) {
                reset_layers(w);
                w->pass++;
            }
            w->seen_fwd = 1;
        }
    } else {
        w->layer = (int32_t)mk->value;
    }
    sbuild_at(w->b, w->layer, w->phase);
    if (w->o.emit_marks) {
        sched_action a = sbuild_act(w->b, SA_MARK, SS_COMPUTE);
        a.mark = mk->kind;
        a.mark_value = mk->value;
        if ((st = sbuild_put(w->b, &a)) != MS_OK) return st;
    }
    if (mk->kind == TM_PHASE && w->phase == TP_BWD) return begin_backward_phase(w);
    if (mk->kind != TM_LAYER || mk->value < 0) return MS_OK;
    if (w->phase == TP_BWD) return begin_backward(w, w->layer);
    if (w->phase != TP_FWD) return MS_OK;
    lw_layer *L = get_layer(w, w->layer);
    if (!L && w->layer >= w->max_layer) return layer_range(w, "mark layer", 0, NULL, w->layer);
    if (!L) return nomem(w);
    if (L->fwd_state != 0)
        return fail_rec(w, MS_ERR_UNSUPPORTED, "layer %" PRId64 " has a second forward "
                        "section in one pass", mk->value);
    L->fwd_state = 1;
    L->fwd_begin = w->rec + 1;
    w->fwd_layer = w->layer;
    return MS_OK;
}

static ms_status add_tensor(lw *w, const trace_tensor *x, int emitted)
{
    lw_tensor *old = find_tensor(w, x->id);
    if (old && old->state != TS_FREED)
        return fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " is allocated again while "
                        "live", x->id);
    if (ms_grow((void **)&w->ts, &w->cap_ts, w->n_ts + 1, sizeof *w->ts) != MS_OK)
        return nomem(w);
    lw_tensor *n = &w->ts[w->n_ts];
    memset(n, 0, sizeof *n);
    n->meta = x;
    n->alloc_rec = w->rec;
    n->state = TS_LIVE;
    n->emitted = (uint8_t)emitted;
    n->sid = n->hid = x->id;
    n->rbg = -1;
    if (u64map_put(w->tidx, x->id, w->n_ts)) return nomem(w);
    w->n_ts++;
    return MS_OK;
}

/* A rounding-buffer member: no block of its own; its group's block is made with the first. */
static ms_status rb_alloc(lw *w, lw_tensor *n, uint64_t g)
{
    rb_group *G = &w->groups[g];
    n->rbg = (int64_t)g;
    if (G->state == RB_OFFLOADED || G->state == RB_PREFETCHED || G->state == RB_FREED)
        return fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is made after its layer's "
                        "rounding buffer was offloaded or released", n->meta->id,
                        n->meta->name);
    ms_status st = G->state == RB_NONE ? rb_open(w, G) : MS_OK;
    n->state = TS_INBUF;
    G->alive++;
    return st;
}

static ms_status do_alloc(lw *w, const trace_tensor *x)
{
    if ((w->rename || w->rb) && x->id >= LOWER_ID_TRACE_LIMIT)
        return fail_rec(w, MS_ERR_LIMIT, "tensor id %" PRIu64 " is too large for the ids "
                        "memory_plan / rounding_buffers make (limit 2^48)", x->id);
    ms_status st = add_tensor(w, x, 1);
    if (st != MS_OK) return st;
    lw_tensor *n = &w->ts[w->n_ts - 1];
    decide(w, x, &n->dec, &n->alpha);
    uint64_t g;
    if (w->rb && u64map_get(w->rb_rec, w->rec, &g)) return rb_alloc(w, n, g);
    if (n->dec == PD_DHA)
        return fail_rec(w, MS_ERR_UNSUPPORTED, "tensor %" PRIu64 " (%s): DHA lowering is not "
                        "implemented yet", x->id, x->name);
    if (n->dec == PD_SWAP) {
        double sb = ceil(n->alpha * (double)x->bytes);
        n->swap_bytes = sb >= (double)x->bytes ? x->bytes : (uint64_t)sb;
    }
    if ((st = put_tensor(w, SA_ALLOC, SS_COMPUTE, x->id, x->bytes)) != MS_OK) return st;
    if (n->dec == PD_KEEP || (w->sv && n->dec == PD_SWAP)) return MS_OK; /* sv_prescan's */
    if (x->layer < 0)
        return fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is planned for %s but "
                        "belongs to no transformer layer", x->id, x->name,
                        plan_decision_name(n->dec));
    lw_layer *L = get_layer(w, x->layer);
    if (!L && x->layer >= w->max_layer)
        return layer_range(w, "tensor", x->id, x->name, x->layer);
    if (!L) return nomem(w);
    if (L->fwd_state == 2) {
        w->rep.ignored++; /* made after its layer's forward: nothing to save */
        return MS_OK;
    }
    return idx_push(&L->cand, w->n_ts - 1) == MS_OK ? MS_OK : nomem(w);
}

/* Whether replaying layer L's forward (in its backward) may start from its inputs: one of
 * `l`'s tensors is dropped, or (token-wise chains) misses the tokens of a partial swap. */
static int replays_from_inputs(const lw *w, const idx_list *l)
{
    for (size_t k = 0; k < l->n; k++) {
        const lw_tensor *y = &w->ts[l->v[k]];
        if (y->dec == PD_RECOMPUTE) return 1;
        if (w->chain && y->dec == PD_SWAP && y->alpha < 1.0) return 1;
    }
    return 0;
}

/* The layer of x, freed by the trace in the forward phase, that could still need x as the
 * start of its replay: x's layer while its forward is open, or once closed when x comes from
 * before the section (an argument of the layer's call); else NULL. */
static lw_layer *input_layer(lw *w, const lw_tensor *x)
{
    int32_t l = x->meta->layer;
    if (l < 0 || w->phase != TP_FWD || (size_t)l >= w->n_layers) return NULL;
    lw_layer *L = &w->layers[l];
    if (L->fwd_state == 1) return L;
    return L->fwd_state == 2 && x->alloc_rec < L->fwd_begin ? L : NULL;
}

/* Whether layer L's backward replays its forward: its candidates tell while the forward is
 * open, its drops and swaps once it is closed. */
static int layer_replays(const lw *w, const lw_layer *L)
{
    if (L->fwd_state == 1) return replays_from_inputs(w, &L->cand);
    return replays_from_inputs(w, &L->drop) || replays_from_inputs(w, &L->swap);
}

/* A kept or swapped skeletal tensor of layer l (its input) that the trace frees in the
 * forward phase, while the plan recomputes tensors of l (or tokens of them): the
 * recomputation in l's backward starts from it, so it is held until then, as PyTorch's
 * non-reentrant checkpoint holds the arguments of the function it reruns
 * (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator: recompute_fn keeps
 * args until the layer's saved-tensor holders are gone). A Hugging Face layer's input dies
 * at its first residual add (the generator's hf traces), or, when no op saved it, once the
 * layer's call returns (bf16 captures: nn.Module._call_impl holds its args until then). A
 * tensor swapped whole is held the same way and goes to the host with the others (or, freed
 * once its copy is under way, keeps its host copy for the prefetch). */
static lw_layer *hold_layer(lw *w, const lw_tensor *x)
{
    if ((x->dec != PD_KEEP && x->dec != PD_SWAP) || x->meta->cls != TC_ACT_SKEL) return NULL;
    lw_layer *L = input_layer(w, x);
    return L && layer_replays(w, L) ? L : NULL;
}

/* The same for a rounding-buffer member (MEMO's swapped layer input), when its layer
 * recomputes or its block has partially swapped members, whose missing tokens the backward
 * recomputes from it. It stays in its block (offloaded and prefetched with it) and leaves it
 * at the layer's backward, after the recomputation. */
static lw_layer *rb_hold_layer(lw *w, const lw_tensor *x)
{
    const rb_group *G = &w->groups[x->rbg];
    lw_layer *L = input_layer(w, x);
    if (!L) return NULL;
    return (G->n_swap && G->min_alpha < 1.0) || layer_replays(w, L) ? L : NULL;
}

static ms_status do_free(lw *w, uint64_t id)
{
    lw_tensor *x = find_tensor(w, id);
    if (!x || x->state == TS_FREED)
        return fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " is freed but is not live",
                        id);
    tstate was = (tstate)x->state;
    lw_layer *H = was == TS_INBUF ? rb_hold_layer(w, x)
                  : was == TS_LIVE || was == TS_OFFLOADED ? hold_layer(w, x) : NULL;
    if (H) return idx_push(&H->held, (size_t)(x - w->ts)) == MS_OK ? MS_OK : nomem(w);
    return release(w, x, was);
}

/* What the trace's free of x does when x is in state `was` (do_free; a held tensor at its
 * layer's backward). */
static ms_status release(lw *w, lw_tensor *x, tstate was)
{
    if (was == TS_INBUF) return rb_free_member(w, x);
    x->state = TS_FREED;
    switch (was) {
    case TS_DROPPED:
        return MS_OK; /* never needed again: its block went at the forward's end */
    case TS_OFFLOADED:
        /* never needed again: drop the host copy after the offload (D2H stream order) */
        return x->swap_bytes ? put_tensor(w, SA_HOST_FREE, w->sv_compute ? SS_COMPUTE : SS_D2H,
                                          x->hid, 0) : MS_OK;
    case TS_PREFETCHED: {
        x->state = TS_PREFETCHED;
        ms_status st = ensure_ready(w, x);
        x->state = TS_FREED;
        return st == MS_OK ? sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0) : st;
    }
    default:
        return sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
    }
}

static ms_status op_uses(lw *w, const trace_op *op, uint64_t id)
{
    lw_tensor *x = find_tensor(w, id);
    if (!x) return MS_OK;
    if (x->state == TS_INBUF) {
        rb_group *G = &w->groups[x->rbg];
        if (G->state == RB_LIVE) return MS_OK;
        if (G->state == RB_PREFETCHED) return rb_ready(w, G);
        char b[200];
        snprintf(b, sizeof b, ", whose rounding buffer is %s (op %" PRIu64 " %s)",
                 G->state == RB_OFFLOADED ? "on the host" : "released", op->id, op->name);
        return fail_rec(w, MS_ERR_INVALID, "an op uses tensor %" PRIu64 " (%s)%s", id,
                        x->meta->name, b);
    }
    if (x->state == TS_OFFLOADED && x->sv_back) return MS_OK; /* its save's copy is back */
    if (x->state == TS_DROPPED || x->state == TS_OFFLOADED) {
        char b[200];
        snprintf(b, sizeof b, ", which the plan %s after layer %d's forward until its backward "
                 "(op %" PRIu64 " %s)", x->state == TS_DROPPED ? "drops" : "offloads",
                 (int)x->meta->layer, op->id, op->name);
        return fail_rec(w, MS_ERR_INVALID, "an op uses tensor %" PRIu64 " (%s)%s", id,
                        x->meta->name, b);
    }
    return ensure_ready(w, x);
}

static ms_status do_op(lw *w, const trace_op *op)
{
    ms_status st = MS_OK;
    for (uint32_t k = 0; st == MS_OK && k < op->n_in; k++) st = op_uses(w, op, op->in[k]);
    for (uint32_t k = 0; st == MS_OK && k < op->n_out; k++) st = op_uses(w, op, op->out[k]);
    double us = 0;
    if (st == MS_OK) st = op_us(w, op, &us);
    if (st == MS_OK) st = note_comm(w, op);
    if (st != MS_OK) return st;
    if (ovl_merges(w, w->rec, trace_count(w->t), NULL, 0)) {
        if (us > w->ovl_us) w->ovl_us = us;
        w->ovl_pending = 1;
        w->rep.overlapped++;
        return MS_OK;
    }
    us = ovl_absorb(w, op, us, &w->ovl_us, &w->ovl_pending);
    sched_action a = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
    a.op = (int64_t)op->id;
    a.dur_us = us;
    a.layer = op->layer;
    a.phase = op->phase;
    return sbuild_put(w->b, &a);
}

/* ---- iteration selection ---- */

/* Records of skipped iterations only move tensors in and out of existence; entering the first
 * lowered iteration emits what that changed, so the schedule starts from the right state. */
static ms_status skip_record(lw *w, const trace_rec *r)
{
    if (r->type == TR_ALLOC) return add_tensor(w, &r->u.alloc, 0);
    if (r->type != TR_FREE) return MS_OK;
    lw_tensor *x = find_tensor(w, r->u.free_id);
    if (!x || x->state == TS_FREED)
        return fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " is freed but is not live",
                        r->u.free_id);
    x->state = TS_FREED;
    if (x->emitted) x->skip_freed = 1;
    return MS_OK;
}

static ms_status sync_carried(lw *w)
{
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < w->n_ts; i++) {
        lw_tensor *x = &w->ts[i];
        if (!x->skip_freed) continue;
        x->skip_freed = 0;
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
    }
    for (size_t i = 0; st == MS_OK && i < w->n_ts; i++) {
        lw_tensor *x = &w->ts[i];
        if (x->state != TS_LIVE || x->emitted) continue;
        x->emitted = 1;
        st = put_alloc(w, SS_COMPUTE, x, x->meta->bytes);
    }
    return st;
}

static int iter_included(const lw *w, int64_t v)
{
    if (v < w->o.iter_first) return 0;
    /* unsigned: v - iter_first cannot overflow that way (v >= iter_first) */
    return w->o.iter_count <= 0 ||
           (uint64_t)v - (uint64_t)w->o.iter_first < (uint64_t)w->o.iter_count;
}

static ms_status walk(lw *w)
{
    int included = 1, entered = 0;
    ms_status st = MS_OK;
    /* MEMO allocates its rounding buffers before the training iterations begin (§4.1). */
    if (w->idle_bytes)
        st = put_block(w, SS_COMPUTE, lower_id_idle_buffer(), w->idle_bytes, SB_IDLE);
    for (w->rec = 0; st == MS_OK && w->rec < trace_count(w->t); w->rec++) {
        const trace_rec *r = trace_get(w->t, w->rec);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            int inc = iter_included(w, r->u.mark.value);
            if (!inc && entered) break; /* past the last lowered iteration */
            if (inc && !included && (st = sync_carried(w)) != MS_OK) return st;
            included = inc;
            entered |= inc;
        }
        if (!included) {
            st = skip_record(w, r);
            continue;
        }
        switch (r->type) {
        case TR_MARK: st = do_mark(w, &r->u.mark); break;
        case TR_ALLOC: st = do_alloc(w, &r->u.alloc); break;
        case TR_FREE: st = do_free(w, r->u.free_id); break;
        case TR_OP:
            st = w->sv ? sv_events(w, 1) : MS_OK;
            if (st == MS_OK) st = do_op(w, &r->u.op);
            if (st == MS_OK && w->sv) st = sv_events(w, 0);
            break;
        }
    }
    if (st == MS_OK && w->fwd_layer >= 0) {
        int32_t l = w->fwd_layer;
        w->fwd_layer = -1;
        st = end_forward(w, l);
    }
    if (st == MS_OK && w->idle_bytes)
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, lower_id_idle_buffer(), 0);
    w->rep.idle_bytes = w->idle_bytes;
    return st;
}

/* ---- entry point ---- */

void lower_opts_default(lower_opts *o)
{
    memset(o, 0, sizeof *o);
    o->iter_first = INT64_MIN;
    o->iter_count = 0;
    o->emit_marks = 1;
    o->overlap_ovl = 1;
}

static void lw_free(lw *w)
{
    u64map_free(w->plan_idx);
    u64map_free(w->tidx);
    free(w->ts);
    for (size_t i = 0; i < w->n_layers; i++) {
        free(w->layers[i].cand.v);
        free(w->layers[i].drop.v);
        free(w->layers[i].swap.v);
        free(w->layers[i].held.v);
    }
    free(w->layers);
    free(w->cache_held.v);
    free(w->sv_cache_held.v);
    free(w->svi);
    free(w->sve);
    free(w->groups);
    u64map_free(w->rb_rec);
    u64map_free(w->rb_key);
    u64map_free(w->comm_use);
}

/* ---- the table of lowerings (lower.h) ---- */

/* Adding a lowering is one line here: X(its lower_backend row), defined next to its code.
 * The rows of the other files are declared here, not through their headers, so that this
 * table depends on no lowering (they all include lower.h). */
#define LOWER_LIST(X)          \
    X(lower_backend_tensor)    \
    X(lower_backend_chunks)    \
    X(lower_backend_dha)

#define LOWER_DECLARE(b) extern const lower_backend b;
#define LOWER_ENTRY(b) &b,
LOWER_LIST(LOWER_DECLARE)
static const lower_backend *const lowerings[] = { LOWER_LIST(LOWER_ENTRY) };

const lower_backend *const *lower_registry(size_t *n)
{
    *n = sizeof lowerings / sizeof *lowerings;
    return lowerings;
}

const lower_backend *lower_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof lowerings / sizeof *lowerings; i++)
        if (!strcmp(lowerings[i]->name, name)) return lowerings[i];
    return NULL;
}

ms_status lower_schedule(const trace_t *t, const plan_t *p, const machine_t *m,
                         const lower_opts *o, schedule_t **out, ms_error *err)
{
    *out = NULL;
    if (!t) return ms_fail(err, MS_ERR_INVALID, "lower: no trace");
    /* the markers that named the lowering before plans had a `lowering` line (plan_load
     * reads them in such files): anything but 0 or 1 is a hand edit gone wrong */
    ms_status mst = p ? plan_markers_check(p, err) : MS_OK;
    if (mst != MS_OK) return mst;
    const lower_backend *b = p ? lower_find(p->lowering) : &lower_backend_tensor;
    if (!b)
        return ms_fail(err, MS_ERR_INVALID, "plan names lowering '%s', which is not one of "
                       "tensor, chunks, dha", p->lowering);
    return b->lower(t, p, m, o, out, err);
}

/* The per-tensor lowering (the row "tensor"). */
static ms_status lower_tensor(const trace_t *t, const plan_t *p, const machine_t *m,
                              const lower_opts *o, schedule_t **out, ms_error *err)
{
    *out = NULL;
    lw w;
    memset(&w, 0, sizeof w);
    w.t = t;
    w.p = p;
    w.m = m;
    w.err = err;
    w.max_layer = t ? layer_bound(t) : LOWER_MAX_LAYER;
    w.autocast_cache = trace_meta_u64(t, "autocast_cache", 0) == 1;
    if (o) w.o = *o;
    else lower_opts_default(&w.o);
    roof_params_default(&w.roof);
    w.phase = TP_NONE;
    w.layer = -1;
    w.fwd_layer = -1;
    w.s = sched_new();
    w.b = w.s ? sbuild_new(w.s, err, "out of memory while lowering") : NULL;
    if (w.b) sbuild_set_hook(w.b, stream_hook, &w);
    w.tidx = u64map_new(trace_count(t) / 2 + 16);
    ms_status st = (w.b && w.tidx) ? MS_OK : nomem(&w);
    if (st == MS_OK) st = index_plan(&w);
    if (st == MS_OK) st = read_knobs(&w);
    if (st == MS_OK && w.rb) st = rb_prescan(&w);
    if (st == MS_OK && w.sv) st = sv_prescan(&w);
    if (st == MS_OK) st = walk(&w);
    if (st == MS_OK) {
        for (size_t i = 0; i < w.n_layers; i++) w.rep.ignored += w.layers[i].cand.n;
        w.rep.actions = sched_count(w.s);
        w.rep.events = sched_event_count(w.s);
        if (w.o.report) *w.o.report = w.rep;
        *out = w.s;
    } else {
        sched_free(w.s);
    }
    sbuild_free(w.b);
    lw_free(&w);
    return st;
}

const lower_backend lower_backend_tensor = {
    "tensor",
    "per-tensor keep / swap / recompute on the trace's own program, MEMO's rounding buffers, "
    "fresh ids for a static memory plan",
    lower_tensor,
    1,
};

/* ---- where rounding buffers put their members (lower.h) ---- */

struct lower_rb_map {
    lower_rb_place *v;       /* sorted by tensor id, then pass */
    size_t n;
};

typedef struct rb_item {
    lower_rb_place pl;
    double alpha;            /* layout key: swapped whole first */
    size_t rec;
} rb_item;

/* Group, then decreasing alpha, then trace order. */
static int cmp_rb_layout(const void *a, const void *b)
{
    const rb_item *x = a, *y = b;
    if (x->pl.pass != y->pl.pass) return x->pl.pass < y->pl.pass ? -1 : 1;
    if (x->pl.layer != y->pl.layer) return x->pl.layer < y->pl.layer ? -1 : 1;
    if (x->alpha != y->alpha) return x->alpha > y->alpha ? -1 : 1;
    return x->rec < y->rec ? -1 : x->rec > y->rec;
}

static int cmp_rb_id(const void *a, const void *b)
{
    const lower_rb_place *x = a, *y = b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    return x->pass < y->pass ? -1 : x->pass > y->pass;
}

/* The members rb_prescan found, laid out group by group. */
static ms_status rb_layout(lw *w, lower_rb_map *m)
{
    size_t n = 0;
    for (size_t i = 0; i < trace_count(w->t); i++) n += u64map_get(w->rb_rec, i, NULL);
    rb_item *it = calloc(n ? n : 1, sizeof *it);
    m->v = calloc(n ? n : 1, sizeof *m->v);
    if (!it || !m->v) {
        free(it);
        return nomem(w);
    }
    size_t k = 0;
    for (size_t i = 0; i < trace_count(w->t) && k < n; i++) {
        uint64_t g;
        if (!u64map_get(w->rb_rec, i, &g)) continue;
        const trace_tensor *x = &trace_get(w->t, i)->u.alloc;
        plan_decision d;
        double alpha;
        decide(w, x, &d, &alpha);
        it[k].pl.tensor = x->id;
        it[k].pl.pass = w->groups[g].pass;
        it[k].pl.layer = w->groups[g].layer;
        it[k].pl.bytes = x->bytes;
        it[k].alpha = d == PD_SWAP ? alpha : 1.0;
        it[k].rec = i;
        k++;
    }
    qsort(it, k, sizeof *it, cmp_rb_layout);
    uint64_t off = 0;
    for (size_t j = 0; j < k; j++) {
        if (j == 0 || it[j].pl.pass != it[j - 1].pl.pass || it[j].pl.layer != it[j - 1].pl.layer)
            off = 0;
        it[j].pl.offset_bytes = off;
        off += it[j].pl.bytes;
        m->v[j] = it[j].pl;
    }
    m->n = k;
    free(it);
    qsort(m->v, m->n, sizeof *m->v, cmp_rb_id);
    return MS_OK;
}

ms_status lower_rb_map_new(const trace_t *t, const plan_t *p, lower_rb_map **out,
                           ms_error *err)
{
    *out = NULL;
    if (!t) return ms_fail(err, MS_ERR_INVALID, "lower: no trace");
    lower_rb_map *m = calloc(1, sizeof *m);
    lw w;
    memset(&w, 0, sizeof w);
    w.t = t;
    w.p = p;
    w.err = err;
    w.max_layer = t ? layer_bound(t) : LOWER_MAX_LAYER;
    lower_opts_default(&w.o);
    ms_status st = m ? MS_OK : nomem(&w);
    /* only the per-tensor lowering has rounding buffers */
    const lower_backend *b = p ? lower_find(p->lowering) : &lower_backend_tensor;
    int plain = b && b->rounding_buffers;
    if (st == MS_OK && plain) st = index_plan(&w);
    if (st == MS_OK && plain) st = read_knobs(&w);
    if (st == MS_OK && plain && w.rb) st = rb_prescan(&w);
    if (st == MS_OK && plain && w.rb) st = rb_layout(&w, m);
    lw_free(&w);
    if (st != MS_OK) {
        lower_rb_map_free(m);
        return st;
    }
    *out = m;
    return MS_OK;
}

void lower_rb_map_free(lower_rb_map *m)
{
    if (!m) return;
    free(m->v);
    free(m);
}

size_t lower_rb_map_count(const lower_rb_map *m) { return m ? m->n : 0; }

size_t lower_rb_find(const lower_rb_map *m, uint64_t tensor_id, lower_rb_place *out,
                     size_t max)
{
    if (!m) return 0;
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].tensor < tensor_id) lo = mid + 1;
        else hi = mid;
    }
    size_t k = 0;
    for (size_t j = lo; j < m->n && m->v[j].tensor == tensor_id; j++, k++)
        if (out && k < max) out[k] = m->v[j];
    return k;
}

/* lower_chunks.c — chunk-based lowering of lower_chunks.h: knobs, the chunk layout and the
 * block-granular access program of a trace, the buffer plan (which gather fills which
 * pre-allocated buffer, released by what), and the schedule itself. Rules and diagrams in
 * docs/PROTRAIN.md. Used by lower_schedule()'s hook, the ProTrain cost model and policies,
 * `memsim protrain` and tests. */
#define _POSIX_C_SOURCE 200809L
#include "planners/protrain/lower_chunks.h"
#include "planners/knob.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/sbuild.h"
#include "traces/roofline.h"
#include "base/u64map.h"

#define LC_CHUNK_SEARCH_MAX (UINT64_C(64) << 30) /* chunk_search knob, at most */
#define LC_MAX_BYTES_PER_PARAM 64 /* every bytes-per-parameter knob, at most */

/* ======================================================================== knobs */

static const char *const LC_CHUNK_BY[] = { "size", "layer", NULL };
static const char *const LC_COLLS[] = { "auto", "link", "compute", "stream", NULL };
static const int LC_COLL_VALS[] = { LC_COLL_AUTO, LC_COLL_LINK, LC_COLL_COMPUTE, LC_COLL_STREAM };
static const char *const LC_GATHERS[] = { "step", "next", "auto", NULL };
static const int LC_GATHER_VALS[] = { LC_PG_STEP, LC_PG_NEXT, LC_PG_AUTO };

/* A bytes-per-parameter figure: at most LC_MAX_BYTES_PER_PARAM. Beyond any training format
 * (fp64 parameters, gradients, master copy and both moments are 40), and the lowering cuts a
 * copy into pieces of one chunk, so an absurd figure would make millions of actions. */
#define LC_PER_PARAM(key, F, def, doc, src)                                                     \
    { key, KNOBTAB_DBL, offsetof(lc_knobs, F), def, 0, LC_MAX_BYTES_PER_PARAM, NULL, NULL,      \
      "bytes per parameter in [0, 64]", doc, src, 0 }
#define LC_INT(key, F, def, lo, doc) KNOB_INT(key, lc_knobs, F, def, lo, 1000000, doc, "")
#define LC_ENUM(key, F, def, names, vals, doc)                                                  \
    { key, KNOBTAB_ENUM, offsetof(lc_knobs, F), def, 0, 0, names, vals, NULL, doc, "", 0 }

/* The chunk lowering's knobs (lc_knobs in lower_chunks.h says what each does), in the order
 * they are checked. */
static const knobtab_row lc_rows[] = {
    LC_ENUM("chunk_by", chunk_by_layer, "size", LC_CHUNK_BY, NULL,
            "size: ProTrain's fixed-size chunks; layer: one chunk per parameter group"),
    LC_ENUM("coll", coll, "auto", LC_COLLS, LC_COLL_VALS,
            "collectives through host memory (link), as compute, or on a copy stream; auto: link "
            "without NVLink"),
    KNOB_BYTES("chunk_bytes", lc_knobs, chunk_bytes, "0", 0, HUGE_VAL,
               "chunk size S_chunk; 0: searched", "ProTrain §3.1"),
    KNOB_BYTES("chunk_search", lc_knobs, chunk_search_bytes, "64MiB", 0, HUGE_VAL,
               "range above the largest parameter the chunk-size search scans (at most 64GiB)", ""),
    LC_INT("n_persist", n_persist, "0", 0, "persistent chunks (kept on the GPU)"),
    LC_INT("n_buffer", n_buffer, "0", 0, "prefetch buffers for non-persistent chunks"),
    LC_INT("n_swap", n_swap, "0", 0, "blocks whose activations are swapped"),
    LC_INT("n_checkpoint", n_ckpt, "0", 0, "blocks checkpointed (recomputed)"),
    LC_PER_PARAM("host_bytes_per_param", host_bytes_per_param, "14",
                 "host bytes per parameter of a non-persistent chunk (fp32 master, Adam m, v, "
                 "fp16 copy)", "ProTrain §3.1"),
    LC_INT("host_pinned_tensors", host_pinned_tensors, "0", 0,
           "of those, pinned PyTorch tensors per chunk shard (rounded to a power of two)"),
    LC_PER_PARAM("host_pinned_bytes_per_param", host_pinned_bytes_per_param, "0",
                 "bytes per parameter of each pinned tensor", "FSDP"),
    LC_PER_PARAM("gpu_opt_bytes_per_param", gpu_opt_bytes_per_param, "12",
                 "optimizer state bytes per parameter of persistent chunks on the GPU", ""),
    LC_PER_PARAM("param_xfer_bytes", param_xfer_bytes, "2",
                 "bytes per parameter copied to the GPU to gather a chunk", ""),
    LC_PER_PARAM("grad_xfer_bytes", grad_xfer_bytes, "2",
                 "bytes per parameter of the gradient shard copied to the host", ""),
    KNOB_DBL("coll_link_eff", lc_knobs, coll_link_eff, "0.5", 1e-3, HUGE_VAL,
             "fraction of the link rate collectives through host memory reach (at most 1)",
             "assumed (to be measured)"),
    LC_INT("overlap_host_adam", overlap_host_adam, "1", 0,
           "1: a chunk's host Adam starts when its gradients are on the host"),
    LC_INT("persist_shard", persist_shard, "1", 0,
           "1: persistent chunks' optimizer states ZeRO-sharded over dp"),
    LC_ENUM("persist_gather", persist_gather, "step", LC_GATHERS, LC_GATHER_VALS,
            "persistent chunks all-gathered after their Adam (step) or in the next forward "
            "(next); auto: the cost model's pick (search only)"),
    LC_INT("staging_separate", staging_separate, "0", 0,
           "1: the pinned copy buffers come on top of host_bytes_per_param"),
    KNOB_DBL("host_adam_scale", lc_knobs, host_adam_scale, "1", 1e-6, HUGE_VAL,
             "multiplies host.adam_params_per_s", ""),
    LC_INT("step_sync", step_sync, "1", 0, "1: the step ends when the host Adam ends"),
    LC_INT("reuse", reuse_resident, "1", 0,
           "1: chunks resident after the forward are reused by the backward"),
    LC_INT("prefetch_depth", prefetch_depth, "0", -1,
           "access steps ahead a load may be issued; 0: as buffers allow; -1: on demand"),
    LC_INT("swap_lead", swap_lead, "0", 0, "blocks ahead a swapped block is prefetched"),
    KNOB_BYTES("init_device_bytes", lc_knobs, init_device_bytes, "0", 0, HUGE_VAL,
               "bytes allocated and freed on the GPU before training", ""),
};
const knobtab lc_knob_table = KNOBTAB("chunk lowering", lc_rows, KNOBTAB_MSG_PLAN, lc_knobs, given);

static const knobtab_row lc_marker_rows[] = {
    KNOB_FLAG("chunks", lc_marker, chunks, "0",
              "the chunk lowering's marker, 1 on every chunk-managed plan (set by the policy)", ""),
};
const knobtab lc_marker_table = KNOBTAB("chunk lowering", lc_marker_rows, KNOBTAB_MSG_PLAN,
                                        lc_marker, given);

void lc_knobs_default(lc_knobs *k)
{
    memset(k, 0, sizeof *k);
    knobtab_defaults(&lc_knob_table, k);
}

ms_status lc_knobs_from_plan(const plan_t *p, lc_knobs *k, ms_error *err)
{
    lc_knobs_default(k);
    if (!p) return MS_OK;
    lc_marker mk;
    ms_status st = knob_from_plan(&lc_marker_table, p, &mk, err);
    if (!st && mk.given && !mk.chunks)
        return ms_fail(err, MS_ERR_INVALID, "plan knob chunks=0: the chunk lowering's marker is "
                       "1 on every chunk-managed plan (leave it unset)");
    if (!st) st = knob_from_plan(&lc_knob_table, p, k, err);
    /* the chunk-size search packs once per MiB of its range: bound the work */
    if (!st && k->chunk_search_bytes > LC_CHUNK_SEARCH_MAX)
        return ms_fail(err, MS_ERR_INVALID, "plan knob chunk_search=%" PRIu64 ": at most 64GiB "
                       "(the search tries every MiB of the range)", k->chunk_search_bytes);
    if (!st && (k->host_pinned_tensors > 64 ||
                k->host_pinned_tensors * k->host_pinned_bytes_per_param >
                    k->host_bytes_per_param))
        st = ms_fail(err, MS_ERR_INVALID, "plan knobs host_pinned_tensors x "
                     "host_pinned_bytes_per_param (%d x %g) exceed host_bytes_per_param (%g)",
                     k->host_pinned_tensors, k->host_pinned_bytes_per_param,
                     k->host_bytes_per_param);
    if (!st && k->coll_link_eff > 1)
        st = ms_fail(err, MS_ERR_INVALID, "plan knob coll_link_eff=%g: expected at most 1",
                     k->coll_link_eff);
    return st;
}

static ms_status put_knob(plan_t *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ms_status put_knob(plan_t *p, const char *key, const char *fmt, ...)
{
    char buf[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return plan_set_knob(p, key, buf);
}

ms_status lc_knobs_to_plan(const lc_knobs *k, plan_t *p, ms_error *err)
{
    static const char *coll[] = {"auto", "link", "compute", "stream"};
    ms_status st = plan_set_lowering(p, "chunks");
    if (!st) st = put_knob(p, "chunks", "1");
    if (!st) st = put_knob(p, "chunk_by", "%s", k->chunk_by_layer ? "layer" : "size");
    if (!st) st = put_knob(p, "chunk_bytes", "%" PRIu64, k->chunk_bytes);
    if (!st) st = put_knob(p, "n_persist", "%d", k->n_persist);
    if (!st) st = put_knob(p, "n_buffer", "%d", k->n_buffer);
    if (!st) st = put_knob(p, "n_swap", "%d", k->n_swap);
    if (!st) st = put_knob(p, "n_checkpoint", "%d", k->n_ckpt);
    if (!st) st = put_knob(p, "host_bytes_per_param", "%g", k->host_bytes_per_param);
    if (!st && k->host_pinned_tensors) {
        st = put_knob(p, "host_pinned_tensors", "%d", k->host_pinned_tensors);
        if (!st)
            st = put_knob(p, "host_pinned_bytes_per_param", "%g",
                          k->host_pinned_bytes_per_param);
    }
    if (!st) st = put_knob(p, "gpu_opt_bytes_per_param", "%g", k->gpu_opt_bytes_per_param);
    if (!st) st = put_knob(p, "param_xfer_bytes", "%g", k->param_xfer_bytes);
    if (!st) st = put_knob(p, "grad_xfer_bytes", "%g", k->grad_xfer_bytes);
    if (!st) st = put_knob(p, "coll", "%s", coll[k->coll]);
    if (!st) st = put_knob(p, "coll_link_eff", "%g", k->coll_link_eff);
    if (!st) st = put_knob(p, "overlap_host_adam", "%d", k->overlap_host_adam);
    if (!st) st = put_knob(p, "persist_shard", "%d", k->persist_shard);
    if (!st) st = put_knob(p, "staging_separate", "%d", k->staging_separate);
    if (!st) st = put_knob(p, "host_adam_scale", "%g", k->host_adam_scale);
    if (!st) st = put_knob(p, "step_sync", "%d", k->step_sync);
    if (!st)
        st = put_knob(p, "persist_gather", "%s",
                      k->persist_gather == LC_PG_NEXT ? "next"
                      : k->persist_gather == LC_PG_AUTO ? "auto" : "step");
    if (!st) st = put_knob(p, "reuse", "%d", k->reuse_resident);
    if (!st) st = put_knob(p, "prefetch_depth", "%d", k->prefetch_depth);
    if (!st) st = put_knob(p, "swap_lead", "%d", k->swap_lead);
    if (!st && k->init_device_bytes)
        st = put_knob(p, "init_device_bytes", "%" PRIu64, k->init_device_bytes);
    if (st != MS_OK) return ms_fail(err, st, "cannot record the chunk knobs in the plan");
    return MS_OK;
}


/* ======================================================================== ids */

uint64_t lc_id(int kind, uint32_t index)
{
    return LC_ID_BASE | ((uint64_t)(kind & 0xff) << 40) | index;
}

int lc_id_parse(uint64_t id, int *kind, uint32_t *index)
{
    if ((id >> 61) != 1) return 0;
    if (kind) *kind = (int)((id >> 40) & 0xff);
    if (index) *index = (uint32_t)(id & 0xffffffffu);
    return 1;
}

/* ======================================================================== layout */

static int is_state_cls(trace_class c)
{
    return c == TC_PARAM || c == TC_GRAD || c == TC_OPTSTATE;
}

/* Packs params (bytes, in execution order) into chunks of capacity S. A run of parameters of
 * the same group (a transformer block: group >= 0) starts a new chunk when it does not fit in
 * what is left of the current one but fits in an empty one, so blocks are not split across
 * chunks (ProTrain hooks blocks; its Table 4 chunk counts, 12 for GPT2-1B and 49 for
 * GPT2-10B, come out of this rule). Fills cid (may be NULL); returns the chunk count and the
 * wasted bytes. */
static size_t pack(const uint64_t *bytes, const int32_t *group, size_t n, uint64_t S,
                   int32_t *cid, uint64_t *waste)
{
    size_t chunks = 0;
    uint64_t fill = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        int start = chunks == 0 || fill + bytes[i] > S;
        if (!start && group && group[i] >= 0 && (i == 0 || group[i - 1] != group[i])) {
            uint64_t run = 0; /* the whole group */
            for (size_t j = i; j < n && group[j] == group[i]; j++) run += bytes[j];
            start = fill + run > S && run <= S;
        }
        if (start) {
            if (chunks) w += S - fill;
            chunks++;
            fill = 0;
        }
        fill += bytes[i];
        if (cid) cid[i] = (int32_t)chunks - 1;
    }
    if (chunks) w += S - fill;
    *waste = w;
    return chunks;
}

uint64_t lc_chunk_search(const uint64_t *param_bytes, const int32_t *group, size_t n,
                         uint64_t range_bytes)
{
    uint64_t mx = 0;
    for (size_t i = 0; i < n; i++)
        if (param_bytes[i] > mx) mx = param_bytes[i];
    if (!mx) return 0;
    const uint64_t step = UINT64_C(1) << 20;
    uint64_t lo = (mx + step - 1) / step * step; /* chunks are whole MiB */
    uint64_t best = lo, best_w = UINT64_MAX;
    for (uint64_t S = lo; S <= lo + range_bytes; S += step) {
        uint64_t w;
        pack(param_bytes, group, n, S, NULL, &w);
        if (w < best_w) {
            best_w = w;
            best = S;
        }
    }
    return best;
}

ms_status lc_block_roles(int n_blocks, int n_swap, int n_ckpt, uint8_t *roles, ms_error *err)
{
    if (n_blocks < 0 || n_swap < 0 || n_ckpt < 0 || n_swap + n_ckpt > n_blocks)
        return ms_fail(err, MS_ERR_INVALID,
                       "n_swap=%d + n_checkpoint=%d exceeds the %d transformer blocks", n_swap,
                       n_ckpt, n_blocks);
    int R = n_swap + n_ckpt;
    for (int j = 0; j < n_blocks; j++) roles[j] = j < R ? LC_CKPT : LC_NONE;
    /* swap blocks at floor(i * R / n_swap): block 0 first, spread evenly so that the
     * checkpoint blocks between them give each swap-out time to drain (ProTrain Fig. 2) */
    for (int i = 0; i < n_swap; i++) roles[(int)((int64_t)i * R / n_swap)] = LC_SWAP;
    return MS_OK;
}

void lc_swap_issue(const uint8_t *roles, int n_blocks, int lead, int32_t *at)
{
    int above = n_blocks; /* the next swapped block above, or the first unmanaged block */
    while (above > 0 && roles[above - 1] == LC_NONE) above--;
    for (int k = n_blocks - 1; k >= 0; k--) {
        at[k] = -1;
        if (roles[k] != LC_SWAP) continue;
        int p = lead > 0 ? k + lead : above - 1;
        if (p < k + 1) p = k + 1;
        at[k] = p < n_blocks ? p : n_blocks;
        above = k;
    }
}

/* Workspace of the layout builder. */
typedef struct lb {
    const trace_t *t;
    const machine_t *m;
    const lc_knobs *k;
    lc_layout *L;
    roof_params roof;
    u64map *state;      /* model-state tensor id -> class */
    u64map *pchunk;     /* param id -> chunk */
    u64map *gchunk;     /* grad id -> lo | hi << 32 (chunk range), absent: none */
    u64map *ingrad;     /* ids of the gradients allocated inside an iteration */
    size_t first_iter;  /* record index of the first `mark iter` */
    size_t end_iter;    /* one past iteration 0 */
} lb;

static ms_status op_dur(const machine_t *m, const roof_params *rp, const trace_op *op,
                        double *us, ms_error *err)
{
    *us = roof_op_us(m, rp, op);
    if (*us < 0)
        return ms_fail(err, MS_ERR_INVALID, "trace op %" PRIu64 " (%s) has no duration%s",
                       op->id, op->name, m ? " (a collective needs one)" : " and no machine");
    return MS_OK;
}

/* An op lowering leaves out: the optimizer phase (replaced by chunk Adam), and ops touching
 * only model states (zero_grad, the data-parallel reduce-scatter / all-gather of the trace,
 * replaced by the chunk collectives). */
static int op_skipped(const u64map *state, const trace_op *op, trace_phase ph)
{
    if (ph == TP_OPT || op->phase == TP_OPT) return 1;
    if (op->n_in + op->n_out == 0) return 0;
    for (uint32_t i = 0; i < op->n_in; i++)
        if (!u64map_get(state, op->in[i], NULL)) return 0;
    for (uint32_t i = 0; i < op->n_out; i++)
        if (!u64map_get(state, op->out[i], NULL)) return 0;
    return 1;
}

static int name_has_prefix(const char *name, const char *prefix, size_t n)
{
    return strncmp(name, prefix, n) == 0 && name[n] == '.';
}

#define LC_CAST_CLS 0xffu /* b->state's value for a parameter cast (not a class) */

int lc_managed(const lc_layout *L, const trace_tensor *x)
{
    return is_state_cls(x->cls) || (L && L->managed && u64map_get(L->managed, x->id, NULL));
}

/* The bytes parameter x takes in a chunk: the trace's, or under autocast over fp32
 * parameters (meta precision amp) its share in the compute dtype — the chunk manager keeps
 * the parameters in bf16 on the GPU and the fp32 masters with the optimizer states on the
 * host, as ZeRO-3, Gemini, FSDP's mixed precision and ProTrain do. */
static uint64_t chunk_param_bytes(const lc_layout *L, const trace_tensor *x)
{
    int from = L->param_bytes_per_param, to = L->dtype_bytes;
    if (from <= to || x->bytes % (uint64_t)from) return x->bytes;
    return x->bytes / (uint64_t)from * (uint64_t)to;
}

/* Whether grad g (of the layout's list) was allocated inside an iteration. */
static int is_in_iter(const lb *b, const trace_tensor *g)
{
    return u64map_get(b->ingrad, g->id, NULL);
}

/* Marks the tensors the chunk manager takes over beyond the state classes (lc_managed):
 * the outputs of a forward op that reads only parameters (a cast of them: it reads the
 * chunk instead, so uses of the cast need the parameter's chunk) and what the optimizer
 * phase allocates (chunk Adam replaces that phase). Over every iteration. */
static ms_status lb_casts(lb *b)
{
    size_t n = trace_count(b->t);
    trace_phase ph = TP_NONE;
    for (size_t i = 0; i < n; i++) {
        const trace_rec *r = trace_get(b->t, i);
        if (r->type == TR_MARK) {
            if (r->u.mark.kind == TM_PHASE) ph = (trace_phase)r->u.mark.value;
            else if (r->u.mark.kind == TM_ITER) ph = TP_NONE;
            continue;
        }
        if (r->type == TR_ALLOC && ph == TP_OPT && i > b->first_iter &&
            !is_state_cls(r->u.alloc.cls)) {
            if (u64map_put(b->L->managed, r->u.alloc.id, 1) ||
                u64map_put(b->state, r->u.alloc.id, LC_CAST_CLS))
                return MS_ERR_NOMEM;
            continue;
        }
        if (r->type != TR_OP || ph != TP_FWD || r->u.op.phase != TP_FWD) continue;
        const trace_op *op = &r->u.op;
        if (op->n_in == 0 || op->n_out == 0) continue;
        int cast = 1;
        uint64_t v, c = 0;
        for (uint32_t q = 0; q < op->n_in && cast; q++)
            cast = u64map_get(b->state, op->in[q], &v) && v == TC_PARAM;
        for (uint32_t q = 0; q < op->n_out && cast; q++)
            cast = !u64map_get(b->state, op->out[q], NULL);
        if (!cast || !u64map_get(b->pchunk, op->in[0], &c)) continue;
        for (uint32_t q = 0; q < op->n_out; q++)
            if (u64map_put(b->L->managed, op->out[q], 1) ||
                u64map_put(b->state, op->out[q], LC_CAST_CLS) ||
                u64map_put(b->pchunk, op->out[q], c))
                return MS_ERR_NOMEM;
    }
    return MS_OK;
}

/* The chunks a gradient the backward makes belongs to when its name does not say: a block's
 * gradient, the block's chunks; outside the blocks (embedding, final norm, head), the
 * chunks of the parameters (or their casts) that iteration 0's forward ops of the kind of
 * the gradient's producer read outside the blocks. None found: *lo stays -1 (the gradient
 * is still chunk-managed; it only adds no chunk to its step). */
static void lb_grad_owner(const lb *b, const trace_tensor *g, int32_t *lo, int32_t *hi)
{
    const lc_layout *L = b->L;
    if (g->layer >= 0) {
        if (g->layer < L->n_blocks && L->block_chunk_lo[g->layer] >= 0) {
            *lo = L->block_chunk_lo[g->layer];
            *hi = L->block_chunk_hi[g->layer];
        }
        return;
    }
    int kind = -1;
    for (size_t i = b->first_iter; i < b->end_iter && kind < 0; i++) {
        const trace_rec *r = trace_get(b->t, i);
        if (r->type == TR_OP && (int64_t)r->u.op.id == g->producer) kind = (int)r->u.op.kind;
    }
    if (kind < 0) return;
    for (size_t i = b->first_iter; i < b->end_iter; i++) {
        const trace_rec *r = trace_get(b->t, i);
        if (r->type != TR_OP || r->u.op.phase != TP_FWD || (int)r->u.op.kind != kind ||
            r->u.op.layer >= 0)
            continue;
        for (uint32_t q = 0; q < r->u.op.n_in; q++) {
            uint64_t c;
            if (!u64map_get(b->pchunk, r->u.op.in[q], &c)) continue;
            if (*lo < 0 || (int32_t)c < *lo) *lo = (int32_t)c;
            if ((int32_t)c > *hi) *hi = (int32_t)c;
        }
    }
}

/* Collects parameters and gradients of the setup and the execution order of parameters
 * (first use in iteration 0's forward), then packs chunks. */
static ms_status lb_params(lb *b, ms_error *err)
{
    const trace_t *t = b->t;
    size_t n = trace_count(t), np = 0, cap = 0, ng = 0, gcap = 0;
    const trace_tensor **ps = NULL, **gs = NULL;
    ms_status st = MS_OK;
    b->first_iter = b->end_iter = SIZE_MAX;
    for (size_t i = 0; i < n && st == MS_OK; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            if (b->first_iter == SIZE_MAX) b->first_iter = i;
            else if (b->end_iter == SIZE_MAX) b->end_iter = i;
        }
        if (r->type != TR_ALLOC || !is_state_cls(r->u.alloc.cls)) continue;
        if (b->first_iter != SIZE_MAX && r->u.alloc.cls == TC_PARAM) {
            st = ms_fail(err, MS_ERR_INVALID,
                         "trace record %zu: parameter '%s' is allocated inside an iteration "
                         "(a ZeRO-3 gather?); chunk lowering needs every parameter allocated "
                         "before the first `mark iter` (gradients and optimizer states may be "
                         "allocated inside)", i, r->u.alloc.name);
            break;
        }
        /* gradients made by the backward and optimizer states made at the first step
         * (PyTorch eager) are chunk-managed like those of the setup */
        if (u64map_put(b->state, r->u.alloc.id, r->u.alloc.cls)) st = MS_ERR_NOMEM;
        if (r->u.alloc.cls == TC_PARAM) {
            if (ms_grow((void **)&ps, &cap, np + 1, sizeof *ps)) st = MS_ERR_NOMEM;
            else ps[np++] = &r->u.alloc;
        } else if (r->u.alloc.cls == TC_GRAD && b->end_iter == SIZE_MAX) {
            if (ms_grow((void **)&gs, &gcap, ng + 1, sizeof *gs)) st = MS_ERR_NOMEM;
            else gs[ng++] = &r->u.alloc;
            if (st == MS_OK && b->first_iter != SIZE_MAX &&
                u64map_put(b->ingrad, r->u.alloc.id, 1))
                st = MS_ERR_NOMEM;
        }
    }
    if (st == MS_OK && b->first_iter == SIZE_MAX)
        st = ms_fail(err, MS_ERR_INVALID, "the trace has no `mark iter`: nothing to lower");
    if (st == MS_OK && np == 0)
        st = ms_fail(err, MS_ERR_INVALID, "the trace allocates no parameters: no chunks to make");
    if (b->end_iter == SIZE_MAX) b->end_iter = n;
    /* execution order: first use in iteration 0's forward, then the unused in alloc order */
    size_t *order = NULL, no = 0;
    uint8_t *seen = NULL;
    u64map *pidx = NULL;
    if (st == MS_OK) {
        order = malloc(np * sizeof *order);
        seen = calloc(np, 1);
        pidx = u64map_new(np * 2 + 8);
        if (!order || !seen || !pidx) st = MS_ERR_NOMEM;
    }
    for (size_t i = 0; st == MS_OK && i < np; i++)
        if (u64map_put(pidx, ps[i]->id, i)) st = MS_ERR_NOMEM;
    /* a parameter's block: its layer, or where the forward first reads it (a trace that
     * leaves parameters' layers unset), or its L<layer>.<what> name */
    int32_t *blk = st == MS_OK ? malloc((np ? np : 1) * sizeof *blk) : NULL;
    if (st == MS_OK && !blk) st = MS_ERR_NOMEM;
    for (size_t i = 0; st == MS_OK && i < np; i++) {
        int named;
        blk[i] = ps[i]->layer;
        if (blk[i] < 0 && sscanf(ps[i]->name, "L%d.", &named) == 1 && named >= 0 &&
            named < b->L->n_blocks)
            blk[i] = named;
    }
    trace_phase ph = TP_NONE;
    int32_t cur_blk = -1;
    for (size_t i = b->first_iter; st == MS_OK && i < b->end_iter; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) ph = (trace_phase)r->u.mark.value;
        if (r->type == TR_MARK && r->u.mark.kind == TM_LAYER)
            cur_blk = r->u.mark.value >= 0 && r->u.mark.value < b->L->n_blocks
                          ? (int32_t)r->u.mark.value : -1;
        if (r->type != TR_OP || ph != TP_FWD) continue;
        for (uint32_t j = 0; j < r->u.op.n_in; j++) {
            uint64_t x;
            if (u64map_get(pidx, r->u.op.in[j], &x) && !seen[x]) {
                seen[x] = 1;
                order[no++] = x;
                if (ps[x]->layer < 0 && cur_blk >= 0) blk[x] = cur_blk;
            }
        }
    }
    for (size_t i = 0; st == MS_OK && i < np; i++)
        if (!seen[i]) order[no++] = i;
    /* chunking */
    lc_layout *L = b->L;
    uint64_t *bytes = st == MS_OK ? malloc(np * sizeof *bytes) : NULL;
    if (st == MS_OK && !bytes) st = MS_ERR_NOMEM;
    for (size_t i = 0; st == MS_OK && i < np; i++) {
        const trace_tensor *x = ps[order[i]];
        bytes[i] = chunk_param_bytes(L, x);
        L->param_bytes += bytes[i];
        if (bytes[i] > L->max_param_bytes) {
            L->max_param_bytes = bytes[i];
            snprintf(L->max_param_name, sizeof L->max_param_name, "%s", x->name);
        }
    }
    int32_t *cid = st == MS_OK ? malloc(np * sizeof *cid) : NULL;
    int32_t *grp = st == MS_OK ? malloc(np * sizeof *grp) : NULL;
    if (st == MS_OK && (!cid || !grp)) st = MS_ERR_NOMEM;
    for (size_t i = 0; st == MS_OK && i < np; i++) grp[i] = blk[order[i]];
    if (st == MS_OK && b->k->chunk_by_layer) {
        /* one chunk per run of parameters of the same layer in execution order */
        uint64_t mx = 0, fill = 0;
        int32_t c = -1, prev_layer = INT32_MIN;
        for (size_t i = 0; i < np; i++) {
            int32_t ly = blk[order[i]];
            if (c < 0 || ly != prev_layer) {
                c++;
                fill = 0;
            }
            prev_layer = ly;
            fill += bytes[i];
            if (fill > mx) mx = fill;
            cid[i] = c;
        }
        L->chunk_bytes = b->k->chunk_bytes > mx ? b->k->chunk_bytes : mx;
    } else if (st == MS_OK) {
        uint64_t S = b->k->chunk_bytes
                         ? b->k->chunk_bytes
                         : lc_chunk_search(bytes, grp, np, b->k->chunk_search_bytes);
        if (S < L->max_param_bytes) {
            char b1[32], b2[32];
            st = ms_fail(err, MS_ERR_INVALID,
                         "chunk size %s is smaller than the largest parameter '%s' (%s): no "
                         "chunk can hold it (raise chunk_bytes, or leave it 0 to search)",
                         ms_fmt_bytes(S, b1, sizeof b1), L->max_param_name,
                         ms_fmt_bytes(L->max_param_bytes, b2, sizeof b2));
        } else {
            L->chunk_bytes = S;
            uint64_t w;
            pack(bytes, grp, np, S, cid, &w);
        }
    }
    if (st == MS_OK) {
        L->n_chunks = (size_t)cid[np - 1] + 1;
        L->chunks = calloc(L->n_chunks, sizeof *L->chunks);
        if (!L->chunks) st = MS_ERR_NOMEM;
    }
    uint64_t D = (uint64_t)L->dtype_bytes;
    for (size_t i = 0; st == MS_OK && i < np; i++) {
        const trace_tensor *x = ps[order[i]];
        lc_chunk *C = &L->chunks[cid[i]];
        C->used_bytes += bytes[i];
        C->params += (bytes[i] + D - 1) / D;
        L->params += (bytes[i] + D - 1) / D;
        if (u64map_put(b->pchunk, x->id, (uint64_t)cid[i])) st = MS_ERR_NOMEM;
        int32_t ly = blk[order[i]];
        if (st == MS_OK && ly >= 0 && ly < L->n_blocks) {
            if (L->block_chunk_lo[ly] < 0 || cid[i] < L->block_chunk_lo[ly])
                L->block_chunk_lo[ly] = cid[i];
            if (cid[i] > L->block_chunk_hi[ly]) L->block_chunk_hi[ly] = cid[i];
        }
    }
    if (st == MS_OK) st = lb_casts(b);
    /* gradient buffers: "X.grad" belongs to the chunks of the parameters named "X.*" (or,
     * for a gradient the backward makes, of the parameter "X" itself); a gradient the
     * backward makes without such a name goes by its layer (lb_grad_owner) */
    for (size_t g = 0; st == MS_OK && g < ng; g++) {
        const char *nm = gs[g]->name, *dot = strstr(nm, ".grad");
        int inside = is_in_iter(b, gs[g]);
        int32_t lo = -1, hi = -1;
        if (dot) {
            size_t plen = (size_t)(dot - nm);
            for (size_t i = 0; i < np; i++)
                if (name_has_prefix(ps[order[i]]->name, nm, plen) ||
                    (inside && strlen(ps[order[i]]->name) == plen &&
                     strncmp(ps[order[i]]->name, nm, plen) == 0)) {
                    if (lo < 0 || cid[i] < lo) lo = cid[i];
                    if (cid[i] > hi) hi = cid[i];
                }
        }
        if (lo < 0 && inside) lb_grad_owner(b, gs[g], &lo, &hi);
        if (lo >= 0 && u64map_put(b->gchunk, gs[g]->id, (uint64_t)lo | ((uint64_t)hi << 32)))
            st = MS_ERR_NOMEM;
    }
    if (st == MS_ERR_NOMEM) ms_fail(err, st, "out of memory");
    free(ps);
    free(gs);
    free(order);
    free(seen);
    free(bytes);
    free(cid);
    free(grp);
    free(blk);
    u64map_free(pidx);
    return st;
}

static ms_status add_need(lc_layout *L, size_t *cap, uint32_t c)
{
    lc_step *s = &L->steps[L->n_steps - 1];
    for (uint32_t i = 0; i < s->n_need; i++)
        if (L->needs[s->need_first + i] == c) return MS_OK;
    if (ms_grow((void **)&L->needs, cap, L->n_needs + 1, sizeof *L->needs)) return MS_ERR_NOMEM;
    /* keep sorted */
    size_t pos = L->n_needs;
    while (pos > s->need_first && L->needs[pos - 1] > c) {
        L->needs[pos] = L->needs[pos - 1];
        pos--;
    }
    L->needs[pos] = c;
    L->n_needs++;
    s->n_need++;
    return MS_OK;
}

static ms_status open_step(lc_layout *L, size_t *cap, trace_phase ph, int32_t block)
{
    if (ms_grow((void **)&L->steps, cap, L->n_steps + 1, sizeof *L->steps)) return MS_ERR_NOMEM;
    lc_step *s = &L->steps[L->n_steps++];
    memset(s, 0, sizeof *s);
    s->phase = ph;
    s->block = block;
    s->need_first = (uint32_t)L->n_needs;
    if (block >= 0 && block < L->n_blocks) {
        int32_t *slot = ph == TP_FWD ? &L->fwd_step[block] : &L->bwd_step[block];
        if (*slot < 0) *slot = (int32_t)(L->n_steps - 1);
    }
    return MS_OK;
}

/* The access program of iteration 0: one step per segment of the forward and backward. */
static ms_status lb_steps(lb *b, ms_error *err)
{
    lc_layout *L = b->L;
    size_t scap = 0, ncap = 0;
    trace_phase ph = TP_NONE;
    int in_step = 0, passes = 0;
    double opt_us = 0;
    for (size_t i = b->first_iter; i < b->end_iter; i++) {
        const trace_rec *r = trace_get(b->t, i);
        if (r->type == TR_MARK) {
            const trace_mark *mk = &r->u.mark;
            in_step = 0;
            if (mk->kind == TM_PHASE) {
                ph = (trace_phase)mk->value;
                if (ph == TP_FWD && ++passes > 1)
                    return ms_fail(err, MS_ERR_UNSUPPORTED,
                                   "trace record %zu: a second forward pass in one iteration "
                                   "(gradient accumulation) is not supported by chunk lowering",
                                   i);
            }
            if ((ph == TP_FWD || ph == TP_BWD) &&
                (mk->kind == TM_PHASE || mk->kind == TM_LAYER)) {
                int32_t blk = mk->kind == TM_LAYER ? (int32_t)mk->value : -1;
                if (open_step(L, &scap, ph, blk))
                    return ms_fail(err, MS_ERR_NOMEM, "out of memory");
                in_step = 1;
            }
            continue;
        }
        if (r->type != TR_OP) continue;
        const trace_op *op = &r->u.op;
        if (op_skipped(b->state, op, ph)) {
            if (op->kind == TK_OPTIM) {
                double us;
                ms_status st = op_dur(b->m, &b->roof, op, &us, err);
                if (st != MS_OK) return st;
                opt_us += us;
            }
            continue;
        }
        if (!in_step)
            return ms_fail(err, MS_ERR_INVALID,
                           "trace record %zu: op %" PRIu64 " (%s) is outside the forward and "
                           "backward phases", i, op->id, op->name);
        double us;
        ms_status st = op_dur(b->m, &b->roof, op, &us, err);
        if (st != MS_OK) return st;
        lc_step *s = &L->steps[L->n_steps - 1];
        s->compute_us += us;
        if (ph == TP_FWD) L->fwd_us += us;
        else L->bwd_us += us;
        for (uint32_t j = 0; j < op->n_in + op->n_out; j++) {
            uint64_t id = j < op->n_in ? op->in[j] : op->out[j - op->n_in], v;
            if (u64map_get(b->pchunk, id, &v)) {
                if (add_need(L, &ncap, (uint32_t)v)) return ms_fail(err, MS_ERR_NOMEM, "oom");
            } else if (u64map_get(b->gchunk, id, &v)) {
                for (uint32_t c = (uint32_t)v; c <= (uint32_t)(v >> 32); c++)
                    if (add_need(L, &ncap, c)) return ms_fail(err, MS_ERR_NOMEM, "oom");
            }
        }
    }
    if (passes == 0)
        return ms_fail(err, MS_ERR_INVALID, "iteration 0 of the trace has no forward phase");
    uint64_t shard = (L->params + (uint64_t)L->dp - 1) / (uint64_t)L->dp;
    if (opt_us > 0 && shard) L->adam_gpu_us_per_param = opt_us / (double)shard;
    else if (b->m) /* no optimizer ops: a memory-bound Adam of 16 bytes read + 14 written */
        L->adam_gpu_us_per_param =
            roof_kernel_us(b->m, &b->roof, TK_OPTIM, 12.0 * 1e6, 30 * 1000000) / 1e6;
    return MS_OK;
}

ms_status lc_layout_new(const trace_t *t, const machine_t *m, const lc_knobs *k,
                        lc_layout **out, ms_error *err)
{
    *out = NULL;
    if (!t) return ms_fail(err, MS_ERR_INVALID, "no trace");
    static const char *modes[] = {"zero3", "offload", "lora_rank"};
    for (size_t i = 0; i < 3; i++)
        if (trace_get_meta(t, modes[i]))
            return ms_fail(err, MS_ERR_INVALID,
                           "chunk lowering needs a plain trace (meta %s found: the chunk manager "
                           "itself does the sharding and offloading; generate the workload "
                           "without --gen %s)", modes[i],
                           i == 2 ? "lora" : modes[i]);
    lc_layout *L = calloc(1, sizeof *L);
    if (!L) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    uint64_t dp = trace_meta_u64(t, "dp", 1), db = trace_meta_u64(t, "dtype_bytes", 2);
    L->dp = dp >= 1 && dp <= (1u << 20) ? (int)dp : 1;
    L->dtype_bytes = db >= 1 && db <= 64 ? (int)db : 2;
    /* autocast over fp32 parameters (traces/FORMAT.md: meta precision amp) */
    const char *prec = trace_get_meta(t, "precision");
    L->param_bytes_per_param = prec && strcmp(prec, "amp") == 0 ? 4 : L->dtype_bytes;
    uint64_t blocks = trace_meta_u64(t, "layers", 0);
    L->n_blocks = blocks <= 100000 ? (int)blocks : 0;
    if (L->n_blocks <= 0) {
        lc_layout_free(L);
        return ms_fail(err, MS_ERR_INVALID, "the trace has no `meta layers`: its transformer blocks "
                           "are unknown, so its model states cannot be chunked (an "
                           "allocator-only trace, such as memsim trace import makes?)");
    }
    L->fwd_step = malloc((size_t)L->n_blocks * sizeof *L->fwd_step);
    L->bwd_step = malloc((size_t)L->n_blocks * sizeof *L->bwd_step);
    L->block_chunk_lo = malloc((size_t)L->n_blocks * sizeof *L->block_chunk_lo);
    L->block_chunk_hi = malloc((size_t)L->n_blocks * sizeof *L->block_chunk_hi);
    lb b = {.t = t, .m = m, .k = k, .L = L};
    roof_params_default(&b.roof);
    b.state = u64map_new(1024);
    b.pchunk = u64map_new(1024);
    b.gchunk = u64map_new(256);
    b.ingrad = u64map_new(256);
    L->managed = u64map_new(256);
    ms_status st = MS_OK;
    if (!L->fwd_step || !L->bwd_step || !L->block_chunk_lo || !L->block_chunk_hi || !b.state ||
        !b.pchunk || !b.gchunk || !b.ingrad || !L->managed)
        st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (int j = 0; st == MS_OK && j < L->n_blocks; j++)
        L->fwd_step[j] = L->bwd_step[j] = L->block_chunk_lo[j] = L->block_chunk_hi[j] = -1;
    if (st == MS_OK) st = lb_params(&b, err);
    if (st == MS_OK) st = lb_steps(&b, err);
    u64map_free(b.state);
    u64map_free(b.pchunk);
    u64map_free(b.gchunk);
    u64map_free(b.ingrad);
    if (st == MS_OK) { /* the first step that needs each chunk */
        L->first_use = malloc((L->n_chunks + 1) * sizeof *L->first_use);
        if (!L->first_use) st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
        for (size_t c = 0; st == MS_OK && c <= L->n_chunks; c++) L->first_use[c] = -1;
        for (size_t i = L->n_steps; st == MS_OK && i-- > 0;)
            for (uint32_t q = 0; q < L->steps[i].n_need; q++)
                L->first_use[L->needs[L->steps[i].need_first + q]] = (int32_t)i;
    }
    if (st != MS_OK) {
        lc_layout_free(L);
        return st;
    }
    *out = L;
    return MS_OK;
}

void lc_layout_free(lc_layout *L)
{
    if (!L) return;
    free(L->chunks);
    free(L->steps);
    free(L->needs);
    free(L->fwd_step);
    free(L->bwd_step);
    free(L->block_chunk_lo);
    free(L->block_chunk_hi);
    free(L->first_use);
    u64map_free(L->managed);
    free(L);
}

/* ======================================================================== buffer plan */

void lc_bufplan_clear(lc_bufplan *bp)
{
    if (!bp) return;
    free(bp->loads);
    free(bp->last_step);
    free(bp->chunk_buffer);
    memset(bp, 0, sizeof *bp);
}

/* Per chunk, the steps that need it (CSR), for next-use queries by binary search. */
typedef struct acc_index {
    uint32_t *off;   /* n_chunks + 1 */
    int32_t *steps;
} acc_index;

static int acc_build(const lc_layout *L, acc_index *A)
{
    A->off = calloc(L->n_chunks + 1, sizeof *A->off);
    A->steps = malloc((L->n_needs ? L->n_needs : 1) * sizeof *A->steps);
    if (!A->off || !A->steps) return -1;
    for (size_t i = 0; i < L->n_needs; i++) A->off[L->needs[i] + 1]++;
    for (size_t c = 0; c < L->n_chunks; c++) A->off[c + 1] += A->off[c];
    uint32_t *fill = calloc(L->n_chunks + 1, sizeof *fill);
    if (!fill) return -1;
    for (size_t s = 0; s < L->n_steps; s++) { /* steps in order: each list comes out sorted */
        const lc_step *S = &L->steps[s];
        for (uint32_t j = 0; j < S->n_need; j++) {
            uint32_t c = L->needs[S->need_first + j];
            A->steps[A->off[c] + fill[c]++] = (int32_t)s;
        }
    }
    free(fill);
    return 0;
}

static void acc_free(acc_index *A)
{
    free(A->off);
    free(A->steps);
}

/* Next step after s that needs chunk c (INT32_MAX: none). */
static int32_t next_use(const acc_index *A, uint32_t c, int32_t s)
{
    uint32_t lo = A->off[c], hi = A->off[c + 1];
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (A->steps[mid] <= s) lo = mid + 1;
        else hi = mid;
    }
    return lo < A->off[c + 1] ? A->steps[lo] : INT32_MAX;
}

static int step_needs(const lc_layout *L, int32_t s, int32_t c)
{
    const lc_step *st = &L->steps[s];
    for (uint32_t j = 0; j < st->n_need; j++)
        if ((int32_t)L->needs[st->need_first + j] == c) return 1;
    return 0;
}

ms_status lc_bufplan_make(const lc_layout *L, int n_persist, int n_buffer, const lc_knobs *k,
                          lc_bufplan *bp, ms_error *err)
{
    memset(bp, 0, sizeof *bp);
    size_t N = L->n_chunks, cap = 0;
    if (n_persist < 0 || (size_t)n_persist > N || n_buffer < 0)
        return ms_fail(err, MS_ERR_INVALID, "n_persist=%d is not in [0, %zu] chunks", n_persist,
                       N);
    bp->last_step = malloc(N * sizeof *bp->last_step);
    bp->chunk_buffer = malloc(N * sizeof *bp->chunk_buffer);
    int32_t *first_bwd = malloc(N * sizeof *first_bwd);
    int32_t *in_buf = malloc(N * sizeof *in_buf);
    size_t nb1 = (size_t)n_buffer + 1;
    int32_t *occ = malloc(nb1 * sizeof *occ);      /* chunk whose data the buffer holds */
    int32_t *blast = malloc(nb1 * sizeof *blast);  /* last step that used that data */
    uint8_t *bdone = calloc(nb1, 1);               /* that chunk's gradients are final */
    acc_index A = {0};
    ms_status st = MS_OK;
    if (!bp->last_step || !bp->chunk_buffer || !first_bwd || !in_buf || !occ || !blast ||
        !bdone || acc_build(L, &A))
        st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t c = 0; st == MS_OK && c < N; c++) {
        bp->last_step[c] = first_bwd[c] = -1;
        bp->chunk_buffer[c] = in_buf[c] = -1;
    }
    for (int b = 0; st == MS_OK && b < n_buffer; b++) occ[b] = blast[b] = -1;
    for (size_t s = 0; st == MS_OK && s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        for (uint32_t j = 0; j < S->n_need; j++) {
            uint32_t c = L->needs[S->need_first + j];
            bp->last_step[c] = (int32_t)s;
            if (S->phase == TP_BWD && first_bwd[c] < 0) first_bwd[c] = (int32_t)s;
        }
    }
    int32_t prev_emit = -1;
    int in_bwd = 0;
    for (size_t s = 0; st == MS_OK && s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        int32_t si = (int32_t)s;
        if (S->phase == TP_BWD && !in_bwd) {
            in_bwd = 1;
            if (!k->reuse_resident) /* resharded after forward: resident chunks are stale */
                for (int b = 0; b < n_buffer; b++)
                    if (occ[b] >= 0) in_buf[occ[b]] = -1;
        }
        for (uint32_t j = 0; j < S->n_need && st == MS_OK; j++) {
            int32_t c = (int32_t)L->needs[S->need_first + j];
            if (c < n_persist || in_buf[c] >= 0) continue;
            /* choose a buffer: an empty one, else the evictable one whose data is used
             * farthest ahead (stale or finished data: never again); among equals the one
             * whose data was used longest ago, which is released first (in the backward
             * every resident chunk is finished, and taking the most recent one would make
             * each gather wait for the gradient offload of the step just done) */
            int best = -1;
            int32_t best_next = -1;
            for (int b = 0; b < n_buffer; b++) {
                int32_t o = occ[b];
                if (o < 0) {
                    best = b;
                    break;
                }
                int32_t nx = INT32_MAX;
                if (in_buf[o] == b && !bdone[b]) {
                    if (step_needs(L, si, o)) continue;
                    /* pinned: its backward began and is not over (partial gradients) */
                    if (first_bwd[o] >= 0 && first_bwd[o] < si && bp->last_step[o] >= si)
                        continue;
                    nx = next_use(&A, (uint32_t)o, si - 1);
                }
                if (nx > best_next || (nx == best_next && blast[b] < blast[best])) {
                    best_next = nx;
                    best = b;
                }
            }
            if (best < 0) {
                st = ms_fail(err, MS_ERR_INVALID,
                             "n_buffer=%d is too small: step %zu (%s, block %d) needs chunk %d "
                             "but every buffer holds a chunk in use", n_buffer, s,
                             trace_phase_name(S->phase), S->block, c);
                break;
            }
            lc_load ld = {.step = si, .chunk = c, .buffer = best};
            int32_t o = occ[best];
            if (o < 0) {
                ld.rel_kind = LC_REL_ITER;
                ld.rel_ref = -1;
                ld.emit_after = -1;
            } else if (bdone[best]) {
                ld.rel_kind = LC_REL_OFFLOAD; /* its gradients must reach the host first */
                ld.rel_ref = o;
                ld.emit_after = bp->last_step[o];
            } else {
                ld.rel_kind = LC_REL_STEP;
                ld.rel_ref = blast[best];
                ld.emit_after = blast[best];
            }
            if (k->prefetch_depth > 0 && ld.emit_after < si - k->prefetch_depth - 1)
                ld.emit_after = si - k->prefetch_depth - 1;
            if (k->prefetch_depth < 0 && ld.emit_after < si - 1) /* on demand, no prefetch */
                ld.emit_after = si - 1;
            if (ld.emit_after < prev_emit) ld.emit_after = prev_emit;
            prev_emit = ld.emit_after;
            if (o >= 0 && in_buf[o] == best) in_buf[o] = -1;
            occ[best] = c;
            bdone[best] = 0;
            in_buf[c] = best;
            if (ms_grow((void **)&bp->loads, &cap, bp->n_loads + 1, sizeof *bp->loads)) {
                st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
                break;
            }
            bp->loads[bp->n_loads++] = ld;
        }
        for (uint32_t j = 0; st == MS_OK && j < S->n_need; j++) {
            int32_t c = (int32_t)L->needs[S->need_first + j];
            if (c < n_persist) continue;
            int b = in_buf[c];
            blast[b] = si;
            if (si == bp->last_step[c]) {
                bdone[b] = 1;
                bp->chunk_buffer[c] = b;
            }
        }
    }
    free(first_bwd);
    free(in_buf);
    free(occ);
    free(blast);
    free(bdone);
    acc_free(&A);
    if (st != MS_OK) lc_bufplan_clear(bp);
    return st;
}

int lc_min_buffers(const lc_layout *L, int n_persist, const lc_knobs *k)
{
    if ((size_t)n_persist >= L->n_chunks) return 0;
    for (int nb = 1; nb <= (int)L->n_chunks; nb++) {
        lc_bufplan bp;
        if (lc_bufplan_make(L, n_persist, nb, k, &bp, NULL) == MS_OK) {
            lc_bufplan_clear(&bp);
            return nb;
        }
    }
    return (int)L->n_chunks + 1;
}

/* ======================================================================== collectives */

int lc_coll_mode(const lc_knobs *k, const machine_t *m, int dp)
{
    if (dp <= 1) return LC_COLL_COMPUTE; /* no collective at all */
    if (k->coll != LC_COLL_AUTO) return k->coll;
    return (m && m->nvlink_Bps > 0) ? LC_COLL_STREAM : LC_COLL_LINK;
}

int lc_persist_gather_movable(const lc_knobs *k, int coll, int dp)
{
    return k->persist_shard && dp > 1 && (coll == LC_COLL_LINK || coll == LC_COLL_STREAM);
}

double lc_coll_us(const machine_t *m, uint64_t bytes, int dp)
{
    if (dp <= 1 || !m) return 0;
    return roof_coll_us(m, ROOF_ALL_GATHER, bytes, dp, dp);
}

double lc_allreduce_us(const machine_t *m, uint64_t bytes, int dp)
{
    if (dp <= 1 || !m) return 0;
    return roof_coll_us(m, ROOF_ALL_REDUCE, bytes, dp, dp);
}

/* ======================================================================== lowering */

/* T_HELD: freed by the trace inside a checkpointed block's forward but made before it (the
 * block's input, which a Hugging Face bf16 layer frees at its first residual add): held for
 * the block's replay, as PyTorch's checkpoint holds its function's inputs */
enum { T_GONE = 0, T_LIVE, T_DROPPED, T_OFFLOADED, T_HELD };

typedef struct lt {
    uint64_t id, bytes;
    int32_t layer, step;
    int32_t held;        /* T_HELD: the block whose replay it waits for */
    trace_class cls;
    uint8_t st;
} lt;

typedef struct lcw {
    const trace_t *t;
    const machine_t *m;
    lc_knobs k;
    lc_layout *L;
    lc_bufplan bp;
    uint8_t *roles;
    int32_t *swap_at;            /* per block: before which block's backward its swap-in starts */
    schedule_t *s;
    sbuild *b;                   /* adds to s */
    lc_report rep;
    ms_error *err;
    int emit_marks, coll, dp;
    roof_params roof;
    u64map *state;               /* model-state ids: their records are replaced */
    u64map *tidx;                /* activation id -> index in ts */
    lt *ts;
    size_t nts, cts;
    size_t rec;                  /* record being lowered */
    /* per iteration */
    int in_iter, setup_done;
    int64_t iter;
    trace_phase ph;
    int32_t cur;                 /* current step, -1 before the first */
    int in_step;
    size_t next_load;
    uint32_t *ld_ev, *ld2_ev;    /* per load */
    uint32_t *rel_ev;            /* per step */
    uint8_t *rel_need;
    uint32_t *off_ev, *adam_ev, *prs_ev, *pag_ev; /* per chunk */
    uint8_t *have_adam;
    uint32_t iter_ev;
    size_t *fwd_lo, *fwd_hi;     /* per block, record range of its forward segment */
    uint32_t *e2, *e4;           /* per block: offload done, prefetch done */
    int32_t *buf_off;            /* per buffer: offload event of its last gradients, -1 none */
    int32_t *deferred;           /* chunks whose host Adam waits for the backward's end */
    size_t n_deferred;
    int64_t last_adam;           /* last host Adam event of the iteration, -1 none */
    uint64_t S;                  /* chunk capacity: every copy is cut to pieces of at most S */
} lcw;

static ms_status wfail(lcw *w, ms_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ms_status wfail(lcw *w, ms_status st, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ms_fail(w->err, st, "trace record %zu: %s", w->rec, msg);
}

/* The phase being lowered, which new actions carry. */
static void set_phase(lcw *w, trace_phase ph)
{
    w->ph = ph;
    sbuild_at(w->b, -1, ph);
}

/* The ALLOC of a block this lowering made, with what it holds (sched_block). */
static ms_status wblock(lcw *w, uint64_t id, uint64_t bytes, sched_block b)
{
    return sbuild_block(w->b, SS_COMPUTE, id, bytes, b);
}

static ms_status wcompute(lcw *w, int64_t op, double us, int32_t layer, int recompute)
{
    sched_action a = sbuild_act(w->b, recompute == 2 ? SA_HOST_COMPUTE : SA_COMPUTE,
                                recompute == 2 ? SS_HOST : SS_COMPUTE);
    a.op = op;
    a.dur_us = us > 0 ? us : 0;
    a.layer = layer;
    a.recompute = recompute == 1;
    return sbuild_put(w->b, &a);
}

/* A copy of `bytes` through tensor id's device block (and host buffer), cut into pieces of
 * at most the chunk capacity (collectives through host memory move more than one chunk). */
static ms_status wcopy(lcw *w, sched_kind k, sched_stream s, uint64_t id, uint64_t bytes)
{
    ms_status st = MS_OK;
    int kind = 0;
    lc_id_parse(id, &kind, NULL);
    /* collectives of persistent chunks go through small bounce buffers */
    uint64_t cut = kind == LC_ID_PERSIST && LC_COLL_STAGE_BYTES < w->S ? LC_COLL_STAGE_BYTES : w->S;
    if (k == SA_COPY_H2D) w->rep.h2d_bytes += bytes;
    else w->rep.d2h_bytes += bytes;
    while (bytes > 0 && st == MS_OK) {
        uint64_t piece = bytes > cut ? cut : bytes;
        st = sbuild_tensor(w->b, k, s, id, piece);
        bytes -= piece;
    }
    return st;
}

static uint64_t ceil_div(double num, double den)
{
    double x = ceil(num / den);
    return x > 0 ? (uint64_t)x : 0;
}

uint64_t lc_host_chunk_bytes(const lc_knobs *k, uint64_t shard_params)
{
    double p = (double)shard_params, n = k->host_pinned_tensors;
    uint64_t rest = ceil_div((k->host_bytes_per_param - n * k->host_pinned_bytes_per_param) * p, 1);
    uint64_t pinned = ms_pow2_ceil(ceil_div(k->host_pinned_bytes_per_param * p, 1));
    return rest + (uint64_t)k->host_pinned_tensors * pinned;
}

/* Chunk c's sizes on this rank. */
static uint64_t c_gathered(const lcw *w, int32_t c) /* fp16 bytes of the full chunk */
{
    return w->L->chunks[c].params * (uint64_t)w->L->dtype_bytes;
}
static uint64_t c_shard_params(const lcw *w, int32_t c)
{
    return (w->L->chunks[c].params + (uint64_t)w->dp - 1) / (uint64_t)w->dp;
}
/* bytes each direction of a ring collective through host memory */
static uint64_t c_ring_link(const lcw *w, int32_t c)
{
    if (w->dp <= 1) return 0;
    return ceil_div((double)c_gathered(w, c) * (w->dp - 1) / w->dp, w->k.coll_link_eff);
}

/* Bytes a copy engine moves in `us` on direction dir (0 H2D, 1 D2H): how an NVLink collective
 * is charged to the copy stream in LC_COLL_STREAM mode. */
static uint64_t nv_equiv(const lcw *w, double us, int dir)
{
    double rate = dir ? w->m->link_d2h_Bps : w->m->link_h2d_Bps;
    return ceil_div(us * rate / 1e6, 1);
}

/* Parameters the GPU Adam of persistent chunk c updates on this rank. */
static uint64_t p_opt_params(const lcw *w, int32_t c)
{
    return w->k.persist_shard ? c_shard_params(w, c) : w->L->chunks[c].params;
}

static double host_adam_us(const lcw *w, int32_t c)
{
    return (double)c_shard_params(w, c) / (w->m->host_adam_params_per_s * w->k.host_adam_scale) *
           1e6;
}

/* Chunk c's host Adam on the host CPU, once its gradient offload is done; records the event
 * the next gather of c waits for. */
static ms_status host_adam(lcw *w, int32_t c)
{
    ms_status st = sbuild_event(w->b, SA_WAIT, SS_HOST, w->off_ev[c]);
    if (!st) st = wcompute(w, -1, host_adam_us(w, c), -1, 2);
    w->adam_ev[c] = sbuild_new_event(w->b);
    w->have_adam[c] = 1;
    w->last_adam = w->adam_ev[c];
    w->rep.host_adam++;
    if (!st) st = sbuild_event(w->b, SA_RECORD, SS_HOST, w->adam_ev[c]);
    return st;
}

/* ---- setup: chunk buffers, persistent chunks, host states (once) ---- */

static ms_status emit_setup(lcw *w)
{
    ms_status st = MS_OK;
    const lc_layout *L = w->L;
    set_phase(w, TP_NONE);
    if (w->k.init_device_bytes) {
        st = wblock(w, lc_id(LC_ID_INIT, 0), w->k.init_device_bytes, SB_STAGING);
        if (!st) st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, lc_id(LC_ID_INIT, 0), 0);
    }
    for (int c = 0; st == MS_OK && c < w->k.n_persist; c++) {
        st = wblock(w, lc_id(LC_ID_PERSIST, (uint32_t)c), L->chunk_bytes, SB_CHUNK);
        w->rep.static_gpu_bytes += L->chunk_bytes;
        uint64_t ob = ceil_div(w->k.gpu_opt_bytes_per_param * (double)p_opt_params(w, c), 1);
        if (!st && ob) {
            st = wblock(w, lc_id(LC_ID_POPT, (uint32_t)c), ob, SB_OPTSTATE);
            w->rep.static_gpu_bytes += ob;
        }
        if (!st && (w->coll == LC_COLL_LINK || w->coll == LC_COLL_STREAM) && w->dp > 1)
            st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_COMPUTE, lc_id(LC_ID_PERSIST, (uint32_t)c),
                    LC_COLL_STAGE_BYTES < w->S ? LC_COLL_STAGE_BYTES : w->S);
    }
    for (int b = 0; st == MS_OK && b < w->k.n_buffer; b++) {
        st = wblock(w, lc_id(LC_ID_BUFFER, (uint32_t)b), L->chunk_bytes, SB_STAGING);
        w->rep.buffer_allocs++;
        w->rep.static_gpu_bytes += L->chunk_bytes;
        /* pinned staging of the buffer's copies */
        if (!st) st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_COMPUTE, lc_id(LC_ID_BUFFER, (uint32_t)b), w->S);
    }
    /* host states of the non-persistent chunks; the pinned buffers the copies go through are
     * part of that storage (ProTrain's host chunks are pinned), so they are not counted twice */
    uint64_t total = 0, staging = (uint64_t)w->k.n_buffer * w->S;
    if ((w->coll == LC_COLL_LINK || w->coll == LC_COLL_STREAM) && w->dp > 1)
        staging += (uint64_t)w->k.n_persist *
                   (LC_COLL_STAGE_BYTES < w->S ? LC_COLL_STAGE_BYTES : w->S);
    for (size_t c = (size_t)w->k.n_persist; c < L->n_chunks; c++)
        total += lc_host_chunk_bytes(&w->k, c_shard_params(w, (int32_t)c));
    if (w->k.staging_separate) {
        w->rep.host_state_bytes = total + staging;
        if (st == MS_OK && total)
            st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_COMPUTE, lc_id(LC_ID_HOST, 0), total);
    } else {
        w->rep.host_state_bytes = total > staging ? total : staging;
        if (st == MS_OK && total > staging)
            st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_COMPUTE, lc_id(LC_ID_HOST, 0), total - staging);
    }
    return st;
}

/* ---- chunk gathers ---- */

static ms_status wait_release(lcw *w, sched_stream s, const lc_load *ld)
{
    ms_status st = MS_OK;
    if (ld->rel_kind == LC_REL_ITER) {
        st = sbuild_event(w->b, SA_WAIT, s, w->iter_ev);
        if (!st && w->buf_off[ld->buffer] >= 0)
            st = sbuild_event(w->b, SA_WAIT, s, (uint32_t)w->buf_off[ld->buffer]);
    } else if (ld->rel_kind == LC_REL_STEP) {
        st = sbuild_event(w->b, SA_WAIT, s, w->rel_ev[ld->rel_ref]);
    } else {
        st = sbuild_event(w->b, SA_WAIT, s, w->off_ev[ld->rel_ref]);
    }
    if (!st && !w->k.step_sync && w->have_adam[ld->chunk])
        st = sbuild_event(w->b, SA_WAIT, s, w->adam_ev[ld->chunk]); /* last iteration's update */
    return st;
}

static ms_status emit_load(lcw *w, size_t i)
{
    const lc_load *ld = &w->bp.loads[i];
    int32_t c = ld->chunk;
    uint64_t id = lc_id(LC_ID_BUFFER, (uint32_t)ld->buffer);
    uint64_t own = ceil_div(w->k.param_xfer_bytes * (double)c_shard_params(w, c), 1);
    uint64_t ring = w->coll == LC_COLL_LINK ? c_ring_link(w, c) : 0;
    uint64_t nv = w->coll == LC_COLL_STREAM && w->dp > 1
                      ? nv_equiv(w, lc_coll_us(w->m, c_gathered(w, c), w->dp), 0) : 0;
    w->rep.loads++;
    ms_status st = wait_release(w, SS_H2D, ld);
    if (!st) st = wcopy(w, SA_COPY_H2D, SS_H2D, id, own + ring + nv);
    w->ld_ev[i] = sbuild_new_event(w->b);
    if (!st) st = sbuild_event(w->b, SA_RECORD, SS_H2D, w->ld_ev[i]);
    if (!st && ring) { /* the pieces this rank sends to the others (ring all-gather) */
        st = wait_release(w, SS_D2H, ld);
        if (!st) st = wcopy(w, SA_COPY_D2H, SS_D2H, id, ring);
        w->ld2_ev[i] = sbuild_new_event(w->b);
        if (!st) st = sbuild_event(w->b, SA_RECORD, SS_D2H, w->ld2_ev[i]);
    }
    return st;
}

static ms_status emit_loads_after(lcw *w, int32_t pos)
{
    ms_status st = MS_OK;
    while (st == MS_OK && w->next_load < w->bp.n_loads &&
           w->bp.loads[w->next_load].emit_after <= pos)
        st = emit_load(w, w->next_load++);
    return st;
}

/* ---- activations: swap and checkpoint per block ---- */

static lt *tfind(lcw *w, uint64_t id)
{
    uint64_t i;
    return u64map_get(w->tidx, id, &i) ? &w->ts[i] : NULL;
}

static ms_status swap_out(lcw *w, int32_t j)
{
    uint32_t e1 = sbuild_new_event(w->b);
    ms_status st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e1);
    if (!st) st = sbuild_event(w->b, SA_WAIT, SS_D2H, e1);
    for (size_t i = 0; st == MS_OK && i < w->nts; i++) {
        lt *x = &w->ts[i];
        if (x->st != T_LIVE || x->layer != j || x->cls != TC_ACT_SKEL) continue;
        st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_D2H, x->id, x->bytes);
        if (!st) st = sbuild_tensor(w->b, SA_COPY_D2H, SS_D2H, x->id, x->bytes);
        if (!st) st = sbuild_tensor(w->b, SA_FREE, SS_D2H, x->id, 0);
        x->st = T_OFFLOADED;
        w->rep.swapped_tensors++;
        w->rep.d2h_bytes += x->bytes;
    }
    w->e2[j] = sbuild_new_event(w->b);
    if (!st) st = sbuild_event(w->b, SA_RECORD, SS_D2H, w->e2[j]);
    return st;
}

static ms_status swap_in(lcw *w, int32_t j)
{
    uint32_t e3 = sbuild_new_event(w->b);
    ms_status st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e3);
    if (!st) st = sbuild_event(w->b, SA_WAIT, SS_H2D, e3);
    if (!st) st = sbuild_event(w->b, SA_WAIT, SS_H2D, w->e2[j]);
    for (size_t i = 0; st == MS_OK && i < w->nts; i++) {
        lt *x = &w->ts[i];
        if (x->st != T_OFFLOADED || x->layer != j) continue;
        st = sbuild_tensor(w->b, SA_ALLOC, SS_H2D, x->id, x->bytes);
        if (!st) st = sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, x->id, x->bytes);
        if (!st) st = sbuild_tensor(w->b, SA_HOST_FREE, SS_H2D, x->id, 0);
        x->st = T_LIVE;
        w->rep.h2d_bytes += x->bytes;
    }
    w->e4[j] = sbuild_new_event(w->b);
    if (!st) st = sbuild_event(w->b, SA_RECORD, SS_H2D, w->e4[j]);
    return st;
}

static ms_status drop_block(lcw *w, int32_t j)
{
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < w->nts; i++) {
        lt *x = &w->ts[i];
        if (x->st != T_LIVE || x->layer != j || x->cls != TC_ACT_SKEL || x->step != w->cur)
            continue;
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->id, 0);
        x->st = T_DROPPED;
    }
    return st;
}

static int is_state(const lcw *w, uint64_t id)
{
    return u64map_get(w->state, id, NULL);
}

/* Rebuilds block j's dropped activations before its backward: replays the ops of its forward
 * segment that (transitively) produce them, with their transients and workspaces. */
static ms_status replay_block(lcw *w, int32_t j)
{
    size_t lo = w->fwd_lo[j], hi = w->fwd_hi[j], n = hi - lo;
    u64map *need = u64map_new(64), *target = u64map_new(64);
    uint8_t *opneed = calloc(n ? n : 1, 1);
    ms_status st = MS_OK;
    if (!need || !target || !opneed) st = ms_fail(w->err, MS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == MS_OK && i < w->nts; i++)
        if (w->ts[i].st == T_DROPPED && w->ts[i].layer == j) {
            if (u64map_put(need, w->ts[i].id, 1) || u64map_put(target, w->ts[i].id, 1))
                st = ms_fail(w->err, MS_ERR_NOMEM, "out of memory");
        }
    /* backward walk: which ops are needed, and which of their inputs must be rebuilt */
    for (size_t r = hi; st == MS_OK && r-- > lo;) {
        const trace_rec *R = trace_get(w->t, r);
        if (R->type != TR_OP || op_skipped(w->state, &R->u.op, TP_FWD)) continue;
        const trace_op *op = &R->u.op;
        int needed = 0;
        for (uint32_t o = 0; o < op->n_out && !needed; o++)
            needed = u64map_get(need, op->out[o], NULL);
        if (!needed) continue;
        opneed[r - lo] = 1;
        for (uint32_t q = 0; q < op->n_in; q++) {
            lt *x = tfind(w, op->in[q]);
            if (x && x->st != T_LIVE && x->st != T_HELD && u64map_put(need, x->id, 1))
                st = ms_fail(w->err, MS_ERR_NOMEM, "out of memory");
        }
    }
    /* workspaces live around a needed op are needed too */
    for (size_t r = lo; st == MS_OK && r < hi; r++) {
        const trace_rec *R = trace_get(w->t, r);
        if (R->type != TR_ALLOC || R->u.alloc.cls != TC_WORKSPACE) continue;
        for (size_t q = r + 1; q < hi; q++) {
            const trace_rec *Q = trace_get(w->t, q);
            if (Q->type == TR_FREE && Q->u.free_id == R->u.alloc.id) break;
            if (Q->type == TR_OP && opneed[q - lo]) {
                if (u64map_put(need, R->u.alloc.id, 1))
                    st = ms_fail(w->err, MS_ERR_NOMEM, "out of memory");
                break;
            }
        }
    }
    /* every needed tensor must be made inside the segment */
    for (size_t i = 0; st == MS_OK && i < w->nts; i++) {
        lt *x = &w->ts[i];
        if (!u64map_get(need, x->id, NULL)) continue;
        int made = 0;
        for (size_t r = lo; r < hi && !made; r++) {
            const trace_rec *R = trace_get(w->t, r);
            made = R->type == TR_ALLOC && R->u.alloc.id == x->id;
        }
        if (!made)
            st = ms_fail(w->err, MS_ERR_INVALID,
                         "block %d cannot be recomputed: tensor %" PRIu64 " is needed but not "
                         "made in its forward segment", j, x->id);
    }
    /* emit in forward order */
    for (size_t r = lo; st == MS_OK && r < hi; r++) {
        const trace_rec *R = trace_get(w->t, r);
        if (R->type == TR_ALLOC && u64map_get(need, R->u.alloc.id, NULL)) {
            lt *x = tfind(w, R->u.alloc.id);
            st = sbuild_tensor(w->b, SA_ALLOC, SS_COMPUTE, R->u.alloc.id, R->u.alloc.bytes);
            if (x) x->st = T_LIVE;
        } else if (R->type == TR_OP && opneed[r - lo]) {
            double us;
            st = op_dur(w->m, &w->roof, &R->u.op, &us, w->err);
            if (!st) st = wcompute(w, (int64_t)R->u.op.id, us, j, 1);
            w->rep.recompute_ops++;
        } else if (R->type == TR_FREE && u64map_get(need, R->u.free_id, NULL) &&
                   !u64map_get(target, R->u.free_id, NULL)) {
            lt *x = tfind(w, R->u.free_id);
            if (x && x->st == T_LIVE) {
                st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->id, 0);
                x->st = T_GONE;
            }
        }
    }
    /* transients the segment did not free itself */
    for (size_t i = 0; st == MS_OK && i < w->nts; i++) {
        lt *x = &w->ts[i];
        if (x->st == T_LIVE && u64map_get(need, x->id, NULL) && !u64map_get(target, x->id, NULL) &&
            x->step == w->L->fwd_step[j]) {
            /* made by the replay and not freed there: only the rebuilt targets stay */
            int freed_in_seg = 0;
            for (size_t r = lo; r < hi && !freed_in_seg; r++) {
                const trace_rec *R = trace_get(w->t, r);
                freed_in_seg = R->type == TR_FREE && R->u.free_id == x->id;
            }
            if (!freed_in_seg) {
                st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->id, 0);
                x->st = T_GONE;
            }
        }
    }
    u64map_free(need);
    u64map_free(target);
    free(opneed);
    return st;
}

/* ---- persistent chunks' all-gathers ---- */

/* Whether the persistent chunks' all-gathers move to the next iteration's start. */
static int gather_deferred(const lcw *w)
{
    return w->k.persist_gather == LC_PG_NEXT && lc_persist_gather_movable(&w->k, w->coll, w->dp);
}

/* The two halves of a ring collective through host memory (coll=link): the pieces this rank
 * sends leave on the D2H stream (which the caller has made wait for `ev`), the pieces it
 * receives come in on the H2D stream after `ev`. */
static ms_status ring_via_host(lcw *w, uint64_t id, uint64_t ring, uint32_t ev)
{
    ms_status st = wcopy(w, SA_COPY_D2H, SS_D2H, id, ring);
    if (!st) st = sbuild_event(w->b, SA_WAIT, SS_H2D, ev);
    if (!st) st = wcopy(w, SA_COPY_H2D, SS_H2D, id, ring);
    return st;
}

/* The all-gather of persistent chunk c's updated shards after event `after` (recorded on the
 * compute stream): over NVLink on the prefetch stream, or through host memory as the two
 * halves of a ring on the copy streams. Records pag_ev[c] when it is done. */
static ms_status persist_allgather(lcw *w, int c, uint32_t after)
{
    uint64_t id = lc_id(LC_ID_PERSIST, (uint32_t)c);
    ms_status st;
    if (w->coll == LC_COLL_STREAM) {
        st = sbuild_event(w->b, SA_WAIT, SS_H2D, after);
        if (!st)
            st = wcopy(w, SA_COPY_H2D, SS_H2D, id,
                       nv_equiv(w, lc_coll_us(w->m, c_gathered(w, c), w->dp), 0));
    } else {
        uint64_t ring = c_ring_link(w, c);
        st = sbuild_event(w->b, SA_WAIT, SS_D2H, after);
        if (!st) st = ring_via_host(w, id, ring, after);
    }
    w->pag_ev[c] = sbuild_new_event(w->b);
    if (!st) st = sbuild_event(w->b, SA_RECORD, SS_H2D, w->pag_ev[c]);
    return st;
}

/* ---- steps ---- */

static ms_status pre_step(lcw *w, int32_t s)
{
    const lc_step *S = &w->L->steps[s];
    int32_t j = S->block, N = w->L->n_blocks;
    ms_status st = MS_OK;
    for (uint32_t q = 0; gather_deferred(w) && st == MS_OK && q < S->n_need; q++) {
        uint32_t c = w->L->needs[S->need_first + q];
        if ((int)c < w->k.n_persist && w->L->first_use[c] == s)
            st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->pag_ev[c]);
    }
    if (S->phase == TP_BWD) {
        int first_bwd = s == 0 || w->L->steps[s - 1].phase != TP_BWD;
        /* swap-ins in descending block order: the order the backward needs them */
        for (int32_t i = N - 1; first_bwd && st == MS_OK && i >= 0; i--)
            if (w->swap_at[i] == N) st = swap_in(w, i);
        for (int32_t i = j - 1; st == MS_OK && j >= 0 && j < N && i >= 0; i--)
            if (w->swap_at[i] == j) st = swap_in(w, i);
    }
    for (size_t i = 0; st == MS_OK && i < w->bp.n_loads; i++) {
        const lc_load *ld = &w->bp.loads[i];
        if (ld->step != s) continue;
        st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->ld_ev[i]);
        if (!st && w->coll == LC_COLL_LINK && w->dp > 1)
            st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->ld2_ev[i]);
        if (!st && w->coll == LC_COLL_COMPUTE && w->dp > 1) /* the NVLink all-gather */
            st = wcompute(w, -1, lc_coll_us(w->m, c_gathered(w, ld->chunk), w->dp), j, 0);
    }
    if (S->phase == TP_BWD) {
        for (uint32_t q = 0; q < S->n_need; q++) {
            int32_t c = (int32_t)w->L->needs[S->need_first + q];
            int loaded = 0;
            for (size_t i = 0; i < w->bp.n_loads && !loaded; i++)
                loaded = w->bp.loads[i].step == s && w->bp.loads[i].chunk == c;
            if (c >= w->k.n_persist && !loaded) {
                /* first backward use of a chunk kept from the forward */
                int first = 1;
                for (int32_t p = s - 1; p >= 0 && first && w->L->steps[p].phase == TP_BWD; p--)
                    for (uint32_t z = 0; z < w->L->steps[p].n_need; z++)
                        if ((int32_t)w->L->needs[w->L->steps[p].need_first + z] == c) first = 0;
                w->rep.reused += first;
            }
        }
    }
    if (!st && S->phase == TP_BWD && j >= 0 && j < N) {
        if (w->roles[j] == LC_SWAP) st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->e4[j]);
        else if (w->roles[j] == LC_CKPT) st = replay_block(w, j);
        for (size_t i = 0; st == MS_OK && i < w->nts; i++) /* the replay is done with them */
            if (w->ts[i].st == T_HELD && w->ts[i].held == j) {
                st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, w->ts[i].id, 0);
                w->ts[i].st = T_GONE;
            }
    }
    return st;
}

static ms_status grads_ready(lcw *w, int32_t c)
{
    ms_status st = MS_OK;
    uint64_t ring = w->coll == LC_COLL_LINK ? c_ring_link(w, c) : 0;
    if (c < w->k.n_persist) {
        if (w->dp <= 1) return MS_OK;
        double nv_us = w->k.persist_shard ? lc_coll_us(w->m, c_gathered(w, c), w->dp)
                                          : lc_allreduce_us(w->m, c_gathered(w, c), w->dp);
        if (w->coll == LC_COLL_COMPUTE) /* NVLink reduce-scatter or all-reduce */
            return wcompute(w, -1, nv_us, -1, 0);
        if (!w->k.persist_shard) ring *= 2; /* all-reduce: twice a reduce-scatter's traffic */
        uint64_t id = lc_id(LC_ID_PERSIST, (uint32_t)c);
        uint32_t g = sbuild_new_event(w->b);
        st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, g);
        if (!st) st = sbuild_event(w->b, SA_WAIT, SS_D2H, g);
        if (w->coll == LC_COLL_STREAM) { /* NVLink, on the offload stream */
            if (!st) st = wcopy(w, SA_COPY_D2H, SS_D2H, id, nv_equiv(w, nv_us, 1));
            w->prs_ev[c] = sbuild_new_event(w->b);
            if (!st) st = sbuild_event(w->b, SA_RECORD, SS_D2H, w->prs_ev[c]);
            return st;
        }
        if (!st) st = ring_via_host(w, id, ring, g);
        w->prs_ev[c] = sbuild_new_event(w->b);
        if (!st) st = sbuild_event(w->b, SA_RECORD, SS_H2D, w->prs_ev[c]);
        return st;
    }
    int32_t b = w->bp.chunk_buffer[c];
    uint64_t id = lc_id(LC_ID_BUFFER, (uint32_t)b);
    uint64_t shard = ceil_div(w->k.grad_xfer_bytes * (double)c_shard_params(w, c), 1);
    if (w->coll == LC_COLL_COMPUTE && w->dp > 1)
        st = wcompute(w, -1, lc_coll_us(w->m, c_gathered(w, c), w->dp), -1, 0);
    uint32_t g = sbuild_new_event(w->b);
    if (!st) st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, g);
    if (!st) st = sbuild_event(w->b, SA_WAIT, SS_D2H, g);
    if (!st && ring) { /* reduce-scatter through host memory */
        st = ring_via_host(w, id, ring, g);
        uint32_t rr = sbuild_new_event(w->b);
        if (!st) st = sbuild_event(w->b, SA_RECORD, SS_H2D, rr);
        if (!st) st = sbuild_event(w->b, SA_WAIT, SS_D2H, rr);
    }
    if (w->coll == LC_COLL_STREAM && w->dp > 1) /* the NVLink reduce-scatter first */
        shard += nv_equiv(w, lc_coll_us(w->m, c_gathered(w, c), w->dp), 1);
    if (!st) st = wcopy(w, SA_COPY_D2H, SS_D2H, id, shard);
    w->off_ev[c] = sbuild_new_event(w->b);
    if (!st) st = sbuild_event(w->b, SA_RECORD, SS_D2H, w->off_ev[c]);
    w->buf_off[b] = (int32_t)w->off_ev[c];
    if (st) return st;
    if (!w->k.overlap_host_adam) {
        w->deferred[w->n_deferred++] = c;
        return MS_OK;
    }
    return host_adam(w, c);
}

static ms_status post_step(lcw *w, int32_t s)
{
    const lc_step *S = &w->L->steps[s];
    int32_t j = S->block;
    ms_status st = MS_OK;
    if (S->phase == TP_FWD && j >= 0 && j < w->L->n_blocks) {
        w->fwd_hi[j] = w->rec;
        if (w->roles[j] == LC_SWAP) st = swap_out(w, j);
        else if (w->roles[j] == LC_CKPT) st = drop_block(w, j);
    }
    if (!st && w->rel_need[s]) st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, w->rel_ev[s]);
    for (size_t c = 0; st == MS_OK && c < w->L->n_chunks; c++)
        if (w->bp.last_step[c] == s) st = grads_ready(w, (int32_t)c);
    if (!st) st = emit_loads_after(w, s);
    return st;
}

static ms_status open_seg(lcw *w, trace_phase ph, int32_t block)
{
    w->cur++;
    if ((size_t)w->cur >= w->L->n_steps || w->L->steps[w->cur].phase != ph ||
        w->L->steps[w->cur].block != block)
        return wfail(w, MS_ERR_UNSUPPORTED,
                     "iteration %" PRId64 " does not have iteration 0's structure (segment %d: "
                     "%s block %d); chunk lowering needs identical iterations", w->iter, w->cur,
                     trace_phase_name(ph), block);
    w->in_step = 1;
    if (ph == TP_FWD && block >= 0 && block < w->L->n_blocks) w->fwd_lo[block] = w->rec + 1;
    return pre_step(w, w->cur);
}

static ms_status close_seg(lcw *w)
{
    if (!w->in_step) return MS_OK;
    w->in_step = 0;
    return post_step(w, w->cur);
}

/* ---- iterations ---- */

static ms_status iter_begin(lcw *w, int64_t value)
{
    const lc_layout *L = w->L;
    w->iter = value;
    w->in_iter = 1;
    w->cur = -1;
    w->in_step = 0;
    w->next_load = 0;
    w->n_deferred = 0;
    w->last_adam = -1;
    for (size_t i = 0; i < L->n_steps; i++) w->rel_need[i] = 0;
    for (size_t i = 0; i < w->bp.n_loads; i++)
        if (w->bp.loads[i].rel_kind == LC_REL_STEP) w->rel_need[w->bp.loads[i].rel_ref] = 1;
    for (size_t i = 0; i < L->n_steps; i++)
        if (w->rel_need[i]) w->rel_ev[i] = sbuild_new_event(w->b);
    w->iter_ev = sbuild_new_event(w->b);
    ms_status st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, w->iter_ev);
    /* persist_gather=next: the last step's updates of the persistent chunks, all-gathered
     * ahead of the buffers' first loads */
    for (int c = 0; gather_deferred(w) && st == MS_OK && c < w->k.n_persist; c++)
        if (w->L->first_use[c] >= 0) st = persist_allgather(w, c, w->iter_ev);
    if (!st) st = emit_loads_after(w, -1);
    return st;
}

static ms_status iter_end(lcw *w)
{
    ms_status st = close_seg(w);
    if (st) return st;
    if ((size_t)(w->cur + 1) != w->L->n_steps)
        return wfail(w, MS_ERR_UNSUPPORTED,
                     "iteration %" PRId64 " has %d segments where iteration 0 has %zu", w->iter,
                     w->cur + 1, w->L->n_steps);
    set_phase(w, TP_OPT);
    uint32_t bwd_end = sbuild_new_event(w->b);
    st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, bwd_end);
    /* GPU Adam of the persistent chunks (their optimizer states are sharded over dp) */
    for (int c = 0; st == MS_OK && c < w->k.n_persist; c++) {
        if ((w->coll == LC_COLL_LINK || w->coll == LC_COLL_STREAM) && w->dp > 1)
            st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->prs_ev[c]);
        if (!st)
            st = wcompute(w, -1, w->L->adam_gpu_us_per_param * (double)p_opt_params(w, c), -1, 0);
        w->rep.gpu_adam++;
        if (st || w->dp <= 1 || !w->k.persist_shard || gather_deferred(w)) continue;
        if (w->coll == LC_COLL_COMPUTE) {
            st = wcompute(w, -1, lc_coll_us(w->m, c_gathered(w, c), w->dp), -1, 0);
            continue;
        }
        uint32_t g = sbuild_new_event(w->b);
        st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, g);
        if (!st) st = persist_allgather(w, c, g);
    }
    /* host Adam after the backward (systems that do not overlap it) */
    if (!st && w->n_deferred) st = sbuild_event(w->b, SA_WAIT, SS_HOST, bwd_end);
    for (size_t i = 0; st == MS_OK && i < w->n_deferred; i++) {
        st = host_adam(w, w->deferred[i]);
    }
    for (int c = 0; st == MS_OK && c < w->k.n_persist; c++)
        if ((w->coll == LC_COLL_LINK || w->coll == LC_COLL_STREAM) && w->dp > 1 &&
            w->k.persist_shard && !gather_deferred(w))
            st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->pag_ev[c]);
    if (!st && w->k.step_sync && w->last_adam >= 0)
        st = sbuild_event(w->b, SA_WAIT, SS_COMPUTE, (uint32_t)w->last_adam);
    if (!st && w->next_load != w->bp.n_loads)
        st = ms_fail(w->err, MS_ERR_INVALID, "internal: %zu chunk loads were not emitted",
                     w->bp.n_loads - w->next_load);
    w->in_iter = 0;
    return st;
}

/* ---- trace records ---- */

static ms_status do_mark(lcw *w, const trace_mark *mk)
{
    ms_status st = MS_OK;
    if (mk->kind == TM_ITER) {
        if (w->in_iter && (st = iter_end(w))) return st;
        if (!w->setup_done) {
            w->setup_done = 1;
            if ((st = emit_setup(w))) return st;
        }
    } else {
        st = close_seg(w);
    }
    if (!st && mk->kind == TM_PHASE) set_phase(w, (trace_phase)mk->value);
    if (!st && w->emit_marks) {
        sched_action a = sbuild_act(w->b, SA_MARK, SS_COMPUTE);
        a.mark = mk->kind;
        a.mark_value = mk->value;
        st = sbuild_put(w->b, &a);
    }
    if (st) return st;
    if (mk->kind == TM_ITER) return iter_begin(w, mk->value);
    if (!w->in_iter) return MS_OK;
    if ((w->ph == TP_FWD || w->ph == TP_BWD) && (mk->kind == TM_PHASE || mk->kind == TM_LAYER))
        return open_seg(w, w->ph, mk->kind == TM_LAYER ? (int32_t)mk->value : -1);
    return MS_OK;
}

static ms_status do_alloc(lcw *w, const trace_tensor *x)
{
    if (lc_managed(w->L, x)) {
        if (w->in_iter && x->cls == TC_PARAM)
            return wfail(w, MS_ERR_UNSUPPORTED, "parameter '%s' allocated inside an iteration",
                         x->name);
        return MS_OK; /* replaced by the chunks */
    }
    uint64_t i;
    if (!u64map_get(w->tidx, x->id, &i)) {
        if (ms_grow((void **)&w->ts, &w->cts, w->nts + 1, sizeof *w->ts) ||
            u64map_put(w->tidx, x->id, w->nts))
            return ms_fail(w->err, MS_ERR_NOMEM, "out of memory");
        i = w->nts++;
    }
    lt *t = &w->ts[i];
    t->id = x->id;
    t->bytes = x->bytes;
    t->layer = x->layer;
    t->cls = x->cls;
    t->step = w->in_iter ? w->cur : -1;
    t->st = T_LIVE;
    sched_action a = sbuild_act(w->b, SA_ALLOC, SS_COMPUTE);
    a.tensor = x->id;
    a.bytes = x->bytes;
    a.layer = x->layer;
    return sbuild_put(w->b, &a);
}

static ms_status do_free(lcw *w, uint64_t id)
{
    if (is_state(w, id)) return MS_OK;
    lt *x = tfind(w, id);
    if (!x || x->st == T_GONE)
        return wfail(w, MS_ERR_INVALID, "free of tensor %" PRIu64 ", which is not live", id);
    ms_status st = MS_OK;
    int32_t j = w->in_step && w->cur >= 0 ? w->L->steps[w->cur].block : -1;
    if (x->st == T_LIVE && j >= 0 && j < w->L->n_blocks && w->roles[j] == LC_CKPT &&
        w->L->steps[w->cur].phase == TP_FWD && x->step != w->cur) {
        x->st = T_HELD;
        x->held = j;
        return MS_OK;
    }
    if (x->st == T_LIVE) st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, id, 0);
    else if (x->st == T_OFFLOADED) st = sbuild_tensor(w->b, SA_HOST_FREE, SS_D2H, id, 0);
    x->st = T_GONE;
    return st;
}

static ms_status do_op(lcw *w, const trace_op *op)
{
    if (op_skipped(w->state, op, w->ph)) return MS_OK;
    for (uint32_t i = 0; i < op->n_in + op->n_out; i++) {
        lt *x = tfind(w, i < op->n_in ? op->in[i] : op->out[i - op->n_in]);
        if (x && (x->st == T_DROPPED || x->st == T_OFFLOADED))
            return wfail(w, MS_ERR_INVALID,
                         "op %" PRIu64 " (%s) uses tensor %" PRIu64 " of block %d while it is %s",
                         op->id, op->name, x->id, x->layer,
                         x->st == T_DROPPED ? "dropped (checkpointed)" : "swapped out");
    }
    double us;
    ms_status st = op_dur(w->m, &w->roof, op, &us, w->err);
    if (st) return st;
    sched_action a = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
    a.op = (int64_t)op->id;
    a.dur_us = us;
    a.layer = op->layer;
    a.phase = op->phase;
    return sbuild_put(w->b, &a);
}

static ms_status lcw_alloc(lcw *w)
{
    const lc_layout *L = w->L;
    size_t nl = w->bp.n_loads ? w->bp.n_loads : 1, ns = L->n_steps ? L->n_steps : 1;
    size_t nc = L->n_chunks, nb = (size_t)L->n_blocks, nbuf = (size_t)w->k.n_buffer + 1;
    w->ld_ev = calloc(nl, sizeof *w->ld_ev);
    w->ld2_ev = calloc(nl, sizeof *w->ld2_ev);
    w->rel_ev = calloc(ns, sizeof *w->rel_ev);
    w->rel_need = calloc(ns, 1);
    w->off_ev = calloc(nc, sizeof *w->off_ev);
    w->adam_ev = calloc(nc, sizeof *w->adam_ev);
    w->prs_ev = calloc(nc, sizeof *w->prs_ev);
    w->pag_ev = calloc(nc, sizeof *w->pag_ev);
    w->have_adam = calloc(nc, 1);
    w->deferred = calloc(nc, sizeof *w->deferred);
    w->fwd_lo = calloc(nb, sizeof *w->fwd_lo);
    w->fwd_hi = calloc(nb, sizeof *w->fwd_hi);
    w->e2 = calloc(nb, sizeof *w->e2);
    w->e4 = calloc(nb, sizeof *w->e4);
    w->roles = calloc(nb, 1);
    w->swap_at = calloc(nb + 1, sizeof *w->swap_at);
    w->buf_off = malloc(nbuf * sizeof *w->buf_off);
    w->state = u64map_new(1024);
    w->tidx = u64map_new(4096);
    if (!w->ld_ev || !w->ld2_ev || !w->rel_ev || !w->rel_need || !w->off_ev || !w->adam_ev ||
        !w->prs_ev || !w->pag_ev || !w->have_adam || !w->deferred || !w->fwd_lo || !w->fwd_hi ||
        !w->e2 || !w->e4 || !w->roles || !w->swap_at || !w->buf_off || !w->state || !w->tidx)
        return ms_fail(w->err, MS_ERR_NOMEM, "out of memory");
    for (size_t b = 0; b < nbuf; b++) w->buf_off[b] = -1;
    return MS_OK;
}

static void lcw_free(lcw *w)
{
    free(w->ld_ev);
    free(w->ld2_ev);
    free(w->rel_ev);
    free(w->rel_need);
    free(w->off_ev);
    free(w->adam_ev);
    free(w->prs_ev);
    free(w->pag_ev);
    free(w->have_adam);
    free(w->deferred);
    free(w->fwd_lo);
    free(w->fwd_hi);
    free(w->e2);
    free(w->e4);
    free(w->roles);
    free(w->swap_at);
    free(w->buf_off);
    free(w->ts);
    u64map_free(w->state);
    u64map_free(w->tidx);
    lc_bufplan_clear(&w->bp);
    lc_layout_free(w->L);
}

/* Checks the configuration against the layout before anything is emitted. */
static ms_status check_config(lcw *w)
{
    const lc_layout *L = w->L;
    if (w->k.n_persist > (int)L->n_chunks)
        return ms_fail(w->err, MS_ERR_INVALID, "n_persist=%d exceeds the %zu chunks",
                       w->k.n_persist, L->n_chunks);
    if (w->k.n_persist < (int)L->n_chunks && w->k.n_buffer < 1)
        return ms_fail(w->err, MS_ERR_INVALID,
                       "n_buffer=0 with %zu non-persistent chunks: nothing to gather them into",
                       L->n_chunks - (size_t)w->k.n_persist);
    if (w->k.n_persist < (int)L->n_chunks && !(w->m && w->m->host_adam_params_per_s > 0))
        return ms_fail(w->err, MS_ERR_INVALID,
                       "machine '%s' gives no host.adam_params_per_s: host Adam cannot be timed",
                       w->m ? w->m->name : "(none)");
    ms_status st = lc_block_roles(L->n_blocks, w->k.n_swap, w->k.n_ckpt, w->roles, w->err);
    if (!st) lc_swap_issue(w->roles, (int)L->n_blocks, w->k.swap_lead, w->swap_at);
    return st;
}

ms_status lower_chunks_report(const trace_t *t, const plan_t *p, const machine_t *m,
                              const lower_opts *o, schedule_t **out, lc_report *rep,
                              ms_error *err)
{
    *out = NULL;
    lower_opts def;
    if (!o) {
        lower_opts_default(&def);
        o = &def;
    }
    if (o->iter_first != INT64_MIN || o->iter_count > 0)
        return ms_fail(err, MS_ERR_UNSUPPORTED,
                       "chunk lowering lowers every iteration (iter_first / iter_count unset)");
    if (!m) return ms_fail(err, MS_ERR_INVALID, "chunk lowering needs a machine profile");
    lcw w;
    memset(&w, 0, sizeof w);
    w.t = t;
    w.m = m;
    w.err = err;
    w.emit_marks = o->emit_marks;
    w.cur = -1;
    roof_params_default(&w.roof);
    ms_status st = lc_knobs_from_plan(p, &w.k, err);
    if (!st && w.k.persist_gather == LC_PG_AUTO)
        st = ms_fail(err, MS_ERR_INVALID, "plan knob persist_gather=auto is a search setting: "
                     "the plan to lower must give step or next");
    if (!st) st = lc_layout_new(t, m, &w.k, &w.L, err);
    if (st) return st;
    w.k.chunk_bytes = w.L->chunk_bytes;
    w.dp = w.L->dp;
    w.S = w.L->chunk_bytes;
    w.coll = lc_coll_mode(&w.k, m, w.dp);
    st = lcw_alloc(&w);
    if (!st) st = check_config(&w);
    if (!st) st = lc_bufplan_make(w.L, w.k.n_persist, w.k.n_buffer, &w.k, &w.bp, err);
    if (!st) { /* one event pair per planned load */
        free(w.ld_ev);
        free(w.ld2_ev);
        w.ld_ev = calloc(w.bp.n_loads + 1, sizeof *w.ld_ev);
        w.ld2_ev = calloc(w.bp.n_loads + 1, sizeof *w.ld2_ev);
        if (!w.ld_ev || !w.ld2_ev) st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    if (!st) {
        w.s = sched_new();
        w.b = w.s ? sbuild_new(w.s, err, "out of memory") : NULL;
        if (!w.b) st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    size_t n = trace_count(t);
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && lc_managed(w.L, &r->u.alloc) &&
            u64map_put(w.state, r->u.alloc.id, 1))
            st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        const trace_rec *r = trace_get(t, i);
        w.rec = i;
        switch (r->type) {
        case TR_MARK: st = do_mark(&w, &r->u.mark); break;
        case TR_ALLOC: st = do_alloc(&w, &r->u.alloc); break;
        case TR_FREE: st = do_free(&w, r->u.free_id); break;
        case TR_OP: st = do_op(&w, &r->u.op); break;
        }
    }
    if (!st && w.in_iter) st = iter_end(&w);
    if (st == MS_OK) {
        *out = w.s;
        w.s = NULL;
        w.rep.actions = sbuild_actions(w.b);
        w.rep.events = sbuild_events(w.b);
        if (rep) *rep = w.rep;
    }
    sbuild_free(w.b);
    sched_free(w.s);
    lcw_free(&w);
    return st;
}

ms_status lower_chunks(const trace_t *t, const plan_t *p, const machine_t *m,
                       const lower_opts *o, schedule_t **out, ms_error *err)
{
    return lower_chunks_report(t, p, m, o, out, NULL, err);
}

const lower_backend lower_backend_chunks = {
    "chunks",
    "chunk-managed model states: persistent and host chunks, chunk buffers, host Adam, "
    "interleaved swapped and checkpointed blocks (ProTrain and the ZeRO-3 / Gemini / FSDP "
    "baselines)",
    lower_chunks,
    0,
};

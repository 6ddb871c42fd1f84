/* lower_chunks_layout.c — the chunk layout of a trace for the chunk lowering (lc_layout,
 * lower_chunks.h): which parameters go into which chunk, the block roles and the block-
 * granular access program of iteration 0. Used by planners/protrain/lower_chunks.c, the
 * ProTrain cost model and policies, and tests. Rules in docs/PROTRAIN.md. */
#include "planners/protrain/lower_chunks.h"
#include "planners/protrain/lower_chunks_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/roofline.h"
#include "base/u64map.h"

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

ms_status lc_op_dur(const machine_t *m, const roof_params *rp, const trace_op *op,
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
int lc_op_skipped(const u64map *state, const trace_op *op, trace_phase ph)
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
        if (lc_op_skipped(b->state, op, ph)) {
            if (op->kind == TK_OPTIM) {
                double us;
                ms_status st = lc_op_dur(b->m, &b->roof, op, &us, err);
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
        ms_status st = lc_op_dur(b->m, &b->roof, op, &us, err);
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

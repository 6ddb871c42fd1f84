/* lower_replay.c — rebuilding dropped tensors in the per-tensor lowering: replay of a
 * layer's forward ops at its backward start, MEMO's token-wise recomputation of partially
 * swapped tensors, and the ".ovl" collectives merged into their attention kernels. Used by
 * planners/lower.c and planners/lower_rb.c. */
#include "planners/lower_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ".ovl" collectives: the CP ring exchange runs under its attention kernel ---- */

/* Whether op record i is a ".ovl" collective that merges into the attention kernel which is
 * the next op (the next op marked in `needed`, relative to `base`, when given) before `end`
 * and before any mark, in the same layer and phase. */
int lw_ovl_merges(const lw *w, size_t i, size_t end, const uint8_t *needed, size_t base)
{
    const trace_op *op = &lw_rec(w, i)->u.op;
    if (!w->overlap || op->kind != TK_COMM || !ms_ends_with(op->name, ".ovl")) return 0;
    for (size_t j = i + 1; j < end; j++) {
        const trace_rec *r = lw_rec(w, j);
        if (r->type == TR_MARK) return 0;
        if (r->type != TR_OP || (needed && !needed[j - base])) continue;
        return r->u.op.kind == TK_ATTN && r->u.op.layer == op->layer &&
               r->u.op.phase == op->phase;
    }
    return 0;
}

/* The duration of an attention kernel that absorbs the pending ".ovl" time; *merged (the
 * action's sched_action.ovl) says whether it did. */
double lw_ovl_absorb(lw *w, const trace_op *op, double us, double *pending, int *have,
                     uint8_t *merged)
{
    *merged = 0;
    if (!*have || op->kind != TK_ATTN) return us;
    *merged = 1;
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
    lw_tensor *x = lw_find_tensor(w, id);
    if (x && x->state == TS_INBUF) {
        uint8_t st = w->groups[x->rbg].state;
        return st == RB_LIVE || st == RB_PREFETCHED;
    }
    return !x || x->state == TS_LIVE || x->state == TS_PREFETCHED;
}

static ms_status need_input(lw *w, replay *r, const trace_op *op, uint64_t id, int32_t layer)
{
    if (u64map_get(r->need, id, NULL) || available(w, id)) return MS_OK;
    lw_tensor *x = lw_find_tensor(w, id);
    if (!u64map_get(r->seg_alloc, id, NULL) || x->state == TS_OFFLOADED ||
        x->state == TS_INBUF) {
        char b[120];
        snprintf(b, sizeof b, "; layer %d's forward cannot rebuild it (op %" PRIu64 ")",
                 (int)layer, op->id);
        return lw_fail_rec(w, MS_ERR_INVALID, "recomputation needs tensor %" PRIu64
                           ", which is not on the device%s", id, b);
    }
    return u64map_put(r->need, id, 1) ? lw_nomem(w) : MS_OK;
}

/* Backward walk: an op is needed if it writes a needed tensor; its inputs that are no longer
 * on the device become needed (and so their producers). */
static ms_status mark_needed(lw *w, replay *r, int32_t layer)
{
    for (size_t i = r->e; i-- > r->b;) {
        const trace_rec *rec = lw_rec(w, i);
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
                return lw_nomem(w);
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
        const trace_rec *rec = lw_rec(w, i);
        if (rec->type != TR_ALLOC || rec->u.alloc.cls != TC_WORKSPACE) continue;
        uint64_t id = rec->u.alloc.id;
        if (available(w, id) || u64map_get(r->need, id, NULL)) continue;
        for (size_t j = i + 1; j < r->e; j++) {
            const trace_rec *q = lw_rec(w, j);
            if (q->type == TR_FREE && q->u.free_id == id) break;
            if (q->type == TR_OP && r->op_needed[j - r->b]) {
                if (u64map_put(r->need, id, 1)) return lw_nomem(w);
                break;
            }
        }
    }
    return MS_OK;
}

static ms_status replay_alloc(lw *w, replay *r, const trace_tensor *t, idx_list *live)
{
    uint64_t at;
    if (!u64map_get(r->need, t->id, NULL) || !u64map_get(r->seg_alloc, t->id, &at)) return MS_OK;
    int target = u64map_get(r->target, t->id, NULL);
    if (target && r->in_place) return MS_OK; /* its block is there; its tokens are filled in */
    lw_tensor *x = lw_find_tensor(w, t->id);
    x->sid = lw_next_sid(w, x);
    ms_status st = lw_put_alloc(w, SS_COMPUTE, x,
                              target ? t->bytes : lower_scaled_bytes(t->bytes, r->frac));
    if (st != MS_OK) return st;
    lw_src_bytes(w, LSRC_TENSOR, t, (size_t)at, target ? 1.0 : r->frac);
    x->state = TS_LIVE;
    if (target) {
        w->rep.rebuilt++;
        return MS_OK;
    }
    return lw_idx_push(live, (size_t)(x - w->ts)) == MS_OK ? MS_OK : lw_nomem(w);
}

static ms_status replay_free(lw *w, replay *r, uint64_t id, idx_list *live)
{
    if (!u64map_get(r->need, id, NULL) || u64map_get(r->target, id, NULL)) return MS_OK;
    lw_tensor *x = lw_find_tensor(w, id);
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

static ms_status replay_op(lw *w, replay *r, size_t i, double *pend, int *have,
                           idx_list *pend_src)
{
    const trace_op *op = &lw_rec(w, i)->u.op;
    double us;
    ms_status st = lw_op_us(w, op, &us);
    if (st == MS_OK) st = lw_note_comm(w, op);
    if (st != MS_OK) return st;
    us *= r->frac;
    if (lw_ovl_merges(w, i, r->e, r->op_needed, r->b)) {
        if (us > *pend) *pend = us;
        *have = 1;
        w->rep.overlapped++;
        if (w->src && lw_idx_push(pend_src, i) != MS_OK) w->src->ok = 0;
        return MS_OK;
    }
    uint8_t merged;
    us = lw_ovl_absorb(w, op, us, pend, have, &merged);
    sched_action *a = sbuild_begin(w->b, SA_COMPUTE, SS_COMPUTE);
    if (!a) return MS_ERR_NOMEM;
    a->op = (int64_t)op->id;
    a->dur_us = us;
    a->ovl = merged;
    a->recompute = 1;
    a->layer = op->layer;
    if (r->in_place && r->frac < 1.0) a->replay_frac = r->frac; /* rows for the real kernels */
    w->rep.recompute_ops++;
    w->rep.recompute_us += us;
    sbuild_end(w->b, a);
    if (w->src) {
        lw_src_ops(w, merged ? pend_src : NULL, i, r->frac);
        if (merged) pend_src->n = 0;
    }
    return MS_OK;
}

/* Program-order pass over the section emitting the needed allocs, ops and frees. Transients
 * whose trace free lies beyond the section are freed at the end, in allocation order. */
static ms_status emit_replay(lw *w, replay *r)
{
    idx_list live = { 0 }, pend_src = { 0 };
    ms_status st = MS_OK;
    double pend = 0;
    int have = 0;
    for (size_t i = r->b; st == MS_OK && i < r->e; i++) {
        const trace_rec *rec = lw_rec(w, i);
        if (rec->type == TR_ALLOC) {
            uint64_t at;
            if (u64map_get(r->seg_alloc, rec->u.alloc.id, &at) && at == i)
                st = replay_alloc(w, r, &rec->u.alloc, &live);
        } else if (rec->type == TR_FREE) {
            st = replay_free(w, r, rec->u.free_id, &live);
        } else if (rec->type == TR_OP && r->op_needed[i - r->b]) {
            st = replay_op(w, r, i, &pend, &have, &pend_src);
        }
    }
    if (live.n > 1) qsort(live.v, live.n, sizeof *live.v, cmp_size);
    for (size_t k = 0; st == MS_OK && k < live.n; k++) {
        w->ts[live.v[k]].state = TS_FREED;
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, w->ts[live.v[k]].sid, 0);
    }
    free(live.v);
    free(pend_src.v);
    return st;
}

/* Replays layer L's forward section for the tensors in `targets` (indices into w->ts). */
static ms_status run_replay(lw *w, lw_layer *L, int32_t layer, const idx_list *targets,
                            double frac, int in_place)
{
    /* the maps sized for the section from the start (at most a tensor per record; a
     * generated section allocates in about a third of its records) rather than doubled
     * through it */
    size_t secn = L->fwd_end - L->fwd_begin;
    replay r = { L->fwd_begin, L->fwd_end, u64map_new(secn / 3 + 16), u64map_new(secn / 3 + 16),
                 u64map_new(targets->n + 16), calloc(secn + 1, 1), frac, in_place };
    ms_status st = MS_OK;
    if (!r.seg_alloc || !r.need || !r.target || !r.op_needed) st = lw_nomem(w);
    for (size_t i = r.b; st == MS_OK && i < r.e; i++) {
        const trace_rec *rec = lw_rec(w, i);
        if (rec->type == TR_ALLOC && u64map_put(r.seg_alloc, rec->u.alloc.id, i)) st = lw_nomem(w);
    }
    for (size_t k = 0; st == MS_OK && k < targets->n; k++) {
        uint64_t id = w->ts[targets->v[k]].meta->id;
        if (u64map_put(r.need, id, 1) || u64map_put(r.target, id, 1)) st = lw_nomem(w);
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

ms_status lw_replay_layer(lw *w, lw_layer *L, int32_t layer)
{
    idx_list t = { 0 };
    ms_status st = MS_OK;
    for (size_t k = 0; st == MS_OK && k < L->drop.n; k++)
        if (w->ts[L->drop.v[k]].state == TS_DROPPED) st = lw_idx_push(&t, L->drop.v[k]);
    if (st != MS_OK) st = lw_nomem(w);
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
ms_status lw_chain_recompute(lw *w, lw_layer *L, int32_t layer, const idx_list *cand,
                             int want_state)
{
    idx_list t = { 0 };
    double alpha = 1.0;
    ms_status st = MS_OK;
    for (size_t k = 0; st == MS_OK && k < cand->n; k++) {
        lw_tensor *x = &w->ts[cand->v[k]];
        if (x->state != want_state || x->dec != PD_SWAP || x->alpha >= 1.0) continue;
        if (x->alloc_rec < L->fwd_begin || x->alloc_rec >= L->fwd_end)
            st = lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is swapped with alpha "
                             "< 1 but is not made in layer %d's forward, so its missing tokens "
                             "cannot be recomputed (swap it whole)", x->meta->id, x->meta->name,
                             (int)layer);
        else if (lw_idx_push(&t, cand->v[k]) != MS_OK)
            st = lw_nomem(w);
        if (x->alpha < alpha) alpha = x->alpha;
    }
    if (st == MS_OK && t.n) st = run_replay(w, L, layer, &t, 1.0 - alpha, 1);
    free(t.v);
    return st;
}

/* MEMO's token-wise recomputation of the (1 - alpha) part of partially swapped tensors. The
 * producer chain is approximated by the producing op alone: one COMPUTE of (1 - alpha) of its
 * duration; an op producing several such tensors runs once with the largest fraction.
 * (tokenwise=chain replays the whole chain instead: lw_chain_recompute.) */
ms_status lw_tokenwise_recompute(lw *w, lw_layer *L, int32_t layer)
{
    if (w->chain) return lw_chain_recompute(w, L, layer, &L->swap, TS_PREFETCHED);
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
            return lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is swapped with "
                               "alpha < 1 but has no producer op to recompute the rest", x->meta->id,
                               x->meta->name);
        double us;
        ms_status st = lw_op_us(w, op, &us);
        if (st != MS_OK) return st;
        sched_action a = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
        a.op = (int64_t)op->id;
        a.dur_us = frac * us;
        a.recompute = 1;
        a.layer = op->layer;
        if ((st = sbuild_put(w->b, &a)) != MS_OK) return st;
        /* trace_find_op's record: the op's record index, for another trace of this shape */
        if (w->src) lw_src_ops(w, NULL, lw_op_rec(w, op), frac);
        w->rep.recompute_ops++;
        w->rep.recompute_us += a.dur_us;
    }
    return MS_OK;
}

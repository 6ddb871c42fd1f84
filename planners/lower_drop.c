/* lower_drop.c — the tensor lowering's plan knob drop_at=use: a tensor the plan recomputes is
 * freed right after the last forward op that reads or writes it, instead of at the end of its
 * layer's forward. A checkpointed forward keeps no saved tensors (PyTorch's non-reentrant
 * torch.utils.checkpoint packs a handle, not the tensor; Megatron-LM's CheckpointFunction runs
 * the forward under torch.no_grad), so each intermediate dies with its last Python reference,
 * which in eager code is the op that last consumes it. Python locals that outlive their last
 * use (a variable read again only by `return`) are not modelled: they die at the op, which is
 * at most the rest of that function early. Used by planners/lower.c (prescan before its walk,
 * events after each op); state shared through lower_int.h. */
#include "planners/lower_int.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/u64map.h"
#include "planners/sbuild.h"

/* The tensor incarnation of id, if it was made in this forward pass, was touched by the op
 * at rec. */
static void du_touch(lw *w, u64map *cur, uint64_t id, size_t rec, uint32_t pass)
{
    uint64_t k;
    if (u64map_get(cur, id, &k) && w->due[k].pass == pass) w->due[k].rec = rec;
}

static ms_status du_new(lw *w, u64map *cur, uint64_t id, size_t alloc_rec, uint32_t pass)
{
    if (ms_grow((void **)&w->due, &w->cap_due, w->n_due + 1, sizeof *w->due) != MS_OK ||
        u64map_put(cur, id, w->n_due))
        return lw_nomem(w);
    w->due[w->n_due++] = (du_event){ SIZE_MAX, alloc_rec, id, pass };
    return MS_OK;
}

/* Drops the incarnations never touched by a forward op (or freed by it) and orders the rest
 * by last use, ties in allocation order (a stable counting sort over the n records: the
 * events were made in allocation order). */
static ms_status du_finish(lw *w, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < w->n_due; i++)
        if (w->due[i].rec != SIZE_MAX) w->due[m++] = w->due[i];
    w->n_due = m;
    if (m < 2) return MS_OK;
    size_t *at = calloc(n + 1, sizeof *at);
    du_event *out = malloc(m * sizeof *out);
    if (!at || !out) {
        free(at);
        free(out);
        return lw_nomem(w);
    }
    for (size_t i = 0; i < m; i++) at[w->due[i].rec + 1]++;
    for (size_t r = 0; r < n; r++) at[r + 1] += at[r];
    for (size_t i = 0; i < m; i++) out[at[w->due[i].rec]++] = w->due[i];
    free(at);
    free(w->due);
    w->due = out;
    w->cap_due = m;
    return MS_OK;
}

/* Before the walk: for every tensor allocated in a forward phase, the record of the last op
 * of that phase that reads or writes it. The map from ids to events is never cleared: an
 * event remembers its forward pass, and only that pass's records touch it. */
ms_status lw_du_prescan(lw *w)
{
    u64map *cur = u64map_new(1024);
    if (!cur) return lw_nomem(w);
    int fwd = 0;
    uint32_t pass = 0;
    ms_status st = MS_OK;
    size_t n = w->nrecs;
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        const trace_rec *r = lw_rec(w, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            fwd = r->u.mark.value == TP_FWD;
            pass += fwd;
        } else if (r->type == TR_ALLOC && fwd) {
            st = du_new(w, cur, r->u.alloc.id, i, pass);
        } else if (r->type == TR_FREE) {
            uint64_t k; /* the forward frees it itself: not saved, nothing to drop */
            if (u64map_del(cur, r->u.free_id, &k) && fwd && w->due[k].pass == pass)
                w->due[k].rec = SIZE_MAX;
        } else if (r->type == TR_OP && fwd && r->u.op.phase == TP_FWD) {
            const trace_op *op = &r->u.op;
            for (uint32_t k = 0; k < op->n_in; k++) du_touch(w, cur, op->in[k], i, pass);
            for (uint32_t k = 0; k < op->n_out; k++) du_touch(w, cur, op->out[k], i, pass);
        }
    }
    u64map_free(cur);
    return st == MS_OK ? du_finish(w, n) : st;
}

/* Whether x, whose last forward use is now, is freed here: planned for recomputation, still
 * holding its block, inside its layer's open forward section, and not a weight cast that
 * autocast's cache holds to the end of the forward anyway. */
static lw_layer *du_layer(lw *w, const lw_tensor *x)
{
    if (x->state != TS_LIVE || x->dec != PD_RECOMPUTE || x->rbg >= 0) return NULL;
    int32_t l = x->meta->layer;
    if (l < 0 || (size_t)l >= w->n_layers) return NULL;
    lw_layer *L = &w->layers[l];
    if (L->fwd_state != 1 || x->alloc_rec < L->fwd_begin) return NULL;
    if (w->autocast_cache && ms_ends_with(x->meta->name, ".wcast")) return NULL;
    return L;
}

/* After the op at w->rec: free the recomputed tensors whose last forward use it is. */
ms_status lw_du_events(lw *w)
{
    while (w->due_pos < w->n_due && w->due[w->due_pos].rec < w->rec) w->due_pos++;
    ms_status st = MS_OK;
    for (; st == MS_OK && w->due_pos < w->n_due && w->due[w->due_pos].rec == w->rec;
         w->due_pos++) {
        const du_event *e = &w->due[w->due_pos];
        lw_tensor *x = lw_find_tensor(w, e->id);
        if (!x || x->alloc_rec != e->alloc_rec) continue;
        lw_layer *L = du_layer(w, x);
        if (!L) continue;
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
        if (st == MS_OK) st = lw_idx_push(&L->drop, (size_t)(x - w->ts)) == MS_OK
                              ? MS_OK : lw_nomem(w);
        x->state = TS_DROPPED;
        w->rep.dropped++;
    }
    return st;
}

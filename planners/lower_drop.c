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
#include <stdio.h>
#include <stdlib.h>

#include "base/u64map.h"
#include "planners/sbuild.h"

static int cmp_du_event(const void *a, const void *b)
{
    const du_event *x = a, *y = b;
    if (x->rec != y->rec) return x->rec < y->rec ? -1 : 1;
    return x->alloc_rec < y->alloc_rec ? -1 : x->alloc_rec > y->alloc_rec;
}

/* The tensor incarnation allocated at alloc_rec was touched by the forward op at rec. */
static ms_status du_touch(lw *w, u64map *cur, uint64_t id, size_t rec)
{
    uint64_t k;
    if (!u64map_get(cur, id, &k)) return MS_OK; /* made before this forward pass */
    w->due[k].rec = rec;
    return MS_OK;
}

static ms_status du_new(lw *w, u64map *cur, uint64_t id, size_t alloc_rec)
{
    if (ms_grow((void **)&w->due, &w->cap_due, w->n_due + 1, sizeof *w->due) != MS_OK ||
        u64map_put(cur, id, w->n_due))
        return lw_nomem(w);
    w->due[w->n_due++] = (du_event){ SIZE_MAX, alloc_rec, id };
    return MS_OK;
}

/* Drops the incarnations never touched by a forward op (or freed by it) and sorts the rest by last use. */
static void du_finish(lw *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n_due; i++)
        if (w->due[i].rec != SIZE_MAX) w->due[n++] = w->due[i];
    w->n_due = n;
    if (n > 1) qsort(w->due, n, sizeof *w->due, cmp_du_event);
}

/* Before the walk: for every tensor allocated in a forward phase, the record of the last op
 * of that phase that reads or writes it. */
ms_status lw_du_prescan(lw *w)
{
    u64map *cur = u64map_new(4096);
    if (!cur) return lw_nomem(w);
    int fwd = 0;
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < trace_count(w->t); i++) {
        const trace_rec *r = trace_get(w->t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            fwd = r->u.mark.value == TP_FWD;
            u64map_clear(cur);
        } else if (r->type == TR_ALLOC && fwd) {
            st = du_new(w, cur, r->u.alloc.id, i);
        } else if (r->type == TR_FREE) {
            uint64_t k; /* the forward frees it itself: not saved, nothing to drop */
            if (u64map_del(cur, r->u.free_id, &k)) w->due[k].rec = SIZE_MAX;
        } else if (r->type == TR_OP && fwd && r->u.op.phase == TP_FWD) {
            const trace_op *op = &r->u.op;
            for (uint32_t k = 0; st == MS_OK && k < op->n_in; k++)
                st = du_touch(w, cur, op->in[k], i);
            for (uint32_t k = 0; st == MS_OK && k < op->n_out; k++)
                st = du_touch(w, cur, op->out[k], i);
        }
    }
    u64map_free(cur);
    if (st == MS_OK) du_finish(w);
    return st;
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
        if (getenv("MEMSIM_ALOG")) fprintf(stderr, "DU %llu %s rec %zu\n", (unsigned long long)x->sid, x->meta->name, w->rec);
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
        if (st == MS_OK) st = lw_idx_push(&L->drop, (size_t)(x - w->ts)) == MS_OK
                              ? MS_OK : lw_nomem(w);
        x->state = TS_DROPPED;
        w->rep.dropped++;
    }
    return st;
}

/* lower_save.c — swap at save time in the per-tensor lowering (plan knob swap_at=save):
 * autograd's saved-tensor hooks as save_on_cpu writes them, each save copied to the host
 * when an op saves it and back before the backward op that reads it. Used by
 * planners/lower.c. */
#include "planners/lower_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- swap at save time (plan knob swap_at=save) ----
 * autograd's saved-tensor hooks as torch.autograd.graph.save_on_cpu writes them: the pack hook
 * copies a tensor to the host when an op saves it, so its device block goes when the forward's
 * own references to it drop (its last forward use); the unpack hook copies it back when the
 * backward needs it, into a block that lives while the backward reads it. */

static ms_status sv_push_event(lw *w, size_t rec, uint32_t kind, size_t item)
{
    if (ms_grow((void **)&w->sve, &w->cap_sve, w->n_sve + 1, sizeof *w->sve) != MS_OK)
        return lw_nomem(w);
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
    lw_decide(w, x, &d, &alpha);
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
            return lw_nomem(w);
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
    if (!n) return lw_nomem(w);
    n->bwd_rec = rec;
    n->last_fwd = w->svi[hi].last_fwd;
    return MS_OK;
}

/* Before the walk: every swapped tensor's saves, last forward use and backward reads, pass
 * by pass, as events in record order. */
ms_status lw_sv_prescan(lw *w)
{
    u64map *cur = u64map_new(1024), *arec = u64map_new(4096);
    ms_status st = cur && arec ? MS_OK : lw_nomem(w);
    uint32_t pass = 0;
    size_t fwd_begin = 0;
    int seen = 0, bwd = 0;
    for (size_t i = 0; st == MS_OK && i < w->nrecs; i++) {
        const trace_rec *r = lw_rec(w, i);
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
            if (u64map_put(arec, r->u.alloc.id, i)) st = lw_nomem(w);
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
    ms_status st = lw_put_event(w, SA_RECORD, SS_COMPUTE, e);
    return st == MS_OK ? lw_put_event(w, SA_WAIT, s, e) : st;
}

/* The pack hook: a pinned host buffer and the copy into it. */
static ms_status sv_out(lw *w, sv_item *it)
{
    lw_tensor *x = lw_find_tensor(w, it->id);
    if (!x || x->state != TS_LIVE) {
        w->rep.ignored++;
        return MS_OK;
    }
    sched_stream s = w->sv_compute ? SS_COMPUTE : SS_D2H;
    ms_status st = sv_to_stream(w, s);
    if (st == MS_OK)
        st = lw_put_tensor(w, SA_HOST_ALLOC, s, it->copy_id, lw_host_bytes(w, it->bytes));
    if (st == MS_OK) {
        /* on the compute stream it is PyTorch's blocking copy_: the host waits for it */
        sched_action a = sbuild_act(w->b, SA_COPY_D2H, s);
        a.tensor = x->sid;
        a.bytes = it->bytes;
        a.host_wait = s == SS_COMPUTE;
        st = sbuild_put(w->b, &a);
    }
    if (st == MS_OK && s != SS_COMPUTE) {
        it->ev_out = sbuild_new_event(w->b);
        st = lw_put_event(w, SA_RECORD, s, it->ev_out);
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
    lw_tensor *x = lw_find_tensor(w, it->id);
    if (!it->out || !x || x->state != TS_LIVE) return MS_OK;
    ms_status st = w->sv_compute ? MS_OK : lw_put_event(w, SA_WAIT, SS_COMPUTE, it->ev_out);
    x->state = TS_OFFLOADED;
    x->swap_bytes = 0; /* the host copies are the saves' own: the trace's free has none */
    if (st != MS_OK) return st;
    if (w->autocast_cache && ms_ends_with(x->meta->name, ".wcast"))
        return lw_idx_push(&w->sv_cache_held, (size_t)(x - w->ts)) == MS_OK ? MS_OK : lw_nomem(w);
    return lw_put_tensor(w, SA_FREE, SS_COMPUTE, x->sid, 0);
}

/* The unpack hook, just before the backward op that reads this save: a new device block
 * and the copy into it. */
static ms_status sv_in(lw *w, sv_item *it)
{
    lw_tensor *x = lw_find_tensor(w, it->id);
    if (!it->out || !x) return MS_OK;
    sched_stream s = w->sv_compute ? SS_COMPUTE : SS_H2D;
    ms_status st = sv_to_stream(w, s);
    if (st == MS_OK && s != SS_COMPUTE) st = lw_put_event(w, SA_WAIT, s, it->ev_out);
    sched_block b = it->keep_device ? SB_STAGING : sched_block_of_class(x->meta->cls);
    if (st == MS_OK) st = lw_put_block(w, s, it->copy_id, it->bytes, b);
    if (st == MS_OK) st = lw_put_tensor(w, SA_COPY_H2D, s, it->copy_id, it->bytes);
    if (st == MS_OK && s != SS_COMPUTE) {
        uint32_t e = sbuild_new_event(w->b);
        st = lw_put_event(w, SA_RECORD, s, e);
        if (st == MS_OK) st = lw_put_event(w, SA_WAIT, SS_COMPUTE, e);
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
    lw_tensor *x = lw_find_tensor(w, it->id);
    ms_status st = MS_OK;
    if (it->in) {
        st = lw_put_tensor(w, SA_FREE, SS_COMPUTE, it->copy_id, 0);
        if (x && x->sv_back) x->sv_back--;
    } else if (!w->sv_compute) {
        st = lw_put_event(w, SA_WAIT, SS_COMPUTE, it->ev_out);
    }
    if (st == MS_OK) st = lw_put_tensor(w, SA_HOST_FREE, SS_COMPUTE, it->copy_id, 0);
    it->out = it->in = 0;
    return st;
}

/* The events of record w->rec: those before its op (before = 1) or after it. Events of
 * records lowering skipped (iteration selection) are passed over. */
ms_status lw_sv_events(lw *w, int before)
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
ms_status lw_sv_cache_release(lw *w)
{
    ms_status st = MS_OK;
    for (size_t k = 0; st == MS_OK && k < w->sv_cache_held.n; k++) {
        lw_tensor *x = &w->ts[w->sv_cache_held.v[k]];
        if (x->state == TS_OFFLOADED) st = lw_put_tensor(w, SA_FREE, SS_COMPUTE, x->sid, 0);
    }
    w->sv_cache_held.n = 0;
    return st;
}

/* lower_rb.c — MEMO's rounding buffers in the per-tensor lowering (plan knob
 * rounding_buffers, §4.1, Fig. 5): which skeletal tensors of a layer share one block of one
 * of the two buffers, the block's offload, prefetch and release, and the member layout
 * (lower_rb_map, lower.h) that the MEMO planner and runtime/ read. Used by planners/lower.c. */
#include "planners/lower_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    lw_decide(w, x, &d, &alpha);
    if (d != PD_SWAP && d != PD_KEEP) return MS_OK; /* recomputed or DHA: own allocation */
    if (x->layer >= w->max_layer) {
        w->rec = rec;
        return lw_layer_range(w, "tensor", x->id, x->name, x->layer);
    }
    int64_t g = rb_find(w, pass, x->layer);
    if (g < 0) {
        if (ms_grow((void **)&w->groups, &w->cap_groups, w->n_groups + 1,
                    sizeof *w->groups) != MS_OK)
            return lw_nomem(w);
        g = (int64_t)w->n_groups++;
        rb_group *n = &w->groups[g];
        memset(n, 0, sizeof *n);
        n->pass = pass;
        n->layer = x->layer;
        n->min_alpha = 1.0;
        if (u64map_put(w->rb_key, ((uint64_t)pass << 32) | (uint32_t)x->layer, (uint64_t)g))
            return lw_nomem(w);
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
    return u64map_put(w->rb_rec, rec, (uint64_t)g) ? lw_nomem(w) : MS_OK;
}

/* Before the walk: every skeletal activation of a layer made in a forward pass (or before any
 * phase mark) that the plan keeps or swaps becomes a member of its layer's block; the buffer
 * size is the largest block. */
ms_status lw_rb_prescan(lw *w)
{
    w->rb_rec = u64map_new(1024);
    w->rb_key = u64map_new(256);
    if (!w->rb_rec || !w->rb_key) return lw_nomem(w);
    trace_phase phase = TP_NONE;
    uint32_t pass = 0;
    int seen = 0;
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < w->nrecs; i++) {
        const trace_rec *r = lw_rec(w, i);
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
    return st == MS_OK ? lw_put_block(w, SS_COMPUTE, G->sid, w->rb_bytes, SB_RBUF) : st;
}

/* Compute must not touch a prefetched block before its copy is done. */
ms_status lw_rb_ready(lw *w, rb_group *G)
{
    if (G->state != RB_PREFETCHED || G->ready) return MS_OK;
    G->ready = 1;
    return sbuild_event(w->b, SA_WAIT, SS_COMPUTE, G->e4);
}

/* After layer L's forward: the whole block goes to host (alpha-weighted bytes), then its
 * device memory is given back on the offload stream. */
ms_status lw_rb_offload(lw *w, int32_t layer)
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
        st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_D2H, G->hid, lw_rb_host_bytes(w, G));
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
ms_status lw_rb_prefetch(lw *w, int32_t layer)
{
    int64_t g = rb_find(w, w->pass, layer);
    if (g < 0) return MS_OK;
    rb_group *G = &w->groups[g];
    if (G->state != RB_OFFLOADED) return MS_OK;
    G->sid = G->hid;
    ms_status st = MS_OK;
    if (w->o.prefetch_alloc_on_compute)
        st = lw_put_block(w, SS_COMPUTE, G->sid, w->rb_bytes, SB_RBUF);
    uint32_t e3 = sbuild_new_event(w->b);
    G->e4 = sbuild_new_event(w->b);
    if (st == MS_OK) st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, G->e2);
    if (st == MS_OK && !w->o.prefetch_alloc_on_compute)
        st = lw_put_block(w, SS_H2D, G->sid, w->rb_bytes, SB_RBUF);
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
ms_status lw_rb_free_member(lw *w, lw_tensor *x)
{
    rb_group *G = &w->groups[x->rbg];
    x->state = TS_FREED;
    if (G->alive) G->alive--;
    if (G->alive) return MS_OK;
    ms_status st = MS_OK;
    if (G->state == RB_LIVE || G->state == RB_PREFETCHED) {
        st = lw_rb_ready(w, G);
        if (st == MS_OK) st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, G->sid, 0);
    } else if (G->state == RB_OFFLOADED && G->copy_bytes) {
        st = sbuild_tensor(w->b, SA_HOST_FREE, SS_D2H, G->hid, 0); /* never needed again */
    }
    G->state = RB_FREED;
    return st;
}


/* Rounding buffers at layer L's backward start: wait for the block, then recompute the
 * missing tokens of its members. */
ms_status lw_rb_backward(lw *w, lw_layer *L, int32_t layer)
{
    int64_t g = rb_find(w, w->pass, layer);
    if (g < 0) return MS_OK;
    rb_group *G = &w->groups[g];
    ms_status st = lw_rb_ready(w, G);
    if (st != MS_OK || !G->n_swap || G->min_alpha >= 1.0 || G->state != RB_PREFETCHED)
        return st;
    if (!w->chain)
        return lw_fail_rec(w, MS_ERR_UNSUPPORTED, "rounding buffers need tokenwise=chain for "
                           "alpha < 1 (layer %d)", (int)layer);
    idx_list m = { 0 };
    for (size_t i = 0; st == MS_OK && i < w->n_ts; i++)
        if (w->ts[i].rbg == g && w->ts[i].state == TS_INBUF && lw_idx_push(&m, i) != MS_OK)
            st = lw_nomem(w);
    if (st == MS_OK) st = lw_chain_recompute(w, L, layer, &m, TS_INBUF);
    free(m.v);
    return st;
}


/* A rounding-buffer member: no block of its own; its group's block is made with the first. */
ms_status lw_rb_alloc(lw *w, lw_tensor *n, uint64_t g)
{
    rb_group *G = &w->groups[g];
    n->rbg = (int64_t)g;
    if (G->state == RB_OFFLOADED || G->state == RB_PREFETCHED || G->state == RB_FREED)
        return lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is made after its layer's "
                           "rounding buffer was offloaded or released", n->meta->id,
                           n->meta->name);
    ms_status st = G->state == RB_NONE ? rb_open(w, G) : MS_OK;
    n->state = TS_INBUF;
    G->alive++;
    return st;
}


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

/* The members lw_rb_prescan found, laid out group by group. */
static ms_status rb_layout(lw *w, lower_rb_map *m)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nrecs; i++) n += u64map_get(w->rb_rec, i, NULL);
    rb_item *it = calloc(n ? n : 1, sizeof *it);
    m->v = calloc(n ? n : 1, sizeof *m->v);
    if (!it || !m->v) {
        free(it);
        return lw_nomem(w);
    }
    size_t k = 0;
    for (size_t i = 0; i < w->nrecs && k < n; i++) {
        uint64_t g;
        if (!u64map_get(w->rb_rec, i, &g)) continue;
        const trace_tensor *x = &lw_rec(w, i)->u.alloc;
        plan_decision d;
        double alpha;
        lw_decide(w, x, &d, &alpha);
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
    w.recs = trace_records(t, &w.nrecs);
    w.p = p;
    w.err = err;
    w.max_layer = t ? lw_layer_bound(t) : LOWER_MAX_LAYER;
    lower_opts_default(&w.o);
    ms_status st = m ? MS_OK : lw_nomem(&w);
    /* only the per-tensor lowering has rounding buffers */
    const lower_backend *b = p ? lower_find(p->lowering) : &lower_backend_tensor;
    int plain = b && b->rounding_buffers;
    if (st == MS_OK && plain) st = lw_index_plan(&w);
    if (st == MS_OK && plain) st = lw_read_knobs(&w);
    if (st == MS_OK && plain && w.rb) st = lw_rb_prescan(&w);
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

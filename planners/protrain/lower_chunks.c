/* lower_chunks.c — chunk-based lowering of lower_chunks.h: the schedule itself, from the chunk
 * layout (lower_chunks_layout.c), the buffer plan (lower_chunks_bufplan.c) and the knobs
 * (lower_chunks_knobs.c), naming its blocks by lower_chunks_ids.c and timing its collectives
 * by lower_chunks_coll.c. Rules and diagrams in docs/PROTRAIN.md. Used by lower_schedule()'s hook, the ProTrain cost model and policies,
 * `memsim protrain` and tests. */
#define _POSIX_C_SOURCE 200809L
#include "planners/protrain/lower_chunks.h"
#include "planners/protrain/lower_chunks_int.h"
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
        if (R->type != TR_OP || lc_op_skipped(w->state, &R->u.op, TP_FWD)) continue;
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
            st = lc_op_dur(w->m, &w->roof, &R->u.op, &us, w->err);
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
    if (lc_op_skipped(w->state, op, w->ph)) return MS_OK;
    for (uint32_t i = 0; i < op->n_in + op->n_out; i++) {
        lt *x = tfind(w, i < op->n_in ? op->in[i] : op->out[i - op->n_in]);
        if (x && (x->st == T_DROPPED || x->st == T_OFFLOADED))
            return wfail(w, MS_ERR_INVALID,
                         "op %" PRIu64 " (%s) uses tensor %" PRIu64 " of block %d while it is %s",
                         op->id, op->name, x->id, x->layer,
                         x->st == T_DROPPED ? "dropped (checkpointed)" : "swapped out");
    }
    double us;
    ms_status st = lc_op_dur(w->m, &w->roof, op, &us, w->err);
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

/* cost_protrain.c — ProTrain's runtime and peak-memory models and the configuration search
 * of cost_protrain.h. The runtime model walks the chunk access program of lower_chunks.h in
 * program order with four servers (compute, H2D, D2H, host CPU): each chunk step starts when
 * the compute is free and the gathers it needs have arrived (the per-chunk max of compute and
 * communication), gathers start when their buffer is released, swaps and collectives share
 * the link (a direction slows to its duplex share while the other one is busy), recompute
 * is added in backward, and host Adam follows each chunk's gradient offload. The memory model
 * is the operator walk of the trace's activations (every alloc and free between and inside
 * ops: ProTrain's intra- and inter-operator deltas) minus what the block roles drop, plus the
 * static chunk memory. ProTrain's Appendix A.1 formula as written (a sum over chunks of
 * max(compute, communication), PTC_RT_APPENDIX) can replace the recurrence's times. The search
 * bounds memory and time from tables built once per search and evaluates rows by increasing
 * time bound. Formulas: docs/PROTRAIN.md. */
#define _POSIX_C_SOURCE 200809L
#include "planners/protrain/cost_protrain.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/roofline.h"
#include "base/u64map.h"

struct ptc_model {
    machine_t m;
    lc_knobs k;
    lc_layout *L;
    int coll;
    /* activation profile of iteration 0 under keep-all */
    int64_t *A0, *P;         /* per step: live bytes at its start, peak within it */
    uint64_t *Dc, *Ds;       /* per block: bytes a checkpoint drops, bytes a swap moves */
    uint64_t *Rp;            /* per block: replay peak (bytes it allocates, at most) */
    uint32_t *Ns;            /* per block: tensors a swap moves (copy latencies) */
    uint64_t *sw_sz;         /* the tensors a swap moves, block by block in copy order: the
                                block's bytes up to and including each */
    double *sw_t;            /* the same: the block's copy time up to the end of each, us */
    uint32_t *sw_first;      /* per block + 1: its first entry in sw_sz */
    size_t sw_cap;
    double *rec_us;          /* per block: recompute time */
    /* scratch for estimates */
    double *e2, *e2s, *e3, *e4, *ld_end, *rel, *off, *prs, *pag;
    uint8_t *roles;
    int32_t *sw_at, *sw_for;  /* per block: where its swap-in is issued (lc_swap_issue); the
                                 swap block issued before a block's backward, or -1 */
    int32_t *sw_below;        /* per block + 1: the highest swap block below it, or -1 */
    int32_t *deferred;
    int64_t *ck_pre, *sw_pre; /* per block + 1: prefix sums of drops */
    int32_t *bwd_j;           /* per backward step: blocks below it have not run backward */
    uint32_t *fin_off, *fin;  /* per step: chunks whose last access it is (CSR) */
    uint32_t *ld_off;         /* per step: first load of the step (scratch per plan) */
    double *tend;             /* per step: compute end (scratch) */
    double *ag_us, *ar_us;    /* per chunk: NVLink all-gather (= reduce-scatter), all-reduce */
    double *own_b, *ring_b, *grad_b, *hadam_us; /* per chunk: bytes and host Adam time */
    double *nvg_h, *nvr_d, *nvp_d;/* per chunk, LC_COLL_STREAM: all-gather on H2D, reduce-scatter
                                     on D2H, persistent reduction on D2H, as copy bytes */
    int rt_model;             /* PTC_RT_RECURRENCE or PTC_RT_APPENDIX */
    double *ax;               /* appendix model scratch: 5 per chunk + 1 per step */
};

void ptc_model_set_runtime(ptc_model *M, int rt_model) { M->rt_model = rt_model; }
int ptc_model_runtime(const ptc_model *M) { return M->rt_model; }

const lc_layout *ptc_layout(const ptc_model *M) { return M->L; }
const lc_knobs *ptc_knobs(const ptc_model *M) { return &M->k; }

void ptc_model_free(ptc_model *M)
{
    if (!M) return;
    lc_layout_free(M->L);
    free(M->A0);
    free(M->P);
    free(M->Dc);
    free(M->Ds);
    free(M->Rp);
    free(M->Ns);
    free(M->sw_sz);
    free(M->sw_t);
    free(M->sw_first);
    free(M->rec_us);
    free(M->e2);
    free(M->e2s);
    free(M->e3);
    free(M->e4);
    free(M->ld_end);
    free(M->rel);
    free(M->off);
    free(M->prs);
    free(M->pag);
    free(M->roles);
    free(M->sw_at);
    free(M->sw_for);
    free(M->sw_below);
    free(M->deferred);
    free(M->ck_pre);
    free(M->sw_pre);
    free(M->bwd_j);
    free(M->fin_off);
    free(M->fin);
    free(M->ld_off);
    free(M->tend);
    free(M->ag_us);
    free(M->ar_us);
    free(M->own_b);
    free(M->ring_b);
    free(M->grad_b);
    free(M->hadam_us);
    free(M->nvg_h);
    free(M->nvr_d);
    free(M->nvp_d);
    free(M->ax);
    free(M);
}

static uint64_t shard_params(const ptc_model *M, int c);
static uint64_t gathered(const ptc_model *M, int c);
static double ring_bytes(const ptc_model *M, int c);
static double host_adam_us(const ptc_model *M, int c);

/* ---- profile: one keep-all walk of iteration 0 ---- */

typedef struct pt_tensor {
    uint64_t bytes;
    int32_t layer, step;
    trace_class cls;
    uint8_t live;
} pt_tensor;

typedef struct prof {
    const trace_t *t;
    ptc_model *M;
    u64map *idx;
    pt_tensor *ts;
    size_t n, cap;
    size_t *lo, *hi;         /* per block: forward segment record range */
    roof_params roof;
} prof;

/* Appends one swapped tensor's bytes to sw_sz (the tensors of the block being closed: the
 * lowering copies them in this order, allocation order). sw_first[n_blocks] is the end. */
static int sw_push(ptc_model *M, int32_t j, uint64_t bytes)
{
    size_t n = M->sw_first[M->L->n_blocks];
    if (n == M->sw_cap) {
        size_t cap = M->sw_cap ? 2 * M->sw_cap : 256;
        uint64_t *a = realloc(M->sw_sz, cap * sizeof *a);
        if (a) M->sw_sz = a;
        double *b = a ? realloc(M->sw_t, cap * sizeof *b) : NULL;
        if (!b) return -1;
        M->sw_t = b;
        M->sw_cap = cap;
    }
    /* each copy a latency and its bytes at the D2H rate: only the shares matter */
    double lat = M->m.link_small_copy_us > 0 ? M->m.link_small_copy_us : 0;
    double rate = M->m.link_d2h_Bps / 1e6;
    double t = lat + (rate > 0 ? (double)bytes / rate : 0);
    int first = n == M->sw_first[j];
    M->sw_sz[n] = bytes + (first ? 0 : M->sw_sz[n - 1]);
    M->sw_t[n] = t + (first ? 0 : M->sw_t[n - 1]);
    M->sw_first[M->L->n_blocks] = (uint32_t)n + 1;
    return 0;
}

static pt_tensor *pfind(prof *p, uint64_t id)
{
    uint64_t i;
    return u64map_get(p->idx, id, &i) ? &p->ts[i] : NULL;
}

/* A replayed op's time (roof_op_us). A collective without a duration, which lowering will
 * refuse, counts its memory term only, so that the estimate stays finite until then. */
static double dur(const prof *p, const trace_op *op)
{
    double us = roof_op_us(&p->M->m, &p->roof, op);
    if (us >= 0) return us;
    return roof_kernel_us(&p->M->m, &p->roof, op->kind, op->flops,
                          op->bytes_read + op->bytes_written);
}

/* Block j's replay: which ops and tensors rebuild its dropped activations (the rule of
 * lower_chunks.c's replay), their time and the bytes the replay holds at most. */
static ms_status prof_replay(prof *p, int32_t j, size_t lo, size_t hi)
{
    ptc_model *M = p->M;
    size_t n = hi > lo ? hi - lo : 0;
    u64map *need = u64map_new(64), *inrange = u64map_new(64);
    uint8_t *opneed = calloc(n ? n : 1, 1);
    if (!need || !inrange || !opneed) {
        u64map_free(need);
        u64map_free(inrange);
        free(opneed);
        return MS_ERR_NOMEM;
    }
    for (size_t r = lo; r < hi; r++) {
        const trace_rec *R = trace_get(p->t, r);
        if (R->type != TR_ALLOC || lc_managed(p->M->L, &R->u.alloc)) continue;
        u64map_put(inrange, R->u.alloc.id, 1);
        if (R->u.alloc.layer == j && R->u.alloc.cls == TC_ACT_SKEL) {
            pt_tensor *x = pfind(p, R->u.alloc.id);
            if (x && x->step >= 0) u64map_put(need, R->u.alloc.id, 2); /* a target */
        }
    }
    double us = 0;
    for (size_t r = hi; r-- > lo;) {
        const trace_rec *R = trace_get(p->t, r);
        if (R->type != TR_OP) continue;
        const trace_op *op = &R->u.op;
        int needed = 0;
        for (uint32_t o = 0; o < op->n_out && !needed; o++)
            needed = u64map_get(need, op->out[o], NULL);
        if (!needed) continue;
        opneed[r - lo] = 1;
        us += dur(p, op);
        for (uint32_t q = 0; q < op->n_in; q++)
            if (u64map_get(inrange, op->in[q], NULL) && !u64map_get(need, op->in[q], NULL))
                u64map_put(need, op->in[q], 1);
    }
    for (size_t r = lo; r < hi; r++) { /* workspaces around needed ops */
        const trace_rec *R = trace_get(p->t, r);
        if (R->type != TR_ALLOC || R->u.alloc.cls != TC_WORKSPACE) continue;
        for (size_t q = r + 1; q < hi; q++) {
            const trace_rec *Q = trace_get(p->t, q);
            if (Q->type == TR_FREE && Q->u.free_id == R->u.alloc.id) break;
            if (Q->type == TR_OP && opneed[q - lo]) {
                u64map_put(need, R->u.alloc.id, 1);
                break;
            }
        }
    }
    int64_t cur = 0, peak = 0;
    for (size_t r = lo; r < hi; r++) {
        const trace_rec *R = trace_get(p->t, r);
        uint64_t v;
        if (R->type == TR_ALLOC && u64map_get(need, R->u.alloc.id, NULL)) {
            cur += (int64_t)R->u.alloc.bytes;
            if (cur > peak) peak = cur;
        } else if (R->type == TR_FREE && u64map_get(need, R->u.free_id, &v) && v == 1) {
            pt_tensor *x = pfind(p, R->u.free_id);
            if (x) cur -= (int64_t)x->bytes;
        }
    }
    M->rec_us[j] = us;
    M->Rp[j] = (uint64_t)peak;
    u64map_free(need);
    u64map_free(inrange);
    free(opneed);
    return MS_OK;
}

static ms_status profile(prof *p, ms_error *err)
{
    ptc_model *M = p->M;
    const lc_layout *L = M->L;
    size_t n = trace_count(p->t), first = SIZE_MAX, end = n;
    for (size_t i = 0; i < n; i++) {
        const trace_rec *r = trace_get(p->t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            if (first == SIZE_MAX) first = i;
            else {
                end = i;
                break;
            }
        }
    }
    int64_t cur = 0;
    int32_t step = -1;
    int in_step = 0;
    trace_phase ph = TP_NONE;
    for (size_t i = 0; i < n && i < end; i++) {
        const trace_rec *r = trace_get(p->t, i);
        if (r->type == TR_MARK) {
            const trace_mark *mk = &r->u.mark;
            if (i < first) continue;
            if (in_step && mk->kind != TM_ITER) { /* close the step */
                const lc_step *S = &L->steps[step];
                if (S->phase == TP_FWD && S->block >= 0 && S->block < L->n_blocks) {
                    int32_t j = S->block;
                    p->hi[j] = i;
                    if (!M->Ns[j]) M->sw_first[j] = M->sw_first[L->n_blocks];
                    for (size_t q = 0; q < p->n; q++) {
                        pt_tensor *x = &p->ts[q];
                        if (!x->live || x->layer != j || x->cls != TC_ACT_SKEL) continue;
                        M->Ds[j] += x->bytes;
                        M->Ns[j]++;
                        if (x->step == step) M->Dc[j] += x->bytes;
                        if (sw_push(M, j, x->bytes))
                            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
                    }
                }
                in_step = 0;
            }
            if (mk->kind == TM_PHASE) ph = (trace_phase)mk->value;
            if ((ph == TP_FWD || ph == TP_BWD) && (mk->kind == TM_PHASE || mk->kind == TM_LAYER)) {
                step++;
                if ((size_t)step >= L->n_steps)
                    return ms_fail(err, MS_ERR_INVALID, "internal: profile and layout disagree");
                M->A0[step] = M->P[step] = cur;
                in_step = 1;
                int32_t j = L->steps[step].block;
                if (ph == TP_FWD && j >= 0 && j < L->n_blocks) p->lo[j] = i + 1;
            }
            continue;
        }
        if (r->type == TR_ALLOC) {
            const trace_tensor *x = &r->u.alloc;
            if (lc_managed(L, x)) continue;
            if (ms_grow((void **)&p->ts, &p->cap, p->n + 1, sizeof *p->ts) ||
                u64map_put(p->idx, x->id, p->n))
                return ms_fail(err, MS_ERR_NOMEM, "out of memory");
            pt_tensor *t = &p->ts[p->n++];
            t->bytes = x->bytes;
            t->layer = x->layer;
            t->cls = x->cls;
            t->step = i >= first && in_step ? step : -1;
            t->live = 1;
            cur += (int64_t)x->bytes;
            if (in_step && cur > M->P[step]) M->P[step] = cur;
        } else if (r->type == TR_FREE) {
            pt_tensor *x = pfind(p, r->u.free_id);
            if (x && x->live) {
                x->live = 0;
                cur -= (int64_t)x->bytes;
            }
        }
    }
    for (int32_t j = 0; j < L->n_blocks; j++) {
        if (L->fwd_step[j] < 0) continue;
        ms_status st = prof_replay(p, j, p->lo[j], p->hi[j]);
        if (st != MS_OK) return ms_fail(err, st, "out of memory");
    }
    return MS_OK;
}

ms_status ptc_model_new(const trace_t *t, const machine_t *m, const lc_knobs *k,
                        ptc_model **out, ms_error *err)
{
    *out = NULL;
    if (!m) return ms_fail(err, MS_ERR_INVALID, "the ProTrain cost model needs a machine");
    ptc_model *M = calloc(1, sizeof *M);
    if (!M) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    M->m = *m;
    M->k = *k;
    ms_status st = lc_layout_new(t, m, k, &M->L, err);
    if (st != MS_OK) {
        ptc_model_free(M);
        return st;
    }
    M->k.chunk_bytes = M->L->chunk_bytes;
    M->coll = lc_coll_mode(&M->k, m, M->L->dp);
    size_t S = M->L->n_steps + 1, B = (size_t)M->L->n_blocks + 1, C = M->L->n_chunks + 1;
    M->A0 = calloc(S, sizeof *M->A0);
    M->P = calloc(S, sizeof *M->P);
    M->rel = calloc(S, sizeof *M->rel);
    M->Dc = calloc(B, sizeof *M->Dc);
    M->Ds = calloc(B, sizeof *M->Ds);
    M->Rp = calloc(B, sizeof *M->Rp);
    M->Ns = calloc(B, sizeof *M->Ns);
    M->sw_first = calloc(B, sizeof *M->sw_first);
    M->rec_us = calloc(B, sizeof *M->rec_us);
    M->e2 = calloc(B, sizeof *M->e2);
    M->e2s = calloc(B, sizeof *M->e2s);
    M->e3 = calloc(B, sizeof *M->e3);
    M->e4 = calloc(B, sizeof *M->e4);
    M->roles = calloc(B, 1);
    M->sw_at = calloc(B, sizeof *M->sw_at);
    M->sw_for = calloc(B, sizeof *M->sw_for);
    M->sw_below = calloc(B, sizeof *M->sw_below);
    M->off = calloc(C, sizeof *M->off);
    M->prs = calloc(C, sizeof *M->prs);
    M->pag = calloc(C, sizeof *M->pag);
    M->deferred = calloc(C, sizeof *M->deferred);
    M->ld_end = calloc(M->L->n_needs + S, sizeof *M->ld_end); /* loads <= accesses */
    M->ck_pre = calloc(B, sizeof *M->ck_pre);
    M->sw_pre = calloc(B, sizeof *M->sw_pre);
    M->bwd_j = calloc(S, sizeof *M->bwd_j);
    M->fin_off = calloc(S + 1, sizeof *M->fin_off);
    M->fin = calloc(C, sizeof *M->fin);
    M->ld_off = calloc(S + 1, sizeof *M->ld_off);
    M->tend = calloc(S, sizeof *M->tend);
    M->ag_us = calloc(C, sizeof *M->ag_us);
    M->ar_us = calloc(C, sizeof *M->ar_us);
    M->own_b = calloc(C, sizeof *M->own_b);
    M->ring_b = calloc(C, sizeof *M->ring_b);
    M->grad_b = calloc(C, sizeof *M->grad_b);
    M->hadam_us = calloc(C, sizeof *M->hadam_us);
    M->nvg_h = calloc(C, sizeof *M->nvg_h);
    M->nvr_d = calloc(C, sizeof *M->nvr_d);
    M->nvp_d = calloc(C, sizeof *M->nvp_d);
    M->ax = calloc(5 * C + S, sizeof *M->ax);
    prof p = {.t = t, .M = M};
    roof_params_default(&p.roof);
    p.idx = u64map_new(4096);
    p.lo = calloc(B, sizeof *p.lo);
    p.hi = calloc(B, sizeof *p.hi);
    if (!M->A0 || !M->P || !M->rel || !M->Dc || !M->Ds || !M->Rp || !M->Ns || !M->rec_us ||
        !M->sw_first ||
        !M->e2 || !M->e2s || !M->e3 || !M->e4 || !M->roles || !M->off || !M->prs || !M->pag ||
        !M->deferred || !M->sw_at || !M->sw_for || !M->sw_below ||
        !M->ld_end || !p.idx || !p.lo || !p.hi || !M->ck_pre || !M->sw_pre || !M->bwd_j ||
        !M->fin_off || !M->fin || !M->ld_off || !M->tend || !M->ag_us || !M->ar_us || !M->own_b ||
        !M->ring_b || !M->grad_b || !M->hadam_us || !M->nvg_h || !M->nvr_d || !M->nvp_d || !M->ax)
        st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    if (st == MS_OK) st = profile(&p, err);
    for (size_t c = 0; st == MS_OK && c < M->L->n_chunks; c++) { /* per-chunk constants */
        int ci = (int)c;
        M->ag_us[c] = lc_coll_us(m, gathered(M, ci), M->L->dp);
        M->ar_us[c] = lc_allreduce_us(m, gathered(M, ci), M->L->dp);
        M->own_b[c] = ceil(M->k.param_xfer_bytes * (double)shard_params(M, ci));
        M->ring_b[c] = ring_bytes(M, ci);
        M->grad_b[c] = ceil(M->k.grad_xfer_bytes * (double)shard_params(M, ci));
        M->hadam_us[c] = m->host_adam_params_per_s > 0 ? host_adam_us(M, ci) : 0;
        if (M->coll == LC_COLL_STREAM && M->L->dp > 1) {
            M->nvg_h[c] = ceil(M->ag_us[c] * m->link_h2d_Bps / 1e6);
            M->nvr_d[c] = ceil(M->ag_us[c] * m->link_d2h_Bps / 1e6);
            M->nvp_d[c] = ceil((M->k.persist_shard ? M->ag_us[c] : M->ar_us[c]) *
                               m->link_d2h_Bps / 1e6);
        }
    }
    if (st == MS_OK) { /* backward steps: which blocks are still ahead */
        const lc_layout *L = M->L;
        int seen_block = 0;
        for (size_t i = 0; i < L->n_steps; i++) {
            const lc_step *St = &L->steps[i];
            if (St->phase != TP_BWD) continue;
            if (St->block >= 0) {
                seen_block = 1;
                M->bwd_j[i] = St->block;
            } else {
                M->bwd_j[i] = seen_block ? -1 : L->n_blocks;
            }
        }
    }
    u64map_free(p.idx);
    free(p.ts);
    free(p.lo);
    free(p.hi);
    if (st != MS_OK) {
        ptc_model_free(M);
        return st;
    }
    *out = M;
    return MS_OK;
}

/* ---- sizes and rates ---- */

static uint64_t shard_params(const ptc_model *M, int c)
{
    uint64_t dp = (uint64_t)M->L->dp;
    return (M->L->chunks[c].params + dp - 1) / dp;
}
static uint64_t gathered(const ptc_model *M, int c)
{
    return M->L->chunks[c].params * (uint64_t)M->L->dtype_bytes;
}
static double ring_bytes(const ptc_model *M, int c)
{
    int dp = M->L->dp;
    if (dp <= 1 || M->coll != LC_COLL_LINK) return 0;
    return ceil((double)gathered(M, c) * (dp - 1) / dp / M->k.coll_link_eff);
}
static double host_adam_us(const ptc_model *M, int c)
{
    return (double)shard_params(M, c) / (M->m.host_adam_params_per_s * M->k.host_adam_scale) * 1e6;
}
static uint64_t opt_params(const ptc_model *M, int c)
{
    return M->k.persist_shard ? shard_params(M, c) : M->L->chunks[c].params;
}
static uint64_t opt_bytes(const ptc_model *M, int c)
{
    return (uint64_t)ceil(M->k.gpu_opt_bytes_per_param * (double)opt_params(M, c));
}

static uint64_t static_bytes(const ptc_model *M, const ptc_config *c)
{
    uint64_t b = (uint64_t)c->n_buffer * M->L->chunk_bytes;
    for (int i = 0; i < c->n_persist; i++) b += M->L->chunk_bytes + opt_bytes(M, i);
    return b;
}

/* ---- the transfer servers ---- */

typedef struct srv {
    double h, d, cpu, c;     /* free times, us */
    double rh, rd, dup;      /* rates, bytes/us */
    double lat;              /* per copy, us */
    double piece;            /* copies are cut at the chunk size */
} srv;

/* A transfer of `bytes` on direction `dir` (0 H2D, 1 D2H) ready at `ready`; returns its end.
 * While the other direction is busy, both get their duplex share; `paired` transfers (the two
 * halves of a ring collective through host memory) run against each other all along. */
static double xfer_p(srv *v, int dir, double ready, double bytes, int paired)
{
    if (bytes <= 0) return ready;
    double *me = dir ? &v->d : &v->h, other = dir ? v->h : v->d;
    double full = dir ? v->rd : v->rh;
    double shared = v->dup > 0 && v->dup < 2 * full ? v->dup / 2 : full;
    double start = *me > ready ? *me : ready;
    double pieces = ceil(bytes / v->piece);
    double t = start + pieces * v->lat, left = bytes;
    if (paired) other = INFINITY;
    if (other > t && shared < full) {
        double part = (other - t) * shared;
        if (part >= left) {
            t += left / shared;
            left = 0;
        } else {
            left -= part;
            t = other;
        }
    }
    t += left / full;
    *me = t;
    return t;
}

static double xfer(srv *v, int dir, double ready, double bytes)
{
    return xfer_p(v, dir, ready, bytes, 0);
}

/* The servers at time 0 with M's link rates. */
static srv srv_idle(const ptc_model *M)
{
    srv v = {0};
    v.rh = M->m.link_h2d_Bps / 1e6;
    v.rd = M->m.link_d2h_Bps / 1e6;
    v.dup = M->m.link_duplex_Bps / 1e6;
    v.lat = M->m.link_small_copy_us > 0 ? M->m.link_small_copy_us : 0;
    v.piece = (double)M->L->chunk_bytes;
    return v;
}

/* The prefetch of swapped block i: starts when the H2D queue reaches it. */
static void swap_in(ptc_model *M, srv *v, int i)
{
    double ready = v->c > M->e2[i] ? v->c : M->e2[i];
    M->e3[i] = v->h > ready ? v->h : ready;
    M->e4[i] = xfer(v, 0, ready, (double)M->Ds[i]);
}

/* ---- memory ---- */

/* Bytes of block j's swapped tensors whose copies have ended when a fraction f of its swap-out
 * time has passed (each tensor takes its share of the time: latencies are per tensor too). */
static int64_t copied_whole(const ptc_model *M, int j, double f)
{
    uint32_t a = M->sw_first[j], n = M->Ns[j], k = 0;
    if (!n) return 0;
    double t = f * M->sw_t[a + n - 1] * (1 + 1e-12);
    while (k < n && M->sw_t[a + k] <= t) k++;
    return k ? (int64_t)M->sw_sz[a + k - 1] : 0;
}

/* Activation peak of c given the swap-out completion times e2 (NULL: instantaneous) and the
 * compute start time of every step (NULL with e2 NULL). Linear in steps + blocks: the drops
 * are prefix sums over the blocks. */
static int64_t act_peak(const ptc_model *M, const ptc_config *c, const uint8_t *roles,
                        const double *e2, const double *tstart, const double *e3,
                        const double *tend)
{
    const lc_layout *L = M->L;
    int N = L->n_blocks;
    int64_t *ck = M->ck_pre, *sw = M->sw_pre;
    int32_t *at = M->sw_at, *below = M->sw_below;
    lc_swap_issue(roles, N, M->k.swap_lead, at);
    below[0] = -1;
    for (int i = 0; i < N; i++) below[i + 1] = roles[i] == LC_SWAP ? i : below[i];
    /* ck[j]: drops of the checkpoint blocks below j; sw[j]: of the swap blocks whose
     * prefetch is not yet issued when block j runs its backward (at[k] < j) */
    ck[0] = 0;
    for (int i = 0; i <= N; i++) sw[i] = 0;
    for (int i = 0; i < N; i++) {
        ck[i + 1] = ck[i] + (roles[i] == LC_CKPT ? (int64_t)M->Dc[i] : 0);
        if (roles[i] == LC_SWAP && at[i] < N) sw[at[i] + 1] += (int64_t)M->Ds[i];
    }
    for (int i = 0; i < N; i++) sw[i + 1] += sw[i];
    int64_t peak = 0, fck = 0, fsw = 0;
    int fdone = 0;     /* forward: blocks whose forward step is behind */
    int sdone = 0;     /* forward: swap blocks checked for completion, in block order */
    for (size_t s = 0; s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        int64_t drop;
        if (S->phase == TP_FWD) {
            while (fdone < N && L->fwd_step[fdone] >= 0 && L->fwd_step[fdone] < (int32_t)s) {
                if (roles[fdone] == LC_CKPT) fck += (int64_t)M->Dc[fdone];
                fdone++;
            }
            /* swap-outs finish in block order (one D2H queue); the one in progress has freed
             * the tensors already copied, each when its copy ends */
            int64_t part = 0;
            while (sdone < fdone) {
                if (roles[sdone] == LC_SWAP) {
                    if (e2 && e2[sdone] > tstart[s]) {
                        double b = M->e2s[sdone], f = e2[sdone] > b && tstart[s] > b
                                                          ? (tstart[s] - b) / (e2[sdone] - b) : 0;
                        part = copied_whole(M, sdone, f);
                        break;
                    }
                    fsw += (int64_t)M->Ds[sdone];
                }
                sdone++;
            }
            drop = fck + fsw + part;
        } else {
            int j = M->bwd_j[s]; /* blocks below j still hold their drops */
            if (j > N) j = N;
            drop = j > 0 ? ck[j] + sw[j] : 0;
            /* prefetches issued whose copy has not started by the step's end: the swap
             * blocks below j issued already (at[] grows with the block) */
            for (int i = j > 0 ? below[j < N ? j : N] : -1; e3 && i >= 0 && at[i] >= j;
                 i = below[i])
                if (e3[i] >= tend[s]) drop += (int64_t)M->Ds[i];
        }
        int64_t a = M->P[s] - drop;
        if (S->phase == TP_BWD && S->block >= 0 && S->block < N && roles[S->block] == LC_CKPT) {
            int64_t r = M->A0[s] - drop - (int64_t)M->Dc[S->block] + (int64_t)M->Rp[S->block];
            if (r > a) a = r;
        }
        if (a > peak) peak = a;
    }
    (void)c;
    return peak;
}

uint64_t ptc_peak_lower_bound(const ptc_model *M, const ptc_config *c)
{
    uint8_t *roles = malloc((size_t)M->L->n_blocks + 1);
    if (!roles || lc_block_roles(M->L->n_blocks, c->n_swap, c->n_ckpt, roles, NULL) != MS_OK) {
        free(roles);
        return UINT64_MAX;
    }
    int64_t a = act_peak(M, c, roles, NULL, NULL, NULL, NULL);
    free(roles);
    uint64_t s = static_bytes(M, c);
    uint64_t pk = s + (uint64_t)(a > 0 ? a : 0);
    return pk > M->k.init_device_bytes ? pk : M->k.init_device_bytes;
}

int ptc_swap_interval(const ptc_model *M)
{
    const lc_layout *L = M->L;
    double rate = M->m.link_d2h_Bps / 1e6, fwd = 0, sw = 0;
    int n = 0;
    for (int j = 0; j < L->n_blocks; j++) {
        if (L->fwd_step[j] < 0) continue;
        fwd += L->steps[L->fwd_step[j]].compute_us;
        sw += (double)M->Ds[j] / rate;
        n++;
    }
    if (!n || fwd <= 0) return 1;
    double k = ceil(sw / fwd);
    /* an interval beyond the blocks allows one swapped block, as any larger one (and keeps
     * an extreme profile's quotient out of int's range) */
    if (!(k <= L->n_blocks)) return L->n_blocks > 0 ? L->n_blocks : 1;
    return k < 1 ? 1 : (int)k;
}

int ptc_swap_max(const ptc_model *M, int cap)
{
    int nb = M->L->n_blocks, nint = ptc_swap_interval(M);
    int n = (nb + nint - 1) / nint;
    if (cap >= 0 && n > cap) n = cap;
    return n > nb ? nb : n;
}

/* ---- runtime ---- */

static void appendix_times(ptc_model *M, const ptc_config *c, const lc_bufplan *bp,
                           ptc_estimate *e);

static ms_status estimate_run(ptc_model *M, const ptc_config *c, const lc_bufplan *bp,
                              int defer, ptc_estimate *e, ms_error *err);

/* The estimate of c under the knob persist_gather; auto: the faster of the two placements
 * (the step's, on a tie; always the step's under the appendix formula, which charges the
 * all-gather nowhere). */
static ms_status estimate_plan(ptc_model *M, const ptc_config *c, const lc_bufplan *bp,
                               ptc_estimate *e, ms_error *err)
{
    int pg = M->k.persist_gather;
    if (c->n_persist == 0 || !lc_persist_gather_movable(&M->k, M->coll, M->L->dp) ||
        pg == LC_PG_STEP ||
        (pg == LC_PG_AUTO && M->rt_model == PTC_RT_APPENDIX))
        return estimate_run(M, c, bp, 0, e, err);
    if (pg == LC_PG_NEXT) return estimate_run(M, c, bp, 1, e, err);
    ptc_estimate en;
    ms_status st = estimate_run(M, c, bp, 1, &en, err);
    if (!st) st = estimate_run(M, c, bp, 0, e, err);
    if (!st && en.t_iter_s < e->t_iter_s) *e = en;
    return st;
}

/* One estimate of c; defer: the persistent chunks' all-gathers run at the iteration's start. */
static ms_status estimate_run(ptc_model *M, const ptc_config *c, const lc_bufplan *bp,
                              int defer, ptc_estimate *e, ms_error *err)
{
    const lc_layout *L = M->L;
    int N = L->n_blocks, dp = L->dp;
    ms_status st = lc_block_roles(N, c->n_swap, c->n_ckpt, M->roles, err);
    if (st != MS_OK) return st;
    lc_swap_issue(M->roles, N, M->k.swap_lead, M->sw_at);
    for (int i = 0; i <= N; i++) M->sw_for[i] = -1;
    for (int i = 0; i < N; i++)
        if (M->sw_at[i] >= 0 && M->sw_at[i] < N) M->sw_for[M->sw_at[i]] = i;
    memset(e, 0, sizeof *e);
    e->valid = 1;
    srv v = srv_idle(M);
    double *ld_end = M->ld_end, *tstart = M->ld_end + bp->n_loads; /* then per step */
    double *tend = M->tend;
    /* loads by step (they come sorted by step) */
    for (size_t q = 0, l = 0; q <= L->n_steps; q++) {
        while (l < bp->n_loads && bp->loads[l].step < (int32_t)q) l++;
        M->ld_off[q] = (uint32_t)l;
    }
    /* chunks whose last access each step is */
    memset(M->fin_off, 0, (L->n_steps + 1) * sizeof *M->fin_off);
    for (size_t cc = 0; cc < L->n_chunks; cc++)
        if (bp->last_step[cc] >= 0) M->fin_off[bp->last_step[cc] + 1]++;
    for (size_t q = 0; q < L->n_steps; q++) M->fin_off[q + 1] += M->fin_off[q];
    for (size_t cc = 0; cc < L->n_chunks; cc++) {
        if (bp->last_step[cc] < 0) continue;
        size_t q = (size_t)bp->last_step[cc];
        M->fin[M->fin_off[q]++] = (uint32_t)cc;
    }
    for (size_t q = L->n_steps; q > 0; q--) M->fin_off[q] = M->fin_off[q - 1];
    M->fin_off[0] = 0;
    size_t next = 0, n_def = 0;
    double t_fwd = -1;
    int prev_bwd = 0;
    for (int i = 0; i < N; i++) M->e2[i] = M->e3[i] = M->e4[i] = 0;
#define EMIT_LOADS(pos)                                                                      \
    while (next < bp->n_loads && bp->loads[next].emit_after <= (pos)) {                      \
        const lc_load *ld = &bp->loads[next];                                                \
        double ready = ld->rel_kind == LC_REL_ITER ? 0                                       \
                       : ld->rel_kind == LC_REL_STEP ? M->rel[ld->rel_ref]                   \
                                                     : M->off[ld->rel_ref];                  \
        double own = M->own_b[ld->chunk] + M->nvg_h[ld->chunk];                              \
        double ring = M->ring_b[ld->chunk];                                                  \
        double h = xfer_p(&v, 0, ready, own + ring, ring > 0);                               \
        double d = ring > 0 ? xfer_p(&v, 1, ready, ring, 1) : ready;                         \
        ld_end[next++] = h > d ? h : d;                                                      \
    }
    /* persist_gather=next: the persistent chunks' all-gathers of the last step's updates lead
     * the link queues at the iteration's start, before the buffers' first loads */
    e->persist_gather = defer ? LC_PG_NEXT : LC_PG_STEP;
    for (int ci = 0; defer && ci < c->n_persist; ci++) {
        if (L->first_use[ci] < 0) continue;
        if (M->coll == LC_COLL_STREAM) M->pag[ci] = xfer(&v, 0, 0, M->nvg_h[ci]);
        else {
            double a = xfer_p(&v, 1, 0, M->ring_b[ci], 1), b = xfer_p(&v, 0, 0, M->ring_b[ci], 1);
            M->pag[ci] = a > b ? a : b;
        }
    }
    EMIT_LOADS(-1);
    for (size_t s = 0; s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        int j = S->block;
        for (uint32_t q = 0; defer && q < S->n_need; q++) {
            uint32_t ci = L->needs[S->need_first + q];
            if ((int)ci < c->n_persist && L->first_use[ci] == (int32_t)s && M->pag[ci] > v.c)
                v.c = M->pag[ci];
        }
        if (S->phase == TP_BWD) {
            if (!prev_bwd) {
                t_fwd = v.c;
                for (int i = N - 1; i >= 0; i--)
                    if (M->sw_at[i] == N) swap_in(M, &v, i);
            }
            prev_bwd = 1;
            if (j >= 0 && j < N && M->sw_for[j] >= 0) swap_in(M, &v, M->sw_for[j]);
        }
        for (size_t l = M->ld_off[s]; l < M->ld_off[s + 1]; l++) {
            if (ld_end[l] > v.c) v.c = ld_end[l];
            if (M->coll == LC_COLL_COMPUTE && dp > 1) v.c += M->ag_us[bp->loads[l].chunk];
        }
        if (S->phase == TP_BWD && j >= 0 && j < N) {
            if (M->roles[j] == LC_SWAP && M->e4[j] > v.c) v.c = M->e4[j];
            else if (M->roles[j] == LC_CKPT) {
                v.c += M->rec_us[j];
                e->recompute_s += M->rec_us[j] / 1e6;
            }
        }
        tstart[s] = v.c;
        v.c += S->compute_us;
        tend[s] = v.c;
        if (S->phase == TP_FWD && j >= 0 && j < N && M->roles[j] == LC_SWAP) {
            /* tensors copied one by one: a latency each */
            double lat = v.lat;
            v.lat = lat * (M->Ns[j] ? M->Ns[j] : 1);
            M->e2s[j] = v.d > v.c ? v.d : v.c;
            M->e2[j] = xfer(&v, 1, v.c, (double)M->Ds[j]);
            v.lat = lat;
        }
        M->rel[s] = v.c;
        for (uint32_t fi = M->fin_off[s]; fi < M->fin_off[s + 1]; fi++) {
            int ci = (int)M->fin[fi];
            double ring = M->ring_b[ci];
            if (ci < c->n_persist) {
                if (dp <= 1) continue;
                if (M->coll == LC_COLL_COMPUTE)
                    v.c += M->k.persist_shard ? M->ag_us[ci] : M->ar_us[ci];
                else if (M->coll == LC_COLL_STREAM)
                    M->prs[ci] = xfer(&v, 1, v.c, M->nvp_d[ci]);
                else {
                    double rb = M->k.persist_shard ? ring : 2 * ring;
                    double a = xfer_p(&v, 1, v.c, rb, 1), b = xfer_p(&v, 0, v.c, rb, 1);
                    M->prs[ci] = a > b ? a : b;
                }
                continue;
            }
            if (M->coll == LC_COLL_COMPUTE && dp > 1) v.c += M->ag_us[ci];
            double g = v.c;
            if (ring > 0) {
                double a = xfer_p(&v, 1, g, ring, 1), b = xfer_p(&v, 0, g, ring, 1);
                g = a > b ? a : b;
            }
            M->off[ci] = xfer(&v, 1, g, M->grad_b[ci] + M->nvr_d[ci]);
            if (M->k.overlap_host_adam) {
                v.cpu = (v.cpu > M->off[ci] ? v.cpu : M->off[ci]) + M->hadam_us[ci];
            } else {
                M->deferred[n_def++] = ci;
            }
        }
        EMIT_LOADS((int32_t)s);
    }
#undef EMIT_LOADS
    if (t_fwd < 0) t_fwd = v.c;
    double bwd_end = v.c;
    for (int ci = 0; ci < c->n_persist; ci++) {
        if ((M->coll == LC_COLL_LINK || M->coll == LC_COLL_STREAM) && dp > 1 &&
            M->prs[ci] > v.c)
            v.c = M->prs[ci];
        v.c += L->adam_gpu_us_per_param * (double)opt_params(M, ci);
        if (dp <= 1 || !M->k.persist_shard || defer) continue;
        if (M->coll == LC_COLL_COMPUTE) v.c += M->ag_us[ci];
        else if (M->coll == LC_COLL_STREAM) M->pag[ci] = xfer(&v, 0, v.c, M->nvg_h[ci]);
        else {
            double ring = M->ring_b[ci], g = v.c;
            double a = xfer_p(&v, 1, g, ring, 1), b = xfer_p(&v, 0, g, ring, 1);
            M->pag[ci] = a > b ? a : b;
        }
    }
    if (n_def && v.cpu < bwd_end) v.cpu = bwd_end;
    for (size_t i = 0; i < n_def; i++) {
        int ci = M->deferred[i];
        v.cpu = (v.cpu > M->off[ci] ? v.cpu : M->off[ci]) + M->hadam_us[ci];
    }
    if ((M->coll == LC_COLL_LINK || M->coll == LC_COLL_STREAM) && dp > 1 && M->k.persist_shard &&
        !defer)
        for (int ci = 0; ci < c->n_persist; ci++)
            if (M->pag[ci] > v.c) v.c = M->pag[ci];
    double gpu_end = v.c;
    if (M->k.step_sync && v.cpu > v.c) v.c = v.cpu;
    double end = v.c;
    if (v.h > end) end = v.h;
    if (v.d > end) end = v.d;
    if (v.cpu > end) end = v.cpu;
    e->t_iter_s = end / 1e6;
    e->t_fwd_s = t_fwd / 1e6;
    e->t_bwd_s = (bwd_end - t_fwd) / 1e6;
    e->t_gpu_optim_s = (gpu_end - bwd_end) / 1e6;
    e->t_cpu_optim_s = v.cpu > t_fwd ? (v.cpu - t_fwd) / 1e6 : 0;
    /* memory */
    int64_t a = act_peak(M, c, M->roles, M->e2, tstart, M->e3, tend);
    e->static_bytes = static_bytes(M, c);
    e->act_peak_bytes = (uint64_t)(a > 0 ? a : 0);
    e->peak_bytes = e->static_bytes + e->act_peak_bytes;
    if (M->k.init_device_bytes > e->peak_bytes) e->peak_bytes = M->k.init_device_bytes;
    uint64_t host = 0, staging = (uint64_t)c->n_buffer * L->chunk_bytes;
    for (size_t ci = (size_t)c->n_persist; ci < L->n_chunks; ci++)
        host += lc_host_chunk_bytes(&M->k, shard_params(M, (int)ci));
    if ((M->coll == LC_COLL_LINK || M->coll == LC_COLL_STREAM) && dp > 1)
        staging += (uint64_t)c->n_persist *
                   (LC_COLL_STAGE_BYTES < L->chunk_bytes ? LC_COLL_STAGE_BYTES : L->chunk_bytes);
    if (M->k.staging_separate) host += staging;
    else if (staging > host) host = staging;
    for (int i = 0; i < N; i++)
        if (M->roles[i] == LC_SWAP) host += M->Ds[i];
    e->host_bytes = host;
    if (M->rt_model == PTC_RT_APPENDIX) appendix_times(M, c, bp, e);
    return MS_OK;
}

/* ---- the appendix runtime model (PTC_RT_APPENDIX) ---- */

/* One transfer alone on an idle link: `h` bytes H2D and `d` D2H, `ring` of each the paired
 * halves of a collective through host memory. us. */
static double alone_us(const ptc_model *M, double h, double d, int paired)
{
    srv v = srv_idle(M);
    double a = xfer_p(&v, 0, 0, h, paired), b = xfer_p(&v, 1, 0, d, paired);
    return a > b ? a : b;
}

/* Gathering chunk c (its shard uploaded, the rest all-gathered): ProTrain's T_gather +
 * T_upload. us. */
static double gather_us(const ptc_model *M, int c)
{
    double ring = M->ring_b[c];
    double t = alone_us(M, M->own_b[c] + M->nvg_h[c] + ring, ring, ring > 0);
    if (M->coll == LC_COLL_COMPUTE && M->L->dp > 1) t += M->ag_us[c];
    return t;
}

/* Reducing chunk c's gradients over the ranks (T_reduce, every chunk) and, for a
 * non-persistent one, offloading this rank's shard (T_offload). us. */
static double reduce_us(const ptc_model *M, int c, int persistent)
{
    double t = 0, ring = M->ring_b[c];
    int ar = persistent && !M->k.persist_shard; /* an all-reduce, not a reduce-scatter */
    if (M->L->dp > 1) {
        if (M->coll == LC_COLL_COMPUTE) t = ar ? M->ar_us[c] : M->ag_us[c];
        else if (ring > 0) t = ar ? alone_us(M, 2 * ring, 2 * ring, 1) : alone_us(M, ring, ring, 1);
        else t = alone_us(M, 0, persistent ? M->nvp_d[c] : M->nvr_d[c], 0);
    }
    if (!persistent) t += alone_us(M, 0, M->grad_b[c], 0);
    return t;
}

/* ProTrain's runtime model as its Appendix A.1 writes it (docs/PROTRAIN.md §4): every phase
 * a sum over chunks of max(compute, communication), no queues carried from chunk to chunk.
 * A step's compute belongs to the chunk whose forward window it falls in (the newest chunk
 * the forward has reached; a backward step takes its block's forward window). Forward:
 * non-persistent chunks gather; backward: every chunk reduces (Eq. 6 charges T_reduce on all
 * of them), non-persistent ones offload and, when the buffer plan reloads them, gather
 * again; swaps add their copy to their block's window; recomputation adds to the compute.
 * T_gpu_optim: GPU Adam of the persistent chunks; T_cpu_optim: host Adam of the others.
 * What it leaves out and the simulator does not: the persistent chunks' all-gather after a
 * sharded Adam (or an all-reduce's second half), queueing across chunks. */
static void appendix_times(ptc_model *M, const ptc_config *c, const lc_bufplan *bp,
                           ptc_estimate *e)
{
    const lc_layout *L = M->L;
    int Nc = (int)L->n_chunks, N = L->n_blocks;
    double *cf = M->ax, *cb = cf + Nc, *mf = cb + Nc, *mb = mf + Nc;
    double *reload = mb + Nc;  /* per chunk: 1 if the backward gathers it again */
    double *own = reload + Nc; /* per step: its window (chunk), as a double */
    memset(M->ax, 0, (5 * (size_t)Nc + L->n_steps) * sizeof *M->ax);
    int w = 0, first_w = -1, last_fwd_w = 0;
    for (size_t s = 0; s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        if (S->phase != TP_FWD) continue;
        for (uint32_t j = 0; j < S->n_need; j++) {
            int ch = (int)L->needs[S->need_first + j];
            if (ch > w) w = ch;
        }
        if (first_w < 0) first_w = w;
        own[s] = w;
        last_fwd_w = w;
        cf[w] += S->compute_us;
    }
    if (first_w < 0) first_w = 0;
    int seen_block = 0;
    for (size_t s = 0; s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        if (S->phase != TP_BWD) continue;
        int j = S->block;
        if (j >= 0 && j < N && L->fwd_step[j] >= 0) {
            seen_block = 1;
            w = (int)own[L->fwd_step[j]];
        } else {
            w = seen_block ? first_w : last_fwd_w;
        }
        cb[w] += S->compute_us;
        if (j >= 0 && j < N && M->roles[j] == LC_CKPT) cb[w] += M->rec_us[j];
        if (j >= 0 && j < N && M->roles[j] == LC_SWAP)
            mb[w] += alone_us(M, (double)M->Ds[j], 0, 0);
    }
    for (int j = 0; j < N; j++)
        if (M->roles[j] == LC_SWAP && L->fwd_step[j] >= 0)
            mf[(int)own[L->fwd_step[j]]] += alone_us(M, 0, (double)M->Ds[j], 0);
    for (size_t l = 0; l < bp->n_loads; l++)
        if (L->steps[bp->loads[l].step].phase == TP_BWD) reload[bp->loads[l].chunk] = 1;
    double tf = 0, tb = 0, gpu = 0, cpu = 0;
    for (int ch = 0; ch < Nc; ch++) {
        int pers = ch < c->n_persist, used = bp->last_step[ch] >= 0;
        if (used) {
            if (!pers) mf[ch] += gather_us(M, ch);
            mb[ch] += reduce_us(M, ch, pers) + (!pers && reload[ch] > 0 ? gather_us(M, ch) : 0);
        }
        tf += cf[ch] > mf[ch] ? cf[ch] : mf[ch];
        tb += cb[ch] > mb[ch] ? cb[ch] : mb[ch];
        if (pers) gpu += L->adam_gpu_us_per_param * (double)opt_params(M, ch);
        else if (used) cpu += M->hadam_us[ch];
    }
    e->t_fwd_s = tf / 1e6;
    e->t_bwd_s = tb / 1e6;
    e->t_gpu_optim_s = gpu / 1e6;
    e->t_cpu_optim_s = cpu / 1e6;
    double tail = tb + gpu > cpu ? tb + gpu : cpu;
    e->t_iter_s = (tf + tail) / 1e6;
}

ms_status ptc_estimate_config(ptc_model *M, const ptc_config *c, ptc_estimate *e,
                              ms_error *err)
{
    memset(e, 0, sizeof *e);
    if (c->n_persist < 0 || (size_t)c->n_persist > M->L->n_chunks || c->n_buffer < 0 ||
        c->n_swap < 0 || c->n_ckpt < 0 || c->n_swap + c->n_ckpt > M->L->n_blocks)
        return ms_fail(err, MS_ERR_INVALID,
                       "configuration (n_persist %d, n_buffer %d, n_swap %d, n_checkpoint %d) is "
                       "out of range for %zu chunks and %d blocks", c->n_persist, c->n_buffer,
                       c->n_swap, c->n_ckpt, M->L->n_chunks, M->L->n_blocks);
    if ((size_t)c->n_persist < M->L->n_chunks &&
        !(M->m.host_adam_params_per_s > 0))
        return ms_fail(err, MS_ERR_INVALID, "machine '%s' gives no host.adam_params_per_s",
                       M->m.name);
    lc_bufplan bp;
    if (lc_bufplan_make(M->L, c->n_persist, c->n_buffer, &M->k, &bp, NULL) != MS_OK) {
        e->valid = 0; /* too few buffers: not a runnable configuration */
        return MS_OK;
    }
    ms_status st = estimate_plan(M, c, &bp, e, err);
    lc_bufplan_clear(&bp);
    return st;
}

/* ---- search ---- */

void ptc_search_opts_default(ptc_search_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mem_margin = 0.03;
    o->max_swap = 8;
    o->tie_tol = 0.03;
    o->swap_bw = 1;
}

void ptc_search_result_clear(ptc_search_result *r)
{
    if (!r) return;
    free(r->all);
    free(r->all_est);
    memset(r, 0, sizeof *r);
}

static ms_status keep(ptc_search_result *r, size_t *cap1, size_t *cap2, const ptc_config *c,
                      const ptc_estimate *e)
{
    if (ms_grow((void **)&r->all, cap1, r->n_all + 1, sizeof *r->all)) return MS_ERR_NOMEM;
    if (ms_grow((void **)&r->all_est, cap2, r->n_all + 1, sizeof *r->all_est)) return MS_ERR_NOMEM;
    r->all[r->n_all] = *c;
    r->all_est[r->n_all++] = *e;
    return MS_OK;
}

/* The pick among configurations whose predicted times are within tol of the fastest: the
 * cost model is only that accurate (ProTrain reports up to 4 % error), so near-ties go to the
 * configuration that moves the least over the link and does the least extra work: more
 * persistent chunks, then fewer checkpointed and swapped blocks, then fewer buffers. */
static int preferred(const ptc_config *a, const ptc_config *b)
{
    if (a->n_persist != b->n_persist) return a->n_persist > b->n_persist;
    if (a->n_ckpt != b->n_ckpt) return a->n_ckpt < b->n_ckpt;
    if (a->n_swap != b->n_swap) return a->n_swap < b->n_swap;
    return a->n_buffer < b->n_buffer;
}

/* Bounds of the search, tabulated once per search.
 * Memory (exact split of ptc_peak_lower_bound): pstat[np] the static bytes of np persistent
 * chunks, act[sw * (Nb + 1) + ck] the activation peak of roles (sw, ck) with instantaneous
 * swaps, least the smallest of them with every block managed.
 * Time (a bound no estimate can beat, read off estimate_plan's recurrences): the compute
 * stream runs every step, the recompute of the checkpoint blocks and the GPU Adam of the
 * persistent chunks one after another, so T_iter >= compute + rec[sw, ck] + gadam[np]; and
 * the host runs the Adam of every non-persistent chunk whose last use is in the backward one
 * after another, none before the backward begins (the forward's compute is behind it), so
 * T_iter >= fwd compute + hadam[np] (suffix sums). Each copy queue moves its bytes one
 * transfer after another at no more than its full rate: every non-persistent chunk some step
 * needs is gathered at least once (its shard and its ring halves) and its gradients leave
 * once, every persistent chunk is synchronized, every swap block is offloaded, so T_iter >=
 * h2d[np] / rate and >= (d2h[np] + swap[sw, ck]) / rate. */
typedef struct lb_tab {
    uint64_t *pstat;
    int64_t *act;
    int64_t least;
    double *rec, *swb;       /* per (sw, ck): recompute us, swap-out bytes */
    double *gadam, *hadam;   /* per n_persist, us */
    double *h2d, *d2h;       /* per n_persist: us each copy queue is busy at least, the
                                gathers counted once per chunk */
    double *ld_h, *ld_d;     /* per chunk: us one gather takes on each queue at least */
    double *rs_h;            /* per chunk: us its gradients' synchronization takes on H2D in
                                the backward (0 when it does not cross the link) */
    int32_t *last;           /* per chunk: its last step, -1 if none */
    double compute_us, fwd_us, bwd_us, rd, rh, swap_out_us, swap_in_us;
} lb_tab;

static void lb_tab_clear(lb_tab *T)
{
    free(T->pstat);
    free(T->act);
    free(T->rec);
    free(T->swb);
    free(T->h2d);
    free(T->d2h);
    free(T->ld_h);
    free(T->ld_d);
    free(T->rs_h);
    free(T->last);
    free(T->gadam);
    free(T->hadam);
    memset(T, 0, sizeof *T);
}

/* Whether persistent chunk with last step `last` is synchronized over the link (the trace
 * needs it and estimate_plan reduces it on a copy queue). */
static int used_persistent_sync(const ptc_model *M, int32_t last)
{
    return last >= 0 && M->L->dp > 1 && (M->coll == LC_COLL_LINK || M->coll == LC_COLL_STREAM);
}

static ms_status lb_tab_make(const ptc_model *M, int max_swap, lb_tab *T)
{
    const lc_layout *L = M->L;
    int Nc = (int)L->n_chunks, Nb = L->n_blocks;
    size_t na = (size_t)(max_swap + 1) * (size_t)(Nb + 1);
    memset(T, 0, sizeof *T);
    T->pstat = calloc((size_t)Nc + 1, sizeof *T->pstat);
    T->act = calloc(na, sizeof *T->act);
    T->rec = calloc(na, sizeof *T->rec);
    T->swb = calloc(na, sizeof *T->swb);
    T->gadam = calloc((size_t)Nc + 1, sizeof *T->gadam);
    T->hadam = calloc((size_t)Nc + 1, sizeof *T->hadam);
    T->h2d = calloc((size_t)Nc + 1, sizeof *T->h2d);
    T->d2h = calloc((size_t)Nc + 1, sizeof *T->d2h);
    T->ld_h = calloc((size_t)Nc + 1, sizeof *T->ld_h);
    T->ld_d = calloc((size_t)Nc + 1, sizeof *T->ld_d);
    T->rs_h = calloc((size_t)Nc + 1, sizeof *T->rs_h);
    /* full rates; the paired halves of a ring run at the duplex share all along (xfer_p) */
    double rh = M->m.link_h2d_Bps / 1e6, rd = M->m.link_d2h_Bps / 1e6;
    double dup = M->m.link_duplex_Bps / 1e6;
    double shh = dup > 0 && dup < 2 * rh ? dup / 2 : rh, shd = dup > 0 && dup < 2 * rd ? dup / 2 : rd;
    T->rd = rd;
    T->rh = rh;
    uint8_t *roles = malloc((size_t)Nb + 1);
    double *brec = calloc((size_t)Nb + 1, sizeof *brec);   /* per block: recompute, all steps */
    int32_t *last = T->last = malloc(((size_t)Nc + 1) * sizeof *last);
    if (!T->pstat || !T->act || !T->rec || !T->swb || !T->gadam || !T->hadam || !T->h2d ||
        !T->d2h || !T->ld_h || !T->ld_d || !T->rs_h || !roles || !brec || !last ||
        !(rh > 0) || !(rd > 0)) {
        free(roles);
        free(brec);
        lb_tab_clear(T);
        return MS_ERR_NOMEM;
    }
    for (int c = 0; c < Nc; c++) last[c] = -1;
    for (size_t s = 0; s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        T->compute_us += S->compute_us;
        if (S->phase == TP_FWD) T->fwd_us += S->compute_us;
        if (S->phase == TP_BWD) T->bwd_us += S->compute_us;
        if (S->phase == TP_BWD && S->block >= 0 && S->block < Nb) brec[S->block] += M->rec_us[S->block];
        for (uint32_t j = 0; j < S->n_need; j++) last[L->needs[S->need_first + j]] = (int32_t)s;
    }
    for (int i = 0; i < Nc; i++) {
        T->pstat[i + 1] = T->pstat[i] + L->chunk_bytes + opt_bytes(M, i);
        T->gadam[i + 1] = T->gadam[i] + L->adam_gpu_us_per_param * (double)opt_params(M, i);
    }
    for (int i = Nc - 1; i >= 0; i--)
        T->hadam[i] = T->hadam[i + 1] +
                      (last[i] >= 0 && L->steps[last[i]].phase == TP_BWD ? M->hadam_us[i] : 0);
    /* copy bytes: non-persistent chunks from np on (suffix), persistent ones below np */
    double *ph = calloc((size_t)Nc + 1, sizeof *ph), *pd = calloc((size_t)Nc + 1, sizeof *pd);
    if (!ph || !pd) {
        free(ph);
        free(pd);
        free(roles);
        free(brec);
        lb_tab_clear(T);
        return MS_ERR_NOMEM;
    }
    for (int i = Nc - 1; i >= 0; i--) {
        int used = last[i] >= 0;
        T->ld_h[i] = (M->own_b[i] + M->nvg_h[i]) / rh + M->ring_b[i] / shh;
        T->ld_d[i] = M->ring_b[i] / shd;
        T->rs_h[i] = used ? M->ring_b[i] / shh : 0;
        /* one gather, then the gradients: reduce-scatter halves and the shard's copy */
        T->h2d[i] = T->h2d[i + 1] + (used ? T->ld_h[i] + M->ring_b[i] / shh : 0);
        T->d2h[i] = T->d2h[i + 1] +
                    (used ? T->ld_d[i] + M->ring_b[i] / shd + (M->grad_b[i] + M->nvr_d[i]) / rd : 0);
    }
    for (int i = 0; i < Nc; i++) {
        int sync = used_persistent_sync(M, last[i]);
        ph[i + 1] = ph[i] + (sync ? 2 * M->ring_b[i] / shh +
                                        (M->k.persist_shard ? M->nvg_h[i] / rh : 0) : 0);
        pd[i + 1] = pd[i] + (sync ? 2 * M->ring_b[i] / shd + M->nvp_d[i] / rd : 0);
    }
    for (int i = 0; i <= Nc; i++) {
        T->h2d[i] += ph[i];
        T->d2h[i] += pd[i];
    }
    free(ph);
    free(pd);
    for (int sw = 0; sw <= max_swap; sw++)
        for (int ck = 0; ck + sw <= Nb; ck++) {
            ptc_config q = {0, 0, sw, ck};
            size_t x = (size_t)sw * (size_t)(Nb + 1) + (size_t)ck;
            lc_block_roles(Nb, sw, ck, roles, NULL);
            int64_t a = act_peak(M, &q, roles, NULL, NULL, NULL, NULL);
            double rc = 0, sb = 0;
            for (int j = 0; j < Nb; j++) {
                if (roles[j] == LC_CKPT) rc += brec[j];
                if (roles[j] == LC_SWAP && L->fwd_step[j] >= 0) sb += (double)M->Ds[j];
            }
            T->act[x] = a;
            T->rec[x] = rc;
            T->swb[x] = sb;
            if (ck + sw == Nb && (sw == 0 || a < T->least)) T->least = a;
        }
    /* one swapped block's copies, the mean over the blocks (ptc_swap_interval's) */
    double ds = 0;
    int nd = 0;
    for (int j = 0; j < Nb; j++)
        if (L->fwd_step[j] >= 0) {
            ds += (double)M->Ds[j];
            nd++;
        }
    T->swap_out_us = nd ? ds / nd / rd : 0;
    T->swap_in_us = nd ? ds / nd / rh : 0;
    free(roles);
    free(brec);
    return MS_OK;
}

/* ptc_peak_lower_bound from the tables: static bytes sb plus activations a. */
static uint64_t lb_of(const ptc_model *M, uint64_t sb, int64_t a)
{
    uint64_t pk = sb + (uint64_t)(a > 0 ? a : 0);
    return pk > M->k.init_device_bytes ? pk : M->k.init_device_bytes;
}

/* The time bound of (np, sw, ck), seconds; xh, xd: the gathers' queue time beyond one per
 * chunk (a row's buffer plan reloads some chunks). */
static double tlb_x(const lb_tab *T, int Nb, int np, int sw, int ck, double xh, double xd)
{
    size_t x = (size_t)sw * (size_t)(Nb + 1) + (size_t)ck;
    double b = T->compute_us + T->rec[x] + T->gadam[np];
    double h = T->fwd_us + T->hadam[np];
    if (h > b) b = h;
    if (T->h2d[np] + xh > b) b = T->h2d[np] + xh;
    if (T->d2h[np] + xd + T->swb[x] / T->rd > b) b = T->d2h[np] + xd + T->swb[x] / T->rd;
    return b / 1e6;
}

static double tlb_of(const lb_tab *T, int Nb, int np, int sw, int ck)
{
    return tlb_x(T, Nb, np, sw, ck, 0, 0);
}

/* The gathers of buffer plan bp beyond one per chunk, on each queue (us). */
static void reload_us(const lb_tab *T, const lc_bufplan *bp, int Nc, double *xh, double *xd)
{
    *xh = *xd = 0;
    uint8_t *sn = calloc((size_t)Nc + 1, 1);
    if (!sn) return; /* no refinement: still a bound */
    for (size_t l = 0; l < bp->n_loads; l++) {
        int c = (int)bp->loads[l].chunk;
        if (!sn[c]) {
            sn[c] = 1;
            continue;
        }
        *xh += T->ld_h[c];
        *xd += T->ld_d[c];
    }
    free(sn);
}

double ptc_time_lower_bound(const ptc_model *M, const ptc_config *c)
{
    const lc_layout *L = M->L;
    int Nb = L->n_blocks;
    if (c->n_persist < 0 || (size_t)c->n_persist > L->n_chunks || c->n_swap < 0 ||
        c->n_ckpt < 0 || c->n_swap + c->n_ckpt > Nb)
        return 0;
    lb_tab T;
    if (lb_tab_make(M, c->n_swap, &T) != MS_OK) return 0;
    double b = tlb_of(&T, Nb, c->n_persist, c->n_swap, c->n_ckpt);
    lb_tab_clear(&T);
    return b;
}

/* The bandwidth bound on n_swap of row (np, bp). ProTrain §3.3 bounds n_swap "by the swapping
 * interval and available bandwidth" and §5.4 says how the bandwidth is meant: what the
 * parameter traffic leaves of the link goes to swapping, in blocks "entirely overlapped with
 * computation without disrupting parameter loading". The formula is not published; memsim's
 * reading (docs/PROTRAIN.md §5): the swap-outs must fit in the forward's compute time less
 * the D2H time of the forward's gathers, and the swap-ins in the backward's compute time less
 * the H2D time of the backward's gathers and of the gradient synchronization (the ring's H2D
 * halves), each block's copy at the link's full rate. */
static int swap_bw_bound(const ptc_model *M, const lb_tab *T, const lc_bufplan *bp)
{
    const lc_layout *L = M->L;
    double fd = 0, bh = 0;
    for (size_t l = 0; l < bp->n_loads; l++) {
        const lc_load *ld = &bp->loads[l];
        int ph = L->steps[ld->step].phase;
        if (ph == TP_FWD) fd += T->ld_d[ld->chunk];
        else if (ph == TP_BWD) bh += T->ld_h[ld->chunk];
    }
    for (int c = 0; c < (int)L->n_chunks; c++)
        if (T->last[c] >= 0 && L->steps[T->last[c]].phase == TP_BWD) bh += T->rs_h[c];
    if (!(T->swap_out_us > 0) || !(T->swap_in_us > 0)) return INT_MAX;
    double n = fmin((T->fwd_us - fd) / T->swap_out_us, (T->bwd_us - bh) / T->swap_in_us);
    if (!(n > 0)) return 0;
    return n >= (double)INT_MAX ? INT_MAX : (int)floor(n);
}

int ptc_swap_bw_limit(const ptc_model *M, int n_persist, int n_buffer)
{
    const lc_layout *L = M->L;
    if (n_persist < 0 || (size_t)n_persist > L->n_chunks || n_buffer < 0) return -1;
    lc_bufplan bp;
    if (lc_bufplan_make(L, n_persist, n_buffer, &M->k, &bp, NULL) != MS_OK) return -1;
    lb_tab T;
    int n = -1;
    if (lb_tab_make(M, 0, &T) == MS_OK) {
        n = swap_bw_bound(M, &T, &bp);
        lb_tab_clear(&T);
    }
    lc_bufplan_clear(&bp);
    return n;
}

/* A row of the search: one (n_persist, n_buffer) whose memory bound fits, its time bound (the
 * least over its n_swap) and its place in the enumeration order. */
typedef struct srow {
    int np, nb;
    double tlb;
    size_t ord;
} srow;

static int srow_cmp(const void *a, const void *b)
{
    const srow *x = a, *y = b;
    if (x->tlb != y->tlb) return x->tlb < y->tlb ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* Enumeration key of a configuration: the order the plain exhaustive walk (n_persist, then
 * n_buffer, n_swap, n_checkpoint ascending) reaches it. Ties of the closest configuration
 * and of equal times go to the smaller key, so the result does not depend on the order in
 * which the bounded search evaluates. */
static int64_t cfg_key(int Nc, int Nb, int max_swap, const ptc_config *q)
{
    return (((int64_t)q->n_persist * (Nc + 1) + q->n_buffer) * (max_swap + 1) + q->n_swap) *
               (Nb + 1) + q->n_ckpt;
}

typedef struct kept {
    int64_t key;
    size_t i;
} kept;

static int kept_cmp(const void *a, const void *b)
{
    const kept *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Puts r->all in enumeration order (keys[i] belongs to r->all[i]). */
static ms_status sort_kept(ptc_search_result *r, const int64_t *keys)
{
    if (r->n_all < 2) return MS_OK;
    kept *k = malloc(r->n_all * sizeof *k);
    ptc_config *a = malloc(r->n_all * sizeof *a);
    ptc_estimate *e = malloc(r->n_all * sizeof *e);
    if (!k || !a || !e) {
        free(k);
        free(a);
        free(e);
        return MS_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->n_all; i++) k[i] = (kept){keys[i], i};
    qsort(k, r->n_all, sizeof *k, kept_cmp);
    for (size_t i = 0; i < r->n_all; i++) {
        a[i] = r->all[k[i].i];
        e[i] = r->all_est[k[i].i];
    }
    memcpy(r->all, a, r->n_all * sizeof *a);
    memcpy(r->all_est, e, r->n_all * sizeof *e);
    free(k);
    free(a);
    free(e);
    return MS_OK;
}

/* Search state shared by the rows. */
typedef struct sstate {
    ptc_model *M;
    const ptc_search_opts *o;
    ptc_search_result *r;
    const lb_tab *T;
    uint64_t cap;
    int max_swap;
    size_t kcap1, kcap2, kcap3;
    int64_t *keys, best_key, close_key, host_key;
    int have_close, have_host;
    ptc_config host_c;
    ptc_estimate host_e;
} sstate;

/* The time a configuration must beat to matter: the fastest so far plus the tie band. */
static double time_limit(const sstate *S)
{
    if (!S->r->found || S->o->no_bound || S->M->rt_model != PTC_RT_RECURRENCE) return INFINITY;
    return S->r->best_est.t_iter_s * (1 + S->o->tie_tol);
}

static void note_closest(sstate *S, const ptc_config *q, const ptc_estimate *e, int64_t key)
{
    ptc_search_result *r = S->r;
    if (!S->have_close || e->peak_bytes < r->closest_est.peak_bytes ||
        (e->peak_bytes == r->closest_est.peak_bytes && key < S->close_key)) {
        r->closest = *q;
        r->closest_est = *e;
        S->close_key = key;
        S->have_close = 1;
    }
}

/* Evaluates row (np, nb): for each n_swap the fewest checkpoints that fit. */
static ms_status search_row(sstate *S, int np, int nb, ms_error *err)
{
    ptc_model *M = S->M;
    const lc_layout *L = M->L;
    const lb_tab *T = S->T;
    ptc_search_result *r = S->r;
    int Nc = (int)L->n_chunks, Nb = L->n_blocks;
    uint64_t sb = T->pstat[np] + (uint64_t)nb * L->chunk_bytes;
    lc_bufplan bp;
    if (lc_bufplan_make(L, np, nb, &M->k, &bp, NULL) != MS_OK) {
        r->pruned += (size_t)(S->max_swap + 1) * (size_t)(Nb + 1);
        return MS_OK;
    }
    ms_status st = MS_OK;
    double xh, xd;
    reload_us(T, &bp, Nc, &xh, &xd);
    int msw = S->max_swap;
    if (S->o->swap_bw) {
        int b = swap_bw_bound(M, T, &bp);
        if (b < msw) {
            r->pruned += (size_t)(msw - b) * (size_t)(Nb + 1);
            msw = b;
        }
    }
    for (int sw = 0; sw <= msw && st == MS_OK; sw++) {
        /* the fewest checkpoints that fit: memory falls and time rises with them */
        int lo = 0, hi = Nb - sw;
        ptc_config q = {np, nb, sw, hi};
        const int64_t *act = T->act + (size_t)sw * (size_t)(Nb + 1);
        if (lb_of(M, sb, act[hi]) > S->cap) {
            r->pruned += (size_t)(Nb - sw + 1);
            continue;
        }
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (lb_of(M, sb, act[mid]) <= S->cap) hi = mid;
            else lo = mid + 1;
        }
        r->pruned += (size_t)lo;
        ptc_estimate e;
        int fit = 0;
        for (q.n_ckpt = lo; q.n_ckpt <= Nb - sw; q.n_ckpt++) {
            /* the bound grows with the checkpoints: past the limit, so is every later one */
            if (tlb_x(T, Nb, np, sw, q.n_ckpt, xh, xd) * (1 - 1e-9) > time_limit(S)) {
                r->pruned += (size_t)(Nb - sw - q.n_ckpt + 1);
                break;
            }
            st = estimate_plan(M, &q, &bp, &e, err);
            r->evaluated++;
            if (st != MS_OK) break;
            if (e.peak_bytes <= S->cap) {
                fit = 1;
                break;
            }
            note_closest(S, &q, &e, cfg_key(Nc, Nb, S->max_swap, &q));
        }
        if (st != MS_OK || !fit) continue;
        int64_t key = cfg_key(Nc, Nb, S->max_swap, &q);
        if (S->o->host_capacity_bytes && e.host_bytes > S->o->host_capacity_bytes) {
            if (!S->have_host || e.host_bytes < S->host_e.host_bytes ||
                (e.host_bytes == S->host_e.host_bytes && key < S->host_key)) {
                S->host_c = q;
                S->host_e = e;
                S->host_key = key;
                S->have_host = 1;
            }
            continue;
        }
        if (keep(r, &S->kcap1, &S->kcap2, &q, &e) != MS_OK ||
            ms_grow((void **)&S->keys, &S->kcap3, r->n_all, sizeof *S->keys)) {
            st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
            break;
        }
        S->keys[r->n_all - 1] = key;
        if (!r->found || e.t_iter_s < r->best_est.t_iter_s ||
            (e.t_iter_s == r->best_est.t_iter_s && key < S->best_key)) {
            r->found = 1;
            r->best = q;
            r->best_est = e;
            S->best_key = key;
        }
    }
    lc_bufplan_clear(&bp);
    return st;
}

ms_status ptc_search(ptc_model *M, const ptc_search_opts *o, ptc_search_result *r,
                     ms_error *err)
{
    memset(r, 0, sizeof *r);
    ptc_search_opts def;
    if (!o) {
        ptc_search_opts_default(&def);
        o = &def;
    }
    const lc_layout *L = M->L;
    int Nc = (int)L->n_chunks, Nb = L->n_blocks;
    uint64_t cap = o->capacity_bytes ? o->capacity_bytes : machine_usable_bytes(&M->m);
    cap = (uint64_t)((double)cap * (1.0 - o->mem_margin));
    r->capacity_bytes = cap;
    int max_swap = ptc_swap_max(M, o->max_swap);
    lb_tab T;
    if (lb_tab_make(M, max_swap, &T) != MS_OK) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    sstate S = {.M = M, .o = o, .r = r, .T = &T, .cap = cap, .max_swap = max_swap};
    /* closest when nothing fits: the configuration with the least device memory (nothing
     * persistent, the fewest buffers, every block checkpointed or swapped), or, when the
     * device has room but the host does not, the fitting one needing the least host memory */
    {
        int nb0 = lc_min_buffers(L, 0, &M->k);
        for (int sw = 0; Nc > 0 && sw <= max_swap; sw++) {
            ptc_config q = {0, nb0, sw, Nb - sw};
            ptc_estimate e;
            if (ptc_estimate_config(M, &q, &e, NULL) != MS_OK || !e.valid) continue;
            note_closest(&S, &q, &e, (int64_t)sw - (max_swap + 1)); /* before every row */
        }
    }
    /* the space: n_persist x n_buffer x (n_swap, n_ckpt) with n_swap + n_ckpt <= Nb */
    r->space = (size_t)(Nc + 1) * (size_t)(Nc + 1) * (size_t)(max_swap + 1) * (size_t)(Nb + 1);
    /* pass 1: the rows whose memory bound fits, with their time bounds. The bound of a row is
     * static(np, nb) + activations(sw, ck), so more buffers only need more: a row that does
     * not fit ends its n_persist. */
    srow *rows = NULL;
    size_t nrows = 0, rcap = 0, ord = 0;
    ms_status st = MS_OK;
    for (int np = 0; np <= Nc && st == MS_OK; np++) {
        int nb_lo = np == Nc ? 0 : 1, nb_hi = Nc - np;
        for (int nb = nb_lo; nb <= nb_hi; nb++) {
            uint64_t sb = T.pstat[np] + (uint64_t)nb * L->chunk_bytes;
            if (lb_of(M, sb, T.least) > cap) {
                r->pruned += (size_t)(nb_hi - nb + 1) * (size_t)(max_swap + 1) * (size_t)(Nb + 1);
                break;
            }
            double tl = INFINITY;
            for (int sw = 0; sw <= max_swap; sw++) {
                const int64_t *act = T.act + (size_t)sw * (size_t)(Nb + 1);
                int lo = 0, hi = Nb - sw;
                if (lb_of(M, sb, act[hi]) > cap) continue;
                while (lo < hi) {
                    int mid = (lo + hi) / 2;
                    if (lb_of(M, sb, act[mid]) <= cap) hi = mid;
                    else lo = mid + 1;
                }
                double b = tlb_of(&T, Nb, np, sw, lo);
                if (b < tl) tl = b;
            }
            if (ms_grow((void **)&rows, &rcap, nrows + 1, sizeof *rows)) {
                st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
                break;
            }
            rows[nrows++] = (srow){np, nb, tl, ord++};
        }
    }
    /* pass 2: rows by increasing time bound (branch and bound): once a row's bound is past
     * the fastest time so far plus the tie band, so is every later row's, and no
     * configuration there can be picked or tie with the pick. */
    if (st == MS_OK && nrows > 1) qsort(rows, nrows, sizeof *rows, srow_cmp);
    for (size_t i = 0; i < nrows && st == MS_OK; i++) {
        if (rows[i].tlb * (1 - 1e-9) > time_limit(&S)) {
            r->pruned += (nrows - i) * (size_t)(max_swap + 1) * (size_t)(Nb + 1);
            break;
        }
        st = search_row(&S, rows[i].np, rows[i].nb, err);
    }
    free(rows);
    lb_tab_clear(&T);
    if (st == MS_OK && o->keep_all) st = sort_kept(r, S.keys);
    free(S.keys);
    if (st != MS_OK) {
        ptc_search_result_clear(r);
        return st == MS_ERR_NOMEM ? ms_fail(err, st, "out of memory") : st;
    }
    if (!r->found && S.have_host) {
        r->closest = S.host_c;
        r->closest_est = S.host_e;
    }
    /* near-ties of the fastest */
    r->fastest = r->best;
    r->fastest_est = r->best_est;
    double lim = r->best_est.t_iter_s * (1 + o->tie_tol);
    for (size_t i = 0; r->found && i < r->n_all; i++)
        if (r->all_est[i].t_iter_s <= lim && preferred(&r->all[i], &r->best)) {
            r->best = r->all[i];
            r->best_est = r->all_est[i];
        }
    if (!o->keep_all) {
        free(r->all);
        free(r->all_est);
        r->all = NULL;
        r->all_est = NULL;
        r->n_all = 0;
    }
    return MS_OK;
}

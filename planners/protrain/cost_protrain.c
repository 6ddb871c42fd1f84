/* cost_protrain.c — ProTrain's runtime and peak-memory models of cost_protrain.h. The runtime
 * model walks the chunk access program of lower_chunks.h in program order with four servers
 * (compute, H2D, D2H, host CPU): each chunk step starts when the compute is free and the
 * gathers it needs have arrived (the per-chunk max of compute and communication), gathers start
 * when their buffer is released, swaps and collectives share the link (a direction slows to its
 * duplex share while the other one is busy), recompute is added in backward, and host Adam
 * follows each chunk's gradient offload. The memory model is the operator walk of the trace's
 * activations (every alloc and free between and inside ops: ProTrain's intra- and
 * inter-operator deltas) minus what the block roles drop, plus the static chunk memory.
 * ProTrain's Appendix A.1 formula as written (a sum over chunks of max(compute, communication),
 * PTC_RT_APPENDIX) can replace the recurrence's times. The configuration search that reads
 * these models is cost_protrain_search.c (sharing the model's state through
 * cost_protrain_int.h). Formulas: docs/PROTRAIN.md. */
#define _POSIX_C_SOURCE 200809L
#include "planners/protrain/cost_protrain.h"
#include "planners/protrain/cost_protrain_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/roofline.h"
#include "base/u64map.h"


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
uint64_t ptc_opt_params(const ptc_model *M, int c)
{
    return M->k.persist_shard ? shard_params(M, c) : M->L->chunks[c].params;
}
uint64_t ptc_opt_bytes(const ptc_model *M, int c)
{
    return (uint64_t)ceil(M->k.gpu_opt_bytes_per_param * (double)ptc_opt_params(M, c));
}

static uint64_t static_bytes(const ptc_model *M, const ptc_config *c)
{
    uint64_t b = (uint64_t)c->n_buffer * M->L->chunk_bytes;
    for (int i = 0; i < c->n_persist; i++) b += M->L->chunk_bytes + ptc_opt_bytes(M, i);
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
int64_t ptc_act_peak(const ptc_model *M, const ptc_config *c, const uint8_t *roles,
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
    int64_t a = ptc_act_peak(M, c, roles, NULL, NULL, NULL, NULL);
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
ms_status ptc_estimate_plan(ptc_model *M, const ptc_config *c, const lc_bufplan *bp,
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
        v.c += L->adam_gpu_us_per_param * (double)ptc_opt_params(M, ci);
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
    int64_t a = ptc_act_peak(M, c, M->roles, M->e2, tstart, M->e3, tend);
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
        if (pers) gpu += L->adam_gpu_us_per_param * (double)ptc_opt_params(M, ch);
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
    ms_status st = ptc_estimate_plan(M, c, &bp, e, err);
    lc_bufplan_clear(&bp);
    return st;
}


/* cost_protrain_search.c — ProTrain's configuration search (ptc_search, cost_protrain.h):
 * memory and time lower bounds from tables built once per search, rows evaluated by
 * increasing time bound, the kept configurations sorted by preference. Used by the ProTrain
 * policies, the paper driver and tests. Formulas: docs/PROTRAIN.md. */
#include "planners/protrain/cost_protrain_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        T->pstat[i + 1] = T->pstat[i] + L->chunk_bytes + ptc_opt_bytes(M, i);
        T->gadam[i + 1] = T->gadam[i] + L->adam_gpu_us_per_param * (double)ptc_opt_params(M, i);
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
            int64_t a = ptc_act_peak(M, &q, roles, NULL, NULL, NULL, NULL);
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
            st = ptc_estimate_plan(M, &q, &bp, &e, err);
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

/* link.c — the host link as weighted max-min fair flows (see link.h). One engine event is
 * pending at a time: the earliest completion among live flows; every start or finish
 * integrates the progress made at the old rates, recomputes the rates and moves that event.
 * Used by sim/exec.c. */
#include "sim/link.h"

#include <math.h>
#include <stdlib.h>

/* A flow with at most this many bytes left counts as finished: bytes are whole numbers, and
 * integrating rate x time in doubles leaves rounding residue far below half a byte. */
#define DONE_EPS_BYTES 0.5
/* Relative slack when deciding which constraints are saturated at a filling level. */
#define LEVEL_EPS 1e-12

typedef struct flow {
    uint64_t id;
    link_dir dir;
    double total;     /* bytes */
    double rem;       /* bytes left */
    double cap_Bps;   /* own cap, <= 0: none */
    double weight;    /* sharing weight (> 0) */
    int dha;          /* a DHA kernel's traffic, not a copy engine's */
    double rate_Bps;
    link_done_fn fn;
    void *ctx;
    uint64_t arg;
} flow;

struct link {
    eng_t *e;
    double cap_Bps[3];   /* H2D, D2H, duplex; INFINITY where absent */
    flow *f;             /* live flows in start order (ids increasing) */
    size_t n, cap;
    link_dir *sdir; double *scap, *sw, *srate; unsigned char *sfrozen; size_t scap_n;
    double dha_weight;   /* weight of flows started by link_start_dha */
    size_t nactive[LINK_NDIR];
    double busy_us[LINK_NDIR];
    double done_bytes[LINK_NDIR];
    double last_us;      /* time up to which progress is integrated */
    uint64_t next_id;
    eng_id pending;      /* the completion event */
};

static double norm_cap(double c) { return (c > 0 && isfinite(c)) ? c : INFINITY; }

link_t *link_new(eng_t *e, double h2d_Bps, double d2h_Bps, double duplex_Bps)
{
    link_t *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->e = e;
    l->cap_Bps[0] = norm_cap(h2d_Bps);
    l->cap_Bps[1] = norm_cap(d2h_Bps);
    l->cap_Bps[2] = norm_cap(duplex_Bps);
    l->last_us = eng_now(e);
    l->next_id = 1;
    l->dha_weight = 1.0;
    return l;
}

void link_free(link_t *l)
{
    if (!l) return;
    if (l->pending) eng_cancel(l->e, l->pending);
    free(l->f);
    free(l->sdir);
    free(l->scap);
    free(l->sw);
    free(l->srate);
    free(l->sfrozen);
    free(l);
}

static double norm_weight(const double *w, size_t i)
{
    return (w && w[i] > 0 && isfinite(w[i])) ? w[i] : 1.0;
}

/* Progressive filling: all unfrozen flows rise together from level 0, flow i at rate
 * w_i x level; at each step the lowest level at which a constraint saturates (its remaining
 * capacity over the summed weights of its unfrozen flows) or a flow meets its own cap
 * (cap_i / w_i) freezes the flows concerned at that level. Each step freezes at least one
 * flow, so it ends in <= n steps. With equal weights this is plain max-min fairness. */
void link_maxmin_w(size_t n, const link_dir *dir, const double *cap_Bps, const double *weight,
                   double h2d_Bps, double d2h_Bps, double duplex_Bps, double *rate_Bps,
                   unsigned char *frozen)
{
    unsigned char local[64];
    if (!frozen) frozen = local; /* callers with n > 64 must pass scratch (see link.h) */
    double C[3] = { norm_cap(h2d_Bps), norm_cap(d2h_Bps), norm_cap(duplex_Bps) };
    double used[3] = { 0, 0, 0 };
    size_t left = n;
    for (size_t i = 0; i < n; i++) {
        frozen[i] = 0;
        rate_Bps[i] = 0;
    }
    while (left > 0) {
        double wsum[3] = { 0, 0, 0 };
        double level = INFINITY;
        for (size_t i = 0; i < n; i++) {
            if (frozen[i]) continue;
            double w = norm_weight(weight, i);
            wsum[dir[i]] += w;
            wsum[2] += w;
            double c = norm_cap(cap_Bps[i]) / w;
            if (c < level) level = c;
        }
        double share[3];
        for (int c = 0; c < 3; c++) {
            share[c] = wsum[c] > 0 ? (C[c] - used[c]) / wsum[c] : INFINITY;
            if (share[c] < 0) share[c] = 0;
            if (share[c] < level) level = share[c];
        }
        double lim = isinf(level) ? INFINITY : level * (1 + LEVEL_EPS);
        for (size_t i = 0; i < n; i++) {
            if (frozen[i]) continue;
            double w = norm_weight(weight, i);
            double c = norm_cap(cap_Bps[i]);
            int sat = c / w <= lim || share[dir[i]] <= lim || share[2] <= lim;
            if (!sat) continue;
            rate_Bps[i] = c < w * level ? c : w * level;
            frozen[i] = 1;
            left--;
        }
        for (int c = 0; c < 3; c++) used[c] = 0;
        for (size_t i = 0; i < n; i++)
            if (frozen[i]) {
                used[dir[i]] += rate_Bps[i];
                used[2] += rate_Bps[i];
            }
    }
}

void link_maxmin(size_t n, const link_dir *dir, const double *cap_Bps, double h2d_Bps,
                 double d2h_Bps, double duplex_Bps, double *rate_Bps, unsigned char *frozen)
{
    link_maxmin_w(n, dir, cap_Bps, NULL, h2d_Bps, d2h_Bps, duplex_Bps, rate_Bps, frozen);
}

/* Integrates progress and busy time from last_us to now at the current rates. */
static void advance(link_t *l)
{
    double now = eng_now(l->e);
    double dt = now - l->last_us;
    if (!(dt > 0)) return;
    for (int d = 0; d < LINK_NDIR; d++)
        if (l->nactive[d]) l->busy_us[d] += dt;
    for (size_t i = 0; i < l->n; i++) {
        flow *f = &l->f[i];
        double moved = isinf(f->rate_Bps) ? f->rem : f->rate_Bps * dt * 1e-6;
        f->rem = moved >= f->rem ? 0 : f->rem - moved;
    }
    l->last_us = now;
}

static void on_completion(eng_t *e, void *ctx, uint64_t arg);

static double time_left_us(const flow *f)
{
    if (f->rem <= 0 || isinf(f->rate_Bps)) return 0;
    if (!(f->rate_Bps > 0)) return INFINITY;
    return f->rem * 1e6 / f->rate_Bps;
}

/* What link_maxmin_w gives one flow of weight 1 alone on the link: the least of its own
 * cap and its direction's and the duplex capacity (each over weight 1, which is exact: the
 * same bits). Most of a swapping schedule's copies run alone, and this spares them the
 * filling's loops and the copies into its arrays. */
static double sole_rate(const link_t *l, const flow *f)
{
    double level = norm_cap(f->cap_Bps);
    if (l->cap_Bps[f->dir] < level) level = l->cap_Bps[f->dir];
    if (l->cap_Bps[2] < level) level = l->cap_Bps[2];
    return level;
}

/* New rates for the live flows, then the earliest completion becomes the pending event. */
static ms_status reschedule(link_t *l)
{
    if (l->pending) eng_cancel(l->e, l->pending);
    l->pending = 0;
    if (l->n == 0) return MS_OK;
    if (l->n == 1 && l->f[0].weight == 1.0) {
        flow *f = &l->f[0];
        f->rate_Bps = sole_rate(l, f);
        double t = time_left_us(f);
        if (isinf(t)) return MS_OK; /* cannot happen with positive caps */
        l->pending = eng_after(l->e, t, on_completion, l, f->id);
        return l->pending ? MS_OK : MS_ERR_NOMEM;
    }
    if (l->n > l->scap_n) {
        size_t k = l->n * 2;
        link_dir *d = realloc(l->sdir, k * sizeof *d);
        if (d) l->sdir = d;
        double *c = realloc(l->scap, k * sizeof *c);
        if (c) l->scap = c;
        double *w = realloc(l->sw, k * sizeof *w);
        if (w) l->sw = w;
        double *r = realloc(l->srate, k * sizeof *r);
        if (r) l->srate = r;
        unsigned char *z = realloc(l->sfrozen, k);
        if (z) l->sfrozen = z;
        if (!d || !c || !w || !r || !z) return MS_ERR_NOMEM;
        l->scap_n = k;
    }
    for (size_t i = 0; i < l->n; i++) {
        l->sdir[i] = l->f[i].dir;
        l->scap[i] = l->f[i].cap_Bps;
        l->sw[i] = l->f[i].weight;
    }
    link_maxmin_w(l->n, l->sdir, l->scap, l->sw, l->cap_Bps[0], l->cap_Bps[1], l->cap_Bps[2],
                  l->srate, l->sfrozen);
    size_t best = 0;
    double best_t = INFINITY;
    for (size_t i = 0; i < l->n; i++) {
        l->f[i].rate_Bps = l->srate[i];
        double t = time_left_us(&l->f[i]);
        if (t < best_t) { /* strict: the earliest-started flow wins a tie */
            best_t = t;
            best = i;
        }
    }
    if (isinf(best_t)) return MS_OK; /* cannot happen with positive caps */
    l->pending = eng_after(l->e, best_t, on_completion, l, l->f[best].id);
    return l->pending ? MS_OK : MS_ERR_NOMEM;
}

ms_status link_start(link_t *l, link_dir dir, uint64_t bytes, double cap_Bps,
                     link_done_fn fn, void *ctx, uint64_t arg, uint64_t *flow_id)
{
    return link_start_w(l, dir, bytes, cap_Bps, 1.0, fn, ctx, arg, flow_id);
}

ms_status link_set_dha_weight(link_t *l, double w)
{
    if (!(w > 0) || !isfinite(w)) return MS_ERR_INVALID;
    l->dha_weight = w;
    return MS_OK;
}

double link_dha_weight(const link_t *l) { return l->dha_weight; }

ms_status link_start_dha(link_t *l, link_dir dir, uint64_t bytes, double cap_Bps,
                         link_done_fn fn, void *ctx, uint64_t arg, uint64_t *flow_id)
{
    ms_status st = link_start_w(l, dir, bytes, cap_Bps, l->dha_weight, fn, ctx, arg, flow_id);
    if (st == MS_OK) l->f[l->n - 1].dha = 1;
    return st;
}

ms_status link_start_w(link_t *l, link_dir dir, uint64_t bytes, double cap_Bps, double weight,
                       link_done_fn fn, void *ctx, uint64_t arg, uint64_t *flow_id)
{
    if (dir != LINK_H2D && dir != LINK_D2H) return MS_ERR_INVALID;
    advance(l);
    if (ms_grow((void **)&l->f, &l->cap, l->n + 1, sizeof *l->f) != MS_OK) return MS_ERR_NOMEM;
    flow *f = &l->f[l->n++];
    f->id = l->next_id++;
    f->dir = dir;
    f->total = (double)bytes;
    f->rem = (double)bytes;
    f->cap_Bps = cap_Bps;
    f->weight = (weight > 0 && isfinite(weight)) ? weight : 1.0;
    f->dha = 0;
    f->rate_Bps = 0;
    f->fn = fn;
    f->ctx = ctx;
    f->arg = arg;
    l->nactive[dir]++;
    if (flow_id) *flow_id = f->id;
    return reschedule(l);
}

/* The completion event: `arg` names the flow it was computed for, which finishes even if
 * rounding left a sliver; any other flow within DONE_EPS_BYTES finishes with it. Finished
 * flows leave the link before their callbacks run, so a callback that starts a new flow
 * sees the link as it now is. */
static void on_completion(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    link_t *l = ctx;
    l->pending = 0;
    advance(l);
    flow done[16];
    size_t nd = 0, k = 0;
    flow *extra = NULL;
    size_t nextra = 0, capextra = 0;
    for (size_t i = 0; i < l->n; i++) {
        flow *f = &l->f[i];
        if (f->id == arg || f->rem <= DONE_EPS_BYTES || isinf(f->rate_Bps)) {
            l->nactive[f->dir]--;
            l->done_bytes[f->dir] += f->total;
            if (nd < 16) {
                done[nd++] = *f;
            } else if (ms_grow((void **)&extra, &capextra, nextra + 1, sizeof *extra) == MS_OK) {
                extra[nextra++] = *f;
            }
            continue;
        }
        l->f[k++] = *f;
    }
    l->n = k;
    (void)reschedule(l); /* out of memory here leaves no event: exec reports a stuck run */
    for (size_t i = 0; i < nd; i++) done[i].fn(done[i].ctx, done[i].arg);
    for (size_t i = 0; i < nextra; i++) extra[i].fn(extra[i].ctx, extra[i].arg);
    free(extra);
}

double link_flow_rate_Bps(const link_t *l, uint64_t flow_id)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->f[i].id == flow_id) return l->f[i].rate_Bps;
    return -1;
}

size_t link_active(const link_t *l, link_dir dir)
{
    return (dir == LINK_H2D || dir == LINK_D2H) ? l->nactive[dir] : 0;
}

double link_copies_left_us(link_t *l, link_dir dir)
{
    if (dir != LINK_H2D && dir != LINK_D2H) return 0;
    advance(l);
    double left = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->f[i].dir != dir || l->f[i].dha) continue;
        double t = time_left_us(&l->f[i]);
        if (t > left) left = t;
    }
    return left;
}

double link_busy_us(link_t *l, link_dir dir)
{
    if (dir != LINK_H2D && dir != LINK_D2H) return 0;
    advance(l);
    return l->busy_us[dir];
}

double link_bytes(link_t *l, link_dir dir)
{
    if (dir != LINK_H2D && dir != LINK_D2H) return 0;
    advance(l);
    double b = l->done_bytes[dir];
    for (size_t i = 0; i < l->n; i++)
        if (l->f[i].dir == dir) b += l->f[i].total - l->f[i].rem;
    return b;
}

uint64_t link_flows_started(const link_t *l) { return l->next_id - 1; }

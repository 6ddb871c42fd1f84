/* policy_memferry.c — the memferry and go-memferry policies (see policy_memferry.h):
 * Algorithm 1 for the forward, a greedy DFGB choice for the backward, the gradient-offload
 * dynamic program, and the plan they write. Registered in planners/policy.c. */
#include "planners/memferry/policy_memferry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planners/knob.h"
#include "planners/memferry/lower_dha.h"
#include "planners/memferry/lower_dha_model.h"

/* ---- the forward ---- */

double mf_fp_time(const mf_prof *u, size_t n, const plan_pmode *mode, double *link_end_us)
{
    double link = 0, now = 0;
    for (size_t i = 0; i < n; i++) {
        if (mode[i] == PM_GFGB) {
            link += u[i].trans_us;
            if (link > now) now = link;
            now += u[i].fp_us;
        } else {
            now += u[i].fp_dha_us;
        }
        now += u[i].fp_other_us;
    }
    if (link_end_us) *link_end_us = link;
    return now;
}

typedef struct alg1 {
    const mf_prof *u;
    plan_pmode *mode;
    double t_all, t_res;
    long tag;
} alg1;

static void update(alg1 *a, double t_o, double t_r)
{
    a->t_all += t_o;
    a->t_res += t_r;
}

/* Lines 18-30: layer l does not fit in the reserved overlap time; turn earlier GFGB units
 * to DHA while that shortens the forward (Fig. 7). */
static void backtrack(alg1 *a, size_t l)
{
    const mf_prof *u = a->u;
    double tall_b = a->t_all, tres_b = a->t_res, extra = 0;
    double base = tall_b + u[l].trans_us + u[l].fp_us - tres_b;
    size_t from = a->tag < 0 ? 0 : (size_t)a->tag;
    for (size_t i = from; i < l; i++) {
        if (a->mode[i] != PM_GFGB) continue;
        double gain = u[i].trans_us + u[i].fp_dha_us - u[i].fp_us;
        double stall = u[l].trans_us - tres_b - gain;
        double ti = (stall > 0 ? stall : 0) + tall_b + extra +
                    (u[i].fp_dha_us - u[i].fp_us) + u[l].fp_us;
        if (ti < base) {
            a->mode[i] = PM_DHA;
            a->tag = (long)i + 1;
            base = ti;
            tres_b += gain;
            extra += u[i].fp_dha_us - u[i].fp_us;
            if (tres_b >= u[l].trans_us) break;
        }
    }
    double left = tres_b - u[l].trans_us;
    a->t_all = base;
    a->t_res = (left > 0 ? left : 0) + u[l].fp_us;
}

void mf_alg1(const mf_prof *u, size_t n, int literal, plan_pmode *mode, double *t_all_us,
             double *t_res_us)
{
    alg1 a = { u, mode, 0, 0, -1 };
    for (size_t l = 0; l < n; l++) {
        /* Line 3: DHA when its time beats the on-GPU time plus the load's stall. */
        double wait = literal ? u[l].trans_us : u[l].trans_us - a.t_res;
        if (u[l].fp_dha_us <= u[l].fp_us + (wait > 0 ? wait : 0)) {
            mode[l] = PM_DHA;
            update(&a, u[l].fp_dha_us, u[l].fp_dha_us);
        } else {
            if (u[l].trans_us < a.t_res) {
                if (a.tag == -1) a.tag = (long)l;
                update(&a, u[l].fp_us, u[l].fp_us - u[l].trans_us);
            } else {
                backtrack(&a, l);
            }
            mode[l] = PM_GFGB;
        }
        update(&a, u[l].fp_other_us, u[l].fp_other_us);
    }
    if (t_all_us) *t_all_us = a.t_all;
    if (t_res_us) *t_res_us = a.t_res;
}

double mf_fp_exhaustive(const mf_prof *u, size_t n, plan_pmode *best)
{
    if (n > 24) return NAN;
    plan_pmode cur[24];
    double bt = INFINITY;
    for (uint32_t s = 0; s < (UINT32_C(1) << n); s++) {
        for (size_t i = 0; i < n; i++) cur[i] = (s >> i) & 1 ? PM_DHA : PM_GFGB;
        double t = mf_fp_time(u, n, cur, NULL);
        if (t < bt) {
            bt = t;
            if (best) memcpy(best, cur, n * sizeof *cur);
        }
    }
    return bt;
}

/* ---- the backward ---- */

/* Forward end of each unit (ends[i]) and of the last GFGB load (*link). */
static double fp_timeline(const mf_prof *u, size_t n, const plan_pmode *mode, double *ends,
                          double *link)
{
    double l = 0, now = 0;
    for (size_t i = 0; i < n; i++) {
        if (mode[i] == PM_GFGB) {
            l += u[i].trans_us;
            if (l > now) now = l;
            now += u[i].fp_us;
        } else {
            now += u[i].fp_dha_us;
        }
        now += u[i].fp_other_us;
        ends[i] = now;
    }
    *link = l;
    return now;
}

/* Forward + backward with DFGB loads; *stalls counts the DFGB units whose load ends after
 * their backward would start (the backward then waits). */
static double iter_time(const mf_prof *u, size_t n, const plan_pmode *mode, size_t *stalls)
{
    double *ends = malloc((n ? n : 1) * sizeof *ends);
    double *ld = malloc((n ? n : 1) * sizeof *ld);
    if (!ends || !ld) {
        free(ends);
        free(ld);
        return INFINITY;
    }
    double link, now = fp_timeline(u, n, mode, ends, &link);
    for (size_t i = 0; i < n; i++) {
        if (mode[i] != PM_DFGB) continue;
        double st = link > ends[i] ? link : ends[i];
        link = st + u[i].trans_us;
        ld[i] = link;
    }
    size_t ns = 0;
    for (size_t k = n; k-- > 0;) {
        if (mode[k] == PM_DFGB && ld[k] > now) {
            ns++;
            now = ld[k];
        }
        now += u[k].bp_other_us + (mode[k] == PM_DHA ? u[k].bp_dha_us : u[k].bp_us);
    }
    free(ends);
    free(ld);
    if (stalls) *stalls = ns;
    return now;
}

double mf_iter_time(const mf_prof *u, size_t n, const plan_pmode *mode)
{
    return iter_time(u, n, mode, NULL);
}

typedef struct cand {
    size_t i;
    double key, benefit;
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->benefit != y->benefit) return x->benefit > y->benefit ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

size_t mf_dfgb_greedy(const mf_prof *u, size_t n, plan_pmode *mode)
{
    cand *c = malloc((n ? n : 1) * sizeof *c);
    if (!c) return 0;
    size_t nc = 0, made = 0;
    for (size_t i = 0; i < n; i++) {
        double b = u[i].bp_dha_us - u[i].bp_us;
        if (mode[i] != PM_DHA || !(b > 0)) continue;
        c[nc++] = (cand){ i, u[i].trans_us > 0 ? b / u[i].trans_us : INFINITY, b };
    }
    qsort(c, nc, sizeof *c, cmp_cand);
    for (size_t k = 0; k < nc; k++) {
        mode[c[k].i] = PM_DFGB;
        size_t stalls;
        iter_time(u, n, mode, &stalls);
        if (stalls) mode[c[k].i] = PM_DHA;
        else made++;
    }
    free(c);
    return made;
}

/* ---- GO-MemFerry's dynamic program ---- */

ms_status mf_go_dp(const double *gain_us, const uint64_t *size, size_t n, uint64_t cap,
                   int *keep, double *best_us)
{
    if (n && cap + 1 > (UINT64_C(1) << 26) / n) return MS_ERR_LIMIT;
    size_t w = (size_t)cap + 1;
    double *D = calloc(w, sizeof *D);              /* D[j] for the units so far */
    size_t cells = n * w;
    unsigned char *take = calloc(cells ? cells : 1, 1);
    if (!D || !take) {
        free(D);
        free(take);
        return MS_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        double g = gain_us[i] > 0 ? gain_us[i] : 0;
        if (size[i] > cap) continue;
        for (size_t j = w; j-- > (size_t)size[i];) {
            double with = D[j - size[i]] + g;
            if (with > D[j]) {
                D[j] = with;
                take[i * w + j] = 1;
            }
        }
    }
    size_t j = w - 1;
    for (size_t i = n; i-- > 0;) {
        keep[i] = take[i * w + j];
        if (keep[i]) j -= (size_t)size[i];
    }
    if (best_us) *best_us = D[w - 1];
    free(D);
    free(take);
    return MS_OK;
}

double mf_go_brute(const double *gain_us, const uint64_t *size, size_t n, uint64_t cap,
                   int *keep)
{
    if (n > 24) return NAN;
    double best = -1;
    uint32_t bs = 0;
    for (uint32_t s = 0; s < (UINT32_C(1) << n); s++) {
        uint64_t used = 0;
        double g = 0;
        for (size_t i = 0; i < n; i++)
            if ((s >> i) & 1) {
                used += size[i];
                g += gain_us[i] > 0 ? gain_us[i] : 0;
            }
        if (used <= cap && g > best) {
            best = g;
            bs = s;
        }
    }
    for (size_t i = 0; keep && i < n; i++) keep[i] = (bs >> i) & 1;
    return best;
}

/* ---- the policies ---- */

static void profile_of(const dha_model *d, mf_prof *p)
{
    for (size_t i = 0; i < dha_model_units(d); i++) {
        const dha_unit *u = dha_model_unit(d, i);
        p[i] = (mf_prof){ u->t_trans_us, u->t_fp_us,    u->t_fp_dha_us, u->t_fp_other_us,
                          u->t_bp_us,    u->t_bp_dha_us, u->t_bp_other_us };
    }
}

/* memferry's knobs and go-memferry's (which also reads memferry's). */
typedef struct mf_knobs {
    int dfgb, alg1_literal, grad_write_fused;
    double reserve;
    int go_unit, go_gain_copy;
    uint64_t given;
} mf_knobs;
static const char *const MF_ALG1[] = { "stall", "literal", NULL };
static const char *const MF_GRAD_WRITES[] = { "accumulate", "fused", NULL };
static const char *const MF_GO_ITEMS[] = { "module", "unit", NULL };
static const char *const MF_GO_GAINS[] = { "paper", "copy", NULL };
static const knobtab_row mf_rows[] = {
    KNOB_FLAG("dfgb", mf_knobs, dfgb, "1", "1: the greedy backward choice of DFGB units",
              "MemFerry §IV-B"),
    KNOB_ENUM("alg1", mf_knobs, alg1_literal, "stall", MF_ALG1,
              "line 3 of Algorithm 1: stall, or literal as printed", "MemFerry Algorithm 1"),
    KNOB_ENUM("grad_write", mf_knobs, grad_write_fused, "accumulate", MF_GRAD_WRITES,
              "how host gradients are written (the planner's timing and the lowering's)",
              "MemFerry §IV-D"),
};
static const knobtab_row go_rows[] = {
    KNOB_DBL("reserve", mf_knobs, reserve, "0", -HUGE_VAL, HUGE_VAL,
             "fraction of the gradient bytes kept on the GPU, in [0, 1]", "MemFerry §IV-D"),
    KNOB_ENUM("go_granularity", mf_knobs, go_unit, "module", MF_GO_ITEMS,
              "the dynamic program's items: PyTorch modules, as the paper, or whole units",
              "MemFerry §IV-D"),
    KNOB_ENUM("go_gain", mf_knobs, go_gain_copy, "paper", MF_GO_GAINS,
              "an item's gain: T_GBP - T_CBP, as the paper, or less the GPU gradient copy no "
              "later backward hides", "MemFerry §IV-D"),
};
static const knobtab mf_knob_table = KNOBTAB("memferry", mf_rows, KNOBTAB_MSG_KNOB, mf_knobs,
                                             given);
static const knobtab go_knob_table = KNOBTAB("go-memferry", go_rows, KNOBTAB_MSG_KNOB,
                                             mf_knobs, given);

/* who's knobs (go: go-memferry's too) from o; an error names the policy. */
static ms_status read_mf_knobs(const pol_opts *o, const char *who, int go, mf_knobs *k,
                               lower_dha_knobs *lk, ms_error *err)
{
    ms_error e;
    mf_knobs g;
    ms_status st = knob_from_opts(&mf_knob_table, o, k, &e);
    if (!st && go) st = knob_from_opts(&go_knob_table, o, &g, &e);
    if (!st && lk) st = knob_from_opts(&lower_dha_knob_table, o, lk, &e);
    if (st) return ms_fail(err, st, "%s: %s", who, e.msg);
    if (go) {
        k->reserve = g.reserve;
        k->go_unit = g.go_unit;
        k->go_gain_copy = g.go_gain_copy;
    } else {
        k->reserve = -1;
        k->go_unit = 0;
        k->go_gain_copy = 0;
    }
    return MS_OK;
}

/* A predicted figure as plans have always recorded it: six significant digits. */
static double to_6g(double v)
{
    char b[48];
    snprintf(b, sizeof b, "%.6g", v);
    return strtod(b, NULL);
}

static ms_status set_knob_num(plan_t *p, const char *key, double v)
{
    char b[48];
    snprintf(b, sizeof b, "%.6g", v);
    return plan_set_knob(p, key, b);
}

/* The items of GO-MemFerry's dynamic program: units (go_granularity=unit) or modules
 * (module, the paper's: §IV-D lets each PyTorch module's gradient go to the host on its
 * own). gain = T_GBP - T_CBP for the grad_write in force; for fused writes it depends on
 * whether the writers read their parameters over DHA (the unit's mode). */
typedef struct go_items {
    size_t n;
    double *gain;
    uint64_t *bytes;
    int32_t *layer;     /* plan layer of the unit holding the item */
    uint64_t *id;       /* module: its grad_host.N id (parameter, or the whole buffer) */
    int *keep;
} go_items;

static void go_items_free(go_items *g)
{
    free(g->gain);
    free(g->bytes);
    free(g->layer);
    free(g->id);
    free(g->keep);
}

/* go_gain=copy: an item of the unit whose backward runs last (the embedding) kept on the
 * GPU still has its gradient copied to the host for the host Adam, and nothing after that
 * backward hides the copy: its gain is the write cost less that copy. Every other unit's
 * copy overlaps the backward of the units after it. */
static double exposed_copy_us(const dha_model *d, const machine_t *m, int32_t layer,
                              uint64_t bytes)
{
    int32_t last = dha_model_unit(d, 0)->layer;
    if (layer != last || !m || !(m->link_d2h_Bps > 0)) return 0;
    return (double)bytes / m->link_d2h_Bps * 1e6;
}

static ms_status go_items_of(const dha_model *d, const machine_t *mach, const plan_pmode *mode,
                             int modules, int fused, int copy_aware, go_items *g)
{
    size_t n = modules ? dha_model_modules(d) : dha_model_units(d);
    memset(g, 0, sizeof *g);
    g->n = n;
    size_t c = n ? n : 1;
    g->gain = calloc(c, sizeof *g->gain);
    g->bytes = calloc(c, sizeof *g->bytes);
    g->layer = calloc(c, sizeof *g->layer);
    g->id = calloc(c, sizeof *g->id);
    g->keep = calloc(c, sizeof *g->keep);
    if (!g->gain || !g->bytes || !g->layer || !g->id || !g->keep) return MS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        double acc, ex, exd;
        if (modules) {
            const dha_module *m = dha_model_module(d, i);
            acc = m->t_gw_acc_us, ex = m->t_gw_extra_us, exd = m->t_gw_extra_dha_us;
            g->bytes[i] = m->grad_bytes;
            g->layer[i] = m->layer;
            g->id[i] = m->param_id ? m->param_id : m->grad_id;
        } else {
            const dha_unit *u = dha_model_unit(d, i);
            acc = u->t_gw_acc_us, ex = u->t_gw_extra_us, exd = u->t_gw_extra_dha_us;
            g->bytes[i] = u->grad_bytes;
            g->layer[i] = u->layer;
        }
        g->gain[i] = !fused ? acc : mode[g->layer[i] + 1] == PM_DHA ? exd : ex;
        if (copy_aware) g->gain[i] -= exposed_copy_us(d, mach, g->layer[i], g->bytes[i]);
    }
    return MS_OK;
}

/* The DP over the items for the reserve factor. Bytes in units of total/4096 (sizes rounded
 * up, the budget down, so the kept gradients always fit the reserve). */
static ms_status go_choose(go_items *g, double reserve, double *kept_frac, double *cost_us)
{
    uint64_t total = 0, kept = 0;
    for (size_t i = 0; i < g->n; i++) total += g->bytes[i];
    uint64_t q = total / 4096 + 1;
    uint64_t cap = (uint64_t)floor(reserve * (double)total / (double)q);
    uint64_t *size = malloc((g->n ? g->n : 1) * sizeof *size);
    if (!size) return MS_ERR_NOMEM;
    for (size_t i = 0; i < g->n; i++) size[i] = (g->bytes[i] + q - 1) / q;
    ms_status st = MS_OK;
    if (reserve >= 1)
        for (size_t i = 0; i < g->n; i++) g->keep[i] = 1;
    else
        st = mf_go_dp(g->gain, size, g->n, cap, g->keep, NULL);
    free(size);
    *cost_us = 0;
    for (size_t i = 0; i < g->n; i++) {
        kept += g->keep[i] ? g->bytes[i] : 0;
        *cost_us += g->keep[i] || !(g->gain[i] > 0) ? 0 : g->gain[i];
    }
    *kept_frac = total ? (double)kept / (double)total : 1.0;
    return st;
}

/* The plan's gradient lines: a unit whose items all go to the host is grad=host; a unit with
 * some modules on the host lists them in knob grad_host.N (planners/memferry/lower_dha.h). */
static ms_status go_write(plan_t *p, const dha_model *d, const plan_pmode *mode,
                          const go_items *g, int modules, const char *who, ms_error *err)
{
    ms_status st = MS_OK;
    for (size_t u = 0; u < dha_model_units(d) && !st; u++) {
        int32_t L = dha_model_unit(d, u)->layer;
        size_t nh = 0, nall = 0;
        char list[96] = "";
        size_t len = 0;
        for (size_t i = 0; i < g->n; i++) {
            if (g->layer[i] != L || !g->bytes[i]) continue;
            nall++;
            if (g->keep[i]) continue;
            nh++;
            if (!modules) continue;
            int w = snprintf(list + len, sizeof list - len, "%s%llu", len ? "," : "",
                             (unsigned long long)g->id[i]);
            if (w < 0 || (size_t)w >= sizeof list - len)
                return ms_fail(err, MS_ERR_LIMIT, "%s: layer %d has too many modules with host "
                               "gradients for one plan knob (use go_granularity=unit)", who,
                               (int)L);
            len += (size_t)w;
        }
        int host = nall && nh == nall;
        st = plan_set_layer(p, L, mode[u], host);
        if (!st && nh && !host) {
            char key[48];
            snprintf(key, sizeof key, "grad_host.%d", (int)L);
            st = plan_set_knob(p, key, list);
        }
    }
    return st;
}

/* Shared by memferry and go-memferry: the modes, then (reserve >= 0) the gradient plan. */
static ms_status plan_mf(const char *name, const trace_t *t, const machine_t *m,
                         const pol_opts *o, double reserve, plan_t **out, ms_error *err)
{
    *out = NULL;
    char who[64];
    snprintf(who, sizeof who, "policy %s", name);
    ms_status st = dha_check_machine(m, who, err);
    if (st) return st;
    mf_knobs k;
    lower_dha_knobs lk;
    if ((st = read_mf_knobs(o, who, reserve >= 0, &k, &lk, err))) return st;
    int dfgb = k.dfgb, fused = k.grad_write_fused, literal = k.alg1_literal;
    int modules = !k.go_unit, copy_aware = k.go_gain_copy;
    dha_model *d;
    ms_error e2;
    if ((st = dha_model_new(t, m, &d, &e2))) return ms_fail(err, st, "%s: %s", who, e2.msg);
    size_t n = dha_model_units(d);
    mf_prof *pr = malloc(n * sizeof *pr);
    plan_pmode *mode = malloc(n * sizeof *mode);
    go_items g;
    memset(&g, 0, sizeof g);
    plan_t *p = NULL;
    if (!pr || !mode) st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    double t_all = 0, t_res = 0, kept = 1, go_cost = 0;
    size_t made = 0;
    if (!st) {
        profile_of(d, pr);
        mf_alg1(pr, n, literal, mode, &t_all, &t_res);
        if (dfgb) made = mf_dfgb_greedy(pr, n, mode);
    }
    if (!st && reserve >= 0) {
        if ((st = go_items_of(d, m, mode, modules, fused, copy_aware, &g)))
            st = ms_fail(err, st, "out of memory");
        else if ((st = go_choose(&g, reserve, &kept, &go_cost)))
            st = ms_fail(err, st, "%s: the gradient dynamic program failed (%s)", who,
                         ms_status_str(st));
    }
    if (!st) st = pol_plan_new(name, o, &p, err);
    int made_plan = !st;
    if (!st && reserve >= 0) {
        st = go_write(p, d, mode, &g, modules, who, err);
        if (st) made_plan = 0;
    }
    for (size_t i = 0; !st && reserve < 0 && i < n; i++)
        st = plan_set_layer(p, dha_model_unit(d, i)->layer, mode[i], 0);
    /* its decisions for the lowering, recorded through the lowering's tables */
    lower_dha_marker mk = { 0, 0 };
    lower_dha_knobs dec;
    memset(&dec, 0, sizeof dec);
    knobtab_defaults(&lower_dha_knob_table, &dec);
    KNOB_DECIDE(&lower_dha_marker_table, &mk, host_params, 1);
    /* The host update starts when the backward's kernels are done and takes each unit as its
     * gradients land, in parallel with the copies still under way: MemFerry §II-C moves the
     * "BP bubble" (ZeRO-Offload's update waiting for the last gradient copy) by running the
     * update in parallel with the remaining gradient transmission, not with the BP; MemFerry
     * builds on ZeRO-Offload, whose CPU Adam is the optimizer step after the backward.
     * update=pipelined (each unit's step during the backward) is the other reading. */
    if (!knobtab_given(&lower_dha_knob_table, &lk, &lk.update))
        KNOB_DECIDE(&lower_dha_knob_table, &dec, update, LOWER_DHA_UPD_AFTER_BP);
    if (!knobtab_given(&lower_dha_knob_table, &lk, &lk.param_load))
        KNOB_DECIDE(&lower_dha_knob_table, &dec, param_load, LOWER_DHA_LOAD_FORWARD);
    if (!st) st = knob_given_to_plan(&lower_dha_marker_table, &mk, p, err);
    if (!st) st = knob_given_to_plan(&lower_dha_knob_table, &dec, p, err);
    /* What the planner estimated, for readers of the plan file. */
    if (!st) {
        PLAN_PREDICT(p, alg1_fp_us, to_6g(t_all));
        PLAN_PREDICT(p, fp_us, to_6g(mf_fp_time(pr, n, mode, NULL)));
        PLAN_PREDICT(p, iter_compute_us, to_6g(mf_iter_time(pr, n, mode)));
    }
    if (!st) st = set_knob_num(p, "dfgb_units", (double)made);
    if (!st && reserve >= 0) PLAN_PREDICT(p, grad_gpu_frac, to_6g(kept));
    if (!st && reserve >= 0) st = set_knob_num(p, "go_items", (double)g.n);
    /* The backward time the offloaded gradients add, by the DP's own figures. */
    if (!st && reserve >= 0) PLAN_PREDICT(p, go_cost_us, to_6g(go_cost));
    if (st && made_plan) st = ms_fail(err, st, "%s: cannot record the plan", who);
    free(pr);
    free(mode);
    go_items_free(&g);
    dha_model_free(d);
    if (st) {
        plan_free(p);
        return st;
    }
    plan_sort(p);
    *out = p;
    return MS_OK;
}

static ms_status plan_memferry(const trace_t *t, const machine_t *m, const pol_opts *o,
                               plan_t **out, ms_error *err)
{
    return plan_mf("memferry", t, m, o, -1, out, err);
}

static ms_status plan_go_memferry(const trace_t *t, const machine_t *m, const pol_opts *o,
                                  plan_t **out, ms_error *err)
{
    mf_knobs k;
    ms_status st = read_mf_knobs(o, "policy go-memferry", 1, &k, NULL, err);
    if (st) return st;
    double r = k.reserve;
    if (!(r >= 0 && r <= 1))
        return ms_fail(err, MS_ERR_INVALID, "policy go-memferry: knob reserve=%g is outside "
                       "[0,1] (the fraction of the gradients kept on the GPU)", r);
    return plan_mf("go-memferry", t, m, o, r, out, err);
}

static const knobtab *const MF_KNOB_GROUPS[] = { &mf_knob_table, &lower_dha_knob_table,
                                                 &lower_dha_marker_table, NULL };
static const knobtab *const GO_KNOB_GROUPS[] = { &go_knob_table, &mf_knob_table,
                                                 &lower_dha_knob_table, &lower_dha_marker_table,
                                                 NULL };

const pol_policy pol_memferry = {
    "memferry",
    "parameters on the host; per layer GFGB (copied to the GPU), DHA (read over the link) or "
    "DFGB (DHA forward, GPU backward) by Algorithm 1 and a greedy backward choice; gradients "
    "copied back during the backward, host Adam from the backward's end, overlapping the last "
    "copies",
    "MemFerry (Yao et al., INFOCOM 2025) §IV-B, Algorithm 1, shadow model §IV-C",
    &mf_knob_table,
    plan_memferry,
    MF_KNOB_GROUPS,
    POL_FORM_OFFLOAD,
    0,
    "dha",
    NULL,
};

const pol_policy pol_go_memferry = {
    "go-memferry",
    "memferry plus DHA gradient offload: the layers whose gradients stay on the GPU chosen by "
    "a dynamic program within reserve x the gradient bytes, the others written to the host "
    "by the backward kernels",
    "MemFerry (Yao et al., INFOCOM 2025) §IV-D, GO-MemFerry",
    &go_knob_table,
    plan_go_memferry,
    GO_KNOB_GROUPS,
    POL_FORM_OFFLOAD,
    0,
    "dha",
    NULL,
};

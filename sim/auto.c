/* auto.c — the policy `auto` (see auto.h): candidates made from the policy registry and the
 * moves on their plans, each planned by its own planner, pruned, simulated, and the fastest
 * that fits chosen; when nothing fits, the nearby workloads and machines searched the same
 * way. Used by sim/runs.c. */
#define _POSIX_C_SOURCE 200809L
#include "sim/auto.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "planners/knob.h"
#include "base/util.h"

/* caching's max_split_size when auto tries it: blocks above it are never split, which keeps
 * the large activations from fragmenting the cache (PyTorch's max_split_size_mb) */
#define AUTO_MAX_SPLIT_BYTES (UINT64_C(512) << 20)
/* MEMO's alpha grid (its own LP picks one alpha; the grid lets the simulator judge) */
static const double ALPHA_GRID[] = { 0.0, 0.25, 0.5, 0.75, 1.0 };
/* the plans keep-last-k applies to: what they free or offload is kept for the last k layers */
static const char *const KEEP_LAST_BASES[] = { "full-recompute", "full-swap" };

typedef struct auto_ctx {
    const pipe_workload *w;
    const machine_t *m;
    const pipe_policy *p;
    const auto_opts *o;
    auto_result *res;
} auto_ctx;

int auto_is(const char *policy)
{
    return policy && !strcmp(policy, AUTO_POLICY);
}

void auto_opts_default(auto_opts *o)
{
    o->prune = 1;
    o->hints = 1;
    o->moves = 1;
}

/* The workload in form k, made once (a form the user fixed is the only one). */
static ms_status form_get(auto_ctx *x, pol_form k, const trace_t **t, ms_error *err)
{
    if (pipe_form_set(x->w) && !x->w->trace_path) k = POL_FORM_PLAIN;
    if (!x->res->forms[k]) {
        ms_status st = pipe_trace_for(x->w, x->m, k, &x->res->forms[k], err);
        if (st != MS_OK) return st;
        x->res->own[k] = 1;
    }
    *t = x->res->forms[k];
    return MS_OK;
}

static auto_cand *cand_add(auto_ctx *x, const char *policy)
{
    auto_result *r = x->res;
    if (ms_grow((void **)&r->c, &r->cap, r->n + 1, sizeof *r->c)) return NULL;
    auto_cand *c = &r->c[r->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->policy, sizeof c->policy, "%s", policy);
    c->alpha = -1;
    c->status = RS_ERROR;
    return c;
}

static void cand_label(auto_cand *c)
{
    size_t n = (size_t)snprintf(c->label, sizeof c->label, "%s", c->policy);
    if (c->alpha >= 0 && n < sizeof c->label)
        n += (size_t)snprintf(c->label + n, sizeof c->label - n, " alpha=%.2f", c->alpha);
    if (c->keep_last > 0 && n < sizeof c->label)
        n += (size_t)snprintf(c->label + n, sizeof c->label - n, " keep_last=%d", c->keep_last);
    if (c->allocator && n < sizeof c->label)
        n += (size_t)snprintf(c->label + n, sizeof c->label - n, " alloc=%s", c->allocator);
    if (c->max_split_bytes && n < sizeof c->label)
        snprintf(c->label + n, sizeof c->label - n, " max_split=%" PRIu64 "MiB",
                 c->max_split_bytes >> 20);
}

static int id_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The number of layers the skeletal activations of t span (0: none). */
static int32_t layers_of(const trace_t *t)
{
    pol_skel *sk;
    size_t n;
    ms_error e;
    if (pol_skeletal(t, &sk, &n, &e) != MS_OK) return 0;
    int32_t L = 0;
    for (size_t i = 0; i < n; i++)
        if (sk[i].layer + 1 > L) L = sk[i].layer + 1;
    free(sk);
    return L;
}

/* keep-last-k: the skeletal activations of the last k layers stay on the GPU, the others
 * keep the base plan's decision. Only per-tensor decisions change, so the tensor lowering
 * runs the plan as it runs any other. */
static ms_status keep_last(const trace_t *t, plan_t *plan, int k, ms_error *err)
{
    pol_skel *sk;
    size_t n;
    ms_status st = pol_skeletal(t, &sk, &n, err);
    if (st != MS_OK) return st;
    int32_t L = 0;
    for (size_t i = 0; i < n; i++)
        if (sk[i].layer + 1 > L) L = sk[i].layer + 1;
    uint64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    size_t m = 0;
    for (size_t i = 0; ids && i < n; i++)
        if (sk[i].layer >= L - k) ids[m++] = sk[i].id;
    free(sk);
    if (!ids) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    qsort(ids, m, sizeof *ids, id_cmp);
    for (size_t i = 0; i < plan->n_tensors; i++) {
        plan_tensor *pt = &plan->tensors[i];
        if (m && bsearch(&pt->id, ids, m, sizeof *ids, id_cmp)) {
            pt->decision = PD_KEEP;
            pt->alpha = 0;
        }
    }
    free(ids);
    return MS_OK;
}

/* Candidate c's plan on its form's trace: its policy's planner, then the moves. */
static ms_status cand_plan(auto_ctx *x, const auto_cand *c, const trace_t **t, plan_t **out,
                           ms_error *err)
{
    ms_status st = form_get(x, pol_form_of(c->policy), t, err);
    if (st != MS_OK) return st;
    pipe_policy q = *x->p;
    q.policy = c->policy;
    q.plan_path = NULL;
    if (c->alpha >= 0) q.alpha = c->alpha;
    if ((st = pipe_plan(*t, x->m, &q, out, err)) != MS_OK) return st;
    if (c->keep_last > 0 && (st = keep_last(*t, *out, c->keep_last, err)) != MS_OK) {
        plan_free(*out);
        return st;
    }
    if (c->allocator) snprintf((*out)->allocator, sizeof (*out)->allocator, "%s", c->allocator);
    if (c->max_split_bytes) (*out)->alloc_cfg.max_split_size_bytes = c->max_split_bytes;
    return MS_OK;
}

/* The planner's own prediction rules c out: it found no configuration within the budget
 * and predicts a peak well above the device (simulating its closest plan would be an oom). */
static int predicted_out(auto_ctx *x, auto_cand *c, const plan_t *plan)
{
    knob_predictions pr;
    if (!x->o->prune || knob_predictions_of(plan, &pr, NULL) != MS_OK || pr.feasible) return 0;
    uint64_t usable = machine_usable_bytes(x->m);
    if (!knob_predicted(&pr, &pr.peak_bytes) || pr.peak_bytes <= usable + usable / 20) return 0;
    snprintf(c->why, sizeof c->why, "pruned: its planner predicts %.2f GiB > %.2f GiB usable",
             (double)pr.peak_bytes / MS_GiB, (double)usable / MS_GiB);
    return 1;
}

/* Plans, prunes or simulates candidate i; fills its row. */
static void cand_run(auto_ctx *x, size_t i)
{
    auto_cand *c = &x->res->c[i];
    cand_label(c);
    const trace_t *t;
    plan_t *plan;
    ms_error e;
    ms_error_clear(&e);
    ms_status st = cand_plan(x, c, &t, &plan, &e);
    if (st != MS_OK) {
        snprintf(c->why, sizeof c->why, "%.150s", e.msg[0] ? e.msg : ms_status_str(st));
        return;
    }
    snprintf(c->plan_alloc, sizeof c->plan_alloc, "%s", plan->allocator);
    if (predicted_out(x, c, plan)) {
        plan_free(plan);
        return;
    }
    sim_result r;
    st = pipe_simulate_with(t, x->m, plan, NULL, x->p, &r, &e);
    plan_free(plan);
    c->simulated = 1;
    x->res->n_simulated++;
    if (st != MS_OK) {
        snprintf(c->why, sizeof c->why, "%.150s", e.msg[0] ? e.msg : ms_status_str(st));
        return;
    }
    c->status = r.status;
    c->iter_time_s = r.iter_time_s;
    c->peak_bytes = r.peak_reserved_bytes;
    c->host_bytes = r.host_peak_bytes;
    if (r.status != RS_OK) {
        uint64_t live = 0;
        for (int k = 0; k < BM_COUNT; k++) live += r.peak_live_bytes[k];
        if (r.peak_live_at_failure) c->live_fail_bytes = live;
        snprintf(c->why, sizeof c->why, "%s: %.2f GiB live at the failure",
                 res_status_name(r.status), (double)live / MS_GiB);
    }
}

/* a before b in the choice: fits, then faster, then smaller peak, then earlier. */
static int better(const auto_cand *a, size_t ia, const auto_cand *b, size_t ib)
{
    if ((a->status == RS_OK) != (b->status == RS_OK)) return a->status == RS_OK;
    if (a->status == RS_OK && a->iter_time_s != b->iter_time_s)
        return a->iter_time_s < b->iter_time_s;
    if (a->status != RS_OK && a->simulated != b->simulated) return a->simulated;
    if (a->peak_bytes != b->peak_bytes) return a->peak_bytes < b->peak_bytes;
    return ia < ib;
}

static long best_ok(const auto_result *r)
{
    long b = -1;
    for (size_t i = 0; i < r->n; i++)
        if (r->c[i].status == RS_OK && (b < 0 || better(&r->c[i], i, &r->c[b], (size_t)b)))
            b = (long)i;
    return b;
}

/* The allocators auto tries besides the plan's own caching allocator. */
static void alloc_variants(auto_ctx *x, size_t base)
{
    if (!x->o->moves || x->p->allocator || x->p->alloc_cfg_set) return;
    auto_cand b = x->res->c[base];
    /* the variants replace the caching allocator a planner wrote (a static plan's offsets
     * are its planner's, not to be swapped away) */
    if (strcmp(b.plan_alloc, "caching") || (b.status == RS_ERROR && !b.simulated)) return;
    static const char *const names[] = { "caching", "expandable", "stitching" };
    long best = best_ok(x->res);
    for (size_t v = 0; v < 3; v++) {
        auto_cand *c = cand_add(x, b.policy);
        if (!c) return;
        auto_cand *bb = &x->res->c[base];
        c->alpha = bb->alpha;
        c->keep_last = bb->keep_last;
        c->allocator = names[v];
        if (v == 0) c->max_split_bytes = AUTO_MAX_SPLIT_BYTES;
        /* the bytes live when the base failed: no allocator packs more than the device */
        if (x->o->prune && bb->status == RS_OOM && bb->live_fail_bytes > machine_usable_bytes(x->m)) {
            cand_label(c);
            snprintf(c->why, sizeof c->why, "pruned: %.2f GiB live at its base's oom exceed the "
                     "device, whatever the allocator", (double)bb->live_fail_bytes / MS_GiB);
            continue;
        }
        if (x->o->prune && bb->status == RS_OK && best >= 0 &&
            bb->iter_time_s > x->res->c[best].iter_time_s * 1.05) {
            cand_label(c);
            snprintf(c->why, sizeof c->why, "pruned: its base runs over 5 %% behind the best");
            continue;
        }
        cand_run(x, x->res->n - 1);
    }
}

/* One candidate of `policy` (alpha < 0: its own; keep > 0: keep-last-k), run, with its
 * allocator variants. Returns its index, or -1 out of memory. */
static long group(auto_ctx *x, const char *policy, double alpha, int keep)
{
    auto_cand *c = cand_add(x, policy);
    if (!c) return -1;
    c->alpha = alpha;
    c->keep_last = keep;
    size_t i = x->res->n - 1;
    cand_run(x, i);
    alloc_variants(x, i);
    return (long)i;
}

static void single_policies(auto_ctx *x)
{
    size_t n;
    const pol_policy *const *reg = pol_registry(&n);
    for (size_t i = 0; i < n; i++) group(x, reg[i]->name, -1, 0);
}

static void alpha_grid(auto_ctx *x)
{
    if (!x->o->moves || x->p->alpha >= 0) return;
    for (size_t i = 0; i < sizeof ALPHA_GRID / sizeof *ALPHA_GRID; i++)
        group(x, "memo", ALPHA_GRID[i], 0);
}

static const auto_cand *find_base(const auto_result *r, const char *policy)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->c[i].policy, policy) && r->c[i].alpha < 0 && !r->c[i].keep_last &&
            !r->c[i].allocator)
            return &r->c[i];
    return NULL;
}

/* keep-last-k over one base: the largest k that fits, by bisection (keeping a layer more
 * never lowers the peak); without pruning, every k. */
static void keep_last_search(auto_ctx *x, const char *base, int32_t L)
{
    const auto_cand *b = find_base(x->res, base), *all = find_base(x->res, "keep-all");
    if (!b || L < 2) return;
    if (!x->o->prune) {
        for (int k = 1; k < L; k++) group(x, base, -1, k);
        return;
    }
    if (b->status != RS_OK || (all && all->status == RS_OK)) return; /* nothing to gain */
    int lo = 0, hi = L; /* lo fits (the base), hi does not (keep-all) */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        auto_cand *c = cand_add(x, base);
        if (!c) return;
        c->keep_last = mid;
        cand_run(x, x->res->n - 1);
        if (x->res->c[x->res->n - 1].status == RS_OK) lo = mid;
        else hi = mid;
    }
    if (lo > 0) { /* the allocators for the one that keeps most */
        for (size_t i = 0; i < x->res->n; i++)
            if (!strcmp(x->res->c[i].policy, base) && x->res->c[i].keep_last == lo &&
                !x->res->c[i].allocator) {
                alloc_variants(x, i);
                break;
            }
    }
}

/* The runner-ups: the next fastest that fit, in the choice's order. */
static void runner_ups(auto_result *r)
{
    size_t *order = malloc((r->n ? r->n : 1) * sizeof *order), m = 0;
    if (!order) return;
    for (size_t i = 0; i < r->n; i++)
        if (r->c[i].status == RS_OK && (long)i != r->shown) order[m++] = i;
    for (size_t a = 0; a < m; a++) /* insertion sort */
        for (size_t b = a; b > 0 && better(&r->c[order[b]], order[b], &r->c[order[b - 1]],
                                            order[b - 1]); b--) {
            size_t s = order[b];
            order[b] = order[b - 1];
            order[b - 1] = s;
        }
    for (r->n_runner_ups = 0; r->n_runner_ups < m && r->n_runner_ups < AUTO_RUNNER_UPS;
         r->n_runner_ups++) {
        const auto_cand *c = &r->c[order[r->n_runner_ups]];
        snprintf(r->runner_up[r->n_runner_ups], sizeof r->runner_up[0], "%.60s: %.4f s, %.2f GiB",
                 c->label, c->iter_time_s, (double)c->peak_bytes / MS_GiB);
    }
    free(order);
}

/* The knobs that say how the plan was chosen, and the runner-ups. */
static void explain_knobs(const auto_result *r, plan_t *plan)
{
    char v[96];
    plan_set_knob(plan, "auto.chosen", r->c[r->shown].label);
    snprintf(v, sizeof v, "%zu candidates, %zu simulated", r->n, r->n_simulated);
    plan_set_knob(plan, "auto.searched", v);
    for (size_t k = 0; k < r->n_runner_ups; k++) {
        char key[48];
        snprintf(key, sizeof key, "auto.runner_up.%zu", k + 1);
        plan_set_knob(plan, key, r->runner_up[k]);
    }
}

/* Plans the shown candidate again (planners are deterministic), writes the explanation into
 * its plan and simulates it for the result. */
static ms_status finish(auto_ctx *x, ms_error *err)
{
    auto_result *r = x->res;
    r->winner = best_ok(r);
    r->shown = r->winner;
    for (size_t i = 0; r->shown < 0 && i < r->n; i++) /* nothing fits: the smallest failure */
        if (r->c[i].simulated && r->c[i].status != RS_ERROR) r->shown = (long)i;
    for (size_t i = 0; r->winner < 0 && r->shown >= 0 && i < r->n; i++)
        if (r->c[i].simulated && r->c[i].status != RS_ERROR &&
            better(&r->c[i], i, &r->c[r->shown], (size_t)r->shown))
            r->shown = (long)i;
    if (r->shown < 0)
        return ms_fail(err, MS_ERR_INVALID, "auto: no candidate could run on the workload "
                       "(first: %s: %s)", r->n ? r->c[0].label : "-", r->n ? r->c[0].why : "-");
    const auto_cand *c = &r->c[r->shown];
    const trace_t *t;
    ms_status st = cand_plan(x, c, &t, &r->plan, err);
    if (st != MS_OK) return st;
    r->form = pol_form_of(c->policy);
    runner_ups(r);
    explain_knobs(r, r->plan);
    return pipe_simulate_with(t, x->m, r->plan, NULL, x->p, &r->r, err);
}

/* The quick search of a nearby workload or machine: the registered policies alone. Fills
 * hint h when something fits there; returns 1 then. */
static int try_hint(auto_ctx *x, const pipe_workload *w, const machine_t *m, const char *change)
{
    auto_result hr;
    auto_opts o = *x->o;
    o.hints = 0;
    o.moves = 0;
    ms_error e;
    if (x->res->n_hints >= AUTO_MAX_HINTS) return 0;
    int fit = 0;
    if (auto_search(w, NULL, m, x->p, &o, &hr, &e) == MS_OK && hr.winner >= 0) {
        auto_hint *h = &x->res->hints[x->res->n_hints++];
        snprintf(h->change, sizeof h->change, "%s", change);
        snprintf(h->label, sizeof h->label, "%s", hr.c[hr.winner].label);
        h->iter_time_s = hr.c[hr.winner].iter_time_s;
        h->peak_bytes = hr.c[hr.winner].peak_bytes;
        fit = 1;
    }
    auto_result_free(&hr);
    return fit;
}

static const char *count_name(uint64_t v, char *buf, size_t n)
{
    if (v && v % (UINT64_C(1) << 20) == 0) snprintf(buf, n, "%" PRIu64 "M", v >> 20);
    else if (v && v % 1024 == 0) snprintf(buf, n, "%" PRIu64 "K", v >> 10);
    else snprintf(buf, n, "%" PRIu64, v);
    return buf;
}

/* Nothing fits: the largest shorter sequence and micro-batch (halving), the smallest larger
 * tp and cp (doubling within the node), and each other shipped machine that fits. */
static void hints(auto_ctx *x)
{
    const pipe_workload *w0 = x->w;
    if (!x->o->hints || w0->trace_path) return;
    const trace_t *t = x->res->forms[POL_FORM_PLAIN] ? x->res->forms[POL_FORM_PLAIN]
                                                     : x->res->forms[POL_FORM_OFFLOAD];
    uint64_t seq = t ? trace_meta_u64(t, "seq", 0) : w0->seq;
    char ch[64], b[32];
    for (uint64_t s = seq / 2, k = 0; s >= 1024 && k < 4; s /= 2, k++) {
        pipe_workload w = *w0;
        w.seq = s;
        snprintf(ch, sizeof ch, "seq %s", count_name(s, b, sizeof b));
        if (try_hint(x, &w, x->m, ch)) break;
    }
    for (uint64_t bt = (w0->batch ? w0->batch : 1) / 2; bt >= 1; bt /= 2) {
        pipe_workload w = *w0;
        w.batch = bt;
        snprintf(ch, sizeof ch, "batch %" PRIu64, bt);
        if (try_hint(x, &w, x->m, ch)) break;
    }
    int gpus = x->m->node_gpus > 0 ? (int)x->m->node_gpus : 1;
    int tp = w0->tp ? w0->tp : 1, cp = w0->cp ? w0->cp : 1, dp = w0->dp ? w0->dp : 1;
    for (int v = tp * 2; v * cp * dp <= gpus; v *= 2) {
        pipe_workload w = *w0;
        w.tp = v;
        snprintf(ch, sizeof ch, "tp %d", v);
        if (try_hint(x, &w, x->m, ch)) break;
    }
    for (int v = cp * 2; tp * v * dp <= gpus; v *= 2) {
        pipe_workload w = *w0;
        w.cp = v;
        snprintf(ch, sizeof ch, "cp %d", v);
        if (try_hint(x, &w, x->m, ch)) break;
    }
    char **names;
    size_t n;
    ms_error e;
    if (machine_list(&names, &n, &e) != MS_OK) return;
    for (size_t i = 0; i < n; i++) {
        machine_profile *mp;
        if (strcmp(names[i], x->m->name) && machine_load_named(names[i], &mp, &e) == MS_OK) {
            snprintf(ch, sizeof ch, "machine %s", names[i]);
            try_hint(x, w0, &mp->m, ch);
            machine_profile_free(mp);
        }
        free(names[i]);
    }
    free(names);
}

ms_status auto_search(const pipe_workload *w, const trace_t *plain, const machine_t *m,
                      const pipe_policy *p, const auto_opts *o, auto_result *res,
                      ms_error *err)
{
    auto_opts od;
    if (!o) {
        auto_opts_default(&od);
        o = &od;
    }
    memset(res, 0, sizeof *res);
    res->winner = res->shown = -1;
    res->forms[POL_FORM_PLAIN] = (trace_t *)plain; /* borrowed: own[] stays 0 */
    auto_ctx x = { w, m, p, o, res };
    const trace_t *t;
    ms_status st = form_get(&x, POL_FORM_PLAIN, &t, err);
    if (st != MS_OK) return st;
    single_policies(&x);
    alpha_grid(&x);
    int32_t L = o->moves ? layers_of(t) : 0;
    for (size_t i = 0; L && i < sizeof KEEP_LAST_BASES / sizeof *KEEP_LAST_BASES; i++)
        keep_last_search(&x, KEEP_LAST_BASES[i], L);
    if ((st = finish(&x, err)) != MS_OK) return st;
    if (res->winner < 0) hints(&x);
    return MS_OK;
}

void auto_result_free(auto_result *res)
{
    free(res->c);
    plan_free(res->plan);
    for (int k = 0; k < 2; k++)
        if (res->own[k]) trace_free(res->forms[k]);
    memset(res, 0, sizeof *res);
}

const trace_t *auto_trace(const auto_result *res)
{
    pol_form k = res->form;
    return res->forms[k] ? res->forms[k] : res->forms[POL_FORM_PLAIN];
}

void auto_note(const auto_result *r, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    if (r->shown < 0) return;
    const auto_cand *c = &r->c[r->shown];
    if (r->winner >= 0)
        len = (size_t)snprintf(buf, n, "chose %s (%zu candidates, %zu simulated)", c->label,
                               r->n, r->n_simulated);
    else
        len = (size_t)snprintf(buf, n, "nothing fits (closest: %s); fits with:%s", c->label,
                               r->n_hints ? "" : " no change searched");
    if (r->winner >= 0) {
        for (size_t k = 0; k < r->n_runner_ups && len < n; k++)
            len += (size_t)snprintf(buf + len, n - len, "%s %s", k ? ";" : "; then",
                                    r->runner_up[k]);
        return;
    }
    for (size_t i = 0; i < r->n_hints && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s %s (%s, %.4f s)", i ? ";" : "",
                                r->hints[i].change, r->hints[i].label, r->hints[i].iter_time_s);
}

void auto_summary(FILE *f, const auto_result *r)
{
    fprintf(f, "auto: %zu candidates, %zu simulated; %s %s\n", r->n, r->n_simulated,
            r->winner >= 0 ? "chose" : "nothing fits; closest",
            r->shown >= 0 ? r->c[r->shown].label : "-");
    fprintf(f, "%-56s %-7s %10s %9s %9s\n", "candidate", "status", "iter_s", "peak_GiB",
            "host_GiB");
    for (size_t i = 0; i < r->n; i++) {
        const auto_cand *c = &r->c[i];
        if (c->status == RS_OK)
            fprintf(f, "%-56s %-7s %10.4f %9.2f %9.2f%s\n", c->label, "ok", c->iter_time_s,
                    (double)c->peak_bytes / MS_GiB, (double)c->host_bytes / MS_GiB,
                    (long)i == r->winner ? "  <- chosen" : "");
        else
            fprintf(f, "%-56s %-7s %s\n", c->label,
                    c->simulated ? res_status_name(c->status) : (c->why[0] == 'p' ? "pruned"
                                                                                 : "error"),
                    c->why);
    }
    for (size_t i = 0; i < r->n_hints; i++)
        fprintf(f, "fits with %s: %s, %.4f s, peak %.2f GiB\n", r->hints[i].change,
                r->hints[i].label, r->hints[i].iter_time_s,
                (double)r->hints[i].peak_bytes / MS_GiB);
}

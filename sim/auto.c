/* auto.c — the policy `auto` (see auto.h): candidates made from the policy registry and the
 * moves on their plans, each planned once, pruned, simulated, and the fastest that fits
 * chosen; when nothing fits, the nearby workloads and machines searched the same way. Used by
 * sim/runs.c. */
#define _POSIX_C_SOURCE 200809L
#include "sim/auto.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "planners/knob.h"
#include "planners/protrain/lower_chunks.h"
#include "base/u64map.h"
#include "base/util.h"

/* caching's max_split_size when auto tries it: blocks above it are never split, which keeps
 * the large activations from fragmenting the cache (PyTorch's max_split_size_mb) */
#define AUTO_MAX_SPLIT_BYTES (UINT64_C(512) << 20)
/* the allocator variants go to the candidates within this fraction of the fastest (an
 * allocator changes the time by its call latencies, well under it) */
#define AUTO_VARIANT_BAND 0.02
#define AUTO_VARIANT_BASES 1
#define AUTO_VARIANT_OOM_BASES 4
/* an oom with more bytes live than this fraction of the device leaves an allocator no room */
#define AUTO_FRAG_LIVE 0.97
/* a tensor-lowering candidate is pruned when keep-all without a memory limit, less this
 * fraction, is slower than the fastest found (the fraction covers allocator effects) */
#define AUTO_FLOOR_SLACK 0.01
/* rounds of ProTrain's neighbourhood walk in the simulator */
#define AUTO_PT_ROUNDS 2
/* models of at most this many layers get every swap count in their mixes */
#define AUTO_MIX_ALL_SWAPS 8
/* MEMO's alpha grid (its own LP picks one alpha; the grid lets the simulator judge) */
static const double ALPHA_GRID[] = { 0.0, 0.25, 0.5, 0.75, 1.0 };

typedef struct auto_ctx {
    const pipe_workload *w;
    const machine_t *m;
    const pipe_policy *p;
    const auto_opts *o;
    auto_result *res;
    uint64_t usable_bytes;
    /* the plain workload's layer structure, for the mixes */
    pol_skel *sk;
    unsigned char *half;
    size_t n_sk;
    int has_split;
    int32_t L;
    u64map *sk_index;          /* skeletal id -> index into sk */
    uint64_t half_bytes[4];    /* per layer (the first forward's average), by auto_half */
    uint64_t state_floor_bytes; /* most model-state bytes live at once in the plain form */
    double tensor_floor_s;     /* no tensor-lowering plan runs faster (0: unknown) */
    int keep_all_fits;         /* set after the singles' first round */
} auto_ctx;

static const char *const MODE_NAMES[AM_COUNT] = { "keep", "swap", "recompute", "recompute-attn",
                                                  "recompute-mlp" };

const char *auto_mode_name(auto_mode m)
{
    return m < AM_COUNT ? MODE_NAMES[m] : "?";
}

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

/* ---- the layer structure mixes act on ---- */

plan_decision auto_mix_decision(const auto_mix *mix, int32_t L, int32_t layer, auto_half half)
{
    if (layer >= L - mix->keep) return PD_KEEP;
    if (layer < mix->swap || mix->mid == AM_SWAP) return PD_SWAP;
    if (half == AH_INPUT) return PD_KEEP;
    switch (mix->mid) {
    case AM_RECOMPUTE_ATTN: return half == AH_ATTN ? PD_RECOMPUTE : PD_KEEP;
    case AM_RECOMPUTE_MLP: return half == AH_MLP ? PD_RECOMPUTE : PD_KEEP;
    case AM_KEEP: return PD_KEEP;
    default: return PD_RECOMPUTE;
    }
}

static int name_ends(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* One walk of the records: a layer's forward begins at its input, its MLP half at its first
 * residual (skeletal or not). */
ms_status auto_halves(const trace_t *t, unsigned char **halves, size_t *n, int *has_split,
                      ms_error *err)
{
    pol_skel *sk;
    size_t ns;
    *halves = NULL;
    *n = 0;
    *has_split = 0;
    ms_status st = pol_skeletal(t, &sk, &ns, err);
    if (st != MS_OK) return st;
    unsigned char *h = calloc(ns ? ns : 1, 1);
    u64map *at = u64map_new(ns * 2 + 16);
    int32_t L = 0;
    for (size_t i = 0; i < ns; i++)
        if (sk[i].layer + 1 > L) L = sk[i].layer + 1;
    unsigned char *mlp = calloc((size_t)L + 1, 1);
    for (size_t i = 0; h && at && i < ns; i++)
        if (u64map_put(at, sk[i].id, i)) break;
    if (!h || !at || !mlp) {
        free(sk), free(h), free(mlp), u64map_free(at);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    for (size_t r = 0; r < trace_count(t); r++) {
        const trace_rec *rec = trace_get(t, r);
        if (rec->type != TR_ALLOC) continue;
        const trace_tensor *a = &rec->u.alloc;
        if (a->layer < 0 || a->layer >= L) continue;
        uint64_t i;
        int is_sk = u64map_get(at, a->id, &i);
        if (is_sk && sk[i].is_input) {
            mlp[a->layer] = 0;
            h[i] = AH_INPUT;
            continue;
        }
        if (name_ends(a->name, ".resid1")) {
            mlp[a->layer] = 1;
            *has_split = 1;
            if (is_sk) h[i] = AH_RESID;
            continue;
        }
        if (is_sk) h[i] = mlp[a->layer] ? AH_MLP : AH_ATTN;
    }
    free(sk), free(mlp), u64map_free(at);
    *halves = h;
    *n = ns;
    return MS_OK;
}

/* The most bytes of parameters, gradients and optimizer states live at once: no plan that
 * leaves them where the trace puts them (every tensor-lowering policy's: they decide
 * activations only) runs in less. */
static uint64_t state_floor(const trace_t *t)
{
    u64map *live = u64map_new(1024);
    if (!live) return 0;
    uint64_t cur = 0, peak = 0, b;
    for (size_t r = 0; r < trace_count(t); r++) {
        const trace_rec *rec = trace_get(t, r);
        if (rec->type == TR_ALLOC) {
            trace_class c = rec->u.alloc.cls;
            if ((c == TC_PARAM || c == TC_GRAD || c == TC_OPTSTATE) &&
                !u64map_put(live, rec->u.alloc.id, rec->u.alloc.bytes)) {
                cur += rec->u.alloc.bytes;
                if (cur > peak) peak = cur;
            }
        } else if (rec->type == TR_FREE && u64map_del(live, rec->u.free_id, &b)) {
            cur -= b;
        }
    }
    u64map_free(live);
    return peak;
}

static ms_status layers_prepare(auto_ctx *x, const trace_t *t, ms_error *err)
{
    size_t nh;
    ms_status st = auto_halves(t, &x->half, &nh, &x->has_split, err);
    if (st == MS_OK) st = pol_skeletal(t, &x->sk, &x->n_sk, err);
    if (st != MS_OK) return st;
    x->sk_index = u64map_new(x->n_sk * 2 + 16);
    if (!x->sk_index) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    uint64_t sum[4] = { 0 };
    for (size_t i = 0; i < x->n_sk; i++) {
        if (x->sk[i].layer + 1 > x->L) x->L = x->sk[i].layer + 1;
        if (u64map_put(x->sk_index, x->sk[i].id, i))
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        if (x->sk[i].pass == 0) sum[x->half[i]] += x->sk[i].t->bytes;
    }
    for (int k = 0; k < 4 && x->L; k++) x->half_bytes[k] = sum[k] / (uint64_t)x->L;
    x->state_floor_bytes = state_floor(t);
    return MS_OK;
}

/* ---- candidates ---- */

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

static long cand_add(auto_ctx *x, const char *policy)
{
    auto_result *r = x->res;
    if (ms_grow((void **)&r->c, &r->cap, r->n + 1, sizeof *r->c)) return -1;
    auto_cand *c = &r->c[r->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->policy, sizeof c->policy, "%s", policy);
    c->alpha = -1;
    c->base = -1;
    c->status = RS_ERROR;
    return (long)(r->n - 1);
}

static void cand_label(auto_ctx *x, auto_cand *c)
{
    size_t n, cap = sizeof c->label;
    if (c->is_mix) {
        int L = x->L, s = c->mix.swap, k = c->mix.keep;
        n = (size_t)snprintf(c->label, cap, "mix");
        if (s > 0 && c->mix.alpha > 0)
            n += (size_t)snprintf(c->label + n, cap - n, " swap(alpha %.2f) 0-%d", c->mix.alpha,
                                  s - 1);
        else if (s > 0)
            n += (size_t)snprintf(c->label + n, cap - n, " swap 0-%d", s - 1);
        if (L - k > s && n < cap)
            n += (size_t)snprintf(c->label + n, cap - n, " %s %d-%d", auto_mode_name(c->mix.mid),
                                  s, L - k - 1);
        if (k > 0 && n < cap) n += (size_t)snprintf(c->label + n, cap - n, " keep %d-%d", L - k,
                                                   L - 1);
    } else {
        n = (size_t)snprintf(c->label, cap, "%s", c->policy);
    }
    if (c->pt_tie0 && n < cap) n += (size_t)snprintf(c->label + n, cap - n, " tie_tol=0");
    if (c->pt_cfg[1] > 0 && n < cap)
        n += (size_t)snprintf(c->label + n, cap - n, " config=%d,%d,%d,%d", c->pt_cfg[0],
                              c->pt_cfg[1], c->pt_cfg[2], c->pt_cfg[3]);
    if (c->alpha >= 0 && n < cap)
        n += (size_t)snprintf(c->label + n, cap - n, " alpha=%.2f", c->alpha);
    if (c->allocator && n < cap)
        n += (size_t)snprintf(c->label + n, cap - n, " alloc=%s", c->allocator);
    if (c->max_split_bytes && n < cap)
        snprintf(c->label + n, cap - n, " max_split=%" PRIu64 "MiB", c->max_split_bytes >> 20);
}

/* A mix's decisions written over keep-all's plan. */
static void mix_apply(auto_ctx *x, const auto_mix *mix, plan_t *plan)
{
    for (size_t i = 0; i < plan->n_tensors; i++) {
        plan_tensor *pt = &plan->tensors[i];
        uint64_t k;
        if (!u64map_get(x->sk_index, pt->id, &k)) continue;
        const pol_skel *sk = &x->sk[k];
        pt->decision = auto_mix_decision(mix, x->L, sk->layer, (auto_half)x->half[k]);
        pt->alpha = 0;
        /* token-wise (MEMO): the swapped group's alpha, but for what full-swap swaps whole */
        if (pt->decision == PD_SWAP)
            pt->alpha = mix->alpha > 0 && !sk->is_input && !sk->is_attn_out && !sk->is_whole
                            ? mix->alpha : 1.0;
    }
}

/* Candidate c's plan on its form's trace: its policy's planner (ProTrain with its
 * configuration given), then the mix. */
static ms_status cand_plan(auto_ctx *x, const auto_cand *c, const trace_t **t, plan_t **out,
                           ms_error *err)
{
    ms_status st = form_get(x, pol_form_of(c->policy), t, err);
    if (st != MS_OK) return st;
    pipe_policy q = *x->p;
    q.policy = c->policy;
    q.plan_path = NULL;
    if (c->alpha >= 0) q.alpha = c->alpha;
    char v[4][16];
    static const char *const keys[4] = { "n_persist", "n_buffer", "n_swap", "n_checkpoint" };
    for (int k = 0; c->pt_cfg[1] > 0 && k < 4 && q.n_knobs < PIPE_MAX_KNOBS; k++) {
        snprintf(v[k], sizeof v[k], "%d", c->pt_cfg[k]);
        q.knobs[q.n_knobs++] = (pol_knob){ keys[k], v[k] };
    }
    if (c->pt_tie0 && q.n_knobs < PIPE_MAX_KNOBS) q.knobs[q.n_knobs++] = (pol_knob){ "tie_tol", "0" };
    if ((st = pipe_plan(*t, x->m, &q, out, err)) != MS_OK) return st;
    if (c->is_mix) { /* auto's decisions: the plan says so */
        mix_apply(x, &c->mix, *out);
        snprintf((*out)->policy, sizeof (*out)->policy, "%s", AUTO_POLICY);
    }
    return MS_OK;
}

/* The planner's own prediction rules c out: it found no configuration within the budget
 * and predicts a peak well above the device (simulating its closest plan would be an oom). */
static int predicted_out(auto_ctx *x, auto_cand *c, const plan_t *plan)
{
    knob_predictions pr;
    if (!x->o->prune || knob_predictions_of(plan, &pr, NULL) != MS_OK || pr.feasible) return 0;
    if (!knob_predicted(&pr, &pr.peak_bytes) ||
        pr.peak_bytes <= x->usable_bytes + x->usable_bytes / 20)
        return 0;
    snprintf(c->why, sizeof c->why, "pruned: its planner predicts %.2f GiB > %.2f GiB usable",
             (double)pr.peak_bytes / MS_GiB, (double)x->usable_bytes / MS_GiB);
    return 1;
}

/* A tensor-lowering policy on the plain form keeps the model states where the trace has them:
 * when they alone exceed the device, it cannot fit, whatever it decides (checked before its
 * planner runs, which for the memory-plan policies is the costly part). */
static int tensor_plain(const char *policy);

static int floor_out(auto_ctx *x, auto_cand *c)
{
    if (!x->o->prune || !tensor_plain(c->policy) || x->state_floor_bytes <= x->usable_bytes)
        return 0;
    snprintf(c->why, sizeof c->why, "pruned: its model states alone take %.2f GiB > %.2f GiB "
             "usable", (double)x->state_floor_bytes / MS_GiB, (double)x->usable_bytes / MS_GiB);
    return 1;
}

static int tensor_plain(const char *policy)
{
    const pol_policy *pp = pol_find(policy);
    return pp && pp->form == POL_FORM_PLAIN && (!pp->lowering || !strcmp(pp->lowering, "tensor"));
}

static long best_ok(const auto_result *r);

/* Every op once, nothing recomputed or swapped, no memory limit: no tensor-lowering plan
 * beats that by more than its allocator's calls, so one slower than the fastest found is
 * not planned. */
static int time_out(auto_ctx *x, auto_cand *c)
{
    long b = best_ok(x->res);
    if (!x->o->prune || b < 0 || x->tensor_floor_s <= 0 || !tensor_plain(c->policy))
        return 0;
    if (x->keep_all_fits) {
        snprintf(c->why, sizeof c->why, "pruned: keep-all fits (%.4f s), which it would only "
                 "add recomputation or copies to", x->tensor_floor_s);
        return 1;
    }
    if (x->tensor_floor_s * (1 - AUTO_FLOOR_SLACK) <= x->res->c[b].iter_time_s) return 0;
    snprintf(c->why, sizeof c->why, "pruned: keep-all without a memory limit takes %.4f s, "
             "over the fastest found (%.4f s)", x->tensor_floor_s, x->res->c[b].iter_time_s);
    return 1;
}

/* Simulates candidate i's plan (a variant: its base's, under the variant's allocator). */
static void cand_sim(auto_ctx *x, size_t i, const trace_t *t, plan_t *plan)
{
    auto_cand *c = &x->res->c[i];
    char keep_alloc[sizeof plan->allocator];
    alloc_config keep_cfg = plan->alloc_cfg;
    snprintf(keep_alloc, sizeof keep_alloc, "%s", plan->allocator);
    if (c->allocator) snprintf(plan->allocator, sizeof plan->allocator, "%s", c->allocator);
    if (c->max_split_bytes) plan->alloc_cfg.max_split_size_bytes = c->max_split_bytes;
    sim_result r;
    ms_error e;
    ms_error_clear(&e);
    ms_status st = pipe_simulate_with(t, x->m, plan, NULL, x->p, &r, &e);
    snprintf(plan->allocator, sizeof plan->allocator, "%s", keep_alloc);
    plan->alloc_cfg = keep_cfg;
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

/* Plans (once), prunes or simulates candidate i; fills its row. */
static void cand_run(auto_ctx *x, size_t i)
{
    auto_cand *c = &x->res->c[i];
    cand_label(x, c);
    if (c->base >= 0) {
        auto_cand *b = &x->res->c[c->base];
        const trace_t *t;
        ms_error e;
        if (b->plan && form_get(x, pol_form_of(b->policy), &t, &e) == MS_OK)
            cand_sim(x, i, t, b->plan);
        return;
    }
    if (floor_out(x, c) || time_out(x, c)) return;
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
    c->plan = plan;
    cand_sim(x, i, t, plan);
}

static long run_new(auto_ctx *x, const char *policy, double alpha)
{
    long i = cand_add(x, policy);
    if (i < 0) return -1;
    x->res->c[i].alpha = alpha;
    cand_run(x, (size_t)i);
    return i;
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

static int fits(const auto_result *r, long i)
{
    return i >= 0 && r->c[i].status == RS_OK;
}

/* keep-all's time without a memory limit: its own when it fits, else its plan simulated on
 * the device grown until nothing runs out. */
static void tensor_floor(auto_ctx *x, long all)
{
    const auto_cand *c = &x->res->c[all];
    if (c->status == RS_OK) {
        x->tensor_floor_s = c->iter_time_s;
        x->keep_all_fits = 1;
        return;
    }
    if (!c->plan || !c->simulated || best_ok(x->res) < 0) return; /* nothing to prune for */
    machine_t big = *x->m;
    big.gpu_hbm_bytes = x->m->gpu_hbm_bytes * 64;
    const trace_t *t;
    sim_result r;
    ms_error e;
    if (form_get(x, POL_FORM_PLAIN, &t, &e) == MS_OK &&
        pipe_simulate_with(t, &big, c->plan, NULL, x->p, &r, &e) == MS_OK && r.status == RS_OK)
        x->tensor_floor_s = r.iter_time_s;
}

/* Every registered policy: keep-all and the other families first, so that the time floor
 * can skip the tensor-lowering ones (MEMO's memory plan is the costly planner). */
static void single_policies(auto_ctx *x)
{
    size_t n;
    const pol_policy *const *reg = pol_registry(&n);
    long all = -1;
    for (size_t i = 0; i < n; i++) {
        int is_all = !strcmp(reg[i]->name, "keep-all");
        if (!is_all && tensor_plain(reg[i]->name)) continue;
        long k = run_new(x, reg[i]->name, -1);
        if (is_all) all = k;
    }
    if (all >= 0) tensor_floor(x, all);
    for (size_t i = 0; i < n; i++)
        if (strcmp(reg[i]->name, "keep-all") && tensor_plain(reg[i]->name))
            run_new(x, reg[i]->name, -1);
}

static long find_base(const auto_result *r, const char *policy)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->c[i].policy, policy) && r->c[i].alpha < 0 && !r->c[i].is_mix &&
            r->c[i].pt_cfg[1] == 0 && !r->c[i].pt_tie0 && r->c[i].base < 0)
            return (long)i;
    return -1;
}

/* MEMO at the grid's alphas (its LP's own is the memo row). */
static void alpha_grid(auto_ctx *x)
{
    if (!x->o->moves || x->p->alpha >= 0) return;
    long m = find_base(x->res, "memo");
    /* alpha moves tokens between swapping and recomputing, both off the device: an oom at
     * MEMO's own alpha is one at the others' (a host-memory failure is not) */
    if (x->o->prune && m >= 0 && x->res->c[m].status == RS_OOM) return;
    for (size_t i = 0; i < sizeof ALPHA_GRID / sizeof *ALPHA_GRID; i++)
        run_new(x, "memo", ALPHA_GRID[i]);
}

/* ---- ProTrain's neighbourhood ---- */

/* The configuration a chunk plan runs, read through the chunk lowering's knob table. */
static int pt_config_of(const plan_t *p, int cfg[4])
{
    lc_knobs k;
    ms_error e;
    if (!p || lc_knobs_from_plan(p, &k, &e) != MS_OK) return 0;
    cfg[0] = k.n_persist, cfg[1] = k.n_buffer, cfg[2] = k.n_swap, cfg[3] = k.n_ckpt;
    return cfg[1] > 0;
}

static long pt_try(auto_ctx *x, const int cfg[4])
{
    for (size_t i = 0; i < x->res->n; i++) /* tried already */
        if (x->res->c[i].pt_cfg[1] > 0 && !memcmp(x->res->c[i].pt_cfg, cfg, sizeof x->res->c[i].pt_cfg))
            return (long)i;
    long i = cand_add(x, "protrain");
    if (i < 0) return -1;
    memcpy(x->res->c[i].pt_cfg, cfg, sizeof x->res->c[i].pt_cfg);
    cand_run(x, (size_t)i);
    return i;
}

/* The cost model ranks ProTrain's configurations; the simulator judges its pick's
 * neighbours: its strict fastest (tie_tol=0: the tie band's other side), then from the
 * better of the two one more persistent chunk, one block less checkpointed, one checkpointed
 * block swapped instead, walked while they gain (from an oom, the opposite moves). A
 * configuration out of the model's range is an error row of its planner. */
static void protrain_walk(auto_ctx *x)
{
    long b = find_base(x->res, "protrain");
    int cur[4], fast[4];
    /* a knob given goes to every candidate: the walk would fight it */
    if (!x->o->moves || x->p->n_knobs || b < 0 || !pt_config_of(x->res->c[b].plan, cur)) return;
    long at = b, t0 = cand_add(x, "protrain");
    if (t0 < 0) return;
    x->res->c[t0].pt_tie0 = 1;
    cand_run(x, (size_t)t0);
    if (fits(x->res, t0) && pt_config_of(x->res->c[t0].plan, fast) &&
        better(&x->res->c[t0], (size_t)t0, &x->res->c[b], (size_t)b)) {
        at = t0;
        memcpy(cur, fast, sizeof cur);
    }
    for (int round = 0; round < AUTO_PT_ROUNDS; round++) {
        static const int faster[3][4] = { { 1, 0, 0, 0 }, { 0, 0, 0, -1 }, { 0, 0, 1, -1 } };
        static const int leaner[3][4] = { { -1, 0, 0, 0 }, { 0, 0, 0, 1 }, { 0, 0, -1, 1 } };
        const int (*moves)[4] = fits(x->res, at) ? faster : leaner;
        long best = at;
        for (int k = 0; k < 3; k++) {
            int c[4];
            for (int j = 0; j < 4; j++) c[j] = cur[j] + moves[k][j];
            if (c[0] < 0 || c[2] < 0 || c[3] < 0) continue;
            long i = pt_try(x, c);
            if (i >= 0 && better(&x->res->c[i], (size_t)i, &x->res->c[best], (size_t)best))
                best = i;
        }
        if (best == at || (fits(x->res, at) && !fits(x->res, best))) break;
        at = best;
        memcpy(cur, x->res->c[at].pt_cfg, sizeof cur);
    }
}

/* ---- mixes ---- */

/* The bytes a layer keeps on the GPU under mode m (a swapped layer keeps none). */
static uint64_t mode_bytes(const auto_ctx *x, auto_mode m)
{
    const uint64_t *h = x->half_bytes;
    switch (m) {
    case AM_KEEP: return h[AH_INPUT] + h[AH_ATTN] + h[AH_RESID] + h[AH_MLP];
    case AM_SWAP: return 0;
    case AM_RECOMPUTE_ATTN: return h[AH_INPUT] + h[AH_RESID] + h[AH_MLP];
    case AM_RECOMPUTE_MLP: return h[AH_INPUT] + h[AH_ATTN] + h[AH_RESID];
    default: return h[AH_INPUT];
    }
}

static long mix_run(auto_ctx *x, auto_mix mix)
{
    if (mix.mid == AM_SWAP) mix.swap = x->L - mix.keep; /* one form per plan */
    if (mix.swap + mix.keep >= x->L) mix.mid = AM_RECOMPUTE; /* no middle */
    if (mix.alpha >= 1) mix.alpha = 0;
    for (size_t i = 0; i < x->res->n; i++) /* tried already */
        if (x->res->c[i].is_mix && x->res->c[i].base < 0 && x->res->c[i].mix.swap == mix.swap &&
            x->res->c[i].mix.keep == mix.keep && x->res->c[i].mix.mid == mix.mid &&
            x->res->c[i].mix.alpha == mix.alpha)
            return (long)i;
    long i = cand_add(x, "keep-all");
    if (i < 0) return -1;
    x->res->c[i].is_mix = 1;
    x->res->c[i].mix = mix;
    cand_run(x, (size_t)i);
    return i;
}

/* The most layers kept for a given swap count and middle mode: predicted from a simulated
 * mix's peak and the bytes a kept layer adds, then found by galloping and bisection (keeping
 * one more layer never lowers the peak). Without pruning, every count. */
static void mix_keep_search(auto_ctx *x, auto_mix mix, long ref)
{
    int kmax = x->L - mix.swap;
    if (!x->o->prune) {
        for (mix.keep = 0; mix.keep <= kmax; mix.keep++) mix_run(x, mix);
        return;
    }
    const auto_cand *r = &x->res->c[ref];
    uint64_t gain = mode_bytes(x, AM_KEEP) - mode_bytes(x, mix.mid);
    uint64_t ref_peak = r->status == RS_OK ? r->peak_bytes : r->live_fail_bytes;
    int k = 0;
    if (gain && ref_peak && ref_peak < x->usable_bytes) {
        /* the reference's layers are re-counted under this mix's swap and keep counts */
        double room = (double)x->usable_bytes - (double)ref_peak +
                      (double)r->mix.keep * (double)gain +
                      (double)(mix.swap - r->mix.swap) * (double)mode_bytes(x, mix.mid);
        k = room > 0 ? (int)(room / (double)gain) : 0;
    }
    if (k > kmax) k = kmax;
    if (k < 0) k = 0;
    /* gallop from the prediction (steps 1, 2, 4, ...) to a fit and a failure, then bisect */
    mix.keep = k;
    int lo = -1, hi = kmax + 1; /* lo fits, hi does not */
    if (fits(x->res, mix_run(x, mix))) lo = k;
    else hi = k;
    for (int step = 1; lo < 0 || hi > kmax; step *= 2) {
        mix.keep = lo >= 0 ? lo + step : hi - step;
        if (mix.keep > kmax) mix.keep = kmax;
        if (mix.keep < 0) mix.keep = 0;
        if ((lo >= 0 && mix.keep <= lo) || (lo < 0 && mix.keep >= hi)) break; /* at an end */
        if (fits(x->res, mix_run(x, mix))) lo = mix.keep;
        else hi = mix.keep;
    }
    while (lo >= 0 && hi - lo > 1) {
        mix.keep = lo + (hi - lo) / 2;
        if (fits(x->res, mix_run(x, mix))) lo = mix.keep;
        else hi = mix.keep;
    }
}

/* The mixes that swap their first layers again with MEMO's token-wise swap there: alpha of
 * the tokens swapped, the rest recomputed, which trades link time for compute where the link
 * cannot hide a whole layer's copies. Pruned: the fastest that fits only; without pruning,
 * every one. */
static void mix_alphas(auto_ctx *x)
{
    static const double alphas[] = { 0.25, 0.5, 0.75 };
    long best = -1;
    size_t n = x->res->n;
    for (size_t i = 0; i < n; i++) {
        const auto_cand *c = &x->res->c[i];
        if (!c->is_mix || c->base >= 0 || c->mix.alpha > 0 || c->mix.swap == 0 ||
            (x->o->prune && !fits(x->res, (long)i)))
            continue;
        if (!x->o->prune) {
            for (size_t a = 0; a < 3; a++) {
                auto_mix mix = x->res->c[i].mix;
                mix.alpha = alphas[a];
                mix_run(x, mix);
            }
        } else if (best < 0 || better(c, i, &x->res->c[best], (size_t)best)) {
            best = (long)i;
        }
    }
    for (size_t a = 0; best >= 0 && a < 3; a++) {
        auto_mix mix = x->res->c[best].mix;
        mix.alpha = alphas[a];
        mix_run(x, mix);
    }
}

/* Layers kept at the end, swapped at the start, recomputed in between (in full, or the
 * attention or the MLP half): per group of layers what neither a single baseline nor
 * keep-last-k alone chooses. Skipped when keep-all fits (nothing to trade) or the model
 * states alone do not. */
static void mixes(auto_ctx *x)
{
    long all = find_base(x->res, "keep-all"), fr = find_base(x->res, "full-recompute");
    long fs = find_base(x->res, "full-swap");
    if (!x->o->moves || x->L < 2 || x->p->alpha >= 0) return;
    if (x->o->prune && (fits(x->res, all) || x->state_floor_bytes > x->usable_bytes)) return;
    auto_mode mids[4] = { AM_RECOMPUTE, AM_SWAP, AM_RECOMPUTE_ATTN, AM_RECOMPUTE_MLP };
    int n_mids = x->has_split ? 4 : 2;
    for (int m = 0; m < n_mids; m++) {
        auto_mix mix = { 0, 0, mids[m], 0 };
        long ref = m == 0 ? fr : m == 1 ? fs : -1;
        if (ref < 0 || !x->res->c[ref].simulated) ref = mix_run(x, mix);
        if (ref < 0) return;
        if (x->o->prune && !fits(x->res, ref)) continue; /* keeping more only adds */
        /* swap counts: every one on a small model (and without pruning), else none and half
         * the layers for full recomputation */
        int every = (!x->o->prune || x->L <= AUTO_MIX_ALL_SWAPS) && mids[m] != AM_SWAP;
        for (mix.swap = 0; mix.swap <= x->L; mix.swap++)
            if (every || mix.swap == 0 || (m == 0 && mix.swap == x->L / 2))
                mix_keep_search(x, mix, ref);
    }
    mix_alphas(x);
}

/* ---- allocators ---- */

/* The allocators auto tries besides the plan's own caching allocator, for candidate base. */
static void alloc_variants(auto_ctx *x, size_t base)
{
    static const char *const names[] = { "caching", "expandable", "stitching" };
    for (size_t v = 0; v < 3; v++) {
        long i = cand_add(x, x->res->c[base].policy);
        if (i < 0) return;
        auto_cand *c = &x->res->c[i], *b = &x->res->c[base];
        c->alpha = b->alpha;
        c->is_mix = b->is_mix;
        c->mix = b->mix;
        memcpy(c->pt_cfg, b->pt_cfg, sizeof c->pt_cfg);
        c->pt_tie0 = b->pt_tie0;
        c->base = (long)base;
        c->allocator = names[v];
        if (v == 0) c->max_split_bytes = AUTO_MAX_SPLIT_BYTES;
        cand_run(x, (size_t)i);
    }
}

/* Variants for the candidates whose planner gave the caching allocator and that run within
 * the band of the fastest, or ran out of memory with no more bytes live than the device
 * holds (an allocator that fragments less may fit them). */
static void allocators(auto_ctx *x)
{
    if (!x->o->moves || x->p->allocator || x->p->alloc_cfg_set) return;
    long best = best_ok(x->res);
    size_t n = x->res->n;
    unsigned char *take = calloc(n ? n : 1, 1);
    if (!take) return;
    for (size_t i = 0; i < n; i++) {
        const auto_cand *b = &x->res->c[i];
        if (b->base >= 0 || !b->plan || strcmp(b->plan_alloc, "caching")) continue;
        int near = b->status == RS_OK && best >= 0 &&
                   b->iter_time_s <= x->res->c[best].iter_time_s * (1 + AUTO_VARIANT_BAND);
        int frag = b->status == RS_OOM && b->live_fail_bytes &&
                   (double)b->live_fail_bytes <= (double)x->usable_bytes * AUTO_FRAG_LIVE &&
                   best < 0;
        take[i] = !x->o->prune || near || frag;
    }
    /* pruned: the AUTO_VARIANT_BASES first in the choice's order (nothing fits: more) */
    int bases = best >= 0 ? AUTO_VARIANT_BASES : AUTO_VARIANT_OOM_BASES;
    for (int k = 0; x->o->prune && k < bases; k++) {
        long pick = -1;
        for (size_t i = 0; i < n; i++)
            if (take[i] == 1 && (pick < 0 || better(&x->res->c[i], i, &x->res->c[pick],
                                                    (size_t)pick)))
                pick = (long)i;
        if (pick >= 0) take[pick] = 2;
    }
    for (size_t i = 0; i < n; i++) {
        if (take[i] == (x->o->prune ? 2 : 1)) alloc_variants(x, i);
    }
    free(take);
}

/* ---- the choice ---- */

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

/* Takes the shown candidate's plan (made once during the search), writes the explanation
 * into it and simulates it for the result. */
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
    auto_cand *c = &r->c[r->shown];
    auto_cand *owner = c->base >= 0 ? &r->c[c->base] : c;
    const trace_t *t;
    ms_status st = form_get(x, pol_form_of(c->policy), &t, err);
    if (st != MS_OK) return st;
    r->plan = owner->plan;
    owner->plan = NULL;
    if (c->allocator) snprintf(r->plan->allocator, sizeof r->plan->allocator, "%s", c->allocator);
    if (c->max_split_bytes) r->plan->alloc_cfg.max_split_size_bytes = c->max_split_bytes;
    r->form = pol_form_of(c->policy);
    runner_ups(r);
    explain_knobs(r, r->plan);
    return pipe_simulate_with(t, x->m, r->plan, NULL, x->p, &r->r, err);
}

/* ---- when nothing fits ---- */

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

static int degree_try(auto_ctx *x, int is_cp, int v)
{
    pipe_workload w = *x->w;
    char ch[64];
    if (is_cp) w.cp = v;
    else w.tp = v;
    snprintf(ch, sizeof ch, "%s %d", is_cp ? "cp" : "tp", v);
    return try_hint(x, &w, x->m, ch);
}

/* The smallest tp (cp: is_cp) doubled from `from` within `limit` under which something fits:
 * the largest first (a larger degree never needs more memory per GPU), so that a workload
 * that fits under none costs one search. */
static void degree_hint(auto_ctx *x, int is_cp, int from, int limit)
{
    int vmax = from;
    while (vmax * 2 <= limit) vmax *= 2;
    if (vmax == from || !degree_try(x, is_cp, vmax)) return;
    for (int v = from * 2; v < vmax; v *= 2) /* vmax's hint is the last: a smaller replaces it */
        if (degree_try(x, is_cp, v)) {
            x->res->hints[x->res->n_hints - 2] = x->res->hints[x->res->n_hints - 1];
            x->res->n_hints--;
            return;
        }
}

static const char *count_name(uint64_t v, char *buf, size_t n)
{
    if (v && v % (UINT64_C(1) << 20) == 0) snprintf(buf, n, "%" PRIu64 "M", v >> 20);
    else if (v && v % 1024 == 0) snprintf(buf, n, "%" PRIu64 "K", v >> 10);
    else snprintf(buf, n, "%" PRIu64, v);
    return buf;
}

/* A shipped machine worth searching: one with more device memory, or as much and more host
 * memory per GPU (with less of both, whatever did not fit here does not fit there). */
static int machine_roomier(const machine_t *here, const machine_t *there)
{
    uint64_t a = machine_usable_bytes(here), b = machine_usable_bytes(there);
    int ga = here->node_gpus > 0 ? (int)here->node_gpus : 1;
    int gb = there->node_gpus > 0 ? (int)there->node_gpus : 1;
    double ha = (double)here->host_mem_bytes / ga, hb = (double)there->host_mem_bytes / gb;
    return b > a || (b == a && hb > ha);
}

/* Nothing fits: the largest shorter sequence and micro-batch (halving), the smallest larger
 * tp and cp (doubling within the node), and each roomier shipped machine that fits. */
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
    degree_hint(x, 0, tp, gpus / (cp * dp));
    degree_hint(x, 1, cp, gpus / (tp * dp));
    char **names;
    size_t n;
    ms_error e;
    if (machine_list(&names, &n, &e) != MS_OK) return;
    for (size_t i = 0; i < n; i++) {
        machine_profile *mp;
        if (strcmp(names[i], x->m->name) && machine_load_named(names[i], &mp, &e) == MS_OK) {
            snprintf(ch, sizeof ch, "machine %s", names[i]);
            if (machine_roomier(x->m, &mp->m)) try_hint(x, w0, &mp->m, ch);
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
    auto_ctx x;
    memset(&x, 0, sizeof x);
    x.w = w, x.m = m, x.p = p, x.o = o, x.res = res;
    x.usable_bytes = machine_usable_bytes(m);
    const trace_t *t;
    ms_status st = form_get(&x, POL_FORM_PLAIN, &t, err);
    if (st == MS_OK) st = layers_prepare(&x, t, err);
    if (st == MS_OK) {
        single_policies(&x);
        alpha_grid(&x);
        protrain_walk(&x);
        mixes(&x);
        allocators(&x);
        st = finish(&x, err);
    }
    free(x.sk);
    free(x.half);
    u64map_free(x.sk_index);
    for (size_t i = 0; i < res->n; i++) { /* the plans not kept */
        plan_free(res->c[i].plan);
        res->c[i].plan = NULL;
    }
    if (st == MS_OK && res->winner < 0) hints(&x);
    return st;
}

void auto_result_free(auto_result *res)
{
    for (size_t i = 0; i < res->n; i++) plan_free(res->c[i].plan);
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
    fprintf(f, "%-64s %-7s %10s %9s %9s\n", "candidate", "status", "iter_s", "peak_GiB",
            "host_GiB");
    for (size_t i = 0; i < r->n; i++) {
        const auto_cand *c = &r->c[i];
        if (c->status == RS_OK)
            fprintf(f, "%-64s %-7s %10.4f %9.2f %9.2f%s\n", c->label, "ok", c->iter_time_s,
                    (double)c->peak_bytes / MS_GiB, (double)c->host_bytes / MS_GiB,
                    (long)i == r->winner ? "  <- chosen" : "");
        else
            fprintf(f, "%-64s %-7s %s\n", c->label,
                    c->simulated ? res_status_name(c->status) : (c->why[0] == 'p' ? "pruned"
                                                                                 : "error"),
                    c->why);
    }
    for (size_t i = 0; i < r->n_hints; i++)
        fprintf(f, "fits with %s: %s, %.4f s, peak %.2f GiB\n", r->hints[i].change,
                r->hints[i].label, r->hints[i].iter_time_s,
                (double)r->hints[i].peak_bytes / MS_GiB);
}

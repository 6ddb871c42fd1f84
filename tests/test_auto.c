/* test_auto.c — the search behind --policy auto (sim/auto.c): on small instances its choice
 * equals a brute force (every candidate simulated, every single policy run through the
 * pipeline on its own, and every per layer group mix of swap / recompute / selective
 * recompute / keep with every allocator built and simulated here), it is never slower than
 * the best single policy and fits wherever one does, its plan file re-simulates to the same
 * result, and the same inputs give the same choice and plan bytes twice. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "sim/auto.h"
#include "tests/tap.h"
#include "base/util.h"

/* The best single registered policy on w (its own form): time, -1 when none fits. */
static double best_single(const pipe_workload *w, const machine_t *m)
{
    size_t n;
    const pol_policy *const *reg = pol_registry(&n);
    trace_t *forms[2] = { NULL, NULL };
    double best = -1;
    for (size_t i = 0; i < n; i++) {
        pol_form k = reg[i]->form;
        ms_error e;
        if (!forms[k] && pipe_trace_for(w, m, k, &forms[k], &e) != MS_OK) continue;
        pipe_policy p;
        pipe_policy_default(&p);
        p.policy = reg[i]->name;
        sim_result r;
        if (pipe_run(forms[k], m, &p, NULL, &r, &e) == MS_OK && r.status == RS_OK &&
            (best < 0 || r.iter_time_s < best))
            best = r.iter_time_s;
    }
    trace_free(forms[0]);
    trace_free(forms[1]);
    return best;
}

static int search(const pipe_workload *w, const machine_t *m, int prune, int moves,
                  auto_result *r)
{
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = AUTO_POLICY;
    auto_opts o;
    auto_opts_default(&o);
    o.prune = prune;
    o.moves = moves;
    o.hints = 0;
    ms_error e;
    if (auto_search(w, NULL, m, &p, &o, r, &e) == MS_OK) return 1;
    TAP_NOTE("auto: %s", e.msg);
    return 0;
}

static double win_time(const auto_result *r)
{
    return r->winner >= 0 ? r->c[r->winner].iter_time_s : -1;
}

static void point(machine_profile *mp, const char *model, uint64_t seq, uint64_t batch,
                  uint64_t hbm_bytes)
{
    machine_t m = mp->m;
    if (hbm_bytes) m.gpu_hbm_bytes = hbm_bytes;
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = model;
    w.seq = seq;
    w.batch = batch;
    char at[160];
    snprintf(at, sizeof at, "%s seq %llu batch %llu on %s with %.1f GiB", model,
             (unsigned long long)seq, (unsigned long long)batch, m.name,
             (double)m.gpu_hbm_bytes / MS_GiB);
    auto_result pr, br, sr;
    if (!search(&w, &m, 1, 1, &pr) || !search(&w, &m, 0, 1, &br) || !search(&w, &m, 0, 0, &sr)) {
        TAP_OK(0, "%s: the searches run", at);
        return;
    }
    double single = best_single(&w, &m);
    TAP_OK(win_time(&pr) == win_time(&br) &&
               (pr.winner < 0) == (br.winner < 0) &&
               (pr.winner < 0 || !strcmp(pr.c[pr.winner].label, br.c[br.winner].label)),
           "%s: the pruned search chooses what simulating all %zu candidates chooses (%s, %.4f s)",
           at, br.n, pr.winner >= 0 ? pr.c[pr.winner].label : "none", win_time(&pr));
    TAP_OK(win_time(&sr) == single,
           "%s: over the single policies it chooses what running each one chooses (%.4f s)", at,
           single);
    TAP_OK((single < 0 || pr.winner >= 0) && (single < 0 || win_time(&pr) <= single),
           "%s: never slower than the best single policy (%.4f <= %.4f s)", at, win_time(&pr),
           single);
    TAP_OK(pr.r.status == (pr.winner >= 0 ? RS_OK : pr.r.status) &&
               (pr.winner < 0 || pr.r.iter_time_s == win_time(&pr)),
           "%s: the chosen plan simulated again gives the search's time", at);
    auto_result_free(&pr);
    auto_result_free(&br);
    auto_result_free(&sr);
}


/* ---- the combined space built here, apart from auto.c ---- */

/* The half of each skeletal activation of the generic generator's layer by its name: the
 * attention half up to the first residual sum, the MLP half after it. */
static auto_half half_by_name(const pol_skel *s)
{
    static const char *const mlp[] = { ".ln2_out", ".fc1_out", ".act_out" };
    if (s->is_input) return AH_INPUT;
    size_t n = strlen(s->t->name);
    if (n >= 7 && !strcmp(s->t->name + n - 7, ".resid1")) return AH_RESID;
    for (size_t i = 0; i < 3; i++) {
        size_t k = strlen(mlp[i]);
        if (n >= k && !strcmp(s->t->name + n - k, mlp[i])) return AH_MLP;
    }
    return AH_ATTN;
}

/* The per-tensor decision of a layer under mode m, written out here as the docs say it. */
static plan_decision by_mode(auto_mode m, auto_half h)
{
    switch (m) {
    case AM_KEEP: return PD_KEEP;
    case AM_SWAP: return PD_SWAP;
    case AM_RECOMPUTE: return h == AH_INPUT ? PD_KEEP : PD_RECOMPUTE;
    case AM_RECOMPUTE_ATTN: return h == AH_ATTN ? PD_RECOMPUTE : PD_KEEP;
    case AM_RECOMPUTE_MLP: return h == AH_MLP ? PD_RECOMPUTE : PD_KEEP;
    default: return PD_KEEP;
    }
}

/* Simulates keep-all's plan with every skeletal tensor of layer l under modes[l], under
 * allocator alloc (max_split_bytes for caching when nonzero); -1 when it does not fit. */
static double mix_time(const trace_t *t, const machine_t *m, const pol_skel *sk, size_t n,
                       const auto_mode *modes, const char *alloc, uint64_t max_split_bytes)
{
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = "keep-all";
    plan_t *plan;
    ms_error e;
    if (pipe_plan(t, m, &p, &plan, &e) != MS_OK) return -2;
    for (size_t i = 0; i < plan->n_tensors; i++)
        for (size_t k = 0; k < n; k++)
            if (sk[k].id == plan->tensors[i].id) {
                plan->tensors[i].decision = by_mode(modes[sk[k].layer], half_by_name(&sk[k]));
                plan->tensors[i].alpha = plan->tensors[i].decision == PD_SWAP ? 1.0 : 0.0;
            }
    snprintf(plan->allocator, sizeof plan->allocator, "%s", alloc);
    if (max_split_bytes) plan->alloc_cfg.max_split_size_bytes = max_split_bytes;
    sim_result r;
    double v = -2;
    if (pipe_simulate_with(t, m, plan, NULL, &p, &r, &e) == MS_OK)
        v = r.status == RS_OK ? r.iter_time_s : -1;
    plan_free(plan);
    return v;
}

/* Every mix: the first s layers swapped, the last k kept, the middle under one of the three
 * recomputations, under each of the four allocators auto tries. Returns the fastest time
 * (-1: none fits) and counts the plans simulated. */
static double mixes_brute(const trace_t *t, const machine_t *m, size_t *count)
{
    pol_skel *sk;
    size_t n;
    ms_error e;
    *count = 0;
    if (pol_skeletal(t, &sk, &n, &e) != MS_OK) return -2;
    int32_t L = 0;
    for (size_t i = 0; i < n; i++)
        if (sk[i].layer + 1 > L) L = sk[i].layer + 1;
    static const auto_mode mids[] = { AM_RECOMPUTE, AM_RECOMPUTE_ATTN, AM_RECOMPUTE_MLP };
    static const char *const allocs[] = { "caching", "caching", "expandable", "stitching" };
    double best = -1;
    auto_mode modes[64];
    for (int s = 0; L <= 64 && s <= L; s++)
        for (int k = 0; s + k <= L; k++)
            for (int mi = 0; mi < 3; mi++) {
                if (s + k == L && mi) continue; /* no middle: one plan */
                for (int l = 0; l < L; l++)
                    modes[l] = l < s ? AM_SWAP : l >= L - k ? AM_KEEP : mids[mi];
                for (int a = 0; a < 4; a++) {
                    double v = mix_time(t, m, sk, n, modes, allocs[a],
                                        a == 1 ? UINT64_C(512) << 20 : 0);
                    (*count)++;
                    if (v > 0 && (best < 0 || v < best)) best = v;
                }
            }
    free(sk);
    return best;
}

/* The fastest mix row of a search that swaps whole (-1: none fits). */
static double mix_rows_best(const auto_result *r)
{
    double best = -1;
    for (size_t i = 0; i < r->n; i++)
        if (r->c[i].is_mix && r->c[i].mix.alpha == 0 && r->c[i].status == RS_OK &&
            (best < 0 || r->c[i].iter_time_s < best))
            best = r->c[i].iter_time_s;
    return best;
}

/* On a small model where keep-all does not fit: every mix simulated here, and the search's
 * mixes, with and without pruning, reach the same fastest time; the search's choice is at
 * least as fast; the halves auto finds are the ones the names say. */
static void mix_space(machine_profile *mp, const char *model, uint64_t seq, uint64_t hbm_bytes)
{
    machine_t m = mp->m;
    m.gpu_hbm_bytes = hbm_bytes;
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = model;
    w.seq = seq;
    trace_t *t = NULL;
    ms_error e;
    if (pipe_trace_for(&w, &m, POL_FORM_PLAIN, &t, &e) != MS_OK) {
        TAP_OK(0, "mix space: the trace is made: %s", e.msg);
        return;
    }
    char at[96];
    snprintf(at, sizeof at, "%s seq %llu with %.1f GiB", model, (unsigned long long)seq,
             (double)hbm_bytes / MS_GiB);
    pol_skel *sk;
    size_t n, nh;
    unsigned char *h;
    int split, same = 0;
    if (pol_skeletal(t, &sk, &n, &e) == MS_OK && auto_halves(t, &h, &nh, &split, &e) == MS_OK) {
        same = nh == n && split;
        for (size_t i = 0; same && i < n; i++) same = h[i] == (unsigned char)half_by_name(&sk[i]);
        free(h);
        free(sk);
    }
    TAP_OK(same, "%s: the attention and MLP halves auto finds are the ones the names say", at);
    size_t count;
    double brute = mixes_brute(t, &m, &count);
    auto_result pr, br;
    if (!search(&w, &m, 1, 1, &pr) || !search(&w, &m, 0, 1, &br)) {
        TAP_OK(0, "%s: the searches run", at);
        trace_free(t);
        return;
    }
    TAP_OK(brute > 0, "%s: some mix fits (%zu simulated here, fastest %.4f s)", at, count, brute);
    TAP_NOTE("%s: chosen %s", at, pr.winner >= 0 ? pr.c[pr.winner].label : "-");
    TAP_OK(mix_rows_best(&br) == brute,
           "%s: the unpruned search's mixes reach the brute force's fastest (%.4f = %.4f s)", at,
           mix_rows_best(&br), brute);
    TAP_OK(win_time(&pr) > 0 && win_time(&pr) <= brute && win_time(&pr) == win_time(&br),
           "%s: the pruned search chooses what the brute force over the combined space "
           "chooses (%s, %.4f s <= %.4f s)", at, pr.winner >= 0 ? pr.c[pr.winner].label : "-",
           win_time(&pr), brute);
    auto_result_free(&pr);
    auto_result_free(&br);
    trace_free(t);
}

/* The plan's bytes as plan_write_fp writes them; caller frees. */
static char *plan_text(const plan_t *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    plan_write_fp(p, f);
    fclose(f);
    return buf;
}

static void determinism(machine_profile *mp)
{
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = "dims:4,1024,16,4096,32000";
    w.seq = 8192;
    auto_result a, b;
    if (!search(&w, &mp->m, 1, 1, &a) || !search(&w, &mp->m, 1, 1, &b)) {
        TAP_OK(0, "determinism: the searches run");
        return;
    }
    char *ta = plan_text(a.plan), *tb = plan_text(b.plan);
    TAP_OK(ta && tb && !strcmp(ta, tb) && a.n == b.n && a.winner == b.winner &&
               a.r.iter_time_s == b.r.iter_time_s,
           "the same inputs give the same choice and the same plan bytes twice");
    TAP_OK(ta && strstr(ta, "knob auto.chosen ") && strstr(ta, "knob auto.runner_up.1 "),
           "the plan says it was chosen by auto and names the runner-ups");
    free(ta);
    free(tb);
    auto_result_free(&a);
    auto_result_free(&b);
}

static void nothing_fits(void)
{
    machine_profile *mp = NULL;
    ms_error e;
    if (machine_load_named("v100-32g-pcie3", &mp, &e) != MS_OK) {
        TAP_OK(0, "v100-32g-pcie3 loads: %s", e.msg);
        return;
    }
    machine_t m = mp->m;
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = "dims:4,4096,32,16384,32000";
    w.seq = 262144;
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = AUTO_POLICY;
    auto_result r;
    ms_status st = auto_search(&w, NULL, &m, &p, NULL, &r, &e);
    int seq_hint = 0;
    for (size_t i = 0; st == MS_OK && i < r.n_hints; i++)
        seq_hint |= !strncmp(r.hints[i].change, "seq ", 4) && r.hints[i].iter_time_s > 0;
    TAP_OK(st == MS_OK && r.winner < 0 && seq_hint,
           "nothing fits on a V100 at 256K: a shorter sequence that fits is named, with its "
           "time (%zu hints)", st == MS_OK ? r.n_hints : 0);
    if (st == MS_OK) auto_result_free(&r);
    machine_profile_free(mp);
}

int main(void)
{
    machine_profile *h100 = NULL;
    ms_error e;
    if (machine_load_named("h100-sxm", &h100, &e) != MS_OK) {
        TAP_OK(0, "h100-sxm loads: %s", e.msg);
        return tap_done();
    }
    point(h100, "dims:4,1024,16,4096,32000", 8192, 1, 0);
    point(h100, "dims:4,1024,16,4096,32000", 32768, 1, UINT64_C(12) << 30);
    point(h100, "dims:3,1536,16,6144,32000", 16384, 2, UINT64_C(10) << 30);
    point(h100, "dims:6,1024,16,4096,32000", 16384, 1, UINT64_C(6) << 30);
    mix_space(h100, "dims:4,1024,16,4096,32000", 32768, UINT64_C(12) << 30);
    mix_space(h100, "dims:4,1024,16,4096,32000", 65536, UINT64_C(16) << 30);
    mix_space(h100, "dims:6,1024,16,4096,32000", 16384, UINT64_C(6) << 30);
    determinism(h100);
    nothing_fits();
    machine_profile_free(h100);
    return tap_done();
}

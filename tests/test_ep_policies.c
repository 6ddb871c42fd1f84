/* test_ep_policies.c — every registered policy (`memsim list`) on a mixture-of-experts
 * workload with expert parallelism (tests/data/hf/mixtral.json, framework generic and
 * megatron, dp 4, ep 2, on h200-sxm; Qwen2-MoE with its shared expert likewise): each either runs with sane numbers or refuses with a
 * message, never crashes (all but the three that plan the ZeRO-Offload form run; on one GPU
 * all of them); the plain policies' schedules keep the four all-to-alls of every MoE
 * layer, and full-recompute repeats the forward's two in its recomputation. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/policy.h"
#include "sim/pipeline.h"
#include "tests/tap.h"
#include "base/util.h"

static char model[512];

static const char *cfg = "mixtral";

static void moe_workload(pipe_workload *w, const char *framework, int dp, int ep)
{
    const char *src = getenv("srcdir");
    snprintf(model, sizeof model, "config:%s/tests/data/hf/%s.json", src ? src : ".", cfg);
    pipe_workload_default(w);
    w->model = model;
    w->seq = 2048;
    w->batch = 2;
    w->dp = dp;
    w->ep = ep;
    w->gen_knobs[0] = (pol_knob){ "framework", framework };
    w->n_gen_knobs = 1;
}

/* Ops of the trace's last iteration whose names contain `part`, and all ops. */
static int count_ops(const trace_t *t, const char *part)
{
    int n = 0, it = -1, last = (int)trace_meta_u64(t, "iterations", 2) - 1;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) it = (int)r->u.mark.value;
        if (r->type == TR_OP && it == last && strstr(r->u.op.name, part)) n++;
    }
    return n;
}

static void every_policy(const machine_t *m, const char *framework, int dp, int ep,
                         size_t want_run)
{
    pipe_workload w;
    moe_workload(&w, framework, dp, ep);
    trace_t *t[2] = { NULL, NULL };
    ms_error err;
    for (int f = 0; f < 2; f++)
        if (pipe_trace_for(&w, m, f ? POL_FORM_OFFLOAD : POL_FORM_PLAIN, &t[f], &err) != MS_OK)
            TAP_NOTE("%s form %d: %s", framework, f, err.msg);
    TAP_OK(t[0] != NULL, "%s %s: the MoE trace at dp %d ep %d", cfg, framework, dp, ep);
    if (!t[0]) return;
    /* the ZeRO-Offload form: the generator has no MoE program for it, and the form made from
     * a plain trace is one GPU's: the policies that plan it refuse, saying so */
    char offload_why[sizeof err.msg];
    snprintf(offload_why, sizeof offload_why, "%s", t[1] ? "" : err.msg);
    TAP_OK(t[1] || strstr(offload_why, "offload"), "%s: its ZeRO-Offload form is made or "
           "refused with a reason (%s)", framework, offload_why);
    TAP_OK(count_ops(t[0], ".a2a") == (ep > 1 ? 4 * 2 : 0), "%s: %d all-to-alls in each of "
           "the 2 MoE layers", framework, ep > 1 ? 4 : 0);
    size_t n, ran = 0, refused = 0;
    const pol_policy *const *reg = pol_registry(&n);
    for (size_t i = 0; i < n; i++) {
        pipe_policy p;
        pipe_policy_default(&p);
        p.policy = reg[i]->name;
        sim_result r;
        memset(&r, 0, sizeof r);
        ms_error_clear(&err);
        const trace_t *ti = t[reg[i]->form == POL_FORM_OFFLOAD];
        ms_status st = ti ? pipe_run(ti, m, &p, NULL, &r, &err)
                          : ms_fail(&err, MS_ERR_UNSUPPORTED, "%s", offload_why);
        int good = st == MS_OK && r.status == RS_OK && r.iter_time_s > 0 &&
                   isfinite(r.iter_time_s) && r.peak_reserved_bytes >= r.peak_allocated_bytes &&
                   r.peak_allocated_bytes > 0;
        int said = st != MS_OK && strlen(err.msg) > 10;
        TAP_OK(good || said, "%s %s dp %d ep %d %s: %s%s", cfg, framework, dp, ep, reg[i]->name,
               good ? "runs" : said ? "refuses: " : "neither runs nor says why",
               good ? "" : st != MS_OK ? err.msg : r.failure);
        ran += (size_t)good;
        refused += (size_t)said;
    }
    TAP_NOTE("%s: %zu of %zu policies run, %zu refuse", framework, ran, n, refused);
    size_t want = want_run ? want_run : n;
    TAP_OK(ran >= want, "%s dp %d ep %d: %zu of the %zu policies run (at least %zu)", framework,
           dp, ep, ran, n, want);
    trace_free(t[0]);
    trace_free(t[1]);
}

/* The schedule of full-recompute replays each MoE layer's forward: its dispatch and combine
 * all-to-alls once more before the layer's backward. */
static void recompute_repeats(const machine_t *m)
{
    pipe_workload w;
    moe_workload(&w, "generic", 4, 2);
    trace_t *t = NULL;
    ms_error err;
    if (pipe_trace_for(&w, m, POL_FORM_PLAIN, &t, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    /* the forward's all-to-alls, by op id */
    uint64_t fwd[64];
    int nf = 0;
    for (size_t i = 0; t && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_OP && nf < 64 && (ms_ends_with(r->u.op.name, ".dispatch.a2a") ||
                                           ms_ends_with(r->u.op.name, ".combine.a2a")))
            fwd[nf++] = r->u.op.id;
    }
    int counts[2] = { -1, -1 };
    const char *pol[2] = { "keep-all", "full-recompute" };
    char path[2][64];
    for (int k = 0; t && k < 2; k++) {
        pipe_policy p;
        pipe_policy_default(&p);
        p.policy = pol[k];
        pipe_outputs o;
        memset(&o, 0, sizeof o);
        snprintf(path[k], sizeof path[k], "test_ep_policies.%d.sched", k);
        o.schedule_path = path[k];
        sim_result r;
        ms_error_clear(&err);
        if (pipe_run(t, m, &p, &o, &r, &err) != MS_OK) {
            TAP_NOTE("%s: %s", pol[k], err.msg);
            continue;
        }
        FILE *f = fopen(path[k], "r");
        char line[4096];
        counts[k] = 0;
        while (f && fgets(line, sizeof line, f)) {
            char *op = strstr(line, " op=");
            if (!op || !strstr(line, "recompute=1")) continue;
            uint64_t id = strtoull(op + 4, NULL, 10);
            for (int j = 0; j < nf; j++) counts[k] += fwd[j] == id;
        }
        if (f) fclose(f);
        remove(path[k]);
    }
    TAP_OK(nf == 2 * 2 * 2 && counts[0] == 0 && counts[1] == nf,
           "full-recompute's schedule recomputes each of the forward's %d all-to-alls (2 "
           "layers x 2 iterations x dispatch and combine) once: %d times (keep-all: %d)", nf,
           counts[1], counts[0]);
    trace_free(t);
}

int main(void)
{
    machine_profile *mp = NULL;
    ms_error err;
    if (machine_load_named("h200-sxm", &mp, &err) != MS_OK) {
        TAP_NOTE("%s", err.msg);
        TAP_OK(0, "the h200-sxm profile loads");
        return tap_done();
    }
    const machine_t *m = &mp->m;
    /* with ep 2 the ZeRO-Offload form cannot be made (the generator has no MoE offload
     * program, and the form made from a plain trace is one GPU's): all but those three */
    size_t n;
    pol_registry(&n);
    every_policy(m, "generic", 4, 2, n - 3);
    every_policy(m, "megatron", 4, 2, n - 3);
    /* on one GPU the form is made from the plain trace: every policy runs */
    every_policy(m, "generic", 1, 1, 0);
    /* Qwen2-MoE: a shared expert with its gate beside the routed ones */
    cfg = "qwen2_moe";
    every_policy(m, "generic", 4, 2, n - 3);
    every_policy(m, "megatron", 4, 2, n - 3);
    cfg = "mixtral";
    recompute_repeats(m);
    machine_profile_free(mp);
    return tap_done();
}

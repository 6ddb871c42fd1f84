/* test_save_on_cpu.c — the save-on-cpu policy (planners/baseline/policy_save_on_cpu.c) and the tensor
 * lowering's swap_at=save (planners/lower_save.c) on small Hugging Face-shaped traces (the hf
 * generator profile): the device peak falls to about one layer's saved activations above
 * keep-all's non-activation memory, the host holds at least the saved bytes, the step is
 * slower than keep-all by at least the blocking copies' time on the profile's link, the
 * parameters are saved only with params=1, copies on the copy streams overlap compute, and a trace with
 * nothing saved for backward is refused by name. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/lower.h"
#include "planners/policy.h"
#include "planners/baseline/policy_save_on_cpu.h"
#include "sim/pipeline.h"
#include "tests/tap.h"
#include "base/util.h"

static char model[512];

static trace_t *hf_trace(const machine_t *m, const char *cfg, const char *precision)
{
    const char *rw = getenv("MEMSIM_REALWORLD");
    snprintf(model, sizeof model, "config:%s/../configs/%s.json",
             rw ? rw : "experiments/realworld/h200", cfg);
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = model;
    w.seq = 1024;
    w.batch = 2;
    w.gen_knobs[0] = (pol_knob){ "framework", "hf" };
    w.gen_knobs[1] = (pol_knob){ "precision", precision };
    w.n_gen_knobs = 2;
    trace_t *t = NULL;
    ms_error err;
    if (pipe_trace_for(&w, m, POL_FORM_PLAIN, &t, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return t;
}

static int run(const trace_t *t, const machine_t *m, const char *policy, const pol_knob *k,
               size_t nk, sim_result *r)
{
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = policy;
    for (size_t i = 0; i < nk; i++) p.knobs[i] = k[i];
    p.n_knobs = nk;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = pipe_run(t, m, &p, NULL, r, &err);
    if (st != MS_OK) TAP_NOTE("%s: %s", policy, err.msg);
    else if (r->status != RS_OK) TAP_NOTE("%s: %s", policy, r->failure);
    return st == MS_OK && r->status == RS_OK;
}

/* Saved bytes of the activations (not parameters) of each layer; the largest and the sum. */
static void layer_saved(const trace_t *t, const uint64_t *ids, size_t n, uint64_t *max_layer,
                        uint64_t *sum_layers)
{
    uint64_t per[256] = { 0 };
    *max_layer = *sum_layers = 0;
    for (size_t i = 0; i < n; i++) {
        const trace_tensor *x = trace_find_tensor(t, ids[i]);
        if (!x || x->cls == TC_PARAM || x->layer < 0 || x->layer >= 256) continue;
        per[x->layer] += x->bytes;
        *sum_layers += x->bytes;
    }
    for (size_t l = 0; l < 256; l++)
        if (per[l] > *max_layer) *max_layer = per[l];
}

static void one(const machine_t *m, const char *cfg, const char *precision)
{
    trace_t *t = hf_trace(m, cfg, precision);
    TAP_OK(t != NULL, "%s %s: the trace is made", cfg, precision);
    if (!t) return;
    uint64_t *ids = NULL, saved = 0, pids_bytes = 0;
    size_t n = 0;
    ms_error err;
    ms_status st = pol_saved_tensors(t, 1, &ids, &n, &saved, &err);
    uint64_t *pids = NULL;
    size_t pn = 0;
    if (st == MS_OK) st = pol_saved_tensors(t, 0, &pids, &pn, &pids_bytes, &err);
    int has_param = 0;
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        const trace_tensor *x = trace_find_tensor(t, ids[i]);
        has_param |= x && x->cls == TC_PARAM;
    }
    TAP_OK(st == MS_OK && n > pn && pids_bytes < saved && has_param == (n > pn),
           "%s %s: %zu saved tensors (%.1f MiB), %zu without the parameters a backward reads",
           cfg, precision, n, (double)saved / MS_MiB, pn);
    uint64_t max_l, sum_l;
    layer_saved(t, ids, n, &max_l, &sum_l);
    sim_result ka, sc, sp, cs;
    int ok = run(t, m, "keep-all", NULL, 0, &ka) & run(t, m, "save-on-cpu", NULL, 0, &sc);
    TAP_OK(ok, "%s %s: keep-all and save-on-cpu run", cfg, precision);
    if (ok) {
        /* what keep-all holds beyond the layers' saved activations, plus about one layer */
        uint64_t bound = ka.peak_allocated_bytes - sum_l + max_l + max_l / 4;
        TAP_OK(sc.peak_allocated_bytes <= bound && sc.peak_allocated_bytes < ka.peak_allocated_bytes,
               "%s %s: the device peak drops from %.1f to %.1f MiB, within about one layer's "
               "saved activations (%.1f MiB) of keep-all's other memory (%.1f MiB)", cfg,
               precision, (double)ka.peak_allocated_bytes / MS_MiB,
               (double)sc.peak_allocated_bytes / MS_MiB, (double)max_l / MS_MiB,
               (double)(ka.peak_allocated_bytes - sum_l) / MS_MiB);
        TAP_OK(sc.host_peak_bytes >= saved && ka.host_peak_bytes == 0,
               "%s %s: the host holds the saved bytes (%.1f MiB >= %.1f MiB)", cfg, precision,
               (double)sc.host_peak_bytes / MS_MiB, (double)saved / MS_MiB);
        /* The pack hook's copies to the host block the host (copy_ without non_blocking):
         * at least their time is added. The unpack's copies back do not (non_blocking), and
         * where the host bounds the step (these tiny models under the profile's eager host
         * time) they may hide behind its issuing. */
        double d2h_s = (double)saved / m->link_d2h_Bps;
        TAP_OK(sc.iter_time_s >= ka.iter_time_s + d2h_s,
               "%s %s: the step (%.4f s) is slower than keep-all (%.4f s) by at least the "
               "blocking copies' time (%.4f s)", cfg, precision, sc.iter_time_s,
               ka.iter_time_s, d2h_s);
    }
    const pol_knob np[] = { { "params", "0" } }, cp[] = { { "swap_stream", "copy" } };
    ok = ok && run(t, m, "save-on-cpu", np, 1, &sp) && run(t, m, "save-on-cpu", cp, 1, &cs);
    TAP_OK(ok && sp.host_peak_bytes <= sc.host_peak_bytes && sp.iter_time_s <= sc.iter_time_s &&
               (has_param ? sp.host_peak_bytes < sc.host_peak_bytes : 1),
           "%s %s: params=0 copies %s (host %.1f of %.1f MiB)", cfg, precision,
           has_param ? "less" : "the same", ok ? (double)sp.host_peak_bytes / MS_MiB : 0.0,
           ok ? (double)sc.host_peak_bytes / MS_MiB : 0.0);
    TAP_OK(ok && cs.iter_time_s < sc.iter_time_s,
           "%s %s: with swap_stream=copy the copies overlap compute (%.4f s < %.4f s)", cfg,
           precision, ok ? cs.iter_time_s : 0.0, ok ? sc.iter_time_s : 0.0);
    free(ids);
    free(pids);
    trace_free(t);
}

/* A trace with no backward op reading a forward tensor: refused, saying why. */
static void refusal(const machine_t *m)
{
    const char *path = "test_save_on_cpu.trace";
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("memsim-trace 1\nmeta layers 1\nmark iter 0\nmark phase fwd\nmark layer 0\n"
              "alloc 1 4096 act_skel 0 0 0 1 L0.x\nop 1 elem fwd 0 1 4096 4096 1.0 - 1 L0.f\n"
              "mark phase bwd\nmark layer 0\nfree 1\n", f);
        fclose(f);
    }
    trace_t *t = NULL;
    ms_error err;
    ms_status st = f ? trace_load(path, &t, &err) : MS_ERR_IO;
    if (st) TAP_NOTE("%s", err.msg);
    plan_t *p = NULL;
    ms_error_clear(&err);
    st = t ? pol_plan("save-on-cpu", t, m, NULL, &p, &err) : MS_ERR_INVALID;
    TAP_OK(t && st == MS_ERR_INVALID && strstr(err.msg, "save-on-cpu") &&
               strstr(err.msg, "saved for backward"),
           "a trace with nothing saved for backward is refused: %s", err.msg);
    plan_free(p);
    trace_free(t);
    remove(path);
}

int main(void)
{
    machine_profile *h200 = NULL;
    ms_error err;
    if (machine_load_named("h200-sxm", &h200, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    TAP_OK(h200 != NULL, "machine h200-sxm loads");
    if (!h200) return tap_done();
    one(&h200->m, "gpt2-tiny-2l", "bf16");
    one(&h200->m, "llama-tiny-2l", "amp");
    refusal(&h200->m);
    machine_profile_free(h200);
    return tap_done();
}

/* pipeline.c — trace → plan → schedule → simulation → results (see pipeline.h). Used by
 * memsim plan / simulate / compare and the experiments. */
#define _POSIX_C_SOURCE 200809L
#include "sim/pipeline.h"
#include "sim/power.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/knob.h"
#include "planners/lower.h"
#include "planners/protrain/lower_chunks.h"
#include "planners/memo/memplan.h"
#include "planners/memferry/offload_form.h"
#include "planners/schedule.h"
#include "sim/exec.h"
#include "traces/capture_form.h"
#include "traces/gen.h"
#include "traces/jobview.h"
#include "traces/models.h"

void pipe_workload_default(pipe_workload *w)
{
    memset(w, 0, sizeof *w);
    w->model = "gpt-7b";
}

void pipe_policy_default(pipe_policy *p)
{
    memset(p, 0, sizeof *p);
    p->policy = "keep-all";
    p->alpha = -1;
    alloc_config_default(&p->alloc_cfg);
    p->issue_us = SIM_ISSUE_US_DEFAULT;
}

ms_status pipe_trace(const pipe_workload *w, const machine_t *m, trace_t **out, ms_error *err)
{
    return pipe_trace_for(w, m, POL_FORM_PLAIN, out, err);
}

int pipe_form_set(const pipe_workload *w)
{
    if (w->trace_path) return 1;
    for (size_t i = 0; i < w->n_gen_knobs; i++)
        if (!strcmp(w->gen_knobs[i].key, "offload")) return 1;
    return 0;
}

/* A captured trace runs as the process ran it (traces/capture_form.h): its first step, with
 * the optimizer states made lazily, then the captured step, `iterations` steps in all
 * (--iters, default 2, as generated traces; 1: the captured step alone). */
static ms_status process_form_of(trace_t **t, int iterations, const char *path, ms_error *err)
{
    int n = iterations > 0 ? iterations : 2;
    if (n == 1 || !cform_is_capture(*t)) return MS_OK;
    trace_t *o = NULL;
    ms_error e;
    ms_error_clear(&e);
    ms_status st = cform_process(*t, n, &o, &e);
    trace_free(*t);
    *t = o;
    return st == MS_OK ? MS_OK : ms_fail_at(err, st, path, 0, "its process form: %s", e.msg);
}

/* Replaces the plain trace *t by its ZeRO-Offload form (planners/memferry/offload_form.h); a
 * failure names the trace file when there is one. */
static ms_status offload_form_of(trace_t **t, const machine_t *m, uint64_t opt_bytes,
                                 const char *path, ms_error *err)
{
    trace_t *o = NULL;
    ms_error e;
    ms_error_clear(&e);
    ms_status st = oform_from_plain(*t, m, opt_bytes, &o, &e);
    trace_free(*t);
    *t = o;
    if (st == MS_OK) return MS_OK;
    if (path) return ms_fail_at(err, st, path, 0, "its ZeRO-Offload form: %s", e.msg);
    return ms_fail(err, st, "the workload's ZeRO-Offload form: %s", e.msg);
}

ms_status pipe_trace_for(const pipe_workload *w, const machine_t *m, pol_form form,
                         trace_t **out, ms_error *err)
{
    if (w->trace_path) {
        ms_status st = trace_load(w->trace_path, out, err);
        if (st) return st;
        if (!trace_count(*out)) {
            trace_free(*out);
            *out = NULL;
            return ms_fail_at(err, MS_ERR_INVALID, w->trace_path, 0,
                              "no records after the header: nothing to plan or simulate");
        }
        if ((st = process_form_of(out, w->iterations, w->trace_path, err)) != MS_OK) return st;
        /* a trace cannot be generated again in another form: made from the plain one */
        if (form == POL_FORM_OFFLOAD && !oform_is_offload(*out))
            return offload_form_of(out, m, 12, w->trace_path, err);
        return MS_OK;
    }
    gen_config c;
    gen_config_default(&c);
    ms_status st = model_lookup(w->model, &c.model, err);
    if (st != MS_OK) return st;
    c.seq = w->seq ? w->seq : c.model.default_seq;
    c.micro_batch = w->batch ? w->batch : 1;
    c.tp = w->tp ? w->tp : 1;
    c.cp = w->cp ? w->cp : 1;
    c.dp = w->dp ? w->dp : 1;
    c.ep = w->ep ? w->ep : 1;
    if (w->iterations > 0) c.iterations = w->iterations;
    c.offload = form == POL_FORM_OFFLOAD; /* the user's --gen offload, below, wins */
    for (size_t i = 0; i < w->n_gen_knobs; i++)
        if ((st = gen_config_set(&c, w->gen_knobs[i].key, w->gen_knobs[i].value, err)) != MS_OK)
            return st;
    /* the hf profile writes PyTorch eager's program only, and the generator has no
     * ZeRO-Offload program for MoE layers: their ZeRO-Offload form is made from the plain
     * trace, as for a captured one (one GPU's: with dp > 1 the generator's refusal stands;
     * the user's --gen offload=1 is still refused) */
    if (form == POL_FORM_OFFLOAD && c.offload && !pipe_form_set(w) &&
        (c.framework == GEN_FW_HF || (c.model.n_experts && c.dp == 1))) {
        c.offload = 0;
        if ((st = gen_validate(&c, err)) != MS_OK) return st;
        if ((st = gen_trace(&c, m, out, err)) != MS_OK) return st;
        return offload_form_of(out, m, (uint64_t)c.opt_bytes_per_param, NULL, err);
    }
    if ((st = gen_validate(&c, err)) != MS_OK) {
        if (form == POL_FORM_OFFLOAD && c.offload) { /* the user did not ask for it: say so */
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err ? err->msg : "");
            return ms_fail(err, st, "the workload's ZeRO-Offload form (offload=1, which "
                           "zero-offload and the MemFerry policies plan): %s", why);
        }
        return st;
    }
    return greuse_trace(w->gen_reuse, &c, m, out, err);
}

ms_status pipe_plan(const trace_t *t, const machine_t *m, const pipe_policy *p, plan_t **out,
                    ms_error *err)
{
    ms_status st;
    plan_t *plan = NULL;
    if (p->plan_path) {
        st = plan_load(p->plan_path, &plan, err);
    } else {
        pol_opts o;
        pol_opts_default(&o);
        o.allocator = p->allocator;
        o.alloc_cfg = &p->alloc_cfg;
        o.alpha = p->alpha;
        o.knobs = p->knobs;
        o.n_knobs = p->n_knobs;
        st = pol_plan(p->policy, t, m, &o, &plan, err);
    }
    if (st != MS_OK) return st;
    if (p->allocator) snprintf(plan->allocator, sizeof plan->allocator, "%s", p->allocator);
    if (p->alloc_cfg_set) plan->alloc_cfg = p->alloc_cfg;
    if (!alloc_find(plan->allocator)) {
        ms_status e = ms_fail(err, MS_ERR_NOTFOUND, "unknown allocator '%s' (memsim list)",
                              plan->allocator);
        plan_free(plan);
        return e;
    }
    *out = plan;
    return MS_OK;
}

static void fill_ids(sim_result *r, const trace_t *t, const machine_t *m, const plan_t *plan)
{
    const char *model = trace_get_meta(t, "model");
    snprintf(r->policy, sizeof r->policy, "%s", plan->policy);
    snprintf(r->allocator, sizeof r->allocator, "%s", plan->allocator);
    snprintf(r->model, sizeof r->model, "%s", model ? model : "-");
    snprintf(r->machine, sizeof r->machine, "%s", m->name);
    r->seq = trace_meta_u64(t, "seq", 0);
    r->batch = trace_meta_u64(t, "batch", 0);
    r->tp = (int)trace_meta_u64(t, "tp", 0);
    r->cp = (int)trace_meta_u64(t, "cp", 0);
    r->ep = (int)trace_meta_u64(t, "ep", 1);
    r->dp = (int)trace_meta_u64(t, "dp", 0);
}

/* The planner's caveat for the results: a search that found nothing within its budget
 * (ProTrain's and its baselines' plan knob feasible 0) plans the closest configuration,
 * which the simulation then runs on the machine as it is. */
static void plan_note(sim_result *r, const plan_t *plan)
{
    knob_predictions pr;
    if (knob_predictions_of(plan, &pr, NULL) != MS_OK || pr.feasible) return;
    /* the configuration the planner chose, as its chunk knobs give it */
    lc_knobs k;
    char cfg[128] = "";
    if (lc_knobs_from_plan(plan, &k, NULL) == MS_OK) {
        const int *v[4] = { &k.n_persist, &k.n_buffer, &k.n_swap, &k.n_ckpt };
        size_t len = 0;
        for (int i = 0; i < 4; i++)
            if (knobtab_given(&lc_knob_table, &k, v[i]) && len < sizeof cfg)
                len += (size_t)snprintf(cfg + len, sizeof cfg - len, " %s=%d",
                                        knobtab_row_of(&lc_knob_table, &k, v[i])->key, *v[i]);
    }
    snprintf(r->plan_note, sizeof r->plan_note, "no configuration fits the planner's device and "
             "host budget (the machine's, or the knobs gpu_bytes / host_bytes); simulated the "
             "closest:%s, predicted peak %.2f GiB, host %.2f GiB", cfg,
             (double)pr.peak_bytes / MS_GiB, (double)pr.host_bytes / MS_GiB);
}

/* The schedule's text through ms_out (atomic, gzip for ".gz"), made in memory first. */
static ms_status write_schedule(const schedule_t *s, const char *path, ms_error *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    sched_dump(s, f);
    ms_status st = fclose(f) != 0 ? ms_fail(err, MS_ERR_NOMEM, "out of memory")
                                  : ms_out_save(path, text, len, err);
    free(text);
    return st;
}

ms_status pipe_simulate(const trace_t *t, const machine_t *m, const plan_t *plan,
                        const pipe_outputs *out, sim_result *r, ms_error *err)
{
    return pipe_simulate_with(t, m, plan, out, NULL, r, err);
}

/* A plan file's static offsets are checked as the memory planner's own are (memplan.h):
 * two tensors that can be live at once never share bytes; a conflict names the plan file and
 * the line of the later tensor's offset. */
static ms_status check_plan_offsets(const schedule_t *s, const plan_t *plan, const char *path,
                                    const uint64_t *ids, const uint64_t *offs, ms_error *err)
{
    memplan_overlap ov;
    ms_error e;
    ms_error_clear(&e);
    ms_status st = memplan_check_offsets(s, ids, offs, plan->n_offsets, &ov, &e);
    if (st == MS_ERR_INVALID)
        return ms_fail_at(err, st, path, plan_offset_line(plan, ov.b), "%s", e.msg);
    if (st != MS_OK) return ms_fail(err, st, "%s", e.msg);
    return MS_OK;
}

double pipe_eager_host_us(const trace_t *t, const machine_t *m)
{
    const char *fw = t ? trace_get_meta(t, "framework") : NULL;
    /* only where the ops have GPU times to weigh the host against (a CPU capture has none) */
    const char *timing = t ? trace_get_meta(t, "captured.timing") : NULL;
    if (!fw || strcmp(fw, "pytorch") != 0 || !timing || strcmp(timing, "kernels") != 0 ||
        trace_has_host_times(t))
        return 0;
    return m->host_eager_kernel_us;
}

/* The power limit's passes (sim/power.h): where the profile has the figures, the schedule
 * runs without outputs, first at the maximum clock, then at the clock each window held in
 * the pass before, until no duration moves by more than PIPE_POWER_TOL of itself or
 * PIPE_POWER_PASSES passes ran; so->dur_scale is then the last clock for the run that
 * counts. A pass that ends in an oom stops the iteration (the final run reports it). */
#define PIPE_POWER_PASSES 4
#define PIPE_POWER_TOL 1e-4
static ms_status power_passes(const schedule_t *s, const trace_t *t, const machine_t *gpu,
                              sim_opts *so, sim_result *r, pw_model **out, ms_error *err)
{
    pw_why why;
    ms_status st = pw_new(gpu, s, t, out, &why, err);
    if (st != MS_OK || !*out) return st;
    sim_opts q = *so;
    q.timeline_path = q.memcsv_path = q.intervals_path = NULL;
    q.timeline_out = NULL;
    q.dur_scale = pw_scales(*out);
    q.start_us = pw_starts(*out);
    for (int pass = 0; pass < PIPE_POWER_PASSES; pass++) {
        res_init(r);
        if ((st = sim_execute(s, gpu, &q, r, err)) != MS_OK) return st;
        if (r->status != RS_OK || pw_update(*out) < PIPE_POWER_TOL) break;
    }
    so->dur_scale = pw_scales(*out);
    return MS_OK;
}

ms_status pipe_simulate_with(const trace_t *t, const machine_t *m, const plan_t *plan,
                             const pipe_outputs *out, const pipe_policy *p, sim_result *r,
                             ms_error *err)
{
    static const pipe_outputs none;
    if (!out) out = &none;
    schedule_t *s = NULL;
    lower_opts lo;
    lower_opts_default(&lo);
    int borrowed; /* the reuse cache's template: read here, freed by the cache */
    ms_status st = lreuse_lower(p ? p->reuse : NULL, t, plan, m, &lo, &s, &borrowed, err);
    if (st != MS_OK) return st;
    if (out->schedule_path && (st = write_schedule(s, out->schedule_path, err)) != MS_OK) {
        if (!borrowed) sched_free(s);
        return st;
    }
    if (out->plan_path && (st = plan_write(plan, out->plan_path, err)) != MS_OK) {
        if (!borrowed) sched_free(s);
        return st;
    }
    alloc_config cfg;
    uint64_t *ids, *offs;
    if ((st = plan_alloc_config(plan, &cfg, &ids, &offs)) != MS_OK) {
        if (!borrowed) sched_free(s);
        return ms_fail(err, st, "out of memory");
    }
    if (p && p->plan_path && plan->n_offsets &&
        (st = check_plan_offsets(s, plan, p->plan_path, ids, offs, err)) != MS_OK) {
        free(ids);
        free(offs);
        if (!borrowed) sched_free(s);
        return st;
    }
    sim_opts so;
    sim_opts_default(&so);
    so.allocator = plan->allocator;
    so.alloc_cfg = &cfg;
    so.trace = t;
    so.timeline_path = out->timeline_path;
    so.timeline_out = out->timeline_out;
    so.timeline_pid = out->timeline_pid;
    so.timeline_process = out->timeline_process;
    so.timeline_first = out->timeline_first;
    so.memcsv_path = out->memcsv_path;
    so.intervals_path = out->intervals_path;
    so.eager_host_us = pipe_eager_host_us(t, m);
    if (p) {
        so.issue_ahead = p->issue_ahead;
        so.issue_us = p->issue_us;
        so.ckpt_host_measured = p->ckpt_host_measured;
    }
    /* The job's GPUs on this node share its host memory and, copying at once, the uplinks
     * of their PCIe switches. */
    jobview jv;
    jobview_of(t, m, &jv);
    so.host_sharers = jv.node_ranks;
    so.host_capacity_bytes = jv.host_share_bytes;
    pw_model *pw = NULL;
    st = power_passes(s, t, &jv.gpu, &so, r, &pw, err);
    if (st == MS_OK) {
        res_init(r);
        st = sim_execute(s, &jv.gpu, &so, r, err);
    }
    if (pw) {
        r->power_clock_ratio = pw_clock_ratio(pw);
        r->power_peak_w = pw_peak_window_w(pw);
    }
    pw_free(pw);
    free(ids);
    free(offs);
    if (!borrowed) sched_free(s);
    if (st != MS_OK) return st;
    fill_ids(r, t, m, plan);
    plan_note(r, plan);
    r->host_capacity_bytes = so.host_capacity_bytes;
    r->model_flops = trace_model_flops(t);
    if (r->status == RS_OK && r->iter_time_s > 0) {
        double tokens = (double)(r->batch ? r->batch : 1) * (double)r->seq /
                        (double)((r->tp ? r->tp : 1) * (r->cp ? r->cp : 1));
        r->tgs = tokens / r->iter_time_s;
        if (m->gpu_peak_bf16_flops > 0)
            r->mfu = r->model_flops / r->iter_time_s / m->gpu_peak_bf16_flops;
    }
    return MS_OK;
}

ms_status pipe_run(const trace_t *t, const machine_t *m, const pipe_policy *p,
                   const pipe_outputs *out, sim_result *r, ms_error *err)
{
    plan_t *plan = NULL;
    ms_status st = pipe_plan(t, m, p, &plan, err);
    if (st != MS_OK) return st;
    st = pipe_simulate_with(t, m, plan, out, p, r, err);
    plan_free(plan);
    size_t np = p->plan_path ? strlen(p->plan_path) : 0;
    if (st == MS_ERR_INVALID && p->plan_path && err && /* not named already */
        !(strncmp(err->msg, p->plan_path, np) == 0 && err->msg[np] == ':')) {
        /* a plan file that does not fit the trace: name the file the user has to look at */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        ms_fail_at(err, st, p->plan_path, 0, "%s", why);
    }
    return st;
}

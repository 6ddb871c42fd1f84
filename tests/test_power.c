/* test_power.c — the power limit's clock in the simulator (sim/power.c through
 * sim/pipeline.c): no model without the profile's figures, for vendor attention or for
 * measured op times; none binding under a limit no window reaches; a limit that binds slows
 * the iteration, more the lower it is, and holds every window's average power to it; the
 * same inputs give the same result. On a small GPT with the runtime's kernels. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/pipeline.h"
#include "tests/tap.h"
#include "base/util.h"

/* Figures of the shape `memsim probe --power` writes (not a real GPU's). */
static void set_power(machine_t *m, double limit_w)
{
    m->power_limit_w = limit_w;
    m->power_idle_w = 120;
    m->power_gemm_j = 1.7e-12;
    m->power_gemm_time_exp = 0.65;
    m->power_gemm_clock_exp = 2.5;
    m->power_rt_attn_fwd_j = 1.4e-12;
    m->power_rt_attn_fwd_time_exp = 0.8;
    m->power_rt_attn_bwd_j = 1.5e-12;
    m->power_rt_attn_bwd_time_exp = 0.6;
    m->power_mem_j = 1.7e-10;
    m->power_mem_time_exp = 0.2;
    m->power_window_ms = 5;
}

static trace_t *workload(const machine_t *m, const char *kernels)
{
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = "dims:4,2048,16,8192,50304";
    w.seq = 8192;
    w.gen_knobs[0] = (pol_knob){"kernels", kernels};
    w.n_gen_knobs = 1;
    trace_t *t = NULL;
    ms_error err;
    if (pipe_trace(&w, m, &t, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return t;
}

static sim_result run(const trace_t *t, const machine_t *m)
{
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = "keep-all";
    sim_result r;
    ms_error err;
    memset(&r, 0, sizeof r);
    if (pipe_run(t, m, &p, NULL, &r, &err) != MS_OK) {
        TAP_NOTE("%s", err.msg);
        r.status = RS_ERROR;
    }
    return r;
}

int main(void)
{
    machine_profile *prof = NULL;
    ms_error err;
    if (machine_load_named("h200-sxm", &prof, &err) != MS_OK) {
        TAP_OK(0, "h200-sxm loads: %s", err.msg);
        return tap_done();
    }
    machine_t m = prof->m;
    set_power(&m, 0);
    trace_t *t = workload(&m, "runtime"), *tv = workload(&m, "vendor");
    TAP_OK(t && tv, "a small GPT generates with the runtime's and the vendor's kernels");
    if (!t || !tv) return tap_done();
    sim_result base = run(t, &m);
    TAP_OK(base.status == RS_OK && base.power_clock_ratio == 0,
           "no power.limit_w: no model (%.4f s)", base.iter_time_s);

    set_power(&m, 1e6);
    sim_result high = run(t, &m);
    TAP_OK(high.power_clock_ratio == 1.0 && high.iter_time_s == base.iter_time_s,
           "a limit no window reaches: the maximum clock and the same time (%.4f s, busiest "
           "window %.0f W)", high.iter_time_s, high.power_peak_w);

    set_power(&m, 700);
    sim_result mid = run(t, &m);
    set_power(&m, 450);
    sim_result low = run(t, &m);
    TAP_OK(mid.power_clock_ratio < 1 && mid.iter_time_s > base.iter_time_s,
           "700 W binds: clock %.3f, %.4f s against %.4f s", mid.power_clock_ratio,
           mid.iter_time_s, base.iter_time_s);
    TAP_OK(low.power_clock_ratio < mid.power_clock_ratio && low.iter_time_s > mid.iter_time_s,
           "450 W binds more: clock %.3f, %.4f s", low.power_clock_ratio, low.iter_time_s);
    TAP_OK(mid.power_peak_w <= 700 * 1.001 && low.power_peak_w <= 450 * 1.001,
           "every window's average held to the limit (busiest %.1f W at 700, %.1f W at 450)",
           mid.power_peak_w, low.power_peak_w);
    TAP_OK(mid.peak_reserved_bytes == base.peak_reserved_bytes,
           "the clock changes time, not memory");

    sim_result again = run(t, &m);
    TAP_OK(again.iter_time_s == low.iter_time_s && again.power_clock_ratio == low.power_clock_ratio,
           "the same inputs, the same result");

    sim_result vend = run(tv, &m);
    TAP_OK(vend.status == RS_OK && vend.power_clock_ratio == 0,
           "vendor attention, no figure for it: no model");

    m.power_attn_fwd_j = 1.3e-12;
    m.power_attn_bwd_j = 1.47e-12;
    sim_result vfig = run(tv, &m);
    TAP_OK(vfig.power_clock_ratio > 0 && vfig.power_clock_ratio < 1,
           "with power.attn_*_j the vendor's attention gets the model (clock %.3f)",
           vfig.power_clock_ratio);

    trace_set_meta(t, "op_times", "measured");
    sim_result meas = run(t, &m);
    TAP_OK(meas.power_clock_ratio == 0 && meas.iter_time_s == base.iter_time_s,
           "measured op times (meta op_times measured): no model on top of them");
    trace_free(t);
    trace_free(tv);
    machine_profile_free(prof);
    return tap_done();
}

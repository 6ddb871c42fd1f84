/* test_rt_dha — DHA and the host optimizer with the real kernels on a GPU: a small generated
 * GPT (the shape of tests/test_rt_partial) run through the executor under keep-all (GPU
 * AdamW, the plain trace) and, on the same model's offload trace (gen offload 1), under
 * shadow-model plans lowered by planners/memferry/lower_dha.c: the memferry policy's plan, two mixed
 * plans (DHA, DFGB and GFGB units; gradients on the GPU and written to the host, with
 * grad_write fused and accumulate), zero-offload (MemFerry's Native-Offload, realloc=0) and
 * go-memferry at reserve 0.3 and 0.5 (module-level host gradients: buffers split between the
 * GPU and the host; without the executor's compute_split hook such a run must stop).
 * Host-resident operands are given to the kernels as mapped pinned addresses; each
 * `<group>.optim.host` runs AdamW on the host copies on the executor's host thread. The
 * losses of 3 iterations must match keep-all's within 1e-4 relative (host and GPU AdamW
 * differ in the last bits: the device code contracts to FMA). Prints "1..0 # SKIP" without a
 * GPU of compute capability 9.0. Run by `make check` (it needs MEMSIM_DATADIR for the
 * machine profile, which make check sets). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planners/lower.h"
#include "planners/memferry/lower_dha.h"
#include "planners/memferry/lower_dha_model.h"
#include "planners/policy.h"
#include "runtime/model_rt.h"
#include "runtime/model_rt_ops.h"
#include "runtime/model_rt_walk.h"
#include "runtime/rt_backend.h"
#include "runtime/rt_exec.h"
#include "tests/tap.h"
#include "traces/gen.h"
#include "traces/machine.h"
#include "traces/models.h"

#define ITERS 3


typedef struct outcome {
    int ok;
    float loss[ITERS];
    uint64_t host_operands, host_steps, host_inits;
} outcome;

static int no_split; /* run without the executor's compute_split hook */

static outcome run_plan(rt_dev_ops *dev, const trace_t *t, const machine_t *m, plan_t *plan,
                        const char *what)
{
    outcome oc;
    memset(&oc, 0, sizeof oc);
    ms_error err;
    schedule_t *s = NULL;
    mrt_ops *ops = NULL;
    rt_backend *be = NULL;
    ms_status ms = plan ? lower_schedule(t, plan, m, NULL, &s, &err) : MS_ERR_INVALID;
    if (ms != MS_OK) {
        TAP_OK(0, "%s: lowered: %s", what, plan ? err.msg : "no plan");
        return oc;
    }
    rt_status st = mrt_ops_new(t, 1234, &ops, &err);
    if (st == RT_OK) st = mrt_ops_set_plan(ops, plan, &err);
    if (st == RT_OK) st = rt_backend_new(NULL, &be, &err);
    rt_exec_result r;
    memset(&r, 0, sizeof r);
    if (st == RT_OK) {
        rt_exec_opts o;
        rt_exec_opts_default(&o);
        o.trace = t;
        mrt_ops_exec_hooks(ops, &o);
        o.plan = plan;
        o.max_ahead = 8;
        if (no_split) o.compute_split = NULL;
        st = rt_exec_run(s, &o, dev, rt_backend_mb(be), &r, &err);
        oc.ok = st == RT_OK && r.outcome == RTX_OK;
        if (oc.ok) oc.ok = mrt_ops_losses(ops, oc.loss, ITERS, &err) == RT_OK;
        oc.host_operands = r.host_operands;
        oc.host_steps = r.host_steps;
        oc.host_inits = r.host_inits;
    }
    if (no_split)
        TAP_OK(!oc.ok && strstr(r.failure, "split"), "%s: stopped: %s", what,
               r.failure[0] ? r.failure : "(no message)");
    else
        TAP_OK(oc.ok, "%s: %zu actions ran with real kernels (%llu operands in pinned host "
               "memory, %llu host AdamW steps): %s", what, sched_count(s),
               (unsigned long long)oc.host_operands, (unsigned long long)oc.host_steps,
               oc.ok ? "ok" : (r.failure[0] ? r.failure : err.msg));
    if (st == RT_OK) rt_exec_result_release(&r);
    TAP_OK(!be || rt_backend_outstanding(be) == 0, "%s: every device block given back", what);
    rt_backend_free(be);
    mrt_ops_free(ops);
    sched_free(s);
    return oc;
}

/* A shadow-model plan by hand: units -1 (embedding), 0, 1 (layers), 2 (head). */
static plan_t *mixed_plan(const char *grad_write)
{
    plan_t *p = plan_new("manual", "caching");
    if (!p) return NULL;
    if (plan_set_lowering(p, "dha") || plan_set_knob(p, "host_params", "1") ||
        plan_set_knob(p, "grad_write", grad_write) ||
        plan_set_layer(p, -1, PM_DHA, 0) || plan_set_layer(p, 0, PM_DFGB, 1) ||
        plan_set_layer(p, 1, PM_GFGB, 0) || plan_set_layer(p, 2, PM_DHA, 1)) {
        plan_free(p);
        return NULL;
    }
    plan_sort(p);
    return p;
}

static trace_t *gen(const machine_profile *mp, int offload)
{
    gen_config c;
    gen_config_default(&c);
    trace_t *t = NULL;
    ms_error err;
    ms_status ms = model_lookup("dims:2,128,2,512,512", &c.model, &err);
    c.seq = 128;
    c.micro_batch = 2;     /* T = 256 token rows */
    c.iterations = ITERS;
    c.grad_bytes = 4;
    c.save_small = 1;
    c.offload = offload;
    if (ms == MS_OK) ms = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(ms == MS_OK, "generated trace dims:2,128,2,512,512, 128 x 2 tokens, %d iterations%s "
           "%s", ITERS, offload ? ", offload" : "", ms == MS_OK ? "" : err.msg);
    return ms == MS_OK ? t : NULL;
}

static void compare(const outcome *keep, const outcome *mo, const char *what, int dha)
{
    if (!keep->ok || !mo->ok) return;
    double worst = 0;
    for (int i = 0; i < ITERS; i++) {
        double d = fabs((double)mo->loss[i] - keep->loss[i]) / fabs((double)keep->loss[i]);
        if (d > worst || isnan(d)) worst = isnan(d) ? 1e30 : d;
    }
    int bitwise = !memcmp(mo->loss, keep->loss, sizeof mo->loss);
    TAP_NOTE("%s losses %.7f %.7f %.7f (%s; iteration 0 %s)", what, mo->loss[0], mo->loss[1],
             mo->loss[2], bitwise ? "bitwise equal to keep-all" : "not bitwise equal",
             mo->loss[0] == keep->loss[0] ? "bitwise equal" : "differs");
    TAP_OK(mo->host_steps == 4 * ITERS && mo->host_inits > 0 && (!dha || mo->host_operands > 0),
           "%s: 4 host AdamW steps per iteration (%llu), host homes initialized (%llu)%s",
           what, (unsigned long long)mo->host_steps, (unsigned long long)mo->host_inits,
           dha ? ", kernels read or wrote host memory" : "");
    TAP_OK(worst <= 1e-4, "%s: the 3 losses match keep-all's within 1e-4 relative (worst %.3g%s)",
           what, worst, bitwise ? ", bitwise" : "");
}

int main(void)
{
    int n = 0;
    struct cudaDeviceProp p;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) TAP_SKIP_ALL("no GPU");
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess || p.major < 9)
        TAP_SKIP_ALL("the kernels are built for compute capability 9.0");
    TAP_NOTE("device %s", p.name);
    ms_error err;
    machine_profile *mp = NULL;
    if (machine_load_named("h200-sxm", &mp, &err) != MS_OK) {
        TAP_OK(0, "machine profile h200-sxm (set MEMSIM_DATADIR): %s", err.msg);
        return tap_done();
    }
    rt_dev_ops *dev = NULL;
    if (rt_cuda_dev_new(0, &dev, &err) != RT_OK) {
        TAP_OK(0, "CUDA device: %s", err.msg);
        machine_profile_free(mp);
        return tap_done();
    }
    trace_t *tp = gen(mp, 0), *to = gen(mp, 1);
    if (tp && to) {
        plan_t *kp = NULL;
        if (pol_plan("keep-all", tp, &mp->m, NULL, &kp, &err) != MS_OK) kp = NULL;
        outcome keep = run_plan(dev, tp, &mp->m, kp, "keep-all");
        plan_free(kp);
        if (keep.ok)
            TAP_NOTE("keep-all losses %.7f %.7f %.7f", keep.loss[0], keep.loss[1], keep.loss[2]);

        plan_t *pl = NULL;
        if (pol_plan("memferry", to, &mp->m, NULL, &pl, &err) != MS_OK) {
            TAP_NOTE("memferry plan: %s", err.msg);
            pl = NULL;
        }
        outcome o1 = run_plan(dev, to, &mp->m, pl, "memferry");
        plan_free(pl);
        compare(&keep, &o1, "memferry", 1);

        pl = mixed_plan("fused");
        outcome o2 = run_plan(dev, to, &mp->m, pl, "dha/dfgb/gfgb/dha, grad_write fused");
        plan_free(pl);
        compare(&keep, &o2, "dha/dfgb/gfgb/dha, grad_write fused", 1);

        pl = mixed_plan("accumulate");
        outcome o3 = run_plan(dev, to, &mp->m, pl, "dha/dfgb/gfgb/dha, grad_write accumulate");
        plan_free(pl);
        compare(&keep, &o3, "dha/dfgb/gfgb/dha, grad_write accumulate", 1);

        pol_knob kn = {"realloc", "0"};
        pol_opts po;
        pol_opts_default(&po);
        po.knobs = &kn;
        po.n_knobs = 1;
        pl = NULL;
        if (pol_plan("zero-offload", to, &mp->m, &po, &pl, &err) != MS_OK) {
            TAP_NOTE("zero-offload plan: %s", err.msg);
            pl = NULL;
        }
        outcome o4 = run_plan(dev, to, &mp->m, pl, "zero-offload realloc=0");
        plan_free(pl);
        compare(&keep, &o4, "zero-offload realloc=0", 0);

        /* GO-MemFerry with a reserve: module-level host gradients, buffers split between
         * the GPU (a prefix of the split layout) and their host homes. */
        static const char *const reserve[] = {"0.3", "0.5"};
        for (int k = 0; k < 2; k++) {
            pol_knob rk = {"reserve", reserve[k]};
            po.knobs = &rk;
            pl = NULL;
            if (pol_plan("go-memferry", to, &mp->m, &po, &pl, &err) != MS_OK) {
                TAP_NOTE("go-memferry plan: %s", err.msg);
                pl = NULL;
            }
            char what[64];
            snprintf(what, sizeof what, "go-memferry reserve=%s", reserve[k]);
            TAP_OK(pl && lower_dha_module_grads(pl), "%s: the plan splits gradient buffers by "
                   "module (%s)", what, pl && lower_dha_module_grads(pl) ? lower_dha_module_grads(pl) : "none");
            outcome o5 = run_plan(dev, to, &mp->m, pl, what);
            compare(&keep, &o5, what, 1);
            if (k == 1) { /* the executor refuses split outputs without the hook */
                no_split = 1;
                run_plan(dev, to, &mp->m, pl, "go-memferry reserve=0.5 without the "
                         "executor's compute_split hook");
                no_split = 0;
            }
            plan_free(pl);
        }
    }
    trace_free(tp);
    trace_free(to);
    rt_cuda_dev_free(dev);
    machine_profile_free(mp);
    return tap_done();
}

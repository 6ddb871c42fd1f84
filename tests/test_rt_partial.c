/* test_rt_partial — swaps and MEMO's token-wise partial replays with the real kernels on a
 * GPU: a small generated GPT run through the executor (compute, offload and prefetch streams)
 * under keep-all, under full-swap (every skeletal activation offloaded in the forward and
 * prefetched on the H2D stream for the backward: losses bitwise equal to keep-all's), and
 * under memo-style plans whose skeletal tensors are swapped with alpha 0.5, 0.75
 * and 0.875 through rounding buffers (the layer input, attention output and log-sum-exp
 * whole), so each layer's backward first replays ln1, qkv, proj, add1, ln2, fc1, GeLU, fc2,
 * add2 on the missing token rows. The losses of 3 iterations must match keep-all's. Every run
 * checksums its swapped bytes (verify_swaps): no prefetch may differ from its offload, and
 * the swap plans must verify some; the checksum kernel is first compared with rt_checksum on
 * aligned and unaligned pieces. Prints
 * "1..0 # SKIP" without a GPU of compute capability 9.0. Run by `make check` (it needs
 * MEMSIM_DATADIR for the machine profile, which make check sets). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planners/lower.h"
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


/* memo's plan shape at a fixed alpha: every skeletal activation of a layer swapped, the
 * layer input and attention's outputs whole, the rest with alpha; rounding buffers, fresh
 * ids, chain replays (the knobs memo's plans carry). */
static plan_t *memo_plan(const trace_t *t, double alpha)
{
    plan_t *p = plan_new("memo", "caching");
    if (!p) return NULL;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC || r->u.alloc.cls != TC_ACT_SKEL || r->u.alloc.layer < 0)
            continue;
        const char *n = r->u.alloc.name;
        int whole = strstr(n, ".input") || strstr(n, ".attn_out") || strstr(n, "attn_lse");
        if (plan_set_tensor(p, r->u.alloc.id, PD_SWAP, whole ? 1.0 : alpha) != MS_OK) {
            plan_free(p);
            return NULL;
        }
    }
    if (plan_set_knob(p, "rounding_buffers", "1") || plan_set_knob(p, "memory_plan", "1") ||
        plan_set_knob(p, "tokenwise", "chain")) {
        plan_free(p);
        return NULL;
    }
    plan_sort(p);
    return p;
}

typedef struct outcome {
    int ok;
    float loss[ITERS];
    size_t partial_actions;
    uint64_t h2d_bytes;
    uint64_t verified, mismatches, unpaired, sums;
} outcome;

static outcome run_plan(rt_dev_ops *dev, const trace_t *t, const machine_t *m, plan_t *plan,
                        const char *what)
{
    outcome oc;
    memset(&oc, 0, sizeof oc);
    ms_error err;
    schedule_t *s = NULL;
    lower_rb_map *rbm = NULL;
    mrt_ops *ops = NULL;
    rt_backend *be = NULL;
    ms_status ms = plan ? lower_schedule(t, plan, m, NULL, &s, &err) : MS_ERR_INVALID;
    if (ms == MS_OK) ms = lower_rb_map_new(t, plan, &rbm, &err);
    if (ms != MS_OK) {
        TAP_OK(0, "%s: lowered: %s", what, plan ? err.msg : "no plan");
        return oc;
    }
    for (size_t i = 0; i < sched_count(s); i++)
        oc.partial_actions += sched_get(s, i)->replay_frac > 0;
    rt_status st = mrt_ops_new(t, 1234, &ops, &err);
    if (st == RT_OK) st = rt_backend_new(NULL, &be, &err);
    rt_exec_result r;
    memset(&r, 0, sizeof r);
    if (st == RT_OK) {
        rt_exec_opts o;
        rt_exec_opts_default(&o);
        o.trace = t;
        mrt_ops_exec_hooks(ops, &o);
        o.plan = plan;
        o.rb_map = rbm;
        o.max_ahead = 8;
        o.verify_swaps = 1;
        st = rt_exec_run(s, &o, dev, rt_backend_mb(be), &r, &err);
        oc.verified = r.swap_verified;
        oc.mismatches = r.swap_mismatches;
        oc.unpaired = r.swap_unpaired;
        oc.sums = r.swap_sums;
        oc.ok = st == RT_OK && r.outcome == RTX_OK;
        if (oc.ok) oc.ok = mrt_ops_losses(ops, oc.loss, ITERS, &err) == RT_OK;
        for (size_t k = 0; k < r.n_win; k++) oc.h2d_bytes += r.win[k].h2d_bytes;
    }
    TAP_OK(oc.ok, "%s: %zu actions (%zu token-wise partial replays) ran with real kernels on "
           "3 streams: %s", what, sched_count(s), oc.partial_actions,
           oc.ok ? "ok" : (r.failure[0] ? r.failure : err.msg));
    if (st == RT_OK) rt_exec_result_release(&r);
    TAP_OK(!be || rt_backend_outstanding(be) == 0, "%s: every device block given back", what);
    TAP_NOTE("%s: swap checks: %llu copies checksummed, %llu prefetches verified, %llu "
             "mismatches, %llu unpaired", what, (unsigned long long)oc.sums,
             (unsigned long long)oc.verified, (unsigned long long)oc.mismatches,
             (unsigned long long)oc.unpaired);
    rt_backend_free(be);
    mrt_ops_free(ops);
    lower_rb_map_free(rbm);
    sched_free(s);
    return oc;
}

/* The device's checksum kernel against rt_checksum: a whole aligned buffer, an unaligned
 * piece at an unaligned position, and two pieces of one stream adding up. */
static void check_sum_kernel(rt_dev_ops *dev)
{
    ms_error err;
    ms_error_clear(&err);
    enum { N = (1 << 20) + 13 };
    unsigned char *h = malloc(N);
    void *d = NULL, *s = NULL;
    uint64_t got[3] = {0, 0, 0};
    int ok = h && cudaMalloc(&d, N) == cudaSuccess && dev->stream_new(dev->ctx, &s, &err) == RT_OK;
    uint64_t x = 0x243f6a8885a308d3ULL;
    for (size_t k = 0; ok && k < N; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[k] = (unsigned char)(x >> 24);
    }
    uint64_t base = (uint64_t)(uintptr_t)d;
    ok = ok && cudaMemcpy(d, h, N, cudaMemcpyHostToDevice) == cudaSuccess &&
         dev->sum_begin(dev->ctx, 3, &err) == RT_OK;
    ok = ok && dev->sum_add(dev->ctx, s, 0, base, N, 0, &err) == RT_OK &&
         dev->sum_add(dev->ctx, s, 1, base + 3, 100003, 5, &err) == RT_OK &&
         dev->sum_add(dev->ctx, s, 2, base, 4096, 0, &err) == RT_OK &&
         dev->sum_add(dev->ctx, s, 2, base + 4096, N - 4096, 4096, &err) == RT_OK &&
         cudaStreamSynchronize((cudaStream_t)s) == cudaSuccess &&
         dev->sum_read(dev->ctx, got, 3, &err) == RT_OK;
    uint64_t want0 = ok ? rt_checksum(h, N, 0) : 0, want1 = ok ? rt_checksum(h + 3, 100003, 5) : 0;
    TAP_OK(ok && got[0] == want0 && got[1] == want1 && got[2] == want0,
           "checksum kernel = rt_checksum: whole 0x%016llx (0x%016llx), unaligned 0x%016llx "
           "(0x%016llx), two pieces 0x%016llx", (unsigned long long)got[0],
           (unsigned long long)want0, (unsigned long long)got[1], (unsigned long long)want1,
           (unsigned long long)got[2]);
    if (dev->sum_end) dev->sum_end(dev->ctx);
    if (s) dev->stream_free(dev->ctx, s);
    if (d) cudaFree(d);
    free(h);
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
    check_sum_kernel(dev);
    gen_config c;
    gen_config_default(&c);
    trace_t *t = NULL;
    ms_status ms = model_lookup("dims:2,128,2,512,512", &c.model, &err);
    c.seq = 128;
    c.micro_batch = 2;     /* T = 256 token rows */
    c.iterations = ITERS;
    c.grad_bytes = 4;
    c.save_small = 1;
    if (ms == MS_OK) ms = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(ms == MS_OK, "generated trace dims:2,128,2,512,512, 128 x 2 tokens, %d iterations %s",
           ITERS, ms == MS_OK ? "" : err.msg);
    if (ms == MS_OK) {
        plan_t *kp = NULL;
        if (pol_plan("keep-all", t, &mp->m, NULL, &kp, &err) != MS_OK) kp = NULL;
        outcome keep = run_plan(dev, t, &mp->m, kp, "keep-all");
        plan_free(kp);
        if (keep.ok)
            TAP_NOTE("keep-all losses %.6f %.6f %.6f", keep.loss[0], keep.loss[1], keep.loss[2]);
        /* full-swap: the same kernels on the same bytes, only moved through pinned memory */
        plan_t *fp = NULL;
        if (pol_plan("full-swap", t, &mp->m, NULL, &fp, &err) != MS_OK) fp = NULL;
        outcome fs = run_plan(dev, t, &mp->m, fp, "full-swap");
        plan_free(fp);
        if (keep.ok && fs.ok) {
            TAP_NOTE("full-swap losses %.6f %.6f %.6f", fs.loss[0], fs.loss[1], fs.loss[2]);
            TAP_OK(!memcmp(fs.loss, keep.loss, sizeof fs.loss), "full-swap: the 3 losses are "
                   "bitwise equal to keep-all's");
            TAP_OK(fs.h2d_bytes > 0 && fs.verified > 0 && fs.mismatches == 0,
                   "full-swap: %llu bytes prefetched, %llu prefetches checksummed equal to "
                   "their offloads, %llu differ", (unsigned long long)fs.h2d_bytes,
                   (unsigned long long)fs.verified, (unsigned long long)fs.mismatches);
        }
        static const double alphas[3] = { 0.5, 0.75, 0.875 };
        for (int a = 0; a < 3; a++) {
            char what[64];
            snprintf(what, sizeof what, "memo alpha %g", alphas[a]);
            plan_t *mpl = memo_plan(t, alphas[a]);
            outcome mo = run_plan(dev, t, &mp->m, mpl, what);
            plan_free(mpl);
            if (!keep.ok || !mo.ok) continue;
            double worst = 0;
            for (int i = 0; i < ITERS; i++) {
                double d = fabs((double)mo.loss[i] - keep.loss[i]) / fabs((double)keep.loss[i]);
                if (d > worst || isnan(d)) worst = isnan(d) ? 1e30 : d;
            }
            int bitwise = !memcmp(mo.loss, keep.loss, sizeof mo.loss);
            TAP_NOTE("%s losses %.6f %.6f %.6f (%s)", what, mo.loss[0], mo.loss[1], mo.loss[2],
                     bitwise ? "bitwise equal to keep-all" : "not bitwise equal");
            TAP_OK(mo.verified > 0 && mo.mismatches == 0, "%s: %llu prefetches checksummed "
                   "equal to their offloads, %llu differ", what,
                   (unsigned long long)mo.verified, (unsigned long long)mo.mismatches);
            TAP_OK(mo.partial_actions > 0 && mo.h2d_bytes > 0,
                   "%s: the schedule swaps (%llu bytes prefetched) and replays %zu ops on the "
                   "missing rows", what, (unsigned long long)mo.h2d_bytes, mo.partial_actions);
            TAP_OK(worst <= 1e-4, "%s: the 3 losses match keep-all's within 1e-4 relative "
                   "(worst %.3g%s)", what, worst, bitwise ? ", bitwise" : "");
        }
    }
    trace_free(t);
    rt_cuda_dev_free(dev);
    machine_profile_free(mp);
    return tap_done();
}

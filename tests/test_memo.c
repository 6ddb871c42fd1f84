/* test_memo.c — TAP tests of the MEMO policies (planners/memo/policy_memo.c) and of the lowering
 * they rely on (planners/lower.c): MEMO's LP against hand-computed alphas (each constraint
 * binding in turn, clamping, infeasibility, bad input), the LP's inputs from a generated
 * trace, the memo plan's decisions and knobs, the rounding-buffer schedule (blocks, waits,
 * offload and prefetch placement, token-wise recomputation, the last two layers kept), the
 * ".ovl" overlap of the CP ring with attention, the per-GPU node view, the host-buffer sizing
 * of MEMO's executor under its three readings (exact, one power-of-two buffer per layer, one
 * per tensor slice), the live bytes of the two loss
 * variants, and determinism. */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/lower.h"
#include "planners/policy.h"
#include "planners/memo/policy_memo.h"
#include "planners/schedule.h"
#include "tests/tap.h"
#include "traces/gen.h"
#include "traces/jobview.h"
#include "traces/models.h"
#include "base/u64map.h"

#define NL 6 /* layers of the test model */

static void test_machine(machine_t *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "test-a800");
    m->gpu_hbm_bytes = 80ULL << 30;
    m->gpu_reserved_bytes = 1ULL << 30;
    m->gpu_peak_bf16_flops = 312e12;
    m->gpu_peak_fp32_flops = 19.5e12;
    m->gpu_hbm_Bps = 2039e9;
    m->gpu_gemm_eff = 0.7;
    m->gpu_attn_eff = 0.6;
    m->gpu_mem_eff = 0.8;
    m->gpu_kernel_launch_us = 5;
    m->link_h2d_Bps = m->link_d2h_Bps = 20e9;
    m->link_duplex_Bps = 36e9;
    m->dha_read_Bps = m->dha_write_Bps = 18e9;
    m->host_mem_bytes = 64ULL << 30;
    m->node_gpus = 8;
    m->node_gpus_per_switch = 1;
    m->nvlink_Bps = 200e9;
    m->nvlink_lat_us = 3;
    m->net_Bps = 25e9;
    m->net_lat_us = 5;
    m->cuda_malloc_base_us = m->cuda_free_base_us = 37;
}

static trace_t *small_trace(const machine_t *m, int iters, gen_config *out)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup("dims:6,256,4,1024,1000", &c.model, &err) != MS_OK) return NULL;
    c.seq = 4096;
    c.tp = 2;
    c.cp = 2;
    c.iterations = iters;
    trace_t *t = NULL;
    if (gen_trace(&c, m, &t, &err) != MS_OK) {
        TAP_NOTE("gen_trace: %s", err.msg);
        return NULL;
    }
    if (out) *out = c;
    return t;
}

/* ---- the LP ---- */

static memo_lp_in lp_base(void)
{
    memo_lp_in in = { 1e9, 1e9, 8e9, 10e9, 0.6, 4, 1e15 };
    return in;
}

static void test_lp(void)
{
    memo_lp_in in = lp_base();
    memo_lp_out o;
    ms_error err;
    /* time: (2 + 8a)/10 <= 0.6  =>  a <= 0.5 */
    ms_status st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_OK && fabs(o.alpha - 0.5) < 1e-9 && o.binding == MEMO_BOUND_TIME &&
           fabs(o.alpha_time - 0.5) < 1e-9, "LP: time constraint binds, alpha 0.5 (got %g, %s)",
           o.alpha, memo_bound_name(o.binding));
    /* host: n = 6 -> 4 * (2 + 8a) GB <= 24 GB  =>  a <= 0.5 */
    in.t_layer_s = 100;
    in.n_layers = 6;
    in.host_bytes = 24e9;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_OK && fabs(o.alpha - 0.5) < 1e-9 && o.binding == MEMO_BOUND_HOST &&
           o.alpha_time > 1, "LP: host constraint binds, alpha 0.5 (got %g, %s)", o.alpha,
           memo_bound_name(o.binding));
    /* host tighter than time: 4*(2+8a) <= 12 -> a = 0.125; time allows 0.5 */
    in.t_layer_s = 0.6;
    in.host_bytes = 12e9;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_OK && fabs(o.alpha - 0.125) < 1e-9 && o.binding == MEMO_BOUND_HOST &&
           fabs(o.alpha_time - 0.5) < 1e-9, "LP: the tighter of both constraints wins (%g)",
           o.alpha);
    in = lp_base();
    in.t_layer_s = 1000;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_OK && o.alpha == 1.0 && o.binding == MEMO_BOUND_NONE && o.alpha_time > 1,
           "LP: alpha clamped to 1 when nothing binds (alpha_time %g)", o.alpha_time);
    in.t_layer_s = 0.2; /* exactly the input + attention output */
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_OK && fabs(o.alpha) < 1e-9 && !o.infeasible, "LP: alpha 0 at the edge");
    in.t_layer_s = 0.1;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_ERR_INVALID && o.infeasible && o.binding == MEMO_BOUND_TIME &&
           strstr(err.msg, "infeasible") && strstr(err.msg, "longer than one layer"),
           "LP: infeasible (time) is a clear error: %s", err.msg);
    in = lp_base();
    in.t_layer_s = 100;
    in.n_layers = 6;
    in.host_bytes = 4e9;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_ERR_INVALID && o.infeasible && o.binding == MEMO_BOUND_HOST &&
           strstr(err.msg, "host memory"), "LP: infeasible (host) is a clear error: %s",
           err.msg);
    in = lp_base();
    in.n_layers = 2; /* n - 2 = 0: no host constraint */
    in.host_bytes = 1;
    in.t_layer_s = 1000;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_OK && o.alpha == 1.0 && isinf(o.alpha_host),
           "LP: with 2 layers nothing is offloaded long, the host constraint is void");
    in = lp_base();
    in.link_Bps = 0;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "link bandwidth"), "LP: bad input: %s",
           err.msg);
    in = lp_base();
    in.n_layers = 0;
    in.s_others_bytes = NAN;
    st = memo_alpha_lp(&in, &o, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "S_others"), "LP: NaN input: %s", err.msg);
    in = lp_base();
    st = memo_alpha_lp(&in, &o, &err);
#ifdef HAVE_LPSOLVE
    TAP_OK(st == MS_OK && o.used_lpsolve == 1, "LP solved by lp_solve");
#else
    TAP_OK(st == MS_OK && o.used_lpsolve == 0, "LP solved in closed form (no lp_solve)");
#endif
}

/* ---- the LP's inputs, the node view ---- */

static void test_layer_info(const machine_t *m)
{
    gen_config c;
    trace_t *t = small_trace(m, 1, &c);
    memo_layer_info li;
    ms_error err;
    ms_status st = t ? memo_layer_info_get(t, m, &li, &err) : MS_ERR_INVALID;
    uint64_t skel = gen_layer_skel_bytes(&c);
    TAP_OK(st == MS_OK && li.n_layers == NL && li.s_input_bytes == li.s_attn_bytes &&
           li.s_input_bytes + li.s_attn_bytes + li.s_others_bytes == skel &&
           li.s_others_bytes == 14 * li.s_input_bytes,
           "layer info: %d layers, input %" PRIu64 " = attention output, others 14x, sum = "
           "16bsh/tp %" PRIu64, li.n_layers, li.s_input_bytes, skel);
    /* T_layer: layer 0's forward ops, the ring hidden under its attention kernel */
    double us = 0, ring = 0;
    for (size_t i = 0; t && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_OP || r->u.op.layer != 0 || r->u.op.phase != TP_FWD) continue;
        const char *nm = r->u.op.name;
        size_t n = strlen(nm);
        if (n > 4 && !strcmp(nm + n - 4, ".ovl")) ring = r->u.op.dur_us;
        else if (r->u.op.kind == TK_ATTN) us += fmax(r->u.op.dur_us, ring);
        else us += r->u.op.dur_us;
    }
    TAP_OK(st == MS_OK && ring > 0 && fabs(li.t_layer_s - us * 1e-6) < 1e-12,
           "layer info: T_layer %.6f s = the layer's forward op time with the ring overlapped",
           li.t_layer_s);
    /* layers that differ */
    trace_t *t2 = trace_new();
    for (size_t i = 0; t && t2 && i < trace_count(t); i++) {
        trace_rec r = *trace_get(t, i);
        if (r.type == TR_ALLOC && r.u.alloc.layer == 3 && strstr(r.u.alloc.name, "fc1_out"))
            r.u.alloc.bytes *= 2;
        trace_append(t2, &r);
    }
    st = t2 ? memo_layer_info_get(t2, m, &li, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "layers differ") && strstr(err.msg, "layer 3"),
           "layers that differ: %s", err.msg);
    trace_free(t2);
    machine_t v, m2 = *m;
    m2.node_gpus_per_switch = 2;
    machine_gpu_view(&m2, 8, &v);
    TAP_OK(v.link_d2h_Bps == m2.link_d2h_Bps / 2 && v.link_duplex_Bps == m2.link_duplex_Bps / 2 &&
           v.host_mem_bytes == m2.host_mem_bytes, "node view: two GPUs per switch halve the link");
    machine_gpu_view(&m2, 1, &v);
    TAP_OK(v.link_d2h_Bps == m2.link_d2h_Bps, "node view: a lone GPU keeps its switch's link");
    jobview jv;
    if (t) jobview_of(t, m, &jv);
    TAP_OK(t && jv.node_ranks == (m->node_gpus >= 4 ? 4 : (int)m->node_gpus),
           "node ranks: tp 2 x cp 2 = 4 (at most node.gpus)");
    trace_free(t);
}

/* ---- plans ---- */

static const char *knob(const plan_t *p, const char *k)
{
    const char *v = plan_get_knob(p, k);
    return v ? v : "";
}

/* Layer 0's skeletal activations other than its input, summed from the trace's allocations
 * up to the first backward mark (the first forward pass). */
static uint64_t fr_layer_recomputed_bytes(const trace_t *t)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE && r->u.mark.value == TP_BWD) break;
        if (r->type != TR_ALLOC) continue;
        const trace_tensor *x = &r->u.alloc;
        size_t L = strlen(x->name);
        if (x->cls == TC_ACT_SKEL && x->layer == 0 &&
            !(L >= 6 && !strcmp(x->name + L - 6, ".input")))
            sum += x->bytes;
    }
    return sum;
}

/* pol_plan with one knob. */
static ms_status plan_knob1(const char *policy, const trace_t *t, const machine_t *m,
                            const char *key, const char *value, plan_t **p, ms_error *err)
{
    pol_knob k = { key, value };
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = &k;
    o.n_knobs = 1;
    return pol_plan(policy, t, m, &o, p, err);
}

static void test_memo_plan(const machine_t *m)
{
    trace_t *t = small_trace(m, 1, NULL);
    plan_t *p = NULL;
    ms_error err;
    ms_status st = t ? pol_plan("memo", t, m, NULL, &p, &err) : MS_ERR_INVALID;
    if (st != MS_OK) TAP_NOTE("memo: %s", err.msg);
    double a = p ? atof(knob(p, "alpha_used")) : -1;
    TAP_OK(st == MS_OK && !strcmp(p->allocator, "static") && p->n_offsets > 0 &&
           p->arena_bytes > 0 && !strcmp(knob(p, "rounding_buffers"), "1") &&
           !strcmp(knob(p, "memory_plan"), "1"),
           "memo plan: static arena with %zu offsets, rounding buffers, memory plan",
           p ? p->n_offsets : 0);
    TAP_OK(a > 0 && a < 1 && fabs(a * 8 - floor(a * 8 + 0.5)) < 1e-9 &&
           atof(knob(p, "alpha_lp")) >= a, "memo plan: alpha %g on the 1/8 grid, <= LP's %s", a,
           knob(p, "alpha_lp"));
    pol_skel *sk = NULL;
    size_t n = 0;
    int ok = p && pol_skeletal(t, &sk, &n, &err) == MS_OK && n > 0;
    for (size_t i = 0; ok && i < n; i++) {
        double al;
        plan_decision d = plan_decision_for(p, sk[i].id, &al);
        if (sk[i].layer >= NL - 2) ok = d == PD_KEEP;
        else if (sk[i].is_input || sk[i].is_attn_out) ok = d == PD_SWAP && al == 1.0;
        else ok = d == PD_SWAP && fabs(al - a) < 1e-12;
    }
    TAP_OK(ok, "memo decisions: last two layers kept; input and attention output swapped whole; "
               "the rest swapped at alpha");
    free(sk);
    plan_free(p);
    p = NULL;
    pol_opts o;
    pol_opts_default(&o);
    o.alpha = 0.3;
    st = pol_plan("memo", t, m, &o, &p, &err);
    TAP_OK(st == MS_OK && fabs(atof(knob(p, "alpha_used")) - 0.3) < 1e-12,
           "memo: --alpha 0.3 overrides the LP (no grid)");
    plan_free(p);
    p = NULL;
    o.alpha = 1.5;
    st = pol_plan("memo", t, m, &o, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && !p && strstr(err.msg, "not in [0,1]"),
           "alpha outside [0,1]: %s", err.msg);
    pol_knob kn[] = { { "alpha_step", "2" } };
    pol_opts_default(&o);
    o.knobs = kn;
    o.n_knobs = 1;
    st = pol_plan("memo", t, m, &o, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "alpha_step"), "bad knob: %s", err.msg);
    st = pol_plan("memo", t, NULL, NULL, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "machine"), "memo without a machine: %s",
           err.msg);
    /* an infeasible LP: a link far too slow for even the inputs */
    machine_t slow = *m;
    slow.link_d2h_Bps = slow.link_h2d_Bps = 1e3;
    pol_knob strict[] = { { "lp_strict", "1" } };
    o.knobs = strict;
    st = pol_plan("memo", t, &slow, &o, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "infeasible"), "lp_strict: %s", err.msg);
    st = pol_plan("memo", t, &slow, NULL, &p, &err);
    TAP_OK(st == MS_OK && !strcmp(knob(p, "alpha_lp_bound"), "infeasible-time") &&
           atof(knob(p, "alpha_used")) == 0, "infeasible LP: alpha 0 and the plan says why");
    plan_free(p);
    p = NULL;
    st = pol_plan("full-swap+plan", t, m, NULL, &p, &err);
    TAP_OK(st == MS_OK && atof(knob(p, "alpha_used")) == 1 && p->n_offsets > 0,
           "full-swap+plan: alpha 1, planned");
    plan_free(p);
    p = NULL;
    st = pol_plan("full-recompute+plan", t, m, NULL, &p, &err);
    size_t n_fr2 = st == MS_OK ? p->n_offsets : 0;
    uint64_t idle = st == MS_OK && knob(p, "idle_buffer_bytes") ?
                    strtoull(knob(p, "idle_buffer_bytes"), NULL, 10) : 0;
    uint64_t load2 = st == MS_OK ? strtoull(knob(p, "plan_load_bytes"), NULL, 10) : 0;
    TAP_OK(st == MS_OK && !plan_get_knob(p, "rounding_buffers") && p->n_offsets > 0 &&
           !strcmp(p->allocator, "static"), "full-recompute+plan: no rounding buffers, planned");
    TAP_OK(idle == fr_layer_recomputed_bytes(t),
           "full-recompute+plan holds MEMO's idle rounding buffer: %" PRIu64 " bytes, a "
           "layer's recomputed skeletal bytes", idle);
    schedule_t *s = NULL;
    lower_report rep;
    lower_opts lo;
    lower_opts_default(&lo);
    lo.report = &rep;
    if (st == MS_OK) st = lower_schedule(t, p, m, &lo, &s, &err);
    size_t na = s ? sched_count(s) : 0;
    const sched_action *a0 = na ? sched_get(s, 0) : NULL, *az = na ? sched_get(s, na - 1) : NULL;
    TAP_OK(a0 && a0->kind == SA_ALLOC && a0->tensor == lower_id_idle_buffer() &&
           a0->bytes == idle && a0->stream == SS_COMPUTE && az->kind == SA_FREE &&
           az->tensor == lower_id_idle_buffer() && rep.idle_bytes == idle,
           "the idle buffer is the schedule's first allocation and its last free (reported)");
    sched_free(s);
    s = NULL;
    if (p && plan_set_knob(p, "idle_buffer_bytes", "-5") == MS_OK)
        st = lower_schedule(t, p, m, NULL, &s, &err);
    TAP_OK(st == MS_ERR_INVALID && !s && strstr(err.msg, "idle_buffer_bytes=-5"),
           "a bad idle_buffer_bytes: %s", err.msg);
    plan_free(p);
    p = NULL;
    st = plan_knob1("full-recompute+plan", t, m, "fr_buffers", "1", &p, &err);
    size_t n_fr = st == MS_OK ? p->n_offsets : 0;
    TAP_OK(st == MS_OK && !plan_get_knob(p, "idle_buffer_bytes") && n_fr + 1 == n_fr2,
           "fr_buffers=1: no idle buffer, one offset fewer (%zu, %zu)", n_fr, n_fr2);
    /* a block held over the whole schedule adds its bytes to every point's live bytes */
    uint64_t load1 = st == MS_OK ? strtoull(knob(p, "plan_load_bytes"), NULL, 10) : 0;
    TAP_OK(load1 > 0 && load1 + idle == load2, "LOAD with the idle buffer: %" PRIu64 " = %"
           PRIu64 " + %" PRIu64, load2, load1, idle);
    plan_free(p);
    p = NULL;
    st = plan_knob1("memo", t, m, "fr_buffers", "1", &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "full-recompute+plan only"),
           "fr_buffers given to memo: %s", err.msg);
    st = plan_knob1("full-recompute+plan", t, m, "idle_buffer_bytes", "12345", &p, &err);
    TAP_OK(st == MS_OK && !strcmp(knob(p, "idle_buffer_bytes"), "12345"),
           "a user's idle_buffer_bytes wins over the policy's: %s",
           st == MS_OK ? knob(p, "idle_buffer_bytes") : err.msg);
    plan_free(p);
    p = NULL;
    st = plan_knob1("full-recompute", t, m, "memory_plan", "1", &p, &err);
    TAP_OK(st == MS_OK && p->n_offsets == n_fr && !strcmp(p->allocator, "static"),
           "the knob memory_plan=1 plans any policy: full-recompute gets %zu offsets, "
           "full-recompute+plan fr_buffers=1's count",
           p ? p->n_offsets : 0);
    plan_free(p);
    trace_free(t);
}

/* ---- the rounding-buffer schedule ---- */

/* The bytes of layer L's block that an offload at alpha copies (per tensor ceil of alpha *
 * bytes, the input and attention output whole), as lowering counts them. */
static uint64_t layer_offload_bytes(const trace_t *t, int layer, double alpha)
{
    pol_skel *sk = NULL;
    size_t n = 0;
    ms_error err;
    uint64_t sum = 0;
    if (pol_skeletal(t, &sk, &n, &err) != MS_OK) return 0;
    for (size_t i = 0; i < n; i++) {
        if (sk[i].pass != 0 || sk[i].layer != layer) continue;
        double a = (sk[i].is_input || sk[i].is_attn_out) ? 1.0 : alpha;
        uint64_t b = (uint64_t)ceil(a * (double)sk[i].t->bytes);
        sum += b > sk[i].t->bytes ? sk[i].t->bytes : b;
    }
    free(sk);
    return sum;
}

/* The same offload's pinned host bytes under each reading of MEMO's host buffers, computed
 * here from the trace: [0] exact in 4 KiB pages, [1] the layer's sum rounded up to a power of
 * two, [2] each tensor's slice rounded up to a power of two, summed. */
/* The next power of two at or above b (0 for 0), by hand. */
static uint64_t p2_hand(uint64_t b)
{
    uint64_t q = 1;
    while (q < b) q <<= 1;
    return b ? q : 0;
}

/* A layer's host bytes at alpha under the four readings, by hand: exact in 4 KiB pages,
 * layer_pow2, tensor_pow2, buffer_pow2 (the fp32 statistics, named *_stats or *.attn_lse,
 * apart from one buffer of the rest). */
static void layer_host_readings(const trace_t *t, int layer, double alpha, uint64_t out[4])
{
    pol_skel *sk = NULL;
    size_t n = 0;
    ms_error err;
    uint64_t sum = 0, p2 = 0, act = 0, stat_p2 = 0;
    out[0] = out[1] = out[2] = out[3] = 0;
    if (pol_skeletal(t, &sk, &n, &err) != MS_OK) return;
    for (size_t i = 0; i < n; i++) {
        if (sk[i].pass != 0 || sk[i].layer != layer) continue;
        double a = (sk[i].is_input || sk[i].is_attn_out) ? 1.0 : alpha;
        uint64_t b = (uint64_t)ceil(a * (double)sk[i].t->bytes);
        if (b > sk[i].t->bytes) b = sk[i].t->bytes;
        const char *nm = sk[i].t->name;
        size_t len = strlen(nm);
        int stat = (len >= 6 && !strcmp(nm + len - 6, "_stats")) ||
                   (len >= 9 && !strcmp(nm + len - 9, ".attn_lse"));
        sum += b;
        p2 += p2_hand(b);
        if (stat) stat_p2 += p2_hand(b);
        else act += b;
    }
    free(sk);
    out[0] = (sum + 4095) / 4096 * 4096;
    out[1] = p2_hand(sum);
    out[2] = p2;
    out[3] = p2_hand(act) + stat_p2;
}

static int find_action(const schedule_t *s, size_t from, sched_kind k, sched_stream st,
                       uint64_t tensor)
{
    for (size_t i = from; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == k && a->stream == st && a->tensor == tensor) return (int)i;
    }
    return -1;
}

static int find_mark(const schedule_t *s, trace_phase ph, int64_t layer)
{
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_MARK && a->mark == TM_LAYER && a->mark_value == layer && a->phase == ph)
            return (int)i;
    }
    return -1;
}

/* The next compute-stream action after i (skipping RECORDs when skip_record). */
static int next_compute(const schedule_t *s, int i, int skip_record)
{
    for (size_t j = (size_t)i + 1; j < sched_count(s); j++) {
        const sched_action *a = sched_get(s, j);
        if (a->stream != SS_COMPUTE || (skip_record && a->kind == SA_RECORD)) continue;
        return (int)j;
    }
    return -1;
}

static void test_rb_schedule(const machine_t *m)
{
    trace_t *t = small_trace(m, 1, NULL);
    pol_opts o;
    pol_opts_default(&o);
    o.alpha = 0.5;
    pol_knob kn[] = { { "memory_plan", "0" } };
    o.knobs = kn;
    o.n_knobs = 1;
    plan_t *p = NULL;
    ms_error err;
    schedule_t *s = NULL;
    lower_report rep;
    lower_opts lo;
    lower_opts_default(&lo);
    lo.report = &rep;
    ms_status st = t ? pol_plan("memo", t, m, &o, &p, &err) : MS_ERR_INVALID;
    if (st == MS_OK) st = lower_schedule(t, p, m, &lo, &s, &err);
    if (st != MS_OK) TAP_NOTE("lowering: %s", err.msg);
    TAP_OK(st == MS_OK && sched_validate(s, &err) == MS_OK, "rounding-buffer schedule validates");
    if (st != MS_OK) {
        plan_free(p);
        trace_free(t);
        return;
    }
    int allocs0 = 0, allocs1 = 0, d2h = 0, members = 0, ok_host = 1, rb_kind = 1;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        uint32_t pass;
        int32_t layer;
        if (a->kind == SA_ALLOC && lower_id_is_rbuf(a->tensor, &pass, &layer)) {
            allocs0 += a->tensor == lower_id_rbuf(pass, layer, 0);
            allocs1 += a->tensor == lower_id_rbuf(pass, layer, 1);
            rb_kind &= a->block == SB_RBUF;
        }
        if (a->kind == SA_COPY_D2H) {
            d2h++;
            ok_host &= lower_id_is_rbuf(a->tensor, NULL, &layer) && layer < NL - 2;
        }
        if (a->kind == SA_HOST_ALLOC) { /* default host_round=buffer_pow2 */
            uint64_t hr[4];
            layer_host_readings(t, 0, 0.5, hr);
            ok_host &= a->bytes == hr[3] && hr[3] >= layer_offload_bytes(t, 0, 0.5);
        }
        if (a->kind == SA_ALLOC) {
            const trace_tensor *x = trace_find_tensor(t, a->tensor);
            members += x && x->cls == TC_ACT_SKEL && x->layer >= 0;
        }
    }
    TAP_OK(allocs0 == NL && allocs1 == NL - 2 && rep.rb_blocks == 2 * NL - 2,
           "one block per layer and one per prefetch of the offloaded layers (%d + %d)", allocs0,
           allocs1);
    TAP_OK(d2h == NL - 2 && ok_host, "only the first n-2 layers are offloaded (%d copies), into "
           "one power-of-two host buffer per offloaded tensor slice", d2h);
    TAP_OK(members == 0, "no skeletal tensor of a layer gets a block of its own");
    TAP_OK(rb_kind, "every rounding-buffer block's ALLOC says it is a rounding buffer");
    /* layer l's block waits for the offload of layer l-2, the previous occupant */
    int waits_ok = 1;
    for (int l = 2; l < NL; l++) {
        int al = find_action(s, 0, SA_ALLOC, SS_COMPUTE, lower_id_rbuf(0, l, 0));
        int fr = find_action(s, 0, SA_FREE, SS_D2H, lower_id_rbuf(0, l - 2, 0));
        const sched_action *w = al > 0 ? sched_get(s, (size_t)al - 1) : NULL;
        const sched_action *r = fr >= 0 ? sched_get(s, (size_t)fr + 1) : NULL;
        waits_ok &= w && r && w->kind == SA_WAIT && w->stream == SS_COMPUTE &&
                    r->kind == SA_RECORD && r->stream == SS_D2H && r->event == w->event;
    }
    TAP_OK(waits_ok, "layer L's buffer block is allocated right after a WAIT for layer L-2's "
                     "offload");
    /* prefetch of layer l during layer l+1's backward; compute waits at l's backward start;
       token-wise recompute right after, without the attention kernel */
    int pf_ok = 1, rec_ok = 1, kept_ok = 1;
    for (int l = 0; l < NL - 2; l++) {
        int mk1 = find_mark(s, TP_BWD, l + 1), mk0 = find_mark(s, TP_BWD, l);
        int pa = find_action(s, 0, SA_ALLOC, SS_H2D, lower_id_rbuf(0, l, 1));
        pf_ok &= mk1 >= 0 && mk0 > mk1 && pa > mk1 && pa < mk0;
        /* after the mark: the release of layer L-1's prefetch (a compute RECORD and the H2D
           actions), then compute's WAIT, then the recomputation */
        int wi = next_compute(s, mk0, 1), ri = wi >= 0 ? next_compute(s, wi, 0) : -1;
        const sched_action *w = wi >= 0 ? sched_get(s, (size_t)wi) : NULL;
        pf_ok &= w && w->kind == SA_WAIT;
        const sched_action *r = ri >= 0 ? sched_get(s, (size_t)ri) : NULL;
        rec_ok &= r && r->kind == SA_COMPUTE && r->recompute;
        for (int i = mk0; i >= 0 && i < (int)sched_count(s); i++) {
            const sched_action *a = sched_get(s, (size_t)i);
            if (a->kind != SA_COMPUTE || !a->recompute) {
                if (a->kind == SA_COMPUTE) break;
                continue;
            }
            const trace_op *op = trace_find_op(t, (uint64_t)a->op);
            rec_ok &= op && op->kind != TK_ATTN && fabs(a->dur_us - 0.5 * op->dur_us) < 1e-9;
        }
    }
    for (int l = NL - 2; l < NL; l++) {
        int mk0 = find_mark(s, TP_BWD, l);
        for (int i = mk0; i >= 0 && i < (int)sched_count(s); i++) {
            const sched_action *a = sched_get(s, (size_t)i);
            if (a->kind == SA_MARK && i > mk0) break;
            kept_ok &= !(a->kind == SA_COMPUTE && a->recompute);
        }
        kept_ok &= find_action(s, 0, SA_ALLOC, SS_H2D, lower_id_rbuf(0, l, 1)) < 0;
    }
    TAP_OK(pf_ok, "layer L's block is prefetched during layer L+1's backward and waited for at "
                  "L's backward start");
    TAP_OK(rec_ok && rep.recompute_ops > 0, "token-wise recomputation follows the wait: half of "
           "each op's time at alpha 0.5, never the attention kernel (%" PRIu64 " ops)",
           rep.recompute_ops);
    TAP_OK(kept_ok, "the last two layers are kept: no prefetch, no recomputation");
    /* the CP ring runs under the attention kernel */
    int ring = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        const trace_op *op = a->kind == SA_COMPUTE ? trace_find_op(t, (uint64_t)a->op) : NULL;
        ring += op && op->kind == TK_COMM && strstr(op->name, ".ovl") != NULL;
    }
    schedule_t *s2 = NULL;
    lo.overlap_ovl = 0;
    lower_report rep2;
    lo.report = &rep2;
    st = lower_schedule(t, p, m, &lo, &s2, &err);
    TAP_OK(ring == 0 && rep.overlapped == 2 * NL && st == MS_OK && rep2.overlapped == 0 &&
           sched_count(s2) == sched_count(s) + (size_t)rep.overlapped,
           "CP ring exchanges merged into their attention kernels (%" PRIu64 "), or not",
           rep.overlapped);
    /* the merged attention actions say so (sched_action.ovl): every one whose op follows a
     * ".ovl" ring in the trace, none without the merge */
    int flagged = 0, flag_ok = 1, flagged2 = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind != SA_COMPUTE) continue;
        const trace_op *op = trace_find_op(t, (uint64_t)a->op);
        flagged += a->ovl;
        flag_ok &= !a->ovl || (op && op->kind == TK_ATTN);
    }
    for (size_t i = 0; s2 && i < sched_count(s2); i++) flagged2 += sched_get(s2, i)->ovl;
    TAP_OK(flag_ok && flagged >= (int)rep.overlapped && flagged2 == 0,
           "merged attention actions carry the ovl flag (%d, replays included), none without "
           "the merge", flagged);
    sched_free(s2);
    sched_free(s);
    plan_free(p);
    trace_free(t);
}

static char *dump_plan(const plan_t *p)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    plan_write_fp(p, f);
    fclose(f);
    return buf;
}

static void test_determinism(const machine_t *m)
{
    trace_t *t = small_trace(m, 2, NULL);
    plan_t *p1 = NULL, *p2 = NULL;
    ms_error err;
    ms_status s1 = t ? pol_plan("memo", t, m, NULL, &p1, &err) : MS_ERR_INVALID;
    ms_status s2 = t ? pol_plan("memo", t, m, NULL, &p2, &err) : MS_ERR_INVALID;
    char *d1 = s1 == MS_OK ? dump_plan(p1) : NULL, *d2 = s2 == MS_OK ? dump_plan(p2) : NULL;
    TAP_OK(d1 && d2 && !strcmp(d1, d2) && strlen(d1) > 1000,
           "memo plans are byte-identical across runs (2 iterations, %zu bytes)",
           d1 ? strlen(d1) : 0);
    free(d1);
    free(d2);
    plan_free(p1);
    plan_free(p2);
    trace_free(t);
}

/* ---- MEMO's executor: host buffers and the loss ---- */

/* The HOST_ALLOC sizes of memo at alpha 0.5 (no memory plan) with extra plan knobs. */
static int host_allocs(const trace_t *t, const machine_t *m, const pol_knob *kn, size_t nk,
                       uint64_t *first, int *all_same)
{
    pol_opts o;
    pol_opts_default(&o);
    o.alpha = 0.5;
    pol_knob all[4] = { { "memory_plan", "0" } };
    for (size_t i = 0; i < nk && i < 3; i++) all[i + 1] = kn[i];
    o.knobs = all;
    o.n_knobs = 1 + (nk < 3 ? nk : 3);
    plan_t *p = NULL;
    schedule_t *s = NULL;
    ms_error err;
    lower_opts lo;
    lower_opts_default(&lo);
    ms_status st = pol_plan("memo", t, m, &o, &p, &err);
    if (st == MS_OK) st = lower_schedule(t, p, m, &lo, &s, &err);
    if (st != MS_OK) TAP_NOTE("host_allocs: %s", err.msg);
    int n = 0;
    *first = 0;
    *all_same = 1;
    for (size_t i = 0; st == MS_OK && i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind != SA_HOST_ALLOC) continue;
        if (!n++) *first = a->bytes;
        *all_same &= a->bytes == *first;
    }
    sched_free(s);
    plan_free(p);
    return st == MS_OK ? n : -1;
}

/* A one-iteration megatron-profile trace of model `dims` with the given loss. */
static trace_t *megatron_trace(const machine_t *m, const char *dims, const char *loss)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    trace_t *t = NULL;
    ms_status st = model_lookup(dims, &c.model, &err);
    c.seq = 4096;
    c.tp = 2;
    c.cp = 2;
    c.iterations = 1;
    if (st == MS_OK) st = gen_config_set(&c, "framework", "megatron", &err);
    if (st == MS_OK) st = gen_config_set(&c, "loss", loss, &err);
    if (st == MS_OK) st = gen_trace(&c, m, &t, &err);
    if (st != MS_OK) TAP_NOTE("megatron trace (%s, loss %s): %s", dims, loss, err.msg);
    return st == MS_OK ? t : NULL;
}

/* The four readings of MEMO's host buffers (knob host_round) on the unit function, on the
 * knobs, and on lowered schedules of the megatron program. */
static void test_host_round(const machine_t *m)
{
    const uint64_t M = 1ULL << 20, G = 1ULL << 30;
    /* a 384K-like layer: slices of 3 x 2^k bytes and TE's small fp32 statistics */
    const uint64_t sl[] = { 3 * 256 * M, 3 * 16 * M, 0, 3 * 512 * M, 1536 * 1024 + 512 };
    const unsigned char st5[] = { 0, 0, 0, 0, 1 };
    const size_t ns = sizeof sl / sizeof sl[0];
    uint64_t sum = 0;
    for (size_t i = 0; i < ns; i++) sum += sl[i];
    uint64_t ex = memo_host_layer_bytes(sl, st5, ns, LOWER_HOST_EXACT, 4096);
    uint64_t lp = memo_host_layer_bytes(sl, st5, ns, LOWER_HOST_LAYER_POW2, 4096);
    uint64_t tp = memo_host_layer_bytes(sl, st5, ns, LOWER_HOST_TENSOR_POW2, 4096);
    uint64_t bp = memo_host_layer_bytes(sl, st5, ns, LOWER_HOST_BUFFER_POW2, 4096);
    uint64_t tp_hand = 1 * G + 64 * M + 2 * G + 2 * M;
    TAP_OK(ex == (sum + 4095) / 4096 * 4096 && lp == 4 * G && tp == tp_hand && bp == 4 * G + 2 * M &&
           ex < tp && tp < lp,
           "per-layer host bytes: exact %llu, layer_pow2 %llu (4 GiB), tensor_pow2 %llu "
           "(1 GiB + 64 MiB + 2 GiB + 2 MiB), buffer_pow2 %llu (4 GiB + 2 MiB)",
           (unsigned long long)ex, (unsigned long long)lp, (unsigned long long)tp,
           (unsigned long long)bp);
    /* a 256K layer of MEMO's program: 4 GiB of bf16 activations, 4.5 MiB of fp32 statistics */
    const uint64_t l256[] = { G, G, 2 * G, 4 * M, 256 * 1024, 256 * 1024 };
    const unsigned char st6[] = { 0, 0, 0, 1, 1, 1 };
    TAP_OK(memo_host_layer_bytes(l256, st6, 6, LOWER_HOST_LAYER_POW2, 4096) == 8 * G &&
           memo_host_layer_bytes(l256, st6, 6, LOWER_HOST_BUFFER_POW2, 4096) ==
               4 * G + 4 * M + M / 2 &&
           memo_host_layer_bytes(l256, NULL, 6, LOWER_HOST_BUFFER_POW2, 4096) == 8 * G,
           "4 GiB of activations and 4.5 MiB of statistics: 8 GiB as one buffer, 4 GiB + 4.5 MiB "
           "with the statistics apart (buffer_pow2); unmarked, the statistics join the buffer");
    const uint64_t p2[] = { 256 * M, 4 * G, 4096 };
    TAP_OK(memo_host_layer_bytes(p2, NULL, 3, LOWER_HOST_TENSOR_POW2, 4096) ==
               256 * M + 4 * G + 4096 &&
           memo_host_layer_bytes(p2, NULL, 3, LOWER_HOST_LAYER_POW2, 4096) == 8 * G &&
           memo_host_layer_bytes(p2, NULL, 3, LOWER_HOST_EXACT, 1) == 256 * M + 4 * G + 4096 &&
           memo_host_layer_bytes(NULL, NULL, 0, LOWER_HOST_TENSOR_POW2, 4096) == 0 &&
           memo_host_layer_bytes(sl + 2, NULL, 1, LOWER_HOST_LAYER_POW2, 4096) == 0 &&
           memo_host_layer_bytes(sl + 2, st5 + 2, 1, LOWER_HOST_BUFFER_POW2, 4096) == 0,
           "power-of-two slices cost nothing extra per tensor, but 4 GiB + 256 MiB + 4 KiB "
           "rounds to 8 GiB as one buffer; nothing offloaded takes nothing");
    lower_host_round r = LOWER_HOST_EXACT;
    int ok = 1;
    for (int i = LOWER_HOST_EXACT; i <= LOWER_HOST_BUFFER_POW2; i++)
        ok &= lower_host_round_parse(lower_host_round_name((lower_host_round)i), &r) == 0 &&
              (int)r == i;
    TAP_OK(ok && lower_host_round_parse("pow2", &r) != 0 && lower_host_round_parse(NULL, &r) != 0,
           "host_round names round-trip; unknown names are refused");

    /* the megatron program: its layer's statistics (LSE, LayerNorm mean and rsigma) are the
     * slices that are not powers of two */
    trace_t *t = megatron_trace(m, "dims:6,256,4,1024,1000", "fused");
    uint64_t hr[4] = { 0, 0, 0, 0 }, b[4] = { 0, 0, 0, 0 };
    int same[4] = { 0, 0, 0, 0 }, n[4] = { -1, -1, -1, -1 };
    static const char *const names[] = { "exact", "layer_pow2", "tensor_pow2", "buffer_pow2" };
    if (t) layer_host_readings(t, 0, 0.5, hr);
    int all = 1;
    for (int i = 0; i < 4 && t; i++) {
        pol_knob k[] = { { "host_round", names[i] } };
        n[i] = host_allocs(t, m, k, 1, &b[i], &same[i]);
        all &= n[i] == NL - 2 && same[i] && b[i] == hr[i];
    }
    TAP_OK(all && hr[0] < hr[1] && hr[3] != hr[1] && hr[3] != hr[2],
           "lowered schedule, alpha 0.5: HOST_ALLOC per offloaded layer exact %llu, layer_pow2 "
           "%llu, tensor_pow2 %llu, buffer_pow2 %llu B, each as computed from the trace's tensors",
           (unsigned long long)b[0], (unsigned long long)b[1], (unsigned long long)b[2],
           (unsigned long long)b[3]);
    uint64_t bd = 0;
    int sd = 0;
    int nd = t ? host_allocs(t, m, NULL, 0, &bd, &sd) : -1;
    TAP_OK(nd == NL - 2 && bd == b[3], "the default reading is buffer_pow2 (%llu B)",
           (unsigned long long)bd);
    pol_knob legacy[] = { { "host_pow2", "1" } };
    uint64_t bl = 0;
    int sl1 = 0;
    int nl = t ? host_allocs(t, m, legacy, 1, &bl, &sl1) : -1;
    TAP_OK(nl == NL - 2 && bl == b[1], "host_pow2=1 still means layer_pow2");
    pol_knob clash[] = { { "host_round", "tensor_pow2" }, { "host_pow2", "1" } };
    pol_knob bogus[] = { { "host_round", "pow2" } };
    TAP_OK(t && host_allocs(t, m, clash, 2, &bl, &sl1) < 0 &&
           host_allocs(t, m, bogus, 1, &bl, &sl1) < 0,
           "host_round contradicting host_pow2, or an unknown host_round, is refused");

    /* alpha is lowered by the reading's buffers, and the plan records the reading */
    machine_t fast = *m;
    fast.link_d2h_Bps = fast.link_h2d_Bps = 1e15; /* the time constraint never binds */
    uint64_t full[4] = { 0, 0, 0, 0 };
    if (t) layer_host_readings(t, 0, 1.0, full);
    char host[32];
    snprintf(host, sizeof host, "%llu", (unsigned long long)((NL - 2) * full[3]));
    pol_knob hk[] = { { "host_bytes", host }, { "host_round", "buffer_pow2" } };
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = hk;
    o.n_knobs = 2;
    memo_alpha_choice c;
    ms_error err;
    plan_t *p = NULL;
    ms_status st = t ? memo_choose_alpha(t, &fast, &o, &c, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && c.alpha == 1.0 && c.host_round == LOWER_HOST_BUFFER_POW2 &&
           c.host_need_bytes == (NL - 2) * full[3],
           "buffer_pow2: a host of exactly the per-layer buffers holds alpha 1 (need %llu B)",
           (unsigned long long)c.host_need_bytes);
    hk[1].value = "layer_pow2";
    st = t ? memo_choose_alpha(t, &fast, &o, &c, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && full[1] > full[3] && c.alpha < 1 && c.grid_steps_down > 0,
           "layer_pow2 on the same host: alpha stepped down to %g", c.alpha);
    o.n_knobs = 0;
    st = t ? pol_plan("memo", t, m, &o, &p, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && !strcmp(knob(p, "host_round"), "buffer_pow2"),
           "the plan records host_round=%s", st == MS_OK ? knob(p, "host_round") : "?");
    plan_free(p);
    trace_free(t);
}

static void test_host_buffers(const machine_t *m)
{
    const uint64_t G = 1ULL << 30, M = 1ULL << 20;
    TAP_OK(memo_host_buffer_bytes(4 * G + 4 * M + M / 2, 1, 4096) == 8 * G &&
           memo_host_buffer_bytes(4 * G + 4 * M + M / 2, 0, 4096) == 4 * G + 4 * M + M / 2 &&
           memo_host_buffer_bytes(4097, 0, 4096) == 8192 && memo_host_buffer_bytes(5, 0, 0) == 5 &&
           memo_host_buffer_bytes(5, 0, 1) == 5 && memo_host_buffer_bytes(0, 1, 4096) == 0 &&
           memo_host_buffer_bytes(4096, 1, 1) == 4096,
           "host buffer sizing: a layer of 4 GiB + 4.5 MiB takes 8 GiB from PyTorch's pinned "
           "allocator, itself in 4 KiB pages");
    trace_t *t = small_trace(m, 1, NULL);
    uint64_t exact = t ? layer_offload_bytes(t, 0, 0.5) : 0, b = 0;
    int same = 0;
    pol_knob ex[] = { { "host_round", "exact" } };
    int n = t ? host_allocs(t, m, ex, 1, &b, &same) : -1;
    TAP_OK(n == NL - 2 && same && b == memo_host_buffer_bytes(exact, 0, 4096) && b % 4096 == 0 &&
           b - exact < 4096, "host_round=exact: %d host buffers of %llu B for %llu offloaded bytes",
           n, (unsigned long long)b, (unsigned long long)exact);
    pol_knob pw[] = { { "host_pow2", "1" } };
    n = t ? host_allocs(t, m, pw, 1, &b, &same) : -1;
    TAP_OK(n == NL - 2 && same && (b & (b - 1)) == 0 && b >= exact && b / 2 < exact,
           "host_pow2=1 (PyTorch's caching host allocator): %llu B, the next power of two",
           (unsigned long long)b);
    pol_knob g1[] = { { "host_round", "exact" }, { "host_granule", "1" } };
    n = t ? host_allocs(t, m, g1, 2, &b, &same) : -1;
    TAP_OK(n == NL - 2 && b == exact, "host_granule=1: exactly the offloaded bytes");
    pol_knob bad[] = { { "host_granule", "0" } };
    n = t ? host_allocs(t, m, bad, 1, &b, &same) : -1;
    TAP_OK(n < 0, "host_granule=0 is refused");

    /* alpha: a host that holds the exact buffers at alpha 1 but not their powers of two. The
     * megatron program's layer (with TE's fp32 statistics) is not a power of two. */
    trace_free(t);
    t = megatron_trace(m, "dims:6,256,4,1024,1000", "fused");
    machine_t fast = *m;
    fast.link_d2h_Bps = fast.link_h2d_Bps = 1e15; /* the time constraint never binds */
    uint64_t full = t ? memo_host_buffer_bytes(layer_offload_bytes(t, 0, 1.0), 0, 4096) : 0;
    char host[32];
    snprintf(host, sizeof host, "%llu", (unsigned long long)((NL - 2) * full));
    pol_knob hk[] = { { "host_bytes", host }, { "host_pow2", "0" } }; /* exact */
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = hk;
    o.n_knobs = 2;
    memo_alpha_choice c, c2;
    ms_error err;
    ms_status st = t ? memo_choose_alpha(t, &fast, &o, &c, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && c.alpha == 1.0 && c.grid_steps_down == 0 &&
           c.host_need_bytes == (NL - 2) * full,
           "exact host buffers that just fit: alpha 1 (%g), need %llu B", c.alpha,
           (unsigned long long)c.host_need_bytes);
    hk[1].value = "1";
    st = t ? memo_choose_alpha(t, &fast, &o, &c2, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && full != memo_host_buffer_bytes(full, 1, 1) && c2.alpha < 1 &&
           c2.grid_steps_down > 0 && (double)c2.host_need_bytes <= (double)((NL - 2) * full),
           "the same host with power-of-two buffers: alpha stepped down to %g (%d steps)",
           c2.alpha, c2.grid_steps_down);
    trace_free(t);
}

/* Live bytes of the loss's [tokens, vocab/tp] tensors at their peak, and the logits' own. */
static int loss_live(const machine_t *m, const char *loss, uint64_t *peak, uint64_t *logits)
{
    trace_t *t = megatron_trace(m, "dims:2,256,4,1024,1000", loss);
    if (!t) return 0;
    static const char *const fam[] = { "logits", "logits_fp32", "softmax", "d_logits" };
    u64map *live = u64map_new(64);
    uint64_t cur = 0;
    *peak = *logits = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        uint64_t b;
        if (r->type == TR_ALLOC) {
            for (size_t k = 0; k < 4; k++)
                if (!strcmp(r->u.alloc.name, fam[k])) {
                    u64map_put(live, r->u.alloc.id, r->u.alloc.bytes);
                    cur += r->u.alloc.bytes;
                    if (k == 0) *logits = r->u.alloc.bytes;
                }
            *peak = cur > *peak ? cur : *peak;
        } else if (r->type == TR_FREE && u64map_del(live, r->u.free_id, &b)) {
            cur -= b;
        }
    }
    const char *meta = trace_get_meta(t, "loss");
    int ok = meta && !strcmp(meta, loss);
    u64map_free(live);
    trace_free(t);
    return ok;
}

static void test_executor_loss(const machine_t *m)
{
    uint64_t pf = 0, lf = 0, pm = 0, lm = 0;
    int okf = loss_live(m, "fused", &pf, &lf), okm = loss_live(m, "megatron", &pm, &lm);
    TAP_OK(okf && lf > 0 && pf == lf, "loss fused (MEMO's executor): the bf16 logits alone are "
           "live, 2 B per logit (%llu of %llu B)", (unsigned long long)pf,
           (unsigned long long)lf);
    TAP_OK(okm && lm == lf && pm == 5 * lm, "loss megatron (stock): 10 B per logit at the peak "
           "(%llu B = %.2f x the bf16 logits)", (unsigned long long)pm,
           lm ? (double)pm / (double)lm : 0.0);
    uint64_t pi = 0, li = 0;
    int oki = loss_live(m, "megatron-inplace", &pi, &li);
    TAP_OK(oki && li == lf && pi == 3 * li, "loss megatron-inplace (June 2024): 6 B per logit at "
           "the peak (%llu B = %.2f x the bf16 logits)", (unsigned long long)pi,
           li ? (double)pi / (double)li : 0.0);
}

int main(void)
{
    machine_t m;
    test_machine(&m);
    test_lp();
    test_layer_info(&m);
    test_memo_plan(&m);
    test_rb_schedule(&m);
    test_host_buffers(&m);
    test_host_round(&m);
    test_executor_loss(&m);
    test_determinism(&m);
    return tap_done();
}

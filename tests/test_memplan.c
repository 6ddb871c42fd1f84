/* test_memplan.c — TAP tests of MEMO's bi-level memory plan (planners/memo/memplan.c): on small
 * hand-built schedules, the bi-level peak against the brute-force optimum and the plan's own
 * check; lifetimes of tensors freed on a copy stream; bad input (an id allocated twice, layers
 * that differ under strict_layers, a corrupted plan); the arena size rule; on generated traces
 * lowered by the MEMO policies, the check, the gap to LOAD and the single-level DSA, an
 * end-to-end simulation on the static arena, and the planner's speed on GPT-7B. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/dsa.h"
#include "planners/lower.h"
#include "planners/memo/memplan.h"
#include "planners/policy.h"
#include "sim/pipeline.h"
#include "tests/tap.h"
#include "traces/gen.h"
#include "traces/models.h"

/* ---- hand-built schedules ---- */

typedef struct sb {
    schedule_t *s;
    int32_t layer;
    trace_phase phase;
} sb;

static void add(sb *b, sched_kind k, sched_stream st, uint64_t id, uint64_t bytes, uint32_t ev)
{
    sched_action a;
    memset(&a, 0, sizeof a);
    a.kind = k;
    a.stream = st;
    a.tensor = id;
    a.bytes = bytes;
    a.event = ev;
    a.op = -1;
    a.layer = b->layer;
    a.phase = b->phase;
    if (k == SA_COMPUTE) a.dur_us = 1;
    sched_add(b->s, &a);
}

static void at(sb *b, int32_t layer, trace_phase ph)
{
    b->layer = layer;
    b->phase = ph;
    add(b, SA_MARK, SS_COMPUTE, 0, 0, 0);
}

#define A(id, n) add(&b, SA_ALLOC, SS_COMPUTE, id, n, 0)
#define F(id) add(&b, SA_FREE, SS_COMPUTE, id, 0, 0)
#define OP() add(&b, SA_COMPUTE, SS_COMPUTE, 0, 0, 0)

/* One layer's forward: a(4) b(2) live together, then b and c(2). */
static void layer_fwd(sb *b_, int32_t l, uint64_t base, uint64_t big)
{
    sb b = *b_;
    at(&b, l, TP_FWD);
    A(base + 1, big);
    A(base + 2, 2);
    OP();
    F(base + 1);
    A(base + 3, 2);
    OP();
    F(base + 2);
    F(base + 3);
    *b_ = b;
}

static schedule_t *two_layers(uint64_t big1)
{
    sb b = { sched_new(), -1, TP_NONE };
    A(100, 3); /* a parameter, live throughout */
    layer_fwd(&b, 0, 10, 4);
    layer_fwd(&b, 1, 20, big1);
    at(&b, -1, TP_FWD);
    OP();
    return b.s;
}

/* The exact instance of a schedule with every tensor's own lifetime: ALLOC to FREE + 1. */
static dsa_instance *exact_instance(const schedule_t *s)
{
    dsa_instance *in = dsa_instance_new();
    ms_error err;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind != SA_ALLOC) continue;
        size_t f = sched_count(s);
        for (size_t j = i + 1; j < sched_count(s); j++)
            if (sched_get(s, j)->kind == SA_FREE && sched_get(s, j)->tensor == a->tensor) {
                f = j;
                break;
            }
        dsa_instance_add(in, NULL, (int64_t)i, (int64_t)f + 1, a->bytes, &err);
    }
    return in;
}

static void test_small(void)
{
    memplan_opts o;
    memplan_opts_default(&o);
    o.align_bytes = 1;
    memplan_result r;
    memplan_report rep;
    ms_error err;
    schedule_t *s = two_layers(4);
    ms_status st = memplan_schedule(s, &o, &r, &rep, &err);
    dsa_instance *in = exact_instance(s);
    uint64_t *off = calloc(dsa_instance_count(in), sizeof *off), best = 0;
    ms_status bs = dsa_brute_force(in, off, &best, &err);
    TAP_OK(st == MS_OK && rep.sections == 2 && rep.patterns == 1 && rep.level2_buffers == 3,
           "two identical layers: 2 sections, 1 level-1 pattern, 3 level-2 buffers");
    TAP_OK(st == MS_OK && bs == MS_OK && rep.peak_bytes == best && best == 9 &&
           rep.load_bytes == 9 && rep.gap == 0,
           "bi-level peak %" PRIu64 " = brute-force optimum %" PRIu64 " = LOAD", rep.peak_bytes,
           best);
    TAP_OK(st == MS_OK && r.n == 7 && r.arena_bytes == 9 &&
           memplan_check(s, &r, 1, NULL, &err) == MS_OK, "every tensor placed; the plan checks");
    /* corrupt it: the second layer's first transient onto the parameter */
    uint64_t param_off = 0;
    for (size_t k = 0; k < r.n; k++)
        if (r.ids[k] == 100) param_off = r.offsets[k];
    for (size_t k = 0; k < r.n; k++)
        if (r.ids[k] == 21) r.offsets[k] = param_off;
    TAP_OK(memplan_check(s, &r, 1, NULL, &err) == MS_ERR_INVALID,
           "a corrupted plan fails the check: %s", err.msg);
    plan_t *p = plan_new("x", "static");
    TAP_OK(p && memplan_apply(&r, p, 8, &err) == MS_OK && p->arena_bytes == 0 &&
           p->n_offsets == 7, "arena that does not fit the device: size 0 (grow, report OOM)");
    plan_free(p);
    p = plan_new("x", "static");
    TAP_OK(p && memplan_apply(&r, p, 1 << 20, &err) == MS_OK && p->arena_bytes == 9,
           "arena that fits: its size is the plan's peak");
    plan_free(p);
    memplan_result_free(&r);
    free(off);
    dsa_instance_free(in);
    sched_free(s);

    /* layers that differ */
    s = two_layers(5);
    st = memplan_schedule(s, &o, &r, &rep, &err);
    TAP_OK(st == MS_OK && rep.patterns == 2 && memplan_check(s, &r, 1, NULL, &err) == MS_OK,
           "layers that differ are solved apart (2 patterns)");
    memplan_result_free(&r);
    o.strict_layers = 1;
    st = memplan_schedule(s, &o, &r, &rep, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "layer 1") && strstr(err.msg, "layer 0") &&
           strstr(err.msg, "strict"), "strict_layers: %s", err.msg);
    sched_free(s);

    /* an id allocated twice */
    sb b = { sched_new(), -1, TP_NONE };
    A(1, 8);
    F(1);
    A(1, 8);
    F(1);
    o.strict_layers = 0;
    st = memplan_schedule(b.s, &o, &r, &rep, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "memory_plan=1"), "id allocated twice: %s",
           err.msg);
    sched_free(b.s);
}

/* A tensor freed on the offload stream lives until compute waits for that stream. */
static void test_side_streams(void)
{
    sb b = { sched_new(), -1, TP_NONE };
    uint32_t e1 = sched_new_event(b.s), e2 = sched_new_event(b.s);
    A(1, 4);                                   /* 0 */
    OP();                                      /* 1 */
    add(&b, SA_RECORD, SS_COMPUTE, 0, 0, e1);  /* 2 */
    add(&b, SA_WAIT, SS_D2H, 0, 0, e1);        /* 3 */
    add(&b, SA_FREE, SS_D2H, 1, 0, 0);         /* 4: runs when the copy ends, any time later */
    add(&b, SA_RECORD, SS_D2H, 0, 0, e2);      /* 5 */
    A(2, 4);                                   /* 6: may still overlap tensor 1 */
    OP();                                      /* 7 */
    add(&b, SA_WAIT, SS_COMPUTE, 0, 0, e2);    /* 8: tensor 1 is gone from here on */
    A(3, 4);                                   /* 9 */
    OP();
    F(2);
    F(3);
    memplan_opts o;
    memplan_opts_default(&o);
    o.align_bytes = 1;
    memplan_result r;
    memplan_report rep;
    ms_error err;
    ms_status st = memplan_schedule(b.s, &o, &r, &rep, &err);
    uint64_t o1 = r.n == 3 ? r.offsets[0] : 0, o2 = r.n == 3 ? r.offsets[1] : 0;
    uint64_t o3 = r.n == 3 ? r.offsets[2] : 0;
    TAP_OK(st == MS_OK && r.n == 3 && o1 != o2 && o3 != o2 && rep.peak_bytes == 8 &&
           rep.load_bytes == 8, "a block freed on the D2H stream is not reused before compute "
           "waits for that stream (offsets %" PRIu64 " %" PRIu64 " %" PRIu64 ")", o1, o2, o3);
    memplan_result_free(&r);
    sched_free(b.s);
}

/* ---- generated traces ---- */

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
    m->link_h2d_Bps = m->link_d2h_Bps = 13.875e9;
    m->link_duplex_Bps = 25.1e9;
    m->host_mem_bytes = 2000000000000ULL;
    m->node_gpus = 8;
    m->node_gpus_per_switch = 1;
    m->nvlink_Bps = 200e9;
    m->nvlink_lat_us = 3;
    m->net_Bps = 25e9;
    m->net_lat_us = 5;
    m->cuda_malloc_base_us = m->cuda_free_base_us = 37;
    m->vmm_granularity_bytes = 2ULL << 20;
}

static trace_t *gen(const machine_t *m, const char *model, uint64_t seq, int tp, int cp)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup(model, &c.model, &err) != MS_OK) return NULL;
    c.seq = seq;
    c.tp = tp;
    c.cp = cp;
    trace_t *t = NULL;
    if (gen_trace(&c, m, &t, &err) != MS_OK) TAP_NOTE("gen: %s", err.msg);
    return t;
}

/* Lowers t under `policy` without its memory plan (memory_plan=1 renaming kept). */
static schedule_t *lowered(const trace_t *t, const machine_t *m, const char *policy)
{
    pol_opts o;
    pol_opts_default(&o);
    pol_knob kn[] = { { "memory_plan", "0" } };
    o.knobs = kn;
    o.n_knobs = 1;
    plan_t *p = NULL;
    ms_error err;
    schedule_t *s = NULL;
    if (pol_plan(policy, t, m, &o, &p, &err) == MS_OK) {
        plan_set_knob(p, "memory_plan", "1");
        if (lower_schedule(t, p, m, NULL, &s, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    } else {
        TAP_NOTE("%s: %s", policy, err.msg);
    }
    plan_free(p);
    return s;
}

static void test_generated(const machine_t *m)
{
    trace_t *t = gen(m, "dims:6,256,4,1024,1000", 4096, 2, 2);
    const char *pols[] = { "full-recompute+plan", "memo" };
    for (int k = 0; k < 2; k++) {
        schedule_t *s = t ? lowered(t, m, pols[k]) : NULL;
        memplan_opts o;
        memplan_opts_default(&o);
        memplan_result r, r1;
        memplan_report rep, rep1;
        ms_error err;
        ms_status st = s ? memplan_schedule(s, &o, &r, &rep, &err) : MS_ERR_INVALID;
        uint64_t pk = 0;
        TAP_OK(st == MS_OK && memplan_check(s, &r, 512, &pk, &err) == MS_OK &&
                   pk == rep.peak_bytes && rep.peak_bytes >= rep.load_bytes && rep.patterns >= 2,
               "%s: bi-level plan checks on its own; peak %" PRIu64 " >= LOAD %" PRIu64
               " (gap %.2f%%, %zu patterns)", pols[k], rep.peak_bytes, rep.load_bytes,
               100 * rep.gap, rep.patterns);
        o.single_level = 1;
        ms_status st1 = s ? memplan_schedule(s, &o, &r1, &rep1, &err) : MS_ERR_INVALID;
        TAP_OK(st == MS_OK && st1 == MS_OK && rep.peak_bytes <= rep1.peak_bytes * 105 / 100,
               "%s: bi-level peak %" PRIu64 " within 5%% of the single-level DSA's %" PRIu64,
               pols[k], rep.peak_bytes, rep1.peak_bytes);
        if (st == MS_OK) memplan_result_free(&r);
        if (st1 == MS_OK) memplan_result_free(&r1);
        sched_free(s);
    }
    /* without fresh ids a recomputing schedule cannot be planned */
    schedule_t *s = NULL;
    plan_t *p = NULL;
    ms_error err;
    memplan_result r;
    ms_status st = t ? pol_plan("full-recompute", t, m, NULL, &p, &err) : MS_ERR_INVALID;
    if (st == MS_OK) st = lower_schedule(t, p, m, NULL, &s, &err);
    if (st == MS_OK) st = memplan_schedule(s, NULL, &r, NULL, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "allocated a second time"),
           "replays without memory_plan=1: %s", err.msg);
    sched_free(s);
    plan_free(p);
    /* end to end on the static arena */
    sim_result res;
    p = NULL;
    st = t ? pol_plan("memo", t, m, NULL, &p, &err) : MS_ERR_INVALID;
    if (st == MS_OK) st = pipe_simulate(t, m, p, NULL, &res, &err);
    if (st != MS_OK) TAP_NOTE("%s", err.msg);
    TAP_OK(st == MS_OK && res.status == RS_OK && !strcmp(res.allocator, "static") &&
               res.peak_reserved_bytes == p->arena_bytes && res.astats.num_alloc_retries == 0,
           "memo simulates on the static arena: reserved = the plan's arena (%" PRIu64 ")",
           p ? p->arena_bytes : 0);
    plan_free(p);
    trace_free(t);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The goal in BENCHMARKS.md: level 1 of a GPT-7B layer < 1 s, the whole plan < 10 s. */
static void test_speed(const machine_t *m)
{
    trace_t *t = gen(m, "gpt-7b", 262144, 4, 2);
    schedule_t *s = t ? lowered(t, m, "full-recompute+plan") : NULL;
    memplan_result r;
    memplan_report rep;
    ms_error err;
    double t0 = now_s();
    ms_status st = s ? memplan_schedule(s, NULL, &r, &rep, &err) : MS_ERR_INVALID;
    double dt = now_s() - t0;
    TAP_NOTE("gpt-7b 256K full-recompute+plan: %zu actions, %zu tensors, %zu sections, "
             "level 1 %.4f s, level 2 %.4f s, whole %.4f s, peak %.3f GiB, LOAD %.3f GiB",
             s ? sched_count(s) : 0, rep.tensors, rep.sections, rep.level1_s, rep.level2_s, dt,
             rep.peak_bytes / MS_GiB, rep.load_bytes / MS_GiB);
    TAP_OK(st == MS_OK && rep.level1_s < 1.0 && dt < 10.0,
           "gpt-7b bi-level plan: level 1 < 1 s, whole < 10 s");
    if (st == MS_OK) memplan_result_free(&r);
    sched_free(s);
    trace_free(t);
}

int main(void)
{
    machine_t m;
    test_machine(&m);
    test_small();
    test_side_streams();
    test_generated(&m);
    test_speed(&m);
    return tap_done();
}

/* test_exec_host.c — tests of the host side of the simulator's schedule executor
 * (sim/exec.h, sim/exec_host.c) on small hand-built schedules: the host times of the trace's
 * ops (a kernel waits for the host's issue, host synchronizes) and the host issue model
 * (allocations at issue time, deferred frees and record_stream, the framework side streams'
 * pools, the run-ahead bound, allocator latency and synchronizes on the host thread, drains
 * before an OOM or OOHM, paced cuMemSetAccess mappings, determinism, errors, the CSV). Uses
 * the "caching" allocator. Part of `make check`. */
#define _POSIX_C_SOURCE 200809L
#include "sim/exec.h"

#include "planners/lower.h"
#include "tests/exec_util.h"

/* ---- host times of the trace's ops (trace_op.host_us, host_sync) ---- */

/* A trace of ops 1..n with these host times (sync: ops the host synchronizes on) and a
 * schedule running them in order for dur_us each. */
static trace_t *host_trace(int n, const double *host_us, const int *sync)
{
    trace_t *t = trace_new();
    for (int i = 0; i < n; i++) {
        trace_rec r;
        memset(&r, 0, sizeof r);
        r.type = TR_OP;
        r.u.op.id = (uint64_t)(i + 1);
        r.u.op.kind = TK_ELEM;
        r.u.op.phase = TP_FWD;
        r.u.op.layer = 0;
        r.u.op.dur_us = -1;
        r.u.op.host_us = host_us[i];
        r.u.op.host_sync = (uint8_t)(sync ? sync[i] : 0);
        trace_append(t, &r);
    }
    return t;
}

static schedule_t *host_sched(int n, const double *dur_us)
{
    schedule_t *s = sched_new();
    for (int i = 0; i < n; i++) compute(s, dur_us[i], i + 1);
    return s;
}

/* Iteration time in us of s over trace t (issue model at `ahead`, 0: stream time). */
/* The iteration time (us) of s on m with trace t's host times, issued ahead by `ahead`, with
 * the trace's measured checkpointing costs where `measured` (sim_opts.ckpt_host_measured). */
static double host_run_with(const schedule_t *s, const trace_t *t, const machine_t *m, int ahead,
                            int measured, sim_result *r)
{
    sim_opts o;
    sim_opts_default(&o);
    o.trace = t;
    o.issue_ahead = ahead;
    o.ckpt_host_measured = measured;
    ms_error err;
    ms_error_clear(&err);
    if (run(s, m, &o, r, &err) != MS_OK) {
        TAP_NOTE("run failed: %s", err.msg);
        return -1;
    }
    return r->iter_time_s * 1e6;
}

static double host_run(const schedule_t *s, const trace_t *t, const machine_t *m, int ahead,
                       sim_result *r)
{
    return host_run_with(s, t, m, ahead, 0, r);
}

static double host_run_measured(const schedule_t *s, const trace_t *t, const machine_t *m,
                                sim_result *r)
{
    return host_run_with(s, t, m, 0, 1, r);
}

static void test_host_times(void)
{
    machine_t m = test_machine();
    sim_result r;
    for (int ahead = 0; ahead <= 8; ahead += 8) {
        const char *mode = ahead ? "--issue-ahead 8" : "stream time";
        /* host-bound: 4 ops of 10 us the host needs 100 us each to issue */
        double h1[] = {100, 100, 100, 100}, d1[] = {10, 10, 10, 10};
        trace_t *t = host_trace(4, h1, NULL);
        schedule_t *s = host_sched(4, d1);
        double us = host_run(s, t, &m, ahead, &r);
        TAP_OK(near(us, 410), "%s: host-bound: step = sum(host_us) + the last kernel (%.3f us)",
               mode, us);
        if (!ahead)
            TAP_OK(near_us(r.stall_s, 370) && near_us(r.compute_busy_s, 40),
                   "%s: the GPU waits for the host 370 us, computes 40 us", mode);
        /* the same schedule without a trace: the GPU never waits */
        sim_opts o;
        sim_opts_default(&o);
        o.issue_ahead = ahead;
        o.issue_us = 0;
        ms_error err;
        run(s, &m, &o, &r, &err);
        TAP_OK(near_us(r.iter_time_s, 40), "%s: without host times: the kernel sum (%.3f us)",
               mode, r.iter_time_s * 1e6);
        sched_free(s);
        trace_free(t);

        /* GPU-bound: the host runs ahead; the step is the first issue plus the kernels */
        double h2[] = {10, 10, 10, 10}, d2[] = {100, 100, 100, 100};
        t = host_trace(4, h2, NULL);
        s = host_sched(4, d2);
        us = host_run(s, t, &m, ahead, &r);
        TAP_OK(near(us, 410), "%s: GPU-bound: step = the kernel sum + the first issue (%.3f)",
               mode, us);
        sched_free(s);
        trace_free(t);

        /* mixed: issues at 50, 55, 60, 260; kernels 50-70, 70-170, 170-180, 260-270 */
        double h3[] = {50, 5, 5, 200}, d3[] = {20, 100, 10, 10};
        t = host_trace(4, h3, NULL);
        s = host_sched(4, d3);
        us = host_run(s, t, &m, ahead, &r);
        TAP_OK(near(us, 270), "%s: mixed: the host's lead absorbs a short stretch, not the "
               "long one (%.3f us)", mode, us);
        sched_free(s);
        trace_free(t);

        /* the host waits for op 1 (an .item()): op 2 issued at 110 + 10, not at 20 */
        double h4[] = {10, 10, 10}, d4[] = {100, 100, 100};
        int sy[] = {1, 0, 0};
        t = host_trace(3, h4, sy);
        s = host_sched(3, d4);
        us = host_run(s, t, &m, ahead, &r);
        TAP_OK(near(us, 320), "%s: a host-synchronizing op holds the host until the GPU has "
               "run it (%.3f us, 310 without)", mode, us);
        sched_free(s);
        trace_free(t);
    }

    /* recomputation replays the forward op's host time; the profile's
     * host.recompute_layer_us once per replayed layer */
    double h5[] = {100, 100};
    trace_t *t = host_trace(2, h5, NULL);
    for (int k = 0; k < 3; k++) {
        machine_t mk = test_machine();
        mk.host_recompute_layer_us = k == 2 ? 50 : 0;
        schedule_t *s = sched_new();
        compute(s, 10, 1);
        compute(s, 10, 2);
        for (int j = 1; j <= (k ? 2 : 1); j++) {
            sched_action a = base(SA_COMPUTE, SS_COMPUTE);
            a.dur_us = 10;
            a.op = j;
            a.layer = 0;
            a.recompute = 1;
            add(s, a);
        }
        double us = host_run(s, t, &mk, 0, &r);
        double want = k == 0 ? 310 : k == 1 ? 410 : 460;
        TAP_OK(near(us, want) && near_us(r.recompute_s, k ? 20 : 10),
               "recompute of %d op(s)%s: the replay pays the forward's host time (%.3f us)",
               k ? 2 : 1, k == 2 ? " + 50 us per replayed layer" : "", us);
        sched_free(s);
    }
    trace_free(t);

    /* save_on_cpu's blocking copy (COPY.host_wait): the host waits for it, then needs op 2's
     * host time before the GPU has work again (op 1 10-110, copy of 1 MB at 50 GB/s 110-130,
     * op 2 issued 140, runs 140-150; without the wait the host issued op 2 at 20: 130-140) */
    for (int ahead = 0; ahead <= 8; ahead += 8) {
        for (int hw = 0; hw <= 1; hw++) {
            double h7[] = {10, 10};
            trace_t *t7 = host_trace(2, h7, NULL);
            schedule_t *s7 = sched_new();
            tensor_act(s7, SA_ALLOC, SS_COMPUTE, 9, 1000000);
            compute(s7, 100, 1);
            tensor_act(s7, SA_HOST_ALLOC, SS_COMPUTE, 9, 1000000);
            sched_action c = base(SA_COPY_D2H, SS_COMPUTE);
            c.tensor = 9;
            c.bytes = 1000000;
            c.host_wait = (uint8_t)hw;
            add(s7, c);
            compute(s7, 10, 2);
            tensor_act(s7, SA_FREE, SS_COMPUTE, 9, 0);
            tensor_act(s7, SA_HOST_FREE, SS_COMPUTE, 9, 0);
            double us = host_run(s7, t7, &m, ahead, &r);
            TAP_OK(near(us, hw ? 150 : 140), "%s: a copy the host %s: %.3f us",
                   ahead ? "--issue-ahead 8" : "stream time",
                   hw ? "waits for delays its next issues" : "does not wait for", us);
            if (hw) {
                /* without host times the copy's host_wait changes nothing */
                double z[] = {0, 0};
                trace_t *t0 = host_trace(2, z, NULL);
                sim_result r0, r1;
                host_run(s7, t0, &m, ahead, &r0);
                host_run(s7, NULL, &m, ahead, &r1);
                TAP_OK(r0.iter_time_s == r1.iter_time_s && r0.stall_s == r1.stall_s,
                       "%s: no host times: host_wait is ignored",
                       ahead ? "--issue-ahead 8" : "stream time");
                trace_free(t0);
            }
            sched_free(s7);
            trace_free(t7);
        }
    }

    /* a cudaMalloc between two host-bound ops delays the host's next issue by its latency
     * (host: 100, +50, 250; the stream pays it too, 110-160, then waits for the host) */
    {
        machine_t ma = test_machine();
        ma.cuda_malloc_base_us = 50;
        double h6[] = {100, 100};
        trace_t *t6 = host_trace(2, h6, NULL);
        schedule_t *s6 = sched_new();
        compute(s6, 10, 1);
        tensor_act(s6, SA_ALLOC, SS_COMPUTE, 9, MiB);
        compute(s6, 10, 2);
        tensor_act(s6, SA_FREE, SS_COMPUTE, 9, 0);
        double us = host_run(s6, t6, &ma, 0, &r);
        TAP_OK(near(us, 260), "a cudaMalloc's latency is the host's too: 260 us (210 if only "
               "the stream paid it; got %.3f)", us);
        sched_free(s6);
        trace_free(t6);
    }

    /* a trace whose ops give no host time runs as without a trace, bytes included */
    double h0[] = {0, 0, 0}, d0[] = {30, 40, 50};
    t = host_trace(3, h0, NULL);
    schedule_t *s = host_sched(3, d0);
    sim_result a, b;
    host_run(s, t, &m, 0, &a);
    host_run(s, NULL, &m, 0, &b);
    TAP_OK(near_us(a.iter_time_s, 120) && a.iter_time_s == b.iter_time_s &&
               a.stall_s == b.stall_s,
           "no host times: the same result as no trace (%.3f us)", a.iter_time_s * 1e6);
    sched_free(s);
    trace_free(t);
}

/* ---- the host issue model (sim_opts.issue_ahead) ---- */

static ms_status run_issue(const schedule_t *s, const machine_t *m, int ahead, double issue_us,
                           sim_opts *o, sim_result *r, ms_error *err)
{
    sim_opts d;
    if (!o) {
        sim_opts_default(&d);
        o = &d;
    }
    o->issue_ahead = ahead;
    o->issue_us = issue_us;
    return run(s, m, o, r, err);
}

/* recordStream by a collective (FREE.side_use): a block only the compute stream allocated and
 * used waits, with the host issue model, for the GPU to pass the free; an allocation that then
 * finds the device full makes the caching allocator synchronize, take the block back
 * (synchronize_and_free_events), free the cached segment and cudaMalloc again: one retry. */
static void side_free_sched(schedule_t *s, int side_use)
{
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 600 * MiB);
    compute(s, 1000, 1);
    sched_action f = base(SA_FREE, SS_COMPUTE);
    f.tensor = 1;
    f.side_use = (uint8_t)side_use;
    add(s, f);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 600 * MiB);
    compute(s, 1000, 2);
    tensor_act(s, SA_FREE, SS_COMPUTE, 2, 0);
}

/* ---- the autograd hooks' host costs (sim/exec_fw.c; profile host.ckpt_*, host.save_*) ---- */

/* ops 1, 2 forward in layer 0 (1 reads the parameter 100 and makes 101, 2 reads 101 and makes
 * 102), 3, 4 backward (3 reads 102 and 101, makes the gradient 103; 4 reads 103 and 100): the
 * saved tensors are 100, 101, 102 (a backward op reads them, none made them); each forward op
 * saves one, op 3 reads back two, op 4 one. Host 100 us per op, kernels 10 us: host-bound. */
static trace_t *hook_trace(void)
{
    static const uint64_t in1[] = {100}, out1[] = {101}, in2[] = {101}, out2[] = {102},
                          in3[] = {102, 101}, out3[] = {103}, in4[] = {103, 100}, out4[] = {104};
    static const uint64_t *ins[] = {in1, in2, in3, in4}, *outs[] = {out1, out2, out3, out4};
    static const uint32_t nin[] = {1, 1, 2, 2};
    static const uint64_t made[] = {100, 101, 102, 103, 104};
    static const trace_class cls[] = {TC_PARAM, TC_ACT_SKEL, TC_ACT_SKEL, TC_GRAD, TC_GRAD};
    trace_t *t = trace_new();
    for (int i = 0; i < 4; i++) {
        trace_rec r;
        memset(&r, 0, sizeof r);
        if (i == 0 || i == 2) {
            r.type = TR_MARK; /* the phases: pol_saved_tensors reads them */
            r.u.mark.kind = TM_PHASE;
            r.u.mark.value = i == 0 ? TP_FWD : TP_BWD;
            trace_append(t, &r);
        }
        for (int k = 0; k < 5; k++) { /* each op's output (and the parameter) made before it */
            if (!(k == i + 1 || (i == 0 && k == 0))) continue;
            trace_alloc_rec(&r, made[k], 1024, cls[k], 0, -1, 0, "t");
            trace_append(t, &r);
        }
        memset(&r, 0, sizeof r);
        r.type = TR_OP;
        r.u.op.id = (uint64_t)(i + 1);
        r.u.op.kind = TK_ELEM;
        r.u.op.phase = i < 2 ? TP_FWD : TP_BWD;
        r.u.op.layer = 0;
        r.u.op.dur_us = -1;
        r.u.op.host_us = 100;
        r.u.op.n_in = nin[i];
        r.u.op.in = ins[i];
        r.u.op.n_out = 1;
        r.u.op.out = outs[i];
        trace_append(t, &r);
    }
    return t;
}

static void layer_op(schedule_t *s, int64_t op, int rec)
{
    sched_action a = base(SA_COMPUTE, SS_COMPUTE);
    a.dur_us = 10;
    a.op = op;
    a.layer = 0;
    a.recompute = (uint8_t)rec;
    add(s, a);
}

static void test_hook_costs(void)
{
    trace_t *t = hook_trace();
    sim_result r;
    /* checkpointed: forward 1 2, replay 1 2, backward 3 4 */
    schedule_t *ck = sched_new();
    layer_op(ck, 1, 0);
    layer_op(ck, 2, 0);
    layer_op(ck, 1, 1);
    layer_op(ck, 2, 1);
    layer_op(ck, 3, 0);
    layer_op(ck, 4, 0);
    machine_t m0 = test_machine(), m = test_machine();
    m.host_ckpt_fwd_layer_us = 1000;
    m.host_ckpt_fwd_save_us = 10;
    m.host_recompute_layer_us = 500;
    m.host_ckpt_bwd_save_us = 20;
    m.host_save_pack_us = 50;
    m.host_save_unpack_us = 30;
    double plain = host_run(ck, t, &m0, 0, &r), with = host_run(ck, t, &m, 0, &r);
    TAP_OK(near(plain, 610), "checkpointed, no hook costs: six ops' host time and the last "
           "kernel (%.3f us)", plain);
    /* layer 1000 + 2 saves x 10 + replay 500 + 3 read back x 20; no save_on_cpu costs (no
     * blocking copies) */
    TAP_OK(near(with - plain, 1580), "checkpointed: the wrapper, the packs, the replay and the "
           "unpacks add %.3f us (1580)", with - plain);
    double ahead = host_run(ck, t, &m, 8, &r);
    TAP_OK(near(ahead, with), "--issue-ahead 8 pays the same hook costs (%.3f us)", ahead);

    /* save_on_cpu: forward 1, the blocking copy of 101, 2, backward 3 4 (no replay) */
    schedule_t *sv = sched_new();
    layer_op(sv, 1, 0);
    tensor_act(sv, SA_HOST_ALLOC, SS_COMPUTE, 101, 1000);
    sched_action c = base(SA_COPY_D2H, SS_COMPUTE);
    c.tensor = 101;
    c.bytes = 1000;
    c.host_wait = 1;
    add(sv, c);
    layer_op(sv, 2, 0);
    layer_op(sv, 3, 0);
    layer_op(sv, 4, 0);
    tensor_act(sv, SA_HOST_FREE, SS_COMPUTE, 101, 0);
    plain = host_run(sv, t, &m0, 0, &r);
    with = host_run(sv, t, &m, 0, &r);
    /* one pack 50 + 3 read back x 30; the checkpoint costs need a replayed layer */
    TAP_OK(near(with - plain, 140), "save_on_cpu: the pack after its copy and the unpacks add "
           "%.3f us (140)", with - plain);

    /* the trace's own measured costs (a capture's captured.ckpt_*_layer_us): once per
     * layer in the forward and at the recomputation's start, instead of the profile's
     * layer, save and replay terms; save_on_cpu's unchanged */
    double ck_before = host_run(ck, t, &m, 0, &r);
    trace_set_meta(t, "captured.ckpt_fwd_layer_us", "700");
    trace_set_meta(t, "captured.ckpt_bwd_layer_us", "300");
    double ck_plain = host_run_measured(ck, t, &m0, &r);   /* m0: no profile costs at all */
    double meas = host_run_measured(ck, t, &m, &r);
    TAP_OK(near(ck_plain, 1610) && near(meas, 1610), "checkpointed, measured in the trace: "
           "700 in the forward + 300 at the replay, no per-save terms, with or without the "
           "profile's (%.3f, %.3f us)", ck_plain, meas);
    double dflt = host_run(ck, t, &m, 0, &r);
    TAP_OK(near(dflt, ck_before), "by default the profile's costs, the trace's measured "
           "ones left aside (%.3f us, %.3f without them)", dflt, ck_before);
    double sv_meas = host_run_measured(sv, t, &m, &r);
    TAP_OK(near(sv_meas - plain, 140), "save_on_cpu keeps the profile's costs (%.3f us)",
           sv_meas - plain);
    trace_set_meta(t, "captured.ckpt_bwd_layer_us", "-3");
    ms_error err;
    ms_error_clear(&err);
    sim_opts o;
    sim_opts_default(&o);
    o.trace = t;
    o.ckpt_host_measured = 1;
    TAP_OK(run(ck, &m, &o, &r, &err) == MS_ERR_PARSE && strstr(err.msg, "ckpt_bwd_layer_us"),
           "a negative measured cost refused, naming the key (%s)", err.msg);

    /* a trace without host times: the profile's hook costs change nothing */
    double z[] = {0, 0, 0, 0};
    trace_t *t0 = host_trace(4, z, NULL);
    sim_result a0, a1;
    host_run(ck, t0, &m0, 0, &a0);
    host_run(ck, t0, &m, 0, &a1);
    TAP_OK(a0.iter_time_s == a1.iter_time_s, "no host times: no hook costs");
    trace_free(t0);
    sched_free(ck);
    sched_free(sv);
    trace_free(t);
}

static void test_issue_record_stream(void)
{
    machine_t m = test_machine();
    m.gpu_hbm_bytes = GiB;
    schedule_t *plain = sched_new(), *side = sched_new();
    side_free_sched(plain, 0);
    side_free_sched(side, 1);
    TAP_OK(valid(plain) && valid(side), "record_stream: schedules valid");
    sim_result r0, r1, r2, r3;
    ms_error err;
    run(side, &m, NULL, &r0, &err);
    run_issue(plain, &m, 8, 0, NULL, &r1, &err);
    ms_status st = run_issue(side, &m, 8, 0, NULL, &r2, &err);
    TAP_OK(r0.status == RS_OK && r0.astats.num_alloc_retries == 0 &&
               r0.astats.num_segment_allocs == 1,
           "stream time: side_use changes nothing (the GPU is at the free)");
    TAP_OK(r1.status == RS_OK && r1.deferred_frees == 0 && r1.astats.num_alloc_retries == 0 &&
               r1.astats.num_segment_allocs == 1,
           "issue time without side_use: the compute stream's block is reused at once");
    TAP_OK(st == MS_OK && r2.status == RS_OK && r2.deferred_frees == 1 &&
               r2.astats.num_alloc_retries == 1 && r2.astats.num_segment_allocs == 2 &&
               r2.astats.num_segment_frees == 1 && r2.astats.num_ooms == 0,
           "issue time with side_use: deferred, one release-and-retry (%llu), the segment "
           "freed and made again",
           (unsigned long long)r2.astats.num_alloc_retries);
    /* the host waited for the first kernel (1000 us) inside the synchronizing call */
    TAP_OK(r2.alloc_time_s * 1e6 >= 1000 - 1e-6 && r2.iter_time_s >= r1.iter_time_s,
           "the retry's synchronize drains the GPU queue on the host (%.1f us)",
           r2.alloc_time_s * 1e6);
    sim_opts o;
    sim_opts_default(&o);
    o.allocator = "static";
    run_issue(side, &m, 8, 0, &o, &r3, &err);
    TAP_OK(r3.status == RS_OK && r3.deferred_frees == 0,
           "the static arena ignores side_use (no recordStream on planned addresses)");
    sched_free(plain);
    sched_free(side);
}

/* Per-stream pools (ALLOC.pool): a block freed back to a side stream's pool is not reused by
 * the compute stream's next request of the same size. */
static void test_pool_streams(void)
{
    machine_t m = test_machine();
    sim_result r[2];
    ms_error err;
    for (int k = 0; k < 2; k++) {
        schedule_t *s = sched_new();
        sched_action a = base(SA_ALLOC, SS_COMPUTE);
        a.tensor = 1;
        a.bytes = 100 * MiB;
        a.pool = k;
        add(s, a);
        compute(s, 10, 1);
        tensor_act(s, SA_FREE, SS_COMPUTE, 1, 0);
        tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 100 * MiB);
        compute(s, 10, 2);
        tensor_act(s, SA_FREE, SS_COMPUTE, 2, 0);
        run(s, &m, NULL, &r[k], &err);
        sched_free(s);
    }
    TAP_OK(r[0].status == RS_OK && r[0].astats.num_segment_allocs == 1 &&
               r[0].peak_reserved_bytes == 100 * MiB,
           "same pool: the freed block is reused");
    TAP_OK(r[1].status == RS_OK && r[1].astats.num_segment_allocs == 2 &&
               r[1].peak_reserved_bytes == 200 * MiB,
           "pool 1 (a side stream): the compute stream cannot reuse its block");
}

/* The first time in a memory CSV at which allocated bytes reach `bytes` (-1: never). */
static double first_time_allocated(const char *path, uint64_t bytes)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    double when = -1;
    if (fgets(line, sizeof line, f)) {
        while (fgets(line, sizeof line, f)) {
            double t;
            unsigned long long a;
            if (sscanf(line, "%lf,%llu", &t, &a) == 2 && a >= bytes) {
                when = t;
                break;
            }
        }
    }
    fclose(f);
    return when;
}

/* compute: ALLOC A, C1000, RECORD e0, FREE A; h2d: WAIT e0, ALLOC B. At stream time B is
 * allocated at t=1000, after A's free; the host issues B's ALLOC at t=0, while A lives. */
static void test_issue_order(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 256 * MiB);
    compute(s, 1000, 1);
    event_act(s, SA_RECORD, SS_COMPUTE, e0);
    event_act(s, SA_WAIT, SS_H2D, e0);
    tensor_act(s, SA_ALLOC, SS_H2D, 2, 256 * MiB);
    tensor_act(s, SA_FREE, SS_COMPUTE, 1, 0);
    tensor_act(s, SA_FREE, SS_H2D, 2, 0);
    TAP_OK(valid(s), "issue order: schedule valid");
    sim_opts o;
    sim_result r0, r1;
    ms_error err;
    sim_opts_default(&o);
    o.memcsv_path = tmp_path("order0.csv");
    run(s, &m, &o, &r0, &err);
    double t0 = first_time_allocated(o.memcsv_path, 256 * MiB);
    double tb0 = first_time_allocated(o.memcsv_path, 512 * MiB);
    sim_opts_default(&o);
    o.memcsv_path = tmp_path("order1.csv");
    ms_status st = run_issue(s, &m, 8, 0, &o, &r1, &err);
    double tb1 = first_time_allocated(o.memcsv_path, 512 * MiB);
    TAP_OK(r0.status == RS_OK && r0.peak_allocated_bytes == 256 * MiB && t0 == 0 && tb0 < 0,
           "stream time: B allocated at t=1000 after A's free; peak allocated 256 MiB");
    TAP_OK(st == MS_OK && r1.status == RS_OK && r1.peak_allocated_bytes == 512 * MiB &&
               tb1 == 0,
           "issue time: B allocated at t=0 while A lives; peak allocated 512 MiB");
    TAP_OK(near_us(r0.iter_time_s, 1000) && near_us(r1.iter_time_s, 1000) &&
               r1.issue_ahead == 8 && r0.issue_ahead == 0,
           "same iteration time; the result names the bound (8, 0)");
    /* A (compute stream, used by compute only) is freed at once; B (h2d stream, the compute
     * stream counts as a user of every block) waits for the compute stream's work. */
    TAP_OK(r1.deferred_frees == 1 && r0.deferred_frees == 0, "one deferred free (B's)");
    sched_free(s);
}

/* compute: ALLOC A (1e8 B), C100, RECORD e0, C3000, C10, ALLOC B (1e8 B), C10;
 * d2h: WAIT e0, HOST_ALLOC A, COPY_D2H A (2000 us at 50 GB/s: t=100..2100), FREE A.
 * The FREE is deferred until the copy has run; with one compute action ahead the host
 * issues B's ALLOC when C3000 ends (t=3100): A goes back then and B reuses its block. With
 * eight ahead the host allocates B at t=0, while A's free is pending: two blocks. */
static void test_issue_deferred_free(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 100000000);
    compute(s, 100, 1);
    event_act(s, SA_RECORD, SS_COMPUTE, e0);
    event_act(s, SA_WAIT, SS_D2H, e0);
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 1, 100000000);
    tensor_act(s, SA_COPY_D2H, SS_D2H, 1, 100000000);
    tensor_act(s, SA_FREE, SS_D2H, 1, 0);
    compute(s, 3000, 2);
    compute(s, 10, 3);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 100000000);
    compute(s, 10, 4);
    TAP_OK(valid(s), "deferred free: schedule valid");
    sim_opts o;
    sim_result r1, r8;
    ms_error err;
    sim_opts_default(&o);
    o.memcsv_path = tmp_path("defer1.csv");
    ms_status st = run_issue(s, &m, 1, 0, &o, &r1, &err);
    uint64_t blk = r1.peak_allocated_bytes;
    TAP_OK(st == MS_OK && r1.status == RS_OK && r1.deferred_frees == 1 && blk >= 100000000 &&
               r1.astats.num_segment_allocs == 1,
           "ahead 1: A's free deferred, then B reuses A's block (one segment)");
    /* memory CSV: A's release and B's allocation both at t=3100 (the next ALLOC), none at
     * the copy's end (2100) */
    FILE *f = fopen(o.memcsv_path, "r");
    char line[256];
    int at_copy_end = 0, at_alloc = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "2100.000,", 9)) at_copy_end = 1;
        if (!strncmp(line, "3100.000,", 9)) at_alloc = 1;
    }
    if (f) fclose(f);
    TAP_OK(!at_copy_end && at_alloc,
           "the block goes back at the next allocation (t=3100), not when the copy ends");
    TAP_OK(near_us(r1.iter_time_s, 3120) && near_us(r1.d2h_busy_s, 2000),
           "ahead 1: iteration 3120 us, copy 2000 us");
    st = run_issue(s, &m, 8, 0, NULL, &r8, &err);
    TAP_OK(st == MS_OK && r8.status == RS_OK && r8.peak_allocated_bytes == 2 * blk &&
               r8.astats.num_segment_allocs == 2,
           "ahead 8: B allocated while the copy still uses A: two blocks, two segments");
    sim_result r0;
    run(s, &m, NULL, &r0, &err);
    TAP_OK(r0.peak_allocated_bytes == blk && r0.astats.num_segment_allocs == 1,
           "stream time: A freed when the d2h stream passes the FREE; B reuses it");
    sched_free(s);
}

/* Ten compute actions of 100 us, an ALLOC after the fifth. With two ahead the host waits
 * for each of the last eight issues; it issues the fifth when the third ends (t=300). */
static void test_issue_ahead_bound(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    for (int k = 0; k < 10; k++) {
        compute(s, 100, k);
        if (k == 4) tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 64 * MiB);
    }
    sim_opts o;
    sim_result r;
    ms_error err;
    sim_opts_default(&o);
    o.memcsv_path = tmp_path("ahead2.csv");
    ms_status st = run_issue(s, &m, 2, 0, &o, &r, &err);
    TAP_OK(st == MS_OK && r.issue_waits == 8 && near_us(r.iter_time_s, 1000) && r.stall_s == 0,
           "ahead 2: 8 host waits, iteration 1000 us, no stall (%llu waits)",
           (unsigned long long)r.issue_waits);
    TAP_OK(first_time_allocated(o.memcsv_path, 64 * MiB) == 300,
           "the ALLOC after the fifth compute action runs at t=300 (%.3f)",
           first_time_allocated(o.memcsv_path, 64 * MiB));
    sim_opts_default(&o);
    o.memcsv_path = tmp_path("ahead_unb.csv");
    st = run_issue(s, &m, SIM_ISSUE_UNBOUNDED, 0, &o, &r, &err);
    TAP_OK(st == MS_OK && r.issue_waits == 0 && r.issue_ahead == -1 &&
               first_time_allocated(o.memcsv_path, 64 * MiB) == 0,
           "unbounded: no wait, the ALLOC at t=0");
    /* Issue cost 150 us > each compute action: the GPU waits for the host (a stall). */
    st = run_issue(s, &m, 2, 150, NULL, &r, &err);
    TAP_OK(st == MS_OK && near_us(r.iter_time_s, 1600) && near_us(r.stall_s, 600) &&
               near_us(r.issue_busy_s, 1500) && r.issue_waits == 0,
           "issue cost 150 us: host-bound, kernels at 150 + 150 k, iteration 1600 us, stall "
           "600 us, host busy 1500 us");
    sched_free(s);
}

/* cudaMalloc 100 us. ALLOC A, C50, ALLOC B, C50: at stream time the compute stream pays
 * both calls (300 us); on the host the second call overlaps the first kernel. */
static void test_issue_alloc_latency(void)
{
    machine_t m = test_machine();
    m.cuda_malloc_base_us = 100;
    schedule_t *s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 64 * MiB);
    compute(s, 50, 1);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 64 * MiB);
    compute(s, 50, 2);
    sim_result r0, r1, r2;
    ms_error err;
    run(s, &m, NULL, &r0, &err);
    TAP_OK(near_us(r0.iter_time_s, 300) && near_us(r0.alloc_time_s, 200) && r0.stall_s == 0,
           "stream time: 100 + 50 + 100 + 50 us, allocator time on the stream");
    run_issue(s, &m, 8, 0, NULL, &r1, &err);
    TAP_OK(near_us(r1.iter_time_s, 250) && near_us(r1.alloc_time_s, 200) &&
               near_us(r1.issue_busy_s, 200) && near_us(r1.compute_busy_s, 100) &&
               near_us(r1.stall_s, 150),
           "host: kernels at 100..150 and 200..250; allocator time 200 us on the host, the "
           "compute stream starved 150 us");
    run_issue(s, &m, 8, 5, NULL, &r2, &err);
    TAP_OK(near_us(r2.iter_time_s, 260) && near_us(r2.issue_busy_s, 210),
           "issue cost 5 us per kernel: iteration 260 us, host busy 210 us");
    sched_free(s);
}

/* test_sync_blocks on the host thread: the retry's cudaFree makes the host wait until the
 * first H2D copy (100..435.54 us, issued after cudaMalloc of X) has run, then pay 300 us;
 * the kernel and the second copy are issued after that. */
static void test_issue_sync(void)
{
    machine_t m = test_machine();
    m.gpu_hbm_bytes = 2 * GiB;
    m.cuda_malloc_base_us = 100;
    m.cuda_free_base_us = 200;
    schedule_t *s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 10, 16 * MiB);
    tensor_act(s, SA_HOST_ALLOC, SS_H2D, 10, 100000000);
    tensor_act(s, SA_COPY_H2D, SS_H2D, 10, 16 * MiB);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, GiB);
    tensor_act(s, SA_FREE, SS_COMPUTE, 1, 0);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 3 * GiB / 2);
    compute(s, 50, 1);
    tensor_act(s, SA_COPY_H2D, SS_H2D, 10, 16 * MiB);
    sim_opts o;
    sim_opts_default(&o);
    o.timeline_path = tmp_path("issue_sync.json");
    sim_result r;
    ms_error err;
    ms_status st = run_issue(s, &m, 8, 0, &o, &r, &err);
    double copy_us = 16.0 * MiB / 50e9 * 1e6;
    double sync_end = 100 + copy_us + 300;
    TAP_OK(st == MS_OK && r.status == RS_OK && r.astats.num_alloc_retries == 1 &&
               r.issue_waits == 1,
           "one retry, one host wait (the synchronize's drain)");
    TAP_OK(near_us(r.iter_time_s, sync_end + copy_us) &&
               near_us(r.alloc_time_s, 100 + 100 + (sync_end - 200)),
           "second copy issued after the synchronize; allocator time = 2 cudaMalloc + drain + "
           "charged cost");
    TAP_OK(file_has(o.timeline_path, "\"host thread\"") &&
               file_has(o.timeline_path, "sync (alloc t2)"),
           "timeline: a host thread track with the synchronizing call");
    sched_free(s);
}

/* An allocation that fails while a free is deferred: the host waits for the copy that
 * holds the block back, then retries. Same for host memory. */
static void test_issue_oom_drain(void)
{
    machine_t m = test_machine();
    m.gpu_hbm_bytes = GiB;
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s), e1 = sched_new_event(s);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 600 * MiB);
    compute(s, 10, 1);
    event_act(s, SA_RECORD, SS_COMPUTE, e0);
    event_act(s, SA_WAIT, SS_D2H, e0);
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 1, 600 * MiB);
    tensor_act(s, SA_COPY_D2H, SS_D2H, 1, 600 * MiB);
    tensor_act(s, SA_FREE, SS_D2H, 1, 0);
    event_act(s, SA_RECORD, SS_D2H, e1);
    event_act(s, SA_WAIT, SS_COMPUTE, e1);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 600 * MiB);
    compute(s, 10, 2);
    TAP_OK(valid(s), "oom drain: schedule valid");
    double end = 10 + 600.0 * MiB / 50e9 * 1e6 + 10;
    sim_result r0, r1;
    ms_error err;
    run(s, &m, NULL, &r0, &err);
    ms_status st = run_issue(s, &m, 8, 0, NULL, &r1, &err);
    TAP_OK(r0.status == RS_OK && near_us(r0.iter_time_s, end), "stream time: fits, %.1f us",
           end);
    TAP_OK(st == MS_OK && r1.status == RS_OK && near_us(r1.iter_time_s, end) &&
               r1.issue_waits == 1 && r1.deferred_frees == 1 && r1.astats.num_ooms == 1 &&
               r1.astats.num_segment_allocs == 1,
           "issue time: B fails while A's free waits for the copy; the host waits, retries, "
           "reuses A's block");
    sched_free(s);

    /* host memory: 1 GiB per GPU; H2 needs H1's pinned memory, which its copy still uses */
    s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 600 * MiB);
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 1, 600 * MiB);
    tensor_act(s, SA_COPY_D2H, SS_D2H, 1, 600 * MiB);
    tensor_act(s, SA_HOST_FREE, SS_D2H, 1, 0);
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 2, 600 * MiB);
    sim_opts o;
    sim_opts_default(&o);
    o.host_capacity_bytes = GiB;
    st = run_issue(s, &m, 8, 0, &o, &r1, &err);
    TAP_OK(st == MS_OK && r1.status == RS_OK && r1.host_peak_bytes == 600 * MiB &&
               r1.issue_waits == 1,
           "pinned memory: the host waits for the copy, then reuses the 600 MiB");
    sched_free(s);
}

/* Issue model: the same results and bytes twice; issue_ahead 0 is the stream-time model
 * whatever issue_us says; the synthetic schedule runs fast and allocates more ahead. */
static void test_issue_determinism(void)
{
    machine_t m = test_machine();
    m.link_small_copy_us = 8;
    m.cuda_malloc_base_us = 60;
    m.cuda_free_base_us = 80;
    size_t n;
    schedule_t *s = synthetic(16, &n);
    const char *tl[2] = { tmp_path("idet1.json"), tmp_path("idet2.json") };
    sim_result r[2];
    char *row[2];
    size_t rn[2];
    ms_error err;
    for (int k = 0; k < 2; k++) {
        sim_opts o;
        sim_opts_default(&o);
        o.timeline_path = tl[k];
        if (run_issue(s, &m, 4, 3, &o, &r[k], &err) != MS_OK) TAP_NOTE("run failed: %s", err.msg);
        FILE *f = open_memstream(&row[k], &rn[k]);
        res_csv_row(f, &r[k]);
        fclose(f);
    }
    char *a, *b;
    size_t na = read_file(tl[0], &a), nb = read_file(tl[1], &b);
    TAP_OK(r[0].status == RS_OK && rn[0] == rn[1] && !memcmp(row[0], row[1], rn[0]) && na > 0 &&
               na == nb && !memcmp(a, b, na),
           "issue model: identical results and timeline bytes twice");
    TAP_OK(r[0].issue_waits > 0 && r[0].deferred_frees > 0 && r[0].issue_busy_s > 0,
           "synthetic: host waits %llu, deferred frees %llu, host busy %.6f s",
           (unsigned long long)r[0].issue_waits, (unsigned long long)r[0].deferred_frees,
           r[0].issue_busy_s);
    free(a);
    free(b);
    free(row[0]);
    free(row[1]);
    sim_result d0, d1, unb;
    sim_opts o;
    sim_opts_default(&o);
    o.issue_us = 17;
    run(s, &m, NULL, &d0, &err);
    run(s, &m, &o, &d1, &err);
    FILE *f = open_memstream(&row[0], &rn[0]);
    res_csv_row(f, &d0);
    fclose(f);
    f = open_memstream(&row[1], &rn[1]);
    res_csv_row(f, &d1);
    fclose(f);
    TAP_OK(rn[0] == rn[1] && !memcmp(row[0], row[1], rn[0]) && d0.issue_busy_s == 0,
           "issue_ahead 0: the stream-time model, issue_us ignored");
    free(row[0]);
    free(row[1]);
    run_issue(s, &m, SIM_ISSUE_UNBOUNDED, 3, NULL, &unb, &err);
    TAP_OK(unb.status == RS_OK && unb.peak_allocated_bytes > d0.peak_allocated_bytes,
           "unbounded run-ahead allocates more than stream time (%.0f vs %.0f MiB)",
           (double)unb.peak_allocated_bytes / MiB, (double)d0.peak_allocated_bytes / MiB);
    sched_free(s);

    s = synthetic(54, &n);
    double best = 1e9;
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        run_issue(s, &m, 8, 3, NULL, &unb, &err);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    TAP_NOTE("issue model: %zu actions in %.3f ms (best of 5), simulated %.3f ms", n,
             best * 1e3, unb.iter_time_s * 1e3);
    TAP_OK(unb.status == RS_OK && best < 0.1, "issue model: 5k actions in under 100 ms");
    sched_free(s);
}

/* Errors keep their messages with the host thread: a deadlock, a free of nothing. */
static void test_issue_errors(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s), e1 = sched_new_event(s);
    compute(s, 10, 1);
    event_act(s, SA_WAIT, SS_COMPUTE, e1);
    event_act(s, SA_RECORD, SS_COMPUTE, e0);
    event_act(s, SA_WAIT, SS_D2H, e0);
    event_act(s, SA_RECORD, SS_D2H, e1);
    compute(s, 10, 2);
    compute(s, 10, 3);
    sim_result r;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = run_issue(s, &m, 1, 3, NULL, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && r.status == RS_ERROR && strstr(err.msg, "deadlock") &&
               strstr(err.msg, "action 1"),
           "issue model: a circular wait is still reported: %s", err.msg);
    sched_free(s);
    s = sched_new();
    compute(s, 10, 1);
    tensor_act(s, SA_FREE, SS_COMPUTE, 99, 0);
    st = run_issue(s, &m, 8, 3, NULL, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "action 1") && strstr(err.msg, "not allocated"),
           "issue model: free of an unknown tensor: %s", err.msg);
    sched_free(s);
}

static void test_issue_csv(void)
{
    char *buf;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    res_csv_header(f);
    fclose(f);
    TAP_OK(strstr(buf, ",failure,issue_ahead,issue_busy_s,issue_waits,deferred_frees,"
                       "peak_params_bytes,peak_grads_bytes,peak_optstates_bytes,peak_chunks_bytes,"
                       "peak_act_skel_bytes,peak_act_trans_bytes,peak_workspace_bytes,"
                       "peak_rbuf_bytes,peak_idle_bytes,peak_staging_bytes,peak_other_bytes,"
                       "peak_kinds_at_failure\n") != NULL,
           "CSV: after the failure the issue model's columns, then what the peak holds by kind");
    free(buf);
}

/* cuMemSetAccess paced against the link (sim/exec.c, set_access_step_us): with the expandable
 * allocator (20 MiB pages) a 30 MB tensor maps 2 pages while nothing is copied (2 x 30 us);
 * a 50 MB offload of it then runs 1000 us; 100 us into it a 60 MB tensor maps 3 more pages,
 * each at the slow 1000 us while the copy is on the link: the first starts at 160 us and ends
 * at 1160, after the copy (ending at 1060), so the next two go at 30 us: 1000 + 60. In both
 * issue models. Without the slow rate the three cost 90 us. */
static void test_set_access_paced(void)
{
    for (int slow = 0; slow < 2; slow++)
        for (int issue = 0; issue < 2; issue++) {
            machine_t m = test_machine();
            m.vmm_set_access_us = 30;
            m.vmm_set_access_d2h_us = slow ? 1000 : 0;
            schedule_t *s = sched_new();
            uint32_t e1 = sched_new_event(s);
            tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 30000000);
            event_act(s, SA_RECORD, SS_COMPUTE, e1);
            event_act(s, SA_WAIT, SS_D2H, e1);
            tensor_act(s, SA_HOST_ALLOC, SS_D2H, 1, 50000000);
            tensor_act(s, SA_COPY_D2H, SS_D2H, 1, 50000000);
            compute(s, 100, 1);
            tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 60000000);
            compute(s, 10, 2);
            sim_opts o;
            sim_opts_default(&o);
            o.allocator = "expandable";
            o.issue_ahead = issue ? 8 : 0;
            o.issue_us = 0;
            sim_result r;
            ms_error err;
            ms_status st = run(s, &m, &o, &r, &err);
            double want = 60 + (slow ? 1000 + 60 : 90);
            TAP_OK(st == MS_OK && r.status == RS_OK && near_us(r.alloc_time_s, want),
                   "set-access %s, %s: allocator time %.0f us (got %.1f)",
                   slow ? "slow during the copy" : "at the plain rate",
                   issue ? "host issue model" : "stream time", want, r.alloc_time_s * 1e6);
            sched_free(s);
        }
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/memsim-test_exec_host-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot make a temporary directory\n");
        return 99;
    }
    test_hook_costs();
    test_issue_order();
    test_issue_deferred_free();
    test_issue_ahead_bound();
    test_issue_alloc_latency();
    test_issue_sync();
    test_issue_oom_drain();
    test_issue_determinism();
    test_issue_errors();
    test_issue_csv();
    test_issue_record_stream();
    test_pool_streams();
    test_set_access_paced();
    test_host_times();
    tmp_cleanup();
    return tap_done();
}

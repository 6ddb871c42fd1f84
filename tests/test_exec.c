/* test_exec.c — tests of the simulator's schedule executor (sim/exec.h) on small hand-built
 * schedules with hand-computed times, in stream time: compute only, a copy beside compute,
 * RECORD/WAIT across streams, a DHA kernel slowed by a concurrent copy, a cudaFree
 * synchronize holding every stream, the host CPU as a FIFO, OOM and out-of-host-memory as
 * results, the last iteration between marks, deadlock reported, determinism of results and
 * output bytes, the results CSV and the executor's speed on a synthetic 5,000-action
 * schedule. The host side (host times, the issue model) is tests/test_exec_host.c. Uses the
 * "caching" allocator. Part of `make check`. */
#define _POSIX_C_SOURCE 200809L
#include "sim/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planners/lower.h"
#include "tests/tap.h"

#include "tests/exec_util.h"

/* ---- tests ---- */

static void test_compute_only(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    compute(s, 100, 1);
    compute(s, 200, 2);
    recompute(s, 300);
    sim_result r;
    ms_error err;
    ms_status st = run(s, &m, NULL, &r, &err);
    TAP_OK(st == MS_OK && r.status == RS_OK, "compute only: runs");
    TAP_OK(near_us(r.iter_time_s, 600), "compute only: iteration = 100 + 200 + 300 us");
    TAP_OK(near_us(r.compute_busy_s, 600) && near_us(r.recompute_s, 300) && r.stall_s == 0,
           "compute busy 600 us, recompute 300 us, no stall");
    TAP_OK(r.h2d_busy_s == 0 && r.d2h_busy_s == 0 && r.host_busy_s == 0, "nothing else busy");
    TAP_OK(strcmp(r.allocator, "caching") == 0 && strcmp(r.machine, "testbox") == 0,
           "allocator and machine named in the result");
    sched_free(s);
}

/* A 50 MB D2H copy (1000 us at 50 GB/s, plus 10 us latency) beside 1000 us of compute. */
static void test_copy_overlap(void)
{
    machine_t m = test_machine();
    m.link_small_copy_us = 10;
    schedule_t *s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 50000000);
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 1, 50000000);
    tensor_act(s, SA_COPY_D2H, SS_D2H, 1, 50000000);
    compute(s, 1000, 1);
    TAP_OK(valid(s), "copy overlap: schedule valid");
    sim_result r;
    ms_error err;
    run(s, &m, NULL, &r, &err);
    TAP_OK(near_us(r.iter_time_s, 1010), "copy overlaps compute: iteration 1010 us, not 2010");
    TAP_OK(near_us(r.d2h_busy_s, 1000) && near_us(r.compute_busy_s, 1000),
           "D2H busy 1000 us (latency excluded), compute 1000 us");
    TAP_OK(r.host_peak_bytes == 50000000 && r.peak_allocated_bytes >= 50000000,
           "host peak 50 MB; device peak >= 50 MB");
    sched_free(s);
}

/* compute: C500, RECORD e0, C300, WAIT e1, C100; d2h: WAIT e0, copy 1000 us, RECORD e1.
 * The copy runs 500..1500; compute waits 800..1500 (stall 700) and ends at 1600. */
static void test_wait_record(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s), e1 = sched_new_event(s);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 7, 50000000);
    compute(s, 500, 1);
    event_act(s, SA_RECORD, SS_COMPUTE, e0);
    event_act(s, SA_WAIT, SS_D2H, e0);
    tensor_act(s, SA_COPY_D2H, SS_D2H, 7, 50000000);
    event_act(s, SA_RECORD, SS_D2H, e1);
    compute(s, 300, 2);
    event_act(s, SA_WAIT, SS_COMPUTE, e1);
    compute(s, 100, 3);
    tensor_act(s, SA_FREE, SS_COMPUTE, 7, 0);
    TAP_OK(valid(s), "wait/record: schedule valid");
    sim_result r;
    ms_error err;
    run(s, &m, NULL, &r, &err);
    TAP_OK(near_us(r.iter_time_s, 1600), "wait/record: iteration 1600 us");
    TAP_OK(near_us(r.stall_s, 700), "compute stalled 700 us on the WAIT");
    TAP_OK(near_us(r.d2h_busy_s, 1000) && near_us(r.compute_busy_s, 900),
           "D2H busy 1000 us from t=500; compute 900 us");
    sched_free(s);
}

/* A DHA kernel reading 4 MB (alone: 4 MB / 40 GB/s = 100 us = its compute time) beside a
 * 10 MB H2D copy: max-min gives 25 + 25 GB/s on the 50 GB/s direction, so the kernel takes
 * 4 MB / 25 GB/s = 160 us; the copy has 6 MB left and ends 120 us later, at 280 us. */
static void test_dha_slowed(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 10000000);
    tensor_act(s, SA_HOST_ALLOC, SS_H2D, 1, 10000000);
    tensor_act(s, SA_COPY_H2D, SS_H2D, 1, 10000000);
    dha(s, 100, 4000000, 0, 1.0);
    TAP_OK(valid(s), "dha: schedule valid");
    sim_result r;
    ms_error err;
    run(s, &m, NULL, &r, &err);
    TAP_OK(near_us(r.compute_busy_s, 160), "DHA kernel slowed to 160 us by the copy");
    TAP_OK(near_us(r.iter_time_s, 280) && near_us(r.h2d_busy_s, 280),
           "copy speeds up after the kernel: ends at 280 us");
    sched_free(s);

    /* Alone, efficiency 0.5: 4 MB / 20 GB/s = 200 us > 100 us of compute; a write of
     * 2 MB at 20 GB/s (100 us) runs beside it on the other direction. */
    s = sched_new();
    dha(s, 100, 4000000, 2000000, 0.5);
    run(s, &m, NULL, &r, &err);
    TAP_OK(near_us(r.iter_time_s, 200) && near_us(r.d2h_busy_s, 100),
           "DHA alone at efficiency 0.5: 200 us; write flow 100 us");
    sched_free(s);

    /* Compute-bound: 1 MB at 40 GB/s = 25 us < 100 us. */
    s = sched_new();
    dha(s, 100, 1000000, 0, 1.0);
    run(s, &m, NULL, &r, &err);
    TAP_OK(near_us(r.iter_time_s, 100) && near_us(r.h2d_busy_s, 25),
           "compute-bound DHA kernel takes its compute time");
    sched_free(s);
}

/* Device capacity 2 GiB, cudaMalloc 100 us, cudaFree 200 us. compute: ALLOC buf 16 MiB
 * (cudaMalloc, 0..100), ALLOC A 1 GiB (100..200), FREE A (cached), ALLOC B 1.5 GiB at 200:
 * the cache cannot serve it and cudaMalloc fails, so the allocator frees A's cached segment
 * (cudaFree: a synchronize) and retries (another cudaMalloc): 300 us charged. The H2D
 * stream's first copy (16 MiB at 50 GB/s, 0..335.54 us) must finish first, then the 300 us
 * are paid; meanwhile no stream starts anything, so the second copy waits to 635.54 us. */
static void test_sync_blocks(void)
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
    TAP_OK(valid(s), "sync: schedule valid");
    sim_opts o;
    sim_opts_default(&o);
    o.timeline_path = tmp_path("sync_timeline.json");
    sim_result r;
    ms_error err;
    ms_status st = run(s, &m, &o, &r, &err);
    double copy_us = 16.0 * MiB / 50e9 * 1e6;
    double sync_end = copy_us + 300;
    TAP_OK(st == MS_OK && r.status == RS_OK, "sync: runs");
    TAP_OK(r.astats.num_alloc_retries == 1 && r.astats.num_segment_frees == 1,
           "one retry, one cudaFree");
    TAP_OK(near_us(r.iter_time_s, sync_end + copy_us), "second copy held until the sync ends");
    TAP_OK(near_us(r.alloc_time_s, 100 + 100 + (sync_end - 200)),
           "alloc time = 2 cudaMalloc + drain + charged sync cost");
    TAP_OK(near_us(r.stall_s, sync_end - 200), "compute stalled from the call to the sync end");
    TAP_OK(r.alloc_retries_per_iter == 1, "retries in the (only) iteration: 1");
    sched_free(s);
}

/* Two host computes from different streams at t=0 are served one after the other. */
static void test_host_fifo(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    host_compute(s, SS_HOST, 100);
    host_compute(s, SS_D2H, 50);
    sim_result r;
    ms_error err;
    run(s, &m, NULL, &r, &err);
    TAP_OK(near_us(r.iter_time_s, 150) && near_us(r.host_busy_s, 150),
           "host CPU is one FIFO server: 100 + 50 us");
    sched_free(s);
}

static trace_t *names_trace(void)
{
    trace_t *t = trace_new();
    trace_rec rec;
    memset(&rec, 0, sizeof rec);
    rec.type = TR_ALLOC;
    rec.u.alloc.id = 42;
    rec.u.alloc.bytes = 4 * GiB;
    rec.u.alloc.cls = TC_ACT_SKEL;
    rec.u.alloc.layer = 3;
    rec.u.alloc.producer = -1;
    snprintf(rec.u.alloc.name, sizeof rec.u.alloc.name, "big_tensor");
    if (trace_append(t, &rec) != MS_OK) TAP_NOTE("trace_append failed");
    memset(&rec, 0, sizeof rec);
    rec.type = TR_OP;
    rec.u.op.id = 5;
    rec.u.op.kind = TK_GEMM;
    rec.u.op.phase = TP_FWD;
    rec.u.op.layer = 3;
    rec.u.op.dur_us = 10;
    snprintf(rec.u.op.name, sizeof rec.u.op.name, "qkv_gemm");
    if (trace_append(t, &rec) != MS_OK) TAP_NOTE("trace_append failed");
    return t;
}

static void test_oom(void)
{
    machine_t m = test_machine();
    m.gpu_hbm_bytes = 3 * GiB;
    trace_t *tr = names_trace();
    schedule_t *s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, GiB);
    compute(s, 10, 5);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 42, 4 * GiB);
    compute(s, 10, 5);
    sim_opts o;
    sim_opts_default(&o);
    o.trace = tr;
    o.timeline_path = tmp_path("oom_timeline.json");
    remove(o.timeline_path);
    sim_result r;
    ms_error err;
    ms_status st = run(s, &m, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == RS_OOM, "OOM is a result (status oom), not an error");
    TAP_OK(strstr(r.failure, "tensor 42") && strstr(r.failure, "big_tensor") &&
               strstr(r.failure, "4294967296 bytes"),
           "failure names the tensor, its name and bytes: %s", r.failure);
    TAP_OK(strstr(r.failure, "allocated 1.00 GiB") && strstr(r.failure, "reserved 1.00 GiB"),
           "failure gives the allocator's state");
    TAP_OK(r.iter_time_s == 0 && r.astats.num_ooms == 1, "no iteration time; one OOM counted");
    TAP_OK(file_has(o.timeline_path, "qkv_gemm"), "timeline of the failed run names ops from the trace");
    sched_free(s);
    trace_free(tr);
}

/* A trace holding tensors of three classes (ids 1, 2, 3: parameter, skeletal, transient). */
static trace_t *kinds_trace(void)
{
    static const trace_class cls[] = { TC_PARAM, TC_ACT_SKEL, TC_ACT_TRANS };
    trace_t *t = trace_new();
    for (int i = 0; i < 3; i++) {
        trace_rec rec;
        memset(&rec, 0, sizeof rec);
        rec.type = TR_ALLOC;
        rec.u.alloc.id = (uint64_t)i + 1;
        rec.u.alloc.bytes = MiB;
        rec.u.alloc.cls = cls[i];
        rec.u.alloc.layer = i ? 0 : -1;
        rec.u.alloc.producer = -1;
        snprintf(rec.u.alloc.name, sizeof rec.u.alloc.name, "t%d", i + 1);
        if (trace_append(t, &rec) != MS_OK) TAP_NOTE("trace_append failed");
    }
    return t;
}

/* run() with a trace for names and kinds and the issue model's bound. */
static ms_status run_with_trace(const schedule_t *s, const machine_t *m, const trace_t *tr,
                                int ahead, sim_result *r)
{
    sim_opts o;
    sim_opts_default(&o);
    o.trace = tr;
    o.issue_ahead = ahead;
    ms_error err;
    return run(s, m, &o, r, &err);
}

/* The peak's breakdown by kind, on both issue models: parameter 100 MiB and skeletal 60 MiB
 * live, a 50 MiB transient on top (the peak: 210 MiB), then freed, a 20 MiB rounding-buffer
 * block and the 8 MiB idle buffer (188 MiB, below the peak), whose kinds their ALLOCs carry;
 * ids unknown to the trace are "other"; an empty request in between changes nothing. With 180 MiB of device the transient fails: the breakdown is the state then. */
static void test_peak_breakdown(void)
{
    machine_t m = test_machine();
    trace_t *tr = kinds_trace();
    schedule_t *s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 100 * MiB);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 60 * MiB);
    compute(s, 10, -1);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 3, 50 * MiB);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 79, 0); /* an empty request: no block, not counted */
    compute(s, 10, -1);
    tensor_act(s, SA_FREE, SS_COMPUTE, 79, 0);
    tensor_act(s, SA_FREE, SS_COMPUTE, 3, 0);
    block_act(s, lower_id_rbuf(0, 0, 0), 20 * MiB, SB_RBUF);
    block_act(s, lower_id_idle_buffer(), 8 * MiB, SB_IDLE);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 77, MiB);
    compute(s, 10, -1);
    sim_result r;
    const uint64_t *b = r.peak_live_bytes;
    for (int ahead = 0; ahead <= 4; ahead += 4) {
        ms_status st = run_with_trace(s, &m, tr, ahead, &r);
        TAP_OK(st == MS_OK && r.status == RS_OK && b[BM_PARAM] == 100 * MiB &&
                   b[BM_ACT_SKEL] == 60 * MiB && b[BM_ACT_TRANS] == 50 * MiB && !b[BM_RBUF] &&
                   !b[BM_IDLE] && !b[BM_OTHER] && !r.peak_live_at_failure,
               "issue_ahead %d: the peak holds the parameter, the skeletal and the transient "
               "tensor (%llu, %llu, %llu MiB)", ahead, (unsigned long long)(b[BM_PARAM] / MiB),
               (unsigned long long)(b[BM_ACT_SKEL] / MiB),
               (unsigned long long)(b[BM_ACT_TRANS] / MiB));
    }
    /* the later blocks make a new peak once the transient is larger than what they add */
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 78, 40 * MiB);
    ms_status st = run_with_trace(s, &m, tr, 0, &r);
    TAP_OK(st == MS_OK && !b[BM_ACT_TRANS] && b[BM_RBUF] == 20 * MiB && b[BM_IDLE] == 8 * MiB &&
               b[BM_OTHER] == 41 * MiB,
           "a later peak: rounding buffer, idle buffer and two tensors the trace does not know");
    m.gpu_hbm_bytes = 180 * MiB;
    st = run_with_trace(s, &m, tr, 0, &r);
    TAP_OK(st == MS_OK && r.status == RS_OOM && r.peak_live_at_failure &&
               b[BM_PARAM] == 100 * MiB && b[BM_ACT_SKEL] == 60 * MiB && b[BM_ACT_TRANS] == 0,
           "oom: the breakdown is what was live at the failing request (%s)", r.failure);
    sched_free(s);
    trace_free(tr);
}

static void test_oohm(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 1, 600 * MiB);
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 2, 600 * MiB);
    sim_opts o;
    sim_opts_default(&o);
    o.host_capacity_bytes = GiB;
    sim_result r;
    ms_error err;
    ms_status st = run(s, &m, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == RS_OOHM && strstr(r.failure, "tensor 2"),
           "out of host memory: status oohm naming tensor 2");
    TAP_OK(r.host_peak_bytes == 600 * MiB, "host peak before the failure: 600 MiB");
    sched_free(s);

    /* Default capacity: 1 TiB / 8 GPUs = 128 GiB; node total = peak x sharers. */
    s = sched_new();
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 1, 100 * GiB);
    tensor_act(s, SA_HOST_FREE, SS_D2H, 1, 0);
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 2, 20 * GiB);
    sim_opts_default(&o);
    o.host_sharers = 4;
    st = run(s, &m, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == RS_OK && r.host_peak_bytes == 100 * GiB &&
               r.host_node_peak_bytes == 400 * GiB,
           "within host_mem / node_gpus; node peak = 4 x 100 GiB");
    tensor_act(s, SA_HOST_ALLOC, SS_D2H, 3, 120 * GiB);
    st = run(s, &m, &o, &r, &err);
    TAP_OK(st == MS_OK && r.status == RS_OOHM, "140 GiB exceeds the 128 GiB share");
    sched_free(s);
}

/* Iteration 0 pays cudaMalloc (100 us) and a cudaFree sync; iteration 1 reuses the cache:
 * the last iteration is its compute only. */
static void test_iterations(void)
{
    machine_t m = test_machine();
    m.gpu_hbm_bytes = 2 * GiB;
    m.cuda_malloc_base_us = 100;
    m.cuda_free_base_us = 200;
    schedule_t *s = sched_new();
    for (int it = 0; it < 2; it++) {
        mark_iter(s, it);
        tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, GiB);
        compute(s, 1000, 1);
        tensor_act(s, SA_FREE, SS_COMPUTE, 1, 0);
        tensor_act(s, SA_ALLOC, SS_COMPUTE, 2, 3 * GiB / 2);
        compute(s, 400, 2);
        tensor_act(s, SA_FREE, SS_COMPUTE, 2, 0);
    }
    sim_result r;
    ms_error err;
    run(s, &m, NULL, &r, &err);
    TAP_OK(r.status == RS_OK && r.astats.num_alloc_retries >= 1,
           "first iteration needed a retry (%llu)", (unsigned long long)r.astats.num_alloc_retries);
    /* iteration 1: the 1.5 GiB segment is cached; ALLOC 1 GiB splits it... or not: a 1 GiB
     * request may take the 1.5 GiB block (best fit); either way no cudaMalloc. */
    TAP_OK(near_us(r.iter_time_s, 1400) && near_us(r.compute_busy_s, 1400),
           "last iteration = 1000 + 400 us of compute (no allocator time)");
    TAP_OK(r.alloc_retries_per_iter == 0 && r.alloc_time_s == 0,
           "no retries or allocator time in the last iteration");
    sched_free(s);
}

static void test_deadlock(void)
{
    machine_t m = test_machine();
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s), e1 = sched_new_event(s);
    compute(s, 10, 1);
    event_act(s, SA_WAIT, SS_COMPUTE, e1);
    event_act(s, SA_RECORD, SS_COMPUTE, e0);
    event_act(s, SA_WAIT, SS_D2H, e0);
    event_act(s, SA_RECORD, SS_D2H, e1);
    sim_result r;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = run(s, &m, NULL, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && r.status == RS_ERROR, "circular wait: MS_ERR_INVALID");
    TAP_OK(strstr(err.msg, "deadlock") && strstr(err.msg, "compute") && strstr(err.msg, "action 1"),
           "message names the stream and action: %s", err.msg);
    sched_free(s);

    s = sched_new();
    tensor_act(s, SA_FREE, SS_COMPUTE, 99, 0);
    st = run(s, &m, NULL, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "action 0"), "free of an unknown tensor: %s",
           err.msg);
    sched_free(s);
}

/* Bad input is an error with a message, never a crash or a partial output file. */
static void test_bad_input(void)
{
    machine_t m = test_machine();
    sim_result r;
    ms_error err;
    schedule_t *s = sched_new();
    sched_action a = base(SA_COMPUTE, SS_H2D);
    a.dur_us = 5;
    add(s, a);
    TAP_OK(run(s, &m, NULL, &r, &err) == MS_ERR_INVALID && strstr(err.msg, "compute stream"),
           "compute on a copy stream rejected: %s", err.msg);
    sched_free(s);

    s = sched_new();
    event_act(s, SA_WAIT, SS_COMPUTE, 3);
    TAP_OK(run(s, &m, NULL, &r, &err) == MS_ERR_INVALID && strstr(err.msg, "out of range"),
           "event never created: %s", err.msg);
    sched_free(s);

    s = sched_new();
    compute(s, INFINITY, 1);
    TAP_OK(run(s, &m, NULL, &r, &err) == MS_ERR_INVALID && strstr(err.msg, "non-finite"),
           "infinite duration rejected: %s", err.msg);
    TAP_OK(sim_execute(NULL, &m, NULL, &r, &err) == MS_ERR_INVALID, "no schedule: an error");
    sched_free(s);

    s = sched_new();
    compute(s, 5, 1);
    sim_opts o;
    sim_opts_default(&o);
    o.allocator = "no-such-allocator";
    TAP_OK(run(s, &m, &o, &r, &err) == MS_ERR_NOTFOUND && r.status == RS_ERROR,
           "unknown allocator: %s", err.msg);
    sim_opts_default(&o);
    o.timeline_path = tmp_path("no/such/dir/t.json");
    TAP_OK(run(s, &m, &o, &r, &err) == MS_ERR_IO && r.status == RS_ERROR,
           "unwritable timeline: MS_ERR_IO: %s", err.msg);
    sched_free(s);

    s = sched_new();
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 4096);
    tensor_act(s, SA_ALLOC, SS_COMPUTE, 1, 4096);
    sim_opts_default(&o);
    o.memcsv_path = tmp_path("bad_mem.csv");
    remove(o.memcsv_path);
    TAP_OK(run(s, &m, &o, &r, &err) == MS_ERR_INVALID && !file_has(o.memcsv_path, "time_us"),
           "tensor allocated twice: error and no output file");
    sched_free(s);
}

/* A copy of s with every tensor id moved up by `shift` (HOST_* and copies included). */
static schedule_t *shifted(const schedule_t *s, uint64_t shift)
{
    schedule_t *c = sched_new();
    for (uint32_t e = sched_event_count(s); e > 0; e--) sched_new_event(c);
    size_t n;
    const sched_action *a = sched_actions(s, &n);
    for (size_t i = 0; i < n; i++) {
        sched_action x = a[i];
        if (x.kind == SA_ALLOC || x.kind == SA_FREE || x.kind == SA_HOST_ALLOC ||
            x.kind == SA_HOST_FREE || x.kind == SA_COPY_D2H || x.kind == SA_COPY_H2D)
            x.tensor += shift;
        add(c, x);
    }
    return c;
}

static int same_result(const sim_result *a, const sim_result *b)
{
    return a->status == b->status && a->iter_time_s == b->iter_time_s &&
           a->peak_allocated_bytes == b->peak_allocated_bytes &&
           a->peak_reserved_bytes == b->peak_reserved_bytes &&
           a->host_peak_bytes == b->host_peak_bytes && a->stall_s == b->stall_s &&
           a->astats.num_allocs == b->astats.num_allocs &&
           a->astats.num_frees == b->astats.num_frees &&
           a->astats.num_splits == b->astats.num_splits &&
           !memcmp(a->peak_live_bytes, b->peak_live_bytes, sizeof a->peak_live_bytes) &&
           a->peak_live_at_failure == b->peak_live_at_failure;
}

/* The stream-time model keeps live device tensors in a table by id when the ALLOC ids are
 * compact, in a map otherwise (ids far above a few per action): both give the same run,
 * an OOM and the errors of a double allocation and of a free of a tensor not allocated. */
/* A schedule with its own stream index (sched_index_build: a sweep's re-bound templates) runs
 * as without one, and a duration changed in place after the index is still checked. */
static void test_indexed_schedule(void)
{
    machine_t m = test_machine();
    size_t n;
    schedule_t *s = synthetic(6, &n);
    sim_result plain, ixd;
    ms_error err;
    ms_status st = run(s, &m, NULL, &plain, &err);
    TAP_OK(sched_index_build(s) == MS_OK && sched_get_index(s), "the synthetic schedule indexes");
    ms_status st2 = run(s, &m, NULL, &ixd, &err);
    TAP_OK(st == MS_OK && st2 == MS_OK && ixd.status == RS_OK && same_result(&plain, &ixd),
           "with its index: the same run (%.6f s)", ixd.iter_time_s);
    m.gpu_hbm_bytes = 120 * MiB;
    st = run(s, &m, NULL, &ixd, &err);
    TAP_OK(st == MS_OK && ixd.status == RS_OOM && sched_get_index(s),
           "and the same OOM with 120 MiB of device");
    m = test_machine();
    sched_action *a = sched_actions_edit(s, &n);
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        if (a[i].kind == SA_COMPUTE) last = i;
    a[last].dur_us = NAN;
    char want[64];
    snprintf(want, sizeof want, "action %zu: non-finite", last);
    st = run(s, &m, NULL, &ixd, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, want) && sched_get_index(s),
           "a duration made NaN after the index: %s", err.msg);
    sched_free(s);
}

static void test_dense_and_sparse_ids(void)
{
    machine_t m = test_machine();
    size_t n;
    schedule_t *d = synthetic(6, &n), *sp = shifted(d, 1ULL << 40);
    sim_result rd, rs;
    ms_error err;
    ms_status st = run(d, &m, NULL, &rd, &err);
    ms_status st2 = run(sp, &m, NULL, &rs, &err);
    TAP_OK(st == MS_OK && st2 == MS_OK && rd.status == RS_OK && same_result(&rd, &rs) &&
               rd.astats.num_frees > 0 && bm_sum(rd.peak_live_bytes) > 0,
           "compact ids (table) and ids from 2^40 (map): the same run (%.6f s, peak %llu)",
           rd.iter_time_s, (unsigned long long)rd.peak_allocated_bytes);
    m.gpu_hbm_bytes = 120 * MiB;
    st = run(d, &m, NULL, &rd, &err);
    st2 = run(sp, &m, NULL, &rs, &err);
    TAP_OK(st == MS_OK && st2 == MS_OK && rd.status == RS_OOM && same_result(&rd, &rs) &&
               rd.peak_live_at_failure,
           "and the same OOM with 120 MiB of device");
    sched_free(d);
    sched_free(sp);
    m = test_machine();
    for (uint64_t base_id = 1; base_id; base_id = base_id == 1 ? 1ULL << 40 : 0) {
        schedule_t *s = sched_new();
        tensor_act(s, SA_ALLOC, SS_COMPUTE, base_id, 4096);
        tensor_act(s, SA_ALLOC, SS_COMPUTE, base_id, 4096);
        st = run(s, &m, NULL, &rd, &err);
        TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "already allocated"),
               "id %llu allocated twice: %s", (unsigned long long)base_id, err.msg);
        sched_free(s);
        s = sched_new();
        tensor_act(s, SA_ALLOC, SS_COMPUTE, base_id, 4096);
        tensor_act(s, SA_FREE, SS_COMPUTE, base_id, 0);
        tensor_act(s, SA_FREE, SS_COMPUTE, base_id, 0);
        tensor_act(s, SA_FREE, SS_COMPUTE, base_id + 7, 0);
        st = run(s, &m, NULL, &rd, &err);
        TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "action 2") &&
                   strstr(err.msg, "not allocated"),
               "id %llu freed twice: %s", (unsigned long long)base_id, err.msg);
        sched_free(s);
        s = sched_new();
        tensor_act(s, SA_ALLOC, SS_COMPUTE, base_id, 4096);
        tensor_act(s, SA_FREE, SS_COMPUTE, base_id + 100000, 0);
        st = run(s, &m, NULL, &rd, &err);
        TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "not allocated"),
               "a free of an id above every ALLOC's (%llu + 100000): %s",
               (unsigned long long)base_id, err.msg);
        sched_free(s);
    }
}

static void test_determinism_and_outputs(void)
{
    machine_t m = test_machine();
    m.link_small_copy_us = 8;
    m.cuda_malloc_base_us = 60;
    m.cuda_free_base_us = 80;
    size_t n;
    schedule_t *s = synthetic(16, &n);
    TAP_OK(valid(s), "synthetic schedule is valid (%zu actions)", n);
    sim_opts o;
    sim_opts_default(&o);
    const char *tl[2] = { tmp_path("det1.json"), tmp_path("det2.json") };
    const char *mc[2] = { tmp_path("det1.csv"), tmp_path("det2.csv") };
    const char *iv[2] = { tmp_path("det1.iv.csv"), tmp_path("det2.iv.csv") };
    sim_result r[2];
    ms_error err;
    for (int k = 0; k < 2; k++) {
        o.timeline_path = tl[k];
        o.memcsv_path = mc[k];
        o.intervals_path = iv[k];
        if (run(s, &m, &o, &r[k], &err) != MS_OK) TAP_NOTE("run failed: %s", err.msg);
    }
    TAP_OK(r[0].status == RS_OK && r[0].iter_time_s > 0, "synthetic run ok: %.6f s",
           r[0].iter_time_s);
    char *row[2];
    size_t rn[2];
    for (int k = 0; k < 2; k++) {
        FILE *f = open_memstream(&row[k], &rn[k]);
        res_csv_row(f, &r[k]);
        fclose(f);
    }
    TAP_OK(rn[0] == rn[1] && memcmp(row[0], row[1], rn[0]) == 0, "identical results twice");
    char *a, *b;
    size_t na = read_file(tl[0], &a), nb = read_file(tl[1], &b);
    TAP_OK(na > 0 && na == nb && memcmp(a, b, na) == 0, "identical timeline bytes (%zu)", na);
    TAP_OK(a && strncmp(a, "{\"traceEvents\":[", 16) == 0 && strstr(a, "\"thread_name\"") &&
               strstr(a, "\"d2h copy\"") && strstr(a, "\"ph\":\"X\"") && strstr(a, "\"ph\":\"C\"") &&
               strstr(a, "\"device memory by kind\""),
           "timeline: traceEvents with thread names, X and C events, the counter by kind");
    free(a);
    free(b);
    na = read_file(mc[0], &a);
    nb = read_file(mc[1], &b);
    TAP_OK(na > 0 && na == nb && memcmp(a, b, na) == 0, "identical memory CSV bytes");
    TAP_OK(a && strncmp(a, "time_us,allocated_bytes,reserved_bytes,active_bytes,host_bytes,"
                           "params_bytes,grads_bytes,optstates_bytes,chunks_bytes,act_skel_bytes,"
                           "act_trans_bytes,workspace_bytes,rbuf_bytes,idle_bytes,staging_bytes,"
                           "other_bytes\n", 212) == 0,
           "memory CSV header: the allocator's values, then the live bytes of each kind");
    free(a);
    free(b);
    na = read_file(iv[0], &a);
    nb = read_file(iv[1], &b);
    TAP_OK(na > 0 && na == nb && memcmp(a, b, na) == 0 &&
               strncmp(a, "lane,start_us,end_us,kind\n", 26) == 0 && strstr(a, "\n2,") &&
               strstr(a, ",1\n") && strstr(a, ",4\n"),
           "intervals CSV: identical, header, h2d lane, recompute and host kinds");
    free(a);
    free(b);
    free(row[0]);
    free(row[1]);
    TAP_OK(r[0].recompute_s > 0 && r[0].h2d_busy_s > 0 && r[0].d2h_busy_s > 0 &&
               r[0].host_busy_s > 0 && r[0].peak_reserved_bytes >= r[0].peak_active_bytes &&
               r[0].fragmentation >= 0 && r[0].fragmentation < 1,
           "synthetic: all resources used, fragmentation in [0,1)");
    sched_free(s);
}

static void test_results_csv(void)
{
    sim_result r;
    res_init(&r);
    snprintf(r.policy, sizeof r.policy, "memo");
    snprintf(r.failure, sizeof r.failure, "out of memory, \"x\"");
    r.status = RS_OOM;
    char *buf;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    res_csv_header(f);
    res_csv_row(f, &r);
    fclose(f);
    const char *prefix = "policy,allocator,model,machine,seq,batch,tp,cp,dp,status,iter_time_s,"
                         "mfu,tgs,peak_allocated_bytes,peak_reserved_bytes,peak_active_bytes,"
                         "fragmentation,host_peak_bytes,compute_busy_s,h2d_busy_s,d2h_busy_s,"
                         "alloc_retries,";
    TAP_OK(strncmp(buf, prefix, strlen(prefix)) == 0,
           "CSV header starts with the documented columns in order");
    size_t commas = 0;
    for (const char *p = buf; *p != '\n'; p++) commas += *p == ',';
    TAP_OK(commas + 1 == res_csv_ncolumns(), "header has res_csv_ncolumns() columns");
    TAP_OK(strstr(buf, "\nmemo,,,,0,0,1,1,1,oom,0,") &&
               strstr(buf, ",\"out of memory, \"\"x\"\"\",0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n"),
           "row: status name, defaults, quoted failure, then the issue model's and the kinds' "
           "columns");
    TAP_OK(strcmp(res_status_name(RS_OOHM), "oohm") == 0 && strcmp(res_status_name(RS_OK), "ok") == 0,
           "status names");
    free(buf);
    f = open_memstream(&buf, &n);
    res_table(f, &r, 1);
    fclose(f);
    TAP_OK(strstr(buf, "policy") && strstr(buf, "memo") && strstr(buf, "oom"), "summary table");
    free(buf);
}

/* Executor speed on a ~5,000-action schedule (54 layers of the synthetic pattern). */
static void test_speed(void)
{
    machine_t m = test_machine();
    m.link_small_copy_us = 8;
    m.cuda_malloc_base_us = 60;
    m.cuda_free_base_us = 80;
    size_t n;
    schedule_t *s = synthetic(54, &n);
    sim_result r;
    ms_error err;
    double best = 1e9;
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        run(s, &m, NULL, &r, &err);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    TAP_NOTE("executor: %zu actions in %.3f ms (best of 5), simulated %.3f ms", n, best * 1e3,
             r.iter_time_s * 1e3);
    TAP_OK(n >= 5000 && r.status == RS_OK && best < 0.1,
           "5k-action schedule executes in under 100 ms even on a loaded box (%.3f ms)",
           best * 1e3);
    sched_free(s);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/memsim-test_exec-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot make a temporary directory\n");
        return 99;
    }
    test_compute_only();
    test_copy_overlap();
    test_wait_record();
    test_dha_slowed();
    test_sync_blocks();
    test_host_fifo();
    test_oom();
    test_oohm();
    test_peak_breakdown();
    test_iterations();
    test_deadlock();
    test_bad_input();
    test_dense_and_sparse_ids();
    test_indexed_schedule();
    test_determinism_and_outputs();
    test_results_csv();
    test_speed();
    tmp_cleanup();
    return tap_done();
}

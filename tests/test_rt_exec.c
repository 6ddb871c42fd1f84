/* test_rt_exec.c — the runtime executor's host-side logic (runtime/rt_exec.h) without a GPU:
 * the fake device and memory backend of tests/rt_exec_util.h run hand-made and generated
 * schedules. Checks the pinned pool plan, issue order and measured windows, deferred frees
 * (record_stream), the copy addresses, the spin credit, per-op timing, alloc_sync, OOM / OOHM
 * as clean results, the watchdog, the recorded durations, the host stream, the static arena's
 * planned addresses under deferred frees (release, retry, fences), and that every stream,
 * event and allocation is released. What the executor hands the kernels is
 * tests/test_rt_exec_data.c. Runs everywhere. */
#define _POSIX_C_SOURCE 200809L
#include "tests/rt_exec_util.h"

static void test_host_plan(void)
{
    schedule_t *s = sched_new();
    act(s, SA_ALLOC, SS_COMPUTE, 1, 1000, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 2, 1000, 0, 0);
    act(s, SA_HOST_ALLOC, SS_D2H, 1, 5000, 0, 0);     /* [0, 8192) */
    act(s, SA_HOST_ALLOC, SS_D2H, 2, 100, 0, 0);      /* [8192, 12288) */
    act(s, SA_COPY_D2H, SS_D2H, 1, 1000, 0, 0);
    act(s, SA_HOST_FREE, SS_H2D, 1, 0, 0, 0);         /* frees [0, 8192) */
    act(s, SA_HOST_ALLOC, SS_D2H, 1, 3000, 0, 0);     /* first fit: 0 */
    act(s, SA_COPY_D2H, SS_D2H, 2, 700, 0, 0);        /* tensor 2 has host memory */
    act(s, SA_FREE, SS_COMPUTE, 2, 0, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 3, 900, 0, 0);
    act(s, SA_COPY_D2H, SS_D2H, 3, 900, 0, 0);        /* no host memory: scratch */
    rt_host_plan hp;
    ms_error err;
    ms_status st = rt_host_plan_make(s, 4096, &hp, &err);
    TAP_OK(st == MS_OK, "host plan made");
    if (st == MS_OK) {
        TAP_OK(hp.offsets[2] == 0 && hp.offsets[3] == 8192, "first two host ranges: 0 and 8192 "
               "(got %llu, %llu)", (unsigned long long)hp.offsets[2],
               (unsigned long long)hp.offsets[3]);
        TAP_OK(hp.offsets[6] == 0, "a freed range is reused first fit (got %llu)",
               (unsigned long long)hp.offsets[6]);
        TAP_OK(hp.offsets[0] == UINT64_MAX && hp.offsets[4] == UINT64_MAX,
               "non host-alloc actions have no offset");
        TAP_OK(hp.peak_bytes == 5100, "peak host bytes 5100 (got %llu)",
               (unsigned long long)hp.peak_bytes);
        TAP_OK(hp.scratch_off == 12288 && hp.scratch_bytes == 4096 && hp.pool_bytes == 16384,
               "scratch after the top: off %llu bytes %llu pool %llu",
               (unsigned long long)hp.scratch_off, (unsigned long long)hp.scratch_bytes,
               (unsigned long long)hp.pool_bytes);
        TAP_OK(hp.stream_mask[2] == ((1u << SS_D2H) | (1u << SS_H2D)),
               "stream mask of the first host range: its copy and its free (0x%x)",
               hp.stream_mask[2]);
        rt_host_plan_release(&hp);
    }
    sched_free(s);
}

static void test_swap(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = swap_schedule(2);
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    rt_exec_result r;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK, "swap schedule runs (%s)", r.failure);
    TAP_OK(r.n_win == 3, "three windows: setup and two iterations (%zu)", r.n_win);
    double copy_us = (double)(64ULL << 20) / f.bw_Bpus;
    /* compute 100, then the D2H copy; compute 300 overlaps it; the H2D copy starts after both
     * (it waits e2 and e3); then 50 us of compute */
    double want = 100 + copy_us + copy_us + 50;
    TAP_OK(fabs(r.iter_time_s * 1e6 - want) < 5, "iteration time %.1f us, as the stream rules "
           "give (%.1f)", r.iter_time_s * 1e6, want);
    TAP_OK(fabs(r.nominal_s * 1e6 - 450) < 1e-6, "nominal compute 450 us (%.3f)",
           r.nominal_s * 1e6);
    TAP_OK(fabs(r.d2h_busy_s * 1e6 - copy_us) < 1 && fabs(r.h2d_busy_s * 1e6 - copy_us) < 1,
           "copy busy times from the copy events (%.1f, %.1f us)", r.d2h_busy_s * 1e6,
           r.h2d_busy_s * 1e6);
    TAP_OK(r.deferred_frees == 4, "the D2H-stream free and the compute free of the H2D block "
           "are deferred, twice (%llu)", (unsigned long long)r.deferred_frees);
    TAP_OK(r.host_peak_bytes == (64ULL << 20) && r.host_pool_bytes == (64ULL << 20),
           "pinned pool = peak host bytes = 64 MiB");
    TAP_OK(r.h2d_large.n == 2 && r.d2h_large.n == 2 && fabs(r.h2d_large.agg_Bps - 50e9) < 1e8,
           "link statistics of large copies: %llu + %llu copies, %.3g B/s",
           (unsigned long long)r.h2d_large.n, (unsigned long long)r.d2h_large.n,
           r.h2d_large.agg_Bps);
    /* copy addresses: the D2H of iteration 0 and the H2D that follows use the same host bytes;
     * device sides are the tensor's blocks */
    int ok = f.n_copies == 4;
    if (ok) {
        const fcopy *d = &f.copies[0], *h = &f.copies[1];
        ok = d->d2h && !h->d2h && d->dst == h->src && d->dst >= (1ULL << 44) &&
             d->src >= (1ULL << 40) && d->src < (1ULL << 44) && h->dst >= (1ULL << 40) &&
             d->bytes == (64ULL << 20);
    }
    TAP_OK(ok, "copies move between the tensor's device block and its pinned range");
    TAP_OK(clean(&f, &b), "everything released: streams %ld events %ld allocs %ld hosts %ld",
           f.streams, f.events, b.dev_allocs, b.hosts);
    TAP_OK(r.astats.num_allocs == 4 && r.astats.num_frees == 4, "allocator saw 4 allocs and 4 "
           "frees (%llu, %llu)", (unsigned long long)r.astats.num_allocs,
           (unsigned long long)r.astats.num_frees);
    rt_exec_result_release(&r);

    /* alloc_sync: no deferral, the host waits */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    o.alloc_sync = 1;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.deferred_frees == 0 && r.alloc_waits == 8,
           "alloc_sync: ok, nothing deferred, one wait per allocator call (%llu)",
           (unsigned long long)r.alloc_waits);
    TAP_OK(clean(&f, &b), "alloc_sync: everything released");
    rt_exec_result_release(&r);

    /* per-op events */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    o.alloc_sync = 0;
    o.per_op = 1;
    st = run(s, &o, &f, &b, &r, &err);
    ok = st == RT_OK && r.n_ops == 6;
    for (size_t k = 0; ok && k < r.n_ops; k++) ok = fabs(r.ops[k].meas_us - r.ops[k].req_us) < 0.01;
    TAP_OK(ok, "per-op: 6 compute actions, each measured at its duration");
    TAP_OK(fabs(r.compute_busy_s * 1e6 - 450) < 0.01, "per-op compute busy 450 us (%.3f)",
           r.compute_busy_s * 1e6);
    TAP_OK(clean(&f, &b), "per-op: every event released");
    rt_exec_result_release(&r);
    sched_free(s);
}

static void test_credit(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = sched_new();
    mark_iter(s, 0);
    for (int k = 0; k < 10; k++) act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 2, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 100, 0);
    fdev f;
    fbe b;
    rt_exec_opts o;
    rt_exec_result r;
    rt_exec_opts_default(&o);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    f.empty_us = 10;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && fabs(r.iter_time_s * 1e6 - 120) < 0.5,
           "spin credit: 10 x 2 us + 100 us with a 10 us shortest kernel takes 120 us (%.2f)",
           r.iter_time_s * 1e6);
    rt_exec_result_release(&r);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    f.empty_us = 10;
    o.spin_credit = 0;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && fabs(r.iter_time_s * 1e6 - 200) < 0.5,
           "without the credit it takes 200 us (%.2f)", r.iter_time_s * 1e6);
    rt_exec_result_release(&r);
    sched_free(s);
}

static void test_failures(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = swap_schedule(2);
    fdev f;
    fbe b;
    rt_exec_opts o;
    rt_exec_result r;
    rt_exec_opts_default(&o);
    /* OOM: 40 MiB of device memory cannot hold the 64 MiB block */
    fdev_init(&f);
    fbe_init(&b, 40ULL << 20);
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OOM, "OOM is a result (%s)", rt_outcome_name(r.outcome));
    TAP_OK(strstr(r.failure, "out of device memory allocating tensor 10") != NULL,
           "the failure names the request: %s", r.failure);
    TAP_OK(clean(&f, &b), "after an OOM everything is released (streams %ld events %ld "
           "allocs %ld hosts %ld)", f.streams, f.events, b.dev_allocs, b.hosts);
    TAP_OK(r.iter_time_s == 0, "no iteration time after an OOM");
    rt_exec_result_release(&r);

    /* deferred frees are waited for before an OOM is final */
    fdev_init(&f);
    fbe_init(&b, 100ULL << 20);
    f.issue_us = 0;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.oom_drains >= 1,
           "a 100 MiB device fits after waiting for the deferred free (%s, drains %llu)",
           rt_outcome_name(r.outcome), (unsigned long long)r.oom_drains);
    TAP_OK(clean(&f, &b), "and releases everything");
    rt_exec_result_release(&r);

    /* OOHM */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    o.host_limit_bytes = 1ULL << 20;
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OOHM && strstr(r.failure, "pinned pool"),
           "a pinned pool over the host limit is out of host memory (%s)", r.failure);
    TAP_OK(clean(&f, &b), "OOHM: everything released");
    rt_exec_result_release(&r);
    o.host_limit_bytes = 0;
    sched_free(s);

    /* invalid schedule */
    s = sched_new();
    uint32_t e = sched_new_event(s);
    act(s, SA_WAIT, SS_COMPUTE, 0, 0, 0, e);
    act(s, SA_RECORD, SS_D2H, 0, 0, 0, e);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_ERR_INVALID && strstr(r.failure, "deadlock"),
           "a schedule that would deadlock is refused: %s", r.failure);
    TAP_OK(clean(&f, &b), "nothing created for an invalid schedule");
    sched_free(s);

    /* watchdog */
    s = sched_new();
    mark_iter(s, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 1, 1 << 20, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 1e13, 0);
    act(s, SA_FREE, SS_COMPUTE, 1, 0, 0, 0);
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    o.watchdog_s = 0.3;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    LEAKS_IGNORED_BEGIN(); /* a hung run leaves its allocator to the process exit, by design */
    st = run(s, &o, &f, &b, &r, &err);
    LEAKS_IGNORED_END();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    TAP_OK(st == RT_ERR_CUDA && r.outcome == RTX_ERROR && strstr(r.failure, "watchdog") &&
           r.leaked, "a hung kernel trips the watchdog: %s", r.failure);
    TAP_OK(dt < 3.0, "and the run returns (%.2f s)", dt);
    TAP_OK(f.streams == 0 && f.events == 0, "streams and events are still destroyed");
    rt_exec_result_release(&r);
    sched_free(s);
}

/* A generated workload through planning and lowering, every allocator. */
static void test_generated(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,256,4,1024,1000", 512, &mp, &c)) return;
    c.iterations = 2;
    trace_t *t = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(st == MS_OK, "tiny trace generated (%s)", st == MS_OK ? "" : err.msg);
    const char *pols[] = {"keep-all", "full-swap", "full-recompute"};
    const char *allocs[] = {"caching", "stitching", "expandable"};
    for (size_t p = 0; t && p < 3; p++) {
        plan_t *plan = NULL;
        schedule_t *s = NULL;
        st = pol_plan(pols[p], t, &mp->m, NULL, &plan, &err);
        if (st == MS_OK) st = lower_schedule(t, plan, &mp->m, NULL, &s, &err);
        TAP_OK(st == MS_OK, "%s: planned and lowered (%s)", pols[p], st == MS_OK ? "" : err.msg);
        if (st != MS_OK) {
            plan_free(plan);
            continue;
        }
        double want = 0;
        int seen = 0;
        for (size_t i = 0; i < sched_count(s); i++) {
            const sched_action *a = sched_get(s, i);
            if (a->kind == SA_MARK && a->mark == TM_ITER && a->stream == SS_COMPUTE) {
                want = 0;
                seen = 1;
            }
            if (seen && a->kind == SA_COMPUTE) want += a->dur_us;
        }
        for (size_t k = 0; k < 3; k++) {
            fdev f;
            fbe b;
            fdev_init(&f);
            fbe_init(&b, 8ULL << 30);
            rt_exec_opts o;
            rt_exec_opts_default(&o);
            o.allocator = allocs[k];
            o.trace = t;
            rt_exec_result r;
            rt_status rs = run(s, &o, &f, &b, &r, &err);
            TAP_OK(rs == RT_OK && r.outcome == RTX_OK && r.n_win == 3 &&
                   fabs(r.nominal_s * 1e6 - want) < 1e-3 * want &&
                   r.iter_time_s >= r.nominal_s * 0.999 && r.astats.allocated_peak_bytes > 0,
                   "%s / %s: ok, last iteration %.3f ms for %.3f ms of compute, peak "
                   "allocated %llu (%s)", pols[p], allocs[k], r.iter_time_s * 1e3,
                   r.nominal_s * 1e3, (unsigned long long)r.astats.allocated_peak_bytes,
                   r.failure);
            TAP_OK(clean(&f, &b), "%s / %s: everything released (allocs %ld phys %ld vas %ld "
                   "maps %ld)", pols[p], allocs[k], b.dev_allocs, b.phys, b.vas, b.maps);
            if (k == 0 && p != 1) {
                /* one stream, program order on both sides: the runtime's breakdown of the
                 * peak is the simulator's (planners/blockmix.h on both) */
                sim_opts so;
                sim_opts_default(&so);
                so.trace = t;
                sim_result sr;
                machine_t big = mp->m;
                big.gpu_hbm_bytes = 8ULL << 30;
                big.gpu_reserved_bytes = 0;
                ms_status ss = sim_execute(s, &big, &so, &sr, &err);
                uint64_t sum = 0;
                for (int q = 0; q < BM_COUNT; q++) sum += r.peak_live_bytes[q];
                TAP_OK(ss == MS_OK && sr.status == RS_OK && sum > 0 &&
                       r.peak_live_bytes[BM_PARAM] > 0 && r.peak_live_bytes[BM_ACT_SKEL] > 0 &&
                       !memcmp(sr.peak_live_bytes, r.peak_live_bytes, sizeof sr.peak_live_bytes),
                       "%s: the runtime's breakdown of the peak equals the simulator's (%llu "
                       "bytes live)", pols[p], (unsigned long long)sum);
            }
            if (p == 1 && k == 0) {
                TAP_OK(r.copies > 0 && r.deferred_frees > 0 && r.host_peak_bytes > 0,
                       "full-swap copies (%llu), defers frees (%llu), uses host memory",
                       (unsigned long long)r.copies, (unsigned long long)r.deferred_frees);
                /* a host that runs ahead keeps offloaded blocks until the copies end; a host
                 * held close to the GPU (or waiting at each allocator call) frees them about
                 * where the schedule does */
                uint64_t ahead_peak = r.astats.allocated_peak_bytes;
                for (int mode = 0; mode < 2; mode++) {
                    rt_exec_result r2;
                    fdev_init(&f);
                    f.issue_us = 0.5;
                    fbe_init(&b, 8ULL << 30);
                    rt_exec_opts o2 = o;
                    o2.max_ahead = mode == 0 ? 1 : 0;
                    o2.alloc_sync = mode == 1;
                    rs = run(s, &o2, &f, &b, &r2, &err);
                    /* alloc_sync stalls the issuing thread at H2D-stream allocations, so
                     * only max_ahead keeps the iteration time */
                    TAP_OK(rs == RT_OK && r2.outcome == RTX_OK &&
                           r2.astats.allocated_peak_bytes < ahead_peak &&
                           (mode || fabs(r2.iter_time_s - r.iter_time_s) < 0.02 * r.iter_time_s),
                           "full-swap with %s: peak allocated %llu < %llu running ahead, "
                           "iteration %.3f ms (%.3f ahead)", mode ? "alloc_sync" : "max_ahead 1",
                           (unsigned long long)r2.astats.allocated_peak_bytes,
                           (unsigned long long)ahead_peak, r2.iter_time_s * 1e3,
                           r.iter_time_s * 1e3);
                    TAP_OK(clean(&f, &b) && (mode ? r2.alloc_waits : r2.ahead_waits) > 0,
                           "full-swap with %s: waited, everything released",
                           mode ? "alloc_sync" : "max_ahead 1");
                    rt_exec_result_release(&r2);
                }
            }
            rt_exec_result_release(&r);
        }
        sched_free(s);
        plan_free(plan);
    }
    trace_free(t);
    machine_profile_free(mp);
}

/* Is a the same record as b, but for an op's dur_us? */
static int same_but_dur(const trace_rec *a, const trace_rec *b)
{
    if (a->type != b->type) return 0;
    switch (a->type) {
    case TR_ALLOC:
        return a->u.alloc.id == b->u.alloc.id && a->u.alloc.bytes == b->u.alloc.bytes &&
               a->u.alloc.cls == b->u.alloc.cls && a->u.alloc.layer == b->u.alloc.layer &&
               a->u.alloc.producer == b->u.alloc.producer &&
               !strcmp(a->u.alloc.name, b->u.alloc.name);
    case TR_FREE: return a->u.free_id == b->u.free_id;
    case TR_MARK: return a->u.mark.kind == b->u.mark.kind && a->u.mark.value == b->u.mark.value;
    case TR_OP:
        if (a->u.op.id != b->u.op.id || a->u.op.n_in != b->u.op.n_in ||
            a->u.op.n_out != b->u.op.n_out || a->u.op.kind != b->u.op.kind ||
            strcmp(a->u.op.name, b->u.op.name))
            return 0;
        for (uint32_t i = 0; i < a->u.op.n_in; i++)
            if (a->u.op.in[i] != b->u.op.in[i]) return 0;
        for (uint32_t i = 0; i < a->u.op.n_out; i++)
            if (a->u.op.out[i] != b->u.op.out[i]) return 0;
        return 1;
    }
    return 0;
}

/* `memsim run --record`: a run on the fake device (every kernel a different length) recorded
 * as a trace, written, loaded back: the program is unchanged, every op carries the
 * measurement of the very action that ran it (iteration k's op iteration k's time), the
 * recompute replays do not override the forward's time, and the recorded.* meta are there. */
static void test_record(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,256,4,1024,1000", 512, &mp, &c)) return;
    c.iterations = 3;
    trace_t *t = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(st == MS_OK, "record: trace generated");
    const char *pols[] = {"full-swap", "full-recompute"};
    for (int p = 0; t && p < 2; p++) {
        plan_t *plan = NULL;
        schedule_t *s = NULL;
        st = pol_plan(pols[p], t, &mp->m, NULL, &plan, &err);
        if (st == MS_OK) st = lower_schedule(t, plan, &mp->m, NULL, &s, &err);
        if (st != MS_OK) {
            TAP_OK(0, "record %s: planned (%s)", pols[p], err.msg);
            plan_free(plan);
            continue;
        }
        fdev f;
        fbe b;
        fdev_init(&f);
        f.kernel_grow = 1e-3;
        fbe_init(&b, 8ULL << 30);
        rt_exec_opts o;
        rt_exec_opts_default(&o);
        o.trace = t;
        o.per_op = 1;
        o.spin_credit = 0;
        rt_exec_result r;
        rt_status rs = run(s, &o, &f, &b, &r, &err);
        TAP_OK(rs == RT_OK && r.outcome == RTX_OK && r.n_ops > 0, "record %s: run ok, %zu "
               "compute actions timed", pols[p], r.n_ops);
        size_t n_re = 0;
        for (size_t k = 0; k < r.n_ops; k++) n_re += r.ops[k].recompute;
        rt_record_info info = {"Fake GPU", "2026-11-21", "spin", "memsim run --policy x"};
        trace_t *rec = NULL;
        size_t measured = 0, n_op = 0;
        st = rt_record_trace(t, r.ops, r.n_ops, &info, &rec, &measured, &err);
        for (size_t i = 0; i < trace_count(t); i++) n_op += trace_get(t, i)->type == TR_OP;
        TAP_OK(st == MS_OK && measured == n_op && measured == r.n_ops - n_re,
               "record %s: all %zu ops measured (%zu; %zu recompute actions skipped)", pols[p],
               n_op, measured, n_re);
        if (p == 1) TAP_OK(n_re > 0, "record %s: the plan recomputes (%zu actions)", pols[p], n_re);
        char path[128];
        snprintf(path, sizeof path, "/tmp/test_rt_exec_record_%ld_%d.trace.gz",
                 (long)getpid(), p);
        trace_t *back = NULL;
        if (st == MS_OK) st = trace_write(rec, path, &err);
        if (st == MS_OK) st = trace_load(path, &back, &err);
        unlink(path);
        TAP_OK(st == MS_OK && back && trace_count(back) == trace_count(t),
               "record %s: written and loaded back, %zu records (%s)", pols[p],
               back ? trace_count(back) : 0, st == MS_OK ? "" : err.msg);
        /* every op's duration: the non-recompute action of that op id */
        size_t same = 0, right = 0, changed = 0, ops_seen = 0, timed = 0;
        for (size_t i = 0; back && i < trace_count(t); i++) {
            const trace_rec *a = trace_get(t, i), *x = trace_get(back, i);
            same += same_but_dur(a, x);
            if (a->type != TR_OP) continue;
            ops_seen++;
            double want = -2, re = -2;
            for (size_t k = 0; k < r.n_ops; k++)
                if (r.ops[k].op == (int64_t)a->u.op.id) {
                    if (r.ops[k].recompute) re = r.ops[k].meas_us;
                    else if (want == -2) want = r.ops[k].meas_us;
                }
            /* the writer prints %.17g-exact numbers or rounds: allow 1e-9 relative */
            right += fabs(x->u.op.dur_us - want) <= 1e-9 * fabs(want) + 1e-9 &&
                     (re == -2 || fabs(x->u.op.dur_us - re) > 1e-6);
            timed += a->u.op.dur_us > 0;   /* a zero-length op stays zero on the fake */
            changed += a->u.op.dur_us > 0 && fabs(x->u.op.dur_us - a->u.op.dur_us) > 1e-6;
        }
        TAP_OK(back && same == trace_count(t), "record %s: the program is unchanged (%zu of "
               "%zu records equal but for durations)", pols[p], same, trace_count(t));
        TAP_OK(back && right == ops_seen && changed == timed && timed > ops_seen / 2,
               "record %s: %zu of %zu ops carry their own action's measurement, %zu of %zu "
               "differ from the modelled time", pols[p], right, ops_seen, changed, timed);
        const char *dv = back ? trace_get_meta(back, "recorded.device") : NULL;
        const char *mv = back ? trace_get_meta(back, "recorded.math") : NULL;
        const char *fv = back ? trace_get_meta(back, "recorded.from") : NULL;
        const char *dt = back ? trace_get_meta(back, "recorded.date") : NULL;
        const char *mo = back ? trace_get_meta(back, "model") : NULL;
        TAP_OK(dv && !strcmp(dv, "Fake GPU") && mv && !strcmp(mv, "spin") && fv &&
               !strcmp(fv, "memsim run --policy x") && dt && !strcmp(dt, "2026-11-21") && mo &&
               !strcmp(mo, trace_get_meta(t, "model")),
               "record %s: recorded.* meta written, the workload's meta kept", pols[p]);
        /* the recorded trace plans and lowers again (what memsim simulate --trace does) */
        plan_t *p2 = NULL;
        schedule_t *s2 = NULL;
        st = back ? pol_plan(pols[p], back, &mp->m, NULL, &p2, &err) : MS_ERR_INVALID;
        if (st == MS_OK) st = lower_schedule(back, p2, &mp->m, NULL, &s2, &err);
        double sum_rec = 0, sum_meas = 0;
        int seen = 0;
        for (size_t i = 0; s2 && i < sched_count(s2); i++) {
            const sched_action *a = sched_get(s2, i);
            if (a->kind == SA_MARK && a->mark == TM_ITER && a->stream == SS_COMPUTE) {
                sum_rec = 0;
                seen = 1;
            }
            if (seen && a->kind == SA_COMPUTE && !a->recompute) sum_rec += a->dur_us;
        }
        size_t last = 0;
        for (size_t i = 0; i < sched_count(s); i++) {
            const sched_action *a = sched_get(s, i);
            if (a->kind == SA_MARK && a->mark == TM_ITER && a->stream == SS_COMPUTE) last = i;
        }
        for (size_t k = 0; k < r.n_ops; k++)
            if (r.ops[k].action > last && !r.ops[k].recompute) sum_meas += r.ops[k].meas_us;
        TAP_OK(st == MS_OK && fabs(sum_rec - sum_meas) <= 1e-6 * sum_meas,
               "record %s: re-planned from the record, its last iteration's ops sum to the "
               "measured %.3f ms (%.3f)", pols[p], sum_meas * 1e-3, sum_rec * 1e-3);
        sched_free(s2);
        plan_free(p2);
        trace_free(back);
        trace_free(rec);
        rt_exec_result_release(&r);
        sched_free(s);
        plan_free(plan);
    }
    trace_free(t);
    machine_profile_free(mp);
}

/* Host work on the host stream between events, and DHA computes (the fake ignores their
 * link time): the stream order gives 1000 + 3000 + 2000 + 100 us. */
static void test_host_stream(void)
{
    ms_error err;
    ms_error_clear(&err);
    schedule_t *s = sched_new();
    uint32_t e0 = sched_new_event(s), e1 = sched_new_event(s);
    mark_iter(s, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 1, 1 << 20, 0, 0);
    sched_action dha; /* the first compute reads 8 MiB of host memory */
    memset(&dha, 0, sizeof dha);
    dha.kind = SA_COMPUTE;
    dha.stream = SS_COMPUTE;
    dha.op = 1;
    dha.dur_us = 1000;
    dha.host_read_bytes = 8 << 20;
    dha.dha_eff = 1;
    dha.layer = -1;
    if (sched_add(s, &dha) != MS_OK) abort();
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 3000, 0);
    act(s, SA_RECORD, SS_COMPUTE, 0, 0, 0, e0);
    act(s, SA_WAIT, SS_HOST, 0, 0, 0, e0);
    act(s, SA_HOST_COMPUTE, SS_HOST, 0, 0, 2000, 0);
    act(s, SA_RECORD, SS_HOST, 0, 0, 0, e1);
    act(s, SA_WAIT, SS_COMPUTE, 0, 0, 0, e1);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 100, 0);
    act(s, SA_FREE, SS_COMPUTE, 1, 0, 0, 0);
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 1ULL << 30);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    rt_exec_result r;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && fabs(r.iter_time_s * 1e6 - 6100) < 0.5 &&
           fabs(r.host_busy_s * 1e6 - 2000) < 1e-6 && r.host_pool_bytes == 0,
           "host work runs in its stream's order between events: %.1f us (6100), host %.1f us",
           r.iter_time_s * 1e6, r.host_busy_s * 1e6);
    TAP_OK(clean(&f, &b), "the DHA buffer is given back (hosts %ld)", b.hosts);
    rt_exec_result_release(&r);
    sched_free(s);
}


/* ---------------- the static arena and deferred frees ---------------- */

static rt_status run_static(const schedule_t *s, const uint64_t *ids, const uint64_t *offs,
                            size_t n, uint64_t arena, fdev *f, fbe *b, rt_exec_result *r,
                            ms_error *err)
{
    alloc_config cfg;
    alloc_config_default(&cfg);
    cfg.static_ids = ids;
    cfg.static_offsets = offs;
    cfg.static_n = n;
    cfg.static_arena_bytes = arena;
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    o.allocator = "static";
    o.alloc_cfg = &cfg;
    fdev_init(f);
    fbe_init(b, 1ULL << 34);
    return run(s, &o, f, b, r, err);
}

/* Tensor `t` computed on, then offloaded and freed on the D2H stream (a deferred free: the
 * copy and the compute stream used it); e2 is recorded after the free. */
static void offload(schedule_t *s, uint64_t t, uint64_t bytes, double us, uint32_t e1,
                    uint32_t e2)
{
    act(s, SA_ALLOC, SS_COMPUTE, t, bytes, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, us, 0);
    act(s, SA_RECORD, SS_COMPUTE, 0, 0, 0, e1);
    act(s, SA_WAIT, SS_D2H, 0, 0, 0, e1);
    act(s, SA_HOST_ALLOC, SS_D2H, t, bytes, 0, 0);
    act(s, SA_COPY_D2H, SS_D2H, t, bytes, 0, 0);
    act(s, SA_FREE, SS_D2H, t, 0, 0, 0);
    act(s, SA_RECORD, SS_D2H, 0, 0, 0, e2);
}

/* MEMO's rounding buffers under the static arena: the next buffer block is planned at the
 * address of one whose free still waits for the offload when the host allocates it. */
static void test_static_deferred(void)
{
    ms_error err;
    ms_error_clear(&err);
    const uint64_t B = 64ULL << 20;
    const double copy_us = (double)B / 50e3;
    uint64_t ids[4] = {10, 11, 12, 13}, offs[4] = {0, 0, 32ULL << 20, B};
    fdev f;
    fbe b;
    rt_exec_result r;

    /* 11 at 10's offset, after the schedule's wait for 10's offload (the memo case) */
    schedule_t *s = sched_new();
    mark_iter(s, 0);
    uint32_t e1 = sched_new_event(s), e2 = sched_new_event(s);
    offload(s, 10, B, 100, e1, e2);
    act(s, SA_WAIT, SS_COMPUTE, 0, 0, 0, e2);
    act(s, SA_ALLOC, SS_COMPUTE, 11, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_FREE, SS_COMPUTE, 11, 0, 0, 0);
    act(s, SA_HOST_FREE, SS_D2H, 10, 0, 0, 0);
    rt_status st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.oom_drains == 1 && r.alloc_fences == 1,
           "static arena: a planned address held by a block whose free waits for the offload "
           "is released, fenced and allocated (%s; drains %llu, fences %llu)", r.failure,
           (unsigned long long)r.oom_drains, (unsigned long long)r.alloc_fences);
    TAP_OK(fabs(r.iter_time_s * 1e6 - (100 + copy_us + 50)) < 1 && r.astats.num_frees == 2,
           "and the iteration keeps the schedule's order: %.1f us (%.1f)", r.iter_time_s * 1e6,
           100 + copy_us + 50);
    TAP_OK(clean(&f, &b), "static arena after the retry: everything released");
    rt_exec_result_release(&r);
    sched_free(s);

    /* 12 overlaps 10's bytes at another address (the arena sees no collision) and the
     * schedule does not wait: the fence alone makes compute wait for the copy */
    s = sched_new();
    mark_iter(s, 0);
    e1 = sched_new_event(s), e2 = sched_new_event(s);
    offload(s, 10, B, 100, e1, e2);
    act(s, SA_ALLOC, SS_COMPUTE, 12, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 1000, 0);
    act(s, SA_FREE, SS_COMPUTE, 12, 0, 0, 0);
    act(s, SA_HOST_FREE, SS_D2H, 10, 0, 0, 0);
    st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    double want = 100 + copy_us + 1050;
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.oom_drains == 0 && r.alloc_fences == 1 &&
           fabs(r.iter_time_s * 1e6 - want) < 1,
           "a planned block overlapping bytes whose free waits: its stream waits on the free's "
           "events, %.1f us (%.1f; unfenced %.1f)", r.iter_time_s * 1e6, want, 100 + copy_us);
    TAP_OK(clean(&f, &b), "fenced run: everything released");
    rt_exec_result_release(&r);
    sched_free(s);

    /* a real overlap: 11 at 10's address while 10 is live, no free pending */
    s = sched_new();
    mark_iter(s, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 10, B, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 11, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_FREE, SS_COMPUTE, 11, 0, 0, 0);
    act(s, SA_FREE, SS_COMPUTE, 10, 0, 0, 0);
    st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    TAP_OK(st != RT_OK && r.outcome == RTX_ERROR && r.oom_drains == 0 &&
           strstr(r.failure, "action 2: allocating") && strstr(r.failure, "tensor 11"),
           "two live tensors at one planned address, no free pending: an error (%s)",
           r.failure);
    TAP_OK(clean(&f, &b), "after the error: everything released");
    rt_exec_result_release(&r);
    sched_free(s);

    /* the same with another block's free pending: released, retried, still an error */
    s = sched_new();
    mark_iter(s, 0);
    e1 = sched_new_event(s), e2 = sched_new_event(s);
    offload(s, 13, B, 100, e1, e2);
    act(s, SA_ALLOC, SS_COMPUTE, 10, B, 0, 0);
    act(s, SA_ALLOC, SS_COMPUTE, 11, B, 0, 0);
    act(s, SA_COMPUTE, SS_COMPUTE, 0, 0, 50, 0);
    act(s, SA_FREE, SS_COMPUTE, 11, 0, 0, 0);
    act(s, SA_FREE, SS_COMPUTE, 10, 0, 0, 0);
    act(s, SA_HOST_FREE, SS_D2H, 13, 0, 0, 0);
    st = run_static(s, ids, offs, 4, 2 * B, &f, &b, &r, &err);
    TAP_OK(st != RT_OK && r.outcome == RTX_ERROR && r.oom_drains == 1 &&
           strstr(r.failure, "tensor 11"),
           "a real overlap while an unrelated free is pending: retried once, still an error "
           "(drains %llu: %s)", (unsigned long long)r.oom_drains, r.failure);
    TAP_OK(clean(&f, &b), "after the retried error: everything released");
    rt_exec_result_release(&r);
    sched_free(s);
}

int main(void)
{
    test_host_stream();
    test_host_plan();
    test_swap();
    test_credit();
    test_failures();
    test_generated();
    test_static_deferred();
    test_record();
    return tap_done();
}

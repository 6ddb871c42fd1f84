/* cmd_bench.c — `memsim bench`: how fast memsim itself is (a benchmark, not a test):
 * allocator replay throughput per allocator, and the wall time to plan, lower and simulate
 * one gpt-7b iteration at 1M tokens under full-swap. The only command that reads a clock,
 * and only to time memsim. Results belong in BENCHMARKS.md with the machine they ran on. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sim/cli.h"
#include "sim/cmds.h"
#include "sim/replay.h"
#include "sim/replay_bench.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bench_replay(const char *alloc, size_t events, int runs)
{
    replay_bench_result r;
    ms_error err;
    ms_status st = replay_bench(alloc, NULL, events, 42, runs, &r, &err);
    if (st != MS_OK) return cli_fail("bench", st, &err);
    printf("replay %-11s %9llu events  best %8.4f s  mean %8.4f s  %7.2f M events/s  "
           "(peak reserved %.2f GiB, %llu segments)\n",
           alloc, (unsigned long long)r.events, r.best_s, r.mean_s, r.events_per_s / 1e6,
           (double)r.peak_reserved_bytes / MS_GiB, (unsigned long long)r.num_segment_allocs);
    return MS_EXIT_OK;
}

/* Times trace generation + planning + lowering + simulation, best of `runs`. */
static int bench_sim(const char *policy, const char *model, uint64_t seq, int tp, int cp,
                     int runs)
{
    machine_profile *mp;
    ms_error err;
    ms_status st = machine_load_named("a800-8gpu", &mp, &err);
    if (st != MS_OK) return cli_fail("bench", st, &err);
    /* Capacities lifted so the iteration runs to its end (at 1M tokens the real A800 node
     * runs out of host or device memory, which would stop the simulation early). */
    mp->m.gpu_hbm_bytes = 1ULL << 42;
    mp->m.host_mem_bytes = 1ULL << 50;
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = model;
    w.seq = seq;
    w.tp = tp;
    w.cp = cp;
    w.iterations = 1;
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = policy;
    double best_gen = 1e9, best_sim = 1e9;
    sim_result r;
    for (int i = 0; i < runs && st == MS_OK; i++) {
        trace_t *t;
        double t0 = now_s();
        st = pipe_trace(&w, &mp->m, &t, &err);
        if (st != MS_OK) break;
        double t1 = now_s();
        st = pipe_run(t, &mp->m, &p, NULL, &r, &err);
        double t2 = now_s();
        trace_free(t);
        if (t1 - t0 < best_gen) best_gen = t1 - t0;
        if (t2 - t1 < best_sim) best_sim = t2 - t1;
    }
    machine_profile_free(mp);
    if (st != MS_OK) return cli_fail("bench", st, &err);
    printf("simulate %s %s seq %llu tp %d cp %d on a800-8gpu (capacities lifted), one "
           "iteration: generate %.2f ms, plan+lower+simulate %.2f ms (status %s, simulated "
           "iteration %.3f s)\n",
           model, policy, (unsigned long long)seq, tp, cp, best_gen * 1e3, best_sim * 1e3,
           res_status_name(r.status), r.iter_time_s);
    return MS_EXIT_OK;
}

int cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = {{"events", required_argument, 0, 'e'},
                                         {"runs", required_argument, 0, 'r'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    uint64_t events = 2000000, runs = 5;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'e':
            if (!ms_parse_count(optarg, &events) || events < 1000) goto bad;
            break;
        case 'r':
            if (!ms_parse_u64(optarg, &runs) || runs < 1 || runs > 100) goto bad;
            break;
        case 'h':
            printf("usage: memsim bench [--events N] [--runs N]\n"
                   "Measures memsim's own speed on this machine: allocator replay throughput\n"
                   "(events per second, one thread) and the time to simulate one gpt-7b\n"
                   "iteration at 1M tokens under full-swap. Record results in BENCHMARKS.md.\n"
                   "\nexamples (from the source directory, sim/ on the PATH):\n"
                   "  memsim bench\n"
                   "  memsim bench --events 100000 --runs 3\n");
            return MS_EXIT_OK;
        default:
            goto bad;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "memsim bench: unexpected argument '%s' (see --help)\n", argv[optind]);
        return MS_EXIT_USAGE;
    }
    int rc = 0;
    static const char *const allocs[] = {"caching", "stitching", "expandable"};
    for (size_t i = 0; i < 3 && !rc; i++) rc = bench_replay(allocs[i], events, (int)runs);
    if (!rc) rc = bench_sim("full-swap", "gpt-7b", 1048576, 4, 2, (int)runs);
    if (!rc) rc = bench_sim("full-recompute", "gpt-7b", 1048576, 4, 2, (int)runs);
    return rc;
bad:
    fprintf(stderr, "memsim bench: bad option or value (see --help)\n");
    return MS_EXIT_USAGE;
}

/* cmd_replay.c — `memsim replay`: replays a trace's alloc/free program through one or more
 * allocators and reports peaks and segments; for traces imported from PyTorch it prints
 * PyTorch's own numbers beside memsim's. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cli.h"
#include "sim/cmds.h"
#include "sim/replay.h"
#include "traces/trace.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memsim replay --trace FILE [options]\n"
            "Replays the alloc/free records of a workload trace through an allocator over the\n"
            "simulated device (no op timing) and reports peak allocated / reserved bytes, the\n"
            "segments created and the allocator's counters.\n\noptions:\n"
            "  --trace FILE             the trace (required; .gz read transparently)\n"
            "  --allocator A[,B...]     caching | stitching | expandable | static (default caching)\n"
            "  --machine NAME|FILE      device capacity and latencies (default h100-sxm)\n"
            "  --capacity BYTES         device capacity instead of the machine's usable bytes\n"
            "  --max-split-size BYTES   caching: max_split_size\n"
            "  --roundup-power2 N       caching: roundup_power2_divisions\n"
            "  --frag-limit BYTES       stitching: fragmentation limit\n"
            "  --addresses A            segment addresses: recorded (default: the trace's\n"
            "                           own, from the PyTorch importer, where it has them;\n"
            "                           else the machine's order, lat.malloc_top_down),\n"
            "                           ascending or descending (cudaMalloc's usual order)\n"
            "  --check                  run the allocator's invariant check after every call\n"
            "  --segments               list every segment size in order\n"
            "\nexamples (from the source directory, sim/ on the PATH):\n"
            "  memsim replay --trace experiments/validate/traces/h100-sxm/real-8K.trace.gz --allocator caching,stitching,expandable\n"
            "  memsim replay --trace experiments/validate/traces/h200-sxm/offload-8K.trace.gz --machine h200-sxm --segments\n"
            "  memsim replay --trace experiments/validate/traces/h100-sxm/real-8K.trace.gz --capacity 40GiB --check\n");
}

/* PyTorch's numbers, from the importer's meta lines. */
static void pytorch_meta(const char *path, uint64_t *peak, uint64_t *segs, uint64_t *alloc_peak)
{
    *peak = *segs = *alloc_peak = 0;
    trace_reader *r;
    if (trace_reader_open(path, &r, NULL) != MS_OK) return;
    for (size_t i = 0; i < trace_reader_meta_count(r); i++) {
        const char *k = trace_reader_meta_key(r, i), *v = trace_reader_meta_value(r, i);
        if (!strcmp(k, "pytorch.peak_reserved_bytes")) ms_parse_u64(v, peak);
        if (!strcmp(k, "pytorch.segments")) ms_parse_u64(v, segs);
        if (!strcmp(k, "pytorch.stats.allocated_bytes.all.peak")) ms_parse_u64(v, alloc_peak);
    }
    trace_reader_free(r);
}

static int replay_one(const char *path, const char *allocator, const replay_opts *base,
                      int list_segments)
{
    replay_opts o = *base;
    o.allocator = allocator;
    replay_result r;
    replay_result_init(&r);
    ms_error err;
    ms_status st = replay_file(path, &o, &r, &err);
    if (st != MS_OK) {
        replay_result_clear(&r);
        return cli_fail("replay", st, &err);
    }
    printf("== %s through %s\n", path, allocator);
    replay_print(stdout, &r);
    uint64_t pt_peak, pt_segs, pt_alloc;
    pytorch_meta(path, &pt_peak, &pt_segs, &pt_alloc);
    if (pt_peak)
        printf("PyTorch recorded: peak reserved %llu bytes, %llu segments; memsim: %llu bytes "
               "(%+.3f%%), %zu segments\n",
               (unsigned long long)pt_peak, (unsigned long long)pt_segs,
               (unsigned long long)r.peak_reserved_bytes,
               100.0 * ((double)r.peak_reserved_bytes - (double)pt_peak) / (double)pt_peak,
               r.n_segments);
    if (pt_alloc)
        printf("PyTorch memory_stats: peak allocated %llu bytes; memsim: %llu bytes (%+lld)\n",
               (unsigned long long)pt_alloc, (unsigned long long)r.peak_allocated_bytes,
               (long long)(r.peak_allocated_bytes - pt_alloc));
    if (list_segments)
        for (size_t i = 0; i < r.n_segments; i++)
            printf("segment %zu %llu\n", i, (unsigned long long)r.segment_bytes[i]);
    int rc = r.status == REPLAY_OOM ? MS_EXIT_FAIL : MS_EXIT_OK;
    replay_result_clear(&r);
    return rc;
}

int cmd_replay(int argc, char **argv)
{
    static const struct option opts[] = {
        {"trace", required_argument, 0, 't'}, {"allocator", required_argument, 0, 'a'},
        {"machine", required_argument, 0, 'm'}, {"capacity", required_argument, 0, 'c'},
        {"max-split-size", required_argument, 0, 's'}, {"roundup-power2", required_argument, 0, 'r'},
        {"frag-limit", required_argument, 0, 'f'}, {"check", no_argument, 0, 'k'},
        {"segments", no_argument, 0, 'g'}, {"addresses", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *trace = NULL, *machine = "h100-sxm";
    char allocs[256] = "caching";
    alloc_config cfg;
    alloc_config_default(&cfg);
    replay_opts o;
    replay_opts_default(&o);
    int list_segments = 0, c;
    optind = 1;
    opterr = 0;
    int li = -1;
    while ((c = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
        uint64_t x;
        switch (c) {
        case 't': trace = optarg; break;
        case 'a': snprintf(allocs, sizeof allocs, "%s", optarg); break;
        case 'm': machine = optarg; break;
        case 'c':
            if (cli_parse_bytes("replay", "capacity", optarg, &x)) return MS_EXIT_USAGE;
            if (!x || x > (UINT64_C(1) << 50)) goto badval;
            o.capacity_bytes = x;
            break;
        case 's':
            if (cli_parse_bytes("replay", "max-split-size", optarg, &x)) return MS_EXIT_USAGE;
            cfg.max_split_size_bytes = x;
            if (alloc_config_problem(&cfg)) goto badval;
            break;
        case 'r':
            if (!ms_parse_u64(optarg, &x) || x > 64) goto badval;
            cfg.roundup_power2_divisions = (unsigned)x;
            if (alloc_config_problem(&cfg)) goto badval;
            break;
        case 'f':
            if (cli_parse_bytes("replay", "frag-limit", optarg, &x)) return MS_EXIT_USAGE;
            cfg.frag_limit_bytes = x;
            break;
        case 'd':
            if (!strcmp(optarg, "recorded")) {
                o.ignore_recorded_addresses = o.descending_addresses = 0;
            } else if (!strcmp(optarg, "ascending")) {
                o.ignore_recorded_addresses = 1;
                o.descending_addresses = 0;
            } else if (!strcmp(optarg, "descending")) {
                o.ignore_recorded_addresses = o.descending_addresses = 1;
            } else {
                fprintf(stderr, "memsim replay: bad value '%s' for --addresses (recorded, "
                        "ascending or descending)\n", optarg);
                return MS_EXIT_USAGE;
            }
            break;
        case 'k': o.check_every_op = 1; break;
        case 'g': list_segments = 1; break;
        case 'h': usage(stdout); return MS_EXIT_OK;
        default:
            fprintf(stderr, "memsim replay: bad option '%s' (see --help)\n", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
        li = -1;
    }
    if (!trace || optind != argc) {
        usage(stderr);
        return MS_EXIT_USAGE;
    }
    if (!allocs[strspn(allocs, ",")]) {
        fprintf(stderr, "memsim replay: --allocator names no allocator (see --help)\n");
        return MS_EXIT_USAGE;
    }
    machine_profile *mp = NULL;
    ms_error err;
    ms_status st = machine_load_named(machine, &mp, &err);
    if (st != MS_OK) return cli_fail("replay", st, &err);
    o.machine = &mp->m;
    o.cfg = &cfg;
    int rc = MS_EXIT_OK;
    for (char *a = strtok(allocs, ","); a && rc != MS_EXIT_INPUT; a = strtok(NULL, ",")) {
        int r = replay_one(trace, a, &o, list_segments);
        if (r > rc) rc = r;
    }
    machine_profile_free(mp);
    return rc;
badval:
    fprintf(stderr, "memsim replay: bad value '%s' for --%s (%s)\n", optarg,
            li >= 0 ? opts[li].name : "?",
            alloc_config_problem(&cfg) ? alloc_config_problem(&cfg)
                                       : "--capacity: 1 byte to 1 PiB");
    return MS_EXIT_USAGE;
}

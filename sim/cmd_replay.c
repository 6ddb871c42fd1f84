/* cmd_replay.c — `memsim replay`: replays a trace's alloc/free program through one or more
 * allocators and reports peaks and segments; for traces imported from PyTorch it prints
 * PyTorch's own numbers beside memsim's. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cmds.h"
#include "sim/runs.h"

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

static int replay_one(const runs_replay_args *ra, const machine_t *m, const char *allocator)
{
    const char *path = ra->trace;
    replay_result r;
    replay_result_init(&r);
    ms_error err;
    ms_status st = runs_replay_one(ra, m, allocator, &r, &err);
    if (st != MS_OK) {
        replay_result_clear(&r);
        return cli_fail("replay", st, &err);
    }
    printf("== %s through %s\n", path, allocator);
    replay_print(stdout, &r);
    uint64_t pt_peak, pt_segs, pt_alloc;
    runs_pytorch_meta(path, &pt_peak, &pt_segs, &pt_alloc);
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
    if (ra->list_segments)
        for (size_t i = 0; i < r.n_segments; i++)
            printf("segment %zu %llu\n", i, (unsigned long long)r.segment_bytes[i]);
    int rc = r.status == REPLAY_OOM ? MS_EXIT_FAIL : MS_EXIT_OK;
    replay_result_clear(&r);
    return rc;
}

int cmd_replay(int argc, char **argv)
{
    runs_replay_args ra;
    ms_error err;
    int rc = runs_replay_parse(argc, argv, &ra, &err);
    if (rc && ra.usage) usage(stderr);
    else if (rc) fprintf(stderr, "memsim replay: %s\n", err.msg);
    if (rc) return rc;
    if (ra.help) {
        usage(stdout);
        return MS_EXIT_OK;
    }
    machine_profile *mp = NULL;
    ms_status st = machine_load_named(ra.machine, &mp, &err);
    if (st != MS_OK) return cli_fail("replay", st, &err);
    char allocs[sizeof ra.allocators];
    memcpy(allocs, ra.allocators, sizeof allocs);
    for (char *a = strtok(allocs, ","); a && rc != MS_EXIT_INPUT; a = strtok(NULL, ",")) {
        int r = replay_one(&ra, &mp->m, a);
        if (r > rc) rc = r;
    }
    machine_profile_free(mp);
    return rc;
}

/* replay.h — replays the alloc/free program of a workload trace through one allocator
 * over the simulated memory backend, without timing the ops: the memory side only (peaks,
 * segments, allocator counters, OOM with the allocator's state), from a trace file or an
 * in-memory event array. Used by `memsim replay`, the replay benchmark (sim/replay_bench.h),
 * the experiments and the tests. */
#ifndef MEMSIM_REPLAY_H
#define MEMSIM_REPLAY_H

#include "memory/alloc.h"
#include "traces/machine.h"

typedef struct replay_opts {
    const char *allocator;       /* registry name (memsim list); NULL: "caching" */
    const alloc_config *cfg;     /* NULL: alloc_config_default() */
    uint64_t capacity_bytes;     /* device bytes the allocator may take; 0: machine's usable */
    const machine_t *machine;    /* may be NULL: no latencies, capacity_bytes then required */
    int check_every_op;          /* the allocator's invariant check after every call */
    /* Segment addresses (the caching allocator's best fit breaks ties between free blocks of
     * one size by address, so where cudaMalloc puts segments changes which block is reused):
     * a recorded run's segment_alloc addresses and sizes, handed out in order while the
     * replay asks for the same sizes (simbe_set_segment_script). NULL: replay_file takes them
     * from the trace's "meta pytorch.segment_allocs.K" lines (the PyTorch importer's) unless
     * ignore_recorded_addresses. Without a script, or past it, addresses ascend from a bump
     * pointer, or descend with descending_addresses. */
    const uint64_t *segment_addrs, *segment_sizes;
    size_t n_segment_addrs;
    int ignore_recorded_addresses;
    int descending_addresses;
} replay_opts;

void replay_opts_default(replay_opts *o);

typedef enum replay_status { REPLAY_OK = 0, REPLAY_OOM } replay_status;
const char *replay_status_name(replay_status s);

typedef struct replay_result {
    replay_status status;
    uint64_t events;             /* alloc + free events replayed (the failing one excluded) */
    uint64_t allocs, frees;
    uint64_t peak_allocated_bytes, peak_reserved_bytes;
    uint64_t peak_active_bytes, peak_requested_bytes;
    alloc_stats stats;           /* the allocator's counters at the end (or at the OOM) */
    uint64_t *segment_bytes;     /* every dev_malloc of the run, in order */
    size_t n_segments;
    uint64_t device_peak_bytes;  /* the backend's peak of physical bytes in use */
    double alloc_time_us;        /* backend time charged to allocator calls (machine given) */
    size_t recorded_addresses;   /* segment addresses given (replay_opts.segment_addrs) */
    size_t recorded_addresses_used; /* how many of them the replay's cudaMallocs took */
    uint64_t sync_calls;         /* allocator calls that synchronized the device */
    /* status == REPLAY_OOM: the failing request */
    uint64_t oom_index;          /* 0-based index among the alloc/free events */
    uint64_t oom_line;           /* its trace line; 0 for in-memory events */
    uint64_t oom_id, oom_bytes;
    int oom_stream;
    char *oom_dump;              /* the allocator's dump at the OOM (alloc_dump text) */
} replay_result;

/* Zeroes r; replay_result_clear frees what a replay filled in and zeroes r again. */
void replay_result_init(replay_result *r);
void replay_result_clear(replay_result *r);

/* Replays a trace file (streaming; ops and marks are ignored). An OOM is a result
 * (MS_OK, r->status == REPLAY_OOM); a malformed trace, a free of a tensor that is not live,
 * an id allocated twice or a broken allocator invariant is an error with "FILE:LINE: ...".
 * r must have been initialised; it is cleared first. */
ms_status replay_file(const char *path, const replay_opts *o, replay_result *r, ms_error *err);

/* One event of an in-memory alloc/free program. */
typedef struct replay_event {
    uint64_t id;                 /* tensor id: live ids are unique */
    uint64_t bytes;              /* alloc only */
    int32_t stream;              /* alloc only */
    uint8_t is_alloc;
} replay_event;

ms_status replay_events(const replay_event *ev, size_t n, const replay_opts *o,
                        replay_result *r, ms_error *err);

/* A human-readable summary of a replay (memsim replay). */
void replay_print(FILE *f, const replay_result *r);

#endif

/* timeline.h — what the simulator saw, for people: spans (one per action that took time, on
 * a track per stream / engine) and the memory time series (allocated, reserved, active and
 * host bytes, and the device bytes live by kind, at every change). Written as a Chrome-trace /
 * Perfetto JSON file ({"traceEvents":[...]}: "X" complete events, "C" counter events,
 * thread_name metadata) as a CSV (time_us,allocated_bytes,reserved_bytes,active_bytes,
 * host_bytes, then one <kind>_bytes column per planners/blockmix.h kind), and as the
 * intervals CSV the timeline plot reads (lane,start_us,end_us,kind). The files
 * are written through ms_out (they appear only when complete) with fixed number formats, so
 * the same run gives the same bytes. Filled by sim/exec.c; format in docs/SIMULATOR.md. */
#ifndef MEMSIM_TIMELINE_H
#define MEMSIM_TIMELINE_H

#include "planners/blockmix.h"
#include "base/util.h"

#define TL_NAME_MAX 64

typedef struct tl tl_t;

/* One span; fields that do not apply are -1 (index, op) or 0 with has_tensor 0. */
typedef struct tl_span_info {
    int track;              /* tid in the JSON (the stream) */
    double start_us, end_us;
    const char *name;       /* shown on the span (copied, cut at TL_NAME_MAX - 1) */
    const char *cat;        /* category: "compute", "copy", "alloc", ... (copied) */
    int64_t index;          /* schedule action index */
    int64_t op;             /* trace op id */
    uint64_t tensor;
    int has_tensor;
    uint64_t bytes;         /* bytes moved or allocated, 0: none */
} tl_span_info;

tl_t *tl_new(void);
void tl_free(tl_t *t);

ms_status tl_span(tl_t *t, const tl_span_info *s);
/* A memory sample; kinds (may be NULL: all 0) are the device bytes live by kind. A sample
 * equal to the previous one in every value is dropped, so the series has one row per change. */
ms_status tl_mem(tl_t *t, double time_us, uint64_t allocated_bytes, uint64_t reserved_bytes,
                 uint64_t active_bytes, uint64_t host_bytes, const uint64_t *kinds);

size_t tl_span_count(const tl_t *t);
size_t tl_mem_count(const tl_t *t);

/* The Chrome-trace JSON. track_names[i] names tid i (thread_name metadata). Spans appear
 * ordered by start time, then by the order they were added. */
ms_status tl_write_json(const tl_t *t, const char *path, const char *const *track_names,
                        size_t ntracks, ms_error *err);
/* The same events into an open Chrome-trace file, as process pid named `process` (a
 * process_name metadata event; pid 1 is the one tl_write_json writes): *first is 1 before
 * the file's first event and 0 after. Times are whole nanoseconds, written as microseconds
 * with three decimals; each span's bounds are rounded apart, so spans that follow one another
 * on a track never overlap. MS_ERR_NOMEM when out of memory. */
ms_status tl_write_json_events(const tl_t *t, ms_out *o, int pid, const char *process,
                               const char *const *track_names, size_t ntracks, int *first);
/* The memory time series CSV. */
ms_status tl_write_memcsv(const tl_t *t, const char *path, ms_error *err);
/* The stream intervals CSV for plots/timeline.gp: a header "lane,start_us,end_us,kind", then
 * one row per span in the JSON's order, lane = track, kind by category: 0 compute,
 * 1 recompute, 2 copy, 3 alloc or sync, 4 host; spans of other categories (waits) are left
 * out. */
ms_status tl_write_intervals(const tl_t *t, const char *path, ms_error *err);

#endif

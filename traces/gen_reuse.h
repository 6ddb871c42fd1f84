/* gen_reuse.h — the generator's traces reused across the points of a sweep: the trace of
 * one point is kept as a template, and a later point of the same configuration but for its
 * sequence length and micro-batch size is generated as a trace of the template's structure
 * (gen_trace_like): the generator runs as always and computes every number from the point's
 * own inputs, and its records are compared with the template's instead of being checked,
 * copied and indexed afresh. A point whose records differ in structure is generated afresh.
 * A template is kept only when generating its own point again after it gives its trace
 * back bit for bit (tshape_equal). Used by the pipeline (sim/pipeline.c,
 * pipe_workload.gen_reuse), which `memsim sweep` gives one cache; the traces are the same
 * with it and without it. */
#ifndef MEMSIM_GEN_REUSE_H
#define MEMSIM_GEN_REUSE_H

#include "traces/gen.h"

typedef struct greuse greuse;

typedef struct greuse_stats {
    uint64_t hits;           /* traces made after a template's structure */
    uint64_t misses;         /* generated afresh and kept as a template */
    uint64_t once;           /* generated afresh, not kept (the check above failed) */
} greuse_stats;

/* A cache of a few templates, the oldest replaced first; NULL when out of memory. */
greuse *greuse_new(void);
void greuse_free(greuse *c);
/* What gen_trace(cfg, m) gives, through c's templates (c NULL: gen_trace itself). The
 * caller owns *out and frees it with trace_free, as gen_trace's; the cache keeps its own
 * reference to a template. */
ms_status greuse_trace(greuse *c, const gen_config *cfg, const machine_t *m, trace_t **out,
                       ms_error *err);
void greuse_get_stats(const greuse *c, greuse_stats *out);

#endif

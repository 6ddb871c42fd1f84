/* lower_chunks_int.h — internal to the chunk lowering: the helpers that
 * planners/protrain/lower_chunks_layout.c (the chunk layout) shares with
 * planners/protrain/lower_chunks.c (the schedule). Not an interface: lower_chunks.h is what
 * callers use. */
#ifndef MEMSIM_LOWER_CHUNKS_INT_H
#define MEMSIM_LOWER_CHUNKS_INT_H

#include "planners/protrain/lower_chunks.h"

#include "traces/roofline.h"
#include "base/u64map.h"

/* planners/protrain/lower_chunks_layout.c */
/* An op's duration: the trace's, else the roofline kernel time on m. */
ms_status lc_op_dur(const machine_t *m, const roof_params *rp, const trace_op *op, double *us,
                    ms_error *err);
/* Whether the lowering leaves op out (the optimizer phase, ops on chunk-managed state). */
int lc_op_skipped(const u64map *state, const trace_op *op, trace_phase ph);

#endif

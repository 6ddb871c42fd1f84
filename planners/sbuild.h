/* sbuild.h — the schedule builder the lowerings share (planners/lower.c, lower_chunks.c,
 * lower_dha.c): fresh actions stamped with the builder's cursor (the layer and phase being
 * lowered), actions added in program order through an optional per-lowering adjustment, new
 * events, and the counts a lowering reports (actions, events, copied bytes). The schedule
 * itself is planners/schedule.h. */
#ifndef MEMSIM_SBUILD_H
#define MEMSIM_SBUILD_H

#include "planners/schedule.h"
#include "base/util.h"

typedef struct sbuild sbuild;

/* Adjusts an action just before it is added (a lowering's framework streams, for one). */
typedef void (*sbuild_hook)(void *ctx, sched_action *a);

/* A builder adding to s; out-of-memory failures fill err with nomem_msg. NULL when out of
 * memory. s stays the caller's. */
sbuild *sbuild_new(schedule_t *s, ms_error *err, const char *nomem_msg);
void sbuild_free(sbuild *b);
void sbuild_set_hook(sbuild *b, sbuild_hook fn, void *ctx);
/* The layer and phase new actions carry (initially -1 and TP_NONE). */
void sbuild_at(sbuild *b, int32_t layer, trace_phase phase);

/* A fresh action of kind k on stream s: op -1, DHA efficiency 1, the cursor's layer and
 * phase, everything else 0. */
sched_action sbuild_act(const sbuild *b, sched_kind k, sched_stream s);
/* Adds a (after the hook) and counts it. MS_ERR_NOMEM with the builder's message. */
ms_status sbuild_put(sbuild *b, const sched_action *a);
/* sbuild_act and sbuild_put in two steps, the action made where it goes: the caller fills
 * the fresh action sbuild_begin returns (NULL: out of memory, the builder's message given)
 * and hands it to sbuild_end, adding nothing to the schedule in between. */
sched_action *sbuild_begin(sbuild *b, sched_kind k, sched_stream s);
void sbuild_end(sbuild *b, sched_action *a);
/* sbuild_put of a fresh action on tensor id of `bytes` (ALLOC, FREE, COPY, HOST_*). */
ms_status sbuild_tensor(sbuild *b, sched_kind k, sched_stream s, uint64_t id, uint64_t bytes);
/* sbuild_tensor of an ALLOC of a block holding what kind says (sched_block). */
ms_status sbuild_block(sbuild *b, sched_stream s, uint64_t id, uint64_t bytes, sched_block kind);
/* sbuild_put of a fresh RECORD or WAIT of event e. */
ms_status sbuild_event(sbuild *b, sched_kind k, sched_stream s, uint32_t e);
/* A new event of the schedule, counted. */
uint32_t sbuild_new_event(sbuild *b);

/* What this builder added: actions, events, and bytes copied each way. */
size_t sbuild_actions(const sbuild *b);
size_t sbuild_events(const sbuild *b);
uint64_t sbuild_h2d_bytes(const sbuild *b);
uint64_t sbuild_d2h_bytes(const sbuild *b);

#endif

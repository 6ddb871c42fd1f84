/* sbuild.c — the schedule builder of sbuild.h, shared by the three lowerings
 * (planners/lower.c, lower_chunks.c, lower_dha.c) so that an action is made, adjusted,
 * added and counted one way. */
#include "planners/sbuild.h"

#include <stdlib.h>
#include <string.h>

struct sbuild {
    schedule_t *s;
    ms_error *err;
    const char *nomem_msg;
    sbuild_hook hook;
    void *hook_ctx;
    int32_t layer;
    trace_phase phase;
    size_t actions, events;
    uint64_t h2d_bytes, d2h_bytes;
};

sbuild *sbuild_new(schedule_t *s, ms_error *err, const char *nomem_msg)
{
    sbuild *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->s = s;
    b->err = err;
    b->nomem_msg = nomem_msg ? nomem_msg : "out of memory";
    b->layer = -1;
    b->phase = TP_NONE;
    return b;
}

void sbuild_free(sbuild *b) { free(b); }

void sbuild_set_hook(sbuild *b, sbuild_hook fn, void *ctx)
{
    b->hook = fn;
    b->hook_ctx = ctx;
}

void sbuild_at(sbuild *b, int32_t layer, trace_phase phase)
{
    b->layer = layer;
    b->phase = phase;
}

/* sbuild_act in place: the helpers below fill their action where it lies instead of
 * copying a returned one (each copy of an action just written stalls on store
 * forwarding; a lowering makes millions in a sweep). */
static inline void act_init(const sbuild *b, sched_action *a, sched_kind k, sched_stream s)
{
    memset(a, 0, sizeof *a);
    a->kind = k;
    a->stream = s;
    a->op = -1;
    a->dha_eff = 1.0; /* the link rate: what a copy and an action without host traffic get */
    a->layer = b->layer;
    a->phase = b->phase;
}

sched_action sbuild_act(const sbuild *b, sched_kind k, sched_stream s)
{
    sched_action a;
    act_init(b, &a, k, s);
    return a;
}

/* The schedule's new last action, or NULL with the builder's message. */
static sched_action *slot(sbuild *b)
{
    sched_action *a = sched_append(b->s);
    if (!a) ms_fail(b->err, MS_ERR_NOMEM, "%s", b->nomem_msg);
    return a;
}

/* An action written in its place in the schedule: the hook adjusts it there, and it is
 * counted. */
void sbuild_end(sbuild *b, sched_action *a)
{
    if (b->hook) b->hook(b->hook_ctx, a);
    b->actions++;
    if (a->kind == SA_COPY_H2D) b->h2d_bytes += a->bytes;
    if (a->kind == SA_COPY_D2H) b->d2h_bytes += a->bytes;
}

sched_action *sbuild_begin(sbuild *b, sched_kind k, sched_stream s)
{
    sched_action *a = slot(b);
    if (a) act_init(b, a, k, s);
    return a;
}

ms_status sbuild_put(sbuild *b, const sched_action *a)
{
    sched_action *c = slot(b);
    if (!c) return MS_ERR_NOMEM;
    *c = *a;
    sbuild_end(b, c);
    return MS_OK;
}

ms_status sbuild_tensor(sbuild *b, sched_kind k, sched_stream s, uint64_t id, uint64_t bytes)
{
    sched_action *a = sbuild_begin(b, k, s);
    if (!a) return MS_ERR_NOMEM;
    a->tensor = id;
    a->bytes = bytes;
    sbuild_end(b, a);
    return MS_OK;
}

ms_status sbuild_block(sbuild *b, sched_stream s, uint64_t id, uint64_t bytes, sched_block kind)
{
    sched_action *a = sbuild_begin(b, SA_ALLOC, s);
    if (!a) return MS_ERR_NOMEM;
    a->tensor = id;
    a->bytes = bytes;
    a->block = (uint8_t)kind;
    sbuild_end(b, a);
    return MS_OK;
}

ms_status sbuild_event(sbuild *b, sched_kind k, sched_stream s, uint32_t e)
{
    sched_action *a = sbuild_begin(b, k, s);
    if (!a) return MS_ERR_NOMEM;
    a->event = e;
    sbuild_end(b, a);
    return MS_OK;
}

uint32_t sbuild_new_event(sbuild *b)
{
    b->events++;
    return sched_new_event(b->s);
}

size_t sbuild_actions(const sbuild *b) { return b->actions; }
size_t sbuild_events(const sbuild *b) { return b->events; }
uint64_t sbuild_h2d_bytes(const sbuild *b) { return b->h2d_bytes; }
uint64_t sbuild_d2h_bytes(const sbuild *b) { return b->d2h_bytes; }

/* engine.h — the discrete-event engine of the simulator: a heap of timed events ordered by
 * (time_us, sequence number), so events at equal times run in the order they were scheduled
 * and never in an order that depends on pointers or memory layout. Each event carries a
 * callback and a payload (a context pointer and a 64-bit argument). Cancellation is lazy:
 * an event id holds a slot and a generation; cancelling bumps the slot's generation and the
 * stale heap entry is skipped when it surfaces. Time is simulated only (microseconds in a
 * double); nothing here reads a clock. Used by sim/link.c and sim/exec.c. */
#ifndef MEMSIM_ENGINE_H
#define MEMSIM_ENGINE_H

#include "base/util.h"

typedef struct eng eng_t;

/* An event's identity: 0 is never a valid id (a "no event" value for callers). */
typedef uint64_t eng_id;

typedef void (*eng_fn)(eng_t *e, void *ctx, uint64_t arg);

eng_t *eng_new(void);
void eng_free(eng_t *e);

/* The current simulated time: the time of the event being run (0 before the first). */
double eng_now(const eng_t *e);

/* Schedules fn(e, ctx, arg) at time_us. A time before now (rounding in a caller's
 * arithmetic) is run at now: time never goes backwards. Returns the event's id, or 0 when
 * out of host memory (the caller reports MS_ERR_NOMEM). */
eng_id eng_at(eng_t *e, double time_us, eng_fn fn, void *ctx, uint64_t arg);
/* Same, delay_us after now (a negative delay counts as 0). */
eng_id eng_after(eng_t *e, double delay_us, eng_fn fn, void *ctx, uint64_t arg);
/* eng_at and eng_after for an event no one will cancel: no id, no slot to take and give
 * back (the executor's timers and wake-ups, most of a simulation's events). Ordered among
 * the others exactly as eng_at's. 1 on success, 0 when out of memory. */
int eng_post(eng_t *e, double time_us, eng_fn fn, void *ctx, uint64_t arg);
int eng_post_after(eng_t *e, double delay_us, eng_fn fn, void *ctx, uint64_t arg);

/* Cancels a pending event. 1 if it was pending, 0 if it already ran, was cancelled, or
 * id is 0. */
int eng_cancel(eng_t *e, eng_id id);
/* 1 if the event is still pending. */
int eng_pending_id(const eng_t *e, eng_id id);

/* Runs the earliest pending event. 1 if one ran, 0 if none is pending. */
int eng_step(eng_t *e);
/* Runs events until none is pending or eng_stop was called. Returns the number run. */
uint64_t eng_run(eng_t *e);
/* Makes eng_run return after the current event (the remaining events stay pending). */
void eng_stop(eng_t *e);

/* Live (scheduled, not cancelled, not yet run) events. */
size_t eng_pending(const eng_t *e);
/* Events run so far. */
uint64_t eng_events_run(const eng_t *e);

#endif

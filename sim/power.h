/* power.h — the board's power limit in the simulator (docs/SIMULATOR.md, "Power limit"):
 * from a simulated pass's timeline of compute actions, the SM clock each window of the
 * schedule can hold while its average power stays at the profile's power.limit_w, and the
 * resulting stretch of each compute-bound action's duration for the next pass. Kernel-level
 * figures only (the profile's power.* from `memsim probe --power`); nothing is fitted to a
 * step. Used by sim/pipeline.c, which runs the passes. */
#ifndef MEMSIM_POWER_H
#define MEMSIM_POWER_H

#include "base/util.h"
#include "planners/schedule.h"
#include "traces/machine.h"
#include "traces/trace.h"

typedef struct pw_model pw_model;

/* Why a run gets no power model (PW_ON: it gets one). */
typedef enum pw_why {
    PW_ON = 0,
    PW_NO_LIMIT,     /* the profile has no power.limit_w (or no power.gemm_j) */
    PW_NO_TRACE,     /* no trace to tell the actions' kernels */
    PW_NO_ATTN_FIG,  /* the trace's attention kernels (memsim's or the vendor's) have no
                        power figures in the profile */
    PW_MEASURED      /* the trace's op times are measured (meta op_times measured, a
                        capture, a recording): they carry the clock the GPU held */
} pw_why;

/* A model for schedule s of trace t on machine m, or *out = NULL with *why saying why none
 * applies (not an error). MS_ERR_NOMEM on allocation failure. */
ms_status pw_new(const machine_t *m, const schedule_t *s, const trace_t *t, pw_model **out,
                 pw_why *why, ms_error *err);
void pw_free(pw_model *p);

/* The per-action duration multipliers for the next pass (1 everywhere before the first
 * update), and the array the executor writes each compute action's start time into. */
const double *pw_scales(const pw_model *p);
double *pw_starts(pw_model *p);

/* Recomputes the multipliers from the starts the last pass wrote (its durations were
 * dur_us x the multipliers it ran with); returns the largest change of a multiplier. */
double pw_update(pw_model *p);

/* Over the last update: the compute-bound actions' clock, weighted by their time at the
 * maximum clock, as a fraction of the maximum (1: the limit never bound), and the
 * highest window's average power at that clock, W. */
double pw_clock_ratio(const pw_model *p);
double pw_peak_window_w(const pw_model *p);

#endif

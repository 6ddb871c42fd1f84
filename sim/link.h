/* link.h — the host link (PCIe) of one GPU as a set of flows sharing bandwidth max-min
 * fairly, after SimGrid's flow-level network model: every flow has a direction (H2D or
 * D2H), bytes left and an optional own rate cap; the constraints are a cap per direction and
 * a duplex cap on the sum of both directions. Rates come from progressive filling
 * (water-filling) over those constraints and the flows' own caps, and are recomputed on every
 * flow start and finish; the next completion is then rescheduled on the engine. Accounts
 * busy time (>= 1 active flow) and bytes moved per direction. Used by sim/exec.c for copies
 * and for the host traffic of DHA kernels.
 *
 * Sharing is weighted max-min: a flow of weight w rises w times as fast as a flow of weight 1
 * until a constraint or its own cap stops it. Copies have weight 1; DHA flows (started with
 * link_start_dha) get the link's DHA weight, 1 (fair) unless link_set_dha_weight says
 * otherwise. Why a knob: on this workplace's H200 (traces/machines/h200-sxm.probe.csv) a
 * DHA-read kernel alone reached 51.2 GB/s and an H2D copy alone 55.1 GB/s; run together the
 * kernel kept 46.6 GB/s and the copy got about 8 GB/s while they overlapped, the link total
 * staying near 55 GB/s: a weight of about 5.5 for the DHA flow, not fair sharing. The
 * weight is a property of the GPU and driver (how many SMs issue host reads against the
 * copy engine), so it is set per machine; see docs/MEMFERRY.md. */
#ifndef MEMSIM_LINK_H
#define MEMSIM_LINK_H

#include "sim/engine.h"

typedef enum link_dir { LINK_H2D = 0, LINK_D2H = 1, LINK_NDIR = 2 } link_dir;

typedef struct link link_t;

/* Called once when a flow has moved all its bytes, at the simulated time it did. */
typedef void (*link_done_fn)(void *ctx, uint64_t arg);

/* Caps in bytes/s; a cap <= 0 (or non-finite) means that constraint is absent. The link
 * schedules its completion events on e, which must outlive it. */
link_t *link_new(eng_t *e, double h2d_Bps, double d2h_Bps, double duplex_Bps);
void link_free(link_t *l);

/* Starts a flow of `bytes` now in direction dir, with its own rate cap cap_Bps (<= 0: none).
 * fn(ctx, arg) runs when it finishes (never from inside link_start, even for 0 bytes).
 * *flow_id (may be NULL) receives an id for link_flow_rate_Bps. MS_ERR_NOMEM or
 * MS_ERR_INVALID (bad direction) otherwise. */
ms_status link_start(link_t *l, link_dir dir, uint64_t bytes, double cap_Bps,
                     link_done_fn fn, void *ctx, uint64_t arg, uint64_t *flow_id);

/* As link_start, with the flow's sharing weight (<= 0 or non-finite: 1). */
ms_status link_start_w(link_t *l, link_dir dir, uint64_t bytes, double cap_Bps, double weight,
                       link_done_fn fn, void *ctx, uint64_t arg, uint64_t *flow_id);
/* The weight DHA flows get (default 1: fair). MS_ERR_INVALID unless 0 < w < infinity. Applies
 * to flows started afterwards. */
ms_status link_set_dha_weight(link_t *l, double w);
double link_dha_weight(const link_t *l);
/* A DHA kernel's host traffic: link_start_w with the link's DHA weight. */
ms_status link_start_dha(link_t *l, link_dir dir, uint64_t bytes, double cap_Bps,
                         link_done_fn fn, void *ctx, uint64_t arg, uint64_t *flow_id);

/* A live flow's current rate in bytes/s (INFINITY when nothing limits it), or -1 if the
 * flow is not live. */
double link_flow_rate_Bps(const link_t *l, uint64_t flow_id);
/* Live flows in a direction. */
size_t link_active(const link_t *l, link_dir dir);
/* How long the live copies in dir (flows not started by link_start_dha) still run if their
 * rates stay as they are now, microseconds (0: none; INFINITY: a copy that gets no rate). */
double link_copies_left_us(link_t *l, link_dir dir);
/* Time with at least one live flow in dir, up to now (microseconds). */
double link_busy_us(link_t *l, link_dir dir);
/* Bytes moved in dir up to now (finished flows plus the progress of live ones). */
double link_bytes(link_t *l, link_dir dir);
/* Flows started so far. */
uint64_t link_flows_started(const link_t *l);

/* The max-min fair allocation on its own (exposed for tests and for cost models that want
 * the link's steady-state rates): n flows with directions dir[i] and own caps cap_Bps[i]
 * (<= 0: none); fills rate_Bps[i]. Needs n scratch bytes in `frozen` (NULL: n <= 64). */
void link_maxmin(size_t n, const link_dir *dir, const double *cap_Bps, double h2d_Bps,
                 double d2h_Bps, double duplex_Bps, double *rate_Bps, unsigned char *frozen);
/* Weighted max-min: flow i rises at weight[i] times the common level (weight NULL: all 1; a
 * weight <= 0 or non-finite counts as 1). link_maxmin is this with equal weights. */
void link_maxmin_w(size_t n, const link_dir *dir, const double *cap_Bps, const double *weight,
                   double h2d_Bps, double d2h_Bps, double duplex_Bps, double *rate_Bps,
                   unsigned char *frozen);

#endif

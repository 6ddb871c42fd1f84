/* dsa.h — offline dynamic storage allocation (DSA): given buffers with fixed half-open
 * lifetimes [lower, upper) and sizes, choose an offset for each so that buffers live at the
 * same time never share bytes, minimizing the peak (largest offset + size) or deciding
 * whether the buffers fit in a given capacity. This is the static memory planner at the core
 * of MEMO's bi-level memory plan (MEMO §4.2): the MEMO planner calls dsa_solve() once per
 * transformer layer's transient tensors and once more for the whole iteration; `memsim dsa`
 * (sim/cmd_dsa.c) runs it on instance files; tests/test_dsa.c checks it.
 *
 * Solvers (dsa_solve combines them, each usable alone):
 *  - greedy: a portfolio of buffer orderings x placement rules (first fit by offset, best
 *    fit), then "skyline" placements (lowest offset first) under fixed and seeded-random
 *    priorities, stopping early at the lower bound LOAD;
 *  - bb: an exact branch-and-bound for "fits in capacity C" in the spirit of MiniMalloc
 *    (Moffitt, ASPLOS 2023): canonical solutions placed in non-decreasing offset order,
 *    section-based inference, gap dominance, time decomposition; used for a capacity and to
 *    tighten the peak by bisection between LOAD and the best greedy peak;
 *  - mip: MEMO's MIP (offsets, one binary per lifetime-overlapping pair, peak minimized,
 *    big-M = the greedy upper bound) solved with lp_solve, for small instances.
 * Effort limits are deterministic: a time limit becomes a budget of counted search work, so
 * the same input and options always give the same plan. */
#ifndef MEMSIM_DSA_H
#define MEMSIM_DSA_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

/* ---- instances ---------------------------------------------------------------------- */

typedef struct dsa_buffer {
    int64_t lower;       /* first time step at which the buffer is live */
    int64_t upper;       /* first time step at which it is no longer live (> lower) */
    uint64_t size_bytes; /* > 0 */
} dsa_buffer;

typedef struct dsa_instance dsa_instance; /* opaque: buffers plus their ids */

/* Largest accepted buffer size and id length; the sum of all sizes must stay below
 * DSA_MAX_TOTAL_BYTES so that no peak or offset can overflow. */
#define DSA_MAX_ID_LEN 255
#define DSA_MAX_TOTAL_BYTES (UINT64_C(1) << 62)

dsa_instance *dsa_instance_new(void);
void dsa_instance_free(dsa_instance *in); /* NULL ok */
/* Appends a buffer. id may be NULL (the buffer is then named by its index); a repeated id,
 * lower >= upper, upper - lower > 2^62, size 0 or a total size >= DSA_MAX_TOTAL_BYTES is
 * MS_ERR_INVALID. */
ms_status dsa_instance_add(dsa_instance *in, const char *id, int64_t lower, int64_t upper,
                           uint64_t size_bytes, ms_error *err);
size_t dsa_instance_count(const dsa_instance *in);
const dsa_buffer *dsa_instance_buffers(const dsa_instance *in); /* count entries */
/* The id of buffer i as text; for a buffer added without id, its index written into buf. */
const char *dsa_instance_id(const dsa_instance *in, size_t i, char *buf, size_t n);

/* Reads "id,lower,upper,size" rows (plain or .gz), one buffer per line. A header line
 * naming exactly these columns is optional; blank lines and lines starting with '#' are
 * skipped. Errors are MS_ERR_PARSE with "FILE:LINE: message": wrong field count, a number
 * that is not an integer, lower >= upper, size <= 0, duplicate id, an id longer than
 * DSA_MAX_ID_LEN; lines are read one at a time with a bounded length (MS_LINE_MAX). */
ms_status dsa_read_csv(const char *path, dsa_instance **out, ms_error *err);

/* LOAD: the maximum over time of the total size of live buffers — a lower bound on the
 * peak of every solution. 0 for an empty instance (and if out of memory). */
uint64_t dsa_load(const dsa_instance *in);

/* Checks a solution: every buffer within [0, capacity) if capacity_bytes > 0, and no two
 * buffers with overlapping lifetimes overlapping in [offset, offset + size). Returns MS_OK
 * and the peak (may be NULL), or MS_ERR_INVALID naming the first conflict found. */
ms_status dsa_check(const dsa_instance *in, const uint64_t *offsets, uint64_t capacity_bytes,
                    uint64_t *peak_bytes, ms_error *err);

/* Writes "id,lower,upper,size,offset" rows, atomically (ms_out). */
ms_status dsa_write_csv(const dsa_instance *in, const uint64_t *offsets, const char *path,
                        ms_error *err);

/* ---- solving ------------------------------------------------------------------------ */

typedef enum dsa_method {
    DSA_GREEDY = 1,
    DSA_BB = 2,
    DSA_MIP = 4,
    DSA_AUTO = 7 /* all that apply to the instance's size (see dsa_options) */
} dsa_method;

const char *dsa_method_name(dsa_method m); /* "greedy", "bb", "mip", "auto" */
/* Parses "greedy", "bb", "mip" or "auto"; returns 0 on an unknown name. */
int dsa_method_parse(const char *s, dsa_method *out);

typedef enum dsa_result {
    DSA_OK,         /* the question is answered with proof: it fits in the capacity, or the
                       peak is proven minimal (or within rel_gap of a proven lower bound) */
    DSA_INFEASIBLE, /* proven: no packing fits in the capacity */
    DSA_TIMEOUT     /* the effort budget ran out without proof; the best plan is returned */
} dsa_result;

const char *dsa_result_name(dsa_result r); /* "ok", "infeasible", "timeout" */

/* Work units per second of the time limit: calibrated on a 2-core x86-64 box (2026) so
 * that a second of limit is about a second of search there (one unit: one candidate
 * scanned, one overlap updated or one section checked in branch-and-bound; a fit or
 * skyline step is weighted to match). A knob: results depend only on the budget, never
 * on the clock. */
#define DSA_WORK_PER_S 6e8

typedef struct dsa_options {
    uint64_t capacity_bytes;  /* > 0: decide whether it fits; 0: minimize the peak */
    double time_limit_s;      /* effort limit, turned into work_budget if that is 0 */
    unsigned methods;         /* or of dsa_method flags; DSA_AUTO by default */
    uint64_t work_budget;     /* 0: time_limit_s * work_per_s */
    double work_per_s;        /* 0: DSA_WORK_PER_S */
    size_t bb_max_buffers;    /* larger instances skip bb under DSA_AUTO (default 5000) */
    size_t mip_max_buffers;   /* larger instances skip mip under DSA_AUTO (default 40) */
    int mip_integer_offsets;  /* offsets as integer (1) or continuous (0, default) columns */
    double rel_gap;           /* minimize: stop once (peak - lower bound) / lower bound is at
                                 most this (default 0: only a proven optimum stops early) */
    double clock_backstop;    /* > 0 (with work_budget 0): the heuristics also stop once the
                                 wall clock reaches this many times time_limit_s (+ 0.25 s),
                                 on a machine slower than the calibration; 0 (default): work
                                 counts only, so plans never depend on the clock */
} dsa_options;

void dsa_options_default(dsa_options *o);

typedef struct dsa_solution {
    uint64_t *offsets;          /* n entries, owned (dsa_solution_free); the best plan found,
                                   checked; it may exceed the capacity unless status is OK */
    size_t n;
    uint64_t peak_bytes;        /* max offset + size of that plan */
    uint64_t load_bytes;        /* LOAD */
    uint64_t lower_bound_bytes; /* best proven lower bound on the minimal peak (>= LOAD) */
    double gap;                 /* (peak - lower bound) / lower bound; 0 when closed */
    dsa_method method;          /* the solver that produced the plan */
    char detail[40];            /* which variant, e.g. "best-fit/size", "skyline/area~3" */
    dsa_result status;
    uint64_t work;              /* search work spent (deterministic) */
    double elapsed_s;           /* wall clock, for reports only */
} dsa_solution;

void dsa_solution_free(dsa_solution *s); /* frees offsets; NULL ok */

/* Solves per the options: the heuristic portfolio always runs first (it gives the upper
 * bound, MEMO's big-M), then bb and mip where asked for and where they scale. Returns
 * MS_OK with *sol filled (status OK / INFEASIBLE / TIMEOUT); MS_ERR_UNSUPPORTED if only mip
 * was asked for in a build without lp_solve; MS_ERR_INVALID for bad options, or if a plan
 * failed the checker (a bug); MS_ERR_NOMEM. Every returned plan has passed dsa_check. */
ms_status dsa_solve(const dsa_instance *in, const dsa_options *opt, dsa_solution *sol,
                    ms_error *err);

/* ---- the individual solvers (used by dsa_solve and the tests) ------------------------- */

/* The heuristic portfolio without perturbed runs (fit placements over several orderings,
 * then the fixed skyline priorities): writes the best plan found into offsets and its peak
 * into *peak_bytes. Stops early when a plan reaches stop_at_bytes (pass dsa_load() or 0).
 * Deterministic, no budget: O(runs x n x live). */
ms_status dsa_greedy(const dsa_instance *in, uint64_t stop_at_bytes, uint64_t *offsets,
                     uint64_t *peak_bytes, ms_error *err);

/* Branch-and-bound for "fits in capacity_bytes" (at most DSA_BB_MAX_BUFFERS buffers: its
 * memory grows with the square of the count; more is MS_ERR_LIMIT). Sets *res to OK
 * (offsets written, peak <= capacity), INFEASIBLE (proven) or TIMEOUT (work_budget spent);
 * *work_used may be NULL. */
#define DSA_BB_MAX_BUFFERS 4000
ms_status dsa_bb_decide(const dsa_instance *in, uint64_t capacity_bytes, uint64_t work_budget,
                        uint64_t *offsets, dsa_result *res, uint64_t *work_used,
                        ms_error *err);

/* MEMO's MIP with lp_solve: looks for the minimal peak below upper_bytes (a known feasible
 * peak, e.g. greedy's, which is also the big-M), the peak bounded below by lower_bytes
 * (e.g. LOAD). On MS_OK: *res OK and *found: offsets/peak hold a proven optimum (*bound =
 * peak); *res OK and !*found: nothing is below upper_bytes (*bound = upper_bytes, which is
 * then optimal if feasible); *res TIMEOUT: the node budget ran out (*bound = lower_bytes;
 * offsets/peak hold a better plan if *found). nodes_used (may be NULL): nodes explored.
 * At most DSA_MIP_MAX_BUFFERS buffers (MS_ERR_LIMIT). MS_ERR_UNSUPPORTED in a build
 * without lp_solve (compile with HAVE_LPSOLVE defined to have it). */
#define DSA_MIP_MAX_BUFFERS 400
ms_status dsa_mip(const dsa_instance *in, uint64_t lower_bytes, uint64_t upper_bytes,
                  uint64_t node_budget, int integer_offsets, uint64_t *offsets,
                  uint64_t *peak_bytes, uint64_t *bound_bytes, int *found, dsa_result *res,
                  uint64_t *nodes_used, ms_error *err);
int dsa_have_mip(void); /* 1 if built with lp_solve */

/* Exact minimum by enumerating all orderings (n <= DSA_BRUTE_MAX): each ordering stacks
 * every buffer right above the earlier ones it overlaps, which reaches every minimal
 * solution. The reference for the other solvers on tiny instances. */
#define DSA_BRUTE_MAX 9
ms_status dsa_brute_force(const dsa_instance *in, uint64_t *offsets, uint64_t *peak_bytes,
                          ms_error *err);

#endif

/* results.h — what one simulated (or measured) run produced: times, MFU, memory peaks,
 * allocator counters, and the status (ok / oom / oohm) with the failing request. Writers for
 * the results CSV (columns documented in traces/FORMAT.md), the summary table, the memory
 * time series CSV and the Chrome-trace / Perfetto JSON timeline, and the rows as JSON. Used
 * by sim/exec.c (fills it), the memsim command, the library API and experiments/. */
#ifndef MEMSIM_RESULTS_H
#define MEMSIM_RESULTS_H

#include "base/util.h"
#include "memory/alloc.h"
#include "planners/blockmix.h"

typedef enum res_status { RS_OK = 0, RS_OOM, RS_OOHM, RS_ERROR } res_status;
const char *res_status_name(res_status s);

typedef struct sim_result {
    char policy[48], allocator[32], model[48], machine[64];
    uint64_t seq, batch;
    int tp, cp, dp;
    int ep;                   /* expert-parallel degree (meta ep; 1 without); not a CSV column */
    res_status status;
    char failure[512];           /* the failing request and the allocator's state */
    double iter_time_s;          /* the last simulated iteration */
    double mfu;                  /* MEMO §5.1: (6sP + 6nhs^2) per sequence / time / peak */
    double tgs;                  /* tokens per GPU per second */
    double model_flops;          /* per iteration per GPU, MEMO's formula */
    uint64_t peak_allocated_bytes, peak_reserved_bytes, peak_active_bytes;
    double fragmentation;        /* GMLake: 1 - peak active / peak reserved */
    uint64_t host_peak_bytes;    /* this GPU's share; node total in host_node_peak_bytes */
    uint64_t host_node_peak_bytes;
    uint64_t host_capacity_bytes; /* this job's share of the node's host memory (the limit) */
    double compute_busy_s, h2d_busy_s, d2h_busy_s, host_busy_s;
    double recompute_s;          /* compute time spent recomputing */
    double stall_s;              /* compute stream idle while waiting on copies/events */
    double alloc_time_s;         /* time charged for cudaMalloc/cudaFree/VMM/sync */
    alloc_stats astats;          /* allocator counters at the end */
    uint64_t alloc_retries_per_iter; /* num_alloc_retries in the last iteration */
    /* the host issue model (sim_opts.issue_ahead; all 0 without it) */
    int issue_ahead;             /* the bound used: 0 = none, -1 = unbounded */
    double issue_busy_s;         /* host thread busy issuing the last iteration */
    uint64_t issue_waits;        /* times the host thread waited for the GPU (whole run) */
    uint64_t deferred_frees;     /* frees held back for other streams' uses (whole run) */
    /* Device bytes live by kind (planners/blockmix.h; the bytes requested, not the
     * allocator's rounding) at the moment their sum peaked, or, for an oom, when the failing
     * request was made. */
    uint64_t peak_live_bytes[BM_COUNT];
    int peak_live_at_failure;    /* 1: peak_live_bytes is the state at the oom */
    /* The power limit (sim/power.h): the compute-bound kernels' SM clock as a fraction of
     * the maximum (1: the limit never bound them; 0: no power model for this run) and the
     * highest window's average board power, W; not CSV columns. */
    double power_clock_ratio, power_peak_w;
    char plan_note[320];         /* the planner's caveat, "" for none: its search found no
                                    configuration within its budget (plan knob feasible 0)
                                    and the plan is the closest one */
} sim_result;

void res_init(sim_result *r);

/* Results CSV: a header line then one row per result. */
extern const char *const RES_CSV_COLUMNS[];
size_t res_csv_ncolumns(void);
void res_csv_header(FILE *f);
void res_csv_row(FILE *f, const sim_result *r);
/* The same row as a JSON object, keys the CSV's column names, values what the CSV holds
 * (numbers as numbers, the status and strings as strings; sim/api.c). */
void res_json_row(FILE *f, const sim_result *r);
/* Human-readable summary table of several results (memsim compare): host_GiB is one GPU's
 * host peak; when a result ran on more than one GPU, node_GiB the node's (host_node_peak_bytes). */
void res_table(FILE *f, const sim_result *rs, size_t n);
/* The index of the fastest result that fits (status ok), -1 when none does; *second (if not
 * NULL) the next fastest, or -1. */
long res_fastest(const sim_result *rs, size_t n, long *second);
/* What was live at the peak (peak_live_bytes), one column per result: a row per kind that
 * any result holds, then the total and the allocator's peak allocated bytes. */
void res_breakdown(FILE *f, const sim_result *rs, size_t n);
/* One line under that table: which result runs fastest of those that fit (status ok), how far
 * ahead of the next, and which ran out of device or host memory. Returns the index of the
 * fastest, or -1 when none fits. */
long res_verdict(FILE *f, const sim_result *rs, size_t n);
/* A line "note: POLICY: ..." per result with a plan_note. */
void res_notes(FILE *f, const sim_result *rs, size_t n);

#endif

/* auto.h — the policy `auto`: one search across the policy families for one workload and
 * machine. Its candidates are every registered policy in its own form, MEMO's alpha grid,
 * ProTrain's configurations around its pick, per layer group mixes of swapping, full or
 * selective recomputation (attention only, MLP only) and keeping that the tensor lowering
 * expresses, and the allocators (caching, caching with max_split_size, expandable segments,
 * stitching; the static plan through the memory-plan policies) for the fastest of them; each
 * is planned once (its own planner, or auto's per-tensor decisions for a mix), pruned by the
 * planners' predictions and by capacity checks, and simulated; the fastest that fits wins.
 * It lives in sim/ because it simulates (planners/ may not), and is called by sim/runs.c for
 * memsim plan, simulate, compare, sweep and the library API. */
#ifndef MEMSIM_AUTO_H
#define MEMSIM_AUTO_H

#include <stdio.h>

#include "sim/pipeline.h"

#define AUTO_POLICY "auto"
#define AUTO_DESC "the fastest plan that fits across every policy family, their knobs, " \
    "per layer group mixes of swap / full or selective recompute / keep, and the allocators, " \
    "each simulated; when nothing fits, the nearest workload or machine that does"
#define AUTO_MAX_HINTS 8
#define AUTO_RUNNER_UPS 3

/* What a mix does to one layer's skeletal activations. */
typedef enum auto_mode {
    AM_KEEP = 0,        /* every one stays on the GPU */
    AM_SWAP,            /* every one offloaded whole (alpha 1) */
    AM_RECOMPUTE,       /* the layer input kept, every other one recomputed (Megatron "full") */
    AM_RECOMPUTE_ATTN,  /* the attention half (after the input, up to the first residual)
                           recomputed; the first residual and the MLP half kept */
    AM_RECOMPUTE_MLP,   /* the MLP half (after the first residual) recomputed; the input, the
                           attention half and the first residual kept */
    AM_COUNT
} auto_mode;

const char *auto_mode_name(auto_mode m); /* "keep", "swap", "recompute", ... */

/* A mix over L layers: layers [0, swap) swapped, [swap, L - keep) under mode mid (AM_SWAP:
 * swapped, their inputs too), the last keep layers kept. */
typedef struct auto_mix {
    int swap, keep;
    auto_mode mid;        /* AM_RECOMPUTE, AM_SWAP, AM_RECOMPUTE_ATTN or AM_RECOMPUTE_MLP */
    double alpha;         /* the swapped layers' token fraction swapped (MEMO; the rest
                             recomputed) for all but their inputs, attention outputs and
                             whole-swapped tensors; 0: 1 (swapped whole) */
} auto_mix;

/* One point of the search: a policy and the moves made on its plan. */
typedef struct auto_cand {
    char label[96];           /* how the summary and the plan name it */
    char policy[48];          /* the registered policy that plans it (a mix: keep-all's plan
                                 with auto's per-tensor decisions) */
    const char *allocator;    /* allocator override; NULL: the plan's */
    uint64_t max_split_bytes; /* caching's max_split_size for this candidate; 0: the plan's */
    double alpha;             /* < 0: the policy decides */
    int is_mix;               /* 1: mix says the per-tensor decisions */
    auto_mix mix;
    int pt_cfg[4];            /* ProTrain's n_persist, n_buffer, n_swap, n_checkpoint given
                                 (pt_cfg[1] > 0), else its own search */
    int pt_tie0;              /* 1: ProTrain's search with tie_tol=0 (its strict fastest) */
    long base;                /* an allocator variant: the candidate whose plan it runs; -1 */
    int simulated;            /* 0: pruned, why in why[] */
    char why[160];
    res_status status;        /* RS_ERROR also for a planner that refused the workload */
    double iter_time_s;
    uint64_t peak_bytes;      /* reserved peak */
    uint64_t host_bytes;
    uint64_t live_fail_bytes; /* an oom: the bytes live when it failed */
    char plan_alloc[32];      /* the allocator its planner wrote */
    plan_t *plan;             /* its plan, made once (NULL: pruned before planning, a
                                 variant, or released) */
} auto_cand;

/* A change of the workload or machine under which something fits (nothing fits as given). */
typedef struct auto_hint {
    char change[64];          /* e.g. "seq 128K", "tp 8", "machine h200-sxm" */
    char label[96];           /* the candidate that fits there */
    double iter_time_s;
    uint64_t peak_bytes;
} auto_hint;

typedef struct auto_opts {
    int prune;                /* 1 (default): skip candidates the predictions and capacity
                                 checks rule out; 0: simulate every candidate (brute force) */
    int hints;                /* 1 (default): when nothing fits, search the nearby workloads */
    int moves;                /* 1 (default): alpha grid, ProTrain's neighbours, mixes,
                                 allocator variants; 0: the registered policies alone */
} auto_opts;

typedef struct auto_result {
    auto_cand *c;
    size_t n, cap;
    long winner;              /* index into c of the fastest that fits; -1: none fits */
    long shown;               /* the candidate whose plan and result are kept (the winner, or
                                 the failing one with the smallest peak) */
    plan_t *plan;             /* its plan, with the auto.* knobs saying how it was chosen */
    pol_form form;            /* the workload form it runs on */
    sim_result r;             /* its simulation */
    size_t n_simulated;
    char runner_up[AUTO_RUNNER_UPS][96]; /* "label: T s, P GiB", the next fastest that fit */
    size_t n_runner_ups;
    auto_hint hints[AUTO_MAX_HINTS];
    size_t n_hints;
    trace_t *forms[2];        /* the workload in each form it made or was given */
    int own[2];               /* 1: forms[k] is freed with res */
} auto_result;

/* 1 when `policy` names the search. */
int auto_is(const char *policy);
void auto_opts_default(auto_opts *o);

/* Searches for workload w on machine m with p's options (its allocator, alpha and knobs, when
 * given, fix those dimensions). plain: the workload's plain form when the caller has it
 * already (borrowed), else NULL. Errors only for what stops the whole search (the workload
 * cannot be made, out of memory); a candidate that fails is a row of res. Free res with
 * auto_result_free. */
ms_status auto_search(const pipe_workload *w, const trace_t *plain, const machine_t *m,
                      const pipe_policy *p, const auto_opts *o, auto_result *res,
                      ms_error *err);
void auto_result_free(auto_result *res);

/* The per-tensor decision mix gives skeletal activation s of a trace of L layers; half is
 * where s lies in its layer (the AH_ values of auto_half). Exposed so that a test can build
 * the same space itself. */
typedef enum auto_half { AH_INPUT = 0, AH_ATTN, AH_RESID, AH_MLP } auto_half;
plan_decision auto_mix_decision(const auto_mix *mix, int32_t L, int32_t layer, auto_half half);

/* The half of every skeletal activation of t (pol_skeletal's order): AH_INPUT for a layer
 * input, AH_RESID for the first residual sum of a layer's forward (a tensor named
 * "*.resid1"), AH_MLP after it, AH_ATTN before it. *has_split = 1 when some layer has a first
 * residual among its skeletal activations or before them (selective modes are meaningful).
 * Caller frees *halves. */
ms_status auto_halves(const trace_t *t, unsigned char **halves, size_t *n, int *has_split,
                      ms_error *err);

/* The trace res's plan runs on (owned by res), for simulating it again with outputs. */
const trace_t *auto_trace(const auto_result *res);

/* One line for the results' note: the choice and the runner-ups, or the changes that fit. */
void auto_note(const auto_result *res, char *buf, size_t n);
/* The whole search as a table: every candidate with its time, peak, host bytes or why it was
 * pruned, then the hints. */
void auto_summary(FILE *f, const auto_result *res);

#endif

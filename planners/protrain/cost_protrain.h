/* cost_protrain.h — ProTrain's cost models and configuration search (Yang et al., §3.3 and
 * Appendix A; docs/PROTRAIN.md): from one profile of a workload trace (op times and the
 * operator-by-operator walk of activation memory with each op's intra- and inter-operator
 * deltas), predict for a configuration (n_persist, n_buffer, n_swap, n_checkpoint)
 *
 *   T_iter = T_fwd + max(T_bwd + T_gpu_optim, T_cpu_optim)
 *
 * where each phase composes, chunk by chunk, the compute and the communication it waits
 * for (gathers limited by the buffer count, swaps sharing the link, gradient offload and the
 * host Adam behind it, recomputation added in backward), and the peak GPU memory (model
 * states: persistent chunks, their optimizer shards, chunk buffers; plus the activation walk
 * under the block roles). The search enumerates the four parameters in order of increasing
 * memory, drops what does not fit, skips what a time lower bound puts beyond the fastest
 * found (branch and bound: the pick stays the exhaustive one), and keeps the fastest. Used by
 * the protrain and offload baseline policies, `memsim protrain` and tests. */
#ifndef MEMSIM_COST_PROTRAIN_H
#define MEMSIM_COST_PROTRAIN_H

#include "planners/protrain/lower_chunks.h"
#include "traces/machine.h"
#include "traces/trace.h"

typedef struct ptc_config {
    int n_persist, n_buffer, n_swap, n_ckpt;
} ptc_config;

typedef struct ptc_estimate {
    int valid;                 /* 0: the configuration cannot run (too few buffers) */
    double t_iter_s;           /* T_fwd + max(T_bwd + T_gpu_optim, T_cpu_optim) (and the
                                  tails of the copy streams) */
    double t_fwd_s, t_bwd_s, t_gpu_optim_s, t_cpu_optim_s;
    double recompute_s;        /* inside t_bwd_s */
    uint64_t peak_bytes;       /* predicted peak allocated GPU bytes */
    uint64_t static_bytes;     /* chunks, optimizer shards, buffers */
    uint64_t act_peak_bytes;   /* activations at the peak */
    uint64_t host_bytes;       /* host memory of this rank (states, staging, swapped blocks) */
    int persist_gather;        /* LC_PG_STEP or LC_PG_NEXT: where the persistent chunks'
                                  all-gathers run in this estimate (knob persist_gather=auto
                                  takes the faster) */
} ptc_estimate;

typedef struct ptc_model ptc_model;

/* Profiles trace t (a plain trace: see lower_chunks.h) on machine m under the chunk knobs k
 * (n_* fields ignored). */
ms_status ptc_model_new(const trace_t *t, const machine_t *m, const lc_knobs *k,
                        ptc_model **out, ms_error *err);
void ptc_model_free(ptc_model *M);

/* The runtime model ptc_estimate_config uses (the memory model is the same for both):
 * PTC_RT_RECURRENCE (default): the chunk access program walked in order with compute, H2D,
 * D2H and host CPU queues (transfers wait for buffers, compete for the link, host Adam trails
 * the offloads); PTC_RT_APPENDIX: ProTrain's Appendix A.1 as written, each phase a sum over
 * chunks of max(compute, communication) (docs/PROTRAIN.md §4). */
enum { PTC_RT_RECURRENCE = 0, PTC_RT_APPENDIX = 1 };
void ptc_model_set_runtime(ptc_model *M, int rt_model);
int ptc_model_runtime(const ptc_model *M);
const lc_layout *ptc_layout(const ptc_model *M);
const lc_knobs *ptc_knobs(const ptc_model *M);

/* Predicts configuration c. e->valid = 0 (not an error) when the buffers cannot serve the
 * access program; MS_ERR_INVALID for parameters out of range. */
ms_status ptc_estimate_config(ptc_model *M, const ptc_config *c, ptc_estimate *e,
                              ms_error *err);

/* The memory model alone, with swaps taken as instantaneous (a lower bound used to prune). */
uint64_t ptc_peak_lower_bound(const ptc_model *M, const ptc_config *c);

/* A time no estimate of c can beat, seconds: the compute stream's work (steps, recompute,
 * GPU Adam), the host Adam behind the forward, and each copy queue's bytes at its full
 * rate. The search skips what this bound puts beyond the fastest time found plus the tie
 * band. 0 for parameters out of range. */
double ptc_time_lower_bound(const ptc_model *M, const ptc_config *c);

/* Swapping interval: blocks of forward compute needed to hide one block's swap-out, and the
 * largest n_swap the search tries (ceil(N_block / N_interval), capped by max_swap). */
int ptc_swap_interval(const ptc_model *M);
/* The largest n_swap the interval allows, ceil(N_block / N_interval), capped by cap (-1: no
 * cap) and by N_block: the search's range before the bandwidth bound. */
int ptc_swap_max(const ptc_model *M, int cap);

/* The bandwidth bound on n_swap for n_persist persistent chunks and n_buffer buffers: the
 * swapped blocks whose copies fit in the link time the parameter traffic leaves, the
 * swap-outs in the forward's compute and the swap-ins in the backward's (docs/PROTRAIN.md
 * §5; INT_MAX without swappable activations). The search applies it with swap_bw = 1.
 * -1 when the buffers cannot serve the access program or the arguments are out of range. */
int ptc_swap_bw_limit(const ptc_model *M, int n_persist, int n_buffer);

typedef struct ptc_search_opts {
    uint64_t capacity_bytes;   /* GPU bytes for the run; 0: machine_usable_bytes */
    double mem_margin;         /* fraction of the capacity kept free for the allocator's
                                  rounding and fragmentation (default 0.03) */
    uint64_t host_capacity_bytes; /* host bytes of this rank; 0: no limit */
    int max_swap;              /* cap on n_swap (default 8; -1: no cap) */
    double tie_tol;            /* configurations within this fraction of the fastest count as
                                  ties, broken toward less link traffic (default 0.03) */
    int swap_bw;               /* 1 (default): n_swap also bounded per (n_persist, n_buffer) by
                                  the link time the parameter traffic leaves (ProTrain §3.3;
                                  docs/PROTRAIN.md §5); 0: by the swap interval only */
    int keep_all;              /* 1: r->all lists every configuration evaluated */
    int no_bound;              /* 1: no time bound (evaluate every configuration whose memory
                                  fits; the same pick, more evaluations: for checking) */
    int runtime_model;         /* PTC_RT_*, for the caller to give the model (pt_model_new);
                                  the time bound holds for the recurrence only, so the search
                                  runs unbounded under PTC_RT_APPENDIX */
} ptc_search_opts;

void ptc_search_opts_default(ptc_search_opts *o);

typedef struct ptc_search_result {
    int found;                 /* a feasible configuration exists */
    ptc_config best;           /* the pick: near-ties of the fastest broken (tie_tol) */
    ptc_estimate best_est;
    ptc_config fastest;        /* the strict minimum of the predicted time (= best when
                                  tie_tol is 0 or no near-tie is preferred) */
    ptc_estimate fastest_est;
    ptc_config closest;        /* when none fits: the one with the smallest peak */
    ptc_estimate closest_est;
    uint64_t capacity_bytes;   /* the capacity used, after the margin */
    size_t space;              /* configurations in the full space */
    size_t evaluated;          /* runtime estimates computed */
    size_t pruned;             /* skipped by the memory bounds */
    ptc_config *all;           /* keep_all: every evaluated configuration */
    ptc_estimate *all_est;
    size_t n_all;
} ptc_search_result;

/* Exhaustive search with pruning. MS_OK even when nothing fits (r->found = 0, r->closest). */
ms_status ptc_search(ptc_model *M, const ptc_search_opts *o, ptc_search_result *r,
                     ms_error *err);
void ptc_search_result_clear(ptc_search_result *r);

#endif

/* policy_protrain.h — the `protrain` policy (Yang et al., ProTrain: automatic memory
 * management; docs/PROTRAIN.md): profiles the trace, searches (n_persist, n_buffer, n_swap,
 * n_checkpoint) with the cost models of planners/protrain/cost_protrain.h and writes a chunk plan
 * (knob chunks=1, lowered by planners/protrain/lower_chunks.c) that records the chosen configuration
 * and its predicted iteration time and peak. Registered in planners/policy.c. */
#ifndef MEMSIM_POLICY_PROTRAIN_H
#define MEMSIM_POLICY_PROTRAIN_H

#include "planners/protrain/cost_protrain.h"
#include "planners/policy.h"

extern const pol_policy pol_protrain;

/* The policy's plan function (pol_plan_fn). Knobs (pol_opts): every chunk knob of
 * lower_chunks.h (chunk_bytes, host_bytes_per_param, coll, coll_link_eff, ...); gpu_bytes
 * (device capacity; default the machine's usable bytes), mem_margin (0.03), host_bytes (host
 * memory of this rank; default host.mem_bytes / min(dp, node.gpus)), max_swap (8); and
 * n_persist, n_buffer, n_swap, n_checkpoint all four given: no search, that configuration.
 * When nothing fits, the plan holds the configuration with the smallest peak and knob
 * feasible=0 (simulating it reports the OOM / OOHM). */
ms_status pol_protrain_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                            plan_t **out, ms_error *err);

/* Helpers shared with the offload baselines and `memsim protrain`. */
/* The chunk knobs of the protrain policy: pt_knobs_from_opts with ProTrain's own defaults
 * where o does not give them: host_bytes_per_param 12 and staging_separate 1 (the host keeps
 * the fp32 master and Adam moments; fp16 copies exist only in the pinned buffers gathers go
 * through; assumed: ProTrain's 34B on one 24 GB GPU with 384 GB of host memory (Table 2)
 * leaves at most 12.1 bytes per parameter on the host). */
ms_status pt_protrain_knobs(const pol_opts *o, lc_knobs *k, ms_error *err);
/* Reads the chunk knobs from pol_opts (defaults where absent). */
ms_status pt_knobs_from_opts(const pol_opts *o, lc_knobs *k, ms_error *err);
/* Search options from pol_opts for trace t on m. */
ms_status pt_search_opts_from(const pol_opts *o, const trace_t *t, const machine_t *m,
                              ptc_search_opts *so, ms_error *err);
/* ptc_model_new with the runtime model so->runtime_model (knob cost_model). */
ms_status pt_model_new(const trace_t *t, const machine_t *m, const lc_knobs *k,
                       const ptc_search_opts *so, ptc_model **out, ms_error *err);
/* The chunk knobs of a plan for configuration c of model M as estimate e predicted it: M's
 * knobs with the layout's chunk size, c's four numbers and e's all-gather placement (auto
 * resolved). */
lc_knobs pt_config_knobs(const ptc_model *M, const ptc_config *c, const ptc_estimate *e);
/* Records an estimate as the plan's predictions (plan_t.pred: iteration, forward, backward,
 * GPU and host optimizer times to the microsecond, device peak and host bytes). */
ms_status pt_record_estimate(plan_t *p, const ptc_estimate *e, ms_error *err);

/* The knobs pt_search_opts_from reads (pt_search_knob_table). */
typedef struct pt_search_knobs {
    uint64_t gpu_bytes, host_bytes;
    double mem_margin, max_swap, tie_tol, search_bound, swap_bw;
    int cost_model;               /* ptc_runtime_model */
    uint64_t given;
} pt_search_knobs;
extern const knobtab pt_search_knob_table;

/* 1 when the knobs k were read from give a whole configuration (n_persist, n_buffer, n_swap
 * and n_checkpoint): the policy estimates it instead of searching. */
int pt_config_given(const lc_knobs *k);

#endif

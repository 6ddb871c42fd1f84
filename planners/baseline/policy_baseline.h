/* policy_baseline.h — the three baseline policies of the registry (planners/policy.c):
 * keep-all (no activation memory saving), full-recompute (Megatron-LM full activation
 * recomputation) and full-swap (layer-wise offload/prefetch of every skeletal activation, the
 * full-swapping variant of MEMO's ablation). Used through pol_find / pol_plan. */
#ifndef MEMSIM_POLICY_BASELINE_H
#define MEMSIM_POLICY_BASELINE_H

#include "planners/policy.h"

extern const pol_policy pol_keep_all;
extern const pol_policy pol_full_recompute;
extern const pol_policy pol_full_swap;

#endif

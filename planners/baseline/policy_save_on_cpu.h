/* policy_save_on_cpu.h — the save-on-cpu policy of the registry (planners/policy.c):
 * torch.autograd.graph.save_on_cpu(pin_memory=True), every tensor autograd saves copied to
 * pinned host memory when it is saved and back when the backward unpacks it. Used through
 * pol_find / pol_plan; described in docs/POLICIES.md. */
#ifndef MEMSIM_POLICY_SAVE_ON_CPU_H
#define MEMSIM_POLICY_SAVE_ON_CPU_H

#include "planners/policy.h"

extern const pol_policy pol_save_on_cpu;

#endif

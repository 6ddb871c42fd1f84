/* policy_save_on_cpu.h — the save-on-cpu policy of the registry (planners/policy.c):
 * torch.autograd.graph.save_on_cpu(pin_memory=True), every tensor autograd saves copied to
 * pinned host memory when it is saved and back when the backward unpacks it. Used through
 * pol_find / pol_plan; described in docs/POLICIES.md. */
#ifndef MEMSIM_POLICY_SAVE_ON_CPU_H
#define MEMSIM_POLICY_SAVE_ON_CPU_H

#include "planners/policy.h"

extern const pol_policy pol_save_on_cpu;

/* The tensors autograd saves in trace t, as this policy finds them: every tensor a backward
 * op reads that exists before that backward phase began (made in the forward, or before it:
 * the batch, and with params = 1 the parameters), other than gradients, optimizer states and
 * workspaces. *ids (caller frees) gets them in trace order, without repeats; *bytes the
 * most bytes one backward phase finds saved (each tensor once: a step's unique saved bytes). */
ms_status soc_saved_tensors(const trace_t *t, int params, uint64_t **ids, size_t *n,
                            uint64_t *bytes, ms_error *err);

#endif

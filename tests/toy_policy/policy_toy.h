/* policy_toy.h — the toy policy: a policy written the way a new one is added (its file, its
 * knob table, its registry row, its build fragment, all in this folder), so that
 * tests/test_toy_policy.c shows what adding a policy takes. Registered by this folder's
 * policies.def. */
#ifndef MEMSIM_POLICY_TOY_H
#define MEMSIM_POLICY_TOY_H

#include "planners/policy.h"

extern const pol_policy pol_toy;

#endif

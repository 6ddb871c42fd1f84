/* pol_opts.h — what every policy is given besides the trace and the machine: the allocator,
 * its knobs, the alpha override and the free-form --knob pairs. Plain data shared by the
 * policy registry (planners/policy.h) and the knob readers (planners/knob.h), which read the
 * pairs through their tables; it has no source file of its own. */
#ifndef MEMSIM_POL_OPTS_H
#define MEMSIM_POL_OPTS_H

#include <stddef.h>

#include "memory/alloc.h"

/* One free-form policy knob, e.g. {"max_host_bytes", "512G"}. */
typedef struct pol_knob {
    const char *key;
    const char *value;
} pol_knob;

typedef struct pol_opts {
    const char *allocator;          /* allocator registry name written into the plan;
                                       NULL: "caching" */
    const alloc_config *alloc_cfg;  /* allocator knobs; NULL: alloc_config_default() */
    double alpha;                   /* swapped token fraction override in [0,1];
                                       negative: none (the policy decides) */
    const pol_knob *knobs;          /* policy-specific knobs (later policies) */
    size_t n_knobs;
} pol_opts;

#endif

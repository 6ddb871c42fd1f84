/* probe_coll.h — `memsim probe --collectives`: NCCL's collectives and the shared host link
 * measured on a machine of several GPUs (runtime/probe_coll.c), fitted into the profile's node
 * figures by runtime/probe_node.h. Used by runtime/main.c. */
#ifndef MEMSIM_PROBE_COLL_H
#define MEMSIM_PROBE_COLL_H

#include <stdio.h>

#include "runtime/probe_node.h"
#include "runtime/rt_check.h"

/* Measures the visible GPUs (at most 8), writes the raw samples to raw and the fit to *fit
 * (p: the base profile, for gpu.kernel_launch_us); what gets "N x GPU NAME". RT_ERR_NODEV on
 * a machine of fewer than 2 GPUs, with a message that says so. */
rt_status probe_coll_run(const machine_profile *p, FILE *raw, int quick, pn_fit *fit,
                         char *what, size_t what_len, ms_error *err);

#endif

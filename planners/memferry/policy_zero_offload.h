/* policy_zero_offload.h — ZeRO-Offload (Ren et al., USENIX ATC 2021) as a memsim policy, in
 * the two forms MemFerry (Yao et al., INFOCOM 2025) compares against: `realloc=1` (default)
 * is DeepSpeed's implementation — gradients re-allocated by every backward, gathered in a
 * reduce bucket, cast to fp32 and copied to the host on the compute stream when the bucket
 * fills; `realloc=0` is MemFerry's "Native-Offload" — gradient buffers kept on the GPU and
 * each layer's copied to the host while the backward goes on. Both keep the fp16 parameters
 * and optimizer states on the host, run Adam on the host after the backward, and copy each
 * layer's updated fp16 parameters back to the GPU as soon as its update is done, the
 * forward waiting for them layer by layer. Registered in planners/policy.c; lowered by
 * planners/memferry/lower_dha.c; described in docs/MEMFERRY.md. */
#ifndef MEMSIM_POLICY_ZERO_OFFLOAD_H
#define MEMSIM_POLICY_ZERO_OFFLOAD_H

#include "planners/policy.h"

extern const pol_policy pol_zero_offload;

#endif

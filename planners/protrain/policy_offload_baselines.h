/* policy_offload_baselines.h — the offloading systems ProTrain compares against (§5.1), as
 * knob settings of the chunk lowering (planners/protrain/lower_chunks.c; docs/PROTRAIN.md):
 *   zero3-offload  DeepSpeed ZeRO-3 with parameter and optimizer offload (v0.12): one gather
 *                  unit per layer, live-parameter and prefetch-bucket limits, fp16 parameters
 *                  and fp32 states and gradients on the host, CPU Adam after the backward;
 *   gemini-static  Colossal-AI Gemini (0.3.3) with static placement: fixed-size chunks, a
 *                  static fraction of them kept on the GPU (default none: parameters and
 *                  optimizer states offloaded), chunks fetched when needed, CPU Adam after the
 *                  backward;
 *   fsdp-offload   PyTorch FSDP (2.0.1) with CPU offload: one FlatParameter per block, fp32
 *                  shards on the host, resharded after forward (re-gathered in backward),
 *                  backward prefetch of one unit, torch's CPU Adam after the backward,
 *                  checkpointing on all blocks or none.
 * All three read checkpoint=all|none|auto (auto: none when the memory model says it fits).
 * Registered in planners/policy.c. */
#ifndef MEMSIM_POLICY_OFFLOAD_BASELINES_H
#define MEMSIM_POLICY_OFFLOAD_BASELINES_H

#include "planners/policy.h"

extern const pol_policy pol_zero3_offload;
extern const pol_policy pol_gemini_static;
extern const pol_policy pol_fsdp_offload;

ms_status pol_zero3_offload_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                 plan_t **out, ms_error *err);
ms_status pol_gemini_static_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                 plan_t **out, ms_error *err);
ms_status pol_fsdp_offload_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                plan_t **out, ms_error *err);

#endif

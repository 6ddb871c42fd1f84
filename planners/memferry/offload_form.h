/* offload_form.h — the ZeRO-Offload form of a plain one-GPU workload trace: what DeepSpeed's
 * ZeRO-Offload does to the same program (optimizer states and Adam on the host, gradients
 * copied to the host, the updated parameters copied back), made from the trace itself so
 * that a trace that cannot be generated again in that form (a captured PyTorch program, the
 * hf generator's PyTorch eager traces) can still be planned by zero-offload and the MemFerry
 * policies. Used by sim/pipeline.c (pipe_trace_for) and the tests. Rules in docs/MEMFERRY.md
 * ("Plain traces"). */
#ifndef MEMSIM_OFFLOAD_FORM_H
#define MEMSIM_OFFLOAD_FORM_H

#include "traces/machine.h"
#include "traces/trace.h"
#include "base/util.h"

/* Whether t is already in the ZeRO-Offload form (meta offload 1). */
int oform_is_offload(const trace_t *t);

/* Builds the ZeRO-Offload form of the plain trace t (one GPU: tp = cp = dp = 1; no ZeRO-3,
 * offload or LoRA meta). m (may be NULL: durations unknown) times the copies and the host
 * Adam. What changes:
 *  - optimizer states (at setup or made by the first step) and the optimizer phase's ops and
 *    temporaries are dropped; per unit (embedding and what runs before the first layer, each
 *    layer, the rest) a host Adam op "<unit>.optim.host" and a copy of its parameters back to
 *    the GPU "<unit>.param.h2d" make the optimizer phase;
 *  - gradients the backward allocates (PyTorch eager) become one setup gradient buffer per
 *    unit "<unit>.grad" that the backward's ops write into; setup gradient buffers stay;
 *    after the backward each is copied to the host ("<unit>.grad.d2h");
 *  - under autocast over fp32 parameters (meta precision amp) the parameters are held in the
 *    compute dtype (meta dtype_bytes: DeepSpeed's bf16 mode) with the fp32 masters on the
 *    host, so the forward's casts of parameters disappear and their readers read the
 *    parameters;
 *  - meta offload 1, host_opt_bytes (opt_bytes_per_param per parameter), host_grad_bytes (4
 *    per parameter), trainable_params_local, param_tensors, param_tensors_layer, grad_bytes.
 * Errors (MS_ERR_INVALID, MS_ERR_UNSUPPORTED) name what the trace lacks: parameters,
 * iterations, phases, or a mode that is not plain. */
ms_status oform_from_plain(const trace_t *t, const machine_t *m, uint64_t opt_bytes_per_param,
                           trace_t **out, ms_error *err);

#endif

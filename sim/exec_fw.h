/* exec_fw.h — the host time PyTorch's autograd hooks add to a program whose trace gives host
 * times (captured traces): non-reentrant checkpointing's pack / unpack hooks and wrapper,
 * save_on_cpu's pack / unpack hooks, from the machine profile's host.* costs (measured by
 * experiments/capture/probe_host.py --framework). Used by sim/exec_host.c (the host clock)
 * and sim/exec.c (blocking copies). Semantics in docs/SIMULATOR.md, "Host times". */
#ifndef MEMSIM_SIM_EXEC_FW_H
#define MEMSIM_SIM_EXEC_FW_H

#include "base/util.h"
#include "planners/schedule.h"
#include "traces/machine.h"
#include "traces/trace.h"

typedef struct exfw exfw;

/* Reads what the costs depend on from the trace and the schedule: which layers the
 * schedule recomputes (their forward ran under checkpoint), whether it copies saved tensors
 * to the host as they are saved (host_wait copies), and which tensors autograd saved
 * (planners/pol_layers.h, pol_saved_tensors). With use_measured, a captured trace that
 * measured checkpointing's host cost on its own block (meta captured.ckpt_fwd_layer_us,
 * captured.ckpt_bwd_layer_us) gives it per layer instead of the profile's host.ckpt_* and
 * host.recompute_layer_us.
 * *out is NULL (and MS_OK) where neither gives such a cost; MS_ERR_PARSE where those meta
 * values are not non-negative numbers. */
ms_status exfw_new(const trace_t *tr, const schedule_t *s, const machine_t *m, int use_measured,
                   exfw **out, ms_error *err);
void exfw_free(exfw *f);

/* Host time, microseconds, the hooks add before compute action a (trace op t) is issued.
 * Called once per compute action, in program order. */
double exfw_compute_us(exfw *f, const sched_action *a, const trace_op *t);

/* Host time where the recomputation of a layer begins: the trace's measured
 * captured.ckpt_bwd_layer_us, else the profile's host.recompute_layer_us (f may be NULL). */
double exfw_recompute_us(const exfw *f, const machine_t *m);

/* Host time after a blocking copy of a saved tensor to the host (save_on_cpu's pack). */
double exfw_pack_us(const exfw *f);

#endif

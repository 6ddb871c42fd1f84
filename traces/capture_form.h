/* capture_form.h — the process form of a captured trace: what the program memsim.capture
 * watched ran before and after the captured step. PyTorch's peaks (torch.cuda.memory_stats)
 * cover the whole process, and the first step of a training loop is not the captured one:
 * torch.optim's Adam and AdamW make their states lazily in the first optimizer.step()
 * (torch/optim/adam.py, _init_group: exp_avg and exp_avg_sq by zeros_like, per parameter in
 * the group's order), so the caching allocator's segments are cut by a step whose forward
 * and backward ran without them. A capture is taken after warm-up steps (its optimizer
 * states are live when it starts), so this form puts the first step back in front of it.
 * Used by sim/pipeline.c (pipe_trace_for: every command that plans or simulates a trace
 * file) and the tests. Rules in docs/CAPTURE.md ("What memsim simulates"). */
#ifndef MEMSIM_CAPTURE_FORM_H
#define MEMSIM_CAPTURE_FORM_H

#include "traces/trace.h"
#include "base/util.h"

/* Whether t was written by memsim.capture (meta generator memsim-capture-*) and holds an
 * iteration (a `mark iter`): the traces cform_process reads. */
int cform_is_capture(const trace_t *t);

/* Builds the process form of the captured trace t with `iterations` steps (>= 1):
 *  - the records before the first `mark iter` (what was live when the capture began) less
 *    the optimizer states;
 *  - step 0: the captured records with the optimizer states allocated, in the capture's
 *    order (the order the first step made them), where the first optimizer phase begins
 *    (after its `mark phase opt` and a layer mark right after it);
 *  - steps 1 .. iterations - 1: the captured records again, with fresh tensor and op ids for
 *    what they allocate and run (iteration marks renumbered); frees of tensors live before
 *    the capture are left out where an earlier copy freed them already.
 * iterations 1 gives step 0 alone. meta iterations is set; the rest of the meta is kept.
 * Errors: MS_ERR_INVALID (not a capture, no iteration, ids too large), MS_ERR_NOMEM. */
ms_status cform_process(const trace_t *t, int iterations, trace_t **out, ms_error *err);

#endif

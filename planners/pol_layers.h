/* pol_layers.h — the layer view of a trace the policies plan from: its skeletal activations
 * per layer and pass, which one is each layer's input, the tensors autograd saves for the
 * backward, and the checks of a trace's layer indices. Implemented in planners/pol_layers.c; included through planners/policy.h. */
#ifndef MEMSIM_POL_LAYERS_H
#define MEMSIM_POL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "traces/trace.h"

/* Layer structure of a trace as the baselines (and later policies) see it: every skeletal
 * activation (TC_ACT_SKEL, layer >= 0) allocated in a forward phase, with whether it is its
 * layer's input. The layer input of layer L is the skeletal tensor of layer L whose name ends
 * in ".input"; where no tensor of that layer (in that forward pass) has such a name, it is
 * any skeletal tensor of layer L whose producer op is not in layer L's forward. */
typedef struct pol_skel {
    uint64_t id;
    int32_t layer;
    uint32_t pass;        /* forward pass ordinal (0, 1, ... one per "mark phase fwd") */
    int is_input;         /* the layer's input */
    int is_attn_out;      /* name ends in ".attn_out" or ".attn_lse" (the attention kernel's
                             outputs) */
    int is_whole;         /* no producer op (an MoE layer's expert offsets, written by the
                             host): the tokens not swapped could not be recomputed, so a
                             policy swaps it whole */
    const trace_tensor *t;
} pol_skel;

/* Lists the skeletal activations in trace order; caller frees *out. */
ms_status pol_skeletal(const trace_t *t, pol_skel **out, size_t *n, ms_error *err);

/* The number of transformer layers the trace declares (its `meta layers`), 0 when it declares
 * none or a count beyond INT32_MAX. */
int32_t pol_declared_layers(const trace_t *t);
/* MS_OK when a record's layer index (>= 0) names a layer the trace declares, or, when it
 * declares none, is below `limit`; MS_ERR_INVALID naming `what` (e.g. "tensor 27 (L0.q)")
 * otherwise. A planner that sizes an array or a loop by a layer index checks it first. */
ms_status pol_check_layer(const trace_t *t, int32_t layer, int32_t limit, const char *what,
                          ms_error *err);

/* MS_ERR_INVALID naming `policy` when t has no skeletal activations of layers (an
 * allocator-only trace, such as one imported from a PyTorch snapshot): a policy that
 * recomputes or swaps them would otherwise plan keep-all without a word. */
ms_status pol_need_skeletal(const char *policy, const trace_t *t, ms_error *err);
/* That refusal, for a caller that has already listed the skeletal activations. */
ms_status pol_no_skeletal(const char *policy, ms_error *err);

/* The tensors autograd saves in trace t: every tensor a backward
 * op reads that exists before that backward phase began (made in the forward, or before it:
 * the batch, and with params = 1 the parameters), other than gradients, optimizer states and
 * workspaces. *ids (caller frees) gets them in trace order, without repeats; *bytes the
 * most bytes one backward phase finds saved (each tensor once: a step's unique saved bytes). */
ms_status pol_saved_tensors(const trace_t *t, int params, uint64_t **ids, size_t *n,
                            uint64_t *bytes, ms_error *err);

#endif

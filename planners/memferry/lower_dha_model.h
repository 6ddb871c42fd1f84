/* lower_dha_model.h — the unit analysis of a trace that the MemFerry and ZeRO-Offload
 * policies plan with and the shadow-model lowering (lower_dha.h) reads: the trace's units
 * (what a plan `layer N` line names) and modules with their parameters, gradients and
 * profiled times (dha_model), and the machine figures DHA needs. Implemented by
 * planners/memferry/lower_dha_model.c; used by lower_dha.c, policy_memferry.c,
 * policy_zero_offload.c, the MemFerry experiment driver and the tests. Rules: docs/MEMFERRY.md. */
#ifndef MEMSIM_LOWER_DHA_MODEL_H
#define MEMSIM_LOWER_DHA_MODEL_H

#include "traces/machine.h"
#include "traces/trace.h"
#include "base/util.h"

/* ---- units ----
 * A unit is one stretch of the forward program that reads parameters, and what a plan line
 * `layer N PMODE grad=gpu|host` decides for:
 *   N = -1   the records before layer 0 (the embedding),
 *   N = 0..L-1  transformer layer N,
 *   N = L    the records after the last layer (final norm, pooler, LM head, loss).
 * A unit's mode applies to the parameter reads of its own ops, so a tied LM head (unit L)
 * reading the embedding matrix may read it over DHA while the lookup (unit -1) reads its
 * rows over DHA too, or the head may use a GPU copy while the lookup does not.
 * A parameter tensor is owned by the unit that reads it first in the forward; a gradient
 * buffer by the unit whose backward writes it last (where it becomes complete); the host
 * Adam step of a parameter group belongs to the owner of its gradients. */
typedef struct dha_unit {
    int32_t layer;            /* plan layer: -1, 0..L-1, L */
    uint32_t n_params;        /* parameter tensors its ops read */
    uint64_t param_bytes;     /* their bytes (a tied tensor counts in every unit reading it) */
    uint64_t own_param_bytes; /* bytes of the parameters it owns */
    uint64_t grad_bytes;      /* bytes of the gradient buffers it owns */
    double adam_us;           /* host Adam step of its parameter groups (trace's *.optim.host) */
    /* Profile of one iteration (the first in the trace), each op alone on the machine: */
    double t_trans_us;        /* T_trans: param_bytes over link.h2d_Bps + per-copy latency */
    double t_fp_us;           /* T_FP: its forward ops that read parameters, on the GPU */
    double t_fp_dha_us;       /* T_FP^H: the same ops reading the parameters over DHA */
    double t_fp_other_us;     /* T_FP(A): its forward ops that read no parameters */
    double t_bp_us;           /* T_BP: its backward ops that read parameters, on the GPU */
    double t_bp_dha_us;       /* T_BP^H: the same ops reading the parameters over DHA */
    double t_bp_other_us;     /* its backward ops that read no parameters */
    double t_gw_extra_us;     /* T_GBP - T_CBP: extra backward time when the gradients it owns
                                 are written to the host over DHA by the kernels that make
                                 them (grad_write=fused; writers on the GPU) */
    double t_gw_extra_dha_us; /* the same with the writers' parameters read over DHA */
    double t_gw_acc_us;       /* the same when each host gradient is updated by a separate
                                 accumulate kernel (grad_write=accumulate, the default) */
    double t_grad_d2h_us;     /* grad_bytes over link.d2h_Bps */
} dha_unit;

/* ---- modules ----
 * The gradient-offload decision of GO-MemFerry is made per PyTorch module in the paper
 * (§IV-D): each Linear, LayerNorm, Embedding separately. In a trace a module is one parameter
 * tensor (a Linear's bias is folded into its weight tensor, a norm's scale and shift are one
 * tensor) and its share of the unit's gradient buffer. Which parameters a gradient buffer G
 * holds is read from the first iteration: a backward op that reads parameter P and writes G
 * makes P's gradient; a backward op that writes G and reads no parameter (an embedding's
 * scatter-add) makes the gradients of the parameters its unit owns that no such op claims;
 * parameters no op reads go to the one buffer their unit owns. When the members' bytes
 * (x the gradient/parameter element ratio) do not add up to G's bytes, or a parameter's
 * gradient lands in two buffers, G is one module (param_id 0). A backward op's gradient
 * write cost (the unit's t_gw_* below) is shared among the modules it makes by their bytes;
 * the modules of a unit add up to the unit's figures. */
typedef struct dha_module {
    uint64_t param_id;        /* the parameter tensor; 0 = the whole gradient buffer */
    uint64_t grad_id;         /* the gradient buffer holding its gradient */
    int32_t layer;            /* plan layer of the unit owning that buffer */
    uint64_t grad_bytes;      /* its bytes in that buffer */
    double t_gw_extra_us;     /* as dha_unit's, for this module's gradient alone */
    double t_gw_extra_dha_us;
    double t_gw_acc_us;
} dha_module;

typedef struct dha_model dha_model;

/* Analyses trace t (made with the generator's offload mode, traces/gen.h: meta offload 1,
 * the host Adam ops *.optim.host, the copies *.grad.d2h and *.param.h2d) for machine m (may
 * be NULL when every op has a duration; the profile then uses no link rates). Errors name
 * the record: not an offload trace, tp/cp/dp/ZeRO-3 other than 1/0, no forward or backward
 * phase, an op without a duration and no machine, a gradient no backward op writes. */
ms_status dha_model_new(const trace_t *t, const machine_t *m, dha_model **out, ms_error *err);
void dha_model_free(dha_model *d);
/* Units in forward order: index 0 is layer -1, index i is layer i - 1, the last is layer L. */
size_t dha_model_units(const dha_model *d);
const dha_unit *dha_model_unit(const dha_model *d, size_t i);
int32_t dha_model_layers(const dha_model *d); /* L */
/* Modules in unit order (the units' forward order), within a unit in the order the trace
 * allocates their parameters. */
size_t dha_model_modules(const dha_model *d);
const dha_module *dha_model_module(const dha_model *d, size_t i);
/* Checks that m has the DHA figures DHA lowering and the MemFerry policies need
 * (dha.read_Bps, dha.write_Bps, dha.gemm_eff, dha.other_eff > 0); MS_ERR_INVALID naming the
 * first missing one and `who` otherwise. */
ms_status dha_check_machine(const machine_t *m, const char *who, ms_error *err);

#endif

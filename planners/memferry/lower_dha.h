/* lower_dha.h — lowering for the shadow model of MemFerry (Yao et al., INFOCOM 2025) and for
 * ZeRO-Offload: parameters, gradients and optimizer states live on the host; per plan layer
 * the parameters are copied to the GPU before their forward (GFGB), read over direct host
 * access (DHA) in forward and backward, or read over DHA in forward and copied to the GPU for
 * the backward (DFGB); gradients stay on the GPU and are copied to the host after their
 * layer's backward, or are written to the host by the backward kernels (DHA gradients,
 * GO-MemFerry); the host runs Adam per layer (from the backward's end as gradients land,
 * MemFerry; or pipelined with the backward) or after every gradient is home (ZeRO-Offload),
 * and the updated parameters go back to the GPU. Produces the whole schedule
 * (planners/schedule.h) for such plans, the ones that name the lowering "dha"
 * (lower_backend_dha, in planners/lowerings.c's table); the units its plan lines name are
 * lower_dha_model.h's. Used by planners/memferry/policy_memferry.c,
 * planners/memferry/policy_zero_offload.c, the MemFerry experiment driver and the tests.
 * Rules and knobs: docs/MEMFERRY.md. */
#ifndef MEMSIM_LOWER_DHA_H
#define MEMSIM_LOWER_DHA_H

#include "planners/lower.h"

/* ---- lowering ---- (the row "dha" of lower.h's table: plans of the memferry, go-memferry
 * and zero-offload policies, which also write the knob host_params=1) */

/* The key of plan p's first grad_host.N knob (module-level gradient offload: some modules of
 * unit N keep their gradients on the host, the rest on the GPU, in one buffer), or NULL. */
const char *lower_dha_module_grads(const plan_t *p);

/* The tensor ids plan p's grad_host.N knobs list, in knob order, in a malloc'd array the
 * caller frees (*ids NULL and *n 0 when there are none). The runtime's real kernels use it to
 * place each parameter's gradient in the split buffers (docs/RUNTIME.md). MS_ERR_INVALID
 * naming the knob for a token that is not a tensor id; whether each id is a module of its
 * unit is checked by lower_dha. */
ms_status lower_dha_grad_host_ids(const plan_t *p, uint64_t **ids, size_t *n, ms_error *err);

/* Lowers trace t under plan p for machine m (required: link and DHA rates). Units the plan
 * does not list are GFGB with gradients on the GPU. Plan knobs (docs/MEMFERRY.md):
 *   grad_host.N=ID,ID,...       module-level gradient offload (GO-MemFerry's per-module
 *                               items): the gradients of these parameter tensors, held by
 *                               unit N's gradient buffer, are written to the host over DHA;
 *                               the rest of the buffer stays on the GPU (only its bytes are
 *                               allocated and copied back). Each ID must be a module of unit
 *                               N (dha_model_module: its param_id, or its grad_id when the
 *                               buffer is one module); not with grad=host on the same unit
 *   update=pipelined|after_bp|after_bwd
 *                               host Adam per unit as soon as its gradients are on the host
 *                               (pipelined, the lowering's default); or from the end of the
 *                               backward's kernels on, per unit as its gradients land, in
 *                               the order they complete (after_bp, the memferry policies'
 *                               default); or for all units, in forward order, after the
 *                               last gradient arrived (after_bwd, ZeRO-Offload)
 *   param_load=forward|update|after_update
 *                               GFGB parameters copied at the forward's start (default,
 *                               MemFerry), each unit's right after its host update
 *                               (DeepSpeed's CPU Adam copies while it steps), or all of them
 *                               once the whole update is done (ZeRO-Offload's original
 *                               schedule); the forward waits for each unit's copy
 *   realloc=0|1                 1: DeepSpeed's gradient handling: gradients allocated by the
 *                               backward, copied into a reduce bucket, freed; the bucket
 *                               goes to the host when full and at the end, the compute
 *                               stream waiting for it (default 0: gradient buffers persist
 *                               on the GPU and each unit's is copied while the backward goes
 *                               on)
 *   bucket_bytes=B              realloc=1: the reduce bucket (default 5e8 elements of the
 *                               gradient type, DeepSpeed's reduce_bucket_size)
 *   grad_free=copy|step         realloc=1: gradients freed when copied into the bucket
 *                               (default, DeepSpeed ZeRO-2) or at the end of the backward
 *   grad_write=accumulate|fused grad=host: PyTorch's way (default): the backward makes each
 *                               weight gradient in a GPU temporary and an accumulate kernel
 *                               adds it into the host gradient over DHA (reading and writing
 *                               it); fused: the kernel making the gradient writes it to the
 *                               host itself, overlapped with its compute
 *   overlap_comm=0|1            realloc=1: 1 = DeepSpeed's overlap_comm: two buckets, their
 *                               copies on a side stream (default 0: DeepSpeed's default,
 *                               the copies on the compute stream)
 *   grad_copy_bytes=N           realloc=1: bytes per gradient element on the link (default
 *                               4: DeepSpeed casts each gradient to fp32 on the GPU and
 *                               copies it into the host's fp32 gradient partition)
 *   ds_sync=0|1                 realloc=1: 1 = DeepSpeed's flush as its code runs it: per
 *                               parameter tensor (the trace's modules, plus the framework
 *                               tensors its meta param_tensors counts beyond them, spread
 *                               among the modules), a norm and an overflow check the host
 *                               waits for, then the fp32 cast and its copy; each copy is
 *                               issued after the previous one finished and the backward
 *                               resumes after the last is issued (default 0: the bucket
 *                               cast and copied in one piece; the zero-offload policy
 *                               writes 1)
 *   ds_pre_us, ds_sync_us, ds_post_us
 *                               ds_sync=1: host time per parameter to issue the norm and
 *                               overflow kernels (default 66), to wake from the wait (13),
 *                               to issue the cast and the copy (23); measured on an H200's
 *                               host (experiments/memferry/ds_probe_h200)
 * Only whole traces are lowered (o->iter_first / iter_count at their defaults). */
ms_status lower_dha(const trace_t *t, const plan_t *p, const machine_t *m, const lower_opts *o,
                    schedule_t **out, ms_error *err);

/* Synthetic tensor ids of this lowering (kind 3 of lower.h's LOWER_ID_SYNTH space): the host
 * optimizer states (k = 0), DeepSpeed's reduce buckets (k = 1 and 4) and their fp32 casts
 * on the way to the host (k = 2 and 5), the GPU temporary of a gradient on its way to a host
 * gradient (k = 3), DeepSpeed's per-parameter fp64 norm copy (k = 6) and fp32 cast (k = 7);
 * k >= 8: gradients PyTorch holds for AccumulateGrad. */
uint64_t dha_synth_id(unsigned k);

/* The plan knobs lower_dha reads (lower_dha_knob_table; the family grad_host.N is read by
 * read_grad_host itself) and its marker host_params (lower_dha_marker_table). */
#define LOWER_DHA_GRAD_HOST "grad_host."
/* When the host's Adam runs (knob update) and when updated parameters come back to the GPU
 * (knob param_load): the values of lower_dha_knobs.update and .param_load. */
typedef enum lower_dha_update {
    LOWER_DHA_UPD_PIPELINED = 0, LOWER_DHA_UPD_AFTER_BWD, LOWER_DHA_UPD_AFTER_BP
} lower_dha_update;
enum { LOWER_DHA_LOAD_FORWARD = 0, LOWER_DHA_LOAD_UPDATE, LOWER_DHA_LOAD_AFTER_UPDATE };

typedef struct lower_dha_knobs {
    int update;                 /* a lower_dha_update: pipelined, after_bp, after_bwd */
    int param_load;             /* LOWER_DHA_LOAD_*: forward, update, after_update */
    int realloc, overlap_comm;
    int grad_write;             /* 0 accumulate, 1 fused */
    int grad_free;              /* 0 copy, 1 step */
    int grad_copy_bytes;
    uint64_t bucket_bytes;
    int ds_sync;
    double ds_pre_us, ds_sync_us, ds_post_us;
    uint64_t given;
} lower_dha_knobs;
typedef struct lower_dha_marker {
    int host_params;
    uint64_t given;
} lower_dha_marker;
extern const knobtab lower_dha_knob_table, lower_dha_marker_table;
/* 1 when plan p has a grad_host.N knob for unit `layer` (some of its modules' gradients on
 * the host). */
int lower_dha_unit_grads(const plan_t *p, int32_t layer);

#endif

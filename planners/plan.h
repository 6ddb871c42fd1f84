/* plan.h — a policy's decisions as an editable file (format in traces/FORMAT.md): per
 * tensor keep / swap (token fraction alpha) / recompute / dha, per layer parameter mode and
 * gradient placement, the lowering that turns it into a schedule, the allocator and its
 * knobs, static offsets and free-form policy knobs. Written by planners/policy_*.c, read by
 * lowering (planners/lower.c), which the simulator and the runtime both use. */
#ifndef MEMSIM_PLAN_H
#define MEMSIM_PLAN_H

#include "base/knobtab.h"
#include "base/util.h"
#include "memory/alloc.h"

#define PLAN_FORMAT_VERSION 1

typedef enum plan_decision {
    PD_KEEP = 0,    /* stays on the GPU from production to last use */
    PD_SWAP,        /* offloaded after the layer's forward, prefetched before its backward;
                       alpha < 1: only that token fraction is swapped, the rest recomputed */
    PD_RECOMPUTE,   /* freed after forward, recomputed before the layer's backward */
    PD_DHA,         /* lives in pinned host memory; kernels read it across the link */
    PD_COUNT
} plan_decision;

typedef enum plan_pmode {
    PM_GFGB = 0,    /* parameters copied to the GPU before use (GPU forward, GPU backward) */
    PM_DHA,         /* parameters read from host by DHA in forward and backward */
    PM_DFGB,        /* DHA in forward, copied to the GPU for backward */
    PM_COUNT
} plan_pmode;

typedef struct plan_tensor {
    uint64_t id;
    plan_decision decision;
    double alpha;         /* swapped token fraction for PD_SWAP, in [0,1] */
} plan_tensor;

typedef struct plan_layer {
    int32_t layer;
    plan_pmode pmode;
    int grad_on_host;     /* gradients written to host memory (GO-MemFerry) */
} plan_layer;

typedef struct plan_offset {
    uint64_t id;
    uint64_t offset_bytes;
    uint64_t line;           /* its line in the plan file read (plan_load), 0 otherwise */
} plan_offset;

typedef struct plan_knob {
    char key[48];
    char value[96];
} plan_knob;

/* What the planner predicted for its plan: the file's `predict KEY VALUE` lines, typed by
 * plan_predictions_table (key, type, doc), so that the pipeline, the search and the paper
 * drivers read them without knowing which planner made them. A field counts only when its
 * given bit is set (plan_predict; plan_predicted): no planner predicts them all. */
typedef struct plan_predictions {
    int feasible;            /* 0: nothing fit the planner's budget (the closest planned) */
    uint64_t peak_bytes;     /* predicted device peak */
    uint64_t host_bytes;     /* predicted host memory */
    double iter_s;           /* predicted iteration time */
    double fwd_s, bwd_s;     /* ... its forward and backward (ProTrain's cost model) */
    double gpu_optim_s, cpu_optim_s; /* ... its optimizer step on the GPU and on the host */
    double fastest_iter_s;   /* the strictly fastest configuration's predicted iteration (the
                                search's pick may trade some of it within its tie band) */
    double fp_us, alg1_fp_us;/* predicted forward, and Algorithm 1's figure for it (MemFerry) */
    double iter_compute_us;  /* predicted compute of the iteration (MemFerry) */
    double go_cost_us;       /* time the host-written gradients add (GO-MemFerry) */
    double grad_gpu_frac;    /* share of gradient bytes kept on the GPU (GO-MemFerry) */
    uint64_t given;          /* bit i: row i of plan_predictions_table was predicted */
} plan_predictions;
extern const knobtab plan_predictions_table;

typedef struct plan {
    char policy[48];
    char lowering[16];            /* the lowering (planners/lower.h lower_find) that makes its
                                     schedule: "tensor" (plan_new's), "chunks" or "dha" */
    char allocator[32];
    alloc_config alloc_cfg;       /* knobs for the allocator (static fields unused) */
    plan_decision default_decision;
    plan_tensor *tensors; size_t n_tensors, cap_tensors;   /* sorted by id after plan_sort */
    plan_layer *layers; size_t n_layers, cap_layers;
    plan_offset *offsets; size_t n_offsets, cap_offsets;   /* sorted by id after plan_sort */
    uint64_t arena_bytes;                                  /* static arena size, 0 = derive */
    plan_knob *knobs; size_t n_knobs, cap_knobs;
    plan_predictions pred;        /* what its planner predicted (plan_new: nothing) */
} plan_t;

const char *plan_decision_name(plan_decision d);
const char *plan_pmode_name(plan_pmode m);
/* Inverse of the names above: 1 and *out on success, 0 for an unknown name. */
int plan_decision_parse(const char *s, plan_decision *out);
int plan_pmode_parse(const char *s, plan_pmode *out);

plan_t *plan_new(const char *policy, const char *allocator);
void plan_free(plan_t *p);
ms_status plan_set_tensor(plan_t *p, uint64_t id, plan_decision d, double alpha);
ms_status plan_set_layer(plan_t *p, int32_t layer, plan_pmode m, int grad_on_host);
ms_status plan_set_offset(plan_t *p, uint64_t id, uint64_t offset_bytes);
ms_status plan_set_knob(plan_t *p, const char *key, const char *value);
/* Names the plan's lowering: a non-empty token that fits plan_t.lowering, else
 * MS_ERR_INVALID (whether a lowering has that name is lower_schedule's to say). */
ms_status plan_set_lowering(plan_t *p, const char *name);
const char *plan_get_knob(const plan_t *p, const char *key);
/* Marks the prediction at field (inside p->pred) as made, after the planner set it; a field
 * of no row is ignored. PLAN_PREDICT sets and marks in one. */
void plan_predict(plan_t *p, const void *field);
#define PLAN_PREDICT(p, f, v) ((p)->pred.f = (v), plan_predict((p), &(p)->pred.f))
/* 1 when the prediction at field (inside p->pred) was made. */
int plan_predicted(const plan_t *p, const void *field);
void plan_sort(plan_t *p);
/* Lookups (after plan_sort). A tensor not listed gets default_decision with alpha 0. */
const plan_tensor *plan_find_tensor(const plan_t *p, uint64_t id);
const plan_layer *plan_find_layer(const plan_t *p, int32_t layer);
int plan_find_offset(const plan_t *p, uint64_t id, uint64_t *offset_bytes);
/* The line of tensor id's offset in the plan file it was read from (p sorted); 0 if none. */
uint64_t plan_offset_line(const plan_t *p, uint64_t id);
/* The decision for tensor id with the default applied (after plan_sort); *alpha (may be NULL)
 * gets the listed alpha, 0 for an unlisted tensor. */
plan_decision plan_decision_for(const plan_t *p, uint64_t id, double *alpha);

/* The allocator configuration the plan asks for: its knobs, and for the static arena its
 * offsets (copied into *ids / *offs, which the caller frees after the allocator is gone). */
ms_status plan_alloc_config(const plan_t *p, alloc_config *cfg, uint64_t **ids, uint64_t **offs);

/* The markers that named a plan's lowering before plans had a `lowering` line (knobs chunks
 * and host_params) hold 0 or 1 where given: MS_ERR_INVALID naming the knob otherwise (a hand
 * edit gone wrong). */
ms_status plan_markers_check(const plan_t *p, ms_error *err);

/* Reads a plan file. A `knob` line whose key is a prediction's (written before plans had
 * `predict` lines) is read as that prediction; one given both ways is an error. A file
 * without a `lowering` line (written before plans named their
 * lowering) gets the one its markers named then, decided here once: "dha" with the knob
 * host_params=1, a grad_host.N knob or a layer line other than `gfgb grad=gpu`; else
 * "chunks" with the knob chunks=1; else "tensor". */
ms_status plan_load(const char *path, plan_t **out, ms_error *err);
ms_status plan_write(const plan_t *p, const char *path, ms_error *err);
ms_status plan_write_fp(const plan_t *p, FILE *fp);

#endif

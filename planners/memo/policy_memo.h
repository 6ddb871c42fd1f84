/* policy_memo.h — MEMO (Zhao et al., SIGMOD 2025) as memsim policies: token-wise
 * recomputation and swapping of skeletal activations with the offloaded fraction alpha from
 * MEMO's LP (§4.1), two rounding buffers, and the bi-level static memory plan (§4.2,
 * planners/memo/memplan.h); plus the ablation variants of its Table 4 (full recomputation and full
 * swapping, each with the memory plan). Registered in planners/policy.c; used by the memsim command, experiments/memo and the
 * tests. Described in docs/MEMO.md. */
#ifndef MEMSIM_POLICY_MEMO_H
#define MEMSIM_POLICY_MEMO_H

#include "planners/lower.h"
#include "planners/policy.h"

extern const pol_policy pol_memo;
extern const pol_policy pol_full_recompute_plan;
extern const pol_policy pol_full_swap_plan;

/* ---- MEMO's LP (§4.1) ----
 *   max alpha  s.t.  (S_input + S_attn + alpha * S_others) / B <= T_layer
 *                    (n - 2) * (S_input + S_attn + alpha * S_others) <= M_CPU
 *                    0 <= alpha <= 1 */
typedef struct memo_lp_in {
    double s_input_bytes;   /* a layer's input */
    double s_attn_bytes;    /* its attention output */
    double s_others_bytes;  /* its other skeletal activations */
    double link_Bps;        /* B: this GPU's device-to-host bandwidth */
    double t_layer_s;       /* T_layer: one layer's forward time */
    int n_layers;           /* n */
    double host_bytes;      /* M_CPU: host memory for this GPU's offloads */
} memo_lp_in;

typedef enum memo_bound {
    MEMO_BOUND_NONE = 0,    /* alpha = 1: neither constraint binds */
    MEMO_BOUND_TIME,        /* the offload must hide behind one layer's forward */
    MEMO_BOUND_HOST         /* n - 2 layers' offloads must fit in host memory */
} memo_bound;

const char *memo_bound_name(memo_bound b); /* "none", "time", "host" */

typedef struct memo_lp_out {
    double alpha;           /* the optimum, in [0, 1] */
    double alpha_time;      /* the largest alpha each constraint allows on its own (may lie */
    double alpha_host;      /* outside [0, 1]; HUGE_VAL when the constraint is void) */
    memo_bound binding;     /* which constraint sets alpha (or, when infeasible, fails) */
    int infeasible;         /* 1: even alpha = 0 violates `binding` */
    int used_lpsolve;       /* 1: solved by lp_solve, 0: in closed form (no lp_solve) */
} memo_lp_out;

/* Solves the LP. Inputs must be finite, sizes >= 0, B, T_layer, M_CPU > 0 and n >= 1
 * (MS_ERR_INVALID naming the field). An infeasible LP (even alpha = 0 breaks a constraint)
 * is MS_ERR_INVALID with a message saying which and by how much; *out is still filled
 * (infeasible = 1, binding = the violated constraint, alpha = 0). */
ms_status memo_alpha_lp(const memo_lp_in *in, memo_lp_out *out, ms_error *err);

/* ---- the LP's inputs from a trace ---- */
typedef struct memo_layer_info {
    int n_layers;                  /* layers of the model (highest layer index + 1) */
    uint64_t s_input_bytes;        /* per layer, identical across layers (checked) */
    uint64_t s_attn_bytes;
    uint64_t s_others_bytes;
    double t_layer_s;              /* smallest forward time of a layer: the sum of its forward
                                      op durations, a ".ovl" collective counted as hidden
                                      under its attention kernel (as lowering runs it) */
} memo_layer_info;

/* From the first forward pass of t. m (may be NULL) times ops without a duration. Layers
 * whose skeletal sizes differ are MS_ERR_INVALID naming both layers; a trace without layers,
 * layer inputs or attention outputs is MS_ERR_INVALID. */
ms_status memo_layer_info_get(const trace_t *t, const machine_t *m, memo_layer_info *out,
                              ms_error *err);

/* What the plan knob memory_plan=1 asks of any policy: lowers t under p, makes the bi-level
 * memory plan of that schedule (planners/memo/memplan.h), stores its offsets and arena in p and
 * selects the static allocator. Knobs of o: plan_l1_s, plan_l2_s, strict_layers. m (may be
 * NULL) times ops without durations and gives the device capacity for the arena rule. Called
 * by the MEMO policies and by memo_post_plan. */
ms_status memo_apply_memory_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                 plan_t *p, ms_error *err);

/* The memory-plan pass as a policy row's post_plan (planners/policy.h): memo_apply_memory_plan
 * when p carries the knob memory_plan=1 and has no offsets yet (a policy that plans memory
 * itself, as MEMO's do, has them); nothing otherwise. Declared by the rows of the policies
 * that take memory_plan=1: the baselines, MEMO's, ProTrain and the chunked baselines. */
ms_status memo_post_plan(const trace_t *t, const machine_t *m, const pol_opts *o, plan_t *p,
                         ms_error *err);

/* The pinned host bytes MEMO's executor takes for an offload of `bytes`: pow2 != 0 rounds up
 * to a power of two (PyTorch's caching host allocator, c10::llvm::PowerOf2Ceil before
 * cudaHostAlloc); otherwise up to a multiple of granule_bytes (0 or 1: exact). Lowering sizes
 * its HOST_ALLOCs by the same rule (plan knobs host_pow2, host_granule). */
uint64_t memo_host_buffer_bytes(uint64_t bytes, int pow2, uint64_t granule_bytes);

/* The pinned host bytes one offloaded layer takes under reading r (lower_host_round, plan knob
 * host_round; the paper does not say, docs/MEMO.md "MEMO's executor") when its tensors copy
 * copy_bytes[0..n) bytes each (ceil(alpha * bytes) for token-wise tensors); is_stat[i] != 0
 * marks a statistic's slice (lower_is_statistic; NULL: none). Zero-byte slices take nothing.
 * Lowering sizes its HOST_ALLOCs by the same rule (lower_host_acc_bytes). */
uint64_t memo_host_layer_bytes(const uint64_t *copy_bytes, const unsigned char *is_stat, size_t n,
                               lower_host_round r, uint64_t granule_bytes);

/* The alpha the memo policy uses and why (knobs in docs/MEMO.md). */
typedef struct memo_alpha_choice {
    memo_layer_info li;
    memo_lp_in in;
    memo_lp_out lp;
    int lp_failed;                 /* the LP was infeasible; alpha fell back to 0 */
    double alpha;                  /* after the grid and the host rounding */
    double alpha_step;             /* grid (0: none) */
    int host_pow2;                 /* host_round == LOWER_HOST_LAYER_POW2 (older knob) */
    lower_host_round host_round;    /* where the pinned host buffers come from */
    uint64_t host_granule_bytes;   /* exact buffers rounded up to a multiple of this */
    int grid_steps_down;           /* steps taken because rounded buffers did not fit */
    uint64_t host_need_bytes;      /* (n - kept layers) offloads at alpha, as allocated */
} memo_alpha_choice;

/* Runs MEMO's alpha selection for trace t on machine m with policy options o: the LP (or
 * o->alpha when >= 0), then alpha floored to the knob alpha_step's grid, then stepped down
 * while the offloaded layers' host buffers, as allocated (memo_host_layer_bytes under the knob host_round), exceed
 * M_CPU. */
ms_status memo_choose_alpha(const trace_t *t, const machine_t *m, const pol_opts *o,
                            memo_alpha_choice *c, ms_error *err);

#endif

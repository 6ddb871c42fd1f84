/* policy_offload_baselines.c — zero3-offload, gemini-static and fsdp-offload of
 * policy_offload_baselines.h: each fixes the chunk knobs that describe the system, sizes its
 * buffers from its own limits, chooses checkpointing (all or none) and records the cost
 * model's prediction. Every default that is not a documented property of the system is an
 * assumption written next to it. Registered in planners/policy.c. */
#define _POSIX_C_SOURCE 200809L
#include "planners/protrain/policy_offload_baselines.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/protrain/cost_protrain.h"
#include "planners/knob.h"
#include "planners/memo/policy_memo.h"
#include "planners/protrain/policy_protrain.h"

/* Each system's own knobs (their tables are below). */
enum { BL_CK_ALL = 0, BL_CK_NONE, BL_CK_AUTO };
typedef struct bl_knobs {
    double max_live_params, static_frac, init_bytes_per_param;
    int checkpoint;               /* BL_CK_* */
    uint64_t given;
} bl_knobs;

typedef struct bl_setup {
    const char *name;
    const knobtab *own;    /* its own knobs' table */
    bl_knobs bk;           /* their values (bl_plan reads them) */
    lc_knobs k;            /* the system's settings (n_buffer: computed) */
    double buffer_params;  /* parameters the GPU may hold gathered; 0: the minimum buffers */
    int min_buffers;       /* at least this many buffers */
} bl_setup;

/* Each system's own knobs beside the chunk lowering's and the search options'. */
static const char *const BL_CHECKPOINTS[] = { "all", "none", "auto", NULL };
#define BL_CHECKPOINT_ROW                                                                     \
    KNOB_ENUM("checkpoint", bl_knobs, checkpoint, "auto", BL_CHECKPOINTS,                     \
              "checkpointing of every block or none; auto: none when it fits", "")
static const knobtab_row z3_rows[] = {
    KNOB_DBL("max_live_params", bl_knobs, max_live_params, "1e9", -HUGE_VAL, HUGE_VAL,
             "parameters the GPU may hold gathered (sizes the buffers)",
             "DeepSpeed stage3_max_live_parameters"),
    BL_CHECKPOINT_ROW,
};
static const knobtab_row gem_rows[] = {
    KNOB_DBL("static_frac", bl_knobs, static_frac, "0", -HUGE_VAL, HUGE_VAL,
             "fraction of the chunks placed on the GPU, in [0, 1]", "Gemini static placement"),
    BL_CHECKPOINT_ROW,
};
static const knobtab_row fsdp_rows[] = {
    KNOB_DBL("init_bytes_per_param", bl_knobs, init_bytes_per_param, NULL, -HUGE_VAL, HUGE_VAL,
             "bytes per parameter materialized on the GPU before the first step (absent: 8 on "
             "one GPU, else 0)", "assumed"),
    BL_CHECKPOINT_ROW,
};
static const knobtab z3_knob_table = KNOBTAB("zero3-offload", z3_rows, KNOBTAB_MSG_OPT,
                                             bl_knobs, given);
static const knobtab gem_knob_table = KNOBTAB("gemini-static", gem_rows, KNOBTAB_MSG_OPT,
                                              bl_knobs, given);
static const knobtab fsdp_knob_table = KNOBTAB("fsdp-offload", fsdp_rows, KNOBTAB_MSG_OPT,
                                               bl_knobs, given);

/* Shared path: knobs from o over the system's defaults, buffers, checkpointing, plan. */
static ms_status bl_plan(const bl_setup *b, const trace_t *t, const machine_t *m,
                         const pol_opts *o, plan_t **out, ms_error *err)
{
    *out = NULL;
    if (!m) return ms_fail(err, MS_ERR_INVALID, "policy %s needs a machine profile", b->name);
    /* system defaults first, then the user's knobs over them */
    plan_t *tmp = plan_new("knobs", "caching");
    if (!tmp) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_status st = lc_knobs_to_plan(&b->k, tmp, err);
    for (size_t i = 0; !st && o && i < o->n_knobs; i++)
        if (plan_set_knob(tmp, o->knobs[i].key, o->knobs[i].value))
            st = ms_fail(err, MS_ERR_INVALID, "knob '%s=%s' is not a valid plan knob",
                         o->knobs[i].key, o->knobs[i].value);
    lc_knobs k, uk;
    if (!st) st = lc_knobs_from_plan(tmp, &k, err);
    plan_free(tmp);
    if (!st) st = knob_from_opts(&lc_knob_table, o, &uk, err); /* what the user gave */
    if (st) return st;
    ptc_search_opts so;
    if ((st = pt_search_opts_from(o, t, m, &so, err))) return st;
    ptc_model *M;
    if ((st = pt_model_new(t, m, &k, &so, &M, err))) return st;
    const lc_layout *L = ptc_layout(M);
    int N = (int)L->n_chunks;
    if (k.n_persist > N) k.n_persist = N;
    /* buffers: what the system's live-parameter limit allows, at least what the access
     * program needs */
    int nb = 0;
    if (b->buffer_params > 0) {
        double per = 0;
        for (int c = 0; c < N; c++)
            if ((double)L->chunks[c].params > per) per = (double)L->chunks[c].params;
        double lim = knobtab_given(b->own, &b->bk, &b->bk.max_live_params)
                         ? b->bk.max_live_params : b->buffer_params;
        nb = per > 0 ? (int)floor(lim / per) : 1;
    }
    if (!knobtab_given(&lc_knob_table, &uk, &uk.n_buffer) || b->buffer_params > 0) {
        int mn = lc_min_buffers(L, k.n_persist, &k);
        if (nb < mn) nb = mn;
        if (nb < b->min_buffers) nb = b->min_buffers;
        if (nb > N - k.n_persist) nb = N - k.n_persist > mn ? N - k.n_persist : mn;
        k.n_buffer = nb;
    }
    /* checkpointing: all or none */
    int ck = b->bk.checkpoint;
    uint64_t cap = so.capacity_bytes ? so.capacity_bytes : machine_usable_bytes(m);
    cap = (uint64_t)((double)cap * (1 - so.mem_margin));
    ptc_config none = {k.n_persist, k.n_buffer, 0, 0};
    ptc_config all = {k.n_persist, k.n_buffer, 0, L->n_blocks};
    ptc_estimate en, ea;
    st = ptc_estimate_config(M, &none, &en, err);
    if (!st) st = ptc_estimate_config(M, &all, &ea, err);
    const ptc_config *pick = &all;
    const ptc_estimate *pe = &ea;
    if (!st) {
        if (ck == BL_CK_NONE || (ck == BL_CK_AUTO && en.valid && en.peak_bytes <= cap)) {
            pick = &none;
            pe = &en;
        }
    }
    plan_t *p = NULL;
    if (!st) st = pol_plan_new(b->name, o, &p, err);
    if (!st) {
        k = pt_config_knobs(M, pick, pe);
        st = lc_knobs_to_plan(&k, p, err);
    }
    if (!st) st = pt_record_estimate(p, pe, err);
    if (!st) PLAN_PREDICT(p, feasible, pe->peak_bytes <= cap);
    ptc_model_free(M);
    if (st) {
        plan_free(p);
        return st;
    }
    *out = p;
    return MS_OK;
}

ms_status pol_zero3_offload_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                 plan_t **out, ms_error *err)
{
    bl_setup b = {.name = "zero3-offload", .own = &z3_knob_table};
    ms_status st = knob_from_opts(b.own, o, &b.bk, err);
    if (st) return st;
    lc_knobs_default(&b.k);
    b.k.chunk_by_layer = 1;       /* parameters gathered per submodule; per layer here */
    b.k.n_persist = 0;            /* offload_param: every parameter on the host */
    /* fp16 parameter 2 + fp32 master, m, v 12 + fp32 gradient 4 = 18, times the 1.5 buffer
     * factor DeepSpeed's own estimate_zero3_model_states_mem_needs applies for offload */
    b.k.host_bytes_per_param = 27;
    b.k.overlap_host_adam = 0;    /* DeepSpeedCPUAdam runs in optimizer.step() */
    b.k.reuse_resident = 1;       /* stage3_max_reuse_distance (1e9 default) keeps them */
    b.k.prefetch_depth = 1;       /* stage3_prefetch_bucket_size (5e7 params) is below one
                                     layer of the large models: one unit ahead */
    b.buffer_params = 1e9;        /* stage3_max_live_parameters default; knob max_live_params */
    b.min_buffers = 2;
    return bl_plan(&b, t, m, o, out, err);
}

ms_status pol_gemini_static_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                 plan_t **out, ms_error *err)
{
    bl_setup b = {.name = "gemini-static", .own = &gem_knob_table};
    ms_status st = knob_from_opts(b.own, o, &b.bk, err);
    if (st) return st;
    lc_knobs_default(&b.k);
    b.k.chunk_by_layer = 0;       /* Gemini's chunks, sized by its own search */
    b.k.host_bytes_per_param = 14;/* fp16 chunk 2 + fp32 chunk 4 + Adam m, v 8 (gradients
                                     reuse the fp16 chunk) */
    b.k.overlap_host_adam = 0;    /* HybridAdam steps after the backward */
    b.k.reuse_resident = 1;
    b.k.prefetch_depth = -1;      /* 0.3.3 fetches a chunk when an op needs it */
    b.min_buffers = 2;
    double frac = b.bk.static_frac; /* static placement: fraction of chunks on the GPU */
    if (frac < 0 || frac > 1)
        return ms_fail(err, MS_ERR_INVALID, "knob static_frac=%g is not in [0,1]", frac);
    if (frac > 0) { /* the chunk count is known only after the layout: a first pass */
        lc_knobs k0 = b.k;
        lc_layout *L;
        if ((st = lc_layout_new(t, m, &k0, &L, err))) return st;
        b.k.n_persist = (int)floor(frac * (double)L->n_chunks + 0.5);
        lc_layout_free(L);
    }
    return bl_plan(&b, t, m, o, out, err);
}

ms_status pol_fsdp_offload_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                plan_t **out, ms_error *err)
{
    bl_setup b = {.name = "fsdp-offload", .own = &fsdp_knob_table};
    ms_status st = knob_from_opts(b.own, o, &b.bk, err);
    if (st) return st;
    lc_knobs_default(&b.k);
    b.k.chunk_by_layer = 1;       /* transformer_auto_wrap_policy: one FlatParameter per block */
    b.k.host_bytes_per_param = 16;/* fp32 parameter shard 4 + fp32 gradient 4 + Adam m, v 8 */
    /* FSDP pins both shards (flat_param._local_shard.pin_memory() and _cpu_grad, "non-blocking
     * D2H transfer"), PyTorch's pinned allocator rounding each up to a power of two; the
     * optimizer's moments are plain CPU tensors */
    b.k.host_pinned_tensors = 2;
    b.k.host_pinned_bytes_per_param = 4;
    b.k.param_xfer_bytes = 4;     /* the fp32 shard goes to the GPU, cast there to bf16 */
    b.k.grad_xfer_bytes = 4;      /* fp32 gradient shard back to the host */
    b.k.overlap_host_adam = 0;
    b.k.host_adam_scale = 0.25;   /* torch.optim.Adam on the CPU (foreach, not a vectorized
                                     kernel): 0.25-0.28 of PyTorch's fused CPU Adam at 1-16
                                     threads, measured on the lent H200's host
                                     (experiments/memferry/host_probe_h200/cpu_adam.csv) */
    b.k.reuse_resident = 0;       /* reshard_after_forward */
    b.k.prefetch_depth = 1;       /* BACKWARD_PRE prefetch of the next unit */
    b.min_buffers = 2;
    /* One GPU: the model is materialized unsharded on the device in fp32 with its fp32
     * gradients before the first step (assumed; ProTrain reports 3B on a 24 GB RTX 3090 and
     * 10B on an 80 GB A100 for FSDP on one GPU, which 8 bytes per parameter reproduces). */
    const char *v = trace_get_meta(t, "dp"), *pv = trace_get_meta(t, "params");
    uint64_t dp = 1, params = 0;
    if (v) ms_parse_u64(v, &dp);
    if (pv) ms_parse_u64(pv, &params);
    double ib = knobtab_given(b.own, &b.bk, &b.bk.init_bytes_per_param)
                    ? b.bk.init_bytes_per_param : dp <= 1 ? 8 : 0;
    b.k.init_device_bytes = (uint64_t)(ib * (double)params);
    return bl_plan(&b, t, m, o, out, err);
}

/* each system's own knobs beside the chunk lowering's and the search options' it reads */
#define BL_KNOB_TABLES(own) { &own, &lc_marker_table, &lc_knob_table, &pt_search_knob_table, \
                              &pol_common_knob_table, NULL }
static const knobtab *const Z3_KNOBS[] = BL_KNOB_TABLES(z3_knob_table);
static const knobtab *const GEM_KNOBS[] = BL_KNOB_TABLES(gem_knob_table);
static const knobtab *const FSDP_KNOBS[] = BL_KNOB_TABLES(fsdp_knob_table);

const pol_policy pol_zero3_offload = {
    "zero3-offload",
    "DeepSpeed ZeRO-3 with parameter and optimizer offload: per-layer gathers, CPU Adam after "
    "the backward, checkpointing all or none",
    "DeepSpeed v0.12 (Rajbhandari et al., ZeRO-Infinity); ProTrain Sec. 5.1 baseline",
    &z3_knob_table,
    pol_zero3_offload_plan,
    Z3_KNOBS,
    POL_FORM_PLAIN,
    0,
    "chunks",
    memo_post_plan,
};

const pol_policy pol_gemini_static = {
    "gemini-static",
    "Colossal-AI Gemini with static placement: chunks on the host fetched on demand, a static "
    "fraction on the GPU, CPU Adam after the backward",
    "Colossal-AI 0.3.3 Gemini (Fang et al., TPDS 2022); ProTrain Sec. 5.1 baseline",
    &gem_knob_table,
    pol_gemini_static_plan,
    GEM_KNOBS,
    POL_FORM_PLAIN,
    0,
    "chunks",
    memo_post_plan,
};

const pol_policy pol_fsdp_offload = {
    "fsdp-offload",
    "PyTorch FSDP with CPU offload: per-block FlatParameters resharded after forward, fp32 "
    "shards on the host, torch CPU Adam, checkpointing all or none",
    "PyTorch 2.0.1 FSDP (Zhao et al., VLDB 2023); ProTrain Sec. 5.1 baseline",
    &fsdp_knob_table,
    pol_fsdp_offload_plan,
    FSDP_KNOBS,
    POL_FORM_PLAIN,
    0,
    "chunks",
    memo_post_plan,
};

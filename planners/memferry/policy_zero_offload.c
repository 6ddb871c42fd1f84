/* policy_zero_offload.c — the zero-offload policy (see policy_zero_offload.h): every unit
 * GFGB with its gradients on the GPU, and the plan knobs that make planners/memferry/lower_dha.c run
 * ZeRO-Offload's schedule. Registered in planners/policy.c. */
#include "planners/memferry/policy_zero_offload.h"

#include <string.h>

#include "planners/knob.h"
#include "planners/memferry/lower_dha.h"
#include "planners/memferry/lower_dha_model.h"

/* Its own knob: which ZeRO-Offload (the lowering's realloc, with another default). */
typedef struct zo_knobs {
    int realloc;
    uint64_t given;
} zo_knobs;
static const knobtab_row zo_rows[] = {
    { "realloc", KNOBTAB_FLAG, offsetof(zo_knobs, realloc), "1", 0, 1, NULL, NULL,
      "0 (Native-Offload) or 1 (DeepSpeed)", "1: DeepSpeed's gradient buckets; 0: MemFerry's "
      "Native-Offload", "DeepSpeed; MemFerry §V-A", 0, 0 },
};
static const knobtab zo_knob_table = KNOBTAB("zero-offload", zo_rows, KNOBTAB_MSG_KNOB,
                                             zo_knobs, given);

static ms_status plan_zero_offload(const trace_t *t, const machine_t *m, const pol_opts *o,
                                   plan_t **out, ms_error *err)
{
    *out = NULL;
    zo_knobs zk;
    lower_dha_knobs lk;
    ms_error e1;
    ms_status st = knob_from_opts(&zo_knob_table, o, &zk, &e1);
    if (!st) st = knob_from_opts(&lower_dha_knob_table, o, &lk, &e1);
    if (st) return ms_fail(err, st, "policy zero-offload: %s", e1.msg);
    int ds = zk.realloc; /* DeepSpeed's */
    if (!m || !(m->link_h2d_Bps > 0) || !(m->link_d2h_Bps > 0))
        return ms_fail(err, MS_ERR_INVALID, "policy zero-offload needs a machine profile with "
                       "host link rates");
    dha_model *d;
    ms_error e2;
    st = dha_model_new(t, m, &d, &e2);
    if (st) return ms_fail(err, st, "policy zero-offload: %s", e2.msg);
    plan_t *p = NULL;
    st = pol_plan_new("zero-offload", o, &p, err);
    if (st) {
        dha_model_free(d);
        return st;
    }
    for (size_t i = 0; !st && i < dha_model_units(d); i++)
        st = plan_set_layer(p, dha_model_unit(d, i)->layer, PM_GFGB, 0);
    dha_model_free(d);
    /* its decisions for the lowering, recorded through the lowering's tables */
    lower_dha_marker mk = { 0, 0 };
    lower_dha_knobs dec;
    memset(&dec, 0, sizeof dec);
    knobtab_defaults(&lower_dha_knob_table, &dec);
    KNOB_DECIDE(&lower_dha_marker_table, &mk, host_params, 1);
    KNOB_DECIDE(&lower_dha_knob_table, &dec, realloc, ds);
    /* DeepSpeed as Hugging Face's and Lightning's ZeRO-2 configurations run it: overlap_comm
     * and contiguous gradients on (DeepSpeed's own default leaves overlap_comm off). */
    if (ds && !knobtab_given(&lower_dha_knob_table, &lk, &lk.overlap_comm))
        KNOB_DECIDE(&lower_dha_knob_table, &dec, overlap_comm, 1);
    /* DeepSpeed's flush synchronizes the host once per parameter (stage_1_and_2.py's
     * overflow check; lower_dha.c bucket_flush_ds). */
    if (ds && !knobtab_given(&lower_dha_knob_table, &lk, &lk.ds_sync))
        KNOB_DECIDE(&lower_dha_knob_table, &dec, ds_sync, 1);
    if (!knobtab_given(&lower_dha_knob_table, &lk, &lk.update))
        KNOB_DECIDE(&lower_dha_knob_table, &dec, update, LOWER_DHA_UPD_AFTER_BWD);
    /* DeepSpeed's CPU Adam copies each tile of updated fp16 parameters to the GPU while it
     * steps (DeepSpeedCPUAdam's step with fp16_param_groups); ZeRO-Offload's original
     * schedule (Ren et al. §4.1, Fig. 5) swaps the parameters in after the update. */
    if (!knobtab_given(&lower_dha_knob_table, &lk, &lk.param_load))
        KNOB_DECIDE(&lower_dha_knob_table, &dec, param_load,
                    ds ? LOWER_DHA_LOAD_UPDATE : LOWER_DHA_LOAD_AFTER_UPDATE);
    if (!st) st = knob_given_to_plan(&lower_dha_marker_table, &mk, p, err);
    if (!st) st = knob_given_to_plan(&lower_dha_knob_table, &dec, p, err);
    if (st) {
        plan_free(p);
        return ms_fail(err, st, "policy zero-offload: cannot record the plan");
    }
    plan_sort(p);
    *out = p;
    return MS_OK;
}

static const knobtab *const ZO_KNOBS[] = { &zo_knob_table, &lower_dha_knob_table,
                                            &lower_dha_marker_table, NULL };

const pol_policy pol_zero_offload = {
    "zero-offload",
    "parameters and optimizer states on the host, fp16 parameters copied to the GPU layer by "
    "layer before the forward, gradients copied back in the backward, host Adam after the "
    "backward; realloc=1 DeepSpeed's gradient buckets, 0 MemFerry's Native-Offload",
    "ZeRO-Offload (Ren et al., USENIX ATC 2021) as DeepSpeed implements it and as MemFerry "
    "(INFOCOM 2025) §V-A re-implements it (Native-Offload)",
    &zo_knob_table,
    plan_zero_offload,
    ZO_KNOBS,
    POL_FORM_OFFLOAD,
    0,
    "dha",
    NULL,
};

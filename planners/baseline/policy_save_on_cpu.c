/* policy_save_on_cpu.c — the save-on-cpu policy (see policy_save_on_cpu.h). PyTorch's
 * torch/autograd/graph.py save_on_cpu installs a pack hook that copies every tensor autograd
 * saves into a new pinned CPU tensor (torch.empty(..., pin_memory=True), then a blocking
 * copy_ on the current stream) and an unpack hook that copies it back with
 * non_blocking=True when the backward needs it. The hooks see every saved tensor, parameters
 * and autocast's weight casts included, so this policy swaps each tensor a backward op of
 * the trace reads that was there before the backward began, and asks the tensor lowering
 * (planners/lower.c) for swap_at=save (out when saved, back when read), swap_stream=compute
 * (both copies on the compute stream) and host_round=layer_pow2 (the caching host allocator
 * rounds each pinned buffer to a power of two). Registered in planners/policy.c. */
#include "planners/baseline/policy_save_on_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "planners/knob.h"
#include "planners/lower.h"
#include "planners/memo/policy_memo.h"
#include "base/u64map.h"

/* Its own knob: whether the parameters a backward op reads are saved too. */
typedef struct soc_knobs {
    int params;
    uint64_t given;
} soc_knobs;
static const knobtab_row soc_rows[] = {
    KNOB_FLAG("params", soc_knobs, params, "1",
              "1: the parameters a backward op reads are copied too, as the pack hook sees "
              "them (a linear saves its weight); 0: only tensors made before the backward "
              "that are not parameters", "torch.autograd.graph.save_on_cpu"),
};
static const knobtab soc_knob_table = KNOBTAB("save-on-cpu", soc_rows, KNOBTAB_MSG_KNOB,
                                              soc_knobs, given);

/* The lowering knobs that make save_on_cpu's schedule, where the user did not give them. */
static ms_status set_lowering_knobs(plan_t *p, const lower_knobs *lk)
{
    static const struct { const char *key, *value; size_t off; } want[] = {
        { "swap_at", "save", offsetof(lower_knobs, swap_at) },
        { "swap_stream", "compute", offsetof(lower_knobs, swap_stream) },
        { "host_round", "layer_pow2", offsetof(lower_knobs, host_round) },
    };
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < sizeof want / sizeof *want; i++)
        if (!knobtab_given(&lower_knob_table, lk, (const char *)lk + want[i].off))
            st = plan_set_knob(p, want[i].key, want[i].value);
    return st;
}

static ms_status plan_save_on_cpu(const trace_t *t, const machine_t *m, const pol_opts *o,
                                  plan_t **out, ms_error *err)
{
    (void)m;
    *out = NULL;
    soc_knobs sk;
    lower_knobs lk;
    ms_error e1;
    ms_status st = knob_from_opts(&soc_knob_table, o, &sk, &e1);
    if (!st) st = knob_from_opts(&lower_knob_table, o, &lk, &e1);
    if (st) return ms_fail(err, st, "policy save-on-cpu: %s", e1.msg);
    uint64_t *ids, bytes;
    size_t n;
    if ((st = pol_saved_tensors(t, sk.params, &ids, &n, &bytes, err)) != MS_OK) return st;
    if (!n) {
        free(ids);
        return ms_fail(err, MS_ERR_INVALID, "policy save-on-cpu: no backward op of the trace "
                       "reads a tensor made before its backward phase, so nothing is saved "
                       "for backward (a trace without backward ops or their inputs, such as "
                       "an allocator-only import?)");
    }
    plan_t *p;
    if ((st = pol_plan_new("save-on-cpu", o, &p, err)) != MS_OK) {
        free(ids);
        return st;
    }
    for (size_t i = 0; st == MS_OK && i < n; i++) st = plan_set_tensor(p, ids[i], PD_SWAP, 1.0);
    free(ids);
    if (st == MS_OK) st = set_lowering_knobs(p, &lk);
    if (st != MS_OK) {
        plan_free(p);
        return ms_fail(err, st, "policy save-on-cpu: cannot record the plan");
    }
    plan_sort(p);
    *out = p;
    return MS_OK;
}

static const knobtab *const SOC_KNOBS[] = { &soc_knob_table, &pol_common_knob_table,
                                             &lower_knob_table, NULL };

const pol_policy pol_save_on_cpu = {
    "save-on-cpu",
    "every tensor autograd saves (activations, parameters, weight casts) copied to pinned "
    "host memory when saved, on the compute stream, and back when the backward reads it",
    "PyTorch torch.autograd.graph.save_on_cpu(pin_memory=True)",
    &soc_knob_table,
    plan_save_on_cpu,
    SOC_KNOBS,
    POL_FORM_PLAIN,
    0,
    NULL,
    memo_post_plan,
};

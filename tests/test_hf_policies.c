/* test_hf_policies.c — every registered policy on Hugging Face-shaped traces (the hf
 * generator profile: PyTorch eager + transformers, gradients made by the backward, AdamW
 * states by the first step) of three families (LLaMA, Mixtral MoE, GPT-2) in amp and bf16:
 * each runs (status ok) with sane numbers; the ZeRO-Offload form made from a plain trace
 * (planners/memferry/offload_form.c) matches the generator's own offload=1 program; the chunk
 * lowering takes in-iteration model states and refuses an in-iteration parameter by name;
 * knob variants of protrain, full-swap and memo that once failed on such traces run. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/protrain/lower_chunks.h"
#include "planners/memferry/lower_dha.h"
#include "planners/memferry/lower_dha_model.h"
#include "planners/memferry/offload_form.h"
#include "planners/policy.h"
#include "sim/pipeline.h"
#include "tests/tap.h"
#include "base/util.h"

static char model[512];

static machine_profile *load(const char *name)
{
    machine_profile *p = NULL;
    ms_error err;
    if (machine_load_named(name, &p, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return p;
}

/* A workload of experiments/realworld/configs/NAME.json in the hf profile. */
static void hf_workload(pipe_workload *w, const char *cfg, const char *precision)
{
    const char *rw = getenv("MEMSIM_REALWORLD");
    snprintf(model, sizeof model, "config:%s/../configs/%s.json",
             rw ? rw : "experiments/realworld/h200", cfg);
    pipe_workload_default(w);
    w->model = model;
    w->seq = 1024;
    w->batch = 1;
    w->gen_knobs[0] = (pol_knob){ "framework", "hf" };
    w->gen_knobs[1] = (pol_knob){ "precision", precision };
    w->n_gen_knobs = 2;
}

static trace_t *trace_of(const pipe_workload *w, const machine_t *m, pol_form form)
{
    trace_t *t = NULL;
    ms_error err;
    if (pipe_trace_for(w, m, form, &t, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return t;
}

static const sim_result *find(const sim_result *r, size_t n, const char *policy)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(r[i].policy, policy)) return &r[i];
    return NULL;
}

/* Every registered policy on one configuration. */
static void every_policy(const machine_t *m, const char *cfg, const char *precision)
{
    pipe_workload w;
    hf_workload(&w, cfg, precision);
    trace_t *t[2] = { trace_of(&w, m, POL_FORM_PLAIN), trace_of(&w, m, POL_FORM_OFFLOAD) };
    TAP_OK(t[0] && t[1], "%s %s: the plain trace and its ZeRO-Offload form are made", cfg,
           precision);
    if (!t[0] || !t[1]) return;
    TAP_OK(oform_is_offload(t[1]) && !oform_is_offload(t[0]) &&
               trace_get_meta(t[1], "offload_form"),
           "%s %s: the offload form says it was made from the plain trace", cfg, precision);
    size_t n;
    const pol_policy *const *reg = pol_registry(&n);
    sim_result *res = calloc(n, sizeof *res);
    size_t ok = 0;
    for (size_t i = 0; res && i < n; i++) {
        pipe_policy p;
        pipe_policy_default(&p);
        p.policy = reg[i]->name;
        ms_error err;
        ms_error_clear(&err);
        ms_status st = pipe_run(t[reg[i]->form == POL_FORM_OFFLOAD], m, &p, NULL, &res[i], &err);
        int good = st == MS_OK && res[i].status == RS_OK && res[i].iter_time_s > 0 &&
                   isfinite(res[i].iter_time_s) &&
                   res[i].peak_reserved_bytes >= res[i].peak_allocated_bytes &&
                   res[i].peak_allocated_bytes > 0;
        if (!good)
            TAP_NOTE("%s %s %s: %s (status %d, %.6f s)", cfg, precision, reg[i]->name,
                     st ? err.msg : res[i].failure, (int)res[i].status, res[i].iter_time_s);
        ok += (size_t)good;
        if (st != MS_OK) snprintf(res[i].policy, sizeof res[i].policy, "-");
    }
    TAP_OK(res && ok == n, "%s %s: all %zu registered policies run ok (%zu did)", cfg, precision,
           n, ok);
    const sim_result *ka = res ? find(res, n, "keep-all") : NULL,
                     *fr = res ? find(res, n, "full-recompute") : NULL,
                     *pt = res ? find(res, n, "protrain") : NULL,
                     *zo = res ? find(res, n, "zero-offload") : NULL,
                     *z3 = res ? find(res, n, "zero3-offload") : NULL;
    TAP_OK(ka && fr && ka->peak_reserved_bytes >= fr->peak_reserved_bytes &&
               fr->iter_time_s >= ka->iter_time_s,
           "%s %s: full-recompute reserves no more than keep-all and takes no less time", cfg,
           precision);
    TAP_OK(pt && ka && pt->status == RS_OK && ka->status == RS_OK,
           "%s %s: protrain fits where keep-all fits", cfg, precision);
    TAP_OK(zo && z3 && zo->host_peak_bytes >= trace_meta_u64(t[1], "host_opt_bytes", 1) &&
               z3->host_peak_bytes > 0 && ka && ka->host_peak_bytes == 0,
           "%s %s: zero-offload holds the optimizer states on the host (%.3f GiB), "
           "zero3-offload uses the host, keep-all does not", cfg, precision,
           zo ? (double)zo->host_peak_bytes / MS_GiB : 0.0);
    free(res);
    trace_free(t[0]);
    trace_free(t[1]);
}

/* One policy with knobs (and an alpha override, < 0: none) on one configuration. */
static void variant(const machine_t *m, const char *cfg, const char *precision,
                    const char *policy, double alpha, const pol_knob *knobs, size_t nk,
                    const char *what)
{
    pipe_workload w;
    hf_workload(&w, cfg, precision);
    trace_t *t = trace_of(&w, m, POL_FORM_PLAIN);
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = policy;
    p.alpha = alpha;
    for (size_t i = 0; i < nk; i++) p.knobs[i] = knobs[i];
    p.n_knobs = nk;
    sim_result r;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = t ? pipe_run(t, m, &p, NULL, &r, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && r.status == RS_OK && r.iter_time_s > 0, "%s %s %s %s runs%s%s", cfg,
           precision, policy, what, st ? ": " : "", st ? err.msg : "");
    trace_free(t);
}

/* The configurations that once failed: a checkpointed block whose input a bf16 layer frees
 * at its first residual add, an MoE layer's host-written offsets under alpha < 1, a swapped
 * layer input freed inside its layer without rounding buffers. */
static void variants(const machine_t *m)
{
    const pol_knob ck[] = { { "n_persist", "1" }, { "n_buffer", "2" }, { "n_swap", "0" },
                            { "n_checkpoint", "2" } };
    variant(m, "llama-tiny-2l", "bf16", "protrain", -1, ck, 4, "both blocks checkpointed");
    const pol_knob sw[] = { { "n_persist", "1" }, { "n_buffer", "2" }, { "n_swap", "1" },
                            { "n_checkpoint", "1" } };
    variant(m, "llama-tiny-2l", "bf16", "protrain", -1, sw, 4, "one block swapped, one checkpointed");
    variant(m, "mixtral-tiny-2l", "bf16", "full-swap", 0.3, NULL, 0, "alpha 0.3");
    const pol_knob rb[] = { { "rounding_buffers", "0" } };
    variant(m, "qwen2-moe-mini-4l", "bf16", "memo", -1, rb, 1, "rounding_buffers=0");
    variant(m, "qwen2-moe-mini-4l", "bf16", "memo", -1, NULL, 0, "(rounding buffers)");
}

/* On a generic-framework trace the form made from the plain trace has the generator's own
 * offload=1 program: the same ops (kind, phase, layer, name, bytes) and marks in order. */
static void same_as_generator(const machine_t *m)
{
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = "gpt2";
    w.seq = 512;
    trace_t *plain = trace_of(&w, m, POL_FORM_PLAIN), *gen = trace_of(&w, m, POL_FORM_OFFLOAD),
            *made = NULL;
    ms_error err;
    ms_status st = plain ? oform_from_plain(plain, m, 12, &made, &err) : MS_ERR_INVALID;
    if (st) TAP_NOTE("%s", plain ? err.msg : "no trace");
    int same = st == MS_OK && gen && made, nops = 0;
    size_t a = 0, b = 0, na = gen ? trace_count(gen) : 0, nb = made ? trace_count(made) : 0;
    while (same) {
        while (a < na && trace_get(gen, a)->type != TR_OP && trace_get(gen, a)->type != TR_MARK) a++;
        while (b < nb && trace_get(made, b)->type != TR_OP && trace_get(made, b)->type != TR_MARK) b++;
        if (a == na || b == nb) {
            same = a == na && b == nb;
            break;
        }
        const trace_rec *x = trace_get(gen, a++), *y = trace_get(made, b++);
        if (x->type != y->type) same = 0;
        else if (x->type == TR_MARK)
            same = x->u.mark.kind == y->u.mark.kind && x->u.mark.value == y->u.mark.value;
        else {
            same = x->u.op.kind == y->u.op.kind && x->u.op.phase == y->u.op.phase &&
                   x->u.op.layer == y->u.op.layer && !strcmp(x->u.op.name, y->u.op.name) &&
                   x->u.op.bytes_read == y->u.op.bytes_read &&
                   x->u.op.bytes_written == y->u.op.bytes_written &&
                   x->u.op.n_in == y->u.op.n_in && x->u.op.n_out == y->u.op.n_out;
            nops++;
            if (!same) TAP_NOTE("op %s differs from %s", y->u.op.name, x->u.op.name);
        }
    }
    TAP_OK(same && nops > 100, "gpt2 generic: the ZeRO-Offload form made from the plain trace "
           "has the generator's offload=1 ops and marks (%d ops)", nops);
    TAP_OK(made && trace_meta_u64(made, "host_opt_bytes", 0) ==
                       trace_meta_u64(gen, "host_opt_bytes", 1) &&
               trace_meta_u64(made, "host_grad_bytes", 0) ==
                   trace_meta_u64(gen, "host_grad_bytes", 1),
           "gpt2 generic: the same host optimizer and gradient bytes");
    trace_free(plain);
    trace_free(gen);
    trace_free(made);
}

/* Refusals that name what is missing. */
static void refusals(const machine_t *m)
{
    pipe_workload w;
    hf_workload(&w, "llama-tiny-2l", "bf16");
    trace_t *t = trace_of(&w, m, POL_FORM_PLAIN);
    if (!t) return;
    ms_error err;
    dha_model *d = NULL;
    ms_status st = dha_model_new(t, m, &d, &err);
    TAP_OK(st != MS_OK && strstr(err.msg, "ZeRO-Offload"),
           "the shadow model refuses a plain trace naming the ZeRO-Offload form: %s",
           st ? err.msg : "accepted");
    dha_model_free(d);
    /* the same trace with its first block parameter allocated inside the iteration */
    trace_t *bad = trace_new();
    const trace_tensor *moved = NULL;
    int placed = 0;
    for (size_t i = 0; bad && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (!moved && r->type == TR_ALLOC && r->u.alloc.cls == TC_PARAM &&
            !strncmp(r->u.alloc.name, "L0.", 3)) {
            moved = &r->u.alloc;
            continue;
        }
        trace_append(bad, r);
        if (moved && !placed && r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            trace_rec a = { .type = TR_ALLOC };
            a.u.alloc = *moved;
            trace_append(bad, &a);
            placed = 1;
        }
    }
    for (size_t i = 0; bad && i < trace_meta_count(t); i++)
        trace_set_meta(bad, trace_meta_key(t, i), trace_meta_value(t, i));
    lc_knobs k;
    lc_knobs_default(&k);
    lc_layout *L = NULL;
    st = bad && placed ? lc_layout_new(bad, m, &k, &L, &err) : MS_ERR_INVALID;
    TAP_OK(st != MS_OK && moved && strstr(err.msg, moved->name) && strstr(err.msg, "parameter"),
           "chunk lowering refuses a parameter allocated inside an iteration by name: %s",
           st ? err.msg : "accepted");
    lc_layout_free(L);
    trace_t *o = NULL;
    st = bad && placed ? oform_from_plain(bad, m, 12, &o, &err) : MS_ERR_INVALID;
    TAP_OK(st != MS_OK && moved && strstr(err.msg, moved->name),
           "the ZeRO-Offload form refuses it too: %s", st ? err.msg : "accepted");
    trace_free(o);
    trace_free(bad);
    /* gradients and optimizer states made inside iterations are chunk-managed */
    st = lc_layout_new(t, m, &k, &L, &err);
    TAP_OK(st == MS_OK && L && L->n_chunks > 0 && L->params == trace_meta_u64(t, "params", 0),
           "the chunk layout of a PyTorch eager trace counts its %llu parameters",
           (unsigned long long)trace_meta_u64(t, "params", 0));
    lc_layout_free(L);
    trace_free(t);
    hf_workload(&w, "llama-tiny-2l", "amp");
    t = trace_of(&w, m, POL_FORM_PLAIN);
    L = NULL;
    st = t ? lc_layout_new(t, m, &k, &L, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && L && L->params == trace_meta_u64(t, "params", 0) &&
               L->param_bytes == 2 * L->params,
           "under autocast the chunks hold the fp32 parameters in bf16 (%llu bytes)",
           L ? (unsigned long long)L->param_bytes : 0ULL);
    lc_layout_free(L);
    trace_free(t);
}

int main(void)
{
    machine_profile *h200 = load("h200-sxm");
    TAP_OK(h200 != NULL, "machine h200-sxm loads");
    if (!h200) return tap_done();
    static const char *cfgs[] = { "llama-tiny-2l", "mixtral-tiny-2l", "gpt2-tiny-2l" };
    static const char *precs[] = { "amp", "bf16" };
    for (size_t c = 0; c < 3; c++)
        for (size_t p = 0; p < 2; p++) every_policy(&h200->m, cfgs[c], precs[p]);
    variants(&h200->m);
    same_as_generator(&h200->m);
    refusals(&h200->m);
    machine_profile_free(h200);
    return tap_done();
}

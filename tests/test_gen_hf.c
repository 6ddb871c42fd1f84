/* test_gen_hf.c — unit tests (TAP) of the trace generator's hf framework (traces/gen_hf*.c):
 * the LLaMA program's bytes by class and precision, mixture-of-experts layers, GPT-2, Qwen3,
 * OPT and GPT-NeoX, each walked for live inputs and outputs and checked against hand counts.
 * The rest of the generator is tests/test_gen.c. */
#define _POSIX_C_SOURCE 200809L
#include "tests/tap.h"
#include "tests/gen_util.h"
#include "traces/gen.h"
#include "base/u64map.h"

#include <math.h>
#include <string.h>
#include <stdlib.h>

/* ---- framework hf ---- */

static gen_config hf_config(const char *prec)
{
    return tiny_llama_hf(prec, 32, 2, 32);
}

/* The most live bytes of the classes in mask at any point, and the sum of the allocations
 * in iteration 0 whose name ends with suffix. */
static uint64_t hf_peak_classes(const trace_t *t, unsigned mask, const char *suffix,
                                uint64_t *named)
{
    size_t n = trace_count(t);
    uint64_t *bytes = calloc(n + 2, sizeof *bytes), live = 0, peak = 0;
    int iter = -1;
    *named = 0;
    for (size_t i = 0; i < n; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
        if (r->type == TR_ALLOC) {
            const trace_tensor *a = &r->u.alloc;
            if (a->id <= n && (mask >> a->cls & 1u)) {
                bytes[a->id] = a->bytes;
                live += a->bytes;
            }
            if (iter == 0 && suffix && ms_ends_with(a->name, suffix)) *named += a->bytes;
        } else if (r->type == TR_FREE && r->u.free_id <= n) {
            live -= bytes[r->u.free_id];
            bytes[r->u.free_id] = 0;
        }
        if (live > peak) peak = live;
    }
    free(bytes);
    return peak;
}

static void test_hf(const machine_t *mach)
{
    ms_error err;
    ms_error_clear(&err);
    gen_config c = hf_config("amp");
    const model_t *m = &c.model;
    uint64_t h = m->hidden, V = m->vocab, T = c.seq * c.micro_batch, kv = 2 * 16;
    uint64_t lin = h * h + 2 * kv * h + h * h + 3 * m->ffn_hidden * h;
    uint64_t P = V * h + m->layers * (lin + 2 * h) + h + V * h;
    unsigned states = 1u << TC_PARAM | 1u << TC_GRAD | 1u << TC_OPTSTATE;
    trace_t *t = NULL, *t2 = NULL;
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf amp trace: %s", err.msg);
    if (!t) return;
    uint64_t casts, fp32 = 0, lp = 0;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 16 * P,
           "amp: fp32 parameters, gradients and both AdamW states, 16 B/param");
    TAP_OK(casts == 2 * (m->layers * lin + V * h),
           "amp: every linear's weight (and the LM head's) cast to bf16 once per forward");
    TAP_OK(trace_get_meta(t, "framework") && strcmp(trace_get_meta(t, "framework"), "hf") == 0,
           "meta framework hf");
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC) continue;
        if (strcmp(r->u.alloc.name, "logits_fp32") == 0) fp32 = r->u.alloc.bytes;
        if (strcmp(r->u.alloc.name, "log_probs") == 0) lp = r->u.alloc.bytes;
    }
    TAP_OK(fp32 == T * V * 4 && lp == T * V * 4,
           "the loss upcasts the logits to fp32 and saves an fp32 log-softmax");
    TAP_OK(gen_trace(&c, mach, &t2, &err) == MS_OK, "second hf trace");
    int same = t2 && trace_count(t) == trace_count(t2);
    FILE *a = tmpfile(), *b = tmpfile();
    if (same && a && b) {
        trace_write_fp(t, a);
        trace_write_fp(t2, b);
        rewind(a);
        rewind(b);
        int ca, cb;
        do {
            ca = fgetc(a);
            cb = fgetc(b);
        } while (ca == cb && ca != EOF);
        same = ca == cb;
    }
    if (a) fclose(a);
    if (b) fclose(b);
    TAP_OK(same, "hf generation is deterministic");
    trace_free(t);
    trace_free(t2);
    c = hf_config("bf16");
    ms_error_clear(&err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf bf16 trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 8 * P && casts == 0,
           "bf16: parameters, gradients and AdamW states in bf16, 8 B/param, no casts");
    trace_free(t);
    c = hf_config("amp");
    snprintf(c.model.family, sizeof c.model.family, "falcon");
    TAP_OK(gen_validate(&c, &err) == MS_ERR_UNSUPPORTED && strstr(err.msg, "falcon"),
           "an unmodelled family is refused by name: %s", err.msg);
    gen_config g;
    gen_config_default(&g);
    model_lookup("gpt2", &g.model, &err);
    TAP_OK(gen_config_set(&g, "precision", "bf16", &err) == MS_OK &&
           gen_validate(&g, &err) == MS_ERR_INVALID && strstr(err.msg, "precision"),
           "precision needs framework hf");
    TAP_OK(gen_config_set(&g, "precision", "fp16", &err) == MS_ERR_INVALID,
           "precision fp16 rejected by name");
}

/* ---- framework hf: mixture-of-experts layers ---- */

static gen_config hf_moe_config(const char *prec, uint64_t k)
{
    gen_config c = hf_config(prec);
    model_t *m = &c.model;
    snprintf(m->name, sizeof m->name, "tiny-mixtral");
    snprintf(m->family, sizeof m->family, "mixtral");
    m->n_experts = 4;
    m->experts_per_tok = k;
    m->expert_ffn = m->ffn_hidden;
    m->moe_every = 1;
    m->norm_topk = 1;
    return c;
}

/* Bytes of the iteration-0 allocation named name (0 when none), and the FLOPs of the first
 * op named op. */
static uint64_t hf_named(const trace_t *t, const char *name, const char *op, double *fl)
{
    uint64_t b = 0;
    int iter = -1, got = 0;
    if (fl) *fl = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
        if (iter != 0) continue;
        if (r->type == TR_ALLOC && !b && strcmp(r->u.alloc.name, name) == 0) b = r->u.alloc.bytes;
        if (r->type == TR_OP && op && fl && !got && strcmp(r->u.op.name, op) == 0) {
            *fl = r->u.op.flops;
            got = 1;
        }
    }
    return b;
}

/* The duration of the first iteration-0 op named op (-2 when none). */
static double hf_op_dur(const trace_t *t, const char *op)
{
    int iter = -1;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
        if (iter == 0 && r->type == TR_OP && strcmp(r->u.op.name, op) == 0) return r->u.op.dur_us;
    }
    return -2.0;
}

/* The fp32 GEMMs (the MoE experts under amp) take the profile's own fp32 ramp when it has
 * one (gpu.fp32_gemm_eff, gpu.fp32_gemm_half_flops), else gpu.gemm_eff and the bf16 ramp. */
static void test_hf_fp32_gemm_ramp(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_moe_config("amp", 2);
    machine_t m = *mach;
    trace_t *t = NULL;
    double fl = 0, d[3];
    const double eff[3] = { 0, 0.02, 0.01 };   /* low: compute-bound at this size */
    for (int i = 0; i < 3; i++) {
        m.gpu_fp32_gemm_eff = eff[i];
        m.gpu_fp32_gemm_half_flops = 0;
        d[i] = -1;
        if (gen_trace(&c, &m, &t, &err) != MS_OK) break;
        hf_named(t, "x", "L0.experts.gate_up.e0", &fl);
        d[i] = hf_op_dur(t, "L0.experts.gate_up.e0") - m.gpu_kernel_launch_us;
        trace_free(t);
        t = NULL;
    }
    double want = fl / (m.gpu_peak_fp32_flops * 0.02) * 1e6;
    TAP_OK(fl > 0 && fabs(d[1] - want) < 1e-9 * want && fabs(d[2] - 2 * want) < 1e-9 * want,
           "fp32 GEMM: an expert's sgemm at gpu.fp32_gemm_eff of the fp32 peak (%.3f us, want "
           "%.3f; at half the efficiency %.3f)", d[1], want, d[2]);
    TAP_OK(d[0] > 0 && fabs(d[0] - d[1]) > 1e-6 * want,
           "fp32 GEMM: without gpu.fp32_gemm_eff the bf16 GEMM ramp applies (%.3f us)", d[0]);
    m.gpu_fp32_gemm_eff = 0.02;
    m.gpu_fp32_gemm_half_flops = fl;    /* half the efficiency at this GEMM's FLOPs */
    double dh = -1;
    if (gen_trace(&c, &m, &t, &err) == MS_OK) {
        dh = hf_op_dur(t, "L0.experts.gate_up.e0") - m.gpu_kernel_launch_us;
        trace_free(t);
    }
    TAP_OK(fabs(dh - 2 * want) < 1e-9 * want,
           "fp32 GEMM: at gpu.fp32_gemm_half_flops FLOPs half that efficiency (%.3f us)", dh);
}

static void test_hf_moe(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_moe_config("amp", 2);
    const model_t *m = &c.model;
    uint64_t h = m->hidden, V = m->vocab, T = c.seq * c.micro_batch, kv = 2 * 16;
    uint64_t E = m->n_experts, fe = m->expert_ffn, k = m->experts_per_tok, S = T * k;
    uint64_t attn = h * h + 2 * kv * h + h * h, router = E * h, experts = 3 * E * fe * h;
    uint64_t P = V * h + m->layers * (attn + router + experts + 2 * h) + h + V * h;
    unsigned states = 1u << TC_PARAM | 1u << TC_GRAD | 1u << TC_OPTSTATE;
    trace_t *t = NULL;
    TAP_OK(gen_validate(&c, &err) == MS_OK, "hf: family mixtral is modelled");
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf MoE amp trace");
    if (!t) return;
    char pb[32];
    snprintf(pb, sizeof pb, "%llu", (unsigned long long)P);
    TAP_OK(trace_get_meta(t, "hf_params") && strcmp(trace_get_meta(t, "hf_params"), pb) == 0,
           "hf MoE: the router and the fused 3-D experts counted (%s params)", pb);
    uint64_t casts;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 16 * P,
           "MoE amp: experts' fp32 parameters, gradients and AdamW states, 16 B/param");
    TAP_OK(casts == 2 * (m->layers * (attn + router) + V * h),
           "MoE amp: the router's weight is cast to bf16, the experts' 3-D weights are not");
    TAP_OK(hf_named(t, "L0.router_probs", NULL, NULL) == T * E * 4 &&
           hf_named(t, "L0.router_logits_fp32", NULL, NULL) == T * E * 4,
           "MoE amp: the router's softmax runs on an fp32 copy of the bf16 logits");
    TAP_OK(hf_named(t, "L0.experts_in", NULL, NULL) == S * h * 4 &&
           hf_named(t, "L0.experts.gate_up", NULL, NULL) == S * 2 * fe * 4,
           "MoE amp: the gathered tokens and the experts' activations are fp32 (T*k rows)");
    double f0, fb;
    hf_named(t, "x", "L0.experts.gate_up.e0", &fb);
    TAP_OK(fb == 2.0 * (double)(S / E) * 2.0 * (double)fe * (double)h,
           "MoE amp: one fp32 GEMM per expert on S/E tokens (balanced routing)");
    trace_free(t);
    c = hf_moe_config("amp", 1);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf MoE amp top-1 trace");
    if (!t) return;
    TAP_OK(hf_named(t, "L0.experts_in", NULL, NULL) == T * h * 4 &&
           hf_named(t, "L0.perm", NULL, NULL) == T * 8 &&
           hf_named(t, "L0.experts_prod", NULL, NULL) == T * fe * 4,
           "MoE: the dispatch buffers scale with top_k (k = 1: T rows)");
    trace_free(t);
    c = hf_moe_config("amp", 2);
    TAP_OK(gen_config_set(&c, "moe_imbalance", "2", &err) == MS_OK &&
           gen_trace(&c, mach, &t, &err) == MS_OK, "hf MoE amp trace, moe_imbalance 2");
    if (!t) return;
    hf_named(t, "x", "L0.experts.gate_up.e0", &f0);
    double f1;
    hf_named(t, "x", "L0.experts.gate_up.e1", &f1);
    TAP_OK(f0 == 2.0 * fb && f1 < fb,
           "moe_imbalance 2: the busiest expert's GEMMs on twice the mean tokens, the others "
           "on fewer");
    trace_free(t);
    TAP_OK(gen_config_set(&c, "moe_imbalance", "0.5", &err) == MS_ERR_INVALID &&
           strstr(err.msg, "moe_imbalance"), "moe_imbalance below 1 rejected by name");
    c = hf_moe_config("bf16", 2);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf MoE bf16 trace");
    if (!t) return;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 8 * P && casts == 0,
           "MoE bf16: parameters, gradients and AdamW states in bf16, 8 B/param, no casts");
    TAP_OK(hf_named(t, "L0.router_probs", NULL, NULL) == T * E * 4 &&
           hf_named(t, "L0.experts_in", NULL, NULL) == S * h * 2 &&
           hf_named(t, "L0.weighted", NULL, NULL) == S * h * 4,
           "MoE bf16: fp32 softmax; bf16 experts; Mixtral's fp32 routing weights promote the "
           "weighted outputs to fp32");
    hf_named(t, "x", "L0.experts.gate_up", &f0);
    TAP_OK(f0 == 2.0 * (double)S * 2.0 * (double)fe * (double)h,
           "MoE bf16: one grouped GEMM over all experts' tokens");
    trace_free(t);
    c = hf_moe_config("amp", 2);
    snprintf(c.model.family, sizeof c.model.family, "qwen2_moe");
    c.model.shared_ffn = 96;
    c.model.shared_gate = 1;
    c.model.norm_topk = 0;
    c.model.qkv_bias = 1;
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf qwen2_moe amp trace");
    if (!t) return;
    TAP_OK(hf_named(t, "L0.shared_sigmoid", NULL, NULL) == T * 2 &&
           hf_named(t, "L0.shared.down_proj_out", NULL, NULL) == T * h * 2 &&
           hf_named(t, "L0.topk_sum", NULL, NULL) == 0,
           "qwen2_moe: the shared expert (bf16 under amp) and its sigmoid gate; no "
           "renormalization without norm_topk_prob");
    trace_free(t);
}

/* A two-layer GPT-2 (hf config.json's gpt2 shape: LayerNorm, gelu_new, biases, learned
 * positions, tied head, dropout 0.1) in the hf profile. */
static gen_config hf_gpt2_config(const char *prec, double pdrop)
{
    gen_config c;
    ms_error err;
    gen_config_default(&c);
    model_t *m = &c.model;
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "tiny-gpt2");
    snprintf(m->family, sizeof m->family, "gpt2");
    m->layers = 2;
    m->hidden = 64;
    m->heads = 4;
    m->kv_heads = 4;
    m->ffn_hidden = 256;
    m->vocab = 1001;
    m->default_seq = 32;
    m->pos_rows = 128;
    m->max_seq = 128;
    m->norm = MODEL_NORM_LAYER;
    m->mlp = MODEL_MLP_GELU;
    m->act = MODEL_ACT_GELU_TANH;
    m->pos = MODEL_POS_LEARNED;
    m->has_bias = 1;
    m->tied_embeddings = 1;
    m->resid_dropout = pdrop;
    m->attn_dropout = pdrop;
    c.seq = 32;
    c.micro_batch = 2;
    gen_config_set(&c, "framework", "hf", &err);
    gen_config_set(&c, "precision", prec, &err);
    return c;
}

/* Live bytes of class cls when iteration 0 reaches its optimizer phase. */
static uint64_t hf_live_at_opt(const trace_t *t, trace_class cls)
{
    size_t n = trace_count(t);
    uint64_t *bytes = calloc(n + 2, sizeof *bytes), live = 0;
    for (size_t i = 0; bytes && i < n; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE && r->u.mark.value == TP_OPT) break;
        if (r->type == TR_ALLOC && r->u.alloc.cls == cls && r->u.alloc.id <= n) {
            bytes[r->u.alloc.id] = r->u.alloc.bytes;
            live += r->u.alloc.bytes;
        } else if (r->type == TR_FREE && r->u.free_id <= n) {
            live -= bytes[r->u.free_id];
            bytes[r->u.free_id] = 0;
        }
    }
    free(bytes);
    return live;
}

static void test_hf_gpt2(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_gpt2_config("amp", 0.1);
    const model_t *m = &c.model;
    uint64_t h = m->hidden, f = m->ffn_hidden, V = m->vocab, L = m->layers;
    uint64_t T = c.seq * c.micro_batch, lin = 4 * h * h + 2 * h * f;
    uint64_t P = V * h + m->pos_rows * h + L * (lin + 9 * h + f) + 2 * h;
    unsigned states = 1u << TC_PARAM | 1u << TC_GRAD | 1u << TC_OPTSTATE;
    TAP_OK(gen_validate(&c, &err) == MS_OK, "hf gpt2 validates: %s", err.msg);
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gpt2 amp trace: %s", err.msg);
    if (!t) return;
    TAP_OK(trace_meta_u64(t, "hf_params", 0) == P, "gpt2 parameters as GPT2LMHeadModel "
           "registers them (wte, wpe, 12 per block, ln_f; tied head once): %llu",
           (unsigned long long)trace_meta_u64(t, "hf_params", 0));
    uint64_t casts, masks, bcasts, tanh32 = 0;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 16 * P + 4 * V * h,
           "amp: 16 B/param, plus wte's dense gradient while it is added into the tied head's");
    TAP_OK(casts == 2 * (L * lin + V * h),
           "amp: every Conv1D weight and the tied head cast to bf16 once per forward");
    hf_peak_classes(t, 0, ".bcast", &bcasts);
    TAP_OK(bcasts == 2 * L * (3 * h + h + f + h), "amp: the four biases of a block cast too");
    hf_peak_classes(t, 0, "_mask", &masks);
    TAP_OK(masks == (2 * L + 1) * T * h,
           "dropout saves a 1-byte mask per element: embedding + two per block");
    TAP_OK(hf_live_at_opt(t, TC_GRAD) == 4 * P,
           "one fp32 .grad per parameter at the step: the tied head's and wte's are one");
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && strcmp(r->u.alloc.name, "L0.gelu_tanh") == 0)
            tanh32 = r->u.alloc.bytes;
    }
    TAP_OK(tanh32 == T * f * 4, "amp: gelu_new's tanh runs in fp32 (promotion after pow)");
    const char *ac = trace_get_meta(t, "autocast_cache");
    TAP_OK(ac && strcmp(ac, "1") == 0, "amp gpt2 traces say autocast's cache holds the casts");
    trace_free(t);
    c = hf_gpt2_config("bf16", 0.1);
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gpt2 bf16 trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 8 * P + 4 * V * h && casts == 0,
           "bf16: 8 B/param, no casts; wte's dense gradient and its sum with the tied head's "
           "(a new tensor, as the recorded bf16 traces show) while they are added");
    TAP_OK(hf_live_at_opt(t, TC_GRAD) == 2 * P, "bf16: one bf16 .grad per parameter");
    TAP_OK(!trace_get_meta(t, "autocast_cache"), "bf16: no autocast cache");
    trace_free(t);
    c = hf_gpt2_config("amp", 0);
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gpt2 without dropout: %s", err.msg);
    if (!t) return;
    hf_peak_classes(t, 0, "_mask", &masks);
    TAP_OK(masks == 0, "dropout 0: no masks");
    trace_free(t);
    c = hf_gpt2_config("amp", 0.1);
    c.model.act = MODEL_ACT_GELU;
    TAP_OK(gen_validate(&c, &err) == MS_ERR_UNSUPPORTED && strstr(err.msg, "gelu_new"),
           "gpt2 with another activation refused: %s", err.msg);
}

/* ---- framework hf: Qwen3 (the LLaMA program with per-head q/k RMSNorms) ---- */

static gen_config hf_qwen3_config(const char *prec)
{
    gen_config c = hf_config(prec);
    model_t *m = &c.model;
    snprintf(m->name, sizeof m->name, "tiny-qwen3");
    snprintf(m->family, sizeof m->family, "qwen3");
    m->head_dim = 24; /* the query width 4 x 24 = 96 is not hidden 64 */
    return c;
}

/* An hf trace is well formed: every op's tensors live, no double frees, and at the end only
 * the model states and the input ids and cuBLAS workspaces (at most 4 others) are live. */
/* Balanced and live; at the end besides the model states at most the input ids, the
 * cuBLAS(Lt) workspaces and the last step's loss. */
static int hf_walk_ok(const trace_t *t)
{
    walk w = validate(t);
    if (w.errors || w.live_left_bad > 5)
        printf("# %d errors (first: %s), %llu others live at the end\n", w.errors,
               w.first_error, (unsigned long long)w.live_left_bad);
    return w.errors == 0 && w.live_left_bad <= 5;
}

/* Index of the first alloc (free: 1) record of the tensor named name, or of the tensor id
 * (name NULL); trace_count when none. */
static size_t hf_rec_at(const trace_t *t, const char *name, uint64_t id, int free, uint64_t *got)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (!free && r->type == TR_ALLOC && (name ? !strcmp(r->u.alloc.name, name)
                                                  : r->u.alloc.id == id)) {
            if (got) *got = r->u.alloc.id;
            return i;
        }
        if (free && r->type == TR_FREE && r->u.free_id == id) return i;
    }
    return trace_count(t);
}

/* Qwen3-MoE (Qwen3MoeSparseMoeBlock): Qwen3's attention with q/k norms in front of the
 * experts, no shared expert, the routing weights cast to the router logits' dtype. */
static void test_hf_qwen3_moe(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_moe_config("amp", 2);
    model_t *m = &c.model;
    snprintf(m->family, sizeof m->family, "qwen3_moe");
    m->norm_topk = 0;
    uint64_t h = m->hidden, V = m->vocab, T = c.seq * c.micro_batch, d = h / m->heads;
    uint64_t E = m->n_experts, fe = m->expert_ffn, k = m->experts_per_tok, S = T * k;
    uint64_t q = m->heads * d, kv = m->kv_heads * d;
    uint64_t layer = 2 * q * h + 2 * kv * h + 2 * d + E * h + 3 * E * fe * h + 2 * h;
    uint64_t P = V * h + m->layers * layer + h + V * h;
    trace_t *t = NULL;
    TAP_OK(gen_validate(&c, &err) == MS_OK && model_params(m) == P,
           "hf: family qwen3_moe is modelled, %llu parameters", (unsigned long long)P);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf qwen3_moe amp trace");
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "qwen3_moe amp trace balanced and live");
    TAP_OK(trace_meta_u64(t, "hf_params", 0) == P, "qwen3_moe: q/k norms, router and fused "
           "experts counted (%llu)", (unsigned long long)trace_meta_u64(t, "hf_params", 0));
    TAP_OK(hf_rec_at(t, "L0.experts.gate_up_proj", 0, 0, NULL) <
           hf_rec_at(t, "L0.experts.down_proj", 0, 0, NULL) &&
           hf_rec_at(t, "L0.experts.down_proj", 0, 0, NULL) <
           hf_rec_at(t, "L0.router.w", 0, 0, NULL) &&
           hf_rec_at(t, "L0.router.w", 0, 0, NULL) < hf_rec_at(t, "L1.q_proj.w", 0, 0, NULL),
           "qwen3_moe: the experts' parameters registered before the router's");
    TAP_OK(hf_named(t, "L0.q_norm.to_fp32", NULL, NULL) == T * q * 4 &&
           hf_named(t, "L1.k_norm.rsqrt", NULL, NULL) == T * m->kv_heads * 4,
           "qwen3_moe: Qwen3's per-head q/k RMSNorms before the rotary");
    TAP_OK(hf_named(t, "L0.routing_weights", NULL, NULL) == T * k * 2 &&
           hf_named(t, "L0.weighted", NULL, NULL) == S * h * 4 &&
           hf_named(t, "L0.topk_sum", NULL, NULL) == 0 &&
           hf_named(t, "L0.shared_sigmoid", NULL, NULL) == 0 &&
           hf_named(t, "L0.shared.gate_proj_out", NULL, NULL) == 0,
           "qwen3_moe amp: top-k weights cast to the bf16 logits' dtype; fp32 experts; no "
           "renormalization without norm_topk_prob, no shared expert");
    trace_free(t);
    c = hf_moe_config("bf16", 2);
    snprintf(c.model.family, sizeof c.model.family, "qwen3_moe");
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf qwen3_moe bf16 trace, norm_topk_prob");
    if (!t) return;
    TAP_OK(hf_walk_ok(t) && hf_named(t, "L0.topk_sum", NULL, NULL) == T * 4 &&
           hf_named(t, "L0.routing_weights", NULL, NULL) == T * k * 2 &&
           hf_named(t, "L0.weighted", NULL, NULL) == S * h * 2 &&
           hf_named(t, "L0.experts_out_cast", NULL, NULL) == 0,
           "qwen3_moe bf16: renormalized, bf16 routing weights keep the weighted outputs bf16 "
           "(Mixtral's fp32 weights promote them)");
    trace_free(t);
    c = hf_moe_config("fp32", 2);
    snprintf(c.model.family, sizeof c.model.family, "qwen3_moe");
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK && hf_walk_ok(t) &&
           hf_named(t, "L0.routing_weights", NULL, NULL) == 0,
           "qwen3_moe fp32: the cast of the routing weights is a no-op");
    trace_free(t);
}

/* Gemma (GemmaForCausalLM): LLaMA's layers with GemmaRMSNorm (x * (1 + w) in fp32, then
 * .type_as(x)), GeGLU, the embedding scaled by sqrt(hidden), a tied head. */
static void test_hf_gemma(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_config("amp");
    model_t *m = &c.model;
    snprintf(m->family, sizeof m->family, "gemma");
    m->head_dim = 32;
    m->tied_embeddings = 1;
    m->act = MODEL_ACT_GELU_TANH;
    uint64_t h = m->hidden, f = m->ffn_hidden, V = m->vocab, L = m->layers;
    uint64_t T = c.seq * c.micro_batch, q = m->heads * 32, kv = m->kv_heads * 32;
    uint64_t P = V * h + L * (2 * q * h + 2 * kv * h + 3 * f * h + 2 * h) + h;
    trace_t *t = NULL;
    TAP_OK(gen_validate(&c, &err) == MS_OK && model_params(m) == P,
           "hf: family gemma is modelled, %llu parameters (tied)", (unsigned long long)P);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gemma amp trace");
    if (!t) return;
    TAP_OK(hf_walk_ok(t) && trace_meta_u64(t, "hf_params", 0) == P,
           "gemma amp trace balanced and live, its parameters counted");
    TAP_OK(hf_named(t, "L0.ln1.one_plus_w", NULL, NULL) == h * 4 &&
           hf_named(t, "norm.one_plus_w", NULL, NULL) == h * 4 &&
           hf_named(t, "L0.ln1.weight_fp32", NULL, NULL) == 0 &&
           hf_named(t, "L0.ln1.weight", NULL, NULL) == T * h * 4 &&
           hf_named(t, "L0.ln1.type_as", NULL, NULL) == 0,
           "gemma amp: each norm's 1 + weight [h] fp32 (the fp32 weight needs no copy), the "
           "fp32 product its output");
    uint64_t raw = 0, in0 = 0;
    size_t a_raw = hf_rec_at(t, "inputs_embeds", 0, 0, &raw);
    size_t a_in = hf_rec_at(t, "L0.input", 0, 0, &in0);
    size_t a_fn = hf_rec_at(t, "norm.one_plus_w", 0, 0, NULL);
    size_t f_raw = hf_rec_at(t, NULL, raw, 1, NULL);
    TAP_OK(hf_named(t, "inputs_embeds", NULL, NULL) == T * h * 4 &&
           hf_named(t, "L0.input", NULL, NULL) == T * h * 4 && a_raw < a_in && a_in < a_fn &&
           a_fn < f_raw && f_raw < trace_count(t),
           "gemma: the embedding times sqrt(hidden) is layer 0's input; inputs_embeds lives "
           "until the model's forward returns (after the final norm)");
    TAP_OK(hf_named(t, "d_inputs_embeds", NULL, NULL) == T * h * 4,
           "gemma: the scaling's backward makes the embedding's gradient input");
    trace_free(t);
    c = hf_config("bf16");
    m = &c.model;
    snprintf(m->family, sizeof m->family, "gemma");
    m->head_dim = 32;
    m->tied_embeddings = 1;
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gemma bf16 trace");
    if (!t) return;
    TAP_OK(hf_walk_ok(t) && hf_named(t, "L0.ln1.weight_fp32", NULL, NULL) == h * 4 &&
           hf_named(t, "L0.ln1.weight", NULL, NULL) == T * h * 4 &&
           hf_named(t, "L0.ln1.type_as", NULL, NULL) == T * h * 2 &&
           hf_named(t, "L0.ln1.to_in", NULL, NULL) == 0 &&
           hf_named(t, "L0.ln1.bwd_type_as", NULL, NULL) == T * h * 4,
           "gemma bf16: weight.float() copied, the product in fp32 then cast to bf16 (no "
           "bf16 copy of the normalized tensor as LlamaRMSNorm makes); its backward up-casts "
           "the gradient");
    trace_free(t);
}

static void test_hf_qwen3(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_qwen3_config("amp");
    const model_t *m = &c.model;
    uint64_t h = m->hidden, f = m->ffn_hidden, V = m->vocab, L = m->layers, d = 24;
    uint64_t T = c.seq * c.micro_batch, q = m->heads * d, kv = m->kv_heads * d;
    uint64_t P = V * h + L * (2 * q * h + 2 * kv * h + 3 * f * h + 2 * d + 2 * h) + h + V * h;
    unsigned states = 1u << TC_PARAM | 1u << TC_GRAD | 1u << TC_OPTSTATE;
    TAP_OK(gen_validate(&c, &err) == MS_OK, "hf qwen3 validates: %s", err.msg);
    TAP_OK(model_q_width(m) == q && model_params(m) == P, "qwen3 config: q width %llu, %llu "
           "parameters", (unsigned long long)model_q_width(m),
           (unsigned long long)model_params(m));
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf qwen3 amp trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "qwen3 amp trace balanced and live");
    TAP_OK(trace_meta_u64(t, "hf_params", 0) == P, "qwen3 parameters = model_params (q_norm, "
           "k_norm of head_dim per layer): %llu",
           (unsigned long long)trace_meta_u64(t, "hf_params", 0));
    uint64_t casts, n = 0, qn = 0, kn = 0;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 16 * P, "qwen3 amp: 16 B/param");
    TAP_OK(casts == 2 * (L * (2 * q * h + 2 * kv * h + 3 * f * h) + V * h),
           "qwen3 amp: the linears' weights cast, not the q/k norms'");
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC) continue;
        if (strcmp(r->u.alloc.name, "L0.q_proj.b") == 0) n++;
        if (strcmp(r->u.alloc.name, "L0.q_norm.w") == 0) qn = r->u.alloc.bytes;
        if (strcmp(r->u.alloc.name, "L0.k_norm.w") == 0) kn = r->u.alloc.bytes;
    }
    TAP_OK(n == 0 && qn == d * 4 && kn == d * 4,
           "qwen3: q_norm and k_norm weights of head_dim, no q/k/v biases");
    TAP_OK(hf_named(t, "L0.q_norm.to_fp32", NULL, NULL) == T * q * 4 &&
           hf_named(t, "L0.q_norm.rsqrt", NULL, NULL) == T * m->heads * 4 &&
           hf_named(t, "L0.q_norm.to_in", NULL, NULL) == T * q * 2 &&
           hf_named(t, "L0.k_norm.to_fp32", NULL, NULL) == T * kv * 4 &&
           hf_named(t, "L0.k_norm.rsqrt", NULL, NULL) == T * m->kv_heads * 4 &&
           hf_named(t, "L0.k_norm.to_in", NULL, NULL) == T * kv * 2,
           "qwen3 amp: q/k norms save the fp32 copy, a per-head rsqrt and the bf16 normalized "
           "tensor of [b, s, heads, d] and [b, s, kv_heads, d]");
    TAP_OK(hf_named(t, "L0.q_norm.weight", NULL, NULL) == T * q * 4 &&
           hf_named(t, "L0.q_rope", NULL, NULL) == T * q * 4 &&
           hf_named(t, "L0.q", NULL, NULL) == T * q * 2,
           "qwen3 amp: the fp32 weight promotes q_norm's output; rotary in fp32, SDPA's bf16 "
           "cast");
    trace_free(t);
    c = hf_qwen3_config("bf16");
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf qwen3 bf16 trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "qwen3 bf16 trace balanced and live");
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 8 * P && casts == 0,
           "qwen3 bf16: 8 B/param, no casts");
    TAP_OK(hf_named(t, "L0.q_norm.to_fp32", NULL, NULL) == T * q * 4 &&
           hf_named(t, "L0.q_norm.weight", NULL, NULL) == T * q * 2 &&
           hf_named(t, "L0.q_rope", NULL, NULL) == T * q * 2,
           "qwen3 bf16: q_norm's fp32 copy, bf16 output and rotary");
    trace_free(t);
    c = hf_qwen3_config("fp32");
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf qwen3 fp32 trace: %s", err.msg);
    if (t) {
        TAP_OK(hf_walk_ok(t) && hf_named(t, "L0.q_norm.to_fp32", NULL, NULL) == 0,
               "qwen3 fp32: balanced; the norm saves the projection's output itself");
    }
    trace_free(t);
}

/* ---- framework hf: OPT and GPT-NeoX (gen_hf_ln.c) ---- */

static gen_config hf_ln_config(const char *family, const char *prec)
{
    gen_config c;
    ms_error err;
    gen_config_default(&c);
    model_t *m = &c.model;
    memset(m, 0, sizeof *m);
    int opt = strcmp(family, "opt") == 0;
    snprintf(m->name, sizeof m->name, "tiny-%s", family);
    snprintf(m->family, sizeof m->family, "%s", family);
    m->layers = 2;
    m->hidden = 64;
    m->heads = 4;
    m->kv_heads = 4;
    m->ffn_hidden = 256;
    m->vocab = 1000;
    m->default_seq = 32;
    m->norm = MODEL_NORM_LAYER;
    m->has_bias = 1;
    if (opt) {
        m->pos_rows = 128 + 2;
        m->max_seq = 128;
        m->pos = MODEL_POS_LEARNED;
        m->mlp = MODEL_MLP_RELU;
        m->act = MODEL_ACT_RELU;
        m->tied_embeddings = 1;
        m->resid_dropout = 0.1;
    } else {
        m->pos = MODEL_POS_ROTARY;
        m->mlp = MODEL_MLP_GELU;
        m->act = MODEL_ACT_GELU;
        m->parallel_residual = 1;
        m->rotary_pct = 0.25;
    }
    c.seq = 32;
    c.micro_batch = 2;
    gen_config_set(&c, "framework", "hf", &err);
    gen_config_set(&c, "precision", prec, &err);
    return c;
}

/* The first allocation named name (any iteration, setup included): its bytes, class, id. */
static uint64_t hf_alloc_named(const trace_t *t, const char *name, trace_class *cls,
                               uint64_t *id)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && strcmp(r->u.alloc.name, name) == 0) {
            if (cls) *cls = r->u.alloc.cls;
            if (id) *id = r->u.alloc.id;
            return r->u.alloc.bytes;
        }
    }
    return 0;
}

/* Whether the first op named name reads tensor id. */
static int hf_op_reads(const trace_t *t, const char *name, uint64_t id)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_OP || strcmp(r->u.op.name, name) != 0) continue;
        for (uint32_t j = 0; j < r->u.op.n_in; j++)
            if (r->u.op.in[j] == id) return 1;
        return 0;
    }
    return 0;
}

/* The first op named name: its FLOPs (-1 when there is none). */
static double hf_op_flops(const trace_t *t, const char *name)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_OP && strcmp(r->u.op.name, name) == 0) return r->u.op.flops;
    }
    return -1.0;
}

/* The record index of the first allocation named name and of its free (SIZE_MAX: none). */
static void hf_alloc_span(const trace_t *t, const char *name, size_t *at, size_t *freed)
{
    uint64_t id = 0;
    *at = *freed = SIZE_MAX;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (!id && r->type == TR_ALLOC && strcmp(r->u.alloc.name, name) == 0) {
            id = r->u.alloc.id;
            *at = i;
        } else if (id && r->type == TR_FREE && r->u.free_id == id) {
            *freed = i;
            return;
        }
    }
}

static gen_config hf_bert_config(const char *prec, uint64_t vocab, uint64_t b)
{
    gen_config c = hf_ln_config("opt", prec);
    model_t *m = &c.model;
    snprintf(m->name, sizeof m->name, "tiny-bert");
    snprintf(m->family, sizeof m->family, "bert");
    m->pos_rows = 128;
    m->type_vocab = 2;
    m->mlp = MODEL_MLP_GELU;
    m->act = MODEL_ACT_GELU;
    m->is_encoder = 1;
    m->attn_dropout = 0.1;
    m->vocab = vocab;
    c.seq = 128;
    c.micro_batch = b;
    return c;
}

/* What the recorded BertForMaskedLM traces (an-bert-*) showed, on a tiny BERT of 4096
 * tokens: the masked-LM loss without an upcast, the setup's tying, nn.Linear's cast order,
 * the dropout outputs' lifetimes, embedding_dense_backward's paths and the column
 * reduction of a bias over an odd-pair vocabulary. */
static void test_hf_bert_recorded(const machine_t *mach)
{
    ms_error err;
    uint64_t V = 1002, b = 32, s = 128, T = b * s, h = 64;
    gen_config c = hf_bert_config("amp", V, b);
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf bert amp trace, 4096 tokens: %s",
           err.msg);
    if (!t) return;
    walk w = validate(t);
    TAP_OK(w.errors == 0 && w.live_left_bad == 7, "bert amp trace of 4096 tokens balanced and "
           "live (%d errors, %llu others)", w.errors, (unsigned long long)w.live_left_bad);
    TAP_OK(hf_named(t, "log_probs", NULL, NULL) == T * V * 2 &&
           hf_named(t, "log_probs_fp32", NULL, NULL) == T * V * 4 &&
           hf_named(t, "logits_fp32", NULL, NULL) == 0,
           "bert amp: CrossEntropyLoss on the bf16 logits: bf16 log_softmax, an fp32 copy for "
           "nll_loss (autocast's fp32 list), no logits.float()");
    size_t dw, dwf, ids, idf, pad, padf;
    hf_alloc_span(t, "decoder.w", &dw, &dwf);
    hf_alloc_span(t, "input_ids", &ids, &idf);
    hf_alloc_span(t, "decoder.bias.pad", &pad, &padf);
    TAP_OK(dw < dwf && dwf < pad && padf < ids && hf_alloc_named(t, "decoder.w", NULL, NULL) ==
           V * h * 4, "bert setup: the decoder's own weight made, freed when tied, the bias "
           "padded into a new tensor, before the input ids");
    size_t bc, bcf, wc, wcf, xc, xcf;
    hf_alloc_span(t, "L0.query.bcast", &bc, &bcf);
    hf_alloc_span(t, "L0.query.wcast", &wc, &wcf);
    hf_alloc_span(t, "L0.query.xcast", &xc, &xcf);
    TAP_OK(bc < wc && wc < xc, "bert amp: nn.Linear casts its bias, weight, input in that "
           "order");
    size_t d1, d1f, n1, n1f;
    hf_alloc_span(t, "L0.attn_drop_out", &d1, &d1f);
    hf_alloc_span(t, "L0.ln1_out", &n1, &n1f);
    TAP_OK(d1 < n1 && n1 < d1f, "bert: the attention output's dropout lives until its "
           "LayerNorm has run (a local of BertSelfOutput)");
    TAP_OK(hf_named(t, "embed_bwd.per_segment", NULL, NULL) == (T / 10 + V) * h * 4 &&
           hf_named(t, "embed_bwd.partial_to_segment", NULL, NULL) == (T / 10 + 2) * 8 &&
           hf_named(t, "embed_bwd.sort_temp", NULL, NULL) == 16384 + 1024 + 2 * T * 8 + 256 +
           255, "bert: the word table's backward sorts its 4096 ids and sums fp32 partial "
           "segments (4096 / 10 + 1002 of them); the token types' (2 rows) take the fused "
           "atomic path");
    /* M = 4096 rows, N = 1002 = 2 (mod 4): vec 2, blocks of 32 x 8 threads, 512 values per
     * thread, 16 block columns, 132 SMs x 8 blocks: max(min(66, 32), 2) = 32 blocks per
     * column; 4 B x 1002 x 32 x 32 x 2 and 4 B x 16 */
    uint64_t rws = 0, rsem = 0;
    for (size_t i = 0; i < trace_count(t) && !rsem; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "reduce_ws") && !rws)
            rws = r->u.alloc.bytes;
        else if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "reduce_sem") && rws)
            rsem = r->u.alloc.bytes;
    }
    TAP_OK(rws == 8208384 && rsem == 64, "the decoder bias's column reduction over 1002 "
           "columns: %llu B buffer, %llu B semaphores", (unsigned long long)rws,
           (unsigned long long)rsem);
    trace_free(t);
    c = hf_bert_config("bf16", V, b);
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf bert bf16 trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_named(t, "log_probs", NULL, NULL) == T * V * 2 &&
           hf_named(t, "log_probs_fp32", NULL, NULL) == 0 &&
           hf_named(t, "embed_bwd.acc", NULL, NULL) == 2 * h * 4,
           "bert bf16: bf16 log_softmax straight into nll_loss; the token types' atomic "
           "adds go through an fp32 accumulator");
    trace_free(t);
}

/* A tiny BERT (BertForMaskedLM under --framework hf) and the same shapes as a causal OPT:
 * bidirectional SDPA does twice the causal FLOPs forward and backward, and takes twice the
 * time where compute bounds it; the MLM head's parameters, dropout masks and the balance. */
static void test_hf_bert(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_ln_config("opt", "amp");
    model_t *m = &c.model;
    snprintf(m->name, sizeof m->name, "tiny-bert");
    snprintf(m->family, sizeof m->family, "bert");
    m->pos_rows = 128;
    m->type_vocab = 2;
    m->mlp = MODEL_MLP_GELU;
    m->act = MODEL_ACT_GELU;
    m->is_encoder = 1;
    m->attn_dropout = 0.1;
    uint64_t h = m->hidden, f = m->ffn_hidden, V = m->vocab, L = m->layers;
    uint64_t b = c.micro_batch, s = c.seq;
    uint64_t P = (V + 128 + 2) * h + 2 * h + L * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h)
               + h * h + h + 2 * h + V;
    TAP_OK(gen_validate(&c, &err) == MS_OK, "hf bert validates: %s", err.msg);
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf bert amp trace: %s", err.msg);
    if (!t) return;
    walk w = validate(t);
    TAP_OK(w.errors == 0 && w.live_left_bad == 7, "bert amp trace balanced and live: at the "
           "end the input ids, three cuBLAS workspaces, the two embedding buffers and the last "
           "step's loss beside the model states (%d errors, %llu others)", w.errors,
           (unsigned long long)w.live_left_bad);
    TAP_OK(trace_meta_u64(t, "hf_params", 0) == P, "bert parameters as BertForMaskedLM "
           "(no pooler; transform, LayerNorm, decoder bias; decoder tied): %llu",
           (unsigned long long)trace_meta_u64(t, "hf_params", 0));
    double full = 4.0 * (double)b * (double)s * (double)s * (double)h;
    double fb = hf_op_flops(t, "L0.sdpa"), bb = hf_op_flops(t, "L0.sdpa.bwd");
    TAP_OK(fb == full && bb == 2.5 * full, "bert: bidirectional SDPA counts every score: "
           "forward %.0f = 4 b s^2 h, backward 2.5x (%.0f)", fb, bb);
    TAP_OK(hf_alloc_named(t, "L0.sdpa_seed", NULL, NULL) == 8 &&
           hf_alloc_named(t, "L0.attention.output.dropout_mask", NULL, NULL) == b * s * h &&
           hf_alloc_named(t, "embed.drop_mask", NULL, NULL) == b * s * h,
           "bert: SDPA's dropout saves its RNG state; hidden dropout masks of T x h bytes");
    TAP_OK(hf_alloc_named(t, "position_ids", NULL, NULL) == 128 * 8 &&
           hf_alloc_named(t, "token_type_ids", NULL, NULL) == 128 * 8,
           "bert: the embeddings' position_ids and token_type_ids buffers [1, P] int64");
    trace_free(t);
    gen_config o = hf_ln_config("opt", "amp");
    o.seq = c.seq;
    trace_t *u = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&o, mach, &u, &err) == MS_OK, "hf opt of the same shapes: %s", err.msg);
    if (!u) return;
    TAP_OK(hf_op_flops(u, "L0.sdpa") == full / 2 && hf_op_flops(u, "L0.sdpa.bwd") == 1.25 * full,
           "causal SDPA (opt): half the scores, forward %.0f", hf_op_flops(u, "L0.sdpa"));
    trace_free(u);
    gen_config big = c;
    big.seq = 128;
    big.micro_batch = 64;
    gen_config bigo = o;
    bigo.seq = 128;
    bigo.micro_batch = 64;
    trace_t *tb = NULL, *ub = NULL;
    gen_trace(&big, mach, &tb, &err);
    gen_trace(&bigo, mach, &ub, &err);
    double db = -1, du = -1;
    for (size_t i = 0; tb && i < trace_count(tb); i++)
        if (trace_get(tb, i)->type == TR_OP && !strcmp(trace_get(tb, i)->u.op.name, "L0.sdpa")) {
            db = trace_get(tb, i)->u.op.dur_us;
            break;
        }
    for (size_t i = 0; ub && i < trace_count(ub); i++)
        if (trace_get(ub, i)->type == TR_OP && !strcmp(trace_get(ub, i)->u.op.name, "L0.sdpa")) {
            du = trace_get(ub, i)->u.op.dur_us;
            break;
        }
    TAP_OK(db > du && du > 0, "bert's SDPA takes longer than the causal one of the same shapes "
           "(%.2f vs %.2f us)", db, du);
    trace_free(tb);
    trace_free(ub);
}

/* A tiny Phi-3 under --framework hf: the fused projections' parameters and outputs, the
 * per-layer rotary tables, the balance. */
static void test_hf_phi3(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_qwen3_config("amp");
    model_t *m = &c.model;
    snprintf(m->name, sizeof m->name, "tiny-phi3");
    snprintf(m->family, sizeof m->family, "phi3");
    m->head_dim = 0;
    m->rotary_pct = 0;
    uint64_t h = m->hidden, f = m->ffn_hidden;
    uint64_t d = h / m->heads, q = m->heads * d, kv = m->kv_heads * d;
    uint64_t T = c.seq * c.micro_batch, s = c.seq;
    TAP_OK(gen_validate(&c, &err) == MS_OK, "hf phi3 validates: %s", err.msg);
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf phi3 amp trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "phi3 amp trace balanced and live");
    TAP_OK(trace_meta_u64(t, "hf_params", 0) == model_params(m),
           "phi3 parameters = model_params (fused, same counts): %llu",
           (unsigned long long)trace_meta_u64(t, "hf_params", 0));
    TAP_OK(hf_alloc_named(t, "L0.qkv_proj.w", NULL, NULL) == (q + 2 * kv) * h * 4 &&
           hf_alloc_named(t, "L1.gate_up_proj.w", NULL, NULL) == 2 * f * h * 4 &&
           hf_alloc_named(t, "L0.q_proj.w", NULL, NULL) == 0,
           "phi3: qkv_proj [q + 2kv, h] and gate_up_proj [2f, h] in fp32, no q_proj");
    trace_class cls;
    TAP_OK(hf_alloc_named(t, "L0.qkv_proj_out", &cls, NULL) == T * (q + 2 * kv) * 2 &&
           cls == TC_ACT_SKEL && hf_alloc_named(t, "L0.gate_up_proj_out", &cls, NULL) ==
           T * 2 * f * 2 && cls == TC_ACT_SKEL,
           "phi3: the fused outputs in bf16, saved (v and the chunks are their views)");
    TAP_OK(hf_alloc_named(t, "L0.q.rope_pass_cat", NULL, NULL) == T * q * 4 &&
           hf_alloc_named(t, "L0.qkv_proj.xcast", NULL, NULL) == T * h * 2,
           "phi3 amp: the rotary's cat allocates q in fp32; one input cast per fused linear");
    uint64_t tables = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "rope_cos")) tables++;
    }
    TAP_OK(tables == 2 && hf_alloc_named(t, "L0.rope_cos", NULL, NULL) == 0 &&
           hf_alloc_named(t, "rope_cos", NULL, NULL) == s * d * 4,
           "phi3: the model's rotary makes cos [s, d] fp32 once per forward (%llu in 2 "
           "iterations), as the recorded trace shows", (unsigned long long)tables);
    trace_class ac;
    size_t ow, owf, qw, qwf;
    hf_alloc_span(t, "L0.o_proj.w", &ow, &owf);
    hf_alloc_span(t, "L0.qkv_proj.w", &qw, &qwf);
    TAP_OK(hf_alloc_named(t, "L0.attn_out_c", &ac, NULL) == T * q * 2 && ac == TC_ACT_SKEL &&
           ow < qw, "phi3: SDPA's output made contiguous for o_proj (saved by it); o_proj "
           "registered before qkv_proj");
    trace_free(t);
}

/* What the recorded LLaMA and Phi-3 traces with Python frames showed of the LLaMA program
 * (an-llama-amp, an-phi3-*): the rotary tables' products, RMSNorm's backward node by node
 * with the weight gradient's column reduction, rotate_half's backward, the q/k view copies,
 * the input gradient's cast before the weight's, the labels' padding, cache_position and
 * the loss scalars. */
static void test_hf_llama_recorded(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_config("amp");
    c.micro_batch = 1;
    c.seq = 2048;
    const model_t *m = &c.model;
    uint64_t h = m->hidden, s = c.seq, T = s, d = h / m->heads, q = m->heads * d;
    uint64_t kv = m->kv_heads * d;
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf llama amp trace, 2048 tokens: %s",
           err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "llama amp trace of 2048 tokens balanced and live");
    TAP_OK(hf_named(t, "rope.cos", NULL, NULL) == s * d * 4 &&
           hf_named(t, "rope_cos", NULL, NULL) == s * d * 4 &&
           hf_named(t, "rope_freqs", NULL, NULL) == s * d / 2 * 4,
           "llama: cos = emb.cos() * attention_scaling, two [s, d] tensors, from [s, d/2] "
           "freqs");
    TAP_OK(hf_named(t, "L0.ln1.bwd_pow1", NULL, NULL) == T * h * 4 &&
           hf_named(t, "L0.ln1.bwd_pow2", NULL, NULL) == T * h * 4 &&
           hf_named(t, "L0.ln1.rsqrt.bwd", NULL, NULL) == T * 4,
           "llama amp: RMSNorm's backward: pow's x.pow(1) and * 2, rsqrt's [T] temporaries");
    size_t ua, uf, wa, wf;
    hf_alloc_span(t, "L0.q.view.bwd", &ua, &uf);
    TAP_OK(hf_named(t, "L0.q.rope_bwd_neg", NULL, NULL) == T * q / 2 * 2 &&
           hf_named(t, "L0.k.view.bwd", NULL, NULL) == T * kv * 2 && ua != SIZE_MAX,
           "llama: rotate_half's backward negates half of q; q's and k's transposed gradients "
           "copied back to [T, w]");
    hf_alloc_span(t, "L0.q_proj.xcast.bwd", &ua, &uf);
    size_t qa = SIZE_MAX;
    for (size_t i = ua; ua != SIZE_MAX && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && r->u.alloc.cls == TC_GRAD && r->u.alloc.bytes == q * h * 4) {
            qa = i;
            break;
        }
    }
    hf_alloc_span(t, "L0.q_proj.wcast", &wa, &wf);
    TAP_OK(ua != SIZE_MAX && qa != SIZE_MAX && ua < qa && wf < ua,
           "llama amp: q_proj's input gradient cast to fp32 before its weight gradient");
    TAP_OK(hf_named(t, "labels_padded", NULL, NULL) == (s + 1) * 8 &&
           hf_named(t, "shift_labels", NULL, NULL) == 0 &&
           hf_named(t, "cache_position", NULL, NULL) == s * 8 &&
           hf_named(t, "loss", NULL, NULL) == 4,
           "llama, batch 1: the labels padded by one, their shifted view saved; "
           "cache_position; an fp32 loss scalar");
    uint64_t red = 0;
    for (size_t i = 0; i < trace_count(t) && !red; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "L0.reduce_ws")) red = r->u.alloc.bytes;
    }
    TAP_OK(red > 0, "llama: the RMSNorm weight's gradient reduces over the rows through a "
           "global buffer (%llu B)", (unsigned long long)red);
    trace_free(t);
}

static void test_hf_opt(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_ln_config("opt", "amp");
    const model_t *m = &c.model;
    uint64_t h = m->hidden, f = m->ffn_hidden, V = m->vocab, L = m->layers;
    uint64_t T = c.seq * c.micro_batch;
    uint64_t P = V * h + 130 * h + 2 * h + L * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h);
    unsigned states = 1u << TC_PARAM | 1u << TC_GRAD | 1u << TC_OPTSTATE;
    TAP_OK(gen_validate(&c, &err) == MS_OK, "hf opt validates: %s", err.msg);
    TAP_OK(model_params(m) == P, "opt config: %llu parameters",
           (unsigned long long)model_params(m));
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf opt amp trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "opt amp trace balanced and live");
    TAP_OK(trace_meta_u64(t, "hf_params", 0) == P, "opt parameters = model_params (k, v, q, "
           "out_proj, two LayerNorms, fc1, fc2 with biases; positions; tied head once): %llu",
           (unsigned long long)trace_meta_u64(t, "hf_params", 0));
    uint64_t casts, masks, bcasts;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 16 * P + 4 * V * h,
           "opt amp: 16 B/param, plus the embedding's dense gradient while it is added into "
           "the tied head's");
    TAP_OK(casts == 2 * (L * (4 * h * h + 2 * h * f) + V * h),
           "opt amp: every linear's weight and the tied head cast to bf16 once per forward");
    hf_peak_classes(t, 0, ".bcast", &bcasts);
    TAP_OK(bcasts == 2 * L * (5 * h + f), "opt amp: the six biases of a layer cast too");
    TAP_OK(hf_alloc_named(t, "embed_positions.w", NULL, NULL) == (128 + 2) * h * 4 &&
           hf_named(t, "position_ids_offset", NULL, NULL) == T * 8,
           "opt: max_position_embeddings + 2 position rows; the ids shifted by 2 (T x 8 B) "
           "saved for the positions' backward");
    trace_class fc_cls = TC_PARAM, act_cls = TC_PARAM;
    hf_alloc_named(t, "L0.fc1_out", &fc_cls, NULL);
    TAP_OK(hf_alloc_named(t, "L0.act_out", &act_cls, NULL) == T * f * 2 &&
           act_cls == TC_ACT_SKEL && fc_cls == TC_ACT_TRANS,
           "opt amp: ReLU saves its bf16 output [T, f] (fc2's input too); fc1's output is "
           "transient");
    hf_peak_classes(t, 0, "_mask", &masks);
    TAP_OK(masks == 2 * L * T * h + T * 4, "opt: dropout 0.1 saves a 1-byte mask after "
           "attention and after fc2 (none on the embeddings; attention_mask is the fp32 ones "
           "the positions come from)");
    TAP_OK(hf_named(t, "L0.q_scaled", NULL, NULL) == T * h * 2 &&
           hf_named(t, "L0.sdpa_seed", NULL, NULL) == 8 &&
           hf_named(t, "L0.sdpa_scratch", NULL, NULL) == 256,
           "opt: the query scaled after q_proj (saved by SDPA); cuDNN's SDPA saves an RNG seed "
           "even at attention_dropout 0 and takes a 256-byte scratch, as every recorded trace "
           "shows");
    const char *ac = trace_get_meta(t, "autocast_cache");
    TAP_OK(ac && strcmp(ac, "1") == 0, "opt amp: meta autocast_cache 1 (biased linears)");
    trace_free(t);
    c = hf_ln_config("opt", "bf16");
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf opt bf16 trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "opt bf16 trace balanced and live");
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 8 * P + 4 * V * h && casts == 0,
           "opt bf16: 8 B/param, no casts; the embedding's dense gradient and its sum with the "
           "tied head's (a new tensor) while they are added");
    trace_free(t);
    c = hf_ln_config("opt", "amp");
    c.seq = 256;
    TAP_OK(gen_validate(&c, &err) == MS_ERR_UNSUPPORTED && strstr(err.msg, "positions"),
           "opt: a sequence beyond max_position_embeddings refused: %s", err.msg);
}

static void test_hf_neox(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_ln_config("gpt_neox", "amp");
    const model_t *m = &c.model;
    uint64_t h = m->hidden, f = m->ffn_hidden, V = m->vocab, L = m->layers, d = 16, rd = 4;
    uint64_t T = c.seq * c.micro_batch, hq = m->heads * d;
    uint64_t P = V * h + L * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h) + 2 * h + V * h;
    unsigned states = 1u << TC_PARAM | 1u << TC_GRAD | 1u << TC_OPTSTATE;
    TAP_OK(gen_validate(&c, &err) == MS_OK, "hf gpt_neox validates: %s", err.msg);
    TAP_OK(model_params(m) == P, "gpt_neox config: %llu parameters",
           (unsigned long long)model_params(m));
    trace_t *t = NULL;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gpt_neox amp trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "gpt_neox amp trace balanced and live");
    TAP_OK(trace_meta_u64(t, "hf_params", 0) == P, "gpt_neox parameters = model_params "
           "(fused query_key_value, dense, two LayerNorms, dense_h_to_4h, dense_4h_to_h with "
           "biases; untied embed_out): %llu",
           (unsigned long long)trace_meta_u64(t, "hf_params", 0));
    uint64_t casts, masks, id1 = 0;
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 16 * P, "gpt_neox amp: 16 B/param");
    TAP_OK(casts == 2 * (L * (4 * h * h + 2 * h * f) + V * h),
           "gpt_neox amp: every linear's weight and embed_out cast to bf16 once per forward "
           "(embed_in is read in fp32)");
    TAP_OK(hf_alloc_named(t, "embed_out.w", NULL, NULL) == V * h * 4,
           "gpt_neox: an untied embed_out");
    TAP_OK(hf_named(t, "rope_cos", NULL, NULL) == c.seq * rd * 4 &&
           hf_named(t, "L0.q_rope", NULL, NULL) == T * m->heads * rd * 4 &&
           hf_named(t, "L0.k_rope", NULL, NULL) == T * m->heads * rd * 4 &&
           hf_named(t, "L0.q_rot", NULL, NULL) == T * hq * 4 &&
           hf_named(t, "L0.q", NULL, NULL) == T * hq * 2,
           "gpt_neox amp: rotary_pct 0.25 rotates 4 of 16 dimensions per head (cos/sin "
           "[s, 4]), fp32; cat with the pass-through part [T, h] fp32; SDPA's bf16 cast");
    hf_alloc_named(t, "L1.input", NULL, &id1);
    TAP_OK(hf_named(t, "L0.resid1", NULL, NULL) == 0 &&
           hf_named(t, "L0.branches", NULL, NULL) == T * h * 2 && id1 &&
           hf_op_reads(t, "L1.input_layernorm", id1) &&
           hf_op_reads(t, "L1.post_attention_layernorm", id1),
           "gpt_neox parallel residual: both norms read the layer input (no second norm "
           "input), one add of both branches, then the residual");
    hf_peak_classes(t, 0, "_mask", &masks);
    TAP_OK(masks == 0, "gpt_neox: hidden_dropout and attention_dropout 0: no masks");
    trace_free(t);
    c = hf_ln_config("gpt_neox", "bf16");
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gpt_neox bf16 trace: %s", err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "gpt_neox bf16 trace balanced and live");
    TAP_OK(hf_peak_classes(t, states, ".wcast", &casts) == 8 * P && casts == 0,
           "gpt_neox bf16: 8 B/param, no casts");
    TAP_OK(hf_named(t, "L0.q_rot", NULL, NULL) == T * hq * 2, "gpt_neox bf16: rotary in bf16");
    trace_free(t);
    c = hf_ln_config("gpt_neox", "amp");
    c.model.parallel_residual = 0;
    c.model.resid_dropout = 0.1;
    c.model.attn_dropout = 0.1;
    c.model.rotary_pct = 1.0;
    memset(&err, 0, sizeof err);
    TAP_OK(gen_trace(&c, mach, &t, &err) == MS_OK, "hf gpt_neox sequential trace: %s",
           err.msg);
    if (!t) return;
    TAP_OK(hf_walk_ok(t), "gpt_neox sequential, dropout, full rotary: balanced and live");
    hf_peak_classes(t, 0, "_mask", &masks);
    TAP_OK(hf_named(t, "L0.resid1", NULL, NULL) == T * h * 4 &&
           hf_named(t, "L0.branches", NULL, NULL) == 0 &&
           hf_named(t, "L0.q_rope", NULL, NULL) == T * hq * 4 &&
           masks == (2 * L + 1) * T * h && hf_named(t, "L0.sdpa_seed", NULL, NULL) == 8,
           "gpt_neox use_parallel_residual false: x + attn saved by the second norm; dropout "
           "masks on the embedding and both branches; rotary_pct 1 rotates whole heads");
    trace_free(t);
    c = hf_ln_config("gpt_neox", "amp");
    c.model.rotary_pct = 0.3; /* int(16 * 0.3) = 4.8 -> 4 */
    TAP_OK(gen_validate(&c, &err) == MS_OK, "gpt_neox rotary_pct 0.3: 4 dimensions");
    c.model.rotary_pct = 0.2; /* 3: odd */
    TAP_OK(gen_validate(&c, &err) == MS_ERR_UNSUPPORTED && strstr(err.msg, "rotary"),
           "gpt_neox: an odd rotary dimension count refused: %s", err.msg);
    c = hf_ln_config("gpt_neox", "amp");
    snprintf(c.model.family, sizeof c.model.family, "bert");
    c.model.is_encoder = 1;
    TAP_OK(gen_validate(&c, &err) == MS_ERR_UNSUPPORTED && strstr(err.msg, "BertForMaskedLM") &&
           strstr(err.msg, "learned positions"),
           "a bert without BertForMaskedLM's layout (rotary) refused under hf, saying what is "
           "modelled: %s", err.msg);
}

/* What the kernel profiles of experiments/realworld (kernel_classes.py) showed: the RMSNorm
 * backward's sum over the width reads the whole [rows, width] fp32 product; SDPA at a head
 * dim between 64, 128 and 256 runs the next kernel, padded. */
static void test_hf_kernel_sizes(const machine_t *mach)
{
    ms_error err;
    gen_config c = hf_config("amp");
    uint64_t T = c.seq * c.micro_batch, h = c.model.hidden, rd = 0;
    uint64_t fills = 0, copies = 0, bad = 0, zw = 0;
    trace_t *t = NULL;
    if (gen_trace(&c, mach, &t, &err) == MS_OK) {
        for (size_t i = 0; i < trace_count(t); i++) {
            const trace_rec *r = trace_get(t, i);
            if (r->type != TR_OP) continue;
            const trace_op *o = &r->u.op;
            if (!rd && !strcmp(o->name, "L0.ln1.bwd_rs_sum")) rd = o->bytes_read;
            if (!strcmp(o->name, "L0.q.rope_bwd_rot.zero")) {
                fills++;
                zw = o->bytes_read ? 0 : o->bytes_written; /* a fill reads nothing */
            } else if (!strcmp(o->name, "L0.q.rope_bwd_rot")) {
                copies++;
                bad += 2 * o->bytes_read != zw || o->bytes_written != o->bytes_read;
            }
        }
        trace_free(t);
    }
    TAP_OK(rd == T * h * 4, "RMSNorm backward: (dn * x).sum(-1) reads the [T, h] fp32 product "
           "(%llu B, want %llu)", (unsigned long long)rd, (unsigned long long)(T * h * 4));
    TAP_OK(fills == 4 && copies == 4 && zw > 0 && !bad,
           "rotate_half's slice backwards: a fill of the whole [T, w] (%llu B), then a copy of "
           "its half in, each (%llu fills, %llu copies in two iterations)",
           (unsigned long long)zw, (unsigned long long)fills, (unsigned long long)copies);
    uint64_t red[2] = { 0, 0 }, rbad = 0;
    for (int mha = 0; mha < 2; mha++) {
        gen_config g = hf_config("bf16");
        if (mha) g.model.kv_heads = g.model.heads;
        uint64_t q = g.model.hidden, kv = q / g.model.heads * g.model.kv_heads;
        if (gen_trace(&g, mach, &t, &err) != MS_OK) continue;
        for (size_t i = 0; i < trace_count(t); i++) {
            const trace_rec *r = trace_get(t, i);
            if (r->type != TR_OP || strcmp(r->u.op.name, "L0.sdpa.bwd.reduce_head")) continue;
            red[mha]++;
            rbad += r->u.op.bytes_read != T * q * 2 || r->u.op.bytes_written != T * kv * 2;
        }
        trace_free(t);
    }
    TAP_OK(red[0] == 4 && red[1] == 0 && !rbad, "grouped KV heads: cuDNN's dK and dV reductions "
           "over each group, [T, q] read, [T, kv] written (%llu in two iterations; %llu with as "
           "many KV heads as heads)", (unsigned long long)red[0], (unsigned long long)red[1]);
    machine_t m = *mach;
    roof_params p;
    roof_params_default(&p);
    m.gpu_sdpa_fwd_eff = 0.5;
    m.gpu_sdpa_fwd_half_seq = 0;
    m.gpu_sdpa_hd64_fwd = 0.6;
    m.gpu_sdpa_hd256_fwd = 0.8;
    double fl = 1e12, us[5];
    const uint64_t dims[5] = { 64, 96, 128, 192, 256 };
    for (int i = 0; i < 5; i++)
        us[i] = roof_attn_hd_us(&m, &p, fl, 0, 4096, dims[i], 0, 0) - m.gpu_kernel_launch_us;
    double base = us[2];
    TAP_OK(base > 0 && fabs(us[0] * 0.6 - base) < 1e-9 * base &&
           fabs(us[1] * 0.75 - base) < 1e-9 * base &&
           fabs(us[3] * 0.8 * 0.75 - base) < 1e-9 * base && fabs(us[4] * 0.8 - base) < 1e-9 * base,
           "SDPA head dims: 64 at its ratio, 96 on the 128 kernel padded (x128/96), 192 on the "
           "256 kernel padded, 256 at its ratio (%.1f %.1f %.1f %.1f %.1f us)", us[0], us[1],
           us[2], us[3], us[4]);
}

int main(void)
{
    machine_t m = test_machine();
    test_hf(&m);
    test_hf_moe(&m);
    test_hf_fp32_gemm_ramp(&m);
    test_hf_qwen3_moe(&m);
    test_hf_gemma(&m);
    test_hf_gpt2(&m);
    test_hf_qwen3(&m);
    test_hf_opt(&m);
    test_hf_bert(&m);
    test_hf_bert_recorded(&m);
    test_hf_phi3(&m);
    test_hf_llama_recorded(&m);
    test_hf_neox(&m);
    test_hf_kernel_sizes(&m);
    return tap_done();
}

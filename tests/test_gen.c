/* test_gen.c — unit tests (TAP) of the model registry (traces/models.c), the op-time model
 * (traces/roofline.c) and the trace generator (traces/gen.c): MEMO's 16bsh skeletal
 * activations per layer, FLOPs against MEMO's model-FLOPs formula, alloc/free balance,
 * liveness of every op's tensors, determinism, configuration errors and speed; the
 * fine-tuning modes (LoRA, ZeRO-3, offload) by their byte accounting; the megatron profile
 * (fp32 main gradients, lazy Adam states, the fp32 cross entropy, TE's buffers) likewise;
 * eager attention's saved score tensors and FLOPs by hand. The hf framework's programs are
 * tests/test_gen_hf.c. */
#define _POSIX_C_SOURCE 200809L
#include "tests/tap.h"
#include "traces/gen.h"
#include "base/u64map.h"

#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tests/gen_util.h"

static gen_config config(const char *model, uint64_t seq, uint64_t b, int tp, int cp, int dp)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup(model, &c.model, &err)) TAP_NOTE("lookup %s: %s", model, err.msg);
    c.seq = seq;
    c.micro_batch = b;
    c.tp = tp;
    c.cp = cp;
    c.dp = dp;
    return c;
}

static trace_t *gen(const gen_config *c, const machine_t *m)
{
    trace_t *t = NULL;
    ms_error err;
    ms_error_clear(&err);
    if (gen_trace(c, m, &t, &err)) TAP_NOTE("gen_trace: %s", err.msg);
    return t;
}

/* Skeletal bytes allocated for each layer (by the alloc's layer field) in iteration 0. */
static void skel_per_layer(const trace_t *t, uint64_t *per, int L, uint64_t *input,
                           uint64_t *attn)
{
    memset(per, 0, sizeof *per * (size_t)L);
    *input = *attn = 0;
    int iter = -1;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
        if (iter != 0 || r->type != TR_ALLOC || r->u.alloc.cls != TC_ACT_SKEL) continue;
        const trace_tensor *a = &r->u.alloc;
        if (a->layer < 0 || a->layer >= L) continue;
        per[a->layer] += a->bytes;
        if (a->layer == 0 && strcmp(a->name, "L0.input") == 0) *input = a->bytes;
        if (a->layer == 0 && strcmp(a->name, "L0.attn_out") == 0) *attn = a->bytes;
    }
}

typedef struct flops {
    double fwd_mm, bwd_mm;   /* GEMM + attention FLOPs of iteration 0 by phase */
    double fwd_all;
    int comm_fwd_l0, ring_ovl, ops, dur_bad, dur_unknown;
} flops;

static flops count_flops(const trace_t *t)
{
    flops f;
    memset(&f, 0, sizeof f);
    int iter = -1;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
        if (r->type != TR_OP) continue;
        const trace_op *o = &r->u.op;
        f.ops++;
        if (!(o->dur_us > 0)) f.dur_bad++;
        if (o->dur_us == -1.0) f.dur_unknown++;
        if (iter != 0) continue;
        int mm = o->kind == TK_GEMM || o->kind == TK_ATTN;
        if (o->phase == TP_FWD) {
            f.fwd_all += o->flops;
            if (mm) f.fwd_mm += o->flops;
            if (o->kind == TK_COMM && o->layer == 0 && !strstr(o->name, ".ovl")) f.comm_fwd_l0++;
        }
        if (o->phase == TP_BWD && mm) f.bwd_mm += o->flops;
        if (o->kind == TK_COMM && strstr(o->name, ".ovl")) f.ring_ovl++;
    }
    return f;
}

static int same_trace(const trace_t *a, const trace_t *b)
{
    if (trace_count(a) != trace_count(b)) return 0;
    for (size_t i = 0; i < trace_count(a); i++) {
        const trace_rec *x = trace_get(a, i), *y = trace_get(b, i);
        if (x->type != y->type) return 0;
        if (x->type == TR_ALLOC && memcmp(&x->u.alloc, &y->u.alloc, sizeof x->u.alloc)) return 0;
        if (x->type == TR_FREE && x->u.free_id != y->u.free_id) return 0;
        if (x->type == TR_MARK && (x->u.mark.kind != y->u.mark.kind ||
                                   x->u.mark.value != y->u.mark.value)) return 0;
        if (x->type == TR_OP) {
            const trace_op *p = &x->u.op, *q = &y->u.op;
            if (p->id != q->id || p->kind != q->kind || p->phase != q->phase ||
                p->layer != q->layer || p->flops != q->flops || p->dur_us != q->dur_us ||
                p->bytes_read != q->bytes_read || p->bytes_written != q->bytes_written ||
                p->n_in != q->n_in || p->n_out != q->n_out || strcmp(p->name, q->name) ||
                (p->n_in && memcmp(p->in, q->in, 8 * p->n_in)) ||
                (p->n_out && memcmp(p->out, q->out, 8 * p->n_out)))
                return 0;
        }
    }
    for (size_t i = 0; i < trace_meta_count(a); i++)
        if (strcmp(trace_meta_value(a, i), trace_meta_value(b, i))) return 0;
    return 1;
}

/* ---- tests ---- */

static void test_registry(void)
{
    const model_t *m = model_find("gpt-7b");
    TAP_OK(m && m->layers == 32 && m->hidden == 4096 && m->ffn_hidden == 16384 &&
           m->heads == 32 && m->vocab == 50257, "gpt-7b matches MEMO Table 2");
    const model_t *g = model_find("gpt2-40b");
    TAP_OK(g && g->layers == 50 && g->hidden == 8192 && g->heads == 64,
           "gpt2-40b matches ProTrain Table 1");
    TAP_OK(model_find("no-such-model") == NULL, "unknown name is not found");
    model_t x;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = model_lookup("no-such-model", &x, &err);
    TAP_OK(st == MS_ERR_NOTFOUND && strstr(err.msg, "no-such-model"),
           "model_lookup of an unknown name: NOTFOUND naming it (%s)", err.msg);
    st = model_lookup("dims:2,256,4,1024,1000", &x, &err);
    TAP_OK(st == MS_OK && x.layers == 2 && x.hidden == 256 && x.heads == 4 &&
           x.ffn_hidden == 1024 && x.vocab == 1000, "dims: spec builds a model");
    st = model_from_dims(2, 250, 4, 1024, 1000, &x, &err);
    TAP_OK(st == MS_ERR_INVALID, "heads not dividing hidden is rejected (%s)", err.msg);
    int unique = 1, described = 1;
    for (size_t i = 0; i < model_count(); i++) {
        const model_t *a = model_at(i);
        if (!a->desc || !*a->desc || !a->source || !*a->source) described = 0;
        for (size_t j = i + 1; j < model_count(); j++)
            if (!strcmp(a->name, model_at(j)->name)) unique = 0;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    if (mf) {
        model_list(mf);
        fclose(mf);
    }
    TAP_OK(buf && strstr(buf, "gpt-65b") && strstr(buf, "roberta-base") &&
           strstr(buf, "MEMO (SIGMOD'25) Table 2"), "model_list prints names and sources");
    free(buf);
    TAP_OK(unique && described && model_count() >= 25,
           "%zu registered models, unique names, each with description and source",
           model_count());
}

static void test_params(void)
{
    struct { const char *name; uint64_t params; } ref[] = {
        /* Public parameter counts of the HF models. */
        { "gpt2", 124439808ull },        { "gpt2-xl", 1557611200ull },
        { "bert-base", 109482240ull },   { "opt-1.3b", 1315758080ull },
        { "llama-13b", 13015864320ull }, { "mistral-7b", 7241732096ull },
        { "gpt-neox-20b", 20554567680ull },
    };
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        const model_t *m = model_find(ref[i].name);
        uint64_t p = m ? model_params(m) : 0;
        TAP_OK(p == ref[i].params, "params(%s) = %llu (public count %llu)", ref[i].name,
               (unsigned long long)p, (unsigned long long)ref[i].params);
    }
    const model_t *m = model_find("gpt-7b");
    double p = (double)model_params(m);
    TAP_OK(fabs(p - 6.65e9) < 0.01e9, "gpt-7b has %.3fB parameters (12Lh^2 + 13Lh + Vh + 2h)",
           p / 1e9);
}

static void test_skeletal(const machine_t *mach)
{
    struct { uint64_t seq, b; int tp, cp; } cases[] = {
        { 4096, 1, 1, 1 }, { 8192, 2, 2, 1 }, { 16384, 1, 4, 2 }, { 65536, 1, 8, 4 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gen_config c = config("gpt-7b", cases[i].seq, cases[i].b, cases[i].tp, cases[i].cp, 1);
        trace_t *t = gen(&c, mach);
        uint64_t per[32], input, attn;
        int all = t != NULL;
        uint64_t want = 16ull * cases[i].b * (cases[i].seq / (uint64_t)cases[i].cp) * 4096ull *
                        2ull / (uint64_t)cases[i].tp;
        if (t) {
            skel_per_layer(t, per, 32, &input, &attn);
            for (int l = 0; l < 32; l++) all &= per[l] == want;
        }
        TAP_OK(all && gen_layer_skel_bytes(&c) == want,
               "gpt-7b s=%llu b=%llu tp=%d cp=%d: every layer's skeletal bytes = 16bsh*2/tp = "
               "%llu", (unsigned long long)cases[i].seq, (unsigned long long)cases[i].b,
               cases[i].tp, cases[i].cp, (unsigned long long)want);
        if (i == 2)
            TAP_OK(t && input * 16 == want && attn * 16 == want,
                   "layer input and attention output are 1/16 of the layer's skeletal bytes");
        trace_free(t);
    }
}

static void test_flops(const machine_t *mach)
{
    /* gpt-7b, s = 4096, b = 1, tp = 2, cp = 2: the rank's FLOPs x tp x cp are the sample's. */
    gen_config c = config("gpt-7b", 4096, 1, 2, 2, 1);
    trace_t *t = gen(&c, mach);
    flops f = count_flops(t);
    double s = 4096, P = (double)model_params(&c.model), n = 32, h = 4096, ranks = 4;
    double fwd = f.fwd_mm * ranks, both = (f.fwd_mm + f.bwd_mm) * ranks;
    double fwd_ref = 2 * s * P + 2 * n * h * s * s;
    /* Generated GEMM FLOPs are 2s per weight of a GEMM: norms and biases carry parameters but
     * no GEMM FLOPs (-0.01%), the vocab shard is padded to tp (+0.0001%). */
    TAP_OK(fabs(fwd / fwd_ref - 1) < 0.002,
           "forward GEMM+attention FLOPs %.4g = 2sP + 2nhs^2 (%.4g) within 0.2%%", fwd, fwd_ref);
    double memo = 6 * s * P + 6 * n * h * s * s;
    /* MEMO's model FLOPs count attention backward as 2x forward; FlashAttention-2 recomputes
     * the score matrix (2.5x), so the executed FLOPs exceed MEMO's by n*h*s^2. */
    double expect = memo + n * h * s * s;
    TAP_OK(fabs(both / expect - 1) < 0.002,
           "fwd+bwd FLOPs %.4g = MEMO 6sP+6nhs^2 (%.4g) + nhs^2 (FA2 recompute) within 0.2%% "
           "(ratio to MEMO %.4f)", both, memo, both / memo);
    TAP_OK(f.comm_fwd_l0 == 4 && f.ring_ovl == 2 * 32,
           "tp=2 cp=2: 4 TP collectives in layer 0's forward (%d), one CP ring op per layer per "
           "pass marked .ovl (%d)", f.comm_fwd_l0, f.ring_ovl);
    TAP_OK(f.dur_bad == 0 && f.ops > 0, "every op has a positive modelled duration (%d ops)",
           f.ops);
    trace_free(t);

    c = config("bert-base", 512, 1, 1, 1, 1);
    t = gen(&c, NULL);
    f = count_flops(t);
    double attn_enc = 4.0 * 512 * 512 * 768 * 12;
    double gemm = f.fwd_mm - attn_enc;
    /* Position and type embeddings and the pooler hold 1% of BERT's parameters but no
     * GEMM FLOPs in the generated MLM-style step. */
    double ratio = gemm / (2.0 * 512 * (double)model_params(&c.model));
    TAP_OK(t && ratio > 0.985 && ratio < 1.0 && f.dur_unknown == f.ops,
           "encoder: GEMM FLOPs after removing non-causal attention 4bs^2h = %.4f x 2sP; no "
           "machine -> unknown durations", ratio);
    trace_free(t);
}

static void test_balance(const machine_t *mach)
{
    const char *models[] = { "gpt-7b", "mistral-7b", "bert-base", "llama-34b" };
    int tps[] = { 4, 8, 1, 16 }, cps[] = { 2, 1, 1, 2 }, dps[] = { 2, 1, 4, 1 };
    for (int i = 0; i < 4; i++) {
        gen_config c = config(models[i], 0, 1, tps[i], cps[i], dps[i]);
        c.seq = i == 2 ? 512 : 8192;
        c.save_small = i == 0;
        trace_t *t = gen(&c, mach);
        walk w = t ? validate(t) : (walk){ .errors = 1 };
        TAP_OK(t && w.errors == 0 && w.live_left_bad == 0 && w.live_left == w.persistent,
               "%s tp=%d cp=%d dp=%d%s: every op's tensors live, ids unique, all freed but "
               "%llu params/grads/optimizer states%s%s", models[i], tps[i], cps[i], dps[i],
               c.save_small ? " save_small" : "", (unsigned long long)w.live_left,
               w.errors ? "; first error: " : "", w.first_error);
        trace_free(t);
    }
}

/* The written file passes the format's own checker (traces/trace.c). */
static void test_file_check(const machine_t *mach)
{
    gen_config c = config("llama-13b", 2048, 2, 4, 2, 2);
    trace_t *t = gen(&c, mach);
    char path[] = "/tmp/memsim-test-gen-XXXXXX";
    int fd = mkstemp(path);
    ms_error err;
    ms_error_clear(&err);
    trace_check_report rep;
    memset(&rep, 0, sizeof rep);
    ms_status st = fd < 0 || !t ? MS_ERR_IO : trace_write(t, path, &err);
    if (!st) st = trace_check_file(path, stdout, 10, &rep, &err);
    walk w = t ? validate(t) : (walk){ .errors = 1 };
    TAP_OK(st == MS_OK && rep.errors == 0 && rep.records == trace_count(t) &&
           rep.live_at_end == w.persistent,
           "llama-13b tp=4 cp=2 dp=2 written and checked: %llu records, 0 problems, %llu live "
           "at end (%s)", (unsigned long long)rep.records, (unsigned long long)rep.live_at_end,
           st ? err.msg : "ok");
    if (fd >= 0) {
        close(fd);
        remove(path);
    }
    trace_free(t);
}

static void test_meta_determinism(const machine_t *mach)
{
    gen_config c = config("gpt-13b", 32768, 1, 8, 2, 2);
    trace_t *a = gen(&c, mach), *b = gen(&c, mach);
    TAP_OK(a && b && same_trace(a, b), "generating twice gives identical records and meta");
    char want[32];
    snprintf(want, sizeof want, "%llu", (unsigned long long)model_params(&c.model));
    const char *p = a ? trace_get_meta(a, "params") : NULL;
    const char *L = a ? trace_get_meta(a, "layers") : NULL;
    const char *mc = a ? trace_get_meta(a, "machine") : NULL;
    TAP_OK(p && !strcmp(p, want) && L && !strcmp(L, "40") && mc && !strcmp(mc, "test-h100") &&
           trace_get_meta(a, "generator"), "meta: params %s, layers, machine, generator", want);
    /* Iteration 0's layer marks: fwd -1 (embedding), 0..39, -1 (head); bwd -1 (head),
     * 39..0, -1 (embedding and DP reduction); none in the optimizer phase. */
    int iters = 0, order = 1, nf = 0, nb = 0;
    trace_phase ph = TP_NONE;
    int64_t fwd[64], bwd[64];
    for (size_t i = 0; a && i < trace_count(a); i++) {
        const trace_rec *r = trace_get(a, i);
        if (r->type != TR_MARK) continue;
        if (r->u.mark.kind == TM_ITER) iters++;
        if (r->u.mark.kind == TM_PHASE) ph = (trace_phase)r->u.mark.value;
        if (r->u.mark.kind != TM_LAYER || iters != 1) continue;
        if (ph == TP_FWD && nf < 64) fwd[nf++] = r->u.mark.value;
        else if (ph == TP_BWD && nb < 64) bwd[nb++] = r->u.mark.value;
        else order = 0;
    }
    order &= nf == 42 && nb == 42 && fwd[0] == -1 && fwd[41] == -1 && bwd[0] == -1 &&
             bwd[41] == -1;
    for (int l = 0; order && l < 40; l++) order &= fwd[1 + l] == l && bwd[1 + l] == 39 - l;
    TAP_OK(iters == 2 && order, "2 iteration marks; layer marks -1,0..39,-1 in fwd, "
           "-1,39..0,-1 in bwd");
    trace_free(a);
    trace_free(b);
}

static void test_errors(void)
{
    ms_error err;
    trace_t *t = (trace_t *)1;
    gen_config c = config("gpt-7b", 4096, 1, 3, 1, 1);
    ms_status st = gen_trace(&c, NULL, &t, &err);
    TAP_OK(st == MS_ERR_INVALID && t == NULL && strstr(err.msg, "tp 3") &&
           strstr(err.msg, "heads"), "tp not dividing heads: %s", err.msg);
    c = config("gpt-7b", 4097, 1, 1, 2, 1);
    st = gen_validate(&c, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "cp 2"), "cp not dividing seq: %s", err.msg);
    c = config("gpt2", 2048, 1, 1, 1, 1);
    st = gen_validate(&c, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "position"),
           "seq beyond a learned position table: %s", err.msg);
    c = config("gpt-7b", 1ull << 40, 1ull << 20, 1, 1, 1);
    st = gen_validate(&c, &err);
    TAP_OK(st == MS_ERR_INVALID, "absurd seq x batch: %s", err.msg);
    c = config("gpt-7b", 4096, 1, 1, 1, 1);
    c.lora = 1;
    c.lora_rank = 0;
    st = gen_validate(&c, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "lora_rank"), "lora with rank 0: %s",
           err.msg);
    c = config("gpt-7b", 4096, 0, 1, 1, 1);
    st = gen_validate(&c, &err);
    TAP_OK(st == MS_ERR_INVALID, "zero micro-batch: %s", err.msg);
}

/* ---- fine-tuning modes ---- */

/* Byte and op accounting of a trace for the fine-tuning tests. */
typedef struct ftacct {
    uint64_t setup_bytes[TC_COUNT];  /* allocated before the first iteration mark */
    uint64_t setup_param_allocs, setup_allocs;
    int setup_has_embed_grad, setup_has_opt_named_embed;
    uint64_t gather_allocs[64];      /* "L<l>.params" allocations (layers < 64), all iterations */
    uint64_t gather_bad_bytes;       /* ... whose bytes differ from want_gather */
    uint64_t grad_full_allocs;       /* "L<l>.grad_full" allocations */
    uint64_t grad_full_bad_bytes;
    uint64_t bwd_grad_writers;       /* backward ops writing a TC_GRAD tensor */
    uint64_t bwd_grad_writers_nonlora; /* ... whose name lacks "lora" */
    uint64_t host_optim_ops, host_optim_with_tensors, d2h_ops, h2d_ops, dp_coll_ops;
    uint64_t iter_optstate_allocs, iter_grad_allocs;
    uint64_t skel_l0_it0;            /* skeletal bytes of layer 0, iteration 0 */
} ftacct;

static ftacct ft_account(const trace_t *t, uint64_t want_gather, uint64_t want_grad_full)
{
    ftacct a;
    memset(&a, 0, sizeof a);
    u64map *cls = u64map_new(1024);
    int iter = -1;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
        if (r->type == TR_ALLOC) {
            const trace_tensor *x = &r->u.alloc;
            u64map_put(cls, x->id, (uint64_t)x->cls);
            if (iter < 0) {
                a.setup_bytes[x->cls] += x->bytes;
                a.setup_allocs++;
                if (x->cls == TC_PARAM) a.setup_param_allocs++;
                if (!strcmp(x->name, "embed.grad") || !strcmp(x->name, "embed.grad_shard"))
                    a.setup_has_embed_grad = 1;
                if (!strcmp(x->name, "embed.opt")) a.setup_has_opt_named_embed = 1;
                continue;
            }
            if (x->cls == TC_OPTSTATE) a.iter_optstate_allocs++;
            if (x->cls == TC_GRAD) a.iter_grad_allocs++;
            if (iter == 0 && x->layer == 0 && x->cls == TC_ACT_SKEL) a.skel_l0_it0 += x->bytes;
            const char *dot = strchr(x->name, '.');
            if (x->layer >= 0 && x->layer < 64 && dot && !strcmp(dot, ".params")) {
                a.gather_allocs[x->layer]++;
                if (x->bytes != want_gather) a.gather_bad_bytes++;
            }
            if (x->layer >= 0 && dot && !strcmp(dot, ".grad_full")) {
                a.grad_full_allocs++;
                if (x->bytes != want_grad_full) a.grad_full_bad_bytes++;
            }
        } else if (r->type == TR_OP) {
            const trace_op *o = &r->u.op;
            if (strstr(o->name, "optim.host")) {
                a.host_optim_ops++;
                if (o->n_in || o->n_out) a.host_optim_with_tensors++;
            }
            if (strstr(o->name, ".d2h")) a.d2h_ops++;
            if (strstr(o->name, ".h2d")) a.h2d_ops++;
            if (strstr(o->name, ".dp_rs") || strstr(o->name, ".dp_ag")) a.dp_coll_ops++;
            if (o->phase != TP_BWD) continue;
            int writes_grad = 0;
            for (uint32_t j = 0; j < o->n_out; j++) {
                uint64_t c;
                if (u64map_get(cls, o->out[j], &c) && c == TC_GRAD) writes_grad = 1;
            }
            if (!writes_grad || o->kind == TK_COMM) continue; /* DP/ZeRO reductions */
            a.bwd_grad_writers++;
            if (!strstr(o->name, "lora")) a.bwd_grad_writers_nonlora++;
        }
    }
    u64map_free(cls);
    return a;
}

static void test_lora(const machine_t *mach)
{
    /* opt-1.3b: h = 2048, f = 8192, 24 layers, MHA, biases, tied embeddings. */
    gen_config c = config("opt-1.3b", 512, 2, 1, 1, 2);
    c.lora = 1;
    c.lora_rank = 16;
    uint64_t h = 2048, f = 8192, r = 16, L = 24, T = 2 * 512, D = 2;
    uint64_t want_train = r * (h + 3 * h) + r * (h + h);
    trace_t *t = gen(&c, mach);
    walk w = t ? validate(t) : (walk){ .errors = 1 };
    ftacct a = t ? ft_account(t, 0, 0) : (ftacct){ 0 };
    uint64_t P = model_params(&c.model);
    TAP_OK(t && w.errors == 0 && w.live_left == w.persistent && w.live_left_bad == 0 &&
           gen_layer_trainable_params(&c) == want_train,
           "LoRA opt-1.3b r=16 dp=2: valid trace (%s), %llu adapter parameters per layer = "
           "r(h+3h) + r(h+h)", w.errors ? w.first_error : "ok",
           (unsigned long long)gen_layer_trainable_params(&c));
    uint64_t adapters = L * want_train;
    TAP_OK(a.setup_bytes[TC_GRAD] == adapters * D &&
           a.setup_bytes[TC_OPTSTATE] == L * ((want_train + 1) / 2) * 12 &&
           !a.setup_has_embed_grad && !a.setup_has_opt_named_embed,
           "LoRA: gradients only for the adapters (%llu B = adapters x 2), optimizer states "
           "for their dp shard (%llu B); none for embedding, head or base weights",
           (unsigned long long)a.setup_bytes[TC_GRAD],
           (unsigned long long)a.setup_bytes[TC_OPTSTATE]);
    TAP_OK(a.setup_bytes[TC_PARAM] == (P + adapters) * D,
           "LoRA: every base weight stays (frozen) plus the adapters: %llu B of parameters",
           (unsigned long long)a.setup_bytes[TC_PARAM]);
    TAP_OK(a.bwd_grad_writers == 2 * L * 2 * (uint64_t)c.iterations &&
           a.bwd_grad_writers_nonlora == 0,
           "LoRA backward: %llu weight-gradient ops, all adapters' (4 per layer per "
           "iteration); base weights get none", (unsigned long long)a.bwd_grad_writers);
    uint64_t base_skel = 16 * T * h * D;
    TAP_OK(a.skel_l0_it0 == base_skel + 2 * T * r * D &&
           gen_layer_skel_bytes(&c) == a.skel_l0_it0,
           "LoRA: layer skeletal bytes = 16bsh*2 + two saved [T, r] adapter intermediates "
           "(%llu)", (unsigned long long)a.skel_l0_it0);
    trace_free(t);
    c.lora_mlp = 1;
    t = gen(&c, mach);
    w = t ? validate(t) : (walk){ .errors = 1 };
    uint64_t want_mlp = want_train + r * (h + f) + r * (f + h);
    a = t ? ft_account(t, 0, 0) : (ftacct){ 0 };
    TAP_OK(t && w.errors == 0 && gen_layer_trainable_params(&c) == want_mlp &&
           a.bwd_grad_writers == 4 * L * 2 * (uint64_t)c.iterations &&
           a.bwd_grad_writers_nonlora == 0 && a.skel_l0_it0 == base_skel + 4 * T * r * D,
           "LoRA with lora_mlp: adapters on fc1/fc2 too (%llu per layer), 8 adapter weight "
           "gradients per layer, 4 saved intermediates", (unsigned long long)want_mlp);
    trace_free(t);
}

static void test_zero3(const machine_t *mach)
{
    gen_config c = config("opt-1.3b", 512, 2, 1, 1, 4);
    c.zero3 = 1;
    c.iterations = 3;
    uint64_t L = 24, D = 2, dp = 4;
    uint64_t lp = gen_layer_params(&c);
    trace_t *t = gen(&c, mach);
    walk w = t ? validate(t) : (walk){ .errors = 1 };
    ftacct a = t ? ft_account(t, lp * D, lp * D) : (ftacct){ 0 };
    TAP_OK(t && w.errors == 0 && w.live_left == a.setup_allocs && w.live_left_bad == 0,
           "ZeRO-3 opt-1.3b dp=4: valid trace, only the setup shards live at the end (%s)",
           w.errors ? w.first_error : "ok");
    int twice = 1;
    for (uint64_t l = 0; l < L; l++) twice &= a.gather_allocs[l] == 2 * 3;
    TAP_OK(twice && a.gather_bad_bytes == 0,
           "ZeRO-3: every layer's full parameters (%llu B) gathered into a fresh buffer twice "
           "per iteration (forward, backward) and freed", (unsigned long long)(lp * D));
    uint64_t P = model_params(&c.model);
    /* Three groups (embed, 24 layers, head) each round their shard up. */
    uint64_t shard_lo = P * D / dp, shard_hi = shard_lo + (L + 2) * D;
    TAP_OK(a.setup_bytes[TC_PARAM] >= shard_lo && a.setup_bytes[TC_PARAM] <= shard_hi &&
           a.setup_bytes[TC_GRAD] == a.setup_bytes[TC_PARAM] &&
           a.setup_bytes[TC_OPTSTATE] == a.setup_bytes[TC_PARAM] * 6 &&
           a.setup_param_allocs == L + 2,
           "ZeRO-3: setup holds 1/dp of parameters (%llu B), gradients and optimizer states "
           "(x6), one flat shard per group", (unsigned long long)a.setup_bytes[TC_PARAM]);
    TAP_OK(a.grad_full_allocs == L * 3 && a.grad_full_bad_bytes == 0 && a.dp_coll_ops == 0,
           "ZeRO-3: one full-size gradient buffer per layer backward (%llu), reduce-scattered "
           "and freed; no ZeRO-1 dp_rs/dp_ag", (unsigned long long)a.grad_full_allocs);
    trace_free(t);
    c.lora = 1;
    c.lora_rank = 8;
    c.iterations = 2;
    lp = gen_layer_params(&c);
    uint64_t lt = gen_layer_trainable_params(&c);
    t = gen(&c, mach);
    w = t ? validate(t) : (walk){ .errors = 1 };
    a = t ? ft_account(t, lp * D, lt * D) : (ftacct){ 0 };
    TAP_OK(t && w.errors == 0 && a.gather_bad_bytes == 0 && a.grad_full_allocs == L * 2 &&
           a.grad_full_bad_bytes == 0 && a.setup_bytes[TC_GRAD] == L * ((lt + 3) / 4) * D,
           "ZeRO-3 + LoRA: gathers carry base + adapters (%llu params), gradient buffers and "
           "shards only the adapters (%llu)", (unsigned long long)lp, (unsigned long long)lt);
    trace_free(t);
}

static void test_offload(const machine_t *mach)
{
    gen_config c = config("opt-1.3b", 512, 2, 1, 1, 4);
    c.offload = 1;
    trace_t *t = gen(&c, mach);
    walk w = t ? validate(t) : (walk){ .errors = 1 };
    ftacct a = t ? ft_account(t, 0, 0) : (ftacct){ 0 };
    const char *hob = t ? trace_get_meta(t, "host_opt_bytes") : NULL;
    uint64_t hv = 0, P = model_params(&c.model);
    if (hob) ms_parse_u64(hob, &hv);
    /* 26 groups: embed, 24 layers, head; opt-1.3b ties its embedding (no head.w). */
    TAP_OK(t && w.errors == 0 && a.setup_bytes[TC_OPTSTATE] == 0 && a.iter_optstate_allocs == 0 &&
           hv >= P / 4 * 12 && hv <= (P / 4 + 26) * 12,
           "offload: no optimizer state on the GPU; meta host_opt_bytes %llu = 12 B x P/dp",
           (unsigned long long)hv);
    TAP_OK(a.host_optim_ops == 26 * 2 && a.host_optim_with_tensors == 0 &&
           a.d2h_ops == 26 * 2 && a.h2d_ops == 26 * 2,
           "offload: per group and iteration a gradient D2H copy, a host Adam op touching no "
           "device tensor (named *.optim.host) and a parameter H2D copy");
    trace_free(t);
    c.zero3 = 1;
    c.lora = 1;
    c.lora_rank = 8;
    c.micro_batch = 1;
    t = gen(&c, mach);
    w = t ? validate(t) : (walk){ .errors = 1 };
    a = t ? ft_account(t, 0, gen_layer_trainable_params(&c) * 2) : (ftacct){ 0 };
    TAP_OK(t && w.errors == 0 && a.setup_bytes[TC_GRAD] == 0 && a.setup_bytes[TC_OPTSTATE] == 0 &&
           a.grad_full_bad_bytes == 0 && a.iter_grad_allocs == 2 * 24 * 2 &&
           a.host_optim_ops == 24 * 2,
           "LoRA + ZeRO-3 + offload: no GPU gradient shard or state; per layer backward a "
           "full gradient buffer and a partition copied to the host (%llu grad allocs)",
           (unsigned long long)a.iter_grad_allocs);
    gen_config d = c;
    trace_t *u = gen(&d, mach);
    TAP_OK(u && same_trace(t, u), "LoRA + ZeRO-3 + offload: generating twice is identical");
    trace_free(u);
    char path[] = "/tmp/memsim-test-gen-ft-XXXXXX";
    int fd = mkstemp(path);
    ms_error err;
    ms_error_clear(&err);
    trace_check_report rep;
    memset(&rep, 0, sizeof rep);
    ms_status st = fd < 0 || !t ? MS_ERR_IO : trace_write(t, path, &err);
    if (!st) st = trace_check_file(path, stdout, 10, &rep, &err);
    TAP_OK(st == MS_OK && rep.errors == 0 && rep.records == trace_count(t),
           "LoRA + ZeRO-3 + offload trace written and checked: %llu records, 0 problems (%s)",
           (unsigned long long)rep.records, st ? err.msg : "ok");
    if (fd >= 0) {
        close(fd);
        remove(path);
    }
    trace_free(t);
    c = config("gpt-7b", 4096, 1, 1, 1, 1);
    c.lora_mlp = 1;
    st = gen_validate(&c, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "lora_mlp"), "lora_mlp without lora: %s",
           err.msg);
}

/* The HF transformers loss: every step a full [rows, V] tensor; the logits held by the
 * outputs until the end of the backward, or into the next iteration. */
static void test_hf_loss(const machine_t *mach)
{
    gen_config c = config("opt-1.3b", 512, 2, 1, 1, 1);
    c.hf_loss = 1;
    c.hf_loss_shift = 1;
    c.hf_loss_fp32 = 1;
    c.iterations = 3;
    uint64_t V = 50272, T = 2 * 512, R = 2 * 511;
    trace_t *t = gen(&c, mach);
    walk w = t ? validate(t) : (walk){ .errors = 1 };
    /* Per iteration: the bf16 logits, the fp32 copy, the shifted copy, the log-softmax, the
     * nll and log-softmax gradients, the slice's full gradient and its bf16 cast. */
    uint64_t want = T * V * 2 + T * V * 4 + R * V * 4 + R * V * 4 + R * V * 4 + R * V * 4 +
                    T * V * 4 + T * V * 2;
    uint64_t big = 0;
    int it = -1, held_across = 0;
    u64map *iter_of = u64map_new(256);
    for (size_t i = 0; t && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) it = (int)r->u.mark.value;
        if (r->type == TR_ALLOC && it == 1 && r->u.alloc.bytes >= R * V * 2) big += r->u.alloc.bytes;
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "logits_fp32"))
            u64map_put(iter_of, r->u.alloc.id, (uint64_t)it);
        uint64_t born;
        if (r->type == TR_FREE && u64map_get(iter_of, r->u.free_id, &born) && (int)born != it)
            held_across++;
    }
    u64map_free(iter_of);
    TAP_OK(t && w.errors == 0 && w.live_left == w.persistent && big == want && held_across == 0,
           "HF loss (shift, fp32): valid trace (%s), %llu B of [rows, V] tensors per iteration "
           "(8 of them), logits freed within their iteration", w.errors ? w.first_error : "ok",
           (unsigned long long)big);
    trace_free(t);
    c.hf_logits_hold = 1;
    t = gen(&c, mach);
    w = t ? validate(t) : (walk){ .errors = 1 };
    held_across = 0;
    it = -1;
    iter_of = u64map_new(256);
    for (size_t i = 0; t && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) it = (int)r->u.mark.value;
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, "logits_fp32"))
            u64map_put(iter_of, r->u.alloc.id, (uint64_t)it);
        uint64_t born;
        if (r->type == TR_FREE && u64map_get(iter_of, r->u.free_id, &born) && (int)born == it - 1)
            held_across++;
    }
    u64map_free(iter_of);
    TAP_OK(t && w.errors == 0 && w.live_left == w.persistent && held_across == 2,
           "hf_logits_hold: iterations 0 and 1 free their logits in the next iteration's "
           "forward (%d), the last its own", held_across);
    trace_free(t);
    ms_error err;
    c = config("gpt-7b", 4096, 1, 2, 1, 1);
    c.hf_loss = 1;
    ms_status st = gen_validate(&c, &err);
    TAP_OK(st == MS_ERR_UNSUPPORTED && strstr(err.msg, "hf_loss"), "hf_loss with tp 2: %s",
           err.msg);
}

/* ---- framework megatron (docs/GENERATOR.md §9) ---- */

static gen_config mg_config(const char *model, uint64_t seq, int tp, int cp, int dp)
{
    gen_config c = config(model, seq, 1, tp, cp, dp);
    ms_error err;
    if (gen_config_set(&c, "framework", "megatron", &err)) TAP_NOTE("set: %s", err.msg);
    return c;
}

/* Byte accounting of a megatron trace. */
typedef struct mgacct {
    uint64_t grad_setup, master_setup, opt_other_setup, params_setup;
    uint64_t moments_it[2];          /* exp_avg / exp_avg_sq bytes made in iteration 0, 1 */
    uint64_t mpu_allocs, mpu_bytes, mpu_live_end;
    uint64_t softmax_bytes, logits_fp32_bytes, logits_bytes;
    uint64_t peak_at_shift;          /* live logits-family bytes at the loss.shift op */
    uint64_t wgrad_allocs_l0, wgrad_bytes_l0, wgrad_bad_life;
    int head_dummy_spans;            /* head.wgrad lives from lm_head.bwd to embed.grad_acc */
    uint64_t stream1_fwd_l0, stream1_bwd;
    int ring_then_attn, ring_ops;
    uint64_t skel_l0, inputs_l0, attn_out_l0;
    int dp_ar, dp_rs, dp_ag;
} mgacct;

static mgacct mg_account(const trace_t *t)
{
    mgacct a;
    memset(&a, 0, sizeof a);
    u64map *live = u64map_new(1024), *open = u64map_new(64);
    int iter = -1;
    trace_phase ph = TP_NONE;
    uint64_t fam = 0, head_dummy = 0, last_op_was_ring = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK) {
            if (r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
            if (r->u.mark.kind == TM_PHASE) ph = (trace_phase)r->u.mark.value;
            continue;
        }
        if (r->type == TR_ALLOC) {
            const trace_tensor *x = &r->u.alloc;
            u64map_put(live, x->id, x->bytes);
            const char *n = x->name;
            if (iter < 0) {
                if (x->cls == TC_GRAD) a.grad_setup += x->bytes;
                else if (x->cls == TC_PARAM) a.params_setup += x->bytes;
                else if (strstr(n, "opt_master")) a.master_setup += x->bytes;
                else if (x->cls == TC_OPTSTATE) a.opt_other_setup += x->bytes;
                continue;
            }
            if (strstr(n, ".exp_avg") && iter < 2) a.moments_it[iter] += x->bytes;
            if (!strcmp(n, "mpu_buffer")) {
                a.mpu_allocs++;
                a.mpu_bytes = x->bytes;
            }
            if (iter == 0 && !strcmp(n, "softmax")) a.softmax_bytes = x->bytes;
            if (iter == 0 && !strcmp(n, "logits_fp32")) a.logits_fp32_bytes = x->bytes;
            if (iter == 0 && !strcmp(n, "logits")) a.logits_bytes = x->bytes;
            if (!strcmp(n, "softmax") || !strcmp(n, "logits_fp32") || !strcmp(n, "logits"))
                fam += x->bytes;
            if (iter == 0 && x->layer == 0 && strstr(n, ".wgrad")) {
                a.wgrad_allocs_l0++;
                a.wgrad_bytes_l0 += x->bytes;
            }
            if (strstr(n, ".wgrad") && x->cls == TC_GRAD) u64map_put(open, x->id, i);
            if (!strcmp(n, "head.wgrad")) head_dummy = x->id;
            if (x->stream == 1 && ph == TP_FWD && x->layer == 0 && iter == 0) a.stream1_fwd_l0++;
            if (x->stream == 1 && ph == TP_BWD) a.stream1_bwd++;
            if (iter == 0 && x->layer == 0 && x->cls == TC_ACT_SKEL && ph == TP_FWD) {
                a.skel_l0 += x->bytes;
                if (!strcmp(n, "L0.attn_out")) a.attn_out_l0 = x->bytes;
            }
            if (iter == 0 && x->cls == TC_ACT_SKEL && strstr(n, ".input")) a.inputs_l0++;
        } else if (r->type == TR_FREE) {
            uint64_t at;
            u64map_del(live, r->u.free_id, NULL);
            /* a layer's dummy dies right after its op: within a few records */
            if (u64map_del(open, r->u.free_id, &at) && r->u.free_id != head_dummy && i - at > 8)
                a.wgrad_bad_life++;
        } else if (r->type == TR_OP) {
            const trace_op *o = &r->u.op;
            if (iter == 0 && !strcmp(o->name, "loss.shift")) a.peak_at_shift = fam;
            if (last_op_was_ring) a.ring_then_attn += o->kind == TK_ATTN;
            last_op_was_ring = o->kind == TK_COMM && strstr(o->name, ".ovl") != NULL;
            a.ring_ops += last_op_was_ring;
            if (!strcmp(o->name, "embed.grad_acc") && head_dummy) {
                int reads = 0;
                for (uint32_t j = 0; j < o->n_in; j++) reads |= o->in[j] == head_dummy;
                a.head_dummy_spans += reads;
            }
            if (strstr(o->name, ".dp_ar")) a.dp_ar++;
            if (strstr(o->name, ".dp_rs")) a.dp_rs++;
            if (strstr(o->name, ".dp_ag")) a.dp_ag++;
        }
    }
    uint64_t k, v;
    for (size_t it = 0; u64map_next(live, &it, &k, &v);)
        if (v == a.mpu_bytes) a.mpu_live_end++;
    u64map_free(live);
    u64map_free(open);
    return a;
}

/* Every op's tensors live, ids unique, the written file passes the checker; live at the end:
 * parameters, gradients, optimizer states and (tp > 1) the global all-gather buffer. */
static void test_megatron_balance(const machine_t *mach)
{
    struct { const char *m; int tp, cp, dp, dist; } cs[] = {
        { "gpt-7b", 4, 2, 1, 0 }, { "gpt-7b", 2, 1, 1, 0 }, { "mistral-7b", 4, 2, 2, 1 },
        { "llama-13b", 8, 4, 1, 1 }, { "gpt-7b", 1, 1, 1, 0 },
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        gen_config c = mg_config(cs[i].m, 8192, cs[i].tp, cs[i].cp, cs[i].dp);
        c.dist_opt = cs[i].dist;
        trace_t *t = gen(&c, mach);
        walk w = t ? validate(t) : (walk){ .errors = 1 };
        char path[] = "/tmp/memsim-test-gen-XXXXXX";
        int fd = mkstemp(path);
        ms_error err;
        ms_error_clear(&err);
        trace_check_report rep;
        memset(&rep, 0, sizeof rep);
        ms_status st = fd < 0 || !t ? MS_ERR_IO : trace_write(t, path, &err);
        if (!st) st = trace_check_file(path, stdout, 10, &rep, &err);
        if (fd >= 0) {
            close(fd);
            remove(path);
        }
        uint64_t want_bad = cs[i].tp > 1; /* the mpu buffer */
        TAP_OK(t && w.errors == 0 && w.live_left_bad == want_bad && st == MS_OK &&
               rep.errors == 0, "megatron %s tp=%d cp=%d dp=%d dist_opt=%d: ops' tensors live, "
               "file checks, %llu live at end (%llu besides model states)%s%s", cs[i].m,
               cs[i].tp, cs[i].cp, cs[i].dp, cs[i].dist, (unsigned long long)w.live_left,
               (unsigned long long)w.live_left_bad, w.errors ? "; " : "", w.first_error);
        trace_free(t);
    }
}

static void test_megatron_bytes(const machine_t *mach)
{
    /* GPT-7B, 64K tokens, TP 4, CP 2: T = 32768 tokens per rank, h/tp = 1024 */
    gen_config c = mg_config("gpt-7b", 65536, 4, 2, 1);
    trace_t *t = gen(&c, mach);
    mgacct a = t ? mg_account(t) : (mgacct){ 0 };
    uint64_t T = 32768, Vl = 50688 / 4, h = 4096, Q = T * 1024 * 2;
    uint64_t local = gen_layer_params(&c) * 32 + Vl * h + 2 * h; /* layers, embedding, norm */
    TAP_OK(a.grad_setup == 4 * local && a.params_setup == 2 * local,
           "fp32 main gradients: %llu bytes for %llu local parameters (bf16 params %llu)",
           (unsigned long long)a.grad_setup, (unsigned long long)local,
           (unsigned long long)a.params_setup);
    TAP_OK(a.master_setup == 4 * local && a.opt_other_setup == 0 &&
           a.moments_it[0] == 8 * local && a.moments_it[1] == 0,
           "fp32 master at setup (%llu), Adam moments made by the first step only (%llu, "
           "then %llu)", (unsigned long long)a.master_setup, (unsigned long long)a.moments_it[0],
           (unsigned long long)a.moments_it[1]);
    TAP_OK(a.logits_bytes == T * Vl * 2 && a.logits_fp32_bytes == T * Vl * 4 &&
           a.softmax_bytes == T * Vl * 4 && a.peak_at_shift == 10 * T * Vl,
           "cross entropy on logits.float() over the padded vocabulary shard (%llu): 10 bytes "
           "per logit live at the max subtraction", (unsigned long long)Vl);
    TAP_OK(a.mpu_allocs == 1 && a.mpu_bytes == T * h * 2 && a.mpu_live_end == 1,
           "the output layer's global all-gather buffer: made once (%llu bytes), kept",
           (unsigned long long)a.mpu_bytes);
    uint64_t wl0 = (uint64_t)gen_layer_params(&c) * 2 - 4 * 2 * h; /* minus the two norms */
    TAP_OK(a.wgrad_allocs_l0 == 4 && a.wgrad_bytes_l0 == wl0 && a.wgrad_bad_life == 0 &&
           a.head_dummy_spans == 2,
           "dummy bf16 weight gradients: 4 per layer (%llu bytes), each freed right after its "
           "op; the tied head's held until the embedding's backward",
           (unsigned long long)a.wgrad_bytes_l0);
    uint64_t L = T * 8 * 4;
    TAP_OK(a.skel_l0 == gen_layer_skel_bytes(&c) && a.skel_l0 == 16 * Q + 2 * (T / 4) * 2 * 4 + L &&
           a.attn_out_l0 == Q,
           "layer 0 keeps 16bsh/tp plus norm statistics and the LSE (its own tensor): %llu",
           (unsigned long long)a.skel_l0);
    TAP_OK(a.stream1_fwd_l0 == 3 && a.stream1_bwd == 0 && a.ring_ops == 2 * 2 * 32 &&
           a.ring_then_attn == a.ring_ops,
           "ring step 1 allocates on the cp stream (3 tensors per layer forward); every ring "
           "exchange is followed by its attention kernel (%d)", a.ring_ops);
    TAP_OK(a.dp_ar == 2 * 34 && a.dp_rs == 0 && a.dp_ag == 0,
           "no distributed optimizer: gradients all-reduced over dp*cp = 2 (%d ops)", a.dp_ar);
    trace_free(t);
    c.dist_opt = 1;
    t = gen(&c, mach);
    a = t ? mg_account(t) : (mgacct){ 0 };
    TAP_OK(a.master_setup == 2 * local && a.moments_it[0] == 4 * local && a.dp_rs == 2 * 34 &&
           a.dp_ag == 2 * 34 && a.dp_ar == 0,
           "distributed optimizer: states sharded over dp*cp = 2, reduce-scatter and "
           "all-gather");
    trace_free(t);
}

/* cp = 1: the attention saves q, k, v itself; MEMO's names are there in every layout. */
static void test_megatron_cp1(const machine_t *mach)
{
    gen_config c = mg_config("gpt-7b", 16384, 2, 1, 1);
    trace_t *t = gen(&c, mach);
    int q = 0, k = 0, v = 0, ring = 0;
    for (size_t i = 0; t && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && r->u.alloc.cls == TC_ACT_SKEL) {
            q += !strcmp(r->u.alloc.name, "L3.q");
            k += !strcmp(r->u.alloc.name, "L3.k");
            v += !strcmp(r->u.alloc.name, "L3.v");
        }
        if (r->type == TR_OP && strstr(r->u.op.name, ".ovl")) ring++;
    }
    mgacct a = t ? mg_account(t) : (mgacct){ 0 };
    TAP_OK(q == 2 && k == 2 && v == 2 && ring == 0 && a.skel_l0 == gen_layer_skel_bytes(&c) &&
           a.dp_ar == 0, "cp = 1: q, k, v saved as skeletal, no ring, no DP reduction");
    trace_free(t);
}

/* FLOPs: the padded vocabulary adds a little to MEMO's model FLOPs (+n h s^2, FA2). */
static void test_megatron_flops(const machine_t *mach)
{
    gen_config c = mg_config("gpt-7b", 65536, 4, 2, 1);
    trace_t *t = gen(&c, mach);
    flops f = t ? count_flops(t) : (flops){ 0 };
    double s = 65536, P = (double)model_params(&c.model), n = 32, h = 4096;
    double memo = (6 * s * P + 6 * n * h * s * s) / 8;
    double got = f.fwd_mm + f.bwd_mm, want = memo + n * h * s * s / 8;
    TAP_OK(t && fabs(got / want - 1) < 0.005 && f.dur_bad == 0,
           "forward+backward GEMM/attention FLOPs %.4g vs MEMO's + FA2 recompute %.4g (%.2f%%)",
           got, want, 100 * (got / want - 1));
    trace_free(t);
}

static void test_megatron_knobs(const machine_t *mach)
{
    ms_error err;
    gen_config c = config("gpt-7b", 8192, 1, 4, 2, 1), d = c;
    TAP_OK(gen_config_set(&d, "framework", "generic", &err) == MS_OK &&
           gen_config_set(&d, "loss", "auto", &err) == MS_OK, "framework=generic, loss=auto");
    trace_t *a = gen(&c, mach), *b = gen(&d, mach);
    TAP_OK(a && b && same_trace(a, b) && !trace_get_meta(a, "framework") &&
           !trace_get_meta(a, "loss"), "the generic program is the default, without new meta");
    trace_free(a);
    trace_free(b);
    ms_status s1 = gen_config_set(&d, "framework", "deepspeed", &err);
    TAP_OK(s1 == MS_ERR_INVALID && strstr(err.msg, "framework") && strstr(err.msg, "megatron"),
           "bad framework: %s", err.msg);
    s1 = gen_config_set(&d, "dist_opt", "2", &err);
    TAP_OK(s1 == MS_ERR_INVALID && strstr(err.msg, "dist_opt"), "bad value: %s", err.msg);
    s1 = gen_config_set(&d, "colour", "1", &err);
    TAP_OK(s1 == MS_ERR_INVALID && strstr(err.msg, "colour") && strstr(err.msg, "framework"),
           "unknown key: %s", err.msg);
    TAP_OK(gen_config_set(&d, "grad_bytes", "2", &err) == MS_OK && d.grad_bytes == 2 &&
           gen_config_set(&d, "attn_bwd_factor", "2.0", &err) == MS_OK &&
           d.attn_bwd_factor == 2.0 && gen_config_set(&d, "loss", "megatron", &err) == MS_OK &&
           d.loss == GEN_LOSS_MEGATRON, "grad_bytes, attn_bwd_factor, loss set by name");
    /* loss megatron in the generic program: the fp32 softmax replaces the saved logits */
    trace_t *t = gen(&d, mach);
    mgacct m = t ? mg_account(t) : (mgacct){ 0 };
    const char *lm = t ? trace_get_meta(t, "loss") : NULL;
    TAP_OK(t && m.softmax_bytes == 4 * m.logits_bytes / 2 && m.mpu_allocs == 0 && lm &&
           !strcmp(lm, "megatron"), "generic + loss megatron: fp32 softmax, no mpu buffer");
    trace_free(t);
    gen_config e = mg_config("gpt-7b", 8192, 4, 2, 1);
    e.lora = 1;
    s1 = gen_validate(&e, &err);
    TAP_OK(s1 == MS_ERR_UNSUPPORTED && strstr(err.msg, "megatron"), "megatron + lora: %s",
           err.msg);
    e = config("gpt-7b", 8192, 1, 4, 2, 1);
    e.dist_opt = 1;
    s1 = gen_validate(&e, &err);
    TAP_OK(s1 == MS_ERR_INVALID && strstr(err.msg, "dist_opt"), "dist_opt without megatron: %s",
           err.msg);
    e = mg_config("gpt-7b", 8192, 4, 2, 1);
    e.opt_bytes_per_param = 5;
    s1 = gen_validate(&e, &err);
    TAP_OK(s1 == MS_ERR_INVALID && strstr(err.msg, "opt_bytes"), "odd optimizer bytes: %s",
           err.msg);
    e = mg_config("gpt-7b", 8192, 4, 32, 1);
    s1 = gen_validate(&e, &err);
    TAP_OK(s1 == MS_ERR_INVALID && strstr(err.msg, "cp 32"), "cp beyond the ring's limit: %s",
           err.msg);
}

static void test_roofline(const machine_t *m)
{
    roof_params p;
    roof_params_default(&p);
    double big = roof_gemm_eff(m, &p, 2.0 * 8192 * 8192 * 8192);
    double small = roof_gemm_eff(m, &p, 2.0 * 256 * 256 * 256);
    TAP_OK(big > 0.74 && big <= 0.75 && small < 0.01 * 75,
           "GEMM ramp: 8192^3 reaches %.3f, 256^3 only %.4f of peak", big, small);
    uint64_t B = 64ull << 20;
    double ag = roof_coll_us(m, ROOF_ALL_GATHER, B, 8, 8);
    double want = 4.0 + 7 * (3.0 + (double)B / 8 / 450e9 * 1e6);
    double ar = roof_coll_us(m, ROOF_ALL_REDUCE, B, 8, 8);
    double inter = roof_coll_us(m, ROOF_ALL_GATHER, B, 8, 16);
    TAP_OK(fabs(ag - want) < 1e-6 && fabs((ar - 4.0) - 2 * (ag - 4.0)) < 1e-6 && inter > ag &&
           roof_coll_us(m, ROOF_ALL_GATHER, B, 1, 1) == 0.0,
           "ring all-gather %.1f us, all-reduce 2x, across nodes slower (%.1f us), 1 rank free",
           ag, inter);
    double mem = roof_kernel_us(m, &p, TK_NORM, 1e6, 1ull << 30);
    TAP_OK(fabs(mem - (4.0 + (double)(1ull << 30) / (3.35e12 * 0.85) * 1e6)) < 1e-6,
           "memory-bound kernel takes bytes / (hbm * mem_eff) + launch: %.1f us", mem);
}

/* The first op named `name` (the generator's names: "lm_head", "L0.qkv", ...); its dur_us, -1
 * when absent. */
static double op_dur(const trace_t *t, const char *name)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_OP && !strcmp(r->u.op.name, name)) return r->u.op.dur_us;
    }
    return -1;
}

/* GEMM alignment (gpu.gemm_even_eff, gpu.gemm_odd_eff): a leading dimension that is not a
 * multiple of 16 bytes slows the GEMM's compute term; GPT-2's odd vocabulary slows its output
 * projection and nothing else. */
static void test_gemm_align(const machine_t *base)
{
    machine_t m = *base;
    m.gpu_gemm_even_eff = 0.35;
    m.gpu_gemm_odd_eff = 0.18;
    TAP_OK(roof_gemm_align(&m, 4096, 50264, 768, 2) == 1.0 &&
           roof_gemm_align(&m, 4096, 50258, 768, 2) == 0.35 &&
           roof_gemm_align(&m, 4096, 50260, 768, 2) == 0.35 &&
           roof_gemm_align(&m, 4096, 50257, 768, 2) == 0.18 &&
           roof_gemm_align(&m, 4095, 50264, 768, 2) == 0.18 &&
           roof_gemm_align(&m, 4096, 50260, 768, 4) == 1.0 &&
           roof_gemm_align(base, 4096, 50257, 768, 2) == 1.0,
           "alignment classes: a multiple of 8 fp16 elements 1, of 2 or 4 0.35, odd 0.18; fp32 "
           "needs 4; a profile without the keys 1");
    roof_params p;
    roof_params_default(&p);
    double f = 2.0 * 16384 * 50257 * 1024;
    double al = roof_gemm_us(&m, &p, f, 0, 16384, 50264, 1024, 2) - m.gpu_kernel_launch_us;
    double odd = roof_gemm_us(&m, &p, f, 0, 16384, 50257, 1024, 2) - m.gpu_kernel_launch_us;
    TAP_OK(fabs(odd / al - 1 / 0.18) < 1e-9 &&
           fabs(roof_gemm_us(base, &p, f, 0, 16384, 50257, 1024, 2) -
                roof_kernel_us(base, &p, TK_GEMM, f, 0)) < 1e-9,
           "an odd compute-bound GEMM takes 1/0.18 the aligned time (%.0f vs %.0f us); without "
           "the keys roof_kernel_us's", odd, al);
    gen_config c = config("gpt2", 1024, 8, 1, 1, 1);
    trace_t *a = gen(&c, base), *b = gen(&c, &m);
    double ha = op_dur(a, "lm_head"), hb = op_dur(b, "lm_head");
    double qa = op_dur(a, "L0.qkv"), qb = op_dur(b, "L0.qkv");
    TAP_OK(ha > 0 && hb / ha > 4.5 && hb / ha < 1 / 0.18 + 1e-9 && qa > 0 && qa == qb,
           "GPT-2's output projection (vocabulary 50257) %.1fx longer, a block's qkv unchanged",
           hb / ha);
    trace_free(a);
    trace_free(b);
}

/* kernels=runtime: attention from the profile's rt.attn_* with the sequence ramp; an error when
 * the profile has none; vendor kernels unchanged. */
static void test_runtime_kernels(const machine_t *mach)
{
    machine_t m = *mach;
    roof_params p;
    roof_params_default(&p);
    double fl = 1e12;
    TAP_OK(roof_attn_us(&m, &p, fl, 0, 8192, 1) == roof_kernel_us(&m, &p, TK_ATTN, fl, 0),
           "vendor kernels: roof_attn_us is roof_kernel_us(TK_ATTN)");
    p.kernels = ROOF_KERNELS_RUNTIME;
    TAP_OK(roof_attn_us(&m, &p, fl, 0, 8192, 0) == -1.0,
           "runtime kernels without rt.attn_* in the profile: -1");
    m.rt_attn_fwd_eff = 0.3;
    m.rt_attn_fwd_half_seq = 1024;
    m.rt_attn_bwd_eff = 0.2;
    m.rt_attn_bwd_half_seq = 0;
    double f = roof_attn_us(&m, &p, fl, 0, 3072, 0), b = roof_attn_us(&m, &p, fl, 0, 3072, 1);
    double fw = 4.0 + fl / (989e12 * 0.3 * 0.75) * 1e6, bw = 4.0 + fl / (989e12 * 0.2) * 1e6;
    TAP_OK(fabs(f - fw) < 1e-6 && fabs(b - bw) < 1e-6,
           "runtime attention: forward at S = 3 x half runs at 3/4 of rt.attn_fwd_eff (%.1f us), "
           "backward without ramp (%.1f us)", f, b);
    gen_config c = config("gpt-7b", 4096, 1, 1, 1, 1);
    ms_error err;
    TAP_OK(gen_config_set(&c, "kernels", "runtime", &err) == MS_OK &&
           gen_config_set(&c, "kernels", "cudnn", &err) != MS_OK,
           "generator knob kernels: runtime accepted, an unknown name refused (%s)", err.msg);
    trace_t *t = NULL;
    TAP_OK(gen_trace(&c, mach, &t, &err) != MS_OK && strstr(err.msg, "rt.attn_fwd_eff"),
           "kernels=runtime on a profile without rt.attn_*: refused (%s)", err.msg);
    trace_free(t);
    t = NULL;
    double vend = 0, run = 0;
    if (gen_trace(&c, &m, &t, &err) == MS_OK) {
        for (size_t i = 0; i < trace_count(t); i++) {
            const trace_rec *r = trace_get(t, i);
            if (r->type == TR_OP && r->u.op.kind == TK_ATTN) run += r->u.op.dur_us;
        }
        trace_free(t);
    }
    c.roof.kernels = ROOF_KERNELS_VENDOR;
    if (gen_trace(&c, &m, &t, &err) == MS_OK) {
        for (size_t i = 0; i < trace_count(t); i++) {
            const trace_rec *r = trace_get(t, i);
            if (r->type == TR_OP && r->u.op.kind == TK_ATTN) vend += r->u.op.dur_us;
        }
        trace_free(t);
    }
    TAP_OK(run > 2.0 * vend && vend > 0,
           "the trace's attention time with runtime kernels %.0f us, vendor %.0f us", run, vend);
}

/* Sum of the `*.optim.host` durations of a generated trace (-1: generation failed). */
static double host_adam_us(const gen_config *c, const machine_t *m, ms_error *err)
{
    trace_t *t = NULL;
    if (gen_trace(c, m, &t, err) != MS_OK) return -1;
    double us = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_OP && strstr(r->u.op.name, ".optim.host")) us += r->u.op.dur_us;
    }
    trace_free(t);
    return us;
}

/* kernels=runtime on an offload trace: the host Adam ops run at the runtime's own measured
 * rate (rt.host_adam_params_per_s), a profile without it is refused; vendor kernels keep
 * host.adam_params_per_s. */
static void test_runtime_host_adam(const machine_t *mach)
{
    machine_t m = *mach;
    m.rt_attn_fwd_eff = 0.3;
    m.rt_attn_bwd_eff = 0.2;
    m.host_adam_params_per_s = 4e9;
    gen_config c = config("gpt2-medium", 1024, 1, 1, 1, 1);
    ms_error err;
    c.offload = 1;
    c.grad_bytes = 4;
    double vend = host_adam_us(&c, &m, &err);
    c.roof.kernels = ROOF_KERNELS_RUNTIME;
    double none = host_adam_us(&c, &m, &err);
    TAP_OK(none == -1 && strstr(err.msg, "rt.host_adam_params_per_s"),
           "kernels=runtime, offload=1 without rt.host_adam_params_per_s: refused (%s)", err.msg);
    m.rt_host_adam_params_per_s = 1e9;
    double run = host_adam_us(&c, &m, &err);
    TAP_OK(vend > 0 && fabs(run / vend - 4.0) < 1e-9,
           "host Adam at the runtime's 1e9/s takes 4x the vendor trace's 4e9/s (%.0f vs %.0f us)",
           run, vend);
}

static void test_speed(const machine_t *mach)
{
    gen_config c = config("gpt-7b", 4096, 1, 1, 1, 1);
    double best = 1e9;
    size_t n = 0;
    for (int i = 0; i < 5; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        trace_t *t = gen(&c, mach);
        clock_gettime(CLOCK_MONOTONIC, &b);
        n = t ? trace_count(t) : 0;
        trace_free(t);
        double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        if (ms < best) best = ms;
    }
#if defined(__SANITIZE_ADDRESS__)
    const double limit_ms = 100.0; /* instrumented code (--enable-sanitizers) runs slower */
#else
    const double limit_ms = 10.0;
#endif
    TAP_OK(best < limit_ms, "gpt-7b, 2 iterations: %zu records in %.2f ms (best of 5, limit %.0f)",
           n, best, limit_ms);
}

/* ---- eager attention (attn_impl eager) ---- */

/* Name of tensor id in trace t (the first alloc with that id), or "". */
static const char *tensor_name(const trace_t *t, uint64_t id)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && r->u.alloc.id == id) return r->u.alloc.name;
    }
    return "";
}

/* 1 when the first op named `op` reads every tensor named in `names` (NULL-terminated). */
static int op_reads(const trace_t *t, const char *op, const char *const *names)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_OP || strcmp(r->u.op.name, op)) continue;
        for (int k = 0; names[k]; k++) {
            int found = 0;
            for (uint32_t j = 0; j < r->u.op.n_in && !found; j++)
                found = strcmp(tensor_name(t, r->u.op.in[j]), names[k]) == 0;
            if (!found) return 0;
        }
        return 1;
    }
    return 0;
}

/* FLOPs of iteration 0's ops whose name ends in `suffix`, summed over layers. */
static double flops_named(const trace_t *t, const char *suffix)
{
    double f = 0;
    int iter = -1;
    size_t n = strlen(suffix);
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) iter = (int)r->u.mark.value;
        if (r->type != TR_OP || iter != 0) continue;
        size_t m = strlen(r->u.op.name);
        if (m >= n && strcmp(r->u.op.name + m - n, suffix) == 0) f += r->u.op.flops;
    }
    return f;
}

static void test_eager(const machine_t *mach)
{
    /* gpt2-medium: 24 layers, h 1024, 16 heads; b 2, s 1024. Per layer by hand: the 16bsh*2
     * skeletal bytes 16*2*1024*1024*2 = 67108864, and E = b*heads*s^2 = 33554432 score
     * elements saved as the masked scores (2 B, PyTorch 1.9's softmax input), the softmax
     * output (2 B), the dropout mask (1 B) and output (2 B): 7E = 234881024. */
    gen_config c = config("gpt2-medium", 1024, 2, 1, 1, 1);
    ms_error err;
    TAP_OK(gen_config_set(&c, "attn_impl", "eager", &err) == MS_OK &&
           c.attn_impl == GEN_ATTN_EAGER && c.attn_dropout == 1 &&
           c.attn_softmax_saves_input == 1, "attn_impl=eager sets eager; dropout and the "
           "softmax input saved by default");
    trace_t *t = gen(&c, mach);
    uint64_t per[24], input, attn;
    int all = t != NULL;
    if (t) {
        skel_per_layer(t, per, 24, &input, &attn);
        for (int l = 0; l < 24; l++) all &= per[l] == 67108864ull + 234881024ull;
    }
    TAP_OK(all && gen_layer_skel_bytes(&c) == 301989888ull &&
           gen_layer_eager_attn_bytes(&c) == 234881024ull,
           "eager gpt2-medium b=2 s=1024: every layer saves 16bsh*2 + 7*b*heads*s^2 = "
           "301989888 bytes (layer 0: %llu)", t ? (unsigned long long)per[0] : 0ull);
    walk w = t ? validate(t) : (walk){ .errors = 1 };
    TAP_OK(t && w.errors == 0 && w.live_left_bad == 0 && w.live_left == w.persistent,
           "eager: every op's tensors live, all activations freed%s%s",
           w.errors ? "; first error: " : "", w.first_error);
    static const char *const pvb[] = { "L0.attn_drop", "L0.v", NULL };
    static const char *const drb[] = { "L0.attn_drop_mask", NULL };
    static const char *const smb[] = { "L0.attn_probs", "L0.attn_masked", NULL };
    static const char *const qkb[] = { "L0.q", "L0.k", NULL };
    TAP_OK(t && op_reads(t, "L0.attn.pv.bwd", pvb) && op_reads(t, "L0.attn.dropout.bwd", drb) &&
           op_reads(t, "L0.attn.softmax.bwd", smb) && op_reads(t, "L0.attn.qk.bwd", qkb),
           "eager backward reads the saved tensors: dropout output and v, the mask, the "
           "softmax output and input, q and k");
    /* FLOPs: QK^T and PV each 2*b*s^2*h per layer, the full square (the causal mask saves
     * nothing); each backward two GEMMs of the same size. */
    double g = 2.0 * 2 * 1024 * 1024 * 1024 * 24;
    TAP_OK(t && flops_named(t, ".attn.qk") == g && flops_named(t, ".attn.pv") == g &&
           flops_named(t, ".attn.qk.bwd") == 2 * g && flops_named(t, ".attn.pv.bwd") == 2 * g,
           "eager FLOPs: QK^T = PV = 2bs^2h x 24 = %.4g, their backwards twice that", g);
    gen_config cf = config("gpt2-medium", 1024, 2, 1, 1, 1);
    trace_t *tf = gen(&cf, mach);
    flops fe = t ? count_flops(t) : (flops){ 0 }, ff = tf ? count_flops(tf) : (flops){ 0 };
    /* Per layer, flash (causal): fwd 2bs^2h (g/24), bwd 2.5x that; eager: fwd 4bs^2h, bwd
     * 8bs^2h. Over 24 layers: fwd +g, bwd 4g - 2.5g = +1.5g. */
    TAP_OK(tf && fabs((fe.fwd_mm - ff.fwd_mm) - g) < 1 && fabs((fe.bwd_mm - ff.bwd_mm) -
           1.5 * g) < 1 && fe.dur_bad == 0,
           "eager vs flash: +%.4g forward, +%.4g backward FLOPs (by hand %.4g, %.4g); every "
           "duration positive", fe.fwd_mm - ff.fwd_mm, fe.bwd_mm - ff.bwd_mm, g, 1.5 * g);
    trace_free(t);
    /* The default is flash, and naming it changes nothing. */
    gen_config cn = config("gpt2-medium", 1024, 2, 1, 1, 1);
    TAP_OK(gen_config_set(&cn, "attn_impl", "flash", &err) == MS_OK, "attn_impl=flash accepted");
    t = gen(&cn, mach);
    TAP_OK(t && tf && same_trace(t, tf) && trace_meta_count(t) == trace_meta_count(tf) &&
           trace_meta_u64(tf, "attn_dropout", 7) == 7,
           "attn_impl=flash gives the default trace, record for record, no new meta");
    trace_free(t);
    trace_free(tf);
    /* The knobs: dropout 0 saves no mask and no copy; later PyTorch no softmax input. */
    struct { int drop, keep; uint64_t per_el; } v[] = { { 0, 0, 2 }, { 1, 0, 5 }, { 0, 1, 4 } };
    for (int i = 0; i < 3; i++) {
        gen_config cv = c;
        cv.attn_dropout = v[i].drop;
        cv.attn_softmax_saves_input = v[i].keep;
        t = gen(&cv, mach);
        all = t != NULL;
        if (t) {
            skel_per_layer(t, per, 24, &input, &attn);
            for (int l = 0; l < 24; l++) all &= per[l] == 67108864ull + v[i].per_el * 33554432ull;
            w = validate(t);
            all &= w.errors == 0 && w.live_left == w.persistent;
        }
        TAP_OK(all && gen_layer_eager_attn_bytes(&cv) == v[i].per_el * 33554432ull,
               "eager attn_dropout=%d attn_softmax_saves_input=%d: %llu bytes per score "
               "element saved, trace balanced", v[i].drop, v[i].keep,
               (unsigned long long)v[i].per_el);
        trace_free(t);
    }
    /* An encoder under tp 2 with offload (MemFerry's setting): balanced, heads halved. */
    gen_config cb = config("bert-base", 512, 4, 2, 1, 1);
    cb.attn_impl = GEN_ATTN_EAGER;
    t = gen(&cb, mach);
    w = t ? validate(t) : (walk){ .errors = 1 };
    TAP_OK(t && w.errors == 0 && w.live_left == w.persistent &&
           gen_layer_eager_attn_bytes(&cb) == 7ull * 4 * 6 * 512 * 512,
           "eager bert-base tp=2 b=4: balanced, 7 x b x heads/tp x s^2 saved per layer");
    trace_free(t);
    /* What eager does not model is refused. */
    gen_config bad = config("gpt2-medium", 1024, 1, 1, 2, 1);
    bad.attn_impl = GEN_ATTN_EAGER;
    ms_error_clear(&err);
    TAP_OK(gen_validate(&bad, &err) == MS_ERR_UNSUPPORTED && strstr(err.msg, "cp"),
           "eager with cp 2 refused: %s", err.msg);
    bad = config("mistral-7b", 4096, 1, 1, 1, 1);
    bad.attn_impl = GEN_ATTN_EAGER;
    TAP_OK(gen_validate(&bad, &err) == MS_ERR_UNSUPPORTED && strstr(err.msg, "kv heads"),
           "eager with grouped-query attention refused");
    TAP_OK(gen_config_set(&bad, "attn_impl", "sdpa", &err) == MS_ERR_INVALID &&
           strstr(err.msg, "attn_impl") && gen_config_set(&bad, "attn_dropout", "2", &err),
           "attn_impl sdpa and attn_dropout 2 rejected by name");
}

int main(void)
{
    machine_t m = test_machine();
    test_registry();
    test_params();
    test_skeletal(&m);
    test_flops(&m);
    test_balance(&m);
    test_file_check(&m);
    test_meta_determinism(&m);
    test_errors();
    test_lora(&m);
    test_zero3(&m);
    test_offload(&m);
    test_hf_loss(&m);
    test_megatron_balance(&m);
    test_megatron_bytes(&m);
    test_megatron_cp1(&m);
    test_megatron_flops(&m);
    test_megatron_knobs(&m);
    test_roofline(&m);
    test_gemm_align(&m);
    test_runtime_kernels(&m);
    test_runtime_host_adam(&m);
    test_eager(&m);
    test_speed(&m);
    return tap_done();
}

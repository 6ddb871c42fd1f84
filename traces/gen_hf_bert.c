/* gen_hf_bert.c — the hf profile's BERT program: transformers 5's BertForMaskedLM
 * (models/bert/modeling_bert.py) trained with labels = input_ids (the masked-LM loss over
 * every token) under PyTorch 2.11 eager as gen_hf.c's loop runs it. A post-LayerNorm
 * encoder with biased nn.Linear layers and bidirectional SDPA, built from GPT-2's blocks
 * (hf_ln_fwd's LayerNorm, hf_blinear, hf_drop in gen_hf_gpt2.c), gen_hf.c's SDPA ops,
 * embedding backward, AdamW and driver. Read off the H200 allocator traces with Python frames
 * of a 2-layer BERT-large (experiments/realworld/h200/an-bert-*.trace.json.gz; docs/GENERATOR.md
 * §11 "BERT"). */
#include "traces/gen_hf_int.h"

#include <stdlib.h>
#include <string.h>

/* BertLayer's parameters in registration order: attention.self query, key, value,
 * attention.output dense and LayerNorm, intermediate.dense, output dense and LayerNorm
 * (each weight then bias). The model's parameters() order: embeddings (word, position,
 * token_type, LayerNorm), the layers, then cls.predictions: its own bias (a module's
 * parameters come before its children's), transform (dense, LayerNorm), the decoder's weight
 * when untied (tied: the word embeddings'; the decoder's bias is cls.predictions.bias). */
enum { BT_QW, BT_QB, BT_KW, BT_KB, BT_VW, BT_VB, BT_OW, BT_OB, BT_LN1W, BT_LN1B, BT_FC1W,
       BT_FC1B, BT_FC2W, BT_FC2B, BT_LN2W, BT_LN2B, BT_SLOTS };
static const char *const bt_slot_name[BT_SLOTS] = {
    "query.w", "query.b", "key.w", "key.b", "value.w", "value.b", "attention.output.dense.w",
    "attention.output.dense.b", "attention.output.LayerNorm.w", "attention.output.LayerNorm.b",
    "intermediate.dense.w", "intermediate.dense.b", "output.dense.w", "output.dense.b",
    "output.LayerNorm.w", "output.LayerNorm.b"
};
enum { BE_WORD, BE_POS, BE_TYPE, BE_LNW, BE_LNB, BE_PRE };
enum { BH_BIAS, BH_TW, BH_TB, BH_LNW, BH_LNB, BH_N }; /* after the layers; [decoder.w] last */
#define BT_NB 6 /* biased linears of a layer (their amp bias casts) */

typedef struct bt_ls {
    uint64_t in;                 /* the layer input (bf16: saved by query, key and value) */
    uint64_t xq, xk, xv;         /* the projections' saved inputs (amp: their casts) */
    uint64_t q, k, v, ao, lse, seed, offs;
    uint64_t m1, s1, mu1, rs1;   /* attention output dropout mask; LayerNorm 1 input, stats */
    uint64_t out1, xi;           /* LayerNorm 1 output; intermediate.dense's saved input */
    uint64_t fc, act, m2, s2, mu2, rs2;
    uint64_t bc[BT_NB];          /* amp: bias casts, held by autocast's cache */
} bt_ls;

struct hf_bert {
    bt_ls *ls;
    uint64_t pos_buf, type_buf;  /* the position_ids and token_type_ids buffers [1, P] */
    uint64_t tt;                 /* token_type_ids gathered by position_ids [1, s] (saved) */
    uint64_t ew, et, ep, esum, emu, ers, emask;
    uint64_t hin, xt, t, taf, tmu, trs, hout, xd, bct, bcd;
    uint64_t lsm32;              /* amp: the fp32 log-probabilities nll_loss saves */
    double pd, ad;               /* hidden and attention-probabilities dropout */
};

static bt_ls *bt_s(hf_x *x, int l) { return &x->brt->ls[l]; }
static hf_param *bt_lp(hf_x *x, int l, int j)
{
    return &x->p[BE_PRE + (size_t)l * BT_SLOTS + (size_t)j];
}
static hf_param *bt_hp(hf_x *x, int j) { return &x->p[BE_PRE + (size_t)x->L * BT_SLOTS + j]; }
static hf_param *bt_bias(hf_x *x) { return bt_hp(x, BH_BIAS); }
static hf_param *bt_decw(hf_x *x) { return x->tied ? &x->p[BE_WORD] : &x->p[x->np - 1]; }

size_t hf_bert_nparams(const hf_x *x)
{
    return BE_PRE + (size_t)x->L * BT_SLOTS + BH_N + !x->tied;
}

void hf_bert_plan_params(hf_x *x)
{
    const model_t *m = &x->c->model;
    uint64_t h = x->h, f = x->f;
    uint64_t pre[BE_PRE] = { x->V * h, m->pos_rows * h, m->type_vocab * h, h, h };
    for (int j = 0; j < BE_PRE; j++) x->p[j].n = pre[j];
    for (int l = 0; l < x->L; l++) {
        uint64_t n[BT_SLOTS] = { h * h, h, h * h, h, h * h, h, h * h, h, h, h, f * h, f,
                                 h * f, h, h, h };
        for (int j = 0; j < BT_SLOTS; j++) {
            bt_lp(x, l, j)->n = n[j];
            bt_lp(x, l, j)->layer = l;
        }
    }
    for (size_t i = 0; i < x->np; i++)
        if (i < BE_PRE || i >= BE_PRE + (size_t)x->L * BT_SLOTS) x->p[i].layer = -1;
    bt_hp(x, BH_BIAS)->n = x->V;
    bt_hp(x, BH_TW)->n = h * h;
    bt_hp(x, BH_TB)->n = h;
    bt_hp(x, BH_LNW)->n = h;
    bt_hp(x, BH_LNB)->n = h;
    if (!x->tied) x->p[x->np - 1].n = x->V * h;
}

void hf_bert_pname(const hf_x *x, size_t i, char *nm)
{
    static const char *const pre[BE_PRE] = {
        "word_embeddings.w", "position_embeddings.w", "token_type_embeddings.w",
        "embeddings.LayerNorm.w", "embeddings.LayerNorm.b" };
    static const char *const head[BH_N] = { "predictions.bias", "transform.dense.w",
                                            "transform.dense.b", "transform.LayerNorm.w",
                                            "transform.LayerNorm.b" };
    size_t body = BE_PRE + (size_t)x->L * BT_SLOTS;
    if (i < BE_PRE) MS_JOIN(nm, TRACE_NAME_MAX, pre[i]);
    else if (i >= body + BH_N) MS_JOIN(nm, TRACE_NAME_MAX, "decoder.w");
    else if (i >= body) MS_JOIN(nm, TRACE_NAME_MAX, head[i - body]);
    else snprintf(nm, TRACE_NAME_MAX, "L%d.%s", x->p[i].layer,
                  bt_slot_name[(i - BE_PRE) % BT_SLOTS]);
}

ms_status hf_bert_check(const gen_config *c, ms_error *err)
{
    const model_t *m = &c->model;
    int gelu = m->act == MODEL_ACT_GELU || (m->act == MODEL_ACT_DEFAULT &&
                                             m->mlp == MODEL_MLP_GELU);
    if (m->norm != MODEL_NORM_LAYER || m->mlp != MODEL_MLP_GELU || !gelu || !m->has_bias ||
        m->kv_heads != m->heads || m->head_dim || m->pos != MODEL_POS_LEARNED ||
        !m->pos_rows || !m->type_vocab || !m->is_encoder)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: family bert is modelled as "
                       "BertForMaskedLM (post-LayerNorm, biased linears, an exact-gelu MLP, "
                       "full multi-head attention, learned positions and token types); %s is "
                       "not", m->name);
    if (m->max_seq && c->seq > m->max_seq)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: bert sequence %llu beyond its "
                       "%llu positions (max_position_embeddings)", (unsigned long long)c->seq,
                       (unsigned long long)m->max_seq);
    return MS_OK;
}

static void bt_param(hf_x *x, size_t i)
{
    char nm[TRACE_NAME_MAX];
    hf_bert_pname(x, i, nm);
    x->p[i].id = hf_alloc(x, -1, nm, x->p[i].n * x->PB, TC_PARAM, -1);
}

/* The head's setup as from_config builds it: transform, then BertLMPredictionHead's decoder
 * (nn.Linear(h, V) with its own bias) and bias parameter; tying then frees the decoder's
 * weight (it becomes the word embeddings') and _adjust_bias (modeling_utils.py) pads each bias
 * into a new tensor, the decoder's first (that copy goes when the two biases are tied), then
 * cls.predictions.bias, whose padded copy is the one bias left. */
static void bt_setup_head(hf_x *x)
{
    size_t body = BE_PRE + (size_t)x->L * BT_SLOTS;
    for (int j = BH_TW; j < BH_N; j++) bt_param(x, body + (size_t)j);
    uint64_t vb = x->V * x->PB, dw = 0;
    if (x->tied) dw = hf_alloc(x, -1, "decoder.w", x->V * x->h * x->PB, TC_PARAM, -1);
    else bt_param(x, x->np - 1);
    uint64_t db = hf_alloc(x, -1, "decoder.bias", vb, TC_PARAM, -1);
    uint64_t pb = hf_alloc(x, -1, "predictions.bias.init", vb, TC_PARAM, -1);
    hf_free(x, &dw);
    uint64_t pad = hf_alloc(x, -1, "decoder.bias.pad", vb, TC_PARAM, -1);
    hf_free(x, &db);
    hf_free(x, &pad);
    bt_param(x, body + BH_BIAS);
    hf_free(x, &pb);
}

/* The model built on the GPU (from_config under `with torch.device("cuda")`): the
 * embeddings' parameters and their two buffers (position_ids, token_type_ids: [1, P] int64),
 * the layers, BertModel's weight init (an arange copied into position_ids), the head; then the
 * input ids. */
ms_status hf_bert_begin(hf_x *x)
{
    x->brt = calloc(1, sizeof *x->brt);
    if (!x->brt) return MS_ERR_NOMEM;
    x->brt->ls = calloc((size_t)x->L, sizeof *x->brt->ls);
    if (!x->brt->ls) return MS_ERR_NOMEM;
    const model_t *m = &x->c->model;
    x->brt->pd = m->resid_dropout;
    x->brt->ad = m->attn_dropout;
    uint64_t P = m->pos_rows;
    for (size_t i = 0; i < BE_PRE; i++) bt_param(x, i);
    x->brt->pos_buf = hf_alloc(x, -1, "position_ids", P * TOKEN_BYTES, TC_OTHER, -1);
    x->brt->type_buf = hf_alloc(x, -1, "token_type_ids", P * TOKEN_BYTES, TC_OTHER, -1);
    for (size_t i = BE_PRE; i < BE_PRE + (size_t)x->L * BT_SLOTS; i++) bt_param(x, i);
    uint64_t ar = hf_alloc(x, -1, "init.arange", P * TOKEN_BYTES, TC_OTHER, -1);
    hf_free(x, &ar);
    bt_setup_head(x);
    x->tokens = hf_alloc(x, -1, "input_ids", x->T * TOKEN_BYTES, TC_OTHER, -1);
    return x->st;
}

void hf_bert_end(hf_x *x)
{
    if (x->brt) free(x->brt->ls);
    free(x->brt);
    x->brt = NULL;
}

/* nn.LayerNorm whose output belongs to layer ol under the name outn (a layer's output is
 * the next layer's input: named and layered as that layer's, what a policy keeps). */
static uint64_t bt_ln_fwd(hf_x *x, int l, int ol, const char *nm, const char *outn,
                          uint64_t in, hf_param *w, hf_param *b, trace_class ocls,
                          uint64_t *mu, uint64_t *rs)
{
    uint64_t T = x->T, n = T * x->h, oid = x->next_oid++;
    uint64_t out = hf_alloc(x, ol, outn, n * x->RB, ocls, (int64_t)oid);
    *mu = hf_alloc(x, l, "ln_mean", T * F32, TC_ACT_SKEL, (int64_t)oid);
    *rs = hf_alloc(x, l, "ln_rstd", T * F32, TC_ACT_SKEL, (int64_t)oid);
    hf_op o = { .kind = TK_NORM, .layer = l, .what = nm, .br = n * x->RB + 2 * x->h * x->PB,
                .bw = n * x->RB + 2 * T * F32, .in = { in, w->id, b->id }, .nin = 3,
                .out = { out, *mu, *rs }, .nout = 3, .flops = 8.0 * (double)n };
    hf_mem_op(x, oid, o);
    return out;
}

/* An embedding lookup of `rows` rows (ids) into a new [rows, h] tensor. */
static uint64_t bt_lookup(hf_x *x, const char *nm, const char *outn, hf_param *w,
                          uint64_t ids, uint64_t rows)
{
    uint64_t oid;
    uint64_t e = hf_alloc_op(x, -1, outn, rows * x->h * x->RB, TC_ACT_TRANS, 1, &oid);
    hf_op o = { .kind = TK_EMBED, .layer = -1, .what = nm, .br = rows * (x->h * x->PB + 8),
                .bw = rows * x->h * x->RB, .in = { ids, w->id }, .nin = 2, .out = { e },
                .nout = 1 };
    hf_mem_op(x, oid, o);
    return e;
}

/* BertEmbeddings.forward: the token types gathered from the zero buffer by position_ids
 * ([1, s] int64, saved by their embedding's backward), word_embeddings(ids),
 * token_type_embeddings of those types expanded over the batch (F.embedding flattens the
 * expanded ids into a copy when b > 1), their sum, `+ position_embeddings(position_ids)`
 * (a new sum: [s, h] broadcast over the batch), LayerNorm (its input saved), dropout (its
 * output is layer 0's input); the LayerNorm output and the lookups are locals that go when
 * the embeddings return. */
static uint64_t bt_embed_fwd(hf_x *x)
{
    struct hf_bert *g = x->brt;
    uint64_t T = x->T, n = T * x->h;
    g->tt = hf_ew(x, -1, "token_type_ids.gather", "token_types", x->s * TOKEN_BYTES,
                  TC_ACT_SKEL, g->type_buf, g->pos_buf, 2 * x->s * TOKEN_BYTES, TK_ELEM);
    g->ew = bt_lookup(x, "word_embeddings", "inputs_embeds", &x->p[BE_WORD], x->tokens, T);
    uint64_t ids = g->tt;
    if (x->b > 1)
        ids = hf_ew(x, -1, "token_type_ids.flatten", "token_type_flat", T * TOKEN_BYTES,
                    TC_ACT_TRANS, g->tt, 0, x->s * TOKEN_BYTES, TK_ELEM);
    g->et = bt_lookup(x, "token_type_embeddings", "token_type_embeds", &x->p[BE_TYPE], ids, T);
    if (ids != g->tt) hf_free(x, &ids);
    uint64_t s1 = hf_ew(x, -1, "embed.add", "embeddings_sum", n * x->RB, TC_ACT_TRANS, g->ew,
                        g->et, 2 * n * x->RB, TK_ELEM);
    g->ep = bt_lookup(x, "position_embeddings", "position_embeds", &x->p[BE_POS], g->pos_buf,
                      x->s);
    g->esum = hf_ew(x, -1, "embed.add_pos", "embeddings", n * x->RB, TC_ACT_SKEL, s1, g->ep,
                    (T + x->s) * x->h * x->RB, TK_ELEM);
    hf_free(x, &s1);
    int drop = g->pd > 0;
    uint64_t ln = bt_ln_fwd(x, -1, drop ? -1 : 0, "embeddings.LayerNorm",
                            drop ? "embeddings_ln" : "input", g->esum, &x->p[BE_LNW],
                            &x->p[BE_LNB], drop ? TC_ACT_TRANS : TC_ACT_SKEL, &g->emu, &g->ers);
    uint64_t in = ln;
    if (drop) {
        uint64_t oid;
        g->emask = hf_alloc_op(x, -1, "embed.drop_mask", n, TC_ACT_SKEL, 1, &oid);
        in = hf_alloc(x, 0, "input", n * x->RB, TC_ACT_SKEL, (int64_t)oid);
        hf_op d = { .kind = TK_ELEM, .layer = -1, .what = "embeddings.dropout",
                    .br = n * x->RB, .bw = n * (x->RB + 1), .in = { ln }, .nin = 1,
                    .out = { g->emask, in }, .nout = 2, .flops = EW_FLOPS * (double)n };
        hf_mem_op(x, oid, d);
        hf_free(x, &ln);
    }
    hf_free(x, &g->ew);
    hf_free(x, &g->et);
    hf_free(x, &g->ep);
    return in;
}

/* BertLayer.forward (post-LN): s1 = dropout(dense(SDPA(q, k, v))) + x, x1 = LayerNorm(s1);
 * s2 = dropout(output.dense(gelu(intermediate.dense(x1)))) + x1, LayerNorm(s2) is the
 * layer's output. q, k and v are the biased projections' outputs viewed as
 * [b, heads, s, d] (views: SDPA saves them); SDPA runs bidirectional (is_causal False, no
 * mask) with dropout_p = attention_probs_dropout_prob, its output in q's [b, s, heads, d]
 * strides, so the transpose back and reshape are views. Each dropout's output is a local of
 * BertSelfOutput / BertOutput that goes when its LayerNorm returns. amp: each projection
 * casts the fp32 input itself; layer_norm runs in fp32 on the fp32 sums; x1 goes when the
 * layer returns, the layer input then too (layer 0's is the embeddings' output, held until
 * the encoder returns). */
static uint64_t bt_layer_fwd(hf_x *x, int l, uint64_t in)
{
    struct hf_bert *g = x->brt;
    bt_ls *s = bt_s(x, l);
    uint64_t T = x->T, h = x->h, f = x->f, n = T * h, xd;
    memset(s, 0, sizeof *s);
    s->in = in;
    s->q = hf_blinear(x, l, bt_lp(x, l, BT_QW), bt_lp(x, l, BT_QB), "query", in, x->amp, T, h, h,
                      TC_ACT_SKEL, &s->xq, &s->bc[0]);
    s->k = hf_blinear(x, l, bt_lp(x, l, BT_KW), bt_lp(x, l, BT_KB), "key", in, x->amp, T, h, h,
                      TC_ACT_SKEL, &s->xk, &s->bc[1]);
    s->v = hf_blinear(x, l, bt_lp(x, l, BT_VW), bt_lp(x, l, BT_VB), "value", in, x->amp, T, h,
                      h, TC_ACT_SKEL, &s->xv, &s->bc[2]);
    const uint64_t sin[] = { s->q, s->k, s->v };
    hf_sdpa_fwd_op(x, l, g->ad > 0, sin, 3, &s->ao, &s->lse, &s->seed, &s->offs);
    uint64_t po = hf_blinear(x, l, bt_lp(x, l, BT_OW), bt_lp(x, l, BT_OB),
                             "attention.output.dense", s->ao, 0, T, h, h, TC_ACT_TRANS, &xd,
                             &s->bc[3]);
    uint64_t d1 = hf_drop(x, l, "attention.output.dropout", g->pd, po, n, x->CB, TC_ACT_TRANS,
                          "attn_drop_out", &s->m1);
    if (d1 != po) hf_free(x, &po);
    s->s1 = hf_ew_nv(x, l, "attention.output.add", "ln1_in", n * x->RB, TC_ACT_SKEL, d1, in,
                     n * (x->RB + x->CB), TK_ELEM, x->RB != x->CB ? n : 0);
    s->out1 = bt_ln_fwd(x, l, l, "attention.output.LayerNorm", "ln1_out", s->s1,
                        bt_lp(x, l, BT_LN1W), bt_lp(x, l, BT_LN1B),
                        x->amp ? TC_ACT_TRANS : TC_ACT_SKEL, &s->mu1, &s->rs1);
    hf_free(x, &d1);
    s->fc = hf_blinear(x, l, bt_lp(x, l, BT_FC1W), bt_lp(x, l, BT_FC1B), "intermediate.dense",
                       s->out1, x->amp, T, f, h, TC_ACT_SKEL, &s->xi, &s->bc[4]);
    s->act = hf_ew(x, l, "gelu", "act_out", T * f * x->CB, TC_ACT_SKEL, s->fc, 0,
                   T * f * x->CB, TK_ACT);
    uint64_t mp = hf_blinear(x, l, bt_lp(x, l, BT_FC2W), bt_lp(x, l, BT_FC2B), "output.dense",
                             s->act, 0, T, h, f, TC_ACT_TRANS, &xd, &s->bc[5]);
    uint64_t d2 = hf_drop(x, l, "output.dropout", g->pd, mp, n, x->CB, TC_ACT_TRANS,
                          "mlp_drop_out", &s->m2);
    if (d2 != mp) hf_free(x, &mp);
    s->s2 = hf_ew_nv(x, l, "output.add", "ln2_in", n * x->RB, TC_ACT_SKEL, d2, s->out1,
                     n * (x->RB + x->CB), TK_ELEM, x->RB != x->CB ? n : 0);
    int last = l + 1 == x->L;
    uint64_t out = bt_ln_fwd(x, l, last ? -1 : l + 1, "output.LayerNorm",
                             last ? "final_norm.input" : "input", s->s2, bt_lp(x, l, BT_LN2W),
                             bt_lp(x, l, BT_LN2B), TC_ACT_SKEL, &s->mu2, &s->rs2);
    hf_free(x, &d2);
    if (x->amp) { /* the casts are what the projections saved */
        hf_free(x, &s->out1);
        if (l > 0) hf_free(x, &s->in);
    }
    return out;
}

/* ForMaskedLMLoss as BertForMaskedLM calls it (CrossEntropyLoss on the logits as they are,
 * no upcast): log_softmax in the logits' dtype (saved); under amp nll_loss is on autocast's
 * fp32 list, so the bf16 log-probabilities are cast to fp32 first (saved by nll_loss); the
 * loss and its total weight (saved) are scalars of that dtype. */
static void bt_loss_fwd(hf_x *x, uint64_t lg)
{
    struct hf_bert *g = x->brt;
    uint64_t TV = x->T * x->V, eb = x->CB, lb = x->amp ? F32 : eb;
    x->logsm = hf_ew(x, -1, "log_softmax", "log_probs", TV * eb, TC_ACT_SKEL, lg, 0, TV * eb,
                     TK_LOSS);
    uint64_t lp = x->logsm;
    if (x->amp)
        lp = g->lsm32 = hf_ew_nv(x, -1, "log_probs.float", "log_probs_fp32", TV * F32,
                                 TC_ACT_SKEL, x->logsm, 0, TV * eb, TK_ELEM, TV);
    hf_nll_fwd(x, lp, x->tokens, lb);
}

/* BertOnlyMLMHead: transform (dense, gelu, LayerNorm: under amp autocast runs layer_norm in
 * fp32 on an fp32 cast of gelu's bf16 output, the cast saved, the bf16 output a local until
 * the LayerNorm returns), the decoder (addmm with the
 * tied word embeddings and cls.predictions.bias; amp: the transform's fp32 output goes once
 * the decoder has cast it), then the loss. The model's forward returns (the last hidden state
 * and the logits go) and autocast's region ends (its cache drops the bias casts). */
static void bt_head_fwd(hf_x *x, uint64_t in)
{
    struct hf_bert *g = x->brt;
    uint64_t T = x->T, h = x->h, V = x->V, n = T * h;
    if (x->amp) hf_free(x, &g->ls[0].in); /* the embeddings' output: the encoder returned */
    g->hin = in;
    g->t = hf_blinear(x, -1, bt_hp(x, BH_TW), bt_hp(x, BH_TB), "transform.dense", in, x->amp,
                      T, h, h, TC_ACT_SKEL, &g->xt, &g->bct);
    uint64_t ta = hf_ew(x, -1, "transform.gelu", "transform_act", n * x->CB,
                        x->amp ? TC_ACT_TRANS : TC_ACT_SKEL, g->t, 0, n * x->CB, TK_ACT);
    g->taf = ta;
    if (x->amp)
        g->taf = hf_ew_nv(x, -1, "transform.LayerNorm.cast", "transform_act_fp32", n * F32,
                          TC_ACT_SKEL, ta, 0, n * BF16, TK_ELEM, n);
    g->hout = bt_ln_fwd(x, -1, -1, "transform.LayerNorm", "transform_out", g->taf,
                        bt_hp(x, BH_LNW), bt_hp(x, BH_LNB), x->amp ? TC_ACT_TRANS : TC_ACT_SKEL,
                        &g->tmu, &g->trs);
    if (x->amp) hf_free(x, &ta); /* a local until the LayerNorm returns */
    uint64_t lg = hf_blinear(x, -1, bt_decw(x), bt_bias(x), "decoder", g->hout, x->amp, T, V,
                             h, TC_ACT_TRANS, &g->xd, &g->bcd);
    if (x->amp) hf_free(x, &g->hout);
    bt_loss_fwd(x, lg);
    if (x->amp) hf_free(x, &g->hin);
    hf_free(x, &lg);
    hf_free(x, &g->bcd);
    for (int l = 0; l < x->L; l++)
        for (int k = 0; k < BT_NB; k++) hf_free(x, &g->ls[l].bc[k]);
    hf_free(x, &g->bct);
}

/* The loss's backward: the loss's gradient (ones), nll_loss's (zero-filled, in its input's
 * dtype; its saved total weight then released), under amp the fp32 cast's back to bf16,
 * log_softmax's in the logits' dtype (the log-probabilities then released). Returns the
 * logits' gradient. */
static uint64_t bt_loss_bwd(hf_x *x)
{
    struct hf_bert *g = x->brt;
    uint64_t TV = x->T * x->V, eb = x->CB, lb = x->amp ? F32 : eb;
    uint64_t dl = hf_nll_bwd(x, &g->lsm32, lb, lb);
    if (x->amp) {
        uint64_t d16 = hf_ew(x, -1, "log_probs.float.bwd", "d_log_probs16", TV * eb,
                             TC_ACT_TRANS, dl, 0, TV * F32, TK_ELEM);
        hf_free(x, &dl);
        dl = d16;
    }
    uint64_t dlg = hf_ew(x, -1, "log_softmax.bwd", "d_logits", TV * eb, TC_ACT_TRANS, dl,
                         x->logsm, 2 * TV * eb, TK_LOSS);
    hf_free(x, &dl);
    hf_free(x, &x->logsm);
    return dlg;
}

/* The loss and head backward: the loss, the decoder (autograd's thread makes its own cuBLAS
 * workspace at its first GEMM), the LayerNorm, amp's cast, gelu, transform.dense. Returns the
 * last layer's output gradient. */
static uint64_t bt_head_bwd(hf_x *x)
{
    struct hf_bert *g = x->brt;
    uint64_t T = x->T, V = x->V, h = x->h, n = T * h, G = 0;
    uint64_t dlg = bt_loss_bwd(x);
    uint64_t dh = hf_blinear_bwd(x, -1, bt_decw(x), bt_bias(x), "decoder", dlg, 1, &g->xd, 1,
                                 T, V, h, x->amp);
    if (!x->amp) g->hout = 0; /* bf16: the decoder's saved input, released above */
    uint64_t dta = 0;
    hf_ln_bwd(x, -1, "transform.LayerNorm", &dh, bt_hp(x, BH_LNW), bt_hp(x, BH_LNB), &g->taf,
              &g->tmu, &g->trs, &dta);
    if (x->amp) {
        uint64_t d = hf_ew(x, -1, "transform.LayerNorm.cast.bwd", "d_transform_act",
                           n * BF16, TC_ACT_TRANS, dta, 0, n * F32, TK_ELEM);
        hf_free(x, &dta);
        dta = d;
    }
    uint64_t dt = hf_ew(x, -1, "transform.gelu.bwd", "d_transform", n * x->CB, TC_ACT_TRANS,
                        dta, g->t, 2 * n * x->CB, TK_ACT);
    hf_free(x, &dta);
    hf_free(x, &g->t);
    G = hf_blinear_bwd(x, -1, bt_hp(x, BH_TW), bt_hp(x, BH_TB), "transform.dense", dt, 1,
                       &g->xt, 1, T, h, h, x->amp);
    if (!x->amp) g->hin = 0;
    return G;
}

/* The dropout-then-dense backward of a residual branch from the sum's gradient S (the
 * residual's own share, kept): amp: a bf16 copy first (the branch is bf16). */
static uint64_t bt_branch_bwd(hf_x *x, int l, const char *nm, uint64_t S, uint64_t *mask,
                              int jw, uint64_t *xs, int free_x, uint64_t N, uint64_t K)
{
    uint64_t n = x->T * x->h;
    char a[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".add.bwd");
    uint64_t gd = hf_down16(x, l, a, S);
    MS_JOIN(a, sizeof a, nm, ".dropout.bwd");
    uint64_t dd = hf_drop_bwd(x, l, a, gd, mask, n, x->CB);
    if (dd != gd && gd != S) hf_free(x, &gd);
    hf_free(x, mask);
    MS_JOIN(a, sizeof a, nm, ".dense");
    return hf_blinear_bwd_acc(x, l, bt_lp(x, l, jw), bt_lp(x, l, jw + 1), a, dd, dd != S, xs,
                              free_x, x->T, N, K, 0, NULL);
}

/* A layer's backward from its output's gradient *G: output.LayerNorm, the MLP branch
 * (dropout, output.dense, gelu, intermediate.dense) added into the residual's share,
 * attention.output.LayerNorm, the attention branch (dropout, dense, SDPA, then value, key,
 * query: autograd's order) added into the layer input's gradient, which *G becomes. Under
 * amp a projection's input gradient is added as soon as its cast's backward has made it,
 * before the weight's and bias's (autograd adds a node's output into its consumer's input
 * buffer before it runs the next node). */
static void bt_layer_bwd(hf_x *x, int l, uint64_t *G)
{
    bt_ls *s = bt_s(x, l);
    uint64_t T = x->T, h = x->h, f = x->f, nf = T * f * x->CB, S2 = 0, S1 = 0, dq, dk, dv;
    uint64_t nb = T * h * x->RB;
    hf_ln_bwd(x, l, "output.LayerNorm", G, bt_lp(x, l, BT_LN2W), bt_lp(x, l, BT_LN2B), &s->s2,
              &s->mu2, &s->rs2, &S2);
    uint64_t da = bt_branch_bwd(x, l, "output", S2, &s->m2, BT_FC2W, &s->act, 1, h, f);
    uint64_t dfc = hf_ew(x, l, "gelu.bwd", "d_act_in", nf, TC_ACT_TRANS, da, s->fc, 2 * nf,
                         TK_ACT);
    hf_free(x, &da);
    hf_free(x, &s->fc);
    hf_blinear_bwd_acc(x, l, bt_lp(x, l, BT_FC1W), bt_lp(x, l, BT_FC1B), "intermediate.dense",
                       dfc, 1, &s->xi, 1, T, f, h, x->amp, &S2);
    if (!x->amp) s->out1 = 0; /* bf16: intermediate.dense's saved input, released above */
    hf_ln_bwd(x, l, "attention.output.LayerNorm", &S2, bt_lp(x, l, BT_LN1W),
              bt_lp(x, l, BT_LN1B), &s->s1, &s->mu1, &s->rs1, &S1);
    uint64_t dao = bt_branch_bwd(x, l, "attention.output", S1, &s->m1, BT_OW, &s->ao, 0, h, h);
    const uint64_t in[] = { dao, s->q, s->k, s->v, s->ao, s->lse, s->seed, s->offs };
    hf_sdpa_bwd_op(x, l, x->brt->ad > 0, in, 8, &dq, &dk, &dv);
    hf_free(x, &dao);
    hf_free(x, &s->k);
    hf_free(x, &s->q);
    hf_free(x, &s->v);
    hf_free(x, &s->lse);
    hf_free(x, &s->ao);
    hf_free(x, &s->seed);
    hf_free(x, &s->offs);
    /* bf16: the three saved inputs are the layer input itself, released with the last */
    hf_blinear_bwd_acc(x, l, bt_lp(x, l, BT_VW), bt_lp(x, l, BT_VB), "value", dv, 1, &s->xv,
                       x->amp, T, h, h, x->amp, &S1);
    hf_blinear_bwd_acc(x, l, bt_lp(x, l, BT_KW), bt_lp(x, l, BT_KB), "key", dk, 1, &s->xk,
                       x->amp, T, h, h, x->amp, &S1);
    hf_blinear_bwd_acc(x, l, bt_lp(x, l, BT_QW), bt_lp(x, l, BT_QB), "query", dq, 1, &s->xq, 1,
                       T, h, h, x->amp, &S1);
    (void)nb;
    s->in = 0;
    *G = S1;
}

/* The embeddings' backward from layer 0's input gradient: dropout's, LayerNorm's, then (the
 * newest node first) the position add's (the gradient summed over the batch when b > 1) and
 * position_embeddings' backward, token_type_embeddings' (its expanded ids made contiguous),
 * word_embeddings' (embedding_dense_backward each, hf_embed_dense_bwd); the word gradient
 * goes into the tied decoder's .grad once the layer gradient is released. */
static void bt_embed_bwd(hf_x *x, uint64_t *G)
{
    struct hf_bert *g = x->brt;
    uint64_t T = x->T, h = x->h, n = T * h, dE = 0;
    uint64_t dd = hf_drop_bwd(x, -1, "embeddings.dropout.bwd", *G, &g->emask, n, x->RB);
    if (dd != *G) hf_free(x, G);
    hf_free(x, &g->emask);
    hf_ln_bwd(x, -1, "embeddings.LayerNorm", &dd, &x->p[BE_LNW], &x->p[BE_LNB], &g->esum,
              &g->emu, &g->ers, &dE);
    uint64_t dp = dE;
    if (x->b > 1)
        dp = hf_ew(x, -1, "embed.add_pos.bwd", "d_position_embeds", x->s * h * x->RB,
                   TC_ACT_TRANS, dE, 0, n * x->RB, TK_ELEM);
    hf_param *pp = &x->p[BE_POS], *tp = &x->p[BE_TYPE], *wp = &x->p[BE_WORD];
    uint64_t pg = hf_embed_dense_bwd(x, "position_embeddings", dp, g->pos_buf, x->s, 0,
                                     pp->n / h);
    hf_accum_grad(x, pp, pg);
    if (dp != dE) hf_free(x, &dp);
    uint64_t tg = hf_embed_dense_bwd(x, "token_type_embeddings", dE, g->tt, T, x->b > 1,
                                     tp->n / h);
    hf_accum_grad(x, tp, tg);
    hf_free(x, &g->tt);
    uint64_t wg = hf_embed_dense_bwd(x, "word_embeddings", dE, x->tokens, T, 0, wp->n / h);
    hf_free(x, &dE);
    hf_accum_grad(x, wp, wg);
    *G = 0;
}

static void bt_backward(hf_x *x)
{
    hf_mark(x, TM_LAYER, -1);
    uint64_t G = bt_head_bwd(x);
    for (int l = x->L - 1; l >= 0 && !x->st; l--) {
        hf_mark(x, TM_LAYER, l);
        bt_layer_bwd(x, l, &G);
    }
    hf_mark(x, TM_LAYER, -1);
    bt_embed_bwd(x, &G);
}

const hf_family hf_family_bert = {
    .embed_fwd = bt_embed_fwd, .layer_fwd = bt_layer_fwd, .head_fwd = bt_head_fwd,
    .backward = bt_backward,
};

/* gen_hf_ln.c — the hf profile's GPT-NeoX and OPT programs: transformers 5's
 * GPTNeoXForCausalLM (models/gpt_neox/modeling_gpt_neox.py) and OPTForCausalLM
 * (models/opt/modeling_opt.py) trained under PyTorch 2.11 eager as gen_hf.c's loop runs them.
 * Both are pre-LayerNorm decoders with biased nn.Linear layers, so they are built from GPT-2's
 * blocks (hf_ln_fwd, hf_blinear, hf_drop in gen_hf_gpt2.c) and the LLaMA program's rotary,
 * LM head, loss, AdamW and driver (gen_hf.c). Followed from the sources only: no measured
 * run backs them (docs/GENERATOR.md §11 "GPT-NeoX", "OPT"). */
#include "traces/gen_hf_int.h"

#include <stdlib.h>
#include <string.h>

/* GPTNeoXLayer's parameters in registration order: input_layernorm, post_attention_layernorm,
 * attention.query_key_value (h -> 3h), attention.dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h
 * (each weight then bias). The model: embed_in, the layers, final_layer_norm, embed_out. */
enum { NX_LN1W, NX_LN1B, NX_LN2W, NX_LN2B, NX_QKVW, NX_QKVB, NX_DW, NX_DB, NX_FC1W, NX_FC1B,
       NX_FC2W, NX_FC2B, NX_SLOTS };
static const char *const nx_slot_name[NX_SLOTS] = {
    "input_layernorm.w", "input_layernorm.b", "post_attention_layernorm.w",
    "post_attention_layernorm.b", "query_key_value.w", "query_key_value.b", "dense.w",
    "dense.b", "dense_h_to_4h.w", "dense_h_to_4h.b", "dense_4h_to_h.w", "dense_4h_to_h.b"
};

/* OPTDecoderLayer's: self_attn k, v, q, out_proj, self_attn_layer_norm, fc1, fc2,
 * final_layer_norm. The model (OPTDecoder registers its final_layer_norm before the layers):
 * embed_tokens, embed_positions (max_position_embeddings + 2 rows), final_layer_norm, the
 * layers, then lm_head when untied. */
enum { OP_KW, OP_KB, OP_VW, OP_VB, OP_QW, OP_QB, OP_OW, OP_OB, OP_LN1W, OP_LN1B, OP_FC1W,
       OP_FC1B, OP_FC2W, OP_FC2B, OP_LN2W, OP_LN2B, OP_SLOTS };
static const char *const op_slot_name[OP_SLOTS] = {
    "k_proj.w", "k_proj.b", "v_proj.w", "v_proj.b", "q_proj.w", "q_proj.b", "out_proj.w",
    "out_proj.b", "self_attn_layer_norm.w", "self_attn_layer_norm.b", "fc1.w", "fc1.b",
    "fc2.w", "fc2.b", "final_layer_norm.w", "final_layer_norm.b"
};
#define OP_PRE 4
#define NX_PRE 1
#define LN_NB 6 /* biased linears of a layer (their amp bias casts) */

/* What one layer's forward saved for its backward. */
typedef struct ln_ls {
    uint64_t in;                 /* the layer input (saved by its norm(s)) */
    uint64_t n1, mu1, rs1, n2, mu2, rs2; /* norms: output (bf16: a linear's saved input) */
    uint64_t r1;                 /* the residual after attention (sequential layers) */
    uint64_t xa, qkv;            /* GPT-NeoX: query_key_value's saved input and output */
    uint64_t xq, xk, xv;         /* OPT: the projections' saved inputs */
    uint64_t q, k, v;            /* what SDPA saves (GPT-NeoX's v: a view of qkv) */
    uint64_t seed, offs, ao, lse;
    uint64_t aoc;                /* GPT-NeoX: the output's [b, s, heads, d] copy, dense's input */
    uint64_t m1, m2;             /* dropout masks: attention output, MLP output */
    uint64_t xf, fc, act;        /* fc1's saved input, output (gelu saves it), activation */
    uint64_t bc[LN_NB];          /* amp: bias casts, held by autocast's cache */
} ln_ls;

struct hf_lnm {
    ln_ls *ls;
    uint64_t emb, emask, pos_emb, amask, pos_ids, pos_off, lnf_mu, lnf_rs;
    double pd, ad;               /* residual (hidden) and attention dropout */
    uint64_t rd;                 /* GPT-NeoX: rotary dimensions per head */
    int parallel, gelu;
};

static int ln_neox(const hf_x *x) { return x->lnfam == HF_LN_NEOX; }
static size_t ln_pre(const hf_x *x) { return ln_neox(x) ? NX_PRE : OP_PRE; }
static size_t ln_slots(const hf_x *x) { return ln_neox(x) ? NX_SLOTS : OP_SLOTS; }
static hf_param *ln_lp(hf_x *x, int l, int j)
{
    return &x->p[ln_pre(x) + (size_t)l * ln_slots(x) + (size_t)j];
}
/* final_layer_norm's weight (j 0) and bias (j 1) */
static hf_param *ln_fnorm(hf_x *x, int j)
{
    return ln_neox(x) ? &x->p[NX_PRE + (size_t)x->L * NX_SLOTS + (size_t)j] : &x->p[2 + j];
}

size_t hf_ln_nparams(const hf_x *x)
{
    size_t L = (size_t)x->L;
    return ln_neox(x) ? NX_PRE + L * NX_SLOTS + 2 + !x->tied : OP_PRE + L * OP_SLOTS + !x->tied;
}

void hf_ln_plan_params(hf_x *x)
{
    uint64_t h = x->h, f = x->f;
    x->p[0].n = x->V * h;
    if (!ln_neox(x)) x->p[1].n = x->c->model.pos_rows * h;
    for (int j = 0; j < 2; j++) ln_fnorm(x, j)->n = h;
    for (int l = 0; l < x->L; l++) {
        uint64_t nx[NX_SLOTS] = { h, h, h, h, h * (x->hq + 2 * x->kv), x->hq + 2 * x->kv,
                                  x->hq * h, h, h * f, f, f * h, h };
        uint64_t op[OP_SLOTS] = { h * h, h, h * h, h, h * h, h, h * h, h, h, h, h * f, f,
                                  f * h, h, h, h };
        for (size_t j = 0; j < ln_slots(x); j++) {
            ln_lp(x, l, (int)j)->n = ln_neox(x) ? nx[j] : op[j];
            ln_lp(x, l, (int)j)->layer = l;
        }
    }
    for (size_t i = 0; i < x->np; i++)
        if (i < ln_pre(x) || i >= ln_pre(x) + (size_t)x->L * ln_slots(x)) x->p[i].layer = -1;
    if (!x->tied) x->p[x->np - 1].n = x->V * h;
}

void hf_ln_pname(const hf_x *x, size_t i, char *nm)
{
    size_t body = ln_pre(x) + (size_t)x->L * ln_slots(x);
    int nx = ln_neox(x);
    if (i == 0) snprintf(nm, TRACE_NAME_MAX, nx ? "embed_in.w" : "embed_tokens.w");
    else if (!nx && i == 1) MS_JOIN(nm, TRACE_NAME_MAX, "embed_positions.w");
    else if ((!nx && i == 2) || (nx && i == body))
        MS_JOIN(nm, TRACE_NAME_MAX, "final_layer_norm.w");
    else if ((!nx && i == 3) || (nx && i == body + 1))
        MS_JOIN(nm, TRACE_NAME_MAX, "final_layer_norm.b");
    else if (i >= body) snprintf(nm, TRACE_NAME_MAX, nx ? "embed_out.w" : "lm_head.w");
    else snprintf(nm, TRACE_NAME_MAX, "L%d.%s", x->p[i].layer,
                  (nx ? nx_slot_name : op_slot_name)[(i - ln_pre(x)) % ln_slots(x)]);
}

/* GPT-NeoX: the rotary's dimensions per head, int(head_size * rotary_pct). */
static uint64_t nx_rotary_dims(const model_t *m)
{
    double pct = m->rotary_pct > 0 ? m->rotary_pct : 1.0;
    return (uint64_t)((double)model_head_dim(m) * pct);
}

ms_status hf_ln_check(const gen_config *c, ms_error *err)
{
    const model_t *m = &c->model;
    int neox = !strcmp(m->family, "gpt_neox");
    int act = m->act == MODEL_ACT_GELU || m->act == MODEL_ACT_RELU ||
              (m->act == MODEL_ACT_DEFAULT && m->mlp != MODEL_MLP_SWIGLU);
    if (m->norm != MODEL_NORM_LAYER || m->mlp == MODEL_MLP_SWIGLU || !act || !m->has_bias ||
        m->kv_heads != m->heads || m->head_dim ||
        m->pos != (neox ? MODEL_POS_ROTARY : MODEL_POS_LEARNED) || (!neox && !m->pos_rows))
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: family %s is modelled as %s "
                       "(LayerNorm, biased linears, a gelu or relu MLP, full multi-head "
                       "attention, %s); %s is not", m->family,
                       neox ? "GPTNeoXForCausalLM" : "OPTForCausalLM",
                       neox ? "rotary positions" : "learned positions", m->name);
    if (neox) {
        uint64_t rd = nx_rotary_dims(m);
        if (rd < 2 || rd % 2)
            return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: gpt_neox rotary over %llu "
                           "of %llu head dimensions (rotary_pct %g): an even count of at "
                           "least 2 is modelled", (unsigned long long)rd,
                           (unsigned long long)model_head_dim(m), m->rotary_pct);
    } else if (m->max_seq && c->seq > m->max_seq) {
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: opt sequence %llu beyond its "
                       "%llu positions", (unsigned long long)c->seq,
                       (unsigned long long)m->max_seq);
    }
    return MS_OK;
}

ms_status hf_ln_begin(hf_x *x)
{
    x->lnm = calloc(1, sizeof *x->lnm);
    if (!x->lnm) return MS_ERR_NOMEM;
    x->lnm->ls = calloc((size_t)x->L, sizeof *x->lnm->ls);
    if (!x->lnm->ls) return MS_ERR_NOMEM;
    const model_t *m = &x->c->model;
    x->lnm->pd = m->resid_dropout;
    x->lnm->ad = m->attn_dropout;
    x->lnm->rd = nx_rotary_dims(m);
    x->lnm->parallel = m->parallel_residual;
    x->lnm->gelu = m->act == MODEL_ACT_GELU || (m->act == MODEL_ACT_DEFAULT &&
                                                m->mlp == MODEL_MLP_GELU);
    return MS_OK;
}

void hf_ln_end(hf_x *x)
{
    if (x->lnm) free(x->lnm->ls);
    free(x->lnm);
    x->lnm = NULL;
}

/* ---- shared pieces ---- */

/* SDPA (sdpa_attention_forward, is_causal, dropout_p = the attention dropout in training) on
 * q, k and v (the input id vin: GPT-NeoX's v is a view of qkv): amp with fp32 q and k (q32):
 * SDPA's bf16 casts of k, then q. cuDNN saves its inputs, the output ([b, s, heads, d] order:
 * the out projection reads it as is), the fp32 log-sum-exp and, with dropout, the RNG seed
 * and offset. */
static void ln_sdpa_fwd(hf_x *x, int l, ln_ls *s, uint64_t qe, uint64_t ke, uint64_t vin,
                        int q32)
{
    uint64_t T = x->T;
    s->q = qe;
    s->k = ke;
    if (q32) {
        s->k = hf_ew(x, l, "sdpa.kcast", "k", T * x->kv * BF16, TC_ACT_SKEL, ke, 0,
                     T * x->kv * F32, TK_ELEM);
        s->q = hf_ew(x, l, "sdpa.qcast", "q", T * x->hq * BF16, TC_ACT_SKEL, qe, 0,
                     T * x->hq * F32, TK_ELEM);
    }
    const uint64_t in[] = { s->q, s->k, vin };
    hf_sdpa_fwd_op(x, l, x->lnm->ad > 0, in, 3, &s->ao, &s->lse, &s->seed, &s->offs);
    if (q32) {
        hf_free(x, &qe);
        hf_free(x, &ke);
    }
}

/* SDPA's backward (cuDNN): dq, dk, dv and its workspace, then everything SDPA saved (with
 * GPT-NeoX's v goes query_key_value's output). */
static void ln_sdpa_bwd(hf_x *x, int l, ln_ls *s, uint64_t *dao, uint64_t *dq, uint64_t *dk,
                        uint64_t *dv)
{
    uint64_t vin = s->v ? s->v : s->qkv;
    const uint64_t in[] = { *dao, s->q, s->k, vin, s->ao, s->lse, s->seed, s->offs };
    hf_sdpa_bwd_op(x, l, x->lnm->ad > 0, in, 8, dq, dk, dv);
    hf_free(x, dao);
    hf_free(x, &s->k);
    hf_free(x, &s->q);
    hf_free(x, &s->v);
    hf_free(x, &s->qkv);
    hf_free(x, &s->lse);
    hf_free(x, &s->ao);
    hf_free(x, &s->seed);
    hf_free(x, &s->offs);
}

/* The MLP (GPTNeoXMLP: dense_h_to_4h, act, dense_4h_to_h; OPT: fc1, act, fc2) on the norm's
 * output nrm, then the residual branch's dropout. gelu (F.gelu, one kernel) saves its input,
 * relu (nn.ReLU) its output; the second linear saves the activation. free_early (OPT): the
 * norm's output goes after fc1 under amp (its variable is reassigned). Returns the dropout's
 * output (bf16). */
static uint64_t ln_mlp_fwd(hf_x *x, int l, ln_ls *s, int j1, int j2, const char *n1,
                           const char *n2, uint64_t *nrm, int free_early)
{
    uint64_t T = x->T, h = x->h, f = x->f, n = T * h, xp, mp;
    int gelu = x->lnm->gelu;
    s->fc = hf_blinear(x, l, ln_lp(x, l, j1), ln_lp(x, l, j1 + 1), n1, *nrm, x->amp, T, f, h,
                       gelu ? TC_ACT_SKEL : TC_ACT_TRANS, &s->xf, &s->bc[4]);
    if (free_early && x->amp) hf_free(x, nrm);
    s->act = hf_ew(x, l, gelu ? "gelu" : "relu", "act_out", T * f * x->CB, TC_ACT_SKEL, s->fc,
                   0, T * f * x->CB, TK_ACT);
    if (!gelu) hf_free(x, &s->fc);
    mp = hf_blinear(x, l, ln_lp(x, l, j2), ln_lp(x, l, j2 + 1), n2, s->act, 0, T, h, f,
                    TC_ACT_TRANS, &xp, &s->bc[5]);
    uint64_t d = hf_drop(x, l, "mlp.drop", x->lnm->pd, mp, n, x->CB, TC_ACT_TRANS,
                         "mlp_drop_out", &s->m2);
    if (d != mp) hf_free(x, &mp);
    return d;
}

/* The MLP branch's backward from the bf16 gradient gd of its dropout's output (freed here
 * when own): dropout's masked_scale, the second linear, the activation's backward
 * (gelu_backward from the input, threshold_backward from relu's output), the first linear.
 * Returns the norm output's gradient (residual dtype); bf16: the norm's output, the first
 * linear's saved input, is released. */
static uint64_t ln_mlp_bwd(hf_x *x, int l, ln_ls *s, int j1, int j2, const char *n1,
                           const char *n2, uint64_t gd, int own)
{
    uint64_t T = x->T, h = x->h, f = x->f, n = T * h, nf = T * f * x->CB;
    int gelu = x->lnm->gelu, fdy = own;
    uint64_t dd = hf_drop_bwd(x, l, "mlp.drop.bwd", gd, &s->m2, n, x->CB);
    hf_free(x, &s->m2);
    if (dd != gd) {
        if (own) hf_free(x, &gd);
        fdy = 1;
    }
    uint64_t da = hf_blinear_bwd(x, l, ln_lp(x, l, j2), ln_lp(x, l, j2 + 1), n2, dd, fdy,
                                 &s->act, gelu, T, h, f, 0);
    uint64_t dfc = hf_ew(x, l, gelu ? "gelu.bwd" : "relu.bwd", "d_act_in", nf, TC_ACT_TRANS, da,
                         gelu ? s->fc : s->act, 2 * nf, TK_ACT);
    hf_free(x, &da);
    if (gelu) hf_free(x, &s->fc);
    else hf_free(x, &s->act);
    uint64_t dn = hf_blinear_bwd(x, l, ln_lp(x, l, j1), ln_lp(x, l, j1 + 1), n1, dfc, 1, &s->xf,
                                 1, T, f, h, x->amp);
    if (!x->amp) s->n2 = 0;
    return dn;
}

/* Adds g (freed) into *acc in place; the first is kept. */
static void ln_acc(hf_x *x, int l, uint64_t *acc, uint64_t *g)
{
    if (!*acc) {
        *acc = *g;
        *g = 0;
        return;
    }
    hf_ew_inplace(x, l, "grad_add", *acc, *g, x->T * x->h * x->RB);
    hf_free(x, g);
}

/* ---- GPT-NeoX ---- */

/* Partial rotary of q or k (apply_rotary_pos_emb: the first rd dimensions of each head, a
 * strided view of qkv, rotated as LLaMA's, promoted to fp32 under amp; then
 * cat([rotated, pass-through]) into a new [T, heads·d] tensor in the promoted dtype). */
static uint64_t nx_rope(hf_x *x, int l, const char *nm, ln_ls *s)
{
    uint64_t T = x->T, w = x->heads * x->lnm->rd, eb = x->amp ? F32 : x->CB;
    char op[TRACE_NAME_MAX], a[TRACE_NAME_MAX];
    uint64_t e = hf_rope_w(x, l, nm, s->qkv, w, x->CB, TC_ACT_TRANS);
    MS_JOIN(op, sizeof op, nm, ".rope_pass_cat");
    MS_JOIN(a, sizeof a, nm, "_rot");
    /* its pass-through input is a strided slice of qkv: cat copies each part on the
       non-vectorized path (gpu.ew_nv_elems_per_s) */
    uint64_t c = hf_ew_nv(x, l, op, a, T * x->hq * eb, x->amp ? TC_ACT_TRANS : TC_ACT_SKEL, e,
                          s->qkv, T * w * eb + T * (x->hq - w) * x->CB, TK_ELEM, T * x->hq);
    hf_free(x, &e);
    return c;
}

/* Its backward from the gradient *df of the concatenation [T, heads·d] (promoted dtype):
 * cat's backward narrows it (amp: the pass-through part cast back to bf16, autograd's
 * validate_outputs); the rotary's backward on the rotated part; each slice's backward a
 * zero-filled [T, heads·d] with its part copied in, summed in place. Returns q's (k's)
 * gradient in bf16. */
static uint64_t nx_rope_bwd(hf_x *x, int l, const char *nm, uint64_t *df)
{
    uint64_t T = x->T, w = x->heads * x->lnm->rd, pw = x->hq - w, eb = x->amp ? F32 : x->CB;
    uint64_t CB = x->CB, pass = 0, n = T * x->hq;
    char op[TRACE_NAME_MAX];
    if (pw && eb != CB) {
        MS_JOIN(op, sizeof op, nm, ".pass.bwd_cast");
        pass = hf_ew_nv(x, l, op, op, T * pw * CB, TC_ACT_TRANS, *df, 0, T * pw * eb, TK_ELEM,
                        T * pw);
    }
    int view = pw && !pass; /* the pass-through gradient is a view of *df */
    uint64_t full = *df;
    uint64_t r = hf_rope_bwd_w(x, l, nm, df, w, CB, view);
    MS_JOIN(op, sizeof op, nm, ".rot_slice.bwd");
    uint64_t zr = hf_slice_bwd(x, l, op, r, n * CB, T * w * CB, T * w);
    hf_free(x, &r);
    MS_JOIN(op, sizeof op, nm, ".pass_slice.bwd");
    uint64_t zp = hf_slice_bwd(x, l, op, pass ? pass : view ? full : 0, n * CB, T * pw * CB,
                               T * pw);
    hf_free(x, &pass);
    if (view) {
        *df = full;
        hf_free(x, df);
    }
    hf_ew_inplace(x, l, "slice.grad_add", zr, zp, n * CB);
    hf_free(x, &zp);
    return zr;
}

/* GPTNeoXLayer.forward: attention(input_layernorm(x)) and its dropout, then with
 * use_parallel_residual mlp(post_attention_layernorm(x)) and its dropout, the layer's output
 * mlp_output + attn_output + x (two adds: the branches, then the residual); without it
 * x + attn, then that + mlp(post_attention_layernorm(.)). */
static uint64_t nx_layer_fwd(hf_x *x, int l, uint64_t in)
{
    ln_ls *s = &x->lnm->ls[l];
    uint64_t T = x->T, h = x->h, n = T * h, w3 = x->hq + 2 * x->kv, xd, src = in;
    trace_class lnc = x->amp ? TC_ACT_TRANS : TC_ACT_SKEL; /* bf16: the linear saves it */
    memset(s, 0, sizeof *s);
    s->in = in;
    s->n1 = hf_ln_fwd(x, l, "input_layernorm", in, ln_lp(x, l, NX_LN1W), ln_lp(x, l, NX_LN1B),
                      lnc, &s->mu1, &s->rs1);
    s->qkv = hf_blinear(x, l, ln_lp(x, l, NX_QKVW), ln_lp(x, l, NX_QKVB), "query_key_value",
                        s->n1, x->amp, T, w3, h, TC_ACT_SKEL, &s->xa, &s->bc[0]);
    uint64_t qe = nx_rope(x, l, "q", s);
    uint64_t ke = nx_rope(x, l, "k", s);
    ln_sdpa_fwd(x, l, s, qe, ke, s->qkv, x->amp);
    /* The rotary's torch.cat leaves q contiguous in [b, heads, s, d]; cuDNN's SDPA gives its
       output q's layout (alloc_with_matching_layout), so attn_output.transpose(1, 2)
       .contiguous() copies it: SDPA saves its output, the dense linear the copy (the recorded
       GPT-NeoX traces hold both; LLaMA's q keeps the projection's [b, s, heads, d] strides,
       so there the transpose is free) */
    s->aoc = hf_ew_nv(x, l, "attn_out.contiguous", "attn_out_bshd", T * x->hq * x->CB,
                      TC_ACT_SKEL, s->ao, 0, T * x->hq * x->CB, TK_ELEM, T * x->hq);
    uint64_t po = hf_blinear(x, l, ln_lp(x, l, NX_DW), ln_lp(x, l, NX_DB), "dense", s->aoc, 0,
                             T, h, x->hq, TC_ACT_TRANS, &xd, &s->bc[1]);
    if (x->amp) hf_free(x, &s->n1);
    uint64_t d1 = hf_drop(x, l, "post_attention_dropout", x->lnm->pd, po, n, x->CB,
                          TC_ACT_TRANS, "attn_drop_out", &s->m1);
    if (d1 != po) hf_free(x, &po);
    if (!x->lnm->parallel) {
        s->r1 = hf_ew(x, l, "add1", "resid1", n * x->RB, TC_ACT_SKEL, d1, in,
                      n * (x->RB + x->CB), TK_ELEM);
        hf_free(x, &d1);
        src = s->r1;
    }
    s->n2 = hf_ln_fwd(x, l, "post_attention_layernorm", src, ln_lp(x, l, NX_LN2W),
                      ln_lp(x, l, NX_LN2B), lnc, &s->mu2, &s->rs2);
    uint64_t d2 = ln_mlp_fwd(x, l, s, NX_FC1W, NX_FC2W, "dense_h_to_4h", "dense_4h_to_h",
                             &s->n2, 0);
    if (x->amp) hf_free(x, &s->n2);
    int last = l + 1 == x->L;
    int nl = last ? -1 : l + 1;
    const char *nn = last ? "final_norm.input" : "input";
    uint64_t out;
    if (x->lnm->parallel) {
        uint64_t br = hf_ew(x, l, "add_branches", "branches", n * x->CB, TC_ACT_TRANS, d2, d1,
                            2 * n * x->CB, TK_ELEM);
        hf_free(x, &d2);
        hf_free(x, &d1);
        out = hf_ew(x, nl, "add_resid", nn, n * x->RB, TC_ACT_SKEL, br, in,
                    n * (x->RB + x->CB), TK_ELEM);
        hf_free(x, &br);
    } else {
        out = hf_ew(x, nl, "add2", nn, n * x->RB, TC_ACT_SKEL, d2, s->r1, n * (x->RB + x->CB),
                    TK_ELEM);
        hf_free(x, &d2);
    }
    return out;
}

/* The attention branch's backward from the bf16 gradient gd of its dropout's output (freed
 * when own): dropout, dense, SDPA, the rotary's (k, then q), split's backward (the three
 * heads-major gradients concatenated [T,3h]) and the transpose-and-view's copy back to
 * [b, s, 3h], then query_key_value. Returns the norm output's gradient. */
static uint64_t nx_attn_bwd(hf_x *x, int l, ln_ls *s, uint64_t gd, int own)
{
    uint64_t T = x->T, h = x->h, n = T * h, w3 = x->hq + 2 * x->kv, dq, dk, dv;
    int fdy = own;
    uint64_t dd = hf_drop_bwd(x, l, "post_attention_dropout.bwd", gd, &s->m1, n, x->CB);
    hf_free(x, &s->m1);
    if (dd != gd) {
        if (own) hf_free(x, &gd);
        fdy = 1;
    }
    uint64_t dao = hf_blinear_bwd(x, l, ln_lp(x, l, NX_DW), ln_lp(x, l, NX_DB), "dense", dd, fdy,
                                  &s->aoc, 1, T, h, x->hq, 0);
    ln_sdpa_bwd(x, l, s, &dao, &dq, &dk, &dv);
    uint64_t dqe = hf_up32(x, l, "sdpa.qcast.bwd", &dq, T * x->hq);
    uint64_t dke = hf_up32(x, l, "sdpa.kcast.bwd", &dk, T * x->kv);
    uint64_t dk2 = nx_rope_bwd(x, l, "k", &dke);
    uint64_t dq2 = nx_rope_bwd(x, l, "q", &dqe);
    /* split's backward concatenates along the head dimension, the transpose-and-view's
       backward copies [b, heads, s, 3d] back to [b, s, heads·3d]: both write strided */
    uint64_t cat = hf_ew_nv(x, l, "qkv.split.bwd", "d_qkv_heads", T * w3 * x->CB, TC_ACT_TRANS,
                            dq2, dk2, T * w3 * x->CB, TK_ELEM, T * w3);
    hf_free(x, &dq2);
    hf_free(x, &dk2);
    hf_free(x, &dv);
    uint64_t dqkv = hf_ew_nv(x, l, "qkv.view.bwd", "d_qkv", T * w3 * x->CB, TC_ACT_TRANS, cat, 0,
                             T * w3 * x->CB, TK_ELEM, T * w3);
    hf_free(x, &cat);
    uint64_t dn = hf_blinear_bwd(x, l, ln_lp(x, l, NX_QKVW), ln_lp(x, l, NX_QKVB),
                                 "query_key_value", dqkv, 1, &s->xa, 1, T, w3, h, x->amp);
    if (!x->amp) s->n1 = 0; /* bf16: query_key_value's saved input, released above */
    return dn;
}

/* A layer's backward from the residual gradient *G: the MLP branch first (created last),
 * then the attention's; parallel: both read one bf16 copy (amp) of *G, and both norms'
 * input gradients are added into *G (post_attention_layernorm's leaves the shared input
 * saved for input_layernorm's). */
static void nx_layer_bwd(hf_x *x, int l, ln_ls *s, uint64_t *G)
{
    if (x->lnm->parallel) {
        uint64_t gs = hf_down16(x, l, "add_resid.bwd", *G);
        uint64_t dn2 = ln_mlp_bwd(x, l, s, NX_FC1W, NX_FC2W, "dense_h_to_4h", "dense_4h_to_h",
                                  gs, 0);
        hf_ln_bwd_k(x, l, "post_attention_layernorm", &dn2, ln_lp(x, l, NX_LN2W),
                    ln_lp(x, l, NX_LN2B), &s->in, &s->mu2, &s->rs2, G, 1);
        uint64_t dn1 = nx_attn_bwd(x, l, s, gs, gs != *G);
        hf_ln_bwd(x, l, "input_layernorm", &dn1, ln_lp(x, l, NX_LN1W), ln_lp(x, l, NX_LN1B),
                  &s->in, &s->mu1, &s->rs1, G);
        return;
    }
    uint64_t gd = hf_down16(x, l, "add2.bwd", *G);
    uint64_t dn2 = ln_mlp_bwd(x, l, s, NX_FC1W, NX_FC2W, "dense_h_to_4h", "dense_4h_to_h", gd,
                              gd != *G);
    hf_ln_bwd(x, l, "post_attention_layernorm", &dn2, ln_lp(x, l, NX_LN2W),
              ln_lp(x, l, NX_LN2B), &s->r1, &s->mu2, &s->rs2, G);
    gd = hf_down16(x, l, "add1.bwd", *G);
    uint64_t dn1 = nx_attn_bwd(x, l, s, gd, gd != *G);
    hf_ln_bwd(x, l, "input_layernorm", &dn1, ln_lp(x, l, NX_LN1W), ln_lp(x, l, NX_LN1B),
              &s->in, &s->mu1, &s->rs1, G);
}

/* ---- OPT ---- */

/* OPTDecoderLayer.forward (do_layer_norm_before): x + dropout(self_attn(
 * self_attn_layer_norm(x))), then that + dropout(fc2(act(fc1(final_layer_norm(.))))).
 * OPTAttention scales the query after q_proj (q_proj(x) * scaling, a new tensor that SDPA
 * saves; SDPA then runs with scale 1); k and v are the projections' outputs (views). */
static uint64_t op_layer_fwd(hf_x *x, int l, uint64_t in)
{
    ln_ls *s = &x->lnm->ls[l];
    uint64_t T = x->T, h = x->h, n = T * h, xd;
    trace_class lnc = x->amp ? TC_ACT_TRANS : TC_ACT_SKEL;
    memset(s, 0, sizeof *s);
    s->in = in;
    s->n1 = hf_ln_fwd(x, l, "self_attn_layer_norm", in, ln_lp(x, l, OP_LN1W),
                      ln_lp(x, l, OP_LN1B), lnc, &s->mu1, &s->rs1);
    uint64_t q0 = hf_blinear(x, l, ln_lp(x, l, OP_QW), ln_lp(x, l, OP_QB), "q_proj", s->n1,
                             x->amp, T, h, h, TC_ACT_TRANS, &s->xq, &s->bc[0]);
    s->q = hf_ew(x, l, "q_scale", "q_scaled", n * x->CB, TC_ACT_SKEL, q0, 0, n * x->CB, TK_ELEM);
    hf_free(x, &q0);
    s->k = hf_blinear(x, l, ln_lp(x, l, OP_KW), ln_lp(x, l, OP_KB), "k_proj", s->n1, x->amp, T,
                      h, h, TC_ACT_SKEL, &s->xk, &s->bc[1]);
    s->v = hf_blinear(x, l, ln_lp(x, l, OP_VW), ln_lp(x, l, OP_VB), "v_proj", s->n1, x->amp, T,
                      h, h, TC_ACT_SKEL, &s->xv, &s->bc[2]);
    ln_sdpa_fwd(x, l, s, s->q, s->k, s->v, 0);
    uint64_t po = hf_blinear(x, l, ln_lp(x, l, OP_OW), ln_lp(x, l, OP_OB), "out_proj", s->ao, 0,
                             T, h, h, TC_ACT_TRANS, &xd, &s->bc[3]);
    if (x->amp) hf_free(x, &s->n1);
    uint64_t d1 = hf_drop(x, l, "attn.drop", x->lnm->pd, po, n, x->CB, TC_ACT_TRANS,
                          "attn_drop_out", &s->m1);
    if (d1 != po) hf_free(x, &po);
    s->r1 = hf_ew(x, l, "add1", "resid1", n * x->RB, TC_ACT_SKEL, in, d1, n * (x->RB + x->CB),
                  TK_ELEM);
    hf_free(x, &d1);
    s->n2 = hf_ln_fwd(x, l, "final_layer_norm", s->r1, ln_lp(x, l, OP_LN2W),
                      ln_lp(x, l, OP_LN2B), lnc, &s->mu2, &s->rs2);
    uint64_t d2 = ln_mlp_fwd(x, l, s, OP_FC1W, OP_FC2W, "fc1", "fc2", &s->n2, 1);
    int last = l + 1 == x->L;
    uint64_t out = hf_ew(x, last ? -1 : l + 1, "add2", last ? "final_norm.input" : "input",
                         n * x->RB, TC_ACT_SKEL, s->r1, d2, n * (x->RB + x->CB), TK_ELEM);
    hf_free(x, &d2);
    return out;
}

/* The attention's backward: dropout, out_proj, SDPA, then v, k and the query's scaling and
 * q (autograd's order), their input gradients summed; self_attn_layer_norm. */
static void op_attn_bwd(hf_x *x, int l, ln_ls *s, uint64_t *G)
{
    uint64_t T = x->T, h = x->h, n = T * h, dq, dk, dv, dxa = 0, d;
    uint64_t gd = hf_down16(x, l, "add1.bwd", *G);
    uint64_t dd = hf_drop_bwd(x, l, "attn.drop.bwd", gd, &s->m1, n, x->CB);
    hf_free(x, &s->m1);
    if (dd != gd && gd != *G) hf_free(x, &gd);
    uint64_t dao = hf_blinear_bwd(x, l, ln_lp(x, l, OP_OW), ln_lp(x, l, OP_OB), "out_proj", dd,
                                  dd != *G, &s->ao, 0, T, h, h, 0);
    ln_sdpa_bwd(x, l, s, &dao, &dq, &dk, &dv);
    d = hf_blinear_bwd(x, l, ln_lp(x, l, OP_VW), ln_lp(x, l, OP_VB), "v_proj", dv, 1, &s->xv,
                       x->amp, T, h, h, x->amp);
    ln_acc(x, l, &dxa, &d);
    d = hf_blinear_bwd(x, l, ln_lp(x, l, OP_KW), ln_lp(x, l, OP_KB), "k_proj", dk, 1, &s->xk,
                       x->amp, T, h, h, x->amp);
    ln_acc(x, l, &dxa, &d);
    uint64_t dqs = hf_ew(x, l, "q_scale.bwd", "d_q_proj_out", n * x->CB, TC_ACT_TRANS, dq, 0,
                         n * x->CB, TK_ELEM);
    hf_free(x, &dq);
    d = hf_blinear_bwd(x, l, ln_lp(x, l, OP_QW), ln_lp(x, l, OP_QB), "q_proj", dqs, 1, &s->xq,
                       x->amp, T, h, h, x->amp);
    ln_acc(x, l, &dxa, &d);
    if (!x->amp) hf_free(x, &s->n1); /* bf16: the three projections' saved input */
    hf_ln_bwd(x, l, "self_attn_layer_norm", &dxa, ln_lp(x, l, OP_LN1W), ln_lp(x, l, OP_LN1B),
              &s->in, &s->mu1, &s->rs1, G);
}

static void op_layer_bwd(hf_x *x, int l, ln_ls *s, uint64_t *G)
{
    uint64_t gd = hf_down16(x, l, "add2.bwd", *G);
    uint64_t dn2 = ln_mlp_bwd(x, l, s, OP_FC1W, OP_FC2W, "fc1", "fc2", gd, gd != *G);
    hf_ln_bwd(x, l, "final_layer_norm", &dn2, ln_lp(x, l, OP_LN2W), ln_lp(x, l, OP_LN2B),
              &s->r1, &s->mu2, &s->rs2, G);
    op_attn_bwd(x, l, s, G);
}

/* ---- embeddings, head, one step ---- */

/* GPT-NeoX: embed_in(ids) (inputs_embeds, referenced until the model's forward returns),
 * emb_dropout (hidden_dropout), the rotary's cos/sin of rd columns. OPT: embed_tokens(ids);
 * the all-ones attention mask [b, s] (fp32) and the positions from it (cumsum, * mask, - 1,
 * .long(): held until the decoder returns); embed_positions(positions + 2) (OPT's offset of
 * 2 rows; the shifted ids saved by its backward); their sum is layer 0's input (no embedding
 * dropout). */
static uint64_t ln_embed_fwd(hf_x *x)
{
    struct hf_lnm *g = x->lnm;
    uint64_t T = x->T, h = x->h, oid, in;
    int nx = ln_neox(x), drop = nx && g->pd > 0;
    int direct = nx && !drop; /* the embedding's output is layer 0's input */
    g->emb = hf_alloc_op(x, direct ? 0 : -1, direct ? "input" : "inputs_embeds",
                         T * h * x->RB, direct ? TC_ACT_SKEL : TC_ACT_TRANS, 1, &oid);
    hf_op o = { .kind = TK_EMBED, .layer = -1, .what = nx ? "embed_in" : "embed_tokens",
                .br = T * (h * x->PB + 8), .bw = T * h * x->RB, .in = { x->tokens, x->p[0].id },
                .nin = 2, .out = { g->emb }, .nout = 1 };
    hf_mem_op(x, oid, o);
    if (nx) {
        in = g->emb;
        if (drop) {
            oid = x->next_oid++;
            g->emask = hf_alloc(x, -1, "embed.drop_mask", T * h, TC_ACT_SKEL, (int64_t)oid);
            in = hf_alloc(x, 0, "input", T * h * x->RB, TC_ACT_SKEL, (int64_t)oid);
            hf_op d = { .kind = TK_ELEM, .layer = -1, .what = "emb_dropout",
                        .br = T * h * x->RB, .bw = T * h * (x->RB + 1), .in = { g->emb },
                        .nin = 1, .out = { g->emask, in }, .nout = 2,
                        .flops = EW_FLOPS * (double)(T * h) };
            hf_mem_op(x, oid, d);
        } else {
            g->emb = 0; /* layer 0 saves it */
        }
        hf_rope_tables(x, g->rd);
        return in;
    }
    g->amask = hf_alloc_op(x, -1, "attention_mask", T * F32, TC_ACT_TRANS, 1, &oid);
    hf_op m = { .kind = TK_ELEM, .layer = -1, .what = "ones", .bw = T * F32,
                .out = { g->amask }, .nout = 1, .flops = (double)T };
    hf_mem_op(x, oid, m);
    uint64_t cs = hf_ew(x, -1, "pos.cumsum", "pos_cumsum", T * F32, TC_ACT_TRANS, g->amask, 0,
                        T * F32, TK_ELEM);
    uint64_t mu = hf_ew(x, -1, "pos.mul", "pos_mul", T * F32, TC_ACT_TRANS, cs, g->amask,
                        2 * T * F32, TK_ELEM);
    hf_free(x, &cs);
    uint64_t sb = hf_ew(x, -1, "pos.sub", "pos_sub", T * F32, TC_ACT_TRANS, mu, 0, T * F32,
                        TK_ELEM);
    hf_free(x, &mu);
    g->pos_ids = hf_ew(x, -1, "pos.long", "position_ids", T * TOKEN_BYTES, TC_ACT_TRANS, sb, 0,
                       T * F32, TK_ELEM);
    hf_free(x, &sb);
    g->pos_off = hf_ew(x, -1, "pos.offset", "position_ids_offset", T * TOKEN_BYTES,
                       TC_ACT_SKEL, g->pos_ids, 0, T * TOKEN_BYTES, TK_ELEM);
    g->pos_emb = hf_alloc_op(x, -1, "pos_embeds", T * h * x->RB, TC_ACT_TRANS, 1, &oid);
    hf_op p = { .kind = TK_EMBED, .layer = -1, .what = "embed_positions",
                .br = T * (h * x->PB + 8), .bw = T * h * x->RB,
                .in = { g->pos_off, x->p[1].id }, .nin = 2, .out = { g->pos_emb }, .nout = 1 };
    hf_mem_op(x, oid, p);
    return hf_ew(x, 0, "embed.add", "input", T * h * x->RB, TC_ACT_SKEL, g->emb, g->pos_emb,
                 2 * T * h * x->RB, TK_ELEM);
}

/* final_layer_norm; the model's forward returns (its locals go); the LM head and loss
 * (gen_hf.c); autocast's region ends: its cache drops the bias casts. */
static void ln_head_fwd(hf_x *x, uint64_t in)
{
    struct hf_lnm *g = x->lnm;
    x->head_in = in;
    x->head_out = hf_ln_fwd(x, -1, "final_layer_norm", in, ln_fnorm(x, 0), ln_fnorm(x, 1),
                            x->amp ? TC_ACT_TRANS : TC_ACT_SKEL, &g->lnf_mu, &g->lnf_rs);
    hf_free(x, &g->emb);
    hf_free(x, &g->pos_emb);
    hf_free(x, &g->amask);
    hf_free(x, &g->pos_ids);
    hf_lmhead_fwd(x);
    for (int l = 0; l < x->L; l++)
        for (int k = 0; k < LN_NB; k++) hf_free(x, &g->ls[l].bc[k]);
}

/* The embeddings' backward from the residual gradient *G (freed): GPT-NeoX: emb_dropout's,
 * then embed_in's dense backward; OPT: embed_positions' (from the shifted ids), then
 * embed_tokens' (added into the tied head's .grad). */
static void ln_embed_bwd(hf_x *x, uint64_t *G)
{
    struct hf_lnm *g = x->lnm;
    uint64_t T = x->T, h = x->h;
    uint64_t de = *G;
    if (ln_neox(x)) {
        de = hf_drop_bwd(x, -1, "emb_dropout.bwd", *G, &g->emask, T * h, x->RB);
        if (de != *G) hf_free(x, G);
        hf_free(x, &g->emask);
    } else {
        hf_param *pp = &x->p[1];
        uint64_t pg = hf_embed_dense_bwd(x, "embed_positions", de, g->pos_off, T, 0,
                                         pp->n / h);
        hf_accum_grad(x, pp, pg);
        hf_free(x, &g->pos_off);
    }
    hf_param *e = &x->p[0];
    uint64_t eg = hf_embed_dense_bwd(x, "embed_tokens", de, x->tokens, T, 0, x->V);
    hf_free(x, &de);
    hf_accum_grad(x, e, eg);
    *G = 0;
}

static uint64_t ln_layer_fwd(hf_x *x, int l, uint64_t h)
{
    return ln_neox(x) ? nx_layer_fwd(x, l, h) : op_layer_fwd(x, l, h);
}

static void ln_backward(hf_x *x)
{
    struct hf_lnm *g = x->lnm;
    int nx = ln_neox(x);
    uint64_t G = 0;
    hf_mark(x, TM_LAYER, -1);
    uint64_t d = hf_head_bwd(x);
    if (!x->amp) hf_free(x, &x->head_out); /* lm_head's saved input */
    hf_ln_bwd(x, -1, "final_layer_norm", &d, ln_fnorm(x, 0), ln_fnorm(x, 1), &x->head_in,
              &g->lnf_mu, &g->lnf_rs, &G);
    for (int l = x->L - 1; l >= 0 && !x->st; l--) {
        hf_mark(x, TM_LAYER, l);
        if (nx) nx_layer_bwd(x, l, &g->ls[l], &G);
        else op_layer_bwd(x, l, &g->ls[l], &G);
    }
    hf_mark(x, TM_LAYER, -1);
    hf_free(x, &x->cos);
    hf_free(x, &x->sin);
    ln_embed_bwd(x, &G);
}

const hf_family hf_family_ln = {
    .embed_fwd = ln_embed_fwd, .layer_fwd = ln_layer_fwd, .head_fwd = ln_head_fwd,
    .backward = ln_backward,
};

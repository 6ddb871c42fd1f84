/* gen_hf_phi3.c — the hf profile's Phi-3 layers: transformers 5's Phi3DecoderLayer
 * (models/phi3/modeling_phi3.py: Phi3Attention with its fused qkv_proj and partial rotary,
 * Phi3MLP with its fused gate_up_proj) under PyTorch 2.11 eager, the parts where it differs
 * from the LLaMA program of gen_hf.c, which runs the rest (norms, embedding, head, loss,
 * AdamW) and calls these from its layer's forward and backward (docs/GENERATOR.md §11
 * "Phi-3"). */
#include "traces/gen_hf_int.h"

#include <string.h>

/* Phi-3's rotary on q or k, a view of the fused projection's output (width w, of which
 * w / hd * rd rotate): apply_rotary_pos_emb rotates q[..., :rd] (the whole view when rd is
 * the head dimension: a full slice is the tensor itself) and cats the pass-through part
 * back, which allocates the result even when that part is empty; promoted to fp32 under
 * amp. */
static uint64_t hf_phi3_rope(hf_x *x, int l, const char *nm, uint64_t qkv, uint64_t w,
                             trace_class ocls)
{
    uint64_t eb = x->amp ? F32 : x->CB, n = x->T * w;
    uint64_t r = hf_rope_w(x, l, nm, qkv, w / x->hd * x->rd, x->CB, TC_ACT_TRANS);
    char op[TRACE_NAME_MAX];
    snprintf(op, sizeof op, "%s.rope_pass_cat", nm);
    /* a pass-through part is a strided slice of qkv: cat copies it on the non-vectorized
       path (as GPT-NeoX's) */
    uint64_t e = x->rd < x->hd
               ? hf_ew_nv(x, l, op, op, n * eb, ocls, r, qkv, n * eb, TK_ELEM, n)
               : hf_ew(x, l, op, op, n * eb, ocls, r, qkv, n * eb, TK_ELEM);
    hf_free(x, &r);
    return e;
}

/* Phi3Attention.forward: qkv_proj, q/k/v as slices of its output (views: v, saved by SDPA,
 * keeps the whole output alive), the layer's rotary tables (Phi3RotaryEmbedding in the
 * attention; its first matmul makes cuBLAS's workspace), rotary, SDPA on the strided v
 * view (assumed taken as it is: cuDNN reads strided v without a copy). */
void hf_phi3_attn_fwd(hf_x *x, int l, hf_ls *s, uint64_t nout)
{
    trace_class rc = x->amp ? TC_ACT_TRANS : TC_ACT_SKEL;
    uint64_t qkv = hf_linear(x, l, P_Q, "qkv_proj", nout, 1, x->T, x->hq + 2 * x->kv, x->h,
                             TC_ACT_SKEL, &s->xq);
    hf_rope_tables_l(x, x->rd, l); /* the layer's own: recomputed with it */
    s->pcos = x->cos;
    s->psin = x->sin;
    s->v = qkv;
    uint64_t qe = hf_phi3_rope(x, l, "q", qkv, x->hq, rc);
    uint64_t ke = hf_phi3_rope(x, l, "k", qkv, x->kv, rc);
    hf_sdpa_fwd(x, l, s, qe, ke);
}

/* Phi3MLP.forward: gate_up_proj, chunk(2) (gate and up are views), up * act(gate),
 * down_proj. Returns down_proj's output. */
uint64_t hf_phi3_mlp_fwd(hf_x *x, int l, hf_ls *s)
{
    uint64_t T = x->T, h = x->h, f = x->f, xd;
    s->gate = hf_linear(x, l, P_GATE, "gate_up_proj", s->n2out, 1, T, 2 * f, h, TC_ACT_SKEL,
                        &s->xg);
    s->act = hf_ew(x, l, "act", "act_out", T * f * x->CB, TC_ACT_SKEL, s->gate, 0,
                   T * f * x->CB, TK_ACT);
    s->prod = hf_ew(x, l, "act_mul", "act_prod", T * f * x->CB, TC_ACT_SKEL, s->gate, s->act,
                    2 * T * f * x->CB, TK_ELEM);
    uint64_t dn = hf_linear(x, l, P_DOWN, "down_proj", s->prod, 0, T, h, f, TC_ACT_TRANS, &xd);
    if (x->amp) hf_free(x, &s->n2out);
    return dn;
}

/* Phi3MLP backward: the product's two gradients (up's, then the activation's), the
 * activation's, then chunk's backward cats gate's and up's into one [T, 2f] gradient for
 * gate_up_proj. */
void hf_phi3_mlp_bwd(hf_x *x, int l, hf_ls *s, uint64_t *G)
{
    uint64_t T = x->T, h = x->h, f = x->f, n = T * f * x->CB, dxa = 0;
    uint64_t gd = hf_down16(x, l, "add2.bwd", *G);
    uint64_t dp = hf_linear_bwd(x, l, hf_lp(x, l, P_DOWN), "down_proj", gd, x->amp, &s->prod,
                                T, h, f, 1);
    uint64_t du = hf_ew(x, l, "act_mul.bwd_up", "d_up", n, TC_ACT_TRANS, dp, s->act, 2 * n,
                        TK_ELEM);
    uint64_t da = hf_ew(x, l, "act_mul.bwd_act", "d_act", n, TC_ACT_TRANS, dp, s->gate,
                        2 * n, TK_ELEM);
    hf_free(x, &dp);
    hf_free(x, &s->act);
    uint64_t dg = hf_ew(x, l, "act.bwd", "d_gate", n, TC_ACT_TRANS, da, s->gate, 2 * n, TK_ACT);
    hf_free(x, &da);
    hf_free(x, &s->gate);
    uint64_t dgu = hf_ew(x, l, "chunk.bwd_cat", "d_gate_up", 2 * n, TC_ACT_TRANS, dg, du,
                         2 * n, TK_ELEM);
    hf_free(x, &dg);
    hf_free(x, &du);
    uint64_t d = hf_linear_bwd(x, l, hf_lp(x, l, P_GATE), "gate_up_proj", dgu, 1, &s->xg, T,
                               2 * f, h, x->amp);
    uint64_t t = hf_up32(x, l, "gate_up_proj.xcast.bwd", &d, T * h);
    hf_acc(x, l, &dxa, &t, T * h * x->RB);
    if (!x->amp) hf_free(x, &s->n2out);
    hf_norm_bwd(x, l, "ln2", &dxa, hf_lp(x, l, P_LN2), &s->n2x, &s->n2rs, &s->n2nrm,
                x->insaved ? &s->r1 : NULL, G);
}


/* The backward of one of Phi-3's rotated views (width w) from its gradient *de: the
 * rotated part's backward; the slices' backward (slice_backward: a zero-filled tensor of
 * the view's shape, the gradient copied in) for the pass-through part (even when empty)
 * and, when only part rotates, for the rotated part, summed. Returns the view's gradient in
 * the compute dtype, [b, heads, s, hd] contiguous. */
static uint64_t hf_phi3_rope_bwd(hf_x *x, int l, const char *nm, uint64_t *de, uint64_t w)
{
    uint64_t n = x->T * w, wr = w / x->hd * x->rd, acc = 0;
    char op[TRACE_NAME_MAX];
    uint64_t r = hf_rope_bwd_w(x, l, nm, de, wr, x->CB, 1);
    if (wr < w) {
        snprintf(op, sizeof op, "%s.rot_slice.bwd", nm);
        uint64_t z = hf_ew(x, l, op, op, n * x->CB, TC_ACT_TRANS, r, 0, x->T * wr * x->CB,
                           TK_ELEM);
        hf_free(x, &r);
        r = z;
    }
    hf_acc(x, l, &acc, &r, n * x->CB);
    snprintf(op, sizeof op, "%s.pass_slice.bwd", nm);
    uint64_t z = hf_ew(x, l, op, op, n * x->CB, TC_ACT_TRANS, *de, 0,
                       x->T * (w - wr) * x->CB, TK_ELEM);
    hf_free(x, de);
    hf_acc(x, l, &acc, &z, n * x->CB);
    return acc;
}

/* A q/k/v view's gradient back to the fused output: the view(...).transpose(1, 2)'s
 * backward reshapes a transposed gradient (a copy), then the slice's backward puts it into
 * a zero-filled [T, q + 2 kv] tensor, summed into *acc. */
static void hf_phi3_unslice(hf_x *x, int l, const char *nm, uint64_t *g, uint64_t w,
                            uint64_t *acc)
{
    uint64_t W = x->hq + 2 * x->kv;
    char op[TRACE_NAME_MAX];
    snprintf(op, sizeof op, "%s.view.bwd", nm);
    uint64_t c = hf_ew_nv(x, l, op, op, x->T * w * x->CB, TC_ACT_TRANS, *g, 0,
                          x->T * w * x->CB, TK_ELEM, x->T * w);
    hf_free(x, g);
    snprintf(op, sizeof op, "%s.slice.bwd", nm);
    uint64_t z = hf_ew_nv(x, l, op, op, x->T * W * x->CB, TC_ACT_TRANS, c, 0,
                          x->T * W * x->CB, TK_ELEM, x->T * w);
    hf_free(x, &c);
    hf_acc(x, l, acc, &z, x->T * W * x->CB);
}

/* Phi3Attention backward in autograd's order: o_proj, SDPA, k's then q's rotary, v's, k's
 * and q's slices, then qkv_proj on the summed gradient. */
void hf_phi3_attn_bwd(hf_x *x, int l, hf_ls *s, uint64_t *G)
{
    uint64_t T = x->T, h = x->h, dxa = 0, dq, dk, dv, xd = s->ao, dqkv = 0;
    uint64_t go = hf_down16(x, l, "add1.bwd", *G);
    uint64_t dao = hf_linear_bwd(x, l, hf_lp(x, l, P_O), "o_proj", go, x->amp, &xd, T, h,
                                 x->hq, 0);
    hf_sdpa_bwd(x, l, s, &dao, &dq, &dk, &dv);
    x->cos = s->pcos;
    x->sin = s->psin;
    uint64_t dqe = hf_up32(x, l, "sdpa.qcast.bwd", &dq, T * x->hq);
    uint64_t dke = hf_up32(x, l, "sdpa.kcast.bwd", &dk, T * x->kv);
    uint64_t dk2 = hf_phi3_rope_bwd(x, l, "k", &dke, x->kv);
    uint64_t dq2 = hf_phi3_rope_bwd(x, l, "q", &dqe, x->hq);
    hf_free(x, &s->pcos);
    hf_free(x, &s->psin);
    x->cos = x->sin = 0;
    hf_phi3_unslice(x, l, "v", &dv, x->kv, &dqkv);
    hf_phi3_unslice(x, l, "k", &dk2, x->kv, &dqkv);
    hf_phi3_unslice(x, l, "q", &dq2, x->hq, &dqkv);
    uint64_t d = hf_linear_bwd(x, l, hf_lp(x, l, P_Q), "qkv_proj", dqkv, 1, &s->xq, T,
                               x->hq + 2 * x->kv, h, x->amp);
    uint64_t t = hf_up32(x, l, "qkv_proj.xcast.bwd", &d, T * h);
    hf_acc(x, l, &dxa, &t, T * h * x->RB);
    if (!x->amp) hf_free(x, &s->n1out);
    hf_norm_bwd(x, l, "ln1", &dxa, hf_lp(x, l, P_LN1), &s->n1x, &s->n1rs, &s->n1nrm,
                x->insaved ? &s->in : NULL, G);
}


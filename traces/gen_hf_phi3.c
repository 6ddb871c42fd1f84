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
    MS_JOIN(op, sizeof op, nm, ".rope_pass_cat");
    /* a pass-through part is a strided slice of qkv: cat copies it on the non-vectorized
       path (as GPT-NeoX's) */
    uint64_t e = x->rd < x->hd
               ? hf_ew_nv(x, l, op, op, n * eb, ocls, r, qkv, n * eb, TK_ELEM, n)
               : hf_ew(x, l, op, op, n * eb, ocls, r, qkv, n * eb, TK_ELEM);
    hf_free(x, &r);
    return e;
}

/* Phi3Attention.forward: qkv_proj, q/k/v as slices of its output (views: v, saved by SDPA,
 * keeps the whole output alive), the rotary on the model's cos/sin tables (made once per
 * forward, as LLaMA's), SDPA on the strided v view (cuDNN reads it as it is: the trace has no
 * copy), then `attn_output.transpose(1, 2).contiguous()`: the rotary's cat left q contiguous
 * in [b, heads, s, d], cuDNN's output takes q's layout, so the transpose back is a copy
 * (o_proj's saved input; SDPA keeps its own output). */
void hf_phi3_attn_fwd(hf_x *x, int l, hf_ls *s, uint64_t nout)
{
    trace_class rc = x->amp ? TC_ACT_TRANS : TC_ACT_SKEL;
    uint64_t qkv = hf_linear(x, l, P_Q, "qkv_proj", nout, 1, x->T, x->hq + 2 * x->kv, x->h,
                             TC_ACT_SKEL, &s->xq);
    s->v = qkv;
    uint64_t qe = hf_phi3_rope(x, l, "q", qkv, x->hq, rc);
    uint64_t ke = hf_phi3_rope(x, l, "k", qkv, x->kv, rc);
    hf_sdpa_fwd(x, l, s, qe, ke);
    uint64_t n = x->T * x->hq;
    s->aoc = hf_ew_nv(x, l, "attn_out.contiguous", "attn_out_c", n * x->CB, TC_ACT_SKEL, s->ao,
                      0, n * x->CB, TK_ELEM, n);
}

/* Phi3MLP.forward: gate_up_proj, chunk(2) (gate and up are views), up * act(gate),
 * down_proj; the locals (gate, the input) go when it returns. Returns down_proj's output. */
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
    const uint64_t loc[] = { s->gate, x->amp ? 0 : s->n2out }; /* `gate`, the MLP's input */
    hf_locals(x, l, "mlp.locals", loc, 2);
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
    /* MulBackward0 makes the second factor's gradient first: up * act(gate) */
    uint64_t da = hf_ew(x, l, "act_mul.bwd_act", "d_act", n, TC_ACT_TRANS, dp, s->gate,
                        2 * n, TK_ELEM);
    uint64_t du = hf_ew(x, l, "act_mul.bwd_up", "d_up", n, TC_ACT_TRANS, dp, s->act, 2 * n,
                        TK_ELEM);
    hf_free(x, &dp);
    hf_free(x, &s->act);
    uint64_t dg = hf_ew(x, l, "act.bwd", "d_gate", n, TC_ACT_TRANS, da, s->gate, 2 * n, TK_ACT);
    hf_free(x, &da);
    hf_free(x, &s->gate);
    uint64_t dgu = hf_ew(x, l, "chunk.bwd_cat", "d_gate_up", 2 * n, TC_ACT_TRANS, dg, du,
                         2 * n, TK_ELEM);
    hf_free(x, &dg);
    hf_free(x, &du);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_GATE), "gate_up_proj", dgu, &s->xg, T, 2 * f, h,
                     "gate_up_proj.xcast.bwd", &dxa);
    if (!x->amp) hf_free(x, &s->n2out);
    hf_norm_bwd(x, l, "ln2", &dxa, hf_lp(x, l, P_LN2), &s->n2x, &s->n2rs, &s->n2nrm,
                x->insaved ? &s->r1 : NULL, G);
}


/* The backward of one of Phi-3's rotated views (width w, of which wr = w / hd * rd rotate)
 * from the fp32 (amp) or compute-dtype gradient *de of its cat: the rotated part's backward
 * (hf_rope_bwd_w; *r gets its result), then, when rd < hd, the pass-through part's slice
 * backward into the view's shape (its part cast back first under amp; that node runs after
 * the rotary's). Returns the pass part's gradient [T, w] (0 when rd = hd). */
static uint64_t hf_phi3_rope_bwd(hf_x *x, int l, const char *nm, uint64_t *de, uint64_t w,
                                 int flags, uint64_t *r)
{
    uint64_t n = x->T * w, wr = w / x->hd * x->rd, np = x->T * (w - wr);
    char op[TRACE_NAME_MAX];
    *r = hf_rope_bwd_w(x, l, nm, de, wr, x->CB, flags | (wr < w ? HF_ROPE_KEEP : 0));
    if (wr == w) return 0;
    uint64_t pg = *de;
    if (x->amp) {
        MS_JOIN(op, sizeof op, nm, ".pass.bwd_cast");
        pg = hf_ew(x, l, op, op, np * x->CB, TC_ACT_TRANS, *de, 0, np * F32, TK_ELEM);
    }
    MS_JOIN(op, sizeof op, nm, ".pass_slice.bwd");
    uint64_t z = hf_slice_bwd(x, l, op, pg, n * x->CB, np * x->CB, np);
    if (pg != *de) hf_free(x, &pg);
    hf_free(x, de);
    return z;
}

/* q[..., :rd]'s slice backward: the rotated part's gradient r (freed) into a zero-filled
 * [T, w] tensor (even when rd is all of q), added into the pass part's when there is one.
 * Returns the view's gradient, in [b, heads, s, d] order. */
static uint64_t hf_phi3_rot_slice_bwd(hf_x *x, int l, const char *nm, uint64_t *r,
                                      uint64_t pass, uint64_t w)
{
    uint64_t n = x->T * w, wr = w / x->hd * x->rd, acc = pass;
    char op[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, nm, ".rot_slice.bwd");
    uint64_t z = hf_slice_bwd(x, l, op, *r, n * x->CB, x->T * wr * x->CB, x->T * wr);
    hf_free(x, r);
    hf_acc(x, l, &acc, &z, n * x->CB);
    return acc;
}

/* A q/k/v gradient (q and k made contiguous by hf_view_copy; v's comes from cuDNN in the
 * view's layout, a view) back into the fused output: the slice's backward puts it into a
 * zero-filled [T, q + 2 kv] tensor, summed into *acc. */
static void hf_phi3_unslice(hf_x *x, int l, const char *nm, uint64_t *g, uint64_t w,
                            uint64_t *acc)
{
    uint64_t W = x->hq + 2 * x->kv;
    char op[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, nm, ".slice.bwd");
    uint64_t z = hf_slice_bwd(x, l, op, *g, x->T * W * x->CB, x->T * w * x->CB, x->T * w);
    hf_free(x, g);
    hf_acc(x, l, acc, &z, x->T * W * x->CB);
}

/* Phi3Attention backward in autograd's order: o_proj (its contiguous input released), SDPA,
 * k's then q's rotary and slices, their view copies, v's, k's and q's slices of the fused
 * output, then qkv_proj on the summed gradient. */
void hf_phi3_attn_bwd(hf_x *x, int l, hf_ls *s, uint64_t *G)
{
    uint64_t T = x->T, h = x->h, dxa = 0, dq, dk, dv, dqkv = 0;
    uint64_t go = hf_down16(x, l, "add1.bwd", *G);
    uint64_t dao = hf_linear_bwd(x, l, hf_lp(x, l, P_O), "o_proj", go, x->amp, &s->aoc, T, h,
                                 x->hq, 1);
    hf_sdpa_bwd(x, l, s, &dao, &dq, &dk, &dv);
    uint64_t dqe = hf_up32(x, l, "sdpa.qcast.bwd", &dq, T * x->hq);
    uint64_t dke = hf_up32(x, l, "sdpa.kcast.bwd", &dk, T * x->kv);
    uint64_t rk, rq; /* the tables' last reader is layer 0's q: they go with its products */
    uint64_t pk = hf_phi3_rope_bwd(x, l, "k", &dke, x->kv, 0, &rk);
    uint64_t pq = hf_phi3_rope_bwd(x, l, "q", &dqe, x->hq, l == 0 ? HF_ROPE_LAST : 0, &rq);
    uint64_t dk2 = hf_phi3_rot_slice_bwd(x, l, "k", &rk, pk, x->kv);
    uint64_t dq2 = hf_phi3_rot_slice_bwd(x, l, "q", &rq, pq, x->hq);
    dk2 = hf_view_copy(x, l, "k", &dk2, x->kv);
    dq2 = hf_view_copy(x, l, "q", &dq2, x->hq);
    hf_phi3_unslice(x, l, "v", &dv, x->kv, &dqkv);
    hf_phi3_unslice(x, l, "k", &dk2, x->kv, &dqkv);
    hf_phi3_unslice(x, l, "q", &dq2, x->hq, &dqkv);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_Q), "qkv_proj", dqkv, &s->xq, T, x->hq + 2 * x->kv,
                     h, "qkv_proj.xcast.bwd", &dxa);
    if (!x->amp) hf_free(x, &s->n1out);
    hf_norm_bwd(x, l, "ln1", &dxa, hf_lp(x, l, P_LN1), &s->n1x, &s->n1rs, &s->n1nrm,
                x->insaved ? &s->in : NULL, G);
}


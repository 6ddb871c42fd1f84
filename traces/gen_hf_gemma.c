/* gen_hf_gemma.c — the hf profile's Gemma pieces (transformers 5's models/gemma/
 * modeling_gemma.py): GemmaRMSNorm's forward and backward, and GemmaModel's embedding scaled
 * by sqrt(hidden). The rest of GemmaForCausalLM is the LLaMA program of gen_hf.c, which calls
 * these through gen_hf_int.h. Modelled from the transformers source alone: not compared with
 * a GPU run. The program: docs/GENERATOR.md "Gemma". */
#include "traces/gen_hf_int.h"

/* GemmaRMSNorm.forward over the residual stream [T, h] (dtype R): output = _norm(x.float())
 * (x * rsqrt(x.pow(2).mean(-1) + eps), an expression: its temporaries go as they are read),
 * output * (1.0 + weight.float()) in fp32, then .type_as(x). Saved: the fp32 input (the input
 * itself when fp32), rsqrt, the fp32 normalized tensor (*nrm) and w->w1 = 1 + weight.float()
 * [h] fp32 (weight.float() is a copy only for bf16 weights). Unlike LlamaRMSNorm no
 * input-dtype copy of the normalized tensor is made: in bf16 the product is fp32 and cast. */
uint64_t hf_gemma_norm_fwd(hf_x *x, int l, const char *nm, uint64_t in, hf_param *w,
                           trace_class ocls, uint64_t *xf, uint64_t *rs, uint64_t *nrm)
{
    uint64_t h = x->h, n = x->T * h, ib = x->RB, var;
    char op[TRACE_NAME_MAX];
    uint64_t xin = hf_rms_stats(x, l, nm, in, x->T, h, ib, 0, xf, rs, &var);
    MS_JOIN(op, sizeof op, nm, ".mul");
    *nrm = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_SKEL, xin, *rs, n * F32, TK_NORM, n);
    uint64_t wf = w->id;
    if (x->PB != F32) {
        MS_JOIN(op, sizeof op, nm, ".weight_fp32");
        wf = hf_ew(x, l, op, op, h * F32, TC_ACT_TRANS, w->id, 0, h * x->PB, TK_ELEM);
    }
    MS_JOIN(op, sizeof op, nm, ".one_plus_w");
    w->w1 = hf_ew(x, l, op, op, h * F32, TC_ACT_SKEL, wf, 0, h * F32, TK_ELEM);
    if (wf != w->id) hf_free(x, &wf);
    MS_JOIN(op, sizeof op, nm, ".weight");
    uint64_t o32 = hf_ew_nv(x, l, op, op, n * F32, ib == F32 ? ocls : TC_ACT_TRANS, *nrm,
                            w->w1, n * F32, TK_NORM, n);
    if (ib == F32) return o32;
    MS_JOIN(op, sizeof op, nm, ".type_as");
    uint64_t out = hf_ew(x, l, op, op, n * ib, ocls, o32, 0, n * F32, TK_NORM);
    hf_free(x, &o32); /* `output`, a local until the norm returns */
    return out;
}

/* GemmaRMSNorm's backward from the output gradient g (freed, dtype R): .type_as's (up to
 * fp32 in bf16); MulBackward0 of output * (1 + w): the second factor's gradient first, g *
 * output [T, h] fp32, then the first's, g * (1 + w); the former summed over the rows into
 * [h] fp32 (a column reduction with its buffer), which is the weight's gradient through the
 * add, cast down by weight.float()'s backward for bf16 weights; then as LlamaRMSNorm's from
 * x * rsqrt(...) (hf_rms_bwd_x). Frees what the forward saved. */
void hf_gemma_norm_bwd(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w,
                       uint64_t *xf, uint64_t *rs, uint64_t *nrm, uint64_t *in, uint64_t *G)
{
    uint64_t rows = x->T, n = rows * x->h, ib = x->RB, oid, sb = 0;
    char op[TRACE_NAME_MAX];
    uint64_t g32 = *g;
    if (ib != F32) {
        MS_JOIN(op, sizeof op, nm, ".bwd_type_as");
        g32 = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_TRANS, *g, 0, n * ib, TK_NORM, n);
        hf_free(x, g);
    }
    MS_JOIN(op, sizeof op, nm, ".bwd_wprod");
    uint64_t wp = hf_ew(x, l, op, op, n * F32, TC_ACT_TRANS, g32, *nrm, 2 * n * F32, TK_NORM);
    MS_JOIN(op, sizeof op, nm, ".bwd_mul");
    uint64_t dn = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_TRANS, g32, w->w1, n * F32, TK_NORM,
                           n);
    int cast = x->PB != F32;
    uint64_t wg = hf_alloc_op(x, l, cast ? "wgrad_fp32" : "wgrad", w->n * F32,
                              cast ? TC_ACT_TRANS : TC_GRAD, 0, &oid);
    uint64_t rb = hf_red_bytes(rows, x->h, &sb);
    uint64_t red = rb ? hf_alloc_tok(x, l, "reduce_ws", rb, TC_WORKSPACE, (int64_t)oid, 0) : 0;
    uint64_t sem = sb ? hf_alloc_tok(x, l, "reduce_sem", sb, TC_WORKSPACE, (int64_t)oid, 0) : 0;
    hf_op r = { .kind = TK_NORM, .layer = l, .what = "norm.wgrad", .br = n * F32,
                .bw = w->n * F32, .in = { wp }, .nin = 1, .out = { wg, red, sem }, .nout = 3,
                .flops = (double)n };
    hf_mem_op(x, oid, r);
    hf_free(x, &sem);
    hf_free(x, &red);
    hf_free(x, &wp);
    if (cast) { /* weight.float()'s backward */
        MS_JOIN(op, sizeof op, nm, ".bwd_weight_fp32");
        uint64_t w16 = hf_ew(x, l, op, "wgrad", w->n * x->PB, TC_GRAD, wg, 0, w->n * F32,
                             TK_ELEM);
        hf_free(x, &wg);
        wg = w16;
    }
    hf_accum_grad(x, w, wg);
    if (g32 != *g) hf_free(x, &g32);
    else hf_free(x, g);
    hf_free(x, nrm);
    hf_free(x, &w->w1);
    hf_rms_bwd_x(x, l, nm, dn, xf, rs, in, G, rows, x->h, ib);
}

/* GemmaModel: hidden_states = inputs_embeds * normalizer, a 0-dim host tensor of
 * sqrt(hidden) in the embedding's dtype (no device memory); inputs_embeds (e) stays a local
 * of the model's forward, so both [T, h] tensors live until it returns. Returns layer 0's
 * input. */
uint64_t hf_gemma_embed_fwd(hf_x *x, uint64_t e)
{
    uint64_t n = x->T * x->h * x->RB;
    x->embraw = e;
    return hf_ew(x, 0, "embed.scale", "input", n, TC_ACT_SKEL, e, 0, n, TK_ELEM);
}

/* The normalizer's product's backward: grad * sqrt(hidden), a new [T, h] in place of *G. */
void hf_gemma_embed_bwd(hf_x *x, uint64_t *G)
{
    uint64_t n = x->T * x->h * x->RB;
    uint64_t g = hf_ew(x, -1, "embed.scale.bwd", "d_inputs_embeds", n, TC_ACT_TRANS, *G, 0, n,
                       TK_ELEM);
    hf_free(x, G);
    *G = g;
}

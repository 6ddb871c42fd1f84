/* gen_hf.c — the generator's hf profile: one GPU's training steps of a Hugging Face
 * transformers 5 causal LM (or BERT's masked LM, gen_hf_bert.c) under PyTorch 2.11 eager,
 * as a user's loop runs them
 * (`loss = model(input_ids=x, labels=x).loss; loss.backward(); opt.step(); opt.zero_grad()`
 * with torch.optim.AdamW's foreach path), in precision amp (fp32 model under
 * torch.autocast bf16), bf16 or fp32: every tensor PyTorch's caching allocator sees, in the
 * order autograd makes and frees them. The program, tensor by tensor with the source each
 * follows, is docs/GENERATOR.md "The hf profile"; comments here say why where it is not
 * obvious. */
#include "traces/gen_hf_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>


/* What one layer's forward saved for its backward. */



/* ---- emission ---- */

static void hf_append(hf_x *x, const trace_rec *r)
{
    if (!x->st) x->st = trace_append(x->t, r);
}

void hf_mark(hf_x *x, trace_markkind k, int64_t v)
{
    if (!x->st) x->st = trace_append_mark(x->t, k, v);
}

uint64_t hf_alloc_tok(hf_x *x, int layer, const char *what, uint64_t bytes,
                      trace_class cls, int64_t producer, int tok)
{
    trace_rec r;
    trace_alloc_rec(&r, x->next_tid++, bytes, cls, layer, producer, tok, what);
    hf_append(x, &r);
    return r.u.alloc.id;
}

/* Activations scale with the tokens; parameters, gradients, states and casts of weights do
 * not. */
uint64_t hf_alloc(hf_x *x, int layer, const char *what, uint64_t bytes, trace_class cls,
                  int64_t producer)
{
    return hf_alloc_tok(x, layer, what, bytes, cls, producer,
                        cls == TC_ACT_SKEL || cls == TC_ACT_TRANS);
}

void hf_free(hf_x *x, uint64_t *id)
{
    if (!*id) return;
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = *id;
    hf_append(x, &r);
    *id = 0;
}


void hf_emit(hf_x *x, uint64_t oid, const hf_op *o)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    trace_op *p = &r.u.op;
    uint64_t in[8], out[8];
    uint32_t ni = 0, no = 0;
    for (uint32_t i = 0; i < o->nin; i++) if (o->in[i]) in[ni++] = o->in[i];
    for (uint32_t i = 0; i < o->nout; i++) if (o->out[i]) out[no++] = o->out[i];
    p->id = oid;
    p->kind = o->kind;
    p->phase = x->phase;
    p->layer = o->layer;
    p->flops = o->flops;
    p->bytes_read = o->br;
    p->bytes_written = o->bw;
    p->dur_us = o->dur;
    /* PyTorch eager issues every kernel from Python: where the kernels are shorter than
     * that, the GPU waits for the host (docs/GENERATOR.md, "Host time") */
    p->host_us = x->m ? x->m->host_eager_kernel_us : 0.0;
    p->in = in;
    p->n_in = ni;
    p->out = out;
    p->n_out = no;
    trace_layer_name(p->name, o->layer, o->what);
    hf_append(x, &r);
}

/* A memory-bound kernel: its time from its bytes (roof_kernel_us); one on PyTorch's
 * non-vectorized path (nv_elems) is bound by the element rate of that path as well, which
 * spends per element on index arithmetic (its offset calculator) what the vectorized path
 * does not: about a third of the bandwidth for bf16 on an H200 (probe_eager.py). */
void hf_mem_op(hf_x *x, uint64_t oid, hf_op o)
{
    o.dur = x->m ? roof_kernel_us(x->m, &x->c->roof, o.kind, o.flops, o.br + o.bw) : -1.0;
    if (x->m && o.nv_elems && x->m->gpu_ew_nv_elems_per_s > 0) {
        double nv = x->m->gpu_kernel_launch_us +
                    (double)o.nv_elems / x->m->gpu_ew_nv_elems_per_s * 1e6;
        if (nv > o.dur) o.dur = nv;
    }
    hf_emit(x, oid, &o);
}

/* An element-wise kernel of one new output (out_bytes, class cls) from inputs a and b that
 * reads in_bytes: returns the output's id. */
uint64_t hf_ew(hf_x *x, int l, const char *op, const char *outn, uint64_t out_bytes,
               trace_class cls, uint64_t a, uint64_t b, uint64_t in_bytes,
               trace_opkind kind)
{
    return hf_ew_nv(x, l, op, outn, out_bytes, cls, a, b, in_bytes, kind, 0);
}

uint64_t hf_ew_nv(hf_x *x, int l, const char *op, const char *outn, uint64_t out_bytes,
                  trace_class cls, uint64_t a, uint64_t b, uint64_t in_bytes, trace_opkind kind,
                  uint64_t elems)
{
    uint64_t oid = x->next_oid++;
    uint64_t out = hf_alloc(x, l, outn, out_bytes, cls, (int64_t)oid);
    hf_op o = { .kind = kind, .layer = l, .what = op, .br = in_bytes, .bw = out_bytes,
                .in = { a, b }, .nin = 2, .out = { out }, .nout = 1, .nv_elems = elems };
    o.flops = EW_FLOPS * (double)(out_bytes > in_bytes ? out_bytes : in_bytes) / 2.0;
    hf_mem_op(x, oid, o);
    return out;
}

/* An in-place element-wise kernel on acc (reads acc and a, writes acc). */
void hf_ew_inplace(hf_x *x, int l, const char *op, uint64_t acc, uint64_t a,
                   uint64_t bytes)
{
    uint64_t oid = x->next_oid++;
    hf_op o = { .kind = TK_ELEM, .layer = l, .what = op, .br = 2 * bytes, .bw = bytes,
                .in = { acc, a }, .nin = 2, .out = { acc }, .nout = 1,
                .flops = EW_FLOPS * (double)bytes / 2.0 };
    hf_mem_op(x, oid, o);
}

/* A slice's backward as PyTorch's slice_backward runs it (at::zeros of the input's shape,
 * then the gradient copied into the slice): a fill of the whole output (full_bytes, named
 * op), then the copy of src's part_bytes into the strided slice, on the non-vectorized path
 * over part_elems elements. The kernel profiles show the fills (experiments/realworld
 * kernel_classes.py: one FillFunctor kernel per slice backward). Returns the output. */
uint64_t hf_slice_bwd(hf_x *x, int l, const char *op, uint64_t src, uint64_t full_bytes,
                      uint64_t part_bytes, uint64_t part_elems)
{
    char fill[TRACE_NAME_MAX];
    MS_JOIN(fill, sizeof fill, op, ".zero");
    uint64_t z = hf_ew_nv(x, l, fill, op, full_bytes, TC_ACT_TRANS, 0, 0, 0, TK_ELEM, 0);
    uint64_t oid = x->next_oid++;
    hf_op o = { .kind = TK_ELEM, .layer = l, .what = op, .br = part_bytes, .bw = part_bytes,
                .in = { src }, .nin = 1, .out = { z }, .nout = 1, .nv_elems = part_elems,
                .flops = EW_FLOPS * (double)part_bytes / 2.0 };
    hf_mem_op(x, oid, o);
    return z;
}

/* Python locals that keep tensors past their last op, released at this point (a function
 * returns, a variable is reassigned): a zero-time op reading them. It changes nothing when
 * the trace frees them later anyway (autograd saved them); where a plan recomputes the layer
 * (drop_at=use frees each tensor after its last forward op) it holds them to here, as the
 * checkpointed forward does (the recorded Phi-3 trace with checkpointing). */
void hf_locals(hf_x *x, int l, const char *what, const uint64_t *ids, uint32_t n)
{
    hf_op o = { .kind = TK_ELEM, .layer = l, .what = what, .dur = 0 };
    for (uint32_t k = 0; k < n && o.nin < 8; k++)
        if (ids[k]) o.in[o.nin++] = ids[k];
    if (o.nin) hf_emit(x, x->next_oid++, &o);
}

/* Duration of a GEMM of M x N x K in elements of eb bytes: bf16 at the tensor-core rate with
 * cuBLAS's alignment penalty; fp32 (sgemm) at the fp32 rate. */
double hf_gemm_us(hf_x *x, uint64_t M, uint64_t N, uint64_t K, int eb, uint64_t bytes)
{
    if (!x->m) return -1.0;
    double fl = 2.0 * (double)M * (double)N * (double)K;
    if (eb <= BF16) return roof_gemm_us(x->m, &x->c->roof, fl, bytes, M, N, K, eb);
    double rate = x->m->gpu_peak_fp32_flops * roof_fp32_gemm_eff(x->m, &x->c->roof, fl);
    double us = rate > 0 ? fl / rate * 1e6 : 0;
    double mem = x->m->gpu_hbm_Bps > 0 ? (double)bytes / (x->m->gpu_hbm_Bps *
                 x->m->gpu_mem_eff) * 1e6 : 0;
    return x->m->gpu_kernel_launch_us + (us > mem ? us : mem);
}

/* out[M, N] = in[M, K] W^T: returns the output (class cls). */
uint64_t hf_gemm(hf_x *x, int l, const char *op, const char *outn, trace_class cls,
                 uint64_t in, uint64_t w, uint64_t M, uint64_t N, uint64_t K)
{
    uint64_t oid = x->next_oid++, eb = x->CB;
    uint64_t out = hf_alloc(x, l, outn, M * N * eb, cls, (int64_t)oid);
    hf_op o = { .kind = TK_GEMM, .layer = l, .what = op, .br = (M * K + K * N) * eb,
                .bw = M * N * eb, .in = { in, w }, .nin = 2, .out = { out }, .nout = 1,
                .flops = 2.0 * (double)M * (double)N * (double)K };
    o.dur = hf_gemm_us(x, M, N, K, (int)eb, o.br + o.bw);
    hf_emit(x, oid, &o);
    return out;
}

/* ---- parameters ---- */

/* A slot's place among a layer's parameters: Phi3Attention registers o_proj before its
 * qkv_proj (the P_Q slot), so their places swap; Qwen3MoeSparseMoeBlock registers its
 * experts before its router (Mixtral's the router first). */
static size_t hf_slot_pos(const hf_x *x, size_t slot)
{
    if (x->phi3 && (slot == P_Q || slot == P_O)) return slot == P_Q ? P_O : P_Q;
    if (x->q3moe && slot >= P_ROUTER && slot <= P_EDN) return slot == P_ROUTER ? P_EDN : slot - 1;
    return slot;
}

/* The slot at a place: hf_slot_pos's inverse. */
static size_t hf_pos_slot(const hf_x *x, size_t pos)
{
    if (x->q3moe && pos >= P_ROUTER && pos <= P_EDN) return pos == P_EDN ? P_ROUTER : pos + 1;
    return hf_slot_pos(x, pos);
}

hf_param *hf_lp(hf_x *x, int l, int slot)
{
    return &x->p[1 + (size_t)l * P_SLOTS + hf_slot_pos(x, (size_t)slot)];
}
static hf_param *hf_embed(hf_x *x) { return &x->p[0]; }
static hf_param *hf_fnorm(hf_x *x) { return &x->p[1 + (size_t)x->L * P_SLOTS]; }
/* The LM head's weight: the embedding's when tied. */
static hf_param *hf_headw(hf_x *x)
{
    return x->tied ? hf_embed(x) : &x->p[x->np - 1];
}

static const char *const slot_name[P_SLOTS] = {
    "q_proj.w", "q_proj.b", "k_proj.w", "k_proj.b", "v_proj.w", "v_proj.b", "o_proj.w",
    "q_norm.w", "k_norm.w", "gate_proj.w", "up_proj.w", "down_proj.w", "input_layernorm.w", "post_attn_layernorm.w",
    "router.w", "experts.gate_up_proj", "experts.down_proj", "shared_expert_gate.w"
};

static void hf_plan_params(hf_x *x)
{
    const model_t *md = &x->c->model;
    uint64_t h = x->h, bias = md->qkv_bias || md->has_bias, qk = model_has_qk_norm(md) ? x->hd : 0;
    hf_embed(x)->n = x->V * h;
    hf_embed(x)->layer = -1;
    for (int l = 0; l < x->L; l++) {
        uint64_t n[P_SLOTS] = { x->hq * h, bias ? x->hq : 0, x->kv * h, bias ? x->kv : 0,
                                x->kv * h, bias ? x->kv : 0, h * x->hq, qk, qk, x->f * h,
                                x->f * h, h * x->f, h, h };
        if (x->phi3) { /* Phi3Attention.qkv_proj, Phi3MLP.gate_up_proj */
            n[P_Q] = (x->hq + 2 * x->kv) * h;
            n[P_K] = n[P_V] = n[P_UP] = 0;
            n[P_GATE] = 2 * x->f * h;
        }
        for (int j = 0; j < P_SLOTS; j++) {
            hf_lp(x, l, j)->n = n[j];
            hf_lp(x, l, j)->layer = l;
        }
        hf_moe_plan(x, l);
    }
    hf_fnorm(x)->n = h;
    hf_fnorm(x)->layer = -1;
    if (!x->tied) {
        hf_headw(x)->n = x->V * h;
        hf_headw(x)->layer = -1;
    }
}

static void hf_pname(hf_x *x, size_t i, char *nm)
{
    if (x->gpt2) {
        hf_g2_pname(x, i, nm);
        return;
    }
    if (x->lnfam) {
        hf_ln_pname(x, i, nm);
        return;
    }
    if (x->bert) {
        hf_bert_pname(x, i, nm);
        return;
    }
    if (i == 0) MS_JOIN(nm, TRACE_NAME_MAX, "embed_tokens.w");
    else if (&x->p[i] == hf_fnorm(x)) MS_JOIN(nm, TRACE_NAME_MAX, "norm.w");
    else if (i == x->np - 1 && !x->tied) MS_JOIN(nm, TRACE_NAME_MAX, "lm_head.w");
    else {
        size_t j = hf_pos_slot(x, (i - 1) % P_SLOTS);
        const char *sn = !x->phi3 ? slot_name[j] : j == P_Q ? "qkv_proj.w"
                       : j == P_GATE ? "gate_up_proj.w" : slot_name[j];
        snprintf(nm, TRACE_NAME_MAX, "L%d.%s", x->p[i].layer, sn);
    }
}

/* The model built on the GPU in its training dtype: one allocation per parameter in module
 * order (modeling_utils from_config under `with torch.device("cuda")`), then the input ids. */
static void hf_setup(hf_x *x)
{
    for (size_t i = 0; i < x->np; i++) {
        hf_param *p = &x->p[i];
        if (!p->n) continue;
        char nm[TRACE_NAME_MAX];
        hf_pname(x, i, nm);
        p->id = hf_alloc(x, -1, nm, p->n * x->PB, TC_PARAM, -1);
    }
    x->tokens = hf_alloc(x, -1, "input_ids", x->T * TOKEN_BYTES, TC_OTHER, -1);
}

/* amp: autocast casts a leaf fp32 weight to bf16 once per autocast region and caches the
 * copy (aten/src/ATen/autocast_mode.cpp, cached_cast); autograd saves it for the weight's
 * backward, so it lives until that backward has run. */
uint64_t hf_wcast(hf_x *x, int l, hf_param *p, const char *what)
{
    if (!x->amp) return p->id;
    uint64_t oid = x->next_oid++;
    p->cast = hf_alloc_tok(x, l, what, p->n * BF16, TC_ACT_SKEL, (int64_t)oid, 0);
    hf_op o = { .kind = TK_ELEM, .layer = l, .what = what, .br = p->n * F32,
                .bw = p->n * BF16, .in = { p->id }, .nin = 1, .out = { p->cast }, .nout = 1,
                .flops = EW_FLOPS * (double)p->n };
    hf_mem_op(x, oid, o);
    return p->cast;
}

/* amp: a linear's fp32 activation input cast to bf16 (not cached: only leaves are), saved
 * for the weight gradient. Other precisions: the input itself. */
uint64_t hf_xcast(hf_x *x, int l, const char *what, uint64_t in, uint64_t n)
{
    if (!x->amp) return in;
    return hf_ew(x, l, what, what, n * BF16, TC_ACT_SKEL, in, 0, n * F32, TK_ELEM);
}

/* An nn.Linear of K -> N on M rows, weight slot j (amp: weight cast, the input cast when
 * it is fp32 (in32), bf16 GEMM). *xc gets the saved input. */
uint64_t hf_linear(hf_x *x, int l, int j, const char *nm, uint64_t in, int in32,
                          uint64_t M, uint64_t N, uint64_t K, trace_class cls, uint64_t *xc)
{
    char a[TRACE_NAME_MAX], b[TRACE_NAME_MAX], c[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".wcast");
    MS_JOIN(b, sizeof b, nm, ".xcast");
    MS_JOIN(c, sizeof c, nm, "_out");
    uint64_t w = hf_wcast(x, l, hf_lp(x, l, j), a);
    *xc = in32 ? hf_xcast(x, l, b, in, M * K) : in;
    return hf_gemm(x, l, nm, c, cls, *xc, w, M, N, K);
}

/* ---- forward ---- */

/* LlamaRMSNorm.forward: hidden.to(float32); variance = pow(2).mean(-1); hidden *
 * rsqrt(variance + eps); weight * hidden.to(input_dtype), over `rows` vectors of `width`
 * elements whose input is ib bytes an element; the output is ob bytes an element (the weight
 * product's promoted dtype) of class ocls. Saved: the fp32 input (the input itself when
 * already fp32), rsqrt, the normalized tensor in the input dtype. Returns the output. */
static uint64_t hf_rms_fwd(hf_x *x, int l, const char *nm, uint64_t in, uint64_t w,
                           uint64_t rows, uint64_t width, uint64_t ib, uint64_t ob,
                           trace_class ocls, uint64_t *xf, uint64_t *rs, uint64_t *nrm)
{
    uint64_t n = rows * width, var;
    char op[TRACE_NAME_MAX];
    uint64_t xin = hf_rms_stats(x, l, nm, in, rows, width, ib, 1, xf, rs, &var);
    MS_JOIN(op, sizeof op, nm, ".mul");
    uint64_t pr = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_SKEL, xin, *rs, n * F32, TK_NORM, n);
    *nrm = pr;
    if (ib != F32) { /* .to(input_dtype): the cast is what the weight product saves */
        MS_JOIN(op, sizeof op, nm, ".to_in");
        *nrm = hf_ew(x, l, op, op, n * ib, TC_ACT_SKEL, pr, 0, n * F32, TK_NORM);
    }
    MS_JOIN(op, sizeof op, nm, ".weight");
    uint64_t out = hf_ew_nv(x, l, op, op, n * ob, ocls, *nrm, w, n * ib, TK_NORM, n);
    if (pr != *nrm) hf_free(x, &pr); /* `hidden_states`, a local until the norm returns */
    hf_free(x, &var); /* `variance` too */
    return out;
}

/* A layer norm over the residual stream [T, h] (dtype R): amp: the fp32 output only feeds
 * casts (transient); bf16: q/k/v save it. */
static uint64_t hf_norm_fwd(hf_x *x, int l, const char *nm, uint64_t in, hf_param *w,
                            uint64_t *xf, uint64_t *rs, uint64_t *nrm)
{
    trace_class oc = x->amp ? TC_ACT_TRANS : TC_ACT_SKEL;
    if (x->gemma) return hf_gemma_norm_fwd(x, l, nm, in, w, oc, xf, rs, nrm);
    return hf_rms_fwd(x, l, nm, in, w->id, x->T, x->h, x->RB, x->RB, oc, xf, rs, nrm);
}

/* Rotary embedding of one of q / k of width w (apply_rotary_pos_emb: x*cos +
 * rotate_half(x)*sin) on an input of ib bytes an element, in the promoted dtype: fp32 under
 * amp, where cos/sin are fp32. The result is of class ocls. */
uint64_t hf_rope_w(hf_x *x, int l, const char *nm, uint64_t in, uint64_t w, uint64_t ib,
                   trace_class ocls)
{
    uint64_t T = x->T, eb = x->amp ? F32 : x->CB;
    char op[TRACE_NAME_MAX], a[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, nm, ".rope_cos");
    uint64_t t1 = hf_ew_nv(x, l, op, op, T * w * eb, TC_ACT_TRANS, in, x->cos, T * w * ib,
                           TK_ELEM, T * w);
    MS_JOIN(op, sizeof op, nm, ".rope_neg");
    uint64_t ng = hf_ew_nv(x, l, op, op, T * w / 2 * ib, TC_ACT_TRANS, in, 0, T * w / 2 * ib,
                           TK_ELEM, T * w / 2);
    MS_JOIN(op, sizeof op, nm, ".rope_cat");
    uint64_t ct = hf_ew(x, l, op, op, T * w * ib, TC_ACT_TRANS, ng, in, T * w * ib, TK_ELEM);
    hf_free(x, &ng);
    MS_JOIN(op, sizeof op, nm, ".rope_sin");
    uint64_t t2 = hf_ew_nv(x, l, op, op, T * w * eb, TC_ACT_TRANS, ct, x->sin, T * w * ib,
                           TK_ELEM, T * w);
    hf_free(x, &ct);
    MS_JOIN(op, sizeof op, nm, ".rope_add");
    MS_JOIN(a, sizeof a, nm, "_rope");
    uint64_t e = hf_ew(x, l, op, a, T * w * eb, ocls, t1, t2, 2 * T * w * eb, TK_ELEM);
    hf_free(x, &t1);
    hf_free(x, &t2);
    return e;
}

/* The LLaMA program's rotary on a bf16 (compute dtype) projection output: amp: transient
 * until SDPA's bf16 cast; else SDPA saves it. */
static uint64_t hf_rope(hf_x *x, int l, const char *nm, uint64_t in, uint64_t w)
{
    return hf_rope_w(x, l, nm, in, w, x->CB, x->amp ? TC_ACT_TRANS : TC_ACT_SKEL);
}

/* SDPA as transformers' sdpa_attention_forward calls it (enable_gqa: k and v keep their kv
 * heads, no repeat_kv copies); on an H200 PyTorch 2.11 runs the cuDNN kernels, which save
 * q, k, v, the output and the fp32 log-sum-exp. */
void hf_sdpa_fwd(hf_x *x, int l, hf_ls *s, uint64_t qe, uint64_t ke)
{
    uint64_t T = x->T;
    s->k = ke;
    s->q = qe;
    if (x->amp) { /* SDPA is on autocast's bf16 list: k, then q cast (the trace's order) */
        s->k = hf_ew(x, l, "sdpa.kcast", "k", T * x->kv * BF16, TC_ACT_SKEL, ke, 0,
                     T * x->kv * F32, TK_ELEM);
        s->q = hf_ew(x, l, "sdpa.qcast", "q", T * x->hq * BF16, TC_ACT_SKEL, qe, 0,
                     T * x->hq * F32, TK_ELEM);
    }
    const uint64_t in[] = { s->q, s->k, s->v };
    /* no attention dropout in the LLaMA family's training defaults */
    hf_sdpa_fwd_op(x, l, 0, in, 3, &s->ao, &s->lse, &s->seed, &s->offs);
    if (x->amp) { /* the attention's locals: they go when it returns, after o_proj */
        s->qr = qe;
        s->kr = ke;
    }
}

/* Qwen3RMSNorm of q or k per head (head_dim wide) on the projection's output *in (bf16
 * under amp and bf16): its output is promoted by the fp32 weight under amp. The projection's
 * output goes once the norm has its fp32 copy; in fp32 the norm saves it itself (*keep). */
static uint64_t hf_qk_norm_fwd(hf_x *x, int l, const char *nm, int slot, uint64_t *in,
                               uint64_t w, uint64_t *xf, uint64_t *rs, uint64_t *nrm,
                               uint64_t *keep)
{
    uint64_t ob = x->amp ? F32 : x->CB;
    uint64_t o = hf_rms_fwd(x, l, nm, *in, hf_lp(x, l, slot)->id, x->T * (w / x->hd), x->hd,
                            x->CB, ob, TC_ACT_TRANS, xf, rs, nrm);
    if (*xf) hf_free(x, in);
    else {
        *keep = *in;
        *in = 0;
    }
    return o;
}

/* Qwen3Attention.forward: q_norm(q_proj(x)), k_norm(k_proj(x)), v_proj(x), then the rotary
 * on the normalized q and k (fp32 under amp) and SDPA. */
static void hf_attn_fwd_qk(hf_x *x, int l, hf_ls *s, uint64_t nout)
{
    uint64_t T = x->T, h = x->h, ob = x->amp ? F32 : x->CB;
    trace_class rc = x->amp ? TC_ACT_TRANS : TC_ACT_SKEL;
    trace_class pc = x->CB == F32 ? TC_ACT_SKEL : TC_ACT_TRANS; /* fp32: the norm saves it */
    uint64_t q = hf_linear(x, l, P_Q, "q_proj", nout, 1, T, x->hq, h, pc, &s->xq);
    uint64_t qn = hf_qk_norm_fwd(x, l, "q_norm", P_QN, &q, x->hq, &s->qnx, &s->qnrs,
                                 &s->qnnrm, &s->qin);
    uint64_t k = hf_linear(x, l, P_K, "k_proj", nout, 1, T, x->kv, h, pc, &s->xk);
    uint64_t kn = hf_qk_norm_fwd(x, l, "k_norm", P_KN, &k, x->kv, &s->knx, &s->knrs,
                                 &s->knnrm, &s->kin);
    s->v = hf_linear(x, l, P_V, "v_proj", nout, 1, T, x->kv, h, TC_ACT_SKEL, &s->xv);
    uint64_t qe = hf_rope_w(x, l, "q", qn, x->hq, ob, rc);
    hf_free(x, &qn);
    uint64_t ke = hf_rope_w(x, l, "k", kn, x->kv, ob, rc);
    hf_free(x, &kn);
    hf_sdpa_fwd(x, l, s, qe, ke);
}

static void hf_attn_fwd(hf_x *x, int l, hf_ls *s, uint64_t nout)
{
    uint64_t T = x->T, h = x->h;
    if (x->phi3) {
        hf_phi3_attn_fwd(x, l, s, nout);
        return;
    }
    if (model_has_qk_norm(&x->c->model)) {
        hf_attn_fwd_qk(x, l, s, nout);
        return;
    }
    uint64_t q = hf_linear(x, l, P_Q, "q_proj", nout, 1, T, x->hq, h, TC_ACT_TRANS, &s->xq);
    uint64_t k = hf_linear(x, l, P_K, "k_proj", nout, 1, T, x->kv, h, TC_ACT_TRANS, &s->xk);
    s->v = hf_linear(x, l, P_V, "v_proj", nout, 1, T, x->kv, h, TC_ACT_SKEL, &s->xv);
    uint64_t qe = hf_rope(x, l, "q", q, x->hq);
    uint64_t ke = hf_rope(x, l, "k", k, x->kv);
    hf_free(x, &q); /* query_states, key_states: reassigned once both are rotated */
    hf_free(x, &k);
    hf_sdpa_fwd(x, l, s, qe, ke);
}

static uint64_t hf_add(hf_x *x, int l, const char *op, const char *outn, trace_class cls,
                       uint64_t a, uint64_t b)
{
    uint64_t n = x->T * x->h;
    return hf_ew_nv(x, l, op, outn, n * x->RB, cls, a, b, n * (x->RB + x->CB), TK_ELEM,
                    x->RB != x->CB ? n : 0);
}

/* LlamaDecoderLayer.forward: residual + self_attn(input_layernorm(x)), then residual +
 * mlp(post_attention_layernorm(.)), mlp = down(act(gate(x)) * up(x)). Returns the output
 * (the next layer's input). */
static uint64_t hf_layer_fwd(hf_x *x, int l, uint64_t in)
{
    hf_ls *s = &x->ls[l];
    uint64_t T = x->T, h = x->h, f = x->f, xd;
    memset(s, 0, sizeof *s);
    s->in = in;
    s->n1out = hf_norm_fwd(x, l, "ln1", in, hf_lp(x, l, P_LN1), &s->n1x, &s->n1rs,
                           &s->n1nrm);
    hf_attn_fwd(x, l, s, s->n1out);
    uint64_t po = hf_linear(x, l, P_O, "o_proj", s->aoc ? s->aoc : s->ao, 0, T, h, x->hq,
                            TC_ACT_TRANS, &xd);
    /* the attention returns: its q, k, v locals go (amp: the rotary's fp32 q and k; else
       what SDPA saved), then the decoder layer's normed hidden_states */
    hf_free(x, &s->qr);
    hf_free(x, &s->kr);
    const uint64_t loc[] = { x->amp ? 0 : s->q, x->amp ? 0 : s->k, s->v,
                             x->amp ? 0 : s->n1out };
    hf_locals(x, l, "attn.locals", loc, 4);
    if (x->amp) hf_free(x, &s->n1out);
    /* amp: the fp32 residual is saved by the next norm; bf16: only the next add reads it */
    s->r1 = hf_add(x, l, "add1", "resid1", x->insaved ? TC_ACT_SKEL : TC_ACT_TRANS, in, po);
    hf_free(x, &po);
    if (!x->insaved) hf_free(x, &s->in); /* the residual was its last use */
    s->n2out = hf_norm_fwd(x, l, "ln2", s->r1, hf_lp(x, l, P_LN2), &s->n2x, &s->n2rs,
                           &s->n2nrm);
    uint64_t dn;
    if (model_layer_is_moe(&x->c->model, (uint64_t)l)) {
        dn = hf_moe_fwd(x, l, s);
        goto residual;
    }
    if (x->phi3) {
        dn = hf_phi3_mlp_fwd(x, l, s);
        goto residual;
    }
    s->gate = hf_linear(x, l, P_GATE, "gate_proj", s->n2out, 1, T, f, h, TC_ACT_SKEL, &s->xg);
    s->act = hf_ew(x, l, "act", "act_out", T * f * x->CB, TC_ACT_SKEL, s->gate, 0,
                   T * f * x->CB, TK_ACT);
    s->up = hf_linear(x, l, P_UP, "up_proj", s->n2out, 1, T, f, h, TC_ACT_SKEL, &s->xu);
    s->prod = hf_ew(x, l, "act_mul", "act_prod", T * f * x->CB, TC_ACT_SKEL, s->act, s->up,
                    2 * T * f * x->CB, TK_ELEM);
    dn = hf_linear(x, l, P_DOWN, "down_proj", s->prod, 0, T, h, f, TC_ACT_TRANS, &xd);
    if (!x->amp) hf_locals(x, l, "mlp.locals", &s->n2out, 1); /* the MLP's argument x */
    if (x->amp) hf_free(x, &s->n2out);
residual:;
    /* The next layer's input: named and layered as that layer's (what a policy keeps) */
    uint64_t out = hf_add(x, l + 1 < x->L ? l + 1 : -1, "add2", l + 1 < x->L ? "input" :
                          "final_norm.input", TC_ACT_SKEL, s->r1, dn);
    hf_free(x, &dn);
    if (!x->insaved) hf_free(x, &s->r1);
    return out;
}

/* LlamaModel.forward before the layers: embed_tokens, then the rotary cos/sin once for all
 * layers (LlamaRotaryEmbedding.forward in fp32 with autocast off, cast to the embedding's
 * dtype). */
static uint64_t hf_embed_fwd(hf_x *x)
{
    uint64_t T = x->T, h = x->h, hd = x->hd;
    uint64_t oid = x->next_oid++;
    uint64_t e = x->gemma ? hf_alloc(x, -1, "inputs_embeds", T * h * x->RB, TC_ACT_TRANS,
                                     (int64_t)oid)
                          : hf_alloc(x, 0, "input", T * h * x->RB, TC_ACT_SKEL, (int64_t)oid);
    hf_op o = { .kind = TK_EMBED, .layer = -1, .what = "embed", .br = T * (h * x->PB + 8),
                .bw = T * h * x->RB, .in = { x->tokens, hf_embed(x)->id }, .nin = 2,
                .out = { e }, .nout = 1 };
    hf_mem_op(x, oid, o);
    /* cache_position = past_seen_tokens + arange(s) (position_ids is its view), held until
       the model returns */
    uint64_t ar = hf_ew(x, -1, "arange", "arange", x->s * TOKEN_BYTES, TC_ACT_TRANS, 0, 0, 0,
                        TK_ELEM);
    x->cpos = hf_ew(x, -1, "cache_position", "cache_position", x->s * TOKEN_BYTES,
                    TC_ACT_TRANS, ar, 0, x->s * TOKEN_BYTES, TK_ELEM);
    hf_free(x, &ar);
    hf_rope_tables(x, x->phi3 ? x->rd : hd);
    return x->gemma ? hf_gemma_embed_fwd(x, e) : e;
}

/* The rotary cos/sin of `width` columns once per forward, as LlamaRotaryEmbedding.forward
 * (Phi-3's, GPT-NeoX's) runs it with autocast off: position_ids.float() [s], inv_freq @
 * positions [s, width / 2] (in iteration 0 the first matmul: cuBLAS's workspace after its
 * output), cat(freqs, freqs) [s, width], emb.cos() * attention_scaling and the same for sin
 * (each product a new tensor, the first freed), cast to the embedding's dtype when it is not
 * fp32 (the fp32 tables freed); the locals go when it returns. */
void hf_rope_tables(hf_x *x, uint64_t width)
{
    uint64_t s = x->s, n = s * width;
    uint64_t pos = hf_ew(x, -1, "rope.positions", "rope_positions", s * F32, TC_ACT_TRANS, 0,
                         0, s * TOKEN_BYTES, TK_ELEM);
    uint64_t oid = x->next_oid++;
    uint64_t fr = hf_alloc(x, -1, "rope_freqs", n / 2 * F32, TC_ACT_TRANS, (int64_t)oid);
    hf_op mm = { .kind = TK_GEMM, .layer = -1, .what = "rope.freqs", .br = (s + width / 2) * F32,
                 .bw = n / 2 * F32, .in = { pos }, .nin = 1, .out = { fr }, .nout = 1,
                 .flops = (double)n };
    hf_mem_op(x, oid, mm);
    if (x->iter == 0 && !x->ws_fwd)
        x->ws_fwd = hf_alloc(x, -1, "cublas_ws", CUBLAS_WS, TC_OTHER, -1);
    uint64_t emb = hf_ew(x, -1, "rope.cat", "rope_emb", n * F32, TC_ACT_TRANS, fr, 0,
                         n * F32, TK_ELEM);
    uint64_t t[2];
    static const char *const op[2][3] = { { "rope.cos", "rope.cos_scale", "rope_cos" },
                                          { "rope.sin", "rope.sin_scale", "rope_sin" } };
    for (int k = 0; k < 2; k++) {
        uint64_t c = hf_ew(x, -1, op[k][0], op[k][0], n * F32, TC_ACT_TRANS, emb, 0, n * F32,
                           TK_ELEM);
        t[k] = hf_ew(x, -1, op[k][1], x->RB == F32 ? op[k][2] : op[k][1], n * F32,
                     x->RB == F32 ? TC_ACT_SKEL : TC_ACT_TRANS, c, 0, n * F32, TK_ELEM);
        hf_free(x, &c);
    }
    x->cos = t[0];
    x->sin = t[1];
    if (x->RB != F32) {
        x->cos = hf_ew_nv(x, -1, "rope.cos.to", "rope_cos", n * x->RB, TC_ACT_SKEL, t[0], 0,
                          n * F32, TK_ELEM, n);
        x->sin = hf_ew_nv(x, -1, "rope.sin.to", "rope_sin", n * x->RB, TC_ACT_SKEL, t[1], 0,
                          n * F32, TK_ELEM, n);
    }
    hf_free(x, &pos);
    hf_free(x, &fr);
    hf_free(x, &emb);
    if (x->RB != F32) {
        hf_free(x, &t[0]);
        hf_free(x, &t[1]);
    }
}

/* Final norm, lm_head, then transformers 5's ForCausalLMLoss (loss/loss_utils.py):
 * logits.float(), labels padded by one and shifted (contiguous), cross_entropy = log_softmax
 * (saved) + nll_loss. The fp32 logits die when the loss function returns, the bf16 ones when
 * the model's output is dropped (`model(...).loss`). */
static void hf_head_fwd(hf_x *x, uint64_t in)
{
    x->head_in = in;
    x->head_out = hf_norm_fwd(x, -1, "norm", in, hf_fnorm(x), &x->head_xf, &x->head_rs,
                              &x->head_nrm);
    if (!x->insaved) hf_free(x, &x->head_in);
    hf_free(x, &x->cpos); /* the model's forward returns */
    hf_free(x, &x->embraw); /* Gemma: inputs_embeds too */
    hf_lmhead_fwd(x);
}

void hf_lmhead_fwd(hf_x *x)
{
    uint64_t T = x->T, h = x->h, V = x->V;
    hf_param *hw = hf_headw(x);
    uint64_t w = hf_wcast(x, -1, hw, "lm_head.wcast");
    x->head_x = hf_xcast(x, -1, "lm_head.xcast", x->head_out, T * h);
    uint64_t oid = x->next_oid++;
    uint64_t lg = hf_alloc(x, -1, "logits", T * V * x->CB, TC_ACT_TRANS, (int64_t)oid);
    hf_op o = { .kind = TK_GEMM, .layer = -1, .what = "lm_head", .br = (T * h + h * V) * x->CB,
                .bw = T * V * x->CB, .in = { x->head_x, w }, .nin = 2, .out = { lg },
                .nout = 1, .flops = 2.0 * (double)T * (double)V * (double)h };
    o.dur = hf_gemm_us(x, T, V, h, (int)x->CB, o.br + o.bw);
    hf_emit(x, oid, &o);
    uint64_t lf = lg;
    if (x->CB != F32)
        lf = hf_ew_nv(x, -1, "logits.float", "logits_fp32", T * V * F32, TC_ACT_TRANS, lg, 0,
                      T * V * x->CB, TK_ELEM, T * V);
    /* labels padded by one ignore_index per row ([b, s + 1]); their [..., 1:] is a view when
       b = 1 (a single row), else .contiguous() copies it: the one nll_loss saves */
    uint64_t pb = (x->s + 1) * x->b * TOKEN_BYTES;
    uint64_t pad = hf_ew(x, -1, "labels.pad", "labels_padded", pb, x->b > 1 ? TC_ACT_TRANS
                         : TC_ACT_SKEL, x->tokens, 0, T * TOKEN_BYTES, TK_ELEM);
    x->labels = pad;
    if (x->b > 1)
        x->labels = hf_ew_nv(x, -1, "labels.shift", "shift_labels", T * TOKEN_BYTES,
                             TC_ACT_SKEL, pad, 0, T * TOKEN_BYTES, TK_ELEM, T);
    x->logsm = hf_ew(x, -1, "log_softmax", "log_probs", T * V * F32, TC_ACT_SKEL, lf, 0,
                     T * V * F32, TK_LOSS);
    hf_nll_fwd(x, x->logsm, x->labels, F32);
    if (lf != lg) hf_free(x, &lf);
    if (pad != x->labels) hf_free(x, &pad);
    if (x->amp) hf_free(x, &x->head_out);
    hf_free(x, &lg);
}

/* nll_loss over T positions of the log-probabilities lp against the labels: the loss and
 * its total weight (saved), scalars of lb bytes; the last step's loss is gone by then (the
 * loop's `del loss`, hf_iteration). */
void hf_nll_fwd(hf_x *x, uint64_t lp, uint64_t labels, uint64_t lb)
{
    uint64_t oid = x->next_oid++;
    x->loss = hf_alloc(x, -1, "loss", lb, TC_OTHER, (int64_t)oid);
    x->tw = hf_alloc(x, -1, "nll_total_weight", lb, TC_ACT_SKEL, (int64_t)oid);
    hf_op nl = { .kind = TK_LOSS, .layer = -1, .what = "nll_loss",
                 .br = x->T * (lb + TOKEN_BYTES), .bw = 2 * lb, .in = { lp, labels }, .nin = 2,
                 .out = { x->loss, x->tw }, .nout = 2 };
    hf_mem_op(x, oid, nl);
}

/* The loss's gradient (ones, kept to the backward's end) and nll_loss's: a zero-filled
 * gradient of its input ([T, V] of eb bytes), then what it saved released: *saved (the
 * labels' copy, or an fp32 input made for it; 0: none) and the total weight. */
uint64_t hf_nll_bwd(hf_x *x, uint64_t *saved, uint64_t lb, uint64_t eb)
{
    uint64_t TV = x->T * x->V;
    x->ones = hf_ew(x, -1, "loss.grad", "loss_grad", lb, TC_OTHER, x->loss, 0, lb, TK_ELEM);
    uint64_t dl = hf_ew(x, -1, "nll_loss.bwd", "d_log_probs", TV * eb, TC_ACT_TRANS, x->ones,
                        x->tokens, x->T * TOKEN_BYTES, TK_LOSS);
    if (saved) hf_free(x, saved);
    hf_free(x, &x->tw);
    return dl;
}

/* ---- backward ---- */

/* The .grad of p receives g (bytes p->n * PB, made by the caller): AccumulateGrad steals a
 * first gradient. A second one (a tied embedding's, after the head's) meets the first in
 * autograd's input buffer, which adds into it in place when it holds a fresh dense tensor
 * (amp: the head weight cast's backward made it) and otherwise into a new tensor (bf16,
 * fp32: the head GEMM's weight gradient is a transposed view), both then dropped: the
 * recorded traces of GPT-2, LLaMA-3.2 and Qwen2.5 in bf16 show the new one. */
void hf_accum_grad(hf_x *x, hf_param *p, uint64_t g)
{
    if (!p->grad) {
        p->grad = g;
        return;
    }
    if (x->amp) {
        hf_ew_inplace(x, p->layer, "grad_accum", p->grad, g, p->n * x->PB);
        hf_free(x, &g);
        return;
    }
    uint64_t sum = hf_ew(x, p->layer, "grad_accum", "grad", p->n * x->PB, TC_GRAD, p->grad, g,
                         2 * p->n * x->PB, TK_ELEM);
    hf_free(x, &p->grad);
    hf_free(x, &g);
    p->grad = sum;
}

/* A weight's gradient from a bf16 GEMM: under amp made in bf16 and cast into a new fp32
 * tensor by the weight cast's backward (ToCopyBackward), which becomes the .grad. */
void hf_wgrad(hf_x *x, int l, hf_param *p, uint64_t *dw16)
{
    if (!x->amp) {
        hf_accum_grad(x, p, *dw16);
        *dw16 = 0;
        return;
    }
    uint64_t g = hf_ew_nv(x, l, "wcast.bwd", "wgrad", p->n * F32, TC_GRAD, *dw16, 0,
                          p->n * BF16, TK_ELEM, p->n);
    hf_accum_grad(x, p, g);
    hf_free(x, dw16);
}

/* Backward of a linear (slot j, K -> N on M rows) whose output gradient is dy: the weight
 * gradient then the input gradient (one launch each), the saved weight cast and input
 * freed. Returns the input gradient in the compute dtype. */
uint64_t hf_linear_bwd(hf_x *x, int l, hf_param *p, const char *nm, uint64_t dy,
                              int free_dy, uint64_t *xs, uint64_t M, uint64_t N, uint64_t K,
                              int free_x)
{
    uint64_t eb = x->CB;
    char a[TRACE_NAME_MAX], b[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".bwd");
    MS_JOIN(b, sizeof b, "d_", nm, "_in");
    uint64_t w = x->amp ? p->cast : p->id;
    uint64_t oid = x->next_oid++;
    uint64_t dw = hf_alloc(x, l, "dweight", p->n * eb, x->amp ? TC_ACT_TRANS : TC_GRAD,
                           (int64_t)oid);
    uint64_t dx = hf_alloc(x, l, b, M * K * eb, TC_ACT_TRANS, (int64_t)oid);
    hf_op o = { .kind = TK_GEMM, .layer = l, .what = a, .br = 2 * (M * N + M * K + N * K) * eb,
                .bw = (N * K + M * K) * eb, .in = { dy, *xs, w }, .nin = 3,
                .out = { dw, dx }, .nout = 2,
                .flops = 4.0 * (double)M * (double)N * (double)K };
    o.dur = x->m ? hf_gemm_us(x, N, K, M, (int)eb, (M * N + M * K + N * K) * eb) +
                   hf_gemm_us(x, M, K, N, (int)eb, (M * N + M * K + N * K) * eb) : -1.0;
    hf_emit(x, oid, &o);
    if (free_dy) hf_free(x, &dy);
    if (x->amp) hf_free(x, &p->cast);
    if (free_x) hf_free(x, xs);
    hf_wgrad(x, l, p, &dw);
    return dx;
}

/* The backward of a linear whose fp32 input it cast itself under amp (hf_linear with in32):
 * as hf_linear_bwd (dy and the casts freed), but autograd runs the input cast's backward
 * (made after the weight's: F.linear's arguments are cast right to left) first: the fp32
 * input gradient (op upnm), added into *acc when given (autograd's input buffer of the node
 * that consumes it; 0 returned), and only then the weight's fp32 .grad. Other precisions:
 * the input gradient itself. */
uint64_t hf_linear_bwd_in(hf_x *x, int l, hf_param *p, const char *nm, uint64_t dy,
                          uint64_t *xs, uint64_t M, uint64_t N, uint64_t K, const char *upnm,
                          uint64_t *acc)
{
    uint64_t eb = x->CB;
    char b[TRACE_NAME_MAX];
    snprintf(b, sizeof b, "d_%s_in", nm);
    uint64_t w = x->amp ? p->cast : p->id, oid = x->next_oid++;
    uint64_t dw = hf_alloc(x, l, "dweight", p->n * eb, x->amp ? TC_ACT_TRANS : TC_GRAD,
                           (int64_t)oid);
    uint64_t dx = hf_alloc(x, l, b, M * K * eb, TC_ACT_TRANS, (int64_t)oid);
    MS_JOIN(b, sizeof b, nm, ".bwd");
    hf_op o = { .kind = TK_GEMM, .layer = l, .what = b, .br = 2 * (M * N + M * K + N * K) * eb,
                .bw = (N * K + M * K) * eb, .in = { dy, *xs, w }, .nin = 3,
                .out = { dw, dx }, .nout = 2,
                .flops = 4.0 * (double)M * (double)N * (double)K };
    o.dur = x->m ? hf_gemm_us(x, N, K, M, (int)eb, (M * N + M * K + N * K) * eb) +
                   hf_gemm_us(x, M, K, N, (int)eb, (M * N + M * K + N * K) * eb) : -1.0;
    hf_emit(x, oid, &o);
    hf_free(x, &dy);
    if (x->amp) { /* other precisions: *xs is the norm's output, which its caller frees */
        hf_free(x, &p->cast);
        hf_free(x, xs);
    }
    uint64_t d = hf_up32(x, l, upnm, &dx, M * K);
    if (acc) hf_acc(x, l, acc, &d, M * K * x->RB);
    hf_wgrad(x, l, p, &dw);
    return d;
}

/* amp: the input cast's backward, bf16 -> a new fp32 gradient. */
uint64_t hf_up32(hf_x *x, int l, const char *op, uint64_t *g, uint64_t n)
{
    if (!x->amp) {
        uint64_t r = *g;
        *g = 0;
        return r;
    }
    uint64_t r = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_TRANS, *g, 0, n * BF16, TK_ELEM, n);
    hf_free(x, g);
    return r;
}

/* Adds g into *acc (autograd's InputBuffer: the first gradient is kept, later ones added in
 * place and dropped). */
void hf_acc(hf_x *x, int l, uint64_t *acc, uint64_t *g, uint64_t bytes)
{
    if (!*acc) {
        *acc = *g;
        *g = 0;
        return;
    }
    hf_ew_inplace(x, l, "grad_add", *acc, *g, bytes);
    hf_free(x, g);
}

/* LlamaRMSNorm backward from the output gradient g (freed; ob bytes an element) over rows x
 * width elements of input dtype ib, node by node as autograd runs it (every RMSNorm of the
 * recorded traces: LLaMA, Phi-3): weight * hn (MulBackward0 makes the second factor's
 * gradient first): g * w, then g * hn summed over the rows into the weight's gradient (a
 * column reduction with its buffer); a promoted output (ob > ib) has g * w cast back to hn's
 * dtype; hn = (x * r).to(ib) up-cast (bf16); x * r: its r share (made first, summed over the
 * width) and its x share; rsqrt's backward (-0.5 * g * r^3: three [rows] tensors); mean's
 * (an expanded [rows, width] tensor); pow's (x.pow(1), * 2, * g). An fp32 input's two shares
 * go into *G as each is made; a bf16 input's are summed in place, then x.to(fp32)'s backward
 * casts the sum down into *G. Frees what the forward saved. */
static void hf_rms_bwd(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w, uint64_t *xf,
                       uint64_t *rs, uint64_t *nrm, uint64_t *in, uint64_t *G, uint64_t rows,
                       uint64_t width, uint64_t ib, uint64_t ob)
{
    uint64_t n = rows * width, oid, sb = 0;
    char op[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, nm, ".bwd_mul");
    uint64_t dn = hf_ew_nv(x, l, op, op, n * ob, TC_ACT_TRANS, *g, w->id, n * ob, TK_NORM, n);
    MS_JOIN(op, sizeof op, nm, ".bwd_wprod");
    uint64_t wp = hf_ew(x, l, op, op, n * ob, TC_ACT_TRANS, *g, *nrm, n * (ob + ib), TK_NORM);
    uint64_t wg = hf_alloc_op(x, l, "wgrad", w->n * x->PB, TC_GRAD, 0, &oid);
    uint64_t rb = hf_red_bytes(rows, width, &sb);
    uint64_t red = rb ? hf_alloc_tok(x, l, "reduce_ws", rb, TC_WORKSPACE, (int64_t)oid, 0) : 0;
    uint64_t sem = sb ? hf_alloc_tok(x, l, "reduce_sem", sb, TC_WORKSPACE, (int64_t)oid, 0) : 0;
    hf_op r = { .kind = TK_NORM, .layer = l, .what = "norm.wgrad", .br = n * ob,
                .bw = w->n * x->PB, .in = { wp }, .nin = 1, .out = { wg, red, sem }, .nout = 3,
                .flops = (double)n };
    hf_mem_op(x, oid, r);
    hf_free(x, &sem);
    hf_free(x, &red);
    hf_free(x, &wp);
    hf_accum_grad(x, w, wg);
    if (ob != ib) {
        MS_JOIN(op, sizeof op, nm, ".bwd_mul_cast");
        uint64_t d = hf_ew(x, l, op, op, n * ib, TC_ACT_TRANS, dn, 0, n * ob, TK_ELEM);
        hf_free(x, &dn);
        dn = d;
    }
    hf_free(x, g);
    hf_free(x, nrm);
    if (ib != F32) { /* .to(input_dtype) backward */
        MS_JOIN(op, sizeof op, nm, ".bwd_up");
        uint64_t d32 = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_TRANS, dn, 0, n * ib, TK_NORM, n);
        hf_free(x, &dn);
        dn = d32;
    }
    hf_rms_bwd_x(x, l, nm, dn, xf, rs, in, G, rows, width, ib);
}

/* A layer norm's backward over the residual stream. */
void hf_norm_bwd(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w, uint64_t *xf,
                        uint64_t *rs, uint64_t *nrm, uint64_t *in, uint64_t *G)
{
    if (x->gemma) {
        hf_gemma_norm_bwd(x, l, nm, g, w, xf, rs, nrm, in, G);
        return;
    }
    hf_rms_bwd(x, l, nm, g, w, xf, rs, nrm, in, G, x->T, x->h, x->RB, x->RB);
}

/* The backward of one rotated tensor (q or k, width w, input ib bytes an element) from its
 * gradient de, node by node as autograd runs `x * cos + rotate_half(x) * sin` (the product
 * with sin made later, so first): de * sin (cast back to the input's dtype when the rotation
 * ran promoted), rotate_half's backward (the negated half, then each half's slice backward:
 * zero-filled [T, w] tensors, the second added into the first), de * cos (cast) added too;
 * de is freed after its last read unless flags has HF_ROPE_KEEP (a view of a larger gradient
 * still needed); with HF_ROPE_LAST (the last rotary backward of the step) the cos and sin
 * tables go after their products. Returns the gradient, in [b, heads, s, d] order. */
uint64_t hf_rope_bwd_w(hf_x *x, int l, const char *nm, uint64_t *de, uint64_t w, uint64_t ib,
                       int flags)
{
    uint64_t n = x->T * w, eb = x->amp ? F32 : x->CB;
    char op[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, nm, ".rope_bwd_sin");
    uint64_t b = hf_ew_nv(x, l, op, op, n * eb, TC_ACT_TRANS, *de, x->sin, n * eb, TK_ELEM, n);
    if (eb != ib) {
        uint64_t c = hf_ew(x, l, op, op, n * ib, TC_ACT_TRANS, b, 0, n * eb, TK_ELEM);
        hf_free(x, &b);
        b = c;
    }
    if (flags & HF_ROPE_LAST) hf_free(x, &x->sin); /* the node releases it once done */
    MS_JOIN(op, sizeof op, nm, ".rope_bwd_neg");
    uint64_t ng = hf_ew_nv(x, l, op, op, n / 2 * ib, TC_ACT_TRANS, b, 0, n / 2 * ib, TK_ELEM,
                           n / 2);
    MS_JOIN(op, sizeof op, nm, ".rope_bwd_rot");
    uint64_t z = hf_slice_bwd(x, l, op, ng, n * ib, n / 2 * ib, n / 2);
    hf_free(x, &ng);
    uint64_t z1 = hf_slice_bwd(x, l, op, b, n * ib, n / 2 * ib, n / 2);
    hf_free(x, &b);
    hf_acc(x, l, &z, &z1, n * ib);
    MS_JOIN(op, sizeof op, nm, ".rope_bwd_cos");
    uint64_t a = hf_ew_nv(x, l, op, op, n * eb, TC_ACT_TRANS, *de, x->cos, n * eb, TK_ELEM, n);
    if (eb != ib) {
        uint64_t c = hf_ew(x, l, op, op, n * ib, TC_ACT_TRANS, a, 0, n * eb, TK_ELEM);
        hf_free(x, &a);
        a = c;
    }
    if (!(flags & HF_ROPE_KEEP)) hf_free(x, de);
    if (flags & HF_ROPE_LAST) hf_free(x, &x->cos);
    hf_acc(x, l, &z, &a, n * ib);
    return z;
}

/* A q/k gradient in [b, heads, s, d] order back through `.view(b, s, heads, d).transpose(1,
 * 2)`: the transposed gradient's reshape is a copy ([T, w], PyTorch's non-vectorized copy);
 * *g is freed. */
uint64_t hf_view_copy(hf_x *x, int l, const char *nm, uint64_t *g, uint64_t w)
{
    char op[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, nm, ".view.bwd");
    uint64_t n = x->T * w;
    uint64_t c = hf_ew_nv(x, l, op, op, n * x->CB, TC_ACT_TRANS, *g, 0, n * x->CB, TK_ELEM, n);
    hf_free(x, g);
    return c;
}

/* SDPA forward FLOPs: QK^T and PV over b·heads·s² scores of head_dim, 2 FLOPs a
 * multiply-add; causal attention computes half the scores, bidirectional (an encoder) all. */
static double hf_attn_flops(const hf_x *x)
{
    double causal = 2.0 * (double)x->b * (double)x->s * (double)x->s * (double)x->hq;
    return x->c->model.is_encoder ? 2.0 * causal : causal;
}

/* The cuDNN SDPA forward op over in[0..nin) (q, k, v or a tensor they are views of): the RNG
 * seed and offset it saves (with or without dropout: every recorded trace has them), the
 * output and the fp32 log-sum-exp, all saved for the backward, and a 256-byte scratch it
 * frees. */
void hf_sdpa_fwd_op(hf_x *x, int l, int dropout, const uint64_t *in, int nin, uint64_t *ao,
                    uint64_t *lse, uint64_t *seed, uint64_t *offs)
{
    uint64_t T = x->T, oid;
    *seed = hf_alloc_op(x, l, "sdpa_seed", 8, TC_ACT_SKEL, 0, &oid);
    *offs = hf_alloc_tok(x, l, "sdpa_offset", 8, TC_ACT_SKEL, (int64_t)oid, 0);
    *ao = hf_alloc(x, l, "attn_out", T * x->hq * x->CB, TC_ACT_SKEL, (int64_t)oid);
    *lse = hf_alloc(x, l, "attn_lse", x->b * x->heads * x->s * F32, TC_ACT_SKEL, (int64_t)oid);
    uint64_t sc = hf_alloc_tok(x, l, "sdpa_scratch", 256, TC_WORKSPACE, (int64_t)oid, 0);
    double fl = hf_attn_flops(x);
    hf_op o = { .kind = TK_ATTN, .layer = l, .what = "sdpa", .flops = fl,
                .br = T * (x->hq + 2 * x->kv) * x->CB, .bw = T * x->hq * x->CB,
                .nin = nin, .out = { *ao, *lse, *seed, *offs, sc }, .nout = 5 };
    for (int k = 0; k < nin; k++) o.in[k] = in[k];
    o.dur = x->m ? roof_attn_hd_us(x->m, &x->c->roof, fl, o.br + o.bw, x->s,
                                   model_head_dim(&x->c->model), 0, dropout) : -1.0;
    hf_emit(x, oid, &o);
    hf_free(x, &sc);
}

/* A tensor made by a new op: the op's id in *oid. */
uint64_t hf_alloc_op(hf_x *x, int l, const char *what, uint64_t bytes, trace_class cls, int tok,
                     uint64_t *oid)
{
    *oid = x->next_oid++;
    return hf_alloc_tok(x, l, what, bytes, cls, (int64_t)*oid, tok);
}

/* The cuDNN SDPA backward op over `in` (the output gradient first, then what the forward
 * saved): dq, dk and dv, and the workspace (fp32 dQ accumulator, softmax statistics) it
 * frees. The caller frees what its forward saved. */
void hf_sdpa_bwd_op(hf_x *x, int l, int dropout, const uint64_t *in, int nin, uint64_t *dq,
                    uint64_t *dk, uint64_t *dv)
{
    uint64_t T = x->T, eb = x->CB, oid = x->next_oid++;
    *dq = hf_alloc(x, l, "dq", T * x->hq * eb, TC_ACT_TRANS, (int64_t)oid);
    *dk = hf_alloc(x, l, "dk", T * x->kv * eb, TC_ACT_TRANS, (int64_t)oid);
    *dv = hf_alloc(x, l, "dv", T * x->kv * eb, TC_ACT_TRANS, (int64_t)oid);
    /* the fp32 dQ accumulator, twice over with grouped KV heads: the recorded allocator
     * traces of experiments/realworld/h200 show T x q-width x 8 bytes for every GQA model
     * (LLaMA-3.2, TinyLlama, Mistral, Qwen2.5, Mixtral: 10 traces) and x 4 for every one with
     * as many KV heads as query heads (GPT-2, Qwen2-MoE: 6) */
    uint64_t acc = x->kv < x->hq ? 2 * F32 : F32;
    uint64_t ws = hf_alloc(x, l, "sdpa_bwd_ws", T * x->hq * acc + x->b * x->heads * x->s * F32
                           + SDPA_WS_EXTRA, TC_WORKSPACE, (int64_t)oid);
    double fl = 2.5 * hf_attn_flops(x);
    hf_op o = { .kind = TK_ATTN, .layer = l, .what = "sdpa.bwd", .flops = fl,
                .br = T * (2 * x->hq + 2 * x->kv) * eb, .bw = T * (x->hq + 2 * x->kv) * eb,
                .nin = nin, .out = { *dq, *dk, *dv, ws }, .nout = 4 };
    for (int k = 0; k < nin; k++) o.in[k] = in[k];
    o.dur = x->m ? roof_attn_hd_us(x->m, &x->c->roof, fl, o.br + o.bw, x->s,
                                   model_head_dim(&x->c->model), 1, dropout) : -1.0;
    hf_emit(x, oid, &o);
    /* grouped KV heads: cuDNN makes dK and dV per query head (in the workspace, bf16) and sums
     * each group into dk and dv, one fmha_reduce_head kernel each (the kernel profiles of
     * experiments/realworld: two a layer, 26 us each at Qwen3-0.6B's 8 x 2K) */
    for (int k = 0; x->kv < x->hq && k < 2; k++) {
        hf_op r = { .kind = TK_ELEM, .layer = l, .what = "sdpa.bwd.reduce_head",
                    .br = T * x->hq * eb, .bw = T * x->kv * eb, .in = { ws }, .nin = 1,
                    .out = { k ? *dv : *dk }, .nout = 1, .flops = (double)(T * x->hq) };
        hf_mem_op(x, x->next_oid++, r);
    }
    hf_free(x, &ws);
}

/* The cuDNN SDPA backward, then everything SDPA saved. */
void hf_sdpa_bwd(hf_x *x, int l, hf_ls *s, uint64_t *dao, uint64_t *dq, uint64_t *dk,
                        uint64_t *dv)
{
    const uint64_t in[] = { *dao, s->q, s->k, s->v, s->ao, s->lse, s->seed, s->offs };
    hf_sdpa_bwd_op(x, l, 0, in, 8, dq, dk, dv);
    hf_free(x, dao);
    hf_free(x, &s->k);
    hf_free(x, &s->q);
    hf_free(x, &s->v);
    hf_free(x, &s->lse);
    hf_free(x, &s->ao);
    hf_free(x, &s->seed);
    hf_free(x, &s->offs);
}

/* amp: the bf16 gradient of a bf16 tensor added to the fp32 residual (type promotion's
 * backward casts the gradient to the input's dtype). */
uint64_t hf_down16(hf_x *x, int l, const char *op, uint64_t G)
{
    uint64_t n = x->T * x->h;
    if (!x->amp) return G;
    return hf_ew(x, l, op, op, n * BF16, TC_ACT_TRANS, G, 0, n * F32, TK_ELEM);
}

static void hf_mlp_bwd(hf_x *x, int l, hf_ls *s, uint64_t *G)
{
    uint64_t T = x->T, h = x->h, f = x->f, n = T * f * x->CB, dxa = 0;
    if (model_layer_is_moe(&x->c->model, (uint64_t)l)) {
        dxa = hf_moe_bwd(x, l, s, *G);
        hf_norm_bwd(x, l, "ln2", &dxa, hf_lp(x, l, P_LN2), &s->n2x, &s->n2rs, &s->n2nrm,
                    x->insaved ? &s->r1 : NULL, G);
        return;
    }
    if (x->phi3) {
        hf_phi3_mlp_bwd(x, l, s, G);
        return;
    }
    /* amp: a bf16 copy of the residual gradient; else the residual gradient itself */
    uint64_t gd = hf_down16(x, l, "add2.bwd", *G);
    uint64_t dp = hf_linear_bwd(x, l, hf_lp(x, l, P_DOWN), "down_proj", gd, x->amp, &s->prod,
                                T, h, f, 1);
    uint64_t du = hf_ew(x, l, "act_mul.bwd_up", "d_up", n, TC_ACT_TRANS, dp, s->act, 2 * n,
                        TK_ELEM);
    uint64_t da = hf_ew(x, l, "act_mul.bwd_act", "d_act", n, TC_ACT_TRANS, dp, s->up, 2 * n,
                        TK_ELEM);
    hf_free(x, &dp);
    hf_free(x, &s->up);
    hf_free(x, &s->act);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_UP), "up_proj", du, &s->xu, T, f, h,
                     "up_proj.xcast.bwd", &dxa);
    uint64_t dg = hf_ew(x, l, "act.bwd", "d_gate", n, TC_ACT_TRANS, da, s->gate, 2 * n, TK_ACT);
    hf_free(x, &da);
    hf_free(x, &s->gate);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_GATE), "gate_proj", dg, &s->xg, T, f, h,
                     "gate_proj.xcast.bwd", &dxa);
    if (!x->amp) hf_free(x, &s->n2out);
    hf_norm_bwd(x, l, "ln2", &dxa, hf_lp(x, l, P_LN2), &s->n2x, &s->n2rs, &s->n2nrm,
                x->insaved ? &s->r1 : NULL, G);
}

static void hf_attn_bwd(hf_x *x, int l, hf_ls *s, uint64_t *G)
{
    if (x->phi3) {
        hf_phi3_attn_bwd(x, l, s, G);
        return;
    }
    uint64_t T = x->T, h = x->h, dxa = 0, dq, dk, dv, xd = s->ao;
    int qk = model_has_qk_norm(&x->c->model);
    uint64_t ob = x->amp ? F32 : x->CB;
    uint64_t go = hf_down16(x, l, "add1.bwd", *G);
    uint64_t dao = hf_linear_bwd(x, l, hf_lp(x, l, P_O), "o_proj", go, x->amp, &xd, T, h,
                                 x->hq, 0);
    hf_sdpa_bwd(x, l, s, &dao, &dq, &dk, &dv);
    uint64_t dqe = hf_up32(x, l, "sdpa.qcast.bwd", &dq, T * x->hq);
    uint64_t dke = hf_up32(x, l, "sdpa.kcast.bwd", &dk, T * x->kv);
    uint64_t dk2 = hf_rope_bwd_w(x, l, "k", &dke, x->kv, qk ? ob : x->CB, 0);
    uint64_t dq2 = hf_rope_bwd_w(x, l, "q", &dqe, x->hq, qk ? ob : x->CB,
                                 l == 0 ? HF_ROPE_LAST : 0);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_V), "v_proj", dv, &s->xv, T, x->kv, h,
                     "v_proj.xcast.bwd", &dxa);
    if (qk) { /* k_norm's, then q_norm's backward: the projections' output gradients */
        uint64_t gk = 0, gq = 0;
        hf_rms_bwd(x, l, "k_norm", &dk2, hf_lp(x, l, P_KN), &s->knx, &s->knrs, &s->knnrm,
                   &s->kin, &gk, T * x->kv / x->hd, x->hd, x->CB, ob);
        dk2 = gk;
        hf_linear_bwd_in(x, l, hf_lp(x, l, P_K), "k_proj", dk2, &s->xk, T, x->kv, h,
                         "k_proj.xcast.bwd", &dxa);
        hf_rms_bwd(x, l, "q_norm", &dq2, hf_lp(x, l, P_QN), &s->qnx, &s->qnrs, &s->qnnrm,
                   &s->qin, &gq, T * x->heads, x->hd, x->CB, ob);
        dq2 = gq;
        goto q_proj;
    }
    dk2 = hf_view_copy(x, l, "k", &dk2, x->kv);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_K), "k_proj", dk2, &s->xk, T, x->kv, h,
                     "k_proj.xcast.bwd", &dxa);
    dq2 = hf_view_copy(x, l, "q", &dq2, x->hq);
q_proj:
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_Q), "q_proj", dq2, &s->xq, T, x->hq, h,
                     "q_proj.xcast.bwd", &dxa);
    if (!x->amp) hf_free(x, &s->n1out);
    hf_norm_bwd(x, l, "ln1", &dxa, hf_lp(x, l, P_LN1), &s->n1x, &s->n1rs, &s->n1nrm,
                x->insaved ? &s->in : NULL, G);
}

/* The loss and head backward: nll's zero-filled gradient, log_softmax's, the .float()
 * cast's, then lm_head (autograd's thread makes its own cuBLAS workspace on the first
 * backward GEMM). Returns the final norm's output gradient. */
/* The loss's backward as cross_entropy runs it: nll_loss's, log_softmax's (fp32; the saved
 * log-probabilities freed), then *labels freed when given (the shifted labels' copy), and
 * below fp32 the logits.float() cast's backward. Returns the logits' gradient. */
uint64_t hf_loss_bwd(hf_x *x, uint64_t *labels)
{
    uint64_t T = x->T, V = x->V;
    uint64_t dl = hf_nll_bwd(x, labels, F32, F32);
    uint64_t dlf = hf_ew(x, -1, "log_softmax.bwd", "d_logits_fp32", T * V * F32, TC_ACT_TRANS,
                         dl, x->logsm, 2 * T * V * F32, TK_LOSS);
    hf_free(x, &dl);
    hf_free(x, &x->logsm);
    uint64_t dlg = dlf;
    if (x->CB != F32) {
        dlg = hf_ew(x, -1, "logits.float.bwd", "d_logits", T * V * x->CB, TC_ACT_TRANS, dlf, 0,
                    T * V * F32, TK_ELEM);
        hf_free(x, &dlf);
    }
    return dlg;
}

uint64_t hf_head_bwd(hf_x *x)
{
    uint64_t T = x->T, V = x->V, h = x->h;
    uint64_t dlg = hf_loss_bwd(x, &x->labels);
    hf_param *hw = hf_headw(x);
    uint64_t w = x->amp ? hw->cast : hw->id;
    uint64_t oid = x->next_oid++, eb = x->CB;
    uint64_t dw = hf_alloc(x, -1, "lm_head.dweight", hw->n * eb, x->amp ? TC_ACT_TRANS : TC_GRAD,
                           (int64_t)oid);
    if (x->iter == 0) x->ws_bwd = hf_alloc(x, -1, "cublas_ws_bwd", CUBLAS_WS, TC_OTHER, -1);
    uint64_t dx = hf_alloc(x, -1, "d_norm_out", T * h * eb, TC_ACT_TRANS, (int64_t)oid);
    hf_op o = { .kind = TK_GEMM, .layer = -1, .what = "lm_head.bwd",
                .br = 2 * (T * V + T * h + V * h) * eb, .bw = (V * h + T * h) * eb,
                .in = { dlg, x->head_x, w }, .nin = 3, .out = { dw, dx }, .nout = 2,
                .flops = 4.0 * (double)T * (double)V * (double)h };
    o.dur = x->m ? hf_gemm_us(x, V, h, T, (int)eb, (T * V + T * h + V * h) * eb) +
                   hf_gemm_us(x, T, h, V, (int)eb, (T * V + T * h + V * h) * eb) : -1.0;
    hf_emit(x, oid, &o);
    hf_free(x, &dlg);
    if (x->amp) {
        hf_free(x, &hw->cast);
        hf_free(x, &x->head_x);
    }
    uint64_t g = hf_up32(x, -1, "lm_head.xcast.bwd", &dx, T * h);
    hf_wgrad(x, -1, hw, &dw);
    return g;
}

/* The embedding's backward (embedding_dense_backward: a zero-filled [V, h] gradient,
 * scatter-added); the residual gradient is released before the gradient reaches .grad. */
static void hf_embed_bwd(hf_x *x, uint64_t *G)
{
    hf_param *e = hf_embed(x);
    if (x->gemma) hf_gemma_embed_bwd(x, G);
    uint64_t g = hf_embed_dense_bwd(x, "embed_tokens", *G, x->tokens, x->T, 0, x->V);
    hf_free(x, G);
    hf_accum_grad(x, e, g);
}

static void hf_backward(hf_x *x)
{
    uint64_t G = 0;
    hf_mark(x, TM_LAYER, -1);
    uint64_t g = hf_head_bwd(x);
    hf_norm_bwd(x, -1, "norm", &g, hf_fnorm(x), &x->head_xf, &x->head_rs, &x->head_nrm,
                x->insaved ? &x->head_in : NULL, &G);
    if (!x->amp) hf_free(x, &x->head_out);
    for (int l = x->L - 1; l >= 0 && !x->st; l--) {
        hf_mark(x, TM_LAYER, l);
        hf_mlp_bwd(x, l, &x->ls[l], &G);
        hf_attn_bwd(x, l, &x->ls[l], &G);
    }
    hf_mark(x, TM_LAYER, -1);
    hf_free(x, &x->cos); /* none left unless a layer's program did not release them */
    hf_free(x, &x->sin);
    hf_embed_bwd(x, &G);
}

/* ---- optimizer ---- */

/* torch.optim.AdamW (foreach, the CUDA default when not fused): the first step makes
 * exp_avg and exp_avg_sq per parameter (zeros_like, in the parameter's dtype: adam.py
 * _init_group); _multi_tensor_adam then runs its foreach kernels over all parameters of the
 * dtype group at once; _foreach_sqrt(exp_avg_sq) is the one list of temporaries, freed after
 * the update (last first). zero_grad() then sets every .grad to None. */
void hf_optimizer(hf_x *x)
{
    uint64_t tot = 0;
    for (size_t i = 0; i < x->np; i++) {
        hf_param *p = &x->p[i];
        if (!p->n) continue;
        tot += p->n;
        if (p->m1) continue;
        char nm[TRACE_NAME_MAX], a[TRACE_NAME_MAX];
        hf_pname(x, i, nm);
        snprintf(a, sizeof a, "%.36s.exp_avg", nm);
        p->m1 = hf_alloc(x, p->layer, a, p->n * x->PB, TC_OPTSTATE, -1);
        snprintf(a, sizeof a, "%.36s.exp_avg_sq", nm);
        p->m2 = hf_alloc(x, p->layer, a, p->n * x->PB, TC_OPTSTATE, -1);
    }
    static const char *const k1[] = { "adamw.lerp", "adamw.mul_sq", "adamw.addcmul",
                                      "adamw.decay" };
    static const int rw1[][2] = { { 2, 1 }, { 1, 1 }, { 2, 1 }, { 1, 1 } };
    for (int k = 0; k < 4; k++) {
        hf_op o = { .kind = TK_OPTIM, .layer = -1, .what = k1[k],
                    .br = tot * x->PB * (uint64_t)rw1[k][0], .bw = tot * x->PB * (uint64_t)rw1[k][1],
                    .flops = (double)tot };
        hf_mem_op(x, x->next_oid++, o);
    }
    uint64_t *sq = calloc(x->np, sizeof *sq);
    if (!sq) {
        x->st = MS_ERR_NOMEM;
        return;
    }
    uint64_t oid = x->next_oid++;
    for (size_t i = 0; i < x->np; i++)
        if (x->p[i].n)
            sq[i] = hf_alloc(x, x->p[i].layer, "adamw.sqrt", x->p[i].n * x->PB, TC_WORKSPACE,
                             (int64_t)oid);
    hf_op s = { .kind = TK_OPTIM, .layer = -1, .what = "adamw.sqrt", .br = tot * x->PB,
                .bw = tot * x->PB, .flops = (double)tot };
    hf_mem_op(x, oid, s);
    static const char *const k2[] = { "adamw.div", "adamw.add_eps", "adamw.addcdiv" };
    static const int rw2[][2] = { { 1, 1 }, { 1, 1 }, { 3, 1 } };
    for (int k = 0; k < 3; k++) {
        hf_op o = { .kind = TK_OPTIM, .layer = -1, .what = k2[k],
                    .br = tot * x->PB * (uint64_t)rw2[k][0], .bw = tot * x->PB * (uint64_t)rw2[k][1],
                    .flops = (double)tot };
        hf_mem_op(x, x->next_oid++, o);
    }
    for (size_t i = x->np; i-- > 0;) hf_free(x, &sq[i]);
    free(sq);
    for (size_t i = 0; i < x->np; i++) hf_free(x, &x->p[i].grad);
}

/* ---- driver ---- */

static const hf_family hf_family_llama = {
    .embed_fwd = hf_embed_fwd, .layer_fwd = hf_layer_fwd, .head_fwd = hf_head_fwd,
    .backward = hf_backward,
};

static void hf_iteration(hf_x *x, const hf_family *f, int it)
{
    x->iter = it;
    hf_free(x, &x->loss); /* the last step's, which the loop drops (`del loss`) */
    hf_mark(x, TM_ITER, it);
    x->phase = TP_FWD;
    hf_mark(x, TM_PHASE, TP_FWD);
    hf_mark(x, TM_LAYER, -1);
    uint64_t h = f->embed_fwd(x);
    for (int l = 0; l < x->L && !x->st; l++) {
        hf_mark(x, TM_LAYER, l);
        h = f->layer_fwd(x, l, h);
    }
    hf_mark(x, TM_LAYER, -1);
    f->head_fwd(x, h);
    x->phase = TP_BWD;
    hf_mark(x, TM_PHASE, TP_BWD);
    f->backward(x);
    hf_free(x, &x->ones); /* the loss's gradient, held by backward() to its end */
    x->phase = TP_OPT;
    hf_mark(x, TM_PHASE, TP_OPT);
    hf_optimizer(x);
}

static void hf_sizes(hf_x *x, const gen_config *c)
{
    const model_t *md = &c->model;
    x->b = c->micro_batch;
    x->s = c->seq;
    x->T = x->b * x->s;
    x->h = md->hidden;
    x->heads = md->heads;
    x->hd = md->head_dim ? md->head_dim : md->hidden / md->heads;
    x->hq = x->heads * x->hd;
    x->kv = md->kv_heads * x->hd;
    x->f = md->ffn_hidden;
    x->V = md->vocab;
    x->L = (int)md->layers;
    x->tied = md->tied_embeddings;
    x->amp = c->precision == GEN_PREC_AMP || c->precision == GEN_PREC_AUTO;
    int fp32 = c->precision == GEN_PREC_FP32;
    x->PB = x->amp || fp32 ? F32 : BF16;
    x->CB = fp32 ? F32 : BF16;
    x->RB = x->amp || fp32 ? F32 : BF16;
    x->insaved = x->RB == F32;
    x->gpt2 = strcmp(md->family, "gpt2") == 0;
    x->phi3 = !strcmp(md->family, "phi3");
    x->bert = !strcmp(md->family, "bert");
    x->nnlin = x->bert;
    x->gemma = !strcmp(md->family, "gemma");
    x->q3moe = !strcmp(md->family, "qwen3_moe");
    x->rd = md->rotary_pct > 0 ? (uint64_t)((double)x->hd * md->rotary_pct) : x->hd;
    x->lnfam = !strcmp(md->family, "gpt_neox") ? HF_LN_NEOX
             : !strcmp(md->family, "opt") ? HF_LN_OPT : 0;
}

static size_t hf_nparams(const hf_x *x)
{
    if (x->gpt2) return hf_g2_nparams(x);
    if (x->lnfam) return hf_ln_nparams(x);
    if (x->bert) return hf_bert_nparams(x);
    return 2 + (size_t)x->L * P_SLOTS + 1;
}

static void hf_plan(hf_x *x)
{
    if (x->gpt2) hf_g2_plan_params(x);
    else if (x->lnfam) hf_ln_plan_params(x);
    else if (x->bert) hf_bert_plan_params(x);
    else hf_plan_params(x);
}

static const char *const hf_families[] = { "llama", "mistral", "qwen2", "qwen3", "phi3",
                                           "gpt2", "gpt_neox", "opt", "bert", "mixtral",
                                           "qwen2_moe", "qwen3_moe", "gemma", NULL };

ms_status gen_hf_check(const gen_config *c, ms_error *err)
{
    const char *fam = c->model.family;
    int ok = 0;
    for (int i = 0; hf_families[i] && !ok; i++) ok = strcmp(fam, hf_families[i]) == 0;
    if (!ok) {
        char list[256] = "";
        size_t len = 0;
        for (int i = 0; hf_families[i] && len < sizeof list; i++)
            len += MS_JOIN(list + len, sizeof list - len, i ? ", " : "", hf_families[i]);
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf does not model the model family "
                       "'%s' of %s (modelled: %s)", fam[0] ? fam : "(none)", c->model.name,
                       list);
    }
    if (c->ep > 1)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf models PyTorch eager with "
                       "transformers on one GPU, which has no expert parallelism (ep %d); use "
                       "--framework megatron (or generic) for ep > 1", c->ep);
    if (c->tp != 1 || c->cp != 1 || c->dp != 1 || c->lora || c->zero3 || c->offload ||
        c->hf_loss || (c->model.is_encoder && strcmp(fam, "bert")) ||
        c->attn_impl != GEN_ATTN_FLASH)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf models one GPU's plain training "
                       "(tp = cp = dp = 1; no lora, zero3, offload, hf_loss, attn_impl eager "
                       "or encoders)");
    if (strcmp(fam, "gpt2") == 0) return hf_g2_check(c, err);
    if (!strcmp(fam, "gpt_neox") || !strcmp(fam, "opt")) return hf_ln_check(c, err);
    if (!strcmp(fam, "bert")) return hf_bert_check(c, err);
    if (c->model.mlp != MODEL_MLP_SWIGLU || c->model.norm != MODEL_NORM_RMS)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: family %s needs an RMSNorm "
                       "SwiGLU model", fam);
    return MS_OK;
}

uint64_t gen_hf_params(const gen_config *c)
{
    hf_x x;
    memset(&x, 0, sizeof x);
    x.c = c;
    hf_sizes(&x, c);
    x.np = hf_nparams(&x);
    x.p = calloc(x.np, sizeof *x.p);
    if (!x.p) return 0;
    hf_plan(&x);
    uint64_t n = 0;
    for (size_t i = 0; i < x.np; i++) n += x.p[i].n;
    free(x.p);
    return n;
}

static void hf_meta(hf_x *x)
{
    const gen_config *c = x->c;
    static const char *const pn[] = { "amp", "amp", "bf16", "fp32" };
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, gen_hf_params(c));
    if (!x->st) x->st = trace_set_meta(x->t, "framework", "hf");
    if (!x->st) x->st = trace_set_meta(x->t, "precision", pn[c->precision]);
    if (!x->st) x->st = trace_set_meta(x->t, "hf_params", buf);
    /* GPT-2: a checkpointed layer's weight casts stay in autocast's cache to the forward's
       end (planners/lower.c) */
    if (x->amp && !x->st)
        x->st = trace_set_meta(x->t, "autocast_cache", "1");
}

ms_status gen_hf_emit(const gen_config *c, const machine_t *m, trace_t *t)
{
    hf_x x;
    memset(&x, 0, sizeof x);
    x.c = c;
    x.m = m;
    x.t = t;
    x.next_tid = x.next_oid = 1;
    hf_sizes(&x, c);
    x.np = hf_nparams(&x);
    x.p = calloc(x.np, sizeof *x.p);
    x.ls = calloc((size_t)x.L, sizeof *x.ls);
    x.mls = hf_moe_alloc((size_t)x.L);
    if (!x.p || !x.ls || !x.mls) x.st = MS_ERR_NOMEM;
    if (!x.st) {
        hf_plan(&x);
        hf_meta(&x);
        if (x.bert) x.st = hf_bert_begin(&x); /* BERT's own setup: buffers, tying */
        else hf_setup(&x);
        if (x.gpt2 && !x.st) x.st = hf_g2_begin(&x);
        if (x.lnfam && !x.st) x.st = hf_ln_begin(&x);
        const hf_family *f = x.gpt2 ? &hf_family_gpt2 : x.lnfam ? &hf_family_ln
                           : x.bert ? &hf_family_bert : &hf_family_llama;
        for (int it = 0; it < c->iterations && !x.st; it++) hf_iteration(&x, f, it);
    }
    if (x.gpt2) hf_g2_end(&x);
    if (x.lnfam) hf_ln_end(&x);
    if (x.bert) hf_bert_end(&x);
    free(x.p);
    free(x.ls);
    free(x.mls);
    return x.st;
}

/* gen_hf_moe.c — the hf profile's mixture-of-experts layer (transformers 5.17's
 * MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock and Qwen3MoeSparseMoeBlock with the
 * "grouped_mm" experts implementation of integrations/moe.py), forward and backward,
 * allocation by allocation.
 * It shares gen_hf.c's emission helpers (hf_x, hf_ew, hf_linear, ...) through the hf
 * profile's internal header gen_hf_int.h. The program and its sources: docs/GENERATOR.md §11
 * "MoE layers".
 *
 * Dtypes: the experts' GEMMs run torch.nn.functional.grouped_mm on input.to(weight.dtype)
 * and the 3-D fp32 parameters: grouped_mm is on none of autocast's lists, so under amp the
 * experts run in fp32 (no weight casts, fp32 activations, fp32 saved tensors) and PyTorch
 * takes its grouped-GEMM fallback for non-bf16 operands, one cuBLAS sgemm per expert (and
 * two per expert in the backward) after copying the offsets to the host. In bf16 one grouped
 * kernel runs per projection. The router (a linear under autocast) is bf16 under amp. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/gen_hf_int.h"

/* cub's radix-sort temporaries of argsort / index_put_'s sort of S int64 keys (seen in the
 * allocator traces: 283135 B and 270847 B at S = 16384). */
#define MOE_SORT_WS(S) (17 * (S) + 4607)
#define MOE_ISORT_WS(S) (16 * (S) + 8703)
#define MOE_GMM_WS 67584          /* the bf16 grouped kernel's problem-size arrays */

/* What one MoE layer's forward saved (and the block's locals the backward needs). */
typedef struct hf_moe_ls {
    uint64_t xr;                   /* the router linear's saved input (amp: its bf16 cast) */
    uint64_t probs, topi, tsum, tclone;   /* softmax (fp32), top-k indices, renormalization */
    uint64_t perm, tokg, xg, wg, offs, mask;
    uint64_t gu, act, prod, dn, invp;     /* grouped GEMMs' saved outputs and inputs */
    uint64_t shdown, xsg, sig;     /* qwen2_moe: shared expert's output, gate input, sigmoid */
} hf_moe_ls;

typedef struct hf_moe_dims {
    uint64_t E, k, S, fe, fs, EB, WB, OB;
    int qwen;
} hf_moe_dims;

static void moe_dims(hf_x *x, hf_moe_dims *d)
{
    const model_t *md = &x->c->model;
    d->E = md->n_experts;
    d->k = md->experts_per_tok;
    d->S = x->T * d->k;
    d->fe = md->expert_ffn;
    d->fs = md->shared_ffn;
    d->qwen = strcmp(md->family, "qwen2_moe") == 0;
    d->EB = x->PB;                 /* the experts run in the parameters' dtype */
    /* Qwen2-MoE casts the routing weights to the hidden dtype; Qwen3MoeTopKRouter to its
     * logits' (the router linear's output: bf16 under amp, no-op in fp32); Mixtral keeps
     * them fp32 */
    d->WB = d->qwen ? x->RB : !strcmp(md->family, "qwen3_moe") ? x->CB : F32;
    d->OB = d->EB > d->WB ? d->EB : d->WB;   /* the weighted outputs' promoted dtype */
}

/* Tokens of expert e with the routing assumed: balanced (S / E), or with moe_imbalance r the
 * first expert takes r times the mean (at most T: a token picks an expert once) and the rest
 * share the remainder evenly. */
static uint64_t moe_tokens(hf_x *x, const hf_moe_dims *d, uint64_t e)
{
    double r = x->c->moe_imbalance > 1.0 ? x->c->moe_imbalance : 1.0;
    uint64_t mx = (uint64_t)(r * (double)d->S / (double)d->E + 0.5);
    if (mx > x->T) mx = x->T;
    if (mx > d->S) mx = d->S;
    if (d->E == 1) return d->S;
    if (r <= 1.0) {
        uint64_t q = d->S / d->E;
        return q + (e < d->S % d->E);
    }
    if (e == 0) return mx;
    uint64_t rest = d->S - mx, q = rest / (d->E - 1);
    return q + (e - 1 < rest % (d->E - 1));
}

static hf_moe_ls *moe_ls(hf_x *x, int l) { return &x->mls[l]; }

struct hf_moe_ls *hf_moe_alloc(size_t layers) { return calloc(layers, sizeof(hf_moe_ls)); }

void hf_moe_plan(hf_x *x, int l)
{
    const model_t *md = &x->c->model;
    if (!model_layer_is_moe(md, (uint64_t)l)) return;
    uint64_t h = x->h, E = md->n_experts, fe = md->expert_ffn, fs = md->shared_ffn;
    hf_lp(x, l, P_GATE)->n = fs * h;
    hf_lp(x, l, P_UP)->n = fs * h;
    hf_lp(x, l, P_DOWN)->n = h * fs;
    hf_lp(x, l, P_ROUTER)->n = E * h;
    hf_lp(x, l, P_EGU)->n = E * 2 * fe * h;
    hf_lp(x, l, P_EDN)->n = E * h * fe;
    hf_lp(x, l, P_SHG)->n = fs && md->shared_gate ? h : 0;
}

/* A small tensor not scaled by the tokens (offsets, histograms). */
static uint64_t moe_small(hf_x *x, int l, const char *nm, uint64_t bytes, trace_class cls)
{
    return hf_alloc_tok(x, l, nm, bytes, cls, -1, 0);
}

/* A sort's (argsort / index_put_'s) int64 buffers of S keys: nb buffers, the first freed as
 * the second is made (the pattern of the traces), and cub's temporaries. */
static void moe_sort(hf_x *x, int l, const char *nm, uint64_t S, int nb, uint64_t ws)
{
    uint64_t b[6] = { 0 };
    uint64_t oid = x->next_oid++;
    for (int i = 0; i < nb && i < 6; i++) {
        b[i] = hf_alloc(x, l, nm, S * 8, TC_ACT_TRANS, (int64_t)oid);
        if (i == 1) hf_free(x, &b[0]);
    }
    uint64_t w = hf_alloc(x, l, "sort_ws", ws, TC_WORKSPACE, (int64_t)oid);
    hf_op o = { .kind = TK_ELEM, .layer = l, .what = nm, .br = 3 * S * 8, .bw = 2 * S * 8,
                .out = { w }, .nout = 1, .flops = EW_FLOPS * (double)S };
    hf_mem_op(x, oid, o);
    hf_free(x, &w);
    for (int i = (nb < 6 ? nb : 6) - 1; i >= 0; i--) hf_free(x, &b[i]);
}

/* The grouped GEMM out[S, N] = in[S, K] W_e^T per expert group: under fp32 operands one
 * sgemm per expert with tokens (PyTorch's fallback), in bf16 one grouped kernel. bwd: the
 * backward's two products per group (input and weight gradients). */
static void moe_gmm(hf_x *x, int l, const hf_moe_dims *d, const char *nm, uint64_t in,
                    uint64_t w, uint64_t out, uint64_t N, uint64_t K, int bwd, uint64_t out2)
{
    uint64_t eb = d->EB;
    double mul = bwd ? 2.0 : 1.0;
    if (eb == F32) {
        for (uint64_t e = 0; e < d->E; e++) {
            uint64_t M = moe_tokens(x, d, e);
            if (!M) continue;
            for (int p = 0; p < (bwd ? 2 : 1); p++) {
                uint64_t oid = x->next_oid++;
                char a[TRACE_NAME_MAX];
                snprintf(a, sizeof a, "%s%s.e%" PRIu64, nm, p ? ".wgrad" : "", e);
                uint64_t by = (M * K + K * N + M * N) * eb;
                hf_op o = { .kind = TK_GEMM, .layer = l, .what = a, .br = (M * K + K * N) * eb,
                            .bw = M * N * eb, .in = { in, w }, .nin = 2,
                            .out = { p ? out2 : out }, .nout = 1,
                            .flops = 2.0 * (double)M * (double)N * (double)K };
                o.dur = hf_gemm_us(x, M, N, K, F32, by);
                hf_emit(x, oid, &o);
            }
        }
        return;
    }
    uint64_t oid = x->next_oid++;
    uint64_t ws = hf_alloc(x, l, "gmm_ws", MOE_GMM_WS, TC_WORKSPACE, (int64_t)oid);
    double us = 0, fl = 0;
    int n = 0;
    for (uint64_t e = 0; e < d->E && x->m; e++) {
        uint64_t M = moe_tokens(x, d, e);
        if (!M) continue;
        uint64_t by = (M * K + K * N + M * N) * eb;
        us += mul * (hf_gemm_us(x, M, N, K, (int)eb, by) - x->m->gpu_kernel_launch_us);
        n++;
    }
    fl = mul * 2.0 * (double)d->S * (double)N * (double)K;
    hf_op o = { .kind = TK_GEMM, .layer = l, .what = nm,
                .br = (uint64_t)mul * (d->S * K + d->E * K * N) * eb,
                .bw = (uint64_t)mul * d->S * N * eb, .in = { in, w }, .nin = 2,
                .out = { out, out2, ws }, .nout = 3, .flops = fl };
    o.dur = x->m ? us + (bwd ? 2 : 1) * x->m->gpu_kernel_launch_us : -1.0;
    (void)n;
    hf_emit(x, oid, &o);
    hf_free(x, &ws);
}

/* One grouped projection of the experts: the zero-initialized output [S, N], the GEMMs,
 * then the output masked (masked_fill of the rows no expert owns) into the tensor autograd
 * saves (class cls); the unmasked output is freed. */
static uint64_t moe_proj(hf_x *x, int l, const hf_moe_dims *d, const char *nm, uint64_t in,
                         hf_param *w, uint64_t N, uint64_t K, trace_class cls)
{
    uint64_t S = d->S, eb = d->EB;
    char a[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, "_raw");
    uint64_t oid = x->next_oid++;
    uint64_t raw = hf_alloc(x, l, a, S * N * eb, TC_ACT_TRANS, (int64_t)oid);
    hf_op z = { .kind = TK_ELEM, .layer = l, .what = "gmm.zero", .bw = S * N * eb,
                .out = { raw }, .nout = 1, .flops = EW_FLOPS * (double)(S * N) };
    hf_mem_op(x, oid, z);
    moe_gmm(x, l, d, nm, in, w->id, raw, N, K, 0, 0);
    MS_JOIN(a, sizeof a, nm, ".masked_fill");
    uint64_t out = hf_ew_nv(x, l, a, nm, S * N * eb, cls, raw, 0, S * N * eb, TK_ELEM, S * N);
    hf_free(x, &raw);
    return out;
}

/* Qwen2MoeMLP of the shared expert (gate, up, SiLU, down as the dense MLP); its output is
 * saved by the sigmoid gate's product. */
static void moe_shared_fwd(hf_x *x, int l, hf_ls *s, hf_moe_ls *q, uint64_t nout,
                           const hf_moe_dims *d)
{
    uint64_t T = x->T, h = x->h, f = d->fs, xd;
    s->gate = hf_linear(x, l, P_GATE, "shared.gate_proj", nout, 1, T, f, h, TC_ACT_SKEL, &s->xg);
    s->act = hf_ew(x, l, "shared.act", "shared.act_out", T * f * x->CB, TC_ACT_SKEL, s->gate, 0,
                   T * f * x->CB, TK_ACT);
    s->up = hf_linear(x, l, P_UP, "shared.up_proj", nout, 1, T, f, h, TC_ACT_SKEL, &s->xu);
    s->prod = hf_ew(x, l, "shared.act_mul", "shared.act_prod", T * f * x->CB, TC_ACT_SKEL,
                    s->act, s->up, 2 * T * f * x->CB, TK_ELEM);
    q->shdown = hf_linear(x, l, P_DOWN, "shared.down_proj", s->prod, 0, T, h, f, TC_ACT_SKEL,
                          &xd);
}

/* The sparse MoE block's forward from the post-attention norm's output s->n2out: returns
 * the block's output [T, h] in the residual dtype (freed by the caller after the residual
 * add). Under amp the norm's fp32 output dies with the block. */
uint64_t hf_moe_fwd(hf_x *x, int l, hf_ls *s)
{
    hf_moe_ls *q = moe_ls(x, l);
    hf_moe_dims d;
    moe_dims(x, &d);
    memset(q, 0, sizeof *q);
    uint64_t T = x->T, h = x->h, E = d.E, k = d.k, S = d.S, RB = x->RB, nout = s->n2out;
    if (d.fs) moe_shared_fwd(x, l, s, q, nout, &d);
    /* the router (MixtralTopKRouter / Qwen2MoeTopKRouter / Qwen3MoeTopKRouter): a linear
     * h -> E (autocast bf16), softmax over logits.float() (Qwen3's softmax(dtype=float) is
     * the same copy, then the softmax), top-k; Mixtral, and the Qwens with norm_topk_prob,
     * renormalize in place */
    uint64_t logits = hf_linear(x, l, P_ROUTER, "router", nout, 1, T, E, h, TC_ACT_TRANS, &q->xr);
    uint64_t lf = logits;
    if (x->CB != F32)
        lf = hf_ew(x, l, "router.float", "router_logits_fp32", T * E * F32, TC_ACT_TRANS, logits,
                   0, T * E * x->CB, TK_ELEM);
    q->probs = hf_ew(x, l, "router.softmax", "router_probs", T * E * F32, TC_ACT_SKEL, lf, 0,
                     T * E * F32, TK_ELEM);
    if (lf != logits) hf_free(x, &lf);
    uint64_t oid = x->next_oid++;
    uint64_t topv = hf_alloc(x, l, "topk_values", T * k * F32, TC_ACT_TRANS, (int64_t)oid);
    q->topi = hf_alloc(x, l, "topk_indices", T * k * 8, TC_ACT_SKEL, (int64_t)oid);
    hf_op tk = { .kind = TK_ELEM, .layer = l, .what = "router.topk", .br = T * E * F32,
                 .bw = T * k * 12, .in = { q->probs }, .nin = 1, .out = { topv, q->topi },
                 .nout = 2, .flops = EW_FLOPS * (double)(T * E) };
    hf_mem_op(x, oid, tk);
    if (x->c->model.norm_topk) { /* w /= w.sum(-1): the sum and the original w saved */
        q->tsum = hf_ew(x, l, "router.topk_sum", "topk_sum", T * F32, TC_ACT_SKEL, topv, 0,
                        T * k * F32, TK_ELEM);
        q->tclone = hf_ew(x, l, "router.div_self", "topk_orig", T * k * F32, TC_ACT_SKEL, topv,
                          0, T * k * F32, TK_ELEM);
        hf_ew_inplace(x, l, "router.topk_div", topv, q->tsum, T * k * F32);
    }
    uint64_t wts = topv;
    if (d.WB != F32) { /* routing_weights.to(hidden dtype) */
        wts = hf_ew(x, l, "router.to", "routing_weights", T * k * d.WB, TC_ACT_TRANS, topv, 0,
                    T * k * F32, TK_ELEM);
        hf_free(x, &topv);
    }
    /* grouped_mm_experts_forward: token ids, the expert-sorted permutation (argsort), the
     * tokens gathered in expert order, their weights, histc + cumsum offsets */
    uint64_t tok = hf_ew(x, l, "experts.token_idx", "token_idx", S * 8, TC_ACT_TRANS, 0, 0,
                         S * 8, TK_ELEM);
    oid = x->next_oid++;
    q->perm = hf_alloc(x, l, "perm", S * 8, TC_ACT_SKEL, (int64_t)oid);
    hf_op so = { .kind = TK_ELEM, .layer = l, .what = "experts.argsort", .br = S * 8,
                 .bw = S * 8, .in = { q->topi }, .nin = 1, .out = { q->perm }, .nout = 1,
                 .flops = EW_FLOPS * (double)S };
    hf_mem_op(x, oid, so);
    moe_sort(x, l, "argsort", S, 1, MOE_SORT_WS(S));
    q->tokg = hf_ew(x, l, "experts.token_idx_g", "token_idx_g", S * 8, TC_ACT_SKEL, tok,
                    q->perm, 2 * S * 8, TK_ELEM);
    q->xg = hf_ew(x, l, "experts.gather", "experts_in", S * h * RB, TC_ACT_SKEL, nout, q->tokg,
                  S * h * RB, TK_ELEM);
    q->wg = hf_ew(x, l, "experts.weights_g", "weights_g", S * d.WB, TC_ACT_SKEL, wts, q->perm,
                  S * d.WB, TK_ELEM);
    uint64_t ids = hf_ew(x, l, "experts.ids_int", "expert_ids_int", S * 4, TC_ACT_TRANS,
                         q->topi, 0, S * 8, TK_ELEM);
    uint64_t hist = moe_small(x, l, "tokens_per_expert", E * 4, TC_ACT_TRANS);
    q->offs = moe_small(x, l, "offsets", E * 4, TC_ACT_SKEL);
    uint64_t cws = moe_small(x, l, "cumsum_ws", 1023, TC_WORKSPACE);
    hf_op hc = { .kind = TK_ELEM, .layer = l, .what = "experts.histc_cumsum", .br = S * 4,
                 .bw = E * 8, .in = { ids }, .nin = 1, .out = { hist, q->offs }, .nout = 2,
                 .flops = EW_FLOPS * (double)S };
    hf_mem_op(x, x->next_oid++, hc);
    hf_free(x, &cws);
    q->mask = hf_ew(x, l, "experts.row_mask", "row_mask", S, TC_ACT_SKEL, q->offs, 0, S * 8,
                    TK_ELEM);
    /* the experts: gate_up grouped GEMM, SiLU(gate) * up, down grouped GEMM */
    q->gu = moe_proj(x, l, &d, "experts.gate_up", q->xg, hf_lp(x, l, P_EGU), 2 * d.fe, h,
                     TC_ACT_SKEL);
    uint64_t n = S * d.fe * d.EB;
    /* gate and up are halves of gate_up (chunk): strided views, the non-vectorized path */
    q->act = hf_ew_nv(x, l, "experts.act", "experts_act", n, TC_ACT_SKEL, q->gu, 0, n, TK_ACT,
                      S * d.fe);
    q->prod = hf_ew_nv(x, l, "experts.act_mul", "experts_prod", n, TC_ACT_SKEL, q->act, q->gu,
                       2 * n, TK_ELEM, S * d.fe);
    q->dn = moe_proj(x, l, &d, "experts.down", q->prod, hf_lp(x, l, P_EDN), h, d.fe,
                     TC_ACT_SKEL);
    /* weighting, the original order restored (argsort of perm), summed over the top-k */
    uint64_t ow = hf_ew_nv(x, l, "experts.weight_mul", "weighted", S * h * d.OB, TC_ACT_TRANS,
                           q->dn, q->wg, S * h * (d.EB + d.OB), TK_ELEM, S * h);
    oid = x->next_oid++;
    q->invp = hf_alloc(x, l, "inv_perm", S * 8, TC_ACT_SKEL, (int64_t)oid);
    uint64_t sv = hf_alloc(x, l, "inv_perm.values", S * 8, TC_ACT_TRANS, (int64_t)oid);
    hf_op io = { .kind = TK_ELEM, .layer = l, .what = "experts.inv_argsort", .br = S * 8,
                 .bw = 2 * S * 8, .in = { q->perm }, .nin = 1, .out = { q->invp, sv },
                 .nout = 2, .flops = EW_FLOPS * (double)S };
    hf_mem_op(x, oid, io);
    hf_free(x, &sv);
    uint64_t outp = hf_ew(x, l, "experts.unpermute", "unpermuted", S * h * d.OB, TC_ACT_TRANS,
                          ow, q->invp, S * h * d.OB, TK_ELEM);
    hf_free(x, &ow);
    uint64_t fin = hf_ew(x, l, "experts.topk_sum", "experts_out", T * h * d.OB, TC_ACT_TRANS,
                         outp, 0, S * h * d.OB, TK_ELEM);
    uint64_t fo = fin;
    if (d.OB != RB)
        fo = hf_ew(x, l, "experts.to", "experts_out_cast", T * h * RB, TC_ACT_TRANS, fin, 0,
                   T * h * d.OB, TK_ELEM);
    /* grouped_mm_experts_forward returns: its locals go together (what autograd saved
       stays; under checkpointing these are the tensors' last holders, as the recorded
       fx-mx4-amp-ck trace shows) */
    const uint64_t loc1[] = { q->topi, q->perm, q->tokg, q->xg, q->wg, q->offs, q->mask, q->dn };
    hf_locals(x, l, "experts.locals", loc1, 8);
    hf_locals(x, l, "experts.locals", &q->invp, 1);
    hf_free(x, &tok);
    hf_free(x, &ids);
    hf_free(x, &hist);
    hf_free(x, &outp);
    if (fo != fin) hf_free(x, &fin);
    if (d.fs) { /* Qwen2-MoE: + sigmoid(shared_expert_gate(x)) * shared_expert(x) */
        uint64_t sg = x->c->model.shared_gate ?
            hf_linear(x, l, P_SHG, "shared_gate", nout, 1, T, 1, h, TC_ACT_TRANS, &q->xsg) : 0;
        uint64_t sh = q->shdown;
        uint64_t mul = 0;
        if (sg) {
            q->sig = hf_ew(x, l, "shared_gate.sigmoid", "shared_sigmoid", T * x->CB,
                           TC_ACT_SKEL, sg, 0, T * x->CB, TK_ACT);
            hf_free(x, &sg);
            mul = hf_ew(x, l, "shared_gate.mul", "shared_gated", T * h * x->CB, TC_ACT_TRANS,
                        q->sig, sh, T * h * x->CB, TK_ELEM);
        }
        uint64_t sum = hf_ew(x, l, "shared.add", "moe_out", T * h * RB, TC_ACT_TRANS, fo,
                             mul ? mul : sh, T * h * (RB + x->CB), TK_ELEM);
        hf_free(x, &fo);
        hf_free(x, &mul);
        fo = sum;
    }
    hf_free(x, &logits);
    hf_free(x, &wts);
    if (x->amp) hf_free(x, &s->n2out);
    return fo;
}

/* ---- backward ---- */

static uint64_t moe_zeros(hf_x *x, int l, const char *nm, uint64_t bytes)
{
    return hf_ew(x, l, nm, nm, bytes, TC_ACT_TRANS, 0, 0, bytes, TK_ELEM);
}

/* An index op's backward: a zero-filled gradient of the source, index_put_ (accumulate) of
 * g into it after sorting the indices. */
static uint64_t moe_index_bwd(hf_x *x, int l, const char *nm, uint64_t bytes, uint64_t S)
{
    uint64_t z = moe_zeros(x, l, nm, bytes);
    moe_sort(x, l, "index_put.sort", S, 5, MOE_ISORT_WS(S));
    return z;
}

/* Backward of one grouped projection from its (masked) output's gradient *g (freed): the
 * masked_fill's backward, the 3-D weight's gradient (a new .grad in the parameter dtype: no
 * cast to undo) and the input gradient [S, K]. Frees the saved input *in. */
static uint64_t moe_proj_bwd(hf_x *x, int l, const hf_moe_dims *d, const char *nm, uint64_t *g,
                             uint64_t q_mask, hf_param *w, uint64_t *in, uint64_t N, uint64_t K)
{
    uint64_t S = d->S, eb = d->EB;
    char a[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".masked_fill.bwd");
    uint64_t gm = hf_ew_nv(x, l, a, a, S * N * eb, TC_ACT_TRANS, *g, q_mask, S * N * eb,
                           TK_ELEM, S * N);
    hf_free(x, g);
    uint64_t dw = hf_alloc(x, l, "expert_wgrad", w->n * x->PB, TC_GRAD, -1);
    MS_JOIN(a, sizeof a, "d_", nm, "_in");
    uint64_t dx = hf_alloc(x, l, a, S * K * eb, TC_ACT_TRANS, -1);
    MS_JOIN(a, sizeof a, nm, ".bwd");
    moe_gmm(x, l, d, a, gm, w->id, dx, K, N, 1, dw);
    hf_free(x, &gm);
    hf_free(x, in);
    hf_accum_grad(x, w, dw);
    return dx;
}

/* The router's backward from the gradient of the routing weights *gw (freed): the in-place
 * renormalization's, top-k's (scatter into zeros), softmax's, the .float()'s, then the
 * router linear; returns its input gradient in the residual dtype. */
static uint64_t moe_router_bwd(hf_x *x, int l, hf_moe_ls *q, const hf_moe_dims *d,
                               uint64_t *gw)
{
    uint64_t T = x->T, h = x->h, E = d->E, k = d->k, tk = T * k * F32;
    uint64_t gv = *gw;
    *gw = 0;
    if (d->WB != F32) {
        uint64_t t = hf_ew(x, l, "router.to.bwd", "d_topk_values", tk, TC_ACT_TRANS, gv, 0,
                           T * k * d->WB, TK_ELEM);
        hf_free(x, &gv);
        gv = t;
    }
    if (x->c->model.norm_topk) {
        uint64_t t1 = hf_ew(x, l, "router.div.bwd", "div_t1", tk, TC_ACT_TRANS, gv, q->tsum, tk,
                            TK_ELEM);
        uint64_t t2 = hf_ew(x, l, "router.div.bwd", "div_t2", tk, TC_ACT_TRANS, t1, q->tclone,
                            tk, TK_ELEM);
        uint64_t t3 = hf_ew(x, l, "router.div.bwd", "div_t3", tk, TC_ACT_TRANS, t2, q->tsum,
                            tk, TK_ELEM);
        uint64_t gs = hf_ew(x, l, "router.div.bwd", "d_self", tk, TC_ACT_TRANS, gv, q->tsum, tk,
                            TK_ELEM);
        hf_free(x, &t3);
        hf_free(x, &t2);
        hf_free(x, &t1);
        uint64_t g2 = hf_ew(x, l, "router.sum.bwd", "d_topk", tk, TC_ACT_TRANS, gs, 0, tk,
                            TK_ELEM);
        uint64_t sr = hf_ew(x, l, "router.sum.bwd", "d_topk_sum", T * F32, TC_ACT_TRANS, g2, 0,
                            tk, TK_ELEM);
        hf_free(x, &gs);
        hf_free(x, &gv);
        hf_free(x, &q->tsum);
        hf_free(x, &q->tclone);
        hf_free(x, &sr);
        gv = g2;
    }
    uint64_t gt = hf_ew(x, l, "router.topk.bwd", "d_probs", T * E * F32, TC_ACT_TRANS, gv,
                        q->topi, T * k * 12, TK_ELEM);
    hf_free(x, &gv);
    hf_free(x, &q->topi);
    uint64_t gsm = hf_ew(x, l, "router.softmax.bwd", "d_logits_fp32", T * E * F32,
                         TC_ACT_TRANS, gt, q->probs, 2 * T * E * F32, TK_ELEM);
    uint64_t tmp = hf_ew(x, l, "router.softmax.bwd", "softmax_bwd_tmp", T * E * F32,
                         TC_ACT_TRANS, gt, q->probs, 2 * T * E * F32, TK_ELEM);
    hf_free(x, &tmp);
    hf_free(x, &gt);
    hf_free(x, &q->probs);
    uint64_t gl = gsm;
    if (x->CB != F32) {
        gl = hf_ew(x, l, "router.float.bwd", "d_router_logits", T * E * x->CB, TC_ACT_TRANS,
                   gsm, 0, T * E * F32, TK_ELEM);
        hf_free(x, &gsm);
    }
    return hf_linear_bwd_in(x, l, hf_lp(x, l, P_ROUTER), "router", gl, &q->xr, T, E, h,
                            "router.xcast.bwd", NULL);
}

/* The shared expert's MLP backward from its output's gradient *g (freed): as the dense
 * MLP's; the input gradient is added into *dxa. */
static void moe_shared_bwd(hf_x *x, int l, hf_ls *s, const hf_moe_dims *d, uint64_t *g,
                           int free_g, uint64_t *dxa)
{
    uint64_t T = x->T, h = x->h, f = d->fs, n = T * f * x->CB;
    uint64_t dp = hf_linear_bwd(x, l, hf_lp(x, l, P_DOWN), "shared.down_proj", *g, free_g, &s->prod,
                                T, h, f, 1);
    *g = 0;
    uint64_t du = hf_ew(x, l, "shared.act_mul.bwd_up", "d_up", n, TC_ACT_TRANS, dp, s->act,
                        2 * n, TK_ELEM);
    uint64_t da = hf_ew(x, l, "shared.act_mul.bwd_act", "d_act", n, TC_ACT_TRANS, dp, s->up,
                        2 * n, TK_ELEM);
    hf_free(x, &dp);
    hf_free(x, &s->up);
    hf_free(x, &s->act);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_UP), "shared.up_proj", du, &s->xu, T, f, h,
                     "shared.up_proj.xcast.bwd", dxa);
    uint64_t dg = hf_ew(x, l, "shared.act.bwd", "d_gate", n, TC_ACT_TRANS, da, s->gate, 2 * n,
                        TK_ACT);
    hf_free(x, &da);
    hf_free(x, &s->gate);
    hf_linear_bwd_in(x, l, hf_lp(x, l, P_GATE), "shared.gate_proj", dg, &s->xg, T, f, h,
                     "shared.gate_proj.xcast.bwd", dxa);
}

/* The MoE block's backward from the residual gradient G (not freed: the residual stream's
 * accumulator): returns the gradient of the post-attention norm's output (residual dtype). */
uint64_t hf_moe_bwd(hf_x *x, int l, hf_ls *s, uint64_t G)
{
    hf_moe_ls *q = moe_ls(x, l);
    hf_moe_dims d;
    moe_dims(x, &d);
    uint64_t T = x->T, h = x->h, S = d.S, RB = x->RB, dxa = 0, dsh = 0;
    int free_sh = 1;
    if (d.fs) { /* the sigmoid gate's product and the shared gate linear run first */
        uint64_t gd = hf_down16(x, l, "shared.add.bwd", G);
        if (q->sig) {
            uint64_t n = T * h * x->CB;
            uint64_t t = hf_ew(x, l, "shared_gate.mul.bwd", "d_sig_full", n, TC_ACT_TRANS, gd,
                               q->shdown, 2 * n, TK_ELEM);
            uint64_t dsig = hf_ew(x, l, "shared_gate.mul.bwd", "d_sigmoid", T * x->CB,
                                  TC_ACT_TRANS, t, 0, n, TK_ELEM);
            hf_free(x, &t);
            dsh = hf_ew(x, l, "shared_gate.mul.bwd", "d_shared_out", n, TC_ACT_TRANS, gd,
                        q->sig, 2 * n, TK_ELEM);
            if (x->amp) hf_free(x, &gd);
            hf_free(x, &q->shdown);
            uint64_t dsg = hf_ew(x, l, "shared_gate.sigmoid.bwd", "d_shared_gate", T * x->CB,
                                 TC_ACT_TRANS, dsig, q->sig, 2 * T * x->CB, TK_ACT);
            hf_free(x, &dsig);
            hf_free(x, &q->sig);
            hf_linear_bwd_in(x, l, hf_lp(x, l, P_SHG), "shared_gate", dsg, &q->xsg, T, 1, h,
                             "shared_gate.xcast.bwd", &dxa);
        } else {
            dsh = gd;
            free_sh = x->amp;
            hf_free(x, &q->shdown);
        }
    }
    /* the experts: sum over top-k (expanded, made contiguous by the view's backward), the
     * un-permutation's index backward, the weighting's */
    uint64_t g = G, gc = 0;
    if (d.OB != RB)
        g = gc = hf_ew(x, l, "experts.to.bwd", "d_experts_out", T * h * d.OB, TC_ACT_TRANS, G,
                       0, T * h * RB, TK_ELEM);
    uint64_t gS = hf_ew(x, l, "experts.topk_sum.bwd", "d_unpermuted", S * h * d.OB,
                        TC_ACT_TRANS, g, 0, T * h * d.OB, TK_ELEM);
    hf_free(x, &gc);
    uint64_t z1 = moe_index_bwd(x, l, "d_weighted", S * h * d.OB, S);
    hf_free(x, &gS);
    hf_free(x, &q->invp);
    uint64_t t = hf_ew(x, l, "experts.weight_mul.bwd", "d_weights_full", S * h * d.OB,
                       TC_ACT_TRANS, z1, q->dn, 2 * S * h * d.OB, TK_ELEM);
    uint64_t gdn = hf_ew_nv(x, l, "experts.weight_mul.bwd", "d_experts_down", S * h * d.OB,
                            TC_ACT_TRANS, z1, q->wg, S * h * d.OB, TK_ELEM, S * h);
    uint64_t gwg = hf_ew(x, l, "experts.weight_mul.bwd", "d_weights_g", S * d.WB, TC_ACT_TRANS,
                         t, 0, S * h * d.OB, TK_ELEM);
    hf_free(x, &t);
    hf_free(x, &z1);
    hf_free(x, &q->wg);
    if (d.OB != d.EB) {
        uint64_t c = hf_ew(x, l, "experts.weight_mul.bwd", "d_experts_down_cast",
                           S * h * d.EB, TC_ACT_TRANS, gdn, 0, S * h * d.OB, TK_ELEM);
        hf_free(x, &gdn);
        gdn = c;
    }
    hf_free(x, &q->dn);
    uint64_t dprod = moe_proj_bwd(x, l, &d, "experts.down", &gdn, q->mask, hf_lp(x, l, P_EDN), &q->prod,
                                  h, d.fe);
    uint64_t n = S * d.fe * d.EB;
    uint64_t du = hf_ew_nv(x, l, "experts.act_mul.bwd_up", "d_experts_up", n, TC_ACT_TRANS,
                           dprod, q->act, 2 * n, TK_ELEM, S * d.fe);
    uint64_t da = hf_ew_nv(x, l, "experts.act_mul.bwd_act", "d_experts_act", n, TC_ACT_TRANS,
                           dprod, q->gu, 2 * n, TK_ELEM, S * d.fe);
    hf_free(x, &dprod);
    hf_free(x, &q->act);
    uint64_t dg = hf_ew_nv(x, l, "experts.act.bwd", "d_experts_gate", n, TC_ACT_TRANS, da,
                           q->gu, 2 * n, TK_ACT, S * d.fe);
    hf_free(x, &da);
    hf_free(x, &q->gu);
    uint64_t dgu = hf_ew(x, l, "experts.chunk.bwd", "d_experts_gate_up", 2 * n, TC_ACT_TRANS,
                         dg, du, 2 * n, TK_ELEM);
    hf_free(x, &dg);
    hf_free(x, &du);
    uint64_t dxg = moe_proj_bwd(x, l, &d, "experts.gate_up", &dgu, q->mask, hf_lp(x, l, P_EGU), &q->xg,
                                2 * d.fe, h);
    hf_free(x, &q->offs);
    /* the gathers' backwards: into expert order's source, the weights', the tokens' */
    uint64_t z2 = moe_zeros(x, l, "d_experts_in", S * h * RB);
    hf_free(x, &dxg);
    hf_free(x, &q->mask);
    uint64_t zw = moe_index_bwd(x, l, "d_routing_weights", S * d.WB, S);
    hf_free(x, &gwg);
    hf_free(x, &q->perm);
    uint64_t zh = moe_index_bwd(x, l, "d_moe_in", T * h * RB, S);
    hf_free(x, &z2);
    hf_free(x, &q->tokg);
    hf_acc(x, l, &dxa, &zh, T * h * RB);
    uint64_t dr = moe_router_bwd(x, l, q, &d, &zw);
    hf_acc(x, l, &dxa, &dr, T * h * RB);
    if (d.fs) moe_shared_bwd(x, l, s, &d, &dsh, free_sh, &dxa);
    if (!x->amp) hf_free(x, &s->n2out);
    return dxa;
}

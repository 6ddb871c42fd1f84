/* gen_hf_gpt2.c — the hf profile's GPT-2 program: transformers 5's GPT2LMHeadModel
 * (models/gpt2/modeling_gpt2.py) trained under PyTorch 2.11 eager as gen_hf.c's loop runs it:
 * wte + wpe + dropout, per GPT2Block ln_1, GPT2Attention (Conv1D c_attn h -> 3h, split, SDPA
 * with attention dropout, c_proj, resid_dropout), ln_2, GPT2MLP (c_fc, gelu_new as its
 * element-wise PyTorch ops, c_proj, dropout), ln_f, the LM head tied to wte and gen_hf.c's
 * ForCausalLMLoss, AdamW and driver. Every tensor the caching allocator sees, in the order
 * autograd makes and frees them, read off the H200 allocator traces of
 * experiments/realworld/h200/fx-gpt2*.trace.json.gz and the sources; the program is
 * docs/GENERATOR.md §11 "GPT-2". */
#include "traces/gen_hf_int.h"

#include <stdlib.h>
#include <string.h>

/* Parameter slots of a GPT2Block in registration order (ln_1, attn.c_attn, attn.c_proj,
 * ln_2, mlp.c_fc, mlp.c_proj; each weight then bias). The model's parameters are wte, wpe,
 * the blocks, ln_f (weight, bias), then lm_head when untied. */
enum {
    G_LN1W, G_LN1B, G_ATTNW, G_ATTNB, G_APROJW, G_APROJB, G_LN2W, G_LN2B, G_FCW, G_FCB,
    G_MPROJW, G_MPROJB, G_SLOTS
};

static const char *const g2_slot_name[G_SLOTS] = {
    "ln_1.w", "ln_1.b", "attn.c_attn.w", "attn.c_attn.b", "attn.c_proj.w", "attn.c_proj.b",
    "ln_2.w", "ln_2.b", "mlp.c_fc.w", "mlp.c_fc.b", "mlp.c_proj.w", "mlp.c_proj.b"
};

/* Conv1D layers of a block, for their autocast bias casts. */
enum { C_ATTN, C_APROJ, C_FC, C_MPROJ, C_N };

/* cuBLASLt's workspace (1 MiB, CublasHandlePool.cpp's default size), taken by a thread's
 * first addmm with a bias epilogue: the forward's first c_attn (it stays). */
#define CUBLASLT_WS (1ull << 20)
/* Resident threads per multiprocessor on Hopper, for the size of a column reduction's global
 * buffer (hf_red_bytes). */
#define G2_THREADS_PER_SM 2048

/* What one block's forward saved for its backward (and what its frames hold). */
typedef struct g2_ls {
    uint64_t in;                  /* the block input (saved by ln_1) */
    uint64_t n1, mu1, rs1;        /* ln_1 output (bf16: saved by c_attn), mean, rstd */
    uint64_t xa;                  /* c_attn's saved input (amp: its bf16 cast) */
    uint64_t qkv;                 /* c_attn's output: q, k, v are views of it, SDPA saves them */
    uint64_t seed, offs, ao, lse; /* SDPA's dropout seed and offset, output, log-sum-exp */
    uint64_t m1, d1;              /* attention residual dropout: mask, output */
    uint64_t r1;                  /* residual after attention (saved by ln_2) */
    uint64_t n2, mu2, rs2;
    uint64_t xf;                  /* c_fc's saved input */
    uint64_t fc;                  /* c_fc's output (bf16: saved by pow) */
    uint64_t half, x32, th, op1;  /* gelu_new: 0.5x, amp's fp32 x (pow), tanh, 1 + tanh */
    uint64_t xp;                  /* the MLP c_proj's saved input */
    uint64_t m2, d2;              /* MLP dropout: mask, output */
    uint64_t bc[C_N];             /* amp: bias casts, held by autocast's cache */
} g2_ls;

struct hf_g2 {
    g2_ls *ls;
    uint64_t wte_out, wpe_out, pos, emask, lnf_mu, lnf_rs;
    double pd, ad;                /* residual/embedding and attention dropout probabilities */
};

static hf_param *g2_lp(hf_x *x, int l, int j) { return &x->p[2 + (size_t)l * G_SLOTS + j]; }
static hf_param *g2_lnf(hf_x *x, int j) { return &x->p[2 + (size_t)x->L * G_SLOTS + j]; }

size_t hf_g2_nparams(const hf_x *x)
{
    return 4 + (size_t)x->L * G_SLOTS + (x->tied ? 0 : 1);
}

void hf_g2_plan_params(hf_x *x)
{
    uint64_t h = x->h, f = x->f, w3 = x->hq + 2 * x->kv;
    x->p[0].n = x->V * h;
    x->p[1].n = x->c->model.pos_rows * h;
    x->p[0].layer = x->p[1].layer = -1;
    for (int l = 0; l < x->L; l++) {
        uint64_t n[G_SLOTS] = { h, h, h * w3, w3, x->hq * h, h, h, h, h * f, f, f * h, h };
        for (int j = 0; j < G_SLOTS; j++) {
            g2_lp(x, l, j)->n = n[j];
            g2_lp(x, l, j)->layer = l;
        }
    }
    for (int j = 0; j < 2; j++) {
        g2_lnf(x, j)->n = h;
        g2_lnf(x, j)->layer = -1;
    }
    if (!x->tied) {
        x->p[x->np - 1].n = x->V * h;
        x->p[x->np - 1].layer = -1;
    }
}

void hf_g2_pname(const hf_x *x, size_t i, char *nm)
{
    size_t lnf = 2 + (size_t)x->L * G_SLOTS;
    if (i == 0) MS_JOIN(nm, TRACE_NAME_MAX, "wte.w");
    else if (i == 1) MS_JOIN(nm, TRACE_NAME_MAX, "wpe.w");
    else if (i == lnf) MS_JOIN(nm, TRACE_NAME_MAX, "ln_f.w");
    else if (i == lnf + 1) MS_JOIN(nm, TRACE_NAME_MAX, "ln_f.b");
    else if (i > lnf) MS_JOIN(nm, TRACE_NAME_MAX, "lm_head.w");
    else snprintf(nm, TRACE_NAME_MAX, "L%d.%s", x->p[i].layer, g2_slot_name[(i - 2) % G_SLOTS]);
}

ms_status hf_g2_check(const gen_config *c, ms_error *err)
{
    const model_t *m = &c->model;
    if (m->norm != MODEL_NORM_LAYER || m->mlp != MODEL_MLP_GELU || m->act != MODEL_ACT_GELU_TANH ||
        m->pos != MODEL_POS_LEARNED || !m->pos_rows || m->kv_heads != m->heads)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: family gpt2 is modelled as "
                       "GPT2LMHeadModel (LayerNorm, gelu_new MLP, learned positions, full "
                       "multi-head attention); %s is not", m->name);
    if (c->seq > m->pos_rows)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework hf: gpt2 sequence %llu beyond its "
                       "%llu positions", (unsigned long long)c->seq,
                       (unsigned long long)m->pos_rows);
    return MS_OK;
}

ms_status hf_g2_begin(hf_x *x)
{
    x->g2 = calloc(1, sizeof *x->g2);
    if (!x->g2) return MS_ERR_NOMEM;
    x->g2->ls = calloc((size_t)x->L, sizeof *x->g2->ls);
    if (!x->g2->ls) return MS_ERR_NOMEM;
    x->g2->pd = x->c->model.resid_dropout;
    x->g2->ad = x->c->model.attn_dropout;
    return MS_OK;
}

void hf_g2_end(hf_x *x)
{
    if (x->g2) free(x->g2->ls);
    free(x->g2);
    x->g2 = NULL;
}

/* ---- building blocks ---- */

/* nn.LayerNorm (native_layer_norm, one kernel; under autocast on the fp32 list, its input
 * already fp32): the output in the input's dtype, the fp32 mean and rstd (saved with the
 * input). */
uint64_t hf_ln_fwd(hf_x *x, int l, const char *nm, uint64_t in, hf_param *w, hf_param *b,
                   trace_class ocls, uint64_t *mu, uint64_t *rs)
{
    uint64_t T = x->T, n = T * x->h, oid = x->next_oid++;
    char a[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, "_out");
    uint64_t out = hf_alloc(x, l, a, n * x->RB, ocls, (int64_t)oid);
    *mu = hf_alloc(x, l, "ln_mean", T * F32, TC_ACT_SKEL, (int64_t)oid);
    *rs = hf_alloc(x, l, "ln_rstd", T * F32, TC_ACT_SKEL, (int64_t)oid);
    hf_op o = { .kind = TK_NORM, .layer = l, .what = nm, .br = n * x->RB + 2 * x->h * x->PB,
                .bw = n * x->RB + 2 * T * F32, .in = { in, w->id, b->id }, .nin = 3,
                .out = { out, *mu, *rs }, .nout = 3, .flops = 8.0 * (double)n };
    hf_mem_op(x, oid, o);
    return out;
}

/* LayerNorm's backward (layer_norm_grad_input then the weight and bias kernel): the input
 * gradient and both parameter gradients, then the output gradient and the saved input, mean
 * and rstd are released; the input gradient is added into the residual stream's *G. */
void hf_ln_bwd(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w, hf_param *b,
               uint64_t *in, uint64_t *mu, uint64_t *rs, uint64_t *G)
{
    hf_ln_bwd_k(x, l, nm, g, w, b, in, mu, rs, G, 0);
}

/* The same; keep_in: the saved input stays (another norm saved it too: GPT-NeoX's parallel
 * residual). */
void hf_ln_bwd_k(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w, hf_param *b,
                 uint64_t *in, uint64_t *mu, uint64_t *rs, uint64_t *G, int keep_in)
{
    uint64_t n = x->T * x->h, oid;
    char a[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".bwd");
    uint64_t dx = hf_alloc_op(x, l, "d_ln_in", n * x->RB, TC_ACT_TRANS, 1, &oid);
    hf_op o = { .kind = TK_NORM, .layer = l, .what = a, .br = 2 * n * x->RB + 2 * x->T * F32,
                .bw = n * x->RB, .in = { *g, *in, *mu, *rs, w->id }, .nin = 5, .out = { dx },
                .nout = 1, .flops = 8.0 * (double)n };
    hf_mem_op(x, oid, o);
    MS_JOIN(a, sizeof a, nm, ".wgrad");
    uint64_t o2 = x->next_oid++;
    uint64_t dw = hf_alloc(x, l, "wgrad", w->n * x->PB, TC_GRAD, (int64_t)o2);
    uint64_t db = hf_alloc(x, l, "bgrad", b->n * x->PB, TC_GRAD, (int64_t)o2);
    hf_op p = { .kind = TK_NORM, .layer = l, .what = a, .br = 2 * n * x->RB,
                .bw = 2 * x->h * x->PB, .in = { *g, *in, *mu, *rs }, .nin = 4,
                .out = { dw, db }, .nout = 2, .flops = 4.0 * (double)n };
    hf_mem_op(x, o2, p);
    hf_accum_grad(x, w, dw);
    hf_accum_grad(x, b, db);
    hf_free(x, g);
    if (!keep_in) hf_free(x, in);
    hf_free(x, mu);
    hf_free(x, rs);
    if (!*G) {
        *G = dx;
        return;
    }
    hf_ew_inplace(x, l, "resid.grad_add", *G, dx, n * x->RB);
    hf_free(x, &dx);
}

/* nn.Dropout(p) in training (native_dropout, p > 0): a 1-byte mask (saved) and a new output
 * of n elements of eb bytes; the input itself when p is 0. */
uint64_t hf_drop(hf_x *x, int l, const char *nm, double pd, uint64_t in, uint64_t n,
                 uint64_t eb, trace_class ocls, const char *outn, uint64_t *mask)
{
    *mask = 0;
    if (pd <= 0) return in;
    uint64_t oid;
    char a[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, "_mask");
    *mask = hf_alloc_op(x, l, a, n, TC_ACT_SKEL, 1, &oid);
    uint64_t out = hf_alloc(x, l, outn, n * eb, ocls, (int64_t)oid);
    hf_op o = { .kind = TK_ELEM, .layer = l, .what = nm, .br = n * eb, .bw = n * (eb + 1),
                .in = { in }, .nin = 1, .out = { *mask, out }, .nout = 2,
                .flops = EW_FLOPS * (double)n };
    hf_mem_op(x, oid, o);
    return out;
}

/* Dropout's backward (masked_scale): a new gradient; the mask is released. g itself when
 * there is no dropout. */
uint64_t hf_drop_bwd(hf_x *x, int l, const char *nm, uint64_t g, uint64_t *mask, uint64_t n,
                     uint64_t eb)
{
    if (!*mask) return g;
    uint64_t d = hf_ew(x, l, nm, "d_drop", n * eb, TC_ACT_TRANS, g, *mask, n * (eb + 1),
                       TK_ELEM);
    return d;
}

/* The global buffer and the semaphores a CUDA column reduction takes (a bias gradient: [M, N]
 * summed over its M rows into N fp32 accumulators) when it splits the rows over thread blocks,
 * as setReduceConfig of aten/src/ATen/native/cuda/Reduce.cuh configures an output-contiguous
 * reduction: outputs vectorized by vec = 4, 2 or 1 (what divides N), at most 512 / vec
 * threads in blocks of bw x bh, each row split over bh when that leaves a thread 16 values
 * (or 256), then over ctas = max(min(target / grid, vpt / 16), vpt / 256) blocks per output
 * column (target = SMs x resident blocks). Buffer 4 B x N x ctas x bw x vec, semaphores 4 B
 * per block column; 0 when one block per column suffices. The H200 traces show every such
 * pair (N = 1024 ... 30522, M = 4096 and 8192). */
uint64_t hf_red_bytes(uint64_t M, uint64_t N, uint64_t *sem)
{
    uint64_t vec = N % 4 == 0 ? 4 : N % 2 == 0 ? 2 : 1, mt = 512 / vec, d0 = N / vec;
    uint64_t p0 = d0 < mt ? 1 : mt, p1 = M < mt ? 1 : mt;
    if (d0 < mt) while (p0 * 2 <= d0) p0 *= 2;
    if (M < mt) while (p1 * 2 <= M) p1 *= 2;
    uint64_t bw = p0 < 32 ? p0 : 32;
    uint64_t bh = p1 < mt / bw ? p1 : mt / bw;
    bw = p0 < mt / bh ? p0 : mt / bh;
    uint64_t vpt = M, step_out = bw;
    int split_in = vpt >= bh * 16 || vpt >= 256;
    if (split_in) vpt = (M + bh - 1) / bh;
    else step_out *= bh;
    uint64_t grid = (d0 + step_out - 1) / step_out;
    uint64_t target = HF_SMS * (G2_THREADS_PER_SM / (bw * bh)), ctas = 1;
    if (split_in && vpt >= 256 && grid <= target) {
        uint64_t c1 = (target + grid - 1) / grid, c2 = (vpt + 15) / 16, c3 = (vpt + 255) / 256;
        ctas = c1 < c2 ? c1 : c2;
        if (c3 > ctas) ctas = c3;
    }
    *sem = ctas > 1 ? F32 * grid : 0;
    return ctas > 1 ? F32 * N * ctas * bw * vec : 0;
}

/* amp: a bias's bf16 cast (autocast's cache: freed when the autocast region ends). */
static uint64_t g2_bcast(hf_x *x, int l, hf_param *b, const char *nm)
{
    if (!x->amp) return 0;
    uint64_t oid;
    char a[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".bcast");
    uint64_t c = hf_alloc_op(x, l, a, b->n * BF16, TC_ACT_TRANS, 0, &oid);
    hf_op o = { .kind = TK_ELEM, .layer = l, .what = a, .br = b->n * F32, .bw = b->n * BF16,
                .in = { b->id }, .nin = 1, .out = { c }, .nout = 1,
                .flops = EW_FLOPS * (double)b->n };
    hf_mem_op(x, oid, o);
    return c;
}

/* A linear with a bias, K -> N on M rows, weight pw, bias pb: Conv1D (pytorch_utils.py:
 * addmm(bias, x.view(-1, nx), weight)) or, with x->nnlin, nn.Linear (F.linear(x, weight,
 * bias)). amp: both are on autocast's bf16 list, which casts their arguments right to left
 * (C++ evaluates cached_cast's calls so): Conv1D's weight (cached, saved), input when fp32
 * (in32; saved), bias (cached only); nn.Linear's bias, weight, input. Then the bf16 output.
 * *xs gets the saved input, *bc the bias cast. */
uint64_t hf_blinear(hf_x *x, int l, hf_param *pw, hf_param *pb, const char *nm, uint64_t in,
                    int in32, uint64_t M, uint64_t N, uint64_t K, trace_class cls, uint64_t *xs,
                    uint64_t *bc)
{
    char a[TRACE_NAME_MAX], b[TRACE_NAME_MAX], c[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".wcast");
    MS_JOIN(b, sizeof b, nm, ".xcast");
    MS_JOIN(c, sizeof c, nm, "_out");
    if (x->nnlin) *bc = g2_bcast(x, l, pb, nm);
    uint64_t w = hf_wcast(x, l, pw, a);
    *xs = in32 ? hf_xcast(x, l, b, in, M * K) : in;
    if (!x->nnlin) *bc = g2_bcast(x, l, pb, nm);
    uint64_t out = hf_gemm(x, l, nm, c, cls, *xs, w, M, N, K);
    if (x->iter == 0 && !x->ws_fwd) /* the forward thread's first cuBLAS call */
        x->ws_fwd = hf_alloc(x, -1, "cublas_ws", CUBLAS_WS, TC_OTHER, -1);
    if (x->iter == 0 && !x->ws_lt) /* its first addmm with a bias epilogue */
        x->ws_lt = hf_alloc(x, -1, "cublaslt_ws", CUBLASLT_WS, TC_OTHER, -1);
    return out;
}

static uint64_t g2_conv(hf_x *x, int l, int j, const char *nm, uint64_t in, int in32,
                        uint64_t M, uint64_t N, uint64_t K, trace_class cls, uint64_t *xs,
                        uint64_t *bc)
{
    return hf_blinear(x, l, g2_lp(x, l, j), g2_lp(x, l, j + 1), nm, in, in32, M, N, K, cls, xs,
                      bc);
}

/* The biased linear's backward from dy [M, N]: the input and weight gradients (two GEMMs;
 * autograd's thread takes its cuBLAS workspace at its first), the bias gradient (a column
 * sum with its reduction buffer and semaphores); then dy (free_dy), the saved input (free_x)
 * and the weight cast are released. amp: the casts' ToCopyBackward nodes make the fp32 .grad
 * and input gradient, the latest cast first (autograd's ready queue runs the highest
 * sequence number first): Conv1D's bias, input (in32), weight; nn.Linear's input, weight,
 * bias. Returns the input gradient. */
uint64_t hf_blinear_bwd(hf_x *x, int l, hf_param *pw, hf_param *pb, const char *nm,
                        uint64_t dy, int free_dy, uint64_t *xs, int free_x, uint64_t M,
                        uint64_t N, uint64_t K, int in32)
{
    return hf_blinear_bwd_acc(x, l, pw, pb, nm, dy, free_dy, xs, free_x, M, N, K, in32, NULL);
}

/* The same; with acc, the input gradient is added into *acc (autograd's input buffer of the
 * node that consumes it) as soon as it exists, before the casts made after it run (0 is then
 * returned). */
uint64_t hf_blinear_bwd_acc(hf_x *x, int l, hf_param *pw, hf_param *pb, const char *nm,
                            uint64_t dy, int free_dy, uint64_t *xs, int free_x, uint64_t M,
                            uint64_t N, uint64_t K, int in32, uint64_t *acc)
{
    uint64_t eb = x->CB, oid = x->next_oid++;
    trace_class gc = x->amp ? TC_ACT_TRANS : TC_GRAD;
    char a[TRACE_NAME_MAX], b[TRACE_NAME_MAX];
    MS_JOIN(a, sizeof a, nm, ".bwd");
    MS_JOIN(b, sizeof b, "d_", nm, "_in");
    uint64_t dx = hf_alloc(x, l, b, M * K * eb, TC_ACT_TRANS, (int64_t)oid);
    if (x->iter == 0 && !x->ws_bwd)
        x->ws_bwd = hf_alloc(x, -1, "cublas_ws_bwd", CUBLAS_WS, TC_OTHER, -1);
    uint64_t dw = hf_alloc(x, l, "dweight", pw->n * eb, gc, (int64_t)oid);
    hf_op o = { .kind = TK_GEMM, .layer = l, .what = a, .br = 2 * (M * N + M * K + N * K) * eb,
                .bw = (N * K + M * K) * eb, .in = { dy, *xs, x->amp ? pw->cast : pw->id },
                .nin = 3, .out = { dx, dw }, .nout = 2,
                .flops = 4.0 * (double)M * (double)N * (double)K };
    o.dur = x->m ? hf_gemm_us(x, K, N, M, (int)eb, (M * N + M * K + N * K) * eb) +
                   hf_gemm_us(x, M, K, N, (int)eb, (M * N + M * K + N * K) * eb) : -1.0;
    hf_emit(x, oid, &o);
    uint64_t o2 = x->next_oid++, sb = 0;
    uint64_t db = hf_alloc(x, l, "dbias", pb->n * eb, gc, (int64_t)o2);
    uint64_t rb = hf_red_bytes(M, N, &sb);
    uint64_t ws = rb ? hf_alloc(x, l, "reduce_ws", rb, TC_WORKSPACE, (int64_t)o2) : 0;
    uint64_t sem = sb ? hf_alloc(x, l, "reduce_sem", sb, TC_WORKSPACE, (int64_t)o2) : 0;
    MS_JOIN(a, sizeof a, nm, ".bias_bwd");
    hf_op r = { .kind = TK_ELEM, .layer = l, .what = a, .br = M * N * eb, .bw = N * eb,
                .in = { dy }, .nin = 1, .out = { db, ws, sem }, .nout = 3,
                .flops = (double)M * (double)N };
    hf_mem_op(x, o2, r);
    hf_free(x, &sem);
    hf_free(x, &ws);
    if (free_dy) hf_free(x, &dy);
    if (free_x) hf_free(x, xs);
    if (x->amp) hf_free(x, &pw->cast);
    int casts = x->amp; /* bf16, fp32: no cast nodes; dx is added when the node is done */
    if (!x->nnlin) hf_wgrad(x, l, pb, &db);
    uint64_t d = in32 ? hf_up32(x, l, "xcast.bwd", &dx, M * K) : dx;
    if (acc && casts) hf_acc(x, l, acc, &d, M * K * (in32 ? F32 : eb));
    hf_wgrad(x, l, pw, &dw);
    if (x->nnlin) hf_wgrad(x, l, pb, &db);
    if (acc && !casts) hf_acc(x, l, acc, &d, M * K * eb);
    return d;
}

static uint64_t g2_conv_bwd(hf_x *x, int l, int j, const char *nm, uint64_t dy, int free_dy,
                            uint64_t *xs, int free_x, uint64_t M, uint64_t N, uint64_t K,
                            int in32)
{
    return hf_blinear_bwd(x, l, g2_lp(x, l, j), g2_lp(x, l, j + 1), nm, dy, free_dy, xs, free_x,
                          M, N, K, in32);
}

/* ---- forward ---- */

/* GPT2Model.forward before the blocks: wte(ids), the positions (cache_position, then
 * position_ids kept by wpe's backward), wpe(positions), their sum and the embedding
 * dropout, whose output is block 0's input. inputs_embeds and position_embeds stay referenced
 * until the model's forward returns. */
static uint64_t g2_embed_fwd(hf_x *x)
{
    hf_g2 *g = x->g2;
    uint64_t T = x->T, h = x->h, s = x->s, oid;
    g->wte_out = hf_alloc_op(x, -1, "wte_out", T * h * x->RB, TC_ACT_TRANS, 1, &oid);
    hf_op o = { .kind = TK_EMBED, .layer = -1, .what = "wte", .br = T * (h * x->PB + 8),
                .bw = T * h * x->RB, .in = { x->tokens, x->p[0].id }, .nin = 2,
                .out = { g->wte_out }, .nout = 1 };
    hf_mem_op(x, oid, o);
    uint64_t cp = hf_alloc_op(x, -1, "cache_position", s * TOKEN_BYTES, TC_ACT_TRANS, 1, &oid);
    hf_op c = { .kind = TK_ELEM, .layer = -1, .what = "arange", .bw = s * TOKEN_BYTES,
                .out = { cp }, .nout = 1, .flops = (double)s };
    hf_mem_op(x, oid, c);
    g->pos = hf_ew(x, -1, "position_ids", "position_ids", s * TOKEN_BYTES, TC_ACT_SKEL, cp, 0,
                   s * TOKEN_BYTES, TK_ELEM);
    hf_free(x, &cp);
    g->wpe_out = hf_alloc_op(x, -1, "wpe_out", s * h * x->RB, TC_ACT_TRANS, 1, &oid);
    hf_op p = { .kind = TK_EMBED, .layer = -1, .what = "wpe", .br = s * (h * x->PB + 8),
                .bw = s * h * x->RB, .in = { g->pos, x->p[1].id }, .nin = 2,
                .out = { g->wpe_out }, .nout = 1 };
    hf_mem_op(x, oid, p);
    int drop = g->pd > 0;
    uint64_t sum = hf_ew(x, drop ? -1 : 0, "embed.add", drop ? "embed_sum" : "input",
                         T * h * x->RB, drop ? TC_ACT_TRANS : TC_ACT_SKEL, g->wte_out,
                         g->wpe_out, (T + s) * h * x->RB, TK_ELEM);
    if (!drop) return sum;
    uint64_t mask, in = 0;
    oid = x->next_oid++;
    mask = hf_alloc(x, -1, "embed.drop_mask", T * h, TC_ACT_SKEL, (int64_t)oid);
    in = hf_alloc(x, 0, "input", T * h * x->RB, TC_ACT_SKEL, (int64_t)oid);
    hf_op d = { .kind = TK_ELEM, .layer = -1, .what = "embed.drop", .br = T * h * x->RB,
                .bw = T * h * (x->RB + 1), .in = { sum }, .nin = 1, .out = { mask, in },
                .nout = 2, .flops = EW_FLOPS * (double)(T * h) };
    hf_mem_op(x, oid, d);
    g->emask = mask;
    hf_free(x, &sum);
    return in;
}

/* SDPA (sdpa_attention_forward, dropout_p = attn_pdrop in training, is_causal) on q, k, v,
 * views of c_attn's output: with dropout PyTorch 2.11 runs cuDNN's attention on an H200,
 * which saves its inputs, the output (in [b, s, heads, d] order, so the transpose back is free
 * and c_proj reads it as is), the fp32 log-sum-exp and the RNG seed and offset. */
static void g2_sdpa_fwd(hf_x *x, int l, g2_ls *s)
{
    const uint64_t in[] = { s->qkv };
    hf_sdpa_fwd_op(x, l, x->g2->ad > 0, in, 1, &s->ao, &s->lse, &s->seed, &s->offs);
}

/* gelu_new (activations.py NewGELUActivation): 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715
 * * pow(x, 3)))), one kernel and one new tensor per operator, left to right: 0.5 * x (saved by
 * the last product), [amp: x.float(), pow being on autocast's fp32 list; saved by pow] pow,
 * * 0.044715, x +, * sqrt(2/pi), tanh (its output saved), 1 +, the product. Under amp
 * everything after pow is fp32 (promotion). The c_fc output goes when the activation
 * returns (bf16: pow saved it). */
static uint64_t g2_gelu_fwd(hf_x *x, int l, g2_ls *s)
{
    uint64_t nf = x->T * x->f, CB = x->CB, E = x->amp ? F32 : CB;
    s->half = hf_ew(x, l, "gelu.half", "gelu_half", nf * CB, TC_ACT_SKEL, s->fc, 0, nf * CB,
                    TK_ACT);
    uint64_t xin = s->fc;
    if (x->amp)
        xin = s->x32 = hf_ew_nv(x, l, "gelu.to_fp32", "gelu_x32", nf * F32, TC_ACT_SKEL, s->fc,
                                0, nf * CB, TK_ACT, nf);
    uint64_t pw = hf_ew(x, l, "gelu.pow", "gelu_pow", nf * E, TC_ACT_TRANS, xin, 0, nf * E,
                        TK_ACT);
    uint64_t t1 = hf_ew(x, l, "gelu.mul_c", "gelu_t1", nf * E, TC_ACT_TRANS, pw, 0, nf * E,
                        TK_ACT);
    hf_free(x, &pw);
    /* amp: bf16 x plus the fp32 power (autocast runs pow in fp32): mixed dtypes */
    uint64_t t2 = hf_ew_nv(x, l, "gelu.add", "gelu_t2", nf * E, TC_ACT_TRANS, s->fc, t1,
                           nf * (CB + E), TK_ACT, CB != E ? nf : 0);
    hf_free(x, &t1);
    uint64_t t3 = hf_ew(x, l, "gelu.mul_k", "gelu_t3", nf * E, TC_ACT_TRANS, t2, 0, nf * E,
                        TK_ACT);
    hf_free(x, &t2);
    s->th = hf_ew(x, l, "gelu.tanh", "gelu_tanh", nf * E, TC_ACT_SKEL, t3, 0, nf * E, TK_ACT);
    hf_free(x, &t3);
    s->op1 = hf_ew(x, l, "gelu.add_one", "gelu_1p", nf * E, TC_ACT_SKEL, s->th, 0, nf * E,
                   TK_ACT);
    uint64_t out = hf_ew_nv(x, l, "gelu.mul", "gelu_out", nf * E, x->amp ? TC_ACT_TRANS :
                            TC_ACT_SKEL, s->half, s->op1, nf * (CB + E), TK_ACT,
                            CB != E ? nf : 0);
    if (x->amp) hf_free(x, &s->fc);
    return out;
}

/* GPT2Block.forward: residual + attn(ln_1(x)), then residual + mlp(ln_2(.)). The frame's
 * hidden_states holds ln_1's output until the first residual add and ln_2's until the block
 * returns; attn_output and feed_forward_hidden_states (the dropouts' outputs) live until the
 * block returns. Returns the output (the next block's input). */
static uint64_t g2_block_fwd(hf_x *x, int l, uint64_t in)
{
    g2_ls *s = &x->g2->ls[l];
    uint64_t T = x->T, h = x->h, n = T * h, w3 = x->hq + 2 * x->kv, xd;
    trace_class lnc = x->amp ? TC_ACT_TRANS : TC_ACT_SKEL; /* bf16: the Conv1D saves it */
    memset(s, 0, sizeof *s);
    s->in = in;
    s->n1 = hf_ln_fwd(x, l, "ln_1", in, g2_lp(x, l, G_LN1W), g2_lp(x, l, G_LN1B), lnc, &s->mu1,
                      &s->rs1);
    s->qkv = g2_conv(x, l, G_ATTNW, "c_attn", s->n1, x->amp, T, w3, h, TC_ACT_SKEL, &s->xa,
                     &s->bc[C_ATTN]);
    g2_sdpa_fwd(x, l, s);
    uint64_t po = g2_conv(x, l, G_APROJW, "attn.c_proj", s->ao, 0, T, h, x->hq, TC_ACT_TRANS,
                          &xd, &s->bc[C_APROJ]);
    s->d1 = hf_drop(x, l, "attn.resid_drop", x->g2->pd, po, n, x->CB, TC_ACT_TRANS,
                    "attn_drop_out", &s->m1);
    if (s->d1 != po) hf_free(x, &po);
    s->r1 = hf_ew(x, l, "add1", "resid1", n * x->RB, TC_ACT_SKEL, in, s->d1,
                  n * (x->RB + x->CB), TK_ELEM);
    if (x->amp) hf_free(x, &s->n1);
    s->n2 = hf_ln_fwd(x, l, "ln_2", s->r1, g2_lp(x, l, G_LN2W), g2_lp(x, l, G_LN2B), lnc,
                      &s->mu2, &s->rs2);
    s->fc = g2_conv(x, l, G_FCW, "mlp.c_fc", s->n2, x->amp, T, x->f, h,
                    x->amp ? TC_ACT_TRANS : TC_ACT_SKEL, &s->xf, &s->bc[C_FC]);
    uint64_t ga = g2_gelu_fwd(x, l, s);
    uint64_t mp = g2_conv(x, l, G_MPROJW, "mlp.c_proj", ga, x->amp, T, h, x->f, TC_ACT_TRANS,
                          &s->xp, &s->bc[C_MPROJ]);
    if (x->amp) hf_free(x, &ga);
    s->d2 = hf_drop(x, l, "mlp.drop", x->g2->pd, mp, n, x->CB, TC_ACT_TRANS, "mlp_drop_out",
                    &s->m2);
    if (s->d2 != mp) hf_free(x, &mp);
    int last = l + 1 == x->L;
    uint64_t out = hf_ew(x, last ? -1 : l + 1, "add2", last ? "final_norm.input" : "input",
                         n * x->RB, TC_ACT_SKEL, s->r1, s->d2, n * (x->RB + x->CB), TK_ELEM);
    if (x->amp) hf_free(x, &s->n2);
    hf_free(x, &s->d1);
    hf_free(x, &s->d2);
    return out;
}

/* ln_f; the model's forward returns (inputs_embeds and position_embeds go); the LM head and
 * loss (gen_hf.c); then autocast's region ends: its cache drops the bias casts (the weight
 * casts are saved for the backward). */
static void g2_head_fwd(hf_x *x, uint64_t in)
{
    hf_g2 *g = x->g2;
    x->head_in = in;
    x->head_out = hf_ln_fwd(x, -1, "ln_f", in, g2_lnf(x, 0), g2_lnf(x, 1),
                            x->amp ? TC_ACT_TRANS : TC_ACT_SKEL, &g->lnf_mu, &g->lnf_rs);
    hf_free(x, &g->wte_out);
    hf_free(x, &g->wpe_out);
    hf_lmhead_fwd(x);
    for (int l = 0; l < x->L; l++)
        for (int k = 0; k < C_N; k++) hf_free(x, &g->ls[l].bc[k]);
}

/* ---- backward ---- */

/* gelu_new's backward from the gradient dg of its output (freed): the product's two
 * gradients (amp: the one for 0.5x cast to bf16), tanh's, the constant products, pow's
 * (x^2, * 3, * grad), each input's share accumulated into c_fc's output gradient (amp: a bf16
 * copy, the add's promotion backward; bf16: the first gradient itself, added into in place).
 * Returns that gradient. */
static uint64_t g2_gelu_bwd(hf_x *x, int l, g2_ls *s, uint64_t dg)
{
    uint64_t nf = x->T * x->f, CB = x->CB, E = x->amp ? F32 : CB;
    uint64_t A = hf_ew_nv(x, l, "gelu.mul.bwd_b", "gelu_dA", nf * E, TC_ACT_TRANS, dg, s->half,
                          nf * (E + CB), TK_ACT, CB != E ? nf : 0);
    uint64_t B = hf_ew(x, l, "gelu.mul.bwd_a", "gelu_dB", nf * E, TC_ACT_TRANS, dg, s->op1,
                       2 * nf * E, TK_ACT);
    if (x->amp) {
        uint64_t b16 = hf_ew(x, l, "gelu.mul.bwd_cast", "gelu_dB16", nf * CB, TC_ACT_TRANS, B,
                             0, nf * E, TK_ELEM);
        hf_free(x, &B);
        B = b16;
    }
    hf_free(x, &dg);
    hf_free(x, &s->op1);
    hf_free(x, &s->half);
    uint64_t C = hf_ew(x, l, "gelu.tanh.bwd", "gelu_dC", nf * E, TC_ACT_TRANS, A, s->th,
                       2 * nf * E, TK_ACT);
    hf_free(x, &A);
    hf_free(x, &s->th);
    uint64_t D = hf_ew(x, l, "gelu.mul_k.bwd", "gelu_dD", nf * E, TC_ACT_TRANS, C, 0, nf * E,
                       TK_ACT);
    hf_free(x, &C);
    uint64_t acc = D;
    if (x->amp)
        acc = hf_ew(x, l, "gelu.add.bwd_cast", "d_c_fc_out", nf * CB, TC_ACT_TRANS, D, 0,
                    nf * E, TK_ELEM);
    uint64_t F = hf_ew(x, l, "gelu.mul_c.bwd", "gelu_dF", nf * E, TC_ACT_TRANS, D, 0, nf * E,
                       TK_ACT);
    if (x->amp) hf_free(x, &D);
    uint64_t xin = x->amp ? s->x32 : s->fc;
    uint64_t P2 = hf_ew(x, l, "gelu.pow.bwd_sq", "gelu_x2", nf * E, TC_ACT_TRANS, xin, 0,
                        nf * E, TK_ACT);
    uint64_t P3 = hf_ew(x, l, "gelu.pow.bwd_mul3", "gelu_3x2", nf * E, TC_ACT_TRANS, P2, 0,
                        nf * E, TK_ACT);
    uint64_t Gp = hf_ew(x, l, "gelu.pow.bwd", "gelu_dpow", nf * E, TC_ACT_TRANS, F, P3,
                        2 * nf * E, TK_ACT);
    hf_free(x, &P3);
    hf_free(x, &P2);
    hf_free(x, &F);
    if (x->amp) hf_free(x, &s->x32);
    else hf_free(x, &s->fc);
    if (x->amp) {
        uint64_t g16 = hf_ew(x, l, "gelu.to_fp32.bwd", "gelu_dpow16", nf * CB, TC_ACT_TRANS,
                             Gp, 0, nf * E, TK_ELEM);
        hf_free(x, &Gp);
        Gp = g16;
    }
    hf_ew_inplace(x, l, "gelu.grad_add", acc, Gp, nf * CB);
    hf_free(x, &Gp);
    uint64_t H = hf_ew(x, l, "gelu.half.bwd", "gelu_dhalf", nf * CB, TC_ACT_TRANS, B, 0,
                       nf * CB, TK_ACT);
    hf_free(x, &B);
    hf_ew_inplace(x, l, "gelu.grad_add", acc, H, nf * CB);
    hf_free(x, &H);
    return acc;
}

static void g2_mlp_bwd(hf_x *x, int l, g2_ls *s, uint64_t *G)
{
    uint64_t T = x->T, h = x->h, n = T * h;
    uint64_t gd = hf_down16(x, l, "add2.bwd", *G);
    uint64_t dd = hf_drop_bwd(x, l, "mlp.drop.bwd", gd, &s->m2, n, x->CB);
    if (gd != *G && dd != gd) hf_free(x, &gd);
    hf_free(x, &s->m2);
    uint64_t dg = g2_conv_bwd(x, l, G_MPROJW, "mlp.c_proj", dd, dd != *G, &s->xp, 1, T, h,
                              x->f, x->amp);
    uint64_t dfc = g2_gelu_bwd(x, l, s, dg);
    uint64_t dn = g2_conv_bwd(x, l, G_FCW, "mlp.c_fc", dfc, 1, &s->xf, 1, T, x->f, h, x->amp);
    hf_ln_bwd(x, l, "ln_2", &dn, g2_lp(x, l, G_LN2W), g2_lp(x, l, G_LN2B), &s->r1, &s->mu2,
              &s->rs2, G);
}

/* SDPA's backward (cuDNN): dq, dk, dv and its workspace (fp32 dQ accumulator, softmax
 * statistics), then what the forward saved; split's backward concatenates the three. */
static uint64_t g2_sdpa_bwd(hf_x *x, int l, g2_ls *s, uint64_t *dao)
{
    uint64_t T = x->T, eb = x->CB, dq, dk, dv;
    const uint64_t in[] = { *dao, s->qkv, s->ao, s->lse, s->seed, s->offs };
    hf_sdpa_bwd_op(x, l, x->g2->ad > 0, in, 6, &dq, &dk, &dv);
    hf_free(x, dao);
    hf_free(x, &s->qkv);
    hf_free(x, &s->lse);
    hf_free(x, &s->ao);
    hf_free(x, &s->seed);
    hf_free(x, &s->offs);
    uint64_t w3 = x->hq + 2 * x->kv;
    uint64_t cat = hf_ew(x, l, "split.bwd", "d_qkv", T * w3 * eb, TC_ACT_TRANS, dq, dk,
                         T * w3 * eb, TK_ELEM);
    hf_free(x, &dq);
    hf_free(x, &dk);
    hf_free(x, &dv);
    return cat;
}

static void g2_attn_bwd(hf_x *x, int l, g2_ls *s, uint64_t *G)
{
    uint64_t T = x->T, h = x->h, n = T * h, w3 = x->hq + 2 * x->kv;
    uint64_t gd = hf_down16(x, l, "add1.bwd", *G);
    uint64_t dd = hf_drop_bwd(x, l, "attn.resid_drop.bwd", gd, &s->m1, n, x->CB);
    if (gd != *G && dd != gd) hf_free(x, &gd);
    hf_free(x, &s->m1);
    uint64_t dao = g2_conv_bwd(x, l, G_APROJW, "attn.c_proj", dd, dd != *G, &s->ao, 0, T, h,
                               x->hq, 0);
    uint64_t dqkv = g2_sdpa_bwd(x, l, s, &dao);
    uint64_t dn = g2_conv_bwd(x, l, G_ATTNW, "c_attn", dqkv, 1, &s->xa, 1, T, w3, h, x->amp);
    if (!x->amp) s->n1 = 0; /* bf16: it was c_attn's saved input, released above */
    hf_ln_bwd(x, l, "ln_1", &dn, g2_lp(x, l, G_LN1W), g2_lp(x, l, G_LN1B), &s->in, &s->mu1,
              &s->rs1, G);
}

/* The embedding dropout's backward, then the add's: wpe's share summed over the batch (when
 * b > 1) into its dense backward (a zero-filled [positions, h] gradient), wte's dense
 * backward added into its .grad (the tied head's). */
static void g2_embed_bwd(hf_x *x, uint64_t *G)
{
    hf_g2 *g = x->g2;
    uint64_t T = x->T, h = x->h, s = x->s;
    uint64_t de = hf_drop_bwd(x, -1, "embed.drop.bwd", *G, &g->emask, T * h, x->RB);
    if (de != *G) hf_free(x, G);
    hf_free(x, &g->emask);
    uint64_t ps = 0;
    if (x->b > 1)
        ps = hf_ew(x, -1, "wpe.grad_sum", "d_wpe_out", s * h * x->RB, TC_ACT_TRANS, de, 0,
                   T * h * x->RB, TK_ELEM);
    hf_param *pe = &x->p[1];
    uint64_t wg = hf_embed_dense_bwd(x, "wpe", ps ? ps : de, g->pos, s, 0, pe->n / h);
    hf_accum_grad(x, pe, wg);
    hf_free(x, &ps);
    hf_free(x, &g->pos);
    hf_param *e = &x->p[0];
    uint64_t eg = hf_embed_dense_bwd(x, "wte", de, x->tokens, T, 0, x->V);
    hf_free(x, &de);
    hf_accum_grad(x, e, eg);
    *G = 0;
}

static void g2_backward(hf_x *x)
{
    hf_g2 *g = x->g2;
    uint64_t G = 0;
    hf_mark(x, TM_LAYER, -1);
    uint64_t d = hf_head_bwd(x);
    if (!x->amp) hf_free(x, &x->head_out); /* lm_head's saved input */
    hf_ln_bwd(x, -1, "ln_f", &d, g2_lnf(x, 0), g2_lnf(x, 1), &x->head_in, &g->lnf_mu,
              &g->lnf_rs, &G);
    for (int l = x->L - 1; l >= 0 && !x->st; l--) {
        hf_mark(x, TM_LAYER, l);
        g2_mlp_bwd(x, l, &g->ls[l], &G);
        g2_attn_bwd(x, l, &g->ls[l], &G);
    }
    hf_mark(x, TM_LAYER, -1);
    g2_embed_bwd(x, &G);
}

const hf_family hf_family_gpt2 = {
    .embed_fwd = g2_embed_fwd, .layer_fwd = g2_block_fwd, .head_fwd = g2_head_fwd,
    .backward = g2_backward,
};

/* model_rt.c — a GPT model trained on the GPU with the runtime's kernels, and the one-layer
 * benchmark of its layer program (model_rt.h). The layer program follows the trace
 * generator's op order and names (docs/GENERATOR.md §3: ln1, qkv, attn, proj, add1, ln2,
 * fc1, act, fc2, add2 and their backward in reverse), so measured op times line up with
 * generated traces. Used by runtime/rt_run.c and tests/test_kernels.c. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/model_rt_int.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kernels_ref.h"
#include "base/util.h"

/* ---- shapes and the parameter layout ---- */

/* One layer's parameters, in the generator's group order (ln1, qkv, proj, ln2, fc1, fc2). */
enum { P_LN1G, P_LN1B, P_WQKV, P_BQKV, P_WPROJ, P_BPROJ, P_LN2G, P_LN2B, P_WFC1, P_BFC1,
       P_WFC2, P_BFC2, P_NL };

static size_t lp_size(int i, const shape *z)
{
    size_t h = z->h, f = z->f;
    switch (i) {
    case P_WQKV: return h * 3 * h;
    case P_BQKV: return 3 * h;
    case P_WPROJ: return h * h;
    case P_WFC1: return h * f;
    case P_BFC1: return f;
    case P_WFC2: return f * h;
    default: return h;
    }
}

#define PAD_ELEMS 128   /* every tensor starts 256-byte aligned (bf16) and 512 (fp32) */
static size_t pad(size_t n) { return (n + PAD_ELEMS - 1) / PAD_ELEMS * PAD_ELEMS; }

/* Activations of one layer's forward (what keep-all saves). */
typedef struct lacts {
    const kn_bf16 *x;
    kn_bf16 *ln1, *qkv, *attn, *resid1, *ln2, *fc1, *act, *out;
    float *mu1, *rs1, *mu2, *rs2, *lse;
} lacts;

/* Transient buffers of the layer program. */
typedef struct lscratch {
    kn_bf16 *d_act, *d_ln, *d_r1, *d_attn, *d_qkv, *tmp;
} lscratch;

/* Events between ops (the benchmark's per-op times). */
#define TM_MAX 40
typedef struct timer {
    cudaEvent_t ev[TM_MAX];
    const char *name[TM_MAX];
    int n;
    cudaStream_t s;
} timer;

static rt_status tmark(timer *t, const char *name, ms_error *err)
{
    if (!t) return RT_OK;
    if (t->n >= TM_MAX) return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "timer", "full");
    RT_CHECK(err, cudaEventRecord(t->ev[t->n], t->s));
    t->name[t->n++] = name;
    return RT_OK;
}

/* ---- a bump allocator over one cudaMalloc; a first pass with base NULL sizes it ---- */

typedef struct arena {
    char *base;
    size_t used;
} arena;

static void *take(arena *a, size_t bytes)
{
    size_t off = a->used;
    a->used += (bytes + 255) / 256 * 256;
    return a->base ? (void *)(a->base + off) : NULL;
}

static rt_status arena_alloc(arena *a, void **mem, ms_error *err)
{
    size_t n = a->used ? a->used : 256;
    RT_CHECK(err, cudaMalloc(mem, n));
    a->base = (char *)*mem;
    a->used = 0;
    return RT_OK;
}

static void acts_layout(arena *a, lacts *x, const shape *z, int with_out)
{
    size_t T = z->T, h = z->h, f = z->f, b2 = sizeof(kn_bf16), b4 = sizeof(float);
    x->ln1 = take(a, T * h * b2);
    x->qkv = take(a, T * 3 * h * b2);
    x->attn = take(a, T * h * b2);
    x->resid1 = take(a, T * h * b2);
    x->ln2 = take(a, T * h * b2);
    x->fc1 = take(a, T * f * b2);
    x->act = take(a, T * f * b2);
    x->out = with_out ? take(a, T * h * b2) : NULL;
    x->mu1 = take(a, T * b4);
    x->rs1 = take(a, T * b4);
    x->mu2 = take(a, T * b4);
    x->rs2 = take(a, T * b4);
    x->lse = take(a, T * z->H * b4);
}

static void scratch_layout(arena *a, lscratch *s, const shape *z)
{
    size_t T = z->T, h = z->h, f = z->f, b2 = sizeof(kn_bf16);
    s->d_act = take(a, T * f * b2);
    s->d_ln = take(a, T * h * b2);
    s->d_r1 = take(a, T * h * b2);
    s->d_attn = take(a, T * h * b2);
    s->d_qkv = take(a, T * 3 * h * b2);
    s->tmp = take(a, T * h * b2);
}

/* ---- the layer program ---- */

static rt_status layer_fwd(kn_ctx *k, const shape *z, kn_bf16 *const w[P_NL], const lacts *a,
                           kn_bf16 *tmp, timer *tm, ms_error *err)
{
    size_t T = z->T, h = z->h, f = z->f;
    RT_TRY(tmark(tm, "ln1", err));
    RT_TRY(kn_ln_fwd(k, a->ln1, a->mu1, a->rs1, a->x, w[P_LN1G], w[P_LN1B], T, h, z->eps, err));
    RT_TRY(tmark(tm, "qkv", err));
    RT_TRY(kn_gemm_bias(k, 0, 0, T, 3 * h, h, a->ln1, h, w[P_WQKV], 3 * h, a->qkv, 3 * h,
                        w[P_BQKV], err));
    RT_TRY(tmark(tm, "attn", err));
    RT_TRY(kn_attn_fwd(k, a->attn, a->lse, a->qkv, a->qkv + h, a->qkv + 2 * h, 3 * h, h, z->B,
                       z->H, z->S, z->D, err));
    RT_TRY(tmark(tm, "proj", err));
    RT_TRY(kn_gemm(k, 0, 0, T, h, h, a->attn, h, w[P_WPROJ], h, 0, tmp, h, 0, err));
    RT_TRY(tmark(tm, "add1", err));
    RT_TRY(kn_add(k, a->resid1, a->x, tmp, w[P_BPROJ], T, h, err));
    RT_TRY(tmark(tm, "ln2", err));
    RT_TRY(kn_ln_fwd(k, a->ln2, a->mu2, a->rs2, a->resid1, w[P_LN2G], w[P_LN2B], T, h, z->eps,
                     err));
    RT_TRY(tmark(tm, "fc1", err));
    RT_TRY(kn_gemm(k, 0, 0, T, f, h, a->ln2, h, w[P_WFC1], f, 0, a->fc1, f, 0, err));
    RT_TRY(tmark(tm, "act", err));
    RT_TRY(kn_gelu_fwd(k, a->act, a->fc1, w[P_BFC1], T, f, err));
    RT_TRY(tmark(tm, "fc2", err));
    RT_TRY(kn_gemm(k, 0, 0, T, h, f, a->act, f, w[P_WFC2], h, 0, tmp, h, 0, err));
    RT_TRY(tmark(tm, "add2", err));
    return kn_add(k, a->out, a->resid1, tmp, w[P_BFC2], T, h, err);
}

/* dy: gradient of the layer's output; dx: of its input (dx != dy). Weight gradients
 * accumulate into g (fp32). */
static rt_status layer_bwd(kn_ctx *k, const shape *z, kn_bf16 *const w[P_NL],
                           float *const g[P_NL], const lacts *a, const lscratch *s,
                           const kn_bf16 *dy, kn_bf16 *dx, timer *tm, ms_error *err)
{
    size_t T = z->T, h = z->h, f = z->f;
    RT_TRY(tmark(tm, "fc2.bwd", err));
    RT_TRY(kn_gemm(k, 0, 1, T, f, h, dy, h, w[P_WFC2], h, 0, s->d_act, f, 0, err));
    RT_TRY(kn_gemm(k, 1, 0, f, h, T, a->act, f, dy, h, 1, g[P_WFC2], h, 1, err));
    RT_TRY(kn_colsum(k, g[P_BFC2], dy, T, h, err));
    RT_TRY(tmark(tm, "act.bwd", err));
    RT_TRY(kn_gelu_bwd(k, s->d_act, s->d_act, a->fc1, w[P_BFC1], T, f, err));
    RT_TRY(kn_colsum(k, g[P_BFC1], s->d_act, T, f, err));
    RT_TRY(tmark(tm, "fc1.bwd", err));
    RT_TRY(kn_gemm(k, 0, 1, T, h, f, s->d_act, f, w[P_WFC1], f, 0, s->d_ln, h, 0, err));
    RT_TRY(kn_gemm(k, 1, 0, h, f, T, a->ln2, h, s->d_act, f, 1, g[P_WFC1], f, 1, err));
    RT_TRY(tmark(tm, "ln2.bwd", err));
    RT_TRY(kn_ln_bwd(k, s->d_r1, g[P_LN2G], g[P_LN2B], s->d_ln, a->resid1, w[P_LN2G], a->mu2,
                     a->rs2, dy, T, h, err));
    RT_TRY(tmark(tm, "proj.bwd", err));
    RT_TRY(kn_gemm(k, 0, 1, T, h, h, s->d_r1, h, w[P_WPROJ], h, 0, s->d_attn, h, 0, err));
    RT_TRY(kn_gemm(k, 1, 0, h, h, T, a->attn, h, s->d_r1, h, 1, g[P_WPROJ], h, 1, err));
    RT_TRY(kn_colsum(k, g[P_BPROJ], s->d_r1, T, h, err));
    RT_TRY(tmark(tm, "attn.bwd", err));
    RT_TRY(kn_attn_bwd(k, s->d_qkv, s->d_qkv + h, s->d_qkv + 2 * h, s->d_attn, a->qkv,
                       a->qkv + h, a->qkv + 2 * h, a->attn, a->lse, 3 * h, h, z->B, z->H, z->S,
                       z->D, err));
    RT_TRY(tmark(tm, "qkv.bwd", err));
    RT_TRY(kn_gemm(k, 0, 1, T, h, 3 * h, s->d_qkv, 3 * h, w[P_WQKV], 3 * h, 0, s->d_ln, h, 0, err));
    RT_TRY(kn_gemm(k, 1, 0, h, 3 * h, T, a->ln1, h, s->d_qkv, 3 * h, 1, g[P_WQKV], 3 * h, 1, err));
    RT_TRY(kn_colsum(k, g[P_BQKV], s->d_qkv, T, 3 * h, err));
    RT_TRY(tmark(tm, "ln1.bwd", err));
    RT_TRY(kn_ln_bwd(k, dx, g[P_LN1G], g[P_LN1B], s->d_ln, a->x, w[P_LN1G], a->mu1, a->rs1,
                     s->d_r1, T, h, err));
    return tmark(tm, "end", err);
}

rt_status mrt_shape_check(const shape *z, int vocab, ms_error *err)
{
    const char *why = NULL;
    if (!z->H || z->h % z->H) why = "hidden must be a multiple of heads";
    else if (z->D != 64 && z->D != 128) why = "head dim (hidden / heads) must be 64 or 128";
    else if (!z->S || z->S % 128) why = "seq must be a multiple of 128";
    else if (z->f % 8 || !z->f) why = "ffn must be a positive multiple of 8";
    else if (!z->B) why = "batch must be positive";
    else if (vocab < 0) why = "vocab must be positive";
    if (why) return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "model shape", why);
    return RT_OK;
}

/* ======================= the model ======================= */

struct mrt_model {
    mrt_config c;
    shape z;
    size_t Vp, np;                 /* padded vocabulary, parameters (padded layout) */
    size_t *off;                   /* layers * P_NL + 3 parameter offsets (elements) */
    cudaStream_t s;
    kn_ctx *k;
    void *mem, *mem_keep, *mem_rc; /* arenas: model, keep-all activations, recompute */
    kn_bf16 *p16;
    float *master, *mom, *var, *grad;
    kn_bf16 **x;                   /* layers + 1 layer inputs / outputs */
    kn_bf16 *xf, *logits, *dxf, *dbuf[2];
    float *muf, *rsf, *loss_tok, *lse_tok, *loss_sum;
    int32_t *tokens, *labels;
    lscratch sc;
    lacts *keep;                   /* per layer (keep-all), allocated on first use */
    lacts rc;                      /* one set (full recompute), with its own out */
    int have_keep, have_rc;
    uint64_t bytes;                /* device bytes of the arenas */
    size_t n_labels;
    int step;
};

void mrt_config_default(mrt_config *c)
{
    memset(c, 0, sizeof *c);
    c->layers = 2;
    c->hidden = 128;
    c->heads = 2;
    c->ffn = 512;
    c->vocab = 512;
    c->seq = 128;
    c->batch = 2;
    c->seed = 1234;
    c->init_std = 0.02f;
    c->ln_eps = 1e-5f;
    kn_adamw_default(&c->adam);
    c->adam.lr = 2e-3f;
    c->adam.weight_decay = 0.0f;
}

enum { G_WTE = 0, G_LNFG, G_LNFB, G_N };

static size_t goff(const mrt_model *m, int i) { return m->off[(size_t)m->c.layers * P_NL + i]; }

static void layer_ptrs(const mrt_model *m, int l, kn_bf16 *w[P_NL], float *g[P_NL])
{
    for (int i = 0; i < P_NL; i++) {
        size_t o = m->off[(size_t)l * P_NL + i];
        if (w) w[i] = m->p16 + o;
        if (g) g[i] = m->grad + o;
    }
}

static void model_layout(mrt_model *m, arena *a)
{
    const shape *z = &m->z;
    size_t T = z->T, h = z->h;
    m->p16 = take(a, m->np * sizeof(kn_bf16));
    m->master = take(a, m->np * sizeof(float));
    m->mom = take(a, m->np * sizeof(float));
    m->var = take(a, m->np * sizeof(float));
    m->grad = take(a, m->np * sizeof(float));
    for (int l = 0; l <= m->c.layers; l++) m->x[l] = take(a, T * h * 2);
    m->xf = take(a, T * h * 2);
    m->logits = take(a, T * m->Vp * 2);
    m->dxf = take(a, T * h * 2);
    m->dbuf[0] = take(a, T * h * 2);
    m->dbuf[1] = take(a, T * h * 2);
    m->muf = take(a, T * 4);
    m->rsf = take(a, T * 4);
    m->loss_tok = take(a, T * 4);
    m->lse_tok = take(a, T * 4);
    m->loss_sum = take(a, 4);
    m->tokens = take(a, T * 4);
    m->labels = take(a, T * 4);
    scratch_layout(a, &m->sc, z);
}

/* Host init of the fp32 master weights: N(0, std)-like uniform of the same variance for
 * matrices and the embedding's real rows, ones for norm gains, zeros elsewhere. */
static void init_master(const mrt_model *m, float *w)
{
    const mrt_config *c = &m->c;
    float a = c->init_std * sqrtf(3.0f), ar = a / sqrtf(2.0f * (float)c->layers);
    memset(w, 0, m->np * sizeof *w);
    for (int l = 0; l < c->layers; l++)
        for (int i = 0; i < P_NL; i++) {
            size_t o = m->off[(size_t)l * P_NL + i], n = lp_size(i, &m->z);
            for (size_t j = 0; j < n; j++) {
                float v = 0;
                if (i == P_LN1G || i == P_LN2G) v = 1;
                else if (i == P_WQKV || i == P_WFC1) v = a * kref_uniform(c->seed, o + j);
                else if (i == P_WPROJ || i == P_WFC2) v = ar * kref_uniform(c->seed, o + j);
                w[o + j] = v;
            }
        }
    size_t o = goff(m, G_WTE);
    for (size_t j = 0; j < (size_t)c->vocab * m->z.h; j++)
        w[o + j] = a * kref_uniform(c->seed, o + j);
    o = goff(m, G_LNFG);
    for (size_t j = 0; j < m->z.h; j++) w[o + j] = 1;
}

rt_status mrt_new(const mrt_config *c, void *stream, mrt_model **out, ms_error *err)
{
    *out = NULL;
    shape z = {(size_t)c->seq * c->batch, (size_t)c->batch, (size_t)c->seq, (size_t)c->hidden,
               (size_t)c->heads, c->heads > 0 ? (size_t)(c->hidden / c->heads) : 0,
               (size_t)c->ffn, c->ln_eps};
    if (c->layers < 1 || c->hidden <= 0 || c->heads <= 0 || c->vocab <= 0 || c->seq <= 0 ||
        c->batch <= 0)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "mrt_new", "sizes must be > 0");
    RT_TRY(mrt_shape_check(&z, c->vocab, err));
    mrt_model *m = calloc(1, sizeof *m);
    size_t noff = (size_t)c->layers * P_NL + G_N;
    if (m) {
        m->off = calloc(noff, sizeof *m->off);
        m->x = calloc((size_t)c->layers + 1, sizeof *m->x);
        m->keep = calloc((size_t)c->layers, sizeof *m->keep);
    }
    if (!m || !m->off || !m->x || !m->keep) {
        mrt_free(m);
        return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "mrt_new", "out of memory");
    }
    m->c = *c;
    m->z = z;
    m->s = (cudaStream_t)stream;
    m->Vp = ((size_t)c->vocab + 63) / 64 * 64;   /* GEMM-friendly vocabulary (Megatron pads) */
    size_t o = 0;
    for (int l = 0; l < c->layers; l++)
        for (int i = 0; i < P_NL; i++) {
            m->off[(size_t)l * P_NL + i] = o;
            o += pad(lp_size(i, &z));
        }
    m->off[(size_t)c->layers * P_NL + G_WTE] = o;
    o += pad(m->Vp * z.h);
    m->off[(size_t)c->layers * P_NL + G_LNFG] = o;
    o += pad(z.h);
    m->off[(size_t)c->layers * P_NL + G_LNFB] = o;
    o += pad(z.h);
    m->np = o;
    arena a = {NULL, 0};
    model_layout(m, &a);
    m->bytes = a.used;
    rt_status st = arena_alloc(&a, &m->mem, err);
    if (st == RT_OK) {
        model_layout(m, &a);
        st = kn_ctx_new(stream, &m->k, err);
    }
    float *w = st == RT_OK ? malloc(m->np * sizeof *w) : NULL;
    if (st == RT_OK && !w) st = rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "malloc", "oom");
    if (st == RT_OK) {
        init_master(m, w);
        cudaError_t e = cudaMemcpy(m->master, w, m->np * sizeof *w, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaMemcpy", cudaGetErrorString(e));
    }
    free(w);
    if (st == RT_OK) st = kn_f32_to_bf16(m->k, m->p16, m->master, m->np, err);
    if (st == RT_OK && cudaMemsetAsync(m->mom, 0, m->np * 4, m->s) != cudaSuccess)
        st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaMemsetAsync", "moments");
    if (st == RT_OK && cudaMemsetAsync(m->var, 0, m->np * 4, m->s) != cudaSuccess)
        st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaMemsetAsync", "moments");
    if (st == RT_OK) st = kn_ctx_reserve(m->k, z.T, z.f > 3 * z.h ? z.f : 3 * z.h, z.T * z.H, z.S,
                                           err);
    if (st == RT_OK && cudaStreamSynchronize(m->s) != cudaSuccess)
        st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaStreamSynchronize",
                          cudaGetErrorString(cudaGetLastError()));
    if (st != RT_OK) {
        mrt_free(m);
        return st;
    }
    *out = m;
    return RT_OK;
}

void mrt_free(mrt_model *m)
{
    if (!m) return;
    if (m->s) cudaStreamSynchronize(m->s);
    kn_ctx_free(m->k);
    cudaFree(m->mem);
    cudaFree(m->mem_keep);
    cudaFree(m->mem_rc);
    free(m->off);
    free(m->x);
    free(m->keep);
    free(m);
}

size_t mrt_param_count(const mrt_model *m) { return m->np; }
size_t mrt_tokens(const mrt_model *m) { return m->z.T; }

uint64_t mrt_device_bytes(const mrt_model *m) { return m->bytes; }

rt_status mrt_load_gemm_algos(mrt_model *m, const char *path, ms_error *err)
{
    return kn_gemm_algos_load(m->k, path, err);
}

static rt_status ensure_acts(mrt_model *m, int recompute, ms_error *err)
{
    arena a = {NULL, 0};
    if (recompute) {
        if (m->have_rc) return RT_OK;
        acts_layout(&a, &m->rc, &m->z, 1);
        m->bytes += a.used;
        RT_TRY(arena_alloc(&a, &m->mem_rc, err));
        acts_layout(&a, &m->rc, &m->z, 1);
        m->have_rc = 1;
        return RT_OK;
    }
    if (m->have_keep) return RT_OK;
    for (int l = 0; l < m->c.layers; l++) acts_layout(&a, &m->keep[l], &m->z, 0);
    m->bytes += a.used;
    RT_TRY(arena_alloc(&a, &m->mem_keep, err));
    for (int l = 0; l < m->c.layers; l++) acts_layout(&a, &m->keep[l], &m->z, 0);
    m->have_keep = 1;
    return RT_OK;
}

rt_status mrt_set_batch(mrt_model *m, const int32_t *tokens, const int32_t *labels, ms_error *err)
{
    size_t T = m->z.T, n = 0;
    for (size_t t = 0; t < T; t++) {
        if (tokens[t] < 0 || tokens[t] >= m->c.vocab || labels[t] >= m->c.vocab)
            return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "mrt_set_batch",
                                "token id outside the vocabulary");
        n += labels[t] >= 0;
    }
    RT_CHECK(err, cudaMemcpyAsync(m->tokens, tokens, T * 4, cudaMemcpyHostToDevice, m->s));
    RT_CHECK(err, cudaMemcpyAsync(m->labels, labels, T * 4, cudaMemcpyHostToDevice, m->s));
    RT_CHECK(err, cudaStreamSynchronize(m->s));
    m->n_labels = n;
    return RT_OK;
}

static rt_status forward(mrt_model *m, int recompute, ms_error *err)
{
    const shape *z = &m->z;
    kn_ctx *k = m->k;
    kn_bf16 *wte = m->p16 + goff(m, G_WTE);
    RT_TRY(kn_embed_fwd(k, m->x[0], m->tokens, wte, z->T, z->h, err));
    for (int l = 0; l < m->c.layers; l++) {
        kn_bf16 *w[P_NL];
        layer_ptrs(m, l, w, NULL);
        lacts a = recompute ? m->rc : m->keep[l];
        a.x = m->x[l];
        a.out = m->x[l + 1];
        RT_TRY(layer_fwd(k, z, w, &a, m->sc.tmp, NULL, err));
    }
    RT_TRY(kn_ln_fwd(k, m->xf, m->muf, m->rsf, m->x[m->c.layers], m->p16 + goff(m, G_LNFG),
                     m->p16 + goff(m, G_LNFB), z->T, z->h, z->eps, err));
    RT_TRY(kn_gemm(k, 0, 1, z->T, m->Vp, z->h, m->xf, z->h, wte, z->h, 0, m->logits, m->Vp, 0,
                   err));
    RT_TRY(kn_ce_fwd(k, m->loss_tok, m->lse_tok, m->logits, m->Vp, m->labels, z->T,
                     (size_t)m->c.vocab, err));
    return kn_sum(k, m->loss_sum, m->loss_tok, z->T, err);
}

static rt_status backward(mrt_model *m, int recompute, ms_error *err)
{
    const shape *z = &m->z;
    kn_ctx *k = m->k;
    kn_bf16 *wte = m->p16 + goff(m, G_WTE);
    float *gwte = m->grad + goff(m, G_WTE);
    float sc = m->n_labels ? 1.0f / (float)m->n_labels : 0.0f;
    RT_TRY(kn_ce_bwd(k, m->logits, m->logits, m->Vp, m->lse_tok, m->labels, z->T,
                     (size_t)m->c.vocab, sc, err));
    RT_TRY(kn_gemm(k, 0, 0, z->T, z->h, m->Vp, m->logits, m->Vp, wte, z->h, 0, m->dxf, z->h, 0,
                   err));
    RT_TRY(kn_gemm(k, 1, 0, m->Vp, z->h, z->T, m->logits, m->Vp, m->xf, z->h, 1, gwte, z->h, 1,
                   err));
    RT_TRY(kn_ln_bwd(k, m->dbuf[0], m->grad + goff(m, G_LNFG), m->grad + goff(m, G_LNFB), m->dxf,
                     m->x[m->c.layers], m->p16 + goff(m, G_LNFG), m->muf, m->rsf, NULL, z->T,
                     z->h, err));
    int cur = 0;
    for (int l = m->c.layers - 1; l >= 0; l--) {
        kn_bf16 *w[P_NL];
        float *g[P_NL];
        layer_ptrs(m, l, w, g);
        lacts a = recompute ? m->rc : m->keep[l];
        a.x = m->x[l];
        if (recompute) RT_TRY(layer_fwd(k, z, w, &a, m->sc.tmp, NULL, err));   /* a.out: scratch */
        RT_TRY(layer_bwd(k, z, w, g, &a, &m->sc, m->dbuf[cur], m->dbuf[cur ^ 1], NULL, err));
        cur ^= 1;
    }
    return kn_embed_bwd(k, gwte, m->tokens, m->dbuf[cur], z->T, z->h, err);
}

rt_status mrt_step(mrt_model *m, int recompute, int update, float *loss, ms_error *err)
{
    RT_TRY(ensure_acts(m, recompute, err));
    RT_CHECK(err, cudaMemsetAsync(m->grad, 0, m->np * sizeof(float), m->s));
    RT_TRY(forward(m, recompute, err));
    RT_TRY(backward(m, recompute, err));
    if (update) {
        kn_adamw_cfg c = m->c.adam;
        c.step = ++m->step;
        RT_TRY(kn_adamw(m->k, m->p16, m->master, m->mom, m->var, m->grad, m->np, &c, err));
    }
    float sum = 0;
    RT_CHECK(err, cudaMemcpyAsync(&sum, m->loss_sum, sizeof sum, cudaMemcpyDeviceToHost, m->s));
    RT_CHECK(err, cudaStreamSynchronize(m->s));
    if (loss) *loss = m->n_labels ? sum / (float)m->n_labels : 0.0f;
    return RT_OK;
}

rt_status mrt_grads(const mrt_model *m, float *host, ms_error *err)
{
    RT_CHECK(err, cudaMemcpy(host, m->grad, m->np * sizeof(float), cudaMemcpyDeviceToHost));
    return RT_OK;
}

rt_status mrt_master(const mrt_model *m, float *host, ms_error *err)
{
    RT_CHECK(err, cudaMemcpy(host, m->master, m->np * sizeof(float), cudaMemcpyDeviceToHost));
    return RT_OK;
}

static int draw(uint64_t seed, uint64_t i, int n)
{
    int v = (int)((kref_uniform(seed, i) + 1.0f) * 0.5f * (float)n);
    return v < 0 ? 0 : v >= n ? n - 1 : v;
}

void mrt_stream(uint64_t seed, uint64_t step, int vocab, int seq, int batch, int32_t *tokens,
                int32_t *labels)
{
    uint64_t chain = seed ^ 0x5DEECE66DULL, walk = seed * 0x2545F4914F6CDD1DULL + step;
    for (int b = 0; b < batch; b++) {
        uint64_t base = ((uint64_t)b << 32) * 4;
        int cur = draw(walk, base, vocab);
        for (int i = 0; i < seq; i++) {
            int nxt = draw(chain, (uint64_t)cur * 4 + (uint64_t)draw(walk, base + 1 + i, 4), vocab);
            tokens[b * seq + i] = cur;
            labels[b * seq + i] = nxt;
            cur = nxt;
        }
    }
}

/* ======================= the one-layer benchmark ======================= */

void mrt_bench_default(mrt_bench_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->hidden = 4096;
    c->heads = 32;
    c->ffn = 16384;
    c->seq = 8192;
    c->batch = 1;
    c->warmup = 3;
    c->iters = 12;
    c->seed = 7;
    c->attn = KN_ATTN_AUTO;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    double *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t || !n) {
        free(t);
        return 0;
    }
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    double r = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return r;
}

typedef struct bench_state {
    shape z;
    kn_ctx *k;
    cudaStream_t s;
    void *mem;
    kn_bf16 *w[P_NL], *x, *dy, *dx;
    float *g[P_NL];
    lacts a;
    lscratch sc;
} bench_state;

static void bench_layout(bench_state *b, arena *a)
{
    for (int i = 0; i < P_NL; i++) b->w[i] = take(a, lp_size(i, &b->z) * 2);
    for (int i = 0; i < P_NL; i++) b->g[i] = take(a, lp_size(i, &b->z) * 4);
    b->x = take(a, b->z.T * b->z.h * 2);
    b->dy = take(a, b->z.T * b->z.h * 2);
    b->dx = take(a, b->z.T * b->z.h * 2);
    acts_layout(a, &b->a, &b->z, 1);
    scratch_layout(a, &b->sc, &b->z);
}

static rt_status bench_init(bench_state *b, ms_error *err)
{
    float sc = 0.02f * sqrtf(3.0f);
    for (int i = 0; i < P_NL; i++) {
        float s = (i == P_LN1G || i == P_LN2G) ? 1.0f : sc;
        RT_TRY(kn_fill_uniform(b->k, b->w[i], lp_size(i, &b->z), 100 + (uint64_t)i, s, err));
        RT_CHECK(err, cudaMemsetAsync(b->g[i], 0, lp_size(i, &b->z) * 4, b->s));
    }
    RT_TRY(kn_fill_uniform(b->k, b->x, b->z.T * b->z.h, 200, 1.0f, err));
    RT_TRY(kn_fill_uniform(b->k, b->dy, b->z.T * b->z.h, 201, 0.01f, err));
    return kn_ctx_reserve(b->k, b->z.T, b->z.f, b->z.T * b->z.H, b->z.S, err);
}

static rt_status bench_pass(bench_state *b, timer *tm, ms_error *err)
{
    b->a.x = b->x;
    RT_TRY(layer_fwd(b->k, &b->z, b->w, &b->a, b->sc.tmp, tm, err));
    return layer_bwd(b->k, &b->z, b->w, b->g, &b->a, &b->sc, b->dy, b->dx, tm, err);
}

static double op_flops(const char *name, const shape *z, int bwd_products)
{
    double T = (double)z->T, h = (double)z->h, f = (double)z->f;
    double att = (double)z->B * (double)z->S * (double)z->S * h;   /* one causal product */
    static const char *const nm[] = {"qkv", "proj", "fc1", "fc2", "attn", "qkv.bwd",
                                     "proj.bwd", "fc1.bwd", "fc2.bwd", "attn.bwd"};
    double fl[] = {2 * T * h * 3 * h, 2 * T * h * h, 2 * T * h * f, 2 * T * f * h, 2 * att,
                   4 * T * h * 3 * h, 4 * T * h * h, 4 * T * h * f, 4 * T * f * h,
                   bwd_products * att};
    for (size_t i = 0; i < sizeof nm / sizeof *nm; i++)
        if (!strcmp(name, nm[i])) return fl[i];
    return 0;
}

static rt_status bench_run(bench_state *b, const mrt_bench_cfg *c, mrt_bench_result *r,
                           ms_error *err)
{
    cudaEvent_t e0, e1;
    RT_CHECK(err, cudaEventCreate(&e0));
    RT_CHECK(err, cudaEventCreate(&e1));
    rt_status st = RT_OK;
    for (int i = 0; i < c->warmup && st == RT_OK; i++) st = bench_pass(b, NULL, err);
    int n = c->iters < 64 ? c->iters : 64;
    for (int i = 0; i < n && st == RT_OK; i++) {
        float ms = 0;
        if (cudaEventRecord(e0, b->s) != cudaSuccess) st = RT_ERR_CUDA;
        if (st == RT_OK) st = bench_pass(b, NULL, err);
        if (st == RT_OK && (cudaEventRecord(e1, b->s) != cudaSuccess ||
                            cudaEventSynchronize(e1) != cudaSuccess ||
                            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess))
            st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "timing",
                              cudaGetErrorString(cudaGetLastError()));
        r->times_ms[r->n_times++] = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    RT_TRY(st);
    r->median_ms = median(r->times_ms, r->n_times);
    r->min_ms = r->max_ms = r->times_ms[0];
    for (int i = 1; i < r->n_times; i++) {
        if (r->times_ms[i] < r->min_ms) r->min_ms = r->times_ms[i];
        if (r->times_ms[i] > r->max_ms) r->max_ms = r->times_ms[i];
    }
    /* per-op: 5 passes with events between the ops, median per op */
    timer tm;
    memset(&tm, 0, sizeof tm);
    tm.s = b->s;
    for (int i = 0; i < TM_MAX; i++) RT_CHECK(err, cudaEventCreate(&tm.ev[i]));
    double per[5][TM_MAX];
    int nop = 0;
    for (int rep = 0; rep < 5 && st == RT_OK; rep++) {
        tm.n = 0;
        st = bench_pass(b, &tm, err);
        if (st == RT_OK && cudaEventSynchronize(tm.ev[tm.n - 1]) != cudaSuccess)
            st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaEventSynchronize", "ops");
        nop = tm.n - 1;
        for (int i = 0; i < nop && st == RT_OK; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, tm.ev[i], tm.ev[i + 1]);
            per[rep][i] = ms;
        }
    }
    if (st == RT_OK) {
        r->n_ops = nop < MRT_BENCH_OPS ? nop : MRT_BENCH_OPS;
        for (int i = 0; i < r->n_ops; i++) {
            double v[5];
            for (int rep = 0; rep < 5; rep++) v[rep] = per[rep][i];
            snprintf(r->ops[i].name, sizeof r->ops[i].name, "%s", tm.name[i]);
            r->ops[i].ms = median(v, 5);
            r->ops[i].flops = op_flops(tm.name[i], &b->z, r->bwd_products);
            r->ops_sum_ms += r->ops[i].ms;
        }
    }
    for (int i = 0; i < TM_MAX; i++) cudaEventDestroy(tm.ev[i]);
    return st;
}

/* --tune-gemms: one pass that measures each GEMM shape at its first call (kn_gemm's tuning
 * overwrites and accumulates into outputs: the pass's results are thrown away), the choices
 * written; then the benchmark runs with them. */
static rt_status bench_tune(bench_state *b, const mrt_bench_cfg *c, ms_error *err)
{
    kn_ctx_set_gemm_tune(b->k, 1, KN_GEMM_TUNE_MARGIN);
    rt_status st = bench_pass(b, NULL, err);
    kn_ctx_set_gemm_tune(b->k, 0, KN_GEMM_TUNE_MARGIN);
    if (st == RT_OK && b->s) RT_CHECK(err, cudaStreamSynchronize(b->s));
    if (st == RT_OK && !b->s) RT_CHECK(err, cudaDeviceSynchronize());
    return st == RT_OK ? kn_gemm_algos_save(b->k, c->tune_gemms, err) : st;
}

static void bench_gemms(const bench_state *b, mrt_bench_result *r)
{
    size_t n = kn_gemm_algos_count(b->k);
    r->n_gemms = (int)(n < MRT_BENCH_OPS ? n : MRT_BENCH_OPS);
    for (int i = 0; i < r->n_gemms; i++) kn_gemm_algo_info(b->k, (size_t)i, &r->gemms[i]);
}

rt_status mrt_bench_layer(const mrt_bench_cfg *c, void *stream, mrt_bench_result *r, ms_error *err)
{
    memset(r, 0, sizeof *r);
    bench_state b;
    memset(&b, 0, sizeof b);
    b.z = (shape){(size_t)c->seq * c->batch, (size_t)c->batch, (size_t)c->seq,
                  (size_t)c->hidden, (size_t)c->heads,
                  c->heads > 0 ? (size_t)(c->hidden / c->heads) : 0, (size_t)c->ffn, 1e-5f};
    RT_TRY(mrt_shape_check(&b.z, 1, err));
    if (c->iters < 1) return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "bench", "iters");
    b.s = (cudaStream_t)stream;
    const shape *z = &b.z;
    double T = (double)z->T, h = (double)z->h, f = (double)z->f;
    double P = 3 * h * h + 3 * h + h * h + h + 2 * h * f + f + h + 4 * h;
    r->model_flops = 6 * T * P + 6 * (double)z->B * h * (double)z->S * (double)z->S;
    arena a = {NULL, 0};
    bench_layout(&b, &a);
    r->device_bytes = a.used;
    RT_TRY(arena_alloc(&a, &b.mem, err));
    bench_layout(&b, &a);
    rt_status st = kn_ctx_new(stream, &b.k, err);
    if (st == RT_OK) st = kn_ctx_set_attn(b.k, c->attn, err);
    if (st == RT_OK) {
        r->attn = kn_ctx_attn(b.k);
        r->bwd_products = kn_attn_bwd_products(b.k, b.z.S, b.z.D);
        r->exec_flops = 3 * 2 * T * (3 * h * h + h * h + 2 * h * f) +
                        (2 + r->bwd_products) * (double)z->B * (double)z->S * (double)z->S * h;
    }
    if (st == RT_OK && c->gemm_algos) st = kn_gemm_algos_load(b.k, c->gemm_algos, err);
    if (st == RT_OK && c->attn_qchunk) st = kn_ctx_set_attn_qchunk(b.k, c->attn_qchunk, err);
    if (st == RT_OK) r->qchunk = kn_attn_bwd_qchunk(b.k, b.z.S, b.z.D);
    if (st == RT_OK) st = bench_init(&b, err);
    if (st == RT_OK && c->tune_gemms) st = bench_tune(&b, c, err);
    if (st == RT_OK) bench_gemms(&b, r);
    if (st == RT_OK) st = bench_run(&b, c, r, err);
    if (b.s) cudaStreamSynchronize(b.s);
    else cudaDeviceSynchronize();
    kn_ctx_free(b.k);
    cudaFree(b.mem);
    return st;
}

/* model_rt.c — a GPT model trained on the GPU with the runtime's kernels, the one-layer
 * benchmark, and the op dispatcher and one-stream schedule walker for generated traces
 * (model_rt.h). The layer program follows the trace generator's op order and names
 * (docs/GENERATOR.md §3: ln1, qkv, attn, proj, add1, ln2, fc1, act, fc2, add2 and their
 * backward in reverse), so measured op times line up with generated traces. Used by
 * runtime/rt_run.c and tests/test_kernels.c. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/model_rt.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/memferry/lower_dha.h"
#include "runtime/kernels_ref.h"
#include "traces/models.h"
#include "base/u64map.h"
#include "base/util.h"

/* ---- shapes and the parameter layout ---- */

typedef struct shape {
    size_t T, B, S, h, H, D, f;
    float eps;
} shape;

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
    RT_TRY(kn_gemm(k, 0, 0, T, 3 * h, h, a->ln1, h, w[P_WQKV], 3 * h, 0, a->qkv, 3 * h, 0, err));
    RT_TRY(kn_bias_add(k, a->qkv, w[P_BQKV], T, 3 * h, 3 * h, err));
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

static rt_status shape_check(const shape *z, int vocab, ms_error *err)
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
    RT_TRY(shape_check(&z, c->vocab, err));
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
    if (st == RT_OK) st = kn_ctx_reserve(m->k, z.T, z.f > 3 * z.h ? z.f : 3 * z.h, z.T * z.H, err);
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
    c->hidden = 4096;
    c->heads = 32;
    c->ffn = 16384;
    c->seq = 8192;
    c->batch = 1;
    c->warmup = 3;
    c->iters = 12;
    c->seed = 7;
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
    return kn_ctx_reserve(b->k, b->z.T, b->z.f, b->z.T * b->z.H, err);
}

static rt_status bench_pass(bench_state *b, timer *tm, ms_error *err)
{
    b->a.x = b->x;
    RT_TRY(layer_fwd(b->k, &b->z, b->w, &b->a, b->sc.tmp, tm, err));
    return layer_bwd(b->k, &b->z, b->w, b->g, &b->a, &b->sc, b->dy, b->dx, tm, err);
}

static double op_flops(const char *name, const shape *z)
{
    double T = (double)z->T, h = (double)z->h, f = (double)z->f;
    double att = (double)z->B * (double)z->S * (double)z->S * h;   /* one causal product */
    static const char *const nm[] = {"qkv", "proj", "fc1", "fc2", "attn", "qkv.bwd",
                                     "proj.bwd", "fc1.bwd", "fc2.bwd", "attn.bwd"};
    double fl[] = {2 * T * h * 3 * h, 2 * T * h * h, 2 * T * h * f, 2 * T * f * h, 2 * att,
                   4 * T * h * 3 * h, 4 * T * h * h, 4 * T * h * f, 4 * T * f * h, 7 * att};
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
            r->ops[i].flops = op_flops(tm.name[i], &b->z);
            r->ops_sum_ms += r->ops[i].ms;
        }
    }
    for (int i = 0; i < TM_MAX; i++) cudaEventDestroy(tm.ev[i]);
    return st;
}

rt_status mrt_bench_layer(const mrt_bench_cfg *c, void *stream, mrt_bench_result *r, ms_error *err)
{
    memset(r, 0, sizeof *r);
    bench_state b;
    memset(&b, 0, sizeof b);
    b.z = (shape){(size_t)c->seq * c->batch, (size_t)c->batch, (size_t)c->seq,
                  (size_t)c->hidden, (size_t)c->heads,
                  c->heads > 0 ? (size_t)(c->hidden / c->heads) : 0, (size_t)c->ffn, 1e-5f};
    RT_TRY(shape_check(&b.z, 1, err));
    if (c->iters < 1) return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "bench", "iters");
    b.s = (cudaStream_t)stream;
    const shape *z = &b.z;
    double T = (double)z->T, h = (double)z->h, f = (double)z->f;
    double P = 3 * h * h + 3 * h + h * h + h + 2 * h * f + f + h + 4 * h;
    r->model_flops = 6 * T * P + 6 * (double)z->B * h * (double)z->S * (double)z->S;
    r->exec_flops = 3 * 2 * T * (3 * h * h + h * h + 2 * h * f) +
                    9 * (double)z->B * (double)z->S * (double)z->S * h;
    arena a = {NULL, 0};
    bench_layout(&b, &a);
    r->device_bytes = a.used;
    RT_TRY(arena_alloc(&a, &b.mem, err));
    bench_layout(&b, &a);
    rt_status st = kn_ctx_new(stream, &b.k, err);
    if (st == RT_OK) st = bench_init(&b, err);
    if (st == RT_OK) st = bench_run(&b, c, r, err);
    if (b.s) cudaStreamSynchronize(b.s);
    else cudaDeviceSynchronize();
    kn_ctx_free(b.k);
    cudaFree(b.mem);
    return st;
}

/* ======================= generated traces ======================= */

/* A parameter group of an offload trace, stepped on the host: its gradient buffer (the
 * input of `<group>.grad.d2h`), its parameters in group order (the outputs of
 * `<group>.param.h2d`), its elements and where its [master, m, v] lie in the host optimizer
 * state (lower_dha's one pinned block, dha_synth_id(0): the groups' states one after the
 * other, 12 bytes per element, in the order of the groups' first host steps). steps is
 * counted at issue time (mrt_ops_host_prepare), so the host thread never writes it. */
#define MRT_HG_PARAMS 32
typedef struct mrt_hgroup {
    char name[64];
    uint64_t grad;
    uint64_t param[MRT_HG_PARAMS];
    uint32_t n_param;
    size_t elems, state_off;      /* elements; offset in the state block (elements) */
    int64_t steps;
} mrt_hgroup;

struct mrt_ops {
    const trace_t *t;
    kn_ctx *k;
    shape z;
    size_t V;
    int layers;
    uint64_t seed;
    int iter, tok_iter;
    u64map *inited;          /* parameter tensors already initialized */
    u64map *poff;            /* parameter id -> offset (elements) in its group's buffers */
    u64map *gstep;           /* optimizer state id -> AdamW steps done */
    float *lse, *loss_hist;  /* device: the loss's per-token lse; per-iteration loss sums */
    int32_t *tok, *lab;      /* host: the current iteration's tokens and labels */
    kn_adamw_cfg adam;
    float init_std;
    /* offload traces: the host optimizer's groups (docs/RUNTIME.md, "DHA and the host
     * optimizer"), in the order of their first `<group>.optim.host` op */
    mrt_hgroup *hg;
    size_t n_hg;
    rt_pool *pool;           /* the host steps' threads (offload traces only) */
    /* module-level host gradients (mrt_ops_set_plan): a split group's buffer is laid out
     * GPU parameters first, then host parameters (each in group order), so that its device
     * block is a prefix of its host home and one copy brings the GPU part home */
    u64map *hostp;           /* parameter id -> 1: its gradient lives on the host */
    u64map *goff;            /* parameter id -> offset (elements) in a split group's buffer */
    u64map *gdev;            /* split gradient buffer id -> bytes of its device block */
    const uint64_t *out_host; /* the current op's split outputs' host homes (compute_split) */
};

static rt_status bad_trace(const char *why, ms_error *err)
{
    return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "--math real", why);
}

static uint64_t tmeta(const trace_t *t, const char *key)
{
    const char *v = trace_get_meta(t, key);
    uint64_t x;
    return v && ms_parse_u64(v, &x) ? x : 0;
}

static uint64_t tbytes(const mrt_ops *o, uint64_t id)
{
    const trace_tensor *x = trace_find_tensor(o->t, id);
    return x ? x->bytes : 0;
}

/* Offsets of every parameter in its group, from the first `<group>.optim` op of each group
 * (inputs: gradient buffer, optimizer state, then the parameters in group order). */
static rt_status param_offsets(mrt_ops *o, ms_error *err)
{
    for (size_t i = 0; i < trace_count(o->t); i++) {
        const trace_rec *r = trace_get(o->t, i);
        if (r->type != TR_OP || r->u.op.kind != TK_OPTIM || r->u.op.n_in < 3) continue;
        uint64_t off = 0;
        for (uint32_t j = 2; j < r->u.op.n_in; j++) {
            if (u64map_get(o->poff, r->u.op.in[j], NULL)) break;   /* a later iteration */
            if (u64map_put(o->poff, r->u.op.in[j], off)) return bad_trace("out of memory", err);
            off += tbytes(o, r->u.op.in[j]) / 2;
        }
    }
    return RT_OK;
}

static const trace_op *find_named_op(const trace_t *t, const char *name)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_OP && !strcmp(r->u.op.name, name)) return &r->u.op;
    }
    return NULL;
}

/* Offload traces (gen offload 1): the groups their `<group>.optim.host` ops step, and the
 * parameters' offsets in their gradient buffers (the `<group>.param.h2d` outputs in group
 * order, as the `<group>.optim` inputs of other traces). */
static rt_status host_groups(mrt_ops *o, ms_error *err)
{
    size_t state = 0;
    for (size_t i = 0; i < trace_count(o->t); i++) {
        const trace_rec *r = trace_get(o->t, i);
        const char *n = r->type == TR_OP ? r->u.op.name : "";
        size_t len = strlen(n), sl = strlen(".optim.host");
        if (r->type != TR_OP || r->u.op.kind != TK_OPTIM || len <= sl ||
            strcmp(n + len - sl, ".optim.host"))
            continue;
        if (len - sl >= sizeof o->hg[0].name) return bad_trace("a group name is too long", err);
        char g[64], nm[96];
        snprintf(g, sizeof g, "%.*s", (int)(len - sl), n);
        int seen = 0;
        for (size_t k = 0; k < o->n_hg && !seen; k++) seen = !strcmp(o->hg[k].name, g);
        if (seen) continue;
        snprintf(nm, sizeof nm, "%s.grad.d2h", g);
        const trace_op *gd = find_named_op(o->t, nm);
        snprintf(nm, sizeof nm, "%s.param.h2d", g);
        const trace_op *ph = find_named_op(o->t, nm);
        if (!gd || gd->n_in != 1 || !ph || !ph->n_out || ph->n_out > MRT_HG_PARAMS)
            return bad_trace("an offload group without its gradient copy (<group>.grad.d2h) "
                             "or parameter copy (<group>.param.h2d)", err);
        mrt_hgroup *ng = realloc(o->hg, (o->n_hg + 1) * sizeof *ng);
        if (!ng) return bad_trace("out of memory", err);
        o->hg = ng;
        mrt_hgroup *h = &o->hg[o->n_hg++];
        memset(h, 0, sizeof *h);
        snprintf(h->name, sizeof h->name, "%s", g);
        h->grad = gd->in[0];
        h->n_param = ph->n_out;
        h->state_off = state;
        for (uint32_t j = 0; j < ph->n_out; j++) {
            h->param[j] = ph->out[j];
            if (!u64map_get(o->poff, ph->out[j], NULL) && u64map_put(o->poff, ph->out[j], h->elems))
                return bad_trace("out of memory", err);
            h->elems += tbytes(o, ph->out[j]) / 2;
        }
        if (h->elems * 4 > tbytes(o, h->grad))
            return bad_trace("an offload group's parameters exceed its gradient buffer", err);
        state += h->elems;
    }
    return RT_OK;
}

rt_status mrt_ops_new(const trace_t *t, uint64_t seed, mrt_ops **out, ms_error *err)
{
    *out = NULL;
    if (tmeta(t, "tp") > 1 || tmeta(t, "cp") > 1 || tmeta(t, "dp") > 1)
        return bad_trace("real kernels run tp = cp = dp = 1 traces only", err);
    if (tmeta(t, "dtype_bytes") != 2 || tmeta(t, "grad_bytes") != 4)
        return bad_trace("real kernels need bf16 tensors and fp32 gradients (grad_bytes 4)", err);
    if (trace_get_meta(t, "lora_rank") || trace_get_meta(t, "zero3") || tmeta(t, "causal") != 1)
        return bad_trace("LoRA, ZeRO-3 and encoder traces have no real kernels yet", err);
    const char *mname = trace_get_meta(t, "model");
    model_t md;
    ms_error le; /* the library's */
    if (!mname || model_lookup(mname, &md, &le) != MS_OK)
        return bad_trace("the trace's model is unknown", err);
    if (md.norm != MODEL_NORM_LAYER || md.mlp != MODEL_MLP_GELU || md.kv_heads != md.heads ||
        !md.tied_embeddings || !md.has_bias || md.pos_rows || md.type_vocab)
        return bad_trace("real kernels implement GPT layers: LayerNorm, GeLU, biases, full "
                         "multi-head attention, tied embeddings, no position table", err);
    shape z = {tmeta(t, "seq") * tmeta(t, "batch"), tmeta(t, "batch"), tmeta(t, "seq"),
               tmeta(t, "hidden"), tmeta(t, "heads"), 0, tmeta(t, "ffn"), 1e-5f};
    z.D = z.H ? z.h / z.H : 0;
    RT_TRY(shape_check(&z, 1, err));
    mrt_ops *o = calloc(1, sizeof *o);
    if (!o) return bad_trace("out of memory", err);
    o->t = t;
    o->z = z;
    o->V = tmeta(t, "vocab");
    o->layers = (int)tmeta(t, "layers");
    o->seed = seed;
    o->tok_iter = -1;
    o->init_std = 0.02f;
    mrt_config dc;
    mrt_config_default(&dc);
    o->adam = dc.adam;
    o->inited = u64map_new(64);
    o->poff = u64map_new(64);
    o->gstep = u64map_new(16);
    o->hostp = u64map_new(16);
    o->goff = u64map_new(16);
    o->gdev = u64map_new(16);
    o->tok = malloc(z.T * sizeof *o->tok);
    o->lab = malloc(z.T * sizeof *o->lab);
    rt_status st = RT_OK;
    if (!o->inited || !o->poff || !o->gstep || !o->hostp || !o->goff || !o->gdev || !o->tok ||
        !o->lab)
        st = bad_trace("out of memory", err);
    if (st == RT_OK) st = param_offsets(o, err);
    if (st == RT_OK && trace_get_meta(t, "offload")) st = host_groups(o, err);
    if (st == RT_OK && o->n_hg) st = rt_pool_new(0, &o->pool, err);
    if (st == RT_OK) st = kn_ctx_new(NULL, &o->k, err);
    if (st == RT_OK && (cudaMalloc((void **)&o->lse, z.T * 4) != cudaSuccess ||
                        cudaMalloc((void **)&o->loss_hist, MRT_MAX_ITERS * 4) != cudaSuccess ||
                        cudaMemset(o->loss_hist, 0, MRT_MAX_ITERS * 4) != cudaSuccess))
        st = rt_fail(err, RT_ERR_OOM, __FILE__, __LINE__, "cudaMalloc", "dispatcher buffers");
    if (st == RT_OK) st = kn_ctx_reserve(o->k, z.T, z.f > 3 * z.h ? z.f : 3 * z.h, z.T * z.H, err);
    if (st != RT_OK) {
        mrt_ops_free(o);
        return st;
    }
    *out = o;
    return RT_OK;
}

void mrt_ops_free(mrt_ops *o)
{
    if (!o) return;
    cudaDeviceSynchronize();
    kn_ctx_free(o->k);
    cudaFree(o->lse);
    cudaFree(o->loss_hist);
    u64map_free(o->inited);
    u64map_free(o->poff);
    u64map_free(o->gstep);
    u64map_free(o->hostp);
    u64map_free(o->goff);
    u64map_free(o->gdev);
    free(o->hg);
    rt_pool_free(o->pool);
    free(o->tok);
    free(o->lab);
    free(o);
}

void mrt_ops_set_iter(mrt_ops *o, int iter) { o->iter = iter; }

void mrt_ops_set_adam(mrt_ops *o, const kn_adamw_cfg *c) { o->adam = *c; }

rt_status mrt_ops_set_host_threads(mrt_ops *o, int threads, ms_error *err)
{
    if (!o->n_hg) return RT_OK;
    rt_pool *p;
    RT_TRY(rt_pool_new(threads, &p, err));
    rt_pool_free(o->pool);
    o->pool = p;
    return RT_OK;
}

int mrt_ops_host_threads(const mrt_ops *o) { return o->pool ? rt_pool_threads(o->pool) : 0; }

rt_status mrt_ops_losses(mrt_ops *o, float *host, int n, ms_error *err)
{
    if (n > MRT_MAX_ITERS) n = MRT_MAX_ITERS;
    RT_CHECK(err, cudaDeviceSynchronize());
    RT_CHECK(err, cudaMemcpy(host, o->loss_hist, (size_t)n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) host[i] /= (float)o->z.T;
    return RT_OK;
}

static const char *base_name(const char *name)
{
    if (name[0] == 'L') {
        const char *p = name + 1;
        while (*p >= '0' && *p <= '9') p++;
        if (p > name + 1 && *p == '.') return p + 1;
    }
    return name;
}

/* A parameter's first use: gains 1, biases 0, matrices and the embedding seeded uniform of
 * std init_std (proj and fc2 scaled by 1/sqrt(2 layers), as the model above). */
static rt_status init_param(mrt_ops *o, uint64_t id, uint64_t addr, ms_error *err)
{
    const trace_tensor *x = trace_find_tensor(o->t, id);
    if (!x) return bad_trace("an op reads an unknown tensor", err);
    kn_bf16 *p = (kn_bf16 *)(uintptr_t)addr;
    size_t n = x->bytes / 2, h = o->z.h;
    const char *b = base_name(x->name);
    float a = o->init_std * sqrtf(3.0f);
    uint64_t sd = o->seed ^ (id * 0x9E3779B97F4A7C15ULL);
    if (!strcmp(b, "embed.w")) return kn_fill_uniform(o->k, p, n, sd, a, err);
    if (!strcmp(b, "ln1.w") || !strcmp(b, "ln2.w") || !strcmp(b, "final_norm.w")) {
        if (n != 2 * h) return bad_trace("a norm parameter is not gain + bias", err);
        RT_TRY(kn_fill_bf16(o->k, p, h, 1.0f, err));
        return kn_fill_bf16(o->k, p + h, h, 0.0f, err);
    }
    size_t nb = 0;
    float sc = a;
    if (!strcmp(b, "qkv.w")) nb = 3 * h;
    else if (!strcmp(b, "fc1.w")) nb = o->z.f;
    else if (!strcmp(b, "proj.w") || !strcmp(b, "fc2.w")) {
        nb = h;
        sc = a / sqrtf(2.0f * (float)(o->layers > 0 ? o->layers : 1));
    } else {
        return bad_trace("a parameter without a real-kernel initializer", err);
    }
    if (n <= nb) return bad_trace("a linear parameter smaller than its bias", err);
    RT_TRY(kn_fill_uniform(o->k, p, n - nb, sd, sc, err));
    return kn_fill_bf16(o->k, p + n - nb, nb, 0.0f, err);
}

static rt_status init_inputs(mrt_ops *o, const trace_op *op, const uint64_t *in, ms_error *err)
{
    for (uint32_t i = 0; i < op->n_in; i++) {
        const trace_tensor *x = trace_find_tensor(o->t, op->in[i]);
        if (!x || x->cls != TC_PARAM || u64map_get(o->inited, op->in[i], NULL)) continue;
        RT_TRY(init_param(o, op->in[i], in[i], err));
        if (u64map_put(o->inited, op->in[i], 1)) return bad_trace("out of memory", err);
    }
    return RT_OK;
}

static void ensure_tokens(mrt_ops *o)
{
    if (o->tok_iter == o->iter) return;
    mrt_stream(o->seed, (uint64_t)o->iter, (int)o->V, (int)o->z.S, (int)o->z.B, o->tok, o->lab);
    o->tok_iter = o->iter;
}

static rt_status upload_ids(mrt_ops *o, uint64_t addr, const int32_t *h, uint64_t bytes,
                            cudaStream_t s, ms_error *err)
{
    if (bytes < o->z.T * 4) return bad_trace("a token tensor is smaller than T ids", err);
    RT_CHECK(err, cudaMemcpyAsync((void *)(uintptr_t)addr, h, o->z.T * 4, cudaMemcpyHostToDevice,
                                  s));
    return RT_OK;
}

#define BF(a) ((kn_bf16 *)(uintptr_t)(a))
#define F32(a) ((float *)(uintptr_t)(a))

/* Where parameter param's gradient lies in the buffer the op writes as output j: at its
 * offset in the device block, or for a module kept on the host of a split buffer in the host
 * home (mrt_ops_set_plan). */
static float *grad_of(mrt_ops *o, const uint64_t *out, uint32_t j, uint64_t param)
{
    uint64_t off = 0;
    if (!u64map_get(o->goff, param, &off) && !u64map_get(o->poff, param, &off)) return NULL;
    uint64_t home = o->out_host ? o->out_host[j] : 0;
    if (home) return u64map_get(o->hostp, param, NULL) ? F32(home) + off : F32(out[j]) + off;
    return F32(out[j]) + off;
}

/* The bytes of output j a GPU kernel may touch: the device block of a split buffer. */
static uint64_t dev_bytes(const mrt_ops *o, const trace_op *op, uint32_t j)
{
    uint64_t b = 0;
    if (o->out_host && o->out_host[j] && u64map_get(o->gdev, op->out[j], &b)) return b;
    return tbytes(o, op->out[j]);
}

/* qkv, proj, fc1, fc2: out_j = X W_j + b_j, W = [K x Ntot weights | Ntot bias], one output
 * per column block. */
static rt_status op_linear(mrt_ops *o, const trace_op *op, const uint64_t *in,
                           const uint64_t *out, size_t rows, ms_error *err)
{
    size_t T = rows, K = tbytes(o, op->in[0]) / 2 / o->z.T, n = tbytes(o, op->in[1]) / 2;
    size_t Nt = n / (K + 1), N = op->n_out ? Nt / op->n_out : 0;
    if (!K || !N || N * op->n_out != Nt || Nt * (K + 1) != n)
        return bad_trace("a linear op's shapes do not match its weight", err);
    kn_bf16 *W = BF(in[1]);
    for (uint32_t j = 0; j < op->n_out; j++) {
        RT_TRY(kn_gemm(o->k, 0, 0, T, N, K, BF(in[0]), K, W + j * N, Nt, 0, BF(out[j]), N, 0, err));
        RT_TRY(kn_bias_add(o->k, BF(out[j]), W + K * Nt + j * N, T, N, N, err));
    }
    return RT_OK;
}

/* The backward of op_linear: inputs dY_0..dY_{m-1}, W, X; outputs dX and the group's fp32
 * gradient buffer (dW and db at the parameter's offset). */
static rt_status op_linear_bwd(mrt_ops *o, const trace_op *op, const uint64_t *in,
                               const uint64_t *out, ms_error *err)
{
    if (op->n_in < 3 || op->n_out < 2) return bad_trace("a linear backward op's operands", err);
    uint32_t ny = op->n_in - 2;
    size_t T = o->z.T, K = tbytes(o, op->in[ny + 1]) / 2 / T, n = tbytes(o, op->in[ny]) / 2;
    size_t Nt = n / (K + 1), N = Nt / ny;
    float *gW = grad_of(o, out, 1, op->in[ny]);
    if (!gW || !K || N * ny != Nt || Nt * (K + 1) != n)
        return bad_trace("a linear backward op's shapes or gradient offset", err);
    kn_bf16 *W = BF(in[ny]), *X = BF(in[ny + 1]);
    for (uint32_t j = 0; j < ny; j++) {
        kn_bf16 *dY = BF(in[j]);
        RT_TRY(kn_gemm(o->k, 0, 1, T, K, N, dY, N, W + j * N, Nt, j ? 1.0f : 0.0f, BF(out[0]),
                       K, 0, err));
        RT_TRY(kn_gemm(o->k, 1, 0, K, N, T, X, K, dY, N, 1, gW + j * N, Nt, 1, err));
        RT_TRY(kn_colsum(o->k, gW + K * Nt + j * N, dY, T, N, err));
    }
    return RT_OK;
}

static rt_status op_optim(mrt_ops *o, const trace_op *op, const uint64_t *in,
                          cudaStream_t s, ms_error *err)
{
    if (op->n_in < 3) return bad_trace("an optimizer op without parameters", err);
    size_t total = tbytes(o, op->in[1]) / 12;
    uint64_t steps = 0;
    u64map_get(o->gstep, op->in[1], &steps);
    steps++;
    if (u64map_put(o->gstep, op->in[1], steps)) return bad_trace("out of memory", err);
    float *opt = F32(in[1]);
    kn_adamw_cfg c = o->adam;
    c.step = (int)steps;
    if (steps == 1) RT_CHECK(err, cudaMemsetAsync(opt + total, 0, total * 8, s));   /* m, v */
    for (uint32_t j = 2; j < op->n_in; j++) {
        uint64_t off = 0;
        size_t n = tbytes(o, op->in[j]) / 2;
        if (!u64map_get(o->poff, op->in[j], &off) || off + n > total)
            return bad_trace("an optimizer op's parameter outside its state", err);
        if (steps == 1) RT_TRY(kn_bf16_to_f32(o->k, opt + off, BF(in[j]), n, err));   /* master */
        RT_TRY(kn_adamw(o->k, BF(in[j]), opt + off, opt + total + off, opt + 2 * total + off,
                        F32(in[0]) + off, n, &c, err));
    }
    return RT_OK;
}

rt_status mrt_ops_run(mrt_ops *o, void *stream, const trace_op *op, const uint64_t *in,
                      const uint64_t *out, ms_error *err)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (kn_ctx_stream(o->k) != stream) RT_TRY(kn_ctx_set_stream(o->k, stream, err));
    RT_TRY(init_inputs(o, op, in, err));
    const shape *z = &o->z;
    size_t T = z->T, h = z->h;
    const char *b = base_name(op->name);
    char why[160];
    switch (op->kind) {
    case TK_ELEM:
        if (!strcmp(b, "zero_grad")) {
            for (uint32_t j = 0; j < op->n_out; j++)
                RT_CHECK(err, cudaMemsetAsync((void *)(uintptr_t)out[j], 0, dev_bytes(o, op, j),
                                              s));
            return RT_OK;
        }
        if ((!strcmp(b, "add1") || !strcmp(b, "add2")) && op->n_in == 2 && op->n_out == 1)
            return kn_add(o->k, BF(out[0]), BF(in[0]), BF(in[1]), NULL, T, h, err);
        break;
    case TK_EMBED:
        if (!strcmp(b, "embed") && op->n_in == 2 && op->n_out == 1) {
            ensure_tokens(o);
            RT_TRY(upload_ids(o, in[0], o->tok, tbytes(o, op->in[0]), s, err));
            return kn_embed_fwd(o->k, BF(out[0]), (const int32_t *)(uintptr_t)in[0], BF(in[1]), T,
                                h, err);
        }
        if (!strcmp(b, "embed.bwd") && op->n_in == 2 && op->n_out == 1) {
            if (o->out_host && o->out_host[0])
                return bad_trace("the embedding's gradient buffer is split by module", err);
            return kn_embed_bwd(o->k, F32(out[0]), (const int32_t *)(uintptr_t)in[1], BF(in[0]), T,
                                h, err);
        }
        break;
    case TK_NORM:
        if (op->phase == TP_FWD && op->n_in == 2) {
            if (op->n_out != 2)
                return bad_trace("norm statistics missing: generate with save_small", err);
            float *st = F32(out[1]);
            return kn_ln_fwd(o->k, BF(out[0]), st, st + T, BF(in[0]), BF(in[1]), BF(in[1]) + h, T,
                             h, z->eps, err);
        }
        if (op->phase == TP_BWD && op->n_in >= 4 && op->n_out == 2) {
            float *st = F32(in[op->n_in - 1]), *g = grad_of(o, out, 1, op->in[2]);
            if (!g) return bad_trace("a norm's gradient offset is unknown", err);
            return kn_ln_bwd(o->k, BF(out[0]), g, g + h, BF(in[0]), BF(in[1]), BF(in[2]), st,
                             st + T, op->n_in == 5 ? BF(in[3]) : NULL, T, h, err);
        }
        break;
    case TK_GEMM:
        if (!strcmp(b, "lm_head") && op->n_in == 2 && op->n_out == 1)
            return kn_gemm(o->k, 0, 1, T, o->V, h, BF(in[0]), h, BF(in[1]), h, 0, BF(out[0]),
                           o->V, 0, err);
        if (!strcmp(b, "lm_head.bwd") && op->n_in == 3 && op->n_out == 2) {
            float *g = grad_of(o, out, 1, op->in[1]);
            if (!g) return bad_trace("the embedding's gradient offset is unknown", err);
            RT_TRY(kn_gemm(o->k, 0, 0, T, h, o->V, BF(in[0]), o->V, BF(in[1]), h, 0, BF(out[0]), h,
                           0, err));
            return kn_gemm(o->k, 1, 0, o->V, h, T, BF(in[0]), o->V, BF(in[2]), h, 1, g, h, 1, err);
        }
        if (op->phase == TP_FWD && op->n_in == 2) return op_linear(o, op, in, out, T, err);
        if (op->phase == TP_BWD) return op_linear_bwd(o, op, in, out, err);
        break;
    case TK_ATTN:
        if (op->phase == TP_FWD && op->n_in == 3) {
            if (op->n_out != 2)
                return bad_trace("attention log-sum-exp missing: generate with save_small", err);
            return kn_attn_fwd(o->k, BF(out[0]), F32(out[1]), BF(in[0]), BF(in[1]), BF(in[2]), h,
                               h, z->B, z->H, z->S, z->D, err);
        }
        if (op->phase == TP_BWD && op->n_in == 6 && op->n_out == 3)
            return kn_attn_bwd(o->k, BF(out[0]), BF(out[1]), BF(out[2]), BF(in[0]), BF(in[1]),
                               BF(in[2]), BF(in[3]), BF(in[4]), F32(in[5]), h, h, z->B, z->H,
                               z->S, z->D, err);
        break;
    case TK_ACT:
        if (op->phase == TP_FWD && op->n_in == 1 && op->n_out == 1)
            return kn_gelu_fwd(o->k, BF(out[0]), BF(in[0]), NULL, T, z->f, err);
        if (op->phase == TP_BWD && op->n_in == 2 && op->n_out == 1)
            return kn_gelu_bwd(o->k, BF(out[0]), BF(in[0]), BF(in[1]), NULL, T, z->f, err);
        break;
    case TK_LOSS:
        if (op->n_in != 2) break;
        if (!strcmp(b, "loss")) {
            ensure_tokens(o);
            RT_TRY(upload_ids(o, in[1], o->lab, tbytes(o, op->in[1]), s, err));
            RT_TRY(kn_ce_fwd(o->k, F32(out[0]), o->lse, BF(in[0]), o->V,
                             (const int32_t *)(uintptr_t)in[1], T, o->V, err));
            int it = o->iter < MRT_MAX_ITERS ? o->iter : MRT_MAX_ITERS - 1;
            return kn_sum(o->k, o->loss_hist + it, F32(out[0]), T, err);
        }
        if (!strcmp(b, "loss.bwd") && op->n_out == 1)
            return kn_ce_bwd(o->k, BF(out[0]), BF(in[0]), o->V, o->lse,
                             (const int32_t *)(uintptr_t)in[1], T, o->V, 1.0f / (float)T, err);
        break;
    case TK_OPTIM:
        if (!strcmp(b, "optim") || ms_ends_with(b, ".optim")) return op_optim(o, op, in, s, err);
        break;
    default:
        break;
    }
    snprintf(why, sizeof why, "op '%s' (%s) has no real kernel", op->name,
             trace_opkind_name(op->kind));
    return bad_trace(why, err);
}

rt_status mrt_ops_run_split(mrt_ops *o, void *stream, const trace_op *op, const uint64_t *in_addr,
                            const uint64_t *out_addr, const uint64_t *out_host, ms_error *err)
{
    o->out_host = out_host;
    rt_status st = mrt_ops_run(o, stream, op, in_addr, out_addr, err);
    o->out_host = NULL;
    return st;
}

/* ---- module-level host gradients (GO-MemFerry's grad_host.N knobs) ---- */

/* Group c's buffer in the split layout: its GPU parameters' gradients first, then the host
 * parameters', each in group order; the device block holds the first part. */
static rt_status split_group(mrt_ops *o, const mrt_hgroup *c, ms_error *err)
{
    size_t nhost = 0;
    for (uint32_t j = 0; j < c->n_param; j++) nhost += u64map_get(o->hostp, c->param[j], NULL);
    if (!nhost || nhost == c->n_param) return RT_OK;   /* whole on one side: group order */
    uint64_t off = 0;
    for (int host = 0; host < 2; host++) {
        if (host && u64map_put(o->gdev, c->grad, off * 4)) return bad_trace("out of memory", err);
        for (uint32_t j = 0; j < c->n_param; j++) {
            if (u64map_get(o->hostp, c->param[j], NULL) != host) continue;
            if (u64map_put(o->goff, c->param[j], off)) return bad_trace("out of memory", err);
            off += tbytes(o, c->param[j]) / 2;
        }
    }
    return RT_OK;
}

rt_status mrt_ops_set_plan(mrt_ops *o, const plan_t *p, ms_error *err)
{
    uint64_t *ids = NULL;
    size_t n = 0;
    ms_error le; /* the library's */
    if (lower_dha_grad_host_ids(p, &ids, &n, &le) != MS_OK) return bad_trace(le.msg, err);
    rt_status st = RT_OK;
    if (n && !o->n_hg) st = bad_trace("a plan with module-level host gradients (grad_host "
                                      "knobs) on a trace without host optimizer groups", err);
    for (size_t i = 0; i < n && st == RT_OK; i++) {
        const trace_tensor *x = trace_find_tensor(o->t, ids[i]);
        if (!x || x->cls != TC_PARAM)
            st = bad_trace("a grad_host knob names a tensor that is not a parameter of the "
                           "trace (the real kernels split buffers by parameter)", err);
        else if (u64map_put(o->hostp, ids[i], 1))
            st = bad_trace("out of memory", err);
    }
    free(ids);
    for (size_t k = 0; k < o->n_hg && st == RT_OK; k++) st = split_group(o, &o->hg[k], err);
    return st;
}

/* ---- host-resident tensors and the host optimizer (DHA, offload plans) ---- */

rt_status mrt_ops_host_init(mrt_ops *o, void *stream, uint64_t tensor, uint64_t dev_addr,
                            uint64_t bytes, ms_error *err)
{
    const trace_tensor *x = trace_find_tensor(o->t, tensor);
    if (!x || (x->cls != TC_PARAM && x->cls != TC_GRAD)) return RT_OK;
    if (bytes < x->bytes) return bad_trace("a host home smaller than its tensor", err);
    if (kn_ctx_stream(o->k) != stream) RT_TRY(kn_ctx_set_stream(o->k, stream, err));
    if (x->cls == TC_GRAD) {
        RT_CHECK(err, cudaMemsetAsync((void *)(uintptr_t)dev_addr, 0, x->bytes,
                                      (cudaStream_t)stream));
        return RT_OK;
    }
    if (u64map_get(o->inited, tensor, NULL)) return RT_OK;
    RT_TRY(init_param(o, tensor, dev_addr, err));
    if (u64map_put(o->inited, tensor, 1)) return bad_trace("out of memory", err);
    return RT_OK;
}

static const mrt_hgroup *hgroup_of(const mrt_ops *o, const trace_op *op, size_t *gi)
{
    size_t len = strlen(op->name), sl = strlen(".optim.host");
    if (op->kind != TK_OPTIM || len <= sl || strcmp(op->name + len - sl, ".optim.host"))
        return NULL;
    for (size_t k = 0; k < o->n_hg; k++)
        if (strlen(o->hg[k].name) == len - sl && !strncmp(o->hg[k].name, op->name, len - sl)) {
            *gi = k;
            return &o->hg[k];
        }
    return NULL;
}

int mrt_ops_host_prepare(mrt_ops *o, const trace_op *op, uint64_t *ids, size_t max,
                         int64_t *tag, ms_error *err)
{
    size_t gi = 0;
    const mrt_hgroup *c = hgroup_of(o, op, &gi);
    if (!c) {
        char why[160];
        snprintf(why, sizeof why, "host op '%s' has no host math (only <group>.optim.host of "
                 "an offload trace)", op->name);
        bad_trace(why, err);
        return -1;
    }
    if (2 + (size_t)c->n_param > max) {
        bad_trace("a host optimizer group with too many parameters", err);
        return -1;
    }
    ids[0] = c->grad;
    ids[1] = dha_synth_id(0);
    for (uint32_t j = 0; j < c->n_param; j++) ids[2 + j] = c->param[j];
    o->hg[gi].steps++;
    *tag = (int64_t)((uint64_t)gi << 32 | (uint64_t)o->hg[gi].steps);
    return 2 + (int)c->n_param;
}

/* Runs on the executor's host thread, split over the dispatcher's thread pool: AdamW
 * (kn_adamw_host_pool, the float arithmetic of the
 * GPU's kn_adamw) of every parameter of the group on its pinned host copies, the fp32
 * master set from the bf16 parameters and the moments zeroed at the group's first step;
 * then the host gradient is zeroed, as the host does for DHA gradients (lower_dha does not
 * emit zero_grad for gradients that live on the host; a GPU gradient's host copy is
 * overwritten by the next copy anyway). */
rt_status mrt_ops_host_compute(mrt_ops *o, const trace_op *op, int64_t tag,
                               const uint64_t *addr, const uint64_t *bytes, size_t n, ms_error *err)
{
    (void)op;
    size_t gi = (size_t)((uint64_t)tag >> 32);
    int step = (int)(tag & 0xffffffff);
    if (gi >= o->n_hg) return bad_trace("a host step of an unknown group", err);
    const mrt_hgroup *c = &o->hg[gi];
    size_t total = c->elems;
    if (n != 2 + (size_t)c->n_param || bytes[0] < total * 4 ||
        bytes[1] < (c->state_off + total) * 12)
        return bad_trace("a host step's gradient or optimizer state is smaller than its group",
                         err);
    float *g = F32(addr[0]), *st = F32(addr[1]) + c->state_off * 3;
    float *master = st, *m = st + total, *v = st + 2 * total;
    kn_adamw_cfg a = o->adam;
    a.step = step;
    if (step == 1) memset(m, 0, total * 8);
    for (uint32_t j = 0; j < c->n_param; j++) {
        uint64_t off = 0, goff = 0;
        size_t pn = tbytes(o, c->param[j]) / 2;
        if (!u64map_get(o->poff, c->param[j], &off) || off + pn > total || bytes[2 + j] < pn * 2)
            return bad_trace("a host step's parameter outside its group", err);
        if (!u64map_get(o->goff, c->param[j], &goff)) goff = off;
        kn_bf16 *p = BF(addr[2 + j]);
        if (step == 1)
            for (size_t i = 0; i < pn; i++) {
                uint16_t b;
                memcpy(&b, &p[i], 2);
                master[off + i] = kref_bf2f(b);
            }
        kn_adamw_host_pool(o->pool, p, master + off, m + off, v + off, g + goff, pn, &a);
    }
    kn_zero_host_pool(o->pool, g, total);
    return RT_OK;
}

rt_status mrt_ops_host_init_hook(void *ctx, void *stream, uint64_t tensor, uint64_t dev_addr,
                                 uint64_t bytes, ms_error *err)
{
    return mrt_ops_host_init((mrt_ops *)ctx, stream, tensor, dev_addr, bytes, err);
}

int mrt_ops_host_prepare_hook(void *ctx, const trace_op *op, uint64_t *ids, size_t max,
                              int64_t *tag, ms_error *err)
{
    return mrt_ops_host_prepare((mrt_ops *)ctx, op, ids, max, tag, err);
}

rt_status mrt_ops_host_compute_hook(void *ctx, const trace_op *op, int64_t tag,
                                    const uint64_t *addr, const uint64_t *bytes, size_t n,
                                    ms_error *err)
{
    return mrt_ops_host_compute((mrt_ops *)ctx, op, tag, addr, bytes, n, err);
}

/* ---- token-wise partial replays (MEMO) ---- */

int mrt_ops_token_rows(const mrt_ops *o, uint64_t tensor, unsigned *arrays, uint64_t *row_bytes)
{
    const trace_tensor *x = trace_find_tensor(o->t, tensor);
    size_t T = o->z.T;
    if (!x || (x->cls != TC_ACT_SKEL && x->cls != TC_ACT_TRANS) || !T) return 0;
    if (ms_ends_with(x->name, "attn_lse")) return 0; /* [batch, head, seq]: not token-major */
    if (ms_ends_with(x->name, "_stats")) {             /* mean[T] then rstd[T], fp32 */
        if (x->bytes != 2 * T * 4) return 0;
        *arrays = 2;
        *row_bytes = 4;
        return 1;
    }
    if (x->bytes % T) return 0;
    *arrays = 1;
    *row_bytes = x->bytes / T;
    return 1;
}

/* Where array `arr` of operand id starts for rows [r0, T): a full-size activation at row r0
 * of that array; a replay transient (part) holds only the n replayed rows of each array;
 * weights and other tensors that are not token rows as they are. */
static uint64_t rows_at(const mrt_ops *o, uint64_t id, uint64_t addr, int part, size_t r0,
                        size_t n, unsigned arr)
{
    unsigned k = 0;
    uint64_t rb = 0;
    if (!mrt_ops_token_rows(o, id, &k, &rb)) return addr;
    if (arr >= k) arr = k - 1;
    return part ? addr + (uint64_t)arr * n * rb : addr + ((uint64_t)arr * o->z.T + r0) * rb;
}

rt_status mrt_ops_run_rows(mrt_ops *o, void *stream, const trace_op *op, const uint64_t *in,
                           const uint64_t *out, const uint8_t *in_part,
                           const uint8_t *out_part, double frac, ms_error *err)
{
    enum { MAXT = 64 };
    const shape *z = &o->z;
    size_t T = z->T, h = z->h;
    char why[200];
    double nr = frac * (double)T;
    size_t n = (size_t)llround(nr);
    if (!(frac > 0 && frac < 1) || fabs(nr - (double)n) > 1e-6 || n == 0 || n >= T) {
        snprintf(why, sizeof why, "op '%s': a token-wise replay of %.9g of %zu token rows is "
                 "not a whole number of rows", op->name, frac, T);
        return bad_trace(why, err);
    }
    if (op->n_in > MAXT || op->n_out > MAXT) return bad_trace("a replayed op has too many tensors",
                                                              err);
    size_t r0 = T - n;
    if (kn_ctx_stream(o->k) != stream) RT_TRY(kn_ctx_set_stream(o->k, stream, err));
    RT_TRY(init_inputs(o, op, in, err));
    uint64_t ia[MAXT], oa[MAXT];
    for (uint32_t j = 0; j < op->n_in; j++) ia[j] = rows_at(o, op->in[j], in[j], in_part[j], r0, n, 0);
    for (uint32_t j = 0; j < op->n_out; j++)
        oa[j] = rows_at(o, op->out[j], out[j], out_part[j], r0, n, 0);
    const char *b = base_name(op->name);
    if (op->phase != TP_FWD) {
        snprintf(why, sizeof why, "op '%s': only forward ops are replayed token-wise", op->name);
        return bad_trace(why, err);
    }
    switch (op->kind) {
    case TK_NORM:
        if (op->n_in == 2 && op->n_out == 2) {
            float *mean = F32(oa[1]);
            float *rstd = F32(rows_at(o, op->out[1], out[1], out_part[1], r0, n, 1));
            return kn_ln_fwd(o->k, BF(oa[0]), mean, rstd, BF(ia[0]), BF(ia[1]), BF(ia[1]) + h,
                             n, h, z->eps, err);
        }
        break;
    case TK_GEMM:
        if (strcmp(b, "lm_head") && op->n_in == 2) return op_linear(o, op, ia, oa, n, err);
        break;
    case TK_ELEM:
        if ((!strcmp(b, "add1") || !strcmp(b, "add2")) && op->n_in == 2 && op->n_out == 1)
            return kn_add(o->k, BF(oa[0]), BF(ia[0]), BF(ia[1]), NULL, n, h, err);
        break;
    case TK_ACT:
        if (op->n_in == 1 && op->n_out == 1) return kn_gelu_fwd(o->k, BF(oa[0]), BF(ia[0]), NULL,
                                                                n, z->f, err);
        break;
    case TK_ATTN:
        snprintf(why, sizeof why, "op '%s': attention mixes tokens and is never replayed "
                 "token-wise (swap its inputs' consumers' inputs whole)", op->name);
        return bad_trace(why, err);
    default:
        break;
    }
    snprintf(why, sizeof why, "op '%s' (%s) has no row-range kernel for a token-wise replay",
             op->name, trace_opkind_name(op->kind));
    return bad_trace(why, err);
}

static rt_status compute_hook(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                              const uint64_t *out, ms_error *err)
{
    return mrt_ops_run(ctx, stream, op, in, out, err);
}

static rt_status split_hook(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                            const uint64_t *out, const uint64_t *out_host, ms_error *err)
{
    return mrt_ops_run_split(ctx, stream, op, in, out, out_host, err);
}

static void iter_hook(void *ctx, int iter) { mrt_ops_set_iter(ctx, iter); }

void mrt_ops_exec_hooks(mrt_ops *o, rt_exec_opts *x)
{
    x->compute = compute_hook;
    x->compute_split = split_hook;
    x->set_iter = iter_hook;
    x->compute_rows = mrt_ops_rows_hook;
    x->token_rows = mrt_ops_token_rows_hook;
    x->host_init = mrt_ops_host_init_hook;
    x->host_prepare = mrt_ops_host_prepare_hook;
    x->host_compute = mrt_ops_host_compute_hook;
    x->compute_ctx = o;
    x->spin_credit = 0;
}

rt_status mrt_ops_rows_hook(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                            const uint64_t *out, const uint8_t *in_part,
                            const uint8_t *out_part, double frac, ms_error *err)
{
    return mrt_ops_run_rows((mrt_ops *)ctx, stream, op, in, out, in_part, out_part, frac, err);
}

int mrt_ops_token_rows_hook(void *ctx, uint64_t tensor, unsigned *arrays, uint64_t *row_bytes)
{
    return mrt_ops_token_rows((const mrt_ops *)ctx, tensor, arrays, row_bytes);
}

/* ---- the one-stream schedule walker ---- */

void mrt_sched_result_release(mrt_sched_result *r)
{
    if (!r) return;
    free(r->ops);
    r->ops = NULL;
    r->n_ops = 0;
}

static rt_status walk_check(const schedule_t *s, size_t *n_compute, ms_error *err)
{
    *n_compute = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        int ok = a->stream == SS_COMPUTE &&
                 (a->kind == SA_COMPUTE || a->kind == SA_ALLOC || a->kind == SA_FREE ||
                  a->kind == SA_MARK || a->kind == SA_RECORD || a->kind == SA_WAIT);
        if (!ok || a->host_read_bytes || a->host_write_bytes)
            return bad_trace("this schedule copies or uses other streams: real kernels run "
                             "one-stream schedules (keep-all, recomputation) for now", err);
        *n_compute += a->kind == SA_COMPUTE;
    }
    return RT_OK;
}

typedef struct walk {
    const schedule_t *s;
    const trace_t *t;
    alloc_t *a;
    mrt_ops *o;
    cudaStream_t st;
    u64map *live;            /* tensor -> address */
    cudaEvent_t *ev;         /* 2 per compute action */
    cudaEvent_t iev[MRT_MAX_ITERS + 2];
    int n_iev;
    uint64_t *ia, *oa;       /* operand addresses of the current op */
} walk;

static rt_status walk_compute(walk *w, size_t i, const sched_action *a, size_t k,
                              mrt_sched_result *r, ms_error *err)
{
    const trace_op *op = trace_find_op(w->t, (uint64_t)a->op);
    char why[160];
    if (!op) return bad_trace("a compute action without its trace op", err);
    for (uint32_t j = 0; j < op->n_in + op->n_out; j++) {
        uint64_t id = j < op->n_in ? op->in[j] : op->out[j - op->n_in], addr;
        if (!u64map_get(w->live, id, &addr)) {
            snprintf(why, sizeof why, "op '%s' uses tensor %llu, which holds no memory",
                     op->name, (unsigned long long)id);
            return bad_trace(why, err);
        }
        if (j < op->n_in) w->ia[j] = addr;
        else w->oa[j - op->n_in] = addr;
    }
    RT_CHECK(err, cudaEventRecord(w->ev[2 * k], w->st));
    RT_TRY(mrt_ops_run(w->o, w->st, op, w->ia, w->oa, err));
    RT_CHECK(err, cudaEventRecord(w->ev[2 * k + 1], w->st));
    mrt_op_time *ot = &r->ops[k];
    ot->action = i;
    ot->op = a->op;
    ot->req_us = a->dur_us > 0 ? a->dur_us : 0;
    ot->recompute = a->recompute;
    int it = r->n_iter > 0 ? r->n_iter - 1 : -1;
    if (it >= 0) r->nominal_ms[it] += ot->req_us * 1e-3;
    return RT_OK;
}

static rt_status walk_all(walk *w, mrt_sched_result *r, ms_error *err)
{
    size_t k = 0;
    RT_CHECK(err, cudaEventRecord(w->iev[w->n_iev++], w->st));
    for (size_t i = 0; i < sched_count(w->s); i++) {
        const sched_action *a = sched_get(w->s, i);
        uint64_t addr = 0;
        char why[160];
        switch (a->kind) {
        case SA_ALLOC: {
            ms_status ms = alloc_block(w->a, a->bytes, 0, a->tensor, &addr);
            if (ms != MS_OK) {
                snprintf(why, sizeof why, "schedule action %zu: allocating %llu bytes: %s", i,
                         (unsigned long long)a->bytes, ms_status_str(ms));
                return rt_fail(err, ms == MS_ERR_OOM ? RT_ERR_OOM : RT_ERR_CUDA, __FILE__,
                                    __LINE__, "alloc_block", why);
            }
            if (u64map_put(w->live, a->tensor, addr)) return bad_trace("out of memory", err);
            break;
        }
        case SA_FREE:
            /* one stream: a later op that gets this block runs after every earlier use */
            if (u64map_del(w->live, a->tensor, &addr) && alloc_release(w->a, addr) != MS_OK)
                return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "alloc_release", "a block");
            break;
        case SA_COMPUTE:
            RT_TRY(walk_compute(w, i, a, k++, r, err));
            break;
        case SA_MARK:
            if (a->mark == TM_ITER && r->n_iter < MRT_MAX_ITERS) {
                RT_CHECK(err, cudaEventRecord(w->iev[w->n_iev++], w->st));
                mrt_ops_set_iter(w->o, (int)a->mark_value);
                r->n_iter++;
            }
            break;
        default:
            break;
        }
    }
    RT_CHECK(err, cudaEventRecord(w->iev[w->n_iev++], w->st));
    RT_CHECK(err, cudaStreamSynchronize(w->st));
    r->n_ops = k;
    return RT_OK;
}

static void walk_times(walk *w, mrt_sched_result *r)
{
    float ms = 0;
    for (size_t k = 0; k < r->n_ops; k++) {
        cudaEventElapsedTime(&ms, w->ev[2 * k], w->ev[2 * k + 1]);
        r->ops[k].meas_us = ms * 1e3;
    }
    cudaEventElapsedTime(&ms, w->iev[0], w->iev[1]);
    r->setup_ms = ms;
    for (int i = 0; i < r->n_iter; i++) {
        cudaEventElapsedTime(&ms, w->iev[i + 1], w->iev[i + 2]);
        r->iter_ms[i] = ms;
    }
}

rt_status mrt_sched_run(const schedule_t *s, const trace_t *t, const mb_backend *be,
                        const char *allocator, const alloc_config *cfg, uint64_t seed,
                        const kn_adamw_cfg *adam, mrt_sched_result *r, ms_error *err)
{
    memset(r, 0, sizeof *r);
    size_t nc = 0;
    RT_TRY(walk_check(s, &nc, err));
    uint32_t max_opnd = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *x = trace_get(t, i);
        if (x->type == TR_OP && x->u.op.n_in + x->u.op.n_out > max_opnd)
            max_opnd = x->u.op.n_in + x->u.op.n_out;
    }
    walk w;
    memset(&w, 0, sizeof w);
    w.s = s;
    w.t = t;
    ms_error le; /* the library's */
    rt_status st = mrt_ops_new(t, seed, &w.o, err);
    if (st != RT_OK) return st;
    if (adam) mrt_ops_set_adam(w.o, adam);
    r->ops = calloc(nc ? nc : 1, sizeof *r->ops);
    w.ev = calloc(2 * (nc ? nc : 1), sizeof *w.ev);
    w.ia = calloc(max_opnd + 1, sizeof *w.ia);
    w.oa = calloc(max_opnd + 1, sizeof *w.oa);
    w.live = u64map_new(256);
    if (!r->ops || !w.ev || !w.ia || !w.oa || !w.live) st = bad_trace("out of memory", err);
    if (st == RT_OK && alloc_new(allocator ? allocator : "caching", cfg, be, &w.a, &le) != MS_OK)
        st = bad_trace(le.msg, err);
    if (st == RT_OK && cudaStreamCreateWithFlags(&w.st, cudaStreamNonBlocking) != cudaSuccess)
        st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaStreamCreate", "walker");
    size_t made = 0;
    int imade = 0;
    for (; st == RT_OK && made < 2 * nc; made++)
        if (cudaEventCreate(&w.ev[made]) != cudaSuccess) st = RT_ERR_CUDA;
    for (; st == RT_OK && imade < MRT_MAX_ITERS + 2; imade++)
        if (cudaEventCreate(&w.iev[imade]) != cudaSuccess) st = RT_ERR_CUDA;
    if (st == RT_ERR_CUDA) rt_fail(err, st, __FILE__, __LINE__, "cudaEventCreate", "walker");
    if (st == RT_OK) st = walk_all(&w, r, err);
    if (st == RT_OK) {
        walk_times(&w, r);
        st = mrt_ops_losses(w.o, r->loss, r->n_iter, err);
    }
    if (w.st) cudaStreamSynchronize(w.st);
    /* give every block back (the parameters, gradients and states live to the end) */
    uint64_t id, addr;
    for (size_t it = 0; w.live && w.a && u64map_next(w.live, &it, &id, &addr);)
        alloc_release(w.a, addr);
    if (w.a) {
        r->astats = *alloc_get_stats(w.a);
        alloc_empty_cache(w.a);
        alloc_free(w.a);
    }
    for (size_t i = 0; i < made; i++) cudaEventDestroy(w.ev[i]);
    for (int i = 0; i < imade; i++) cudaEventDestroy(w.iev[i]);
    if (w.st) cudaStreamDestroy(w.st);
    u64map_free(w.live);
    free(w.ev);
    free(w.ia);
    free(w.oa);
    mrt_ops_free(w.o);
    if (st != RT_OK) mrt_sched_result_release(r);
    return st;
}

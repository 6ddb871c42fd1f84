/* model_rt_ops.c — the op dispatcher for generated traces (model_rt_ops.h): runs each
 * op of a trace with the runtime's kernels on the addresses the executor gives it, with the
 * parameters, inputs and host optimizer groups it keeps, module-level host gradients,
 * host-resident tensors and token-wise partial replays, and the executor's hooks into it.
 * Used by runtime/rt_run.c (`memsim run --math real`), model_rt_walk.c and the GPU tests. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/model_rt_ops.h"
#include "runtime/model_rt_int.h"

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

rt_status mrt_bad_trace(const char *why, ms_error *err)
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
            if (u64map_put(o->poff, r->u.op.in[j], off)) return mrt_bad_trace("out of memory", err);
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
        if (len - sl >= sizeof o->hg[0].name) return mrt_bad_trace("a group name is too long", err);
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
            return mrt_bad_trace("an offload group without its gradient copy (<group>.grad.d2h) "
                                 "or parameter copy (<group>.param.h2d)", err);
        mrt_hgroup *ng = realloc(o->hg, (o->n_hg + 1) * sizeof *ng);
        if (!ng) return mrt_bad_trace("out of memory", err);
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
                return mrt_bad_trace("out of memory", err);
            h->elems += tbytes(o, ph->out[j]) / 2;
        }
        if (h->elems * 4 > tbytes(o, h->grad))
            return mrt_bad_trace("an offload group's parameters exceed its gradient buffer", err);
        state += h->elems;
    }
    return RT_OK;
}

rt_status mrt_ops_new(const trace_t *t, uint64_t seed, mrt_ops **out, ms_error *err)
{
    *out = NULL;
    if (tmeta(t, "tp") > 1 || tmeta(t, "cp") > 1 || tmeta(t, "dp") > 1)
        return mrt_bad_trace("real kernels run tp = cp = dp = 1 traces only", err);
    if (tmeta(t, "dtype_bytes") != 2 || tmeta(t, "grad_bytes") != 4)
        return mrt_bad_trace("real kernels need bf16 tensors and fp32 gradients (grad_bytes 4)",
                             err);
    if (trace_get_meta(t, "lora_rank") || trace_get_meta(t, "zero3") || tmeta(t, "causal") != 1)
        return mrt_bad_trace("LoRA, ZeRO-3 and encoder traces have no real kernels yet", err);
    const char *mname = trace_get_meta(t, "model");
    model_t md;
    ms_error le; /* the library's */
    if (!mname || model_lookup(mname, &md, &le) != MS_OK)
        return mrt_bad_trace("the trace's model is unknown", err);
    if (md.norm != MODEL_NORM_LAYER || md.mlp != MODEL_MLP_GELU || md.kv_heads != md.heads ||
        !md.tied_embeddings || !md.has_bias || md.pos_rows || md.type_vocab)
        return mrt_bad_trace("real kernels implement GPT layers: LayerNorm, GeLU, biases, full "
                             "multi-head attention, tied embeddings, no position table", err);
    shape z = {tmeta(t, "seq") * tmeta(t, "batch"), tmeta(t, "batch"), tmeta(t, "seq"),
               tmeta(t, "hidden"), tmeta(t, "heads"), 0, tmeta(t, "ffn"), 1e-5f};
    z.D = z.H ? z.h / z.H : 0;
    RT_TRY(mrt_shape_check(&z, 1, err));
    mrt_ops *o = calloc(1, sizeof *o);
    if (!o) return mrt_bad_trace("out of memory", err);
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
        st = mrt_bad_trace("out of memory", err);
    if (st == RT_OK) st = param_offsets(o, err);
    if (st == RT_OK && trace_get_meta(t, "offload")) st = host_groups(o, err);
    if (st == RT_OK && o->n_hg) st = rt_pool_new(0, &o->pool, err);
    if (st == RT_OK) st = kn_ctx_new(NULL, &o->k, err);
    if (st == RT_OK && (cudaMalloc((void **)&o->lse, z.T * 4) != cudaSuccess ||
                        cudaMalloc((void **)&o->loss_hist, MRT_MAX_ITERS * 4) != cudaSuccess ||
                        cudaMemset(o->loss_hist, 0, MRT_MAX_ITERS * 4) != cudaSuccess))
        st = rt_fail(err, RT_ERR_OOM, __FILE__, __LINE__, "cudaMalloc", "dispatcher buffers");
    if (st == RT_OK) st = kn_ctx_reserve(o->k, z.T, z.f > 3 * z.h ? z.f : 3 * z.h, z.T * z.H, z.S,
                                           err);
    if (st != RT_OK) {
        mrt_ops_free(o);
        return st;
    }
    *out = o;
    return RT_OK;
}

rt_status mrt_ops_load_gemm_algos(mrt_ops *o, const char *path, ms_error *err)
{
    return kn_gemm_algos_load(o->k, path, err);
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
    if (!x) return mrt_bad_trace("an op reads an unknown tensor", err);
    kn_bf16 *p = (kn_bf16 *)(uintptr_t)addr;
    size_t n = x->bytes / 2, h = o->z.h;
    const char *b = base_name(x->name);
    float a = o->init_std * sqrtf(3.0f);
    uint64_t sd = o->seed ^ (id * 0x9E3779B97F4A7C15ULL);
    if (!strcmp(b, "embed.w")) return kn_fill_uniform(o->k, p, n, sd, a, err);
    if (!strcmp(b, "ln1.w") || !strcmp(b, "ln2.w") || !strcmp(b, "final_norm.w")) {
        if (n != 2 * h) return mrt_bad_trace("a norm parameter is not gain + bias", err);
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
        return mrt_bad_trace("a parameter without a real-kernel initializer", err);
    }
    if (n <= nb) return mrt_bad_trace("a linear parameter smaller than its bias", err);
    RT_TRY(kn_fill_uniform(o->k, p, n - nb, sd, sc, err));
    return kn_fill_bf16(o->k, p + n - nb, nb, 0.0f, err);
}

static rt_status init_inputs(mrt_ops *o, const trace_op *op, const uint64_t *in, ms_error *err)
{
    for (uint32_t i = 0; i < op->n_in; i++) {
        const trace_tensor *x = trace_find_tensor(o->t, op->in[i]);
        if (!x || x->cls != TC_PARAM || u64map_get(o->inited, op->in[i], NULL)) continue;
        RT_TRY(init_param(o, op->in[i], in[i], err));
        if (u64map_put(o->inited, op->in[i], 1)) return mrt_bad_trace("out of memory", err);
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
    if (bytes < o->z.T * 4) return mrt_bad_trace("a token tensor is smaller than T ids", err);
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
        return mrt_bad_trace("a linear op's shapes do not match its weight", err);
    kn_bf16 *W = BF(in[1]);
    for (uint32_t j = 0; j < op->n_out; j++) {
        RT_TRY(kn_gemm_bias(o->k, 0, 0, T, N, K, BF(in[0]), K, W + j * N, Nt, BF(out[j]), N,
                            W + K * Nt + j * N, err));
    }
    return RT_OK;
}

/* The backward of op_linear: inputs dY_0..dY_{m-1}, W, X; outputs dX and the group's fp32
 * gradient buffer (dW and db at the parameter's offset). */
static rt_status op_linear_bwd(mrt_ops *o, const trace_op *op, const uint64_t *in,
                               const uint64_t *out, ms_error *err)
{
    if (op->n_in < 3 || op->n_out < 2) return mrt_bad_trace("a linear backward op's operands", err);
    uint32_t ny = op->n_in - 2;
    size_t T = o->z.T, K = tbytes(o, op->in[ny + 1]) / 2 / T, n = tbytes(o, op->in[ny]) / 2;
    size_t Nt = n / (K + 1), N = Nt / ny;
    float *gW = grad_of(o, out, 1, op->in[ny]);
    if (!gW || !K || N * ny != Nt || Nt * (K + 1) != n)
        return mrt_bad_trace("a linear backward op's shapes or gradient offset", err);
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
    if (op->n_in < 3) return mrt_bad_trace("an optimizer op without parameters", err);
    size_t total = tbytes(o, op->in[1]) / 12;
    uint64_t steps = 0;
    u64map_get(o->gstep, op->in[1], &steps);
    steps++;
    if (u64map_put(o->gstep, op->in[1], steps)) return mrt_bad_trace("out of memory", err);
    float *opt = F32(in[1]);
    kn_adamw_cfg c = o->adam;
    c.step = (int)steps;
    if (steps == 1) RT_CHECK(err, cudaMemsetAsync(opt + total, 0, total * 8, s));   /* m, v */
    for (uint32_t j = 2; j < op->n_in; j++) {
        uint64_t off = 0;
        size_t n = tbytes(o, op->in[j]) / 2;
        if (!u64map_get(o->poff, op->in[j], &off) || off + n > total)
            return mrt_bad_trace("an optimizer op's parameter outside its state", err);
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
                return mrt_bad_trace("the embedding's gradient buffer is split by module", err);
            return kn_embed_bwd(o->k, F32(out[0]), (const int32_t *)(uintptr_t)in[1], BF(in[0]), T,
                                h, err);
        }
        break;
    case TK_NORM:
        if (op->phase == TP_FWD && op->n_in == 2) {
            if (op->n_out != 2)
                return mrt_bad_trace("norm statistics missing: generate with save_small", err);
            float *st = F32(out[1]);
            return kn_ln_fwd(o->k, BF(out[0]), st, st + T, BF(in[0]), BF(in[1]), BF(in[1]) + h, T,
                             h, z->eps, err);
        }
        if (op->phase == TP_BWD && op->n_in >= 4 && op->n_out == 2) {
            float *st = F32(in[op->n_in - 1]), *g = grad_of(o, out, 1, op->in[2]);
            if (!g) return mrt_bad_trace("a norm's gradient offset is unknown", err);
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
            if (!g) return mrt_bad_trace("the embedding's gradient offset is unknown", err);
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
                return mrt_bad_trace("attention log-sum-exp missing: generate with save_small",
                                     err);
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
    return mrt_bad_trace(why, err);
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
        if (host && u64map_put(o->gdev, c->grad, off * 4))
            return mrt_bad_trace("out of memory", err);
        for (uint32_t j = 0; j < c->n_param; j++) {
            if (u64map_get(o->hostp, c->param[j], NULL) != host) continue;
            if (u64map_put(o->goff, c->param[j], off)) return mrt_bad_trace("out of memory", err);
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
    if (lower_dha_grad_host_ids(p, &ids, &n, &le) != MS_OK) return mrt_bad_trace(le.msg, err);
    rt_status st = RT_OK;
    if (n && !o->n_hg) st = mrt_bad_trace("a plan with module-level host gradients (grad_host "
                                          "knobs) on a trace without host optimizer groups", err);
    for (size_t i = 0; i < n && st == RT_OK; i++) {
        const trace_tensor *x = trace_find_tensor(o->t, ids[i]);
        if (!x || x->cls != TC_PARAM)
            st = mrt_bad_trace("a grad_host knob names a tensor that is not a parameter of the "
                               "trace (the real kernels split buffers by parameter)", err);
        else if (u64map_put(o->hostp, ids[i], 1))
            st = mrt_bad_trace("out of memory", err);
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
    if (bytes < x->bytes) return mrt_bad_trace("a host home smaller than its tensor", err);
    if (kn_ctx_stream(o->k) != stream) RT_TRY(kn_ctx_set_stream(o->k, stream, err));
    if (x->cls == TC_GRAD) {
        RT_CHECK(err, cudaMemsetAsync((void *)(uintptr_t)dev_addr, 0, x->bytes,
                                      (cudaStream_t)stream));
        return RT_OK;
    }
    if (u64map_get(o->inited, tensor, NULL)) return RT_OK;
    RT_TRY(init_param(o, tensor, dev_addr, err));
    if (u64map_put(o->inited, tensor, 1)) return mrt_bad_trace("out of memory", err);
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
        mrt_bad_trace(why, err);
        return -1;
    }
    if (2 + (size_t)c->n_param > max) {
        mrt_bad_trace("a host optimizer group with too many parameters", err);
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
    if (gi >= o->n_hg) return mrt_bad_trace("a host step of an unknown group", err);
    const mrt_hgroup *c = &o->hg[gi];
    size_t total = c->elems;
    if (n != 2 + (size_t)c->n_param || bytes[0] < total * 4 ||
        bytes[1] < (c->state_off + total) * 12)
        return mrt_bad_trace("a host step's gradient or optimizer state is smaller than its group",
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
            return mrt_bad_trace("a host step's parameter outside its group", err);
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
        return mrt_bad_trace(why, err);
    }
    if (op->n_in > MAXT || op->n_out > MAXT)
        return mrt_bad_trace("a replayed op has too many tensors", err);
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
        return mrt_bad_trace(why, err);
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
        return mrt_bad_trace(why, err);
    default:
        break;
    }
    snprintf(why, sizeof why, "op '%s' (%s) has no row-range kernel for a token-wise replay",
             op->name, trace_opkind_name(op->kind));
    return mrt_bad_trace(why, err);
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

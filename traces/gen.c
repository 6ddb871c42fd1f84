/* gen.c — the workload-trace generator: one rank's Megatron-style training iterations (TP
 * with sequence parallelism, CP ring attention, DP with a ZeRO-1 sharded optimizer) as an
 * in-memory trace. Used by `memsim gen`, planners' tests and experiments. The emitted program,
 * tensor by tensor, and every FLOP and byte formula are in docs/GENERATOR.md; comments here
 * say where the model deviates from the real frameworks. */
#include "traces/gen.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Nominal FLOPs per element of the memory-bound ops (they never bind on current GPUs; the
 * roofline takes their bytes). */
#define NORM_FWD_FLOPS 7.0   /* mean, variance, normalize, scale, shift */
#define NORM_BWD_FLOPS 14.0
#define ACT_FWD_FLOPS 8.0    /* tanh-GeLU / SiLU*up; relu counts the same (bytes dominate) */
#define ACT_BWD_FLOPS 16.0
#define LOSS_FWD_FLOPS 5.0   /* per logit: max, sub, exp, sum, log */
#define LOSS_BWD_FLOPS 3.0
#define ADAM_FLOPS 12.0      /* per parameter of the local shard */
#define TOKEN_ID_BYTES 8     /* int64 token ids and labels */
#define F32 4                /* fp32 bytes: statistics, workspaces, per-token losses */

void gen_config_default(gen_config *c)
{
    memset(c, 0, sizeof *c);
    c->micro_batch = 1;
    c->tp = c->cp = c->dp = 1;
    c->dtype_bytes = 2;
    c->grad_bytes = 0;
    c->opt_bytes_per_param = 12;
    c->iterations = 2;
    c->attn_bwd_factor = 2.5;
    c->lora_rank = 0;
    roof_params_default(&c->roof);
}

/* ---- sizes of one rank ---- */

typedef struct gsz {
    uint64_t b, s, sl;       /* micro-batch, global and per-rank (s/cp) sequence */
    uint64_t T, Ts;          /* tokens on this rank (b*sl) and their SP shard (T/tp) */
    uint64_t h, hq, hkv;     /* hidden; local query width h/tp; local kv width */
    uint64_t f, f1, V;       /* local ffn, local fc1 width, local vocab shard */
    uint64_t heads;          /* local heads */
    uint64_t D, GB, OB;      /* dtype, gradient, optimizer bytes per element/param */
    uint64_t normp;          /* parameters of one norm */
    int tp, cp, dp, causal;
} gsz;

static void sizes(const gen_config *c, gsz *z)
{
    const model_t *m = &c->model;
    uint64_t tp = (uint64_t)c->tp, hd = model_head_dim(m);
    z->tp = c->tp;
    z->cp = c->cp;
    z->dp = c->dp;
    z->b = c->micro_batch;
    z->s = c->seq;
    z->sl = c->seq / (uint64_t)c->cp;
    z->T = z->b * z->sl;
    z->Ts = z->T / tp;
    z->h = m->hidden;
    z->hq = m->hidden / tp;
    /* Fewer kv heads than TP ranks: Megatron replicates them, one per rank. */
    z->hkv = (m->kv_heads >= tp ? m->kv_heads / tp : 1) * hd;
    z->f = m->ffn_hidden / tp;
    z->f1 = model_fc1_width(m) / tp;
    /* Megatron pads the vocabulary to a multiple of tp; ceil keeps the shard whole. */
    z->V = (m->vocab + tp - 1) / tp;
    z->heads = m->heads / tp;
    z->D = (uint64_t)c->dtype_bytes;
    z->GB = (uint64_t)(c->grad_bytes > 0 ? c->grad_bytes : c->dtype_bytes);
    z->OB = (uint64_t)c->opt_bytes_per_param;
    z->normp = m->norm == MODEL_NORM_LAYER ? 2 * m->hidden : m->hidden;
    z->causal = !m->is_encoder;
}

/* The config with defaults filled in (seq 0 -> the model's default). */
static gen_config resolved(const gen_config *c)
{
    gen_config r = *c;
    if (r.seq == 0) r.seq = r.model.default_seq;
    return r;
}

static ms_status check_model(const model_t *m, ms_error *err)
{
    if (!m->layers || !m->hidden || !m->heads || !m->kv_heads || !m->ffn_hidden || !m->vocab)
        return ms_fail(err, MS_ERR_INVALID, "model '%s': layers, hidden, heads, kv_heads, ffn "
                       "and vocab must all be positive", m->name);
    if (m->hidden % m->heads)
        return ms_fail(err, MS_ERR_INVALID, "model '%s': heads (%" PRIu64 ") must divide "
                       "hidden (%" PRIu64 ")", m->name, m->heads, m->hidden);
    if (m->heads % m->kv_heads)
        return ms_fail(err, MS_ERR_INVALID, "model '%s': kv_heads (%" PRIu64 ") must divide "
                       "heads (%" PRIu64 ")", m->name, m->kv_heads, m->heads);
    if (m->layers > 4000 || m->hidden > (1u << 20) || m->ffn_hidden > (1u << 22) ||
        m->vocab > (1u << 24))
        return ms_fail(err, MS_ERR_INVALID, "model '%s': implausibly large dimensions",
                       m->name);
    return MS_OK;
}

static ms_status check_parallel(const gen_config *c, ms_error *err)
{
    const model_t *m = &c->model;
    uint64_t tp = (uint64_t)c->tp, cp = (uint64_t)c->cp;
    if (m->heads % tp)
        return ms_fail(err, MS_ERR_INVALID, "tp %d does not divide the %" PRIu64
                       " attention heads of %s", c->tp, m->heads, m->name);
    if (m->kv_heads % tp && tp % m->kv_heads)
        return ms_fail(err, MS_ERR_INVALID, "tp %d and the %" PRIu64 " kv heads of %s: one "
                       "must divide the other", c->tp, m->kv_heads, m->name);
    if (m->ffn_hidden % tp)
        return ms_fail(err, MS_ERR_INVALID, "tp %d does not divide the ffn hidden size %"
                       PRIu64 " of %s", c->tp, m->ffn_hidden, m->name);
    if (c->seq % cp)
        return ms_fail(err, MS_ERR_INVALID, "cp %d does not divide seq %" PRIu64, c->cp,
                       c->seq);
    if ((c->seq / cp) % tp)
        return ms_fail(err, MS_ERR_INVALID, "sequence parallelism: tp %d must divide the "
                       "per-rank sequence seq/cp = %" PRIu64, c->tp, c->seq / cp);
    if (m->max_seq && c->seq > m->max_seq)
        return ms_fail(err, MS_ERR_INVALID, "seq %" PRIu64 " exceeds the %" PRIu64
                       "-position table of %s", c->seq, m->max_seq, m->name);
    return MS_OK;
}

static ms_status check_ranges(const gen_config *c, ms_error *err)
{
    if (c->seq == 0) return ms_fail(err, MS_ERR_INVALID, "seq must be positive");
    if (c->micro_batch == 0) return ms_fail(err, MS_ERR_INVALID, "micro-batch must be positive");
    if (c->tp < 1 || c->cp < 1 || c->dp < 1)
        return ms_fail(err, MS_ERR_INVALID, "tp, cp and dp must be positive (got %d, %d, %d)",
                       c->tp, c->cp, c->dp);
    if (c->tp > 65536 || c->cp > 65536 || c->dp > 1048576)
        return ms_fail(err, MS_ERR_INVALID, "tp, cp or dp implausibly large");
    if (c->dtype_bytes < 1 || c->dtype_bytes > 8)
        return ms_fail(err, MS_ERR_INVALID, "dtype_bytes must be 1..8 (got %d)", c->dtype_bytes);
    if (c->grad_bytes < 0 || c->grad_bytes > 8)
        return ms_fail(err, MS_ERR_INVALID, "grad_bytes must be 0 (= dtype) or 1..8 (got %d)",
                       c->grad_bytes);
    if (c->opt_bytes_per_param < 0 || c->opt_bytes_per_param > 64)
        return ms_fail(err, MS_ERR_INVALID, "opt_bytes_per_param must be 0..64 (got %d)",
                       c->opt_bytes_per_param);
    if (c->iterations < 1 || c->iterations > 10000)
        return ms_fail(err, MS_ERR_INVALID, "iterations must be 1..10000 (got %d)",
                       c->iterations);
    if (!isfinite(c->attn_bwd_factor) || c->attn_bwd_factor < 0)
        return ms_fail(err, MS_ERR_INVALID, "attn_bwd_factor must be a finite number >= 0");
    if (c->lora)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "lora is not implemented by the generator yet");
    if (c->zero3)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "zero3 is not implemented by the generator yet");
    return MS_OK;
}

/* The trace format caps a tensor at 2^50 bytes (1 PiB); the largest tensors of a rank are
 * the logits, the MLP activations, the attention workspaces and the per-layer parameter,
 * gradient and optimizer groups. Bounding them here also keeps every byte sum the generator
 * forms far inside uint64. */
#define GEN_TENSOR_MAX 0x1p50

static ms_status check_fits(const gen_config *c, ms_error *err)
{
    const model_t *m = &c->model;
    double tp = c->tp, T = (double)c->micro_batch * (double)c->seq / c->cp;
    double width = (double)m->vocab / tp + 1.0;
    double f1 = (double)model_fc1_width(m) / tp, h = (double)m->hidden;
    if (f1 > width) width = f1;
    if (h > width) width = h;
    double act = T * width * 8.0 + T * h * 3.0 * F32;
    if (act > GEN_TENSOR_MAX)
        return ms_fail(err, MS_ERR_INVALID, "seq x micro-batch too large: %" PRIu64 " x %"
                       PRIu64 " tokens make tensors beyond the trace format's 1 PiB",
                       c->seq, c->micro_batch);
    double group = (double)model_layer_params(m) + (double)model_embed_params(m) +
                   (double)model_head_params(m);
    if (group * 64.0 > GEN_TENSOR_MAX || (double)model_params(m) * 80.0 > 0x1p62)
        return ms_fail(err, MS_ERR_INVALID, "model '%s' too large to account in bytes",
                       m->name);
    return MS_OK;
}

ms_status gen_validate(const gen_config *cin, ms_error *err)
{
    gen_config c = resolved(cin);
    ms_status st = check_model(&c.model, err);
    if (!st) st = check_ranges(&c, err);
    if (!st) st = check_parallel(&c, err);
    if (!st) st = check_fits(&c, err);
    return st;
}

uint64_t gen_layer_skel_bytes(const gen_config *cin)
{
    gen_config c = resolved(cin);
    gsz z;
    sizes(&c, &z);
    /* input, ln1_out, resid1, ln2_out (SP shards); q, k, v, attn_out, fc1_out, act_out */
    uint64_t el = 4 * z.Ts * z.h + z.T * (2 * z.hq + 2 * z.hkv + z.f1 + z.f);
    uint64_t bytes = el * z.D;
    if (c.save_small) {
        uint64_t stats = c.model.norm == MODEL_NORM_LAYER ? 2 : 1;
        bytes += 2 * z.Ts * stats * F32 + z.T * z.heads * F32;
    }
    return bytes;
}

/* ---- emission context ---- */

enum { G_LN1, G_QKV, G_PROJ, G_LN2, G_FC1, G_FC2, G_MAXP = 6 };

/* A parameter group: one transformer layer, the embedding, or the head. Each has one
 * contiguous gradient buffer (Megatron's grad buffer, per layer) and one optimizer state
 * shard. */
typedef struct ggroup {
    uint64_t param[G_MAXP];
    uint64_t pbytes[G_MAXP];
    const char *pname[G_MAXP];
    int np;
    uint64_t nparams;        /* local (TP-sharded) parameters */
    uint64_t grad, opt;
    int layer;
    const char *prefix;      /* "embed" / "head" / NULL for layers */
} ggroup;

/* Skeletal tensors of one layer in the current iteration. */
typedef struct lstate {
    uint64_t in, ln1, ln1s, q, k, v, ao, lse, r1, ln2, ln2s, fc1, act;
} lstate;

typedef struct gctx {
    const gen_config *c;
    const machine_t *m;
    trace_t *t;
    ms_status st;            /* sticky: once set, emission stops */
    gsz z;
    uint64_t next_tid, next_oid;
    trace_phase phase;
    ggroup *g;               /* [0] embed, [1..L] layers, [L+1] head */
    size_t ng;
    lstate *ls;
    uint64_t tokens, labels;
    uint64_t final_in, final_out;  /* head's saved tensors */
    uint64_t final_stats;
    uint64_t logits;
} gctx;

static ggroup *grp_layer(gctx *x, int l) { return &x->g[l + 1]; }
static ggroup *grp_embed(gctx *x) { return &x->g[0]; }
static ggroup *grp_head(gctx *x) { return &x->g[x->ng - 1]; }

static void tname(char *buf, int layer, const char *what)
{
    if (layer >= 0) snprintf(buf, TRACE_NAME_MAX, "L%d.%s", layer, what);
    else snprintf(buf, TRACE_NAME_MAX, "%s", what);
}

static void append(gctx *x, const trace_rec *r)
{
    if (!x->st) x->st = trace_append(x->t, r);
}

static void mark(gctx *x, trace_markkind k, int64_t v)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_MARK;
    r.u.mark.kind = k;
    r.u.mark.value = v;
    append(x, &r);
}

static uint64_t alloc_t(gctx *x, int layer, const char *what, uint64_t bytes, trace_class cls,
                        int64_t producer)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    trace_tensor *a = &r.u.alloc;
    a->id = x->next_tid++;
    a->bytes = bytes;
    a->cls = cls;
    a->layer = layer;
    a->stream = 0;
    a->tok_scaled = cls == TC_ACT_SKEL || cls == TC_ACT_TRANS || cls == TC_WORKSPACE;
    a->producer = producer;
    tname(a->name, layer, what);
    append(x, &r);
    return a->id;
}

static void free_t(gctx *x, uint64_t id)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = id;
    append(x, &r);
}

static uint64_t new_op(gctx *x) { return x->next_oid++; }

typedef struct opspec {
    trace_opkind kind;
    int layer;
    const char *what;
    double flops;
    uint64_t br, bw;
    double dur_us;
    uint64_t in[12];
    uint32_t nin;
    uint64_t out[12];
    uint32_t nout;
    const uint64_t *ext_out; /* when set, the outputs (n_ext_out of them) instead of out[] */
    uint32_t n_ext_out;
} opspec;

static void emit_op(gctx *x, uint64_t oid, const opspec *o)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    trace_op *p = &r.u.op;
    p->id = oid;
    p->kind = o->kind;
    p->phase = x->phase;
    p->layer = o->layer;
    p->flops = o->flops;
    p->bytes_read = o->br;
    p->bytes_written = o->bw;
    p->dur_us = o->dur_us;
    p->n_in = o->nin;
    p->in = o->in;
    p->n_out = o->ext_out ? o->n_ext_out : o->nout;
    p->out = o->ext_out ? o->ext_out : o->out;
    tname(p->name, o->layer, o->what);
    append(x, &r);
}

static double kern_us(gctx *x, trace_opkind k, double flops, uint64_t bytes)
{
    return x->m ? roof_kernel_us(x->m, &x->c->roof, k, flops, bytes) : -1.0;
}

/* Builds an opspec in one expression. */
#define OPS(...) ((opspec){ __VA_ARGS__ })
#define IN(...) .in = { __VA_ARGS__ }, .nin = (uint32_t)(sizeof((uint64_t[]){ __VA_ARGS__ }) / 8)
#define OUT(...) .out = { __VA_ARGS__ }, .nout = (uint32_t)(sizeof((uint64_t[]){ __VA_ARGS__ }) / 8)

/* Memory-bound op: duration from its kind, FLOPs and bytes. */
static void simple_op(gctx *x, uint64_t oid, opspec o)
{
    o.dur_us = kern_us(x, o.kind, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
}

/* out[M,N] = A[M,K] W[K,N]: 2MNK FLOPs. */
static void gemm_fwd(gctx *x, uint64_t oid, opspec o, uint64_t M, uint64_t N, uint64_t K)
{
    uint64_t D = x->z.D;
    o.kind = TK_GEMM;
    o.flops = 2.0 * (double)M * (double)N * (double)K;
    o.br = (M * K + K * N) * D;
    o.bw = M * N * D;
    o.dur_us = kern_us(x, TK_GEMM, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
}

/* Data gradient dA = dC W^T and weight gradient dW += A^T dC: two GEMMs, 4MNK FLOPs; the
 * weight gradient is accumulated (read and written) in the gradient buffer. */
static void gemm_bwd(gctx *x, uint64_t oid, opspec o, uint64_t M, uint64_t N, uint64_t K)
{
    uint64_t D = x->z.D, GB = x->z.GB;
    double half = 2.0 * (double)M * (double)N * (double)K;
    uint64_t dgrad = (M * N + K * N + M * K) * D;
    uint64_t wgrad = (M * N + M * K) * D + 2 * K * N * GB;
    o.kind = TK_GEMM;
    o.flops = 2.0 * half;
    o.br = (2 * M * N + K * N + M * K) * D + K * N * GB;
    o.bw = M * K * D + K * N * GB;
    o.dur_us = x->m ? kern_us(x, TK_GEMM, half, dgrad) + kern_us(x, TK_GEMM, half, wgrad) : -1.0;
    emit_op(x, oid, &o);
}

static void comm_op(gctx *x, uint64_t oid, opspec o, roof_coll kind, uint64_t bytes, int ranks,
                    int span)
{
    uint64_t p = (uint64_t)ranks;
    o.kind = TK_COMM;
    o.flops = 0.0;
    switch (kind) {
    case ROOF_ALL_GATHER: o.br = bytes / p; o.bw = bytes; break;
    case ROOF_REDUCE_SCATTER: o.br = bytes; o.bw = bytes / p; break;
    case ROOF_ALL_REDUCE: o.br = bytes; o.bw = bytes; break;
    case ROOF_RING_EXCHANGE: o.br = o.bw = bytes * (p - 1); break;
    }
    o.dur_us = x->m ? roof_coll_us(x->m, kind, bytes, ranks, span) : -1.0;
    emit_op(x, oid, &o);
}

/* Sequence-parallel all-gather of a [Ts, h] shard into a transient [T, h] tensor; with tp = 1
 * there is nothing to gather and the shard itself is returned. */
static uint64_t tp_gather(gctx *x, int layer, const char *opname, const char *tname_,
                          uint64_t shard)
{
    if (x->z.tp == 1) return shard;
    uint64_t bytes = x->z.T * x->z.h * x->z.D;
    uint64_t oid = new_op(x);
    uint64_t full = alloc_t(x, layer, tname_, bytes, TC_ACT_TRANS, (int64_t)oid);
    comm_op(x, oid, OPS(.layer = layer, .what = opname, IN(shard), OUT(full)),
            ROOF_ALL_GATHER, bytes, x->z.tp, x->z.tp);
    return full;
}

/* Reduce-scatter of a [T, h] partial sum into a [Ts, h] shard (owned by `owner`, class cls);
 * frees the partial. With tp = 1 the input is returned unchanged. */
static uint64_t tp_scatter(gctx *x, int layer, const char *opname, int owner, const char *tn,
                           uint64_t full, trace_class cls)
{
    if (x->z.tp == 1) return full;
    uint64_t bytes = x->z.T * x->z.h * x->z.D;
    uint64_t oid = new_op(x);
    uint64_t shard = alloc_t(x, owner, tn, x->z.Ts * x->z.h * x->z.D, cls, (int64_t)oid);
    comm_op(x, oid, OPS(.layer = layer, .what = opname, IN(full), OUT(shard)),
            ROOF_REDUCE_SCATTER, bytes, x->z.tp, x->z.tp);
    free_t(x, full);
    return shard;
}

/* ---- setup: parameters, gradient buffers, optimizer state shards ---- */

static void grp_add(ggroup *g, const char *name, uint64_t nparams)
{
    if (!nparams) return;
    g->pname[g->np] = name;
    g->pbytes[g->np] = nparams; /* parameters for now; bytes once dtype is applied */
    g->np++;
    g->nparams += nparams;
}

static void plan_groups(gctx *x)
{
    const model_t *m = &x->c->model;
    const gsz *z = &x->z;
    int bias = m->has_bias;
    uint64_t qkvw = z->hq + 2 * z->hkv;
    ggroup *e = grp_embed(x), *hd = grp_head(x);
    e->layer = -1;
    e->prefix = "embed";
    grp_add(e, "embed.w", z->V * z->h);
    grp_add(e, "embed.pos", m->pos_rows * z->h);
    grp_add(e, "embed.type", m->type_vocab * z->h);
    if (m->is_encoder) grp_add(e, "embed.norm", z->normp);
    for (int l = 0; l < (int)m->layers; l++) {
        ggroup *g = grp_layer(x, l);
        g->layer = l;
        /* Order fixed by the G_* indices. */
        grp_add(g, "ln1.w", z->normp);
        grp_add(g, "qkv.w", z->h * qkvw + (bias ? qkvw : 0));
        grp_add(g, "proj.w", z->hq * z->h + (bias ? z->h : 0));
        grp_add(g, "ln2.w", z->normp);
        grp_add(g, "fc1.w", z->h * z->f1 + (bias ? z->f1 : 0));
        grp_add(g, "fc2.w", z->f * z->h + (bias ? z->h : 0));
    }
    hd->layer = -1;
    hd->prefix = "head";
    if (m->is_encoder) grp_add(hd, "pooler.w", z->h * z->h + z->h);
    else grp_add(hd, "final_norm.w", z->normp);
    if (!m->tied_embeddings) grp_add(hd, "head.w", z->V * z->h);
}

static void setup(gctx *x)
{
    char nm[TRACE_NAME_MAX];
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        for (int j = 0; j < g->np; j++) {
            g->pbytes[j] *= x->z.D;
            g->param[j] = alloc_t(x, g->layer, g->pname[j], g->pbytes[j], TC_PARAM, -1);
        }
    }
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        snprintf(nm, sizeof nm, "%s%sgrad", g->prefix ? g->prefix : "", g->prefix ? "." : "");
        g->grad = alloc_t(x, g->layer, nm, g->nparams * x->z.GB, TC_GRAD, -1);
    }
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        uint64_t shard = (g->nparams + (uint64_t)x->z.dp - 1) / (uint64_t)x->z.dp;
        if (!shard || !x->z.OB) continue;
        snprintf(nm, sizeof nm, "%s%sopt", g->prefix ? g->prefix : "", g->prefix ? "." : "");
        g->opt = alloc_t(x, g->layer, nm, shard * x->z.OB, TC_OPTSTATE, -1);
    }
}

/* The LM head weight: the embedding when tied. */
static uint64_t head_weight(gctx *x)
{
    return x->c->model.tied_embeddings ? grp_embed(x)->param[0] : grp_head(x)->param[grp_head(x)->np - 1];
}

static uint64_t head_weight_grad(gctx *x)
{
    return x->c->model.tied_embeddings ? grp_embed(x)->grad : grp_head(x)->grad;
}

/* ---- forward ---- */

static void zero_grads(gctx *x)
{
    /* Megatron zeroes its grad buffers at the start of every step: one memset-like op
     * writing every gradient buffer. */
    uint64_t oid = new_op(x), bytes = 0;
    uint64_t *ids = malloc(x->ng * sizeof *ids);
    if (!ids) {
        x->st = x->st ? x->st : MS_ERR_NOMEM;
        return;
    }
    for (size_t i = 0; i < x->ng; i++) {
        ids[i] = x->g[i].grad;
        bytes += x->g[i].nparams * x->z.GB;
    }
    simple_op(x, oid, OPS(.kind = TK_ELEM, .layer = -1, .what = "zero_grad", .bw = bytes,
                          .ext_out = ids, .n_ext_out = (uint32_t)x->ng));
    free(ids);
}

static void embed_fwd(gctx *x)
{
    const gsz *z = &x->z;
    ggroup *e = grp_embed(x);
    x->tokens = alloc_t(x, -1, "tokens", z->T * TOKEN_ID_BYTES, TC_ACT_SKEL, -1);
    x->labels = alloc_t(x, -1, "labels", z->T * TOKEN_ID_BYTES, TC_ACT_SKEL, -1);
    uint64_t oid = new_op(x), out;
    /* Vocab-parallel embedding: each rank looks up its vocabulary shard; with SP the partial
     * sums are reduce-scattered into the first layer's input. */
    if (z->tp > 1) out = alloc_t(x, -1, "embed_partial", z->T * z->h * z->D, TC_ACT_TRANS, (int64_t)oid);
    else out = alloc_t(x, 0, "input", z->Ts * z->h * z->D, TC_ACT_SKEL, (int64_t)oid);
    opspec o = OPS(.kind = TK_EMBED, .layer = -1, .what = "embed", IN(x->tokens), OUT(out));
    for (int j = 0; j < e->np; j++) o.in[o.nin++] = e->param[j];
    o.flops = (double)(z->T * z->h) * (double)(e->np - 1 > 0 ? e->np - 1 : 0);
    o.br = z->T * TOKEN_ID_BYTES + z->T * z->h * z->D * (uint64_t)e->np;
    o.bw = z->T * z->h * z->D;
    simple_op(x, oid, o);
    x->ls[0].in = tp_scatter(x, -1, "embed.rs", 0, "input", out, TC_ACT_SKEL);
}

/* A norm over a [Ts, h] shard; the output (and with save_small its statistics) is skeletal. */
static uint64_t norm_fwd(gctx *x, int l, const char *op, const char *outn, uint64_t in,
                         uint64_t w, uint64_t *stats)
{
    const gsz *z = &x->z;
    uint64_t oid = new_op(x), n = z->Ts * z->h;
    uint64_t out = alloc_t(x, l, outn, n * z->D, TC_ACT_SKEL, (int64_t)oid);
    opspec o = OPS(.kind = TK_NORM, .layer = l, .what = op, IN(in, w), OUT(out));
    *stats = 0;
    if (x->c->save_small) {
        uint64_t per = x->c->model.norm == MODEL_NORM_LAYER ? 2 : 1; /* mean, rstd */
        char sn[TRACE_NAME_MAX];
        snprintf(sn, sizeof sn, "%s_stats", op);
        *stats = alloc_t(x, l, sn, z->Ts * per * F32, TC_ACT_SKEL, (int64_t)oid);
        o.out[o.nout++] = *stats;
    }
    o.flops = NORM_FWD_FLOPS * (double)n;
    o.br = n * z->D + z->normp * z->D;
    o.bw = n * z->D;
    simple_op(x, oid, o);
    return out;
}

/* Causal flash attention on this rank: 4*b*s^2*h FLOPs for the full square, halved by the
 * causal mask, divided over tp (heads) and cp (queries, load-balanced). */
static double attn_fwd_flops(const gsz *z)
{
    double full = 4.0 * (double)z->b * (double)z->s * (double)z->s * (double)z->hq /
                  (double)z->cp;
    return z->causal ? full / 2.0 : full;
}

/* Context parallelism: the ring exchange of K/V chunks (cp-1 steps) as one comm op whose
 * name ends in ".ovl": the real system overlaps it with the attention kernel; the simulator
 * serializes it on the compute stream unless a policy overlaps it. Receives into two
 * double-buffered chunk buffers, returned in r[2]. */
static void cp_ring(gctx *x, int l, const char *op, uint64_t chunk, uint64_t k, uint64_t v,
                    uint64_t r[2])
{
    uint64_t oid = new_op(x);
    r[0] = alloc_t(x, l, "cp_recv0", chunk, TC_ACT_TRANS, (int64_t)oid);
    r[1] = alloc_t(x, l, "cp_recv1", chunk, TC_ACT_TRANS, (int64_t)oid);
    comm_op(x, oid, OPS(.layer = l, .what = op, IN(k, v), OUT(r[0], r[1])), ROOF_RING_EXCHANGE,
            chunk, x->z.cp, x->z.tp * x->z.cp);
}

static void attn_fwd(gctx *x, int l, lstate *s)
{
    const gsz *z = &x->z;
    uint64_t r[2] = { 0, 0 }, chunk = 2 * z->T * z->hkv * z->D;
    if (z->cp > 1) cp_ring(x, l, "cp_ring.ovl", chunk, s->k, s->v, r);
    uint64_t oid = new_op(x), ws = 0;
    s->ao = alloc_t(x, l, "attn_out", z->T * z->hq * z->D, TC_ACT_SKEL, (int64_t)oid);
    opspec o = OPS(.kind = TK_ATTN, .layer = l, .what = "attn", IN(s->q, s->k, s->v),
                   OUT(s->ao));
    s->lse = 0;
    if (x->c->save_small) {
        s->lse = alloc_t(x, l, "attn_lse", z->T * z->heads * F32, TC_ACT_SKEL, (int64_t)oid);
        o.out[o.nout++] = s->lse;
    }
    if (z->cp > 1) {
        /* Ring attention merges cp partial results: an fp32 output and LSE accumulator. */
        ws = alloc_t(x, l, "attn_ws", z->T * (z->hq + z->heads) * F32, TC_WORKSPACE,
                     (int64_t)oid);
        o.in[o.nin++] = r[0];
        o.in[o.nin++] = r[1];
    }
    o.flops = attn_fwd_flops(z);
    o.br = z->T * (z->hq + 2 * z->hkv) * z->D + (uint64_t)(z->cp - 1) * chunk;
    o.bw = z->T * z->hq * z->D;
    o.dur_us = kern_us(x, TK_ATTN, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
    if (ws) free_t(x, ws);
    if (z->cp > 1) {
        free_t(x, r[0]);
        free_t(x, r[1]);
    }
}

/* Row-parallel GEMM [T, K] x [K, h] then the SP reduce-scatter; returns the [Ts, h] shard. */
static uint64_t row_parallel(gctx *x, int l, const char *op, const char *rsop, const char *outn,
                             uint64_t in, uint64_t w, uint64_t K)
{
    const gsz *z = &x->z;
    char pn[TRACE_NAME_MAX];
    snprintf(pn, sizeof pn, "%s%s", outn, z->tp > 1 ? "_partial" : "");
    uint64_t oid = new_op(x);
    uint64_t out = alloc_t(x, l, pn, z->T * z->h * z->D, TC_ACT_TRANS, (int64_t)oid);
    gemm_fwd(x, oid, OPS(.layer = l, .what = op, IN(in, w), OUT(out)), z->T, z->h, K);
    return tp_scatter(x, l, rsop, l, outn, out, TC_ACT_TRANS);
}

/* Residual add of two [Ts, h] shards into a skeletal tensor owned by `owner`. */
static uint64_t resid_add(gctx *x, int l, const char *op, int owner, const char *outn,
                          uint64_t a, uint64_t b)
{
    const gsz *z = &x->z;
    uint64_t oid = new_op(x), n = z->Ts * z->h;
    uint64_t out = alloc_t(x, owner, outn, n * z->D, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, OPS(.kind = TK_ELEM, .layer = l, .what = op, IN(a, b), OUT(out),
                          .flops = (double)n, .br = 2 * n * z->D, .bw = n * z->D));
    return out;
}

static void layer_fwd(gctx *x, int l)
{
    const gsz *z = &x->z;
    const ggroup *g = grp_layer(x, l);
    lstate *s = &x->ls[l];
    mark(x, TM_LAYER, l);
    /* attention block */
    s->ln1 = norm_fwd(x, l, "ln1", "ln1_out", s->in, g->param[G_LN1], &s->ln1s);
    uint64_t a1 = tp_gather(x, l, "ln1.ag", "ln1_full", s->ln1);
    uint64_t oid = new_op(x);
    s->q = alloc_t(x, l, "q", z->T * z->hq * z->D, TC_ACT_SKEL, (int64_t)oid);
    s->k = alloc_t(x, l, "k", z->T * z->hkv * z->D, TC_ACT_SKEL, (int64_t)oid);
    s->v = alloc_t(x, l, "v", z->T * z->hkv * z->D, TC_ACT_SKEL, (int64_t)oid);
    gemm_fwd(x, oid, OPS(.layer = l, .what = "qkv", IN(a1, g->param[G_QKV]), OUT(s->q, s->k, s->v)),
             z->T, z->hq + 2 * z->hkv, z->h);
    if (z->tp > 1) free_t(x, a1);
    attn_fwd(x, l, s);
    uint64_t po = row_parallel(x, l, "proj", "proj.rs", "proj_out", s->ao, g->param[G_PROJ], z->hq);
    s->r1 = resid_add(x, l, "add1", l, "resid1", s->in, po);
    free_t(x, po);
    /* MLP block */
    s->ln2 = norm_fwd(x, l, "ln2", "ln2_out", s->r1, g->param[G_LN2], &s->ln2s);
    uint64_t a2 = tp_gather(x, l, "ln2.ag", "ln2_full", s->ln2);
    oid = new_op(x);
    s->fc1 = alloc_t(x, l, "fc1_out", z->T * z->f1 * z->D, TC_ACT_SKEL, (int64_t)oid);
    gemm_fwd(x, oid, OPS(.layer = l, .what = "fc1", IN(a2, g->param[G_FC1]), OUT(s->fc1)),
             z->T, z->f1, z->h);
    if (z->tp > 1) free_t(x, a2);
    oid = new_op(x);
    s->act = alloc_t(x, l, "act_out", z->T * z->f * z->D, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, OPS(.kind = TK_ACT, .layer = l, .what = "act", IN(s->fc1), OUT(s->act),
                          .flops = ACT_FWD_FLOPS * (double)(z->T * z->f),
                          .br = z->T * z->f1 * z->D, .bw = z->T * z->f * z->D));
    uint64_t fo = row_parallel(x, l, "fc2", "fc2.rs", "fc2_out", s->act, g->param[G_FC2], z->f);
    int last = l + 1 == (int)x->c->model.layers;
    uint64_t out = resid_add(x, l, "add2", last ? -1 : l + 1, last ? "final_in" : "input",
                             s->r1, fo);
    free_t(x, fo);
    if (last) x->final_in = out;
    else x->ls[l + 1].in = out;
}

static void head_fwd(gctx *x)
{
    const gsz *z = &x->z;
    mark(x, TM_LAYER, -1);
    uint64_t stats = 0, fn = x->final_in;
    /* Encoders (post-norm BERT layout) have no final norm: the head reads the last output. */
    if (!x->c->model.is_encoder)
        fn = norm_fwd(x, -1, "final_norm", "final_norm_out", x->final_in, grp_head(x)->param[0],
                      &stats);
    x->final_stats = stats;
    x->final_out = fn;
    uint64_t a = tp_gather(x, -1, "final_norm.ag", "final_norm_full", fn);
    uint64_t oid = new_op(x);
    /* Megatron's vocab-parallel cross entropy keeps the logits (softmax in place) for the
     * backward: a skeletal tensor of the head. */
    x->logits = alloc_t(x, -1, "logits", z->T * z->V * z->D, TC_ACT_SKEL, (int64_t)oid);
    gemm_fwd(x, oid, OPS(.layer = -1, .what = "lm_head", IN(a, head_weight(x)), OUT(x->logits)),
             z->T, z->V, z->h);
    if (z->tp > 1) free_t(x, a);
    oid = new_op(x);
    uint64_t lt = alloc_t(x, -1, "loss_tok", z->T * F32, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, OPS(.kind = TK_LOSS, .layer = -1, .what = "loss", IN(x->logits, x->labels),
                          OUT(lt, x->logits), .flops = LOSS_FWD_FLOPS * (double)(z->T * z->V),
                          .br = z->T * z->V * z->D + z->T * TOKEN_ID_BYTES,
                          .bw = z->T * z->V * z->D + z->T * F32));
    if (z->tp > 1) {
        /* max, sum of exp and target logit are all-reduced across the vocab shards. */
        oid = new_op(x);
        comm_op(x, oid, OPS(.layer = -1, .what = "loss.ar", IN(lt), OUT(lt)), ROOF_ALL_REDUCE,
                3 * z->T * F32, z->tp, z->tp);
    }
    free_t(x, lt);
}

/* ---- backward ---- */

static uint64_t head_bwd(gctx *x)
{
    const gsz *z = &x->z;
    mark(x, TM_LAYER, -1);
    uint64_t oid = new_op(x);
    /* The logits buffer becomes the logits gradient in place. */
    simple_op(x, oid, OPS(.kind = TK_LOSS, .layer = -1, .what = "loss.bwd",
                          IN(x->logits, x->labels), OUT(x->logits),
                          .flops = LOSS_BWD_FLOPS * (double)(z->T * z->V),
                          .br = z->T * z->V * z->D + z->T * TOKEN_ID_BYTES,
                          .bw = z->T * z->V * z->D));
    free_t(x, x->labels);
    uint64_t a = tp_gather(x, -1, "final_norm.ag.bwd", "final_norm_full.bwd", x->final_out);
    oid = new_op(x);
    uint64_t dfull = alloc_t(x, -1, z->tp > 1 ? "d_final_norm_full" : "d_final_norm",
                             z->T * z->h * z->D, TC_ACT_TRANS, (int64_t)oid);
    gemm_bwd(x, oid, OPS(.layer = -1, .what = "lm_head.bwd",
                         IN(x->logits, head_weight(x), a), OUT(dfull, head_weight_grad(x))),
             z->T, z->V, z->h);
    free_t(x, x->logits);
    if (z->tp > 1) free_t(x, a);
    uint64_t dfn = tp_scatter(x, -1, "lm_head.rs", -1, "d_final_norm", dfull, TC_ACT_TRANS);
    if (x->c->model.is_encoder) {
        free_t(x, x->final_in); /* == final_out */
        return dfn;
    }
    oid = new_op(x);
    uint64_t n = z->Ts * z->h;
    ggroup *hg = grp_head(x);
    uint64_t dx = alloc_t(x, -1, "d_final_in", n * z->D, TC_ACT_TRANS, (int64_t)oid);
    opspec o = OPS(.kind = TK_NORM, .layer = -1, .what = "final_norm.bwd",
                   IN(dfn, x->final_in, hg->param[0]), OUT(dx, hg->grad),
                   .flops = NORM_BWD_FLOPS * (double)n, .br = 2 * n * z->D + z->normp * z->D,
                   .bw = n * z->D + z->normp * z->GB);
    if (x->final_stats) o.in[o.nin++] = x->final_stats;
    simple_op(x, oid, o);
    free_t(x, dfn);
    if (x->final_stats) free_t(x, x->final_stats);
    free_t(x, x->final_out);
    free_t(x, x->final_in);
    return dx;
}

/* Norm backward plus the residual branch: dx = norm_bwd(d_out) + d_resid. */
static uint64_t norm_bwd(gctx *x, int l, const char *op, const char *outn, uint64_t dout,
                         uint64_t saved_in, uint64_t w, uint64_t stats, uint64_t dres,
                         uint64_t grad)
{
    const gsz *z = &x->z;
    uint64_t oid = new_op(x), n = z->Ts * z->h;
    uint64_t dx = alloc_t(x, l, outn, n * z->D, TC_ACT_TRANS, (int64_t)oid);
    opspec o = OPS(.kind = TK_NORM, .layer = l, .what = op, IN(dout, saved_in, w, dres),
                   OUT(dx, grad), .flops = NORM_BWD_FLOPS * (double)n,
                   .br = 3 * n * z->D + z->normp * z->D, .bw = n * z->D + z->normp * z->GB);
    if (stats) o.in[o.nin++] = stats;
    simple_op(x, oid, o);
    return dx;
}

static void attn_bwd(gctx *x, int l, lstate *s, uint64_t dao, uint64_t *dq, uint64_t *dk,
                     uint64_t *dv)
{
    const gsz *z = &x->z;
    uint64_t r[2] = { 0, 0 }, kv = 2 * z->T * z->hkv * z->D;
    /* The backward ring carries K/V and the partial dK/dV: twice the forward chunk. */
    if (z->cp > 1) cp_ring(x, l, "cp_ring_bwd.ovl", 2 * kv, s->k, s->v, r);
    uint64_t oid = new_op(x);
    *dq = alloc_t(x, l, "dq", z->T * z->hq * z->D, TC_ACT_TRANS, (int64_t)oid);
    *dk = alloc_t(x, l, "dk", z->T * z->hkv * z->D, TC_ACT_TRANS, (int64_t)oid);
    *dv = alloc_t(x, l, "dv", z->T * z->hkv * z->D, TC_ACT_TRANS, (int64_t)oid);
    /* FlashAttention-2 accumulates dq in fp32; ring attention also dK/dV. */
    uint64_t wsb = z->T * z->hq * F32 + (z->cp > 1 ? 2 * z->T * z->hkv * F32 : 0);
    uint64_t ws = alloc_t(x, l, "attn_bwd_ws", wsb, TC_WORKSPACE, (int64_t)oid);
    opspec o = OPS(.kind = TK_ATTN, .layer = l, .what = "attn.bwd",
                   IN(dao, s->q, s->k, s->v, s->ao), OUT(*dq, *dk, *dv));
    if (s->lse) o.in[o.nin++] = s->lse;
    if (z->cp > 1) {
        o.in[o.nin++] = r[0];
        o.in[o.nin++] = r[1];
    }
    o.flops = x->c->attn_bwd_factor * attn_fwd_flops(z);
    o.br = z->T * (3 * z->hq + 2 * z->hkv) * z->D + 2 * wsb + (uint64_t)(z->cp - 1) * 2 * kv;
    o.bw = z->T * (z->hq + 2 * z->hkv) * z->D;
    o.dur_us = kern_us(x, TK_ATTN, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
    free_t(x, ws);
    if (z->cp > 1) {
        free_t(x, r[0]);
        free_t(x, r[1]);
    }
    free_t(x, dao);
    free_t(x, s->ao);
    if (s->lse) free_t(x, s->lse);
    free_t(x, s->q);
    free_t(x, s->k);
    free_t(x, s->v);
}

/* Column-parallel GEMM backward whose input was the gathered norm output: re-gather it (SP
 * keeps only the shard), two GEMMs, reduce-scatter the input gradient. Frees dout(s), the
 * re-gathered copy and the saved shard. Returns the [Ts, h] input-gradient shard. */
static uint64_t col_parallel_bwd(gctx *x, int l, const char *base, uint64_t saved_shard,
                                 const uint64_t *dout, int ndout, uint64_t w, uint64_t grad,
                                 uint64_t N)
{
    const gsz *z = &x->z;
    char n1[TRACE_NAME_MAX], n2[TRACE_NAME_MAX], n3[TRACE_NAME_MAX], n4[TRACE_NAME_MAX];
    const char *src = strcmp(base, "qkv") == 0 ? "ln1" : "ln2";
    snprintf(n1, sizeof n1, "%s.ag.bwd", src);
    snprintf(n2, sizeof n2, "%s_full.bwd", src);
    uint64_t a = tp_gather(x, l, n1, n2, saved_shard);
    snprintf(n3, sizeof n3, "%s.bwd", base);
    snprintf(n4, sizeof n4, "d_%s_out%s", src, z->tp > 1 ? "_full" : "");
    uint64_t oid = new_op(x);
    uint64_t din = alloc_t(x, l, n4, z->T * z->h * z->D, TC_ACT_TRANS, (int64_t)oid);
    opspec o = OPS(.layer = l, .what = n3, OUT(din, grad));
    for (int i = 0; i < ndout; i++) o.in[o.nin++] = dout[i];
    o.in[o.nin++] = w;
    o.in[o.nin++] = a;
    gemm_bwd(x, oid, o, z->T, N, z->h);
    for (int i = 0; i < ndout; i++) free_t(x, dout[i]);
    if (z->tp > 1) free_t(x, a);
    free_t(x, saved_shard);
    snprintf(n1, sizeof n1, "%s.rs.bwd", base);
    snprintf(n4, sizeof n4, "d_%s_out", src);
    return tp_scatter(x, l, n1, l, n4, din, TC_ACT_TRANS);
}

/* Row-parallel GEMM backward: gather the output gradient, dgrad into a [T, K] tensor, wgrad
 * with the saved input. Frees the gathered copy (not dout: the residual branch still needs
 * it) and, if free_saved, the saved input. */
static uint64_t row_parallel_bwd(gctx *x, int l, const char *op, const char *agop,
                                 const char *full, const char *dname, uint64_t dout,
                                 uint64_t saved, uint64_t w, uint64_t grad, uint64_t K,
                                 int free_saved)
{
    const gsz *z = &x->z;
    uint64_t d = tp_gather(x, l, agop, full, dout);
    uint64_t oid = new_op(x);
    uint64_t din = alloc_t(x, l, dname, z->T * K * z->D, TC_ACT_TRANS, (int64_t)oid);
    gemm_bwd(x, oid, OPS(.layer = l, .what = op, IN(d, w, saved), OUT(din, grad)), z->T, z->h, K);
    if (z->tp > 1) free_t(x, d);
    if (free_saved) free_t(x, saved);
    return din;
}

static uint64_t layer_bwd(gctx *x, int l, uint64_t dx)
{
    const gsz *z = &x->z;
    const ggroup *g = grp_layer(x, l);
    lstate *s = &x->ls[l];
    mark(x, TM_LAYER, l);
    /* MLP block */
    uint64_t dact = row_parallel_bwd(x, l, "fc2.bwd", "fc2.ag.bwd", "d_fc2_out_full",
                                     "d_act", dx, s->act,
                                     g->param[G_FC2], g->grad, z->f, 1);
    uint64_t oid = new_op(x);
    uint64_t dfc1 = alloc_t(x, l, "d_fc1", z->T * z->f1 * z->D, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, OPS(.kind = TK_ACT, .layer = l, .what = "act.bwd", IN(dact, s->fc1),
                          OUT(dfc1), .flops = ACT_BWD_FLOPS * (double)(z->T * z->f),
                          .br = z->T * (z->f + z->f1) * z->D, .bw = z->T * z->f1 * z->D));
    free_t(x, dact);
    free_t(x, s->fc1);
    uint64_t dln2 = col_parallel_bwd(x, l, "fc1", s->ln2, &dfc1, 1, g->param[G_FC1], g->grad,
                                     z->f1);
    uint64_t dr1 = norm_bwd(x, l, "ln2.bwd", "d_resid1", dln2, s->r1, g->param[G_LN2], s->ln2s,
                            dx, g->grad);
    free_t(x, dln2);
    free_t(x, dx);
    free_t(x, s->r1);
    if (s->ln2s) free_t(x, s->ln2s);
    /* attention block */
    uint64_t dao = row_parallel_bwd(x, l, "proj.bwd", "proj.ag.bwd", "d_proj_out_full",
                                    "d_attn_out", dr1, s->ao,
                                    g->param[G_PROJ], g->grad, z->hq,
                                    0 /* attn_out: still needed by attn.bwd */);
    uint64_t dqkv[3];
    attn_bwd(x, l, s, dao, &dqkv[0], &dqkv[1], &dqkv[2]);
    uint64_t dln1 = col_parallel_bwd(x, l, "qkv", s->ln1, dqkv, 3, g->param[G_QKV], g->grad,
                                     z->hq + 2 * z->hkv);
    uint64_t din = norm_bwd(x, l, "ln1.bwd", "d_input", dln1, s->in, g->param[G_LN1], s->ln1s,
                            dr1, g->grad);
    free_t(x, dln1);
    free_t(x, dr1);
    free_t(x, s->in);
    if (s->ln1s) free_t(x, s->ln1s);
    return din;
}

static void embed_bwd(gctx *x, uint64_t dx0)
{
    const gsz *z = &x->z;
    ggroup *e = grp_embed(x);
    mark(x, TM_LAYER, -1);
    uint64_t d = tp_gather(x, -1, "embed.ag.bwd", "d_embed_full", dx0);
    uint64_t oid = new_op(x);
    simple_op(x, oid, OPS(.kind = TK_EMBED, .layer = -1, .what = "embed.bwd", IN(d, x->tokens),
                          OUT(e->grad), .flops = (double)(z->T * z->h),
                          .br = z->T * z->h * z->D + z->T * TOKEN_ID_BYTES,
                          .bw = z->T * z->h * z->GB));
    if (z->tp > 1) free_t(x, d);
    free_t(x, dx0);
    free_t(x, x->tokens);
}

/* ZeRO-1 / Megatron distributed optimizer: gradients are reduce-scattered over dp at the end
 * of the backward (Megatron overlaps this per bucket; here it follows the last layer). */
static void dp_reduce(gctx *x)
{
    if (x->z.dp == 1) return;
    int span = x->z.tp * x->z.cp * x->z.dp;
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        char nm[TRACE_NAME_MAX];
        snprintf(nm, sizeof nm, "%s.dp_rs", g->prefix ? g->prefix : "grad");
        uint64_t oid = new_op(x);
        comm_op(x, oid, OPS(.layer = g->layer, .what = nm, IN(g->grad), OUT(g->grad)),
                ROOF_REDUCE_SCATTER, g->nparams * x->z.GB, x->z.dp, span);
    }
}

/* ---- optimizer ---- */

static void optimizer(gctx *x)
{
    const gsz *z = &x->z;
    int span = z->tp * z->cp * z->dp;
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        uint64_t shard = (g->nparams + (uint64_t)z->dp - 1) / (uint64_t)z->dp;
        char nm[TRACE_NAME_MAX];
        snprintf(nm, sizeof nm, "%s%soptim", g->prefix ? g->prefix : "", g->prefix ? "." : "");
        uint64_t oid = new_op(x);
        opspec o = OPS(.kind = TK_OPTIM, .layer = g->layer, .what = nm, IN(g->grad));
        if (g->opt) {
            o.in[o.nin++] = g->opt;
            o.out[o.nout++] = g->opt;
        }
        for (int j = 0; j < g->np; j++) {
            o.in[o.nin++] = g->param[j];
            o.out[o.nout++] = g->param[j];
        }
        o.flops = ADAM_FLOPS * (double)shard;
        o.br = shard * (z->GB + z->OB + z->D);
        o.bw = shard * (z->OB + z->D);
        simple_op(x, oid, o);
        if (z->dp > 1) {
            /* The updated parameter shards are all-gathered back to every DP rank. */
            snprintf(nm, sizeof nm, "%s.dp_ag", g->prefix ? g->prefix : "param");
            uint64_t bytes = g->nparams * z->D;
            oid = new_op(x);
            opspec c = OPS(.layer = g->layer, .what = nm);
            for (int j = 0; j < g->np; j++) {
                c.in[c.nin++] = g->param[j];
                c.out[c.nout++] = g->param[j];
            }
            comm_op(x, oid, c, ROOF_ALL_GATHER, bytes, z->dp, span);
        }
    }
}

/* ---- driver ---- */

static void iteration(gctx *x, int it)
{
    int L = (int)x->c->model.layers;
    mark(x, TM_ITER, it);
    x->phase = TP_FWD;
    mark(x, TM_PHASE, TP_FWD);
    mark(x, TM_LAYER, -1);
    zero_grads(x);
    embed_fwd(x);
    for (int l = 0; l < L && !x->st; l++) layer_fwd(x, l);
    head_fwd(x);
    x->phase = TP_BWD;
    mark(x, TM_PHASE, TP_BWD);
    uint64_t dx = head_bwd(x);
    for (int l = L - 1; l >= 0 && !x->st; l--) dx = layer_bwd(x, l, dx);
    embed_bwd(x, dx);
    dp_reduce(x);
    x->phase = TP_OPT;
    mark(x, TM_PHASE, TP_OPT);
    optimizer(x);
}

static void set_meta_u64(gctx *x, const char *k, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    if (!x->st) x->st = trace_set_meta(x->t, k, buf);
}

static void set_meta_str(gctx *x, const char *k, const char *v)
{
    if (!x->st) x->st = trace_set_meta(x->t, k, v);
}

static void meta(gctx *x, const machine_t *m)
{
    const gen_config *c = x->c;
    const model_t *md = &c->model;
    set_meta_str(x, "model", md->name);
    set_meta_u64(x, "seq", c->seq);
    set_meta_u64(x, "batch", c->micro_batch);
    set_meta_u64(x, "tp", (uint64_t)c->tp);
    set_meta_u64(x, "cp", (uint64_t)c->cp);
    set_meta_u64(x, "dp", (uint64_t)c->dp);
    set_meta_u64(x, "layers", md->layers);
    set_meta_u64(x, "hidden", md->hidden);
    set_meta_u64(x, "heads", md->heads);
    set_meta_u64(x, "kv_heads", md->kv_heads);
    set_meta_u64(x, "ffn", md->ffn_hidden);
    set_meta_u64(x, "vocab", md->vocab);
    set_meta_u64(x, "params", model_params(md));
    set_meta_u64(x, "dtype_bytes", (uint64_t)c->dtype_bytes);
    set_meta_u64(x, "grad_bytes", x->z.GB);
    set_meta_u64(x, "iterations", (uint64_t)c->iterations);
    set_meta_u64(x, "causal", (uint64_t)x->z.causal);
    set_meta_str(x, "machine", m && m->name[0] ? m->name : "none");
    set_meta_str(x, "generator", GEN_VERSION);
}

ms_status gen_trace(const gen_config *cin, const machine_t *m, trace_t **out, ms_error *err)
{
    *out = NULL;
    ms_status st = gen_validate(cin, err);
    if (st) return st;
    gen_config c = resolved(cin);
    gctx x;
    memset(&x, 0, sizeof x);
    x.c = &c;
    x.m = m;
    x.next_tid = x.next_oid = 1;
    sizes(&c, &x.z);
    x.ng = (size_t)c.model.layers + 2;
    x.g = calloc(x.ng, sizeof *x.g);
    x.ls = calloc((size_t)c.model.layers, sizeof *x.ls);
    x.t = trace_new();
    if (!x.g || !x.ls || !x.t) x.st = MS_ERR_NOMEM;
    if (!x.st) {
        meta(&x, m);
        plan_groups(&x);
        setup(&x);
        for (int it = 0; it < c.iterations && !x.st; it++) iteration(&x, it);
    }
    free(x.g);
    free(x.ls);
    if (x.st) {
        trace_free(x.t);
        return ms_fail(err, x.st, "generating the %s trace: %s", c.model.name,
                       ms_status_str(x.st));
    }
    *out = x.t;
    return MS_OK;
}

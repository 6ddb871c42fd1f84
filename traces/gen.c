/* gen.c — the workload-trace generator: one rank's Megatron-style training iterations (TP
 * with sequence parallelism, CP ring attention, DP with a ZeRO-1 sharded optimizer or ZeRO-3
 * sharded parameters) as an in-memory trace, optionally as LoRA fine-tuning and with the
 * optimizer offloaded to the host (ZeRO-Offload); with framework megatron, what Megatron-LM
 * ccfeda47cb + TransformerEngine 1.3 allocate (the mg_* functions, each naming its source).
 * Used by `memsim trace gen`, planners' tests and experiments. The emitted program, tensor by
 * tensor, and every FLOP and byte formula are in docs/GENERATOR.md; comments here say where
 * the model deviates from the real frameworks. */
#include "traces/gen.h"
#include "traces/gen_hf.h"
#include "traces/jobview.h"
#include "traces/trace_shape.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
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
#define HOST_GRAD_BYTES 4    /* ZeRO-Offload keeps the host gradient partition in fp32 */
#define ROPE_FLOPS 3.0       /* per element: two products and a sum (apex's fused RoPE) */
#define ROUTE_FLOPS 8.0      /* per router logit: softmax (max, sub, exp, sum, div) and top-k */
/* Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (128, its
 * default) x tp (megatron/training/tokenizer/tokenizer.py: _vocab_size_with_padding). */
#define MG_VOCAB_DIVISOR 128
#define MG_MAX_CP 16         /* the ring's per-step buffers are listed per op */
#define MG_CP_STREAM 1       /* trace stream of TE's cp_stream (odd ring steps) */

void gen_config_default(gen_config *c)
{
    memset(c, 0, sizeof *c);
    c->micro_batch = 1;
    c->tp = c->cp = c->dp = c->ep = 1;
    c->dtype_bytes = 2;
    c->iterations = 2;
    roof_params_default(&c->roof);
    /* the knobs settable by name take their defaults from their table, below */
    knobtab_defaults(&gen_knob_table, c);
}

/* ---- knobs by name ---- */

static const char *const GEN_FRAMEWORKS[] = { "generic", "megatron", "hf", NULL };
static const char *const GEN_PRECISIONS[] = { "auto", "amp", "bf16", "fp32", NULL };
static const char *const GEN_LOSSES[] = { "auto", "fused", "megatron", "megatron-inplace", NULL };
static const char *const GEN_KERNELS[] = { "vendor", "runtime", NULL };
static const int GEN_KERNEL_VALS[] = { ROOF_KERNELS_VENDOR, ROOF_KERNELS_RUNTIME };
static const char *const GEN_ATTNS[] = { "flash", "eager", NULL };

/* Every knob gen_config_set accepts, in the order the key list shows them. */
static const knobtab_row gen_rows[] = {
    KNOB_ENUM("framework", gen_config, framework, "generic", GEN_FRAMEWORKS,
              "the training framework whose program is generated (docs/GENERATOR.md §3, §9, §10)", ""),
    { "precision", KNOBTAB_ENUM, offsetof(gen_config, precision), "auto", 0, 0, GEN_PRECISIONS,
      NULL, "one of amp, bf16, fp32", "framework hf: the training precision (auto = amp)",
      "hf_run.py --precision", 0, 0 },
    KNOB_ENUM("loss", gen_config, loss, "auto", GEN_LOSSES,
              "the loss implementation (auto: the framework's)", ""),
    KNOB_INT("dist_opt", gen_config, dist_opt, "0", 0, 1,
             "framework megatron: 1 = --use-distributed-optimizer", "Megatron-LM"),
    KNOB_INT("grad_bytes", gen_config, grad_bytes, "0", 0, 8,
             "bytes per gradient element (0: the dtype's; framework megatron: 4)", ""),
    KNOB_INT("opt_bytes_per_param", gen_config, opt_bytes_per_param, "12", 0, 64,
             "optimizer bytes per parameter (fp32 master, Adam m and v)", ""),
    KNOB_INT("save_small", gen_config, save_small, "0", 0, 1,
             "1: the small saved tensors (norm statistics, masks) are traced too", ""),
    KNOB_DBL("attn_bwd_factor", gen_config, attn_bwd_factor, "2.5", 0, HUGE_VAL,
             "attention backward FLOPs over the forward's", "FlashAttention-2"),
    { "kernels", KNOBTAB_ENUM, offsetof(gen_config, roof.kernels), "vendor", 0, 0, GEN_KERNELS,
      GEN_KERNEL_VALS, NULL, "kernel set the op times describe: the profile's gpu.* (vendor) "
      "or rt.* (runtime, as memsim probe measured them)", "", 0, 0 },
    KNOB_INT("lora", gen_config, lora, "0", 0, 1, "1: LoRA fine-tuning (frozen base weights)", ""),
    KNOB_INT("lora_rank", gen_config, lora_rank, "8", 1, 1 << 20, "LoRA rank", ""),
    KNOB_INT("lora_mlp", gen_config, lora_mlp, "0", 0, 1, "1: LoRA adapters on the MLP too", ""),
    KNOB_INT("zero3", gen_config, zero3, "0", 0, 1, "1: ZeRO-3 sharded parameters over dp", ""),
    KNOB_INT("offload", gen_config, offload, "0", 0, 1,
             "1: ZeRO-Offload's form: optimizer states and Adam on the host", ""),
    KNOB_ENUM("attn_impl", gen_config, attn_impl, "flash", GEN_ATTNS,
              "attention implementation (eager: framework generic, cp 1, no GQA)", ""),
    KNOB_INT("attn_dropout", gen_config, attn_dropout, "1", 0, 1,
             "eager: 1 = attention dropout > 0 (mask and dropped probabilities saved)",
             "HF defaults"),
    KNOB_INT("attn_softmax_saves_input", gen_config, attn_softmax_saves_input, "1", 0, 1,
             "eager: 1 = the softmax backward also keeps its input (PyTorch <= 1.10)",
             "pytorch/pytorch#64000"),
    KNOB_DBL("moe_imbalance", gen_config, moe_imbalance, NULL, 1, HUGE_VAL,
             "MoE layers: framework hf, busiest expert's tokens over the mean; generic and "
             "megatron with ep > 1, this rank's received rows over the mean (absent: "
             "balanced routing)", ""),
};

const knobtab gen_knob_table = KNOBTAB_NOGIVEN("generator", gen_rows, KNOBTAB_MSG_GEN);

const char *gen_config_keys(void)
{
    /* built from the table once; the same text every call */
    static char keys[1024];
    if (keys[0]) return keys;
    size_t len = 0;
    for (size_t i = 0; i < gen_knob_table.n && len < sizeof keys; i++) {
        const knobtab_row *r = &gen_rows[i];
        char form[128] = "";
        if (r->type == KNOBTAB_ENUM) knobtab_value_form(r, form, sizeof form);
        int w = snprintf(keys + len, sizeof keys - len, "%s%s%s%s%s", i ? ", " : "", r->key,
                         form[0] ? " (" : "", form, form[0] ? ")" : "");
        if (w > 0) len += (size_t)w;
    }
    return keys;
}

ms_status gen_config_set(gen_config *c, const char *key, const char *value, ms_error *err)
{
    if (!key || !value) return ms_fail(err, MS_ERR_INVALID, "generator knob: key and value needed");
    const knobtab_row *r = knobtab_find(&gen_knob_table, key);
    if (!r)
        return ms_fail(err, MS_ERR_INVALID, "unknown generator knob '%s' (known: %s)", key,
                       gen_config_keys());
    return knobtab_set(&gen_knob_table, r, value, c, err);
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
    uint64_t optdeg;         /* ranks the optimizer states are sharded over */
    int tp, cp, dp, causal;
    int mg;                  /* framework megatron */
    int small;               /* emit the small saved tensors (save_small, or megatron) */
    int lossmg;              /* Megatron's cross entropy on fp32 logits */
    int lossip;              /* ... with the max subtracted in place (the copy is the softmax) */
    /* Mixture-of-experts layers (0 without experts): E experts, El = E/ep of them on this
     * rank, top-k routing of this rank's Ts tokens (its SP shard) into S = Ts*k rows sent,
     * Re rows received by the ep all-to-all (balanced: S; with moe_imbalance r this rank is
     * the busiest: r*S, at most what the ep ranks can send it), R = Re*tp rows after the TP
     * all-gather that feed the local experts; fe, f1e the experts' local widths. */
    int ep;
    uint64_t E, El, k, fe, f1e, S, Re, R;
    uint64_t fs, f1s;        /* the shared expert's local widths (0: none) */
    uint64_t eoptdeg;        /* ranks the experts' optimizer states are sharded over */
} gsz;

/* Rows this rank receives from the ep all-to-all: S balanced; with moe_imbalance r (> 1)
 * r*S rounded, capped at Ts * ep * min(k, El) (every token of every rank sending this rank's
 * experts all the rows it can). With ep = 1 every row stays here: S. */
static uint64_t moe_received(const gen_config *c, const gsz *z)
{
    double r = c->moe_imbalance > 1.0 ? c->moe_imbalance : 1.0;
    if (z->ep <= 1 || r <= 1.0) return z->S;
    uint64_t per = z->k < z->El ? z->k : z->El;
    double cap = (double)z->Ts * (double)z->ep * (double)per;
    double want = floor((double)z->S * r + 0.5);
    return (uint64_t)(want < cap ? want : cap);
}

static void moe_sizes(const gen_config *c, gsz *z)
{
    const model_t *m = &c->model;
    uint64_t tp = (uint64_t)c->tp, ep = (uint64_t)z->ep, dp = (uint64_t)c->dp;
    if (!m->n_experts) return;
    z->E = m->n_experts;
    z->El = m->n_experts / ep;
    z->k = m->experts_per_tok;
    z->fe = m->expert_ffn / tp;
    z->f1e = (m->mlp == MODEL_MLP_SWIGLU ? 2 * m->expert_ffn : m->expert_ffn) / tp;
    z->fs = m->shared_ffn / tp;
    z->f1s = (m->mlp == MODEL_MLP_SWIGLU ? 2 * m->shared_ffn : m->shared_ffn) / tp;
    z->S = z->Ts * z->k;
    z->Re = moe_received(c, z);
    z->R = z->Re * tp;
    /* The experts' data-parallel group: the dp ranks holding the same experts, dp/ep
     * (Megatron's expert data-parallel group with context parallelism: dp*cp/ep). */
    uint64_t edp = ep <= dp ? dp / ep : 1;
    z->eoptdeg = !z->mg ? edp : c->dist_opt ? edp * (uint64_t)c->cp : 1;
}

static void sizes(const gen_config *c, gsz *z)
{
    const model_t *m = &c->model;
    uint64_t tp = (uint64_t)c->tp, hd = model_head_dim(m);
    z->tp = c->tp;
    z->cp = c->cp;
    z->dp = c->dp;
    z->ep = c->ep > 0 ? c->ep : 1;
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
    z->mg = c->framework == GEN_FW_MEGATRON;
    if (z->mg) {
        uint64_t mult = MG_VOCAB_DIVISOR * tp;
        z->V = (m->vocab + mult - 1) / mult * mult / tp;
    }
    z->small = c->save_small || z->mg;
    z->lossip = c->loss == GEN_LOSS_MEGATRON_INPLACE;
    z->lossmg = c->loss == GEN_LOSS_MEGATRON || z->lossip || (c->loss == GEN_LOSS_AUTO && z->mg);
    /* The optimizer's sharding degree: ZeRO-1 over dp (generic); Megatron's distributed
     * optimizer shards over the data-parallel group with context parallelism (dp*cp,
     * megatron/core/optimizer/__init__.py: get_data_parallel_group(with_context_parallel=
     * True)); without it every rank holds all states. */
    z->optdeg = !z->mg ? (uint64_t)c->dp : c->dist_opt ? (uint64_t)c->dp * (uint64_t)c->cp : 1;
    z->heads = m->heads / tp;
    z->D = (uint64_t)c->dtype_bytes;
    /* Megatron keeps fp32 main gradients with bf16 parameters (arguments.py: bf16 forces
     * accumulate_allreduce_grads_in_fp32; the DDP grad buffer is then fp32). */
    z->GB = (uint64_t)(c->grad_bytes > 0 ? c->grad_bytes : z->mg ? F32 : c->dtype_bytes);
    z->OB = (uint64_t)c->opt_bytes_per_param;
    z->normp = m->norm == MODEL_NORM_LAYER ? 2 * m->hidden : m->hidden;
    z->causal = !m->is_encoder;
    moe_sizes(c, z);
}

/* The config with defaults filled in (seq 0 -> the model's default). */
static gen_config resolved(const gen_config *c)
{
    gen_config r = *c;
    if (r.seq == 0) r.seq = r.model.default_seq;
    if (r.ep == 0) r.ep = 1;
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

/* Expert parallelism and the MoE layers of the generic and megatron programs (framework hf
 * checks its own, and runs one GPU: gen_hf_check). */
static ms_status check_moe(const gen_config *c, ms_error *err)
{
    const model_t *m = &c->model;
    if (c->ep < 1 || c->ep > 65536)
        return ms_fail(err, MS_ERR_INVALID, "ep must be 1..65536 (got %d)", c->ep);
    if (!m->n_experts) {
        if (c->ep > 1)
            return ms_fail(err, MS_ERR_INVALID, "ep %d needs a mixture-of-experts model (%s "
                           "has no experts)", c->ep, m->name);
        return MS_OK;
    }
    if (c->framework == GEN_FW_HF) return MS_OK;
    if (c->dp % c->ep)
        return ms_fail(err, MS_ERR_INVALID, "ep %d must divide dp %d (Megatron shards the "
                       "experts over data-parallel ranks)", c->ep, c->dp);
    if (m->n_experts % (uint64_t)c->ep)
        return ms_fail(err, MS_ERR_INVALID, "ep %d must divide the %" PRIu64 " experts of %s "
                       "(each rank holds experts / ep of them)", c->ep, m->n_experts, m->name);
    if (!m->experts_per_tok || m->experts_per_tok > m->n_experts || !m->expert_ffn)
        return ms_fail(err, MS_ERR_INVALID, "model '%s': experts_per_tok must be 1..%" PRIu64
                       " and expert_ffn positive", m->name, m->n_experts);
    if (m->expert_ffn % (uint64_t)c->tp)
        return ms_fail(err, MS_ERR_INVALID, "tp %d does not divide the expert ffn size %"
                       PRIu64 " of %s", c->tp, m->expert_ffn, m->name);
    if (m->shared_ffn % (uint64_t)c->tp)
        return ms_fail(err, MS_ERR_INVALID, "tp %d does not divide the shared expert's ffn "
                       "size %" PRIu64 " of %s", c->tp, m->shared_ffn, m->name);
    if (m->shared_gate && !m->shared_ffn)
        return ms_fail(err, MS_ERR_INVALID, "model '%s': a shared-expert gate without a "
                       "shared expert", m->name);
    if (c->lora || c->zero3 || c->offload)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "mixture-of-experts layers are not modelled "
                       "with lora, zero3 or offload (%s)", m->name);
    return MS_OK;
}

/* The megatron profile models Megatron-LM's GPT pretraining path only. */
static ms_status check_framework(const gen_config *c, ms_error *err)
{
    if (c->framework < GEN_FW_GENERIC || c->framework > GEN_FW_HF)
        return ms_fail(err, MS_ERR_INVALID, "framework must be generic (0), megatron (1) or "
                       "hf (2) (got %d)", c->framework);
    if (c->precision < GEN_PREC_AUTO || c->precision > GEN_PREC_FP32)
        return ms_fail(err, MS_ERR_INVALID, "precision must be auto, amp, bf16 or fp32 (got "
                       "%d)", c->precision);
    if (c->precision != GEN_PREC_AUTO && c->framework != GEN_FW_HF)
        return ms_fail(err, MS_ERR_INVALID, "precision needs framework hf (the generic and "
                       "megatron programs take dtype_bytes / grad_bytes)");
    if (c->framework == GEN_FW_HF) {
        if (c->dist_opt || c->loss != GEN_LOSS_AUTO)
            return ms_fail(err, MS_ERR_INVALID, "framework hf has its own loss and optimizer "
                           "(no dist_opt or loss knob)");
        return gen_hf_check(c, err);
    }
    if (c->loss < GEN_LOSS_AUTO || c->loss > GEN_LOSS_MEGATRON_INPLACE)
        return ms_fail(err, MS_ERR_INVALID, "loss must be auto, fused, megatron or "
                       "megatron-inplace (got %d)", c->loss);
    if (c->dist_opt & ~1) return ms_fail(err, MS_ERR_INVALID, "dist_opt is 0 or 1");
    if ((c->loss == GEN_LOSS_MEGATRON || c->loss == GEN_LOSS_MEGATRON_INPLACE) &&
        (c->hf_loss || c->model.is_encoder))
        return ms_fail(err, MS_ERR_UNSUPPORTED, "loss megatron(-inplace) is a decoder's "
                       "vocab-parallel cross entropy (not with hf_loss or an encoder)");
    if (c->framework != GEN_FW_MEGATRON) {
        if (c->dist_opt)
            return ms_fail(err, MS_ERR_INVALID, "dist_opt needs framework megatron (the "
                           "generic program always shards the optimizer over dp)");
        return MS_OK;
    }
    if (c->lora || c->zero3 || c->offload || c->hf_loss || c->model.is_encoder)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "framework megatron models Megatron-LM's GPT "
                       "pretraining: no lora, zero3, offload, hf_loss or encoders");
    if (c->cp > MG_MAX_CP)
        return ms_fail(err, MS_ERR_INVALID, "framework megatron: cp %d exceeds %d", c->cp,
                       MG_MAX_CP);
    int o = c->opt_bytes_per_param;
    if (o && (o < F32 || (o - F32) % 2))
        return ms_fail(err, MS_ERR_INVALID, "framework megatron: opt_bytes_per_param must be "
                       "0 or 4 (fp32 master) plus two equal moments (got %d)", o);
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
    if (c->lora && (c->lora_rank < 1 || (uint64_t)c->lora_rank > c->model.hidden))
        return ms_fail(err, MS_ERR_INVALID, "lora_rank must be 1..hidden (%" PRIu64 ") with "
                       "lora (got %d)", c->model.hidden, c->lora_rank);
    if ((c->lora | c->lora_mlp | c->zero3 | c->offload) & ~1)
        return ms_fail(err, MS_ERR_INVALID, "lora, lora_mlp, zero3 and offload are 0 or 1");
    if (c->lora_mlp && !c->lora)
        return ms_fail(err, MS_ERR_INVALID, "lora_mlp needs lora");
    if ((c->hf_loss | c->hf_loss_shift | c->hf_loss_fp32 | c->hf_logits_hold) & ~1)
        return ms_fail(err, MS_ERR_INVALID, "hf_loss, hf_loss_shift, hf_loss_fp32 and "
                       "hf_logits_hold are 0 or 1");
    if ((c->hf_loss_shift || c->hf_loss_fp32 || c->hf_logits_hold) && !c->hf_loss)
        return ms_fail(err, MS_ERR_INVALID, "hf_loss_shift, hf_loss_fp32 and hf_logits_hold "
                       "need hf_loss");
    if (c->attn_impl != GEN_ATTN_FLASH && c->attn_impl != GEN_ATTN_EAGER)
        return ms_fail(err, MS_ERR_INVALID, "attn_impl must be flash (0) or eager (1) (got %d)",
                       c->attn_impl);
    if ((c->attn_dropout | c->attn_softmax_saves_input) & ~1)
        return ms_fail(err, MS_ERR_INVALID, "attn_dropout and attn_softmax_saves_input are 0 "
                       "or 1");
    /* Eager attention is Hugging Face's single-GPU module: no ring attention, no Megatron
     * program, and no grouped-query repeat_kv copies (not modelled). */
    if (c->attn_impl == GEN_ATTN_EAGER &&
        (c->framework != GEN_FW_GENERIC || c->cp != 1 || c->model.kv_heads != c->model.heads))
        return ms_fail(err, MS_ERR_UNSUPPORTED, "attn_impl eager is modelled for framework "
                       "generic, cp 1 and kv_heads = heads only (got %s, cp %d, %" PRIu64
                       " of %" PRIu64 " kv heads)", c->framework == GEN_FW_GENERIC ? "generic"
                       : "megatron", c->cp, c->model.kv_heads, c->model.heads);
    if (c->hf_loss && (c->tp != 1 || c->cp != 1 || c->model.is_encoder))
        return ms_fail(err, MS_ERR_UNSUPPORTED, "hf_loss is modelled for decoders with tp = cp "
                       "= 1 only (got tp %d, cp %d%s)", c->tp, c->cp,
                       c->model.is_encoder ? ", an encoder" : "");
    ms_status st = check_moe(c, err);
    return st ? st : check_framework(c, err);
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
    if (m->n_experts) { /* the experts' rows: at most every token's k rows from every ep rank */
        double f1e = (double)m->expert_ffn * (m->mlp == MODEL_MLP_SWIGLU ? 2.0 : 1.0) / tp;
        double rows = T * (double)m->experts_per_tok * (c->ep > 1 ? (double)c->ep : 1.0);
        if (rows * (f1e + h) * 8.0 > act) act = rows * (f1e + h) * 8.0;
    }
    if (act > GEN_TENSOR_MAX)
        return ms_fail(err, MS_ERR_INVALID, "seq x micro-batch too large: %" PRIu64 " x %"
                       PRIu64 " tokens make tensors beyond the trace format's 1 PiB",
                       c->seq, c->micro_batch);
    double group = (double)model_layer_params(m) + (double)model_embed_params(m) +
                   (double)model_head_params(m);
    /* Eager attention's [b, heads/tp, s, s] scores. */
    double sq = (double)c->micro_batch * (double)c->seq * (double)c->seq *
                (double)(m->heads / (uint64_t)c->tp) * 8.0;
    if (c->attn_impl == GEN_ATTN_EAGER && sq > GEN_TENSOR_MAX)
        return ms_fail(err, MS_ERR_INVALID, "attn_impl eager: seq %" PRIu64 " x micro-batch %"
                       PRIu64 " makes attention scores beyond the trace format's 1 PiB",
                       c->seq, c->micro_batch);
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

/* ---- emission context ---- */

/* Parameter slots of a layer group; the LoRA adapters (A then B) of the four linears follow
 * the base weights. */
enum { G_LN1, G_QKV, G_PROJ, G_LN2, G_FC1, G_FC2, G_ROUTER, G_EFC1, G_EFC2, G_SGATE, G_LORA0,
       G_MAXP = G_LORA0 + 8 };
/* Adapter slot of a base linear's A (B is the next slot). */
#define G_LORA_A(base) (G_LORA0 + 2 * ((base) == G_QKV ? 0 : (base) == G_PROJ ? 1 : \
                                       (base) == G_FC1 ? 2 : 3))

/* A parameter group: one transformer layer, the embedding, or the head. Without ZeRO-3 each
 * has one contiguous gradient buffer (Megatron's grad buffer, per layer) and one optimizer
 * state shard; with ZeRO-3 a parameter shard, a gradient shard and an optimizer state shard.
 * Only the trained parameters (all, or the adapters under LoRA) have gradients and states.
 * A mixture-of-experts layer's local experts (slots G_EFC1, G_EFC2) have a gradient buffer
 * and an optimizer shard of their own, reduced and sharded over the experts' data-parallel
 * group (Megatron's separate expert-parallel grad buffers) instead of over dp. */
typedef struct ggroup {
    uint64_t param[G_MAXP];  /* 0 where the slot is empty, and for every slot under ZeRO-3 */
    uint64_t pbytes[G_MAXP];
    const char *pname[G_MAXP];
    uint8_t trains[G_MAXP];
    uint8_t expert[G_MAXP];  /* 1: the slot holds this rank's experts */
    int np;                  /* slots used: 0 .. np-1 (some may be empty) */
    uint64_t nparams;        /* local (TP-sharded) parameters */
    uint64_t ntrain;         /* ... of them trained, but for the experts */
    uint64_t entrain;        /* the local experts' trained parameters */
    uint64_t egrad, eopt;    /* their gradient buffer and optimizer shard; 0: none */
    uint64_t grad, opt;      /* gradient buffer (ZeRO-3: shard) and optimizer shard; 0: none
                                (megatron: opt is the fp32 master copy) */
    uint64_t mom[G_MAXP][2]; /* megatron: Adam's exp_avg, exp_avg_sq per parameter, made by the
                                first optimizer step */
    uint64_t shard;          /* ZeRO-3: this rank's parameter shard */
    uint64_t gathered;       /* ZeRO-3: the live all-gathered parameters, 0 when released */
    uint64_t gfull;          /* ZeRO-3: the live full-size gradient buffer, 0 when none */
    int layer;
    const char *prefix;      /* "embed" / "head" / NULL for layers */
} ggroup;

/* Skeletal tensors of one layer in the current iteration. */
typedef struct lstate {
    uint64_t in, ln1, ln1s, q, k, v, ao, lse, r1, ln2, ln2s, fc1, act;
    uint64_t esc, epr, emask, edrop; /* eager attention's saved [b, heads, s, s] tensors:
                                        masked scores, softmax output, dropout mask and
                                        output (0: not saved) */
    uint64_t mid[4];         /* LoRA: the saved x A of qkv, proj, fc1, fc2 (0: no adapter) */
    /* MoE layers: the router's softmax, the top-k weights and indices, the permutation's
     * sorted indices, the experts' input, fc1 and activation outputs, the combined rows */
    uint64_t rprobs, tprobs, ridx, pidx, ein, efc1, eact, comb;
    uint64_t sout, sgate;    /* gated shared expert: its output and the sigmoid gate */
} lstate;

typedef struct gctx {
    const gen_config *c;
    const machine_t *m;
    trace_t *t;
    int in_place;            /* t is made in given-back records (tshape_in_place) */
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
    uint64_t logprobs;             /* hf_loss: the saved log-softmax output */
    uint64_t held_prev;            /* hf_logits_hold: the previous iteration's logits */
    int iter;                      /* the iteration being emitted */
    uint64_t mpu;                  /* megatron: the global all-gather buffer, 0 before use */
    uint64_t head_dummy;           /* megatron: the tied output layer's zeroed weight
                                      gradient, held by autograd until the embedding's */
} gctx;

static ggroup *grp_layer(gctx *x, int l) { return &x->g[l + 1]; }
static ggroup *grp_embed(gctx *x) { return &x->g[0]; }
static ggroup *grp_head(gctx *x) { return &x->g[x->ng - 1]; }

static void append(gctx *x, const trace_rec *r)
{
    if (!x->st) x->st = trace_append(x->t, r);
}

static void mark(gctx *x, trace_markkind k, int64_t v)
{
    if (x->st) return;
    x->st = x->in_place ? tshape_put_mark(x->t, k, v) : trace_append_mark(x->t, k, v);
}

static uint64_t alloc_s(gctx *x, int layer, const char *what, uint64_t bytes, trace_class cls,
                        int64_t producer, int stream)
{
    int tok = cls == TC_ACT_SKEL || cls == TC_ACT_TRANS || cls == TC_WORKSPACE;
    if (x->in_place) { /* a sweep's later point: compared in place, no record built */
        uint64_t id = x->next_tid++;
        if (!x->st)
            x->st = tshape_put_alloc(x->t, id, bytes, cls, layer, producer, tok, stream, what);
        return id;
    }
    trace_rec r;
    trace_alloc_rec(&r, x->next_tid++, bytes, cls, layer, producer, tok, what);
    r.u.alloc.stream = stream;
    append(x, &r);
    return r.u.alloc.id;
}

static uint64_t alloc_t(gctx *x, int layer, const char *what, uint64_t bytes, trace_class cls,
                        int64_t producer)
{
    return alloc_s(x, layer, what, bytes, cls, producer, 0);
}

static void free_t(gctx *x, uint64_t id)
{
    if (x->in_place) {
        if (!x->st) x->st = tshape_put_free(x->t, id);
        return;
    }
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = id;
    append(x, &r);
}

static uint64_t new_op(gctx *x) { return x->next_oid++; }

/* Operands an op may list: megatron's optimizer step of a MoE layer reads the gradients,
 * states, two moments and the parameter of each of its ten slots. */
#define OPS_MAX 48

typedef struct opspec {
    trace_opkind kind;
    int layer;
    const char *what;
    double flops;
    uint64_t br, bw;
    double dur_us;
    uint64_t in[OPS_MAX];
    uint32_t nin;
    uint64_t out[OPS_MAX];
    uint32_t nout;
    const uint64_t *ext_out; /* when set, the outputs (n_ext_out of them) instead of out[] */
    uint32_t n_ext_out;
} opspec;

/* Copies ids into dst dropping 0 (an absent tensor: a frozen weight's gradient, a released
 * group) and repeats (ZeRO-3 hands one gathered buffer for several weights). */
static uint32_t compact_ids(const uint64_t *src, uint32_t n, uint64_t *dst)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        int dup = src[i] == 0;
        for (uint32_t j = 0; j < k && !dup; j++) dup = dst[j] == src[i];
        if (!dup) dst[k++] = src[i];
    }
    return k;
}

/* The op of o's layer, name and operands with the kind, FLOPs, bytes and duration given (the
 * helpers below compute those and hand the caller's opspec on by address, unchanged). */
static void emit_op_as(gctx *x, uint64_t oid, const opspec *o, trace_opkind kind, double flops,
                       uint64_t br, uint64_t bw, double dur_us)
{
    uint64_t in[OPS_MAX], out[OPS_MAX];
    tshape_opfields f = { oid, kind, x->phase, o->layer, flops, br, bw, dur_us,
                          compact_ids(o->in, o->nin, in), 0, in, out, o->what };
    if (o->ext_out) {
        f.n_out = o->n_ext_out;
        f.out = o->ext_out;
    } else {
        f.n_out = compact_ids(o->out, o->nout, out);
    }
    if (x->in_place) { /* a sweep's later point: compared in place, no record built */
        if (!x->st) x->st = tshape_put_op(x->t, &f);
        return;
    }
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    trace_op *p = &r.u.op;
    p->id = f.id;
    p->kind = f.kind;
    p->phase = f.phase;
    p->layer = f.layer;
    p->flops = f.flops;
    p->bytes_read = f.bytes_read;
    p->bytes_written = f.bytes_written;
    p->dur_us = f.dur_us;
    p->n_in = f.n_in;
    p->in = f.in;
    p->n_out = f.n_out;
    p->out = f.out;
    trace_layer_name(p->name, f.layer, f.what);
    append(x, &r);
}

static void emit_op(gctx *x, uint64_t oid, const opspec *o)
{
    emit_op_as(x, oid, o, o->kind, o->flops, o->br, o->bw, o->dur_us);
}

static double kern_us(gctx *x, trace_opkind k, double flops, uint64_t bytes)
{
    return x->m ? roof_kernel_us(x->m, &x->c->roof, k, flops, bytes) : -1.0;
}

/* An attention kernel over this rank's sequence (the kernels knob picks whose kernels). */
static double attn_us(gctx *x, int backward, double flops, uint64_t bytes)
{
    return x->m ? roof_attn_us(x->m, &x->c->roof, flops, bytes, x->z.sl, backward) : -1.0;
}

/* Builds an opspec in one expression. */
#define OPS(...) ((opspec){ __VA_ARGS__ })
#define IN(...) .in = { __VA_ARGS__ }, .nin = (uint32_t)(sizeof((uint64_t[]){ __VA_ARGS__ }) / 8)
#define OUT(...) .out = { __VA_ARGS__ }, .nout = (uint32_t)(sizeof((uint64_t[]){ __VA_ARGS__ }) / 8)

/* Memory-bound op: duration from its kind, FLOPs and bytes. */
static void simple_op(gctx *x, uint64_t oid, const opspec *o)
{
    emit_op_as(x, oid, o, o->kind, o->flops, o->br, o->bw,
               kern_us(x, o->kind, o->flops, o->br + o->bw));
}

/* One GEMM of M x N x K in the model's precision: its leading dimensions' alignment counts
 * (roof_gemm_align: an odd vocabulary's output projection runs far below the aligned rate). */
static double gemm_us(gctx *x, double flops, uint64_t bytes, uint64_t M, uint64_t N, uint64_t K)
{
    return x->m ? roof_gemm_us(x->m, &x->c->roof, flops, bytes, M, N, K, (int)x->z.D) : -1.0;
}

/* out[M,N] = A[M,K] W[K,N]: 2MNK FLOPs. */
static void gemm_fwd(gctx *x, uint64_t oid, const opspec *o, uint64_t M, uint64_t N,
                     uint64_t K)
{
    uint64_t D = x->z.D;
    double flops = 2.0 * (double)M * (double)N * (double)K;
    uint64_t br = (M * K + K * N) * D, bw = M * N * D;
    emit_op_as(x, oid, o, TK_GEMM, flops, br, bw, gemm_us(x, flops, br + bw, M, N, K));
}

/* Data gradient dA = dC W^T and weight gradient dW += A^T dC: two GEMMs, 4MNK FLOPs; the
 * weight gradient is accumulated (read and written) in the gradient buffer. A frozen weight
 * (wgrad 0: LoRA's base weights) has only the data gradient: 2MNK FLOPs. */
static void gemm_bwd(gctx *x, uint64_t oid, const opspec *o, uint64_t M, uint64_t N,
                     uint64_t K, int wgrad)
{
    uint64_t D = x->z.D, GB = x->z.GB;
    double half = 2.0 * (double)M * (double)N * (double)K;
    uint64_t dgrad = (M * N + K * N + M * K) * D;
    uint64_t wg = (M * N + M * K) * D + 2 * K * N * GB;
    if (!wgrad) {
        emit_op_as(x, oid, o, TK_GEMM, half, (M * N + K * N) * D, M * K * D,
                   gemm_us(x, half, dgrad, M, N, K));
        return;
    }
    emit_op_as(x, oid, o, TK_GEMM, 2.0 * half, (2 * M * N + K * N + M * K) * D + K * N * GB,
               M * K * D + K * N * GB,
               x->m ? gemm_us(x, half, dgrad, M, N, K) + gemm_us(x, half, wg, M, N, K) : -1.0);
}

static void comm_op(gctx *x, uint64_t oid, const opspec *o, roof_coll kind, uint64_t bytes,
                    int ranks, int span)
{
    uint64_t p = (uint64_t)ranks, br = o->br, bw = o->bw;
    switch (kind) {
    case ROOF_ALL_GATHER: br = bytes / p; bw = bytes; break;
    case ROOF_REDUCE_SCATTER: br = bytes; bw = bytes / p; break;
    case ROOF_ALL_REDUCE: br = bytes; bw = bytes; break;
    case ROOF_RING_EXCHANGE: br = bw = bytes * (p - 1); break;
    case ROOF_ALL_TO_ALL: br = bytes; bw = bytes; break;
    }
    emit_op_as(x, oid, o, TK_COMM, 0.0, br, bw,
               x->m ? roof_coll_us(x->m, kind, bytes, ranks, span) : -1.0);
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
    comm_op(x, oid, &OPS(.layer = layer, .what = opname, IN(shard), OUT(full)),
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
    comm_op(x, oid, &OPS(.layer = layer, .what = opname, IN(full), OUT(shard)),
            ROOF_REDUCE_SCATTER, bytes, x->z.tp, x->z.tp);
    free_t(x, full);
    return shard;
}

/* ---- setup: parameters, gradient buffers, optimizer state shards ---- */

/* Fills parameter slot j (an empty slot stays empty). Under LoRA only adapters train. */
static void grp_set(gctx *x, ggroup *g, int j, const char *name, uint64_t nparams, int adapter)
{
    if (!nparams) return;
    g->pname[j] = name;
    g->pbytes[j] = nparams; /* parameters for now; bytes once dtype is applied */
    g->trains[j] = (uint8_t)(x->c->lora ? adapter : 1);
    if (j >= g->np) g->np = j + 1;
    g->nparams += nparams;
    if (g->trains[j]) g->ntrain += nparams;
}

static void grp_add(gctx *x, ggroup *g, const char *name, uint64_t nparams)
{
    if (nparams) grp_set(x, g, g->np, name, nparams, 0);
}

/* Fills slot j with this rank's experts (trained; LoRA is refused with experts). */
static void grp_set_expert(gctx *x, ggroup *g, int j, const char *name, uint64_t nparams)
{
    if (!nparams) return;
    grp_set(x, g, j, name, nparams, 1);
    g->expert[j] = 1;
    g->ntrain -= nparams;
    g->entrain += nparams;
}

/* LoRA adapter shapes on this rank. Column-parallel linears (qkv, fc1) keep A whole and
 * shard B's output columns like the base weight; row-parallel ones (proj, fc2) shard A's
 * input rows and keep B whole (the layout of Megatron-style LoRA under TP). */
static void lora_dims(const gsz *z, int base, uint64_t *kin, uint64_t *nout)
{
    switch (base) {
    case G_QKV: *kin = z->h; *nout = z->hq + 2 * z->hkv; break;
    case G_PROJ: *kin = z->hq; *nout = z->h; break;
    case G_FC1: *kin = z->h; *nout = z->f1; break;
    default: *kin = z->f; *nout = z->h; break;
    }
}

static int lora_on(const gen_config *c, int base)
{
    if (!c->lora) return 0;
    return base == G_QKV || base == G_PROJ || (c->lora_mlp && (base == G_FC1 || base == G_FC2));
}

/* One transformer layer's parameter slots (fixed by the G_* indices). */
static void plan_layer(gctx *x, ggroup *g, int l)
{
    static const char *const an[4][2] = {
        { "qkv.lora_A", "qkv.lora_B" }, { "proj.lora_A", "proj.lora_B" },
        { "fc1.lora_A", "fc1.lora_B" }, { "fc2.lora_A", "fc2.lora_B" },
    };
    static const int bases[4] = { G_QKV, G_PROJ, G_FC1, G_FC2 };
    const gsz *z = &x->z;
    int bias = x->c->model.has_bias;
    uint64_t qkvw = z->hq + 2 * z->hkv, r = (uint64_t)x->c->lora_rank;
    g->layer = l;
    grp_set(x, g, G_LN1, "ln1.w", z->normp, 0);
    grp_set(x, g, G_QKV, "qkv.w", z->h * qkvw + (bias ? qkvw : 0), 0);
    grp_set(x, g, G_PROJ, "proj.w", z->hq * z->h + (bias ? z->h : 0), 0);
    grp_set(x, g, G_LN2, "ln2.w", z->normp, 0);
    if (model_layer_is_moe(&x->c->model, (uint64_t)l)) {
        /* the router h x E, replicated; El experts, each MLP TP-sharded like the dense one */
        grp_set(x, g, G_ROUTER, "router.w", z->h * z->E, 0);
        grp_set_expert(x, g, G_EFC1, "experts.fc1.w", z->El * (z->h * z->f1e + (bias ? z->f1e : 0)));
        grp_set_expert(x, g, G_EFC2, "experts.fc2.w", z->El * (z->fe * z->h + (bias ? z->h : 0)));
        /* the shared expert: a dense MLP of its own width, TP-sharded, and its h -> 1 gate */
        grp_set(x, g, G_FC1, "shared.fc1.w", z->h * z->f1s + (bias ? z->f1s : 0), 0);
        grp_set(x, g, G_FC2, "shared.fc2.w", z->fs * z->h + (bias ? z->h : 0), 0);
        if (x->c->model.shared_gate) grp_set(x, g, G_SGATE, "shared_gate.w", z->h, 0);
    } else {
        grp_set(x, g, G_FC1, "fc1.w", z->h * z->f1 + (bias ? z->f1 : 0), 0);
        grp_set(x, g, G_FC2, "fc2.w", z->f * z->h + (bias ? z->h : 0), 0);
    }
    for (int i = 0; i < 4; i++) {
        if (!lora_on(x->c, bases[i])) continue;
        uint64_t kin, nout;
        lora_dims(z, bases[i], &kin, &nout);
        grp_set(x, g, G_LORA_A(bases[i]), an[i][0], kin * r, 1);
        grp_set(x, g, G_LORA_A(bases[i]) + 1, an[i][1], r * nout, 1);
    }
}

static void plan_groups(gctx *x)
{
    const model_t *m = &x->c->model;
    const gsz *z = &x->z;
    ggroup *e = grp_embed(x), *hd = grp_head(x);
    e->layer = -1;
    e->prefix = "embed";
    grp_add(x, e, "embed.w", z->V * z->h);
    grp_add(x, e, "embed.pos", m->pos_rows * z->h);
    grp_add(x, e, "embed.type", m->type_vocab * z->h);
    if (m->is_encoder) grp_add(x, e, "embed.norm", z->normp);
    for (int l = 0; l < (int)m->layers; l++) plan_layer(x, grp_layer(x, l), l);
    hd->layer = -1;
    hd->prefix = "head";
    if (m->is_encoder) grp_add(x, hd, "pooler.w", z->h * z->h + z->h);
    else grp_add(x, hd, "final_norm.w", z->normp);
    if (!m->tied_embeddings) grp_add(x, hd, "head.w", z->V * z->h);
}

/* ceil(n / dp): this rank's share of n elements under DP sharding. */
static uint64_t dp_share(const gctx *x, uint64_t n)
{
    return (n + (uint64_t)x->z.dp - 1) / (uint64_t)x->z.dp;
}

/* This rank's share of n parameters' optimizer states: ceil(n / dp) under ZeRO-1 (generic);
 * with Megatron's distributed optimizer ceil(n / (dp*cp)); without it all n. */
static uint64_t opt_share(const gctx *x, uint64_t n)
{
    return (n + x->z.optdeg - 1) / x->z.optdeg;
}

/* The same for n expert parameters: over the experts' data-parallel group. */
static uint64_t eopt_share(const gctx *x, uint64_t n)
{
    return n ? (n + x->z.eoptdeg - 1) / x->z.eoptdeg : 0;
}

/* Ranks an expert gradient is reduced over: dp/ep (megatron: dp*cp/ep). */
static int edp_ranks(const gsz *z)
{
    return (z->mg ? z->dp * z->cp : z->dp) / z->ep;
}

/* A slot's optimizer share of n parameters: an expert slot's, or a dense one's. */
static uint64_t slot_opt_share(const gctx *x, const ggroup *g, int j, uint64_t n)
{
    return g->expert[j] ? eopt_share(x, n) : opt_share(x, n);
}

/* Megatron's optimizer bytes per parameter: the fp32 master copy (made when the optimizer is
 * built: Float16OptimizerWithFloat16Params, optimizer.py, main_param = param.detach().clone()
 * .float()) and each of Adam's two moments (made by apex FusedAdam's first step). */
static uint64_t mg_master_bytes(const gsz *z) { return z->OB >= F32 ? F32 : z->OB; }
static uint64_t mg_moment_bytes(const gsz *z) { return (z->OB - mg_master_bytes(z)) / 2; }

/* "<prefix>.<what>" for the embed and head groups, "<what>" (named L<l>.<what>) for layers. */
static void gname(char *nm, const ggroup *g, const char *what)
{
    MS_JOIN(nm, TRACE_NAME_MAX, g->prefix ? g->prefix : "", g->prefix ? "." : "", what);
}

/* A group's optimizer shard of `shard` parameters, "<pre>opt" (megatron: the fp32 master
 * copy, "<pre>opt_master"; its moments come with the first step); 0 for an empty shard. */
static uint64_t opt_alloc(gctx *x, const ggroup *g, const char *pre, uint64_t shard)
{
    char what[32], nm[TRACE_NAME_MAX];
    if (!shard) return 0;
    MS_JOIN(what, sizeof what, pre, "opt", x->z.mg ? "_master" : "");
    gname(nm, g, what);
    uint64_t per = x->z.mg ? mg_master_bytes(&x->z) : x->z.OB;
    return alloc_t(x, g->layer, nm, shard * per, TC_OPTSTATE, -1);
}

/* Setup allocations. Without ZeRO-3: every parameter, a gradient buffer of the trained
 * parameters, the optimizer state shard (ZeRO-1). With ZeRO-3: one flat parameter shard per
 * group, a gradient shard and an optimizer shard of the trained parameters. With offload the
 * optimizer states live on the host (meta host_opt_bytes), and under ZeRO-3 the gradient
 * shard too (DeepSpeed's offload keeps no GPU gradient partition). */
static void setup(gctx *x)
{
    char nm[TRACE_NAME_MAX];
    const gen_config *c = x->c;
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        for (int j = 0; j < g->np; j++) {
            g->pbytes[j] *= x->z.D;
            if (g->pbytes[j] && !c->zero3)
                g->param[j] = alloc_t(x, g->layer, g->pname[j], g->pbytes[j], TC_PARAM, -1);
        }
        if (c->zero3 && g->nparams) {
            gname(nm, g, "param_shard");
            g->shard = alloc_t(x, g->layer, nm, dp_share(x, g->nparams) * x->z.D, TC_PARAM, -1);
        }
    }
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        if (g->ntrain && !(c->zero3 && c->offload)) {
            gname(nm, g, c->zero3 ? "grad_shard" : "grad");
            uint64_t n = c->zero3 ? dp_share(x, g->ntrain) : g->ntrain;
            g->grad = alloc_t(x, g->layer, nm, n * x->z.GB, TC_GRAD, -1);
        }
        if (g->entrain) { /* MoE layers; zero3 and offload are refused with experts */
            gname(nm, g, "expert_grad");
            g->egrad = alloc_t(x, g->layer, nm, g->entrain * x->z.GB, TC_GRAD, -1);
        }
    }
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        if (!x->z.OB || c->offload) continue;
        g->opt = opt_alloc(x, g, "", opt_share(x, g->ntrain));
        g->eopt = opt_alloc(x, g, "expert_", eopt_share(x, g->entrain));
    }
}

/* ---- ZeRO-3: gathering parameters, reducing gradients ---- */

/* The tensor an op reads for parameter slot j: the parameter itself, or under ZeRO-3 the
 * group's gathered buffer (0, dropped from the op, if that is not live). */
static uint64_t pw(const gctx *x, const ggroup *g, int j)
{
    return x->c->zero3 ? g->gathered : g->param[j];
}

/* Where a weight-gradient op of slot j accumulates: the group's gradient buffer, under ZeRO-3
 * the full-size buffer of this backward; 0 for a frozen weight. */
static uint64_t gw(const gctx *x, const ggroup *g, int j)
{
    if (j < 0 || j >= g->np || !g->trains[j]) return 0;
    if (x->c->zero3) return g->gfull;
    return g->expert[j] ? g->egrad : g->grad;
}

/* ZeRO-3 all-gather of a group's parameters into a freshly allocated flat buffer (DeepSpeed
 * gathers a module's partitioned parameters into one flat tensor of which each parameter is a
 * view). No-op without ZeRO-3 or when already gathered. */
static void zgather(gctx *x, ggroup *g, const char *what)
{
    if (!x->c->zero3 || !g->nparams || g->gathered) return;
    char nm[TRACE_NAME_MAX], op[TRACE_NAME_MAX];
    gname(nm, g, "params");
    MS_JOIN(op, sizeof op, g->prefix ? g->prefix : "", g->prefix ? "." : "", what);
    uint64_t bytes = g->nparams * x->z.D, oid = new_op(x);
    g->gathered = alloc_t(x, g->layer, nm, bytes, TC_PARAM, (int64_t)oid);
    comm_op(x, oid, &OPS(.layer = g->layer, .what = op, IN(g->shard), OUT(g->gathered)),
            ROOF_ALL_GATHER, bytes, x->z.dp, x->z.tp * x->z.cp * x->z.dp);
}

/* Frees the gathered parameters (DeepSpeed's release after the module's forward/backward). */
static void zrelease(gctx *x, ggroup *g)
{
    if (!g->gathered) return;
    free_t(x, g->gathered);
    g->gathered = 0;
}

/* ZeRO-3: the full-size gradient buffer of a group's backward (no-op if it exists or the
 * group trains nothing). */
static void zgrad_begin(gctx *x, ggroup *g)
{
    if (!x->c->zero3 || !g->ntrain || g->gfull) return;
    char nm[TRACE_NAME_MAX];
    gname(nm, g, "grad_full");
    g->gfull = alloc_t(x, g->layer, nm, g->ntrain * x->z.GB, TC_GRAD, -1);
}

/* Host copy of a gradient partition (ZeRO-Offload): a comm-kind op over the host link. */
static void d2h_op(gctx *x, int layer, const char *what, uint64_t src, uint64_t bytes)
{
    uint64_t oid = new_op(x);
    double us = -1.0;
    if (x->m) us = x->m->link_d2h_Bps > 0 ? (double)bytes / x->m->link_d2h_Bps * 1e6 : 0.0;
    emit_op(x, oid, &OPS(.kind = TK_COMM, .layer = layer, .what = what, IN(src), .br = bytes,
                         .dur_us = us));
}

/* ZeRO-3: reduce-scatter of the full-size gradient buffer into this rank's gradient shard
 * (with offload into a transient partition that is copied to the host and freed), then the
 * full-size buffer is freed. */
static void zgrad_end(gctx *x, ggroup *g)
{
    if (!g->gfull) return;
    char op[TRACE_NAME_MAX];
    int span = x->z.tp * x->z.cp * x->z.dp;
    uint64_t part = dp_share(x, g->ntrain);
    uint64_t dst = g->grad, oid = new_op(x);
    gname(op, g, "grad.rs");
    if (x->c->offload) {
        char nm[TRACE_NAME_MAX];
        gname(nm, g, "grad_part");
        dst = alloc_t(x, g->layer, nm, part * x->z.GB, TC_GRAD, (int64_t)oid);
    }
    comm_op(x, oid, &OPS(.layer = g->layer, .what = op, IN(g->gfull), OUT(dst)),
            ROOF_REDUCE_SCATTER, g->ntrain * x->z.GB, x->z.dp, span);
    free_t(x, g->gfull);
    g->gfull = 0;
    if (x->c->offload) {
        gname(op, g, "grad.d2h");
        d2h_op(x, g->layer, op, dst, part * x->z.GB);
        free_t(x, dst);
    }
}

/* ---- per-layer sizes for callers (tests, experiments) ---- */

uint64_t gen_layer_skel_bytes(const gen_config *cin)
{
    gen_config c = resolved(cin);
    gsz z;
    sizes(&c, &z);
    /* input, ln1_out, resid1, ln2_out (SP shards); q, k, v, attn_out, fc1_out, act_out */
    uint64_t el = 4 * z.Ts * z.h + z.T * (2 * z.hq + 2 * z.hkv + z.f1 + z.f);
    uint64_t bytes = el * z.D;
    if (z.small) {
        uint64_t stats = c.model.norm == MODEL_NORM_LAYER ? 2 : 1;
        bytes += 2 * z.Ts * stats * F32;
        if (c.attn_impl != GEN_ATTN_EAGER) bytes += z.T * z.heads * F32; /* flash's LSE */
    }
    static const int bases[4] = { G_QKV, G_PROJ, G_FC1, G_FC2 };
    for (int i = 0; i < 4; i++)
        if (lora_on(&c, bases[i])) bytes += z.T * (uint64_t)c.lora_rank * z.D;
    return bytes + gen_layer_eager_attn_bytes(&c);
}

/* Bytes per element of eager attention's saved [b, heads, s, s] tensors (0: flash). */
static uint64_t eager_saved_per_el(const gen_config *c, const gsz *z)
{
    if (c->attn_impl != GEN_ATTN_EAGER) return 0;
    return z->D + (c->attn_dropout ? z->D + 1 : 0) + (c->attn_softmax_saves_input ? z->D : 0);
}

/* Elements of one layer's attention scores on this rank: b * heads/tp * s * s (cp = 1). */
static uint64_t eager_elems(const gsz *z) { return z->b * z->heads * z->sl * z->sl; }

uint64_t gen_layer_eager_attn_bytes(const gen_config *cin)
{
    gen_config c = resolved(cin);
    gsz z;
    sizes(&c, &z);
    return eager_elems(&z) * eager_saved_per_el(&c, &z);
}

/* One layer group planned on its own (no trace is made). */
static ggroup layer_group(const gen_config *cin)
{
    gen_config c = resolved(cin);
    gctx x;
    ggroup g;
    memset(&x, 0, sizeof x);
    memset(&g, 0, sizeof g);
    x.c = &c;
    sizes(&c, &x.z);
    plan_layer(&x, &g, 0);
    return g;
}

uint64_t gen_layer_params(const gen_config *c) { return layer_group(c).nparams; }
uint64_t gen_layer_trainable_params(const gen_config *c) { return layer_group(c).ntrain; }

/* The LM head weight: the embedding when tied. */
static uint64_t head_weight(gctx *x)
{
    if (x->c->model.tied_embeddings) return pw(x, grp_embed(x), 0);
    return pw(x, grp_head(x), grp_head(x)->np - 1);
}

static uint64_t head_weight_grad(gctx *x)
{
    if (x->c->model.tied_embeddings) return gw(x, grp_embed(x), 0);
    return gw(x, grp_head(x), grp_head(x)->np - 1);
}

/* ---- forward ---- */

static void zero_grads(gctx *x)
{
    /* Megatron zeroes its grad buffers at the start of every step: one memset-like op
     * writing every gradient buffer (under ZeRO-3 the gradient shards; none with offload). */
    uint64_t bytes = 0;
    uint32_t n = 0;
    uint64_t *ids = malloc(2 * x->ng * sizeof *ids);
    if (!ids) {
        x->st = x->st ? x->st : MS_ERR_NOMEM;
        return;
    }
    for (size_t i = 0; i < x->ng; i++) {
        if (x->g[i].grad) {
            ids[n++] = x->g[i].grad;
            bytes += (x->c->zero3 ? dp_share(x, x->g[i].ntrain) : x->g[i].ntrain) * x->z.GB;
        }
        if (x->g[i].egrad) {
            ids[n++] = x->g[i].egrad;
            bytes += x->g[i].entrain * x->z.GB;
        }
    }
    if (n) {
        uint64_t oid = new_op(x);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "zero_grad", .bw = bytes,
                              .ext_out = ids, .n_ext_out = n));
    }
    free(ids);
}

static void embed_fwd(gctx *x)
{
    const gsz *z = &x->z;
    ggroup *e = grp_embed(x);
    x->tokens = alloc_t(x, -1, "tokens", z->T * TOKEN_ID_BYTES, TC_ACT_SKEL, -1);
    x->labels = alloc_t(x, -1, "labels", z->T * TOKEN_ID_BYTES, TC_ACT_SKEL, -1);
    zgather(x, e, "params.ag");
    uint64_t oid = new_op(x), out;
    /* Vocab-parallel embedding: each rank looks up its vocabulary shard; with SP the partial
     * sums are reduce-scattered into the first layer's input. */
    if (z->tp > 1) out = alloc_t(x, -1, "embed_partial", z->T * z->h * z->D, TC_ACT_TRANS, (int64_t)oid);
    else out = alloc_t(x, 0, "input", z->Ts * z->h * z->D, TC_ACT_SKEL, (int64_t)oid);
    opspec o = OPS(.kind = TK_EMBED, .layer = -1, .what = "embed", IN(x->tokens), OUT(out));
    for (int j = 0; j < e->np; j++) o.in[o.nin++] = pw(x, e, j);
    o.flops = (double)(z->T * z->h) * (double)(e->np - 1 > 0 ? e->np - 1 : 0);
    o.br = z->T * TOKEN_ID_BYTES + z->T * z->h * z->D * (uint64_t)e->np;
    o.bw = z->T * z->h * z->D;
    simple_op(x, oid, &o);
    zrelease(x, e);
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
    if (z->small) {
        uint64_t per = x->c->model.norm == MODEL_NORM_LAYER ? 2 : 1; /* mean, rstd */
        char sn[TRACE_NAME_MAX];
        MS_JOIN(sn, sizeof sn, op, "_stats");
        *stats = alloc_t(x, l, sn, z->Ts * per * F32, TC_ACT_SKEL, (int64_t)oid);
        o.out[o.nout++] = *stats;
    }
    o.flops = NORM_FWD_FLOPS * (double)n;
    o.br = n * z->D + z->normp * z->D;
    o.bw = n * z->D;
    simple_op(x, oid, &o);
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
    comm_op(x, oid, &OPS(.layer = l, .what = op, IN(k, v), OUT(r[0], r[1])), ROOF_RING_EXCHANGE,
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
    o.dur_us = attn_us(x, 0, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
    if (ws) free_t(x, ws);
    if (z->cp > 1) {
        free_t(x, r[0]);
        free_t(x, r[1]);
    }
}

/* ---- eager attention (attn_impl eager) ----
 * Hugging Face transformers' eager attention as PyTorch autograd runs it: GPT2Attention._attn
 * and BertSelfAttention.forward of transformers 4.x (the releases contemporary with PyTorch
 * 1.9, the paper's), in fp16 without autocast (DeepSpeed's fp16 mode runs the model in half):
 *     scores = matmul(q, k^T)             [b, H, s, s]   bmm saves q, k (views of the
 *                                                         projections: no copy)
 *     scores = scores / sqrt(d)           out of place, saves nothing (a scalar)
 *     scores = where(causal, scores, -inf) (GPT-2) or + attention_mask (BERT): out of place,
 *                                          saves only the (buffer) condition
 *     probs  = softmax(scores)            saves its output; PyTorch <= 1.10 also its input
 *                                          (attn_softmax_saves_input, pytorch/pytorch#64000)
 *     probs  = dropout(probs)             p > 0 (attn_dropout): _fused_dropout's output and
 *                                          its 1-byte mask; dropout's backward keeps the mask
 *     ctx    = matmul(probs, v)           bmm saves probs (the dropped ones) and v
 *     attn_out = ctx.permute(0, 2, 1, 3).contiguous()   a copy: the projection's input
 * Each [b, H, s, s] step is out of place, so two of them are live at a time. The causal mask
 * does not save work: both GEMMs run over the full square. Memory-bound steps are TK_ELEM
 * ops timed by their bytes. */

/* A batched GEMM over this layer's heads: FLOPs 2 x T x s x hq (one of QK^T or PV). */
static double eager_gemm_flops(const gsz *z)
{
    return 2.0 * (double)z->T * (double)z->sl * (double)z->hq;
}

/* A memory-bound step over the [b, H, s, s] scores: in -> a fresh out of class cls. */
static uint64_t eager_elem(gctx *x, int l, const char *op, const char *outn, uint64_t in,
                           trace_class cls, double flops_per_el)
{
    const gsz *z = &x->z;
    uint64_t E = eager_elems(z), oid = new_op(x);
    uint64_t out = alloc_t(x, l, outn, E * z->D, cls, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = op, IN(in), OUT(out),
                          .flops = flops_per_el * (double)E, .br = E * z->D, .bw = E * z->D));
    return out;
}

static void attn_eager_fwd(gctx *x, int l, lstate *s)
{
    const gsz *z = &x->z;
    uint64_t E = eager_elems(z), D = z->D, QB = z->T * z->hq * D, KB = z->T * z->hkv * D;
    int keep_in = x->c->attn_softmax_saves_input;
    uint64_t oid = new_op(x);
    uint64_t sc = alloc_t(x, l, "attn_scores", E * D, TC_ACT_TRANS, (int64_t)oid);
    double g = eager_gemm_flops(z);
    emit_op(x, oid, &OPS(.kind = TK_GEMM, .layer = l, .what = "attn.qk", IN(s->q, s->k), OUT(sc),
                         .flops = g, .br = QB + KB, .bw = E * D,
                         .dur_us = kern_us(x, TK_GEMM, g, QB + KB + E * D)));
    uint64_t scaled = eager_elem(x, l, "attn.scale", "attn_scaled", sc, TC_ACT_TRANS, 1.0);
    free_t(x, sc);
    s->esc = eager_elem(x, l, "attn.mask", "attn_masked", scaled,
                        keep_in ? TC_ACT_SKEL : TC_ACT_TRANS, 1.0);
    free_t(x, scaled);
    s->epr = eager_elem(x, l, "attn.softmax", "attn_probs", s->esc, TC_ACT_SKEL, LOSS_FWD_FLOPS);
    if (!keep_in) {
        free_t(x, s->esc);
        s->esc = 0;
    }
    s->emask = s->edrop = 0;
    if (x->c->attn_dropout) {
        oid = new_op(x);
        s->edrop = alloc_t(x, l, "attn_drop", E * D, TC_ACT_SKEL, (int64_t)oid);
        s->emask = alloc_t(x, l, "attn_drop_mask", E, TC_ACT_SKEL, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "attn.dropout", IN(s->epr),
                              OUT(s->edrop, s->emask), .flops = 2.0 * (double)E,
                              .br = E * D, .bw = E * (D + 1)));
    }
    uint64_t pin = s->edrop ? s->edrop : s->epr;
    oid = new_op(x);
    uint64_t ctx = alloc_t(x, l, "attn_ctx", QB, TC_ACT_TRANS, (int64_t)oid);
    emit_op(x, oid, &OPS(.kind = TK_GEMM, .layer = l, .what = "attn.pv", IN(pin, s->v), OUT(ctx),
                         .flops = g, .br = E * D + KB, .bw = QB,
                         .dur_us = kern_us(x, TK_GEMM, g, E * D + KB + QB)));
    oid = new_op(x);
    s->ao = alloc_t(x, l, "attn_out", QB, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "attn.merge", IN(ctx),
                          OUT(s->ao), .br = QB, .bw = QB));
    free_t(x, ctx);
    s->lse = 0;
}

/* A linear layer's forward [T, K] x [K, N] into freshly allocated outputs (names, bytes, one
 * class). With a LoRA adapter on it, peft's out-of-place form
 *     out = base(in) + lora_B(lora_A(in)) * scaling
 * as four ops: the base GEMM into a transient, in A into the saved [T, r] intermediate *mid,
 * mid B into a transient [T, N], and the scaled add into the outputs. The adapter's input
 * dropout is taken as 0 (no copy of `in`, no mask) and the scaling is fused into the add. */
static void linear_fwd(gctx *x, int l, const ggroup *g, int base, const char *what,
                       uint64_t in, uint64_t N, uint64_t K, int nout,
                       const char *const *onames, const uint64_t *obytes, trace_class ocls,
                       uint64_t *outs, uint64_t *mid)
{
    const gsz *z = &x->z;
    char nm[TRACE_NAME_MAX], op[TRACE_NAME_MAX];
    uint64_t oid = new_op(x);
    *mid = 0;
    if (!lora_on(x->c, base)) {
        opspec o = OPS(.layer = l, .what = what, IN(in, pw(x, g, base)));
        for (int i = 0; i < nout; i++) {
            outs[i] = alloc_t(x, l, onames[i], obytes[i], ocls, (int64_t)oid);
            o.out[o.nout++] = outs[i];
        }
        gemm_fwd(x, oid, &o, z->T, N, K);
        return;
    }
    uint64_t r = (uint64_t)x->c->lora_rank, TN = z->T * N;
    int a = G_LORA_A(base);
    MS_JOIN(nm, sizeof nm, what, "_base");
    uint64_t b0 = alloc_t(x, l, nm, TN * z->D, TC_ACT_TRANS, (int64_t)oid);
    gemm_fwd(x, oid, &OPS(.layer = l, .what = what, IN(in, pw(x, g, base)), OUT(b0)), z->T, N, K);
    oid = new_op(x);
    MS_JOIN(nm, sizeof nm, what, ".lora_mid");
    *mid = alloc_t(x, l, nm, z->T * r * z->D, TC_ACT_SKEL, (int64_t)oid);
    MS_JOIN(op, sizeof op, what, ".lora_A");
    gemm_fwd(x, oid, &OPS(.layer = l, .what = op, IN(in, pw(x, g, a)), OUT(*mid)), z->T, r, K);
    oid = new_op(x);
    MS_JOIN(nm, sizeof nm, what, ".lora_up");
    uint64_t up = alloc_t(x, l, nm, TN * z->D, TC_ACT_TRANS, (int64_t)oid);
    MS_JOIN(op, sizeof op, what, ".lora_B");
    gemm_fwd(x, oid, &OPS(.layer = l, .what = op, IN(*mid, pw(x, g, a + 1)), OUT(up)), z->T, N, r);
    oid = new_op(x);
    MS_JOIN(op, sizeof op, what, ".lora_add");
    opspec o = OPS(.kind = TK_ELEM, .layer = l, .what = op, IN(b0, up),
                   .flops = 2.0 * (double)TN, .br = 2 * TN * z->D, .bw = TN * z->D);
    for (int i = 0; i < nout; i++) {
        outs[i] = alloc_t(x, l, onames[i], obytes[i], ocls, (int64_t)oid);
        o.out[o.nout++] = outs[i];
    }
    simple_op(x, oid, &o);
    free_t(x, b0);
    free_t(x, up);
}

/* Row-parallel GEMM [T, K] x [K, h] then the SP reduce-scatter; returns the [Ts, h] shard
 * outn. With tp > 1 the GEMM's output is partn, the partial sums ("<outn>_partial"). */
static uint64_t row_parallel(gctx *x, int l, const ggroup *g, int base, const char *op,
                             const char *rsop, const char *outn, const char *partn,
                             uint64_t in, uint64_t K, uint64_t *mid)
{
    const gsz *z = &x->z;
    const char *names[1] = { z->tp > 1 ? partn : outn };
    uint64_t bytes[1] = { z->T * z->h * z->D }, out;
    linear_fwd(x, l, g, base, op, in, z->h, K, 1, names, bytes, TC_ACT_TRANS, &out, mid);
    return tp_scatter(x, l, rsop, l, outn, out, TC_ACT_TRANS);
}

/* Residual add of two [Ts, h] shards into a skeletal tensor owned by `owner`. */
static uint64_t resid_add(gctx *x, int l, const char *op, int owner, const char *outn,
                          uint64_t a, uint64_t b)
{
    const gsz *z = &x->z;
    uint64_t oid = new_op(x), n = z->Ts * z->h;
    uint64_t out = alloc_t(x, owner, outn, n * z->D, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = op, IN(a, b), OUT(out),
                          .flops = (double)n, .br = 2 * n * z->D, .bw = n * z->D));
    return out;
}

/* ---- mixture-of-experts layers (generic and megatron; docs/GENERATOR.md §3.1): Megatron-
 * LM's MoELayer with the all-to-all token dispatcher (megatron/core/transformer/moe/:
 * router.py TopKRouter, token_dispatcher.py MoEAlltoAllTokenDispatcher, experts.py), on this
 * rank's SP shard: router, top-k, permutation, dispatch (ep all-to-all, then the TP
 * all-gather), the local experts, combine (TP reduce-scatter, ep all-to-all), the weighted
 * un-permutation. Rows: S sent, Re received, R after the TP gather (gsz). ---- */

static uint64_t rows_h(const gsz *z, uint64_t rows) { return rows * z->h * z->D; }

/* The names of a column-parallel linear's backward (col_parallel_bwd): the linear's and
 * those of src, the norm whose gathered output it read. Joined at compile time: they name
 * records of every layer, and a trace made in place only compares them. */
typedef struct colnames {
    const char *base;            /* the linear ("qkv"): its LoRA adapters' names begin so */
    const char *bwd, *rs;        /* "<base>.bwd"; "<base>.rs.bwd", the input gradient's
                                    reduce-scatter */
    const char *ag, *full;       /* "<src>.ag.bwd", "<src>_full.bwd": src re-gathered */
    const char *din_full, *din;  /* "d_<src>_out_full", "d_<src>_out": the input gradient
                                    before (tp > 1) and after the reduce-scatter */
} colnames;
#define COL_NAMES(base, src) { base, base ".bwd", base ".rs.bwd", src ".ag.bwd", \
                               src "_full.bwd", "d_" src "_out_full", "d_" src "_out" }
static const colnames COL_QKV = COL_NAMES("qkv", "ln1");
static const colnames COL_FC1 = COL_NAMES("fc1", "ln2");
static const colnames COL_SHARED_FC1 = COL_NAMES("shared.fc1", "ln2");

/* The dense MLP's backward pieces, defined with the layer backward below. */
static uint64_t col_parallel_bwd(gctx *x, int l, const ggroup *g, int slot, const colnames *nm,
                                 uint64_t saved_shard, const uint64_t *dout, int ndout,
                                 uint64_t N, uint64_t mid);
static uint64_t row_parallel_bwd(gctx *x, int l, const ggroup *g, int slot, const char *base,
                                 const char *op, const char *agop, const char *full,
                                 const char *dname, uint64_t dout, uint64_t saved, uint64_t K,
                                 int free_saved, uint64_t mid);

/* GPUs an ep group spans, as the placement view lays the ranks out. */
static int ep_span(const gctx *x)
{
    return (int)jobview_ep_span((uint64_t)x->z.tp, (uint64_t)x->z.cp, (uint64_t)x->z.ep);
}

/* A collective that moves one layer's rows into a fresh tensor `tn` of class cls and frees
 * its input; in_b and out_b are this rank's local volumes (an all-to-all is timed by the
 * larger: the busiest rank receives more than it sends). */
static uint64_t moe_coll(gctx *x, int l, const char *op, const char *tn, trace_class cls,
                         uint64_t in, uint64_t in_b, uint64_t out_b, roof_coll kind, int ranks,
                         int span)
{
    uint64_t oid = new_op(x);
    uint64_t out = alloc_t(x, l, tn, out_b, cls, (int64_t)oid);
    opspec o = OPS(.kind = TK_COMM, .layer = l, .what = op, IN(in), OUT(out), .br = in_b,
                   .bw = out_b);
    uint64_t b = kind == ROOF_ALL_GATHER ? out_b : kind == ROOF_REDUCE_SCATTER ? in_b
                 : in_b > out_b ? in_b : out_b;
    o.dur_us = x->m ? roof_coll_us(x->m, kind, b, ranks, span) : -1.0;
    emit_op(x, oid, &o);
    free_t(x, in);
    return out;
}

/* The all-to-all over the ep group; no-op (the input returned) with ep = 1. */
static uint64_t ep_a2a(gctx *x, int l, const char *op, const char *tn, trace_class cls,
                       uint64_t in, uint64_t in_rows, uint64_t out_rows)
{
    const gsz *z = &x->z;
    if (z->ep <= 1) return in;
    return moe_coll(x, l, op, tn, cls, in, rows_h(z, in_rows), rows_h(z, out_rows),
                    ROOF_ALL_TO_ALL, z->ep, ep_span(x));
}

/* The TP all-gather (gather 1) or reduce-scatter (0) of expert rows; no-op with tp = 1. */
static uint64_t ep_tp(gctx *x, int l, const char *op, const char *tn, trace_class cls,
                      uint64_t in, int gather)
{
    const gsz *z = &x->z;
    if (z->tp <= 1) return in;
    uint64_t re = rows_h(z, z->Re), r = rows_h(z, z->R);
    return moe_coll(x, l, op, tn, cls, in, gather ? re : r, gather ? r : re,
                    gather ? ROOF_ALL_GATHER : ROOF_REDUCE_SCATTER, z->tp, z->tp);
}

/* The local experts run as El GEMMs of R/El rows each (tokens per local expert; balanced
 * among them), N x K weights each: El times one such GEMM. */
static double expert_gemm_us(gctx *x, double flops, uint64_t bytes, uint64_t N, uint64_t K)
{
    if (!x->m) return -1.0;
    uint64_t El = x->z.El, Me = (x->z.R + El - 1) / El;
    return (double)El * gemm_us(x, flops / (double)El, bytes / El, Me ? Me : 1, N, K);
}

static void expert_gemm_fwd(gctx *x, uint64_t oid, const opspec *o, uint64_t N, uint64_t K)
{
    uint64_t R = x->z.R, D = x->z.D;
    double flops = 2.0 * (double)R * (double)N * (double)K;
    uint64_t br = (R * K + x->z.El * K * N) * D, bw = R * N * D;
    emit_op_as(x, oid, o, TK_GEMM, flops, br, bw, expert_gemm_us(x, flops, br + bw, N, K));
}

/* Data and weight gradients of the local experts (gemm_bwd's accounting, El weights). */
static void expert_gemm_bwd(gctx *x, uint64_t oid, const opspec *o, uint64_t N, uint64_t K)
{
    uint64_t R = x->z.R, D = x->z.D, GB = x->z.GB, W = x->z.El * K * N;
    double half = 2.0 * (double)R * (double)N * (double)K;
    double dg = expert_gemm_us(x, half, (R * N + W + R * K) * D, N, K);
    double wg = expert_gemm_us(x, half, (R * N + R * K) * D + 2 * W * GB, N, K);
    emit_op_as(x, oid, o, TK_GEMM, 2.0 * half, (2 * R * N + W + R * K) * D + W * GB,
               R * K * D + W * GB, x->m ? dg + wg : -1.0);
}

/* Router (h -> E GEMM on the shard), softmax over the experts (fp32, saved for its
 * backward) with top-k (weights fp32 and int64 indices, saved), and the permutation of the
 * rows into expert order (the sorted indices saved for the un-permutation). Returns the
 * permuted rows; the last tensor before the experts is their saved input. */
static uint64_t moe_route(gctx *x, int l, const ggroup *g, lstate *s)
{
    const gsz *z = &x->z;
    uint64_t Ts = z->Ts, E = z->E, k = z->k, S = z->S;
    uint64_t oid = new_op(x);
    uint64_t logits = alloc_t(x, l, "router_logits", Ts * E * z->D, TC_ACT_TRANS, (int64_t)oid);
    gemm_fwd(x, oid, &OPS(.layer = l, .what = "router", IN(s->ln2, pw(x, g, G_ROUTER)),
                         OUT(logits)), Ts, E, z->h);
    oid = new_op(x);
    s->rprobs = alloc_t(x, l, "router_probs", Ts * E * F32, TC_ACT_SKEL, (int64_t)oid);
    s->tprobs = alloc_t(x, l, "topk_probs", Ts * k * F32, TC_ACT_SKEL, (int64_t)oid);
    s->ridx = alloc_t(x, l, "topk_idx", Ts * k * TOKEN_ID_BYTES, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "route", IN(logits),
                          OUT(s->rprobs, s->tprobs, s->ridx),
                          .flops = ROUTE_FLOPS * (double)(Ts * E), .br = Ts * E * z->D,
                          .bw = Ts * E * F32 + Ts * k * (F32 + TOKEN_ID_BYTES)));
    free_t(x, logits);
    int moved = z->ep > 1 || z->tp > 1;
    oid = new_op(x);
    s->pidx = alloc_t(x, l, "perm_idx", S * TOKEN_ID_BYTES, TC_ACT_SKEL, (int64_t)oid);
    uint64_t perm = alloc_t(x, l, moved ? "permuted" : "expert_in", rows_h(z, S),
                            moved ? TC_ACT_TRANS : TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "permute", IN(s->ln2, s->ridx),
                          OUT(s->pidx, perm), .br = rows_h(z, Ts) + Ts * k * TOKEN_ID_BYTES,
                          .bw = rows_h(z, S) + S * TOKEN_ID_BYTES));
    return perm;
}

/* The shared expert (Megatron's SharedExpertMLP, Qwen2-MoE's shared_expert) on the same
 * ln2 output as the router: a dense MLP of width shared_ffn (gathered over TP, reduce-
 * scattered back), with shared_gate its output times sigmoid(ln2_out . w_g) (the output and
 * the gate saved for the product's backward). Returns the [Ts, h] branch. */
static uint64_t shared_fwd(gctx *x, int l, const ggroup *g, lstate *s)
{
    const gsz *z = &x->z;
    int gated = x->c->model.shared_gate;
    uint64_t a2 = tp_gather(x, l, "shared.ln2.ag", "shared.ln2_full", s->ln2);
    static const char *const fc1n[1] = { "shared.fc1_out" };
    uint64_t fc1b[1] = { z->T * z->f1s * z->D };
    linear_fwd(x, l, g, G_FC1, "shared.fc1", a2, z->f1s, z->h, 1, fc1n, fc1b, TC_ACT_SKEL,
               &s->fc1, &s->mid[2]);
    if (z->tp > 1) free_t(x, a2);
    uint64_t oid = new_op(x);
    s->act = alloc_t(x, l, "shared.act_out", z->T * z->fs * z->D, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ACT, .layer = l, .what = "shared.act", IN(s->fc1),
                          OUT(s->act), .flops = ACT_FWD_FLOPS * (double)(z->T * z->fs),
                          .br = z->T * z->f1s * z->D, .bw = z->T * z->fs * z->D));
    const char *pn[1] = { z->tp > 1 ? "shared_out_partial" : "shared_out" };
    uint64_t pb[1] = { z->T * z->h * z->D }, part;
    trace_class pc = z->tp > 1 || !gated ? TC_ACT_TRANS : TC_ACT_SKEL;
    linear_fwd(x, l, g, G_FC2, "shared.fc2", s->act, z->h, z->fs, 1, pn, pb, pc, &part,
               &s->mid[3]);
    uint64_t so = tp_scatter(x, l, "shared.fc2.rs", l, "shared_out", part,
                             gated ? TC_ACT_SKEL : TC_ACT_TRANS);
    if (!gated) return so;
    uint64_t Ts = z->Ts, n = Ts * z->h;
    s->sout = so;
    oid = new_op(x);
    uint64_t logit = alloc_t(x, l, "shared_gate_logit", Ts * z->D, TC_ACT_TRANS, (int64_t)oid);
    gemm_fwd(x, oid, &OPS(.layer = l, .what = "shared_gate", IN(s->ln2, pw(x, g, G_SGATE)),
                         OUT(logit)), Ts, 1, z->h);
    oid = new_op(x);
    s->sgate = alloc_t(x, l, "shared_gate_sig", Ts * z->D, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "shared_gate.sigmoid",
                          IN(logit), OUT(s->sgate), .flops = 4.0 * (double)Ts,
                          .br = Ts * z->D, .bw = Ts * z->D));
    free_t(x, logit);
    oid = new_op(x);
    uint64_t out = alloc_t(x, l, "shared_gated", n * z->D, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "shared_gate.mul",
                          IN(so, s->sgate), OUT(out), .flops = (double)n,
                          .br = n * z->D + Ts * z->D, .bw = n * z->D));
    return out;
}

/* The MoE block's forward in place of the MLP: returns its [Ts, h] output (for add2). */
static uint64_t moe_fwd(gctx *x, int l, const ggroup *g, lstate *s)
{
    const gsz *z = &x->z;
    uint64_t R = z->R, D = z->D;
    uint64_t cur = moe_route(x, l, g, s);
    cur = ep_a2a(x, l, "dispatch.a2a", z->tp > 1 ? "dispatched" : "expert_in",
                 z->tp > 1 ? TC_ACT_TRANS : TC_ACT_SKEL, cur, z->S, z->Re);
    s->ein = ep_tp(x, l, "dispatch.ag", "expert_in", TC_ACT_SKEL, cur, 1);
    uint64_t oid = new_op(x);
    s->efc1 = alloc_t(x, l, "expert_fc1_out", R * z->f1e * D, TC_ACT_SKEL, (int64_t)oid);
    expert_gemm_fwd(x, oid, &OPS(.layer = l, .what = "expert_fc1", IN(s->ein, pw(x, g, G_EFC1)),
                                OUT(s->efc1)), z->f1e, z->h);
    oid = new_op(x);
    s->eact = alloc_t(x, l, "expert_act_out", R * z->fe * D, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ACT, .layer = l, .what = "expert_act", IN(s->efc1),
                          OUT(s->eact), .flops = ACT_FWD_FLOPS * (double)(R * z->fe),
                          .br = R * z->f1e * D, .bw = R * z->fe * D));
    int moved = z->ep > 1 || z->tp > 1;
    oid = new_op(x);
    cur = alloc_t(x, l, moved ? "expert_out" : "combined", rows_h(z, R),
                  moved ? TC_ACT_TRANS : TC_ACT_SKEL, (int64_t)oid);
    expert_gemm_fwd(x, oid, &OPS(.layer = l, .what = "expert_fc2", IN(s->eact, pw(x, g, G_EFC2)),
                                OUT(cur)), z->h, z->fe);
    cur = ep_tp(x, l, "combine.rs", z->ep > 1 ? "combine_part" : "combined",
                z->ep > 1 ? TC_ACT_TRANS : TC_ACT_SKEL, cur, 0);
    /* the combined rows are saved: the un-permutation's product with the weights needs them
     * for the weights' gradient */
    s->comb = ep_a2a(x, l, "combine.a2a", "combined", TC_ACT_SKEL, cur, z->Re, z->S);
    oid = new_op(x);
    uint64_t out = alloc_t(x, l, "moe_out", rows_h(z, z->Ts), TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "unpermute",
                          IN(s->comb, s->tprobs, s->pidx), OUT(out),
                          .flops = 2.0 * (double)(z->S * z->h),
                          .br = rows_h(z, z->S) + z->S * (F32 + TOKEN_ID_BYTES),
                          .bw = rows_h(z, z->Ts)));
    if (!z->fs) return out;
    uint64_t so = shared_fwd(x, l, g, s), n = z->Ts * z->h;
    oid = new_op(x);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "shared.add", IN(out, so),
                          OUT(out), .flops = (double)n, .br = 2 * n * z->D, .bw = n * z->D));
    free_t(x, so);
    return out;
}

/* The local experts' backward from the gradient of their output rows: fc2, activation,
 * fc1; returns the gradient of their input rows. Frees what the forward saved for them. */
static uint64_t experts_bwd(gctx *x, int l, const ggroup *g, lstate *s, uint64_t dout)
{
    const gsz *z = &x->z;
    uint64_t R = z->R, D = z->D;
    uint64_t oid = new_op(x);
    uint64_t dact = alloc_t(x, l, "d_expert_act", R * z->fe * D, TC_ACT_TRANS, (int64_t)oid);
    expert_gemm_bwd(x, oid, &OPS(.layer = l, .what = "expert_fc2.bwd",
                                IN(dout, pw(x, g, G_EFC2), s->eact),
                                OUT(dact, gw(x, g, G_EFC2))), z->h, z->fe);
    free_t(x, dout);
    free_t(x, s->eact);
    oid = new_op(x);
    uint64_t dfc1 = alloc_t(x, l, "d_expert_fc1", R * z->f1e * D, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ACT, .layer = l, .what = "expert_act.bwd",
                          IN(dact, s->efc1), OUT(dfc1),
                          .flops = ACT_BWD_FLOPS * (double)(R * z->fe),
                          .br = R * (z->fe + z->f1e) * D, .bw = R * z->f1e * D));
    free_t(x, dact);
    free_t(x, s->efc1);
    oid = new_op(x);
    uint64_t din = alloc_t(x, l, "d_expert_in", rows_h(z, R), TC_ACT_TRANS, (int64_t)oid);
    expert_gemm_bwd(x, oid, &OPS(.layer = l, .what = "expert_fc1.bwd",
                                IN(dfc1, pw(x, g, G_EFC1), s->ein),
                                OUT(din, gw(x, g, G_EFC1))), z->f1e, z->h);
    free_t(x, dfc1);
    free_t(x, s->ein);
    return din;
}

/* The shared expert's backward from dx (not freed): the gate's product, sigmoid and linear
 * (its data gradient accumulated into dln2), then the MLP, whose ln2-output gradient is
 * added into dln2. Frees the ln2 output (the MLP's column-parallel backward does). */
static void shared_bwd(gctx *x, int l, const ggroup *g, lstate *s, uint64_t dx, uint64_t dln2)
{
    const gsz *z = &x->z;
    uint64_t Ts = z->Ts, n = Ts * z->h, dso = dx;
    if (x->c->model.shared_gate) {
        uint64_t oid = new_op(x);
        dso = alloc_t(x, l, "d_shared_out", n * z->D, TC_ACT_TRANS, (int64_t)oid);
        uint64_t dsg = alloc_t(x, l, "d_shared_gate", Ts * z->D, TC_ACT_TRANS, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "shared_gate.mul.bwd",
                              IN(dx, s->sout, s->sgate), OUT(dso, dsg), .flops = 3.0 * (double)n,
                              .br = 2 * n * z->D + Ts * z->D, .bw = n * z->D + Ts * z->D));
        free_t(x, s->sout);
        oid = new_op(x);
        uint64_t dlg = alloc_t(x, l, "d_shared_gate_logit", Ts * z->D, TC_ACT_TRANS, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "shared_gate.sigmoid.bwd",
                              IN(dsg, s->sgate), OUT(dlg), .flops = 3.0 * (double)Ts,
                              .br = 2 * Ts * z->D, .bw = Ts * z->D));
        free_t(x, dsg);
        free_t(x, s->sgate);
        uint64_t gg = gw(x, g, G_SGATE);
        oid = new_op(x);
        gemm_bwd(x, oid, &OPS(.layer = l, .what = "shared_gate.bwd",
                             IN(dlg, pw(x, g, G_SGATE), s->ln2, dln2), OUT(dln2, gg)), Ts, 1,
                 z->h, gg != 0);
        free_t(x, dlg);
    }
    uint64_t dact = row_parallel_bwd(x, l, g, G_FC2, "shared.fc2", "shared.fc2.bwd",
                                     "shared.fc2.ag.bwd", "d_shared_out_full", "d_shared_act",
                                     dso, s->act, z->fs, 1, s->mid[3]);
    if (dso != dx) free_t(x, dso);
    uint64_t oid = new_op(x);
    uint64_t dfc1 = alloc_t(x, l, "d_shared_fc1", z->T * z->f1s * z->D, TC_ACT_TRANS,
                            (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ACT, .layer = l, .what = "shared.act.bwd", IN(dact, s->fc1),
                          OUT(dfc1), .flops = ACT_BWD_FLOPS * (double)(z->T * z->fs),
                          .br = z->T * (z->fs + z->f1s) * z->D, .bw = z->T * z->f1s * z->D));
    free_t(x, dact);
    free_t(x, s->fc1);
    uint64_t dsh = col_parallel_bwd(x, l, g, G_FC1, &COL_SHARED_FC1, s->ln2, &dfc1, 1, z->f1s,
                                    s->mid[2]);
    oid = new_op(x);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "shared.dadd", IN(dln2, dsh),
                          OUT(dln2), .flops = (double)n, .br = 2 * n * z->D, .bw = n * z->D));
    free_t(x, dsh);
}

/* The MoE block's backward from dx, the [Ts, h] gradient of its output: the
 * un-permutation's (rows and weights), the combine reversed, the experts, the dispatch
 * reversed, the permutation's scatter-add, the top-k softmax's and the router's, whose data
 * gradient accumulates into the same [Ts, h] tensor. Returns that gradient of the ln2
 * output (dx is not freed: the residual branch adds it). */
static uint64_t moe_bwd(gctx *x, int l, const ggroup *g, lstate *s, uint64_t dx)
{
    const gsz *z = &x->z;
    uint64_t Ts = z->Ts, E = z->E, k = z->k, S = z->S;
    uint64_t oid = new_op(x);
    uint64_t dcomb = alloc_t(x, l, "d_combined", rows_h(z, S), TC_ACT_TRANS, (int64_t)oid);
    uint64_t dtp = alloc_t(x, l, "d_topk_probs", Ts * k * F32, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "unpermute.bwd",
                          IN(dx, s->comb, s->tprobs, s->pidx), OUT(dcomb, dtp),
                          .flops = 2.0 * (double)(S * z->h),
                          .br = rows_h(z, Ts) + rows_h(z, S) + S * (F32 + TOKEN_ID_BYTES),
                          .bw = rows_h(z, S) + Ts * k * F32));
    free_t(x, s->comb);
    free_t(x, s->tprobs);
    uint64_t cur = ep_a2a(x, l, "combine.a2a.bwd", z->tp > 1 ? "d_combine_part"
                          : "d_expert_out", TC_ACT_TRANS, dcomb, S, z->Re);
    cur = ep_tp(x, l, "combine.rs.bwd", "d_expert_out", TC_ACT_TRANS, cur, 1);
    cur = experts_bwd(x, l, g, s, cur);
    cur = ep_tp(x, l, "dispatch.ag.bwd", z->ep > 1 ? "d_dispatched" : "d_permuted",
                TC_ACT_TRANS, cur, 0);
    cur = ep_a2a(x, l, "dispatch.a2a.bwd", "d_permuted", TC_ACT_TRANS, cur, z->Re, S);
    oid = new_op(x);
    uint64_t dln2 = alloc_t(x, l, "d_ln2_out", rows_h(z, Ts), TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "permute.bwd",
                          IN(cur, s->pidx), OUT(dln2), .flops = (double)(S * z->h),
                          .br = rows_h(z, S) + S * TOKEN_ID_BYTES, .bw = rows_h(z, Ts)));
    free_t(x, cur);
    free_t(x, s->pidx);
    oid = new_op(x);
    uint64_t dlog = alloc_t(x, l, "d_router_logits", Ts * E * z->D, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "route.bwd",
                          IN(dtp, s->rprobs, s->ridx), OUT(dlog),
                          .flops = ROUTE_FLOPS * (double)(Ts * E),
                          .br = Ts * k * (2 * F32 + TOKEN_ID_BYTES) + Ts * E * F32,
                          .bw = Ts * E * z->D));
    free_t(x, dtp);
    free_t(x, s->rprobs);
    free_t(x, s->ridx);
    uint64_t rg = gw(x, g, G_ROUTER);
    oid = new_op(x);
    gemm_bwd(x, oid, &OPS(.layer = l, .what = "router.bwd",
                         IN(dlog, pw(x, g, G_ROUTER), s->ln2, dln2), OUT(dln2, rg)), Ts, E, z->h,
             rg != 0);
    free_t(x, dlog);
    if (!z->fs) {
        free_t(x, s->ln2);
        return dln2;
    }
    shared_bwd(x, l, g, s, dx, dln2);
    return dln2;
}

/* ---- framework megatron: one layer's attention block as Megatron-LM ccfeda47cb runs it with
 * TransformerEngine 1.3 and FlashAttention (docs/GENERATOR.md §9). Sizes: Q = T h_q D (query,
 * attention output), K = T h_kv D (key or value), L = T (heads/tp) 4 (fp32 log-sum-exp). ---- */

/* FlashAttention's fp32 log-sum-exp [heads/tp, T] of this rank. */
static uint64_t mg_lse_bytes(const gsz *z) { return z->T * z->heads * F32; }

/* cp = 1: TE's FlashAttention calls flash_attn_varlen_func, which saves q, k, v, its output
 * and the log-sum-exp, two tensors (the output first: mha_fwd's empty_like(q), then the fp32
 * softmax_lse). Both come out of the attention kernel only; policies read "*.attn_lse" as part
 * of the attention output (planners/policy.c: MEMO keeps or swaps it whole, never reruns
 * attention for it), and MEMO's host buffers tell it from the bf16 skeletal tensors. */
static void mg_flash_fwd(gctx *x, int l, lstate *s)
{
    const gsz *z = &x->z;
    uint64_t QB = z->T * z->hq * z->D, oid = new_op(x);
    s->ao = alloc_t(x, l, "attn_out", QB, TC_ACT_SKEL, (int64_t)oid);
    s->lse = alloc_t(x, l, "attn_lse", mg_lse_bytes(z), TC_ACT_SKEL, (int64_t)oid);
    opspec o = OPS(.kind = TK_ATTN, .layer = l, .what = "attn", IN(s->q, s->k, s->v),
                   OUT(s->ao, s->lse));
    o.flops = attn_fwd_flops(z);
    o.br = z->T * (z->hq + 2 * z->hkv) * z->D;
    o.bw = QB + mg_lse_bytes(z);
    o.dur_us = attn_us(x, 0, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
}

/* cp > 1: TE's AttnFuncWithCP.forward (attention.py) on the last CP rank, the one that
 * computes every step over the full query chunk and so holds the most:
 *   p2p_comm_buffers[0] = cat(k, v)                                 "kv_send"   2K
 *   step i < cp-1: p2p_comm_buffers[i+1] = empty_like(...)          "kv_recv<i+1>", the
 *     last of which ("kv") is what ctx.save_for_backward keeps      2K each
 *   step i >= 1: kv_inputs = buffer[:, :, 0].contiguous()           "kv_half"   K
 *   every step: FlashAttention's output and LSE, kept in out_per_step / softmax_lse_per_step
 *     until the corrections after the loop                          Q + L each
 *   step 1: out = empty_like(q).zero_(), softmax_lse = clone(lse_0).to(double)   Q, 2L
 *   after the loop: softmax_lse.to(float)                           L ("attn_lse")
 * Steps alternate between the current stream and TE's cp_stream ("with torch.cuda.stream(
 * flash_attn_streams[i % 2])"): what odd steps allocate comes from the cp stream's pool
 * (trace stream MG_CP_STREAM). When the function returns, everything but q, the last KV
 * buffer, out and the LSE is freed. With cp > 3 Python's rebinding would free a "kv_half"
 * two steps later; here all live to the op's end (one op stands for all steps). */
static void mg_ring_fwd(gctx *x, int l, lstate *s, uint64_t kr, uint64_t vc)
{
    const gsz *z = &x->z;
    int cp = z->cp;
    uint64_t QB = z->T * z->hq * z->D, KB = z->T * z->hkv * z->D, L = mg_lse_bytes(z);
    uint64_t chunk = 2 * KB, oid = new_op(x);
    uint64_t kvs = alloc_t(x, l, "kv_send", chunk, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "kv_cat", IN(kr, vc), OUT(kvs),
                          .br = chunk, .bw = chunk));
    uint64_t buf[MG_MAX_CP], outs[3 * MG_MAX_CP + 2];
    char nm[TRACE_NAME_MAX];
    oid = new_op(x);
    for (int j = 1; j < cp; j++) {
        snprintf(nm, sizeof nm, "kv_recv%d", j);
        buf[j - 1] = alloc_s(x, l, j == cp - 1 ? "kv" : nm, chunk,
                             j == cp - 1 ? TC_ACT_SKEL : TC_ACT_TRANS, (int64_t)oid,
                             (j - 1) % 2 ? MG_CP_STREAM : 0);
    }
    comm_op(x, oid, &OPS(.layer = l, .what = "cp_ring.ovl", IN(kvs), .ext_out = buf,
                        .n_ext_out = (uint32_t)(cp - 1)),
            ROOF_RING_EXCHANGE, chunk, cp, z->tp * cp);
    s->k = buf[cp - 2];
    s->v = 0;
    oid = new_op(x);
    uint32_t n = 0;
    for (int i = 0; i < cp; i++) {
        int st = i % 2 ? MG_CP_STREAM : 0;
        if (i >= 1) outs[n++] = alloc_s(x, l, "kv_half", KB, TC_ACT_TRANS, (int64_t)oid, st);
        outs[n++] = alloc_s(x, l, "attn_out_step", QB, TC_ACT_TRANS, (int64_t)oid, st);
        outs[n++] = alloc_s(x, l, "attn_lse_step", L, TC_ACT_TRANS, (int64_t)oid, st);
    }
    uint32_t nstep = n;
    s->ao = alloc_t(x, l, "attn_out", QB, TC_ACT_SKEL, (int64_t)oid);
    uint64_t lse64 = alloc_t(x, l, "attn_lse_fp64", 2 * L, TC_ACT_TRANS, (int64_t)oid);
    s->lse = alloc_t(x, l, "attn_lse", L, TC_ACT_SKEL, (int64_t)oid);
    outs[n++] = s->ao;
    outs[n++] = lse64;
    outs[n++] = s->lse;
    opspec o = OPS(.kind = TK_ATTN, .layer = l, .what = "attn", IN(s->q, kvs), .ext_out = outs,
                   .n_ext_out = n);
    for (int j = 0; j < cp - 1; j++) o.in[o.nin++] = buf[j];
    o.flops = attn_fwd_flops(z);
    o.br = QB + (uint64_t)cp * chunk + (uint64_t)(cp - 1) * KB;
    o.bw = (uint64_t)cp * (QB + L) + (uint64_t)(cp - 1) * KB + QB + 3 * L;
    o.dur_us = attn_us(x, 0, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
    free_t(x, lse64);
    free_t(x, kvs);
    for (int j = 0; j < cp - 2; j++) free_t(x, buf[j]);
    for (uint32_t k = 0; k < nstep; k++) free_t(x, outs[k]);
}

/* TELayerNormColumnParallelLinear (LN fused, saving its input, the LN output shard, mu and
 * rsigma; the SP all-gather into a fresh [T, h] tensor freed when it returns; the QKV GEMM
 * into one [T, h_q + 2 h_kv] tensor, "qkv_out"); Megatron's Attention splits it into views and
 * applies RoPE (apex's fused kernel, out of place) to query and key; TEDotProductAttention
 * makes the strided value view contiguous (a copy). Megatron's Attention.forward keeps
 * "qkv_out" (through the value view) and the rotated key alive until it returns, after the
 * output projection: late[] lists them for the caller to free then. */
static void mg_attn_block_fwd(gctx *x, int l, const ggroup *g, lstate *s, uint64_t late[2])
{
    const gsz *z = &x->z;
    uint64_t QB = z->T * z->hq * z->D, KB = z->T * z->hkv * z->D;
    int cp1 = z->cp == 1;
    s->ln1 = norm_fwd(x, l, "ln1", "ln1_out", s->in, pw(x, g, G_LN1), &s->ln1s);
    uint64_t a1 = tp_gather(x, l, "ln1.ag", "ln1_full", s->ln1);
    uint64_t oid = new_op(x);
    uint64_t mixed = alloc_t(x, l, "qkv_out", QB + 2 * KB, TC_ACT_TRANS, (int64_t)oid);
    gemm_fwd(x, oid, &OPS(.layer = l, .what = "qkv", IN(a1, pw(x, g, G_QKV)), OUT(mixed)), z->T,
             z->hq + 2 * z->hkv, z->h);
    if (z->tp > 1) free_t(x, a1);
    oid = new_op(x);
    s->q = alloc_t(x, l, "q", QB, TC_ACT_SKEL, (int64_t)oid);
    uint64_t kr = alloc_t(x, l, cp1 ? "k" : "k_rope", KB, cp1 ? TC_ACT_SKEL : TC_ACT_TRANS,
                          (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "rope", IN(mixed), OUT(s->q, kr),
                          .flops = ROPE_FLOPS * (double)(z->T * (z->hq + z->hkv)),
                          .br = QB + KB, .bw = QB + KB));
    oid = new_op(x);
    uint64_t vc = alloc_t(x, l, cp1 ? "v" : "v_contig", KB, cp1 ? TC_ACT_SKEL : TC_ACT_TRANS,
                          (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "v_contig", IN(mixed), OUT(vc),
                          .br = KB, .bw = KB));
    late[0] = mixed;
    late[1] = 0;
    if (cp1) {
        s->k = kr;
        s->v = vc;
        mg_flash_fwd(x, l, s);
        return;
    }
    late[1] = kr;
    mg_ring_fwd(x, l, s, kr, vc);
    free_t(x, vc); /* TEDotProductAttention's contiguous copy dies when it returns */
}

/* The dense MLP from the ln2 output: gather, fc1, activation, fc2 and its reduce-scatter;
 * returns the [Ts, h] output. */
static uint64_t mlp_fwd(gctx *x, int l, const ggroup *g, lstate *s)
{
    const gsz *z = &x->z;
    uint64_t a2 = tp_gather(x, l, "ln2.ag", "ln2_full", s->ln2);
    static const char *const fc1n[1] = { "fc1_out" };
    uint64_t fc1b[1] = { z->T * z->f1 * z->D };
    linear_fwd(x, l, g, G_FC1, "fc1", a2, z->f1, z->h, 1, fc1n, fc1b, TC_ACT_SKEL, &s->fc1,
               &s->mid[2]);
    if (z->tp > 1) free_t(x, a2);
    uint64_t oid = new_op(x);
    s->act = alloc_t(x, l, "act_out", z->T * z->f * z->D, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ACT, .layer = l, .what = "act", IN(s->fc1), OUT(s->act),
                          .flops = ACT_FWD_FLOPS * (double)(z->T * z->f),
                          .br = z->T * z->f1 * z->D, .bw = z->T * z->f * z->D));
    return row_parallel(x, l, g, G_FC2, "fc2", "fc2.rs", "fc2_out", "fc2_out_partial", s->act,
                        z->f, &s->mid[3]);
}

static void layer_fwd(gctx *x, int l)
{
    const gsz *z = &x->z;
    ggroup *g = grp_layer(x, l);
    lstate *s = &x->ls[l];
    mark(x, TM_LAYER, l);
    zgather(x, g, "params.ag");
    /* attention block */
    uint64_t late[2] = { 0, 0 };
    if (z->mg) {
        mg_attn_block_fwd(x, l, g, s, late);
    } else {
        s->ln1 = norm_fwd(x, l, "ln1", "ln1_out", s->in, pw(x, g, G_LN1), &s->ln1s);
        uint64_t a1 = tp_gather(x, l, "ln1.ag", "ln1_full", s->ln1);
        static const char *const qkvn[3] = { "q", "k", "v" };
        uint64_t qkvb[3] = { z->T * z->hq * z->D, z->T * z->hkv * z->D, z->T * z->hkv * z->D };
        uint64_t qkv[3];
        linear_fwd(x, l, g, G_QKV, "qkv", a1, z->hq + 2 * z->hkv, z->h, 3, qkvn, qkvb,
                   TC_ACT_SKEL, qkv, &s->mid[0]);
        s->q = qkv[0];
        s->k = qkv[1];
        s->v = qkv[2];
        if (z->tp > 1) free_t(x, a1);
        if (x->c->attn_impl == GEN_ATTN_EAGER) attn_eager_fwd(x, l, s);
        else attn_fwd(x, l, s);
    }
    uint64_t po = row_parallel(x, l, g, G_PROJ, "proj", "proj.rs", "proj_out",
                               "proj_out_partial", s->ao, z->hq, &s->mid[1]);
    for (int i = 0; i < 2; i++)
        if (late[i]) free_t(x, late[i]);
    s->r1 = resid_add(x, l, "add1", l, "resid1", s->in, po);
    free_t(x, po);
    /* MLP block */
    s->ln2 = norm_fwd(x, l, "ln2", "ln2_out", s->r1, pw(x, g, G_LN2), &s->ln2s);
    uint64_t fo = model_layer_is_moe(&x->c->model, (uint64_t)l) ? moe_fwd(x, l, g, s)
                                                                 : mlp_fwd(x, l, g, s);
    int last = l + 1 == (int)x->c->model.layers;
    uint64_t out = resid_add(x, l, "add2", last ? -1 : l + 1, last ? "final_in" : "input",
                             s->r1, fo);
    free_t(x, fo);
    zrelease(x, g);
    if (last) x->final_in = out;
    else x->ls[l + 1].in = out;
}

/* HF transformers' causal-LM loss (the modeling_*.py of the 4.3x releases GMLake ran, and
 * ForCausalLMLoss from 4.46 on): [optional fp32 upcast of the logits, which the outputs then
 * hold instead], [optional contiguous copy of the shifted logits], log-softmax (its output is
 * what the backward needs), nll. Rows: b(s-1) with the shift, else T (labels are shifted
 * instead). No fused kernel: every step is a full [rows, V] tensor. */
static uint64_t hf_rows(const gctx *x)
{
    return x->c->hf_loss_shift ? x->z.b * (x->z.sl - 1) : x->z.T;
}

static void hf_loss_fwd(gctx *x)
{
    const gsz *z = &x->z;
    const gen_config *c = x->c;
    uint64_t TV = z->T * z->V, RV = hf_rows(x) * z->V, E = c->hf_loss_fp32 ? F32 : z->D, oid;
    if (c->hf_loss_fp32) {
        oid = new_op(x);
        uint64_t f = alloc_t(x, -1, "logits_fp32", TV * F32, TC_ACT_SKEL, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "logits.float",
                              IN(x->logits), OUT(f), .flops = (double)TV, .br = TV * z->D,
                              .bw = TV * F32));
        free_t(x, x->logits);
        x->logits = f;
    }
    uint64_t src = x->logits, sh = 0;
    if (c->hf_loss_shift) {
        oid = new_op(x);
        sh = alloc_t(x, -1, "shift_logits", RV * E, TC_ACT_TRANS, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "shift_logits",
                              IN(x->logits), OUT(sh), .br = RV * E, .bw = RV * E));
        src = sh;
    }
    oid = new_op(x);
    x->logprobs = alloc_t(x, -1, "log_probs", RV * E, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "log_softmax", IN(src),
                          OUT(x->logprobs), .flops = (LOSS_FWD_FLOPS - 1) * (double)RV,
                          .br = RV * E, .bw = RV * E));
    if (sh) free_t(x, sh);
    oid = new_op(x);
    uint64_t lt = alloc_t(x, -1, "loss_tok", hf_rows(x) * F32, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "nll", IN(x->logprobs, x->labels),
                          OUT(lt), .flops = (double)hf_rows(x),
                          .br = hf_rows(x) * (E + TOKEN_ID_BYTES), .bw = hf_rows(x) * F32));
    free_t(x, lt);
    if (x->held_prev) {
        /* The previous step's outputs (and their logits) die when `outputs` is reassigned. */
        free_t(x, x->held_prev);
        x->held_prev = 0;
    }
}

/* The HF loss backward down to the gradient of the lm_head's output ([T, V], model dtype):
 * nll's zero-filled gradient, log-softmax's, the slice's zero-filled full-size gradient
 * (shift), the cast back (fp32). Frees the labels and the saved log-probabilities. */
static uint64_t hf_loss_bwd(gctx *x)
{
    const gsz *z = &x->z;
    const gen_config *c = x->c;
    uint64_t TV = z->T * z->V, RV = hf_rows(x) * z->V, E = c->hf_loss_fp32 ? F32 : z->D;
    uint64_t oid = new_op(x);
    uint64_t g1 = alloc_t(x, -1, "d_log_probs", RV * E, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "nll.bwd", IN(x->labels),
                          OUT(g1), .flops = (double)hf_rows(x),
                          .br = hf_rows(x) * TOKEN_ID_BYTES, .bw = RV * E));
    free_t(x, x->labels);
    oid = new_op(x);
    uint64_t g = alloc_t(x, -1, "d_shift_logits", RV * E, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "log_softmax.bwd",
                          IN(g1, x->logprobs), OUT(g), .flops = LOSS_BWD_FLOPS * (double)RV,
                          .br = 2 * RV * E, .bw = RV * E));
    free_t(x, g1);
    free_t(x, x->logprobs);
    x->logprobs = 0;
    if (c->hf_loss_shift) {
        oid = new_op(x);
        uint64_t g3 = alloc_t(x, -1, "d_logits_full", TV * E, TC_ACT_TRANS, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "shift_logits.bwd", IN(g),
                              OUT(g3), .br = RV * E, .bw = TV * E));
        free_t(x, g);
        g = g3;
    }
    if (c->hf_loss_fp32) {
        oid = new_op(x);
        uint64_t g4 = alloc_t(x, -1, "d_logits", TV * z->D, TC_ACT_TRANS, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "logits.float.bwd", IN(g),
                              OUT(g4), .flops = (double)TV, .br = TV * F32, .bw = TV * z->D));
        free_t(x, g);
        g = g4;
    }
    return g;
}

/* End of the backward: the logits held by the step's outputs are freed, or kept until the
 * next step's forward (hf_logits_hold). */
static void hf_release_logits(gctx *x, int last_iteration)
{
    if (!x->c->hf_loss || !x->logits) return;
    if (x->c->hf_logits_hold && !last_iteration) x->held_prev = x->logits;
    else free_t(x, x->logits);
    x->logits = 0;
}

/* ---- framework megatron: the head ---- */

/* Megatron's own ColumnParallelLinear (the output layer; TE's layers gather into fresh
 * tensors instead) all-gathers its sequence-parallel input into the global memory buffer
 * (LinearWithGradAccumulationAndAsyncCommunication: get_global_memory_buffer().get_tensor(...,
 * "mpu"), megatron/core/utils.py GlobalMemoryBuffer): made at its first use, kept for good, the
 * same buffer again for the backward's re-gather. */
static uint64_t mg_gather_mpu(gctx *x, const char *opname, uint64_t shard)
{
    const gsz *z = &x->z;
    if (z->tp == 1) return shard;
    uint64_t bytes = z->T * z->h * z->D, oid = new_op(x);
    if (!x->mpu) x->mpu = alloc_t(x, -1, "mpu_buffer", bytes, TC_WORKSPACE, (int64_t)oid);
    comm_op(x, oid, &OPS(.layer = -1, .what = opname, IN(shard), OUT(x->mpu)), ROOF_ALL_GATHER,
            bytes, z->tp, z->tp);
    return x->mpu;
}

/* Megatron's loss (language_module.py compute_language_model_loss:
 * vocab_parallel_cross_entropy(logits.float(), labels); cross_entropy.py _VocabParallel-
 * CrossEntropy.forward): an fp32 copy of the logits; "vocab_parallel_logits -
 * logits_max.unsqueeze(-1)" out of place, a second fp32 [T, V/tp] tensor that exp, sum and
 * div then turn into the softmax in place and that save_for_backward keeps; the per-token
 * reductions are all-reduced over tp. The fp32 copy dies when the loss function returns, the
 * bf16 logits when GPTModel.forward does: at the peak 10 bytes per logit are live. */
static void mg_loss_fwd(gctx *x)
{
    const gsz *z = &x->z;
    uint64_t TV = z->T * z->V, oid = new_op(x);
    /* loss megatron-inplace (cross_entropy.py from June 2024: "In-place subtraction reduces
     * memory pressure"): the fp32 copy is shifted in place and is the saved softmax. */
    uint64_t lf = alloc_t(x, -1, "logits_fp32", TV * F32, z->lossip ? TC_ACT_SKEL : TC_ACT_TRANS,
                          (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "logits.float", IN(x->logits),
                          OUT(lf), .flops = (double)TV, .br = TV * z->D, .bw = TV * F32));
    oid = new_op(x);
    uint64_t sm = lf;
    if (!z->lossip) sm = alloc_t(x, -1, "softmax", TV * F32, TC_ACT_SKEL, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "loss.shift", IN(lf), OUT(sm),
                          .flops = 2.0 * (double)TV, .br = 2 * TV * F32, .bw = TV * F32));
    oid = new_op(x);
    uint64_t lt = alloc_t(x, -1, "loss_tok", z->T * F32, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "loss", IN(sm, x->labels),
                          OUT(lt, sm), .flops = (LOSS_FWD_FLOPS - 2.0) * (double)TV,
                          .br = 2 * TV * F32 + z->T * TOKEN_ID_BYTES,
                          .bw = TV * F32 + z->T * F32));
    if (z->tp > 1) {
        oid = new_op(x);
        comm_op(x, oid, &OPS(.layer = -1, .what = "loss.ar", IN(lt), OUT(lt)), ROOF_ALL_REDUCE,
                3 * z->T * F32, z->tp, z->tp);
    }
    free_t(x, lt);
    if (sm != lf) free_t(x, lf);
    free_t(x, x->logits);
    x->logits = sm;
}

/* Its backward: the saved softmax becomes the gradient in place, the .float() cast's backward
 * makes a model-dtype copy for the output layer; the fp32 buffer dies with the node. */
static uint64_t mg_loss_bwd(gctx *x)
{
    const gsz *z = &x->z;
    uint64_t TV = z->T * z->V, sm = x->logits, oid = new_op(x);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "loss.bwd", IN(sm, x->labels),
                          OUT(sm), .flops = LOSS_BWD_FLOPS * (double)TV,
                          .br = TV * F32 + z->T * TOKEN_ID_BYTES, .bw = TV * F32));
    free_t(x, x->labels);
    oid = new_op(x);
    uint64_t dl = alloc_t(x, -1, "d_logits", TV * z->D, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "logits.float.bwd", IN(sm),
                          OUT(dl), .flops = (double)TV, .br = TV * F32, .bw = TV * z->D));
    free_t(x, sm);
    x->logits = 0;
    return dl;
}

/* The output layer's dummy weight gradient. Tied to the embedding, Megatron marks the weight
 * zero_out_wgrad (language_module.py) and the layer returns torch.zeros of its shape; autograd
 * holds it in the weight's input buffer until the embedding's gradient arrives at the end of
 * the backward (x->head_dummy, freed by embed_bwd). Untied, it is torch.empty and dropped at
 * once (the caller frees it). */
static uint64_t mg_head_dummy(gctx *x, uint64_t oid)
{
    const gsz *z = &x->z;
    int tied = x->c->model.tied_embeddings;
    uint64_t id = alloc_t(x, -1, "head.wgrad", z->V * z->h * z->D, TC_GRAD, (int64_t)oid);
    if (tied) x->head_dummy = id;
    return id;
}

static void head_fwd(gctx *x)
{
    const gsz *z = &x->z;
    mark(x, TM_LAYER, -1);
    zgather(x, grp_head(x), "params.ag");
    if (x->c->model.tied_embeddings) zgather(x, grp_embed(x), "params.ag");
    uint64_t stats = 0, fn = x->final_in;
    /* Encoders (post-norm BERT layout) have no final norm: the head reads the last output. */
    if (!x->c->model.is_encoder)
        fn = norm_fwd(x, -1, "final_norm", "final_norm_out", x->final_in, pw(x, grp_head(x), 0),
                      &stats);
    x->final_stats = stats;
    x->final_out = fn;
    uint64_t a = z->mg ? mg_gather_mpu(x, "final_norm.ag", fn)
                       : tp_gather(x, -1, "final_norm.ag", "final_norm_full", fn);
    uint64_t oid = new_op(x);
    /* A fused vocab-parallel cross entropy keeps the logits (softmax in place) for the
     * backward: a skeletal tensor of the head. Megatron's own keeps an fp32 softmax instead
     * and the logits are transient (mg_loss_fwd). */
    x->logits = alloc_t(x, -1, "logits", z->T * z->V * z->D,
                        z->lossmg ? TC_ACT_TRANS : TC_ACT_SKEL, (int64_t)oid);
    gemm_fwd(x, oid, &OPS(.layer = -1, .what = "lm_head", IN(a, head_weight(x)), OUT(x->logits)),
             z->T, z->V, z->h);
    if (z->tp > 1 && !z->mg) free_t(x, a);
    zrelease(x, grp_head(x));
    zrelease(x, grp_embed(x));
    if (x->c->hf_loss) {
        hf_loss_fwd(x);
        return;
    }
    if (z->lossmg) {
        mg_loss_fwd(x);
        return;
    }
    oid = new_op(x);
    uint64_t lt = alloc_t(x, -1, "loss_tok", z->T * F32, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "loss", IN(x->logits, x->labels),
                          OUT(lt, x->logits), .flops = LOSS_FWD_FLOPS * (double)(z->T * z->V),
                          .br = z->T * z->V * z->D + z->T * TOKEN_ID_BYTES,
                          .bw = z->T * z->V * z->D + z->T * F32));
    if (z->tp > 1) {
        /* max, sum of exp and target logit are all-reduced across the vocab shards. */
        oid = new_op(x);
        comm_op(x, oid, &OPS(.layer = -1, .what = "loss.ar", IN(lt), OUT(lt)), ROOF_ALL_REDUCE,
                3 * z->T * F32, z->tp, z->tp);
    }
    free_t(x, lt);
}

/* ---- backward ---- */

static uint64_t head_norm_bwd(gctx *x, uint64_t dfn);

static uint64_t head_bwd(gctx *x)
{
    const gsz *z = &x->z;
    mark(x, TM_LAYER, -1);
    uint64_t oid, dlog = x->logits;
    if (x->c->hf_loss) {
        dlog = hf_loss_bwd(x);
    } else if (z->lossmg) {
        dlog = mg_loss_bwd(x);
    } else {
        oid = new_op(x);
        /* The logits buffer becomes the logits gradient in place. */
        simple_op(x, oid, &OPS(.kind = TK_LOSS, .layer = -1, .what = "loss.bwd",
                              IN(x->logits, x->labels), OUT(x->logits),
                              .flops = LOSS_BWD_FLOPS * (double)(z->T * z->V),
                              .br = z->T * z->V * z->D + z->T * TOKEN_ID_BYTES,
                              .bw = z->T * z->V * z->D));
        free_t(x, x->labels);
    }
    ggroup *hg = grp_head(x), *eg = grp_embed(x);
    int tied = x->c->model.tied_embeddings;
    /* ZeRO-3: the head's parameters (and the tied embedding) are gathered again and the
     * head's gradient buffer made; a tied embedding's buffer lives until embed_bwd. */
    zgather(x, hg, "params.ag.bwd");
    if (tied) zgather(x, eg, "params.ag.bwd");
    zgrad_begin(x, hg);
    if (tied) zgrad_begin(x, eg);
    uint64_t wg = head_weight_grad(x);
    /* A frozen head (LoRA) needs no re-gathered input: only the data gradient is made. */
    uint64_t a = !wg ? 0
                 : z->mg ? mg_gather_mpu(x, "final_norm.ag.bwd", x->final_out)
                         : tp_gather(x, -1, "final_norm.ag.bwd", "final_norm_full.bwd",
                                     x->final_out);
    oid = new_op(x);
    uint64_t dfull = alloc_t(x, -1, z->tp > 1 ? "d_final_norm_full" : "d_final_norm",
                             z->T * z->h * z->D, TC_ACT_TRANS, (int64_t)oid);
    uint64_t dum = z->mg ? mg_head_dummy(x, oid) : 0;
    gemm_bwd(x, oid, &OPS(.layer = -1, .what = "lm_head.bwd",
                         IN(dlog, head_weight(x), wg ? a : 0), OUT(dfull, wg, dum)),
             z->T, z->V, z->h, wg != 0);
    if (z->mg) {
        /* Megatron's linear backward: the input gradient's reduce-scatter output is made
         * before the function returns; the logits' gradient dies after the node. */
        if (!tied) free_t(x, dum);
        uint64_t dfn = tp_scatter(x, -1, "lm_head.rs", -1, "d_final_norm", dfull,
                                  TC_ACT_TRANS);
        free_t(x, dlog);
        return head_norm_bwd(x, dfn);
    }
    free_t(x, dlog);
    if (z->tp > 1 && a) free_t(x, a);
    uint64_t dfn = tp_scatter(x, -1, "lm_head.rs", -1, "d_final_norm", dfull, TC_ACT_TRANS);
    return head_norm_bwd(x, dfn);
}

/* The final norm's backward (decoders) below the head's gradient dfn; frees the head's
 * saved tensors and, under ZeRO-3, its gathered parameters. */
static uint64_t head_norm_bwd(gctx *x, uint64_t dfn)
{
    const gsz *z = &x->z;
    ggroup *hg = grp_head(x), *eg = grp_embed(x);
    if (x->c->model.is_encoder) {
        free_t(x, x->final_in); /* == final_out */
        zgrad_end(x, hg);
        zrelease(x, hg);
        zrelease(x, eg);
        return dfn;
    }
    uint64_t oid = new_op(x);
    uint64_t n = z->Ts * z->h, ng = gw(x, hg, 0);
    uint64_t dx = alloc_t(x, -1, "d_final_in", n * z->D, TC_ACT_TRANS, (int64_t)oid);
    opspec o = OPS(.kind = TK_NORM, .layer = -1, .what = "final_norm.bwd",
                   IN(dfn, x->final_in, pw(x, hg, 0)), OUT(dx, ng),
                   .flops = NORM_BWD_FLOPS * (double)n, .br = 2 * n * z->D + z->normp * z->D,
                   .bw = n * z->D + (ng ? z->normp * z->GB : 0));
    if (x->final_stats) o.in[o.nin++] = x->final_stats;
    simple_op(x, oid, &o);
    free_t(x, dfn);
    if (x->final_stats) free_t(x, x->final_stats);
    free_t(x, x->final_out);
    free_t(x, x->final_in);
    zgrad_end(x, hg);
    zrelease(x, hg);
    zrelease(x, eg);
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
                   .br = 3 * n * z->D + z->normp * z->D,
                   .bw = n * z->D + (grad ? z->normp * z->GB : 0));
    if (stats) o.in[o.nin++] = stats;
    simple_op(x, oid, &o);
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
    o.dur_us = attn_us(x, 1, o.flops, o.br + o.bw);
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

/* Eager attention's backward, autograd's reverse order; each node frees what it saved when it
 * has run. bmm's backward is two GEMMs (grad x mat2^T, self^T x grad), 4 x T x s x hq FLOPs
 * for each of PV and QK^T; dropout's backward multiplies by the mask; softmax's is
 * p * (g - sum(g * p)); the mask step passes the gradient through (BERT's add; GPT-2's
 * where makes one more [b, H, s, s] copy, not emitted: the peak is the same) and the scale
 * divides out of place. Nothing is recomputed. */
static void attn_eager_bwd(gctx *x, int l, lstate *s, uint64_t dao, uint64_t *dq, uint64_t *dk,
                           uint64_t *dv)
{
    const gsz *z = &x->z;
    uint64_t E = eager_elems(z), D = z->D, QB = z->T * z->hq * D, KB = z->T * z->hkv * D;
    double g = eager_gemm_flops(z);
    free_t(x, s->ao); /* the projection's saved input; eager attention does not read it */
    uint64_t pin = s->edrop ? s->edrop : s->epr, oid = new_op(x);
    uint64_t dp = alloc_t(x, l, s->edrop ? "d_attn_drop" : "d_attn_probs", E * D, TC_ACT_TRANS,
                          (int64_t)oid);
    *dv = alloc_t(x, l, "dv", KB, TC_ACT_TRANS, (int64_t)oid);
    double us = x->m ? kern_us(x, TK_GEMM, g, QB + KB + E * D) +
                       kern_us(x, TK_GEMM, g, E * D + QB + KB) : -1.0;
    emit_op(x, oid, &OPS(.kind = TK_GEMM, .layer = l, .what = "attn.pv.bwd", IN(dao, pin, s->v),
                         OUT(dp, *dv), .flops = 2.0 * g, .br = 2 * QB + KB + E * D,
                         .bw = E * D + KB, .dur_us = us));
    free_t(x, dao);
    free_t(x, s->v);
    if (s->edrop) {
        free_t(x, s->edrop);
        oid = new_op(x);
        uint64_t dpr = alloc_t(x, l, "d_attn_probs", E * D, TC_ACT_TRANS, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "attn.dropout.bwd",
                              IN(dp, s->emask), OUT(dpr), .flops = 2.0 * (double)E,
                              .br = E * (D + 1), .bw = E * D));
        free_t(x, dp);
        free_t(x, s->emask);
        dp = dpr;
    }
    oid = new_op(x);
    uint64_t ds = alloc_t(x, l, "d_attn_masked", E * D, TC_ACT_TRANS, (int64_t)oid);
    opspec o = OPS(.kind = TK_ELEM, .layer = l, .what = "attn.softmax.bwd", IN(dp, s->epr),
                   OUT(ds), .flops = 4.0 * (double)E, .br = 2 * E * D, .bw = E * D);
    if (s->esc) o.in[o.nin++] = s->esc; /* kept, not read: PyTorch 1.9 hands it over unused */
    simple_op(x, oid, &o);
    free_t(x, dp);
    free_t(x, s->epr);
    if (s->esc) free_t(x, s->esc);
    s->esc = s->epr = s->emask = s->edrop = 0;
    uint64_t dsc = eager_elem(x, l, "attn.scale.bwd", "d_attn_scores", ds, TC_ACT_TRANS, 1.0);
    free_t(x, ds);
    oid = new_op(x);
    *dq = alloc_t(x, l, "dq", QB, TC_ACT_TRANS, (int64_t)oid);
    *dk = alloc_t(x, l, "dk", KB, TC_ACT_TRANS, (int64_t)oid);
    us = x->m ? kern_us(x, TK_GEMM, g, E * D + KB + QB) + kern_us(x, TK_GEMM, g, E * D + QB + KB)
              : -1.0;
    emit_op(x, oid, &OPS(.kind = TK_GEMM, .layer = l, .what = "attn.qk.bwd",
                         IN(dsc, s->q, s->k), OUT(*dq, *dk), .flops = 2.0 * g,
                         .br = E * D + QB + KB, .bw = QB + KB, .dur_us = us));
    free_t(x, dsc);
    free_t(x, s->q);
    free_t(x, s->k);
}

/* LoRA adapter backward of a linear whose forward was out = in W + (in A) B, after the base
 * data gradient went into din [T, K]: dB and d(mid) = dY B^T (one GEMM backward), dA and the
 * adapter's input gradient (another), then that gradient is added into din, as autograd
 * accumulates the two contributions to `in`. Frees the saved intermediate. */
static void lora_bwd(gctx *x, int l, const ggroup *g, int base, const char *what,
                     const uint64_t *dout, int ndout, uint64_t in, uint64_t mid, uint64_t din,
                     uint64_t N, uint64_t K)
{
    const gsz *z = &x->z;
    char nm[TRACE_NAME_MAX], op[TRACE_NAME_MAX];
    uint64_t r = (uint64_t)x->c->lora_rank;
    int a = G_LORA_A(base);
    uint64_t oid = new_op(x);
    MS_JOIN(nm, sizeof nm, what, ".lora_dmid");
    uint64_t dmid = alloc_t(x, l, nm, z->T * r * z->D, TC_ACT_TRANS, (int64_t)oid);
    MS_JOIN(op, sizeof op, what, ".lora_B.bwd");
    opspec o = OPS(.layer = l, .what = op, OUT(dmid, gw(x, g, a + 1)));
    for (int i = 0; i < ndout; i++) o.in[o.nin++] = dout[i];
    o.in[o.nin++] = mid;
    o.in[o.nin++] = pw(x, g, a + 1);
    gemm_bwd(x, oid, &o, z->T, N, r, gw(x, g, a + 1) != 0);
    oid = new_op(x);
    MS_JOIN(nm, sizeof nm, what, ".lora_din");
    uint64_t dx = alloc_t(x, l, nm, z->T * K * z->D, TC_ACT_TRANS, (int64_t)oid);
    MS_JOIN(op, sizeof op, what, ".lora_A.bwd");
    gemm_bwd(x, oid, &OPS(.layer = l, .what = op, IN(dmid, in, pw(x, g, a)),
                         OUT(dx, gw(x, g, a))), z->T, r, K, gw(x, g, a) != 0);
    free_t(x, dmid);
    free_t(x, mid);
    oid = new_op(x);
    uint64_t n = z->T * K;
    MS_JOIN(op, sizeof op, what, ".lora_dadd");
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = op, IN(din, dx), OUT(din),
                          .flops = (double)n, .br = 2 * n * z->D, .bw = n * z->D));
    free_t(x, dx);
}

/* Column-parallel GEMM backward whose input was the gathered norm output: re-gather it (SP
 * keeps only the shard), two GEMMs, reduce-scatter the input gradient. Frees dout(s), the
 * re-gathered copy and the saved shard. Returns the [Ts, h] input-gradient shard. A frozen
 * weight without an adapter needs no re-gathered input (data gradient only). */
static uint64_t col_parallel_bwd(gctx *x, int l, const ggroup *g, int slot, const colnames *nm,
                                 uint64_t saved_shard, const uint64_t *dout, int ndout,
                                 uint64_t N, uint64_t mid)
{
    const gsz *z = &x->z;
    uint64_t grad = gw(x, g, slot);
    uint64_t a = grad || mid ? tp_gather(x, l, nm->ag, nm->full, saved_shard) : 0;
    uint64_t oid = new_op(x);
    uint64_t din = alloc_t(x, l, z->tp > 1 ? nm->din_full : nm->din, z->T * z->h * z->D,
                           TC_ACT_TRANS, (int64_t)oid);
    opspec o = OPS(.layer = l, .what = nm->bwd, OUT(din, grad));
    for (int i = 0; i < ndout; i++) o.in[o.nin++] = dout[i];
    o.in[o.nin++] = pw(x, g, slot);
    if (grad) o.in[o.nin++] = a;
    gemm_bwd(x, oid, &o, z->T, N, z->h, grad != 0);
    if (mid) lora_bwd(x, l, g, slot, nm->base, dout, ndout, a, mid, din, N, z->h);
    for (int i = 0; i < ndout; i++) free_t(x, dout[i]);
    if (z->tp > 1 && a) free_t(x, a);
    free_t(x, saved_shard);
    return tp_scatter(x, l, nm->rs, l, nm->din, din, TC_ACT_TRANS);
}

/* Row-parallel GEMM backward: gather the output gradient, dgrad into a [T, K] tensor, wgrad
 * with the saved input (and the LoRA adapter's backward). Frees the gathered copy (not dout:
 * the residual branch still needs it) and, if free_saved, the saved input. */
static uint64_t row_parallel_bwd(gctx *x, int l, const ggroup *g, int slot, const char *base,
                                 const char *op, const char *agop, const char *full,
                                 const char *dname, uint64_t dout, uint64_t saved, uint64_t K,
                                 int free_saved, uint64_t mid)
{
    const gsz *z = &x->z;
    uint64_t grad = gw(x, g, slot);
    uint64_t d = tp_gather(x, l, agop, full, dout);
    uint64_t oid = new_op(x);
    uint64_t din = alloc_t(x, l, dname, z->T * K * z->D, TC_ACT_TRANS, (int64_t)oid);
    gemm_bwd(x, oid, &OPS(.layer = l, .what = op, IN(d, pw(x, g, slot), grad ? saved : 0),
                         OUT(din, grad)), z->T, z->h, K, grad != 0);
    if (mid) lora_bwd(x, l, g, slot, base, &d, 1, saved, mid, din, z->h, K);
    if (z->tp > 1) free_t(x, d);
    if (free_saved) free_t(x, saved);
    return din;
}

/* ---- framework megatron: one layer's backward (docs/GENERATOR.md §9) ---- */

/* The weight-shaped gradient TE (and Megatron's own linear layers) hand to autograd when the
 * weight gradient went straight into main_grad (fuse_wgrad_accumulation: "wgrad =
 * torch.empty(weight.main_grad.shape, dtype=weight.dtype)", layernorm_linear.py / linear.py);
 * Megatron's DDP hook (distributed_data_parallel.py, param_hook) sets param.grad = None right
 * after AccumulateGrad, so it lives only across the end of the backward op. */
static uint64_t mg_dummy(gctx *x, int l, const ggroup *g, int slot, const char *base,
                         uint64_t oid)
{
    char nm[TRACE_NAME_MAX];
    MS_JOIN(nm, sizeof nm, base, ".wgrad");
    return alloc_t(x, l, nm, g->pbytes[slot], TC_GRAD, (int64_t)oid);
}

/* TE Linear (row parallel with SP) backward: the output gradient gathered (grad_output_
 * preprocess), the data gradient, the weight gradient into main_grad, the dummy; the gathered
 * copy dies when the function returns, the saved input after the node (if free_saved). */
static uint64_t mg_row_bwd(gctx *x, int l, const ggroup *g, int slot, const char *base,
                           uint64_t dout, uint64_t saved, uint64_t K, int free_saved,
                           const char *dname)
{
    const gsz *z = &x->z;
    char op[TRACE_NAME_MAX], ag[TRACE_NAME_MAX], full[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, base, ".bwd");
    MS_JOIN(ag, sizeof ag, base, ".ag.bwd");
    MS_JOIN(full, sizeof full, "d_", base, "_out_full");
    uint64_t d = tp_gather(x, l, ag, full, dout);
    uint64_t oid = new_op(x);
    uint64_t din = alloc_t(x, l, dname, z->T * K * z->D, TC_ACT_TRANS, (int64_t)oid);
    uint64_t dum = mg_dummy(x, l, g, slot, base, oid);
    gemm_bwd(x, oid, &OPS(.layer = l, .what = op, IN(d, pw(x, g, slot), saved),
                         OUT(din, gw(x, g, slot), dum)), z->T, z->h, K, 1);
    if (z->tp > 1) free_t(x, d);
    if (free_saved) free_t(x, saved);
    free_t(x, dum);
    return din;
}

/* TE LayerNormLinear (column parallel with SP) backward, in its order: the saved LN output
 * shard re-gathered, the data gradient [T, h], its reduce-scatter issued before the weight
 * gradient (both live together), the gathered input cleared after the weight gradient, the
 * fused LN backward into a new [Ts, h] gradient, the dummy weight gradient. Then autograd
 * adds this LN-branch gradient to the residual gradient dres: in place (InputBuffer
 * accumulate; newname NULL), or for the layer input into a new tensor `newname` (the
 * checkpoint's input gradient: AccumulateGrad clones a gradient that is still referenced).
 * Frees the incoming gradients, the saved LN output and statistics. */
static uint64_t mg_col_bwd(gctx *x, int l, const ggroup *g, int slot, const char *base,
                           const char *src, const uint64_t *dout, int ndout, uint64_t N,
                           uint64_t saved_ln, uint64_t ln_in, uint64_t stats, int ln_slot,
                           uint64_t dres, const char *newname)
{
    const gsz *z = &x->z;
    char n1[TRACE_NAME_MAX], n2[TRACE_NAME_MAX];
    MS_JOIN(n1, sizeof n1, src, ".ag.bwd");
    MS_JOIN(n2, sizeof n2, src, "_full.bwd");
    uint64_t a = tp_gather(x, l, n1, n2, saved_ln);
    MS_JOIN(n1, sizeof n1, base, ".bwd");
    MS_JOIN(n2, sizeof n2, "d_", src, "_out", z->tp > 1 ? "_full" : "");
    uint64_t oid = new_op(x);
    uint64_t dfull = alloc_t(x, l, n2, z->T * z->h * z->D, TC_ACT_TRANS, (int64_t)oid);
    opspec o = OPS(.layer = l, .what = n1, OUT(dfull, gw(x, g, slot)));
    for (int i = 0; i < ndout; i++) o.in[o.nin++] = dout[i];
    o.in[o.nin++] = pw(x, g, slot);
    o.in[o.nin++] = a;
    gemm_bwd(x, oid, &o, z->T, N, z->h, 1);
    MS_JOIN(n1, sizeof n1, base, ".rs.bwd");
    MS_JOIN(n2, sizeof n2, "d_", src, "_out");
    uint64_t drs = tp_scatter(x, l, n1, l, n2, dfull, TC_ACT_TRANS);
    if (z->tp > 1) free_t(x, a);
    oid = new_op(x);
    uint64_t n = z->Ts * z->h;
    MS_JOIN(n1, sizeof n1, src, ".bwd");
    MS_JOIN(n2, sizeof n2, "d_", src);
    uint64_t dln = alloc_t(x, l, n2, n * z->D, TC_ACT_TRANS, (int64_t)oid);
    uint64_t dum = mg_dummy(x, l, g, slot, base, oid);
    uint64_t lg = gw(x, g, ln_slot);
    opspec q = OPS(.kind = TK_NORM, .layer = l, .what = n1, IN(drs, ln_in, pw(x, g, ln_slot)),
                   OUT(dln, lg, dum), .flops = NORM_BWD_FLOPS * (double)n,
                   .br = 2 * n * z->D + z->normp * z->D,
                   .bw = n * z->D + (lg ? z->normp * z->GB : 0));
    if (stats) q.in[q.nin++] = stats;
    simple_op(x, oid, &q);
    free_t(x, drs);
    free_t(x, dum);
    for (int i = 0; i < ndout; i++) free_t(x, dout[i]);
    free_t(x, saved_ln);
    if (stats) free_t(x, stats);
    MS_JOIN(n1, sizeof n1, src, ".res");
    oid = new_op(x);
    uint64_t out = newname ? alloc_t(x, l, newname, n * z->D, TC_ACT_TRANS, (int64_t)oid) : dres;
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = n1, IN(dln, dres), OUT(out),
                          .flops = (double)n, .br = 2 * n * z->D, .bw = n * z->D));
    free_t(x, dln);
    if (newname) free_t(x, dres);
    return out;
}

/* cp = 1: flash_attn_varlen_func's backward: dq, dk, dv (empty_like), the fp32 dq accumulator
 * and softmax_d as a workspace; the saved q, k, v, output and LSE freed after it. */
static void mg_flash_bwd(gctx *x, int l, lstate *s, uint64_t dao, uint64_t d[3])
{
    const gsz *z = &x->z;
    uint64_t QB = z->T * z->hq * z->D, KB = z->T * z->hkv * z->D, L = mg_lse_bytes(z);
    uint64_t oid = new_op(x);
    d[0] = alloc_t(x, l, "dq", QB, TC_ACT_TRANS, (int64_t)oid);
    d[1] = alloc_t(x, l, "dk", KB, TC_ACT_TRANS, (int64_t)oid);
    d[2] = alloc_t(x, l, "dv", KB, TC_ACT_TRANS, (int64_t)oid);
    uint64_t ws = alloc_t(x, l, "attn_bwd_ws", z->T * z->hq * F32 + L, TC_WORKSPACE,
                          (int64_t)oid);
    opspec o = OPS(.kind = TK_ATTN, .layer = l, .what = "attn.bwd",
                   IN(dao, s->q, s->k, s->v, s->ao, s->lse), OUT(d[0], d[1], d[2]));
    o.flops = x->c->attn_bwd_factor * attn_fwd_flops(z);
    o.br = 3 * QB + 2 * KB + L + 2 * (z->T * z->hq * F32 + L);
    o.bw = QB + 2 * KB;
    o.dur_us = attn_us(x, 1, o.flops, o.br + o.bw);
    emit_op(x, oid, &o);
    free_t(x, ws);
    free_t(x, s->ao);
    free_t(x, s->lse);
    free_t(x, s->q);
    free_t(x, s->k);
    free_t(x, s->v);
    free_t(x, dao);
}

/* cp > 1: AttnFuncWithCP.backward on the last CP rank: the second half of the LSE made
 * contiguous (L/2), dq (Q), two p2p buffers of [2, 2, ...] (each twice the KV chunk: KV and
 * dKV travel together), then per step the half KV chunk made contiguous (steps < cp-1), dq_
 * and dkv_ (Python rebinding keeps the current and the previous step's), FlashAttention's
 * fp32 dq accumulator and softmax_d. It returns dq and dk, dv as views of the first p2p
 * buffer (d[1]), which outlives the function; the rest is freed. */
static void mg_ring_bwd(gctx *x, int l, lstate *s, uint64_t dao, uint64_t d[3])
{
    const gsz *z = &x->z;
    int cp = z->cp;
    uint64_t QB = z->T * z->hq * z->D, KB = z->T * z->hkv * z->D, L = mg_lse_bytes(z);
    uint64_t chunk = 2 * KB;
    uint64_t oid_r = new_op(x), oid_a = new_op(x);
    uint64_t lh = alloc_t(x, l, "attn_lse_half", L / 2, TC_ACT_TRANS, (int64_t)oid_a);
    d[0] = alloc_t(x, l, "dq", QB, TC_ACT_TRANS, (int64_t)oid_a);
    uint64_t pb0 = alloc_t(x, l, "dkv_buf0", 2 * chunk, TC_ACT_TRANS, (int64_t)oid_r);
    uint64_t pb1 = alloc_t(x, l, "dkv_buf1", 2 * chunk, TC_ACT_TRANS, (int64_t)oid_r);
    comm_op(x, oid_r, &OPS(.layer = l, .what = "cp_ring_bwd.ovl", IN(s->k), OUT(pb0, pb1)),
            ROOF_RING_EXCHANGE, 2 * chunk, cp, z->tp * cp);
    uint64_t st[6];
    uint32_t n = 0;
    for (int i = cp >= 2 ? cp - 2 : 0; i < cp; i++) {
        if (i < cp - 1) st[n++] = alloc_t(x, l, "kv_half_bwd", KB, TC_ACT_TRANS, (int64_t)oid_a);
        st[n++] = alloc_t(x, l, "dq_step", QB, TC_ACT_TRANS, (int64_t)oid_a);
        st[n++] = alloc_t(x, l, "dkv_step", i < cp - 1 ? KB : chunk, TC_ACT_TRANS,
                          (int64_t)oid_a);
    }
    uint64_t wsb = z->T * z->hq * F32 + L;
    uint64_t ws = alloc_t(x, l, "attn_bwd_ws", wsb, TC_WORKSPACE, (int64_t)oid_a);
    opspec o = OPS(.kind = TK_ATTN, .layer = l, .what = "attn.bwd",
                   IN(dao, s->q, s->k, s->ao, s->lse, lh, pb0, pb1), OUT(d[0], pb0, pb1));
    for (uint32_t k = 0; k < n; k++) o.out[o.nout++] = st[k];
    o.flops = x->c->attn_bwd_factor * attn_fwd_flops(z);
    o.br = z->T * (3 * z->hq + 2 * z->hkv) * z->D + L + 2 * wsb + (uint64_t)(cp - 1) * 2 * chunk;
    o.bw = z->T * (z->hq + 2 * z->hkv) * z->D + (uint64_t)cp * (QB + chunk);
    o.dur_us = attn_us(x, 1, o.flops, o.br + o.bw);
    emit_op(x, oid_a, &o);
    free_t(x, ws);
    for (uint32_t k = 0; k < n; k++) free_t(x, st[k]);
    free_t(x, pb1);
    free_t(x, lh);
    free_t(x, s->ao);
    free_t(x, s->lse);
    free_t(x, s->q);
    free_t(x, s->k);
    free_t(x, dao);
    d[1] = pb0;
    d[2] = 0;
}

/* A MoE layer's MLP half in Megatron's backward: the MoE block, then the pre-MLP norm's
 * backward (TENorm, not fused with a linear here) with the residual branch into a new
 * gradient, which replaces dx (freed) for the attention half. */
static uint64_t mg_moe_bwd(gctx *x, int l, const ggroup *g, lstate *s, uint64_t dx)
{
    uint64_t dln2 = moe_bwd(x, l, g, s, dx);
    uint64_t dr1 = norm_bwd(x, l, "ln2.bwd", "d_resid1", dln2, s->r1, pw(x, g, G_LN2), s->ln2s,
                            dx, gw(x, g, G_LN2));
    free_t(x, dln2);
    free_t(x, dx);
    if (s->ln2s) free_t(x, s->ln2s);
    return dr1;
}

static uint64_t mg_layer_bwd(gctx *x, int l, uint64_t dx)
{
    const gsz *z = &x->z;
    ggroup *g = grp_layer(x, l);
    lstate *s = &x->ls[l];
    uint64_t QB = z->T * z->hq * z->D, KB = z->T * z->hkv * z->D;
    mark(x, TM_LAYER, l);
    if (model_layer_is_moe(&x->c->model, (uint64_t)l)) {
        dx = mg_moe_bwd(x, l, g, s, dx);
    } else {
        /* MLP: TE Linear fc2, the fused bias-GeLU (GeLUFunction), TE LayerNormLinear fc1 */
        uint64_t dact = mg_row_bwd(x, l, g, G_FC2, "fc2", dx, s->act, z->f, 1, "d_act");
        uint64_t oid = new_op(x);
        uint64_t dfc1 = alloc_t(x, l, "d_fc1", z->T * z->f1 * z->D, TC_ACT_TRANS, (int64_t)oid);
        simple_op(x, oid, &OPS(.kind = TK_ACT, .layer = l, .what = "act.bwd", IN(dact, s->fc1),
                              OUT(dfc1), .flops = ACT_BWD_FLOPS * (double)(z->T * z->f),
                              .br = z->T * (z->f + z->f1) * z->D, .bw = z->T * z->f1 * z->D));
        free_t(x, dact);
        free_t(x, s->fc1);
        mg_col_bwd(x, l, g, G_FC1, "fc1", "ln2", &dfc1, 1, z->f1, s->ln2, s->r1, s->ln2s, G_LN2,
                   dx, NULL);
    }
    free_t(x, s->r1);
    /* attention: TE Linear proj (its saved input is the attention output, still held by the
     * attention), the attention, RoPE's backward, the split's backward (a cat into one
     * [T, h_q + 2 h_kv] gradient), TE LayerNormLinear qkv */
    uint64_t dao = mg_row_bwd(x, l, g, G_PROJ, "proj", dx, s->ao, z->hq, 0, "d_attn_out");
    uint64_t d[3];
    if (z->cp == 1) mg_flash_bwd(x, l, s, dao, d);
    else mg_ring_bwd(x, l, s, dao, d);
    uint64_t oid = new_op(x);
    uint64_t dqr = alloc_t(x, l, "dq_rope", QB, TC_ACT_TRANS, (int64_t)oid);
    uint64_t dkr = alloc_t(x, l, "dk_rope", KB, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "rope.bwd", IN(d[0], d[1]),
                          OUT(dqr, dkr), .flops = ROPE_FLOPS * (double)(z->T * (z->hq + z->hkv)),
                          .br = QB + KB, .bw = QB + KB));
    free_t(x, d[0]);
    if (d[2]) free_t(x, d[1]); /* cp = 1: dk; with CP dk and dv are views of one buffer */
    oid = new_op(x);
    uint64_t dqkv = alloc_t(x, l, "d_qkv", QB + 2 * KB, TC_ACT_TRANS, (int64_t)oid);
    uint64_t dv = d[2] ? d[2] : d[1];
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = l, .what = "qkv_split.bwd",
                          IN(dqr, dkr, dv), OUT(dqkv), .br = QB + 2 * KB, .bw = QB + 2 * KB));
    free_t(x, dqr);
    free_t(x, dkr);
    free_t(x, dv);
    uint64_t din = mg_col_bwd(x, l, g, G_QKV, "qkv", "ln1", &dqkv, 1, z->hq + 2 * z->hkv,
                              s->ln1, s->in, s->ln1s, G_LN1, dx, "d_input");
    free_t(x, s->in); /* the checkpoint's saved input, released when its backward ends */
    return din;
}

/* The dense MLP's backward from dx (not freed): fc2, activation, fc1 with the ln2 output
 * re-gathered; returns the [Ts, h] gradient of the ln2 output. */
static uint64_t mlp_bwd(gctx *x, int l, const ggroup *g, lstate *s, uint64_t dx)
{
    const gsz *z = &x->z;
    uint64_t dact = row_parallel_bwd(x, l, g, G_FC2, "fc2", "fc2.bwd", "fc2.ag.bwd",
                                     "d_fc2_out_full", "d_act", dx, s->act, z->f, 1, s->mid[3]);
    uint64_t oid = new_op(x);
    uint64_t dfc1 = alloc_t(x, l, "d_fc1", z->T * z->f1 * z->D, TC_ACT_TRANS, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_ACT, .layer = l, .what = "act.bwd", IN(dact, s->fc1),
                          OUT(dfc1), .flops = ACT_BWD_FLOPS * (double)(z->T * z->f),
                          .br = z->T * (z->f + z->f1) * z->D, .bw = z->T * z->f1 * z->D));
    free_t(x, dact);
    free_t(x, s->fc1);
    return col_parallel_bwd(x, l, g, G_FC1, &COL_FC1, s->ln2, &dfc1, 1, z->f1, s->mid[2]);
}

static uint64_t layer_bwd(gctx *x, int l, uint64_t dx)
{
    const gsz *z = &x->z;
    ggroup *g = grp_layer(x, l);
    lstate *s = &x->ls[l];
    if (z->mg) return mg_layer_bwd(x, l, dx);
    mark(x, TM_LAYER, l);
    zgather(x, g, "params.ag.bwd");
    zgrad_begin(x, g);
    /* MLP block */
    uint64_t dln2 = model_layer_is_moe(&x->c->model, (uint64_t)l) ? moe_bwd(x, l, g, s, dx)
                                                                   : mlp_bwd(x, l, g, s, dx);
    uint64_t dr1 = norm_bwd(x, l, "ln2.bwd", "d_resid1", dln2, s->r1, pw(x, g, G_LN2), s->ln2s,
                            dx, gw(x, g, G_LN2));
    free_t(x, dln2);
    free_t(x, dx);
    free_t(x, s->r1);
    if (s->ln2s) free_t(x, s->ln2s);
    /* attention block */
    uint64_t dao = row_parallel_bwd(x, l, g, G_PROJ, "proj", "proj.bwd", "proj.ag.bwd",
                                    "d_proj_out_full", "d_attn_out", dr1, s->ao, z->hq,
                                    0 /* attn_out: still needed by attn.bwd */, s->mid[1]);
    uint64_t dqkv[3];
    if (x->c->attn_impl == GEN_ATTN_EAGER)
        attn_eager_bwd(x, l, s, dao, &dqkv[0], &dqkv[1], &dqkv[2]);
    else
        attn_bwd(x, l, s, dao, &dqkv[0], &dqkv[1], &dqkv[2]);
    uint64_t dln1 = col_parallel_bwd(x, l, g, G_QKV, &COL_QKV, s->ln1, dqkv, 3, z->hq + 2 * z->hkv,
                                     s->mid[0]);
    uint64_t din = norm_bwd(x, l, "ln1.bwd", "d_input", dln1, s->in, pw(x, g, G_LN1), s->ln1s,
                            dr1, gw(x, g, G_LN1));
    free_t(x, dln1);
    free_t(x, dr1);
    free_t(x, s->in);
    if (s->ln1s) free_t(x, s->ln1s);
    zgrad_end(x, g);
    zrelease(x, g);
    return din;
}

/* Megatron's embedding backward: the sequence-parallel scatter's backward gathers the
 * gradient; the lookup "self.weight[masked_input]" has an index backward that makes a dense
 * zero-filled weight-shaped gradient (model dtype) and scatters into it; autograd adds the
 * output layer's held zeros (tied weights) to it and Megatron's DDP hook adds the sum into
 * main_grad; both dense tensors are then freed. */
static void mg_embed_bwd(gctx *x, uint64_t dx0)
{
    const gsz *z = &x->z;
    ggroup *e = grp_embed(x);
    uint64_t d = tp_gather(x, -1, "embed.ag.bwd", "d_embed_full", dx0);
    uint64_t vh = z->V * z->h, oid = new_op(x);
    uint64_t dense = alloc_t(x, -1, "embed.wgrad", vh * z->D, TC_GRAD, (int64_t)oid);
    simple_op(x, oid, &OPS(.kind = TK_EMBED, .layer = -1, .what = "embed.bwd", IN(d, x->tokens),
                          OUT(dense), .flops = (double)(z->T * z->h),
                          .br = z->T * z->h * z->D + z->T * TOKEN_ID_BYTES,
                          .bw = vh * z->D + z->T * z->h * z->D));
    if (z->tp > 1) free_t(x, d);
    oid = new_op(x);
    uint64_t hd = x->head_dummy;
    simple_op(x, oid, &OPS(.kind = TK_ELEM, .layer = -1, .what = "embed.grad_acc",
                          IN(dense, hd, e->grad), OUT(e->grad), .flops = (double)vh,
                          .br = vh * (z->D * (hd ? 2 : 1) + z->GB), .bw = vh * z->GB));
    free_t(x, dense);
    if (hd) free_t(x, hd);
    x->head_dummy = 0;
}

static void embed_bwd(gctx *x, uint64_t dx0)
{
    const gsz *z = &x->z;
    ggroup *e = grp_embed(x);
    mark(x, TM_LAYER, -1);
    /* A frozen embedding (LoRA) has no backward. The embedding's backward reads no weights,
     * so ZeRO-3 gathers none here. */
    if (e->ntrain && x->z.mg) {
        mg_embed_bwd(x, dx0);
    } else if (e->ntrain) {
        zgrad_begin(x, e);
        uint64_t d = tp_gather(x, -1, "embed.ag.bwd", "d_embed_full", dx0);
        uint64_t oid = new_op(x);
        simple_op(x, oid, &OPS(.kind = TK_EMBED, .layer = -1, .what = "embed.bwd",
                              IN(d, x->tokens), OUT(gw(x, e, 0)), .flops = (double)(z->T * z->h),
                              .br = z->T * z->h * z->D + z->T * TOKEN_ID_BYTES,
                              .bw = z->T * z->h * z->GB));
        if (z->tp > 1) free_t(x, d);
    }
    free_t(x, dx0);
    free_t(x, x->tokens);
    zgrad_end(x, e);
}

/* A MoE layer's expert gradients, reduced over the ranks holding the same experts (the
 * expert data-parallel group, edp_ranks), which span the whole data-parallel extent. */
static void expert_grad_reduce(gctx *x, ggroup *g, roof_coll kind)
{
    int ranks = edp_ranks(&x->z);
    if (!g->egrad || ranks <= 1) return;
    char nm[TRACE_NAME_MAX];
    MS_JOIN(nm, sizeof nm, "expert_grad.", kind == ROOF_ALL_REDUCE ? "dp_ar" : "dp_rs");
    uint64_t oid = new_op(x);
    comm_op(x, oid, &OPS(.layer = g->layer, .what = nm, IN(g->egrad), OUT(g->egrad)), kind,
            g->entrain * x->z.GB, ranks, x->z.tp * x->z.cp * x->z.dp);
}

/* Megatron's gradient reduction after the backward (finalize_model_grads -> DDP
 * finish_grad_sync): over the data-parallel group with context parallelism (dp*cp ranks hold
 * the same parameters), all-reduced in place, or reduce-scattered with the distributed
 * optimizer. One collective per gradient buffer (Megatron buckets them; without
 * overlap_grad_reduce the whole buffer is one bucket). */
static void mg_grad_reduce(gctx *x)
{
    int ranks = x->z.dp * x->z.cp, span = x->z.tp * x->z.cp * x->z.dp;
    if (ranks <= 1) return;
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        if (g->grad) {
            char nm[TRACE_NAME_MAX];
            MS_JOIN(nm, sizeof nm, g->prefix ? g->prefix : "grad", ".",
                    x->c->dist_opt ? "dp_rs" : "dp_ar");
            uint64_t oid = new_op(x);
            comm_op(x, oid, &OPS(.layer = g->layer, .what = nm, IN(g->grad), OUT(g->grad)),
                    x->c->dist_opt ? ROOF_REDUCE_SCATTER : ROOF_ALL_REDUCE,
                    g->ntrain * x->z.GB, ranks, span);
        }
        expert_grad_reduce(x, g, x->c->dist_opt ? ROOF_REDUCE_SCATTER : ROOF_ALL_REDUCE);
    }
}

/* ZeRO-1 / Megatron distributed optimizer: gradients are reduce-scattered over dp at the end
 * of the backward (Megatron overlaps this per bucket; here it follows the last layer). With
 * offload this rank's gradient shard is then copied to the host. ZeRO-3 reduces per layer in
 * the backward instead (zgrad_end). */
static void dp_reduce(gctx *x)
{
    if (x->c->zero3) return;
    if (x->z.mg) {
        mg_grad_reduce(x);
        return;
    }
    int span = x->z.tp * x->z.cp * x->z.dp;
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        expert_grad_reduce(x, g, ROOF_REDUCE_SCATTER);
        if (!g->grad) continue;
        char nm[TRACE_NAME_MAX];
        if (x->z.dp > 1) {
            MS_JOIN(nm, sizeof nm, g->prefix ? g->prefix : "grad", ".dp_rs");
            uint64_t oid = new_op(x);
            comm_op(x, oid, &OPS(.layer = g->layer, .what = nm, IN(g->grad), OUT(g->grad)),
                    ROOF_REDUCE_SCATTER, g->ntrain * x->z.GB, x->z.dp, span);
        }
        if (x->c->offload) {
            gname(nm, g, "grad.d2h");
            d2h_op(x, g->layer, nm, g->grad, dp_share(x, g->ntrain) * x->z.GB);
        }
    }
}

/* ---- optimizer ---- */

/* Adam on the host (ZeRO-Offload's CPU Adam over this rank's shard), then the updated fp16
 * parameters copied back into the GPU parameters (ZeRO-3: the shard). The host op touches no
 * device memory; "host" in its name marks it for readers of the trace. */
static void host_optimizer(gctx *x, ggroup *g, uint64_t shard)
{
    const gsz *z = &x->z;
    char nm[TRACE_NAME_MAX];
    gname(nm, g, "optim.host");
    uint64_t oid = new_op(x);
    double us = -1.0;
    if (x->m) {
        /* the runtime's own host step when the trace is for its kernels (checked present) */
        double rate = x->c->roof.kernels == ROOF_KERNELS_RUNTIME
                          ? x->m->rt_host_adam_params_per_s : x->m->host_adam_params_per_s;
        us = rate > 0 ? (double)shard / rate * 1e6 : 0.0;
    }
    emit_op(x, oid, &OPS(.kind = TK_OPTIM, .layer = g->layer, .what = nm,
                         .flops = ADAM_FLOPS * (double)shard, .dur_us = us));
    gname(nm, g, "param.h2d");
    oid = new_op(x);
    opspec o = OPS(.kind = TK_COMM, .layer = g->layer, .what = nm, .bw = shard * z->D);
    if (x->c->zero3) o.out[o.nout++] = g->shard;
    for (int j = 0; j < g->np && !x->c->zero3; j++)
        if (g->trains[j]) o.out[o.nout++] = g->param[j];
    if (x->m) o.dur_us = x->m->link_h2d_Bps > 0
                             ? (double)(shard * z->D) / x->m->link_h2d_Bps * 1e6 : 0.0;
    else o.dur_us = -1.0;
    emit_op(x, oid, &o);
}

/* The optimizer op's gradient and state operands beyond the group's dense gradient (its
 * first input): the dense shard, then the experts' gradient and shard (MoE layers). */
static void opt_states_io(const ggroup *g, opspec *o)
{
    if (g->egrad) o->in[o->nin++] = g->egrad;
    if (g->opt) {
        o->in[o->nin++] = g->opt;
        o->out[o->nout++] = g->opt;
    }
    if (g->eopt) {
        o->in[o->nin++] = g->eopt;
        o->out[o->nout++] = g->eopt;
    }
}

/* The all-gather of a group's updated parameter shards over `ranks`: its dense trained
 * parameters ("<group>.dp_ag"), or with experts 1 its experts ("expert_param.dp_ag"); none
 * when ranks <= 1 or the group has none. */
static void param_gather(gctx *x, ggroup *g, int experts, int ranks)
{
    const gsz *z = &x->z;
    uint64_t n = experts ? g->entrain : g->ntrain;
    if (ranks <= 1 || !n) return;
    char nm[TRACE_NAME_MAX];
    MS_JOIN(nm, sizeof nm, experts ? "expert_param" : g->prefix ? g->prefix
                                                                              : "param", ".dp_ag");
    opspec c = OPS(.layer = g->layer, .what = nm);
    for (int j = 0; j < g->np; j++) {
        if (!g->trains[j] || g->expert[j] != experts) continue;
        c.in[c.nin++] = g->param[j];
        c.out[c.nout++] = g->param[j];
    }
    comm_op(x, new_op(x), &c, ROOF_ALL_GATHER, n * z->D, ranks, z->tp * z->cp * z->dp);
}

/* Megatron's optimizer step for one group: apex FusedAdam makes each parameter's exp_avg and
 * exp_avg_sq (zeros_like, fp32) in its first step, so in the first iteration they are carved
 * out of whatever the caching allocator holds after a forward and backward; the fp32 master
 * copy was made with the optimizer. With the distributed optimizer every state is this
 * rank's 1/(dp*cp) share of the parameter, and the updated parameters are all-gathered. */
static void mg_optimizer(gctx *x, ggroup *g, uint64_t shard)
{
    const gsz *z = &x->z;
    char nm[TRACE_NAME_MAX];
    uint64_t mb = mg_moment_bytes(z);
    if (x->iter == 0 && mb) {
        static const char *const mn[2] = { "exp_avg", "exp_avg_sq" };
        for (int j = 0; j < g->np; j++) {
            if (!g->pbytes[j] || !g->trains[j]) continue;
            for (int k = 0; k < 2; k++) {
                MS_JOIN(nm, sizeof nm, g->pname[j], ".", mn[k]);
                g->mom[j][k] = alloc_t(x, g->layer, nm,
                                       slot_opt_share(x, g, j, g->pbytes[j] / z->D) * mb,
                                       TC_OPTSTATE, -1);
            }
        }
    }
    gname(nm, g, "optim");
    uint64_t oid = new_op(x);
    opspec o = OPS(.kind = TK_OPTIM, .layer = g->layer, .what = nm, IN(g->grad));
    opt_states_io(g, &o);
    for (int j = 0; j < g->np; j++)
        for (int k = 0; k < 2; k++)
            if (g->mom[j][k]) {
                o.in[o.nin++] = g->mom[j][k];
                o.out[o.nout++] = g->mom[j][k];
            }
    for (int j = 0; j < g->np; j++) {
        if (!g->trains[j]) continue;
        o.in[o.nin++] = g->param[j];
        o.out[o.nout++] = g->param[j];
    }
    o.flops = ADAM_FLOPS * (double)shard;
    o.br = shard * (z->GB + z->OB + z->D);
    o.bw = shard * (z->OB + z->D);
    simple_op(x, oid, &o);
    int ranks = z->dp * z->cp;
    if (x->c->dist_opt && ranks > 1 && g->ntrain)
        param_gather(x, g, 0, ranks);
    if (x->c->dist_opt) param_gather(x, g, 1, edp_ranks(z));
}

static void optimizer(gctx *x)
{
    const gsz *z = &x->z;
    for (size_t i = 0; i < x->ng; i++) {
        ggroup *g = &x->g[i];
        if (!g->ntrain && !g->entrain) continue;
        uint64_t shard = opt_share(x, g->ntrain) + eopt_share(x, g->entrain);
        if (z->mg) {
            mg_optimizer(x, g, shard);
            continue;
        }
        char nm[TRACE_NAME_MAX];
        if (x->c->offload) {
            host_optimizer(x, g, shard);
        } else {
            gname(nm, g, "optim");
            uint64_t oid = new_op(x);
            opspec o = OPS(.kind = TK_OPTIM, .layer = g->layer, .what = nm, IN(g->grad));
            opt_states_io(g, &o);
            if (x->c->zero3) {
                o.in[o.nin++] = g->shard;
                o.out[o.nout++] = g->shard;
            }
            for (int j = 0; j < g->np && !x->c->zero3; j++) {
                if (!g->trains[j]) continue;
                o.in[o.nin++] = g->param[j];
                o.out[o.nout++] = g->param[j];
            }
            o.flops = ADAM_FLOPS * (double)shard;
            o.br = shard * (z->GB + z->OB + z->D);
            o.bw = shard * (z->OB + z->D);
            simple_op(x, oid, &o);
        }
        /* The updated parameter shards are all-gathered back to every DP rank (ZeRO-3
         * keeps them sharded: the next forward gathers); the experts' over their group. */
        if (!x->c->zero3) {
            param_gather(x, g, 0, z->dp);
            param_gather(x, g, 1, edp_ranks(z));
        }
    }
}

/* ---- driver ---- */

static void iteration(gctx *x, int it)
{
    int L = (int)x->c->model.layers;
    x->iter = it;
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
    hf_release_logits(x, it + 1 == x->c->iterations);
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
    if (x->z.ep > 1) set_meta_u64(x, "ep", (uint64_t)x->z.ep); /* ep = 1 traces unchanged */
    set_meta_u64(x, "layers", md->layers);
    set_meta_u64(x, "hidden", md->hidden);
    set_meta_u64(x, "heads", md->heads);
    set_meta_u64(x, "kv_heads", md->kv_heads);
    set_meta_u64(x, "ffn", md->ffn_hidden);
    set_meta_u64(x, "vocab", md->vocab);
    set_meta_u64(x, "params", model_params(md));
    if (md->n_experts) set_meta_u64(x, "active_params", model_active_params(md));
    set_meta_u64(x, "dtype_bytes", (uint64_t)c->dtype_bytes);
    set_meta_u64(x, "grad_bytes", x->z.GB);
    set_meta_u64(x, "iterations", (uint64_t)c->iterations);
    set_meta_u64(x, "causal", (uint64_t)x->z.causal);
    /* Fine-tuning modes: written only when on, so the traces of plain runs are unchanged. */
    uint64_t train = 0;
    for (size_t i = 0; i < x->ng; i++) train += x->g[i].ntrain;
    if (c->lora) {
        set_meta_u64(x, "lora_rank", (uint64_t)c->lora_rank);
        set_meta_u64(x, "lora_mlp", (uint64_t)c->lora_mlp);
    }
    if (c->lora || c->zero3 || c->offload) set_meta_u64(x, "trainable_params_local", train);
    if (x->z.mg) {
        set_meta_str(x, "framework", "megatron");
        set_meta_u64(x, "dist_opt", (uint64_t)c->dist_opt);
    }
    if (x->z.mg || c->loss != GEN_LOSS_AUTO)
        set_meta_str(x, "loss", x->z.lossip ? "megatron-inplace"
                                : x->z.lossmg ? "megatron" : "fused");
    if (c->zero3) set_meta_u64(x, "zero3", 1);
    if (c->attn_impl == GEN_ATTN_EAGER) {
        set_meta_str(x, "attn_impl", "eager");
        set_meta_u64(x, "attn_dropout", (uint64_t)c->attn_dropout);
        set_meta_u64(x, "attn_softmax_saves_input", (uint64_t)c->attn_softmax_saves_input);
    }
    if (c->offload) {
        /* What ZeRO-Offload keeps on the host for this rank: fp32 master + Adam states
         * (opt_bytes_per_param) and an fp32 gradient partition of the trained parameters. */
        uint64_t share = 0;
        for (size_t i = 0; i < x->ng; i++) share += dp_share(x, x->g[i].ntrain);
        set_meta_u64(x, "offload", 1);
        set_meta_u64(x, "host_opt_bytes", share * x->z.OB);
        set_meta_u64(x, "host_grad_bytes", share * HOST_GRAD_BYTES);
        if (!c->lora) { /* the framework's tensors, for per-tensor host work (DeepSpeed) */
            uint64_t per_layer;
            set_meta_u64(x, "param_tensors", model_param_tensors(md, &per_layer));
            set_meta_u64(x, "param_tensors_layer", per_layer);
        }
    }
    set_meta_str(x, "machine", m && m->name[0] ? m->name : "none");
    if (x->c->roof.kernels == ROOF_KERNELS_RUNTIME) set_meta_str(x, "kernels", "runtime");
    set_meta_str(x, "generator", GEN_VERSION);
}

/* gen_trace's work, into a trace of like's structure when like is given (tshape_new_like):
 * then any failure, a difference from like's records included, leaves *out NULL and *missed
 * set, and the caller generates afresh (which reports a real error as gen_trace does). */
static ms_status gen_into(const gen_config *cin, const machine_t *m, const trace_t *like,
                          trace_t **out, int *missed, ms_error *err)
{
    *out = NULL;
    ms_status st = gen_validate(cin, err);
    if (st) return st;
    if (m && cin->roof.kernels == ROOF_KERNELS_RUNTIME &&
        (m->rt_attn_fwd_eff <= 0 || m->rt_attn_bwd_eff <= 0))
        return ms_fail(err, MS_ERR_INVALID, "generator knob kernels=runtime: profile %s has no "
                       "rt.attn_fwd_eff / rt.attn_bwd_eff (run memsim probe on that GPU)",
                       m->name);
    if (m && cin->roof.kernels == ROOF_KERNELS_RUNTIME && cin->offload &&
        !(m->rt_host_adam_params_per_s > 0))
        return ms_fail(err, MS_ERR_INVALID, "generator knobs kernels=runtime and offload=1: "
                       "profile %s has no rt.host_adam_params_per_s, the runtime's host AdamW "
                       "rate (run memsim probe --host-adam on that machine)", m->name);
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
    x.t = like ? tshape_new_like(like) : trace_new();
    x.in_place = tshape_in_place(x.t); /* for the whole trace: a put past base's records or
                                          after a miss fails as the append would */
    if (!x.g || !x.ls || !x.t) x.st = MS_ERR_NOMEM;
    if (!x.st && c.framework == GEN_FW_HF) {
        meta(&x, m);
        if (!x.st) x.st = gen_hf_emit(&c, m, x.t);
    } else if (!x.st) {
        /* about what a dense layer's forward and backward append (gpt-7b at TP 4, CP 2:
         * 3,821 records in one iteration, 7,360 in two, about 110 a layer and iteration):
         * the record array grows once or never instead of a dozen times, each copying it
         * (after the first large free glibc serves such sizes from its heap, not remapped) */
        (void)trace_reserve(x.t, (size_t)c.model.layers * (size_t)c.iterations * 128 + 1024);
        /* (a failed reservation changes nothing: the appends grow the array as before) */
        plan_groups(&x);
        meta(&x, m);
        setup(&x);
        for (int it = 0; it < c.iterations && !x.st; it++) iteration(&x, it);
    }
    free(x.g);
    free(x.ls);
    if (like && (x.st || !tshape_end(x.t))) {
        trace_free(x.t);
        *missed = 1;
        return MS_OK;
    }
    if (x.st) {
        trace_free(x.t);
        return ms_fail(err, x.st, "generating the %s trace: %s", c.model.name,
                       ms_status_str(x.st));
    }
    *out = x.t;
    return MS_OK;
}

ms_status gen_trace(const gen_config *c, const machine_t *m, trace_t **out, ms_error *err)
{
    return gen_into(c, m, NULL, out, NULL, err);
}

ms_status gen_trace_like(const gen_config *c, const machine_t *m, const trace_t *like,
                         trace_t **out, ms_error *err)
{
    int missed = 0;
    ms_status st = gen_into(c, m, like, out, &missed, err);
    return st != MS_OK || missed ? MS_ERR_LIMIT : MS_OK;
}

/* hfconfig.c — reads a Hugging Face config.json into a model_t (see hfconfig.h). Used by
 * model_lookup for "config:PATH". One table row per model_type holds what differs between
 * the families (key names, Hugging Face defaults, biases, sliding-window switch); every field
 * is read by one checked helper, and the first problem is kept and reported as
 * "PATH: FIELD: problem". Fields that change neither memory nor time (rope_theta,
 * rope_scaling outside phi3, norm epsilons, token ids, torch_dtype: the precision is the
 * generator's knob) are not read. */
#define _POSIX_C_SOURCE 200809L
#include "traces/hfconfig.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define HFC_MAX_FILE_BYTES ((size_t)1 << 20) /* a config.json is a few KiB */
/* Per-field caps keep each product of two sizes far below 2^64; the whole model is checked
 * against HFC_MAX_PARAMS (a trace accounts its bytes in 64-bit integers). */
#define HFC_MAX_LAYERS 4000u
#define HFC_MAX_HIDDEN (1u << 20)
#define HFC_MAX_FFN (1u << 22)
#define HFC_MAX_VOCAB (1u << 24)
#define HFC_MAX_SMALL (1u << 16) /* heads, head_dim, experts, token types */
#define HFC_MAX_PARAMS 0x1p50
#define HFC_MAX_SEQ_DEFAULT 4096u /* default sequence: the context, at most this */

/* Layer layouts. */
typedef enum hfc_kind {
    HFC_ROPE_GATED, /* llama and its kin: RMSNorm, gated MLP, rotary, untied by default */
    HFC_GPT2,
    HFC_NEOX,
    HFC_OPT,
    HFC_BERT
} hfc_kind;

typedef enum hfc_moe { HFC_DENSE = 0, HFC_MOE_MIXTRAL, HFC_MOE_QWEN2, HFC_MOE_QWEN3 } hfc_moe;

/* How a family turns sliding-window attention on. */
typedef enum hfc_window {
    HFC_WIN_NONE = 0, /* it has none (llama) */
    HFC_WIN_KEY,      /* sliding_window alone (mistral, mixtral); null: off */
    HFC_WIN_GATED     /* sliding_window only with use_sliding_window true (the Qwens) */
} hfc_window;

typedef struct hfc_family {
    const char *type;
    hfc_kind kind;
    hfc_moe moe;
    hfc_window window;
    uint64_t window_default;   /* sliding_window when absent (MistralConfig: 4096) */
    uint64_t maxpos_default;   /* max_position_embeddings when absent (rotary families) */
    int tied;                  /* tie_word_embeddings when absent */
    int kv_required;           /* num_key_value_heads defaults to a fixed number, not to the
                                  heads: a silent 8 or 32 would be a guess, so it is required */
    int bias_keys;             /* 2: attention_bias and mlp_bias (llama); 1: attention_bias */
    int qkv_bias;              /* q, k, v always biased (Qwen2, Qwen2-MoE) */
    uint64_t head_dim_default; /* head_dim when absent (Qwen3Config: 128); 0: hidden / heads */
    const char *k_layers, *k_hidden, *k_heads, *k_ffn, *k_maxpos, *k_act;
    const char *act_default;
} hfc_family;

#define ROPE_KEYS "num_hidden_layers", "hidden_size", "num_attention_heads", \
    "intermediate_size", "max_position_embeddings", "hidden_act", "silu"

static const hfc_family FAMILIES[] = {
    {"llama", HFC_ROPE_GATED, HFC_DENSE, HFC_WIN_NONE, 0, 2048, 0, 0, 2, 0, 0, ROPE_KEYS},
    {"mistral", HFC_ROPE_GATED, HFC_DENSE, HFC_WIN_KEY, 4096, 131072, 0, 1, 0, 0, 0,
     ROPE_KEYS},
    {"qwen2", HFC_ROPE_GATED, HFC_DENSE, HFC_WIN_GATED, 4096, 32768, 0, 1, 0, 1, 0, ROPE_KEYS},
    {"qwen3", HFC_ROPE_GATED, HFC_DENSE, HFC_WIN_GATED, 4096, 32768, 0, 1, 1, 0, 128,
     ROPE_KEYS},
    {"mixtral", HFC_ROPE_GATED, HFC_MOE_MIXTRAL, HFC_WIN_KEY, 0, 131072, 0, 1, 0, 0, 0,
     ROPE_KEYS},
    {"qwen2_moe", HFC_ROPE_GATED, HFC_MOE_QWEN2, HFC_WIN_GATED, 4096, 32768, 0, 1, 0, 1, 0,
     ROPE_KEYS},
    /* Qwen3MoeConfig: Qwen3's attention (no head_dim field: hidden / heads when absent),
     * experts without a shared one */
    {"qwen3_moe", HFC_ROPE_GATED, HFC_MOE_QWEN3, HFC_WIN_GATED, 4096, 32768, 0, 1, 1, 0, 0,
     ROPE_KEYS},
    /* GemmaConfig: head_dim 256, 16 KV heads (required here), 8192 positions, tied,
     * gelu_pytorch_tanh; GemmaRMSNorm and the scaled embedding are the generator's */
    {"gemma", HFC_ROPE_GATED, HFC_DENSE, HFC_WIN_NONE, 0, 8192, 1, 1, 1, 0, 256,
     "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
     "max_position_embeddings", "hidden_act", "gelu_pytorch_tanh"},
    /* Phi3Config: sliding_window None, max_position_embeddings 4096, untied by default */
    {"phi3", HFC_ROPE_GATED, HFC_DENSE, HFC_WIN_KEY, 0, 4096, 0, 0, 0, 0, 0, ROPE_KEYS},
    {"gpt2", HFC_GPT2, HFC_DENSE, HFC_WIN_NONE, 0, 0, 1, 0, 0, 0, 0, "n_layer", "n_embd",
     "n_head", "n_inner", "n_positions", "activation_function", "gelu_new"},
    {"gpt_neox", HFC_NEOX, HFC_DENSE, HFC_WIN_NONE, 0, 2048, 0, 0, 0, 0, 0,
     "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
     "max_position_embeddings", "hidden_act", "gelu"},
    {"opt", HFC_OPT, HFC_DENSE, HFC_WIN_NONE, 0, 0, 1, 0, 0, 0, 0, "num_hidden_layers",
     "hidden_size", "num_attention_heads", "ffn_dim", "max_position_embeddings",
     "activation_function", "relu"},
    {"bert", HFC_BERT, HFC_DENSE, HFC_WIN_NONE, 0, 0, 1, 0, 0, 0, 0, "num_hidden_layers",
     "hidden_size", "num_attention_heads", "intermediate_size", "max_position_embeddings",
     "hidden_act", "gelu"},
};
#define NFAM (sizeof FAMILIES / sizeof FAMILIES[0])

const char *hfc_model_types(void)
{
    return "llama, mistral, qwen2, qwen3, phi3, mixtral, qwen2_moe, qwen3_moe, gemma, gpt2, "
           "gpt_neox, opt, bert";
}

/* One parse: the first failure is kept, later reads return harmless values. */
typedef struct hctx {
    const char *path;
    json_t *root;
    ms_error *err;
    ms_status st;
} hctx;

static void fail(hctx *x, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(hctx *x, const char *key, const char *fmt, ...)
{
    if (x->st) return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    x->st = ms_fail_at(x->err, MS_ERR_INVALID, x->path, 0, "%s: %s", key, why);
}

/* A field's value; JSON null counts as absent (Hugging Face writes null for "default"). */
static json_t *field(const hctx *x, const char *key)
{
    json_t *v = json_object_get(x->root, key);
    return json_is_null(v) ? NULL : v;
}

static const char *kind_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A size written as a real: *n its integer when it has no fraction (64.0, 1e3: what a config
 * written by another tool may hold); else 0, the failure said. */
static int integral_real(hctx *x, const char *key, double d, json_int_t *n)
{
    if (d != floor(d)) {
        fail(x, key, "expected a positive integer, not %g", d);
        return 0;
    }
    if (!(fabs(d) < 9.0e18)) {
        fail(x, key, "%g is implausibly large", d);
        return 0;
    }
    *n = (json_int_t)d;
    return 1;
}

/* A positive integer size at most max; dflt 0: required. */
static uint64_t size_of(hctx *x, const char *key, uint64_t dflt, uint64_t max)
{
    json_t *v = field(x, key);
    if (!v) {
        if (!dflt) fail(x, key, "missing (a required size)");
        return dflt;
    }
    json_int_t n = 0;
    if (json_is_integer(v)) n = json_integer_value(v);
    else if (!json_is_real(v)) {
        fail(x, key, "expected a positive integer, not %s", kind_of(v));
        return 0;
    } else if (!integral_real(x, key, json_real_value(v), &n)) return 0;
    if (n <= 0) {
        fail(x, key, "must be positive (is %" JSON_INTEGER_FORMAT ")", n);
        return 0;
    }
    if ((uint64_t)n > max) {
        fail(x, key, "%" JSON_INTEGER_FORMAT " is implausibly large (at most %" PRIu64 ")", n,
             max);
        return 0;
    }
    return (uint64_t)n;
}

static int bool_of(hctx *x, const char *key, int dflt)
{
    json_t *v = field(x, key);
    if (!v) return dflt;
    if (!json_is_boolean(v)) {
        fail(x, key, "expected true or false, not %s", kind_of(v));
        return dflt;
    }
    return json_is_true(v);
}

/* A dropout probability in [0, 1]. */
static double prob_of(hctx *x, const char *key, double dflt)
{
    json_t *v = field(x, key);
    if (!v) return dflt;
    double p = json_is_number(v) ? json_number_value(v) : -1;
    if (!(p >= 0 && p <= 1)) {
        fail(x, key, "expected a probability in [0, 1]");
        return dflt;
    }
    return p;
}

static const char *str_of(hctx *x, const char *key, const char *dflt)
{
    json_t *v = field(x, key);
    if (!v) return dflt;
    if (!json_is_string(v)) {
        fail(x, key, "expected a string, not %s", kind_of(v));
        return dflt;
    }
    return json_string_value(v);
}

/* A switch that must keep its default: any other value builds what is not modelled. */
static void refuse_if(hctx *x, const char *key, int dflt, const char *what)
{
    if (bool_of(x, key, dflt) != dflt) fail(x, key, "%s is not modelled", what);
}

static model_act act_of(hctx *x, const hfc_family *f)
{
    static const struct { const char *name; model_act act; } ACTS[] = {
        {"silu", MODEL_ACT_SILU}, {"swish", MODEL_ACT_SILU}, {"gelu", MODEL_ACT_GELU},
        {"gelu_new", MODEL_ACT_GELU_TANH}, {"gelu_pytorch_tanh", MODEL_ACT_GELU_TANH},
        {"relu", MODEL_ACT_RELU},
    };
    const char *a = str_of(x, f->k_act, f->act_default);
    for (size_t i = 0; i < sizeof ACTS / sizeof ACTS[0]; i++)
        if (!strcmp(a, ACTS[i].name)) return ACTS[i].act;
    fail(x, f->k_act, "'%s' is not one of silu, swish, gelu, gelu_new, gelu_pytorch_tanh, "
         "relu", a);
    return MODEL_ACT_DEFAULT;
}

/* Ungated families: the MLP kind follows the activation (fc1, act, fc2 either way). */
static model_mlp plain_mlp(model_act a)
{
    return a == MODEL_ACT_RELU ? MODEL_MLP_RELU : MODEL_MLP_GELU;
}

/* Sizes every family has. */
static void read_shape(hctx *x, const hfc_family *f, model_t *m, uint64_t *maxpos)
{
    m->layers = size_of(x, f->k_layers, 0, HFC_MAX_LAYERS);
    m->hidden = size_of(x, f->k_hidden, 0, HFC_MAX_HIDDEN);
    m->heads = size_of(x, f->k_heads, 0, HFC_MAX_SMALL);
    m->vocab = size_of(x, "vocab_size", 0, HFC_MAX_VOCAB);
    /* GPT-2's n_inner null means 4 x n_embd; the others state their width. */
    uint64_t ffn_default = f->kind == HFC_GPT2 && !x->st ? 4 * m->hidden : 0;
    m->ffn_hidden = size_of(x, f->k_ffn, ffn_default, HFC_MAX_FFN);
    /* A learned table's rows are parameters: no default is guessed for them. */
    *maxpos = size_of(x, f->k_maxpos, f->maxpos_default, HFC_MAX_VOCAB);
    m->tied_embeddings = bool_of(x, "tie_word_embeddings", f->tied);
    m->act = act_of(x, f);
}

static void read_heads(hctx *x, const hfc_family *f, model_t *m)
{
    if (x->st) return;
    const char *kvkey = "num_key_value_heads";
    m->kv_heads = f->kind != HFC_ROPE_GATED ? m->heads
                : size_of(x, kvkey, f->kv_required ? 0 : m->heads, HFC_MAX_SMALL);
    uint64_t hd = 0;
    /* Absent: the family's default, or hidden / heads (the default of size_of is then unused). */
    if (f->kind == HFC_ROPE_GATED && (f->head_dim_default || field(x, "head_dim")))
        hd = size_of(x, "head_dim", f->head_dim_default ? f->head_dim_default : 1,
                     HFC_MAX_SMALL);
    if (x->st) return;
    if (!hd && m->hidden % m->heads) {
        fail(x, f->k_heads, "%" PRIu64 " does not divide %s %" PRIu64 " (and no head_dim "
             "is given)", m->heads, f->k_hidden, m->hidden);
        return;
    }
    if (m->heads % m->kv_heads) {
        fail(x, kvkey, "%" PRIu64 " does not divide %s %" PRIu64, m->kv_heads, f->k_heads,
             m->heads);
        return;
    }
    /* Stored only where it is not hidden / heads, so that a registry row and its
     * config.json agree field by field. */
    m->head_dim = m->hidden % m->heads == 0 && hd == m->hidden / m->heads ? 0 : hd;
}

static void read_rope_gated(hctx *x, const hfc_family *f, model_t *m)
{
    m->norm = MODEL_NORM_RMS;
    m->mlp = MODEL_MLP_SWIGLU;
    m->pos = MODEL_POS_ROTARY;
    m->qkv_bias = f->qkv_bias;
    if (f->bias_keys == 2) {
        /* LLaMA biases all four attention projections with attention_bias and the three MLP
         * ones with mlp_bias; has_bias says all or none. */
        int ab = bool_of(x, "attention_bias", 0), mb = bool_of(x, "mlp_bias", 0);
        if (ab != mb)
            fail(x, ab ? "attention_bias" : "mlp_bias", "true while %s is false: biases on "
                 "only one of attention and MLP are not modelled",
                 ab ? "mlp_bias" : "attention_bias");
        m->has_bias = ab && mb;
    } else if (f->bias_keys == 1) {
        refuse_if(x, "attention_bias", 0, "true (biased attention beside a bias-free MLP)");
    }
    m->attn_dropout = prob_of(x, "attention_dropout", 0);
}

/* A rotary scaling other than the default changes the tables only, yet longrope and the
 * dynamic kinds switch tables by length: refused rather than approximated. */
static void refuse_rope_scaling(hctx *x, const char *key)
{
    json_t *v = field(x, key);
    if (!v) return;
    json_t *t = json_is_object(v) ? json_object_get(v, "rope_type") : NULL;
    if (json_is_object(v) && !t) t = json_object_get(v, "type");
    const char *kind = json_is_string(t) ? json_string_value(t) : NULL;
    if (kind && !strcmp(kind, "default")) return;
    fail(x, key, "%s%s%s: only null or the default rotary is modelled", kind ? "'" : "",
         kind ? kind : "not a default rotary", kind ? "'" : "");
}

/* Phi-3 (Phi3Config): the llama layout with fused projections (the generator's phi3
 * program), partial_rotary_factor (1.0 by default; rope_parameters' in newer files), and
 * residual dropout, which the rotary-family program does not emit. */
static void read_phi3(hctx *x, model_t *m)
{
    refuse_rope_scaling(x, "rope_scaling");
    refuse_rope_scaling(x, "rope_parameters");
    json_t *rp = field(x, "rope_parameters");
    json_t *pf = json_is_object(rp) ? json_object_get(rp, "partial_rotary_factor") : NULL;
    double f = prob_of(x, "partial_rotary_factor", json_is_number(pf) ? json_number_value(pf)
                                                                      : 1.0);
    if (x->st) return;
    uint64_t hd = m->head_dim ? m->head_dim : m->hidden / m->heads;
    double dim = (double)hd * f;
    if (!(f > 0) || (uint64_t)dim < 2 || (uint64_t)dim % 2)
        fail(x, "partial_rotary_factor", "%g of %" PRIu64 " head dimensions: an even count "
             "of at least 2 is rotated", f, hd);
    m->rotary_pct = f < 1 ? f : 0; /* 0: every dimension */
    if (prob_of(x, "resid_pdrop", 0) > 0)
        fail(x, "resid_pdrop", "above 0: dropout on the residual branches is not modelled");
    if (m->attn_dropout > 0)
        fail(x, "attention_dropout", "above 0: dropout in attention is not modelled for "
             "phi3");
}

static void read_gpt2(hctx *x, model_t *m, uint64_t maxpos)
{
    m->norm = MODEL_NORM_LAYER;
    m->mlp = plain_mlp(m->act);
    m->pos = MODEL_POS_LEARNED;
    m->pos_rows = maxpos;
    m->max_seq = maxpos;
    m->has_bias = 1;
    m->resid_dropout = prob_of(x, "resid_pdrop", 0.1);
    /* One residual dropout switch is modelled: the embedding's must agree on zero or not
     * (the probability's value changes neither memory nor time). */
    double embd = prob_of(x, "embd_pdrop", 0.1);
    if ((embd > 0) != (m->resid_dropout > 0))
        fail(x, "embd_pdrop", "%g beside resid_pdrop %g: dropout on only one of the "
             "embedding and the residual branches is not modelled", embd, m->resid_dropout);
    m->attn_dropout = prob_of(x, "attn_pdrop", 0.1);
    refuse_if(x, "add_cross_attention", 0, "true (cross-attention)");
    refuse_if(x, "reorder_and_upcast_attn", 0, "true (fp32 attention)");
}

static void read_neox(hctx *x, model_t *m)
{
    m->norm = MODEL_NORM_LAYER;
    m->mlp = plain_mlp(m->act);
    m->pos = MODEL_POS_ROTARY; /* rotary_pct rotates part of each head: no parameters */
    m->has_bias = 1;
    refuse_if(x, "attention_bias", 1, "false (bias-free attention beside a biased MLP)");
    m->parallel_residual = bool_of(x, "use_parallel_residual", 1);
    m->attn_dropout = prob_of(x, "attention_dropout", 0);
    m->resid_dropout = prob_of(x, "hidden_dropout", 0);
    /* rotary_pct (GPTNeoXConfig: 0.25), or rope_parameters' partial_rotary_factor as newer
     * files write it */
    json_t *rp = field(x, "rope_parameters");
    json_t *pf = json_is_object(rp) ? json_object_get(rp, "partial_rotary_factor") : NULL;
    double dflt = json_is_number(pf) ? json_number_value(pf) : 0.25;
    m->rotary_pct = prob_of(x, "rotary_pct", dflt);
    if (!x->st && !(m->rotary_pct > 0 && m->rotary_pct <= 1))
        fail(x, "rotary_pct", "must be in (0, 1]");
}

static void read_opt(hctx *x, model_t *m, uint64_t maxpos)
{
    m->norm = MODEL_NORM_LAYER;
    m->mlp = plain_mlp(m->act);
    m->pos = MODEL_POS_LEARNED;
    m->pos_rows = maxpos + 2; /* OPTLearnedPositionalEmbedding's offset of 2 rows */
    m->max_seq = maxpos;
    m->has_bias = 1;
    if (!x->st && size_of(x, "word_embed_proj_dim", m->hidden, HFC_MAX_HIDDEN) != m->hidden)
        fail(x, "word_embed_proj_dim", "differs from hidden_size %" PRIu64 ": the projected "
             "embeddings (project_in / project_out) are not modelled", m->hidden);
    refuse_if(x, "do_layer_norm_before", 1, "false (post-LayerNorm layers)");
    refuse_if(x, "enable_bias", 1, "false (bias-free linears and LayerNorms)");
    refuse_if(x, "layer_norm_elementwise_affine", 1, "false (LayerNorms without parameters)");
    refuse_if(x, "_remove_final_layer_norm", 0, "true (no final LayerNorm)");
    m->resid_dropout = prob_of(x, "dropout", 0.1);
    m->attn_dropout = prob_of(x, "attention_dropout", 0);
}

static void read_bert(hctx *x, model_t *m, uint64_t maxpos)
{
    m->norm = MODEL_NORM_LAYER;
    m->mlp = plain_mlp(m->act);
    m->pos = MODEL_POS_LEARNED;
    m->pos_rows = maxpos;
    m->max_seq = maxpos;
    m->type_vocab = size_of(x, "type_vocab_size", 2, HFC_MAX_SMALL);
    m->has_bias = 1;
    m->is_encoder = 1;
    const char *pe = str_of(x, "position_embedding_type", "absolute");
    if (strcmp(pe, "absolute"))
        fail(x, "position_embedding_type", "'%s': only absolute (a learned table) is "
             "modelled", pe);
    refuse_if(x, "is_decoder", 0, "true (a causal BERT)");
    refuse_if(x, "add_cross_attention", 0, "true (cross-attention)");
    m->resid_dropout = prob_of(x, "hidden_dropout_prob", 0.1);
    m->attn_dropout = prob_of(x, "attention_probs_dropout_prob", 0.1);
}

/* The load-balancing loss over every layer's router logits (and Mixtral's training-time
 * jitter) adds work and memory the generator does not emit. */
static void refuse_router_extras(hctx *x)
{
    refuse_if(x, "output_router_logits", 0, "true (the auxiliary load-balancing loss)");
    if (prob_of(x, "router_jitter_noise", 0) > 0)
        fail(x, "router_jitter_noise", "above 0 (noise on the router's input in training) "
             "is not modelled");
}

/* mlp_only_layers: layer indices whose MLP stays dense (`layer_idx not in
 * config.mlp_only_layers`); an index no layer has changes nothing, as in transformers. */
static void read_dense_layers(hctx *x, model_t *m)
{
    json_t *only = field(x, "mlp_only_layers");
    if (!only || x->st) return;
    if (!json_is_array(only)) {
        fail(x, "mlp_only_layers", "expected a list, not %s", kind_of(only));
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(only, i, v) {
        if (!json_is_integer(v)) {
            fail(x, "mlp_only_layers", "expected layer indices (integers), not %s", kind_of(v));
            return;
        }
        json_int_t l = json_integer_value(v);
        if (l < 0 || (uint64_t)l >= m->layers) continue;
        uint8_t *b = &m->dense_layers[l / 8], bit = (uint8_t)(1u << (l % 8));
        if (!(*b & bit)) m->dense_listed++;
        *b |= bit;
    }
}

static void read_moe(hctx *x, const hfc_family *f, model_t *m)
{
    if (f->moe == HFC_DENSE) return;
    const char *ekey = f->moe == HFC_MOE_MIXTRAL ? "num_local_experts" : "num_experts";
    m->n_experts = size_of(x, ekey, 0, HFC_MAX_SMALL);
    m->experts_per_tok = size_of(x, "num_experts_per_tok", 0, HFC_MAX_SMALL);
    if (!x->st && m->experts_per_tok > m->n_experts)
        fail(x, "num_experts_per_tok", "%" PRIu64 " is more than the %" PRIu64 " experts",
             m->experts_per_tok, m->n_experts);
    m->moe_every = 1;
    refuse_router_extras(x);
    if (f->moe == HFC_MOE_MIXTRAL) { /* experts of intermediate_size, top-k renormalized */
        m->expert_ffn = m->ffn_hidden;
        m->norm_topk = 1;
        return;
    }
    m->expert_ffn = size_of(x, "moe_intermediate_size", 0, HFC_MAX_FFN);
    if (f->moe == HFC_MOE_QWEN2) { /* Qwen3-MoE has no shared expert */
        m->shared_ffn = size_of(x, "shared_expert_intermediate_size", 0, HFC_MAX_FFN);
        m->shared_gate = 1;
    }
    m->moe_every = (int)size_of(x, "decoder_sparse_step", 1, HFC_MAX_LAYERS);
    m->norm_topk = bool_of(x, "norm_topk_prob", 0);
    read_dense_layers(x, m);
}

/* A window shorter than the context changes attention in training: refused. */
static void check_window(hctx *x, const hfc_family *f, uint64_t maxpos)
{
    if (f->window == HFC_WIN_NONE || x->st) return;
    if (f->window == HFC_WIN_GATED && !bool_of(x, "use_sliding_window", 0)) return;
    json_t *raw = json_object_get(x->root, "sliding_window");
    uint64_t w = !raw ? f->window_default : json_is_null(raw) ? 0
               : size_of(x, "sliding_window", 0, HFC_MAX_VOCAB);
    if (x->st || !w || w >= maxpos) return;
    fail(x, "sliding_window", "%" PRIu64 "%s below max_position_embeddings %" PRIu64 ": "
         "sliding-window attention in training is not modelled (null%s trains full causal "
         "attention)", w, raw ? "" : " (the default when absent)", maxpos,
         f->window == HFC_WIN_GATED ? " or use_sliding_window false" : "");
}

/* A rough upper bound of the parameters, in floating point so that it cannot overflow. */
static double params_bound(const model_t *m)
{
    double h = (double)m->hidden, hd = m->head_dim ? (double)m->head_dim : h / (double)m->heads;
    double attn = 4.0 * h * hd * (double)m->heads;
    double mlp = 3.0 * h * (double)m->ffn_hidden;
    double moe = (double)m->n_experts * 3.0 * h * (double)m->expert_ffn +
                 3.0 * h * (double)m->shared_ffn;
    return (double)m->layers * (attn + mlp + moe) +
           2.0 * h * ((double)m->vocab + (double)m->pos_rows);
}

/* The model's name: the file's basename without .json; for a file named config.json (as
 * Hugging Face downloads are) the folder's name. */
static void name_from_path(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    const char *base = b ? b + 1 : path;
    size_t len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".json")) len -= 5;
    if (len == 6 && !strncmp(base, "config", 6) && b && b > path) {
        const char *d = b;
        while (d > path && d[-1] != '/') d--;
        if (b - d > 0 && strncmp(d, ".", (size_t)(b - d))) {
            snprintf(out, n, "%.*s", (int)(b - d), d);
            return;
        }
    }
    snprintf(out, n, "%.*s", (int)len, base);
}

/* desc and source point at strings that outlive every copy of the model: they are kept
 * here for the process (a run reads a handful of files). */
static const char *keep(const char *s, const char *fallback)
{
    static char *pool[64];
    static size_t n;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(pool[i], s)) return pool[i];
    char *c = n < sizeof pool / sizeof pool[0] ? strdup(s) : NULL;
    if (!c) return fallback;
    pool[n++] = c;
    return c;
}

static void describe(const char *path, const hfc_family *f, model_t *m)
{
    char buf[1200];
    snprintf(m->family, sizeof m->family, "%s", f->type);
    name_from_path(path, m->name, sizeof m->name);
    snprintf(buf, sizeof buf, "%s from a Hugging Face config.json", f->type);
    m->desc = keep(buf, "from a Hugging Face config.json");
    snprintf(buf, sizeof buf, "config.json %s", path);
    m->source = keep(buf, "a Hugging Face config.json");
}

static const hfc_family *family_of(hctx *x)
{
    json_t *v = json_object_get(x->root, "model_type");
    if (!v) return fail(x, "model_type", "missing (one of %s)", hfc_model_types()), NULL;
    if (!json_is_string(v))
        return fail(x, "model_type", "expected a string, not %s", kind_of(v)), NULL;
    for (size_t i = 0; i < NFAM; i++)
        if (!strcmp(json_string_value(v), FAMILIES[i].type)) return &FAMILIES[i];
    if (!strcmp(json_string_value(v), "gemma2")) /* close to gemma: say what is missing */
        return fail(x, "model_type", "'gemma2' is not supported: Gemma 2's "
                    "attn_logit_softcapping and final_logit_softcapping (tanh soft-capping), "
                    "sliding_window on alternating layers (layer_types) and the pre- and "
                    "post-feed-forward norms are not modelled (gemma, Gemma 1, is)"), NULL;
    fail(x, "model_type", "'%s' is not supported (supported: %s)", json_string_value(v),
         hfc_model_types());
    return NULL;
}

static void read_model(hctx *x, model_t *m)
{
    const hfc_family *f = family_of(x);
    if (!f) return;
    if (field(x, "quantization_config")) {
        fail(x, "quantization_config", "quantized weights are not modelled");
        return;
    }
    describe(x->path, f, m);
    uint64_t maxpos = 0;
    read_shape(x, f, m, &maxpos);
    read_heads(x, f, m);
    switch (f->kind) {
    case HFC_ROPE_GATED:
        read_rope_gated(x, f, m);
        if (!strcmp(f->type, "phi3")) read_phi3(x, m);
        if (!strcmp(f->type, "gemma"))
            refuse_if(x, "use_bidirectional_attention", 0, "true (attention without the causal "
                      "mask)");
        break;
    case HFC_GPT2: read_gpt2(x, m, maxpos); break;
    case HFC_NEOX: read_neox(x, m); break;
    case HFC_OPT: read_opt(x, m, maxpos); break;
    case HFC_BERT: read_bert(x, m, maxpos); break;
    }
    read_moe(x, f, m);
    check_window(x, f, maxpos);
    if (x->st) return;
    m->default_seq = maxpos < HFC_MAX_SEQ_DEFAULT ? maxpos : HFC_MAX_SEQ_DEFAULT;
    if (params_bound(m) > HFC_MAX_PARAMS)
        fail(x, f->k_layers, "the model's sizes give more than 2^50 parameters: beyond what "
             "memsim accounts in bytes");
}

ms_status hfc_parse(const char *text, size_t len, const char *path, model_t *out,
                    ms_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return ms_fail_at(err, MS_ERR_PARSE, path, je.line > 0 ? (uint64_t)je.line : 0,
                          "not JSON: %s (column %d)", je.text, je.column);
    hctx x = {path, root, err, MS_OK};
    model_t m;
    memset(&m, 0, sizeof m);
    if (!json_is_object(root))
        x.st = ms_fail_at(err, MS_ERR_INVALID, path, 0, "not a config.json: the top level is "
                          "%s, not an object", kind_of(root));
    else
        read_model(&x, &m);
    json_decref(root);
    if (x.st) return x.st;
    *out = m;
    return MS_OK;
}

ms_status hfc_load(const char *path, model_t *out, ms_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return ms_fail_at(err, MS_ERR_IO, path, 0, "cannot open: %s", strerror(errno));
    char *buf = malloc(HFC_MAX_FILE_BYTES + 1);
    if (!buf) {
        fclose(fp);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, HFC_MAX_FILE_BYTES + 1, fp);
    int bad = ferror(fp);
    fclose(fp);
    ms_status st;
    if (bad) st = ms_fail_at(err, MS_ERR_IO, path, 0, "read error");
    else if (n > HFC_MAX_FILE_BYTES)
        st = ms_fail_at(err, MS_ERR_INVALID, path, 0, "larger than 1 MiB: not a config.json");
    else st = hfc_parse(buf, n, path, out, err);
    free(buf);
    return st;
}

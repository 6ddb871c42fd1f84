/* models.c — the model registry: shapes from MEMO Table 2, ProTrain Table 1 (completed from
 * the public configs of those models), the public GPT-2 family, and the models GMLake and
 * MemFerry evaluate; parameter counts; `memsim list`. Used by the generator, the planners'
 * cost models and the memsim command. */
#define _POSIX_C_SOURCE 200809L
#include "traces/models.h"

#include "traces/hfconfig.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Field order of the table rows below. */
#define DEC(nm, L, H, F, A, KV, V, SEQ, POSR, MAXS, NORM, MLP, POS, TIED, BIAS, D, S) \
    { .name = nm, .layers = L, .hidden = H, .ffn_hidden = F, .heads = A, .kv_heads = KV,  \
      .vocab = V, .default_seq = SEQ, .pos_rows = POSR, .max_seq = MAXS, .type_vocab = 0, \
      .norm = NORM, .mlp = MLP, .pos = POS, .tied_embeddings = TIED, .has_bias = BIAS,   \
      .is_encoder = 0, .parallel_residual = 0, .desc = D, .source = S }

#define LN MODEL_NORM_LAYER
#define RMS MODEL_NORM_RMS
#define GELU MODEL_MLP_GELU
#define SWIGLU MODEL_MLP_SWIGLU
#define RELU MODEL_MLP_RELU
#define LEARNED MODEL_POS_LEARNED
#define ROPE MODEL_POS_ROTARY

static const char SRC_MEMO[] =
    "MEMO (SIGMOD'25) Table 2; not given there and assumed: Megatron GPT defaults "
    "(LayerNorm, GeLU, biases, tied embeddings) with rotary positions (no learned table "
    "at 1M tokens)";
static const char SRC_PT_GPT2[] =
    "ProTrain Table 1 (hidden, blocks, heads); not given there: ffn = 4h, GPT-2 vocab "
    "50257, 1024 learned positions, tied (HF GPT-2 architecture)";
static const char SRC_PT_GPT2_1B[] =
    "ProTrain Table 4 (GPT2-1B, 32 blocks); hidden 1536 and 16 heads are not in the paper: "
    "assumed from the gpt2_1b configuration common to chunk-based offloading benchmarks";
static const char SRC_HF_GPT2[] = "public HF config (openai-community/gpt2*)";
static const char SRC_TXL[] =
    "MemFerry §V-A: TransformerXL sizes 0.7B-6.7B with embedding (vocabulary) 32768-130528, "
    "hidden 2048-4096, sequence 378-4096; the per-size layers, vocabulary and sequence are not "
    "given there and are assumed: the ranges' ends kept for vocabulary and hidden, the "
    "sequence growing with size from 378 (MemFerry §V-D: larger models compute more) up to "
    "1024, the longest at which batch 8 of the 6.7B model fits an A100 80GB without "
    "recomputation (4096 does not); 64-wide heads, ffn 4h and ReLU as in Dai et al. (ACL 2019); "
    "relative positions approximated by rotary ones (no position table), adaptive "
    "embedding/softmax by a full tied vocabulary, pre-norm";

/* Public checkpoints as their Hugging Face config.json gives them (traces/hfconfig.c reads the
 * same file into the same fields): RMSNorm, SwiGLU (silu), rotary, no biases; default
 * sequence the context up to 4096. The row's closing brace is left to the row, so that a
 * mixture-of-experts row adds its expert fields. */
#define HFD(nm, fam, L, H, F, A, KV, V, QKVB, D, S)                                        \
    { .name = nm, .family = fam, .layers = L, .hidden = H, .ffn_hidden = F, .heads = A,     \
      .kv_heads = KV, .vocab = V, .default_seq = 4096, .norm = MODEL_NORM_RMS,             \
      .mlp = MODEL_MLP_SWIGLU, .pos = MODEL_POS_ROTARY, .qkv_bias = QKVB,                  \
      .act = MODEL_ACT_SILU, .desc = D, .source = S

static const model_t REGISTRY[] = {
    /* MEMO Table 2: 7B..65B GPT models for long-context training. */
    DEC("gpt-7b", 32, 4096, 16384, 32, 32, 50257, 4096, 0, 0, LN, GELU, ROPE, 1, 1,
        "MEMO GPT 7B (32 x 4096)", SRC_MEMO),
    DEC("gpt-13b", 40, 5120, 20480, 40, 40, 50257, 4096, 0, 0, LN, GELU, ROPE, 1, 1,
        "MEMO GPT 13B (40 x 5120)", SRC_MEMO),
    DEC("gpt-30b", 48, 7168, 28672, 56, 56, 50257, 4096, 0, 0, LN, GELU, ROPE, 1, 1,
        "MEMO GPT 30B (48 x 7168)", SRC_MEMO),
    DEC("gpt-65b", 80, 8192, 32768, 64, 64, 50257, 4096, 0, 0, LN, GELU, ROPE, 1, 1,
        "MEMO GPT 65B (80 x 8192)", SRC_MEMO),
    /* ProTrain Table 1 / Table 4 GPT-2 scalings (HF GPT2LMHeadModel with other sizes). */
    DEC("gpt2-1b", 32, 1536, 6144, 16, 16, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "ProTrain GPT-2 1B (32 x 1536)", SRC_PT_GPT2_1B),
    DEC("gpt2-10b", 48, 4096, 16384, 32, 32, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "ProTrain GPT-2 10B (48 x 4096)", SRC_PT_GPT2),
    DEC("gpt2-15b", 18, 8192, 32768, 64, 64, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "ProTrain GPT-2 15B (18 x 8192)", SRC_PT_GPT2),
    DEC("gpt2-20b", 24, 8192, 32768, 64, 64, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "ProTrain GPT-2 20B (24 x 8192)", SRC_PT_GPT2),
    DEC("gpt2-30b", 36, 8192, 32768, 64, 64, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "ProTrain GPT-2 30B (36 x 8192)", SRC_PT_GPT2),
    DEC("gpt2-40b", 50, 8192, 32768, 64, 64, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "ProTrain GPT-2 40B (50 x 8192)", SRC_PT_GPT2),
    /* ProTrain Table 1 real models: the table gives size, hidden, blocks, heads; the rest is
     * the public config of the model. */
    DEC("mistral-7b", 32, 4096, 14336, 32, 8, 32000, 1024, 0, 0, RMS, SWIGLU, ROPE, 0, 0,
        "Mistral 7B (GQA 8 kv heads, SwiGLU)",
        "ProTrain Table 1; ffn, kv heads, vocab from the public mistralai/Mistral-7B-v0.1 "
        "config"),
    DEC("llama-13b", 40, 5120, 13824, 40, 40, 32000, 1024, 0, 0, RMS, SWIGLU, ROPE, 0, 0,
        "LLaMA 13B", "ProTrain Table 1; ffn, vocab from the public LLaMA-13B config"),
    DEC("llama-34b", 48, 8192, 22016, 64, 8, 32000, 1024, 0, 0, RMS, SWIGLU, ROPE, 0, 0,
        "LLaMA 34B (GQA 8 kv heads)",
        "ProTrain Table 1; no LLaMA-2 34B was released: ffn, kv heads, vocab from the public "
        "CodeLlama-34b config (same 48 x 8192 x 64 shape)"),
    DEC("opt-13b", 40, 5120, 20480, 40, 40, 50272, 1024, 2050, 2048, LN, RELU, LEARNED, 1, 1,
        "OPT 13B", "ProTrain Table 1, GMLake Table 2; rest from the public facebook/opt-13b "
        "config (2048 positions + offset 2)"),
    DEC("opt-30b", 48, 7168, 28672, 56, 56, 50272, 1024, 2050, 2048, LN, RELU, LEARNED, 1, 1,
        "OPT 30B", "ProTrain Table 1; rest from the public facebook/opt-30b config"),
    /* The public GPT-2 family. */
    DEC("gpt2", 12, 768, 3072, 12, 12, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "GPT-2 small (124M)", SRC_HF_GPT2),
    DEC("gpt2-medium", 24, 1024, 4096, 16, 16, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "GPT-2 medium (355M); MemFerry", SRC_HF_GPT2),
    DEC("gpt2-large", 36, 1280, 5120, 20, 20, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "GPT-2 large (774M)", SRC_HF_GPT2),
    DEC("gpt2-xl", 48, 1600, 6400, 25, 25, 50257, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "GPT-2 XL (1.5B)", SRC_HF_GPT2),
    /* GMLake Table 2. */
    DEC("opt-1.3b", 24, 2048, 8192, 32, 32, 50272, 2048, 2050, 2048, LN, RELU, LEARNED, 1, 1,
        "OPT 1.3B; GMLake", "GMLake Table 2; public facebook/opt-1.3b config"),
    DEC("vicuna-13b", 40, 5120, 13824, 40, 40, 32000, 2048, 0, 0, RMS, SWIGLU, ROPE, 0, 0,
        "Vicuna 13B (LLaMA-13B shapes); GMLake",
        "GMLake Table 2; Vicuna is a LLaMA-13B fine-tune: public LLaMA-13B config"),
    { .name = "gpt-neox-20b", .layers = 44, .hidden = 6144, .ffn_hidden = 24576, .heads = 64,
      .kv_heads = 64, .vocab = 50432, .default_seq = 2048, .pos_rows = 0, .max_seq = 0,
      .norm = LN, .mlp = GELU, .pos = ROPE, .tied_embeddings = 0, .has_bias = 1,
      .parallel_residual = 1, .desc = "GPT-NeoX 20B (parallel residual); GMLake",
      .source = "GMLake Table 2; public EleutherAI/gpt-neox-20b config" },
    DEC("glm-10b", 48, 4096, 16384, 64, 64, 50304, 1024, 1024, 1024, LN, GELU, LEARNED, 1, 1,
        "GLM 10B; GMLake",
        "GMLake Table 2; public THUDM/glm-10b config. GLM's second (block) position table "
        "and its blank-infilling attention mask are not modelled: generated as a causal decoder"),
    /* MemFerry's TransformerXL family (§V-A; shapes assumed within the paper's ranges). */
    DEC("transformerxl-0.7b", 13, 2048, 8192, 32, 32, 32768, 378, 0, 0, LN, RELU, ROPE, 1, 1,
        "TransformerXL 0.72B (13 x 2048, vocab 32768); MemFerry", SRC_TXL),
    DEC("transformerxl-1b", 18, 2048, 8192, 32, 32, 49152, 512, 0, 0, LN, RELU, ROPE, 1, 1,
        "TransformerXL 1.0B (18 x 2048, vocab 49152); MemFerry", SRC_TXL),
    DEC("transformerxl-2.4b", 28, 2560, 10240, 40, 40, 65536, 768, 0, 0, LN, RELU, ROPE, 1, 1,
        "TransformerXL 2.4B (28 x 2560, vocab 65536); MemFerry", SRC_TXL),
    DEC("transformerxl-4.3b", 35, 3072, 12288, 48, 48, 98304, 1024, 0, 0, LN, RELU, ROPE, 1, 1,
        "TransformerXL 4.3B (35 x 3072, vocab 98304); MemFerry", SRC_TXL),
    DEC("transformerxl-6.7b", 31, 4096, 16384, 64, 64, 130528, 1024, 0, 0, LN, RELU, ROPE, 1, 1,
        "TransformerXL 6.8B (31 x 4096, vocab 130528); MemFerry", SRC_TXL),
    /* MemFerry encoders (HF BertModel / RobertaModel counts: embeddings, layers, pooler). */
    { .name = "bert-base", .layers = 12, .hidden = 768, .ffn_hidden = 3072, .heads = 12,
      .kv_heads = 12, .vocab = 30522, .default_seq = 512, .pos_rows = 512, .max_seq = 512,
      .type_vocab = 2, .norm = LN, .mlp = GELU, .pos = LEARNED, .tied_embeddings = 1,
      .has_bias = 1, .is_encoder = 1, .desc = "BERT base (110M, encoder); MemFerry",
      .source = "MemFerry Sec. 5; public bert-base-uncased config" },
    { .name = "bert-large", .layers = 24, .hidden = 1024, .ffn_hidden = 4096, .heads = 16,
      .kv_heads = 16, .vocab = 30522, .default_seq = 512, .pos_rows = 512, .max_seq = 512,
      .type_vocab = 2, .norm = LN, .mlp = GELU, .pos = LEARNED, .tied_embeddings = 1,
      .has_bias = 1, .is_encoder = 1, .desc = "BERT large (335M, encoder); MemFerry",
      .source = "MemFerry Sec. 5; public bert-large-uncased config" },
    { .name = "roberta-base", .layers = 12, .hidden = 768, .ffn_hidden = 3072, .heads = 12,
      .kv_heads = 12, .vocab = 50265, .default_seq = 512, .pos_rows = 514, .max_seq = 512,
      .type_vocab = 1, .norm = LN, .mlp = GELU, .pos = LEARNED, .tied_embeddings = 1,
      .has_bias = 1, .is_encoder = 1, .desc = "RoBERTa base (125M, encoder); MemFerry",
      .source = "MemFerry Sec. 5; public roberta-base config (514 positions: offset 2)" },
    /* Public decoders (their config.json files; untied embeddings). */
    HFD("llama2-7b", "llama", 32, 4096, 11008, 32, 32, 32000, 0, "LLaMA-2 7B",
        "meta-llama/Llama-2-7b-hf config.json") },
    HFD("llama2-13b", "llama", 40, 5120, 13824, 40, 40, 32000, 0, "LLaMA-2 13B",
        "meta-llama/Llama-2-13b-hf config.json") },
    HFD("llama2-70b", "llama", 80, 8192, 28672, 64, 8, 32000, 0, "LLaMA-2 70B (GQA 8 kv heads)",
        "meta-llama/Llama-2-70b-hf config.json") },
    HFD("llama3-8b", "llama", 32, 4096, 14336, 32, 8, 128256, 0, "LLaMA-3 8B (GQA 8 kv heads)",
        "meta-llama/Meta-Llama-3-8B config.json (context 8192)") },
    HFD("llama3-70b", "llama", 80, 8192, 28672, 64, 8, 128256, 0,
        "LLaMA-3 70B (GQA 8 kv heads)", "meta-llama/Meta-Llama-3-70B config.json") },
    HFD("mistral-7b-v0.3", "mistral", 32, 4096, 14336, 32, 8, 32768, 0,
        "Mistral 7B v0.3 (GQA 8 kv heads, no sliding window)",
        "mistralai/Mistral-7B-v0.3 config.json (head_dim 128, sliding_window null; v0.1's "
        "4096-token window is not modelled, hence this version)") },
    HFD("mixtral-8x7b", "mixtral", 32, 4096, 14336, 32, 8, 32000, 0,
        "Mixtral 8x7B (MoE 8 experts, top-2)",
        "mistralai/Mixtral-8x7B-v0.1 config.json (sliding_window null)"),
        .n_experts = 8, .experts_per_tok = 2, .expert_ffn = 14336, .moe_every = 1,
        .norm_topk = 1 },
    HFD("qwen2.5-7b", "qwen2", 28, 3584, 18944, 28, 4, 152064, 1,
        "Qwen2.5 7B (GQA 4 kv heads, q/k/v biases)",
        "Qwen/Qwen2.5-7B config.json (use_sliding_window false)") },
    HFD("qwen2.5-72b", "qwen2", 80, 8192, 29568, 64, 8, 152064, 1,
        "Qwen2.5 72B (GQA 8 kv heads, q/k/v biases)",
        "Qwen/Qwen2.5-72B config.json (use_sliding_window false)") },
    HFD("qwen1.5-moe-a2.7b", "qwen2_moe", 24, 2048, 5632, 16, 16, 151936, 1,
        "Qwen1.5-MoE-A2.7B (60 experts, top-4, shared expert)",
        "Qwen/Qwen1.5-MoE-A2.7B config.json (context 8192, use_sliding_window false)"),
        .n_experts = 60, .experts_per_tok = 4, .expert_ffn = 1408, .shared_ffn = 5632,
        .shared_gate = 1, .moe_every = 1, .norm_topk = 0 },
};

#define NREG (sizeof REGISTRY / sizeof REGISTRY[0])

size_t model_count(void) { return NREG; }

const model_t *model_at(size_t i) { return i < NREG ? &REGISTRY[i] : NULL; }

const model_t *model_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < NREG; i++)
        if (strcmp(REGISTRY[i].name, name) == 0) return &REGISTRY[i];
    return NULL;
}

ms_status model_from_dims(uint64_t layers, uint64_t hidden, uint64_t heads, uint64_t ffn,
                          uint64_t vocab, model_t *out, ms_error *err)
{
    if (!layers || !hidden || !heads || !ffn || !vocab)
        return ms_fail(err, MS_ERR_INVALID,
                       "model dims: layers, hidden, heads, ffn and vocab must all be positive");
    if (hidden % heads)
        return ms_fail(err, MS_ERR_INVALID,
                       "model dims: heads (%" PRIu64 ") must divide hidden (%" PRIu64 ")",
                       heads, hidden);
    /* Keep byte products far from overflow and an op's id lists (zero_grad names every
     * layer's gradient buffer) within the trace format's 4096: no real model comes near. */
    if (layers > 4000 || hidden > (1u << 20) || ffn > (1u << 22) || vocab > (1u << 24))
        return ms_fail(err, MS_ERR_INVALID, "model dims: implausibly large dimensions");
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "dims:%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
             ",%" PRIu64, layers, hidden, heads, ffn, vocab);
    out->layers = layers;
    out->hidden = hidden;
    out->ffn_hidden = ffn;
    out->heads = heads;
    out->kv_heads = heads;
    out->vocab = vocab;
    out->default_seq = 4096;
    out->norm = MODEL_NORM_LAYER;
    out->mlp = MODEL_MLP_GELU;
    out->pos = MODEL_POS_ROTARY;
    out->tied_embeddings = 1;
    out->has_bias = 1;
    out->desc = "decoder with explicit dimensions";
    out->source = "explicit dimensions (Megatron GPT layout, rotary positions)";
    return MS_OK;
}

/* "dims:L,H,A,F,V" -> model. */
static ms_status parse_dims(const char *spec, model_t *out, ms_error *err)
{
    char buf[128];
    uint64_t v[5];
    if (strlen(spec) >= sizeof buf)
        return ms_fail(err, MS_ERR_INVALID, "model '%.40s...': spec too long", spec);
    strcpy(buf, spec);
    char *save = NULL, *tok = strtok_r(buf, ",", &save);
    int n = 0;
    for (; tok && n < 5; tok = strtok_r(NULL, ",", &save), n++)
        if (!ms_parse_u64(tok, &v[n]))
            return ms_fail(err, MS_ERR_INVALID, "model 'dims:%s': '%s' is not a number", spec,
                           tok);
    if (n != 5 || tok)
        return ms_fail(err, MS_ERR_INVALID,
                       "model 'dims:%s': expected dims:LAYERS,HIDDEN,HEADS,FFN,VOCAB", spec);
    return model_from_dims(v[0], v[1], v[2], v[3], v[4], out, err);
}

ms_status model_lookup(const char *name, model_t *out, ms_error *err)
{
    if (!name || !*name) return ms_fail(err, MS_ERR_INVALID, "empty model name");
    if (strncmp(name, "dims:", 5) == 0) return parse_dims(name + 5, out, err);
    if (strncmp(name, "config:", 7) == 0) return hfc_load(name + 7, out, err);
    const model_t *m = model_find(name);
    if (!m) {
        const char *names[256];
        size_t n = 0;
        for (size_t i = 0; i < model_count() && n < 256; i++) names[n++] = model_at(i)->name;
        const char *near = ms_closest(name, names, n);
        return ms_fail(err, MS_ERR_NOTFOUND,
                       "unknown model '%s'%s%s%s (`memsim list` shows the registered models; "
                       "or give --model-config CONFIG.JSON or dims:LAYERS,HIDDEN,HEADS,FFN,VOCAB)",
                       name, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    }
    *out = *m;
    return MS_OK;
}

uint64_t model_head_dim(const model_t *m)
{
    return m->head_dim ? m->head_dim : m->hidden / m->heads;
}

uint64_t model_q_width(const model_t *m) { return m->heads * model_head_dim(m); }

uint64_t model_kv_width(const model_t *m) { return m->kv_heads * model_head_dim(m); }

uint64_t model_fc1_width(const model_t *m)
{
    return m->mlp == MODEL_MLP_SWIGLU ? 2 * m->ffn_hidden : m->ffn_hidden;
}

/* Qwen3 and Qwen3-MoE normalize each head's query and key (q_norm, k_norm: RMSNorm of
 * head_dim). */
int model_has_qk_norm(const model_t *m)
{
    return !strcmp(m->family, "qwen3") || !strcmp(m->family, "qwen3_moe");
}

static uint64_t moe_every(const model_t *m) { return m->moe_every > 1 ? (uint64_t)m->moe_every : 1; }

static int listed_dense(const model_t *m, uint64_t layer)
{
    return m->dense_listed && layer < 8 * sizeof m->dense_layers &&
           (m->dense_layers[layer / 8] >> (layer % 8) & 1u);
}

/* Hugging Face's rule (Qwen2-MoE's and Qwen3-MoE's decoder layers): layer i is sparse when
 * it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0. */
int model_layer_is_moe(const model_t *m, uint64_t layer)
{
    return m->n_experts && !listed_dense(m, layer) && (layer + 1) % moe_every(m) == 0;
}

uint64_t model_moe_layers(const model_t *m)
{
    if (!m->n_experts) return 0;
    if (!m->dense_listed) return m->layers / moe_every(m);
    uint64_t n = 0;
    for (uint64_t l = 0; l < m->layers; l++) n += (uint64_t)model_layer_is_moe(m, l);
    return n;
}

static uint64_t norm_params(const model_t *m)
{
    return m->norm == MODEL_NORM_LAYER ? 2 * m->hidden : m->hidden;
}

/* q, k, v, o projections (+ biases: all four with has_bias, q k v with qkv_bias) and
 * Qwen3's per-head q/k norms. */
static uint64_t attn_params(const model_t *m)
{
    uint64_t h = m->hidden, q = model_q_width(m), kv = model_kv_width(m);
    uint64_t p = h * (q + 2 * kv) + q * h;
    if (m->has_bias) p += q + 2 * kv + h;
    else if (m->qkv_bias) p += q + 2 * kv;
    if (model_has_qk_norm(m)) p += 2 * model_head_dim(m);
    return p;
}

/* One MLP of inner width f in the model's kind (swiglu: gate and up, then down). */
static uint64_t mlp_params(const model_t *m, uint64_t f)
{
    uint64_t h = m->hidden, f1 = m->mlp == MODEL_MLP_SWIGLU ? 2 * f : f;
    uint64_t p = h * f1 + f * h;
    if (m->has_bias) p += f1 + h;
    return p;
}

/* Router h x E (no bias), E experts, the shared expert and its h x 1 gate. */
static uint64_t moe_params(const model_t *m)
{
    uint64_t p = m->hidden * m->n_experts + m->n_experts * mlp_params(m, m->expert_ffn);
    if (m->shared_ffn) p += mlp_params(m, m->shared_ffn);
    if (m->shared_gate) p += m->hidden;
    return p;
}

/* attention + MLP (or experts) + two norms. */
static uint64_t layer_params(const model_t *m, int moe)
{
    uint64_t mlp = moe ? moe_params(m) : mlp_params(m, m->ffn_hidden);
    return attn_params(m) + mlp + 2 * norm_params(m);
}

uint64_t model_layer_params_at(const model_t *m, uint64_t layer)
{
    return layer_params(m, model_layer_is_moe(m, layer));
}

uint64_t model_layer_params(const model_t *m) { return layer_params(m, model_moe_layers(m) > 0); }

uint64_t model_embed_params(const model_t *m)
{
    uint64_t p = m->vocab * m->hidden + m->pos_rows * m->hidden + m->type_vocab * m->hidden;
    if (m->is_encoder) p += norm_params(m); /* BERT's embedding LayerNorm */
    return p;
}

uint64_t model_head_params(const model_t *m)
{
    uint64_t p = 0;
    if (m->is_encoder) p += m->hidden * m->hidden + m->hidden; /* pooler */
    else p += norm_params(m);                                  /* final norm */
    if (!m->tied_embeddings) p += m->vocab * m->hidden;
    return p;
}

uint64_t model_params(const model_t *m)
{
    uint64_t sparse = model_moe_layers(m), dense = m->layers - sparse;
    return dense * layer_params(m, 0) + sparse * layer_params(m, 1) + model_embed_params(m) +
           model_head_params(m);
}

/* A token passes through k of a MoE layer's E experts: the others' parameters are not
 * active (MFU's model FLOPs count the active ones). */
uint64_t model_active_params(const model_t *m)
{
    uint64_t idle = m->n_experts > m->experts_per_tok ? m->n_experts - m->experts_per_tok : 0;
    return model_params(m) - model_moe_layers(m) * idle * mlp_params(m, m->expert_ffn);
}

/* A mixture-of-experts layer as transformers 5 registers it: q, k, v, o (+ Qwen2's q, k, v
 * biases, Qwen3's q/k norms), the router's weight, the experts fused into two 3-D tensors
 * (gate_up_proj, down_proj; one fc1 and one fc2 for ungated experts), the shared expert's
 * three projections and its gate. */
static uint64_t moe_layer_tensors(const model_t *m, uint64_t norm, uint64_t b)
{
    uint64_t t = 4 * b + (m->qkv_bias && !m->has_bias ? 3 : 0) + 2 * model_has_qk_norm(m);
    t += 1 + 2;
    if (m->shared_ffn) t += (m->mlp == MODEL_MLP_SWIGLU ? 3 : 2) * b;
    return t + (uint64_t)m->shared_gate + 2 * norm;
}

/* Per layer: the Hugging Face layouts MemFerry's models use (BertForMaskedLM and
 * RobertaForMaskedLM: separate query, key, value; GPT2LMHeadModel: one c_attn;
 * TransfoXLLMHeadModel: qkv_net, o_net, r_net without biases, a two-layer CoreNet), GPT-NeoX
 * read from a config.json (one query_key_value), else separate q, k, v, o and MLP
 * projections (LLaMA, OPT, Mistral, Qwen2 with its q, k, v biases, Qwen3 with q/k norms). */
static uint64_t layer_tensors(const model_t *m, int fused_qkv, int txl, int moe)
{
    uint64_t norm = m->norm == MODEL_NORM_LAYER ? 2 : 1, b = m->has_bias ? 2 : 1;
    if (txl) return 3 + 2 * norm + 2 * b;
    if (moe) return moe_layer_tensors(m, norm, b);
    uint64_t linears = fused_qkv ? 4 : m->mlp == MODEL_MLP_SWIGLU ? 7 : 6;
    uint64_t extra = (m->qkv_bias && !m->has_bias ? 3 : 0) + 2 * (uint64_t)model_has_qk_norm(m);
    return linears * b + 2 * norm + extra;
}

/* The older registry rows carry no family: GPT-2's layout is told by the name. */
static int fused_qkv_layout(const model_t *m)
{
    if (m->family[0]) return !strcmp(m->family, "gpt2") || !strcmp(m->family, "gpt_neox");
    return !strncmp(m->name, "gpt2", 4);
}

uint64_t model_param_tensors(const model_t *m, uint64_t *per_layer)
{
    int fused = fused_qkv_layout(m);
    int txl = !m->family[0] && !strncmp(m->name, "transformerxl", 13);
    uint64_t sparse = model_moe_layers(m), dense = m->layers - sparse;
    uint64_t norm = m->norm == MODEL_NORM_LAYER ? 2 : 1;
    uint64_t pl = layer_tensors(m, fused, txl, sparse > 0);
    uint64_t other;
    if (txl) other = 4;  /* r_w_bias, r_r_bias, the word embedding, the softmax's bias */
    else if (m->is_encoder) /* word, position, type embeddings and their norm; the MLM head's
                               transform (dense, norm) and decoder bias */
        other = 1 + (m->pos_rows > 0) + (m->type_vocab > 0) + norm + 2 + norm + 1;
    else other = 1 + (m->pos_rows > 0) + norm + !m->tied_embeddings;
    if (per_layer) *per_layer = pl;
    return sparse * pl + dense * layer_tensors(m, fused, txl, 0) + other;
}

const char *model_norm_name(model_norm n) { return n == MODEL_NORM_RMS ? "rmsnorm" : "layernorm"; }

const char *model_mlp_name(model_mlp k)
{
    switch (k) {
    case MODEL_MLP_SWIGLU: return "swiglu";
    case MODEL_MLP_RELU: return "relu";
    default: return "gelu";
    }
}

const char *model_pos_name(model_pos p) { return p == MODEL_POS_ROTARY ? "rotary" : "learned"; }

/* "RMS SwiGLU GQA MoE 60 x top-4 +shared": norm, MLP, attention and experts at a glance. */
static void shape_str(const model_t *m, char *buf, size_t n)
{
    const char *mlp = m->mlp == MODEL_MLP_SWIGLU ? "SwiGLU" : m->mlp == MODEL_MLP_RELU ? "ReLU"
                                                                                       : "GeLU";
    const char *attn = m->kv_heads == m->heads ? "MHA" : m->kv_heads == 1 ? "MQA" : "GQA";
    int k = snprintf(buf, n, "%s %s %s%s", m->norm == MODEL_NORM_RMS ? "RMS" : "LN", mlp, attn,
                     m->is_encoder ? " enc" : "");
    if (m->n_experts && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " MoE %" PRIu64 " x top-%" PRIu64 "%s", m->n_experts,
                 m->experts_per_tok, m->shared_ffn ? " +shared" : "");
}

void model_list(FILE *fp)
{
    fprintf(fp, "%-18s %6s %6s %6s %5s %4s %6s %9s  %-37s %s\n", "model", "layers", "hidden",
            "ffn", "heads", "kv", "vocab", "params", "shape", "description [source]");
    for (size_t i = 0; i < NREG; i++) {
        const model_t *m = &REGISTRY[i];
        char shape[64];
        shape_str(m, shape, sizeof shape);
        fprintf(fp, "%-18s %6" PRIu64 " %6" PRIu64 " %6" PRIu64 " %5" PRIu64 " %4" PRIu64
                " %6" PRIu64 " %8.2fB  %-37s %s [%s]\n", m->name, m->layers, m->hidden,
                m->ffn_hidden, m->heads, m->kv_heads, m->vocab, model_params(m) / 1e9, shape,
                m->desc, m->source);
    }
}

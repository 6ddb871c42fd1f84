/* test_hfconfig.c — unit tests (TAP) of the Hugging Face config.json reader
 * (traces/hfconfig.c) and the parameter counts of the architectures it reads
 * (traces/models.c): every supported model_type, each family's defaults, the counts
 * transformers measured for experiments/realworld/configs, the public counts of the registry's
 * public checkpoints, a registry row against its own config.json field by field, and every
 * kind of bad input by status and message. */
#define _POSIX_C_SOURCE 200809L
#include "tests/tap.h"
#include "traces/hfconfig.h"
#include "traces/models.h"

#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* Writes text to TMPDIR/name; returns the path (two alternating buffers). */
static const char *put(const char *name, const char *text)
{
    static char p[2][512];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    FILE *f = fopen(p[k], "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p[k];
}

static const char *realworld(const char *name)
{
    static char p[1024];
    const char *src = getenv("srcdir");
    snprintf(p, sizeof p, "%s/experiments/realworld/configs/%s.json", src ? src : ".", name);
    return p;
}

/* Sums of p.numel() over AutoModelForCausalLM.from_config (transformers 5.17.0). */
static void test_realworld_counts(void)
{
    static const struct { const char *file; uint64_t params; } CASES[] = {
        {"gpt2-medium", 362163200ull},   {"gpt2-xl", 1569080000ull},
        {"llama3.2-1b", 1235814400ull},  {"tinyllama-1.1b", 1100048384ull},
        {"qwen2.5-0.5b", 494032768ull},  {"qwen2.5-1.5b", 1543714304ull},
        {"mistral-7b", 7248023552ull},   {"mixtral-mini", 1525318656ull},
        {"qwen2-moe-mini", 880813056ull},
        /* the other configs the H200 runs recorded (the JSON results in experiments/realworld/h200) */
        {"gpt2-large", 783205120ull},    {"llama-tiny-2l", 38308352ull},
        {"llama3-8b-8l", 2795573248ull}, {"mistral-7b-4l", 1140887552ull},
        {"mixtral-mini-4l", 430482432ull}, {"qwen2-moe-mini-4l", 501048320ull},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        model_t m;
        ms_error e = {{0}};
        ms_status st = hfc_load(realworld(CASES[i].file), &m, &e);
        uint64_t p = st == MS_OK ? model_params(&m) : 0;
        TAP_OK(st == MS_OK && p == CASES[i].params, "%s.json: %llu parameters as transformers "
               "counts (got %llu%s%s)", CASES[i].file, (unsigned long long)CASES[i].params,
               (unsigned long long)p, st ? ": " : "", e.msg);
    }
    model_t m;
    ms_error e;
    TAP_OK(hfc_load(realworld("llama3-8b"), &m, &e) == MS_OK && model_params(&m) == 8030261248ull,
           "llama3-8b.json: 8 030 261 248 parameters");
    /* the two-layer cut of Qwen3-30B-A3B, counted from its shapes as the full model is in
     * test_families */
    {
        uint64_t h = 2048, q = 4096, kv = 512, E = 128, fe = 768, V = 151936;
        uint64_t layer = h * q + 2 * h * kv + q * h + 2 * 128 + h * E + E * 3 * h * fe + 2 * h;
        TAP_OK(hfc_load(realworld("qwen3-30b-a3b-2l"), &m, &e) == MS_OK &&
               model_params(&m) == 2 * layer + 2 * V * h + h && m.norm_topk &&
               !strcmp(m.family, "qwen3_moe"), "qwen3-30b-a3b-2l.json: %llu parameters "
               "(%s)", (unsigned long long)(2 * layer + 2 * V * h + h), e.msg);
    }
    {
        uint64_t h = 3072, q = 4096, f = 24576, V = 256000;
        uint64_t p = 2 * (4 * h * q + 3 * h * f + 2 * h) + V * h + h;
        TAP_OK(hfc_load(realworld("gemma-7b-2l"), &m, &e) == MS_OK && model_params(&m) == p &&
               !strcmp(m.family, "gemma") && m.tied_embeddings, "gemma-7b-2l.json: %llu "
               "parameters (%s)", (unsigned long long)p, e.msg);
    }
    TAP_OK(hfc_load(realworld("qwen2-moe-mini"), &m, &e) == MS_OK && m.n_experts == 16 &&
           m.experts_per_tok == 4 && m.expert_ffn == 704 && m.shared_ffn == 2816 &&
           m.shared_gate && m.qkv_bias && !m.norm_topk && !m.tied_embeddings,
           "qwen2-moe-mini.json: experts, top-k, widths, shared gate, q/k/v biases");
}

static ms_status parse(const char *name, const char *text, model_t *m, ms_error *e)
{
    e->msg[0] = '\0';
    return hfc_load(put(name, text), m, e);
}

/* One small config per model_type, with its count worked out by hand. */
static void test_families(void)
{
    model_t m;
    ms_error e;
    ms_status st = parse("l.json", "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
                         "\"hidden_size\": 512, \"intermediate_size\": 1376, "
                         "\"num_attention_heads\": 8, \"vocab_size\": 32000}", &m, &e);
    /* kv defaults to the heads; untied; 2 x (4 h^2 + 3 h f + 2 h) + 2 V h + h */
    uint64_t want = 2 * (4 * 512 * 512 + 3 * 512 * 1376 + 2 * 512) + 2 * 32000 * 512 + 512;
    TAP_OK(st == MS_OK && m.kv_heads == 8 && !m.tied_embeddings && m.norm == MODEL_NORM_RMS &&
           m.mlp == MODEL_MLP_SWIGLU && m.act == MODEL_ACT_SILU && m.pos == MODEL_POS_ROTARY &&
           !m.has_bias && !strcmp(m.family, "llama") && model_params(&m) == want,
           "llama: defaults (kv = heads, untied, silu, no biases) and its count (%s)", e.msg);
    TAP_OK(st == MS_OK && !strcmp(m.name, "l") && strstr(m.source, "config.json ") &&
           strstr(m.source, "l.json"), "the name is the file's basename, the source names it");
    uint64_t per = 0;
    TAP_OK(model_param_tensors(&m, &per) == 2 * 9 + 3 && per == 9,
           "llama: 9 parameter tensors per layer, 21 in all");

    st = parse("b.json", "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"hidden_size\": "
               "256, \"intermediate_size\": 512, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"vocab_size\": 1000, \"attention_bias\": true, "
               "\"mlp_bias\": true, \"tie_word_embeddings\": true}", &m, &e);
    want = 256 * (256 + 2 * 128) + 256 * 256 + (256 + 2 * 128 + 256) + 3 * 256 * 512 +
           (2 * 512 + 256) + 2 * 256 + 1000 * 256 + 256;
    TAP_OK(st == MS_OK && m.has_bias && m.tied_embeddings && model_params(&m) == want,
           "llama with attention_bias and mlp_bias, GQA, tied: %llu (%s)",
           (unsigned long long)want, e.msg);

    /* Qwen3-0.6B's public shape: head_dim 128 with hidden 1024 and 16 heads, q/k norms. */
    st = parse("q3.json", "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 28, "
               "\"hidden_size\": 1024, \"intermediate_size\": 3072, \"num_attention_heads\": 16, "
               "\"num_key_value_heads\": 8, \"head_dim\": 128, \"vocab_size\": 151936, "
               "\"tie_word_embeddings\": true}", &m, &e);
    TAP_OK(st == MS_OK && m.head_dim == 128 && model_q_width(&m) == 2048 &&
           model_kv_width(&m) == 1024 && model_has_qk_norm(&m) && !m.qkv_bias &&
           model_params(&m) == 596049920ull, "qwen3: explicit head_dim, q/k norms: Qwen3-0.6B's "
           "596 049 920 (got %llu; %s)", (unsigned long long)model_params(&m), e.msg);
    TAP_OK(model_param_tensors(&m, &per) == 28 * 11 + 2 && per == 11,
           "qwen3: 11 tensors per layer (q_norm, k_norm)");
    st = parse("q3d.json", "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 1, "
               "\"hidden_size\": 1024, \"intermediate_size\": 3072, \"num_attention_heads\": 16, "
               "\"num_key_value_heads\": 8, \"vocab_size\": 1000}", &m, &e);
    TAP_OK(st == MS_OK && model_head_dim(&m) == 128 && !m.tied_embeddings,
           "qwen3: head_dim defaults to 128 (Qwen3Config), untied");

    st = parse("q2.json", "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 1, "
               "\"hidden_size\": 896, \"intermediate_size\": 4864, \"num_attention_heads\": 14, "
               "\"num_key_value_heads\": 2, \"vocab_size\": 1000, \"sliding_window\": 4096, "
               "\"use_sliding_window\": false}", &m, &e);
    TAP_OK(st == MS_OK && m.qkv_bias && !m.has_bias && !m.tied_embeddings &&
           model_param_tensors(&m, &per) == 12 + 3 && per == 12,
           "qwen2: q/k/v biases, untied, a window off by use_sliding_window; 12 tensors a layer");

    st = parse("mi.json", "{\"model_type\": \"mistral\", \"num_hidden_layers\": 1, "
               "\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_attention_heads\": 32, "
               "\"num_key_value_heads\": 8, \"head_dim\": 128, \"vocab_size\": 32768, "
               "\"max_position_embeddings\": 4096}", &m, &e);
    TAP_OK(st == MS_OK && m.head_dim == 0 && model_head_dim(&m) == 128 && m.default_seq == 4096,
           "mistral: head_dim = hidden / heads is stored as 0; the 4096 default window does not "
           "slide within 4096 positions (%s)", e.msg);

    st = parse("mx.json", "{\"model_type\": \"mixtral\", \"num_hidden_layers\": 2, "
               "\"hidden_size\": 512, \"intermediate_size\": 1024, \"num_attention_heads\": 8, "
               "\"num_key_value_heads\": 2, \"vocab_size\": 32000, \"num_local_experts\": 4, "
               "\"num_experts_per_tok\": 2}", &m, &e);
    want = 2 * (512 * (512 + 2 * 128) + 512 * 512 + 512 * 4 + 4 * 3 * 512 * 1024 + 2 * 512) +
           2 * 32000 * 512 + 512;
    TAP_OK(st == MS_OK && m.n_experts == 4 && m.experts_per_tok == 2 && m.expert_ffn == 1024 &&
           m.norm_topk && !m.shared_ffn && model_params(&m) == want,
           "mixtral: router, 4 experts of intermediate_size, top-k renormalized (%s)", e.msg);
    TAP_OK(model_param_tensors(&m, &per) == 2 * 9 + 3 && per == 9,
           "mixtral: 9 tensors a layer (q k v o, router, fused gate_up and down, 2 norms)");

    /* decoder_sparse_step 2: layers 1 and 3 sparse, 0 and 2 dense. */
    st = parse("qm.json", "{\"model_type\": \"qwen2_moe\", \"num_hidden_layers\": 4, "
               "\"hidden_size\": 256, \"intermediate_size\": 1024, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 4, \"vocab_size\": 1000, \"num_experts\": 8, "
               "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 128, "
               "\"shared_expert_intermediate_size\": 512, \"decoder_sparse_step\": 2, "
               "\"mlp_only_layers\": [], \"norm_topk_prob\": true}", &m, &e);
    uint64_t attn = 4 * 256 * 256 + 3 * 256, norms = 2 * 256;
    uint64_t dense = attn + 3 * 256 * 1024 + norms;
    uint64_t sparse = attn + 256 * 8 + 8 * 3 * 256 * 128 + 3 * 256 * 512 + 256 + norms;
    want = 2 * dense + 2 * sparse + 2 * 1000 * 256 + 256;
    TAP_OK(st == MS_OK && model_moe_layers(&m) == 2 && !model_layer_is_moe(&m, 0) &&
           model_layer_is_moe(&m, 1) && !model_layer_is_moe(&m, 2) &&
           model_layer_is_moe(&m, 3) && model_layer_params_at(&m, 0) == dense &&
           model_layer_params_at(&m, 1) == sparse && model_layer_params(&m) == sparse &&
           model_params(&m) == want && m.norm_topk,
           "qwen2_moe, decoder_sparse_step 2: dense and sparse layers alternate (%s)", e.msg);
    TAP_OK(model_param_tensors(&m, &per) == 2 * 12 + 2 * 16 + 3 && per == 16,
           "qwen2_moe: 16 tensors a sparse layer (shared expert and gate), 12 a dense one");

    /* Qwen3-30B-A3B's public shape (48 layers, 128 experts of 768, top-8, head_dim 128 with
     * hidden 2048 and 32 heads, 4 KV heads, untied): its count from the shapes of
     * Qwen3MoeAttention (q, k, v, o, q_norm, k_norm), Qwen3MoeTopKRouter [E, h],
     * Qwen3MoeExperts' gate_up_proj [E, 2f, h] and down_proj [E, h, f], two RMSNorms a layer,
     * embed_tokens, the final norm and lm_head: 30 532 122 624 (the model card's 30.5B). */
    st = parse("q3m.json", "{\"model_type\": \"qwen3_moe\", \"num_hidden_layers\": 48, "
               "\"hidden_size\": 2048, \"intermediate_size\": 6144, \"num_attention_heads\": "
               "32, \"num_key_value_heads\": 4, \"head_dim\": 128, \"vocab_size\": 151936, "
               "\"num_experts\": 128, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": "
               "768, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"norm_topk_prob\": "
               "true, \"max_position_embeddings\": 40960, \"use_sliding_window\": false, "
               "\"sliding_window\": null, \"tie_word_embeddings\": false, "
               "\"output_router_logits\": false}", &m, &e);
    {
        uint64_t h = 2048, q = 32 * 128, kv = 4 * 128, E = 128, fe = 768, V = 151936;
        uint64_t layer = h * q + 2 * h * kv + q * h + 2 * 128 + h * E + E * 3 * h * fe + 2 * h;
        want = 48 * layer + 2 * V * h + h;
        uint64_t active = want - 48 * (E - 8) * 3 * h * fe;
        TAP_OK(st == MS_OK && want == 30532122624ull && model_params(&m) == want &&
               model_active_params(&m) == active && m.n_experts == 128 &&
               m.experts_per_tok == 8 && m.expert_ffn == 768 && m.norm_topk && !m.shared_ffn &&
               !m.shared_gate && model_has_qk_norm(&m) && model_moe_layers(&m) == 48 &&
               !m.qkv_bias, "qwen3_moe: Qwen3-30B-A3B's %llu parameters, %llu active (got "
               "%llu, %llu; %s)", (unsigned long long)want, (unsigned long long)active,
               (unsigned long long)model_params(&m), (unsigned long long)model_active_params(&m),
               e.msg);
        TAP_OK(model_param_tensors(&m, &per) == 48 * 11 + 3 && per == 11,
               "qwen3_moe: 11 tensors a layer (q k v o, q_norm k_norm, router, fused gate_up "
               "and down, 2 norms)");
    }
    /* decoder_sparse_step 2: layers 1 and 3 sparse; the dense ones of intermediate_size;
     * norm_topk_prob false by default (Qwen3MoeConfig), head_dim hidden / heads when absent */
    st = parse("q3ms.json", "{\"model_type\": \"qwen3_moe\", \"num_hidden_layers\": 4, "
               "\"hidden_size\": 256, \"intermediate_size\": 1024, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"vocab_size\": 1000, \"num_experts\": 8, "
               "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 128, "
               "\"decoder_sparse_step\": 2}", &m, &e);
    {
        uint64_t at = 256 * 256 + 2 * 256 * 128 + 256 * 256 + 2 * 64, nr = 2 * 256;
        uint64_t dn = at + 3 * 256 * 1024 + nr, sp = at + 256 * 8 + 8 * 3 * 256 * 128 + nr;
        want = 2 * dn + 2 * sp + 2 * 1000 * 256 + 256;
        TAP_OK(st == MS_OK && !m.norm_topk && model_head_dim(&m) == 64 &&
               !model_layer_is_moe(&m, 0) && model_layer_is_moe(&m, 1) &&
               model_layer_params_at(&m, 0) == dn && model_layer_params_at(&m, 3) == sp &&
               model_params(&m) == want, "qwen3_moe, decoder_sparse_step 2: dense and sparse "
               "layers alternate, no shared expert, norm_topk_prob off by default (%s)", e.msg);
    }
    /* mlp_only_layers [0, 2, 9] with decoder_sparse_step 1 over 4 layers: 0 and 2 dense,
     * 1 and 3 sparse (9 is no layer's index), the same counts as step 2 above */
    uint64_t step2 = want;
    st = parse("q3mo.json", "{\"model_type\": \"qwen3_moe\", \"num_hidden_layers\": 4, "
               "\"hidden_size\": 256, \"intermediate_size\": 1024, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"vocab_size\": 1000, \"num_experts\": 8, "
               "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 128, "
               "\"mlp_only_layers\": [0, 2, 9, 2]}", &m, &e);
    TAP_OK(st == MS_OK && m.dense_listed == 2 && !model_layer_is_moe(&m, 0) &&
           model_layer_is_moe(&m, 1) && !model_layer_is_moe(&m, 2) && model_layer_is_moe(&m, 3) &&
           model_moe_layers(&m) == 2 && model_params(&m) == step2,
           "qwen3_moe, mlp_only_layers: the listed layers dense (%s)", e.msg);

    /* Gemma-7B's public shape (28 layers, hidden 3072, 16 heads of head_dim 256, 16 KV
     * heads, GeGLU of 24576, 256000 tokens, tied): q, k, v, o, gate, up, down and two
     * GemmaRMSNorms a layer, embed_tokens (also the head), the final norm: 8 537 680 896
     * (the model card's 8.54B). Gemma-2B: MQA (1 KV head), 18 layers: 2 506 172 416. */
    st = parse("g7.json", "{\"model_type\": \"gemma\", \"num_hidden_layers\": 28, "
               "\"hidden_size\": 3072, \"intermediate_size\": 24576, \"num_attention_heads\": "
               "16, \"num_key_value_heads\": 16, \"head_dim\": 256, \"vocab_size\": 256000, "
               "\"hidden_act\": \"gelu_pytorch_tanh\", \"max_position_embeddings\": 8192}",
               &m, &e);
    {
        uint64_t h = 3072, q = 16 * 256, kv = 16 * 256, f = 24576, V = 256000;
        want = 28 * (2 * h * q + 2 * h * kv + 3 * h * f + 2 * h) + V * h + h;
        TAP_OK(st == MS_OK && want == 8537680896ull && model_params(&m) == want &&
               m.tied_embeddings && m.head_dim == 256 && m.act == MODEL_ACT_GELU_TANH &&
               m.mlp == MODEL_MLP_SWIGLU && m.norm == MODEL_NORM_RMS && !m.has_bias &&
               !model_has_qk_norm(&m) && m.default_seq == 4096, "gemma: Gemma-7B's %llu "
               "parameters, tied, head_dim 256, GeGLU (got %llu; %s)", (unsigned long long)want,
               (unsigned long long)model_params(&m), e.msg);
        TAP_OK(model_param_tensors(&m, &per) == 28 * 9 + 2 && per == 9,
               "gemma: 9 tensors a layer, the tied head none of its own");
    }
    st = parse("g2b.json", "{\"model_type\": \"gemma\", \"num_hidden_layers\": 18, "
               "\"hidden_size\": 2048, \"intermediate_size\": 16384, \"num_attention_heads\": "
               "8, \"num_key_value_heads\": 1, \"vocab_size\": 256000}", &m, &e);
    {
        uint64_t h = 2048, q = 8 * 256, kv = 256, f = 16384, V = 256000;
        want = 18 * (2 * h * q + 2 * h * kv + 3 * h * f + 2 * h) + V * h + h;
        TAP_OK(st == MS_OK && want == 2506172416ull && model_params(&m) == want &&
               model_head_dim(&m) == 256 && m.kv_heads == 1 && m.act == MODEL_ACT_GELU_TANH &&
               m.tied_embeddings, "gemma: Gemma-2B's %llu parameters with MQA, head_dim 256 "
               "and gelu_pytorch_tanh by default (%s)", (unsigned long long)want, e.msg);
    }

    st = parse("g.json", "{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_embd\": 768, "
               "\"n_head\": 12, \"vocab_size\": 50257, \"n_positions\": 1024}", &m, &e);
    TAP_OK(st == MS_OK && m.tied_embeddings && m.has_bias && m.ffn_hidden == 3072 &&
           m.pos == MODEL_POS_LEARNED && m.pos_rows == 1024 && m.max_seq == 1024 &&
           m.act == MODEL_ACT_GELU_TANH && m.resid_dropout == 0.1 && m.attn_dropout == 0.1 &&
           model_params(&m) == 124439808ull && model_param_tensors(&m, &per) == 12 * 12 + 4,
           "gpt2: tied, n_inner 4h, gelu_new, dropout 0.1, 124 439 808 (%s)", e.msg);

    st = parse("nx.json", "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 44, "
               "\"hidden_size\": 6144, \"intermediate_size\": 24576, \"num_attention_heads\": 64, "
               "\"vocab_size\": 50432, \"max_position_embeddings\": 2048}", &m, &e);
    TAP_OK(st == MS_OK && m.parallel_residual && !m.tied_embeddings && m.has_bias &&
           model_params(&m) == 20554567680ull && model_param_tensors(&m, &per) == 44 * 12 + 4,
           "gpt_neox: parallel residual, untied, GPT-NeoX-20B's 20 554 567 680 (%s)", e.msg);
    TAP_OK(st == MS_OK && m.rotary_pct == 0.25, "gpt_neox: rotary_pct defaults to 0.25");
    st = parse("nx2.json", "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 1, "
               "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
               "\"vocab_size\": 100, \"rotary_pct\": 0.5}", &m, &e);
    TAP_OK(st == MS_OK && m.rotary_pct == 0.5, "gpt_neox: rotary_pct read (%s)", e.msg);
    st = parse("nx3.json", "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 1, "
               "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
               "\"vocab_size\": 100, \"rope_parameters\": {\"rope_type\": \"default\", "
               "\"partial_rotary_factor\": 1.0}}", &m, &e);
    TAP_OK(st == MS_OK && m.rotary_pct == 1.0,
           "gpt_neox: rope_parameters' partial_rotary_factor when rotary_pct is absent (%s)",
           e.msg);

    /* Phi-3-mini-4k's shape (its public file's sliding_window 2047 set to null) */
    st = parse("p3.json", "{\"model_type\": \"phi3\", \"num_hidden_layers\": 32, "
               "\"hidden_size\": 3072, \"intermediate_size\": 8192, \"num_attention_heads\": "
               "32, \"num_key_value_heads\": 32, \"vocab_size\": 32064, "
               "\"sliding_window\": null, \"rope_scaling\": null}", &m, &e);
    TAP_OK(st == MS_OK && !m.tied_embeddings && m.mlp == MODEL_MLP_SWIGLU &&
           m.norm == MODEL_NORM_RMS && m.rotary_pct == 0 && m.max_seq == 0 &&
           model_params(&m) == 3821079552ull && !strcmp(m.family, "phi3"),
           "phi3: untied, SwiGLU, RMSNorm, every dimension rotated, Phi-3-mini's "
           "3 821 079 552 (%s)", e.msg);
    st = parse("p3b.json", "{\"model_type\": \"phi3\", \"num_hidden_layers\": 1, "
               "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
               "\"vocab_size\": 100, \"rope_parameters\": {\"rope_type\": \"default\", "
               "\"partial_rotary_factor\": 0.75}, \"sliding_window\": 8192}", &m, &e);
    TAP_OK(st == MS_OK && m.rotary_pct == 0.75 && m.kv_heads == 2,
           "phi3: partial_rotary_factor from rope_parameters, KV heads default to the heads, "
           "a window past the context is full attention (%s)", e.msg);

    st = parse("o.json", "{\"model_type\": \"opt\", \"num_hidden_layers\": 24, "
               "\"hidden_size\": 2048, \"ffn_dim\": 8192, \"num_attention_heads\": 32, "
               "\"vocab_size\": 50272, \"max_position_embeddings\": 2048, "
               "\"word_embed_proj_dim\": 2048}", &m, &e);
    TAP_OK(st == MS_OK && m.pos_rows == 2050 && m.max_seq == 2048 && m.mlp == MODEL_MLP_RELU &&
           m.tied_embeddings && m.resid_dropout == 0.1 && model_params(&m) == 1315758080ull,
           "opt: 2-row position offset, relu, tied, opt-1.3b's 1 315 758 080 (%s)", e.msg);

    st = parse("be.json", "{\"model_type\": \"bert\", \"num_hidden_layers\": 12, "
               "\"hidden_size\": 768, \"intermediate_size\": 3072, \"num_attention_heads\": 12, "
               "\"vocab_size\": 30522, \"max_position_embeddings\": 512}", &m, &e);
    TAP_OK(st == MS_OK && m.is_encoder && m.type_vocab == 2 && m.pos_rows == 512 &&
           m.default_seq == 512 && model_params(&m) == 109482240ull,
           "bert: encoder, 2 token types, bert-base's 109 482 240 (%s)", e.msg);

    TAP_OK(model_lookup("config:" "/nonexistent/x.json", &m, &e) == MS_ERR_IO,
           "model_lookup reads config:PATH (a missing file: MS_ERR_IO)");
    char spec[600];
    snprintf(spec, sizeof spec, "config:%s", realworld("llama3.2-1b"));
    TAP_OK(model_lookup(spec, &m, &e) == MS_OK && model_params(&m) == 1235814400ull &&
           !strcmp(m.name, "llama3.2-1b"), "model_lookup(\"config:...llama3.2-1b.json\")");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/Meta-Llama-3-8B", tmpdir);
    mkdir(dir, 0700);
    TAP_OK(parse("Meta-Llama-3-8B/config.json", "{\"model_type\": \"llama\", "
                 "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"intermediate_size\": 128, "
                 "\"num_attention_heads\": 2, \"vocab_size\": 100}", &m, &e) == MS_OK &&
           !strcmp(m.name, "Meta-Llama-3-8B"), "a file named config.json takes its folder's name");
}

/* Registry rows of public checkpoints count as their publishers state. */
static void test_registry_counts(void)
{
    static const struct { const char *name; uint64_t params; } CASES[] = {
        {"llama2-7b", 6738415616ull},      {"llama2-13b", 13015864320ull},
        {"llama2-70b", 68976648192ull},    {"llama3-8b", 8030261248ull},
        {"llama3-70b", 70553706496ull},    {"mistral-7b-v0.3", 7248023552ull},
        {"mixtral-8x7b", 46702792704ull},  {"qwen2.5-7b", 7615616512ull},
        {"qwen2.5-72b", 72706203648ull},   {"qwen1.5-moe-a2.7b", 14315784192ull},
        /* older rows, unchanged */
        {"mistral-7b", 7241732096ull},     {"gpt2", 124439808ull},
        {"gpt-neox-20b", 20554567680ull},  {"bert-base", 109482240ull},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const model_t *m = model_find(CASES[i].name);
        uint64_t p = m ? model_params(m) : 0;
        TAP_OK(p == CASES[i].params, "registry %s: %llu parameters (got %llu)", CASES[i].name,
               (unsigned long long)CASES[i].params, (unsigned long long)p);
    }
}

/* Every field but the name and the strings that say where the model came from. */
static int same_model(const model_t *a, const model_t *b)
{
    return a->layers == b->layers && a->hidden == b->hidden && a->ffn_hidden == b->ffn_hidden &&
           a->heads == b->heads && a->kv_heads == b->kv_heads && a->vocab == b->vocab &&
           a->default_seq == b->default_seq && a->pos_rows == b->pos_rows &&
           a->max_seq == b->max_seq && a->type_vocab == b->type_vocab && a->norm == b->norm &&
           a->mlp == b->mlp && a->pos == b->pos && a->tied_embeddings == b->tied_embeddings &&
           a->has_bias == b->has_bias && a->is_encoder == b->is_encoder &&
           a->parallel_residual == b->parallel_residual && !strcmp(a->family, b->family) &&
           a->head_dim == b->head_dim && a->qkv_bias == b->qkv_bias && a->act == b->act &&
           a->resid_dropout == b->resid_dropout && a->attn_dropout == b->attn_dropout &&
           a->n_experts == b->n_experts && a->experts_per_tok == b->experts_per_tok &&
           a->expert_ffn == b->expert_ffn && a->shared_ffn == b->shared_ffn &&
           a->shared_gate == b->shared_gate && a->moe_every == b->moe_every &&
           a->norm_topk == b->norm_topk;
}

/* The public config.json files, as far as the reader looks at them. */
static void test_registry_equals_config(void)
{
    static const struct { const char *row, *json; } CASES[] = {
        {"llama3-8b", "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
         "\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32, "
         "\"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"vocab_size\": 128256, "
         "\"max_position_embeddings\": 8192, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05, "
         "\"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"attention_bias\": false, "
         "\"attention_dropout\": 0.0, \"torch_dtype\": \"bfloat16\", \"rope_scaling\": null}"},
        {"mistral-7b-v0.3", "{\"model_type\": \"mistral\", \"hidden_size\": 4096, "
         "\"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
         "\"num_key_value_heads\": 8, \"head_dim\": 128, \"vocab_size\": 32768, "
         "\"max_position_embeddings\": 32768, \"sliding_window\": null, "
         "\"tie_word_embeddings\": false}"},
        {"mixtral-8x7b", "{\"model_type\": \"mixtral\", \"hidden_size\": 4096, "
         "\"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
         "\"num_key_value_heads\": 8, \"vocab_size\": 32000, \"max_position_embeddings\": "
         "32768, \"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"sliding_window\": null, "
         "\"output_router_logits\": false, \"router_aux_loss_coef\": 0.02, "
         "\"tie_word_embeddings\": false}"},
        {"qwen2.5-7b", "{\"model_type\": \"qwen2\", \"hidden_size\": 3584, "
         "\"intermediate_size\": 18944, \"num_hidden_layers\": 28, \"num_attention_heads\": 28, "
         "\"num_key_value_heads\": 4, \"vocab_size\": 152064, \"max_position_embeddings\": "
         "131072, \"sliding_window\": 131072, \"use_sliding_window\": false, "
         "\"max_window_layers\": 28, \"tie_word_embeddings\": false}"},
        {"qwen1.5-moe-a2.7b", "{\"model_type\": \"qwen2_moe\", \"hidden_size\": 2048, "
         "\"intermediate_size\": 5632, \"num_hidden_layers\": 24, \"num_attention_heads\": 16, "
         "\"num_key_value_heads\": 16, \"vocab_size\": 151936, \"max_position_embeddings\": "
         "8192, \"num_experts\": 60, \"num_experts_per_tok\": 4, \"moe_intermediate_size\": "
         "1408, \"shared_expert_intermediate_size\": 5632, \"decoder_sparse_step\": 1, "
         "\"norm_topk_prob\": false, \"use_sliding_window\": false, \"sliding_window\": 32768, "
         "\"tie_word_embeddings\": false}"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        model_t m;
        ms_error e = {{0}};
        const model_t *row = model_find(CASES[i].row);
        ms_status st = parse("row.json", CASES[i].json, &m, &e);
        TAP_OK(row && st == MS_OK && same_model(row, &m), "registry %s equals its config.json "
               "field by field (%s)", CASES[i].row, e.msg);
    }
}

/* HF's per-family defaults where a field is absent. */
static void test_defaults(void)
{
    model_t m;
    ms_error e;
    ms_status st = parse("g2.json", "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_embd\": 64, "
                         "\"n_head\": 2, \"vocab_size\": 100, \"n_positions\": 64, "
                         "\"n_inner\": null, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, "
                         "\"attn_pdrop\": 0.0, \"activation_function\": \"relu\"}", &m, &e);
    TAP_OK(st == MS_OK && m.ffn_hidden == 256 && m.resid_dropout == 0 && m.attn_dropout == 0 &&
           m.mlp == MODEL_MLP_RELU && m.act == MODEL_ACT_RELU,
           "gpt2: n_inner null is 4h, dropout 0 read, relu (%s)", e.msg);
    st = parse("ll.json", "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"hidden_size\": "
               "64, \"intermediate_size\": 128, \"num_attention_heads\": 2, \"vocab_size\": 100, "
               "\"attention_dropout\": 0.1, \"hidden_act\": \"gelu_pytorch_tanh\"}", &m, &e);
    TAP_OK(st == MS_OK && m.attn_dropout == 0.1 && m.act == MODEL_ACT_GELU_TANH &&
           m.default_seq == 2048, "llama: attention_dropout read, gelu_pytorch_tanh, 2048 "
           "positions by default (%s)", e.msg);
    st = parse("lr.json", "{\"model_type\": \"llama\", \"num_hidden_layers\": 1.0, \"hidden_size\": "
               "6.4e1, \"intermediate_size\": 128, \"num_attention_heads\": 2, \"vocab_size\": 100}",
               &m, &e);
    TAP_OK(st == MS_OK && m.hidden == 64 && m.layers == 1, "sizes written as reals without a "
           "fraction (1.0, 6.4e1) are read as integers (%s)", e.msg);
    st = parse("ms.json", "{\"model_type\": \"mistral\", \"num_hidden_layers\": 1, "
               "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
               "\"num_key_value_heads\": 1, \"vocab_size\": 100}", &m, &e);
    TAP_OK(st == MS_ERR_INVALID && strstr(e.msg, "sliding_window") && strstr(e.msg, "4096") &&
           strstr(e.msg, "default"), "mistral without sliding_window: MistralConfig's 4096 "
           "window over 131072 positions is refused (%s)", e.msg);
}

/* Each bad input: status, the file and the field named. */
static void bad(const char *what, const char *json, ms_status want, const char *field)
{
    model_t m;
    ms_error e;
    const char *path = put("bad.json", json);
    ms_status st = parse("bad.json", json, &m, &e);
    TAP_OK(st == want && strstr(e.msg, path) && strstr(e.msg, field), "%s: %s, naming the file "
           "and '%s' (%s)", what, ms_status_str(want), field, e.msg);
}

#define LL "\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"intermediate_size\": 128, " \
           "\"vocab_size\": 100, "

static void test_bad_input(void)
{
    bad("not JSON", "{\"model_type\": \"llama\",\n  oops }", MS_ERR_PARSE, "bad.json:2:");
    bad("a duplicate key", "{\"model_type\": \"llama\", \"model_type\": \"gpt2\"}", MS_ERR_PARSE,
        "duplicate");
    bad("a list at the top", "[1, 2]", MS_ERR_INVALID, "not an object");
    bad("no model_type", "{\"hidden_size\": 64}", MS_ERR_INVALID, "model_type: missing");
    bad("an unsupported model_type", "{\"model_type\": \"falcon\"}", MS_ERR_INVALID, "falcon");
    bad("a missing size", "{" LL "\"num_attention_heads\": 2}", MS_ERR_INVALID,
        "hidden_size: missing");
    bad("zero layers", "{\"model_type\": \"llama\", \"num_hidden_layers\": 0}", MS_ERR_INVALID,
        "num_hidden_layers: must be positive");
    bad("negative heads", "{" LL "\"hidden_size\": 64, \"num_attention_heads\": -2}",
        MS_ERR_INVALID, "num_attention_heads: must be positive");
    bad("a fractional size", "{" LL "\"hidden_size\": 64.5, \"num_attention_heads\": 2}",
        MS_ERR_INVALID, "hidden_size: expected a positive integer");
    bad("a size written as a huge real", "{" LL "\"hidden_size\": 1e30, \"num_attention_heads\": 2}",
        MS_ERR_INVALID, "hidden_size: 1e+30 is implausibly large");
    bad("a negative size written as a real", "{" LL "\"hidden_size\": -64.0, "
        "\"num_attention_heads\": 2}", MS_ERR_INVALID, "hidden_size: must be positive (is -64)");
    bad("a size as a string", "{" LL "\"hidden_size\": \"64\", \"num_attention_heads\": 2}",
        MS_ERR_INVALID, "hidden_size: expected a positive integer, not a string");
    bad("heads not dividing hidden", "{" LL "\"hidden_size\": 1000, \"num_attention_heads\": 16}",
        MS_ERR_INVALID, "num_attention_heads: 16 does not divide hidden_size 1000");
    bad("kv heads not dividing heads", "{" LL "\"hidden_size\": 64, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 3}", MS_ERR_INVALID, "num_key_value_heads: 3 does not divide");
    bad("an implausible size", "{" LL "\"hidden_size\": 1099511627776, "
        "\"num_attention_heads\": 2}", MS_ERR_INVALID, "hidden_size: 1099511627776 is implaus");
    bad("mistral without num_key_value_heads", "{\"model_type\": \"mistral\", "
        "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"vocab_size\": 100}", MS_ERR_INVALID,
        "num_key_value_heads: missing");
    bad("an unknown activation", "{" LL "\"hidden_size\": 64, \"num_attention_heads\": 2, "
        "\"hidden_act\": \"tanh\"}", MS_ERR_INVALID, "hidden_act: 'tanh'");
    bad("attention biases without MLP biases", "{" LL "\"hidden_size\": 64, "
        "\"num_attention_heads\": 2, \"attention_bias\": true}", MS_ERR_INVALID,
        "attention_bias: true while mlp_bias is false");
    bad("a dropout above 1", "{" LL "\"hidden_size\": 64, \"num_attention_heads\": 2, "
        "\"attention_dropout\": 1.5}", MS_ERR_INVALID, "attention_dropout: expected a prob");
    bad("a boolean as a number", "{" LL "\"hidden_size\": 64, \"num_attention_heads\": 2, "
        "\"tie_word_embeddings\": 1}", MS_ERR_INVALID, "tie_word_embeddings: expected true");
    bad("quantized weights", "{" LL "\"hidden_size\": 64, \"num_attention_heads\": 2, "
        "\"quantization_config\": {\"bits\": 4}}", MS_ERR_INVALID, "quantization_config");
    bad("mistral's sliding window", "{\"model_type\": \"mistral\", \"num_hidden_layers\": 1, "
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
        "\"num_key_value_heads\": 1, \"vocab_size\": 100, \"sliding_window\": 4096, "
        "\"max_position_embeddings\": 32768}", MS_ERR_INVALID,
        "sliding_window: 4096 below max_position_embeddings 32768");
    bad("qwen2's sliding window switched on", "{\"model_type\": \"qwen2\", "
        "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 100, "
        "\"use_sliding_window\": true, \"sliding_window\": 4096}", MS_ERR_INVALID,
        "sliding_window: 4096 below");
    bad("qwen2_moe's mlp_only_layers not a list", "{\"model_type\": \"qwen2_moe\", "
        "\"num_hidden_layers\": 2, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"vocab_size\": 100, "
        "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
        "\"shared_expert_intermediate_size\": 64, \"mlp_only_layers\": 0}", MS_ERR_INVALID,
        "mlp_only_layers: expected a list");
    bad("qwen2_moe without moe_intermediate_size", "{\"model_type\": \"qwen2_moe\", "
        "\"num_hidden_layers\": 2, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"vocab_size\": 100, "
        "\"num_experts\": 4, \"num_experts_per_tok\": 2}", MS_ERR_INVALID,
        "moe_intermediate_size: missing");
#define Q3M "\"model_type\": \"qwen3_moe\", \"num_hidden_layers\": 2, \"hidden_size\": 64, " \
            "\"intermediate_size\": 128, \"num_attention_heads\": 2, " \
            "\"num_key_value_heads\": 2, \"vocab_size\": 100, \"num_experts\": 4, " \
            "\"num_experts_per_tok\": 2, "
    bad("qwen3_moe without moe_intermediate_size", "{" Q3M "\"norm_topk_prob\": true}",
        MS_ERR_INVALID, "moe_intermediate_size: missing");
    bad("qwen3_moe's router auxiliary loss", "{" Q3M "\"moe_intermediate_size\": 32, "
        "\"output_router_logits\": true}", MS_ERR_INVALID, "output_router_logits");
    bad("qwen3_moe's mlp_only_layers of names", "{" Q3M "\"moe_intermediate_size\": 32, "
        "\"mlp_only_layers\": [\"1\"]}", MS_ERR_INVALID, "mlp_only_layers: expected layer "
        "indices");
    bad("qwen3_moe's sliding window switched on", "{" Q3M "\"moe_intermediate_size\": 32, "
        "\"use_sliding_window\": true, \"sliding_window\": 1024}", MS_ERR_INVALID,
        "sliding_window: 1024 below");
    bad("qwen3_moe's attention biases", "{" Q3M "\"moe_intermediate_size\": 32, "
        "\"attention_bias\": true}", MS_ERR_INVALID, "attention_bias");
    bad("gemma without num_key_value_heads", "{\"model_type\": \"gemma\", "
        "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"vocab_size\": 100}", MS_ERR_INVALID,
        "num_key_value_heads: missing");
    bad("gemma's bidirectional attention", "{\"model_type\": \"gemma\", "
        "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 100, "
        "\"use_bidirectional_attention\": true}", MS_ERR_INVALID,
        "use_bidirectional_attention");
    bad("gemma2 (not a modelled family)", "{\"model_type\": \"gemma2\", "
        "\"num_hidden_layers\": 1}", MS_ERR_INVALID, "'gemma2' is not supported: Gemma 2's "
        "attn_logit_softcapping and final_logit_softcapping");
    bad("more experts per token than experts", "{\"model_type\": \"mixtral\", "
        "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"vocab_size\": 100, "
        "\"num_local_experts\": 2, \"num_experts_per_tok\": 3}", MS_ERR_INVALID,
        "num_experts_per_tok: 3 is more than");
    bad("the router's auxiliary loss", "{\"model_type\": \"mixtral\", \"num_hidden_layers\": 1, "
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
        "\"num_key_value_heads\": 2, \"vocab_size\": 100, \"num_local_experts\": 2, "
        "\"num_experts_per_tok\": 1, \"output_router_logits\": true}", MS_ERR_INVALID,
        "output_router_logits");
    bad("OPT's projected embeddings", "{\"model_type\": \"opt\", \"num_hidden_layers\": 24, "
        "\"hidden_size\": 1024, \"ffn_dim\": 4096, \"num_attention_heads\": 16, "
        "\"vocab_size\": 50272, \"max_position_embeddings\": 2048, \"word_embed_proj_dim\": 512}",
        MS_ERR_INVALID, "word_embed_proj_dim");
    bad("OPT post-LayerNorm", "{\"model_type\": \"opt\", \"num_hidden_layers\": 2, "
        "\"hidden_size\": 64, \"ffn_dim\": 128, \"num_attention_heads\": 2, \"vocab_size\": 100, "
        "\"max_position_embeddings\": 64, \"do_layer_norm_before\": false}", MS_ERR_INVALID,
        "do_layer_norm_before");
    bad("gpt2 without n_positions", "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_embd\": 64, "
        "\"n_head\": 2, \"vocab_size\": 100}", MS_ERR_INVALID, "n_positions: missing");
    bad("gpt2 dropout on the embedding only", "{\"model_type\": \"gpt2\", \"n_layer\": 1, "
        "\"n_embd\": 64, \"n_head\": 2, \"vocab_size\": 100, \"n_positions\": 64, "
        "\"resid_pdrop\": 0.0}", MS_ERR_INVALID, "embd_pdrop");
    bad("bert relative positions", "{\"model_type\": \"bert\", \"num_hidden_layers\": 1, "
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
        "\"vocab_size\": 100, \"max_position_embeddings\": 64, \"position_embedding_type\": "
        "\"relative_key\"}", MS_ERR_INVALID, "position_embedding_type");
    bad("gpt_neox without attention biases", "{\"model_type\": \"gpt_neox\", "
        "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 2, \"vocab_size\": 100, \"attention_bias\": false}",
        MS_ERR_INVALID, "attention_bias");
    bad("gpt_neox rotary_pct 0", "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 1, "
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
        "\"vocab_size\": 100, \"rotary_pct\": 0}", MS_ERR_INVALID, "rotary_pct");
#define P3 "\"model_type\": \"phi3\", \"num_hidden_layers\": 1, \"hidden_size\": 64, " \
           "\"intermediate_size\": 128, \"num_attention_heads\": 2, \"vocab_size\": 100, "
    bad("phi3 with Phi-3-mini-4k's sliding window", "{" P3 "\"sliding_window\": 2047}",
        MS_ERR_INVALID, "sliding_window");
    bad("phi3 longrope rope_scaling", "{" P3 "\"rope_scaling\": {\"type\": \"longrope\", "
        "\"short_factor\": [1.0], \"long_factor\": [1.0]}}", MS_ERR_INVALID, "rope_scaling");
    bad("phi3 rope_parameters of another type", "{" P3 "\"rope_parameters\": {\"rope_type\": "
        "\"yarn\", \"factor\": 4.0}}", MS_ERR_INVALID, "rope_parameters");
    bad("phi3 rope_scaling not an object", "{" P3 "\"rope_scaling\": 2}", MS_ERR_INVALID,
        "rope_scaling");
    bad("phi3 partial_rotary_factor giving an odd count", "{" P3
        "\"partial_rotary_factor\": 0.3}", MS_ERR_INVALID, "partial_rotary_factor");
    bad("phi3 partial_rotary_factor 0", "{" P3 "\"partial_rotary_factor\": 0}",
        MS_ERR_INVALID, "partial_rotary_factor");
    bad("phi3 residual dropout", "{" P3 "\"resid_pdrop\": 0.1}", MS_ERR_INVALID,
        "resid_pdrop");
    bad("phi3 attention dropout", "{" P3 "\"attention_dropout\": 0.1}", MS_ERR_INVALID,
        "attention_dropout");
    model_t m;
    ms_error e;
    TAP_OK(hfc_load("/nonexistent/config.json", &m, &e) == MS_ERR_IO &&
           strstr(e.msg, "/nonexistent/config.json"), "a missing file: MS_ERR_IO, named");
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-test-hfconfig-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temporary directory\n");
        return 99;
    }
    test_realworld_counts();
    test_families();
    test_registry_counts();
    test_registry_equals_config();
    test_defaults();
    test_bad_input();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

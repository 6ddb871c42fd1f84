/* models.h — the registry of transformer model shapes by name (GPT-style decoders and a few
 * encoders), each with a one-line description and the paper or public config it comes from,
 * plus models given by explicit dimensions. Used by the trace generator (traces/gen.c), the
 * planners' cost models (parameter counts) and `memsim list`. */
#ifndef MEMSIM_MODELS_H
#define MEMSIM_MODELS_H

#include "traces/util.h"

#define MODEL_NAME_MAX 64

typedef enum model_norm { MODEL_NORM_LAYER = 0, MODEL_NORM_RMS } model_norm;
/* gelu and relu MLPs: fc1 h->f, activation, fc2 f->h. swiglu: gate and up projections h->2f
 * in one GEMM, silu(gate)*up, down f->h. */
typedef enum model_mlp { MODEL_MLP_GELU = 0, MODEL_MLP_SWIGLU, MODEL_MLP_RELU } model_mlp;
/* The MLP's activation: gelu (erf), gelu_new (tanh approximation, GPT-2), silu (SwiGLU's
 * gate), relu. MODEL_ACT_DEFAULT: the mlp kind's usual one. */
typedef enum model_act {
    MODEL_ACT_DEFAULT = 0, MODEL_ACT_GELU, MODEL_ACT_GELU_TANH, MODEL_ACT_SILU, MODEL_ACT_RELU
} model_act;
/* learned: a position table of pos_rows x hidden parameters; rotary: no parameters. */
typedef enum model_pos { MODEL_POS_LEARNED = 0, MODEL_POS_ROTARY } model_pos;

/* Plain data. The head dimension d is head_dim, or hidden / heads when head_dim is 0; the
 * query width is heads * d (hidden unless head_dim says otherwise) and the key/value width
 * kv_heads * d (grouped-query attention when kv_heads < heads). */
typedef struct model {
    char name[MODEL_NAME_MAX];
    uint64_t layers;
    uint64_t hidden;
    uint64_t ffn_hidden;     /* MLP inner width f (per branch for swiglu) */
    uint64_t heads;
    uint64_t kv_heads;
    uint64_t vocab;
    uint64_t default_seq;    /* the sequence length its source evaluates (or its context) */
    uint64_t pos_rows;       /* learned position table rows (counted in params); 0 if rotary */
    uint64_t max_seq;        /* longest sequence the position table allows; 0 = no limit */
    uint64_t type_vocab;     /* token-type embedding rows (BERT); 0 for decoders */
    model_norm norm;
    model_mlp mlp;
    model_pos pos;
    int tied_embeddings;     /* LM head shares the input embedding matrix */
    int has_bias;            /* linear layers carry biases */
    int is_encoder;          /* bidirectional attention (BERT family); has a pooler */
    int parallel_residual;   /* attention and MLP read the same input (GPT-NeoX): the hf
                                profile's gpt_neox program follows it; the generic and megatron
                                programs lay every layer out sequentially */
    /* Finer architecture, as a Hugging Face config.json states it (traces/hfconfig.c);
     * all zero for the registry's older rows, which keep their meaning above. */
    char family[24];         /* HF model_type it was read from or shaped after ("" = none) */
    uint64_t head_dim;       /* 0: hidden / heads (Mistral and Qwen3 give it explicitly) */
    int qkv_bias;            /* q, k, v projections carry biases although has_bias is 0
                                (Qwen2) */
    model_act act;           /* the MLP's activation function */
    double resid_dropout;    /* dropout probability after attention, MLP and embedding in
                                training (GPT-2: 0.1); 0 none */
    double attn_dropout;     /* attention-probability dropout (GPT-2: 0.1) */
    double rotary_pct;       /* the fraction of each head's dimensions the rotary rotates
                                (GPT-NeoX's rotary_pct); 0: all of them */
    /* Mixture of experts (n_experts > 0): every moe_every-th layer's MLP is a router
     * (h -> n_experts), top-k dispatch and n_experts expert MLPs of width expert_ffn (mlp
     * kind), plus an optional shared expert of width shared_ffn with a sigmoid gate (h -> 1)
     * when shared_gate. ffn_hidden stays the width of dense layers' MLPs. */
    uint64_t n_experts;
    uint64_t experts_per_tok;
    uint64_t expert_ffn;
    uint64_t shared_ffn;
    int shared_gate;
    int moe_every;           /* 0 or 1: every layer */
    int norm_topk;           /* top-k weights renormalized (Mixtral 1, Qwen2-MoE config) */
    const char *desc;        /* one line */
    const char *source;      /* paper / table / config it comes from, and assumptions */
} model_t;

/* Registry access: models in registration order. */
size_t model_count(void);
const model_t *model_at(size_t i);
/* NULL if no model has that name (case-sensitive). */
const model_t *model_find(const char *name);

/* Looks up NAME in the registry, builds a model from "dims:L,H,A,F,V" (layers, hidden,
 * heads, ffn hidden, vocab), or reads "config:PATH", a Hugging Face config.json
 * (traces/hfconfig.h: its errors). Unknown names: MS_ERR_NOTFOUND with a message. */
ms_status model_lookup(const char *name, model_t *out, ms_error *err);

/* A GPT-style decoder with explicit dimensions: LayerNorm, GeLU MLP, biases, rotary
 * positions, tied embeddings, kv_heads = heads; named "dims:L,H,A,F,V". All must be
 * positive and heads must divide hidden: MS_ERR_INVALID otherwise. */
ms_status model_from_dims(uint64_t layers, uint64_t hidden, uint64_t heads, uint64_t ffn,
                          uint64_t vocab, model_t *out, ms_error *err);

/* Parameter counts as Hugging Face counts them (formula in docs/GENERATOR.md). */
uint64_t model_layer_params(const model_t *m);  /* one transformer layer (a mixture-of-
                                                   experts one if the model has any) */
uint64_t model_layer_params_at(const model_t *m, uint64_t layer); /* layer 0..layers-1 */
uint64_t model_embed_params(const model_t *m);  /* token (+ position, type) embeddings
                                                   (+ embedding norm for encoders) */
uint64_t model_head_params(const model_t *m);   /* final norm (decoders), untied LM head,
                                                   pooler (encoders) */
uint64_t model_params(const model_t *m);        /* total */
/* Parameter tensors the model's Hugging Face implementation registers (what its
 * parameters() yields; DeepSpeed's ZeRO-2 CPU offload does host work per tensor): the count
 * per transformer layer in *per_layer (may be NULL), the total returned. The generator folds
 * biases and norm parameters into fewer tensors, so its trace has fewer. Layouts in
 * docs/GENERATOR.md. */
uint64_t model_param_tensors(const model_t *m, uint64_t *per_layer);
uint64_t model_head_dim(const model_t *m);      /* head_dim, or hidden / heads */
uint64_t model_q_width(const model_t *m);       /* heads * head_dim */
uint64_t model_kv_width(const model_t *m);      /* kv_heads * head_dim */
/* Per-head RMSNorm of queries and keys (q_norm, k_norm of head_dim; Qwen3). */
int model_has_qk_norm(const model_t *m);
/* Whether layer i (0-based) is a mixture-of-experts layer: n_experts > 0 and
 * (i + 1) % moe_every == 0 (Hugging Face's decoder_sparse_step rule); and how many are. */
int model_layer_is_moe(const model_t *m, uint64_t layer);
uint64_t model_moe_layers(const model_t *m);
uint64_t model_fc1_width(const model_t *m);     /* f, or 2f for swiglu */

const char *model_norm_name(model_norm n);
const char *model_mlp_name(model_mlp k);
const char *model_pos_name(model_pos p);

/* Prints the registry for `memsim list`: name, shape, parameters, description, source. */
void model_list(FILE *fp);

#endif

/* model.h — the description of a transformer model (model_t): its shape, norm, MLP,
 * positions, attention and mixture-of-experts fields, plain data without code. Shared by
 * the model registry (traces/models.h, which also builds models from dimensions and counts
 * their parameters), the Hugging Face config.json reader (traces/hfconfig.h) that fills one,
 * and through them the generator and the cost models. */
#ifndef MEMSIM_MODEL_H
#define MEMSIM_MODEL_H

#include <stdint.h>

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
    /* Hugging Face's mlp_only_layers: bit i of dense_layers set makes layer i (< 4096) a
     * dense MLP whatever moe_every says; dense_listed counts the bits set (0: none) */
    uint64_t dense_listed;
    uint8_t dense_layers[512];
    int norm_topk;           /* top-k weights renormalized (Mixtral 1, Qwen2-MoE config) */
    const char *desc;        /* one line */
    const char *source;      /* paper / table / config it comes from, and assumptions */
} model_t;

#endif

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
/* learned: a position table of pos_rows x hidden parameters; rotary: no parameters. */
typedef enum model_pos { MODEL_POS_LEARNED = 0, MODEL_POS_ROTARY } model_pos;

/* Plain data. head_dim = hidden / heads; the query width is hidden and the key/value width
 * is kv_heads * head_dim (grouped-query attention when kv_heads < heads). */
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
    int parallel_residual;   /* attention and MLP read the same input (GPT-NeoX); informative:
                                the generator lays every layer out sequentially */
    const char *desc;        /* one line */
    const char *source;      /* paper / table / config it comes from, and assumptions */
} model_t;

/* Registry access: models in registration order. */
size_t model_count(void);
const model_t *model_at(size_t i);
/* NULL if no model has that name (case-sensitive). */
const model_t *model_find(const char *name);

/* Looks up NAME in the registry, or builds a model from "dims:L,H,A,F,V" (layers, hidden,
 * heads, ffn hidden, vocab). Unknown names: MS_ERR_NOTFOUND with a message. */
ms_status model_lookup(const char *name, model_t *out, ms_error *err);

/* A GPT-style decoder with explicit dimensions: LayerNorm, GeLU MLP, biases, rotary
 * positions, tied embeddings, kv_heads = heads; named "dims:L,H,A,F,V". All must be
 * positive and heads must divide hidden: MS_ERR_INVALID otherwise. */
ms_status model_from_dims(uint64_t layers, uint64_t hidden, uint64_t heads, uint64_t ffn,
                          uint64_t vocab, model_t *out, ms_error *err);

/* Parameter counts (formula in docs/GENERATOR.md). */
uint64_t model_layer_params(const model_t *m);  /* one transformer layer */
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
uint64_t model_head_dim(const model_t *m);
uint64_t model_kv_width(const model_t *m);      /* kv_heads * head_dim */
uint64_t model_fc1_width(const model_t *m);     /* f, or 2f for swiglu */

const char *model_norm_name(model_norm n);
const char *model_mlp_name(model_mlp k);
const char *model_pos_name(model_pos p);

/* Prints the registry for `memsim list`: name, shape, parameters, description, source. */
void model_list(FILE *fp);

#endif

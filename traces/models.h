/* models.h — the registry of transformer model shapes by name (GPT-style decoders and a few
 * encoders), each with a one-line description and the paper or public config it comes from,
 * plus models given by explicit dimensions. Used by the trace generator (traces/gen.c), the
 * planners' cost models (parameter counts) and `memsim list`. */
#ifndef MEMSIM_MODELS_H
#define MEMSIM_MODELS_H

#include "traces/model.h"
#include "base/util.h"

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
uint64_t model_active_params(const model_t *m); /* those a token passes through: the total
                                                   less, in every MoE layer, the n_experts -
                                                   experts_per_tok experts it is not routed to */
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
/* Whether layer i (0-based) is a mixture-of-experts layer: n_experts > 0, i not among
 * dense_layers (mlp_only_layers) and (i + 1) % moe_every == 0 (Hugging Face's
 * decoder_sparse_step rule); and how many are. */
int model_layer_is_moe(const model_t *m, uint64_t layer);
uint64_t model_moe_layers(const model_t *m);
uint64_t model_fc1_width(const model_t *m);     /* f, or 2f for swiglu */

const char *model_norm_name(model_norm n);
const char *model_mlp_name(model_mlp k);
const char *model_pos_name(model_pos p);

/* Prints the registry for `memsim list`: name, shape, parameters, description, source. */
void model_list(FILE *fp);

#endif

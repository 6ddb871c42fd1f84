/* hfconfig.h — reads a Hugging Face transformers config.json into a model_t (traces/model.h):
 * the fields that change training memory and time, each family's Hugging Face defaults where
 * a field is absent, and a refusal naming the field for anything the generator does not model.
 * Used by model_lookup ("config:PATH", traces/models.c), hence by `--model-config FILE`;
 * the accepted subset is listed in traces/FORMAT.md and docs/GENERATOR.md §1. */
#ifndef MEMSIM_HFCONFIG_H
#define MEMSIM_HFCONFIG_H

#include "traces/model.h"
#include "base/util.h"

/* Reads the config.json at path into *out. Errors (the message starts with path):
 *   MS_ERR_IO       the file cannot be read
 *   MS_ERR_PARSE    not JSON: "PATH:LINE: ..."
 *   MS_ERR_INVALID  "PATH: FIELD: problem": an unsupported model_type, a required field
 *                   missing, a size that is not a positive integer, heads not dividing
 *                   hidden, kv heads not dividing heads, or a value the generator does not
 *                   model (a sliding window active in training, OPT's projected embeddings,
 *                   ...). */
ms_status hfc_load(const char *path, model_t *out, ms_error *err);

/* The same on JSON text in memory; path names it in messages and gives the model its name. */
ms_status hfc_parse(const char *text, size_t len, const char *path, model_t *out,
                    ms_error *err);

/* The model_types read, comma-separated (help texts and messages). */
const char *hfc_model_types(void);

#endif

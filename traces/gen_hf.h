/* gen_hf.h — internal to the generator: the hf profile's program (traces/gen_hf.c), PyTorch
 * eager + Hugging Face transformers training as a user's loop runs it, called by gen_trace
 * for framework hf. Not a public interface: use gen.h. */
#ifndef MEMSIM_GEN_HF_H
#define MEMSIM_GEN_HF_H

#include "traces/gen_config.h"
#include "traces/machine.h"
#include "traces/trace.h"

/* MS_ERR_UNSUPPORTED naming what the hf profile does not model (a model family, tp/cp/dp,
 * the fine-tuning modes, encoders); MS_OK otherwise. */
ms_status gen_hf_check(const gen_config *c, ms_error *err);

/* Emits the meta lines, the setup and the iterations of the resolved, validated config c
 * into t (gen_hf_check passed). m may be NULL (durations -1). */
ms_status gen_hf_emit(const gen_config *c, const machine_t *m, trace_t *t);

/* Parameters of the model as its transformers implementation registers them (biases and
 * norms included, tied embeddings once). */
uint64_t gen_hf_params(const gen_config *c);

#endif

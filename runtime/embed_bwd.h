/* embed_bwd.h — the embedding's backward at memory bandwidth: the token ids are sorted (a
 * stable radix sort, so equal ids keep token order), then one CTA per distinct id sums the
 * gradient rows of its tokens in token order and adds the sum to that id's row of the fp32
 * table gradient once. No atomics: the same inputs give the same bits. Used by
 * runtime/kernels.cu (kn_embed_bwd). */
#ifndef MEMSIM_EMBED_BWD_H
#define MEMSIM_EMBED_BWD_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device scratch bytes embed_bwd_run needs for T tokens. */
size_t embed_bwd_scratch_bytes(size_t T);

/* dwte[tok[t]][:] += dout[t][:] for every t (dout bf16 bits, rows of h; h a multiple of 8,
 * dwte and dout 16-byte aligned), enqueued on stream; scratch holds at least
 * embed_bwd_scratch_bytes(T) bytes of device memory. */
rt_status embed_bwd_run(void *stream, void *scratch, size_t scratch_bytes, float *dwte,
                        const int32_t *tok, const uint16_t *dout, size_t T, size_t h,
                        ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

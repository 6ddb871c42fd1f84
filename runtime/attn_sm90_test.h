/* attn_sm90_test.h — the layout self-test of the Hopper attention kernels (runtime/attn_sm90.h):
 * what they rest on (descriptor and fragment layouts, TMA's swizzled tile), each against a
 * host product. runtime/kernels.cu calls it (kn_attn_selftest); tests/test_kernels.c runs it. */
#ifndef MEMSIM_ATTN_SM90_TEST_H
#define MEMSIM_ATTN_SM90_TEST_H

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout self-test: one warpgroup multiplies seeded bf16 tiles placed in shared memory by
 * the 128-byte swizzle the kernels assume and compares with the host's double products.
 * rel[0]: A B^T, 64 x 128 x 128, both operands from shared memory (K-major); rel[1]: the same
 * at N = 64; rel[2]: P V, P from registers, V N-major (transposed); rel[3]: the bytes TMA
 * wrote for a 128 x 128 tile against the hand-swizzled copy (fraction that differ). */
enum { ATTN90_NTEST = 4 };
rt_status attn90_selftest(void *encode, double rel[ATTN90_NTEST], ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

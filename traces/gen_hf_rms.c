/* gen_hf_rms.c — the hf profile's RMSNorm statistics, shared by the LLaMA-style programs of
 * gen_hf.c (LlamaRMSNorm and the q/k norms) and Gemma's (gen_hf_gemma.c) through
 * gen_hf_int.h. */
#include "traces/gen_hf_int.h"

/* The statistics every RMSNorm of the hf families computes, in its ops' order: the input
 * cast to fp32 (*xf, 0 when already fp32), pow(2), mean over the last dimension, + eps and
 * rsqrt (*rs, saved). keep_var: `variance` is a local until the norm returns (LlamaRMSNorm;
 * *var is then the caller's to free), else a temporary freed once + eps has read it
 * (GemmaRMSNorm's one expression; *var 0). Returns the fp32 input. */
uint64_t hf_rms_stats(hf_x *x, int l, const char *nm, uint64_t in, uint64_t rows,
                      uint64_t width, uint64_t ib, int keep_var, uint64_t *xf, uint64_t *rs,
                      uint64_t *var)
{
    uint64_t T = rows, n = rows * width;
    char op[TRACE_NAME_MAX];
    *xf = 0; /* 0: the input itself (already fp32) */
    if (ib != F32) {
        MS_JOIN(op, sizeof op, nm, ".to_fp32");
        *xf = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_SKEL, in, 0, n * ib, TK_NORM, n);
    }
    uint64_t xin = *xf ? *xf : in;
    MS_JOIN(op, sizeof op, nm, ".pow");
    uint64_t sq = hf_ew(x, l, op, op, n * F32, TC_ACT_TRANS, xin, 0, n * F32, TK_NORM);
    MS_JOIN(op, sizeof op, nm, ".mean");
    *var = hf_ew(x, l, op, op, T * F32, TC_ACT_TRANS, sq, 0, n * F32, TK_NORM);
    hf_free(x, &sq);
    MS_JOIN(op, sizeof op, nm, ".add_eps");
    uint64_t ve = hf_ew(x, l, op, op, T * F32, TC_ACT_TRANS, *var, 0, T * F32, TK_NORM);
    if (!keep_var) hf_free(x, var);
    MS_JOIN(op, sizeof op, nm, ".rsqrt");
    *rs = hf_ew(x, l, op, op, T * F32, TC_ACT_SKEL, ve, 0, T * F32, TK_NORM);
    hf_free(x, &ve);
    return xin;
}

/* gen_hf_rms.c — the hf profile's RMSNorm statistics and the tail of its backward, shared by
 * the LLaMA-style programs of gen_hf.c (LlamaRMSNorm and the q/k norms) and Gemma's
 * (gen_hf_gemma.c) through gen_hf_int.h. */
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

/* A [rows] fp32 temporary of the norm's backward from a [rows] input (rsqrt's backward). */
static uint64_t hf_rms_small(hf_x *x, int l, const char *nm, const char *what, uint64_t a,
                             uint64_t rows)
{
    char op[TRACE_NAME_MAX];
    snprintf(op, sizeof op, "%s.%s", nm, what);
    return hf_ew(x, l, op, op, rows * F32, TC_ACT_TRANS, a, 0, rows * F32, TK_NORM);
}

/* The RMSNorms' shared tail: from the fp32 gradient dn (freed) of x * rsqrt(...) down to the
 * input gradient, added into *G (see hf_rms_bwd); frees the saved fp32 input, rsqrt and the
 * input itself where given. */
void hf_rms_bwd_x(hf_x *x, int l, const char *nm, uint64_t dn, uint64_t *xf, uint64_t *rs,
                  uint64_t *in, uint64_t *G, uint64_t rows, uint64_t width, uint64_t ib)
{
    uint64_t n = rows * width, xin = *xf ? *xf : (in ? *in : 0);
    char op[TRACE_NAME_MAX];
    MS_JOIN(op, sizeof op, nm, ".bwd_rs");
    uint64_t t2 = hf_ew(x, l, op, op, n * F32, TC_ACT_TRANS, dn, xin, 2 * n * F32, TK_NORM);
    MS_JOIN(op, sizeof op, nm, ".bwd_x");
    uint64_t d1 = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_TRANS, dn, *rs, n * F32, TK_NORM, n);
    MS_JOIN(op, sizeof op, nm, ".bwd_rs_sum"); /* (dn * x).sum(-1): reads all of t2 */
    uint64_t gr = hf_ew(x, l, op, op, rows * F32, TC_ACT_TRANS, t2, 0, n * F32, TK_NORM);
    hf_free(x, &t2);
    hf_free(x, &dn);
    if (ib == F32) hf_acc(x, l, G, &d1, n * ib); /* x's input buffer is *G itself */
    uint64_t r1 = hf_rms_small(x, l, nm, "rsqrt.bwd_scale", gr, rows);
    uint64_t r2 = hf_rms_small(x, l, nm, "rsqrt.bwd_cube", *rs, rows);
    uint64_t r3 = hf_rms_small(x, l, nm, "rsqrt.bwd", r1, rows);
    hf_free(x, &r2);
    hf_free(x, &r1);
    hf_free(x, &gr);
    hf_free(x, rs);
    MS_JOIN(op, sizeof op, nm, ".bwd_mean");
    uint64_t dp = hf_ew_nv(x, l, op, op, n * F32, TC_ACT_TRANS, r3, 0, rows * F32, TK_NORM, n);
    hf_free(x, &r3);
    MS_JOIN(op, sizeof op, nm, ".bwd_pow1");
    uint64_t p1 = hf_ew(x, l, op, op, n * F32, TC_ACT_TRANS, xin, 0, n * F32, TK_NORM);
    MS_JOIN(op, sizeof op, nm, ".bwd_pow2");
    uint64_t p2 = hf_ew(x, l, op, op, n * F32, TC_ACT_TRANS, p1, 0, n * F32, TK_NORM);
    MS_JOIN(op, sizeof op, nm, ".bwd_pow");
    uint64_t d2 = hf_ew(x, l, op, op, n * F32, TC_ACT_TRANS, dp, p2, 2 * n * F32, TK_NORM);
    hf_free(x, &p2);
    hf_free(x, &p1);
    hf_free(x, &dp);
    hf_free(x, xf);
    if (in && *in) hf_free(x, in);
    if (ib == F32) {
        hf_acc(x, l, G, &d2, n * ib);
        return;
    }
    hf_ew_inplace(x, l, "norm.bwd_add", d1, d2, n * F32);
    hf_free(x, &d2);
    MS_JOIN(op, sizeof op, nm, ".bwd_down"); /* .to(float32) backward */
    uint64_t d = hf_ew(x, l, op, op, n * ib, TC_ACT_TRANS, d1, 0, n * F32, TK_NORM);
    hf_free(x, &d1);
    hf_acc(x, l, G, &d, n * ib);
}

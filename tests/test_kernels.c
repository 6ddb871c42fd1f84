/* test_kernels.c — the runtime's transformer kernels (runtime/kernels.h) against their CPU
 * references (runtime/kernels_ref.h) on small shapes, and the GPT model (runtime/model_rt.h):
 * keep-all and full-recompute steps give the same loss and gradients bit for bit, the same
 * model built twice gives the same bits, and the loss falls over 50 steps on the seeded
 * token stream (the curve is printed); a generated trace's schedule (keep-all and full
 * recompute) runs through the op dispatcher with real kernels and gives the same losses bit
 * for bit under both plans. Every check draws fresh random inputs (two seeds per
 * kernel), poisons the outputs with NaN first, and measures ||out - ref|| / ||ref||; a NaN
 * never passes. Without a GPU it prints "1..0 # SKIP" and exits 0. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planners/lower.h"
#include "planners/policy.h"
#include "runtime/kernels.h"
#include "runtime/kernels_ref.h"
#include "runtime/model_rt.h"
#include "runtime/model_rt_ops.h"
#include "runtime/model_rt_walk.h"
#include "runtime/rt_backend.h"
#include "tests/tap.h"
#include "traces/gen.h"
#include "traces/machine.h"
#include "traces/models.h"

/* bf16 outputs from bf16 operands with fp32 accumulation land at 2e-3..5e-3 */
#define TOL_BF16 1e-2
/* fp32 outputs (sums, statistics, gradients in fp32) */
#define TOL_F32 1e-4

static kn_ctx *K;

/* ---- host/device helpers (abort the check, not the program, on a CUDA error) ---- */

static int cuda_ok = 1;

static void *dmalloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
        cuda_ok = 0;
        return NULL;
    }
    cudaMemset(p, 0xff, bytes ? bytes : 16);   /* NaN in bf16 and fp32 */
    return p;
}

static float *hrand(size_t n, uint64_t seed, float scale)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; h && i < n; i++) h[i] = kref_uniform(seed, i) * scale;
    if (h) kref_round_bf16(h, n);
    return h;
}

static kn_bf16 *up_bf16(const float *h, size_t n)
{
    kn_bf16 *d = dmalloc(n * 2);
    uint16_t *b = malloc((n ? n : 1) * 2);
    for (size_t i = 0; b && i < n; i++) b[i] = kref_f2bf(h[i]);
    if (d && b && cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice) != cudaSuccess) cuda_ok = 0;
    free(b);
    return d;
}

static float *up_f32(const float *h, size_t n)
{
    float *d = dmalloc(n * 4);
    if (d && cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice) != cudaSuccess) cuda_ok = 0;
    return d;
}

static void *up_raw(const void *h, size_t bytes)
{
    void *d = dmalloc(bytes);
    if (d && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) cuda_ok = 0;
    return d;
}

static float *down_bf16(const kn_bf16 *d, size_t n)
{
    uint16_t *b = malloc((n ? n : 1) * 2);
    float *h = malloc((n ? n : 1) * 4);
    if (!b || !h || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(b, d, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
        cuda_ok = 0;
        for (size_t i = 0; h && i < n; i++) h[i] = NAN;
    } else {
        for (size_t i = 0; i < n; i++) h[i] = kref_bf2f(b[i]);
    }
    free(b);
    return h;
}

static float *down_f32(const float *d, size_t n)
{
    float *h = malloc((n ? n : 1) * 4);
    if (!h || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        cuda_ok = 0;
        for (size_t i = 0; h && i < n; i++) h[i] = NAN;
    }
    return h;
}

/* One comparison as a TAP line. */
static void check(const char *what, const float *out, const float *ref, size_t n, double tol)
{
    double e = kref_rel_err(out, ref, n);
    TAP_OK(e <= tol, "%s: rel err %.2e (<= %.0e)", what, e, tol);
    if (e <= tol) return;
    size_t worst = 0, bad = 0, first = n;
    double wd = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)out[i] - ref[i]);
        if (!isfinite(out[i])) d = INFINITY;
        if (d > 1e-2 * (fabs(ref[i]) + 1e-2)) {
            bad++;
            if (first == n) first = i;
        }
        if (d > wd) {
            wd = d;
            worst = i;
        }
    }
    TAP_NOTE("  %zu of %zu elements off; first at %zu (out %g, ref %g); worst at %zu (out %g, "
             "ref %g)", bad, n, first, first < n ? out[first] : 0.0, first < n ? ref[first] : 0.0,
             worst, out[worst], ref[worst]);
}

static void check_st(rt_status st, const char *what, const ms_error *err)
{
    if (st != RT_OK) TAP_OK(0, "%s: %s", what, err->msg);
}

/* ---- kernels ---- */

/* T tokens of a vocabulary of V (V small: long runs of repeats in the sorted backward). */
static void t_embed(uint64_t seed, size_t T, size_t h, size_t V)
{
    ms_error err;
    ms_error_clear(&err);
    int32_t *tok = malloc(T * sizeof *tok);
    for (size_t t = 0; t < T; t++) tok[t] = (int32_t)(((kref_uniform(seed, t) + 1) / 2) * V) % (int)V;
    tok[7] = tok[8] = tok[9] = 5;   /* repeats */
    float *wte = hrand(V * h, seed + 1, 1), *dout = hrand(T * h, seed + 2, 1);
    float *g0 = hrand(V * h, seed + 3, 1);   /* fp32 gradient to accumulate into */
    kn_bf16 *dw = up_bf16(wte, V * h), *dd = up_bf16(dout, T * h), *dy = dmalloc(T * h * 2);
    int32_t *dt = up_raw(tok, T * sizeof *tok);
    float *dg = up_f32(g0, V * h);
    check_st(kn_embed_fwd(K, dy, dt, dw, T, h, &err), "embed_fwd", &err);
    check_st(kn_embed_bwd(K, dg, dt, dd, T, h, &err), "embed_bwd", &err);
    float *o = down_bf16(dy, T * h), *og = down_f32(dg, V * h), *r = malloc(T * h * 4);
    kref_embed_fwd(r, tok, wte, T, h);
    check("embedding forward", o, r, T * h, 0);
    kref_embed_bwd(g0, tok, dout, T, h);
    char what[96];
    snprintf(what, sizeof what, "embedding backward (scatter-add into fp32, %zu tokens of %zu)", T, V);
    check(what, og, g0, V * h, 1e-6);
    free(tok); free(wte); free(dout); free(g0); free(o); free(og); free(r);
    cudaFree(dw); cudaFree(dd); cudaFree(dy); cudaFree(dt); cudaFree(dg);
}

static void t_ln(uint64_t seed)
{
    ms_error err;
    ms_error_clear(&err);
    size_t T = 77, h = 264;
    float *x = hrand(T * h, seed, 2), *g = hrand(h, seed + 1, 1), *b = hrand(h, seed + 2, 1);
    float *dy = hrand(T * h, seed + 3, 1), *dres = hrand(T * h, seed + 4, 1);
    for (size_t i = 0; i < T * h; i++) x[i] = kref_bf2f(kref_f2bf(x[i] + 0.5f));   /* mean != 0 */
    float *dg0 = hrand(h, seed + 5, 1), *db0 = hrand(h, seed + 6, 1);
    kn_bf16 *dx_ = up_bf16(x, T * h), *dg_ = up_bf16(g, h), *db_ = up_bf16(b, h);
    kn_bf16 *ddy = up_bf16(dy, T * h), *ddr = up_bf16(dres, T * h);
    kn_bf16 *dyo = dmalloc(T * h * 2), *ddx = dmalloc(T * h * 2);
    float *mu = dmalloc(T * 4), *rs = dmalloc(T * 4), *gg = up_f32(dg0, h), *gb = up_f32(db0, h);
    check_st(kn_ln_fwd(K, dyo, mu, rs, dx_, dg_, db_, T, h, 1e-5f, &err), "ln_fwd", &err);
    check_st(kn_ln_bwd(K, ddx, gg, gb, ddy, dx_, dg_, mu, rs, ddr, T, h, &err), "ln_bwd", &err);
    float *y = down_bf16(dyo, T * h), *hm = down_f32(mu, T), *hr = down_f32(rs, T);
    float *dx = down_bf16(ddx, T * h), *hg = down_f32(gg, h), *hb = down_f32(gb, h);
    float *ry = malloc(T * h * 4), *rm = malloc(T * 4), *rr = malloc(T * 4), *rdx = malloc(T * h * 4);
    kref_ln_fwd(ry, rm, rr, x, g, b, T, h, 1e-5f);
    kref_ln_bwd(rdx, dg0, db0, dy, x, g, dres, T, h, 1e-5f);
    check("layer norm forward y", y, ry, T * h, TOL_BF16);
    check("layer norm forward mean", hm, rm, T, 1e-5);
    check("layer norm forward rstd", hr, rr, T, 1e-5);
    check("layer norm backward dx (+ residual)", dx, rdx, T * h, TOL_BF16);
    check("layer norm backward dgamma (fp32, accumulated)", hg, dg0, h, TOL_F32);
    check("layer norm backward dbeta (fp32, accumulated)", hb, db0, h, TOL_F32);
    free(x); free(g); free(b); free(dy); free(dres); free(dg0); free(db0);
    free(y); free(hm); free(hr); free(dx); free(hg); free(hb); free(ry); free(rm); free(rr); free(rdx);
    cudaFree(dx_); cudaFree(dg_); cudaFree(db_); cudaFree(ddy); cudaFree(ddr); cudaFree(dyo);
    cudaFree(ddx); cudaFree(mu); cudaFree(rs); cudaFree(gg); cudaFree(gb);
}

static void t_gemm(uint64_t seed)
{
    ms_error err;
    ms_error_clear(&err);
    size_t M = 192, N = 136, Kd = 328;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            size_t lda = ta ? M + 8 : Kd + 16, ldb = tb ? Kd + 8 : N + 8, ldc = N + 24;
            size_t na = (ta ? Kd : M) * lda, nb = (tb ? N : Kd) * ldb, nc = M * ldc;
            float *A = hrand(na, seed + 10 * ta + tb, 1), *B = hrand(nb, seed + 20 + ta + tb, 1);
            float *C0 = hrand(nc, seed + 30, 1), *R = malloc(nc * 4);
            kn_bf16 *dA = up_bf16(A, na), *dB = up_bf16(B, nb), *dC = dmalloc(nc * 2);
            float *dC32 = up_f32(C0, nc);
            check_st(kn_gemm(K, ta, tb, M, N, Kd, dA, lda, dB, ldb, 0, dC, ldc, 0, &err), "gemm",
                     &err);
            check_st(kn_gemm(K, ta, tb, M, N, Kd, dA, lda, dB, ldb, 1, dC32, ldc, 1, &err),
                     "gemm32", &err);
            float *o = down_bf16(dC, nc), *o32 = down_f32(dC32, nc);
            /* compare only the M x N window (the rest of each row is padding) */
            float *ow = malloc(M * N * 4), *rw = malloc(M * N * 4);
            memcpy(R, C0, nc * 4);
            kref_gemm(ta, tb, M, N, Kd, A, lda, B, ldb, 0, R, ldc);
            for (size_t i = 0; i < M; i++)
                for (size_t j = 0; j < N; j++) {
                    ow[i * N + j] = o[i * ldc + j];
                    rw[i * N + j] = R[i * ldc + j];
                }
            char what[96];
            snprintf(what, sizeof what, "GEMM %s%s bf16 out (M %zu N %zu K %zu, strided)",
                     ta ? "A^T" : "A", tb ? "B^T" : "B", M, N, Kd);
            check(what, ow, rw, M * N, TOL_BF16);
            memcpy(R, C0, nc * 4);
            kref_gemm(ta, tb, M, N, Kd, A, lda, B, ldb, 1, R, ldc);
            for (size_t i = 0; i < M; i++)
                for (size_t j = 0; j < N; j++) {
                    ow[i * N + j] = o32[i * ldc + j];
                    rw[i * N + j] = R[i * ldc + j];
                }
            snprintf(what, sizeof what, "GEMM %s%s fp32 out, beta 1 (gradient accumulation)",
                     ta ? "A^T" : "A", tb ? "B^T" : "B");
            check(what, ow, rw, M * N, TOL_F32);
            free(A); free(B); free(C0); free(R); free(o); free(o32); free(ow); free(rw);
            cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dC32);
        }
}

/* The GEMMs of t_gemm's four operand forms (bf16 out; fp32 out accumulating; bf16 out with a
 * bias) on context k into dC, dC32 (preset to C0), dCb; returns 0 when a call failed. */
static int gemm_forms(kn_ctx *k, const kn_bf16 *dA, const kn_bf16 *dB, const kn_bf16 *dbias,
                      kn_bf16 *dC[4], float *dC32[4], kn_bf16 *dCb[4], const float *C0,
                      size_t nc, ms_error *err)
{
    const size_t M = 192, N = 136, Kd = 328;
    for (int f = 0; f < 4; f++) {
        int ta = f / 2, tb = f % 2;
        size_t lda = ta ? M + 8 : Kd + 16, ldb = tb ? Kd + 8 : N + 8, ldc = N + 24;
        if (cudaMemcpy(dC32[f], C0, nc * 4, cudaMemcpyHostToDevice) != cudaSuccess) return 0;
        if (kn_gemm(k, ta, tb, M, N, Kd, dA, lda, dB, ldb, 0, dC[f], ldc, 0, err) != RT_OK ||
            kn_gemm(k, ta, tb, M, N, Kd, dA, lda, dB, ldb, 1, dC32[f], ldc, 1, err) != RT_OK ||
            kn_gemm_bias(k, ta, tb, M, N, Kd, dA, lda, dB, ldb, dCb[f], ldc, dbias, err) !=
                RT_OK)
            return 0;
    }
    return cudaDeviceSynchronize() == cudaSuccess;
}

/* A file with line `line` (1-based) replaced by `text`, loaded: it must fail naming that line. */
static void gemm_algos_bad(const char *good, int line, const char *text, const char *what)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/memsim-gemm-bad-%d.txt", (int)getpid());
    FILE *in = fopen(good, "r"), *out = fopen(path, "w");
    char buf[1024];
    int n = 0;
    while (in && out && fgets(buf, sizeof buf, in)) {
        if (++n == line) fprintf(out, "%s\n", text);
        else fputs(buf, out);
    }
    if (in) fclose(in);
    if (out) fclose(out);
    kn_ctx *k = NULL;
    ms_error err;
    ms_error_clear(&err);
    char at[96];
    snprintf(at, sizeof at, "%s:%d: ", path, line);
    int ok = kn_ctx_new(NULL, &k, &err) == RT_OK;
    rt_status st = ok ? kn_gemm_algos_load(k, path, &err) : RT_OK;
    TAP_OK(ok && st == RT_ERR_INVALID && strstr(err.msg, at) != NULL &&
               kn_gemm_algos_count(k) == 0,
           "a GEMM algorithms file with %s is refused, naming its line, nothing kept (%s)", what,
           err.msg);
    kn_ctx_free(k);
    remove(path);
}

/* GEMM algorithms chosen by measurement: a tuning pass (every shape's fastest cuBLASLt
 * candidate taken, margin below 0, so that the Lt path runs on these small shapes), results
 * against the CPU reference, the choices through a file into a fresh context (the same bits),
 * and malformed files refused. */
static void t_gemm_tuned(uint64_t seed)
{
    ms_error err;
    ms_error_clear(&err);
    const size_t M = 192, N = 136, Kd = 328, nc = M * (N + 24);
    const size_t nmax = (Kd + 8) * (Kd + 16);   /* the largest A or B of the four forms */
    float *A = hrand(nmax, seed, 1), *B = hrand(nmax, seed + 1, 1), *C0 = hrand(nc, seed + 2, 1);
    float *bias = hrand(N, seed + 3, 1);
    kn_bf16 *dA = up_bf16(A, nmax), *dB = up_bf16(B, nmax), *dbias = up_bf16(bias, N);
    kn_bf16 *dC[2][4], *dCb[2][4];
    float *dC32[2][4];
    for (int c = 0; c < 2; c++)
        for (int f = 0; f < 4; f++) {
            dC[c][f] = dmalloc(nc * 2);
            dCb[c][f] = dmalloc(nc * 2);
            dC32[c][f] = dmalloc(nc * 4);
        }
    kn_ctx *k1 = NULL, *k2 = NULL;
    int ok = kn_ctx_new(NULL, &k1, &err) == RT_OK && kn_ctx_new(NULL, &k2, &err) == RT_OK;
    if (ok) {   /* the tuning pass overwrites its outputs; then the runs that count */
        kn_ctx_set_gemm_tune(k1, 1, -1.0);
        ok = gemm_forms(k1, dA, dB, dbias, dC[0], dC32[0], dCb[0], C0, nc, &err);
        kn_ctx_set_gemm_tune(k1, 0, KN_GEMM_TUNE_MARGIN);
        ok = ok && gemm_forms(k1, dA, dB, dbias, dC[0], dC32[0], dCb[0], C0, nc, &err);
    }
    size_t n1 = ok ? kn_gemm_algos_count(k1) : 0;
    int lt = 0;
    for (size_t i = 0; i < n1; i++) {
        kn_gemm_info g;
        kn_gemm_algo_info(k1, i, &g);
        lt += g.chosen >= 0 && g.candidates > 0;
    }
    TAP_OK(ok && n1 == 12 && lt == 12, "GEMM tuning: 12 shapes measured, every one on a cuBLASLt "
           "candidate (%zu shapes, %d on cuBLASLt; %s)", n1, lt, ok ? "ok" : err.msg);
    for (int f = 0; f < 4 && ok; f++) {   /* the tuned algorithms against the CPU reference */
        int ta = f / 2, tb = f % 2;
        size_t lda = ta ? M + 8 : Kd + 16, ldb = tb ? Kd + 8 : N + 8, ldc = N + 24;
        float *o = down_bf16(dC[0][f], nc), *o32 = down_f32(dC32[0][f], nc);
        float *ob = down_bf16(dCb[0][f], nc), *owb = malloc(M * N * 4), *rwb = malloc(M * N * 4);
        float *R = malloc(nc * 4), *R32 = malloc(nc * 4), *ow = malloc(M * N * 4),
              *rw = malloc(M * N * 4), *ow32 = malloc(M * N * 4), *rw32 = malloc(M * N * 4);
        memcpy(R, C0, nc * 4);
        memcpy(R32, C0, nc * 4);
        kref_gemm(ta, tb, M, N, Kd, A, lda, B, ldb, 0, R, ldc);
        kref_gemm(ta, tb, M, N, Kd, A, lda, B, ldb, 1, R32, ldc);
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                ow[i * N + j] = o[i * ldc + j];
                rw[i * N + j] = R[i * ldc + j];
                ow32[i * N + j] = o32[i * ldc + j];
                rw32[i * N + j] = R32[i * ldc + j];
                owb[i * N + j] = ob[i * ldc + j];
                rwb[i * N + j] = R[i * ldc + j] + bias[j];
            }
        char what[96];
        snprintf(what, sizeof what, "tuned GEMM %s%s bf16 out", ta ? "A^T" : "A", tb ? "B^T" : "B");
        check(what, ow, rw, M * N, TOL_BF16);
        snprintf(what, sizeof what, "tuned GEMM %s%s fp32 out, beta 1", ta ? "A^T" : "A",
                 tb ? "B^T" : "B");
        check(what, ow32, rw32, M * N, TOL_F32);
        snprintf(what, sizeof what, "tuned GEMM %s%s + bias (cuBLASLt's epilogue)",
                 ta ? "A^T" : "A", tb ? "B^T" : "B");
        check(what, owb, rwb, M * N, TOL_BF16);
        free(o); free(o32); free(R); free(R32); free(ow); free(rw); free(ow32); free(rw32);
        free(ob); free(owb); free(rwb);
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/memsim-gemm-%d.txt", (int)getpid());
    rt_status st = ok ? kn_gemm_algos_save(k1, path, &err) : RT_ERR_INVALID;
    if (st == RT_OK) st = kn_gemm_algos_load(k2, path, &err);
    ok = ok && st == RT_OK && gemm_forms(k2, dA, dB, dbias, dC[1], dC32[1], dCb[1], C0, nc, &err);
    int same = ok;
    for (int f = 0; f < 4 && same; f++) {
        float *a = down_bf16(dC[0][f], nc), *b = down_bf16(dC[1][f], nc);
        float *a32 = down_f32(dC32[0][f], nc), *b32 = down_f32(dC32[1][f], nc);
        float *ab = down_bf16(dCb[0][f], nc), *bb = down_bf16(dCb[1][f], nc);
        same = !memcmp(a, b, nc * 4) && !memcmp(a32, b32, nc * 4) && !memcmp(ab, bb, nc * 4);
        free(a); free(b); free(a32); free(b32); free(ab); free(bb);
    }
    TAP_OK(same && kn_gemm_algos_count(k2) == 12, "GEMM algorithms through a file: a fresh "
           "context loads 12 and computes the same bits (%s)", ok ? "ok" : err.msg);
    if (st == RT_OK) {
        gemm_algos_bad(path, 2, "memsim-gemm-algos 9", "another version");
        gemm_algos_bad(path, 3, "cublaslt 1", "another cuBLASLt");
        gemm_algos_bad(path, 4, "device Not This GPU", "another device");
        gemm_algos_bad(path, 9, "gemm 0 0 192 136 328 344 144 160 0 0 0 1.0 1.0 4 0",
                       "16 fields after three good lines");
        gemm_algos_bad(path, 6, "gemm 0 0 192 136 328 344 144 160 0 0 0 1.0 1.0 4 0 zz",
                       "a bad algorithm");
        gemm_algos_bad(path, 6, "gemm 0 0 192 136 328 344 144 160 1 0 1 1.0 1.0 4 0 -",
                       "a bias with beta 1");
    }
    remove(path);
    kn_ctx_free(k1);
    kn_ctx_free(k2);
    for (int c = 0; c < 2; c++)
        for (int f = 0; f < 4; f++) {
            cudaFree(dC[c][f]);
            cudaFree(dCb[c][f]);
            cudaFree(dC32[c][f]);
        }
    cudaFree(dA); cudaFree(dB); cudaFree(dbias);
    free(A); free(B); free(C0); free(bias);
}

static void t_elem(uint64_t seed)
{
    ms_error err;
    ms_error_clear(&err);
    size_t T = 65, n = 200, ld = 216;
    float *x = hrand(T * n, seed, 3), *y = hrand(T * n, seed + 1, 1), *b = hrand(n, seed + 2, 1);
    float *xl = hrand(T * ld, seed + 3, 1);
    kn_bf16 *dx = up_bf16(x, T * n), *dy = up_bf16(y, T * n), *db = up_bf16(b, n);
    kn_bf16 *dxl = up_bf16(xl, T * ld), *o1 = dmalloc(T * n * 2), *o2 = dmalloc(T * n * 2);
    kn_bf16 *o3 = dmalloc(T * n * 2);
    float *cs0 = hrand(n, seed + 4, 1), *dcs = up_f32(cs0, n);
    check_st(kn_add(K, o1, dx, dy, db, T, n, &err), "add", &err);
    check_st(kn_gelu_fwd(K, o2, dx, db, T, n, &err), "gelu_fwd", &err);
    check_st(kn_gelu_bwd(K, o3, dy, dx, db, T, n, &err), "gelu_bwd", &err);
    check_st(kn_bias_add(K, dxl, db, T, n, ld, &err), "bias_add", &err);
    check_st(kn_colsum(K, dcs, dy, T, n, &err), "colsum", &err);
    float *h1 = down_bf16(o1, T * n), *h2 = down_bf16(o2, T * n), *h3 = down_bf16(o3, T * n);
    float *h4 = down_bf16(dxl, T * ld), *h5 = down_f32(dcs, n), *r = malloc(T * ld * 4);
    kref_add(r, x, y, b, T, n);
    check("residual add with bias", h1, r, T * n, TOL_BF16);
    kref_gelu_fwd(r, x, b, T, n);
    check("GeLU forward (bias fused)", h2, r, T * n, TOL_BF16);
    kref_gelu_bwd(r, y, x, b, T, n);
    check("GeLU backward", h3, r, T * n, TOL_BF16);
    memcpy(r, xl, T * ld * 4);
    kref_bias_add(r, b, T, n, ld);
    check("bias add on strided rows (pad columns untouched)", h4, r, T * ld, TOL_BF16);
    kref_colsum(cs0, y, T, n);
    check("column sum (bias gradient, fp32 accumulated)", h5, cs0, n, TOL_F32);
    free(x); free(y); free(b); free(xl); free(cs0); free(h1); free(h2); free(h3); free(h4);
    free(h5); free(r);
    cudaFree(dx); cudaFree(dy); cudaFree(db); cudaFree(dxl); cudaFree(o1); cudaFree(o2);
    cudaFree(o3); cudaFree(dcs);
}

/* Attention over B sequences of S tokens, H heads of D; packed = q, k, v as the column
 * blocks of one [T, 3 H D] matrix (the model's layout), else three [T, H D] tensors; with
 * the kernels impl (the context's own restored after). */
static void t_attn(uint64_t seed, size_t B, size_t H, size_t S, size_t D, int packed,
                   kn_attn_impl impl)
{
    ms_error err;
    ms_error_clear(&err);
    kn_attn_impl was = kn_ctx_attn(K);
    if (kn_ctx_set_attn(K, impl, &err) != RT_OK) {
        TAP_OK(0, "attention kernels %s: %s", kn_attn_name(impl), err.msg);
        return;
    }
    size_t T = B * S, w = H * D, ld = packed ? 3 * w : w, n = T * ld;
    float *q = hrand(n, seed, 1), *k = hrand(n, seed + 1, 1), *v = hrand(n, seed + 2, 1);
    float *dout = hrand(T * w, seed + 3, 1);
    const float *hq = q, *hk = packed ? q + w : k, *hv = packed ? q + 2 * w : v;
    if (packed) {   /* one matrix: k and v are its column blocks */
        for (size_t t = 0; t < T; t++)
            for (size_t c = 0; c < w; c++) {
                q[t * ld + w + c] = k[t * ld + c];
                q[t * ld + 2 * w + c] = v[t * ld + c];
            }
    }
    kn_bf16 *dq = up_bf16(q, n), *dk = packed ? dq + w : up_bf16(k, n);
    kn_bf16 *dv = packed ? dq + 2 * w : up_bf16(v, n), *ddo = up_bf16(dout, T * w);
    kn_bf16 *dO = dmalloc(T * w * 2);
    kn_bf16 *gq = dmalloc(n * 2), *gk = packed ? gq + w : dmalloc(n * 2);
    kn_bf16 *gv = packed ? gq + 2 * w : dmalloc(n * 2);
    float *dl = dmalloc(B * H * S * 4);
    check_st(kn_attn_fwd(K, dO, dl, dq, dk, dv, ld, w, B, H, S, D, &err), "attn_fwd", &err);
    check_st(kn_attn_bwd(K, gq, gk, gv, ddo, dq, dk, dv, dO, dl, ld, w, B, H, S, D, &err),
             "attn_bwd", &err);
    /* the backward again into fresh buffers: the same bits (no order of sums left to chance) */
    kn_bf16 *g2 = dmalloc(n * 2 * 3);
    check_st(kn_attn_bwd(K, g2, g2 + n, g2 + 2 * n, ddo, dq, dk, dv, dO, dl, ld, w, B, H, S, D, &err),
             "attn_bwd again", &err);
    /* the overlapped backward (ATTN90_BWD_OVERLAP): the same sums in the same order as
     * wgmma-basic's, so the same bits on the same inputs */
    kn_bf16 *g3 = NULL;
    /* likewise the one pass with each tile's dQ beside its own dK (wgmma-inline) against
     * wgmma's, which issues it beside the next tile's */
    /* and wgmma's, its query range in chunks where the L2 asks for them, against the one
     * pass of one chunk (wgmma-onepass) */
    const kn_attn_impl twin = impl == KN_ATTN_WGMMA_OVERLAP  ? KN_ATTN_WGMMA_BASIC
                              : impl == KN_ATTN_WGMMA_INLINE ? KN_ATTN_WGMMA
                              : impl == KN_ATTN_WGMMA        ? KN_ATTN_WGMMA_ONEPASS
                                                             : KN_ATTN_AUTO;
    if (twin != KN_ATTN_AUTO) {
        g3 = dmalloc(n * 2 * 3);
        check_st(kn_ctx_set_attn(K, twin, &err), "set the twin kernels", &err);
        check_st(kn_attn_bwd(K, g3, g3 + n, g3 + 2 * n, ddo, dq, dk, dv, dO, dl, ld, w, B, H, S,
                             D, &err), "attn_bwd, the twin kernels", &err);
        check_st(kn_ctx_set_attn(K, impl, &err), "set the kernels back", &err);
    }
    float *o = down_bf16(dO, T * w), *l = down_f32(dl, B * H * S);
    float *ro = malloc(T * w * 4), *rl = malloc(B * H * S * 4);
    kref_attn_fwd(ro, rl, hq, hk, hv, ld, w, B, H, S, D);
    char what[128];
    const char *im = kn_attn_name(impl);
    snprintf(what, sizeof what, "attention forward out, %s (B %zu H %zu S %zu D %zu, %s)", im, B, H,
             S, D, packed ? "packed qkv" : "separate q k v");
    check(what, o, ro, T * w, TOL_BF16);
    snprintf(what, sizeof what, "attention forward log-sum-exp, %s (S %zu D %zu)", im, S, D);
    check(what, l, rl, B * H * S, TOL_F32);
    float *rq = malloc(n * 4), *rk = malloc(n * 4), *rv = malloc(n * 4);
    for (size_t i = 0; i < n; i++) rq[i] = rk[i] = rv[i] = 0;
    kref_attn_bwd(rq, rk, rv, dout, hq, hk, hv, ld, w, B, H, S, D);
    const char *nm[3] = {"dq", "dk", "dv"};
    kn_bf16 *gg[3] = {gq, gk, gv};
    float *rr[3] = {rq, rk, rv};
    float *x = malloc(T * w * 4), *y = malloc(T * w * 4);
    for (int j = 0; j < 3; j++) {
        /* this gradient's columns: at block j of the packed matrix, or its own tensor; the
         * reference wrote each gradient at column 0 of its own array */
        float *hg = down_bf16(packed ? gq : gg[j], n);
        size_t c0 = packed ? (size_t)j * w : 0;
        for (size_t t = 0; t < T; t++)
            for (size_t c = 0; c < w; c++) {
                x[t * w + c] = hg[t * ld + c0 + c];
                y[t * w + c] = rr[j][t * ld + c];
            }
        snprintf(what, sizeof what, "attention backward %s, %s (S %zu D %zu, %s)", nm[j], im, S, D,
                 packed ? "packed" : "separate");
        check(what, x, y, T * w, TOL_BF16);
        /* the second run's gradient j, at the same columns of its own [T, ld] array */
        float *h2 = down_bf16(g2 + (size_t)j * n, n);
        size_t diff = 0;
        for (size_t t = 0; t < T; t++)
            for (size_t c = 0; c < w; c++) {
                float a = hg[t * ld + c0 + c], b2 = h2[t * ld + c];
                diff += memcmp(&a, &b2, sizeof a) != 0;
            }
        TAP_OK(diff == 0, "attention backward %s, %s, run twice: %zu of %zu values differ", nm[j],
               im, diff, T * w);
        if (g3) {
            float *h3 = down_bf16(g3 + (size_t)j * n, n);
            size_t d3 = 0;
            for (size_t t = 0; t < T; t++)
                for (size_t c = 0; c < w; c++) {
                    float a = h2[t * ld + c], b3 = h3[t * ld + c];
                    d3 += memcmp(&a, &b3, sizeof a) != 0;
                }
            TAP_OK(d3 == 0, "attention backward %s, %s against %s: %zu of %zu values differ",
                   nm[j], im, kn_attn_name(twin), d3, T * w);
            free(h3);
        }
        free(hg);
        free(h2);
    }
    cudaFree(g2);
    if (g3) cudaFree(g3);
    free(q); free(k); free(v); free(dout); free(o); free(l); free(ro); free(rl);
    free(rq); free(rk); free(rv); free(x); free(y);
    cudaFree(dq); cudaFree(ddo); cudaFree(dO); cudaFree(gq); cudaFree(dl);
    if (!packed) {
        cudaFree(dk); cudaFree(dv); cudaFree(gk); cudaFree(gv);
    }
    kn_ctx_set_attn(K, was, &err);
}

static void t_ce(uint64_t seed)
{
    ms_error err;
    ms_error_clear(&err);
    size_t T = 70, V = 1000, ldl = 1024;
    float *z = hrand(T * ldl, seed, 4);
    int32_t lab[70];
    for (size_t t = 0; t < T; t++) lab[t] = (int32_t)(((kref_uniform(seed + 1, t) + 1) / 2) * V) % (int)V;
    lab[3] = -1;
    lab[T - 1] = (int32_t)V - 1;
    kn_bf16 *dz = up_bf16(z, T * ldl), *dd = dmalloc(T * ldl * 2);
    int32_t *dlab = up_raw(lab, sizeof lab);
    float *dloss = dmalloc(T * 4), *dlse = dmalloc(T * 4), *dsum = dmalloc(4);
    check_st(kn_ce_fwd(K, dloss, dlse, dz, ldl, dlab, T, V, &err), "ce_fwd", &err);
    check_st(kn_sum(K, dsum, dloss, T, &err), "sum", &err);
    check_st(kn_ce_bwd(K, dd, dz, ldl, dlse, dlab, T, V, 1.0f / 69, &err), "ce_bwd", &err);
    float *hl = down_f32(dloss, T), *hs = down_f32(dsum, 1), *hd = down_bf16(dd, T * ldl);
    float *rl = malloc(T * 4), *rd = malloc(T * ldl * 4);
    kref_ce_fwd(rl, NULL, z, ldl, lab, T, V);
    check("cross-entropy forward per-token loss (vocab 1000 in rows of 1024)", hl, rl, T, TOL_F32);
    double s = 0;
    for (size_t t = 0; t < T; t++) s += rl[t];
    float fs = (float)s;
    check("loss sum (one block, fixed order)", hs, &fs, 1, 1e-5);
    kref_ce_bwd(rd, z, ldl, lab, T, V, 1.0f / 69);
    check("cross-entropy backward dlogits", hd, rd, T * ldl, TOL_BF16);
    int pads = 1;
    for (size_t t = 0; t < T; t++)
        for (size_t v = V; v < ldl; v++) pads &= hd[t * ldl + v] == 0.0f;
    for (size_t v = 0; v < ldl; v++) pads &= hd[3 * ldl + v] == 0.0f;
    TAP_OK(pads, "cross-entropy backward: padding columns and ignored rows are exactly 0");
    /* in place, as the model runs it */
    check_st(kn_ce_bwd(K, dz, dz, ldl, dlse, dlab, T, V, 1.0f / 69, &err), "ce_bwd in place", &err);
    float *hi = down_bf16(dz, T * ldl);
    TAP_OK(!memcmp(hi, hd, T * ldl * 4), "cross-entropy backward in place == out of place");
    free(z); free(hl); free(hs); free(hd); free(rl); free(rd); free(hi);
    cudaFree(dz); cudaFree(dd); cudaFree(dlab); cudaFree(dloss); cudaFree(dlse); cudaFree(dsum);
}

static void t_adamw(uint64_t seed)
{
    ms_error err;
    ms_error_clear(&err);
    size_t n = 10000;
    float *w = hrand(n, seed, 1), *g = hrand(n, seed + 1, 0.1f);
    float *m = hrand(n, seed + 2, 0.01f), *v = hrand(n, seed + 3, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *dw = up_f32(w, n), *dg = up_f32(g, n), *dm = up_f32(m, n), *dv = up_f32(v, n);
    kn_bf16 *dp = dmalloc(n * 2);
    kn_adamw_cfg c;
    kn_adamw_default(&c);
    c.step = 3;
    c.lr = 1e-2f;
    check_st(kn_adamw(K, dp, dw, dm, dv, dg, n, &c, &err), "adamw", &err);
    float *hw = down_f32(dw, n), *hm = down_f32(dm, n), *hv = down_f32(dv, n);
    float *hp = down_bf16(dp, n);
    /* host optimizer on copies, and the double reference */
    float *w2 = malloc(n * 4), *m2 = malloc(n * 4), *v2 = malloc(n * 4), *p2 = malloc(n * 4);
    uint16_t *pb = malloc(n * 2);
    memcpy(w2, w, n * 4);
    memcpy(m2, m, n * 4);
    memcpy(v2, v, n * 4);
    kn_adamw_host(pb, w2, m2, v2, g, n, &c);
    kref_adamw(p2, w, m, v, g, n, &c);
    float *d0 = malloc(n * 4), *d1 = malloc(n * 4), *rd = malloc(n * 4);
    float *w0 = hrand(n, seed, 1);   /* the weights before the step */
    for (size_t i = 0; i < n; i++) {
        d0[i] = hw[i] - w0[i];       /* each update against the reference's */
        d1[i] = w2[i] - w0[i];
        rd[i] = w[i] - w0[i];
    }
    check("AdamW on the GPU: the update vs double reference", d0, rd, n, 1e-4);
    check("AdamW on the host: the update vs double reference", d1, rd, n, 1e-4);
    check("AdamW moments m", hm, m, n, 1e-6);
    check("AdamW moments v", hv, v, n, 1e-6);
    check("AdamW bf16 parameter copy", hp, p2, n, TOL_BF16);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += hw[i] == w2[i];
    TAP_OK(same >= n - n / 100, "AdamW host and GPU agree bit for bit on %zu of %zu weights "
           "(FMA contraction may differ by an ulp)", same, n);
    free(w); free(g); free(m); free(v); free(hw); free(hm); free(hv); free(hp); free(w2);
    free(m2); free(v2); free(p2); free(pb); free(d0); free(d1); free(rd); free(w0);
    cudaFree(dw); cudaFree(dg); cudaFree(dm); cudaFree(dv); cudaFree(dp);
}

/* ---- the model ---- */

static int run_steps(mrt_model *m, int recompute, int steps, int update, uint64_t dseed,
                     float *losses, float *grads_last)
{
    ms_error err;
    ms_error_clear(&err);
    mrt_config c;
    mrt_config_default(&c);
    size_t T = mrt_tokens(m);
    int32_t *tok = malloc(T * 4), *lab = malloc(T * 4);
    int ok = tok && lab;
    for (int s = 0; ok && s < steps; s++) {
        mrt_stream(dseed, (uint64_t)s, c.vocab, c.seq, c.batch, tok, lab);
        ok = mrt_set_batch(m, tok, lab, &err) == RT_OK && mrt_step(m, recompute, update,
                                                                   &losses[s], &err) == RT_OK;
    }
    if (ok && grads_last) ok = mrt_grads(m, grads_last, &err) == RT_OK;
    if (!ok) TAP_NOTE("model step failed: %s", err.msg);
    free(tok);
    free(lab);
    return ok;
}

static void t_model(void)
{
    ms_error err;
    ms_error_clear(&err);
    mrt_config c;
    mrt_config_default(&c);
    mrt_model *a = NULL, *b = NULL, *a2 = NULL;
    rt_status st = mrt_new(&c, NULL, &a, &err);
    if (st == RT_OK) st = mrt_new(&c, NULL, &b, &err);
    if (st == RT_OK) st = mrt_new(&c, NULL, &a2, &err);
    TAP_OK(st == RT_OK, "tiny GPT built three times (L %d h %d heads %d ffn %d V %d, seq %d x "
           "batch %d) %s", c.layers, c.hidden, c.heads, c.ffn, c.vocab, c.seq, c.batch,
           st == RT_OK ? "" : err.msg);
    if (st != RT_OK) goto out;
    size_t np = mrt_param_count(a);
    float *ga = malloc(np * 4), *gb = malloc(np * 4), *g2 = malloc(np * 4);
    float la[3], lb[3], l2[3];
    /* three steps with updates: keep-all, full recompute, and keep-all again */
    int ok = run_steps(a, 0, 3, 1, 99, la, ga) && run_steps(b, 1, 3, 1, 99, lb, gb) &&
             run_steps(a2, 0, 3, 1, 99, l2, g2);
    TAP_OK(ok, "three training steps in each mode");
    if (ok) {
        TAP_NOTE("losses keep-all %.7f %.7f %.7f, recompute %.7f %.7f %.7f", la[0], la[1], la[2],
                 lb[0], lb[1], lb[2]);
        TAP_OK(fabsf(la[0] - logf((float)c.vocab)) < 0.1f, "first loss %.4f near ln V = %.4f",
               la[0], logf((float)c.vocab));
        TAP_OK(!memcmp(la, lb, sizeof la), "keep-all and full-recompute losses are bitwise equal "
               "over 3 steps");
        size_t diff = 0;
        double mx = 0;
        for (size_t i = 0; i < np; i++)
            if (memcmp(&ga[i], &gb[i], 4)) {
                diff++;
                double d = fabs((double)ga[i] - gb[i]);
                if (d > mx) mx = d;
            }
        TAP_OK(diff == 0, "keep-all and full-recompute gradients are bitwise equal (%zu of %zu "
               "differ, max |diff| %.3g)", diff, np, mx);
        TAP_OK(!memcmp(la, l2, sizeof la) && !memcmp(ga, g2, np * 4),
               "the same model trained twice gives the same bits (no atomics anywhere)");
        double gn = 0;
        for (size_t i = 0; i < np; i++) gn += (double)ga[i] * ga[i];
        TAP_OK(isfinite(gn) && gn > 0, "gradient norm %.4g finite and non-zero", sqrt(gn));
    }
    free(ga); free(gb); free(g2);
    /* 50 steps from a fresh model: the loss must fall */
    mrt_model *t = NULL;
    float curve[50];
    if (mrt_new(&c, NULL, &t, &err) == RT_OK && run_steps(t, 0, 50, 1, 4242, curve, NULL)) {
        char line[1024];
        size_t o = 0;
        for (int s = 0; s < 50; s++) {
            o += (size_t)snprintf(line + o, sizeof line - o, "%.3f%s", curve[s], s % 10 == 9 ? "" : " ");
            if (s % 10 == 9) {
                TAP_NOTE("loss steps %2d-%2d: %s", s - 9, s, line);
                o = 0;
            }
        }
        double last = 0;
        for (int s = 45; s < 50; s++) last += curve[s] / 5;
        TAP_OK(last < curve[0] - 0.5, "loss falls over 50 steps: %.3f -> %.3f (mean of the last "
               "5; floor of the stream about ln 4 = 1.386)", curve[0], last);
    } else {
        TAP_OK(0, "50-step training run: %s", err.msg);
    }
    mrt_free(t);
out:
    mrt_free(a);
    mrt_free(b);
    mrt_free(a2);
}

/* A generated trace, lowered under keep-all and full-recompute, each compute action through
 * the dispatcher on the caching allocator over the CUDA backend. */
static void t_trace(void)
{
    ms_error err;
    machine_profile *mp = NULL;
    if (machine_load_named("h200-sxm", &mp, &err) != MS_OK) {
        TAP_OK(0, "machine profile h200-sxm (set MEMSIM_DATADIR): %s", err.msg);
        return;
    }
    gen_config c;
    gen_config_default(&c);
    trace_t *t = NULL;
    ms_status ms = model_lookup("dims:2,128,2,512,512", &c.model, &err);
    c.seq = 128;
    c.micro_batch = 2;
    c.iterations = 6;
    c.grad_bytes = 4;
    c.save_small = 1;
    if (ms == MS_OK) ms = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(ms == MS_OK, "generated trace dims:2,128,2,512,512 seq 128 x 2, 6 iterations %s",
           ms == MS_OK ? "" : err.msg);
    static const char *const pol[2] = {"keep-all", "full-recompute"};
    mrt_sched_result r[2];
    int ok[2] = {0, 0};
    memset(r, 0, sizeof r);
    for (int p = 0; p < 2 && ms == MS_OK; p++) {
        plan_t *plan = NULL;
        schedule_t *s = NULL;
        rt_backend *be = NULL;
        rt_backend_opts bo;
        rt_backend_opts_default(&bo);
        ms = pol_plan(pol[p], t, &mp->m, NULL, &plan, &err);
        if (ms == MS_OK) ms = lower_schedule(t, plan, &mp->m, NULL, &s, &err);
        rt_status st = ms == MS_OK ? rt_backend_new(&bo, &be, &err) : RT_ERR_INVALID;
        if (st == RT_OK) st = mrt_sched_run(s, t, rt_backend_mb(be), "caching", NULL, 77, NULL,
                                             &r[p], &err);
        ok[p] = st == RT_OK && r[p].n_iter == 6;
        TAP_OK(ok[p], "%s schedule (%zu actions) ran with real kernels: %s", pol[p],
               s ? sched_count(s) : 0, ok[p] ? "6 iterations" : err.msg);
        TAP_OK(!be || rt_backend_outstanding(be) == 0, "%s: every device block given back", pol[p]);
        rt_backend_free(be);
        sched_free(s);
        plan_free(plan);
    }
    if (ok[0] && ok[1]) {
        TAP_NOTE("losses keep-all %.4f %.4f %.4f %.4f %.4f %.4f", r[0].loss[0], r[0].loss[1],
                 r[0].loss[2], r[0].loss[3], r[0].loss[4], r[0].loss[5]);
        TAP_OK(fabsf(r[0].loss[0] - logf(512.0f)) < 0.1f, "trace run: first loss %.4f near ln V",
               r[0].loss[0]);
        TAP_OK(r[0].loss[5] < r[0].loss[0] - 0.1f, "trace run: the loss falls over 6 iterations "
               "(%.4f -> %.4f)", r[0].loss[0], r[0].loss[5]);
        TAP_OK(!memcmp(r[0].loss, r[1].loss, sizeof r[0].loss),
               "keep-all and full-recompute schedules give bitwise equal losses");
        size_t rec = 0, timed = 0;
        for (size_t k = 0; k < r[1].n_ops; k++) {
            rec += r[1].ops[k].recompute;
            timed += r[1].ops[k].meas_us > 0;
        }
        TAP_OK(rec > 0 && timed == r[1].n_ops, "full recompute replayed %zu forward ops; all %zu "
               "ops measured", rec, r[1].n_ops);
        TAP_OK(r[1].astats.allocated_peak_bytes < r[0].astats.allocated_peak_bytes,
               "full recompute peaks lower: %llu < %llu bytes",
               (unsigned long long)r[1].astats.allocated_peak_bytes,
               (unsigned long long)r[0].astats.allocated_peak_bytes);
        double mo = 0, me = 0;
        for (size_t k = 0; k < r[0].n_ops; k++) {
            mo += r[0].ops[k].req_us;
            me += r[0].ops[k].meas_us;
        }
        TAP_NOTE("keep-all ops: modelled %.3f ms, measured %.3f ms in all", mo / 1e3, me / 1e3);
    }
    mrt_sched_result_release(&r[0]);
    mrt_sched_result_release(&r[1]);
    trace_free(t);
    machine_profile_free(mp);
}

/* The one pass in query chunks (runtime/attn_sm90.h, attn90_bwd_qchunk) at short lengths: an
 * L2 of 256 KB as the rule sees it makes chunks of 2 query tiles (128 queries), so that every
 * key block carries its dK, dV across many chunks and heads share the ring's slots; each
 * against the CPU reference and, bit for bit, against the one pass of one chunk. */
static void t_attn_chunks(void)
{
    const size_t l2 = kn_ctx_l2_bytes(K);
    kn_ctx_set_l2_bytes(K, 256u << 10);
    kn_attn_impl was = kn_ctx_attn(K);
    ms_error err;
    ms_error_clear(&err);
    if (kn_ctx_set_attn(K, KN_ATTN_WGMMA, &err) == RT_OK) {
        static const size_t S[3] = {768, 1024, 640};
        for (int i = 0; i < 3; i++)
            TAP_OK(kn_attn_bwd_qchunk(K, S[i], 128) == 2,
                   "one-pass backward at %zu tokens in chunks of %d query tiles under a 256 KB L2",
                   S[i], kn_attn_bwd_qchunk(K, S[i], 128));
        kn_ctx_set_attn(K, was, &err);
    }
    t_attn(3600, 2, 3, 768, 128, 1, KN_ATTN_WGMMA);    /* 6 heads: the ring's slots reused */
    t_attn(3700, 1, 2, 1024, 128, 0, KN_ATTN_WGMMA);
    t_attn(3800, 1, 5, 640, 128, 1, KN_ATTN_WGMMA);
    kn_ctx_set_l2_bytes(K, 1u << 20);                  /* chunks of 8 tiles: 24 in 3 */
    t_attn(3900, 1, 3, 1536, 128, 1, KN_ATTN_WGMMA);
    if (kn_ctx_set_attn(K, KN_ATTN_WGMMA, &err) == RT_OK) {
        TAP_OK(kn_attn_bwd_qchunk(K, 1536, 128) == 8, "chunks of %d query tiles under a 1 MB L2",
               kn_attn_bwd_qchunk(K, 1536, 128));
        TAP_OK(kn_attn_bwd_qchunk(K, 1280, 128) == 8 && kn_attn_bwd_qchunk(K, 1024, 128) == 0,
               "under a 1 MB L2 1280 tokens in chunks (%d), 1024 (a 512 KB accumulator) in one "
               "(%d)", kn_attn_bwd_qchunk(K, 1280, 128), kn_attn_bwd_qchunk(K, 1024, 128));
        kn_ctx_set_attn(K, was, &err);
    }
    kn_ctx_set_l2_bytes(K, l2);
}

/* The wgmma kernels' fragment and shared-memory layouts, each product against the host. */
static void t_attn_layouts(void)
{
    ms_error err;
    ms_error_clear(&err);
    double rel[KN_ATTN_NTEST];
    static const char *const what[KN_ATTN_NTEST] = {
        "wgmma layout: A B^T, both K-major in shared memory (m64n128k16)",
        "wgmma layout: A B^T at N 64 (m64n64k16)", "wgmma layout: P V, P in registers, V N-major",
        "TMA tile: the copy engine's 128-byte swizzle is the one the descriptors assume"};
    if (kn_attn_selftest(K, rel, &err) != RT_OK) {
        TAP_OK(0, "wgmma layout self-test: %s", err.msg);
        return;
    }
    for (int i = 0; i < KN_ATTN_NTEST; i++)
        TAP_OK(rel[i] <= (i == 3 ? 0.0 : 1e-4), "%s: rel. error %.3g", what[i], rel[i]);
}

int main(void)
{
    ms_error err;
    ms_error_clear(&err);
    int n = 0;
    struct cudaDeviceProp p;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) TAP_SKIP_ALL("no GPU");
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess || p.major < 9)
        TAP_SKIP_ALL("the kernels are built for compute capability 9.0");
    if (kn_ctx_new(NULL, &K, &err) != RT_OK) {
        TAP_OK(0, "kernel context: %s", err.msg);
        return tap_done();
    }
    TAP_NOTE("device %s, %d SMs", p.name, p.multiProcessorCount);
    const int wgmma = kn_ctx_attn(K) == KN_ATTN_WGMMA;
    TAP_NOTE("attention kernels: %s", kn_attn_name(kn_ctx_attn(K)));
    if (wgmma) t_attn_layouts();
    for (uint64_t seed = 1; seed <= 2; seed++) {   /* two fresh draws per kernel */
        TAP_NOTE("inputs drawn with seed %llu", (unsigned long long)seed * 1000);
        t_embed(seed * 1000, 300, 136, 97);
        t_embed(seed * 1000 + 50, 4096, 64, 40);
        t_ln(seed * 1000 + 100);
        t_gemm(seed * 1000 + 200);
        if (seed == 1) t_gemm_tuned(seed * 1000 + 250);
        t_elem(seed * 1000 + 300);
        for (int i = 0; i < 5; i++) {   /* every attention kernel set the device runs */
            static const kn_attn_impl im[5] = {KN_ATTN_MMA, KN_ATTN_WGMMA, KN_ATTN_WGMMA_BASIC,
                                               KN_ATTN_WGMMA_OVERLAP, KN_ATTN_WGMMA_TWO};
            /* (the one-pass form last of all, below) */
            kn_attn_impl impl = im[i];
            if (impl != KN_ATTN_MMA && !wgmma) continue;
            t_attn(seed * 1000 + 400, 2, 2, 256, 64, 1, impl);
            t_attn(seed * 1000 + 500, 1, 2, 384, 128, 0, impl);
        }
        t_ce(seed * 1000 + 600);
        t_adamw(seed * 1000 + 700);
    }
    t_attn(3000, 1, 1, 128, 128, 1, KN_ATTN_MMA);   /* one tile: the diagonal only */
    for (int i = 0; wgmma && i < 4; i++) {
        static const kn_attn_impl im[4] = {KN_ATTN_WGMMA, KN_ATTN_WGMMA_BASIC,
                                           KN_ATTN_WGMMA_OVERLAP, KN_ATTN_WGMMA_TWO};
        kn_attn_impl impl = im[i];
        t_attn(3000, 1, 1, 128, 128, 1, impl);
        t_attn(3100, 1, 2, 1024, 128, 1, impl);   /* rings of stages wrap many times */
        t_attn(3200, 2, 1, 640, 64, 0, impl);
    }
    TAP_OK(cuda_ok, "every CUDA allocation and copy of the checks succeeded");
    t_model();
    t_trace();
    if (wgmma) {   /* the one-pass backward (dq summed in a fixed order across CTAs), named */
        for (int i = 0; i < 2; i++) {   /* at every length; with dQ beside its own dK */
            const kn_attn_impl impl = i ? KN_ATTN_WGMMA_INLINE : KN_ATTN_WGMMA_ONEPASS;
            t_attn(3300, 1, 2, 384, 128, 0, impl);
            t_attn(3400, 1, 2, 1024, 128, 1, impl);
            t_attn(3500, 2, 3, 768, 128, 1, impl);
        }
        t_attn_chunks();
    }
    kn_ctx_free(K);
    return tap_done();
}

/* kernels_ref.c — CPU references of the transformer kernels (see kernels_ref.h): plain loops
 * in double over float storage, written for clarity, not speed; the checks in
 * tests/test_kernels.c compare every GPU kernel with these on small shapes. */
#include "runtime/kernels_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint16_t kref_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float kref_bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void kref_round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = kref_bf2f(kref_f2bf(x[i]));
}

float kref_uniform(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

double kref_rel_err(const float *out, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

void kref_embed_fwd(float *out, const int32_t *tok, const float *wte, size_t T, size_t h)
{
    for (size_t t = 0; t < T; t++) memcpy(out + t * h, wte + (size_t)tok[t] * h, h * sizeof *out);
}

void kref_embed_bwd(float *dwte, const int32_t *tok, const float *dout, size_t T, size_t h)
{
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < h; c++) dwte[(size_t)tok[t] * h + c] += dout[t * h + c];
}

static void row_stats(const float *x, size_t h, float eps, double *mu, double *rs)
{
    double s = 0, v = 0;
    for (size_t c = 0; c < h; c++) s += x[c];
    *mu = s / (double)h;
    for (size_t c = 0; c < h; c++) v += (x[c] - *mu) * (x[c] - *mu);
    *rs = 1.0 / sqrt(v / (double)h + eps);
}

void kref_ln_fwd(float *y, float *mean, float *rstd, const float *x, const float *g,
                 const float *b, size_t T, size_t h, float eps)
{
    for (size_t t = 0; t < T; t++) {
        double mu, rs;
        row_stats(x + t * h, h, eps, &mu, &rs);
        for (size_t c = 0; c < h; c++)
            y[t * h + c] = (float)((x[t * h + c] - mu) * rs * g[c] + b[c]);
        if (mean) mean[t] = (float)mu;
        if (rstd) rstd[t] = (float)rs;
    }
}

void kref_ln_bwd(float *dx, float *dg, float *db, const float *dy, const float *x,
                 const float *g, const float *dres, size_t T, size_t h, float eps)
{
    for (size_t t = 0; t < T; t++) {
        const float *xr = x + t * h, *dr = dy + t * h;
        double mu, rs, c1 = 0, c2 = 0;
        row_stats(xr, h, eps, &mu, &rs);
        for (size_t c = 0; c < h; c++) {
            double xh = (xr[c] - mu) * rs, w = (double)dr[c] * g[c];
            c1 += xh * w;
            c2 += w;
            dg[c] += (float)(dr[c] * xh);
            db[c] += dr[c];
        }
        c1 /= (double)h;
        c2 /= (double)h;
        for (size_t c = 0; c < h; c++) {
            double xh = (xr[c] - mu) * rs, w = (double)dr[c] * g[c];
            dx[t * h + c] = (float)(rs * (w - c2 - xh * c1) + (dres ? dres[t * h + c] : 0));
        }
    }
}

void kref_gemm(int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda,
               const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0;
            for (size_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            C[i * ldc + j] = (float)(s + (beta != 0 ? (double)beta * C[i * ldc + j] : 0));
        }
}

void kref_bias_add(float *y, const float *bias, size_t T, size_t n, size_t ld)
{
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < n; c++) y[t * ld + c] += bias[c];
}

void kref_add(float *out, const float *a, const float *b, const float *bias, size_t T, size_t n)
{
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < n; c++)
            out[t * n + c] = (float)((double)a[t * n + c] + b[t * n + c] + (bias ? bias[c] : 0));
}

static const double GELU_K0 = 0.7978845608028654, GELU_K1 = 0.044715;

void kref_gelu_fwd(float *y, const float *x, const float *bias, size_t T, size_t n)
{
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < n; c++) {
            double z = (double)x[t * n + c] + (bias ? bias[c] : 0);
            y[t * n + c] = (float)(0.5 * z * (1 + tanh(GELU_K0 * (z + GELU_K1 * z * z * z))));
        }
}

void kref_gelu_bwd(float *dx, const float *dy, const float *x, const float *bias, size_t T,
                   size_t n)
{
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < n; c++) {
            double z = (double)x[t * n + c] + (bias ? bias[c] : 0);
            double th = tanh(GELU_K0 * (z + GELU_K1 * z * z * z));
            double d = 0.5 * (1 + th) +
                       0.5 * z * (1 - th * th) * GELU_K0 * (1 + 3 * GELU_K1 * z * z);
            dx[t * n + c] = (float)(dy[t * n + c] * d);
        }
}

void kref_colsum(float *out, const float *a, size_t T, size_t n)
{
    for (size_t c = 0; c < n; c++) {
        double s = 0;
        for (size_t t = 0; t < T; t++) s += a[t * n + c];
        out[c] += (float)s;
    }
}

/* One (batch, head) row i: probabilities over j <= i into p (double), returns the lse. */
static double attn_row(double *p, const float *q, const float *k, size_t ld, size_t i,
                       size_t D)
{
    double sc = 1.0 / sqrt((double)D), mx = -INFINITY, s = 0;
    for (size_t j = 0; j <= i; j++) {
        double d = 0;
        for (size_t c = 0; c < D; c++) d += (double)q[i * ld + c] * k[j * ld + c];
        p[j] = d * sc;
        if (p[j] > mx) mx = p[j];
    }
    for (size_t j = 0; j <= i; j++) s += exp(p[j] - mx);
    double lse = mx + log(s);
    for (size_t j = 0; j <= i; j++) p[j] = exp(p[j] - lse);
    return lse;
}

void kref_attn_fwd(float *o, float *lse, const float *q, const float *k, const float *v,
                   size_t ld_qkv, size_t ld_o, size_t B, size_t H, size_t S, size_t D)
{
    double *p = malloc(S * sizeof *p);
    if (!p) return;
    for (size_t b = 0; b < B; b++)
        for (size_t hd = 0; hd < H; hd++) {
            const float *qb = q + b * S * ld_qkv + hd * D, *kb = k + b * S * ld_qkv + hd * D;
            const float *vb = v + b * S * ld_qkv + hd * D;
            for (size_t i = 0; i < S; i++) {
                double l = attn_row(p, qb, kb, ld_qkv, i, D);
                if (lse) lse[(b * H + hd) * S + i] = (float)l;
                for (size_t c = 0; c < D; c++) {
                    double s = 0;
                    for (size_t j = 0; j <= i; j++) s += p[j] * vb[j * ld_qkv + c];
                    o[(b * S + i) * ld_o + hd * D + c] = (float)s;
                }
            }
        }
    free(p);
}

void kref_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, size_t ld_qkv, size_t ld_o, size_t B,
                   size_t H, size_t S, size_t D)
{
    double *p = malloc(S * sizeof *p), *gq = malloc(D * sizeof *gq);
    double *gk = calloc(S * D, sizeof *gk), *gv = calloc(S * D, sizeof *gv);
    if (!p || !gq || !gk || !gv) goto out;
    double sc = 1.0 / sqrt((double)D);
    for (size_t b = 0; b < B; b++)
        for (size_t hd = 0; hd < H; hd++) {
            size_t base = b * S * ld_qkv + hd * D;
            const float *qb = q + base, *kb = k + base, *vb = v + base;
            const float *db = dout + b * S * ld_o + hd * D;
            memset(gk, 0, S * D * sizeof *gk);
            memset(gv, 0, S * D * sizeof *gv);
            for (size_t i = 0; i < S; i++) {
                attn_row(p, qb, kb, ld_qkv, i, D);
                double Di = 0;   /* dO . O with the exact forward output */
                for (size_t c = 0; c < D; c++) {
                    double s = 0;
                    for (size_t j = 0; j <= i; j++) s += p[j] * vb[j * ld_qkv + c];
                    Di += s * db[i * ld_o + c];
                }
                for (size_t c = 0; c < D; c++) gq[c] = 0;
                for (size_t j = 0; j <= i; j++) {
                    double d = 0;
                    for (size_t c = 0; c < D; c++) d += (double)db[i * ld_o + c] * vb[j * ld_qkv + c];
                    double ds = p[j] * (d - Di);
                    for (size_t c = 0; c < D; c++) {
                        gq[c] += ds * kb[j * ld_qkv + c];
                        gk[j * D + c] += ds * qb[i * ld_qkv + c];
                        gv[j * D + c] += p[j] * db[i * ld_o + c];
                    }
                }
                for (size_t c = 0; c < D; c++) dq[base + i * ld_qkv + c] = (float)(gq[c] * sc);
            }
            for (size_t j = 0; j < S; j++)
                for (size_t c = 0; c < D; c++) {
                    dk[base + j * ld_qkv + c] = (float)(gk[j * D + c] * sc);
                    dv[base + j * ld_qkv + c] = (float)gv[j * D + c];
                }
        }
out:
    free(p);
    free(gq);
    free(gk);
    free(gv);
}

static double row_lse(const float *z, size_t V)
{
    double mx = -INFINITY, s = 0;
    for (size_t v = 0; v < V; v++)
        if (z[v] > mx) mx = z[v];
    for (size_t v = 0; v < V; v++) s += exp(z[v] - mx);
    return mx + log(s);
}

void kref_ce_fwd(float *loss, float *lse, const float *logits, size_t ldl,
                 const int32_t *labels, size_t T, size_t V)
{
    for (size_t t = 0; t < T; t++) {
        double l = row_lse(logits + t * ldl, V);
        if (lse) lse[t] = (float)l;
        loss[t] = labels[t] < 0 ? 0.0f : (float)(l - logits[t * ldl + (size_t)labels[t]]);
    }
}

void kref_ce_bwd(float *dlogits, const float *logits, size_t ldl, const int32_t *labels,
                 size_t T, size_t V, float scale)
{
    for (size_t t = 0; t < T; t++) {
        double l = row_lse(logits + t * ldl, V);
        for (size_t v = 0; v < ldl; v++) {
            double d = 0;
            if (labels[t] >= 0 && v < V)
                d = (exp(logits[t * ldl + v] - l) - (v == (size_t)labels[t])) * scale;
            dlogits[t * ldl + v] = (float)d;
        }
    }
}

void kref_adamw(float *param, float *master, float *m, float *v, const float *grad, size_t n,
                const kn_adamw_cfg *c)
{
    double bc1 = 1 - pow(c->beta1, c->step), bc2 = 1 - pow(c->beta2, c->step);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * c->grad_scale;
        double mi = c->beta1 * (double)m[i] + (1 - c->beta1) * g;
        double vi = c->beta2 * (double)v[i] + (1 - c->beta2) * g * g;
        double p = master[i];
        p -= c->lr * ((mi / bc1) / (sqrt(vi / bc2) + c->eps) + c->weight_decay * p);
        m[i] = (float)mi;
        v[i] = (float)vi;
        master[i] = (float)p;
        if (param) param[i] = kref_bf2f(kref_f2bf((float)p));
    }
}

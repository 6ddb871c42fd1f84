/* kernels.cu — the runtime's transformer kernels (kernels.h): element-wise and row kernels
 * with 16-byte vector accesses, two-pass deterministic column reductions, GEMMs through
 * cuBLAS, and the kernel context that dispatches causal flash attention to the device's
 * kernels (runtime/attn_sm90.h on compute capability 9.0, runtime/attn_sm80.h elsewhere) and
 * the embedding backward to its sorted scatter (runtime/embed_bwd.h). C-style CUDA behind an
 * extern "C" interface. Used by runtime/model_rt.c, runtime/rt_run.c and tests/test_kernels.c. */
#include "runtime/kernels.h"

#include "runtime/bf16_dev.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/attn_sm80.h"
#include "runtime/attn_sm90.h"
#include "runtime/attn_sm90_test.h"
#include "runtime/embed_bwd.h"
#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>
#define HOST_MXCSR 1
#define MXCSR_FTZ 0x8000u /* results that would be subnormal become 0 */
#define MXCSR_DAZ 0x0040u /* subnormal inputs read as 0 */
#else
#define HOST_MXCSR 0      /* elsewhere the host step keeps subnormals */
#endif


/* ======================= context ======================= */

#define KN_BLAS_WS_BYTES (32u << 20)
#define KN_COL_CHUNK 64          /* rows per partial sum of the column reductions */

struct kn_ctx {
    cudaStream_t s;
    cublasHandle_t blas;
    void *blas_ws;
    float *scratch;
    size_t scratch_floats;
    int cc_major, cc_minor;   /* the device's compute capability */
    size_t l2_bytes;          /* its L2 cache (attn90_bwd_onepass) */
    int qchunk_force;         /* > 0: the one pass's query chunk in tiles, not the L2 rule's */
    void *a90_encode;         /* the tensor-map encoder when the sm_90 attention can run */
    kn_attn_impl attn;        /* the attention kernels in use (never KN_ATTN_AUTO) */
    void *ebw;                /* the embedding backward's sort scratch */
    size_t ebw_bytes;
    cublasLtHandle_t lt;      /* the GEMMs whose algorithm was chosen by measurement */
    struct kn_galgo *ga;      /* (kn_gemm_algos_load, kn_ctx_set_gemm_tune), by shape */
    size_t nga, capga;
    int tune;                 /* a GEMM shape not in ga is measured at its first call */
    double tune_margin;       /* how much faster than the default a candidate must be */
};

static void ga_free(kn_ctx *k);

static rt_status launched(const char *what, ms_error *err)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, what, cudaGetErrorString(e));
    return RT_OK;
}

static rt_status invalid(const char *what, const char *msg, ms_error *err)
{
    return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, what, msg);
}

static rt_status blas_err(cublasStatus_t st, const char *what, ms_error *err)
{
    if (st == CUBLAS_STATUS_SUCCESS) return RT_OK;
    char msg[64];
    snprintf(msg, sizeof msg, "cuBLAS status %d", (int)st);
    return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, what, msg);
}

static int al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The attention kernels for this device: wgmma and TMA on compute capability 9.0 (the sm_90a
 * code runs nowhere else), mma.sync elsewhere. */
static rt_status attn_pick(kn_ctx *k, ms_error *err)
{
    int dev = 0;
    RT_CHECK(err, cudaGetDevice(&dev));
    RT_CHECK(err, cudaDeviceGetAttribute(&k->cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    RT_CHECK(err, cudaDeviceGetAttribute(&k->cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    int l2 = 0;
    RT_CHECK(err, cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    k->l2_bytes = l2 > 0 ? (size_t)l2 : 0;
    k->attn = KN_ATTN_MMA;
    if (k->cc_major == 9 && k->cc_minor == 0) {
        RT_TRY(attn90_setup(&k->a90_encode, err));
        k->attn = KN_ATTN_WGMMA;
    }
    return RT_OK;
}

rt_status kn_ctx_new(void *stream, kn_ctx **out, ms_error *err)
{
    *out = NULL;
    kn_ctx *k = (kn_ctx *)calloc(1, sizeof *k);
    if (!k) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    k->s = (cudaStream_t)stream;
    rt_status st = blas_err(cublasCreate(&k->blas), "cublasCreate", err);
    if (st == RT_OK) {
        cudaError_t e = cudaMalloc(&k->blas_ws, KN_BLAS_WS_BYTES);
        if (e != cudaSuccess)
            st = rt_fail(err, RT_ERR_OOM, __FILE__, __LINE__, "cudaMalloc", cudaGetErrorString(e));
    }
    if (st == RT_OK) st = blas_err(cublasSetStream(k->blas, k->s), "cublasSetStream", err);
    if (st == RT_OK)
        st = blas_err(cublasSetWorkspace(k->blas, k->blas_ws, KN_BLAS_WS_BYTES),
                      "cublasSetWorkspace", err);
    if (st == RT_OK) st = blas_err(cublasLtCreate(&k->lt), "cublasLtCreate", err);
    if (st == RT_OK) st = attn80_setup(err);
    if (st == RT_OK) st = attn_pick(k, err);
    if (st != RT_OK) {
        kn_ctx_free(k);
        return st;
    }
    *out = k;
    return RT_OK;
}

void kn_ctx_free(kn_ctx *k)
{
    if (!k) return;
    ga_free(k);
    if (k->lt) cublasLtDestroy(k->lt);
    if (k->blas) cublasDestroy(k->blas);
    cudaFree(k->blas_ws);
    cudaFree(k->scratch);
    cudaFree(k->ebw);
    free(k);
}

rt_status kn_ctx_set_stream(kn_ctx *k, void *stream, ms_error *err)
{
    k->s = (cudaStream_t)stream;
    return blas_err(cublasSetStream(k->blas, k->s), "cublasSetStream", err);
}

void *kn_ctx_stream(const kn_ctx *k) { return (void *)k->s; }

rt_status kn_ctx_set_attn(kn_ctx *k, kn_attn_impl impl, ms_error *err)
{
    if (impl == KN_ATTN_AUTO) impl = k->a90_encode ? KN_ATTN_WGMMA : KN_ATTN_MMA;
    if (impl < KN_ATTN_MMA || impl > KN_ATTN_WGMMA_INLINE)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "kn_ctx_set_attn", "no such kernels");
    if (impl != KN_ATTN_MMA && !k->a90_encode)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "kn_ctx_set_attn",
                       "the wgmma attention needs a GPU of compute capability 9.0");
    k->attn = impl;
    return RT_OK;
}

size_t kn_ctx_l2_bytes(const kn_ctx *k) { return k->l2_bytes; }

void kn_ctx_set_l2_bytes(kn_ctx *k, size_t bytes) { k->l2_bytes = bytes; }

/* The sm_90 kernels' forms for the implementation in use (attn_sm90.h). */
static int attn90_flags(const kn_ctx *k)
{
    switch (k->attn) {
    case KN_ATTN_WGMMA: return ATTN90_PINGPONG | ATTN90_ONEPASS | ATTN90_DQ_DEFER | ATTN90_QCHUNK;
    case KN_ATTN_WGMMA_INLINE: return ATTN90_PINGPONG | ATTN90_ONEPASS;
    case KN_ATTN_WGMMA_TWO: return ATTN90_PINGPONG;
    case KN_ATTN_WGMMA_OVERLAP: return ATTN90_PINGPONG | ATTN90_BWD_OVERLAP;
    case KN_ATTN_WGMMA_ONEPASS: return ATTN90_PINGPONG | ATTN90_ONEPASS | ATTN90_DQ_DEFER;
    default: return 0;
    }
}

kn_attn_impl kn_ctx_attn(const kn_ctx *k) { return k->attn; }

/* The backward's forms at s tokens and head dim d: the one pass only where it is the faster. */
static int attn90_bwd_flags(const kn_ctx *k, size_t s, size_t d)
{
    int f = attn90_flags(k);
    return attn90_bwd_onepass(f, s, d, k->l2_bytes) ? f : f & ~ATTN90_ONEPASS;
}

/* Query tiles a chunk of the one-pass backward takes at s tokens, head dim d (0: one). */
static int attn90_chunk(const kn_ctx *k, size_t s, size_t d)
{
    const int f = attn90_bwd_flags(k, s, d);
    if (k->qchunk_force > 0 && (f & ATTN90_QCHUNK) && (f & ATTN90_ONEPASS) && d == 128)
        return (size_t)k->qchunk_force < s / 64 ? k->qchunk_force : 0;
    return attn90_bwd_qchunk(f, s, d, k->l2_bytes);
}

rt_status kn_ctx_set_attn_qchunk(kn_ctx *k, int tiles, ms_error *err)
{
    if (tiles < 0 || tiles % 2)
        return invalid("kn_ctx_set_attn_qchunk", "a chunk is an even number of query tiles", err);
    k->qchunk_force = tiles;
    return RT_OK;
}

int kn_attn_bwd_qchunk(const kn_ctx *k, size_t s, size_t d)
{
    return k->attn == KN_ATTN_MMA ? 0 : attn90_chunk(k, s, d);
}

int kn_attn_bwd_products(const kn_ctx *k, size_t s, size_t d)
{
    return k->attn != KN_ATTN_MMA && (attn90_bwd_flags(k, s, d) & ATTN90_ONEPASS) ? 5 : 7;
}

const char *kn_attn_name(kn_attn_impl impl)
{
    switch (impl) {
    case KN_ATTN_WGMMA: return "wgmma";
    case KN_ATTN_WGMMA_BASIC: return "wgmma-basic";
    case KN_ATTN_WGMMA_ONEPASS: return "wgmma-onepass";
    case KN_ATTN_WGMMA_OVERLAP: return "wgmma-overlap";
    case KN_ATTN_WGMMA_TWO: return "wgmma-two";
    case KN_ATTN_WGMMA_INLINE: return "wgmma-inline";
    case KN_ATTN_MMA: return "mma";
    default: return "auto";
    }
}

rt_status kn_attn_selftest(kn_ctx *k, double rel[KN_ATTN_NTEST], ms_error *err)
{
    if (!k->a90_encode)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "kn_attn_selftest",
                       "the wgmma attention needs a GPU of compute capability 9.0");
    return attn90_selftest(k->a90_encode, rel, err);
}

static rt_status scratch(kn_ctx *k, size_t floats, ms_error *err)
{
    if (floats <= k->scratch_floats) return RT_OK;
    /* cudaFree waits for the kernels that may still use the old scratch */
    cudaFree(k->scratch);
    k->scratch = NULL;
    k->scratch_floats = 0;
    RT_CHECK(err, cudaMalloc(&k->scratch, floats * sizeof(float)));
    k->scratch_floats = floats;
    return RT_OK;
}

static size_t col_chunks(size_t T) { return (T + KN_COL_CHUNK - 1) / KN_COL_CHUNK; }

/* The embedding backward's sort scratch for T tokens. */
static rt_status ebw_scratch(kn_ctx *k, size_t T, ms_error *err)
{
    size_t need = embed_bwd_scratch_bytes(T);
    if (need <= k->ebw_bytes) return RT_OK;
    cudaFree(k->ebw);   /* waits for the kernels that may still use it */
    k->ebw = NULL;
    k->ebw_bytes = 0;
    RT_CHECK(err, cudaMalloc(&k->ebw, need));
    k->ebw_bytes = need;
    return RT_OK;
}

/* Floats of scratch attention's backward takes for b x h heads of s tokens: dvec, then the
 * wgmma form's (attn90_bwd_scratch_floats) at head dim d. */
static size_t attn_scratch_floats(const kn_ctx *k, size_t b, size_t h, size_t s, size_t d)
{
    size_t dv = (b * h * s + 63) / 64 * 64;
    return k->attn == KN_ATTN_MMA ? dv
                                  : dv + attn90_bwd_scratch_floats(b, h, s, d, attn90_chunk(k, s, d));
}

rt_status kn_ctx_reserve(kn_ctx *k, size_t rows, size_t cols, size_t attn_rows, size_t attn_seq,
                         ms_error *err)
{
    /* attn_rows = b h s heads' rows, of at most attn_seq tokens each */
    size_t hs = attn_seq ? attn_rows / attn_seq : 0;
    size_t a = 2 * col_chunks(rows) * cols, at = attn_scratch_floats(k, hs, 1, attn_seq, 128);
    RT_TRY(ebw_scratch(k, rows, err));
    return scratch(k, a > at ? a : at, err);
}

/* ======================= vector helpers ======================= */


__device__ __forceinline__ void st8(bf16 *p, const float f[8])
{
    uint4 u;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<uint4 *>(p) = u;
}

__device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

static unsigned grid_for(size_t n, unsigned block)
{
    size_t g = (n + block - 1) / block;
    if (g > 65535u * 16u) g = 65535u * 16u;   /* grid-stride loops cover the rest */
    return (unsigned)(g ? g : 1);
}

/* ======================= embedding ======================= */

__global__ void embed_fwd_k(bf16 *out, const int32_t *tok, const bf16 *wte, size_t T, size_t h)
{
    size_t nv = T * (h / 8);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / (h / 8), c = (i % (h / 8)) * 8;
        *reinterpret_cast<uint4 *>(out + t * h + c) =
            *reinterpret_cast<const uint4 *>(wte + (size_t)tok[t] * h + c);
    }
}

rt_status kn_embed_fwd(kn_ctx *k, kn_bf16 *out, const int32_t *tok, const kn_bf16 *wte,
                       size_t T, size_t h, ms_error *err)
{
    if (h % 8 || !al16(out) || !al16(wte)) return invalid("kn_embed_fwd", "h % 8, alignment", err);
    size_t nv = T * (h / 8);
    embed_fwd_k<<<grid_for(nv, 256), 256, 0, k->s>>>((bf16 *)out, tok, (const bf16 *)wte, T, h);
    return launched("embed_fwd_k", err);
}

/* The fallback for rows that are not whole 16-byte vectors (runtime/embed_bwd.h sorts the ids
 * otherwise). One thread per column walks the tokens in order: deterministic, no atomics.
 * Tokens go in batches of EB: repeats inside a batch are summed into their first occurrence
 * (in token order), then the batch's distinct rows are read together and written back, so
 * that EB read-modify-writes are in flight instead of one. */
#define EB 16
__global__ void embed_bwd_k(float *dwte, const int32_t *tok, const bf16 *dout, size_t T,
                            size_t h)
{
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c >= h) return;
    for (size_t t0 = 0; t0 < T; t0 += EB) {
        int tk[EB];
        float d[EB], cur[EB];
#pragma unroll
        for (int i = 0; i < EB; i++) {
            tk[i] = t0 + i < T ? tok[t0 + i] : -1;
            d[i] = t0 + i < T ? __bfloat162float(dout[(t0 + i) * h + c]) : 0.0f;
        }
#pragma unroll
        for (int i = 1; i < EB; i++)
#pragma unroll
            for (int j = 0; j < i; j++)
                if (tk[i] >= 0 && tk[j] == tk[i]) {
                    d[j] += d[i];
                    tk[i] = -1;
                }
#pragma unroll
        for (int i = 0; i < EB; i++)
            if (tk[i] >= 0) cur[i] = dwte[(size_t)tk[i] * h + c];
#pragma unroll
        for (int i = 0; i < EB; i++)
            if (tk[i] >= 0) dwte[(size_t)tk[i] * h + c] = cur[i] + d[i];
    }
}

rt_status kn_embed_bwd(kn_ctx *k, float *dwte, const int32_t *tok, const kn_bf16 *dout,
                       size_t T, size_t h, ms_error *err)
{
    if (h % 8 == 0 && al16(dwte) && al16(dout)) {
        RT_TRY(ebw_scratch(k, T, err));
        return embed_bwd_run(k->s, k->ebw, k->ebw_bytes, dwte, tok, dout, T, h, err);
    }
    embed_bwd_k<<<(unsigned)((h + 127) / 128), 128, 0, k->s>>>(dwte, tok, (const bf16 *)dout,
                                                              T, h);
    return launched("embed_bwd_k", err);
}

/* ======================= layer norm ======================= */

/* One warp per row; three passes over the row (mean, variance, output), which stays in L1. */
__global__ void ln_fwd_k(bf16 *y, float *mean, float *rstd, const bf16 *x, const bf16 *g,
                         const bf16 *b, int T, int h, float eps)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= T) return;
    const bf16 *xr = x + (size_t)row * h;
    float f[8], s = 0;
    for (int c = lane * 8; c < h; c += 256) {
        ld8(xr + c, f);
#pragma unroll
        for (int i = 0; i < 8; i++) s += f[i];
    }
    float mu = warp_sum(s) / h, v = 0;
    for (int c = lane * 8; c < h; c += 256) {
        ld8(xr + c, f);
#pragma unroll
        for (int i = 0; i < 8; i++) v += (f[i] - mu) * (f[i] - mu);
    }
    float rs = rsqrtf(warp_sum(v) / h + eps);
    for (int c = lane * 8; c < h; c += 256) {
        float gg[8], bb[8], o[8];
        ld8(xr + c, f);
        ld8(g + c, gg);
        ld8(b + c, bb);
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = (f[i] - mu) * rs * gg[i] + bb[i];
        st8(y + (size_t)row * h + c, o);
    }
    if (lane == 0) {
        if (mean) mean[row] = mu;
        if (rstd) rstd[row] = rs;
    }
}

rt_status kn_ln_fwd(kn_ctx *k, kn_bf16 *y, float *mean, float *rstd, const kn_bf16 *x,
                    const kn_bf16 *g, const kn_bf16 *b, size_t T, size_t h, float eps,
                    ms_error *err)
{
    if (h % 8 || !al16(y) || !al16(x) || !al16(g) || !al16(b))
        return invalid("kn_ln_fwd", "h % 8, alignment", err);
    ln_fwd_k<<<(unsigned)((T + 7) / 8), 256, 0, k->s>>>((bf16 *)y, mean, rstd, (const bf16 *)x,
                                                        (const bf16 *)g, (const bf16 *)b,
                                                        (int)T, (int)h, eps);
    return launched("ln_fwd_k", err);
}

__global__ void ln_bwd_dx_k(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *g,
                            const float *mean, const float *rstd, const bf16 *dres, int T, int h)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= T) return;
    size_t off = (size_t)row * h;
    float mu = mean[row], rs = rstd[row], c1 = 0, c2 = 0;
    float f[8], d[8], gg[8];
    for (int c = lane * 8; c < h; c += 256) {
        ld8(x + off + c, f);
        ld8(dy + off + c, d);
        ld8(g + c, gg);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float w = d[i] * gg[i];
            c1 += (f[i] - mu) * rs * w;
            c2 += w;
        }
    }
    c1 = warp_sum(c1) / h;
    c2 = warp_sum(c2) / h;
    for (int c = lane * 8; c < h; c += 256) {
        float r[8], o[8];
        ld8(x + off + c, f);
        ld8(dy + off + c, d);
        ld8(g + c, gg);
        if (dres) ld8(dres + off + c, r);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float xh = (f[i] - mu) * rs;
            o[i] = rs * (d[i] * gg[i] - c2 - xh * c1) + (dres ? r[i] : 0.0f);
        }
        st8(dx + off + c, o);
    }
}

/* Partial column sums over KN_COL_CHUNK rows: part[chunk][c] = sum a; with x (layer norm):
 * part[nchunk + chunk][c] = sum a * (x - mean) * rstd. Two columns per thread. */
__global__ void colsum_part_k(float *part, const bf16 *a, const bf16 *x, const float *mean,
                              const float *rstd, int T, int n)
{
    int c = (blockIdx.x * blockDim.x + threadIdx.x) * 2, chunk = blockIdx.y;
    if (c >= n) return;
    int r0 = chunk * KN_COL_CHUNK, r1 = min(T, r0 + KN_COL_CHUNK);
    float s0 = 0, s1 = 0, q0 = 0, q1 = 0;
    for (int r = r0; r < r1; r++) {
        float2 av = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(a + (size_t)r * n + c));
        s0 += av.x;
        s1 += av.y;
        if (x) {
            float2 xv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(x + (size_t)r * n + c));
            float mu = mean[r], rs = rstd[r];
            q0 += av.x * ((xv.x - mu) * rs);
            q1 += av.y * ((xv.y - mu) * rs);
        }
    }
    part[(size_t)chunk * n + c] = s0;
    part[(size_t)chunk * n + c + 1] = s1;
    if (x) {
        size_t o = (size_t)(gridDim.y + chunk) * n + c;
        part[o] = q0;
        part[o + 1] = q1;
    }
}

/* out[c] += sum over chunks in order (and out2 from the second half when given). */
__global__ void colsum_fin_k(float *out, float *out2, const float *part, int nchunk, int n)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    float s = 0, q = 0;
    for (int i = 0; i < nchunk; i++) s += part[(size_t)i * n + c];
    out[c] += s;
    if (out2) {
        for (int i = 0; i < nchunk; i++) q += part[(size_t)(nchunk + i) * n + c];
        out2[c] += q;
    }
}

static rt_status colsum_run(kn_ctx *k, float *out, float *out2, const bf16 *a, const bf16 *x,
                            const float *mean, const float *rstd, size_t T, size_t n, ms_error *err)
{
    if (n % 2) return invalid("kn_colsum", "n must be even", err);
    size_t nc = col_chunks(T);
    RT_TRY(scratch(k, (x ? 2 : 1) * nc * n, err));
    dim3 grid((unsigned)((n / 2 + 127) / 128), (unsigned)nc);
    colsum_part_k<<<grid, 128, 0, k->s>>>(k->scratch, a, x, mean, rstd, (int)T, (int)n);
    RT_TRY(launched("colsum_part_k", err));
    colsum_fin_k<<<(unsigned)((n + 255) / 256), 256, 0, k->s>>>(out, out2, k->scratch, (int)nc,
                                                                (int)n);
    return launched("colsum_fin_k", err);
}

rt_status kn_colsum(kn_ctx *k, float *out, const kn_bf16 *a, size_t T, size_t n, ms_error *err)
{
    return colsum_run(k, out, NULL, (const bf16 *)a, NULL, NULL, NULL, T, n, err);
}

rt_status kn_ln_bwd(kn_ctx *k, kn_bf16 *dx, float *dg, float *db, const kn_bf16 *dy,
                    const kn_bf16 *x, const kn_bf16 *g, const float *mean, const float *rstd,
                    const kn_bf16 *dres, size_t T, size_t h, ms_error *err)
{
    if (h % 8 || !al16(dx) || !al16(dy) || !al16(x) || !al16(g) || (dres && !al16(dres)))
        return invalid("kn_ln_bwd", "h % 8, alignment", err);
    /* the weight gradients read dy before dx (which may alias dres, not dy) is written */
    if (dg || db) {
        if (!dg || !db) return invalid("kn_ln_bwd", "dg and db go together", err);
        RT_TRY(colsum_run(k, db, dg, (const bf16 *)dy, (const bf16 *)x, mean, rstd, T, h, err));
    }
    ln_bwd_dx_k<<<(unsigned)((T + 7) / 8), 256, 0, k->s>>>(
        (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)g, mean, rstd,
        (const bf16 *)dres, (int)T, (int)h);
    return launched("ln_bwd_dx_k", err);
}

/* ======================= GEMM ======================= */

/* ---- GEMM algorithms chosen by measurement ----
 * cuBLAS's default choice for a GEMM is a heuristic's; cuBLASLt offers further algorithms
 * for the same operation, some of them faster on a given device and shape (on an H200, the
 * layer benchmark's GEMMs at 32K tokens in bursts: the fastest 5-12 % below the default for
 * 6 of its 12 GEMMs, 2-4 % for three more; docs/RUNTIME.md "GEMM algorithms"). As PyTorch's TunableOp does, a tuning pass
 * times the default and the candidates on the call's own operands, keeps the fastest for that
 * shape, and a file carries the choices to later runs, so that a run's GEMMs (and their bits)
 * do not depend on that run's timing. An algorithm replaces the default only when it is
 * KN_GEMM_TUNE_MARGIN (kernels.h) faster: nearer, the timing's spread decides, not the
 * algorithm. */
#define KN_GEMM_TUNE_WARM 2
#define KN_GEMM_TUNE_REPS 5
#define KN_GEMM_TUNE_CANDIDATES 16
#define KN_GEMM_ALGOS_VERSION 1

typedef struct kn_gkey {
    int ta, tb, beta1, c_fp32, bias;   /* bias: kn_gemm_bias's (bf16 C, beta 0) */
    uint64_t M, N, K, lda, ldb, ldc;
} kn_gkey;

typedef struct kn_galgo {
    kn_gkey key;
    int lt;                        /* 1: the cuBLASLt algorithm below; 0: cuBLAS's default */
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    kn_gemm_info info;
} kn_galgo;

static void ga_release(kn_galgo *g)
{
    if (g->d) cublasLtMatmulDescDestroy(g->d);
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
    if (g->lc) cublasLtMatrixLayoutDestroy(g->lc);
    g->d = NULL;
    g->la = g->lb = g->lc = NULL;
}

static void ga_free(kn_ctx *k)
{
    for (size_t i = 0; i < k->nga; i++) ga_release(&k->ga[i]);
    free(k->ga);
    k->ga = NULL;
    k->nga = k->capga = 0;
}

static int gkey_eq(const kn_gkey *a, const kn_gkey *b)
{
    return a->ta == b->ta && a->tb == b->tb && a->beta1 == b->beta1 && a->c_fp32 == b->c_fp32 &&
           a->bias == b->bias &&
           a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda &&
           a->ldb == b->ldb && a->ldc == b->ldc;
}

static kn_galgo *ga_find(kn_ctx *k, const kn_gkey *key)
{
    for (size_t i = 0; i < k->nga; i++)
        if (gkey_eq(&k->ga[i].key, key)) return &k->ga[i];
    return NULL;
}

/* A new entry for key (descriptors made), or NULL when out of host memory. */
static kn_galgo *ga_add(kn_ctx *k, const kn_gkey *key, ms_error *err)
{
    if (k->nga == k->capga) {
        size_t cap = k->capga ? 2 * k->capga : 16;
        kn_galgo *n = (kn_galgo *)realloc(k->ga, cap * sizeof *n);
        if (!n) {
            rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "realloc", "out of memory");
            return NULL;
        }
        k->ga = n;
        k->capga = cap;
    }
    kn_galgo *g = &k->ga[k->nga];
    memset(g, 0, sizeof *g);
    g->key = *key;
    g->info.chosen = -1;
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, as in kn_gemm */
    cublasOperation_t oa = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t ob = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t m = key->N, n = key->M, kk = key->K;
    cudaDataType_t ct = key->c_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    rt_status st = blas_err(cublasLtMatmulDescCreate(&g->d, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                            "cublasLtMatmulDescCreate", err);
    if (st == RT_OK)
        st = blas_err(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSA, &oa,
                                                     sizeof oa), "cublasLtMatmulDesc", err);
    if (st == RT_OK)
        st = blas_err(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSB, &ob,
                                                     sizeof ob), "cublasLtMatmulDesc", err);
    if (st == RT_OK && key->bias) {   /* + bias[column of row-major C]: a row of C^T each */
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_16BF;
        st = blas_err(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                                     sizeof ep), "cublasLtMatmulDesc", err);
        if (st == RT_OK)
            st = blas_err(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                         &bt, sizeof bt), "cublasLtMatmulDesc",
                          err);
    }
    if (st == RT_OK)
        st = blas_err(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, key->tb ? kk : m,
                                                 key->tb ? m : kk, (int64_t)key->ldb),
                      "cublasLtMatrixLayoutCreate", err);
    if (st == RT_OK)
        st = blas_err(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_16BF, key->ta ? n : kk,
                                                 key->ta ? kk : n, (int64_t)key->lda),
                      "cublasLtMatrixLayoutCreate", err);
    if (st == RT_OK)
        st = blas_err(cublasLtMatrixLayoutCreate(&g->lc, ct, m, n, (int64_t)key->ldc),
                      "cublasLtMatrixLayoutCreate", err);
    if (st != RT_OK) {
        ga_release(g);
        return NULL;
    }
    k->nga++;
    return g;
}

/* cuBLAS's default choice, and for kn_gemm_bias the separate bias pass after it. */
static rt_status gemm_default(kn_ctx *k, const kn_gkey *x, const kn_bf16 *A, const kn_bf16 *B,
                              float beta, void *C, const kn_bf16 *bias, ms_error *err)
{
    float alpha = 1.0f;
    cublasStatus_t st = cublasGemmEx(
        k->blas, x->tb ? CUBLAS_OP_T : CUBLAS_OP_N, x->ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)x->N,
        (int)x->M, (int)x->K, &alpha, B, CUDA_R_16BF, (int)x->ldb, A, CUDA_R_16BF, (int)x->lda,
        &beta, C, x->c_fp32 ? CUDA_R_32F : CUDA_R_16BF, (int)x->ldc, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
    RT_TRY(blas_err(st, "cublasGemmEx", err));
    return x->bias ? kn_bias_add(k, (kn_bf16 *)C, bias, x->M, x->N, x->ldc, err) : RT_OK;
}

static rt_status gemm_lt(kn_ctx *k, const kn_galgo *g, const cublasLtMatmulAlgo_t *algo,
                         const kn_bf16 *A, const kn_bf16 *B, float beta, void *C,
                         const kn_bf16 *bias, ms_error *err)
{
    float alpha = 1.0f;
    if (g->key.bias)
        RT_TRY(blas_err(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof bias),
                        "cublasLtMatmulDesc", err));
    return blas_err(cublasLtMatmul(k->lt, g->d, &alpha, B, g->la, A, g->lb, &beta, C, g->lc, C,
                                   g->lc, algo, k->blas_ws, KN_BLAS_WS_BYTES, k->s),
                    "cublasLtMatmul", err);
}

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of KN_GEMM_TUNE_REPS calls (after KN_GEMM_TUNE_WARM) of the default (algo NULL)
 * or of algo, on the call's operands: C is overwritten (accumulated into with beta != 0). */
static rt_status tune_time(kn_ctx *k, const kn_galgo *g, const cublasLtMatmulAlgo_t *algo,
                           const kn_bf16 *A, const kn_bf16 *B, float beta, void *C,
                           const kn_bf16 *bias, double *ms, ms_error *err)
{
    cudaEvent_t e[2 * KN_GEMM_TUNE_REPS];
    int ne = 0;
    rt_status st = RT_OK;
    for (; ne < 2 * KN_GEMM_TUNE_REPS && st == RT_OK; ne++)
        if (cudaEventCreate(&e[ne]) != cudaSuccess)
            st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaEventCreate", "events");
    for (int i = 0; i < KN_GEMM_TUNE_WARM + KN_GEMM_TUNE_REPS && st == RT_OK; i++) {
        int r = i - KN_GEMM_TUNE_WARM;
        if (r >= 0 && cudaEventRecord(e[2 * r], k->s) != cudaSuccess) break;
        st = algo ? gemm_lt(k, g, algo, A, B, beta, C, bias, err)
                  : gemm_default(k, &g->key, A, B, beta, C, bias, err);
        if (r >= 0 && st == RT_OK && cudaEventRecord(e[2 * r + 1], k->s) != cudaSuccess) break;
    }
    double t[KN_GEMM_TUNE_REPS];
    for (int r = 0; r < KN_GEMM_TUNE_REPS && st == RT_OK; r++) {
        float x = 0;
        if (cudaEventSynchronize(e[2 * r + 1]) != cudaSuccess ||
            cudaEventElapsedTime(&x, e[2 * r], e[2 * r + 1]) != cudaSuccess)
            st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaEventElapsedTime",
                         cudaGetErrorString(cudaGetLastError()));
        t[r] = x;
    }
    for (int i = 0; i < ne; i++) cudaEventDestroy(e[i]);
    if (st != RT_OK) return st;
    qsort(t, KN_GEMM_TUNE_REPS, sizeof *t, cmp_ms);
    *ms = t[KN_GEMM_TUNE_REPS / 2];
    return RT_OK;
}

/* The tuning of a shape at its first call: the default and cuBLASLt's heuristic candidates
 * timed on the operands; the entry keeps the fastest candidate where it beats the default by
 * the margin. A candidate the device rejects at launch is skipped. */
static rt_status gemm_tune(kn_ctx *k, const kn_gkey *key, const kn_bf16 *A, const kn_bf16 *B,
                           float beta, void *C, const kn_bf16 *bias, kn_galgo **out,
                           ms_error *err)
{
    kn_galgo *g = ga_add(k, key, err);
    if (!g) return RT_ERR_HOST;
    *out = g;
    RT_TRY(tune_time(k, g, NULL, A, B, beta, C, bias, &g->info.default_ms, err));
    cublasLtMatmulPreference_t pref;
    RT_TRY(blas_err(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreference", err));
    size_t ws = KN_BLAS_WS_BYTES;
    cublasLtMatmulHeuristicResult_t r[KN_GEMM_TUNE_CANDIDATES];
    int nr = 0;
    rt_status st = blas_err(cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                            "cublasLtMatmulPreference", err);
    if (st == RT_OK)
        st = blas_err(cublasLtMatmulAlgoGetHeuristic(k->lt, g->d, g->la, g->lb, g->lc, g->lc,
                                                     pref, KN_GEMM_TUNE_CANDIDATES, r, &nr),
                      "cublasLtMatmulAlgoGetHeuristic", err);
    cublasLtMatmulPreferenceDestroy(pref);
    RT_TRY(st);
    g->info.candidates = nr;
    int bi = -1;
    double best = 0;
    for (int i = 0; i < nr; i++) {
        if (r[i].state != CUBLAS_STATUS_SUCCESS) continue;
        double ms = 0;
        ms_error e2;
        ms_error_clear(&e2);
        if (tune_time(k, g, &r[i].algo, A, B, beta, C, bias, &ms, &e2) != RT_OK) {
            cudaGetLastError();   /* a rejected candidate, not the run's error */
            continue;
        }
        if (bi < 0 || ms < best) {
            bi = i;
            best = ms;
        }
    }
    g->info.best_ms = bi >= 0 ? best : g->info.default_ms;
    if (bi >= 0 && (k->tune_margin < 0 || best < g->info.default_ms * (1.0 - k->tune_margin))) {
        g->algo = r[bi].algo;
        g->lt = 1;
        g->info.chosen = bi;
    }
    return RT_OK;
}

static rt_status gemm_run(kn_ctx *k, const kn_gkey *key, const kn_bf16 *A, const kn_bf16 *B,
                          float beta, void *C, const kn_bf16 *bias, ms_error *err)
{
    kn_galgo *g = k->nga ? ga_find(k, key) : NULL;
    if (!g && k->tune) RT_TRY(gemm_tune(k, key, A, B, beta, C, bias, &g, err));
    if (g && g->lt) return gemm_lt(k, g, &g->algo, A, B, beta, C, bias, err);
    return gemm_default(k, key, A, B, beta, C, bias, err);
}

rt_status kn_gemm(kn_ctx *k, int ta, int tb, size_t M, size_t N, size_t K, const kn_bf16 *A,
                  size_t lda, const kn_bf16 *B, size_t ldb, float beta, void *C, size_t ldc,
                  int c_fp32, ms_error *err)
{
    if (!M || !N || !K) return RT_OK;
    kn_gkey key = {ta != 0, tb != 0, beta != 0.0f, c_fp32 != 0, 0, M, N, K, lda, ldb, ldc};
    return gemm_run(k, &key, A, B, beta, C, NULL, err);
}

rt_status kn_gemm_bias(kn_ctx *k, int ta, int tb, size_t M, size_t N, size_t K,
                       const kn_bf16 *A, size_t lda, const kn_bf16 *B, size_t ldb, kn_bf16 *C,
                       size_t ldc, const kn_bf16 *bias, ms_error *err)
{
    if (!M || !N || !K) return RT_OK;
    if (N % 8 || ldc % 8 || !al16(C) || !al16(bias))
        return invalid("kn_gemm_bias", "N % 8, ldc % 8, alignment", err);
    kn_gkey key = {ta != 0, tb != 0, 0, 0, 1, M, N, K, lda, ldb, ldc};
    return gemm_run(k, &key, A, B, 0.0f, C, bias, err);
}

void kn_ctx_set_gemm_tune(kn_ctx *k, int on, double margin)
{
    k->tune = on != 0;
    k->tune_margin = margin;
}

size_t kn_gemm_algos_count(const kn_ctx *k) { return k->nga; }

void kn_gemm_algo_info(const kn_ctx *k, size_t i, kn_gemm_info *out)
{
    memset(out, 0, sizeof *out);
    if (i >= k->nga) return;
    const kn_galgo *g = &k->ga[i];
    *out = g->info;   /* the measurements; the shape is the key's */
    out->ta = g->key.ta;
    out->tb = g->key.tb;
    out->c_fp32 = g->key.c_fp32;
    out->beta1 = g->key.beta1;
    out->bias = g->key.bias;
    out->M = g->key.M;
    out->N = g->key.N;
    out->K = g->key.K;
}

/* The file's validity: the same cuBLAS build and device name (an algorithm is described in
 * cuBLASLt's terms, which hold for one library version on one device). */
static rt_status gemm_env(char *dev, size_t cap, int *ver, ms_error *err)
{
    int d = 0;
    cudaDeviceProp p;
    RT_CHECK(err, cudaGetDevice(&d));
    RT_CHECK(err, cudaGetDeviceProperties(&p, d));
    snprintf(dev, cap, "%s", p.name);
    *ver = (int)cublasLtGetVersion();
    return RT_OK;
}

rt_status kn_gemm_algos_save(const kn_ctx *k, const char *path, ms_error *err)
{
    char dev[256];
    int ver = 0;
    RT_TRY(gemm_env(dev, sizeof dev, &ver, err));
    ms_out *o = NULL;
    if (ms_out_open(path, &o, err) != MS_OK) return RT_ERR_HOST;
    ms_out_printf(o, "# memsim GEMM algorithms (memsim run --tune-gemms; docs/RUNTIME.md "
                     "\"GEMM algorithms\")\n");
    ms_out_printf(o, "memsim-gemm-algos %d\ncublaslt %d\ndevice %s\n", KN_GEMM_ALGOS_VERSION,
                  ver, dev);
    ms_out_printf(o, "# gemm ta tb M N K lda ldb ldc beta!=0 c_fp32 bias default_ms best_ms "
                     "candidates chosen algo(hex, - for cuBLAS's default)\n");
    for (size_t i = 0; i < k->nga; i++) {
        const kn_galgo *g = &k->ga[i];
        const kn_gkey *x = &g->key;
        ms_out_printf(o, "gemm %d %d %llu %llu %llu %llu %llu %llu %d %d %d %.4f %.4f %d %d ",
                      x->ta, x->tb, (unsigned long long)x->M, (unsigned long long)x->N,
                      (unsigned long long)x->K, (unsigned long long)x->lda,
                      (unsigned long long)x->ldb, (unsigned long long)x->ldc, x->beta1,
                      x->c_fp32, x->bias, g->info.default_ms, g->info.best_ms, g->info.candidates,
                      g->info.chosen);
        if (!g->lt) {
            ms_out_printf(o, "-\n");
            continue;
        }
        const unsigned char *b = (const unsigned char *)&g->algo;
        for (size_t j = 0; j < sizeof g->algo; j++) ms_out_printf(o, "%02x", b[j]);
        ms_out_printf(o, "\n");
    }
    return ms_out_commit(o, err) == MS_OK ? RT_OK : RT_ERR_HOST;
}

static rt_status algos_bad(ms_error *err, const ms_lines *lr, const char *what)
{
    char msg[320];
    snprintf(msg, sizeof msg, "%s:%llu: %s", ms_lines_path(lr),
             (unsigned long long)ms_lines_lineno(lr), what);
    return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "kn_gemm_algos_load", msg);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One "gemm" line's fields after the keyword into an entry (its algorithm checked by
 * cuBLASLt against the shape). */
static rt_status algos_line(kn_ctx *k, const ms_lines *lr, char **f, int nf, ms_error *err)
{
    if (nf != 17) return algos_bad(err, lr, "a gemm line has 17 fields");
    uint64_t v[11];
    for (int i = 0; i < 11; i++)
        if (!ms_parse_u64(f[1 + i], &v[i])) return algos_bad(err, lr, "a field is not a number");
    if (v[0] > 1 || v[1] > 1 || v[8] > 1 || v[9] > 1 || v[10] > 1 || !v[2] || !v[3] || !v[4] ||
        v[2] > INT32_MAX || v[3] > INT32_MAX || v[4] > INT32_MAX ||
        (v[10] && (v[8] || v[9])))
        return algos_bad(err, lr, "ta, tb, beta, c_fp32, bias are 0 or 1 (a bias with beta 0 "
                                  "and bf16 C); M, N, K positive");
    kn_gkey key = {(int)v[0], (int)v[1], (int)v[8], (int)v[9], (int)v[10], v[2], v[3], v[4],
                   v[5], v[6], v[7]};
    if (ga_find(k, &key)) return algos_bad(err, lr, "the same GEMM twice");
    kn_galgo *g = ga_add(k, &key, err);
    if (!g) return RT_ERR_HOST;
    int64_t cand = 0, chosen = 0;
    if (!ms_parse_double(f[12], &g->info.default_ms) || !ms_parse_double(f[13], &g->info.best_ms) ||
        !ms_parse_i64(f[14], &cand) || !ms_parse_i64(f[15], &chosen) || cand < 0 ||
        cand > KN_GEMM_TUNE_CANDIDATES || chosen < -1 || chosen >= cand) {
        k->nga--;
        ga_release(g);
        return algos_bad(err, lr, "default_ms, best_ms, candidates or chosen out of range");
    }
    g->info.candidates = (int)cand;
    g->info.chosen = (int)chosen;
    const char *h = f[16];
    if (!strcmp(h, "-")) return RT_OK;
    if (strlen(h) != 2 * sizeof g->algo) {
        k->nga--;
        ga_release(g);
        return algos_bad(err, lr, "an algorithm is 128 hex digits or -");
    }
    unsigned char *b = (unsigned char *)&g->algo;
    for (size_t j = 0; j < sizeof g->algo; j++) {
        int hi = hexval(h[2 * j]), lo = hexval(h[2 * j + 1]);
        if (hi < 0 || lo < 0) {
            k->nga--;
            ga_release(g);
            return algos_bad(err, lr, "an algorithm is 128 lowercase hex digits or -");
        }
        b[j] = (unsigned char)(16 * hi + lo);
    }
    cublasLtMatmulHeuristicResult_t chk;
    if (cublasLtMatmulAlgoCheck(k->lt, g->d, g->la, g->lb, g->lc, g->lc, &g->algo, &chk) !=
            CUBLAS_STATUS_SUCCESS ||
        chk.workspaceSize > KN_BLAS_WS_BYTES) {
        k->nga--;
        ga_release(g);
        return algos_bad(err, lr, "cuBLASLt rejects the algorithm for this GEMM");
    }
    g->lt = 1;
    return RT_OK;
}

rt_status kn_gemm_algos_load(kn_ctx *k, const char *path, ms_error *err)
{
    char dev[256];
    int ver = 0;
    const size_t n0 = k->nga;   /* a file refused leaves the table as it was */
    RT_TRY(gemm_env(dev, sizeof dev, &ver, err));
    ms_lines *lr = NULL;
    if (ms_lines_open(path, &lr, err) != MS_OK) return RT_ERR_INVALID;
    rt_status st = RT_OK;
    int seen = 0;   /* header lines read: version, cublaslt, device */
    char *line = NULL;
    ms_status ls;
    while (st == RT_OK && (ls = ms_lines_next_content(lr, &line, err)) == MS_OK) {
        char want[300];
        if (seen == 0) {
            snprintf(want, sizeof want, "memsim-gemm-algos %d", KN_GEMM_ALGOS_VERSION);
            st = strcmp(line, want) ? algos_bad(err, lr, "not a memsim-gemm-algos 1 file")
                                    : RT_OK;
        } else if (seen == 1) {
            snprintf(want, sizeof want, "cublaslt %d", ver);
            st = strcmp(line, want) ? algos_bad(err, lr, "made with another cuBLASLt version: "
                                                         "tune again (--tune-gemms)")
                                    : RT_OK;
        } else if (seen == 2) {
            snprintf(want, sizeof want, "device %s", dev);
            st = strcmp(line, want) ? algos_bad(err, lr, "made on another device: tune again "
                                                         "(--tune-gemms)")
                                    : RT_OK;
        } else {
            char *f[20];
            int nf = ms_split(line, f, 18);
            st = nf < 1 || strcmp(f[0], "gemm") ? algos_bad(err, lr, "expected a gemm line")
                                                : algos_line(k, lr, f, nf, err);
        }
        seen++;
    }
    if (st == RT_OK && ls != MS_ERR_LIMIT) st = RT_ERR_INVALID;
    if (st == RT_OK && seen < 3) st = algos_bad(err, lr, "the header is incomplete");
    ms_lines_free(lr);
    while (st != RT_OK && k->nga > n0) ga_release(&k->ga[--k->nga]);
    return st;
}

/* ======================= element-wise ======================= */

__global__ void bias_add_k(bf16 *y, const bf16 *bias, size_t T, size_t n, size_t ld)
{
    size_t nv = T * (n / 8);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / (n / 8), c = (i % (n / 8)) * 8;
        float f[8], b[8];
        ld8(y + t * ld + c, f);
        ld8(bias + c, b);
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] += b[j];
        st8(y + t * ld + c, f);
    }
}

rt_status kn_bias_add(kn_ctx *k, kn_bf16 *y, const kn_bf16 *bias, size_t T, size_t n,
                      size_t ld, ms_error *err)
{
    if (n % 8 || ld % 8 || !al16(y) || !al16(bias)) return invalid("kn_bias_add", "n % 8", err);
    bias_add_k<<<grid_for(T * (n / 8), 256), 256, 0, k->s>>>((bf16 *)y, (const bf16 *)bias, T,
                                                            n, ld);
    return launched("bias_add_k", err);
}

__global__ void add_k(bf16 *out, const bf16 *a, const bf16 *b, const bf16 *bias, size_t T,
                      size_t n)
{
    size_t nv = T * (n / 8);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv;
         i += (size_t)gridDim.x * blockDim.x) {
        float x[8], y[8], z[8];
        ld8(a + i * 8, x);
        ld8(b + i * 8, y);
        if (bias) ld8(bias + (i % (n / 8)) * 8, z);
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = x[j] + y[j] + (bias ? z[j] : 0.0f);
        st8(out + i * 8, x);
    }
}

rt_status kn_add(kn_ctx *k, kn_bf16 *out, const kn_bf16 *a, const kn_bf16 *b,
                 const kn_bf16 *bias, size_t T, size_t n, ms_error *err)
{
    if (n % 8 || !al16(out) || !al16(a) || !al16(b) || (bias && !al16(bias)))
        return invalid("kn_add", "n % 8, alignment", err);
    add_k<<<grid_for(T * (n / 8), 256), 256, 0, k->s>>>((bf16 *)out, (const bf16 *)a,
                                                       (const bf16 *)b, (const bf16 *)bias, T, n);
    return launched("add_k", err);
}

#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f

/* GeLU's value and derivative (tanh form) at z, through 0.5 (1 + tanh u) = sigmoid(2 u):
 * z s and s + 2 z s (1 - s) u' with s = 1 / (1 + exp(-2 u)), u = K0 (z + K1 z^3). The same
 * function as the tanh form (the CPU reference computes that one in double) in fewer
 * instructions than tanhf's, and as exact in the negative tail, where 1 + tanh u loses its
 * digits. With the 32-bit index below, at 8192 x 16384 under Nsight Compute (H200,
 * 2026-12-04): the forward 142 M -> 96 M warp instructions, 210.8 -> 173.0 us, the backward
 * 184 M -> 133 M, 276.0 -> 220.0 us (PyTorch's tanh-form kernels: 187.6 and 236.7 us). */
__device__ __forceinline__ float gelu_sig(float z)
{
    /* the approximate reciprocal: 1 / d within 2 ulp, and 0 where d is past 2^126 or
     * infinite, which is sigmoid's limit there */
    return __fdividef(1.0f, 1.0f + __expf(-2.0f * GELU_K0 * (z + GELU_K1 * z * z * z)));
}

__device__ __forceinline__ float gelu_at(float z) { return z * gelu_sig(z); }

__device__ __forceinline__ float gelu_grad_at(float z)
{
    const float s = gelu_sig(z);
    return s + 2.0f * GELU_K0 * z * s * (1.0f - s) * (1.0f + 3.0f * GELU_K1 * z * z);
}

/* The GeLU kernels' vector index: 32-bit where the tensor allows (fewer instructions a
 * vector than 64-bit arithmetic), else 64-bit. */
template <typename I>
__global__ void gelu_fwd_k(bf16 *y, const bf16 *x, const bf16 *bias, I T, I n)
{
    I nv = T * (n / 8);
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nv; i += (I)gridDim.x * blockDim.x) {
        float f[8], b[8];
        ld8(x + i * 8, f);
        if (bias) ld8(bias + (i % (n / 8)) * 8, b);
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = gelu_at(f[j] + (bias ? b[j] : 0.0f));
        st8(y + i * 8, f);
    }
}

template <typename I>
__global__ void gelu_bwd_k(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *bias, I T, I n)
{
    I nv = T * (n / 8);
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nv; i += (I)gridDim.x * blockDim.x) {
        float f[8], d[8], b[8];
        ld8(x + i * 8, f);
        ld8(dy + i * 8, d);
        if (bias) ld8(bias + (i % (n / 8)) * 8, b);
#pragma unroll
        for (int j = 0; j < 8; j++) d[j] *= gelu_grad_at(f[j] + (bias ? b[j] : 0.0f));
        st8(dx + i * 8, d);
    }
}

rt_status kn_gelu_fwd(kn_ctx *k, kn_bf16 *y, const kn_bf16 *x, const kn_bf16 *bias, size_t T,
                      size_t n, ms_error *err)
{
    if (n % 8 || !al16(y) || !al16(x) || (bias && !al16(bias)))
        return invalid("kn_gelu_fwd", "n % 8, alignment", err);
    if (T * n < ((size_t)1 << 32))   /* i * 8 and i plus the stride within 32 bits */
        gelu_fwd_k<uint32_t><<<grid_for(T * (n / 8), 256), 256, 0, k->s>>>(
            (bf16 *)y, (const bf16 *)x, (const bf16 *)bias, (uint32_t)T, (uint32_t)n);
    else
        gelu_fwd_k<size_t><<<grid_for(T * (n / 8), 256), 256, 0, k->s>>>(
            (bf16 *)y, (const bf16 *)x, (const bf16 *)bias, T, n);
    return launched("gelu_fwd_k", err);
}

rt_status kn_gelu_bwd(kn_ctx *k, kn_bf16 *dx, const kn_bf16 *dy, const kn_bf16 *x,
                      const kn_bf16 *bias, size_t T, size_t n, ms_error *err)
{
    if (n % 8 || !al16(dx) || !al16(dy) || !al16(x) || (bias && !al16(bias)))
        return invalid("kn_gelu_bwd", "n % 8, alignment", err);
    if (T * n < ((size_t)1 << 32))
        gelu_bwd_k<uint32_t><<<grid_for(T * (n / 8), 256), 256, 0, k->s>>>(
            (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)bias, (uint32_t)T,
            (uint32_t)n);
    else
        gelu_bwd_k<size_t><<<grid_for(T * (n / 8), 256), 256, 0, k->s>>>(
            (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)bias, T, n);
    return launched("gelu_bwd_k", err);
}

/* ======================= cross-entropy ======================= */

/* Online (max, sum of exp) pairs, merged. */
__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2)
{
    float M = fmaxf(m, m2);
    if (M == -INFINITY) return;
    s = s * __expf(m - M) + s2 * __expf(m2 - M);
    m = M;
}

/* One block of 256 per row, vocabulary tiled over the threads, one pass. */
__global__ void ce_fwd_k(float *loss, float *lse, const bf16 *logits, size_t ldl,
                         const int32_t *labels, int V)
{
    __shared__ float sm[8], ss[8];
    int row = blockIdx.x, tid = threadIdx.x;
    const bf16 *z = logits + (size_t)row * ldl;
    float m = -INFINITY, s = 0;
    for (int v = tid; v < V; v += blockDim.x) {
        float x = __bfloat162float(z[v]);
        if (x > m) {
            s = s * __expf(m - x) + 1.0f;
            m = x;
        } else {
            s += __expf(x - m);
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    if ((tid & 31) == 0) {
        sm[tid / 32] = m;
        ss[tid / 32] = s;
    }
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < (int)blockDim.x / 32; w++) ms_merge(m, s, sm[w], ss[w]);
        float l = m + logf(s);
        if (lse) lse[row] = l;
        int lab = labels[row];
        loss[row] = lab < 0 ? 0.0f : l - __bfloat162float(z[lab]);
    }
}

rt_status kn_ce_fwd(kn_ctx *k, float *loss, float *lse, const kn_bf16 *logits, size_t ldl,
                    const int32_t *labels, size_t T, size_t V, ms_error *err)
{
    if (!V || ldl < V) return invalid("kn_ce_fwd", "ldl < V", err);
    ce_fwd_k<<<(unsigned)T, 256, 0, k->s>>>(loss, lse, (const bf16 *)logits, ldl, labels, (int)V);
    return launched("ce_fwd_k", err);
}

__global__ void ce_bwd_k(bf16 *dlogits, const bf16 *logits, size_t ldl, const float *lse,
                         const int32_t *labels, int V, float scale)
{
    int row = blockIdx.x;
    int lab = labels[row];
    float l = lse[row];
    const bf16 *z = logits + (size_t)row * ldl;
    bf16 *d = dlogits + (size_t)row * ldl;
    for (int v = threadIdx.x; v < (int)ldl; v += blockDim.x) {
        float g = 0;
        if (lab >= 0 && v < V) g = (__expf(__bfloat162float(z[v]) - l) - (v == lab ? 1.0f : 0.0f)) * scale;
        d[v] = __float2bfloat16(g);
    }
}

rt_status kn_ce_bwd(kn_ctx *k, kn_bf16 *dlogits, const kn_bf16 *logits, size_t ldl,
                    const float *lse, const int32_t *labels, size_t T, size_t V, float scale,
                    ms_error *err)
{
    if (!V || ldl < V) return invalid("kn_ce_bwd", "ldl < V", err);
    ce_bwd_k<<<(unsigned)T, 256, 0, k->s>>>((bf16 *)dlogits, (const bf16 *)logits, ldl, lse,
                                            labels, (int)V, scale);
    return launched("ce_bwd_k", err);
}

__global__ void sum_k(float *out, const float *x, size_t n)
{
    __shared__ float sh[1024];
    float s = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = sh[0];
}

rt_status kn_sum(kn_ctx *k, float *out, const float *x, size_t n, ms_error *err)
{
    sum_k<<<1, 1024, 0, k->s>>>(out, x, n);
    return launched("sum_k", err);
}

/* ======================= AdamW ======================= */

void kn_adamw_default(kn_adamw_cfg *c)
{
    c->lr = 3e-4f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->step = 1;
    c->grad_scale = 1.0f;
    c->flush_denormals = 1;
}

/* The update of one element; shared by the kernel and the host loop (same float math). */
__host__ __device__ __forceinline__ float adamw_one(float p, float &m, float &v, float g,
                                                    float lr, float b1, float b2, float eps,
                                                    float wd, float bc1, float bc2)
{
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    float mh = m / bc1, vh = v / bc2;
    return p - lr * (mh / (sqrtf(vh) + eps) + wd * p);
}

__global__ void adamw_k(bf16 *param, float *master, float *m, float *v, const float *grad,
                        size_t n, float lr, float b1, float b2, float eps, float wd, float bc1,
                        float bc2, float gs)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float mi = m[i], vi = v[i];
        float p = adamw_one(master[i], mi, vi, grad[i] * gs, lr, b1, b2, eps, wd, bc1, bc2);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        if (param) param[i] = __float2bfloat16(p);
    }
}

static void bias_corr(const kn_adamw_cfg *c, float *bc1, float *bc2)
{
    *bc1 = (float)(1.0 - pow((double)c->beta1, (double)c->step));
    *bc2 = (float)(1.0 - pow((double)c->beta2, (double)c->step));
}

rt_status kn_adamw(kn_ctx *k, kn_bf16 *param, float *master, float *m, float *v,
                   const float *grad, size_t n, const kn_adamw_cfg *c, ms_error *err)
{
    if (c->step < 1) return invalid("kn_adamw", "step must be >= 1", err);
    float bc1, bc2;
    bias_corr(c, &bc1, &bc2);
    adamw_k<<<grid_for(n, 256), 256, 0, k->s>>>((bf16 *)param, master, m, v, grad, n, c->lr,
                                                c->beta1, c->beta2, c->eps, c->weight_decay,
                                                bc1, bc2, c->grad_scale);
    return launched("adamw_k", err);
}

/* float -> bf16, round to nearest even, NaN -> 0x7fff: the bits of CUDA's __float2bfloat16
 * and of the GPU's cvt.rn.bf16.f32, without a branch on the rounding. CUDA's host version
 * branches on the discarded half, which mispredicts about every other element on a trained
 * model's values: measured on an x86 host, the host step ran 2.5x slower on random values
 * than on patterned ones (51e6 vs 126e6 parameters/s per thread) and 2.8x slower in the
 * offload runs on the H200 host than memsim probe measured; with this, the same speed. */
static inline kn_bf16 host_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? (kn_bf16)0x7fffu : (kn_bf16)r;
}

void kn_adamw_host(kn_bf16 *param, float *master, float *m, float *v, const float *grad,
                   size_t n, const kn_adamw_cfg *c)
{
    float bc1, bc2;
    bias_corr(c, &bc1, &bc2);
#if HOST_MXCSR
    unsigned int csr = _mm_getcsr();
    if (c->flush_denormals) _mm_setcsr(csr | MXCSR_FTZ | MXCSR_DAZ);
#endif
    for (size_t i = 0; i < n; i++) {
        float p = adamw_one(master[i], m[i], v[i], grad[i] * c->grad_scale, c->lr, c->beta1,
                            c->beta2, c->eps, c->weight_decay, bc1, bc2);
        master[i] = p;
        if (param) param[i] = host_f2bf(p);
    }
#if HOST_MXCSR
    _mm_setcsr(csr); /* the thread's own mode back: the pool's threads serve other loops */
#endif
}

typedef struct adamw_job {
    kn_bf16 *param;
    float *master, *m, *v;
    const float *grad;
    const kn_adamw_cfg *c;
} adamw_job;

static void adamw_range(void *ctx, size_t lo, size_t hi)
{
    const adamw_job *j = (const adamw_job *)ctx;
    kn_adamw_host(j->param ? j->param + lo : NULL, j->master + lo, j->m + lo, j->v + lo,
                  j->grad + lo, hi - lo, j->c);
}

/* 64 Ki elements per range at least: below that a thread's wake-up costs more than it does. */
#define HOST_GRAIN 65536

void kn_adamw_host_pool(rt_pool *pool, kn_bf16 *param, float *master, float *m, float *v,
                        const float *grad, size_t n, const kn_adamw_cfg *c)
{
    adamw_job j = {param, master, m, v, grad, c};
    rt_pool_for(pool, n, HOST_GRAIN, adamw_range, &j);
}

static void zero_range(void *ctx, size_t lo, size_t hi)
{
    memset((float *)ctx + lo, 0, (hi - lo) * sizeof(float));
}

void kn_zero_host_pool(rt_pool *pool, float *x, size_t n)
{
    rt_pool_for(pool, n, HOST_GRAIN, zero_range, x);
}

/* ======================= fills ======================= */

__device__ __forceinline__ float uniform_at(uint64_t seed, uint64_t i)
{
    /* the same numbers as kref_uniform (runtime/kernels_ref.c) */
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_uniform_k(bf16 *x, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(uniform_at(seed, i) * scale);
}

__global__ void fill_f32_k(float *x, size_t n, float value)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = value;
}

__global__ void f32_to_bf16_k(bf16 *d, const float *s, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __float2bfloat16(s[i]);
}

__global__ void fill_bf16_k(bf16 *x, size_t n, float value)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(value);
}

__global__ void bf16_to_f32_k(float *d, const bf16 *s, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __bfloat162float(s[i]);
}

rt_status kn_fill_bf16(kn_ctx *k, kn_bf16 *x, size_t n, float value, ms_error *err)
{
    fill_bf16_k<<<grid_for(n, 256), 256, 0, k->s>>>((bf16 *)x, n, value);
    return launched("fill_bf16_k", err);
}

rt_status kn_bf16_to_f32(kn_ctx *k, float *dst, const kn_bf16 *src, size_t n, ms_error *err)
{
    bf16_to_f32_k<<<grid_for(n, 256), 256, 0, k->s>>>(dst, (const bf16 *)src, n);
    return launched("bf16_to_f32_k", err);
}

rt_status kn_fill_uniform(kn_ctx *k, kn_bf16 *x, size_t n, uint64_t seed, float scale,
                          ms_error *err)
{
    fill_uniform_k<<<grid_for(n, 256), 256, 0, k->s>>>((bf16 *)x, n, seed, scale);
    return launched("fill_uniform_k", err);
}

rt_status kn_fill_f32(kn_ctx *k, float *x, size_t n, float value, ms_error *err)
{
    fill_f32_k<<<grid_for(n, 256), 256, 0, k->s>>>(x, n, value);
    return launched("fill_f32_k", err);
}

rt_status kn_f32_to_bf16(kn_ctx *k, kn_bf16 *dst, const float *src, size_t n, ms_error *err)
{
    f32_to_bf16_k<<<grid_for(n, 256), 256, 0, k->s>>>((bf16 *)dst, src, n);
    return launched("f32_to_bf16_k", err);
}

static rt_status attn_check(const char *what, const void *const *p, int np, size_t ld_qkv,
                            size_t ld_o, size_t S, size_t D, ms_error *err)
{
    if (D != 64 && D != 128) return invalid(what, "head dim must be 64 or 128", err);
    if (!S || S % 128) return invalid(what, "sequence length must be a multiple of 128", err);
    if (ld_qkv % 8 || ld_o % 8) return invalid(what, "row strides must be multiples of 8", err);
    for (int i = 0; i < np; i++)
        if (!p[i] || !al16(p[i])) return invalid(what, "tensors must be 16-byte aligned", err);
    return RT_OK;
}

rt_status kn_attn_fwd(kn_ctx *k, kn_bf16 *o, float *lse, const kn_bf16 *q, const kn_bf16 *kk,
                      const kn_bf16 *v, size_t ld_qkv, size_t ld_o, size_t B, size_t H,
                      size_t S, size_t D, ms_error *err)
{
    const void *p[5] = {o, lse, q, kk, v};
    RT_TRY(attn_check("kn_attn_fwd", p, 5, ld_qkv, ld_o, S, D, err));
    if (k->attn != KN_ATTN_MMA)
        return attn90_fwd(k->a90_encode, k->s, attn90_flags(k), o, lse, q, kk, v, ld_qkv, ld_o, B,
                          H, S, D, err);
    return attn80_fwd(k->s, o, lse, q, kk, v, ld_qkv, ld_o, B, H, S, D, err);
}

rt_status kn_attn_bwd(kn_ctx *k, kn_bf16 *dq, kn_bf16 *dk, kn_bf16 *dv, const kn_bf16 *dout,
                      const kn_bf16 *q, const kn_bf16 *kk, const kn_bf16 *v, const kn_bf16 *o,
                      const float *lse, size_t ld_qkv, size_t ld_o, size_t B, size_t H,
                      size_t S, size_t D, ms_error *err)
{
    const void *p[9] = {dq, dk, dv, dout, q, kk, v, o, lse};
    RT_TRY(attn_check("kn_attn_bwd", p, 9, ld_qkv, ld_o, S, D, err));
    size_t rows = B * S * H;
    RT_TRY(scratch(k, attn_scratch_floats(k, B, H, S, D), err));
    float *dvec = k->scratch;
    RT_TRY(attn80_dvec(k->s, dvec, dout, o, ld_o, B, H, S, D, err));
    if (k->attn != KN_ATTN_MMA)
        return attn90_bwd(k->a90_encode, k->s, attn90_bwd_flags(k, S, D), dq, dk, dv, dout, q,
                          kk, v, lse, dvec, k->scratch + (rows + 63) / 64 * 64,
                          attn90_chunk(k, S, D), ld_qkv, ld_o, B, H, S, D, err);
    return attn80_bwd(k->s, dq, dk, dv, dout, q, kk, v, lse, dvec, ld_qkv, ld_o, B, H, S, D, err);
}

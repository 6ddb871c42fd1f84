/* gemm_algos.cu — the layer benchmark's GEMMs (runtime/model_rt.c's layer program, the shapes
 * runtime/kernels.cu's kn_gemm hands cuBLAS) timed with cuBLAS's default choice, as the
 * runtime runs them, beside every algorithm cuBLASLt's heuristic offers for the same
 * operation: whether choosing among them would make a GEMM of the layer faster. A
 * measurement tool of experiments/layerbench (README.md); the runtime does not use it.
 *
 * build (on the GPU machine): nvcc -O2 -arch=sm_90 -o gemm_algos gemm_algos.cu -lcublasLt -lcublas
 * usage: gemm_algos [TOKENS [HIDDEN [FFN [CANDIDATES]]]]   (default 32768 4096 16384 16)
 * Prints one line per GEMM: the default's median ms, the fastest candidate's, the heuristic's
 * first candidate's, their ratios to the default and the fastest candidate's tile and stages.
 * Medians of 9 timed calls after 3, CUDA events around each call. Exit status: 0 done, 1 a
 * CUDA or cuBLAS error, 2 usage. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                 \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "gemm_algos: %s: %s\n", #x, cudaGetErrorString(e_));              \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define CB(x)                                                                                 \
    do {                                                                                      \
        int s_ = (int)(x);                                                                    \
        if (s_ != 0) {                                                                        \
            fprintf(stderr, "gemm_algos: %s: status %d\n", #x, s_);                           \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* One GEMM of the layer in kn_gemm's row-major terms: C = op(A) op(B), M x N, inner K. */
typedef struct gemm {
    const char *name;
    int ta, tb;
    size_t M, N, K, lda, ldb, ldc;
    float beta;
    int c_fp32;
} gemm;

#define WS_BYTES ((size_t)32 << 20)   /* the runtime's cuBLAS workspace (KN_BLAS_WS_BYTES) */
#define WARM 3
#define REPS 9

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of REPS calls of fn after WARM. */
template <typename F> static float timed(F fn, cudaStream_t s)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float t[REPS];
    for (int i = 0; i < WARM; i++) fn();
    for (int i = 0; i < REPS; i++) {
        CK(cudaEventRecord(a, s));
        fn();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[i], a, b));
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    qsort(t, REPS, sizeof *t, cmpf);
    return t[REPS / 2];
}

int main(int argc, char **argv)
{
    if (argc > 5 || (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: gemm_algos [TOKENS [HIDDEN [FFN [CANDIDATES]]]]\n");
        return 2;
    }
    size_t T = argc > 1 ? strtoull(argv[1], 0, 10) : 32768;
    size_t h = argc > 2 ? strtoull(argv[2], 0, 10) : 4096;
    size_t f = argc > 3 ? strtoull(argv[3], 0, 10) : 16384;
    int cand = argc > 4 ? atoi(argv[4]) : 16;
    if (!T || !h || !f || cand < 1 || cand > 64) {
        fprintf(stderr, "gemm_algos: TOKENS, HIDDEN, FFN must be positive, CANDIDATES 1-64\n");
        return 2;
    }
    const gemm G[] = {
        {"qkv", 0, 0, T, 3 * h, h, h, 3 * h, 3 * h, 0, 0},
        {"proj", 0, 0, T, h, h, h, h, h, 0, 0},
        {"fc1", 0, 0, T, f, h, h, f, f, 0, 0},
        {"fc2", 0, 0, T, h, f, f, h, h, 0, 0},
        {"fc2.bwd dX", 0, 1, T, f, h, h, h, f, 0, 0},
        {"fc2.bwd dW", 1, 0, f, h, T, f, h, h, 1, 1},
        {"fc1.bwd dX", 0, 1, T, h, f, f, f, h, 0, 0},
        {"fc1.bwd dW", 1, 0, h, f, T, h, f, f, 1, 1},
        {"proj.bwd dX", 0, 1, T, h, h, h, h, h, 0, 0},
        {"proj.bwd dW", 1, 0, h, h, T, h, h, h, 1, 1},
        {"qkv.bwd dX", 0, 1, T, h, 3 * h, 3 * h, 3 * h, h, 0, 0},
        {"qkv.bwd dW", 1, 0, h, 3 * h, T, h, 3 * h, 3 * h, 1, 1},
    };
    const int NG = (int)(sizeof G / sizeof G[0]);
    size_t maxab = 0, maxc = 0;
    for (int g = 0; g < NG; g++) {
        size_t a = (G[g].ta ? G[g].K : G[g].M) * G[g].lda, b = (G[g].tb ? G[g].N : G[g].K) * G[g].ldb;
        size_t c = G[g].M * G[g].ldc * (G[g].c_fp32 ? 4 : 2);
        if (a > maxab) maxab = a;
        if (b > maxab) maxab = b;
        if (c > maxc) maxc = c;
    }
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *A, *B, *C, *ws;
    CK(cudaMalloc(&A, maxab * 2));
    CK(cudaMalloc(&B, maxab * 2));
    CK(cudaMalloc(&C, maxc));
    CK(cudaMalloc(&ws, WS_BYTES));
    CK(cudaMemset(A, 0x3c, maxab * 2));   /* bf16 1.0-ish bit patterns: finite products */
    CK(cudaMemset(B, 0x3c, maxab * 2));
    CK(cudaMemset(C, 0, maxc));
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    CB(cublasCreate(&blas));
    CB(cublasSetStream(blas, s));
    CB(cublasSetWorkspace(blas, ws, WS_BYTES));
    CB(cublasLtCreate(&lt));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int ver = 0;
    CB(cublasGetVersion(blas, &ver));
    printf("device: %s; cuBLAS %d; tokens %zu, hidden %zu, ffn %zu; %d candidates; medians of "
           "%d calls after %d\n", p.name, ver, T, h, f, cand, REPS, WARM);
    printf("%-12s %6s %6s %6s %2s %5s | %9s %9s %9s | %6s %6s | %s\n", "gemm", "M", "N", "K",
           "C", "beta", "default", "best", "first", "best/d", "first/d", "best tile, stages");
    for (int g = 0; g < NG; g++) {
        const gemm *x = &G[g];
        float alpha = 1.0f, beta = x->beta;
        cudaDataType_t ct = x->c_fp32 ? CUDA_R_32F : CUDA_R_16BF;
        /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T (kn_gemm) */
        cublasOperation_t oa = x->tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = x->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        int m = (int)x->N, n = (int)x->M, k = (int)x->K;
        float td = timed([&] {
            CB(cublasGemmEx(blas, oa, ob, m, n, k, &alpha, B, CUDA_R_16BF, (int)x->ldb, A,
                            CUDA_R_16BF, (int)x->lda, &beta, C, ct, (int)x->ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }, s);
        cublasLtMatmulDesc_t d;
        CB(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CB(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
        CB(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
        cublasLtMatrixLayout_t la, lb, lc;
        CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, x->tb ? k : m, x->tb ? m : k, x->ldb));
        CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, x->ta ? n : k, x->ta ? k : n, x->lda));
        CB(cublasLtMatrixLayoutCreate(&lc, ct, m, n, x->ldc));
        cublasLtMatmulPreference_t pref;
        CB(cublasLtMatmulPreferenceCreate(&pref));
        size_t wsb = WS_BYTES;
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &wsb, sizeof wsb));
        cublasLtMatmulHeuristicResult_t r[64];
        int nr = 0;
        CB(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, cand, r, &nr));
        float best = 1e30f, first = 0;
        int bi = -1;
        for (int i = 0; i < nr; i++) {
            float t = timed([&] {
                CB(cublasLtMatmul(lt, d, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &r[i].algo,
                                  ws, WS_BYTES, s));
            }, s);
            if (i == 0) first = t;
            if (t < best) best = t, bi = i;
        }
        char tile[64] = "-";
        if (bi >= 0) {
            int tid = 0, sid = 0;
            size_t w = 0;
            cublasLtMatmulAlgoConfigGetAttribute(&r[bi].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tid,
                                                 sizeof tid, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&r[bi].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                 &sid, sizeof sid, &w);
            snprintf(tile, sizeof tile, "candidate %d of %d, tile id %d, stages id %d", bi, nr,
                     tid, sid);
        }
        printf("%-12s %6zu %6zu %6zu %2s %5.0f | %9.3f %9.3f %9.3f | %6.3f %6.3f | %s\n",
               x->name, x->M, x->N, x->K, x->c_fp32 ? "32" : "16", beta, td, nr ? best : 0.0f,
               first, nr ? best / td : 0.0f, nr ? first / td : 0.0f, tile);
        fflush(stdout);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(d);
    }
    cublasLtDestroy(lt);
    cublasDestroy(blas);
    return 0;
}

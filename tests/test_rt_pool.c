/* test_rt_pool.c — the runtime's host thread pool (runtime/rt_pool.h) and the host AdamW
 * step split over it (kn_adamw_host_pool, kn_zero_host_pool in runtime/kernels.h): every
 * index of a loop is handled exactly once for any thread count, grain and length, many loops
 * in a row (a lost wake-up or a late worker shows as a missed or doubled index), and the
 * split AdamW gives the bits of the serial one. Needs no GPU (host code only). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "runtime/kernels.h"
#include "runtime/kernels_ref.h"
#include "runtime/rt_pool.h"
#include "tests/tap.h"

typedef struct counts {
    unsigned char *hit;
    size_t calls_lo_ge_hi; /* ranges handed out empty: must be none */
} counts;

static void mark(void *ctx, size_t lo, size_t hi)
{
    counts *c = (counts *)ctx;
    if (lo >= hi) c->calls_lo_ge_hi++;
    for (size_t i = lo; i < hi; i++) c->hit[i]++;
}

/* Every index once, for lengths around the grain and the thread count. */
static void test_cover(int threads)
{
    ms_error err;
    ms_error_clear(&err);
    rt_pool *p;
    if (rt_pool_new(threads, &p, &err) != RT_OK) {
        TAP_OK(0, "pool of %d threads starts", threads);
        return;
    }
    static const size_t lens[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000, 4099, 100003};
    int bad = 0;
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++)
        for (size_t grain = 1; grain <= 64; grain *= 8) {
            counts c = {calloc(lens[k] + 1, 1), 0};
            rt_pool_for(p, lens[k], grain, mark, &c);
            for (size_t i = 0; i < lens[k]; i++) bad += c.hit[i] != 1;
            bad += c.hit[lens[k]] != 0 || c.calls_lo_ge_hi != 0;
            free(c.hit);
        }
    TAP_OK(bad == 0, "threads %d (%d running): every index handled once over 12 lengths x 3 "
           "grains (%d wrong)", threads, rt_pool_threads(p), bad);
    rt_pool_free(p);
}

/* Many short loops back to back: the generation hand-off never loses or repeats a range. */
static void test_many_loops(void)
{
    ms_error err;
    ms_error_clear(&err);
    rt_pool *p;
    if (rt_pool_new(5, &p, &err) != RT_OK) {
        TAP_OK(0, "pool of 5 threads starts");
        return;
    }
    enum { N = 257, LOOPS = 2000 };
    unsigned char hit[N];
    int bad = 0;
    for (int l = 0; l < LOOPS; l++) {
        memset(hit, 0, sizeof hit);
        counts c = {hit, 0};
        rt_pool_for(p, N, 1, mark, &c);
        for (int i = 0; i < N; i++) bad += hit[i] != 1;
    }
    TAP_OK(bad == 0, "%d loops of %d items on 5 threads: every index once each time (%d wrong)",
           LOOPS, N, bad);
    rt_pool_free(p);
}

static void fill(size_t n, kn_bf16 *pb, float *master, float *m, float *v, float *g)
{
    for (size_t i = 0; i < n; i++) {
        pb[i] = 0;
        master[i] = sinf((float)i * 0.37f);
        m[i] = 0.01f * cosf((float)i);
        v[i] = 1e-4f * (float)(i % 11);
        g[i] = 0.1f * sinf((float)i * 1.3f);
    }
}

/* The split step writes the same bits as the serial one (parameters, master, moments) and
 * zeroes the gradient. */
static void test_adamw_bits(void)
{
    ms_error err;
    ms_error_clear(&err);
    const size_t n = 300007; /* several 64 Ki ranges and an odd tail */
    size_t fb = n * sizeof(float);
    kn_bf16 *p1 = malloc(n * 2), *p2 = malloc(n * 2);
    float *a1 = malloc(4 * fb), *a2 = malloc(4 * fb);
    rt_pool *pool;
    if (!p1 || !p2 || !a1 || !a2 || rt_pool_new(4, &pool, &err) != RT_OK) {
        TAP_OK(0, "AdamW test set-up");
        return;
    }
    fill(n, p1, a1, a1 + n, a1 + 2 * n, a1 + 3 * n);
    fill(n, p2, a2, a2 + n, a2 + 2 * n, a2 + 3 * n);
    kn_adamw_cfg c;
    kn_adamw_default(&c);
    c.step = 3;
    kn_adamw_host(p1, a1, a1 + n, a1 + 2 * n, a1 + 3 * n, n, &c);
    memset(a1 + 3 * n, 0, fb);
    kn_adamw_host_pool(pool, p2, a2, a2 + n, a2 + 2 * n, a2 + 3 * n, n, &c);
    kn_zero_host_pool(pool, a2 + 3 * n, n);
    TAP_OK(!memcmp(p1, p2, n * 2) && !memcmp(a1, a2, 4 * fb),
           "AdamW on 4 threads: parameters, master, moments bitwise equal to the serial step, "
           "gradient zeroed");
    int moved = 0;
    for (size_t i = 0; i < n && !moved; i++) moved = p2[i] != 0;
    TAP_OK(moved, "the step wrote the bf16 parameters");
    rt_pool_free(pool);
    free(p1);
    free(p2);
    free(a1);
    free(a2);
}

/* flush_denormals: a squared gradient of 1e-20 is subnormal (5e-42 after the 0.05 factor):
 * kept, the second moment holds it; flushed, it reads 0; either way the thread's
 * floating-point mode is what it was before the step. */
static void test_denormals(void)
{
    enum { N = 1000 };
    static float master[2][N], m[2][N], v[2][N], g[N];
    for (size_t i = 0; i < N; i++) {
        g[i] = 1e-20f;
        master[0][i] = master[1][i] = 1.0f;
    }
    kn_adamw_cfg c;
    kn_adamw_default(&c);
    TAP_OK(c.flush_denormals == 1, "the host step flushes subnormals by default");
#if defined(__x86_64__) || defined(__SSE2__)
    unsigned int csr = _mm_getcsr();
#endif
    kn_adamw_host(NULL, master[0], m[0], v[0], g, N, &c);
#if defined(__x86_64__) || defined(__SSE2__)
    TAP_OK(_mm_getcsr() == csr, "the thread's MXCSR is restored after a flushing step");
#endif
    c.flush_denormals = 0;
    kn_adamw_host(NULL, master[1], m[1], v[1], g, N, &c);
    int flushed = 1, kept = 1;
    for (size_t i = 0; i < N; i++) {
        flushed &= v[0][i] == 0.0f;
        kept &= v[1][i] > 0.0f && v[1][i] < 1.17549435e-38f;
    }
#if defined(__x86_64__) || defined(__SSE2__)
    TAP_OK(flushed, "flush: a subnormal second moment reads 0");
#else
    (void)flushed; /* no MXCSR: the step keeps subnormals (kernels.cu) */
#endif
    TAP_OK(kept, "keep: the second moment holds the subnormal 0.05 * g^2");
}

/* The host step's bf16 copy is round-to-nearest-even of the fp32 master, as the GPU's
 * conversion: checked on values with every kind of discarded half (below, at and above the
 * tie, with an even and an odd kept bit), overflow to infinity, and NaN (0x7fff, CUDA's). */
static void test_bf16_rounding(void)
{
    enum { N = 4096 };
    static float master[N], m[N], v[N], g[N];
    static kn_bf16 p[N];
    for (size_t i = 0; i < N; i++) {
        uint32_t hi = 0x3f80u + (uint32_t)(i % 64), lo;
        switch (i % 8) {
        case 0: lo = 0x7fffu; break;
        case 1: case 6: lo = 0x8000u; break;    /* ties: an odd and an even kept bit */
        case 2: lo = 0x8001u; break;
        case 3: lo = (uint32_t)(i * 2654435761u) & 0xffffu; break;
        default: lo = (uint32_t)((i * 40503u) ^ (i >> 3)) & 0xffffu; break;
        }
        uint32_t u = hi << 16 | lo;
        if (i % 2) u |= 0x80000000u;
        memcpy(&master[i], &u, 4);
    }
    uint32_t big = 0x7f7fffffu, nan = 0xffc00001u; /* FLT_MAX rounds up to infinity */
    memcpy(&master[N - 2], &big, 4);
    memcpy(&master[N - 1], &nan, 4);
    float before[N];
    memcpy(before, master, sizeof before);
    kn_adamw_cfg c;
    kn_adamw_default(&c);
    c.lr = 0.0f; /* the master stays as it is: the bf16 copy is its rounding */
    kn_adamw_host(p, master, m, v, g, N, &c);
    int same = !memcmp(before, master, (N - 1) * sizeof(float)), ok = 1;
    for (size_t i = 0; i + 1 < N; i++) ok &= p[i] == kref_f2bf(before[i]);
    TAP_OK(same && ok, "bf16 copy: round to nearest even of the master (ties, overflow)");
    TAP_OK(p[N - 2] == 0x7f80u && p[N - 1] == 0x7fffu, "bf16 copy: FLT_MAX -> inf, NaN -> 0x7fff");
}

int main(void)
{
    ms_error err;
    ms_error_clear(&err);
    test_cover(1);
    test_cover(2);
    test_cover(3);
    test_cover(8);
    test_cover(0);
    test_many_loops();
    test_adamw_bits();
    test_denormals();
    test_bf16_rounding();
    rt_pool *p = NULL;
    TAP_OK(rt_pool_new(-1, &p, &err) == RT_ERR_INVALID && p == NULL,
           "a negative thread count is refused");
    return tap_done();
}

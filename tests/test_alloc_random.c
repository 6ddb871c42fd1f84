/* test_alloc_random.c — randomized differential test of every registered allocator
 * (planners/alloc_*.c) over the simulated backend. A seeded random alloc/free sequence
 * (sizes log-uniform in 512 B .. 2 GiB, lifetimes mostly short, a few tensors alive for the
 * whole run, 10% on a second stream) built from one iteration pattern repeated many times
 * is replayed through each allocator; the invariant check runs after every call (or every
 * STRIDE calls), live address ranges never overlap, the requested-bytes statistic matches a
 * shadow count, all allocators see the same peak of requested bytes, and after freeing
 * everything and empty_cache no handle, mapping, reservation or segment is left. The static
 * arena gets its plan from alloc_static_plan_greedy (every tenth tensor left unplanned, so
 * its fallback is exercised too).
 *
 *   test_alloc_random [OPS [SEED [STRIDE]]]   OPS per allocator (default 20000), STRIDE
 *                                             between invariant checks (1 = every call)
 *   test_alloc_random --bench [EVENTS]        replay throughput without checks
 * Run by `make check` with the defaults. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/alloc.h"
#include "memory/alloc_static.h"
#include "memory/alloc_static_plan.h"
#include "memory/alloc_stitch.h"
#include "sim/simbackend.h"
#include "tests/tap.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define CAPACITY (80 * GiB)   /* roomy: no OOM, so all allocators see the same calls */
#define N_PERSISTENT 8

typedef struct tensor {
    uint64_t id, bytes;
    int stream;
} tensor;

typedef struct op {
    uint32_t t;        /* tensor index */
    uint8_t alloc;     /* 1 alloc, 0 free */
} op;

typedef struct seq {
    tensor *t; size_t nt;
    op *o; size_t no;
    size_t pattern;    /* tensors per iteration */
    size_t iters;
    size_t *iter_start;   /* op index where each iteration begins */
    /* the static plan */
    uint64_t *plan_ids, *plan_offs;
    size_t plan_n;
    uint64_t arena;
} seq;

static uint64_t rng_next(uint64_t *s)   /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

static uint64_t log_uniform(uint64_t *s, double lo, double hi)
{
    return (uint64_t)exp(log(lo) + rng_unit(s) * (log(hi) - log(lo)));
}

typedef struct ev { uint64_t time; uint32_t k; uint8_t alloc; } ev;

static int cmp_ev(const void *x, const void *y)
{
    const ev *p = x, *q = y;
    if (p->time != q->time) return p->time < q->time ? -1 : 1;
    if (p->alloc != q->alloc) return p->alloc - q->alloc;   /* frees first */
    return p->k < q->k ? -1 : p->k > q->k;
}

/* One iteration pattern of P tensors, repeated; persistent tensors around all of it. */
static int seq_make(seq *q, size_t n_ops, uint64_t seed)
{
    memset(q, 0, sizeof *q);
    size_t P = n_ops / 20 < 2000 ? n_ops / 20 : 2000;
    if (P < 20) P = 20;
    size_t R = n_ops / (2 * P);
    if (R < 1) R = 1;
    q->pattern = P;
    q->iters = R;
    q->nt = N_PERSISTENT + P * R;
    q->t = calloc(q->nt, sizeof *q->t);
    q->o = calloc(2 * q->nt, sizeof *q->o);
    q->iter_start = calloc(R + 1, sizeof *q->iter_start);
    ev *e = calloc(2 * P, sizeof *e);
    uint64_t *size = calloc(P, sizeof *size), *fu = calloc(P + N_PERSISTENT, sizeof *fu);
    uint64_t *lu = calloc(P + N_PERSISTENT, sizeof *lu), *pid = calloc(P + N_PERSISTENT, sizeof *pid);
    uint64_t *pby = calloc(P + N_PERSISTENT, sizeof *pby), *poff = calloc(P + N_PERSISTENT, sizeof *poff);
    int *stream = calloc(P, sizeof *stream);
    q->plan_ids = calloc(q->nt, sizeof *q->plan_ids);
    q->plan_offs = calloc(q->nt, sizeof *q->plan_offs);
    if (!q->t || !q->o || !q->iter_start || !e || !size || !fu || !lu || !pid || !pby || !poff ||
        !stream || !q->plan_ids || !q->plan_offs)
        return -1;
    uint64_t s = seed;
    for (size_t i = 0; i < N_PERSISTENT; i++)
        q->t[i] = (tensor){1 + i, log_uniform(&s, 1 * MiB, 512 * MiB), 0};
    /* the pattern: tensor k allocated at step k, freed after a short, medium or long life */
    for (size_t k = 0; k < P; k++) {
        size[k] = log_uniform(&s, 512, 2 * GiB);
        stream[k] = rng_unit(&s) < 0.1;
        double u = rng_unit(&s);
        uint64_t life = u < 0.6 ? 1 + rng_next(&s) % 8 : u < 0.9 ? 8 + rng_next(&s) % 56
                                                               : 64 + rng_next(&s) % 448;
        uint64_t end = k + life < P ? k + life : P;
        e[2 * k] = (ev){k, (uint32_t)k, 1};
        e[2 * k + 1] = (ev){end, (uint32_t)k, 0};
    }
    qsort(e, 2 * P, sizeof *e, cmp_ev);
    size_t no = 0;
    for (size_t i = 0; i < N_PERSISTENT; i++) q->o[no++] = (op){(uint32_t)i, 1};
    for (size_t r = 0; r < R; r++) {
        q->iter_start[r] = no;
        for (size_t i = 0; i < 2 * P; i++) {
            uint32_t ti = (uint32_t)(N_PERSISTENT + r * P + e[i].k);
            if (e[i].alloc)
                q->t[ti] = (tensor){1000 + r * P + e[i].k, size[e[i].k], stream[e[i].k]};
            q->o[no++] = (op){ti, e[i].alloc};
        }
    }
    q->iter_start[R] = no;
    for (size_t i = 0; i < N_PERSISTENT; i++) q->o[no++] = (op){(uint32_t)i, 0};
    q->no = no;
    /* static plan of one iteration (event times), persistent tensors alive throughout;
     * every iteration reuses it, since no pattern tensor outlives its iteration */
    for (size_t i = 0; i < 2 * P; i++) {
        if (e[i].alloc) fu[e[i].k] = i;
        else lu[e[i].k] = i;
    }
    size_t n = 0;
    for (size_t k = 0; k < P; k++) {
        if (k % 10 == 9) continue;   /* left unplanned: the fallback serves it */
        pid[n] = k;
        pby[n] = size[k];
        fu[n] = fu[k];
        lu[n] = lu[k];
        n++;
    }
    for (size_t i = 0; i < N_PERSISTENT; i++) {
        pid[n] = P + i;
        pby[n] = q->t[i].bytes;
        fu[n] = 0;
        lu[n] = 2 * P;
        n++;
    }
    if (alloc_static_plan_greedy(pid, pby, fu, lu, n, poff, &q->arena) != MS_OK) return -1;
    /* expand to every tensor id, in id order (persistent ids first) */
    size_t m = 0;
    for (size_t i = 0; i < N_PERSISTENT; i++) {
        q->plan_ids[m] = 1 + i;
        q->plan_offs[m++] = poff[n - N_PERSISTENT + i];
    }
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j + N_PERSISTENT < n; j++) {
            q->plan_ids[m] = 1000 + r * P + pid[j];
            q->plan_offs[m++] = poff[j];
        }
    q->plan_n = m;
    free(e);
    free(size);
    free(fu);
    free(lu);
    free(pid);
    free(pby);
    free(poff);
    free(stream);
    return 0;
}

static void seq_free(seq *q)
{
    free(q->t);
    free(q->o);
    free(q->iter_start);
    free(q->plan_ids);
    free(q->plan_offs);
}

/* Live address ranges of one allocator, sorted, for the no-overlap check. */
typedef struct shadow {
    uint64_t *lo, *hi;
    size_t n, cap;
} shadow;

static size_t sh_pos(const shadow *s, uint64_t a)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->lo[mid] < a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Inserts [a, a+b); returns 0 if it overlaps a live range. */
static int sh_add(shadow *s, uint64_t a, uint64_t b)
{
    size_t p = sh_pos(s, a);
    if (p > 0 && s->hi[p - 1] > a) return 0;
    if (p < s->n && s->lo[p] < a + b) return 0;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->lo = realloc(s->lo, s->cap * sizeof *s->lo);
        s->hi = realloc(s->hi, s->cap * sizeof *s->hi);
        if (!s->lo || !s->hi) return 0;
    }
    memmove(s->lo + p + 1, s->lo + p, (s->n - p) * sizeof *s->lo);
    memmove(s->hi + p + 1, s->hi + p, (s->n - p) * sizeof *s->hi);
    s->lo[p] = a;
    s->hi[p] = a + b;
    s->n++;
    return 1;
}

static int sh_del(shadow *s, uint64_t a)
{
    size_t p = sh_pos(s, a);
    if (p >= s->n || s->lo[p] != a) return 0;
    memmove(s->lo + p, s->lo + p + 1, (s->n - p - 1) * sizeof *s->lo);
    memmove(s->hi + p, s->hi + p + 1, (s->n - p - 1) * sizeof *s->hi);
    s->n--;
    return 1;
}

typedef struct result {
    const char *name;
    int errors, leaks;
    uint64_t ooms, requested_peak, reserved_peak, active_peak;
    uint64_t last_iter_stitches, stitches;
    double seconds;
} result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Replays q through allocator `name`; checks every `stride` calls (0: never). */
static void replay(const seq *q, const char *name, uint64_t capacity, uint64_t stride,
                   const alloc_stitch_knobs *knobs, result *r)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    simbe_t *be = simbe_new(NULL, capacity, 0);
    alloc_config c;
    alloc_config_default(&c);
    c.check_every_op = stride == 1;
    c.static_ids = q->plan_ids;
    c.static_offsets = q->plan_offs;
    c.static_n = q->plan_n;
    /* an arena larger than the device cannot be made up front: grow it on demand instead */
    c.static_arena_bytes = q->arena <= capacity ? q->arena : 0;
    alloc_t *a = NULL;
    ms_error err;
    ms_status cst = be ? alloc_new(name, &c, simbe_backend(be), &a, &err) : MS_ERR_NOMEM;
    if (cst != MS_OK) {
        TAP_NOTE("%s: cannot create: %s", name, err.msg);
        if (cst == MS_ERR_OOM) r->ooms++;   /* the static arena does not fit: a result */
        else r->errors++;
        simbe_free(be);
        return;
    }
    if (knobs && alloc_stitch_set_knobs(a, knobs) != MS_OK) r->errors++;
    uint64_t *addr = calloc(q->nt, sizeof *addr);
    uint8_t *ok = calloc(q->nt, 1);
    shadow sh = {0};
    uint64_t live_req = 0, stitch_mark = 0;
    char why[256];
    const alloc_stats *s = alloc_get_stats(a);
    double t0 = now_s();
    size_t last_iter = q->iter_start[q->iters - 1];
    for (size_t i = 0; i < q->no && r->errors < 5; i++) {
        if (i == last_iter) stitch_mark = s->num_stitches;
        const op *o = &q->o[i];
        const tensor *t = &q->t[o->t];
        ms_status st;
        if (o->alloc) {
            st = alloc_block(a, t->bytes, t->stream, t->id, &addr[o->t]);
            if (st == MS_OK) {
                ok[o->t] = 1;
                live_req += t->bytes;
                if (!sh_add(&sh, addr[o->t], t->bytes)) {
                    TAP_NOTE("%s: op %zu: block 0x%llx overlaps a live block", name, i,
                             (unsigned long long)addr[o->t]);
                    r->errors++;
                }
            } else if (st == MS_ERR_OOM) {
                r->ooms++;
            } else {
                TAP_NOTE("%s: op %zu: alloc of %llu bytes: %s", name, i,
                         (unsigned long long)t->bytes, ms_status_str(st));
                r->errors++;
            }
        } else if (ok[o->t]) {
            ok[o->t] = 0;
            live_req -= t->bytes;
            st = alloc_release(a, addr[o->t]);
            if (st != MS_OK || !sh_del(&sh, addr[o->t])) {
                TAP_NOTE("%s: op %zu: free: %s", name, i, ms_status_str(st));
                r->errors++;
            }
        }
        if (s->requested_bytes != live_req) {
            TAP_NOTE("%s: op %zu: requested %llu, shadow %llu", name, i,
                     (unsigned long long)s->requested_bytes, (unsigned long long)live_req);
            r->errors++;
        }
        if (stride > 1 && i % stride == 0 && alloc_check(a, why, sizeof why) != MS_OK) {
            TAP_NOTE("%s: op %zu: %s", name, i, why);
            r->errors++;
        }
    }
    r->seconds = now_s() - t0;
    if (stride && alloc_check(a, why, sizeof why) != MS_OK) {
        TAP_NOTE("%s: final check: %s", name, why);
        r->errors++;
    }
    r->stitches = s->num_stitches;
    r->last_iter_stitches = s->num_stitches - stitch_mark;
    for (size_t i = 0; i < q->nt; i++)
        if (ok[i] && alloc_release(a, addr[i]) != MS_OK) r->errors++;
    if (alloc_empty_cache(a) != MS_OK) r->errors++;
    r->leaks = simbe_live_handles(be) || simbe_live_mappings(be) || simbe_live_reservations(be) ||
               simbe_live_segments(be) || s->reserved_bytes || s->allocated_bytes;
    r->requested_peak = s->requested_peak_bytes;
    r->reserved_peak = s->reserved_peak_bytes;
    r->active_peak = s->active_peak_bytes;
    free(addr);
    free(ok);
    free(sh.lo);
    free(sh.hi);
    alloc_free(a);
    simbe_free(be);
}

static int bench(uint64_t events)
{
    seq q;
    if (seq_make(&q, (size_t)events, 7) != 0) TAP_SKIP_ALL("out of memory");
    const char *names[] = {"caching", "stitching", "expandable"};
    for (size_t k = 0; k < 3; k++) {
        result r;
        replay(&q, names[k], CAPACITY, 0, NULL, &r);
        TAP_NOTE("%-10s %zu events in %.3f s: %.0f events/s (peak reserved %.2f GiB, active %.2f "
                 "GiB, %llu OOM, %llu stitches)", names[k], q.no, r.seconds,
                 (double)q.no / r.seconds, (double)r.reserved_peak / GiB,
                 (double)r.active_peak / GiB, (unsigned long long)r.ooms,
                 (unsigned long long)r.stitches);
        TAP_OK(r.errors == 0 && !r.leaks, "%s replays %zu events without error", names[k], q.no);
    }
    seq_free(&q);
    return tap_done();
}

int main(int argc, char **argv)
{
    uint64_t n_ops = 20000, seed = 1, stride = 1;
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        uint64_t n_ev = 1000000;
        if (argc > 2 && !ms_parse_count(argv[2], &n_ev)) {
            fprintf(stderr, "usage: test_alloc_random --bench [EVENTS]\n");
            return 2;
        }
        return bench(n_ev);
    }
    if ((argc > 1 && !ms_parse_count(argv[1], &n_ops)) || (argc > 2 && !ms_parse_u64(argv[2], &seed)) ||
        (argc > 3 && !ms_parse_u64(argv[3], &stride)) || n_ops < 100) {
        fprintf(stderr, "usage: test_alloc_random [OPS [SEED [STRIDE]]]\n");
        return 2;
    }
    seq q;
    if (seq_make(&q, (size_t)n_ops, seed) != 0) TAP_SKIP_ALL("out of memory");
    TAP_NOTE("%zu ops: %zu iterations of %zu tensors, %d persistent; static arena %.2f GiB",
             q.no, q.iters, q.pattern, N_PERSISTENT, (double)q.arena / GiB);
    size_t n_alloc;
    const alloc_vtable *const *reg = alloc_registry(&n_alloc);
    result res[16];
    int all_fit = 1;
    for (size_t k = 0; k < n_alloc && k < 16; k++) {
        replay(&q, reg[k]->name, CAPACITY, stride, NULL, &res[k]);
        result *r = &res[k];
        TAP_NOTE("%-10s %.2f s, %llu OOM, peak reserved %.2f GiB, peak active %.2f GiB, "
                 "fragmentation %.3f, stitches %llu (last iteration %llu)", r->name, r->seconds,
                 (unsigned long long)r->ooms, (double)r->reserved_peak / GiB,
                 (double)r->active_peak / GiB,
                 r->reserved_peak ? 1.0 - (double)r->active_peak / (double)r->reserved_peak : 0.0,
                 (unsigned long long)r->stitches, (unsigned long long)r->last_iter_stitches);
        TAP_OK(r->errors == 0, "%s: every call succeeds or is OOM, invariant and shadow hold",
               r->name);
        TAP_OK(!r->leaks, "%s: after freeing everything and empty_cache nothing is left", r->name);
        all_fit &= r->ooms == 0;
    }
    if (all_fit) {
        int same = 1;
        for (size_t k = 1; k < n_alloc && k < 16; k++)
            same &= res[k].requested_peak == res[0].requested_peak;
        TAP_OK(same, "all allocators agree on the peak of requested bytes");
    }
    for (size_t k = 0; k < n_alloc && k < 16; k++)
        if (strcmp(res[k].name, "stitching") == 0 && q.iters >= 4)
            TAP_OK(res[k].last_iter_stitches == 0, "stitching: no new stitch in the last iteration");
    seq_free(&q);

    /* a quarter of the length on a device smaller than the peak: OOM paths under check */
    if (seq_make(&q, (size_t)(n_ops / 4 < 100 ? 100 : n_ops / 4), seed + 1) != 0)
        TAP_SKIP_ALL("out of memory");
    uint64_t live = 0, peak = 0;
    for (size_t i = 0; i < q.no; i++) {
        live = q.o[i].alloc ? live + q.t[q.o[i].t].bytes : live - q.t[q.o[i].t].bytes;
        if (live > peak) peak = live;
    }
    uint64_t tight = peak / 10 * 7 / (2 * MiB) * (2 * MiB);   /* 70% of the peak */
    for (size_t k = 0; k < n_alloc && k < 16; k++) {
        result r;
        replay(&q, reg[k]->name, tight, stride, NULL, &r);
        TAP_NOTE("%-10s on %.2f GiB: %zu ops, %llu OOM, peak reserved %.2f GiB, %.2f s", r.name,
                 (double)tight / GiB, q.no, (unsigned long long)r.ooms,
                 (double)r.reserved_peak / GiB, r.seconds);
        TAP_OK(r.errors == 0 && !r.leaks && r.reserved_peak <= tight && r.ooms > 0,
               "%s on 70%% of the peak: OOMs are clean, invariant holds, nothing leaks", r.name);
    }
    /* the stitching allocator's other rule sets, roomy and tight */
    alloc_stitch_knobs kn[2];
    alloc_stitch_knobs_glake(&kn[0]);
    alloc_stitch_knobs_default(&kn[1]);
    kn[1].frag_rule = ALLOC_STITCH_FRAG_BLOCKS;
    kn[1].coalesce = 0;
    const char *kname[2] = {"glake's rules", "the paper's literal rules"};
    for (int k = 0; k < 2; k++)
        for (int tgt = 0; tgt < 2; tgt++) {
            result r;
            replay(&q, "stitching", tgt ? tight : CAPACITY, stride, &kn[k], &r);
            TAP_NOTE("stitching, %s, %s: %llu OOM, peak reserved %.2f GiB", kname[k],
                     tgt ? "tight" : "roomy", (unsigned long long)r.ooms,
                     (double)r.reserved_peak / GiB);
            TAP_OK(r.errors == 0 && !r.leaks, "stitching with %s on the %s device: no error, no leak",
                   kname[k], tgt ? "small" : "large");
        }
    seq_free(&q);
    return tap_done();
}

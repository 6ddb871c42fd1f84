/* dsa.c — offline dynamic storage allocation: instances, CSV reader, LOAD, checker, and the
 * greedy, branch-and-bound and MIP solvers behind dsa_solve(). Used by the MEMO bi-level
 * planner (planners/), `memsim dsa` (sim/cmd_dsa.c) and tests/test_dsa.c. See dsa.h. */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h" /* HAVE_LPSOLVE */
#endif
#include "memory/dsa.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_LPSOLVE
#include <lp_lib.h>
#endif

#define NONE64 UINT64_MAX

/* ======================================================================================
 * Instances
 * ====================================================================================== */

struct dsa_instance {
    dsa_buffer *b;
    size_t *id_at;      /* offset of buffer i's id in pool, or SIZE_MAX for none */
    size_t n, cap;
    char *pool;         /* NUL-terminated ids back to back */
    size_t pool_len, pool_cap;
    size_t *hash;       /* open addressing over buffer indices + 1 (0 = empty) */
    size_t hash_cap;
    uint64_t total_bytes;
};

dsa_instance *dsa_instance_new(void) { return calloc(1, sizeof(dsa_instance)); }

void dsa_instance_free(dsa_instance *in)
{
    if (!in) return;
    free(in->b);
    free(in->id_at);
    free(in->pool);
    free(in->hash);
    free(in);
}

size_t dsa_instance_count(const dsa_instance *in) { return in->n; }
const dsa_buffer *dsa_instance_buffers(const dsa_instance *in) { return in->b; }

const char *dsa_instance_id(const dsa_instance *in, size_t i, char *buf, size_t n)
{
    if (in->id_at[i] != SIZE_MAX) return in->pool + in->id_at[i];
    snprintf(buf, n, "%zu", i);
    return buf;
}

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Finds the slot of id (holding its buffer index + 1, or 0 where it would go). */
static size_t *hash_slot(const dsa_instance *in, const char *id)
{
    size_t mask = in->hash_cap - 1;
    for (size_t h = (size_t)str_hash(id) & mask;; h = (h + 1) & mask) {
        size_t v = in->hash[h];
        if (v == 0 || strcmp(in->pool + in->id_at[v - 1], id) == 0) return &in->hash[h];
    }
}

static ms_status hash_grow(dsa_instance *in)
{
    size_t ncap = in->hash_cap ? in->hash_cap * 2 : 1024;
    size_t *old = in->hash, ocap = in->hash_cap;
    in->hash = calloc(ncap, sizeof *in->hash);
    if (!in->hash) { in->hash = old; return MS_ERR_NOMEM; }
    in->hash_cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i]) *hash_slot(in, in->pool + in->id_at[old[i] - 1]) = old[i];
    free(old);
    return MS_OK;
}

/* Records id for the buffer about to become index in->n; fails on a repeat. */
static ms_status add_id(dsa_instance *in, const char *id, size_t *at, ms_error *err)
{
    size_t len = strlen(id);
    if (len == 0 || len > DSA_MAX_ID_LEN)
        return ms_fail(err, MS_ERR_INVALID, "id must have 1 to %d characters", DSA_MAX_ID_LEN);
    if ((in->n + 1) * 2 > in->hash_cap && hash_grow(in) != MS_OK)
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    size_t *slot = hash_slot(in, id);
    if (*slot) return ms_fail(err, MS_ERR_INVALID, "duplicate id '%s'", id);
    void *p = in->pool;
    if (ms_grow(&p, &in->pool_cap, in->pool_len + len + 1, 1) != MS_OK)
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    in->pool = p;
    memcpy(in->pool + in->pool_len, id, len + 1);
    *at = in->pool_len;
    in->pool_len += len + 1;
    *slot = in->n + 1;
    return MS_OK;
}

ms_status dsa_instance_add(dsa_instance *in, const char *id, int64_t lower, int64_t upper,
                           uint64_t size_bytes, ms_error *err)
{
    if (lower >= upper)
        return ms_fail(err, MS_ERR_INVALID, "lower %lld must be below upper %lld",
                       (long long)lower, (long long)upper);
    /* the planners take upper - lower in int64 arithmetic (and sums of it) */
    if ((uint64_t)upper - (uint64_t)lower > DSA_MAX_TOTAL_BYTES)
        return ms_fail(err, MS_ERR_INVALID, "lifetime [%lld, %lld) is longer than 2^62",
                       (long long)lower, (long long)upper);
    if (size_bytes == 0) return ms_fail(err, MS_ERR_INVALID, "size must be positive");
    if (size_bytes >= DSA_MAX_TOTAL_BYTES - in->total_bytes)
        return ms_fail(err, MS_ERR_INVALID, "total size of all buffers reaches 2^62 bytes");
    void *pb = in->b, *pi = in->id_at;
    size_t c1 = in->cap, c2 = in->cap;
    if (ms_grow(&pb, &c1, in->n + 1, sizeof *in->b) != MS_OK) goto nomem;
    in->b = pb;
    if (ms_grow(&pi, &c2, in->n + 1, sizeof *in->id_at) != MS_OK) goto nomem;
    in->id_at = pi;
    in->cap = c1 < c2 ? c1 : c2;
    size_t at = SIZE_MAX;
    if (id) {
        ms_status st = add_id(in, id, &at, err);
        if (st != MS_OK) return st;
    }
    in->b[in->n] = (dsa_buffer){lower, upper, size_bytes};
    in->id_at[in->n] = at;
    in->n++;
    in->total_bytes += size_bytes;
    return MS_OK;
nomem:
    return ms_fail(err, MS_ERR_NOMEM, "out of memory");
}

/* ======================================================================================
 * CSV reader
 * ====================================================================================== */

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

/* Splits on commas in place; returns the field count (max + 1 if more). */
static int split_commas(char *line, char **f, int max)
{
    int n = 0;
    for (char *p = line;;) {
        char *c = strchr(p, ',');
        if (n == max) return max + 1;
        if (c) *c = '\0';
        f[n++] = trim(p);
        if (!c) return n;
        p = c + 1;
    }
}

static int is_header(char **f)
{
    return strcmp(f[0], "id") == 0 && strcmp(f[1], "lower") == 0 &&
           strcmp(f[2], "upper") == 0 && strcmp(f[3], "size") == 0;
}

static ms_status parse_row(dsa_instance *in, char **f, const char *path, uint64_t line,
                           ms_error *err)
{
    int64_t lo, up, sz;
    if (!ms_parse_i64(f[1], &lo))
        return ms_fail_at(err, MS_ERR_PARSE, path, line, "lower '%s' is not an integer", f[1]);
    if (!ms_parse_i64(f[2], &up))
        return ms_fail_at(err, MS_ERR_PARSE, path, line, "upper '%s' is not an integer", f[2]);
    if (!ms_parse_i64(f[3], &sz))
        return ms_fail_at(err, MS_ERR_PARSE, path, line, "size '%s' is not an integer", f[3]);
    if (sz <= 0)
        return ms_fail_at(err, MS_ERR_PARSE, path, line, "size %lld must be positive",
                          (long long)sz);
    if (lo >= up)
        return ms_fail_at(err, MS_ERR_PARSE, path, line,
                          "lower %lld must be below upper %lld (lifetimes are [lower, upper))",
                          (long long)lo, (long long)up);
    ms_error e;
    ms_status st = dsa_instance_add(in, f[0], lo, up, (uint64_t)sz, &e);
    if (st == MS_ERR_INVALID) return ms_fail_at(err, MS_ERR_PARSE, path, line, "%s", e.msg);
    if (st != MS_OK) return ms_fail(err, st, "%s", e.msg);
    return MS_OK;
}

ms_status dsa_read_csv(const char *path, dsa_instance **out, ms_error *err)
{
    *out = NULL;
    ms_lines *lr;
    ms_status st = ms_lines_open(path, &lr, err);
    if (st != MS_OK) return st;
    dsa_instance *in = dsa_instance_new();
    if (!in) { ms_lines_free(lr); return ms_fail(err, MS_ERR_NOMEM, "out of memory"); }
    int first = 1;
    char *line;
    while ((st = ms_lines_next(lr, &line, err)) == MS_OK) {
        uint64_t ln = ms_lines_lineno(lr);
        char *t = trim(line);
        if (*t == '\0' || *t == '#') continue;
        char *f[5];
        int nf = split_commas(t, f, 4);
        if (nf != 4) {
            st = ms_fail_at(err, MS_ERR_PARSE, path, ln,
                            "expected 4 fields id,lower,upper,size, found %s%d",
                            nf > 4 ? "more than " : "", nf > 4 ? 4 : nf);
            break;
        }
        int header = first && is_header(f);
        first = 0;
        if (header) continue;
        if ((st = parse_row(in, f, path, ln, err)) != MS_OK) break;
    }
    ms_lines_free(lr);
    if (st != MS_ERR_LIMIT) { dsa_instance_free(in); return st; }
    *out = in;
    return MS_OK;
}

/* ======================================================================================
 * Time sections: the sorted distinct lifetime endpoints t_0 < t_1 < ...; section k is
 * [t_k, t_{k+1}). Buffer i lives in sections [sl[i], su[i]).
 * ====================================================================================== */

typedef struct sections {
    size_t n;      /* buffers */
    size_t ns;     /* sections = distinct endpoints - 1 */
    int32_t *sl, *su;
} sections;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static size_t find_time(const int64_t *t, size_t n, int64_t v)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void sections_free(sections *s)
{
    free(s->sl);
    free(s->su);
    memset(s, 0, sizeof *s);
}

static ms_status sections_build(const dsa_instance *in, sections *s)
{
    size_t n = in->n;
    memset(s, 0, sizeof *s);
    s->n = n;
    int64_t *t = malloc((2 * n + 1) * sizeof *t);
    s->sl = malloc((n + 1) * sizeof *s->sl);
    s->su = malloc((n + 1) * sizeof *s->su);
    if (!t || !s->sl || !s->su) { free(t); sections_free(s); return MS_ERR_NOMEM; }
    for (size_t i = 0; i < n; i++) { t[2 * i] = in->b[i].lower; t[2 * i + 1] = in->b[i].upper; }
    qsort(t, 2 * n, sizeof *t, cmp_i64);
    size_t m = 0;
    for (size_t i = 0; i < 2 * n; i++)
        if (m == 0 || t[m - 1] != t[i]) t[m++] = t[i];
    for (size_t i = 0; i < n; i++) {
        s->sl[i] = (int32_t)find_time(t, m, in->b[i].lower);
        s->su[i] = (int32_t)find_time(t, m, in->b[i].upper);
    }
    s->ns = m ? m - 1 : 0;
    free(t);
    return MS_OK;
}

/* ======================================================================================
 * LOAD and the checker
 * ====================================================================================== */

typedef struct event { int64_t t; int up; size_t i; } event;

static int cmp_event(const void *a, const void *b)
{
    const event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->up != y->up) return y->up - x->up; /* ends before starts: half-open lifetimes */
    return (x->i > y->i) - (x->i < y->i);
}

uint64_t dsa_load(const dsa_instance *in)
{
    size_t n = in->n;
    event *e = malloc((2 * n + 1) * sizeof *e);
    if (!e) return 0;
    for (size_t i = 0; i < n; i++) {
        e[2 * i] = (event){in->b[i].lower, 0, i};
        e[2 * i + 1] = (event){in->b[i].upper, 1, i};
    }
    qsort(e, 2 * n, sizeof *e, cmp_event);
    uint64_t cur = 0, best = 0;
    for (size_t k = 0; k < 2 * n; k++) {
        if (e[k].up) cur -= in->b[e[k].i].size_bytes;
        else cur += in->b[e[k].i].size_bytes;
        if (cur > best) best = cur;
    }
    free(e);
    return best;
}

static ms_status conflict(const dsa_instance *in, const uint64_t *off, size_t a, size_t b,
                          ms_error *err)
{
    char ba[32], bb[32];
    return ms_fail(err, MS_ERR_INVALID,
                   "buffers %s [%llu, %llu) and %s [%llu, %llu) are live together and overlap",
                   dsa_instance_id(in, a, ba, sizeof ba), (unsigned long long)off[a],
                   (unsigned long long)(off[a] + in->b[a].size_bytes),
                   dsa_instance_id(in, b, bb, sizeof bb), (unsigned long long)off[b],
                   (unsigned long long)(off[b] + in->b[b].size_bytes));
}

/* Occupied ranks of the checker's sweep: a count per node of a perfect binary tree. */
typedef struct rankset { size_t P; uint32_t *cnt; } rankset;

static void rankset_add(rankset *t, size_t r, int d)
{
    for (size_t k = r + t->P; k; k /= 2) t->cnt[k] = (uint32_t)((int64_t)t->cnt[k] + d);
}

/* The largest occupied rank below r (dir -1) or the smallest above it (dir +1); SIZE_MAX
 * for none. */
static size_t rankset_near(const rankset *t, size_t r, int dir)
{
    size_t k = r + t->P;
    for (;;) { /* up until a sibling on the wanted side holds something */
        if (k == 1) return SIZE_MAX;
        size_t sib = k ^ 1;
        if ((dir < 0 ? (k & 1) : !(k & 1)) && t->cnt[sib]) { k = sib; break; }
        k /= 2;
    }
    while (k < t->P) /* down to the nearest leaf on that side */
        k = dir < 0 ? (t->cnt[2 * k + 1] ? 2 * k + 1 : 2 * k)
                    : (t->cnt[2 * k] ? 2 * k : 2 * k + 1);
    return k - t->P;
}

static const uint64_t *check_off; /* qsort has no context argument */
static int cmp_by_off(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    if (check_off[a] != check_off[b]) return check_off[a] < check_off[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* Sweeps lifetime ends and starts in time order (ends first) over the live buffers kept by
 * offset: while they are disjoint, a new buffer overlaps one of them exactly when it
 * overlaps its neighbour below or above in offset order. O(n log n). */
ms_status dsa_check(const dsa_instance *in, const uint64_t *off, uint64_t capacity_bytes,
                    uint64_t *peak_bytes, ms_error *err)
{
    size_t n = in->n;
    uint64_t peak = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = in->b[i].size_bytes;
        char bi[32];
        if (off[i] > DSA_MAX_TOTAL_BYTES || off[i] + s > DSA_MAX_TOTAL_BYTES ||
            (capacity_bytes && off[i] + s > capacity_bytes))
            return ms_fail(err, MS_ERR_INVALID, "buffer %s at [%llu, %llu) exceeds capacity %llu",
                           dsa_instance_id(in, i, bi, sizeof bi), (unsigned long long)off[i],
                           (unsigned long long)(off[i] + s),
                           (unsigned long long)capacity_bytes);
        if (off[i] + s > peak) peak = off[i] + s;
    }
    event *e = malloc((2 * n + 1) * sizeof *e);
    size_t *byoff = malloc((n + 1) * sizeof *byoff), *rank = malloc((n + 1) * sizeof *rank);
    rankset t = {1, NULL};
    while (t.P < (n ? n : 1)) t.P *= 2;
    t.cnt = calloc(2 * t.P, sizeof *t.cnt);
    if (!e || !byoff || !rank || !t.cnt) {
        free(e); free(byoff); free(rank); free(t.cnt);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) byoff[i] = i;
    check_off = off;
    qsort(byoff, n, sizeof *byoff, cmp_by_off);
    for (size_t r = 0; r < n; r++) rank[byoff[r]] = r;
    for (size_t i = 0; i < n; i++) {
        e[2 * i] = (event){in->b[i].lower, 0, i};
        e[2 * i + 1] = (event){in->b[i].upper, 1, i};
    }
    qsort(e, 2 * n, sizeof *e, cmp_event);
    ms_status st = MS_OK;
    for (size_t k = 0; k < 2 * n && st == MS_OK; k++) {
        size_t a = e[k].i;
        if (e[k].up) { rankset_add(&t, rank[a], -1); continue; }
        size_t lo = rankset_near(&t, rank[a], -1), hi = rankset_near(&t, rank[a], +1);
        if (lo != SIZE_MAX) {
            size_t b = byoff[lo];
            if (off[b] + in->b[b].size_bytes > off[a]) st = conflict(in, off, b, a, err);
        }
        if (st == MS_OK && hi != SIZE_MAX) {
            size_t b = byoff[hi];
            if (off[a] + in->b[a].size_bytes > off[b]) st = conflict(in, off, b, a, err);
        }
        rankset_add(&t, rank[a], +1);
    }
    free(e);
    free(byoff);
    free(rank);
    free(t.cnt);
    if (st == MS_OK && peak_bytes) *peak_bytes = peak;
    return st;
}

ms_status dsa_write_csv(const dsa_instance *in, const uint64_t *off, const char *path,
                        ms_error *err)
{
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) return st;
    int bad = ms_out_printf(o, "id,lower,upper,size,offset\n") < 0;
    for (size_t i = 0; i < in->n && !bad; i++) {
        char buf[32];
        bad = ms_out_printf(o, "%s,%lld,%lld,%llu,%llu\n", dsa_instance_id(in, i, buf, sizeof buf),
                            (long long)in->b[i].lower, (long long)in->b[i].upper,
                            (unsigned long long)in->b[i].size_bytes,
                            (unsigned long long)off[i]) < 0;
    }
    if (bad) {
        ms_out_abort(o);
        return ms_fail_at(err, MS_ERR_IO, path, 0, "write failed");
    }
    return ms_out_commit(o, err);
}

/* ======================================================================================
 * Stacking in a given order, and brute force
 * ====================================================================================== */

/* Places buffers in order, each right above the highest earlier buffer it overlaps in
 * time. Every solution is dominated by the stacking of its buffers sorted by offset, so
 * minimizing over orders is exact. Returns the peak. O(n^2): small n only. */
static uint64_t stack_in_order(const dsa_instance *in, const size_t *order, uint64_t *off)
{
    uint64_t peak = 0;
    for (size_t k = 0; k < in->n; k++) {
        size_t j = order[k];
        const dsa_buffer *bj = &in->b[j];
        uint64_t x = 0;
        for (size_t q = 0; q < k; q++) {
            size_t i = order[q];
            const dsa_buffer *bi = &in->b[i];
            if (bi->lower < bj->upper && bj->lower < bi->upper && off[i] + bi->size_bytes > x)
                x = off[i] + bi->size_bytes;
        }
        off[j] = x;
        if (x + bj->size_bytes > peak) peak = x + bj->size_bytes;
    }
    return peak;
}

/* Advances perm to the next permutation in lexicographic order; 0 after the last. */
static int next_perm(size_t *p, size_t n)
{
    if (n < 2) return 0;
    size_t i = n - 1;
    while (i > 0 && p[i - 1] >= p[i]) i--;
    if (i == 0) return 0;
    size_t j = n - 1;
    while (p[j] <= p[i - 1]) j--;
    size_t t = p[i - 1]; p[i - 1] = p[j]; p[j] = t;
    for (size_t a = i, b = n - 1; a < b; a++, b--) { t = p[a]; p[a] = p[b]; p[b] = t; }
    return 1;
}

ms_status dsa_brute_force(const dsa_instance *in, uint64_t *offsets, uint64_t *peak_bytes,
                          ms_error *err)
{
    size_t n = in->n;
    if (n > DSA_BRUTE_MAX)
        return ms_fail(err, MS_ERR_INVALID, "brute force takes at most %d buffers, got %zu",
                       DSA_BRUTE_MAX, n);
    size_t perm[DSA_BRUTE_MAX];
    uint64_t off[DSA_BRUTE_MAX];
    for (size_t i = 0; i < n; i++) perm[i] = i;
    uint64_t best = NONE64;
    do {
        uint64_t p = stack_in_order(in, perm, off);
        if (p < best) {
            best = p;
            memcpy(offsets, off, n * sizeof *off);
        }
    } while (next_perm(perm, n));
    *peak_bytes = n ? best : 0;
    return MS_OK;
}

/* ======================================================================================
 * Greedy placement
 *
 * Placed buffers are kept sorted by offset in a list of small chunks (an unrolled list),
 * each chunk remembering the smallest lower and largest upper section of its entries so a
 * chunk with nobody live during the new buffer's lifetime is skipped whole. Placing a
 * buffer scans the live entries in offset order, tracking the top of what lies below the
 * scan position: "first fit" takes the first gap that is large enough, "best fit" the
 * smallest such gap, both falling back to the top.
 *
 * That scan visits every chunk, so it costs O(placed) per buffer whatever the lifetimes. On
 * large instances whose buffers each overlap few others (a long training step) the placed
 * buffers are kept instead in an interval tree over sections: each at the smallest node
 * whose leaves contain its sections, with a count per subtree so that empty subtrees are
 * skipped. A query gathers the placed buffers live during the new one's lifetime, sorts
 * them by offset and runs the same scan over them: the same offsets, in O(K log K) for K
 * overlapping buffers. Both find the lowest (first fit) or the tightest (best fit) gap in
 * the union of the overlapping buffers' offset ranges, which does not depend on the order
 * of equal offsets.
 * ====================================================================================== */

#define GCHUNK 64

typedef struct gchunk {
    int n;
    int32_t minlo, maxhi;
    uint64_t off[GCHUNK], end[GCHUNK];
    int32_t lo[GCHUNK], hi[GCHUNK];
} gchunk;

typedef struct gspan { uint64_t off, end; } gspan;

/* The entries stored at one tree node, all containing the node's middle: by lower section
 * ascending and by upper section descending, so a query on one side of the middle reads
 * only the entries that reach it. */
typedef struct gent { uint64_t off, end; int32_t lo, hi; } gent;
typedef struct gnode {
    int32_t n, cap;
    gent *bylo, *byhi;
} gnode;

typedef struct gplace {
    gchunk **ch;
    size_t nch, cap;
    /* the interval tree, when tree is set */
    int tree;
    size_t P;                 /* leaves: a power of two >= sections */
    gnode **node;             /* per node (2P), NULL while empty */
    int32_t *cnt;             /* per node: entries stored in its subtree */
    size_t ne;
    gspan *span;              /* scratch: the overlapping entries */
    size_t span_cap, nspan;
} gplace;

static void gplace_clear(gplace *g)
{
    for (size_t i = 0; i < g->nch; i++) free(g->ch[i]);
    g->nch = 0;
    if (g->tree && g->ne) {
        for (size_t k = 0; k < 2 * g->P; k++)
            if (g->node[k]) g->node[k]->n = 0;
        memset(g->cnt, 0, 2 * g->P * sizeof *g->cnt);
        g->ne = 0;
    }
}

static void gplace_free(gplace *g)
{
    gplace_clear(g);
    free(g->ch);
    if (g->node)
        for (size_t k = 0; k < 2 * g->P; k++)
            if (g->node[k]) { free(g->node[k]->bylo); free(g->node[k]->byhi); free(g->node[k]); }
    free(g->node); free(g->cnt); free(g->span);
}

static ms_status gplace_tree_init(gplace *g, size_t n, size_t ns)
{
    g->tree = 1;
    g->P = 1;
    while (g->P < (ns ? ns : 1)) g->P *= 2;
    g->node = calloc(2 * g->P, sizeof *g->node);
    g->cnt = calloc(2 * g->P, sizeof *g->cnt);
    (void)n;
    g->span_cap = 1024;
    g->span = malloc(g->span_cap * sizeof *g->span);
    if (!g->node || !g->cnt || !g->span) return MS_ERR_NOMEM;
    return MS_OK;
}

/* The node holding sections [lo, hi): the lowest common ancestor of its two end leaves. */
static size_t gtree_node(const gplace *g, int32_t lo, int32_t hi)
{
    size_t a = (size_t)lo + g->P, b = (size_t)hi - 1 + g->P;
    while (a != b) { a /= 2; b /= 2; }
    return a;
}

static int gtree_push(gplace *g, const gent *e)
{
    if (g->nspan == g->span_cap) {
        gspan *ns = realloc(g->span, 2 * g->span_cap * sizeof *ns);
        if (!ns) return -1;
        g->span = ns;
        g->span_cap *= 2;
    }
    g->span[g->nspan++] = (gspan){e->off, e->end};
    return 0; /* counted by the sort, 4 units per entry and level */
}

/* Appends the entries of node k's subtree (leaves [L, R)) live during [lo, hi) to span.
 * The entries at an inner node contain its middle M - 1 | M; a query below M meets those
 * whose lower is below hi, one above M those whose upper is above lo. */
static int gtree_collect(gplace *g, size_t k, size_t L, size_t R, int32_t lo, int32_t hi,
                         uint64_t *work)
{
    if (g->cnt[k] == 0 || R <= (size_t)lo || L >= (size_t)hi) return 0;
    ++*work;
    size_t M = (L + R) / 2;
    const gnode *nd = g->node[k];
    if (nd && nd->n) {
        if ((size_t)hi <= M && k < g->P) {
            for (int32_t j = 0; j < nd->n && nd->bylo[j].lo < hi; j++)
                if (gtree_push(g, &nd->bylo[j]) < 0) return -1;
        } else if ((size_t)lo >= M && k < g->P) {
            for (int32_t j = 0; j < nd->n && nd->byhi[j].hi > lo; j++)
                if (gtree_push(g, &nd->byhi[j]) < 0) return -1;
        } else {
            for (int32_t j = 0; j < nd->n; j++)
                if (gtree_push(g, &nd->bylo[j]) < 0) return -1;
        }
        *work += 2;
    }
    if (k >= g->P) return 0;
    if (gtree_collect(g, 2 * k, L, M, lo, hi, work) < 0) return -1;
    return gtree_collect(g, 2 * k + 1, M, R, lo, hi, work);
}

/* Sorts spans by offset (the order of equal offsets does not matter to the scan). */
static void gspan_sort(gspan *a, size_t n)
{
    while (n > 16) {
        uint64_t x = a[0].off, y = a[n / 2].off, z = a[n - 1].off; /* median of three */
        uint64_t piv = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
        size_t i = 0, j = n - 1;
        for (;;) {
            while (a[i].off < piv) i++;
            while (a[j].off > piv) j--;
            if (i >= j) break;
            gspan t = a[i]; a[i] = a[j]; a[j] = t;
            i++; j--;
        }
        /* [0, j] <= piv <= [j + 1, n): recurse into the smaller side */
        size_t left = j + 1;
        if (left < n - left) { gspan_sort(a, left); a += left; n -= left; }
        else { gspan_sort(a + left, n - left); n = left; }
    }
    for (size_t i = 1; i < n; i++) {
        gspan t = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1].off > t.off) { a[j] = a[j - 1]; j--; }
        a[j] = t;
    }
}

/* The first-fit / best-fit scan over the placed buffers live with the new one, in offset
 * order: cand climbs past each one that the new buffer cannot fit below. */
typedef struct gscan {
    uint64_t size, cand, best, best_gap;
    int best_fit;
} gscan;

/* One placed buffer [off, end): 1 when the scan's answer is cand now. */
static inline int gscan_step(gscan *sc, uint64_t off, uint64_t end)
{
    if (off >= sc->cand + sc->size) {
        if (!sc->best_fit) return 1;
        uint64_t gap = off - sc->cand;
        if (gap < sc->best_gap) {
            sc->best_gap = gap;
            sc->best = sc->cand;
            if (gap == sc->size) return 1;
        }
    }
    if (end > sc->cand) sc->cand = end;
    return 0;
}

static uint64_t gscan_result(const gscan *sc)
{
    return sc->best != NONE64 ? sc->best : sc->cand;
}

/* gplace_find over the interval tree; NONE64 when out of memory. */
static uint64_t gtree_find(gplace *g, int32_t lo, int32_t hi, uint64_t size, int best_fit,
                           uint64_t *work)
{
    g->nspan = 0;
    if (gtree_collect(g, 1, 0, g->P, lo, hi, work) < 0) return NONE64;
    size_t m = g->nspan;
    if (m > 1) {
        gspan_sort(g->span, m);
        unsigned lg = 1;
        while (((size_t)1 << lg) < m) lg++;
        *work += (uint64_t)m * lg * 4;
    }
    gscan sc = { size, 0, NONE64, NONE64, best_fit };
    for (size_t k = 0; k < m; k++)
        if (gscan_step(&sc, g->span[k].off, g->span[k].end)) return sc.cand;
    return gscan_result(&sc);
}

static ms_status gtree_insert(gplace *g, uint64_t off, uint64_t size, int32_t lo, int32_t hi)
{
    gent e = {off, off + size, lo, hi};
    size_t k = gtree_node(g, lo, hi);
    gnode *nd = g->node[k];
    if (!nd && !(nd = g->node[k] = calloc(1, sizeof *nd))) return MS_ERR_NOMEM;
    if (nd->n == nd->cap) {
        int32_t nc = nd->cap ? 2 * nd->cap : 4;
        gent *a = realloc(nd->bylo, (size_t)nc * sizeof *a);
        if (!a) return MS_ERR_NOMEM;
        nd->bylo = a;
        gent *b = realloc(nd->byhi, (size_t)nc * sizeof *b);
        if (!b) return MS_ERR_NOMEM;
        nd->byhi = b;
        nd->cap = nc;
    }
    g->ne++;
    int32_t j = nd->n;
    while (j > 0 && nd->bylo[j - 1].lo > lo) { nd->bylo[j] = nd->bylo[j - 1]; j--; }
    nd->bylo[j] = e;
    j = nd->n;
    while (j > 0 && nd->byhi[j - 1].hi < hi) { nd->byhi[j] = nd->byhi[j - 1]; j--; }
    nd->byhi[j] = e;
    nd->n++;
    for (; k; k /= 2) g->cnt[k]++;
    return MS_OK;
}

static void gchunk_bounds(gchunk *c)
{
    c->minlo = INT32_MAX;
    c->maxhi = INT32_MIN;
    for (int k = 0; k < c->n; k++) {
        if (c->lo[k] < c->minlo) c->minlo = c->lo[k];
        if (c->hi[k] > c->maxhi) c->maxhi = c->hi[k];
    }
}

/* Lowest offset for [lo, hi) x size among the placed buffers. */
static uint64_t gplace_find(gplace *g, int32_t lo, int32_t hi, uint64_t size, int best_fit,
                            uint64_t *work)
{
    if (g->tree) return gtree_find(g, lo, hi, size, best_fit, work);
    gscan sc = { size, 0, NONE64, NONE64, best_fit };
    *work += g->nch;
    for (size_t c = 0; c < g->nch; c++) {
        const gchunk *ch = g->ch[c];
        if (ch->maxhi <= lo || ch->minlo >= hi) continue;
        *work += (uint64_t)ch->n;
        for (int k = 0; k < ch->n; k++) {
            if (ch->lo[k] >= hi || ch->hi[k] <= lo) continue;
            if (gscan_step(&sc, ch->off[k], ch->end[k])) return sc.cand;
        }
    }
    return gscan_result(&sc);
}

static ms_status gplace_insert(gplace *g, uint64_t off, uint64_t size, int32_t lo, int32_t hi)
{
    if (g->tree) return gtree_insert(g, off, size, lo, hi);
    size_t c = 0;
    { /* the last chunk whose first offset is <= off */
        size_t a = 0, b = g->nch;
        while (a < b) {
            size_t m = (a + b) / 2;
            if (g->ch[m]->off[0] <= off) a = m + 1; else b = m;
        }
        c = a ? a - 1 : 0;
    }
    if (g->nch == 0 || g->ch[c]->n == GCHUNK) {
        void *p = g->ch;
        if (ms_grow(&p, &g->cap, g->nch + 1, sizeof *g->ch) != MS_OK) return MS_ERR_NOMEM;
        g->ch = p;
        gchunk *nc = malloc(sizeof *nc);
        if (!nc) return MS_ERR_NOMEM;
        nc->n = 0;
        if (g->nch == 0) {
            g->ch[g->nch++] = nc;
        } else { /* split chunk c in halves */
            gchunk *oc = g->ch[c];
            int h = oc->n / 2;
            nc->n = oc->n - h;
            memcpy(nc->off, oc->off + h, nc->n * sizeof *nc->off);
            memcpy(nc->end, oc->end + h, nc->n * sizeof *nc->end);
            memcpy(nc->lo, oc->lo + h, nc->n * sizeof *nc->lo);
            memcpy(nc->hi, oc->hi + h, nc->n * sizeof *nc->hi);
            oc->n = h;
            gchunk_bounds(oc);
            gchunk_bounds(nc);
            memmove(g->ch + c + 2, g->ch + c + 1, (g->nch - c - 1) * sizeof *g->ch);
            g->ch[c + 1] = nc;
            g->nch++;
            if (off >= nc->off[0]) c++;
        }
    }
    gchunk *ch = g->ch[c];
    int k = ch->n;
    while (k > 0 && ch->off[k - 1] > off) k--;
    int m = ch->n - k;
    memmove(ch->off + k + 1, ch->off + k, m * sizeof *ch->off);
    memmove(ch->end + k + 1, ch->end + k, m * sizeof *ch->end);
    memmove(ch->lo + k + 1, ch->lo + k, m * sizeof *ch->lo);
    memmove(ch->hi + k + 1, ch->hi + k, m * sizeof *ch->hi);
    ch->off[k] = off;
    ch->end[k] = off + size;
    ch->lo[k] = lo;
    ch->hi[k] = hi;
    if (ch->n == 0 || lo < ch->minlo) ch->minlo = lo;
    if (ch->n == 0 || hi > ch->maxhi) ch->maxhi = hi;
    ch->n++;
    return MS_OK;
}

/* The effort limit of a heuristic stage: counted work, and as a backstop the wall clock
 * (deadline 0: none), read every DSA_CLOCK_EVERY steps. */
typedef struct glimit {
    uint64_t work;   /* stop once the work count reaches this */
    double deadline; /* CLOCK_MONOTONIC seconds, or 0 */
    int hit;         /* set once either was reached */
} glimit;

#define DSA_CLOCK_EVERY 1024

static double wall_s(void);

static int glimit_over(glimit *l, uint64_t work)
{
    if (!l->hit && (work >= l->work || (l->deadline > 0 && wall_s() > l->deadline))) l->hit = 1;
    return l->hit;
}

/* Places all buffers in the given order; returns the peak or NONE64 when out of memory.
 * Gives up (returning NONE64 - 1) as soon as the peak reaches give_up_at, or when the
 * limit is reached: then, with complete set, it finishes the plan by stacking the buffers
 * not placed yet above the peak (a valid plan, not a good one) and returns its peak. */
static uint64_t greedy_run(const dsa_instance *in, const sections *s, const size_t *order,
                           int best_fit, uint64_t give_up_at, gplace *g, uint64_t *off,
                           uint64_t *work, glimit *lim, int complete)
{
    uint64_t peak = 0;
    gplace_clear(g);
    for (size_t k = 0; k < in->n; k++) {
        if (lim && (k + 1) % DSA_CLOCK_EVERY == 0 && glimit_over(lim, *work)) {
            if (!complete) return NONE64 - 1;
            for (; k < in->n; k++) {
                off[order[k]] = peak;
                peak += in->b[order[k]].size_bytes;
            }
            return peak;
        }
        size_t i = order[k];
        uint64_t size = in->b[i].size_bytes;
        uint64_t x = gplace_find(g, s->sl[i], s->su[i], size, best_fit, work);
        if (x == NONE64 || gplace_insert(g, x, size, s->sl[i], s->su[i]) != MS_OK) return NONE64;
        off[i] = x;
        if (x + size > peak) peak = x + size;
        if (peak >= give_up_at) return NONE64 - 1;
    }
    return peak;
}

/* ======================================================================================
 * Skyline placement ("lowest offset first", the first descent of the exact search)
 *
 * Buffers are placed in non-decreasing offset order: each step places the unplaced buffer
 * whose lowest possible offset — the highest top among the placed buffers it overlaps —
 * is smallest, ties broken by a priority rank. Because offsets never decrease, within one
 * section the most recently placed buffer is the highest, so the "skyline" height of each
 * section is all that matters: a segment tree over sections gives the lowest possible
 * offset of a buffer (range max) and raises the sections under a placed buffer (range
 * assign). A heap holds the unplaced buffers keyed by a possibly stale lowest offset;
 * stale keys only err low (heights only grow), so a popped entry whose recomputed key
 * equals its stored one is the true minimum.
 * ====================================================================================== */

/* Heights only grow and a placed buffer's top exceeds every height under it, so "raise
 * [l, r) to v" is a max-assignment that needs no pushing down: tag[k] holds the largest
 * value assigned to all of node k, mx[k] the largest value anywhere below k. A query takes
 * mx of the canonical nodes and tag of their ancestors (the two boundary paths). */
typedef struct segtree {
    size_t ns, size; /* sections; leaves (a power of two) */
    uint64_t *mx, *tag;
} segtree;

static ms_status seg_init(segtree *t, size_t ns)
{
    t->ns = ns ? ns : 1;
    t->size = 1;
    while (t->size < t->ns) t->size *= 2;
    t->mx = calloc(2 * t->size, sizeof *t->mx);
    t->tag = calloc(2 * t->size, sizeof *t->tag);
    if (!t->mx || !t->tag) return MS_ERR_NOMEM;
    return MS_OK;
}

static void seg_reset(segtree *t)
{
    memset(t->mx, 0, 2 * t->size * sizeof *t->mx);
    memset(t->tag, 0, 2 * t->size * sizeof *t->tag);
}

static void seg_free(segtree *t)
{
    free(t->mx);
    free(t->tag);
}

#define MAX64(a, b) ((a) > (b) ? (a) : (b))

static uint64_t seg_max(const segtree *t, size_t l, size_t r)
{
    uint64_t v = 0;
    size_t a = l + t->size, b = r - 1 + t->size; /* boundary leaves */
    for (size_t lo = l + t->size, hi = r + t->size; lo < hi; lo /= 2, hi /= 2) {
        if (lo & 1) { v = MAX64(v, t->mx[lo]); lo++; }
        if (hi & 1) { hi--; v = MAX64(v, t->mx[hi]); }
    }
    for (a /= 2, b /= 2; a; a /= 2, b /= 2) v = MAX64(v, MAX64(t->tag[a], t->tag[b]));
    return v;
}

static void seg_raise(segtree *t, size_t l, size_t r, uint64_t v)
{
    size_t a = l + t->size, b = r - 1 + t->size;
    for (size_t lo = l + t->size, hi = r + t->size; lo < hi; lo /= 2, hi /= 2) {
        if (lo & 1) { t->mx[lo] = MAX64(t->mx[lo], v); t->tag[lo] = MAX64(t->tag[lo], v); lo++; }
        if (hi & 1) { hi--; t->mx[hi] = MAX64(t->mx[hi], v); t->tag[hi] = MAX64(t->tag[hi], v); }
    }
    for (a /= 2, b /= 2; a; a /= 2, b /= 2) {
        t->mx[a] = MAX64(t->mx[a], v);
        t->mx[b] = MAX64(t->mx[b], v);
    }
}

typedef struct hentry { uint64_t key; uint32_t rank, i; } hentry;

static int hless(const hentry *a, const hentry *b)
{
    return a->key < b->key || (a->key == b->key && a->rank < b->rank);
}

/* Restores the heap after the root's key rose (or the root was replaced). */
static void heap_sift_root(hentry *h, size_t n)
{
    hentry e = h[0];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = l;
        if (l >= n) break;
        if (l + 1 < n && hless(&h[l + 1], &h[l])) m = l + 1;
        if (!hless(&h[m], &e)) break;
        h[i] = h[m];
        i = m;
    }
    h[i] = e;
}

static hentry heap_pop(hentry *h, size_t *n)
{
    hentry top = h[0];
    h[0] = h[--*n];
    heap_sift_root(h, *n);
    return top;
}

typedef struct skyline {
    segtree seg;
    hentry *heap; /* n entries: each buffer is in the heap at most once */
    unsigned logs; /* ~log2(sections), the cost of one tree operation in work units */
} skyline;

static ms_status skyline_init(skyline *k, const sections *s)
{
    memset(k, 0, sizeof *k);
    k->heap = malloc((s->n + 1) * sizeof *k->heap);
    if (!k->heap || seg_init(&k->seg, s->ns) != MS_OK) return MS_ERR_NOMEM;
    k->logs = 1;
    while (((size_t)1 << k->logs) < s->ns) k->logs++;
    return MS_OK;
}

static void skyline_free(skyline *k)
{
    seg_free(&k->seg);
    free(k->heap);
}

/* Places every buffer by rank (rank[i]: smaller first among equal offsets). Returns the
 * peak, or NONE64 - 1 as soon as the peak reaches give_up_at. Adds its work to *work. */
static uint64_t skyline_run(skyline *k, const dsa_instance *in, const sections *s,
                            const uint32_t *rank, uint64_t give_up_at, uint64_t *off,
                            uint64_t *work, glimit *lim)
{
    size_t n = in->n, hn = 0;
    uint64_t peak = 0, ops = 0;
    seg_reset(&k->seg);
    /* every key is 0 and the ranks are a permutation: the array in rank order is a heap */
    for (size_t i = 0; i < n; i++) k->heap[rank[i]] = (hentry){0, rank[i], (uint32_t)i};
    hn = n;
    while (hn) {
        hentry e = k->heap[0];
        size_t i = e.i;
        uint64_t x = seg_max(&k->seg, (size_t)s->sl[i], (size_t)s->su[i]);
        ops++;
        if (lim && ops % DSA_CLOCK_EVERY == 0 &&
            glimit_over(lim, *work + ops * 7 * (2 + k->logs))) {
            peak = NONE64 - 1;
            break;
        }
        if (x > e.key) { /* stale: another buffer rose under it since it was keyed */
            k->heap[0].key = x;
            heap_sift_root(k->heap, hn);
            continue;
        }
        heap_pop(k->heap, &hn);
        uint64_t top = x + in->b[i].size_bytes;
        off[i] = x;
        if (top > peak) peak = top;
        if (peak >= give_up_at) { peak = NONE64 - 1; break; }
        seg_raise(&k->seg, (size_t)s->sl[i], (size_t)s->su[i], top);
        ops++;
    }
    /* weights calibrated to the other solvers' units: a tree step, and per run the sort,
     * heap build and tree reset */
    *work += ops * 7 * (2 + k->logs) + 40 * (uint64_t)n + 4 * k->seg.size;
    return peak;
}

/* ======================================================================================
 * Branch-and-bound for "fits in capacity C" (after MiniMalloc's ideas, own design)
 *
 * Search space: canonical solutions, built by placing buffers in non-decreasing order of
 * (offset, rank), each at its lowest possible offset — the highest top among the placed
 * buffers it overlaps (minoff). Every packing can be pushed down into such a form, so the
 * search is complete. Pruning, each preserving completeness:
 *  - order: a buffer whose (minoff, rank) precedes the last placement is not a candidate;
 *  - gap dominance: no buffer is placed at or above the lowest top any unplaced buffer
 *    could reach (it could have been placed first, below);
 *  - "hatless": a buffer overlapping no unplaced buffer is the only branch worth trying;
 *  - section inference: in every section, the unplaced buffers live there stack above
 *    max(last offset, the section's floor), and must fit below C; a section's floor is
 *    the top of its last placed buffer, raised to the least minoff of its unplaced ones;
 *  - decomposition: once no unplaced buffer spans a section boundary, the two sides are
 *    solved independently (failure of either side is final).
 * Candidates are ordered by minoff, then by a static preorder (lifetime width, area, and
 * largest section total, in the three orders MiniMalloc found robust), restarted round
 * robin with a doubling work limit, so one bad order cannot eat the whole budget.
 * ====================================================================================== */

enum { BB_FOUND, BB_FAIL, BB_ABORT };

typedef struct bcand { uint64_t minoff; uint32_t rank, i; } bcand;
typedef struct btrail { uint32_t kind, idx; uint64_t old; } btrail; /* kind 0 minoff, 1 floor */

typedef struct bb {
    const dsa_instance *in;
    sections s;
    uint64_t cap;
    size_t *ov_start; uint32_t *ov;          /* overlapping buffers, CSR */
    size_t *sec_start; uint32_t *sec_buf;    /* buffers live in each section, CSR; the
                                              * unplaced ones first (nun[k] of them) */
    uint32_t *nun;                           /* unplaced buffers live in each section */
    size_t *st_start; uint32_t *st_buf;      /* buffers starting in each section, CSR, */
    uint32_t *nst; size_t *st_pos;           /* the unplaced nst[k] first; i at st_pos[i] */
    uint64_t *rmq; size_t rmq_cap;           /* scratch: range maxima of section totals */
    size_t *pos_start; size_t *pos;          /* where buffer i's entry for section
                                              * sl[i] + j sits in sec_buf: pos[pos_start[i] + j] */
    uint64_t *off, *minoff, *sol;            /* off NONE64 = unplaced */
    uint64_t *floor, *total;                 /* per section */
    int32_t *cuts;                           /* unplaced buffers spanning boundary k|k+1 */
    uint32_t *affected; size_t naff;         /* sections for floor refinement */
    btrail *trail; size_t ntrail, trail_cap;
    /* candidate lists live in a stack of blocks that grows on demand and never moves a
     * live list; a mark (block, top) releases everything allocated after it */
    bcand **blk; size_t *blk_cap; size_t nblk, blk_cur, blk_top;
    int heuristic;                           /* 0 WAT, 1 TAW, 2 TWA */
    uint64_t work, limit;
    int nomem;
} bb;

static void bb_free(bb *B)
{
    sections_free(&B->s);
    free(B->ov_start); free(B->ov); free(B->sec_start); free(B->sec_buf);
    free(B->off); free(B->minoff); free(B->sol); free(B->floor); free(B->total);
    free(B->cuts); free(B->affected); free(B->trail);
    free(B->nun); free(B->pos_start); free(B->pos);
    free(B->st_start); free(B->st_buf); free(B->nst); free(B->st_pos); free(B->rmq);
    for (size_t k = 0; k < B->nblk; k++) free(B->blk[k]);
    free(B->blk); free(B->blk_cap);
}

/* Builds the overlap lists with a sweep over lower ends: O(n log n + pairs). */
static ms_status bb_overlaps(bb *B)
{
    size_t n = B->in->n;
    const sections *s = &B->s;
    size_t *ord = malloc((n + 1) * sizeof *ord), *deg = calloc(n + 1, sizeof *deg);
    if (!ord || !deg) { free(ord); free(deg); return MS_ERR_NOMEM; }
    /* counting sort by sl */
    size_t *cnt = calloc(s->ns + 2, sizeof *cnt);
    if (!cnt) { free(ord); free(deg); return MS_ERR_NOMEM; }
    for (size_t i = 0; i < n; i++) cnt[s->sl[i] + 1]++;
    for (size_t k = 1; k <= s->ns + 1; k++) cnt[k] += cnt[k - 1];
    for (size_t i = 0; i < n; i++) ord[cnt[s->sl[i]]++] = i;
    free(cnt);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            B->ov_start = malloc((n + 1) * sizeof *B->ov_start);
            if (!B->ov_start) break;
            B->ov_start[0] = 0;
            for (size_t i = 0; i < n; i++) B->ov_start[i + 1] = B->ov_start[i] + deg[i];
            B->ov = malloc((B->ov_start[n] + 1) * sizeof *B->ov);
            if (!B->ov) break;
            memset(deg, 0, n * sizeof *deg);
        }
        for (size_t a = 0; a < n; a++) {
            size_t i = ord[a];
            for (size_t b = a + 1; b < n && s->sl[ord[b]] < s->su[i]; b++) {
                size_t j = ord[b];
                if (pass == 1) {
                    B->ov[B->ov_start[i] + deg[i]] = (uint32_t)j;
                    B->ov[B->ov_start[j] + deg[j]] = (uint32_t)i;
                }
                deg[i]++;
                deg[j]++;
            }
        }
    }
    free(ord);
    free(deg);
    return B->ov_start && B->ov ? MS_OK : MS_ERR_NOMEM;
}

static ms_status bb_init(bb *B, const dsa_instance *in, uint64_t cap)
{
    memset(B, 0, sizeof *B);
    B->in = in;
    B->cap = cap;
    size_t n = in->n;
    if (sections_build(in, &B->s) != MS_OK || bb_overlaps(B) != MS_OK) return MS_ERR_NOMEM;
    size_t ns = B->s.ns ? B->s.ns : 1;
    B->sec_start = calloc(ns + 1, sizeof *B->sec_start);
    B->off = malloc(n * sizeof *B->off + 1);
    B->minoff = calloc(n + 1, sizeof *B->minoff);
    B->sol = calloc(n + 1, sizeof *B->sol);
    B->floor = calloc(ns, sizeof *B->floor);
    B->total = calloc(ns, sizeof *B->total);
    B->cuts = calloc(ns, sizeof *B->cuts);
    B->affected = malloc(ns * sizeof *B->affected);
    B->nun = calloc(ns, sizeof *B->nun);
    B->pos_start = malloc((n + 1) * sizeof *B->pos_start);
    if (!B->sec_start || !B->off || !B->minoff || !B->sol || !B->floor || !B->total ||
        !B->cuts || !B->affected || !B->nun || !B->pos_start)
        return MS_ERR_NOMEM;
    B->pos_start[0] = 0;
    for (size_t i = 0; i < n; i++)
        B->pos_start[i + 1] = B->pos_start[i] + (size_t)(B->s.su[i] - B->s.sl[i]);
    for (size_t i = 0; i < n; i++) {
        B->off[i] = NONE64;
        for (int32_t k = B->s.sl[i]; k < B->s.su[i]; k++) {
            B->sec_start[k + 1]++;
            B->total[k] += in->b[i].size_bytes;
        }
        for (int32_t k = B->s.sl[i]; k + 1 < B->s.su[i]; k++) B->cuts[k]++;
    }
    for (size_t k = 0; k < ns; k++) B->sec_start[k + 1] += B->sec_start[k];
    B->sec_buf = malloc((B->sec_start[ns] + 1) * sizeof *B->sec_buf);
    B->pos = malloc((B->pos_start[n] + 1) * sizeof *B->pos);
    if (!B->sec_buf || !B->pos) return MS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        for (int32_t k = B->s.sl[i]; k < B->s.su[i]; k++) {
            size_t p = B->sec_start[k] + B->nun[k]++;
            B->sec_buf[p] = (uint32_t)i;
            B->pos[B->pos_start[i] + (size_t)(k - B->s.sl[i])] = p;
        }
    B->st_start = calloc(ns + 1, sizeof *B->st_start);
    B->st_buf = malloc((n + 1) * sizeof *B->st_buf);
    B->nst = calloc(ns, sizeof *B->nst);
    B->st_pos = malloc((n + 1) * sizeof *B->st_pos);
    if (!B->st_start || !B->st_buf || !B->nst || !B->st_pos) return MS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) B->st_start[B->s.sl[i] + 1]++;
    for (size_t k = 0; k < ns; k++) B->st_start[k + 1] += B->st_start[k];
    for (size_t i = 0; i < n; i++) {
        int32_t k = B->s.sl[i];
        size_t p = B->st_start[k] + B->nst[k]++;
        B->st_buf[p] = (uint32_t)i;
        B->st_pos[i] = p;
    }
    return MS_OK;
}

static int bb_trail(bb *B, uint32_t kind, uint32_t idx, uint64_t old)
{
    if (B->ntrail == B->trail_cap) {
        void *p = B->trail;
        if (ms_grow(&p, &B->trail_cap, B->ntrail + 1, sizeof *B->trail) != MS_OK) {
            B->nomem = 1;
            return 0;
        }
        B->trail = p;
    }
    B->trail[B->ntrail++] = (btrail){kind, idx, old};
    return 1;
}

/* Moves c out of the unplaced part of each section it lives in (a swap with that part's
 * last entry), so that scans for unplaced buffers skip the placed ones. bb_unlist undoes
 * it; the search is strictly nested, so growing each part back by one restores it. The
 * order inside a part changes, which nothing depends on (minima, and lists sorted by a
 * total order). */
static void bb_delist(bb *B, size_t c)
{
    int32_t lo = B->s.sl[c], hi = B->s.su[c];
    size_t *pc = B->pos + B->pos_start[c];
    for (int32_t k = lo; k < hi; k++) {
        size_t p = pc[k - lo], last = B->sec_start[k] + --B->nun[k];
        uint32_t o = B->sec_buf[last];
        B->sec_buf[p] = o;
        B->sec_buf[last] = (uint32_t)c;
        B->pos[B->pos_start[o] + (size_t)(k - B->s.sl[o])] = p;
        pc[k - lo] = last;
    }
    size_t p = B->st_pos[c], last = B->st_start[lo] + --B->nst[lo];
    uint32_t o = B->st_buf[last];
    B->st_buf[p] = o;
    B->st_pos[o] = p;
    B->st_buf[last] = (uint32_t)c;
    B->st_pos[c] = last;
}

/* Moves the q-th unplaced entry of section k to the front of the unplaced part: a buffer
 * that held the section's floor down is likely to do so at the next scan too. */
static void bb_to_front(bb *B, uint32_t k, uint32_t q)
{
    size_t p0 = B->sec_start[k], pq = p0 + q;
    uint32_t a = B->sec_buf[p0], b = B->sec_buf[pq];
    B->sec_buf[p0] = b;
    B->sec_buf[pq] = a;
    B->pos[B->pos_start[a] + (size_t)((int32_t)k - B->s.sl[a])] = pq;
    B->pos[B->pos_start[b] + (size_t)((int32_t)k - B->s.sl[b])] = p0;
}

static void bb_relist(bb *B, size_t c)
{
    for (int32_t k = B->s.sl[c]; k < B->s.su[c]; k++) B->nun[k]++;
    B->nst[B->s.sl[c]]++;
}

static void bb_undo(bb *B, size_t mark)
{
    while (B->ntrail > mark) {
        btrail t = B->trail[--B->ntrail];
        if (t.kind == 0) B->minoff[t.idx] = t.old; else B->floor[t.idx] = t.old;
    }
}

typedef struct bmark { size_t blk, top; } bmark;

static bmark bb_mark(const bb *B) { return (bmark){B->blk_cur, B->blk_top}; }
static void bb_release(bb *B, bmark m) { B->blk_cur = m.blk; B->blk_top = m.top; }

static bcand *bb_alloc(bb *B, size_t k)
{
    if (B->nblk == 0 || B->blk_top + k > B->blk_cap[B->blk_cur]) {
        size_t next = B->nblk == 0 ? 0 : B->blk_cur + 1, want = k > 65536 ? k : 65536;
        if (next == B->nblk) { /* a new block */
            void *p1 = realloc(B->blk, (B->nblk + 1) * sizeof *B->blk);
            if (p1) B->blk = p1;
            void *p2 = p1 ? realloc(B->blk_cap, (B->nblk + 1) * sizeof *B->blk_cap) : NULL;
            if (p2) B->blk_cap = p2;
            bcand *b = p2 ? malloc(want * sizeof *b) : NULL;
            if (!b) { B->nomem = 1; return NULL; }
            B->blk[B->nblk] = b;
            B->blk_cap[B->nblk++] = want;
        } else if (B->blk_cap[next] < k) { /* a free block too small: nothing lives in it */
            bcand *b = realloc(B->blk[next], want * sizeof *b);
            if (!b) { B->nomem = 1; return NULL; }
            B->blk[next] = b;
            B->blk_cap[next] = want;
        }
        B->blk_cur = next;
        B->blk_top = 0;
    }
    bcand *p = B->blk[B->blk_cur] + B->blk_top;
    B->blk_top += k;
    return p;
}

/* Places buffer c at its minoff; returns 0 if some buffer can no longer fit or a
 * section's inference fails. Records every change on the trail. *hat: c overlaps an
 * unplaced buffer. */
static int bb_place(bb *B, size_t c, uint64_t x_last, int *hat)
{
    const dsa_instance *in = B->in;
    uint64_t x = B->minoff[c], top = x + in->b[c].size_bytes;
    int ok = top <= B->cap;
    B->off[c] = x;
    B->sol[c] = x;
    bb_delist(B, c);
    *hat = 0;
    B->naff = 0;
    /* the affected sections are the union of the raised buffers' lifetimes; the overlap
     * lists are in increasing order of lower section (bb_overlaps), so one merge lists
     * each section of the union once */
    int32_t reach = INT32_MIN;
    for (size_t q = B->ov_start[c]; q < B->ov_start[c + 1]; q++) {
        uint32_t o = B->ov[q];
        if (B->off[o] != NONE64) continue;
        *hat = 1;
        if (B->minoff[o] >= top) continue;
        if (!bb_trail(B, 0, o, B->minoff[o])) return 0;
        B->minoff[o] = top;
        if (top + in->b[o].size_bytes > B->cap) ok = 0;
        for (int32_t k = B->s.sl[o] > reach ? B->s.sl[o] : reach; k < B->s.su[o]; k++)
            B->affected[B->naff++] = (uint32_t)k;
        if (B->s.su[o] > reach) reach = B->s.su[o];
    }
    B->work += B->ov_start[c + 1] - B->ov_start[c];
    for (int32_t k = B->s.sl[c]; k < B->s.su[c]; k++) {
        if (!bb_trail(B, 1, (uint32_t)k, B->floor[k])) return 0;
        B->floor[k] = top;
        B->total[k] -= in->b[c].size_bytes;
        if ((x_last > top ? x_last : top) + B->total[k] > B->cap) ok = 0;
    }
    /* raise the floors of sections whose unplaced buffers all rose. Counted as a scan of
     * every buffer live in the section (what the budgets were set by), but a section of
     * c's lifetime holds a raised buffer at exactly its new floor, top, so it never
     * rises, and elsewhere the scan stops at the first buffer at or below the floor. */
    int32_t clo = B->s.sl[c], chi = B->s.su[c];
    for (size_t a = 0; a < B->naff && ok; a++) {
        uint32_t k = B->affected[a];
        B->work += B->sec_start[k + 1] - B->sec_start[k];
        if ((int32_t)k >= clo && (int32_t)k < chi) continue;
        uint64_t lo = NONE64, f = B->floor[k];
        uint32_t *u = B->sec_buf + B->sec_start[k], q = 0;
        for (; q < B->nun[k]; q++) {
            if (B->minoff[u[q]] < lo) lo = B->minoff[u[q]];
            if (lo <= f) break;
        }
        if (q > 0 && q < B->nun[k]) bb_to_front(B, k, q);
        if (lo != NONE64 && lo > f) {
            if (!bb_trail(B, 1, k, f)) return 0;
            B->floor[k] = lo;
        }
    }
    return ok;
}

static void bb_unplace(bb *B, size_t c, size_t mark)
{
    for (int32_t k = B->s.sl[c]; k < B->s.su[c]; k++) B->total[k] += B->in->b[c].size_bytes;
    bb_undo(B, mark);
    bb_relist(B, c);
    B->off[c] = NONE64;
}

/* Section inference over the partition's sections [plo, phi). */
static int bb_check(bb *B, size_t plo, size_t phi, uint64_t x)
{
    B->work += phi - plo;
    for (size_t k = plo; k < phi; k++) {
        uint64_t f = B->floor[k] > x ? B->floor[k] : x;
        if (B->total[k] && f + B->total[k] > B->cap) return 0;
    }
    return 1;
}

static int bb_solve_part(bb *B, size_t plo, size_t phi);

static int cmp_bcand(const bcand *a, const bcand *b)
{
    if (a->minoff != b->minoff) return a->minoff < b->minoff ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* After placing c, solves the pieces its placement cut apart, or goes on searching. */
static int bb_search(bb *B, size_t plo, size_t phi, const bcand *up, size_t nup,
                     uint64_t x_last, uint32_t rank_last);

static int bb_after_place(bb *B, size_t c, size_t plo, size_t phi, const bcand *list,
                          size_t k, uint64_t x, uint32_t rank)
{
    int32_t lo = B->s.sl[c], hi = B->s.su[c];
    int split = 0;
    for (int32_t q = lo; q + 1 < hi; q++)
        if (--B->cuts[q] == 0 && (size_t)q >= plo && (size_t)q + 1 < phi) split = 1;
    int r;
    if (!split) {
        r = bb_search(B, plo, phi, list, k, x, rank);
    } else {
        r = BB_FOUND;
        size_t a = plo;
        for (size_t q = plo; q < phi && r == BB_FOUND; q++) {
            if (q + 1 < phi && B->cuts[q] != 0) continue;
            r = bb_solve_part(B, a, q + 1);
            a = q + 1;
        }
    }
    for (int32_t q = lo; q + 1 < hi; q++) B->cuts[q]++;
    return r;
}

static int bb_search(bb *B, size_t plo, size_t phi, const bcand *up, size_t nup,
                     uint64_t x_last, uint32_t rank_last)
{
    if (B->work >= B->limit) return BB_ABORT;
    B->work += 1 + nup;
    bmark save = bb_mark(B);
    size_t k = 0;
    for (size_t q = 0; q < nup; q++) k += B->off[up[q].i] == NONE64;
    bcand *list = bb_alloc(B, k);
    if (!list) return BB_ABORT;
    k = 0;
    uint64_t min_height = NONE64;
    for (size_t q = 0; q < nup; q++) {
        uint32_t i = up[q].i;
        if (B->off[i] != NONE64) continue;
        bcand e = {B->minoff[i], up[q].rank, i};
        size_t p = k++; /* insertion sort: the parent's list is nearly in order */
        while (p > 0 && cmp_bcand(&e, &list[p - 1]) < 0) { list[p] = list[p - 1]; p--; }
        list[p] = e;
        uint64_t h = e.minoff + B->in->b[i].size_bytes;
        if (h < min_height) min_height = h;
    }
    int result = k == 0 ? BB_FOUND : BB_FAIL;
    for (size_t q = 0; q < k && result == BB_FAIL; q++) {
        const bcand *e = &list[q];
        if (e->minoff < x_last || (e->minoff == x_last && e->rank < rank_last)) continue;
        if (e->minoff >= min_height) break;
        size_t mark = B->ntrail;
        int hat;
        if (bb_place(B, e->i, x_last, &hat) && bb_check(B, plo, phi, e->minoff))
            result = bb_after_place(B, e->i, plo, phi, list, k, e->minoff, e->rank);
        bb_unplace(B, e->i, mark);
        if (B->nomem) result = BB_ABORT;
        if (result == BB_FAIL && !hat) break;
    }
    bb_release(B, save);
    return result;
}

/* Static preorder keys for one partition, in the heuristic's order (k[0] first), each
 * larger first, ties by buffer index. */
typedef struct bpre { double k[3]; uint32_t i; } bpre;

static int bpre_before(const bpre *a, const bpre *b)
{
    for (int q = 0; q < 3; q++)
        if (a->k[q] != b->k[q]) return a->k[q] > b->k[q];
    return a->i < b->i;
}

/* Sorts by bpre_before, a total order, so the result is the one any sort gives; a merge
 * sort with the comparison inlined (qsort's calls were a sixth of a MEMO plan's time). */
static void bpre_sort(bpre *a, bpre *tmp, size_t n)
{
    for (size_t s = 0; s < n; s += 16) { /* insertion sort of runs of 16 */
        size_t e = s + 16 < n ? s + 16 : n;
        for (size_t x = s + 1; x < e; x++) {
            bpre v = a[x];
            size_t y = x;
            while (y > s && bpre_before(&v, &a[y - 1])) { a[y] = a[y - 1]; y--; }
            a[y] = v;
        }
    }
    bpre *src = a, *dst = tmp;
    for (size_t w = 16; w < n; w *= 2) {
        for (size_t s = 0; s < n; s += 2 * w) {
            size_t m = s + w < n ? s + w : n, e = s + 2 * w < n ? s + 2 * w : n;
            size_t x = s, y = m, o = s;
            while (x < m && y < e) dst[o++] = bpre_before(&src[y], &src[x]) ? src[y++] : src[x++];
            while (x < m) dst[o++] = src[x++];
            while (y < e) dst[o++] = src[y++];
        }
        bpre *t = src; src = dst; dst = t;
    }
    if (src != a) memcpy(a, src, n * sizeof *a);
}

/* A sparse table of section-total maxima over [plo, phi), built when the lifetimes of the
 * part's m unplaced buffers would take longer to scan; 1 if built, 0 if not, -1 out of
 * memory. */
static int bb_rmq_build(bb *B, size_t plo, size_t phi, size_t m)
{
    size_t L = phi - plo, lg = 1, scan = 0; /* rows j with 2^j <= L */
    while (((size_t)1 << lg) <= L) lg++;
    for (size_t k = plo; k < phi; k++)
        for (size_t q = B->st_start[k]; q < B->st_start[k] + B->nst[k]; q++) {
            uint32_t i = B->st_buf[q];
            scan += (size_t)(B->s.su[i] - B->s.sl[i]);
        }
    if (m < 2 || scan <= 2 * L * lg) return 0;
    size_t need = L * lg;
    if (need > B->rmq_cap) {
        void *p = realloc(B->rmq, need * sizeof *B->rmq);
        if (!p) return -1;
        B->rmq = p;
        B->rmq_cap = need;
    }
    uint64_t *t = B->rmq;
    memcpy(t, B->total + plo, L * sizeof *t);
    for (size_t j = 1; j < lg; j++) {
        uint64_t *prev = t + (j - 1) * L, *cur = t + j * L;
        size_t w = (size_t)1 << (j - 1);
        for (size_t k = 0; k + 2 * w <= L; k++)
            cur[k] = prev[k] > prev[k + w] ? prev[k] : prev[k + w];
    }
    return 1;
}

/* The largest section total over [lo, hi), inside the part [plo, phi). */
static uint64_t bb_rmq_max(const bb *B, int tab, size_t plo, size_t phi, int32_t lo,
                           int32_t hi)
{
    if (!tab) {
        uint64_t t = 0;
        for (int32_t z = lo; z < hi; z++)
            if (B->total[z] > t) t = B->total[z];
        return t;
    }
    size_t a = (size_t)lo - plo, len = (size_t)(hi - lo), j = 0;
    while (((size_t)2 << j) <= len) j++;
    size_t L = phi - plo;
    const uint64_t *row = B->rmq + j * L;
    uint64_t x = row[a], y = row[a + len - ((size_t)1 << j)];
    return x > y ? x : y;
}

static int bb_solve_part(bb *B, size_t plo, size_t phi)
{
    const dsa_instance *in = B->in;
    bmark save = bb_mark(B);
    /* the partition's unplaced buffers: no unplaced buffer crosses its bounds, so each
     * is counted once, in the section where it starts */
    size_t m = 0;
    for (size_t k = plo; k < phi; k++) m += B->nst[k];
    bcand *list = bb_alloc(B, m);
    bpre *pre = malloc(2 * (m + 1) * sizeof *pre);
    if (!list || !pre) { free(pre); B->nomem = 1; bb_release(B, save); return BB_ABORT; }
    int tab = bb_rmq_build(B, plo, phi, m);
    if (tab < 0) { free(pre); B->nomem = 1; bb_release(B, save); return BB_ABORT; }
    m = 0;
    for (size_t k = plo; k < phi; k++)
        for (size_t q = B->st_start[k]; q < B->st_start[k] + B->nst[k]; q++) {
            uint32_t i = B->st_buf[q];
            const dsa_buffer *b = &in->b[i];
            /* the largest section total over the lifetime (the cast keeps the order) */
            double t = (double)bb_rmq_max(B, tab, plo, phi, B->s.sl[i], B->s.su[i]);
            double w = (double)(b->upper - b->lower), a = (double)b->size_bytes * w;
            /* MiniMalloc's three orders: WAT, TAW, TWA (w lifetime, a area, t total) */
            bpre e = {{w, a, t}, i};
            if (B->heuristic == 1) { e.k[0] = t; e.k[2] = w; }
            if (B->heuristic == 2) { e.k[0] = t; e.k[1] = w; e.k[2] = a; }
            pre[m++] = e;
        }
    B->work += m;
    bpre_sort(pre, pre + m + 1, m);
    for (size_t q = 0; q < m; q++) list[q] = (bcand){0, (uint32_t)q, pre[q].i};
    free(pre);
    int r = bb_search(B, plo, phi, list, m, 0, 0);
    bb_release(B, save);
    return r;
}

/* Solves the whole instance once under the current heuristic and limit. */
static int bb_solve_all(bb *B)
{
    size_t ns = B->s.ns, a = 0;
    int r = BB_FOUND;
    for (size_t q = 0; q < ns && r == BB_FOUND; q++) {
        if (q + 1 < ns && B->cuts[q] != 0) continue;
        r = bb_solve_part(B, a, q + 1);
        a = q + 1;
    }
    return r;
}

ms_status dsa_bb_decide(const dsa_instance *in, uint64_t capacity_bytes, uint64_t work_budget,
                        uint64_t *offsets, dsa_result *res, uint64_t *work_used, ms_error *err)
{
    size_t n = in->n;
    uint64_t used = 0;
    *res = DSA_TIMEOUT;
    if (n == 0) { *res = DSA_OK; goto out; }
    if (n > DSA_BB_MAX_BUFFERS)
        return ms_fail(err, MS_ERR_LIMIT, "branch-and-bound takes at most %d buffers, got %zu",
                       DSA_BB_MAX_BUFFERS, n);
    if (dsa_load(in) > capacity_bytes) { *res = DSA_INFEASIBLE; goto out; }
    bb B;
    if (bb_init(&B, in, capacity_bytes) != MS_OK) {
        bb_free(&B);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    uint64_t limit = 64 * (uint64_t)n;
    for (;;) {
        int r = BB_ABORT;
        for (int h = 0; h < 3 && r == BB_ABORT && used < work_budget; h++) {
            uint64_t room = work_budget - used;
            B.heuristic = h;
            B.work = 0;
            B.limit = limit < room ? limit : room;
            r = bb_solve_all(&B);
            used += B.work;
            if (B.nomem) {
                bb_free(&B);
                return ms_fail(err, MS_ERR_NOMEM, "out of memory");
            }
        }
        if (r == BB_FOUND) { *res = DSA_OK; memcpy(offsets, B.sol, n * sizeof *offsets); }
        if (r == BB_FAIL) *res = DSA_INFEASIBLE;
        if (r != BB_ABORT || used >= work_budget) break;
        limit *= 2;
    }
    bb_free(&B);
out:
    if (work_used) *work_used = used;
    return MS_OK;
}

/* ======================================================================================
 * MEMO's MIP (MEMO §4.2) with lp_solve
 *
 *   min M  s.t.  A_i + S_i <= M                          for every buffer i
 *                A_i + S_i <= A_j + z_ij * U             for every lifetime-overlapping
 *                A_j + S_j <= A_i + (1 - z_ij) * U         pair (i, j), z_ij binary
 *                lower <= M <= upper - 1,  0 <= A_i <= upper - S_i
 * with big-M U = upper, a known feasible peak (greedy's): asking only for strictly better
 * peaks makes "infeasible" a proof that upper is optimal. Offsets are continuous by
 * default (for fixed z the constraints are difference constraints, so optimal offsets are
 * integral anyway); the solution is re-stacked in the order of its offsets, which gives
 * integer offsets with a peak no higher. The effort limit is a count of branch-and-bound
 * nodes and of simplex iterations (scaled by the LP's rows) checked in lp_solve's abort
 * callback, never its wall-clock timeout, so that results do not depend on the machine.
 * ====================================================================================== */

/* MIP work units per lp_solve branch-and-bound node (a knob: measured about 10^4 nodes/s
 * on 30-buffer models on the calibration box, i.e. 6e8 / 1e4 units), and per simplex
 * iteration and LP row (measured as said at dsa_mip). */
#define DSA_MIP_WORK_PER_NODE 60000
#define DSA_MIP_WORK_PER_ROW_ITER 16

#ifdef HAVE_LPSOLVE

static int overlaps(const sections *s, size_t a, size_t b)
{
    return s->sl[a] < s->su[b] && s->sl[b] < s->su[a];
}

typedef struct mip_limit { long long nodes, iters; } mip_limit;

static int __WINAPI mip_abort(lprec *lp, void *h)
{
    const mip_limit *m = h;
    return get_total_nodes(lp) > m->nodes || get_total_iter(lp) > m->iters;
}

typedef struct mip_sort { double a; size_t i; } mip_sort;

static int cmp_mip_sort(const void *x, const void *y)
{
    const mip_sort *a = x, *b = y;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* Builds the model; returns NULL when out of memory. Columns: A_1..A_n, M, then z. */
static lprec *mip_build(const dsa_instance *in, const sections *s, uint64_t lower,
                        uint64_t upper, int integer_offsets)
{
    size_t n = in->n, np = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) np += overlaps(s, i, j);
    int ncol = (int)(n + 1 + np), colM = (int)n + 1;
    lprec *lp = make_lp(0, ncol);
    if (!lp) return NULL;
    set_verbose(lp, NEUTRAL);
    double U = (double)upper;
    int ok = set_add_rowmode(lp, TRUE);
    double row[3];
    int col[3];
    for (size_t i = 0; i < n && ok; i++) {
        double S = (double)in->b[i].size_bytes;
        row[0] = 1; col[0] = (int)i + 1; row[1] = -1; col[1] = colM;
        ok = add_constraintex(lp, 2, row, col, LE, -S);
    }
    int z = colM;
    for (size_t i = 0; i < n && ok; i++)
        for (size_t j = i + 1; j < n && ok; j++) {
            if (!overlaps(s, i, j)) continue;
            z++;
            double Si = (double)in->b[i].size_bytes, Sj = (double)in->b[j].size_bytes;
            /* A_i - A_j - U z <= -S_i  and  A_j - A_i + U z <= U - S_j */
            row[0] = 1; col[0] = (int)i + 1; row[1] = -1; col[1] = (int)j + 1;
            row[2] = -U; col[2] = z;
            ok = add_constraintex(lp, 3, row, col, LE, -Si);
            row[0] = -1; row[1] = 1; row[2] = U;
            if (ok) ok = add_constraintex(lp, 3, row, col, LE, U - Sj);
        }
    if (ok) ok = set_add_rowmode(lp, FALSE);
    for (size_t i = 0; i < n && ok; i++) {
        ok = set_upbo(lp, (int)i + 1, U - (double)in->b[i].size_bytes);
        if (ok && integer_offsets) ok = set_int(lp, (int)i + 1, TRUE);
    }
    for (int c = colM + 1; c <= ncol && ok; c++) ok = set_binary(lp, c, TRUE);
    if (ok) ok = set_lowbo(lp, colM, (double)lower) && set_upbo(lp, colM, U - 1);
    row[0] = 1; col[0] = colM;
    if (ok) ok = set_obj_fnex(lp, 1, row, col);
    set_minim(lp);
    /* lp_solve's default MIP gaps: a looser absolute gap (0.5, tempting since the peak is
     * integral) made it stop above the optimum on random 12-buffer instances */
    if (!ok) { delete_lp(lp); return NULL; }
    return lp;
}

ms_status dsa_mip(const dsa_instance *in, uint64_t lower_bytes, uint64_t upper_bytes,
                  uint64_t node_budget, int integer_offsets, uint64_t *offsets,
                  uint64_t *peak_bytes, uint64_t *bound_bytes, int *found, dsa_result *res,
                  uint64_t *nodes_used, ms_error *err)
{
    size_t n = in->n;
    *found = 0;
    if (nodes_used) *nodes_used = 0;
    if (n > DSA_MIP_MAX_BUFFERS)
        return ms_fail(err, MS_ERR_LIMIT, "the MIP takes at most %d buffers, got %zu",
                       DSA_MIP_MAX_BUFFERS, n);
    *res = DSA_OK;
    *bound_bytes = upper_bytes;
    if (n == 0 || lower_bytes >= upper_bytes) return MS_OK; /* upper is already optimal */
    sections s;
    if (sections_build(in, &s) != MS_OK) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    lprec *lp = mip_build(in, &s, lower_bytes, upper_bytes, integer_offsets);
    if (!lp) {
        sections_free(&s);
        return ms_fail(err, MS_ERR_NOMEM, "cannot build the MIP");
    }
    /* Nodes bound the search; simplex iterations bound each LP, whose cost grows with its
     * rows (a 154-buffer instance with 4642 overlapping pairs, 9438 rows: 2000 iterations
     * took 0.45 s on the 2-core build box, about 14 work units per row and iteration). */
    long long rows = get_Nrows(lp) > 0 ? get_Nrows(lp) : 1;
    long long by_work = (long long)(node_budget * DSA_MIP_WORK_PER_NODE) /
                        (DSA_MIP_WORK_PER_ROW_ITER * rows);
    long long iters = 1000 * (long long)node_budget + 100000;
    if (by_work < iters) iters = by_work > 1000 ? by_work : 1000;
    mip_limit lim = {(long long)node_budget, iters};
    put_abortfunc(lp, mip_abort, &lim);
    int ret = solve(lp);
    if (nodes_used) *nodes_used = (uint64_t)get_total_nodes(lp);
    ms_status st = MS_OK;
    int have = (ret == OPTIMAL || ret == SUBOPTIMAL || ret == USERABORT) &&
               get_solutioncount(lp) > 0;
    if (have) {
        REAL *var;
        mip_sort *ms = malloc(n * sizeof *ms);
        size_t *order = malloc(n * sizeof *order);
        if (!ms || !order || !get_ptr_variables(lp, &var)) {
            st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
        } else {
            for (size_t i = 0; i < n; i++) ms[i] = (mip_sort){var[i], i};
            qsort(ms, n, sizeof *ms, cmp_mip_sort);
            for (size_t i = 0; i < n; i++) order[i] = ms[i].i;
            uint64_t p = stack_in_order(in, order, offsets);
            *peak_bytes = p;
            *found = p < upper_bytes;
        }
        free(ms);
        free(order);
    }
    if (ret == OPTIMAL && *found) {
        *bound_bytes = *peak_bytes;
    } else if (ret == INFEASIBLE) {
        *bound_bytes = upper_bytes; /* nothing below upper: upper is optimal */
    } else if (ret == OPTIMAL || ret == SUBOPTIMAL || ret == USERABORT) {
        *res = DSA_TIMEOUT;
        *bound_bytes = lower_bytes;
    } else {
        st = ms_fail(err, MS_ERR_INVALID, "lp_solve failed (solve returned %d)", ret);
    }
    delete_lp(lp);
    sections_free(&s);
    return st;
}

int dsa_have_mip(void) { return 1; }

#else

ms_status dsa_mip(const dsa_instance *in, uint64_t lower_bytes, uint64_t upper_bytes,
                  uint64_t node_budget, int integer_offsets, uint64_t *offsets,
                  uint64_t *peak_bytes, uint64_t *bound_bytes, int *found, dsa_result *res,
                  uint64_t *nodes_used, ms_error *err)
{
    (void)in; (void)lower_bytes; (void)upper_bytes; (void)node_budget; (void)integer_offsets;
    (void)offsets; (void)peak_bytes; (void)bound_bytes;
    if (nodes_used) *nodes_used = 0;
    *found = 0;
    *res = DSA_TIMEOUT;
    return ms_fail(err, MS_ERR_UNSUPPORTED, "this build has no lp_solve (MIP unavailable)");
}

int dsa_have_mip(void) { return 0; }

#endif

/* Fills total[i]: the largest sum of live sizes over buffer i's sections (a bottom-up
 * segment tree answers each range maximum in O(log sections), in O(sections) memory). */
static ms_status section_totals(const dsa_instance *in, const sections *s, uint64_t *total)
{
    size_t ns = s->ns ? s->ns : 1, P = 1;
    while (P < ns) P *= 2;
    uint64_t *sec = calloc(ns + 1, sizeof *sec);
    uint64_t *tab = calloc(2 * P, sizeof *tab);
    if (!sec || !tab) { free(sec); free(tab); return MS_ERR_NOMEM; }
    for (size_t i = 0; i < in->n; i++) { /* difference array */
        sec[s->sl[i]] += in->b[i].size_bytes;
        sec[s->su[i]] -= in->b[i].size_bytes;
    }
    for (size_t k = 1; k <= ns; k++) sec[k] += sec[k - 1];
    memcpy(tab + P, sec, ns * sizeof *tab);
    for (size_t k = P - 1; k >= 1; k--) tab[k] = MAX64(tab[2 * k], tab[2 * k + 1]);
    for (size_t i = 0; i < in->n; i++) {
        uint64_t v = 0;
        for (size_t a = (size_t)s->sl[i] + P, b = (size_t)s->su[i] + P; a < b; a /= 2, b /= 2) {
            if (a & 1) { v = MAX64(v, tab[a]); a++; }
            if (b & 1) { b--; v = MAX64(v, tab[b]); }
        }
        total[i] = v;
    }
    free(sec);
    free(tab);
    return MS_OK;
}

/* ======================================================================================
 * The heuristic portfolio (method "greedy"): fit placements over several orderings, then
 * skyline placements over several priorities, the later ones perturbed by seeded noise.
 * ====================================================================================== */

typedef struct gkey {
    size_t i;
    uint64_t size;
    int64_t len, lower, upper;
    double area;
    uint64_t total; /* the largest LOAD over the sections this buffer lives in */
    double noise;   /* multiplies area in the perturbed skyline priorities */
} gkey;

static int cmp_u64_desc(uint64_t a, uint64_t b) { return (a < b) - (a > b); }
static int cmp_i64_desc(int64_t a, int64_t b) { return (a < b) - (a > b); }
static int cmp_idx(const gkey *a, const gkey *b) { return (a->i > b->i) - (a->i < b->i); }
static int log4(uint64_t x) { int r = 0; while (x >= 4) { x >>= 2; r++; } return r; }

static int by_size(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    int c = cmp_u64_desc(a->size, b->size);
    if (!c) c = cmp_i64_desc(a->len, b->len);
    return c ? c : cmp_idx(a, b);
}
static int by_len(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    int c = cmp_i64_desc(a->len, b->len);
    return c ? c : by_size(x, y);
}
static int by_area(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    if (a->area != b->area) return a->area < b->area ? 1 : -1;
    return by_size(x, y);
}
static int by_noisy_area(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    double va = a->area * a->noise, vb = b->area * b->noise;
    if (va != vb) return va < vb ? 1 : -1;
    return by_size(x, y);
}
/* size classes a factor 4 apart, longest lifetime first within a class */
static int by_size_class(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    int c = log4(b->size) - log4(a->size);
    return c ? c : by_len(x, y);
}
/* lifetime classes a factor 4 apart, largest first within a class */
static int by_len_class(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    int c = log4((uint64_t)b->len) - log4((uint64_t)a->len);
    return c ? c : by_size(x, y);
}
static int by_total(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    int c = cmp_u64_desc(a->total, b->total);
    return c ? c : by_size(x, y);
}
static int by_total_len(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    int c = cmp_u64_desc(a->total, b->total);
    return c ? c : by_len(x, y);
}
static int by_lower(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    if (a->lower != b->lower) return a->lower < b->lower ? -1 : 1;
    return by_size(x, y);
}
static int by_upper(const void *x, const void *y)
{
    const gkey *a = x, *b = y;
    int c = cmp_i64_desc(a->upper, b->upper);
    return c ? c : by_size(x, y);
}

typedef struct gorder { const char *name; int (*cmp)(const void *, const void *); } gorder;

/* Fit orderings, most useful first on the benchmark instances (larger instances try only
 * a prefix). */
static const gorder FIT_ORDERS[] = {
    {"size-class", by_size_class}, {"size", by_size},     {"total", by_total},
    {"area", by_area},         {"length", by_len},            {"length-class", by_len_class},
    {"total+length", by_total_len}, {"lower", by_lower},      {"upper", by_upper},
};
#define NFIT (sizeof FIT_ORDERS / sizeof FIT_ORDERS[0])

/* Skyline priorities tried before the perturbed ones. Priorities favouring long lifetimes
 * make the lazy heap re-key long buffers many times (up to ~1000 pops per buffer on the
 * largest benchmark), so instances above SKY_CHEAP_MAX buffers skip them. */
static const gorder SKY_ORDERS[] = {
    {"area", by_area}, {"size", by_size}, {"total+length", by_total_len}, {"length", by_len},
};
#define NSKY (sizeof SKY_ORDERS / sizeof SKY_ORDERS[0])
#define SKY_CHEAP_MAX 4000
static size_t sky_orders_for(size_t n) { return n <= SKY_CHEAP_MAX ? NSKY : 2; }

/* Knobs: how many fit runs an instance of n buffers gets (each costs O(n x live)), the
 * spread of the multiplicative noise on area in perturbed skyline priorities, and how many
 * perturbed runs without a gain end them. */
static size_t fit_runs_for(size_t n)
{
    if (n <= 4000) return 2 * NFIT;
    if (n <= 12000) return 6;
    return 2;
}
#define SKY_NOISE 0.3
#define SKY_STALL 64

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The mean number of buffers whose lifetime overlaps a buffer's (itself included):
 * n - #(upper_j <= lower_i) - #(lower_j >= upper_i), averaged; -1 when out of memory. */
static double mean_overlap(const sections *s)
{
    size_t n = s->n;
    int32_t *lo = malloc((n + 1) * sizeof *lo), *up = malloc((n + 1) * sizeof *up);
    if (!lo || !up) { free(lo); free(up); return -1; }
    memcpy(lo, s->sl, n * sizeof *lo);
    memcpy(up, s->su, n * sizeof *up);
    qsort(lo, n, sizeof *lo, cmp_i32);
    qsort(up, n, sizeof *up, cmp_i32);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        size_t a = 0, b = n; /* uppers <= sl[i] */
        while (a < b) { size_t m = (a + b) / 2; if (up[m] <= s->sl[i]) a = m + 1; else b = m; }
        size_t ends_before = a;
        a = 0; b = n;        /* lowers < su[i] */
        while (a < b) { size_t m = (a + b) / 2; if (lo[m] < s->su[i]) a = m + 1; else b = m; }
        sum += (double)(a - ends_before);
    }
    free(lo);
    free(up);
    return n ? sum / (double)n : 0;
}

/* The interval tree places instances of at least GTREE_MIN buffers whose buffers overlap
 * on average at most 1 / GTREE_RATIO of the others; the chunk list all others. */
#define GTREE_MIN 32768
#define GTREE_RATIO 64

typedef struct heur {
    const dsa_instance *in;
    sections s;
    gkey *key;
    size_t *order;
    uint32_t *rank;
    uint64_t *off, *off2;
    gplace g;
    skyline sky;
    uint64_t *best_off;   /* caller's array */
    uint64_t best_peak;
    char best_how[40];
    uint64_t stop_at;     /* a plan this low ends the search */
    glimit lim;           /* the stage's effort limit */
    uint64_t work;
    size_t sky_runs;      /* skyline runs done so far (the next seed) */
} heur;

static void heur_free(heur *h)
{
    sections_free(&h->s);
    free(h->key); free(h->order); free(h->rank); free(h->off); free(h->off2);
    gplace_free(&h->g);
    skyline_free(&h->sky);
}

static ms_status heur_init(heur *h, const dsa_instance *in, uint64_t *best_off,
                           uint64_t best_peak, uint64_t stop_at)
{
    size_t n = in->n;
    memset(h, 0, sizeof *h);
    h->in = in;
    h->best_off = best_off;
    h->best_peak = best_peak;
    h->stop_at = stop_at;
    uint64_t *total = malloc((n + 1) * sizeof *total);
    h->key = malloc((n + 1) * sizeof *h->key);
    h->order = malloc((n + 1) * sizeof *h->order);
    h->rank = malloc((n + 1) * sizeof *h->rank);
    h->off = malloc((n + 1) * sizeof *h->off);
    h->off2 = malloc((n + 1) * sizeof *h->off2);
    if (!total || !h->key || !h->order || !h->rank || !h->off || !h->off2 ||
        sections_build(in, &h->s) != MS_OK || skyline_init(&h->sky, &h->s) != MS_OK ||
        section_totals(in, &h->s, total) != MS_OK) {
        free(total);
        return MS_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const dsa_buffer *b = &in->b[i];
        h->key[i] = (gkey){i, b->size_bytes, b->upper - b->lower, b->lower, b->upper,
                           (double)b->size_bytes * (double)(b->upper - b->lower), total[i], 1};
    }
    free(total);
    h->lim = (glimit){NONE64, 0, 0};
    if (n >= GTREE_MIN) {
        double mo = mean_overlap(&h->s);
        if (mo < 0) return MS_ERR_NOMEM;
        if (mo * GTREE_RATIO <= (double)n && gplace_tree_init(&h->g, n, h->s.ns) != MS_OK)
            return MS_ERR_NOMEM;
    }
    return MS_OK;
}

static int heur_done(const heur *h) { return h->best_peak <= h->stop_at; }
static int heur_over(heur *h) { return glimit_over(&h->lim, h->work); }

static void heur_offer(heur *h, const uint64_t *off, uint64_t peak, const char *how, int seed)
{
    if (peak >= h->best_peak) return;
    h->best_peak = peak;
    memcpy(h->best_off, off, h->in->n * sizeof *off);
    snprintf(h->best_how, sizeof h->best_how, seed ? "%s~%d" : "%s", how, seed);
}

/* Fit runs: each ordering with first fit, then best fit, while the limit allows; the first
 * run always ends with a plan (stacking what it had no time to place). */
static ms_status heur_fits(heur *h)
{
    size_t n = h->in->n, runs = fit_runs_for(n);
    for (size_t r = 0; r < runs && !heur_done(h) && (r == 0 || !heur_over(h)); r++) {
        const gorder *go = &FIT_ORDERS[(r / 2) % NFIT];
        int best_fit = (int)(r % 2);
        if (!best_fit) qsort(h->key, n, sizeof *h->key, go->cmp);
        for (size_t k = 0; k < n; k++) h->order[k] = h->key[k].i;
        uint64_t p = greedy_run(h->in, &h->s, h->order, best_fit, h->best_peak, &h->g, h->off,
                                &h->work, &h->lim, r == 0);
        if (p == NONE64) return MS_ERR_NOMEM;
        char how[40];
        snprintf(how, sizeof how, "%s-fit/%s%s", best_fit ? "best" : "first", go->name,
                 r == 0 && h->lim.hit ? "+stacked" : "");
        heur_offer(h, h->off, p, how, 0);
    }
    return MS_OK;
}

/* A uniform number in [0, 1) from (seed, i) (splitmix64): the perturbation of buffer i
 * depends on nothing else, so runs are reproducible. */
static double heur_uniform(uint64_t seed, uint64_t i)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static int cmp_hentry(const void *x, const void *y)
{
    const hentry *a = x, *b = y;
    return hless(a, b) ? -1 : hless(b, a) ? 1 : 0;
}

/* One skyline run under the given order, then a first-fit pass in the order of the
 * resulting offsets (ties by rank), which can only lower the plan — each buffer's old
 * offset stays free for it — and fills holes the skyline leaves. */
static ms_status heur_skyline_one(heur *h, int (*cmp)(const void *, const void *),
                                  const char *name, int seed)
{
    size_t n = h->in->n;
    qsort(h->key, n, sizeof *h->key, cmp);
    for (size_t k = 0; k < n; k++) h->rank[h->key[k].i] = (uint32_t)k;
    uint64_t p = skyline_run(&h->sky, h->in, &h->s, h->rank, h->best_peak, h->off, &h->work,
                             &h->lim);
    h->sky_runs++;
    if (p >= h->best_peak) return MS_OK;
    heur_offer(h, h->off, p, name, seed);
    if (heur_done(h)) return MS_OK;
    hentry *e = h->sky.heap; /* free between runs */
    for (size_t i = 0; i < n; i++) e[i] = (hentry){h->off[i], h->rank[i], (uint32_t)i};
    qsort(e, n, sizeof *e, cmp_hentry);
    for (size_t k = 0; k < n; k++) h->order[k] = e[k].i;
    uint64_t q = greedy_run(h->in, &h->s, h->order, 0, h->best_peak, &h->g, h->off2, &h->work,
                            &h->lim, 0);
    if (q == NONE64) return MS_ERR_NOMEM;
    char how[40];
    snprintf(how, sizeof how, "%s+compact", name);
    heur_offer(h, h->off2, q, how, seed);
    return MS_OK;
}

/* Skyline runs until the plan reaches stop_at: the fixed priorities always (they are few
 * and cheap next to an exact search), then, while the work is below budget and if
 * perturb, area priorities with seeded noise. */
static ms_status heur_skyline(heur *h, uint64_t budget, int perturb)
{
    size_t n = h->in->n;
    ms_status st = MS_OK;
    size_t fixed = sky_orders_for(n);
    for (size_t r = 0; r < fixed && st == MS_OK && !heur_done(h) && !heur_over(h); r++) {
        char name[40];
        snprintf(name, sizeof name, "skyline/%s", SKY_ORDERS[r].name);
        st = heur_skyline_one(h, SKY_ORDERS[r].cmp, name, 0);
    }
    /* perturbed runs stop early once they stall: SKY_STALL + 4x the seed of the last
     * improvement without a better plan (tiny instances have few distinct orders) */
    int last_gain = 0;
    for (int seed = 1; perturb && st == MS_OK && !heur_done(h) && h->work < budget &&
                       !heur_over(h) &&
                       seed <= SKY_STALL + 4 * last_gain; seed++) {
        uint64_t before = h->best_peak;
        for (size_t k = 0; k < n; k++)
            h->key[k].noise =
                1 + SKY_NOISE * (2 * heur_uniform((uint64_t)seed, h->key[k].i) - 1);
        st = heur_skyline_one(h, by_noisy_area, "skyline/area", seed);
        if (h->best_peak < before) last_gain = seed;
    }
    return st;
}

ms_status dsa_greedy(const dsa_instance *in, uint64_t stop_at_bytes, uint64_t *offsets,
                     uint64_t *peak_bytes, ms_error *err)
{
    heur h;
    *peak_bytes = 0;
    if (in->n == 0) return MS_OK;
    ms_status st = heur_init(&h, in, offsets, NONE64 - 1, stop_at_bytes);
    if (st == MS_OK) st = heur_fits(&h);
    if (st == MS_OK) st = heur_skyline(&h, NONE64, 0); /* the fixed skyline priorities */
    *peak_bytes = h.best_peak;
    heur_free(&h);
    return st == MS_OK ? MS_OK : ms_fail(err, st, "out of memory");
}

/* ======================================================================================
 * Names, options, dsa_solve
 * ====================================================================================== */

const char *dsa_method_name(dsa_method m)
{
    switch (m) {
    case DSA_GREEDY: return "greedy";
    case DSA_BB: return "bb";
    case DSA_MIP: return "mip";
    case DSA_AUTO: return "auto";
    }
    return "?";
}

int dsa_method_parse(const char *s, dsa_method *out)
{
    static const dsa_method all[] = {DSA_GREEDY, DSA_BB, DSA_MIP, DSA_AUTO};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (strcmp(s, dsa_method_name(all[k])) == 0) { *out = all[k]; return 1; }
    return 0;
}

const char *dsa_result_name(dsa_result r)
{
    switch (r) {
    case DSA_OK: return "ok";
    case DSA_INFEASIBLE: return "infeasible";
    case DSA_TIMEOUT: return "timeout";
    }
    return "?";
}

void dsa_options_default(dsa_options *o)
{
    memset(o, 0, sizeof *o);
    o->time_limit_s = 10;
    o->methods = DSA_AUTO;
    o->work_per_s = DSA_WORK_PER_S;
    o->bb_max_buffers = 2000;
    o->mip_max_buffers = 40;
}

void dsa_solution_free(dsa_solution *s)
{
    if (!s) return;
    free(s->offsets);
    s->offsets = NULL;
}

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The state of one dsa_solve call. */
typedef struct solver {
    const dsa_instance *in;
    const dsa_options *opt;
    dsa_solution *sol;
    uint64_t *tmp;          /* scratch plan */
    uint64_t budget, used;  /* work */
    uint64_t lb;            /* proven lower bound on the minimal peak */
    int infeasible;         /* capacity mode: proven not to fit */
    double deadline;        /* wall-clock backstop of the heuristics (0: none) */
    int timed_out;          /* the heuristics stopped at the limit */
} solver;

/* The peak that ends a minimization: the lower bound, or within rel_gap of it. */
static uint64_t solver_target(const solver *v)
{
    double t = (double)v->lb * (1 + v->opt->rel_gap);
    return t >= (double)NONE64 / 2 ? NONE64 / 2 : (uint64_t)t;
}

static int solver_done(const solver *v)
{
    uint64_t cap = v->opt->capacity_bytes;
    if (v->infeasible) return 1;
    return cap ? v->sol->peak_bytes <= cap : v->sol->peak_bytes <= solver_target(v);
}

static void solver_offer(solver *v, const uint64_t *off, uint64_t peak, dsa_method m,
                         const char *how)
{
    if (peak >= v->sol->peak_bytes) return;
    memcpy(v->sol->offsets, off, v->in->n * sizeof *off);
    v->sol->peak_bytes = peak;
    v->sol->method = m;
    snprintf(v->sol->detail, sizeof v->sol->detail, "%s", how);
}

static ms_status solver_heuristics(solver *v, int bb_follows, ms_error *err)
{
    uint64_t cap = v->opt->capacity_bytes;
    heur h;
    ms_status st = heur_init(&h, v->in, v->tmp, NONE64 - 1, cap ? cap : solver_target(v));
    uint64_t room = v->budget > v->used ? v->budget - v->used : 0;
    /* every run stops at the budget (the first fit run then stacks what it had no time to
     * place), and at the wall-clock backstop */
    h.lim = (glimit){room, v->deadline, 0};
    if (st == MS_OK) st = heur_fits(&h);
    /* the skyline gets all the budget when nothing follows, a fiftieth when an exact
     * method does (its first descent is a skyline run itself) */
    room = v->budget > v->used ? v->budget - v->used : 0;
    uint64_t sky_budget = bb_follows ? room / 50 : room;
    if (st == MS_OK) st = heur_skyline(&h, h.work + sky_budget, 1);
    v->timed_out |= h.lim.hit;
    v->used += h.work;
    if (st == MS_OK && h.best_peak < NONE64 - 1)
        solver_offer(v, v->tmp, h.best_peak, DSA_GREEDY, h.best_how);
    heur_free(&h);
    return st == MS_OK ? MS_OK : ms_fail(err, st, "out of memory");
}

/* Capacity mode: one decision. Minimize mode: LOAD first (instances packed tight are
 * often found fast), then bisection between what is ruled out and the best plan; each
 * probe gets half of the budget left. A probe that runs out rules its capacity out of
 * the search but proves nothing. */
static ms_status solver_bb(solver *v, uint64_t budget, ms_error *err)
{
    uint64_t cap = v->opt->capacity_bytes, stop = v->used + budget;
    if (cap) {
        dsa_result r;
        uint64_t w = 0;
        ms_status st = dsa_bb_decide(v->in, cap, budget, v->tmp, &r, &w, err);
        v->used += w;
        if (st != MS_OK) return st;
        if (r == DSA_OK) {
            uint64_t p;
            if ((st = dsa_check(v->in, v->tmp, cap, &p, err)) != MS_OK) return st;
            solver_offer(v, v->tmp, p, DSA_BB, "bb");
        }
        if (r == DSA_INFEASIBLE) v->infeasible = 1;
        return MS_OK;
    }
    uint64_t lo = v->lb;
    for (int first = 1; lo < v->sol->peak_bytes && v->used < stop && !solver_done(v);
         first = 0) {
        uint64_t hi = v->sol->peak_bytes - 1, c = first ? lo : lo + (hi - lo) / 2;
        uint64_t w = 0, probe = (stop - v->used) / 2 + 1;
        dsa_result r;
        ms_status st = dsa_bb_decide(v->in, c, probe, v->tmp, &r, &w, err);
        v->used += w;
        if (st != MS_OK) return st;
        if (r == DSA_OK) {
            uint64_t p;
            if ((st = dsa_check(v->in, v->tmp, c, &p, err)) != MS_OK) return st;
            solver_offer(v, v->tmp, p, DSA_BB, "bb");
        } else {
            lo = c + 1;
            if (r == DSA_INFEASIBLE && c + 1 > v->lb) v->lb = c + 1;
        }
    }
    return MS_OK;
}

static ms_status solver_mip(solver *v, uint64_t budget, ms_error *err)
{
    uint64_t cap = v->opt->capacity_bytes;
    /* capacity mode asks for any plan below cap + 1, else for one below the best */
    uint64_t upper = cap ? cap + 1 : v->sol->peak_bytes;
    if (cap && upper > v->sol->peak_bytes) upper = v->sol->peak_bytes;
    uint64_t nodes = budget / DSA_MIP_WORK_PER_NODE + 1, p = 0, bound;
    int found;
    dsa_result r;
    ms_status st = dsa_mip(v->in, v->lb, upper, nodes, v->opt->mip_integer_offsets, v->tmp, &p,
                           &bound, &found, &r, &nodes, err);
    v->used += nodes * DSA_MIP_WORK_PER_NODE;
    if (st != MS_OK) return st;
    if (found) {
        if ((st = dsa_check(v->in, v->tmp, 0, &p, err)) != MS_OK) return st;
        solver_offer(v, v->tmp, p, DSA_MIP, "mip");
    }
    if (bound > v->lb) v->lb = bound;
    if (cap && r == DSA_OK && !found && upper == cap + 1) v->infeasible = 1;
    return MS_OK;
}

static void solver_finish(solver *v)
{
    dsa_solution *s = v->sol;
    uint64_t cap = v->opt->capacity_bytes;
    if (v->lb > s->peak_bytes) v->lb = s->peak_bytes; /* cannot happen; keeps gap >= 0 */
    s->lower_bound_bytes = v->lb;
    s->gap = v->lb ? (double)(s->peak_bytes - v->lb) / (double)v->lb : 0;
    if (cap) {
        s->status = s->peak_bytes <= cap ? DSA_OK : v->infeasible ? DSA_INFEASIBLE : DSA_TIMEOUT;
        if (v->infeasible && cap + 1 > s->lower_bound_bytes) {
            s->lower_bound_bytes = cap + 1 < s->peak_bytes ? cap + 1 : s->peak_bytes;
            s->gap = (double)(s->peak_bytes - s->lower_bound_bytes) /
                     (double)s->lower_bound_bytes;
        }
    } else {
        s->status = s->peak_bytes <= solver_target(v) ? DSA_OK : DSA_TIMEOUT;
    }
    s->work = v->used;
}

ms_status dsa_solve(const dsa_instance *in, const dsa_options *opt, dsa_solution *sol,
                    ms_error *err)
{
    double t0 = wall_s();
    size_t n = in->n;
    memset(sol, 0, sizeof *sol);
    dsa_options o = *opt;
    unsigned m = o.methods ? o.methods : DSA_AUTO;
    if (o.work_per_s <= 0) o.work_per_s = DSA_WORK_PER_S;
    if (!(o.time_limit_s >= 0 && o.time_limit_s <= 1e7))
        return ms_fail(err, MS_ERR_INVALID, "time limit must be between 0 and 1e7 s");
    if (!(o.rel_gap >= 0 && o.rel_gap <= 1e3))
        return ms_fail(err, MS_ERR_INVALID, "relative gap must be between 0 and 1000");
    if ((m & ~(unsigned)DSA_AUTO) || (m == DSA_MIP && !dsa_have_mip()))
        return ms_fail(err, MS_ERR_UNSUPPORTED, m == DSA_MIP
                       ? "this build has no lp_solve (MIP unavailable)" : "unknown method");
    sol->n = n;
    sol->offsets = calloc(n + 1, sizeof *sol->offsets);
    uint64_t *tmp = malloc((n + 1) * sizeof *tmp);
    if (!sol->offsets || !tmp) {
        free(tmp);
        dsa_solution_free(sol);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    solver v = {in, &o, sol, tmp, 0, 0, 0, 0, 0, 0};
    v.budget = o.work_budget ? o.work_budget : (uint64_t)(o.time_limit_s * o.work_per_s);
    /* the work count is the limit (deterministic); the clock, where asked for, is only a
     * backstop against a machine slower than the calibration (or a loaded one) */
    if (!o.work_budget && o.clock_backstop > 0)
        v.deadline = t0 + o.clock_backstop * o.time_limit_s + 0.25;
    sol->load_bytes = v.lb = dsa_load(in);
    if (n == 0) { /* nothing to place: peak 0, which fits anything */
        free(tmp);
        sol->status = DSA_OK;
        sol->elapsed_s = wall_s() - t0;
        return MS_OK;
    }
    if (v.lb == 0) { /* only dsa_load running out of memory gives 0 for buffers of size > 0 */
        free(tmp);
        dsa_solution_free(sol);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    sol->peak_bytes = NONE64;
    sol->method = DSA_GREEDY;
    if (o.capacity_bytes && v.lb > o.capacity_bytes) v.infeasible = 1; /* LOAD proves it */
    /* auto: each exact method only where it scales; a method named alone runs up to its
     * hard limit and is an error beyond it */
    int explicit_one = m == DSA_BB || m == DSA_MIP;
    if ((m == DSA_BB && n > DSA_BB_MAX_BUFFERS) || (m == DSA_MIP && n > DSA_MIP_MAX_BUFFERS)) {
        free(tmp);
        dsa_solution_free(sol);
        return ms_fail(err, MS_ERR_LIMIT, "method %s takes at most %d buffers, got %zu",
                       dsa_method_name((dsa_method)m),
                       m == DSA_BB ? DSA_BB_MAX_BUFFERS : DSA_MIP_MAX_BUFFERS, n);
    }
    int use_bb = (m & DSA_BB) && n <= DSA_BB_MAX_BUFFERS &&
                 (explicit_one || n <= o.bb_max_buffers);
    int use_mip = (m & DSA_MIP) && dsa_have_mip() && n <= DSA_MIP_MAX_BUFFERS &&
                  (explicit_one || n <= o.mip_max_buffers);
    /* the heuristics always run first: they give the upper bound (MEMO's big-M) */
    ms_status st = solver_heuristics(&v, use_bb || use_mip, err);
    if (st == MS_OK && use_bb && !solver_done(&v)) {
        uint64_t room = v.budget > v.used ? v.budget - v.used : 0;
        st = solver_bb(&v, use_mip ? room / 2 : room, err);
    }
    if (st == MS_OK && use_mip && !solver_done(&v)) {
        uint64_t room = v.budget > v.used ? v.budget - v.used : 0;
        st = solver_mip(&v, room, err);
    }
    if (st == MS_OK) st = dsa_check(in, sol->offsets, 0, NULL, err);
    free(tmp);
    if (st != MS_OK) { dsa_solution_free(sol); return st; }
    solver_finish(&v);
    sol->elapsed_s = wall_s() - t0;
    return MS_OK;
}

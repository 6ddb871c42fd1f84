/* dsa.c — offline dynamic storage allocation's instances: building them, the CSV reader
 * and writer, LOAD, the checker every solver's plan passes, and the brute-force reference.
 * Used by the solvers (dsa_greedy.c, dsa_bb.c, dsa_mip.c, dsa_solve.c), the MEMO bi-level
 * planner (planners/), `memsim dsa` (sim/cmd_dsa.c) and tests/test_dsa.c. See dsa.h. */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "memory/dsa_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================================
 * Instances
 * ====================================================================================== */

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

void dsa_sections_free(sections *s)
{
    free(s->sl);
    free(s->su);
    memset(s, 0, sizeof *s);
}

ms_status dsa_sections_build(const dsa_instance *in, sections *s)
{
    size_t n = in->n;
    memset(s, 0, sizeof *s);
    s->n = n;
    int64_t *t = malloc((2 * n + 1) * sizeof *t);
    s->sl = malloc((n + 1) * sizeof *s->sl);
    s->su = malloc((n + 1) * sizeof *s->su);
    if (!t || !s->sl || !s->su) { free(t); dsa_sections_free(s); return MS_ERR_NOMEM; }
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
uint64_t dsa_stack_in_order(const dsa_instance *in, const size_t *order, uint64_t *off)
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
        uint64_t p = dsa_stack_in_order(in, perm, off);
        if (p < best) {
            best = p;
            memcpy(offsets, off, n * sizeof *off);
        }
    } while (next_perm(perm, n));
    *peak_bytes = n ? best : 0;
    return MS_OK;
}

/* dsa_bb.c — offline dynamic storage allocation's exact branch-and-bound for "fits in
 * capacity C" (dsa_bb_decide). Used by dsa_solve() (dsa_solve.c) and tests/test_dsa.c.
 * See dsa.h. */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "memory/dsa_int.h"

#include <stdlib.h>
#include <string.h>

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
    dsa_sections_free(&B->s);
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
    if (dsa_sections_build(in, &B->s) != MS_OK || bb_overlaps(B) != MS_OK) return MS_ERR_NOMEM;
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

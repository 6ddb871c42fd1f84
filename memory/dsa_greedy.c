/* dsa_greedy.c — offline dynamic storage allocation's heuristics (method "greedy"): fit
 * placements over an unrolled chunk list or an interval tree, skyline placements, and the
 * portfolio that runs them over several orderings under a work limit. Used by dsa_solve()
 * (dsa_solve.c, through dsa_heuristics) and by dsa_greedy()'s callers. See dsa.h. */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "memory/dsa_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static int glimit_over(glimit *l, uint64_t work)
{
    if (!l->hit && (work >= l->work || (l->deadline > 0 && dsa_wall_s() > l->deadline))) l->hit = 1;
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
    dsa_sections_free(&h->s);
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
        dsa_sections_build(in, &h->s) != MS_OK || skyline_init(&h->sky, &h->s) != MS_OK ||
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

/* The portfolio as dsa_solve runs it: every run stops at the budget (the first fit run then
 * stacks what it had no time to place), and at the wall-clock backstop. */
ms_status dsa_heuristics(const dsa_instance *in, uint64_t *off, uint64_t stop_at,
                         uint64_t room, double deadline, int exact_follows,
                         dsa_heur_result *r)
{
    heur h;
    ms_status st = heur_init(&h, in, off, NONE64 - 1, stop_at);
    h.lim = (glimit){room, deadline, 0};
    if (st == MS_OK) st = heur_fits(&h);
    /* the skyline gets all the budget when nothing follows, a fiftieth when an exact
     * method does (its first descent is a skyline run itself) */
    uint64_t sky_budget = exact_follows ? room / 50 : room;
    if (st == MS_OK) st = heur_skyline(&h, h.work + sky_budget, 1);
    r->work = h.work;
    r->hit = h.lim.hit;
    r->peak = h.best_peak;
    snprintf(r->how, sizeof r->how, "%s", h.best_how);
    heur_free(&h);
    return st;
}

double dsa_wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

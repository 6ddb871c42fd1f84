/* dsa_mip.c — offline dynamic storage allocation's MIP (MEMO §4.2) solved with lp_solve
 * (dsa_mip, dsa_have_mip). Used by dsa_solve() (dsa_solve.c) and tests/test_dsa.c.
 * See dsa.h. */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h" /* HAVE_LPSOLVE */
#endif
#include "memory/dsa_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_LPSOLVE
#include <lp_lib.h>
#endif

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

/* MIP work units per simplex iteration and LP row (measured as said at dsa_mip; those per
 * branch-and-bound node, which dsa_solve.c budgets with too, are in dsa_int.h). */
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
    if (dsa_sections_build(in, &s) != MS_OK) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    lprec *lp = mip_build(in, &s, lower_bytes, upper_bytes, integer_offsets);
    if (!lp) {
        dsa_sections_free(&s);
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
            uint64_t p = dsa_stack_in_order(in, order, offsets);
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
    dsa_sections_free(&s);
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

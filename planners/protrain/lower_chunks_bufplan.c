/* lower_chunks_bufplan.c — the chunk lowering's buffer plan (lc_bufplan, lower_chunks.h):
 * which gather fills which pre-allocated chunk buffer, and what releases it. Used by
 * planners/protrain/lower_chunks.c, the ProTrain cost model and tests. Rules in
 * docs/PROTRAIN.md. */
#include "planners/protrain/lower_chunks.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== buffer plan */

void lc_bufplan_clear(lc_bufplan *bp)
{
    if (!bp) return;
    free(bp->loads);
    free(bp->last_step);
    free(bp->chunk_buffer);
    memset(bp, 0, sizeof *bp);
}

/* Per chunk, the steps that need it (CSR), for next-use queries by binary search. */
typedef struct acc_index {
    uint32_t *off;   /* n_chunks + 1 */
    int32_t *steps;
} acc_index;

static int acc_build(const lc_layout *L, acc_index *A)
{
    A->off = calloc(L->n_chunks + 1, sizeof *A->off);
    A->steps = malloc((L->n_needs ? L->n_needs : 1) * sizeof *A->steps);
    if (!A->off || !A->steps) return -1;
    for (size_t i = 0; i < L->n_needs; i++) A->off[L->needs[i] + 1]++;
    for (size_t c = 0; c < L->n_chunks; c++) A->off[c + 1] += A->off[c];
    uint32_t *fill = calloc(L->n_chunks + 1, sizeof *fill);
    if (!fill) return -1;
    for (size_t s = 0; s < L->n_steps; s++) { /* steps in order: each list comes out sorted */
        const lc_step *S = &L->steps[s];
        for (uint32_t j = 0; j < S->n_need; j++) {
            uint32_t c = L->needs[S->need_first + j];
            A->steps[A->off[c] + fill[c]++] = (int32_t)s;
        }
    }
    free(fill);
    return 0;
}

static void acc_free(acc_index *A)
{
    free(A->off);
    free(A->steps);
}

/* Next step after s that needs chunk c (INT32_MAX: none). */
static int32_t next_use(const acc_index *A, uint32_t c, int32_t s)
{
    uint32_t lo = A->off[c], hi = A->off[c + 1];
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (A->steps[mid] <= s) lo = mid + 1;
        else hi = mid;
    }
    return lo < A->off[c + 1] ? A->steps[lo] : INT32_MAX;
}

static int step_needs(const lc_layout *L, int32_t s, int32_t c)
{
    const lc_step *st = &L->steps[s];
    for (uint32_t j = 0; j < st->n_need; j++)
        if ((int32_t)L->needs[st->need_first + j] == c) return 1;
    return 0;
}

ms_status lc_bufplan_make(const lc_layout *L, int n_persist, int n_buffer, const lc_knobs *k,
                          lc_bufplan *bp, ms_error *err)
{
    memset(bp, 0, sizeof *bp);
    size_t N = L->n_chunks, cap = 0;
    if (n_persist < 0 || (size_t)n_persist > N || n_buffer < 0)
        return ms_fail(err, MS_ERR_INVALID, "n_persist=%d is not in [0, %zu] chunks", n_persist,
                       N);
    bp->last_step = malloc(N * sizeof *bp->last_step);
    bp->chunk_buffer = malloc(N * sizeof *bp->chunk_buffer);
    int32_t *first_bwd = malloc(N * sizeof *first_bwd);
    int32_t *in_buf = malloc(N * sizeof *in_buf);
    size_t nb1 = (size_t)n_buffer + 1;
    int32_t *occ = malloc(nb1 * sizeof *occ);      /* chunk whose data the buffer holds */
    int32_t *blast = malloc(nb1 * sizeof *blast);  /* last step that used that data */
    uint8_t *bdone = calloc(nb1, 1);               /* that chunk's gradients are final */
    acc_index A = {0};
    ms_status st = MS_OK;
    if (!bp->last_step || !bp->chunk_buffer || !first_bwd || !in_buf || !occ || !blast ||
        !bdone || acc_build(L, &A))
        st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t c = 0; st == MS_OK && c < N; c++) {
        bp->last_step[c] = first_bwd[c] = -1;
        bp->chunk_buffer[c] = in_buf[c] = -1;
    }
    for (int b = 0; st == MS_OK && b < n_buffer; b++) occ[b] = blast[b] = -1;
    for (size_t s = 0; st == MS_OK && s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        for (uint32_t j = 0; j < S->n_need; j++) {
            uint32_t c = L->needs[S->need_first + j];
            bp->last_step[c] = (int32_t)s;
            if (S->phase == TP_BWD && first_bwd[c] < 0) first_bwd[c] = (int32_t)s;
        }
    }
    int32_t prev_emit = -1;
    int in_bwd = 0;
    for (size_t s = 0; st == MS_OK && s < L->n_steps; s++) {
        const lc_step *S = &L->steps[s];
        int32_t si = (int32_t)s;
        if (S->phase == TP_BWD && !in_bwd) {
            in_bwd = 1;
            if (!k->reuse_resident) /* resharded after forward: resident chunks are stale */
                for (int b = 0; b < n_buffer; b++)
                    if (occ[b] >= 0) in_buf[occ[b]] = -1;
        }
        for (uint32_t j = 0; j < S->n_need && st == MS_OK; j++) {
            int32_t c = (int32_t)L->needs[S->need_first + j];
            if (c < n_persist || in_buf[c] >= 0) continue;
            /* choose a buffer: an empty one, else the evictable one whose data is used
             * farthest ahead (stale or finished data: never again); among equals the one
             * whose data was used longest ago, which is released first (in the backward
             * every resident chunk is finished, and taking the most recent one would make
             * each gather wait for the gradient offload of the step just done) */
            int best = -1;
            int32_t best_next = -1;
            for (int b = 0; b < n_buffer; b++) {
                int32_t o = occ[b];
                if (o < 0) {
                    best = b;
                    break;
                }
                int32_t nx = INT32_MAX;
                if (in_buf[o] == b && !bdone[b]) {
                    if (step_needs(L, si, o)) continue;
                    /* pinned: its backward began and is not over (partial gradients) */
                    if (first_bwd[o] >= 0 && first_bwd[o] < si && bp->last_step[o] >= si)
                        continue;
                    nx = next_use(&A, (uint32_t)o, si - 1);
                }
                if (nx > best_next || (nx == best_next && blast[b] < blast[best])) {
                    best_next = nx;
                    best = b;
                }
            }
            if (best < 0) {
                st = ms_fail(err, MS_ERR_INVALID,
                             "n_buffer=%d is too small: step %zu (%s, block %d) needs chunk %d "
                             "but every buffer holds a chunk in use", n_buffer, s,
                             trace_phase_name(S->phase), S->block, c);
                break;
            }
            lc_load ld = {.step = si, .chunk = c, .buffer = best};
            int32_t o = occ[best];
            if (o < 0) {
                ld.rel_kind = LC_REL_ITER;
                ld.rel_ref = -1;
                ld.emit_after = -1;
            } else if (bdone[best]) {
                ld.rel_kind = LC_REL_OFFLOAD; /* its gradients must reach the host first */
                ld.rel_ref = o;
                ld.emit_after = bp->last_step[o];
            } else {
                ld.rel_kind = LC_REL_STEP;
                ld.rel_ref = blast[best];
                ld.emit_after = blast[best];
            }
            if (k->prefetch_depth > 0 && ld.emit_after < si - k->prefetch_depth - 1)
                ld.emit_after = si - k->prefetch_depth - 1;
            if (k->prefetch_depth < 0 && ld.emit_after < si - 1) /* on demand, no prefetch */
                ld.emit_after = si - 1;
            if (ld.emit_after < prev_emit) ld.emit_after = prev_emit;
            prev_emit = ld.emit_after;
            if (o >= 0 && in_buf[o] == best) in_buf[o] = -1;
            occ[best] = c;
            bdone[best] = 0;
            in_buf[c] = best;
            if (ms_grow((void **)&bp->loads, &cap, bp->n_loads + 1, sizeof *bp->loads)) {
                st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
                break;
            }
            bp->loads[bp->n_loads++] = ld;
        }
        for (uint32_t j = 0; st == MS_OK && j < S->n_need; j++) {
            int32_t c = (int32_t)L->needs[S->need_first + j];
            if (c < n_persist) continue;
            int b = in_buf[c];
            blast[b] = si;
            if (si == bp->last_step[c]) {
                bdone[b] = 1;
                bp->chunk_buffer[c] = b;
            }
        }
    }
    free(first_bwd);
    free(in_buf);
    free(occ);
    free(blast);
    free(bdone);
    acc_free(&A);
    if (st != MS_OK) lc_bufplan_clear(bp);
    return st;
}

int lc_min_buffers(const lc_layout *L, int n_persist, const lc_knobs *k)
{
    if ((size_t)n_persist >= L->n_chunks) return 0;
    for (int nb = 1; nb <= (int)L->n_chunks; nb++) {
        lc_bufplan bp;
        if (lc_bufplan_make(L, n_persist, nb, k, &bp, NULL) == MS_OK) {
            lc_bufplan_clear(&bp);
            return nb;
        }
    }
    return (int)L->n_chunks + 1;
}

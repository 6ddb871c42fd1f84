/* cost_protrain_int.h — internal to ProTrain's cost model: the model's state (struct
 * ptc_model) and the helpers that planners/protrain/cost_protrain.c (the runtime and memory
 * models) shares with planners/protrain/cost_protrain_search.c (the configuration search).
 * Not an interface: cost_protrain.h is what callers use. */
#ifndef MEMSIM_COST_PROTRAIN_INT_H
#define MEMSIM_COST_PROTRAIN_INT_H

#include "planners/protrain/cost_protrain.h"

#include <stddef.h>
#include <stdint.h>

struct ptc_model {
    machine_t m;
    lc_knobs k;
    lc_layout *L;
    int coll;
    /* activation profile of iteration 0 under keep-all */
    int64_t *A0, *P;         /* per step: live bytes at its start, peak within it */
    uint64_t *Dc, *Ds;       /* per block: bytes a checkpoint drops, bytes a swap moves */
    uint64_t *Rp;            /* per block: replay peak (bytes it allocates, at most) */
    uint32_t *Ns;            /* per block: tensors a swap moves (copy latencies) */
    uint64_t *sw_sz;         /* the tensors a swap moves, block by block in copy order: the
                                block's bytes up to and including each */
    double *sw_t;            /* the same: the block's copy time up to the end of each, us */
    uint32_t *sw_first;      /* per block + 1: its first entry in sw_sz */
    size_t sw_cap;
    double *rec_us;          /* per block: recompute time */
    /* scratch for estimates */
    double *e2, *e2s, *e3, *e4, *ld_end, *rel, *off, *prs, *pag;
    uint8_t *roles;
    int32_t *sw_at, *sw_for;  /* per block: where its swap-in is issued (lc_swap_issue); the
                                 swap block issued before a block's backward, or -1 */
    int32_t *sw_below;        /* per block + 1: the highest swap block below it, or -1 */
    int32_t *deferred;
    int64_t *ck_pre, *sw_pre; /* per block + 1: prefix sums of drops */
    int32_t *bwd_j;           /* per backward step: blocks below it have not run backward */
    uint32_t *fin_off, *fin;  /* per step: chunks whose last access it is (CSR) */
    uint32_t *ld_off;         /* per step: first load of the step (scratch per plan) */
    double *tend;             /* per step: compute end (scratch) */
    double *ag_us, *ar_us;    /* per chunk: NVLink all-gather (= reduce-scatter), all-reduce */
    double *own_b, *ring_b, *grad_b, *hadam_us; /* per chunk: bytes and host Adam time */
    double *nvg_h, *nvr_d, *nvp_d;/* per chunk, LC_COLL_STREAM: all-gather on H2D, reduce-scatter
                                     on D2H, persistent reduction on D2H, as copy bytes */
    int rt_model;             /* PTC_RT_RECURRENCE or PTC_RT_APPENDIX */
    double *ax;               /* appendix model scratch: 5 per chunk + 1 per step */
};

/* planners/protrain/cost_protrain.c */
uint64_t ptc_opt_params(const ptc_model *M, int c);
uint64_t ptc_opt_bytes(const ptc_model *M, int c);
int64_t ptc_act_peak(const ptc_model *M, const ptc_config *c, const uint8_t *roles,
                     const double *e2, const double *tstart, const double *e3,
                     const double *tend);
ms_status ptc_estimate_plan(ptc_model *M, const ptc_config *c, const lc_bufplan *bp,
                            ptc_estimate *e, ms_error *err);

#endif

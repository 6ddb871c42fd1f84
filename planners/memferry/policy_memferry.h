/* policy_memferry.h — MemFerry (Yao et al., INFOCOM 2025) as memsim policies: `memferry`
 * chooses per unit (planners/memferry/lower_dha.h) the parameter mode GFGB, DHA or DFGB — the forward
 * by the paper's Algorithm 1 with its backtracking, the backward by a greedy choice of DFGB
 * units — over the trace's profiled op times; `go-memferry` adds DHA gradient offload, the
 * units whose gradients stay on the GPU chosen by the paper's dynamic program over (unit,
 * GPU bytes) for the reserve factor (knob reserve=0..1). The algorithms are exposed over
 * plain arrays so that tests can check them against exhaustive search. Registered in
 * planners/policy.c; lowered by planners/memferry/lower_dha.c; described in docs/MEMFERRY.md. */
#ifndef MEMSIM_POLICY_MEMFERRY_H
#define MEMSIM_POLICY_MEMFERRY_H

#include "planners/policy.h"

extern const pol_policy pol_memferry;
extern const pol_policy pol_go_memferry;

/* One unit's profile as the algorithms see it (microseconds). */
typedef struct mf_prof {
    double trans_us;     /* T_trans: its parameters over the host link */
    double fp_us;        /* T_FP: forward ops reading its parameters, on the GPU */
    double fp_dha_us;    /* T_FP^H: the same reading them over DHA */
    double fp_other_us;  /* T_FP(A_{l,l+1}): its forward ops reading no parameters */
    double bp_us;        /* T_BP: backward ops reading its parameters, on the GPU */
    double bp_dha_us;    /* T_BP^H: the same over DHA */
    double bp_other_us;  /* its other backward ops */
} mf_prof;

/* The forward time of a mode assignment under the paper's assumptions (§IV-B): GFGB loads
 * run back to back from time 0 in unit order, a GFGB unit waits for its own load, DHA
 * (and DFGB, which is DHA in the forward) units compute at once, DHA reads do not slow the
 * loads. *link_end_us (may be NULL): when the last load ends. */
double mf_fp_time(const mf_prof *u, size_t n, const plan_pmode *mode, double *link_end_us);

/* Algorithm 1 with its backtracking: mode[i] = PM_GFGB or PM_DHA. *t_all_us and *t_res_us
 * (may be NULL) get the algorithm's own estimate of the forward time and the reserved
 * overlap time left. Where the printed pseudo-code is ambiguous (docs/MEMFERRY.md):
 * line 3's max(T_trans(l), 0) is a no-op as printed; it is read as the load's stall,
 * T_FP^H <= T_FP + max(T_trans - T_res, 0) (literal = 0), or as printed, T_FP^H <= T_FP +
 * T_trans (literal = 1); backtracking (lines 18-30) considers the GFGB units from `tag`
 * (from the first unit when tag is unset) up to l - 1, accumulating the cost of each
 * conversion, and its closing update sets T_all to the best time found rather than adding
 * it to T_all again. */
void mf_alg1(const mf_prof *u, size_t n, int literal, plan_pmode *mode, double *t_all_us,
             double *t_res_us);

/* Exhaustive search over the 2^n GFGB/DHA assignments for the least mf_fp_time (n <= 24):
 * the best time, and the assignment in best (may be NULL). */
double mf_fp_exhaustive(const mf_prof *u, size_t n, plan_pmode *best);

/* The backward: an estimate of the backward time of an assignment (GFGB and DFGB units use
 * T_BP, DHA units T_BP^H) and whether every DFGB load ends before its unit's backward
 * starts. DFGB loads run in unit order on the link after the last GFGB load, each after its
 * unit's forward. Returns the iteration's estimated compute span (forward + backward) or
 * INFINITY when a DFGB load would stall the backward. */
double mf_iter_time(const mf_prof *u, size_t n, const plan_pmode *mode);

/* The greedy backward choice: among the DHA units of mode (from mf_alg1), in order of
 * backward time saved per load time (T_BP^H - T_BP) / T_trans, each is made DFGB if the
 * loads of the DFGB units so far plus its own still end before their backward starts (the
 * link is idle from the last GFGB load to the gradients' transfers, §IV-B). Returns the
 * number of units made DFGB. */
size_t mf_dfgb_greedy(const mf_prof *u, size_t n, plan_pmode *mode);

/* GO-MemFerry's dynamic program (§IV-D): keep[i] = 1 for the units whose gradients stay on
 * the GPU, maximizing the sum of gain_us[i] = T_GBP(i) - T_CBP(i) subject to the sum of
 * size[i] <= cap:  D[i][j] = max(D[i-1][j], D[i-1][j - s_i] + gain_i). Sizes are in any
 * unit (the policy quantizes bytes); the table has n x (cap + 1) cells (MS_ERR_LIMIT above
 * 2^26 cells, MS_ERR_NOMEM). *best_us gets the optimum. Ties keep fewer units (the earlier
 * decision wins), so the result is deterministic. */
ms_status mf_go_dp(const double *gain_us, const uint64_t *size, size_t n, uint64_t cap,
                   int *keep, double *best_us);

/* The same optimum by brute force over 2^n subsets (n <= 24), for tests. */
double mf_go_brute(const double *gain_us, const uint64_t *size, size_t n, uint64_t cap,
                   int *keep);

#endif

/* dsa_int.h — internal to offline dynamic storage allocation: the instance's layout, time
 * sections, and the helpers that dsa.c (instances, checker), dsa_greedy.c (heuristics),
 * dsa_bb.c (branch-and-bound), dsa_mip.c (MIP) and dsa_solve.c (the driver) share.
 * Not an interface: dsa.h is what the rest of memsim calls. */
#ifndef MEMSIM_DSA_INT_H
#define MEMSIM_DSA_INT_H

#include "memory/dsa.h"

#include <stddef.h>
#include <stdint.h>

#define NONE64 UINT64_MAX

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

/* Time sections: the sorted distinct lifetime endpoints t_0 < t_1 < ...; section k is
 * [t_k, t_{k+1}). Buffer i lives in sections [sl[i], su[i]). */
typedef struct sections {
    size_t n;      /* buffers */
    size_t ns;     /* sections = distinct endpoints - 1 */
    int32_t *sl, *su;
} sections;

ms_status dsa_sections_build(const dsa_instance *in, sections *s);
void dsa_sections_free(sections *s);

/* Places buffers in order, each right above the highest earlier buffer it overlaps in
 * time; returns the peak. O(n^2): small n only (dsa.c). */
uint64_t dsa_stack_in_order(const dsa_instance *in, const size_t *order, uint64_t *off);

/* CLOCK_MONOTONIC seconds: the heuristics' wall-clock backstop and dsa_solve's elapsed_s. */
double dsa_wall_s(void);

/* MIP work units per lp_solve branch-and-bound node (a knob: measured about 10^4 nodes/s
 * on 30-buffer models on the calibration box, i.e. 6e8 / 1e4 units), and per simplex
 * iteration and LP row (measured as said at dsa_mip). */
#define DSA_MIP_WORK_PER_NODE 60000

/* What one run of the heuristic portfolio for dsa_solve did. */
typedef struct dsa_heur_result {
    uint64_t work;      /* counted work spent */
    int hit;            /* stopped at the work limit or the clock */
    uint64_t peak;      /* the best plan's peak, NONE64 - 1 for none */
    char how[40];       /* which ordering and rule found it */
} dsa_heur_result;

/* Runs the fit placements, then the skyline placements (seeded perturbations included),
 * into off, stopping at a plan of peak <= stop_at, after room units of work, or at the
 * wall-clock deadline (0: none); the skyline gets a fiftieth of the room left when an exact
 * method follows (dsa_greedy.c). */
ms_status dsa_heuristics(const dsa_instance *in, uint64_t *off, uint64_t stop_at,
                         uint64_t room, double deadline, int exact_follows,
                         dsa_heur_result *r);

#endif

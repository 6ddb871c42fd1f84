/* rt_ranks.h — where each process of a run on several GPUs of one node stands: the node
 * layout world = tp x cp x dp in Megatron's rank order (TP fastest, then CP, then DP; an
 * expert-parallel group inside DP as traces/jobview.h lays it out), a rank's coordinates, the
 * members of each of its groups and its index there, and its CP ring neighbours. Built from
 * the jobview of the run's trace, so that the runtime's ranks are the simulator's. Plain C
 * (no CUDA); used by runtime/rt_coll.c, runtime/rt_node.c and the tests. */
#ifndef MEMSIM_RT_RANKS_H
#define MEMSIM_RT_RANKS_H

#include "base/util.h"
#include "traces/jobview.h"

/* The process groups a collective runs over. */
typedef enum rt_group_kind {
    RG_TP = 0, /* tensor parallel: tp consecutive ranks */
    RG_CP,     /* context parallel: cp ranks, tp apart (the K/V ring) */
    RG_DP,     /* data parallel: dp ranks, tp * cp apart */
    RG_DPCP,   /* data parallel with context parallelism (Megatron's gradient and distributed
                  optimizer group): the cp * dp ranks of one TP index */
    RG_EP,     /* expert parallel: ep of the dp ranks, tp * cp apart (jobview_ep_span) */
    RG_EDP,    /* expert data parallel: the ranks holding the same experts; dp / ep ranks, or
                  cp * dp / ep with rt_ranks_opts.expert_dp_cp (Megatron) */
    RG_COUNT
} rt_group_kind;

/* The group kind's name in messages and file names ("tp", "cp", "dp", "dpcp", "ep", "edp"). */
const char *rt_group_name(rt_group_kind k);

typedef struct rt_ranks rt_ranks;

typedef struct rt_coords {
    int tp, cp, dp;   /* this rank's index along each dimension */
    int ep, edp;      /* its place in DP: dp = ep + ep_degree * edp */
} rt_coords;

/* The layout of v (its tp, cp, dp and ep; 0 counts as 1). expert_dp_cp: the expert
 * data-parallel group spans CP as well (Megatron, whose expert gradients are reduced over
 * dp * cp / ep ranks). MS_ERR_INVALID when ep does not divide dp (or, with expert_dp_cp,
 * cp * dp), or the layout holds more GPUs than one node of the profile (v->node_ranks):
 * the runtime runs one node. */
ms_status rt_ranks_new(const jobview *v, int expert_dp_cp, rt_ranks **out, ms_error *err);
void rt_ranks_free(rt_ranks *r);

int rt_ranks_world(const rt_ranks *r);
/* tp, cp, dp or ep of the layout (RG_DPCP: cp * dp; RG_EDP: the expert group's size). */
int rt_ranks_size(const rt_ranks *r, rt_group_kind k);
/* The coordinates of rank (0 <= rank < world). */
rt_coords rt_ranks_coords(const rt_ranks *r, int rank);
int rt_ranks_of(const rt_ranks *r, rt_coords c);
/* The members of rank's group of kind k in ascending rank order, written to members (room
 * for max); returns the group's size, *index (may be NULL) rank's place in it. */
int rt_ranks_group(const rt_ranks *r, rt_group_kind k, int rank, int *members, int max,
                   int *index);
/* The CP ring around rank: the member it sends K/V to and the one it receives from (rank
 * itself when cp = 1). */
int rt_ranks_ring_next(const rt_ranks *r, int rank);
int rt_ranks_ring_prev(const rt_ranks *r, int rank);

#endif

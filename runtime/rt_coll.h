/* rt_coll.h — the collectives of a lowered schedule as NCCL calls, for `memsim run` on several
 * GPUs of one node. The trace gives a collective as an op of kind comm with its name, its
 * inputs and outputs and its bytes read and written, but not which collective or group it is:
 * both are derived here, once per trace, from the name the generator gives it (its suffix:
 * ".ag", ".rs", "loss.ar" over TP; ".ovl" CP's ring; ".a2a" EP's all-to-all; "dp_rs",
 * "dp_ar", "dp_ag" over DP, or over DP x CP for Megatron; "expert_grad.", "expert_param."
 * over the experts' DP group; ZeRO-3's "params.ag", "grad.rs" over DP) and its bytes (an
 * all-gather writes p times what it reads, a reduce-scatter reads p times what it writes; the
 * backward of one is the other, so the TP names say only the group), checked against the
 * group's size: an op that fits no rule stops the run before it starts, naming the op.
 * Host-link copies (".d2h", ".h2d") are not collectives: they spin as before.
 * The executor's hooks (rt_exec_opts.coll_*) then run each on the stream the schedule names,
 * and a ".ovl" ring merged into its attention kernel (sched_action.ovl) on a side stream
 * beside the attention's own spin. Plain C (NCCL through runtime/rt_nccl.h); used by
 * runtime/rt_node.c and the tests. */
#ifndef MEMSIM_RT_COLL_H
#define MEMSIM_RT_COLL_H

#include "runtime/rt_exec.h"
#include "runtime/rt_nccl.h"
#include "runtime/rt_ranks.h"
#include "traces/trace.h"

typedef enum rt_coll_kind {
    RC_NONE = 0,       /* not a collective across GPUs (a host-link copy, a group of one) */
    RC_ALL_GATHER,
    RC_REDUCE_SCATTER,
    RC_ALL_REDUCE,
    RC_RING,           /* CP's ring exchange: p - 1 steps of send to the next, receive from
                          the previous member */
    RC_ALL_TO_ALL,
    RC_COUNT
} rt_coll_kind;

const char *rt_coll_kind_name(rt_coll_kind k);

typedef struct rt_coll_class {
    rt_coll_kind kind;
    rt_group_kind group;
    int ranks;             /* the group's size */
    rt_nccl_type type;     /* the reductions' element type */
} rt_coll_class;

/* Which collective comm op `op` of trace t is on layout r (trace meta framework and zero3
 * choose between rules). MS_ERR_INVALID, naming the op, when no rule fits its name or its
 * bytes do not match the group's size. */
ms_status rt_coll_classify(const trace_t *t, const trace_op *op, const rt_ranks *r,
                           rt_coll_class *out, ms_error *err);

typedef struct rt_coll rt_coll;

/* The collectives of trace t for rank `rank` of layout r: every comm op classified (the first
 * that cannot be is the error), the ".ovl" rings matched to their attention ops. */
ms_status rt_coll_new(const trace_t *t, const rt_ranks *r, int rank, rt_coll **out,
                      ms_error *err);
void rt_coll_free(rt_coll *c);
/* Whether any collective of the trace runs over groups of kind k (its communicator is
 * needed). */
int rt_coll_uses(const rt_coll *c, rt_group_kind k);
/* The communicator of this rank's group of kind k, on library n (not owned). */
void rt_coll_set_comm(rt_coll *c, rt_group_kind k, rt_nccl *n, void *comm);
/* Points the executor's collective hooks at c. */
void rt_coll_hooks(rt_coll *c, rt_exec_opts *o);

/* What ran: NCCL operations per kind (a ring counts its steps), the trace bytes of the
 * collectives (the larger of each op's bytes read and written), and how many rings ran beside
 * their attention kernel. */
typedef struct rt_coll_stats {
    uint64_t ops[RC_COUNT], bytes[RC_COUNT], calls[RC_COUNT];
    uint64_t merged;
} rt_coll_stats;
void rt_coll_get_stats(const rt_coll *c, rt_coll_stats *s);

#endif

/* rt_ranks.c — the node layout of a run on several GPUs: coordinates, groups and the CP ring
 * (see rt_ranks.h). Used by runtime/rt_coll.c, runtime/rt_node.c and tests/test_rt_ranks.c. */
#include "runtime/rt_ranks.h"

#include <stdlib.h>

struct rt_ranks {
    int tp, cp, dp, ep;
    int expert_dp_cp;
    int world;
};

static const char *const group_names[RG_COUNT] = {"tp", "cp", "dp", "dpcp", "ep", "edp"};

const char *rt_group_name(rt_group_kind k)
{
    return (unsigned)k < RG_COUNT ? group_names[k] : "?";
}

static int one_if_0(uint64_t v) { return v ? (int)v : 1; }

ms_status rt_ranks_new(const jobview *v, int expert_dp_cp, rt_ranks **out, ms_error *err)
{
    *out = NULL;
    if (v->tp > (1u << 20) || v->cp > (1u << 20) || v->dp > (1u << 20) || v->ep > (1u << 20))
        return ms_fail(err, MS_ERR_INVALID, "the layout tp %llu cp %llu dp %llu is too large",
                       (unsigned long long)v->tp, (unsigned long long)v->cp,
                       (unsigned long long)v->dp);
    int tp = one_if_0(v->tp), cp = one_if_0(v->cp), dp = one_if_0(v->dp), ep = one_if_0(v->ep);
    int world = tp * cp * dp;
    int expert_span = expert_dp_cp ? cp * dp : dp;
    if (expert_span % ep)
        return ms_fail(err, MS_ERR_INVALID, "ep %d does not divide the %s ranks (%d)", ep,
                       expert_dp_cp ? "cp x dp" : "dp", expert_span);
    /* The experts' group is laid out as the generator's all-to-alls assume it (jobview):
     * its members are tp * cp apart, so it covers jobview_ep_span consecutive ranks. */
    if (jobview_ep_span((uint64_t)tp, (uint64_t)cp, (uint64_t)ep) > (uint64_t)world)
        return ms_fail(err, MS_ERR_INVALID, "an expert-parallel group of %d spans more than the "
                       "job's %d GPUs", ep, world);
    if (world > v->node_ranks)
        return ms_fail(err, MS_ERR_INVALID, "the layout tp %d x cp %d x dp %d holds %d GPUs, more "
                       "than one node of the machine profile (%d): the runtime runs one node",
                       tp, cp, dp, world, v->node_ranks);
    rt_ranks *r = calloc(1, sizeof *r);
    if (!r) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    *r = (rt_ranks){tp, cp, dp, ep, expert_dp_cp, world};
    *out = r;
    return MS_OK;
}

void rt_ranks_free(rt_ranks *r) { free(r); }

int rt_ranks_world(const rt_ranks *r) { return r->world; }

int rt_ranks_size(const rt_ranks *r, rt_group_kind k)
{
    switch (k) {
    case RG_TP: return r->tp;
    case RG_CP: return r->cp;
    case RG_DP: return r->dp;
    case RG_DPCP: return r->cp * r->dp;
    case RG_EP: return r->ep;
    case RG_EDP: return (r->expert_dp_cp ? r->cp * r->dp : r->dp) / r->ep;
    default: return 0;
    }
}

rt_coords rt_ranks_coords(const rt_ranks *r, int rank)
{
    rt_coords c;
    c.tp = rank % r->tp;
    c.cp = rank / r->tp % r->cp;
    c.dp = rank / (r->tp * r->cp);
    c.ep = c.dp % r->ep;
    c.edp = c.dp / r->ep;
    return c;
}

int rt_ranks_of(const rt_ranks *r, rt_coords c)
{
    return c.tp + r->tp * (c.cp + r->cp * c.dp);
}

/* Whether rank q lies in rank p's group of kind k: they agree on every coordinate the group
 * does not run along. */
static int same_group(const rt_ranks *r, rt_group_kind k, rt_coords p, rt_coords q)
{
    switch (k) {
    case RG_TP: return p.cp == q.cp && p.dp == q.dp;
    case RG_CP: return p.tp == q.tp && p.dp == q.dp;
    case RG_DP: return p.tp == q.tp && p.cp == q.cp;
    case RG_DPCP: return p.tp == q.tp;
    case RG_EP: return p.tp == q.tp && p.cp == q.cp && p.edp == q.edp;
    case RG_EDP:
        return p.tp == q.tp && p.ep == q.ep && (r->expert_dp_cp || p.cp == q.cp);
    default: return 0;
    }
}

int rt_ranks_group(const rt_ranks *r, rt_group_kind k, int rank, int *members, int max,
                   int *index)
{
    rt_coords me = rt_ranks_coords(r, rank);
    int n = 0;
    if (index) *index = -1;
    for (int q = 0; q < r->world; q++) {
        if (!same_group(r, k, me, rt_ranks_coords(r, q))) continue;
        if (q == rank && index) *index = n;
        if (members && n < max) members[n] = q;
        n++;
    }
    return n;
}

int rt_ranks_ring_next(const rt_ranks *r, int rank)
{
    rt_coords c = rt_ranks_coords(r, rank);
    c.cp = (c.cp + 1) % r->cp;
    return rt_ranks_of(r, c);
}

int rt_ranks_ring_prev(const rt_ranks *r, int rank)
{
    rt_coords c = rt_ranks_coords(r, rank);
    c.cp = (c.cp + r->cp - 1) % r->cp;
    return rt_ranks_of(r, c);
}

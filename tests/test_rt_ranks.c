/* test_rt_ranks.c — unit tests of the runtime's node layout (runtime/rt_ranks.c): Megatron's
 * rank order, every group's members and size, the CP ring, the expert groups as jobview lays
 * them out, and the refusals (ep not dividing dp, a layout larger than one node). Plain C:
 * runs in make check with or without CUDA. */
#include "runtime/rt_ranks.h"
#include "tests/tap.h"

#include <stdio.h>
#include <string.h>

static jobview view(uint64_t tp, uint64_t cp, uint64_t dp, uint64_t ep, int node)
{
    jobview v;
    memset(&v, 0, sizeof v);
    v.tp = tp;
    v.cp = cp;
    v.dp = dp;
    v.ep = ep;
    v.node_ranks = node;
    return v;
}

static rt_ranks *make(uint64_t tp, uint64_t cp, uint64_t dp, uint64_t ep, int mg)
{
    jobview v = view(tp, cp, dp, ep, 8);
    rt_ranks *r = NULL;
    ms_error err;
    if (rt_ranks_new(&v, mg, &r, &err) != MS_OK) TAP_NOTE("rt_ranks_new: %s", err.msg);
    return r;
}

/* MEMO's layout, TP 4 x CP 2 on 8 GPUs: TP groups are runs of 4, CP pairs 4 apart. */
static void test_memo_layout(void)
{
    rt_ranks *r = make(4, 2, 1, 1, 0);
    TAP_OK(r && rt_ranks_world(r) == 8, "tp 4 x cp 2: world 8");
    if (!r) return;
    int m[8], idx, ok = 1;
    for (int q = 0; q < 8; q++) {
        rt_coords c = rt_ranks_coords(r, q);
        ok &= c.tp == q % 4 && c.cp == q / 4 && c.dp == 0 && rt_ranks_of(r, c) == q;
    }
    TAP_OK(ok, "coordinates: TP fastest, then CP (rank = tp + 4 cp), and back");
    int n = rt_ranks_group(r, RG_TP, 6, m, 8, &idx);
    TAP_OK(n == 4 && m[0] == 4 && m[3] == 7 && idx == 2, "rank 6's TP group is 4..7, index 2");
    n = rt_ranks_group(r, RG_CP, 6, m, 8, &idx);
    TAP_OK(n == 2 && m[0] == 2 && m[1] == 6 && idx == 1, "rank 6's CP group is {2, 6}, index 1");
    n = rt_ranks_group(r, RG_DP, 6, m, 8, &idx);
    TAP_OK(n == 1 && m[0] == 6 && idx == 0, "dp 1: the DP group is the rank alone");
    TAP_OK(rt_ranks_ring_next(r, 2) == 6 && rt_ranks_ring_prev(r, 2) == 6 &&
           rt_ranks_ring_next(r, 6) == 2, "the CP ring of 2: each rank's neighbour is the other");
    rt_ranks_free(r);
}

/* TP 2 x CP 2 x DP 2: DP members tp * cp apart; Megatron's DP-CP group holds one TP index. */
static void test_three_dims(void)
{
    rt_ranks *r = make(2, 2, 2, 1, 0);
    if (!r) {
        TAP_OK(0, "tp 2 x cp 2 x dp 2");
        return;
    }
    int m[8], idx;
    int n = rt_ranks_group(r, RG_DP, 5, m, 8, &idx);
    TAP_OK(n == 2 && m[0] == 1 && m[1] == 5 && idx == 1, "rank 5's DP group is {1, 5}");
    n = rt_ranks_group(r, RG_DPCP, 5, m, 8, &idx);
    TAP_OK(n == 4 && m[0] == 1 && m[1] == 3 && m[2] == 5 && m[3] == 7 && idx == 2,
           "rank 5's DP x CP group is the odd ranks, index 2");
    /* every rank lies in exactly one group of each kind, and groups partition the world */
    int ok = 1;
    for (int k = 0; k < RG_COUNT; k++)
        for (int q = 0; q < 8; q++) {
            int size = rt_ranks_group(r, (rt_group_kind)k, q, m, 8, &idx);
            ok &= size == rt_ranks_size(r, (rt_group_kind)k) && idx >= 0 && m[idx] == q;
            for (int j = 0; j < size; j++) {
                int m2[8], i2;
                rt_ranks_group(r, (rt_group_kind)k, m[j], m2, 8, &i2);
                ok &= !memcmp(m, m2, (size_t)size * sizeof *m) && i2 == j;
            }
        }
    TAP_OK(ok, "each group's members agree on the group and on their places in it");
    ok = 1;
    for (int q = 0; q < 8; q++) ok &= rt_ranks_ring_prev(r, rt_ranks_ring_next(r, q)) == q;
    TAP_OK(ok, "the ring's next and previous invert each other");
    rt_ranks_free(r);
}

/* Experts: EP inside DP, members tp * cp apart as jobview_ep_span counts; the expert DP group
 * of the generic program (dp / ep) and of Megatron's (cp * dp / ep). */
static void test_experts(void)
{
    rt_ranks *r = make(1, 2, 4, 2, 0);
    rt_ranks *g = make(1, 2, 4, 2, 1);
    if (!r || !g) {
        TAP_OK(0, "cp 2 x dp 4 with ep 2");
        rt_ranks_free(r);
        rt_ranks_free(g);
        return;
    }
    int m[8], idx;
    int n = rt_ranks_group(r, RG_EP, 0, m, 8, &idx);
    TAP_OK(n == 2 && m[0] == 0 && m[1] == 2 && (uint64_t)(m[1] - m[0]) * 2 ==
           jobview_ep_span(1, 2, 2), "an EP group's members are tp x cp = 2 apart and span "
           "jobview_ep_span's 4 GPUs");
    n = rt_ranks_group(r, RG_EDP, 0, m, 8, &idx);
    TAP_OK(n == 2 && m[0] == 0 && m[1] == 4, "generic: the expert DP group is dp / ep = 2 ranks "
           "{0, 4}");
    n = rt_ranks_group(g, RG_EDP, 0, m, 8, &idx);
    TAP_OK(n == 4 && m[0] == 0 && m[1] == 1 && m[2] == 4 && m[3] == 5 &&
           rt_ranks_size(g, RG_EDP) == 4, "megatron: cp x dp / ep = 4 ranks {0, 1, 4, 5}");
    rt_ranks_free(r);
    rt_ranks_free(g);
}

static void test_refusals(void)
{
    rt_ranks *r = NULL;
    ms_error err;
    jobview v = view(2, 1, 3, 2, 8);
    ms_status st = rt_ranks_new(&v, 0, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && !r && strstr(err.msg, "ep 2 does not divide"),
           "ep 2 over dp 3 is refused: %s", err.msg);
    v = view(4, 2, 2, 1, 8);
    st = rt_ranks_new(&v, 0, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "16 GPUs") && strstr(err.msg, "(8)"),
           "16 GPUs on a node of 8 are refused: %s", err.msg);
    v = view(0, 0, 0, 0, 1);
    st = rt_ranks_new(&v, 0, &r, &err);
    TAP_OK(st == MS_OK && r && rt_ranks_world(r) == 1 && rt_ranks_ring_next(r, 0) == 0,
           "a trace without a layout is one rank");
    rt_ranks_free(r);
    TAP_OK(!strcmp(rt_group_name(RG_DPCP), "dpcp") && !strcmp(rt_group_name(RG_COUNT), "?"),
           "group names");
}

int main(void)
{
    test_memo_layout();
    test_three_dims();
    test_experts();
    test_refusals();
    return tap_done();
}

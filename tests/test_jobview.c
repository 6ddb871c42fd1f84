/* test_jobview.c — unit tests of the placement view (traces/jobview.c): the job's GPUs on a
 * node for a tp/cp/dp layout, clamped to the node, a trace without a layout taken to fill it;
 * each GPU's host share and the node's even split; the link divided by the job's GPUs behind
 * one switch. Run by make check. */
#include "tests/tap.h"
#include "traces/jobview.h"

#include <stdio.h>
#include <string.h>

/* An 8-GPU node, two GPUs per switch, 1 TiB of host memory. */
static machine_t node8(void)
{
    machine_t m;
    memset(&m, 0, sizeof m);
    m.node_gpus = 8;
    m.node_gpus_per_switch = 2;
    m.host_mem_bytes = UINT64_C(1) << 40;
    m.link_h2d_Bps = m.link_d2h_Bps = 24e9;
    m.link_duplex_Bps = 40e9;
    m.dha_read_Bps = m.dha_write_Bps = 20e9;
    return m;
}

/* A trace with the given layout; a degree of 0 leaves its meta line out. */
static trace_t *layout(uint64_t tp, uint64_t cp, uint64_t dp)
{
    trace_t *t = trace_new();
    const char *k[3] = {"tp", "cp", "dp"};
    uint64_t v[3] = {tp, cp, dp};
    for (int i = 0; t && i < 3; i++) {
        char b[24];
        snprintf(b, sizeof b, "%llu", (unsigned long long)v[i]);
        if (v[i] && trace_set_meta(t, k[i], b) != MS_OK) {
            trace_free(t);
            return NULL;
        }
    }
    return t;
}

static jobview view(uint64_t tp, uint64_t cp, uint64_t dp, const machine_t *m)
{
    jobview v;
    memset(&v, 0, sizeof v);
    trace_t *t = layout(tp, cp, dp);
    if (t) jobview_of(t, m, &v);
    trace_free(t);
    return v;
}

static void test_ranks(void)
{
    machine_t m = node8();
    jobview v = view(2, 2, 1, &m);
    TAP_OK(v.tp == 2 && v.cp == 2 && v.dp == 1, "the layout as the trace gives it");
    TAP_OK(v.node_ranks == 4, "tp 2 x cp 2: 4 of the node's GPUs (%d)", v.node_ranks);
    v = view(1, 1, 32, &m);
    TAP_OK(v.node_ranks == 8, "dp 32 on an 8-GPU node: the whole node (%d)", v.node_ranks);
    v = view(0, 0, 0, &m);
    TAP_OK(v.node_ranks == 8 && v.tp == 0, "no layout: taken to fill the node (%d)", v.node_ranks);
    v = view(2, 0, 1, &m);
    TAP_OK(v.node_ranks == 8, "a layout without cp: the whole node too (%d)", v.node_ranks);
    jobview n;
    jobview_of(NULL, &m, &n);
    TAP_OK(n.node_ranks == 8, "no trace: the whole node");
    m.node_gpus = 0;
    v = view(4, 1, 1, &m);
    TAP_OK(v.node_ranks == 1 && v.host_share_bytes == m.host_mem_bytes,
           "a profile without node.gpus: a node of one GPU with all the host memory");
}

static void test_host(void)
{
    machine_t m = node8();
    jobview v = view(1, 1, 1, &m);
    TAP_OK(v.host_share_bytes == m.host_mem_bytes, "one GPU: all of the host memory");
    TAP_OK(v.host_per_node_gpu_bytes == m.host_mem_bytes / 8, "the even split is per node GPU");
    v = view(2, 1, 2, &m);
    TAP_OK(v.host_share_bytes == m.host_mem_bytes / 4, "4 GPUs: a quarter each");
    TAP_OK(v.gpu.host_mem_bytes == m.host_mem_bytes, "the GPU's machine keeps the node's memory");
}

static void test_link(void)
{
    machine_t m = node8();
    jobview v = view(1, 1, 1, &m);
    TAP_OK(v.gpu.link_h2d_Bps == m.link_h2d_Bps && v.gpu.dha_read_Bps == m.dha_read_Bps,
           "a lone GPU keeps its switch's uplink");
    v = view(1, 1, 4, &m);
    TAP_OK(v.gpu.link_h2d_Bps == m.link_h2d_Bps / 2 && v.gpu.link_duplex_Bps == m.link_duplex_Bps / 2 &&
           v.gpu.dha_write_Bps == m.dha_write_Bps / 2, "two GPUs per switch halve the link");
    m.node_gpus_per_switch = 8;
    v = view(1, 1, 4, &m);
    TAP_OK(v.gpu.link_d2h_Bps == m.link_d2h_Bps / 4,
           "the switch is shared by the job's GPUs only (4 of 8)");
}

int main(void)
{
    test_ranks();
    test_host();
    test_link();
    return tap_done();
}

/* jobview.c — one GPU's share of its node for a tp/cp/dp/ep layout (see jobview.h). Used by
 * sim/pipeline.c, the MEMO and ProTrain planners, the paper drivers and runtime/rt_run.c. */
#include "traces/jobview.h"

#include <string.h>

/* The job's GPUs on the node: the pipeline's rule since the first multi-GPU runs, kept so
 * that every existing result stays the same. */
static int node_ranks_of(const jobview *v, const machine_t *m)
{
    if (m->node_gpus <= 0) return 1;
    uint64_t ranks = v->tp * v->cp * v->dp; /* 0 when the layout is not known */
    if (ranks && ranks < (uint64_t)m->node_gpus) return (int)ranks;
    return m->node_gpus < (1 << 20) ? (int)m->node_gpus : 1 << 20;
}

static uint64_t one_if_0(uint64_t v) { return v ? v : 1; }

uint64_t jobview_ep_span(uint64_t tp, uint64_t cp, uint64_t ep)
{
    return one_if_0(tp) * one_if_0(cp) * one_if_0(ep);
}

void jobview_of(const trace_t *t, const machine_t *m, jobview *out)
{
    memset(out, 0, sizeof *out);
    if (t) {
        out->tp = trace_meta_u64(t, "tp", 0);
        out->cp = trace_meta_u64(t, "cp", 0);
        out->dp = trace_meta_u64(t, "dp", 0);
        out->ep = trace_meta_u64(t, "ep", 1);
    }
    if (!out->ep) out->ep = 1;
    out->ep_span_gpus = jobview_ep_span(out->tp, out->cp, out->ep);
    out->ep_intra_node = m->node_gpus <= 0 || out->ep_span_gpus <= (uint64_t)m->node_gpus;
    out->node_ranks = node_ranks_of(out, m);
    out->host_share_bytes = m->host_mem_bytes / (uint64_t)out->node_ranks;
    out->host_per_node_gpu_bytes =
        m->host_mem_bytes / (uint64_t)(m->node_gpus > 0 ? m->node_gpus : 1);
    machine_gpu_view(m, out->node_ranks, &out->gpu);
}

/* jobview.h — where one GPU of a training job stands on its node: the job's tp/cp/dp/ep
 * layout (from the trace's meta lines; the generator asks jobview_ep_span where an expert-
 * parallel group lies), how many of the node's GPUs the job holds, the host
 * memory each of them gets, and the per-GPU machine whose host-link figures are those GPUs'
 * share of their PCIe switch. The one answer to "this GPU's share of the node" for the
 * simulator's pipeline, the planners' cost models, the paper drivers and the runtime. */
#ifndef MEMSIM_JOBVIEW_H
#define MEMSIM_JOBVIEW_H

#include "traces/machine.h"
#include "traces/trace.h"

/* Plain data, filled by jobview_of. */
typedef struct jobview {
    /* The layout as the trace gives it (meta tp, cp, dp); 0 where it does not. */
    uint64_t tp, cp, dp;
    /* Expert parallelism (meta ep; 1 where the trace gives none: a dense or ep = 1 trace):
     * the experts are sharded over ep of the dp ranks, so ep divides dp and adds no GPUs. */
    uint64_t ep;
    /* Consecutive global ranks one expert-parallel group spans (jobview_ep_span), and
     * whether they lie on one node (the all-to-all then runs over NVLink, else the NIC). */
    uint64_t ep_span_gpus;
    int ep_intra_node;
    /* The job's GPUs on this node, which train together and share its host memory and
     * switches: tp * cp * dp, at most node.gpus. A trace that does not give all of tp, cp and
     * dp (an imported snapshot, a hand-written trace) is taken to fill the node; a profile
     * without node.gpus counts as a node of one GPU. Always >= 1. */
    int node_ranks;
    /* host.mem_bytes / node_ranks: each of the job's GPUs' share of the node's host memory
     * (a 1-GPU job gets all of it). */
    uint64_t host_share_bytes;
    /* host.mem_bytes / node.gpus: the node's memory split evenly over all its GPUs, busy or
     * not (MEMO's M_CPU; a profile without node.gpus: all of it). */
    uint64_t host_per_node_gpu_bytes;
    /* The machine as one of the job's GPUs sees it: machine_gpu_view(m, node_ranks), the
     * host-link and DHA bandwidths divided among the job's GPUs behind one PCIe switch. */
    machine_t gpu;
} jobview;

/* The view of a job laid out as trace t says (t NULL: a job of unknown layout) on m. */
void jobview_of(const trace_t *t, const machine_t *m, jobview *out);

/* GPUs an expert-parallel group of ep ranks spans in Megatron's rank order (tp innermost, then
 * cp, then ep inside dp: megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"): its
 * members are tp*cp ranks apart, so it covers tp*cp*ep consecutive ranks. Inputs of 0 count
 * as 1. */
uint64_t jobview_ep_span(uint64_t tp, uint64_t cp, uint64_t ep);

#endif

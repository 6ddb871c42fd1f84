/* probe_node.h — what `memsim probe --collectives` makes of its measurements on a machine of
 * several GPUs: NCCL's all-gather, reduce-scatter and all-reduce over sizes and rank counts as
 * bus bandwidth (nccl-tests' definition), the node.nvlink_Bps and node.nvlink_lat_us that
 * traces/roofline.c's collective model (launch + (p - 1) (lat + B / p / bw), twice that for an
 * all-reduce) fits them with, node.gpus, and node.gpus_per_switch from the host link's rate when
 * GPUs copy at once; the raw samples as CSV; the profile's node keys set with their source.
 * Plain C; the measuring is runtime/probe_coll.c's. Used by runtime/main.c and
 * tests/test_probe_node.c. */
#ifndef MEMSIM_PROBE_NODE_H
#define MEMSIM_PROBE_NODE_H

#include <stdio.h>

#include "traces/machine.h"

typedef enum pn_kind { PN_ALL_GATHER = 0, PN_REDUCE_SCATTER, PN_ALL_REDUCE, PN_KINDS } pn_kind;
const char *pn_kind_name(pn_kind k);

/* One collective's median time: bytes is its whole volume (an all-gather's output, a
 * reduce-scatter's input, an all-reduce's buffer). */
typedef struct pn_coll_sample {
    pn_kind kind;
    int ranks;
    uint64_t bytes;
    double us;
} pn_coll_sample;

/* The host link while `gpus` GPUs copy at once (the first ones; pair >= 1: GPU 0 and GPU
 * `pair`): GPU 0's rate and all of them together. */
typedef struct pn_link_sample {
    int gpus, pair, h2d;
    uint64_t bytes;              /* per GPU */
    double gpu0_Bps, sum_Bps;
} pn_link_sample;

/* nccl-tests' bus bandwidth: the bytes each rank's links carry over the time (an all-gather or
 * reduce-scatter moves (p - 1) / p of the volume, an all-reduce twice that). */
double pn_bus_Bps(const pn_coll_sample *s);

typedef struct pn_fit {
    int gpus, gpus_per_switch;
    double nvlink_Bps, nvlink_lat_us;
    int n_series;                /* the lines (a collective at a rank count) fitted */
    double solo_Bps;             /* GPU 0's host-to-device rate alone */
} pn_fit;

/* The fit: for each collective at each rank count the least-squares line through its times
 * over the sizes, read as the roofline model's launch + steps (lat + bytes / ranks / bw)
 * (launch_us: the profile's gpu.kernel_launch_us; a latency below 0 counts as 0); nvlink_Bps
 * and nvlink_lat_us the medians over the lines; gpus_per_switch 1 + the GPUs whose copies at
 * once with GPU 0 slow it below 3/4 of its rate alone. MS_ERR_INVALID when no collective was
 * measured at two sizes. */
ms_status pn_fit_samples(const pn_coll_sample *cs, size_t n, const pn_link_sample *ls,
                         size_t nl, int gpus, double launch_us, pn_fit *out, ms_error *err);
/* Sets the profile's node.gpus, node.gpus_per_switch, node.nvlink_Bps, node.nvlink_lat_us
 * and their sources: `source` and what each figure was taken from. */
void pn_apply(machine_profile *p, const pn_fit *f, const char *source);
/* The raw samples: a header line, then one line per sample. */
void pn_write_raw(FILE *f, const pn_coll_sample *cs, size_t n, const pn_link_sample *ls,
                  size_t nl);

#endif

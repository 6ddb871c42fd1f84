/* lower_chunks_knobs.c — the chunk lowering's knobs (lc_knobs, lower_chunks.h): their typed
 * table, defaults, and reading them from and writing them to a plan. Used by the ProTrain
 * policies and cost model, planners/protrain/lower_chunks.c and tests. */
#include "planners/protrain/lower_chunks.h"
#include "planners/knob.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LC_CHUNK_SEARCH_MAX (UINT64_C(64) << 30) /* chunk_search knob, at most */
#define LC_MAX_BYTES_PER_PARAM 64 /* every bytes-per-parameter knob, at most */

/* ======================================================================== knobs */

static const char *const LC_CHUNK_BY[] = { "size", "layer", NULL };
static const char *const LC_COLLS[] = { "auto", "link", "compute", "stream", NULL };
static const int LC_COLL_VALS[] = { LC_COLL_AUTO, LC_COLL_LINK, LC_COLL_COMPUTE, LC_COLL_STREAM };
static const char *const LC_GATHERS[] = { "step", "next", "auto", NULL };
static const int LC_GATHER_VALS[] = { LC_PG_STEP, LC_PG_NEXT, LC_PG_AUTO };

/* A bytes-per-parameter figure: at most LC_MAX_BYTES_PER_PARAM. Beyond any training format
 * (fp64 parameters, gradients, master copy and both moments are 40), and the lowering cuts a
 * copy into pieces of one chunk, so an absurd figure would make millions of actions. */
#define LC_PER_PARAM(key, F, def, doc, src, rec)                                                \
    { key, KNOBTAB_DBL, offsetof(lc_knobs, F), def, 0, LC_MAX_BYTES_PER_PARAM, NULL, NULL,      \
      "bytes per parameter in [0, 64]", doc, src, 0, rec }
#define LC_INT(key, F, def, lo, doc) KNOB_INT(key, lc_knobs, F, def, lo, 1000000, doc, "")
/* A row that lc_knobs_to_plan writes under knobtab_rec `rec` rather than always. */
#define LC_REC(key, type, F, def, lo, hi, doc, src, rec)                                         \
    { key, type, offsetof(lc_knobs, F), def, lo, hi, NULL, NULL, NULL, doc, src, 0, rec }
#define LC_ENUM(key, F, def, names, vals, doc)                                                  \
    { key, KNOBTAB_ENUM, offsetof(lc_knobs, F), def, 0, 0, names, vals, NULL, doc, "", 0, 0 }

/* The chunk lowering's knobs (lc_knobs in lower_chunks.h says what each does), in the order
 * they are checked and lc_knobs_to_plan writes them into a plan. */
static const knobtab_row lc_rows[] = {
    LC_ENUM("chunk_by", chunk_by_layer, "size", LC_CHUNK_BY, NULL,
            "size: ProTrain's fixed-size chunks; layer: one chunk per parameter group"),
    KNOB_BYTES("chunk_bytes", lc_knobs, chunk_bytes, "0", 0, HUGE_VAL,
               "chunk size S_chunk; 0: searched", "ProTrain §3.1"),
    /* steers the search; not part of what a plan records */
    LC_REC("chunk_search", KNOBTAB_BYTES, chunk_search_bytes, "64MiB", 0, HUGE_VAL,
           "range above the largest parameter the chunk-size search scans (at most 64GiB)", "",
           KNOBTAB_REC_NEVER),
    LC_INT("n_persist", n_persist, "0", 0, "persistent chunks (kept on the GPU)"),
    LC_INT("n_buffer", n_buffer, "0", 0, "prefetch buffers for non-persistent chunks"),
    LC_INT("n_swap", n_swap, "0", 0, "blocks whose activations are swapped"),
    LC_INT("n_checkpoint", n_ckpt, "0", 0, "blocks checkpointed (recomputed)"),
    LC_PER_PARAM("host_bytes_per_param", host_bytes_per_param, "14",
                 "host bytes per parameter of a non-persistent chunk (fp32 master, Adam m, v, "
                 "fp16 copy)", "ProTrain §3.1", KNOBTAB_REC_ALWAYS),
    LC_REC("host_pinned_tensors", KNOBTAB_INT, host_pinned_tensors, "0", 0, 1000000,
           "of those, pinned PyTorch tensors per chunk shard (rounded to a power of two)", "",
           KNOBTAB_REC_NONZERO),
    LC_PER_PARAM("host_pinned_bytes_per_param", host_pinned_bytes_per_param, "0",
                 "bytes per parameter of each pinned tensor", "FSDP", KNOBTAB_REC_NONZERO),
    LC_PER_PARAM("gpu_opt_bytes_per_param", gpu_opt_bytes_per_param, "12",
                 "optimizer state bytes per parameter of persistent chunks on the GPU", "",
                 KNOBTAB_REC_ALWAYS),
    LC_PER_PARAM("param_xfer_bytes", param_xfer_bytes, "2",
                 "bytes per parameter copied to the GPU to gather a chunk", "",
                 KNOBTAB_REC_ALWAYS),
    LC_PER_PARAM("grad_xfer_bytes", grad_xfer_bytes, "2",
                 "bytes per parameter of the gradient shard copied to the host", "",
                 KNOBTAB_REC_ALWAYS),
    LC_ENUM("coll", coll, "auto", LC_COLLS, LC_COLL_VALS,
            "collectives through host memory (link), as compute, or on a copy stream; auto: link "
            "without NVLink"),
    KNOB_DBL("coll_link_eff", lc_knobs, coll_link_eff, "0.5", 1e-3, HUGE_VAL,
             "fraction of the link rate collectives through host memory reach (at most 1)",
             "assumed (to be measured)"),
    LC_INT("overlap_host_adam", overlap_host_adam, "1", 0,
           "1: a chunk's host Adam starts when its gradients are on the host"),
    LC_INT("persist_shard", persist_shard, "1", 0,
           "1: persistent chunks' optimizer states ZeRO-sharded over dp"),
    LC_INT("staging_separate", staging_separate, "0", 0,
           "1: the pinned copy buffers come on top of host_bytes_per_param"),
    KNOB_DBL("host_adam_scale", lc_knobs, host_adam_scale, "1", 1e-6, HUGE_VAL,
             "multiplies host.adam_params_per_s", ""),
    LC_INT("step_sync", step_sync, "1", 0, "1: the step ends when the host Adam ends"),
    LC_ENUM("persist_gather", persist_gather, "step", LC_GATHERS, LC_GATHER_VALS,
            "persistent chunks all-gathered after their Adam (step) or in the next forward "
            "(next); auto: the cost model's pick (search only)"),
    LC_INT("reuse", reuse_resident, "1", 0,
           "1: chunks resident after the forward are reused by the backward"),
    LC_INT("prefetch_depth", prefetch_depth, "0", -1,
           "access steps ahead a load may be issued; 0: as buffers allow; -1: on demand"),
    LC_INT("swap_lead", swap_lead, "0", 0, "blocks ahead a swapped block is prefetched"),
    LC_REC("init_device_bytes", KNOBTAB_BYTES, init_device_bytes, "0", 0, HUGE_VAL,
           "bytes allocated and freed on the GPU before training", "", KNOBTAB_REC_NONZERO),
};
const knobtab lc_knob_table = KNOBTAB("chunk lowering", lc_rows, KNOBTAB_MSG_PLAN, lc_knobs, given);

static const knobtab_row lc_marker_rows[] = {
    KNOB_FLAG("chunks", lc_marker, chunks, "0",
              "the chunk lowering's marker, 1 on every chunk-managed plan (set by the policy)", ""),
};
const knobtab lc_marker_table = KNOBTAB("chunk lowering", lc_marker_rows, KNOBTAB_MSG_PLAN,
                                        lc_marker, given);

void lc_knobs_default(lc_knobs *k)
{
    memset(k, 0, sizeof *k);
    knobtab_defaults(&lc_knob_table, k);
}

ms_status lc_knobs_from_plan(const plan_t *p, lc_knobs *k, ms_error *err)
{
    lc_knobs_default(k);
    if (!p) return MS_OK;
    lc_marker mk;
    ms_status st = knob_from_plan(&lc_marker_table, p, &mk, err);
    if (!st && mk.given && !mk.chunks)
        return ms_fail(err, MS_ERR_INVALID, "plan knob chunks=0: the chunk lowering's marker is "
                       "1 on every chunk-managed plan (leave it unset)");
    if (!st) st = knob_from_plan(&lc_knob_table, p, k, err);
    /* the chunk-size search packs once per MiB of its range: bound the work */
    if (!st && k->chunk_search_bytes > LC_CHUNK_SEARCH_MAX)
        return ms_fail(err, MS_ERR_INVALID, "plan knob chunk_search=%" PRIu64 ": at most 64GiB "
                       "(the search tries every MiB of the range)", k->chunk_search_bytes);
    if (!st && (k->host_pinned_tensors > 64 ||
                k->host_pinned_tensors * k->host_pinned_bytes_per_param >
                    k->host_bytes_per_param))
        st = ms_fail(err, MS_ERR_INVALID, "plan knobs host_pinned_tensors x "
                     "host_pinned_bytes_per_param (%d x %g) exceed host_bytes_per_param (%g)",
                     k->host_pinned_tensors, k->host_pinned_bytes_per_param,
                     k->host_bytes_per_param);
    if (!st && k->coll_link_eff > 1)
        st = ms_fail(err, MS_ERR_INVALID, "plan knob coll_link_eff=%g: expected at most 1",
                     k->coll_link_eff);
    return st;
}

ms_status lc_knobs_to_plan(const lc_knobs *k, plan_t *p, ms_error *err)
{
    lc_marker mk = { 1, 0 };
    ms_status st = plan_set_lowering(p, "chunks");
    if (st != MS_OK) return ms_fail(err, st, "cannot record the chunk knobs in the plan");
    st = knob_to_plan(&lc_marker_table, &mk, p, err);
    return st ? st : knob_to_plan(&lc_knob_table, k, p, err);
}

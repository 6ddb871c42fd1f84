/* lower_chunks_coll.c — the data-parallel collectives of chunks as the chunk lowering and the
 * ProTrain cost model both charge them (lower_chunks.h): the collective mode in force,
 * whether the persistent chunks' all-gathers may move to the next iteration, and ring times
 * over NVLink. Used by lower_chunks.c, planners/protrain/cost_protrain.c and the tests. */
#include "planners/protrain/lower_chunks.h"

#include "traces/roofline.h"

int lc_coll_mode(const lc_knobs *k, const machine_t *m, int dp)
{
    if (dp <= 1) return LC_COLL_COMPUTE; /* no collective at all */
    if (k->coll != LC_COLL_AUTO) return k->coll;
    return (m && m->nvlink_Bps > 0) ? LC_COLL_STREAM : LC_COLL_LINK;
}

int lc_persist_gather_movable(const lc_knobs *k, int coll, int dp)
{
    return k->persist_shard && dp > 1 && (coll == LC_COLL_LINK || coll == LC_COLL_STREAM);
}

double lc_coll_us(const machine_t *m, uint64_t bytes, int dp)
{
    if (dp <= 1 || !m) return 0;
    return roof_coll_us(m, ROOF_ALL_GATHER, bytes, dp, dp);
}

double lc_allreduce_us(const machine_t *m, uint64_t bytes, int dp)
{
    if (dp <= 1 || !m) return 0;
    return roof_coll_us(m, ROOF_ALL_REDUCE, bytes, dp, dp);
}

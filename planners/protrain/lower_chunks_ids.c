/* lower_chunks_ids.c — the synthetic tensor ids of the chunk lowering (lc_id, lc_id_parse in
 * lower_chunks.h): the blocks it makes (persistent chunks, their optimizer states, buffers,
 * host copies, the initialization block) named apart from every trace id and lower.c's.
 * Used by the schedule (lower_chunks.c), the buffer plan and the tests. */
#include "planners/protrain/lower_chunks.h"

uint64_t lc_id(int kind, uint32_t index)
{
    return LC_ID_BASE | ((uint64_t)(kind & 0xff) << 40) | index;
}

int lc_id_parse(uint64_t id, int *kind, uint32_t *index)
{
    if ((id >> 61) != 1) return 0;
    if (kind) *kind = (int)((id >> 40) & 0xff);
    if (index) *index = (uint32_t)(id & 0xffffffffu);
    return 1;
}


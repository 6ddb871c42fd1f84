/* alloc_stitch.h — GMLake's virtual-memory stitching allocator (Guo et al., ASPLOS'24, §3-§4;
 * released code: intelligent-machine-learning/glake, GMLake/src/CUDACachingAllocator.cpp).
 * Physical memory comes in granule-sized chunks (2 MiB) mapped into primitive blocks
 * (pBlocks); free pBlocks can be stitched into a new virtual range (an sBlock) that maps the
 * same chunks again. BestFit states: exact match, single block (Split), multiple blocks
 * (Stitch), insufficient (Alloc + Stitch), OOM; StitchFree drops least-recently-used
 * inactive sBlocks. Requests <= 1 MiB go to an internal "caching" allocator (PyTorch's
 * small pool), as GMLake does. Registered as "stitching" in alloc.c; used through alloc.h
 * by sim/, runtime/ and the tests. Rules, knobs and deviations: docs/ALLOCATORS.md. */
#ifndef MEMSIM_ALLOC_STITCH_H
#define MEMSIM_ALLOC_STITCH_H

#include "memory/alloc.h"

extern const alloc_vtable alloc_stitch_vt;

/* Where the paper and the released code differ, both readings are knobs. The alloc_config
 * fields frag_limit_bytes and stitch_limit_bytes are the allocator's other knobs. */
typedef enum alloc_stitch_frag_rule {
    /* Paper §4.2.3 read literally: a free pBlock smaller than frag_limit_bytes is neither
     * split nor stitched; it is reused only by an exact match. */
    ALLOC_STITCH_FRAG_BLOCKS = 0,
    /* glake (the default): the limit gates the request; a request below it is never
     * stitched (an sBlock is never smaller than the limit), any free pBlock may be split,
     * or stitched into a request at or above the limit. */
    ALLOC_STITCH_FRAG_REQUEST = 1
} alloc_stitch_frag_rule;

typedef struct alloc_stitch_knobs {
    alloc_stitch_frag_rule frag_rule;
    int coalesce;          /* merge adjacent free pBlocks of a segment on free (glake and
                            * the default: 1; the paper does not say) */
    int s4_shortfall;      /* insufficient state: 1 = new chunks for the shortfall + Stitch
                            * (paper); 0 = a new pBlock of the whole request (glake reAlloc=0) */
    int pytorch_sizes;     /* new pBlocks sized like PyTorch segments: 20 MiB under 10 MiB
                            * (glake: 1); 0 = exactly the request's chunks (paper) */
    int small_via_caching; /* requests <= 1 MiB go to an internal "caching" allocator (1) */
} alloc_stitch_knobs;

/* The defaults of a new stitching allocator: the paper's BestFit, Alloc of the shortfall
 * and exact-size pBlocks, with glake's fragmentation rule and coalescing. */
void alloc_stitch_knobs_default(alloc_stitch_knobs *k);
/* The released glake code's rules (use with cfg.frag_limit_bytes = 512 MiB). */
void alloc_stitch_knobs_glake(alloc_stitch_knobs *k);
/* Sets one knob from text (plan files): keys "frag_rule" (blocks|request), "coalesce",
 * "s4_shortfall", "pytorch_sizes", "small_via_caching" (0|1). MS_ERR_NOTFOUND for an
 * unknown key, MS_ERR_PARSE for a bad value. */
ms_status alloc_stitch_knobs_parse(alloc_stitch_knobs *k, const char *key, const char *value);
/* Changes the knobs of a stitching allocator that holds no live block (else
 * MS_ERR_INVALID; MS_ERR_UNSUPPORTED if a is not a stitching allocator). Cached memory is
 * released first. */
ms_status alloc_stitch_set_knobs(alloc_t *a, const alloc_stitch_knobs *k);

/* Counts for tests and reports: BestFit states taken so far, indexed 1..5 (exact match,
 * single, multiple, insufficient, OOM); sBlocks alive; bytes of all sBlocks. */
uint64_t alloc_stitch_state_count(const alloc_t *a, int state);
size_t alloc_stitch_num_sblocks(const alloc_t *a);
uint64_t alloc_stitch_stitched_bytes(const alloc_t *a);

#endif

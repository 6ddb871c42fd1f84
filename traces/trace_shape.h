/* trace_shape.h — traces made again after another trace of the same structure: the
 * generator's traces across the points of a sweep (traces/gen_reuse.c), whose records differ
 * only in their sizes and times. A trace made like a base trace is filled by the ordinary
 * trace_append, each record compared with base's at the same place instead of checked and
 * indexed afresh; it reads base's op id lists and id indexes in place (it holds a reference to
 * base). Its structure is base's, which the lowering's reuse (planners/lower_reuse.c) is told
 * by tshape_of instead of comparing the records again. */
#ifndef MEMSIM_TRACE_SHAPE_H
#define MEMSIM_TRACE_SHAPE_H

#include "traces/trace.h"

/* A record's structure is all but its numbers: a tensor's bytes and an op's flops,
 * bytes_read, bytes_written, dur_us and host_us (whether bytes are zero and whether dur_us
 * is unknown are structure). */

/* An empty trace whose appends must follow base's records one by one (base: a trace not
 * itself made by this function); NULL when out of memory or base is such a trace. An append
 * that differs from base's record in structure, or whose numbers a trace cannot hold, fails
 * with MS_ERR_INVALID and nothing appended; so does every later one. Meta pairs are the
 * trace's own. */
trace_t *tshape_new_like(const trace_t *base);
/* 1 while t, made by tshape_new_like, is being made in the records a trace made after the
 * same base gave back (its next record's slot already holds a record of base's structure):
 * its generator may then hand the next record's fields to the tshape_put_ functions, which
 * compare them with that slot's and write the numbers alone, instead of building a record
 * for trace_append to compare and copy. */
int tshape_in_place(const trace_t *t);
/* As trace_append of the record the generator builds for these fields (trace_alloc_rec
 * with its stream; an op with host_us and host_sync 0, its name by trace_layer_name; a
 * free; a mark), on a trace that was tshape_in_place when it was made: the same result,
 * the same failures (past base's records, after a miss). */
ms_status tshape_put_alloc(trace_t *t, uint64_t id, uint64_t bytes, trace_class cls, int layer,
                           int64_t producer, int tok_scaled, int32_t stream, const char *what);
typedef struct tshape_opfields {
    uint64_t id;
    trace_opkind kind;
    trace_phase phase;
    int layer;
    double flops;
    uint64_t bytes_read, bytes_written;
    double dur_us;
    uint32_t n_in, n_out;
    const uint64_t *in, *out;
    const char *what;        /* named trace_layer_name(layer, what) */
} tshape_opfields;
ms_status tshape_put_op(trace_t *t, const tshape_opfields *f);
ms_status tshape_put_free(trace_t *t, uint64_t id);
ms_status tshape_put_mark(trace_t *t, trace_markkind kind, int64_t value);
/* Ends the binding: 1 when every record of base was followed and none failed (t is then
 * the trace the same appends to a trace_new would have made, and may be appended to further
 * as any trace), 0 otherwise. */
int tshape_end(trace_t *t);
/* The trace whose records t has, structure for structure: base for a trace tshape_end
 * accepted and not appended to since, t itself otherwise. Two traces with the same
 * tshape_of and the same number of records have records of the same structure. */
const trace_t *tshape_of(const trace_t *t);
/* An ALLOC or MARK record of a trace: its index, its type and (ALLOC) its tensor's class. */
typedef struct tshape_ref {
    uint32_t at;
    uint8_t type;            /* trace_rtype */
    uint8_t cls;             /* trace_class of an ALLOC */
} tshape_ref;

/* t's ALLOC and MARK records in order (*n of them), for a reader that needs no op or free
 * and only some classes (the policies' skeletal tensors, planners/pol_layers.c): where t or
 * the trace it was made after (tshape_new_like) has the list; NULL otherwise. */
const tshape_ref *tshape_alloc_marks(const trace_t *t, size_t *n);
/* What a reader derived from a trace's structure alone (numbers not read), kept with the
 * trace tshape_of gives and freed with it, for the other traces of that structure: the data
 * kept under key (the address of an object of the reader's own), or NULL. */
void *tshape_derived(const trace_t *t, const void *key);
/* Keeps data under key with t (a trace tshape_of gives), freed by free_fn when t is freed;
 * MS_ERR_NOMEM (data not kept: the caller still owns it), MS_ERR_INVALID when the key has
 * data already. */
ms_status tshape_keep_derived(const trace_t *t, const void *key, void *data,
                              void (*free_fn)(void *));
/* 1 when a and b hold the same meta pairs in the same order and the same records, every
 * field bit for bit (op id lists by their contents). */
int tshape_equal(const trace_t *a, const trace_t *b);

#endif

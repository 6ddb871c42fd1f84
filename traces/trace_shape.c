/* trace_shape.c — traces made again after another trace of the same structure (see
 * trace_shape.h). trace_append (traces/trace.c) hands a bound trace's records here; the
 * generator's reuse (traces/gen_reuse.c) makes and checks such traces, and the lowering's
 * reuse (planners/lower_reuse.c) asks tshape_of whose structure a trace has. */
#include "traces/trace_shape.h"

#include <stdlib.h>
#include <string.h>

#include "traces/trace_int.h"

/* base's list of its ALLOC and MARK records (trace.am), once: a NULL list (out of memory,
 * more records than 32 bits count) only leaves its readers to look at every record. */
static void note_alloc_marks(trace_t *b)
{
    if (b->am && b->am_upto == b->n) return;
    free(b->am);
    b->am = NULL;
    b->n_am = 0;
    if (b->n > UINT32_MAX) return;
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++)
        k += b->recs[i].type == TR_ALLOC || b->recs[i].type == TR_MARK;
    if (!(b->am = malloc((k ? k : 1) * sizeof *b->am))) return;
    for (size_t i = 0; i < b->n; i++) {
        const trace_rec *r = &b->recs[i];
        if (r->type != TR_ALLOC && r->type != TR_MARK) continue;
        b->am[b->n_am++] = (tshape_ref){ (uint32_t)i, (uint8_t)r->type,
                                         r->type == TR_ALLOC ? (uint8_t)r->u.alloc.cls : 0 };
    }
    b->am_upto = b->n;
}

trace_t *tshape_new_like(const trace_t *base)
{
    if (!base || base->base) return NULL;
    note_alloc_marks((trace_t *)base); /* base is held, as trace_ref holds it, not changed */
    trace_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    trace_t *b = (trace_t *)base; /* its spare is bookkeeping, as trace_ref's count */
    if (b->spare_recs) {
        /* the last trace's records, written over in place: each append compares with the
         * record it replaces, of base's structure, and base's own records are not read (a
         * gpt-7b trace is 0.58 MB: reading base's beside writing these was the binding's
         * most frequent cache miss) */
        t->recs = b->spare_recs;
        t->cap = b->spare_cap;
        t->recycled = 1;
        b->spare_recs = NULL;
        b->spare_cap = 0;
    } else if (base->n && trace_reserve(t, base->n) != MS_OK) {
        /* room for all of base's records: a bound append never grows the array */
        free(t);
        return NULL;
    }
    t->base = trace_ref(base);
    t->binding = 1;
    return t;
}

/* 1 when the names are equal: b's ends within TRACE_NAME_MAX, a's must end where it does.
 * Records made by the generator and the readers are cleared before their names are written,
 * so equal names are nearly always equal buffers: that is one fixed-size comparison, which
 * the compiler makes a few wide loads, where strlen and memcmp were two library calls at
 * every record of a bound trace. Buffers that differ only after the end still compare by
 * the names. */
static int same_name(const char *a, const char *b)
{
    if (!memcmp(a, b, TRACE_NAME_MAX)) return 1;
    return !memcmp(a, b, strlen(b) + 1);
}

/* An op's lists are a few ids: compared here, not by a call to memcmp per list. */
static int same_ids(const uint64_t *a, const uint64_t *b, uint32_t n)
{
    if (n && !a) return 0;
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* 1 when r has the structure of b (a record of a trace, so valid). */
static int same_structure(const trace_rec *r, const trace_rec *b)
{
    if (r->type != b->type || r->line != b->line) return 0;
    switch (r->type) {
    case TR_ALLOC: {
        const trace_tensor *x = &r->u.alloc, *y = &b->u.alloc;
        return x->id == y->id && x->cls == y->cls && x->layer == y->layer &&
               x->stream == y->stream && x->tok_scaled == y->tok_scaled &&
               x->producer == y->producer && (x->bytes != 0) == (y->bytes != 0) &&
               same_name(x->name, y->name);
    }
    case TR_FREE:
        return r->u.free_id == b->u.free_id;
    case TR_OP: {
        const trace_op *x = &r->u.op, *y = &b->u.op;
        return x->id == y->id && x->kind == y->kind && x->phase == y->phase &&
               x->layer == y->layer && x->host_sync == y->host_sync &&
               (x->dur_us < 0) == (y->dur_us < 0) && x->n_in == y->n_in &&
               x->n_out == y->n_out && same_ids(x->in, y->in, x->n_in) &&
               same_ids(x->out, y->out, x->n_out) && same_name(x->name, y->name);
    }
    case TR_MARK:
        return r->u.mark.kind == b->u.mark.kind && r->u.mark.value == b->u.mark.value;
    }
    return 0;
}

ms_status tshape_append(trace_t *t, const trace_rec *rec)
{
    const trace_t *b = t->base;
    if (t->bind_miss || t->n >= b->n) {
        t->bind_miss = 1;
        return MS_ERR_INVALID;
    }
    trace_rec *dst = &t->recs[t->n]; /* below cap: tshape_new_like reserved base->n */
    /* a recycled slot holds a record of base's structure, so comparing with it is comparing
     * with base's (same_structure is an equality of the fields it reads) */
    const trace_rec *want = t->recycled ? dst : &b->recs[t->n];
    if (!same_structure(rec, want) || !trace_rec_numbers_valid(rec)) {
        t->bind_miss = 1;
        return MS_ERR_INVALID;
    }
    const uint64_t *in = NULL, *out = NULL;
    if (rec->type == TR_OP) {
        in = want->u.op.in;
        out = want->u.op.out;
    }
    *dst = *rec;
    if (rec->type == TR_OP) { /* as trace_append stores it, the lists read in base's blocks */
        trace_op *o = &dst->u.op;
        o->in = in;
        o->out = out;
        if (o->dur_us < 0) o->dur_us = -1;
        if (o->host_us > 0 || o->host_sync) t->host_times = 1;
    }
    t->n++;
    return MS_OK;
}

int tshape_in_place(const trace_t *t)
{
    return t && t->base && t->binding && t->recycled && !t->bind_miss && t->n < t->base->n;
}

/* The length of the "L<layer>." prefix trace_layer_prefix writes (none for layer < 0) when
 * name begins with it, else -1: the digits are read back, since formatting them again was a
 * division loop at every record of a trace made in place. */
static int layer_prefix_len(const char *name, int layer)
{
    if (layer < 0) return 0;
    if (name[0] != 'L' || name[1] < '0' || name[1] > '9') return -1;
    uint64_t v = (uint64_t)(name[1] - '0');
    int n = 2;
    if (v) /* no leading zero: "L0." is the one prefix whose digits begin with 0 */
        for (; n <= 10 && name[n] >= '0' && name[n] <= '9'; n++)
            v = v * 10 + (uint64_t)(name[n] - '0');
    return name[n] == '.' && v == (uint64_t)layer ? n + 1 : -1;
}

/* 1 when name (a valid record's: it ends within TRACE_NAME_MAX) is what
 * trace_layer_name(buf, layer, what) writes (see traces/trace.c: the prefix, then what
 * truncated to TRACE_NAME_MAX - 1 bytes in all), compared in place instead of written. */
static int layer_name_is(const char *name, int layer, const char *what)
{
    int n = layer_prefix_len(name, layer);
    /* equal up to the end of both or up to the truncation, where name ends */
    return n >= 0 && !strncmp(name + n, what, TRACE_NAME_MAX - 1 - (size_t)n);
}

static ms_status put_miss(trace_t *t)
{
    t->bind_miss = 1;
    return MS_ERR_INVALID;
}

/* The next slot of a trace made in place, or NULL (after a miss, or past base's records: as
 * tshape_append, the put fails and so does every later one). */
static trace_rec *put_slot(trace_t *t)
{
    return !t->bind_miss && t->n < t->base->n ? &t->recs[t->n] : NULL;
}

/* The tshape_put_ functions compare the fields given with the slot's record, field by field
 * as same_structure compares, and leave every field but the numbers as the slot has them:
 * the slot's record was built by the same generator code, so the record that code would
 * build now is the slot's with the new numbers, byte for byte. */
ms_status tshape_put_alloc(trace_t *t, uint64_t id, uint64_t bytes, trace_class cls, int layer,
                           int64_t producer, int tok_scaled, int32_t stream, const char *what)
{
    trace_rec *d = put_slot(t);
    if (!d) return put_miss(t);
    trace_tensor *a = &d->u.alloc;
    if (d->type != TR_ALLOC || d->line != 0 || a->id != id || a->cls != cls ||
        a->layer != layer || a->stream != stream || a->tok_scaled != (uint8_t)tok_scaled ||
        a->producer != producer || (a->bytes != 0) != (bytes != 0) ||
        !layer_name_is(a->name, layer, what) || !trace_alloc_bytes_valid(bytes))
        return put_miss(t);
    a->bytes = bytes;
    t->n++;
    return MS_OK;
}

ms_status tshape_put_op(trace_t *t, const tshape_opfields *f)
{
    trace_rec *d = put_slot(t);
    if (!d) return put_miss(t);
    trace_op *o = &d->u.op;
    if (d->type != TR_OP || d->line != 0 || o->id != f->id || o->kind != f->kind ||
        o->phase != f->phase || o->layer != f->layer || o->host_sync != 0 ||
        (o->dur_us < 0) != (f->dur_us < 0) || o->n_in != f->n_in || o->n_out != f->n_out ||
        !same_ids(f->in, o->in, f->n_in) || !same_ids(f->out, o->out, f->n_out) ||
        !layer_name_is(o->name, f->layer, f->what) ||
        !trace_op_numbers_valid(f->flops, f->dur_us, 0))
        return put_miss(t);
    o->flops = f->flops;
    o->bytes_read = f->bytes_read;
    o->bytes_written = f->bytes_written;
    o->dur_us = f->dur_us < 0 ? -1 : f->dur_us;
    o->host_us = 0;
    t->n++;
    return MS_OK;
}

ms_status tshape_put_free(trace_t *t, uint64_t id)
{
    const trace_rec *d = put_slot(t);
    if (!d) return put_miss(t);
    if (d->type != TR_FREE || d->line != 0 || d->u.free_id != id) return put_miss(t);
    t->n++;
    return MS_OK;
}

ms_status tshape_put_mark(trace_t *t, trace_markkind kind, int64_t value)
{
    const trace_rec *d = put_slot(t);
    if (!d) return put_miss(t);
    if (d->type != TR_MARK || d->line != 0 || d->u.mark.kind != kind ||
        d->u.mark.value != value)
        return put_miss(t);
    t->n++;
    return MS_OK;
}

struct tshape_derived {
    const void *key;
    void *data;
    void (*free_fn)(void *);
    struct tshape_derived *next;
};

void *tshape_derived(const trace_t *t, const void *key)
{
    for (const struct tshape_derived *d = t->derived; d; d = d->next)
        if (d->key == key) return d->data;
    return NULL;
}

ms_status tshape_keep_derived(const trace_t *t, const void *key, void *data,
                              void (*free_fn)(void *))
{
    if (tshape_derived(t, key)) return MS_ERR_INVALID;
    struct tshape_derived *d = malloc(sizeof *d);
    if (!d) return MS_ERR_NOMEM;
    trace_t *w = (trace_t *)t; /* bookkeeping beside the records, as trace_ref's count */
    *d = (struct tshape_derived){ key, data, free_fn, w->derived };
    w->derived = d;
    return MS_OK;
}

void tshape_derived_free(trace_t *t)
{
    for (struct tshape_derived *d = t->derived, *nx; d; d = nx) {
        nx = d->next;
        if (d->free_fn) d->free_fn(d->data);
        free(d);
    }
    t->derived = NULL;
}

int tshape_give_back(trace_t *t)
{
    trace_t *b = t->base;
    if (!b || t->binding || t->bind_miss || t->tensor_idx || t->n != b->n || b->spare_recs ||
        !t->recs)
        return 0;
    b->spare_recs = t->recs;
    b->spare_cap = t->cap;
    t->recs = NULL;
    return 1;
}

int tshape_end(trace_t *t)
{
    if (!t || !t->base || !t->binding) return 0;
    t->binding = 0;
    if (t->n != t->base->n) t->bind_miss = 1;
    return !t->bind_miss;
}

/* Indexes of t's own, from its records (base's blocks still hold the old id lists). */
ms_status tshape_unshare(trace_t *t)
{
    u64map *ti = u64map_new(1024), *oi = u64map_new(1024);
    int nomem = !ti || !oi;
    for (size_t i = 0; i < t->n && !nomem; i++) {
        const trace_rec *r = &t->recs[i];
        if (r->type == TR_ALLOC) nomem = u64map_put(ti, r->u.alloc.id, i) != 0;
        else if (r->type == TR_OP) nomem = u64map_put(oi, r->u.op.id, i) != 0;
    }
    if (nomem) {
        u64map_free(ti);
        u64map_free(oi);
        return MS_ERR_NOMEM;
    }
    t->tensor_idx = ti;
    t->op_idx = oi;
    return MS_OK;
}

const tshape_ref *tshape_alloc_marks(const trace_t *t, size_t *n)
{
    *n = 0;
    const trace_t *b = t->base && !t->tensor_idx ? t->base : t; /* whose records t has */
    if (!b->am || b->am_upto != b->n || t->n > b->n) return NULL;
    size_t k = b->n_am;
    while (k > 0 && b->am[k - 1].at >= t->n) k--; /* a trace still binding has fewer */
    *n = k;
    return b->am;
}

const trace_t *tshape_of(const trace_t *t)
{
    if (t && t->base && !t->binding && !t->bind_miss && !t->tensor_idx) return t->base;
    return t;
}

static int same_bits(const void *a, const void *b, size_t n) { return !memcmp(a, b, n); }

/* 1 when the two records are equal field by field, numbers bit for bit. */
static int same_record(const trace_rec *r, const trace_rec *b)
{
    if (!same_structure(r, b)) return 0;
    if (r->type == TR_ALLOC) return r->u.alloc.bytes == b->u.alloc.bytes;
    if (r->type != TR_OP) return 1;
    const trace_op *x = &r->u.op, *y = &b->u.op;
    return same_bits(&x->flops, &y->flops, sizeof x->flops) &&
           x->bytes_read == y->bytes_read && x->bytes_written == y->bytes_written &&
           same_bits(&x->dur_us, &y->dur_us, sizeof x->dur_us) &&
           same_bits(&x->host_us, &y->host_us, sizeof x->host_us);
}

int tshape_equal(const trace_t *a, const trace_t *b)
{
    if (a->n != b->n || a->n_meta != b->n_meta || a->host_times != b->host_times) return 0;
    for (size_t i = 0; i < a->n_meta; i++)
        if (strcmp(a->mkey[i], b->mkey[i]) || strcmp(a->mval[i], b->mval[i])) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (!same_record(&a->recs[i], &b->recs[i])) return 0;
    return 1;
}

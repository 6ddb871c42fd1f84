/* lower_reuse.c — lowered schedules reused across the points of a sweep (see lower_reuse.h).
 * Called by the pipeline (sim/pipeline.c) for `memsim sweep`. A template's structure is kept
 * as the bytes of a signature: the head (options, machine, plan, meta) and the records; a
 * later trace is compared against it field by field while its own signature is written
 * nowhere, so that a hit costs one pass over the records and one over the actions. */
#include "planners/lower_reuse.h"

#include <stdlib.h>
#include <string.h>

#include "traces/trace_shape.h"

/* Meta lines that only scale the sizes and times the lowering copies (it never reads them):
 * left out of the structure. Every other meta line is part of it. */
static const char *const size_only_meta[] = { "seq", "batch" };

typedef struct tmpl {
    unsigned char *sig;      /* head then records */
    size_t n_sig, n_head;
    schedule_t *s;           /* lowered for the trace the signature describes; re-bound in
                                place at each hit (every number with a source is computed
                                again, the others are the lowering's constants) */
    lower_srcs src;          /* where its numbers come from */
    uint64_t age;            /* insertion order, for replacement */
    unsigned rclass;         /* templates of byte-equal records share it (< 64) */
    trace_t *origin;         /* a reference to the trace whose structure the records are
                                (tshape_of of the template's own): a trace of the same
                                tshape_of and number of records has them, uncompared */
} tmpl;

struct lreuse {
    tmpl *t;
    size_t n, max;
    uint64_t clock;
    lreuse_stats stats;
    unsigned char *head;     /* the head of the call being served (scratch) */
    size_t n_head, cap_head;
    /* the records of the trace seen last in this point (lreuse_point), compared once for
       all the plans of the point: bit k of checked, the templates of records class k
       compared; of same, equal */
    const trace_t *seen;
    uint64_t checked, same;
};

/* ---- signatures: the bytes of a structure (compared by matches without being written) ---- */

typedef struct sig {
    unsigned char *buf;      /* grows */
    size_t n, cap;
    int nomem;               /* out of memory: the bytes are incomplete */
} sig;

static void put(sig *g, const void *p, size_t len)
{
    if (g->n + len <= g->cap) { /* the common case, without the growth call */
        memcpy(g->buf + g->n, p, len);
        g->n += len;
        return;
    }
    if (g->nomem) return;
    if (ms_grow((void **)&g->buf, &g->cap, g->n + len, 1) != MS_OK) {
        g->nomem = 1;
        return;
    }
    memcpy(g->buf + g->n, p, len);
    g->n += len;
}

static void put_str(sig *g, const char *s)
{
    put(g, s, strlen(s) + 1);
}

static void put_u64(sig *g, uint64_t v)
{
    put(g, &v, sizeof v);
}

static int size_only(const char *key)
{
    for (size_t i = 0; i < sizeof size_only_meta / sizeof *size_only_meta; i++)
        if (!strcmp(key, size_only_meta[i])) return 1;
    return 0;
}

/* The plan's tensors (id, decision, alpha each), the bytes put_u64 and put_f64 would write
 * one by one, in one growth check: a plan has a thousand, at every call. */
static void put_tensors(sig *g, const plan_t *p)
{
    size_t len = p->n_tensors * 3 * sizeof(uint64_t);
    if (g->n + len > g->cap) {
        if (g->nomem) return;
        if (ms_grow((void **)&g->buf, &g->cap, g->n + len, 1) != MS_OK) {
            g->nomem = 1;
            return;
        }
    }
    unsigned char *w = g->buf + g->n;
    for (size_t i = 0; i < p->n_tensors; i++) {
        uint64_t v[2] = { p->tensors[i].id, (uint64_t)p->tensors[i].decision };
        double a = p->tensors[i].alpha;
        memcpy(w, v, sizeof v);
        memcpy(w + sizeof v, &a, sizeof a);
        w += sizeof v + sizeof a;
    }
    g->n += len;
}

/* What the lowering reads of the options, the machine, the plan and the trace's meta. */
static void put_head(sig *g, const trace_t *t, const plan_t *p, const machine_t *m,
                     const lower_opts *o, size_t nrecs)
{
    put_u64(g, (uint64_t)nrecs);
    put_u64(g, (uint64_t)o->iter_first);
    put_u64(g, (uint64_t)o->iter_count);
    put_u64(g, (uint64_t)o->emit_marks);
    put_u64(g, (uint64_t)o->prefetch_alloc_on_compute);
    put_u64(g, (uint64_t)o->ignore_unknown_ids);
    put_u64(g, (uint64_t)o->overlap_ovl);
    lower_opts raw = *o; /* and the whole struct, for options added later (pointers cleared) */
    raw.report = NULL;
    raw.srcs = NULL;
    put(g, &raw, sizeof raw);
    put_u64(g, m != NULL);
    if (m) put(g, m, sizeof *m); /* padding included: at worst a miss, never a false hit */
    put_u64(g, p != NULL);
    if (p) {
        put_str(g, p->policy);
        put_str(g, p->lowering);
        put_str(g, p->allocator);
        put(g, &p->alloc_cfg, sizeof p->alloc_cfg);
        put_u64(g, (uint64_t)p->default_decision);
        put_u64(g, p->n_tensors);
        put_tensors(g, p);
        put_u64(g, p->n_layers);
        for (size_t i = 0; i < p->n_layers; i++) {
            put_u64(g, (uint64_t)p->layers[i].layer);
            put_u64(g, (uint64_t)p->layers[i].pmode);
            put_u64(g, (uint64_t)p->layers[i].grad_on_host);
        }
        put_u64(g, p->n_offsets);
        for (size_t i = 0; i < p->n_offsets; i++) {
            put_u64(g, p->offsets[i].id);
            put_u64(g, p->offsets[i].offset_bytes);
            put_u64(g, p->offsets[i].line);
        }
        put_u64(g, p->arena_bytes);
        put_u64(g, p->n_knobs);
        for (size_t i = 0; i < p->n_knobs; i++) {
            put_str(g, p->knobs[i].key);
            put_str(g, p->knobs[i].value);
        }
    }
    size_t nm = trace_meta_count(t);
    for (size_t i = 0; i < nm; i++) {
        const char *k = trace_meta_key(t, i);
        if (size_only(k)) continue;
        put_str(g, k);
        put_str(g, trace_meta_value(t, i));
    }
    put_u64(g, UINT64_MAX); /* the meta's end */
}

/* One record's structure: all but its sizes and times (whether they are zero or unknown
 * kept), in a zeroed fixed layout then its variable parts. */
typedef struct rec_key {
    uint64_t type, line, id, a, b, c;
} rec_key;

/* The fixed part of record r's structure; *name its name (the variable parts of an op, its
 * inputs and outputs, follow the key). */
static void key_of(const trace_rec *r, rec_key *k, const char **name)
{
    memset(k, 0, sizeof *k);
    k->type = (uint64_t)r->type;
    k->line = r->line;
    *name = NULL;
    switch (r->type) {
    case TR_ALLOC: {
        const trace_tensor *x = &r->u.alloc;
        k->id = x->id;
        k->a = (uint64_t)x->cls | (uint64_t)(x->tok_scaled != 0) << 8 |
               (uint64_t)(x->bytes != 0) << 9 | (uint64_t)(uint32_t)x->layer << 32;
        k->b = (uint64_t)(uint32_t)x->stream;
        k->c = (uint64_t)x->producer;
        *name = x->name;
        return;
    }
    case TR_FREE:
        k->id = r->u.free_id;
        return;
    case TR_OP: {
        const trace_op *op = &r->u.op;
        k->id = op->id;
        k->a = (uint64_t)op->kind | (uint64_t)op->phase << 8 |
               (uint64_t)(op->host_sync != 0) << 16 | (uint64_t)(op->dur_us < 0) << 17 |
               (uint64_t)(uint32_t)op->layer << 32;
        k->b = op->n_in;
        k->c = op->n_out;
        *name = op->name;
        return;
    }
    case TR_MARK:
        k->id = (uint64_t)r->u.mark.kind;
        k->a = (uint64_t)r->u.mark.value;
        return;
    }
}

static void put_recs(sig *g, const trace_rec *recs, size_t n)
{
    for (size_t i = 0; i < n && !g->nomem; i++) {
        rec_key k;
        const char *name;
        key_of(&recs[i], &k, &name);
        put(g, &k, sizeof k);
        if (recs[i].type == TR_OP) {
            const trace_op *op = &recs[i].u.op;
            if (op->n_in) put(g, op->in, op->n_in * sizeof *op->in);
            if (op->n_out) put(g, op->out, op->n_out * sizeof *op->out);
        }
        if (name) put_str(g, name);
    }
}

/* 1 when the bytes at b[*at..end) begin with len bytes equal to p (and *at moves past). */
static inline int same(const unsigned char *b, size_t *at, size_t end, const void *p, size_t len)
{
    if (len > end - *at || memcmp(b + *at, p, len)) return 0;
    *at += len;
    return 1;
}

/* 1 when template T has the records recs: put_recs's bytes compared where they would be
 * written. */
static int same_recs(const tmpl *T, const trace_rec *recs, size_t n)
{
    const unsigned char *b = T->sig;
    size_t at = T->n_head, end = T->n_sig;
    for (size_t i = 0; i < n; i++) {
        rec_key k;
        const char *name;
        key_of(&recs[i], &k, &name);
        if (sizeof k > end - at || memcmp(b + at, &k, sizeof k)) return 0;
        at += sizeof k;
        if (recs[i].type == TR_OP) {
            const trace_op *op = &recs[i].u.op;
            if (op->n_in && !same(b, &at, end, op->in, op->n_in * sizeof *op->in)) return 0;
            if (op->n_out && !same(b, &at, end, op->out, op->n_out * sizeof *op->out)) return 0;
        }
        if (name && !same(b, &at, end, name, strlen(name) + 1)) return 0;
    }
    return at == end;
}

/* 1 when template i has the head c->head and trace t's records: the records compared once
 * per template and trace within a point. */
static int matches(lreuse *c, size_t i, const trace_t *t, const trace_rec *recs, size_t n)
{
    const tmpl *T = &c->t[i];
    if (T->n_head != c->n_head || memcmp(T->sig, c->head, c->n_head)) return 0;
    /* the head holds the number of records: a trace made after the origin's structure
       has those records (traces/trace_shape.h) */
    if (T->origin && tshape_of(t) == T->origin) return 1;
    uint64_t bit = UINT64_C(1) << T->rclass;
    if (c->seen != t) return same_recs(T, recs, n);
    if (!(c->checked & bit)) {
        c->checked |= bit;
        if (same_recs(T, recs, n)) c->same |= bit;
    }
    return (c->same & bit) != 0;
}

void lreuse_point(lreuse *c, const trace_t *t)
{
    if (!c) return;
    c->seen = t;
    c->checked = c->same = 0;
}

/* ---- the cache ---- */

lreuse *lreuse_new(size_t max_templates)
{
    lreuse *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->max = max_templates && max_templates <= 64 ? max_templates : 16; /* a bit each */
    c->t = calloc(c->max, sizeof *c->t);
    if (!c->t) {
        free(c);
        return NULL;
    }
    return c;
}

static void tmpl_clear(tmpl *T)
{
    free(T->sig);
    sched_free(T->s);
    free(T->src.v);
    free(T->src.pool);
    free(T->src.bound);
    trace_free(T->origin);
    memset(T, 0, sizeof *T);
}

void lreuse_free(lreuse *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) tmpl_clear(&c->t[i]);
    free(c->t);
    free(c->head);
    free(c);
}

void lreuse_get_stats(const lreuse *c, lreuse_stats *out)
{
    if (c) *out = c->stats;
    else memset(out, 0, sizeof *out);
}

/* Keeps s, which the template owns from here, with its sources as a template for the head
 * c->head and records recs (trace t's), replacing the oldest when the cache is full. 0 when
 * out of memory (nothing kept, s still the caller's). */
static int keep(lreuse *c, schedule_t *s, lower_srcs *src, const trace_t *t,
                const trace_rec *recs, size_t n)
{
    sig g;
    memset(&g, 0, sizeof g);
    put(&g, c->head, c->n_head);
    put_recs(&g, recs, n);
    if (g.nomem) {
        free(g.buf);
        return 0;
    }
    size_t at = c->n;
    if (c->n == c->max) {
        at = 0;
        for (size_t i = 1; i < c->n; i++)
            if (c->t[i].age < c->t[at].age) at = i;
        tmpl_clear(&c->t[at]);
    } else {
        c->n++;
    }
    /* the records class: another template's with the same records, else one no template
       has (the memo's bits of a class that is gone are cleared) */
    uint64_t used = 0;
    unsigned cls = 64;
    for (size_t i = 0; i < c->n; i++) {
        const tmpl *U = &c->t[i];
        if (i == at) continue;
        used |= UINT64_C(1) << U->rclass;
        if (cls == 64 && U->n_sig - U->n_head == g.n - c->n_head &&
            !memcmp(U->sig + U->n_head, g.buf + c->n_head, g.n - c->n_head))
            cls = U->rclass;
    }
    for (unsigned k = 0; cls == 64 && k < 64; k++)
        if (!(used & (UINT64_C(1) << k))) cls = k;
    if (!(used & (UINT64_C(1) << cls))) {
        c->checked &= ~(UINT64_C(1) << cls);
        c->same &= ~(UINT64_C(1) << cls);
    }
    tmpl *T = &c->t[at];
    T->rclass = cls;
    T->sig = g.buf;
    T->n_sig = g.n;
    T->n_head = c->n_head;
    T->s = s;
    /* its streams' queues, which every re-binding keeps, for the executor (a schedule it
       cannot index runs as any other: sim/exec.c) */
    (void)sched_index_build(s);
    T->src = *src; /* the template owns the sources from here */
    memset(src, 0, sizeof *src);
    (void)lower_srcs_pack(&T->src); /* unpacked, each binding walks all the sources */
    (void)lower_srcs_fit(&T->src, s); /* else each binding writes the actions */
    T->age = c->clock++;
    T->origin = trace_ref(tshape_of(t));
    return 1;
}

/* The head of this call into c->head. */
static ms_status make_head(lreuse *c, const trace_t *t, const plan_t *p, const machine_t *m,
                           const lower_opts *o, size_t nrecs)
{
    sig g = { c->head, 0, c->cap_head, 0 };
    put_head(&g, t, p, m, o, nrecs);
    c->head = g.buf;
    c->cap_head = g.cap;
    c->n_head = g.n;
    return g.nomem ? MS_ERR_NOMEM : MS_OK;
}

ms_status lreuse_lower(lreuse *c, const trace_t *t, const plan_t *p, const machine_t *m,
                       const lower_opts *o, schedule_t **out, int *borrowed, ms_error *err)
{
    *borrowed = 0;
    lower_opts d;
    if (!o) {
        lower_opts_default(&d);
        o = &d;
    }
    if (!c || !t || o->report || o->srcs) return lower_schedule(t, p, m, o, out, err);
    size_t n;
    const trace_rec *recs = trace_records(t, &n);
    if (make_head(c, t, p, m, o, n) != MS_OK) return lower_schedule(t, p, m, o, out, err);
    for (size_t i = 0; i < c->n; i++) {
        tmpl *T = &c->t[i];
        if (!matches(c, i, t, recs, n)) continue;
        ms_error e;
        ms_error_clear(&e);
        if (lower_bind(T->s, &T->src, t, m, &e) != MS_OK) { /* lowered below, as always */
            tmpl_clear(T);
            *T = c->t[--c->n];
            memset(&c->t[c->n], 0, sizeof c->t[c->n]);
            c->seen = NULL; /* the slots moved */
            break;
        }
        c->stats.hits++;
        *out = T->s;
        *borrowed = 1;
        return MS_OK;
    }
    lower_srcs src;
    memset(&src, 0, sizeof src);
    lower_opts lo = *o;
    lo.srcs = &src;
    ms_status st = lower_schedule(t, p, m, &lo, out, err);
    /* kept only when its sources give its numbers back from its own trace, bit for bit */
    if (st == MS_OK && src.ok && lower_bind_same(*out, &src, t, m) &&
        keep(c, *out, &src, t, recs, n)) {
        c->stats.misses++;
        *borrowed = 1; /* the template now */
    } else if (st == MS_OK) {
        c->stats.once++;
    }
    free(src.v);
    free(src.pool);
    return st;
}

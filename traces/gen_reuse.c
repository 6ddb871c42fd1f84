/* gen_reuse.c — the generator's traces reused across a sweep's points (see gen_reuse.h).
 * Called by the pipeline (sim/pipeline.c). Templates are found by their configuration with
 * the swept sizes cleared; that key only picks which template to try: the structure itself
 * is compared record by record as the point's trace is made (traces/trace_shape.c), so a
 * key that matches a template of another structure costs a fresh generation, never a wrong
 * trace. */
#include "traces/gen_reuse.h"

#include <stdlib.h>
#include <string.h>

#include "traces/trace_shape.h"

#define GREUSE_MAX 4

typedef struct gtmpl {
    gen_config key;          /* the configuration, seq and micro_batch cleared */
    const machine_t *m;
    trace_t *t;              /* a reference (trace_ref): the point's own caller frees it too */
    uint64_t age;            /* last use, for replacement */
} gtmpl;

struct greuse {
    gtmpl t[GREUSE_MAX];
    size_t n;
    uint64_t clock;
    greuse_stats stats;
};

greuse *greuse_new(void) { return calloc(1, sizeof(greuse)); }

void greuse_free(greuse *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) trace_free(c->t[i].t);
    free(c);
}

void greuse_get_stats(const greuse *c, greuse_stats *out)
{
    if (c) *out = c->stats;
    else memset(out, 0, sizeof *out);
}

static void key_of(const gen_config *cfg, gen_config *k)
{
    memcpy(k, cfg, sizeof *k); /* padding included: at worst a template not tried */
    k->seq = 0;
    k->micro_batch = 0;
}

/* The template for cfg on m, or c->n when none. */
static size_t find(const greuse *c, const gen_config *cfg, const machine_t *m)
{
    gen_config k;
    key_of(cfg, &k);
    for (size_t i = 0; i < c->n; i++)
        if (c->t[i].m == m && !memcmp(&c->t[i].key, &k, sizeof k)) return i;
    return c->n;
}

/* Keeps t as the template for (cfg, m): in slot at (a template of the same key whose
 * structure did not hold), else a free slot, else the oldest. */
static void keep(greuse *c, size_t at, const gen_config *cfg, const machine_t *m, trace_t *t)
{
    if (at == c->n) {
        if (c->n < GREUSE_MAX) {
            c->n++;
        } else {
            at = 0;
            for (size_t i = 1; i < c->n; i++)
                if (c->t[i].age < c->t[at].age) at = i;
        }
    }
    if (at < c->n && c->t[at].t) trace_free(c->t[at].t);
    gtmpl *T = &c->t[at];
    key_of(cfg, &T->key);
    T->m = m;
    T->t = trace_ref(t);
    T->age = c->clock++;
}

/* 1 when generating cfg again after fresh's structure gives fresh back bit for bit. */
static int binds_back(const gen_config *cfg, const machine_t *m, const trace_t *fresh)
{
    trace_t *again = NULL;
    ms_error e;
    ms_error_clear(&e);
    if (gen_trace_like(cfg, m, fresh, &again, &e) != MS_OK) return 0;
    int same = tshape_equal(again, fresh);
    trace_free(again);
    return same;
}

ms_status greuse_trace(greuse *c, const gen_config *cfg, const machine_t *m, trace_t **out,
                       ms_error *err)
{
    if (!c) return gen_trace(cfg, m, out, err);
    size_t i = find(c, cfg, m);
    if (i < c->n) {
        ms_error e;
        ms_error_clear(&e);
        if (gen_trace_like(cfg, m, c->t[i].t, out, &e) == MS_OK) {
            c->stats.hits++;
            c->t[i].age = c->clock++;
            return MS_OK;
        }
    }
    ms_status st = gen_trace(cfg, m, out, err);
    if (st != MS_OK) return st;
    if (binds_back(cfg, m, *out)) {
        keep(c, i, cfg, m, *out);
        c->stats.misses++;
    } else {
        c->stats.once++;
    }
    return MS_OK;
}

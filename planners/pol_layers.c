/* pol_layers.c — the layer view of a trace (pol_layers.h): skeletal activations per layer
 * and forward pass with each layer's input, and the checks a planner makes of a trace's
 * layer indices before it sizes anything by them. Used by the policies through
 * planners/policy.h. */
#include "planners/pol_layers.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"
#include "base/util.h"
#include "traces/trace_shape.h"

/* ---- layer view ---- */

static uint64_t group_key(uint32_t pass, int32_t layer)
{
    return ((uint64_t)pass << 32) | (uint32_t)layer;
}

/* Whether the tensor's producer op lies outside layer L's forward (the fallback rule). */
static int produced_outside(const trace_t *t, const trace_tensor *x)
{
    if (x->producer < 0) return 1;
    const trace_op *op = trace_find_op(t, (uint64_t)x->producer);
    return !op || op->layer != x->layer || op->phase != TP_FWD;
}

/* ms_ends_with for a name whose length is known (three suffixes per tensor, every plan). */
static int ends_with(const char *name, size_t len, const char *suffix)
{
    size_t k = strlen(suffix);
    return len >= k && memcmp(name + len - k, suffix, k) == 0;
}

/* Collects skeletal tensors of forward passes; a trace without phase marks counts as one
 * forward pass (phase "none"). */
static ms_status collect(const trace_t *t, pol_skel **out, size_t *n, size_t *cap,
                         u64map *named)
{
    trace_phase phase = TP_NONE;
    uint32_t pass = 0;
    int seen_fwd = 0;
    size_t nrecs, n_am;
    const trace_rec *recs = trace_records(t, &nrecs);
    /* only marks and skeletal allocs matter: a sweep's trace lists its allocs with their
     * classes and its marks (tshape_alloc_marks), so that the other records, nine in ten of
     * a generated trace's, are not read at every plan */
    const tshape_ref *am = tshape_alloc_marks(t, &n_am);
    size_t end = am ? n_am : nrecs;
    for (size_t j = 0; j < end; j++) {
        if (am && am[j].type == TR_ALLOC && am[j].cls != TC_ACT_SKEL) continue;
        const trace_rec *r = &recs[am ? am[j].at : j];
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            phase = (trace_phase)r->u.mark.value;
            if (phase == TP_FWD) {
                if (seen_fwd) pass++;
                seen_fwd = 1;
            }
            continue;
        }
        if (r->type != TR_ALLOC) continue;
        const trace_tensor *x = &r->u.alloc;
        if (x->cls != TC_ACT_SKEL || x->layer < 0) continue;
        if (phase != TP_FWD && phase != TP_NONE) continue;
        if (ms_grow((void **)out, cap, *n + 1, sizeof **out) != MS_OK) return MS_ERR_NOMEM;
        pol_skel *s = &(*out)[(*n)++];
        memset(s, 0, sizeof *s);
        s->id = x->id;
        s->layer = x->layer;
        s->pass = pass;
        s->t = x;
        size_t len = strlen(x->name);
        s->is_input = ends_with(x->name, len, ".input");
        /* the attention kernel's outputs: its output and, when saved apart, its log-sum-exp
         * (MEMO offloads "the FlashAttention output" whole; the backward needs both) */
        s->is_attn_out = ends_with(x->name, len, ".attn_out") ||
                         ends_with(x->name, len, ".attn_lse");
        s->is_whole = x->producer < 0;
        if (s->is_input && u64map_put(named, group_key(pass, x->layer), 1)) return MS_ERR_NOMEM;
    }
    return MS_OK;
}

int32_t pol_declared_layers(const trace_t *t)
{
    uint64_t v = trace_meta_u64(t, "layers", 0);
    return v <= INT32_MAX ? (int32_t)v : 0;
}

ms_status pol_check_layer(const trace_t *t, int32_t layer, int32_t limit, const char *what,
                          ms_error *err)
{
    int32_t declared = pol_declared_layers(t);
    if (declared > 0 && layer >= declared)
        return ms_fail(err, MS_ERR_INVALID, "%s: layer %d is beyond the %d layers the trace "
                       "declares (meta layers %d: layers 0..%d)", what, (int)layer, (int)declared,
                       (int)declared, (int)declared - 1);
    if (declared == 0 && layer >= limit)
        return ms_fail(err, MS_ERR_INVALID, "%s: layer %d is out of range (the trace declares "
                       "no layer count (meta layers); layers 0..%d are accepted here)", what,
                       (int)layer, (int)limit - 1);
    return MS_OK;
}

/* pol_skeletal's list of a trace of a base's structure, kept with the base
 * (tshape_keep_derived): every field but the tensor's address is structure. */
typedef struct skel_memo {
    pol_skel *v;
    size_t n;
} skel_memo;

static const char skel_key; /* the derived slot's key */

static void skel_memo_free(void *p)
{
    skel_memo *m = p;
    if (m) free(m->v);
    free(m);
}

static ms_status skeletal_fresh(const trace_t *t, pol_skel **out, size_t *n, ms_error *err);

/* The base's list, made and kept at the first trace of its structure that asks. NULL when
 * out of memory (the caller then lists afresh). */
static const skel_memo *skel_of_base(const trace_t *base)
{
    const skel_memo *m = tshape_derived(base, &skel_key);
    if (m) return m;
    skel_memo *k = calloc(1, sizeof *k);
    ms_error e;
    ms_error_clear(&e);
    if (!k || skeletal_fresh(base, &k->v, &k->n, &e) != MS_OK ||
        tshape_keep_derived(base, &skel_key, k, skel_memo_free) != MS_OK) {
        skel_memo_free(k);
        return NULL;
    }
    return k;
}

/* A sweep's later points (traces made after a template, tshape_of): the template's list,
 * its tensors' addresses moved to the same records of t, instead of reading t's records
 * at every plan (three policies a point). */
ms_status pol_skeletal(const trace_t *t, pol_skel **out, size_t *n, ms_error *err)
{
    const trace_t *base = tshape_of(t);
    const skel_memo *m = base != t ? skel_of_base(base) : NULL;
    if (!m) return skeletal_fresh(t, out, n, err);
    *out = NULL;
    *n = 0;
    if (!m->n) return MS_OK;
    pol_skel *v = malloc(m->n * sizeof *v);
    if (!v) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    size_t nb, nt;
    const char *rb = (const char *)trace_records(base, &nb);
    const char *rt = (const char *)trace_records(t, &nt);
    for (size_t i = 0; i < m->n; i++) {
        v[i] = m->v[i];
        v[i].t = (const trace_tensor *)(rt + ((const char *)m->v[i].t - rb));
    }
    *out = v;
    *n = m->n;
    return MS_OK;
}

static ms_status skeletal_fresh(const trace_t *t, pol_skel **out, size_t *n, ms_error *err)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    /* an entry per layer and forward pass (gpt-7b: 32); clearing room for 256 cost more */
    u64map *named = u64map_new(64);
    if (!named) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_status st = collect(t, out, n, &cap, named);
    for (size_t i = 0; st == MS_OK && i < *n; i++) {
        pol_skel *s = &(*out)[i];
        if (!u64map_get(named, group_key(s->pass, s->layer), NULL))
            s->is_input = produced_outside(t, s->t);
    }
    u64map_free(named);
    if (st != MS_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
        return ms_fail(err, st, "out of memory");
    }
    return MS_OK;
}

ms_status pol_no_skeletal(const char *policy, ms_error *err)
{
    return ms_fail(err, MS_ERR_INVALID, "policy %s: the trace has no skeletal activations of "
                   "layers (act_skel tensors with a layer, made in a forward phase): nothing "
                   "to recompute or swap; an allocator-only trace (memsim trace import) runs "
                   "under keep-all or memsim replay", policy);
}

ms_status pol_need_skeletal(const char *policy, const trace_t *t, ms_error *err)
{
    pol_skel *sk;
    size_t n;
    ms_status st = pol_skeletal(t, &sk, &n, err);
    if (st != MS_OK) return st;
    free(sk);
    return n ? MS_OK : pol_no_skeletal(policy, err);
}

/* A tensor class autograd never saves: it makes gradients, the optimizer owns its states,
 * and a workspace is a library's scratch. */
static int never_saved(trace_class c)
{
    return c == TC_GRAD || c == TC_OPTSTATE || c == TC_WORKSPACE;
}

/* Input `id` of a backward op: saved when it was allocated before the backward phase began
 * (its latest allocation's record is below bwd_begin). */
static ms_status note_input(const trace_t *t, u64map *arec, u64map *seen, u64map *phase_seen,
                            uint64_t id, size_t bwd_begin, int params, uint64_t **ids,
                            size_t *n, size_t *cap, uint64_t *phase_bytes)
{
    uint64_t at;
    const trace_tensor *x = trace_find_tensor(t, id);
    if (!x || !u64map_get(arec, id, &at) || at >= bwd_begin || never_saved(x->cls) ||
        (x->cls == TC_PARAM && !params))
        return MS_OK;
    if (!u64map_get(phase_seen, id, NULL)) {
        if (u64map_put(phase_seen, id, 1)) return MS_ERR_NOMEM;
        *phase_bytes += x->bytes;
    }
    if (u64map_get(seen, id, NULL)) return MS_OK;
    if (u64map_put(seen, id, 1) || ms_grow((void **)ids, cap, *n + 1, sizeof **ids) != MS_OK)
        return MS_ERR_NOMEM;
    (*ids)[(*n)++] = id;
    return MS_OK;
}

ms_status pol_saved_tensors(const trace_t *t, int params, uint64_t **ids, size_t *n,
                            uint64_t *bytes, ms_error *err)
{
    *ids = NULL;
    *n = 0;
    *bytes = 0;
    size_t cap = 0, bwd_begin = SIZE_MAX;
    uint64_t phase_bytes = 0;
    u64map *arec = u64map_new(4096), *seen = u64map_new(1024), *ps = u64map_new(1024);
    ms_status st = arec && seen && ps ? MS_OK : MS_ERR_NOMEM;
    for (size_t i = 0; st == MS_OK && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            if (bwd_begin != SIZE_MAX && phase_bytes > *bytes) *bytes = phase_bytes;
            bwd_begin = (trace_phase)r->u.mark.value == TP_BWD ? i : SIZE_MAX;
            phase_bytes = 0;
            u64map_clear(ps);
        } else if (r->type == TR_ALLOC && u64map_put(arec, r->u.alloc.id, i)) {
            st = MS_ERR_NOMEM;
        } else if (r->type == TR_OP && r->u.op.phase == TP_BWD && bwd_begin != SIZE_MAX) {
            for (uint32_t k = 0; st == MS_OK && k < r->u.op.n_in; k++)
                st = note_input(t, arec, seen, ps, r->u.op.in[k], bwd_begin, params, ids, n,
                                &cap, &phase_bytes);
        }
    }
    if (phase_bytes > *bytes) *bytes = phase_bytes;
    u64map_free(arec);
    u64map_free(seen);
    u64map_free(ps);
    if (st != MS_OK) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        return ms_fail(err, st, "out of memory");
    }
    return MS_OK;
}

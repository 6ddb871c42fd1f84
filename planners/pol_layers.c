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
    size_t nrecs;
    const trace_rec *recs = trace_records(t, &nrecs);
    for (size_t i = 0; i < nrecs; i++) {
        const trace_rec *r = &recs[i];
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

ms_status pol_skeletal(const trace_t *t, pol_skel **out, size_t *n, ms_error *err)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    u64map *named = u64map_new(256);
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

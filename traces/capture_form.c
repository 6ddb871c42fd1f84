/* capture_form.c — the process form of a captured trace (see capture_form.h): one scan for
 * where the capture begins, its optimizer states, its library workspaces and its largest ids,
 * then the new trace written as the prelude, the rebuilt first step and the copies of the
 * captured step. Used by sim/pipeline.c and the tests. */
#define _POSIX_C_SOURCE 200809L
#include "traces/capture_form.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

#define CF_ID_LIMIT (UINT64_C(1) << 48) /* the lowering's synthetic ids start above this */

typedef struct cf {
    const trace_t *t;
    trace_t *o;
    ms_error *err;
    size_t n, begin;        /* records; index of the first `mark iter` */
    uint64_t tid_span;      /* tensor ids are below this */
    uint64_t oid_span;      /* op ids are below this */
    int64_t iter_span;      /* iteration marks are below this */
    u64map *inner;          /* tensors the captured records allocate */
    u64map *freed;          /* prelude tensors an earlier copy freed */
    size_t *states;         /* prelude records of optimizer states, in order */
    size_t n_states, cap_states;
    size_t *libs;           /* prelude records of library workspaces (find_libs), in order */
    size_t n_libs, cap_libs;
    u64map *touched;        /* tensors an op reads or writes, or a record frees */
} cf;

/* A library workspace is a block of the large pool (above PyTorch's kSmallSize, 1 MiB) that
 * was live when the capture began, that no op reads or writes and that nothing frees: the
 * cuBLAS workspaces, which PyTorch makes through the caching allocator when a handle first
 * runs a GEMM (aten/src/ATen/cuda/CublasHandlePool.cpp: one per handle and stream), so the
 * main thread's at the first forward GEMM and the autograd engine's device thread's at the
 * first backward GEMM (the hf generator places its own two the same way: gen_hf.c). */
#define CF_SMALL_BYTES (UINT64_C(1) << 20)

static ms_status nomem(cf *c) { return ms_fail(c->err, MS_ERR_NOMEM, "out of memory"); }

int cform_is_capture(const trace_t *t)
{
    const char *g = trace_get_meta(t, "generator");
    if (!g || strncmp(g, "memsim-capture", 14) != 0) return 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) return 1;
    }
    return 0;
}

static ms_status scan(cf *c)
{
    c->begin = c->n;
    for (size_t i = 0; i < c->n; i++) {
        const trace_rec *r = trace_get(c->t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            if (c->begin == c->n) c->begin = i;
            if (r->u.mark.value >= c->iter_span) c->iter_span = r->u.mark.value + 1;
        }
        if (r->type == TR_ALLOC) {
            if (r->u.alloc.id >= c->tid_span) c->tid_span = r->u.alloc.id + 1;
            if (c->begin < c->n && u64map_put(c->inner, r->u.alloc.id, 1)) return nomem(c);
            if (c->begin == c->n && r->u.alloc.cls == TC_OPTSTATE &&
                ms_grow((void **)&c->states, &c->cap_states, c->n_states + 1,
                        sizeof *c->states) == MS_OK)
                c->states[c->n_states++] = i;
            else if (c->begin == c->n && r->u.alloc.cls == TC_OPTSTATE)
                return nomem(c);
        }
        if (r->type == TR_OP && r->u.op.id >= c->oid_span) c->oid_span = r->u.op.id + 1;
        if (r->type == TR_OP) {
            for (uint32_t j = 0; j < r->u.op.n_in; j++)
                if (u64map_put(c->touched, r->u.op.in[j], 1)) return nomem(c);
            for (uint32_t j = 0; j < r->u.op.n_out; j++)
                if (u64map_put(c->touched, r->u.op.out[j], 1)) return nomem(c);
        }
        if (r->type == TR_FREE && u64map_put(c->touched, r->u.free_id, 1)) return nomem(c);
    }
    if (c->begin == c->n)
        return ms_fail(c->err, MS_ERR_INVALID, "the captured trace has no `mark iter`: no step "
                       "to simulate");
    if (c->iter_span < 1) c->iter_span = 1;
    return MS_OK;
}

static int is_lib(const cf *c, const trace_rec *r)
{
    return r->type == TR_ALLOC && r->u.alloc.cls == TC_OTHER &&
           r->u.alloc.bytes > CF_SMALL_BYTES && !u64map_get(c->touched, r->u.alloc.id, NULL);
}

static ms_status find_libs(cf *c)
{
    for (size_t i = 0; i < c->begin; i++) {
        if (!is_lib(c, trace_get(c->t, i))) continue;
        if (ms_grow((void **)&c->libs, &c->cap_libs, c->n_libs + 1, sizeof *c->libs) != MS_OK)
            return nomem(c);
        c->libs[c->n_libs++] = i;
    }
    return MS_OK;
}

static ms_status copy_meta(cf *c, int iterations)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, (int64_t)iterations * c->iter_span);
    for (size_t i = 0; i < trace_meta_count(c->t); i++) {
        const char *k = trace_meta_key(c->t, i);
        const char *v = strcmp(k, "iterations") ? trace_meta_value(c->t, i) : buf;
        if (trace_set_meta(c->o, k, v) != MS_OK) return nomem(c);
    }
    if (!trace_get_meta(c->t, "iterations") && trace_set_meta(c->o, "iterations", buf) != MS_OK)
        return nomem(c);
    return MS_OK;
}

static ms_status put(cf *c, const trace_rec *r)
{
    return trace_append(c->o, r) == MS_OK ? MS_OK : nomem(c);
}

/* The prelude less the optimizer states and the library workspaces (the first step makes
 * them). */
static ms_status write_prelude(cf *c)
{
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < c->begin; i++) {
        const trace_rec *r = trace_get(c->t, i);
        if (r->type == TR_ALLOC && r->u.alloc.cls == TC_OPTSTATE) continue;
        if (is_lib(c, r)) continue;
        st = put(c, r);
    }
    return st;
}

/* A tensor id of copy k: what the captured records allocate is renamed, the rest kept. */
static uint64_t tid_of(const cf *c, uint64_t id, unsigned k)
{
    return k && u64map_get(c->inner, id, NULL) ? id + (uint64_t)k * c->tid_span : id;
}

static ms_status map_ids(cf *c, const uint64_t *in, uint32_t n, unsigned k, uint64_t **out)
{
    *out = NULL;
    if (!n) return MS_OK;
    *out = malloc(n * sizeof **out);
    if (!*out) return nomem(c);
    for (uint32_t j = 0; j < n; j++) (*out)[j] = tid_of(c, in[j], k);
    return MS_OK;
}

/* One captured record in copy k. */
static ms_status write_rec(cf *c, const trace_rec *src, unsigned k)
{
    trace_rec r = *src;
    uint64_t *in = NULL, *out = NULL;
    ms_status st = MS_OK;
    switch (r.type) {
    case TR_ALLOC:
        r.u.alloc.id = tid_of(c, r.u.alloc.id, k);
        if (k && r.u.alloc.producer >= 0)
            r.u.alloc.producer += (int64_t)((uint64_t)k * c->oid_span);
        break;
    case TR_FREE:
        if (!u64map_get(c->inner, r.u.free_id, NULL)) {
            if (u64map_get(c->freed, r.u.free_id, NULL)) return MS_OK; /* an earlier copy's */
            if (u64map_put(c->freed, r.u.free_id, 1)) return nomem(c);
        }
        r.u.free_id = tid_of(c, r.u.free_id, k);
        break;
    case TR_OP:
        r.u.op.id += (uint64_t)k * c->oid_span;
        st = map_ids(c, src->u.op.in, src->u.op.n_in, k, &in);
        if (st == MS_OK) st = map_ids(c, src->u.op.out, src->u.op.n_out, k, &out);
        r.u.op.in = in;
        r.u.op.out = out;
        break;
    case TR_MARK:
        if (r.u.mark.kind == TM_ITER) r.u.mark.value += (int64_t)k * c->iter_span;
        break;
    }
    if (st == MS_OK) st = put(c, &r);
    free(in);
    free(out);
    return st;
}

static int is_mark(const trace_rec *r, trace_markkind k)
{
    return r && r->type == TR_MARK && r->u.mark.kind == k;
}

static ms_status write_states(cf *c)
{
    ms_status st = MS_OK;
    for (size_t s = 0; st == MS_OK && s < c->n_states; s++)
        st = put(c, trace_get(c->t, c->states[s]));
    return st;
}

/* Library workspace j of copy 0, before the GEMM op r where it is due (lib_due); placed[j]
 * notes it. */
static ms_status write_lib(cf *c, size_t j, unsigned char *placed)
{
    if (placed[j]) return MS_OK;
    placed[j] = 1;
    return put(c, trace_get(c->t, c->libs[j]));
}

/* Before op r of copy 0: the second workspace at the first backward GEMM (the autograd
 * engine's thread), every other at the first forward GEMM (the main thread's). */
static ms_status libs_before(cf *c, const trace_rec *r, unsigned char *placed)
{
    ms_status st = MS_OK;
    if (r->type != TR_OP || r->u.op.kind != TK_GEMM) return MS_OK;
    for (size_t j = 0; st == MS_OK && j < c->n_libs; j++)
        if ((j == 1) == (r->u.op.phase == TP_BWD)) st = write_lib(c, j, placed);
    return st;
}

/* Copy k of the captured records; copy 0 makes the optimizer states where its first
 * optimizer phase begins (after the phase mark, and after a layer mark right after it) and
 * the library workspaces at their first use (libs_before). */
static ms_status write_step(cf *c, unsigned k)
{
    int due = k == 0 && c->n_states > 0; /* 1: at the opt phase mark; 2: at this layer mark */
    unsigned char *placed = k == 0 && c->n_libs ? calloc(c->n_libs, 1) : NULL;
    if (k == 0 && c->n_libs && !placed) return nomem(c);
    ms_status st = MS_OK;
    for (size_t i = c->begin; st == MS_OK && i < c->n; i++) {
        const trace_rec *r = trace_get(c->t, i);
        if (placed) st = libs_before(c, r, placed);
        if (st == MS_OK) st = write_rec(c, r, k);
        if (st != MS_OK || !due) continue;
        if (due == 1 && !(is_mark(r, TM_PHASE) && r->u.mark.value == TP_OPT)) continue;
        if (due == 1 && i + 1 < c->n && is_mark(trace_get(c->t, i + 1), TM_LAYER)) {
            due = 2;
            continue;
        }
        st = write_states(c);
        due = 0;
    }
    /* a capture without an optimizer phase: the states come at the step's end; a workspace
     * no GEMM used, too */
    for (size_t j = 0; placed && st == MS_OK && j < c->n_libs; j++) st = write_lib(c, j, placed);
    free(placed);
    return st == MS_OK && due ? write_states(c) : st;
}

ms_status cform_process(const trace_t *t, int iterations, trace_t **out, ms_error *err)
{
    *out = NULL;
    if (!cform_is_capture(t))
        return ms_fail(err, MS_ERR_INVALID, "not a captured trace with an iteration (meta "
                       "generator memsim-capture-*, a `mark iter`)");
    if (iterations < 1)
        return ms_fail(err, MS_ERR_INVALID, "the process form needs at least one step (got %d)",
                       iterations);
    cf c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.err = err;
    c.n = trace_count(t);
    c.inner = u64map_new(4096);
    c.freed = u64map_new(64);
    c.touched = u64map_new(4096);
    c.o = trace_new();
    ms_status st = !c.inner || !c.freed || !c.touched || !c.o ? nomem(&c) : scan(&c);
    if (st == MS_OK) st = find_libs(&c);
    if (st == MS_OK && (c.tid_span >= CF_ID_LIMIT / (uint64_t)iterations ||
                        c.oid_span >= CF_ID_LIMIT / (uint64_t)iterations))
        st = ms_fail(err, MS_ERR_INVALID, "the captured trace's ids (up to %" PRIu64 ") are too "
                     "large for %d steps of fresh ids", c.tid_span > c.oid_span ? c.tid_span
                     : c.oid_span, iterations);
    if (st == MS_OK) st = copy_meta(&c, iterations);
    if (st == MS_OK) st = write_prelude(&c);
    for (int k = 0; st == MS_OK && k < iterations; k++) st = write_step(&c, (unsigned)k);
    u64map_free(c.inner);
    u64map_free(c.freed);
    u64map_free(c.touched);
    free(c.states);
    free(c.libs);
    if (st != MS_OK) trace_free(c.o);
    else *out = c.o;
    return st;
}

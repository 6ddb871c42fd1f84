/* offload_form.c — the ZeRO-Offload form of a plain trace (see offload_form.h): one pass to
 * find the units (embedding side, layers, head side), their parameters, the parameters'
 * casts and the gradients, one pass to write the new trace. Used by sim/pipeline.c and the
 * tests. */
#define _POSIX_C_SOURCE 200809L
#include "planners/memferry/offload_form.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

#define OF_ADAM_FLOPS 12.0   /* per parameter (traces/gen.c's host Adam) */
#define OF_HOST_GRAD_BYTES 4 /* the host gradient partition is fp32 (DeepSpeed) */

/* A unit: 0 = before the first layer (embedding), 1..L = layer j - 1, L + 1 = after. */
typedef struct of_unit {
    uint64_t params;     /* parameter elements */
    uint64_t grad_id;    /* the gradient buffer made for it (0: none) */
    uint64_t *pids;      /* its parameters, in setup order */
    size_t np, cap;
} of_unit;

typedef struct of {
    const trace_t *t;
    const machine_t *m;
    trace_t *o;
    ms_error *err;
    size_t n, setup_end;
    int32_t L;
    size_t nu;
    of_unit *u;
    u64map *param;  /* parameter id -> unit */
    u64map *cast;   /* cast output id -> parameter id */
    u64map *igrad;  /* gradient allocated inside an iteration -> unit */
    u64map *sgrad;  /* setup gradient buffer -> 1 */
    u64map *drop;   /* ids whose alloc and free records are left out */
    uint64_t next_tid, next_oid;
    int from, to;   /* parameter bytes per element in t, on the GPU in the new form */
    uint64_t tensors, tensors_layer0;
    struct of_outer { uint64_t bytes; size_t unit; } *outer; /* parameters outside layers */
    size_t n_outer, cap_outer;
} of;

static ms_status nomem(of *f) { return ms_fail(f->err, MS_ERR_NOMEM, "out of memory"); }

static int is_param(const of *f, uint64_t id) { return u64map_get(f->param, id, NULL); }

static void unit_name(const of *f, size_t u, const char *what, char *buf)
{
    if (u == 0) snprintf(buf, TRACE_NAME_MAX, "embed.%s", what);
    else if (u == f->nu - 1) snprintf(buf, TRACE_NAME_MAX, "head.%s", what);
    else trace_layer_name(buf, (int)u - 1, what);
}

/* Follows the layer marks of the phases: the unit the records after a mark belong to. */
typedef struct seg {
    trace_phase ph;
    int seen;    /* a layer mark >= 0 seen in this phase */
    size_t cur;  /* unit */
} seg;

static void seg_mark(const of *f, seg *s, const trace_mark *mk)
{
    if (mk->kind == TM_ITER) {
        s->ph = TP_NONE;
        s->cur = 0;
    } else if (mk->kind == TM_PHASE) {
        s->ph = (trace_phase)mk->value;
        s->seen = 0;
        s->cur = s->ph == TP_BWD ? f->nu - 1 : 0;
    } else if (mk->value >= 0 && mk->value < f->L) {
        s->cur = (size_t)mk->value + 1;
        s->seen = 1;
    } else if (mk->value < 0) { /* outside the layers: the forward's end, the backward's */
        s->cur = (s->ph == TP_BWD) == !s->seen ? f->nu - 1 : 0;
    }
}

static size_t unit_of_layer(const of *f, int32_t layer, size_t cur)
{
    return layer >= 0 && layer < f->L ? (size_t)layer + 1 : cur;
}

/* The unit of a gradient made outside the layers: that of the parameter of its size (a
 * PyTorch gradient has its parameter's shape and dtype; a tied LM head's goes to the
 * embedding), among several the one of the backward segment it is made in. */
static size_t grad_unit(const of *f, const trace_tensor *g, const seg *s)
{
    size_t at = s->ph == TP_BWD ? s->cur : f->nu - 1, found = f->nu;
    for (size_t i = 0; i < f->n_outer; i++) {
        if (f->outer[i].bytes != g->bytes) continue;
        if (f->outer[i].unit == at) return at;
        if (found == f->nu) found = f->outer[i].unit;
    }
    return found < f->nu ? found : at;
}

static ms_status check_plain(const trace_t *t, ms_error *err)
{
    static const char *modes[] = { "zero3", "offload", "lora_rank" };
    for (size_t i = 0; i < 3; i++)
        if (trace_get_meta(t, modes[i]))
            return ms_fail(err, MS_ERR_UNSUPPORTED, "the ZeRO-Offload form is made from a plain "
                           "trace (meta %s found)", modes[i]);
    static const char *par[] = { "tp", "cp", "dp" };
    for (size_t i = 0; i < 3; i++)
        if (trace_meta_u64(t, par[i], 1) > 1)
            return ms_fail(err, MS_ERR_UNSUPPORTED, "the ZeRO-Offload form is made from one "
                           "GPU's plain trace (meta %s %" PRIu64 "): generate it with --gen "
                           "offload=1 instead", par[i], trace_meta_u64(t, par[i], 1));
    return MS_OK;
}

/* Pass 1: units, parameters, casts, gradients. */
static ms_status scan(of *f)
{
    const trace_t *t = f->t;
    uint64_t maxl = trace_meta_u64(t, "layers", 0);
    int32_t marks = -1;
    f->setup_end = f->n;
    for (size_t i = 0; i < f->n; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER && f->setup_end == f->n)
            f->setup_end = i;
        if (r->type == TR_MARK && r->u.mark.kind == TM_LAYER && r->u.mark.value > marks &&
            r->u.mark.value < 100000)
            marks = (int32_t)r->u.mark.value;
        if (r->type == TR_ALLOC && r->u.alloc.id >= f->next_tid) f->next_tid = r->u.alloc.id + 1;
        if (r->type == TR_OP && r->u.op.id >= f->next_oid) f->next_oid = r->u.op.id + 1;
    }
    if (f->setup_end == f->n)
        return ms_fail(f->err, MS_ERR_INVALID, "the trace has no `mark iter`: no iteration to "
                       "make the ZeRO-Offload form of");
    f->L = maxl > 0 && maxl < 100000 ? (int32_t)maxl : marks + 1;
    f->nu = (size_t)f->L + 2;
    f->u = calloc(f->nu, sizeof *f->u);
    if (!f->u) return nomem(f);
    /* parameters: a layer's own, else the unit of their first forward use */
    seg s = { TP_NONE, 0, 0 };
    size_t first_end = f->n;
    for (size_t i = f->setup_end + 1; i < f->n; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            first_end = i;
            break;
        }
    }
    u64map *first = u64map_new(256);
    if (!first) return nomem(f);
    for (size_t i = f->setup_end; i < first_end; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK) seg_mark(f, &s, &r->u.mark);
        if (r->type != TR_OP || s.ph != TP_FWD) continue;
        for (uint32_t q = 0; q < r->u.op.n_in; q++)
            if (!u64map_get(first, r->u.op.in[q], NULL) &&
                u64map_put(first, r->u.op.in[q], s.cur)) {
                u64map_free(first);
                return nomem(f);
            }
    }
    ms_status st = MS_OK;
    for (size_t i = 0; i < f->setup_end && st == MS_OK; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC) continue;
        const trace_tensor *x = &r->u.alloc;
        if (x->cls == TC_GRAD) {
            if (u64map_put(f->sgrad, x->id, 1)) st = nomem(f);
            continue;
        }
        if (x->cls != TC_PARAM) continue;
        uint64_t u = f->nu - 1;
        int named;
        if (!u64map_get(first, x->id, &u))
            u = sscanf(x->name, "L%d.", &named) == 1 && named >= 0 && named < f->L
                    ? (uint64_t)named + 1 : f->nu - 1; /* the generators' L<layer>.<what> */
        u = unit_of_layer(f, x->layer, (size_t)u);
        of_unit *U = &f->u[u];
        if (ms_grow((void **)&U->pids, &U->cap, U->np + 1, sizeof *U->pids) ||
            u64map_put(f->param, x->id, u)) {
            st = nomem(f);
            break;
        }
        U->pids[U->np++] = x->id;
        if (x->layer < 0 || x->layer >= f->L) {
            if (ms_grow((void **)&f->outer, &f->cap_outer, f->n_outer + 1, sizeof *f->outer)) {
                st = nomem(f);
                break;
            }
            f->outer[f->n_outer++] = (struct of_outer){ x->bytes, u };
        }
        U->params += (x->bytes + (uint64_t)f->from - 1) / (uint64_t)f->from;
        f->tensors++;
        if (x->layer == 0) f->tensors_layer0++;
    }
    u64map_free(first);
    if (st != MS_OK) return st;
    if (!f->tensors)
        return ms_fail(f->err, MS_ERR_INVALID, "the trace allocates no parameters before its "
                       "first `mark iter`: nothing for ZeRO-Offload to keep on the host");
    /* casts (a forward op reading only parameters) and gradients made inside iterations */
    s = (seg){ TP_NONE, 0, 0 };
    int in_grads = 0;
    for (size_t i = f->setup_end; i < f->n && st == MS_OK; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK) seg_mark(f, &s, &r->u.mark);
        if (r->type == TR_ALLOC && r->u.alloc.cls == TC_PARAM)
            return ms_fail(f->err, MS_ERR_UNSUPPORTED, "trace record %zu: parameter '%s' is "
                           "allocated inside an iteration: the ZeRO-Offload form needs every "
                           "parameter allocated before the first `mark iter`", i,
                           r->u.alloc.name);
        if (r->type == TR_ALLOC && r->u.alloc.cls == TC_GRAD) {
            size_t u = unit_of_layer(f, r->u.alloc.layer, grad_unit(f, &r->u.alloc, &s));
            if (u64map_put(f->igrad, r->u.alloc.id, u) || u64map_put(f->drop, r->u.alloc.id, 1))
                st = nomem(f);
            in_grads = 1;
            if (!f->u[u].grad_id) f->u[u].grad_id = f->next_tid++;
        }
        if (r->type != TR_OP || s.ph != TP_FWD || r->u.op.n_in == 0 || r->u.op.n_out == 0)
            continue;
        int cast = 1;
        for (uint32_t q = 0; q < r->u.op.n_in && cast; q++) cast = is_param(f, r->u.op.in[q]);
        for (uint32_t q = 0; q < r->u.op.n_out && cast; q++)
            cast = !is_param(f, r->u.op.out[q]) && !u64map_get(f->sgrad, r->u.op.out[q], NULL);
        for (uint32_t q = 0; cast && q < r->u.op.n_out && st == MS_OK; q++)
            if (u64map_put(f->cast, r->u.op.out[q], r->u.op.in[0]) ||
                u64map_put(f->drop, r->u.op.out[q], 1))
                st = nomem(f);
    }
    if (st == MS_OK && in_grads && u64map_count(f->sgrad))
        return ms_fail(f->err, MS_ERR_UNSUPPORTED, "the trace allocates gradients both at setup "
                       "and inside iterations: its gradient buffers are ambiguous");
    if (st == MS_OK && !in_grads && !u64map_count(f->sgrad))
        return ms_fail(f->err, MS_ERR_INVALID, "the trace has no gradients (class grad): "
                       "nothing for ZeRO-Offload to copy to the host (a frozen model?)");
    return st;
}

/* ---- pass 2: writing ---- */

static ms_status put_op(of *f, trace_opkind kind, trace_phase ph, int32_t layer,
                        const char *name, double flops, uint64_t br, uint64_t bw, double us,
                        const uint64_t *in, uint32_t nin, const uint64_t *out, uint32_t nout)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    trace_op *op = &r.u.op;
    op->id = f->next_oid++;
    op->kind = kind;
    op->phase = ph;
    op->layer = layer;
    op->flops = flops;
    op->bytes_read = br;
    op->bytes_written = bw;
    op->dur_us = us;
    op->in = in;
    op->n_in = nin;
    op->out = out;
    op->n_out = nout;
    snprintf(op->name, sizeof op->name, "%s", name);
    return trace_append(f->o, &r);
}

static double link_us(const of *f, uint64_t bytes, int d2h)
{
    if (!f->m) return -1.0;
    double bps = d2h ? f->m->link_d2h_Bps : f->m->link_h2d_Bps;
    return bps > 0 ? (double)bytes / bps * 1e6 : 0.0;
}

static int32_t unit_layer(const of *f, size_t u)
{
    return u == 0 || u == f->nu - 1 ? -1 : (int32_t)u - 1;
}

/* After the backward: every gradient buffer to the host. */
static ms_status emit_d2h(of *f)
{
    char nm[TRACE_NAME_MAX];
    ms_status st = MS_OK;
    for (size_t u = 0; u < f->nu && st == MS_OK; u++) {
        if (!f->u[u].grad_id) continue;
        uint64_t bytes = f->u[u].params * (uint64_t)f->to;
        unit_name(f, u, "grad.d2h", nm);
        st = put_op(f, TK_COMM, TP_BWD, unit_layer(f, u), nm, 0, bytes, 0, link_us(f, bytes, 1),
                    &f->u[u].grad_id, 1, NULL, 0);
    }
    for (size_t i = 0; i < f->setup_end && st == MS_OK; i++) { /* setup buffers, in order */
        const trace_rec *r = trace_get(f->t, i);
        if (r->type != TR_ALLOC || r->u.alloc.cls != TC_GRAD) continue;
        const trace_tensor *x = &r->u.alloc;
        char what[TRACE_NAME_MAX];
        snprintf(nm, sizeof nm, "%s", x->name);
        char *dot = strrchr(nm, '.');
        snprintf(what, sizeof what, "%.*s.grad.d2h", dot ? (int)(dot - nm) : (int)strlen(nm), nm);
        st = put_op(f, TK_COMM, TP_BWD, x->layer, what, 0, x->bytes, 0, link_us(f, x->bytes, 1),
                    &x->id, 1, NULL, 0);
    }
    return st;
}

/* The optimizer phase: host Adam per unit, then its parameters back to the GPU. */
static ms_status emit_host_opt(of *f)
{
    char nm[TRACE_NAME_MAX];
    ms_status st = MS_OK;
    double rate = f->m ? f->m->host_adam_params_per_s : 0;
    for (size_t u = 0; u < f->nu && st == MS_OK; u++) {
        of_unit *U = &f->u[u];
        if (!U->params) continue;
        unit_name(f, u, "optim.host", nm);
        double us = !f->m ? -1.0 : rate > 0 ? (double)U->params / rate * 1e6 : 0.0;
        st = put_op(f, TK_OPTIM, TP_OPT, unit_layer(f, u), nm, OF_ADAM_FLOPS * (double)U->params,
                    0, 0, us, NULL, 0, NULL, 0);
        if (st) break;
        uint64_t bytes = U->params * (uint64_t)f->to;
        unit_name(f, u, "param.h2d", nm);
        st = put_op(f, TK_COMM, TP_OPT, unit_layer(f, u), nm, 0, 0, bytes, link_us(f, bytes, 0),
                    NULL, 0, U->pids, (uint32_t)U->np);
    }
    return st;
}

/* An op's ids with casts read as their parameters and the backward's gradients as their
 * unit's buffer; duplicates dropped. */
static ms_status remap(of *f, const uint64_t *ids, uint32_t n, uint64_t **out, uint32_t *nout)
{
    *out = n ? malloc(n * sizeof **out) : NULL;
    *nout = 0;
    if (n && !*out) return nomem(f);
    for (uint32_t q = 0; q < n; q++) {
        uint64_t id = ids[q], v;
        if (u64map_get(f->cast, id, &v)) id = v;
        else if (u64map_get(f->igrad, id, &v)) id = f->u[v].grad_id;
        int dup = 0;
        for (uint32_t k = 0; k < *nout && !dup; k++) dup = (*out)[k] == id;
        if (!dup) (*out)[(*nout)++] = id;
    }
    return MS_OK;
}

static ms_status copy_op(of *f, const trace_rec *r)
{
    const trace_op *op = &r->u.op;
    int cast = op->n_out > 0;
    for (uint32_t q = 0; q < op->n_out && cast; q++) cast = u64map_get(f->cast, op->out[q], NULL);
    if (cast) return MS_OK; /* the parameters are in the compute dtype already */
    trace_rec c = *r;
    uint64_t *in = NULL, *out = NULL;
    ms_status st = remap(f, op->in, op->n_in, &in, &c.u.op.n_in);
    if (!st) st = remap(f, op->out, op->n_out, &out, &c.u.op.n_out);
    c.u.op.in = in;
    c.u.op.out = out;
    if (!st) st = trace_append(f->o, &c);
    free(in);
    free(out);
    return st;
}

static ms_status put_alloc(of *f, uint64_t id, uint64_t bytes, trace_class cls, int32_t layer,
                           const char *name)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    r.u.alloc.id = id;
    r.u.alloc.bytes = bytes;
    r.u.alloc.cls = cls;
    r.u.alloc.layer = layer;
    r.u.alloc.producer = -1;
    snprintf(r.u.alloc.name, sizeof r.u.alloc.name, "%s", name);
    return trace_append(f->o, &r);
}

/* Closes an iteration's backward: the copies to the host, then the host optimizer. */
static ms_status end_backward(of *f, int mark_opt)
{
    ms_status st = emit_d2h(f);
    if (!st && mark_opt) st = trace_append_mark(f->o, TM_PHASE, TP_OPT);
    if (!st) st = emit_host_opt(f);
    return st;
}

static ms_status write_records(of *f)
{
    ms_status st = MS_OK;
    trace_phase ph = TP_NONE;
    int done = 1; /* this iteration's host optimizer written */
    for (size_t i = 0; i < f->n && st == MS_OK; i++) {
        const trace_rec *r = trace_get(f->t, i);
        if (i == f->setup_end) { /* the backward's gradients get setup buffers */
            char nm[TRACE_NAME_MAX];
            for (size_t u = 0; u < f->nu && st == MS_OK; u++) {
                if (!f->u[u].grad_id) continue;
                unit_name(f, u, "grad", nm);
                st = put_alloc(f, f->u[u].grad_id, f->u[u].params * (uint64_t)f->to, TC_GRAD,
                               unit_layer(f, u), nm);
            }
            if (st) break;
        }
        switch (r->type) {
        case TR_MARK:
            if (r->u.mark.kind == TM_ITER || r->u.mark.kind == TM_PHASE) {
                trace_phase next = r->u.mark.kind == TM_PHASE ? (trace_phase)r->u.mark.value
                                                              : TP_NONE;
                int close = ph == TP_BWD && next != TP_BWD && !done;
                if (close && next != TP_OPT) { /* no optimizer phase: one is made */
                    st = end_backward(f, 1);
                    done = 1;
                } else if (close) {
                    st = emit_d2h(f);
                }
                if (r->u.mark.kind == TM_ITER) done = 0;
                ph = next;
                if (!st) st = trace_append(f->o, r);
                if (!st && close && next == TP_OPT) {
                    st = emit_host_opt(f);
                    done = 1;
                }
                break;
            }
            st = trace_append(f->o, r);
            break;
        case TR_ALLOC: {
            const trace_tensor *x = &r->u.alloc;
            if (x->cls == TC_OPTSTATE || (ph == TP_OPT && i > f->setup_end) ||
                u64map_get(f->drop, x->id, NULL)) {
                if (u64map_put(f->drop, x->id, 1)) st = nomem(f);
                break;
            }
            trace_rec c = *r;
            if (x->cls == TC_PARAM && f->from > f->to && x->bytes % (uint64_t)f->from == 0)
                c.u.alloc.bytes = x->bytes / (uint64_t)f->from * (uint64_t)f->to;
            uint64_t u;
            if (x->cls == TC_PARAM && x->layer < 0 && u64map_get(f->param, x->id, &u))
                c.u.alloc.layer = unit_layer(f, (size_t)u); /* the layer it was found in */
            st = trace_append(f->o, &c);
            break;
        }
        case TR_FREE:
            if (!u64map_get(f->drop, r->u.free_id, NULL)) st = trace_append(f->o, r);
            break;
        case TR_OP:
            if (ph == TP_OPT || r->u.op.phase == TP_OPT) break; /* replaced by host Adam */
            st = copy_op(f, r);
            break;
        }
    }
    if (st == MS_OK && !done) st = end_backward(f, ph != TP_OPT);
    if (st == MS_ERR_NOMEM) return nomem(f);
    if (st) return ms_fail(f->err, st, "cannot write the ZeRO-Offload form");
    return MS_OK;
}

static ms_status write_meta(of *f, uint64_t opt_bytes)
{
    ms_status st = MS_OK;
    for (size_t i = 0; i < trace_meta_count(f->t) && st == MS_OK; i++)
        st = trace_set_meta(f->o, trace_meta_key(f->t, i), trace_meta_value(f->t, i));
    uint64_t params = 0;
    for (size_t u = 0; u < f->nu; u++) params += f->u[u].params;
    char v[32];
    struct { const char *k; uint64_t v; } kv[] = {
        { "trainable_params_local", params },
        { "offload", 1 },
        { "host_opt_bytes", params * opt_bytes },
        { "host_grad_bytes", params * OF_HOST_GRAD_BYTES },
        { "param_tensors", f->tensors },
        { "param_tensors_layer", f->tensors_layer0 },
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0] && st == MS_OK; i++) {
        snprintf(v, sizeof v, "%" PRIu64, kv[i].v);
        st = trace_set_meta(f->o, kv[i].k, v);
    }
    if (st == MS_OK && !u64map_count(f->sgrad)) {
        snprintf(v, sizeof v, "%d", f->to);
        st = trace_set_meta(f->o, "grad_bytes", v);
    }
    if (st == MS_OK) st = trace_set_meta(f->o, "offload_form", "from-plain");
    return st == MS_OK ? MS_OK : ms_fail(f->err, st, "cannot write the ZeRO-Offload form's meta");
}

int oform_is_offload(const trace_t *t)
{
    return trace_meta_u64(t, "offload", 0) == 1;
}

static void of_free(of *f)
{
    for (size_t u = 0; f->u && u < f->nu; u++) free(f->u[u].pids);
    free(f->u);
    free(f->outer);
    u64map_free(f->param);
    u64map_free(f->cast);
    u64map_free(f->igrad);
    u64map_free(f->sgrad);
    u64map_free(f->drop);
}

ms_status oform_from_plain(const trace_t *t, const machine_t *m, uint64_t opt_bytes_per_param,
                           trace_t **out, ms_error *err)
{
    *out = NULL;
    ms_status st = check_plain(t, err);
    if (st) return st;
    of f;
    memset(&f, 0, sizeof f);
    f.t = t;
    f.m = m;
    f.err = err;
    f.n = trace_count(t);
    f.next_tid = f.next_oid = 1;
    uint64_t db = trace_meta_u64(t, "dtype_bytes", 2);
    f.to = db >= 1 && db <= 8 ? (int)db : 2;
    const char *prec = trace_get_meta(t, "precision");
    f.from = prec && strcmp(prec, "amp") == 0 ? 4 : f.to;
    f.param = u64map_new(1024);
    f.cast = u64map_new(1024);
    f.igrad = u64map_new(1024);
    f.sgrad = u64map_new(64);
    f.drop = u64map_new(4096);
    f.o = trace_new();
    if (!f.param || !f.cast || !f.igrad || !f.sgrad || !f.drop || !f.o) st = nomem(&f);
    if (!st) st = scan(&f);
    if (!st) st = write_meta(&f, opt_bytes_per_param);
    if (!st) st = write_records(&f);
    if (st) trace_free(f.o);
    else *out = f.o;
    of_free(&f);
    return st;
}

/* lower_dha_model.c — the unit analysis of a trace that the MemFerry and ZeRO-Offload
 * policies share and the shadow-model lowering reads (dha_model, lower_dha_model.h): units and
 * their parameters and gradients, modules of split gradient buffers, and each unit's profiled
 * costs. Used by planners/memferry/lower_dha.c, the policies, the paper driver and tests. The
 * rules are in docs/MEMFERRY.md. */
#define _POSIX_C_SOURCE 200809L
#include "planners/memferry/lower_dha_model.h"
#include "planners/memferry/lower_dha_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---------------------------------------------------------------------------------- */
/* small helpers                                                                       */

int dha_uidx(const dha_model *d, int32_t layer)
{
    (void)d;
    return (int)(layer + 1);
}

const dtens *dha_tens_of(const dha_model *d, uint64_t id, size_t *ix)
{
    uint64_t v;
    if (!u64map_get(d->tix, id, &v)) return NULL;
    if (ix) *ix = (size_t)v;
    return &d->tens[v];
}

int dha_is_param(const dha_model *d, uint64_t id, size_t *ix)
{
    const dtens *x = dha_tens_of(d, id, ix);
    return x && x->cls == TC_PARAM;
}

int dha_is_grad(const dha_model *d, uint64_t id, size_t *ix)
{
    const dtens *x = dha_tens_of(d, id, ix);
    return x && x->cls == TC_GRAD;
}

/* Whether op reads a parameter (a kernel that writes a gradient without reading one makes
 * the dense gradient of an embedding table). */
static int reads_param(const dha_model *d, const trace_op *op)
{
    for (uint32_t i = 0; i < op->n_in; i++) {
        size_t ix;
        if (dha_is_param(d, op->in[i], &ix)) return 1;
    }
    return 0;
}

/* How many times a GEMM reads its host operand: it tiles its output by dha.gemm_rows rows of
 * the other operand and every tile reads the whole weight, so over M rows ceil(M / rows)
 * times (measured with cuBLAS on an H200, experiments/memferry/host_probe.py: 256-row tiles,
 * each re-reading the weight over PCIe; L2 keeps none of it). M comes from the FLOPs: the
 * weight is the largest parameter the op reads, 2 M K N FLOPs in the forward; a generated
 * backward GEMM is the input and the weight gradient together (4 M K N), and only the
 * first reads the weight. Other kernels read their host operands once. */
double dha_rereads(const dha_model *d, const trace_op *op)
{
    const machine_t *m = d->m;
    if (op->kind != TK_GEMM || !m || !(m->dha_gemm_rows > 0)) return 1;
    uint64_t wb = 0;
    for (uint32_t k = 0; k < op->n_in; k++) {
        size_t ix;
        if (dha_is_param(d, op->in[k], &ix) && d->tens[ix].bytes > wb) wb = d->tens[ix].bytes;
    }
    double elems = (double)wb / d->param_elem_bytes;
    if (!(elems > 0) || !(op->flops > 0)) return 1;
    double rows = op->flops / (2.0 * elems) / (op->phase == TP_BWD ? 2.0 : 1.0);
    double n = ceil(rows / m->dha_gemm_rows - 1e-9);
    return n > 1 ? n : 1;
}

/* Bytes a kernel reads of parameter P over DHA: an embedding lookup gathers only the rows
 * it needs (at most its output's size per table); other kernels read the tensor `rereads`
 * times (the op's dha_rereads, computed once per op by the callers). */
uint64_t dha_read_bytes(const trace_op *op, uint64_t pbytes, double rereads)
{
    if (op->kind == TK_EMBED && op->phase == TP_FWD && op->bytes_written < pbytes)
        return op->bytes_written;
    return (uint64_t)((double)pbytes * rereads);
}

/* Bytes a backward kernel writes of gradient buffer G (gbytes) when G lives on the host:
 * the gradients of the parameters it reads (x the gradient/parameter element ratio), or,
 * for a kernel reading none (an embedding's scatter-add), what it writes, at most G. */
uint64_t dha_write_bytes(const dha_model *d, const trace_op *op, uint64_t gbytes)
{
    uint64_t w = 0;
    for (uint32_t i = 0; i < op->n_in; i++) {
        size_t ix;
        if (dha_is_param(d, op->in[i], &ix))
            w += (uint64_t)((double)d->tens[ix].bytes * d->grad_ratio);
    }
    if (!w) w = op->bytes_written;
    return w < gbytes ? w : gbytes;
}

/* grad_write=accumulate: the gradient an op hands to AccumulateGrad for host gradient G: the
 * full gradient of each parameter it reads (x the element ratio), or all of G for a kernel
 * reading none (PyTorch's embedding backward makes a dense gradient of the table). */
uint64_t dha_acc_bytes(const dha_model *d, const trace_op *op, uint64_t gbytes)
{
    uint64_t w = 0;
    for (uint32_t i = 0; i < op->n_in; i++) {
        size_t ix;
        if (dha_is_param(d, op->in[i], &ix))
            w += (uint64_t)((double)d->tens[ix].bytes * d->grad_ratio);
    }
    if (!w || w > gbytes) w = gbytes;
    return w;
}

/* Bytes of an accumulate of b bytes that move one way only: a streaming kernel keeps about
 * one wave in flight (dha.inflight_bytes), so its first reads go out before any write and
 * its last writes drain after the last read; only the rest overlaps both ways. Measured on
 * an H200 (experiments/memferry/go_probe.py): `grad += new` into mapped host memory moves
 * 27 GB/s of gradient up to 2 MB, 29 at 4 MB, 38 at 16 MB, 42 at 128 MB. */
uint64_t dha_acc_one_way_bytes(const machine_t *m, uint64_t b)
{
    if (!m || !(m->dha_inflight_bytes > 0)) return 0;
    return (double)b < m->dha_inflight_bytes ? b : (uint64_t)m->dha_inflight_bytes;
}

/* Standalone time of an accumulate kernel reading and writing b bytes of host memory: its
 * one-way bytes read then written, the rest at the slower of read, write and duplex. */
static double acc_us(const machine_t *m, uint64_t b)
{
    if (!m || !(m->dha_read_Bps > 0) || !(m->dha_write_Bps > 0)) return 0;
    double e = m->dha_other_eff > 0 ? m->dha_other_eff : 1;
    double rd = 1.0 / (m->dha_read_Bps * e), wr = 1.0 / (m->dha_write_Bps * e);
    double both = rd > wr ? rd : wr;
    if (m->link_duplex_Bps > 0 && 2.0 / m->link_duplex_Bps > both) both = 2.0 / m->link_duplex_Bps;
    uint64_t s = dha_acc_one_way_bytes(m, b);
    double t = (double)s * (rd + wr) + (double)(b - s) * both;
    return t * 1e6 + (m->gpu_kernel_launch_us > 0 ? m->gpu_kernel_launch_us : 0);
}

/* Efficiency of a kernel's DHA traffic: GEMMs re-read tiles of host operands
 * (dha.gemm_eff); streaming kernels and pure gradient writes use dha.other_eff. */
double dha_eff_of(const machine_t *m, const trace_op *op, int reads)
{
    if (!m) return 1.0;
    return (reads && op->kind == TK_GEMM) ? m->dha_gemm_eff : m->dha_other_eff;
}

ms_status dha_check_machine(const machine_t *m, const char *who, ms_error *err)
{
    if (!m) return ms_fail(err, MS_ERR_INVALID, "%s needs a machine profile", who);
    const char *miss = NULL;
    if (!(m->link_h2d_Bps > 0)) miss = "link.h2d_Bps";
    else if (!(m->link_d2h_Bps > 0)) miss = "link.d2h_Bps";
    else if (!(m->dha_read_Bps > 0)) miss = "dha.read_Bps";
    else if (!(m->dha_write_Bps > 0)) miss = "dha.write_Bps";
    else if (!(m->dha_gemm_eff > 0)) miss = "dha.gemm_eff";
    else if (!(m->dha_other_eff > 0)) miss = "dha.other_eff";
    if (miss)
        return ms_fail(err, MS_ERR_INVALID,
                       "machine '%s' has no DHA figures (%s is missing or 0): %s needs the "
                       "direct-host-access rates of the machine profile (traces/FORMAT.md)",
                       m->name[0] ? m->name : "(unnamed)", miss, who);
    return MS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* the unit analysis                                                                   */

void dha_model_free(dha_model *d)
{
    if (!d) return;
    free(d->mod);
    free(d->dense_grad);
    free(d->mod_g);
    free(d->tmod);
    free(d->g_first);
    free(d->g_count);
    free(d->scratch);
    free(d->u);
    free(d->adam_op);
    free(d->tens);
    u64map_free(d->tix);
    free(d->uses);
    free(d->unit);
    free(d->role);
    free(d->dur);
    free(d);
}

size_t dha_model_units(const dha_model *d) { return d ? d->nu : 0; }

const dha_unit *dha_model_unit(const dha_model *d, size_t i)
{
    return (d && i < d->nu) ? &d->u[i] : NULL;
}

int32_t dha_model_layers(const dha_model *d) { return d ? d->L : 0; }

size_t dha_model_modules(const dha_model *d) { return d ? d->nmod : 0; }

const dha_module *dha_model_module(const dha_model *d, size_t i)
{
    return (d && i < d->nmod) ? &d->mod[i] : NULL;
}

static ms_status add_use(dha_model *d, int unit, size_t tix)
{
    for (size_t i = 0; i < d->nuses; i++)
        if (d->uses[i].unit == unit && d->uses[i].tens == tix) return MS_OK;
    if (ms_grow((void **)&d->uses, &d->cap_uses, d->nuses + 1, sizeof *d->uses))
        return MS_ERR_NOMEM;
    d->uses[d->nuses++] = (duse){ unit, tix };
    return MS_OK;
}

static ms_status fail_op(ms_error *err, ms_status st, const trace_rec *r, const char *fmt,
                         const char *what)
{
    return ms_fail(err, st, "trace record at line %" PRIu64 " (op %" PRIu64 " %s): %s%s",
                   r->line, r->u.op.id, r->u.op.name, fmt, what ? what : "");
}

/* Checks the trace is one the shadow model can lower. */
static ms_status check_trace(const trace_t *t, ms_error *err)
{
    if (trace_meta_u64(t, "offload", 0) != 1)
        return ms_fail(err, MS_ERR_INVALID,
                       "the trace is not a ZeRO-Offload trace (meta offload 1): MemFerry and "
                       "zero-offload plans need one (memsim makes it for them: generated with "
                       "offload=1 (traces/gen.h), or from a plain trace, a --trace file or the "
                       "hf profile's, by planners/memferry/offload_form.h; --gen offload=0 keeps the "
                       "plain form)");
    if (trace_meta_u64(t, "zero3", 0))
        return ms_fail(err, MS_ERR_UNSUPPORTED, "the shadow-model lowering does not handle "
                       "ZeRO-3 traces (parameters sharded over data parallelism)");
    const char *keys[3] = { "tp", "cp", "dp" };
    for (int i = 0; i < 3; i++)
        if (trace_meta_u64(t, keys[i], 1) != 1)
            return ms_fail(err, MS_ERR_UNSUPPORTED, "the shadow-model lowering handles one "
                           "GPU (meta %s must be 1)", keys[i]);
    return MS_OK;
}

/* Pass 1: layers, setup tensors, per-record unit and role, durations. */
static ms_status scan_records(dha_model *d, ms_error *err)
{
    const trace_t *t = d->t;
    int32_t maxl = -1;
    d->nrec = trace_count(t);
    d->setup_end = d->nrec;
    for (size_t i = 0; i < d->nrec; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_LAYER && r->u.mark.value > maxl)
            maxl = (int32_t)r->u.mark.value;
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER && d->setup_end == d->nrec)
            d->setup_end = i;
    }
    if (maxl > 100000) return ms_fail(err, MS_ERR_INVALID, "implausible layer index %d", maxl);
    uint64_t declared = trace_meta_u64(t, "layers", 0);
    if (declared > 0 && (uint64_t)maxl >= declared && maxl >= 0)
        return ms_fail(err, MS_ERR_INVALID, "mark layer %d: beyond the %" PRIu64 " layers the "
                       "trace declares (meta layers)", maxl, declared);
    d->L = maxl + 1;
    d->nu = (size_t)d->L + 2;
    d->u = calloc(d->nu, sizeof *d->u);
    d->adam_op = malloc(d->nu * sizeof *d->adam_op);
    d->unit = malloc((d->nrec ? d->nrec : 1) * sizeof *d->unit);
    d->role = calloc(d->nrec ? d->nrec : 1, 1);
    d->dur = calloc(d->nrec ? d->nrec : 1, sizeof *d->dur);
    d->tix = u64map_new(1024);
    if (!d->u || !d->adam_op || !d->unit || !d->role || !d->dur || !d->tix)
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < d->nu; i++) {
        d->u[i].layer = (int32_t)i - 1;
        d->adam_op[i] = -1;
    }
    trace_phase ph = TP_NONE;
    int cur = 0, seen = 0, nfwd = 0, nbwd = 0;
    for (size_t i = 0; i < d->nrec; i++) {
        const trace_rec *r = trace_get(t, i);
        d->unit[i] = -1;
        if (r->type == TR_MARK) {
            const trace_mark *mk = &r->u.mark;
            if (mk->kind == TM_ITER) ph = TP_NONE;
            else if (mk->kind == TM_PHASE) {
                ph = (trace_phase)mk->value;
                seen = 0;
                cur = ph == TP_BWD ? dha_uidx(d, d->L) : 0;
                nfwd += ph == TP_FWD;
                nbwd += ph == TP_BWD;
            } else if (mk->value >= 0) {
                cur = dha_uidx(d, (int32_t)mk->value);
                seen = 1;
            } else if (ph == TP_FWD) {
                cur = seen ? dha_uidx(d, d->L) : 0;
            } else if (ph == TP_BWD) {
                cur = seen ? 0 : dha_uidx(d, d->L);
            }
            continue;
        }
        if (r->type == TR_ALLOC) {
            const trace_tensor *x = &r->u.alloc;
            if (x->cls != TC_PARAM && x->cls != TC_GRAD) continue;
            if (i > d->setup_end)
                return ms_fail(err, MS_ERR_UNSUPPORTED,
                               "trace line %" PRIu64 ": %s tensor %" PRIu64 " (%s) is allocated "
                               "inside an iteration; the shadow model needs parameters and "
                               "gradients allocated once at setup", r->line,
                               trace_class_name(x->cls), x->id, x->name);
            if (ms_grow((void **)&d->tens, &d->cap_t, d->nt + 1, sizeof *d->tens) ||
                u64map_put(d->tix, x->id, d->nt))
                return ms_fail(err, MS_ERR_NOMEM, "out of memory");
            d->tens[d->nt++] = (dtens){ x->id, x->bytes, x->cls, x->layer, -1 };
            continue;
        }
        if (r->type != TR_OP) continue;
        const trace_op *op = &r->u.op;
        d->dur[i] = roof_op_us(d->m, &d->roof, op);
        if (d->dur[i] < 0)
            return fail_op(err, MS_ERR_INVALID, r, "has no duration, so its layer cannot be "
                           "timed", d->m ? " (a collective needs one)" : " (and no machine is given)");
        const char *nm = op->name;
        if (op->kind == TK_OPTIM && ms_ends_with(nm, ".optim.host")) d->role[i] = RR_ADAM;
        else if (op->kind == TK_COMM && ms_ends_with(nm, ".param.h2d")) d->role[i] = RR_PARAM_H2D;
        else if (op->kind == TK_COMM && ms_ends_with(nm, ".grad.d2h")) d->role[i] = RR_GRAD_D2H;
        else if (ph == TP_FWD || ph == TP_BWD) d->unit[i] = cur;
        else d->unit[i] = 0;
    }
    if (!nfwd || !nbwd)
        return ms_fail(err, MS_ERR_INVALID, "the trace has no %s phase (mark phase): the "
                       "planner cannot time its layers", nfwd ? "backward" : "forward");
    return MS_OK;
}

/* The records of the first iteration: [*a, *b). The whole trace when it has no marks. */
static void first_iteration(const dha_model *d, size_t *a, size_t *b)
{
    *a = d->setup_end == d->nrec ? 0 : d->setup_end;
    *b = d->nrec;
    for (size_t i = *a + 1; i < d->nrec; i++) {
        const trace_rec *r = trace_get(d->t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            *b = i;
            return;
        }
    }
}

/* Pass 2 (first iteration): parameter reads per unit, owners of parameters and gradients. */
static ms_status find_owners(dha_model *d, ms_error *err)
{
    size_t beg, end;
    first_iteration(d, &beg, &end);
    for (size_t i = beg; i < end; i++) {
        const trace_rec *r = trace_get(d->t, i);
        if (r->type != TR_OP || d->unit[i] < 0) continue;
        const trace_op *op = &r->u.op;
        if (op->phase != TP_FWD && op->phase != TP_BWD) continue;
        for (uint32_t k = 0; k < op->n_in; k++) {
            size_t ix;
            if (!dha_is_param(d, op->in[k], &ix)) continue;
            if (add_use(d, d->unit[i], ix)) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
            if (d->tens[ix].owner < 0 && op->phase == TP_FWD) d->tens[ix].owner = d->unit[i];
        }
        if (op->phase != TP_BWD) continue;
        for (uint32_t k = 0; k < op->n_out; k++) {
            size_t ix;
            if (dha_is_grad(d, op->out[k], &ix)) d->tens[ix].owner = d->unit[i]; /* last wins */
        }
    }
    /* Tensors no op reads (or writes) belong to their own layer, or after the last layer. */
    for (size_t i = 0; i < d->nt; i++) {
        dtens *x = &d->tens[i];
        if (x->owner >= 0) continue;
        if (x->cls == TC_PARAM) {
            for (size_t k = 0; k < d->nuses; k++)
                if (d->uses[k].tens == i) {
                    x->owner = d->uses[k].unit;
                    break;
                }
        }
        if (x->owner < 0)
            x->owner = x->layer >= 0 && x->layer < d->L ? dha_uidx(d, x->layer) : dha_uidx(d, d->L);
    }
    return MS_OK;
}

/* The unit a host Adam op updates: its layer, or for layer -1 the owner of the parameters
 * the next *.param.h2d op writes back. */
static int adam_unit(const dha_model *d, size_t i)
{
    const trace_op *op = &trace_get(d->t, i)->u.op;
    if (op->layer >= 0 && op->layer < d->L) return dha_uidx(d, op->layer);
    for (size_t j = i + 1; j < d->nrec; j++) {
        const trace_rec *r = trace_get(d->t, j);
        if (r->type != TR_OP) continue;
        if (d->role[j] != RR_PARAM_H2D) break;
        for (uint32_t k = 0; k < r->u.op.n_out; k++) {
            size_t ix;
            if (dha_is_param(d, r->u.op.out[k], &ix)) return d->tens[ix].owner;
        }
        break;
    }
    return strncmp(op->name, "embed.", 6) == 0 ? 0 : dha_uidx(d, d->L);
}

/* Bytes of parameter tensor ix's gradient. */
static uint64_t pgrad_bytes(const dha_model *d, size_t ix)
{
    return (uint64_t)((double)d->tens[ix].bytes * d->grad_ratio);
}

/* Which gradient buffer holds each parameter's gradient (lower_dha.h, "modules"):
 * mg[P] = tensor index of the buffer, -1 none yet; bad[G] = G cannot be split. */
static void claim_grads(const dha_model *d, long *mg, unsigned char *bad)
{
    size_t beg, end;
    first_iteration(d, &beg, &end);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = beg; i < end; i++) {
            const trace_rec *r = trace_get(d->t, i);
            if (r->type != TR_OP || r->u.op.phase != TP_BWD || d->unit[i] < 0) continue;
            const trace_op *op = &r->u.op;
            int nparam = 0;
            for (uint32_t k = 0; k < op->n_in; k++) nparam += dha_is_param(d, op->in[k], NULL);
            for (uint32_t o = 0; o < op->n_out; o++) {
                size_t g;
                if (!dha_is_grad(d, op->out[o], &g)) continue;
                if (pass == 0) { /* kernels reading P make P's gradient */
                    for (uint32_t k = 0; k < op->n_in; k++) {
                        size_t ix;
                        if (!dha_is_param(d, op->in[k], &ix)) continue;
                        if (mg[ix] < 0) mg[ix] = (long)g;
                        else if (mg[ix] != (long)g) bad[g] = bad[mg[ix]] = 1;
                    }
                } else if (!nparam) { /* a scatter-add: its unit's unclaimed parameters */
                    for (size_t ix = 0; ix < d->nt; ix++)
                        if (d->tens[ix].cls == TC_PARAM && mg[ix] < 0 &&
                            d->tens[ix].owner == d->unit[i])
                            mg[ix] = (long)g;
                }
            }
        }
    /* Parameters no backward op touches: the one buffer their unit owns. */
    for (size_t ix = 0; ix < d->nt; ix++) {
        if (d->tens[ix].cls != TC_PARAM || mg[ix] >= 0) continue;
        long only = -1;
        int n = 0;
        for (size_t g = 0; g < d->nt; g++)
            if (d->tens[g].cls == TC_GRAD && d->tens[g].owner == d->tens[ix].owner) {
                only = (long)g;
                n++;
            }
        if (n == 1) mg[ix] = only;
    }
    for (size_t g = 0; g < d->nt; g++) {
        if (d->tens[g].cls != TC_GRAD) continue;
        uint64_t sum = 0;
        size_t n = 0;
        for (size_t ix = 0; ix < d->nt; ix++)
            if (d->tens[ix].cls == TC_PARAM && mg[ix] == (long)g) {
                sum += pgrad_bytes(d, ix);
                n++;
            }
        if (!n || sum != d->tens[g].bytes) bad[g] = 1;
    }
}

/* Pass 3 (first iteration): the modules, in unit order. */
static ms_status find_modules(dha_model *d, ms_error *err)
{
    size_t nt = d->nt ? d->nt : 1;
    long *mg = malloc(nt * sizeof *mg);
    unsigned char *bad = calloc(nt, 1);
    d->mod = calloc(nt, sizeof *d->mod);
    d->mod_g = calloc(nt, sizeof *d->mod_g);
    d->tmod = malloc(nt * sizeof *d->tmod);
    d->g_first = calloc(nt, sizeof *d->g_first);
    d->g_count = calloc(nt, sizeof *d->g_count);
    d->scratch = calloc(nt, sizeof *d->scratch);
    if (!mg || !bad || !d->mod || !d->mod_g || !d->tmod || !d->g_first || !d->g_count ||
        !d->scratch) {
        free(mg);
        free(bad);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < d->nt; i++) mg[i] = d->tmod[i] = -1;
    claim_grads(d, mg, bad);
    for (size_t u = 0; u < d->nu; u++)
        for (size_t g = 0; g < d->nt; g++) {
            if (d->tens[g].cls != TC_GRAD || d->tens[g].owner != (int)u) continue;
            d->g_first[g] = d->nmod;
            for (size_t ix = 0; ix < d->nt; ix++) {
                int whole = bad[g] && ix == g, part = !bad[g] && mg[ix] == (long)g &&
                                                     d->tens[ix].cls == TC_PARAM;
                if (!whole && !part) continue;
                d->tmod[ix] = (long)d->nmod;
                d->mod_g[d->nmod] = g;
                d->mod[d->nmod++] = (dha_module){ whole ? 0 : d->tens[ix].id, d->tens[g].id,
                                                  d->u[u].layer,
                                                  whole ? d->tens[g].bytes : pgrad_bytes(d, ix),
                                                  0, 0, 0 };
            }
            d->g_count[g] = d->nmod - d->g_first[g];
        }
    free(mg);
    free(bad);
    return MS_OK;
}

/* The modules op makes in gradient buffer g: those of its parameters g holds, else (a kernel
 * reading none, or g is one module) every module of g. In d->scratch; returns the count. */
size_t dha_op_modules(const dha_model *d, const trace_op *op, size_t g)
{
    size_t n = 0;
    for (uint32_t k = 0; k < op->n_in; k++) {
        size_t ix;
        if (!dha_is_param(d, op->in[k], &ix) || d->tmod[ix] < 0) continue;
        size_t m = (size_t)d->tmod[ix];
        if (d->mod_g[m] != g) continue;
        int dup = 0;
        for (size_t j = 0; j < n; j++) dup |= d->scratch[j] == m;
        if (!dup) d->scratch[n++] = m;
    }
    for (size_t j = 0; !n && j < d->g_count[g]; j++) d->scratch[j] = d->g_first[g] + j;
    return n ? n : d->g_count[g];
}

/* Shares an op's gradient write cost for buffer g among the modules it makes, by bytes. */
static void share_cost(dha_model *d, const trace_op *op, size_t g, double extra,
                       double extra_dha, double acc)
{
    size_t n = dha_op_modules(d, op, g);
    uint64_t all = 0;
    for (size_t j = 0; j < n; j++) all += d->mod[d->scratch[j]].grad_bytes;
    for (size_t j = 0; j < n; j++) {
        dha_module *m = &d->mod[d->scratch[j]];
        double f = all ? (double)m->grad_bytes / (double)all : 1.0 / (double)n;
        m->t_gw_extra_us += f * extra;
        m->t_gw_extra_dha_us += f * extra_dha;
        m->t_gw_acc_us += f * acc;
    }
}

/* For every gradient buffer, the record of the last backward op writing it in records
 * [beg, end) (SIZE_MAX: none). */
static void last_writers(const dha_model *d, size_t beg, size_t end, size_t *last_w)
{
    for (size_t i = 0; i < d->nt; i++) last_w[i] = SIZE_MAX;
    for (size_t i = beg; i < end; i++) {
        const trace_rec *r = trace_get(d->t, i);
        if (r->type != TR_OP || r->u.op.phase != TP_BWD || d->unit[i] < 0) continue;
        for (uint32_t k = 0; k < r->u.op.n_out; k++) {
            size_t ix;
            if (dha_is_grad(d, r->u.op.out[k], &ix)) last_w[ix] = i;
        }
    }
}

/* Pass 4 (first iteration): sizes, Adam times and the standalone profile. */
static ms_status profile(dha_model *d, ms_error *err)
{
    const machine_t *m = d->m;
    double h2d = m && m->link_h2d_Bps > 0 ? m->link_h2d_Bps : 0;
    double d2h = m && m->link_d2h_Bps > 0 ? m->link_d2h_Bps : 0;
    double rd_Bps = m && m->dha_read_Bps > 0 ? m->dha_read_Bps : 0;
    double wr_Bps = m && m->dha_write_Bps > 0 ? m->dha_write_Bps : 0;
    double lat = m && m->link_small_copy_us > 0 ? m->link_small_copy_us : 0;
    for (size_t k = 0; k < d->nuses; k++) {
        dha_unit *u = &d->u[d->uses[k].unit];
        u->n_params++;
        u->param_bytes += d->tens[d->uses[k].tens].bytes;
    }
    for (size_t i = 0; i < d->nt; i++) {
        dha_unit *u = &d->u[d->tens[i].owner];
        if (d->tens[i].cls == TC_PARAM) u->own_param_bytes += d->tens[i].bytes;
        else u->grad_bytes += d->tens[i].bytes;
    }
    for (size_t i = 0; i < d->nu; i++) {
        dha_unit *u = &d->u[i];
        u->t_trans_us = h2d > 0 ? (double)u->param_bytes / h2d * 1e6 + lat * u->n_params : 0;
        u->t_grad_d2h_us = d2h > 0 ? (double)u->grad_bytes / d2h * 1e6 : 0;
    }
    size_t beg, end;
    first_iteration(d, &beg, &end);
    size_t *last_w = calloc(d->nt ? d->nt : 1, sizeof *last_w);
    d->dense_grad = calloc(d->nt ? d->nt : 1, 1);
    if (!last_w || !d->dense_grad) {
        free(last_w);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    last_writers(d, beg, end, last_w);
    for (size_t k = 0; k < d->nt; k++)
        d->dense_grad[k] = last_w[k] != SIZE_MAX && !reads_param(d, &trace_get(d->t, last_w[k])->u.op);
    for (size_t i = beg; i < end; i++) {
        const trace_rec *r = trace_get(d->t, i);
        if (r->type != TR_OP) continue;
        const trace_op *op = &r->u.op;
        double dur = d->dur[i];
        if (d->role[i] == RR_ADAM) {
            int a = adam_unit(d, i);
            d->u[a].adam_us += dur;
            if (d->adam_op[a] < 0) d->adam_op[a] = (int64_t)op->id;
            continue;
        }
        if (d->unit[i] < 0 || (op->phase != TP_FWD && op->phase != TP_BWD)) continue;
        dha_unit *u = &d->u[d->unit[i]];
        uint64_t rd = 0;
        double rr = dha_rereads(d, op);
        for (uint32_t k = 0; k < op->n_in; k++) {
            size_t ix;
            if (dha_is_param(d, op->in[k], &ix)) rd += dha_read_bytes(op, d->tens[ix].bytes, rr);
        }
        int reads = rd > 0;
        double eff = dha_eff_of(m, op, 1);
        double tr = rd_Bps > 0 ? (double)rd / (rd_Bps * eff) * 1e6 : 0;
        double tdha = dur > tr ? dur : tr;
        if (op->phase == TP_FWD) {
            if (reads) {
                u->t_fp_us += dur;
                u->t_fp_dha_us += tdha;
            } else {
                u->t_fp_other_us += dur;
            }
            continue;
        }
        if (reads) {
            u->t_bp_us += dur;
            u->t_bp_dha_us += tdha;
        } else {
            u->t_bp_other_us += dur;
        }
        for (uint32_t k = 0; k < op->n_out; k++) {
            size_t ix;
            if (!dha_is_grad(d, op->out[k], &ix)) continue;
            dha_unit *o = &d->u[d->tens[ix].owner];
            uint64_t wb = dha_write_bytes(d, op, d->tens[ix].bytes);
            double weff = dha_eff_of(m, op, reads);
            double tw = wr_Bps > 0 ? (double)wb / (wr_Bps * weff) * 1e6 : 0;
            double ex = (tw > dur ? tw : dur) - dur, exd = (tw > tdha ? tw : tdha) - tdha;
            /* a contribution that waits for the table's dense gradient is accumulated
             * with it, once (lower_op) */
            int wait = d->dense_grad[ix] && last_w[ix] != i;
            double ac = wait ? 0 : acc_us(m, dha_acc_bytes(d, op, d->tens[ix].bytes));
            o->t_gw_extra_us += ex;
            o->t_gw_extra_dha_us += exd;
            o->t_gw_acc_us += ac;
            share_cost(d, op, ix, ex, exd, ac);
        }
    }
    /* Units with gradients but no host Adam op in the trace: the machine's CPU Adam rate. */
    for (size_t i = 0; i < d->nu; i++) {
        dha_unit *u = &d->u[i];
        if (u->adam_us > 0 || !u->grad_bytes || !m || !(m->host_adam_params_per_s > 0)) continue;
        double gb = (double)trace_meta_u64(d->t, "grad_bytes", 2);
        u->adam_us = (double)u->grad_bytes / (gb > 0 ? gb : 2) / m->host_adam_params_per_s * 1e6;
    }
    free(last_w);
    return MS_OK;
}

ms_status dha_model_new(const trace_t *t, const machine_t *m, dha_model **out, ms_error *err)
{
    *out = NULL;
    if (!t) return ms_fail(err, MS_ERR_INVALID, "no trace");
    ms_status st = check_trace(t, err);
    if (st) return st;
    dha_model *d = calloc(1, sizeof *d);
    if (!d) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    d->t = t;
    d->m = m;
    roof_params_default(&d->roof);
    double gb = (double)trace_meta_u64(t, "grad_bytes", 2), db = (double)trace_meta_u64(t, "dtype_bytes", 2);
    d->grad_ratio = db > 0 ? gb / db : 1.0;
    d->param_elem_bytes = db > 0 ? db : 2.0;
    if ((st = scan_records(d, err)) == MS_OK && (st = find_owners(d, err)) == MS_OK &&
        (st = find_modules(d, err)) == MS_OK)
        st = profile(d, err);
    if (st) {
        dha_model_free(d);
        return st;
    }
    *out = d;
    return MS_OK;
}

/* exec_fw.c — the host time PyTorch's autograd hooks add where a trace gives host times:
 * checkpointing's wrapper and pack / unpack hooks, save_on_cpu's pack / unpack hooks (see
 * exec_fw.h). The executor's host clock (sim/exec_host.c, sim/exec.c) adds what this returns;
 * it knows no policy, only what the schedule shows: a layer whose forward ops are replayed
 * ran its forward under checkpoint, a schedule with blocking copies of saved tensors ran
 * under save_on_cpu's hooks. */
#include "sim/exec_fw.h"

#include <math.h>
#include <stdlib.h>

#include "base/u64map.h"
#include "planners/pol_layers.h"

#define FW_SAVED 1u       /* a tensor autograd saved (pol_saved_tensors) */

struct exfw {
    const machine_t *m;
    u64map *tensors;      /* tensor id -> FW_* bits */
    uint8_t *ckpt_layer;  /* [layer]: the schedule replays this layer's forward */
    int32_t n_layers;
    int saves_to_host;    /* the schedule copies saved tensors to the host as they are saved */
    int32_t fwd_layer;    /* the layer of the last forward action issued (-1: none) */
    int measured;         /* the trace gives checkpointing's cost per layer: */
    double fwd_layer_us;  /*   the checkpointed forward's extra host time */
    double bwd_layer_us;  /*   the backward's, beyond its replayed forward's ops */
};

#define META_FWD "captured.ckpt_fwd_layer_us"
#define META_BWD "captured.ckpt_bwd_layer_us"

/* One of the two meta values: 1 and *us where present, 0 where absent, -1 where it is not
 * a non-negative number. */
static int meta_us(const trace_t *tr, const char *key, double *us)
{
    const char *v = tr ? trace_get_meta(tr, key) : NULL;
    if (!v) return 0;
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d) || d < 0) return -1;
    *us = d;
    return 1;
}

/* The trace's measured per-layer costs: both or neither (MS_ERR_PARSE for a bad value or
 * one without the other). */
static ms_status read_measured(const trace_t *tr, int *got, double *fwd, double *bwd,
                               ms_error *err)
{
    int a = meta_us(tr, META_FWD, fwd), b = meta_us(tr, META_BWD, bwd);
    *got = 0;
    if (a < 0 || b < 0)
        return ms_fail(err, MS_ERR_PARSE, "trace meta %s: not a non-negative number: '%s'",
                       a < 0 ? META_FWD : META_BWD,
                       trace_get_meta(tr, a < 0 ? META_FWD : META_BWD));
    if (a != b)
        return ms_fail(err, MS_ERR_PARSE, "trace meta %s without %s", a ? META_FWD : META_BWD,
                       a ? META_BWD : META_FWD);
    *got = a;
    return MS_OK;
}

static int has_costs(const machine_t *m)
{
    return m->host_ckpt_fwd_layer_us > 0 || m->host_ckpt_fwd_save_us > 0 ||
           m->host_ckpt_bwd_save_us > 0 || m->host_save_pack_us > 0 ||
           m->host_save_unpack_us > 0;
}

/* The tensors autograd saved (planners/pol_layers.c's rule, the one save-on-cpu plans by:
 * parameters included, as every saved tensor passes the pack hooks). */
static ms_status mark_saved(exfw *f, const trace_t *tr, ms_error *err)
{
    uint64_t *ids, bytes;
    size_t n;
    ms_status st = pol_saved_tensors(tr, 1, &ids, &n, &bytes, err);
    for (size_t i = 0; st == MS_OK && i < n; i++)
        if (u64map_put(f->tensors, ids[i], FW_SAVED))
            st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    free(ids);
    return st;
}

static ms_status scan_schedule(exfw *f, const schedule_t *s, ms_error *err)
{
    int32_t top = -1;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_COMPUTE && a->recompute && a->layer > top) top = a->layer;
        if (a->kind == SA_COPY_D2H && a->host_wait) f->saves_to_host = 1;
    }
    f->n_layers = top + 1;
    f->ckpt_layer = calloc((size_t)(top + 1 > 0 ? top + 1 : 1), 1);
    if (!f->ckpt_layer) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_COMPUTE && a->recompute && a->layer >= 0) f->ckpt_layer[a->layer] = 1;
    }
    return MS_OK;
}

ms_status exfw_new(const trace_t *tr, const schedule_t *s, const machine_t *m, int use_measured,
                   exfw **out, ms_error *err)
{
    *out = NULL;
    int meas = 0;
    double fwd_us = 0, bwd_us = 0;
    ms_status st0 = use_measured ? read_measured(tr, &meas, &fwd_us, &bwd_us, err) : MS_OK;
    if (st0 != MS_OK) return st0;
    if (!tr || !(meas || has_costs(m))) return MS_OK;
    exfw *f = calloc(1, sizeof *f);
    if (!f || !(f->tensors = u64map_new(1024))) {
        free(f);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    f->m = m;
    f->fwd_layer = -1;
    f->measured = meas;
    f->fwd_layer_us = fwd_us;
    f->bwd_layer_us = bwd_us;
    ms_status st = mark_saved(f, tr, err);
    if (st == MS_OK) st = scan_schedule(f, s, err);
    if (st != MS_OK) {
        exfw_free(f);
        return st;
    }
    *out = f;
    return MS_OK;
}

void exfw_free(exfw *f)
{
    if (!f) return;
    u64map_free(f->tensors);
    free(f->ckpt_layer);
    free(f);
}

/* The op's inputs that autograd saved (a forward op's: it packs them; a backward op's: it
 * unpacks them). A tensor two forward ops read counts for each, as each node saves it. */
static uint32_t saved_inputs(const exfw *f, const trace_op *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_in; i++) {
        uint64_t v = 0;
        if (u64map_get(f->tensors, t->in[i], &v) && (v & FW_SAVED)) n++;
    }
    return n;
}

double exfw_compute_us(exfw *f, const sched_action *a, const trace_op *t)
{
    if (!f || !t) return 0;
    const machine_t *m = f->m;
    int ck = a->layer >= 0 && a->layer < f->n_layers && f->ckpt_layer[a->layer];
    double us = 0;
    if (t->phase == TP_FWD && !a->recompute) {
        /* measured on the program's own block: all of the layer's cost, once */
        if (ck && a->layer != f->fwd_layer)
            us += f->measured ? f->fwd_layer_us : m->host_ckpt_fwd_layer_us;
        f->fwd_layer = a->layer;
        if (ck && !f->measured) us += m->host_ckpt_fwd_save_us * saved_inputs(f, t);
        /* save_on_cpu's pack hook: its cost follows its blocking copy (exfw_pack_us) */
    } else if (t->phase == TP_BWD) {
        f->fwd_layer = -1;
        uint32_t n = (ck || f->saves_to_host) ? saved_inputs(f, t) : 0;
        if (ck && !f->measured) us += m->host_ckpt_bwd_save_us * n;
        if (f->saves_to_host) us += m->host_save_unpack_us * n;
    }
    return us;
}

double exfw_recompute_us(const exfw *f, const machine_t *m)
{
    return f && f->measured ? f->bwd_layer_us : m->host_recompute_layer_us;
}

double exfw_pack_us(const exfw *f)
{
    return f && f->saves_to_host ? f->m->host_save_pack_us : 0;
}

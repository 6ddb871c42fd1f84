/* lower_dha.c — the shadow-model lowering of MemFerry and ZeRO-Offload plans (see lower_dha.h),
 * from the unit analysis of lower_dha_model.c. Called by planners/lower.c (dispatch), the
 * policies, sim/cmd_memferry.c and the tests. The rules are in docs/MEMFERRY.md. */
#define _POSIX_C_SOURCE 200809L
#include "planners/memferry/lower_dha.h"
#include "planners/memferry/lower_dha_int.h"
#include "planners/knob.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planners/sbuild.h"
#include "traces/roofline.h"
#include "base/u64map.h"
#include "base/util.h"


/* ---------------------------------------------------------------------------------- */
/* lowering                                                                            */

typedef enum { LOAD_FORWARD = 0, LOAD_UPDATE, LOAD_AFTER_UPDATE } load_kind;

/* Per-tensor lowering state. */
typedef struct ltens {
    int persistent;       /* parameter: a GFGB unit reads it: a device copy for the run */
    int dyn;              /* parameter: only DFGB units read it on the GPU: loaded per
                             iteration after the first such unit's forward, freed after */
    int loader;           /* LOAD_FORWARD: the unit whose load at the forward start brings it */
    int host_grad;        /* gradient: written to the host over DHA */
    uint64_t host_bytes;  /* gradient: bytes of it on the host (all of it with host_grad;
                             some with grad_host.N knobs: module-level offload) */
    int realloc;          /* gradient: allocated by each backward (DeepSpeed) */
    uint32_t ev_ld;       /* this iteration's load event (EV_NONE: resident, no wait) */
    uint32_t ev_next;     /* next iteration's load, issued after the update */
    int waited;           /* compute already waited for ev_ld this iteration */
    int on_dev;           /* dyn parameter / realloc gradient: a device block now */
    size_t last_bwd_read; /* this iteration: last backward op reading it on the GPU */
    size_t last_bwd_write;/* this iteration: last backward op writing it (gradient) */
    int written;          /* gradient written in this iteration's backward */
    uint64_t held_bytes;  /* gradient: contributions waiting in AccumulateGrad's input
                             buffer on the GPU (PyTorch sums a leaf's gradients first) */
} ltens;

typedef struct lw {
    const dha_model *d;
    const trace_t *t;
    const plan_t *p;
    const machine_t *m;
    lower_opts o;
    ms_error *err;
    schedule_t *s;
    sbuild *b;            /* adds to s */
    plan_pmode *mode;     /* per unit */
    int *ghost;           /* per unit: gradients on the host */
    unsigned char *mhost; /* per module: its gradient on the host (grad_host.N knobs) */
    lower_dha_update upd;
    load_kind load;
    int realloc, free_at_step;
    int fused_write;      /* grad_write=fused */
    uint64_t bucket_bytes;
    double copy_ratio;    /* realloc=1: bytes on the link per gradient byte (fp32 copies) */
    double grad_elem_bytes; /* the trace's bytes per gradient element */
    int overlap;          /* realloc=1, overlap_comm=1: two buckets, copies off the compute
                             stream */
    int bidx;             /* the bucket being filled */
    int ds_sync;          /* realloc=1: DeepSpeed's per-parameter flush with a host
                             synchronization per parameter (ds_* knobs) */
    double ds_pre_us, ds_sync_us, ds_post_us;
    int *ds_extra;        /* per unit: framework parameter tensors beyond its modules */
    uint32_t bucket_ev[2];/* the last flush of each bucket */
    uint32_t ds_copy_ev;  /* the last per-parameter copy of the previous flush (ds_param) */
    ltens *lt;            /* per dha tensor */
    /* per iteration */
    int64_t iter;         /* value of the current "mark iter" */
    int has_next;         /* another iteration follows */
    int first_iter;       /* no update happened yet */
    trace_phase ph;
    uint32_t *upd_ev;     /* per unit: this iteration's update event */
    uint32_t *upd_prev;   /* per unit: the previous iteration's */
    uint32_t *gh_ev;      /* per unit: gradients on the host */
    int *grads_left;      /* per unit: gradients not yet complete */
    int *done_owner;      /* per unit: gradients complete */
    size_t *last_fwd;     /* per unit: last forward op reading parameters */
    int *order;           /* units in the order their gradients completed */
    size_t norder;
    uint64_t bucket_fill;
    int *bucket_units;
    size_t nbucket;
    size_t *bucket_bufs;  /* gradient buffers (tensor indices) in the bucket, in order */
    size_t nbufs;
    uint32_t waited_ev[64]; /* load events compute already waited for, this iteration */
    size_t nwaited;
    lower_report rep;
} lw;
#define WAITED_MAX 64

/* The ALLOC of a staging block this lowering made (buckets, casts, held gradients, copies
 * in flight: dha_synth_id). */
static ms_status put_staging(lw *w, uint64_t id, uint64_t bytes)
{
    return sbuild_block(w->b, SS_COMPUTE, id, bytes, SB_STAGING);
}

static ms_status record_new(lw *w, sched_stream s, uint32_t *e)
{
    *e = sbuild_new_event(w->b);
    return sbuild_event(w->b, SA_RECORD, s, *e);
}

#define TRY(x) do { ms_status st_ = (x); if (st_ != MS_OK) return st_; } while (0)

static const char *const DHA_UPDATES[] = { "pipelined", "after_bp", "after_bwd", NULL };
static const int DHA_UPDATE_VALS[] = { LOWER_DHA_UPD_PIPELINED, LOWER_DHA_UPD_AFTER_BP, LOWER_DHA_UPD_AFTER_BWD };
static const char *const DHA_LOADS[] = { "forward", "update", "after_update", NULL };
static const char *const DHA_GRAD_WRITES[] = { "accumulate", "fused", NULL };
static const char *const DHA_GRAD_FREES[] = { "copy", "step", NULL };
#define DHA_US(key, F, def, doc)                                                                \
    { key, KNOBTAB_DBL, offsetof(lower_dha_knobs, F), def, 0, 1e9, NULL, NULL,                  \
      "microseconds >= 0", doc, "measured: experiments/memferry/ds_probe_h200", 0, 0 }

/* The DHA lowering's knobs, in the order they are checked. */
static const knobtab_row dha_rows[] = {
    { "update", KNOBTAB_ENUM, offsetof(lower_dha_knobs, update), "pipelined", 0, 0, DHA_UPDATES,
      DHA_UPDATE_VALS, NULL, "when host Adam runs: pipelined with the backward, after the "
      "backward's end (after_bp) or after every gradient is home (after_bwd)", "MemFerry, ZeRO-Offload", 0, 0 },
    KNOB_ENUM("param_load", lower_dha_knobs, param_load, "forward", DHA_LOADS,
              "when updated parameters come back to the GPU", ""),
    KNOB_FLAG("realloc", lower_dha_knobs, realloc, "0",
              "1: DeepSpeed's GPU gradient buckets, re-allocated every iteration", "DeepSpeed"),
    KNOB_FLAG("overlap_comm", lower_dha_knobs, overlap_comm, "0",
              "realloc=1: two buckets, copies off the compute stream", "DeepSpeed overlap_comm"),
    KNOB_ENUM("grad_write", lower_dha_knobs, grad_write, "accumulate", DHA_GRAD_WRITES,
              "gradients written to the host accumulated or fused into the backward kernels",
              "MemFerry §IV-D"),
    KNOB_ENUM("grad_free", lower_dha_knobs, grad_free, "copy", DHA_GRAD_FREES,
              "GPU gradients freed after their copy or at the step", ""),
    { "grad_copy_bytes", KNOBTAB_INT, offsetof(lower_dha_knobs, grad_copy_bytes), "4", 1, 16,
      NULL, NULL, "1..16 bytes per gradient element",
      "bytes per gradient element copied to the host", "", 0, 0 },
    { "bucket_bytes", KNOBTAB_BYTES, offsetof(lower_dha_knobs, bucket_bytes), NULL, 1, HUGE_VAL,
      NULL, NULL, "a positive byte count", "realloc=1: the gradient bucket (absent: 5e8 "
      "gradient elements)", "DeepSpeed reduce_bucket_size", 0, 0 },
    KNOB_FLAG("ds_sync", lower_dha_knobs, ds_sync, "0",
              "realloc=1: DeepSpeed's per-parameter flush with a host synchronization", "DeepSpeed"),
    DHA_US("ds_pre_us", ds_pre_us, "66", "host time before each parameter's flush"),
    DHA_US("ds_sync_us", ds_sync_us, "13", "host time of each parameter's synchronization"),
    DHA_US("ds_post_us", ds_post_us, "23", "host time after each parameter's flush"),
    KNOB_FAMILY(LOWER_DHA_GRAD_HOST, "grad_host.N=ID,...: the modules of unit N whose "
                "gradients go to the host", "MemFerry §IV-D"),
};
const knobtab lower_dha_knob_table = KNOBTAB("DHA lowering", dha_rows, KNOBTAB_MSG_PLAN,
                                             lower_dha_knobs, given);

static const knobtab_row dha_marker_rows[] = {
    KNOB_FLAG("host_params", lower_dha_marker, host_params, "0",
              "1: the parameters live on the host (set by the policy)", ""),
};
const knobtab lower_dha_marker_table = KNOBTAB("DHA lowering", dha_marker_rows,
                                               KNOBTAB_MSG_PLAN, lower_dha_marker, given);

/* Plan knobs; DeepSpeed's per-parameter flush (bucket_flush_ds) host times default to those
 * measured on an H200's host (Xeon, PyTorch 2.11; experiments/memferry/ds_probe_h200):
 * medians over the 1,090 parameters of BERT-base, BERT-large, RoBERTa and GPT-2-medium. */
static ms_status read_knobs(lw *w)
{
    lower_dha_knobs k;
    TRY(knob_from_plan(&lower_dha_knob_table, w->p, &k, w->err));
    w->upd = (lower_dha_update)k.update;
    w->load = (load_kind)k.param_load;
    w->realloc = k.realloc;
    w->overlap = k.overlap_comm;
    w->fused_write = k.grad_write == 1;
    w->free_at_step = k.grad_free == 1;
    double gb = (double)trace_meta_u64(w->t, "grad_bytes", 2);
    w->bucket_bytes = knobtab_given(&lower_dha_knob_table, &k, &k.bucket_bytes)
                          ? k.bucket_bytes : (uint64_t)(5e8 * gb);
    w->copy_ratio = gb > 0 ? (double)k.grad_copy_bytes / gb : 1.0;
    w->grad_elem_bytes = gb > 0 ? gb : 2;
    w->ds_sync = k.ds_sync;
    w->ds_pre_us = k.ds_pre_us;
    w->ds_sync_us = k.ds_sync_us;
    w->ds_post_us = k.ds_post_us;
    return MS_OK;
}

/* Modes per unit from the plan's layer lines; every line must name a unit. */
static ms_status read_layers(lw *w)
{
    const dha_model *d = w->d;
    for (size_t i = 0; i < w->p->n_layers; i++) {
        const plan_layer *pl = &w->p->layers[i];
        if (pl->layer < -1 || pl->layer > d->L)
            return ms_fail(w->err, MS_ERR_INVALID, "plan layer %d: the trace's units are -1 "
                           "(embedding), 0..%d (layers) and %d (head)", (int)pl->layer,
                           (int)d->L - 1, (int)d->L);
        w->mode[dha_uidx(d, pl->layer)] = pl->pmode;
        w->ghost[dha_uidx(d, pl->layer)] = pl->grad_on_host;
    }
    int dha = 0;
    for (size_t i = 0; i < d->nu; i++) dha |= w->mode[i] != PM_GFGB || w->ghost[i];
    if (dha) TRY(dha_check_machine(w->m, "DHA lowering", w->err));
    if (w->realloc)
        for (size_t i = 0; i < d->nu; i++)
            if (w->ghost[i])
                return ms_fail(w->err, MS_ERR_INVALID, "plan layer %d: grad=host cannot be "
                               "combined with realloc=1 (DeepSpeed's GPU gradient buckets)",
                               (int)d->u[i].layer);
    return MS_OK;
}

/* The next comma-separated token of a grad_host.N value at *cur (blanks before it skipped),
 * NUL-terminated in place; *cur moves past it (NULL after the last). NULL when none is left. */
static char *next_token(char **cur)
{
    char *tok = *cur;
    if (!tok) return NULL;
    char *next = strchr(tok, ',');
    if (next) *next++ = 0;
    *cur = next;
    while (*tok == ' ') tok++;
    return tok;
}

/* One grad_host.N knob: the modules of unit N whose gradients go to the host. */
static ms_status read_grad_host_knob(lw *w, const plan_knob *kn)
{
    const dha_model *d = w->d;
    int64_t L;
    if (!ms_parse_i64(kn->key + 10, &L) || L < -1 || L > d->L)
        return ms_fail(w->err, MS_ERR_INVALID, "plan knob %s: the trace's units are -1 "
                       "(embedding), 0..%d (layers) and %d (head)", kn->key, (int)d->L - 1,
                       (int)d->L);
    if (w->realloc)
        return ms_fail(w->err, MS_ERR_INVALID, "plan knob %s cannot be combined with "
                       "realloc=1 (DeepSpeed's GPU gradient buckets)", kn->key);
    if (w->ghost[dha_uidx(d, (int32_t)L)])
        return ms_fail(w->err, MS_ERR_INVALID, "plan knob %s: layer %d already has every "
                       "gradient on the host (grad=host)", kn->key, (int)L);
    char buf[sizeof kn->value];
    memcpy(buf, kn->value, sizeof buf);
    buf[sizeof buf - 1] = 0;
    for (char *cur = buf, *tok; (tok = next_token(&cur));) {
        uint64_t id;
        size_t m = d->nmod;
        if (ms_parse_u64(tok, &id) && id)
            for (m = 0; m < d->nmod; m++)
                if ((d->mod[m].param_id ? d->mod[m].param_id : d->mod[m].grad_id) == id &&
                    d->mod[m].layer == (int32_t)L)
                    break;
        if (m == d->nmod)
            return ms_fail(w->err, MS_ERR_INVALID, "plan knob %s=%s: '%s' is not a parameter "
                           "tensor whose gradient layer %d's buffer holds as a module (nor "
                           "a gradient buffer that is one module)",
                           kn->key, kn->value, tok, (int)L);
        w->mhost[m] = 1;
    }
    return MS_OK;
}

static ms_status read_grad_host(lw *w)
{
    int any = 0;
    for (size_t k = 0; k < w->p->n_knobs; k++) {
        if (strncmp(w->p->knobs[k].key, LOWER_DHA_GRAD_HOST, 10)) continue;
        TRY(read_grad_host_knob(w, &w->p->knobs[k]));
        any = 1;
    }
    return any ? dha_check_machine(w->m, "DHA lowering", w->err) : MS_OK;
}

/* Framework parameter tensors (trace meta param_tensors, param_tensors_layer: what the
 * model's Hugging Face implementation registers) beyond the trace's modules, per unit: a
 * layer gets its layer count less its modules; the embedding and head units share the rest
 * by their module counts. Without the meta every unit has none. */
#define DS_MAX_PARAM_TENSORS (1u << 24) /* more framework tensors than this: a corrupt meta */
static ms_status ds_extras(lw *w)
{
    const dha_model *d = w->d;
    uint64_t total = trace_meta_u64(w->t, "param_tensors", 0);
    uint64_t per_layer = trace_meta_u64(w->t, "param_tensors_layer", 0);
    if (!total || !w->realloc) return MS_OK;
    if (total > DS_MAX_PARAM_TENSORS || per_layer > total)
        return ms_fail(w->err, MS_ERR_INVALID, "trace meta param_tensors %" PRIu64
                       ", param_tensors_layer %" PRIu64 ": expected at most %u tensors, and "
                       "no more per layer than in all", total, per_layer,
                       (unsigned)DS_MAX_PARAM_TENSORS);
    uint64_t other = total, other_mods = 0;
    for (size_t u = 0; u < d->nu; u++) {
        uint64_t mods = 0;
        for (size_t g = 0; g < d->nt; g++)
            if (d->tens[g].cls == TC_GRAD && d->tens[g].owner == (int)u) mods += d->g_count[g];
        int layer = d->u[u].layer >= 0 && d->u[u].layer < d->L;
        if (layer) {
            w->ds_extra[u] = per_layer > mods ? (int)(per_layer - mods) : 0;
            other -= other > per_layer ? per_layer : other;
        } else {
            w->ds_extra[u] = (int)mods; /* scaled below */
            other_mods += mods;
        }
    }
    uint64_t spare = other > other_mods ? other - other_mods : 0, given = 0;
    int first = -1;
    for (size_t u = 0; u < d->nu; u++) {
        if (d->u[u].layer >= 0 && d->u[u].layer < d->L) continue;
        uint64_t mods = (uint64_t)w->ds_extra[u];
        w->ds_extra[u] = other_mods ? (int)(spare * mods / other_mods) : 0;
        given += (uint64_t)w->ds_extra[u];
        if (first < 0 && mods) first = (int)u;
    }
    if (first >= 0) w->ds_extra[first] += (int)(spare - given);
    return MS_OK;
}

/* Where each tensor lives under the plan. */
static void place_tensors(lw *w)
{
    const dha_model *d = w->d;
    for (size_t i = 0; i < d->nt; i++) {
        ltens *x = &w->lt[i];
        x->loader = -1;
        x->ev_ld = x->ev_next = EV_NONE;
        if (d->tens[i].cls == TC_GRAD) {
            x->host_grad = w->ghost[d->tens[i].owner];
            for (size_t j = 0; !x->host_grad && j < d->g_count[i]; j++)
                if (w->mhost[d->g_first[i] + j]) x->host_bytes += d->mod[d->g_first[i] + j].grad_bytes;
            if (x->host_bytes >= d->tens[i].bytes) x->host_grad = 1;
            if (x->host_grad) x->host_bytes = d->tens[i].bytes;
            x->realloc = w->realloc && !x->host_grad;
        }
    }
    for (size_t k = 0; k < d->nuses; k++) {
        int u = d->uses[k].unit;
        ltens *x = &w->lt[d->uses[k].tens];
        if (w->mode[u] == PM_GFGB && (x->loader < 0 || u < x->loader)) x->loader = u;
    }
    for (size_t k = 0; k < d->nuses; k++) {
        ltens *x = &w->lt[d->uses[k].tens];
        if (x->loader >= 0) x->persistent = 1;
        else if (w->mode[d->uses[k].unit] == PM_DFGB) x->dyn = 1;
    }
}

/* Device mode of unit u's parameter reads in this phase. */
static int reads_on_gpu(const lw *w, int u, trace_phase ph)
{
    if (w->mode[u] == PM_GFGB) return 1;
    return ph == TP_BWD && w->mode[u] == PM_DFGB;
}

/* ---- setup ---- */

static ms_status setup_alloc(lw *w, const trace_tensor *x)
{
    size_t ix;
    const dtens *dt = dha_tens_of(w->d, x->id, &ix);
    if (!dt) return sbuild_tensor(w->b, SA_ALLOC, SS_COMPUTE, x->id, x->bytes);
    const ltens *l = &w->lt[ix];
    /* Every parameter and gradient has its host home (the shadow model's CPU storage). */
    TRY(sbuild_tensor(w->b, SA_HOST_ALLOC, SS_COMPUTE, x->id, x->bytes));
    int dev = dt->cls == TC_PARAM ? l->persistent : (!l->host_grad && !l->realloc);
    return dev ? sbuild_tensor(w->b, SA_ALLOC, SS_COMPUTE, x->id, x->bytes - l->host_bytes) : MS_OK;
}

/* DeepSpeed's reduce buckets (two with overlap_comm) and their fp32 casts. */
uint64_t dha_synth_id(unsigned k)
{
    return LOWER_ID_SYNTH | (UINT64_C(3) << 56) | (uint64_t)k;
}

static uint64_t bucket_id(int k) { return dha_synth_id(k ? 4 : 1); }
static uint64_t cast_id(int k) { return dha_synth_id(k ? 5 : 2); }

/* After the setup records: the host optimizer states and DeepSpeed's reduce bucket. */
static ms_status setup_end(lw *w)
{
    uint64_t host = trace_meta_u64(w->t, "host_opt_bytes", 0) + trace_meta_u64(w->t, "host_grad_bytes", 0);
    if (host) TRY(sbuild_tensor(w->b, SA_HOST_ALLOC, SS_COMPUTE, dha_synth_id(0), host));
    if (!w->realloc) return MS_OK;
    uint64_t b = w->bucket_bytes;
    for (size_t i = 0; i < w->d->nu; i++)
        if (w->d->u[i].grad_bytes > b) b = w->d->u[i].grad_bytes;
    w->bucket_bytes = b; /* a unit larger than the bucket is reduced as a whole (not in pieces) */
    uint64_t hb = (uint64_t)((double)b * w->copy_ratio);
    for (int k = 0; k <= w->overlap; k++) {
        TRY(put_staging(w, bucket_id(k), b));
        TRY(sbuild_tensor(w->b, SA_HOST_ALLOC, SS_COMPUTE, hb != b ? cast_id(k) : bucket_id(k), hb));
    }
    w->bucket_ev[0] = w->bucket_ev[1] = EV_NONE;
    w->ds_copy_ev = EV_NONE;
    return MS_OK;
}

/* ---- iterations ---- */

/* Indices of this iteration's last uses, from record a up to the next "mark iter". */
static void scan_iteration(lw *w, size_t a)
{
    const dha_model *d = w->d;
    for (size_t i = 0; i < d->nu; i++) w->last_fwd[i] = SIZE_MAX;
    for (size_t i = 0; i < d->nt; i++) {
        w->lt[i].last_bwd_read = w->lt[i].last_bwd_write = SIZE_MAX;
        w->lt[i].written = 0;
        w->lt[i].held_bytes = 0;
    }
    w->has_next = 0;
    for (size_t i = a + 1; i < d->nrec; i++) {
        const trace_rec *r = trace_get(w->t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            w->has_next = 1;
            break;
        }
        if (r->type != TR_OP || d->unit[i] < 0) continue;
        const trace_op *op = &r->u.op;
        int u = d->unit[i];
        for (uint32_t k = 0; k < op->n_in; k++) {
            size_t ix;
            if (!dha_is_param(d, op->in[k], &ix)) continue;
            if (op->phase == TP_FWD) w->last_fwd[u] = i;
            else if (op->phase == TP_BWD && reads_on_gpu(w, u, TP_BWD)) w->lt[ix].last_bwd_read = i;
        }
        if (op->phase != TP_BWD) continue;
        for (uint32_t k = 0; k < op->n_out; k++) {
            size_t ix;
            if (dha_is_grad(d, op->out[k], &ix)) {
                w->lt[ix].last_bwd_write = i;
                w->lt[ix].written = 1;
            }
        }
    }
    for (size_t i = 0; i < d->nu; i++) {
        w->grads_left[i] = 0;
        w->done_owner[i] = 0;
        w->gh_ev[i] = EV_NONE;
        w->upd_prev[i] = w->upd_ev[i];
        w->upd_ev[i] = EV_NONE;
    }
    for (size_t i = 0; i < d->nt; i++) {
        ltens *x = &w->lt[i];
        if (d->tens[i].cls == TC_GRAD && x->written) w->grads_left[d->tens[i].owner]++;
        x->ev_ld = x->ev_next;
        x->ev_next = EV_NONE;
        x->waited = 0;
    }
    w->norder = 0;
    w->nwaited = 0;
    w->bucket_fill = 0;
    w->nbucket = 0;
}

/* GFGB loads at the forward's start, in forward order, one event per loading unit. */
static ms_status forward_loads(lw *w)
{
    const dha_model *d = w->d;
    if (w->load != LOAD_FORWARD && !w->first_iter) return MS_OK;
    /* The copy stream starts with the forward (MemFerry §IV-B, Fig. 6), not earlier. */
    uint32_t fs = EV_NONE;
    for (size_t i = 0; i < d->nt && fs == EV_NONE; i++)
        if (d->tens[i].cls == TC_PARAM && w->lt[i].loader >= 0) {
            TRY(record_new(w, SS_COMPUTE, &fs));
            TRY(sbuild_event(w->b, SA_WAIT, SS_H2D, fs));
        }
    for (size_t u = 0; u < d->nu; u++) {
        int any = 0;
        for (size_t i = 0; i < d->nt; i++) {
            if (d->tens[i].cls != TC_PARAM || w->lt[i].loader != (int)u) continue;
            uint32_t pe = w->upd_prev[d->tens[i].owner];
            if (pe != EV_NONE) TRY(sbuild_event(w->b, SA_WAIT, SS_H2D, pe));
            TRY(sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, d->tens[i].id, d->tens[i].bytes));
            any = 1;
        }
        if (!any) continue;
        uint32_t e;
        TRY(record_new(w, SS_H2D, &e));
        for (size_t i = 0; i < d->nt; i++)
            if (d->tens[i].cls == TC_PARAM && w->lt[i].loader == (int)u) w->lt[i].ev_ld = e;
    }
    return MS_OK;
}

/* DFGB: unit u's forward is done; its GPU-only tensors go to the GPU for the backward. */
static ms_status dfgb_load(lw *w, int u)
{
    const dha_model *d = w->d;
    uint32_t ef = EV_NONE, e = EV_NONE;
    for (size_t k = 0; k < d->nuses; k++) {
        if (d->uses[k].unit != u) continue;
        size_t i = d->uses[k].tens;
        ltens *x = &w->lt[i];
        if (!x->dyn || x->on_dev) continue;
        if (ef == EV_NONE) {
            TRY(record_new(w, SS_COMPUTE, &ef));
            TRY(sbuild_event(w->b, SA_WAIT, SS_H2D, ef));
        }
        TRY(sbuild_tensor(w->b, SA_ALLOC, SS_H2D, d->tens[i].id, d->tens[i].bytes));
        TRY(sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, d->tens[i].id, d->tens[i].bytes));
        x->on_dev = 1;
        x->waited = 0;
        x->ev_ld = EV_NONE - 1; /* placeholder until the event exists */
    }
    if (ef == EV_NONE) return MS_OK;
    TRY(record_new(w, SS_H2D, &e));
    for (size_t k = 0; k < d->nuses; k++)
        if (d->uses[k].unit == u && w->lt[d->uses[k].tens].ev_ld == EV_NONE - 1)
            w->lt[d->uses[k].tens].ev_ld = e;
    return MS_OK;
}

/* Compute waits for a tensor's load before the first kernel that reads it on the GPU. */
static ms_status need_on_gpu(lw *w, size_t i)
{
    ltens *x = &w->lt[i];
    if (x->waited || x->ev_ld == EV_NONE) return MS_OK;
    x->waited = 1;
    for (size_t k = 0; k < w->nwaited; k++)
        if (w->waited_ev[k] == x->ev_ld) return MS_OK;
    if (w->nwaited < WAITED_MAX) w->waited_ev[w->nwaited++] = x->ev_ld;
    return sbuild_event(w->b, SA_WAIT, SS_COMPUTE, x->ev_ld);
}

/* Host Adam of unit u once its gradients are home; then (param_load=update) its GFGB
 * parameters go back to the GPU for the next iteration. */
static ms_status host_update(lw *w, int u, int wait)
{
    const dha_model *d = w->d;
    if (wait && w->gh_ev[u] != EV_NONE) TRY(sbuild_event(w->b, SA_WAIT, SS_HOST, w->gh_ev[u]));
    sched_action a = sbuild_act(w->b, SA_HOST_COMPUTE, SS_HOST);
    a.dur_us = d->u[u].adam_us;
    a.op = d->adam_op[u];
    a.layer = d->u[u].layer;
    a.phase = TP_OPT;
    TRY(sbuild_put(w->b, &a));
    TRY(record_new(w, SS_HOST, &w->upd_ev[u]));
    if (w->load != LOAD_UPDATE || !w->has_next) return MS_OK;
    int any = 0;
    for (size_t i = 0; i < d->nt; i++) {
        if (d->tens[i].cls != TC_PARAM || d->tens[i].owner != u || !w->lt[i].persistent) continue;
        if (!any) TRY(sbuild_event(w->b, SA_WAIT, SS_H2D, w->upd_ev[u]));
        TRY(sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, d->tens[i].id, d->tens[i].bytes));
        any = 1;
    }
    if (!any) return MS_OK;
    uint32_t e;
    TRY(record_new(w, SS_H2D, &e));
    for (size_t i = 0; i < d->nt; i++)
        if (d->tens[i].cls == TC_PARAM && d->tens[i].owner == u && w->lt[i].persistent)
            w->lt[i].ev_next = e;
    return MS_OK;
}

/* param_load=after_update: once the host has updated everything, every GFGB parameter
 * goes back to the GPU, in forward order, one event per owner unit (ZeRO-Offload's
 * original single-GPU schedule: the fp16 parameters are swapped in after the update). */
static ms_status loads_after_update(lw *w)
{
    const dha_model *d = w->d;
    for (size_t u = 0; u < d->nu; u++)
        if (w->upd_ev[u] != EV_NONE) TRY(sbuild_event(w->b, SA_WAIT, SS_H2D, w->upd_ev[u]));
    for (size_t u = 0; u < d->nu; u++) {
        int any = 0;
        for (size_t i = 0; i < d->nt; i++) {
            if (d->tens[i].cls != TC_PARAM || d->tens[i].owner != (int)u || !w->lt[i].persistent)
                continue;
            TRY(sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, d->tens[i].id, d->tens[i].bytes));
            any = 1;
        }
        if (!any) continue;
        uint32_t e;
        TRY(record_new(w, SS_H2D, &e));
        for (size_t i = 0; i < d->nt; i++)
            if (d->tens[i].cls == TC_PARAM && d->tens[i].owner == (int)u && w->lt[i].persistent)
                w->lt[i].ev_next = e;
    }
    return MS_OK;
}

/* A memory-bound kernel moving `bytes` through HBM (DeepSpeed's bucket copies and casts). */
static ms_status hbm_kernel(lw *w, uint64_t bytes, int32_t layer)
{
    const machine_t *m = w->m;
    sched_action a = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
    double bw = m->gpu_hbm_Bps * (m->gpu_mem_eff > 0 ? m->gpu_mem_eff : 1);
    a.dur_us = (m->gpu_kernel_launch_us > 0 ? m->gpu_kernel_launch_us : 0) +
               (bw > 0 ? (double)bytes / bw * 1e6 : 0);
    a.layer = layer;
    a.phase = TP_BWD;
    return sbuild_put(w->b, &a);
}

/* One parameter of DeepSpeed's per-parameter flush (bucket_flush_ds); bytes 0 for the
 * framework tensors the trace folds into others (biases, norms). *copy: the previous
 * parameter's copy event, then this one's. */
static ms_status ds_param(lw *w, uint64_t bytes, uint32_t *copy)
{
    sched_action a = sbuild_act(w->b, SA_HOST_COMPUTE, SS_HOST);
    uint32_t h, k;
    a.dur_us = w->ds_pre_us; /* issue .double().norm(2) and the overflow check's kernels */
    a.phase = TP_BWD;
    TRY(sbuild_put(w->b, &a));
    TRY(record_new(w, SS_HOST, &h));
    TRY(sbuild_event(w->b, SA_WAIT, SS_COMPUTE, h));
    if (*copy != EV_NONE) TRY(sbuild_event(w->b, SA_WAIT, SS_COMPUTE, *copy)); /* one stream in DeepSpeed */
    uint64_t dbl = (uint64_t)((double)bytes * 8.0 / w->grad_elem_bytes);
    uint64_t xb = (uint64_t)((double)bytes * w->copy_ratio);
    if (bytes) TRY(put_staging(w, dha_synth_id(6), dbl));
    /* the gradient read twice; the fp64 copy written and read, the fp32 copy (half its size)
     * written and summed */
    TRY(hbm_kernel(w, 2 * bytes + dbl * 3, -1));
    if (bytes) TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, dha_synth_id(6), 0));
    TRY(record_new(w, SS_COMPUTE, &k));
    TRY(sbuild_event(w->b, SA_WAIT, SS_HOST, k)); /* float(sum): the host waits for the stream */
    a.dur_us = w->ds_sync_us + w->ds_post_us; /* wakes, issues the cast and the copy */
    TRY(sbuild_put(w->b, &a));
    TRY(record_new(w, SS_HOST, &h));
    TRY(sbuild_event(w->b, SA_WAIT, SS_COMPUTE, h));
    if (!bytes) return hbm_kernel(w, 0, -1);
    /* the previous flush's last copy freed its staging cast (one stream in DeepSpeed) */
    if (*copy == EV_NONE && w->ds_copy_ev != EV_NONE)
        TRY(sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->ds_copy_ev));
    w->ds_copy_ev = EV_NONE;
    TRY(put_staging(w, dha_synth_id(7), xb));
    TRY(hbm_kernel(w, bytes + xb, -1));
    TRY(record_new(w, SS_COMPUTE, &k));
    TRY(sbuild_event(w->b, SA_WAIT, SS_D2H, k));
    TRY(sbuild_tensor(w->b, SA_COPY_D2H, SS_D2H, dha_synth_id(7), xb));
    TRY(sbuild_tensor(w->b, SA_FREE, SS_D2H, dha_synth_id(7), 0));
    TRY(record_new(w, SS_D2H, copy));
    w->ds_copy_ev = *copy;
    return MS_OK;
}

/* DeepSpeed's flush as stage_1_and_2.py runs it (reduce_ipg_grads -> copy_grads_in_partition,
 * every DeepSpeed version): per parameter of the bucket, on one stream that first waits for
 * the backward, a .double().norm(2), an overflow check whose result the host reads — one
 * host synchronization per parameter — then a .float() cast copied to the host's fp32
 * partition. The host (the autograd thread when the bucket fills in the backward) issues
 * the next parameter's work only after that synchronization, so the copies leave one at a
 * time with the host's time between them; the backward goes on after the last copy is
 * issued. The unit's framework tensors the trace folds (ds_extra) are spread among its
 * modules, as biases and norms sit among the weights. */
static ms_status bucket_flush_ds(lw *w)
{
    const dha_model *d = w->d;
    uint32_t c = EV_NONE;
    for (size_t b = 0; b < w->nbufs; b++) {
        size_t g = w->bucket_bufs[b], n = d->g_count[g];
        int u = d->tens[g].owner, extra = w->ds_extra[u], done = 0;
        size_t bufs_u = 0; /* the unit's extras go with its first buffer */
        for (size_t j = 0; j < b; j++) bufs_u += d->tens[w->bucket_bufs[j]].owner == u;
        if (bufs_u) extra = 0;
        for (size_t j = 0; j < n; j++) {
            TRY(ds_param(w, d->mod[d->g_first[g] + j].grad_bytes, &c));
            int upto = (int)((size_t)extra * (j + 1) / n);
            for (; done < upto; done++) TRY(ds_param(w, 0, &c));
        }
    }
    w->nbufs = 0;
    if (c == EV_NONE) TRY(record_new(w, SS_COMPUTE, &c));
    for (size_t i = 0; i < w->nbucket; i++) {
        int u = w->bucket_units[i];
        w->gh_ev[u] = c;
        if (w->upd == LOWER_DHA_UPD_PIPELINED) TRY(host_update(w, u, 1));
    }
    if (w->overlap) {
        w->bucket_ev[w->bidx] = c;
        w->bidx ^= 1;
    }
    w->nbucket = 0;
    w->bucket_fill = 0;
    return MS_OK;
}

/* DeepSpeed (ZeRO-2 with CPU offload, stage_1_and_2.py) with ds_sync=0: when the bucket is
 * full and at the end of the backward, the bucket is cast to fp32 on the GPU (a temporary
 * the size of the fp32 copy) and copied into the host's fp32 gradient partition in one
 * piece — without overlap_comm on the compute stream itself, so the backward waits for the
 * copy; with it on a side stream, the backward waiting only before it refills that bucket. */
static ms_status bucket_flush(lw *w)
{
    if (!w->nbucket) return MS_OK;
    if (w->ds_sync) return bucket_flush_ds(w);
    uint32_t e, c;
    uint64_t xb = (uint64_t)((double)w->bucket_fill * w->copy_ratio);
    uint64_t tmp = cast_id(w->bidx);
    int cast = xb != w->bucket_fill;
    if (cast) {
        TRY(put_staging(w, tmp, xb));
        TRY(hbm_kernel(w, w->bucket_fill + xb, -1));
    }
    TRY(record_new(w, SS_COMPUTE, &e));
    TRY(sbuild_event(w->b, SA_WAIT, SS_D2H, e));
    TRY(sbuild_tensor(w->b, SA_COPY_D2H, SS_D2H, cast ? tmp : bucket_id(w->bidx), xb));
    if (cast && w->overlap) TRY(sbuild_tensor(w->b, SA_FREE, SS_D2H, tmp, 0));
    TRY(record_new(w, SS_D2H, &c));
    if (w->overlap) {
        w->bucket_ev[w->bidx] = c;
        w->bidx ^= 1;
    } else {
        TRY(sbuild_event(w->b, SA_WAIT, SS_COMPUTE, c));
        if (cast) TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, tmp, 0));
    }
    for (size_t i = 0; i < w->nbucket; i++) {
        int u = w->bucket_units[i];
        w->gh_ev[u] = c;
        if (w->upd == LOWER_DHA_UPD_PIPELINED) TRY(host_update(w, u, 1));
    }
    w->nbucket = 0;
    w->bucket_fill = 0;
    return MS_OK;
}

/* Unit u's gradients are complete (its last gradient write is done). */
static ms_status grads_complete(lw *w, int u, int32_t layer)
{
    const dha_model *d = w->d;
    w->done_owner[u] = 1;
    w->order[w->norder++] = u;
    uint64_t dev = 0; /* bytes of its gradients on the GPU */
    for (size_t i = 0; i < d->nt; i++)
        if (d->tens[i].cls == TC_GRAD && d->tens[i].owner == u)
            dev += d->tens[i].bytes - w->lt[i].host_bytes;
    if (w->ghost[u] || (!w->realloc && !dev)) {
        TRY(record_new(w, SS_COMPUTE, &w->gh_ev[u]));
        return w->upd == LOWER_DHA_UPD_PIPELINED ? host_update(w, u, 1) : MS_OK;
    }
    if (!w->realloc) {
        uint32_t e;
        TRY(record_new(w, SS_COMPUTE, &e));
        TRY(sbuild_event(w->b, SA_WAIT, SS_D2H, e));
        for (size_t i = 0; i < d->nt; i++)
            if (d->tens[i].cls == TC_GRAD && d->tens[i].owner == u &&
                d->tens[i].bytes > w->lt[i].host_bytes)
                TRY(sbuild_tensor(w->b, SA_COPY_D2H, SS_D2H, d->tens[i].id,
                          d->tens[i].bytes - w->lt[i].host_bytes));
        TRY(record_new(w, SS_D2H, &w->gh_ev[u]));
        return w->upd == LOWER_DHA_UPD_PIPELINED ? host_update(w, u, 1) : MS_OK;
    }
    /* DeepSpeed: copy the unit's gradients into the bucket (flushing it first if they do
     * not fit), free them, flush at the end of the backward. */
    uint64_t b = 0;
    for (size_t i = 0; i < d->nt; i++)
        if (d->tens[i].cls == TC_GRAD && d->tens[i].owner == u && w->lt[i].on_dev)
            b += d->tens[i].bytes;
    if (!b) {
        w->gh_ev[u] = EV_NONE;
        return w->upd == LOWER_DHA_UPD_PIPELINED ? host_update(w, u, 0) : MS_OK;
    }
    if (w->bucket_fill && w->bucket_fill + b > w->bucket_bytes) TRY(bucket_flush(w));
    if (!w->bucket_fill && w->bucket_ev[w->bidx] != EV_NONE) {
        TRY(sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->bucket_ev[w->bidx])); /* its last copy is done */
        w->bucket_ev[w->bidx] = EV_NONE;
    }
    TRY(hbm_kernel(w, 2 * b, layer)); /* the copy into the contiguous bucket */
    for (size_t i = 0; i < d->nt; i++) {
        if (d->tens[i].cls != TC_GRAD || d->tens[i].owner != u || !w->lt[i].on_dev) continue;
        w->bucket_bufs[w->nbufs++] = i;
        if (w->free_at_step) continue;
        TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, d->tens[i].id, 0));
        w->lt[i].on_dev = 0;
    }
    w->bucket_fill += b;
    w->bucket_units[w->nbucket++] = u;
    return MS_OK;
}

/* The end of the backward: remaining bucket, owners without written gradients, the host
 * updates of update=after_bwd, leftover DFGB copies and gradients freed at the step. */
static ms_status end_backward(lw *w)
{
    const dha_model *d = w->d;
    for (size_t u = 0; u < d->nu; u++)
        if (!w->done_owner[u] && d->u[u].grad_bytes) TRY(grads_complete(w, (int)u, d->u[u].layer));
    TRY(bucket_flush(w));
    for (size_t i = 0; i < d->nt; i++) {
        ltens *x = &w->lt[i];
        if (!x->on_dev) continue;
        if (d->tens[i].cls == TC_PARAM) TRY(need_on_gpu(w, i));
        TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, d->tens[i].id, 0));
        x->on_dev = 0;
    }
    if (w->upd == LOWER_DHA_UPD_AFTER_BWD) {
        for (size_t k = 0; k < w->norder; k++) {
            uint32_t e = w->gh_ev[w->order[k]];
            int dup = 0;
            for (size_t j = 0; j < k; j++) dup |= w->gh_ev[w->order[j]] == e;
            if (e != EV_NONE && !dup) TRY(sbuild_event(w->b, SA_WAIT, SS_HOST, e));
        }
        for (size_t u = 0; u < d->nu; u++)
            if (d->u[u].grad_bytes || d->u[u].adam_us > 0) TRY(host_update(w, (int)u, 0));
    } else if (w->upd == LOWER_DHA_UPD_AFTER_BP) {
        /* the step starts when the backward's kernels are done, then takes each unit as its
         * gradients arrive (those still in flight keep copying under the first steps) */
        uint32_t e;
        TRY(record_new(w, SS_COMPUTE, &e));
        TRY(sbuild_event(w->b, SA_WAIT, SS_HOST, e));
        for (size_t k = 0; k < w->norder; k++) TRY(host_update(w, w->order[k], 1));
        for (size_t u = 0; u < d->nu; u++)
            if (!d->u[u].grad_bytes && d->u[u].adam_us > 0) TRY(host_update(w, (int)u, 0));
    } else {
        for (size_t u = 0; u < d->nu; u++)
            if (!d->u[u].grad_bytes && d->u[u].adam_us > 0) TRY(host_update(w, (int)u, 0));
    }
    return w->load == LOAD_AFTER_UPDATE && w->has_next ? loads_after_update(w) : MS_OK;
}

/* Share of the gradient op makes in buffer g (tensor index) that host modules hold. */
static double host_share(const lw *w, const trace_op *op, size_t g)
{
    const dha_model *d = w->d;
    size_t n = dha_op_modules(d, op, g);
    uint64_t all = 0, host = 0;
    for (size_t j = 0; j < n; j++) {
        size_t m = d->scratch[j];
        all += d->mod[m].grad_bytes;
        if (w->mhost[m]) host += d->mod[m].grad_bytes;
    }
    return all ? (double)host / (double)all : 0;
}

/* Whether op's contribution to gradient buffer g waits in AccumulateGrad's input buffer:
 * PyTorch's engine sums every gradient of a leaf before it calls AccumulateGrad once, so a
 * tied LM head's weight gradient waits on the GPU for the embedding's dense table gradient,
 * the buffer's last writer, and the two are accumulated (into a host gradient: over DHA)
 * once. DeepSpeed's re-allocated gradients and fused host writes keep their own paths. */
static int waits_for_dense(const lw *w, const trace_op *op, size_t g, size_t ri)
{
    const ltens *x = &w->lt[g];
    return op->phase == TP_BWD && !x->realloc && !w->fused_write && w->d->dense_grad[g] &&
           x->last_bwd_write != ri && x->last_bwd_write != SIZE_MAX;
}

/* The synthetic id of gradient buffer g's waiting contributions. */
static uint64_t held_id(size_t g) { return dha_synth_id(8u + (unsigned)g); }

static ms_status hold_contribution(lw *w, size_t g, uint64_t bytes)
{
    ltens *x = &w->lt[g];
    /* one input buffer per leaf: a further contribution is summed into it */
    if (!x->held_bytes && bytes) TRY(put_staging(w, held_id(g), bytes));
    x->held_bytes += bytes;
    return MS_OK;
}

/* After the last writer of a buffer with waiting contributions: the input buffer is free. */
static ms_status release_held(lw *w, const trace_op *op, size_t ri)
{
    for (uint32_t k = 0; k < op->n_out; k++) {
        size_t ix;
        if (!dha_is_grad(w->d, op->out[k], &ix)) continue;
        ltens *x = &w->lt[ix];
        if (!x->held_bytes || x->last_bwd_write != ri) continue;
        TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, held_id(ix), 0));
        x->held_bytes = 0;
    }
    return MS_OK;
}

/* AccumulateGrad's kernel adding an acc-byte GPU temporary into host gradients: it reads and
 * writes them over DHA. Its one-way bytes (acc_one_way_bytes) are read before any write and
 * written after the last read; the rest reads and writes at once. One action per phase,
 * the launch on the first, the temporary's HBM read spread over the reading phases. */
static ms_status put_accumulate(lw *w, const trace_op *op, uint64_t acc)
{
    const machine_t *m = w->m;
    double bw = m->gpu_hbm_Bps * (m->gpu_mem_eff > 0 ? m->gpu_mem_eff : 1);
    double launch = m->gpu_kernel_launch_us > 0 ? m->gpu_kernel_launch_us : 0;
    uint64_t s = dha_acc_one_way_bytes(m, acc), mid = acc - s;
    const uint64_t rd[3] = { s, mid, 0 }, wr[3] = { 0, mid, s };
    int first = 1;
    for (int i = 0; i < 3; i++) {
        if (!rd[i] && !wr[i]) continue;
        sched_action g = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
        g.dur_us = (first ? launch : 0) + (bw > 0 ? (double)rd[i] / bw * 1e6 : 0);
        g.host_read_bytes = rd[i];
        g.host_write_bytes = wr[i];
        g.dha_eff = m->dha_other_eff;
        g.layer = op->layer;
        g.phase = TP_BWD;
        TRY(sbuild_put(w->b, &g));
        first = 0;
    }
    return MS_OK;
}

/* One trace op inside an iteration. */
static ms_status lower_op(lw *w, size_t ri, const trace_op *op)
{
    const dha_model *d = w->d;
    int u = d->unit[ri];
    if (d->role[ri] != RR_NORMAL) return MS_OK; /* replaced by the host stream and copies */
    sched_action a = sbuild_act(w->b, SA_COMPUTE, SS_COMPUTE);
    a.op = (int64_t)op->id;
    a.dur_us = d->dur[ri];
    a.layer = op->layer;
    a.phase = op->phase;
    int fb = op->phase == TP_FWD || op->phase == TP_BWD;
    uint64_t rd = 0, wr = 0, acc = 0, gall = 0, gdev = 0;
    double rr = fb ? dha_rereads(d, op) : 1;
    for (uint32_t k = 0; fb && k < op->n_in; k++) {
        size_t ix;
        if (!dha_is_param(d, op->in[k], &ix)) continue;
        if (reads_on_gpu(w, u, op->phase)) TRY(need_on_gpu(w, ix));
        else rd += dha_read_bytes(op, d->tens[ix].bytes, rr);
    }
    for (uint32_t k = 0; k < op->n_out; k++) {
        size_t ix;
        if (!dha_is_grad(d, op->out[k], &ix)) continue;
        ltens *x = &w->lt[ix];
        gall += d->tens[ix].bytes;
        if (waits_for_dense(w, op, ix, ri)) {
            TRY(hold_contribution(w, ix, dha_acc_bytes(d, op, d->tens[ix].bytes)));
            continue;
        }
        if (x->host_grad) {
            if (op->phase == TP_BWD && w->fused_write) wr += dha_write_bytes(d, op, d->tens[ix].bytes);
            else if (op->phase == TP_BWD) acc += dha_acc_bytes(d, op, d->tens[ix].bytes);
            continue;
        }
        if (x->host_bytes && op->phase == TP_BWD) {
            /* Module-level offload: the part of this op's gradient that belongs to host
             * modules goes over DHA, the rest to the buffer's GPU part. */
            double f = host_share(w, op, ix);
            if (w->fused_write) wr += (uint64_t)(f * (double)dha_write_bytes(d, op, d->tens[ix].bytes));
            else acc += (uint64_t)(f * (double)dha_acc_bytes(d, op, d->tens[ix].bytes));
        }
        if (x->realloc && op->phase == TP_BWD && !x->on_dev) {
            TRY(sbuild_tensor(w->b, SA_ALLOC, SS_COMPUTE, d->tens[ix].id, d->tens[ix].bytes));
            x->on_dev = 1;
        }
        if (!x->realloc || x->on_dev) gdev += d->tens[ix].bytes - x->host_bytes;
    }
    /* zero_grad and the like: only the part that writes GPU-resident gradients runs on
     * the GPU (DHA gradients are zeroed by the host, not modelled; DeepSpeed's are None). */
    if (op->phase != TP_BWD && gall) {
        if (!gdev) return MS_OK;
        a.dur_us *= (double)gdev / (double)gall;
    }
    a.host_read_bytes = rd;
    a.host_write_bytes = wr;
    if (rd || wr) a.dha_eff = dha_eff_of(w->m, op, rd > 0);
    /* grad_write=accumulate: the kernel makes the gradient in a GPU temporary, then
     * AccumulateGrad adds it into the host gradient (read and written over DHA). */
    if (acc) TRY(put_staging(w, dha_synth_id(3), acc));
    TRY(sbuild_put(w->b, &a));
    if (acc) {
        TRY(put_accumulate(w, op, acc));
        TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, dha_synth_id(3), 0));
    }
    TRY(release_held(w, op, ri));
    /* after the op */
    if (op->phase == TP_FWD && u >= 0 && w->last_fwd[u] == ri && w->mode[u] == PM_DFGB)
        TRY(dfgb_load(w, u));
    if (op->phase != TP_BWD) return MS_OK;
    for (uint32_t k = 0; k < op->n_in; k++) {
        size_t ix;
        if (!dha_is_param(d, op->in[k], &ix)) continue;
        ltens *x = &w->lt[ix];
        if (x->dyn && x->on_dev && x->last_bwd_read == ri) {
            TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, d->tens[ix].id, 0));
            x->on_dev = 0;
        }
    }
    for (uint32_t k = 0; k < op->n_out; k++) {
        size_t ix;
        if (!dha_is_grad(d, op->out[k], &ix) || w->lt[ix].last_bwd_write != ri) continue;
        int o = d->tens[ix].owner;
        if (--w->grads_left[o] == 0) TRY(grads_complete(w, o, op->layer));
    }
    return MS_OK;
}

static ms_status lower_mark(lw *w, size_t ri, const trace_mark *mk)
{
    const dha_model *d = w->d;
    if (mk->kind == TM_ITER) {
        if (w->ph == TP_BWD) TRY(end_backward(w));
        if (w->iter != INT64_MIN) w->first_iter = 0;
        scan_iteration(w, ri);
        /* The iteration starts when the host has updated every parameter of the last one
         * (the training loop's optimizer.step() returns): the measured window is then one
         * whole iteration. */
        for (size_t u = 0; u < d->nu; u++)
            if (w->upd_prev[u] != EV_NONE) TRY(sbuild_event(w->b, SA_WAIT, SS_COMPUTE, w->upd_prev[u]));
        w->iter = mk->value;
        w->ph = TP_NONE;
    } else if (mk->kind == TM_PHASE) {
        if (w->ph == TP_BWD && (trace_phase)mk->value != TP_BWD) TRY(end_backward(w));
        w->ph = (trace_phase)mk->value;
    }
    if (w->o.emit_marks) {
        sched_action a = sbuild_act(w->b, SA_MARK, SS_COMPUTE);
        a.mark = mk->kind;
        a.mark_value = mk->value;
        TRY(sbuild_put(w->b, &a));
    }
    if (mk->kind == TM_PHASE && mk->value == TP_FWD) TRY(forward_loads(w));
    if (mk->kind == TM_PHASE && mk->value == TP_BWD) {
        for (size_t u = 0; u < d->nu; u++)
            if (d->u[u].grad_bytes && w->grads_left[u] == 0 && !w->done_owner[u])
                TRY(grads_complete(w, (int)u, d->u[u].layer));
    }
    return MS_OK;
}

static ms_status lower_all(lw *w)
{
    const dha_model *d = w->d;
    int setup_done = 0;
    if (d->setup_end == d->nrec) scan_iteration(w, SIZE_MAX); /* no iteration marks */
    for (size_t i = 0; i < d->nrec; i++) {
        const trace_rec *r = trace_get(w->t, i);
        if (!setup_done && i >= d->setup_end) {
            TRY(setup_end(w));
            setup_done = 1;
        }
        switch (r->type) {
        case TR_ALLOC:
            if (i < d->setup_end) TRY(setup_alloc(w, &r->u.alloc));
            else TRY(sbuild_tensor(w->b, SA_ALLOC, SS_COMPUTE, r->u.alloc.id, r->u.alloc.bytes));
            break;
        case TR_FREE: {
            size_t ix;
            if (dha_tens_of(d, r->u.free_id, &ix))
                return ms_fail(w->err, MS_ERR_UNSUPPORTED, "trace line %" PRIu64 ": the trace "
                               "frees parameter or gradient %" PRIu64 ", which the shadow "
                               "model keeps for the run", r->line, r->u.free_id);
            TRY(sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, r->u.free_id, 0));
            break;
        }
        case TR_OP:
            TRY(lower_op(w, i, &r->u.op));
            break;
        case TR_MARK:
            TRY(lower_mark(w, i, &r->u.mark));
            break;
        }
    }
    if (!setup_done) TRY(setup_end(w));
    if (w->ph == TP_BWD) TRY(end_backward(w));
    return MS_OK;
}

int lower_dha_unit_grads(const plan_t *p, int32_t layer)
{
    char key[48];
    snprintf(key, sizeof key, LOWER_DHA_GRAD_HOST "%d", (int)layer);
    for (size_t i = 0; p && i < p->n_knobs; i++)
        if (!strcmp(p->knobs[i].key, key)) return 1;
    return 0;
}

const char *lower_dha_module_grads(const plan_t *p)
{
    for (size_t i = 0; p && i < p->n_knobs; i++)
        if (!strncmp(p->knobs[i].key, LOWER_DHA_GRAD_HOST, 10)) return p->knobs[i].key;
    return NULL;
}

ms_status lower_dha_grad_host_ids(const plan_t *p, uint64_t **ids, size_t *n, ms_error *err)
{
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    for (size_t k = 0; p && k < p->n_knobs; k++) {
        const plan_knob *kn = &p->knobs[k];
        if (strncmp(kn->key, LOWER_DHA_GRAD_HOST, 10)) continue;
        char buf[sizeof kn->value];
        memcpy(buf, kn->value, sizeof buf);
        buf[sizeof buf - 1] = 0;
        for (char *cur = buf, *tok; (tok = next_token(&cur));) {
            uint64_t id;
            ms_status st = MS_OK;
            if (!ms_parse_u64(tok, &id) || !id)
                st = ms_fail(err, MS_ERR_INVALID, "plan knob %s=%s: '%s' is not a tensor id",
                             kn->key, kn->value, tok);
            else if (ms_grow((void **)ids, &cap, *n + 1, sizeof **ids))
                st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
            if (st) {
                free(*ids);
                *ids = NULL;
                *n = 0;
                return st;
            }
            (*ids)[(*n)++] = id;
        }
    }
    return MS_OK;
}

ms_status lower_dha(const trace_t *t, const plan_t *p, const machine_t *m, const lower_opts *o,
                    schedule_t **out, ms_error *err)
{
    *out = NULL;
    if (!p) return ms_fail(err, MS_ERR_INVALID, "DHA lowering needs a plan");
    if (!m) return ms_fail(err, MS_ERR_INVALID, "DHA lowering needs a machine profile (link "
                           "and DHA rates)");
    if (!(m->link_h2d_Bps > 0) || !(m->link_d2h_Bps > 0))
        return ms_fail(err, MS_ERR_INVALID, "machine '%s' has no host link rates",
                       m->name);
    lw w;
    memset(&w, 0, sizeof w);
    if (o) w.o = *o;
    else lower_opts_default(&w.o);
    if (w.o.iter_first != INT64_MIN || w.o.iter_count > 0)
        return ms_fail(err, MS_ERR_UNSUPPORTED, "DHA lowering lowers whole traces (no "
                       "iteration selection)");
    dha_model *d;
    ms_status st = dha_model_new(t, m, &d, err);
    if (st) return st;
    w.d = d;
    w.t = t;
    w.p = p;
    w.m = m;
    w.err = err;
    w.iter = INT64_MIN;
    w.first_iter = 1;
    w.ph = TP_NONE;
    size_t nu = d->nu;
    w.mode = calloc(nu, sizeof *w.mode);
    w.ghost = calloc(nu, sizeof *w.ghost);
    w.mhost = calloc(d->nmod ? d->nmod : 1, 1);
    w.lt = calloc(d->nt ? d->nt : 1, sizeof *w.lt);
    w.upd_ev = malloc(nu * sizeof *w.upd_ev);
    w.upd_prev = malloc(nu * sizeof *w.upd_prev);
    w.gh_ev = malloc(nu * sizeof *w.gh_ev);
    w.grads_left = calloc(nu, sizeof *w.grads_left);
    w.done_owner = calloc(nu, sizeof *w.done_owner);
    w.last_fwd = malloc(nu * sizeof *w.last_fwd);
    w.order = malloc(nu * sizeof *w.order);
    w.bucket_units = malloc(nu * sizeof *w.bucket_units);
    w.bucket_bufs = malloc((d->nt ? d->nt : 1) * sizeof *w.bucket_bufs);
    w.ds_extra = calloc(nu, sizeof *w.ds_extra);
    w.s = sched_new();
    w.b = w.s ? sbuild_new(w.s, err, "out of memory") : NULL;
    if (!w.b || !w.mode || !w.ghost || !w.mhost || !w.lt || !w.upd_ev || !w.upd_prev || !w.gh_ev || !w.grads_left ||
        !w.done_owner || !w.last_fwd || !w.order || !w.bucket_units || !w.bucket_bufs ||
        !w.ds_extra || !w.s) {
        st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < nu; i++) w.upd_ev[i] = w.upd_prev[i] = w.gh_ev[i] = EV_NONE;
        st = read_knobs(&w);
        if (!st) st = read_layers(&w);
        if (!st) st = read_grad_host(&w);
        if (!st) {
            place_tensors(&w);
            st = ds_extras(&w);
            if (!st) st = lower_all(&w);
        }
        if (!st) st = sched_validate(w.s, err);
    }
    if (!st && w.o.report) {
        w.rep.actions = sbuild_actions(w.b);
        w.rep.events = sbuild_events(w.b);
        w.rep.h2d_bytes = sbuild_h2d_bytes(w.b);
        w.rep.d2h_bytes = sbuild_d2h_bytes(w.b);
        *w.o.report = w.rep;
    }
    sbuild_free(w.b);
    free(w.mode);
    free(w.ghost);
    free(w.mhost);
    free(w.lt);
    free(w.upd_ev);
    free(w.upd_prev);
    free(w.gh_ev);
    free(w.grads_left);
    free(w.done_owner);
    free(w.last_fwd);
    free(w.order);
    free(w.bucket_units);
    free(w.bucket_bufs);
    free(w.ds_extra);
    dha_model_free(d);
    if (st) {
        sched_free(w.s);
        return st;
    }
    *out = w.s;
    return MS_OK;
}

const lower_backend lower_backend_dha = {
    "dha",
    "host-resident model states: per-layer parameter modes GFGB / DHA / DFGB, gradients "
    "copied or written to the host, host Adam (MemFerry, GO-MemFerry, ZeRO-Offload)",
    lower_dha,
    0,
};

/* lower.c — lowering of a trace and a plan into a schedule (lower.h). One walk over the trace
 * in program order: the trace's own records go to the compute stream unchanged; at the end of
 * a layer's forward the plan's recomputed tensors are freed and its swapped tensors offloaded
 * on the D2H stream; at the start of a layer's backward the swapped tensors (prefetched on the
 * H2D stream one layer earlier) are waited for and the dropped ones rebuilt by replaying the
 * layer's forward ops that make them. With the plan knob rounding_buffers the skeletal
 * tensors of a layer live in one block of one of MEMO's two rounding buffers (§4.1, Fig. 5);
 * with memory_plan every re-allocation gets a fresh id for the static arena. Used by the
 * memsim command, experiments, the MEMO planner and runtime/. The rules and example
 * timelines are in docs/POLICIES.md and docs/MEMO.md. The walk's pieces, the rounding
 * buffers (lower_rb.c), the replay that rebuilds dropped tensors (lower_replay.c) and swap at
 * save time (lower_save.c), share its state through lower_int.h; the table of lowerings that
 * names this one "tensor" is planners/lowerings.c. */
#include "planners/lower.h"
#include "planners/lower_int.h"

#include "planners/knob.h"
#include "planners/policy.h"
#include "planners/sbuild.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "traces/roofline.h"
#include "base/u64map.h"
#include "base/util.h"

/* ---- small helpers ---- */

ms_status lw_idx_push(idx_list *l, size_t v)
{
    if (ms_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) != MS_OK) return MS_ERR_NOMEM;
    l->v[l->n++] = v;
    return MS_OK;
}

ms_status lw_fail_rec(lw *w, ms_status st, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const trace_rec *r = trace_get(w->t, w->rec);
    if (r && r->line)
        return ms_fail(w->err, st, "trace record %zu (line %" PRIu64 "): %s", w->rec, r->line,
                       msg);
    return ms_fail(w->err, st, "trace record %zu: %s", w->rec, msg);
}

ms_status lw_nomem(lw *w)
{
    return ms_fail(w->err, MS_ERR_NOMEM, "out of memory while lowering");
}


/* The trace tensor a schedule id stands for (an incarnation's trace id); UINT64_MAX for a
 * rounding-buffer block. */
static uint64_t trace_id_of(uint64_t sid)
{
    uint64_t tid = sid;
    if (lower_id_synthetic(sid, &tid)) return tid;
    return sid;
}

/* Framework streams on the allocator calls (plan knobs record_stream and stream_pools): an
 * ALLOC of a tensor the trace allocates on a side stream (TE's cp stream) takes that stream's
 * pool, and the FREE of a block a collective used since its allocation is marked side_use
 * (c10d's ProcessGroupNCCL calls recordStream(ncclStream) on a collective's inputs and
 * outputs unless TORCH_NCCL_AVOID_RECORD_STREAMS=1). The builder's hook: every action passes. */
static void stream_hook(void *ctx, sched_action *c)
{
    lw *w = ctx;
    if ((w->rec_stream || w->pools) && (c->kind == SA_ALLOC || c->kind == SA_FREE)) {
        uint64_t tid = trace_id_of(c->tensor);
        lw_tensor *x = tid == UINT64_MAX ? NULL : lw_find_tensor(w, tid);
        if (c->kind == SA_ALLOC && w->pools && x && x->meta->stream > 0)
            c->pool = x->meta->stream;
        if (c->kind == SA_FREE && w->rec_stream && tid != UINT64_MAX &&
            u64map_del(w->comm_use, tid, NULL))
            c->side_use = 1;
    }
}

/* With record_stream: the tensors a collective reads and writes wait, when freed, for the
 * work issued before the free (see put). */
ms_status lw_note_comm(lw *w, const trace_op *op)
{
    if (!w->rec_stream || op->kind != TK_COMM) return MS_OK;
    for (uint32_t k = 0; k < op->n_in; k++)
        if (u64map_put(w->comm_use, op->in[k], 1)) return lw_nomem(w);
    for (uint32_t k = 0; k < op->n_out; k++)
        if (u64map_put(w->comm_use, op->out[k], 1)) return lw_nomem(w);
    return MS_OK;
}

ms_status lw_put_tensor(lw *w, sched_kind k, sched_stream s, uint64_t id, uint64_t bytes)
{
    return sbuild_tensor(w->b, k, s, id, bytes);
}

ms_status lw_put_event(lw *w, sched_kind k, sched_stream s, uint32_t e)
{
    return sbuild_event(w->b, k, s, e);
}

/* The ALLOC of a block lowering made or renamed, with what it holds (sched_block). */
ms_status lw_put_block(lw *w, sched_stream s, uint64_t id, uint64_t bytes, sched_block b)
{
    return sbuild_block(w->b, s, id, bytes, b);
}

/* The ALLOC of trace tensor x's block under its current schedule id (an incarnation's
 * block holds what its tensor's class says). */
ms_status lw_put_alloc(lw *w, sched_stream s, const lw_tensor *x, uint64_t bytes)
{
    return lw_put_block(w, s, x->sid, bytes, sched_block_of_class(x->meta->cls));
}

/* ---- synthetic ids ---- */

#define ID_KIND_SHIFT 56
#define ID_KIND_INCARN UINT64_C(1)
#define ID_KIND_RBUF UINT64_C(2)
#define ID_KIND_IDLE UINT64_C(4) /* 3 is lower_dha.c's */

uint64_t lower_id_incarnation(uint64_t trace_id, unsigned k)
{
    return LOWER_ID_SYNTH | (ID_KIND_INCARN << ID_KIND_SHIFT) | ((uint64_t)(k & 0xff) << 48) |
           (trace_id & (LOWER_ID_TRACE_LIMIT - 1));
}

uint64_t lower_id_rbuf(uint32_t pass, int32_t layer, unsigned k)
{
    return LOWER_ID_SYNTH | (ID_KIND_RBUF << ID_KIND_SHIFT) | ((uint64_t)(k & 0xff) << 48) |
           ((uint64_t)(pass & 0xffffff) << 24) | ((uint64_t)layer & 0xffffff);
}

int lower_id_synthetic(uint64_t id, uint64_t *trace_id)
{
    if ((id >> 62) != 1) return 0;
    if (trace_id)
        *trace_id = ((id >> ID_KIND_SHIFT) & 0x3f) == ID_KIND_INCARN
                        ? id & (LOWER_ID_TRACE_LIMIT - 1) : UINT64_MAX;
    return 1;
}

int lower_id_is_rbuf(uint64_t id, uint32_t *pass, int32_t *layer)
{
    if ((id >> 62) != 1 || ((id >> ID_KIND_SHIFT) & 0x3f) != ID_KIND_RBUF) return 0;
    if (pass) *pass = (uint32_t)((id >> 24) & 0xffffff);
    if (layer) *layer = (int32_t)(id & 0xffffff);
    return 1;
}

uint64_t lower_id_idle_buffer(void)
{
    return LOWER_ID_SYNTH | (ID_KIND_IDLE << ID_KIND_SHIFT);
}

uint64_t lower_id_host_copy(uint64_t id)
{
    uint32_t pass;
    int32_t layer;
    if (lower_id_is_rbuf(id, &pass, &layer))
        return ((id >> 48) & 0xff) == 0 ? lower_id_rbuf(pass, layer, 1) : id;
    if (id < LOWER_ID_TRACE_LIMIT) return lower_id_incarnation(id, 1);
    uint64_t tid;
    if (lower_id_synthetic(id, &tid) && tid != UINT64_MAX)
        return lower_id_incarnation(tid, (unsigned)((id >> 48) & 0xff) + 1u);
    return id;
}

const char *lower_host_round_name(lower_host_round r)
{
    switch (r) {
    case LOWER_HOST_EXACT: return "exact";
    case LOWER_HOST_LAYER_POW2: return "layer_pow2";
    case LOWER_HOST_TENSOR_POW2: return "tensor_pow2";
    case LOWER_HOST_BUFFER_POW2: return "buffer_pow2";
    }
    return "?";
}

int lower_host_round_parse(const char *s, lower_host_round *out)
{
    for (int r = LOWER_HOST_EXACT; s && r <= LOWER_HOST_BUFFER_POW2; r++)
        if (!strcmp(s, lower_host_round_name((lower_host_round)r))) {
            *out = (lower_host_round)r;
            return 0;
        }
    return -1;
}

int lower_is_statistic(const char *name)
{
    return name && (ms_ends_with(name, "_stats") || ms_ends_with(name, ".attn_lse"));
}

void lower_host_acc_add(lower_host_acc *a, uint64_t bytes, int is_stat)
{
    if (!bytes) return;
    a->bytes += bytes;
    a->pow2_sum += ms_pow2_ceil(bytes);
    if (is_stat) {
        a->stat_bytes += bytes;
        a->stat_pow2_sum += ms_pow2_ceil(bytes);
    }
}

/* exact's buffer: whole granules */
static uint64_t granules(uint64_t bytes, uint64_t granule_bytes)
{
    uint64_t g = granule_bytes > 1 ? granule_bytes : 1;
    return bytes % g ? bytes + (g - bytes % g) : bytes;
}

uint64_t lower_host_acc_bytes(const lower_host_acc *a, lower_host_round r,
                              uint64_t granule_bytes)
{
    if (!a->bytes) return 0;
    switch (r) {
    case LOWER_HOST_EXACT: return granules(a->bytes, granule_bytes);
    case LOWER_HOST_LAYER_POW2: return ms_pow2_ceil(a->bytes);
    case LOWER_HOST_TENSOR_POW2: return a->pow2_sum;
    case LOWER_HOST_BUFFER_POW2: {
        uint64_t act = a->bytes - a->stat_bytes;
        return (act ? ms_pow2_ceil(act) : 0) + a->stat_pow2_sum;
    }
    }
    return a->bytes;
}

/* Pinned host bytes for one host buffer of `bytes` (a swapped tensor outside a rounding
 * buffer): a power of two under every pow2 reading, else whole host_granule pages. */
static uint64_t host_size(lower_host_round round, uint64_t granule_bytes, uint64_t bytes)
{
    if (bytes == 0) return 0;
    return round == LOWER_HOST_EXACT ? granules(bytes, granule_bytes) : ms_pow2_ceil(bytes);
}

uint64_t lw_host_bytes(const lw *w, uint64_t bytes)
{
    return host_size(w->host_round, w->host_granule, bytes);
}

uint64_t lower_scaled_bytes(uint64_t bytes, double frac)
{
    if (frac >= 1.0) return bytes;
    double b = ceil(frac * (double)bytes);
    return b >= (double)bytes ? bytes : (uint64_t)b;
}

/* ---- where the schedule's numbers come from (lower_src.h), when lower_opts.srcs asks ---- */

/* The source slot of the schedule's last action (the ones before it that were given none
 * stay LSRC_NONE); NULL when sources are not noted or no longer can be. */
static lower_src *src_last(lw *w)
{
    lower_srcs *S = w->src;
    if (!S || !S->ok) return NULL;
    size_t n = sched_count(w->s);
    if (!n || ms_grow((void **)&S->v, &S->cap, n, sizeof *S->v) != MS_OK) {
        S->ok = 0;
        return NULL;
    }
    if (S->n < n) {
        memset(S->v + S->n, 0, (n - S->n) * sizeof *S->v);
        S->n = n;
    }
    return &S->v[n - 1];
}

void lw_src_note_bytes(lw *w, lower_src_rule rule, const trace_tensor *meta, size_t rec,
                       double frac)
{
    lower_src *s = src_last(w);
    if (!s) return;
    /* the record must be the one whose tensor gave the bytes: another trace of the same
       structure has its own size there */
    if (rule != LSRC_CONST && (rec >= w->nrecs || rec > UINT32_MAX ||
                               w->recs[rec].type != TR_ALLOC || &w->recs[rec].u.alloc != meta)) {
        w->src->ok = 0;
        return;
    }
    s->bytes = (uint8_t)rule;
    s->rec = (uint32_t)rec;
    s->frac = frac;
}

size_t lw_op_rec(const lw *w, const trace_op *op)
{
    uintptr_t base = (uintptr_t)w->recs, at = (uintptr_t)op - offsetof(trace_rec, u.op);
    if (!w->recs || (uintptr_t)op < offsetof(trace_rec, u.op) || at < base) return SIZE_MAX;
    size_t i = (size_t)((at - base) / sizeof *w->recs);
    return i < w->nrecs && &w->recs[i].u.op == op ? i : SIZE_MAX;
}

static int pool_push(lower_srcs *S, size_t rec)
{
    if (rec > UINT32_MAX || ms_grow((void **)&S->pool, &S->cap_pool, S->n_pool + 1,
                                    sizeof *S->pool) != MS_OK)
        return -1;
    S->pool[S->n_pool++] = (uint32_t)rec;
    return 0;
}

void lw_src_ops(lw *w, const idx_list *pend, size_t rec_op, double frac)
{
    lower_src *s = src_last(w);
    if (!s) return;
    lower_srcs *S = w->src;
    size_t first = S->n_pool;
    for (size_t k = 0; pend && k < pend->n; k++)
        if (pool_push(S, pend->v[k])) S->ok = 0;
    if (pool_push(S, rec_op) || first > UINT32_MAX) S->ok = 0;
    if (!S->ok) return;
    s->dur = LSRC_OPS;
    s->ops = (uint32_t)first;
    s->n_ops = (uint32_t)(S->n_pool - first);
    s->dur_frac = frac;
}

/* A duration as the lowering makes it (do_op, replay_op, lw_tokenwise_recompute): each op's
 * time times frac; an attention kernel that absorbed .ovl collectives takes the largest. */
static ms_status bind_us(const lower_srcs *S, uint32_t ops, uint32_t n_ops, double dur_frac,
                         const trace_rec *recs, size_t nrecs, const machine_t *m,
                         const roof_params *roof, double *out)
{
    double pend = 0;
    for (uint32_t k = 0; k < n_ops; k++) {
        uint32_t i = S->pool[ops + k];
        if (i >= nrecs || recs[i].type != TR_OP) return MS_ERR_INVALID;
        double us = roof_op_us(m, roof, &recs[i].u.op);
        if (us < 0) return MS_ERR_INVALID;
        us *= dur_frac;
        if (k + 1 < n_ops) {
            if (us > pend) pend = us;
        } else {
            *out = n_ops > 1 && pend > us ? pend : us;
        }
    }
    return n_ops ? MS_OK : MS_ERR_INVALID;
}

ms_status lower_srcs_pack(lower_srcs *S)
{
    free(S->bound);
    S->bound = NULL;
    S->n_bound = S->n_bound_bytes = 0;
    size_t nb = 0, nd = 0;
    for (size_t i = 0; i < S->n; i++) {
        nb += S->v[i].bytes == LSRC_TENSOR || S->v[i].bytes == LSRC_HOST;
        nd += S->v[i].dur == LSRC_OPS;
    }
    if (S->n > UINT32_MAX) return MS_ERR_LIMIT;
    lower_bound *b = malloc((nb + nd ? nb + nd : 1) * sizeof *b);
    if (!b) return MS_ERR_NOMEM;
    lower_bound *pb = b, *pd = b + nb;
    for (size_t i = 0; i < S->n; i++) {
        const lower_src *x = &S->v[i];
        if (x->bytes == LSRC_TENSOR || x->bytes == LSRC_HOST)
            *pb++ = (lower_bound){ (uint32_t)i, x->rec, 0, x->bytes, x->frac };
        if (x->dur == LSRC_OPS)
            *pd++ = (lower_bound){ (uint32_t)i, x->ops, x->n_ops, LSRC_OPS, x->dur_frac };
    }
    S->bound = b;
    S->n_bound_bytes = nb;
    S->n_bound = nb + nd;
    return MS_OK;
}

/* bind_walk over S->bound alone: the bytes in one tight loop and the durations in another,
 * each reading its records with no other kind of source between them (the records are the
 * walk's misses). 0 when a source does not hold for t, for bind_walk to find the first such
 * action in program order and say which. */
static int bind_packed(const sched_action *a, sched_action *out, sched_num *num,
                       const lower_srcs *S, const trace_rec *recs, size_t nrecs,
                       const machine_t *m, const roof_params *roof, size_t *differ)
{
    const lower_bound *v = S->bound;
    for (size_t j = 0; j < S->n_bound_bytes; j++) {
        const lower_bound *x = &v[j];
        if (x->at >= nrecs || recs[x->at].type != TR_ALLOC) return 0;
        uint64_t b = lower_scaled_bytes(recs[x->at].u.alloc.bytes, x->frac);
        if (x->rule == LSRC_HOST) b = host_size((lower_host_round)S->host_round, S->host_granule, b);
        if (num) num[x->act].bytes = b;
        else if (out) out[x->act].bytes = b;
        else if (b != a[x->act].bytes) (*differ)++;
    }
    for (size_t j = S->n_bound_bytes; j < S->n_bound; j++) {
        const lower_bound *x = &v[j];
        double us;
        if (bind_us(S, x->at, x->n_ops, x->frac, recs, nrecs, m, roof, &us) != MS_OK) return 0;
        if (num) num[x->act].dur_us = us;
        else if (out) out[x->act].dur_us = us;
        else if (memcmp(&us, &a[x->act].dur_us, sizeof us)) (*differ)++; /* bit for bit */
    }
    return 1;
}

/* lower_bind's walk over the actions a: writes their numbers into out (a itself), or with
 * out NULL counts in *differ the actions whose numbers binding would change. */
static ms_status bind_walk(const sched_action *a, sched_action *out, size_t n,
                           const lower_srcs *S, const trace_t *t, const machine_t *m,
                           size_t *differ, ms_error *err)
{
    size_t nrecs;
    const trace_rec *recs = trace_records(t, &nrecs);
    if (!S->ok || S->n != n) return ms_fail(err, MS_ERR_INVALID, "lower_bind: the sources "
                                            "do not describe this schedule");
    roof_params roof;
    roof_params_default(&roof);
    *differ = 0;
    if (S->bound && bind_packed(a, out, NULL, S, recs, nrecs, m, &roof, differ)) return MS_OK;
    *differ = 0;
    for (size_t i = 0; i < n; i++) {
        const lower_src *x = &S->v[i];
        if (x->bytes == LSRC_TENSOR || x->bytes == LSRC_HOST) {
            if (x->rec >= nrecs || recs[x->rec].type != TR_ALLOC)
                return ms_fail(err, MS_ERR_INVALID, "lower_bind: action %zu names record %u, "
                               "not an alloc of this trace", i, x->rec);
            uint64_t b = lower_scaled_bytes(recs[x->rec].u.alloc.bytes, x->frac);
            if (x->bytes == LSRC_HOST)
                b = host_size((lower_host_round)S->host_round, S->host_granule, b);
            if (out) out[i].bytes = b;
            else if (b != a[i].bytes) (*differ)++;
        }
        if (x->dur == LSRC_OPS) {
            double us;
            if (bind_us(S, x->ops, x->n_ops, x->dur_frac, recs, nrecs, m, &roof, &us) != MS_OK)
                return ms_fail(err, MS_ERR_INVALID, "lower_bind: action %zu: its ops are not "
                               "this trace's or have no duration", i);
            if (out) out[i].dur_us = us;
            else if (memcmp(&us, &a[i].dur_us, sizeof us)) (*differ)++; /* bit for bit */
        }
    }
    return MS_OK;
}

static int bytes_kind(int k)
{
    return k == SA_ALLOC || k == SA_COPY_D2H || k == SA_COPY_H2D || k == SA_HOST_ALLOC;
}

int lower_srcs_fit(lower_srcs *S, const schedule_t *s)
{
    const sched_index *ix = sched_get_index(s);
    S->bound_nums = 0;
    if (!ix || !S->bound || S->n != sched_count(s)) return 0;
    for (size_t j = 0; j < S->n_bound; j++) {
        const lower_bound *x = &S->bound[j];
        int k = ix->brief[x->act].kind;
        if (j < S->n_bound_bytes ? !bytes_kind(k) : k != SA_COMPUTE && k != SA_HOST_COMPUTE)
            return 0;
    }
    return S->bound_nums = 1;
}

ms_status lower_bind(schedule_t *s, const lower_srcs *S, const trace_t *t, const machine_t *m,
                     ms_error *err)
{
    size_t n, differ;
    /* an indexed schedule takes its numbers into the index's dense array (sched_nums_edit):
       the actions lie 120 bytes apart, and their lines were the binding's misses */
    sched_num *num = S->ok && S->bound && S->bound_nums ? sched_nums_edit(s, &n) : NULL;
    if (num && n == S->n) {
        size_t nrecs;
        const trace_rec *recs = trace_records(t, &nrecs);
        roof_params roof;
        roof_params_default(&roof);
        if (bind_packed(NULL, NULL, num, S, recs, nrecs, m, &roof, &differ)) return MS_OK;
    }
    sched_action *a = sched_actions_edit(s, &n); /* with what the packed walk wrote */
    return bind_walk(a, a, n, S, t, m, &differ, err);
}

int lower_bind_same(const schedule_t *s, const lower_srcs *S, const trace_t *t,
                    const machine_t *m)
{
    size_t n, differ;
    ms_error e;
    ms_error_clear(&e);
    const sched_action *a = sched_actions(s, &n);
    return bind_walk(a, NULL, n, S, t, m, &differ, &e) == MS_OK && differ == 0;
}

/* After the walk: sources for every action, and whether they account for every number. The
 * rounding buffers size their groups and swap_at=save its copies from the tensors' sizes, so
 * their schedules' shapes depend on sizes: never re-bound. */
static void src_finish(lw *w)
{
    lower_srcs *S = w->src;
    if (!S) return;
    size_t n;
    const sched_action *a = sched_actions(w->s, &n);
    if (w->rb || w->sv) S->ok = 0;
    if (S->ok && ms_grow((void **)&S->v, &S->cap, n ? n : 1, sizeof *S->v) != MS_OK) S->ok = 0;
    if (!S->ok) return;
    if (S->n < n) memset(S->v + S->n, 0, (n - S->n) * sizeof *S->v);
    S->n = n;
    S->host_round = (int)w->host_round;
    S->host_granule = w->host_granule;
    for (size_t i = 0; i < n && S->ok; i++) {
        const lower_src *x = &S->v[i];
        if ((a[i].bytes && x->bytes == LSRC_NONE) || (a[i].dur_us != 0 && x->dur == LSRC_NONE) ||
            a[i].host_read_bytes || a[i].host_write_bytes || a[i].dha_eff != 1.0)
            S->ok = 0;
    }
}

/* Pinned host bytes of a rounding-buffer block's offload (the schedule carries them as one
 * HOST_ALLOC, since they are made and released together). */
uint64_t lw_rb_host_bytes(const lw *w, const rb_group *G)
{
    return lower_host_acc_bytes(&G->host, w->host_round, w->host_granule);
}

/* A fresh schedule id for a re-allocation of x (memory_plan), else its trace id. */
uint64_t lw_next_sid(lw *w, lw_tensor *x)
{
    if (!w->rename) return x->meta->id;
    x->incarn++;
    w->rep.renamed++;
    return lower_id_incarnation(x->meta->id, x->incarn);
}

lw_tensor *lw_find_tensor(lw *w, uint64_t id)
{
    uint64_t i;
    return u64map_get(w->tidx, id, &i) ? &w->ts[i] : NULL;
}

int32_t lw_layer_bound(const trace_t *t)
{
    int32_t d = pol_declared_layers(t);
    return d > 0 && d < LOWER_MAX_LAYER ? d : LOWER_MAX_LAYER;
}

/* A record's layer at or beyond w->max_layer: MS_ERR_INVALID naming it and the bound. */
ms_status lw_layer_range(lw *w, const char *what, uint64_t id, const char *name,
                         int32_t layer)
{
    char b[120];
    if (name) snprintf(b, sizeof b, "%s %" PRIu64 " (%s)", what, id, name);
    else snprintf(b, sizeof b, "%s", what);
    ms_error e = {{0}};
    if (pol_check_layer(w->t, layer, LOWER_MAX_LAYER, b, &e) == MS_OK) /* beyond LOWER_MAX_LAYER */
        snprintf(e.msg, sizeof e.msg, "%s: layer %d is out of range", b, (int)layer);
    return lw_fail_rec(w, MS_ERR_INVALID, "%s", e.msg);
}

static lw_layer *get_layer(lw *w, int32_t layer)
{
    if (layer < 0 || layer >= w->max_layer) return NULL;
    if ((size_t)layer >= w->n_layers) {
        size_t n = (size_t)layer + 1;
        lw_layer *nl = realloc(w->layers, n * sizeof *nl);
        if (!nl) return NULL;
        memset(nl + w->n_layers, 0, (n - w->n_layers) * sizeof *nl);
        w->layers = nl;
        w->n_layers = n;
    }
    return &w->layers[layer];
}

/* A new forward pass: layer sections start over; capacity is kept. */
static void reset_layers(lw *w)
{
    for (size_t i = 0; i < w->n_layers; i++) {
        lw_layer *L = &w->layers[i];
        w->rep.ignored += L->cand.n;
        idx_list c = L->cand, d = L->drop, s = L->swap, h = L->held, e = L->held_end;
        memset(L, 0, sizeof *L);
        c.n = d.n = s.n = h.n = e.n = 0;
        L->cand = c, L->drop = d, L->swap = s, L->held = h, L->held_end = e;
    }
}

/* Op duration: the trace's, else the roofline kernel time on the machine. Collectives need
 * their group, which a trace op does not carry, so they must come with a duration. */
ms_status lw_op_us(lw *w, const trace_op *op, double *us)
{
    *us = roof_op_us(w->m, &w->roof, op);
    if (*us < 0)
        return lw_fail_rec(w, MS_ERR_INVALID, "trace op %" PRIu64 " (%s) has no duration%s",
                           op->id, op->name,
                           w->m ? " (a collective needs one)" : " and no machine is given");
    return MS_OK;
}

/* ---- plan lookups ---- */

ms_status lw_index_plan(lw *w)
{
    const plan_t *p = w->p;
    if (!p) return MS_OK;
    w->plan_idx = u64map_new(p->n_tensors + 16);
    if (!w->plan_idx) return lw_nomem(w);
    for (size_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *pt = &p->tensors[i];
        if (pt->decision == PD_SWAP && !(pt->alpha >= 0 && pt->alpha <= 1))
            return ms_fail(w->err, MS_ERR_INVALID, "plan: tensor %" PRIu64
                           " is swapped with alpha %g, outside [0,1]", pt->id, pt->alpha);
        if ((unsigned)pt->decision >= PD_COUNT)
            return ms_fail(w->err, MS_ERR_INVALID, "plan: tensor %" PRIu64
                           " has an unknown decision", pt->id);
        if (!trace_find_tensor(w->t, pt->id)) {
            w->rep.unknown_ids++;
            if (!w->o.ignore_unknown_ids)
                return ms_fail(w->err, MS_ERR_INVALID, "plan names tensor %" PRIu64
                               ", which the trace never allocates (a plan for another "
                               "trace?)", pt->id);
        }
        if (u64map_put(w->plan_idx, pt->id, i)) return lw_nomem(w);
    }
    for (size_t i = 0; i < p->n_layers; i++)
        if (p->layers[i].pmode != PM_GFGB || p->layers[i].grad_on_host)
            return ms_fail(w->err, MS_ERR_UNSUPPORTED,
                           "plan: layer %" PRId32 ": DHA lowering is not implemented yet "
                           "(parameter mode %s%s)", p->layers[i].layer,
                           plan_pmode_name(p->layers[i].pmode),
                           p->layers[i].grad_on_host ? ", gradients on host" : "");
    return MS_OK;
}

static const char *const LOWER_HOST_ROUNDS[] = { "exact", "layer_pow2", "tensor_pow2",
                                                 "buffer_pow2", NULL };
static const char *const LOWER_TOKENWISE[] = { "chain", "producer", NULL };
static const int LOWER_TOKENWISE_CHAIN[] = { 1, 0 };
static const char *const LOWER_SWAP_ATS[] = { "layer", "save", NULL };
static const char *const LOWER_DROP_ATS[] = { "layer", "use", NULL };
static const char *const LOWER_SWAP_STREAMS[] = { "copy", "compute", NULL };

/* The tensor lowering's knobs, in the order they are checked; the comment above a row says
 * what it does (docs/MEMO.md, docs/POLICIES.md). */
static const knobtab_row lower_rows[] = {
    /* rounding_buffers=1: MEMO's two rounding buffers: the skeletal activations of layer L
     * that the plan keeps or swaps live in one block of the buffer size (the largest
     * layer's skeletal bytes) instead of their own allocations; the block of layer L is
     * made when L first writes into it, after waiting for the offload of layer L-2 (the
     * buffer's previous occupant); it is offloaded whole (alpha-weighted bytes) after L's
     * forward and prefetched whole during layer L+1's backward. A layer's skeletal tensors
     * must be all kept or all swapped. */
    KNOB_BOOL("rounding_buffers", lower_knobs, rounding_buffers, "0",
              "1: MEMO's two rounding buffers hold the swapped layers' activations", "MEMO §4.1"),
    /* memory_plan=1: every re-allocation of a tensor (replay, prefetch) gets a fresh
     * synthetic id, so each incarnation can have its own static offset. */
    KNOB_BOOL("memory_plan", lower_knobs, memory_plan, "0",
              "1: every re-allocation gets a fresh id (one static offset per incarnation)", ""),
    /* host_pow2=1: the older spelling of host_round=layer_pow2 (0: exact); must agree with
     * host_round when both are given. */
    KNOB_BOOL("host_pow2", lower_knobs, host_pow2, "0",
              "the older spelling of host_round=layer_pow2 (0: exact)", ""),
    /* host_round=R: how pinned host buffers are sized (lower_host_round in lower.h): exact
     * (default), layer_pow2, tensor_pow2 or buffer_pow2. A swapped tensor outside a block
     * is one buffer, rounded to a power of two under every pow2 reading. */
    KNOB_ENUM("host_round", lower_knobs, host_round, NULL, LOWER_HOST_ROUNDS,
              "how pinned host buffers are sized (absent: host_pow2's reading, exact)", ""),
    /* host_granule=B: with host_round=exact: pinned host buffers are rounded up to a
     * multiple of B bytes (default 1: exact; an executor's own cudaHostAlloc takes whole
     * host pages, 4096). */
    { "host_granule", KNOBTAB_BYTES, offsetof(lower_knobs, host_granule), "1", 1,
      (double)(UINT64_C(1) << 40), NULL, NULL, "bytes in [1, 2^40]",
      "with host_round=exact: pinned host buffers rounded up to a multiple of this", "", 0, 0 },
    /* idle_buffer_bytes=B: one device block of B bytes (id lower_id_idle_buffer())
     * allocated on the compute stream before the first lowered record and freed after the
     * last: the rounding buffer that MEMO's executor holds while a full-recomputation layer
     * uses the other (docs/MEMO.md, "MEMO's executor"). Default 0: none. */
    { "idle_buffer_bytes", KNOBTAB_BYTES, offsetof(lower_knobs, idle_buffer_bytes), "0", 0,
      (double)LOWER_ID_TRACE_LIMIT, NULL, NULL, "bytes in [0, 2^48]",
      "one device block held throughout: the rounding buffer a full-recomputation layer "
      "leaves idle", "MEMO's executor", 0, 0 },
    /* overlap_comm=0: turns the ".ovl" merge off (see lower_opts.overlap_ovl). */
    KNOB_BOOL("overlap_comm", lower_knobs, overlap_comm, "1", "0: the .ovl merge off", ""),
    /* record_stream=1: the FREE of a block that a collective (op kind comm) read or wrote
     * since its allocation is marked side_use: c10d's NCCL process group records its stream
     * on a collective's tensors (recordStream), so with the host issue model the block goes
     * back only when the GPU has run what was issued before the free (docs/ALLOCATORS.md,
     * "Reorganizations"). Default 0 (TORCH_NCCL_AVOID_RECORD_STREAMS=1, or no side stream). */
    KNOB_BOOL("record_stream", lower_knobs, record_stream, "0",
              "1: a block a collective used is freed once the GPU has run what came before",
              "c10d recordStream"),
    /* stream_pools=1: an ALLOC of a tensor the trace allocates on a side stream (stream k >
     * 0, e.g. TE's cp stream) carries pool k: the caching allocator serves it from that
     * stream's pools, as PyTorch's per-stream pools do. Default 0: every trace tensor in
     * the compute stream's pools. */
    KNOB_BOOL("stream_pools", lower_knobs, stream_pools, "0",
              "1: blocks are kept in per-stream pools", "PyTorch caching allocator"),
    /* tokenwise=chain: token-wise recomputation replays, on the (1 - alpha) tokens, every
     * forward op of the layer that the partially swapped tensors depend on (MEMO §4.1);
     * tokenwise=producer runs only each tensor's producer. Default: chain with rounding
     * buffers, producer otherwise. */
    { "tokenwise", KNOBTAB_ENUM, offsetof(lower_knobs, tokenwise), NULL, 0, 0, LOWER_TOKENWISE,
      LOWER_TOKENWISE_CHAIN, NULL, "token-wise recomputation replays the chain of forward ops "
      "or only each producer (absent: chain with rounding buffers)", "MEMO §4.1", 0, 0 },
    /* swap_at=save: a swapped tensor (alpha 1) goes to the host when it is saved, not at
     * its layer's forward end: copied out after the first forward op that makes or reads
     * it, its device block freed after its last forward use (a tensor made before the
     * forward, a parameter, keeps its block), brought back into a new block just before the
     * first backward op that reads it, and that block and the host copy freed after the
     * last one (autograd's saved-tensor pack and unpack hooks). Default layer: the per-
     * layer offload and prefetch above. Not with rounding_buffers. */
    KNOB_ENUM("swap_at", lower_knobs, swap_at, "layer", LOWER_SWAP_ATS,
              "when a swapped tensor goes to the host: after its layer's forward, prefetched a "
              "layer ahead (layer), or when saved, back when the backward reads it (save)",
              "torch.autograd.graph.save_on_cpu"),
    /* swap_stream=compute: the copies of swap_at=save run on the compute stream (a blocking
     * copy and a copy on the current stream); default copy: on the D2H and H2D streams,
     * ordered with compute by events. */
    KNOB_ENUM("swap_stream", lower_knobs, swap_stream, "copy", LOWER_SWAP_STREAMS,
              "swap_at=save's copies on the copy streams (copy) or the compute stream "
              "(compute: a blocking copy, a copy on the current stream)",
              "torch.autograd.graph.save_on_cpu"),
    KNOB_ENUM("drop_at", lower_knobs, drop_at, "layer", LOWER_DROP_ATS,
              "when a tensor the plan recomputes is freed in the forward: at the end of its "
              "layer's forward (layer) or after the last forward op that uses it (use: a "
              "checkpointed forward saves nothing, so each tensor dies with its last use)",
              "torch.utils.checkpoint (use_reentrant=False); Megatron-LM CheckpointFunction"),
};
const knobtab lower_knob_table = KNOBTAB("tensor lowering", lower_rows, KNOBTAB_MSG_PLAN,
                                         lower_knobs, given);

/* host_round=exact|layer_pow2|tensor_pow2|buffer_pow2 (default exact); the older
 * host_pow2=1 means layer_pow2 and must not contradict host_round. */
static ms_status read_host_round(lw *w, const lower_knobs *k)
{
    w->host_round = k->host_pow2 ? LOWER_HOST_LAYER_POW2 : LOWER_HOST_EXACT;
    if (!knobtab_given(&lower_knob_table, k, &k->host_round)) return MS_OK;
    if (knobtab_given(&lower_knob_table, k, &k->host_pow2) &&
        (lower_host_round)k->host_round != w->host_round)
        return ms_fail(w->err, MS_ERR_INVALID, "plan knobs host_round=%s and host_pow2=%d "
                       "disagree (host_pow2=1 is layer_pow2, 0 exact)",
                       lower_host_round_name((lower_host_round)k->host_round), k->host_pow2);
    w->host_round = (lower_host_round)k->host_round;
    return MS_OK;
}

ms_status lw_read_knobs(lw *w)
{
    lower_knobs k;
    ms_status st = knob_from_plan(&lower_knob_table, w->p, &k, w->err);
    if (st == MS_OK) st = read_host_round(w, &k);
    if (st != MS_OK) return st;
    w->rb = k.rounding_buffers;
    w->rename = k.memory_plan;
    w->host_granule = k.host_granule;
    w->idle_bytes = k.idle_buffer_bytes;
    w->overlap = w->o.overlap_ovl && k.overlap_comm;
    w->rec_stream = k.record_stream;
    w->pools = k.stream_pools;
    if (w->rec_stream && !(w->comm_use = u64map_new(256))) return lw_nomem(w);
    w->chain = knobtab_given(&lower_knob_table, &k, &k.tokenwise) ? k.tokenwise : w->rb;
    w->sv = k.swap_at == LOWER_SWAP_SAVE;
    w->sv_compute = k.swap_stream == LOWER_SWAP_COMPUTE;
    w->du = k.drop_at == LOWER_DROP_USE;
    if (w->du && w->rb)
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "plan knobs drop_at=use and "
                       "rounding_buffers=1 do not go together (a layer's tensors live in one "
                       "rounding-buffer block, freed with the block)");
    if (w->sv && w->rename)
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "plan knobs swap_at=save and memory_plan=1 "
                       "do not go together (the saves' copies have ids of their own)");
    if (w->sv && w->rb)
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "plan knobs swap_at=save and "
                       "rounding_buffers=1 do not go together (a saved tensor has no layer "
                       "block)");
    if (w->rb && (w->o.iter_first != INT64_MIN || w->o.iter_count > 0))
        return ms_fail(w->err, MS_ERR_UNSUPPORTED, "rounding buffers: lowering a selection of "
                       "iterations is not supported (lower them all)");
    return MS_OK;
}

/* The decision for a tensor: its plan entry, else the plan's default for skeletal layer
 * activations (alpha 0, as plan.h says), else keep. */
void lw_decide(const lw *w, const trace_tensor *x, plan_decision *d, double *alpha)
{
    uint64_t i;
    *d = PD_KEEP;
    *alpha = 0;
    if (!w->p) return;
    if (u64map_get(w->plan_idx, x->id, &i)) {
        *d = w->p->tensors[i].decision;
        *alpha = w->p->tensors[i].alpha;
    } else if (x->cls == TC_ACT_SKEL && x->layer >= 0) {
        *d = w->p->default_decision;
    }
}

/* ---- end of a layer's forward: drop and offload ---- */

static ms_status classify(lw *w, lw_layer *L, int32_t layer)
{
    for (size_t k = 0; k < L->cand.n; k++) {
        lw_tensor *x = &w->ts[L->cand.v[k]];
        if (x->state == TS_DROPPED) continue; /* drop_at=use freed it at its last use */
        if (x->state != TS_LIVE) {
            w->rep.ignored++;
            continue;
        }
        if (x->dec == PD_RECOMPUTE && x->alloc_rec < L->fwd_begin) {
            char b[80];
            snprintf(b, sizeof b, "%d's forward", (int)layer);
            return lw_fail_rec(w, MS_ERR_INVALID,
                               "tensor %" PRIu64 " (%s) is planned for recomputation but is "
                               "made before layer %s (a layer input? keep or swap it)",
                               x->meta->id, x->meta->name, b);
        }
        ms_status st = lw_idx_push(x->dec == PD_RECOMPUTE ? &L->drop : &L->swap, L->cand.v[k]);
        if (st != MS_OK) return lw_nomem(w);
    }
    L->cand.n = 0;
    return MS_OK;
}

static ms_status end_forward(lw *w, int32_t layer)
{
    lw_layer *L = &w->layers[layer];
    L->fwd_state = 2;
    L->fwd_end = w->rec;
    ms_status st = classify(w, L, layer);
    if (st == MS_OK && w->rb) st = lw_rb_offload(w, layer);
    uint32_t e1 = 0;
    if (st == MS_OK && L->swap.n) {
        e1 = sbuild_new_event(w->b);
        st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e1);
    }
    for (size_t k = 0; st == MS_OK && k < L->drop.n; k++) {
        lw_tensor *x = &w->ts[L->drop.v[k]];
        if (x->state != TS_LIVE) continue; /* freed at its last use (drop_at=use) */
        /* PyTorch's checkpoint drops its saved reference, but autocast's cast cache keeps a
           weight cast until the autocast region (the forward) ends */
        if (w->autocast_cache && x->rbg < 0 && ms_ends_with(x->meta->name, ".wcast"))
            st = lw_idx_push(&w->cache_held, L->drop.v[k]) == MS_OK ? MS_OK : lw_nomem(w);
        else
            st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
        x->state = TS_DROPPED;
        w->rep.dropped++;
    }
    if (st != MS_OK || !L->swap.n) return st;
    st = sbuild_event(w->b, SA_WAIT, SS_D2H, e1);
    for (size_t k = 0; st == MS_OK && k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        /* with memory_plan the host copy carries the id the prefetched block will have, so
           the H2D copy finds it */
        x->hid = w->rename ? lower_id_incarnation(x->meta->id, x->incarn + 1u) : x->sid;
        if (x->swap_bytes) {
            st = sbuild_tensor(w->b, SA_HOST_ALLOC, SS_D2H, x->hid,
                               lw_host_bytes(w, x->swap_bytes));
            if (st == MS_OK) lw_src_bytes(w, LSRC_HOST, x->meta, x->alloc_rec, x->alpha);
            if (st == MS_OK) st = sbuild_tensor(w->b, SA_COPY_D2H, SS_D2H, x->sid, x->swap_bytes);
            if (st == MS_OK) lw_src_bytes(w, LSRC_TENSOR, x->meta, x->alloc_rec, x->alpha);
        }
        if (st == MS_OK) st = sbuild_tensor(w->b, SA_FREE, SS_D2H, x->sid, 0);
        x->state = TS_OFFLOADED;
        w->rep.swapped++;
        w->rep.d2h_bytes += x->swap_bytes;
    }
    if (st != MS_OK) return st;
    L->e2 = sbuild_new_event(w->b);
    return sbuild_event(w->b, SA_RECORD, SS_D2H, L->e2);
}

/* ---- start of a layer's backward: prefetch, wait, recompute ---- */

static ms_status issue_prefetch(lw *w, int32_t layer)
{
    if (w->rb && layer >= 0) {
        ms_status st = lw_rb_prefetch(w, layer);
        if (st != MS_OK) return st;
    }
    if (layer < 0 || (size_t)layer >= w->n_layers) return MS_OK;
    lw_layer *L = &w->layers[layer];
    if (L->prefetched || !L->swap.n) return MS_OK;
    L->prefetched = 1;
    ms_status st = MS_OK;
    sched_stream as = w->o.prefetch_alloc_on_compute ? SS_COMPUTE : SS_H2D;
    for (size_t k = 0; st == MS_OK && as == SS_COMPUTE && k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        if (x->state == TS_OFFLOADED) {
            x->sid = lw_next_sid(w, x);
            st = lw_put_alloc(w, SS_COMPUTE, x, x->meta->bytes);
            if (st == MS_OK) lw_src_bytes(w, LSRC_TENSOR, x->meta, x->alloc_rec, 1.0);
        }
    }
    uint32_t e3 = sbuild_new_event(w->b);
    L->e4 = sbuild_new_event(w->b);
    if (st == MS_OK) st = sbuild_event(w->b, SA_RECORD, SS_COMPUTE, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, e3);
    if (st == MS_OK) st = sbuild_event(w->b, SA_WAIT, SS_H2D, L->e2);
    for (size_t k = 0; st == MS_OK && k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        if (x->state != TS_OFFLOADED) continue; /* freed by the trace while on the host */
        if (as == SS_H2D) {
            x->sid = lw_next_sid(w, x);
            st = lw_put_alloc(w, SS_H2D, x, x->meta->bytes);
            if (st == MS_OK) lw_src_bytes(w, LSRC_TENSOR, x->meta, x->alloc_rec, 1.0);
        }
        if (st == MS_OK && x->swap_bytes) {
            st = sbuild_tensor(w->b, SA_COPY_H2D, SS_H2D, x->sid, x->swap_bytes);
            if (st == MS_OK) lw_src_bytes(w, LSRC_TENSOR, x->meta, x->alloc_rec, x->alpha);
            if (st == MS_OK) st = sbuild_tensor(w->b, SA_HOST_FREE, SS_H2D, x->hid, 0);
        }
        x->state = TS_PREFETCHED;
        x->ev = L->e4;
        x->ready = 0;
        w->rep.prefetched++;
        w->rep.h2d_bytes += x->swap_bytes;
    }
    return st == MS_OK ? sbuild_event(w->b, SA_RECORD, SS_H2D, L->e4) : st;
}

/* Compute waits for layer L's prefetch; its tensors become usable. */
static ms_status wait_layer(lw *w, lw_layer *L)
{
    L->waited = 1;
    for (size_t k = 0; k < L->swap.n; k++) {
        lw_tensor *x = &w->ts[L->swap.v[k]];
        if (x->state == TS_PREFETCHED && x->ev == L->e4) x->ready = 1;
    }
    return sbuild_event(w->b, SA_WAIT, SS_COMPUTE, L->e4);
}

/* The compute stream must not touch a prefetched block before its copy is done. */
static ms_status ensure_ready(lw *w, lw_tensor *x)
{
    if (x->state != TS_PREFETCHED || x->ready) return MS_OK;
    lw_layer *L = &w->layers[x->meta->layer];
    if (L->prefetched && L->e4 == x->ev) return wait_layer(w, L);
    x->ready = 1; /* prefetched in an earlier pass */
    return sbuild_event(w->b, SA_WAIT, SS_COMPUTE, x->ev);
}

/* The next layer whose backward starts after record i within this backward phase, or -1. */
static int32_t next_bwd_layer(lw *w, size_t i)
{
    for (size_t j = i + 1; j < w->nrecs; j++) {
        const trace_rec *r = lw_rec(w, j);
        if (r->type != TR_MARK) continue;
        if (r->u.mark.kind != TM_LAYER) return -1;
        if (r->u.mark.value >= 0) return (int32_t)r->u.mark.value;
    }
    return -1;
}

static ms_status release(lw *w, lw_tensor *x, tstate was);

/* At layer L's backward mark: release the prefetch of the layer whose backward comes next,
 * then make L's own swapped tensors ready and rebuild its dropped ones. */
static ms_status begin_backward(lw *w, int32_t layer)
{
    ms_status st = issue_prefetch(w, next_bwd_layer(w, w->rec));
    if (st != MS_OK || (size_t)layer >= w->n_layers) return st;
    lw_layer *L = &w->layers[layer];
    if (w->rb && (st = lw_rb_backward(w, L, layer)) != MS_OK) return st;
    if (L->swap.n) {
        st = issue_prefetch(w, layer); /* no-op unless the trace's order was unusual */
        if (st == MS_OK && L->prefetched && !L->waited) st = wait_layer(w, L);
        if (st == MS_OK) st = lw_tokenwise_recompute(w, L, layer);
    }
    if (st == MS_OK) st = lw_replay_layer(w, L, layer);
    for (size_t k = 0; st == MS_OK && k < L->held.n; k++) {
        lw_tensor *x = &w->ts[L->held.v[k]];
        st = release(w, x, (tstate)x->state);
    }
    L->held.n = 0;
    if (L->held_end.n) w->held_end_layer = layer;
    return st;
}

/* At the next mark after a layer's backward: the inputs its checkpoint held go (PyTorch frees
 * the rerun function's arguments once the layer's saved-tensor holders are gone: after the
 * layer's last backward op, as the recorded Phi-3 trace shows). */
static ms_status end_backward(lw *w)
{
    ms_status st = MS_OK;
    if (w->held_end_layer < 0) return MS_OK;
    lw_layer *L = &w->layers[w->held_end_layer];
    w->held_end_layer = -1;
    for (size_t k = 0; st == MS_OK && k < L->held_end.n; k++) {
        lw_tensor *x = &w->ts[L->held_end.v[k]];
        st = release(w, x, (tstate)x->state);
    }
    L->held_end.n = 0;
    return st;
}

/* At "mark phase bwd": the weight casts autocast's cache held are freed (the region has
 * ended); every layer with decisions must have had a forward section. */
static ms_status begin_backward_phase(lw *w)
{
    for (size_t k = 0; k < w->cache_held.n; k++) {
        lw_tensor *x = &w->ts[w->cache_held.v[k]];
        if (x->state != TS_DROPPED) continue;
        ms_status st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
        if (st != MS_OK) return st;
    }
    w->cache_held.n = 0;
    ms_status cst = w->sv ? lw_sv_cache_release(w) : MS_OK;
    if (cst != MS_OK) return cst;
    for (size_t l = 0; l < w->n_layers; l++) {
        lw_layer *L = &w->layers[l];
        if (L->fwd_state != 0 || !L->cand.n) continue;
        lw_tensor *x = &w->ts[L->cand.v[0]];
        char b[160];
        snprintf(b, sizeof b, " but layer %zu has no forward section (\"mark layer %zu\" in "
                 "phase fwd) in this pass", l, l);
        return lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is planned for swap or "
                           "recomputation%s", x->meta->id, x->meta->name, b);
    }
    return issue_prefetch(w, next_bwd_layer(w, w->rec));
}

/* ---- the trace's records ---- */

static ms_status do_mark(lw *w, const trace_mark *mk)
{
    ms_status st = end_backward(w);
    if (st != MS_OK) return st;
    if (w->fwd_layer >= 0) {
        int32_t l = w->fwd_layer;
        w->fwd_layer = -1;
        if ((st = end_forward(w, l)) != MS_OK) return st;
    }
    if (mk->kind == TM_ITER) {
        w->phase = TP_NONE;
        w->layer = -1;
    } else if (mk->kind == TM_PHASE) {
        w->phase = (trace_phase)mk->value;
        w->layer = -1;
        if (w->phase == TP_FWD) {
            if (w->seen_fwd) {
                reset_layers(w);
                w->pass++;
            }
            w->seen_fwd = 1;
        }
    } else {
        w->layer = (int32_t)mk->value;
    }
    sbuild_at(w->b, w->layer, w->phase);
    if (w->o.emit_marks) {
        sched_action a = sbuild_act(w->b, SA_MARK, SS_COMPUTE);
        a.mark = mk->kind;
        a.mark_value = mk->value;
        if ((st = sbuild_put(w->b, &a)) != MS_OK) return st;
    }
    if (mk->kind == TM_PHASE && w->phase == TP_BWD) return begin_backward_phase(w);
    if (mk->kind != TM_LAYER || mk->value < 0) return MS_OK;
    if (w->phase == TP_BWD) return begin_backward(w, w->layer);
    if (w->phase != TP_FWD) return MS_OK;
    lw_layer *L = get_layer(w, w->layer);
    if (!L && w->layer >= w->max_layer) return lw_layer_range(w, "mark layer", 0, NULL, w->layer);
    if (!L) return lw_nomem(w);
    if (L->fwd_state != 0)
        return lw_fail_rec(w, MS_ERR_UNSUPPORTED, "layer %" PRId64 " has a second forward "
                           "section in one pass", mk->value);
    L->fwd_state = 1;
    L->fwd_begin = w->rec + 1;
    w->fwd_layer = w->layer;
    return MS_OK;
}

static ms_status add_tensor(lw *w, const trace_tensor *x, int emitted)
{
    int added; /* one probe finds a previous incarnation and makes the new entry */
    uint64_t *slot = u64map_slot(w->tidx, x->id, &added);
    if (!slot) return lw_nomem(w);
    if (!added && w->ts[*slot].state != TS_FREED)
        return lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " is allocated again while "
                           "live", x->id);
    if (ms_grow((void **)&w->ts, &w->cap_ts, w->n_ts + 1, sizeof *w->ts) != MS_OK)
        return lw_nomem(w);
    lw_tensor *n = &w->ts[w->n_ts];
    memset(n, 0, sizeof *n);
    n->meta = x;
    n->alloc_rec = w->rec;
    n->state = TS_LIVE;
    n->emitted = (uint8_t)emitted;
    n->sid = n->hid = x->id;
    n->rbg = -1;
    *slot = w->n_ts; /* the map is untouched since u64map_slot */
    w->n_ts++;
    return MS_OK;
}

static ms_status do_alloc(lw *w, const trace_tensor *x)
{
    if ((w->rename || w->rb) && x->id >= LOWER_ID_TRACE_LIMIT)
        return lw_fail_rec(w, MS_ERR_LIMIT, "tensor id %" PRIu64 " is too large for the ids "
                           "memory_plan / rounding_buffers make (limit 2^48)", x->id);
    ms_status st = add_tensor(w, x, 1);
    if (st != MS_OK) return st;
    lw_tensor *n = &w->ts[w->n_ts - 1];
    lw_decide(w, x, &n->dec, &n->alpha);
    uint64_t g;
    if (w->rb && u64map_get(w->rb_rec, w->rec, &g)) return lw_rb_alloc(w, n, g);
    if (n->dec == PD_DHA)
        return lw_fail_rec(w, MS_ERR_UNSUPPORTED, "tensor %" PRIu64 " (%s): DHA lowering is not "
                           "implemented yet", x->id, x->name);
    if (n->dec == PD_SWAP) n->swap_bytes = lower_scaled_bytes(x->bytes, n->alpha);
    /* the block's kind from the tensor's class, as SB_TRACE would give it, so that an
     * executor need not look the tensor up in the trace at every ALLOC */
    if ((st = lw_put_alloc(w, SS_COMPUTE, n, x->bytes)) != MS_OK) return st;
    lw_src_bytes(w, LSRC_TENSOR, x, n->alloc_rec, 1.0);
    if (n->dec == PD_KEEP || (w->sv && n->dec == PD_SWAP)) return MS_OK; /* lw_sv_prescan's */
    if (x->layer < 0)
        return lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " (%s) is planned for %s but "
                           "belongs to no transformer layer", x->id, x->name,
                           plan_decision_name(n->dec));
    lw_layer *L = get_layer(w, x->layer);
    if (!L && x->layer >= w->max_layer)
        return lw_layer_range(w, "tensor", x->id, x->name, x->layer);
    if (!L) return lw_nomem(w);
    if (L->fwd_state == 2) {
        w->rep.ignored++; /* made after its layer's forward: nothing to save */
        return MS_OK;
    }
    return lw_idx_push(&L->cand, w->n_ts - 1) == MS_OK ? MS_OK : lw_nomem(w);
}

/* Whether replaying layer L's forward (in its backward) may start from its inputs: one of
 * `l`'s tensors is dropped, or (token-wise chains) misses the tokens of a partial swap. */
static int replays_from_inputs(const lw *w, const idx_list *l)
{
    for (size_t k = 0; k < l->n; k++) {
        const lw_tensor *y = &w->ts[l->v[k]];
        if (y->dec == PD_RECOMPUTE) return 1;
        if (w->chain && y->dec == PD_SWAP && y->alpha < 1.0) return 1;
    }
    return 0;
}

/* The layer of x, freed by the trace in the forward phase, that could still need x as the
 * start of its replay: x's layer while its forward is open, or once closed when x comes from
 * before the section (an argument of the layer's call); else NULL. */
static lw_layer *input_layer(lw *w, const lw_tensor *x)
{
    int32_t l = x->meta->layer;
    if (l < 0 || w->phase != TP_FWD || (size_t)l >= w->n_layers) return NULL;
    lw_layer *L = &w->layers[l];
    if (L->fwd_state == 1) return L;
    return L->fwd_state == 2 && x->alloc_rec < L->fwd_begin ? L : NULL;
}

/* Whether layer L's backward replays its forward: its candidates tell while the forward is
 * open, its drops and swaps once it is closed. */
static int layer_replays(const lw *w, const lw_layer *L)
{
    if (L->fwd_state == 1) return replays_from_inputs(w, &L->cand);
    return replays_from_inputs(w, &L->drop) || replays_from_inputs(w, &L->swap);
}

/* A kept or swapped skeletal tensor of layer l (its input) that the trace frees in the
 * forward phase, while the plan recomputes tensors of l (or tokens of them): the
 * recomputation in l's backward starts from it, so it is held until then, as PyTorch's
 * non-reentrant checkpoint holds the arguments of the function it reruns
 * (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator: recompute_fn keeps
 * args until the layer's saved-tensor holders are gone). A Hugging Face layer's input dies
 * at its first residual add (the generator's hf traces), or, when no op saved it, once the
 * layer's call returns (bf16 captures: nn.Module._call_impl holds its args until then). A
 * tensor swapped whole is held the same way and goes to the host with the others (or, freed
 * once its copy is under way, keeps its host copy for the prefetch). */
static lw_layer *hold_layer(lw *w, const lw_tensor *x)
{
    if ((x->dec != PD_KEEP && x->dec != PD_SWAP) || x->meta->cls != TC_ACT_SKEL) return NULL;
    lw_layer *L = input_layer(w, x);
    return L && layer_replays(w, L) ? L : NULL;
}

/* The same for a rounding-buffer member (MEMO's swapped layer input), when its layer
 * recomputes or its block has partially swapped members, whose missing tokens the backward
 * recomputes from it. It stays in its block (offloaded and prefetched with it) and leaves it
 * at the layer's backward, after the recomputation. */
static lw_layer *rb_hold_layer(lw *w, const lw_tensor *x)
{
    const rb_group *G = &w->groups[x->rbg];
    lw_layer *L = input_layer(w, x);
    if (!L) return NULL;
    return (G->n_swap && G->min_alpha < 1.0) || layer_replays(w, L) ? L : NULL;
}

static ms_status do_free(lw *w, uint64_t id)
{
    lw_tensor *x = lw_find_tensor(w, id);
    if (!x || x->state == TS_FREED)
        return lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " is freed but is not live",
                           id);
    tstate was = (tstate)x->state;
    lw_layer *H = was == TS_INBUF ? rb_hold_layer(w, x)
                  : was == TS_LIVE || was == TS_OFFLOADED ? hold_layer(w, x) : NULL;
    if (H)
        return lw_idx_push(was == TS_INBUF ? &H->held : &H->held_end, (size_t)(x - w->ts)) ==
               MS_OK ? MS_OK : lw_nomem(w);
    return release(w, x, was);
}

/* What the trace's free of x does when x is in state `was` (do_free; a held tensor at its
 * layer's backward). */
static ms_status release(lw *w, lw_tensor *x, tstate was)
{
    if (was == TS_INBUF) return lw_rb_free_member(w, x);
    x->state = TS_FREED;
    switch (was) {
    case TS_DROPPED:
        return MS_OK; /* never needed again: its block went at the forward's end */
    case TS_OFFLOADED:
        /* never needed again: drop the host copy after the offload (D2H stream order) */
        return x->swap_bytes ? lw_put_tensor(w, SA_HOST_FREE, w->sv_compute ? SS_COMPUTE : SS_D2H,
                                             x->hid, 0) : MS_OK;
    case TS_PREFETCHED: {
        x->state = TS_PREFETCHED;
        ms_status st = ensure_ready(w, x);
        x->state = TS_FREED;
        return st == MS_OK ? sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0) : st;
    }
    default:
        return sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
    }
}

static ms_status op_uses(lw *w, const trace_op *op, uint64_t id)
{
    lw_tensor *x = lw_find_tensor(w, id);
    if (!x) return MS_OK;
    if (x->state == TS_INBUF) {
        rb_group *G = &w->groups[x->rbg];
        if (G->state == RB_LIVE) return MS_OK;
        if (G->state == RB_PREFETCHED) return lw_rb_ready(w, G);
        char b[200];
        snprintf(b, sizeof b, ", whose rounding buffer is %s (op %" PRIu64 " %s)",
                 G->state == RB_OFFLOADED ? "on the host" : "released", op->id, op->name);
        return lw_fail_rec(w, MS_ERR_INVALID, "an op uses tensor %" PRIu64 " (%s)%s", id,
                           x->meta->name, b);
    }
    if (x->state == TS_OFFLOADED && x->sv_back) return MS_OK; /* its save's copy is back */
    if (x->state == TS_DROPPED || x->state == TS_OFFLOADED) {
        char b[200];
        snprintf(b, sizeof b, ", which the plan %s after layer %d's forward until its backward "
                 "(op %" PRIu64 " %s)", x->state == TS_DROPPED ? "drops" : "offloads",
                 (int)x->meta->layer, op->id, op->name);
        return lw_fail_rec(w, MS_ERR_INVALID, "an op uses tensor %" PRIu64 " (%s)%s", id,
                           x->meta->name, b);
    }
    return ensure_ready(w, x);
}

static ms_status do_op(lw *w, const trace_op *op)
{
    ms_status st = MS_OK;
    for (uint32_t k = 0; st == MS_OK && k < op->n_in; k++) st = op_uses(w, op, op->in[k]);
    for (uint32_t k = 0; st == MS_OK && k < op->n_out; k++) st = op_uses(w, op, op->out[k]);
    double us = 0;
    if (st == MS_OK) st = lw_op_us(w, op, &us);
    if (st == MS_OK) st = lw_note_comm(w, op);
    if (st != MS_OK) return st;
    if (lw_ovl_merges(w, w->rec, w->nrecs, NULL, 0)) {
        if (us > w->ovl_us) w->ovl_us = us;
        w->ovl_pending = 1;
        w->rep.overlapped++;
        if (w->src && lw_idx_push(&w->ovl_src, w->rec) != MS_OK) w->src->ok = 0;
        return MS_OK;
    }
    uint8_t merged;
    us = lw_ovl_absorb(w, op, us, &w->ovl_us, &w->ovl_pending, &merged);
    sched_action *a = sbuild_begin(w->b, SA_COMPUTE, SS_COMPUTE);
    if (!a) return MS_ERR_NOMEM;
    a->op = (int64_t)op->id;
    a->dur_us = us;
    a->ovl = merged;
    a->layer = op->layer;
    a->phase = op->phase;
    sbuild_end(w->b, a);
    if (w->src) {
        lw_src_ops(w, merged ? &w->ovl_src : NULL, w->rec, 1.0);
        if (merged) w->ovl_src.n = 0;
    }
    return MS_OK;
}

/* ---- iteration selection ---- */

/* Records of skipped iterations only move tensors in and out of existence; entering the first
 * lowered iteration emits what that changed, so the schedule starts from the right state. */
static ms_status skip_record(lw *w, const trace_rec *r)
{
    if (r->type == TR_ALLOC) return add_tensor(w, &r->u.alloc, 0);
    if (r->type != TR_FREE) return MS_OK;
    lw_tensor *x = lw_find_tensor(w, r->u.free_id);
    if (!x || x->state == TS_FREED)
        return lw_fail_rec(w, MS_ERR_INVALID, "tensor %" PRIu64 " is freed but is not live",
                           r->u.free_id);
    x->state = TS_FREED;
    if (x->emitted) x->skip_freed = 1;
    return MS_OK;
}

static ms_status sync_carried(lw *w)
{
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < w->n_ts; i++) {
        lw_tensor *x = &w->ts[i];
        if (!x->skip_freed) continue;
        x->skip_freed = 0;
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, x->sid, 0);
    }
    for (size_t i = 0; st == MS_OK && i < w->n_ts; i++) {
        lw_tensor *x = &w->ts[i];
        if (x->state != TS_LIVE || x->emitted) continue;
        x->emitted = 1;
        st = lw_put_alloc(w, SS_COMPUTE, x, x->meta->bytes);
        if (st == MS_OK) lw_src_bytes(w, LSRC_TENSOR, x->meta, x->alloc_rec, 1.0);
    }
    return st;
}

static int iter_included(const lw *w, int64_t v)
{
    if (v < w->o.iter_first) return 0;
    /* unsigned: v - iter_first cannot overflow that way (v >= iter_first) */
    return w->o.iter_count <= 0 ||
           (uint64_t)v - (uint64_t)w->o.iter_first < (uint64_t)w->o.iter_count;
}

static ms_status walk(lw *w)
{
    int included = 1, entered = 0;
    ms_status st = MS_OK;
    /* MEMO allocates its rounding buffers before the training iterations begin (§4.1). */
    if (w->idle_bytes) {
        st = lw_put_block(w, SS_COMPUTE, lower_id_idle_buffer(), w->idle_bytes, SB_IDLE);
        if (st == MS_OK) lw_src_bytes(w, LSRC_CONST, NULL, 0, 1.0); /* a plan knob's */
    }
    for (w->rec = 0; st == MS_OK && w->rec < w->nrecs; w->rec++) {
        const trace_rec *r = lw_rec(w, w->rec);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) {
            int inc = iter_included(w, r->u.mark.value);
            if (!inc && entered) break; /* past the last lowered iteration */
            if (inc && !included && (st = sync_carried(w)) != MS_OK) return st;
            included = inc;
            entered |= inc;
        }
        if (!included) {
            st = skip_record(w, r);
            continue;
        }
        switch (r->type) {
        case TR_MARK: st = do_mark(w, &r->u.mark); break;
        case TR_ALLOC: st = do_alloc(w, &r->u.alloc); break;
        case TR_FREE: st = do_free(w, r->u.free_id); break;
        case TR_OP:
            st = w->sv ? lw_sv_events(w, 1) : MS_OK;
            if (st == MS_OK) st = do_op(w, &r->u.op);
            if (st == MS_OK && w->sv) st = lw_sv_events(w, 0);
            if (st == MS_OK && w->du) st = lw_du_events(w);
            break;
        }
    }
    if (st == MS_OK && w->fwd_layer >= 0) {
        int32_t l = w->fwd_layer;
        w->fwd_layer = -1;
        st = end_forward(w, l);
    }
    if (st == MS_OK && w->idle_bytes)
        st = sbuild_tensor(w->b, SA_FREE, SS_COMPUTE, lower_id_idle_buffer(), 0);
    w->rep.idle_bytes = w->idle_bytes;
    return st;
}

/* ---- the row "tensor" ---- */

void lw_free(lw *w)
{
    u64map_free(w->plan_idx);
    u64map_free(w->tidx);
    free(w->ts);
    free(w->due);
    for (size_t i = 0; i < w->n_layers; i++) {
        free(w->layers[i].cand.v);
        free(w->layers[i].drop.v);
        free(w->layers[i].swap.v);
        free(w->layers[i].held.v);
        free(w->layers[i].held_end.v);
    }
    free(w->layers);
    free(w->cache_held.v);
    free(w->ovl_src.v);
    free(w->sv_cache_held.v);
    free(w->svi);
    free(w->sve);
    free(w->groups);
    u64map_free(w->rb_rec);
    u64map_free(w->rb_key);
    u64map_free(w->comm_use);
}

/* The per-tensor lowering (the row "tensor"). */
static ms_status lower_tensor(const trace_t *t, const plan_t *p, const machine_t *m,
                              const lower_opts *o, schedule_t **out, ms_error *err)
{
    *out = NULL;
    lw w;
    memset(&w, 0, sizeof w);
    w.t = t;
    if (t) w.recs = trace_records(t, &w.nrecs);
    w.p = p;
    w.m = m;
    w.err = err;
    w.max_layer = t ? lw_layer_bound(t) : LOWER_MAX_LAYER;
    w.autocast_cache = trace_meta_u64(t, "autocast_cache", 0) == 1;
    if (o) w.o = *o;
    else lower_opts_default(&w.o);
    w.src = w.o.srcs;
    if (w.src) w.src->ok = 1;
    roof_params_default(&w.roof);
    w.phase = TP_NONE;
    w.layer = -1;
    w.fwd_layer = -1;
    w.held_end_layer = -1;
    w.s = sched_new();
    w.b = w.s ? sbuild_new(w.s, err, "out of memory while lowering") : NULL;
    w.tidx = u64map_new(trace_count(t) / 2 + 16);
    ms_status st = (w.b && w.tidx) ? MS_OK : lw_nomem(&w);
    /* the schedule has the trace's records and what the plan adds (frees, copies, replays):
       room for that from the start rather than doubling through it */
    if (st == MS_OK && sched_reserve(w.s, trace_count(t) + trace_count(t) / 2 + 64) != MS_OK)
        st = lw_nomem(&w);
    /* a tensor per alloc record: at most a third of the records in the generators' traces */
    if (st == MS_OK && ms_grow((void **)&w.ts, &w.cap_ts, trace_count(t) / 3 + 16,
                               sizeof *w.ts) != MS_OK)
        st = lw_nomem(&w);
    if (st == MS_OK) st = lw_index_plan(&w);
    if (st == MS_OK) st = lw_read_knobs(&w);
    /* the framework streams' hook, only where their knobs ask for it: it sees every action */
    if (st == MS_OK && (w.rec_stream || w.pools)) sbuild_set_hook(w.b, stream_hook, &w);
    if (st == MS_OK && w.rb) st = lw_rb_prescan(&w);
    if (st == MS_OK && w.sv) st = lw_sv_prescan(&w);
    if (st == MS_OK && w.du) st = lw_du_prescan(&w);
    if (st == MS_OK) st = walk(&w);
    if (st == MS_OK) src_finish(&w);
    else if (w.src) w.src->ok = 0;
    if (st == MS_OK) {
        for (size_t i = 0; i < w.n_layers; i++) w.rep.ignored += w.layers[i].cand.n;
        w.rep.actions = sched_count(w.s);
        w.rep.events = sched_event_count(w.s);
        if (w.o.report) *w.o.report = w.rep;
        *out = w.s;
    } else {
        sched_free(w.s);
    }
    sbuild_free(w.b);
    lw_free(&w);
    return st;
}

const lower_backend lower_backend_tensor = {
    "tensor",
    "per-tensor keep / swap / recompute on the trace's own program, MEMO's rounding buffers, "
    "fresh ids for a static memory plan",
    lower_tensor,
    1,
};


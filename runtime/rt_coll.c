/* rt_coll.c — a trace's collectives as NCCL calls: the rules that tell each comm op's
 * collective and group, and the executor hooks that issue them (see rt_coll.h). Used by
 * runtime/rt_node.c and the tests. */
#include "runtime/rt_coll.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

/* ---- the rules ---- */

#define K(x) (1u << (x))

enum { M_END = 0, M_START, M_HAS };          /* where the pattern must stand in the name */
enum { W_ALWAYS = 0, W_ZERO3 };              /* when the rule applies */
enum { G_DATA = -2, G_NONE = -1 };           /* G_DATA: DP, or DP x CP for Megatron */

typedef struct coll_rule {
    const char *pat;
    int mode, when, group;
    unsigned kinds;                          /* the collectives its bytes may show */
} coll_rule;

/* First match wins, so the specific names come before the TP suffixes. */
static const coll_rule rules[] = {
    {".d2h", M_END, W_ALWAYS, G_NONE, 0},   /* ZeRO-Offload's host-link copies */
    {".h2d", M_END, W_ALWAYS, G_NONE, 0},
    {".ovl", M_END, W_ALWAYS, RG_CP, K(RC_RING)},
    {".a2a", M_HAS, W_ALWAYS, RG_EP, K(RC_ALL_TO_ALL)},
    {"expert_grad.", M_START, W_ALWAYS, RG_EDP, K(RC_REDUCE_SCATTER) | K(RC_ALL_REDUCE)},
    {"expert_param.", M_START, W_ALWAYS, RG_EDP, K(RC_ALL_GATHER)},
    {"dp_rs", M_END, W_ALWAYS, G_DATA, K(RC_REDUCE_SCATTER)},
    {"dp_ar", M_END, W_ALWAYS, G_DATA, K(RC_ALL_REDUCE)},
    {"dp_ag", M_END, W_ALWAYS, G_DATA, K(RC_ALL_GATHER)},
    {"params.ag", M_HAS, W_ZERO3, RG_DP, K(RC_ALL_GATHER)},
    {"grad.rs", M_END, W_ZERO3, RG_DP, K(RC_REDUCE_SCATTER)},
    {"loss.ar", M_END, W_ALWAYS, RG_TP, K(RC_ALL_REDUCE)},
    {".ag", M_END, W_ALWAYS, RG_TP, K(RC_ALL_GATHER) | K(RC_REDUCE_SCATTER)},
    {".ag.bwd", M_END, W_ALWAYS, RG_TP, K(RC_ALL_GATHER) | K(RC_REDUCE_SCATTER)},
    {".rs", M_END, W_ALWAYS, RG_TP, K(RC_ALL_GATHER) | K(RC_REDUCE_SCATTER)},
    {".rs.bwd", M_END, W_ALWAYS, RG_TP, K(RC_ALL_GATHER) | K(RC_REDUCE_SCATTER)},
};

static const char *const kind_names[RC_COUNT] = {"none", "all-gather", "reduce-scatter",
                                                 "all-reduce", "ring", "all-to-all"};

const char *rt_coll_kind_name(rt_coll_kind k)
{
    return (unsigned)k < RC_COUNT ? kind_names[k] : "?";
}

/* The op name without its layer ("L3.ln1.ag" -> "ln1.ag"). */
static const char *base_name(const char *n)
{
    if (n[0] == 'L') {
        const char *p = n + 1;
        while (*p >= '0' && *p <= '9') p++;
        if (p > n + 1 && *p == '.') return p + 1;
    }
    return n;
}

static int matches(const coll_rule *r, const char *name)
{
    size_t n = strlen(name), k = strlen(r->pat);
    switch (r->mode) {
    case M_START: return !strncmp(name, r->pat, k);
    case M_HAS: return strstr(name, r->pat) != NULL;
    default: return n >= k && !strcmp(name + n - k, r->pat);
    }
}

static const coll_rule *rule_for(const trace_t *t, const char *name)
{
    int zero3 = trace_meta_u64(t, "zero3", 0) != 0;
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        if ((rules[i].when != W_ZERO3 || zero3) && matches(&rules[i], name)) return &rules[i];
    return NULL;
}

static rt_nccl_type type_of(uint64_t bytes)
{
    return bytes == 4 ? RN_F32 : bytes == 8 ? RN_F64 : RN_BF16;
}

/* The element type a reduction sums in: a gradient's (meta grad_bytes), the loss's fp32
 * statistics, else the activations' (meta dtype_bytes). */
static rt_nccl_type reduce_type(const trace_t *t, const trace_op *op, const char *name)
{
    const trace_tensor *x = op->n_in ? trace_find_tensor(t, op->in[0]) : NULL;
    if (x && x->cls == TC_GRAD) return type_of(trace_meta_u64(t, "grad_bytes", 2));
    if (matches(&(coll_rule){"loss.ar", M_END, 0, 0, 0}, name)) return RN_F32;
    return type_of(trace_meta_u64(t, "dtype_bytes", 2));
}

/* The collective the bytes show among those allowed; RC_COUNT when none fits. An all-gather
 * writes p times the shard it reads (the generator divides with a remainder dropped). */
static rt_coll_kind by_bytes(uint64_t br, uint64_t bw, uint64_t p, unsigned allowed)
{
    if ((allowed & K(RC_ALL_GATHER)) && bw > br && br * p <= bw && bw < (br + 1) * p)
        return RC_ALL_GATHER;
    if ((allowed & K(RC_REDUCE_SCATTER)) && br > bw && bw * p <= br && br < (bw + 1) * p)
        return RC_REDUCE_SCATTER;
    if ((allowed & K(RC_ALL_REDUCE)) && br == bw) return RC_ALL_REDUCE;
    if ((allowed & K(RC_RING)) && br == bw && br % (p - 1) == 0) return RC_RING;
    if (allowed & K(RC_ALL_TO_ALL)) return RC_ALL_TO_ALL;
    return RC_COUNT;
}

/* Whether the op's operands have the shape its collective takes. */
static int shape_ok(const trace_op *op, rt_coll_kind k)
{
    if (k == RC_ALL_GATHER && op->n_in == op->n_out && op->n_in > 1) {
        for (uint32_t j = 0; j < op->n_in; j++)
            if (op->in[j] != op->out[j]) return 0;
        return 1; /* parameters gathered in place, one tensor after another */
    }
    if (k == RC_RING) return op->n_in >= 1 && op->n_out >= 1;
    return op->n_in == 1 && op->n_out == 1;
}

ms_status rt_coll_classify(const trace_t *t, const trace_op *op, const rt_ranks *r,
                           rt_coll_class *out, ms_error *err)
{
    memset(out, 0, sizeof *out);
    const char *name = base_name(op->name);
    const coll_rule *rule = rule_for(t, name);
    if (!rule)
        return ms_fail(err, MS_ERR_INVALID, "trace op %" PRIu64 " '%s': a collective whose "
                       "group the runtime cannot tell from its name (docs/RUNTIME.md, "
                       "\"Several GPUs\", lists the names)", op->id, op->name);
    if (rule->group == G_NONE) return MS_OK;
    const char *fw = trace_get_meta(t, "framework");
    out->group = rule->group == G_DATA ? (fw && !strcmp(fw, "megatron") ? RG_DPCP : RG_DP)
                                       : (rt_group_kind)rule->group;
    out->ranks = rt_ranks_size(r, out->group);
    if (out->ranks <= 1) return MS_OK; /* nothing to exchange: spun as before */
    uint64_t br = op->bytes_read, bw = op->bytes_written;
    rt_coll_kind k = by_bytes(br, bw, (uint64_t)out->ranks, rule->kinds);
    if (k == RC_COUNT || !shape_ok(op, k))
        return ms_fail(err, MS_ERR_INVALID, "trace op %" PRIu64 " '%s' reads %" PRIu64 " and "
                       "writes %" PRIu64 " bytes with %u inputs and %u outputs: no collective "
                       "its name allows over the %s group of %d ranks moves that", op->id,
                       op->name, br, bw, op->n_in, op->n_out, rt_group_name(out->group),
                       out->ranks);
    out->kind = k;
    out->type = reduce_type(t, op, name);
    return MS_OK;
}

/* ---- the trace's collectives ---- */

typedef struct coll_op {
    const trace_op *op;
    rt_coll_class cls;
} coll_op;

struct rt_coll {
    const trace_t *t;
    const rt_ranks *r;
    int rank;
    coll_op *ops;
    size_t n_ops;
    u64map *by_id;       /* comm op id -> index in ops */
    u64map *ovl_of;      /* attention op id -> index of the ".ovl" ring before it */
    int index[RG_COUNT]; /* this rank's place in its group of each kind */
    int used[RG_COUNT];
    rt_nccl *nccl;
    void *comm[RG_COUNT];
    rt_coll_stats st;
};

/* The attention op a ".ovl" collective at record i merges into (lowering's rule,
 * planners/lower_replay.c lw_ovl_merges: the next op before any mark, in its layer and
 * phase), or NULL. */
static const trace_op *ovl_target(const trace_t *t, size_t i, const trace_op *ring)
{
    for (size_t j = i + 1; j < trace_count(t); j++) {
        const trace_rec *x = trace_get(t, j);
        if (x->type == TR_MARK) return NULL;
        if (x->type != TR_OP) continue;
        const trace_op *o = &x->u.op;
        return o->kind == TK_ATTN && o->layer == ring->layer && o->phase == ring->phase ? o
                                                                                       : NULL;
    }
    return NULL;
}

static ms_status add_op(rt_coll *c, size_t i, const trace_op *op, ms_error *err)
{
    coll_op *o = &c->ops[c->n_ops];
    o->op = op;
    ms_status st = rt_coll_classify(c->t, op, c->r, &o->cls, err);
    if (st != MS_OK) return st;
    if (u64map_put(c->by_id, op->id, c->n_ops)) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    if (o->cls.kind != RC_NONE) c->used[o->cls.group] = 1;
    const trace_op *a = o->cls.kind == RC_RING ? ovl_target(c->t, i, op) : NULL;
    if (a && u64map_put(c->ovl_of, a->id, c->n_ops))
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    c->n_ops++;
    return MS_OK;
}

ms_status rt_coll_new(const trace_t *t, const rt_ranks *r, int rank, rt_coll **out,
                      ms_error *err)
{
    *out = NULL;
    rt_coll *c = calloc(1, sizeof *c);
    size_t n = 0;
    for (size_t i = 0; i < trace_count(t); i++)
        n += trace_get(t, i)->type == TR_OP && trace_get(t, i)->u.op.kind == TK_COMM;
    if (c) {
        c->ops = calloc(n ? n : 1, sizeof *c->ops);
        c->by_id = u64map_new(n + 16);
        c->ovl_of = u64map_new(64);
    }
    if (!c || !c->ops || !c->by_id || !c->ovl_of) {
        rt_coll_free(c);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    c->t = t;
    c->r = r;
    c->rank = rank;
    for (int k = 0; k < RG_COUNT; k++) rt_ranks_group(r, (rt_group_kind)k, rank, NULL, 0,
                                                      &c->index[k]);
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *x = trace_get(t, i);
        if (x->type != TR_OP || x->u.op.kind != TK_COMM) continue;
        ms_status st = add_op(c, i, &x->u.op, err);
        if (st != MS_OK) {
            rt_coll_free(c);
            return st;
        }
    }
    *out = c;
    return MS_OK;
}

void rt_coll_free(rt_coll *c)
{
    if (!c) return;
    u64map_free(c->by_id);
    u64map_free(c->ovl_of);
    free(c->ops);
    free(c);
}

int rt_coll_uses(const rt_coll *c, rt_group_kind k)
{
    return (unsigned)k < RG_COUNT && c->used[k];
}

void rt_coll_set_comm(rt_coll *c, rt_group_kind k, rt_nccl *n, void *comm)
{
    c->nccl = n;
    c->comm[k] = comm;
}

void rt_coll_get_stats(const rt_coll *c, rt_coll_stats *s) { *s = c->st; }

/* ---- the hooks ---- */

static const coll_op *find_op(const rt_coll *c, const u64map *m, uint64_t id)
{
    uint64_t k;
    return u64map_get(m, id, &k) ? &c->ops[k] : NULL;
}

static const trace_op *hook_find(void *ctx, const sched_action *a, const trace_op *op,
                                 double *spin_us)
{
    rt_coll *c = ctx;
    *spin_us = 0;
    if (op->kind == TK_COMM) {
        const coll_op *o = find_op(c, c->by_id, op->id);
        return o && o->cls.kind != RC_NONE ? op : NULL;
    }
    if (!a->ovl || op->kind != TK_ATTN) return NULL;
    const coll_op *o = find_op(c, c->ovl_of, op->id);
    if (!o || o->cls.kind == RC_NONE) return NULL;
    /* the attention's own time: the merged action lasts the larger of it and the ring's */
    double f = a->replay_frac > 0 && a->replay_frac < 1 ? a->replay_frac : 1;
    double own = op->dur_us >= 0 ? op->dur_us * f : a->dur_us;
    *spin_us = own < a->dur_us ? own : a->dur_us;
    return o->op;
}

static rt_status no_comm(const rt_coll *c, const coll_op *o, ms_error *err)
{
    return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, o->op->name,
                   c->nccl ? "no communicator for its group" : "NCCL is not loaded");
}

static rt_status too_small(const coll_op *o, uint64_t have, uint64_t need, ms_error *err)
{
    char m[160];
    snprintf(m, sizeof m, "an operand of %" PRIu64 " bytes, where the collective needs %" PRIu64,
             have, need);
    return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, o->op->name, m);
}

typedef struct operands {
    const uint64_t *in, *in_b, *out, *out_b;
} operands;

static void *ptr(uint64_t a) { return (void *)(uintptr_t)a; }

static rt_status run_gather(rt_coll *c, const coll_op *o, void *s, const operands *x,
                            ms_error *err)
{
    rt_nccl *n = c->nccl;
    void *comm = c->comm[o->cls.group];
    uint64_t p = (uint64_t)o->cls.ranks, me = (uint64_t)c->index[o->cls.group];
    const trace_op *op = o->op;
    if (op->n_in > 1 || op->in[0] == op->out[0]) { /* in place, tensor by tensor */
        RT_TRY(rt_nccl_group_start(n, err));
        for (uint32_t j = 0; j < op->n_out; j++) {
            uint64_t cnt = x->out_b[j] / p;
            RT_TRY(rt_nccl_all_gather(n, ptr(x->out[j] + me * cnt), ptr(x->out[j]), cnt, comm, s,
                                      err));
            c->st.calls[RC_ALL_GATHER]++;
        }
        return rt_nccl_group_end(n, err);
    }
    uint64_t cnt = x->out_b[0] / p;
    if (x->in_b[0] < cnt) return too_small(o, x->in_b[0], cnt, err);
    c->st.calls[RC_ALL_GATHER]++;
    return rt_nccl_all_gather(n, ptr(x->in[0]), ptr(x->out[0]), cnt, comm, s, err);
}

static rt_status run_reduce(rt_coll *c, const coll_op *o, void *s, const operands *x,
                            ms_error *err)
{
    rt_nccl *n = c->nccl;
    void *comm = c->comm[o->cls.group];
    uint64_t p = (uint64_t)o->cls.ranks, me = (uint64_t)c->index[o->cls.group];
    uint64_t e = rt_nccl_type_bytes(o->cls.type);
    int in_place = o->op->in[0] == o->op->out[0];
    if (o->cls.kind == RC_ALL_REDUCE) {
        /* an op reducing more than its tensor holds stands for several reductions of it (the
         * vocabulary-parallel loss: its maximum, target logit and sum of exponentials) */
        uint64_t b = x->in_b[0] < x->out_b[0] ? x->in_b[0] : x->out_b[0];
        uint64_t reps = b && o->op->bytes_read > b ? o->op->bytes_read / b : 1;
        for (uint64_t k = 0; k < reps; k++) {
            RT_TRY(rt_nccl_all_reduce(n, ptr(x->in[0]), ptr(x->out[0]), b / e, o->cls.type, comm,
                                      s, err));
            c->st.calls[RC_ALL_REDUCE]++;
        }
        return RT_OK;
    }
    c->st.calls[o->cls.kind]++;
    uint64_t cnt = x->in_b[0] / p / e; /* elements each rank keeps */
    if (in_place)  /* NCCL's in-place form: this rank's share of the buffer itself */
        return rt_nccl_reduce_scatter(n, ptr(x->in[0]), ptr(x->in[0] + me * cnt * e), cnt,
                                      o->cls.type, comm, s, err);
    if (x->out_b[0] < cnt * e) return too_small(o, x->out_b[0], cnt * e, err);
    return rt_nccl_reduce_scatter(n, ptr(x->in[0]), ptr(x->out[0]), cnt, o->cls.type, comm, s,
                                  err);
}

/* One piece of a ring step: `bytes` from src, into the receive buffer at offset `at`. */
static rt_status ring_piece(rt_coll *c, void *comm, void *s, uint64_t src, uint64_t dst,
                            uint64_t bytes, int next, int prev, ms_error *err)
{
    RT_TRY(rt_nccl_send(c->nccl, ptr(src), bytes, next, comm, s, err));
    c->st.calls[RC_RING] += 2;
    return rt_nccl_recv(c->nccl, ptr(dst), bytes, prev, comm, s, err);
}

/* CP's ring, p - 1 steps of B = bytes / (p - 1) (times the replay's row fraction): step i
 * receives into output i mod n_out and sends what the previous step received; step 0 sends
 * the inputs in order, filled up from the last output when they hold less than B (the
 * backward ring carries the partial dK/dV beside K/V). Spin math: timing, not data. */
static rt_status run_ring(rt_coll *c, const coll_op *o, void *s, const operands *x, double frac,
                          ms_error *err)
{
    void *comm = c->comm[o->cls.group];
    int p = o->cls.ranks, me = c->index[o->cls.group];
    int next = (me + 1) % p, prev = (me + p - 1) % p;
    const trace_op *op = o->op;
    uint64_t B = op->bytes_read / (uint64_t)(p - 1);
    if (frac > 0 && frac < 1) B = (uint64_t)((double)B * frac);
    for (uint32_t j = 0; j < op->n_out; j++)
        if (x->out_b[j] < B) return too_small(o, x->out_b[j], B, err);
    for (int i = 0; i < p - 1; i++) {
        uint64_t dst = x->out[(uint32_t)i % op->n_out];
        RT_TRY(rt_nccl_group_start(c->nccl, err));
        if (i == 0) {
            uint64_t at = 0;
            for (uint32_t j = 0; j < op->n_in && at < B; j++) {
                uint64_t b = x->in_b[j] < B - at ? x->in_b[j] : B - at;
                RT_TRY(ring_piece(c, comm, s, x->in[j], dst + at, b, next, prev, err));
                at += b;
            }
            if (at < B)
                RT_TRY(ring_piece(c, comm, s, x->out[op->n_out - 1], dst + at, B - at, next, prev,
                                  err));
        } else {
            uint64_t src = x->out[(uint32_t)(i - 1) % op->n_out];
            RT_TRY(ring_piece(c, comm, s, src, dst, B, next, prev, err));
        }
        RT_TRY(rt_nccl_group_end(c->nccl, err));
    }
    return RT_OK;
}

/* The all-to-all as NCCL builds one: a send to and a receive from every other member, of the
 * smaller of the two volumes' shares (every rank runs the same trace, so the pairs agree). */
static rt_status run_a2a(rt_coll *c, const coll_op *o, void *s, const operands *x,
                         ms_error *err)
{
    void *comm = c->comm[o->cls.group];
    int p = o->cls.ranks, me = c->index[o->cls.group];
    uint64_t b = x->in_b[0] < x->out_b[0] ? x->in_b[0] : x->out_b[0];
    uint64_t cnt = b / (uint64_t)p;
    RT_TRY(rt_nccl_group_start(c->nccl, err));
    for (int q = 0; q < p; q++) {
        if (q == me) continue;
        RT_TRY(rt_nccl_send(c->nccl, ptr(x->in[0] + (uint64_t)q * cnt), cnt, q, comm, s, err));
        RT_TRY(rt_nccl_recv(c->nccl, ptr(x->out[0] + (uint64_t)q * cnt), cnt, q, comm, s, err));
        c->st.calls[RC_ALL_TO_ALL] += 2;
    }
    return rt_nccl_group_end(c->nccl, err);
}

static rt_status hook_run(void *ctx, void *s, const sched_action *a, const trace_op *op,
                          const uint64_t *in_addr, const uint64_t *in_bytes,
                          const uint64_t *out_addr, const uint64_t *out_bytes, ms_error *err)
{
    rt_coll *c = ctx;
    const coll_op *o = find_op(c, c->by_id, op->id);
    if (!o || o->cls.kind == RC_NONE)
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, op->name, "not a collective");
    if (!c->nccl || !c->comm[o->cls.group]) return no_comm(c, o, err);
    operands x = {in_addr, in_bytes, out_addr, out_bytes};
    c->st.ops[o->cls.kind]++;
    c->st.bytes[o->cls.kind] += op->bytes_read > op->bytes_written ? op->bytes_read
                                                                   : op->bytes_written;
    c->st.merged += op->kind == TK_COMM && a->op != (int64_t)op->id;
    switch (o->cls.kind) {
    case RC_ALL_GATHER: return run_gather(c, o, s, &x, err);
    case RC_REDUCE_SCATTER:
    case RC_ALL_REDUCE: return run_reduce(c, o, s, &x, err);
    case RC_RING: return run_ring(c, o, s, &x, a->replay_frac, err);
    default: return run_a2a(c, o, s, &x, err);
    }
}

void rt_coll_hooks(rt_coll *c, rt_exec_opts *o)
{
    o->coll_find = hook_find;
    o->coll_run = hook_run;
    o->coll_ctx = c;
}

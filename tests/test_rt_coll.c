/* test_rt_coll.c — unit tests of the runtime's collectives (runtime/rt_coll.c): every comm op
 * the generator emits, over the layouts and programs it knows (generic, Megatron with and
 * without the distributed optimizer, ZeRO-3, ZeRO-Offload, mixture of experts with EP),
 * classified into the collective and group its bytes and tensors fit; names and bytes that
 * fit no rule refused with the op named; and the NCCL calls the hooks make (counts, offsets,
 * element types, peers, the ring's steps) checked against the fake library
 * tests/fake_nccl.c. Plain C: runs in make check with or without CUDA. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_coll.h"
#include "tests/fake_nccl_log.h"
#include "tests/gen_util.h"
#include "tests/tap.h"
#include "traces/models.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct layout {
    const char *model;
    int layers, tp, cp, dp, ep, framework, dist_opt, zero3, offload;
} layout;

static trace_t *gen(const layout *l, const machine_t *m)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup(l->model, &c.model, &err) != MS_OK) {
        TAP_NOTE("model %s: %s", l->model, err.msg);
        return NULL;
    }
    c.model.layers = (uint64_t)l->layers;
    c.seq = 4096;
    c.micro_batch = 1;
    c.tp = l->tp;
    c.cp = l->cp;
    c.dp = l->dp;
    c.ep = l->ep;
    c.framework = l->framework;
    c.dist_opt = l->dist_opt;
    c.zero3 = l->zero3;
    c.offload = l->offload;
    c.iterations = 1;
    trace_t *t = NULL;
    if (gen_validate(&c, &err) != MS_OK || gen_trace(&c, m, &t, &err) != MS_OK) {
        TAP_NOTE("gen: %s", err.msg);
        return NULL;
    }
    return t;
}

static uint64_t tbytes(const trace_t *t, uint64_t id)
{
    const trace_tensor *x = trace_find_tensor(t, id);
    return x ? x->bytes : 0;
}

/* Whether the tensors hold what the collective moves: an all-gather's output the op's bytes
 * written (in place: the tensors together), a reduce-scatter's input its bytes read, a ring's
 * outputs one step each. */
static int tensors_fit(const trace_t *t, const trace_op *op, const rt_coll_class *c)
{
    uint64_t in = 0, out = 0, outmin = UINT64_MAX;
    for (uint32_t j = 0; j < op->n_in; j++) in += tbytes(t, op->in[j]);
    for (uint32_t j = 0; j < op->n_out; j++) {
        uint64_t b = tbytes(t, op->out[j]);
        out += b;
        if (b < outmin) outmin = b;
    }
    switch (c->kind) {
    case RC_ALL_GATHER: return out == op->bytes_written;
    case RC_REDUCE_SCATTER: return in == op->bytes_read;
    case RC_ALL_REDUCE: return in && op->bytes_read % in == 0; /* the loss: 3 reductions */
    case RC_RING: return outmin >= op->bytes_read / (uint64_t)(c->ranks - 1);
    default: return in >= op->bytes_read && out >= op->bytes_written;
    }
}

/* name pattern -> the collective and group it must be, for a layout's expectations */
typedef struct expect {
    const char *suffix;
    rt_coll_kind kind;
    rt_group_kind group;
} expect;

static void check_layout(const char *what, const layout *l, const machine_t *m,
                         const expect *ex, size_t nex)
{
    trace_t *t = gen(l, m);
    jobview v;
    jobview_of(t, m, &v);
    rt_ranks *r = NULL;
    ms_error err;
    if (!t || rt_ranks_new(&v, l->framework == GEN_FW_MEGATRON, &r, &err) != MS_OK) {
        TAP_OK(0, "%s: trace and layout (%s)", what, t ? err.msg : "no trace");
        trace_free(t);
        return;
    }
    int n = 0, bad = 0, host = 0, fit = 1, hits[16] = {0};
    char first[200] = "";
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *x = trace_get(t, i);
        if (x->type != TR_OP || x->u.op.kind != TK_COMM) continue;
        const trace_op *op = &x->u.op;
        rt_coll_class c;
        n++;
        if (rt_coll_classify(t, op, r, &c, &err) != MS_OK) {
            if (!bad++) snprintf(first, sizeof first, "%.190s", err.msg);
            continue;
        }
        if (c.kind == RC_NONE) {
            host++;
            continue;
        }
        if (!tensors_fit(t, op, &c) || c.ranks != rt_ranks_size(r, c.group)) {
            if (fit) TAP_NOTE("%s: %s's tensors do not hold its volume", what, op->name);
            fit = 0;
        }
        for (size_t k = 0; k < nex; k++)
            if (ms_ends_with(op->name, ex[k].suffix)) {
                int ok = c.kind == ex[k].kind && c.group == ex[k].group;
                hits[k] += ok ? 1 : 0;
                if (!ok && !bad++)
                    snprintf(first, sizeof first, "%s is %s over %s", op->name,
                             rt_coll_kind_name(c.kind), rt_group_name(c.group));
                break;
            }
    }
    int all_hit = 1;
    for (size_t k = 0; k < nex; k++)
        if (!hits[k]) {
            TAP_NOTE("%s: no %s", what, ex[k].suffix);
            all_hit = 0;
        }
    TAP_OK(n > 0 && !bad && fit && all_hit, "%s: %d collectives classified (%d host copies), "
           "each where expected, tensors the size of their volumes%s%s", what, n, host,
           first[0] ? ": " : "", first);
    rt_ranks_free(r);
    trace_free(t);
}

static void test_generated(const machine_t *m)
{
    const expect generic[] = {
        {".ln1.ag", RC_ALL_GATHER, RG_TP}, {".fc1.rs.bwd", RC_REDUCE_SCATTER, RG_TP},
        {".ln2.ag.bwd", RC_ALL_GATHER, RG_TP}, {".fc2.rs", RC_REDUCE_SCATTER, RG_TP},
        {"cp_ring.ovl", RC_RING, RG_CP}, {"cp_ring_bwd.ovl", RC_RING, RG_CP},
        {"grad.dp_rs", RC_REDUCE_SCATTER, RG_DP}, {"param.dp_ag", RC_ALL_GATHER, RG_DP},
        {"loss.ar", RC_ALL_REDUCE, RG_TP}};
    layout g = {"gpt-7b", 2, 2, 2, 2, 1, GEN_FW_GENERIC, 0, 0, 0};
    check_layout("generic tp 2 cp 2 dp 2", &g, m, generic, sizeof generic / sizeof *generic);
    const expect memo[] = {{"cp_ring.ovl", RC_RING, RG_CP}, {".proj.rs", RC_REDUCE_SCATTER, RG_TP}};
    layout mm = {"gpt-7b", 2, 4, 2, 1, 1, GEN_FW_GENERIC, 0, 0, 0};
    check_layout("MEMO's tp 4 cp 2", &mm, m, memo, 2);
    const expect mg[] = {{"grad.dp_ar", RC_ALL_REDUCE, RG_DPCP}, {"cp_ring.ovl", RC_RING, RG_CP},
                         {"cp_ring_bwd.ovl", RC_RING, RG_CP}, {".qkv.rs.bwd", RC_REDUCE_SCATTER,
                                                               RG_TP}};
    layout mgl = {"gpt-7b", 2, 2, 2, 2, 1, GEN_FW_MEGATRON, 0, 0, 0};
    check_layout("megatron tp 2 cp 2 dp 2", &mgl, m, mg, 4);
    const expect dopt[] = {{"grad.dp_rs", RC_REDUCE_SCATTER, RG_DPCP},
                           {"param.dp_ag", RC_ALL_GATHER, RG_DPCP}};
    layout dol = {"gpt-7b", 2, 2, 2, 2, 1, GEN_FW_MEGATRON, 1, 0, 0};
    check_layout("megatron distributed optimizer", &dol, m, dopt, 2);
    const expect z3[] = {{"params.ag", RC_ALL_GATHER, RG_DP}, {"params.ag.bwd", RC_ALL_GATHER,
                                                               RG_DP},
                         {"grad.rs", RC_REDUCE_SCATTER, RG_DP}, {".ln1.ag", RC_ALL_GATHER, RG_TP}};
    layout z3l = {"gpt-7b", 2, 2, 1, 4, 1, GEN_FW_GENERIC, 0, 1, 0};
    check_layout("ZeRO-3 tp 2 dp 4", &z3l, m, z3, 4);
    layout z3o = {"gpt-7b", 2, 2, 1, 2, 1, GEN_FW_GENERIC, 0, 1, 1};
    check_layout("ZeRO-3 with offload", &z3o, m, z3, 3);
    const expect off[] = {{"grad.dp_rs", RC_REDUCE_SCATTER, RG_DP}};
    layout ofl = {"gpt-7b", 2, 1, 1, 2, 1, GEN_FW_GENERIC, 0, 0, 1};
    check_layout("ZeRO-Offload dp 2", &ofl, m, off, 1);
    const expect moe[] = {{"dispatch.a2a", RC_ALL_TO_ALL, RG_EP},
                          {"dispatch.ag.bwd", RC_REDUCE_SCATTER, RG_TP},
                          {"combine.rs.bwd", RC_ALL_GATHER, RG_TP},
                          {"expert_grad.dp_rs", RC_REDUCE_SCATTER, RG_EDP},
                          {"expert_param.dp_ag", RC_ALL_GATHER, RG_EDP}};
    layout moel = {"mixtral-8x7b", 2, 2, 1, 4, 2, GEN_FW_GENERIC, 0, 0, 0};
    check_layout("mixtral tp 2 dp 4 ep 2", &moel, m, moe, 5);
    const expect moem[] = {{"expert_grad.dp_ar", RC_ALL_REDUCE, RG_EDP},
                           {"combine.a2a.bwd", RC_ALL_TO_ALL, RG_EP}};
    layout moem_l = {"mixtral-8x7b", 2, 1, 2, 4, 2, GEN_FW_MEGATRON, 0, 0, 0};
    check_layout("mixtral megatron cp 2 dp 4 ep 2", &moem_l, m, moem, 2);
}

/* A trace from its text (through a temporary file and trace_load). */
static trace_t *load_text(const char *text)
{
    char path[64];
    snprintf(path, sizeof path, "test_rt_coll.%ld.trace", (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    trace_t *t = NULL;
    ms_error err;
    if (trace_load(path, &t, &err) != MS_OK) TAP_NOTE("load_text: %s", err.msg);
    remove(path);
    return t;
}

/* A one-op trace (op 7 reading tensor 1, writing tensor 2 or, in place, 1) with meta lines. */
static trace_t *one_op(const char *meta, const char *name, uint64_t in_b, uint64_t out_b,
                       uint64_t br, uint64_t bw, int in_place)
{
    char text[1024];
    int n = snprintf(text, sizeof text, "memsim-trace 1\n%salloc 1 %llu act_trans 0 0 0 - a\n",
                     meta, (unsigned long long)in_b);
    if (!in_place)
        n += snprintf(text + n, sizeof text - (size_t)n, "alloc 2 %llu act_trans 0 0 0 - b\n",
                      (unsigned long long)out_b);
    snprintf(text + n, sizeof text - (size_t)n, "op 7 comm fwd 0 0 %llu %llu 10 1 %d %s\n",
             (unsigned long long)br, (unsigned long long)bw, in_place ? 1 : 2, name);
    return load_text(text);
}

#define TP2 "meta tp 2\nmeta cp 1\nmeta dp 1\n"

static rt_ranks *tp2(void)
{
    jobview v;
    memset(&v, 0, sizeof v);
    v.tp = 2;
    v.node_ranks = 8;
    rt_ranks *r = NULL;
    ms_error err;
    rt_ranks_new(&v, 0, &r, &err);
    return r;
}

static void test_refusals(void)
{
    rt_ranks *r = tp2();
    ms_error err;
    rt_coll_class c;
    trace_t *t = one_op(TP2, "L0.mystery", 100, 200, 100, 200, 0);
    ms_status st = t && r ? rt_coll_classify(t, &trace_get(t, 2)->u.op, r, &c, &err)
                          : MS_ERR_INVALID;
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "'L0.mystery'") &&
           strstr(err.msg, "cannot tell"), "an unknown collective's name is refused: %s",
           err.msg);
    trace_free(t);
    t = one_op(TP2, "L0.ln1.ag", 100, 300, 100, 300, 0);
    st = t && r ? rt_coll_classify(t, &trace_get(t, 2)->u.op, r, &c, &err) : MS_OK;
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "reads 100 and writes 300") &&
           strstr(err.msg, "tp group of 2"), "a TP gather of 3x its shard over 2 ranks is "
           "refused: %s", err.msg);
    trace_free(t);
    rt_coll *cc = NULL;
    t = one_op(TP2, "L0.grad.d2h", 100, 100, 100, 0, 0);
    st = t && r ? rt_coll_new(t, r, 0, &cc, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_OK && !rt_coll_uses(cc, RG_TP), "a host-link copy is no collective");
    rt_coll_free(cc);
    trace_free(t);
    rt_ranks_free(r);
}

/* ---- the hooks against the fake NCCL ---- */


/* Runs trace t's op 7 through the hooks as rank `rank` of layout r; returns the fake's log. */
static char *run_hook(rt_nccl *n, const trace_t *t, const rt_ranks *r, int rank, uint64_t in_b,
                      uint64_t out_b, rt_status *st, ms_error *err)
{
    rt_coll *c = NULL;
    *st = RT_ERR_INVALID;
    if (rt_coll_new(t, r, rank, &c, err) != MS_OK) return take_log();
    void *comm = (void *)0;
    rt_nccl_id id;
    rt_nccl_unique_id(n, &id, err);
    for (int k = 0; k < RG_COUNT; k++)
        if (rt_coll_uses(c, (rt_group_kind)k)) {
            rt_nccl_comm_init(n, rt_ranks_size(r, (rt_group_kind)k), &id, rank, &comm, err);
            rt_coll_set_comm(c, (rt_group_kind)k, n, comm);
        }
    rt_exec_opts o;
    memset(&o, 0, sizeof o);
    rt_coll_hooks(c, &o);
    const trace_op *op = trace_find_op(t, 7);
    sched_action a;
    memset(&a, 0, sizeof a);
    a.kind = SA_COMPUTE;
    a.op = 7;
    double spin = -1;
    const trace_op *found = o.coll_find(o.coll_ctx, &a, op, &spin);
    uint64_t in[2] = {0x10000, 0x20000}, inb[2] = {in_b, in_b}, out[2] = {0x40000, 0x80000},
             outb[2] = {out_b, out_b};
    if (op->n_in == 1 && op->in[0] == op->out[0]) out[0] = in[0];
    take_log();
    *st = found == op && spin == 0 ? o.coll_run(o.coll_ctx, (void *)0x5, &a, op, in, inb, out,
                                                outb, err)
                                   : RT_ERR_INVALID;
    char *log = take_log();
    rt_nccl_comm_destroy(n, comm);
    rt_coll_free(c);
    return log;
}

static void test_hooks(const char *fake)
{
    setenv("MEMSIM_NCCL", fake, 1);
    rt_nccl *n = NULL;
    ms_error err;
    if (rt_nccl_load(&n, &err) != RT_OK) {
        TAP_OK(0, "loading the fake NCCL: %s", err.msg);
        return;
    }
    rt_ranks *r = tp2();
    rt_status st;
    trace_t *t = one_op(TP2, "L0.ln1.ag", 1000, 2000, 1000, 2000, 0);
    char *log = run_hook(n, t, r, 1, 1000, 2000, &st, &err);
    TAP_OK(st == RT_OK && strstr(log, "allgather") && strstr(log, "rank=1/2 count=1000 type=1 ") &&
           strstr(log, "send=0x10000 recv=0x40000 stream=0x5"),
           "a TP all-gather: its shard's bytes from the input into the output, on the stream");
    trace_free(t);
    t = one_op(TP2, "loss.ar", 400, 400, 1200, 1200, 1);
    log = run_hook(n, t, r, 0, 400, 400, &st, &err);
    TAP_OK(st == RT_OK && count(log, "allreduce") == 3 && strstr(log, "count=100 type=7 op=0"),
           "the loss's all-reduce of three times its tensor: three fp32 all-reduces of it");
    trace_free(t);
    t = one_op("meta tp 1\nmeta cp 1\nmeta dp 2\nmeta grad_bytes 4\n", "L0.grad.dp_rs", 4096,
               4096, 4096, 2048, 1);
    rt_ranks_free(r);
    jobview v;
    memset(&v, 0, sizeof v);
    v.dp = 2;
    v.node_ranks = 8;
    rt_ranks_new(&v, 0, &r, &err);
    log = run_hook(n, t, r, 1, 4096, 4096, &st, &err);
    /* a gradient of class act_trans here, so the activations' bf16: 4096 / 2 ranks / 2 bytes */
    TAP_OK(st == RT_OK && strstr(log, "reducescatter") && strstr(log, "count=1024 type=9 op=0 "
           "send=0x10000 recv=0x10800"), "an in-place reduce-scatter: rank 1's share is the "
           "buffer's second half (%s)", st == RT_OK ? "ok" : err.msg);
    trace_free(t);
    rt_ranks_free(r);
    /* CP's ring over 4 ranks: 3 steps of B = br / 3 */
    memset(&v, 0, sizeof v);
    v.cp = 4;
    v.node_ranks = 8;
    rt_ranks_new(&v, 0, &r, &err);
    t = load_text("memsim-trace 1\nmeta cp 4\nalloc 1 100 act_skel 0 1 0 - k\n"
                  "alloc 2 100 act_skel 0 1 0 - v\nalloc 3 400 act_trans 0 1 0 - r0\n"
                  "alloc 4 400 act_trans 0 1 0 - r1\n"
                  "op 7 comm bwd 0 0 1200 1200 10 1,2 3,4 L0.cp_ring_bwd.ovl\n");
    rt_coll *c = NULL;
    rt_coll_new(t, r, 2, &c, &err);
    rt_exec_opts o;
    memset(&o, 0, sizeof o);
    rt_coll_hooks(c, &o);
    void *comm = NULL;
    rt_nccl_id id;
    rt_nccl_unique_id(n, &id, &err);
    rt_nccl_comm_init(n, 4, &id, 2, &comm, &err);
    rt_coll_set_comm(c, RG_CP, n, comm);
    uint64_t in[2] = {0x1000, 0x2000}, inb[2] = {100, 100}, out[2] = {0x3000, 0x4000},
             outb[2] = {400, 400};
    sched_action a;
    memset(&a, 0, sizeof a);
    take_log();
    st = o.coll_run(o.coll_ctx, (void *)0x6, &a, trace_find_op(t, 7), in, inb, out, outb, &err);
    log = take_log();
    /* step 0: k (100) and v (100), then 200 from r1, into r0; step 1 r0 -> r1; step 2 r1 -> r0 */
    TAP_OK(st == RT_OK && count(log, "group_start") == 3 && count(log, "send id=") == 5 &&
           count(log, "recv id=") == 5 && strstr(log, "count=100 type=1 peer=3 buf=0x1000") &&
           strstr(log, "count=200 type=1 peer=3 buf=0x4000") &&
           strstr(log, "count=400 type=1 peer=3 buf=0x3000") &&
           strstr(log, "recv id=") && strstr(log, "peer=1 buf=0x3064"),
           "a ring of 4: three steps to the next member (3) from the previous (1), step 0's "
           "inputs filled up to one step from the last output");
    rt_coll_stats s;
    rt_coll_get_stats(c, &s);
    TAP_OK(s.ops[RC_RING] == 1 && s.calls[RC_RING] == 10 && s.bytes[RC_RING] == 1200,
           "the ring's statistics: 1 op, 10 send/receive calls, 1200 bytes");
    rt_nccl_comm_destroy(n, comm);
    rt_coll_free(c);
    trace_free(t);
    rt_ranks_free(r);
    rt_nccl_free(n);
    take_log();
}

int main(void)
{
    machine_t m = test_machine();
    m.node_gpus = 8;
    test_generated(&m);
    test_refusals();
    const char *fake = getenv("MEMSIM_FAKE_NCCL");
    snprintf(log_path, sizeof log_path, "test_rt_coll.%ld.log", (long)getpid());
    setenv("FAKE_NCCL_LOG", log_path, 1);
    if (!fake || access(fake, R_OK)) TAP_SKIP("MEMSIM_FAKE_NCCL names no fake library");
    else test_hooks(fake);
    remove(log_path);
    return tap_done();
}

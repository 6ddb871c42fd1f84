/* test_ep.c — unit tests (TAP) of expert parallelism and the mixture-of-experts layers of the
 * generic and megatron programs (traces/gen.c), the all-to-all of the op-time model
 * (traces/roofline.c) and the expert-parallel group of the placement view
 * (traces/jobview.c): experts' parameters, gradients and optimizer states per rank by hand,
 * four all-to-alls per MoE layer and their bytes (balanced and imbalanced), a valid trace,
 * the all-to-all over NVLink and over the network by the formula, the refusals' messages,
 * and MFU over the active parameters. */
#define _POSIX_C_SOURCE 200809L
#include "tests/tap.h"
#include "tests/gen_util.h"
#include "traces/gen.h"
#include "traces/jobview.h"
#include "base/u64map.h"

#include <math.h>
#include <string.h>

/* Mixtral 8x7B's layer shape on 2 layers (8 experts of 14336, top-2, SwiGLU, no biases). */
static gen_config moe_config(int tp, int dp, int ep, int framework)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup("mixtral-8x7b", &c.model, &err)) TAP_NOTE("lookup: %s", err.msg);
    c.model.layers = 2;
    c.seq = 4096;
    c.micro_batch = 1;
    c.tp = tp;
    c.dp = dp;
    c.ep = ep;
    c.framework = framework;
    return c;
}

static trace_t *gen(const gen_config *c, const machine_t *m)
{
    trace_t *t = NULL;
    ms_error err;
    ms_error_clear(&err);
    if (gen_trace(c, m, &t, &err)) TAP_NOTE("gen_trace: %s", err.msg);
    return t;
}

/* Bytes of the setup tensor named `name` (0: none). */
static uint64_t tensor_bytes(const trace_t *t, const char *name)
{
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && !strcmp(r->u.alloc.name, name)) return r->u.alloc.bytes;
    }
    return 0;
}

/* The ops of iteration `iter` whose names end in `suffix`: their count, and the first's
 * bytes read and written. */
typedef struct opcount { int n; uint64_t br, bw; double dur_us; } opcount;

static opcount ops_ending(const trace_t *t, int iter, const char *suffix)
{
    opcount c;
    memset(&c, 0, sizeof c);
    int it = -1;
    size_t ls = strlen(suffix);
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) it = (int)r->u.mark.value;
        if (r->type != TR_OP || it != iter) continue;
        size_t ln = strlen(r->u.op.name);
        if (ln < ls || strcmp(r->u.op.name + ln - ls, suffix)) continue;
        if (!c.n++) {
            c.br = r->u.op.bytes_read;
            c.bw = r->u.op.bytes_written;
            c.dur_us = r->u.op.dur_us;
        }
    }
    return c;
}

/* Every op's tensors live, every free of a live tensor, only model states left (and
 * megatron's global all-gather buffer, a workspace it keeps with tp > 1). */
static int valid(const trace_t *t, char *why, size_t n)
{
    u64map *live = u64map_new(1024);
    int bad = 0;
    for (size_t i = 0; i < trace_count(t) && !bad; i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC) u64map_put(live, r->u.alloc.id, (uint64_t)r->u.alloc.cls);
        else if (r->type == TR_FREE && !u64map_del(live, r->u.free_id, NULL))
            bad = snprintf(why, n, "free of dead %llu", (unsigned long long)r->u.free_id) > 0;
        else if (r->type == TR_OP)
            for (uint32_t j = 0; j < r->u.op.n_in + r->u.op.n_out && !bad; j++) {
                uint64_t id = j < r->u.op.n_in ? r->u.op.in[j] : r->u.op.out[j - r->u.op.n_in];
                if (!u64map_get(live, id, NULL))
                    bad = snprintf(why, n, "%s: dead tensor %llu", r->u.op.name,
                                   (unsigned long long)id) > 0;
            }
    }
    uint64_t k, v;
    for (size_t it = 0; !bad && u64map_next(live, &it, &k, &v);)
        if (v > TC_OPTSTATE && v != TC_WORKSPACE) bad = snprintf(why, n, "activation %llu left", (unsigned long long)k) > 0;
    u64map_free(live);
    return !bad;
}

/* Experts of one MoE layer: 8 x (h x 2f gate/up + f x h down), by the model's fields. */
static uint64_t layer_expert_params(const model_t *m)
{
    return m->n_experts * 3 * m->hidden * m->expert_ffn;
}

static void test_sharding(const machine_t *m)
{
    for (int mg = 0; mg < 2; mg++) {
        int fw = mg ? GEN_FW_MEGATRON : GEN_FW_GENERIC;
        const char *fwn = mg ? "megatron" : "generic";
        gen_config c1 = moe_config(1, 4, 1, fw), c2 = moe_config(1, 4, 2, fw),
                   c4 = moe_config(1, 4, 4, fw);
        if (mg) c1.dist_opt = c2.dist_opt = c4.dist_opt = 1;
        trace_t *t1 = gen(&c1, m), *t2 = gen(&c2, m), *t4 = gen(&c4, m);
        TAP_OK(t1 && t2 && t4, "%s: Mixtral-shaped traces at ep 1, 2, 4 (dp 4)", fwn);
        if (!t1 || !t2 || !t4) continue;
        uint64_t total = layer_expert_params(&c1.model) * 2; /* bf16 */
        uint64_t e1 = tensor_bytes(t1, "L0.experts.fc1.w") + tensor_bytes(t1, "L0.experts.fc2.w");
        uint64_t e2 = tensor_bytes(t2, "L0.experts.fc1.w") + tensor_bytes(t2, "L0.experts.fc2.w");
        uint64_t e4 = tensor_bytes(t4, "L0.experts.fc1.w") + tensor_bytes(t4, "L0.experts.fc2.w");
        TAP_OK(e1 == total && e2 == total / 2 && e4 == total / 4,
               "%s: each rank holds experts / ep of the experts' parameters (%llu, %llu, %llu "
               "bytes; all %llu)", fwn, (unsigned long long)e1, (unsigned long long)e2,
               (unsigned long long)e4, (unsigned long long)total);
        uint64_t gb = mg ? 4 : 2, n = layer_expert_params(&c1.model);
        TAP_OK(tensor_bytes(t1, "L0.expert_grad") == n * gb &&
                   tensor_bytes(t2, "L0.expert_grad") == n / 2 * gb &&
                   tensor_bytes(t4, "L0.expert_grad") == n / 4 * gb,
               "%s: the experts' gradient buffer is theirs, /ep (%llu bytes at ep 2)", fwn,
               (unsigned long long)tensor_bytes(t2, "L0.expert_grad"));
        /* optimizer: sharded over dp for dense, dp/ep for experts (generic ZeRO-1: 12 B;
         * megatron's distributed optimizer: the fp32 master here, the moments later) */
        const char *on = mg ? "L0.expert_opt_master" : "L0.expert_opt";
        uint64_t ob = mg ? 4 : 12;
        TAP_OK(tensor_bytes(t1, on) == n / 4 * ob && tensor_bytes(t2, on) == n / 2 / 2 * ob &&
                   tensor_bytes(t4, on) == n / 4 * ob,
               "%s: the experts' optimizer shard is over dp/ep ranks (ep 1: /4, ep 2: /2 of "
               "the half, ep 4: whole)", fwn);
        uint64_t router = c1.model.hidden * c1.model.n_experts * 2;
        TAP_OK(tensor_bytes(t2, "L0.router.w") == router && !tensor_bytes(t2, "L0.fc1.w"),
               "%s: the router is replicated, no dense fc1 in a MoE layer", fwn);
        char why[160] = "";
        TAP_OK(valid(t1, why, sizeof why) && valid(t2, why, sizeof why) &&
                   valid(t4, why, sizeof why),
               "%s: every op's tensors live, only model states left (%s)", fwn, why);
        trace_free(t1);
        trace_free(t2);
        trace_free(t4);
    }
}

static void test_all_to_all_ops(const machine_t *m)
{
    gen_config c = moe_config(2, 4, 2, GEN_FW_GENERIC);
    trace_t *t = gen(&c, m);
    TAP_OK(t != NULL, "tp 2 dp 4 ep 2 trace");
    if (!t) return;
    int a2a = ops_ending(t, 1, "a2a").n + ops_ending(t, 1, "a2a.bwd").n;
    TAP_OK(a2a == 4 * 2, "4 all-to-alls per MoE layer per step (dispatch and combine, forward "
           "and backward): %d in 2 layers", a2a);
    /* SP shard: T/tp = 2048 tokens, top-2: S = 4096 rows of h = 4096 bf16 */
    uint64_t S = 4096 / 2 * 2, rowb = 4096 * 2;
    opcount d = ops_ending(t, 1, "L0.dispatch.a2a"), cb = ops_ending(t, 1, "L0.combine.a2a");
    TAP_OK(d.n == 1 && d.br == S * rowb && d.bw == S * rowb && cb.br == S * rowb,
           "dispatch sends and receives S = T/tp * k rows (%llu bytes)", (unsigned long long)d.br);
    double want = roof_coll_us(m, ROOF_ALL_TO_ALL, S * rowb, 2, 4);
    TAP_OK(fabs(d.dur_us - want) < 1e-9, "the dispatch is timed as an all-to-all of 2 ranks "
           "spanning tp*ep = 4 GPUs (%.3f us)", d.dur_us);
    opcount ag = ops_ending(t, 1, "L0.dispatch.ag");
    TAP_OK(ag.n == 1 && ag.bw == 2 * S * rowb && tensor_bytes(t, "L0.expert_in") == 2 * S * rowb,
           "the TP all-gather gives the experts R = Re * tp rows");
    TAP_OK(ops_ending(t, 1, ".fc1").n == 0 && ops_ending(t, 1, "L0.expert_fc1").n == 1,
           "the MoE layer runs expert GEMMs, no dense MLP");
    trace_free(t);
    c = moe_config(1, 4, 1, GEN_FW_GENERIC);
    t = gen(&c, m);
    TAP_OK(t && ops_ending(t, 1, "a2a").n == 0 && ops_ending(t, 1, "a2a.bwd").n == 0 &&
               !trace_get_meta(t, "ep"),
           "ep 1: no all-to-all, no meta ep");
    trace_free(t);
    c = moe_config(1, 4, 2, GEN_FW_MEGATRON);
    c.moe_imbalance = 1.5;
    t = gen(&c, m);
    uint64_t S1 = 4096 * 2;
    d = t ? ops_ending(t, 1, "L1.dispatch.a2a") : d;
    TAP_OK(t && d.br == S1 * rowb && d.bw == S1 * 3 / 2 * rowb &&
               tensor_bytes(t, "L1.expert_in") == S1 * 3 / 2 * rowb &&
               fabs(d.dur_us - roof_coll_us(m, ROOF_ALL_TO_ALL, d.bw, 2, 2)) < 1e-9,
           "megatron, moe_imbalance 1.5: the busiest rank receives 1.5 S rows, timed by them");
    trace_free(t);
}

static void test_roofline(const machine_t *m)
{
    uint64_t B = 64ull << 20;
    double intra = roof_coll_us(m, ROOF_ALL_TO_ALL, B, 4, 4);
    double inter = roof_coll_us(m, ROOF_ALL_TO_ALL, B, 4, 16);
    double wi = 4.0 + 3 * 3.0 + (double)B * 3 / 4 / 450e9 * 1e6;
    double wn = 4.0 + 3 * 10.0 + (double)B * 3 / 4 / 50e9 * 1e6;
    TAP_OK(fabs(intra - wi) < 1e-6 && fabs(inter - wn) < 1e-6,
           "all-to-all: launch + (p-1) lat + B (p-1)/p / bw, NVLink in a node (%.2f us), the "
           "network across nodes (%.2f us)", intra, inter);
    TAP_OK(roof_coll_us(m, ROOF_ALL_TO_ALL, B, 1, 1) == 0.0, "all-to-all of one rank: 0");
    /* the placement view: ep 4 at tp 2 spans 8 GPUs (one node), ep 8 at tp 2 spans 16 */
    TAP_OK(jobview_ep_span(2, 1, 4) == 8 && jobview_ep_span(2, 1, 8) == 16 &&
               jobview_ep_span(0, 0, 0) == 1, "ep group span tp * cp * ep");
    trace_t *t = trace_new();
    trace_set_meta(t, "tp", "2");
    trace_set_meta(t, "cp", "1");
    trace_set_meta(t, "dp", "8");
    trace_set_meta(t, "ep", "8");
    jobview v;
    jobview_of(t, m, &v);
    TAP_OK(v.ep == 8 && v.ep_span_gpus == 16 && !v.ep_intra_node && v.node_ranks == 8,
           "jobview: meta ep 8 at tp 2 leaves the node; node ranks unchanged");
    trace_free(t);
    jobview_of(NULL, m, &v);
    TAP_OK(v.ep == 1 && v.ep_intra_node, "jobview without a trace: ep 1");
}

static void expect_err(gen_config c, const char *want, const char *what)
{
    ms_error err;
    ms_error_clear(&err);
    ms_status st = gen_validate(&c, &err);
    TAP_OK(st != MS_OK && strstr(err.msg, want), "%s: '%s'", what, err.msg);
}

static void test_errors(void)
{
    expect_err(moe_config(1, 4, 3, GEN_FW_GENERIC), "ep 3 must divide dp 4", "ep not dividing dp");
    expect_err(moe_config(1, 6, 3, GEN_FW_MEGATRON), "ep 3 must divide the 8 experts",
               "ep not dividing the experts");
    gen_config c = moe_config(1, 4, 2, GEN_FW_GENERIC);
    ms_error err;
    model_lookup("gpt-7b", &c.model, &err);
    expect_err(c, "needs a mixture-of-experts model", "ep on a dense model");
    c = moe_config(1, 1, 2, GEN_FW_HF);
    c.dp = 2;
    expect_err(c, "no expert parallelism (ep 2)", "framework hf refuses ep > 1");
    c = moe_config(1, 2, 2, GEN_FW_GENERIC);
    c.zero3 = 1;
    expect_err(c, "not modelled with lora, zero3 or offload", "MoE with zero3");
    c = moe_config(2, 2, 1, GEN_FW_GENERIC);
    model_lookup("qwen1.5-moe-a2.7b", &c.model, &err);
    c.model.shared_ffn = 5631;
    expect_err(c, "tp 2 does not divide the shared expert's ffn size 5631",
               "tp not dividing the shared expert");
}

/* Qwen1.5-MoE's layer (60 experts of 1408, top-4, a shared expert of 5632 with a sigmoid
 * gate) on 2 layers, tp 2, dp 4, ep 2: the shared expert's weights TP-sharded and replicated
 * over ep, its gate whole; a valid trace in both programs. */
static void test_shared(const machine_t *m)
{
    for (int mg = 0; mg < 2; mg++) {
        gen_config c = moe_config(2, 4, 2, mg ? GEN_FW_MEGATRON : GEN_FW_GENERIC);
        ms_error err;
        model_lookup("qwen1.5-moe-a2.7b", &c.model, &err);
        c.model.layers = 2;
        trace_t *t = gen(&c, m);
        uint64_t h = c.model.hidden, fs = c.model.shared_ffn, fe = c.model.expert_ffn;
        char why[160] = "";
        TAP_OK(t && tensor_bytes(t, "L1.shared.fc1.w") == h * 2 * fs / 2 * 2 &&
                   tensor_bytes(t, "L1.shared.fc2.w") == fs / 2 * h * 2 &&
                   tensor_bytes(t, "L1.shared_gate.w") == h * 2 &&
                   tensor_bytes(t, "L1.experts.fc1.w") == 30 * h * 2 * fe / 2 * 2 &&
                   valid(t, why, sizeof why),
               "%s: shared expert /tp, its gate whole, 30 of 60 experts /tp; a valid trace (%s)",
               mg ? "megatron" : "generic", why);
        TAP_OK(t && ops_ending(t, 1, "L0.shared_gate.mul").n == 1 &&
                   ops_ending(t, 1, "L0.shared.fc1.bwd").n == 1 &&
                   ops_ending(t, 1, "a2a").n + ops_ending(t, 1, "a2a.bwd").n == 8,
               "%s: the shared branch forward and backward beside the routed experts",
               mg ? "megatron" : "generic");
        trace_free(t);
    }
}

static void test_mfu(const machine_t *m)
{
    gen_config c = moe_config(1, 1, 1, GEN_FW_GENERIC);
    trace_t *t = gen(&c, m);
    uint64_t active = model_active_params(&c.model), all = model_params(&c.model);
    uint64_t idle = 2 * 6 * 3 * c.model.hidden * c.model.expert_ffn; /* 2 layers, 6 idle */
    double s = 4096, want = 6.0 * s * (double)active + 6.0 * 2 * 4096 * s * s;
    TAP_OK(t && all - active == idle && trace_meta_u64(t, "active_params", 0) == active &&
               fabs(trace_model_flops(t) - want) < 1.0,
           "MFU's model FLOPs count the active parameters (%llu of %llu)",
           (unsigned long long)active, (unsigned long long)all);
    trace_free(t);
}

int main(void)
{
    machine_t m = test_machine();
    test_sharding(&m);
    test_all_to_all_ops(&m);
    test_roofline(&m);
    test_errors();
    test_shared(&m);
    test_mfu(&m);
    return tap_done();
}

/* gen_util.h — what the generator's tests (tests/test_gen.c, tests/test_gen_hf.c,
 * tests/test_ep.c, tests/test_gen_reuse.c) share: an H100-like test machine, a tiny llama
 * under the hf program and the in-memory validation walk of a trace (live inputs and
 * outputs, frees of live tensors, ids never reused). Header-only, used only by tests/. */
#ifndef MEMSIM_GEN_UTIL_H
#define MEMSIM_GEN_UTIL_H

#include "traces/gen.h"
#include "base/u64map.h"

#include <stdio.h>
#include <string.h>

/* An H100-like profile; values only need to be plausible for these tests. */
static inline machine_t test_machine(void)
{
    machine_t m;
    memset(&m, 0, sizeof m);
    strcpy(m.name, "test-h100");
    m.gpu_peak_bf16_flops = 989e12;
    m.gpu_peak_fp32_flops = 67e12;
    m.gpu_hbm_Bps = 3.35e12;
    m.gpu_gemm_eff = 0.75;
    m.gpu_attn_eff = 0.6;
    m.gpu_mem_eff = 0.85;
    m.gpu_kernel_launch_us = 4.0;
    m.node_gpus = 8;
    m.nvlink_Bps = 450e9;
    m.nvlink_lat_us = 3.0;
    m.net_Bps = 50e9;
    m.net_lat_us = 10.0;
    return m;
}

/* A tiny llama-shaped model (2 layers, hidden 64, GQA 4/2, SwiGLU, rotary) under the hf
 * program at precision prec, seq x batch tokens. */
static inline gen_config tiny_llama_hf(const char *prec, uint64_t seq, uint64_t batch,
                                       uint64_t default_seq)
{
    gen_config c;
    ms_error err;
    gen_config_default(&c);
    model_t *m = &c.model;
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "tiny-llama");
    snprintf(m->family, sizeof m->family, "llama");
    m->layers = 2;
    m->hidden = 64;
    m->heads = 4;
    m->kv_heads = 2;
    m->ffn_hidden = 160;
    m->vocab = 1000;
    m->default_seq = default_seq;
    m->norm = MODEL_NORM_RMS;
    m->mlp = MODEL_MLP_SWIGLU;
    m->pos = MODEL_POS_ROTARY;
    c.seq = seq;
    c.micro_batch = batch;
    gen_config_set(&c, "framework", "hf", &err);
    gen_config_set(&c, "precision", prec, &err);
    return c;
}

/* ---- trace walks ---- */

typedef struct walk {
    int errors;              /* dead inputs/outputs, double frees, reused ids */
    uint64_t live_left;      /* tensors live at the end */
    uint64_t live_left_bad;  /* ... that are not param / grad / optimizer state */
    uint64_t persistent;     /* param / grad / optstate allocations */
    char first_error[160];
} walk;

static inline void werr(walk *w, const char *what, uint64_t id)
{
    if (!w->errors++) snprintf(w->first_error, sizeof w->first_error, "%s %llu", what,
                               (unsigned long long)id);
}

/* The in-memory validation: every op's inputs and outputs are live when it runs, frees name
 * live tensors, ids are never reused. */
static inline walk validate(const trace_t *t)
{
    walk w;
    memset(&w, 0, sizeof w);
    u64map *live = u64map_new(1024), *seen = u64map_new(1024);
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC) {
            if (u64map_get(seen, r->u.alloc.id, NULL)) werr(&w, "reused id", r->u.alloc.id);
            u64map_put(seen, r->u.alloc.id, 1);
            u64map_put(live, r->u.alloc.id, (uint64_t)r->u.alloc.cls);
            if (r->u.alloc.cls <= TC_OPTSTATE) w.persistent++;
        } else if (r->type == TR_FREE) {
            if (!u64map_del(live, r->u.free_id, NULL)) werr(&w, "free of dead", r->u.free_id);
        } else if (r->type == TR_OP) {
            for (uint32_t j = 0; j < r->u.op.n_in; j++)
                if (!u64map_get(live, r->u.op.in[j], NULL)) werr(&w, "dead input", r->u.op.in[j]);
            for (uint32_t j = 0; j < r->u.op.n_out; j++)
                if (!u64map_get(live, r->u.op.out[j], NULL))
                    werr(&w, "dead output", r->u.op.out[j]);
        }
    }
    uint64_t k, v;
    for (size_t it = 0; u64map_next(live, &it, &k, &v);) {
        w.live_left++;
        if (v > TC_OPTSTATE) w.live_left_bad++;
    }
    u64map_free(live);
    u64map_free(seen);
    return w;
}

#endif

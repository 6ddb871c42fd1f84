/* test_cost_protrain.c — ProTrain's cost models and search (planners/protrain/cost_protrain.c,
 * cost_protrain_search.c) and the pieces of the chunk layout they rest on
 * (planners/protrain/lower_chunks_layout.c): the chunk-size search
 * and the interleaved block layout on hand-made inputs, the runtime model against
 * hand-computed cases (all persistent; all gathered, forward only; ProTrain's appendix model
 * as written), the static memory, the
 * host-Adam bound, the search against a brute force over the whole space, its time bound
 * against every estimate and the bounded search against the unbounded one, and bad input
 * (chunk smaller than a parameter, nothing fits on the device or the host). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planners/protrain/cost_protrain.h"
#include "tests/tap.h"
#include "traces/gen.h"

#define MiB (UINT64_C(1) << 20)

/* A small machine with round numbers: 1 GB/s each way, 1.5 GB/s duplex, no copy latency. */
static machine_profile *small_machine(double host_adam)
{
    machine_profile *p = machine_profile_new();
    machine_t *m = &p->m;
    snprintf(m->name, sizeof m->name, "test-small");
    m->gpu_hbm_bytes = UINT64_C(2) << 30;
    m->gpu_peak_bf16_flops = 100e12;
    m->gpu_peak_fp32_flops = 20e12;
    m->gpu_hbm_Bps = 1e12;
    m->gpu_gemm_eff = 0.5;
    m->gpu_attn_eff = 0.5;
    m->gpu_mem_eff = 0.5;
    m->link_h2d_Bps = 1e9;
    m->link_d2h_Bps = 1e9;
    m->link_duplex_Bps = 1.5e9;
    m->host_mem_bytes = UINT64_C(64) << 30;
    m->host_adam_params_per_s = host_adam;
    m->node_gpus = 1;
    return p;
}

static trace_t *tiny_trace(const machine_t *m, int layers, uint64_t batch, int dp)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    char dims[64];
    snprintf(dims, sizeof dims, "dims:%d,256,4,1024,1000", layers);
    if (model_lookup(dims, &c.model, &err)) return NULL;
    c.seq = 128;
    c.micro_batch = batch;
    c.dp = dp;
    trace_t *t = NULL;
    if (gen_trace(&c, m, &t, &err)) TAP_NOTE("%s", err.msg);
    return t;
}

static void test_chunk_search(void)
{
    /* embedding 5 MiB, then three blocks of two 2 MiB parameters each */
    uint64_t b[] = {5 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB};
    int32_t g[] = {-1, 0, 0, 1, 1, 2, 2};
    /* sizes 5..13 MiB: 5 -> [5][4][4][4] wastes 3, 9 -> [5+4][4+4] wastes 1, 10 -> 3,
     * 12 -> [9][8] wastes 7, 13 -> [13][4] wastes 9: 9 MiB is the least waste */
    TAP_OK(lc_chunk_search(b, g, 7, 8 * MiB) == 9 * MiB,
           "chunk search keeps blocks whole and picks the least waste (9 MiB)");
    /* one by one: 6 -> [5][2 2 2][2 2 2] and 9 -> [5 2 2][2 2 2 2] both waste 1: the
     * smaller wins */
    TAP_OK(lc_chunk_search(b, NULL, 7, 8 * MiB) == 6 * MiB,
           "without blocks the smallest least-waste size is 6 MiB");
    TAP_OK(lc_chunk_search(b, g, 0, 8 * MiB) == 0, "no parameters: no chunk size");
}

static void test_block_roles(void)
{
    uint8_t r[8];
    ms_error err;
    TAP_OK(lc_block_roles(8, 2, 4, r, &err) == MS_OK && r[0] == LC_SWAP && r[1] == LC_CKPT &&
               r[2] == LC_CKPT && r[3] == LC_SWAP && r[4] == LC_CKPT && r[5] == LC_CKPT &&
               r[6] == LC_NONE && r[7] == LC_NONE,
           "interleaved layout of ProTrain Fig. 2: S C C S C C N N");
    TAP_OK(lc_block_roles(8, 3, 0, r, &err) == MS_OK && r[0] == LC_SWAP && r[2] == LC_SWAP &&
               r[3] == LC_NONE,
           "swap blocks first when nothing is checkpointed");
    TAP_OK(lc_block_roles(4, 3, 2, r, &err) == MS_ERR_INVALID,
           "n_swap + n_checkpoint beyond the blocks is refused");
}

static double sum_params(const lc_layout *L)
{
    double s = 0;
    for (size_t c = 0; c < L->n_chunks; c++) s += (double)L->chunks[c].params;
    return s;
}

static void test_runtime_hand(void)
{
    machine_profile *mp = small_machine(1e9);
    trace_t *t = tiny_trace(&mp->m, 4, 2, 1);
    lc_knobs k;
    lc_knobs_default(&k);
    k.chunk_bytes = 2 * MiB; /* several chunks in this small model */
    ptc_model *M = NULL;
    ms_error err;
    TAP_OK(t && ptc_model_new(t, &mp->m, &k, &M, &err) == MS_OK, "model of a tiny trace");
    if (!M) {
        trace_free(t);
        machine_profile_free(mp);
        return;
    }
    const lc_layout *L = ptc_layout(M);
    const char *pv = trace_get_meta(t, "params");
    uint64_t P = 0;
    if (pv) ms_parse_u64(pv, &P);
    TAP_OK(L->n_chunks >= 3 && fabs(sum_params(L) - (double)P) < 1e-9,
           "layout: %zu chunks holding all %llu parameters", L->n_chunks,
           (unsigned long long)P);
    int N = (int)L->n_chunks;
    /* all persistent, one GPU: compute, then GPU Adam over every parameter */
    ptc_config all = {N, 0, 0, 0};
    ptc_estimate e;
    TAP_OK(ptc_estimate_config(M, &all, &e, &err) == MS_OK && e.valid, "all-persistent estimate");
    double hand = (L->fwd_us + L->bwd_us + L->adam_gpu_us_per_param * sum_params(L)) / 1e6;
    TAP_OK(fabs(e.t_iter_s - hand) < 1e-9 * hand + 1e-12,
           "all persistent: T_iter = fwd + bwd + GPU Adam (%.9f vs hand %.9f s)", e.t_iter_s, hand);
    /* static memory by hand: persistent chunks with fp32 master, m and v */
    uint64_t st = 0;
    for (int c = 0; c < N; c++)
        st += L->chunk_bytes + (uint64_t)ceil(12.0 * (double)L->chunks[c].params);
    TAP_OK(e.static_bytes == st, "static bytes = sum of chunks and their optimizer states");
    /* nothing persistent, a buffer per chunk: the forward waits only for the gathers, which all
     * start at once and run back to back over the link */
    ptc_config np = {0, N, 0, 0};
    TAP_OK(ptc_estimate_config(M, &np, &e, &err) == MS_OK && e.valid, "all-gathered estimate");
    double tc = 0, h = 0, rate = mp->m.link_h2d_Bps / 1e6;
    double *ready = calloc((size_t)N, sizeof *ready);
    for (int c = 0; c < N; c++) { /* gathers in order of first need = chunk order */
        h += ceil(2.0 * (double)L->chunks[c].params) / rate;
        ready[c] = h;
    }
    for (size_t s = 0; s < L->n_steps && L->steps[s].phase == TP_FWD; s++) {
        for (uint32_t q = 0; q < L->steps[s].n_need; q++) {
            uint32_t c = L->needs[L->steps[s].need_first + q];
            if (ready[c] > tc) tc = ready[c];
        }
        tc += L->steps[s].compute_us;
    }
    free(ready);
    TAP_OK(fabs(e.t_fwd_s - tc / 1e6) < 1e-9 + 1e-9 * tc,
           "all gathered: T_fwd from the per-chunk max of compute and gather (%.9f vs %.9f s)",
           e.t_fwd_s, tc / 1e6);
    TAP_OK(e.static_bytes == (uint64_t)N * L->chunk_bytes, "all gathered: static = buffers");
    /* activation memory: checkpointing every block needs less than none, and costs recompute */
    ptc_config ck = {N, 0, 0, L->n_blocks}, sw = {N, 0, 2, 0};
    ptc_estimate eck, esw, e0;
    ptc_estimate_config(M, &all, &e0, &err);
    ptc_estimate_config(M, &ck, &eck, &err);
    ptc_estimate_config(M, &sw, &esw, &err);
    TAP_OK(eck.act_peak_bytes < e0.act_peak_bytes && eck.recompute_s > 0 && e0.recompute_s == 0,
           "checkpointing lowers the activation peak and adds recompute");
    TAP_OK(esw.act_peak_bytes < e0.act_peak_bytes && esw.host_bytes > e0.host_bytes,
           "swapping lowers the activation peak and uses host memory");
    TAP_OK(ptc_peak_lower_bound(M, &ck) <= eck.peak_bytes,
           "the pruning bound never exceeds the estimate");
    ptc_config bad = {N + 1, 0, 0, 0};
    TAP_OK(ptc_estimate_config(M, &bad, &e, &err) == MS_ERR_INVALID,
           "n_persist beyond the chunks is refused: %s", err.msg);
    ptc_config few = {0, 0, 0, 0};
    TAP_OK(ptc_estimate_config(M, &few, &e, &err) == MS_OK && !e.valid,
           "no buffer for non-persistent chunks: not a runnable configuration");
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

/* The cost model of trace t on mp with 2 MiB chunks; on failure one failed check, t and mp
 * freed, NULL. */
static ptc_model *search_model(machine_profile *mp, trace_t *t, int shard, const char *what)
{
    lc_knobs k;
    lc_knobs_default(&k);
    k.chunk_bytes = 2 * MiB;
    k.persist_shard = shard;
    ptc_model *M = NULL;
    ms_error err;
    if (!t || ptc_model_new(t, &mp->m, &k, &M, &err)) {
        TAP_OK(0, "%s: %s", what, t ? err.msg : "no trace");
        trace_free(t);
        machine_profile_free(mp);
        return NULL;
    }
    return M;
}

/* The appendix model (PTC_RT_APPENDIX) by hand on one GPU: each phase is the sum over chunks
 * of max(compute in the chunk's window, its communication), T_iter = T_fwd + max(T_bwd +
 * T_gpu_optim, T_cpu_optim). Windows: a forward step belongs to the newest chunk the forward
 * has needed; a block's backward step to its forward step's window; the backward's other
 * steps to the last forward window before the blocks, to the first after them. */
static void test_appendix_hand(void)
{
    machine_profile *mp = small_machine(1e9);
    trace_t *t = tiny_trace(&mp->m, 4, 2, 1);
    ptc_model *M = search_model(mp, t, 1, "appendix: model of a tiny trace");
    if (!M) return;
    ms_error err;
    ptc_model_set_runtime(M, PTC_RT_APPENDIX);
    TAP_OK(ptc_model_runtime(M) == PTC_RT_APPENDIX, "appendix model selected");
    const lc_layout *L = ptc_layout(M);
    int N = (int)L->n_chunks;
    double *cf = calloc((size_t)N, sizeof *cf), *cb = calloc((size_t)N, sizeof *cb);
    int *win = calloc(L->n_steps, sizeof *win);
    int w = 0, first = -1, lastw = 0, seen = 0;
    for (size_t s = 0; s < L->n_steps; s++) {
        if (L->steps[s].phase != TP_FWD) continue;
        for (uint32_t q = 0; q < L->steps[s].n_need; q++)
            if ((int)L->needs[L->steps[s].need_first + q] > w) w = (int)L->needs[L->steps[s].need_first + q];
        if (first < 0) first = w;
        win[s] = lastw = w;
        cf[w] += L->steps[s].compute_us;
    }
    for (size_t s = 0; s < L->n_steps; s++) {
        int j = L->steps[s].block;
        if (L->steps[s].phase != TP_BWD) continue;
        if (j >= 0 && L->fwd_step[j] >= 0) {
            seen = 1;
            w = win[L->fwd_step[j]];
        } else {
            w = seen ? first : lastw;
        }
        cb[w] += L->steps[s].compute_us;
    }
    /* all persistent: no communication on one GPU, T = compute + GPU Adam */
    ptc_config all = {N, 0, 0, 0};
    ptc_estimate e;
    double P = sum_params(L);
    double hand = (L->fwd_us + L->bwd_us + L->adam_gpu_us_per_param * P) / 1e6;
    ms_status st = ptc_estimate_config(M, &all, &e, &err);
    TAP_OK(st == MS_OK && e.valid && fabs(e.t_iter_s - hand) < 1e-9 * hand,
           "appendix, all persistent: compute + GPU Adam (%.9f vs hand %.9f s)", e.t_iter_s, hand);
    /* nothing persistent, a buffer per chunk (no reload in the backward): gathers in the
     * forward, gradient offloads in the backward, host Adam beside the backward */
    ptc_config np = {0, N, 0, 0};
    double tf = 0, tb = 0, cpu = 0, rate = mp->m.link_h2d_Bps / 1e6;
    for (int c = 0; c < N; c++) {
        double x = ceil(2.0 * (double)L->chunks[c].params) / rate;
        tf += cf[c] > x ? cf[c] : x;
        tb += cb[c] > x ? cb[c] : x;
        cpu += (double)L->chunks[c].params / 1e9 * 1e6;
    }
    hand = (tf + (tb > cpu ? tb : cpu)) / 1e6;
    st = ptc_estimate_config(M, &np, &e, &err);
    TAP_OK(st == MS_OK && e.valid &&
               fabs(e.t_iter_s - hand) < 1e-9 * hand && fabs(e.t_fwd_s - tf / 1e6) < 1e-12 + 1e-9 * tf &&
               fabs(e.t_cpu_optim_s - cpu / 1e6) < 1e-12 + 1e-9 * cpu,
           "appendix, all gathered: sum of per-chunk max(compute, gather / offload) (%.9f vs "
           "hand %.9f s)", e.t_iter_s, hand);
    /* the memory model is the same under both runtime models */
    ptc_estimate er;
    ptc_model_set_runtime(M, PTC_RT_RECURRENCE);
    st = ptc_estimate_config(M, &np, &er, &err);
    TAP_OK(st == MS_OK && er.peak_bytes == e.peak_bytes &&
               er.host_bytes == e.host_bytes,
           "appendix and recurrence predict the same peak (%llu bytes)",
           (unsigned long long)e.peak_bytes);
    free(cf);
    free(cb);
    free(win);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

/* The appendix model with two ranks and collectives through host memory: every chunk
 * reduces its gradients in the backward (Eq. 6 charges T_reduce on all of them), the two ring
 * halves at the duplex share; the all-gather after a persistent chunk's sharded Adam is not
 * in the formula, so the recurrence, which has it, predicts more. */
static void test_appendix_dp(void)
{
    machine_profile *mp = small_machine(1e9);
    trace_t *t = tiny_trace(&mp->m, 4, 2, 2);
    ptc_model *M = search_model(mp, t, 1, "appendix dp 2: model");
    if (!M) return;
    ms_error err;
    const lc_layout *L = ptc_layout(M);
    int N = (int)L->n_chunks;
    ptc_config all = {N, 0, 0, 0};
    ptc_estimate er, ea;
    ms_status st = ptc_estimate_config(M, &all, &er, &err);
    ptc_model_set_runtime(M, PTC_RT_APPENDIX);
    if (!st) st = ptc_estimate_config(M, &all, &ea, &err);
    /* the reduce-scatter of chunk c: (dp-1)/dp of its fp16 bytes at coll_link_eff 0.5, each
     * direction, both at the duplex share 0.75 GB/s; at least the backward's compute */
    double red = 0, share = mp->m.link_duplex_Bps / 2 / 1e6;
    for (int c = 0; c < N; c++)
        red += ceil(2.0 * (double)L->chunks[c].params * 0.5 / 0.5) / share;
    TAP_OK(st == MS_OK && ea.t_bwd_s >= red / 1e6 * (1 - 1e-9) &&
               ea.t_bwd_s >= L->bwd_us / 1e6 * (1 - 1e-9) &&
               ea.t_bwd_s <= (red + L->bwd_us) / 1e6 * (1 + 1e-9),
           "appendix dp 2, all persistent: T_bwd %.6f s between max and sum of compute %.6f s "
           "and reductions %.6f s", ea.t_bwd_s, L->bwd_us / 1e6, red / 1e6);
    TAP_OK(st == MS_OK && er.t_iter_s > ea.t_iter_s,
           "the recurrence adds the persistent all-gather the appendix leaves out (%.6f > %.6f s)",
           er.t_iter_s, ea.t_iter_s);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

/* persist_gather: with sharded optimizer states the persistent chunks' all-gathers run after
 * the GPU Adam (step: the step waits for them) or at the next iteration's start (next: the
 * forward waits for each before the chunk's first use); auto predicts the faster. */
static void test_persist_gather(void)
{
    machine_profile *mp = small_machine(1e9);
    trace_t *t = tiny_trace(&mp->m, 4, 2, 2);
    ptc_estimate e[3];
    ms_status st = t ? MS_OK : MS_ERR_INVALID;
    for (int pg = LC_PG_STEP; pg <= LC_PG_AUTO && st == MS_OK; pg++) {
        lc_knobs k;
        lc_knobs_default(&k);
        k.chunk_bytes = 2 * MiB;
        k.persist_gather = pg;
        ptc_model *M = NULL;
        ms_error err;
        st = ptc_model_new(t, &mp->m, &k, &M, &err);
        ptc_config all = {st ? 0 : (int)ptc_layout(M)->n_chunks, 0, 0, 0};
        if (!st) st = ptc_estimate_config(M, &all, &e[pg], &err);
        ptc_model_free(M);
    }
    TAP_OK(st == MS_OK && e[LC_PG_STEP].persist_gather == LC_PG_STEP &&
               e[LC_PG_NEXT].persist_gather == LC_PG_NEXT &&
               e[LC_PG_NEXT].t_gpu_optim_s < e[LC_PG_STEP].t_gpu_optim_s &&
               e[LC_PG_NEXT].t_fwd_s > e[LC_PG_STEP].t_fwd_s,
           "next moves the all-gathers from after the GPU Adam (%.6f -> %.6f s) into the forward "
           "(%.6f -> %.6f s)", e[0].t_gpu_optim_s, e[1].t_gpu_optim_s, e[0].t_fwd_s, e[1].t_fwd_s);
    double lo = e[0].t_iter_s < e[1].t_iter_s ? e[0].t_iter_s : e[1].t_iter_s;
    TAP_OK(st == MS_OK && e[LC_PG_AUTO].t_iter_s == lo &&
               e[LC_PG_AUTO].persist_gather == (e[1].t_iter_s < e[0].t_iter_s ? LC_PG_NEXT
                                                                               : LC_PG_STEP),
           "auto predicts the faster placement (%.6f s: step %.6f, next %.6f)",
           e[2].t_iter_s, e[0].t_iter_s, e[1].t_iter_s);
    trace_free(t);
    machine_profile_free(mp);
}

static void test_host_adam_bound(void)
{
    machine_profile *mp = small_machine(1e6); /* a very slow host Adam */
    trace_t *t = tiny_trace(&mp->m, 4, 2, 1);
    lc_knobs k;
    lc_knobs_default(&k);
    k.chunk_bytes = 2 * MiB;
    ptc_model *M = NULL;
    ms_error err;
    if (!t || ptc_model_new(t, &mp->m, &k, &M, &err)) {
        TAP_OK(0, "model with a slow host Adam: %s", err.msg);
        trace_free(t);
        machine_profile_free(mp);
        return;
    }
    const lc_layout *L = ptc_layout(M);
    ptc_config c = {0, (int)L->n_chunks, 0, 0};
    ptc_estimate e;
    ptc_estimate_config(M, &c, &e, &err);
    double adam = sum_params(L) / 1e6;
    TAP_OK(e.t_iter_s >= adam && e.t_iter_s <= adam + e.t_fwd_s + e.t_bwd_s + 1e-3,
           "host-Adam bound: T_iter %.3f s within [adam %.3f, adam + fwd + bwd]", e.t_iter_s, adam);
    TAP_OK(fabs(e.t_iter_s - (e.t_fwd_s + fmax(e.t_bwd_s + e.t_gpu_optim_s, e.t_cpu_optim_s))) <
               1e-6,
           "T_iter = T_fwd + max(T_bwd + T_gpu_optim, T_cpu_optim)");
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}


/* Whether n_swap sw is beyond the search's bandwidth bound for (np, nb): the brute forces
 * below enumerate the space the search is defined over. */
static int over_bw(const ptc_model *M, int np, int nb, int sw)
{
    int lim = ptc_swap_bw_limit(M, np, nb);
    return lim >= 0 && sw > lim;
}

/* Search options over the whole space (any number of swaps) with the given tie band. */
static ptc_search_opts search_opts(double tie)
{
    ptc_search_opts so;
    ptc_search_opts_default(&so);
    so.tie_tol = tie;
    so.max_swap = -1;
    return so;
}

static void test_search_brute(void)
{
    machine_profile *mp = small_machine(5e7);
    mp->m.gpu_hbm_bytes = UINT64_C(96) << 20; /* tight: some configurations do not fit */
    trace_t *t = tiny_trace(&mp->m, 4, 4, 1);
    ptc_model *M = search_model(mp, t, 1, "model for the brute force");
    if (!M) return;
    const lc_layout *L = ptc_layout(M);
    ptc_search_opts so = search_opts(0);
    ms_error err;
    ptc_search_result r;
    TAP_OK(ptc_search(M, &so, &r, &err) == MS_OK, "search runs");
    /* brute force over the whole space, same capacity, same swap limit */
    int N = (int)L->n_chunks, B = L->n_blocks, maxsw = B;
    int nint = ptc_swap_interval(M);
    maxsw = (B + nint - 1) / nint;
    double best = INFINITY;
    size_t feasible = 0, fits_bad = 0;
    for (int np = 0; np <= N; np++)
        for (int nb = 0; nb <= N - np; nb++)
            for (int sw = 0; sw <= maxsw && !over_bw(M, np, nb, sw); sw++)
                for (int ck = 0; ck + sw <= B; ck++) {
                    ptc_config c = {np, nb, sw, ck};
                    ptc_estimate e;
                    if (ptc_estimate_config(M, &c, &e, &err) || !e.valid) continue;
                    if (e.peak_bytes > r.capacity_bytes) continue;
                    feasible++;
                    if (e.t_iter_s < best) best = e.t_iter_s;
                    if (r.found && e.t_iter_s < r.best_est.t_iter_s * (1 - 1e-9)) fits_bad++;
                }
    TAP_OK(r.found && feasible > 0 && fabs(r.best_est.t_iter_s - best) <= 1e-9 * best,
           "search finds the brute-force optimum (%.6f s among %zu feasible configurations)",
           best, feasible);
    TAP_OK(r.found && r.best_est.peak_bytes <= r.capacity_bytes && fits_bad == 0,
           "the pick fits and nothing feasible is faster");
    TAP_OK(r.found && !memcmp(&r.fastest, &r.best, sizeof r.best) &&
               r.fastest_est.t_iter_s == r.best_est.t_iter_s,
           "without a tie band the fastest reported is the pick");
    TAP_OK(r.evaluated < r.space, "pruning: %zu of %zu configurations evaluated", r.evaluated,
           r.space);
    uint64_t cap = r.capacity_bytes;
    ptc_search_result_clear(&r);
    /* the appendix model: the search (unbounded in time) finds its brute-force optimum too */
    ptc_model_set_runtime(M, PTC_RT_APPENDIX);
    double best_a = INFINITY;
    for (int np = 0; np <= N; np++)
        for (int nb = 0; nb <= N - np; nb++)
            for (int sw = 0; sw <= maxsw && !over_bw(M, np, nb, sw); sw++)
                for (int ck = 0; ck + sw <= B; ck++) {
                    ptc_config c = {np, nb, sw, ck};
                    ptc_estimate e;
                    if (ptc_estimate_config(M, &c, &e, &err) || !e.valid) continue;
                    if (e.peak_bytes <= cap && e.t_iter_s < best_a) best_a = e.t_iter_s;
                }
    ms_status st = ptc_search(M, &so, &r, &err);
    TAP_OK(st == MS_OK && r.found && isfinite(best_a) &&
               fabs(r.best_est.t_iter_s - best_a) <= 1e-9 * best_a,
           "appendix model: search finds the brute-force optimum (%.6f s)", best_a);
    ptc_search_result_clear(&r);
    ptc_model_set_runtime(M, PTC_RT_RECURRENCE);
    /* with the default tie tolerance the pick is within it of the optimum */
    ptc_search_opts_default(&so);
    so.max_swap = -1;
    ptc_search(M, &so, &r, &err);
    TAP_OK(r.found && r.best_est.t_iter_s <= best * (1 + so.tie_tol) + 1e-12,
           "near-tie pick within the tolerance (%.0f %%) of the optimum", 100 * so.tie_tol);
    TAP_OK(r.found && fabs(r.fastest_est.t_iter_s - best) <= 1e-9 * best &&
               r.fastest.n_persist <= r.best.n_persist,
           "with the band the strict optimum is still reported (%.6f s), the pick persisting "
           "as many chunks or more (%d vs %d)", r.fastest_est.t_iter_s, r.best.n_persist,
           r.fastest.n_persist);
    ptc_search_result_clear(&r);
    /* nothing fits: the closest configuration is reported */
    so.capacity_bytes = UINT64_C(1) << 20;
    TAP_OK(ptc_search(M, &so, &r, &err) == MS_OK && !r.found && r.closest_est.valid &&
               r.closest_est.peak_bytes > r.capacity_bytes,
           "a device that fits nothing: no configuration, the closest one named");
    ptc_search_result_clear(&r);
    /* the host cannot hold the states */
    ptc_search_opts_default(&so);
    so.host_capacity_bytes = 1024;
    TAP_OK(ptc_search(M, &so, &r, &err) == MS_OK && (!r.found || r.best.n_persist == N),
           "a host without memory: only all-persistent configurations remain");
    ptc_search_result_clear(&r);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

/* The time bound against every estimate, and the bounded search against the unbounded one
 * and a brute force with the same tie rule, on small cases: one GPU, and two GPUs whose
 * collectives go over the link (with the persistent chunks sharded or whole). */
static int prefer(const ptc_config *a, const ptc_config *b)
{
    if (a->n_persist != b->n_persist) return a->n_persist > b->n_persist;
    if (a->n_ckpt != b->n_ckpt) return a->n_ckpt < b->n_ckpt;
    if (a->n_swap != b->n_swap) return a->n_swap < b->n_swap;
    return a->n_buffer < b->n_buffer;
}

static void bound_case(const char *name, int layers, uint64_t batch, int dp, int shard,
                       uint64_t hbm, double tie)
{
    machine_profile *mp = small_machine(5e7);
    mp->m.gpu_hbm_bytes = hbm;
    mp->m.node_gpus = dp;
    trace_t *t = tiny_trace(&mp->m, layers, batch, dp);
    ptc_model *M = search_model(mp, t, shard, name);
    if (!M) return;
    const lc_layout *L = ptc_layout(M);
    ptc_search_opts so = search_opts(tie);
    ms_error err;
    so.keep_all = 1;
    ptc_search_result rb, rx;
    int ok = ptc_search(M, &so, &rb, &err) == MS_OK;
    so.no_bound = 1;
    ok = ok && ptc_search(M, &so, &rx, &err) == MS_OK;
    int N = (int)L->n_chunks, B = L->n_blocks, nint = ptc_swap_interval(M);
    int maxsw = (B + nint - 1) / nint;
    size_t n = 0, below = 0, feasible = 0;
    double best = INFINITY;
    for (int pass = 0; pass < 2; pass++) {
        ptc_config pick = {-1, 0, 0, 0};
        for (int np = 0; np <= N; np++)
            for (int nb = np == N ? 0 : 1; nb <= N - np; nb++)
                for (int sw = 0; sw <= maxsw; sw++)
                    for (int ck = 0; ck + sw <= B; ck++) {
                        ptc_config c = {np, nb, sw, ck};
                        ptc_estimate e;
                        if (ptc_estimate_config(M, &c, &e, &err) || !e.valid) continue;
                        if (pass == 0) {
                            n++;
                            below += e.t_iter_s < ptc_time_lower_bound(M, &c) * (1 - 1e-9);
                        }
                        if (over_bw(M, np, nb, sw)) continue; /* the search's n_swap bound */
                        if (e.peak_bytes > rx.capacity_bytes) continue;
                        /* the search takes, per (np, nb, sw), the fewest checkpoints that fit */
                        ptc_config f = c;
                        int fewer = 0;
                        for (f.n_ckpt = 0; f.n_ckpt < ck && !fewer; f.n_ckpt++) {
                            ptc_estimate g;
                            fewer = !ptc_estimate_config(M, &f, &g, &err) && g.valid &&
                                    g.peak_bytes <= rx.capacity_bytes;
                        }
                        if (fewer) continue;
                        if (pass == 0) {
                            feasible++;
                            if (e.t_iter_s < best) best = e.t_iter_s;
                        } else if (e.t_iter_s <= best * (1 + tie) &&
                                   (pick.n_persist < 0 || prefer(&c, &pick)))
                            pick = c;
                    }
        if (pass == 1)
            TAP_OK(ok && rb.found && feasible &&
                       !memcmp(&rb.best, &pick, sizeof pick) &&
                       !memcmp(&rx.best, &pick, sizeof pick),
                   "%s: bounded, unbounded and brute-force picks agree (%d %d %d %d; %zu "
                   "evaluated with the time bound, %zu without)", name, pick.n_persist,
                   pick.n_buffer, pick.n_swap, pick.n_ckpt, rb.evaluated, rx.evaluated);
    }
    TAP_OK(n > 0 && below == 0, "%s: no estimate below the time bound (%zu configurations)",
           name, n);
    ptc_search_result_clear(&rb);
    ptc_search_result_clear(&rx);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

static void test_search_bound(void)
{
    /* capacities where the pick mixes buffers, checkpoints and swaps */
    bound_case("1 GPU, 32 MiB", 4, 4, 1, 1, UINT64_C(32) << 20, 0);
    bound_case("1 GPU, 40 MiB, 3 % ties", 4, 4, 1, 1, UINT64_C(40) << 20, 0.03);
    bound_case("2 GPUs over the link, sharded, 24 MiB", 4, 4, 2, 1, UINT64_C(24) << 20, 0.03);
    bound_case("2 GPUs over the link, whole, 40 MiB", 6, 2, 2, 0, UINT64_C(40) << 20, 0);
}

static void test_bad_chunk(void)
{
    machine_profile *mp = small_machine(1e9);
    trace_t *t = tiny_trace(&mp->m, 2, 1, 1);
    lc_knobs k;
    lc_knobs_default(&k);
    k.chunk_bytes = 4096;
    ptc_model *M = NULL;
    ms_error err;
    ms_status st = t ? ptc_model_new(t, &mp->m, &k, &M, &err) : MS_ERR_INVALID;
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "smaller than the largest parameter"),
           "a chunk smaller than a parameter is refused: %s", err.msg);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

static void test_real_search_speed(void)
{
    machine_profile *mp = NULL;
    ms_error err;
    if (machine_load_named("rtx3090-pcie3", &mp, &err)) {
        TAP_OK(0, "rtx3090 profile: %s", err.msg);
        return;
    }
    gen_config c;
    gen_config_default(&c);
    model_lookup("gpt2-10b", &c.model, &err);
    c.seq = 1024;
    c.micro_batch = 2;
    c.dp = 4;
    trace_t *t = NULL;
    gen_trace(&c, &mp->m, &t, &err);
    lc_knobs k;
    lc_knobs_default(&k);
    ptc_model *M = NULL;
    ptc_search_result r;
    memset(&r, 0, sizeof r);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int ok = t && ptc_model_new(t, &mp->m, &k, &M, &err) == MS_OK &&
             ptc_search(M, NULL, &r, &err) == MS_OK;
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    TAP_OK(ok && r.found && ptc_layout(M)->n_chunks == 49,
           "GPT2-10B on 4 x RTX 3090: 49 chunks (Table 4), a configuration found");
    TAP_NOTE("GPT2-10B search: %.3f s (profile + search), %zu evaluated of %zu", s, r.evaluated,
             r.space);
    TAP_OK(s < 2.0, "profile and search well under 2 s (ProTrain: 0.06 s)");
    ptc_search_result_clear(&r);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

/* The bandwidth bound on n_swap (docs/PROTRAIN.md §5): parameter traffic leaves fewer swaps,
 * a link twice as fast twice as many, and the search never evaluates beyond it (and does with
 * swap_bw=0 where it binds). */
static void test_swap_bw(void)
{
    machine_profile *mp = small_machine(5e7);
    mp->m.node_gpus = 2;
    mp->m.link_h2d_Bps *= 10; /* a block's swap-out a third of the forward at most */
    mp->m.link_d2h_Bps *= 10;
    mp->m.link_duplex_Bps *= 10;
    trace_t *t = tiny_trace(&mp->m, 6, 4, 2);
    ptc_model *M = search_model(mp, t, 1, "model for the swap bound");
    if (!M) return;
    int N = (int)ptc_layout(M)->n_chunks, B = ptc_layout(M)->n_blocks;
    int l0 = ptc_swap_bw_limit(M, 0, N), lN = ptc_swap_bw_limit(M, N, 0);
    TAP_OK(l0 >= 0 && l0 < lN, "gathers over the link leave fewer swaps: %d with no chunk "
           "persistent, %d with all", l0, lN);
    TAP_OK(ptc_swap_bw_limit(M, 0, 0) == -1 && ptc_swap_bw_limit(M, N + 1, 0) == -1,
           "no bound for buffers that cannot serve the program or out-of-range arguments");
    ptc_search_opts so = search_opts(0);
    so.keep_all = 1;
    so.no_bound = 1;
    ms_error err;
    int beyond[2] = {0, 0};
    for (int off = 0; off < 2; off++) {
        so.swap_bw = !off;
        ptc_search_result r;
        if (ptc_search(M, &so, &r, &err) != MS_OK) continue;
        for (size_t i = 0; i < r.n_all; i++) {
            const ptc_config *c = &r.all[i];
            beyond[off] += c->n_swap > ptc_swap_bw_limit(M, c->n_persist, c->n_buffer);
        }
        ptc_search_result_clear(&r);
    }
    TAP_OK(beyond[0] == 0 && beyond[1] > 0, "the search stays within the bound (%d beyond it; "
           "%d without the bound)", beyond[0], beyond[1]);
    ptc_model_free(M);
    /* one GPU, everything persistent: no parameter traffic, the bound scales with the link */
    mp->m.node_gpus = 1;
    trace_free(t);
    t = tiny_trace(&mp->m, 6, 4, 1);
    int lim[2] = {-1, -1};
    for (int k = 0; k < 2; k++) {
        M = search_model(mp, t, 1, "model for the swap bound, one GPU");
        if (!M) return;
        lim[k] = ptc_swap_bw_limit(M, (int)ptc_layout(M)->n_chunks, 0);
        ptc_model_free(M);
        mp->m.link_h2d_Bps *= 2;
        mp->m.link_d2h_Bps *= 2;
        mp->m.link_duplex_Bps *= 2;
    }
    TAP_OK(lim[0] >= 1 && lim[0] <= B && (lim[1] == 2 * lim[0] || lim[1] == 2 * lim[0] + 1),
           "twice the link rate, twice the swaps (%d, then %d)", lim[0], lim[1]);
    trace_free(t);
    machine_profile_free(mp);
}

int main(void)
{
    test_chunk_search();
    test_block_roles();
    test_runtime_hand();
    test_appendix_hand();
    test_appendix_dp();
    test_persist_gather();
    test_host_adam_bound();
    test_search_brute();
    test_search_bound();
    test_swap_bw();
    test_bad_chunk();
    test_real_search_speed();
    return tap_done();
}

/* test_protrain.c — chunk lowering (planners/protrain/lower_chunks.c), the protrain policy and the
 * offload baselines, end to end through the simulator: the schedule's structure (chunk
 * buffers allocated once, gathers before use, reuse in backward, the buffers' eviction order
 * (three rotate in the backward), host Adam on the host
 * stream, GPU Adam for persistent chunks, recompute and swap per block, when swapped blocks
 * come back), every searched
 * configuration re-simulated against its prediction, determinism, and bad input (traces the
 * lowering cannot take, too few buffers, impossible block counts, machines without a host
 * Adam rate, malformed knobs, nothing fitting the device or the host). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planners/protrain/cost_protrain.h"
#include "planners/protrain/lower_chunks.h"
#include "planners/protrain/policy_offload_baselines.h"
#include "planners/protrain/policy_protrain.h"
#include "sim/exec.h"
#include "tests/tap.h"
#include "traces/gen.h"

#define MiB (UINT64_C(1) << 20)

static machine_profile *load(const char *name)
{
    machine_profile *p = NULL;
    ms_error err;
    if (machine_load_named(name, &p, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return p;
}

static trace_t *gen(const machine_t *m, const char *model, uint64_t seq, uint64_t batch, int dp,
                    int zero3)
{
    gen_config c;
    gen_config_default(&c);
    ms_error err;
    if (model_lookup(model, &c.model, &err)) return NULL;
    c.seq = seq;
    c.micro_batch = batch;
    c.dp = dp;
    c.zero3 = zero3;
    trace_t *t = NULL;
    if (gen_trace(&c, m, &t, &err)) TAP_NOTE("%s", err.msg);
    return t;
}

/* The profile `machine` and a trace of `model` on it; NULL (reported as a failure, the profile
 * freed) when either cannot be made. */
static trace_t *workload(const char *machine, const char *model, uint64_t seq, uint64_t batch,
                         int dp, machine_profile **mp)
{
    *mp = load(machine);
    trace_t *t = *mp ? gen(&(*mp)->m, model, seq, batch, dp, 0) : NULL;
    if (!t) {
        TAP_OK(0, "%s trace on %s", model, machine);
        machine_profile_free(*mp);
        *mp = NULL;
    }
    return t;
}

static plan_t *chunk_plan(int np, int nb, int sw, int ck, const char *extra_k,
                          const char *extra_v)
{
    lc_knobs k;
    lc_knobs_default(&k);
    k.chunk_bytes = 2 * MiB;
    k.n_persist = np;
    k.n_buffer = nb;
    k.n_swap = sw;
    k.n_ckpt = ck;
    plan_t *p = plan_new("protrain", "caching");
    if (lc_knobs_to_plan(&k, p, NULL)) return NULL;
    if (extra_k) plan_set_knob(p, extra_k, extra_v);
    return p;
}

static ms_status run(const trace_t *t, const machine_t *m, const plan_t *p, schedule_t **sp,
                     lc_report *rep, sim_result *r, ms_error *err)
{
    schedule_t *s = NULL;
    ms_status st = lower_chunks_report(t, p, m, NULL, &s, rep, err);
    if (!st) st = sched_validate(s, err);
    if (!st && r) {
        sim_opts so;
        sim_opts_default(&so);
        so.trace = t;
        so.host_capacity_bytes = m->host_mem_bytes;
        res_init(r);
        st = sim_execute(s, m, &so, r, err);
    }
    if (sp) *sp = s;
    else sched_free(s);
    return st;
}

/* counts actions of kind k on stream s whose tensor is a chunk id of `kind` (0: any) */
static size_t count(const schedule_t *s, sched_kind k, int stream, int idkind)
{
    size_t n = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        int kd = 0;
        if (a->kind != k || (stream >= 0 && (int)a->stream != stream)) continue;
        if (idkind && (!lc_id_parse(a->tensor, &kd, NULL) || kd != idkind)) continue;
        n++;
    }
    return n;
}

/* 1 when every ALLOC of a chunk id of `idkind` carries block kind b, and there is one */
static int alloc_kinds(const schedule_t *s, int idkind, sched_block b)
{
    size_t n = 0, right = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        int kd;
        if (a->kind != SA_ALLOC || !lc_id_parse(a->tensor, &kd, NULL) || kd != idkind) continue;
        n++;
        right += a->block == b;
    }
    return n > 0 && right == n;
}

static void test_knobs(void)
{
    const lower_backend *b = lower_find("chunks");
    TAP_OK(b && b->lower == lower_chunks && !b->rounding_buffers,
           "the lowering named chunks is lower_chunks, without rounding buffers");
    plan_t *p = chunk_plan(2, 3, 1, 4, "coll", "link");
    lc_knobs k;
    ms_error err;
    plan_t *q = plan_new("protrain", "caching");
    lc_knobs_default(&k);
    TAP_OK(q && !strcmp(q->lowering, "tensor") && lc_knobs_to_plan(&k, q, &err) == MS_OK &&
               !strcmp(q->lowering, "chunks") && !strcmp(plan_get_knob(q, "chunks"), "1"),
           "lc_knobs_to_plan names the chunk lowering in the plan (and keeps the old marker)");
    plan_free(q);
    TAP_OK(lc_knobs_from_plan(p, &k, &err) == MS_OK && k.n_persist == 2 && k.n_buffer == 3 &&
               k.n_swap == 1 && k.n_ckpt == 4 && k.coll == LC_COLL_LINK &&
               k.chunk_bytes == 2 * MiB && k.persist_shard == 1,
           "knobs round-trip through the plan");
    TAP_OK(k.persist_gather == LC_PG_STEP, "persist_gather defaults to step");
    plan_set_knob(p, "persist_gather", "next");
    TAP_OK(lc_knobs_from_plan(p, &k, &err) == MS_OK && k.persist_gather == LC_PG_NEXT,
           "persist_gather=next read back");
    plan_set_knob(p, "persist_gather", "later");
    TAP_OK(lc_knobs_from_plan(p, &k, &err) == MS_ERR_INVALID && strstr(err.msg, "persist_gather"),
           "persist_gather=later refused: %s", err.msg);
    plan_set_knob(p, "persist_gather", "step");
    plan_set_knob(p, "n_persist", "abc");
    TAP_OK(lc_knobs_from_plan(p, &k, &err) == MS_ERR_INVALID && strstr(err.msg, "n_persist"),
           "a malformed knob is named: %s", err.msg);
    /* pinned host tensors round up to a power of two (PyTorch's CachingHostAllocator) */
    lc_knobs_default(&k);
    k.host_bytes_per_param = 16;
    TAP_OK(lc_host_chunk_bytes(&k, 3 * MiB) == 48 * MiB, "host states: 16 B per parameter");
    k.host_pinned_tensors = 2;
    k.host_pinned_bytes_per_param = 4;
    TAP_OK(lc_host_chunk_bytes(&k, 3 * MiB) == 24 * MiB + 2 * 16 * MiB,
           "two pinned 12 MiB tensors take 16 MiB each, the other 8 B per parameter exact");
    TAP_OK(lc_host_chunk_bytes(&k, MiB) == 16 * MiB, "a power of two is not rounded");
    plan_set_knob(p, "chunks", "1");
    plan_set_knob(p, "n_persist", "2");
    plan_set_knob(p, "host_bytes_per_param", "6");
    plan_set_knob(p, "host_pinned_tensors", "2");
    plan_set_knob(p, "host_pinned_bytes_per_param", "4");
    TAP_OK(lc_knobs_from_plan(p, &k, &err) == MS_ERR_INVALID && strstr(err.msg, "host_pinned"),
           "pinned tensors beyond the host bytes refused: %s", err.msg);
    plan_free(p);
}

/* In the backward every resident chunk is finished; a gather must evict the one finished
 * longest ago (ProTrain's predefined eviction order), so that with three buffers it can be
 * issued two steps ahead of its use, while the step before it runs and that step's
 * predecessor offloads: evicting the chunk of the step just done would make every gather
 * wait for that step's gradient offload. */
static void test_eviction_order(void)
{
    machine_profile *mp = load("rtx3090-pcie3");
    const machine_t *m = mp ? &mp->m : NULL;
    trace_t *t = m ? gen(m, "dims:12,256,4,1024,1000", 128, 2, 1, 0) : NULL;
    lc_knobs k;
    lc_knobs_default(&k);
    k.chunk_bytes = 2 * MiB;
    lc_layout *L = NULL;
    lc_bufplan bp;
    ms_error err = {0};
    if (!t || lc_layout_new(t, m, &k, &L, &err) || lc_bufplan_make(L, 0, 3, &k, &bp, &err)) {
        TAP_OK(0, "buffer plan with 3 buffers: %s", err.msg);
        lc_layout_free(L);
        trace_free(t);
        machine_profile_free(mp);
        return;
    }
    int n = 0, ahead = 0;
    for (size_t i = 0; i < bp.n_loads; i++) {
        const lc_load *ld = &bp.loads[i];
        if (L->steps[ld->step].phase != TP_BWD || ld->rel_kind != LC_REL_OFFLOAD) continue;
        n++;
        ahead += ld->step - ld->emit_after >= 2;
    }
    TAP_OK(n >= (int)L->n_chunks - 4 && ahead == n,
           "3 buffers, %zu chunks: each of the backward's %d re-gathers released two steps "
           "ahead (%d)", L->n_chunks, n, ahead);
    lc_bufplan_clear(&bp);
    lc_layout_free(L);
    trace_free(t);
    machine_profile_free(mp);
}

/* When swapped blocks come back in backward (lc_swap_issue): fixed leads and the timely
 * rule, and what the timely rule buys on a link slow enough that one block's backward cannot
 * hide a swap-in. */
static void test_swap_issue(void)
{
    uint8_t roles[16];
    int32_t at[16];
    lc_block_roles(10, 2, 6, roles, NULL); /* managed 0..7, swaps 0 and 4 */
    lc_swap_issue(roles, 10, 0, at);
    TAP_OK(at[0] == 3 && at[4] == 7 && at[1] == -1 && at[8] == -1,
           "timely: swap block 0 after block 4's backward (at 3: %d), block 4 after the last "
           "managed block's (at 7: %d)", at[0], at[4]);
    lc_swap_issue(roles, 10, 1, at);
    TAP_OK(at[0] == 1 && at[4] == 5, "lead 1: one block ahead (%d, %d)", at[0], at[4]);
    lc_swap_issue(roles, 10, 9, at);
    TAP_OK(at[0] == 9 && at[4] == 10, "lead 9: block 4 at the backward's start (%d, %d)", at[0],
           at[4]);
    lc_block_roles(4, 3, 0, roles, NULL); /* adjacent swap blocks 0, 1, 2 */
    lc_swap_issue(roles, 4, 0, at);
    TAP_OK(at[0] == 1 && at[1] == 2 && at[2] == 3, "timely, adjacent swaps: one block ahead "
           "(%d %d %d)", at[0], at[1], at[2]);

    machine_profile *mp;
    trace_t *t = workload("rtx3090-pcie3", "dims:12,256,4,1024,1000", 512, 4, 1, &mp);
    if (!t) return;
    mp->m.link_h2d_Bps = mp->m.link_d2h_Bps = 2e9;
    mp->m.link_duplex_Bps = 4e9;
    double it[2] = {0, 0};
    uint64_t peak[2] = {0, 0};
    for (int lead = 0; lead < 2; lead++) {
        plan_t *p = chunk_plan(12, 0, 2, 8, "swap_lead", lead ? "1" : "0");
        lc_report rep;
        sim_result r;
        ms_error err;
        ms_status st = run(t, &mp->m, p, NULL, &rep, &r, &err);
        TAP_OK(st == MS_OK && r.status == RS_OK, "swap_lead=%d simulates: %s", lead,
               st ? err.msg : res_status_name(r.status));
        it[lead] = r.iter_time_s;
        peak[lead] = r.peak_allocated_bytes;
        plan_free(p);
    }
    TAP_OK(it[0] < it[1] * 0.99, "timely prefetch hides what one block ahead cannot: %.6f s < "
           "%.6f s", it[0], it[1]);
    TAP_OK(peak[0] <= peak[1] + peak[1] / 20, "at a peak within 5 %% of lead 1's (%.1f vs %.1f "
           "MiB)", (double)peak[0] / MiB, (double)peak[1] / MiB);
    trace_free(t);
    machine_profile_free(mp);
}

static void test_structure(void)
{
    machine_profile *mp = load("rtx3090-pcie3");
    trace_t *t = mp ? gen(&mp->m, "dims:4,256,4,1024,1000", 128, 2, 1, 0) : NULL;
    TAP_OK(t != NULL, "tiny trace on the RTX 3090 profile");
    if (!t) {
        machine_profile_free(mp);
        return;
    }
    ms_error err;
    lc_knobs k;
    lc_knobs_default(&k);
    k.chunk_bytes = 2 * MiB;
    lc_layout *L = NULL;
    lc_layout_new(t, &mp->m, &k, &L, &err);
    int N = L ? (int)L->n_chunks : 0;
    TAP_OK(N >= 3, "the tiny model spans %d chunks", N);
    /* persist_gather=auto is for the search; a plan to lower names a placement */
    plan_t *p = chunk_plan(1, 2, 1, 1, "persist_gather", "auto");
    schedule_t *s = NULL;
    TAP_OK(p && lower_chunks(t, p, &mp->m, NULL, &s, &err) == MS_ERR_INVALID &&
               strstr(err.msg, "persist_gather=auto"),
           "a plan with persist_gather=auto is refused: %s", err.msg);
    sched_free(s);
    s = NULL;
    plan_free(p);
    /* one persistent chunk, two buffers, one swapped and one checkpointed block */
    p = chunk_plan(1, 2, 1, 1, NULL, NULL);
    lc_report rep;
    sim_result r;
    ms_status st = run(t, &mp->m, p, &s, &rep, &r, &err);
    TAP_OK(st == MS_OK && r.status == RS_OK, "lowered, validated and simulated: %s",
           st ? err.msg : res_status_name(r.status));
    if (st == MS_OK) {
        TAP_OK(count(s, SA_ALLOC, -1, LC_ID_BUFFER) == 2 &&
                   count(s, SA_FREE, -1, LC_ID_BUFFER) == 0,
               "chunk buffers allocated once, never freed");
        TAP_OK(count(s, SA_ALLOC, -1, LC_ID_PERSIST) == 1, "one persistent chunk allocated once");
        TAP_OK(alloc_kinds(s, LC_ID_PERSIST, SB_CHUNK) && alloc_kinds(s, LC_ID_BUFFER, SB_STAGING),
               "block kinds: the persistent chunk is a chunk, the buffers are staging");
        TAP_OK(count(s, SA_HOST_COMPUTE, SS_HOST, 0) == (size_t)(N - 1) * 2 &&
                   count(s, SA_HOST_COMPUTE, -1, 0) == count(s, SA_HOST_COMPUTE, SS_HOST, 0),
               "host Adam of every non-persistent chunk, each iteration, on the host stream");
        TAP_OK(rep.gpu_adam == 2, "GPU Adam of the persistent chunk each iteration");
        TAP_OK(rep.recompute_ops > 0 && r.recompute_s > 0, "the checkpointed block is recomputed");
        TAP_OK(rep.swapped_tensors > 0 && r.host_peak_bytes > rep.host_state_bytes,
               "the swapped block goes to host memory");
        TAP_OK(count(s, SA_COPY_H2D, SS_H2D, LC_ID_BUFFER) >= rep.loads,
               "every gather is a copy into a chunk buffer on the H2D stream");
    }
    sched_free(s);
    plan_free(p);
    /* all chunks cached: the backward reuses every one of them */
    p = chunk_plan(0, N, 0, 0, NULL, NULL);
    st = run(t, &mp->m, p, NULL, &rep, &r, &err);
    TAP_OK(st == MS_OK && rep.loads == (uint64_t)N * 2 && rep.reused == (uint64_t)N * 2,
           "one buffer per chunk: gathered once in forward, reused in backward (%llu, %llu)",
           (unsigned long long)rep.loads, (unsigned long long)rep.reused);
    plan_free(p);
    /* gathers before use: on a slow link the iteration cannot beat the gathers */
    machine_profile *slow = load("rtx3090-pcie3");
    slow->m.link_h2d_Bps = slow->m.link_d2h_Bps = 1e8;
    slow->m.link_duplex_Bps = 2e8;
    p = chunk_plan(0, 2, 0, 0, NULL, NULL);
    st = run(t, &slow->m, p, NULL, &rep, &r, &err);
    double gathers = (double)rep.h2d_bytes / 2 / 1e8; /* one of the two iterations */
    TAP_OK(st == MS_OK && r.status == RS_OK && r.iter_time_s >= gathers * 0.999,
           "compute waits for its gathers: %.4f s >= %.4f s of H2D", r.iter_time_s, gathers);
    plan_free(p);
    /* host Adam overlapped with the backward beats host Adam after it */
    slow->m.link_h2d_Bps = slow->m.link_d2h_Bps = 15.8e9;
    slow->m.link_duplex_Bps = 28.7e9;
    slow->m.host_adam_params_per_s = 2e8;
    sim_result ro, rn;
    p = chunk_plan(0, N, 0, 0, NULL, NULL);
    run(t, &slow->m, p, NULL, &rep, &ro, &err);
    plan_set_knob(p, "overlap_host_adam", "0");
    run(t, &slow->m, p, NULL, &rep, &rn, &err);
    TAP_OK(ro.iter_time_s < rn.iter_time_s, "overlapped host Adam: %.6f s < %.6f s after backward",
           ro.iter_time_s, rn.iter_time_s);
    plan_free(p);
    /* determinism */
    schedule_t *s1 = NULL, *s2 = NULL;
    p = chunk_plan(1, 2, 1, 1, NULL, NULL);
    run(t, &mp->m, p, &s1, NULL, NULL, &err);
    run(t, &mp->m, p, &s2, NULL, NULL, &err);
    char *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    FILE *f1 = open_memstream(&b1, &n1), *f2 = open_memstream(&b2, &n2);
    sched_dump(s1, f1);
    sched_dump(s2, f2);
    fclose(f1);
    fclose(f2);
    TAP_OK(n1 > 0 && n1 == n2 && !memcmp(b1, b2, n1), "the same inputs give the same schedule");
    free(b1);
    free(b2);
    sched_free(s1);
    sched_free(s2);
    plan_free(p);
    /* bad configurations */
    p = chunk_plan(0, 0, 0, 0, NULL, NULL);
    TAP_OK(run(t, &mp->m, p, NULL, NULL, NULL, &err) == MS_ERR_INVALID &&
               strstr(err.msg, "n_buffer"),
           "no buffer for non-persistent chunks: %s", err.msg);
    plan_free(p);
    p = chunk_plan(N, 0, 3, 3, NULL, NULL);
    TAP_OK(run(t, &mp->m, p, NULL, NULL, NULL, &err) == MS_ERR_INVALID,
           "more swapped + checkpointed blocks than blocks: %s", err.msg);
    plan_free(p);
    p = chunk_plan(0, 2, 0, 0, "chunk_bytes", "4K");
    TAP_OK(run(t, &mp->m, p, NULL, NULL, NULL, &err) == MS_ERR_INVALID &&
               strstr(err.msg, "largest parameter"),
           "a chunk smaller than the largest parameter: %s", err.msg);
    plan_free(p);
    slow->m.host_adam_params_per_s = 0;
    p = chunk_plan(0, 2, 0, 0, NULL, NULL);
    TAP_OK(run(t, &slow->m, p, NULL, NULL, NULL, &err) == MS_ERR_INVALID &&
               strstr(err.msg, "adam"),
           "a machine without a host Adam rate: %s", err.msg);
    plan_free(p);
    trace_t *z = gen(&mp->m, "dims:4,256,4,1024,1000", 128, 2, 2, 1);
    p = chunk_plan(0, 2, 0, 0, NULL, NULL);
    TAP_OK(z && run(z, &mp->m, p, NULL, NULL, NULL, &err) == MS_ERR_INVALID,
           "a ZeRO-3 trace is refused: %s", err.msg);
    plan_free(p);
    trace_free(z);
    machine_profile_free(slow);
    lc_layout_free(L);
    trace_free(t);
    machine_profile_free(mp);
}

/* Every configuration the search evaluates, simulated: prediction errors. */
/* Every configuration the search evaluates, lowered and simulated against its prediction;
 * pg: the knob persist_gather (auto: each estimate's placement goes into its plan). */
static void test_resimulate(const char *machine, const char *model, uint64_t batch, int pg)
{
    machine_profile *mp = load(machine);
    trace_t *t = mp ? gen(&mp->m, model, 1024, batch, 4, 0) : NULL;
    lc_knobs k;
    lc_knobs_default(&k);
    k.persist_gather = pg;
    size_t n_next = 0;
    ptc_model *M = NULL;
    ms_error err;
    ptc_search_opts so;
    ptc_search_opts_default(&so);
    so.keep_all = 1;
    so.swap_bw = 0; /* every n_swap the interval allows: more swapping configurations checked */
    ptc_search_result r;
    memset(&r, 0, sizeof r);
    if (!t || ptc_model_new(t, &mp->m, &k, &M, &err) || ptc_search(M, &so, &r, &err)) {
        TAP_OK(0, "search %s on %s: %s", model, machine, err.msg);
        goto done;
    }
    double max_t = 0, max_m = 0;
    size_t oom = 0;
    for (size_t i = 0; i < r.n_all; i++) {
        lc_knobs kk = *ptc_knobs(M);
        kk.n_persist = r.all[i].n_persist;
        kk.n_buffer = r.all[i].n_buffer;
        kk.n_swap = r.all[i].n_swap;
        kk.n_ckpt = r.all[i].n_ckpt;
        kk.persist_gather = r.all_est[i].persist_gather;
        n_next += kk.persist_gather == LC_PG_NEXT;
        plan_t *p = plan_new("protrain", "caching");
        lc_knobs_to_plan(&kk, p, NULL);
        schedule_t *s = NULL;
        sim_result res;
        sim_opts o;
        sim_opts_default(&o);
        o.host_sharers = 4;
        res_init(&res);
        if (lower_chunks(t, p, &mp->m, NULL, &s, &err) == MS_OK &&
            sim_execute(s, &mp->m, &o, &res, &err) == MS_OK && res.status == RS_OK) {
            double et = fabs(r.all_est[i].t_iter_s - res.iter_time_s) / res.iter_time_s;
            double em = fabs((double)r.all_est[i].peak_bytes - (double)res.peak_allocated_bytes) /
                        (double)res.peak_allocated_bytes;
            if (et > max_t) max_t = et;
            if (em > max_m) max_m = em;
        } else {
            oom++;
        }
        sched_free(s);
        plan_free(p);
    }
    TAP_NOTE("%s batch %llu on %s: %zu configurations, time error max %.2f%%, peak error max "
             "%.2f%%", model, (unsigned long long)batch, machine, r.n_all, 100 * max_t,
             100 * max_m);
    TAP_OK(r.n_all > 50 && oom == 0 && max_t < 0.04 && max_m < 0.04,
           "%s batch %llu on %s, persist_gather %d: all %zu searched configurations simulated, "
           "within 4 %% (time %.2f%%, peak %.2f%%)", model, (unsigned long long)batch, machine,
           pg, r.n_all, 100 * max_t, 100 * max_m);
    if (pg == LC_PG_AUTO)
        TAP_OK(n_next > 0 && n_next < r.n_all,
               "persist_gather=auto: %zu of %zu estimates all-gather in the next forward, the "
               "others after the step", n_next, r.n_all);
done:
    ptc_search_result_clear(&r);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
}

static void test_policies(void)
{
    machine_profile *mp;
    trace_t *t = workload("rtx3090-pcie3", "gpt2-1b", 1024, 2, 4, &mp);
    if (!t) return;
    ms_error err;
    pol_opts o;
    pol_opts_default(&o);
    plan_t *p = NULL;
    ms_status st = pol_protrain_plan(t, &mp->m, &o, &p, &err);
    const char *np = p ? plan_get_knob(p, "n_persist") : NULL;
    double pi = p && plan_predicted(p, &p->pred.iter_s) ? p->pred.iter_s : 0;
    TAP_OK(st == MS_OK && !strcmp(p->lowering, "chunks") && np && pi > 0 &&
               plan_predicted(p, &p->pred.feasible) && p->pred.feasible &&
               !plan_get_knob(p, "pred_iter_s") && !plan_get_knob(p, "feasible"),
           "protrain records its configuration and its predictions, apart from its knobs "
           "(n_persist=%s, %g s)", np ? np : "-", pi);
    sim_result r;
    if (p && run(t, &mp->m, p, NULL, NULL, &r, &err) == MS_OK)
        TAP_OK(r.status == RS_OK && fabs(r.iter_time_s - pi) / r.iter_time_s < 0.04,
               "its plan simulates to the predicted time (%.4f vs %g s)", r.iter_time_s, pi);
    else
        TAP_OK(0, "its plan simulates: %s", err.msg);
    plan_free(p);
    /* a device too small: no feasible configuration, the closest one, an OOM when simulated */
    pol_knob kn[] = {{"gpu_bytes", "400M"}};
    o.knobs = kn;
    o.n_knobs = 1;
    st = pol_protrain_plan(t, &mp->m, &o, &p, &err);
    int sim_ok = st == MS_OK && run(t, &mp->m, p, NULL, NULL, &r, &err) == MS_OK;
    TAP_OK(st == MS_OK && plan_predicted(p, &p->pred.feasible) && !p->pred.feasible,
           "a batch that fits nowhere: feasible=0");
    plan_free(p);
    (void)sim_ok;
    /* the same on the simulated device: a 400 MiB GPU runs out of memory, as a result */
    {
        machine_profile *tiny = load("rtx3090-pcie3");
        tiny->m.gpu_hbm_bytes = UINT64_C(400) << 20;
        tiny->m.gpu_reserved_bytes = 0;
        pol_opts_default(&o);
        st = pol_protrain_plan(t, &tiny->m, &o, &p, &err);
        res_init(&r);
        int ran = st == MS_OK && run(t, &tiny->m, p, NULL, NULL, &r, &err) == MS_OK;
        TAP_OK(ran && r.status == RS_OOM && r.failure[0],
               "simulated on a 400 MiB device: %s", ran ? r.failure : err.msg);
        plan_free(p);
        machine_profile_free(tiny);
    }
    /* the host cannot hold the model states */
    pol_knob kh[] = {{"host_bytes", "100M"}, {"gpu_bytes", "6G"}};
    o.knobs = kh;
    o.n_knobs = 2;
    st = pol_protrain_plan(t, &mp->m, &o, &p, &err);
    TAP_OK(st == MS_OK && plan_predicted(p, &p->pred.feasible) && !p->pred.feasible,
           "not enough host memory: feasible=0");
    if (p) {
        schedule_t *s = NULL;
        sim_opts so;
        sim_opts_default(&so);
        so.host_capacity_bytes = UINT64_C(100) << 20;
        res_init(&r);
        if (lower_chunks(t, p, &mp->m, NULL, &s, &err) == MS_OK)
            sim_execute(s, &mp->m, &so, &r, &err);
        TAP_OK(r.status == RS_OOHM || r.status == RS_OOM,
               "simulating it reports the shortage (%s)", res_status_name(r.status));
        sched_free(s);
    }
    plan_free(p);
    /* baselines */
    pol_opts_default(&o);
    st = pol_zero3_offload_plan(t, &mp->m, &o, &p, &err);
    const char *by = p ? plan_get_knob(p, "chunk_by") : NULL;
    const char *ov = p ? plan_get_knob(p, "overlap_host_adam") : NULL;
    TAP_OK(st == MS_OK && by && !strcmp(by, "layer") && ov && !strcmp(ov, "0") &&
               !strcmp(plan_get_knob(p, "n_persist"), "0"),
           "zero3-offload: per-layer gathers, nothing persistent, Adam after the backward");
    TAP_OK(p && run(t, &mp->m, p, NULL, NULL, &r, &err) == MS_OK && r.status == RS_OK,
           "zero3-offload simulates");
    sim_result zr = r;
    plan_free(p);
    pol_knob kg[] = {{"static_frac", "0.5"}};
    o.knobs = kg;
    o.n_knobs = 1;
    st = pol_gemini_static_plan(t, &mp->m, &o, &p, &err);
    TAP_OK(st == MS_OK && p && atoi(plan_get_knob(p, "n_persist")) == 6,
           "gemini-static: half of the 12 chunks placed on the GPU");
    plan_free(p);
    pol_knob kf[] = {{"checkpoint", "all"}};
    o.knobs = kf;
    o.n_knobs = 1;
    st = pol_fsdp_offload_plan(t, &mp->m, &o, &p, &err);
    TAP_OK(st == MS_OK && p && atoi(plan_get_knob(p, "n_checkpoint")) == 32 &&
               !strcmp(plan_get_knob(p, "reuse"), "0"),
           "fsdp-offload: checkpointing on all blocks, resharded after forward");
    TAP_OK(p && !strcmp(plan_get_knob(p, "host_pinned_tensors"), "2") &&
               !strcmp(plan_get_knob(p, "host_pinned_bytes_per_param"), "4"),
           "fsdp-offload: its parameter shard and CPU gradient are pinned tensors");
    TAP_OK(p && run(t, &mp->m, p, NULL, NULL, &r, &err) == MS_OK && r.status == RS_OK &&
               r.recompute_s > 0,
           "fsdp-offload simulates with recomputation");
    plan_free(p);
    pol_opts_default(&o);
    st = pol_protrain_plan(t, &mp->m, &o, &p, &err);
    if (p && run(t, &mp->m, p, NULL, NULL, &r, &err) == MS_OK)
        TAP_OK(r.status == RS_OK && r.iter_time_s < zr.iter_time_s,
               "protrain beats zero3-offload here (%.3f s vs %.3f s)", r.iter_time_s,
               zr.iter_time_s);
    plan_free(p);
    trace_free(t);
    machine_profile_free(mp);
}

int main(void)
{
    test_knobs();
    test_structure();
    test_eviction_order();
    test_swap_issue();
    test_resimulate("rtx3090-pcie3", "gpt2-1b", 2, LC_PG_STEP);
    test_resimulate("a100-80g-pcie4", "gpt2-1b", 16, LC_PG_STEP);
    test_resimulate("rtx3090-pcie3", "gpt2-1b", 2, LC_PG_AUTO);
    test_policies();
    return tap_done();
}

/* test_pipeline.c — end-to-end tests of trace → plan → schedule → simulation
 * (sim/pipeline.c): the foundation's headline what-if (GPT-7B at 256K tokens on MEMO's A800
 * node: keep-all runs out of memory, full recomputation and full swapping do not), MFU by
 * MEMO's formula, byte-identical outputs for identical inputs, a plan file driving the same
 * simulation as the policy that wrote it, and out-of-host-memory as a result. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/pipeline.h"
#include "tests/tap.h"
#include "base/util.h"

static char dir[256];

static machine_profile *load(const char *name)
{
    machine_profile *p = NULL;
    ms_error err;
    if (machine_load_named(name, &p, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return p;
}

static trace_t *workload(const machine_t *m, const char *model, uint64_t seq, int tp, int cp)
{
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = model;
    w.seq = seq;
    w.tp = tp;
    w.cp = cp;
    trace_t *t = NULL;
    ms_error err;
    if (pipe_trace(&w, m, &t, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return t;
}

static int run(const trace_t *t, const machine_t *m, const char *policy,
               const pipe_outputs *out, sim_result *r)
{
    pipe_policy p;
    pipe_policy_default(&p);
    p.policy = policy;
    ms_error err;
    ms_status st = pipe_run(t, m, &p, out, r, &err);
    if (st != MS_OK) TAP_NOTE("%s: %s", policy, err.msg);
    return st == MS_OK;
}

static void test_headline(void)
{
    machine_profile *a800 = load("a800-8gpu");
    trace_t *t = a800 ? workload(&a800->m, "gpt-7b", 262144, 4, 2) : NULL;
    TAP_OK(t != NULL, "gpt-7b at 256K tokens, TP 4, CP 2 generates");
    if (!t) return;
    sim_result keep, rec, swap;
    int ok = run(t, &a800->m, "keep-all", NULL, &keep) &&
             run(t, &a800->m, "full-recompute", NULL, &rec) &&
             run(t, &a800->m, "full-swap", NULL, &swap);
    TAP_OK(ok, "the three baselines simulate");
    TAP_OK(keep.status == RS_OOM && strstr(keep.failure, "bytes") != NULL,
           "keep-all runs out of GPU memory, naming the request (%s)", keep.failure);
    TAP_OK(rec.status == RS_OK && swap.status == RS_OK,
           "full-recompute and full-swap fit (%s, %s)", res_status_name(rec.status),
           res_status_name(swap.status));
    TAP_OK(rec.recompute_s > 0 && swap.recompute_s == 0 && swap.d2h_busy_s > 0,
           "recompute spends compute, swap spends the link");
    TAP_OK(rec.peak_reserved_bytes <= machine_usable_bytes(&a800->m) &&
               swap.host_peak_bytes > 0 && rec.host_peak_bytes == 0,
           "peaks within the device; only swapping uses host memory");
    /* MFU = model FLOPs / time / peak, with MEMO's 6sP + 6nhs^2 per sequence over tp*cp GPUs */
    double want = swap.model_flops / swap.iter_time_s / a800->m.gpu_peak_bf16_flops;
    TAP_OK(fabs(swap.mfu - want) < 1e-12 && swap.mfu > 0.2 && swap.mfu < 0.8,
           "MFU follows MEMO's formula (%.4f)", swap.mfu);
    double tokens = 262144.0 / 8;
    TAP_OK(fabs(swap.tgs - tokens / swap.iter_time_s) < 1e-9, "TGS = tokens per GPU / time");
    TAP_NOTE("MFU: full-recompute %.2f%%, full-swap %.2f%% (MEMO Table 4 at 256K with memory "
             "plan: 42.05%%, 53.62%%)", 100 * rec.mfu, 100 * swap.mfu);
    trace_free(t);
    machine_profile_free(a800);
}

static void test_flops(void)
{
    trace_t *t = trace_new();
    trace_set_meta(t, "seq", "1000");
    trace_set_meta(t, "params", "10");
    trace_set_meta(t, "layers", "2");
    trace_set_meta(t, "hidden", "3");
    trace_set_meta(t, "batch", "2");
    trace_set_meta(t, "tp", "2");
    trace_set_meta(t, "cp", "1");
    double want = 2.0 * (6.0 * 1000 * 10 + 6.0 * 2 * 3 * 1000.0 * 1000) / 2;
    TAP_OK(trace_model_flops(t) == want, "model FLOPs per GPU by hand: %.0f", want);
    trace_free(t);
}

static char *slurp(const char *path, size_t *n)
{
    char *buf = NULL;
    ms_error err;
    if (ms_read_all(path, 1 << 28, &buf, n, &err) != MS_OK) return NULL;
    return buf;
}

static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && na > 0 && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void test_determinism(void)
{
    machine_profile *h = load("h200-sxm");
    if (!h) return;
    char tl[2][512], mem[2][512], iv[2][512];
    sim_result r[2];
    for (int i = 0; i < 2; i++) {
        trace_t *t = workload(&h->m, "dims:8,2048,16,8192,50257", 8192, 1, 1);
        snprintf(tl[i], sizeof tl[i], "%s/t%d.json", dir, i);
        snprintf(mem[i], sizeof mem[i], "%s/m%d.csv", dir, i);
        snprintf(iv[i], sizeof iv[i], "%s/i%d.csv", dir, i);
        pipe_outputs out = {tl[i], mem[i], iv[i], NULL, NULL};
        if (!t || !run(t, &h->m, "full-swap", &out, &r[i])) {
            TAP_OK(0, "determinism run %d", i);
            trace_free(t);
            machine_profile_free(h);
            return;
        }
        trace_free(t);
    }
    TAP_OK(memcmp(&r[0].iter_time_s, &r[1].iter_time_s, sizeof(double)) == 0 &&
               r[0].peak_reserved_bytes == r[1].peak_reserved_bytes,
           "same inputs, same results");
    TAP_OK(same_file(tl[0], tl[1]), "same inputs, byte-identical timeline JSON");
    TAP_OK(same_file(mem[0], mem[1]) && same_file(iv[0], iv[1]),
           "same inputs, byte-identical memory and interval CSVs");
    machine_profile_free(h);
}

static void test_plan_file(void)
{
    machine_profile *h = load("h200-sxm");
    trace_t *t = h ? workload(&h->m, "dims:8,2048,16,8192,50257", 8192, 1, 1) : NULL;
    if (!t) return;
    char plan_path[512];
    snprintf(plan_path, sizeof plan_path, "%s/p.plan", dir);
    pipe_outputs out = {NULL, NULL, NULL, plan_path, NULL};
    sim_result direct, from_file;
    run(t, &h->m, "full-recompute", &out, &direct);
    pipe_policy p;
    pipe_policy_default(&p);
    p.plan_path = plan_path;
    ms_error err;
    ms_status st = pipe_run(t, &h->m, &p, NULL, &from_file, &err);
    TAP_OK(st == MS_OK && from_file.iter_time_s == direct.iter_time_s &&
               from_file.peak_reserved_bytes == direct.peak_reserved_bytes &&
               !strcmp(from_file.policy, "full-recompute"),
           "a written plan file reproduces the policy's simulation exactly");
    trace_free(t);
    machine_profile_free(h);
}

static void test_oohm(void)
{
    /* A one-GPU V100 machine given 8 GiB of host memory. */
    machine_profile *v = load("v100-32g-pcie3");
    if (!v) return;
    v->m.host_mem_bytes = 8ULL << 30; /* 16 GiB of offloads will not fit */
    trace_t *t = workload(&v->m, "dims:8,2048,16,8192,50257", 32768, 1, 1);
    sim_result r;
    int ok = t && run(t, &v->m, "full-swap", NULL, &r);
    TAP_OK(ok && r.status == RS_OOHM && r.failure[0],
           "offloads beyond host memory end in oohm, with the failing request (%s)",
           ok ? r.failure : "-");
    trace_free(t);
    machine_profile_free(v);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/memsim-test-pipeline-XXXXXX");
    if (!mkdtemp(dir)) return 99;
    test_headline();
    test_flops();
    test_determinism();
    test_plan_file();
    test_oohm();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) TAP_NOTE("cannot remove %s", dir);
    return tap_done();
}

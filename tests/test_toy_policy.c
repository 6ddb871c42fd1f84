/* test_toy_policy.c — adding a policy with its own knob, shown by one: tests/toy_policy holds
 * the toy policy's file and header, its registry row and its build fragment (four files, one
 * folder), and this test, built with planners/policy.c over the rows of every family and the
 * toy's, finds it in the registry without any other file naming it, plans and simulates
 * with it, and reads, checks and lists its knob through its table. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/policy.h"
#include "sim/pipeline.h"
#include "tests/tap.h"
#include "traces/machine.h"

static const char *srcdir(void)
{
    const char *s = getenv("srcdir");
    return s && *s ? s : ".";
}

/* The registry: the toy's row after every real one, found by name like them. */
static void test_registry(void)
{
    size_t n;
    const pol_policy *const *r = pol_registry(&n);
    const pol_policy *toy = pol_find("toy");
    TAP_OK(n > 10 && toy && r[n - 1] == toy && !strcmp(r[0]->name, "keep-all"),
           "the toy is the registry's last row (%zu rows), by its ORDER", n);
    char keys[256];
    knobtab_summary(toy ? toy->own_knobs : NULL, keys, sizeof keys);
    TAP_OK(!strcmp(keys, "toy_every (default 2)"), "its knob summary comes from its table: '%s'",
           keys);
    pol_knob_list(toy, keys, sizeof keys);
    TAP_OK(strstr(keys, "toy_every") && strstr(keys, "rounding_buffers"),
           "--knob takes its own key and its lowering's");
}

/* Nothing outside tests/toy_policy names the toy: the registry has no list to edit. */
static void test_files(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/toy_policy", srcdir());
    DIR *d = opendir(path);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "policy_rows.h") && /* made by make */
            !strstr(e->d_name, ".o"))
            files++;
    if (d) closedir(d);
    TAP_OK(d && files <= 4, "the toy's folder holds %d files (at most four)", files);
    snprintf(path, sizeof path, "%s/planners/policy.c", srcdir());
    FILE *f = fopen(path, "r");
    char line[512];
    int named = 0;
    while (f && fgets(line, sizeof line, f)) named |= strstr(line, "toy") != NULL;
    if (f) fclose(f);
    TAP_OK(f && !named, "planners/policy.c does not name it");
}

static trace_t *workload(const machine_t *m)
{
    pipe_workload w;
    pipe_workload_default(&w);
    w.model = "dims:6,256,4,1024,1000";
    w.seq = 256;
    trace_t *t = NULL;
    ms_error err;
    if (pipe_trace(&w, m, &t, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return t;
}

/* How many tensors the plan recomputes, and whether all are in layers divisible by every. */
static size_t recomputed(const trace_t *t, const plan_t *p, int every, int *only_those)
{
    pol_skel *sk = NULL;
    size_t n = 0, k = 0;
    *only_those = pol_skeletal(t, &sk, &n, NULL) == MS_OK;
    for (size_t i = 0; i < n; i++)
        if (plan_decision_for(p, sk[i].id, NULL) == PD_RECOMPUTE) {
            k++;
            *only_those &= sk[i].layer % every == 0;
        }
    free(sk);
    return k;
}

static void test_plan(const machine_t *m)
{
    trace_t *t = workload(m);
    if (!t) {
        TAP_OK(0, "a workload to plan");
        return;
    }
    ms_error err;
    plan_t *p = NULL;
    int only;
    ms_status st = pol_plan("toy", t, m, NULL, &p, &err);
    size_t k2 = st == MS_OK ? recomputed(t, p, 2, &only) : 0;
    TAP_OK(st == MS_OK && k2 > 0 && only && !strcmp(p->lowering, "tensor"),
           "planned with its default: %zu tensors of even layers recomputed", k2);
    plan_free(p);
    pol_knob kn = { "toy_every", "3" };
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = &kn;
    o.n_knobs = 1;
    st = pol_plan("toy", t, m, &o, &p, &err);
    size_t k3 = st == MS_OK ? recomputed(t, p, 3, &only) : 0;
    TAP_OK(st == MS_OK && k3 > 0 && k3 < k2 && only, "toy_every=3: %zu tensors, of layers 0 and 3 only",
           k3);
    plan_free(p);
    kn.value = "0";
    st = pol_plan("toy", t, m, &o, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "toy_every=0"),
           "toy_every=0 is refused by its table's range: %s", st ? err.msg : "(planned)");
    kn = (pol_knob){ "toy_evry", "3" };
    const char *names[] = { "toy" };
    st = pol_knobs_check(names, 1, &o, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "did you mean 'toy_every'"),
           "a misspelt knob is refused with the closest: %s", st ? err.msg : "(accepted)");
    pipe_policy pp;
    pipe_policy_default(&pp);
    pp.policy = "toy";
    sim_result r;
    st = pipe_run(t, m, &pp, NULL, &r, &err);
    TAP_OK(st == MS_OK && r.status == RS_OK && r.iter_time_s > 0 && !strcmp(r.policy, "toy"),
           "simulated by the pipeline: %s", st ? err.msg : "ok");
    trace_free(t);
}

int main(void)
{
    test_registry();
    test_files();
    machine_profile *mp = NULL;
    ms_error err;
    if (machine_load_named("h200-sxm", &mp, &err) != MS_OK) {
        TAP_OK(0, "machine h200-sxm: %s", err.msg);
        return tap_done();
    }
    test_plan(&mp->m);
    machine_profile_free(mp);
    return tap_done();
}

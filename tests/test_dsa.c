/* test_dsa.c — unit tests of memory/dsa.c (offline dynamic storage allocation): the CSV
 * reader and its FILE:LINE errors, LOAD, the checker, the greedy portfolio, the exact
 * branch-and-bound against brute force, the MIP against brute force, determinism, and one
 * MiniMalloc benchmark instance (from $MEMSIM_DSA_DIR, experiments/dsa/instances in make
 * check; a skipped test when unset). TAP output. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memory/dsa.h"
#include "tests/tap.h"

static char tmpdir[256];
static char made[32][512]; /* files to remove at the end */
static int nmade;

static const char *tmp_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    if (nmade < 32) snprintf(made[nmade++], sizeof made[0], "%s", path);
    return path;
}

static const char *write_tmp(const char *name, const char *text)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "w");
    if (!f) return path;
    fputs(text, f);
    fclose(f);
    return path;
}

/* Reads text as a CSV file; returns the status and the error message in msg. */
static ms_status read_text(const char *name, const char *text, dsa_instance **in, char *msg,
                           size_t n)
{
    ms_error err;
    ms_error_clear(&err);
    const char *path = write_tmp(name, text);
    ms_status st = dsa_read_csv(path, in, &err);
    snprintf(msg, n, "%s", err.msg);
    return st;
}

/* Expects a parse error whose message starts with "<path>:<line>: " and mentions what. */
static void expect_error(const char *name, const char *text, int line, const char *what)
{
    dsa_instance *in = NULL;
    char msg[1024], want[600];
    ms_status st = read_text(name, text, &in, msg, sizeof msg);
    snprintf(want, sizeof want, "%s/%s:%d: ", tmpdir, name, line);
    TAP_OK(st == MS_ERR_PARSE && in == NULL && strncmp(msg, want, strlen(want)) == 0 &&
               strstr(msg, what) != NULL,
           "reader rejects %s at line %d (%s)", name, line, msg);
    dsa_instance_free(in);
}

static void test_reader(void)
{
    dsa_instance *in = NULL;
    char msg[1024];
    ms_status st = read_text("ok.csv", "id,lower,upper,size\nb1,0,3,4\n\n# note\nb2, 3, 9, 4\n",
                             &in, msg, sizeof msg);
    int ok = st == MS_OK && dsa_instance_count(in) == 2;
    if (ok) {
        const dsa_buffer *b = dsa_instance_buffers(in);
        char buf[32];
        ok = b[1].lower == 3 && b[1].upper == 9 && b[1].size_bytes == 4 &&
             strcmp(dsa_instance_id(in, 1, buf, sizeof buf), "b2") == 0;
    }
    TAP_OK(ok, "reads a file with header, blank and comment lines, spaces");
    dsa_instance_free(in);
    in = NULL;
    st = read_text("nohdr.csv", "7,0,2,5\n8,1,3,6\n", &in, msg, sizeof msg);
    TAP_OK(st == MS_OK && dsa_instance_count(in) == 2 && dsa_load(in) == 11,
           "header is optional");
    dsa_instance_free(in);

    in = NULL;
    st = read_text("empty.csv", "id,lower,upper,size\n", &in, msg, sizeof msg);
    dsa_options o;
    dsa_options_default(&o);
    dsa_solution s;
    ms_error err;
    int solved = st == MS_OK && dsa_solve(in, &o, &s, &err) == MS_OK;
    TAP_OK(solved && dsa_instance_count(in) == 0 && s.peak_bytes == 0 && s.status == DSA_OK,
           "an empty instance reads and solves to peak 0");
    if (solved) dsa_solution_free(&s);
    dsa_instance_free(in);

    expect_error("dup.csv", "id,lower,upper,size\na,0,1,1\nb,0,1,1\na,2,3,1\n", 4, "duplicate");
    expect_error("neg.csv", "a,0,1,1\nb,0,1,-5\n", 2, "positive");
    expect_error("zero.csv", "a,0,1,0\n", 1, "positive");
    expect_error("order.csv", "a,0,1,1\nb,5,5,1\n", 2, "below upper");
    expect_error("nan.csv", "a,0,1,1\nb,x1,2,1\n", 2, "not an integer");
    expect_error("few.csv", "id,lower,upper,size\na,0,1\n", 2, "expected 4 fields");
    expect_error("many.csv", "a,0,1,1,9,9\n", 1, "expected 4 fields");
    expect_error("ovf.csv", "a,0,1,99999999999999999999999\n", 1, "not an integer");
}

static dsa_instance *make(const int64_t (*b)[3], size_t n)
{
    dsa_instance *in = dsa_instance_new();
    for (size_t i = 0; i < n; i++)
        dsa_instance_add(in, NULL, b[i][0], b[i][1], (uint64_t)b[i][2], NULL);
    return in;
}

static void test_load_and_check(void)
{
    /* [0,2)x4, [1,3)x5, [2,4)x3: 9 live at t=1, 8 at t=2 (half-open: [0,2) has ended) */
    static const int64_t b1[][3] = {{0, 2, 4}, {1, 3, 5}, {2, 4, 3}};
    dsa_instance *in = make(b1, 3);
    TAP_OK(dsa_load(in) == 9, "LOAD of overlapping lifetimes is 9 (got %llu)",
           (unsigned long long)dsa_load(in));
    uint64_t good[] = {0, 4, 0}, bad[] = {0, 3, 0}, peak = 0;
    ms_error err;
    TAP_OK(dsa_check(in, good, 0, &peak, &err) == MS_OK && peak == 9, "checker accepts a plan");
    TAP_OK(dsa_check(in, bad, 0, NULL, &err) == MS_ERR_INVALID && strstr(err.msg, "overlap"),
           "checker rejects overlapping buffers (%s)", err.msg);
    TAP_OK(dsa_check(in, good, 8, NULL, &err) == MS_ERR_INVALID, "checker enforces capacity");
    dsa_instance_free(in);

    static const int64_t b2[][3] = {{0, 5, 7}, {5, 9, 7}, {9, 10, 7}};
    in = make(b2, 3);
    TAP_OK(dsa_load(in) == 7, "back-to-back lifetimes do not add up");
    dsa_instance_free(in);
}

/* MiniMalloc's README example: LOAD 12, packs in 12. */
static void test_greedy(void)
{
    static const int64_t b[][3] = {{0, 3, 4}, {3, 9, 4}, {0, 9, 4}, {9, 21, 4}, {0, 21, 4}};
    dsa_instance *in = make(b, 5);
    uint64_t off[5], peak = 0;
    ms_error err;
    ms_status st = dsa_greedy(in, dsa_load(in), off, &peak, &err);
    TAP_OK(st == MS_OK && peak == 12 && dsa_check(in, off, 12, NULL, &err) == MS_OK,
           "greedy packs the MiniMalloc example at LOAD 12 (peak %llu)", (unsigned long long)peak);
    dsa_instance_free(in);
}

static void test_exact(void)
{
    /* LOAD 11 but every packing needs 12 (found by search, confirmed by brute force) */
    static const int64_t hard[][3] = {{0, 2, 5}, {3, 5, 4}, {7, 8, 4}, {4, 6, 3},
                                      {0, 4, 2}, {5, 8, 5}, {0, 4, 2}, {2, 6, 3}};
    dsa_instance *in = make(hard, 8);
    uint64_t off[8], peak = 0, work = 0;
    ms_error err;
    dsa_result r;
    dsa_brute_force(in, off, &peak, &err);
    TAP_OK(dsa_load(in) == 11 && peak == 12, "brute force: LOAD 11, optimum 12");
    ms_status st = dsa_bb_decide(in, 11, 10000000, off, &r, &work, &err);
    TAP_OK(st == MS_OK && r == DSA_INFEASIBLE,
           "bb proves capacity 11 infeasible though LOAD is 11");
    st = dsa_bb_decide(in, 12, 10000000, off, &r, NULL, &err);
    TAP_OK(st == MS_OK && r == DSA_OK && dsa_check(in, off, 12, NULL, &err) == MS_OK,
           "bb packs it in 12");
    dsa_options o;
    dsa_options_default(&o);
    o.capacity_bytes = 11;
    dsa_solution s;
    st = dsa_solve(in, &o, &s, &err);
    TAP_OK(st == MS_OK && s.status == DSA_INFEASIBLE, "dsa_solve: capacity 11 is INFEASIBLE");
    dsa_solution_free(&s);
    o.capacity_bytes = 0;
    st = dsa_solve(in, &o, &s, &err);
    TAP_OK(st == MS_OK && s.status == DSA_OK && s.peak_bytes == 12 && s.lower_bound_bytes == 12,
           "dsa_solve: minimum 12, proven (bound %llu)", (unsigned long long)s.lower_bound_bytes);
    dsa_solution_free(&s);
    dsa_instance_free(in);

    /* the greedy portfolio ends at 14; the optimum is LOAD = 13 */
    static const int64_t tight[][3] = {{6, 7, 1}, {1, 4, 3}, {4, 6, 5},
                                       {3, 5, 5}, {0, 6, 3}, {0, 3, 6}};
    in = make(tight, 6);
    uint64_t gp = 0, bp = 0;
    dsa_greedy(in, dsa_load(in), off, &gp, &err);
    dsa_brute_force(in, off, &bp, &err);
    st = dsa_bb_decide(in, 13, 10000000, off, &r, NULL, &err);
    TAP_OK(dsa_load(in) == 13 && bp == 13 && gp > 13 && r == DSA_OK &&
               dsa_check(in, off, 13, NULL, &err) == MS_OK,
           "bb packs at 13 where greedy needs %llu", (unsigned long long)gp);
    dsa_instance_free(in);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static dsa_instance *random_instance(size_t n, int64_t horizon, uint64_t max_size)
{
    dsa_instance *in = dsa_instance_new();
    for (size_t i = 0; i < n; i++) {
        int64_t lo = (int64_t)(next_rand() % (uint64_t)horizon);
        int64_t up = lo + 1 + (int64_t)(next_rand() % (uint64_t)(horizon - lo));
        dsa_instance_add(in, NULL, lo, up, 1 + next_rand() % max_size, NULL);
    }
    return in;
}

/* bb and (with lp_solve) the MIP against brute force on seeded random tiny instances */
static void test_against_brute(void)
{
    int bb_ok = 1, mip_ok = 1, mip_runs = 0;
    for (int t = 0; t < 300; t++) {
        dsa_instance *in = random_instance(2 + (size_t)(next_rand() % 5), 8, 20);
        uint64_t off[8], opt = 0, p = 0, bound = 0;
        ms_error err;
        dsa_result r1, r2;
        dsa_brute_force(in, off, &opt, &err);
        dsa_bb_decide(in, opt, 10000000, off, &r1, NULL, &err);
        dsa_bb_decide(in, opt - 1, 10000000, off, &r2, NULL, &err);
        if (r1 != DSA_OK || r2 != DSA_INFEASIBLE) bb_ok = 0;
        if (dsa_have_mip() && t % 10 == 0) {
            int found;
            dsa_result r;
            uint64_t upper = opt + 1 + next_rand() % 10; /* as if greedy were that far off */
            ms_status st = dsa_mip(in, dsa_load(in), upper, 100000, 0, off, &p, &bound, &found,
                                   &r, NULL, &err);
            mip_runs++;
            if (st != MS_OK || r != DSA_OK || !found || p != opt || bound != opt ||
                dsa_check(in, off, 0, NULL, &err) != MS_OK)
                mip_ok = 0;
            st = dsa_mip(in, dsa_load(in), opt, 100000, 1, off, &p, &bound, &found, &r, NULL, &err);
            if (st != MS_OK || r != DSA_OK || found || bound != opt) mip_ok = 0;
        }
        dsa_instance_free(in);
    }
    TAP_OK(bb_ok, "bb: fits at the brute-force optimum and not below, 300 random instances");
    if (dsa_have_mip())
        TAP_OK(mip_ok && mip_runs == 30,
               "MIP equals brute force and proves the optimum on %d random instances", mip_runs);
    else
        TAP_NOTE("built without lp_solve: MIP assertions skipped");
}

static void test_determinism(void)
{
    rng = 42;
    dsa_instance *in = random_instance(300, 200, 1000);
    dsa_options o;
    dsa_options_default(&o);
    o.time_limit_s = 0.05;
    dsa_solution a, b;
    ms_error err;
    ms_status s1 = dsa_solve(in, &o, &a, &err), s2 = dsa_solve(in, &o, &b, &err);
    TAP_OK(s1 == MS_OK && s2 == MS_OK && a.peak_bytes == b.peak_bytes && a.work == b.work &&
               memcmp(a.offsets, b.offsets, 300 * sizeof *a.offsets) == 0 &&
               a.peak_bytes >= a.load_bytes,
           "same input and budget give the same plan (peak %llu, LOAD %llu)",
           (unsigned long long)a.peak_bytes, (unsigned long long)a.load_bytes);
    /* the plan round-trips through the CSV writer */
    const char *path = tmp_path("plan.csv");
    ms_status st = dsa_write_csv(in, a.offsets, path, &err);
    FILE *f = fopen(path, "r");
    char line[128] = "";
    if (f) { if (!fgets(line, sizeof line, f)) line[0] = 0; fclose(f); }
    TAP_OK(st == MS_OK && strcmp(line, "id,lower,upper,size,offset\n") == 0,
           "plan written with its header");
    o.capacity_bytes = a.load_bytes - 1;
    dsa_solution c;
    st = dsa_solve(in, &o, &c, &err);
    TAP_OK(st == MS_OK && c.status == DSA_INFEASIBLE, "a capacity below LOAD is infeasible");
    dsa_solution_free(&a);
    dsa_solution_free(&b);
    dsa_solution_free(&c);
    dsa_instance_free(in);
}

static void test_benchmark(void)
{
    const char *dir = getenv("MEMSIM_DSA_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/minimalloc-K.1048576.csv", dir ? dir : "");
    if (!dir || access(path, R_OK) != 0) {
        TAP_SKIP("MEMSIM_DSA_DIR unset or without minimalloc-K.1048576.csv: benchmark not run");
        return;
    }
    dsa_instance *in;
    ms_error err;
    if (dsa_read_csv(path, &in, &err) != MS_OK) {
        TAP_OK(0, "read %s: %s", path, err.msg);
        return;
    }
    dsa_options o;
    dsa_options_default(&o);
    o.capacity_bytes = 1048576;
    o.time_limit_s = 5;
    dsa_solution s;
    ms_status st = dsa_solve(in, &o, &s, &err);
    TAP_OK(st == MS_OK && s.status == DSA_OK && s.peak_bytes <= 1048576 &&
               dsa_check(in, s.offsets, 1048576, NULL, &err) == MS_OK,
           "MiniMalloc instance K (454 buffers) packed within 1048576 by %s in %.2f s",
           dsa_method_name(s.method), s.elapsed_s);
    dsa_solution_free(&s);
    dsa_instance_free(in);
}

/* A long training step: 60,000 buffers, each live a few hundred steps of 60,000 */
static dsa_instance *long_step_instance(size_t n)
{
    dsa_instance *in = dsa_instance_new();
    for (size_t i = 0; i < n; i++) {
        int64_t lo = (int64_t)(next_rand() % (uint64_t)n);
        dsa_instance_add(in, NULL, lo, lo + 1 + (int64_t)(next_rand() % 200),
                         1 + next_rand() % (1u << 20), NULL);
    }
    return in;
}

static void test_large(void)
{
    rng = 7;
    size_t n = 60000;
    dsa_instance *in = long_step_instance(n);
    ms_error err;
    /* every stage stops at the budget, the greedy fit runs and skyline runs included */
    dsa_options o;
    dsa_options_default(&o);
    o.methods = DSA_GREEDY;
    o.work_budget = 2000000;
    dsa_solution s;
    ms_status st = dsa_solve(in, &o, &s, &err);
    TAP_OK(st == MS_OK && s.work <= 3 * o.work_budget && s.peak_bytes >= s.load_bytes &&
               dsa_check(in, s.offsets, 0, NULL, &err) == MS_OK,
           "a budget of %llu work units is honoured on %zu buffers (work %llu, %s)",
           (unsigned long long)o.work_budget, n, (unsigned long long)(st == MS_OK ? s.work : 0),
           st == MS_OK ? s.detail : err.msg);
    if (st == MS_OK) dsa_solution_free(&s);
    /* the greedy portfolio over the interval tree: a valid plan close to LOAD, fast */
    uint64_t *off = malloc(n * sizeof *off), peak = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = dsa_greedy(in, dsa_load(in), off, &peak, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double el = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    uint64_t load = dsa_load(in);
    TAP_OK(st == MS_OK && dsa_check(in, off, 0, NULL, &err) == MS_OK &&
               (double)peak <= 1.15 * (double)load && el < 20,
           "greedy places %zu buffers in %.2f s: peak %.2f %% above LOAD", n, el,
           load ? 100.0 * ((double)peak - (double)load) / (double)load : 0);
    free(off);
    dsa_instance_free(in);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_dsa.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot make a temporary directory\n");
        return 99;
    }
    test_reader();
    test_load_and_check();
    test_greedy();
    test_exact();
    test_against_brute();
    test_determinism();
    test_benchmark();
    test_large();
    for (int i = 0; i < nmade; i++) unlink(made[i]);
    rmdir(tmpdir);
    return tap_done();
}

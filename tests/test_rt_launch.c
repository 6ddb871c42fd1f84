/* test_rt_launch.c — tests of the runtime's processes (runtime/rt_launch.c): who a process
 * is under torchrun's, mpirun's and memsim's variables, and the refusals; then real runs of
 * this program as the launcher of 3 ranks of itself, which exchange an id and their results
 * through the files, with a rank that fails (the others stop at its notice instead of
 * waiting), one that never answers (the wait times out, the launcher kills it) and the
 * watcher thread. Plain C: runs in make check with or without CUDA. */
#define _GNU_SOURCE
#include "runtime/rt_launch.h"
#include "tests/tap.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "MEMSIM_RANK", "MEMSIM_WORLD_SIZE", "MEMSIM_LOCAL_RANK",
    "MEMSIM_NCCL_ID_FILE", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

static void test_whoami(void)
{
    clear_env();
    rt_proc p;
    ms_error err;
    TAP_OK(rt_launch_whoami(1, &p, &err) == MS_OK && p.role == RL_SINGLE, "world 1: one process");
    TAP_OK(rt_launch_whoami(4, &p, &err) == MS_OK && p.role == RL_LAUNCHER,
           "world 4 without a launcher's variables: this process starts the ranks");
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "2", 1);
    ms_status st = rt_launch_whoami(4, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "MEMSIM_NCCL_ID_FILE"),
           "torchrun without MEMSIM_NCCL_ID_FILE: %s", err.msg);
    setenv("MEMSIM_NCCL_ID_FILE", "/tmp/job/id", 1);
    setenv("TORCHELASTIC_RUN_ID", "abc/1", 1);
    st = rt_launch_whoami(4, &p, &err);
    TAP_OK(st == MS_OK && p.role == RL_RANK && p.rank == 2 && p.local_rank == 2 &&
           !strcmp(p.launcher, "torchrun") && !strcmp(p.stem, "/tmp/job/id.abc_1"),
           "torchrun's rank 2 of 4, its files under the job's id (%s)", p.stem);
    st = rt_launch_whoami(8, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "started 4 processes") &&
           strstr(err.msg, "8 GPUs"), "a world of 4 for a layout of 8: %s", err.msg);
    clear_env();
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    st = rt_launch_whoami(2, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "OMPI_COMM_WORLD_LOCAL_RANK"),
           "mpirun's variables incomplete: %s", err.msg);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("MEMSIM_NCCL_ID_FILE", "/tmp/x", 1);
    st = rt_launch_whoami(2, &p, &err);
    TAP_OK(st == MS_OK && p.rank == 1 && !strcmp(p.launcher, "mpirun") &&
           !strcmp(p.stem, "/tmp/x"), "mpirun's rank 1 of 2");
    clear_env();
    setenv("MEMSIM_RANK", "0", 1);
    setenv("MEMSIM_WORLD_SIZE", "3", 1);
    setenv("MEMSIM_LOCAL_RANK", "zero", 1);
    st = rt_launch_whoami(3, &p, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "whole numbers"), "a rank that is no number: "
           "%s", err.msg);
    clear_env();
}

/* ---- a rank of the test's runs: `test_rt_launch rank MODE` ---- */

static int rank_main(const char *mode)
{
    rt_proc p;
    ms_error err;
    if (rt_launch_whoami(3, &p, &err) != MS_OK || p.role != RL_RANK) {
        fprintf(stderr, "rank: %s\n", err.msg);
        return 9;
    }
    char buf[256];
    size_t n = 0;
    if (!strcmp(mode, "fail") && p.rank == 2) {
        rt_launch_stop(&p, "boom");
        return 3;
    }
    if (!strcmp(mode, "hang") && p.rank == 1) {
        sleep(60);
        return 0;
    }
    /* the first rank makes the id, the others read it; then every rank reports */
    if (p.rank == 0 && rt_launch_put(&p, "id.tp.0", "the-id", 6, &err) != MS_OK) return 8;
    if (rt_launch_get(&p, "id.tp.0", buf, sizeof buf, &n, &err) != MS_OK) {
        fprintf(stderr, "rank %d: %s\n", p.rank, err.msg);
        return 1;
    }
    if (n != 6 || memcmp(buf, "the-id", 6)) return 7;
    char res[32], name[32];
    snprintf(res, sizeof res, "result of %d", p.rank);
    snprintf(name, sizeof name, "result.%d", p.rank);
    if (rt_launch_put(&p, name, res, strlen(res), &err) != MS_OK) return 8;
    if (p.rank != 0) return 0;
    for (int r = 0; r < 3; r++) {
        snprintf(name, sizeof name, "result.%d", r);
        if (rt_launch_get(&p, name, buf, sizeof buf - 1, &n, &err) != MS_OK) {
            fprintf(stderr, "rank 0: %s\n", err.msg);
            return 1;
        }
        buf[n] = 0;
        snprintf(res, sizeof res, "result of %d", r);
        if (strcmp(buf, res)) return 6;
    }
    rt_launch_cleanup(&p);
    return 0;
}

static void on_stop(const char *msg, void *arg)
{
    (void)arg;
    _exit(strstr(msg, "rank 0: stop now") ? 7 : 8);
}

/* "watch": rank 1 sleeps until rank 0's notice ends it through the watcher (exit 7). */
static int watch_main(void)
{
    rt_proc p;
    ms_error err;
    if (rt_launch_whoami(3, &p, &err) != MS_OK) return 9;
    if (p.rank == 0) {
        sleep(1);
        rt_launch_stop(&p, "stop now");
        return 0;
    }
    rt_watch *w = NULL;
    if (rt_launch_watch(&p, on_stop, NULL, &w, &err) != MS_OK) return 9;
    sleep(p.rank == 1 ? 30 : 0);
    rt_launch_unwatch(w);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int launch(const char *mode, double grace_s, double *took)
{
    char *argv[] = {"test_rt_launch", "rank", (char *)mode, NULL};
    FILE *quiet = fopen("/dev/null", "w");
    double t0 = now_s();
    int rc = rt_launch_ranks(3, argv, grace_s, quiet);
    *took = now_s() - t0;
    if (quiet) fclose(quiet);
    return rc;
}

static void test_runs(void)
{
    double took;
    int rc = launch("ok", 5, &took);
    TAP_OK(rc == 0, "3 ranks exchange an id and their results through the files (%.2f s)", took);
    rc = launch("fail", 5, &took);
    TAP_OK(rc == 1 && took < 4, "rank 2 fails: ranks 0 and 1 stop at its notice, not at the "
           "timeout; status %d (rank 0's) after %.2f s", rc, took);
    setenv("MEMSIM_RANK_TIMEOUT_S", "1", 1);
    rc = launch("hang", 0.5, &took);
    unsetenv("MEMSIM_RANK_TIMEOUT_S");
    TAP_OK(rc == 1 && took < 10, "rank 1 never answers: rank 0's wait times out and the "
           "launcher kills rank 1 (status %d after %.2f s)", rc, took);
    rc = launch("watch", 5, &took);
    TAP_OK(rc == 7 && took < 10, "the watcher thread ends rank 1 at rank 0's notice (status %d "
           "after %.2f s)", rc, took);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "rank"))
        return !strcmp(argv[2], "watch") ? watch_main() : rank_main(argv[2]);
    test_whoami();
    test_runs();
    return tap_done();
}

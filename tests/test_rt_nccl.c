/* test_rt_nccl.c — unit tests of the NCCL loader (runtime/rt_nccl.c) against the fake library
 * tests/fake_nccl.c (MEMSIM_FAKE_NCCL names it, as make check sets it): the search order and
 * its message when nothing is found, NVLink multicast put off before NCCL is loaded, the
 * version floor, the calls reaching the library with their counts and types, and a failing
 * call's message. Plain C: runs in make check with or without CUDA. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_nccl.h"
#include "tests/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char log_path[256];

/* The fake's log as one string (static buffer), then emptied. */
static const char *take_log(void)
{
    static char buf[16384];
    buf[0] = 0;
    FILE *f = fopen(log_path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    remove(log_path);
    return buf;
}

static void test_not_found(void)
{
    rt_nccl *n = NULL;
    ms_error err;
    setenv("MEMSIM_NCCL", "/nonexistent/libnccl.so.2", 1);
    rt_status st = rt_nccl_load(&n, &err);
    TAP_OK(st == RT_ERR_NODEV && !n && strstr(err.msg, "MEMSIM_NCCL names /nonexistent"),
           "MEMSIM_NCCL naming no library: %s", err.msg);
    unsetenv("MEMSIM_NCCL");
    st = rt_nccl_load(&n, &err);
    if (st == RT_OK) {
        /* this machine has one: it binds, and makes a unique id without a GPU */
        rt_nccl_id id;
        rt_status us = rt_nccl_unique_id(n, &id, &err);
        TAP_OK(rt_nccl_version(n) >= 21000 && us == RT_OK, "this machine's NCCL (%s, version "
               "%d) binds every entry point and makes a unique id", rt_nccl_path(n),
               rt_nccl_version(n));
        rt_nccl_free(n);
        return;
    }
    TAP_OK(st == RT_ERR_NODEV && strstr(err.msg, "MEMSIM_NCCL (not set)") &&
           strstr(err.msg, "libnccl.so.2 (") && strstr(err.msg, "nvidia.nccl") &&
           strstr(err.msg, "/opt/torch/.venv/lib/python3*") && strstr(err.msg, "Set MEMSIM_NCCL"),
           "no NCCL anywhere: the message names every place tried");
}

static void test_env_and_version(const char *fake)
{
    setenv("NCCL_NVLS_ENABLE", "1", 1);
    unsetenv("NVSHMEM_DISABLE_NVLS");
    char note[256];
    int changed = rt_nccl_safe_env(note, sizeof note);
    TAP_OK(changed >= 2 && strstr(note, "NCCL_NVLS_ENABLE=1 replaced by 0") &&
           !strcmp(getenv("NCCL_NVLS_ENABLE"), "0") && !strcmp(getenv("NVSHMEM_DISABLE_NVLS"), "1")
           && !strcmp(getenv("TORCH_SYMM_MEM_DISABLE_MULTICAST"), "1"),
           "multicast put off in the environment (%d changed: %s)", changed, note);
    setenv("NCCL_NVLS_ENABLE", "1", 1); /* rt_nccl_load must put it off again, before loading */
    setenv("MEMSIM_NCCL", fake, 1);
    rt_nccl *n = NULL;
    ms_error err;
    rt_status st = rt_nccl_load(&n, &err);
    const char *log = take_log();
    TAP_OK(st == RT_OK && n && rt_nccl_version(n) == 22703 && !strcmp(rt_nccl_path(n), fake) &&
           strstr(log, "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "
                       "NVSHMEM_DISABLE_NVLS=1"),
           "the fake loads through MEMSIM_NCCL and sees multicast off (version %d)",
           n ? rt_nccl_version(n) : 0);
    rt_nccl_free(n);
    setenv("FAKE_NCCL_VERSION", "20903", 1);
    st = rt_nccl_load(&n, &err);
    TAP_OK(st == RT_ERR_INVALID && !n && strstr(err.msg, "older than 2.10"),
           "NCCL 2.9 is refused: %s", err.msg);
    unsetenv("FAKE_NCCL_VERSION");
    take_log();
}

static void test_calls(const char *fake)
{
    setenv("MEMSIM_NCCL", fake, 1);
    rt_nccl *n = NULL;
    ms_error err;
    if (rt_nccl_load(&n, &err) != RT_OK) {
        TAP_OK(0, "loading the fake: %s", err.msg);
        return;
    }
    rt_nccl_id id;
    void *comm = NULL;
    rt_status st = rt_nccl_unique_id(n, &id, &err);
    if (st == RT_OK) st = rt_nccl_comm_init(n, 4, &id, 2, &comm, &err);
    char buf[64];
    void *stream = (void *)0x1234;
    if (st == RT_OK) st = rt_nccl_group_start(n, &err);
    if (st == RT_OK) st = rt_nccl_all_gather(n, buf, buf, 16, comm, stream, &err);
    if (st == RT_OK) st = rt_nccl_reduce_scatter(n, buf, buf, 8, RN_BF16, comm, stream, &err);
    if (st == RT_OK) st = rt_nccl_all_reduce(n, buf, buf, 4, RN_F32, comm, stream, &err);
    if (st == RT_OK) st = rt_nccl_send(n, buf, 32, 3, comm, stream, &err);
    if (st == RT_OK) st = rt_nccl_recv(n, buf, 32, 1, comm, stream, &err);
    if (st == RT_OK) st = rt_nccl_group_end(n, &err);
    if (st == RT_OK) st = rt_nccl_async_error(n, comm, &err);
    const char *log = take_log();
    char want[96];
    snprintf(want, sizeof want, "init id=%.40s nranks=4 rank=2", id.bytes);
    TAP_OK(st == RT_OK && strstr(log, want), "the unique id reaches ncclCommInitRank (%s)",
           st == RT_OK ? want : err.msg);
    TAP_OK(strstr(log, "allgather") && strstr(log, "rank=2/4 count=16 type=1 ") &&
           strstr(log, "count=8 type=9 op=0") && strstr(log, "count=4 type=7 op=0") &&
           strstr(log, "send id=") && strstr(log, "peer=3") && strstr(log, "peer=1") &&
           strstr(log, "stream=0x1234") && strstr(log, "group_start") && strstr(log, "group_end"),
           "calls reach NCCL with bytes as ncclUint8, bf16 = 9, fp32 = 7, sum, peers and stream");
    setenv("FAKE_NCCL_FAIL", "ncclAllGather", 1);
    st = rt_nccl_all_gather(n, buf, buf, 16, comm, stream, &err);
    TAP_OK(st == RT_ERR_CUDA && strstr(err.msg, "ncclAllGather") &&
           strstr(err.msg, "NCCL error 3: fake internal error"),
           "a failing call names itself and NCCL's message: %s", err.msg);
    unsetenv("FAKE_NCCL_FAIL");
    rt_nccl_comm_destroy(n, comm);
    log = take_log();
    TAP_OK(strstr(log, "destroy id=") != NULL, "the communicator is destroyed");
    TAP_OK(rt_nccl_type_bytes(RN_BF16) == 2 && rt_nccl_type_bytes(RN_F32) == 4 &&
           rt_nccl_type_bytes(RN_F64) == 8 && rt_nccl_type_bytes(RN_U8) == 1, "element sizes");
    rt_nccl_free(n);
    unsetenv("MEMSIM_NCCL");
}

int main(void)
{
    const char *fake = getenv("MEMSIM_FAKE_NCCL");
    snprintf(log_path, sizeof log_path, "test_rt_nccl.%ld.log", (long)getpid());
    setenv("FAKE_NCCL_LOG", log_path, 1);
    test_not_found();
    if (!fake || access(fake, R_OK)) {
        TAP_SKIP("MEMSIM_FAKE_NCCL names no fake library (make check sets it)");
        return tap_done();
    }
    test_env_and_version(fake);
    test_calls(fake);
    remove(log_path);
    return tap_done();
}

/* fake_nccl_log.h — reading what tests/fake_nccl.c logged: the log file's path (a test sets
 * it and FAKE_NCCL_LOG), the log taken and cleared, and how often a call appears in it. Header
 * only, for the tests that run against the fake library (tests/test_rt_coll.c,
 * tests/test_rt_node.c). */
#ifndef MEMSIM_TESTS_FAKE_NCCL_LOG_H
#define MEMSIM_TESTS_FAKE_NCCL_LOG_H

#include <stdio.h>
#include <string.h>

static char log_path[256];

/* The log so far (at most 1 MiB), and the file removed. */
static char *take_log(void)
{
    static char buf[1 << 20];
    buf[0] = 0;
    FILE *f = fopen(log_path, "r");
    if (f) {
        buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
        fclose(f);
    }
    remove(log_path);
    return buf;
}

/* How many times `what` occurs in log. */
static int count(const char *log, const char *what)
{
    int n = 0;
    for (const char *p = log; (p = strstr(p, what)); p++) n++;
    return n;
}

#endif

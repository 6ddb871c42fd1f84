/* rt_check.c — keeps the last runtime error's text (see rt_check.h). The runtime is
 * single-threaded on the host side that reports errors, so one buffer suffices. */
#include "runtime/rt_check.h"

#include <stdio.h>

static char last_error[512];

rt_status rt_set_error(rt_status st, const char *file, int line, const char *call,
                       const char *msg)
{
    snprintf(last_error, sizeof last_error, "%s:%d: %s: %s", file, line, call, msg);
    return st;
}

const char *rt_last_error(void) { return last_error[0] ? last_error : "no error"; }

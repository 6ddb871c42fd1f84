/* rt_check.c — fills an ms_error at a failing runtime call (see rt_check.h). */
#include "runtime/rt_check.h"

rt_status rt_fail(ms_error *err, rt_status st, const char *file, int line, const char *call,
                  const char *msg)
{
    ms_fail_at(err, MS_ERR_INVALID, file, (uint64_t)(line > 0 ? line : 0), "%s: %s", call, msg);
    return st;
}

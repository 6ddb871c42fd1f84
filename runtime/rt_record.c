/* rt_record.c — writes a run's measured op times into a copy of its trace (rt_record_trace
 * in rt_exec.h), the input of `memsim simulate` at measured speed. Used by runtime/rt_run.c
 * (`memsim run --record`) and the tests. Plain C. */
#include "runtime/rt_exec.h"

#include "base/u64map.h"

#include <stdlib.h>
#include <string.h>

/* ---- recording ---- */

/* op id -> measured microseconds (as bits) of the first non-recompute action of that op. */
static ms_status record_times(const rt_op_time *ops, size_t n, u64map **out)
{
    u64map *m = u64map_new(n ? n : 1);
    if (!m) return MS_ERR_NOMEM;
    for (size_t k = 0; k < n; k++) {
        if (ops[k].op < 0 || ops[k].recompute || !(ops[k].meas_us >= 0)) continue;
        if (u64map_get(m, (uint64_t)ops[k].op, NULL)) continue;
        uint64_t bits;
        memcpy(&bits, &ops[k].meas_us, sizeof bits);
        if (u64map_put(m, (uint64_t)ops[k].op, bits) != 0) {
            u64map_free(m);
            return MS_ERR_NOMEM;
        }
    }
    *out = m;
    return MS_OK;
}

static ms_status record_meta(const trace_t *t, const rt_record_info *info, trace_t *o)
{
    ms_status st = MS_OK;
    for (size_t i = 0; i < trace_meta_count(t) && st == MS_OK; i++)
        st = trace_set_meta(o, trace_meta_key(t, i), trace_meta_value(t, i));
    const char *keys[4] = {"recorded.device", "recorded.date", "recorded.math",
                           "recorded.from"};
    const char *vals[4] = {info ? info->device : NULL, info ? info->date : NULL,
                           info ? info->math : NULL, info ? info->from : NULL};
    for (int i = 0; i < 4 && st == MS_OK; i++)
        st = trace_set_meta(o, keys[i], vals[i] && vals[i][0] ? vals[i] : "-");
    return st;
}

ms_status rt_record_trace(const trace_t *t, const rt_op_time *ops, size_t n_ops,
                          const rt_record_info *info, trace_t **out, size_t *n_measured,
                          ms_error *err)
{
    *out = NULL;
    if (n_measured) *n_measured = 0;
    u64map *m = NULL;
    trace_t *o = trace_new();
    ms_status st = o ? record_times(ops, n_ops, &m) : MS_ERR_NOMEM;
    if (st == MS_OK && (st = record_meta(t, info, o)) != MS_OK) {
        ms_fail(err, st, "recorded trace: cannot set its meta data (%s)", ms_status_str(st));
        u64map_free(m);
        trace_free(o);
        return st;
    }
    size_t measured = 0;
    for (size_t i = 0; i < trace_count(t) && st == MS_OK; i++) {
        trace_rec r = *trace_get(t, i);
        uint64_t bits;
        if (r.type == TR_OP && u64map_get(m, r.u.op.id, &bits)) {
            memcpy(&r.u.op.dur_us, &bits, sizeof bits);
            measured++;
        }
        st = trace_append(o, &r);
    }
    u64map_free(m);
    if (st != MS_OK) {
        trace_free(o);
        return ms_fail(err, st, "recorded trace: %s", ms_status_str(st));
    }
    if (n_measured) *n_measured = measured;
    *out = o;
    return MS_OK;
}

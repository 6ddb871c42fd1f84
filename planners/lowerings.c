/* lowerings.c — the table of lowerings (lowerings.h): the rows looked up by the name a plan
 * gives, and lower_schedule, which runs the one a plan names. Used by every caller of
 * lower_schedule. */
#include "planners/lowerings.h"

#include <stdio.h>
#include <string.h>

void lower_opts_default(lower_opts *o)
{
    memset(o, 0, sizeof *o);
    o->iter_first = INT64_MIN;
    o->iter_count = 0;
    o->emit_marks = 1;
    o->overlap_ovl = 1;
}

/* Adding a lowering is one line here: X(its lower_backend row), defined next to its code.
 * The rows of the other files are declared here, not through their headers, so that this
 * table depends on no lowering (their headers all include lowerings.h). */
#define LOWER_LIST(X)          \
    X(lower_backend_tensor)    \
    X(lower_backend_chunks)    \
    X(lower_backend_dha)

#define LOWER_DECLARE(b) extern const lower_backend b;
#define LOWER_ENTRY(b) &b,
LOWER_LIST(LOWER_DECLARE)
static const lower_backend *const lowerings[] = { LOWER_LIST(LOWER_ENTRY) };

const lower_backend *const *lower_registry(size_t *n)
{
    *n = sizeof lowerings / sizeof *lowerings;
    return lowerings;
}

const lower_backend *lower_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof lowerings / sizeof *lowerings; i++)
        if (!strcmp(lowerings[i]->name, name)) return lowerings[i];
    return NULL;
}

ms_status lower_schedule(const trace_t *t, const plan_t *p, const machine_t *m,
                         const lower_opts *o, schedule_t **out, ms_error *err)
{
    *out = NULL;
    if (!t) return ms_fail(err, MS_ERR_INVALID, "lower: no trace");
    /* the markers that named the lowering before plans had a `lowering` line (plan_load
     * reads them in such files): anything but 0 or 1 is a hand edit gone wrong */
    ms_status mst = p ? plan_markers_check(p, err) : MS_OK;
    if (mst != MS_OK) return mst;
    const lower_backend *b = lower_find(p ? p->lowering : "tensor");
    if (!b) {
        char names[256];
        size_t len = 0;
        names[0] = 0;
        for (size_t i = 0; i < sizeof lowerings / sizeof *lowerings && len < sizeof names; i++) {
            int w = snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                             lowerings[i]->name);
            if (w > 0) len += (size_t)w;
        }
        return ms_fail(err, MS_ERR_INVALID, "plan names lowering '%s', which is not one of "
                       "%s", p->lowering, names);
    }
    return b->lower(t, p, m, o, out, err);
}


/* test_sbuild.c — unit tests of the schedule builder the lowerings share
 * (planners/sbuild.c): fresh actions carry the cursor's layer and phase, the hook sees every
 * action before it is added, tensor and event actions, and the counts a lowering reports.
 * Run by make check. */
#include "planners/sbuild.h"
#include "tests/tap.h"

#include <string.h>

/* A hook that moves every ALLOC to pool 3 and counts what it saw. */
static void pool3(void *ctx, sched_action *a)
{
    (*(int *)ctx)++;
    if (a->kind == SA_ALLOC) a->pool = 3;
}

static void test_cursor(void)
{
    schedule_t *s = sched_new();
    ms_error err;
    ms_error_clear(&err);
    sbuild *b = s ? sbuild_new(s, &err, "out of memory while testing") : NULL;
    TAP_OK(b != NULL, "a builder over a fresh schedule");
    if (!b) {
        sched_free(s);
        return;
    }
    sched_action a = sbuild_act(b, SA_COMPUTE, SS_COMPUTE);
    TAP_OK(a.op == -1 && a.layer == -1 && a.phase == TP_NONE && a.dha_eff == 1.0 && a.bytes == 0,
           "a fresh action: op -1, layer -1, no phase, the link's DHA rate");
    sbuild_at(b, 7, TP_BWD);
    a = sbuild_act(b, SA_FREE, SS_D2H);
    TAP_OK(a.layer == 7 && a.phase == TP_BWD && a.kind == SA_FREE && a.stream == SS_D2H,
           "the cursor's layer and phase, the kind and stream asked for");
    sbuild_free(b);
    sched_free(s);
}

static void test_put(void)
{
    schedule_t *s = sched_new();
    ms_error err;
    ms_error_clear(&err);
    sbuild *b = s ? sbuild_new(s, &err, NULL) : NULL;
    if (!b) {
        TAP_OK(0, "a builder");
        sched_free(s);
        return;
    }
    int seen = 0;
    sbuild_set_hook(b, pool3, &seen);
    sbuild_at(b, 2, TP_FWD);
    uint32_t e = sbuild_new_event(b);
    ms_status st = sbuild_tensor(b, SA_ALLOC, SS_COMPUTE, 11, 4096);
    if (!st) st = sbuild_tensor(b, SA_COPY_D2H, SS_D2H, 11, 4096);
    if (!st) st = sbuild_event(b, SA_RECORD, SS_D2H, e);
    if (!st) st = sbuild_event(b, SA_WAIT, SS_H2D, e);
    if (!st) st = sbuild_tensor(b, SA_COPY_H2D, SS_H2D, 11, 1024);
    if (!st) st = sbuild_tensor(b, SA_FREE, SS_COMPUTE, 11, 0);
    TAP_OK(st == MS_OK && sched_count(s) == 6, "six actions added in program order");
    TAP_OK(seen == 6, "the hook saw every action (%d)", seen);
    const sched_action *x = sched_get(s, 0);
    TAP_OK(x && x->pool == 3 && x->tensor == 11 && x->bytes == 4096 && x->layer == 2 &&
           x->phase == TP_FWD, "the hook's change and the cursor reach the schedule");
    x = sched_get(s, 3);
    TAP_OK(x && x->kind == SA_WAIT && x->event == e && x->pool == 0, "an event action");
    TAP_OK(sbuild_actions(b) == 6 && sbuild_events(b) == 1 && sbuild_d2h_bytes(b) == 4096 &&
           sbuild_h2d_bytes(b) == 1024, "counts: 6 actions, 1 event, bytes each way");
    sbuild_free(b);
    sched_free(s);
}

int main(void)
{
    test_cursor();
    test_put();
    return tap_done();
}

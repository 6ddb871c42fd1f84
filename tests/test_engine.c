/* test_engine.c — unit tests of the discrete-event engine (sim/engine.h): ordering by time
 * then insertion order, cancellation by generation, time never going back, stop, and a
 * large randomized schedule checked against a sorted reference. Part of `make check`. */
#include "sim/engine.h"

#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"

typedef struct log {
    uint64_t arg[64];
    double t[64];
    size_t n;
} log;

static void rec(eng_t *e, void *ctx, uint64_t arg)
{
    log *l = ctx;
    if (l->n < 64) {
        l->arg[l->n] = arg;
        l->t[l->n++] = eng_now(e);
    }
}

/* An event that schedules two more at the same time as itself. */
static void spawn(eng_t *e, void *ctx, uint64_t arg)
{
    rec(e, ctx, arg);
    eng_after(e, 0, rec, ctx, arg * 10 + 1);
    eng_after(e, 0, rec, ctx, arg * 10 + 2);
}

static void test_ordering(void)
{
    eng_t *e = eng_new();
    log l = { .n = 0 };
    /* Five events at t=5 inserted in the order 0..4, interleaved with earlier/later ones. */
    eng_at(e, 5, rec, &l, 100);
    eng_at(e, 7, rec, &l, 300);
    eng_at(e, 5, rec, &l, 101);
    eng_at(e, 1, rec, &l, 0);
    eng_at(e, 5, rec, &l, 102);
    eng_at(e, 5, rec, &l, 103);
    eng_at(e, 5, rec, &l, 104);
    TAP_OK(eng_pending(e) == 7, "7 events pending");
    uint64_t ran = eng_run(e);
    TAP_OK(ran == 7 && l.n == 7, "all 7 ran");
    TAP_OK(l.arg[0] == 0 && l.t[0] == 1, "earliest first (t=1)");
    int order_ok = 1;
    for (int i = 0; i < 5; i++) order_ok &= l.arg[1 + i] == 100u + (unsigned)i && l.t[1 + i] == 5;
    TAP_OK(order_ok, "equal times run in insertion order");
    TAP_OK(l.arg[6] == 300 && eng_now(e) == 7, "latest last; now = 7");
    TAP_OK(eng_pending(e) == 0 && !eng_step(e), "nothing left");
    eng_free(e);
}

static void test_nested_same_time(void)
{
    eng_t *e = eng_new();
    log l = { .n = 0 };
    eng_at(e, 2, spawn, &l, 1);
    eng_at(e, 2, rec, &l, 2);
    eng_run(e);
    /* 1 runs, schedules 11 and 12 (at t=2, after the already queued 2). */
    TAP_OK(l.n == 4 && l.arg[0] == 1 && l.arg[1] == 2 && l.arg[2] == 11 && l.arg[3] == 12,
           "events scheduled at the current time run after those queued earlier");
    eng_free(e);
}

static void test_cancel(void)
{
    eng_t *e = eng_new();
    log l = { .n = 0 };
    eng_id a = eng_at(e, 3, rec, &l, 1);
    eng_id b = eng_at(e, 4, rec, &l, 2);
    eng_id c = eng_at(e, 9, rec, &l, 3);
    TAP_OK(a && b && c && a != b && b != c, "ids are distinct and non-zero");
    TAP_OK(eng_cancel(e, b) == 1, "cancel a pending event");
    TAP_OK(eng_cancel(e, b) == 0, "cancelling twice is a no-op");
    TAP_OK(!eng_pending_id(e, b) && eng_pending_id(e, a), "pending_id reflects cancellation");
    TAP_OK(eng_pending(e) == 2, "pending count drops");
    /* A new event reuses b's slot: the stale id must not cancel it. */
    eng_id d = eng_at(e, 4, rec, &l, 4);
    TAP_OK(d != b && eng_cancel(e, b) == 0 && eng_pending_id(e, d), "stale id does not hit the reused slot");
    TAP_OK(eng_cancel(e, c) == 1, "cancel the last event");
    eng_run(e);
    TAP_OK(l.n == 2 && l.arg[0] == 1 && l.arg[1] == 4, "cancelled events never run");
    TAP_OK(eng_now(e) == 4, "a cancelled event does not advance time (now=4, not 9)");
    TAP_OK(eng_cancel(e, a) == 0, "cancelling an event that ran returns 0");
    TAP_OK(eng_cancel(e, 0) == 0, "id 0 is not an event");
    eng_free(e);
}

static void test_past_and_stop(void)
{
    eng_t *e = eng_new();
    log l = { .n = 0 };
    eng_at(e, 10, rec, &l, 1);
    eng_step(e);
    eng_at(e, 3, rec, &l, 2); /* in the past: runs at now */
    eng_after(e, -5, rec, &l, 3);
    eng_step(e);
    eng_step(e);
    TAP_OK(l.n == 3 && l.t[1] == 10 && l.t[2] == 10, "times before now run at now");
    eng_at(e, 20, rec, &l, 4);
    eng_at(e, 30, rec, &l, 5);
    eng_stop(e); /* only affects a running eng_run; a fresh run clears it */
    TAP_OK(eng_run(e) == 2 && eng_now(e) == 30, "eng_run after a stale stop runs all");
    eng_free(e);
    eng_free(NULL);
    TAP_OK(1, "eng_free(NULL) is a no-op");
}

/* Stops from inside a callback. */
static void stopper(eng_t *e, void *ctx, uint64_t arg)
{
    rec(e, ctx, arg);
    eng_stop(e);
}

static void test_stop_inside(void)
{
    eng_t *e = eng_new();
    log l = { .n = 0 };
    eng_at(e, 1, rec, &l, 1);
    eng_at(e, 2, stopper, &l, 2);
    eng_at(e, 3, rec, &l, 3);
    TAP_OK(eng_run(e) == 2 && eng_pending(e) == 1, "eng_stop ends the run after the current event");
    eng_free(e);
}

typedef struct big {
    double *t;
    uint64_t *seq;
    size_t n;
    int bad;
} big;

static void big_rec(eng_t *e, void *ctx, uint64_t arg)
{
    big *b = ctx;
    if (b->n > 0) {
        double pt = b->t[b->n - 1];
        uint64_t ps = b->seq[b->n - 1];
        if (eng_now(e) < pt || (eng_now(e) == pt && arg < ps)) b->bad = 1;
    }
    b->t[b->n] = eng_now(e);
    b->seq[b->n++] = arg;
}

/* 20000 events on 50 distinct times, two in three cancelled: the survivors run sorted by
 * (time, insertion order). This also exercises heap compaction. */
static void test_random(void)
{
    enum { N = 20000 };
    eng_t *e = eng_new();
    big b = { calloc(N, sizeof(double)), calloc(N, sizeof(uint64_t)), 0, 0 };
    eng_id *ids = calloc(N, sizeof *ids);
    uint64_t x = 12345;
    size_t live = 0;
    for (size_t i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = eng_at(e, (double)((x >> 33) % 50), big_rec, &b, i);
        if (i % 3 != 2) eng_cancel(e, ids[i]); /* stale entries outnumber live ones */
        else live++;
    }
    TAP_OK(eng_pending(e) == live, "pending = survivors");
    eng_run(e);
    TAP_OK(b.n == live && !b.bad, "survivors ran in (time, sequence) order");
    int kept = 1;
    for (size_t i = 0; i < b.n; i++) kept &= (b.seq[i] % 3) == 2;
    TAP_OK(kept, "no cancelled event ran");
    TAP_OK(eng_events_run(e) == live, "events_run counts only real events");
    free(b.t);
    free(b.seq);
    free(ids);
    eng_free(e);
}

/* Posted events (eng_post: no id) among cancellable ones: one order by (time, insertion),
 * counted as pending, untouched by cancellations and compaction around them. */
static void test_post(void)
{
    enum { N = 6000 };
    eng_t *e = eng_new();
    big b = { calloc(N, sizeof(double)), calloc(N, sizeof(uint64_t)), 0, 0 };
    uint64_t x = 777;
    size_t live = 0;
    int ok = 1;
    for (size_t i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        double t = (double)((x >> 33) % 40);
        if (i % 2) {
            ok &= eng_post(e, t, big_rec, &b, i) == 1;
            live++;
        } else {
            eng_id id = eng_at(e, t, big_rec, &b, i);
            if (i % 4 == 0) eng_cancel(e, id);
            else live++;
        }
    }
    TAP_OK(ok && eng_pending(e) == live, "posted events count as pending");
    eng_run(e);
    int kept = 1;
    for (size_t i = 0; i < b.n; i++) kept &= (b.seq[i] % 4) != 0;
    TAP_OK(b.n == live && !b.bad && kept && eng_pending(e) == 0,
           "posted and cancellable events run in one (time, insertion) order");
    log l = { .n = 0 };
    eng_post_after(e, -1, rec, &l, 1);
    eng_post(e, 0, rec, &l, 2); /* before now: runs at now */
    eng_run(e);
    TAP_OK(l.n == 2 && l.arg[0] == 1 && l.arg[1] == 2 && l.t[1] == eng_now(e),
           "a posted event before now runs at now, after those posted earlier");
    free(b.t);
    free(b.seq);
    eng_free(e);
}

int main(void)
{
    test_ordering();
    test_nested_same_time();
    test_cancel();
    test_past_and_stop();
    test_stop_inside();
    test_random();
    test_post();
    return tap_done();
}

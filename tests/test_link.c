/* test_link.c — unit tests of the host-link model (sim/link.h) against hand-computed
 * max-min fair rates and completion times: one flow, flows sharing a direction, both
 * directions under a duplex cap, a capped DHA flow beside a copy, flows finishing at
 * different times so the rest speed up, a flow joining mid-way, busy time and bytes.
 * Part of `make check`. */
#include "sim/link.h"

#include <math.h>

#include "tests/tap.h"

#define GB 1e9

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1); }

typedef struct done_log {
    double t[8];
    int n;
    eng_t *e;
} done_log;

static void on_done(void *ctx, uint64_t arg)
{
    done_log *l = ctx;
    if (arg < 8) l->t[arg] = eng_now(l->e);
    l->n++;
}

static void test_maxmin_direct(void)
{
    double r[3];
    link_dir d1[1] = { LINK_H2D };
    double c1[1] = { 20 * GB };
    link_maxmin(1, d1, c1, 50 * GB, 50 * GB, 80 * GB, r, NULL);
    TAP_OK(near(r[0], 20 * GB), "one flow: own cap below the direction cap wins (20 GB/s)");
    c1[0] = 0;
    link_maxmin(1, d1, c1, 50 * GB, 50 * GB, 40 * GB, r, NULL);
    TAP_OK(near(r[0], 40 * GB), "one uncapped flow: min(direction 50, duplex 40) = 40 GB/s");

    link_dir d2[2] = { LINK_H2D, LINK_H2D };
    double c2[2] = { 50 * GB, 50 * GB };
    link_maxmin(2, d2, c2, 50 * GB, 50 * GB, 100 * GB, r, NULL);
    TAP_OK(near(r[0], 25 * GB) && near(r[1], 25 * GB), "two H2D copies split 50 GB/s: 25 + 25");

    link_dir d3[2] = { LINK_H2D, LINK_D2H };
    link_maxmin(2, d3, c2, 50 * GB, 50 * GB, 80 * GB, r, NULL);
    TAP_OK(near(r[0], 40 * GB) && near(r[1], 40 * GB), "H2D + D2H under duplex 80: 40 + 40");

    /* Asymmetric: D2H's own direction (30) binds before the duplex share (35); H2D takes
     * the rest of the duplex cap: min(50, 70 - 30) = 40. */
    double c3[2] = { 0, 0 };
    link_maxmin(2, d3, c3, 50 * GB, 30 * GB, 70 * GB, r, NULL);
    TAP_OK(near(r[0], 40 * GB) && near(r[1], 30 * GB), "duplex 70, D2H cap 30: H2D 40, D2H 30");

    /* A DHA read capped at 20 beside an H2D copy: the copy gets the rest (30). */
    double c4[2] = { 20 * GB, 50 * GB };
    link_maxmin(2, d2, c4, 50 * GB, 50 * GB, 100 * GB, r, NULL);
    TAP_OK(near(r[0], 20 * GB) && near(r[1], 30 * GB), "capped DHA 20 + copy gets the rest 30");

    /* Three flows: two H2D (one capped at 10) and one D2H, duplex 60, directions 50/50:
     * level 10 freezes the capped one; then H2D copy and D2H share the duplex's 50 left:
     * 25 each (H2D direction: 10 + 25 <= 50). */
    link_dir d5[3] = { LINK_H2D, LINK_H2D, LINK_D2H };
    double c5[3] = { 10 * GB, 0, 0 };
    link_maxmin(3, d5, c5, 50 * GB, 50 * GB, 60 * GB, r, NULL);
    TAP_OK(near(r[0], 10 * GB) && near(r[1], 25 * GB) && near(r[2], 25 * GB),
           "capped 10 + H2D 25 + D2H 25 under duplex 60");

    double c6[1] = { 0 };
    link_maxmin(1, d1, c6, 0, 0, 0, r, NULL);
    TAP_OK(isinf(r[0]), "no constraint at all: infinite rate");
}

/* Three H2D flows of 1, 2, 3 GB at t=0 on a 60 GB/s direction: 20 each until the first
 * ends at 50 ms; then 30 each, the second ends 33.33 ms later; the third alone at 60
 * ends at 100 ms (6 GB at 60 GB/s). */
static void test_three_flows(void)
{
    eng_t *e = eng_new();
    link_t *l = link_new(e, 60 * GB, 60 * GB, 0);
    done_log d = { .n = 0, .e = e };
    uint64_t id0, id2;
    link_start(l, LINK_H2D, 1000000000ULL, 60 * GB, on_done, &d, 0, &id0);
    link_start(l, LINK_H2D, 2000000000ULL, 60 * GB, on_done, &d, 1, NULL);
    link_start(l, LINK_H2D, 3000000000ULL, 60 * GB, on_done, &d, 2, &id2);
    TAP_OK(near(link_flow_rate_Bps(l, id0), 20 * GB), "three flows: 20 GB/s each");
    TAP_OK(link_active(l, LINK_H2D) == 3 && link_active(l, LINK_D2H) == 0, "3 active H2D");
    eng_run(e);
    TAP_OK(d.n == 3, "all three finished");
    TAP_OK(near(d.t[0], 50000), "first ends at 50000 us");
    TAP_OK(near(d.t[1], 50000 + 1e9 / 30e9 * 1e6), "second ends at 83333.33 us");
    TAP_OK(near(d.t[2], 100000), "third ends at 100000 us");
    TAP_OK(link_flow_rate_Bps(l, id2) < 0, "finished flows are gone");
    TAP_OK(near(link_busy_us(l, LINK_H2D), 100000) && link_busy_us(l, LINK_D2H) == 0,
           "H2D busy 100000 us, D2H busy 0");
    TAP_OK(near(link_bytes(l, LINK_H2D), 6e9), "6 GB moved H2D");
    link_free(l);
    eng_free(e);
}

/* H2D + D2H both 4 GB under duplex 80 (directions 50): 40 + 40 until both end at 100 ms. */
static void test_duplex(void)
{
    eng_t *e = eng_new();
    link_t *l = link_new(e, 50 * GB, 50 * GB, 80 * GB);
    done_log d = { .n = 0, .e = e };
    link_start(l, LINK_H2D, 4000000000ULL, 50 * GB, on_done, &d, 0, NULL);
    link_start(l, LINK_D2H, 2000000000ULL, 50 * GB, on_done, &d, 1, NULL);
    eng_run(e);
    /* D2H 2 GB at 40 ends at 50 ms; H2D has moved 2 GB, then runs alone at 50:
     * 2 GB / 50 GB/s = 40 ms more: 90 ms. */
    TAP_OK(near(d.t[1], 50000), "duplex: D2H 2 GB at 40 GB/s ends at 50000 us");
    TAP_OK(near(d.t[0], 90000), "duplex: H2D speeds up to 50 GB/s, ends at 90000 us");
    TAP_OK(near(link_busy_us(l, LINK_D2H), 50000), "D2H busy 50000 us");
    link_free(l);
    eng_free(e);
}

/* A DHA read capped at 20 GB/s (1 GB) beside an H2D copy (3 GB) on 50 GB/s: copy at 30
 * until the DHA flow ends at 50 ms (copy moved 1.5 GB), then at 50: 1.5 GB in 30 ms. */
static void test_dha_beside_copy(void)
{
    eng_t *e = eng_new();
    link_t *l = link_new(e, 50 * GB, 50 * GB, 100 * GB);
    done_log d = { .n = 0, .e = e };
    uint64_t dha, cp;
    link_start(l, LINK_H2D, 1000000000ULL, 20 * GB, on_done, &d, 0, &dha);
    link_start(l, LINK_H2D, 3000000000ULL, 50 * GB, on_done, &d, 1, &cp);
    TAP_OK(near(link_flow_rate_Bps(l, dha), 20 * GB) && near(link_flow_rate_Bps(l, cp), 30 * GB),
           "DHA 20, copy 30");
    eng_run(e);
    TAP_OK(near(d.t[0], 50000) && near(d.t[1], 80000), "DHA ends 50000 us, copy 80000 us");
    link_free(l);
    eng_free(e);
}

typedef struct later {
    link_t *l;
    done_log *d;
} later;

static void start_later(eng_t *e, void *ctx, uint64_t arg)
{
    (void)e;
    later *x = ctx;
    link_start(x->l, LINK_H2D, 1000000000ULL, 0, on_done, x->d, arg, NULL);
}

/* A 2 GB flow alone at 50 GB/s from 0; a 1 GB flow joins at 20 ms (1 GB moved so far);
 * both at 25 until 60 ms (each 1 GB); then nothing is left of either: both end at 60 ms.
 * A third flow starts at 100 ms after an idle gap: busy excludes the gap. */
static void test_join_and_gap(void)
{
    eng_t *e = eng_new();
    link_t *l = link_new(e, 50 * GB, 50 * GB, 0);
    done_log d = { .n = 0, .e = e };
    later x = { l, &d };
    link_start(l, LINK_H2D, 2000000000ULL, 0, on_done, &d, 0, NULL);
    eng_at(e, 20000, start_later, &x, 1);
    eng_at(e, 100000, start_later, &x, 2);
    eng_run(e);
    TAP_OK(near(d.t[0], 60000) && near(d.t[1], 60000), "joiner halves the rate: both end at 60000 us");
    TAP_OK(near(d.t[2], 120000), "third flow alone: 100000 + 20000 us");
    TAP_OK(near(link_busy_us(l, LINK_H2D), 80000), "busy time skips the idle gap (80000 us)");
    TAP_OK(link_flows_started(l) == 3, "3 flows started");
    link_free(l);
    eng_free(e);
}

static int zero_called_inline;
static void zero_done(void *ctx, uint64_t arg)
{
    (void)arg;
    done_log *l = ctx;
    l->t[0] = eng_now(l->e);
    l->n++;
}

static void test_zero_bytes(void)
{
    eng_t *e = eng_new();
    link_t *l = link_new(e, 50 * GB, 50 * GB, 0);
    done_log d = { .n = 0, .e = e };
    link_start(l, LINK_D2H, 0, 0, zero_done, &d, 0, NULL);
    zero_called_inline = d.n;
    eng_run(e);
    TAP_OK(zero_called_inline == 0 && d.n == 1 && d.t[0] == 0,
           "a 0-byte flow finishes at once, from an event, not inside link_start");
    TAP_OK(link_start(l, (link_dir)7, 1, 0, zero_done, &d, 0, NULL) == MS_ERR_INVALID,
           "bad direction rejected");
    link_free(l);
    eng_free(e);
    link_free(NULL);
}

/* What cuMemSetAccess's cost depends on (sim/simbackend.c): the time the live device-to-host
 * copies still need at their current rates, DHA flows not counted. A 2 GB copy beside a DHA
 * write of 1 GB capped at 10 GB/s on a 50 GB/s direction: the copy gets 40 GB/s, so 50000 us
 * left at the start; the H2D direction has none. */
static void test_copies_left(void)
{
    eng_t *e = eng_new();
    link_t *l = link_new(e, 50 * GB, 50 * GB, 0);
    done_log d = { .n = 0, .e = e };
    link_start_dha(l, LINK_D2H, 1000000000ULL, 10 * GB, on_done, &d, 0, NULL);
    link_start(l, LINK_D2H, 2000000000ULL, 0, on_done, &d, 1, NULL);
    TAP_OK(near(link_copies_left_us(l, LINK_D2H), 50000),
           "copies left: 2 GB at 40 GB/s = 50000 us (the DHA write not counted; got %.1f)",
           link_copies_left_us(l, LINK_D2H));
    TAP_OK(link_copies_left_us(l, LINK_H2D) == 0, "no copy in the other direction: 0");
    eng_run(e);
    TAP_OK(link_copies_left_us(l, LINK_D2H) == 0, "all done: 0");
    link_free(l);
    eng_free(e);
}

int main(void)
{
    test_maxmin_direct();
    test_three_flows();
    test_duplex();
    test_dha_beside_copy();
    test_join_and_gap();
    test_zero_bytes();
    test_copies_left();
    return tap_done();
}

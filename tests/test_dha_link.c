/* test_dha_link.c — unit tests (TAP) of the DHA sharing weight of the host-link model
 * (sim/link.h): weighted max-min rates against hand-computed cases, the fair default, the
 * H200 measurement the weight comes from (a DHA read kernel kept 46.6 GB/s beside an H2D
 * copy that got about 8 GB/s, the link staying near 55 GB/s), completion times when the
 * weighted DHA flow ends first, and bad weights. Part of `make check`. */
#include "sim/link.h"

#include <math.h>

#include "tests/tap.h"

#define GB 1e9

static int near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * (fabs(b) > 1 ? fabs(b) : 1);
}

typedef struct done_log {
    double t[4];
    eng_t *e;
} done_log;

static void on_done(void *ctx, uint64_t arg)
{
    done_log *l = ctx;
    if (arg < 4) l->t[arg] = eng_now(l->e);
}

static void test_static(void)
{
    double r[3];
    link_dir h2[2] = { LINK_H2D, LINK_H2D };
    double caps[2] = { 55 * GB, 55 * GB };
    link_maxmin_w(2, h2, caps, NULL, 55 * GB, 55 * GB, 100 * GB, r, NULL);
    TAP_OK(near(r[0], 27.5 * GB, 1e-12) && near(r[1], 27.5 * GB, 1e-12),
           "no weights: fair, 27.5 + 27.5 on 55 GB/s");

    double w1[2] = { 1, 1 };
    double r2[2];
    link_maxmin(2, h2, caps, 55 * GB, 55 * GB, 100 * GB, r2, NULL);
    link_maxmin_w(2, h2, caps, w1, 55 * GB, 55 * GB, 100 * GB, r, NULL);
    TAP_OK(r[0] == r2[0] && r[1] == r2[1], "weights 1, 1 give exactly link_maxmin's rates");

    /* DHA read (own cap 51.2) with weight 5.5 beside a copy (cap 55) on a 55 GB/s
     * direction: level = 55 / 6.5; DHA 5.5 x 8.4615 = 46.54, copy 8.46. */
    double wd[2] = { 5.5, 1 };
    double cd[2] = { 51.2 * GB, 55 * GB };
    link_maxmin_w(2, h2, cd, wd, 55 * GB, 55 * GB, 100 * GB, r, NULL);
    TAP_OK(near(r[0], 55 * GB * 5.5 / 6.5, 1e-12) && near(r[1], 55 * GB / 6.5, 1e-12),
           "weight 5.5: DHA %.2f GB/s, copy %.2f GB/s (hand: 46.54, 8.46)", r[0] / GB,
           r[1] / GB);
    TAP_OK(near(r[0], 46.6 * GB, 0.01) && r[1] > 7.5 * GB && r[1] < 9 * GB &&
               near(r[0] + r[1], 55 * GB, 1e-12),
           "the H200 measurement (DHA 46.6, copy ~8, total ~55 GB/s) within 1%%");

    /* The DHA flow's own cap binds first: capped at 20, the copy takes the rest (30). */
    double cc[2] = { 20 * GB, 50 * GB };
    link_maxmin_w(2, h2, cc, wd, 50 * GB, 50 * GB, 100 * GB, r, NULL);
    TAP_OK(near(r[0], 20 * GB, 1e-12) && near(r[1], 30 * GB, 1e-12),
           "weighted DHA capped at 20: DHA 20, copy 30");

    /* Weights 1, 2, 3 on 60 GB/s: 10, 20, 30. */
    link_dir h3[3] = { LINK_H2D, LINK_H2D, LINK_H2D };
    double c3[3] = { 0, 0, 0 }, w3[3] = { 1, 2, 3 };
    link_maxmin_w(3, h3, c3, w3, 60 * GB, 60 * GB, 0, r, NULL);
    TAP_OK(near(r[0], 10 * GB, 1e-12) && near(r[1], 20 * GB, 1e-12) &&
               near(r[2], 30 * GB, 1e-12), "weights 1, 2, 3 on 60 GB/s: 10, 20, 30");

    /* H2D weight 3 and D2H weight 1, directions 50, duplex 80: H2D saturates its direction
     * at level 16.67 (3 x 16.67 = 50); D2H then takes the duplex's remaining 30. */
    link_dir hd[2] = { LINK_H2D, LINK_D2H };
    double c0[2] = { 0, 0 }, w31[2] = { 3, 1 };
    link_maxmin_w(2, hd, c0, w31, 50 * GB, 50 * GB, 80 * GB, r, NULL);
    TAP_OK(near(r[0], 50 * GB, 1e-12) && near(r[1], 30 * GB, 1e-12),
           "weighted duplex: H2D 50 (its direction), D2H 30 (the duplex's rest)");

    /* A weight <= 0 or non-finite counts as 1 (fair). */
    double wb[2] = { 0, NAN };
    link_maxmin_w(2, h2, caps, wb, 55 * GB, 55 * GB, 100 * GB, r, NULL);
    TAP_OK(near(r[0], 27.5 * GB, 1e-12) && near(r[1], 27.5 * GB, 1e-12),
           "weights 0 and NaN are taken as 1");
}

/* On a live link: a 0.5 GB DHA read (weight 5.5, cap 51.2) and a 1 GB copy (cap 55) start
 * together on 55 GB/s. DHA at 46.54 ends at 0.5/46.54 = 10.74 ms; the copy has moved
 * 8.46 x 10.74 = 90.9 MB, then runs alone at 55: (1e9 - 90.9e6) / 55e9 = 16.53 ms more. */
static void test_live(void)
{
    eng_t *e = eng_new();
    link_t *l = link_new(e, 55 * GB, 55 * GB, 100 * GB);
    done_log d = { .e = e };
    TAP_OK(link_dha_weight(l) == 1.0, "a new link shares fairly (DHA weight 1)");
    TAP_OK(link_set_dha_weight(l, 0) == MS_ERR_INVALID &&
               link_set_dha_weight(l, -2) == MS_ERR_INVALID &&
               link_set_dha_weight(l, INFINITY) == MS_ERR_INVALID &&
               link_set_dha_weight(l, NAN) == MS_ERR_INVALID && link_dha_weight(l) == 1.0,
           "weights 0, -2, inf, NaN are refused and leave the weight at 1");
    TAP_OK(link_set_dha_weight(l, 5.5) == MS_OK && link_dha_weight(l) == 5.5, "weight 5.5 set");
    uint64_t cp, dha;
    link_start(l, LINK_H2D, 1000000000ULL, 55 * GB, on_done, &d, 0, &cp);
    link_start_dha(l, LINK_H2D, 500000000ULL, 51.2 * GB, on_done, &d, 1, &dha);
    double rd = link_flow_rate_Bps(l, dha), rc = link_flow_rate_Bps(l, cp);
    TAP_OK(near(rd, 55 * GB * 5.5 / 6.5, 1e-12) && near(rc, 55 * GB / 6.5, 1e-12),
           "live: DHA %.2f GB/s, copy %.2f GB/s", rd / GB, rc / GB);
    eng_run(e);
    double t_dha = 0.5e9 / (55e9 * 5.5 / 6.5) * 1e6;
    double moved = 55e9 / 6.5 * t_dha * 1e-6;
    double t_cp = t_dha + (1e9 - moved) / 55e9 * 1e6;
    TAP_OK(near(d.t[1], t_dha, 1e-9), "DHA ends at %.2f us (hand %.2f)", d.t[1], t_dha);
    TAP_OK(near(d.t[0], t_cp, 1e-9), "copy ends at %.2f us (hand %.2f)", d.t[0], t_cp);
    TAP_OK(near(link_bytes(l, LINK_H2D), 1.5e9, 1e-9), "1.5 GB moved");
    link_free(l);
    eng_free(e);

    /* The same pair with the default weight: fair, 27.5 each; DHA (0.5 GB) ends at
     * 18.18 ms, the copy (0.5 GB left) at 55: 9.09 ms more. */
    e = eng_new();
    l = link_new(e, 55 * GB, 55 * GB, 100 * GB);
    d.e = e;
    link_start(l, LINK_H2D, 1000000000ULL, 55 * GB, on_done, &d, 0, NULL);
    link_start_dha(l, LINK_H2D, 500000000ULL, 51.2 * GB, on_done, &d, 1, NULL);
    eng_run(e);
    TAP_OK(near(d.t[1], 0.5e9 / 27.5e9 * 1e6, 1e-9) &&
               near(d.t[0], (0.5e9 / 27.5e9 + 0.5e9 / 55e9) * 1e6, 1e-9),
           "fair default: DHA ends at 18181.82 us, copy at 27272.73 us");
    link_free(l);
    eng_free(e);

    /* link_start_w with an explicit weight (and a bad one, taken as 1). */
    e = eng_new();
    l = link_new(e, 60 * GB, 60 * GB, 0);
    uint64_t a, b;
    link_start_w(l, LINK_H2D, 1000000000ULL, 0, 2.0, on_done, &d, 0, &a);
    link_start_w(l, LINK_H2D, 1000000000ULL, 0, -1.0, on_done, &d, 1, &b);
    TAP_OK(near(link_flow_rate_Bps(l, a), 40 * GB, 1e-12) &&
               near(link_flow_rate_Bps(l, b), 20 * GB, 1e-12),
           "link_start_w weights 2 and (bad) -1 -> 1: 40 + 20 on 60 GB/s");
    link_free(l);
    eng_free(e);
}

int main(void)
{
    test_static();
    test_live();
    TAP_NOTE("sim/exec.c starts DHA kernels' flows with link_start; with link_start_dha and a "
             "machine's dha weight they get the weighted share tested here");
    return tap_done();
}

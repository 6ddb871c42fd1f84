/* probe_node.c — the node figures of `memsim probe --collectives` from its samples (see
 * probe_node.h). Used by runtime/main.c and tests/test_probe_node.c. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/probe_node.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[PN_KINDS] = {"all_gather", "reduce_scatter", "all_reduce"};

const char *pn_kind_name(pn_kind k) { return (unsigned)k < PN_KINDS ? kind_names[k] : "?"; }

/* Steps of the roofline model's ring: p - 1, twice for an all-reduce. */
static double steps(const pn_coll_sample *s)
{
    double p = s->ranks;
    return (s->kind == PN_ALL_REDUCE ? 2.0 : 1.0) * (p - 1.0);
}

double pn_bus_Bps(const pn_coll_sample *s)
{
    if (!(s->us > 0) || s->ranks < 2) return 0;
    return (double)s->bytes / (s->us * 1e-6) * steps(s) / (double)s->ranks;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int switch_share(const pn_link_sample *ls, size_t nl, double *solo)
{
    *solo = 0;
    for (size_t i = 0; i < nl; i++)
        if (ls[i].h2d && ls[i].gpus == 1 && ls[i].pair < 1) *solo = ls[i].gpu0_Bps;
    int share = 1;
    for (size_t i = 0; *solo > 0 && i < nl; i++)
        if (ls[i].h2d && ls[i].pair >= 1 && ls[i].gpu0_Bps < 0.75 * *solo) share++;
    return share;
}

/* The least-squares line t = a + b bytes through one series (a kind at a rank count):
 * b = steps / (p bw), a = launch + steps lat. 0 when it has fewer than two sizes. */
static int fit_series(const pn_coll_sample *cs, size_t n, pn_kind k, int ranks,
                      double launch_us, double *bw, double *lat)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, st = 0;
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        if (cs[i].kind != k || cs[i].ranks != ranks || !(cs[i].us > 0)) continue;
        double x = (double)cs[i].bytes, y = cs[i].us;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
        st = steps(&cs[i]);
        m++;
    }
    double den = m * sxx - sx * sx;
    if (m < 2 || !(den > 0)) return 0;
    double b = (m * sxy - sx * sy) / den, a = (sy - b * sx) / m;
    if (!(b > 0)) return 0;
    *bw = st / ((double)ranks * b) * 1e6;
    *lat = (a - launch_us) / st;
    if (*lat < 0) *lat = 0;
    return 1;
}

ms_status pn_fit_samples(const pn_coll_sample *cs, size_t n, const pn_link_sample *ls,
                         size_t nl, int gpus, double launch_us, pn_fit *out, ms_error *err)
{
    memset(out, 0, sizeof *out);
    double bw[3 * 64], lat[3 * 64];
    for (int k = 0; k < PN_KINDS; k++)
        for (int p = 2; p <= 64; p++)
            if (fit_series(cs, n, (pn_kind)k, p, launch_us, &bw[out->n_series],
                           &lat[out->n_series]))
                out->n_series++;
    if (!out->n_series)
        return ms_fail(err, MS_ERR_INVALID, "no collective was measured at two sizes or more: "
                       "the fit needs a line per collective and rank count");
    out->nvlink_Bps = median(bw, (size_t)out->n_series);
    out->nvlink_lat_us = median(lat, (size_t)out->n_series);
    out->gpus = gpus;
    out->gpus_per_switch = switch_share(ls, nl, &out->solo_Bps);
    if (out->gpus_per_switch > gpus) out->gpus_per_switch = gpus;
    return MS_OK;
}

void pn_apply(machine_profile *p, const pn_fit *f, const char *source)
{
    char note[2048];
    p->m.node_gpus = f->gpus;
    p->m.node_gpus_per_switch = f->gpus_per_switch;
    p->m.nvlink_Bps = f->nvlink_Bps;
    p->m.nvlink_lat_us = f->nvlink_lat_us;
    snprintf(note, sizeof note, "%s; the GPUs this machine shows", source);
    machine_set_source(p, "node.gpus", note);
    snprintf(note, sizeof note, "%s; NCCL all-gather, reduce-scatter and all-reduce of 1 MiB "
             "to 1 GiB over 2 to %d ranks, a least-squares line per collective and rank count "
             "through the roofline model's time (launch + steps x (lat + bytes / ranks / bw)), "
             "the median over the %d lines", source, f->gpus, f->n_series);
    machine_set_source(p, "node.nvlink_Bps", note);
    machine_set_source(p, "node.nvlink_lat_us", note);
    snprintf(note, sizeof note, "%s; 1 + the GPUs whose host-to-device copies at once with GPU "
             "0's slow it below 3/4 of its %.1f GB/s alone", source, f->solo_Bps / 1e9);
    machine_set_source(p, "node.gpus_per_switch", note);
}

void pn_write_raw(FILE *f, const pn_coll_sample *cs, size_t n, const pn_link_sample *ls,
                  size_t nl)
{
    fprintf(f, "what,ranks_or_gpus,pair,bytes,us,alg_GBps,bus_GBps,gpu0_GBps,sum_GBps\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s,%d,,%llu,%.3f,%.3f,%.3f,,\n", pn_kind_name(cs[i].kind), cs[i].ranks,
                (unsigned long long)cs[i].bytes, cs[i].us,
                cs[i].us > 0 ? (double)cs[i].bytes / (cs[i].us * 1e-6) / 1e9 : 0,
                pn_bus_Bps(&cs[i]) / 1e9);
    for (size_t i = 0; i < nl; i++)
        fprintf(f, "%s,%d,%d,%llu,,,,%.3f,%.3f\n", ls[i].h2d ? "host_h2d" : "host_d2h",
                ls[i].gpus, ls[i].pair, (unsigned long long)ls[i].bytes, ls[i].gpu0_Bps / 1e9,
                ls[i].sum_Bps / 1e9);
}

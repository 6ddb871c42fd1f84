/* test_probe_node.c — unit tests of what `memsim probe --collectives` makes of its samples
 * (runtime/probe_node.c): samples made from the roofline model's collective times at a known
 * bandwidth and latency give them back; the switch sharing read off the host link's rates;
 * the profile's node keys set, with their sources, and read back from the written file; the
 * raw CSV; the refusal without the sizes the fit needs. Plain C: runs in make check with or
 * without CUDA. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/probe_node.h"
#include "tests/tap.h"
#include "traces/roofline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Samples the roofline model gives on machine m for every kind, 2/4/8 ranks, 1 MiB..1 GiB. */
static size_t model_samples(const machine_t *m, pn_coll_sample *out)
{
    static const roof_coll kinds[PN_KINDS] = {ROOF_ALL_GATHER, ROOF_REDUCE_SCATTER,
                                              ROOF_ALL_REDUCE};
    size_t n = 0;
    for (int k = 0; k < PN_KINDS; k++)
        for (int p = 2; p <= 8; p *= 2)
            for (uint64_t b = 1ULL << 20; b <= 1ULL << 30; b *= 4)
                out[n++] = (pn_coll_sample){(pn_kind)k, p, b,
                                            roof_coll_us(m, kinds[k], b, p, p)};
    return n;
}

static void test_fit(void)
{
    machine_t m;
    memset(&m, 0, sizeof m);
    m.node_gpus = 8;
    m.nvlink_Bps = 380e9;
    m.nvlink_lat_us = 4.5;
    m.gpu_kernel_launch_us = 6;
    pn_coll_sample cs[256];
    size_t n = model_samples(&m, cs);
    pn_coll_sample ag = {PN_ALL_GATHER, 4, 1ULL << 30, 0};
    ag.us = roof_coll_us(&m, ROOF_ALL_GATHER, ag.bytes, 4, 4);
    TAP_OK(fabs(pn_bus_Bps(&ag) / 380e9 - 1) < 0.01, "bus bandwidth of a 1 GiB all-gather "
           "over 4 ranks: %.1f GB/s, the model's 380 less its latency", pn_bus_Bps(&ag) / 1e9);
    /* GPU 0 alone 55 GB/s; with GPU 1 it drops to 28, with the others it keeps 54 */
    pn_link_sample ls[9];
    size_t nl = 0;
    ls[nl++] = (pn_link_sample){1, 0, 1, 256 << 20, 55e9, 55e9};
    for (int j = 1; j < 8; j++)
        ls[nl++] = (pn_link_sample){2, j, 1, 256 << 20, j == 1 ? 28e9 : 54e9, 0};
    pn_fit f;
    ms_error err;
    ms_status st = pn_fit_samples(cs, n, ls, nl, 8, m.gpu_kernel_launch_us, &f, &err);
    TAP_OK(st == MS_OK && fabs(f.nvlink_Bps / 380e9 - 1) < 1e-6 &&
           fabs(f.nvlink_lat_us - 4.5) < 1e-6 && f.gpus == 8 && f.gpus_per_switch == 2 &&
           f.n_series == 9, "the model's own times fitted back: %.3f GB/s (380), %.4f us "
           "(4.5), 2 GPUs per switch, from %d lines", f.nvlink_Bps / 1e9, f.nvlink_lat_us,
           f.n_series);
    /* noise of +-3 % on every time moves the fit by about as much, not more */
    for (size_t i = 0; i < n; i++) cs[i].us *= i % 2 ? 1.03 : 0.97;
    st = pn_fit_samples(cs, n, ls, nl, 8, m.gpu_kernel_launch_us, &f, &err);
    TAP_OK(st == MS_OK && fabs(f.nvlink_Bps / 380e9 - 1) < 0.05, "with 3 %% noise: %.1f GB/s",
           f.nvlink_Bps / 1e9);
    pn_coll_sample one[3] = {{PN_ALL_GATHER, 2, 1 << 20, 10}, {PN_REDUCE_SCATTER, 2, 1 << 20, 10},
                             {PN_ALL_REDUCE, 4, 1 << 20, 20}};
    st = pn_fit_samples(one, 3, ls, nl, 8, 6, &f, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "two sizes"), "one size per collective is "
           "refused: %s", err.msg);
}

static void test_profile(void)
{
    machine_profile *p = NULL;
    ms_error err;
    if (machine_load_named("h200-sxm", &p, &err) != MS_OK) {
        TAP_OK(0, "load h200-sxm: %s", err.msg);
        return;
    }
    pn_fit f = {4, 2, 370e9, 3.25, 9, 55e9};
    pn_apply(p, &f, "memsim probe --collectives on 4 x TEST GPU, 2030-01-01 (raw: x.csv)");
    char path[64];
    snprintf(path, sizeof path, "test_probe_node.%ld.machine", (long)getpid());
    ms_status st = machine_write(p, path, &err);
    machine_profile_free(p);
    machine_profile *q = NULL;
    if (st == MS_OK) st = machine_load(path, &q, &err);
    char text[65536] = "";
    FILE *fp = fopen(path, "r");
    if (fp) {
        text[fread(text, 1, sizeof text - 1, fp)] = 0;
        fclose(fp);
    }
    remove(path);
    TAP_OK(st == MS_OK && q && q->m.node_gpus == 4 && q->m.node_gpus_per_switch == 2 &&
           q->m.nvlink_Bps == 370e9 && q->m.nvlink_lat_us == 3.25,
           "the node keys written and read back (%s)", st == MS_OK ? "ok" : err.msg);
    TAP_OK(strstr(text, "node.nvlink_Bps") && strstr(text, "least-squares line") &&
           strstr(text, "memsim probe --collectives on 4 x TEST GPU") &&
           strstr(text, "below 3/4 of its 55.0 GB/s alone"), "each node key carries its source");
    machine_profile_free(q);
}

static void test_raw(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pn_coll_sample cs = {PN_REDUCE_SCATTER, 2, 1ULL << 30, 5000};
    pn_link_sample ls = {2, 1, 0, 256 << 20, 26e9, 52e9};
    pn_write_raw(f, &cs, 1, &ls, 1);
    fclose(f);
    TAP_OK(buf && strstr(buf, "what,ranks_or_gpus,pair,bytes,us,alg_GBps,bus_GBps") &&
           strstr(buf, "reduce_scatter,2,,1073741824,5000.000,214.748,107.374,,") &&
           strstr(buf, "host_d2h,2,1,268435456,,,,26.000,52.000"), "raw samples as CSV");
    free(buf);
}

int main(void)
{
    test_fit();
    test_profile();
    test_raw();
    return tap_done();
}

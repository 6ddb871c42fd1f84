/* driver.c — `memsim memferry`: MemFerry's evaluation (Yao et al., INFOCOM 2025, §V,
 * Figs. 9-13) in memsim. For each workload it generates a ZeRO-Offload trace
 * (traces/gen.c, offload mode), plans it with the four methods the paper compares —
 * DeepSpeed (zero-offload realloc=1), Native-Offload (zero-offload realloc=0), MemFerry and
 * GO-MemFerry (planners/memferry/policy_zero_offload.c, planners/memferry/policy_memferry.c) — lowers the plans
 * and simulates them through the pipeline `memsim simulate` runs (sim/pipeline.h: the plans'
 * lowering, the shadow model of planners/memferry/lower_dha.c). It writes CSV and gnuplot
 * data files, the plans (the shadow models), and a paper-vs-memsim table from
 * experiments/memferry/reference.tsv. Called by memsim-paper (experiments/main.c), which
 * memsim hands `memsim memferry` over to; driven by experiments/memferry/run.sh. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sim/cli.h"
#include "experiments/memferry/driver.h"
#include "planners/knob.h"
#include "planners/memferry/lower_dha.h"
#include "planners/memferry/lower_dha_model.h"
#include "planners/policy.h"
#include "planners/memferry/policy_memferry.h"
#include "planners/memferry/policy_zero_offload.h"
#include "sim/pipeline.h"
#include "traces/gen.h"
#include "traces/jobview.h"
#include "traces/machine.h"
#include "traces/models.h"

#define GIB 1073741824.0
#define MF_NMETH 4
#define MF_MAX_METRICS 128
#define MF_NRES 11             /* Fig. 10(b): reserve 0, 0.1, ..., 1 */

/* ---- the methods the paper compares (§V-A) ---- */

typedef struct mf_method {
    const char *name;
    const pol_policy *pol;
    const char *key, *value;   /* the policy knob that makes it this method */
} mf_method;

enum { M_DS = 0, M_NATIVE, M_MF, M_GO };

static const mf_method METHODS[MF_NMETH] = {
    { "DeepSpeed", &pol_zero_offload, "realloc", "1" },
    { "Native-Offload", &pol_zero_offload, "realloc", "0" },
    { "MemFerry", &pol_memferry, NULL, NULL },
    { "GO-MemFerry", &pol_go_memferry, "reserve", "0" },
};

/* ---- Figure 9 / 12 workloads ----
 * The paper gives neither batch nor sequence; it says the larger models (BERT-large, GPT-2)
 * "usually require large input" (§V-B). Assumed: each model's context as the sequence, batch
 * 8 for the small models and 32768 tokens per batch for the large ones
 * (experiments/memferry/README.md shows every batch in the sensitivity table). */
typedef struct mf_work {
    const char *model;
    uint64_t seq, batch;
    int small;                 /* one of the "smaller language models" (§V-B, §V-C) */
} mf_work;

static mf_work FIG9[4] = {
    { "bert-base", 512, 8, 1 },
    { "bert-large", 512, 64, 0 },
    { "roberta-base", 512, 8, 1 },
    { "gpt2-medium", 1024, 32, 0 },
};

static const char *const TXL[5] = { "transformerxl-0.7b", "transformerxl-1b",
                                    "transformerxl-2.4b", "transformerxl-4.3b",
                                    "transformerxl-6.7b" };

/* ---- options and shared state ---- */

typedef struct mf_ctx {
    const char *out;
    const char *a100, *v100;
    const char *ref;
    char *ref_buf;             /* the reference file, tokenized in place by ref_load */
    char *(*ref_rows)[8];      /* its rows: id figure quantity kind paper tol unit source */
    size_t n_ref;
    unsigned figs;             /* bit n: Figure n (10 = 10(b)) */
    double adam_single;        /* host Adam parameters/s of one GPU using the whole A100 host */
    int sens;                  /* sensitivity tables */
    int ds_overlap;            /* DeepSpeed with overlap_comm */
    const char *go_gran;       /* GO-MemFerry's go_granularity knob (NULL: the policy's) */
    const char *go_gain;       /* GO-MemFerry's go_gain knob (NULL: the policy's) */
    int attn_a100, attn_v100;  /* gen_attn of the A100 figures (9, 10(b), 12, 13) and of
                                  Fig. 11: eager on the V100 (sm_70 runs no FlashAttention) */
    int attn_now;              /* the one of the figure being run */
    int quiet;
    machine_profile *ma, *mv;
    /* metrics for the comparison */
    char mid[MF_MAX_METRICS][40];
    double mval[MF_MAX_METRICS];
    char mtxt[MF_MAX_METRICS][32];
    size_t nm;
} mf_ctx;

typedef struct mf_run {
    sim_result r;
    char modes[160];           /* the plan's modes per unit, e.g. DFGG...; h = grad on host */
    double grad_gpu_frac;      /* gradient bytes kept on the GPU */
    double go_cost_us;         /* GO-MemFerry: the time its plan expects the host gradients to add */
} mf_run;

static void metric(mf_ctx *c, const char *id, double v, const char *txt)
{
    if (c->nm >= MF_MAX_METRICS) return;
    snprintf(c->mid[c->nm], sizeof c->mid[0], "%s", id);
    c->mval[c->nm] = v;
    snprintf(c->mtxt[c->nm], sizeof c->mtxt[0], "%s", txt ? txt : "");
    c->nm++;
}

static int metric_get(const mf_ctx *c, const char *id, double *v, const char **txt)
{
    for (size_t i = c->nm; i-- > 0;)
        if (!strcmp(c->mid[i], id)) {
            if (v) *v = c->mval[i];
            if (txt) *txt = c->mtxt[i];
            return 1;
        }
    return 0;
}

static void progress(const mf_ctx *c, const char *fmt, const char *a, const char *b)
{
    if (!c->quiet) fprintf(stderr, fmt, a, b);
}

/* ---- one simulation ---- */

static ms_status make_trace(const mf_ctx *c, const model_t *md, uint64_t seq, uint64_t batch,
                            const machine_t *m, trace_t **t, ms_error *err)
{
    gen_config g;
    gen_config_default(&g);
    g.attn_impl = c->attn_now;
    g.model = *md;
    g.seq = seq ? seq : md->default_seq;
    g.micro_batch = batch;
    g.offload = 1;
    g.iterations = 2;
    ms_status st = gen_validate(&g, err);
    return st ? st : gen_trace(&g, m, t, err);
}

static void modes_of(const plan_t *p, mf_run *o)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n_layers && k + 3 < sizeof o->modes; i++) {
        o->modes[k++] = "GDF"[p->layers[i].pmode];
        if (p->layers[i].grad_on_host) o->modes[k++] = 'h';
        else if (lower_dha_unit_grads(p, p->layers[i].layer)) o->modes[k++] = 'm'; /* some modules' */
    }
    o->modes[k] = '\0';
}

/* Plans trace t with method k (plus one extra knob), lowers, simulates; writes the plan to
 * plan_path when given. A single GPU uses the whole host memory. */
static ms_status run_method(const mf_ctx *c, const trace_t *t, const machine_t *m, int k,
                            const char *xk, const char *xv, const char *plan_path, mf_run *o,
                            ms_error *err)
{
    memset(o, 0, sizeof *o);
    pol_knob kn[5];
    size_t nk = 0;
    if (METHODS[k].key) kn[nk++] = (pol_knob){ METHODS[k].key, METHODS[k].value };
    if (k == M_DS) kn[nk++] = (pol_knob){ "overlap_comm", c->ds_overlap ? "1" : "0" };
    if (k == M_GO && c->go_gran) kn[nk++] = (pol_knob){ "go_granularity", c->go_gran };
    if (k == M_GO && c->go_gain) kn[nk++] = (pol_knob){ "go_gain", c->go_gain };
    if (xk) kn[nk++] = (pol_knob){ xk, xv };
    pol_opts po;
    pol_opts_default(&po);
    po.knobs = kn;
    po.n_knobs = nk;
    plan_t *p;
    ms_status st = METHODS[k].pol->plan(t, m, &po, &p, err);
    if (st) return st;
    plan_sort(p);
    modes_of(p, o);
    /* The planner's share of gradient bytes kept on the GPU (go-memferry only). */
    knob_predictions kp;
    if (knob_predictions_of(p, &kp, NULL) == MS_OK) {
        o->grad_gpu_frac = kp.grad_gpu_frac;
        /* and the time its dynamic program expects the host-written gradients to add */
        o->go_cost_us = kp.go_cost_us;
    } else {
        o->grad_gpu_frac = o->go_cost_us = NAN;
    }
    if (plan_path) st = plan_write(p, plan_path, err);
    /* simulated as `memsim simulate` runs a plan: its lowering (dha), one GPU (lower_dha's
     * traces) with all of the host and its link */
    if (!st) st = pipe_simulate(t, m, p, NULL, &o->r, err);
    if (!st) snprintf(o->r.policy, sizeof o->r.policy, "%s", METHODS[k].name);
    plan_free(p);
    return st;
}

/* All four methods on one workload. */
static ms_status run_all(mf_ctx *c, const char *model, uint64_t seq, uint64_t batch,
                         const machine_t *m, const char *plan_tag, mf_run out[MF_NMETH],
                         ms_error *err)
{
    model_t md;
    ms_status st = model_lookup(model, &md, err);
    if (st) return st;
    trace_t *t;
    if ((st = make_trace(c, &md, seq, batch, m, &t, err))) return st;
    for (int k = 0; k < MF_NMETH && !st; k++) {
        char path[512];
        if (plan_tag)
            snprintf(path, sizeof path, "%s/plans/%s_%s_%s.plan", c->out, plan_tag, model,
                     METHODS[k].name);
        st = run_method(c, t, m, k, NULL, NULL, plan_tag ? path : NULL, &out[k], err);
    }
    trace_free(t);
    return st;
}

static int ok(const mf_run *r) { return r->r.status == RS_OK; }
static double ms(const mf_run *r) { return r->r.iter_time_s * 1e3; }
static double gib(const mf_run *r) { return (double)r->r.peak_allocated_bytes / GIB; }

/* Percent by which MemFerry is faster than base (time ratio - 1). */
static double gain_pct(const mf_run *base, const mf_run *mf)
{
    return ok(base) && ok(mf) ? (ms(base) / ms(mf) - 1.0) * 100.0 : NAN;
}

static double saved_pct(const mf_run *base, const mf_run *x)
{
    return (1.0 - (double)x->r.peak_allocated_bytes / (double)base->r.peak_allocated_bytes) * 100;
}

/* ---- output files ---- */

static FILE *open_out(const mf_ctx *c, const char *name, ms_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", c->out, name);
    FILE *f = fopen(path, "w");
    if (!f) ms_fail_at(err, MS_ERR_IO, path, 0, "cannot write: %s", strerror(errno));
    return f;
}

static ms_status close_out(FILE *f, const mf_ctx *c, const char *name, ms_error *err)
{
    if (fclose(f) != 0) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", c->out, name);
        return ms_fail_at(err, MS_ERR_IO, path, 0, "write failed");
    }
    return MS_OK;
}

static void csv_run(FILE *f, const char *label, uint64_t seq, uint64_t batch, const mf_run *r,
                    double speedup)
{
    const sim_result *x = &r->r;
    fprintf(f, "%s,%" PRIu64 ",%" PRIu64 ",%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,"
            "%.4f,%.3f,%s\n", label, seq, batch, x->policy, res_status_name(x->status),
            ms(r), speedup, x->iter_time_s > 0 ? x->compute_busy_s / x->iter_time_s : 0,
            gib(r), (double)x->peak_reserved_bytes / GIB, x->compute_busy_s * 1e3,
            x->h2d_busy_s * 1e3, x->d2h_busy_s * 1e3, x->host_busy_s * 1e3, x->stall_s * 1e3,
            r->grad_gpu_frac, r->modes);
}

static const char CSV_HEAD[] =
    "model,seq,batch,method,status,iter_ms,speedup_vs_deepspeed,gpu_util,peak_alloc_gib,"
    "peak_reserved_gib,compute_ms,h2d_busy_ms,d2h_busy_ms,host_busy_ms,stall_ms,"
    "grad_on_gpu,modes\n";

/* The other readings on one workload's trace, beside the defaults: MemFerry and GO-MemFerry
 * with their host update pipelined per unit with the backward (update=pipelined) instead of
 * memsim's default, which starts it when the backward's kernels are done (update=after_bp,
 * MemFerry §II-C: the update runs in parallel with the remaining gradient transmission, not
 * with the BP), named "<method>/pipelined" in pl[0], pl[1] (pl may be NULL); and DeepSpeed
 * without its per-parameter host synchronizations (ds_sync=0: each bucket cast and copied in
 * one piece, memsim's model before 2026-11-22; lower_dha.c bucket_flush_ds), named
 * "DeepSpeed/bucket" in *db. */
static ms_status other_readings(mf_ctx *c, const char *model, uint64_t seq, uint64_t batch,
                                const machine_t *m, mf_run pl[2], mf_run *db, ms_error *err)
{
    model_t md;
    trace_t *t;
    ms_status st = model_lookup(model, &md, err);
    if (st || (st = make_trace(c, &md, seq, batch, m, &t, err))) return st;
    const int k[2] = { M_MF, M_GO };
    for (int i = 0; pl && i < 2 && !st; i++) {
        st = run_method(c, t, m, k[i], "update", "pipelined", NULL, &pl[i], err);
        if (!st) snprintf(pl[i].r.policy, sizeof pl[i].r.policy, "%s/pipelined", METHODS[k[i]].name);
    }
    if (!st) st = run_method(c, t, m, M_DS, "ds_sync", "0", NULL, db, err);
    if (!st) snprintf(db->r.policy, sizeof db->r.policy, "%s/bucket", METHODS[M_DS].name);
    trace_free(t);
    return st;
}

/* Fig. 9's order from the iteration times: DeepSpeed slowest, MemFerry fastest. */
static int fig9_order(double mf, double go, double nat, double ds)
{
    return mf < ds && go > mf && go < ds && nat > mf && nat < ds;
}

/* Fig. 11's order from the iteration times: MemFerry fastest, GO-MemFerry slowest. */
static int fig11_order(double mf, double go, double ds, double nat)
{
    return mf < ds && mf < nat && mf < go && go > ds && go > nat;
}

/* GPU utilization as the paper reads it: the share of the iteration the GPU computes (DHA
 * kernels included, they occupy the SMs while they read or write host memory). */
static double util(const mf_run *r)
{
    return ok(r) && r->r.iter_time_s > 0 ? r->r.compute_busy_s / r->r.iter_time_s : NAN;
}

/* Figure 10(a): GPU utilization of the four methods training GPT-2 (§V-B: GO-MemFerry highest,
 * then MemFerry, Native-Offload, DeepSpeed; ratios as the abstract's "1.27x"). */
static void fig10a(mf_ctx *c, const mf_run *r)
{
    double ds = util(&r[M_DS]), nat = util(&r[M_NATIVE]), mf = util(&r[M_MF]);
    double go = util(&r[M_GO]);
    metric(c, "fig10a.order", go > mf && mf > nat && nat > ds, NULL);
    metric(c, "fig10a.mf_vs_ds", (mf / ds - 1) * 100, NULL);
    metric(c, "fig10a.mf_vs_native", (mf / nat - 1) * 100, NULL);
    metric(c, "fig10a.go_vs_ds", (go / ds - 1) * 100, NULL);
}

/* ---- Figure 9 (iteration time), 10(a) (GPU utilization) and 12 (peak memory) ---- */

static ms_status fig9(mf_ctx *c, ms_error *err)
{
    machine_t m = c->ma->m;
    m.host_adam_params_per_s = c->adam_single;
    mf_run R[4][MF_NMETH], PL[4][2]; /* PL: MemFerry, GO-MemFerry with update=pipelined */
    mf_run DB[4];                    /* DeepSpeed/bucket */
    ms_status st = MS_OK;
    for (int w = 0; w < 4 && !st; w++) {
        progress(c, "memferry: Fig. 9, %s%s\n", FIG9[w].model, "");
        st = run_all(c, FIG9[w].model, FIG9[w].seq, FIG9[w].batch, &m, "fig9", R[w], err);
        if (!st)
            st = other_readings(c, FIG9[w].model, FIG9[w].seq, FIG9[w].batch, &m, PL[w], &DB[w],
                                err);
    }
    if (st) return st;
    FILE *f = open_out(c, "fig9.csv", err), *d = f ? open_out(c, "fig9.dat", err) : NULL;
    FILE *g = d ? open_out(c, "fig12.dat", err) : NULL;
    FILE *u = g ? open_out(c, "fig10a.dat", err) : NULL;
    if (!u) {
        if (f) fclose(f);
        if (d) fclose(d);
        if (g) fclose(g);
        return MS_ERR_IO;
    }
    fputs(CSV_HEAD, f);
    fprintf(d, "# model DeepSpeed Native-Offload MemFerry GO-MemFerry (iteration time, ms)\n");
    fprintf(g, "# model DeepSpeed Native-Offload MemFerry GO-MemFerry (peak allocated, GiB)\n");
    fprintf(u, "# model DeepSpeed Native-Offload MemFerry GO-MemFerry (GPU utilization, %%)\n");
    double lo[2] = { INFINITY, INFINITY }, hi[2] = { -INFINITY, -INFINITY }, mx = -INFINITY;
    double sum = 0, n = 0, order = 0, morder = 0, mfs = 0, nfs = 0, gom = 0, mfm = 0, gm = 0;
    double pl_order = 0, pl_mx = -INFINITY, db_order = 0, db_mx = -INFINITY, db_lo = INFINITY,
           db_hi = -INFINITY;
    for (int w = 0; w < 4; w++) {
        fprintf(d, "%s", FIG9[w].model);
        fprintf(g, "%s", FIG9[w].model);
        fprintf(u, "%s", FIG9[w].model);
        for (int k = 0; k < MF_NMETH; k++) {
            csv_run(f, FIG9[w].model, FIG9[w].seq, FIG9[w].batch, &R[w][k],
                    ok(&R[w][k]) && ok(&R[w][M_DS]) ? ms(&R[w][M_DS]) / ms(&R[w][k]) : NAN);
            fprintf(d, " %.3f", ok(&R[w][k]) ? ms(&R[w][k]) : NAN);
            fprintf(g, " %.4f", gib(&R[w][k]));
            fprintf(u, " %.2f", ok(&R[w][k]) ? util(&R[w][k]) * 100 : NAN);
        }
        fprintf(d, "\n");
        fprintf(g, "\n");
        fprintf(u, "\n");
        if (!strcmp(FIG9[w].model, "gpt2-medium")) fig10a(c, R[w]);
        if (!strcmp(FIG9[w].model, "bert-base"))
            metric(c, "intro.ds_util", util(&R[w][M_DS]) * 100, NULL);
        int cls = FIG9[w].small ? 0 : 1;
        for (int b = M_DS; b <= M_NATIVE; b++) {
            double s = gain_pct(&R[w][b], &R[w][M_MF]);
            if (s < lo[cls]) lo[cls] = s;
            if (s > hi[cls]) hi[cls] = s;
        }
        double sd = ms(&R[w][M_DS]) / ms(&R[w][M_MF]);
        sum += sd;
        n++;
        if (sd > mx) mx = sd;
        double tmf = ms(&R[w][M_MF]), tgo = ms(&R[w][M_GO]), tnat = ms(&R[w][M_NATIVE]);
        order += fig9_order(tmf, tgo, tnat, ms(&R[w][M_DS]));
        /* the bucket reading of DeepSpeed */
        csv_run(f, FIG9[w].model, FIG9[w].seq, FIG9[w].batch, &DB[w],
                ok(&DB[w]) && ok(&R[w][M_DS]) ? ms(&R[w][M_DS]) / ms(&DB[w]) : NAN);
        db_order += ok(&DB[w]) && fig9_order(tmf, tgo, tnat, ms(&DB[w]));
        if (ms(&DB[w]) / ms(&R[w][M_MF]) > db_mx) db_mx = ms(&DB[w]) / ms(&R[w][M_MF]);
        if (FIG9[w].small) {
            double a = gain_pct(&DB[w], &R[w][M_MF]), b = gain_pct(&R[w][M_NATIVE], &R[w][M_MF]);
            double l = a < b ? a : b, h = a > b ? a : b;
            if (l < db_lo) db_lo = l;
            if (h > db_hi) db_hi = h;
        }
        /* the pipelined reading: the same order with its MemFerry and GO-MemFerry */
        for (int i = 0; i < 2; i++)
            csv_run(f, FIG9[w].model, FIG9[w].seq, FIG9[w].batch, &PL[w][i],
                    ok(&PL[w][i]) && ok(&R[w][M_DS]) ? ms(&R[w][M_DS]) / ms(&PL[w][i]) : NAN);
        double pmf = ms(&PL[w][0]), pgo = ms(&PL[w][1]), pds = ms(&R[w][M_DS]);
        double pnat = ms(&R[w][M_NATIVE]);
        pl_order += ok(&PL[w][0]) && ok(&PL[w][1]) && fig9_order(pmf, pgo, pnat, pds);
        if (pds / pmf > pl_mx) pl_mx = pds / pmf;
        uint64_t ds = R[w][M_DS].r.peak_allocated_bytes, mf = R[w][M_MF].r.peak_allocated_bytes;
        morder += R[w][M_GO].r.peak_allocated_bytes <= mf && mf <= ds;
        if (FIG9[w].small) {
            mfs += saved_pct(&R[w][M_DS], &R[w][M_MF]);
            nfs++;
        }
        if (!strcmp(FIG9[w].model, "gpt2-medium"))
            metric(c, "fig12.mf_gpt2", saved_pct(&R[w][M_DS], &R[w][M_MF]), NULL);
        gom += saved_pct(&R[w][M_MF], &R[w][M_GO]);
        mfm += saved_pct(&R[w][M_DS], &R[w][M_MF]);
        gm += saved_pct(&R[w][M_DS], &R[w][M_GO]);
    }
    metric(c, "fig9.order", order / 4, NULL);
    metric(c, "fig9.small.min", lo[0], NULL);
    metric(c, "fig9.small.max", hi[0], NULL);
    metric(c, "fig9.large.min", lo[1], NULL);
    metric(c, "fig9.large.max", hi[1], NULL);
    metric(c, "fig9.all.min", lo[0] < lo[1] ? lo[0] : lo[1], NULL);
    metric(c, "fig9.all.max", hi[0] > hi[1] ? hi[0] : hi[1], NULL);
    metric(c, "fig9.max_ds", (mx - 1) * 100, NULL);
    metric(c, "fig9.mean_ds", sum / n, NULL);
    metric(c, "fig9.order_pipelined", pl_order / 4, NULL);
    metric(c, "fig9.max_ds_pipelined", (pl_mx - 1) * 100, NULL);
    metric(c, "fig9.order_bucket", db_order / 4, NULL);
    metric(c, "fig9.max_ds_bucket", (db_mx - 1) * 100, NULL);
    metric(c, "fig9.small_bucket.min", db_lo, NULL);
    metric(c, "fig9.small_bucket.max", db_hi, NULL);
    metric(c, "fig12.order", morder / 4, NULL);
    metric(c, "fig12.mf_small", nfs ? mfs / nfs : NAN, NULL);
    metric(c, "fig12.go_vs_mf", gom / 4, NULL);
    metric(c, "fig12.mf_mean", mfm / 4, NULL);
    metric(c, "fig12.go_mean", gm / 4, NULL);
    if ((st = close_out(f, c, "fig9.csv", err)) || (st = close_out(d, c, "fig9.dat", err)) ||
        (st = close_out(g, c, "fig12.dat", err)))
        return st;
    return close_out(u, c, "fig10a.dat", err);
}

/* Figure 9's speedups over the host Adam rate and over the batch (the two inputs the paper
 * does not give). */
static ms_status fig9_sensitivity(mf_ctx *c, ms_error *err)
{
    static const double adam[] = { 1.6e9, 4e9, 8e9, 16e9 };
    static const uint64_t batch[] = { 4, 8, 16, 32, 64 };
    FILE *f = open_out(c, "fig9_sensitivity.csv", err);
    if (!f) return MS_ERR_IO;
    fprintf(f, "model,seq,batch,adam_params_per_s,deepspeed_ms,native_ms,memferry_ms,"
               "go_memferry_ms,mf_vs_deepspeed_pct,mf_vs_native_pct,mf_fastest,"
               "deepspeed_gpu_util_pct\n");
    ms_status st = MS_OK;
    for (int w = 0; w < 4 && !st; w++) {
        progress(c, "memferry: sensitivity, %s%s\n", FIG9[w].model, "");
        for (size_t a = 0; a < sizeof adam / sizeof *adam && !st; a++)
            for (size_t b = 0; b < sizeof batch / sizeof *batch && !st; b++) {
                if (adam[a] != c->adam_single && batch[b] != FIG9[w].batch) continue;
                machine_t m = c->ma->m;
                m.host_adam_params_per_s = adam[a];
                mf_run R[MF_NMETH];
                st = run_all(c, FIG9[w].model, FIG9[w].seq, batch[b], &m, NULL, R, err);
                if (st) break;
                int fast = 1;
                for (int k = 0; k < MF_NMETH; k++)
                    if (k != M_MF && (!ok(&R[k]) || ms(&R[k]) <= ms(&R[M_MF]))) fast = 0;
                fprintf(f,
                        "%s,%" PRIu64 ",%" PRIu64 ",%.3g,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%d,%.1f\n",
                        FIG9[w].model, FIG9[w].seq, batch[b], adam[a], ms(&R[M_DS]),
                        ms(&R[M_NATIVE]), ms(&R[M_MF]), ms(&R[M_GO]),
                        gain_pct(&R[M_DS], &R[M_MF]), gain_pct(&R[M_NATIVE], &R[M_MF]), fast,
                        util(&R[M_DS]) * 100);
            }
    }
    ms_status cs = close_out(f, c, "fig9_sensitivity.csv", err);
    return st ? st : cs;
}

/* ---- Figure 10(b): GO-MemFerry over the reserve factor ---- */

/* Why the curve is straight or curved: the dynamic program keeps first the items with the
 * most backward time saved per gradient byte (T_GBP - T_CBP over bytes); a convex curve needs
 * items that differ in it. Largest / smallest over the module items holding at least 1 % of
 * the gradient bytes (smaller ones, the norms, are dominated by the accumulate kernel's
 * launch and weigh nothing in the curve). */
static double gain_spread(const dha_model *dm)
{
    double lo = INFINITY, hi = 0, all = 0;
    for (size_t i = 0; i < dha_model_modules(dm); i++) all += (double)dha_model_module(dm, i)->grad_bytes;
    for (size_t i = 0; i < dha_model_modules(dm); i++) {
        const dha_module *u = dha_model_module(dm, i);
        if ((double)u->grad_bytes < 0.01 * all || !(u->t_gw_acc_us > 0)) continue;
        double g = u->t_gw_acc_us / ((double)u->grad_bytes / 1048576.0);
        if (g < lo) lo = g;
        if (g > hi) hi = g;
    }
    return lo > 0 && hi > 0 ? hi / lo : NAN;
}

/* Convex within tolerance (second differences >= -0.5 % of the time at reserve 0), and the
 * bend: time saved from reserve 0 to 0.5 over the time saved from 0.5 to 1 (1: a straight
 * line; above 1: convex, as the paper's curves). */
static int curve_convex(const double *T)
{
    double tol = 0.005 * T[0];
    for (int i = 1; i + 1 < MF_NRES; i++)
        if (!(T[i + 1] - 2 * T[i] + T[i - 1] >= -tol)) return 0;
    return 1;
}

/* Non-increasing within the same tolerance. */
static int curve_decreasing(const double *T)
{
    double tol = 0.005 * T[0];
    for (int i = 1; i < MF_NRES; i++)
        if (!(T[i] <= T[i - 1] + tol)) return 0;
    return 1;
}

static double curve_bend(const double *T)
{
    int h = MF_NRES / 2;
    return (T[0] - T[h]) / (T[h] - T[MF_NRES - 1]);
}

static ms_status fig10b(mf_ctx *c, ms_error *err)
{
    machine_t m = c->ma->m;
    m.host_adam_params_per_s = c->adam_single;
    /* [0]: module items (the paper's, the default), [1]: unit items, [2]: module items whose
     * gain counts the embedding's exposed gradient copy (go_gain=copy) */
    static const char *GRAN[3] = { "module", "unit", "module" };
    static const char *GAIN[3] = { "paper", "paper", "copy" };
    double T[3][4][MF_NRES], F[3][4][MF_NRES], E[4][MF_NRES], gspread = 0;
    ms_status st = MS_OK;
    const char *keep = c->go_gran, *keep_gain = c->go_gain;
    for (int w = 0; w < 4 && !st; w++) {
        progress(c, "memferry: Fig. 10(b), %s%s\n", FIG9[w].model, "");
        model_t md;
        trace_t *t = NULL;
        if ((st = model_lookup(FIG9[w].model, &md, err)) ||
            (st = make_trace(c, &md, FIG9[w].seq, FIG9[w].batch, &m, &t, err)))
            break;
        dha_model *dm;
        if (!st && (st = dha_model_new(t, &m, &dm, err)) == MS_OK) {
            gspread += gain_spread(dm);
            dha_model_free(dm);
        }
        for (int g = 0; g < 3 && !st; g++)
            for (int i = 0; i < MF_NRES && !st; i++) {
                char v[16];
                snprintf(v, sizeof v, "%.1f", i / 10.0);
                mf_run r;
                c->go_gran = GRAN[g];
                c->go_gain = GAIN[g];
                st = run_method(c, t, &m, M_GO, "reserve", v, NULL, &r, err);
                c->go_gran = keep;
                c->go_gain = keep_gain;
                T[g][w][i] = ok(&r) ? ms(&r) : NAN;
                F[g][w][i] = r.grad_gpu_frac;
                if (!g) E[w][i] = r.go_cost_us / 1e3;
            }
        trace_free(t);
    }
    if (st) return st;
    FILE *f = open_out(c, "fig10b.csv", err), *d = f ? open_out(c, "fig10b.dat", err) : NULL;
    if (!d) {
        if (f) fclose(f);
        return MS_ERR_IO;
    }
    fprintf(f, "model,reserve,iter_ms,grad_on_gpu,iter_ms_unit_items,grad_on_gpu_unit_items,"
               "iter_ms_copy_gain,grad_on_gpu_copy_gain,est_cost_ms,sim_cost_ms\n");
    fprintf(d, "# reserve");
    for (int w = 0; w < 4; w++) fprintf(d, " %s", FIG9[w].model);
    for (int w = 0; w < 4; w++) fprintf(d, " %s/unit", FIG9[w].model);
    for (int w = 0; w < 4; w++) fprintf(d, " %s/copy", FIG9[w].model);
    fprintf(d, "   (GO-MemFerry iteration time, ms: module items, unit items, module items with "
               "go_gain=copy)\n");
    int dec = 0, dec_c = 0, cvx = 0, cvx_u = 0, cvx_c = 0;
    double span = 0, bend = 0, bend_u = 0, bend_c = 0;
    for (int w = 0; w < 4; w++) {
        for (int i = 0; i < MF_NRES; i++)
            fprintf(f, "%s,%.1f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", FIG9[w].model,
                    i / 10.0, T[0][w][i], F[0][w][i], T[1][w][i], F[1][w][i], T[2][w][i],
                    F[2][w][i], E[w][i], T[0][w][i] - T[0][w][MF_NRES - 1]);
        dec += curve_decreasing(T[0][w]);
        dec_c += curve_decreasing(T[2][w]);
        cvx += curve_convex(T[0][w]);
        cvx_u += curve_convex(T[1][w]);
        cvx_c += curve_convex(T[2][w]);
        bend += curve_bend(T[0][w]);
        bend_u += curve_bend(T[1][w]);
        bend_c += curve_bend(T[2][w]);
        span += T[0][w][0] / T[0][w][MF_NRES - 1];
    }
    for (int i = 0; i < MF_NRES; i++) {
        fprintf(d, "%.1f", i / 10.0);
        for (int g = 0; g < 3; g++)
            for (int w = 0; w < 4; w++) fprintf(d, " %.3f", T[g][w][i]);
        fprintf(d, "\n");
    }
    metric(c, "fig10b.decreasing", dec / 4.0, NULL);
    metric(c, "fig10b.convex", cvx / 4.0, NULL);
    metric(c, "fig10b.decreasing_copy", dec_c / 4.0, NULL);
    metric(c, "fig10b.convex_copy", cvx_c / 4.0, NULL);
    metric(c, "fig10b.convex_unit", cvx_u / 4.0, NULL);
    metric(c, "fig10b.bend", bend / 4, NULL);
    metric(c, "fig10b.bend_copy", bend_c / 4, NULL);
    metric(c, "fig10b.bend_unit", bend_u / 4, NULL);
    metric(c, "fig10b.span", span / 4, NULL);
    metric(c, "fig10b.gain_spread", gspread / 4, NULL);
    if ((st = close_out(f, c, "fig10b.csv", err))) {
        fclose(d);
        return st;
    }
    return close_out(d, c, "fig10b.dat", err);
}

/* ---- Figure 11: the largest model each method trains on a V100 32 GB at batch 1 ---- */

/* OK (1), out of memory (0), or an error. The scan's model: the transformerxl-2.4b shape
 * with `layers` layers. */
static ms_status fits(const mf_ctx *c, const model_t *shape, uint64_t layers,
                      const machine_t *m, int k, int *fit, double *params, ms_error *err)
{
    model_t md = *shape;
    md.layers = layers;
    snprintf(md.name, sizeof md.name, "txl-scan-%" PRIu64, layers);
    *params = (double)model_params(&md);
    trace_t *t;
    ms_status st = make_trace(c, &md, md.default_seq, 1, m, &t, err);
    if (st) return st;
    mf_run r;
    st = run_method(c, t, m, k, NULL, NULL, NULL, &r, err);
    trace_free(t);
    *fit = !st && ok(&r);
    return st;
}

static ms_status largest(const mf_ctx *c, const model_t *shape, const machine_t *m, int k,
                         uint64_t *best, double *params, ms_error *err)
{
    uint64_t lo = 0, hi = 1;
    int fit;
    double p;
    ms_status st;
    while (hi <= 4096) {
        if ((st = fits(c, shape, hi, m, k, &fit, &p, err))) return st;
        if (!fit) break;
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((st = fits(c, shape, mid, m, k, &fit, &p, err))) return st;
        if (fit) lo = mid;
        else hi = mid;
    }
    *best = lo;
    model_t md = *shape;
    md.layers = lo;
    *params = lo ? (double)model_params(&md) : 0;
    return MS_OK;
}

static ms_status fig11(mf_ctx *c, ms_error *err)
{
    /* The paper's limits are GPU-memory overflows; the V100 host's memory is not given (the
     * profile assumes 92 GiB, which at ~20 host bytes per parameter would stop every method
     * near 4.6B parameters), so here the host does not limit. */
    machine_t mv = c->mv->m;
    mv.host_mem_bytes = UINT64_C(1) << 42;
    const machine_t *m = &mv;
    model_t shape;
    ms_status st = model_lookup("transformerxl-2.4b", &shape, err);
    if (st) return st;
    FILE *f = open_out(c, "fig11.csv", err), *d = f ? open_out(c, "fig11.dat", err) : NULL;
    if (!d) {
        if (f) fclose(f);
        return MS_ERR_IO;
    }
    fprintf(f, "method,max_layers,max_params,ratio_vs_deepspeed\n");
    fprintf(d, "# method largest_model_billions (transformerxl-2.4b shape, batch 1, V100 32GB)\n");
    double P[MF_NMETH];
    uint64_t L[MF_NMETH];
    for (int k = 0; k < MF_NMETH && !st; k++) {
        progress(c, "memferry: Fig. 11, largest model, %s%s\n", METHODS[k].name, "");
        st = largest(c, &shape, m, k, &L[k], &P[k], err);
    }
    int best = 0;
    for (int k = 0; !st && k < MF_NMETH; k++) {
        fprintf(f, "%s,%" PRIu64 ",%.0f,%.4f\n", METHODS[k].name, L[k], P[k],
                P[M_DS] > 0 ? P[k] / P[M_DS] : NAN);
        fprintf(d, "\"%s\" %.4f\n", METHODS[k].name, P[k] / 1e9);
        if (P[k] > P[best]) best = k;
    }
    if (!st) {
        metric(c, "fig11.largest", 0, METHODS[best].name);
        metric(c, "fig11.ratio", P[M_DS] > 0 ? P[M_GO] / P[M_DS] : NAN, NULL);
        metric(c, "fig11.ds_max_b", P[M_DS] / 1e9, NULL);
        metric(c, "fig11.go_max_b", P[M_GO] / 1e9, NULL);
    }
    /* The named sizes at batch 1: iteration times where every method fits. */
    FILE *g = st ? NULL : open_out(c, "fig11_sizes.csv", err);
    if (!st && !g) st = MS_ERR_IO;
    if (!st) fputs(CSV_HEAD, g);
    double sp = 0, sl = 0, n = 0, order = 0, pl_order = 0, pl_sl = 0, db_order = 0, db_sl = 0;
    for (int s = 0; s < 5 && !st; s++) {
        progress(c, "memferry: Fig. 11, %s%s\n", TXL[s], "");
        mf_run R[MF_NMETH];
        st = run_all(c, TXL[s], 0, 1, m, NULL, R, err);
        int all = 1;
        for (int k = 0; k < MF_NMETH && !st; k++) {
            csv_run(g, TXL[s], 0, 1, &R[k], ok(&R[k]) && ok(&R[M_DS]) ? ms(&R[M_DS]) / ms(&R[k])
                                                                       : NAN);
            all &= ok(&R[k]);
        }
        mf_run pl[2], db;
        if (!st) st = other_readings(c, TXL[s], 0, 1, m, pl, &db, err);
        for (int i = 0; i < 2 && !st; i++)
            csv_run(g, TXL[s], 0, 1, &pl[i],
                    ok(&pl[i]) && ok(&R[M_DS]) ? ms(&R[M_DS]) / ms(&pl[i]) : NAN);
        if (!st) csv_run(g, TXL[s], 0, 1, &db, ok(&db) && ok(&R[M_DS]) ? ms(&R[M_DS]) / ms(&db) : NAN);
        if (st || !all || !ok(&pl[0]) || !ok(&pl[1]) || !ok(&db)) continue;
        double mf = ms(&R[M_MF]), go = ms(&R[M_GO]), ds = ms(&R[M_DS]), nat = ms(&R[M_NATIVE]);
        db_order += fig11_order(mf, go, ms(&db), nat); /* the bucket reading of DeepSpeed */
        db_sl += (go / ms(&db) - 1) * 100;
        /* the pipelined reading: MemFerry fastest and GO-MemFerry slowest among DeepSpeed,
         * Native-Offload and its own MemFerry and GO-MemFerry */
        double pmf = ms(&pl[0]), pgo = ms(&pl[1]);
        pl_order += fig11_order(pmf, pgo, ds, nat);
        pl_sl += (pgo / ds - 1) * 100;
        sp += ds / mf;
        sl += (go / ds - 1) * 100;
        order += fig11_order(mf, go, ds, nat);
        n++;
    }
    if (!st && n) {
        metric(c, "fig11.mf_speedup", sp / n, NULL);
        metric(c, "fig11.go_vs_ds", sl / n, NULL);
        metric(c, "fig11.order", order / n, NULL);
        metric(c, "fig11.order_pipelined", pl_order / n, NULL);
        metric(c, "fig11.go_pipelined_vs_ds", pl_sl / n, NULL);
        metric(c, "fig11.order_bucket", db_order / n, NULL);
        metric(c, "fig11.go_vs_ds_bucket", db_sl / n, NULL);
    }
    ms_status cs = g ? close_out(g, c, "fig11_sizes.csv", err) : MS_OK;
    ms_status c1 = close_out(f, c, "fig11.csv", err), c2 = close_out(d, c, "fig11.dat", err);
    return st ? st : cs ? cs : c1 ? c1 : c2;
}

/* ---- Figure 13: TransformerXL 0.7B-6.7B on the A100, batch 8 ---- */

static ms_status fig13(mf_ctx *c, ms_error *err)
{
    machine_t m = c->ma->m;
    m.host_adam_params_per_s = c->adam_single;
    FILE *f = open_out(c, "fig13.csv", err), *d = f ? open_out(c, "fig13.dat", err) : NULL;
    if (!d) {
        if (f) fclose(f);
        return MS_ERR_IO;
    }
    fputs(CSV_HEAD, f);
    fprintf(d, "# model time_ms(DS Native MF GO) peak_GiB(DS Native MF GO)\n");
    ms_status st = MS_OK;
    double sum = 0, s1 = NAN, s67 = NAN, order = 0, least = 0, mem = 0, lo = INFINITY,
           hi = -INFINITY, db_sum = 0;
    for (int s = 0; s < 5 && !st; s++) {
        progress(c, "memferry: Fig. 13, %s%s\n", TXL[s], "");
        mf_run R[MF_NMETH], db;
        if ((st = run_all(c, TXL[s], 0, 8, &m, "fig13", R, err))) break;
        if ((st = other_readings(c, TXL[s], 0, 8, &m, NULL, &db, err))) break;
        fprintf(d, "%s", TXL[s] + strlen("transformerxl-"));
        for (int k = 0; k < MF_NMETH; k++) {
            csv_run(f, TXL[s], 0, 8, &R[k], ok(&R[k]) && ok(&R[M_DS]) ? ms(&R[M_DS]) / ms(&R[k])
                                                                       : NAN);
            fprintf(d, " %.3f", ok(&R[k]) ? ms(&R[k]) : NAN);
        }
        for (int k = 0; k < MF_NMETH; k++) fprintf(d, " %.4f", gib(&R[k]));
        fprintf(d, "\n");
        csv_run(f, TXL[s], 0, 8, &db, ok(&db) && ok(&R[M_DS]) ? ms(&R[M_DS]) / ms(&db) : NAN);
        db_sum += ms(&db) / ms(&R[M_MF]);
        double sd = ms(&R[M_DS]) / ms(&R[M_MF]);
        sum += sd;
        if (s == 1) s1 = sd;
        if (s == 4) s67 = sd;
        int fast = 1, low = 1;
        for (int k = 0; k < MF_NMETH; k++) {
            if (k != M_MF && (!ok(&R[k]) || ms(&R[k]) <= ms(&R[M_MF]))) fast = 0;
            if (k != M_GO && R[k].r.peak_allocated_bytes <= R[M_GO].r.peak_allocated_bytes) low = 0;
        }
        order += fast;
        least += low;
        double sv = saved_pct(&R[M_DS], &R[M_GO]);
        mem += sv;
        if (sv < lo) lo = sv;
        if (sv > hi) hi = sv;
    }
    if (!st) {
        metric(c, "fig13.order", order / 5, NULL);
        metric(c, "fig13.mean", sum / 5, NULL);
        metric(c, "fig13.mean_bucket", db_sum / 5, NULL);
        metric(c, "fig13.s1b", s1, NULL);
        metric(c, "fig13.s67b", s67, NULL);
        metric(c, "fig13.trend", 0, s1 > s67 ? "decreasing" : "not decreasing");
        metric(c, "fig13.go_least", least / 5, NULL);
        metric(c, "fig13.go_mem", mem / 5, NULL);
        metric(c, "fig13.go_mem.min", lo, NULL);
        metric(c, "fig13.go_mem.max", hi, NULL);
    }
    ms_status c1 = close_out(f, c, "fig13.csv", err), c2 = close_out(d, c, "fig13.dat", err);
    return st ? st : c1 ? c1 : c2;
}

/* ---- the comparison with the paper ---- */

/* One reference row: id figure quantity kind paper tol unit source (tab-separated). */
/* Prints one reference row against memsim; returns 1 when it misses the paper. */
static int compare_row(const mf_ctx *c, char **tok, FILE *o, int *miss, int *checked)
{
    const char *id = tok[0], *kind = tok[3], *paper = tok[4], *tol = tok[5], *unit = tok[6];
    double v, t = NAN;
    const char *txt;
    char mem[48] = "not run", diff[48] = "", verdict[16] = "report";
    int has_tol = strcmp(tol, "-") != 0 && ms_parse_double(tol, &t);
    if (!strcmp(kind, "word")) {
        if (metric_get(c, id, NULL, &txt)) {
            snprintf(mem, sizeof mem, "%s", txt);
            snprintf(verdict, sizeof verdict, "%s", strcmp(txt, paper) ? "MISS" : "ok");
        }
    } else if (!strcmp(kind, "all")) {
        if (metric_get(c, id, &v, NULL)) {
            snprintf(mem, sizeof mem, "%.0f%% of cases", v * 100);
            snprintf(verdict, sizeof verdict, "%s", v >= 1 ? "ok" : "MISS");
        }
    } else if (!strcmp(kind, "range")) {
        char a[40], b[40];
        double plo = NAN, phi = NAN, mlo, mhi;
        const char *dots = strstr(paper, "..");
        if (dots) {
            snprintf(a, sizeof a, "%.*s", (int)(dots - paper), paper);
            snprintf(b, sizeof b, "%s", dots + 2);
            ms_parse_double(a, &plo);
            ms_parse_double(b, &phi);
        }
        snprintf(a, sizeof a, "%s.min", id);
        snprintf(b, sizeof b, "%s.max", id);
        if (metric_get(c, a, &mlo, NULL) && metric_get(c, b, &mhi, NULL)) {
            snprintf(mem, sizeof mem, "%.1f..%.1f", mlo, mhi);
            snprintf(diff, sizeof diff, "%+.1f / %+.1f", mlo - plo, mhi - phi);
            if (has_tol)
                snprintf(verdict, sizeof verdict, "%s",
                         fabs(mlo - plo) <= t && fabs(mhi - phi) <= t ? "ok" : "MISS");
        }
    } else if (metric_get(c, id, &v, NULL)) {
        double p = NAN;
        int num = ms_parse_double(paper, &p);
        snprintf(mem, sizeof mem, "%.2f", v);
        if (num) snprintf(diff, sizeof diff, "%+.2f", v - p);
        if (has_tol) snprintf(verdict, sizeof verdict, "%s", fabs(v - p) <= t ? "ok" : "MISS");
    }
    int missed = !strcmp(verdict, "MISS");
    *miss += missed;
    if (strcmp(verdict, "report") && strcmp(mem, "not run")) (*checked)++;
    fprintf(o, "%-20s %-5s %-12s %-14s %-16s %-6s %-6s %s\n", id, tok[1], paper, mem, diff, unit,
            verdict, tok[2]);
    return missed;
}

/* Reads and checks the whole reference table before anything is simulated, so a bad file
 * costs no simulation time and never leaves a half-written summary. */
static ms_status ref_load(mf_ctx *c, ms_error *err)
{
    size_t len;
    ms_status st = ms_read_all(c->ref, 1u << 20, &c->ref_buf, &len, err);
    if (st) return st;
    size_t cap = 0;
    unsigned long ln = 0;
    for (char *line = c->ref_buf, *next; line && *line; line = next) {
        ln++;
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line[strcspn(line, "\r")] = '\0';
        if (!line[0] || line[0] == '#') continue;
        char *tok[8];
        int n = 0;
        for (char *p = line, *t; n < 8; p = t + 1) {
            tok[n++] = p;
            if (!(t = strchr(p, '\t'))) break;
            *t = '\0';
        }
        if (n < 8)
            return ms_fail_at(err, MS_ERR_PARSE, c->ref, ln, "expected 8 tab-separated fields "
                              "(id figure quantity kind paper tol unit source), found %d", n);
        if (ms_grow((void **)&c->ref_rows, &cap, c->n_ref + 1, sizeof *c->ref_rows))
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        memcpy(c->ref_rows[c->n_ref++], tok, sizeof tok);
    }
    if (!c->n_ref) return ms_fail_at(err, MS_ERR_PARSE, c->ref, 0, "no reference rows");
    return MS_OK;
}

/* The comparison table: written whole to summary.txt (atomically) and to stdout. */
static ms_status compare(const mf_ctx *c, int *misses, ms_error *err)
{
    char *text = NULL;
    size_t size = 0;
    FILE *o = open_memstream(&text, &size);
    if (!o) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    fprintf(o, "MemFerry (INFOCOM'25) Figs. 9-13 in memsim: paper vs memsim (units: %% = percent "
               "faster or less memory, x = time ratio)\n");
    fprintf(o, "%-20s %-5s %-12s %-14s %-16s %-6s %-6s %s\n", "id", "fig", "paper", "memsim",
            "memsim-paper", "unit", "check", "quantity");
    int miss = 0, checked = 0;
    unsigned char *missed = calloc(c->n_ref, 1);
    if (!missed) {
        fclose(o);
        free(text);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < c->n_ref; i++)
        missed[i] = (unsigned char)compare_row(c, c->ref_rows[i], o, &miss, &checked);
    fprintf(o, "\n%d checked rows, %d outside the paper's value +- tolerance (MISS)", checked,
            miss);
    /* name them, so that a reader sees which are the defaults' and which the other readings' */
    const char *sep = ": ";
    for (size_t i = 0; i < c->n_ref; i++)
        if (missed[i]) {
            fprintf(o, "%s%s", sep, c->ref_rows[i][0]);
            sep = ", ";
        }
    fputc('\n', o);
    free(missed);
    if (fclose(o) != 0 || !text) {
        free(text);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    char path[512];
    snprintf(path, sizeof path, "%s/summary.txt", c->out);
    ms_status st = ms_out_save(path, text, size, err);
    if (!st && !c->quiet) fwrite(text, 1, size, stdout);
    free(text);
    *misses = miss;
    return st;
}

/* ---- the command ---- */

static int mkdir_p(const char *dir)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memsim memferry [options]\n"
            "MemFerry's evaluation (INFOCOM'25, Figs. 9-13): DeepSpeed, Native-Offload,\n"
            "MemFerry and GO-MemFerry simulated on MemFerry's A100 and V100 machines, with a\n"
            "paper-vs-memsim table (experiments/memferry/README.md). Other readings are\n"
            "reported beside the defaults: MemFerry/pipelined and GO-MemFerry/pipelined (host\n"
            "update pipelined with the backward), DeepSpeed/bucket (each bucket copied in one\n"
            "piece, without DeepSpeed's per-parameter host synchronization).\n\n"
            "options:\n"
            "  --out DIR              output folder (default out/memferry)\n"
            "  --figs LIST            9,10,11,12,13 or all (default all; 12 comes with 9)\n"
            "  --a100 NAME|FILE       machine of Figs. 9, 10, 12, 13 (default a100-80g-pcie3)\n"
            "  --v100 NAME|FILE       machine of Fig. 11 (default v100-32g-pcie3)\n"
            "  --adam RATE            host Adam parameters/s of one GPU using the whole A100\n"
            "                         host (default 8e9; the profile's per-GPU share is 1.6e9)\n"
            "  --batches A,B,C,D      Fig. 9 batches of bert-base, bert-large, roberta-base,\n"
            "                         gpt2-medium (default 8,64,8,32)\n"
            "  --reference FILE       paper numbers (default memferry/reference.tsv in the\n"
            "                         source tree's experiments/ or $MEMSIM_EXPERIMENTS)\n"
            "  --ds-overlap-comm 0|1  DeepSpeed's overlap_comm (default 1, as Hugging Face's and\n"
            "                         Lightning's ZeRO-2 configurations set it; 0: DeepSpeed's\n"
            "                         own default, gradient copies on the compute stream)\n"
            "  --attn-a100 flash|eager  attention of Figs. 9, 10(b), 12, 13 (default flash)\n"
            "  --attn-v100 flash|eager  attention of Fig. 11 (default eager: the V100, sm_70,\n"
            "                         runs no FlashAttention; PyTorch 1.9's HF models are eager)\n"
            "  --no-sensitivity       skip the Adam-rate and batch sensitivity of Fig. 9\n"
            "  --quiet                no progress lines\n"
            "Exit status 1 when a checked comparison row misses the paper (summary.txt).\n"
            "\nexamples (from the source directory, sim/ on the PATH):\n"
            "  memsim memferry --out out/memferry\n"
            "  memsim memferry --no-sensitivity --quiet --out out/memferry-quick\n");
}

static int parse_figs(const char *s, unsigned *figs)
{
    if (!strcmp(s, "all")) {
        *figs = (1u << 9) | (1u << 10) | (1u << 11) | (1u << 12) | (1u << 13);
        return 0;
    }
    *figs = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
        uint64_t v;
        if (!ms_parse_u64(t, &v) || v < 9 || v > 13) return -1;
        *figs |= 1u << (v == 12 ? 9 : v);
    }
    return *figs ? 0 : -1;
}

static int parse_batches(const char *s)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
        uint64_t v;
        if (n >= 4 || !ms_parse_u64(t, &v) || !v || v > 4096) return -1;
        FIG9[n++].batch = v;
    }
    return n == 4 ? 0 : -1;
}

static int parse_args(int argc, char **argv, mf_ctx *c)
{
    static const struct option lo[] = {
        { "out", required_argument, 0, 'o' },   { "figs", required_argument, 0, 'f' },
        { "a100", required_argument, 0, 'a' },  { "v100", required_argument, 0, 'v' },
        { "adam", required_argument, 0, 'A' },  { "batches", required_argument, 0, 'b' },
        { "reference", required_argument, 0, 'r' },
        { "ds-overlap-comm", required_argument, 0, 'O' },
        { "attn-a100", required_argument, 0, 'x' }, { "attn-v100", required_argument, 0, 'y' },
        { "no-sensitivity", no_argument, 0, 'n' }, { "quiet", no_argument, 0, 'q' },
        { "help", no_argument, 0, 'h' },        { 0, 0, 0, 0 }
    };
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': c->out = optarg; break;
        case 'a': c->a100 = optarg; break;
        case 'v': c->v100 = optarg; break;
        case 'r': c->ref = optarg; break;
        case 'n': c->sens = 0; break;
        case 'O':
            if (!strcmp(optarg, "0") || !strcmp(optarg, "1")) {
                c->ds_overlap = optarg[0] == '1';
                break;
            }
            fprintf(stderr, "memsim memferry: --ds-overlap-comm %s: expected 0 or 1\n", optarg);
            return -1;
        case 'q': c->quiet = 1; break;
        case 'x':
        case 'y':
            if (!strcmp(optarg, "flash") || !strcmp(optarg, "eager")) {
                *(ch == 'x' ? &c->attn_a100 : &c->attn_v100) =
                    optarg[0] == 'e' ? GEN_ATTN_EAGER : GEN_ATTN_FLASH;
                break;
            }
            fprintf(stderr, "memsim memferry: --attn-%s %s: expected flash or eager\n",
                    ch == 'x' ? "a100" : "v100", optarg);
            return -1;
        case 'h': usage(stdout); return -2;
        case 'f':
            if (parse_figs(optarg, &c->figs) == 0) break;
            fprintf(stderr, "memsim memferry: --figs %s: expected a list of 9..13 or all\n", optarg);
            return -1;
        case 'b':
            if (parse_batches(optarg) == 0) break;
            fprintf(stderr, "memsim memferry: --batches %s: expected four batch sizes\n", optarg);
            return -1;
        case 'A':
            if (ms_parse_double(optarg, &c->adam_single) && c->adam_single >= 1 &&
                c->adam_single <= 1e18)
                break;
            fprintf(stderr, "memsim memferry: --adam %s: expected a rate in [1, 1e18] "
                            "parameters/s\n", optarg);
            return -1;
        default:
            fprintf(stderr, "memsim memferry: see --help\n");
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "memsim memferry: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

static ms_status run_figs(mf_ctx *c, ms_error *err)
{
    ms_status st = MS_OK;
    c->attn_now = c->attn_a100;
    if (c->figs & (1u << 9)) st = fig9(c, err);
    if (!st && c->sens && (c->figs & (1u << 9))) st = fig9_sensitivity(c, err);
    if (!st && (c->figs & (1u << 10))) st = fig10b(c, err);
    c->attn_now = c->attn_v100;
    if (!st && (c->figs & (1u << 11))) st = fig11(c, err);
    c->attn_now = c->attn_a100;
    if (!st && (c->figs & (1u << 13))) st = fig13(c, err);
    return st;
}

int driver_memferry(int argc, char **argv)
{
    mf_ctx *c = calloc(1, sizeof *c);
    if (!c) return MS_EXIT_INTERNAL;
    c->out = "out/memferry";
    c->a100 = "a100-80g-pcie3";
    c->v100 = "v100-32g-pcie3";
    char ref[1024], dir[900];
    cli_experiments_dir(dir, sizeof dir);
    snprintf(ref, sizeof ref, "%s/memferry/reference.tsv", dir);
    c->ref = ref;
    c->adam_single = 8e9;
    c->sens = 1;
    c->ds_overlap = 1;
    c->attn_a100 = GEN_ATTN_FLASH;
    c->attn_v100 = GEN_ATTN_EAGER;
    parse_figs("all", &c->figs);
    int pa = parse_args(argc, argv, c);
    if (pa) {
        free(c);
        return pa == -2 ? MS_EXIT_OK : MS_EXIT_USAGE;
    }
    ms_error err;
    ms_error_clear(&err);
    ms_status st = ref_load(c, &err);
    if (!st) st = machine_load_named(c->a100, &c->ma, &err);
    if (!st) st = machine_load_named(c->v100, &c->mv, &err);
    char plans[512];
    snprintf(plans, sizeof plans, "%s/plans", c->out);
    if (!st && mkdir_p(plans))
        st = ms_fail_at(&err, MS_ERR_IO, plans, 0, "cannot create: %s", strerror(errno));
    if (!st) st = run_figs(c, &err);
    int misses = 0;
    if (!st) st = compare(c, &misses, &err);
    machine_profile_free(c->ma);
    machine_profile_free(c->mv);
    free(c->ref_rows);
    free(c->ref_buf);
    free(c);
    if (st) {
        fprintf(stderr, "memsim memferry: %s\n", err.msg);
        return ms_exit_code(st);
    }
    return misses ? MS_EXIT_FAIL : MS_EXIT_OK;
}

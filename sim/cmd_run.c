/* cmd_run.c — `memsim plan`, `memsim simulate`, `memsim compare` and `memsim sweep`: the
 * what-if commands. They share the pipeline (sim/pipeline.c) and, with the library API, the
 * runs of sim/runs.c; here they print tables and write CSVs and figures. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/cmds.h"
#include "sim/jobs.h"
#include "sim/pipeline.h"
#include "sim/plot.h"
#include "sim/runs.h"

static int write_csv(const char *cmd, const char *path, const sim_result *rs, size_t n)
{
    ms_error err;
    ms_status st = runs_write_csv(path, rs, n, &err);
    return st == MS_OK ? MS_EXIT_OK : cli_fail(cmd, st, &err);
}

static int make_dir(const char *cmd, const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "memsim %s: cannot create %s: %s\n", cmd, dir, strerror(errno));
        return MS_EXIT_IO;
    }
    return MS_EXIT_OK;
}

/* Parses a command's options; with --help prints its usage (what the command does, then the
 * options of its groups) and returns -1. Otherwise the parse's exit status (0: go on). */
static int parse_cmd(int argc, char **argv, unsigned groups, const char *cmd, const char *what,
                     const char *examples, cli_args *a)
{
    int rc = cli_parse(argc, argv, groups, a);
    if (rc || !a->help) return rc;
    printf("usage: memsim %s [options]\n%s\n\noptions:\n", cmd, what);
    cli_print_options(stdout, groups);
    printf("\nexamples (from the source directory, sim/ on the PATH):\n%s", examples);
    return -1;
}

/* The range and median of a meta value that is a comma list of positive microseconds (at
 * most 64); 0 when absent, unreadable or shorter than two (the meta is informative:
 * simulation never reads it). */
static int us_list_stats(const trace_t *t, const char *key, double *lo, double *hi,
                         double *med)
{
    const char *v = t ? trace_get_meta(t, key) : NULL;
    double x[64];
    int n = 0;
    for (const char *p = v; p && *p && n < 64;) {
        char *end;
        double d = strtod(p, &end);
        if (end == p || !(d > 0)) return 0;
        x[n++] = d;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    if (n < 2) return 0;
    for (int i = 1; i < n; i++)     /* insertion sort for the median: n is small */
        for (int k = i; k > 0 && x[k - 1] > x[k]; k--) {
            double tmp = x[k];
            x[k] = x[k - 1];
            x[k - 1] = tmp;
        }
    *lo = x[0];
    *hi = x[n - 1];
    *med = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
    return n;
}

/* What a captured trace's host side rests on: the profile's eager host time where it gives
 * none (pipe_eager_host_us); its timed steps (meta captured.host_steps_us): their range and
 * median, the spread a host-bound prediction carries; and where the capture drained the GPU
 * after each (captured.step_wall_us), the same steps whole, which a keep-all prediction is
 * of. */
static void host_notes(FILE *f, const trace_t *t, const machine_t *m)
{
    double eager = pipe_eager_host_us(t, m);
    if (eager > 0)
        fprintf(f, "host: the capture gives no host times (host_timing off); each kernel issued "
                "at PyTorch eager's %.1f us a kernel (the machine profile's "
                "host.eager_kernel_us)\n", eager);
    double lo, hi, med;
    int n = us_list_stats(t, "captured.host_steps_us", &lo, &hi, &med);
    if (n) fprintf(f, "host: the capture's %d timed steps took %.1f-%.1f ms of host time (median "
                   "%.1f, spread %.1f %%); where the host bounds a step, its time moves that much "
                   "from step to step\n", n, lo / 1000, hi / 1000, med / 1000,
                   med > 0 ? 100.0 * (hi - lo) / med : 0.0);
    n = us_list_stats(t, "captured.step_wall_us", &lo, &hi, &med);
    if (n) fprintf(f, "host: the same steps whole, to the GPU drained: %.1f-%.1f ms (median %.1f), "
                   "the capturing process's own plain keep-all steps\n",
                   lo / 1000, hi / 1000, med / 1000);
}

/* Says which policies of a comparison ran on the workload's ZeRO-Offload form. */
static void forms_note(FILE *out, const cli_args *a, const runs_forms *f)
{
    const trace_t *o = f->t[POL_FORM_OFFLOAD];
    fprintf(out, "ZeRO-Offload form of the workload (optimizer states and Adam on the host, "
            "%s) for:", o && trace_get_meta(o, "offload_form") ? "made from the plain trace"
                                                               : "--gen offload=1");
    for (size_t i = 0; i < a->n_policies; i++)
        if (pol_form_of(a->policies[i]) == POL_FORM_OFFLOAD) fprintf(out, " %s", a->policies[i]);
    fprintf(out, "; the others ran on the plain form\n");
}

/* ---- the line above a summary table: the workload, the machine and its capacities ---- */

/* Bytes as "80.00 GiB", or "1.00 TiB" from a TiB on. */
static const char *size_name(uint64_t b, char *buf, size_t n)
{
    if (b >= (UINT64_C(1) << 40)) snprintf(buf, n, "%.2f TiB", (double)b / (double)(UINT64_C(1) << 40));
    else snprintf(buf, n, "%.2f GiB", (double)b / MS_GiB);
    return buf;
}

/* A count as 256K or 1M when a whole number of those, else plain. */
static const char *count_name(uint64_t x, char *buf, size_t n)
{
    if (x && x % (UINT64_C(1) << 20) == 0) snprintf(buf, n, "%lluM", (unsigned long long)(x >> 20));
    else if (x && x % 1024 == 0) snprintf(buf, n, "%lluK", (unsigned long long)(x >> 10));
    else snprintf(buf, n, "%llu", (unsigned long long)x);
    return buf;
}

/* The workload's identification: from the trace's meta lines when t is given (only what they
 * say), else from a result the pipeline filled from them (id; NULL: none ran). */
typedef struct wl_ids {
    const char *model;
    int has_seq, has_batch, has_par;
    uint64_t seq, batch, tp, cp, dp;
    uint64_t ep;              /* 1 unless the trace says (meta ep) */
} wl_ids;

static void ids_of(const trace_t *t, const sim_result *id, wl_ids *w)
{
    memset(w, 0, sizeof *w);
    w->tp = w->cp = w->dp = w->ep = 1;
    if (t) {
        w->ep = trace_meta_u64(t, "ep", 1);
        w->model = trace_get_meta(t, "model");
        w->has_seq = trace_get_meta(t, "seq") != NULL;
        w->has_batch = trace_get_meta(t, "batch") != NULL;
        w->seq = trace_meta_u64(t, "seq", 0);
        w->batch = trace_meta_u64(t, "batch", 1);
        const char *k[3] = {"tp", "cp", "dp"};
        uint64_t *v[3] = {&w->tp, &w->cp, &w->dp};
        for (int i = 0; i < 3; i++) {
            if (!trace_get_meta(t, k[i])) continue;
            w->has_par = 1;
            *v[i] = trace_meta_u64(t, k[i], 1);
        }
        return;
    }
    if (!id) return;
    w->model = strcmp(id->model, "-") ? id->model : NULL;
    w->has_seq = w->has_batch = w->has_par = 1;
    w->seq = id->seq;
    w->batch = id->batch ? id->batch : 1;
    w->tp = id->tp > 0 ? (uint64_t)id->tp : 1;
    w->cp = id->cp > 0 ? (uint64_t)id->cp : 1;
    w->dp = id->dp > 0 ? (uint64_t)id->dp : 1;
    w->ep = id->ep > 0 ? (uint64_t)id->ep : 1;
}

/* "workload: MODEL, seq S, batch B, tp T cp C dp D (N GPUs) on MACHINE: X device (Y usable)
 * per GPU, host Z per node (W per GPU's share)". trace_path: the --trace file, named first.
 * skip: 's' leaves out the sequence, 'b' the batch (the value a sweep sweeps), 0 neither. The
 * GPU's host share is the simulator's (sim_result.host_capacity_bytes of rs[0..n)). */
static void workload_line(FILE *f, const char *trace_path, const trace_t *t, const sim_result *rs,
                          size_t n, const machine_t *m, int skip)
{
    const sim_result *id = NULL;
    uint64_t share = 0;
    for (size_t i = 0; i < n; i++) {
        if (rs[i].status != RS_ERROR && !id) id = &rs[i];
        if (rs[i].host_capacity_bytes > share) share = rs[i].host_capacity_bytes;
    }
    wl_ids w;
    ids_of(t, id, &w);
    char b1[32], b2[32];
    const char *sep = "";
    fprintf(f, "workload: ");
    if (trace_path) {
        fprintf(f, "trace %s", trace_path);
        sep = ": ";
    }
    if (!t && !id) fprintf(f, "%s(none ran)", sep);
    else {
        if (w.model) {
            fprintf(f, "%s%s", sep, w.model);
            sep = ", ";
        }
        if (w.has_seq && skip != 's') {
            fprintf(f, "%sseq %s", sep, count_name(w.seq, b1, sizeof b1));
            sep = ", ";
        }
        if (w.has_batch && skip != 'b') {
            fprintf(f, "%sbatch %llu", sep, (unsigned long long)w.batch);
            sep = ", ";
        }
        if (w.has_par) {
            uint64_t g = w.tp * w.cp * w.dp;
            fprintf(f, "%stp %llu cp %llu dp %llu", sep, (unsigned long long)w.tp,
                    (unsigned long long)w.cp, (unsigned long long)w.dp);
            if (w.ep > 1) fprintf(f, " ep %llu", (unsigned long long)w.ep);
            fprintf(f, " (%llu GPU%s)", (unsigned long long)g, g == 1 ? "" : "s");
        }
    }
    fprintf(f, " on %s: %s device (%.2f usable) per GPU, host %s per node", m->name,
            size_name(m->gpu_hbm_bytes, b1, sizeof b1), (double)machine_usable_bytes(m) / MS_GiB,
            size_name(m->host_mem_bytes, b2, sizeof b2));
    if (share) fprintf(f, " (%s per GPU's share)", size_name(share, b1, sizeof b1));
    fputc('\n', f);
}

/* Loads the machine and the workload in the form of the command's policy; prints errors. */
static int setup(const char *cmd, const cli_args *a, machine_profile **mp, runs_forms *f,
                 const trace_t **t)
{
    ms_error err;
    ms_status st = runs_setup(a, mp, f, t, &err);
    return st == MS_OK ? MS_EXIT_OK : cli_fail(cmd, st, &err);
}

int cmd_plan(int argc, char **argv)
{
    const unsigned g = CLI_GROUPS_PLAN;
    cli_args a;
    int rc = parse_cmd(argc, argv, g, "plan",
                       "Runs a policy's planner on a workload and writes the plan file (-o;\n"
                       "default: standard output). The plan can be edited and simulated with\n"
                       "memsim simulate --plan FILE.",
                       "  memsim plan --model gpt-7b --seq 64K --tp 4 --cp 2 --policy full-recompute -o p.plan\n"
                       "  memsim simulate --model gpt-7b --seq 64K --tp 4 --cp 2 --plan p.plan\n"
                       "  memsim plan --model-config experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp --seq 2048 --batch 4 --machine h200-sxm --policy memo -o llama.plan\n", &a);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    machine_profile *mp;
    runs_forms f;
    const trace_t *t;
    if ((rc = setup("plan", &a, &mp, &f, &t))) return rc;
    ms_error err;
    plan_t *plan;
    ms_status st = runs_plan(&a.w, t, &mp->m, &a.pol, a.quiet ? NULL : stderr, &plan, &err);
    if (st == MS_OK) {
        st = plan_write(plan, a.output ? a.output : "-", &err);
        plan_free(plan);
    }
    runs_forms_free(&f);
    machine_profile_free(mp);
    return st == MS_OK ? MS_EXIT_OK : cli_fail("plan", st, &err);
}

/* Writes the memory and timeline figures of one run from its CSVs. */
static void draw_run(const char *cmd, const char *dir, const char *tag, const sim_result *r,
                     int quiet)
{
    char data[4096], outb[4096], title[256];
    ms_error err;
    snprintf(title, sizeof title, "%s / %s: memory", r->policy, r->model);
    snprintf(data, sizeof data, "%s/%s.mem.csv", dir, tag);
    snprintf(outb, sizeof outb, "%s/memory-%s", dir, tag);
    if (plot_draw("memory", data, outb, title, NULL, &err) != MS_OK)
        fprintf(stderr, "memsim %s: %s\n", cmd, err.msg);
    else if (!quiet)
        printf("wrote %s.png and .svg\n", outb);
    snprintf(title, sizeof title, "%s / %s: streams", r->policy, r->model);
    snprintf(data, sizeof data, "%s/%s.intervals.csv", dir, tag);
    snprintf(outb, sizeof outb, "%s/timeline-%s", dir, tag);
    if (plot_draw("timeline", data, outb, title, NULL, &err) != MS_OK)
        fprintf(stderr, "memsim %s: %s\n", cmd, err.msg);
    else if (!quiet)
        printf("wrote %s.png and .svg\n", outb);
}

int cmd_simulate(int argc, char **argv)
{
    const unsigned g = CLI_GROUPS_SIMULATE;
    cli_args a;
    int rc = parse_cmd(argc, argv, g, "simulate",
                       "Simulates one training iteration of a workload under one policy (or a\n"
                       "plan file) on a machine and prints the results.",
                       "  memsim simulate --model gpt2-1b --seq 1024 --batch 8 --machine h100-sxm --policy full-swap\n"
                       "  memsim simulate --model-config experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp --seq 2048 --batch 4 --machine h200-sxm --policy full-recompute --csv r.csv\n"
                       "  memsim simulate --dims 4,1024,16,4096,50257 --seq 8K --machine h200-sxm --policy full-swap --timeline t.json\n", &a);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    if (a.plot_dir && (rc = make_dir("simulate", a.plot_dir))) return rc;
    machine_profile *mp;
    runs_forms f;
    const trace_t *t;
    if ((rc = setup("simulate", &a, &mp, &f, &t))) return rc;
    sim_result r;
    const char *name = a.pol.plan_path ? "plan" : a.pol.policy;
    ms_error err;
    ms_status st = runs_one(&a, t, &mp->m, name, NULL, 0, NULL, &r, &err);
    if (st != MS_OK) rc = cli_fail("simulate", st, &err);
    if (!rc) {
        if (!a.quiet) {
            workload_line(stdout, a.w.trace_path, t, &r, 1, &mp->m, 0);
            res_table(stdout, &r, 1);
            res_notes(stdout, &r, 1);
        }
        if (!a.quiet && a.breakdown) res_breakdown(stdout, &r, 1);
        if (a.csv_path) rc = write_csv("simulate", a.csv_path, &r, 1);
        if (!rc && a.plot_dir) draw_run("simulate", a.plot_dir, name, &r, a.quiet);
    }
    runs_forms_free(&f);
    machine_profile_free(mp);
    return rc;
}

static int write_compare_data(const char *dir, const sim_result *rs, size_t n, char *path,
                              size_t pathn)
{
    snprintf(path, pathn, "%s/compare.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (size_t i = 0; i < n; i++) {
        const sim_result *r = &rs[i];
        int ok = r->status == RS_OK;
        fprintf(f, "%s,%s,%.6f,%.6f,%.4f,%.4f\n", r->policy, res_status_name(r->status),
                ok ? r->iter_time_s : 0.0, ok ? r->mfu : 0.0,
                ok ? (double)r->peak_reserved_bytes / MS_GiB : 0.0,
                ok ? (double)r->host_peak_bytes / MS_GiB : 0.0);
    }
    return fclose(f);
}

/* breakdown.csv for plots/breakdown.gp: the kinds some policy holds, a row per policy in GiB.
 * *nkinds gets the number of kind columns. */
static int write_breakdown_data(const char *dir, const sim_result *rs, size_t n, char *path,
                                size_t pathn, int *nkinds)
{
    int used[BM_COUNT] = { 0 };
    *nkinds = 0;
    for (int k = 0; k < BM_COUNT; k++) {
        for (size_t i = 0; i < n; i++) used[k] |= rs[i].peak_live_bytes[k] != 0;
        *nkinds += used[k];
    }
    snprintf(path, pathn, "%s/breakdown.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "policy");
    for (int k = 0; k < BM_COUNT; k++)
        if (used[k]) fprintf(f, ",%s", bm_kind_name((bm_kind)k));
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s%s", rs[i].policy, rs[i].peak_live_at_failure ? " (oom)" : "");
        for (int k = 0; k < BM_COUNT; k++)
            if (used[k]) fprintf(f, ",%.4f", (double)rs[i].peak_live_bytes[k] / MS_GiB);
        fputc('\n', f);
    }
    return fclose(f);
}

/* ---- compare -j N: a job per policy (sim/jobs.c) ----
 * The parent makes the workload's forms before forking, so the children share them. A child
 * sends back its results row and the bytes of the outputs that every policy writes to one
 * place (its timeline events, --memcsv, --schedule): the parent writes those in the order of
 * --policies, so the files end as a run one policy after the other leaves them. */

typedef struct compare_jobs {
    const cli_args *a;
    const machine_t *m;
    runs_forms *f;
    int timeline;     /* --timeline given */
    sim_result *rs;   /* parent: the rows, in the order of --policies */
    ms_out *tl;
    int *tl_first;
    int failed;
} compare_jobs;

/* A file the child wrote, as a length (UINT64_MAX: none) and its bytes. */
static void put_file(FILE *data, const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    uint64_t l = UINT64_MAX;
    ms_error err;
    if (path && access(path, F_OK) == 0 && ms_read_all(path, SIZE_MAX, &buf, &len, &err) == MS_OK)
        l = len;
    fwrite(&l, sizeof l, 1, data);
    if (l != UINT64_MAX) fwrite(buf, 1, len, data);
    free(buf);
    if (path) remove(path);
}

static const char *get_file(const char **p, const char *end, size_t *len)
{
    uint64_t l;
    if ((size_t)(end - *p) < sizeof l) return NULL;
    memcpy(&l, *p, sizeof l);
    *p += sizeof l;
    if (l == UINT64_MAX || l > (uint64_t)(end - *p)) return NULL;
    const char *b = *p;
    *p += l;
    *len = (size_t)l;
    return b;
}

static int compare_job(size_t i, void *vc, FILE *data)
{
    compare_jobs *c = vc;
    cli_args a = *c->a;
    const char *pol = a.policies[i];
    char dir[4096], tlp[4200], mem[4200], sch[4200];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/memsim-job-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int need = c->timeline || a.out.memcsv_path || a.out.schedule_path;
    if (need && !mkdtemp(dir)) {
        fprintf(stderr, "memsim compare: cannot create a folder in %s for a job's outputs: %s\n",
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
        return MS_EXIT_INTERNAL;
    }
    snprintf(tlp, sizeof tlp, "%s/timeline.json", dir);
    snprintf(mem, sizeof mem, "%s/mem.csv", dir);
    snprintf(sch, sizeof sch, "%s/schedule.txt", dir);
    if (a.out.memcsv_path) a.out.memcsv_path = mem;
    if (a.out.schedule_path) a.out.schedule_path = sch;
    sim_result r;
    ms_error err;
    ms_out *tl = NULL;
    int tl_first = 1, rc = 0;
    ms_status st = c->timeline ? ms_out_open(tlp, &tl, &err) : MS_OK;
    const trace_t *t;
    if (st == MS_OK) st = runs_forms_get(c->f, &a.w, c->m, pol_form_of(pol), &t, &err);
    if (st == MS_OK) st = runs_one(&a, t, c->m, pol, tl, (int)i + 1, &tl_first, &r, &err);
    if (st != MS_OK) {
        rc = cli_fail("compare", st, &err);
        runs_error_row(&r, pol, &a.w, c->m, err.msg);
    }
    if (tl) ms_out_commit(tl, &err);
    fwrite(&r, sizeof r, 1, data);
    put_file(data, c->timeline ? tlp : NULL);
    put_file(data, c->a->out.memcsv_path ? mem : NULL);
    put_file(data, c->a->out.schedule_path ? sch : NULL);
    if (need) rmdir(dir);
    return rc;
}

static void compare_label(size_t i, void *vc, char *buf, size_t n)
{
    compare_jobs *c = vc;
    snprintf(buf, n, "%s", c->a->policies[i]);
}

/* A file the job wrote, saved where the user asked; on an error the row becomes an error row
 * as the run one after the other makes it. Returns 0 when saved. */
static int compare_save(compare_jobs *c, size_t i, const char *path, const char *buf, size_t len)
{
    ms_error err;
    ms_status st = ms_out_save(path, buf, len, &err);
    if (st == MS_OK) return 0;
    int r = cli_fail("compare", st, &err);
    if (!c->failed) c->failed = r;
    runs_error_row(&c->rs[i], c->a->policies[i], &c->a->w, c->m, err.msg);
    return -1;
}

static void compare_done(size_t i, const jobs_result *jr, void *vc)
{
    compare_jobs *c = vc;
    fwrite(jr->out, 1, jr->out_len, stdout);
    fwrite(jr->err, 1, jr->err_len, stderr);
    if (jr->status && !c->failed) c->failed = jr->status;
    const char *p = jr->data, *end = jr->data + jr->data_len;
    if (jr->data_len < sizeof *c->rs) { /* the job could not even start its work */
        runs_error_row(&c->rs[i], c->a->policies[i], &c->a->w, c->m, "the job sent no result");
        if (!c->failed) c->failed = MS_EXIT_INTERNAL;
        return;
    }
    memcpy(&c->rs[i], p, sizeof *c->rs);
    p += sizeof *c->rs;
    size_t tl_len = 0, mem_len = 0, sch_len = 0;
    const char *tlb = get_file(&p, end, &tl_len);
    const char *memb = get_file(&p, end, &mem_len);
    const char *schb = get_file(&p, end, &sch_len);
    /* the order in which one policy's run writes them: schedule, timeline, memory CSV */
    if (schb && compare_save(c, i, c->a->out.schedule_path, schb, sch_len)) return;
    if (tlb && tl_len && c->tl) {
        if (!*c->tl_first) ms_out_write(c->tl, ",", 1);
        ms_out_write(c->tl, tlb, tl_len);
        *c->tl_first = 0;
    }
    if (memb) compare_save(c, i, c->a->out.memcsv_path, memb, mem_len);
}

int cmd_compare(int argc, char **argv)
{
    const unsigned g = CLI_GROUPS_COMPARE;
    cli_args a;
    int rc = parse_cmd(argc, argv, g, "compare",
                       "Runs several policies on one workload and prints them side by side;\n"
                       "with --plot DIR, draws the comparison bars and each policy's memory\n"
                       "curve and stream timeline. Each policy gets the workload in the form\n"
                       "it plans (ZeRO-Offload's for zero-offload and the MemFerry policies,\n"
                       "unless --trace or --gen offload fixes one). A policy that cannot run\n"
                       "on the workload gets an 'error' row (why: on standard error and in the\n"
                       "CSV's failure column); the others still run, and the exit status is\n"
                       "the first such error's. With -j N, up to N policies run at once, in N\n"
                       "forked worker processes; the table, CSV, timeline, memory CSV and figures\n"
                       "are the same as with -j 1.",
                       "  memsim compare --model gpt-7b --seq 64K --tp 4 --cp 2 --policies keep-all,full-recompute,full-swap\n"
                       "  memsim compare --model-config experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp --seq 2048 --batch 4 --machine h200-sxm --policies keep-all,full-recompute --csv c.csv\n"
                       "  memsim compare --model gpt2-1b --seq 1024 --batch 8 --machine h100-sxm --policies keep-all,full-swap --breakdown\n", &a);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    if (a.plot_dir && (rc = make_dir("compare", a.plot_dir))) return rc;
    machine_profile *mp;
    if ((rc = cli_load_machine(&a, "compare", &mp))) return rc;
    runs_forms f;
    memset(&f, 0, sizeof f);
    sim_result rs[CLI_MAX_POLICIES];
    size_t n = 0;
    int failed = 0; /* a policy that cannot run on this workload: an error row, the rest go on */
    /* --timeline: one file, a process per policy (pid = its place in --policies, from 1) */
    ms_out *tl = NULL;
    int tl_first = 1;
    if (a.out.timeline_path) {
        ms_error err;
        ms_status st = runs_timeline_open(a.out.timeline_path, &tl, &err);
        if (st != MS_OK) {
            machine_profile_free(mp);
            return cli_fail("compare", st, &err);
        }
    }
    if (a.jobs > 1) {
        for (size_t i = 0; i < a.n_policies; i++) { /* each form once, before the fork */
            const trace_t *t;
            ms_error err;
            runs_forms_get(&f, &a.w, &mp->m, pol_form_of(a.policies[i]), &t, &err);
        }
        compare_jobs c = {&a, &mp->m, &f, tl != NULL, rs, tl, &tl_first, 0};
        jobs_spec js = {"compare", a.n_policies, a.jobs, a.quiet, compare_job, compare_done,
                        compare_label, &c};
        int jr = jobs_run(&js);
        if (jr) {
            ms_out_abort(tl);
            runs_forms_free(&f);
            machine_profile_free(mp);
            return jr;
        }
        failed = c.failed;
        n = a.n_policies;
    }
    if (a.jobs <= 1) {
        failed = runs_compare(&a, &mp->m, &f, tl, &tl_first, rs, 1);
        n = a.n_policies;
    }
    if (tl) {
        ms_error err;
        ms_status st = runs_timeline_close(tl, &err);
        if (st != MS_OK) rc = cli_fail("compare", st, &err);
    }
    if (!rc) {
        if (!a.quiet) {
            /* the plain form's meta when one ran on it (the forms share model, seq, batch and
             * the parallel degrees) */
            const trace_t *t = f.t[POL_FORM_PLAIN] ? f.t[POL_FORM_PLAIN] : f.t[POL_FORM_OFFLOAD];
            workload_line(stdout, a.w.trace_path, t, rs, n, &mp->m, 0);
            res_table(stdout, rs, n);
            res_verdict(stdout, rs, n);
            res_notes(stdout, rs, n);
            host_notes(stdout, t, &mp->m);
            if (f.t[POL_FORM_PLAIN] && f.t[POL_FORM_OFFLOAD]) forms_note(stdout, &a, &f);
            if (a.breakdown) res_breakdown(stdout, rs, n);
        }
        if (a.csv_path) rc = write_csv("compare", a.csv_path, rs, n);
    }
    if (!rc && a.plot_dir) {
        char data[4096], outb[4096], vars[96], title[256];
        ms_error err;
        if (write_compare_data(a.plot_dir, rs, n, data, sizeof data) != 0) {
            fprintf(stderr, "memsim compare: cannot write %s\n", data);
            rc = MS_EXIT_IO;
        } else {
            snprintf(outb, sizeof outb, "%s/compare", a.plot_dir);
            uint64_t host = 0; /* the job's share of host memory, as the simulator gave it */
            for (size_t i = 0; i < n; i++)
                if (rs[i].host_capacity_bytes > host) host = rs[i].host_capacity_bytes;
            snprintf(vars, sizeof vars, "capacity_gib=%.2f; host_gib=%.2f",
                     (double)machine_usable_bytes(&mp->m) / MS_GiB, (double)host / MS_GiB);
            snprintf(title, sizeof title, "%s, seq %llu, on %s", rs[0].model,
                     (unsigned long long)rs[0].seq, mp->m.name);
            if (plot_draw("compare", data, outb, title, vars, &err) != MS_OK)
                fprintf(stderr, "memsim compare: %s\n", err.msg);
            else if (!a.quiet)
                printf("wrote %s.png and .svg\n", outb);
            int nk;
            if (write_breakdown_data(a.plot_dir, rs, n, data, sizeof data, &nk) != 0) {
                fprintf(stderr, "memsim compare: cannot write %s\n", data);
                rc = MS_EXIT_IO;
            } else if (nk > 0) {
                char bvars[128];
                snprintf(outb, sizeof outb, "%s/breakdown", a.plot_dir);
                snprintf(bvars, sizeof bvars, "%s; nkinds=%d", vars, nk);
                if (plot_draw("breakdown", data, outb, title, bvars, &err) != MS_OK)
                    fprintf(stderr, "memsim compare: %s\n", err.msg);
                else if (!a.quiet)
                    printf("wrote %s.png and .svg\n", outb);
            }
            for (size_t i = 0; i < n; i++)
                draw_run("compare", a.plot_dir, a.policies[i], &rs[i], a.quiet);
        }
    }
    runs_forms_free(&f);
    machine_profile_free(mp);
    return rc ? rc : failed;
}

/* ---- memsim sweep: policies over sequence lengths or micro-batch sizes ---- */

#define SWEEP_DEFAULT_SEQS "8K,16K,32K,64K,128K,256K,512K,1M"

#ifdef MEMSIM_MPI
#define SWEEP_MPI_HELP "\nUnder mpirun -n N (or srun) the grid's points are spread over the N ranks;\n" \
    "rank 0 prints and writes everything, as one process would, and runs the\n" \
    "--longest bisections (with -j, in its own pool)."
#else
#define SWEEP_MPI_HELP ""
#endif

/* A swept value as the table shows it: 64K or 1M for lengths (plain when not a whole number of
 * K), the number for batch sizes. */
static const char *point_name(const cli_args *a, uint64_t x, char *buf, size_t n)
{
    if (a->points_are_batches) snprintf(buf, n, "%llu", (unsigned long long)x);
    else if (x % (UINT64_C(1) << 20) == 0)
        snprintf(buf, n, "%lluM", (unsigned long long)(x >> 20));
    else if (x % 1024 == 0) snprintf(buf, n, "%lluK", (unsigned long long)(x >> 10));
    else snprintf(buf, n, "%llu", (unsigned long long)x);
    return buf;
}

/* "at 64K tokens" / "at batch 8", for messages. */
static const char *point_at(const cli_args *a, uint64_t x, char *buf, size_t n)
{
    char v[32];
    point_name(a, x, v, sizeof v);
    if (a->points_are_batches) snprintf(buf, n, "at batch %s", v);
    else snprintf(buf, n, "at %s tokens", v);
    return buf;
}

/* Generates the workload at point x (once per form) and runs policies[0..n) on it into
 * rs[0..n); a policy that cannot run there gets an error row, and *failed (when still 0) the
 * exit status of its error. */
static void sweep_at(const cli_args *a, const machine_t *m, uint64_t x, const char *const *policies,
                     size_t n, sim_result *rs, int *failed)
{
    pipe_workload w = a->w;
    if (a->points_are_batches) w.batch = x;
    else w.seq = x;
    runs_forms f;
    memset(&f, 0, sizeof f);
    char at[48];
    const trace_t *seen = NULL; /* the trace the reuse cache compares once for its plans */
    for (size_t i = 0; i < n; i++) {
        const trace_t *t;
        ms_error err;
        ms_status st = runs_forms_get(&f, &w, m, pol_form_of(policies[i]), &t, &err);
        if (st == MS_OK && t != seen) lreuse_point(a->pol.reuse, seen = t);
        if (st == MS_OK) {
            pipe_policy p = a->pol;
            p.policy = policies[i];
            pipe_outputs out;
            memset(&out, 0, sizeof out);
            st = runs_run(&w, t, m, &p, &out, &rs[i], &err);
        }
        if (st != MS_OK) {
            fprintf(stderr, "memsim sweep: %s %s: %s\n", policies[i],
                    point_at(a, x, at, sizeof at), err.msg);
            if (!*failed) *failed = ms_exit_code(st);
            runs_error_row(&rs[i], policies[i], &w, m, err.msg);
        }
    }
    lreuse_point(a->pol.reuse, NULL); /* before the traces go */
    runs_forms_free(&f);
}

/* The table: one row per point, MFU (%) or the failure per policy, then the fastest. */
static void sweep_table(const cli_args *a, const machine_t *m, const sim_result *rs)
{
    size_t np = a->n_policies;
    char v[32];
    int wd[CLI_MAX_POLICIES]; /* a column as wide as its policy's name, at least 8 */
    workload_line(stdout, a->w.trace_path, NULL, rs, a->n_points * np, m,
                  a->points_are_batches ? 'b' : 's');
    printf("%-8s", a->points_are_batches ? "batch" : "seq");
    for (size_t j = 0; j < np; j++) {
        size_t l = strlen(a->policies[j]);
        wd[j] = l > 8 ? (int)l : 8;
        printf(" %*s", wd[j], a->policies[j]);
    }
    printf("  fastest that fits (MFU %%, or why the run failed)\n");
    for (size_t i = 0; i < a->n_points; i++) {
        const sim_result *row = &rs[i * np];
        printf("%-8s", point_name(a, a->points[i], v, sizeof v));
        for (size_t j = 0; j < np; j++) {
            if (row[j].status == RS_OK) printf(" %*.2f", wd[j], row[j].mfu * 100);
            else printf(" %*s", wd[j], res_status_name(row[j].status));
        }
        long b = res_fastest(row, np, NULL);
        printf("  %s\n", b < 0 ? "none" : a->policies[b]);
    }
}

/* --longest for policy j: bisects between its last fitting point of the grid and the next one
 * (which failed), in multiples of step. Assumes that a point fits when a larger one does. */
static int sweep_longest(const cli_args *a, const machine_t *m, const sim_result *rs, size_t j,
                         uint64_t step)
{
    size_t np = a->n_policies, f = 0;
    while (f < a->n_points && rs[f * np + j].status == RS_OK) f++;
    char s1[48], s2[32];
    const char *pol = a->policies[j];
    if (f == a->n_points) {
        printf("  %-20s fits every value tried (largest %s)\n", pol,
               point_name(a, a->points[f - 1], s1, sizeof s1));
        return MS_EXIT_OK;
    }
    uint64_t lo = f ? a->points[f - 1] : 0, hi = a->points[f];
    res_status why = rs[f * np + j].status;
    if (why == RS_ERROR) { /* it cannot run there: nothing to bisect */
        printf("  %-20s error at %s (standard error says why)\n", pol,
               point_name(a, hi, s2, sizeof s2));
        return MS_EXIT_OK;
    }
    if (!a->quiet)
        fprintf(stderr, "memsim sweep: bisecting %s between %s and %s\n", pol,
                point_name(a, lo, s1, sizeof s1), point_name(a, hi, s2, sizeof s2));
    for (;;) {
        uint64_t mid = (lo + (hi - lo) / 2) / step * step;
        if (mid <= lo || mid >= hi) break;
        sim_result r;
        int failed = 0;
        sweep_at(a, m, mid, &pol, 1, &r, &failed);
        if (failed) return failed;
        if (!a->quiet)
            fprintf(stderr, "memsim sweep:   %s %s: %s\n", pol, point_at(a, mid, s1, sizeof s1),
                    res_status_name(r.status));
        if (r.status == RS_OK) lo = mid;
        else {
            hi = mid;
            why = r.status;
        }
    }
    if (lo) printf("  %-20s %s (%s: %s)\n", pol, point_name(a, lo, s1, sizeof s1),
                   point_name(a, hi, s2, sizeof s2), res_status_name(why));
    else printf("  %-20s none (%s: %s)\n", pol, point_name(a, hi, s2, sizeof s2),
                res_status_name(why));
    return MS_EXIT_OK;
}

/* ---- sweep -j N: a job per point of the grid, then a job per policy's --longest bisection
 * (each depends only on its policy's grid results; its probes stay one after the other) ---- */

typedef struct sweep_jobs {
    const cli_args *a;
    const machine_t *m;
    sim_result *rs;   /* the grid, point-major */
    uint64_t step;    /* --longest's resolution */
    int failed;       /* the grid's first error */
    int rc;           /* the bisections': the first that did not end well */
} sweep_jobs;

static int sweep_point_job(size_t i, void *vc, FILE *data)
{
    sweep_jobs *c = vc;
    size_t np = c->a->n_policies;
    sim_result *rs = calloc(np, sizeof *rs);
    if (!rs) {
        fprintf(stderr, "memsim sweep: out of memory\n");
        return MS_EXIT_INTERNAL;
    }
    int failed = 0;
    sweep_at(c->a, c->m, c->a->points[i], c->a->policies, np, rs, &failed);
    fwrite(rs, sizeof *rs, np, data);
    free(rs);
    return failed;
}

static void sweep_point_label(size_t i, void *vc, char *buf, size_t n)
{
    sweep_jobs *c = vc;
    point_at(c->a, c->a->points[i], buf, n);
}

static void sweep_point_done(size_t i, const jobs_result *jr, void *vc)
{
    sweep_jobs *c = vc;
    size_t np = c->a->n_policies;
    fwrite(jr->out, 1, jr->out_len, stdout);
    fwrite(jr->err, 1, jr->err_len, stderr);
    if (jr->data_len == np * sizeof *c->rs) memcpy(&c->rs[i * np], jr->data, jr->data_len);
    else
        for (size_t j = 0; j < np; j++) {
            pipe_workload w = c->a->w;
            if (c->a->points_are_batches) w.batch = c->a->points[i];
            else w.seq = c->a->points[i];
            runs_error_row(&c->rs[i * np + j], c->a->policies[j], &w, c->m, "the job sent no result");
        }
    if (jr->status && !c->failed) c->failed = jr->status;
}

static int sweep_longest_job(size_t j, void *vc, FILE *data)
{
    (void)data;
    sweep_jobs *c = vc;
    return sweep_longest(c->a, c->m, c->rs, j, c->step);
}

static void sweep_longest_label(size_t j, void *vc, char *buf, size_t n)
{
    sweep_jobs *c = vc;
    snprintf(buf, n, "the bisection of %s", c->a->policies[j]);
}

static void sweep_longest_done(size_t j, const jobs_result *jr, void *vc)
{
    (void)j;
    sweep_jobs *c = vc;
    if (c->rc) return; /* one after the other, the bisections stop at the first error */
    fwrite(jr->out, 1, jr->out_len, stdout);
    fwrite(jr->err, 1, jr->err_len, stderr);
    c->rc = jr->status;
}

/* The x coordinate of a point in the figure: K tokens, or the batch size. */
static double point_x(const cli_args *a, uint64_t x)
{
    return a->points_are_batches ? (double)x : (double)x / 1024;
}

/* The figure's data: one block per policy (header line, then x, MFU %, peak reserved GiB;
 * failed points as NaN), for plots/sweep.gp. */
static int write_sweep_data(const char *dir, const cli_args *a, const sim_result *rs, char *path,
                            size_t pathn)
{
    snprintf(path, pathn, "%s/sweep.dat", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    size_t np = a->n_policies;
    for (size_t j = 0; j < np; j++) {
        fprintf(f, "%sx \"%s\" reserved_gib\n", j ? "\n\n" : "", a->policies[j]);
        for (size_t i = 0; i < a->n_points; i++) {
            const sim_result *r = &rs[i * np + j];
            double x = point_x(a, a->points[i]);
            if (r->status == RS_OK)
                fprintf(f, "%.3f %.4f %.4f\n", x, r->mfu * 100,
                        (double)r->peak_reserved_bytes / MS_GiB);
            else fprintf(f, "%.3f NaN NaN\n", x);
        }
    }
    return fclose(f);
}

static void sweep_plot(const cli_args *a, const machine_t *m, const sim_result *rs)
{
    char data[4096], outb[4096], vars[256], title[256];
    if (write_sweep_data(a->plot_dir, a, rs, data, sizeof data) != 0) {
        fprintf(stderr, "memsim sweep: cannot write %s\n", data);
        return;
    }
    int b = a->points_are_batches;
    snprintf(outb, sizeof outb, "%s/sweep", a->plot_dir);
    snprintf(vars, sizeof vars, "capacity_gib=%.2f; npol=%zu; xmin=%.3f; xmax=%.3f; xlab=\"%s\"",
             (double)machine_usable_bytes(m) / MS_GiB, a->n_policies,
             point_x(a, a->points[0]), point_x(a, a->points[a->n_points - 1]),
             b ? "micro-batch size" : "sequence length (K tokens)");
    snprintf(title, sizeof title, "%s on %s: MFU and memory against the %s", rs[0].model,
             m->name, b ? "micro-batch size" : "sequence length");
    ms_error err;
    if (plot_draw("sweep", data, outb, title, vars, &err) != MS_OK)
        fprintf(stderr, "memsim sweep: %s\n", err.msg);
    else if (!a->quiet)
        printf("wrote %s.png and .svg\n", outb);
}

/* The fixed dimension of the sweep must not be the swept one. */
static int sweep_args_check(const cli_args *a)
{
    const char *bad = NULL;
    if (a->points_are_batches && a->w.batch) bad = "--batch with --batches";
    if (!a->points_are_batches && a->w.seq) bad = "--seq with --seqs (or without --batches)";
    if (!bad) return MS_EXIT_OK;
    fprintf(stderr, "memsim sweep: %s: the swept quantity cannot also be fixed\n", bad);
    return MS_EXIT_USAGE;
}

int cmd_sweep(int argc, char **argv)
{
    const unsigned g = CLI_WORKLOAD | CLI_MACHINE | CLI_POLICIES | CLI_OUTPUTS | CLI_SWEEP |
                       CLI_JOBS;
    cli_args a;
    int rc = parse_cmd(argc, argv, g, "sweep",
                       "Runs several policies at several sequence lengths (--seqs) or micro-batch\n"
                       "sizes (--batches, at --seq) of one model on a machine: the MFU of each\n"
                       "(or oom / oohm), the fastest policy that fits at each point, and with\n"
                       "--longest each policy's longest sequence (largest batch) that fits.\n"
                       "--csv writes every run's results row, --plot DIR the figure. Each\n"
                       "policy gets the workload in the form it plans (as compare); a policy\n"
                       "that cannot run at a point shows 'error' there (why: on standard\n"
                       "error), the others go on, and the exit status is the first error's.\n"
                       "With -j N, up to N points of the grid run at once, in N forked worker\n"
                       "processes, and then up to N policies' --longest bisections (each one's\n"
                       "probes depend on the one before, so they stay one after the other);\n"
                       "the table, CSV and figure are the same as with -j 1." SWEEP_MPI_HELP,
                       "  memsim sweep --model gpt2-1b --seq 1024 --batches 8,16,32,64 --machine h100-sxm --longest\n"
                       "  memsim sweep --model gpt-7b --tp 4 --cp 2 --seqs 64K,128K,256K --policies full-recompute,full-swap --csv s.csv\n"
                       "  memsim sweep --model-config experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp --seqs 2K,4K,8K --batch 4 --machine h200-sxm --policies keep-all,full-recompute\n", &a);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    if (!a.n_points && (rc = cli_set_points("sweep", "seqs", SWEEP_DEFAULT_SEQS, 0, &a)))
        return rc;
    if ((rc = sweep_args_check(&a))) return rc;
    if (a.plot_dir && (rc = make_dir("sweep", a.plot_dir))) return rc;
    machine_profile *mp;
    if ((rc = cli_load_machine(&a, "sweep", &mp))) return rc;
    size_t np = a.n_policies;
    sim_result *rs = calloc(a.n_points * np, sizeof *rs);
    /* the points' schedules re-bound where their structure repeats (NULL: lowered each time) */
    a.pol.reuse = a.no_reuse ? NULL : lreuse_new(0);
    /* and their traces generated after a template's structure (NULL: afresh each time) */
    a.w.gen_reuse = a.no_reuse ? NULL : greuse_new();
    if (!rs) {
        lreuse_free(a.pol.reuse);
        greuse_free(a.w.gen_reuse);
        machine_profile_free(mp);
        return cli_fail("sweep", MS_ERR_NOMEM, NULL);
    }
    char v[48];
    int failed = 0; /* a policy that cannot run at some point: error cells, the rest go on */
    sweep_jobs c = {&a, &mp->m, rs, 0, 0, 0};
    int pool = a.jobs > 1 || jobs_ranks() > 1; /* jobs_ranks: under mpirun with --with-mpi */
    if (pool) {
        jobs_spec js = {"sweep", a.n_points, a.jobs, a.quiet, sweep_point_job, sweep_point_done,
                        sweep_point_label, &c};
        if ((rc = jobs_run_ranks(&js))) {
            free(rs);
            lreuse_free(a.pol.reuse);
            greuse_free(a.w.gen_reuse);
            machine_profile_free(mp);
            return rc == JOBS_NOT_ROOT ? MS_EXIT_OK : rc;
        }
        failed = c.failed;
    }
    for (size_t i = 0; !pool && i < a.n_points; i++) {
        if (!a.quiet)
            fprintf(stderr, "memsim sweep: %s (%zu/%zu)\n",
                    point_at(&a, a.points[i], v, sizeof v), i + 1, a.n_points);
        sweep_at(&a, &mp->m, a.points[i], a.policies, np, &rs[i * np], &failed);
    }
    if (!rc && !a.quiet) sweep_table(&a, &mp->m, rs);
    if (!rc && a.longest && !a.quiet) {
        uint64_t step = a.step ? a.step
                        : a.points_are_batches
                            ? 1
                            : UINT64_C(1024) * (uint64_t)(a.w.tp > 0 ? a.w.tp : 1) *
                                  (uint64_t)(a.w.cp > 0 ? a.w.cp : 1);
        printf("%s that fits (bisection to %s; the first value that failed and why):\n",
               a.points_are_batches ? "largest micro-batch" : "longest sequence",
               point_name(&a, step, v, sizeof v));
        if (a.jobs > 1) {
            c.step = step;
            jobs_spec js = {"sweep", np, a.jobs, a.quiet, sweep_longest_job, sweep_longest_done,
                            sweep_longest_label, &c};
            rc = jobs_run(&js);
            if (!rc) rc = c.rc;
        } else
            for (size_t j = 0; j < np && !rc; j++) rc = sweep_longest(&a, &mp->m, rs, j, step);
    }
    if (!rc && a.csv_path) rc = write_csv("sweep", a.csv_path, rs, a.n_points * np);
    if (!rc && a.plot_dir) sweep_plot(&a, &mp->m, rs);
    free(rs);
    lreuse_free(a.pol.reuse);
    greuse_free(a.w.gen_reuse);
    machine_profile_free(mp);
    return rc ? rc : failed;
}

/* runs.c — the runs behind memsim plan, simulate, compare and replay (see runs.h): moved here
 * from the commands so that the commands and the library API run the same code. */
#define _POSIX_C_SOURCE 200809L
#include "sim/runs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <stdio_ext.h> /* __fsetlocking */
#endif

#include "sim/auto.h"

ms_status runs_forms_get(runs_forms *f, const pipe_workload *w, const machine_t *m, pol_form k,
                         const trace_t **t, ms_error *err)
{
    if (pipe_form_set(w) && !w->trace_path) k = POL_FORM_PLAIN; /* a plain file: converted */
    if (!f->t[k]) {
        ms_status st = pipe_trace_for(w, m, k, &f->t[k], err);
        if (st != MS_OK) return st;
    }
    *t = f->t[k];
    return MS_OK;
}

void runs_forms_free(runs_forms *f)
{
    trace_free(f->t[0]);
    trace_free(f->t[1]);
}

ms_status runs_setup(const cli_args *a, machine_profile **mp, runs_forms *f, const trace_t **t,
                     ms_error *err)
{
    memset(f, 0, sizeof *f);
    ms_status st = machine_load_named(a->machine, mp, err);
    if (st != MS_OK) return st;
    pol_form k = pol_form_for(a->pol.policy, a->pol.plan_path);
    st = runs_forms_get(f, &a->w, &(*mp)->m, k, t, err);
    if (st != MS_OK) {
        machine_profile_free(*mp);
        *mp = NULL;
    }
    return st;
}

void runs_error_row(sim_result *r, const char *policy, const pipe_workload *w,
                    const machine_t *m, const char *why)
{
    res_init(r);
    snprintf(r->policy, sizeof r->policy, "%s", policy);
    snprintf(r->model, sizeof r->model, "%s", w->trace_path ? "-" : w->model);
    snprintf(r->machine, sizeof r->machine, "%s", m->name);
    r->seq = w->seq;
    r->batch = w->batch;
    snprintf(r->failure, sizeof r->failure, "%.500s", why);
    r->status = RS_ERROR;
}

ms_status runs_one(const cli_args *a, const trace_t *t, const machine_t *m, const char *policy,
                   ms_out *tl, int pid, int *tl_first, sim_result *r, ms_error *err)
{
    pipe_policy p = a->pol;
    p.policy = policy;
    pipe_outputs out = a->out;
    if (tl) {
        out.timeline_path = NULL;
        out.timeline_out = tl;
        out.timeline_pid = pid;
        out.timeline_process = policy;
        out.timeline_first = tl_first;
    }
    char mem[4096], iv[4096];
    if (a->plot_dir) { /* the plot reads its data files here, whatever --memcsv names */
        snprintf(mem, sizeof mem, "%s/%s.mem.csv", a->plot_dir, policy);
        snprintf(iv, sizeof iv, "%s/%s.intervals.csv", a->plot_dir, policy);
        out.memcsv_path = mem;
        out.intervals_path = iv;
    }
    ms_status st = runs_run(&a->w, t, m, &p, &out, r, err);
    if (st == MS_OK && a->plot_dir && a->out.memcsv_path) { /* and --memcsv gets the same */
        char *buf;
        size_t len;
        st = ms_read_all(mem, SIZE_MAX, &buf, &len, err);
        if (st == MS_OK) {
            st = ms_out_save(a->out.memcsv_path, buf, len, err);
            free(buf);
        }
    }
    return st;
}

/* 1 when out asks for a file (the search's result can be used as it is otherwise). */
static int outputs_asked(const pipe_outputs *o)
{
    return o && (o->timeline_path || o->memcsv_path || o->intervals_path || o->plan_path ||
                 o->schedule_path || o->timeline_out);
}

ms_status runs_run(const pipe_workload *w, const trace_t *t, const machine_t *m,
                   const pipe_policy *p, const pipe_outputs *out, sim_result *r, ms_error *err)
{
    if (p->plan_path || !auto_is(p->policy)) return pipe_run(t, m, p, out, r, err);
    auto_result res;
    ms_status st = auto_search(w, t, m, p, NULL, &res, err);
    if (st == MS_OK) {
        if (outputs_asked(out)) st = pipe_simulate_with(auto_trace(&res), m, res.plan, out, p, r, err);
        else *r = res.r;
    }
    if (st == MS_OK) {
        snprintf(r->policy, sizeof r->policy, "%s", AUTO_POLICY);
        auto_note(&res, r->plan_note, sizeof r->plan_note);
    }
    auto_result_free(&res);
    return st;
}

ms_status runs_plan(const pipe_workload *w, const trace_t *t, const machine_t *m,
                    const pipe_policy *p, FILE *explain, plan_t **out, ms_error *err)
{
    if (p->plan_path || !auto_is(p->policy)) return pipe_plan(t, m, p, out, err);
    auto_result res;
    ms_status st = auto_search(w, t, m, p, NULL, &res, err);
    if (st == MS_OK) {
        if (explain) auto_summary(explain, &res);
        *out = res.plan;
        res.plan = NULL;
    }
    auto_result_free(&res);
    return st;
}

int runs_compare(const cli_args *a, const machine_t *m, runs_forms *f, ms_out *tl,
                 int *tl_first, sim_result *rs, int report)
{
    int failed = 0;
    for (size_t i = 0; i < a->n_policies; i++) {
        if (!a->quiet) fprintf(stderr, "memsim compare: simulating %s (%zu/%zu)\n",
                               a->policies[i], i + 1, a->n_policies);
        const trace_t *t;
        ms_error err;
        ms_status st = runs_forms_get(f, &a->w, m, pol_form_of(a->policies[i]), &t, &err);
        if (st == MS_OK)
            st = runs_one(a, t, m, a->policies[i], tl, (int)i + 1, tl_first, &rs[i], &err);
        if (st != MS_OK) {
            if (report)
                fprintf(stderr, "memsim compare: %s\n", err.msg[0] ? err.msg : ms_status_str(st));
            if (!failed) failed = ms_exit_code(st);
            runs_error_row(&rs[i], a->policies[i], &a->w, m, err.msg);
        }
    }
    return failed;
}

ms_status runs_timeline_open(const char *path, ms_out **tl, ms_error *err)
{
    ms_status st = ms_out_open(path, tl, err);
    if (st == MS_OK) ms_out_printf(*tl, "{\"traceEvents\":[");
    return st;
}

ms_status runs_timeline_close(ms_out *tl, ms_error *err)
{
    ms_out_printf(tl, "\n]}\n");
    return ms_out_commit(tl, err);
}

ms_status runs_write_csv(const char *path, const sim_result *rs, size_t n, ms_error *err)
{
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) return st;
    /* res_csv_* write to a FILE: render into memory, then through the atomic writer. */
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    if (!mf) {
        ms_out_abort(o);
        return ms_fail(err, MS_ERR_NOMEM, "%s", ms_status_str(MS_ERR_NOMEM));
    }
#ifdef __GLIBC__
    /* The stream is this function's alone: no lock around each of its fputc, fputs and
     * fprintf calls, whose atomic operations took most of their time (the 192-configuration
     * sweep of BENCHMARKS.md writes about 47,000 of them). */
    __fsetlocking(mf, FSETLOCKING_BYCALLER);
#endif
    res_csv_header(mf);
    for (size_t i = 0; i < n; i++) res_csv_row(mf, &rs[i]);
    fclose(mf);
    ms_out_write(o, buf, len);
    free(buf);
    return ms_out_commit(o, err);
}

/* ---- memsim replay ---- */

static int replay_bad_value(ms_error *e, const char *v, const char *opt, const char *why)
{
    ms_fail(e, MS_ERR_INVALID, "bad value '%s' for --%s (%s)", v, opt, why);
    return MS_EXIT_USAGE;
}

static int replay_bytes(ms_error *e, const char *opt, const char *v, uint64_t *x)
{
    if (ms_parse_bytes(v, x)) return 0;
    ms_fail(e, MS_ERR_INVALID, "--%s '%s': %s", opt, v, CLI_BYTES_EXPECTED);
    return MS_EXIT_USAGE;
}

/* --addresses: where the replay's segments go. */
static int replay_addresses(ms_error *e, const char *v, replay_opts *o)
{
    if (!strcmp(v, "recorded")) {
        o->ignore_recorded_addresses = o->descending_addresses = 0;
    } else if (!strcmp(v, "ascending")) {
        o->ignore_recorded_addresses = 1;
        o->descending_addresses = 0;
    } else if (!strcmp(v, "descending")) {
        o->ignore_recorded_addresses = o->descending_addresses = 1;
    } else {
        ms_fail(e, MS_ERR_INVALID, "bad value '%s' for --addresses (recorded, ascending or "
                "descending)", v);
        return MS_EXIT_USAGE;
    }
    return 0;
}

/* One option of replay (getopt's c, its value v, its long name). */
static int replay_apply(int c, const char *v, const char *name, runs_replay_args *ra, ms_error *e)
{
    uint64_t x;
    alloc_config *cfg = &ra->cfg;
    const char *range = "--capacity: 1 byte to 1 PiB";
    switch (c) {
    case 't': ra->trace = v; return 0;
    case 'a': snprintf(ra->allocators, sizeof ra->allocators, "%s", v); return 0;
    case 'm': ra->machine = v; return 0;
    case 'c':
        if (replay_bytes(e, "capacity", v, &x)) return MS_EXIT_USAGE;
        if (!x || x > (UINT64_C(1) << 50)) {
            const char *p = alloc_config_problem(cfg);
            return replay_bad_value(e, v, name, p ? p : range);
        }
        ra->o.capacity_bytes = x;
        return 0;
    case 's':
        if (replay_bytes(e, "max-split-size", v, &x)) return MS_EXIT_USAGE;
        cfg->max_split_size_bytes = x;
        break;
    case 'r':
        if (ms_parse_u64(v, &x) && x <= 64) cfg->roundup_power2_divisions = (unsigned)x;
        else {
            const char *p = alloc_config_problem(cfg);
            return replay_bad_value(e, v, name, p ? p : range);
        }
        break;
    case 'f':
        if (replay_bytes(e, "frag-limit", v, &x)) return MS_EXIT_USAGE;
        cfg->frag_limit_bytes = x;
        return 0;
    case 'd': return replay_addresses(e, v, &ra->o);
    case 'k': ra->o.check_every_op = 1; return 0;
    case 'g': ra->list_segments = 1; return 0;
    case 'h': ra->help = 1; return 0;
    }
    const char *p = alloc_config_problem(cfg);
    return p ? replay_bad_value(e, v, name, p) : 0;
}

int runs_replay_parse(int argc, char **argv, runs_replay_args *ra, ms_error *e)
{
    static const struct option opts[] = {
        {"trace", required_argument, 0, 't'}, {"allocator", required_argument, 0, 'a'},
        {"machine", required_argument, 0, 'm'}, {"capacity", required_argument, 0, 'c'},
        {"max-split-size", required_argument, 0, 's'}, {"roundup-power2", required_argument, 0, 'r'},
        {"frag-limit", required_argument, 0, 'f'}, {"check", no_argument, 0, 'k'},
        {"segments", no_argument, 0, 'g'}, {"addresses", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    memset(ra, 0, sizeof *ra);
    ms_error_clear(e);
    ra->machine = "h100-sxm";
    snprintf(ra->allocators, sizeof ra->allocators, "caching");
    alloc_config_default(&ra->cfg);
    replay_opts_default(&ra->o);
    optind = 0; /* a fresh parse each time (cli_parse_err says why) */
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
        if (c == '?' || c == ':') {
            ms_fail(e, MS_ERR_INVALID, "bad option '%s' (see --help)", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
        int rc = replay_apply(c, optarg, li >= 0 ? opts[li].name : "?", ra, e);
        if (rc) return rc;
        if (ra->help) return 0;
        li = -1;
    }
    if (!ra->trace || optind != argc) {
        ra->usage = 1;
        if (!ra->trace) ms_fail(e, MS_ERR_INVALID, "--trace FILE is required");
        else ms_fail(e, MS_ERR_INVALID, "unexpected argument '%s'", argv[optind]);
        return MS_EXIT_USAGE;
    }
    if (!ra->allocators[strspn(ra->allocators, ",")]) {
        ms_fail(e, MS_ERR_INVALID, "--allocator names no allocator (see --help)");
        return MS_EXIT_USAGE;
    }
    return 0;
}

ms_status runs_replay_one(const runs_replay_args *ra, const machine_t *m, const char *allocator,
                          replay_result *r, ms_error *err)
{
    replay_opts o = ra->o;
    o.allocator = allocator;
    o.machine = m;
    o.cfg = &ra->cfg;
    return replay_file(ra->trace, &o, r, err);
}

void runs_pytorch_meta(const char *path, uint64_t *peak, uint64_t *segs, uint64_t *alloc_peak)
{
    *peak = *segs = *alloc_peak = 0;
    trace_reader *r;
    if (trace_reader_open(path, &r, NULL) != MS_OK) return;
    for (size_t i = 0; i < trace_reader_meta_count(r); i++) {
        const char *k = trace_reader_meta_key(r, i), *v = trace_reader_meta_value(r, i);
        if (!strcmp(k, "pytorch.peak_reserved_bytes")) ms_parse_u64(v, peak);
        if (!strcmp(k, "pytorch.segments")) ms_parse_u64(v, segs);
        if (!strcmp(k, "pytorch.stats.allocated_bytes.all.peak")) ms_parse_u64(v, alloc_peak);
    }
    trace_reader_free(r);
}

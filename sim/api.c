/* api.c — the library API of api.h: copies a call's options into an argv, parses them as the
 * command does (sim/cli.c; replay's in sim/runs.c), runs the commands' own code (sim/runs.c)
 * and writes the results into a JSON document (format: docs/API.md). Used through
 * libmemsim.so by python/memsim/api.py, and by tests/test_api.c. */
#define _POSIX_C_SOURCE 200809L
#include "sim/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/runs.h"

/* The options as an argv the parser may permute and point into, argv[0] the command. */
typedef struct api_argv {
    int argc;
    char **argv;
} api_argv;

static void argv_free(api_argv *v)
{
    for (int i = 0; v->argv && i < v->argc; i++) free(v->argv[i]);
    free(v->argv);
    v->argv = NULL;
}

static ms_status argv_make(const char *cmd, const char *const *options, api_argv *v,
                           ms_error *err)
{
    size_t n = 0;
    while (options && options[n]) n++;
    if (n > 4096) return ms_fail(err, MS_ERR_INVALID, "more than 4096 option strings");
    v->argc = 0;
    v->argv = calloc(n + 2, sizeof *v->argv);
    if (!v->argv) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i <= n; i++) {
        v->argv[i] = strdup(i ? options[i - 1] : cmd);
        if (!v->argv[i]) {
            argv_free(v);
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        }
        v->argc++;
    }
    return MS_OK;
}

/* The document, written into memory. */
typedef struct api_doc {
    FILE *f;
    char *buf;
    size_t len;
} api_doc;

/* {"api_version":1,"command":CMD,"machine":{...} — the rest follows with a leading comma. */
static ms_status doc_open(api_doc *d, const char *cmd, const machine_t *m, ms_error *err)
{
    d->buf = NULL;
    d->len = 0;
    d->f = open_memstream(&d->buf, &d->len);
    if (!d->f) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    fprintf(d->f, "{\"api_version\":%d,\"command\":", API_VERSION);
    ms_json_str(d->f, cmd);
    fprintf(d->f, ",\"machine\":{\"name\":");
    ms_json_str(d->f, m->name);
    fprintf(d->f, ",\"device_bytes\":%llu,\"usable_bytes\":%llu,\"host_bytes\":%llu}",
            (unsigned long long)m->gpu_hbm_bytes, (unsigned long long)machine_usable_bytes(m),
            (unsigned long long)m->host_mem_bytes);
    return MS_OK;
}

static void doc_abort(api_doc *d)
{
    if (d->f) fclose(d->f);
    free(d->buf);
    d->f = NULL;
    d->buf = NULL;
}

/* Ends the document with the exit status the command would give, and hands it over. */
static ms_status doc_close(api_doc *d, int exit_status, char **json, ms_error *err)
{
    fprintf(d->f, ",\"exit_status\":%d}\n", exit_status);
    int bad = ferror(d->f);
    fclose(d->f);
    d->f = NULL;
    if (bad) {
        doc_abort(d);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory writing the results");
    }
    *json = d->buf;
    d->buf = NULL;
    return MS_OK;
}

static void doc_results(api_doc *d, const sim_result *rs, size_t n)
{
    fprintf(d->f, ",\"results\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) fputc(',', d->f);
        res_json_row(d->f, &rs[i]);
    }
    fputc(']', d->f);
}

/* The call's end: the message into the caller's buffer. */
static int finish(ms_status st, const ms_error *e, char *err, size_t err_len)
{
    if (err && err_len) {
        const char *m = st == MS_OK ? "" : e->msg[0] ? e->msg : ms_status_str(st);
        snprintf(err, err_len, "%s", m);
    }
    return (int)st;
}

/* What one call of plan, simulate or compare holds from its options to its document. */
typedef struct api_call {
    ms_error e;
    api_argv v;
    cli_args a;
    machine_profile *mp;
    runs_forms f;
    const trace_t *t;
} api_call;

static ms_status parse(const char *cmd, const char *const *options, unsigned groups,
                       api_argv *v, cli_args *a, ms_error *err);

/* Parses the call's options, loads the machine and, with workload, makes the workload in the
 * form its policy plans (compare makes each policy's form itself). */
static ms_status call_begin(api_call *c, const char *cmd, const char *const *options,
                            unsigned groups, int workload, char **json)
{
    memset(c, 0, sizeof *c);
    ms_error_clear(&c->e);
    *json = NULL;
    ms_status st = parse(cmd, options, groups, &c->v, &c->a, &c->e);
    if (st != MS_OK) return st;
    if (workload) return runs_setup(&c->a, &c->mp, &c->f, &c->t, &c->e);
    return machine_load_named(c->a.machine, &c->mp, &c->e);
}

static int call_end(api_call *c, ms_status st, char *err, size_t err_len)
{
    runs_forms_free(&c->f);
    machine_profile_free(c->mp);
    argv_free(&c->v);
    return finish(st, &c->e, err, err_len);
}

/* Parses the options of plan, simulate or compare; a refusal is MS_ERR_INVALID. */
static ms_status parse(const char *cmd, const char *const *options, unsigned groups,
                       api_argv *v, cli_args *a, ms_error *err)
{
    ms_status st = argv_make(cmd, options, v, err);
    if (st != MS_OK) return st;
    if (cli_parse_err(v->argc, v->argv, groups | CLI_LIBRARY, a, err)) return MS_ERR_INVALID;
    if (a->output && !strcmp(a->output, "-"))
        return ms_fail(err, MS_ERR_INVALID, "-o -: the library writes nothing to standard "
                       "output (the plan is in the results)");
    return MS_OK;
}

int api_simulate(const char *const *options, char **json, char *err, size_t err_len)
{
    api_call c;
    ms_status st = call_begin(&c, "simulate", options, CLI_GROUPS_SIMULATE, 1, json);
    sim_result r;
    if (st == MS_OK) {
        const char *name = c.a.pol.plan_path ? "plan" : c.a.pol.policy;
        st = runs_one(&c.a, c.t, &c.mp->m, name, NULL, 0, NULL, &r, &c.e);
    }
    if (st == MS_OK && c.a.csv_path) st = runs_write_csv(c.a.csv_path, &r, 1, &c.e);
    api_doc d;
    if (st == MS_OK) st = doc_open(&d, "simulate", &c.mp->m, &c.e);
    if (st == MS_OK) {
        doc_results(&d, &r, 1);
        st = doc_close(&d, MS_EXIT_OK, json, &c.e);
    }
    return call_end(&c, st, err, err_len);
}

/* The policies one after the other, their timeline into one file as the command writes it. */
static ms_status compare_run(const cli_args *a, const machine_t *m, runs_forms *f,
                             sim_result *rs, int *failed, ms_error *e)
{
    ms_out *tl = NULL;
    int tl_first = 1;
    if (a->out.timeline_path) {
        ms_status st = runs_timeline_open(a->out.timeline_path, &tl, e);
        if (st != MS_OK) return st;
    }
    *failed = runs_compare(a, m, f, tl, &tl_first, rs, 0);
    return tl ? runs_timeline_close(tl, e) : MS_OK;
}

int api_compare(const char *const *options, char **json, char *err, size_t err_len)
{
    api_call c;
    sim_result rs[CLI_MAX_POLICIES];
    int failed = 0;
    ms_status st = call_begin(&c, "compare", options, CLI_GROUPS_COMPARE, 0, json);
    if (st == MS_OK) st = compare_run(&c.a, &c.mp->m, &c.f, rs, &failed, &c.e);
    if (st == MS_OK && c.a.csv_path) st = runs_write_csv(c.a.csv_path, rs, c.a.n_policies, &c.e);
    api_doc d;
    if (st == MS_OK) st = doc_open(&d, "compare", &c.mp->m, &c.e);
    if (st == MS_OK) {
        doc_results(&d, rs, c.a.n_policies);
        st = doc_close(&d, failed, json, &c.e);
    }
    return call_end(&c, st, err, err_len);
}

/* ---- plan ---- */

static void plan_json(FILE *f, const plan_t *p, const char *text)
{
    fprintf(f, ",\"plan\":{\"policy\":");
    ms_json_str(f, p->policy);
    fprintf(f, ",\"allocator\":");
    ms_json_str(f, p->allocator);
    fprintf(f, ",\"default_decision\":");
    ms_json_str(f, plan_decision_name(p->default_decision));
    fprintf(f, ",\"arena_bytes\":%llu,\"knobs\":{", (unsigned long long)p->arena_bytes);
    for (size_t i = 0; i < p->n_knobs; i++) {
        if (i) fputc(',', f);
        ms_json_str(f, p->knobs[i].key);
        fputc(':', f);
        ms_json_str(f, p->knobs[i].value);
    }
    fprintf(f, "},\"tensors\":[");
    for (size_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *t = &p->tensors[i];
        fprintf(f, "%s{\"id\":%llu,\"decision\":", i ? "," : "", (unsigned long long)t->id);
        ms_json_str(f, plan_decision_name(t->decision));
        fprintf(f, ",\"alpha\":");
        ms_json_double(f, t->alpha);
        fputc('}', f);
    }
    fprintf(f, "],\"layers\":[");
    for (size_t i = 0; i < p->n_layers; i++) {
        const plan_layer *l = &p->layers[i];
        fprintf(f, "%s{\"layer\":%d,\"pmode\":", i ? "," : "", (int)l->layer);
        ms_json_str(f, plan_pmode_name(l->pmode));
        fprintf(f, ",\"grad_on_host\":%d}", l->grad_on_host);
    }
    fprintf(f, "],\"offsets\":[");
    for (size_t i = 0; i < p->n_offsets; i++)
        fprintf(f, "%s{\"id\":%llu,\"offset_bytes\":%llu}", i ? "," : "",
                (unsigned long long)p->offsets[i].id,
                (unsigned long long)p->offsets[i].offset_bytes);
    fprintf(f, "],\"text\":");
    ms_json_str(f, text);
    fputc('}', f);
}

/* The plan file's text, as `memsim plan` writes it. */
static ms_status plan_text(const plan_t *p, char **text, ms_error *e)
{
    size_t len = 0;
    *text = NULL;
    FILE *mf = open_memstream(text, &len);
    if (!mf) return ms_fail(e, MS_ERR_NOMEM, "out of memory");
    ms_status st = plan_write_fp(p, mf);
    fclose(mf);
    if (st != MS_OK) {
        free(*text);
        *text = NULL;
        return ms_fail(e, st, "cannot write the plan: %s", ms_status_str(st));
    }
    return MS_OK;
}

int api_plan(const char *const *options, char **json, char *err, size_t err_len)
{
    api_call c;
    plan_t *plan = NULL;
    char *text = NULL;
    ms_status st = call_begin(&c, "plan", options, CLI_GROUPS_PLAN, 1, json);
    if (st == MS_OK) st = runs_plan(&c.a.w, c.t, &c.mp->m, &c.a.pol, NULL, &plan, &c.e);
    if (st == MS_OK && c.a.output) st = plan_write(plan, c.a.output, &c.e);
    if (st == MS_OK) st = plan_text(plan, &text, &c.e);
    api_doc d;
    if (st == MS_OK) st = doc_open(&d, "plan", &c.mp->m, &c.e);
    if (st == MS_OK) {
        plan_json(d.f, plan, text);
        st = doc_close(&d, MS_EXIT_OK, json, &c.e);
    }
    free(text);
    plan_free(plan);
    return call_end(&c, st, err, err_len);
}

/* ---- replay ---- */

#define STAT(f) {#f, offsetof(alloc_stats, f)}
static const struct {
    const char *name;
    size_t off;
} stat_fields[] = {
    STAT(allocated_bytes), STAT(allocated_peak_bytes), STAT(requested_bytes),
    STAT(requested_peak_bytes), STAT(reserved_bytes), STAT(reserved_peak_bytes),
    STAT(active_bytes), STAT(active_peak_bytes), STAT(inactive_split_bytes),
    STAT(inactive_split_peak_bytes), STAT(num_allocs), STAT(num_frees), STAT(num_alloc_retries),
    STAT(num_ooms), STAT(num_segment_allocs), STAT(num_segment_frees), STAT(num_syncs),
    STAT(num_splits), STAT(num_stitches), STAT(num_new_chunks), STAT(num_stitch_frees),
    STAT(mapped_twice_bytes), STAT(num_maps), STAT(num_unmaps),
};

static void u64_field(FILE *f, const char *key, uint64_t v)
{
    fputc(',', f);
    ms_json_str(f, key);
    fprintf(f, ":%llu", (unsigned long long)v);
}

static void replay_oom_json(FILE *f, const replay_result *r)
{
    fprintf(f, ",\"oom\":");
    if (r->status != REPLAY_OOM) {
        fprintf(f, "null");
        return;
    }
    fprintf(f, "{\"index\":%llu,\"line\":%llu,\"id\":%llu,\"bytes\":%llu,\"stream\":%d,\"dump\":",
            (unsigned long long)r->oom_index, (unsigned long long)r->oom_line,
            (unsigned long long)r->oom_id, (unsigned long long)r->oom_bytes, r->oom_stream);
    ms_json_str(f, r->oom_dump ? r->oom_dump : "");
    fputc('}', f);
}

/* One allocator's replay; PyTorch's own numbers where the trace was imported from it. */
static void replay_json(FILE *f, const char *allocator, const char *path, const replay_result *r)
{
    fprintf(f, "{\"allocator\":");
    ms_json_str(f, allocator);
    fprintf(f, ",\"status\":");
    ms_json_str(f, replay_status_name(r->status));
    u64_field(f, "events", r->events);
    u64_field(f, "allocs", r->allocs);
    u64_field(f, "frees", r->frees);
    u64_field(f, "peak_allocated_bytes", r->peak_allocated_bytes);
    u64_field(f, "peak_reserved_bytes", r->peak_reserved_bytes);
    u64_field(f, "peak_active_bytes", r->peak_active_bytes);
    u64_field(f, "peak_requested_bytes", r->peak_requested_bytes);
    u64_field(f, "device_peak_bytes", r->device_peak_bytes);
    fprintf(f, ",\"alloc_time_us\":");
    ms_json_double(f, r->alloc_time_us);
    u64_field(f, "sync_calls", r->sync_calls);
    u64_field(f, "recorded_addresses", r->recorded_addresses);
    u64_field(f, "recorded_addresses_used", r->recorded_addresses_used);
    fprintf(f, ",\"segment_bytes\":[");
    for (size_t i = 0; i < r->n_segments; i++)
        fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)r->segment_bytes[i]);
    fprintf(f, "],\"stats\":{");
    for (size_t i = 0; i < sizeof stat_fields / sizeof *stat_fields; i++) {
        uint64_t x;
        memcpy(&x, (const char *)&r->stats + stat_fields[i].off, sizeof x);
        fprintf(f, "%s\"%s\":%llu", i ? "," : "", stat_fields[i].name, (unsigned long long)x);
    }
    fputc('}', f);
    replay_oom_json(f, r);
    uint64_t pt_peak, pt_segs, pt_alloc;
    runs_pytorch_meta(path, &pt_peak, &pt_segs, &pt_alloc);
    if (pt_peak || pt_alloc)
        fprintf(f, ",\"pytorch\":{\"peak_reserved_bytes\":%llu,\"segments\":%llu,"
                "\"peak_allocated_bytes\":%llu}}", (unsigned long long)pt_peak,
                (unsigned long long)pt_segs, (unsigned long long)pt_alloc);
    else fprintf(f, ",\"pytorch\":null}");
}

/* Every allocator of ra in turn into the document; an error stops the replays. */
static ms_status replay_all(const runs_replay_args *ra, const machine_t *m, api_doc *d,
                            int *exit_status, ms_error *e)
{
    char allocs[sizeof ra->allocators];
    memcpy(allocs, ra->allocators, sizeof allocs);
    fprintf(d->f, ",\"trace\":");
    ms_json_str(d->f, ra->trace);
    fprintf(d->f, ",\"results\":[");
    int first = 1;
    char *save = NULL;
    for (char *al = strtok_r(allocs, ",", &save); al; al = strtok_r(NULL, ",", &save)) {
        replay_result r;
        replay_result_init(&r);
        ms_status st = runs_replay_one(ra, m, al, &r, e);
        if (st != MS_OK) {
            replay_result_clear(&r);
            return st;
        }
        if (!first) fputc(',', d->f);
        first = 0;
        replay_json(d->f, al, ra->trace, &r);
        if (r.status == REPLAY_OOM) *exit_status = MS_EXIT_FAIL;
        replay_result_clear(&r);
    }
    fputc(']', d->f);
    return MS_OK;
}

int api_replay(const char *const *options, char **json, char *err, size_t err_len)
{
    ms_error e;
    ms_error_clear(&e);
    *json = NULL;
    api_argv v = {0, NULL};
    runs_replay_args ra;
    machine_profile *mp = NULL;
    ms_status st = argv_make("replay", options, &v, &e);
    if (st == MS_OK && runs_replay_parse(v.argc, v.argv, &ra, &e)) st = MS_ERR_INVALID;
    if (st == MS_OK && ra.help)
        st = ms_fail(&e, MS_ERR_INVALID, "--help: the library prints nothing (see memsim "
                     "replay --help)");
    if (st == MS_OK) st = machine_load_named(ra.machine, &mp, &e);
    api_doc d = {NULL, NULL, 0};
    if (st == MS_OK) st = doc_open(&d, "replay", &mp->m, &e);
    int exit_status = MS_EXIT_OK;
    if (st == MS_OK) st = replay_all(&ra, &mp->m, &d, &exit_status, &e);
    if (st == MS_OK) st = doc_close(&d, exit_status, json, &e);
    else doc_abort(&d);
    machine_profile_free(mp);
    argv_free(&v);
    return finish(st, &e, err, err_len);
}

void api_free(char *json) { free(json); }

int api_version(void) { return API_VERSION; }

const char *api_status_name(int status) { return ms_status_str((ms_status)status); }

int api_exit_code(int status) { return ms_exit_code((ms_status)status); }

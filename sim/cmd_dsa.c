/* cmd_dsa.c — `memsim dsa [options] FILE.csv...`: plans offsets for the buffers of each
 * instance file (id,lower,upper,size) with memory/dsa.c, minimizing the peak or deciding
 * whether they fit in --capacity; prints a line or a table row per file and optionally
 * writes the plan. experiments/dsa/run.sh runs it on the benchmark instances. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "memory/dsa.h"
#include "sim/cli.h"
#include "sim/cmd_dsa.h"
#include "sim/jobs.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memsim dsa [options] FILE.csv...\n"
            "Offline dynamic storage allocation: gives every buffer of each file an offset so\n"
            "that buffers live at the same time never overlap. Rows are id,lower,upper,size\n"
            "(lifetime [lower, upper), header optional, .gz read transparently). By default the\n"
            "peak (largest offset + size) is minimized; LOAD, the most bytes live at once, is\n"
            "its lower bound.\n\noptions:\n"
            "  --capacity BYTES   decide whether the buffers fit in BYTES instead (exit 0: they\n"
            "                     fit; exit 1: they do not, or undecided within the limit)\n"
            "  --time-limit S     search effort per file in seconds (default 10), every stage\n"
            "                     included; turned into a count of search steps, so results do\n"
            "                     not depend on the clock, except that a search still running\n"
            "                     at 1.5 x S (a slow or loaded machine) stops there\n"
            "  --gap PCT          minimize: stop once the peak is within PCT %% of the best lower\n"
            "                     bound (default 0: stop early only at a proven optimum)\n"
            "  --method M         greedy | bb | mip | auto (default auto: greedy portfolio, then\n"
            "                     branch-and-bound up to 2000 buffers, MIP up to 40)\n"
            "  -o, --output FILE  write the plan as id,lower,upper,size,offset (one input file)\n"
            "  --table            one Markdown table row per file: file, buffers, LOAD, peak,\n"
            "                     gap %% to LOAD, method, time s (reading + solving), status\n"
            "  -j, --jobs N       solve up to N files at once in N forked worker processes\n"
            "                     (default 1); the lines come in the order of the files and\n"
            "                     are those of -j 1 but for the times (and a search that a\n"
            "                     busier machine stops at its clock backstop)\n"
            "  --help             this text\n"
            "exit status: 0 done (fits), 1 does not fit or undecided, 2 usage, 3 bad input,\n"
            "4 cannot read or write a file, 5 internal error\n"
            "\nexamples (from the source directory, sim/ on the PATH):\n"
            "  memsim dsa --table experiments/dsa/instances/*.csv\n"
            "  memsim dsa experiments/dsa/instances/iopddl-S_1.csv\n");
}

typedef struct dsa_cli {
    dsa_options opt;
    const char *output;
    int table;
    int jobs;       /* -j / --jobs */
    char **files;   /* the instance files, for the jobs */
    int rc;         /* the jobs' worst exit status */
} dsa_cli;

static const char *verdict(const dsa_solution *s, uint64_t cap)
{
    if (!cap)
        return s->status != DSA_OK ? "best found, optimality not proven"
             : s->gap > 0 ? "within the gap asked for" : "optimal";
    switch (s->status) {
    case DSA_OK: return "fits";
    case DSA_INFEASIBLE: return "does not fit (proven)";
    case DSA_TIMEOUT: return "undecided within the limit";
    }
    return "?";
}

static const char *table_status(const dsa_solution *s, uint64_t cap)
{
    if (!cap) return s->status != DSA_OK ? "timeout" : s->gap > 0 ? "within gap" : "optimal";
    return s->status == DSA_OK ? "fits" : s->status == DSA_INFEASIBLE ? "infeasible" : "timeout";
}

static void print_result(const dsa_cli *c, const char *path, size_t n, const dsa_solution *s)
{
    uint64_t cap = c->opt.capacity_bytes;
    double gap_pct = s->load_bytes
        ? 100.0 * (double)(s->peak_bytes - s->load_bytes) / (double)s->load_bytes : 0;
    if (c->table) {
        printf("| %s | %zu | %llu | %llu | %.3f | %s | %.2f | %s |\n", path, n,
               (unsigned long long)s->load_bytes, (unsigned long long)s->peak_bytes, gap_pct,
               dsa_method_name(s->method), s->elapsed_s, table_status(s, cap));
        return;
    }
    printf("%s: %zu buffers, LOAD %llu, peak %llu (%.3f %% above LOAD, lower bound %llu), "
           "%s (%s), %.2f s: %s", path, n, (unsigned long long)s->load_bytes,
           (unsigned long long)s->peak_bytes, gap_pct,
           (unsigned long long)s->lower_bound_bytes, dsa_method_name(s->method), s->detail,
           s->elapsed_s, verdict(s, cap));
    if (cap) printf(" in %llu bytes", (unsigned long long)cap);
    printf("\n");
}

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int run_file(const dsa_cli *c, const char *path)
{
    double t0 = wall_s(); /* reported only: reading plus solving */
    dsa_instance *in;
    ms_error err;
    ms_status st = dsa_read_csv(path, &in, &err);
    if (st != MS_OK) {
        fprintf(stderr, "memsim dsa: %s\n", err.msg);
        return ms_exit_code(st);
    }
    dsa_solution s;
    st = dsa_solve(in, &c->opt, &s, &err);
    if (st == MS_OK && c->output) st = dsa_write_csv(in, s.offsets, c->output, &err);
    if (st == MS_OK) {
        s.elapsed_s = wall_s() - t0;
        print_result(c, path, dsa_instance_count(in), &s);
    }
    else fprintf(stderr, "memsim dsa: %s: %s\n", path, err.msg);
    int rc = st != MS_OK ? ms_exit_code(st)
           : c->opt.capacity_bytes && s.status != DSA_OK ? MS_EXIT_FAIL : MS_EXIT_OK;
    dsa_solution_free(&s);
    dsa_instance_free(in);
    return rc;
}

/* Parses the options into c; returns -1 to go on, else an exit code. */
static int parse(int argc, char **argv, dsa_cli *c)
{
    static const struct option opts[] = {
        {"capacity", required_argument, 0, 'c'}, {"time-limit", required_argument, 0, 't'},
        {"method", required_argument, 0, 'm'},   {"output", required_argument, 0, 'o'},
        {"table", no_argument, 0, 'T'},          {"gap", required_argument, 0, 'g'},
        {"jobs", required_argument, 0, 'j'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int ch, li = -1;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":o:j:h", opts, &li)) != -1) {
        uint64_t x;
        double d;
        dsa_method m;
        switch (ch) {
        case 'c':
            if (cli_parse_bytes("dsa", "capacity", optarg, &x)) return MS_EXIT_USAGE;
            if (x == 0 || x >= DSA_MAX_TOTAL_BYTES) goto badval;
            c->opt.capacity_bytes = x;
            break;
        case 't':
            if (!ms_parse_double(optarg, &d) || d < 0 || d > 1e6) goto badval;
            c->opt.time_limit_s = d;
            break;
        case 'm':
            if (!dsa_method_parse(optarg, &m)) goto badval;
            c->opt.methods = m;
            break;
        case 'g':
            if (!ms_parse_double(optarg, &d) || d < 0 || d > 1e5) goto badval;
            c->opt.rel_gap = d / 100;
            break;
        case 'o': c->output = optarg; break;
        case 'T': c->table = 1; break;
        case 'j':
            if (cli_parse_jobs("dsa", optarg, &c->jobs)) return MS_EXIT_USAGE;
            break;
        case 'h': usage(stdout); return MS_EXIT_OK;
        case ':':
            fprintf(stderr, "memsim dsa: %s needs a value (see --help)\n", argv[optind - 1]);
            return MS_EXIT_USAGE;
        default:
            fprintf(stderr, "memsim dsa: bad option '%s' (see --help)\n", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
    }
    if (optind == argc) {
        fprintf(stderr, "memsim dsa: no instance file given (see --help)\n");
        return MS_EXIT_USAGE;
    }
    if (c->output && argc - optind > 1) {
        fprintf(stderr, "memsim dsa: -o takes one instance file, got %d\n", argc - optind);
        return MS_EXIT_USAGE;
    }
    return -1;
badval:
    fprintf(stderr, "memsim dsa: bad value '%s' for --%s\n", optarg, li >= 0 ? opts[li].name : "?");
    return MS_EXIT_USAGE;
}

/* -j N: a job per file (sim/jobs.c); the parent prints the lines in the order of the files. */
static int file_job(size_t i, void *vc, FILE *data)
{
    (void)data;
    const dsa_cli *c = vc;
    return run_file(c, c->files[i]);
}

static void file_label(size_t i, void *vc, char *buf, size_t n)
{
    const dsa_cli *c = vc;
    snprintf(buf, n, "%s", c->files[i]);
}

static void file_done(size_t i, const jobs_result *r, void *vc)
{
    (void)i;
    dsa_cli *c = vc;
    fwrite(r->out, 1, r->out_len, stdout);
    fwrite(r->err, 1, r->err_len, stderr);
    if (r->status > c->rc) c->rc = r->status;
}

int cmd_dsa(int argc, char **argv)
{
    dsa_cli c = {.output = NULL, .table = 0, .jobs = 1};
    dsa_options_default(&c.opt);
    c.opt.clock_backstop = 1.5; /* the command honours its time limit on any machine */
    int rc = parse(argc, argv, &c);
    if (rc >= 0) return rc;
    if (c.table)
        printf("| file | buffers | LOAD | peak | gap %% | method | time s | status |\n"
               "|---|---:|---:|---:|---:|---|---:|---|\n");
    rc = MS_EXIT_OK;
    if (c.jobs > 1) {
        c.files = argv + optind;
        c.rc = MS_EXIT_OK;
        jobs_spec js = {"dsa", (size_t)(argc - optind), c.jobs, 0, file_job, file_done,
                        file_label, &c};
        int jr = jobs_run(&js);
        fflush(stdout);
        return jr ? jr : c.rc;
    }
    for (int i = optind; i < argc; i++) {
        int r = run_file(&c, argv[i]);
        if (r > rc) rc = r;
    }
    fflush(stdout);
    return rc;
}

/* cli.h — option parsing shared by the memsim subcommands that take a workload, a machine, a
 * policy and outputs (plan, simulate, compare, sweep, trace gen), and small printing helpers. Used
 * by sim/cmd_*.c and, with the same options, by the library API (sim/api.c through sim/runs.c). */
#ifndef MEMSIM_CLI_H
#define MEMSIM_CLI_H

#include <getopt.h>

#include "sim/pipeline.h"
#include "traces/machine.h"

/* Which option groups a command accepts. */
enum {
    CLI_WORKLOAD = 1 << 0,  /* --model --model-config --dims --seq --batch --tp --cp --dp --iters
                               --framework --precision --gen --trace */
    CLI_MACHINE = 1 << 1,   /* --machine */
    CLI_POLICY = 1 << 2,    /* --policy --plan --allocator --alpha --knob and allocator knobs */
    CLI_POLICIES = 1 << 3,  /* --policies A,B,C */
    CLI_OUTPUTS = 1 << 4,   /* --csv --timeline --memcsv --schedule --plot -o */
    CLI_SWEEP = 1 << 5,     /* --seqs LIST | --batches LIST, --longest, --step N */
    CLI_BREAKDOWN = 1 << 6, /* --breakdown (commands that print one result per policy) */
    CLI_JOBS = 1 << 7,      /* -j N / --jobs N (sim/jobs.h) */
    CLI_LIBRARY = 1 << 8,   /* parsed for the library API: no --help, --plot, --breakdown or
                               -j, which print or fork (sim/api.h) */
};

/* The groups of the commands the library API also runs (sim/api.c adds CLI_LIBRARY), named
 * once so that the command and the API take the same options. */
#define CLI_GROUPS_PLAN (CLI_WORKLOAD | CLI_MACHINE | CLI_POLICY | CLI_OUTPUTS)
#define CLI_GROUPS_SIMULATE (CLI_GROUPS_PLAN | CLI_BREAKDOWN)
#define CLI_GROUPS_COMPARE \
    (CLI_WORKLOAD | CLI_MACHINE | CLI_POLICIES | CLI_OUTPUTS | CLI_BREAKDOWN | CLI_JOBS)

#define CLI_MAX_POLICIES 16
#define CLI_MAX_POINTS 64

typedef struct cli_args {
    pipe_workload w;
    const char *machine;
    pipe_policy pol;
    char dims_model[96];
    char config_model[1100];  /* "config:" + the --model-config path */
    const char *policies[CLI_MAX_POLICIES];
    size_t n_policies;
    char policies_buf[512];
    pipe_outputs out;
    const char *csv_path;
    const char *plot_dir;
    const char *output;       /* -o */
    int quiet;
    int help;
    uint64_t points[CLI_MAX_POINTS]; /* --seqs or --batches: ascending, no repeats */
    size_t n_points;
    int points_are_batches;   /* 1: --batches (micro-batch sizes), 0: sequence lengths */
    int longest;              /* --longest */
    int no_reuse;             /* --no-reuse: every schedule lowered afresh */
    int breakdown;            /* --breakdown */
    int jobs;                 /* -j / --jobs (1: no child processes) */
    uint64_t step;            /* --step (0: the command's default) */
    int npos;                 /* positional arguments left in pos[] */
    char **pos;
} cli_args;

/* Parses argv for the groups in `groups`; prints "memsim CMD: ..." and returns
 * MS_EXIT_USAGE on a bad option; MS_EXIT_OK otherwise (a->help set for --help). */
int cli_parse(int argc, char **argv, unsigned groups, cli_args *a);
/* The same without printing: on a bad option the message (what cli_parse prints after
 * "memsim CMD: ") goes to e and the exit status is returned. argv[0] is the command's name;
 * argv is permuted as getopt does and a->pos, the knobs and the names point into it. */
int cli_parse_err(int argc, char **argv, unsigned groups, cli_args *a, ms_error *e);
/* A -j / --jobs value: a whole number from 1 to JOBS_MAX; else the message in e and
 * MS_EXIT_USAGE. */
int cli_check_jobs(ms_error *e, const char *v, int *out);
/* cli_check_jobs for a command with its own parser: on a bad value prints
 * "memsim CMD: --jobs 'V': ..." and returns MS_EXIT_USAGE; else 0 with *out set. */
int cli_parse_jobs(const char *cmd, const char *v, int *out);
/* --seqs / --batches LIST (option name opt) into a->points: counts with K/M suffixes, sorted;
 * an empty list, a repeated value (a typo) or more than CLI_MAX_POINTS: prints why, returns
 * MS_EXIT_USAGE. */
int cli_set_points(const char *cmd, const char *opt, const char *list, int batches, cli_args *a);
/* The option help text of the groups. */
void cli_print_options(FILE *f, unsigned groups);
/* Loads the machine profile (default a800-8gpu); prints the error. */
int cli_load_machine(const cli_args *a, const char *cmd, machine_profile **out);
/* The experiments/ folder: $MEMSIM_EXPERIMENTS, else the one beside the source tree's traces/. */
void cli_experiments_dir(char *buf, size_t n);
/* A byte-size option's value (ms_parse_bytes): 0, or prints the one message every byte-size
 * option gives ("memsim CMD: --OPT 'V': " CLI_BYTES_EXPECTED) and returns MS_EXIT_USAGE. */
#define CLI_BYTES_EXPECTED MS_BYTES_EXPECTED
int cli_parse_bytes(const char *cmd, const char *opt, const char *v, uint64_t *out);
/* Prints "memsim CMD: message" and returns the exit code for st. */
int cli_fail(const char *cmd, ms_status st, const ms_error *err);

#endif

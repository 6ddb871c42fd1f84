/* cli.c — the shared option parser of the memsim subcommands (see cli.h). getopt_long with
 * one table; every number is checked and a bad value names the option. */
#define _POSIX_C_SOURCE 200809L
#include "sim/cli.h"

#include "sim/auto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/exec.h"
#include "sim/jobs.h"

enum {
    O_MODEL = 1000, O_DIMS, O_SEQ, O_BATCH, O_TP, O_CP, O_DP, O_EP, O_ITERS, O_TRACE, O_MACHINE,
    O_POLICY, O_POLICIES, O_PLAN, O_ALLOCATOR, O_ALPHA, O_KNOB, O_MAXSPLIT, O_RP2, O_FRAG,
    O_STITCH, O_CSV, O_TIMELINE, O_MEMCSV, O_SCHEDULE, O_PLOT, O_QUIET, O_HELP, O_GEN,
    O_ISSUE_AHEAD, O_ISSUE_US, O_CKPT_HOST, O_SEQS, O_BATCHES, O_LONGEST, O_STEP, O_NO_REUSE, O_BREAKDOWN,
    O_MODEL_CONFIG, O_FRAMEWORK, O_PRECISION, O_JOBS
};

/* An option is offered to a command whose groups include `group` (0: every command) and none
 * of `not_with` (a sweep generates its own workloads, and writes no per-run outputs). */
static const struct {
    struct option o;
    unsigned group;
    const char *help;
    unsigned not_with;
} table[] = {
    {{"model", required_argument, 0, O_MODEL}, CLI_WORKLOAD, "NAME   model from `memsim list` (default gpt-7b)", 0},
    {{"model-config", required_argument, 0, O_MODEL_CONFIG}, CLI_WORKLOAD, "FILE   the model of a Hugging Face config.json (llama, mistral, qwen2, qwen3, phi3, mixtral, qwen2_moe, qwen3_moe, gemma, gpt2, gpt_neox, opt, bert; docs/GENERATOR.md)", 0},
    {{"dims", required_argument, 0, O_DIMS}, CLI_WORKLOAD, "L,H,A,F,V   a GPT decoder of these layers, hidden, heads, ffn, vocab: LayerNorm, GeLU MLP (f = F), biases, full multi-head attention, rotary positions, tied embeddings; LLaMA-style (RMSNorm, SwiGLU, GQA) or MoE models: --model-config", 0},
    {{"seq", required_argument, 0, O_SEQ}, CLI_WORKLOAD, "N   sequence length (64K, 1M accepted; default: the model's)", 0},
    {{"batch", required_argument, 0, O_BATCH}, CLI_WORKLOAD, "N   micro-batch size (default 1)", 0},
    {{"tp", required_argument, 0, O_TP}, CLI_WORKLOAD, "N   tensor-parallel degree (with sequence parallelism)", 0},
    {{"cp", required_argument, 0, O_CP}, CLI_WORKLOAD, "N   context-parallel degree", 0},
    {{"dp", required_argument, 0, O_DP}, CLI_WORKLOAD, "N   data-parallel degree", 0},
    {{"ep", required_argument, 0, O_EP}, CLI_WORKLOAD, "N   expert-parallel degree of a mixture-of-experts model: its experts sharded over N of the --dp ranks (N divides --dp and the experts; framework generic or megatron)", 0},
    {{"iters", required_argument, 0, O_ITERS}, CLI_WORKLOAD, "N   iterations to generate (default 2; the last is reported); a captured trace runs as N steps, its first rebuilt (docs/CAPTURE.md)", 0},
    {{"framework", required_argument, 0, O_FRAMEWORK}, CLI_WORKLOAD, "NAME   generic | megatron | hf: the training framework whose program is generated (as --gen framework=NAME)", 0},
    {{"precision", required_argument, 0, O_PRECISION}, CLI_WORKLOAD, "P   amp | bf16 | fp32: the training precision (as --gen precision=P)", 0},
    {{"gen", required_argument, 0, O_GEN}, CLI_WORKLOAD, "KEY=VALUE   a generator knob (repeatable), e.g. framework=megatron (docs/GENERATOR.md)", 0},
    {{"trace", required_argument, 0, O_TRACE}, CLI_WORKLOAD, "FILE   use this workload trace instead of generating one", CLI_SWEEP},
    {{"machine", required_argument, 0, O_MACHINE}, CLI_MACHINE, "NAME|FILE   machine profile (default a800-8gpu)", 0},
    {{"policy", required_argument, 0, O_POLICY}, CLI_POLICY, "NAME   memory policy (default keep-all)", 0},
    {{"plan", required_argument, 0, O_PLAN}, CLI_POLICY, "FILE   use this plan file instead of running a policy", 0},
    {{"allocator", required_argument, 0, O_ALLOCATOR}, CLI_POLICY | CLI_POLICIES, "NAME   caching | stitching | expandable | static", 0},
    {{"alpha", required_argument, 0, O_ALPHA}, CLI_POLICY | CLI_POLICIES, "X   swapped token fraction in [0,1] (policies that use it)", 0},
    {{"knob", required_argument, 0, O_KNOB}, CLI_POLICY | CLI_POLICIES, "KEY=VALUE   a policy knob (repeatable)", 0},
    {{"max-split-size", required_argument, 0, O_MAXSPLIT}, CLI_POLICY | CLI_POLICIES, "BYTES   caching allocator max_split_size (at least 20MiB, e.g. 512MiB)", 0},
    {{"roundup-power2", required_argument, 0, O_RP2}, CLI_POLICY | CLI_POLICIES, "N   caching allocator roundup_power2_divisions (0, 1 or a power of two up to 64)", 0},
    {{"frag-limit", required_argument, 0, O_FRAG}, CLI_POLICY | CLI_POLICIES, "BYTES   stitching allocator fragmentation limit", 0},
    {{"stitch-limit", required_argument, 0, O_STITCH}, CLI_POLICY | CLI_POLICIES, "BYTES   stitching allocator StitchFree threshold", 0},
    {{"issue-ahead", required_argument, 0, O_ISSUE_AHEAD}, CLI_POLICY | CLI_POLICIES, "N|unbounded   a host thread issues the program, at most N compute actions ahead of the GPU; allocator calls at issue time (default 0: at stream time)", 0},
    {{"issue-us", required_argument, 0, O_ISSUE_US}, CLI_POLICY | CLI_POLICIES, "US   host time per issued GPU action with --issue-ahead (default 3, assumed)", 0},
    {{"ckpt-host", required_argument, 0, O_CKPT_HOST}, CLI_POLICY | CLI_POLICIES, "profile|measured   checkpointing's host cost: the machine profile's host.ckpt_* (default) or, for a captured trace that has it, what the capture measured on the model's own block (docs/CAPTURE.md)", 0},
    {{"policies", required_argument, 0, O_POLICIES}, CLI_POLICIES, "A,B,C   policies to compare (default keep-all,full-recompute,full-swap)", 0},
    {{"seqs", required_argument, 0, O_SEQS}, CLI_SWEEP, "LIST   sequence lengths, e.g. 64K,128K,256K (default 8K,16K,...,1M)", 0},
    {{"batches", required_argument, 0, O_BATCHES}, CLI_SWEEP, "LIST   micro-batch sizes instead, e.g. 1,2,4,8 (at --seq)", 0},
    {{"longest", no_argument, 0, O_LONGEST}, CLI_SWEEP, "   also bisect each policy's longest sequence (largest batch) that fits, between its last fitting value and the next", 0},
    {{"step", required_argument, 0, O_STEP}, CLI_SWEEP, "N   resolution of --longest (default 1K x tp x cp; 1 with --batches)", 0},
    {{"no-reuse", no_argument, 0, O_NO_REUSE}, CLI_SWEEP, "   generate and lower every point afresh instead of re-binding the traces and schedules of an earlier point of the same structure (the outputs are the same; for checking)", 0},
    {{"csv", required_argument, 0, O_CSV}, CLI_OUTPUTS, "FILE   write the results CSV", 0},
    {{"timeline", required_argument, 0, O_TIMELINE}, CLI_OUTPUTS, "FILE   write a Chrome-trace / Perfetto JSON timeline", CLI_SWEEP},
    {{"memcsv", required_argument, 0, O_MEMCSV}, CLI_OUTPUTS, "FILE   write the memory time series CSV", CLI_SWEEP},
    {{"schedule", required_argument, 0, O_SCHEDULE}, CLI_OUTPUTS, "FILE   write the lowered schedule as text", CLI_SWEEP},
    {{"plot", required_argument, 0, O_PLOT}, CLI_OUTPUTS, "DIR   write figures (PNG and SVG, needs gnuplot) and their data", CLI_LIBRARY},
    {{"breakdown", no_argument, 0, O_BREAKDOWN}, CLI_BREAKDOWN, "   also print what device memory holds at the peak, by kind (parameters, gradients, optimizer states, activations, rounding buffers, chunks, staging buffers)", CLI_LIBRARY},
    {{"jobs", required_argument, 0, O_JOBS}, CLI_JOBS, "N   (-j N) run up to N jobs at once in N forked worker processes (default 1); the outputs are those of -j 1", CLI_LIBRARY},
    {{"quiet", no_argument, 0, O_QUIET}, CLI_OUTPUTS, "   print only errors", 0},
    {{"help", no_argument, 0, O_HELP}, 0, "   this help", CLI_LIBRARY},
};
#define NOPT (sizeof table / sizeof *table)

static int offered(size_t i, unsigned groups)
{
    return (!table[i].group || (table[i].group & groups)) && !(table[i].not_with & groups);
}

static int takes_o(unsigned groups) { return (groups & CLI_OUTPUTS) && !(groups & CLI_SWEEP); }

void cli_print_options(FILE *f, unsigned groups)
{
    for (size_t i = 0; i < NOPT; i++) {
        if (!offered(i, groups)) continue;
        const char *h = table[i].help;
        const char *sp = strstr(h, "   ");
        int argl = sp ? (int)(sp - h) : 0;
        char left[64];
        snprintf(left, sizeof left, "--%s%s%.*s", table[i].o.name, argl ? " " : "", argl, h);
        fprintf(f, "  %-28s %s\n", left, sp ? sp + 3 : h);
    }
    if (takes_o(groups)) fprintf(f, "  %-28s %s\n", "-o FILE", "output file (plan / trace)");
}

/* "unknown option", with the closest option this command offers. */
static void unknown_option(ms_error *e, const char *cmd, const char *arg, unsigned groups)
{
    const char *names[NOPT];
    size_t n = 0;
    for (size_t i = 0; i < NOPT; i++)
        if (offered(i, groups)) names[n++] = table[i].o.name;
    const char *given = arg;
    while (*given == '-') given++;
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)strcspn(given, "="), given);
    const char *near = ms_closest(key, names, n);
    char see[96] = "see --help";
    if (groups & CLI_LIBRARY) /* which takes no --help */
        snprintf(see, sizeof see, "memsim %s --help lists the options", cmd);
    ms_fail(e, MS_ERR_INVALID, "unknown option '%s'%s%s%s (%s)", arg,
            near ? "; did you mean '--" : "", near ? near : "", near ? "'?" : "", see);
}

/* Every parse error is "--OPT 'VALUE': why" in e; the command prints it after "memsim CMD: ". */
static int bad(ms_error *e, const char *opt, const char *val, const char *what)
{
    ms_fail(e, MS_ERR_INVALID, "--%s '%s': %s", opt, val, what);
    return MS_EXIT_USAGE;
}

static int parse_int(ms_error *e, const char *opt, const char *v, int *out)
{
    uint64_t x;
    if (!ms_parse_u64(v, &x) || x == 0 || x > 1u << 20)
        return bad(e, opt, v, "expected a whole number from 1 to 1048576");
    *out = (int)x;
    return 0;
}

static int split_policies(ms_error *e, const char *v, cli_args *a)
{
    snprintf(a->policies_buf, sizeof a->policies_buf, "%s", v);
    a->n_policies = 0;
    for (char *p = strtok(a->policies_buf, ","); p; p = strtok(NULL, ",")) {
        if (a->n_policies == CLI_MAX_POLICIES) return bad(e, "policies", v, "too many");
        a->policies[a->n_policies++] = p;
    }
    return a->n_policies ? 0 : bad(e, "policies", v, "empty list");
}

static int set_points(ms_error *e, const char *opt, const char *v, int batches, cli_args *a)
{
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", v) >= (int)sizeof buf)
        return bad(e, opt, v, "the list is longer than 1023 characters");
    a->n_points = 0;
    a->points_are_batches = batches;
    /* strtok would skip an empty item ("1K,,2K"): walk the commas by hand */
    for (char *p = buf, *end; p; p = end ? end + 1 : NULL) {
        end = strchr(p, ',');
        if (end) *end = '\0';
        uint64_t x;
        if (!*p) return bad(e, opt, v, "an empty item in the list");
        if (a->n_points == CLI_MAX_POINTS) return bad(e, opt, v, "at most 64 values");
        if (!ms_parse_count(p, &x) || x == 0)
            return bad(e, opt, v, batches ? "expected positive counts such as 1,2,4,8"
                                            : "expected positive counts such as 64K,128K");
        a->points[a->n_points++] = x;
    }
    qsort(a->points, a->n_points, sizeof *a->points, ms_cmp_u64);
    for (size_t i = 1; i < a->n_points; i++)
        if (a->points[i] == a->points[i - 1]) return bad(e, opt, v, "a value appears twice");
    return 0;
}

int cli_set_points(const char *cmd, const char *opt, const char *list, int batches, cli_args *a)
{
    ms_error e;
    int rc = set_points(&e, opt, list, batches, a);
    if (rc) fprintf(stderr, "memsim %s: %s\n", cmd, e.msg);
    return rc;
}

static int add_knob(ms_error *e, char *v, cli_args *a)
{
    char *eq = strchr(v, '=');
    if (!eq || eq == v) return bad(e, "knob", v, "expected KEY=VALUE");
    if (a->pol.n_knobs == PIPE_MAX_KNOBS) return bad(e, "knob", v, "too many knobs");
    *eq = '\0';
    a->pol.knobs[a->pol.n_knobs].key = v;
    a->pol.knobs[a->pol.n_knobs].value = eq + 1;
    a->pol.n_knobs++;
    return 0;
}

static int add_gen_knob(ms_error *e, char *v, cli_args *a)
{
    char *eq = strchr(v, '=');
    if (!eq || eq == v) return bad(e, "gen", v, "expected KEY=VALUE");
    if (a->w.n_gen_knobs == PIPE_MAX_KNOBS) return bad(e, "gen", v, "too many knobs");
    *eq = '\0';
    a->w.gen_knobs[a->w.n_gen_knobs].key = v;
    a->w.gen_knobs[a->w.n_gen_knobs].value = eq + 1;
    a->w.n_gen_knobs++;
    return 0;
}

/* --framework / --precision: a checked value, passed on as the generator knob it names. */
static int add_named_gen_knob(ms_error *e, const char *key, const char *v,
                              const char *const *accepted, const char *list, cli_args *a)
{
    size_t i = 0;
    while (accepted[i] && strcmp(accepted[i], v)) i++;
    if (!accepted[i]) {
        char why[96];
        snprintf(why, sizeof why, "expected one of %s", list);
        return bad(e, key, v, why);
    }
    if (a->w.n_gen_knobs == PIPE_MAX_KNOBS) return bad(e, key, v, "too many generator knobs");
    a->w.gen_knobs[a->w.n_gen_knobs].key = key;
    a->w.gen_knobs[a->w.n_gen_knobs].value = v;
    a->w.n_gen_knobs++;
    return 0;
}

static const char *const FRAMEWORKS[] = {"generic", "megatron", "hf", NULL};
static const char *const PRECISIONS[] = {"amp", "bf16", "fp32", NULL};

static int parse_bytes(ms_error *e, const char *opt, const char *v, uint64_t *out)
{
    return ms_parse_bytes(v, out) ? 0 : bad(e, opt, v, CLI_BYTES_EXPECTED);
}

int cli_parse_bytes(const char *cmd, const char *opt, const char *v, uint64_t *out)
{
    ms_error e;
    int rc = parse_bytes(&e, opt, v, out);
    if (rc) fprintf(stderr, "memsim %s: %s\n", cmd, e.msg);
    return rc;
}

static int parse_bytes_opt(ms_error *e, const char *opt, const char *v, uint64_t *out)
{
    if (!strcmp(v, "unlimited")) {
        *out = UINT64_MAX;
        return 0;
    }
    return parse_bytes(e, opt, v, out);
}

static int apply(int c, char *v, ms_error *e, cli_args *a)
{
    uint64_t x;
    const char *why;
    double d;
    switch (c) {
    case O_MODEL: a->w.model = v; return 0;
    case O_DIMS:
        snprintf(a->dims_model, sizeof a->dims_model, "dims:%s", v);
        a->w.model = a->dims_model;
        return 0;
    case O_MODEL_CONFIG:
        if (snprintf(a->config_model, sizeof a->config_model, "config:%s", v) >=
            (int)sizeof a->config_model)
            return bad(e, "model-config", v, "the path is too long");
        a->w.model = a->config_model;
        return 0;
    case O_FRAMEWORK:
        return add_named_gen_knob(e, "framework", v, FRAMEWORKS, "generic, megatron, hf", a);
    case O_PRECISION:
        return add_named_gen_knob(e, "precision", v, PRECISIONS, "amp, bf16, fp32", a);
    case O_SEQ:
        if (!ms_parse_count(v, &x) || x == 0) return bad(e, "seq", v, "expected a positive count");
        a->w.seq = x;
        return 0;
    case O_BATCH:
        if (!ms_parse_u64(v, &x) || x == 0) return bad(e, "batch", v, "expected a positive number");
        a->w.batch = x;
        return 0;
    case O_TP: return parse_int(e, "tp", v, &a->w.tp);
    case O_CP: return parse_int(e, "cp", v, &a->w.cp);
    case O_DP: return parse_int(e, "dp", v, &a->w.dp);
    case O_EP: return parse_int(e, "ep", v, &a->w.ep);
    case O_ITERS: return parse_int(e, "iters", v, &a->w.iterations);
    case O_TRACE: a->w.trace_path = v; return 0;
    case O_MACHINE: a->machine = v; return 0;
    case O_POLICY: a->pol.policy = v; return 0;
    case O_PLAN: a->pol.plan_path = v; return 0;
    case O_ALLOCATOR: a->pol.allocator = v; return 0;
    case O_ALPHA:
        if (!ms_parse_double(v, &d) || d < 0 || d > 1) return bad(e, "alpha", v, "expected a number in [0, 1]");
        a->pol.alpha = d;
        return 0;
    case O_KNOB: return add_knob(e, v, a);
    case O_GEN: return add_gen_knob(e, v, a);
    case O_MAXSPLIT:
        a->pol.alloc_cfg_set = 1;
        if (parse_bytes_opt(e, "max-split-size", v, &a->pol.alloc_cfg.max_split_size_bytes))
            return MS_EXIT_USAGE;
        why = alloc_config_problem(&a->pol.alloc_cfg);
        return why ? bad(e, "max-split-size", v, why) : 0;
    case O_RP2:
        if (!ms_parse_u64(v, &x) || x > 64) return bad(e, "roundup-power2", v, "expected 0..64");
        a->pol.alloc_cfg.roundup_power2_divisions = (unsigned)x;
        if ((why = alloc_config_problem(&a->pol.alloc_cfg)))
            return bad(e, "roundup-power2", v, why);
        a->pol.alloc_cfg_set = 1;
        return 0;
    case O_FRAG:
        a->pol.alloc_cfg_set = 1;
        return parse_bytes_opt(e, "frag-limit", v, &a->pol.alloc_cfg.frag_limit_bytes);
    case O_STITCH:
        a->pol.alloc_cfg_set = 1;
        return parse_bytes_opt(e, "stitch-limit", v, &a->pol.alloc_cfg.stitch_limit_bytes);
    case O_ISSUE_AHEAD:
        if (!strcmp(v, "unbounded")) {
            a->pol.issue_ahead = SIM_ISSUE_UNBOUNDED;
            return 0;
        }
        if (!ms_parse_u64(v, &x) || x > 1u << 20)
            return bad(e, "issue-ahead", v, "expected 0 to 1048576 or 'unbounded'");
        a->pol.issue_ahead = (int)x;
        return 0;
    case O_ISSUE_US:
        if (!ms_parse_double(v, &d) || !(d >= 0) || d > 1e9)
            return bad(e, "issue-us", v, "expected microseconds, 0 or more");
        a->pol.issue_us = d;
        return 0;
    case O_CKPT_HOST:
        if (strcmp(v, "profile") && strcmp(v, "measured"))
            return bad(e, "ckpt-host", v, "expected 'profile' or 'measured'");
        a->pol.ckpt_host_measured = !strcmp(v, "measured");
        return 0;
    case O_POLICIES: return split_policies(e, v, a);
    case O_SEQS:
    case O_BATCHES:
        if (a->n_points) return bad(e, c == O_SEQS ? "seqs" : "batches", v,
                                    "give one of --seqs and --batches, once");
        return set_points(e, c == O_SEQS ? "seqs" : "batches", v, c == O_BATCHES, a);
    case O_LONGEST: a->longest = 1; return 0;
    case O_NO_REUSE: a->no_reuse = 1; return 0;
    case O_BREAKDOWN: a->breakdown = 1; return 0;
    case O_STEP:
        if (!ms_parse_count(v, &x) || x == 0) return bad(e, "step", v, "expected a positive count");
        a->step = x;
        return 0;
    case O_CSV: a->csv_path = v; return 0;
    case O_TIMELINE: a->out.timeline_path = v; return 0;
    case O_MEMCSV: a->out.memcsv_path = v; return 0;
    case O_SCHEDULE: a->out.schedule_path = v; return 0;
    case O_PLOT: a->plot_dir = v; return 0;
    case O_QUIET: a->quiet = 1; return 0;
    case 'o': a->output = v; return 0;
    case 'j':
    case O_JOBS: return cli_check_jobs(e, v, &a->jobs);
    case O_HELP: a->help = 1; return 0;
    }
    return MS_EXIT_USAGE;
}

/* names[0..n) with "auto" (sim/auto.h) replaced by every registered policy, which it
 * searches: its knobs and alpha go to all of them. Returns the count written to out. */
static size_t auto_expand(const char *const *names, size_t n, const char **out, size_t cap)
{
    size_t m = 0, nr;
    const pol_policy *const *reg = pol_registry(&nr);
    for (size_t i = 0; i < n; i++) {
        if (!auto_is(names[i])) {
            if (m < cap) out[m++] = names[i];
            continue;
        }
        for (size_t j = 0; j < nr && m < cap; j++) out[m++] = reg[j]->name;
    }
    return m;
}

/* What the options cannot say alone: no stray arguments, knobs only for a policy that reads
 * them (a typo would otherwise change nothing and say nothing). */
static int check_args(ms_error *e, unsigned groups, const cli_args *a)
{
    if (a->help) return MS_EXIT_OK;
    if (a->npos > 0) {
        ms_fail(e, MS_ERR_INVALID, "unexpected argument '%s' (options only; see --help)",
                a->pos[0]);
        return MS_EXIT_USAGE;
    }
    /* Megatron's rule: the experts are sharded over data-parallel ranks */
    int ep = a->w.ep ? a->w.ep : 1, dp = a->w.dp ? a->w.dp : 1;
    if (!a->w.trace_path && dp % ep) {
        ms_fail(e, MS_ERR_INVALID, "--ep %d: must divide --dp %d (the experts are sharded over "
                "data-parallel ranks)", ep, dp);
        return MS_EXIT_USAGE;
    }
    if (a->pol.plan_path && (a->pol.n_knobs || a->pol.alpha >= 0)) {
        ms_fail(e, MS_ERR_INVALID, "--%s acts on a policy's planner; with --plan FILE edit the "
                "plan's lines instead", a->pol.n_knobs ? "knob" : "alpha");
        return MS_EXIT_USAGE;
    }
    if (!(groups & (CLI_POLICY | CLI_POLICIES)) || a->pol.plan_path) return MS_EXIT_OK;
    /* every policy name, the alpha override and every knob key, before anything runs */
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = a->pol.knobs;
    o.n_knobs = a->pol.n_knobs;
    o.alpha = a->pol.alpha;
    const char *one = a->pol.policy;
    const char *const *given = (groups & CLI_POLICIES) ? (const char *const *)a->policies : &one;
    size_t ng = (groups & CLI_POLICIES) ? a->n_policies : 1;
    const char *names[CLI_MAX_POLICIES + 64];
    size_t n = auto_expand(given, ng, names, sizeof names / sizeof *names);
    ms_error_clear(e);
    ms_status st = pol_names_check(names, n, e);
    if (st == MS_OK) st = pol_alpha_check(names, n, &o, e);
    if (st == MS_OK) st = pol_knobs_check(names, n, &o, e);
    const pol_knob *size = st == MS_OK ? pol_knob_bad_size(names, n, &o) : NULL;
    if (size) {
        ms_fail(e, MS_ERR_INVALID, "--knob '%s=%s': %s", size->key, size->value,
                CLI_BYTES_EXPECTED);
        return MS_EXIT_USAGE;
    }
    if (st == MS_OK) return MS_EXIT_OK;
    if (!e->msg[0]) ms_fail(e, st, "%s", ms_status_str(st));
    return ms_exit_code(st);
}

int cli_parse_err(int argc, char **argv, unsigned groups, cli_args *a, ms_error *e)
{
    memset(a, 0, sizeof *a);
    ms_error_clear(e);
    pipe_workload_default(&a->w);
    pipe_policy_default(&a->pol);
    a->machine = "a800-8gpu";
    a->jobs = 1;
    struct option opts[NOPT + 1];
    size_t n = 0;
    for (size_t i = 0; i < NOPT; i++)
        if (offered(i, groups)) opts[n++] = table[i].o;
    memset(&opts[n], 0, sizeof opts[n]);
    /* 0, not 1: glibc then starts afresh, as a library parsing many option lists in one
     * process must (1 keeps the state of an earlier parse that stopped midway) */
    optind = 0;
    opterr = 0;
    int c;
    const char *shortopts = takes_o(groups) ? (groups & CLI_JOBS ? ":o:j:h" : ":o:h")
                            : (groups & CLI_JOBS ? ":j:h" : ":h");
    if (groups & CLI_LIBRARY) shortopts = takes_o(groups) ? ":o:" : ":";
    while ((c = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
        if (c == 'h') c = O_HELP;
        if (c == '?') {
            unknown_option(e, argv[0], argv[optind - 1], groups);
            return MS_EXIT_USAGE;
        }
        if (c == ':') {
            ms_fail(e, MS_ERR_INVALID, "option '%s' needs a value", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
        int rc = apply(c, optarg, e, a);
        if (rc) return rc;
    }
    if ((groups & CLI_POLICIES) && a->n_policies == 0)
        split_policies(e, "keep-all,full-recompute,full-swap", a);
    a->npos = argc - optind;
    a->pos = argv + optind;
    return check_args(e, groups, a);
}

int cli_parse(int argc, char **argv, unsigned groups, cli_args *a)
{
    ms_error e;
    int rc = cli_parse_err(argc, argv, groups, a, &e);
    if (rc) fprintf(stderr, "memsim %s: %s\n", argv[0], e.msg);
    return rc;
}

int cli_check_jobs(ms_error *e, const char *v, int *out)
{
    uint64_t x;
    if (!v || !ms_parse_u64(v, &x) || x == 0 || x > JOBS_MAX) {
        ms_fail(e, MS_ERR_INVALID, "--jobs '%s': expected a whole number from 1 to %d", v ? v : "",
                JOBS_MAX);
        return MS_EXIT_USAGE;
    }
    *out = (int)x;
    return 0;
}

int cli_parse_jobs(const char *cmd, const char *v, int *out)
{
    ms_error e;
    int rc = cli_check_jobs(&e, v, out);
    if (rc) fprintf(stderr, "memsim %s: %s\n", cmd, e.msg);
    return rc;
}

int cli_load_machine(const cli_args *a, const char *cmd, machine_profile **out)
{
    ms_error err;
    ms_status st = machine_load_named(a->machine, out, &err);
    if (st != MS_OK) return cli_fail(cmd, st, &err);
    return MS_EXIT_OK;
}

int cli_fail(const char *cmd, ms_status st, const ms_error *err)
{
    fprintf(stderr, "memsim %s: %s\n", cmd, err && err->msg[0] ? err->msg : ms_status_str(st));
    return ms_exit_code(st);
}

#ifndef MEMSIM_SRC_DATADIR
#define MEMSIM_SRC_DATADIR "traces"
#endif

void cli_experiments_dir(char *buf, size_t n)
{
    const char *env = getenv("MEMSIM_EXPERIMENTS");
    if (env && *env) snprintf(buf, n, "%s", env);
    else snprintf(buf, n, "%s/../experiments", MEMSIM_SRC_DATADIR);
}

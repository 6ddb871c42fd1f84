/* cmd_trace.c — `memsim trace gen | check | stats | import | convert`: make, validate,
 * summarize, import and convert workload traces (text and binary forms). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "sim/cli.h"
#include "sim/cmds.h"
#include "traces/import_pytorch.h"

static void trace_usage(FILE *f)
{
    fprintf(f, "usage: memsim trace gen [options] [-o FILE]   generate a workload trace\n"
               "       memsim trace check FILE...             validate; every problem as FILE:LINE: message\n"
               "       memsim trace stats FILE...             summary statistics\n"
               "       memsim trace import --from pytorch-snapshot IN -o OUT\n"
               "                                              convert a PyTorch memory snapshot\n"
               "       memsim trace convert IN OUT --to binary|text\n"
               "                                              rewrite a trace in the other form\n"
               "Run 'memsim trace SUBCOMMAND --help' for options. Traces ending in .gz are\n"
               "read and written compressed; every command reading a trace takes either form,\n"
               "told by the file's first bytes. The formats are in traces/FORMAT.md.\n"
               "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim trace gen --model gpt2-1b --seq 1024 --batch 8 -o w.trace.gz\n"
               "  memsim trace check w.trace.gz\n"
               "  memsim trace import --from pytorch-snapshot tests/fixtures/synthetic_snapshot.json -o real.trace\n");
}

static int trace_gen(int argc, char **argv)
{
    const unsigned g = CLI_WORKLOAD | CLI_MACHINE | CLI_OUTPUTS;
    cli_args a;
    int rc = cli_parse(argc, argv, g, &a);
    if (rc) return rc;
    if (a.help) {
        fprintf(stdout, "usage: memsim trace gen [options] [-o FILE]\n"
                        "Generates one rank's workload trace for a GPT-style model (op times from\n"
                        "the machine's roofline model). Default output: standard output.\n\n"
                        "options:\n");
        cli_print_options(stdout, CLI_WORKLOAD | CLI_MACHINE);
        printf("  %-28s %s\n", "-o FILE", "output trace (.gz compresses)");
        printf("\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim trace gen --model gpt2-1b --seq 1024 --batch 8 -o w.trace.gz\n"
               "  memsim trace gen --model-config experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp --seq 2048 --batch 4 --machine h200-sxm -o llama.trace.gz\n"
               "  memsim trace gen --dims 4,1024,16,4096,50257 --seq 8K --tp 2 -o tp2.trace\n");
        return MS_EXIT_OK;
    }
    if (a.w.trace_path) {
        fprintf(stderr, "memsim trace gen: --trace makes no sense here\n");
        return MS_EXIT_USAGE;
    }
    machine_profile *mp;
    if ((rc = cli_load_machine(&a, "trace gen", &mp))) return rc;
    ms_error err;
    trace_t *t;
    ms_status st = pipe_trace(&a.w, &mp->m, &t, &err);
    if (st == MS_OK) {
        st = trace_write(t, a.output ? a.output : "-", &err);
        trace_free(t);
    }
    machine_profile_free(mp);
    return st == MS_OK ? MS_EXIT_OK : cli_fail("trace gen", st, &err);
}

static int trace_check(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: memsim trace check FILE...\n"
                "Reads each trace to the end and prints every problem as FILE:LINE: message\n"
                "(at most 1000 per file). Exit 0 if all are valid, 1 if any has problems, 3 if\n"
                "one cannot be parsed at all, 4 if one cannot be read.\n"
                "\nexamples (from the source directory, sim/ on the PATH):\n"
                "  memsim trace check experiments/validate/traces/h100-sxm/real-8K.trace.gz\n"
                "  memsim trace check w.trace.gz real.trace\n");
        return argc < 2 ? MS_EXIT_USAGE : MS_EXIT_OK;
    }
    int rc = MS_EXIT_OK;
    for (int i = 1; i < argc; i++) {
        trace_check_report rep;
        ms_error err;
        ms_status st = trace_check_file(argv[i], stderr, 1000, &rep, &err);
        if (st != MS_OK) {
            fprintf(stderr, "%s\n", err.msg);
            int c = ms_exit_code(st);
            if (c > rc) rc = c;
            continue;
        }
        char pk[32];
        printf("%s: %llu records (%llu alloc, %llu free, %llu op, %llu mark), %llu problem%s, "
               "peak live %s, %llu live at end\n",
               argv[i], (unsigned long long)rep.records, (unsigned long long)rep.allocs,
               (unsigned long long)rep.frees, (unsigned long long)rep.ops,
               (unsigned long long)rep.marks, (unsigned long long)rep.errors,
               rep.errors == 1 ? "" : "s", ms_fmt_bytes(rep.peak_live_bytes, pk, sizeof pk),
               (unsigned long long)rep.live_at_end);
        if (rep.errors && rc == MS_EXIT_OK) rc = MS_EXIT_FAIL;
    }
    return rc;
}

static int trace_stats_cmd(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: memsim trace stats FILE...\n"
                                            "Prints record counts, bytes by tensor class, peak live bytes,\n"
                                            "total FLOPs and op time of each trace.\n"
                                            "\nexamples (from the source directory, sim/ on the PATH):\n"
                                            "  memsim trace stats experiments/validate/traces/h100-sxm/real-8K.trace.gz\n"
                                            "  memsim trace stats w.trace.gz\n");
        return argc < 2 ? MS_EXIT_USAGE : MS_EXIT_OK;
    }
    for (int i = 1; i < argc; i++) {
        trace_stats st;
        ms_error err;
        ms_status s = trace_stats_file(argv[i], &st, &err);
        if (s != MS_OK) return cli_fail("trace stats", s, &err);
        char b[32];
        printf("%s\n  records      %llu (alloc %llu, free %llu, op %llu, mark %llu)\n"
               "  iterations   %llu\n  peak live    %s\n  FLOPs        %.4g\n"
               "  op time      %.6g s (sum of known durations)\n  bytes allocated by class:\n",
               argv[i], (unsigned long long)st.records, (unsigned long long)st.allocs,
               (unsigned long long)st.frees, (unsigned long long)st.ops,
               (unsigned long long)st.marks, (unsigned long long)st.iterations,
               ms_fmt_bytes(st.peak_live_bytes, b, sizeof b), st.total_flops,
               st.total_dur_us / 1e6);
        for (int c = 0; c < TC_COUNT; c++)
            if (st.bytes_by_class[c])
                printf("    %-10s %s\n", trace_class_name((trace_class)c),
                       ms_fmt_bytes(st.bytes_by_class[c], b, sizeof b));
    }
    return MS_EXIT_OK;
}

static void import_usage(FILE *f)
{
    fprintf(f, "usage: memsim trace import --from pytorch-snapshot [--device N] IN.json[.gz] -o OUT\n"
               "Converts the JSON form of torch.cuda.memory._snapshot() (or the wrapper written by\n"
               "traces/capture/record_snapshot.py) into a workload trace of alloc/free records,\n"
               "with PyTorch's own segment sizes and peak reserved bytes as meta lines.\n"
               "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim trace import --from pytorch-snapshot tests/fixtures/synthetic_snapshot.json -o real.trace\n"
               "  memsim replay --trace real.trace --allocator caching,expandable\n");
}

static int trace_import(int argc, char **argv)
{
    static const struct option opts[] = {{"from", required_argument, 0, 'f'},
                                         {"device", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *from = NULL, *out = NULL;
    imp_options io;
    imp_options_init(&io);
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        uint64_t x;
        switch (c) {
        case 'f': from = optarg; break;
        case 'o': out = optarg; break;
        case 'd':
            if (!ms_parse_u64(optarg, &x) || x > 1024) {
                fprintf(stderr, "memsim trace import: --device '%s': expected 0..1024\n", optarg);
                return MS_EXIT_USAGE;
            }
            io.device = (int)x;
            break;
        case 'h': import_usage(stdout); return MS_EXIT_OK;
        default:
            fprintf(stderr, "memsim trace import: bad option '%s'\n", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
    }
    if (!from || strcmp(from, "pytorch-snapshot") || optind != argc - 1 || !out) {
        import_usage(stderr);
        return MS_EXIT_USAGE;
    }
    trace_t *t;
    imp_result res;
    ms_error err;
    ms_status st = imp_pytorch_load(argv[optind], &io, &t, &res, &err);
    if (st != MS_OK) return cli_fail("trace import", st, &err);
    st = trace_write(t, out, &err);
    trace_free(t);
    if (st == MS_OK)
        fprintf(stderr, "memsim trace import: %llu allocs, %llu frees, %llu segments, peak reserved "
                        "%llu bytes; %llu frees of unknown addresses dropped\n",
                (unsigned long long)res.allocs, (unsigned long long)res.frees,
                (unsigned long long)res.segments, (unsigned long long)res.peak_reserved_bytes,
                (unsigned long long)res.unknown_frees);
    imp_result_release(&res);
    return st == MS_OK ? MS_EXIT_OK : cli_fail("trace import", st, &err);
}

static void convert_usage(FILE *f)
{
    fprintf(f, "usage: memsim trace convert IN OUT --to binary|text\n"
               "Rewrites a workload trace of either form (told by its first bytes) in the form\n"
               "asked for, streaming (memory bounded whatever the size) and checking it as\n"
               "'trace stats' does: the first problem stops it (exit 3) and OUT is not\n"
               "written. Text written from a binary trace is the text it was made from when\n"
               "that text is in the writer's spelling (what trace gen and import write). OUT\n"
               "ending in .gz is compressed; '-' is standard output.\n"
               "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim trace convert big.trace big.trace.bin --to binary\n"
               "  memsim replay --trace big.trace.bin --allocator caching\n"
               "  memsim trace convert big.trace.bin - --to text | head\n");
}

static int trace_convert_cmd(int argc, char **argv)
{
    static const struct option opts[] = {{"to", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *to = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 't': to = optarg; break;
        case 'h': convert_usage(stdout); return MS_EXIT_OK;
        default:
            fprintf(stderr, "memsim trace convert: bad option '%s'\n", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
    }
    trace_form form;
    if (to && !trace_form_parse(to, &form)) {
        fprintf(stderr, "memsim trace convert: --to '%s': expected binary or text\n", to);
        return MS_EXIT_USAGE;
    }
    if (!to || optind != argc - 2) {
        convert_usage(stderr);
        return MS_EXIT_USAGE;
    }
    ms_error err;
    uint64_t n;
    ms_status st = trace_convert(argv[optind], argv[optind + 1], form, &n, &err);
    if (st != MS_OK) return cli_fail("trace convert", st, &err);
    fprintf(stderr, "memsim trace convert: %llu records written to %s (%s)\n",
            (unsigned long long)n, argv[optind + 1], trace_form_name(form));
    return MS_EXIT_OK;
}

int cmd_trace(int argc, char **argv)
{
    if (argc < 2) {
        trace_usage(stderr);
        return MS_EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "gen")) return trace_gen(argc - 1, argv + 1);
    if (!strcmp(sub, "check")) return trace_check(argc - 1, argv + 1);
    if (!strcmp(sub, "stats")) return trace_stats_cmd(argc - 1, argv + 1);
    if (!strcmp(sub, "import")) return trace_import(argc - 1, argv + 1);
    if (!strcmp(sub, "convert")) return trace_convert_cmd(argc - 1, argv + 1);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        trace_usage(stdout);
        return MS_EXIT_OK;
    }
    fprintf(stderr, "memsim trace: unknown subcommand '%s'\n", sub);
    trace_usage(stderr);
    return MS_EXIT_USAGE;
}

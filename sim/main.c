/* main.c — the memsim command: dispatches subcommands to sim/cmd_*.c and hands the others
 * over, the way git hands `git foo` to `git-foo`: the GPU subcommands (run, probe) to the
 * runtime program memsim-run, the paper drivers (protrain, memferry, gmlake) to the
 * experiments' program memsim-paper (experiments/main.c). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "sim/cmds.h"
#include "base/util.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"list", cmd_list, "models, machines, policies and allocators, with their sources"},
    {"trace", cmd_trace, "gen | check | stats | import: make, validate, summarize, convert traces"},
    {"plan", cmd_plan, "run a policy's planner on a workload and write the plan file"},
    {"simulate", cmd_simulate, "simulate one policy (or a trace + plan file) on a machine"},
    {"compare", cmd_compare, "several policies on one workload, side by side (--plot DIR)"},
    {"sweep", cmd_sweep, "several policies over sequence lengths: MFU, fastest, longest that fits"},
    {"replay", cmd_replay, "replay a trace's alloc/free program through an allocator"},
    {"dsa", cmd_dsa, "offline storage allocation (static memory planning) of CSV instances"},
    {"bench", cmd_bench, "memsim's own speed: allocator replay and simulation throughput"},
    {"experiment", cmd_experiment, "run a paper reproduction: experiments/NAME/run.sh (list: memsim experiment list)"},
    {"validate", cmd_validate, "simulator vs GPU: run the validation cases on a GPU, compare (docs/VALIDATION.md)"},
};

/* The commands another program runs: the paper drivers in experiments/ (memsim-paper) and the
 * GPU runtime (memsim-run), each looked for in its build folder, then in libexecdir, then on
 * the PATH. */
static const struct {
    const char *name, *program, *build_dir, *help, *missing;
} handed[] = {
    {"protrain", "memsim-paper", MEMSIM_BUILD_EXPERIMENTSDIR,
     "ProTrain's search, Tables 2 and 4, Figures 3 and 6 (experiments/protrain)",
     "the paper drivers (memsim-paper) are not built or installed"},
    {"memferry", "memsim-paper", MEMSIM_BUILD_EXPERIMENTSDIR,
     "MemFerry's evaluation (Figs. 9-13), see experiments/memferry",
     "the paper drivers (memsim-paper) are not built or installed"},
    {"gmlake", "memsim-paper", MEMSIM_BUILD_EXPERIMENTSDIR,
     "GMLake's fragmentation study (ASPLOS'24 section 5), see experiments/gmlake",
     "the paper drivers (memsim-paper) are not built or installed"},
    {"run", "memsim-run", MEMSIM_BUILD_RUNTIMEDIR,
     "execute a plan on a real GPU (needs the CUDA runtime)",
     "the GPU runtime (memsim-run) is not built or installed; it builds when\n"
     "configure finds CUDA (./configure --with-cuda=DIR)"},
    {"probe", "memsim-run", MEMSIM_BUILD_RUNTIMEDIR,
     "measure the GPU machine and write a machine profile",
     "the GPU runtime (memsim-run) is not built or installed; it builds when\n"
     "configure finds CUDA (./configure --with-cuda=DIR)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: memsim COMMAND [options]\n\n"
               "memsim simulates GPU memory management in LLM training: recomputation, swapping,\n"
               "direct host access and allocators, on a modelled machine.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    for (size_t i = 0; i < sizeof handed / sizeof *handed; i++)
        fprintf(f, "  %-9s %s\n", handed[i].name, handed[i].help);
    fprintf(f, "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim list\n"
               "  memsim simulate --model gpt2-1b --seq 1024 --batch 8 --machine h100-sxm --policy full-swap\n"
               "  memsim compare --model-config experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp --seq 2048 --batch 4 --machine h200-sxm --policies keep-all,full-recompute\n");
    fprintf(f, "\nRun 'memsim COMMAND --help' for a command's options.\n"
               "Exit status: 0 ok, 1 the run found problems (check errors, OOM where it matters),\n"
               "2 usage, 3 bad input or unknown name, 4 file I/O, 5 internal error.\n");
}

/* Runs handed[k]'s program with argv (argv[0]: the subcommand). */
static int hand_over(size_t k, char **argv)
{
    char cands[2][4096];
    snprintf(cands[0], sizeof cands[0], "%s/%s", handed[k].build_dir, handed[k].program);
    snprintf(cands[1], sizeof cands[1], "%s/%s", MEMSIM_LIBEXECDIR, handed[k].program);
    for (size_t i = 0; i < 2; i++) {
        if (access(cands[i], X_OK) == 0) {
            execv(cands[i], argv);
            fprintf(stderr, "memsim: cannot run %s: %s\n", cands[i], strerror(errno));
            return MS_EXIT_INTERNAL;
        }
    }
    execvp(handed[k].program, argv);
    fprintf(stderr, "memsim %s: %s\n", argv[0], handed[k].missing);
    return MS_EXIT_FAIL;
}

/* A command's tables on standard output count as its output: a failed write (a full disk,
 * /dev/full) makes an otherwise successful run exit MS_EXIT_IO. */
static int stdout_checked(int rc)
{
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    fprintf(stderr, "memsim: error writing to standard output: %s\n", strerror(errno));
    return rc == MS_EXIT_OK ? MS_EXIT_IO : rc;
}

/* glibc's defaults give every freed block above its dynamic mmap threshold, and the heap
 * top above 128 KiB, back to the kernel; a sweep or compare that lowers and simulates
 * point after point then faults the same megabytes in again for every configuration
 * (25,000 page faults and a fifth of the time on the 192-configuration sweep of
 * BENCHMARKS.md). Blocks under 32 MiB stay in the heap, and the heap keeps up to 256 MiB
 * free; the resident peak is the same, as it is reached anyway. */
static void keep_heap(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 16 << 20);
#endif
}

int main(int argc, char **argv)
{
    keep_heap();
    if (argc < 2) {
        usage(stderr);
        return MS_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return MS_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("memsim %s\n", PACKAGE_VERSION);
        return MS_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(cmd, commands[i].name)) return stdout_checked(commands[i].fn(argc - 1, argv + 1));
    for (size_t i = 0; i < sizeof handed / sizeof *handed; i++)
        if (!strcmp(cmd, handed[i].name)) return hand_over(i, argv + 1);
    /* the names in the order the closest is looked for (ties: the first): the runtime's, the
     * commands, the paper drivers */
    const char *names[64];
    size_t n = 0;
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < (pass == 1 ? sizeof commands / sizeof *commands
                                          : sizeof handed / sizeof *handed) && n < 64; i++) {
            if (pass == 1) names[n++] = commands[i].name;
            else if ((pass == 0) == !strcmp(handed[i].program, "memsim-run"))
                names[n++] = handed[i].name;
        }
    const char *near = ms_closest(cmd, names, n);
    fprintf(stderr, "memsim: unknown command '%s'%s%s%s\n\n", cmd,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    usage(stderr);
    return MS_EXIT_USAGE;
}

/* main.c — the memsim command: dispatches subcommands to sim/cmd_*.c and hands the GPU
 * subcommands (run, probe, validate) to the runtime program memsim-run, the way git hands
 * `git foo` to `git-foo`. */
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
    {"protrain", cmd_protrain, "ProTrain's search, Tables 2 and 4, Figures 3 and 6 (experiments/protrain)"},
    {"memferry", cmd_memferry, "MemFerry's evaluation (Figs. 9-13), see experiments/memferry"},
    {"gmlake", cmd_gmlake, "GMLake's fragmentation study (ASPLOS'24 section 5), see experiments/gmlake"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: memsim COMMAND [options]\n\n"
               "memsim simulates GPU memory management in LLM training: recomputation, swapping,\n"
               "direct host access and allocators, on a modelled machine.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-9s %s\n", "run", "execute a plan on a real GPU (needs the CUDA runtime)");
    fprintf(f, "  %-9s %s\n", "probe", "measure the GPU machine and write a machine profile");
    fprintf(f, "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim list\n"
               "  memsim simulate --model gpt2-1b --seq 1024 --batch 8 --machine h100-sxm --policy full-swap\n"
               "  memsim compare --model-config experiments/realworld/configs/llama3.2-1b.json --framework hf --precision amp --seq 2048 --batch 4 --machine h200-sxm --policies keep-all,full-recompute\n");
    fprintf(f, "\nRun 'memsim COMMAND --help' for a command's options.\n"
               "Exit status: 0 ok, 1 the run found problems (check errors, OOM where it matters),\n"
               "2 usage, 3 bad input or unknown name, 4 file I/O, 5 internal error.\n");
}

/* Looks for memsim-run next to the build, then in libexecdir, then on the PATH. */
static int hand_over(int argc, char **argv)
{
    const char *cands[] = {MEMSIM_BUILD_RUNTIMEDIR "/memsim-run", MEMSIM_LIBEXECDIR "/memsim-run"};
    for (size_t i = 0; i < 2; i++) {
        if (access(cands[i], X_OK) == 0) {
            execv(cands[i], argv);
            fprintf(stderr, "memsim: cannot run %s: %s\n", cands[i], strerror(errno));
            return MS_EXIT_INTERNAL;
        }
    }
    execvp("memsim-run", argv);
    (void)argc;
    fprintf(stderr,
            "memsim %s: the GPU runtime (memsim-run) is not built or installed; it builds when\n"
            "configure finds CUDA (./configure --with-cuda=DIR)\n",
            argv[0]);
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
    if (!strcmp(cmd, "run") || !strcmp(cmd, "probe"))
        return hand_over(argc - 1, argv + 1);
    const char *names[64] = {"run", "probe"};
    size_t n = 2;
    for (size_t i = 0; i < sizeof commands / sizeof *commands && n < 64; i++)
        names[n++] = commands[i].name;
    const char *near = ms_closest(cmd, names, n);
    fprintf(stderr, "memsim: unknown command '%s'%s%s%s\n\n", cmd,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    usage(stderr);
    return MS_EXIT_USAGE;
}

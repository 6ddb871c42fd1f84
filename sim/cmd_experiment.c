/* cmd_experiment.c — `memsim experiment NAME [ARGS]` and `memsim validate [ARGS]`: run the
 * reproduction scripts in experiments/NAME/run.sh with this memsim binary (MEMSIM in their
 * environment), so a user can reproduce a paper's tables with one command; -j N reaches
 * them as MEMSIM_JOBS=N. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/cmds.h"
#include "sim/cli.h"
#include "sim/jobs.h"
#include "base/util.h"

static int list(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "memsim experiment: cannot open %s: %s (set MEMSIM_EXPERIMENTS)\n", dir,
                strerror(errno));
        return MS_EXIT_IO;
    }
    printf("experiments in %s:\n", dir);
    struct dirent *e;
    char *names[64];
    size_t n = 0;
    while ((e = readdir(d)) && n < 64) {
        char p[2 * PATH_MAX];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s/run.sh", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(p, &st) == 0) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    /* sorted, so the listing does not depend on the directory order */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    for (size_t i = 0; i < n; i++) {
        printf("  %s\n", names[i]);
        free(names[i]);
    }
    return MS_EXIT_OK;
}

static int run_script(const char *self, const char *name, int argc, char **argv)
{
    char dir[PATH_MAX], script[2 * PATH_MAX], me[PATH_MAX];
    cli_experiments_dir(dir, sizeof dir);
    if (strchr(name, '/') || name[0] == '.') {
        fprintf(stderr, "memsim experiment: bad name '%s'\n", name);
        return MS_EXIT_USAGE;
    }
    snprintf(script, sizeof script, "%s/%s/run.sh", dir, name);
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "memsim experiment: no experiment '%s' (%s not found; 'memsim experiment "
                        "list' lists them)\n", name, script);
        return MS_EXIT_INPUT;
    }
    /* The scripts call memsim through $MEMSIM: make it this very binary. */
    ssize_t k = readlink("/proc/self/exe", me, sizeof me - 1);
    if (k > 0) {
        me[k] = '\0';
        setenv("MEMSIM", me, 1);
    } else if (strchr(self, '/')) {
        setenv("MEMSIM", self, 1);
    }
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return MS_EXIT_INTERNAL;
    args[0] = "bash";
    args[1] = script;
    for (int i = 0; i < argc; i++) args[2 + i] = argv[i];
    execvp("bash", args);
    fprintf(stderr, "memsim experiment: cannot run bash: %s\n", strerror(errno));
    free(args);
    return MS_EXIT_INTERNAL;
}

/* -j N, -jN, --jobs N or --jobs=N at argv[*i]: sets MEMSIM_JOBS and steps over it. Returns
 * 1 when it was one, 0 when argv[*i] is something else, or an exit status + 2 on a bad
 * value. */
static int take_jobs(int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v = NULL;
    int used = 1;
    if (!strcmp(a, "-j") || !strcmp(a, "--jobs")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "memsim experiment: option '%s' needs a value\n", a);
            return MS_EXIT_USAGE + 2;
        }
        v = argv[*i + 1];
        used = 2;
    } else if (!strncmp(a, "--jobs=", 7)) v = a + 7;
    else if (!strncmp(a, "-j", 2)) v = a + 2;
    else return 0;
    int n;
    if (cli_parse_jobs("experiment", v, &n)) return MS_EXIT_USAGE + 2;
    char buf[16];
    snprintf(buf, sizeof buf, "%d", n);
    setenv("MEMSIM_JOBS", buf, 1);
    *i += used;
    return 1;
}

int cmd_experiment(int argc, char **argv)
{
    /* -j N before NAME or right after it; the rest goes to the script */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return MS_EXIT_INTERNAL;
    int nr = 0, i = 1, r = 0;
    rest[nr++] = argv[0];
    for (int k = 0; k < 2; k++) {
        while (i < argc && (r = take_jobs(argc, argv, &i)) == 1) {}
        if (r > 1) {
            free(rest);
            return r - 2;
        }
        if (k == 0 && i < argc) rest[nr++] = argv[i++]; /* NAME */
    }
    while (i < argc) rest[nr++] = argv[i++];
    argc = nr;
    argv = rest;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: memsim experiment NAME [-j N] [ARGS]   run experiments/NAME/run.sh\n"
               "       memsim experiment list                 list the experiments\n"
               "Each experiment reproduces a paper's tables or figures, printing the paper's\n"
               "numbers beside memsim's with the differences; ARGS go to its run.sh (see its\n"
               "README.md). The scripts run this memsim binary. -j N (--jobs N, before or\n"
               "right after NAME) sets MEMSIM_JOBS=N for the script: experiments/dsa passes\n"
               "it on to memsim dsa -j; the other experiments run one job at a time.\n"
               "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim experiment list\n"
               "  memsim experiment memo\n"
               "  memsim experiment -j 2 dsa\n");
        return argc < 2 ? MS_EXIT_USAGE : MS_EXIT_OK;
    }
    if (!strcmp(argv[1], "list")) {
        if (argc > 2) {
            fprintf(stderr, "memsim experiment list: unexpected argument '%s'\n", argv[2]);
            return MS_EXIT_USAGE;
        }
        char dir[PATH_MAX];
        cli_experiments_dir(dir, sizeof dir);
        return list(dir);
    }
    return run_script(argv[0], argv[1], argc - 2, argv + 2);
}

int cmd_validate(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: memsim validate gpu OUTDIR        on a GPU machine: run the validation cases\n"
               "       memsim validate compare GPUDIR [--write-doc]\n"
               "                                         here: simulate the same cases, compare\n"
               "Runs experiments/validate/run.sh: predicted vs measured iteration time, peak\n"
               "reserved bytes and host-link busy time (docs/VALIDATION.md).\n"
               "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim validate gpu out/gpu\n"
               "  memsim validate compare out/gpu\n");
        return MS_EXIT_OK;
    }
    return run_script(argv[0], "validate", argc - 1, argv + 1);
}

/* plot.c — runs gnuplot on the plots/ scripts (see plot.h). gnuplot is found on the PATH at
 * the moment a plot is asked for; without it memsim still runs and says what is missing. */
#define _POSIX_C_SOURCE 200809L
#include "sim/plot.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MEMSIM_PLOTDIR
#define MEMSIM_PLOTDIR "plots"
#endif
#ifndef MEMSIM_PKG_PLOTDIR
#define MEMSIM_PKG_PLOTDIR "/usr/local/share/memsim/plots"
#endif

extern char **environ;

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[4096];
    const char *p = path;
    while (*p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n && n + strlen(prog) + 2 < sizeof buf) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, prog);
            if (access(buf, X_OK) == 0) return 1;
        }
        p += n;
        if (*p == ':') p++;
    }
    return 0;
}

int plot_available(void) { return on_path("gnuplot"); }

const char *plot_dir(void)
{
    const char *env = getenv("MEMSIM_PLOTDIR");
    struct stat st;
    if (env && *env) return env;
    if (stat(MEMSIM_PLOTDIR "/compare.gp", &st) == 0) return MEMSIM_PLOTDIR;
    return MEMSIM_PKG_PLOTDIR;
}

/* gnuplot string literals use single quotes; a quote in a path would end it early. */
static int safe_for_gnuplot(const char *s) { return strchr(s, '\'') == NULL; }

static ms_status run_gnuplot(const char *script, const char *vars, ms_error *err)
{
    char *argv[] = {"gnuplot", "-e", (char *)vars, (char *)script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (rc != 0) return ms_fail(err, MS_ERR_IO, "cannot run gnuplot");
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return ms_fail(err, MS_ERR_IO, "gnuplot failed on %s", script);
    return MS_OK;
}

ms_status plot_draw(const char *script, const char *datafile, const char *outbase,
                    const char *title, const char *extra_vars, ms_error *err)
{
    if (!plot_available())
        return ms_fail(err, MS_ERR_NOTFOUND,
                       "gnuplot is not on the PATH: install it (Debian: apt-get install "
                       "gnuplot-nox) to draw figures; the CSV data was written");
    if (!safe_for_gnuplot(datafile) || !safe_for_gnuplot(outbase) ||
        (title && !safe_for_gnuplot(title)))
        return ms_fail(err, MS_ERR_INVALID, "a path or title contains a single quote");
    char spath[4096];
    snprintf(spath, sizeof spath, "%s/%s.gp", plot_dir(), script);
    if (access(spath, R_OK) != 0)
        return ms_fail(err, MS_ERR_NOTFOUND, "plot script %s not found (set MEMSIM_PLOTDIR)",
                       spath);
    static const char *const fmts[] = {"png", "svg"};
    for (int i = 0; i < 2; i++) {
        char vars[8192];
        snprintf(vars, sizeof vars, "datafile='%s'; outfile='%s.%s'; fmt='%s'; title='%s'%s%s",
                 datafile, outbase, fmts[i], fmts[i], title ? title : script,
                 extra_vars ? "; " : "", extra_vars ? extra_vars : "");
        ms_status st = run_gnuplot(spath, vars, err);
        if (st != MS_OK) return st;
    }
    return MS_OK;
}

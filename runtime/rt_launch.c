/* rt_launch.c — the processes of a run on several GPUs and their exchange files (see
 * rt_launch.h). Used by runtime/rt_node.c and tests/test_rt_launch.c. */
#define _GNU_SOURCE
#include "runtime/rt_launch.h"

#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- who this process is ---- */

/* The launchers whose variables a rank reads: rank, world size, local rank, and the
 * variable that names the job (appended to the files' prefix so that a later job with the
 * same MEMSIM_NCCL_ID_FILE never reads this one's files). */
typedef struct launcher_row {
    const char *name, *rank, *size, *local, *job;
} launcher_row;

static const launcher_row launchers[] = {
    {"memsim", "MEMSIM_RANK", "MEMSIM_WORLD_SIZE", "MEMSIM_LOCAL_RANK", NULL},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "PMIX_NAMESPACE"},
};

static int env_int(const char *name, int *out)
{
    const char *v = getenv(name);
    uint64_t x;
    if (!v || !ms_parse_u64(v, &x) || x > (1u << 20)) return 0;
    *out = (int)x;
    return 1;
}

static double timeout_of(void)
{
    const char *v = getenv("MEMSIM_RANK_TIMEOUT_S");
    double t;
    return v && ms_parse_double(v, &t) && t > 0 ? t : 300.0;
}

static ms_status rank_of(const launcher_row *l, int world, rt_proc *p, ms_error *err)
{
    int size = 0;
    if (!env_int(l->rank, &p->rank) || !env_int(l->size, &size) ||
        !env_int(l->local, &p->local_rank))
        return ms_fail(err, MS_ERR_INVALID, "%s started this process, but %s, %s and %s are not "
                       "all set to whole numbers", l->name, l->rank, l->size, l->local);
    if (size != world)
        return ms_fail(err, MS_ERR_INVALID, "%s started %d processes (%s) but the layout holds "
                       "%d GPUs (tp x cp x dp): start one process per GPU", l->name, size, l->size,
                       world);
    if (p->rank >= world)
        return ms_fail(err, MS_ERR_INVALID, "%s=%d is not below the world size %d", l->rank,
                       p->rank, world);
    const char *f = getenv("MEMSIM_NCCL_ID_FILE");
    if (!f || !*f)
        return ms_fail(err, MS_ERR_INVALID, "%s started this rank: set MEMSIM_NCCL_ID_FILE to a "
                       "path every rank can reach (a fresh one per run, e.g. /tmp/memsim-job-1/"
                       "id): the ranks exchange NCCL's ids and their results beside it", l->name);
    const char *job = l->job ? getenv(l->job) : NULL;
    int w = snprintf(p->stem, sizeof p->stem, "%s%s%s", f, job && *job ? "." : "",
                     job && *job ? job : "");
    if (w < 0 || (size_t)w >= sizeof p->stem - 64)
        return ms_fail(err, MS_ERR_INVALID, "MEMSIM_NCCL_ID_FILE is too long");
    for (char *c = p->stem + strlen(f); *c; c++)
        if (*c == '/') *c = '_'; /* a job id is a name, not a path */
    p->launcher = l->name;
    p->role = RL_RANK;
    return MS_OK;
}

ms_status rt_launch_whoami(int world, rt_proc *p, ms_error *err)
{
    memset(p, 0, sizeof *p);
    p->world = world;
    p->timeout_s = timeout_of();
    if (world <= 1) {
        p->role = RL_SINGLE;
        return MS_OK;
    }
    for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++)
        if (getenv(launchers[i].rank) || getenv(launchers[i].size))
            return rank_of(&launchers[i], world, p, err);
    p->role = RL_LAUNCHER;
    return MS_OK;
}

/* ---- starting the ranks ---- */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pid_t start_rank(int r, int world, const char *stem, char *const *argv)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    char b[24];
    snprintf(b, sizeof b, "%d", r);
    setenv("MEMSIM_RANK", b, 1);
    setenv("MEMSIM_LOCAL_RANK", b, 1);
    snprintf(b, sizeof b, "%d", world);
    setenv("MEMSIM_WORLD_SIZE", b, 1);
    setenv("MEMSIM_NCCL_ID_FILE", stem, 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "memsim run: rank %d: cannot start /proc/self/exe: %s\n", r, strerror(errno));
    _exit(MS_EXIT_INTERNAL);
}

static void remove_dir(const char *dir)
{
    char pat[RT_STEM_MAX + 8];
    snprintf(pat, sizeof pat, "%s/*", dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
        globfree(&g);
    }
    rmdir(dir);
}

static int status_code(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return MS_EXIT_FAIL;
}

/* Waits for every rank; after the first failure the others have grace_s, then SIGKILL. */
static void wait_ranks(pid_t *pid, int *code, int world, double grace_s, FILE *diag)
{
    int left = 0;
    for (int r = 0; r < world; r++) left += pid[r] > 0;
    double failed_at = -1;
    while (left > 0) {
        for (int r = 0; r < world; r++) {
            int status;
            if (pid[r] <= 0 || waitpid(pid[r], &status, WNOHANG) != pid[r]) continue;
            code[r] = status_code(status);
            if (code[r] && diag) {
                if (WIFSIGNALED(status))
                    fprintf(diag, "memsim run: rank %d ended by signal %d\n", r, WTERMSIG(status));
                else fprintf(diag, "memsim run: rank %d exited with status %d\n", r, code[r]);
            }
            if (code[r] && failed_at < 0) failed_at = now_s();
            pid[r] = 0;
            left--;
        }
        if (left > 0 && failed_at >= 0 && now_s() - failed_at > grace_s) {
            for (int r = 0; r < world; r++)
                if (pid[r] > 0) {
                    if (diag) fprintf(diag, "memsim run: rank %d did not stop within %.0f s of "
                                      "another's failure: killed\n", r, grace_s);
                    kill(pid[r], SIGKILL);
                }
            failed_at = now_s() + 1e9; /* once */
        }
        if (left > 0) sleep_s(0.02);
    }
}

int rt_launch_ranks(int world, char *const *argv, double grace_s, FILE *diag)
{
    char dir[RT_STEM_MAX];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/memsim-run.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        if (diag) fprintf(diag, "memsim run: cannot make a private directory %s: %s\n", dir,
                          strerror(errno));
        return MS_EXIT_IO;
    }
    char stem[RT_STEM_MAX + 8];
    snprintf(stem, sizeof stem, "%s/run", dir);
    pid_t *pid = calloc((size_t)world, sizeof *pid);
    int *code = calloc((size_t)world, sizeof *code);
    if (!pid || !code) {
        free(pid);
        free(code);
        remove_dir(dir);
        return MS_EXIT_INTERNAL;
    }
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pid[r] = start_rank(r, world, stem, argv);
        if (pid[r] < 0) {
            code[r] = MS_EXIT_FAIL;
            if (diag) fprintf(diag, "memsim run: cannot start rank %d: %s\n", r, strerror(errno));
        }
    }
    wait_ranks(pid, code, world, grace_s, diag);
    int rc = code[0];
    for (int r = 1; r < world && !rc; r++) rc = code[r];
    free(pid);
    free(code);
    remove_dir(dir);
    return rc;
}

/* ---- exchange files ---- */

static void path_of(const rt_proc *p, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s.%s", p->stem, name);
}

ms_status rt_launch_put(const rt_proc *p, const char *name, const void *data, size_t n,
                        ms_error *err)
{
    char path[RT_STEM_MAX + 128], tmp[RT_STEM_MAX + 160];
    path_of(p, name, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return ms_fail(err, MS_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int ok = fwrite(data, 1, n, f) == n;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return ms_fail(err, MS_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    return MS_OK;
}

static int read_file(const char *path, void *data, size_t max, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    *n = fread(data, 1, max, f);
    fclose(f);
    return 1;
}

ms_status rt_launch_get(const rt_proc *p, const char *name, void *data, size_t max, size_t *n,
                        ms_error *err)
{
    char path[RT_STEM_MAX + 128], notice[1200];
    path_of(p, name, path, sizeof path);
    double until = now_s() + p->timeout_s;
    for (;;) {
        if (read_file(path, data, max, n)) return MS_OK;
        if (rt_launch_stopped(p, notice, sizeof notice))
            return ms_fail(err, MS_ERR_INVALID, "stopped while waiting for %s: %s", path, notice);
        if (now_s() > until)
            return ms_fail(err, MS_ERR_INVALID, "waited %.0f s for %s, which no rank wrote "
                           "(MEMSIM_RANK_TIMEOUT_S sets the limit)", p->timeout_s, path);
        sleep_s(0.02);
    }
}

void rt_launch_stop(const rt_proc *p, const char *msg)
{
    char path[RT_STEM_MAX + 128], tmp[RT_STEM_MAX + 160], line[1200];
    path_of(p, "stop", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int n = snprintf(line, sizeof line, "rank %d: %s", p->rank, msg);
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    fwrite(line, 1, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1, f);
    fclose(f);
    /* link, not rename: the first notice stays */
    if (link(tmp, path) != 0 && errno != EEXIST) rename(tmp, path);
    unlink(tmp);
}

int rt_launch_stopped(const rt_proc *p, char *msg, size_t n)
{
    char path[RT_STEM_MAX + 128], own[32];
    path_of(p, "stop", path, sizeof path);
    size_t got = 0;
    if (!n || !read_file(path, msg, n - 1, &got)) return 0;
    msg[got] = 0;
    snprintf(own, sizeof own, "rank %d: ", p->rank);
    return strncmp(msg, own, strlen(own)) != 0;
}

/* ---- the watcher ---- */

struct rt_watch {
    rt_proc p;
    void (*on_stop)(const char *msg, void *arg);
    void *arg;
    pthread_t thread;
    int quit;
};

static void *watch_main(void *arg)
{
    rt_watch *w = arg;
    char msg[1200];
    while (!__atomic_load_n(&w->quit, __ATOMIC_ACQUIRE)) {
        if (rt_launch_stopped(&w->p, msg, sizeof msg)) {
            w->on_stop(msg, w->arg);
            return NULL;
        }
        sleep_s(0.05);
    }
    return NULL;
}

ms_status rt_launch_watch(const rt_proc *p, void (*on_stop)(const char *msg, void *arg),
                          void *arg, rt_watch **out, ms_error *err)
{
    *out = NULL;
    rt_watch *w = calloc(1, sizeof *w);
    if (!w) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    w->p = *p;
    w->on_stop = on_stop;
    w->arg = arg;
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        free(w);
        return ms_fail(err, MS_ERR_LIMIT, "cannot start the watcher thread");
    }
    *out = w;
    return MS_OK;
}

void rt_launch_unwatch(rt_watch *w)
{
    if (!w) return;
    __atomic_store_n(&w->quit, 1, __ATOMIC_RELEASE);
    pthread_join(w->thread, NULL);
    free(w);
}

void rt_launch_cleanup(const rt_proc *p)
{
    char pat[RT_STEM_MAX + 8];
    snprintf(pat, sizeof pat, "%s.*", p->stem);
    glob_t g;
    if (glob(pat, GLOB_NOESCAPE, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
    globfree(&g);
}

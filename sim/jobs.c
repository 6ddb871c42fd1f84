/* jobs.c — the process pool of `-j N` (see jobs.h): forks N worker processes (fewer when
 * there are fewer jobs), gives each a job number at a time over a pipe and gets one frame per
 * job back over another (status, captured standard output and error, data); the parent hands
 * the frames to the command in job order. Used by sim/cmd_run.c (compare, sweep) and
 * sim/cmd_dsa.c. */
#define _POSIX_C_SOURCE 200809L
#include "sim/jobs.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

#define FRAME_MAGIC 0x6d736a31u /* "msj1" */

typedef struct frame_hdr {
    uint32_t magic;
    int32_t status;
    uint64_t out_len, err_len, data_len;
} frame_hdr;

enum { J_PENDING, J_RUNNING, J_DONE, J_LOST };

typedef struct job {
    int state;
    char *buf;             /* J_DONE: its frame */
    size_t len;
    char why[160];         /* J_LOST: how its worker ended */
} job;

/* A worker process: takes job numbers on req, answers each with a frame on res. */
typedef struct worker {
    pid_t pid;
    int req, res;          /* -1 once closed */
    long job;              /* the job it runs, -1: idle */
    char *buf;             /* the frame coming in */
    size_t len, cap;
} worker;

static int frame_complete(const char *buf, size_t len);

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The whole content of the file open on fd, from its start. */
static int slurp(int fd, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0 || lseek(fd, 0, SEEK_SET) < 0) return -1;
    *buf = malloc((size_t)end + 1);
    if (!*buf) return -1;
    while (*len < (size_t)end) {
        ssize_t k = read(fd, *buf + *len, (size_t)end - *len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        *len += (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Runs job i with standard output and error already going to the temporary files open on
 * fds 1 and 2 (emptied here first) and makes its frame. 0 when done, else a code for _exit. */
static int run_framed(const jobs_spec *s, size_t i, char **frame, size_t *flen)
{
    if (ftruncate(STDOUT_FILENO, 0) || ftruncate(STDERR_FILENO, 0) ||
        lseek(STDOUT_FILENO, 0, SEEK_SET) < 0 || lseek(STDERR_FILENO, 0, SEEK_SET) < 0)
        return 103;
    char *data = NULL;
    size_t dlen = 0;
    FILE *d = open_memstream(&data, &dlen);
    if (!d) return 104;
    const char *crash = getenv("MEMSIM_JOBS_CRASH");
    if (crash && *crash && strtoull(crash, NULL, 10) == i) {
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    }
    int st = s->run(i, s->ctx, d);
    fflush(stdout);
    fflush(stderr);
    if (fclose(d) != 0) return 105;
    char *ob = NULL, *eb = NULL;
    size_t ol, el;
    if (slurp(STDOUT_FILENO, &ob, &ol) || slurp(STDERR_FILENO, &eb, &el)) {
        free(ob);
        free(eb);
        free(data);
        return 106;
    }
    frame_hdr h = {FRAME_MAGIC, (int32_t)st, ol, el, dlen};
    *flen = sizeof h + ol + el + dlen;
    *frame = malloc(*flen);
    if (*frame) {
        memcpy(*frame, &h, sizeof h);
        memcpy(*frame + sizeof h, ob, ol);
        memcpy(*frame + sizeof h + ol, eb, el);
        memcpy(*frame + sizeof h + ol + el, data, dlen);
    }
    free(ob);
    free(eb);
    free(data);
    return *frame ? 0 : 107;
}

/* The worker: standard output and error go to temporary files, emptied before each job; it
 * runs the jobs it is given one after the other, sends each one's frame, and ends (without
 * running the parent's exit handlers or flushing its buffers) when the parent closes req. */
static void worker_main(const jobs_spec *s, int req, int res)
{
    FILE *o = tmpfile(), *e = tmpfile();
    if (!o || !e) _exit(101);
    if (dup2(fileno(o), STDOUT_FILENO) < 0 || dup2(fileno(e), STDERR_FILENO) < 0) _exit(102);
    uint64_t i;
    while (read_all(req, &i, sizeof i) == 0) {
        char *f;
        size_t fl;
        int r = run_framed(s, (size_t)i, &f, &fl);
        if (r) _exit(r);
        if (write_all(res, f, fl)) _exit(108);
        free(f);
    }
    _exit(0);
}

int jobs_capture(const jobs_spec *s, size_t i, char **frame, size_t *len)
{
    *frame = NULL;
    fflush(stdout);
    fflush(stderr);
    FILE *o = tmpfile(), *e = tmpfile();
    int so = dup(STDOUT_FILENO), se = dup(STDERR_FILENO), r = 1;
    if (o && e && so >= 0 && se >= 0 && dup2(fileno(o), STDOUT_FILENO) >= 0 &&
        dup2(fileno(e), STDERR_FILENO) >= 0) {
        r = run_framed(s, i, frame, len);
    }
    fflush(stdout);
    fflush(stderr);
    if (so >= 0) {
        dup2(so, STDOUT_FILENO);
        close(so);
    }
    if (se >= 0) {
        dup2(se, STDERR_FILENO);
        close(se);
    }
    if (o) fclose(o);
    if (e) fclose(e);
    if (r) {
        free(*frame);
        *frame = NULL;
        return -1;
    }
    return 0;
}

/* Hands a whole frame to done(). */
static void deliver(const jobs_spec *s, size_t i, const char *buf)
{
    frame_hdr h;
    memcpy(&h, buf, sizeof h);
    jobs_result r;
    r.status = h.status;
    r.out = buf + sizeof h;
    r.out_len = h.out_len;
    r.err = r.out + h.out_len;
    r.err_len = h.err_len;
    r.data = r.err + h.err_len;
    r.data_len = h.data_len;
    s->done(i, &r, s->ctx);
}

int jobs_deliver(const jobs_spec *s, size_t i, const char *frame, size_t len)
{
    if (frame_complete(frame, len) != 1) return -1;
    deliver(s, i, frame);
    return 0;
}

static int start_worker(const jobs_spec *s, worker *ws, int nw, int k, char *why, size_t whyn)
{
    int rq[2], rs[2];
    if (pipe(rq) != 0) {
        snprintf(why, whyn, "cannot make a pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe(rs) != 0) {
        snprintf(why, whyn, "cannot make a pipe: %s", strerror(errno));
        close(rq[0]);
        close(rq[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, whyn, "cannot fork: %s", strerror(errno));
        close(rq[0]); close(rq[1]); close(rs[0]); close(rs[1]);
        return -1;
    }
    if (pid == 0) {
        close(rq[1]);
        close(rs[0]);
        for (int q = 0; q < nw; q++) { /* the other workers' pipes are not this one's */
            if (q == k) continue;
            if (ws[q].req >= 0) close(ws[q].req);
            if (ws[q].res >= 0) close(ws[q].res);
        }
        worker_main(s, rq[0], rs[1]);
    }
    close(rq[0]);
    close(rs[1]);
    ws[k].pid = pid;
    ws[k].req = rq[1];
    ws[k].res = rs[0];
    ws[k].job = -1;
    return 0;
}

/* How a worker ended, once its pipe is at its end (reaps it). "" when it ended well. */
static void reap(worker *w, char *why, size_t whyn)
{
    int st;
    why[0] = '\0';
    while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(st))
        snprintf(why, whyn, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        snprintf(why, whyn, "its process exited with status %d",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    w->pid = -1;
}

/* Whether buf holds a whole frame; -1 when it cannot be one. */
static int frame_complete(const char *buf, size_t len)
{
    frame_hdr h;
    if (len < sizeof h) return 0;
    memcpy(&h, buf, sizeof h);
    if (h.magic != FRAME_MAGIC) return -1;
    uint64_t want = sizeof h + h.out_len + h.err_len + h.data_len;
    return len == want ? 1 : len > want ? -1 : 0;
}

/* Hands worker w its next job, or closes its request pipe when none is left. */
static void assign(worker *w, job *jobs, size_t *next, size_t n, int stop)
{
    if (stop || *next >= n) {
        if (w->req >= 0) close(w->req);
        w->req = -1;
        return;
    }
    uint64_t i = *next;
    w->job = (long)*next;
    jobs[*next].state = J_RUNNING;
    (*next)++;
    if (write_all(w->req, &i, sizeof i) != 0) { /* it is gone: its pipe's end will say how */
        close(w->req);
        w->req = -1;
    }
}

int jobs_run(const jobs_spec *s)
{
    size_t n = s->n;
    int nw = s->workers < 1 ? 1 : s->workers > JOBS_MAX ? JOBS_MAX : s->workers;
    if ((size_t)nw > n) nw = n ? (int)n : 1;
    job *jobs = calloc(n ? n : 1, sizeof *jobs);
    worker *ws = calloc((size_t)nw, sizeof *ws);
    struct pollfd *pf = calloc((size_t)nw, sizeof *pf);
    int *who = calloc((size_t)nw, sizeof *who);
    if (!jobs || !ws || !pf || !who) {
        free(jobs); free(ws); free(pf); free(who);
        fprintf(stderr, "memsim %s: out of memory\n", s->cmd);
        return MS_EXIT_INTERNAL;
    }
    /* a worker that died must not kill the parent when it writes the next job number */
    struct sigaction ign, old;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old);
    for (int k = 0; k < nw; k++) ws[k].pid = -1, ws[k].req = ws[k].res = -1, ws[k].job = -1;
    size_t next_start = 0, next_done = 0, finished = 0;
    int stop = 0, rc = 0, alive = 0;
    long lost = -1; /* the first job whose result did not come back */
    char why[200] = "", label[160];
    for (int k = 0; k < nw && n; k++) {
        if (start_worker(s, ws, nw, k, why, sizeof why) != 0) {
            stop = 1;
            break;
        }
        alive++;
        assign(&ws[k], jobs, &next_start, n, 0);
    }
    while (alive) {
        int np = 0;
        for (int k = 0; k < nw; k++)
            if (ws[k].res >= 0) {
                pf[np].fd = ws[k].res;
                pf[np].events = POLLIN;
                pf[np].revents = 0;
                who[np++] = k;
            }
        if (poll(pf, (nfds_t)np, -1) < 0) {
            if (errno == EINTR) continue;
            snprintf(why, sizeof why, "poll: %s", strerror(errno));
            stop = 1;
            break;
        }
        for (int q = 0; q < np; q++) {
            if (!pf[q].revents) continue;
            worker *w = &ws[who[q]];
            if (w->cap - w->len < 65536) {
                size_t nc = w->cap ? w->cap * 2 : 131072;
                char *nb = realloc(w->buf, nc);
                if (!nb) {
                    snprintf(why, sizeof why, "out of memory receiving a job's result");
                    stop = 1;
                    break;
                }
                w->buf = nb;
                w->cap = nc;
            }
            ssize_t got = read(w->res, w->buf + w->len, w->cap - w->len);
            if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (got > 0) {
                w->len += (size_t)got;
                int fc = frame_complete(w->buf, w->len);
                if (fc == 0) continue;
                if (fc < 0) { /* not a frame: lose the job, end the worker */
                    snprintf(jobs[w->job].why, sizeof jobs[w->job].why,
                             "it sent a broken result");
                    jobs[w->job].state = J_LOST;
                    if (lost < 0 || w->job < lost) lost = w->job;
                    stop = 1;
                    continue;
                }
                job *j = &jobs[w->job];
                j->state = J_DONE;
                j->buf = w->buf;
                j->len = w->len;
                w->buf = NULL;
                w->len = w->cap = 0;
                finished++;
                if (!s->quiet && !stop) {
                    s->label((size_t)w->job, s->ctx, label, sizeof label);
                    fprintf(stderr, "memsim %s: finished %s (%zu/%zu)\n", s->cmd, label,
                            finished, n);
                }
                w->job = -1;
                assign(w, jobs, &next_start, n, stop);
                continue;
            }
            /* the end of its pipe: it finished (no job) or it died running one */
            char how[160];
            close(w->res);
            w->res = -1;
            if (w->req >= 0) close(w->req);
            w->req = -1;
            reap(w, how, sizeof how);
            alive--;
            if (w->job >= 0) {
                job *j = &jobs[w->job];
                snprintf(j->why, sizeof j->why, "%s", how[0] ? how : "it sent no result");
                j->state = J_LOST;
                if (lost < 0 || w->job < lost) lost = w->job;
                stop = 1;
                w->job = -1;
            }
        }
        while (next_done < n && jobs[next_done].state == J_DONE) {
            job *j = &jobs[next_done];
            deliver(s, next_done, j->buf);
            free(j->buf);
            j->buf = NULL;
            next_done++;
        }
        if (stop) break;
    }
    if (stop) /* a job was lost or a worker could not start: end the others */
        for (int k = 0; k < nw; k++) {
            if (ws[k].req >= 0) close(ws[k].req);
            if (ws[k].res >= 0) close(ws[k].res);
            if (ws[k].pid > 0) {
                kill(ws[k].pid, SIGKILL);
                char how[160];
                reap(&ws[k], how, sizeof how);
            }
        }
    sigaction(SIGPIPE, &old, NULL);
    if (lost >= 0) {
        s->label((size_t)lost, s->ctx, label, sizeof label);
        fprintf(stderr, "memsim %s: internal error: job %ld of %zu (%s) did not finish: %s\n",
                s->cmd, lost + 1, n, label, jobs[lost].why);
        rc = MS_EXIT_INTERNAL;
    } else if (next_done < n) {
        fprintf(stderr, "memsim %s: internal error: %s\n", s->cmd,
                why[0] ? why : "jobs left unfinished");
        rc = MS_EXIT_INTERNAL;
    }
    for (size_t k = 0; k < n; k++) free(jobs[k].buf);
    for (int k = 0; k < nw; k++) free(ws[k].buf);
    free(jobs);
    free(ws);
    free(pf);
    free(who);
    return rc;
}

#ifndef MEMSIM_MPI
int jobs_ranks(void) { return 1; }

int jobs_run_ranks(const jobs_spec *s) { return jobs_run(s); }
#endif

/* jobs.c — the process pool of `-j N` (see jobs.h): forks a child per job, at most N at once,
 * each sending back one frame (status, captured standard output and error, data) over a pipe;
 * the parent hands the frames to the command in job order. Used by sim/cmd_run.c (compare,
 * sweep) and sim/cmd_dsa.c. */
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

#include "traces/util.h"

#define FRAME_MAGIC 0x6d736a31u /* "msj1" */

typedef struct frame_hdr {
    uint32_t magic;
    int32_t status;
    uint64_t out_len, err_len, data_len;
} frame_hdr;

enum { J_PENDING, J_RUNNING, J_DONE, J_LOST };

typedef struct job {
    int state;
    pid_t pid;
    int fd;                /* read end of its pipe while running */
    char *buf;             /* the frame as received */
    size_t len, cap;
    char why[160];         /* J_LOST: how the child ended */
} job;

int jobs_parse(const char *cmd, const char *v, int *out)
{
    uint64_t x;
    if (!v || !ms_parse_u64(v, &x) || x == 0 || x > JOBS_MAX) {
        fprintf(stderr, "memsim %s: --jobs '%s': expected a whole number from 1 to %d\n", cmd,
                v ? v : "", JOBS_MAX);
        return MS_EXIT_USAGE;
    }
    *out = (int)x;
    return 0;
}

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

/* The child: runs job i with standard output and error going to temporary files, then sends
 * the frame and ends without running the parent's exit handlers or flushing its buffers. */
static void child(const jobs_spec *s, size_t i, int wfd)
{
    FILE *o = tmpfile(), *e = tmpfile();
    if (!o || !e) _exit(101);
    if (dup2(fileno(o), STDOUT_FILENO) < 0 || dup2(fileno(e), STDERR_FILENO) < 0) _exit(102);
    char *data = NULL;
    size_t dlen = 0;
    FILE *d = open_memstream(&data, &dlen);
    if (!d) _exit(103);
    const char *crash = getenv("MEMSIM_JOBS_CRASH");
    if (crash && *crash && strtoul(crash, NULL, 10) == i) {
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    }
    int st = s->run(i, s->ctx, d);
    fflush(stdout);
    fflush(stderr);
    if (fclose(d) != 0) _exit(104);
    char *ob, *eb;
    size_t ol, el;
    if (slurp(STDOUT_FILENO, &ob, &ol) || slurp(STDERR_FILENO, &eb, &el)) _exit(105);
    frame_hdr h = {FRAME_MAGIC, (int32_t)st, ol, el, dlen};
    if (write_all(wfd, &h, sizeof h) || write_all(wfd, ob, ol) || write_all(wfd, eb, el) ||
        write_all(wfd, data, dlen))
        _exit(106);
    _exit(0);
}

static int start(const jobs_spec *s, job *jobs, size_t i, char *why, size_t whyn)
{
    int p[2];
    if (pipe(p) != 0) {
        snprintf(why, whyn, "cannot make a pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, whyn, "cannot fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        for (size_t k = 0; k < s->n; k++) /* the other children's pipes are not ours */
            if (jobs[k].state == J_RUNNING) close(jobs[k].fd);
        child(s, i, p[1]);
    }
    close(p[1]);
    jobs[i].state = J_RUNNING;
    jobs[i].pid = pid;
    jobs[i].fd = p[0];
    return 0;
}

/* Reads what is there on job i's pipe; at its end, reaps the child and judges the frame.
 * Returns 1 when the job has ended, 0 when more is to come. */
static int drain(job *j)
{
    if (j->cap - j->len < 65536) {
        size_t nc = j->cap ? j->cap * 2 : 131072;
        char *nb = realloc(j->buf, nc);
        if (!nb) {
            snprintf(j->why, sizeof j->why, "out of memory receiving its result");
            kill(j->pid, SIGKILL);
            goto ended;
        }
        j->buf = nb;
        j->cap = nc;
    }
    ssize_t k = read(j->fd, j->buf + j->len, j->cap - j->len);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    if (k > 0) {
        j->len += (size_t)k;
        return 0;
    }
    if (k < 0) snprintf(j->why, sizeof j->why, "reading its result: %s", strerror(errno));
ended:
    close(j->fd);
    j->fd = -1;
    int ws;
    while (waitpid(j->pid, &ws, 0) < 0 && errno == EINTR) {}
    if (j->why[0]) {
        j->state = J_LOST;
        return 1;
    }
    if (WIFSIGNALED(ws)) {
        int sig = WTERMSIG(ws);
        snprintf(j->why, sizeof j->why, "killed by signal %d (%s)", sig, strsignal(sig));
    } else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        snprintf(j->why, sizeof j->why, "its process exited with status %d",
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    } else {
        frame_hdr h;
        if (j->len < sizeof h) {
            snprintf(j->why, sizeof j->why, "it sent no result");
        } else {
            memcpy(&h, j->buf, sizeof h);
            if (h.magic != FRAME_MAGIC ||
                h.out_len + h.err_len + h.data_len != j->len - sizeof h)
                snprintf(j->why, sizeof j->why, "it sent a broken result");
        }
    }
    j->state = j->why[0] ? J_LOST : J_DONE;
    return 1;
}

int jobs_run(const jobs_spec *s)
{
    size_t n = s->n;
    int workers = s->workers < 1 ? 1 : s->workers > JOBS_MAX ? JOBS_MAX : s->workers;
    job *jobs = calloc(n ? n : 1, sizeof *jobs);
    struct pollfd *pf = calloc((size_t)workers, sizeof *pf);
    size_t *who = calloc((size_t)workers, sizeof *who);
    if (!jobs || !pf || !who) {
        free(jobs);
        free(pf);
        free(who);
        fprintf(stderr, "memsim %s: out of memory\n", s->cmd);
        return MS_EXIT_INTERNAL;
    }
    size_t next_start = 0, next_done = 0, finished = 0;
    int running = 0, stop = 0, rc = 0;
    long lost = -1; /* the first job whose result did not come back */
    char why[200] = "", label[160];
    while (next_done < n) {
        while (!stop && running < workers && next_start < n) {
            if (start(s, jobs, next_start, why, sizeof why) != 0) {
                stop = 1;
                break;
            }
            next_start++;
            running++;
        }
        if (!running) break;
        int np = 0;
        for (size_t k = 0; k < n; k++)
            if (jobs[k].state == J_RUNNING) {
                pf[np].fd = jobs[k].fd;
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
            job *j = &jobs[who[q]];
            if (!drain(j)) continue;
            running--;
            finished++;
            if (j->state == J_LOST) {
                if (lost < 0 || (long)who[q] < lost) lost = (long)who[q];
                stop = 1;
            } else if (!s->quiet && !stop) {
                s->label(who[q], s->ctx, label, sizeof label);
                fprintf(stderr, "memsim %s: finished %s (%zu/%zu)\n", s->cmd, label, finished, n);
            }
        }
        while (next_done < n && jobs[next_done].state == J_DONE) {
            job *j = &jobs[next_done];
            frame_hdr h;
            memcpy(&h, j->buf, sizeof h);
            jobs_result r;
            r.status = h.status;
            r.out = j->buf + sizeof h;
            r.out_len = h.out_len;
            r.err = r.out + h.out_len;
            r.err_len = h.err_len;
            r.data = r.err + h.err_len;
            r.data_len = h.data_len;
            s->done(next_done, &r, s->ctx);
            free(j->buf);
            j->buf = NULL;
            next_done++;
        }
        if (stop) { /* a job was lost or could not start: end the others, report it */
            for (size_t k = 0; k < n; k++)
                if (jobs[k].state == J_RUNNING) {
                    kill(jobs[k].pid, SIGKILL);
                    close(jobs[k].fd);
                    int ws;
                    while (waitpid(jobs[k].pid, &ws, 0) < 0 && errno == EINTR) {}
                    jobs[k].state = J_PENDING;
                }
            running = 0;
            break;
        }
    }
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
    free(jobs);
    free(pf);
    free(who);
    return rc;
}

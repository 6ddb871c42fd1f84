/* exec_util.h — what the executor's tests (tests/test_exec.c, tests/test_exec_host.c)
 * share: a test machine with zero allocator latencies, hand-built schedule actions, a
 * synthetic transformer-like schedule, the run wrapper and output files in the test's
 * temporary folder. Header-only, used only by tests/. */
#ifndef MEMSIM_EXEC_UTIL_H
#define MEMSIM_EXEC_UTIL_H

#include "sim/exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/tap.h"

#define GB 1e9
#define GiB (1ULL << 30)
#define MiB (1ULL << 20)

static inline int near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1);
}
static inline int near_us(double s, double us) { return near(s * 1e6, us); }

/* Output files go to a fresh directory of this run, removed at the end. */
static char tmpdir[64];
static const char *made[32];
static size_t n_made;

static inline const char *tmp_path(const char *name)
{
    char *p = malloc(strlen(tmpdir) + strlen(name) + 2);
    sprintf(p, "%s/%s", tmpdir, name);
    if (n_made < 32) made[n_made++] = p;
    return p;
}

static inline void tmp_cleanup(void)
{
    for (size_t i = 0; i < n_made; i++) {
        remove(made[i]);
        free((void *)made[i]);
    }
    rmdir(tmpdir);
}

/* A machine whose allocator latencies are zero, so times come from compute and the link. */
static inline machine_t test_machine(void)
{
    machine_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "testbox");
    m.gpu_hbm_bytes = 80 * GiB;
    m.gpu_peak_bf16_flops = 1e15;
    m.link_h2d_Bps = 50 * GB;
    m.link_d2h_Bps = 50 * GB;
    m.link_duplex_Bps = 100 * GB;
    m.dha_read_Bps = 40 * GB;
    m.dha_write_Bps = 40 * GB;
    m.host_mem_bytes = 1024 * GiB;
    m.node_gpus = 8;
    m.vmm_granularity_bytes = 2 * MiB;
    return m;
}

/* ---- schedule building ---- */

static inline sched_action base(sched_kind k, sched_stream s)
{
    sched_action a;
    memset(&a, 0, sizeof a);
    a.kind = k;
    a.stream = s;
    a.op = -1;
    a.layer = -1;
    a.dha_eff = 1;
    return a;
}

static inline void add(schedule_t *s, sched_action a) { sched_add(s, &a); }

static inline void compute(schedule_t *s, double dur_us, int64_t op)
{
    sched_action a = base(SA_COMPUTE, SS_COMPUTE);
    a.dur_us = dur_us;
    a.op = op;
    add(s, a);
}

static inline void recompute(schedule_t *s, double dur_us)
{
    sched_action a = base(SA_COMPUTE, SS_COMPUTE);
    a.dur_us = dur_us;
    a.recompute = 1;
    add(s, a);
}

static inline void dha(schedule_t *s, double dur_us, uint64_t rd, uint64_t wr, double eff)
{
    sched_action a = base(SA_COMPUTE, SS_COMPUTE);
    a.dur_us = dur_us;
    a.host_read_bytes = rd;
    a.host_write_bytes = wr;
    a.dha_eff = eff;
    add(s, a);
}

static inline void tensor_act(schedule_t *s, sched_kind k, sched_stream st, uint64_t t, uint64_t b)
{
    sched_action a = base(k, st);
    a.tensor = t;
    a.bytes = b;
    add(s, a);
}

/* An ALLOC on the compute stream of a block the lowering made, with its kind. */
static inline void block_act(schedule_t *s, uint64_t t, uint64_t b, sched_block kind)
{
    sched_action a = base(SA_ALLOC, SS_COMPUTE);
    a.tensor = t;
    a.bytes = b;
    a.block = (uint8_t)kind;
    add(s, a);
}

static inline void event_act(schedule_t *s, sched_kind k, sched_stream st, uint32_t e)
{
    sched_action a = base(k, st);
    a.event = e;
    add(s, a);
}

static inline void host_compute(schedule_t *s, sched_stream st, double dur_us)
{
    sched_action a = base(SA_HOST_COMPUTE, st);
    a.dur_us = dur_us;
    add(s, a);
}

static inline void mark_iter(schedule_t *s, int64_t v)
{
    sched_action a = base(SA_MARK, SS_COMPUTE);
    a.mark = TM_ITER;
    a.mark_value = v;
    add(s, a);
}

static inline ms_status run(const schedule_t *s, const machine_t *m, const sim_opts *o,
                             sim_result *r, ms_error *err)
{
    res_init(r);
    return sim_execute(s, m, o, r, err);
}

static inline int valid(const schedule_t *s)
{
    ms_error err;
    ms_error_clear(&err);
    ms_status st = sched_validate(s, &err);
    if (st != MS_OK) TAP_NOTE("invalid test schedule: %s", err.msg);
    return st == MS_OK;
}

static inline int file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* A synthetic transformer-like iteration with swapping: per layer a forward with
 * activations offloaded (D2H after a RECORD), a backward with prefetches (H2D) and
 * recomputation, DHA reads, host optimizer steps. n_layers sets the size. */
static inline schedule_t *synthetic(int n_layers, size_t *n_actions)
{
    schedule_t *s = sched_new();
    uint64_t tid = 1000;
    uint32_t *offloaded = calloc((size_t)n_layers, sizeof *offloaded);
    mark_iter(s, 0);
    for (int l = 0; l < n_layers; l++) {
        uint64_t act = tid++;
        tensor_act(s, SA_ALLOC, SS_COMPUTE, act, 96 * MiB + (uint64_t)l * 4096);
        for (int k = 0; k < 10; k++) {
            uint64_t tmp = tid++;
            tensor_act(s, SA_ALLOC, SS_COMPUTE, tmp, (uint64_t)(1 + k) * 3 * MiB + 512);
            if (k == 3) dha(s, 120, 8 * MiB, 0, 0.9);
            else compute(s, 80 + 10 * k, l * 100 + k);
            tensor_act(s, SA_FREE, SS_COMPUTE, tmp, 0);
        }
        uint32_t ev = sched_new_event(s), done = sched_new_event(s);
        event_act(s, SA_RECORD, SS_COMPUTE, ev);
        event_act(s, SA_WAIT, SS_D2H, ev);
        tensor_act(s, SA_HOST_ALLOC, SS_D2H, act, 96 * MiB + (uint64_t)l * 4096);
        tensor_act(s, SA_COPY_D2H, SS_D2H, act, 96 * MiB + (uint64_t)l * 4096);
        event_act(s, SA_RECORD, SS_D2H, done);
        event_act(s, SA_WAIT, SS_COMPUTE, done);
        offloaded[l] = done;
        tensor_act(s, SA_FREE, SS_COMPUTE, act, 0);
    }
    for (int l = n_layers - 1; l >= 0; l--) {
        uint64_t act = 1000 + (uint64_t)l * 11;
        uint32_t ready = sched_new_event(s), upd = sched_new_event(s);
        uint32_t room = sched_new_event(s);
        tensor_act(s, SA_ALLOC, SS_COMPUTE, act, 96 * MiB + (uint64_t)l * 4096);
        event_act(s, SA_RECORD, SS_COMPUTE, room);
        event_act(s, SA_WAIT, SS_H2D, offloaded[l]);
        event_act(s, SA_WAIT, SS_H2D, room);
        tensor_act(s, SA_COPY_H2D, SS_H2D, act, 96 * MiB + (uint64_t)l * 4096);
        event_act(s, SA_RECORD, SS_H2D, ready);
        tensor_act(s, SA_HOST_FREE, SS_H2D, act, 0);
        recompute(s, 150);
        event_act(s, SA_WAIT, SS_COMPUTE, ready);
        for (int k = 0; k < 14; k++) {
            uint64_t tmp = tid++;
            tensor_act(s, SA_ALLOC, SS_COMPUTE, tmp, (uint64_t)(2 + k) * 2 * MiB);
            compute(s, 120 + 5 * k, 10000 + l * 100 + k);
            tensor_act(s, SA_FREE, SS_COMPUTE, tmp, 0);
        }
        tensor_act(s, SA_FREE, SS_COMPUTE, act, 0);
        event_act(s, SA_RECORD, SS_COMPUTE, upd);
        event_act(s, SA_WAIT, SS_HOST, upd);
        host_compute(s, SS_HOST, 300);
    }
    free(offloaded);
    *n_actions = sched_count(s);
    return s;
}

static inline size_t read_file(const char *path, char **buf)
{
    FILE *f = fopen(path, "rb");
    *buf = NULL;
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)n + 1);
    size_t got = fread(*buf, 1, (size_t)n, f);
    fclose(f);
    return got;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif

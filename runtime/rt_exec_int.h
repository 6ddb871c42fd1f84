/* rt_exec_int.h — internal to the schedule executor: its state (ex) and live tables, and
 * the helpers that the issue loop (rt_exec.c), the data actions (rt_exec_ops.c) and the
 * CUDA device (rt_cuda_dev.cu: the clock and the median) share. Not an interface: rt_exec.h
 * is what the rest of the runtime calls. */
#ifndef MEMSIM_RT_EXEC_INT_H
#define MEMSIM_RT_EXEC_INT_H

#include "runtime/rt_exec.h"

#include "base/u64map.h"
#include "planners/blockmix.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlive {
    uint64_t addr, bytes;
    int stream;        /* the allocating stream (the allocator's pool) */
    unsigned users;    /* streams that used the block, bit per schedule stream */
} dlive;

typedef struct hlive {
    uint64_t off, bytes;   /* the range (at least 1 byte) */
    uint64_t req;          /* bytes asked for (host accounting) */
    unsigned users;
    size_t last_d2h;       /* verify_swaps: 1 + the copy index of the last D2H copy into the
                              range, 0 when none (or host work used the range since) */
} hlive;

/* A free waiting for events on other streams: a device block (released to the allocator when
 * the last event is reached) or a pinned range (reusable by later HOST_ALLOCs without waiting
 * once reached; until then they make their streams wait on the events). A device block can
 * be released early, when an allocation fails while it waits (release_deferred): it then
 * stays a fence until its events are reached, and a stream handed overlapping bytes waits on
 * them (fence_block). */
typedef struct pend {
    int host, active, outstanding;
    int released;      /* device: already given back to the allocator */
    uint64_t addr, off, bytes;
    void *ev[SS_COUNT];
    int n_ev;
} pend;

typedef struct fitem {
    void *ev;
    uint32_t pend;
} fitem;

/* Events recorded on one stream reach in record order: only the head needs querying. */
typedef struct fifo {
    fitem *v;
    size_t head, n, cap;
} fifo;

typedef struct tev {
    void *e0, *e1;
    size_t action, win;
    uint64_t bytes;
    int d2h;
    double req_us;
    uint64_t tensor;   /* copies: the copied block's id */
    size_t pair;       /* verify_swaps, H2D: 1 + the index of the D2H copy read back */
    int summed, read_back;
} tev;

typedef struct ex {
    const schedule_t *s;
    rt_exec_opts o;
    const rt_dev_ops *d;
    const mb_backend *be;
    rt_exec_result *r;
    alloc_t *alloc;
    blockmix *mix;                         /* what the peak holds (planners/blockmix.h) */
    rt_host_plan hp;
    uint64_t pool, dha_buf, dha_bytes;     /* host addresses */
    uint64_t pool_dev;                     /* the pool's mapped device address */
    struct hstep **steps;                  /* real host steps issued (freed at the end) */
    size_t n_steps, cap_steps;
    int step_fail;                         /* a host step failed (set on the host thread) */
    char step_msg[1200];      /* a host step's failure: its op name and ms_error message */
    void *st[SS_COUNT];
    void *side;                 /* collectives beside their attention kernel (coll_find) */
    void **sev;
    uint32_t n_sev;
    void **wev;                 /* window start events; [0] is the run's start */
    size_t n_win, cur_win;
    void *ev_end;
    tev *cp;                    /* copies */
    size_t n_cp, used_cp;
    tev *op;                    /* per-op events */
    size_t n_op, used_op;
    void **pool_ev;             /* every pool event made (destroyed at the end) */
    size_t n_pool_ev, cap_pool_ev;
    void **free_ev;             /* pool events ready for reuse */
    size_t n_free_ev, cap_free_ev;
    u64map *dmap, *hmap;        /* tensor -> slot */
    dlive *dl;
    size_t n_dl, cap_dl;
    uint32_t *dl_free;
    size_t n_dl_free, cap_dl_free;
    hlive *hl;
    size_t n_hl, cap_hl;
    uint32_t *hl_free;
    size_t n_hl_free, cap_hl_free;
    pend *pd;
    size_t n_pd, cap_pd;
    uint32_t *pd_free;
    size_t n_pd_free, cap_pd_free;
    uint64_t pending_dev;       /* active device pends still holding their block */
    uint64_t fenced_dev;        /* active device pends already released (fences) */
    u64map *alias;              /* trace tensor id -> its latest re-allocation's id
                                   (memory_plan renaming), for the real-kernel hook */
    fifo q[SS_COUNT];
    void **ahead;               /* max_ahead: events after the last compute actions, a ring */
    size_t ahead_head, ahead_n;
    uint64_t host_used;
    uint64_t retries_at_mark;
    double debt_us, empty_us;
    double deadline, t0;
    int stop, hung;
    int sums_on;                /* verify_swaps: the device holds a sum slot per copy */
} ex;

/* CLOCK_MONOTONIC seconds (the watchdog, host spins, wall times of host steps). */
double rt_mono_s(void);
/* The median of v[0..n) (sorts v); 0 for none. */
double rt_median_of(double *v, size_t n);

/* ---- the issue loop's helpers the data actions use (rt_exec.c) ---- */

/* Records the run's failure (outcome, message) in the result and returns st. */
rt_status rtx_fail(ex *x, rt_outcome oc, rt_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A device call's failure at action i: what failed and the device's message. */
rt_status rtx_fail_dev(ex *x, size_t i, const char *what, ms_error *err);
/* A tensor's name for messages (the trace's, else its id). */
const char *rtx_tname(const ex *x, uint64_t id, char *buf, size_t n);
/* Blocks the host on event e under the watchdog. */
rt_status rtx_wait_ev(ex *x, void *e, const char *what, ms_error *err);
/* The untimed event pool (deferred frees and joins). */
void *rtx_pool_get(ex *x, ms_error *err);
void rtx_pool_put(ex *x, void *e);
/* The live device block / pinned range of a tensor, or NULL. */
dlive *rtx_dev_live(ex *x, uint64_t tensor);
hlive *rtx_host_live(ex *x, uint64_t tensor);

/* ---- the data actions (rt_exec_ops.c), issued by rt_exec.c's issue loop ---- */

rt_status rtx_do_copy(ex *x, size_t i, const sched_action *a, ms_error *err);
rt_status rtx_do_compute(ex *x, size_t i, const sched_action *a, ms_error *err);
rt_status rtx_do_host_step(ex *x, size_t i, const sched_action *a, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

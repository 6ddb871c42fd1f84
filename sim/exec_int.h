/* exec_int.h — internal to the schedule executor: its state (ex: the streams, the host
 * thread, the deferred frees) and the helpers that sim/exec.c (the streams, the allocator
 * calls, the run) shares with sim/exec_host.c (the host thread of the issue model, the host
 * clock of traces with host times). Not an interface: exec.h is what callers use. */
#ifndef MEMSIM_EXEC_INT_H
#define MEMSIM_EXEC_INT_H

#include "sim/exec.h"

#include "sim/engine.h"
#include "sim/exec_fw.h"
#include "sim/link.h"
#include "sim/simbackend.h"
#include "sim/timeline.h"
#include "base/u64map.h"

typedef enum st_state {
    ST_IDLE = 0,    /* may start its next action */
    ST_RUN,         /* an action is in progress */
    ST_WAIT,        /* blocked on a WAIT whose event is not reached */
    ST_SYNC_DRAIN,  /* made a synchronizing allocator call; other streams are draining */
    ST_SYNC_COST,   /* drained; paying the call's charged latency */
    ST_DONE
} st_state;

typedef struct stream {
    const uint32_t *q;  /* schedule indices, program order (the queues of x->qbuf or of the
                           schedule's own index) */
    size_t n, pos;
    st_state state;
    int parts;          /* parts of the running action still going (timer, DHA flows) */
    double t_start;     /* when the running action (or the wait / sync) began */
    double t_exec;      /* HOST_COMPUTE: when the CPU took it (FIFO) */
    double t_end_exec;
    uint32_t wait_event;
    int held;           /* wanted to go on but a synchronize holds every stream */
    double held_since;
    int kick_pending;
    double sa_left;     /* cuMemSetAccess mappings of its allocator call still to pace */
    /* host issue model */
    size_t nissued;     /* queue entries the host thread has issued to this stream */
    int starving;       /* idle until the host issues more */
    double starve_since;
    /* host clock (stream-time model with host times) */
    size_t hc_pos;      /* 1 + the queue position whose issue time hc_ready is */
    double hc_ready;
    int hc_wake_pending;
} stream;

/* The host thread of the issue model. */
typedef enum h_state {
    H_READY = 0,    /* may issue its next action */
    H_BUSY,         /* paying an issue cost or an allocator call's latency */
    H_AHEAD,        /* more than issue_ahead compute actions issued and unfinished */
    H_DRAIN,        /* a synchronizing allocator call: every stream must finish its work */
    H_FREES,        /* an allocation failed: waits for the uses of every deferred free */
    H_OPSYNC,       /* an action the host waits for (trace op host_sync, a host_wait copy) is
                       not finished: stream sync_stream has not run all it was given */
    H_DONE
} h_state;

typedef struct hthread {
    size_t next;            /* the next action to issue, program order */
    h_state state;
    int kick_pending;
    int enqueue_after;      /* H_BUSY: issue action `next` when the busy time ends */
    int alloc_busy;         /* H_BUSY: the busy time is an allocator call's */
    double t0;              /* start of the busy time or wait */
    size_t wait_idx;        /* the action a wait is about */
    double drain_cost_us;   /* H_DRAIN: the call's latency, paid once drained */
    size_t call_idx;        /* the allocator call being paid for */
    double call_t0;         /* when it began */
    int call_synced;        /* it synchronized the device */
    int frees_synced;       /* H_FREES: the failed call synchronized: wait for all streams */
    double frees_cost_us;   /* H_FREES: the failed call's latency, paid after the wait */
    int retried;            /* the action at `next` already waited for deferred frees */
    double sa_left;         /* cuMemSetAccess mappings of the call still to pace */
    uint64_t c_issued, c_done; /* compute actions issued, finished */
    int sync_stream;        /* H_OPSYNC: the stream of the action waited for */
    int64_t ahead;          /* the bound; INT64_MAX when unbounded */
    /* from the host's issue of the last iteration mark */
    double busy_us, alloc_us;
    uint64_t retries0;
    /* whole run */
    uint64_t waits, deferred;
} hthread;

/* A free held back until the uses issued on other streams before it have run (PyTorch's
 * record_stream): one "event" per such stream, reached when that stream has passed the
 * actions issued to it before the free. Completed at the next allocation, as PyTorch's
 * process_events does. */
typedef struct pend_free {
    uint64_t tensor;
    uint64_t value;         /* device: the block's address; host: bytes */
    int outstanding;        /* events not yet seen reached */
    uint8_t host;
} pend_free;

/* A stream's events of deferred frees, in the order they were made: their targets never
 * decrease, so only the head can be the next one reached (the runtime keeps the same
 * per-stream FIFOs of CUDA events and polls them in stream order). */
#define PEND_DONE UINT32_MAX  /* pend_ev.pend of an event completed out of turn (flush) */

typedef struct pend_ev {
    uint32_t pend;          /* slot in ex.pd; PEND_DONE: already completed */
    size_t target;          /* reached when the stream's pos >= target */
} pend_ev;

typedef struct pend_fifo {
    pend_ev *v;
    size_t head, n, cap;
} pend_fifo;

/* A live tensor's device block in the executor's table by id (ex.dtab): its address, its
 * blockmix token (bm_add) and the allocator's handle for it (alloc_block_h). Which entries
 * are live is a bitmap beside it (ex.dlive), so that the table itself needs no clearing. */
typedef struct dev_ent {
    uint64_t addr;
    uint64_t mix;
    uint32_t handle;
} dev_ent;

/* Time sums over the measured window (the last iteration, see win_t0). */
typedef struct window {
    double compute_us, recompute_us, host_us, stall_us, alloc_us;
} window;

typedef struct ex {
    const schedule_t *s;
    const sched_action *acts; /* the schedule's actions (sched_actions), nacts of them */
    size_t nacts;
    const machine_t *m;
    sim_opts o;
    eng_t *eng;
    link_t *link;
    simbe_t *be;
    alloc_t *alloc;
    tl_t *tl;
    stream st[SS_COUNT];
    uint32_t *qbuf;
    const sched_brief *brief; /* every action's brief: the index's; NULL: none (ex_brief) */
    const sched_num *num;     /* every action's bytes or duration: the index's, where the run
                                 reads no action's numbers but through ex_bytes and ex_dur_us
                                 (setup); NULL: the actions' own */
    uint8_t *reached;
    uint32_t nevents;
    u64map *dev;         /* tensor id -> device address (issue model, or sparse ids) */
    dev_ent *dtab;       /* else: the live device tensors by id, ndtab of them (every */
    size_t ndtab;        /* ALLOC's id is below ndtab); NULL: x->dev serves */
    uint64_t *dlive;     /* bit id of word id / 64: dtab[id] is live */
    blockmix *mix;       /* what the peak holds (sim_result.peak_live_bytes) */
    u64map *host;        /* tensor id -> host bytes */
    uint64_t host_used, host_peak, host_cap;
    double host_free_at; /* the host CPU is a FIFO server */
    int sync_owner;      /* stream holding everything, -1: none */
    double sync_cost_us;
    /* host issue model (o.issue_ahead != 0) */
    int issue;
    hthread h;
    /* host times of the trace's ops (trace_op.host_us, host_sync; captured traces) */
    int host_times;      /* the trace gives some: COMPUTE issues cost them, not issue_us */
    int host_clock;      /* stream-time model: compute waits for the host's issue time */
    double hc_t;         /* the host clock: when it issued the last compute action */
    int hc_last_rec;     /* the last compute action issued was a recomputation ... */
    int32_t hc_last_layer; /* ... of this layer */
    exfw *fw;            /* autograd hooks' host costs (host_times only; NULL: none) */
    pend_free *pd;       /* deferred frees (slots; free slots listed in pd_free) */
    size_t n_pd, cap_pd;
    uint32_t *pd_free;
    size_t n_pd_free, cap_pd_free;
    size_t n_live[2];    /* deferred frees not yet done: device, host */
    pend_fifo fq[SS_COUNT];
    u64map *duse;        /* tensor -> allocating stream | streams that used it << 8 */
    u64map *huse;        /* tensor -> streams that used its host memory */
    int side_defer;      /* FREE.side_use defers: a PyTorch allocator (not one with
                            ALLOC_CAP_STATIC_PLAN, whose planned addresses no recordStream
                            touches) */
    /* measured window: from the last TM_ITER mark on the compute stream (or 0) */
    double win_t0;
    window w;
    double h2d0_us, d2h0_us;
    uint64_t retries0;
    double t_end;
    /* how the run ended */
    int stop;
    res_status rstatus;
    ms_status fatal;
    char failure[512];
    ms_error *err;
} ex;

/* Track SS_COUNT is the host thread of the issue model. */
#define TRACK_HOST_THREAD SS_COUNT

/* ---- sim/exec.c: helpers the host side uses ---- */

/* Schedule action idx (< x->nacts). */
static inline const sched_action *ex_act(const ex *x, size_t idx) { return &x->acts[idx]; }
/* Action idx's bytes (an ALLOC's, COPY's, HOST_ALLOC's) and duration (a COMPUTE's,
 * HOST_COMPUTE's): from the index's dense numbers where the run has them, so that the walk
 * does not touch the 120-byte action for them. */
static inline uint64_t ex_bytes(const ex *x, size_t idx)
{
    return x->num ? x->num[idx].bytes : x->acts[idx].bytes;
}
static inline double ex_dur_us(const ex *x, size_t idx)
{
    return x->num ? x->num[idx].dur_us : x->acts[idx].dur_us;
}

/* Adds the part of [s_us, e_us] inside the measured window to *field. */
void ex_acc(const ex *x, double *field, double s_us, double e_us);
/* Stops the run with a fatal error (the first one is kept). */
void ex_fail_run(ex *x, ms_status st, const char *fmt_msg);
void ex_fail_at(ex *x, ms_status st, size_t idx, const char *what);
const char *ex_alloc_why(const ex *x, ms_status st);
/* Stops the run with an outcome (out of device or host memory). */
void ex_end_as(ex *x, res_status rs);
const trace_op *ex_action_op(const ex *x, const sched_action *a);
const char *ex_tensor_name(const ex *x, uint64_t id, char *buf, size_t n);
void ex_mem_sample(ex *x);
int ex_spans_on(const ex *x);
void ex_add_span(ex *x, int track, double s_us, double e_us, size_t idx, const char *name,
                 const char *cat);
void ex_kick(ex *x, int s);
void ex_advance(ex *x, int s);
void ex_oom_failure(ex *x, int s, size_t idx, const sched_action *a);
void ex_oohm_failure(ex *x, int s, size_t idx, const sched_action *a);
int ex_pace_mapping(ex *x, double *left, eng_fn cb, uint64_t arg);
double ex_take_call_cost(ex *x, int *synced, double *paced);
int ex_pool_stream(int s, int32_t pool);
/* Deferred frees (issue model). */
int ex_pend_add(ex *x, uint64_t tensor, uint64_t value, unsigned mask, int host);
int ex_pending_all_done(const ex *x);
int ex_process_pending(ex *x);

/* ---- sim/exec_host.c: the host side ---- */

/* Host times: the host waits for this copy, or for this compute action, before it goes on. */
int exh_action_host_wait(const ex *x, const sched_action *a);
int exh_compute_host_sync(const ex *x, const sched_action *a);
/* The host thread of the issue model: lets it go on; ends its wait if a stream's progress
 * ended it. */
void exh_kick(ex *x);
void exh_check(ex *x);
/* Issue model: stream s gets work again after waiting for the host thread. */
void exh_end_starve(ex *x, int s);
/* Host clock: compute action a at the head of stream s may start now (1) or waits (0). */
int exh_clock_ready(ex *x, int s, const sched_action *a);

#endif

/* rt_exec.h — the runtime's schedule executor: runs a lowered schedule (planners/schedule.h)
 * on a GPU. One CUDA stream per schedule stream (compute, D2H offload, H2D prefetch, host),
 * one CUDA event per schedule event; the host thread walks the actions in program order and
 * enqueues each on its stream, calling the allocator (memory/alloc.h) over a memory backend
 * at issue time. Copies are real cudaMemcpyAsync between device blocks and one pinned host
 * pool; compute actions are calibrated spin kernels that last the action's dur_us and touch
 * their output tensors; DHA computes stream-read mapped pinned memory; host work runs on a
 * CPU thread in stream order. Measures iteration times with events, copy times, peaks.
 * Semantics and deviations: docs/RUNTIME.md. Used by runtime/rt_run.c (`memsim run`) and
 * the tests.
 *
 * The executor talks to the device only through rt_dev_ops, so its host-side logic (issue
 * order, deferred frees, the pinned pool, OOM clean-up, the watchdog) can be tested without a
 * GPU against a fake device; rt_cuda_dev_new gives the real one. */
#ifndef MEMSIM_RT_EXEC_H
#define MEMSIM_RT_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "memory/alloc.h"
#include "planners/blockmix.h"
#include "planners/lower.h"
#include "planners/schedule.h"
#include "traces/trace.h"

/* ---- the device interface ---- */

#define RT_TOUCH_MAX 4

/* What one kernel launch does: occupy the GPU for dur_us, touch the first and last 16 bytes
 * of up to RT_TOUCH_MAX device ranges (read-modify-write), and for DHA read / write that many
 * bytes of pinned mapped host memory. */
typedef struct rt_kernel_args {
    double dur_us;
    int n_touch;
    uint64_t touch_addr[RT_TOUCH_MAX], touch_bytes[RT_TOUCH_MAX];
    uint64_t dha_read_host, dha_read_bytes;    /* host addresses (pinned, mapped) */
    uint64_t dha_write_host, dha_write_bytes;
} rt_kernel_args;

#define RT_CALIB_CHECKS 4

/* The spin kernel's calibration: a kernel asked for d microseconds spins for
 * (d - overhead_us) / slope, so that back to back on one stream each takes d. */
typedef struct rt_calib {
    int valid;
    double overhead_us;      /* per-kernel stream time beyond the spin (launch, block skew) */
    double slope;            /* stream time per requested spin time (about 1) */
    double empty_us;         /* an empty kernel back to back: the shortest compute action */
    double check_req_us[RT_CALIB_CHECKS];
    double check_b2b_us[RT_CALIB_CHECKS];    /* mean per kernel, back to back */
    double check_single_us[RT_CALIB_CHECKS]; /* median of single launches between events */
} rt_calib;

/* Device operations. Streams and events are opaque pointers. An operation that can fail
 * fills err (file, line, the failing call) and returns its status. query returns 1 when the
 * event is reached, 0 when not yet, -1 on error (err filled); host_wait blocks the host
 * until the event is reached (1), timeout_s passes (0) or an error (-1, err filled). */
typedef struct rt_dev_ops {
    void *ctx;
    const char *name;
    rt_status (*stream_new)(void *ctx, void **s, ms_error *err);
    void (*stream_free)(void *ctx, void *s);
    rt_status (*event_new)(void *ctx, int timing, void **e, ms_error *err);
    void (*event_free)(void *ctx, void *e);
    rt_status (*record)(void *ctx, void *e, void *s, ms_error *err);
    rt_status (*wait)(void *ctx, void *s, void *e, ms_error *err);
    int (*query)(void *ctx, void *e, ms_error *err);
    int (*host_wait)(void *ctx, void *e, double timeout_s, ms_error *err);
    rt_status (*elapsed_ms)(void *ctx, void *e0, void *e1, float *ms, ms_error *err);
    rt_status (*copy)(void *ctx, void *s, uint64_t dst, uint64_t src, uint64_t bytes, int d2h,
                      ms_error *err);
    rt_status (*kernel)(void *ctx, void *s, const rt_kernel_args *k, ms_error *err);
    rt_status (*host_work)(void *ctx, void *s, double dur_us, ms_error *err);
    rt_status (*calibrate)(void *ctx, rt_calib *c, ms_error *err);
    /* Real host work: fn(arg) on the host thread that runs host work, in the order of stream
     * s (as host_work, with fn's run in place of the spin). NULL: the device has none. */
    rt_status (*host_call)(void *ctx, void *s, void (*fn)(void *arg), void *arg, ms_error *err);
    /* The address kernels use for pinned mapped host memory at host address `host`
     * (cudaHostGetDevicePointer). NULL: the same address (unified addressing). */
    rt_status (*host_map)(void *ctx, uint64_t host, uint64_t *dev, ms_error *err);
    /* Swap verification (rt_exec_opts.verify_swaps). sum_begin: n 64-bit slots, zeroed,
     * before the run. sum_add: on stream s, adds to slot k rt_checksum of the device bytes
     * [dev, dev + bytes) taken as position pos onwards of a copy's byte stream (pieces of one
     * copy add up to the checksum of the whole). sum_read: the n slots, once every stream is
     * done. sum_end: releases them. NULL: the device cannot verify copies. */
    rt_status (*sum_begin)(void *ctx, size_t n, ms_error *err);
    rt_status (*sum_add)(void *ctx, void *s, size_t k, uint64_t dev, uint64_t bytes,
                         uint64_t pos, ms_error *err);
    rt_status (*sum_read)(void *ctx, uint64_t *out, size_t n, ms_error *err);
    void (*sum_end)(void *ctx);
} rt_dev_ops;

/* The checksum of `bytes` bytes at p that stand at position pos onwards of a byte stream:
 * the sum mod 2^64 over each byte b at stream position q of (b << 8 (q mod 8)) * (2 floor(q/8)
 * + 1), i.e. each little-endian 8-byte word of the stream times an odd weight that grows
 * with its index. Linear, so pieces add up and the GPU's blocks may add in any order
 * (deterministic); any change of one byte changes it; moved words mostly do. The CUDA
 * device's kernel computes the same value (tests/test_rt_partial compares them). */
uint64_t rt_checksum(const void *p, uint64_t bytes, uint64_t pos);

/* The CUDA device (current device of the calling thread). */
rt_status rt_cuda_dev_new(int device, rt_dev_ops **out, ms_error *err);
void rt_cuda_dev_free(rt_dev_ops *d);

/* How the CUDA device runs host work (HOST_COMPUTE) on its stream.
 * RT_HOST_THREAD (default): a worker thread of the runtime polls an event recorded on the
 * stream, spins, then releases the stream through a counter in pinned memory that the stream
 * waits on (cuStreamWaitValue32); jobs run one at a time in issue order, as the simulator's
 * host CPU does. About 10 us per job beyond its work on an H200 (2026-11-21). Falls back to
 * the callback when the driver lacks stream memory operations.
 * RT_HOST_CALLBACK: cudaLaunchHostFunc; the driver's callback thread spins. About 60 us per
 * job beyond its work on the same H200 (the driver's wake-up). */
typedef enum rt_host_mode { RT_HOST_CALLBACK = 0, RT_HOST_THREAD } rt_host_mode;
void rt_cuda_dev_set_host_mode(rt_dev_ops *d, rt_host_mode m);

/* ---- the pinned host pool plan ---- */

/* Where each HOST_ALLOC's bytes live in the one pinned pool: first fit in program order over
 * the HOST_ALLOC / HOST_FREE actions (lowest free offset, offsets aligned), so that a tensor
 * never shares bytes with one that is live at the same point of the program. A D2H copy of a
 * tensor without host memory goes to a scratch area at the pool's end. */
typedef struct rt_host_plan {
    uint64_t *offsets;      /* per action: the HOST_ALLOC's offset, UINT64_MAX elsewhere */
    uint8_t *stream_mask;   /* per action: for a HOST_ALLOC, the streams that use its bytes
                               (copies and the HOST_FREE), bit k = schedule stream k */
    uint64_t pool_bytes;    /* the pool's size: highest end + scratch */
    uint64_t peak_bytes;    /* largest sum of live host bytes (as the simulator counts it) */
    uint64_t scratch_off, scratch_bytes;
} rt_host_plan;

ms_status rt_host_plan_make(const schedule_t *s, uint64_t align_bytes, rt_host_plan *hp,
                            ms_error *err);
void rt_host_plan_release(rt_host_plan *hp);

/* ---- execution ---- */

typedef struct rt_exec_opts {
    const char *allocator;         /* registry name (default "caching") */
    const alloc_config *alloc_cfg; /* NULL: defaults */
    const trace_t *trace;          /* op outputs to touch and names in messages; may be NULL */
    int per_op;                    /* events around every compute action (measured op times) */
    int alloc_sync;                /* 1: each ALLOC / FREE first waits until its stream has
                                      reached it, so the allocator sees the order the simulator
                                      models; 0 (default): the host issues ahead (PyTorch) */
    int max_ahead;                 /* > 0: the host stays at most this many compute actions
                                      ahead of the compute stream (it waits), so deferred frees
                                      complete near the point the simulator frees; 0 (default):
                                      no bound beyond CUDA's own launch queue */
    int spin_credit;               /* 1 (default): an op shorter than the shortest kernel runs
                                      that long and the excess is taken off the next ops */
    uint64_t host_limit_bytes;     /* a pinned pool above this is out of host memory; 0: none */
    const ms_error *backend_error; /* the backend's record of its last failed call, which the
                                      mb_ops interface does not return (rt_backend_error);
                                      NULL: failures of the backend are named by status only */
    uint64_t large_copy_bytes;     /* copies at least this big count in the link statistics
                                      (default 32 MiB) */
    double watchdog_s;             /* the whole run must end within this; 0: derived */
    /* Real kernels (runtime/model_rt.h): when compute is set, a compute action with a trace op
     * runs compute(...) on its stream with the device addresses of the op's inputs and outputs
     * instead of the spin kernel; set_iter is told the value of every compute-stream
     * `mark iter`. NULL: spin kernels of the modelled duration. */
    rt_status (*compute)(void *ctx, void *stream, const trace_op *op, const uint64_t *in_addr,
                         const uint64_t *out_addr, ms_error *err);
    void (*set_iter)(void *ctx, int iter);
    void *compute_ctx;
    /* For the real-kernel hook: where lowering put the rounding buffers' members (their
     * operand addresses are slices of the buffer blocks the schedule allocates);
     * lower_rb_map_new on the schedule's trace and plan. NULL: no rounding buffers. Tensors
     * re-allocated under fresh ids (plan knob memory_plan) are found without it. */
    const lower_rb_map *rb_map;
    /* Token-wise partial replays (MEMO, schedule field replay_frac in (0, 1)): such a compute
     * action runs compute_rows(...) instead of compute, on the token rows
     * [(1 - frac) T, T) only; in_part[j] / out_part[j] are 1 where the operand's block is a
     * replay transient holding only those rows (ceil(frac * bytes)), 0 where it is full size
     * (the in-place targets, the tensors read as they are, the weights). NULL: such an action
     * stops the run with a message. */
    rt_status (*compute_rows)(void *ctx, void *stream, const trace_op *op,
                              const uint64_t *in_addr, const uint64_t *out_addr,
                              const uint8_t *in_part, const uint8_t *out_part, double frac,
                              ms_error *err);
    /* Module-level host gradients (lower_dha's grad_host.N knobs): a gradient buffer whose
     * device block holds only the modules kept on the GPU, the others written to its pinned
     * host home. A compute action writing such a buffer runs compute_split instead of
     * compute, out_addr[j] being the device block and out_host[j] the mapped address of the
     * whole host home (0 for an output that is not split); the hook knows which module lives
     * where. NULL: such an action stops the run with a message. */
    rt_status (*compute_split)(void *ctx, void *stream, const trace_op *op,
                               const uint64_t *in_addr, const uint64_t *out_addr,
                               const uint64_t *out_host, ms_error *err);
    /* The token-row layout of a trace tensor: 1 with *arrays row-major arrays of T rows of
     * *row_bytes each (norm statistics: 2, mean then rstd), 0 when its bytes are not token
     * rows. With plan and this set, copies of partially swapped tensors move the first
     * ceil(alpha * T) rows of each array (a rounding-buffer block: of each member, packed on
     * the host in the block's layout order), so that the rows a replay does not recompute are
     * the ones that came back; the byte count is the schedule's. NULL: one copy of the
     * leading bytes (right for spin kernels, wrong data for several partial members). */
    int (*token_rows)(void *ctx, uint64_t tensor, unsigned *arrays, uint64_t *row_bytes);
    const plan_t *plan;            /* the plan the schedule was lowered from (member alphas) */
    /* Host-resident tensors with real kernels (DHA and host-optimizer plans,
     * planners/memferry/lower_dha.c). An operand of a real-kernel compute action that has no device
     * block but a pinned host range under its own id (a HOST_ALLOC of the trace tensor: a
     * parameter read over DHA, a gradient written to the host) is given to the kernel as
     * the mapped device address of that range (host_map). host_init, when set, is called at
     * each HOST_ALLOC of a trace tensor with the range's mapped address, on the action's
     * stream (the dispatcher seeds parameters and zeroes gradients in their host homes). */
    rt_status (*host_init)(void *ctx, void *stream, uint64_t tensor, uint64_t dev_addr,
                           uint64_t bytes, ms_error *err);
    /* Host compute with real math (HOST_COMPUTE with a trace op, e.g. `<group>.optim.host`):
     * host_prepare, at issue time on the issuing thread, lists in ids (at most max) the
     * tensors whose pinned host ranges the step uses and sets *tag (passed back); it returns
     * their number, or -1 (err filled) for an op it has no host math for. The
     * executor finds each range (its own HOST_ALLOC) and has the device run host_compute
     * with their host addresses and bytes on its host thread in the host stream's order
     * (rt_dev_ops.host_call) instead of the spin. NULL: host work spins dur_us. */
    int (*host_prepare)(void *ctx, const trace_op *op, uint64_t *ids, size_t max,
                        int64_t *tag, ms_error *err);
    rt_status (*host_compute)(void *ctx, const trace_op *op, int64_t tag,
                              const uint64_t *host_addr, const uint64_t *host_bytes, size_t n,
                              ms_error *err);
    /* Collectives across the GPUs of a node (runtime/rt_coll.h, `memsim run` on several
     * GPUs). coll_find, for compute action a of trace op op: the trace op of the collective
     * the action runs, op itself when it is one, or the ".ovl" collective merged into it when
     * a->ovl is set; NULL for none (the action spins as without the hook); *spin_us is what
     * the spin kernel on the action's stream still lasts (0 beside a collective alone, the
     * attention's own time beside a merged ring). coll_run then runs collective c on stream
     * s with the device addresses and bytes of its inputs and outputs (found as the
     * real-kernel hook's are): s is the action's stream for a collective alone, the
     * executor's side stream for a merged one (forked from the action's stream before it and
     * joined back after the spin, so the action lasts the longer of the two). NULL: every
     * collective spins its modelled duration on one GPU. */
    const trace_op *(*coll_find)(void *ctx, const sched_action *a, const trace_op *op,
                                 double *spin_us);
    rt_status (*coll_run)(void *ctx, void *s, const sched_action *a, const trace_op *c,
                          const uint64_t *in_addr, const uint64_t *in_bytes,
                          const uint64_t *out_addr, const uint64_t *out_bytes, ms_error *err);
    void *coll_ctx;
    /* 1: checksum swapped bytes. Every D2H copy first checksums the device bytes it reads
     * (exactly the pieces it copies, on its stream just before the copy); every H2D copy
     * checksums the device bytes it wrote, on its stream just after. An H2D copy reads back
     * the bytes of the last D2H copy into its pinned range, unless host work or a kernel on
     * mapped host memory used that range in between; the pair's sums are compared at the end
     * of the run (no host wait during it). A difference stops the run with an error naming
     * both tensors, both actions and both sums. Costs a read of every copied byte on the
     * copy streams (outside the copies' timing events, but delaying them) and two kernels per
     * copy piece. Needs the device's sum_* entries. */
    int verify_swaps;
} rt_exec_opts;

void rt_exec_opts_default(rt_exec_opts *o);

typedef enum rt_outcome { RTX_OK = 0, RTX_OOM, RTX_OOHM, RTX_ERROR } rt_outcome;
const char *rt_outcome_name(rt_outcome o); /* "ok", "oom", "oohm", "error" */

/* One measured window: window 0 runs from the start to the first "mark iter" on the compute
 * stream, window k from the k-th such mark to the next (the last one to the end of all
 * streams, as the simulator measures its last iteration). */
typedef struct rt_window {
    double time_s;               /* measured with events on the compute stream */
    double nominal_s;            /* sum of the compute actions' dur_us issued in it */
    double recompute_nominal_s;
    double host_nominal_s;       /* sum of HOST_COMPUTE dur_us */
    double host_measured_s;      /* wall time of the real host steps issued in it (real math) */
    double compute_measured_s;   /* sum of measured compute action times (per_op only) */
    double h2d_busy_s, d2h_busy_s;  /* sum of the copies' event-measured times */
    uint64_t h2d_bytes, d2h_bytes;
    uint64_t n_compute, n_copies;
} rt_window;

typedef struct rt_op_time {
    size_t action;
    int64_t op;
    double req_us, meas_us;
    int recompute;
} rt_op_time;

/* Copies of at least large_copy_bytes in one direction over the whole run. */
typedef struct rt_link_stat {
    uint64_t n, bytes;
    double busy_s;
    double agg_Bps;              /* bytes / busy time */
    double min_Bps, median_Bps, max_Bps;
} rt_link_stat;

typedef struct rt_exec_result {
    rt_outcome outcome;
    char failure[1024];          /* the failing request and the allocator's state, or the
                                    CUDA call and its message */
    int leaked;                  /* 1 after a watchdog timeout: device resources were left to
                                    process exit (freeing memory in use could hang) */
    rt_window *win;
    size_t n_win;
    /* the last window (the reported iteration) */
    double iter_time_s, nominal_s, compute_busy_s, h2d_busy_s, d2h_busy_s, host_busy_s;
    double recompute_s;
    alloc_stats astats;          /* allocator counters at the end */
    uint64_t alloc_retries_per_iter;
    uint64_t host_peak_bytes, host_pool_bytes;
    /* device bytes live by kind at the peak of their sum, or at the failing request
     * (planners/blockmix.h: the simulator's breakdown, by the same code) */
    uint64_t peak_live_bytes[BM_COUNT];
    int peak_live_at_failure;
    uint64_t deferred_frees;     /* device frees held back until other streams' use ended */
    uint64_t oom_drains;         /* failed allocations (OOM, or the static arena's planned
                                    address still held by a block whose free waits) retried
                                    after giving every deferred free to the allocator */
    uint64_t alloc_fences;       /* deferred frees a new block overlapped, whose events its
                                    stream then waited on (stream waits, not host waits) */
    uint64_t alloc_waits;        /* alloc_sync waits */
    uint64_t ahead_waits;        /* max_ahead waits */
    uint64_t kernels, copies;
    uint64_t host_operands;      /* real-kernel operands found in pinned host memory (DHA) */
    uint64_t host_steps;         /* HOST_COMPUTE actions run with real math (host_compute) */
    uint64_t host_inits;         /* host_init calls */
    uint64_t collectives;        /* compute actions that ran a collective (coll_run) */
    uint64_t collectives_beside; /* of those, rings run beside their attention's spin */
    /* verify_swaps: copies checksummed; H2D copies whose sum equalled the D2H copy's whose
     * bytes they read back (verified) or not (mismatches); copies without a partner in the
     * run (a D2H never read back, an H2D of bytes no D2H of the run wrote or that host work
     * used in between: unpaired). */
    uint64_t swap_sums, swap_verified, swap_mismatches, swap_unpaired;
    rt_link_stat h2d_large, d2h_large;
    rt_op_time *ops;             /* per_op: every compute action, in program order */
    size_t n_ops;
    double issue_s;              /* host time to enqueue the whole schedule */
    double wall_s;               /* host time from the first action to the end of all work */
    rt_calib calib;
} rt_exec_result;

void rt_exec_result_release(rt_exec_result *r);

/* Runs schedule s on device dev with allocator o->allocator over backend be (its host_alloc
 * gives the pinned pool). RT_OK when the run ended with a result: r->outcome ok, oom (a
 * device allocation failed even after every deferred free was released) or oohm (the
 * pinned pool could not be had); in every case all streams were synchronized and every
 * block, event, stream and pinned buffer released. RT_ERR_INVALID for a schedule that does
 * not validate; RT_ERR_CUDA for a CUDA failure, a watchdog timeout or (verify_swaps) swapped
 * bytes that came back different (r->outcome error, r->failure says which call or copy,
 * and err holds the same text). */
rt_status rt_exec_run(const schedule_t *s, const rt_exec_opts *o, const rt_dev_ops *dev,
                      const mb_backend *be, rt_exec_result *r, ms_error *err);


/* ---- recording a run as a workload trace (`memsim run --record`) ---- */

/* The recorded.* meta lines of a recorded trace (FORMAT.md, Workload trace). NULL: "-". */
typedef struct rt_record_info {
    const char *device;     /* recorded.device: the GPU's name */
    const char *date;       /* recorded.date: YYYY-MM-DD (UTC) */
    const char *math;       /* recorded.math: spin or real */
    const char *from;       /* recorded.from: the run's workload (model and options) */
} rt_record_info;

/* A copy of trace t (its meta, then every record in order: the alloc / free program is
 * unchanged) in which each op's dur_us is the measured time of the compute action that
 * executed that very op: ops[k] with ops[k].op == the op's id and recompute == 0 (the first
 * such action if there were several). Recompute actions replay ops under the same id, so
 * they are skipped: they are not trace ops. An op that no action measured keeps its dur_us.
 * *n_measured (may be NULL) counts the ops replaced. The caller frees *out. */
ms_status rt_record_trace(const trace_t *t, const rt_op_time *ops, size_t n_ops,
                          const rt_record_info *info, trace_t **out, size_t *n_measured,
                          ms_error *err);

#ifdef __cplusplus
}
#endif

#endif

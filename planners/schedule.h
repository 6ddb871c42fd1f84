/* schedule.h — the lowered program both executors run: one list of actions in program order,
 * each bound to a stream, ordered across streams only by record/wait events (CUDA semantics:
 * a stream runs its actions in order; WAIT(e) blocks until RECORD(e) was reached on its
 * stream). Made by planners/lower.c from a trace and a plan; executed by sim/exec.c against
 * simulated resources and by runtime/ on CUDA streams. Dumpable as text for debugging. */
#ifndef MEMSIM_SCHEDULE_H
#define MEMSIM_SCHEDULE_H

#include "traces/trace.h"

typedef enum sched_stream {
    SS_COMPUTE = 0,  /* GPU compute stream: ops, recomputation, allocations */
    SS_D2H,          /* offload stream (device to host copies) */
    SS_H2D,          /* prefetch stream (host to device copies) */
    SS_HOST,         /* host CPU thread (optimizer steps on the host) */
    SS_COUNT
} sched_stream;

typedef enum sched_kind {
    SA_COMPUTE = 0,  /* run op: dur_us on the GPU, plus DHA host traffic if any */
    SA_ALLOC,        /* allocator: bytes for tensor */
    SA_FREE,         /* allocator: free tensor's block */
    SA_COPY_D2H,     /* bytes of tensor to host, over the link */
    SA_COPY_H2D,     /* bytes of tensor from host, over the link */
    SA_HOST_ALLOC,   /* reserve bytes of (pinned) host memory for tensor; OOHM if none */
    SA_HOST_FREE,    /* release tensor's host bytes */
    SA_HOST_COMPUTE, /* host CPU work of dur_us (e.g. CPU Adam on a chunk) */
    SA_RECORD,       /* event reached */
    SA_WAIT,         /* block until event reached */
    SA_MARK,         /* iteration / phase boundary (bookkeeping only) */
    SA_COUNT
} sched_kind;

/* What a device block holds, set by the lowering that makes the ALLOC: executors report the
 * peak's bytes by these kinds (planners/blockmix.h) without knowing any lowering's ids.
 * SB_TRACE (0, what a zeroed action has) stands for the trace class of tensor `tensor`, a
 * trace id; a lowering that invents an id, or gives a trace tensor a new one, sets the kind. */
typedef enum sched_block {
    SB_TRACE = 0,    /* the trace class of the tensor (the trace's own allocations) */
    SB_PARAM,        /* parameters */
    SB_GRAD,         /* gradients */
    SB_OPTSTATE,     /* optimizer states */
    SB_CHUNK,        /* model-state chunks (ProTrain's persistent chunks) */
    SB_ACT_SKEL,     /* skeletal activations */
    SB_ACT_TRANS,    /* transient activations */
    SB_WORKSPACE,    /* workspaces */
    SB_RBUF,         /* MEMO's rounding buffers */
    SB_IDLE,         /* MEMO's idle rounding buffer */
    SB_STAGING,      /* staging: chunk buffers, DHA buckets and casts, copies in flight */
    SB_OTHER,        /* anything else */
    SB_COUNT
} sched_block;

typedef struct sched_action {
    sched_kind kind;
    sched_stream stream;
    uint32_t event;           /* RECORD / WAIT */
    uint64_t tensor;          /* ALLOC / FREE / COPY / HOST_*: tensor id */
    uint64_t bytes;           /* ALLOC, COPY, HOST_ALLOC */
    int64_t op;               /* COMPUTE: trace op id; -1 otherwise */
    double dur_us;            /* COMPUTE: GPU time when not link-bound; HOST_COMPUTE: CPU time */
    uint64_t host_read_bytes; /* COMPUTE under DHA: bytes read across the link */
    uint64_t host_write_bytes;
    double dha_eff;           /* DHA efficiency for this op (1 = link rate) */
    uint8_t recompute;        /* COMPUTE: a recomputation (extra work) */
    uint8_t ovl;              /* COMPUTE of an attention op: the ".ovl" collective just before
                                 it in the trace (its layer and phase: the CP ring exchange)
                                 was merged into it (planners/lower_replay.c lw_ovl_absorb), so
                                 dur_us is the larger of the two. The simulator needs no more
                                 than dur_us; the runtime on several GPUs runs the collective
                                 beside the kernel (docs/RUNTIME.md, "Several GPUs") */
    double replay_frac;       /* COMPUTE of a token-wise partial replay (MEMO's (1 - alpha)
                                 tokens, planners/lower_replay.c lw_chain_recompute): the op
                                 runs on the last replay_frac of its token rows,
                                 [(1 - replay_frac) T, T);
                                 its in-place targets are full size, its other transients
                                 ceil(replay_frac * bytes) holding only those rows. 0: the
                                 whole op. dur_us already carries the fraction; the simulator
                                 ignores this field, the runtime's real kernels use it */
    uint8_t host_wait;        /* COPY: the program's host waits for the copy to finish before
                                 it goes on (a blocking copy: PyTorch's copy_ to pinned memory
                                 with non_blocking=False, as save_on_cpu's pack hook makes) */
    uint8_t side_use;         /* FREE: a collective on a framework side stream used the block
                                 (c10d's recordStream on its NCCL stream, plan knob
                                 record_stream): with the host issue model its free waits
                                 for the compute stream's work issued before it */
    int32_t pool;             /* ALLOC: 0 = the allocator pool of the action's stream; k > 0 =
                                 the pool of the framework's side stream k (the trace's
                                 tensor stream, plan knob stream_pools), e.g. TE's cp stream */
    uint8_t block;            /* ALLOC: sched_block, what the block holds */
    int32_t layer;
    trace_phase phase;
    trace_markkind mark;      /* MARK: what kind */
    int64_t mark_value;
} sched_action;

typedef struct schedule schedule_t;

schedule_t *sched_new(void);
void sched_free(schedule_t *s);
ms_status sched_add(schedule_t *s, const sched_action *a);
/* A new action at the end, its contents undefined, for the caller to fill in place (valid
 * until the schedule next grows); NULL when out of memory. */
sched_action *sched_append(schedule_t *s);
/* A fresh event id (events are numbered from 0). */
uint32_t sched_new_event(schedule_t *s);
uint32_t sched_event_count(const schedule_t *s);
size_t sched_count(const schedule_t *s);
/* Room for n actions in all, so that a builder that knows about how many it will add does
 * not grow the array step by step. MS_ERR_NOMEM when it cannot. */
ms_status sched_reserve(schedule_t *s, size_t n);
const sched_action *sched_get(const schedule_t *s, size_t i);
/* The actions in program order (*n of them; NULL when none), valid until the schedule next
 * changes: for an executor that looks actions up by index many times per run. */
const sched_action *sched_actions(const schedule_t *s, size_t *n);
/* The same, to change the actions' numbers in place (planners/lower.c lower_bind): their
 * kinds, streams and tensor ids stay as they are, and so do the rest of their briefs
 * (sched_brief: events, pools, blocks, recompute flags, mark kinds), so that the stream
 * index (sched_index) stays valid. */
sched_action *sched_actions_edit(schedule_t *s, size_t *n);

/* What an executor reads of an action at each step, in 16 bytes where the action takes 120:
 * the structure binding leaves as it is (sched_actions_edit), so that an executor walking
 * the streams touches the actions only for their numbers (a sweep's three gpt-7b schedules
 * take 0.45-0.71 MB each as actions, 60-95 KB as briefs). */
typedef struct sched_brief {
    uint64_t id;        /* RECORD, WAIT: the event; any other kind: the tensor */
    int32_t pool;       /* sched_action.pool (an ALLOC's) */
    uint8_t kind;       /* sched_kind */
    uint8_t block;      /* sched_action.block (an ALLOC's) */
    uint8_t recompute;  /* sched_action.recompute (a COMPUTE's) */
    union {
        uint8_t iter;   /* MARK: 1 for a mark of kind TM_ITER */
        uint8_t dha;    /* COMPUTE: 1 when it moves bytes across the link (host_read_bytes
                           or host_write_bytes not 0) */
    };
} sched_brief;

/* The number of an action that a binding changes (planners/lower.c lower_bind), in 8 bytes:
 * an ALLOC's, COPY's or HOST_ALLOC's bytes, a COMPUTE's or HOST_COMPUTE's dur_us (0 for the
 * other kinds). */
typedef union sched_num {
    uint64_t bytes;
    double dur_us;
} sched_num;

/* Writes a's brief into *b (a's kind below SA_COUNT: the caller checks it). */
void sched_brief_put(sched_brief *b, const sched_action *a);

/* The actions of each stream in program order, for an executor that runs a schedule many
 * times with new numbers (a sweep's re-bound templates, planners/lower_reuse.c): what it
 * would otherwise find by a pass over all the actions at every run. Built on request by
 * sched_index_build; dropped when an action is added. */
typedef struct sched_index {
    const uint32_t *q[SS_COUNT];  /* stream k's action indices, in program order */
    size_t n[SS_COUNT];
    const uint32_t *timed;        /* the COMPUTE and HOST_COMPUTE actions, in program order:
                                     their durations are numbers, checked at each run */
    size_t n_timed;
    const sched_brief *brief;     /* every action's brief, in program order */
    const sched_num *num;         /* every action's number, in program order (see
                                     sched_nums_edit) */
    uint64_t top_alloc;           /* the largest ALLOC tensor id (0 when none) */
    int any_alloc;                /* there is an ALLOC */
} sched_index;

/* Builds s's index. MS_ERR_INVALID (and no index) when an action's stream or kind is out of
 * range or a COMPUTE is off the compute stream: an executor then finds and reports that in
 * its own pass. MS_ERR_NOMEM when out of memory. */
ms_status sched_index_build(schedule_t *s);
/* The index, or NULL when none is built (or it was dropped). */
const sched_index *sched_get_index(const schedule_t *s);
/* The index's numbers (*n of them), to change in place: a binding writes 8 bytes an action
 * into one dense array where the actions' own fields lie 120 bytes apart, and an executor
 * reads them there (a sweep's template is bound and run once per point). The actions' bytes
 * and dur_us take these numbers at the next read of the actions (sched_get, sched_actions,
 * sched_actions_edit, sched_validate, sched_dump). NULL when s has no index. */
sched_num *sched_nums_edit(schedule_t *s, size_t *n);
/* sched_actions without that update: the actions' bytes and dur_us may be older than the
 * index's numbers, every other field is current. For an executor that reads the numbers
 * from sched_index.num (sim/exec.c). */
const sched_action *sched_actions_unbound(const schedule_t *s, size_t *n);
const char *sched_kind_name(sched_kind k);
const char *sched_stream_name(sched_stream s);
/* The block kind of a trace tensor of class c (SB_OTHER for a class with none). */
sched_block sched_block_of_class(trace_class c);
/* Checks that every WAIT's event was RECORDed earlier in program order (so execution can
 * never deadlock: program order is the order the host enqueues, as in CUDA), that events
 * are recorded once, and that frees match allocs. */
ms_status sched_validate(const schedule_t *s, ms_error *err);
/* One line per action. */
void sched_dump(const schedule_t *s, FILE *f);

#endif

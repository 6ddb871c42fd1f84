/* schedule.c — the schedule container of schedule.h: a growable list of actions in program
 * order, event numbering, the streams' index an executor may take (sched_index_build), the
 * validator that proves a schedule cannot deadlock and never frees what it did not allocate,
 * and the text dump (format in docs/POLICIES.md, "Schedule dump"). Filled by
 * planners/lower.c; read by sim/exec.c, runtime/ and the tests. */
#include "planners/schedule.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

struct schedule {
    sched_action *acts;
    size_t n, cap;
    uint32_t n_events;
    sched_index ix;          /* valid when ix_buf is not NULL */
    uint32_t *ix_buf;        /* the index's queues then its timed list, in one block */
    sched_brief *ix_brief;   /* the index's briefs */
    sched_num *ix_num;       /* the index's numbers */
    int acts_old;            /* ix_num changed since the actions' numbers were written */
    int num_old;             /* the actions changed (sched_actions_edit) since ix_num was */
};

/* Action a's number (sched_num), and its number n written back into a. */
static int is_timed(const sched_action *a);

static sched_num num_of(const sched_action *a)
{
    sched_num n;
    if (is_timed(a)) n.dur_us = a->dur_us;
    else n.bytes = a->kind == SA_ALLOC || a->kind == SA_COPY_D2H || a->kind == SA_COPY_H2D ||
                   a->kind == SA_HOST_ALLOC ? a->bytes : 0;
    return n;
}

static void num_put(sched_action *a, sched_num n)
{
    if (is_timed(a)) a->dur_us = n.dur_us;
    else if (a->kind == SA_ALLOC || a->kind == SA_COPY_D2H || a->kind == SA_COPY_H2D ||
             a->kind == SA_HOST_ALLOC)
        a->bytes = n.bytes;
}

/* The actions' numbers brought up to the index's (after sched_nums_edit). A reader of a
 * const schedule may call it: the schedule itself is always sched_new's, not const. */
static void settle_acts(const schedule_t *cs)
{
    schedule_t *s = (schedule_t *)cs;
    if (!s->acts_old) return;
    for (size_t i = 0; i < s->n; i++) num_put(&s->acts[i], s->ix_num[i]);
    s->acts_old = 0;
}

/* The index's numbers brought up to the actions' (after sched_actions_edit). */
static void settle_num(const schedule_t *cs)
{
    schedule_t *s = (schedule_t *)cs;
    if (!s->num_old) return;
    for (size_t i = 0; i < s->n; i++) s->ix_num[i] = num_of(&s->acts[i]);
    s->num_old = 0;
}

/* An added action changes the streams' queues: the index goes. */
static void drop_index(schedule_t *s)
{
    settle_acts(s);
    free(s->ix_buf);
    free(s->ix_brief);
    free(s->ix_num);
    s->ix_buf = NULL;
    s->ix_brief = NULL;
    s->ix_num = NULL;
    s->num_old = 0;
}

schedule_t *sched_new(void)
{
    return calloc(1, sizeof(schedule_t));
}

void sched_free(schedule_t *s)
{
    if (!s) return;
    drop_index(s);
    free(s->acts);
    free(s);
}

ms_status sched_reserve(schedule_t *s, size_t n)
{
    if (!s) return MS_ERR_INVALID;
    return ms_grow((void **)&s->acts, &s->cap, n, sizeof *s->acts);
}

ms_status sched_add(schedule_t *s, const sched_action *a)
{
    if (!s || !a) return MS_ERR_INVALID;
    if (ms_grow((void **)&s->acts, &s->cap, s->n + 1, sizeof *s->acts) != MS_OK)
        return MS_ERR_NOMEM;
    if (s->ix_buf) drop_index(s);
    s->acts[s->n++] = *a;
    return MS_OK;
}

sched_action *sched_append(schedule_t *s)
{
    if (s->n == s->cap && ms_grow((void **)&s->acts, &s->cap, s->n + 1, sizeof *s->acts) != MS_OK)
        return NULL;
    if (s->ix_buf) drop_index(s);
    return &s->acts[s->n++];
}

/* The structure an executor needs of every action before it runs the schedule. */
static int indexable(const sched_action *a)
{
    return (unsigned)a->stream < SS_COUNT && (unsigned)a->kind < SA_COUNT &&
           (a->kind != SA_COMPUTE || a->stream == SS_COMPUTE);
}

void sched_brief_put(sched_brief *b, const sched_action *a)
{
    /* the fields of every kind copied as they are, field by field and without a branch on
     * the kind (an executor without an index briefs each action at every run); the ones a
     * kind does not use are read by no one */
    b->id = a->kind == SA_RECORD || a->kind == SA_WAIT ? a->event : a->tensor;
    b->pool = a->pool;
    b->kind = (uint8_t)a->kind;
    b->block = a->block;
    b->recompute = a->recompute;
    b->iter = (a->kind == SA_MARK && a->mark == TM_ITER) |
              (a->kind == SA_COMPUTE && (a->host_read_bytes | a->host_write_bytes) != 0);
}

static int is_timed(const sched_action *a)
{
    return a->kind == SA_COMPUTE || a->kind == SA_HOST_COMPUTE;
}

ms_status sched_index_build(schedule_t *s)
{
    if (!s) return MS_ERR_INVALID;
    drop_index(s);
    if (s->n > UINT32_MAX) return MS_ERR_INVALID;
    sched_index ix;
    memset(&ix, 0, sizeof ix);
    for (size_t i = 0; i < s->n; i++) {
        const sched_action *a = &s->acts[i];
        if (!indexable(a)) return MS_ERR_INVALID;
        ix.n[a->stream]++;
        ix.n_timed += is_timed(a);
        if (a->kind == SA_ALLOC) {
            ix.any_alloc = 1;
            if (a->tensor > ix.top_alloc) ix.top_alloc = a->tensor;
        }
    }
    uint32_t *buf = malloc((s->n + ix.n_timed + 1) * sizeof *buf);
    sched_brief *brief = malloc((s->n ? s->n : 1) * sizeof *brief);
    sched_num *num = malloc((s->n ? s->n : 1) * sizeof *num);
    if (!buf || !brief || !num) {
        free(buf);
        free(brief);
        free(num);
        return MS_ERR_NOMEM;
    }
    uint32_t *q[SS_COUNT], *timed = buf + s->n;
    size_t off = 0;
    for (int k = 0; k < SS_COUNT; k++) {
        ix.q[k] = q[k] = buf + off;
        off += ix.n[k];
    }
    ix.timed = timed;
    ix.brief = brief;
    ix.num = num;
    for (size_t i = 0; i < s->n; i++) {
        *q[s->acts[i].stream]++ = (uint32_t)i;
        if (is_timed(&s->acts[i])) *timed++ = (uint32_t)i;
        sched_brief_put(&brief[i], &s->acts[i]);
        num[i] = num_of(&s->acts[i]);
    }
    s->ix = ix;
    s->ix_buf = buf;
    s->ix_brief = brief;
    s->ix_num = num;
    return MS_OK;
}

const sched_index *sched_get_index(const schedule_t *s)
{
    if (!s || !s->ix_buf) return NULL;
    settle_num(s);
    return &s->ix;
}

sched_num *sched_nums_edit(schedule_t *s, size_t *n)
{
    *n = 0;
    if (!s || !s->ix_buf) return NULL;
    settle_num(s);
    s->acts_old = 1;
    *n = s->n;
    return s->ix_num;
}

const sched_action *sched_actions_unbound(const schedule_t *s, size_t *n)
{
    *n = s ? s->n : 0;
    return *n ? s->acts : NULL;
}

uint32_t sched_new_event(schedule_t *s)
{
    return s->n_events++;
}

uint32_t sched_event_count(const schedule_t *s)
{
    return s ? s->n_events : 0;
}

size_t sched_count(const schedule_t *s)
{
    return s ? s->n : 0;
}

const sched_action *sched_get(const schedule_t *s, size_t i)
{
    if (!s || i >= s->n) return NULL;
    settle_acts(s);
    return &s->acts[i];
}

const sched_action *sched_actions(const schedule_t *s, size_t *n)
{
    if (s) settle_acts(s);
    *n = s ? s->n : 0;
    return *n ? s->acts : NULL;
}

sched_action *sched_actions_edit(schedule_t *s, size_t *n)
{
    if (s) {
        settle_acts(s);
        s->num_old = s->ix_buf != NULL; /* the caller may change any number */
    }
    *n = s ? s->n : 0;
    return *n ? s->acts : NULL;
}

static const char *const kind_names[SA_COUNT] = {
    "compute", "alloc", "free", "copy_d2h", "copy_h2d", "host_alloc",
    "host_free", "host_compute", "record", "wait", "mark",
};

static const char *const stream_names[SS_COUNT] = { "compute", "d2h", "h2d", "host" };

const char *sched_kind_name(sched_kind k)
{
    return ((unsigned)k < SA_COUNT) ? kind_names[k] : "?";
}

const char *sched_stream_name(sched_stream s)
{
    return ((unsigned)s < SS_COUNT) ? stream_names[s] : "?";
}

sched_block sched_block_of_class(trace_class c)
{
    switch (c) {
    case TC_PARAM: return SB_PARAM;
    case TC_GRAD: return SB_GRAD;
    case TC_OPTSTATE: return SB_OPTSTATE;
    case TC_ACT_SKEL: return SB_ACT_SKEL;
    case TC_ACT_TRANS: return SB_ACT_TRANS;
    case TC_WORKSPACE: return SB_WORKSPACE;
    default: return SB_OTHER;
    }
}

/* ---- validation ---- */

/* What the validator tracks while it walks the program: which events were recorded and,
 * per tensor id, the device and host bytes it currently holds (ids may be reused after a
 * free, as in traces). */
typedef struct vstate {
    uint8_t *recorded;     /* per event */
    u64map *dev;           /* tensor id -> device bytes */
    u64map *host;          /* tensor id -> host bytes */
} vstate;

static ms_status bad(ms_error *err, size_t i, const sched_action *a, const char *what)
{
    return ms_fail(err, MS_ERR_INVALID, "schedule action %zu (%s %s): %s", i,
                   sched_stream_name(a->stream), sched_kind_name(a->kind), what);
}

static ms_status check_event(const schedule_t *s, vstate *v, size_t i, const sched_action *a,
                             ms_error *err)
{
    char why[160];
    if (a->event >= s->n_events) {
        snprintf(why, sizeof why, "event %" PRIu32 " was never created (%" PRIu32 " events)",
                 a->event, s->n_events);
        return bad(err, i, a, why);
    }
    if (a->kind == SA_RECORD) {
        if (v->recorded[a->event]) {
            snprintf(why, sizeof why, "event %" PRIu32 " is recorded a second time", a->event);
            return bad(err, i, a, why);
        }
        v->recorded[a->event] = 1;
    } else if (!v->recorded[a->event]) {
        snprintf(why, sizeof why,
                 "waits on event %" PRIu32 " before any RECORD of it in program order "
                 "(would deadlock)", a->event);
        return bad(err, i, a, why);
    }
    return MS_OK;
}

/* Device-side rules: ALLOC of a tensor that holds no block, FREE and copies of one that does;
 * copies never move more bytes than the tensor's device block. */
static ms_status check_device(vstate *v, size_t i, const sched_action *a, ms_error *err)
{
    char why[200];
    uint64_t have = 0;
    int live = u64map_get(v->dev, a->tensor, &have);
    switch (a->kind) {
    case SA_ALLOC:
        if (live) {
            snprintf(why, sizeof why, "tensor %" PRIu64 " is allocated again before its FREE",
                     a->tensor);
            return bad(err, i, a, why);
        }
        if (u64map_put(v->dev, a->tensor, a->bytes) != 0) return MS_ERR_NOMEM;
        return MS_OK;
    case SA_FREE:
        if (!live) {
            snprintf(why, sizeof why,
                     "tensor %" PRIu64 " is freed but holds no device block (never allocated "
                     "or already freed)", a->tensor);
            return bad(err, i, a, why);
        }
        u64map_del(v->dev, a->tensor, NULL);
        return MS_OK;
    default: /* copies */
        if (!live) {
            snprintf(why, sizeof why, "copy of tensor %" PRIu64 ", which holds no device block",
                     a->tensor);
            return bad(err, i, a, why);
        }
        if (a->bytes > have) {
            snprintf(why, sizeof why,
                     "copies %" PRIu64 " bytes of tensor %" PRIu64 ", whose block has %" PRIu64,
                     a->bytes, a->tensor, have);
            return bad(err, i, a, why);
        }
        return MS_OK;
    }
}

/* Host-side rules: HOST_ALLOC once, HOST_FREE and H2D copies only of a host copy that
 * exists; no copy larger than the host buffer. */
static ms_status check_host(vstate *v, size_t i, const sched_action *a, ms_error *err)
{
    char why[200];
    uint64_t have = 0;
    int live = u64map_get(v->host, a->tensor, &have);
    if (a->kind == SA_HOST_ALLOC) {
        if (live) {
            snprintf(why, sizeof why, "tensor %" PRIu64 " already holds host memory",
                     a->tensor);
            return bad(err, i, a, why);
        }
        return u64map_put(v->host, a->tensor, a->bytes) ? MS_ERR_NOMEM : MS_OK;
    }
    if (a->kind == SA_HOST_FREE) {
        if (!live) {
            snprintf(why, sizeof why, "tensor %" PRIu64 " holds no host memory", a->tensor);
            return bad(err, i, a, why);
        }
        u64map_del(v->host, a->tensor, NULL);
        return MS_OK;
    }
    if (a->kind == SA_COPY_H2D && !live) {
        snprintf(why, sizeof why, "H2D copy of tensor %" PRIu64 ", which has no host copy",
                 a->tensor);
        return bad(err, i, a, why);
    }
    if (live && a->bytes > have) {
        snprintf(why, sizeof why,
                 "copies %" PRIu64 " bytes of tensor %" PRIu64 ", whose host buffer has %" PRIu64,
                 a->bytes, a->tensor, have);
        return bad(err, i, a, why);
    }
    return MS_OK;
}

static ms_status check_action(const schedule_t *s, vstate *v, size_t i, ms_error *err)
{
    const sched_action *a = &s->acts[i];
    if ((unsigned)a->kind >= SA_COUNT) return bad(err, i, a, "unknown action kind");
    if ((unsigned)a->stream >= SS_COUNT) return bad(err, i, a, "unknown stream");
    ms_status st;
    switch (a->kind) {
    case SA_RECORD:
    case SA_WAIT:
        return check_event(s, v, i, a, err);
    case SA_ALLOC:
    case SA_FREE:
        return check_device(v, i, a, err);
    case SA_COPY_D2H:
    case SA_COPY_H2D:
        st = check_device(v, i, a, err);
        return st != MS_OK ? st : check_host(v, i, a, err);
    case SA_HOST_ALLOC:
    case SA_HOST_FREE:
        return check_host(v, i, a, err);
    case SA_COMPUTE:
    case SA_HOST_COMPUTE:
        if (!(a->dur_us >= 0)) return bad(err, i, a, "negative or NaN duration");
        return MS_OK;
    default:
        return MS_OK;
    }
}

ms_status sched_validate(const schedule_t *s, ms_error *err)
{
    if (!s) return ms_fail(err, MS_ERR_INVALID, "no schedule");
    vstate v;
    settle_acts(s);
    v.recorded = calloc(s->n_events ? s->n_events : 1, 1);
    v.dev = u64map_new(1024);
    v.host = u64map_new(256);
    ms_status st = MS_OK;
    if (!v.recorded || !v.dev || !v.host) st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == MS_OK && i < s->n; i++) st = check_action(s, &v, i, err);
    if (st == MS_ERR_NOMEM) ms_fail(err, st, "out of memory validating the schedule");
    free(v.recorded);
    u64map_free(v.dev);
    u64map_free(v.host);
    return st;
}

/* ---- dump ---- */

static void dump_one(const sched_action *a, size_t i, FILE *f)
{
    char b1[40];
    fprintf(f, "%zu %s %s", i, sched_stream_name(a->stream), sched_kind_name(a->kind));
    switch (a->kind) {
    case SA_COMPUTE:
    case SA_HOST_COMPUTE:
        fprintf(f, " op=%" PRId64 " dur_us=%s", a->op, ms_fmt_double(a->dur_us, b1, sizeof b1));
        if (a->recompute) fprintf(f, " recompute=1");
        if (a->host_read_bytes) fprintf(f, " host_read_bytes=%" PRIu64, a->host_read_bytes);
        if (a->host_write_bytes) fprintf(f, " host_write_bytes=%" PRIu64, a->host_write_bytes);
        if (a->host_read_bytes || a->host_write_bytes)
            fprintf(f, " dha_eff=%s", ms_fmt_double(a->dha_eff, b1, sizeof b1));
        break;
    case SA_ALLOC:
    case SA_COPY_D2H:
    case SA_COPY_H2D:
    case SA_HOST_ALLOC:
        fprintf(f, " t=%" PRIu64 " bytes=%" PRIu64, a->tensor, a->bytes);
        if (a->kind == SA_ALLOC && a->pool) fprintf(f, " pool=%" PRId32, a->pool);
        if (a->kind != SA_ALLOC && a->kind != SA_HOST_ALLOC && a->host_wait)
            fprintf(f, " host_wait=1");
        break;
    case SA_FREE:
    case SA_HOST_FREE:
        fprintf(f, " t=%" PRIu64, a->tensor);
        if (a->kind == SA_FREE && a->side_use) fprintf(f, " side_use=1");
        break;
    case SA_RECORD:
    case SA_WAIT:
        fprintf(f, " e=%" PRIu32, a->event);
        break;
    case SA_MARK:
        fprintf(f, " kind=%s", trace_markkind_name(a->mark));
        if (a->mark == TM_PHASE)
            fprintf(f, " value=%s", trace_phase_name((trace_phase)a->mark_value));
        else
            fprintf(f, " value=%" PRId64, a->mark_value);
        break;
    default:
        break;
    }
    fprintf(f, " layer=%" PRId32 " phase=%s\n", a->layer, trace_phase_name(a->phase));
}

void sched_dump(const schedule_t *s, FILE *f)
{
    if (!s || !f) return;
    settle_acts(s);
    for (size_t i = 0; i < s->n; i++) dump_one(&s->acts[i], i, f);
}

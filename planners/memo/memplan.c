/* memplan.c — MEMO's bi-level static memory plan over a lowered schedule (memplan.h). Three
 * steps: (1) lifetimes of every device allocation from the schedule's program order, made
 * conservative for actions on the copy streams; (2) layer sections (the actions of one
 * layer's forward or backward) and their transient tensors, grouped by request pattern, each
 * pattern solved once by dsa_solve (level 1); (3) the whole schedule with one pseudo block per
 * section (level 2). The combined offsets are checked with dsa_check on the exact instance.
 * Used by planners/memo/policy_memo.c; described in docs/MEMO.md. */
#define _POSIX_C_SOURCE 200809L
#include "planners/memo/memplan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/dsa.h"
#include "planners/lower.h"
#include "base/u64map.h"

void memplan_opts_default(memplan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->level1_time_s = 0.5;
    o->level2_time_s = 3.0;
    o->methods = DSA_AUTO;
    o->align_bytes = 512;
    o->max_patterns = 16;
}

void memplan_result_free(memplan_result *r)
{
    if (!r) return;
    free(r->ids);
    free(r->offsets);
    r->ids = r->offsets = NULL;
    r->n = 0;
}

/* Wall clock for the report's timings only; no result depends on it. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- lifetimes ---- */

typedef struct mp_tensor {
    uint64_t id;
    uint64_t units;          /* size in align units */
    size_t a, f;             /* ALLOC / FREE action index (f = SIZE_MAX: never freed) */
    int64_t lower, upper;    /* conservative lifetime, program positions, [lower, upper) */
    int64_t sec;             /* level-1 section, -1: planned at level 2 */
    uint64_t off;            /* offset in units */
} mp_tensor;

typedef struct mp_section {
    int32_t layer;
    trace_phase phase;
    size_t begin, end;       /* actions [begin, end) */
    size_t *mem;             /* member tensors (indices), in allocation order */
    size_t n_mem, cap_mem;
    int64_t pattern;
    int64_t lower, upper;    /* the pseudo block's lifetime */
    uint64_t off;            /* the pseudo block's offset (units) */
} mp_section;

typedef struct mp_pattern {
    uint64_t hash;
    size_t rep;              /* representative section */
    uint64_t *offsets;       /* per member of rep, units */
    uint64_t peak, load;     /* units */
    int proven;
} mp_pattern;

typedef struct mp {
    const schedule_t *s;
    memplan_opts o;
    ms_error *err;
    size_t n;                /* actions */
    int64_t *lo, *hi;        /* per action: compute positions bounding when it runs */
    mp_tensor *ts;
    size_t n_ts, cap_ts;
    u64map *open;            /* id -> tensor index, while allocated */
    u64map *zero;            /* ids of zero-byte allocations (not planned) */
    mp_section *secs;
    size_t n_secs, cap_secs;
    mp_pattern *pats;
    size_t n_pats, cap_pats;
    memplan_report rep;
} mp;

static ms_status nomem(mp *p)
{
    return ms_fail(p->err, MS_ERR_NOMEM, "memory plan: out of memory");
}

/* lo[i]: the compute stream has at least reached this position when action i runs (its own
 * position on compute; for a copy stream, the compute RECORD it last waited for, passed along
 * events between copy streams). hi[i]: action i has run before the compute stream passes this
 * position (the first compute WAIT that depends on it), else the end. */
static ms_status bounds(mp *p)
{
    const schedule_t *s = p->s;
    uint32_t ne = sched_event_count(s);
    p->lo = malloc((p->n + 1) * sizeof *p->lo);
    p->hi = malloc((p->n + 1) * sizeof *p->hi);
    int64_t *ev = malloc(((size_t)ne + 1) * sizeof *ev);
    if (!p->lo || !p->hi || !ev) {
        free(ev);
        return nomem(p);
    }
    int64_t slo[SS_COUNT] = { 0 };
    for (uint32_t e = 0; e < ne; e++) ev[e] = -1;
    for (size_t i = 0; i < p->n; i++) {
        const sched_action *a = sched_get(s, i);
        int st = (int)a->stream;
        if (a->kind == SA_WAIT && st != SS_COMPUTE && a->event < ne && ev[a->event] > slo[st])
            slo[st] = ev[a->event];
        p->lo[i] = st == SS_COMPUTE ? (int64_t)i : slo[st];
        if (a->kind == SA_RECORD && a->event < ne) ev[a->event] = p->lo[i];
    }
    int64_t shi[SS_COUNT];
    for (int k = 0; k < SS_COUNT; k++) shi[k] = (int64_t)p->n;
    for (uint32_t e = 0; e < ne; e++) ev[e] = (int64_t)p->n;
    for (size_t i = p->n; i-- > 0;) {
        const sched_action *a = sched_get(s, i);
        int st = (int)a->stream;
        if (st == SS_COMPUTE) {
            p->hi[i] = (int64_t)i;
            if (a->kind == SA_WAIT && a->event < ne && (int64_t)i < ev[a->event])
                ev[a->event] = (int64_t)i;
            continue;
        }
        if (a->kind == SA_RECORD && a->event < ne && ev[a->event] < shi[st])
            shi[st] = ev[a->event];
        p->hi[i] = shi[st];
        if (a->kind == SA_WAIT && a->event < ne && shi[st] < ev[a->event])
            ev[a->event] = shi[st];
    }
    free(ev);
    return MS_OK;
}

static ms_status add_alloc(mp *p, size_t i, const sched_action *a)
{
    if (a->bytes == 0) return u64map_put(p->zero, a->tensor, 1) ? nomem(p) : MS_OK;
    if (u64map_get(p->open, a->tensor, NULL))
        return ms_fail(p->err, MS_ERR_INVALID, "memory plan: schedule action %zu allocates "
                       "tensor %" PRIu64 " while it is allocated", i, a->tensor);
    if (ms_grow((void **)&p->ts, &p->cap_ts, p->n_ts + 1, sizeof *p->ts)) return nomem(p);
    mp_tensor *t = &p->ts[p->n_ts];
    memset(t, 0, sizeof *t);
    t->id = a->tensor;
    t->units = (a->bytes + p->o.align_bytes - 1) / p->o.align_bytes;
    t->a = i;
    t->f = SIZE_MAX;
    t->sec = -1;
    if (u64map_put(p->open, a->tensor, p->n_ts)) return nomem(p);
    p->n_ts++;
    return MS_OK;
}

static ms_status add_free(mp *p, size_t i, const sched_action *a)
{
    uint64_t k;
    if (u64map_del(p->zero, a->tensor, NULL)) return MS_OK;
    if (!u64map_del(p->open, a->tensor, &k))
        return ms_fail(p->err, MS_ERR_INVALID, "memory plan: schedule action %zu frees tensor "
                       "%" PRIu64 ", which is not allocated", i, a->tensor);
    p->ts[k].f = i;
    return MS_OK;
}

/* Every ALLOC of more than zero bytes is one tensor; an id allocated twice cannot have one
 * static offset per incarnation. */
static ms_status lifetimes(mp *p)
{
    u64map *seen = u64map_new(4096);
    if (!seen) return nomem(p);
    ms_status st = MS_OK;
    for (size_t i = 0; st == MS_OK && i < p->n; i++) {
        const sched_action *a = sched_get(p->s, i);
        if (a->kind == SA_ALLOC) {
            if (a->bytes && u64map_get(seen, a->tensor, NULL))
                st = ms_fail(p->err, MS_ERR_INVALID, "memory plan: tensor %" PRIu64 " is "
                             "allocated a second time at schedule action %zu; a static plan "
                             "needs one id per incarnation (lower with the plan knob "
                             "memory_plan=1)", a->tensor, i);
            else if (a->bytes && u64map_put(seen, a->tensor, 1))
                st = nomem(p);
            else
                st = add_alloc(p, i, a);
        } else if (a->kind == SA_FREE) {
            st = add_free(p, i, a);
        }
    }
    u64map_free(seen);
    for (size_t k = 0; st == MS_OK && k < p->n_ts; k++) {
        mp_tensor *t = &p->ts[k];
        t->lower = p->lo[t->a];
        t->upper = t->f == SIZE_MAX ? (int64_t)p->n + 1 : p->hi[t->f] + 1;
        if (t->upper <= t->lower) t->upper = t->lower + 1;
    }
    p->rep.tensors = p->n_ts;
    return st;
}

/* ---- layer sections and their transients ---- */

static int sec_key(const sched_action *a)
{
    return a->layer >= 0 && (a->phase == TP_FWD || a->phase == TP_BWD);
}

static ms_status find_sections(mp *p)
{
    for (size_t i = 0; i < p->n;) {
        const sched_action *a = sched_get(p->s, i);
        if (!sec_key(a)) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < p->n) {
            const sched_action *b = sched_get(p->s, j);
            if (!sec_key(b) || b->layer != a->layer || b->phase != a->phase) break;
            j++;
        }
        if (ms_grow((void **)&p->secs, &p->cap_secs, p->n_secs + 1, sizeof *p->secs))
            return nomem(p);
        mp_section *S = &p->secs[p->n_secs++];
        memset(S, 0, sizeof *S);
        S->layer = a->layer;
        S->phase = a->phase;
        S->begin = i;
        S->end = j;
        S->pattern = -1;
        i = j;
    }
    return MS_OK;
}

/* The section holding action i (sections are sorted and disjoint), or -1. */
static int64_t section_of(const mp *p, size_t i)
{
    size_t lo = 0, hi = p->n_secs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->secs[mid].end <= i) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->n_secs && p->secs[lo].begin <= i ? (int64_t)lo : -1;
}

/* A transient of a section is allocated and freed on the compute stream inside it;
 * rounding-buffer blocks are never transients (they outlive the layer by design). */
static ms_status assign_members(mp *p)
{
    for (size_t k = 0; k < p->n_ts; k++) {
        mp_tensor *t = &p->ts[k];
        if (t->f == SIZE_MAX || lower_id_is_rbuf(t->id, NULL, NULL)) continue;
        if (sched_get(p->s, t->a)->stream != SS_COMPUTE ||
            sched_get(p->s, t->f)->stream != SS_COMPUTE)
            continue;
        int64_t sa = section_of(p, t->a), sf = section_of(p, t->f);
        if (sa < 0 || sa != sf) continue;
        mp_section *S = &p->secs[sa];
        if (ms_grow((void **)&S->mem, &S->cap_mem, S->n_mem + 1, sizeof *S->mem))
            return nomem(p);
        S->mem[S->n_mem++] = k;
        t->sec = sa;
    }
    return MS_OK;
}

/* The section's request sequence as (kind, value) pairs: an allocation's size in units, a
 * free's member ordinal. Two sections with equal sequences have equal level-1 instances. */
typedef struct evt {
    size_t pos;
    uint64_t kind_val;       /* kind in the top bit */
} evt;

static int cmp_evt(const void *x, const void *y)
{
    const evt *a = x, *b = y;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static ms_status sec_events(const mp *p, const mp_section *S, evt **out)
{
    evt *e = malloc(2 * S->n_mem * sizeof *e);
    if (!e) return MS_ERR_NOMEM;
    for (size_t m = 0; m < S->n_mem; m++) {
        const mp_tensor *t = &p->ts[S->mem[m]];
        e[2 * m] = (evt){ t->a, t->units };
        e[2 * m + 1] = (evt){ t->f, (UINT64_C(1) << 63) | m };
    }
    qsort(e, 2 * S->n_mem, sizeof *e, cmp_evt);
    *out = e;
    return MS_OK;
}

static uint64_t hash_events(const evt *e, size_t n, trace_phase ph)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)ph;
    for (size_t i = 0; i < n; i++) {
        h ^= e[i].kind_val;
        h *= 1099511628211ULL;
    }
    return h;
}

static int same_pattern(const mp *p, const mp_section *A, const mp_section *B)
{
    if (A->phase != B->phase || A->n_mem != B->n_mem) return 0;
    evt *ea, *eb;
    if (sec_events(p, A, &ea) != MS_OK) return 0;
    if (sec_events(p, B, &eb) != MS_OK) {
        free(ea);
        return 0;
    }
    int same = 1;
    for (size_t i = 0; i < 2 * A->n_mem && same; i++) same = ea[i].kind_val == eb[i].kind_val;
    free(ea);
    free(eb);
    return same;
}

static ms_status solve_instance(mp *p, dsa_instance *in, double time_s, uint64_t *offsets,
                                uint64_t *peak, uint64_t *load, int *proven)
{
    dsa_options o;
    dsa_options_default(&o);
    o.time_limit_s = time_s;
    o.methods = p->o.methods;
    dsa_solution sol;
    memset(&sol, 0, sizeof sol);
    ms_status st = dsa_solve(in, &o, &sol, p->err);
    if (st == MS_OK) {
        memcpy(offsets, sol.offsets, dsa_instance_count(in) * sizeof *offsets);
        *peak = sol.peak_bytes;
        *load = sol.load_bytes;
        *proven = sol.status == DSA_OK;
    }
    dsa_solution_free(&sol);
    return st;
}

/* Level 1 for one pattern: the representative section's transients, time = event ordinal. */
static ms_status solve_pattern(mp *p, mp_pattern *P)
{
    const mp_section *S = &p->secs[P->rep];
    evt *e;
    if (sec_events(p, S, &e) != MS_OK) return nomem(p);
    size_t n = S->n_mem;
    int64_t *first = malloc(n * sizeof *first), *last = malloc(n * sizeof *last);
    P->offsets = malloc((n ? n : 1) * sizeof *P->offsets);
    dsa_instance *in = dsa_instance_new();
    ms_status st = (first && last && P->offsets && in) ? MS_OK : nomem(p);
    for (size_t i = 0; st == MS_OK && i < 2 * n; i++) {
        uint64_t kv = e[i].kind_val;
        if (kv >> 63) last[kv & ~(UINT64_C(1) << 63)] = (int64_t)i;
    }
    for (size_t i = 0, m = 0; st == MS_OK && i < 2 * n; i++)
        if (!(e[i].kind_val >> 63)) first[m++] = (int64_t)i;
    /* members are in allocation order, so the m-th allocation event is member m */
    for (size_t m = 0; st == MS_OK && m < n; m++)
        st = dsa_instance_add(in, NULL, first[m], last[m] + 1, p->ts[S->mem[m]].units, p->err);
    if (st == MS_OK)
        st = solve_instance(p, in, p->o.level1_time_s, P->offsets, &P->peak, &P->load,
                            &P->proven);
    p->rep.level1_buffers += n;
    free(e);
    free(first);
    free(last);
    dsa_instance_free(in);
    return st;
}

static ms_status layer_mismatch(mp *p, const mp_section *S)
{
    for (size_t k = 0; k < p->n_pats; k++) {
        const mp_section *R = &p->secs[p->pats[k].rep];
        if (R->phase != S->phase) continue;
        return ms_fail(p->err, MS_ERR_INVALID, "memory plan: layer %d's %s section (schedule "
                       "actions %zu-%zu, %zu transients) makes other requests than layer "
                       "%d's (actions %zu-%zu, %zu transients)%s", (int)S->layer,
                       trace_phase_name(S->phase), S->begin, S->end - 1, S->n_mem,
                       (int)R->layer, R->begin, R->end - 1, R->n_mem,
                       p->o.strict_layers ? "; identical layers are required (strict_layers)"
                                          : "; too many distinct layer patterns");
    }
    return ms_fail(p->err, MS_ERR_INVALID, "memory plan: too many distinct layer patterns");
}

static ms_status level1(mp *p)
{
    double t0 = now_s();
    ms_status st = MS_OK;
    for (size_t k = 0; st == MS_OK && k < p->n_secs; k++) {
        mp_section *S = &p->secs[k];
        if (!S->n_mem) continue;
        p->rep.sections++;
        evt *e;
        if (sec_events(p, S, &e) != MS_OK) return nomem(p);
        uint64_t h = hash_events(e, 2 * S->n_mem, S->phase);
        free(e);
        for (size_t q = 0; q < p->n_pats && S->pattern < 0; q++)
            if (p->pats[q].hash == h && same_pattern(p, &p->secs[p->pats[q].rep], S))
                S->pattern = (int64_t)q;
        if (S->pattern >= 0) continue;
        size_t same_phase = 0;
        for (size_t q = 0; q < p->n_pats; q++)
            same_phase += p->secs[p->pats[q].rep].phase == S->phase;
        if ((p->o.strict_layers && same_phase) || p->n_pats >= p->o.max_patterns)
            return layer_mismatch(p, S);
        if (ms_grow((void **)&p->pats, &p->cap_pats, p->n_pats + 1, sizeof *p->pats))
            return nomem(p);
        mp_pattern *P = &p->pats[p->n_pats];
        memset(P, 0, sizeof *P);
        P->hash = h;
        P->rep = k;
        S->pattern = (int64_t)p->n_pats++;
        st = solve_pattern(p, P);
    }
    p->rep.patterns = p->n_pats;
    p->rep.level1_proven = 1;
    uint64_t al = p->o.align_bytes;
    for (size_t q = 0; q < p->n_pats; q++) {
        const mp_pattern *P = &p->pats[q];
        int fwd = p->secs[P->rep].phase == TP_FWD;
        uint64_t *pk = fwd ? &p->rep.level1_fwd_peak_bytes : &p->rep.level1_bwd_peak_bytes;
        uint64_t *ld = fwd ? &p->rep.level1_fwd_load_bytes : &p->rep.level1_bwd_load_bytes;
        if (P->peak * al > *pk) {
            *pk = P->peak * al;
            *ld = P->load * al;
        }
        p->rep.level1_proven &= P->proven;
    }
    p->rep.level1_s = now_s() - t0;
    return st;
}

/* ---- level 2 ---- */

static ms_status level2(mp *p)
{
    double t0 = now_s();
    dsa_instance *in = dsa_instance_new();
    size_t cap = p->n_ts + p->n_secs + 1, n = 0;
    int64_t *who = malloc(cap * sizeof *who); /* >= 0 tensor, < 0: -(section + 1) */
    uint64_t *off = malloc(cap * sizeof *off);
    ms_status st = (in && who && off) ? MS_OK : nomem(p);
    for (size_t k = 0; st == MS_OK && k < p->n_secs; k++) {
        mp_section *S = &p->secs[k];
        if (!S->n_mem) continue;
        S->lower = INT64_MAX;
        S->upper = INT64_MIN;
        for (size_t m = 0; m < S->n_mem; m++) {
            const mp_tensor *t = &p->ts[S->mem[m]];
            if (t->lower < S->lower) S->lower = t->lower;
            if (t->upper > S->upper) S->upper = t->upper;
        }
        uint64_t size = p->pats[S->pattern].peak;
        if (size == 0) continue;
        st = dsa_instance_add(in, NULL, S->lower, S->upper, size, p->err);
        who[n++] = -(int64_t)k - 1;
    }
    for (size_t k = 0; st == MS_OK && k < p->n_ts; k++) {
        const mp_tensor *t = &p->ts[k];
        if (t->sec >= 0) continue;
        st = dsa_instance_add(in, NULL, t->lower, t->upper, t->units, p->err);
        who[n++] = (int64_t)k;
    }
    uint64_t peak = 0, load = 0;
    int proven = 1;
    if (st == MS_OK && n)
        st = solve_instance(p, in, p->o.level2_time_s, off, &peak, &load, &proven);
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        if (who[i] >= 0) p->ts[who[i]].off = off[i];
        else p->secs[-who[i] - 1].off = off[i];
    }
    for (size_t k = 0; st == MS_OK && k < p->n_ts; k++) {
        mp_tensor *t = &p->ts[k];
        if (t->sec < 0) continue;
        const mp_section *S = &p->secs[t->sec];
        const mp_pattern *P = &p->pats[S->pattern];
        size_t m = 0;
        while (S->mem[m] != k) m++;
        t->off = S->off + P->offsets[m];
    }
    p->rep.level2_buffers = n;
    p->rep.level2_load_bytes = load * p->o.align_bytes;
    p->rep.level2_peak_bytes = peak * p->o.align_bytes;
    p->rep.level2_proven = proven;
    p->rep.level2_s = now_s() - t0;
    free(who);
    free(off);
    dsa_instance_free(in);
    return st;
}

/* The reference: one DSA over every tensor with its own lifetime. */
static ms_status single_level(mp *p)
{
    double t0 = now_s();
    dsa_instance *in = dsa_instance_new();
    uint64_t *off = malloc((p->n_ts + 1) * sizeof *off);
    ms_status st = (in && off) ? MS_OK : nomem(p);
    for (size_t k = 0; st == MS_OK && k < p->n_ts; k++)
        st = dsa_instance_add(in, NULL, p->ts[k].lower, p->ts[k].upper, p->ts[k].units, p->err);
    uint64_t peak = 0, load = 0;
    int proven = 1;
    if (st == MS_OK && p->n_ts)
        st = solve_instance(p, in, p->o.level2_time_s, off, &peak, &load, &proven);
    for (size_t k = 0; st == MS_OK && k < p->n_ts; k++) p->ts[k].off = off[k];
    p->rep.level2_buffers = p->n_ts;
    p->rep.level2_load_bytes = load * p->o.align_bytes;
    p->rep.level2_peak_bytes = peak * p->o.align_bytes;
    p->rep.level2_proven = proven;
    p->rep.level2_s = now_s() - t0;
    free(off);
    dsa_instance_free(in);
    return st;
}

/* ---- check and result ---- */

/* The exact instance (every tensor, its own lifetime) checked against the offsets. */
static ms_status check_all(mp *p, uint64_t *peak_units, uint64_t *load_units)
{
    dsa_instance *in = dsa_instance_new();
    uint64_t *off = malloc((p->n_ts + 1) * sizeof *off);
    ms_status st = (in && off) ? MS_OK : nomem(p);
    for (size_t k = 0; st == MS_OK && k < p->n_ts; k++) {
        st = dsa_instance_add(in, NULL, p->ts[k].lower, p->ts[k].upper, p->ts[k].units, p->err);
        off[k] = p->ts[k].off;
    }
    *peak_units = *load_units = 0;
    if (st == MS_OK && p->n_ts) {
        ms_error e2;
        if (dsa_check(in, off, 0, peak_units, &e2) != MS_OK)
            st = ms_fail(p->err, MS_ERR_INVALID, "memory plan failed its check: %s", e2.msg);
        *load_units = dsa_load(in);
    }
    free(off);
    dsa_instance_free(in);
    return st;
}

static int cmp_id(const void *x, const void *y)
{
    const mp_tensor *a = x, *b = y;
    return a->id < b->id ? -1 : a->id > b->id;
}

static ms_status fill_result(mp *p, memplan_result *out)
{
    out->ids = malloc((p->n_ts + 1) * sizeof *out->ids);
    out->offsets = malloc((p->n_ts + 1) * sizeof *out->offsets);
    if (!out->ids || !out->offsets) {
        memplan_result_free(out);
        return nomem(p);
    }
    mp_tensor *c = malloc((p->n_ts + 1) * sizeof *c);
    if (!c) {
        memplan_result_free(out);
        return nomem(p);
    }
    memcpy(c, p->ts, p->n_ts * sizeof *c);
    qsort(c, p->n_ts, sizeof *c, cmp_id);
    for (size_t k = 0; k < p->n_ts; k++) {
        out->ids[k] = c[k].id;
        out->offsets[k] = c[k].off * p->o.align_bytes;
    }
    out->n = p->n_ts;
    out->arena_bytes = p->rep.peak_bytes;
    free(c);
    return MS_OK;
}

static void mp_free(mp *p)
{
    free(p->lo);
    free(p->hi);
    free(p->ts);
    u64map_free(p->open);
    u64map_free(p->zero);
    for (size_t k = 0; k < p->n_secs; k++) free(p->secs[k].mem);
    free(p->secs);
    for (size_t k = 0; k < p->n_pats; k++) free(p->pats[k].offsets);
    free(p->pats);
}

static ms_status mp_init(mp *p, const schedule_t *s, const memplan_opts *o, ms_error *err)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    p->err = err;
    if (o) p->o = *o;
    else memplan_opts_default(&p->o);
    if (!p->o.align_bytes) p->o.align_bytes = 1;
    if (!p->o.max_patterns) p->o.max_patterns = 1;
    if (!p->o.methods) p->o.methods = DSA_AUTO;
    p->n = sched_count(s);
    p->open = u64map_new(4096);
    p->zero = u64map_new(64);
    if (!p->open || !p->zero) return nomem(p);
    ms_status st = bounds(p);
    return st == MS_OK ? lifetimes(p) : st;
}

ms_status memplan_schedule(const schedule_t *s, const memplan_opts *o, memplan_result *out,
                           memplan_report *rep, ms_error *err)
{
    memset(out, 0, sizeof *out);
    if (!s) return ms_fail(err, MS_ERR_INVALID, "memory plan: no schedule");
    mp p;
    ms_status st = mp_init(&p, s, o, err);
    if (st == MS_OK && p.o.single_level) {
        st = single_level(&p);
    } else if (st == MS_OK) {
        st = find_sections(&p);
        if (st == MS_OK) st = assign_members(&p);
        if (st == MS_OK) st = level1(&p);
        if (st == MS_OK) st = level2(&p);
    }
    uint64_t peak = 0, load = 0;
    if (st == MS_OK) st = check_all(&p, &peak, &load);
    if (st == MS_OK) {
        p.rep.peak_bytes = peak * p.o.align_bytes;
        p.rep.load_bytes = load * p.o.align_bytes;
        p.rep.gap = load ? (double)(peak - load) / (double)load : 0.0;
        st = fill_result(&p, out);
    }
    if (st == MS_OK && rep) *rep = p.rep;
    mp_free(&p);
    return st;
}

ms_status memplan_check(const schedule_t *s, const memplan_result *r, uint64_t align_bytes,
                        uint64_t *peak_bytes, ms_error *err)
{
    memplan_opts o;
    memplan_opts_default(&o);
    o.align_bytes = align_bytes ? align_bytes : 1;
    mp p;
    ms_status st = mp_init(&p, s, &o, err);
    for (size_t k = 0; st == MS_OK && k < p.n_ts; k++) {
        size_t lo = 0, hi = r->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (r->ids[mid] < p.ts[k].id) lo = mid + 1;
            else hi = mid;
        }
        if (lo == r->n || r->ids[lo] != p.ts[k].id)
            st = ms_fail(err, MS_ERR_INVALID, "memory plan: tensor %" PRIu64 " (schedule "
                         "action %zu) has no offset", p.ts[k].id, p.ts[k].a);
        else if (r->offsets[lo] % o.align_bytes)
            st = ms_fail(err, MS_ERR_INVALID, "memory plan: tensor %" PRIu64 " has offset "
                         "%" PRIu64 ", not a multiple of %" PRIu64, p.ts[k].id, r->offsets[lo],
                         o.align_bytes);
        else
            p.ts[k].off = r->offsets[lo] / o.align_bytes;
    }
    uint64_t peak = 0, load = 0;
    if (st == MS_OK) st = check_all(&p, &peak, &load);
    if (st == MS_OK && peak_bytes) *peak_bytes = peak * o.align_bytes;
    mp_free(&p);
    return st;
}

/* ---- offsets given by hand ---- */

typedef struct hv {
    uint64_t id, lo, hi;     /* arena bytes [lo, hi) */
    size_t a;                /* ALLOC action */
    int64_t lower, upper;    /* lifetime, program positions */
} hv;

typedef struct hv_ev {
    int64_t at;
    int start;               /* 0: a lifetime ends, 1: one begins (ends first at one time) */
    size_t k;
} hv_ev;

static int cmp_hv_ev(const void *x, const void *y)
{
    const hv_ev *a = x, *b = y;
    if (a->at != b->at) return a->at < b->at ? -1 : 1;
    if (a->start != b->start) return a->start - b->start;
    return a->k < b->k ? -1 : a->k > b->k;
}

static int find_sorted(const uint64_t *ids, size_t n, uint64_t id, size_t *at)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    *at = lo;
    return lo < n && ids[lo] == id;
}

/* Lifetimes of the allocations that have offsets, in allocation order. */
static ms_status hv_collect(mp *p, const uint64_t *ids, const uint64_t *offsets, size_t n,
                            hv **out, size_t *nv)
{
    size_t cap = 0;
    *out = NULL;
    *nv = 0;
    for (size_t i = 0; i < p->n; i++) {
        const sched_action *a = sched_get(p->s, i);
        size_t j;
        if (a->kind == SA_ALLOC && a->bytes) {
            if (!find_sorted(ids, n, a->tensor, &j)) continue;
            if (ms_grow((void **)out, &cap, *nv + 1, sizeof **out)) return nomem(p);
            hv *v = &(*out)[*nv];
            v->id = a->tensor;
            v->lo = offsets[j];
            v->hi = offsets[j] > UINT64_MAX - a->bytes ? UINT64_MAX : offsets[j] + a->bytes;
            v->a = i;
            v->lower = p->lo[i];
            v->upper = (int64_t)p->n + 1;
            if (u64map_put(p->open, a->tensor, *nv)) return nomem(p);
            (*nv)++;
        } else if (a->kind == SA_FREE) {
            uint64_t k;
            if (!u64map_del(p->open, a->tensor, &k)) continue; /* not planned, or 0 bytes */
            (*out)[k].upper = p->hi[i] + 1;
        }
    }
    for (size_t k = 0; k < *nv; k++)
        if ((*out)[k].upper <= (*out)[k].lower) (*out)[k].upper = (*out)[k].lower + 1;
    return MS_OK;
}

/* Sweeps the lifetimes in program order keeping the live blocks sorted by offset; as live
 * blocks never overlap while the check passes, a new block need only be compared with its
 * neighbours. */
static ms_status hv_sweep(mp *p, const hv *v, size_t nv, memplan_overlap *ov)
{
    hv_ev *ev = malloc((2 * nv + 1) * sizeof *ev);
    size_t *live = malloc((nv + 1) * sizeof *live), nlive = 0;
    if (!ev || !live) {
        free(ev);
        free(live);
        return nomem(p);
    }
    for (size_t k = 0; k < nv; k++) {
        ev[2 * k] = (hv_ev){v[k].lower, 1, k};
        ev[2 * k + 1] = (hv_ev){v[k].upper, 0, k};
    }
    qsort(ev, 2 * nv, sizeof *ev, cmp_hv_ev);
    ms_status st = MS_OK;
    for (size_t e = 0; st == MS_OK && e < 2 * nv; e++) {
        const hv *x = &v[ev[e].k];
        size_t lo = 0, hi = nlive; /* first live block at or after x's offset */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (v[live[mid]].lo < x->lo) lo = mid + 1;
            else hi = mid;
        }
        if (!ev[e].start) {
            while (lo < nlive && live[lo] != ev[e].k) lo++;
            if (lo < nlive) {
                memmove(live + lo, live + lo + 1, (nlive - lo - 1) * sizeof *live);
                nlive--;
            }
            continue;
        }
        const hv *y = NULL;
        if (lo > 0 && v[live[lo - 1]].hi > x->lo) y = &v[live[lo - 1]];
        else if (lo < nlive && x->hi > v[live[lo]].lo) y = &v[live[lo]];
        if (y) {
            if (ov)
                *ov = (memplan_overlap){ y->id, y->lo, y->hi, y->a, x->id, x->lo, x->hi, x->a };
            st = ms_fail(p->err, MS_ERR_INVALID, "tensor %" PRIu64 " [%" PRIu64 ",%" PRIu64
                         ") overlaps tensor %" PRIu64 " [%" PRIu64 ",%" PRIu64 ") while both "
                         "are live (schedule actions %zu and %zu allocate them)", x->id, x->lo,
                         x->hi, y->id, y->lo, y->hi, x->a, y->a);
            break;
        }
        memmove(live + lo + 1, live + lo, (nlive - lo) * sizeof *live);
        live[lo] = ev[e].k;
        nlive++;
    }
    free(ev);
    free(live);
    return st;
}

ms_status memplan_check_offsets(const schedule_t *s, const uint64_t *ids,
                                const uint64_t *offsets, size_t n, memplan_overlap *ov,
                                ms_error *err)
{
    if (!s || !n) return MS_OK;
    mp p;
    memset(&p, 0, sizeof p);
    p.s = s;
    p.err = err;
    memplan_opts_default(&p.o);
    p.n = sched_count(s);
    p.open = u64map_new(4096);
    p.zero = u64map_new(64);
    ms_status st = p.open && p.zero ? bounds(&p) : nomem(&p);
    hv *v = NULL;
    size_t nv = 0;
    if (st == MS_OK) st = hv_collect(&p, ids, offsets, n, &v, &nv);
    if (st == MS_OK) st = hv_sweep(&p, v, nv, ov);
    free(v);
    mp_free(&p);
    return st;
}

ms_status memplan_apply(const memplan_result *r, plan_t *p, uint64_t capacity_bytes,
                        ms_error *err)
{
    for (size_t k = 0; k < r->n; k++)
        if (plan_set_offset(p, r->ids[k], r->offsets[k]) != MS_OK)
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    p->arena_bytes = (capacity_bytes == 0 || r->arena_bytes <= capacity_bytes) ? r->arena_bytes
                                                                                 : 0;
    plan_sort(p);
    return MS_OK;
}

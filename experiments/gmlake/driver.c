/* driver.c — `memsim gmlake`: GMLake's fragmentation study (Guo et al., ASPLOS'24, §5,
 * Figs. 10, 11, 13, 14) in memsim. For each workload it generates the trace (traces/gen.c:
 * LoRA, ZeRO-3, offload), plans it with a baseline policy (keep-all, or full-recompute for
 * the "R" strategies), lowers it to a schedule, and replays the schedule's alloc/free program
 * through each allocator over the simulated device: caching (PyTorch), stitching (GMLake),
 * expandable segments and the static arena (offsets from the greedy offline planner over the
 * same program), and, as the study's recorded workloads, imported PyTorch traces through the
 * same allocators. Results go to CSV files that experiments/gmlake/ compares with the paper
 * and plots/gmlake_*.gp draw. Called by memsim-paper (experiments/main.c), which memsim hands
 * `memsim gmlake` over to. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memory/alloc.h"
#include "memory/alloc_static.h"
#include "memory/alloc_static_plan.h"
#include "planners/lower.h"
#include "planners/policy.h"
#include "planners/schedule.h"
#include "sim/cli.h"
#include "experiments/gmlake/driver.h"
#include "sim/simbackend.h"
#include "traces/gen.h"
#include "traces/machine.h"
#include "traces/trace.h"
#include "base/u64map.h"
#include "base/util.h"

#define GM_MAX_LIST 16
#define GIB 1073741824.0       /* results are in GiB: the A100's "80 GB" is 80 GiB */
#define GM_SERIES_POINTS 3000  /* Fig. 14 memory series: points per allocator */

/* ---- options ---- */

typedef struct gm_opts {
    const char *out_dir;
    const char *machine;
    unsigned figs;                 /* GM_FIG_* bits */
    uint64_t seq;
    uint64_t batch10[GM_MAX_LIST]; /* Fig. 10: one run of every strategy per batch */
    size_t n_batch10;
    uint64_t batch11;              /* Fig. 11 */
    int iterations;                /* Figs. 10, 11, 13 */
    int lora_rank, lora_mlp;
    int hf_loss, hf_hold;          /* the generator's HF-loss model (see case_prog) */
    int dp;                        /* Figs. 10, 13, 14 */
    const char *models[GM_MAX_LIST];
    size_t n_models;               /* Figs. 10, 11 */
    const char *models13[GM_MAX_LIST];
    size_t n_models13;
    int gpus[GM_MAX_LIST];
    size_t n_gpus;                 /* Fig. 11 */
    const char *allocs[GM_MAX_LIST];
    size_t n_allocs;
    const char *model14;
    uint64_t batch14;
    int iterations14;
    int sweep_points;              /* Fig. 13 */
    const char *real[GM_MAX_LIST];
    size_t n_real;
    char lists[4][512];            /* storage for the split lists */
} gm_opts;

enum { GM_FIG10 = 1, GM_FIG11 = 2, GM_FIG13 = 4, GM_FIG14 = 8, GM_REAL = 16 };

/* The paper's strategy combinations (§5.2.1): N none, R recomputation, LR LoRA +
 * recomputation, RO recomputation + offload, LRO all three; all over ZeRO-3. */
typedef struct gm_strategy {
    const char *name;
    int lora, recompute, offload;
} gm_strategy;

static const gm_strategy STRATS[] = {
    { "N", 0, 0, 0 }, { "R", 0, 1, 0 }, { "LR", 1, 1, 0 }, { "RO", 0, 1, 1 }, { "LRO", 1, 1, 1 },
};

static const gm_strategy *strategy(const char *name)
{
    for (size_t i = 0; i < sizeof STRATS / sizeof *STRATS; i++)
        if (!strcmp(STRATS[i].name, name)) return &STRATS[i];
    return NULL;
}

/* ---- the alloc/free program of a schedule or an imported trace ---- */

typedef struct gm_ev {
    uint64_t tag;                  /* incarnation: unique per allocation (recomputed tensors
                                      are allocated twice under one trace id) */
    uint64_t bytes;
    int32_t stream;
    uint8_t is_alloc;
} gm_ev;

typedef struct gm_prog {
    gm_ev *ev;
    size_t n, cap;
    size_t *iter_at;               /* event index where each iteration begins */
    size_t n_iter, cap_iter;
    u64map *cur;                   /* trace tensor id -> current tag */
    uint64_t next_tag;
} gm_prog;

static void prog_free(gm_prog *p)
{
    free(p->ev);
    free(p->iter_at);
    u64map_free(p->cur);
    memset(p, 0, sizeof *p);
}

static ms_status prog_alloc(gm_prog *p, uint64_t id, uint64_t bytes, int32_t stream)
{
    if (ms_grow((void **)&p->ev, &p->cap, p->n + 1, sizeof *p->ev)) return MS_ERR_NOMEM;
    uint64_t tag = ++p->next_tag;
    if (u64map_put(p->cur, id, tag)) return MS_ERR_NOMEM;
    p->ev[p->n++] = (gm_ev){ tag, bytes, stream, 1 };
    return MS_OK;
}

/* A free of a tensor that is not live is a malformed program. */
static ms_status prog_free_id(gm_prog *p, uint64_t id, ms_error *err)
{
    uint64_t tag;
    if (!u64map_del(p->cur, id, &tag))
        return ms_fail(err, MS_ERR_INVALID, "free of tensor %" PRIu64 ", which is not live", id);
    if (ms_grow((void **)&p->ev, &p->cap, p->n + 1, sizeof *p->ev)) return MS_ERR_NOMEM;
    p->ev[p->n++] = (gm_ev){ tag, 0, 0, 0 };
    return MS_OK;
}

static ms_status prog_iter(gm_prog *p)
{
    if (ms_grow((void **)&p->iter_at, &p->cap_iter, p->n_iter + 1, sizeof *p->iter_at))
        return MS_ERR_NOMEM;
    p->iter_at[p->n_iter++] = p->n;
    return MS_OK;
}

static ms_status prog_init(gm_prog *p)
{
    memset(p, 0, sizeof *p);
    p->cur = u64map_new(4096);
    return p->cur ? MS_OK : MS_ERR_NOMEM;
}

/* The schedule's allocator calls in program order. Every action of the baseline policies
 * used here is on the compute stream, so program order is execution order. */
static ms_status prog_from_schedule(const schedule_t *s, gm_prog *p, ms_error *err)
{
    ms_status st = prog_init(p);
    for (size_t i = 0; st == MS_OK && i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        if (a->kind == SA_ALLOC) st = prog_alloc(p, a->tensor, a->bytes, (int32_t)a->stream);
        else if (a->kind == SA_FREE) st = prog_free_id(p, a->tensor, err);
        else if (a->kind == SA_MARK && a->mark == TM_ITER) st = prog_iter(p);
    }
    if (st == MS_ERR_NOMEM) return ms_fail(err, st, "out of memory");
    return st;
}

/* An imported trace's alloc/free records, with their streams. */
static ms_status prog_from_trace(const trace_t *t, gm_prog *p, ms_error *err)
{
    ms_status st = prog_init(p);
    for (size_t i = 0; st == MS_OK && i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC) st = prog_alloc(p, r->u.alloc.id, r->u.alloc.bytes,
                                                 r->u.alloc.stream);
        else if (r->type == TR_FREE) st = prog_free_id(p, r->u.free_id, err);
        else if (r->type == TR_MARK && r->u.mark.kind == TM_ITER) st = prog_iter(p);
    }
    if (st == MS_ERR_NOMEM) return ms_fail(err, st, "out of memory");
    return st;
}

/* ---- the static arena's plan: greedy best fit over the program's lifetimes ---- */

typedef struct gm_static_plan {
    uint64_t *ids, *offsets;
    size_t n;
    uint64_t arena_bytes;
} gm_static_plan;

static void static_plan_free(gm_static_plan *sp)
{
    free(sp->ids);
    free(sp->offsets);
    memset(sp, 0, sizeof *sp);
}

static ms_status static_plan(const gm_prog *p, gm_static_plan *sp, ms_error *err)
{
    memset(sp, 0, sizeof *sp);
    size_t na = 0;
    for (size_t i = 0; i < p->n; i++) na += p->ev[i].is_alloc;
    uint64_t *bytes = malloc((na + 1) * sizeof *bytes), *first = malloc((na + 1) * 8);
    uint64_t *last = malloc((na + 1) * 8);
    sp->ids = malloc((na + 1) * 8);
    sp->offsets = malloc((na + 1) * 8);
    u64map *idx = u64map_new(na + 16);
    ms_status st = bytes && first && last && sp->ids && sp->offsets && idx ? MS_OK : MS_ERR_NOMEM;
    for (size_t i = 0; st == MS_OK && i < p->n; i++) {
        const gm_ev *e = &p->ev[i];
        uint64_t k;
        if (e->is_alloc) {
            /* Tags grow with the event index: ids[] is sorted as the arena requires. */
            sp->ids[sp->n] = e->tag;
            bytes[sp->n] = e->bytes;
            first[sp->n] = last[sp->n] = i;
            last[sp->n] = p->n; /* until freed */
            if (u64map_put(idx, e->tag, sp->n)) st = MS_ERR_NOMEM;
            sp->n++;
        } else if (u64map_get(idx, e->tag, &k)) {
            last[k] = i;
        }
    }
    if (st == MS_OK)
        st = alloc_static_plan_greedy(sp->ids, bytes, first, last, sp->n, sp->offsets,
                                      &sp->arena_bytes);
    free(bytes);
    free(first);
    free(last);
    u64map_free(idx);
    if (st != MS_OK) {
        static_plan_free(sp);
        return ms_fail(err, st, "static arena plan: %s", ms_status_str(st));
    }
    return MS_OK;
}

/* ---- replay through one allocator ---- */

typedef struct gm_iter {
    uint64_t stitches, new_chunks, segment_allocs, retries; /* cumulative at iteration end */
    uint64_t reserved_peak, active_peak;                    /* peaks so far */
} gm_iter;

typedef struct gm_run {
    int oom;
    uint64_t oom_bytes;
    size_t events_done;
    uint64_t peak_active, peak_reserved, peak_requested;
    alloc_stats st;
    gm_iter *iters;                /* one per iteration begun */
    size_t n_iters;
    uint64_t iter_allocs, iter_alloc_bytes; /* allocations (and bytes) inside iterations */
} gm_run;

static void run_free(gm_run *r)
{
    free(r->iters);
    memset(r, 0, sizeof *r);
}

static void snap_iter(const alloc_t *a, gm_iter *it)
{
    const alloc_stats *s = alloc_get_stats(a);
    it->stitches = s->num_stitches;
    it->new_chunks = s->num_new_chunks;
    it->segment_allocs = s->num_segment_allocs;
    it->retries = s->num_alloc_retries;
    it->reserved_peak = s->reserved_peak_bytes;
    it->active_peak = s->active_peak_bytes;
}

/* Memory series for Fig. 14: per window of events, the largest active and reserved bytes. */
typedef struct gm_series {
    ms_out *out;
    const char *label;
    size_t window, in_window, point;
    uint64_t act_max, res_max;
} gm_series;

static void series_step(gm_series *s, const alloc_t *a, size_t ev, size_t iter)
{
    if (!s || !s->out) return;
    const alloc_stats *st = alloc_get_stats(a);
    if (st->active_bytes > s->act_max) s->act_max = st->active_bytes;
    if (st->reserved_bytes > s->res_max) s->res_max = st->reserved_bytes;
    if (++s->in_window < s->window) return;
    ms_out_printf(s->out, "%s,%zu,%zu,%.6f,%.6f\n", s->label, ev, iter,
                  (double)s->act_max / GIB, (double)s->res_max / GIB);
    s->in_window = 0;
    s->act_max = s->res_max = 0;
}

static ms_status replay_prog(const gm_prog *p, const char *allocator, const machine_t *m,
                             const gm_static_plan *sp, gm_series *series, gm_run *r,
                             ms_error *err)
{
    memset(r, 0, sizeof *r);
    simbe_t *be = simbe_new(m, 0, 0);
    u64map *addr = u64map_new(4096);
    r->iters = calloc(p->n_iter + 1, sizeof *r->iters);
    if (!be || !addr || !r->iters) {
        simbe_free(be);
        u64map_free(addr);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    alloc_config cfg;
    alloc_config_default(&cfg);
    if (sp) {
        cfg.static_ids = sp->ids;
        cfg.static_offsets = sp->offsets;
        cfg.static_n = sp->n;
        cfg.static_arena_bytes = 0; /* grown on demand: an over-large plan OOMs where it grows */
    }
    alloc_t *a = NULL;
    ms_status st = alloc_new(allocator, &cfg, simbe_backend(be), &a, err);
    size_t it = 0;
    for (size_t i = 0; st == MS_OK && i < p->n; i++) {
        while (it < p->n_iter && p->iter_at[it] == i) {
            if (it) snap_iter(a, &r->iters[it - 1]);
            it++;
        }
        const gm_ev *e = &p->ev[i];
        uint64_t ad = 0;
        if (e->is_alloc) {
            st = alloc_block(a, e->bytes, e->stream, e->tag, &ad);
            if (st == MS_ERR_OOM) {
                r->oom = 1;
                r->oom_bytes = e->bytes;
                st = MS_OK;
                break;
            }
            if (st == MS_OK && u64map_put(addr, e->tag, ad)) st = MS_ERR_NOMEM;
            if (it) {
                r->iter_allocs++;
                r->iter_alloc_bytes += e->bytes;
            }
        } else if (u64map_del(addr, e->tag, &ad)) {
            st = alloc_release(a, ad);
        }
        if (st != MS_OK) {
            st = ms_fail(err, st, "%s: event %zu (%s of %" PRIu64 " bytes): %s", allocator, i,
                         e->is_alloc ? "alloc" : "free", e->bytes, ms_status_str(st));
            break;
        }
        r->events_done = i + 1;
        series_step(series, a, i, it ? it - 1 : 0);
    }
    if (a) {
        if (it) snap_iter(a, &r->iters[it - 1]);
        r->n_iters = it;
        r->st = *alloc_get_stats(a);
        r->peak_active = r->st.active_peak_bytes;
        r->peak_reserved = r->st.reserved_peak_bytes;
        r->peak_requested = r->st.requested_peak_bytes;
    }
    alloc_free(a);
    simbe_free(be);
    u64map_free(addr);
    if (st != MS_OK) run_free(r);
    return st;
}

/* ---- workloads ---- */

typedef struct gm_case {
    const char *model;
    uint64_t seq, batch;
    int dp, lora, recompute, offload, zero3, iterations;
} gm_case;

/* Trace -> plan -> schedule -> alloc/free program. */
static ms_status case_prog(const gm_opts *o, const gm_case *c, const machine_t *m, gm_prog *p,
                           ms_error *err)
{
    memset(p, 0, sizeof *p);
    gen_config g;
    gen_config_default(&g);
    ms_status st = model_lookup(c->model, &g.model, err);
    if (st != MS_OK) return st;
    g.seq = c->seq;
    g.micro_batch = c->batch;
    g.dp = c->dp;
    g.iterations = c->iterations;
    g.lora = c->lora;
    g.lora_rank = o->lora_rank;
    g.lora_mlp = c->lora ? o->lora_mlp : 0;
    g.zero3 = c->zero3;
    g.offload = c->offload;
    /* The HF transformers 4.3x loss GMLake's runs used: a contiguous copy of the shifted
     * logits; LLaMA-family models (Vicuna) upcast the logits to fp32 first. */
    g.hf_loss = o->hf_loss;
    g.hf_loss_shift = o->hf_loss;
    g.hf_loss_fp32 = o->hf_loss && (strstr(c->model, "vicuna") || strstr(c->model, "llama"));
    g.hf_logits_hold = o->hf_loss ? o->hf_hold : 0;
    trace_t *t = NULL;
    if ((st = gen_trace(&g, m, &t, err)) != MS_OK) return st;
    plan_t *plan = NULL;
    pol_opts po;
    pol_opts_default(&po);
    st = pol_plan(c->recompute ? "full-recompute" : "keep-all", t, m, &po, &plan, err);
    schedule_t *s = NULL;
    if (st == MS_OK) {
        lower_opts lo;
        lower_opts_default(&lo);
        st = lower_schedule(t, plan, m, &lo, &s, err);
    }
    if (st == MS_OK) st = prog_from_schedule(s, p, err);
    sched_free(s);
    plan_free(plan);
    trace_free(t);
    return st;
}

typedef struct gm_row {
    const char *fig, *model, *strategy, *allocator;
    int gpus;
    uint64_t seq, batch;
} gm_row;

/* A model name as a CSV field: a dims: spec's commas become colons. */
static const char *csv_name(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s", name);
    for (char *p = buf; *p; p++)
        if (*p == ',') *p = ':';
    return buf;
}

static void csv_header(ms_out *f)
{
    ms_out_printf(f, "fig,model,strategy,gpus,seq,batch,allocator,status,peak_active_gib,"
                     "peak_reserved_gib,utilization,peak_requested_gib,stitches,"
                     "stitches_last_iter,segment_allocs,alloc_retries,events,"
                     "allocs_per_iter,mean_alloc_mib\n");
}

static void csv_row(ms_out *f, const gm_row *w, const gm_run *r)
{
    uint64_t last = 0;
    if (r->n_iters >= 2)
        last = r->iters[r->n_iters - 1].stitches - r->iters[r->n_iters - 2].stitches;
    double util = r->peak_reserved ? (double)r->peak_active / (double)r->peak_reserved : 0;
    char mn[96];
    ms_out_printf(f, "%s,%s,%s,%d,%" PRIu64 ",%" PRIu64 ",%s,%s,%.4f,%.4f,%.4f,%.4f,%" PRIu64
                  ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%zu,%.1f,%.3f\n",
                  w->fig, csv_name(w->model, mn, sizeof mn), w->strategy, w->gpus, w->seq, w->batch, w->allocator,
                  r->oom ? "oom" : "ok", (double)r->peak_active / GIB,
                  (double)r->peak_reserved / GIB, util, (double)r->peak_requested / GIB,
                  r->st.num_stitches, last, r->st.num_segment_allocs, r->st.num_alloc_retries,
                  r->events_done, r->n_iters ? (double)r->iter_allocs / (double)r->n_iters : 0,
                  r->iter_allocs ? (double)r->iter_alloc_bytes / (double)r->iter_allocs / 1048576.0
                                 : 0);
}

/* Replays p through every allocator of o into runs[0 .. n_allocs-1]; the static arena's
 * offsets are planned once, on first use. On failure nothing is left to free. */
static ms_status replay_all(const gm_opts *o, const gm_prog *p, const machine_t *m,
                            gm_run *runs, ms_error *err)
{
    gm_static_plan sp = { 0 };
    int planned = 0;
    ms_status st = MS_OK;
    size_t done = 0;
    for (size_t k = 0; st == MS_OK && k < o->n_allocs; k++) {
        int is_static = !strcmp(o->allocs[k], "static");
        if (is_static && !planned) {
            planned = 1;
            if ((st = static_plan(p, &sp, err)) != MS_OK) break;
        }
        st = replay_prog(p, o->allocs[k], m, is_static ? &sp : NULL, NULL, &runs[k], err);
        if (st == MS_OK) done++;
    }
    if (st != MS_OK)
        for (size_t j = 0; j < done; j++) run_free(&runs[j]);
    static_plan_free(&sp);
    return st;
}

/* Runs one workload through every allocator and writes a row each. */
static ms_status run_case(const gm_opts *o, const gm_case *c, const machine_t *m,
                          const gm_row *base, ms_out *csv, gm_run *runs, ms_error *err)
{
    gm_prog p;
    gm_run r[GM_MAX_LIST];
    ms_status st = case_prog(o, c, m, &p, err);
    if (st == MS_OK) st = replay_all(o, &p, m, r, err);
    for (size_t k = 0; st == MS_OK && k < o->n_allocs; k++) {
        gm_row w = *base;
        w.allocator = o->allocs[k];
        csv_row(csv, &w, &r[k]);
        if (runs) runs[k] = r[k];
        else run_free(&r[k]);
    }
    prog_free(&p);
    return st;
}

static ms_status open_csv(const gm_opts *o, const char *name, ms_out **f, ms_error *err)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", o->out_dir, name);
    return ms_out_open(path, f, err);
}

static ms_status finish_csv(ms_out *f, ms_status st, ms_error *err)
{
    if (st != MS_OK) {
        ms_out_abort(f);
        return st;
    }
    return ms_out_commit(f, err);
}

/* Fig. 10: strategies N, R, LR, RO, LRO on dp GPUs with ZeRO-3, one batch. */
static ms_status fig10(const gm_opts *o, const machine_t *m, ms_error *err)
{
    ms_out *f;
    ms_status st = open_csv(o, "fig10.csv", &f, err);
    if (st != MS_OK) return st;
    csv_header(f);
    for (size_t b = 0; st == MS_OK && b < o->n_batch10; b++)
        for (size_t i = 0; st == MS_OK && i < o->n_models; i++)
            for (size_t s = 0; st == MS_OK && s < sizeof STRATS / sizeof *STRATS; s++) {
                const gm_strategy *g = &STRATS[s];
                uint64_t bs = o->batch10[b];
                gm_case c = { o->models[i], o->seq, bs, o->dp, g->lora, g->recompute,
                              g->offload, 1, o->iterations };
                gm_row w = { "10", o->models[i], g->name, NULL, o->dp, o->seq, bs };
                fprintf(stderr, "gmlake: fig10 %s %s batch %" PRIu64 "\n", o->models[i],
                        g->name, bs);
                st = run_case(o, &c, m, &w, f, NULL, err);
            }
    return finish_csv(f, st, err);
}

/* Fig. 11: LR with ZeRO-3 on 1..16 GPUs. */
static ms_status fig11(const gm_opts *o, const machine_t *m, ms_error *err)
{
    ms_out *f;
    ms_status st = open_csv(o, "fig11.csv", &f, err);
    if (st != MS_OK) return st;
    csv_header(f);
    const gm_strategy *g = strategy("LR");
    for (size_t i = 0; st == MS_OK && i < o->n_models; i++)
        for (size_t k = 0; st == MS_OK && k < o->n_gpus; k++) {
            gm_case c = { o->models[i], o->seq, o->batch11, o->gpus[k], g->lora, g->recompute,
                          g->offload, 1, o->iterations };
            gm_row w = { "11", o->models[i], g->name, NULL, o->gpus[k], o->seq, o->batch11 };
            fprintf(stderr, "gmlake: fig11 %s %d GPUs\n", o->models[i], o->gpus[k]);
            st = run_case(o, &c, m, &w, f, NULL, err);
        }
    return finish_csv(f, st, err);
}

/* One allocator's largest batch that runs without OOM (LR, ZeRO-3, dp GPUs): doubling, then
 * bisection. Each probe regenerates the workload (its program depends on the batch). */
static ms_status max_batch(const gm_opts *o, const char *model, size_t ak, const machine_t *m,
                           uint64_t *best, ms_error *err)
{
    *best = 0;
    uint64_t lo = 0, hi = 0, b = 8;
    gm_opts one = *o;
    one.allocs[0] = o->allocs[ak];
    one.n_allocs = 1;
    for (;;) {
        gm_case c = { model, o->seq, 0, o->dp, 1, 1, 0, 1, o->iterations };
        if (hi && hi - lo <= 1) break;
        c.batch = hi ? (lo + hi) / 2 : b;
        gm_prog p;
        ms_status st = case_prog(&one, &c, m, &p, err);
        gm_static_plan sp = { 0 };
        int is_static = !strcmp(one.allocs[0], "static");
        if (st == MS_OK && is_static) st = static_plan(&p, &sp, err);
        gm_run r;
        if (st == MS_OK)
            st = replay_prog(&p, one.allocs[0], m, is_static ? &sp : NULL, NULL, &r, err);
        static_plan_free(&sp);
        prog_free(&p);
        if (st != MS_OK) return st;
        int ok = !r.oom;
        run_free(&r);
        if (ok) lo = c.batch;
        else hi = c.batch;
        if (!hi) {
            if (b > (1u << 16)) break;
            b *= 2;
        }
    }
    *best = lo;
    return MS_OK;
}

/* Fig. 13: LR + ZeRO-3 over batch sizes; the largest batch each allocator runs. */
static ms_status fig13(const gm_opts *o, const machine_t *m, ms_error *err)
{
    ms_out *f, *g;
    ms_status st = open_csv(o, "fig13.csv", &f, err);
    if (st != MS_OK) return st;
    if ((st = open_csv(o, "fig13_maxbatch.csv", &g, err)) != MS_OK) {
        ms_out_abort(f);
        return st;
    }
    csv_header(f);
    ms_out_printf(g, "model,gpus,seq,allocator,max_batch\n");
    for (size_t i = 0; st == MS_OK && i < o->n_models13; i++) {
        uint64_t caching_max = 0;
        for (size_t k = 0; st == MS_OK && k < o->n_allocs; k++) {
            uint64_t mb;
            fprintf(stderr, "gmlake: fig13 %s largest batch with %s\n", o->models13[i],
                    o->allocs[k]);
            st = max_batch(o, o->models13[i], k, m, &mb, err);
            if (st != MS_OK) break;
            char mn[96];
            ms_out_printf(g, "%s,%d,%" PRIu64 ",%s,%" PRIu64 "\n",
                          csv_name(o->models13[i], mn, sizeof mn), o->dp, o->seq,
                          o->allocs[k], mb);
            if (!strcmp(o->allocs[k], "caching") || !caching_max) caching_max = mb;
        }
        /* The sweep: evenly spaced up to 1.25 x caching's largest batch, so that the OOM
         * region shows. */
        uint64_t top = caching_max + caching_max / 4, n = (uint64_t)o->sweep_points;
        if (top < n) top = n;
        for (uint64_t j = 1; st == MS_OK && j <= n; j++) {
            uint64_t b = top * j / n;
            gm_case c = { o->models13[i], o->seq, b, o->dp, 1, 1, 0, 1, o->iterations };
            gm_row w = { "13", o->models13[i], "LR", NULL, o->dp, o->seq, b };
            fprintf(stderr, "gmlake: fig13 %s batch %" PRIu64 "\n", o->models13[i], b);
            st = run_case(o, &c, m, &w, f, NULL, err);
        }
    }
    st = finish_csv(f, st, err);
    return finish_csv(g, st, err);
}

/* Fig. 14: GPT-NeoX-20B, LR, 4 GPUs, one batch, 10 iterations: stitches per iteration and
 * the memory series of each allocator. */
static ms_status fig14(const gm_opts *o, const machine_t *m, ms_error *err)
{
    gm_case c = { o->model14, o->seq, o->batch14, o->dp, 1, 1, 0, 1, o->iterations14 };
    gm_prog p;
    fprintf(stderr, "gmlake: fig14 %s batch %" PRIu64 ", %d iterations\n", o->model14,
            o->batch14, o->iterations14);
    ms_status st = case_prog(o, &c, m, &p, err);
    if (st != MS_OK) {
        prog_free(&p);
        return st;
    }
    ms_out *f = NULL, *s = NULL;
    if ((st = open_csv(o, "fig14.csv", &f, err)) == MS_OK &&
        (st = open_csv(o, "fig14_series.csv", &s, err)) == MS_OK) {
        ms_out_printf(f, "model,gpus,seq,batch,allocator,iteration,status,stitches,"
                         "new_chunks,segment_allocs,alloc_retries,peak_active_gib,"
                         "peak_reserved_gib\n");
        ms_out_printf(s, "allocator,event,iteration,active_gib,reserved_gib\n");
    }
    char mn14[96];
    csv_name(o->model14, mn14, sizeof mn14);
    for (size_t k = 0; st == MS_OK && k < o->n_allocs; k++) {
        if (!strcmp(o->allocs[k], "static")) continue; /* a plan, not a run-time allocator */
        gm_series ser = { s, o->allocs[k], p.n / GM_SERIES_POINTS + 1, 0, 0, 0, 0 };
        gm_run r;
        st = replay_prog(&p, o->allocs[k], m, NULL, &ser, &r, err);
        if (st != MS_OK) break;
        for (size_t i = 0; i < r.n_iters; i++) {
            const gm_iter *a = &r.iters[i], *b = i ? &r.iters[i - 1] : NULL;
            int last_partial = r.oom && i + 1 == r.n_iters;
            ms_out_printf(f, "%s,%d,%" PRIu64 ",%" PRIu64 ",%s,%zu,%s,%" PRIu64 ",%" PRIu64
                          ",%" PRIu64 ",%" PRIu64 ",%.4f,%.4f\n", mn14, o->dp, o->seq,
                          o->batch14, o->allocs[k], i, last_partial ? "oom" : "ok",
                          a->stitches - (b ? b->stitches : 0),
                          a->new_chunks - (b ? b->new_chunks : 0),
                          a->segment_allocs - (b ? b->segment_allocs : 0),
                          a->retries - (b ? b->retries : 0), (double)a->active_peak / GIB,
                          (double)a->reserved_peak / GIB);
        }
        run_free(&r);
    }
    prog_free(&p);
    if (f) st = finish_csv(f, st, err);
    else return st;
    if (s) st = finish_csv(s, st, err);
    return st;
}

/* The generator's version of a recorded run (traces/capture/record_snapshot.py: a small HF
 * GPT-2 trained with AdamW for a few steps), from the capture's meta lines: the same shape,
 * batch, sequence, dtype, mode and steps, the HF loss of transformers >= 4.46 (no shifted
 * copy; the logits freed with the step's outputs), AdamW's two fp32 states (8 B/param, no
 * master copy in fp32 training), LoRA on the generator's adapted linears (QKV and output
 * projection; the recording adapts c_attn, the QKV, only). 0 with *ok = 0 when the meta
 * lines are missing. */
static ms_status gen_for_capture(const trace_t *t, const machine_t *m, gm_prog *p, int *ok,
                                 ms_error *err)
{
    uint64_t L = trace_meta_u64(t, "pytorch.capture.layers", 0), H = trace_meta_u64(t, "pytorch.capture.hidden", 0);
    uint64_t A = trace_meta_u64(t, "pytorch.capture.heads", 0), V = trace_meta_u64(t, "pytorch.capture.vocab", 0);
    uint64_t S = trace_meta_u64(t, "pytorch.capture.seq", 0), B = trace_meta_u64(t, "pytorch.capture.batch", 0);
    uint64_t steps = trace_meta_u64(t, "pytorch.capture.steps", 0), r = trace_meta_u64(t, "pytorch.capture.lora_r", 0);
    const char *mode = trace_get_meta(t, "pytorch.capture.mode");
    const char *dt = trace_get_meta(t, "pytorch.capture.dtype");
    memset(p, 0, sizeof *p);
    *ok = 0;
    if (!L || !H || !A || !V || !S || !B || !steps || !mode || !dt) return MS_OK;
    char dims[128];
    snprintf(dims, sizeof dims, "dims:%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64,
             L, H, A, 4 * H, V);
    gen_config g;
    gen_config_default(&g);
    ms_status st = model_lookup(dims, &g.model, err);
    if (st != MS_OK) return st;
    g.seq = S;
    g.micro_batch = B;
    g.iterations = (int)steps;
    g.dtype_bytes = strcmp(dt, "float32") ? 2 : 4;
    g.grad_bytes = g.dtype_bytes;
    g.opt_bytes_per_param = g.dtype_bytes == 4 ? 8 : 12;
    g.lora = !strcmp(mode, "lora");
    g.lora_rank = g.lora && r ? (int)r : 8;
    g.hf_loss = 1;
    g.hf_loss_fp32 = g.dtype_bytes != 4;
    trace_t *gt = NULL;
    if ((st = gen_trace(&g, m, &gt, err)) != MS_OK) return st;
    plan_t *plan = NULL;
    pol_opts po;
    pol_opts_default(&po);
    st = pol_plan(!strcmp(mode, "checkpoint") ? "full-recompute" : "keep-all", gt, m, &po, &plan,
                  err);
    schedule_t *s = NULL;
    if (st == MS_OK) {
        lower_opts lo;
        lower_opts_default(&lo);
        st = lower_schedule(gt, plan, m, &lo, &s, err);
    }
    if (st == MS_OK) st = prog_from_schedule(s, p, err);
    sched_free(s);
    plan_free(plan);
    trace_free(gt);
    *ok = st == MS_OK;
    return st;
}

/* The imported PyTorch traces through every allocator, beside PyTorch's own peak reserved
 * (its memory_stats, else the importer's estimate from segment events); and the generator's
 * version of each recorded run through the allocator PyTorch used (real_gen.csv). */
static ms_status real_traces(const gm_opts *o, const machine_t *m, ms_error *err)
{
    ms_out *f, *g;
    ms_status st = open_csv(o, "real.csv", &f, err);
    if (st != MS_OK) return st;
    if ((st = open_csv(o, "real_gen.csv", &g, err)) != MS_OK) {
        ms_out_abort(f);
        return st;
    }
    ms_out_printf(f, "trace,mode,allocator,status,pytorch_peak_reserved_mb,"
                     "pytorch_peak_allocated_mb,memsim_peak_reserved_mb,"
                     "memsim_peak_active_mb,utilization,stitches,segment_allocs\n");
    ms_out_printf(g, "trace,mode,allocator,pytorch_peak_allocated_mb,pytorch_peak_reserved_mb,"
                     "recorded_replay_peak_reserved_mb,generated_peak_allocated_mb,"
                     "generated_peak_reserved_mb,recorded_allocs,generated_allocs\n");
    for (size_t i = 0; st == MS_OK && i < o->n_real; i++) {
        trace_t *t = NULL;
        fprintf(stderr, "gmlake: replay %s\n", o->real[i]);
        if ((st = trace_load(o->real[i], &t, err)) != MS_OK) break;
        uint64_t pr = trace_meta_u64(t, "pytorch.stats.reserved_bytes.all.peak", 0);
        if (!pr) pr = trace_meta_u64(t, "pytorch.peak_reserved_bytes", 0);
        uint64_t pa = trace_meta_u64(t, "pytorch.stats.allocated_bytes.all.peak", 0);
        const char *mode = trace_get_meta(t, "pytorch.capture.mode");
        const char *conf = trace_get_meta(t, "pytorch.capture.alloc_conf");
        char label[128];
        snprintf(label, sizeof label, "%s%s", mode ? mode : "-",
                 conf && strstr(conf, "expandable") ? "+expandable" : "");
        const char *base = strrchr(o->real[i], '/');
        base = base ? base + 1 : o->real[i];
        const char *pt_alloc = conf && strstr(conf, "expandable") ? "expandable" : "caching";
        gm_prog p = { 0 }, q = { 0 };
        int have_gen = 0;
        st = prog_from_trace(t, &p, err);
        if (st == MS_OK) st = gen_for_capture(t, m, &q, &have_gen, err);
        trace_free(t);
        if (st == MS_OK && have_gen) {
            gm_run rr, rg;
            st = replay_prog(&p, pt_alloc, m, NULL, NULL, &rr, err);
            if (st == MS_OK) {
                st = replay_prog(&q, pt_alloc, m, NULL, NULL, &rg, err);
                if (st == MS_OK) {
                    size_t na = 0;
                    for (size_t e = 0; e < p.n; e++) na += p.ev[e].is_alloc;
                    size_t ng = 0;
                    for (size_t e = 0; e < q.n; e++) ng += q.ev[e].is_alloc;
                    ms_out_printf(g, "%s,%s,%s,%.2f,%.2f,%.2f,%.2f,%.2f,%zu,%zu\n", base, label,
                                  pt_alloc, (double)pa / 1048576.0, (double)pr / 1048576.0,
                                  (double)rr.peak_reserved / 1048576.0,
                                  (double)rg.st.allocated_peak_bytes / 1048576.0,
                                  (double)rg.peak_reserved / 1048576.0, na, ng);
                    run_free(&rg);
                }
                run_free(&rr);
            }
        }
        prog_free(&q);
        gm_run runs[GM_MAX_LIST];
        if (st == MS_OK) st = replay_all(o, &p, m, runs, err);
        for (size_t k = 0; st == MS_OK && k < o->n_allocs; k++) {
            const gm_run r = runs[k];
            ms_out_printf(f, "%s,%s,%s,%s,%.2f,%.2f,%.2f,%.2f,%.4f,%" PRIu64 ",%" PRIu64 "\n",
                          base, label, o->allocs[k], r.oom ? "oom" : "ok", (double)pr / 1048576.0,
                          (double)pa / 1048576.0, (double)r.peak_reserved / 1048576.0,
                          (double)r.peak_active / 1048576.0,
                          r.peak_reserved ? (double)r.peak_active / (double)r.peak_reserved : 0,
                          r.st.num_stitches, r.st.num_segment_allocs);
            run_free(&runs[k]);
        }
        prog_free(&p);
    }
    st = finish_csv(f, st, err);
    return finish_csv(g, st, err);
}

/* ---- command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memsim gmlake [options]\n"
            "GMLake's fragmentation study (ASPLOS'24 §5): generated fine-tuning workloads\n"
            "(LoRA, recomputation, offload over ZeRO-3) replayed through the caching,\n"
            "stitching, expandable and static allocators; writes CSV files.\n\noptions:\n"
            "  --out DIR             output directory (default out/gmlake)\n"
            "  --figs LIST           10,11,13,14,real or all (default all but real)\n"
            "  --machine NAME|FILE   device (default a100-80g-pcie4)\n"
            "  --seq N               sequence length (default 512)\n"
            "  --batch LIST          micro-batches of Fig. 10 (default 4,32)\n"
            "  --batch11 N           micro-batch of Fig. 11 (default 32)\n"
            "  --gpus N              data-parallel GPUs of Figs. 10, 13, 14 (default 4)\n"
            "  --gpu-list LIST       GPUs of Fig. 11 (default 1,2,4,8,16)\n"
            "  --iterations N        iterations per workload (default 3)\n"
            "  --lora-rank N         adapter rank (default 128)\n"
            "  --lora-mlp 0|1        adapters on the MLP too (default 1)\n"
            "  --hf-loss 0|1         HF transformers' loss tensors (default 1; 0: fused)\n"
            "  --hf-hold 0|1         logits held until the next forward (default 1)\n"
            "  --models LIST         Figs. 10, 11 (default opt-13b,vicuna-13b,gpt-neox-20b)\n"
            "  --models13 LIST       Fig. 13 (default opt-1.3b,opt-13b,vicuna-13b,gpt-neox-20b)\n"
            "  --sweep-points N      Fig. 13 batch sizes per model (default 6)\n"
            "  --model14 NAME        Fig. 14 (default gpt-neox-20b)\n"
            "  --batch14 N           Fig. 14 batch (default 72)\n"
            "  --iterations14 N      Fig. 14 iterations (default 10)\n"
            "  --allocators LIST     default caching,stitching,expandable,static\n"
            "  --real FILE           an imported PyTorch trace to replay (repeatable)\n"
            "\nexamples (from the source directory, sim/ on the PATH):\n"
            "  memsim gmlake --out out/gmlake\n"
            "  memsim gmlake --allocators caching,stitching --out out/gmlake-2\n");
}

static size_t split_list(char *buf, const char **out, size_t max)
{
    size_t n = 0;
    for (char *s = strtok(buf, ","); s && n < max; s = strtok(NULL, ",")) out[n++] = s;
    return n;
}

/* A model list: names separated by commas; a "dims:L,H,A,F,V" entry keeps its own commas. */
static size_t split_models(char *buf, const char **out, size_t max)
{
    size_t n = 0;
    char *s = buf;
    while (*s && n < max) {
        char *end = s;
        int commas = strncmp(s, "dims:", 5) == 0 ? 4 : 0;
        while (*end && (*end != ',' || commas-- > 0)) end++;
        if (*end) *end++ = 0;
        if (*s) out[n++] = s;
        s = end;
    }
    return n;
}

static int parse_int(const char *v, int lo, int hi, int *out)
{
    uint64_t x;
    if (!ms_parse_u64(v, &x) || x < (uint64_t)lo || x > (uint64_t)hi) return 0;
    *out = (int)x;
    return 1;
}

static int bad(const char *opt, const char *v)
{
    fprintf(stderr, "memsim gmlake: bad value '%s' for %s\n", v, opt);
    return MS_EXIT_USAGE;
}

static void opts_default(gm_opts *o)
{
    memset(o, 0, sizeof *o);
    o->out_dir = "out/gmlake";
    o->machine = "a100-80g-pcie4";
    o->figs = GM_FIG10 | GM_FIG11 | GM_FIG13 | GM_FIG14;
    o->seq = 512;
    o->batch10[o->n_batch10++] = 4;
    o->batch10[o->n_batch10++] = 32;
    o->batch11 = 32;
    o->iterations = 3;
    o->lora_rank = 128;
    o->lora_mlp = 1;
    o->hf_loss = 1;
    o->hf_hold = 1;
    o->dp = 4;
    static const char *const mdl[] = { "opt-13b", "vicuna-13b", "gpt-neox-20b" };
    static const char *const m13[] = { "opt-1.3b", "opt-13b", "vicuna-13b", "gpt-neox-20b" };
    static const char *const al[] = { "caching", "stitching", "expandable", "static" };
    for (size_t i = 0; i < 3; i++) o->models[o->n_models++] = mdl[i];
    for (size_t i = 0; i < 4; i++) o->models13[o->n_models13++] = m13[i];
    for (size_t i = 0; i < 4; i++) o->allocs[o->n_allocs++] = al[i];
    for (int g = 1; g <= 16; g *= 2) o->gpus[o->n_gpus++] = g;
    o->model14 = "gpt-neox-20b";
    o->batch14 = 72;
    o->iterations14 = 10;
    o->sweep_points = 6;
}

static int parse_figs(char *v, unsigned *figs)
{
    *figs = 0;
    const char *tok[8];
    size_t n = split_list(v, tok, 8);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(tok[i], "10")) *figs |= GM_FIG10;
        else if (!strcmp(tok[i], "11")) *figs |= GM_FIG11;
        else if (!strcmp(tok[i], "13")) *figs |= GM_FIG13;
        else if (!strcmp(tok[i], "14")) *figs |= GM_FIG14;
        else if (!strcmp(tok[i], "real")) *figs |= GM_REAL;
        else if (!strcmp(tok[i], "all")) *figs |= 31;
        else return 0;
    }
    return n > 0;
}

enum { O_OUT = 1, O_FIGS, O_MACHINE, O_SEQ, O_BATCH, O_GPUS, O_GPULIST, O_ITERS, O_RANK,
       O_MLP, O_MODELS, O_MODELS13, O_SWEEP, O_MODEL14, O_BATCH14, O_ITERS14, O_ALLOCS,
       O_REAL, O_HFLOSS, O_HFHOLD, O_BATCH11, O_HELP };

static int parse_args(int argc, char **argv, gm_opts *o)
{
    static const struct option lo[] = {
        { "out", required_argument, 0, O_OUT }, { "figs", required_argument, 0, O_FIGS },
        { "machine", required_argument, 0, O_MACHINE }, { "seq", required_argument, 0, O_SEQ },
        { "batch", required_argument, 0, O_BATCH }, { "gpus", required_argument, 0, O_GPUS },
        { "batch11", required_argument, 0, O_BATCH11 },
        { "gpu-list", required_argument, 0, O_GPULIST },
        { "iterations", required_argument, 0, O_ITERS },
        { "lora-rank", required_argument, 0, O_RANK },
        { "lora-mlp", required_argument, 0, O_MLP },
        { "models", required_argument, 0, O_MODELS },
        { "models13", required_argument, 0, O_MODELS13 },
        { "sweep-points", required_argument, 0, O_SWEEP },
        { "model14", required_argument, 0, O_MODEL14 },
        { "batch14", required_argument, 0, O_BATCH14 },
        { "iterations14", required_argument, 0, O_ITERS14 },
        { "allocators", required_argument, 0, O_ALLOCS },
        { "real", required_argument, 0, O_REAL }, { "help", no_argument, 0, O_HELP },
        { "hf-loss", required_argument, 0, O_HFLOSS },
        { "hf-hold", required_argument, 0, O_HFHOLD },
        { 0, 0, 0, 0 },
    };
    int c, x;
    uint64_t u;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (c) {
        case O_OUT: o->out_dir = optarg; break;
        case O_FIGS:
            snprintf(o->lists[3], sizeof o->lists[3], "%s", optarg);
            if (!parse_figs(o->lists[3], &o->figs)) return bad("--figs", optarg);
            break;
        case O_MACHINE: o->machine = optarg; break;
        case O_SEQ:
            if (!ms_parse_u64(optarg, &o->seq) || !o->seq) return bad("--seq", optarg);
            break;
        case O_BATCH: {
            char buf[256];
            const char *tok[GM_MAX_LIST];
            snprintf(buf, sizeof buf, "%s", optarg);
            size_t n = split_list(buf, tok, GM_MAX_LIST);
            o->n_batch10 = 0;
            for (size_t i = 0; i < n; i++) {
                if (!ms_parse_u64(tok[i], &u) || !u) return bad("--batch", optarg);
                o->batch10[o->n_batch10++] = u;
            }
            if (!o->n_batch10) return bad("--batch", optarg);
            break;
        }
        case O_BATCH11:
            if (!ms_parse_u64(optarg, &u) || !u) return bad("--batch11", optarg);
            o->batch11 = u;
            break;
        case O_GPUS:
            if (!parse_int(optarg, 1, 4096, &o->dp)) return bad("--gpus", optarg);
            break;
        case O_GPULIST: {
            char buf[256];
            const char *tok[GM_MAX_LIST];
            snprintf(buf, sizeof buf, "%s", optarg);
            size_t n = split_list(buf, tok, GM_MAX_LIST);
            o->n_gpus = 0;
            for (size_t i = 0; i < n; i++) {
                if (!parse_int(tok[i], 1, 4096, &x)) return bad("--gpu-list", optarg);
                o->gpus[o->n_gpus++] = x;
            }
            if (!o->n_gpus) return bad("--gpu-list", optarg);
            break;
        }
        case O_ITERS:
            if (!parse_int(optarg, 1, 1000, &o->iterations)) return bad("--iterations", optarg);
            break;
        case O_RANK:
            if (!parse_int(optarg, 1, 65536, &o->lora_rank)) return bad("--lora-rank", optarg);
            break;
        case O_MLP:
            if (!parse_int(optarg, 0, 1, &o->lora_mlp)) return bad("--lora-mlp", optarg);
            break;
        case O_MODELS:
            snprintf(o->lists[0], sizeof o->lists[0], "%s", optarg);
            o->n_models = split_models(o->lists[0], o->models, GM_MAX_LIST);
            break;
        case O_MODELS13:
            snprintf(o->lists[1], sizeof o->lists[1], "%s", optarg);
            o->n_models13 = split_models(o->lists[1], o->models13, GM_MAX_LIST);
            break;
        case O_SWEEP:
            if (!parse_int(optarg, 1, 100, &o->sweep_points)) return bad("--sweep-points", optarg);
            break;
        case O_MODEL14: o->model14 = optarg; break;
        case O_HFLOSS:
            if (!parse_int(optarg, 0, 1, &o->hf_loss)) return bad("--hf-loss", optarg);
            break;
        case O_HFHOLD:
            if (!parse_int(optarg, 0, 1, &o->hf_hold)) return bad("--hf-hold", optarg);
            break;
        case O_BATCH14:
            if (!ms_parse_u64(optarg, &u) || !u) return bad("--batch14", optarg);
            o->batch14 = u;
            break;
        case O_ITERS14:
            if (!parse_int(optarg, 1, 1000, &o->iterations14)) return bad("--iterations14", optarg);
            break;
        case O_ALLOCS:
            snprintf(o->lists[2], sizeof o->lists[2], "%s", optarg);
            o->n_allocs = split_list(o->lists[2], o->allocs, GM_MAX_LIST);
            for (size_t i = 0; i < o->n_allocs; i++)
                if (!alloc_find(o->allocs[i])) return bad("--allocators", o->allocs[i]);
            break;
        case O_REAL:
            if (o->n_real >= GM_MAX_LIST) return bad("--real", optarg);
            o->real[o->n_real++] = optarg;
            o->figs |= GM_REAL;
            break;
        case O_HELP: usage(stdout); return -1;
        default:
            fprintf(stderr, "memsim gmlake: unknown or incomplete option '%s'\n", name);
            usage(stderr);
            return MS_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "memsim gmlake: unexpected argument '%s'\n", argv[optind]);
        return MS_EXIT_USAGE;
    }
    if (!o->n_models || !o->n_models13 || !o->n_allocs) {
        fprintf(stderr, "memsim gmlake: empty model or allocator list\n");
        return MS_EXIT_USAGE;
    }
    if ((o->figs & GM_REAL) && !o->n_real) {
        fprintf(stderr, "memsim gmlake: --figs real needs --real FILE\n");
        return MS_EXIT_USAGE;
    }
    return 0;
}

static int make_dir(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

int driver_gmlake(int argc, char **argv)
{
    gm_opts o;
    opts_default(&o);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    ms_error err;
    ms_error_clear(&err);
    machine_profile *mp = NULL;
    ms_status st = machine_load_named(o.machine, &mp, &err);
    if (st != MS_OK) return cli_fail("gmlake", st, &err);
    if (make_dir(o.out_dir)) {
        fprintf(stderr, "memsim gmlake: cannot create %s: %s\n", o.out_dir, strerror(errno));
        machine_profile_free(mp);
        return MS_EXIT_IO;
    }
    const machine_t *m = &mp->m;
    if (o.figs & GM_FIG10) st = fig10(&o, m, &err);
    if (st == MS_OK && (o.figs & GM_FIG11)) st = fig11(&o, m, &err);
    if (st == MS_OK && (o.figs & GM_FIG13)) st = fig13(&o, m, &err);
    if (st == MS_OK && (o.figs & GM_FIG14)) st = fig14(&o, m, &err);
    if (st == MS_OK && (o.figs & GM_REAL)) st = real_traces(&o, m, &err);
    machine_profile_free(mp);
    if (st != MS_OK) return cli_fail("gmlake", st, &err);
    return MS_EXIT_OK;
}

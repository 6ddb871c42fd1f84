/* driver.c — `memsim protrain`: ProTrain (Yang et al.) reproduced in memsim. Subcommands:
 *   search  one workload: the chunk layout, the cost-model search, the chosen configuration,
 *           and (--validate) every evaluated configuration simulated against its prediction;
 *   table4  the configurations the search picks for ProTrain's Table 4 rows;
 *   table2  the largest GPT-2 each backend trains on 1 and 4 GPUs of each machine;
 *   fig3    the best throughput of each backend on Table 1's models (batch sweep);
 *   fig6    predicted vs simulated iteration time and peak over the searched configurations.
 * Each writes tab-separated results that experiments/protrain/run.sh compares with the paper
 * and plots/protrain_*.gp draw. Simulation: the pipeline `memsim simulate` runs
 * (sim/pipeline.h; the plans' chunk lowering). Called by memsim-paper (experiments/main.c),
 * which memsim hands `memsim protrain` over to. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "planners/knob.h"
#include "planners/protrain/cost_protrain.h"
#include "planners/protrain/lower_chunks.h"
#include "planners/policy.h"
#include "planners/protrain/policy_offload_baselines.h"
#include "planners/protrain/policy_protrain.h"
#include "experiments/protrain/driver.h"
#include "sim/pipeline.h"
#include "traces/gen.h"
#include "traces/jobview.h"
#include "traces/machine.h"
#include "traces/models.h"
#include "base/u64map.h"

#define PT_MAX_KNOBS 24
#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct pt_opts {
    const char *sub;
    const char *machine;       /* NULL: both ProTrain testbeds where the subcommand uses both */
    const char *model;
    uint64_t batch;            /* global batch over the GPUs */
    uint64_t seq;
    int gpus;
    int hf_eager;              /* HF eager attention activations (see add_hf) */
    int hf_gelu_new;           /* GPT-2's gelu_new as HF runs it, unfused (see add_hf) */
    int validate;              /* search: configurations to simulate (0 none, -1 all) */
    const char *out_dir;
    const char *csv;
    pol_knob knobs[PT_MAX_KNOBS];
    size_t n_knobs;
    char knob_buf[PT_MAX_KNOBS][160];
    int quick;                 /* fewer models / batches (tests) */
    const char *m3090, *ma100; /* the two testbeds' profiles (names or files) */
    const char *trace_out;     /* search: write the workload trace (as simulated) */
    const char *plan_out;      /* search: write the plan of the chosen configuration */
} pt_opts;

/* ---------------------------------------------------------------- workloads */

/* What a Hugging Face model's block keeps beyond the generator's trace, and what it costs.
 *
 * Eager attention (HF GPT-2 and the others ProTrain ran, pt_opts.hf_eager): per layer the
 * attention probabilities and their dropout output and mask (5·a·s²·b bytes) and the two
 * hidden-size dropout masks (2·s·b·h bytes): Korthikanti et al.'s 34sbh + 5as²b against the
 * generator's flash-attention 32sbh (bf16, no dropout). One skeletal tensor per layer, made by
 * the attention op and freed after its backward; the attention kernels are charged the score
 * matrix's memory traffic (written and read three times forward, five times backward).
 *
 * GPT-2's `gelu_new` (pt_opts.hf_gelu_new): transformers' NewGELUActivation is a Python
 * expression, 0.5·x·(1 + tanh(c·(x + 0.044715·x³))), not a fused kernel. Autograd keeps its
 * input, the tanh, 0.5·x and 1 + tanh: three tensors of the MLP width more than a fused GeLU
 * (6·s·b·f bytes), freed after the activation's backward; its eight forward kernels make 18
 * passes over an s·b·f tensor against a fused GeLU's 2, its backward 28 against 3. Measured
 * on an H100 (experiments/protrain/act_probe.py, act_h100/): one GPT2Block at hidden 1536,
 * batch 8 keeps 302.0 MB more with gelu_new than with the fused tanh GeLU (6·s·b·f =
 * 302.0 MB), and otherwise exactly 34sbh + 5as²b less its input; forward +0.58 ms, backward
 * +0.85 ms (16 and 25 passes at the probed 2.99 TB/s; memsim times them at hbm_Bps ×
 * mem_eff, about 20 % slower). */
typedef struct hf_add {
    uint64_t attn_bytes, gelu_bytes;   /* per layer, kept */
    double attn_fwd_us, attn_bwd_us;   /* extra time of one attention op */
    double gelu_fwd_us, gelu_bwd_us;   /* extra time of one activation op */
} hf_add;

static void hf_sizes(const trace_t *in, const machine_t *m, int eager, int gelu_new, hf_add *x)
{
    uint64_t b = 1, s = 1024, a = 1, h = 1, f = 4, tp = 1, cp = 1;
    const char *v;
    if ((v = trace_get_meta(in, "batch"))) ms_parse_u64(v, &b);
    if ((v = trace_get_meta(in, "seq"))) ms_parse_u64(v, &s);
    if ((v = trace_get_meta(in, "heads"))) ms_parse_u64(v, &a);
    if ((v = trace_get_meta(in, "hidden"))) ms_parse_u64(v, &h);
    if ((v = trace_get_meta(in, "ffn"))) ms_parse_u64(v, &f);
    if ((v = trace_get_meta(in, "tp"))) ms_parse_u64(v, &tp);
    if ((v = trace_get_meta(in, "cp"))) ms_parse_u64(v, &cp);
    if (!tp) tp = 1;
    uint64_t sl = s / (cp ? cp : 1);
    double bw = m ? m->gpu_hbm_Bps * (m->gpu_mem_eff > 0 ? m->gpu_mem_eff : 1) : 0;
    double score = 2.0 * (double)(a / tp) * (double)sl * (double)s * (double)b;
    double act = 2.0 * (double)sl * (double)b * (double)(f / tp);
    memset(x, 0, sizeof *x);
    if (eager) {
        x->attn_bytes = 5 * (a / tp) * sl * s * b + 2 * sl * b * h / tp;
        x->attn_fwd_us = bw > 0 ? 6 * score / bw * 1e6 : 0;
        x->attn_bwd_us = bw > 0 ? 10 * score / bw * 1e6 : 0;
    }
    if (gelu_new) {
        x->gelu_bytes = 3 * (uint64_t)act;
        x->gelu_fwd_us = bw > 0 ? 16 * act / bw * 1e6 : 0;
        x->gelu_bwd_us = bw > 0 ? 25 * act / bw * 1e6 : 0;
    }
}

/* Appends the forward op c with one more output, a new skeletal tensor of bytes for layer l. */
static ms_status hf_keep(trace_t *t, trace_rec *c, uint64_t id, uint64_t bytes,
                         const char *what, uint64_t *outs)
{
    const trace_op *op = &c->u.op;
    trace_rec al;
    memset(&al, 0, sizeof al);
    al.type = TR_ALLOC;
    al.u.alloc.id = id;
    al.u.alloc.bytes = bytes;
    al.u.alloc.cls = TC_ACT_SKEL;
    al.u.alloc.layer = op->layer;
    al.u.alloc.tok_scaled = 1;
    al.u.alloc.producer = (int64_t)op->id;
    snprintf(al.u.alloc.name, sizeof al.u.alloc.name, "L%d.%s", op->layer, what);
    ms_status st = trace_append(t, &al);
    memcpy(outs, op->out, op->n_out * sizeof *outs);
    outs[op->n_out] = id;
    c->u.op.out = outs;
    c->u.op.n_out = op->n_out + 1;
    return st ? st : trace_append(t, c);
}

static ms_status hf_free(trace_t *t, uint64_t id)
{
    trace_rec fr;
    memset(&fr, 0, sizeof fr);
    fr.type = TR_FREE;
    fr.u.free_id = id;
    return trace_append(t, &fr);
}

/* One op of in onto t: the extra tensor and time of its kind (attention or activation). */
static ms_status hf_op(trace_t *t, const trace_rec *r, const hf_add *x, u64map *kept,
                       uint64_t *next_id)
{
    const trace_op *op = &r->u.op;
    int attn = op->kind == TK_ATTN && x->attn_bytes;
    int gelu = op->kind == TK_ACT && x->gelu_bytes;
    trace_rec c = *r;
    if ((!attn && !gelu) || op->layer < 0 || op->n_out >= 63) return trace_append(t, &c);
    uint64_t outs[64], key = (uint64_t)op->layer * 2 + (uint64_t)gelu, id;
    int fwd = op->phase == TP_FWD;
    if (c.u.op.dur_us >= 0)
        c.u.op.dur_us += attn ? (fwd ? x->attn_fwd_us : x->attn_bwd_us)
                              : (fwd ? x->gelu_fwd_us : x->gelu_bwd_us);
    if (fwd) {
        id = (*next_id)++;
        if (u64map_put(kept, key, id)) return MS_ERR_NOMEM;
        return hf_keep(t, &c, id, attn ? x->attn_bytes : x->gelu_bytes,
                       attn ? "attn_probs" : "gelu_new", outs);
    }
    ms_status st = trace_append(t, &c);
    if (!st && op->phase == TP_BWD && u64map_del(kept, key, &id)) st = hf_free(t, id);
    return st;
}

static ms_status add_hf(const trace_t *in, const machine_t *m, int eager, int gelu_new,
                        trace_t **out, ms_error *err)
{
    *out = NULL;
    hf_add x;
    hf_sizes(in, m, eager, gelu_new, &x);
    trace_t *t = trace_new();
    u64map *kept = u64map_new(256); /* layer * 2 + (1: activation, 0: attention) -> id */
    if (!t || !kept) {
        trace_free(t);
        u64map_free(kept);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    ms_status st = MS_OK;
    for (size_t i = 0; i < trace_meta_count(in) && !st; i++)
        st = trace_set_meta(t, trace_meta_key(in, i), trace_meta_value(in, i));
    if (!st && eager) st = trace_set_meta(t, "attn", "eager");
    if (!st && gelu_new) st = trace_set_meta(t, "act_impl", "gelu_new");
    uint64_t next_id = 0;
    for (size_t i = 0; i < trace_count(in); i++) {
        const trace_rec *r = trace_get(in, i);
        if (r->type == TR_ALLOC && r->u.alloc.id >= next_id) next_id = r->u.alloc.id + 1;
    }
    for (size_t i = 0; i < trace_count(in) && !st; i++) {
        const trace_rec *r = trace_get(in, i);
        st = r->type == TR_OP ? hf_op(t, r, &x, kept, &next_id) : trace_append(t, r);
    }
    u64map_free(kept);
    if (st) {
        trace_free(t);
        return ms_fail(err, st, "cannot build the Hugging Face trace");
    }
    *out = t;
    return MS_OK;
}

/* Hugging Face's GPT-2 (GPT2LMHeadModel, activation gelu_new): the gpt2-* models and Table 2's
 * ladder of GPT-2 shapes. */
static int is_hf_gpt2(const char *model)
{
    return strncmp(model, "gpt2", 4) == 0 || strncmp(model, "dims:", 5) == 0;
}

static ms_status make_trace(const char *model, uint64_t batch, int gpus, const pt_opts *o,
                            const machine_t *m, trace_t **out, ms_error *err)
{
    gen_config c;
    gen_config_default(&c);
    ms_status st = model_lookup(model, &c.model, err);
    if (st) return st;
    if (gpus < 1 || batch < (uint64_t)gpus || batch % (uint64_t)gpus)
        return ms_fail(err, MS_ERR_INVALID, "batch %" PRIu64 " does not split over %d GPUs",
                       batch, gpus);
    c.seq = o->seq ? o->seq : c.model.default_seq;
    c.micro_batch = batch / (uint64_t)gpus;
    c.dp = gpus;
    c.iterations = 2;
    if ((st = gen_validate(&c, err))) return st;
    trace_t *t;
    if ((st = gen_trace(&c, m, &t, err))) return st;
    int gelu_new = o->hf_gelu_new && is_hf_gpt2(model) && c.model.mlp == MODEL_MLP_GELU;
    if (!o->hf_eager && !gelu_new) {
        *out = t;
        return MS_OK;
    }
    st = add_hf(t, m, o->hf_eager, gelu_new, out, err);
    trace_free(t);
    return st;
}

/* A GPT-2 of L blocks at hidden 8192 (ProTrain Table 1's large GPT-2 shape): the ladder of
 * Table 2's largest-model search. */
static void ladder_name(int layers, char *buf, size_t n)
{
    snprintf(buf, n, "dims:%d,8192,64,32768,50257", layers);
}

/* ---------------------------------------------------------------- simulation */

typedef struct pt_run {
    sim_result r;
    double tokens_per_s;      /* all GPUs */
} pt_run;

/* Plan p simulated by the pipeline `memsim simulate` runs (its lowering, this GPU's share of
 * the node), and the job's throughput. */
static ms_status simulate(const trace_t *t, const machine_t *m, const plan_t *p, pt_run *out,
                          ms_error *err)
{
    memset(out, 0, sizeof *out);
    ms_status st = pipe_simulate(t, m, p, NULL, &out->r, err);
    if (st) return st;
    jobview jv;
    jobview_of(t, m, &jv);
    uint64_t b = 1, seq = 1, dp = jv.dp ? jv.dp : 1;
    const char *v;
    if ((v = trace_get_meta(t, "batch"))) ms_parse_u64(v, &b);
    if ((v = trace_get_meta(t, "seq"))) ms_parse_u64(v, &seq);
    if (out->r.status == RS_OK && out->r.iter_time_s > 0)
        out->tokens_per_s = (double)(b * seq * dp) / out->r.iter_time_s;
    return MS_OK;
}

/* A plan for configuration c under knobs k (the chunk size of the layout). */
static ms_status config_plan(const ptc_model *M, const ptc_config *c, const ptc_estimate *e,
                             plan_t **out, ms_error *err)
{
    lc_knobs k = pt_config_knobs(M, c, e);
    plan_t *p = plan_new("protrain", "caching");
    if (!p) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_status st = lc_knobs_to_plan(&k, p, err);
    if (st) {
        plan_free(p);
        return st;
    }
    *out = p;
    return MS_OK;
}

static void pol_opts_of(const pt_opts *o, pol_opts *po)
{
    pol_opts_default(po);
    po->knobs = o->knobs;
    po->n_knobs = o->n_knobs;
}

/* ---------------------------------------------------------------- output helpers */

/* A progress line on standard error: "memsim protrain: WHAT [i/n] ...", one per step of a
 * table or figure (experiments/protrain/run.sh shows these and keeps the rest of standard
 * error apart). Standard output and the output files do not change. */
static void progress(const char *what, size_t i, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void progress(const char *what, size_t i, size_t n, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "memsim protrain: %s [%zu/%zu] ", what, i, n);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

static int fail(ms_status st, const ms_error *err)
{
    fprintf(stderr, "memsim protrain: %s\n", err->msg);
    return ms_exit_code(st);
}

/* An output of the run, OUTDIR/name (stdout without -o), written to a temporary file and
 * renamed into place by close_out, so a failed run leaves no half-written table. */
static ms_out *open_out(const pt_opts *o, const char *name, ms_error *err)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", o->out_dir ? o->out_dir : "", name);
    ms_out *f = NULL;
    if (ms_out_open(o->out_dir ? path : "-", &f, err) != MS_OK) return NULL;
    return f;
}

/* Commits f when the run succeeded (rc 0) or removes it; the exit status, a write error's
 * included. */
static int close_out(ms_out *f, int rc)
{
    if (!f) return rc;
    if (rc) {
        ms_out_abort(f);
        return rc;
    }
    ms_error err;
    ms_status st = ms_out_commit(f, &err);
    return st ? fail(st, &err) : 0;
}

static int load_machine(const char *name, machine_profile **mp)
{
    ms_error err;
    if (machine_load_named(name, mp, &err)) {
        fprintf(stderr, "memsim protrain: %s\n", err.msg);
        return MS_EXIT_INPUT;
    }
    return 0;
}


/* The search line: what the search did and the bounds on n_swap at configuration c (the
 * chosen one, or the one given, which no search bounded). */
static void print_search(const ptc_model *M, const machine_t *m, const ptc_search_opts *so,
                         const ptc_search_result *r, int given, const ptc_config *c)
{
    int nint = ptc_swap_interval(M), nmax = ptc_swap_max(M, so->max_swap);
    int nbw = ptc_swap_bw_limit(M, c->n_persist, c->n_buffer);
    char bw[64] = "none", b1[32];
    if (nbw >= 0 && nbw < INT_MAX)
        snprintf(bw, sizeof bw, "%d%s", nbw, given && c->n_swap > nbw ? " (n_swap above it)" : "");
    uint64_t cap = so->capacity_bytes ? so->capacity_bytes : machine_usable_bytes(m);
    cap = (uint64_t)((double)cap * (1.0 - so->mem_margin));
    if (given)
        printf("search: none (configuration given), ");
    else
        printf("search: space %zu, evaluated %zu, pruned %zu, ", r->space, r->evaluated,
               r->pruned);
    printf("swap interval %d (n_swap <= %d), bandwidth bound %s%s, capacity %s\n", nint, nmax, bw,
           so->swap_bw ? "" : " (off)", ms_fmt_bytes(given ? cap : r->capacity_bytes, b1, sizeof b1));
}

static const char *cfg_str(const ptc_config *c, char *buf, size_t n)
{
    snprintf(buf, n, "persist=%d buffer=%d swap=%d ckpt=%d", c->n_persist, c->n_buffer,
             c->n_swap, c->n_ckpt);
    return buf;
}

/* When the tie band picked another configuration than the fastest, says so: the pick rests
 * on memsim's rule, not on the cost model alone (docs/PROTRAIN.md §5). */
static void print_tie(const ptc_search_opts *so, const ptc_search_result *r)
{
    if (!memcmp(&r->fastest, &r->best, sizeof r->best)) return;
    char cb[96];
    printf("fastest: %s  predicted %.4f s; chosen instead within tie_tol %.3g %% (%.2f %% "
           "slower): more persistent chunks, then fewer checkpointed and swapped blocks, then "
           "fewer buffers (--knob tie_tol=0 takes the fastest)\n",
           cfg_str(&r->fastest, cb, sizeof cb), r->fastest_est.t_iter_s, so->tie_tol * 100,
           (r->best_est.t_iter_s / r->fastest_est.t_iter_s - 1) * 100);
}

/* ---------------------------------------------------------------- table 4 */

typedef struct t4_row {
    const char *id, *model;
    uint64_t batch;
    int a100;      /* 0: RTX 3090 testbed, 1: A100 */
    int paper[6];  /* N_block n_ckpt n_swap N_chunk n_persist n_buffer */
} t4_row;

static const t4_row T4[] = {
    {"A", "gpt2-1b", 8, 0, {32, 0, 0, 12, 12, 0}},
    {"A'", "gpt2-1b", 8, 1, {32, 0, 0, 12, 12, 0}},
    {"B", "gpt2-1b", 64, 0, {32, 24, 2, 12, 2, 3}},
    {"C", "gpt2-1b", 64, 1, {32, 0, 0, 12, 12, 0}},
    {"D", "gpt2-10b", 8, 0, {48, 48, 0, 49, 3, 46}},
    {"E", "gpt2-10b", 8, 1, {48, 0, 0, 49, 15, 3}},
};

static const char *testbed(const pt_opts *o, int a100)
{
    if (a100) return o->ma100 ? o->ma100 : "a100-80g-pcie4";
    return o->m3090 ? o->m3090 : "rtx3090-pcie3";
}

/* A ProTrain search for one workload and the simulation of its pick; with `also`, the
 * strict optimum and another configuration (the paper's) estimated and simulated beside it. */
typedef struct pt_pick {
    ptc_search_result r;
    int n_chunk, n_block;
    pt_run run;
    double search_s;   /* wall time of the search (reported apart: not deterministic) */
    pt_run fastest_run;       /* the strict optimum (r.fastest), simulated */
    int also_ok;              /* `also` is a configuration of this layout */
    ptc_estimate also_est;
    pt_run also_run;
} pt_pick;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Simulates the evaluated configurations of a search (all: every one; else an even sample
 * of `want` plus the chosen one); adds their relative errors to the sums. */
/* Lowers configuration c (estimated as e) and simulates it. */
static ms_status sim_config(const ptc_model *M, const trace_t *t, const machine_t *m,
                            const ptc_config *c, const ptc_estimate *e, pt_run *run,
                            ms_error *err)
{
    plan_t *p = NULL;
    ms_status st = config_plan(M, c, e, &p, err);
    if (!st) st = simulate(t, m, p, run, err);
    plan_free(p);
    return st;
}

typedef struct pt_err {
    size_t n, ok, t4, m4;
    double sum_t, max_t, sum_m, max_m;
} pt_err;

static ms_status validate_all(const ptc_model *M, const trace_t *t, const machine_t *m,
                              const ptc_search_result *r, size_t want, ms_out *rows,
                              const char *tag, pt_err *pe, ms_error *err)
{
    size_t stride = want == 0 || r->n_all <= want ? 1 : (r->n_all + want - 1) / want;
    for (size_t i = 0; i < r->n_all; i++) {
        int chosen = r->found && !memcmp(&r->all[i], &r->best, sizeof r->best);
        if (i % stride && !chosen) continue;
        pt_run run;
        ms_status st = sim_config(M, t, m, &r->all[i], &r->all_est[i], &run, err);
        if (st) return st;
        const ptc_estimate *e = &r->all_est[i];
        pe->n++;
        if (run.r.status == RS_OK) {
            double et = fabs(e->t_iter_s - run.r.iter_time_s) / run.r.iter_time_s;
            double em = fabs((double)e->peak_bytes - (double)run.r.peak_allocated_bytes) /
                        (double)run.r.peak_allocated_bytes;
            pe->ok++;
            pe->sum_t += et;
            pe->sum_m += em;
            if (et > pe->max_t) pe->max_t = et;
            if (em > pe->max_m) pe->max_m = em;
            pe->t4 += et > 0.04;
            pe->m4 += em > 0.04;
        }
        if (rows)
            ms_out_printf(rows, "%s\t%d\t%d\t%d\t%d\t%.6f\t%.6f\t%.4f\t%.4f\t%.4f\t%s\t%d\n", tag,
                    r->all[i].n_persist, r->all[i].n_buffer, r->all[i].n_swap, r->all[i].n_ckpt,
                    e->t_iter_s, run.r.iter_time_s, e->peak_bytes / GIB,
                    run.r.peak_allocated_bytes / GIB, run.r.peak_reserved_bytes / GIB,
                    res_status_name(run.r.status), chosen);
    }
    return MS_OK;
}

/* The strict optimum and configuration `also` beside the pick (Table 4's rows). A
 * configuration this layout cannot run (more chunks or blocks than it has, too few buffers)
 * is left out (also_ok = 0), not an error. */
static ms_status pick_also(ptc_model *M, const trace_t *t, const machine_t *m,
                           const ptc_config *also, pt_pick *pk, ms_error *err)
{
    ms_status st = MS_OK;
    if (pk->r.found && !memcmp(&pk->r.fastest, &pk->r.best, sizeof pk->r.best))
        pk->fastest_run = pk->run; /* the pick itself, already simulated */
    else if (pk->r.found)
        st = sim_config(M, t, m, &pk->r.fastest, &pk->r.fastest_est, &pk->fastest_run, err);
    if (st || !also || also->n_persist + also->n_buffer > pk->n_chunk ||
        also->n_swap + also->n_ckpt > pk->n_block)
        return st;
    ms_error ignored;
    if (ptc_estimate_config(M, also, &pk->also_est, &ignored) || !pk->also_est.valid) return MS_OK;
    pk->also_ok = 1;
    return sim_config(M, t, m, also, &pk->also_est, &pk->also_run, err);
}

static ms_status pick(const pt_opts *o, const char *model, uint64_t batch, int gpus,
                      const machine_t *m, int simulate_it, const ptc_config *also, pt_pick *pk,
                      pt_err *pe, ms_error *err)
{
    memset(pk, 0, sizeof *pk);
    trace_t *t = NULL;
    ptc_model *M = NULL;
    pol_opts po;
    pol_opts_of(o, &po);
    lc_knobs k;
    ptc_search_opts so;
    ms_status st = make_trace(model, batch, gpus, o, m, &t, err);
    if (!st) st = pt_protrain_knobs(&po, &k, err);
    if (!st) st = pt_search_opts_from(&po, t, m, &so, err);
    if (!st) st = pt_model_new(t, m, &k, &so, &M, err);
    if (!st) {
        double t0 = now_s();
        so.keep_all = pe != NULL;
        st = ptc_search(M, &so, &pk->r, err);
        pk->search_s = now_s() - t0;
        pk->n_chunk = (int)ptc_layout(M)->n_chunks;
        pk->n_block = ptc_layout(M)->n_blocks;
    }
    if (!st && simulate_it)
        st = sim_config(M, t, m, pk->r.found ? &pk->r.best : &pk->r.closest,
                        pk->r.found ? &pk->r.best_est : &pk->r.closest_est, &pk->run, err);
    if (!st && simulate_it) st = pick_also(M, t, m, also, pk, err);
    if (!st && pe) st = validate_all(M, t, m, &pk->r, 0, NULL, NULL, pe, err);
    ptc_model_free(M);
    trace_free(t);
    return st;
}

/* ---------------------------------------------------------------- search */

static void print_layout(FILE *f, const lc_layout *L)
{
    char b1[32], b2[32];
    fprintf(f, "layout: %zu chunks of %s (largest parameter %s, %s), %d blocks, %zu steps, "
               "dp %d, forward %.3f s, backward %.3f s of compute\n",
            L->n_chunks, ms_fmt_bytes(L->chunk_bytes, b1, sizeof b1), L->max_param_name,
            ms_fmt_bytes(L->max_param_bytes, b2, sizeof b2), L->n_blocks, L->n_steps, L->dp,
            L->fwd_us / 1e6, L->bwd_us / 1e6);
}

/* Runs the search for one workload; with validate != 0 simulates the evaluated
 * configurations (all, or `validate` of them evenly spread, plus the chosen one). */
static int sub_search(const pt_opts *o)
{
    machine_profile *mp;
    int rc = load_machine(o->machine ? o->machine : "rtx3090-pcie3", &mp);
    if (rc) return rc;
    ms_error err;
    trace_t *t = NULL;
    ptc_model *M = NULL;
    ptc_search_result r;
    int given = 0;          /* the configuration comes from the knobs: no search */
    memset(&r, 0, sizeof r);
    ms_out *csv = NULL;
    pol_opts po;
    pol_opts_of(o, &po);
    lc_knobs k;
    ptc_search_opts so;
    ms_status st = make_trace(o->model, o->batch, o->gpus, o, &mp->m, &t, &err);
    if (!st) st = pt_protrain_knobs(&po, &k, &err);
    if (!st) st = pt_search_opts_from(&po, t, &mp->m, &so, &err);
    if (!st) st = pt_model_new(t, &mp->m, &k, &so, &M, &err);
    if (!st && pt_config_given(&k)) {
        /* a given configuration: no search */
        given = 1;
        r.found = 1;
        r.best = (ptc_config){k.n_persist, k.n_buffer, k.n_swap, k.n_ckpt};
        st = ptc_estimate_config(M, &r.best, &r.best_est, &err);
        if (!st && !r.best_est.valid)
            st = ms_fail(&err, MS_ERR_INVALID, "n_buffer=%d is too few buffers", k.n_buffer);
    } else if (!st) {
        so.keep_all = o->validate != 0;
        st = ptc_search(M, &so, &r, &err);
    }
    if (st) goto done;
    char cb[96], b1[32], b2[32];
    const char *act = trace_get_meta(t, "act_impl");
    printf("workload: %s, batch %" PRIu64 " over %d GPU(s), seq %" PRIu64 "%s%s, on %s\n",
           o->model, o->batch, o->gpus, o->seq, o->hf_eager ? ", eager attention" : "",
           act && !strcmp(act, "gelu_new") ? ", gelu_new" : "", mp->m.name);
    print_layout(stdout, ptc_layout(M));
    const ptc_config *best = r.found ? &r.best : &r.closest;
    const ptc_estimate *be = r.found ? &r.best_est : &r.closest_est;
    print_search(M, &mp->m, &so, &r, given, best);
    printf("%s: %s  predicted %.4f s (fwd %.4f bwd %.4f gpu-optim %.4f cpu-optim %.4f), peak %s, "
           "host %s\n", given ? "given" : r.found ? "chosen" : "NO FEASIBLE CONFIGURATION; closest",
           cfg_str(best, cb, sizeof cb), be->t_iter_s, be->t_fwd_s, be->t_bwd_s,
           be->t_gpu_optim_s, be->t_cpu_optim_s, ms_fmt_bytes(be->peak_bytes, b1, sizeof b1),
           ms_fmt_bytes(be->host_bytes, b2, sizeof b2));
    if (r.found && !given) print_tie(&so, &r);
    plan_t *p = NULL;
    if ((st = config_plan(M, best, be, &p, &err))) goto done;
    if (o->trace_out && (st = trace_write(t, o->trace_out, &err))) {
        plan_free(p);
        goto done;
    }
    if (o->plan_out && (st = plan_write(p, o->plan_out, &err))) {
        plan_free(p);
        goto done;
    }
    pt_run run;
    st = simulate(t, &mp->m, p, &run, &err);
    plan_free(p);
    if (st) goto done;
    printf("simulated: %s %.4f s (compute %.4f, stall %.4f, recompute %.4f, h2d %.4f, d2h %.4f, "
           "host %.4f), peak allocated %s, reserved %s, host %s, %.0f tokens/s\n",
           res_status_name(run.r.status), run.r.iter_time_s, run.r.compute_busy_s, run.r.stall_s,
           run.r.recompute_s, run.r.h2d_busy_s, run.r.d2h_busy_s, run.r.host_busy_s,
           ms_fmt_bytes(run.r.peak_allocated_bytes, b1, sizeof b1),
           ms_fmt_bytes(run.r.peak_reserved_bytes, b2, sizeof b2),
           ms_fmt_bytes(run.r.host_peak_bytes, cb, sizeof cb), run.tokens_per_s);
    if (run.r.status != RS_OK) printf("  %s\n", run.r.failure);
    if (!o->validate) goto done;
    if (o->csv) {
        if ((st = ms_out_open(o->csv, &csv, &err))) goto done;
        ms_out_printf(csv, "hardware\tn_persist\tn_buffer\tn_swap\tn_ckpt\tpred_s\tsim_s\t"
                     "pred_peak_gib\tsim_peak_gib\tsim_reserved_gib\tstatus\tchosen\n");
    }
    pt_err pe;
    memset(&pe, 0, sizeof pe);
    st = validate_all(M, t, &mp->m, &r, o->validate < 0 ? 0 : (size_t)o->validate, csv,
                      mp->m.name, &pe, &err);
    if (st) goto done;
    printf("validation: %zu of %zu evaluated configurations simulated, %zu ran; runtime error "
           "mean %.2f%% max %.2f%%; peak error mean %.2f%% max %.2f%%\n", pe.n, r.n_all, pe.ok,
           pe.ok ? 100 * pe.sum_t / (double)pe.ok : 0, 100 * pe.max_t,
           pe.ok ? 100 * pe.sum_m / (double)pe.ok : 0, 100 * pe.max_m);
done:
    if (csv && st) ms_out_abort(csv);
    else if (csv) st = ms_out_commit(csv, &err);
    ptc_search_result_clear(&r);
    ptc_model_free(M);
    trace_free(t);
    machine_profile_free(mp);
    return st ? fail(st, &err) : MS_EXIT_OK;
}
/* One configuration row of table4.tsv: the pick (memsim), the strict optimum (fastest) or
 * the paper's configuration as memsim's cost model and simulator see it (paper_config). */
static void t4_config_row(ms_out *f, const t4_row *R, const char *hw, const char *source,
                          const pt_pick *pk, const ptc_config *c, const ptc_estimate *e,
                          const pt_run *run, const char *status)
{
    ms_out_printf(f, "%s\t%s\t%" PRIu64 "\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.4f\t%.4f\t%s\t"
                  "%.1f\t%.3f\t%.3f\n", R->id, R->model, R->batch, hw, source, pk->n_block,
                  c->n_ckpt, c->n_swap, pk->n_chunk, c->n_persist, c->n_buffer, e->t_iter_s,
                  run->r.iter_time_s, status, run->tokens_per_s, e->peak_bytes / GIB,
                  run->r.peak_allocated_bytes / GIB);
}

static int sub_table4(const pt_opts *o)
{
    ms_error err;
    ms_out *f = open_out(o, "table4.tsv", &err);
    if (!f) return fail(MS_ERR_IO, &err);
    ms_out_printf(f, "id\tmodel\tbatch\thardware\tsource\tN_block\tn_checkpoint\tn_swap\tN_chunk\t"
               "n_persist\tn_buffer\tpred_iter_s\tsim_iter_s\tsim_status\ttokens_per_s\t"
               "pred_peak_gib\tsim_peak_gib\n");
    ms_out *fv = o->validate ? open_out(o, "table4_validation.tsv", &err) : NULL;
    if (o->validate && !fv) {
        close_out(f, 1); /* removed: the run failed */
        return fail(MS_ERR_IO, &err);
    }
    if (fv)
        ms_out_printf(fv, "id\tconfigurations\tran\ttime_err_mean_pct\ttime_err_max_pct\t"
                    "over_4pct\tpeak_err_mean_pct\tpeak_err_max_pct\tpeak_over_4pct\n");
    int rc = 0;
    for (size_t i = 0; i < sizeof T4 / sizeof *T4 && !rc; i++) {
        const t4_row *R = &T4[i];
        progress("table4", i + 1, sizeof T4 / sizeof *T4, "row %s: %s, batch %" PRIu64 ", %s",
                 R->id, R->model, R->batch, R->a100 ? "4xA100" : "4xRTX3090");
        machine_profile *mp;
        if ((rc = load_machine(testbed(o, R->a100), &mp))) break;
        pt_pick pk;
        pt_err pe;
        memset(&pe, 0, sizeof pe);
        const ptc_config paper = {R->paper[4], R->paper[5], R->paper[2], R->paper[1]};
        ms_status st = pick(o, R->model, R->batch, 4, &mp->m, 1, &paper, &pk, fv ? &pe : NULL,
                            &err);
        if (st) {
            machine_profile_free(mp);
            rc = fail(st, &err);
            break;
        }
        const char *hw = R->a100 ? "4xA100" : "4xRTX3090";
        ms_out_printf(f, "%s\t%s\t%" PRIu64 "\t%s\tpaper\t%d\t%d\t%d\t%d\t%d\t%d\t-\t-\t-\t-\t-\t-\n",
                R->id, R->model, R->batch, hw, R->paper[0], R->paper[1], R->paper[2],
                R->paper[3], R->paper[4], R->paper[5]);
        const ptc_config *c = pk.r.found ? &pk.r.best : &pk.r.closest;
        const ptc_estimate *e = pk.r.found ? &pk.r.best_est : &pk.r.closest_est;
        t4_config_row(f, R, hw, "memsim", &pk, c, e, &pk.run,
                      pk.r.found ? res_status_name(pk.run.r.status) : "nofit");
        if (pk.r.found)
            t4_config_row(f, R, hw, "fastest", &pk, &pk.r.fastest, &pk.r.fastest_est,
                          &pk.fastest_run, res_status_name(pk.fastest_run.r.status));
        if (pk.also_ok && R->paper[0] == pk.n_block && R->paper[3] == pk.n_chunk)
            t4_config_row(f, R, hw, "paper_config", &pk, &paper, &pk.also_est, &pk.also_run,
                          res_status_name(pk.also_run.r.status));
        fprintf(stderr, "table4 %s: search %.3f s, %zu evaluated of %zu\n", R->id, pk.search_s,
                pk.r.evaluated, pk.r.space);
        if (fv)
            ms_out_printf(fv, "%s\t%zu\t%zu\t%.3f\t%.3f\t%zu\t%.3f\t%.3f\t%zu\n", R->id, pe.n, pe.ok,
                    pe.ok ? 100 * pe.sum_t / (double)pe.ok : 0, 100 * pe.max_t, pe.t4,
                    pe.ok ? 100 * pe.sum_m / (double)pe.ok : 0, 100 * pe.max_m, pe.m4);
        ptc_search_result_clear(&pk.r);
        machine_profile_free(mp);
    }
    rc = close_out(f, rc);
    return close_out(fv, rc);
}

/* ---------------------------------------------------------------- backends */

enum { BK_PROTRAIN = 0, BK_DEEPSPEED, BK_COLOSSAL, BK_FSDP, BK_COUNT };
static const char *const BK_NAME[BK_COUNT] = {"ProTrain", "DeepSpeed", "Colossal-AI", "FSDP"};
/* The policies themselves (not through the registry: this command needs exactly these). */
static const pol_policy *const BK_POLICY[BK_COUNT] = {&pol_protrain, &pol_zero3_offload,
                                                      &pol_gemini_static, &pol_fsdp_offload};

/* Variants a baseline is tuned over (ProTrain §5.1: thresholds tuned for best performance;
 * FSDP checkpointing on all blocks or none). */
typedef struct bk_variant {
    const char *name;
    pol_knob knobs[2];
    size_t n;
} bk_variant;

static const bk_variant VARIANTS[BK_COUNT][4] = {
    {{"search", {{0, 0}}, 0}},
    {{"ckpt-auto,live1e9", {{"checkpoint", "auto"}, {"max_live_params", "1e9"}}, 2},
     {"ckpt-all,live1e9", {{"checkpoint", "all"}, {"max_live_params", "1e9"}}, 2},
     {"ckpt-auto,live3e9", {{"checkpoint", "auto"}, {"max_live_params", "3e9"}}, 2}},
    {{"ckpt-auto", {{"checkpoint", "auto"}}, 1}, {"ckpt-all", {{"checkpoint", "all"}}, 1}},
    {{"ckpt-none", {{"checkpoint", "none"}}, 1}, {"ckpt-all", {{"checkpoint", "all"}}, 1}},
};

static size_t n_variants(int bk)
{
    size_t n = 0;
    while (n < 4 && VARIANTS[bk][n].name) n++;
    return n;
}

/* One run of a backend on a trace: plan (ProTrain: search) and simulate. *fits = 0 when the
 * plan itself says nothing fits (ProTrain's search found none). */
static ms_status run_backend(const pt_opts *o, int bk, size_t var, const trace_t *t,
                             const machine_t *m, pt_run *run, ptc_estimate *pred, int *fits,
                             ms_error *err)
{
    pol_knob kn[PT_MAX_KNOBS + 4];
    size_t n = 0;
    for (size_t i = 0; i < o->n_knobs && n < PT_MAX_KNOBS; i++) kn[n++] = o->knobs[i];
    const bk_variant *v = &VARIANTS[bk][var];
    for (size_t i = 0; i < v->n; i++) kn[n++] = v->knobs[i];
    pol_opts po;
    pol_opts_default(&po);
    po.knobs = kn;
    po.n_knobs = n;
    plan_t *p;
    ms_status st = BK_POLICY[bk]->plan(t, m, &po, &p, err);
    if (st) return st;
    plan_sort(p);
    knob_predictions kp;
    st = knob_predictions_of(p, &kp, err);
    if (st) {
        plan_free(p);
        return st;
    }
    *fits = kp.feasible;
    if (pred) {
        memset(pred, 0, sizeof *pred);
        pred->t_iter_s = kp.iter_s;
        pred->peak_bytes = kp.peak_bytes;
    }
    st = simulate(t, m, p, run, err);
    plan_free(p);
    return st;
}

/* ---------------------------------------------------------------- table 2 */

static const struct {
    int a100, gpus;
    double paper[BK_COUNT]; /* billions */
} T2[] = {
    {0, 1, {34, 15, 25, 3}},
    {0, 4, {37, 15, 25, 15}},
    {1, 1, {75, 34, 53, 10}},
    {1, 4, {87, 37, 53, 55}},
};

/* Does a GPT-2 of `layers` blocks at hidden 8192 train (batch 1 per GPU)? */
static ms_status trains(const pt_opts *o, int bk, int layers, int gpus, const machine_t *m,
                        int *ok, char *why, size_t nwhy, double *params_b, ms_error *err)
{
    char model[64];
    ladder_name(layers, model, sizeof model);
    trace_t *t;
    ms_status st = make_trace(model, (uint64_t)gpus, gpus, o, m, &t, err);
    if (st) return st;
    const char *pv = trace_get_meta(t, "params");
    uint64_t P = 0;
    if (pv) ms_parse_u64(pv, &P);
    *params_b = (double)P / 1e9;
    *ok = 0;
    snprintf(why, nwhy, "-");
    for (size_t v = 0; v < n_variants(bk) && !*ok && !st; v++) {
        pt_run run;
        int fits;
        st = run_backend(o, bk, v, t, m, &run, NULL, &fits, err);
        if (st) break;
        *ok = fits && run.r.status == RS_OK;
        snprintf(why, nwhy, "%s", !fits ? "nofit" : res_status_name(run.r.status));
    }
    trace_free(t);
    return st;
}

static int sub_table2(const pt_opts *o)
{
    ms_error err;
    ms_out *f = open_out(o, "table2.tsv", &err);
    if (!f) return fail(MS_ERR_IO, &err);
    ms_out_printf(f, "hardware\tgpus\tbackend\tpaper_b\tmemsim_b\tmemsim_layers\tnext_status\n");
    int rc = 0;
    for (size_t i = 0; i < sizeof T2 / sizeof *T2 && !rc; i++) {
        machine_profile *mp;
        if ((rc = load_machine(testbed(o, T2[i].a100), &mp))) break;
        for (int bk = 0; bk < BK_COUNT && !rc; bk++) {
            progress("table2", i * BK_COUNT + (size_t)bk + 1, (sizeof T2 / sizeof *T2) * BK_COUNT,
                     "%s, %d GPUs, %s: largest model", T2[i].a100 ? "A100" : "RTX3090",
                     T2[i].gpus, BK_NAME[bk]);
            int lo = 0, hi = o->quick ? 64 : 128; /* lo trains (0: none known), hi does not */
            char why[32] = "-", why_hi[32] = "-";
            double pb = 0, best_b = 0;
            ms_status st = MS_OK;
            int ok;
            /* is the top of the ladder out of reach? (it should be) */
            st = trains(o, bk, hi, T2[i].gpus, &mp->m, &ok, why_hi, sizeof why_hi, &pb, &err);
            if (!st && ok) {
                lo = hi;
                best_b = pb;
            }
            while (!st && hi - lo > 1) {
                int mid = (lo + hi) / 2;
                st = trains(o, bk, mid, T2[i].gpus, &mp->m, &ok, why, sizeof why, &pb, &err);
                if (st) break;
                if (ok) {
                    lo = mid;
                    best_b = pb;
                } else {
                    hi = mid;
                    snprintf(why_hi, sizeof why_hi, "%s", why);
                }
            }
            if (st) {
                rc = fail(st, &err);
                break;
            }
            ms_out_printf(f, "%s\t%d\t%s\t%g\t%.1f\t%d\t%s\n", T2[i].a100 ? "A100" : "RTX3090",
                    T2[i].gpus, BK_NAME[bk], T2[i].paper[bk], best_b, lo, why_hi);
            fflush(stdout);
        }
        machine_profile_free(mp);
    }
    return close_out(f, rc);
}

/* ---------------------------------------------------------------- figure 3 */

static const char *const F3_MODELS[] = {"mistral-7b", "gpt2-10b", "llama-13b", "opt-13b",
                                        "gpt2-15b", "gpt2-20b", "gpt2-30b", "gpt2-40b",
                                        "opt-30b", "llama-34b"};

static int sub_fig3(const pt_opts *o)
{
    ms_error err;
    ms_out *f = open_out(o, "fig3.tsv", &err);
    if (!f) return fail(MS_ERR_IO, &err);
    ms_out_printf(f, "hardware\tmodel\tbackend\tbest_batch\ttokens_per_s\tstatus\tvariant\t"
               "pred_tokens_per_s\n");
    static const uint64_t per_gpu[] = {1, 2, 4, 8, 16, 32, 64};
    size_t nmodels = sizeof F3_MODELS / sizeof *F3_MODELS;
    size_t f3_steps = 0, f3_step = 0;
    for (size_t mi = 0; mi < nmodels; mi++)
        if (!(o->quick && mi % 3)) f3_steps += 2 * BK_COUNT;
    int rc = 0;
    for (int a100 = 0; a100 <= 1 && !rc; a100++) {
        machine_profile *mp;
        if ((rc = load_machine(testbed(o, a100), &mp))) break;
        for (size_t mi = 0; mi < nmodels && !rc; mi++) {
            if (o->quick && mi % 3) continue;
            for (int bk = 0; bk < BK_COUNT && !rc; bk++) {
                progress("fig3", ++f3_step, f3_steps, "%s, %s, %s: batch sweep",
                         a100 ? "A100" : "RTX3090", F3_MODELS[mi], BK_NAME[bk]);
                double best = 0, best_pred = 0;
                uint64_t best_batch = 0;
                const char *best_var = "-", *status = "oom";
                ms_status st = MS_OK;
                int fails_in_row = 0;
                for (size_t bi = 0; bi < sizeof per_gpu / sizeof *per_gpu && !st; bi++) {
                    if (o->quick && bi > 3) break;
                    trace_t *t;
                    st = make_trace(F3_MODELS[mi], per_gpu[bi] * 4, 4, o,
                                    &mp->m, &t, &err);
                    if (st) break;
                    int any = 0;
                    for (size_t v = 0; v < n_variants(bk) && !st; v++) {
                        pt_run run;
                        ptc_estimate pred;
                        int fits;
                        st = run_backend(o, bk, v, t, &mp->m, &run, &pred, &fits, &err);
                        if (st || !fits || run.r.status != RS_OK) continue;
                        any = 1;
                        if (run.tokens_per_s > best) {
                            best = run.tokens_per_s;
                            best_batch = per_gpu[bi] * 4;
                            best_var = VARIANTS[bk][v].name;
                            best_pred = pred.t_iter_s > 0
                                            ? (double)(per_gpu[bi] * 4 * o->seq) / pred.t_iter_s
                                            : 0;
                            status = "ok";
                        }
                    }
                    trace_free(t);
                    fails_in_row = any ? 0 : fails_in_row + 1;
                    if (fails_in_row >= 1 && best > 0) break; /* larger batches fail too */
                }
                if (st) {
                    rc = fail(st, &err);
                    break;
                }
                ms_out_printf(f, "%s\t%s\t%s\t%" PRIu64 "\t%.1f\t%s\t%s\t%.1f\n",
                        a100 ? "A100" : "RTX3090", F3_MODELS[mi], BK_NAME[bk], best_batch, best,
                        status, best_var, best_pred);
                fflush(stdout);
            }
        }
        machine_profile_free(mp);
    }
    return close_out(f, rc);
}

/* ---------------------------------------------------------------- figure 6 */

static int sub_fig6(const pt_opts *o)
{
    ms_error err;
    ms_out *f = open_out(o, "fig6.tsv", &err);
    if (!f) return fail(MS_ERR_IO, &err);
    ms_out_printf(f, "hardware\tn_persist\tn_buffer\tn_swap\tn_ckpt\tpred_s\tsim_s\tpred_peak_gib\t"
               "sim_peak_gib\tsim_reserved_gib\tstatus\tchosen\n");
    int rc = 0;
    for (int a100 = 0; a100 <= 1 && !rc; a100++) {
        if (o->machine && strcmp(o->machine, testbed(o, a100))) continue;
        progress("fig6", o->machine ? 1 : (size_t)a100 + 1, o->machine ? 1 : 2, "%s, %s batch %" PRIu64
                 ": search, then the sampled configurations simulated", testbed(o, a100),
                 o->model, o->batch);
        machine_profile *mp;
        if ((rc = load_machine(testbed(o, a100), &mp))) break;
        trace_t *t = NULL;
        ptc_model *M = NULL;
        ptc_search_result r;
        memset(&r, 0, sizeof r);
        pol_opts po;
        pol_opts_of(o, &po);
        lc_knobs k;
        ptc_search_opts so;
        ms_status st = make_trace(o->model, o->batch, o->gpus, o, &mp->m, &t,
                                  &err);
        if (!st) st = pt_protrain_knobs(&po, &k, &err);
        if (!st) st = pt_search_opts_from(&po, t, &mp->m, &so, &err);
        if (!st) st = pt_model_new(t, &mp->m, &k, &so, &M, &err);
        so.keep_all = 1;
        if (!st) st = ptc_search(M, &so, &r, &err);
        /* every evaluated configuration, or an even sample of `validate` of them */
        size_t want = o->validate > 0 ? (size_t)o->validate : 80;
        size_t stride = o->validate < 0 || r.n_all <= want ? 1 : (r.n_all + want - 1) / want;
        for (size_t i = 0; !st && i < r.n_all; i++) {
            int chosen = r.found && !memcmp(&r.all[i], &r.best, sizeof r.best);
            if (i % stride && !chosen) continue;
            pt_run run;
            if ((st = sim_config(M, t, &mp->m, &r.all[i], &r.all_est[i], &run, &err))) break;
            const ptc_estimate *e = &r.all_est[i];
            ms_out_printf(f, "%s\t%d\t%d\t%d\t%d\t%.6f\t%.6f\t%.4f\t%.4f\t%.4f\t%s\t%d\n",
                    a100 ? "A100" : "RTX3090", r.all[i].n_persist, r.all[i].n_buffer,
                    r.all[i].n_swap, r.all[i].n_ckpt, e->t_iter_s, run.r.iter_time_s,
                    e->peak_bytes / GIB, run.r.peak_allocated_bytes / GIB,
                    run.r.peak_reserved_bytes / GIB, res_status_name(run.r.status), chosen);
        }
        if (st) rc = fail(st, &err);
        ptc_search_result_clear(&r);
        ptc_model_free(M);
        trace_free(t);
        machine_profile_free(mp);
    }
    return close_out(f, rc);
}

/* ---------------------------------------------------------------- command line */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memsim protrain SUBCOMMAND [options]\n"
            "ProTrain (Yang et al.): chunked model states and interleaved swap/checkpoint blocks\n"
            "chosen by a cost-model search, and the offloading baselines it compares against.\n\n"
            "subcommands:\n"
            "  search   one workload: layout, search, chosen configuration, simulation\n"
            "  table4   configurations picked for ProTrain's Table 4 rows\n"
            "  table2   largest GPT-2 per backend on 1 and 4 GPUs of each testbed\n"
            "  fig3     best throughput per backend on Table 1's models\n"
            "  fig6     predicted vs simulated time and peak over the searched configurations\n\n"
            "options:\n"
            "  --model NAME        model (search, fig6; default gpt2-10b)\n"
            "  --machine NAME      machine profile (search, fig6; default rtx3090-pcie3)\n"
            "  --batch N           global batch over the GPUs (default 8)\n"
            "  --gpus N            data-parallel GPUs (default 4)\n"
            "  --seq N             sequence length (default 1024)\n"
            "  --eager / --flash   HF eager attention activations (default) or flash attention\n"
            "  --gelu-new / --fused-gelu  GPT-2's activation as Hugging Face runs it (eight\n"
            "                      element-wise ops keeping three more tensors), or one fused\n"
            "                      kernel (default; see experiments/protrain/README.md)\n"
            "  --knob KEY=VALUE    chunk / search knob (docs/PROTRAIN.md), repeatable; e.g.\n"
            "                      cost_model=recurrence|appendix (memsim's queue model or\n"
            "                      ProTrain's Appendix A.1 formula), persist_gather=auto|step|next\n"
            "                      (the persistent all-gather's placement), tie_tol=0.03,\n"
            "                      swap_bw=1|0 (n_swap bounded by the link time parameter\n"
            "                      traffic leaves, or by the swap interval only),\n"
            "                      n_persist= n_buffer= n_swap= n_checkpoint= (no search)\n"
            "  --validate N        search: simulate N evaluated configurations (-1: all)\n"
            "  --csv FILE          search: per-configuration predicted vs simulated rows\n"
            "  --trace-out FILE    search: write the workload trace as simulated\n"
            "  --plan-out FILE     search: write the plan of the chosen configuration\n"
            "  --quick             fewer models and batches (table2, fig3)\n"
            "  --m3090 M, --ma100 M  the two testbeds' profiles (default rtx3090-pcie3,\n"
            "                      a100-80g-pcie4)\n"
            "  -o DIR              output directory (tables as TSV; default standard output)\n"
            "\nexamples (from the source directory, sim/ on the PATH):\n"
            "  memsim protrain search --model gpt2-10b --machine rtx3090-pcie3 --batch 8 --gpus 4\n"
            "  memsim protrain table2 --quick\n"
            "  memsim protrain fig6 -o out/protrain\n");
}

int driver_protrain(int argc, char **argv)
{
    pt_opts o;
    memset(&o, 0, sizeof o);
    o.model = "gpt2-10b";
    o.batch = 8;
    o.gpus = 4;
    o.seq = 1024;
    o.hf_eager = 1;
    o.hf_gelu_new = 0;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? MS_EXIT_USAGE : MS_EXIT_OK;
    }
    o.sub = argv[1];
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},  {"machine", required_argument, 0, 'M'},
        {"batch", required_argument, 0, 'b'},  {"gpus", required_argument, 0, 'g'},
        {"seq", required_argument, 0, 's'},    {"eager", no_argument, 0, 'E'},
        {"flash", no_argument, 0, 'F'},        {"knob", required_argument, 0, 'k'},
        {"validate", required_argument, 0, 'v'}, {"csv", required_argument, 0, 'c'},
        {"quick", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},
        {"m3090", required_argument, 0, '3'},  {"ma100", required_argument, 0, 'a'},
        {"trace-out", required_argument, 0, 'T'}, {"plan-out", required_argument, 0, 'P'},
        {"gelu-new", no_argument, 0, 'G'},     {"fused-gelu", no_argument, 0, 'U'},
        {0, 0, 0, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc - 1, argv + 1, "o:", lo, NULL)) != -1) {
        int64_t x;
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'M': o.machine = optarg; break;
        case 'b':
        case 'g':
        case 's':
        case 'v':
            if (!ms_parse_i64(optarg, &x) || x < (c == 'v' ? -1 : 1)) {
                fprintf(stderr, "memsim protrain: bad number '%s'\n", optarg);
                return MS_EXIT_USAGE;
            }
            if (c == 'b') o.batch = (uint64_t)x;
            else if (c == 'g') o.gpus = (int)x;
            else if (c == 's') o.seq = (uint64_t)x;
            else o.validate = (int)x;
            break;
        case 'E': o.hf_eager = 1; break;
        case 'F': o.hf_eager = 0; break;
        case 'G': o.hf_gelu_new = 1; break;
        case 'U': o.hf_gelu_new = 0; break;
        case 'k': {
            if (o.n_knobs >= PT_MAX_KNOBS || strlen(optarg) >= sizeof o.knob_buf[0]) {
                fprintf(stderr, "memsim protrain: too many or too long --knob\n");
                return MS_EXIT_USAGE;
            }
            char *b = o.knob_buf[o.n_knobs];
            strcpy(b, optarg);
            char *eq = strchr(b, '=');
            if (!eq || eq == b) {
                fprintf(stderr, "memsim protrain: --knob wants KEY=VALUE, got '%s'\n", optarg);
                return MS_EXIT_USAGE;
            }
            *eq = 0;
            o.knobs[o.n_knobs].key = b;
            o.knobs[o.n_knobs++].value = eq + 1;
            break;
        }
        case 'c': o.csv = optarg; break;
        case 'q': o.quick = 1; break;
        case '3': o.m3090 = optarg; break;
        case 'T': o.trace_out = optarg; break;
        case 'P': o.plan_out = optarg; break;
        case 'a': o.ma100 = optarg; break;
        case 'o': o.out_dir = optarg; break;
        case 'h': usage(stdout); return MS_EXIT_OK;
        default: usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind < argc - 1) {
        fprintf(stderr, "memsim protrain: unexpected argument '%s'\n", argv[optind + 1]);
        return MS_EXIT_USAGE;
    }
    /* the knobs go to every backend the subcommand runs (table2 and fig3 all of them, the
     * others ProTrain alone): each must be read by one */
    const char *backends[BK_COUNT];
    for (int b = 0; b < BK_COUNT; b++) backends[b] = BK_POLICY[b]->name;
    int all = !strcmp(o.sub, "table2") || !strcmp(o.sub, "fig3");
    pol_opts ko;
    pol_opts_default(&ko);
    ko.knobs = o.knobs;
    ko.n_knobs = o.n_knobs;
    ms_error kerr;
    ms_status kst = pol_knobs_check(backends, all ? BK_COUNT : 1, &ko, &kerr);
    if (kst != MS_OK) {
        fprintf(stderr, "memsim protrain: %s\n", kerr.msg);
        return ms_exit_code(kst);
    }
    const pol_knob *size = pol_knob_bad_size(backends, all ? BK_COUNT : 1, &ko);
    if (size) {
        fprintf(stderr, "memsim protrain: --knob '%s=%s': %s\n", size->key, size->value,
                MS_BYTES_EXPECTED);
        return MS_EXIT_USAGE;
    }
    if (o.out_dir && mkdir(o.out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "memsim protrain: cannot create %s: %s\n", o.out_dir, strerror(errno));
        return MS_EXIT_IO;
    }
    if (!strcmp(o.sub, "search")) return sub_search(&o);
    if (!strcmp(o.sub, "table4")) return sub_table4(&o);
    if (!strcmp(o.sub, "table2")) return sub_table2(&o);
    if (!strcmp(o.sub, "fig3")) return sub_fig3(&o);
    if (!strcmp(o.sub, "fig6")) return sub_fig6(&o);
    fprintf(stderr,
            "memsim protrain: unknown subcommand '%s' (search, table4, table2, fig3, fig6)\n",
            o.sub);
    return MS_EXIT_USAGE;
}

/* test_capture_form.c — tests of the process form of a captured trace
 * (traces/capture_form.c) on a hand-built capture: the optimizer states leave the prelude and
 * are made where step 0's optimizer phase begins, later steps get fresh ids, the result
 * checks as a trace file, a trace not written by memsim.capture is refused; and, through
 * sim/pipeline.c, on the committed capture of experiments/capture (a bf16 Mixtral-style
 * step measured on an H200): keep-all's peak reserved of the process form lies within 2 % of
 * the measured run's, where the captured step alone lies 13 % under it; the cuBLAS
 * workspaces made at their first GEMMs, which takes GPT-2 large's checkpointed peak
 * reserved from 3.6 % over the measured run's to within 0.5 %. TAP output for `make check`. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/pipeline.h"
#include "tests/tap.h"
#include "traces/capture_form.h"

static int bad;

static void rec(trace_t *t, const trace_rec *r)
{
    if (trace_append(t, r) != MS_OK) bad = 1;
}

static void alloc(trace_t *t, uint64_t id, uint64_t bytes, trace_class c, int64_t prod,
                  const char *name)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    r.u.alloc.id = id;
    r.u.alloc.bytes = bytes;
    r.u.alloc.cls = c;
    r.u.alloc.layer = -1;
    r.u.alloc.producer = prod;
    snprintf(r.u.alloc.name, sizeof r.u.alloc.name, "%s", name);
    rec(t, &r);
}

static void freed(trace_t *t, uint64_t id)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = id;
    rec(t, &r);
}

static void op(trace_t *t, uint64_t id, trace_phase ph, const uint64_t *in, uint32_t nin,
               const uint64_t *out, uint32_t nout)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    r.u.op.id = id;
    r.u.op.kind = ph == TP_OPT ? TK_OPTIM : TK_GEMM;
    r.u.op.phase = ph;
    r.u.op.layer = -1;
    r.u.op.dur_us = 5;
    r.u.op.n_in = nin;
    r.u.op.in = in;
    r.u.op.n_out = nout;
    r.u.op.out = out;
    snprintf(r.u.op.name, sizeof r.u.op.name, "op%llu", (unsigned long long)id);
    rec(t, &r);
}

static void mark(trace_t *t, trace_markkind k, int64_t v)
{
    if (trace_append_mark(t, k, v) != MS_OK) bad = 1;
}

/* The captured step's start: activation 10 (op 1, a forward GEMM reading 1 and 4), the
 * gradient 11 (op 2, a backward GEMM), 10 freed. */
static void fwd_bwd(trace_t *t)
{
    mark(t, TM_ITER, 0);
    mark(t, TM_PHASE, TP_FWD);
    alloc(t, 10, 8192, TC_ACT_SKEL, 1, "a");
    op(t, 1, TP_FWD, (const uint64_t[]){ 1, 4 }, 2, (const uint64_t[]){ 10 }, 1);
    mark(t, TM_PHASE, TP_BWD);
    alloc(t, 11, 4096, TC_GRAD, 2, "w.grad");
    op(t, 2, TP_BWD, (const uint64_t[]){ 10 }, 1, (const uint64_t[]){ 11 }, 1);
    freed(t, 10);
}

/* A capture of one step: parameter 1, its states 2 and 3, a block live at the start 4; the
 * step: activation 10 (op 1), gradient 11 (op 2), Adam (op 3) with a temporary 12. */
static trace_t *capture(const char *generator)
{
    trace_t *t = trace_new();
    if (trace_set_meta(t, "generator", generator) != MS_OK ||
        trace_set_meta(t, "iterations", "1") != MS_OK)
        bad = 1;
    alloc(t, 1, 4096, TC_PARAM, -1, "w");
    alloc(t, 2, 4096, TC_OPTSTATE, -1, "w.exp_avg");
    alloc(t, 3, 4096, TC_OPTSTATE, -1, "w.exp_avg_sq");
    alloc(t, 4, 512, TC_OTHER, -1, "live_at_start");
    fwd_bwd(t);
    mark(t, TM_PHASE, TP_OPT);
    mark(t, TM_LAYER, -1);
    alloc(t, 12, 4096, TC_WORKSPACE, 3, "sqrt");
    op(t, 3, TP_OPT, (const uint64_t[]){ 1, 2, 3, 11 }, 4, (const uint64_t[]){ 1, 2, 3 }, 3);
    freed(t, 12);
    freed(t, 11);
    return t;
}

static size_t find_alloc(const trace_t *t, uint64_t id, size_t from)
{
    for (size_t i = from; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_ALLOC && r->u.alloc.id == id) return i;
    }
    return SIZE_MAX;
}

static size_t find_mark(const trace_t *t, trace_markkind k, int64_t v, size_t from)
{
    for (size_t i = from; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == k && r->u.mark.value == v) return i;
    }
    return SIZE_MAX;
}

static void test_form(void)
{
    trace_t *t = capture("memsim-capture-1");
    TAP_OK(!bad && cform_is_capture(t), "a hand-built capture (%zu records)", trace_count(t));
    trace_t *o = NULL;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = cform_process(t, 3, &o, &err);
    TAP_OK(st == MS_OK && o, "its process form of 3 steps is made %s", err.msg);
    if (!o) {
        trace_free(t);
        return;
    }
    size_t it0 = find_mark(o, TM_ITER, 0, 0), it1 = find_mark(o, TM_ITER, 1, 0);
    size_t it2 = find_mark(o, TM_ITER, 2, 0);
    size_t opt0 = find_mark(o, TM_PHASE, TP_OPT, it0);
    size_t s2 = find_alloc(o, 2, 0), s3 = find_alloc(o, 3, 0);
    TAP_OK(it0 != SIZE_MAX && find_alloc(o, 1, 0) < it0 && find_alloc(o, 4, 0) < it0 &&
           s2 > opt0 + 1 && s3 == s2 + 1 && s2 < it1 && find_alloc(o, 2, s2 + 1) == SIZE_MAX,
           "the optimizer states are made once, in order, after step 0's optimizer phase "
           "and layer marks; the parameter and the block live at the start stay before it");
    const trace_rec *op0 = trace_get(o, opt0 + 1);
    TAP_OK(op0->type == TR_MARK && op0->u.mark.kind == TM_LAYER,
           "the layer mark after the optimizer phase mark comes before the states");
    uint64_t span = 13; /* tensor ids below 13 */
    size_t a1 = find_alloc(o, 10 + span, it1), a2 = find_alloc(o, 10 + 2 * span, it2);
    const trace_rec *g1 = a1 == SIZE_MAX ? NULL : trace_get(o, find_alloc(o, 11 + span, it1));
    TAP_OK(it1 < it2 && it2 != SIZE_MAX && a1 < it2 && a2 != SIZE_MAX &&
           find_alloc(o, 10, it1) == SIZE_MAX && g1 && g1->u.alloc.producer == 2 + 4,
           "steps 1 and 2 allocate fresh ids (10 -> 23, 36) and point at renamed ops");
    int reads = 0;
    for (size_t i = it1; i < it2; i++) {
        const trace_rec *r = trace_get(o, i);
        if (r->type == TR_OP && r->u.op.id == 1 + 4)
            reads = r->u.op.n_in == 2 && r->u.op.in[0] == 1 && r->u.op.in[1] == 4 &&
                    r->u.op.out[0] == 10 + span;
    }
    TAP_OK(reads, "a later step's ops read the prelude's tensors by their own ids");
    TAP_OK(trace_meta_u64(o, "iterations", 0) == 3 &&
           !strcmp(trace_get_meta(o, "generator"), "memsim-capture-1"),
           "meta iterations 3; the rest kept");
    char path[] = "/tmp/memsim-cform-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    trace_check_report rep;
    memset(&rep, 0, sizeof rep);
    ms_error_clear(&err);
    st = fd >= 0 ? trace_write(o, path, &err) : MS_ERR_IO;
    if (st == MS_OK) st = trace_check_file(path, stderr, 10, &rep, &err);
    TAP_OK(st == MS_OK && rep.errors == 0 && rep.live_at_end == 4,
           "the form checks as a trace file (%llu problems; live at the end: the parameter, "
           "its states, the block) %s", (unsigned long long)rep.errors, err.msg);
    if (fd >= 0) unlink(path);
    trace_free(o);
    trace_free(t);
    trace_t *g = capture("memsim-gen");
    ms_error_clear(&err);
    st = cform_process(g, 2, &o, &err);
    TAP_OK(!cform_is_capture(g) && st == MS_ERR_INVALID && o == NULL &&
           strstr(err.msg, "not a captured trace"), "a generated trace is refused: %s", err.msg);
    trace_free(g);
}

/* A capture whose prelude holds two 32 MiB blocks no op touches (the cuBLAS workspaces), an
 * input the forward reads and a small block; the step: a forward GEMM (op 1), a backward
 * GEMM (op 2). */
static trace_t *capture_libs(void)
{
    trace_t *t = trace_new();
    if (trace_set_meta(t, "generator", "memsim-capture-1") != MS_OK) bad = 1;
    alloc(t, 1, 4096, TC_PARAM, -1, "w");
    alloc(t, 2, 32u << 20, TC_OTHER, -1, "live_at_start");
    alloc(t, 3, 32u << 20, TC_OTHER, -1, "live_at_start");
    alloc(t, 4, 8192, TC_OTHER, -1, "live_at_start");        /* the input ids */
    alloc(t, 5, 4, TC_OTHER, -1, "live_at_start");           /* small: stays */
    fwd_bwd(t);
    freed(t, 11);
    return t;
}

static size_t find_op(const trace_t *t, uint64_t id, size_t from)
{
    for (size_t i = from; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_OP && r->u.op.id == id) return i;
    }
    return SIZE_MAX;
}

static void test_libs(void)
{
    trace_t *t = capture_libs(), *o = NULL;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = cform_process(t, 2, &o, &err);
    TAP_OK(!bad && st == MS_OK && o, "a capture with library workspaces: process form %s",
           err.msg);
    if (!o) {
        trace_free(t);
        return;
    }
    size_t it0 = find_mark(o, TM_ITER, 0, 0), it1 = find_mark(o, TM_ITER, 1, 0);
    size_t w2 = find_alloc(o, 2, 0), w3 = find_alloc(o, 3, 0);
    TAP_OK(find_alloc(o, 4, 0) < it0 && find_alloc(o, 5, 0) < it0 && find_alloc(o, 1, 0) < it0,
           "the parameter, the input an op reads and the small block stay in the prelude");
    TAP_OK(w2 != SIZE_MAX && w2 > it0 && w2 + 1 == find_op(o, 1, it0) &&
           w3 != SIZE_MAX && w3 + 1 == find_op(o, 2, it0) && w3 < it1,
           "step 0 makes the first workspace just before the first forward GEMM (after its "
           "output), the second just before the first backward GEMM");
    TAP_OK(find_alloc(o, 2, w2 + 1) == SIZE_MAX && find_alloc(o, 3, w3 + 1) == SIZE_MAX,
           "once: the later steps make neither again");
    trace_free(o);
    trace_free(t);
}

/* The measured peak reserved of a run of experiments/capture (NAME.keep.json). */
static double measured_reserved(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[2048];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *k = strstr(buf, "\"peak_reserved\": ");
    return k ? strtod(k + strlen("\"peak_reserved\": "), NULL) : 0;
}

static double reserved_under(const char *trace, int iterations, const machine_t *m,
                             const char *policy)
{
    pipe_workload w;
    pipe_workload_default(&w);
    w.trace_path = trace;
    w.iterations = iterations;
    trace_t *t = NULL;
    ms_error err;
    ms_error_clear(&err);
    pipe_policy p;
    pipe_policy_default(&p);
    if (policy) p.policy = policy;
    sim_result r;
    ms_status st = pipe_trace(&w, m, &t, &err);
    if (st == MS_OK) st = pipe_run(t, m, &p, NULL, &r, &err);
    if (st != MS_OK) TAP_NOTE("%s: %s", trace, err.msg);
    trace_free(t);
    return st == MS_OK && r.status == RS_OK ? (double)r.peak_reserved_bytes : 0;
}

static double reserved(const char *trace, int iterations, const machine_t *m)
{
    return reserved_under(trace, iterations, m, NULL);
}

/* GPT-2 large bf16, checkpointed: the one row whose reserved missed by 3.6 % while the
 * workspaces were made before step 0 (the second one, the autograd thread's, cut a segment
 * of its own instead of a block in one the first step's loss had freed). */
static void test_committed_ckpt(const machine_t *m)
{
    const char *src = getenv("srcdir");
    char tr[1024], js[1024];
    snprintf(tr, sizeof tr, "%s/experiments/capture/results/gpt2-large-bf16.trace.gz",
             src ? src : ".");
    snprintf(js, sizeof js, "%s/experiments/capture/results/gpt2-large-bf16.ckpt.json",
             src ? src : ".");
    double meas = measured_reserved(js);
    if (access(tr, R_OK) != 0 || meas <= 0) {
        TAP_SKIP("the committed capture %s or its measurement is not readable", tr);
        return;
    }
    double got = reserved_under(tr, 0, m, "full-recompute");
    TAP_OK(got > meas * 0.995 && got < meas * 1.005, "gpt2-large-bf16 full-recompute: %.3f "
           "GiB reserved, %.3f measured with gradient_checkpointing_enable() (within 0.5 %%)",
           got / 1073741824.0, meas / 1073741824.0);
}

static void test_committed(void)
{
    const char *src = getenv("srcdir");
    char tr[1024], js[1024];
    snprintf(tr, sizeof tr, "%s/experiments/capture/results/mixtral-mini-4l-bf16.trace.gz",
             src ? src : ".");
    snprintf(js, sizeof js, "%s/experiments/capture/results/mixtral-mini-4l-bf16.keep.json",
             src ? src : ".");
    machine_profile *h = NULL;
    ms_error err;
    double meas = measured_reserved(js);
    if (access(tr, R_OK) != 0 || meas <= 0 || machine_load_named("h200-sxm", &h, &err)) {
        TAP_SKIP("the committed capture %s or its measurement is not readable", tr);
        TAP_SKIP("the same");
        machine_profile_free(h);
        return;
    }
    double two = reserved(tr, 0, &h->m), one = reserved(tr, 1, &h->m);
    TAP_OK(two > 0 && two > meas * 0.98 && two < meas * 1.02,
           "mixtral-mini-4l-bf16 keep-all: %.3f GiB reserved from the process form, %.3f "
           "measured (within 2 %%)", two / 1073741824.0, meas / 1073741824.0);
    TAP_OK(one > 0 && one < meas * 0.9, "the captured step alone (--iters 1): %.3f GiB, "
           "more than 10 %% under: the first step's lazily made states cut the segments",
           one / 1073741824.0);
    test_committed_ckpt(&h->m);
    machine_profile_free(h);
}

int main(void)
{
    test_form();
    test_libs();
    test_committed();
    return tap_done();
}

/* policy_memo.c — the MEMO policies (policy_memo.h): `memo` (token-wise swap/recompute with
 * alpha from MEMO's LP, two rounding buffers, bi-level memory plan), `full-swap+plan` and
 * `full-recompute+plan` (MEMO's Table 4 ablation variants, the latter holding MEMO's idle
 * second rounding buffer), the LP itself (lp_solve, or its
 * closed form when the build has no lp_solve), the LP's inputs from a trace and the per-GPU
 * view of a node. Registered in planners/policy.c; described in docs/MEMO.md. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "planners/memo/policy_memo.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_LPSOLVE
#include <lp_lib.h>
#endif

#include "planners/knob.h"
#include "planners/lower.h"
#include "planners/memo/memplan.h"
#include "traces/jobview.h"
#include "traces/roofline.h"
#include "base/u64map.h"
#include "base/util.h"

const char *memo_bound_name(memo_bound b)
{
    static const char *const names[] = { "none", "time", "host" };
    return (unsigned)b < 3 ? names[b] : "?";
}

/* ---- the LP ---- */

static ms_status lp_check(const memo_lp_in *in, ms_error *err)
{
    const struct { double v; const char *name; int pos; } f[] = {
        { in->s_input_bytes, "S_input", 0 }, { in->s_attn_bytes, "S_attn", 0 },
        { in->s_others_bytes, "S_others", 0 }, { in->link_Bps, "link bandwidth B", 1 },
        { in->t_layer_s, "layer forward time T_layer", 1 },
        { in->host_bytes, "host memory M_CPU", 1 },
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (!isfinite(f[i].v) || f[i].v < 0 || (f[i].pos && f[i].v <= 0))
            return ms_fail(err, MS_ERR_INVALID, "memo LP: %s is %g; it must be a finite number "
                           "%s", f[i].name, f[i].v, f[i].pos ? "> 0" : ">= 0");
    if (in->n_layers < 1)
        return ms_fail(err, MS_ERR_INVALID, "memo LP: %d layers; at least 1 is needed",
                       in->n_layers);
    return MS_OK;
}

/* Each constraint's own limit on alpha: a*alpha <= b gives b/a (HUGE_VAL when a = 0 and
 * b >= 0, -HUGE_VAL when a = 0 and b < 0). */
static double limit_of(double a, double b)
{
    if (a > 0) return b / a;
    return b >= 0 ? HUGE_VAL : -HUGE_VAL;
}

/* Rows of the LP in GB and seconds (well scaled for the simplex). */
typedef struct lp_rows {
    double a_time, b_time;   /* (S_others / B) alpha <= T - (S_in + S_attn) / B */
    double a_host, b_host;   /* (n-2) S_others alpha <= M - (n-2)(S_in + S_attn), GB */
    int has_host;            /* n > 2 */
} lp_rows;

static lp_rows lp_make_rows(const memo_lp_in *in)
{
    lp_rows r;
    double base = in->s_input_bytes + in->s_attn_bytes;
    r.a_time = in->s_others_bytes / in->link_Bps;
    r.b_time = in->t_layer_s - base / in->link_Bps;
    double k = in->n_layers > 2 ? (double)(in->n_layers - 2) : 0.0;
    r.has_host = k > 0;
    r.a_host = k * in->s_others_bytes / 1e9;
    r.b_host = in->host_bytes / 1e9 - k * base / 1e9;
    return r;
}

#ifdef HAVE_LPSOLVE
/* lp_solve on the 1-variable LP; returns 1 and *alpha when optimal, 0 when infeasible, -1
 * when lp_solve failed otherwise. */
static int lp_solve_alpha(const lp_rows *r, double *alpha)
{
    lprec *lp = make_lp(0, 1);
    if (!lp) return -1;
    set_verbose(lp, NEUTRAL);
    int col = 1;
    REAL one = 1.0, a;
    int ok = set_obj_fnex(lp, 1, &one, &col) && set_bounds(lp, 1, 0.0, 1.0);
    set_maxim(lp);
    set_add_rowmode(lp, TRUE);
    a = r->a_time;
    ok = ok && add_constraintex(lp, 1, &a, &col, LE, r->b_time);
    if (r->has_host) {
        a = r->a_host;
        ok = ok && add_constraintex(lp, 1, &a, &col, LE, r->b_host);
    }
    set_add_rowmode(lp, FALSE);
    int res = ok ? solve(lp) : -1;
    int out = -1;
    if (res == OPTIMAL || res == SUBOPTIMAL) {
        REAL v[1];
        get_variables(lp, v);
        *alpha = v[0];
        out = 1;
    } else if (res == INFEASIBLE) {
        out = 0;
    }
    delete_lp(lp);
    return out;
}
#endif

static ms_status lp_infeasible(const memo_lp_in *in, memo_lp_out *out, const lp_rows *r,
                               ms_error *err)
{
    out->infeasible = 1;
    out->alpha = 0;
    double base = in->s_input_bytes + in->s_attn_bytes;
    if (r->b_time < 0) {
        out->binding = MEMO_BOUND_TIME;
        return ms_fail(err, MS_ERR_INVALID, "memo LP is infeasible: offloading a layer's input "
                       "and attention output alone (%.1f MiB) takes %.3f ms at %.2f GB/s, "
                       "longer than one layer's forward (%.3f ms)", base / 1048576.0,
                       1e3 * base / in->link_Bps, in->link_Bps / 1e9, 1e3 * in->t_layer_s);
    }
    out->binding = MEMO_BOUND_HOST;
    return ms_fail(err, MS_ERR_INVALID, "memo LP is infeasible: %d layers' inputs and attention "
                   "outputs alone need %.2f GiB of host memory, more than the %.2f GiB this "
                   "GPU has", in->n_layers - 2, (double)(in->n_layers - 2) * base / MS_GiB,
                   in->host_bytes / MS_GiB);
}

ms_status memo_alpha_lp(const memo_lp_in *in, memo_lp_out *out, ms_error *err)
{
    memset(out, 0, sizeof *out);
    ms_status st = lp_check(in, err);
    if (st != MS_OK) return st;
    lp_rows r = lp_make_rows(in);
    out->alpha_time = limit_of(r.a_time, r.b_time);
    out->alpha_host = r.has_host ? limit_of(r.a_host, r.b_host) : HUGE_VAL;
    if (r.b_time < 0 || (r.has_host && r.b_host < 0)) return lp_infeasible(in, out, &r, err);
    double alpha = out->alpha_time < out->alpha_host ? out->alpha_time : out->alpha_host;
    if (alpha > 1) alpha = 1;
#ifdef HAVE_LPSOLVE
    double a2 = 0;
    int res = lp_solve_alpha(&r, &a2);
    if (res == 0) return lp_infeasible(in, out, &r, err);
    if (res < 0) return ms_fail(err, MS_ERR_INVALID, "memo LP: lp_solve failed");
    /* the simplex answer; the closed form above is its check */
    if (fabs(a2 - alpha) > 1e-6)
        return ms_fail(err, MS_ERR_INVALID, "memo LP: lp_solve gives alpha %.9g, the closed "
                       "form %.9g (internal error)", a2, alpha);
    alpha = a2;
    out->used_lpsolve = 1;
#endif
    out->alpha = alpha < 0 ? 0 : alpha > 1 ? 1 : alpha;
    if (out->alpha >= 1) out->binding = MEMO_BOUND_NONE;
    else out->binding = out->alpha_time <= out->alpha_host ? MEMO_BOUND_TIME : MEMO_BOUND_HOST;
    return MS_OK;
}

/* ---- the LP's inputs from a trace ---- */

typedef struct layer_acc {
    uint64_t in, attn, others;
    int seen;
    double fwd_us;
} layer_acc;

static ms_status op_dur_us(const trace_op *op, const machine_t *m, const roof_params *rp,
                           double *us, ms_error *err)
{
    *us = roof_op_us(m, rp, op);
    if (*us < 0)
        return ms_fail(err, MS_ERR_INVALID, "memo: trace op %" PRIu64 " (%s) has no duration",
                       op->id, op->name);
    return MS_OK;
}

/* Forward op time per layer in the first forward pass; a ".ovl" collective followed by its
 * attention kernel counts as max(ring, attention), as lowering runs it. */
static ms_status layer_times(const trace_t *t, const machine_t *m, layer_acc *acc, int n,
                             ms_error *err)
{
    roof_params rp;
    roof_params_default(&rp);
    int fwd_seen = 0, in_fwd = 0;
    double ovl = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            in_fwd = r->u.mark.value == TP_FWD;
            if (in_fwd && fwd_seen++) break; /* the second forward pass */
            continue;
        }
        if (r->type != TR_OP || !in_fwd) continue;
        const trace_op *op = &r->u.op;
        if (op->phase != TP_FWD || op->layer < 0 || op->layer >= n) continue;
        double us = 0;
        ms_status st = op_dur_us(op, m, &rp, &us, err);
        if (st != MS_OK) return st;
        if (op->kind == TK_COMM && ms_ends_with(op->name, ".ovl")) {
            ovl = us > ovl ? us : ovl;
            continue;
        }
        if (op->kind == TK_ATTN && ovl > 0) {
            us = us > ovl ? us : ovl;
            ovl = 0;
        }
        acc[op->layer].fwd_us += us + ovl; /* an unmatched ring is serialized */
        ovl = 0;
    }
    return MS_OK;
}

ms_status memo_layer_info_get(const trace_t *t, const machine_t *m, memo_layer_info *out,
                              ms_error *err)
{
    memset(out, 0, sizeof *out);
    pol_skel *sk;
    size_t n;
    ms_status st = pol_skeletal(t, &sk, &n, err);
    if (st != MS_OK) return st;
    /* Layers 0..max each need skeletal activations of their own in the first pass, so a layer
     * index at or beyond that pass's count (or beyond the layers the trace declares) cannot
     * be dense: it is refused before it sizes the per-layer table. */
    size_t n0 = 0;
    for (size_t i = 0; i < n; i++) n0 += sk[i].pass == 0;
    int32_t limit = n0 < INT32_MAX ? (int32_t)n0 : INT32_MAX;
    int nl = 0;
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        if (sk[i].pass != 0) continue;
        char what[96];
        snprintf(what, sizeof what, "memo: skeletal tensor %" PRIu64 " (%s)", sk[i].id,
                 sk[i].t->name);
        st = pol_check_layer(t, sk[i].layer, limit, what, err);
        if (st == MS_OK && sk[i].layer >= limit)
            st = ms_fail(err, MS_ERR_INVALID, "%s: layer %d, but the first forward pass has "
                         "only %zu skeletal activations: layers 0..%d cannot all have theirs",
                         what, (int)sk[i].layer, n0, (int)sk[i].layer);
        if (st == MS_OK && sk[i].layer + 1 > nl) nl = sk[i].layer + 1;
    }
    if (st != MS_OK) {
        free(sk);
        return st;
    }
    if (nl == 0) {
        free(sk);
        return ms_fail(err, MS_ERR_INVALID, "memo: the trace has no skeletal activations of "
                       "transformer layers");
    }
    layer_acc *acc = calloc((size_t)nl, sizeof *acc);
    if (!acc) {
        free(sk);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (sk[i].pass != 0) continue;
        layer_acc *a = &acc[sk[i].layer];
        a->seen = 1;
        uint64_t b = sk[i].t->bytes;
        if (sk[i].is_input) a->in += b;
        else if (sk[i].is_attn_out || sk[i].is_whole) a->attn += b; /* swapped whole too */
        else a->others += b;
    }
    free(sk);
    for (int l = 0; st == MS_OK && l < nl; l++) {
        const layer_acc *a = &acc[l], *z = &acc[0];
        if (!a->seen)
            st = ms_fail(err, MS_ERR_INVALID, "memo: layer %d has no skeletal activations "
                         "(layers 0..%d expected)", l, nl - 1);
        else if (!a->in || !a->attn)
            st = ms_fail(err, MS_ERR_INVALID, "memo: layer %d has no %s (a skeletal tensor "
                         "named *%s)", l, a->in ? "attention output" : "layer input",
                         a->in ? ".attn_out" : ".input");
        else if (a->in != z->in || a->attn != z->attn || a->others != z->others)
            st = ms_fail(err, MS_ERR_INVALID, "memo: layers differ: layer %d's skeletal "
                         "activations (input %" PRIu64 ", attention output %" PRIu64 ", others "
                         "%" PRIu64 " bytes) are not layer 0's (%" PRIu64 ", %" PRIu64 ", %"
                         PRIu64 "); MEMO's LP and rounding buffers assume identical layers",
                         l, a->in, a->attn, a->others, z->in, z->attn, z->others);
    }
    if (st == MS_OK) st = layer_times(t, m, acc, nl, err);
    if (st == MS_OK) {
        out->n_layers = nl;
        out->s_input_bytes = acc[0].in;
        out->s_attn_bytes = acc[0].attn;
        out->s_others_bytes = acc[0].others;
        double mn = acc[0].fwd_us;
        for (int l = 1; l < nl; l++) mn = acc[l].fwd_us < mn ? acc[l].fwd_us : mn;
        out->t_layer_s = mn * 1e-6;
        if (!(out->t_layer_s > 0))
            st = ms_fail(err, MS_ERR_INVALID, "memo: a layer's forward takes no time");
    }
    free(acc);
    return st;
}

/* ---- knobs ---- */

typedef struct memo_knobs {
    double alpha_step;       /* grid for alpha; 0: continuous */
    lower_host_round host_round; /* where the pinned host buffers come from */
    uint64_t host_granule;   /* exact buffers rounded to a multiple of this many bytes */
    uint64_t host_bytes;     /* M_CPU override; 0: host.mem_bytes / node.gpus - reserved */
    uint64_t host_reserved;  /* host bytes per GPU not available to offloads */
    int keep_last;           /* layers at the end kept on the GPU (MEMO: 2) */
    int lp_strict;           /* 1: an infeasible LP fails the policy */
    int memory_plan;         /* 1: bi-level plan and the static arena */
    double plan_l1_s, plan_l2_s;
    int strict_layers;
    int fr_buffers;          /* full-recompute+plan: layer-sized buffers the executor holds */
    int fr_given;            /* fr_buffers was given */
    lower_knobs lower;       /* the lowering's knobs as o gives them (which the plan keeps) */
    int host_pow2;           /* the older spelling of host_round */
    int host_round_given;    /* host_round's row value (lower_host_round) */
    uint64_t given;
} memo_knobs;

static const char *const MEMO_HOST_ROUNDS[] = { "exact", "layer_pow2", "tensor_pow2",
                                                "buffer_pow2", NULL };

/* The paper does not say where MEMO's executor gets its pinned host memory (docs/MEMO.md,
 * "MEMO's executor"). The default, buffer_pow2, follows its mechanism: "rounding buffer (i%2)
 * will be offloaded to CPU" (§4.1, Fig. 5), one copy per layer of the buffer that holds MEMO's
 * 16bsh of bf16 skeletal activations, into one PyTorch pinned tensor, which the caching host
 * allocator rounds up to a power of two (c10::llvm::PowerOf2Ceil before cudaHostAlloc); TE's
 * fp32 statistics, outside that count, pinned one tensor each. Its Tables 4 and 5 agree (MEMO
 * took alpha 1 at 256K and 0.5 at 384K, which only this reading gives). exact (the LP's
 * bytes in 4 KiB pages), layer_pow2 (statistics in the one tensor) and tensor_pow2 (one per
 * tensor slice) are the other readings; the older knob host_pow2=1 is layer_pow2 and
 * host_pow2=0 is exact. */
static const knobtab_row memo_rows[] = {
    KNOB_DBL("alpha_step", memo_knobs, alpha_step, "0.125", -HUGE_VAL, HUGE_VAL,
             "grid for alpha in [0, 1]; 0: continuous", "MEMO §4.1"),
    KNOB_INT("host_pow2", memo_knobs, host_pow2, "0", 0, 1,
             "the older spelling of host_round=layer_pow2 (0: exact)", ""),
    KNOB_ENUM("host_round", memo_knobs, host_round_given, NULL, MEMO_HOST_ROUNDS,
              "where the pinned host buffers come from (absent: buffer_pow2, or host_pow2's "
              "reading)", "MEMO §4.1, Fig. 5"),
    KNOB_BYTES("host_granule", memo_knobs, host_granule, "4096", -HUGE_VAL, HUGE_VAL,
               "exact buffers rounded to a multiple of this, in [1, 2^40]", "host pages"),
    KNOB_BYTES("host_bytes", memo_knobs, host_bytes, "0", -HUGE_VAL, HUGE_VAL,
               "host memory M_CPU; 0: host.mem_bytes / node.gpus - reserved", ""),
    KNOB_BYTES("host_reserved", memo_knobs, host_reserved, "0", -HUGE_VAL, HUGE_VAL,
               "host bytes per GPU not available to offloads", ""),
    KNOB_INT("keep_last", memo_knobs, keep_last, "2", 0, 1 << 20,
             "layers at the end kept on the GPU", "MEMO §4.1"),
    KNOB_INT("lp_strict", memo_knobs, lp_strict, "0", 0, 1, "1: an infeasible LP fails", ""),
    KNOB_INT("memory_plan", memo_knobs, memory_plan, "1", 0, 1,
             "1: the bi-level plan and the static arena", "MEMO §4.2"),
    KNOB_INT("strict_layers", memo_knobs, strict_layers, "0", 0, 1,
             "1: the memory plan fails where a layer's blocks cannot be placed apart", ""),
    KNOB_DBL("plan_l1_s", memo_knobs, plan_l1_s, "0.5", -HUGE_VAL, HUGE_VAL,
             "the memory plan's level-1 effort limit, seconds", ""),
    KNOB_DBL("plan_l2_s", memo_knobs, plan_l2_s, "3", -HUGE_VAL, HUGE_VAL,
             "the memory plan's level-2 effort limit, seconds", ""),
};
static const knobtab memo_knob_table = KNOBTAB("memo", memo_rows, KNOBTAB_MSG_OPT, memo_knobs,
                                               given);
/* full-recompute+plan's own. */
static const knobtab_row fr_rows[] = {
    KNOB_INT("fr_buffers", memo_knobs, fr_buffers, "2", 1, 2,
             "full-recompute+plan: layer-sized buffers MEMO's executor holds (2: one idle)",
             "MEMO §4.1, §5.3"),
};
static const knobtab fr_knob_table = KNOBTAB("full-recompute+plan", fr_rows, KNOBTAB_MSG_OPT,
                                             memo_knobs, given);

static ms_status read_host_round(memo_knobs *k, ms_error *err)
{
    int given_pow2 = knobtab_given(&memo_knob_table, k, &k->host_pow2);
    lower_host_round legacy = k->host_pow2 == 1 ? LOWER_HOST_LAYER_POW2 : LOWER_HOST_EXACT;
    if (!knobtab_given(&memo_knob_table, k, &k->host_round_given)) {
        k->host_round = given_pow2 ? legacy : LOWER_HOST_BUFFER_POW2;
        return MS_OK;
    }
    k->host_round = (lower_host_round)k->host_round_given;
    if (given_pow2 && k->host_round != legacy)
        return ms_fail(err, MS_ERR_INVALID, "knobs host_round=%s and host_pow2=%d disagree "
                       "(host_pow2=1 is layer_pow2, host_pow2=0 exact)",
                       lower_host_round_name(k->host_round), k->host_pow2);
    return MS_OK;
}

static ms_status read_knobs(const pol_opts *o, memo_knobs *k, ms_error *err)
{
    memset(k, 0, sizeof *k);
    memo_knobs f;
    ms_status st = knob_from_opts(&memo_knob_table, o, k, err);
    if (st == MS_OK) st = knob_from_opts(&fr_knob_table, o, &f, err);
    if (st != MS_OK) return st;
    k->fr_buffers = f.fr_buffers;
    k->fr_given = knobtab_given(&fr_knob_table, &f, &f.fr_buffers);
    if (!(k->alpha_step >= 0 && k->alpha_step <= 1))
        return ms_fail(err, MS_ERR_INVALID, "knob alpha_step: %g is not in [0, 1]", k->alpha_step);
    st = read_host_round(k, err);
    if (st == MS_OK && (k->host_granule < 1 || k->host_granule > (UINT64_C(1) << 40)))
        st = ms_fail(err, MS_ERR_INVALID, "knob host_granule: %" PRIu64 " bytes is not in "
                     "[1, 2^40]", k->host_granule);
    if (st == MS_OK) st = pol_common_knobs_check(o, NULL, err);
    if (st == MS_OK) st = knob_from_opts(&lower_knob_table, o, &k->lower, err);
    return st;
}

/* ---- alpha ---- */

uint64_t memo_host_buffer_bytes(uint64_t bytes, int pow2, uint64_t granule_bytes)
{
    lower_host_acc a = { 0, 0, 0, 0 };
    lower_host_acc_add(&a, bytes, 0);
    return lower_host_acc_bytes(&a, pow2 ? LOWER_HOST_LAYER_POW2 : LOWER_HOST_EXACT, granule_bytes);
}

uint64_t memo_host_layer_bytes(const uint64_t *copy_bytes, const unsigned char *is_stat, size_t n,
                               lower_host_round r, uint64_t granule_bytes)
{
    lower_host_acc a = { 0, 0, 0, 0 };
    for (size_t i = 0; i < n; i++) lower_host_acc_add(&a, copy_bytes[i], is_stat && is_stat[i]);
    return lower_host_acc_bytes(&a, r, granule_bytes);
}

/* Host bytes one offloaded layer takes at alpha, as lowering copies it (per-tensor ceil of
 * alpha * bytes over the layer's block, then the pinned allocator's rounding). */
static uint64_t layer_host_bytes(const trace_t *t, int layer, double alpha, lower_host_round r,
                                 uint64_t granule)
{
    pol_skel *sk;
    size_t n;
    ms_error e;
    if (pol_skeletal(t, &sk, &n, &e) != MS_OK) return UINT64_MAX;
    lower_host_acc acc = { 0, 0, 0, 0 };
    for (size_t i = 0; i < n; i++) {
        if (sk[i].pass != 0 || sk[i].layer != layer) continue;
        double a = (sk[i].is_input || sk[i].is_attn_out || sk[i].is_whole) ? 1.0 : alpha;
        double b = ceil(a * (double)sk[i].t->bytes);
        lower_host_acc_add(&acc, b >= (double)sk[i].t->bytes ? sk[i].t->bytes : (uint64_t)b,
                           lower_is_statistic(sk[i].t->name));
    }
    free(sk);
    return lower_host_acc_bytes(&acc, r, granule);
}

static ms_status choose(const trace_t *t, const machine_t *m, const pol_opts *o,
                        const memo_knobs *k, memo_alpha_choice *c, ms_error *err)
{
    memset(c, 0, sizeof *c);
    c->alpha_step = k->alpha_step;
    c->host_round = k->host_round;
    c->host_pow2 = k->host_round == LOWER_HOST_LAYER_POW2;
    c->host_granule_bytes = k->host_granule;
    ms_status st = memo_layer_info_get(t, m, &c->li, err);
    if (st != MS_OK) return st;
    /* M_CPU is the node's memory over all its GPUs (MEMO §4.2), the link this GPU's share. */
    jobview jv;
    jobview_of(t, m, &jv);
    const machine_t g = jv.gpu;
    double host = (double)jv.host_per_node_gpu_bytes;
    host -= (double)k->host_reserved;
    if (k->host_bytes) host = (double)k->host_bytes;
    c->in = (memo_lp_in){ (double)c->li.s_input_bytes, (double)c->li.s_attn_bytes,
                          (double)c->li.s_others_bytes, g.link_d2h_Bps, c->li.t_layer_s,
                          c->li.n_layers, host > 0 ? host : 0 };
    if (!(g.link_d2h_Bps > 0) || !(host > 0))
        return ms_fail(err, MS_ERR_INVALID, "memo: machine %s gives no %s", m->name,
                       g.link_d2h_Bps > 0 ? "host memory for offloads" : "host link bandwidth");
    ms_error lperr;
    st = memo_alpha_lp(&c->in, &c->lp, &lperr);
    if (st != MS_OK && !c->lp.infeasible) {
        *err = lperr;
        return st;
    }
    if (st != MS_OK) {
        if (k->lp_strict && o->alpha < 0) {
            *err = lperr;
            return st;
        }
        c->lp_failed = 1; /* MEMO offloads the inputs and attention outputs anyway */
    }
    double a = o->alpha >= 0 ? o->alpha : c->lp.alpha;
    if (o->alpha < 0 && k->alpha_step > 0) a = floor(a / k->alpha_step + 1e-9) * k->alpha_step;
    int kept = k->keep_last < c->li.n_layers ? k->keep_last : c->li.n_layers;
    uint64_t layers = (uint64_t)(c->li.n_layers - kept);
    c->host_need_bytes = layers * layer_host_bytes(t, 0, a, k->host_round, k->host_granule);
    /* the LP counts exact bytes; the buffers as allocated may be larger */
    while (o->alpha < 0 && k->alpha_step > 0 && a > 0 && (double)c->host_need_bytes > host) {
        a = a - k->alpha_step < 0 ? 0 : a - k->alpha_step;
        c->grid_steps_down++;
        c->host_need_bytes = layers * layer_host_bytes(t, 0, a, k->host_round, k->host_granule);
    }
    c->alpha = a;
    return MS_OK;
}

ms_status memo_choose_alpha(const trace_t *t, const machine_t *m, const pol_opts *o,
                            memo_alpha_choice *c, ms_error *err)
{
    pol_opts def;
    if (!o) {
        pol_opts_default(&def);
        o = &def;
    }
    if (!m) return ms_fail(err, MS_ERR_INVALID, "memo: a machine profile is needed (link "
                           "bandwidth and host memory for the LP)");
    memo_knobs k;
    ms_status st = read_knobs(o, &k, err);
    return st == MS_OK ? choose(t, m, o, &k, c, err) : st;
}

/* ---- plans ---- */

typedef enum memo_mode { MODE_MEMO, MODE_FULL_SWAP, MODE_FULL_RECOMPUTE } memo_mode;

static ms_status set_knob(plan_t *p, const char *key, const char *fmt, double v, ms_error *err)
{
    char buf[96];
    snprintf(buf, sizeof buf, fmt, v);
    return plan_set_knob(p, key, buf) == MS_OK
               ? MS_OK
               : ms_fail(err, MS_ERR_NOMEM, "cannot record knob %s in the plan", key);
}

/* Knobs a plan file carries so that it says how it was made (and lowering reads). A knob the
 * user gave wins over the policy's default. */
static ms_status put_knob(plan_t *p, const char *key, const char *value, ms_error *err)
{
    return plan_set_knob(p, key, value) == MS_OK
               ? MS_OK
               : ms_fail(err, MS_ERR_NOMEM, "cannot record knob %s in the plan", key);
}
#define LOWER_GIVEN(k, f) knobtab_given(&lower_knob_table, &(k)->lower, &(k)->lower.f)

static ms_status decide_all(const trace_t *t, plan_t *p, memo_mode mode, double alpha,
                            int n_layers, int keep_last, ms_error *err)
{
    pol_skel *sk;
    size_t n;
    ms_status st = pol_skeletal(t, &sk, &n, err);
    for (size_t i = 0; st == MS_OK && i < n; i++) {
        const pol_skel *s = &sk[i];
        plan_decision d;
        double a = 0;
        if (mode == MODE_FULL_RECOMPUTE) {
            d = s->is_input ? PD_KEEP : PD_RECOMPUTE;
        } else if (s->layer >= n_layers - keep_last) {
            d = PD_KEEP; /* the last layers' backward follows at once (MEMO §4.1) */
        } else {
            d = PD_SWAP;
            a = (s->is_input || s->is_attn_out || s->is_whole) ? 1.0 : alpha;
        }
        if (plan_set_tensor(p, s->id, d, a) != MS_OK)
            st = ms_fail(err, MS_ERR_NOMEM, "cannot record tensor %" PRIu64, s->id);
    }
    free(sk);
    return st;
}

/* Full recomputation in MEMO's executor (knob fr_buffers, docs/MEMO.md "MEMO's executor"):
 * its two rounding buffers are allocated before training (§4.1) and the §5.3 variants are
 * "variants of Memo", so while a layer is computed or recomputed in one buffer the other
 * stays allocated with nothing to prefetch into it. Lowering models the layer in use by its
 * own tensors and the other buffer by one block held throughout (plan knob
 * idle_buffer_bytes): the largest layer's recomputed skeletal bytes in one forward pass. The
 * kept layer input is outside the buffer (the checkpoint keeps it). */
static ms_status fr_idle_buffer(const trace_t *t, plan_t *p, int fr_buffers, int user_idle,
                              ms_error *err)
{
    if (fr_buffers < 2 || user_idle) return MS_OK; /* the user's wins */
    pol_skel *sk;
    size_t n;
    ms_status st = pol_skeletal(t, &sk, &n, err);
    if (st != MS_OK) return st;
    u64map *sum = u64map_new(256);
    int ok = sum != NULL;
    uint64_t best = 0;
    for (size_t i = 0; ok && i < n; i++) {
        if (sk[i].is_input) continue;
        uint64_t key = ((uint64_t)sk[i].pass << 32) | (uint32_t)sk[i].layer, v = 0;
        u64map_get(sum, key, &v);
        v += sk[i].t->bytes;
        if (v > best) best = v;
        ok = u64map_put(sum, key, v) == 0;
    }
    free(sk);
    u64map_free(sum);
    if (!ok) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    return set_knob(p, "idle_buffer_bytes", "%.0f", (double)best, err);
}

/* Lowers the trace with the plan's decisions and knobs, plans the schedule's memory and
 * stores the offsets for the static arena. */
static ms_status plan_memory(const trace_t *t, const machine_t *m, plan_t *p,
                             const memo_knobs *k, ms_error *err)
{
    snprintf(p->allocator, sizeof p->allocator, "static");
    plan_sort(p);
    schedule_t *s = NULL;
    lower_opts lo;
    lower_opts_default(&lo);
    ms_status st = lower_schedule(t, p, m, &lo, &s, err);
    if (st != MS_OK) return st;
    memplan_opts mo;
    memplan_opts_default(&mo);
    mo.level1_time_s = k->plan_l1_s;
    mo.level2_time_s = k->plan_l2_s;
    mo.strict_layers = k->strict_layers;
    memplan_result r;
    memplan_report rep;
    st = memplan_schedule(s, &mo, &r, &rep, err);
    sched_free(s);
    if (st != MS_OK) return st;
    st = memplan_apply(&r, p, m ? machine_usable_bytes(m) : 0, err);
    memplan_result_free(&r);
    if (st == MS_OK) st = set_knob(p, "plan_peak_bytes", "%.0f", (double)rep.peak_bytes, err);
    if (st == MS_OK) st = set_knob(p, "plan_load_bytes", "%.0f", (double)rep.load_bytes, err);
    if (st == MS_OK) st = set_knob(p, "plan_gap", "%.6f", rep.gap, err);
    if (st == MS_OK)
        st = set_knob(p, "plan_level1_fwd_bytes", "%.0f", (double)rep.level1_fwd_peak_bytes, err);
    if (st == MS_OK)
        st = set_knob(p, "plan_level1_bwd_bytes", "%.0f", (double)rep.level1_bwd_peak_bytes, err);
    return st;
}

ms_status memo_apply_memory_plan(const trace_t *t, const machine_t *m, const pol_opts *o,
                                 plan_t *p, ms_error *err)
{
    pol_opts def;
    if (!o) {
        pol_opts_default(&def);
        o = &def;
    }
    memo_knobs k;
    ms_status st = read_knobs(o, &k, err);
    if (st == MS_OK && plan_set_knob(p, "memory_plan", "1") != MS_OK)
        st = ms_fail(err, MS_ERR_NOMEM, "cannot record knob memory_plan in the plan");
    return st == MS_OK ? plan_memory(t, m, p, &k, err) : st;
}

ms_status memo_post_plan(const trace_t *t, const machine_t *m, const pol_opts *o, plan_t *p,
                         ms_error *err)
{
    pol_common_knobs ck = { 0 };
    ms_status st = knob_from_plan(&pol_common_knob_table, p, &ck, err);
    if (st != MS_OK || !ck.memory_plan || p->n_offsets) return st;
    return memo_apply_memory_plan(t, m, o, p, err);
}

static ms_status record_alpha(plan_t *p, const memo_alpha_choice *c, ms_error *err)
{
    ms_status st = set_knob(p, "alpha_used", "%.6g", c->alpha, err);
    if (st == MS_OK) st = set_knob(p, "alpha_lp", "%.6g", c->lp.alpha, err);
    if (st == MS_OK)
        st = plan_set_knob(p, "alpha_lp_bound", c->lp_failed ? (c->lp.binding == MEMO_BOUND_TIME
                                                                     ? "infeasible-time"
                                                                     : "infeasible-host")
                                                             : memo_bound_name(c->lp.binding));
    if (st == MS_OK)
        st = plan_set_knob(p, "alpha_lp_solver", c->lp.used_lpsolve ? "lp_solve" : "closed-form");
    if (st == MS_OK)
        st = set_knob(p, "alpha_lp_time", "%.6g", isfinite(c->lp.alpha_time) ? c->lp.alpha_time
                                                                              : 1e300, err);
    if (st == MS_OK) st = set_knob(p, "lp_t_layer_s", "%.6g", c->in.t_layer_s, err);
    if (st == MS_OK) st = set_knob(p, "lp_link_Bps", "%.6g", c->in.link_Bps, err);
    if (st == MS_OK) st = set_knob(p, "lp_host_bytes", "%.0f", c->in.host_bytes, err);
    if (st == MS_OK) st = set_knob(p, "host_need_bytes", "%.0f", (double)c->host_need_bytes, err);
    return st == MS_OK ? MS_OK : ms_fail(err, MS_ERR_NOMEM, "cannot record knobs in the plan");
}

static ms_status run_memo(const char *name, memo_mode mode, const trace_t *t, const machine_t *m,
                          const pol_opts *o, plan_t **out, ms_error *err)
{
    *out = NULL;
    pol_opts def;
    if (!o) {
        pol_opts_default(&def);
        o = &def;
    }
    memo_knobs k;
    ms_status st = read_knobs(o, &k, err);
    if (st != MS_OK) return st;
    memo_alpha_choice c;
    memset(&c, 0, sizeof c);
    if (mode == MODE_MEMO) {
        if (!m) return ms_fail(err, MS_ERR_INVALID, "policy %s: a machine profile is needed "
                               "(link bandwidth and host memory for the LP)", name);
        st = choose(t, m, o, &k, &c, err);
    } else if (mode == MODE_FULL_SWAP) {
        st = memo_layer_info_get(t, m, &c.li, err);
        c.alpha = o->alpha >= 0 ? o->alpha : 1.0;
    } else { /* full recomputation needs no layer sizes: any trace with layers will do */
        st = pol_need_skeletal(name, t, err);
    }
    if (st != MS_OK) return st;
    plan_t *p;
    if ((st = pol_plan_new(name, o, &p, err)) != MS_OK) return st;
    st = decide_all(t, p, mode, c.alpha, c.li.n_layers, k.keep_last, err);
    if (st == MS_OK && mode != MODE_FULL_RECOMPUTE) {
        if (!LOWER_GIVEN(&k, rounding_buffers)) st = put_knob(p, "rounding_buffers", "1", err);
        if (st == MS_OK && !LOWER_GIVEN(&k, tokenwise)) st = put_knob(p, "tokenwise", "chain", err);
        if (st == MS_OK && plan_set_knob(p, "host_round", lower_host_round_name(k.host_round)))
            st = ms_fail(err, MS_ERR_NOMEM, "cannot record knob host_round in the plan");
        if (st == MS_OK) st = set_knob(p, "host_granule", "%.0f", (double)k.host_granule, err);
        if (st == MS_OK) st = set_knob(p, "keep_last", "%.0f", k.keep_last, err);
    }
    if (st == MS_OK && mode == MODE_FULL_RECOMPUTE) st = fr_idle_buffer(t, p, k.fr_buffers, LOWER_GIVEN(&k, idle_buffer_bytes), err);
    if (st == MS_OK && mode != MODE_FULL_RECOMPUTE && k.fr_given)
        st = ms_fail(err, MS_ERR_INVALID, "policy %s: knob fr_buffers applies to "
                     "full-recompute+plan only", name);
    if (st == MS_OK && mode == MODE_MEMO) st = record_alpha(p, &c, err);
    if (st == MS_OK && mode == MODE_FULL_SWAP) st = set_knob(p, "alpha_used", "%.6g", c.alpha, err);
    if (st == MS_OK && !knobtab_given(&memo_knob_table, &k, &k.memory_plan))
        st = put_knob(p, "memory_plan", k.memory_plan ? "1" : "0", err);
    /* The loss is part of the program the trace records (traces/gen.c, knob loss): the plan
     * says which one it was made for, since MEMO's executor cannot run Megatron's stock loss
     * at its reported lengths (docs/MEMO.md). */
    const char *loss = trace_get_meta(t, "loss");
    if (st == MS_OK && loss && plan_set_knob(p, "trace_loss", loss) != MS_OK)
        st = ms_fail(err, MS_ERR_NOMEM, "cannot record knob trace_loss in the plan");
    if (st == MS_OK && k.memory_plan) st = plan_memory(t, m, p, &k, err);
    if (st != MS_OK) {
        plan_free(p);
        return st;
    }
    plan_sort(p);
    *out = p;
    return MS_OK;
}

static ms_status plan_memo(const trace_t *t, const machine_t *m, const pol_opts *o,
                           plan_t **out, ms_error *err)
{
    return run_memo("memo", MODE_MEMO, t, m, o, out, err);
}

static ms_status plan_fs(const trace_t *t, const machine_t *m, const pol_opts *o, plan_t **out,
                         ms_error *err)
{
    return run_memo("full-swap+plan", MODE_FULL_SWAP, t, m, o, out, err);
}

static ms_status plan_fr(const trace_t *t, const machine_t *m, const pol_opts *o, plan_t **out,
                         ms_error *err)
{
    return run_memo("full-recompute+plan", MODE_FULL_RECOMPUTE, t, m, o, out, err);
}

static const knobtab *const MEMO_KNOB_GROUPS[] = { &memo_knob_table, &lower_knob_table, NULL };
static const knobtab *const FR_KNOB_GROUPS[] = { &memo_knob_table, &fr_knob_table,
                                                 &lower_knob_table, NULL };

const pol_policy pol_memo = {
    "memo",
    "layer input and attention output offloaded; other skeletal activations: alpha of the "
    "tokens offloaded (MEMO's LP), the rest recomputed; two rounding buffers; bi-level "
    "static memory plan",
    "MEMO (Zhao et al., SIGMOD 2025) §4.1 token-wise recomputation and swapping, §4.2 "
    "bi-level memory planning",
    &memo_knob_table,
    plan_memo,
    MEMO_KNOB_GROUPS,
    POL_FORM_PLAIN,
    1,
    NULL,
    memo_post_plan,
};

const pol_policy pol_full_swap_plan = {
    "full-swap+plan",
    "MEMO with alpha = 1: every skeletal activation of all but the last two layers offloaded "
    "through the rounding buffers; bi-level static memory plan",
    "MEMO (Zhao et al., SIGMOD 2025) Table 4 'Full Swapping + Memory Plan' (§5.3.2)",
    &memo_knob_table,
    plan_fs,
    MEMO_KNOB_GROUPS,
    POL_FORM_PLAIN,
    1,
    NULL,
    memo_post_plan,
};

const pol_policy pol_full_recompute_plan = {
    "full-recompute+plan",
    "keep each layer's input, recompute its other skeletal activations before its backward "
    "into one of MEMO's two rounding buffers (the other held idle); bi-level static memory plan",
    "MEMO (Zhao et al., SIGMOD 2025) Table 4 'Full Recomputation + Memory Plan' (§5.3.1)",
    &fr_knob_table,
    plan_fr,
    FR_KNOB_GROUPS,
    POL_FORM_PLAIN,
    0,
    NULL,
    memo_post_plan,
};

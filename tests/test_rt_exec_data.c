/* test_rt_exec_data.c — what the runtime executor (runtime/rt_exec.h) hands the kernels and
 * moves, without a GPU, on the fake device of tests/rt_exec_util.h: the real-kernel hook's
 * operands through MEMO's rounding buffers, token-wise partial replays (alpha inside (0, 1)),
 * DHA and host-optimizer plans (lower_dha), and the swap checksums (verify_swaps). Runs
 * everywhere. */
#define _POSIX_C_SOURCE 200809L
#include "tests/rt_exec_util.h"

/* ---------------- real-kernel operands through rounding buffers ---------------- */

/* Every H2D copy reads host bytes an earlier D2H copy of the same size wrote (a prefetch
 * brings back what its offload stored, not the scratch area's or another range's bytes). */
static int copies_paired(const fdev *f, int *n_h2d)
{
    int ok = 1;
    *n_h2d = 0;
    for (size_t i = 0; i < f->n_copies; i++) {
        if (f->copies[i].d2h) continue;
        int found = 0;
        for (size_t j = i; j-- > 0 && !found;)
            found = f->copies[j].d2h && f->copies[j].dst == f->copies[i].src &&
                    f->copies[j].bytes == f->copies[i].bytes;
        ok &= found;
        (*n_h2d)++;
    }
    return ok && f->n_copies < 4096;
}

#define HOOK_GROUPS 64

/* A fake real-kernel hook: checks that every operand that is a rounding-buffer member lies
 * at its place in one block per group at a time (the forward block, then the prefetched
 * one), and counts the calls. */
typedef struct hook {
    const lower_rb_map *m;
    long calls, member_ops, bad;
    uint64_t base[HOOK_GROUPS];
    int changes[HOOK_GROUPS];
} hook;

static rt_status hook_compute(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                              const uint64_t *out, ms_error *err)
{
    (void)err;
    (void)stream;
    hook *h = ctx;
    h->calls++;
    int member = 0;
    for (uint32_t k = 0; k < op->n_in + op->n_out; k++) {
        uint64_t id = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
        uint64_t addr = k < op->n_in ? in[k] : out[k - op->n_in];
        lower_rb_place pl;
        if (!addr) h->bad++;
        if (lower_rb_find(h->m, id, &pl, 1) != 1) continue;
        member = 1;
        size_t g = (size_t)pl.pass * 8 + (size_t)pl.layer;
        if (g >= HOOK_GROUPS || addr < pl.offset_bytes) {
            h->bad++;
            continue;
        }
        uint64_t base = addr - pl.offset_bytes;
        if (h->base[g] && h->base[g] != base) h->changes[g]++;
        h->base[g] = base;
    }
    h->member_ops += member;
    return RT_OK;
}

/* The trace's skeletal activations swapped through rounding buffers as memo plans them: the
 * layer input and the attention output whole (alpha 1), the rest recomputed token-wise
 * (alpha 0) into the prefetched block; re-allocations under fresh ids. */
static plan_t *rb_plan(const trace_t *t)
{
    plan_t *p = plan_new("memo", "caching");
    if (!p) abort();
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC || r->u.alloc.cls != TC_ACT_SKEL || r->u.alloc.layer < 0)
            continue;
        const char *n = r->u.alloc.name;
        int whole = strstr(n, ".input") || strstr(n, ".attn_out");
        if (plan_set_tensor(p, r->u.alloc.id, PD_SWAP, whole ? 1.0 : 0.0) != MS_OK) abort();
    }
    if (plan_set_knob(p, "rounding_buffers", "1") || plan_set_knob(p, "memory_plan", "1") ||
        plan_set_knob(p, "tokenwise", "chain"))
        abort();
    plan_sort(p);
    return p;
}

static void test_rb_operands(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,256,4,1024,1000", 512, &mp, &c)) return;
    c.iterations = 2;
    trace_t *t = NULL;
    plan_t *p = NULL;
    schedule_t *s = NULL;
    lower_rb_map *m = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    if (st == MS_OK) p = rb_plan(t);
    if (st == MS_OK) st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
    if (st == MS_OK) st = lower_rb_map_new(t, p, &m, &err);
    TAP_OK(st == MS_OK && lower_rb_map_count(m) > 0, "rounding-buffer plan lowered, %zu members "
           "placed (%s)", lower_rb_map_count(m), st == MS_OK ? "" : err.msg);
    if (st != MS_OK) goto out;

    /* the layout: within each block, the members swapped whole are the offloaded prefix */
    int layout_ok = 1, groups = 0, renamed = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        uint32_t pass;
        int32_t layer;
        uint64_t tid;
        if (a->kind == SA_ALLOC && lower_id_synthetic(a->tensor, &tid) && tid != UINT64_MAX)
            renamed++;
        if (a->kind != SA_COPY_D2H || !lower_id_is_rbuf(a->tensor, &pass, &layer)) continue;
        groups++;
        uint64_t whole = 0, block = 0;
        for (size_t j = 0; j < sched_count(s); j++) {
            const sched_action *b2 = sched_get(s, j);
            if (b2->kind == SA_ALLOC && b2->tensor == a->tensor) block = b2->bytes;
        }
        for (size_t j = 0; j < trace_count(t); j++) {
            const trace_rec *r = trace_get(t, j);
            lower_rb_place pl;
            if (r->type != TR_ALLOC || lower_rb_find(m, r->u.alloc.id, &pl, 1) != 1 ||
                pl.pass != pass || pl.layer != layer)
                continue;
            int w = strstr(r->u.alloc.name, ".input") || strstr(r->u.alloc.name, ".attn_out");
            if (w) whole += pl.bytes;
            layout_ok &= pl.offset_bytes + pl.bytes <= block && pl.bytes == r->u.alloc.bytes;
            layout_ok &= w ? pl.offset_bytes + pl.bytes <= a->bytes : pl.offset_bytes >= a->bytes;
        }
        layout_ok &= whole == a->bytes;
    }
    TAP_OK(layout_ok && groups == 4, "each of %d offloaded blocks holds the members swapped "
           "whole in its copied prefix, the rest after it, all inside the block", groups);

    /* the real-kernel hook finds every operand: members in the forward block, then in the
     * prefetched one; re-allocated tensors under their fresh ids */
    hook h;
    memset(&h, 0, sizeof h);
    h.m = m;
    fdev f;
    fbe b;
    fdev_init(&f);
    fbe_init(&b, 8ULL << 30);
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    o.trace = t;
    o.compute = hook_compute;
    o.compute_ctx = &h;
    o.rb_map = m;
    rt_exec_result r;
    rt_status rs = run(s, &o, &f, &b, &r, &err);
    int changes_ok = 1;
    for (size_t g = 0; g < HOOK_GROUPS; g++) changes_ok &= h.changes[g] <= 1;
    int moved = 0;
    for (size_t g = 0; g < HOOK_GROUPS; g++) moved += h.changes[g];
    TAP_OK(rs == RT_OK && r.outcome == RTX_OK && h.calls == (long)r.kernels && h.bad == 0 &&
           h.member_ops > 0 && renamed > 0,
           "real-kernel hook: every operand resolved (%ld ops, %ld with members, %d "
           "re-allocations under fresh ids; %s)", h.calls, h.member_ops, renamed, r.failure);
    TAP_OK(changes_ok && moved == groups, "members stay at their places in one block per group "
           "and move once, to the prefetched block (%d moves, %d offloaded groups)", moved,
           groups);
    int n_h2d = 0, paired = copies_paired(&f, &n_h2d);
    TAP_OK(paired && n_h2d == groups && r.host_pool_bytes == r.host_peak_bytes,
           "each block's prefetch reads the pinned bytes its offload wrote (%d prefetches; pool "
           "%llu = host peak %llu, no scratch)", n_h2d, (unsigned long long)r.host_pool_bytes,
           (unsigned long long)r.host_peak_bytes);
    TAP_OK(clean(&f, &b), "rounding-buffer run: everything released");
    rt_exec_result_release(&r);

    /* without the map the members have no address */
    memset(&h, 0, sizeof h);
    h.m = m;
    fdev_init(&f);
    fbe_init(&b, 8ULL << 30);
    o.rb_map = NULL;
    rs = run(s, &o, &f, &b, &r, &err);
    TAP_OK(rs != RT_OK && r.outcome == RTX_ERROR && strstr(r.failure, "holds no device block") &&
           strstr(r.failure, "op embed"), "without lowering's map the embedding's output has "
           "no address: %s", r.failure);
    TAP_OK(clean(&f, &b), "and everything is released");
    rt_exec_result_release(&r);
    /* memory_plan without rounding buffers: an offload names the block, its host copy the id
     * of the block the prefetch makes */
    plan_t *q = NULL;
    schedule_t *s2 = NULL;
    st = pol_plan("full-swap", t, &mp->m, NULL, &q, &err);
    if (st == MS_OK) st = plan_set_knob(q, "memory_plan", "1");
    if (st == MS_OK) st = lower_schedule(t, q, &mp->m, NULL, &s2, &err);
    if (st == MS_OK) {
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_opts_default(&o);
        o.trace = t;
        rs = run(s2, &o, &f, &b, &r, &err);
        paired = copies_paired(&f, &n_h2d);
        TAP_OK(rs == RT_OK && r.outcome == RTX_OK && paired && n_h2d > 0 &&
               r.host_pool_bytes == r.host_peak_bytes,
               "full-swap with memory_plan: each prefetch reads what its offload wrote (%d "
               "prefetches; %s)", n_h2d, r.failure);
        rt_exec_result_release(&r);
    } else {
        TAP_OK(0, "full-swap with memory_plan lowered: %s", err.msg);
    }
    sched_free(s2);
    plan_free(q);
out:
    lower_rb_map_free(m);
    sched_free(s);
    plan_free(p);
    trace_free(t);
    machine_profile_free(mp);
}

/* ---------------- token-wise partial replays (MEMO, alpha strictly inside (0, 1)) ------- */

typedef struct rhook {
    const trace_t *t;
    long whole, rows, bad_frac, targets_full, transients_part, bad_part;
    double frac;
} rhook;

static rt_status rhook_compute(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                               const uint64_t *out, ms_error *err)
{
    (void)err;
    (void)stream; (void)op; (void)in; (void)out;
    ((rhook *)ctx)->whole++;
    return RT_OK;
}

/* A replayed op: its outputs that are rounding-buffer members (skeletal: written in place)
 * come full size, the others (the replay's transients) as partial blocks. */
static rt_status rhook_rows(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                            const uint64_t *out, const uint8_t *in_part,
                            const uint8_t *out_part, double frac, ms_error *err)
{
    (void)err;
    (void)stream; (void)in;
    rhook *h = ctx;
    h->rows++;
    if (frac != h->frac) h->bad_frac++;
    /* only the kinds the dispatcher runs on a row range (runtime/model_rt_ops.c) */
    const char *b = strchr(op->name, '.') ? strchr(op->name, '.') + 1 : op->name;
    int known = op->phase == TP_FWD &&
                (op->kind == TK_NORM || op->kind == TK_ACT ||
                 (op->kind == TK_GEMM && strcmp(b, "lm_head")) ||
                 (op->kind == TK_ELEM && (!strcmp(b, "add1") || !strcmp(b, "add2"))));
    if (!known) h->bad_part++;
    for (uint32_t k = 0; k < op->n_out; k++) {
        const trace_tensor *x = trace_find_tensor(h->t, op->out[k]);
        if (!out[k] || !x) h->bad_part++;
        else if (x->cls == TC_ACT_SKEL) out_part[k] ? h->bad_part++ : h->targets_full++;
        else out_part[k] ? h->transients_part++ : h->bad_part++;
    }
    for (uint32_t k = 0; k < op->n_in; k++) {
        const trace_tensor *x = trace_find_tensor(h->t, op->in[k]);
        if (x && x->cls != TC_ACT_TRANS && in_part[k]) h->bad_part++;
    }
    return RT_OK;
}

static int rhook_token_rows(void *ctx, uint64_t id, unsigned *arrays, uint64_t *row_bytes)
{
    const trace_tensor *x = trace_find_tensor(((rhook *)ctx)->t, id);
    const uint64_t T = 256;
    if (!x || (x->cls != TC_ACT_SKEL && x->cls != TC_ACT_TRANS) || strstr(x->name, "attn_lse"))
        return 0;
    *arrays = strstr(x->name, "_stats") ? 2 : 1;
    if (x->bytes % (*arrays * T)) return 0;
    *row_bytes = x->bytes / (*arrays * T);
    return 1;
}

/* Executor options with the row-range hooks on h (reset, replaying frac of the rows). */
static void rhook_opts(rhook *h, const trace_t *t, double frac, const plan_t *p,
                       const lower_rb_map *m, rt_exec_opts *o)
{
    memset(h, 0, sizeof *h);
    h->t = t;
    h->frac = frac;
    rt_exec_opts_default(o);
    o->trace = t;
    o->compute = rhook_compute;
    o->compute_rows = rhook_rows;
    o->token_rows = rhook_token_rows;
    o->plan = p;
    o->compute_ctx = h;
    o->rb_map = m;
}

static plan_t *partial_plan(const trace_t *t, double alpha)
{
    plan_t *p = plan_new("memo", "caching");
    if (!p) abort();
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type != TR_ALLOC || r->u.alloc.cls != TC_ACT_SKEL || r->u.alloc.layer < 0)
            continue;
        const char *n = r->u.alloc.name;
        int whole = strstr(n, ".input") || strstr(n, ".attn_out") || strstr(n, "attn_lse");
        if (plan_set_tensor(p, r->u.alloc.id, PD_SWAP, whole ? 1.0 : alpha) != MS_OK) abort();
    }
    if (plan_set_knob(p, "rounding_buffers", "1") || plan_set_knob(p, "memory_plan", "1") ||
        plan_set_knob(p, "tokenwise", "chain"))
        abort();
    plan_sort(p);
    return p;
}

/* The device bytes each D2H copy of block `blk` must read: every member's first
 * ceil(alpha T) rows of each row array (whole members: all), at its place in the block. */
static int pieces_expected(const trace_t *t, const lower_rb_map *m, const plan_t *p,
                           uint32_t pass, int32_t layer, uint64_t base, const fdev *f,
                           size_t c0, size_t c1)
{
    uint64_t want = 0, got = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        lower_rb_place pl;
        if (r->type != TR_ALLOC || lower_rb_find(m, r->u.alloc.id, &pl, 1) != 1 ||
            pl.pass != pass || pl.layer != layer)
            continue;
        double alpha = 1;
        plan_decision_for(p, pl.tensor, &alpha);
        unsigned k = strstr(r->u.alloc.name, "_stats") ? 2 : 1;
        uint64_t arr = pl.bytes / k, cb = (uint64_t)(alpha * (double)arr);
        for (unsigned j = 0; j < k; j++) {
            uint64_t lo = base + pl.offset_bytes + j * arr, hi = lo + cb;
            want += cb;
            /* the copies of [c0, c1) must cover [lo, hi) */
            uint64_t cov = 0;
            for (size_t c = c0; c < c1; c++) {
                uint64_t a = f->copies[c].src, b = a + f->copies[c].bytes;
                uint64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
                if (y > x) cov += y - x;
            }
            if (cov != cb) return 0;
        }
    }
    for (size_t c = c0; c < c1; c++) got += f->copies[c].bytes;
    return got == want;
}

static void test_partial_replay(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    /* the shape tests/test_rt_partial runs on the GPU: T = 128 x 2 token rows */
    if (!small_workload("dims:2,128,2,512,512", 128, &mp, &c)) return;
    c.micro_batch = 2;
    c.iterations = 2;
    c.grad_bytes = 4;
    c.save_small = 1;
    trace_t *t = NULL;
    ms_status st = gen_trace(&c, &mp->m, &t, &err);
    TAP_OK(st == MS_OK, "partial replay: trace generated (%s)", st == MS_OK ? "" : err.msg);
    if (st != MS_OK) {
        machine_profile_free(mp);
        return;
    }
    const double alphas[3] = { 0.5, 0.75, 0.875 };
    for (int ai = 0; ai < 3; ai++) {
        plan_t *p = partial_plan(t, alphas[ai]);
        schedule_t *s = NULL;
        lower_rb_map *m = NULL;
        st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
        if (st == MS_OK) st = lower_rb_map_new(t, p, &m, &err);
        size_t n_partial = 0, bad_frac = 0;
        for (size_t i = 0; st == MS_OK && i < sched_count(s); i++) {
            const sched_action *a = sched_get(s, i);
            if (a->kind != SA_COMPUTE || a->replay_frac == 0) continue;
            n_partial++;
            bad_frac += !a->recompute || fabs(a->replay_frac - (1 - alphas[ai])) > 1e-12;
        }
        TAP_OK(st == MS_OK && n_partial > 0 && bad_frac == 0, "alpha %g: lowered, %zu compute actions carry "
               "replay_frac %g (%s)", alphas[ai], n_partial, 1 - alphas[ai],
               st == MS_OK ? "" : err.msg);
        if (st != MS_OK) goto next;
        rhook h;
        rt_exec_opts o;
        rhook_opts(&h, t, 1 - alphas[ai], p, m, &o);
        fdev f;
        fbe b;
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_result r;
        rt_status rs = run(s, &o, &f, &b, &r, &err);
        TAP_OK(rs == RT_OK && r.outcome == RTX_OK && h.rows == (long)n_partial &&
               h.bad_frac == 0 && h.bad_part == 0 && h.targets_full > 0 && h.transients_part > 0,
               "alpha %g: every replayed op runs on the row range (%ld of %ld ops; in-place "
               "targets full size %ld, partial transients %ld, wrong %ld; %s)", alphas[ai],
               h.rows, h.rows + h.whole, h.targets_full, h.transients_part, h.bad_part,
               r.failure);
        /* each offload reads each member's leading rows per array; its prefetch writes the
         * same pieces back from the same host bytes */
        int ok = 1, blocks = 0;
        for (size_t i = 0; i < f.n_copies; i++) {
            if (!f.copies[i].d2h) continue;
            /* one block's offload: the shortest run of D2H pieces from i that is exactly some
             * group's expected pieces (consecutive offloads follow each other directly) */
            size_t j = i + 1;
            uint64_t host0 = f.copies[i].dst, dev0 = f.copies[i].src;
            int found = 0;
            for (; !found && j <= f.n_copies && f.copies[j - 1].d2h; j++)
                for (size_t q = 0; q < trace_count(t) && !found; q++) {
                    const trace_rec *rr = trace_get(t, q);
                    lower_rb_place pl;
                    if (rr->type != TR_ALLOC || lower_rb_find(m, rr->u.alloc.id, &pl, 1) != 1 ||
                        pl.offset_bytes != 0)
                        continue;
                    found = pieces_expected(t, m, p, pl.pass, pl.layer, dev0, &f, i, j);
                }
            j--;
            blocks++;
            ok &= found;
            /* the H2D pieces reading this host range mirror the D2H ones */
            size_t n_back = 0;
            for (size_t q = j; q < f.n_copies && !(q > j && f.copies[q].d2h &&
                                                     f.copies[q].dst == host0); q++)
                if (!f.copies[q].d2h && f.copies[q].src >= host0 &&
                    f.copies[q].src < host0 + (f.copies[j - 1].dst + f.copies[j - 1].bytes - host0))
                    for (size_t u = i; u < j; u++)
                        n_back += f.copies[u].dst == f.copies[q].src &&
                                  f.copies[u].bytes == f.copies[q].bytes;
            ok &= n_back == j - i;
            if (!ok) TAP_NOTE("block at copy %zu: found %d, %zu pieces, %zu back", i, found, j - i, n_back);
            i = j - 1;
        }
        TAP_OK(ok && blocks > 0, "alpha %g: %d offloads move each member's leading rows of "
               "each row array (norm statistics: 2 arrays), the prefetches put the same pieces "
               "back", alphas[ai], blocks);
        TAP_OK(clean(&f, &b), "alpha %g: everything released", alphas[ai]);
        rt_exec_result_release(&r);
        /* without the row-range hook the run stops with the reason */
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        o.compute_rows = NULL;
        rs = run(s, &o, &f, &b, &r, &err);
        TAP_OK(rs != RT_OK && r.outcome == RTX_ERROR && strstr(r.failure, "token-wise") &&
               clean(&f, &b), "alpha %g: without a row-range hook: %s", alphas[ai], r.failure);
        rt_exec_result_release(&r);
    next:
        lower_rb_map_free(m);
        sched_free(s);
        plan_free(p);
    }
    /* an alpha that is not a whole number of rows (0.3 of 256) stops at the first offload */
    {
        plan_t *p = partial_plan(t, 0.3);
        schedule_t *s = NULL;
        lower_rb_map *m = NULL;
        st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
        if (st == MS_OK) st = lower_rb_map_new(t, p, &m, &err);
        rhook h;
        rt_exec_opts o;
        rhook_opts(&h, t, 0.7, p, m, &o);
        fdev f;
        fbe b;
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_result r;
        rt_status rs = st == MS_OK ? run(s, &o, &f, &b, &r, &err) : RT_ERR_INVALID;
        TAP_OK(st == MS_OK && rs != RT_OK && r.outcome == RTX_ERROR &&
               strstr(r.failure, "whole number") && clean(&f, &b),
               "alpha 0.3 of 256 rows: %s", st == MS_OK ? r.failure : err.msg);
        if (st == MS_OK) rt_exec_result_release(&r);
        lower_rb_map_free(m);
        sched_free(s);
        plan_free(p);
    }
    trace_free(t);
    machine_profile_free(mp);
}

/* ---------------- DHA and host-optimizer plans (lower_dha) ---------------- */

typedef struct dhook {
    const trace_t *t;
    uint64_t host_lo;             /* fake pinned addresses are at or above this */
    long calls, inits, bad_init, steps, bad_step, prepared;
    int emb_host, l0fwd_host, l0bwd_w_dev, l0bwd_g_host, l1_dev, l1_g_dev, head_host;
    int fail_prepare;
    int64_t seq[64];              /* the ops of the host steps, in the order they ran */
} dhook;

static int is_host(const dhook *h, uint64_t a) { return a >= h->host_lo; }

/* Records where the executor put the operands of a few ops of the mixed plan below. */
static rt_status dh_compute(void *ctx, void *stream, const trace_op *op, const uint64_t *in,
                            const uint64_t *out, ms_error *err)
{
    (void)err;
    (void)stream;
    dhook *h = ctx;
    h->calls++;
    if (!strcmp(op->name, "embed")) h->emb_host += is_host(h, in[1]);
    if (!strcmp(op->name, "L0.qkv")) h->l0fwd_host += is_host(h, in[1]);
    if (!strcmp(op->name, "L0.qkv.bwd")) {
        h->l0bwd_w_dev += !is_host(h, in[3]);
        h->l0bwd_g_host += is_host(h, out[1]);
    }
    if (!strcmp(op->name, "L1.fc1")) h->l1_dev += !is_host(h, in[1]);
    if (!strcmp(op->name, "L1.fc1.bwd")) h->l1_g_dev += !is_host(h, out[1]);
    if (!strcmp(op->name, "lm_head")) h->head_host += is_host(h, in[1]);
    return RT_OK;
}

static rt_status dh_init(void *ctx, void *stream, uint64_t tensor, uint64_t dev, uint64_t bytes,
                         ms_error *err)
{
    (void)err;
    (void)stream;
    dhook *h = ctx;
    const trace_tensor *x = trace_find_tensor(h->t, tensor);
    h->inits++;
    h->bad_init += !x || x->bytes > bytes || !is_host(h, dev);
    return RT_OK;
}

static int dh_prepare(void *ctx, const trace_op *op, uint64_t *ids, size_t max, int64_t *tag,
                      ms_error *err)
{
    dhook *h = ctx;
    if (h->fail_prepare) {
        rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, "test", "no host math here");
        return -1;
    }
    /* the group's gradient buffer and parameters, from the trace's copies */
    char g[96];
    size_t n = strlen(op->name) - strlen(".optim.host");
    snprintf(g, sizeof g, "%.*s.grad.d2h", (int)n, op->name);
    size_t k = 0;
    for (size_t i = 0; i < trace_count(h->t) && !k; i++) {
        const trace_rec *r = trace_get(h->t, i);
        if (r->type == TR_OP && !strcmp(r->u.op.name, g) && r->u.op.n_in == 1 && max > 0)
            ids[k++] = r->u.op.in[0];
    }
    ids[k++] = dha_synth_id(0);
    *tag = (int64_t)op->layer + 1;
    h->prepared++;
    return (int)k;
}

static rt_status dh_step(void *ctx, const trace_op *op, int64_t tag, const uint64_t *addr,
                         const uint64_t *bytes, size_t n, ms_error *err)
{
    (void)err;
    dhook *h = ctx;
    h->steps++;
    h->bad_step += n != 2 || tag != (int64_t)op->layer + 1 || !bytes[0] || !bytes[1];
    for (size_t k = 0; k < n; k++) h->bad_step += !is_host(h, addr[k]);
    if (h->steps <= 64) h->seq[h->steps - 1] = (int64_t)op->id;
    return RT_OK;
}

static void test_dha(void)
{
    machine_profile *mp;
    ms_error err;
    gen_config c;
    if (!small_workload("dims:2,128,2,512,512", 128, &mp, &c)) return;
    c.micro_batch = 2;
    c.iterations = 3;
    c.grad_bytes = 4;
    c.save_small = 1;
    c.offload = 1;
    trace_t *t = NULL;
    schedule_t *s = NULL;
    plan_t *p = plan_new("manual", "caching");
    ms_status st = p ? gen_trace(&c, &mp->m, &t, &err) : MS_ERR_NOMEM;
    if (st == MS_OK && (plan_set_lowering(p, "dha") || plan_set_knob(p, "host_params", "1") ||
                        plan_set_layer(p, -1, PM_DHA, 0) || plan_set_layer(p, 0, PM_DFGB, 1) ||
                        plan_set_layer(p, 1, PM_GFGB, 0) || plan_set_layer(p, 2, PM_DHA, 1)))
        st = MS_ERR_NOMEM;
    if (st == MS_OK) {
        plan_sort(p);
        st = lower_schedule(t, p, &mp->m, NULL, &s, &err);
    }
    TAP_OK(st == MS_OK, "offload trace (the shape of test_rt_dha) lowered under a plan with "
           "DHA, DFGB and GFGB units, gradients on the GPU and on the host (%s)",
           st == MS_OK ? "" : err.msg);
    if (st != MS_OK) goto out;
    size_t n_host = 0, n_homes = 0, n_ops = 0;
    int64_t want[64];
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        const trace_tensor *x = trace_find_tensor(t, a->tensor);
        if (a->kind == SA_HOST_COMPUTE && n_host < 64) want[n_host] = a->op;
        n_host += a->kind == SA_HOST_COMPUTE;
        n_ops += a->kind == SA_COMPUTE && a->op >= 0;
        n_homes += a->kind == SA_HOST_ALLOC && x;
    }
    for (int neg = 0; neg < 2; neg++) {
        dhook h;
        memset(&h, 0, sizeof h);
        h.t = t;
        h.host_lo = 1ULL << 44;
        h.fail_prepare = neg;
        fdev f;
        fbe b;
        fdev_init(&f);
        fbe_init(&b, 8ULL << 30);
        rt_exec_opts o;
        rt_exec_opts_default(&o);
        o.trace = t;
        o.compute = dh_compute;
        o.host_init = dh_init;
        o.host_prepare = dh_prepare;
        o.host_compute = dh_step;
        o.compute_ctx = &h;
        rt_exec_result r;
        rt_status rs = run(s, &o, &f, &b, &r, &err);
        if (neg) {
            TAP_OK(rs != RT_OK && r.outcome == RTX_ERROR && strstr(r.failure, "optim.host") &&
                   strstr(r.failure, "no host math here") && clean(&f, &b),
                   "a host step the hook refuses stops the run naming the op and why, "
                   "everything released (%s)", r.failure);
        } else {
            TAP_OK(rs == RT_OK && r.outcome == RTX_OK && h.calls == (long)n_ops &&
                   r.host_operands > 0, "DHA plan through the real-kernel hook: %ld ops, %llu "
                   "operands in pinned host memory (%s)", h.calls,
                   (unsigned long long)r.host_operands, r.failure);
            TAP_OK(h.emb_host == 3 && h.l0fwd_host == 3 && h.head_host == 3,
                   "DHA reads: the embedding lookup, layer 0's forward (DFGB) and the head get "
                   "their weights in pinned host memory in each of 3 iterations (%d %d %d)",
                   h.emb_host, h.l0fwd_host, h.head_host);
            TAP_OK(h.l0bwd_w_dev == 3 && h.l1_dev == 3 && h.l1_g_dev == 3 && h.l0bwd_g_host == 3,
                   "GPU copies: layer 0's backward (DFGB) and layer 1 (GFGB) read device "
                   "weights; layer 0's gradient (grad=host) goes to host memory, layer 1's "
                   "(grad=gpu) to the device (%d %d %d %d)", h.l0bwd_w_dev, h.l1_dev,
                   h.l1_g_dev, h.l0bwd_g_host);
            TAP_OK(h.inits == (long)n_homes && r.host_inits == n_homes && h.bad_init == 0,
                   "host_init once per host home of a trace tensor, at a mapped address, "
                   "with its bytes (%ld of %zu)", h.inits, n_homes);
            int order = n_host <= 64 && !memcmp(want, h.seq, n_host * sizeof *want);
            TAP_OK(h.steps == (long)n_host && r.host_steps == n_host && n_host == 12 &&
                   h.bad_step == 0 && order,
                   "every host AdamW step (%ld of %zu: 4 groups x 3 iterations) ran through "
                   "host_compute with its pinned ranges, in the schedule's order (bad %ld, order %d)",
                   h.steps, n_host, h.bad_step, order);
            TAP_OK(clean(&f, &b), "everything released");
        }
        rt_exec_result_release(&r);
    }
out:
    sched_free(s);
    plan_free(p);
    trace_free(t);
    machine_profile_free(mp);
}

/* ---------------- swap checksums (verify_swaps) ---------------- */

/* The fake device with the checksum entries and its model of the bytes. */
static void fdev_sums_on(fdev *f, long corrupt_d2h)
{
    static u64map *dv, *hv;
    if (!dv) dv = u64map_new(256);
    if (!hv) hv = u64map_new(256);
    if (!dv || !hv) abort();
    u64map_clear(dv);
    u64map_clear(hv);
    f->dval = dv;
    f->hval = hv;
    f->corrupt_d2h = corrupt_d2h;
    f->ops.sum_begin = f_sum_begin;
    f->ops.sum_add = f_sum_add;
    f->ops.sum_read = f_sum_read;
    f->ops.sum_end = f_sum_end;
}

static void test_verify_swaps(void)
{
    ms_error err;
    ms_error_clear(&err);
    /* the host reference: pieces add up, position matters, one changed byte shows */
    unsigned char buf[100];
    for (int k = 0; k < 100; k++) buf[k] = (unsigned char)(k * 37 + 11);
    uint64_t whole = rt_checksum(buf, 100, 0);
    TAP_OK(rt_checksum(buf, 13, 0) + rt_checksum(buf + 13, 51, 13) + rt_checksum(buf + 64, 36, 64)
           == whole, "rt_checksum: pieces at their positions add up to the whole (0x%016llx)",
           (unsigned long long)whole);
    uint64_t at8 = rt_checksum(buf, 100, 8);
    buf[57] ^= 0x80;
    TAP_OK(at8 != whole && rt_checksum(buf, 100, 0) != whole, "rt_checksum: another position "
           "or one flipped bit gives another sum");
    buf[57] ^= 0x80;

    schedule_t *s = swap_schedule(2);
    fdev f;
    fbe b;
    rt_exec_opts o;
    rt_exec_result r;
    fdev_init(&f);
    fdev_sums_on(&f, 0);
    fbe_init(&b, 1ULL << 34);
    rt_exec_opts_default(&o);
    o.verify_swaps = 1;
    rt_status st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.swap_sums == 4 && r.swap_verified == 2 &&
           r.swap_mismatches == 0 && r.swap_unpaired == 0 && f.sum_calls == 4,
           "verify_swaps: 4 copies checksummed, both prefetches match their offloads (sums %llu "
           "verified %llu mismatches %llu unpaired %llu; %s)", (unsigned long long)r.swap_sums,
           (unsigned long long)r.swap_verified, (unsigned long long)r.swap_mismatches,
           (unsigned long long)r.swap_unpaired, r.failure);
    TAP_OK(clean(&f, &b) && f.sums_live == 0, "verify_swaps: the sums are released too");
    rt_exec_result_release(&r);

    /* the second offload's pinned bytes change before its prefetch reads them */
    fdev_init(&f);
    fdev_sums_on(&f, 2);
    fbe_init(&b, 1ULL << 34);
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_ERR_CUDA && r.outcome == RTX_ERROR && r.swap_mismatches == 1 &&
           r.swap_verified == 1 && strstr(r.failure, "came back different") &&
           strstr(r.failure, "tensor 10 ") && strstr(r.failure, "action 26 ") &&
           strstr(r.failure, "action 34 ") && strstr(r.failure, "checksum 0x"),
           "corrupted host bytes: the prefetch's sum differs: %s", r.failure);
    TAP_OK(clean(&f, &b) && f.sums_live == 0 && r.iter_time_s == 0,
           "after the mismatch everything is released");
    rt_exec_result_release(&r);

    /* a device without the checksum entries refuses the option */
    fdev_init(&f);
    fbe_init(&b, 1ULL << 34);
    st = run(s, &o, &f, &b, &r, &err);
    TAP_OK(st == RT_ERR_INVALID && r.outcome == RTX_ERROR &&
           strstr(r.failure, "cannot checksum") && clean(&f, &b),
           "verify_swaps without device support: %s", r.failure);
    rt_exec_result_release(&r);
    sched_free(s);

    /* generated plans: memo's gathered row pieces (alpha 0.75) and full-swap */
    machine_profile *mp;
    gen_config c;
    if (!small_workload("dims:2,128,2,512,512", 128, &mp, &c)) return;
    c.micro_batch = 2;
    c.iterations = 2;
    c.grad_bytes = 4;
    c.save_small = 1;
    trace_t *t = NULL;
    ms_status ms = gen_trace(&c, &mp->m, &t, &err);
    for (int k = 0; ms == MS_OK && k < 2; k++) {
        plan_t *p = NULL;
        if (k == 0) p = partial_plan(t, 0.75);
        else if (pol_plan("full-swap", t, &mp->m, NULL, &p, &err) != MS_OK) p = NULL;
        schedule_t *gs = NULL;
        lower_rb_map *m = NULL;
        ms_status ls = p ? lower_schedule(t, p, &mp->m, NULL, &gs, &err) : MS_ERR_INVALID;
        if (ls == MS_OK) ls = lower_rb_map_new(t, p, &m, &err);
        if (ls != MS_OK) {
            TAP_OK(0, "verify_swaps: plan %d lowered: %s", k, err.msg);
        } else {
            rhook h;
            rhook_opts(&h, t, 0.25, p, m, &o);
            fdev_init(&f);
            fdev_sums_on(&f, 0);
            fbe_init(&b, 8ULL << 30);
            o.verify_swaps = 1;
            st = run(gs, &o, &f, &b, &r, &err);
            size_t n_h2d = 0;
            for (size_t i = 0; i < sched_count(gs); i++)
                n_h2d += sched_get(gs, i)->kind == SA_COPY_H2D && sched_get(gs, i)->bytes;
            TAP_OK(st == RT_OK && r.outcome == RTX_OK && r.swap_mismatches == 0 &&
                   r.swap_verified == n_h2d && n_h2d > 0 &&
                   (k == 0 ? f.sum_calls > (long)r.swap_sums : f.sum_calls == (long)r.swap_sums),
                   "verify_swaps %s: every one of %zu prefetches matches its offload (verified "
                   "%llu, unpaired %llu, %ld pieces summed in %llu copies; %s)",
                   k ? "full-swap" : "memo alpha 0.75", n_h2d,
                   (unsigned long long)r.swap_verified, (unsigned long long)r.swap_unpaired,
                   f.sum_calls, (unsigned long long)r.swap_sums, r.failure);
            TAP_OK(clean(&f, &b) && f.sums_live == 0, "verify_swaps %s: everything released",
                   k ? "full-swap" : "memo");
            rt_exec_result_release(&r);
        }
        lower_rb_map_free(m);
        sched_free(gs);
        plan_free(p);
    }
    TAP_OK(ms == MS_OK, "verify_swaps: trace generated");
    trace_free(t);
    machine_profile_free(mp);
}

int main(void)
{
    test_rb_operands();
    test_partial_replay();
    test_dha();
    test_verify_swaps();
    return tap_done();
}

/* rt_exec_ops.c — the schedule executor's data actions, as the issue loop (rt_exec.c) hands
 * them over: copies (with the gathered pieces of partially swapped tensors and their
 * checksums), compute actions (calibrated spin kernels or the real-kernel hook) and real
 * host steps on the device's host thread. Plain C over rt_dev_ops. Used by rt_exec.c only. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_exec_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- copies of partially swapped tensors (real kernels) ---- */

/* ceil(frac * bytes), as lowering sizes a replay's transients and swapped bytes (planners/lower.c). */
static uint64_t frac_bytes(uint64_t bytes, double frac)
{
    if (frac >= 1.0) return bytes;
    double b = ceil(frac * (double)bytes);
    return b >= (double)bytes ? bytes : (uint64_t)b;
}


typedef struct cmember {
    uint64_t tensor, off, bytes;
} cmember;

static int cmp_cmember(const void *a, const void *b)
{
    const cmember *p = (const cmember *)a, *q = (const cmember *)b;
    return p->off < q->off ? -1 : p->off > q->off;
}

/* The trace tensors a copied block holds, in layout order: a rounding-buffer block's members
 * (lower_rb_find over the trace's skeletal activations of its layer), else the tensor itself
 * when the block's id is a trace id. Returns how many (at most max), 0 for none known. */
static size_t copy_members(ex *x, uint64_t block, cmember *m, size_t max)
{
    uint32_t pass;
    int32_t layer;
    size_t n = 0;
    if (!lower_id_is_rbuf(block, &pass, &layer)) {
        const trace_tensor *t = trace_find_tensor(x->o.trace, block);
        if (!t || max < 1) return 0;
        m[0].tensor = block;
        m[0].off = 0;
        m[0].bytes = t->bytes;
        return 1;
    }
    for (size_t r = 0; r < trace_count(x->o.trace); r++) {
        const trace_rec *rec = trace_get(x->o.trace, r);
        if (rec->type != TR_ALLOC || rec->u.alloc.layer != layer ||
            rec->u.alloc.cls != TC_ACT_SKEL)
            continue;
        lower_rb_place pl[4];
        size_t k = lower_rb_find(x->o.rb_map, rec->u.alloc.id, pl, 4);
        for (size_t j = 0; j < k && j < 4; j++) {
            if (pl[j].pass != pass || pl[j].layer != layer) continue;
            int dup = 0;
            for (size_t q = 0; q < n; q++) dup |= m[q].tensor == pl[j].tensor;
            if (dup) continue;
            if (n == max) return max + 1;
            m[n].tensor = pl[j].tensor;
            m[n].off = pl[j].offset_bytes;
            m[n].bytes = pl[j].bytes;
            n++;
        }
    }
    qsort(m, n, sizeof *m, cmp_cmember);
    return n;
}

/* One piece of a gathered copy; adjacent pieces are merged into one cudaMemcpyAsync. */
typedef struct cpiece {
    uint64_t dev, host, bytes;
} cpiece;

static rt_status piece_add(cpiece *p, size_t *n, size_t max, uint64_t dev, uint64_t host,
                           uint64_t bytes, ms_error *err)
{
    (void)err; /* the signature its callers share */
    if (!bytes) return RT_OK;
    if (*n && p[*n - 1].dev + p[*n - 1].bytes == dev && p[*n - 1].host + p[*n - 1].bytes == host) {
        p[*n - 1].bytes += bytes;
        return RT_OK;
    }
    if (*n == max) return RT_ERR_INVALID;
    p[*n].dev = dev;
    p[*n].host = host;
    p[*n].bytes = bytes;
    (*n)++;
    return RT_OK;
}

/* With real kernels a copy of a block that holds partially swapped tensors moves, of each
 * tensor, the first ceil(alpha * T) rows of each of its row arrays (members swapped whole:
 * all their bytes), packed on the host in the block's layout order; the prefetch puts them
 * back where they were. The rows a token-wise replay does not recompute are then exactly the
 * ones that came back. The schedule's byte count must be the sum (lowering's copy bytes), and
 * each tensor's share a whole number of rows, else the run stops: computing on rows that are
 * neither copied nor recomputed would be silently wrong. *n = 0: a plain copy will do. */
#define RT_MAX_PIECES 256
static rt_status copy_plan(ex *x, size_t i, const sched_action *a, uint64_t dev,
                           uint64_t host, cpiece *p, size_t *n, ms_error *err)
{
    *n = 0;
    if (!x->o.compute || !x->o.plan || !x->o.token_rows || !x->o.trace) return RT_OK;
    cmember m[64];
    size_t nm = copy_members(x, a->tensor, m, 64);
    if (nm == 0) return RT_OK;
    if (nm > 64)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: block %llu holds more "
                        "than 64 tensors", i, (unsigned long long)a->tensor);
    int partial = 0;
    uint64_t sum = 0, hoff = 0;
    for (size_t k = 0; k < nm; k++) {
        double alpha = 1;
        plan_decision dec = plan_decision_for(x->o.plan, m[k].tensor, &alpha);
        uint64_t cb = dec == PD_SWAP ? frac_bytes(m[k].bytes, alpha) : m[k].bytes;
        if (dec == PD_SWAP && cb < m[k].bytes) partial = 1;
        sum += cb;
    }
    if (!partial) return RT_OK;
    if (sum != a->bytes)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: copy of block %llu: "
                        "%llu bytes, its tensors' swapped rows are %llu bytes", i,
                        (unsigned long long)a->tensor, (unsigned long long)a->bytes,
                        (unsigned long long)sum);
    for (size_t k = 0; k < nm; k++) {
        double alpha = 1;
        plan_decision dec = plan_decision_for(x->o.plan, m[k].tensor, &alpha);
        uint64_t cb = dec == PD_SWAP ? frac_bytes(m[k].bytes, alpha) : m[k].bytes;
        rt_status st = RT_OK;
        if (cb == m[k].bytes) {
            st = piece_add(p, n, RT_MAX_PIECES, dev + m[k].off, host + hoff, cb, err);
        } else {
            unsigned arrays = 0;
            uint64_t rowb = 0;
            char tn[48];
            if (!x->o.token_rows(x->o.compute_ctx, m[k].tensor, &arrays, &rowb) || !arrays ||
                !rowb || m[k].bytes % arrays || cb % arrays || (cb / arrays) % rowb)
                return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: tensor %llu "
                                "'%s' is swapped with alpha %g, which is not a whole number of its "
                                "token rows (or its bytes are not token rows)", i,
                                (unsigned long long)m[k].tensor,
                                rtx_tname(x, m[k].tensor, tn, sizeof tn),
                                alpha);
            uint64_t arr = m[k].bytes / arrays, piece = cb / arrays;
            for (unsigned j = 0; j < arrays && st == RT_OK; j++)
                st = piece_add(p, n, RT_MAX_PIECES, dev + m[k].off + j * arr,
                               host + hoff + j * piece, piece, err);
        }
        if (st != RT_OK)
            return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: copy of block %llu "
                            "in more than %d pieces", i, (unsigned long long)a->tensor,
                            RT_MAX_PIECES);
        hoff += cb;
    }
    return RT_OK;
}

/* verify_swaps: the checksum of a copy's device pieces into its slot, each piece at its
 * position in the copied stream (its offset in the pinned range), so that an offload and the
 * prefetch of the same bytes give the same sum whatever the device addresses. */
static rt_status sum_pieces(ex *x, size_t i, size_t slot, void *s, const cpiece *pc,
                            size_t np, uint64_t host, ms_error *err)
{
    for (size_t k = 0; k < np; k++)
        if (x->d->sum_add(x->d->ctx, s, slot, pc[k].dev, pc[k].bytes, pc[k].host - host, err) !=
            RT_OK)
            return rtx_fail_dev(x, i, "checksumming a copy", err);
    x->cp[slot].summed = 1;
    x->r->swap_sums++;
    return RT_OK;
}

rt_status rtx_do_copy(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    dlive *d = rtx_dev_live(x, a->tensor);
    if (!d)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: copy of tensor %llu, "
                        "which holds no device block", i, (unsigned long long)a->tensor);
    hlive *h = rtx_host_live(x, a->tensor);
    int d2h = a->kind == SA_COPY_D2H;
    if (!h && d2h) h = rtx_host_live(x, lower_id_host_copy(a->tensor)); /* as the pool plan */
    if (!h && !d2h)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: H2D copy of tensor "
                        "%llu, which has no host copy", i, (unsigned long long)a->tensor);
    uint64_t host = x->pool + (h ? h->off : x->hp.scratch_off);
    d->users |= 1u << a->stream;
    if (h) h->users |= 1u << a->stream;
    if (!a->bytes || !d->addr) return RT_OK;
    size_t ci = x->used_cp++;
    tev *t = &x->cp[ci];
    t->action = i;
    t->win = x->cur_win;
    t->bytes = a->bytes;
    t->d2h = d2h;
    t->tensor = a->tensor;
    void *s = x->st[a->stream];
    cpiece pc[RT_MAX_PIECES];
    size_t np = 0;
    RT_TRY(copy_plan(x, i, a, d->addr, host, pc, &np, err));
    if (!np) pc[np++] = (cpiece){ d->addr, host, a->bytes };
    /* verify_swaps: the device bytes an offload reads, summed on its stream just before */
    if (x->sums_on && d2h) RT_TRY(sum_pieces(x, i, ci, s, pc, np, host, err));
    if (x->d->record(x->d->ctx, t->e0, s, err) != RT_OK)
        return rtx_fail_dev(x, i, "recording", err);
    for (size_t k = 0; k < np; k++)
        if (x->d->copy(x->d->ctx, s, d2h ? pc[k].host : pc[k].dev, d2h ? pc[k].dev : pc[k].host,
                       pc[k].bytes, d2h, err) != RT_OK)
            return rtx_fail_dev(x, i, d2h ? "device-to-host copy" : "host-to-device copy", err);
    if (x->d->record(x->d->ctx, t->e1, s, err) != RT_OK)
        return rtx_fail_dev(x, i, "recording", err);
    /* ... and the bytes a prefetch wrote, just after (before the schedule's next record) */
    if (x->sums_on && !d2h) RT_TRY(sum_pieces(x, i, ci, s, pc, np, host, err));
    if (x->sums_on && h) {
        if (d2h) {
            h->last_d2h = ci + 1;
        } else if (h->last_d2h) {
            t->pair = h->last_d2h;
            x->cp[h->last_d2h - 1].read_back = 1;
        }
    }
    rt_window *w = &x->r->win[x->cur_win];
    w->n_copies++;
    if (d2h) w->d2h_bytes += a->bytes;
    else w->h2d_bytes += a->bytes;
    x->r->copies++;
    return RT_OK;
}

/* max_ahead: marks the end of this compute action and waits while more than max_ahead
 * compute actions are issued but not done. */
static rt_status hold_back(ex *x, size_t i, void *s, ms_error *err)
{
    size_t cap = (size_t)x->o.max_ahead + 1;
    void *e = rtx_pool_get(x, err);
    if (!e) return rtx_fail_dev(x, i, "creating an event", err);
    if (x->d->record(x->d->ctx, e, s, err) != RT_OK) return rtx_fail_dev(x, i, "recording", err);
    x->ahead[(x->ahead_head + x->ahead_n++) % cap] = e;
    while (x->ahead_n > (size_t)x->o.max_ahead) {
        void *old = x->ahead[x->ahead_head];
        RT_TRY(rtx_wait_ev(x, old, "a compute action (max_ahead)", err));
        x->ahead_head = (x->ahead_head + 1) % cap;
        x->ahead_n--;
        rtx_pool_put(x, old);
        x->r->ahead_waits++;
    }
    return RT_OK;
}

/* Kernel time after the credit: an op shorter than the shortest kernel runs that long, and
 * what it ran over is taken off the next ops. */
static double credited(ex *x, double req)
{
    if (!x->o.spin_credit) return req;
    double want = req - x->debt_us;
    double run = want > x->empty_us ? want : x->empty_us;
    x->debt_us += run - req;
    return run;
}

/* The device address of trace tensor id for the real-kernel hook: its own block, else the
 * block of its latest re-allocation (memory_plan gives those fresh ids), else its slice of a
 * rounding-buffer block (lower_rb_find; the forward block or the prefetched one, whichever is
 * live). In a token-wise replay (0 < frac < 1) a block smaller than the tensor but of the
 * replay's size holds only the replayed rows (*part = 1). With host set (outputs), a
 * gradient whose block is smaller than it and whose pinned home holds all of it is split by
 * module (lower_dha's grad_host knobs): the block, *part = 3, *host = the home's mapped
 * address. 0 when none holds it; *why says why. */
static uint64_t resolve(ex *x, uint64_t id, double frac, uint8_t *part, const char **why,
                        uint64_t *host)
{
    const trace_tensor *t = trace_find_tensor(x->o.trace, id);
    uint64_t need = t ? t->bytes : 0, sid;
    *part = 0;
    *why = "holds no device block (its own, a re-allocation's or a rounding buffer's)";
    const dlive *d = rtx_dev_live(x, id);
    if ((!d || !d->addr) && x->alias && u64map_get(x->alias, id, &sid)) d = rtx_dev_live(x, sid);
    if (d && d->addr) {
        if (d->bytes >= need) return d->addr;
        if (frac > 0 && frac < 1 && d->bytes >= frac_bytes(need, frac)) {
            *part = 1;
            return d->addr;
        }
        /* A gradient buffer split by module: its GPU modules here, the rest at home. */
        hlive *h = host && !(frac > 0 && frac < 1) ? rtx_host_live(x, id) : NULL;
        if (h && h->req >= need && t && t->cls == TC_GRAD) {
            *part = 3;
            *host = x->pool_dev + h->off;
            h->last_d2h = 0;
            return d->addr;
        }
        *why = frac > 0 && frac < 1 ? "has a block smaller than the replayed fraction of the "
               "tensor" : "has a block smaller than the tensor outside a token-wise replay";
        return 0;
    }
    /* DHA: no device block, but a pinned host home under its own id (lower_dha: a parameter
     * read over the link, a gradient written to the host): the kernel gets the mapped
     * address of that range. Not in token-wise replays (those operands are activations). */
    hlive *h = rtx_host_live(x, id);
    if (h && !(frac > 0 && frac < 1)) {
        if (h->req >= need) {
            *part = 2;
            h->last_d2h = 0; /* a kernel may write it: a later prefetch is not a swap back */
            return x->pool_dev + h->off;
        }
        *why = "has a pinned host range smaller than the tensor";
        return 0;
    }
    lower_rb_place pl[4];
    size_t n = lower_rb_find(x->o.rb_map, id, pl, 4);
    for (size_t k = 0; k < n && k < 4; k++)
        for (unsigned b = 0; b < 2; b++) {
            d = rtx_dev_live(x, lower_id_rbuf(pl[k].pass, pl[k].layer, b));
            if (!d || !d->addr) continue;
            if (pl[k].offset_bytes + pl[k].bytes <= d->bytes) return d->addr + pl[k].offset_bytes;
            *why = "lies beyond its rounding-buffer block";
        }
    return 0;
}

/* The operands' device addresses; host (NULL for inputs) gets the host homes of split
 * gradient buffers (0 for the others). */
static rt_status op_addrs(ex *x, size_t i, const trace_op *op, const uint64_t *ids, uint32_t n,
                          double frac, uint64_t *addr, uint8_t *part, uint64_t *host, ms_error *err)
{
    (void)err; /* the signature its callers share */
    for (uint32_t j = 0; j < n; j++) {
        const char *why = "";
        if (host) host[j] = 0;
        if ((addr[j] = resolve(x, ids[j], frac, &part[j], &why, host ? &host[j] : NULL)) == 0) {
            char tn[48];
            return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: op %s: tensor %llu "
                            "'%s' %s", i, op->name, (unsigned long long)ids[j],
                            rtx_tname(x, ids[j], tn, sizeof tn), why);
        }
        if (part[j] == 2 || part[j] == 3) { /* (partly) in pinned host memory */
            part[j] = 0;
            x->r->host_operands++;
        }
    }
    return RT_OK;
}

/* With per-op timing, the action's timing slot and its start event on stream s. */
static rt_status op_timer_start(ex *x, size_t i, void *s, double req, tev **t, ms_error *err)
{
    *t = NULL;
    if (!x->o.per_op) return RT_OK;
    tev *v = &x->op[x->used_op++];
    v->action = i;
    v->win = x->cur_win;
    v->req_us = req;
    *t = v;
    if (x->d->record(x->d->ctx, v->e0, s, err) != RT_OK)
        return rtx_fail_dev(x, i, "recording", err);
    return RT_OK;
}

/* After a compute action's kernel: its end event, the run-ahead bound and the window's
 * nominal time and counts. */
static rt_status compute_done(ex *x, size_t i, const sched_action *a, void *s, tev *t,
                              double req, ms_error *err)
{
    if (t && x->d->record(x->d->ctx, t->e1, s, err) != RT_OK)
        return rtx_fail_dev(x, i, "recording", err);
    if (x->o.max_ahead > 0) RT_TRY(hold_back(x, i, s, err));
    rt_window *w = &x->r->win[x->cur_win];
    w->nominal_s += req * 1e-6;
    if (a->recompute) w->recompute_nominal_s += req * 1e-6;
    w->n_compute++;
    x->r->kernels++;
    return RT_OK;
}

/* A compute action run by the real-kernel hook: no spin credit, no calibration. */
static rt_status do_compute_real(ex *x, size_t i, const sched_action *a, const trace_op *op,
                                 ms_error *err)
{
    enum { MAXT = 64 };
    uint64_t in[MAXT], out[MAXT], out_host[MAXT];
    if (op->n_in > MAXT || op->n_out > MAXT)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "op %s: too many tensors for real kernels",
                        op->name);
    uint8_t in_part[MAXT], out_part[MAXT];
    double frac = a->replay_frac > 0 && a->replay_frac < 1 ? a->replay_frac : 0;
    if (frac > 0 && !x->o.compute_rows)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: op %s is a token-wise "
                        "partial replay (fraction %g of its rows) and the real-kernel hook has no "
                        "row-range entry", i, op->name, frac);
    RT_TRY(op_addrs(x, i, op, op->in, op->n_in, frac, in, in_part, NULL, err));
    RT_TRY(op_addrs(x, i, op, op->out, op->n_out, frac, out, out_part, out_host, err));
    int split = 0;
    for (uint32_t j = 0; j < op->n_out; j++) split |= out_host[j] != 0;
    if (split && !x->o.compute_split)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: op %s writes a "
                        "gradient buffer split between the GPU and the host (grad_host knobs) "
                        "and the real-kernel hook has no entry for it", i, op->name);
    void *s = x->st[a->stream];
    double req = a->dur_us > 0 ? a->dur_us : 0;
    tev *t = NULL;
    RT_TRY(op_timer_start(x, i, s, req, &t, err));
    rt_status cs = frac > 0 ? x->o.compute_rows(x->o.compute_ctx, s, op, in, out, in_part,
                                                out_part, frac, err)
                   : split  ? x->o.compute_split(x->o.compute_ctx, s, op, in, out, out_host, err)
                            : x->o.compute(x->o.compute_ctx, s, op, in, out, err);
    if (cs != RT_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: op %s: %s", i, op->name,
                        err->msg);
    return compute_done(x, i, a, s, t, req, err);
}

/* The spin kernel of a compute action: dur_us on stream s (with the credit unless it moves
 * DHA bytes), touching the outputs of op. */
static rt_status spin_kernel(ex *x, size_t i, const sched_action *a, const trace_op *op,
                             void *s, double req, ms_error *err)
{
    rt_kernel_args k;
    memset(&k, 0, sizeof k);
    /* With the real-kernel hook an action without an op that moves host bytes is an
     * AccumulateGrad of host gradients (lower_dha's put_accumulate): the op's real kernel
     * already added its gradient into the mapped home (beta = 1), so the host traffic is
     * done; only the action's own time remains. Without the hook the spin kernel moves it. */
    int dha = (a->host_read_bytes || a->host_write_bytes) && !(x->o.compute && a->op < 0);
    k.dur_us = dha ? req : credited(x, req);
    if (dha) {
        k.dha_read_host = x->dha_buf;
        k.dha_read_bytes = a->host_read_bytes < x->dha_bytes ? a->host_read_bytes : x->dha_bytes;
        k.dha_write_host = x->dha_buf;
        k.dha_write_bytes =
            a->host_write_bytes < x->dha_bytes ? a->host_write_bytes : x->dha_bytes;
    }
    for (uint32_t j = 0; op && j < op->n_out && k.n_touch < RT_TOUCH_MAX; j++) {
        dlive *d = rtx_dev_live(x, op->out[j]);
        if (!d || !d->addr || !d->bytes) continue;
        k.touch_addr[k.n_touch] = d->addr;
        k.touch_bytes[k.n_touch++] = d->bytes;
    }
    if (x->d->kernel(x->d->ctx, s, &k, err) != RT_OK)
        return rtx_fail_dev(x, i, "launching a kernel", err);
    return RT_OK;
}

/* The device blocks of a collective's operands and their bytes (the tensor's, or in a
 * token-wise replay the replayed rows'). Host-resident operands are refused: NCCL is given
 * device memory only. */
static rt_status coll_operands(ex *x, size_t i, const trace_op *c, const uint64_t *ids,
                               uint32_t n, double frac, uint64_t *addr, uint64_t *bytes,
                               ms_error *err)
{
    (void)err;
    for (uint32_t j = 0; j < n; j++) {
        const char *why = "";
        uint8_t part = 0;
        const trace_tensor *t = trace_find_tensor(x->o.trace, ids[j]);
        addr[j] = resolve(x, ids[j], frac, &part, &why, NULL);
        if (addr[j] && part == 2) why = "lies in pinned host memory (NCCL takes device memory)";
        if (!addr[j] || part == 2 || !t) {
            char tn[48];
            return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: collective %s: "
                            "tensor %llu '%s' %s", i, c->name, (unsigned long long)ids[j],
                            rtx_tname(x, ids[j], tn, sizeof tn), why);
        }
        bytes[j] = part == 1 ? frac_bytes(t->bytes, frac) : t->bytes;
    }
    return RT_OK;
}

/* Makes stream `to` wait for what was issued to `from` so far. */
static rt_status join(ex *x, size_t i, void *from, void *to, ms_error *err)
{
    void *e = rtx_pool_get(x, err);
    if (!e || x->d->record(x->d->ctx, e, from, err) != RT_OK ||
        x->d->wait(x->d->ctx, to, e, err) != RT_OK)
        return rtx_fail_dev(x, i, "joining the side stream", err);
    rtx_pool_put(x, e);
    return RT_OK;
}

/* A compute action that runs collective c (coll_find): alone on the action's stream, or
 * beside the spin of op's own time on the side stream when c was merged into op. */
static rt_status do_compute_coll(ex *x, size_t i, const sched_action *a, const trace_op *op,
                                 const trace_op *c, double spin_us, ms_error *err)
{
    enum { MAXT = 64 };
    uint64_t in[MAXT], in_b[MAXT], out[MAXT], out_b[MAXT];
    if (c->n_in > MAXT || c->n_out > MAXT)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "collective %s: too many tensors", c->name);
    double frac = a->replay_frac > 0 && a->replay_frac < 1 ? a->replay_frac : 0;
    RT_TRY(coll_operands(x, i, c, c->in, c->n_in, frac, in, in_b, err));
    RT_TRY(coll_operands(x, i, c, c->out, c->n_out, frac, out, out_b, err));
    void *s = x->st[a->stream];
    double req = a->dur_us > 0 ? a->dur_us : 0;
    int beside = c != op;
    tev *t = NULL;
    RT_TRY(op_timer_start(x, i, s, req, &t, err));
    if (beside) RT_TRY(join(x, i, s, x->side, err));
    if (x->o.coll_run(x->o.coll_ctx, beside ? x->side : s, a, c, in, in_b, out, out_b, err) !=
        RT_OK)
        return rtx_fail(x, RTX_ERROR, RT_ERR_CUDA, "schedule action %zu: collective %s: %s", i,
                        c->name, err->msg);
    if (spin_us > 0) RT_TRY(spin_kernel(x, i, a, op, s, spin_us, err));
    if (beside) RT_TRY(join(x, i, x->side, s, err));
    x->r->collectives++;
    x->r->collectives_beside += beside;
    return compute_done(x, i, a, s, t, req, err);
}

rt_status rtx_do_compute(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    const trace_op *op = (x->o.trace && a->op >= 0) ? trace_find_op(x->o.trace, (uint64_t)a->op)
                                                    : NULL;
    if (x->o.coll_find && x->o.coll_run && op) {
        double spin_us = 0;
        const trace_op *c = x->o.coll_find(x->o.coll_ctx, a, op, &spin_us);
        if (c) return do_compute_coll(x, i, a, op, c, spin_us, err);
    }
    if (x->o.compute && op) return do_compute_real(x, i, a, op, err);
    double req = a->dur_us > 0 ? a->dur_us : 0;
    void *s = x->st[a->stream];
    tev *t = NULL;
    RT_TRY(op_timer_start(x, i, s, req, &t, err));
    RT_TRY(spin_kernel(x, i, a, op, s, req, err));
    return compute_done(x, i, a, s, t, req, err);
}

/* ---- host compute with real math ---- */

#define RT_STEP_MAX 64

/* One host step handed to the device's host thread: the hook, its op and the host ranges
 * found at issue time. Kept by the executor until every stream is drained. */
typedef struct hstep {
    ex *x;
    const trace_op *op;
    int64_t tag;
    size_t win;          /* the window it was issued in: its wall time is added there */
    size_t n;
    uint64_t addr[RT_STEP_MAX], bytes[RT_STEP_MAX];
} hstep;

/* Runs on the host thread: a failure is kept for the issuing thread (first one wins). */
static void host_step_run(void *arg)
{
    hstep *h = (hstep *)arg;
    ex *x = h->x;
    if (__atomic_load_n(&x->step_fail, __ATOMIC_ACQUIRE)) return;
    double t0 = rt_mono_s();
    ms_error herr; /* this thread's own: the issuing thread runs on meanwhile */
    ms_error_clear(&herr);
    rt_status st = x->o.host_compute(x->o.compute_ctx, h->op, h->tag, h->addr, h->bytes, h->n,
                                     &herr);
    /* one host thread runs every step, and the issuing thread reads the sums only after
     * every stream has drained */
    x->r->win[h->win].host_measured_s += rt_mono_s() - t0;
    if (st == RT_OK) return;
    int no = 0;
    if (__atomic_compare_exchange_n(&x->step_fail, &no, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        snprintf(x->step_msg, sizeof x->step_msg, "host step %.128s: %s", h->op->name,
                 herr.msg);
}

rt_status rtx_do_host_step(ex *x, size_t i, const sched_action *a, ms_error *err)
{
    const trace_op *op = trace_find_op(x->o.trace, (uint64_t)a->op);
    if (!op)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host compute of op "
                        "%lld, which the trace lacks", i, (long long)a->op);
    if (!x->d->host_call)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host step %s: the "
                        "device %s cannot run host calls", i, op->name, x->d->name);
    uint64_t ids[RT_STEP_MAX];
    int64_t tag = 0;
    int n = x->o.host_prepare(x->o.compute_ctx, op, ids, RT_STEP_MAX, &tag, err);
    if (n < 0)
        return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host step %s: %s", i,
                        op->name, err->msg);
    hstep *h = (hstep *)calloc(1, sizeof *h);
    if (!h || ms_grow((void **)&x->steps, &x->cap_steps, x->n_steps + 1, sizeof *x->steps) !=
                  MS_OK) {
        free(h);
        return rtx_fail(x, RTX_ERROR, RT_ERR_HOST, "out of host memory");
    }
    x->steps[x->n_steps++] = h;
    h->x = x;
    h->op = op;
    h->tag = tag;
    h->win = x->cur_win;
    h->n = (size_t)n;
    for (int k = 0; k < n; k++) {
        hlive *l = rtx_host_live(x, ids[k]);
        if (!l) {
            char tn[48];
            return rtx_fail(x, RTX_ERROR, RT_ERR_INVALID, "schedule action %zu: host step %s: "
                            "tensor %llu '%s' has no pinned host range", i, op->name,
                            (unsigned long long)ids[k], rtx_tname(x, ids[k], tn, sizeof tn));
        }
        h->addr[k] = x->pool + l->off;
        h->bytes[k] = l->req;
        l->last_d2h = 0; /* the host step rewrites it (parameters, gradients) */
    }
    if (x->d->host_call(x->d->ctx, x->st[a->stream], host_step_run, h, err) != RT_OK)
        return rtx_fail_dev(x, i, "host step", err);
    x->r->host_steps++;
    return RT_OK;
}

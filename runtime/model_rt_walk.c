/* model_rt_walk.c — the one-stream schedule walker (model_rt_walk.h): runs a
 * lowered schedule's compute actions in program order on one CUDA stream with the op
 * dispatcher (model_rt_ops.c), allocating through the allocator, and times each op. Used by
 * runtime/rt_run.c and tests/test_kernels.c. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/model_rt_walk.h"
#include "runtime/model_rt_ops.h"
#include "runtime/model_rt_int.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"
#include "base/util.h"

/* ---- the one-stream schedule walker ---- */

void mrt_sched_result_release(mrt_sched_result *r)
{
    if (!r) return;
    free(r->ops);
    r->ops = NULL;
    r->n_ops = 0;
}

static rt_status walk_check(const schedule_t *s, size_t *n_compute, ms_error *err)
{
    *n_compute = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *a = sched_get(s, i);
        int ok = a->stream == SS_COMPUTE &&
                 (a->kind == SA_COMPUTE || a->kind == SA_ALLOC || a->kind == SA_FREE ||
                  a->kind == SA_MARK || a->kind == SA_RECORD || a->kind == SA_WAIT);
        if (!ok || a->host_read_bytes || a->host_write_bytes)
            return mrt_bad_trace("this schedule copies or uses other streams: real kernels run "
                                 "one-stream schedules (keep-all, recomputation) for now", err);
        *n_compute += a->kind == SA_COMPUTE;
    }
    return RT_OK;
}

typedef struct walk {
    const schedule_t *s;
    const trace_t *t;
    alloc_t *a;
    mrt_ops *o;
    cudaStream_t st;
    u64map *live;            /* tensor -> address */
    cudaEvent_t *ev;         /* 2 per compute action */
    cudaEvent_t iev[MRT_MAX_ITERS + 2];
    int n_iev;
    uint64_t *ia, *oa;       /* operand addresses of the current op */
} walk;

static rt_status walk_compute(walk *w, size_t i, const sched_action *a, size_t k,
                              mrt_sched_result *r, ms_error *err)
{
    const trace_op *op = trace_find_op(w->t, (uint64_t)a->op);
    char why[160];
    if (!op) return mrt_bad_trace("a compute action without its trace op", err);
    for (uint32_t j = 0; j < op->n_in + op->n_out; j++) {
        uint64_t id = j < op->n_in ? op->in[j] : op->out[j - op->n_in], addr;
        if (!u64map_get(w->live, id, &addr)) {
            snprintf(why, sizeof why, "op '%s' uses tensor %llu, which holds no memory",
                     op->name, (unsigned long long)id);
            return mrt_bad_trace(why, err);
        }
        if (j < op->n_in) w->ia[j] = addr;
        else w->oa[j - op->n_in] = addr;
    }
    RT_CHECK(err, cudaEventRecord(w->ev[2 * k], w->st));
    RT_TRY(mrt_ops_run(w->o, w->st, op, w->ia, w->oa, err));
    RT_CHECK(err, cudaEventRecord(w->ev[2 * k + 1], w->st));
    mrt_op_time *ot = &r->ops[k];
    ot->action = i;
    ot->op = a->op;
    ot->req_us = a->dur_us > 0 ? a->dur_us : 0;
    ot->recompute = a->recompute;
    int it = r->n_iter > 0 ? r->n_iter - 1 : -1;
    if (it >= 0) r->nominal_ms[it] += ot->req_us * 1e-3;
    return RT_OK;
}

static rt_status walk_all(walk *w, mrt_sched_result *r, ms_error *err)
{
    size_t k = 0;
    RT_CHECK(err, cudaEventRecord(w->iev[w->n_iev++], w->st));
    for (size_t i = 0; i < sched_count(w->s); i++) {
        const sched_action *a = sched_get(w->s, i);
        uint64_t addr = 0;
        char why[160];
        switch (a->kind) {
        case SA_ALLOC: {
            ms_status ms = alloc_block(w->a, a->bytes, 0, a->tensor, &addr);
            if (ms != MS_OK) {
                snprintf(why, sizeof why, "schedule action %zu: allocating %llu bytes: %s", i,
                         (unsigned long long)a->bytes, ms_status_str(ms));
                return rt_fail(err, ms == MS_ERR_OOM ? RT_ERR_OOM : RT_ERR_CUDA, __FILE__,
                                    __LINE__, "alloc_block", why);
            }
            if (u64map_put(w->live, a->tensor, addr)) return mrt_bad_trace("out of memory", err);
            break;
        }
        case SA_FREE:
            /* one stream: a later op that gets this block runs after every earlier use */
            if (u64map_del(w->live, a->tensor, &addr) && alloc_release(w->a, addr) != MS_OK)
                return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "alloc_release", "a block");
            break;
        case SA_COMPUTE:
            RT_TRY(walk_compute(w, i, a, k++, r, err));
            break;
        case SA_MARK:
            if (a->mark == TM_ITER && r->n_iter < MRT_MAX_ITERS) {
                RT_CHECK(err, cudaEventRecord(w->iev[w->n_iev++], w->st));
                mrt_ops_set_iter(w->o, (int)a->mark_value);
                r->n_iter++;
            }
            break;
        default:
            break;
        }
    }
    RT_CHECK(err, cudaEventRecord(w->iev[w->n_iev++], w->st));
    RT_CHECK(err, cudaStreamSynchronize(w->st));
    r->n_ops = k;
    return RT_OK;
}

static void walk_times(walk *w, mrt_sched_result *r)
{
    float ms = 0;
    for (size_t k = 0; k < r->n_ops; k++) {
        cudaEventElapsedTime(&ms, w->ev[2 * k], w->ev[2 * k + 1]);
        r->ops[k].meas_us = ms * 1e3;
    }
    cudaEventElapsedTime(&ms, w->iev[0], w->iev[1]);
    r->setup_ms = ms;
    for (int i = 0; i < r->n_iter; i++) {
        cudaEventElapsedTime(&ms, w->iev[i + 1], w->iev[i + 2]);
        r->iter_ms[i] = ms;
    }
}

rt_status mrt_sched_run(const schedule_t *s, const trace_t *t, const mb_backend *be,
                        const char *allocator, const alloc_config *cfg, uint64_t seed,
                        const kn_adamw_cfg *adam, mrt_sched_result *r, ms_error *err)
{
    memset(r, 0, sizeof *r);
    size_t nc = 0;
    RT_TRY(walk_check(s, &nc, err));
    uint32_t max_opnd = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *x = trace_get(t, i);
        if (x->type == TR_OP && x->u.op.n_in + x->u.op.n_out > max_opnd)
            max_opnd = x->u.op.n_in + x->u.op.n_out;
    }
    walk w;
    memset(&w, 0, sizeof w);
    w.s = s;
    w.t = t;
    ms_error le; /* the library's */
    rt_status st = mrt_ops_new(t, seed, &w.o, err);
    if (st != RT_OK) return st;
    if (adam) mrt_ops_set_adam(w.o, adam);
    r->ops = calloc(nc ? nc : 1, sizeof *r->ops);
    w.ev = calloc(2 * (nc ? nc : 1), sizeof *w.ev);
    w.ia = calloc(max_opnd + 1, sizeof *w.ia);
    w.oa = calloc(max_opnd + 1, sizeof *w.oa);
    w.live = u64map_new(256);
    if (!r->ops || !w.ev || !w.ia || !w.oa || !w.live) st = mrt_bad_trace("out of memory", err);
    if (st == RT_OK && alloc_new(allocator ? allocator : "caching", cfg, be, &w.a, &le) != MS_OK)
        st = mrt_bad_trace(le.msg, err);
    if (st == RT_OK && cudaStreamCreateWithFlags(&w.st, cudaStreamNonBlocking) != cudaSuccess)
        st = rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, "cudaStreamCreate", "walker");
    size_t made = 0;
    int imade = 0;
    for (; st == RT_OK && made < 2 * nc; made++)
        if (cudaEventCreate(&w.ev[made]) != cudaSuccess) st = RT_ERR_CUDA;
    for (; st == RT_OK && imade < MRT_MAX_ITERS + 2; imade++)
        if (cudaEventCreate(&w.iev[imade]) != cudaSuccess) st = RT_ERR_CUDA;
    if (st == RT_ERR_CUDA) rt_fail(err, st, __FILE__, __LINE__, "cudaEventCreate", "walker");
    if (st == RT_OK) st = walk_all(&w, r, err);
    if (st == RT_OK) {
        walk_times(&w, r);
        st = mrt_ops_losses(w.o, r->loss, r->n_iter, err);
    }
    if (w.st) cudaStreamSynchronize(w.st);
    /* give every block back (the parameters, gradients and states live to the end) */
    uint64_t id, addr;
    for (size_t it = 0; w.live && w.a && u64map_next(w.live, &it, &id, &addr);)
        alloc_release(w.a, addr);
    if (w.a) {
        r->astats = *alloc_get_stats(w.a);
        alloc_empty_cache(w.a);
        alloc_free(w.a);
    }
    for (size_t i = 0; i < made; i++) cudaEventDestroy(w.ev[i]);
    for (int i = 0; i < imade; i++) cudaEventDestroy(w.iev[i]);
    if (w.st) cudaStreamDestroy(w.st);
    u64map_free(w.live);
    free(w.ev);
    free(w.ia);
    free(w.oa);
    mrt_ops_free(w.o);
    if (st != RT_OK) mrt_sched_result_release(r);
    return st;
}

/* rt_csv.c — the results CSV of `memsim run` (docs/RUNTIME.md, "Results CSV"): the
 * simulator's columns in its order, then the runtime's own; its header and one run's row, and
 * the number cells the runtime's other CSV files share. Used by runtime/rt_run.c. */
#include "runtime/rt_csv.h"

#include <string.h>

#include "planners/blockmix.h"

void rt_csv_dbl(FILE *f, double v)
{
    char b[40];
    fputc(',', f);
    fputs(ms_fmt_double(v, b, sizeof b), f);
}

void rt_csv_u64(FILE *f, uint64_t v) { fprintf(f, ",%llu", (unsigned long long)v); }

/* The simulator's columns (sim/results.c), in its order, then the runtime's own. */
static const char *const csv_header =
    "policy,allocator,model,machine,seq,batch,tp,cp,dp,status,iter_time_s,mfu,tgs,"
    "peak_allocated_bytes,peak_reserved_bytes,peak_active_bytes,fragmentation,host_peak_bytes,"
    "compute_busy_s,h2d_busy_s,d2h_busy_s,alloc_retries,alloc_retries_per_iter,host_busy_s,"
    "recompute_s,model_flops,num_allocs,num_frees,num_ooms,num_segment_allocs,"
    "num_segment_frees,num_syncs,num_splits,num_stitches,num_new_chunks,num_stitch_frees,"
    "mapped_twice_bytes,num_maps,num_unmaps,peak_requested_bytes,peak_inactive_split_bytes,"
    "executor,device,nominal_iter_s,per_op,max_ahead,alloc_sync,deferred_frees,oom_drains,"
    "alloc_fences,h2d_large_Bps,d2h_large_Bps,issue_s,failure";

void rt_csv_header(FILE *f, int with_rank)
{
    fputs(csv_header, f);
    /* then the kinds at the peak, named as the simulator's columns (peak_<kind>_bytes) */
    for (int k = 0; k < BM_COUNT; k++) fprintf(f, ",peak_%s_bytes", bm_kind_key((bm_kind)k));
    fputs(with_rank ? ",peak_kinds_at_failure,rank,world\n" : ",peak_kinds_at_failure\n", f);
}

void rt_csv_row(FILE *f, const rt_csv_run *x, const char *device, const machine_t *m,
                const plan_t *plan, const trace_t *t, const rt_exec_result *r)
{
    const alloc_stats *s = &r->astats;
    const char *model = trace_get_meta(t, "model");
    ms_csv_str(f, plan->policy);
    fputc(',', f);
    ms_csv_str(f, plan->allocator);
    fputc(',', f);
    ms_csv_str(f, model ? model : "-");
    fputc(',', f);
    ms_csv_str(f, m->name);
    rt_csv_u64(f, trace_meta_u64(t, "seq", 0));
    rt_csv_u64(f, trace_meta_u64(t, "batch", 0));
    rt_csv_u64(f, trace_meta_u64(t, "tp", 0));
    rt_csv_u64(f, trace_meta_u64(t, "cp", 0));
    rt_csv_u64(f, trace_meta_u64(t, "dp", 0));
    fprintf(f, ",%s", rt_outcome_name(r->outcome));
    rt_csv_dbl(f, r->outcome == RTX_OK ? r->iter_time_s : 0);
    rt_csv_dbl(f, x->mfu);
    rt_csv_dbl(f, x->tgs);
    rt_csv_u64(f, s->allocated_peak_bytes);
    rt_csv_u64(f, s->reserved_peak_bytes);
    rt_csv_u64(f, s->active_peak_bytes);
    rt_csv_dbl(f, s->reserved_peak_bytes
                   ? 1.0 - (double)s->active_peak_bytes / (double)s->reserved_peak_bytes : 0);
    rt_csv_u64(f, r->host_peak_bytes);
    rt_csv_dbl(f, r->compute_busy_s);
    rt_csv_dbl(f, r->h2d_busy_s);
    rt_csv_dbl(f, r->d2h_busy_s);
    rt_csv_u64(f, s->num_alloc_retries);
    rt_csv_u64(f, r->alloc_retries_per_iter);
    rt_csv_dbl(f, r->host_busy_s);
    rt_csv_dbl(f, r->recompute_s);
    rt_csv_dbl(f, x->flops);
    rt_csv_u64(f, s->num_allocs);
    rt_csv_u64(f, s->num_frees);
    rt_csv_u64(f, s->num_ooms);
    rt_csv_u64(f, s->num_segment_allocs);
    rt_csv_u64(f, s->num_segment_frees);
    rt_csv_u64(f, s->num_syncs);
    rt_csv_u64(f, s->num_splits);
    rt_csv_u64(f, s->num_stitches);
    rt_csv_u64(f, s->num_new_chunks);
    rt_csv_u64(f, s->num_stitch_frees);
    rt_csv_u64(f, s->mapped_twice_bytes);
    rt_csv_u64(f, s->num_maps);
    rt_csv_u64(f, s->num_unmaps);
    rt_csv_u64(f, s->requested_peak_bytes);
    rt_csv_u64(f, s->inactive_split_peak_bytes);
    fputc(',', f);
    ms_csv_str(f, x->executor);
    fputc(',', f);
    ms_csv_str(f, device);
    rt_csv_dbl(f, r->nominal_s);
    rt_csv_u64(f, (uint64_t)x->per_op);
    rt_csv_u64(f, (uint64_t)x->max_ahead);
    rt_csv_u64(f, (uint64_t)x->alloc_sync);
    rt_csv_u64(f, r->deferred_frees);
    rt_csv_u64(f, r->oom_drains);
    rt_csv_u64(f, r->alloc_fences);
    rt_csv_dbl(f, r->h2d_large.agg_Bps);
    rt_csv_dbl(f, r->d2h_large.agg_Bps);
    rt_csv_dbl(f, r->issue_s);
    fputc(',', f);
    ms_csv_str(f, r->failure);
    /* the kinds at the peak, in planners/blockmix.h's order, as the simulator's columns */
    for (int k = 0; k < BM_COUNT; k++) rt_csv_u64(f, r->peak_live_bytes[k]);
    rt_csv_u64(f, (uint64_t)r->peak_live_at_failure);
}


/* results.c — the run result's status names, defaults, the results CSV (one table of
 * columns drives the header, the rows and the documentation in docs/SIMULATOR.md) and the
 * human summary table. Used by sim/exec.c, the memsim command and experiments/. */
#include "sim/results.h"

#include <stddef.h>
#include <string.h>

const char *res_status_name(res_status s)
{
    switch (s) {
    case RS_OK: return "ok";
    case RS_OOM: return "oom";
    case RS_OOHM: return "oohm";
    case RS_ERROR: return "error";
    }
    return "unknown";
}

void res_init(sim_result *r)
{
    memset(r, 0, sizeof *r);
    r->status = RS_OK;
    r->tp = r->cp = r->dp = r->ep = 1;
}

typedef enum col_type { CT_STR, CT_U64, CT_INT, CT_DBL, CT_STATUS } col_type;

#define AS(f) (offsetof(sim_result, astats) + offsetof(alloc_stats, f))
#define R(f) offsetof(sim_result, f)
#define KIND(k) (offsetof(sim_result, peak_live_bytes) + (size_t)(k) * sizeof(uint64_t))

/* The column table, in CSV order. Keep docs/SIMULATOR.md's column list in step. */
#define RES_COLUMNS(X)                                        \
    X("policy", CT_STR, R(policy))                            \
    X("allocator", CT_STR, R(allocator))                      \
    X("model", CT_STR, R(model))                              \
    X("machine", CT_STR, R(machine))                          \
    X("seq", CT_U64, R(seq))                                  \
    X("batch", CT_U64, R(batch))                              \
    X("tp", CT_INT, R(tp))                                    \
    X("cp", CT_INT, R(cp))                                    \
    X("dp", CT_INT, R(dp))                                    \
    X("status", CT_STATUS, R(status))                         \
    X("iter_time_s", CT_DBL, R(iter_time_s))                  \
    X("mfu", CT_DBL, R(mfu))                                  \
    X("tgs", CT_DBL, R(tgs))                                  \
    X("peak_allocated_bytes", CT_U64, R(peak_allocated_bytes)) \
    X("peak_reserved_bytes", CT_U64, R(peak_reserved_bytes))  \
    X("peak_active_bytes", CT_U64, R(peak_active_bytes))      \
    X("fragmentation", CT_DBL, R(fragmentation))              \
    X("host_peak_bytes", CT_U64, R(host_peak_bytes))          \
    X("compute_busy_s", CT_DBL, R(compute_busy_s))            \
    X("h2d_busy_s", CT_DBL, R(h2d_busy_s))                    \
    X("d2h_busy_s", CT_DBL, R(d2h_busy_s))                    \
    X("alloc_retries", CT_U64, AS(num_alloc_retries))         \
    X("alloc_retries_per_iter", CT_U64, R(alloc_retries_per_iter)) \
    X("host_busy_s", CT_DBL, R(host_busy_s))                  \
    X("recompute_s", CT_DBL, R(recompute_s))                  \
    X("stall_s", CT_DBL, R(stall_s))                          \
    X("alloc_time_s", CT_DBL, R(alloc_time_s))                \
    X("host_node_peak_bytes", CT_U64, R(host_node_peak_bytes)) \
    X("model_flops", CT_DBL, R(model_flops))                  \
    X("num_allocs", CT_U64, AS(num_allocs))                   \
    X("num_frees", CT_U64, AS(num_frees))                     \
    X("num_ooms", CT_U64, AS(num_ooms))                       \
    X("num_segment_allocs", CT_U64, AS(num_segment_allocs))   \
    X("num_segment_frees", CT_U64, AS(num_segment_frees))     \
    X("num_syncs", CT_U64, AS(num_syncs))                     \
    X("num_splits", CT_U64, AS(num_splits))                   \
    X("num_stitches", CT_U64, AS(num_stitches))               \
    X("num_new_chunks", CT_U64, AS(num_new_chunks))           \
    X("num_stitch_frees", CT_U64, AS(num_stitch_frees))       \
    X("mapped_twice_bytes", CT_U64, AS(mapped_twice_bytes))   \
    X("num_maps", CT_U64, AS(num_maps))                       \
    X("num_unmaps", CT_U64, AS(num_unmaps))                   \
    X("peak_requested_bytes", CT_U64, AS(requested_peak_bytes)) \
    X("peak_inactive_split_bytes", CT_U64, AS(inactive_split_peak_bytes)) \
    X("failure", CT_STR, R(failure))                          \
    X("issue_ahead", CT_INT, R(issue_ahead))                  \
    X("issue_busy_s", CT_DBL, R(issue_busy_s))                \
    X("issue_waits", CT_U64, R(issue_waits))                  \
    X("deferred_frees", CT_U64, R(deferred_frees))            \
    X("peak_params_bytes", CT_U64, KIND(BM_PARAM))            \
    X("peak_grads_bytes", CT_U64, KIND(BM_GRAD))              \
    X("peak_optstates_bytes", CT_U64, KIND(BM_OPTSTATE))      \
    X("peak_chunks_bytes", CT_U64, KIND(BM_CHUNK))            \
    X("peak_act_skel_bytes", CT_U64, KIND(BM_ACT_SKEL))       \
    X("peak_act_trans_bytes", CT_U64, KIND(BM_ACT_TRANS))     \
    X("peak_workspace_bytes", CT_U64, KIND(BM_WORKSPACE))     \
    X("peak_rbuf_bytes", CT_U64, KIND(BM_RBUF))               \
    X("peak_idle_bytes", CT_U64, KIND(BM_IDLE))               \
    X("peak_staging_bytes", CT_U64, KIND(BM_STAGING))         \
    X("peak_other_bytes", CT_U64, KIND(BM_OTHER))             \
    X("peak_kinds_at_failure", CT_INT, R(peak_live_at_failure))

#define COL_NAME(name, type, off) name,
#define COL_DESC(name, type, off) { type, off },

const char *const RES_CSV_COLUMNS[] = { RES_COLUMNS(COL_NAME) NULL };

typedef struct col_desc {
    col_type type;
    size_t off;
} col_desc;
static const col_desc cols[] = { RES_COLUMNS(COL_DESC) };

size_t res_csv_ncolumns(void) { return sizeof cols / sizeof *cols; }

void res_csv_header(FILE *f)
{
    for (size_t i = 0; i < res_csv_ncolumns(); i++)
        fprintf(f, "%s%s", i ? "," : "", RES_CSV_COLUMNS[i]);
    fputc('\n', f);
}


/* v as "%d" writes it, its digits by ms_fmt_u64, as the row's counts are: fprintf parses its
 * format at each number (about 570 instructions a call; the 192-configuration sweep of
 * BENCHMARKS.md writes 8,000 of them). */
static void put_int(FILE *f, int v, char *buf, size_t n)
{
    if (v < 0) fputc('-', f);
    fputs(ms_fmt_u64(v < 0 ? 0u - (uint64_t)(int64_t)v : (uint64_t)v, buf, n), f);
}

void res_csv_row(FILE *f, const sim_result *r)
{
    const char *base = (const char *)r;
    char buf[40];
    for (size_t i = 0; i < res_csv_ncolumns(); i++) {
        const void *p = base + cols[i].off;
        if (i) fputc(',', f);
        switch (cols[i].type) {
        case CT_STR: ms_csv_str(f, (const char *)p); break;
        case CT_U64: fputs(ms_fmt_u64(*(const uint64_t *)p, buf, sizeof buf), f); break;
        case CT_INT: put_int(f, *(const int *)p, buf, sizeof buf); break;
        case CT_DBL: fputs(ms_fmt_double(*(const double *)p, buf, sizeof buf), f); break;
        case CT_STATUS: fputs(res_status_name(*(const res_status *)p), f); break;
        }
    }
    fputc('\n', f);
}

void res_json_row(FILE *f, const sim_result *r)
{
    const char *base = (const char *)r;
    fputc('{', f);
    for (size_t i = 0; i < res_csv_ncolumns(); i++) {
        const void *p = base + cols[i].off;
        if (i) fputc(',', f);
        ms_json_str(f, RES_CSV_COLUMNS[i]);
        fputc(':', f);
        switch (cols[i].type) {
        case CT_STR: ms_json_str(f, (const char *)p); break;
        case CT_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p); break;
        case CT_INT: fprintf(f, "%d", *(const int *)p); break;
        case CT_DBL: ms_json_double(f, *(const double *)p); break;
        case CT_STATUS: ms_json_str(f, res_status_name(*(const res_status *)p)); break;
        }
    }
    fputc('}', f);
}

static double gib(uint64_t b) { return (double)b / MS_GiB; }

/* 1 when some result ran on more than one GPU: the table then also gives the node's host
 * memory (host_node_peak_bytes, the per-GPU peak times the GPUs sharing the node's host). */
static int any_parallel(const sim_result *rs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const sim_result *r = &rs[i];
        if ((r->tp > 0 ? r->tp : 1) * (r->cp > 0 ? r->cp : 1) * (r->dp > 0 ? r->dp : 1) > 1)
            return 1;
    }
    return 0;
}

void res_table(FILE *f, const sim_result *rs, size_t n)
{
    int node = any_parallel(rs, n);
    fprintf(f, "%-20s %-11s %-6s %10s %6s %9s %9s %9s %6s %9s", "policy", "allocator",
            "status", "iter_s", "MFU%", "TGS", "resv_GiB", "alloc_GiB", "frag%", "host_GiB");
    if (node) fprintf(f, " %9s", "node_GiB");
    fprintf(f, " %10s\n", "retries/it");
    for (size_t i = 0; i < n; i++) {
        const sim_result *r = &rs[i];
        int failed = r->status == RS_OOM || r->status == RS_OOHM;
        fprintf(f, "%-20.20s %-11.11s %-6s ", r->policy[0] ? r->policy : "-",
                r->allocator[0] ? r->allocator : "-", res_status_name(r->status));
        /* a run that failed has no iteration time: the peaks it reached before the failing
         * request, then that request on a line of its own */
        if (!failed)
            fprintf(f, "%10.4f %6.2f %9.1f", r->iter_time_s, r->mfu * 100, r->tgs);
        else
            fprintf(f, "%10s %6s %9s", "-", "-", "-");
        fprintf(f, " %9.2f %9.2f %6.2f %9.2f", gib(r->peak_reserved_bytes),
                gib(r->peak_allocated_bytes), r->fragmentation * 100, gib(r->host_peak_bytes));
        if (node) fprintf(f, " %9.2f", gib(r->host_node_peak_bytes));
        fprintf(f, " %10llu\n", (unsigned long long)r->alloc_retries_per_iter);
        if (failed)
            fprintf(f, "  %s: %s\n", res_status_name(r->status),
                    r->failure[0] ? r->failure : "the failing request was not recorded");
    }
    for (size_t i = 0; i < n; i++)
        if (rs[i].power_clock_ratio > 0 && rs[i].status == RS_OK)
            fprintf(f, "power limit, %s: compute-bound kernels at %.3f of the maximum SM clock "
                       "(weighted by their time), busiest window %.0f W\n",
                    rs[i].policy[0] ? rs[i].policy : "-", rs[i].power_clock_ratio,
                    rs[i].power_peak_w);
}

/* GiB in a column w wide: "-" for nothing. */
static void gib_cell(FILE *f, int w, uint64_t b)
{
    if (b) fprintf(f, " %*.2f", w, gib(b));
    else fprintf(f, " %*s", w, "-");
}

void res_breakdown(FILE *f, const sim_result *rs, size_t n)
{
    int w[64];
    n = n > 64 ? 64 : n;
    fprintf(f, "device memory at the peak of live bytes (GiB requested; at the failing request "
               "for an oom)\n%-22s", "kind");
    for (size_t i = 0; i < n; i++) {
        const char *name = rs[i].policy[0] ? rs[i].policy : "-";
        size_t len = strlen(name);
        w[i] = len > 9 ? (int)len : 9;
        fprintf(f, " %*s", w[i], name);
    }
    fputc('\n', f);
    for (int k = 0; k < BM_COUNT; k++) {
        int any = 0;
        for (size_t i = 0; i < n; i++) any |= rs[i].peak_live_bytes[k] != 0;
        if (!any) continue;
        fprintf(f, "%-22s", bm_kind_name((bm_kind)k));
        for (size_t i = 0; i < n; i++) gib_cell(f, w[i], rs[i].peak_live_bytes[k]);
        fputc('\n', f);
    }
    fprintf(f, "%-22s", "total");
    for (size_t i = 0; i < n; i++) gib_cell(f, w[i], bm_sum(rs[i].peak_live_bytes));
    fprintf(f, "\n%-22s", "peak allocated");
    for (size_t i = 0; i < n; i++) gib_cell(f, w[i], rs[i].peak_allocated_bytes);
    fputc('\n', f);
}

/* Of equal times the earlier result wins (the order the caller listed them in). */
long res_fastest(const sim_result *rs, size_t n, long *second)
{
    long best = -1, next = -1;
    for (size_t i = 0; i < n; i++) {
        if (rs[i].status != RS_OK || !(rs[i].iter_time_s > 0)) continue;
        if (best < 0 || rs[i].iter_time_s < rs[best].iter_time_s) {
            next = best;
            best = (long)i;
        } else if (next < 0 || rs[i].iter_time_s < rs[next].iter_time_s) {
            next = (long)i;
        }
    }
    if (second) *second = next;
    return best;
}

/* The fastest that fits and its lead over the next, then the failures by kind. */
long res_verdict(FILE *f, const sim_result *rs, size_t n)
{
    long second;
    long best = res_fastest(rs, n, &second);
    if (best < 0) fprintf(f, "fastest that fits: none");
    else {
        fprintf(f, "fastest that fits: %s, %.4f s per iteration", rs[best].policy,
                rs[best].iter_time_s);
        if (second >= 0)
            fprintf(f, " (%.1f %% faster than %s)",
                    100.0 * (rs[second].iter_time_s / rs[best].iter_time_s - 1.0),
                    rs[second].policy);
    }
    static const res_status fails[] = { RS_OOM, RS_OOHM, RS_ERROR };
    for (size_t k = 0; k < sizeof fails / sizeof *fails; k++) {
        int first = 1;
        for (size_t i = 0; i < n; i++) {
            if (rs[i].status != fails[k]) continue;
            if (first) fprintf(f, "; %s:", res_status_name(fails[k]));
            fprintf(f, "%s%s", first ? " " : ", ", rs[i].policy[0] ? rs[i].policy : "-");
            first = 0;
        }
    }
    fputc('\n', f);
    return best;
}

void res_notes(FILE *f, const sim_result *rs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rs[i].plan_note[0]) fprintf(f, "note: %s: %s\n", rs[i].policy, rs[i].plan_note);
}

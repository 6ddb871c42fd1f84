/* replay.c — memory-only replay of alloc/free programs through an allocator over the
 * simulated backend (see replay.h). Used by the memsim command (replay), the replay
 * benchmark (replay_bench.c), experiments and tests. */
#define _POSIX_C_SOURCE 200809L
#include "sim/replay.h"

#include <stdlib.h>
#include <string.h>

#include "sim/simbackend.h"
#include "traces/trace.h"
#include "base/u64map.h"

void replay_opts_default(replay_opts *o)
{
    memset(o, 0, sizeof *o);
    o->allocator = "caching";
}

const char *replay_status_name(replay_status s) { return s == REPLAY_OK ? "ok" : "oom"; }

void replay_result_init(replay_result *r) { memset(r, 0, sizeof *r); }

void replay_result_clear(replay_result *r)
{
    free(r->segment_bytes);
    free(r->oom_dump);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- the replay core */

typedef struct rstate {
    simbe_t *be;
    alloc_t *a;
    u64map *addr_of;             /* live tensor id -> address */
    replay_result *r;
    const char *src;             /* file name for messages, or "events" */
    int oomed;                   /* the allocator ran out of memory: the rest is only checked */
} rstate;

/* After an OOM the allocator is left as it failed; the rest of the trace is still read and
 * checked (a tensor allocated while live, a free of one that is not), so that a malformed
 * trace reports its error rather than the OOM. Tensors allocated from then on, and the one
 * that failed, are kept in addr_of under this address, never handed to the allocator. */
#define RS_UNPLACED UINT64_MAX

static ms_status rs_open(rstate *s, const replay_opts *o, replay_result *r, const char *src,
                         ms_error *err)
{
    memset(s, 0, sizeof *s);
    s->r = r;
    s->src = src;
    replay_result_clear(r);
    if (o->capacity_bytes == 0 && (!o->machine || machine_usable_bytes(o->machine) == 0))
        return ms_fail(err, MS_ERR_INVALID,
                       "replay: a device capacity or a machine with usable memory is needed");
    s->be = simbe_new(o->machine, o->capacity_bytes, 0);
    s->addr_of = u64map_new(64); /* grows with the live set; small stays in cache */
    if (!s->be || !s->addr_of) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    int scripted = o->segment_addrs && o->segment_sizes && o->n_segment_addrs;
    /* Without recorded addresses (or with --addresses recorded on a trace that has none)
     * the machine profile says in which order the driver hands segments out. */
    if (o->descending_addresses ||
        (!scripted && !o->ignore_recorded_addresses && o->machine && o->machine->malloc_top_down))
        simbe_set_descending(s->be, 1);
    if (scripted) {
        if (simbe_set_segment_script(s->be, o->segment_addrs, o->segment_sizes,
                                     o->n_segment_addrs) != MS_OK)
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        r->recorded_addresses = o->n_segment_addrs;
    }
    alloc_config cfg;
    if (o->cfg) cfg = *o->cfg;
    else alloc_config_default(&cfg);
    if (o->check_every_op) cfg.check_every_op = 1;
    return alloc_new(o->allocator ? o->allocator : "caching", &cfg, simbe_backend(s->be), &s->a,
                     err);
}

/* Captures the allocator's dump as a string (NULL if out of memory). */
static char *dump_text(const alloc_t *a)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    alloc_dump(a, f);
    fclose(f);
    return buf;
}

static void charge(rstate *s)
{
    int synced = 0;
    s->r->alloc_time_us += simbe_take_cost_us(s->be, &synced);
    s->r->sync_calls += synced != 0;
}

static ms_status where(const rstate *s, ms_error *err, ms_status st, uint64_t line,
                       uint64_t index, const char *msg, uint64_t id)
{
    if (line) return ms_fail_at(err, st, s->src, line, "%s (tensor %llu)", msg,
                                (unsigned long long)id);
    return ms_fail(err, st, "%s: event %llu: %s (tensor %llu)", s->src,
                   (unsigned long long)index, msg, (unsigned long long)id);
}

/* One alloc. Sets *oom when the allocator ran out of memory (the allocator is not used
 * after that; the remaining events are only checked). */
static ms_status rs_alloc(rstate *s, uint64_t id, uint64_t bytes, int stream, uint64_t line,
                          int *oom, ms_error *err)
{
    replay_result *r = s->r;
    int added;
    /* one probe for the check and the insertion; nothing else touches the map before the
     * slot is filled */
    uint64_t *slot = u64map_slot(s->addr_of, id, &added);
    if (!slot) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    if (!added) return where(s, err, MS_ERR_PARSE, line, r->events, "allocated while live", id);
    if (s->oomed) {
        *slot = RS_UNPLACED;
        return MS_OK;
    }
    uint64_t addr = 0;
    ms_status st = alloc_block(s->a, bytes, stream, id, &addr);
    charge(s);
    if (st == MS_ERR_OOM) {
        *oom = 1;
        r->status = REPLAY_OOM;
        r->oom_index = r->events;
        r->oom_line = line;
        r->oom_id = id;
        r->oom_bytes = bytes;
        r->oom_stream = stream;
        r->oom_dump = dump_text(s->a);
        s->oomed = 1;
        *slot = RS_UNPLACED;
        return MS_OK;
    }
    if (st != MS_OK)
        return where(s, err, st, line, r->events,
                     st == MS_ERR_INVALID ? "allocator invariant violated on alloc"
                                          : "allocator failed on alloc", id);
    *slot = addr;
    r->events++;
    r->allocs++;
    return MS_OK;
}

static ms_status rs_free(rstate *s, uint64_t id, uint64_t line, ms_error *err)
{
    replay_result *r = s->r;
    uint64_t addr;
    if (!u64map_del(s->addr_of, id, &addr))
        return where(s, err, MS_ERR_PARSE, line, r->events, "free of a tensor that is not live",
                     id);
    if (s->oomed) return MS_OK;
    ms_status st = alloc_release(s->a, addr);
    charge(s);
    if (st != MS_OK)
        return where(s, err, st, line, r->events,
                     st == MS_ERR_INVALID ? "allocator invariant violated on free"
                                          : "allocator failed on free", id);
    r->events++;
    r->frees++;
    return MS_OK;
}

/* Fills the result from the allocator and backend, then frees the state. */
static ms_status rs_close(rstate *s, ms_status st, ms_error *err)
{
    replay_result *r = s->r;
    if (s->a && s->be && st == MS_OK) {
        const alloc_stats *as = alloc_get_stats(s->a);
        r->stats = *as;
        r->peak_allocated_bytes = as->allocated_peak_bytes;
        r->peak_reserved_bytes = as->reserved_peak_bytes;
        r->peak_active_bytes = as->active_peak_bytes;
        r->peak_requested_bytes = as->requested_peak_bytes;
        r->device_peak_bytes = simbe_device_peak_bytes(s->be);
        r->recorded_addresses_used = simbe_segment_script_used(s->be);
        r->n_segments = simbe_segment_count(s->be);
        if (r->n_segments) {
            r->segment_bytes = malloc(r->n_segments * sizeof *r->segment_bytes);
            if (!r->segment_bytes) {
                r->n_segments = 0;
                st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
            }
            for (size_t i = 0; r->segment_bytes && i < r->n_segments; i++)
                r->segment_bytes[i] = simbe_segment_bytes(s->be, i);
        }
    }
    alloc_free(s->a);
    simbe_free(s->be);
    u64map_free(s->addr_of);
    if (st != MS_OK) replay_result_clear(r);
    return st;
}

/* Parses one "meta pytorch.segment_allocs.K" value (ADDR:BYTES items, comma-separated) onto
 * the arrays. */
static ms_status parse_segment_allocs(const char *path, const char *v, uint64_t **addrs,
                                      uint64_t **sizes, size_t *n, size_t *cap_a,
                                      size_t *cap_s, ms_error *err)
{
    const char *p = v;
    while (*p) {
        char *end;
        uint64_t a = strtoull(p, &end, 0);
        if (end == p || *end != ':')
            return ms_fail_at(err, MS_ERR_PARSE, path, 0, "meta pytorch.segment_allocs: "
                              "expected ADDR:BYTES at \"%.20s\"", p);
        p = end + 1;
        uint64_t z = strtoull(p, &end, 10);
        if (end == p || (*end && *end != ',') || z == 0)
            return ms_fail_at(err, MS_ERR_PARSE, path, 0, "meta pytorch.segment_allocs: "
                              "expected ADDR:BYTES at \"%.20s\"", p);
        if (ms_grow((void **)addrs, cap_a, *n + 1, sizeof **addrs) != MS_OK ||
            ms_grow((void **)sizes, cap_s, *n + 1, sizeof **sizes) != MS_OK)
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        (*addrs)[*n] = a;
        (*sizes)[(*n)++] = z;
        p = *end ? end + 1 : end;
    }
    return MS_OK;
}

/* The trace's recorded segment addresses, lines .0, .1, ... in order (none: *n = 0). */
static ms_status recorded_addresses(const char *path, trace_reader *tr, uint64_t **addrs,
                                    uint64_t **sizes, size_t *n, ms_error *err)
{
    size_t cap_a = 0, cap_s = 0;
    *addrs = *sizes = NULL;
    *n = 0;
    for (size_t k = 0;; k++) {
        char key[64];
        const char *v = NULL;
        snprintf(key, sizeof key, "pytorch.segment_allocs.%zu", k);
        for (size_t i = 0; !v && i < trace_reader_meta_count(tr); i++)
            if (!strcmp(trace_reader_meta_key(tr, i), key)) v = trace_reader_meta_value(tr, i);
        if (!v) return MS_OK;
        ms_status st = parse_segment_allocs(path, v, addrs, sizes, n, &cap_a, &cap_s, err);
        if (st != MS_OK) return st;
    }
}

ms_status replay_file(const char *path, const replay_opts *o, replay_result *r, ms_error *err)
{
    rstate s;
    trace_reader *tr = NULL;
    replay_opts oo = *o;
    uint64_t *addrs = NULL, *sizes = NULL;
    size_t n_addrs = 0;
    ms_status st = trace_reader_open(path, &tr, err);
    if (st == MS_OK && !o->segment_addrs && !o->ignore_recorded_addresses) {
        st = recorded_addresses(path, tr, &addrs, &sizes, &n_addrs, err);
        oo.segment_addrs = addrs;
        oo.segment_sizes = sizes;
        oo.n_segment_addrs = n_addrs;
    }
    if (st != MS_OK) {
        trace_reader_free(tr);
        free(addrs);
        free(sizes);
        replay_result_clear(r);
        return st;
    }
    st = rs_open(&s, &oo, r, path, err);
    free(addrs);
    free(sizes);
    int oom = 0;
    trace_rec rec;
    while (st == MS_OK) {
        st = trace_reader_next(tr, &rec, err);
        if (st == MS_ERR_LIMIT) {
            st = MS_OK;
            break;
        }
        if (st != MS_OK) break;
        if (rec.type == TR_ALLOC)
            st = rs_alloc(&s, rec.u.alloc.id, rec.u.alloc.bytes, rec.u.alloc.stream, rec.line,
                          &oom, err);
        else if (rec.type == TR_FREE)
            st = rs_free(&s, rec.u.free_id, rec.line, err);
    }
    trace_reader_free(tr);
    return rs_close(&s, st, err);
}

ms_status replay_events(const replay_event *ev, size_t n, const replay_opts *o,
                        replay_result *r, ms_error *err)
{
    rstate s;
    ms_status st = rs_open(&s, o, r, "events", err);
    int oom = 0;
    for (size_t i = 0; st == MS_OK && i < n; i++)
        st = ev[i].is_alloc ? rs_alloc(&s, ev[i].id, ev[i].bytes, ev[i].stream, 0, &oom, err)
                            : rs_free(&s, ev[i].id, 0, err);
    return rs_close(&s, st, err);
}

/* ---------------------------------------------------------------- printing */

void replay_print(FILE *f, const replay_result *r)
{
    char b[32];
    const alloc_stats *s = &r->stats;
    fprintf(f, "status            %s\n", replay_status_name(r->status));
    fprintf(f, "events            %llu (%llu allocs, %llu frees)\n",
            (unsigned long long)r->events, (unsigned long long)r->allocs,
            (unsigned long long)r->frees);
    fprintf(f, "peak allocated    %llu (%s)\n", (unsigned long long)r->peak_allocated_bytes,
            ms_fmt_bytes(r->peak_allocated_bytes, b, sizeof b));
    fprintf(f, "peak reserved     %llu (%s)\n", (unsigned long long)r->peak_reserved_bytes,
            ms_fmt_bytes(r->peak_reserved_bytes, b, sizeof b));
    fprintf(f, "peak active       %llu (%s)\n", (unsigned long long)r->peak_active_bytes,
            ms_fmt_bytes(r->peak_active_bytes, b, sizeof b));
    fprintf(f, "peak requested    %llu (%s)\n", (unsigned long long)r->peak_requested_bytes,
            ms_fmt_bytes(r->peak_requested_bytes, b, sizeof b));
    if (r->peak_reserved_bytes)
        fprintf(f, "fragmentation     %.4f (1 - peak active / peak reserved)\n",
                1.0 - (double)r->peak_active_bytes / (double)r->peak_reserved_bytes);
    fprintf(f, "segments          %llu allocated, %llu freed\n",
            (unsigned long long)s->num_segment_allocs, (unsigned long long)s->num_segment_frees);
    fprintf(f, "alloc retries     %llu\n", (unsigned long long)s->num_alloc_retries);
    fprintf(f, "syncs             %llu\n", (unsigned long long)s->num_syncs);
    fprintf(f, "allocator time    %.1f us\n", r->alloc_time_us);
    if (r->recorded_addresses)
        fprintf(f, "segment addresses recorded: %zu of %zu used\n", r->recorded_addresses_used,
                r->recorded_addresses);
    if (r->status == REPLAY_OOM) {
        fprintf(f, "oom               event %llu", (unsigned long long)r->oom_index);
        if (r->oom_line) fprintf(f, " (line %llu)", (unsigned long long)r->oom_line);
        fprintf(f, ": tensor %llu, %llu bytes (%s), stream %d\n", (unsigned long long)r->oom_id,
                (unsigned long long)r->oom_bytes, ms_fmt_bytes(r->oom_bytes, b, sizeof b),
                r->oom_stream);
        if (r->oom_dump) fputs(r->oom_dump, f);
    }
}

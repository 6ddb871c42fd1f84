/* timeline.c — spans and memory samples of one simulated run, and their two file formats
 * (see timeline.h and docs/SIMULATOR.md). Used by sim/exec.c. */
#include "sim/timeline.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct span {
    double s, e;
    int track;
    int64_t index, op;
    uint64_t tensor, bytes;
    int has_tensor;
    size_t seq;                 /* insertion order: the tie-breaker when sorting */
    char name[TL_NAME_MAX];
    char cat[16];
} span;

typedef struct sample {
    double t;
    uint64_t alloc, resv, active, host;
    uint64_t kinds[BM_COUNT];   /* device bytes live by kind */
} sample;

struct tl {
    span *sp;
    size_t nsp, capsp;
    sample *mem;
    size_t nmem, capmem;
};

tl_t *tl_new(void) { return calloc(1, sizeof(tl_t)); }

void tl_free(tl_t *t)
{
    if (!t) return;
    free(t->sp);
    free(t->mem);
    free(t);
}

size_t tl_span_count(const tl_t *t) { return t->nsp; }
size_t tl_mem_count(const tl_t *t) { return t->nmem; }

static void copy_str(char *dst, size_t n, const char *src)
{
    size_t k = 0;
    if (src)
        for (; src[k] && k + 1 < n; k++) dst[k] = src[k];
    dst[k] = 0;
}

ms_status tl_span(tl_t *t, const tl_span_info *s)
{
    if (ms_grow((void **)&t->sp, &t->capsp, t->nsp + 1, sizeof *t->sp) != MS_OK)
        return MS_ERR_NOMEM;
    span *p = &t->sp[t->nsp];
    p->s = s->start_us;
    p->e = s->end_us < s->start_us ? s->start_us : s->end_us;
    p->track = s->track;
    p->index = s->index;
    p->op = s->op;
    p->tensor = s->tensor;
    p->has_tensor = s->has_tensor;
    p->bytes = s->bytes;
    p->seq = t->nsp++;
    copy_str(p->name, sizeof p->name, s->name);
    copy_str(p->cat, sizeof p->cat, s->cat);
    return MS_OK;
}

ms_status tl_mem(tl_t *t, double time_us, uint64_t allocated_bytes, uint64_t reserved_bytes,
                 uint64_t active_bytes, uint64_t host_bytes, const uint64_t *kinds)
{
    sample n = { time_us, allocated_bytes, reserved_bytes, active_bytes, host_bytes, { 0 } };
    if (kinds) memcpy(n.kinds, kinds, sizeof n.kinds);
    if (t->nmem > 0) {
        const sample *q = &t->mem[t->nmem - 1];
        if (q->alloc == n.alloc && q->resv == n.resv && q->active == n.active &&
            q->host == n.host && !memcmp(q->kinds, n.kinds, sizeof n.kinds))
            return MS_OK;
    }
    if (ms_grow((void **)&t->mem, &t->capmem, t->nmem + 1, sizeof *t->mem) != MS_OK)
        return MS_ERR_NOMEM;
    t->mem[t->nmem++] = n;
    return MS_OK;
}

static int span_cmp(const void *a, const void *b)
{
    const span *x = *(const span *const *)a, *y = *(const span *const *)b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void put_json_str(ms_out *o, const char *s)
{
    ms_out_write(o, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') ms_out_printf(o, "\\%c", c);
        else if (c < 0x20) ms_out_printf(o, "\\u%04x", c);
        else ms_out_write(o, s, 1);
    }
    ms_out_write(o, "\"", 1);
}

/* Times go out as whole nanoseconds, each bound rounded by itself from the simulator's time
 * (microseconds, a double): spans that follow one another on a track stay apart, and a
 * span's end is its start plus its duration exactly. Written as microseconds with three
 * decimals, which is that nanosecond count. */
static int64_t to_ns(double us)
{
    return us > 0 ? (int64_t)llround(us * 1000.0) : 0;
}

static void put_us(ms_out *o, int64_t ns)
{
    ms_out_printf(o, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void put_meta(ms_out *o, const char *what, int pid, int tid, const char *name,
                     int *first)
{
    ms_out_printf(o, "%s\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                  *first ? "" : ",", what, pid, tid);
    put_json_str(o, name);
    ms_out_printf(o, "}}");
    *first = 0;
}

static void put_span(ms_out *o, int pid, const span *p)
{
    int64_t s = to_ns(p->s), e = to_ns(p->e);
    ms_out_printf(o, ",\n{\"name\":");
    put_json_str(o, p->name);
    ms_out_printf(o, ",\"cat\":");
    put_json_str(o, p->cat[0] ? p->cat : "action");
    ms_out_printf(o, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", pid, p->track);
    put_us(o, s);
    ms_out_printf(o, ",\"dur\":");
    put_us(o, e > s ? e - s : 0);
    ms_out_printf(o, ",\"args\":{");
    const char *sep = "";
    if (p->index >= 0) {
        ms_out_printf(o, "\"index\":%lld", (long long)p->index);
        sep = ",";
    }
    if (p->op >= 0) {
        ms_out_printf(o, "%s\"op\":%lld", sep, (long long)p->op);
        sep = ",";
    }
    if (p->has_tensor) {
        ms_out_printf(o, "%s\"tensor\":%llu", sep, (unsigned long long)p->tensor);
        sep = ",";
    }
    if (p->bytes) ms_out_printf(o, "%s\"bytes\":%llu", sep, (unsigned long long)p->bytes);
    ms_out_printf(o, "}}");
}

static void put_counter(ms_out *o, int pid, const char *name, double t, uint64_t v)
{
    ms_out_printf(o, ",\n{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"ts\":", name, pid);
    put_us(o, to_ns(t));
    ms_out_printf(o, ",\"args\":{\"bytes\":%llu}}", (unsigned long long)v);
}

/* One counter with a value per kind: Perfetto and chrome://tracing stack them. */
static void put_kinds(ms_out *o, int pid, double t, const uint64_t *kinds)
{
    ms_out_printf(o, ",\n{\"name\":\"device memory by kind\",\"ph\":\"C\",\"pid\":%d,"
                     "\"ts\":", pid);
    put_us(o, to_ns(t));
    ms_out_printf(o, ",\"args\":{");
    for (int k = 0; k < BM_COUNT; k++)
        ms_out_printf(o, "%s\"%s\":%llu", k ? "," : "", bm_kind_name((bm_kind)k),
                      (unsigned long long)kinds[k]);
    ms_out_printf(o, "}}");
}

/* Spans by (start, insertion order); NULL when out of memory. */
static const span **sorted_spans(const tl_t *t)
{
    const span **order = malloc((t->nsp ? t->nsp : 1) * sizeof *order);
    if (!order) return NULL;
    for (size_t i = 0; i < t->nsp; i++) order[i] = &t->sp[i];
    qsort(order, t->nsp, sizeof *order, span_cmp);
    return order;
}

ms_status tl_write_json_events(const tl_t *t, ms_out *o, int pid, const char *process,
                               const char *const *track_names, size_t ntracks, int *first)
{
    const span **order = sorted_spans(t);
    if (!order) return MS_ERR_NOMEM;
    put_meta(o, "process_name", pid, 0, process, first);
    if (pid != 1)
        ms_out_printf(o, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                         "\"tid\":0,\"args\":{\"sort_index\":%d}}", pid, pid);
    for (size_t i = 0; i < ntracks; i++) {
        put_meta(o, "thread_name", pid, (int)i, track_names[i], first);
        ms_out_printf(o, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                         "\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                      pid, (int)i, (int)i);
    }
    for (size_t i = 0; i < t->nsp; i++) put_span(o, pid, order[i]);
    /* A counter event only where that counter changed (all four at the first sample). */
    for (size_t i = 0; i < t->nmem; i++) {
        const sample *q = &t->mem[i], *p = i ? &t->mem[i - 1] : NULL;
        if (!p || p->alloc != q->alloc) put_counter(o, pid, "allocated", q->t, q->alloc);
        if (!p || p->resv != q->resv) put_counter(o, pid, "reserved", q->t, q->resv);
        if (!p || p->active != q->active) put_counter(o, pid, "active", q->t, q->active);
        if (!p || p->host != q->host) put_counter(o, pid, "host", q->t, q->host);
        if (!p || memcmp(p->kinds, q->kinds, sizeof q->kinds)) put_kinds(o, pid, q->t, q->kinds);
    }
    free(order);
    return MS_OK;
}

ms_status tl_write_json(const tl_t *t, const char *path, const char *const *track_names,
                        size_t ntracks, ms_error *err)
{
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) return st;
    int first = 1;
    ms_out_printf(o, "{\"traceEvents\":[");
    if (tl_write_json_events(t, o, 1, "memsim", track_names, ntracks, &first) != MS_OK) {
        ms_out_abort(o);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    ms_out_printf(o, "\n]}\n");
    return ms_out_commit(o, err);
}

ms_status tl_write_memcsv(const tl_t *t, const char *path, ms_error *err)
{
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) return st;
    ms_out_printf(o, "time_us,allocated_bytes,reserved_bytes,active_bytes,host_bytes");
    for (int k = 0; k < BM_COUNT; k++) ms_out_printf(o, ",%s_bytes", bm_kind_key((bm_kind)k));
    ms_out_printf(o, "\n");
    for (size_t i = 0; i < t->nmem; i++) {
        const sample *q = &t->mem[i];
        ms_out_printf(o, "%.3f,%llu,%llu,%llu,%llu", q->t, (unsigned long long)q->alloc,
                      (unsigned long long)q->resv, (unsigned long long)q->active,
                      (unsigned long long)q->host);
        for (int k = 0; k < BM_COUNT; k++)
            ms_out_printf(o, ",%llu", (unsigned long long)q->kinds[k]);
        ms_out_printf(o, "\n");
    }
    return ms_out_commit(o, err);
}

/* The plot's colour classes (plots/timeline.gp's palette). */
static int interval_kind(const char *cat)
{
    static const char *const cats[] = { "compute", "recompute", "copy", "alloc", "sync", "host" };
    static const int kinds[] = { 0, 1, 2, 3, 3, 4 };
    for (size_t i = 0; i < sizeof cats / sizeof *cats; i++)
        if (strcmp(cat, cats[i]) == 0) return kinds[i];
    return -1;
}

ms_status tl_write_intervals(const tl_t *t, const char *path, ms_error *err)
{
    const span **order = sorted_spans(t);
    if (!order) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) {
        free(order);
        return st;
    }
    ms_out_printf(o, "lane,start_us,end_us,kind\n");
    for (size_t i = 0; i < t->nsp; i++) {
        int k = interval_kind(order[i]->cat);
        if (k >= 0)
            ms_out_printf(o, "%d,%.3f,%.3f,%d\n", order[i]->track, order[i]->s, order[i]->e, k);
    }
    free(order);
    return ms_out_commit(o, err);
}

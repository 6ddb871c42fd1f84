/* import_pytorch.c — turns a PyTorch CUDA caching-allocator trace (the JSON form of
 * torch.cuda.memory._snapshot(), or the capture script's wrapper around it) into a memsim
 * workload trace of alloc / free records, and returns what the allocator itself did
 * (segments, peak reserved bytes, OOMs, memory_stats) as side information. Used by
 * `memsim trace import --from pytorch-snapshot` and by validation experiments; see
 * import_pytorch.h for the API and FORMAT.md for the mapping.
 *
 * What the entries mean (read from PyTorch's CUDACachingAllocator and its Python binding):
 *   alloc            addr = block start, size = the size the caller asked for (before the
 *                    allocator's 512 B / 2 MiB rounding), stream = the cudaStream_t handle
 *                    value (0 for the legacy default stream).
 *   free_requested   the tensor was released; the block may still wait for stream events.
 *   free_completed   the block went back to the allocator's pool: this is the free record.
 *                    size is again the requested size.
 *   segment_alloc    cudaMalloc of size bytes (the rounded segment size); segment_free is
 *                    its cudaFree. segment_map / segment_unmap: expandable segments mapping
 *                    or unmapping size bytes of physical memory.
 *   oom              the allocator raised an OOM; "device_free" replaces "addr".
 *   snapshot, annotate and any other action: skipped (counted in other_actions).
 *
 * Memory: the whole file is read (bounded, 2 GiB by default), but it is never turned into
 * one JSON tree: a small scanner walks the outer objects and lists and hands each value
 * (one trace entry, one segment) to jansson on its own, so a trace of millions of entries
 * costs its text plus the records, not a DOM of every entry. */
#define _POSIX_C_SOURCE 200809L
#include "traces/import_pytorch.h"

#include "base/u64map.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IMP_DEFAULT_MAX_FILE ((uint64_t)2 << 30)   /* 2 GiB */
#define IMP_DEFAULT_MAX_SIZE ((uint64_t)1 << 50)   /* 1 PiB: no real GPU block is larger */
#define IMP_HARD_MAX_SIZE ((uint64_t)1 << 50)      /* the trace format's own limit */
/* trace.c keeps meta values to 4096 characters: a longer segment list is left out. */
#define IMP_MAX_SEGMETA ((size_t)4096)
/* Lines of "meta pytorch.segment_allocs.K" at most (about 200 000 segments). */
#define IMP_MAX_SEGALLOC_LINES 1024
#define IMP_MAX_CAPTURE_META 64                    /* meta entries copied from the wrapper */
#define IMP_MAX_CAPTURE_KEY 40                     /* "pytorch.capture." + this < 64 */
/* Running byte sums stay below 2^61 so that sums and differences of two never overflow. */
#define IMP_SUM_LIMIT ((int64_t)1 << 61)
#define IMP_MAX_DEVICES 4096
/* Name given to imported tensors: the allocator trace knows none. The text writer shows an
 * empty name as "-". */
#define IMP_NO_NAME ""

typedef struct imp_ctx {
    const char *path;
    const char *buf;
    size_t len, pos;
    imp_options opt;
    imp_result *res;
    trace_t *t;
    ms_error *err;
    int depth;                 /* 1 inside the wrapper's "snapshot" object */
    int seen_traces, seen_segments, seen_stats, seen_snapshot, seen_meta;
    char where[64];            /* "device_traces[3]" for messages */
    uint64_t cur_entries;      /* entries seen in the current device list */
    int chosen;                /* device imported; -1 while none had entries */
    u64map *live_id;           /* addr -> tensor id of the live allocation there */
    u64map *live_bytes;        /* addr -> its requested bytes */
    u64map *requested;         /* addr -> 1 between free_requested and free_completed */
    u64map *stream_idx;        /* raw stream value -> trace stream number */
    size_t stream_cap, seg_cap, seg_addr_cap;
    uint64_t next_id;
    int64_t reserved, reserved_min, reserved_max; /* net change since the first entry */
    int64_t live_sum;
    uint64_t *dev_seg_bytes;   /* per device: sum of total_size of "segments" */
    size_t dev_seg_cap;
    json_t *capture_meta;      /* the wrapper's "meta" object, copied to meta lines last */
} imp_ctx;

void imp_options_init(imp_options *o)
{
    o->device = -1;
    o->max_file_bytes = IMP_DEFAULT_MAX_FILE;
    o->max_size_bytes = IMP_DEFAULT_MAX_SIZE;
    o->segment_sizes_meta_max = IMP_MAX_SEGMETA;
}

static void imp_options_fix(const imp_options *in, imp_options *o)
{
    imp_options_init(o);
    if (in) *o = *in;
    if (!o->max_file_bytes) o->max_file_bytes = IMP_DEFAULT_MAX_FILE;
    /* jansson reports positions as int: one value must stay below INT_MAX bytes. */
    if (o->max_file_bytes > (uint64_t)INT_MAX) o->max_file_bytes = (uint64_t)INT_MAX;
    if (!o->max_size_bytes) o->max_size_bytes = IMP_DEFAULT_MAX_SIZE;
    if (o->max_size_bytes > IMP_HARD_MAX_SIZE) o->max_size_bytes = IMP_HARD_MAX_SIZE;
    if (!o->segment_sizes_meta_max || o->segment_sizes_meta_max > IMP_MAX_SEGMETA)
        o->segment_sizes_meta_max = IMP_MAX_SEGMETA;
}

void imp_result_release(imp_result *res)
{
    if (!res) return;
    free(res->stream_values);
    free(res->segment_sizes);
    free(res->segment_addrs);
    res->stream_values = NULL;
    res->segment_sizes = NULL;
    res->segment_addrs = NULL;
    res->streams = 0;
    res->segments = 0;
}

/* ---- positions and messages ---- */

/* Line and column (1-based, in UTF-8 characters like jansson) of byte offset off. Only
 * called when something failed, so the scan from the start costs nothing in normal runs. */
static void imp_linecol(const char *buf, size_t off, uint64_t *line, uint64_t *col)
{
    uint64_t l = 1, c = 0;
    for (size_t i = 0; i < off; i++) {
        if (buf[i] == '\n') {
            l++;
            c = 0;
        } else if (((unsigned char)buf[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c + 1;
}

static ms_status imp_fail(imp_ctx *c, ms_status st, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ms_status imp_fail(imp_ctx *c, ms_status st, size_t off, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint64_t line, col;
    imp_linecol(c->buf, off > c->len ? c->len : off, &line, &col);
    return ms_fail(c->err, st, "%s:%llu:%llu: %s", c->path, (unsigned long long)line,
                   (unsigned long long)col, msg);
}

static const char *imp_describe(imp_ctx *c, char *tmp, size_t n)
{
    if (c->pos >= c->len) return "end of input";
    unsigned char ch = (unsigned char)c->buf[c->pos];
    if (ch >= 0x20 && ch < 0x7f) snprintf(tmp, n, "'%c'", ch);
    else snprintf(tmp, n, "byte 0x%02x", ch);
    return tmp;
}

/* ---- the outer scanner: punctuation here, every value through jansson ---- */

static int imp_peek(imp_ctx *c)
{
    while (c->pos < c->len) {
        char ch = c->buf[c->pos];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        c->pos++;
    }
    return c->pos < c->len ? (unsigned char)c->buf[c->pos] : -1;
}

/* Decodes the one JSON value at the current position and moves past it. */
static ms_status imp_value(imp_ctx *c, json_t **out)
{
    imp_peek(c);
    size_t start = c->pos;
    json_error_t e;
    memset(&e, 0, sizeof e);
    *out = NULL;
    json_t *v = json_loadb(c->buf + start, c->len - start,
                           JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                           &e);
    if (!v) {
        size_t off = start + (e.position > 0 ? (size_t)e.position - 1 : 0);
        return imp_fail(c, MS_ERR_PARSE, off, "%s", e.text[0] ? e.text : "invalid JSON");
    }
    c->pos = start + (size_t)e.position;
    *out = v;
    return MS_OK;
}

static ms_status imp_skip_value(imp_ctx *c)
{
    json_t *v = NULL;
    ms_status st = imp_value(c, &v);
    json_decref(v);
    return st;
}

typedef ms_status (*imp_elem_fn)(imp_ctx *c, size_t index);
typedef ms_status (*imp_member_fn)(imp_ctx *c, const char *key, size_t key_off);

static ms_status imp_walk_array(imp_ctx *c, const char *what, imp_elem_fn fn)
{
    char tmp[16];
    if (imp_peek(c) != '[')
        return imp_fail(c, MS_ERR_PARSE, c->pos, "%s must be a list, found %s", what,
                        imp_describe(c, tmp, sizeof tmp));
    c->pos++;
    if (imp_peek(c) == ']') {
        c->pos++;
        return MS_OK;
    }
    for (size_t i = 0;; i++) {
        ms_status st = fn(c, i);
        if (st != MS_OK) return st;
        int p = imp_peek(c);
        c->pos++;
        if (p == ',') continue;
        if (p == ']') return MS_OK;
        c->pos--;
        return imp_fail(c, MS_ERR_PARSE, c->pos, "expected ',' or ']' in %s, found %s", what,
                        imp_describe(c, tmp, sizeof tmp));
    }
}

static ms_status imp_walk_object(imp_ctx *c, const char *what, imp_member_fn fn)
{
    char tmp[16];
    if (imp_peek(c) != '{')
        return imp_fail(c, MS_ERR_PARSE, c->pos, "%s must be a JSON object, found %s", what,
                        imp_describe(c, tmp, sizeof tmp));
    c->pos++;
    if (imp_peek(c) == '}') {
        c->pos++;
        return MS_OK;
    }
    /* the keys seen so far (an object here has few members): a repeat is an error, as
     * jansson's JSON_REJECT_DUPLICATES makes it for the values decoded whole */
    json_t *seen = json_object();
    if (!seen) return ms_fail(c->err, MS_ERR_NOMEM, "out of memory");
    ms_status st = MS_OK;
    for (;;) {
        if (imp_peek(c) != '"') {
            st = imp_fail(c, MS_ERR_PARSE, c->pos, "expected a string key in %s, found %s",
                          what, imp_describe(c, tmp, sizeof tmp));
            break;
        }
        size_t key_off = c->pos;
        json_t *k = NULL;
        st = imp_value(c, &k);
        if (st != MS_OK) break;
        if (imp_peek(c) != ':') {
            json_decref(k);
            st = imp_fail(c, MS_ERR_PARSE, c->pos, "expected ':' after a key in %s, found %s",
                          what, imp_describe(c, tmp, sizeof tmp));
            break;
        }
        const char *key = json_string_value(k);
        if (json_object_get(seen, key)) {
            st = imp_fail(c, MS_ERR_PARSE, key_off, "duplicate object key '%.60s' in %s", key,
                          what);
            json_decref(k);
            break;
        }
        if (json_object_set_new(seen, key, json_true())) {
            json_decref(k);
            st = ms_fail(c->err, MS_ERR_NOMEM, "out of memory");
            break;
        }
        c->pos++;
        st = fn(c, key, key_off);
        json_decref(k);
        if (st != MS_OK) break;
        int p = imp_peek(c);
        c->pos++;
        if (p == ',') continue;
        if (p == '}') break;
        c->pos--;
        st = imp_fail(c, MS_ERR_PARSE, c->pos, "expected ',' or '}' in %s, found %s", what,
                      imp_describe(c, tmp, sizeof tmp));
        break;
    }
    json_decref(seen);
    return st;
}

/* ---- typed field access with messages ---- */

/* Reads an integer member. Returns MS_OK with *present 0 when absent and !required. */
static ms_status imp_get_int(imp_ctx *c, json_t *o, const char *key, size_t off,
                             const char *label, int required, json_int_t lo, json_int_t hi,
                             json_int_t *out, int *present)
{
    json_t *v = json_object_get(o, key);
    if (present) *present = v != NULL;
    if (!v) {
        if (!required) return MS_OK;
        return imp_fail(c, MS_ERR_PARSE, off, "%s: missing \"%s\"", label, key);
    }
    if (!json_is_integer(v))
        return imp_fail(c, MS_ERR_PARSE, off, "%s: \"%s\" must be an integer", label, key);
    json_int_t x = json_integer_value(v);
    if (x < lo)
        return imp_fail(c, MS_ERR_PARSE, off, "%s: \"%s\" is %lld, below %lld", label, key,
                        (long long)x, (long long)lo);
    if (x > hi)
        return imp_fail(c, MS_ERR_PARSE, off, "%s: \"%s\" is %lld, above the limit %lld", label,
                        key, (long long)x, (long long)hi);
    *out = x;
    return MS_OK;
}

static ms_status imp_get_size(imp_ctx *c, json_t *o, size_t off, const char *label,
                              uint64_t *out)
{
    json_int_t v = 0;
    ms_status st = imp_get_int(c, o, "size", off, label, 1, 0,
                               (json_int_t)c->opt.max_size_bytes, &v, NULL);
    if (st == MS_OK) *out = (uint64_t)v;
    return st;
}

static ms_status imp_get_addr(imp_ctx *c, json_t *o, size_t off, const char *label,
                              uint64_t *out)
{
    json_int_t v = 0;
    ms_status st = imp_get_int(c, o, "addr", off, label, 1, 0, LLONG_MAX, &v, NULL);
    if (st == MS_OK) *out = (uint64_t)v;
    return st;
}

/* ---- records ---- */

static ms_status imp_emit_free(imp_ctx *c, uint64_t addr, size_t off)
{
    uint64_t id = 0, bytes = 0;
    u64map_del(c->live_id, addr, &id);
    u64map_del(c->live_bytes, addr, &bytes);
    u64map_del(c->requested, addr, NULL);
    c->live_sum -= (int64_t)bytes;
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = id;
    ms_status st = trace_append(c->t, &r);
    if (st != MS_OK)
        return imp_fail(c, st, off, "cannot append a free record: %s", ms_status_str(st));
    c->res->frees++;
    return MS_OK;
}

static ms_status imp_stream_number(imp_ctx *c, json_int_t raw, size_t off, int32_t *out)
{
    uint64_t idx;
    if (u64map_get(c->stream_idx, (uint64_t)raw, &idx)) {
        *out = (int32_t)idx;
        return MS_OK;
    }
    imp_result *r = c->res;
    if (r->streams >= (size_t)INT32_MAX)
        return imp_fail(c, MS_ERR_LIMIT, off, "too many distinct streams");
    if (ms_grow((void **)&r->stream_values, &c->stream_cap, r->streams + 1,
                sizeof *r->stream_values) != MS_OK ||
        u64map_put(c->stream_idx, (uint64_t)raw, r->streams) != 0)
        return imp_fail(c, MS_ERR_NOMEM, off, "out of memory");
    r->stream_values[r->streams] = (int64_t)raw;
    *out = (int32_t)r->streams++;
    return MS_OK;
}

static ms_status imp_on_alloc(imp_ctx *c, json_t *e, size_t off, const char *label)
{
    uint64_t addr = 0, size = 0;
    json_int_t stream = 0;
    ms_status st = imp_get_addr(c, e, off, label, &addr);
    if (st == MS_OK) st = imp_get_size(c, e, off, label, &size);
    if (st == MS_OK) st = imp_get_int(c, e, "stream", off, label, 1, LLONG_MIN, LLONG_MAX,
                                      &stream, NULL);
    if (st != MS_OK) return st;
    if (size == 0) {
        /* PyTorch never records these; a 0-byte tensor would only confuse a replay. */
        c->res->zero_size_allocs++;
        return MS_OK;
    }
    if (u64map_get(c->live_id, addr, NULL)) {
        /* Two live blocks cannot share an address: a free was lost. Free the old one. */
        c->res->live_addr_reused++;
        if ((st = imp_emit_free(c, addr, off)) != MS_OK) return st;
    }
    int32_t sidx = 0;
    if ((st = imp_stream_number(c, stream, off, &sidx)) != MS_OK) return st;
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    r.u.alloc.id = c->next_id++;
    r.u.alloc.bytes = size;
    r.u.alloc.cls = TC_OTHER;
    r.u.alloc.layer = -1;
    r.u.alloc.stream = sidx;
    r.u.alloc.tok_scaled = 0;
    r.u.alloc.producer = -1;
    snprintf(r.u.alloc.name, sizeof r.u.alloc.name, "%s", IMP_NO_NAME);
    if ((st = trace_append(c->t, &r)) != MS_OK)
        return imp_fail(c, st, off, "%s: cannot append an alloc record: %s", label,
                        ms_status_str(st));
    if (u64map_put(c->live_id, addr, r.u.alloc.id) != 0 ||
        u64map_put(c->live_bytes, addr, size) != 0)
        return imp_fail(c, MS_ERR_NOMEM, off, "out of memory");
    c->res->allocs++;
    c->live_sum += (int64_t)size;
    if (c->live_sum > IMP_SUM_LIMIT)
        return imp_fail(c, MS_ERR_PARSE, off, "%s: live bytes exceed 2^61", label);
    if ((uint64_t)c->live_sum > c->res->peak_requested_bytes)
        c->res->peak_requested_bytes = (uint64_t)c->live_sum;
    return MS_OK;
}

static ms_status imp_on_free(imp_ctx *c, json_t *e, size_t off, const char *label,
                             int completed)
{
    uint64_t addr = 0;
    ms_status st = imp_get_addr(c, e, off, label, &addr);
    if (st != MS_OK) return st;
    int live = u64map_get(c->live_id, addr, NULL);
    if (!completed) {
        c->res->free_requested++;
        if (live && u64map_put(c->requested, addr, 1) != 0)
            return imp_fail(c, MS_ERR_NOMEM, off, "out of memory");
        return MS_OK;
    }
    if (!live) {
        /* Allocated before recording began (or lost to the ring buffer): nothing to free. */
        c->res->unknown_frees++;
        return MS_OK;
    }
    return imp_emit_free(c, addr, off);
}

static ms_status imp_on_segment(imp_ctx *c, json_t *e, size_t off, const char *label,
                                int sign, uint64_t *counter, int record_size)
{
    uint64_t size = 0, addr = 0;
    ms_status st = imp_get_size(c, e, off, label, &size);
    json_int_t a = 0;
    if (st == MS_OK && record_size)  /* optional: without it a replay cannot reuse it */
        st = imp_get_int(c, e, "addr", off, label, 0, 0, LLONG_MAX, &a, NULL);
    addr = (uint64_t)a;
    if (st != MS_OK) return st;
    imp_result *r = c->res;
    if (record_size) {
        if (ms_grow((void **)&r->segment_sizes, &c->seg_cap, r->segments + 1,
                    sizeof *r->segment_sizes) != MS_OK ||
            ms_grow((void **)&r->segment_addrs, &c->seg_addr_cap, r->segments + 1,
                    sizeof *r->segment_addrs) != MS_OK)
            return imp_fail(c, MS_ERR_NOMEM, off, "out of memory");
        r->segment_sizes[r->segments] = size;
        r->segment_addrs[r->segments] = addr;
    }
    (*counter)++;
    c->reserved += sign * (int64_t)size;
    if (c->reserved > IMP_SUM_LIMIT || c->reserved < -IMP_SUM_LIMIT)
        return imp_fail(c, MS_ERR_PARSE, off, "%s: reserved bytes exceed 2^61", label);
    if (c->reserved > c->reserved_max) c->reserved_max = c->reserved;
    if (c->reserved < c->reserved_min) c->reserved_min = c->reserved;
    return MS_OK;
}

static ms_status imp_on_entry(imp_ctx *c, json_t *e, size_t off, size_t i)
{
    char label[96];
    imp_result *r = c->res;
    json_t *a = json_object_get(e, "action");
    snprintf(label, sizeof label, "%s[%zu]", c->where, i);
    if (!json_is_string(a))
        return imp_fail(c, MS_ERR_PARSE, off, "%s: %s \"action\"", label,
                        a ? "non-string" : "missing");
    const char *act = json_string_value(a);
    snprintf(label, sizeof label, "%s[%zu] (%.24s)", c->where, i, act);
    json_t *tm = json_object_get(e, "time_us");
    if (json_is_number(tm)) {
        double t = json_number_value(tm);
        if (!(r->has & IMP_HAS_TIME)) r->first_time_us = t;
        r->last_time_us = t;
        r->has |= IMP_HAS_TIME;
    }
    if (!strcmp(act, "alloc")) return imp_on_alloc(c, e, off, label);
    if (!strcmp(act, "free_requested")) return imp_on_free(c, e, off, label, 0);
    if (!strcmp(act, "free_completed")) return imp_on_free(c, e, off, label, 1);
    if (!strcmp(act, "segment_alloc"))
        return imp_on_segment(c, e, off, label, +1, &r->segments, 1);
    if (!strcmp(act, "segment_free"))
        return imp_on_segment(c, e, off, label, -1, &r->segment_frees, 0);
    if (!strcmp(act, "segment_map"))
        return imp_on_segment(c, e, off, label, +1, &r->segment_maps, 0);
    if (!strcmp(act, "segment_unmap"))
        return imp_on_segment(c, e, off, label, -1, &r->segment_unmaps, 0);
    if (!strcmp(act, "oom")) {
        r->ooms++;
        return MS_OK;
    }
    r->other_actions++;
    return MS_OK;
}

/* ---- the walkers ---- */

static ms_status imp_entry_elem(imp_ctx *c, size_t i)
{
    imp_peek(c);
    size_t off = c->pos;
    json_t *e = NULL;
    ms_status st = imp_value(c, &e);
    if (st != MS_OK) return st;
    if (!json_is_object(e)) st = imp_fail(c, MS_ERR_PARSE, off, "%s[%zu]: entry must be an "
                                          "object", c->where, i);
    else st = imp_on_entry(c, e, off, i);
    json_decref(e);
    c->res->entries += st == MS_OK;
    c->cur_entries++;
    return st;
}

static ms_status imp_skip_elem(imp_ctx *c, size_t i)
{
    (void)i;
    return imp_skip_value(c);
}

static ms_status imp_device_elem(imp_ctx *c, size_t d)
{
    if (d >= (size_t)INT_MAX) return imp_fail(c, MS_ERR_PARSE, c->pos, "too many devices");
    c->res->devices = (int)d + 1;
    int take = c->opt.device >= 0 ? (int)d == c->opt.device : c->chosen < 0;
    snprintf(c->where, sizeof c->where, "device_traces[%zu]", d);
    if (!take) return imp_walk_array(c, c->where, imp_skip_elem);
    c->cur_entries = 0;
    ms_status st = imp_walk_array(c, c->where, imp_entry_elem);
    if (st == MS_OK && (c->cur_entries > 0 || c->opt.device >= 0)) c->chosen = (int)d;
    return st;
}

static ms_status imp_segment_elem(imp_ctx *c, size_t i)
{
    imp_peek(c);
    size_t off = c->pos;
    json_t *s = NULL;
    ms_status st = imp_value(c, &s);
    if (st != MS_OK) return st;
    char label[48];
    snprintf(label, sizeof label, "segments[%zu]", i);
    json_int_t dev = 0, total = 0;
    if (!json_is_object(s)) st = imp_fail(c, MS_ERR_PARSE, off, "%s must be an object", label);
    /* Snapshots without "device" come from one-device runs: count them as device 0. */
    if (st == MS_OK)
        st = imp_get_int(c, s, "device", off, label, 0, 0, IMP_MAX_DEVICES - 1, &dev, NULL);
    if (st == MS_OK)
        st = imp_get_int(c, s, "total_size", off, label, 1, 0,
                         (json_int_t)c->opt.max_size_bytes, &total, NULL);
    json_decref(s);
    if (st != MS_OK) return st;
    if ((size_t)dev >= c->dev_seg_cap) {
        size_t old = c->dev_seg_cap;
        if (ms_grow((void **)&c->dev_seg_bytes, &c->dev_seg_cap, (size_t)dev + 1,
                    sizeof *c->dev_seg_bytes) != MS_OK)
            return imp_fail(c, MS_ERR_NOMEM, off, "out of memory");
        memset(c->dev_seg_bytes + old, 0, (c->dev_seg_cap - old) * sizeof *c->dev_seg_bytes);
    }
    c->dev_seg_bytes[dev] += (uint64_t)total;
    if (c->dev_seg_bytes[dev] > (uint64_t)IMP_SUM_LIMIT)
        return imp_fail(c, MS_ERR_PARSE, off, "%s: segment bytes exceed 2^61", label);
    c->res->has |= IMP_HAS_SEGMENT_STATE;
    return MS_OK;
}

static ms_status imp_read_stats(imp_ctx *c, size_t off)
{
    static const struct { const char *key; unsigned bit; size_t field; } keys[] = {
        {"reserved_bytes.all.peak", IMP_HAS_STATS_RESERVED_PEAK,
         offsetof(imp_result, stats_reserved_peak_bytes)},
        {"allocated_bytes.all.peak", IMP_HAS_STATS_ALLOCATED_PEAK,
         offsetof(imp_result, stats_allocated_peak_bytes)},
        {"num_alloc_retries", IMP_HAS_STATS_RETRIES,
         offsetof(imp_result, stats_num_alloc_retries)},
        {"segment.all.allocated", IMP_HAS_STATS_SEGMENTS,
         offsetof(imp_result, stats_segments_allocated)},
        {"num_device_alloc", IMP_HAS_STATS_DEVICE_ALLOCS,
         offsetof(imp_result, stats_num_device_alloc)},
    };
    json_t *v = NULL;
    ms_status st = imp_value(c, &v);
    if (st != MS_OK) return st;
    if (!json_is_object(v)) st = imp_fail(c, MS_ERR_PARSE, off, "\"memory_stats\" must be an "
                                          "object");
    for (size_t i = 0; st == MS_OK && i < sizeof keys / sizeof *keys; i++) {
        json_int_t x = 0;
        int present = 0;
        st = imp_get_int(c, v, keys[i].key, off, "memory_stats", 0, 0, LLONG_MAX, &x, &present);
        if (st == MS_OK && present) {
            *(uint64_t *)((char *)c->res + keys[i].field) = (uint64_t)x;
            c->res->has |= keys[i].bit;
        }
    }
    json_decref(v);
    return st;
}

static ms_status imp_root_member(imp_ctx *c, const char *key, size_t off);

/* One flag per key: a second "device_traces" would silently mix two recordings. */
static ms_status imp_once(imp_ctx *c, int *seen, const char *key, size_t off)
{
    if ((*seen)++) return imp_fail(c, MS_ERR_PARSE, off, "duplicate key \"%s\"", key);
    return MS_OK;
}

static ms_status imp_root_member(imp_ctx *c, const char *key, size_t off)
{
    ms_status st;
    if (!strcmp(key, "device_traces")) {
        if ((st = imp_once(c, &c->seen_traces, key, off)) != MS_OK) return st;
        return imp_walk_array(c, "\"device_traces\"", imp_device_elem);
    }
    if (!strcmp(key, "segments")) {
        if ((st = imp_once(c, &c->seen_segments, key, off)) != MS_OK) return st;
        return imp_walk_array(c, "\"segments\"", imp_segment_elem);
    }
    if (c->depth == 0 && !strcmp(key, "snapshot")) {
        if ((st = imp_once(c, &c->seen_snapshot, key, off)) != MS_OK) return st;
        c->depth = 1;
        st = imp_walk_object(c, "\"snapshot\"", imp_root_member);
        c->depth = 0;
        return st;
    }
    if (c->depth == 0 && !strcmp(key, "memory_stats")) {
        if ((st = imp_once(c, &c->seen_stats, key, off)) != MS_OK) return st;
        return imp_read_stats(c, off);
    }
    if (c->depth == 0 && !strcmp(key, "meta")) {
        if ((st = imp_once(c, &c->seen_meta, key, off)) != MS_OK) return st;
        if ((st = imp_value(c, &c->capture_meta)) != MS_OK) return st;
        if (!json_is_object(c->capture_meta))
            return imp_fail(c, MS_ERR_PARSE, off, "\"meta\" must be an object");
        return MS_OK;
    }
    return imp_skip_value(c); /* allocator_settings, host_traces, ...: not needed */
}

/* ---- meta lines ---- */

static ms_status imp_meta_u64(imp_ctx *c, const char *key, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return trace_set_meta(c->t, key, buf);
}

/* Comma-separated list, or NULL when longer than max (the caller then leaves it out). */
static char *imp_join(const uint64_t *u, const int64_t *s, size_t n, size_t max)
{
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char item[32];
        int k = u ? snprintf(item, sizeof item, "%s%llu", i ? "," : "", (unsigned long long)u[i])
                  : snprintf(item, sizeof item, "%s%lld", i ? "," : "", (long long)s[i]);
        if (len + (size_t)k > max) {
            free(out);
            return NULL;
        }
        if (ms_grow((void **)&out, &cap, len + (size_t)k + 1, 1) != MS_OK) {
            free(out);
            return NULL;
        }
        memcpy(out + len, item, (size_t)k + 1);
        len += (size_t)k;
    }
    return out;
}

/* The segment_alloc entries as "meta pytorch.segment_allocs.K" lines (K = 0, 1, ...), each a
 * comma-separated list of ADDR:BYTES items (ADDR in hex) of at most IMP_MAX_SEGMETA
 * characters: the addresses cudaMalloc returned, which replay hands to the allocator (best fit
 * breaks ties by address). Left out entirely beyond IMP_MAX_SEGALLOC_LINES lines or when an
 * entry has no address. */
static int imp_segment_item(const imp_result *r, size_t i, char *item, size_t n)
{
    return snprintf(item, n, "0x%llx:%llu", (unsigned long long)r->segment_addrs[i],
                    (unsigned long long)r->segment_sizes[i]);
}

static ms_status imp_segment_allocs_meta(imp_ctx *c)
{
    const imp_result *r = c->res;
    char line[IMP_MAX_SEGMETA + 1], item[48], key[64];
    if (r->segments == 0) return MS_OK;
    for (size_t i = 0; i < r->segments; i++)
        if (r->segment_addrs[i] == 0) return MS_OK;
    size_t lines = 1, len = 0;
    for (size_t i = 0; i < r->segments; i++) {  /* all lines or none */
        size_t n = (size_t)imp_segment_item(r, i, item, sizeof item);
        if (len && len + 1 + n > IMP_MAX_SEGMETA) lines++, len = 0;
        len += (len ? 1 : 0) + n;
    }
    if (lines > IMP_MAX_SEGALLOC_LINES) return MS_OK;
    size_t k = 0;
    len = 0;
    for (size_t i = 0; i <= r->segments; i++) {
        size_t n = i < r->segments ? (size_t)imp_segment_item(r, i, item, sizeof item) : 0;
        if (i == r->segments || (len && len + 1 + n > IMP_MAX_SEGMETA)) {
            snprintf(key, sizeof key, "pytorch.segment_allocs.%zu", k++);
            ms_status st = trace_set_meta(c->t, key, line);
            if (st != MS_OK || i == r->segments) return st;
            len = 0;
        }
        if (len) line[len++] = ',';
        memcpy(line + len, item, n + 1);
        len += n;
    }
    return MS_OK;
}

/* Copies the capture script's scalar "meta" entries as pytorch.capture.KEY (the first
 * IMP_MAX_CAPTURE_META). Keys of other characters than [A-Za-z0-9_.-] are left out; control
 * characters in values become '_' and outer blanks are dropped, as meta values require. */
static ms_status imp_capture_meta(imp_ctx *c)
{
    const char *k;
    json_t *v = NULL;
    int copied = 0;
    json_object_foreach(c->capture_meta, k, v) {
        char key[96], val[256];
        size_t kl = strlen(k);
        int ok = kl > 0 && kl <= IMP_MAX_CAPTURE_KEY && copied < IMP_MAX_CAPTURE_META;
        for (size_t i = 0; ok && i < kl; i++) {
            char ch = k[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '.' || ch == '-';
        }
        if (!ok) continue;
        if (json_is_string(v)) snprintf(val, sizeof val, "%s", json_string_value(v));
        else if (json_is_integer(v)) snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) ms_fmt_double(json_real_value(v), val, sizeof val);
        else if (json_is_boolean(v)) snprintf(val, sizeof val, "%s", json_is_true(v) ? "true" : "false");
        else continue;
        for (char *p = val; *p; p++)
            if ((unsigned char)*p < ' ' || *p == 0x7f) *p = '_';
        char *b = val, *e = val + strlen(val);
        while (*b == ' ') b++;
        while (e > b && e[-1] == ' ') *--e = '\0';
        snprintf(key, sizeof key, "pytorch.capture.%s", k);
        ms_status st = trace_set_meta(c->t, key, *b ? b : "-");
        if (st != MS_OK) return st;
        copied++;
    }
    return MS_OK;
}

static ms_status imp_write_meta(imp_ctx *c)
{
    imp_result *r = c->res;
    ms_status st = trace_set_meta(c->t, "source", "pytorch-snapshot");
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.device", (uint64_t)r->device);
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.entries", r->entries);
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.segments", r->segments);
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.peak_reserved_bytes", r->peak_reserved_bytes);
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.reserved_start_bytes", r->reserved_start_bytes);
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.peak_requested_bytes", r->peak_requested_bytes);
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.oom_entries", r->ooms);
    if (st == MS_OK) st = imp_meta_u64(c, "pytorch.unknown_frees", r->unknown_frees);
    if (st == MS_OK && (r->has & IMP_HAS_STATS_RESERVED_PEAK))
        st = imp_meta_u64(c, "pytorch.stats.reserved_bytes.all.peak", r->stats_reserved_peak_bytes);
    if (st == MS_OK && (r->has & IMP_HAS_STATS_ALLOCATED_PEAK))
        st = imp_meta_u64(c, "pytorch.stats.allocated_bytes.all.peak", r->stats_allocated_peak_bytes);
    if (st == MS_OK && (r->has & IMP_HAS_STATS_RETRIES))
        st = imp_meta_u64(c, "pytorch.stats.num_alloc_retries", r->stats_num_alloc_retries);
    if (st == MS_OK && (r->has & IMP_HAS_STATS_SEGMENTS))
        st = imp_meta_u64(c, "pytorch.stats.segment.all.allocated", r->stats_segments_allocated);
    if (st == MS_OK && (r->has & IMP_HAS_STATS_DEVICE_ALLOCS))
        st = imp_meta_u64(c, "pytorch.stats.num_device_alloc", r->stats_num_device_alloc);
    if (st == MS_OK && r->streams) {
        char *s = imp_join(NULL, r->stream_values, r->streams, c->opt.segment_sizes_meta_max);
        if (s) st = trace_set_meta(c->t, "pytorch.streams", s);
        free(s);
    }
    if (st == MS_OK && r->segments) {
        char *s = imp_join(r->segment_sizes, NULL, r->segments, c->opt.segment_sizes_meta_max);
        if (s) st = trace_set_meta(c->t, "pytorch.segment_sizes", s);
        free(s);
    }
    if (st == MS_OK) st = imp_segment_allocs_meta(c);
    if (st == MS_OK && c->capture_meta) st = imp_capture_meta(c);
    return st == MS_OK ? MS_OK : ms_fail(c->err, st, "%s: cannot set meta: %s", c->path,
                                         ms_status_str(st));
}

/* ---- the import ---- */

static void imp_finish(imp_ctx *c)
{
    imp_result *r = c->res;
    r->device = c->chosen;
    r->live_at_end = u64map_count(c->live_id);
    r->pending_frees = u64map_count(c->requested);
    if ((r->has & IMP_HAS_SEGMENT_STATE) && (size_t)c->chosen < c->dev_seg_cap)
        r->end_reserved_bytes = c->dev_seg_bytes[c->chosen];
    /* Reserved memory before the first entry: what the snapshot's segments hold at the end
     * minus the net change seen in the trace; never less than what the trace itself frees
     * beyond its own segment_allocs. An estimate when the snapshot's segment list and trace
     * disagree (expandable segments report differently). */
    int64_t start = -c->reserved_min;
    if (r->has & IMP_HAS_SEGMENT_STATE) {
        int64_t est = (int64_t)r->end_reserved_bytes - c->reserved;
        if (est > start) start = est;
    }
    r->reserved_start_bytes = (uint64_t)start;
    r->peak_reserved_bytes = (uint64_t)(start + c->reserved_max);
}

static ms_status imp_run(imp_ctx *c)
{
    char tmp[16];
    if (imp_peek(c) < 0) return imp_fail(c, MS_ERR_PARSE, c->pos, "empty input");
    /* Pickle protocol 2+ opens with PROTO (0x80): what torch.cuda.memory._dump_snapshot()
     * writes. The Python package converts it; the C side never unpickles. */
    if (imp_peek(c) == 0x80)
        return imp_fail(c, MS_ERR_PARSE, c->pos, "a Python pickle (torch.cuda.memory."
                        "_dump_snapshot()), not JSON: convert it with 'python -m memsim "
                        "convert %s OUT.json.gz' (python/README.md)", c->path);
    if (imp_peek(c) != '{')
        return imp_fail(c, MS_ERR_PARSE, c->pos, "the root must be a JSON object (a PyTorch "
                        "memory snapshot), found %s", imp_describe(c, tmp, sizeof tmp));
    ms_status st = imp_walk_object(c, "the root object", imp_root_member);
    if (st != MS_OK) return st;
    if (imp_peek(c) >= 0)
        return imp_fail(c, MS_ERR_PARSE, c->pos, "unexpected %s after the root object",
                        imp_describe(c, tmp, sizeof tmp));
    if (!c->seen_traces)
        return ms_fail_at(c->err, MS_ERR_PARSE, c->path, 0, "no \"device_traces\": not a "
                          "torch.cuda.memory._snapshot() (or its wrapper with \"snapshot\")");
    if (c->opt.device >= 0 && c->opt.device >= c->res->devices)
        return ms_fail_at(c->err, MS_ERR_INVALID, c->path, 0, "device %d is not in the "
                          "snapshot (it has %d device lists)", c->opt.device, c->res->devices);
    if (c->chosen < 0)
        return ms_fail_at(c->err, MS_ERR_INVALID, c->path, 0, "no device has trace entries: "
                          "record with torch.cuda.memory._record_memory_history() enabled");
    imp_finish(c);
    return imp_write_meta(c);
}

static void imp_ctx_free(imp_ctx *c)
{
    u64map_free(c->live_id);
    u64map_free(c->live_bytes);
    u64map_free(c->requested);
    u64map_free(c->stream_idx);
    free(c->dev_seg_bytes);
    json_decref(c->capture_meta);
}

ms_status imp_pytorch_load_buffer(const char *name, const char *buf, size_t len,
                                  const imp_options *opt, trace_t **out, imp_result *res,
                                  ms_error *err)
{
    imp_result local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    res->device = -1;
    *out = NULL;
    imp_ctx c;
    memset(&c, 0, sizeof c);
    imp_options_fix(opt, &c.opt);
    c.path = name ? name : "(buffer)";
    c.buf = buf;
    c.len = len;
    c.res = res;
    c.err = err;
    c.chosen = -1;
    c.next_id = 1;
    if (len > c.opt.max_file_bytes) {
        char b[32];
        return ms_fail_at(err, MS_ERR_INVALID, c.path, 0, "%zu bytes: larger than the import "
                          "limit of %s", len, ms_fmt_bytes(c.opt.max_file_bytes, b, sizeof b));
    }
    c.t = trace_new();
    c.live_id = u64map_new(1024);
    c.live_bytes = u64map_new(1024);
    c.requested = u64map_new(64);
    c.stream_idx = u64map_new(16);
    ms_status st;
    if (!c.t || !c.live_id || !c.live_bytes || !c.requested || !c.stream_idx)
        st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    else
        st = imp_run(&c);
    imp_ctx_free(&c);
    if (st != MS_OK) {
        trace_free(c.t);
        imp_result_release(res);
        return st;
    }
    if (res == &local) imp_result_release(res);
    *out = c.t;
    return MS_OK;
}

ms_status imp_pytorch_load(const char *path, const imp_options *opt, trace_t **out,
                           imp_result *res, ms_error *err)
{
    imp_options o;
    imp_options_fix(opt, &o);
    *out = NULL;
    if (res) {
        memset(res, 0, sizeof *res);
        res->device = -1;
    }
    char b[32];
    struct stat sb;
    /* Over the limit is bad input (exit 3), found before reading where it can be: the
     * file's size, the gzip trailer's, then the decompressed bytes as they come. */
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > o.max_file_bytes)
        return ms_fail_at(err, MS_ERR_INVALID, path, 0, "%lld bytes: larger than the import "
                          "limit of %s (record fewer steps or a smaller max_entries)",
                          (long long)sb.st_size, ms_fmt_bytes(o.max_file_bytes, b, sizeof b));
    char *buf = NULL;
    size_t len = 0;
    /* ms_read_all stops at the limit for gzip input too (it counts decompressed bytes). */
    ms_status st = ms_read_all(path, (size_t)o.max_file_bytes, &buf, &len, err);
    if (st == MS_OK && len > o.max_file_bytes)
        st = MS_ERR_LIMIT;
    if (st == MS_ERR_LIMIT) {
        free(buf);
        return ms_fail_at(err, MS_ERR_INVALID, path, 0, "larger than the import limit of %s "
                          "after decompression (record fewer steps or a smaller max_entries)",
                          ms_fmt_bytes(o.max_file_bytes, b, sizeof b));
    }
    if (st != MS_OK) return st;
    st = imp_pytorch_load_buffer(path, buf, len, &o, out, res, err);
    free(buf);
    return st;
}

ms_status imp_pytorch_import(const char *in_path, const char *out_path,
                             const imp_options *opt, imp_result *res, ms_error *err)
{
    trace_t *t;
    ms_status st = imp_pytorch_load(in_path, opt, &t, res, err);
    if (st != MS_OK) return st;
    st = trace_write(t, out_path, err);
    trace_free(t);
    return st;
}

void imp_result_print(const imp_result *r, FILE *fp)
{
    char b1[32], b2[32], b3[32];
    fprintf(fp, "device %d of %d: %llu entries -> %llu allocs, %llu frees, %llu live at end\n",
            r->device, r->devices, (unsigned long long)r->entries,
            (unsigned long long)r->allocs, (unsigned long long)r->frees,
            (unsigned long long)r->live_at_end);
    fprintf(fp, "streams %zu; free_requested %llu (%llu pending); other actions %llu\n",
            r->streams, (unsigned long long)r->free_requested,
            (unsigned long long)r->pending_frees, (unsigned long long)r->other_actions);
    fprintf(fp, "warnings: %llu frees of unknown addresses, %llu zero-size allocs, "
            "%llu allocs at a live address\n", (unsigned long long)r->unknown_frees,
            (unsigned long long)r->zero_size_allocs, (unsigned long long)r->live_addr_reused);
    fprintf(fp, "allocator: %llu segment_alloc, %llu segment_free, %llu map, %llu unmap, "
            "%llu oom\n", (unsigned long long)r->segments, (unsigned long long)r->segment_frees,
            (unsigned long long)r->segment_maps, (unsigned long long)r->segment_unmaps,
            (unsigned long long)r->ooms);
    fprintf(fp, "peak reserved %s (from %s at start), peak requested %s\n",
            ms_fmt_bytes(r->peak_reserved_bytes, b1, sizeof b1),
            ms_fmt_bytes(r->reserved_start_bytes, b2, sizeof b2),
            ms_fmt_bytes(r->peak_requested_bytes, b3, sizeof b3));
    if (r->has & IMP_HAS_STATS_RESERVED_PEAK)
        fprintf(fp, "memory_stats: reserved peak %s, allocated peak %s, %llu segments, "
                "%llu device allocs, %llu alloc retries\n",
                ms_fmt_bytes(r->stats_reserved_peak_bytes, b1, sizeof b1),
                ms_fmt_bytes(r->stats_allocated_peak_bytes, b2, sizeof b2),
                (unsigned long long)r->stats_segments_allocated,
                (unsigned long long)r->stats_num_device_alloc,
                (unsigned long long)r->stats_num_alloc_retries);
}

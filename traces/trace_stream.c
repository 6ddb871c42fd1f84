/* trace_stream.c — the workload trace's streaming writer of both forms (text through
 * trace.c's record formatting, binary through trace_bin.c) and trace_convert, which streams
 * a trace of either form into the other in bounded memory. Implements the writer part of
 * trace.h; used by `memsim trace convert`, the tests and whoever writes large traces. */
#define _POSIX_C_SOURCE 200809L
#include "traces/trace_int.h"

#include <stdlib.h>
#include <string.h>

#define TEXT_FLUSH 65536

struct trace_writer {
    trace_form form;
    char *path;
    ms_out *o;          /* text */
    char *buf;          /* text: pending lines */
    size_t n, cap;
    tbin_wr *bin;       /* binary */
    int seen_record;
    int bad;            /* a write failed */
};

static const char *const form_names[] = {"text", "binary"};

int trace_form_parse(const char *s, trace_form *out)
{
    for (int i = 0; i < 2; i++)
        if (!strcmp(s, form_names[i])) { *out = (trace_form)i; return 1; }
    return 0;
}

const char *trace_form_name(trace_form f) { return (unsigned)f < 2 ? form_names[f] : "?"; }

ms_status trace_writer_open(const char *path, trace_form form, trace_writer **out,
                            ms_error *err)
{
    *out = NULL;
    trace_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    w->form = form;
    ms_status st = form == TRACE_FORM_BINARY ? tbin_wr_open(path, &w->bin, err)
                                             : ms_out_open(path, &w->o, err);
    if (st == MS_OK && form == TRACE_FORM_TEXT &&
        ms_out_printf(w->o, "memsim-trace %d\n", TRACE_FORMAT_VERSION) < 0)
        w->bad = 1;
    if (st != MS_OK) { free(w->path); free(w); return st; }
    *out = w;
    return MS_OK;
}

static void text_flush(trace_writer *w)
{
    if (w->n && !w->bad && ms_out_write(w->o, w->buf, w->n) != 0) w->bad = 1;
    w->n = 0;
}

ms_status trace_writer_meta(trace_writer *w, const char *key, const char *value, ms_error *err)
{
    if (w->seen_record)
        return ms_fail_at(err, MS_ERR_INVALID, w->path, 0, "meta %s after records", key);
    if (!trace_meta_valid(key, value))
        return ms_fail_at(err, MS_ERR_INVALID, w->path, 0,
                          "meta %.64s: a key or value the trace format cannot hold", key);
    if (w->bin) return tbin_wr_meta(w->bin, key, value, err);
    int k = value[0] ? ms_out_printf(w->o, "meta %s %s\n", key, value)
                     : ms_out_printf(w->o, "meta %s\n", key);
    if (k < 0) w->bad = 1;
    return MS_OK;
}

ms_status trace_writer_put(trace_writer *w, const trace_rec *rec, ms_error *err)
{
    if (!trace_rec_valid(rec))
        return ms_fail_at(err, MS_ERR_INVALID, w->path, 0,
                          "a %s record the trace format cannot hold",
                          rec->type == TR_ALLOC ? "alloc" : rec->type == TR_OP ? "op"
                                                          : rec->type == TR_FREE ? "free"
                                                                                 : "mark");
    w->seen_record = 1;
    if (w->bin) return tbin_wr_rec(w->bin, rec, err);
    if (trace_text_append(&w->buf, &w->n, &w->cap, rec))
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    if (w->n >= TEXT_FLUSH) text_flush(w);
    return MS_OK;
}

static void writer_release(trace_writer *w)
{
    free(w->buf);
    free(w->path);
    free(w);
}

ms_status trace_writer_commit(trace_writer *w, ms_error *err)
{
    ms_status st;
    if (w->bin) {
        st = tbin_wr_commit(w->bin, err);
    } else {
        text_flush(w);
        if (w->bad) {
            ms_out_abort(w->o);
            st = ms_fail_at(err, MS_ERR_IO, w->path, 0, "write failed");
        } else {
            st = ms_out_commit(w->o, err);
        }
    }
    writer_release(w);
    return st;
}

void trace_writer_abort(trace_writer *w)
{
    if (!w) return;
    if (w->bin) tbin_wr_abort(w->bin);
    else ms_out_abort(w->o);
    writer_release(w);
}

ms_status trace_write_form(const trace_t *t, const char *path, trace_form form, ms_error *err)
{
    if (form == TRACE_FORM_TEXT) return trace_write(t, path, err);
    trace_writer *w;
    ms_status st = trace_writer_open(path, form, &w, err);
    for (size_t i = 0; st == MS_OK && i < trace_meta_count(t); i++)
        st = trace_writer_meta(w, trace_meta_key(t, i), trace_meta_value(t, i), err);
    for (size_t i = 0; st == MS_OK && i < trace_count(t); i++)
        st = trace_writer_put(w, trace_get(t, i), err);
    if (st != MS_OK) {
        if (st != MS_OK && w) trace_writer_abort(w);
        return st;
    }
    return trace_writer_commit(w, err);
}

/* trace_convert's record sink: the liveness checker hands over each checked record. */
typedef struct conv_ctx {
    trace_writer *w;
    uint64_t n;
    ms_error *err;
} conv_ctx;

static ms_status conv_one(void *ctx, const trace_rec *rec, uint64_t cur)
{
    (void)cur;
    conv_ctx *cx = ctx;
    cx->n++;
    return trace_writer_put(cx->w, rec, cx->err);
}

ms_status trace_convert(const char *in, const char *out, trace_form form, uint64_t *records,
                        ms_error *err)
{
    *records = 0;
    trace_reader *r;
    ms_status st = trace_reader_open(in, &r, err);
    if (st != MS_OK) return st;
    trace_writer *w = NULL;
    st = trace_writer_open(out, form, &w, err);
    for (size_t i = 0; st == MS_OK && i < trace_reader_meta_count(r); i++)
        st = trace_writer_meta(w, trace_reader_meta_key(r, i), trace_reader_meta_value(r, i),
                               err);
    conv_ctx cx = {w, 0, err};
    if (st == MS_OK) st = trace_scan_checked(r, in, conv_one, &cx, err);
    trace_reader_free(r);
    if (st != MS_OK) {
        trace_writer_abort(w);
        return st;
    }
    *records = cx.n;
    return trace_writer_commit(w, err);
}

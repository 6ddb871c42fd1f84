/* trace.c — the workload trace file format (traces/FORMAT.md, "Workload trace"): a streaming
 * line reader whose memory is bounded by the longest line and the op id lists, a liveness
 * checker that keeps only the live tensor set, the in-memory trace used by planners and the
 * generator, and a writer whose output reads back to the same bytes; the reader takes the
 * binary form too (traces/trace_bin.c, told by its magic), and a streaming writer writes
 * either form; the enums' names are traces/trace_names.c. Implements trace.h; used by the
 * generator, importers, planners, sim and runtime. */
#define _POSIX_C_SOURCE 200809L
#include "traces/trace_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

/* Hard limits that keep a hostile file from making the reader grow: an op lists at most
 * TRACE_LIST_MAX ids per direction; meta lines are few and short. */
#define TRACE_LIST_MAX 4096
#define TRACE_META_MAX 4096
#define TRACE_META_KEY_MAX 64
#define TRACE_META_VALUE_MAX 4096
/* No single tensor is larger than 1 PiB; keeps the live-byte sums far from overflow. */
#define TRACE_BYTES_MAX (1ULL << 50)

/* ------------------------------------------------------------------------------------ */
/* rules shared by the reader and trace_append, so whatever one accepts the other does */

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* s is exactly the one-character string c ("-", "0", "1") */
static int is1(const char *s, char c) { return s[0] == c && s[1] == '\0'; }

/* 1: a blank (space, tab, CR), 2: the end of the line; 0: part of a field */
static const unsigned char sep_class[256] = {[' '] = 1, ['\t'] = 1, ['\r'] = 1, ['\0'] = 2};

/* ms_split with a table lookup per character: splits line in place on blanks into at most
 * max tokens; returns the count, or max + 1 if there were more. */
static int split_fields(char *line, char **tok, int max)
{
    int n = 0;
    unsigned char *p = (unsigned char *)line;
    for (;;) {
        while (sep_class[*p] == 1) p++;
        if (!*p) break;
        if (n == max) return max + 1;
        tok[n++] = (char *)p;
        while (!sep_class[*p]) p++;
        if (!*p) break;
        *p++ = '\0';
    }
    return n;
}

/* A token: non-empty, no blank or newline, shorter than max. */
static int valid_token(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max) return 0;
    for (size_t i = 0; i < n; i++)
        if (is_blank(s[i]) || s[i] == '\n') return 0;
    return 1;
}

/* A name inside a fixed array: NUL-terminated within it, no blanks ("" is "no name"). One
 * pass: every record a generator appends is checked. */
static int valid_name(const char *name)
{
    /* 1: ends the name (NUL), 2: not allowed in one (a blank, a newline); one load and one
     * test per character where four comparisons were */
    static const unsigned char stop[256] = {['\0'] = 1, [' '] = 2, ['\t'] = 2, ['\r'] = 2,
                                            ['\n'] = 2};
    const unsigned char *p = (const unsigned char *)name;
    size_t i = 0;
    while (i < TRACE_NAME_MAX && !stop[p[i]]) i++;
    return i < TRACE_NAME_MAX && stop[p[i]] == 1;
}

static int valid_meta_value(const char *v)
{
    size_t n = strlen(v);
    if (n > TRACE_META_VALUE_MAX) return 0;
    if (strchr(v, '\n')) return 0;
    if (n && (is_blank(v[0]) || is_blank(v[n - 1]))) return 0;
    return 1;
}

/* ------------------------------------------------------------------------------------ */
/* streaming reader */

typedef enum line_kind { LN_REC, LN_META, LN_EOF } line_kind;

struct trace_reader {
    ms_lines *lr;              /* the text form; NULL for the binary one */
    tbin_rd *bin;              /* the binary form */
    char *bin_path;
    char **mkey, **mval;
    size_t n_meta, cap_meta;
    uint64_t *in, *out;        /* the current op's id lists */
    size_t cap_in, cap_out;
    int seen_record;           /* meta lines are an error from here on */
    int fatal;                 /* reading cannot go on (I/O error, over-long line) */
    int has_pending, at_eof;   /* the first record, read by trace_reader_open */
    trace_rec pending;
};

static const char *rd_path(const trace_reader *r)
{
    return r->bin ? r->bin_path : ms_lines_path(r->lr);
}

static uint64_t rd_line_no(const trace_reader *r)
{
    return r->bin ? tbin_rd_record_no(r->bin) : ms_lines_lineno(r->lr);
}

/* "FILE:LINE: message" for text, "FILE: record N: message" for the binary form. */
static ms_status rd_fail(const trace_reader *r, ms_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ms_status rd_fail(const trace_reader *r, ms_error *err, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->bin)
        return ms_fail_at(err, MS_ERR_PARSE, rd_path(r), 0, "record %llu: %s",
                          (unsigned long long)rd_line_no(r), msg);
    return ms_fail_at(err, MS_ERR_PARSE, rd_path(r), rd_line_no(r), "%s", msg);
}

#define RD_FAIL(r, err, ...) rd_fail((r), (err), __VA_ARGS__)

/* Next line that is neither blank nor a comment; LN_EOF at the end. Read errors are fatal. */
static ms_status rd_raw(trace_reader *r, char **line, ms_error *err)
{
    for (;;) {
        ms_status st = ms_lines_next(r->lr, line, err);
        if (st == MS_ERR_LIMIT) { *line = NULL; return MS_OK; }
        if (st != MS_OK) { r->fatal = 1; return st; }
        const char *p = *line;
        while (is_blank(*p)) p++;
        if (*p == '\0' || *p == '#') continue;
        return MS_OK;
    }
}

static ms_status rd_header(trace_reader *r, ms_error *err)
{
    char *line;
    ms_status st = rd_raw(r, &line, err);
    if (st != MS_OK) return st;
    if (!line) {
        r->fatal = 1;
        return ms_fail_at(err, MS_ERR_PARSE, rd_path(r), 0,
                          "empty file: expected the header 'memsim-trace %d'",
                          TRACE_FORMAT_VERSION);
    }
    char *tok[3];
    int n = ms_split(line, tok, 2);
    r->fatal = 1; /* until the header is known good */
    if (n < 1 || strcmp(tok[0], "memsim-trace") != 0)
        return RD_FAIL(r, err, "not a memsim trace: expected the header 'memsim-trace %d'",
                       TRACE_FORMAT_VERSION);
    if (n != 2) return RD_FAIL(r, err, "header: expected 'memsim-trace VERSION'");
    /* VERSION is MAJOR or MAJOR.MINOR; a newer major version is rejected. */
    char *dot = strchr(tok[1], '.');
    uint64_t major, minor;
    if (dot) {
        *dot = '\0';
        if (!ms_parse_u64(dot + 1, &minor))
            return RD_FAIL(r, err, "header: bad version '%s.%s'", tok[1], dot + 1);
    }
    if (!ms_parse_u64(tok[1], &major) || major == 0)
        return RD_FAIL(r, err, "header: bad version '%s'", tok[1]);
    if (major > TRACE_FORMAT_VERSION)
        return RD_FAIL(r, err,
                       "trace format version %llu is newer than this reader (version %d)",
                       (unsigned long long)major, TRACE_FORMAT_VERSION);
    r->fatal = 0;
    return MS_OK;
}

/* 1 when the file's first byte is the binary form's (0x89, which no text trace starts
 * with): the form is told by content, never by the file's name, and a damaged magic is
 * reported as such by the binary reader. The input is left open in *in for the binary
 * reader, closed otherwise. */
static ms_status rd_sniff(const char *path, ms_bytes **in, int *binary, ms_error *err)
{
    *binary = 0;
    ms_status st = ms_bytes_open(path, in, err);
    if (st != MS_OK) return st;
    char head[TBIN_MAGIC_LEN];
    size_t n = 0, got = 1;
    while (n < sizeof head && got) {
        st = ms_bytes_read(*in, head + n, sizeof head - n, &got, err);
        if (st != MS_OK) { ms_bytes_free(*in); *in = NULL; return st; }
        n += got;
    }
    *binary = n > 0 && head[0] == TBIN_MAGIC[0];
    if (!*binary) { ms_bytes_free(*in); *in = NULL; return MS_OK; }
    /* the binary reader reads the header from the start: open it afresh */
    ms_bytes_free(*in);
    return ms_bytes_open(path, in, err);
}

static ms_status rd_open(const char *path, trace_reader **out, ms_error *err)
{
    *out = NULL;
    trace_reader *r = calloc(1, sizeof *r);
    if (!r) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_bytes *in;
    int binary;
    ms_status st = rd_sniff(path, &in, &binary, err);
    if (st != MS_OK) { free(r); return st; }
    if (binary) {
        if (!(r->bin_path = strdup(path))) {
            ms_bytes_free(in);
            free(r);
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        }
        st = tbin_rd_open(path, in, &r->bin, err);
        if (st != MS_OK) { free(r->bin_path); free(r); return st; }
        *out = r;
        return MS_OK;
    }
    st = ms_lines_open(path, &r->lr, err);
    if (st != MS_OK) { free(r); return st; }
    st = rd_header(r, err);
    if (st != MS_OK) { trace_reader_free(r); return st; }
    *out = r;
    return MS_OK;
}

/* Number fields on the reader's hot path. Each accepts exactly what its ms_parse_*
 * counterpart accepts and gives the same value: the common short forms are converted here,
 * anything else (20 digits, exponents, long mantissas) is handed to the general parser. */
static int fast_u64(const char *s, uint64_t *out)
{
    const char *p = s;
    unsigned d = (unsigned char)*p - '0';
    if (d > 9) return 0;
    uint64_t v = 0;
    do {
        v = v * 10 + d;
        d = (unsigned char)*++p - '0';
    } while (d <= 9 && p - s < 19);
    if (d <= 9) return ms_parse_u64(s, out); /* 20 digits or more: overflow is checked there */
    if (*p) return 0;
    *out = v;
    return 1;
}

static int fast_i64(const char *s, int64_t *out)
{
    const char *p = s;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    const char *d0 = p;
    unsigned d = (unsigned char)*p - '0';
    if (d > 9 || (neg && d == 0)) return 0;
    uint64_t v = 0;
    do {
        v = v * 10 + d;
        d = (unsigned char)*++p - '0';
    } while (d <= 9 && p - d0 < 18);
    if (d <= 9) return ms_parse_i64(s, out);
    if (*p) return 0;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* Plain decimals of at most 15 digits: the mantissa and the power of ten are exact doubles,
 * so one division rounds correctly, to strtod's value. */
static int fast_double(const char *s, double *out)
{
    static const double p10[16] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    const char *p = s;
    uint64_t m = 0;
    int nd = 0, frac = 0;
    unsigned d;
    while ((d = (unsigned char)*p - '0') <= 9) { m = m * 10 + d; p++; nd++; }
    if (*p == '.')
        for (p++; (d = (unsigned char)*p - '0') <= 9; p++, nd++, frac++) m = m * 10 + d;
    if (*p || nd == 0 || nd > 15) return ms_parse_double(s, out);
    *out = frac ? (double)m / p10[frac] : (double)m;
    return 1;
}

static ms_status parse_u64_field(trace_reader *r, const char *rt, const char *what,
                                 const char *s, uint64_t *v, ms_error *err)
{
    if (!fast_u64(s, v)) return RD_FAIL(r, err, "%s: bad %s '%s'", rt, what, s);
    return MS_OK;
}

/* An int32 in [lo, INT32_MAX]. */
static ms_status parse_i32_field(trace_reader *r, const char *rt, const char *what,
                                 const char *s, int32_t lo, int32_t *v, ms_error *err)
{
    int64_t x;
    if (!fast_i64(s, &x) || x < lo || x > INT32_MAX)
        return RD_FAIL(r, err, "%s: bad %s '%s' (an integer >= %d)", rt, what, s, (int)lo);
    *v = (int32_t)x;
    return MS_OK;
}

static ms_status parse_name(trace_reader *r, const char *rt, const char *s, char *name,
                            ms_error *err)
{
    if (is1(s, '-')) { name[0] = '\0'; return MS_OK; }
    size_t n = strlen(s);
    if (n >= TRACE_NAME_MAX)
        return RD_FAIL(r, err, "%s: NAME longer than %d characters", rt, TRACE_NAME_MAX - 1);
    memcpy(name, s, n + 1);
    return MS_OK;
}

static ms_status parse_alloc(trace_reader *r, char **tok, int n, trace_rec *rec, ms_error *err)
{
    if (n != 9)
        return RD_FAIL(r, err,
                       "alloc: expected 8 fields (ID BYTES CLASS LAYER TOK STREAM PRODUCER "
                       "NAME), got %d", n - 1);
    trace_tensor *t = &rec->u.alloc; /* zeroed by rd_line */
    rec->type = TR_ALLOC;
    ms_status st;
    if ((st = parse_u64_field(r, "alloc", "ID", tok[1], &t->id, err))) return st;
    if ((st = parse_u64_field(r, "alloc", "BYTES", tok[2], &t->bytes, err))) return st;
    if (t->bytes == 0) return RD_FAIL(r, err, "alloc: BYTES must be > 0");
    if (t->bytes > TRACE_BYTES_MAX) return RD_FAIL(r, err, "alloc: BYTES larger than 1 PiB");
    if (!trace_class_parse(tok[3], &t->cls))
        return RD_FAIL(r, err, "alloc: unknown CLASS '%s' (param grad optstate act_skel "
                       "act_trans workspace other)", tok[3]);
    if ((st = parse_i32_field(r, "alloc", "LAYER", tok[4], -1, &t->layer, err))) return st;
    if (!is1(tok[5], '0') && !is1(tok[5], '1'))
        return RD_FAIL(r, err, "alloc: TOK must be 0 or 1, not '%s'", tok[5]);
    t->tok_scaled = tok[5][0] == '1';
    if ((st = parse_i32_field(r, "alloc", "STREAM", tok[6], 0, &t->stream, err))) return st;
    if (is1(tok[7], '-')) {
        t->producer = -1;
    } else {
        uint64_t p;
        if (!fast_u64(tok[7], &p) || p > INT64_MAX)
            return RD_FAIL(r, err, "alloc: bad PRODUCER '%s' (an op id or -)", tok[7]);
        t->producer = (int64_t)p;
    }
    return parse_name(r, "alloc", tok[8], t->name, err);
}

/* Parses "-" or "ID,ID,..." into buf (grown up to TRACE_LIST_MAX ids). */
static ms_status parse_list(trace_reader *r, const char *what, char *s, uint64_t **buf,
                            size_t *cap, uint32_t *n_out, ms_error *err)
{
    *n_out = 0;
    if (is1(s, '-')) return MS_OK;
    uint32_t n = 0;
    for (char *p = s;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (n == TRACE_LIST_MAX)
            return RD_FAIL(r, err, "op: more than %d %s ids", TRACE_LIST_MAX, what);
        if (ms_grow((void **)buf, cap, (size_t)n + 1, sizeof **buf) != MS_OK)
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        if (!fast_u64(p, &(*buf)[n]))
            return RD_FAIL(r, err, "op: bad %s id '%s'", what, p);
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    *n_out = n;
    return MS_OK;
}

/* The op's optional attributes after NAME: host_us=US, host_sync=0|1, each at most once. */
static ms_status parse_op_attrs(trace_reader *r, char **tok, int n, trace_op *o, ms_error *err)
{
    int seen_host = 0, seen_sync = 0;
    for (int i = 12; i < n; i++) {
        const char *t = tok[i];
        if (!strncmp(t, "host_us=", 8) && !seen_host++) {
            if (!fast_double(t + 8, &o->host_us) || !(o->host_us >= 0) ||
                !(o->host_us < INFINITY))
                return RD_FAIL(r, err, "op: bad host_us '%s' (a number >= 0)", t + 8);
        } else if (!strncmp(t, "host_sync=", 10) && !seen_sync++) {
            if (!is1(t + 10, '0') && !is1(t + 10, '1'))
                return RD_FAIL(r, err, "op: bad host_sync '%s' (0 or 1)", t + 10);
            o->host_sync = t[10] == '1';
        } else {
            return RD_FAIL(r, err, "op: unknown or repeated attribute '%s' after NAME "
                           "(host_us=US host_sync=0|1, each at most once)", t);
        }
    }
    return MS_OK;
}

static ms_status parse_op(trace_reader *r, char **tok, int n, trace_rec *rec, ms_error *err)
{
    if (n < 12 || n > 14)
        return RD_FAIL(r, err,
                       "op: expected 11 fields (ID KIND PHASE LAYER FLOPS BYTES_READ "
                       "BYTES_WRITTEN DUR_US IN OUT NAME) and at most 2 attributes "
                       "(host_us=US host_sync=0|1), got %d", n - 1);
    trace_op *o = &rec->u.op; /* zeroed by rd_line */
    rec->type = TR_OP;
    ms_status st;
    if ((st = parse_u64_field(r, "op", "ID", tok[1], &o->id, err))) return st;
    if (!trace_opkind_parse(tok[2], &o->kind))
        return RD_FAIL(r, err, "op: unknown KIND '%s' (gemm attn norm act elem embed loss "
                       "optim comm other)", tok[2]);
    if (!trace_phase_parse(tok[3], &o->phase))
        return RD_FAIL(r, err, "op: unknown PHASE '%s' (none fwd bwd opt)", tok[3]);
    if ((st = parse_i32_field(r, "op", "LAYER", tok[4], -1, &o->layer, err))) return st;
    if (!fast_double(tok[5], &o->flops) || o->flops < 0)
        return RD_FAIL(r, err, "op: bad FLOPS '%s' (a number >= 0)", tok[5]);
    if ((st = parse_u64_field(r, "op", "BYTES_READ", tok[6], &o->bytes_read, err))) return st;
    if ((st = parse_u64_field(r, "op", "BYTES_WRITTEN", tok[7], &o->bytes_written, err)))
        return st;
    if (is1(tok[8], '-')) {
        o->dur_us = -1;
    } else if (!fast_double(tok[8], &o->dur_us) || o->dur_us < 0) {
        return RD_FAIL(r, err, "op: bad DUR_US '%s' (a number >= 0, or - if unknown)", tok[8]);
    }
    if ((st = parse_list(r, "input", tok[9], &r->in, &r->cap_in, &o->n_in, err))) return st;
    if ((st = parse_list(r, "output", tok[10], &r->out, &r->cap_out, &o->n_out, err)))
        return st;
    o->in = r->in;
    o->out = r->out;
    if ((st = parse_op_attrs(r, tok, n, o, err))) return st;
    return parse_name(r, "op", tok[11], o->name, err);
}

static ms_status parse_mark(trace_reader *r, char **tok, int n, trace_rec *rec, ms_error *err)
{
    if (n != 3) return RD_FAIL(r, err, "mark: expected 2 fields (KIND VALUE), got %d", n - 1);
    trace_mark *m = &rec->u.mark;
    rec->type = TR_MARK;
    if (strcmp(tok[1], "iter") == 0) {
        uint64_t v;
        if (!fast_u64(tok[2], &v) || v > INT64_MAX)
            return RD_FAIL(r, err, "mark iter: bad iteration '%s'", tok[2]);
        m->kind = TM_ITER;
        m->value = (int64_t)v;
    } else if (strcmp(tok[1], "phase") == 0) {
        trace_phase p;
        if (!trace_phase_parse(tok[2], &p))
            return RD_FAIL(r, err, "mark phase: unknown phase '%s' (none fwd bwd opt)", tok[2]);
        m->kind = TM_PHASE;
        m->value = p;
    } else if (strcmp(tok[1], "layer") == 0) {
        int32_t v;
        ms_status st = parse_i32_field(r, "mark layer", "layer", tok[2], -1, &v, err);
        if (st) return st;
        m->kind = TM_LAYER;
        m->value = v;
    } else {
        return RD_FAIL(r, err, "mark: unknown kind '%s' (iter phase layer)", tok[1]);
    }
    return MS_OK;
}

/* Splits a meta line "meta KEY VALUE" in place; VALUE is the rest of the line, trimmed. */
static ms_status parse_meta(trace_reader *r, char *line, char **key, char **val, ms_error *err)
{
    char *p = line;
    while (is_blank(*p)) p++;
    p += 4; /* "meta" */
    while (is_blank(*p)) p++;
    if (!*p) return RD_FAIL(r, err, "meta: expected 'meta KEY VALUE'");
    *key = p;
    while (*p && !is_blank(*p)) p++;
    if (*p) *p++ = '\0';
    while (is_blank(*p)) p++;
    char *end = p + strlen(p);
    while (end > p && is_blank(end[-1])) *--end = '\0';
    *val = p;
    if (strlen(*key) >= TRACE_META_KEY_MAX)
        return RD_FAIL(r, err, "meta: KEY longer than %d characters", TRACE_META_KEY_MAX - 1);
    if (strlen(p) > TRACE_META_VALUE_MAX)
        return RD_FAIL(r, err, "meta: VALUE longer than %d characters", TRACE_META_VALUE_MAX);
    return MS_OK;
}

/* ---- fast path: the canonical spelling of alloc and free records, as trace_write writes
 * them (single spaces, plain decimals, no leading or trailing blanks), is parsed in one pass
 * without splitting the line. Anything else (another record type, other blanks, a value out
 * of range, any error) makes it return 0 with the line untouched, and the general parser
 * below reads the line and reports its problems. It accepts only lines the general parser
 * accepts and gives the same record. */

/* Digits up to the terminator `end`: at most maxd digits (so no overflow), value in *v. */
static int fp_digits(const char **pp, char end, int maxd, uint64_t *v)
{
    const char *p = *pp;
    unsigned d = (unsigned char)*p - '0';
    if (d > 9) return 0;
    const char *p0 = p;
    uint64_t x = 0;
    do {
        x = x * 10 + d;
        d = (unsigned char)*++p - '0';
    } while (d <= 9);
    if (p - p0 > maxd || *p != end) return 0;
    *v = x;
    *pp = p + (end != '\0');
    return 1;
}

static int fp_alloc(const char *p, trace_rec *rec)
{
    trace_tensor *t = &rec->u.alloc;
    uint64_t v;
    if (!fp_digits(&p, ' ', 19, &t->id)) return 0;
    if (!fp_digits(&p, ' ', 16, &t->bytes) || t->bytes == 0 || t->bytes > TRACE_BYTES_MAX)
        return 0;
    int c;
    for (c = 0; c < TC_COUNT; c++) {
        static const unsigned char len[TC_COUNT] = {5, 4, 8, 8, 9, 9, 5};
        const char *nm = trace_class_names[c];
        size_t k = len[c];
        if (p[0] == nm[0] && strncmp(p, nm, k) == 0 && p[k] == ' ') { p += k + 1; break; }
    }
    if (c == TC_COUNT) return 0;
    t->cls = (trace_class)c;
    if (p[0] == '-' && p[1] == '1' && p[2] == ' ') {
        t->layer = -1;
        p += 3;
    } else {
        if (!fp_digits(&p, ' ', 9, &v)) return 0;
        t->layer = (int32_t)v;
    }
    if ((p[0] != '0' && p[0] != '1') || p[1] != ' ') return 0;
    t->tok_scaled = p[0] == '1';
    p += 2;
    if (!fp_digits(&p, ' ', 9, &v)) return 0;
    t->stream = (int32_t)v;
    if (p[0] == '-' && p[1] == ' ') {
        t->producer = -1;
        p += 2;
    } else {
        if (!fp_digits(&p, ' ', 18, &v)) return 0;
        t->producer = (int64_t)v;
    }
    if (p[0] == '-' && p[1] == '\0') {
        t->name[0] = '\0';
    } else {
        size_t n = 0;
        while (!sep_class[(unsigned char)p[n]]) n++;
        if (p[n] != '\0' || n == 0 || n >= TRACE_NAME_MAX) return 0;
        memcpy(t->name, p, n + 1);
    }
    rec->type = TR_ALLOC;
    return 1;
}

/* 1 when the line was read by the fast path into rec (already zeroed, line set). */
static int fp_line(const char *line, trace_rec *rec)
{
    if (line[0] == 'a' && memcmp(line, "alloc ", 6) == 0) {
        if (fp_alloc(line + 6, rec)) return 1;
        memset(&rec->u, 0, sizeof rec->u);
        return 0;
    }
    if (line[0] == 'f' && memcmp(line, "free ", 5) == 0) {
        const char *p = line + 5;
        if (!fp_digits(&p, '\0', 19, &rec->u.free_id)) return 0;
        rec->type = TR_FREE;
        return 1;
    }
    return 0;
}

/* The first word of the line is "meta". */
static int is_meta_line(const char *line)
{
    while (is_blank(*line)) line++;
    return line[0] == 'm' && line[1] == 'e' && line[2] == 't' && line[3] == 'a' &&
           (line[4] == '\0' || is_blank(line[4]));
}

/* Reads and parses the next line. A parse error consumes the line, so the caller may go on
 * with the next one unless r->fatal is set. */
/* rd_line of the binary form: the same kinds, rules and consumption. */
static ms_status rd_bin(trace_reader *r, trace_rec *rec, char **key, char **val,
                        line_kind *kind, ms_error *err)
{
    tbin_kind k;
    int fatal;
    const char *ck = NULL, *cv = NULL;
    ms_status st = tbin_rd_next(r->bin, rec, &ck, &cv, &k, &fatal, err);
    if (fatal) r->fatal = 1;
    *kind = k == TBIN_REC ? LN_REC : k == TBIN_META ? LN_META : LN_EOF;
    if (st != MS_OK) return st;
    if (k == TBIN_META) {
        if (r->seen_record) return RD_FAIL(r, err, "meta after records");
        *key = (char *)ck;
        *val = (char *)cv;
    } else if (k == TBIN_REC) {
        r->seen_record = 1;
    }
    return MS_OK;
}

static ms_status rd_line(trace_reader *r, trace_rec *rec, char **key, char **val,
                         line_kind *kind, ms_error *err)
{
    char *line;
    *kind = LN_EOF;
    if (r->fatal) return ms_fail_at(err, MS_ERR_IO, rd_path(r), 0, "reading stopped");
    if (r->bin) return rd_bin(r, rec, key, val, kind, err);
    ms_status st = rd_raw(r, &line, err);
    if (st != MS_OK) return st;
    if (!line) return MS_OK;
    if (is_meta_line(line)) {
        *kind = LN_META;
        if (r->seen_record) return RD_FAIL(r, err, "meta after records");
        return parse_meta(r, line, key, val, err);
    }
    r->seen_record = 1;
    *kind = LN_REC;
    memset(rec, 0, sizeof *rec);
    rec->line = rd_line_no(r);
    if (fp_line(line, rec)) return MS_OK;
    char *tok[15];
    int n = split_fields(line, tok, 14);
    if (n > 14) return RD_FAIL(r, err, "%.20s: too many fields", tok[0]);
    const char *t0 = tok[0];
    if (t0[0] == 'a' && strcmp(t0, "alloc") == 0) return parse_alloc(r, tok, n, rec, err);
    if (t0[0] == 'o' && t0[1] == 'p' && !t0[2]) return parse_op(r, tok, n, rec, err);
    if (t0[0] == 'm' && strcmp(t0, "mark") == 0) return parse_mark(r, tok, n, rec, err);
    if (t0[0] == 'f' && strcmp(t0, "free") == 0) {
        rec->type = TR_FREE;
        if (n != 2) return RD_FAIL(r, err, "free: expected 1 field (ID), got %d", n - 1);
        return parse_u64_field(r, "free", "ID", tok[1], &rec->u.free_id, err);
    }
    char shown[40];
    snprintf(shown, sizeof shown, "%s", tok[0]);
    return RD_FAIL(r, err, "unknown record type '%s' (alloc free op mark meta)", shown);
}

/* Meta keys whose value is a count that must be a positive integer (traces/FORMAT.md). */
static const char *const POSITIVE_META[] = {"tp", "cp", "dp", "ep", "layers", "seq", "batch",
                                            "iterations"};

/* Records a meta pair; duplicates, too many, and a bad value of a key in POSITIVE_META are
 * errors at the current line. */
static ms_status rd_add_meta(trace_reader *r, const char *key, const char *val, ms_error *err)
{
    for (size_t i = 0; i < sizeof POSITIVE_META / sizeof *POSITIVE_META; i++) {
        uint64_t x;
        if (!strcmp(key, POSITIVE_META[i]) && (!ms_parse_u64(val, &x) || x == 0))
            return RD_FAIL(r, err, "meta %s: bad value '%.40s' (a positive integer)", key, val);
    }
    for (size_t i = 0; i < r->n_meta; i++)
        if (strcmp(r->mkey[i], key) == 0) return RD_FAIL(r, err, "duplicate meta key '%s'", key);
    if (r->n_meta == TRACE_META_MAX)
        return RD_FAIL(r, err, "more than %d meta lines", TRACE_META_MAX);
    size_t cap = r->cap_meta;
    if (ms_grow((void **)&r->mkey, &cap, r->n_meta + 1, sizeof *r->mkey) != MS_OK ||
        ms_grow((void **)&r->mval, &r->cap_meta, r->n_meta + 1, sizeof *r->mval) != MS_OK)
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    char *k = strdup(key), *v = strdup(val);
    if (!k || !v) { free(k); free(v); return ms_fail(err, MS_ERR_NOMEM, "out of memory"); }
    r->mkey[r->n_meta] = k;
    r->mval[r->n_meta] = v;
    r->n_meta++;
    return MS_OK;
}

ms_status trace_reader_open(const char *path, trace_reader **out, ms_error *err)
{
    trace_reader *r;
    ms_status st = rd_open(path, &r, err);
    if (st != MS_OK) { *out = NULL; return st; }
    for (;;) {
        char *key, *val;
        line_kind kind;
        st = rd_line(r, &r->pending, &key, &val, &kind, err);
        if (st == MS_OK && kind == LN_META) st = rd_add_meta(r, key, val, err);
        if (st != MS_OK) { trace_reader_free(r); *out = NULL; return st; }
        if (kind == LN_EOF) { r->at_eof = 1; break; }
        if (kind == LN_REC) { r->has_pending = 1; break; }
    }
    *out = r;
    return MS_OK;
}

size_t trace_reader_meta_count(const trace_reader *r) { return r->n_meta; }

const char *trace_reader_meta_key(const trace_reader *r, size_t i)
{
    return i < r->n_meta ? r->mkey[i] : NULL;
}

const char *trace_reader_meta_value(const trace_reader *r, size_t i)
{
    return i < r->n_meta ? r->mval[i] : NULL;
}

ms_status trace_reader_next(trace_reader *r, trace_rec *rec, ms_error *err)
{
    if (r->bin && !r->has_pending && r->seen_record) { /* past the meta: records alone */
        int q = tbin_rd_quick(r->bin, rec, err);
        if (q) return q > 0 ? MS_OK : MS_ERR_PARSE;
    }
    if (r->has_pending) {
        r->has_pending = 0;
        *rec = r->pending;
        return MS_OK;
    }
    if (r->at_eof) return MS_ERR_LIMIT;
    char *key, *val;
    line_kind kind;
    ms_status st = r->bin && !r->fatal ? rd_bin(r, rec, &key, &val, &kind, err)
                                       : rd_line(r, rec, &key, &val, &kind, err);
    if (st != MS_OK) return st;
    if (kind == LN_EOF) { r->at_eof = 1; return MS_ERR_LIMIT; }
    return MS_OK; /* LN_META cannot come back: after a record it is an error */
}

void trace_reader_free(trace_reader *r)
{
    if (!r) return;
    ms_lines_free(r->lr);
    tbin_rd_free(r->bin);
    free(r->bin_path);
    for (size_t i = 0; i < r->n_meta; i++) { free(r->mkey[i]); free(r->mval[i]); }
    free(r->mkey);
    free(r->mval);
    free(r->in);
    free(r->out);
    free(r);
}

/* ------------------------------------------------------------------------------------ */
/* liveness checker: only the live set (id -> bytes) is kept */

typedef struct tchk {
    u64map *live;
    uint64_t cur_bytes, peak_bytes;
    /* called once per problem with its message; returns nonzero to stop checking this rec */
    int (*report)(void *ctx, const ms_error *e);
    void *ctx;
    int by_record;             /* a binary trace: positions are record numbers */
} tchk;

static int tchk_init(tchk *c, int (*report)(void *, const ms_error *), void *ctx,
                     const trace_reader *r)
{
    memset(c, 0, sizeof *c);
    c->by_record = r->bin != NULL;
    c->live = u64map_new(1024);
    c->report = report;
    c->ctx = ctx;
    return c->live != NULL;
}

static void tchk_done(tchk *c) { u64map_free(c->live); }

static int tchk_problem(tchk *c, const char *path, uint64_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int tchk_problem(tchk *c, const char *path, uint64_t line, const char *fmt, ...)
{
    ms_error e;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->by_record)
        ms_fail_at(&e, MS_ERR_PARSE, path, 0, "record %llu: %s", (unsigned long long)line, msg);
    else
        ms_fail_at(&e, MS_ERR_PARSE, path, line, "%s", msg);
    return c->report(c->ctx, &e);
}

static ms_status tchk_ids(tchk *c, const trace_op *o, const uint64_t *ids, uint32_t n,
                          const char *verb, const char *path, uint64_t line)
{
    for (uint32_t i = 0; i < n; i++)
        if (!u64map_get(c->live, ids[i], NULL) &&
            tchk_problem(c, path, line, "op %llu %s tensor %llu which is not live",
                         (unsigned long long)o->id, verb, (unsigned long long)ids[i]))
            return MS_ERR_PARSE;
    return MS_OK;
}

/* Checks one record against the live set and updates it. Problems go to c->report;
 * returns MS_ERR_PARSE when the reporter asked to stop, MS_ERR_NOMEM on allocation failure. */
static ms_status tchk_rec(tchk *c, const trace_rec *rec, const char *path)
{
    uint64_t line = rec->line, bytes;
    switch (rec->type) {
    case TR_ALLOC: {
        const trace_tensor *t = &rec->u.alloc;
        if (u64map_get(c->live, t->id, NULL)) {
            return tchk_problem(c, path, line, "alloc of tensor %llu which is already live",
                                (unsigned long long)t->id) ? MS_ERR_PARSE : MS_OK;
        }
        if (u64map_put(c->live, t->id, t->bytes)) return MS_ERR_NOMEM;
        c->cur_bytes += t->bytes;
        if (c->cur_bytes > c->peak_bytes) c->peak_bytes = c->cur_bytes;
        return MS_OK;
    }
    case TR_FREE:
        if (!u64map_del(c->live, rec->u.free_id, &bytes))
            return tchk_problem(c, path, line, "free of tensor %llu which is not live",
                                (unsigned long long)rec->u.free_id) ? MS_ERR_PARSE : MS_OK;
        c->cur_bytes -= bytes;
        return MS_OK;
    case TR_OP: {
        const trace_op *o = &rec->u.op;
        ms_status st = tchk_ids(c, o, o->in, o->n_in, "reads", path, line);
        if (st == MS_OK) st = tchk_ids(c, o, o->out, o->n_out, "writes", path, line);
        return st;
    }
    case TR_MARK:
        return MS_OK;
    }
    return MS_OK;
}

/* ---- trace_check_file ---- */

typedef struct check_ctx {
    FILE *diag;
    uint64_t max_errors;
    trace_check_report *rep;
} check_ctx;

static int check_report(void *vctx, const ms_error *e)
{
    check_ctx *cx = vctx;
    cx->rep->errors++;
    if (cx->diag && (cx->max_errors == 0 || cx->rep->errors <= cx->max_errors))
        fprintf(cx->diag, "%s\n", e->msg);
    return 0; /* go on: report every problem */
}

static void count_rec(trace_check_report *rep, const trace_rec *rec)
{
    rep->records++;
    switch (rec->type) {
    case TR_ALLOC: rep->allocs++; break;
    case TR_FREE: rep->frees++; break;
    case TR_OP: rep->ops++; break;
    case TR_MARK: rep->marks++; break;
    }
}

ms_status trace_check_file(const char *path, FILE *diag, uint64_t max_errors,
                           trace_check_report *rep, ms_error *err)
{
    memset(rep, 0, sizeof *rep);
    check_ctx cx = {diag, max_errors, rep};
    tchk c;
    trace_reader *r;
    ms_status st = rd_open(path, &r, err);
    if (st != MS_OK) return st;
    if (!tchk_init(&c, check_report, &cx, r)) {
        trace_reader_free(r);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    for (;;) {
        trace_rec rec;
        char *key = NULL, *val = NULL;
        line_kind kind;
        ms_error e;
        st = rd_line(r, &rec, &key, &val, &kind, &e);
        if (st == MS_OK && kind == LN_META) st = rd_add_meta(r, key, val, &e);
        if (st == MS_OK && kind == LN_REC) {
            count_rec(rep, &rec);
            st = tchk_rec(&c, &rec, path);
            if (st == MS_ERR_NOMEM) ms_fail(&e, st, "out of memory");
        }
        if (st == MS_OK && kind == LN_EOF) break;
        if (st == MS_ERR_PARSE && !r->fatal) { check_report(&cx, &e); continue; }
        if (st != MS_OK) {
            if (err) *err = e;
            trace_reader_free(r);
            tchk_done(&c);
            return st;
        }
    }
    rep->live_at_end = u64map_count(c.live);
    rep->peak_live_bytes = c.peak_bytes;
    if (diag && max_errors && rep->errors > max_errors)
        fprintf(diag, "%s: %llu more problems not shown\n", path,
                (unsigned long long)(rep->errors - max_errors));
    trace_reader_free(r);
    tchk_done(&c);
    return MS_OK;
}

/* ---- first-problem readers (load, stats) ---- */

static int first_report(void *vctx, const ms_error *e)
{
    *(ms_error *)vctx = *e;
    return 1; /* stop at the first problem */
}

/* Reads records one by one, checking liveness, and calls fn on each; stops at the first
 * problem with its FILE:LINE message. */
static ms_status scan_checked(trace_reader *r, const char *path,
                              ms_status (*fn)(void *ctx, const trace_rec *rec, uint64_t cur),
                              void *ctx, uint64_t *peak, ms_error *err)
{
    ms_error first;
    tchk c;
    if (!tchk_init(&c, first_report, &first, r))
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_status st;
    for (;;) {
        trace_rec rec;
        st = trace_reader_next(r, &rec, err);
        if (st == MS_ERR_LIMIT) { st = MS_OK; break; }
        if (st != MS_OK) break;
        st = tchk_rec(&c, &rec, path);
        if (st == MS_ERR_PARSE) { if (err) *err = first; break; }
        if (st != MS_OK) { ms_fail(err, st, "out of memory"); break; }
        if ((st = fn(ctx, &rec, c.cur_bytes)) != MS_OK) break;
    }
    if (peak) *peak = c.peak_bytes;
    tchk_done(&c);
    return st;
}

/* ------------------------------------------------------------------------------------ */
/* in-memory trace */

trace_t *trace_new(void)
{
    trace_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->tensor_idx = u64map_new(1024);
    t->op_idx = u64map_new(1024);
    if (!t->tensor_idx || !t->op_idx) { trace_free(t); return NULL; }
    return t;
}

trace_t *trace_ref(const trace_t *t)
{
    trace_t *w = (trace_t *)t; /* the count is bookkeeping, not the trace's content */
    if (w) w->refs++;
    return w;
}

void trace_free(trace_t *t)
{
    if (!t) return;
    if (t->refs) { /* another holder still reads it */
        t->refs--;
        return;
    }
    if (!tshape_give_back(t)) free(t->recs);
    free(t->spare_recs);
    for (size_t i = 0; i < t->n_meta; i++) { free(t->mkey[i]); free(t->mval[i]); }
    free(t->mkey);
    free(t->mval);
    u64map_free(t->tensor_idx);
    u64map_free(t->op_idx);
    for (u64blk *b = t->blocks, *nx; b; b = nx) { nx = b->next; free(b); }
    free(t->am);
    tshape_derived_free(t);
    trace_free(t->base);
    free(t);
}

ms_status trace_set_meta(trace_t *t, const char *key, const char *value)
{
    if (!valid_token(key, TRACE_META_KEY_MAX) || !valid_meta_value(value))
        return MS_ERR_INVALID;
    char *v = strdup(value);
    if (!v) return MS_ERR_NOMEM;
    for (size_t i = 0; i < t->n_meta; i++)
        if (strcmp(t->mkey[i], key) == 0) {
            free(t->mval[i]);
            t->mval[i] = v;
            return MS_OK;
        }
    if (t->n_meta == TRACE_META_MAX) { free(v); return MS_ERR_LIMIT; }
    size_t cap = t->cap_meta;
    char *k = strdup(key);
    if (!k || ms_grow((void **)&t->mkey, &cap, t->n_meta + 1, sizeof *t->mkey) != MS_OK ||
        ms_grow((void **)&t->mval, &t->cap_meta, t->n_meta + 1, sizeof *t->mval) != MS_OK) {
        free(k);
        free(v);
        return MS_ERR_NOMEM;
    }
    t->mkey[t->n_meta] = k;
    t->mval[t->n_meta] = v;
    t->n_meta++;
    return MS_OK;
}

const char *trace_get_meta(const trace_t *t, const char *key)
{
    for (size_t i = 0; i < t->n_meta; i++)
        if (strcmp(t->mkey[i], key) == 0) return t->mval[i];
    return NULL;
}

size_t trace_meta_count(const trace_t *t) { return t->n_meta; }
const char *trace_meta_key(const trace_t *t, size_t i) { return i < t->n_meta ? t->mkey[i] : NULL; }
const char *trace_meta_value(const trace_t *t, size_t i)
{
    return i < t->n_meta ? t->mval[i] : NULL;
}

/* Copies n ids into block storage; NULL for n == 0. */
static const uint64_t *copy_ids(trace_t *t, const uint64_t *ids, uint32_t n, int *oom)
{
    if (n == 0) return NULL;
    u64blk *b = t->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        u64blk *nb = malloc(sizeof *nb + cap * sizeof(uint64_t));
        if (!nb) { *oom = 1; return NULL; }
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        t->blocks = b = nb;
        t->block_bytes += sizeof *nb + cap * sizeof(uint64_t);
    }
    uint64_t *dst = b->v + b->used;
    memcpy(dst, ids, n * sizeof *ids);
    b->used += n;
    return dst;
}

/* The same rules the reader enforces, so that whatever is appended can be written and read. */
static int rec_valid(const trace_rec *rec)
{
    switch (rec->type) {
    case TR_ALLOC: {
        const trace_tensor *a = &rec->u.alloc;
        return a->bytes > 0 && a->bytes <= TRACE_BYTES_MAX && (unsigned)a->cls < TC_COUNT &&
               a->layer >= -1 && a->stream >= 0 && a->tok_scaled <= 1 && a->producer >= -1 &&
               valid_name(a->name);
    }
    case TR_FREE:
        return 1;
    case TR_OP: {
        const trace_op *o = &rec->u.op;
        return (unsigned)o->kind < TK_COUNT && (unsigned)o->phase < TP_COUNT &&
               o->layer >= -1 && isfinite(o->flops) && o->flops >= 0 && !isnan(o->dur_us) &&
               o->dur_us < INFINITY && o->host_us >= 0 && o->host_us < INFINITY &&
               o->host_sync <= 1 && o->n_in <= TRACE_LIST_MAX &&
               o->n_out <= TRACE_LIST_MAX && (o->in || !o->n_in) && (o->out || !o->n_out) &&
               valid_name(o->name);
    }
    case TR_MARK: {
        const trace_mark *m = &rec->u.mark;
        switch (m->kind) {
        case TM_ITER: return m->value >= 0;
        case TM_PHASE: return m->value >= 0 && m->value < TP_COUNT;
        case TM_LAYER: return m->value >= -1 && m->value <= INT32_MAX;
        default: return 0;
        }
    }
    }
    return 0;
}

ms_status trace_append_mark(trace_t *t, trace_markkind kind, int64_t value)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_MARK;
    r.u.mark.kind = kind;
    r.u.mark.value = value;
    return trace_append(t, &r);
}

/* snprintf(buf, TRACE_NAME_MAX, "L%d.%s" or "%s", ...) by hand: the generators name every
 * record this way, and the formatted print was a tenth of a sweep's instructions. */
size_t trace_layer_prefix(char buf[TRACE_LAYER_PREFIX_MAX], int layer)
{
    size_t n = 0;
    if (layer >= 0) {
        char d[10];
        int k = 0;
        unsigned v = (unsigned)layer;
        do { d[k++] = (char)('0' + v % 10); v /= 10; } while (v);
        buf[n++] = 'L';
        while (k) buf[n++] = d[--k];
        buf[n++] = '.';
    }
    return n;
}

void trace_layer_name(char *buf, int layer, const char *what)
{
    size_t n = trace_layer_prefix(buf, layer);
    size_t k = strnlen(what, TRACE_NAME_MAX - 1 - n);
    memcpy(buf + n, what, k);
    buf[n + k] = '\0';
}

void trace_alloc_rec(trace_rec *r, uint64_t id, uint64_t bytes, trace_class cls, int layer,
                     int64_t producer, int tok_scaled, const char *what)
{
    memset(r, 0, sizeof *r);
    r->type = TR_ALLOC;
    trace_tensor *a = &r->u.alloc;
    a->id = id;
    a->bytes = bytes;
    a->cls = cls;
    a->layer = layer;
    a->tok_scaled = (uint8_t)tok_scaled;
    a->producer = producer;
    trace_layer_name(a->name, layer, what);
}

ms_status trace_reserve(trace_t *t, size_t n)
{
    if (n <= t->cap) return MS_OK;
    if (n > SIZE_MAX / sizeof *t->recs) return MS_ERR_NOMEM;
    trace_rec *p = realloc(t->recs, n * sizeof *p);
    if (!p) return MS_ERR_NOMEM;
    t->recs = p;
    t->cap = n;
    return MS_OK;
}

ms_status trace_append(trace_t *t, const trace_rec *rec)
{
    if (t->base) { /* made by tshape_new_like (traces/trace_shape.c) */
        if (t->binding) return tshape_append(t, rec);
        if (!t->tensor_idx && tshape_unshare(t) != MS_OK) return MS_ERR_NOMEM;
    }
    if (!rec_valid(rec)) return MS_ERR_INVALID;
    if (t->n == t->cap) {
        /* by half again: less slack than doubling, and large reallocs are remapped, not
         * copied */
        size_t nc = t->cap < 64 ? 64 : t->cap + t->cap / 2;
        if (nc > SIZE_MAX / sizeof *t->recs) return MS_ERR_NOMEM;
        trace_rec *p = realloc(t->recs, nc * sizeof *p);
        if (!p) return MS_ERR_NOMEM;
        t->recs = p;
        t->cap = nc;
    }
    trace_rec *dst = &t->recs[t->n];
    *dst = *rec;
    if (rec->type == TR_OP) {
        int oom = 0;
        trace_op *o = &dst->u.op;
        o->in = copy_ids(t, rec->u.op.in, rec->u.op.n_in, &oom);
        o->out = copy_ids(t, rec->u.op.out, rec->u.op.n_out, &oom);
        if (oom) return MS_ERR_NOMEM;
        if (o->dur_us < 0) o->dur_us = -1; /* "unknown" has one spelling */
        if (o->host_us > 0 || o->host_sync) t->host_times = 1;
        if (u64map_put(t->op_idx, o->id, t->n)) return MS_ERR_NOMEM;
    } else if (rec->type == TR_ALLOC) {
        if (u64map_put(t->tensor_idx, rec->u.alloc.id, t->n)) return MS_ERR_NOMEM;
    }
    t->n++;
    return MS_OK;
}

size_t trace_count(const trace_t *t) { return t->n; }
int trace_has_host_times(const trace_t *t) { return t->host_times; }
const trace_rec *trace_get(const trace_t *t, size_t i) { return i < t->n ? &t->recs[i] : NULL; }
const trace_rec *trace_records(const trace_t *t, size_t *n)
{
    *n = t->n;
    return t->recs;
}

const trace_tensor *trace_find_tensor(const trace_t *t, uint64_t id)
{
    uint64_t i;
    const u64map *m = t->tensor_idx ? t->tensor_idx : t->base->tensor_idx;
    return u64map_get(m, id, &i) ? &t->recs[i].u.alloc : NULL;
}

const trace_op *trace_find_op(const trace_t *t, uint64_t id)
{
    uint64_t i;
    const u64map *m = t->op_idx ? t->op_idx : t->base->op_idx;
    return u64map_get(m, id, &i) ? &t->recs[i].u.op : NULL;
}

size_t trace_mem_bytes(const trace_t *t)
{
    const trace_t *ix = t->tensor_idx ? t : t->base; /* whose id lists and indexes it reads */
    return sizeof *t + t->cap * sizeof *t->recs + ix->block_bytes +
           u64map_bytes(ix->tensor_idx) + u64map_bytes(ix->op_idx);
}

/* What trace_mem_bytes becomes if rec is appended: the record array at its grown size (a
 * large realloc is remapped in place), a map that must grow with its old and new slot arrays
 * side by side, a new id block. */
static size_t mem_after(const trace_t *t, const trace_rec *rec)
{
    size_t b = trace_mem_bytes(t);
    if (t->n == t->cap) b += (t->cap < 64 ? 64 : t->cap / 2) * sizeof *t->recs;
    const u64map *m = rec->type == TR_ALLOC ? t->tensor_idx : rec->type == TR_OP ? t->op_idx
                                                                                 : NULL;
    if (m && u64map_put_grows(m)) b += 2 * u64map_bytes(m);
    if (rec->type == TR_OP) {
        size_t n = (size_t)rec->u.op.n_in + rec->u.op.n_out;
        if (n && (!t->blocks || t->blocks->cap - t->blocks->used < n))
            b += sizeof(u64blk) + (n > 65536 ? n : 65536) * sizeof(uint64_t) * 2;
    }
    return b;
}

typedef struct load_ctx {
    trace_t *t;
    uint64_t max_bytes;  /* 0: no bound */
    int over;            /* the next record would pass the bound */
} load_ctx;

static ms_status load_one(void *ctx, const trace_rec *rec, uint64_t cur)
{
    (void)cur;
    load_ctx *lc = ctx;
    if (lc->max_bytes && mem_after(lc->t, rec) > lc->max_bytes) {
        lc->over = 1;
        return MS_ERR_LIMIT;
    }
    return trace_append(lc->t, rec);
}

ms_status trace_load(const char *path, trace_t **out, ms_error *err)
{
    return trace_load_max(path, TRACE_LOAD_MAX_BYTES, out, err);
}

ms_status trace_load_max(const char *path, uint64_t max_bytes, trace_t **out, ms_error *err)
{
    *out = NULL;
    trace_reader *r;
    ms_status st = trace_reader_open(path, &r, err);
    if (st != MS_OK) return st;
    trace_t *t = trace_new();
    if (!t) { trace_reader_free(r); return ms_fail(err, MS_ERR_NOMEM, "out of memory"); }
    for (size_t i = 0; i < r->n_meta && st == MS_OK; i++)
        st = trace_set_meta(t, r->mkey[i], r->mval[i]);
    load_ctx lc = {t, max_bytes, 0};
    if (st != MS_OK) ms_fail_at(err, st, path, 0, "cannot keep meta data: %s", ms_status_str(st));
    else st = scan_checked(r, path, load_one, &lc, NULL, err);
    if (lc.over) {
        char mb[32];
        st = ms_fail_at(err, MS_ERR_INVALID, path, 0,
                        "the trace holds more than %zu records (%s in memory, the bound of a "
                        "trace loaded whole, traces/FORMAT.md); planning and simulating load a "
                        "trace whole: cut it into fewer iterations, or use memsim replay, trace "
                        "check or trace stats, which stream traces of any size",
                        t->n, ms_fmt_bytes(max_bytes, mb, sizeof mb));
    } else if (st == MS_ERR_INVALID || st == MS_ERR_NOMEM) {
        ms_fail_at(err, st, path, 0, "cannot keep record: %s", ms_status_str(st));
    }
    trace_reader_free(r);
    if (st != MS_OK) { trace_free(t); return st; }
    if (t->cap > t->n && t->n) { /* give the slack back */
        trace_rec *p = realloc(t->recs, t->n * sizeof *p);
        if (p) { t->recs = p; t->cap = t->n; }
    }
    *out = t;
    return MS_OK;
}

/* ------------------------------------------------------------------------------------ */
/* writer */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->cap == 0 && ms_grow((void **)&b->p, &b->cap, 4096, 1) != MS_OK) b->oom = 1;
    for (int tries = 0; tries < 2 && !b->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) { b->oom = 1; return; }
        if ((size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        if (ms_grow((void **)&b->p, &b->cap, b->n + (size_t)k + 1, 1) != MS_OK) b->oom = 1;
    }
}

static void sb_double(sbuf *b, double v)
{
    char buf[40];
    sb_printf(b, " %s", ms_fmt_double(v, buf, sizeof buf));
}

static void sb_ids(sbuf *b, const uint64_t *ids, uint32_t n)
{
    if (n == 0) { sb_printf(b, " -"); return; }
    for (uint32_t i = 0; i < n; i++)
        sb_printf(b, "%c%llu", i ? ',' : ' ', (unsigned long long)ids[i]);
}

static void fmt_rec(sbuf *b, const trace_rec *rec)
{
    switch (rec->type) {
    case TR_ALLOC: {
        const trace_tensor *a = &rec->u.alloc;
        sb_printf(b, "alloc %llu %llu %s %d %d %d ", (unsigned long long)a->id,
                  (unsigned long long)a->bytes, trace_class_name(a->cls), (int)a->layer,
                  a->tok_scaled ? 1 : 0, (int)a->stream);
        if (a->producer < 0) sb_printf(b, "-");
        else sb_printf(b, "%lld", (long long)a->producer);
        sb_printf(b, " %s\n", a->name[0] ? a->name : "-");
        break;
    }
    case TR_FREE:
        sb_printf(b, "free %llu\n", (unsigned long long)rec->u.free_id);
        break;
    case TR_OP: {
        const trace_op *o = &rec->u.op;
        sb_printf(b, "op %llu %s %s %d", (unsigned long long)o->id, trace_opkind_name(o->kind),
                  trace_phase_name(o->phase), (int)o->layer);
        sb_double(b, o->flops);
        sb_printf(b, " %llu %llu", (unsigned long long)o->bytes_read,
                  (unsigned long long)o->bytes_written);
        if (o->dur_us < 0) sb_printf(b, " -");
        else sb_double(b, o->dur_us);
        sb_ids(b, o->in, o->n_in);
        sb_ids(b, o->out, o->n_out);
        sb_printf(b, " %s", o->name[0] ? o->name : "-");
        if (o->host_us > 0) {
            char buf[40];
            sb_printf(b, " host_us=%s", ms_fmt_double(o->host_us, buf, sizeof buf));
        }
        sb_printf(b, o->host_sync ? " host_sync=1\n" : "\n");
        break;
    }
    case TR_MARK: {
        const trace_mark *m = &rec->u.mark;
        if (m->kind == TM_PHASE)
            sb_printf(b, "mark phase %s\n", trace_phase_name((trace_phase)m->value));
        else
            sb_printf(b, "mark %s %lld\n", trace_markkind_name(m->kind), (long long)m->value);
        break;
    }
    }
}

/* Formats the whole trace piece by piece; emit gets each chunk. */
static int write_all(const trace_t *t, int (*emit)(void *ctx, const char *s, size_t n), void *ctx)
{
    sbuf b = {0};
    int bad = 0;
    sb_printf(&b, "memsim-trace %d\n", TRACE_FORMAT_VERSION);
    for (size_t i = 0; i < t->n_meta; i++) {
        if (t->mval[i][0]) sb_printf(&b, "meta %s %s\n", t->mkey[i], t->mval[i]);
        else sb_printf(&b, "meta %s\n", t->mkey[i]);
    }
    for (size_t i = 0; i < t->n && !bad && !b.oom; i++) {
        fmt_rec(&b, &t->recs[i]);
        if (b.n >= 65536) { bad = emit(ctx, b.p, b.n); b.n = 0; }
    }
    if (!bad && !b.oom && b.n) bad = emit(ctx, b.p, b.n);
    bad |= b.oom;
    free(b.p);
    return bad;
}

int trace_text_append(char **buf, size_t *n, size_t *cap, const trace_rec *rec)
{
    sbuf b = {*buf, *n, *cap, 0};
    fmt_rec(&b, rec);
    *buf = b.p;
    *n = b.n;
    *cap = b.cap;
    return b.oom ? -1 : 0;
}

int trace_rec_valid(const trace_rec *rec) { return rec_valid(rec); }

int trace_alloc_bytes_valid(uint64_t bytes) { return bytes > 0 && bytes <= TRACE_BYTES_MAX; }

int trace_op_numbers_valid(double flops, double dur_us, double host_us)
{
    return isfinite(flops) && flops >= 0 && !isnan(dur_us) && dur_us < INFINITY &&
           host_us >= 0 && host_us < INFINITY;
}

int trace_rec_numbers_valid(const trace_rec *rec)
{
    if (rec->type == TR_ALLOC) return trace_alloc_bytes_valid(rec->u.alloc.bytes);
    if (rec->type != TR_OP) return 1;
    const trace_op *o = &rec->u.op;
    return trace_op_numbers_valid(o->flops, o->dur_us, o->host_us);
}

ms_status trace_scan_checked(trace_reader *r, const char *path,
                             ms_status (*fn)(void *ctx, const trace_rec *rec, uint64_t cur),
                             void *ctx, ms_error *err)
{
    return scan_checked(r, path, fn, ctx, NULL, err);
}

int trace_meta_valid(const char *key, const char *value)
{
    return valid_token(key, TRACE_META_KEY_MAX) && valid_meta_value(value);
}

trace_form trace_reader_form(const trace_reader *r)
{
    return r->bin ? TRACE_FORM_BINARY : TRACE_FORM_TEXT;
}

static int emit_out(void *ctx, const char *s, size_t n) { return ms_out_write(ctx, s, n) != 0; }
static int emit_fp(void *ctx, const char *s, size_t n) { return fwrite(s, 1, n, ctx) != n; }

ms_status trace_write(const trace_t *t, const char *path, ms_error *err)
{
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) return st;
    if (write_all(t, emit_out, o)) {
        ms_out_abort(o);
        return ms_fail_at(err, MS_ERR_IO, path, 0, "write failed");
    }
    return ms_out_commit(o, err);
}

ms_status trace_write_fp(const trace_t *t, FILE *fp)
{
    if (write_all(t, emit_fp, fp) || ferror(fp)) return MS_ERR_IO;
    return MS_OK;
}

/* ------------------------------------------------------------------------------------ */
/* statistics */

static ms_status stats_one(void *ctx, const trace_rec *rec, uint64_t cur)
{
    (void)cur;
    trace_stats *s = ctx;
    s->records++;
    switch (rec->type) {
    case TR_ALLOC:
        s->allocs++;
        s->bytes_by_class[rec->u.alloc.cls] += rec->u.alloc.bytes;
        break;
    case TR_FREE: s->frees++; break;
    case TR_OP:
        s->ops++;
        s->total_flops += rec->u.op.flops;
        if (rec->u.op.dur_us >= 0) s->total_dur_us += rec->u.op.dur_us;
        break;
    case TR_MARK:
        s->marks++;
        if (rec->u.mark.kind == TM_ITER) s->iterations++;
        break;
    }
    return MS_OK;
}

ms_status trace_stats_file(const char *path, trace_stats *st, ms_error *err)
{
    memset(st, 0, sizeof *st);
    trace_reader *r;
    ms_status s = trace_reader_open(path, &r, err);
    if (s != MS_OK) return s;
    s = scan_checked(r, path, stats_one, st, &st->peak_live_bytes, err);
    trace_reader_free(r);
    /* A trace without iteration marks is one iteration. */
    if (s == MS_OK && st->iterations == 0 && st->records > 0) st->iterations = 1;
    return s;
}

uint64_t trace_meta_u64(const trace_t *t, const char *key, uint64_t def)
{
    const char *v = trace_get_meta(t, key);
    uint64_t x;
    return (v && ms_parse_u64(v, &x)) ? x : def;
}

double trace_model_flops(const trace_t *t)
{
    double s = (double)trace_meta_u64(t, "seq", 0), P = (double)trace_meta_u64(t, "params", 0);
    /* a mixture-of-experts model: the parameters a token passes through */
    P = (double)trace_meta_u64(t, "active_params", (uint64_t)P);
    double n = (double)trace_meta_u64(t, "layers", 0), h = (double)trace_meta_u64(t, "hidden", 0);
    double b = (double)trace_meta_u64(t, "batch", 1), tp = (double)trace_meta_u64(t, "tp", 1);
    double cp = (double)trace_meta_u64(t, "cp", 1);
    if (s <= 0 || P <= 0 || n <= 0 || h <= 0) return 0;
    if (b <= 0) b = 1;
    if (tp <= 0) tp = 1;
    if (cp <= 0) cp = 1;
    return b * (6.0 * s * P + 6.0 * n * h * s * s) / (tp * cp);
}

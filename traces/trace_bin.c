/* trace_bin.c — the workload trace's binary form (traces/FORMAT.md, "Binary form"): a
 * versioned header, then little-endian fixed-width records with names in a string table
 * that is built as the file goes, and an end record that counts the records so that a cut
 * file is never taken for a whole one. The streaming reader checks every field it reads
 * and keeps one input block, the string table and the current op's id lists; the writer
 * takes records one at a time. Implements trace_int.h for traces/trace.c, which puts both
 * behind the trace module's one reader and writer. */
#define _POSIX_C_SOURCE 200809L
#include "traces/trace_int.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TBIN_MAJOR 1
#define TBIN_MINOR 0

/* Record tags; the header declares the fixed size of each, so that a later minor version
 * may lengthen a record (readers skip the bytes they do not know) or add fixed-size
 * record types (skipped whole). */
enum {
    TB_META = 1,   /* u16 key length, u16 value length; then key, value */
    TB_STRING,     /* u8 length; then the string: it gets the next index (from 1) */
    TB_RESET,      /* empties the string table */
    TB_ALLOC,
    TB_FREE,
    TB_OP,         /* then n_in + n_out u64 tensor ids */
    TB_MARK,
    TB_END,        /* u64: the number of records before it */
    TB_NTYPES = TB_END
};

/* Fixed part of each record after its tag byte, in this version. */
static const uint16_t fixed_bytes[TB_NTYPES + 1] = {
    [TB_META] = 4,  [TB_STRING] = 1, [TB_RESET] = 0, [TB_ALLOC] = 38,
    [TB_FREE] = 8,  [TB_OP] = 67,    [TB_MARK] = 9,  [TB_END] = 8};

#define TBIN_HEADER_BYTES (TBIN_MAGIC_LEN + 5 + 2 * TB_NTYPES)
/* Strings held at once; the writer empties its table (a reset record) when it is full, so
 * that both sides stay bounded whatever the number of distinct names. */
#define TBIN_STRINGS_MAX 65536u
#define TBIN_LIST_MAX 4096u          /* ids per direction of an op, as in the text form */
#define TBIN_KEY_MAX 64              /* meta key: shorter than this */
#define TBIN_VALUE_MAX 4096          /* meta value: at most this */
#define TBIN_BYTES_MAX (1ULL << 50)  /* a tensor's BYTES, as in the text form */
#define RD_BLOCK (1u << 18)          /* input block; holds the largest record (an op) */

/* ---------------------------------------------------------------- little-endian fields */

static inline uint64_t ld64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t ld32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint16_t ld16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

static inline double ldf64(const unsigned char *p)
{
    uint64_t u = ld64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static inline void st64(unsigned char *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static inline void st32(unsigned char *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

static inline void st16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline void stf64(unsigned char *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    st64(p, u);
}

/* A double the text form can hold: finite and not subnormal (strtod refuses those as an
 * underflow, so a binary trace holding one could not be written as text and read back). */
static int text_double(double v) { return isfinite(v) && (v == 0 || fabs(v) >= DBL_MIN); }

/* A name or key as the text form can spell it: no blank, newline or NUL. */
static int token_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
            return 0;
    return n > 0;
}

/* ================================================================ reader */

struct tbin_rd {
    ms_bytes *in;
    char *path;
    unsigned char *buf;            /* RD_BLOCK bytes; [pos, len) unread */
    size_t pos, len;
    int in_eof;
    unsigned n_types;              /* record types the file declares */
    uint16_t fixed[256];           /* their fixed sizes, as declared */
    uint64_t recno;                /* records read, the current one included */
    int ended, fatal;
    char (*str)[TRACE_NAME_MAX];   /* string table, index 1.. at str[0..] */
    uint32_t n_str, cap_str;
    uint64_t *ids;                 /* the current op's in and out ids */
    size_t cap_ids;
    char key[TBIN_KEY_MAX], val[TBIN_VALUE_MAX + 1];
};

uint64_t tbin_rd_record_no(const tbin_rd *r) { return r->recno; }

/* "FILE: record N: message" for the current record. */
static ms_status rfail(const tbin_rd *r, ms_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ms_status rfail(const tbin_rd *r, ms_error *err, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ms_fail_at(err, MS_ERR_PARSE, r->path, 0, "record %llu: %s",
                      (unsigned long long)r->recno, msg);
}

/* Makes n unread bytes available at buf + pos (n <= RD_BLOCK); 0 when the data ends first.
 * Moves the unread bytes: pointers into buf are stale after it. */
static ms_status need(tbin_rd *r, size_t n, int *have, ms_error *err)
{
    *have = 1;
    if (r->len - r->pos >= n) return MS_OK;
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
    while (r->len < n && !r->in_eof) {
        size_t got;
        ms_status st = ms_bytes_read(r->in, r->buf + r->len, RD_BLOCK - r->len, &got, err);
        if (st != MS_OK) return st;
        if (got == 0) r->in_eof = 1;
        r->len += got;
    }
    *have = r->len >= n;
    return MS_OK;
}

static ms_status read_header(tbin_rd *r, ms_error *err)
{
    int have;
    ms_status st = need(r, TBIN_MAGIC_LEN + 5, &have, err);
    if (st != MS_OK) return st;
    const unsigned char *p = r->buf;
    if (!have || memcmp(p, TBIN_MAGIC, TBIN_MAGIC_LEN) != 0)
        return ms_fail_at(err, MS_ERR_PARSE, r->path, 0,
                          "header: truncated or bad magic (not a binary memsim trace)");
    unsigned major = ld16(p + 8), minor = ld16(p + 10), nt = p[12];
    if (major == 0)
        return ms_fail_at(err, MS_ERR_PARSE, r->path, 0, "header: bad version 0.%u", minor);
    if (major > TBIN_MAJOR)
        return ms_fail_at(err, MS_ERR_PARSE, r->path, 0,
                          "binary trace format version %u.%u is newer than this reader "
                          "(version %d.%d)", major, minor, TBIN_MAJOR, TBIN_MINOR);
    if (nt < TB_NTYPES)
        return ms_fail_at(err, MS_ERR_PARSE, r->path, 0,
                          "header: %u record types declared, version %u.%u has %d", nt, major,
                          minor, TB_NTYPES);
    r->pos = TBIN_MAGIC_LEN + 5;
    if ((st = need(r, 2u * nt, &have, err)) != MS_OK) return st;
    if (!have) return ms_fail_at(err, MS_ERR_PARSE, r->path, 0, "header: truncated");
    p = r->buf + r->pos;
    for (unsigned t = 1; t <= nt; t++) {
        unsigned z = ld16(p + 2 * (t - 1));
        if (t <= TB_NTYPES && z < fixed_bytes[t])
            return ms_fail_at(err, MS_ERR_PARSE, r->path, 0,
                              "header: record type %u declared %u bytes long, at least %u "
                              "expected", t, z, fixed_bytes[t]);
        if (z > 4096)
            return ms_fail_at(err, MS_ERR_PARSE, r->path, 0,
                              "header: record type %u declared %u bytes long (at most 4096)",
                              t, z);
        r->fixed[t] = (uint16_t)z;
    }
    r->n_types = nt;
    r->pos += 2u * nt;
    return MS_OK;
}

ms_status tbin_rd_open(const char *path, ms_bytes *in, tbin_rd **out, ms_error *err)
{
    *out = NULL;
    tbin_rd *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path)) || !(r->buf = malloc(RD_BLOCK))) {
        if (r) free(r->path);
        free(r);
        ms_bytes_free(in);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    r->in = in;
    ms_status st = read_header(r, err);
    if (st != MS_OK) { tbin_rd_free(r); return st; }
    *out = r;
    return MS_OK;
}

void tbin_rd_free(tbin_rd *r)
{
    if (!r) return;
    ms_bytes_free(r->in);
    free(r->path);
    free(r->buf);
    free(r->str);
    free(r->ids);
    free(r);
}

/* The name with string index ix into name (0: no name). */
static ms_status get_name(tbin_rd *r, const char *rt, uint32_t ix, char *name, ms_error *err)
{
    if (ix == 0) { memset(name, 0, TRACE_NAME_MAX); return MS_OK; }
    if (ix > r->n_str)
        return rfail(r, err, "%s: NAME index %u out of range (the string table holds %u)", rt,
                     ix, r->n_str);
    memcpy(name, r->str[ix - 1], TRACE_NAME_MAX);
    return MS_OK;
}

static ms_status rd_string(tbin_rd *r, const unsigned char *p, int *fatal, ms_error *err)
{
    unsigned n = p[0];
    int have;
    ms_status st = need(r, n, &have, err);
    if (st != MS_OK) return st;
    *fatal = 1; /* a table that lost a string names everything after it wrongly */
    if (!have) return rfail(r, err, "truncated: the file ends inside a string");
    const unsigned char *s = r->buf + r->pos;
    r->pos += n;
    if (n == 0 || n >= TRACE_NAME_MAX || !token_ok(s, n))
        return rfail(r, err, "string: a name of 1 to %d characters without blanks expected",
                     TRACE_NAME_MAX - 1);
    if (r->n_str == TBIN_STRINGS_MAX)
        return rfail(r, err, "string table holds more than %u strings without a reset record",
                     TBIN_STRINGS_MAX);
    if (r->n_str == r->cap_str) {
        uint32_t nc = r->cap_str ? r->cap_str * 2 : 256;
        void *q = realloc(r->str, (size_t)nc * sizeof *r->str);
        if (!q) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        r->str = q;
        r->cap_str = nc;
    }
    memset(r->str[r->n_str], 0, TRACE_NAME_MAX); /* whole entries are copied out */
    memcpy(r->str[r->n_str], s, n);
    r->n_str++;
    *fatal = 0;
    return MS_OK;
}

static ms_status rd_meta(tbin_rd *r, const unsigned char *p, const char **key,
                         const char **val, ms_error *err)
{
    unsigned kn = ld16(p), vn = ld16(p + 2);
    int have;
    ms_status st = need(r, (size_t)kn + vn, &have, err);
    if (st != MS_OK) return st;
    if (!have) return MS_ERR_LIMIT; /* the caller reports the cut */
    const unsigned char *s = r->buf + r->pos;
    r->pos += (size_t)kn + vn;
    if (kn >= TBIN_KEY_MAX || !token_ok(s, kn))
        return rfail(r, err, "meta: KEY of 1 to %d characters without blanks expected",
                     TBIN_KEY_MAX - 1);
    if (vn > TBIN_VALUE_MAX)
        return rfail(r, err, "meta: VALUE longer than %d characters", TBIN_VALUE_MAX);
    const unsigned char *v = s + kn;
    /* as the text form reads it back: one line, no blanks at either end */
    int ok = 1;
    for (unsigned i = 0; i < vn && ok; i++) ok = v[i] != '\n' && v[i] != '\0';
    if (vn && (v[0] == ' ' || v[0] == '\t' || v[0] == '\r' || v[vn - 1] == ' ' ||
               v[vn - 1] == '\t' || v[vn - 1] == '\r'))
        ok = 0;
    if (!ok)
        return rfail(r, err, "meta %.*s: VALUE holds a newline, a NUL or blanks at an end",
                     (int)kn, (const char *)s);
    memcpy(r->key, s, kn);
    r->key[kn] = '\0';
    memcpy(r->val, v, vn);
    r->val[vn] = '\0';
    *key = r->key;
    *val = r->val;
    return MS_OK;
}

static ms_status rd_alloc(tbin_rd *r, const unsigned char *p, trace_rec *rec, ms_error *err)
{
    trace_tensor *t = &rec->u.alloc;
    rec->type = TR_ALLOC;
    t->id = ld64(p);
    t->bytes = ld64(p + 8);
    t->producer = (int64_t)ld64(p + 16);
    t->layer = (int32_t)ld32(p + 24);
    t->stream = (int32_t)ld32(p + 28);
    uint32_t name = ld32(p + 32);
    unsigned cls = p[36], tok = p[37];
    if (t->bytes == 0) return rfail(r, err, "alloc: BYTES must be > 0");
    if (t->bytes > TBIN_BYTES_MAX) return rfail(r, err, "alloc: BYTES larger than 1 PiB");
    if (cls >= TC_COUNT) return rfail(r, err, "alloc: unknown CLASS %u (0 to %d)", cls, TC_COUNT - 1);
    t->cls = (trace_class)cls;
    if (t->layer < -1) return rfail(r, err, "alloc: bad LAYER %d (an integer >= -1)", (int)t->layer);
    if (tok > 1) return rfail(r, err, "alloc: TOK must be 0 or 1, not %u", tok);
    t->tok_scaled = (uint8_t)tok;
    if (t->stream < 0) return rfail(r, err, "alloc: bad STREAM %d (an integer >= 0)", (int)t->stream);
    if (t->producer < -1)
        return rfail(r, err, "alloc: bad PRODUCER %lld (an op id or -1)", (long long)t->producer);
    return get_name(r, "alloc", name, t->name, err);
}

static ms_status rd_op(tbin_rd *r, const unsigned char *p, trace_rec *rec, int *fatal,
                       ms_error *err)
{
    trace_op *o = &rec->u.op;
    rec->type = TR_OP;
    o->id = ld64(p);
    o->flops = ldf64(p + 8);
    o->bytes_read = ld64(p + 16);
    o->bytes_written = ld64(p + 24);
    o->dur_us = ldf64(p + 32);
    o->layer = (int32_t)ld32(p + 40);
    uint32_t name = ld32(p + 44), n_in = ld32(p + 48), n_out = ld32(p + 52);
    unsigned kind = p[56], phase = p[57];
    o->host_us = ldf64(p + 58);
    unsigned sync = p[66];
    if (n_in > TBIN_LIST_MAX || n_out > TBIN_LIST_MAX) {
        *fatal = 1; /* where the next record starts is unknown */
        return rfail(r, err, "op: more than %u %s ids (%u)", TBIN_LIST_MAX,
                     n_in > TBIN_LIST_MAX ? "input" : "output",
                     n_in > TBIN_LIST_MAX ? n_in : n_out);
    }
    size_t n = (size_t)n_in + n_out;
    int have;
    ms_status st = need(r, n * 8, &have, err);
    if (st != MS_OK) return st;
    if (!have) {
        *fatal = 1;
        return rfail(r, err, "truncated: the file ends inside the op's id lists");
    }
    if (n > r->cap_ids) {
        uint64_t *q = realloc(r->ids, n * sizeof *q);
        if (!q) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        r->ids = q;
        r->cap_ids = n;
    }
    const unsigned char *s = r->buf + r->pos;
    for (size_t i = 0; i < n; i++) r->ids[i] = ld64(s + 8 * i);
    r->pos += n * 8;
    o->n_in = n_in;
    o->n_out = n_out;
    o->in = n_in ? r->ids : NULL;
    o->out = n_out ? r->ids + n_in : NULL;
    if (kind >= TK_COUNT) return rfail(r, err, "op: unknown KIND %u (0 to %d)", kind, TK_COUNT - 1);
    o->kind = (trace_opkind)kind;
    if (phase >= TP_COUNT) return rfail(r, err, "op: unknown PHASE %u (0 to %d)", phase, TP_COUNT - 1);
    o->phase = (trace_phase)phase;
    if (o->layer < -1) return rfail(r, err, "op: bad LAYER %d (an integer >= -1)", (int)o->layer);
    if (!text_double(o->flops) || o->flops < 0)
        return rfail(r, err, "op: bad FLOPS %g (a number >= 0)", o->flops);
    if (o->dur_us != -1 && (!text_double(o->dur_us) || o->dur_us < 0))
        return rfail(r, err, "op: bad DUR_US %g (a number >= 0, or -1 if unknown)", o->dur_us);
    if (!text_double(o->host_us) || o->host_us < 0)
        return rfail(r, err, "op: bad host_us %g (a number >= 0)", o->host_us);
    if (sync > 1) return rfail(r, err, "op: bad host_sync %u (0 or 1)", sync);
    o->host_sync = (uint8_t)sync;
    return get_name(r, "op", name, o->name, err);
}

static ms_status rd_mark(tbin_rd *r, const unsigned char *p, trace_rec *rec, ms_error *err)
{
    trace_mark *m = &rec->u.mark;
    rec->type = TR_MARK;
    unsigned kind = p[0];
    m->value = (int64_t)ld64(p + 1);
    switch (kind) {
    case TM_ITER:
        if (m->value < 0)
            return rfail(r, err, "mark iter: bad iteration %lld", (long long)m->value);
        break;
    case TM_PHASE:
        if (m->value < 0 || m->value >= TP_COUNT)
            return rfail(r, err, "mark phase: unknown phase %lld", (long long)m->value);
        break;
    case TM_LAYER:
        if (m->value < -1 || m->value > INT32_MAX)
            return rfail(r, err, "mark layer: bad layer %lld (an integer >= -1)",
                         (long long)m->value);
        break;
    default:
        return rfail(r, err, "mark: unknown kind %u (0 to %d)", kind, TM_COUNT - 1);
    }
    m->kind = (trace_markkind)kind;
    return MS_OK;
}

/* After the end record only the end of the data may come. */
static ms_status rd_after_end(tbin_rd *r, tbin_kind *kind, int *fatal, ms_error *err)
{
    int have;
    ms_status st = need(r, 1, &have, err);
    if (st != MS_OK) { *fatal = 1; return st; }
    if (have) {
        *fatal = r->fatal = 1;
        return ms_fail_at(err, MS_ERR_PARSE, r->path, 0,
                          "record %llu: bytes after the end record",
                          (unsigned long long)r->recno + 1);
    }
    *kind = TBIN_EOF;
    return MS_OK;
}

/* One record of a type this reader knows; p: its fixed part. */
static ms_status rd_one(tbin_rd *r, unsigned tag, const unsigned char *p, trace_rec *rec,
                        const char **key, const char **val, tbin_kind *kind, int *fatal,
                        ms_error *err)
{
    switch (tag) {
    case TB_ALLOC: *kind = TBIN_REC; return rd_alloc(r, p, rec, err);
    case TB_FREE:
        *kind = TBIN_REC;
        rec->type = TR_FREE;
        rec->u.free_id = ld64(p);
        return MS_OK;
    case TB_OP: *kind = TBIN_REC; return rd_op(r, p, rec, fatal, err);
    case TB_MARK: *kind = TBIN_REC; return rd_mark(r, p, rec, err);
    case TB_STRING: return rd_string(r, p, fatal, err);
    case TB_RESET: r->n_str = 0; return MS_OK;
    case TB_META: {
        *kind = TBIN_META;
        ms_status st = rd_meta(r, p, key, val, err);
        if (st == MS_ERR_LIMIT) {
            *fatal = 1;
            return rfail(r, err, "truncated: the file ends inside a meta record");
        }
        return st;
    }
    case TB_END: {
        uint64_t n = ld64(p);
        r->ended = 1;
        if (n != r->recno - 1) {
            *fatal = 1;
            return rfail(r, err, "end record: it counts %llu records before it, the file "
                         "holds %llu", (unsigned long long)n, (unsigned long long)r->recno - 1);
        }
        return rd_after_end(r, kind, fatal, err);
    }
    }
    return MS_OK; /* a fixed-size type of a later minor version: skipped */
}

/* The hot path: a free or an alloc wholly in the block, of this version's size. */
static inline int rd_fast(tbin_rd *r, trace_rec *rec, ms_status *st, ms_error *err)
{
    const unsigned char *b = r->buf + r->pos;
    size_t avail = r->len - r->pos;
    if (avail < 1 + 38) return 0;
    if (b[0] == TB_FREE && r->fixed[TB_FREE] == 8) {
        r->recno++;
        rec->line = r->recno;
        rec->type = TR_FREE;
        rec->u.free_id = ld64(b + 1);
        r->pos += 9;
        *st = MS_OK;
        return 1;
    }
    if (b[0] == TB_ALLOC && r->fixed[TB_ALLOC] == 38) {
        r->recno++;
        rec->line = r->recno;
        r->pos += 39;
        *st = rd_alloc(r, b + 1, rec, err);
        return 1;
    }
    return 0;
}

int tbin_rd_quick(tbin_rd *r, trace_rec *rec, ms_error *err)
{
    ms_status st;
    if (r->fatal || r->ended || !rd_fast(r, rec, &st, err)) return 0;
    return st == MS_OK ? 1 : -1;
}

ms_status tbin_rd_next(tbin_rd *r, trace_rec *rec, const char **key, const char **val,
                       tbin_kind *kind, int *fatal, ms_error *err)
{
    *fatal = 0;
    ms_status fst;
    if (!r->fatal && !r->ended && rd_fast(r, rec, &fst, err)) {
        *kind = TBIN_REC;
        return fst;
    }
    if (r->fatal) {
        *fatal = 1;
        return ms_fail_at(err, MS_ERR_IO, r->path, 0, "reading stopped");
    }
    for (;;) {
        *kind = TBIN_EOF;
        if (r->ended) return MS_OK;
        int have;
        ms_status st = need(r, 1, &have, err);
        if (st != MS_OK) { *fatal = r->fatal = 1; return st; }
        r->recno++;
        if (!have) {
            *fatal = r->fatal = 1;
            return rfail(r, err, "truncated: the file ends without its end record");
        }
        unsigned tag = r->buf[r->pos];
        if (tag == 0 || tag > r->n_types) {
            *fatal = r->fatal = 1;
            return rfail(r, err, "unknown record type %u (1 to %u)", tag, r->n_types);
        }
        size_t z = r->fixed[tag];
        if ((st = need(r, 1 + z, &have, err)) != MS_OK) { *fatal = r->fatal = 1; return st; }
        if (!have) {
            *fatal = r->fatal = 1;
            return rfail(r, err, "truncated: the file ends inside the record");
        }
        const unsigned char *p = r->buf + r->pos + 1;
        r->pos += 1 + z;
        rec->line = r->recno; /* each record type sets every field of its own */
        *kind = TBIN_EOF;
        st = rd_one(r, tag, p, rec, key, val, kind, fatal, err);
        if (*fatal) r->fatal = 1;
        if (st != MS_OK || *kind != TBIN_EOF || r->ended) return st;
        /* a string, a reset or a skipped type: on to the next record */
    }
}

/* ================================================================ writer */

#define WR_FLUSH (1u << 16)
#define WR_SLOTS (2 * TBIN_STRINGS_MAX)   /* open addressing, at most half full */

struct tbin_wr {
    ms_out *o;
    unsigned char *buf;             /* WR_FLUSH + the largest record */
    size_t n;
    uint64_t recs;                  /* records written */
    char (*str)[TRACE_NAME_MAX];    /* the table as the reader will hold it */
    uint32_t *slot;                 /* hash slot -> index + 1, 0 empty */
    uint32_t n_str;
    int bad;
    char *path;
};

#define WR_BUF (WR_FLUSH + 64 + 16 * TBIN_LIST_MAX + 2 * TBIN_VALUE_MAX)

static void wr_flush(tbin_wr *w)
{
    if (w->n && !w->bad && ms_out_write(w->o, w->buf, w->n) != 0) w->bad = 1;
    w->n = 0;
}

/* Room for n more bytes at buf + w->n (n <= WR_BUF - WR_FLUSH). */
static unsigned char *wr_room(tbin_wr *w, size_t n)
{
    if (w->n + n > WR_BUF) wr_flush(w);
    return w->buf + w->n;
}

static void wr_done(tbin_wr *w, size_t n)
{
    w->n += n;
    w->recs++;
    if (w->n >= WR_FLUSH) wr_flush(w);
}

ms_status tbin_wr_open(const char *path, tbin_wr **out, ms_error *err)
{
    *out = NULL;
    tbin_wr *w = calloc(1, sizeof *w);
    if (!w || !(w->buf = malloc(WR_BUF)) || !(w->slot = calloc(WR_SLOTS, sizeof *w->slot)) ||
        !(w->str = malloc((size_t)TBIN_STRINGS_MAX * sizeof *w->str)) ||
        !(w->path = strdup(path))) {
        if (w) { free(w->buf); free(w->slot); free(w->str); }
        free(w);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    ms_status st = ms_out_open(path, &w->o, err);
    if (st != MS_OK) { free(w->buf); free(w->slot); free(w->str); free(w->path); free(w); return st; }
    unsigned char *p = w->buf;
    memcpy(p, TBIN_MAGIC, TBIN_MAGIC_LEN);
    st16(p + 8, TBIN_MAJOR);
    st16(p + 10, TBIN_MINOR);
    p[12] = TB_NTYPES;
    for (unsigned t = 1; t <= TB_NTYPES; t++) st16(p + 13 + 2 * (t - 1), fixed_bytes[t]);
    w->n = TBIN_HEADER_BYTES;
    *out = w;
    return MS_OK;
}

ms_status tbin_wr_meta(tbin_wr *w, const char *key, const char *val, ms_error *err)
{
    (void)err;
    size_t kn = strlen(key), vn = strlen(val);
    unsigned char *p = wr_room(w, 5 + kn + vn);
    p[0] = TB_META;
    st16(p + 1, (uint16_t)kn);
    st16(p + 3, (uint16_t)vn);
    memcpy(p + 5, key, kn);
    memcpy(p + 5 + kn, val, vn);
    wr_done(w, 5 + kn + vn);
    return MS_OK;
}

static uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The string index of name (0 for ""), writing a string record (and a reset before it when
 * the table is full) the first time the name is met. */
static uint32_t wr_name(tbin_wr *w, const char *name)
{
    size_t n = strlen(name);
    if (n == 0) return 0;
    uint32_t h = name_hash(name, n) & (WR_SLOTS - 1);
    for (;; h = (h + 1) & (WR_SLOTS - 1)) {
        uint32_t s = w->slot[h];
        if (s == 0) break;
        if (strcmp(w->str[s - 1], name) == 0) return s;
    }
    if (w->n_str == TBIN_STRINGS_MAX) {
        unsigned char *p = wr_room(w, 1);
        p[0] = TB_RESET;
        wr_done(w, 1);
        memset(w->slot, 0, WR_SLOTS * sizeof *w->slot);
        w->n_str = 0;
        h = name_hash(name, n) & (WR_SLOTS - 1);
    }
    memcpy(w->str[w->n_str], name, n + 1);
    w->slot[h] = ++w->n_str;
    unsigned char *p = wr_room(w, 2 + n);
    p[0] = TB_STRING;
    p[1] = (unsigned char)n;
    memcpy(p + 2, name, n);
    wr_done(w, 2 + n);
    return w->n_str;
}

static void wr_alloc(tbin_wr *w, const trace_tensor *t)
{
    uint32_t name = wr_name(w, t->name);
    unsigned char *p = wr_room(w, 1 + 38);
    p[0] = TB_ALLOC;
    st64(p + 1, t->id);
    st64(p + 9, t->bytes);
    st64(p + 17, (uint64_t)t->producer);
    st32(p + 25, (uint32_t)t->layer);
    st32(p + 29, (uint32_t)t->stream);
    st32(p + 33, name);
    p[37] = (unsigned char)t->cls;
    p[38] = t->tok_scaled;
    wr_done(w, 1 + 38);
}

static void wr_op(tbin_wr *w, const trace_op *o)
{
    uint32_t name = wr_name(w, o->name);
    size_t n = (size_t)o->n_in + o->n_out;
    unsigned char *p = wr_room(w, 1 + 67 + 8 * n);
    p[0] = TB_OP;
    st64(p + 1, o->id);
    stf64(p + 9, o->flops);
    st64(p + 17, o->bytes_read);
    st64(p + 25, o->bytes_written);
    stf64(p + 33, o->dur_us < 0 ? -1.0 : o->dur_us);
    st32(p + 41, (uint32_t)o->layer);
    st32(p + 45, name);
    st32(p + 49, o->n_in);
    st32(p + 53, o->n_out);
    p[57] = (unsigned char)o->kind;
    p[58] = (unsigned char)o->phase;
    stf64(p + 59, o->host_us);
    p[67] = o->host_sync;
    unsigned char *q = p + 68;
    for (uint32_t i = 0; i < o->n_in; i++, q += 8) st64(q, o->in[i]);
    for (uint32_t i = 0; i < o->n_out; i++, q += 8) st64(q, o->out[i]);
    wr_done(w, 1 + 67 + 8 * n);
}

ms_status tbin_wr_rec(tbin_wr *w, const trace_rec *rec, ms_error *err)
{
    (void)err;
    unsigned char *p;
    switch (rec->type) {
    case TR_ALLOC: wr_alloc(w, &rec->u.alloc); break;
    case TR_FREE:
        p = wr_room(w, 9);
        p[0] = TB_FREE;
        st64(p + 1, rec->u.free_id);
        wr_done(w, 9);
        break;
    case TR_OP: wr_op(w, &rec->u.op); break;
    case TR_MARK:
        p = wr_room(w, 10);
        p[0] = TB_MARK;
        p[1] = (unsigned char)rec->u.mark.kind;
        st64(p + 2, (uint64_t)rec->u.mark.value);
        wr_done(w, 10);
        break;
    }
    return MS_OK;
}

static void wr_release(tbin_wr *w)
{
    free(w->buf);
    free(w->slot);
    free(w->str);
    free(w->path);
    free(w);
}

ms_status tbin_wr_commit(tbin_wr *w, ms_error *err)
{
    unsigned char *p = wr_room(w, 9);
    p[0] = TB_END;
    st64(p + 1, w->recs);
    wr_done(w, 9);
    wr_flush(w);
    ms_out *o = w->o;
    if (w->bad) {
        ms_out_abort(o);
        ms_fail_at(err, MS_ERR_IO, w->path, 0, "write failed");
        wr_release(w);
        return MS_ERR_IO;
    }
    wr_release(w);
    return ms_out_commit(o, err);
}

void tbin_wr_abort(tbin_wr *w)
{
    if (!w) return;
    ms_out_abort(w->o);
    wr_release(w);
}

/* test_trace_bin.c — the workload trace's binary form (traces/trace_bin.c, traces/FORMAT.md
 * "Binary form"): text -> binary -> text is byte-identical, files built by hand from the
 * documented layout read as documented (a later minor version included), the string table's
 * reset, and every problem the reader must refuse (cut anywhere, bad magic, newer version,
 * a name index out of range, id counts past the bound, a wrong end count, bytes after the
 * end, meta after records, unknown record types, liveness) as "FILE: record N: problem". */
#define _POSIX_C_SOURCE 200809L
#include "tests/fuzz_util.h"
#include "tests/tap.h"
#include "traces/trace.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- files ---- */

typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) exit(99);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void put_u8(bytes *b, unsigned v) { unsigned char c = (unsigned char)v; put(b, &c, 1); }

static void put_le(bytes *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) put_u8(b, (unsigned)(v >> (8 * i)) & 0xff);
}

static void put_f64(bytes *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    put_le(b, u, 8);
}

static bytes slurp(const char *path)
{
    bytes b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return b;
    unsigned char tmp[4096];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, f)) > 0) put(&b, tmp, r);
    fclose(f);
    return b;
}

static void save(const char *path, const unsigned char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) exit(99);
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static int same_bytes(const bytes *a, const bytes *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

/* ---- the documented layout, written by hand ---- */

/* Header of version major.minor declaring n_types record types with the given sizes
 * (NULL: this version's). */
static void header(bytes *b, unsigned major, unsigned minor, unsigned n_types,
                   const unsigned *sizes)
{
    static const unsigned v1[8] = {4, 1, 0, 38, 8, 67, 9, 8};
    put(b, "\x89MSTR\r\n\x1a", 8);
    put_le(b, major, 2);
    put_le(b, minor, 2);
    put_u8(b, n_types);
    for (unsigned t = 0; t < n_types; t++) put_le(b, sizes ? sizes[t] : v1[t], 2);
}

static void meta(bytes *b, const char *k, const char *v)
{
    put_u8(b, 1);
    put_le(b, strlen(k), 2);
    put_le(b, strlen(v), 2);
    put(b, k, strlen(k));
    put(b, v, strlen(v));
}

static void string(bytes *b, const char *s)
{
    put_u8(b, 2);
    put_u8(b, (unsigned)strlen(s));
    put(b, s, strlen(s));
}

static void alloc(bytes *b, uint64_t id, uint64_t nbytes, int64_t producer, int32_t layer,
                  uint32_t name, unsigned cls, unsigned tok, size_t extra)
{
    put_u8(b, 4);
    put_le(b, id, 8);
    put_le(b, nbytes, 8);
    put_le(b, (uint64_t)producer, 8);
    put_le(b, (uint32_t)layer, 4);
    put_le(b, 0, 4); /* stream */
    put_le(b, name, 4);
    put_u8(b, cls);
    put_u8(b, tok);
    for (size_t i = 0; i < extra; i++) put_u8(b, 0xee); /* a later minor version's field */
}

static void free_rec(bytes *b, uint64_t id)
{
    put_u8(b, 5);
    put_le(b, id, 8);
}

static void op(bytes *b, uint64_t id, uint32_t name, uint32_t n_in, uint32_t n_out,
               const uint64_t *ids)
{
    put_u8(b, 6);
    put_le(b, id, 8);
    put_f64(b, 1.5e9);
    put_le(b, 100, 8);
    put_le(b, 200, 8);
    put_f64(b, 12.5);
    put_le(b, 0, 4);    /* layer */
    put_le(b, name, 4);
    put_le(b, n_in, 4);
    put_le(b, n_out, 4);
    put_u8(b, TK_GEMM);
    put_u8(b, TP_FWD);
    put_f64(b, 2.25); /* host_us */
    put_u8(b, 1);     /* host_sync */
    for (uint32_t i = 0; ids && i < n_in + n_out; i++) put_le(b, ids[i], 8);
}

static void mark(bytes *b, unsigned kind, int64_t v)
{
    put_u8(b, 7);
    put_u8(b, kind);
    put_le(b, (uint64_t)v, 8);
}

static void end(bytes *b, uint64_t records)
{
    put_u8(b, 8);
    put_le(b, records, 8);
}

/* ---- checks ---- */

/* trace_load refuses path with "PATH: <what>" at the start of its message and exit 3. */
static int refused_with(const char *path, const char *what)
{
    trace_t *t = NULL;
    ms_error err;
    ms_status st = trace_load(path, &t, &err);
    trace_free(t);
    if (st == MS_OK) { TAP_NOTE("%s loaded", path); return 0; }
    char want[1200];
    snprintf(want, sizeof want, "%s: %s", path, what);
    int ok = strncmp(err.msg, want, strlen(want)) == 0 && ms_exit_code(st) == MS_EXIT_INPUT;
    if (!ok) TAP_NOTE("got '%s' (exit %d), wanted '%s...'", err.msg, ms_exit_code(st), want);
    return ok;
}

static const char *refuse_file(const bytes *b)
{
    const char *p = tpath("case.btrace");
    save(p, b->p, b->n);
    return p;
}

/* A sample with every record kind, names repeated and not, unknown durations, id lists. */
static void sample_text(const char *path)
{
    trace_t *t = trace_new();
    trace_set_meta(t, "model", "tiny model");
    trace_set_meta(t, "empty", "");
    trace_rec r;
    uint64_t in[3] = {1, 2, 3}, out[1] = {3};
    trace_append_mark(t, TM_ITER, 0);
    trace_append_mark(t, TM_PHASE, TP_FWD);
    trace_append_mark(t, TM_LAYER, -1);
    for (uint64_t i = 1; i <= 3; i++) {
        trace_alloc_rec(&r, i, 4096 * i, i == 3 ? TC_ACT_SKEL : TC_PARAM, (int)i - 2,
                        i == 3 ? 10 : -1, i == 3, i == 2 ? "w" : "x");
        r.u.alloc.stream = (int32_t)i - 1;
        trace_append(t, &r);
    }
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    r.u.op.id = 10;
    r.u.op.kind = TK_ATTN;
    r.u.op.phase = TP_BWD;
    r.u.op.layer = 5;
    r.u.op.flops = 333333333333.3333;
    r.u.op.bytes_read = 123;
    r.u.op.bytes_written = 456;
    r.u.op.dur_us = 0.30000000000000004;
    r.u.op.host_us = 41.5;
    r.u.op.host_sync = 1;
    r.u.op.in = in;
    r.u.op.n_in = 3;
    r.u.op.out = out;
    r.u.op.n_out = 1;
    snprintf(r.u.op.name, sizeof r.u.op.name, "L5.attn");
    trace_append(t, &r);
    r.u.op.id = 11;
    r.u.op.dur_us = -1;
    r.u.op.host_us = 0;
    r.u.op.host_sync = 0;
    r.u.op.n_in = 0;
    r.u.op.in = NULL;
    r.u.op.name[0] = '\0';
    trace_append(t, &r);
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = 3;
    trace_append(t, &r);
    ms_error err;
    if (trace_write(t, path, &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); exit(99); }
    trace_free(t);
}

static void test_round_trip(void)
{
    const char *txt = tpath("s.trace"), *bin = tpath("s.btrace"), *back = tpath("s2.trace");
    const char *gz = tpath("s.btrace.gz"), *back2 = tpath("s3.trace");
    sample_text(txt);
    ms_error err;
    uint64_t n1 = 0, n2 = 0, n3 = 0;
    int conv = trace_convert(txt, bin, TRACE_FORM_BINARY, &n1, &err) == MS_OK &&
               trace_convert(bin, back, TRACE_FORM_TEXT, &n2, &err) == MS_OK;
    TAP_OK(conv && n1 == n2 && n1 == 9, "text -> binary -> text converts all %llu records",
           (unsigned long long)n1);
    bytes a = slurp(txt), b = slurp(back);
    TAP_OK(same_bytes(&a, &b), "text -> binary -> text is byte-identical (%zu bytes)", a.n);
    free(b.p);
    TAP_OK(trace_convert(bin, gz, TRACE_FORM_BINARY, &n3, &err) == MS_OK &&
               trace_convert(gz, back2, TRACE_FORM_TEXT, &n3, &err) == MS_OK,
           "a gzip-compressed binary trace is read (told by the magic inside)");
    b = slurp(back2);
    TAP_OK(same_bytes(&a, &b), "... and gives the same text");
    free(b.p);
    free(a.p);

    trace_reader *r;
    TAP_OK(trace_reader_open(bin, &r, &err) == MS_OK, "the streaming reader opens it");
    TAP_OK(trace_reader_form(r) == TRACE_FORM_BINARY && trace_reader_meta_count(r) == 2 &&
               !strcmp(trace_reader_meta_value(r, 0), "tiny model") &&
               !strcmp(trace_reader_meta_value(r, 1), ""),
           "its form is binary and its meta pairs are the text's");
    trace_rec rec;
    uint64_t k = 0, line4 = 0;
    while (trace_reader_next(r, &rec, &err) == MS_OK)
        if (++k == 4) line4 = rec.line;
    trace_reader_free(r);
    /* records: 2 meta, 3 marks, string x, the alloc ... */
    TAP_OK(k == 9 && line4 == 7, "records are numbered in the file (the 4th: %llu)",
           (unsigned long long)line4);

    trace_t *t;
    TAP_OK(trace_load(bin, &t, &err) == MS_OK, "trace_load takes the binary form");
    const trace_op *o = trace_find_op(t, 10), *o2 = trace_find_op(t, 11);
    const trace_tensor *x = trace_find_tensor(t, 2);
    TAP_OK(o && o->flops == 333333333333.3333 && o->dur_us == 0.30000000000000004 &&
               o->n_in == 3 && o->in[2] == 3 && o->n_out == 1 && !strcmp(o->name, "L5.attn") &&
               o->host_us == 41.5 && o->host_sync == 1 && o2 && o2->host_us == 0 &&
               !o2->host_sync && o2->dur_us == -1 && o2->name[0] == '\0' && x &&
               !strcmp(x->name, "L0.w") &&
               x->stream == 1 && x->layer == 0,
           "fields, doubles, id lists, names and unknown durations read back exactly");
    const char *bin2 = tpath("s4.btrace");
    TAP_OK(trace_write_form(t, bin2, TRACE_FORM_BINARY, &err) == MS_OK,
           "an in-memory trace is written in the binary form");
    a = slurp(bin);
    b = slurp(bin2);
    TAP_OK(same_bytes(&a, &b), "... the same bytes as the streaming conversion");
    free(a.p);
    free(b.p);
    trace_free(t);
}

/* The layout written by hand, as FORMAT.md documents it, equals the writer's. */
static void test_layout(void)
{
    trace_writer *w;
    ms_error err;
    const char *p = tpath("w.btrace");
    trace_rec r;
    uint64_t ids[2] = {1, 2};
    int ok = trace_writer_open(p, TRACE_FORM_BINARY, &w, &err) == MS_OK &&
             trace_writer_meta(w, "k", "v", &err) == MS_OK;
    trace_alloc_rec(&r, 1, 512, TC_PARAM, 0, -1, 0, "a");
    ok = ok && trace_writer_put(w, &r, &err) == MS_OK;
    trace_alloc_rec(&r, 2, 1024, TC_GRAD, -1, 7, 1, "");
    ok = ok && trace_writer_put(w, &r, &err) == MS_OK;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    r.u.op.id = 7;
    r.u.op.kind = TK_GEMM;
    r.u.op.phase = TP_FWD;
    r.u.op.flops = 1.5e9;
    r.u.op.bytes_read = 100;
    r.u.op.bytes_written = 200;
    r.u.op.dur_us = 12.5;
    r.u.op.host_us = 2.25;
    r.u.op.host_sync = 1;
    r.u.op.in = ids;
    r.u.op.n_in = 1;
    r.u.op.out = ids + 1;
    r.u.op.n_out = 1;
    snprintf(r.u.op.name, sizeof r.u.op.name, "a");
    ok = ok && trace_writer_put(w, &r, &err) == MS_OK;
    memset(&r, 0, sizeof r);
    r.type = TR_MARK;
    r.u.mark.kind = TM_LAYER;
    r.u.mark.value = -1;
    ok = ok && trace_writer_put(w, &r, &err) == MS_OK;
    r.type = TR_FREE;
    r.u.free_id = 1;
    ok = ok && trace_writer_put(w, &r, &err) == MS_OK && trace_writer_commit(w, &err) == MS_OK;
    bytes h = {0};
    header(&h, 1, 0, 8, NULL);
    meta(&h, "k", "v");
    string(&h, "L0.a");
    alloc(&h, 1, 512, -1, 0, 1, TC_PARAM, 0, 0);
    alloc(&h, 2, 1024, 7, -1, 0, TC_GRAD, 1, 0);
    string(&h, "a");
    op(&h, 7, 2, 1, 1, ids);
    mark(&h, TM_LAYER, -1);
    free_rec(&h, 1);
    end(&h, 8);
    bytes got = slurp(p);
    TAP_OK(ok && same_bytes(&got, &h),
           "the writer writes the documented layout (%zu bytes; by hand %zu)", got.n, h.n);
    free(got.p);
    free(h.p);

    /* minor version 1.3: a longer alloc record and a fixed-size record type of its own */
    unsigned sizes[9] = {4, 1, 0, 42, 8, 67, 9, 8, 5};
    bytes m = {0};
    header(&m, 1, 3, 9, sizes);
    string(&m, "n");
    alloc(&m, 5, 64, -1, 2, 1, TC_OTHER, 0, 4);
    put_u8(&m, 9);
    put(&m, "\1\2\3\4\5", 5);
    free_rec(&m, 5);
    end(&m, 4);
    const char *mp = refuse_file(&m);
    trace_t *t = NULL;
    ms_status st = trace_load(mp, &t, &err);
    const trace_tensor *x = st == MS_OK ? trace_find_tensor(t, 5) : NULL;
    TAP_OK(x && x->bytes == 64 && x->layer == 2 && !strcmp(x->name, "n") &&
               trace_count(t) == 2,
           "a later minor version reads: longer records and new fixed-size types skipped (%s)",
           st == MS_OK ? "ok" : err.msg);
    trace_free(t);
    free(m.p);
}

/* Every cut of a file is refused, never read as a shorter trace. */
static void test_truncation(void)
{
    const char *txt = tpath("s.trace"), *bin = tpath("s.btrace");
    sample_text(txt);
    ms_error err;
    uint64_t n;
    trace_convert(txt, bin, TRACE_FORM_BINARY, &n, &err);
    bytes b = slurp(bin);
    size_t loaded = 0, bad_msg = 0;
    for (size_t cut = 1; cut < b.n; cut++) {
        const char *p = tpath("cut.btrace");
        save(p, b.p, cut);
        trace_t *t = NULL;
        ms_status st = trace_load(p, &t, &err);
        trace_free(t);
        if (st == MS_OK) loaded++;
        else if (strncmp(err.msg, p, strlen(p)) != 0 || ms_exit_code(st) != MS_EXIT_INPUT)
            bad_msg++;
    }
    TAP_OK(loaded == 0 && bad_msg == 0,
           "each of the %zu cuts of the file is refused with FILE: and exit 3 (%zu loaded, %zu "
           "bad messages)", b.n - 1, loaded, bad_msg);
    const char *p = tpath("cut.btrace");
    save(p, b.p, b.n - 9); /* just before the end record */
    TAP_OK(refused_with(p, "record 16: truncated: the file ends without its end record"),
           "a file cut at a record boundary: 'record N: truncated'");
    save(p, b.p, b.n - 3);
    TAP_OK(refused_with(p, "record 16: truncated: the file ends inside the record"),
           "a file cut inside a record: 'record N: truncated'");
    free(b.p);
}

static void test_refusals(void)
{
    bytes b = {0};
    header(&b, 1, 0, 8, NULL);
    b.p[1] = 'X';
    end(&b, 0);
    TAP_OK(refused_with(refuse_file(&b), "header: truncated or bad magic"), "bad magic");
    free(b.p);

    b = (bytes){0};
    header(&b, 2, 0, 8, NULL);
    end(&b, 0);
    TAP_OK(refused_with(refuse_file(&b), "binary trace format version 2.0 is newer than this"),
           "a newer major version");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    string(&b, "only");
    alloc(&b, 1, 64, -1, 0, 2, TC_OTHER, 0, 0);
    end(&b, 2);
    TAP_OK(refused_with(refuse_file(&b), "record 2: alloc: NAME index 2 out of range (the "
                                         "string table holds 1)"),
           "a string index out of range");
    free(b.p);

    uint64_t ids[1] = {1};
    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    alloc(&b, 1, 64, -1, 0, 0, TC_OTHER, 0, 0);
    op(&b, 3, 0, 5000, 0, NULL);
    end(&b, 2);
    TAP_OK(refused_with(refuse_file(&b), "record 2: op: more than 4096 input ids (5000)"),
           "an id count past the bound");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    alloc(&b, 1, 64, -1, 0, 0, TC_OTHER, 0, 0);
    op(&b, 3, 0, 1, UINT32_MAX, ids);
    end(&b, 2);
    TAP_OK(refused_with(refuse_file(&b), "record 2: op: more than 4096 output ids (4294967295)"),
           "an id count near 2^32 (no overflow of the size)");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    alloc(&b, 1, 64, -1, 0, 0, TC_OTHER, 0, 0);
    end(&b, 5);
    TAP_OK(refused_with(refuse_file(&b), "record 2: end record: it counts 5 records"),
           "an end record with the wrong count");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    end(&b, 0);
    put_u8(&b, 5);
    TAP_OK(refused_with(refuse_file(&b), "record 2: bytes after the end record"),
           "bytes after the end record");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    free_rec(&b, 1);
    meta(&b, "k", "v");
    end(&b, 2);
    TAP_OK(refused_with(refuse_file(&b), "record 1: free of tensor 1 which is not live"),
           "liveness problems name the record");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    mark(&b, TM_ITER, 0);
    meta(&b, "k", "v");
    end(&b, 2);
    TAP_OK(refused_with(refuse_file(&b), "record 2: meta after records"), "meta after records");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    put_u8(&b, 9);
    end(&b, 1);
    TAP_OK(refused_with(refuse_file(&b), "record 1: unknown record type 9 (1 to 8)"),
           "a record type the header does not declare");
    free(b.p);

    b = (bytes){0};
    header(&b, 1, 0, 8, NULL);
    alloc(&b, 1, 0, -1, 0, 0, TC_OTHER, 0, 0);
    alloc(&b, 2, 64, -1, -2, 0, 9, 2, 0);
    end(&b, 2);
    const char *p = refuse_file(&b);
    TAP_OK(refused_with(p, "record 1: alloc: BYTES must be > 0"), "fields are checked");
    FILE *diag = tmpfile();
    trace_check_report rep;
    ms_error err;
    ms_status st = trace_check_file(p, diag, 0, &rep, &err);
    fclose(diag);
    TAP_OK(st == MS_OK && rep.errors == 2,
           "trace check reports a bad record and goes on with the next (%llu problems)",
           (unsigned long long)rep.errors);
    free(b.p);
}

/* More distinct names than the string table holds: the writer resets it and names stay
 * right. */
static void test_many_names(void)
{
    const char *bin = tpath("names.btrace"), *txt = tpath("names.trace");
    const char *back = tpath("names2.trace");
    trace_writer *wb, *wt;
    ms_error err;
    int ok = trace_writer_open(bin, TRACE_FORM_BINARY, &wb, &err) == MS_OK &&
             trace_writer_open(txt, TRACE_FORM_TEXT, &wt, &err) == MS_OK;
    for (uint64_t i = 0; ok && i < 70000; i++) {
        trace_rec r;
        char nm[24];
        snprintf(nm, sizeof nm, "n%llu", (unsigned long long)(i % 69000));
        trace_alloc_rec(&r, i, 512, TC_OTHER, -1, -1, 0, nm);
        ok = trace_writer_put(wb, &r, &err) == MS_OK && trace_writer_put(wt, &r, &err) == MS_OK;
        memset(&r, 0, sizeof r);
        r.type = TR_FREE;
        r.u.free_id = i;
        ok = ok && trace_writer_put(wb, &r, &err) == MS_OK &&
             trace_writer_put(wt, &r, &err) == MS_OK;
    }
    ok = ok && trace_writer_commit(wb, &err) == MS_OK && trace_writer_commit(wt, &err) == MS_OK;
    uint64_t n;
    ok = ok && trace_convert(bin, back, TRACE_FORM_TEXT, &n, &err) == MS_OK;
    bytes a = slurp(txt), b = slurp(back);
    TAP_OK(ok && same_bytes(&a, &b),
           "70,000 records with 69,000 distinct names (past the 65,536 of the string table) "
           "read back as written");
    free(a.p);
    free(b.p);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-tbin-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 99; }
    test_round_trip();
    test_layout();
    test_truncation();
    test_refusals();
    test_many_names();
    const char *files[] = {"s.trace",  "s.btrace",     "s2.trace",    "s.btrace.gz",
                           "s3.trace", "s4.btrace",    "w.btrace",    "case.btrace",
                           "cut.btrace", "names.btrace", "names.trace", "names2.trace"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) remove(tpath(files[i]));
    if (rmdir(tmpdir) != 0) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

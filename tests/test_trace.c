/* test_trace.c — unit tests of the workload trace format (traces/trace.c): byte-identical
 * round trips, gzip input, the streaming reader, every checker message with FILE:LINE, the
 * id list limit, statistics, and a 2-million-record check in bounded memory. Run by make check. */
#define _POSIX_C_SOURCE 200809L
#include "tests/tap.h"
#include "traces/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

/* Path of a file in the temporary directory (a few rotating buffers). */
static const char *tpath(const char *name)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) b[n] = '\0';
    if (len) *len = n;
    return b;
}

static int files_equal(const char *a, const char *b)
{
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(99); }
    fputs(text, f);
    fclose(f);
}

static trace_rec mk_alloc(uint64_t id, uint64_t bytes, trace_class c, int layer, const char *nm)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_ALLOC;
    r.u.alloc.id = id;
    r.u.alloc.bytes = bytes;
    r.u.alloc.cls = c;
    r.u.alloc.layer = layer;
    r.u.alloc.tok_scaled = c == TC_ACT_SKEL || c == TC_ACT_TRANS;
    r.u.alloc.producer = -1;
    snprintf(r.u.alloc.name, sizeof r.u.alloc.name, "%s", nm);
    return r;
}

static trace_rec mk_op(uint64_t id, trace_opkind k, trace_phase ph, double flops, double dur,
                       const uint64_t *in, uint32_t nin, const uint64_t *out, uint32_t nout,
                       const char *nm)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    r.u.op.id = id;
    r.u.op.kind = k;
    r.u.op.phase = ph;
    r.u.op.layer = 0;
    r.u.op.flops = flops;
    r.u.op.bytes_read = 123;
    r.u.op.bytes_written = 456;
    r.u.op.dur_us = dur;
    r.u.op.in = in;
    r.u.op.n_in = nin;
    r.u.op.out = out;
    r.u.op.n_out = nout;
    snprintf(r.u.op.name, sizeof r.u.op.name, "%s", nm);
    return r;
}

static trace_rec mk_free(uint64_t id)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_FREE;
    r.u.free_id = id;
    return r;
}

static trace_rec mk_mark(trace_markkind k, int64_t v)
{
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_MARK;
    r.u.mark.kind = k;
    r.u.mark.value = v;
    return r;
}

/* A small trace with every record type, awkward doubles, id reuse and an unknown duration. */
static trace_t *build_sample(void)
{
    trace_t *t = trace_new();
    trace_set_meta(t, "model", "gpt-7b");
    trace_set_meta(t, "note", "two words  and #hash");
    trace_set_meta(t, "empty", "");
    uint64_t in1[] = {1, 2}, out1[] = {3};
    uint64_t in2[] = {3}, out2[] = {4};
    trace_rec recs[] = {
        mk_mark(TM_ITER, 0),
        mk_mark(TM_PHASE, TP_FWD),
        mk_mark(TM_LAYER, 0),
        mk_alloc(1, 4096, TC_PARAM, 0, "w_qkv"),
        mk_alloc(2, 1 << 20, TC_ACT_SKEL, 0, "x"),
        mk_alloc(3, 3 << 20, TC_ACT_TRANS, 0, ""),
        mk_op(10, TK_GEMM, TP_FWD, 0.1 + 0.2, 12.5, in1, 2, out1, 1, "qkv"),
        mk_alloc(4, 1000, TC_WORKSPACE, -1, "ws"),
        mk_op(11, TK_ATTN, TP_FWD, 1.0 / 3.0 * 1e12, -1, in2, 1, out2, 1, "attn"),
        mk_op(12, TK_OTHER, TP_NONE, 0, 0, NULL, 0, NULL, 0, ""),
        mk_free(3),
        mk_free(4),
        mk_alloc(3, 5 << 20, TC_GRAD, 0, "g"),
        mk_mark(TM_PHASE, TP_BWD),
        mk_mark(TM_LAYER, -1),
        mk_free(3),
        mk_free(2),
    };
    recs[4].u.alloc.producer = 10;
    recs[4].u.alloc.stream = 2;
    for (size_t i = 0; i < sizeof recs / sizeof *recs; i++)
        if (trace_append(t, &recs[i]) != MS_OK) { fprintf(stderr, "append %zu\n", i); exit(99); }
    return t;
}

static void test_roundtrip(void)
{
    ms_error err;
    trace_t *t = build_sample();
    const char *a = tpath("a.trace"), *b = tpath("b.trace");
    TAP_OK(trace_write(t, a, &err) == MS_OK, "write sample trace");
    trace_t *u = NULL;
    ms_status st = trace_load(a, &u, &err);
    TAP_OK(st == MS_OK, "load it back (%s)", st ? err.msg : "ok");
    if (!u) { trace_free(t); return; }
    TAP_OK(trace_write(u, b, &err) == MS_OK && files_equal(a, b),
           "write -> read -> write is byte-identical");
    TAP_OK(trace_count(u) == trace_count(t), "same record count (%zu)", trace_count(u));
    const trace_op *o = trace_find_op(u, 10), *o2 = trace_find_op(u, 11);
    TAP_OK(o && o->flops == 0.1 + 0.2 && o->dur_us == 12.5 && o->n_in == 2 && o->in[1] == 2 &&
               o2 && o2->flops == 1.0 / 3.0 * 1e12 && o2->dur_us < 0,
           "doubles read back exactly; unknown duration stays unknown");
    const trace_tensor *x = trace_find_tensor(u, 3);
    TAP_OK(x && x->bytes == (5u << 20) && x->cls == TC_GRAD,
           "trace_find_tensor returns the most recent alloc of a reused id");
    const trace_tensor *y = trace_find_tensor(u, 2);
    TAP_OK(y && y->producer == 10 && y->stream == 2 && strcmp(y->name, "x") == 0 &&
               y->tok_scaled == 1 && trace_find_tensor(u, 99) == NULL &&
               trace_find_op(u, 99) == NULL,
           "tensor metadata kept; unknown ids give NULL");
    TAP_OK(trace_get_meta(u, "note") && strcmp(trace_get_meta(u, "note"), "two words  and #hash") == 0 &&
               trace_get_meta(u, "empty") && trace_get_meta(u, "empty")[0] == '\0' &&
               trace_get_meta(u, "absent") == NULL,
           "meta values with blanks and '#' survive");
    const trace_rec *r7 = trace_get(u, 3);
    TAP_OK(r7 && r7->type == TR_ALLOC && r7->line > 1, "loaded records carry their source line");

    FILE *fp = tmpfile();
    TAP_OK(fp && trace_write_fp(u, fp) == MS_OK, "trace_write_fp");
    if (fp) {
        long n = ftell(fp);
        size_t la;
        char *ta = slurp(a, &la);
        char *buf = malloc((size_t)n + 1);
        rewind(fp);
        size_t got = fread(buf, 1, (size_t)n, fp);
        TAP_OK(ta && (size_t)n == la && got == la && memcmp(buf, ta, la) == 0,
               "trace_write_fp writes the same bytes as trace_write");
        free(buf);
        free(ta);
        fclose(fp);
    }

    /* the in-memory trace refuses what could not be written and read back */
    trace_rec bad = mk_alloc(50, 0, TC_PARAM, 0, "z");
    TAP_OK(trace_append(u, &bad) == MS_ERR_INVALID, "append rejects a zero-byte alloc");
    bad = mk_alloc(50, 8, TC_PARAM, 0, "two words");
    TAP_OK(trace_append(u, &bad) == MS_ERR_INVALID, "append rejects a name with a blank");
    TAP_OK(trace_set_meta(u, "bad key", "v") == MS_ERR_INVALID &&
               trace_set_meta(u, "k", " leading") == MS_ERR_INVALID,
           "set_meta rejects keys with blanks and values that would not read back");
    trace_free(t);
    trace_free(u);
}

static void test_gzip_and_reader(void)
{
    ms_error err;
    const char *a = tpath("a.trace"), *gz = tpath("a.trace.gz"), *c = tpath("c.trace");
    size_t len;
    char *text = slurp(a, &len);
    gzFile g = gzopen(gz, "wb");
    TAP_OK(text && g && gzwrite(g, text, (unsigned)len) == (int)len && gzclose(g) == Z_OK,
           "wrote a gzip copy with zlib");
    free(text);
    trace_t *u = NULL;
    ms_status st = trace_load(gz, &u, &err);
    TAP_OK(st == MS_OK && trace_write(u, c, &err) == MS_OK && files_equal(a, c),
           "gzip trace reads like the plain one");
    trace_free(u);

    trace_reader *r;
    st = trace_reader_open(gz, &r, &err);
    TAP_OK(st == MS_OK && trace_reader_meta_count(r) == 3 &&
               strcmp(trace_reader_meta_key(r, 0), "model") == 0 &&
               strcmp(trace_reader_meta_value(r, 0), "gpt-7b") == 0,
           "streaming reader exposes meta at open");
    size_t n = 0, ops = 0;
    trace_rec rec;
    while (st == MS_OK && (st = trace_reader_next(r, &rec, &err)) == MS_OK) {
        n++;
        if (rec.type == TR_OP) ops++;
    }
    TAP_OK(st == MS_ERR_LIMIT && n == 17 && ops == 3, "streaming reader yields all records");
    trace_reader_free(r);
    trace_reader_free(NULL);

    trace_stats s;
    st = trace_stats_file(a, &s, &err);
    TAP_OK(st == MS_OK && s.records == 17 && s.allocs == 5 && s.frees == 4 && s.ops == 3 &&
               s.marks == 5 && s.iterations == 1,
           "stats counts");
    TAP_OK(s.peak_live_bytes == 4096 + (1 << 20) + (5 << 20) &&
               s.bytes_by_class[TC_GRAD] == (5u << 20) && s.total_dur_us == 12.5 &&
               fabs(s.total_flops - (0.3 + 1e12 / 3)) < 1,
           "stats peak live bytes, bytes by class, durations and flops");
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static void test_check_messages(void)
{
    ms_error err;
    const char *p = tpath("bad.trace");
    put(p,
        "# a trace with one problem per line from line 5\n" /* 1 */
        "memsim-trace 1\n"                                   /* 2 */
        "meta a b\n"                                         /* 3 */
        "alloc 1 100 param 0 0 0 - w\n"                      /* 4 */
        "alloc 1 100 param 0 0 0 - w\n"                      /* 5 already live */
        "free 9\n"                                           /* 6 not live */
        "op 3 gemm fwd 0 10 0 0 - 1,7 8 x\n"                 /* 7 reads 7, writes 8 */
        "bogus 1 2\n"                                        /* 8 */
        "alloc 2 0 act_skel 0 1 0 - -\n"                     /* 9 */
        "alloc 3 -5 act_skel 0 1 0 - -\n"                    /* 10 */
        "alloc 4 10 act_skel 0 1\n"                          /* 11 */
        "meta late x\n"                                      /* 12 */
        "op 4 gemm fwd 0 1e 0 0 - - - -\n"                   /* 13 */
        "mark phase sideways\n"                              /* 14 */
        "\n"                                                 /* 15 */
        "free 1\n"                                           /* 16 */
        "alloc 5 8 other 0 2 0 - -\n"                        /* 17 TOK */
        "op 5 gemm fwd 0 1 0 0 -3 - - -\n");                 /* 18 DUR */
    FILE *diag = tmpfile();
    trace_check_report rep;
    ms_status st = trace_check_file(p, diag, 0, &rep, &err);
    long n = ftell(diag);
    char *out = calloc(1, (size_t)n + 1);
    rewind(diag);
    if (fread(out, 1, (size_t)n, diag) != (size_t)n) out[0] = '\0';
    fclose(diag);
    TAP_OK(st == MS_OK && rep.errors == 13, "checker reads to the end and counts 13 problems (%llu)",
           (unsigned long long)rep.errors);
    char want[16][256];
    int k = 0;
    snprintf(want[k++], 256, "%s:5: alloc of tensor 1 which is already live", p);
    snprintf(want[k++], 256, "%s:6: free of tensor 9 which is not live", p);
    snprintf(want[k++], 256, "%s:7: op 3 reads tensor 7 which is not live", p);
    snprintf(want[k++], 256, "%s:7: op 3 writes tensor 8 which is not live", p);
    snprintf(want[k++], 256, "%s:8: unknown record type 'bogus'", p);
    snprintf(want[k++], 256, "%s:9: alloc: BYTES must be > 0", p);
    snprintf(want[k++], 256, "%s:10: alloc: bad BYTES '-5'", p);
    snprintf(want[k++], 256, "%s:11: alloc: expected 8 fields", p);
    snprintf(want[k++], 256, "%s:12: meta after records", p);
    snprintf(want[k++], 256, "%s:13: op: bad FLOPS '1e'", p);
    snprintf(want[k++], 256, "%s:14: mark phase: unknown phase 'sideways'", p);
    snprintf(want[k++], 256, "%s:17: alloc: TOK must be 0 or 1", p);
    snprintf(want[k++], 256, "%s:18: op: bad DUR_US '-3'", p);
    for (int i = 0; i < k; i++) TAP_OK(contains(out, want[i]), "message: %s", want[i]);
    TAP_OK(rep.records == 5 && rep.allocs == 2 && rep.frees == 2 && rep.ops == 1 &&
               rep.peak_live_bytes == 100 && rep.live_at_end == 0,
           "checker counts the good records and the peak live bytes");
    free(out);

    diag = tmpfile();
    st = trace_check_file(p, diag, 3, &rep, &err);
    n = ftell(diag);
    out = calloc(1, (size_t)n + 1);
    rewind(diag);
    if (fread(out, 1, (size_t)n, diag) != (size_t)n) out[0] = '\0';
    fclose(diag);
    int lines = 0;
    for (char *q = out; *q; q++) lines += *q == '\n';
    char more[300];
    snprintf(more, sizeof more, "%s: 10 more problems not shown", p);
    TAP_OK(st == MS_OK && rep.errors == 13 && lines == 4 && contains(out, more),
           "max_errors limits the printed lines but not the count");
    free(out);

    trace_t *t = NULL;
    char first[300];
    snprintf(first, sizeof first, "%s:5: alloc of tensor 1 which is already live", p);
    st = trace_load(p, &t, &err);
    TAP_OK(st == MS_ERR_PARSE && t == NULL && strcmp(err.msg, first) == 0,
           "trace_load stops at the first problem: %s", err.msg);
    trace_stats s;
    st = trace_stats_file(p, &s, &err);
    TAP_OK(st == MS_ERR_PARSE && strcmp(err.msg, first) == 0, "trace_stats_file too");
}

/* The op attributes host_us= and host_sync=: read, written back byte for byte (and not
 * written where they are 0), their problems named; a trace without them unchanged. */
static void test_host_attrs(void)
{
    ms_error err;
    const char *a = tpath("h.trace"), *b = tpath("h2.trace");
    const char *text =
        "memsim-trace 1\n"
        "alloc 1 100 act_skel 0 1 0 - x\n"
        "op 1 gemm fwd 0 10 0 0 2.5 1 - mm host_us=12.25\n"
        "op 2 elem fwd 0 10 0 0 - 1 - item host_us=3 host_sync=1\n"
        "op 3 elem fwd 0 10 0 0 - 1 - plain\n"
        "op 4 elem fwd 0 10 0 0 - 1 - zero host_sync=0 host_us=0\n"
        "free 1\n";
    put(a, text);
    trace_t *t = NULL;
    ms_status st = trace_load(a, &t, &err);
    TAP_OK(st == MS_OK, "a trace with host attributes loads (%s)", st ? err.msg : "ok");
    if (st != MS_OK) return;
    const trace_op *o1 = trace_find_op(t, 1), *o2 = trace_find_op(t, 2);
    const trace_op *o3 = trace_find_op(t, 3), *o4 = trace_find_op(t, 4);
    TAP_OK(o1 && o1->host_us == 12.25 && !o1->host_sync && o2 && o2->host_us == 3 &&
               o2->host_sync == 1 && o3 && o3->host_us == 0 && !o3->host_sync && o4 &&
               o4->host_us == 0 && !o4->host_sync,
           "host_us and host_sync as written; absent reads as 0");
    st = trace_write(t, b, &err);
    trace_free(t);
    size_t n;
    char *got = slurp(b, &n);
    const char *want =
        "memsim-trace 1\n"
        "alloc 1 100 act_skel 0 1 0 - x\n"
        "op 1 gemm fwd 0 10 0 0 2.5 1 - mm host_us=12.25\n"
        "op 2 elem fwd 0 10 0 0 - 1 - item host_us=3 host_sync=1\n"
        "op 3 elem fwd 0 10 0 0 - 1 - plain\n"
        "op 4 elem fwd 0 10 0 0 - 1 - zero\n"
        "free 1\n";
    TAP_OK(st == MS_OK && got && strcmp(got, want) == 0,
           "written back with the attributes that differ from 0 only");
    free(got);
    static const char *const bad[][2] = {
        {"op 1 gemm fwd 0 10 0 0 - - - mm host_us=-1\n", "op: bad host_us '-1'"},
        {"op 1 gemm fwd 0 10 0 0 - - - mm host_us=x\n", "op: bad host_us 'x'"},
        {"op 1 gemm fwd 0 10 0 0 - - - mm host_sync=2\n", "op: bad host_sync '2'"},
        {"op 1 gemm fwd 0 10 0 0 - - - mm host_us=1 host_us=2\n",
         "op: unknown or repeated attribute 'host_us=2'"},
        {"op 1 gemm fwd 0 10 0 0 - - - mm gpu_us=1\n", "op: unknown or repeated attribute"},
        {"op 1 gemm fwd 0 10 0 0 - - - mm host_us=1 host_sync=1 x\n",
         "op: too many fields"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "memsim-trace 1\n%s", bad[i][0]);
        put(a, buf);
        t = NULL;
        st = trace_load(a, &t, &err);
        char where[300];
        snprintf(where, sizeof where, "%s:2: %s", a, bad[i][1]);
        TAP_OK(st == MS_ERR_PARSE && !t && strncmp(err.msg, where, strlen(where)) == 0,
               "refused: %s", err.msg);
        trace_free(t);
    }
    remove(a);
    remove(b);
}

static void test_headers_and_limits(void)
{
    ms_error err;
    trace_t *t = NULL;
    const char *p = tpath("v2.trace");
    put(p, "memsim-trace 2\nfree 1\n");
    ms_status st = trace_load(p, &t, &err);
    char want[300];
    snprintf(want, sizeof want, "%s:1: trace format version 2 is newer", p);
    TAP_OK(st == MS_ERR_PARSE && strncmp(err.msg, want, strlen(want)) == 0,
           "a newer major version is rejected: %s", err.msg);
    put(p, "# x\n\nmemsim-trace 1.7\nalloc 1 8 param 0 0 0 - -\n");
    st = trace_load(p, &t, &err);
    TAP_OK(st == MS_OK && trace_count(t) == 1, "a newer minor version of major 1 is read");
    trace_free(t);
    t = NULL;
    put(p, "\n# only comments\n");
    st = trace_load(p, &t, &err);
    snprintf(want, sizeof want, "%s: empty file", p);
    TAP_OK(st == MS_ERR_PARSE && strncmp(err.msg, want, strlen(want)) == 0,
           "an empty file is an error: %s", err.msg);
    put(p, "alloc 1 8 param 0 0 0 - -\n");
    trace_check_report rep;
    st = trace_check_file(p, NULL, 0, &rep, &err);
    snprintf(want, sizeof want, "%s:1: not a memsim trace", p);
    TAP_OK(st == MS_ERR_PARSE && strncmp(err.msg, want, strlen(want)) == 0,
           "a missing header stops the checker: %s", err.msg);
    st = trace_load(tpath("does-not-exist"), &t, &err);
    TAP_OK(st == MS_ERR_IO && strstr(err.msg, "does-not-exist: cannot open") != NULL,
           "a missing file is an I/O error naming it");

    /* op id lists: 4096 is the most */
    for (int n = 4096; n <= 4097; n++) {
        FILE *f = fopen(p, "w");
        fprintf(f, "memsim-trace 1\n");
        for (int i = 0; i < n; i++) fprintf(f, "alloc %d 8 act_trans 0 1 0 - -\n", i);
        fprintf(f, "op 1 elem fwd 0 0 0 0 -");
        for (int i = 0; i < n; i++) fprintf(f, "%c%d", i ? ',' : ' ', i);
        fprintf(f, " - sum\n");
        fclose(f);
        st = trace_load(p, &t, &err);
        if (n == 4096) {
            TAP_OK(st == MS_OK && trace_find_op(t, 1) && trace_find_op(t, 1)->n_in == 4096,
                   "an op may read 4096 tensors");
            trace_free(t);
            t = NULL;
        } else {
            snprintf(want, sizeof want, "%s:4099: op: more than 4096 input ids", p);
            TAP_OK(st == MS_ERR_PARSE && strcmp(err.msg, want) == 0, "but not 4097: %s", err.msg);
        }
    }
}

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* 2 million records, live set bounded at 1000 tensors: the checker's memory must not grow
 * with the file. */
static void test_big_stream(void)
{
    const char *p = tpath("big.trace");
    FILE *f = fopen(p, "w");
    if (!f) { perror(p); exit(99); }
    static char buf[1 << 16];
    setvbuf(f, buf, _IOFBF, sizeof buf);
    fprintf(f, "memsim-trace 1\nmeta generator test_trace\nmark iter 0\n");
    uint64_t records = 1, id = 0;
    const uint64_t target = 2000000;
    while (records < target) {
        fprintf(f, "alloc %llu 4096 act_trans %llu 1 0 - t\n", (unsigned long long)id,
                (unsigned long long)(id % 32));
        fprintf(f, "op %llu gemm fwd 3 1000000 4096 4096 - %llu %llu mm\n",
                (unsigned long long)id, (unsigned long long)id, (unsigned long long)id);
        records += 2;
        if (id >= 1000) {
            fprintf(f, "free %llu\n", (unsigned long long)(id - 1000));
            records++;
        }
        id++;
    }
    fclose(f);
    long before = maxrss_kib();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    trace_check_report rep;
    ms_error err;
    ms_status st = trace_check_file(p, stderr, 10, &rep, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long after = maxrss_kib();
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    TAP_NOTE("checked %llu records in %.2f s; maxrss %ld -> %ld KiB",
             (unsigned long long)rep.records, s, before, after);
    TAP_OK(st == MS_OK && rep.errors == 0 && rep.records >= target &&
               rep.live_at_end == 1000 && rep.peak_live_bytes == 1001 * 4096,
           "2-million-record trace checks clean with the right peak");
    TAP_OK(after - before < 64 * 1024, "checker memory growth %ld KiB < 64 MiB", after - before);
    remove(p);
}

/* trace_reserve: room made up front changes no record, appends past it still grow the
 * array, and a smaller reservation than the room there is keeps what is there. */
static void test_reserve(void)
{
    trace_t *a = trace_new(), *b = trace_new();
    TAP_OK(trace_reserve(b, 10) == MS_OK, "room for 10 records");
    int ok = 1;
    for (uint64_t i = 1; i <= 40 && ok; i++) {
        trace_rec r;
        trace_alloc_rec(&r, i, 4096 * i, TC_ACT_TRANS, (int)(i % 3) - 1, -1, 0, "x");
        ok = trace_append(a, &r) == MS_OK && trace_append(b, &r) == MS_OK;
        if (i == 20) ok = ok && trace_reserve(b, 5) == MS_OK;
    }
    size_t na, nb;
    const trace_rec *ra = trace_records(a, &na), *rb = trace_records(b, &nb);
    int same = ok && na == 40 && nb == 40;
    for (size_t i = 0; same && i < na; i++)
        same = ra[i].u.alloc.id == rb[i].u.alloc.id && ra[i].u.alloc.bytes == rb[i].u.alloc.bytes &&
               !strcmp(ra[i].u.alloc.name, rb[i].u.alloc.name);
    TAP_OK(same && trace_find_tensor(b, 33) == &rb[32].u.alloc,
           "40 records appended past a reservation of 10 (and one of 5 between): the same "
           "records and index as without");
    trace_free(a);
    trace_free(b);
}

/* trace_has_host_times follows the op records appended: none, a host time, a host sync. */
static void test_host_times_flag(void)
{
    trace_t *t = trace_new();
    trace_rec r;
    memset(&r, 0, sizeof r);
    r.type = TR_OP;
    r.u.op.id = 1;
    r.u.op.dur_us = 5;
    snprintf(r.u.op.name, sizeof r.u.op.name, "gemm");
    int ok = trace_append(t, &r) == MS_OK;
    TAP_OK(ok && !trace_has_host_times(t), "an op without host time: none noted");
    r.u.op.id = 2;
    r.u.op.host_sync = 1;
    ok = trace_append(t, &r) == MS_OK;
    TAP_OK(ok && trace_has_host_times(t), "an op with a host synchronize: noted");
    trace_free(t);
    t = trace_new();
    r.u.op.host_sync = 0;
    r.u.op.host_us = 3;
    ok = trace_append(t, &r) == MS_OK;
    TAP_OK(ok && trace_has_host_times(t), "an op with a host time: noted");
    trace_free(t);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-test-trace-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 99; }
    test_roundtrip();
    test_gzip_and_reader();
    test_check_messages();
    test_host_attrs();
    test_headers_and_limits();
    test_big_stream();
    test_reserve();
    test_host_times_flag();
    const char *files[] = {"a.trace", "b.trace", "c.trace", "a.trace.gz", "bad.trace",
                           "v2.trace", "big.trace"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) remove(tpath(files[i]));
    if (rmdir(tmpdir) != 0) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

/* test_util.c — unit tests for base/util.c (parsing, line reader, atomic output),
 * base/u64map.c and sim/simbackend.c (capacity, VMM bookkeeping, latencies). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "sim/simbackend.h"
#include "tests/tap.h"
#include "base/u64map.h"
#include "base/util.h"

static char tmpdir[256];

static void test_parse(void)
{
    uint64_t u;
    int64_t i;
    double d;
    TAP_OK(ms_parse_u64("18446744073709551615", &u) && u == UINT64_MAX, "u64 max parses");
    TAP_OK(!ms_parse_u64("18446744073709551616", &u), "u64 overflow rejected");
    TAP_OK(!ms_parse_u64("-1", &u) && !ms_parse_u64("12x", &u) && !ms_parse_u64("", &u),
           "u64 rejects sign, junk, empty");
    TAP_OK(ms_parse_i64("-42", &i) && i == -42 && !ms_parse_i64("4.2", &i), "i64");
    TAP_OK(!ms_parse_i64("+1", &i) && !ms_parse_i64("-0", &i) && !ms_parse_i64("-007", &i) &&
               !ms_parse_i64("-", &i) && ms_parse_i64("0", &i) && i == 0 &&
               ms_parse_i64("-10", &i) && i == -10,
           "i64: digits with an optional '-': no '+', no \"-0\"");
    TAP_OK(ms_parse_double("1e-3", &d) && d == 1e-3 && !ms_parse_double("nan", &d) &&
               !ms_parse_double("inf", &d),
           "double accepts finite, rejects nan/inf");
    TAP_OK(ms_parse_bytes("2MiB", &u) && u == 2097152 && ms_parse_bytes("80GB", &u) &&
               u == 80000000000ULL && ms_parse_bytes("1.5G", &u) && u == 1610612736ULL,
           "byte suffixes (binary and decimal)");
    TAP_OK(!ms_parse_bytes("1.5", &u) && !ms_parse_bytes("3XB", &u), "fractional bytes rejected");
    TAP_OK(ms_parse_count("256K", &u) && u == 262144 && ms_parse_count("1M", &u) &&
               u == 1048576,
           "token counts with K/M");
    char line[] = "  alloc 1\t2  3 ";
    char *tok[8];
    TAP_OK(ms_split(line, tok, 8) == 4 && strcmp(tok[0], "alloc") == 0 &&
               strcmp(tok[3], "3") == 0,
           "split on blanks");
    char line2[] = "a b c";
    TAP_OK(ms_split(line2, tok, 2) == 3, "split reports too many tokens");
    char buf[64];
    double v = 0.1 + 0.2, back;
    ms_fmt_double(v, buf, sizeof buf);
    TAP_OK(ms_parse_double(buf, &back) && back == v, "double formatting round-trips (%s)", buf);
}

/* The shortest of %.15g/%.16g/%.17g that reads back, as ms_fmt_double wrote every double
 * before its integers' way without printf. */
static const char *fmt_double_ref(double v, char *buf, size_t n)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

/* ms_fmt_u64 against "%llu" and ms_fmt_double against printf's way, on the integers it
 * writes by hand (zeros, -0, up to 1e15), the ones next to them it leaves to printf, and
 * fractions; a buffer too small for the digits gets "". */
static void test_fmt_numbers(void)
{
    static const double vals[] = { 0.0, -0.0, 1.0, -1.0, 7.0, 10.0, 12345.0, -98765.0,
                                   999999999999999.0, -999999999999999.0, 1e15, -1e15,
                                   1e15 + 2, 4503599627370496.0, 9007199254740992.0, 1e16,
                                   1e300, 0.5, -0.25, 1e-7, 0.1 + 0.2, 2292.252415311548,
                                   123456789012345.5, 5e-324 };
    char a[64], b[64];
    int bad = 0;
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
        bad += strcmp(ms_fmt_double(vals[i], a, sizeof a), fmt_double_ref(vals[i], b, sizeof b))
               != 0;
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 200000; i++) { /* integers of every magnitude, and fractions */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v = (double)(int64_t)(x >> (x % 60)) * (x & 1 ? -1 : 1);
        if (i % 3 == 0) v /= (double)(1 + x % 1000);
        bad += strcmp(ms_fmt_double(v, a, sizeof a), fmt_double_ref(v, b, sizeof b)) != 0;
        snprintf(b, sizeof b, "%llu", (unsigned long long)(x >> (x % 64)));
        bad += strcmp(ms_fmt_u64(x >> (x % 64), a, sizeof a), b) != 0;
    }
    TAP_OK(bad == 0, "numbers formatted as printf formats them (%d differ)", bad);
    TAP_OK(strcmp(ms_fmt_u64(UINT64_MAX, a, 21), "18446744073709551615") == 0 &&
               strcmp(ms_fmt_u64(UINT64_MAX, a, 20), "") == 0 &&
               strcmp(ms_fmt_u64(0, a, 2), "0") == 0,
           "ms_fmt_u64 fills the buffer or writes nothing");
}

static void test_lines(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/a.txt.gz", tmpdir);
    gzFile gz = gzopen(path, "wb");
    gzputs(gz, "first\r\nsecond\nlast-no-newline");
    gzclose(gz);
    ms_lines *lr;
    ms_error err;
    char *l;
    FILE *f;
    TAP_OK(ms_lines_open(path, &lr, &err) == MS_OK, "open gzip file");
    int ok = ms_lines_next(lr, &l, &err) == MS_OK && strcmp(l, "first") == 0;
    ok = ok && ms_lines_next(lr, &l, &err) == MS_OK && strcmp(l, "second") == 0;
    ok = ok && ms_lines_next(lr, &l, &err) == MS_OK && strcmp(l, "last-no-newline") == 0;
    ok = ok && ms_lines_next(lr, &l, &err) == MS_ERR_LIMIT && ms_lines_lineno(lr) == 3;
    TAP_OK(ok, "gzip lines read with CRLF stripped, last line without newline, then EOF");
    ms_lines_free(lr);
    /* bytes after the gzip member that are not gzip are an error, not ignored */
    f = fopen(path, "ab");
    fputs("junk", f);
    fclose(f);
    ok = ms_lines_open(path, &lr, &err) == MS_OK;
    ms_status st = MS_OK;
    for (int k = 0; ok && k < 10 && (st = ms_lines_next(lr, &l, &err)) == MS_OK; k++) {}
    TAP_OK(ok && st == MS_ERR_PARSE && strstr(err.msg, "a.txt.gz: ") &&
               strstr(err.msg, "not gzip"),
           "trailing bytes after a gzip member rejected (%s)", st ? err.msg : "accepted");
    ms_lines_free(lr);
    char *all = NULL;
    size_t alen;
    st = ms_read_all(path, 1 << 20, &all, &alen, &err);
    TAP_OK(st == MS_ERR_PARSE && strstr(err.msg, "not gzip"),
           "... and by ms_read_all (%s)", st ? err.msg : "accepted");
    free(all);
    TAP_OK(ms_lines_open("/nonexistent/x", &lr, &err) == MS_ERR_IO &&
               strstr(err.msg, "/nonexistent/x") != NULL,
           "missing file: IO error naming it");
    /* a line over the limit is an error, not unbounded growth */
    snprintf(path, sizeof path, "%s/long.txt", tmpdir);
    f = fopen(path, "w");
    for (unsigned i = 0; i < MS_LINE_MAX + 10; i++) fputc('x', f);
    fputc('\n', f);
    fclose(f);
    ms_lines_open(path, &lr, &err);
    TAP_OK(ms_lines_next(lr, &l, &err) == MS_ERR_PARSE && strstr(err.msg, ":1:") != NULL,
           "over-long line rejected with file:line (%s)", err.msg);
    ms_lines_free(lr);
}

static void test_out(void)
{
    char path[512];
    ms_out *o;
    ms_error err;
    snprintf(path, sizeof path, "%s/out.csv", tmpdir);
    ms_out_open(path, &o, &err);
    ms_out_printf(o, "hello %d\n", 42);
    TAP_OK(access(path, F_OK) != 0, "output not visible before commit");
    TAP_OK(ms_out_commit(o, &err) == MS_OK && access(path, F_OK) == 0, "visible after commit");
    unlink(path);
    ms_out_open(path, &o, &err);
    ms_out_printf(o, "partial");
    ms_out_abort(o);
    TAP_OK(access(path, F_OK) != 0, "aborted output leaves no file");
    TAP_OK(ms_out_open("/nonexistent/dir/x", &o, &err) == MS_ERR_IO, "unwritable path: IO error");
    /* a SIGTERM while the file is being written removes the temporary file, then ends the
     * program by the signal */
    for (int gz = 0; gz < 2; gz++) {
        snprintf(path, sizeof path, "%s/killed.%s", tmpdir, gz ? "csv.gz" : "csv");
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            ms_out *k;
            if (ms_out_open(path, &k, &err) != MS_OK) _exit(3);
            for (int i = 0; i < 100000; i++) ms_out_printf(k, "row %d\n", i);
            raise(SIGTERM);
            _exit(4); /* not reached */
        }
        int status = 0;
        waitpid(pid, &status, 0);
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)pid);
        TAP_OK(pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM &&
                   access(tmp, F_OK) != 0 && access(path, F_OK) != 0,
               "SIGTERM while writing %s: killed by the signal, no temporary file left",
               gz ? "gzip" : "plain");
        unlink(tmp);
    }
}

static void test_map(void)
{
    u64map *m = u64map_new(4);
    int ok = 1;
    for (uint64_t k = 0; k < 100000; k++) ok &= u64map_put(m, k * 7919, k) == 0;
    for (uint64_t k = 0; k < 100000; k += 2) ok &= u64map_del(m, k * 7919, NULL);
    uint64_t v;
    for (uint64_t k = 0; k < 100000; k++) {
        int has = u64map_get(m, k * 7919, &v);
        ok &= (k % 2) ? (has && v == k) : !has;
    }
    TAP_OK(ok && u64map_count(m) == 50000, "100k puts, 50k deletes, lookups consistent");
    size_t it = 0, n = 0;
    while (u64map_next(m, &it, NULL, NULL)) n++;
    TAP_OK(n == 50000, "iteration visits every live key once");
    u64map_free(m);
    u64map_free(NULL);

    /* the keys at the ends of the range, one of which is kept beside the slot array */
    m = u64map_new(1);
    int added = 0;
    uint64_t *s = u64map_slot(m, UINT64_MAX, &added);
    ok = s && added && (*s = 7, 1) && u64map_put(m, 0, 3) == 0 &&
         u64map_put(m, UINT64_MAX - 1, 5) == 0 && u64map_count(m) == 3 &&
         u64map_get(m, UINT64_MAX, &v) && v == 7 && u64map_get(m, 0, &v) && v == 3 &&
         (s = u64map_slot(m, UINT64_MAX, &added)) && !added && *s == 7;
    uint64_t sum = 0, k;
    it = n = 0;
    while (u64map_next(m, &it, &k, &v)) { n++; sum += v; }
    ok &= n == 3 && sum == 15;
    ok &= u64map_del(m, UINT64_MAX, &v) && v == 7 && !u64map_get(m, UINT64_MAX, NULL) &&
          !u64map_del(m, UINT64_MAX, NULL) && u64map_count(m) == 2;
    u64map_clear(m);
    ok &= u64map_count(m) == 0 && !u64map_get(m, 0, NULL);
    TAP_OK(ok, "keys 0 and 2^64 - 1 are kept, found, iterated, deleted and cleared");
    u64map_free(m);

    /* a map before its first key: its array is made then, at the capacity asked for */
    m = u64map_new(100);
    it = 0;
    ok = !u64map_get(m, 5, NULL) && !u64map_del(m, 5, NULL) && u64map_count(m) == 0 &&
         !u64map_next(m, &it, NULL, NULL) && u64map_bytes(m) == 256 * 16 &&
         !u64map_put_grows(m);
    u64map_clear(m);
    ok &= u64map_put(m, UINT64_MAX, 1) == 0 && !u64map_get(m, 5, NULL) &&
          u64map_put(m, 5, 9) == 0 && u64map_get(m, 5, &v) && v == 9 &&
          u64map_get(m, UINT64_MAX, &v) && v == 1 && u64map_count(m) == 2 &&
          u64map_bytes(m) == 256 * 16;
    TAP_OK(ok, "an empty map finds nothing, and makes its array at its first key");
    u64map_free(m);
    u64map_free(u64map_new(0));
}

static void test_simbe(void)
{
    machine_t mc;
    memset(&mc, 0, sizeof mc);
    mc.cuda_malloc_base_us = 70;
    mc.cuda_malloc_per_gib_us = 380;
    mc.cuda_free_base_us = 50;
    mc.vmm_granularity_bytes = 2 << 20;
    mc.vmm_create_us = 10;
    mc.vmm_map_us = 1;
    mc.vmm_set_access_us = 25;
    simbe_t *b = simbe_new(&mc, 64ULL << 20, 1 << 20);
    const mb_backend *be = simbe_backend(b);
    uint64_t a1, a2, a3;
    int synced;
    TAP_OK(be->ops->dev_malloc(be->ctx, 40ULL << 20, &a1) == MS_OK, "malloc within capacity");
    double c = simbe_take_cost_us(b, &synced);
    TAP_OK(c > 70 && c < 90 && !synced, "cudaMalloc charged base + per-GiB (%.2f us)", c);
    TAP_OK(be->ops->dev_malloc(be->ctx, 30ULL << 20, &a2) == MS_ERR_OOM, "over capacity: OOM");
    TAP_OK(be->ops->dev_malloc(be->ctx, 24ULL << 20, &a2) == MS_OK && a2 > a1, "fills exactly");
    TAP_OK(be->ops->dev_free(be->ctx, a1) == MS_OK && be->ops->dev_free(be->ctx, a1) ==
               MS_ERR_INVALID,
           "double free rejected");
    simbe_take_cost_us(b, &synced);
    TAP_OK(synced, "cudaFree synchronizes");
    uint64_t va, h1, h2;
    be->ops->va_reserve(be->ctx, 8ULL << 20, &va);
    be->ops->phys_create(be->ctx, 2 << 20, &h1);
    be->ops->phys_create(be->ctx, 2 << 20, &h2);
    TAP_OK(be->ops->map(be->ctx, va, 2 << 20, h1) == MS_OK &&
               be->ops->map(be->ctx, va, 2 << 20, h2) == MS_ERR_INVALID,
           "a va cannot be mapped twice");
    TAP_OK(be->ops->map(be->ctx, va + (1 << 20), 2 << 20, h2) == MS_ERR_INVALID,
           "unaligned map rejected");
    TAP_OK(be->ops->map(be->ctx, va + (2 << 20), 2 << 20, h1) == MS_OK,
           "one handle may be mapped at two addresses (stitching)");
    TAP_OK(be->ops->va_free(be->ctx, va, 8ULL << 20) == MS_ERR_INVALID,
           "freeing a mapped range rejected");
    be->ops->unmap(be->ctx, va, 4ULL << 20);
    TAP_OK(simbe_live_mappings(b) == 0 && be->ops->va_free(be->ctx, va, 8ULL << 20) == MS_OK,
           "unmapped range frees");
    be->ops->phys_release(be->ctx, h1);
    be->ops->phys_release(be->ctx, h2);
    TAP_OK(be->ops->host_alloc(be->ctx, 2 << 20, &a3) == MS_ERR_OOHM, "host capacity enforced");
    simbe_fail_after(b, 0);
    TAP_OK(be->ops->phys_create(be->ctx, 2 << 20, &h1) == MS_ERR_OOM, "fault injection");
    TAP_OK(simbe_segment_count(b) == 2 && simbe_segment_bytes(b, 1) == (24ULL << 20),
           "segment log records mallocs in order");
    simbe_free(b);
    simbe_free(NULL);
}

/* cuMemSetAccess's cost per mapping. With vmm.set_access_d2h_us the mappings are left for the
 * executor to pace against the link (simbe_take_set_access_mappings; tests/test_exec.c times
 * them), except after a synchronize in the call; a caller that does not take them pays the
 * plain rate. */
static void map_n(simbe_t *b, int n, uint64_t handle_bytes, uint64_t *va)
{
    const mb_backend *be = simbe_backend(b);
    uint64_t h;
    int synced;
    be->ops->va_reserve(be->ctx, (uint64_t)n * handle_bytes, va);
    for (int i = 0; i < n; i++) {
        be->ops->phys_create(be->ctx, handle_bytes, &h);
        be->ops->map(be->ctx, *va + (uint64_t)i * handle_bytes, handle_bytes, h);
    }
    simbe_take_cost_us(b, &synced); /* a new call starts here */
}

static void test_simbe_set_access(void)
{
    machine_t mc;
    memset(&mc, 0, sizeof mc);
    mc.vmm_granularity_bytes = 2 << 20;
    mc.vmm_set_access_us = 30;
    mc.vmm_unmap_us = 7;
    mc.device_sync_us = 1;
    simbe_t *b = simbe_new(&mc, 1ULL << 34, 1 << 20);
    const mb_backend *be = simbe_backend(b);
    uint64_t va;
    int synced;
    map_n(b, 4, 20ULL << 20, &va);
    be->ops->set_access(be->ctx, va, 80ULL << 20);
    double c = simbe_take_cost_us(b, &synced);
    TAP_OK(fabs(c - 4 * 30) < 1e-6, "4 mappings of 20 MiB: 4 x 30 us, not 40 granules (%.1f)", c);
    be->ops->unmap(be->ctx, va, 80ULL << 20);
    c = simbe_take_cost_us(b, &synced);
    TAP_OK(fabs(c - 4 * 7) < 1e-6 && synced, "unmap charged per mapping, and synchronizes");
    simbe_free(b);
    mc.vmm_set_access_d2h_us = 1000;
    b = simbe_new(&mc, 1ULL << 34, 1 << 20);
    be = simbe_backend(b);
    map_n(b, 16, 2 << 20, &va);
    be->ops->set_access(be->ctx, va, 32ULL << 20);
    double n = simbe_take_set_access_mappings(b);
    c = simbe_take_cost_us(b, &synced);
    TAP_OK(n == 16 && c == 0, "with the slow rate: 16 mappings left to pace, nothing charged");
    map_n(b, 16, 2 << 20, &va);
    be->ops->set_access(be->ctx, va, 32ULL << 20);
    c = simbe_take_cost_us(b, &synced);
    TAP_OK(fabs(c - 16 * 30) < 1e-6 && simbe_take_set_access_mappings(b) == 0,
           "not taken: the plain rate (%.1f)", c);
    map_n(b, 16, 2 << 20, &va);
    be->ops->synchronize(be->ctx);
    be->ops->set_access(be->ctx, va, 32ULL << 20);
    n = simbe_take_set_access_mappings(b);
    c = simbe_take_cost_us(b, &synced);
    TAP_OK(n == 0 && fabs(c - (1 + 16 * 30)) < 1e-6,
           "after a synchronize in the call: charged at once at the plain rate (%.1f)", c);
    simbe_free(b);
}

/* ms_join writes what snprintf with a format of %s's writes, truncation included (the
 * parts are a modifiable global so that the compiler does not warn of the truncations the
 * test makes on purpose). */
char join_parts[5][12] = { "", "L12", ".", "attn_out", "_partial" };

static void test_join(void)
{
    char(*parts)[12] = join_parts;
    int same = 1;
    for (size_t n = 0; n <= 20; n++) {
        char a[24], b[24];
        memset(a, 'x', sizeof a);
        memset(b, 'x', sizeof b);
        size_t len = MS_JOIN(a, n, parts[0], parts[1], parts[2], parts[3], parts[4]);
        int want = snprintf(b, n, "%s%s%s%s%s", parts[0], parts[1], parts[2], parts[3],
                            parts[4]);
        same &= len == (size_t)want && memcmp(a, b, sizeof a) == 0;
    }
    TAP_OK(same, "ms_join: the bytes and length of snprintf(\"%%s...\") at every buffer size");
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/memsim-test-util-XXXXXX");
    if (!mkdtemp(tmpdir)) return 99;
    test_parse();
    test_fmt_numbers();
    test_lines();
    test_out();
    test_map();
    test_simbe();
    test_simbe_set_access();
    test_join();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

/* util.c — status strings, error messages, checked parsing, the gzip-transparent line reader
 * and atomic output files declared in util.h. Used by every module. */
#define _XOPEN_SOURCE 700 /* POSIX 2008 with realpath */
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

const char *ms_status_str(ms_status st)
{
    switch (st) {
    case MS_OK: return "ok";
    case MS_ERR_IO: return "input/output error";
    case MS_ERR_PARSE: return "parse error";
    case MS_ERR_INVALID: return "invalid argument";
    case MS_ERR_NOMEM: return "out of host memory (memsim itself)";
    case MS_ERR_OOM: return "out of device memory";
    case MS_ERR_OOHM: return "out of host memory";
    case MS_ERR_NOTFOUND: return "not found";
    case MS_ERR_UNSUPPORTED: return "unsupported";
    case MS_ERR_LIMIT: return "limit reached";
    }
    return "unknown status";
}

int ms_exit_code(ms_status st)
{
    switch (st) {
    case MS_OK: return MS_EXIT_OK;
    case MS_ERR_IO: return MS_EXIT_IO;
    case MS_ERR_PARSE: case MS_ERR_INVALID: case MS_ERR_NOTFOUND: return MS_EXIT_INPUT;
    case MS_ERR_OOM: case MS_ERR_OOHM: case MS_ERR_LIMIT: case MS_ERR_UNSUPPORTED:
        return MS_EXIT_FAIL;
    case MS_ERR_NOMEM: return MS_EXIT_INTERNAL;
    }
    return MS_EXIT_INTERNAL;
}

void ms_error_clear(ms_error *e)
{
    if (e) e->msg[0] = '\0';
}

ms_status ms_fail(ms_error *e, ms_status st, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

ms_status ms_fail_at(ms_error *e, ms_status st, const char *file, uint64_t line,
                     const char *fmt, ...)
{
    if (e) {
        int n = line ? snprintf(e->msg, sizeof e->msg, "%s:%llu: ", file,
                                (unsigned long long)line)
                     : snprintf(e->msg, sizeof e->msg, "%s: ", file);
        if (n < 0 || (size_t)n >= sizeof e->msg) n = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg + n, sizeof e->msg - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return st;
}

int ms_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || !isdigit((unsigned char)s[0])) return 0;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return 0;
    *out = v;
    return 1;
}

int ms_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s) return 0;
    /* decimal digits with an optional '-' (traces/FORMAT.md): no '+', and no "-0" */
    const char *d = *s == '-' ? s + 1 : s;
    if (!isdigit((unsigned char)*d) || (d != s && *d == '0')) return 0;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return 0;
    *out = v;
    return 1;
}

int ms_parse_double(const char *s, double *out)
{
    if (!s || !*s || isspace((unsigned char)*s)) return 0;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* Parses "<number><suffix>" where the suffix maps to a multiplier from the table. */
static int parse_scaled(const char *s, uint64_t *out, const char *const *sfx,
                        const double *mult, size_t nsfx)
{
    /* plain decimal only ("12", "1.5"): no sign, exponent or hexadecimal, which strtod takes */
    if (!s) return 0;
    size_t nd = strspn(s, "0123456789."), dots = 0;
    for (size_t i = 0; i < nd; i++) dots += s[i] == '.';
    if (nd == dots || dots > 1 || nd >= 40) return 0;
    const char *end = s + nd;
    double m = 1;
    if (*end) {
        size_t i;
        for (i = 0; i < nsfx; i++)
            if (strcmp(end, sfx[i]) == 0) break;
        if (i == nsfx) return 0;
        m = mult[i];
    } else if (!dots) {
        return ms_parse_u64(s, out); /* exact beyond 2^53 */
    }
    char num[40];
    memcpy(num, s, nd);
    num[nd] = '\0';
    double v = strtod(num, NULL) * m;
    if (!isfinite(v) || v >= 18446744073709551615.0) return 0;
    if (v != floor(v)) return 0; /* fractional bytes or tokens */
    *out = (uint64_t)v;
    return 1;
}

int ms_parse_bytes(const char *s, uint64_t *out)
{
    static const char *const sfx[] = {"B", "K", "M", "G", "T", "KB", "MB", "GB", "TB",
                                      "KiB", "MiB", "GiB", "TiB", "k"};
    static const double mult[] = {1, 1024.0, MS_MiB, MS_GiB, MS_GiB * 1024, 1e3, 1e6, 1e9,
                                  1e12, 1024.0, MS_MiB, MS_GiB, MS_GiB * 1024, 1024.0};
    return parse_scaled(s, out, sfx, mult, sizeof sfx / sizeof *sfx);
}

int ms_parse_count(const char *s, uint64_t *out)
{
    static const char *const sfx[] = {"K", "k", "M", "m"};
    static const double mult[] = {1024.0, 1024.0, MS_MiB, MS_MiB};
    return parse_scaled(s, out, sfx, mult, sizeof sfx / sizeof *sfx);
}

uint64_t ms_pow2_ceil(uint64_t x)
{
    uint64_t p = 1;
    while (p < x && p < (UINT64_C(1) << 63)) p <<= 1;
    return x ? p : 0;
}

int ms_cmp_u64(const void *x, const void *y)
{
    uint64_t p = *(const uint64_t *)x, q = *(const uint64_t *)y;
    return (p > q) - (p < q);
}

int ms_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

size_t ms_join(char *dst, size_t n, ...)
{
    va_list ap;
    va_start(ap, n);
    size_t len = 0;
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
        for (; *s; s++, len++)
            if (len + 1 < n) dst[len] = *s;
    va_end(ap);
    if (n) dst[len < n ? len : n - 1] = '\0';
    return len;
}

size_t ms_edit_distance(const char *a, const char *b)
{
    enum { MAXL = 64 };
    size_t la = strlen(a), lb = strlen(b), row[MAXL + 1];
    if (la > MAXL || lb > MAXL) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

const char *ms_closest(const char *s, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t bd = strlen(s) / 3 + 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = cands[i] ? ms_edit_distance(s, cands[i]) : (size_t)-1;
        if (d < bd) {
            bd = d;
            best = cands[i];
        }
    }
    return best;
}

int ms_split(char *line, char **tok, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        if (n == max) return max + 1;
        tok[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
        if (!*p) break;
        *p++ = '\0';
    }
    return n;
}

/* The raw input under both readers: a plain file, or gzip members one after another (what
 * gzip -c a b > ab makes), inflated with zlib in blocks. */
#define ZIN_BUF (1u << 17)

typedef struct zin {
    FILE *f;
    int gz;          /* 1: gzip data */
    int zinit;       /* z holds an inflate state */
    int in_member;   /* inside a gzip member */
    int file_eof;
    z_stream z;      /* next_in / avail_in: the unread input, in both modes */
    unsigned char in[ZIN_BUF];
} zin;

static ms_status zin_fill(zin *r, const char *path, uint64_t line, ms_error *err)
{
    if (r->z.avail_in || r->file_eof) return MS_OK;
    size_t n = fread(r->in, 1, ZIN_BUF, r->f);
    if (n < ZIN_BUF) {
        if (ferror(r->f))
            return ms_fail_at(err, MS_ERR_IO, path, line, "read error: %s", strerror(errno));
        r->file_eof = 1;
    }
    r->z.next_in = r->in;
    r->z.avail_in = (uInt)n;
    return MS_OK;
}

static ms_status zin_open(zin *r, const char *path, ms_error *err)
{
    memset(r, 0, sizeof *r);
    r->f = fopen(path, "rb");
    if (!r->f) return ms_fail_at(err, MS_ERR_IO, path, 0, "cannot open: %s", strerror(errno));
    ms_status st = zin_fill(r, path, 0, err);
    if (st == MS_OK && r->z.avail_in == 1 && !r->file_eof) { /* a 2-byte magic needs 2 bytes */
        size_t n = fread(r->in + 1, 1, ZIN_BUF - 1, r->f);
        if (n < ZIN_BUF - 1) r->file_eof = 1;
        r->z.avail_in += (uInt)n;
    }
    if (st != MS_OK) { fclose(r->f); r->f = NULL; return st; }
    r->gz = r->z.avail_in >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b;
    if (r->gz) {
        unsigned char *ni = r->z.next_in;
        uInt na = r->z.avail_in;
        r->z.next_in = Z_NULL;
        r->z.avail_in = 0;
        if (inflateInit2(&r->z, 15 + 16) != Z_OK) {
            fclose(r->f);
            r->f = NULL;
            return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        }
        r->zinit = 1;
        r->z.next_in = ni;
        r->z.avail_in = na;
    }
    return MS_OK;
}

static void zin_close(zin *r)
{
    if (r->zinit) inflateEnd(&r->z);
    if (r->f) fclose(r->f);
    r->zinit = 0;
    r->f = NULL;
}

/* Reads up to cap bytes into out; *got 0 at the end. line: where errors are reported. */
static ms_status zin_read(zin *r, char *out, size_t cap, size_t *got, const char *path,
                          uint64_t line, ms_error *err)
{
    ms_status st;
    *got = 0;
    if (cap > ZIN_BUF) cap = ZIN_BUF;
    if (!r->gz) {
        if ((st = zin_fill(r, path, line, err)) != MS_OK) return st;
        size_t n = r->z.avail_in < cap ? r->z.avail_in : cap;
        memcpy(out, r->z.next_in, n);
        r->z.next_in += n;
        r->z.avail_in -= (uInt)n;
        *got = n;
        return MS_OK;
    }
    r->z.next_out = (unsigned char *)out;
    r->z.avail_out = (uInt)cap;
    while (r->z.avail_out == cap) {
        if ((st = zin_fill(r, path, line, err)) != MS_OK) return st;
        if (!r->in_member) { /* the end, another member, or bytes that are neither */
            if (r->z.avail_in == 0) return MS_OK;
            if (r->z.avail_in == 1 && !r->file_eof) { /* the magic straddles a block */
                r->in[0] = r->z.next_in[0];
                size_t n = fread(r->in + 1, 1, ZIN_BUF - 1, r->f);
                if (n < ZIN_BUF - 1) r->file_eof = 1;
                r->z.next_in = r->in;
                r->z.avail_in = (uInt)(1 + n);
            }
            if (r->z.avail_in < 2 || r->z.next_in[0] != 0x1f || r->z.next_in[1] != 0x8b)
                return ms_fail_at(err, MS_ERR_PARSE, path, 0,
                                  "bytes after the end of the gzip data that are not gzip");
            if (inflateReset(&r->z) != Z_OK)
                return ms_fail_at(err, MS_ERR_IO, path, line, "read error: %s",
                                  r->z.msg ? r->z.msg : "inflate");
            r->in_member = 1;
        }
        if (r->z.avail_in == 0)
            return ms_fail_at(err, MS_ERR_IO, path, line,
                              "truncated gzip data (unexpected end of file)");
        int rc = inflate(&r->z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) {
            r->in_member = 0;
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            return ms_fail_at(err, MS_ERR_IO, path, line, "read error: %s",
                              r->z.msg ? r->z.msg : zError(rc));
        }
        *got = cap - r->z.avail_out;
    }
    *got = cap - r->z.avail_out;
    return MS_OK;
}

/* Lines are cut out of blocks of decompressed input; a line within one block is returned
 * in place, one that spans blocks is assembled in buf. */
struct ms_lines {
    zin r;
    char *path;
    char *blk;          /* ZIN_BUF + 1 bytes */
    size_t bpos, blen;
    int eof;
    char *buf;          /* a line spanning blocks */
    size_t cap;
    uint64_t lineno;
};

ms_status ms_lines_open(const char *path, ms_lines **out, ms_error *err)
{
    *out = NULL;
    ms_lines *lr = calloc(1, sizeof *lr);
    if (!lr || !(lr->path = strdup(path)) || !(lr->blk = malloc(ZIN_BUF + 1)) ||
        !(lr->buf = malloc(4096))) {
        if (lr) { free(lr->path); free(lr->blk); }
        free(lr);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    lr->cap = 4096;
    ms_status st = zin_open(&lr->r, path, err);
    if (st != MS_OK) {
        free(lr->path); free(lr->blk); free(lr->buf); free(lr);
        return st;
    }
    *out = lr;
    return MS_OK;
}

/* The longest line content (without its newline) the reader takes. */
#define LINE_CONTENT_MAX (MS_LINE_MAX - 2)

ms_status ms_lines_next(ms_lines *lr, char **line, ms_error *err)
{
    size_t len = 0;
    int spanning = 0;
    char *p = NULL;
    *line = NULL;
    if (lr->bpos < lr->blen && lr->blk[lr->bpos] == '\n') { /* a blank line, the cheap way */
        p = lr->blk + lr->bpos++;
        *p = '\0';
        lr->lineno++;
        *line = p;
        return MS_OK;
    }
    for (;;) {
        if (lr->bpos == lr->blen) {
            size_t got = 0;
            if (!lr->eof) {
                ms_status st = zin_read(&lr->r, lr->blk, ZIN_BUF, &got, lr->path,
                                        lr->lineno + 1, err);
                if (st != MS_OK) return st;
            }
            if (got == 0) {
                lr->eof = 1;
                if (!spanning) return MS_ERR_LIMIT; /* end of file */
                p = lr->buf;
                break;
            }
            lr->bpos = 0;
            lr->blen = got;
        }
        char *s = lr->blk + lr->bpos;
        size_t avail = lr->blen - lr->bpos;
        char *nl = memchr(s, '\n', avail);
        size_t take = nl ? (size_t)(nl - s) : avail;
        if (!spanning && nl) { /* the whole line in this block */
            *nl = '\0';
            lr->bpos += take + 1;
            p = s;
            len = take;
            break;
        }
        if (len + take > LINE_CONTENT_MAX)
            return ms_fail_at(err, MS_ERR_PARSE, lr->path, lr->lineno + 1,
                              "line longer than %u bytes", MS_LINE_MAX);
        if (len + take + 1 > lr->cap) {
            size_t nc = lr->cap;
            while (nc < len + take + 1) nc *= 2;
            char *nb = realloc(lr->buf, nc);
            if (!nb) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
            lr->buf = nb;
            lr->cap = nc;
        }
        memcpy(lr->buf + len, s, take);
        len += take;
        lr->bpos += take + (nl ? 1 : 0);
        spanning = 1;
        if (nl) { p = lr->buf; break; }
    }
    p[len] = '\0';
    if (len > LINE_CONTENT_MAX)
        return ms_fail_at(err, MS_ERR_PARSE, lr->path, lr->lineno + 1,
                          "line longer than %u bytes", MS_LINE_MAX);
    if (len && memchr(p, '\0', len))
        return ms_fail_at(err, MS_ERR_PARSE, lr->path, lr->lineno + 1, "NUL byte in text");
    if (len && p[len - 1] == '\r') p[--len] = '\0';
    lr->lineno++;
    *line = p;
    return MS_OK;
}

ms_status ms_lines_next_content(ms_lines *lr, char **line, ms_error *err)
{
    for (;;) {
        ms_status st = ms_lines_next(lr, line, err);
        if (st != MS_OK) return st;
        const char *q = *line;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (*q != '\0' && *q != '#') return MS_OK;
    }
}

uint64_t ms_lines_lineno(const ms_lines *lr) { return lr->lineno; }
const char *ms_lines_path(const ms_lines *lr) { return lr->path; }

void ms_lines_free(ms_lines *lr)
{
    if (!lr) return;
    zin_close(&lr->r);
    free(lr->path);
    free(lr->blk);
    free(lr->buf);
    free(lr);
}

struct ms_bytes {
    zin r;
    char *path;
};

ms_status ms_bytes_open(const char *path, ms_bytes **out, ms_error *err)
{
    *out = NULL;
    ms_bytes *b = calloc(1, sizeof *b);
    if (!b || !(b->path = strdup(path))) {
        free(b);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    ms_status st = zin_open(&b->r, path, err);
    if (st != MS_OK) { free(b->path); free(b); return st; }
    *out = b;
    return MS_OK;
}

ms_status ms_bytes_read(ms_bytes *b, void *buf, size_t cap, size_t *got, ms_error *err)
{
    zin *r = &b->r;
    if (!r->gz && r->z.avail_in == 0 && cap >= ZIN_BUF && !r->file_eof) {
        /* a plain file read in large blocks goes straight to the caller's buffer */
        size_t n = fread(buf, 1, cap, r->f);
        if (n < cap) {
            if (ferror(r->f))
                return ms_fail_at(err, MS_ERR_IO, b->path, 0, "read error: %s", strerror(errno));
            r->file_eof = 1;
        }
        *got = n;
        return MS_OK;
    }
    return zin_read(r, buf, cap, got, b->path, 0, err);
}

void ms_bytes_free(ms_bytes *b)
{
    if (!b) return;
    zin_close(&b->r);
    free(b->path);
    free(b);
}

ms_status ms_read_all(const char *path, size_t max_bytes, char **buf, size_t *len,
                      ms_error *err)
{
    *buf = NULL;
    *len = 0;
    zin r;
    ms_status st = zin_open(&r, path, err);
    if (st != MS_OK) return st;
    /* A plain file too large is known before reading; gzip data is counted as it inflates. */
    struct stat sb;
    if (!r.gz && fstat(fileno(r.f), &sb) == 0 && S_ISREG(sb.st_mode) &&
        (uint64_t)sb.st_size > max_bytes) {
        zin_close(&r);
        return ms_fail_at(err, MS_ERR_LIMIT, path, 0, "file larger than %zu bytes", max_bytes);
    }
    size_t cap = 65536, n = 0;
    char *b = malloc(cap + 1);
    if (!b) { zin_close(&r); return ms_fail(err, MS_ERR_NOMEM, "out of memory"); }
    for (;;) {
        if (n == cap) {
            if (cap >= max_bytes) {
                free(b); zin_close(&r);
                return ms_fail_at(err, MS_ERR_LIMIT, path, 0, "file larger than %zu bytes",
                                  max_bytes);
            }
            size_t nc = cap * 2 > max_bytes ? max_bytes : cap * 2;
            char *nb = realloc(b, nc + 1);
            if (!nb) { free(b); zin_close(&r); return ms_fail(err, MS_ERR_NOMEM, "out of memory"); }
            b = nb;
            cap = nc;
        }
        size_t got;
        st = zin_read(&r, b + n, cap - n, &got, path, 0, err);
        if (st != MS_OK) { free(b); zin_close(&r); return st; }
        if (got == 0) break;
        n += got;
    }
    zin_close(&r);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return MS_OK;
}

struct ms_out {
    FILE *fp;
    gzFile gz;
    char *path, *tmp;
    int is_stdout;
    int direct;     /* written in place: a device, a FIFO or a socket (no rename onto it) */
    int failed;
    int slot;       /* the temporary file's slot for the signal handler, or -1 */
};

/* Where an output named path really goes: the target of a symbolic link (so the link stays
 * and its file is replaced), else path itself; *special is set for an existing path that is
 * not a regular file (/dev/null, a FIFO), which must be written in place. NULL: no memory. */
static char *out_target(const char *path, int *special)
{
    struct stat st;
    *special = 0;
    if (lstat(path, &st) != 0) return strdup(path);          /* a new file */
    if (S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real) { *special = 1; return strdup(path); }    /* dangling: through the link */
        *special = stat(real, &st) == 0 && !S_ISREG(st.st_mode);
        return real;
    }
    *special = !S_ISREG(st.st_mode);
    return strdup(path);
}

/* Temporary files being written, removed by a signal that ends the program (SIGTERM,
 * SIGINT, SIGHUP) before it is raised again with its default action. The handler reads only
 * these static buffers and calls only async-signal-safe functions (unlink, signal, raise). */
#define OUT_TMP_SLOTS 16
#define OUT_TMP_PATH 4096
static char out_tmp_path[OUT_TMP_SLOTS][OUT_TMP_PATH];
static volatile sig_atomic_t out_tmp_used[OUT_TMP_SLOTS];
static const int out_signals[] = {SIGTERM, SIGINT, SIGHUP};

static void out_on_signal(int sig)
{
    for (int i = 0; i < OUT_TMP_SLOTS; i++)
        if (out_tmp_used[i]) unlink(out_tmp_path[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Installs the handler once, for the signals whose action is the default (one the caller
 * ignores or handles is left alone). */
static void out_install_handler(void)
{
    static int done;
    if (done) return;
    done = 1;
    for (size_t i = 0; i < sizeof out_signals / sizeof *out_signals; i++) {
        struct sigaction old, sa;
        if (sigaction(out_signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = out_on_signal;
        sigemptyset(&sa.sa_mask);
        for (size_t j = 0; j < sizeof out_signals / sizeof *out_signals; j++)
            sigaddset(&sa.sa_mask, out_signals[j]);
        sigaction(out_signals[i], &sa, NULL);
    }
}

/* The slot now holding tmp, or -1 (no slot free, or a path too long: not removed then). */
static int out_tmp_register(const char *tmp)
{
    size_t n = strlen(tmp);
    if (n >= OUT_TMP_PATH) return -1;
    out_install_handler();
    for (int i = 0; i < OUT_TMP_SLOTS; i++)
        if (!out_tmp_used[i]) {
            memcpy(out_tmp_path[i], tmp, n + 1);
            out_tmp_used[i] = 1;
            return i;
        }
    return -1;
}

static void out_tmp_release(int slot)
{
    if (slot >= 0) out_tmp_used[slot] = 0;
}

ms_status ms_out_open(const char *path, ms_out **out, ms_error *err)
{
    *out = NULL;
    ms_out *o = calloc(1, sizeof *o);
    if (!o) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    o->slot = -1;
    if (strcmp(path, "-") == 0) {
        o->fp = stdout;
        o->is_stdout = 1;
        *out = o;
        return MS_OK;
    }
    o->path = out_target(path, &o->direct);
    size_t n = (o->path ? strlen(o->path) : 0) + 32;
    o->tmp = malloc(n);
    if (!o->path || !o->tmp) {
        free(o->path); free(o->tmp); free(o);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    }
    if (o->direct) snprintf(o->tmp, n, "%s", path);
    else snprintf(o->tmp, n, "%s.tmp.%ld", o->path, (long)getpid());
    /* registered before the file exists, so that no moment leaves it unknown to the handler */
    if (!o->direct) o->slot = out_tmp_register(o->tmp);
    size_t pl = strlen(path);
    if (pl > 3 && strcmp(path + pl - 3, ".gz") == 0) {
        o->gz = gzopen(o->tmp, "wb6");
        if (!o->gz) goto fail;
    } else {
        o->fp = fopen(o->tmp, "wb");
        if (!o->fp) goto fail;
    }
    *out = o;
    return MS_OK;
fail:
    ms_fail_at(err, MS_ERR_IO, path, 0, "cannot write: %s", strerror(errno));
    out_tmp_release(o->slot);
    free(o->path); free(o->tmp); free(o);
    return MS_ERR_IO;
}

int ms_out_write(ms_out *o, const void *buf, size_t n)
{
    if (o->failed) return -1;
    if (o->gz) {
        if (n && gzwrite(o->gz, buf, (unsigned)n) != (int)n) o->failed = 1;
    } else if (fwrite(buf, 1, n, o->fp) != n) {
        o->failed = 1;
    }
    return o->failed ? -1 : 0;
}

int ms_out_printf(ms_out *o, const char *fmt, ...)
{
    char small[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { o->failed = 1; return -1; }
    if ((size_t)n < sizeof small) return ms_out_write(o, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) { o->failed = 1; return -1; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int r = ms_out_write(o, big, (size_t)n);
    free(big);
    return r;
}

ms_status ms_out_commit(ms_out *o, ms_error *err)
{
    if (o->is_stdout) {
        int bad = o->failed || fflush(stdout) != 0;
        free(o);
        return bad ? ms_fail(err, MS_ERR_IO, "error writing to standard output") : MS_OK;
    }
    int bad = o->failed;
    if (o->gz) bad |= gzclose(o->gz) != Z_OK;
    else bad |= fclose(o->fp) != 0;
    ms_status st = MS_OK;
    if (bad) {
        st = ms_fail_at(err, MS_ERR_IO, o->path, 0, "write failed: %s", strerror(errno));
        if (!o->direct) remove(o->tmp);
    } else if (!o->direct && rename(o->tmp, o->path) != 0) {
        st = ms_fail_at(err, MS_ERR_IO, o->path, 0, "cannot rename into place: %s",
                        strerror(errno));
        remove(o->tmp);
    }
    out_tmp_release(o->slot);
    free(o->path); free(o->tmp); free(o);
    return st;
}

void ms_out_abort(ms_out *o)
{
    if (!o) return;
    if (!o->is_stdout) {
        if (o->gz) gzclose(o->gz);
        else fclose(o->fp);
        if (!o->direct) remove(o->tmp);
        out_tmp_release(o->slot);
        free(o->path);
        free(o->tmp);
    }
    free(o);
}

ms_status ms_out_save(const char *path, const void *buf, size_t len, ms_error *err)
{
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st) return st;
    if (ms_out_write(o, buf, len) != 0) {
        ms_out_abort(o);
        return ms_fail_at(err, MS_ERR_IO, path, 0, "write failed");
    }
    return ms_out_commit(o, err);
}

ms_status ms_grow_to(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return MS_OK;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / elem) return MS_ERR_NOMEM;
        nc *= 2;
    }
    void *p = realloc(*arr, nc * elem);
    if (!p) return MS_ERR_NOMEM;
    *arr = p;
    *cap = nc;
    return MS_OK;
}

const char *ms_fmt_bytes(uint64_t bytes, char *buf, size_t n)
{
    double b = (double)bytes;
    if (b >= MS_GiB) snprintf(buf, n, "%.2f GiB", b / MS_GiB);
    else if (b >= MS_MiB) snprintf(buf, n, "%.2f MiB", b / MS_MiB);
    else if (b >= 1024) snprintf(buf, n, "%.2f KiB", b / 1024);
    else snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    return buf;
}

const char *ms_fmt_u64(uint64_t v, char *buf, size_t n)
{
    char tmp[24], *p = tmp + sizeof tmp;
    *--p = '\0';
    do *--p = (char)('0' + v % 10); while ((v /= 10) != 0);
    size_t len = (size_t)(tmp + sizeof tmp - p);
    if (n >= len) memcpy(buf, p, len);
    else if (n > 0) buf[0] = '\0';
    return buf;
}

const char *ms_fmt_double(double v, char *buf, size_t n)
{
    /* An integer below 1e15 in magnitude (zeros, counts): %.15g writes its digits alone, no
     * exponent or point, and they read back exactly (1e15 < 2^53), so they are written
     * without printf's conversion and the read back (half of a sweep's CSV doubles). */
    if (n >= 18 && fabs(v) < 1e15 && v == (double)(int64_t)v) {
        if (signbit(v)) { /* -0 too, which %.15g writes as "-0" */
            buf[0] = '-';
            ms_fmt_u64((uint64_t)-(int64_t)v, buf + 1, n - 1);
        } else {
            ms_fmt_u64((uint64_t)v, buf, n);
        }
        return buf;
    }
    /* The shortest of %.15g/%.16g/%.17g that reads back to the same double. */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

void ms_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void ms_json_double(FILE *f, double v)
{
    char buf[40];
    if (isfinite(v)) fputs(ms_fmt_double(v, buf, sizeof buf), f);
    else fputs("null", f);
}

void ms_csv_str(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

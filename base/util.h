/* util.h — status codes, error messages, checked number parsing, a line reader that
 * reads plain and gzip files alike, and output files that appear only when complete.
 * The lowest layer of memsim: every other module (traces, planners, sim, runtime) uses it. */
#ifndef MEMSIM_UTIL_H
#define MEMSIM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Status returned by every library function. Only main() turns one into an exit code. */
typedef enum ms_status {
    MS_OK = 0,
    MS_ERR_IO,          /* a file could not be opened, read or written */
    MS_ERR_PARSE,       /* malformed input; the ms_error names file and line */
    MS_ERR_INVALID,     /* well-formed but impossible: bad argument, inconsistent configuration */
    MS_ERR_NOMEM,       /* host malloc failed */
    MS_ERR_OOM,         /* the modelled device is out of memory (a result, not a crash) */
    MS_ERR_OOHM,        /* the modelled host is out of memory (a result) */
    MS_ERR_NOTFOUND,    /* an unknown name (model, machine, policy, allocator) */
    MS_ERR_UNSUPPORTED, /* asked for something this build or backend cannot do */
    MS_ERR_LIMIT        /* a time, size or count limit was reached */
} ms_status;

const char *ms_status_str(ms_status st);

/* Exit codes of every memsim program (documented in README.md). */
enum {
    MS_EXIT_OK = 0,
    MS_EXIT_FAIL = 1,    /* the run finished and found problems (check errors, OOM in a required case) */
    MS_EXIT_USAGE = 2,   /* bad command line */
    MS_EXIT_INPUT = 3,   /* bad input file or unknown name */
    MS_EXIT_IO = 4,      /* cannot read or write a file */
    MS_EXIT_INTERNAL = 5 /* out of host memory or an internal error */
};
int ms_exit_code(ms_status st);

/* A human-readable error: "FILE:LINE: message" where a file is involved. */
typedef struct ms_error {
    char msg[1024];
} ms_error;

void ms_error_clear(ms_error *e);
/* Sets e->msg (e may be NULL); returns st so callers can `return ms_fail(e, st, ...)`. */
ms_status ms_fail(ms_error *e, ms_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, prefixed with "file:line: ". line 0 prints just "file: ". */
ms_status ms_fail_at(ms_error *e, ms_status st, const char *file, uint64_t line,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Checked parsing of one whole token: no trailing junk, no overflow, no negative for unsigned.
 * Integers are decimal digits; a signed one may start with '-' (never '+', never "-0"). */
int ms_parse_u64(const char *s, uint64_t *out);
int ms_parse_i64(const char *s, int64_t *out);
int ms_parse_double(const char *s, double *out); /* finite values only */
/* Byte sizes with optional suffix: 512, 4K, 2MiB, 1.5GB, 80G (K/M/G/T = 1024-based,
 * KB/MB/GB/TB = 1000-based, KiB/MiB/GiB/TiB = 1024-based). */
int ms_parse_bytes(const char *s, uint64_t *out);
/* What every command-line message says a malformed byte size should have been, whether an
 * option or a --knob gave it ("--OPT 'V': " MS_BYTES_EXPECTED; exit MS_EXIT_USAGE). */
#define MS_BYTES_EXPECTED "expected a byte size, e.g. 512MiB, 1.5GiB or 80GB"
/* Sequence lengths: 4096, 64K (=65536), 1M (=1048576). */
int ms_parse_count(const char *s, uint64_t *out);

/* Splits line in place on blanks into at most max tokens; returns the token count,
 * or max + 1 if there were more. */
int ms_split(char *line, char **tok, int max);

/* Line reader over a plain or gzip-compressed file (zlib reads both). Lines longer than
 * MS_LINE_MAX are an error, so a hostile file cannot make the reader grow without bound. */
#define MS_LINE_MAX (1u << 20)
typedef struct ms_lines ms_lines;
ms_status ms_lines_open(const char *path, ms_lines **out, ms_error *err);
/* Returns MS_OK with *line pointing at a NUL-terminated line (no newline), or MS_ERR_LIMIT at
 * end of file (with *line NULL), or an error. The line stays valid until the next call. */
ms_status ms_lines_next(ms_lines *lr, char **line, ms_error *err);
/* Like ms_lines_next, but skips blank lines and lines whose first non-blank character is '#'
 * (the comment rule of every memsim text format). */
ms_status ms_lines_next_content(ms_lines *lr, char **line, ms_error *err);
uint64_t ms_lines_lineno(const ms_lines *lr);
const char *ms_lines_path(const ms_lines *lr);
void ms_lines_free(ms_lines *lr);

/* Byte reader over the same input as the line reader (a plain file, or gzip members
 * inflated in blocks), for binary formats. */
typedef struct ms_bytes ms_bytes;
ms_status ms_bytes_open(const char *path, ms_bytes **out, ms_error *err);
/* Reads up to cap bytes into buf; *got is 0 only at the end of the data. */
ms_status ms_bytes_read(ms_bytes *b, void *buf, size_t cap, size_t *got, ms_error *err);
void ms_bytes_free(ms_bytes *b);

/* Reads a whole file (plain or gzip) into a NUL-terminated buffer, at most max_bytes. */
ms_status ms_read_all(const char *path, size_t max_bytes, char **buf, size_t *len, ms_error *err);

/* An output file written to "path.tmp.PID" and renamed over path on commit, so a failed run
 * never leaves a half-written file behind. A path ending in ".gz" is gzip-compressed.
 * "-" writes to stdout. A symbolic link is followed (its target is replaced, the link kept);
 * an existing path that is not a regular file (/dev/null, a FIFO) is written in place. */
typedef struct ms_out ms_out;
ms_status ms_out_open(const char *path, ms_out **out, ms_error *err);
int ms_out_printf(ms_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ms_out_write(ms_out *o, const void *buf, size_t n);
ms_status ms_out_commit(ms_out *o, ms_error *err); /* closes and renames; frees o */
void ms_out_abort(ms_out *o);                       /* closes and removes; frees o; NULL ok */
/* The whole of buf written to path through ms_out (atomic; ".gz" compressed). */
ms_status ms_out_save(const char *path, const void *buf, size_t len, ms_error *err);

/* The smallest power of two >= x (0 for 0; capped at 2^63), as PyTorch's pinned host
 * allocator rounds (c10::llvm::PowerOf2Ceil). */
uint64_t ms_pow2_ceil(uint64_t x);

/* 1 when s ends with suffix. */
int ms_ends_with(const char *s, const char *suffix);

/* The strings up to a NULL, one after another, into dst as snprintf(dst, n, "%s%s...")
 * writes them (at most n - 1 characters and a NUL); returns the length of the whole. For
 * names made millions of times (the generator's), where a format's parsing costs more than
 * the copy. */
size_t ms_join(char *dst, size_t n, ...);
/* ms_join with its NULL: MS_JOIN(buf, sizeof buf, a, ".", b). */
#define MS_JOIN(dst, n, ...) ms_join((dst), (n), __VA_ARGS__, (const char *)NULL)

/* Edit distance (insertions, deletions, substitutions) of two short strings; strings over
 * 64 characters compare as SIZE_MAX apart. For "did you mean" hints. */
size_t ms_edit_distance(const char *a, const char *b);
/* The candidate closest to s, or NULL when none is within a third of s's length (plus one);
 * ties: the first met. */
const char *ms_closest(const char *s, const char *const *cands, size_t n);
/* qsort comparator of uint64_t values, ascending. */
int ms_cmp_u64(const void *x, const void *y);

/* Growable array helper: ensures *cap >= need elements of elem bytes. Inline where the room
 * is there already (almost every call: the engine's, the link's and the allocator's per
 * event), the growth out of line (ms_grow_to). */
ms_status ms_grow_to(void **arr, size_t *cap, size_t need, size_t elem);
static inline ms_status ms_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    return need <= *cap ? MS_OK : ms_grow_to(arr, cap, need, elem);
}

/* Formats bytes as "1.50 GiB" into buf. */
const char *ms_fmt_bytes(uint64_t bytes, char *buf, size_t n);

/* v in decimal, as "%llu" writes it, into buf (n bytes; "" when it does not fit). */
const char *ms_fmt_u64(uint64_t v, char *buf, size_t n);

/* Exact decimal formatting of doubles for round-tripping: shortest "%.17g"-safe text. */
const char *ms_fmt_double(double v, char *buf, size_t n);

/* JSON values for the writers of JSON documents: a string quoted, with quotes, backslashes
 * and control characters escaped; a double as ms_fmt_double writes it (so that it reads back
 * the same and matches the CSVs), null when it is not finite, which JSON cannot say. */
void ms_json_str(FILE *f, const char *s);
void ms_json_double(FILE *f, double v);

/* A CSV field as RFC 4180 writes it: quoted, quotes doubled, when it holds a comma, a quote
 * or a line break; as it is otherwise. */
void ms_csv_str(FILE *f, const char *s);

#define MS_GiB (1024.0 * 1024.0 * 1024.0)
#define MS_MiB (1024.0 * 1024.0)

#endif

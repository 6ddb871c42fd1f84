/* trace_int.h — internal to the workload trace: the binary form's codec (traces/trace_bin.c)
 * as the streaming reader of traces/trace.c and the streaming writer of
 * traces/trace_stream.c call it, the text form's record rules and formatting that
 * trace.c lends the writer, and the class names of traces/trace_names.c. Not an interface of the
 * trace module: trace.h is what the rest of memsim includes; this header exists so that the
 * text form and the binary form live in two files without an include cycle, and so that the
 * traces made again after another's structure (traces/trace_shape.c) share the in-memory
 * trace's fields. */
#ifndef MEMSIM_TRACE_INT_H
#define MEMSIM_TRACE_INT_H

#include "base/u64map.h"
#include "traces/trace.h"

/* The first bytes of a binary trace (traces/FORMAT.md, "Binary form"). A text trace never
 * starts with 0x89, and the \r\n and \x1a catch a file mangled by text-mode copies. */
#define TBIN_MAGIC "\x89MSTR\r\n\x1a"
#define TBIN_MAGIC_LEN 8

/* ---- from traces/trace_names.c: the class names, indexed by trace_class, for the text
 * reader's fast path (traces/trace.c), which matches them in place */
extern const char *const trace_class_names[TC_COUNT];

/* ---- from traces/trace.c, for the streaming writer (traces/trace_stream.c) */
/* The text line of one record, newline included, appended at *buf + *n (grown); -1: no
 * memory. */
int trace_text_append(char **buf, size_t *n, size_t *cap, const trace_rec *rec);
/* 1 when the record, or the meta pair, is one both forms can hold (the readers' rules). */
int trace_rec_valid(const trace_rec *rec);
int trace_meta_valid(const char *key, const char *value);
/* Reads r's records to the end, checking liveness, and hands each to fn (cur: live bytes);
 * stops at the first problem ("FILE:LINE: ..." or "FILE: record N: ..."). */
ms_status trace_scan_checked(trace_reader *r, const char *path,
                             ms_status (*fn)(void *ctx, const trace_rec *rec, uint64_t cur),
                             void *ctx, ms_error *err);

/* ---- the in-memory trace (traces/trace.c), and the traces of traces/trace_shape.c */

/* Op id lists live in chained blocks so that pointers handed out stay valid. */
typedef struct u64blk {
    struct u64blk *next;
    size_t used, cap;
    uint64_t v[];
} u64blk;

struct trace {
    trace_rec *recs;
    size_t n, cap;
    char **mkey, **mval;
    size_t n_meta, cap_meta;
    u64map *tensor_idx, *op_idx;   /* id -> index of the most recent record; NULL while the
                                      trace reads base's (the same ids at the same places) */
    int host_times;                /* some op has a host time or a host synchronize */
    u64blk *blocks;
    size_t block_bytes;            /* sum of the blocks' sizes */
    size_t refs;                   /* holders beside the owner (trace_ref); freed at 0 */
    /* tshape_new_like: the trace whose records this one's follow (a reference, released by
       trace_free), its op id lists and indexes read in place; NULL for any other trace */
    trace_t *base;
    int binding;                   /* 1 while appends are compared with base's records */
    int bind_miss;                 /* an append did not have base's structure */
    /* a base's: its ALLOC and MARK records, made when a first trace is made after it
       (tshape_new_like) and valid while it has am_upto records; NULL if none */
    struct tshape_ref *am;
    size_t n_am, am_upto;
    /* a base's: the record array of a trace made after it, given back when that trace was
       freed (tshape_give_back), holding base's n records of base's structure; NULL if none */
    trace_rec *spare_recs;
    size_t spare_cap;
    int recycled;                  /* made after base into its spare: records n..base->n-1
                                      are still the last trace's, of base's structure */
    struct tshape_derived *derived; /* a base's: what readers derived from its structure */
};

/* From traces/trace_shape.c, for trace_append: appends rec to t while t->binding, where rec
 * must have the structure of base's record at the same place (MS_ERR_INVALID and bind_miss
 * otherwise); and gives t indexes of its own before an append after the binding. */
ms_status tshape_append(trace_t *t, const trace_rec *rec);
ms_status tshape_unshare(trace_t *t);
/* For trace_free, as the last holder lets t go: a trace that followed base's records to the
 * end (and was not appended to since) gives its record array to base, for the next trace
 * made after it. 1 when it did (t->recs is then NULL). */
int tshape_give_back(trace_t *t);
/* For trace_free: frees what readers kept with t (tshape_keep_derived). */
void tshape_derived_free(trace_t *t);
/* trace.c's record rules of the numbers alone (what may differ from base's record), and
 * the same rules by field for tshape_put_alloc and tshape_put_op. */
int trace_rec_numbers_valid(const trace_rec *rec);
int trace_alloc_bytes_valid(uint64_t bytes);
int trace_op_numbers_valid(double flops, double dur_us, double host_us);

/* What the binary reader hands back for one record of the file. */
typedef enum tbin_kind { TBIN_REC, TBIN_META, TBIN_EOF } tbin_kind;

/* ---- reader: bounded memory (one input block, the string table, the current op's ids) */
typedef struct tbin_rd tbin_rd;
/* Opens the reader over an input whose first bytes (the magic) were already read from in;
 * reads and checks the header. Takes in over (also on failure). */
ms_status tbin_rd_open(const char *path, ms_bytes *in, tbin_rd **out, ms_error *err);
/* The next trace record or meta pair: *kind TBIN_REC with rec filled (rec->line is the
 * record's number in the file), TBIN_META with *key and *val (valid until the next call),
 * or TBIN_EOF after the end record. Errors read "FILE: record N: problem"; *fatal is set
 * when reading cannot go on (truncated file, unknown record type, a damaged structure),
 * else the bad record was consumed and the next call reads the one after it. */
ms_status tbin_rd_next(tbin_rd *r, trace_rec *rec, const char **key, const char **val,
                       tbin_kind *kind, int *fatal, ms_error *err);
/* The hot path of tbin_rd_next for the records that need no more than their fixed part
 * (alloc, free): 1 when one was read into rec, -1 when it was bad (err set; consumed, not
 * fatal), 0 when the next record is anything else (call tbin_rd_next). */
int tbin_rd_quick(tbin_rd *r, trace_rec *rec, ms_error *err);
/* The number of the last record read (for messages about it). */
uint64_t tbin_rd_record_no(const tbin_rd *r);
void tbin_rd_free(tbin_rd *r);

/* ---- writer: records as they come, over an ms_out (atomic; ".gz" compresses) */
typedef struct tbin_wr tbin_wr;
ms_status tbin_wr_open(const char *path, tbin_wr **out, ms_error *err);
/* Meta pairs come before the first record (the caller checks key and value). */
ms_status tbin_wr_meta(tbin_wr *w, const char *key, const char *val, ms_error *err);
/* One record the caller has checked (trace.c's rec_valid). */
ms_status tbin_wr_rec(tbin_wr *w, const trace_rec *rec, ms_error *err);
/* Writes the end record and commits the file; frees w. */
ms_status tbin_wr_commit(tbin_wr *w, ms_error *err);
void tbin_wr_abort(tbin_wr *w);

#endif

/* trace.h — the workload trace: one rank's training iteration(s) in program order as
 * alloc / free / op / mark records with tensor and op metadata (format in FORMAT.md).
 * A streaming reader (bounded memory, for check/stats/replay of huge traces), a writer that
 * round-trips exactly, a validator, and an in-memory trace for planners and the generator.
 * Used by the generator and importers (producers) and by planners, sim and runtime. */
#ifndef MEMSIM_TRACE_H
#define MEMSIM_TRACE_H

#include "base/util.h"

#define TRACE_FORMAT_VERSION 1
#define TRACE_NAME_MAX 48

typedef enum trace_class {
    TC_PARAM = 0,   /* model parameter */
    TC_GRAD,        /* parameter gradient */
    TC_OPTSTATE,    /* optimizer state (Adam moments, fp32 master copy) */
    TC_ACT_SKEL,    /* skeletal activation: made in forward, needed in backward (MEMO §3) */
    TC_ACT_TRANS,   /* transient activation: made and freed within one layer's pass */
    TC_WORKSPACE,   /* library workspace (cuBLAS, attention scratch) */
    TC_OTHER,       /* unknown, e.g. imported allocator traces */
    TC_COUNT
} trace_class;

typedef enum trace_phase {
    TP_NONE = 0, TP_FWD, TP_BWD, TP_OPT, TP_COUNT
} trace_phase;

typedef enum trace_opkind {
    TK_GEMM = 0,  /* matrix multiply (QKV, projection, MLP, LM head) */
    TK_ATTN,      /* fused (flash) attention */
    TK_NORM,      /* layer norm / RMS norm */
    TK_ACT,       /* activation function (GeLU, SwiGLU) */
    TK_ELEM,      /* element-wise: residual add, dropout, bias */
    TK_EMBED,     /* embedding lookup */
    TK_LOSS,      /* softmax cross-entropy */
    TK_OPTIM,     /* optimizer step */
    TK_COMM,      /* collective: all-gather, reduce-scatter, all-reduce, ring exchange */
    TK_OTHER,
    TK_COUNT
} trace_opkind;

typedef enum trace_markkind {
    TM_ITER = 0,  /* value = iteration number; the records after it belong to it */
    TM_PHASE,     /* value = trace_phase */
    TM_LAYER,     /* value = layer index; begins that layer's records in the current phase */
    TM_COUNT
} trace_markkind;

typedef enum trace_rtype { TR_ALLOC = 0, TR_FREE, TR_OP, TR_MARK } trace_rtype;

/* An allocation declares a tensor. Ids identify live tensors: an id may be reused only after
 * it was freed. Generated traces never reuse ids. */
typedef struct trace_tensor {
    uint64_t id;
    uint64_t bytes;
    trace_class cls;
    int32_t layer;        /* -1: not in a transformer layer */
    int32_t stream;       /* allocating stream (imported traces); 0 = compute */
    uint8_t tok_scaled;   /* 1 if the size scales with the token count */
    int64_t producer;     /* id of the op that writes it, -1 if none/unknown */
    char name[TRACE_NAME_MAX];
} trace_tensor;

typedef struct trace_op {
    uint64_t id;
    trace_opkind kind;
    trace_phase phase;
    int32_t layer;          /* -1: not in a layer (embedding, head, optimizer) */
    uint8_t host_sync;      /* 1: the host waits for the GPU to finish this op before it goes
                               on (.item(), a copy to pageable memory; captured traces) */
    double flops;           /* floating-point operations of this op on this rank */
    uint64_t bytes_read;    /* device-memory bytes read */
    uint64_t bytes_written; /* device-memory bytes written */
    double dur_us;          /* measured or modelled duration; < 0 when unknown */
    double host_us;         /* host (CPU) time before the op's kernels can be issued, after
                               the previous op's (captured traces); 0: not given */
    uint32_t n_in, n_out;
    const uint64_t *in;     /* tensor ids read */
    const uint64_t *out;    /* tensor ids written */
    char name[TRACE_NAME_MAX];
} trace_op;

typedef struct trace_mark {
    trace_markkind kind;
    int64_t value;
} trace_mark;

typedef struct trace_rec {
    trace_rtype type;
    uint64_t line;        /* source line (0 if generated) */
    union {
        trace_tensor alloc;
        uint64_t free_id;
        trace_op op;
        trace_mark mark;
    } u;
} trace_rec;

const char *trace_class_name(trace_class c);
const char *trace_phase_name(trace_phase p);
const char *trace_opkind_name(trace_opkind k);
const char *trace_markkind_name(trace_markkind k);
int trace_class_parse(const char *s, trace_class *out);
int trace_phase_parse(const char *s, trace_phase *out);
int trace_opkind_parse(const char *s, trace_opkind *out);

/* ---- streaming reader: bounded memory whatever the file size ---- */
typedef struct trace_reader trace_reader;
ms_status trace_reader_open(const char *path, trace_reader **out, ms_error *err);
/* Meta lines ("meta KEY VALUE") come before records and are read at open time. */
size_t trace_reader_meta_count(const trace_reader *r);
const char *trace_reader_meta_key(const trace_reader *r, size_t i);
const char *trace_reader_meta_value(const trace_reader *r, size_t i);
/* Next record: MS_OK, MS_ERR_LIMIT at end, MS_ERR_PARSE with "file:line: msg".
 * The record (and its in/out arrays) stay valid until the next call. */
ms_status trace_reader_next(trace_reader *r, trace_rec *rec, ms_error *err);
void trace_reader_free(trace_reader *r);

/* ---- validator: every problem as FILE:LINE: message; streaming ---- */
typedef struct trace_check_report {
    uint64_t records, allocs, frees, ops, marks;
    uint64_t errors;          /* problems found (all printed) */
    uint64_t live_at_end;     /* tensors never freed (a note, not an error) */
    uint64_t peak_live_bytes; /* max over time of the sum of live tensor bytes */
} trace_check_report;
/* Prints each problem to `diag` (may be NULL) and fills rep. Returns MS_OK if the file could
 * be read to the end (even with problems: rep->errors counts them), an error otherwise. */
ms_status trace_check_file(const char *path, FILE *diag, uint64_t max_errors,
                           trace_check_report *rep, ms_error *err);

/* ---- in-memory trace (planners, generator, lowering) ---- */
typedef struct trace trace_t;
trace_t *trace_new(void);
/* Frees t, or drops one reference trace_ref took: the trace goes with the last holder. */
void trace_free(trace_t *t);
/* Another holder of t (a cache keeping a trace its caller frees as usual); returns t, which
 * must not change from here (records are only ever appended: a holder of its first n records
 * sees them unchanged). trace_free releases it. */
trace_t *trace_ref(const trace_t *t);
ms_status trace_set_meta(trace_t *t, const char *key, const char *value);
const char *trace_get_meta(const trace_t *t, const char *key); /* NULL if absent */
size_t trace_meta_count(const trace_t *t);
/* A meta value as an unsigned number; def when absent or not a number. */
uint64_t trace_meta_u64(const trace_t *t, const char *key, uint64_t def);
/* Model FLOPs per GPU per iteration by MEMO's formula (§5.1), batch * (6sP + 6nhs^2) /
 * (tp * cp), from the generator's meta lines (seq, params or, for a mixture-of-experts model,
 * active_params, layers, hidden, batch, tp, cp);
 * 0 when the trace lacks them (imported traces). The MFU numerator of sim and runtime. */
double trace_model_flops(const trace_t *t);
const char *trace_meta_key(const trace_t *t, size_t i);
const char *trace_meta_value(const trace_t *t, size_t i);
/* Appends a record; arrays and strings are copied. */
ms_status trace_append(trace_t *t, const trace_rec *rec);
/* Room for n records in all, so that appending up to them moves no record (a writer that
 * knows about how many it makes: the generator). MS_ERR_NOMEM, the trace unchanged. */
ms_status trace_reserve(trace_t *t, size_t n);
/* Appends a mark record. */
ms_status trace_append_mark(trace_t *t, trace_markkind kind, int64_t value);
/* The generators' record name: "L<layer>.<what>", or <what> alone for layer < 0
 * (TRACE_NAME_MAX bytes at buf, truncated). */
void trace_layer_name(char *buf, int layer, const char *what);
/* trace_layer_name's prefix, "L<layer>." for layer >= 0 (no terminating NUL): its length, 0
 * for layer < 0. */
enum { TRACE_LAYER_PREFIX_MAX = 13 };
size_t trace_layer_prefix(char buf[TRACE_LAYER_PREFIX_MAX], int layer);
/* The generators' alloc record of tensor id: the fields given, stream 0, named by
 * trace_layer_name; the caller appends it (after setting what else differs). */
void trace_alloc_rec(trace_rec *r, uint64_t id, uint64_t bytes, trace_class cls, int layer,
                     int64_t producer, int tok_scaled, const char *what);
size_t trace_count(const trace_t *t);
const trace_rec *trace_get(const trace_t *t, size_t i);
/* The records in order (*n of them), valid until the trace next changes: for the planners'
 * and lowerings' walks, which read every record by index, several times. */
const trace_rec *trace_records(const trace_t *t, size_t *n);
/* Whether some op record has a host time (host_us > 0) or a host synchronize: noted as the
 * records are appended (the simulator asks at every run; most traces have none). */
int trace_has_host_times(const trace_t *t);
/* Tensor metadata by id: the most recent alloc record with that id (NULL if none). */
const trace_tensor *trace_find_tensor(const trace_t *t, uint64_t id);
const trace_op *trace_find_op(const trace_t *t, uint64_t id);
/* Loads a whole file (checks it as it goes; fails on the first problem). A trace whose
 * in-memory form would take more than TRACE_LOAD_MAX_BYTES is refused (MS_ERR_INVALID, "FILE:
 * the trace holds more than N records ...") before memory grows past that bound. */
#define TRACE_LOAD_MAX_BYTES (64ULL << 20)
ms_status trace_load(const char *path, trace_t **out, ms_error *err);
/* The same with another bound (0: none). */
ms_status trace_load_max(const char *path, uint64_t max_bytes, trace_t **out, ms_error *err);
/* Bytes the in-memory trace holds: records, op id lists and the id indexes. */
size_t trace_mem_bytes(const trace_t *t);
/* Writes the trace; the output file appears only when complete. */
ms_status trace_write(const trace_t *t, const char *path, ms_error *err);
ms_status trace_write_fp(const trace_t *t, FILE *fp);

/* ---- the two forms (traces/FORMAT.md): text, and binary for large studies ---- */
typedef enum trace_form { TRACE_FORM_TEXT = 0, TRACE_FORM_BINARY } trace_form;
/* "text" or "binary"; 0 for anything else. */
int trace_form_parse(const char *s, trace_form *out);
const char *trace_form_name(trace_form f);
/* The form the reader found, told by the file's first bytes (never by its name). */
trace_form trace_reader_form(const trace_reader *r);

/* Streaming writer of either form: meta pairs first, then records one at a time, so that a
 * trace of any size is written in bounded memory. Whatever it accepts reads back as the same
 * records (MS_ERR_INVALID, "FILE: ..." for a record or meta pair the format cannot hold).
 * The file appears only on commit; ".gz" compresses either form. */
typedef struct trace_writer trace_writer;
ms_status trace_writer_open(const char *path, trace_form form, trace_writer **out,
                            ms_error *err);
ms_status trace_writer_meta(trace_writer *w, const char *key, const char *value, ms_error *err);
ms_status trace_writer_put(trace_writer *w, const trace_rec *rec, ms_error *err);
ms_status trace_writer_commit(trace_writer *w, ms_error *err); /* frees w */
void trace_writer_abort(trace_writer *w);                       /* frees w; NULL ok */
/* The in-memory trace in the given form (TRACE_FORM_TEXT: trace_write). */
ms_status trace_write_form(const trace_t *t, const char *path, trace_form form, ms_error *err);
/* Streams in (either form) into out in the given form, checking it as trace_stats_file does
 * (stops at the first problem); *records: the records copied. */
ms_status trace_convert(const char *in, const char *out, trace_form form, uint64_t *records,
                        ms_error *err);

/* Summary statistics (memsim trace stats). */
typedef struct trace_stats {
    uint64_t records, allocs, frees, ops, marks, iterations;
    uint64_t bytes_by_class[TC_COUNT]; /* bytes allocated per class */
    uint64_t peak_live_bytes;
    double total_flops;
    double total_dur_us;               /* sum of known op durations */
} trace_stats;
ms_status trace_stats_file(const char *path, trace_stats *st, ms_error *err);

#endif

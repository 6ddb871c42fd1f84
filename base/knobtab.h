/* knobtab.h — typed knob tables: one row per knob (key, type, offset into the reader's typed
 * struct, default, range, one-line doc, source), so that a reader parses its key=value pairs
 * once into its struct, and the knob lists, the unknown-key check with its closest-key hint
 * and the docs' knob tables are generated from the rows rather than written by hand.
 * Used by the generator (traces/gen.c), the plan and policy knob readers in planners/
 * (policies, lowerings, the memory plan) and `memsim list`. */
#ifndef MEMSIM_KNOBTAB_H
#define MEMSIM_KNOBTAB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/util.h"

typedef enum knobtab_type {
    KNOBTAB_INT = 0, /* int field: a whole number in [lo, hi] */
    KNOBTAB_DBL,     /* double field: a finite number in [lo, hi] */
    KNOBTAB_BYTES,   /* uint64_t field: a byte size (512, 4K, 1.5GiB) in [lo, hi] */
    KNOBTAB_FLAG,    /* int field: 0 or 1 */
    KNOBTAB_BOOL,    /* int field: 0 or 1, also given as false/true, no/yes */
    KNOBTAB_ENUM,    /* int field: the value of one of names (vals[i], or i when vals is NULL) */
    KNOBTAB_STR,     /* const char * field: the text as given (it lives as long as its source) */
    KNOBTAB_FAMILY   /* a key ending in '.': the family KEY<suffix>, read by its owner itself */
} knobtab_type;

typedef struct knobtab_row {
    const char *key;
    knobtab_type type;
    size_t off;                /* offsetof the field in the reader's struct */
    const char *def;           /* default as value text; NULL: none (derived from the input;
                                  the doc says how) */
    double lo, hi;             /* range of INT, DBL and BYTES */
    const char *const *names;  /* ENUM: NULL-terminated value names */
    const int *vals;           /* ENUM: the field value of each name; NULL: its index */
    const char *expect;        /* what the error message says is expected; NULL: derived */
    const char *doc;           /* one line */
    const char *source;        /* the paper, system or measurement the default follows, or "" */
    int msg;                   /* 0: the table's message style; else 1 + the row's own */
    int rec;                   /* how knobtab_format_row's writers record it: a knobtab_rec */
} knobtab_row;

/* Whether a writer that records a struct back as key=value pairs (a plan's knob lines)
 * writes a row: always (the default), only when its field is not zero, or never (a knob
 * that steers the reader, not what the pairs describe). */
typedef enum knobtab_rec {
    KNOBTAB_REC_ALWAYS = 0, KNOBTAB_REC_NONZERO, KNOBTAB_REC_NEVER
} knobtab_rec;

/* The form of a table's (or a row's) error message for a malformed value:
 * PLAN "plan knob KEY=VALUE: expected WHAT"; KNOB "knob KEY=VALUE: expected WHAT";
 * OPT "knob KEY: 'VALUE' is not WHAT"; GEN "generator knob KEY: 'VALUE' is not WHAT". */
typedef enum knobtab_style {
    KNOBTAB_MSG_PLAN = 0, KNOBTAB_MSG_KNOB, KNOBTAB_MSG_OPT, KNOBTAB_MSG_GEN,
    KNOBTAB_MSG_IS       /* "knob KEY=VALUE is not WHAT" */
} knobtab_style;

#define KNOBTAB_NO_GIVEN ((size_t)-1)
#define KNOBTAB_MAX_ROWS 64 /* rows of one table: one bit each in its given mask */

typedef struct knobtab {
    const char *name;          /* its reader, e.g. "chunk lowering" */
    const knobtab_row *rows;
    size_t n;
    knobtab_style style;
    size_t given_off;          /* offsetof a uint64_t in the struct with bit i set when row i
                                  was given; KNOBTAB_NO_GIVEN: the struct keeps none */
} knobtab;

/* Row makers: T the reader's struct, F its field. */
#define KNOBTAB_ROW(key, type, T, F, def, lo, hi, names, doc, src) \
    { key, type, offsetof(T, F), def, lo, hi, names, NULL, NULL, doc, src, 0, 0 }
#define KNOB_INT(key, T, F, def, lo, hi, doc, src) \
    KNOBTAB_ROW(key, KNOBTAB_INT, T, F, def, lo, hi, NULL, doc, src)
#define KNOB_DBL(key, T, F, def, lo, hi, doc, src) \
    KNOBTAB_ROW(key, KNOBTAB_DBL, T, F, def, lo, hi, NULL, doc, src)
#define KNOB_BYTES(key, T, F, def, lo, hi, doc, src) \
    KNOBTAB_ROW(key, KNOBTAB_BYTES, T, F, def, lo, hi, NULL, doc, src)
#define KNOB_FLAG(key, T, F, def, doc, src) \
    KNOBTAB_ROW(key, KNOBTAB_FLAG, T, F, def, 0, 1, NULL, doc, src)
#define KNOB_BOOL(key, T, F, def, doc, src) \
    KNOBTAB_ROW(key, KNOBTAB_BOOL, T, F, def, 0, 1, NULL, doc, src)
#define KNOB_ENUM(key, T, F, def, names, doc, src) \
    KNOBTAB_ROW(key, KNOBTAB_ENUM, T, F, def, 0, 0, names, doc, src)
#define KNOB_STR(key, T, F, doc, src) \
    KNOBTAB_ROW(key, KNOBTAB_STR, T, F, NULL, 0, 0, NULL, doc, src)
#define KNOB_FAMILY(key, doc, src) \
    { key, KNOBTAB_FAMILY, 0, NULL, 0, 0, NULL, NULL, NULL, doc, src, 0, 0 }
#define KNOBTAB(name, rows, style, T, given) \
    { name, rows, sizeof rows / sizeof *rows, style, offsetof(T, given) }
#define KNOBTAB_NOGIVEN(name, rows, style) \
    { name, rows, sizeof rows / sizeof *rows, style, KNOBTAB_NO_GIVEN }

/* One key=value pair of the input (a plan's knobs, --knob options). */
typedef struct knobtab_pair {
    const char *key;
    const char *value;
} knobtab_pair;

/* Every row's default into out (rows without one keep their field); the given mask cleared. */
void knobtab_defaults(const knobtab *t, void *out);
/* Value text v of row r into out's field, its given bit set; MS_ERR_INVALID in the table's
 * message style when v is malformed or out of range. */
ms_status knobtab_set(const knobtab *t, const knobtab_row *r, const char *v, void *out,
                      ms_error *err);
/* The defaults, then, row by row in table order, the last of the n pairs that names the row
 * (pairs of keys no row names are left to other tables); the first bad value fails. */
ms_status knobtab_parse(const knobtab *t, const knobtab_pair *kv, size_t n, void *out,
                        ms_error *err);
/* The row of key: its own or the family it belongs to; NULL if none. */
const knobtab_row *knobtab_find(const knobtab *t, const char *key);
/* 1 when key is a key of row r (r's own, or one of its family's). */
int knobtab_row_covers(const knobtab_row *r, const char *key);
/* 1 when the row of the field at `field` (inside struct st) was given; 0 when not, or when
 * no row has that field, or the table keeps no given mask. */
int knobtab_given(const knobtab *t, const void *st, const void *field);

/* Marks the row of the field at `field` (inside struct st) as given, for a reader that set
 * the field itself (a policy's decision it records through the table); no-op when no row
 * has that field or the table keeps no given mask. */
void knobtab_mark_given(const knobtab *t, void *st, const void *field);

/* The row of the field at `field` (inside struct st); NULL when no row has that field. */
const knobtab_row *knobtab_row_of(const knobtab *t, const void *st, const void *field);

/* The key among the n tables' rows closest to key, NULL when none is within a third of key's
 * length (plus one); ties: the first met. */
const char *knobtab_closest(const knobtab *const *tabs, size_t n, const char *key);
/* The n tables' keys sorted, repeats dropped, blank-separated, a family shown as KEYN, into
 * buf (always NUL-terminated; truncated to size). Returns the length the whole list needs. */
size_t knobtab_key_list(const knobtab *const *tabs, size_t n, char *buf, size_t size);
/* What row r accepts, e.g. "int in [0, 64]" or "auto|fused|megatron", into buf. */
const char *knobtab_value_form(const knobtab_row *r, char *buf, size_t size);

/* Row r's field in st as the value text knobtab_set reads back (INT, FLAG, BOOL as %d; DBL
 * as %g; BYTES as a whole number; ENUM as its name; STR as given) into buf. Returns 0 when
 * the row is not written under its knobtab_rec (never, or zero under NONZERO), a FAMILY
 * row, an unset STR, or an ENUM value with no name; else 1. */
int knobtab_format_row(const knobtab_row *r, const void *st, char *buf, size_t size);

/* One line naming rows' keys of table t, "key=FORM" where FORM is short (flags, names), and
 * "(default D)" where the row has a default, separated by "; " (the one-line knob summary of
 * `memsim list policies`), into buf (always NUL-terminated; truncated to size). */
void knobtab_summary(const knobtab *t, char *buf, size_t size);

/* The tables as one Markdown table (key, value, default, meaning, source), rows in table
 * order, a key repeated by a later table printed once. */
void knobtab_write_markdown(FILE *fp, const knobtab *const *tabs, size_t n);

#endif

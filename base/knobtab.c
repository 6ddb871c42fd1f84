/* knobtab.c — the typed knob tables of knobtab.h: defaults, parsing a value into its field,
 * the given mask, the closest key, the key list and the Markdown table. Used by the
 * generator, the planners' knob readers and `memsim list`. */
#include "base/knobtab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *field_at(void *st, const knobtab_row *r) { return (char *)st + r->off; }

/* Integral bounds print as integers (1048576, not 1.04858e+06). */
static const char *fmt_num(double x, char *buf, size_t size)
{
    if (x >= HUGE_VAL) snprintf(buf, size, "inf");
    else if (x == floor(x) && fabs(x) < 1e15) snprintf(buf, size, "%.0f", x);
    else snprintf(buf, size, "%g", x);
    return buf;
}

/* names joined as "a, b or c" (last "or"), or "a, b, c" (plain). */
static void join_names(const char *const *names, int with_or, char *buf, size_t size)
{
    size_t n = 0, len = 0;
    while (names[n]) n++;
    buf[0] = 0;
    for (size_t i = 0; i < n && len < size; i++) {
        const char *sep = i == 0 ? "" : (with_or && i + 1 == n) ? " or " : ", ";
        int w = snprintf(buf + len, size - len, "%s%s", sep, names[i]);
        if (w > 0) len += (size_t)w;
    }
}

/* What the error message says is expected, in the table's style. */
static const char *expect_text(const knobtab *t, const knobtab_row *r, char *buf, size_t size)
{
    char lo[32], hi[32];
    if (r->expect) return r->expect;
    fmt_num(r->lo, lo, sizeof lo);
    fmt_num(r->hi, hi, sizeof hi);
    switch (r->type) {
    case KNOBTAB_INT:
        if (t->style <= KNOBTAB_MSG_KNOB) snprintf(buf, size, "an integer >= %s", lo);
        else if (t->style == KNOBTAB_MSG_GEN) snprintf(buf, size, "a whole number from %s to %s", lo, hi);
        else snprintf(buf, size, "a whole number in [%s, %s]", lo, hi);
        return buf;
    case KNOBTAB_DBL:
        if (t->style == KNOBTAB_MSG_OPT) return "a number";
        snprintf(buf, size, "a number >= %s", lo);
        return buf;
    case KNOBTAB_BYTES: return "a byte size";
    case KNOBTAB_FLAG:
    case KNOBTAB_BOOL: return "0 or 1";
    case KNOBTAB_ENUM:
        if (t->style == KNOBTAB_MSG_GEN) {
            memcpy(buf, "one of ", 8);
            join_names(r->names, 0, buf + 7, size - 7);
        } else {
            join_names(r->names, 1, buf, size);
        }
        return buf;
    default: return "valid";
    }
}

static ms_status bad_value(const knobtab *t, const knobtab_row *r, const char *v, ms_error *err)
{
    char buf[256];
    knobtab_style style = r->msg ? (knobtab_style)(r->msg - 1) : t->style;
    knobtab as = { t->name, t->rows, t->n, style, t->given_off };
    const char *what = expect_text(&as, r, buf, sizeof buf);
    if (style == KNOBTAB_MSG_PLAN || style == KNOBTAB_MSG_KNOB)
        return ms_fail(err, MS_ERR_INVALID, "%sknob %s=%s: expected %s",
                       style == KNOBTAB_MSG_PLAN ? "plan " : "", r->key, v, what);
    if (style == KNOBTAB_MSG_IS)
        return ms_fail(err, MS_ERR_INVALID, "knob %s=%s is not %s", r->key, v, what);
    return ms_fail(err, MS_ERR_INVALID, "%sknob %s: '%s' is not %s",
                   style == KNOBTAB_MSG_GEN ? "generator " : "", r->key, v, what);
}

static int in_range(const knobtab_row *r, double x) { return x >= r->lo && x <= r->hi; }

/* The enum value of name v, or -1 through *ok = 0. */
static int enum_value(const knobtab_row *r, const char *v, int *ok)
{
    for (int i = 0; r->names[i]; i++)
        if (!strcmp(r->names[i], v)) {
            *ok = 1;
            return r->vals ? r->vals[i] : i;
        }
    *ok = 0;
    return -1;
}

static int parse_flag(const knobtab_row *r, const char *v, int *out)
{
    if (!strcmp(v, "1") || (r->type == KNOBTAB_BOOL && (!strcmp(v, "true") || !strcmp(v, "yes"))))
        *out = 1;
    else if (!strcmp(v, "0") || (r->type == KNOBTAB_BOOL && (!strcmp(v, "false") || !strcmp(v, "no"))))
        *out = 0;
    else
        return 0;
    return 1;
}

/* Parses v into the field; 0 when malformed or out of range. */
static int parse_into(const knobtab_row *r, const char *v, void *f)
{
    int64_t i;
    double d;
    uint64_t b;
    int ok, x;
    switch (r->type) {
    case KNOBTAB_INT:
        if (!ms_parse_i64(v, &i) || !in_range(r, (double)i)) return 0;
        *(int *)f = (int)i;
        return 1;
    case KNOBTAB_DBL:
        if (!ms_parse_double(v, &d) || !in_range(r, d)) return 0;
        *(double *)f = d;
        return 1;
    case KNOBTAB_BYTES:
        if (!ms_parse_bytes(v, &b) || !in_range(r, (double)b)) return 0;
        *(uint64_t *)f = b;
        return 1;
    case KNOBTAB_FLAG:
    case KNOBTAB_BOOL:
        if (!parse_flag(r, v, &x)) return 0;
        *(int *)f = x;
        return 1;
    case KNOBTAB_ENUM:
        x = enum_value(r, v, &ok);
        if (!ok) return 0;
        *(int *)f = x;
        return 1;
    case KNOBTAB_STR:
        *(const char **)f = v;
        return 1;
    default: return 1;
    }
}

static uint64_t *given_mask(const knobtab *t, void *st)
{
    return t->given_off == KNOBTAB_NO_GIVEN ? NULL : (uint64_t *)((char *)st + t->given_off);
}

void knobtab_defaults(const knobtab *t, void *out)
{
    for (size_t i = 0; i < t->n; i++) {
        const knobtab_row *r = &t->rows[i];
        if (r->def && r->type != KNOBTAB_FAMILY) parse_into(r, r->def, field_at(out, r));
    }
    uint64_t *g = given_mask(t, out);
    if (g) *g = 0;
}

ms_status knobtab_set(const knobtab *t, const knobtab_row *r, const char *v, void *out,
                      ms_error *err)
{
    if (r->type == KNOBTAB_FAMILY) return MS_OK;
    if (!v || !parse_into(r, v, field_at(out, r))) return bad_value(t, r, v ? v : "", err);
    uint64_t *g = given_mask(t, out);
    if (g && r >= t->rows && r < t->rows + t->n && r - t->rows < KNOBTAB_MAX_ROWS)
        *g |= UINT64_C(1) << (r - t->rows);
    return MS_OK;
}

ms_status knobtab_parse(const knobtab *t, const knobtab_pair *kv, size_t n, void *out,
                        ms_error *err)
{
    knobtab_defaults(t, out);
    for (size_t i = 0; i < t->n; i++) {
        const knobtab_row *r = &t->rows[i];
        if (r->type == KNOBTAB_FAMILY) continue;
        const char *v = NULL;
        for (size_t j = 0; j < n; j++)
            if (kv[j].key && !strcmp(kv[j].key, r->key)) v = kv[j].value;
        if (!v) continue;
        ms_status st = knobtab_set(t, r, v, out, err);
        if (st != MS_OK) return st;
    }
    return MS_OK;
}

int knobtab_row_covers(const knobtab_row *r, const char *key)
{
    if (r->type == KNOBTAB_FAMILY) {
        size_t n = strlen(r->key);
        return strncmp(r->key, key, n) == 0 && key[n];
    }
    return strcmp(r->key, key) == 0;
}

const knobtab_row *knobtab_find(const knobtab *t, const char *key)
{
    for (size_t i = 0; key && t && i < t->n; i++)
        if (knobtab_row_covers(&t->rows[i], key)) return &t->rows[i];
    return NULL;
}

const knobtab_row *knobtab_row_of(const knobtab *t, const void *st, const void *field)
{
    size_t off = (size_t)((const char *)field - (const char *)st);
    for (size_t i = 0; i < t->n; i++)
        if (t->rows[i].type != KNOBTAB_FAMILY && t->rows[i].off == off) return &t->rows[i];
    return NULL;
}

void knobtab_mark_given(const knobtab *t, void *st, const void *field)
{
    const knobtab_row *r = knobtab_row_of(t, st, field);
    uint64_t *g = given_mask(t, st);
    if (r && g && r - t->rows < KNOBTAB_MAX_ROWS) *g |= UINT64_C(1) << (r - t->rows);
}

int knobtab_given(const knobtab *t, const void *st, const void *field)
{
    const knobtab_row *r = knobtab_row_of(t, st, field);
    if (t->given_off == KNOBTAB_NO_GIVEN || !r || r - t->rows >= KNOBTAB_MAX_ROWS) return 0;
    const uint64_t *g = (const uint64_t *)((const char *)st + t->given_off);
    return (int)((*g >> (r - t->rows)) & 1);
}

const char *knobtab_closest(const knobtab *const *tabs, size_t n, const char *key)
{
    const char *best = NULL;
    size_t bd = strlen(key) / 3 + 1;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; tabs[i] && j < tabs[i]->n; j++) {
            size_t d = ms_edit_distance(tabs[i]->rows[j].key, key);
            if (d < bd) {
                bd = d;
                best = tabs[i]->rows[j].key;
            }
        }
    return best;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The n tables' keys, sorted, repeats dropped, into v (at most cap); their count. */
static size_t sorted_keys(const knobtab *const *tabs, size_t n, const char **v, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; tabs[i] && j < tabs[i]->n && k < cap; j++) v[k++] = tabs[i]->rows[j].key;
    qsort(v, k, sizeof *v, cmp_str);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (!m || strcmp(v[m - 1], v[i])) v[m++] = v[i];
    return m;
}

size_t knobtab_key_list(const knobtab *const *tabs, size_t n, char *buf, size_t size)
{
    const char *v[512];
    size_t m = sorted_keys(tabs, n, v, 512), len = 0;
    if (size) buf[0] = 0;
    for (size_t i = 0; i < m; i++) {
        size_t kl = strlen(v[i]);
        int w = snprintf(buf && len < size ? buf + len : NULL, len < size ? size - len : 0,
                         "%s%s%s", i ? " " : "", v[i], kl && v[i][kl - 1] == '.' ? "N" : "");
        if (w > 0) len += (size_t)w;
    }
    return len;
}

const char *knobtab_value_form(const knobtab_row *r, char *buf, size_t size)
{
    char lo[32], hi[32];
    fmt_num(r->lo, lo, sizeof lo);
    fmt_num(r->hi, hi, sizeof hi);
    buf[0] = 0;
    switch (r->type) {
    case KNOBTAB_INT: snprintf(buf, size, "integer in [%s, %s]", lo, hi); break;
    case KNOBTAB_DBL: snprintf(buf, size, "number in [%s, %s]", lo, hi); break;
    case KNOBTAB_BYTES: snprintf(buf, size, "bytes in [%s, %s]", lo, hi); break;
    case KNOBTAB_FLAG: snprintf(buf, size, "0|1"); break;
    case KNOBTAB_BOOL: snprintf(buf, size, "0|1 (false|true, no|yes)"); break;
    case KNOBTAB_ENUM: {
        size_t len = 0;
        for (int i = 0; r->names[i] && len < size; i++) {
            int w = snprintf(buf + len, size - len, "%s%s", i ? "|" : "", r->names[i]);
            if (w > 0) len += (size_t)w;
        }
        break;
    }
    case KNOBTAB_STR: snprintf(buf, size, "text"); break;
    case KNOBTAB_FAMILY: snprintf(buf, size, "per key"); break;
    }
    return buf;
}

int knobtab_format_row(const knobtab_row *r, const void *st, char *buf, size_t size)
{
    const void *f = (const char *)st + r->off;
    buf[0] = 0;
    if (r->rec == KNOBTAB_REC_NEVER || r->type == KNOBTAB_FAMILY) return 0;
    switch (r->type) {
    case KNOBTAB_INT:
    case KNOBTAB_FLAG:
    case KNOBTAB_BOOL:
        if (r->rec == KNOBTAB_REC_NONZERO && !*(const int *)f) return 0;
        snprintf(buf, size, "%d", *(const int *)f);
        return 1;
    case KNOBTAB_DBL:
        if (r->rec == KNOBTAB_REC_NONZERO && *(const double *)f == 0) return 0;
        snprintf(buf, size, "%g", *(const double *)f);
        return 1;
    case KNOBTAB_BYTES:
        if (r->rec == KNOBTAB_REC_NONZERO && !*(const uint64_t *)f) return 0;
        snprintf(buf, size, "%llu", (unsigned long long)*(const uint64_t *)f);
        return 1;
    case KNOBTAB_ENUM: {
        int x = *(const int *)f;
        if (r->rec == KNOBTAB_REC_NONZERO && !x) return 0;
        for (int i = 0; r->names[i]; i++)
            if ((r->vals ? r->vals[i] : i) == x) {
                snprintf(buf, size, "%s", r->names[i]);
                return 1;
            }
        return 0;
    }
    case KNOBTAB_STR:
        if (!*(const char *const *)f) return 0;
        snprintf(buf, size, "%s", *(const char *const *)f);
        return 1;
    default: return 0;
    }
}

void knobtab_summary(const knobtab *t, char *buf, size_t size)
{
    size_t len = 0;
    if (!size) return;
    buf[0] = 0;
    for (size_t i = 0; t && i < t->n && len < size; i++) {
        const knobtab_row *r = &t->rows[i];
        char form[256];
        int short_form = r->type == KNOBTAB_FLAG || r->type == KNOBTAB_ENUM;
        int w = snprintf(buf + len, size - len, "%s%s%s%s%s%s%s", i ? "; " : "", r->key,
                         r->type == KNOBTAB_FAMILY ? "N" : "", short_form ? "=" : "",
                         short_form ? knobtab_value_form(r, form, sizeof form) : "",
                         r->def ? " (default " : "", r->def ? r->def : "");
        if (w > 0) len += (size_t)w;
        if (r->def && len < size) {
            w = snprintf(buf + len, size - len, ")");
            if (w > 0) len += (size_t)w;
        }
    }
}

/* A cell without '|' (which would end it) or line breaks. */
static void put_cell(FILE *fp, const char *s)
{
    for (; s && *s; s++) fputs(*s == '|' ? "\\|" : *s == '\n' ? " " : (char[2]){ *s, 0 }, fp);
}

/* 1 when an earlier table (or an earlier row of this one) has row (i, j)'s key. */
static int seen_before(const knobtab *const *tabs, size_t i, size_t j)
{
    const char *key = tabs[i]->rows[j].key;
    for (size_t a = 0; a <= i; a++)
        for (size_t b = 0; tabs[a] && b < (a == i ? j : tabs[a]->n); b++)
            if (!strcmp(tabs[a]->rows[b].key, key)) return 1;
    return 0;
}

void knobtab_write_markdown(FILE *fp, const knobtab *const *tabs, size_t n)
{
    fprintf(fp, "| knob | read by | value | default | meaning | source |\n");
    fprintf(fp, "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; tabs[i] && j < tabs[i]->n; j++) {
            const knobtab_row *r = &tabs[i]->rows[j];
            char form[256];
            if (seen_before(tabs, i, j)) continue;
            fprintf(fp, "| `%s%s` | ", r->key, r->type == KNOBTAB_FAMILY ? "N" : "");
            put_cell(fp, tabs[i]->name);
            fputs(" | ", fp);
            put_cell(fp, knobtab_value_form(r, form, sizeof form));
            fputs(" | ", fp);
            put_cell(fp, r->def ? r->def : "(derived)");
            fputs(" | ", fp);
            put_cell(fp, r->doc);
            fputs(" | ", fp);
            put_cell(fp, r->source && *r->source ? r->source : "—");
            fputs(" |\n", fp);
        }
}

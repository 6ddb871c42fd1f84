/* plan.c — a policy's decisions as data and as an editable file (traces/FORMAT.md, "Plan"):
 * building a plan, sorting and looking it up, the reader with FILE:LINE errors and a
 * deterministic writer whose output reads back to the same bytes. Implements plan.h; used by
 * the policy planners (writers) and lowering (reader), hence by sim and runtime. */
#define _POSIX_C_SOURCE 200809L
#include "planners/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"

static const char *const decision_names[PD_COUNT] = {"keep", "swap", "recompute", "dha"};
static const char *const pmode_names[PM_COUNT] = {"gfgb", "dha", "dfgb"};

const char *plan_decision_name(plan_decision d)
{
    return (unsigned)d < PD_COUNT ? decision_names[d] : "?";
}

const char *plan_pmode_name(plan_pmode m)
{
    return (unsigned)m < PM_COUNT ? pmode_names[m] : "?";
}

int plan_decision_parse(const char *s, plan_decision *out)
{
    for (int i = 0; i < PD_COUNT; i++)
        if (strcmp(s, decision_names[i]) == 0) { *out = (plan_decision)i; return 1; }
    return 0;
}

int plan_pmode_parse(const char *s, plan_pmode *out)
{
    for (int i = 0; i < PM_COUNT; i++)
        if (strcmp(s, pmode_names[i]) == 0) { *out = (plan_pmode)i; return 1; }
    return 0;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* A token that fits a char[max] field; "" is not a token. */
static int valid_token(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max) return 0;
    for (size_t i = 0; i < n; i++)
        if (is_blank(s[i]) || s[i] == '\n') return 0;
    return 1;
}

/* Policy and allocator names: a token, or "" (written as "-"). */
static int valid_name(const char *s, size_t max)
{
    return s[0] == '\0' || (valid_token(s, max) && strcmp(s, "-") != 0);
}

/* ------------------------------------------------------------------------------------ */
/* building */

/* ------------------------------------------------------------------------------------ */
/* predictions */

#define PRED_DBL(key, F, doc) KNOB_DBL(key, plan_predictions, F, NULL, -HUGE_VAL, HUGE_VAL, doc, "")
static const knobtab_row pred_rows[] = {
    KNOB_FLAG("feasible", plan_predictions, feasible, "1",
              "0: no configuration fit the planner's budget; the closest is planned", ""),
    KNOB_BYTES("pred_peak_bytes", plan_predictions, peak_bytes, NULL, 0, HUGE_VAL,
               "predicted device peak", ""),
    KNOB_BYTES("pred_host_bytes", plan_predictions, host_bytes, NULL, 0, HUGE_VAL,
               "predicted host memory", ""),
    PRED_DBL("pred_iter_s", iter_s, "predicted iteration time, seconds"),
    PRED_DBL("pred_fwd_s", fwd_s, "predicted forward time, seconds"),
    PRED_DBL("pred_bwd_s", bwd_s, "predicted backward time, seconds"),
    PRED_DBL("pred_gpu_optim_s", gpu_optim_s, "predicted optimizer step on the GPU, seconds"),
    PRED_DBL("pred_cpu_optim_s", cpu_optim_s, "predicted optimizer step on the host, seconds"),
    PRED_DBL("fastest_pred_iter_s", fastest_iter_s,
             "the strictly fastest configuration's predicted iteration time, seconds"),
    PRED_DBL("est_alg1_fp_us", alg1_fp_us, "Algorithm 1's forward time, microseconds"),
    PRED_DBL("est_fp_us", fp_us, "predicted forward time, microseconds"),
    PRED_DBL("est_iter_compute_us", iter_compute_us,
             "predicted compute of the iteration, microseconds"),
    PRED_DBL("est_go_cost_us", go_cost_us,
             "time the host-written gradients add, microseconds"),
    KNOB_DBL("grad_gpu_frac", plan_predictions, grad_gpu_frac, "1", 0, 1,
             "share of the gradient bytes kept on the GPU", ""),
};
const knobtab plan_predictions_table = KNOBTAB("planner predictions", pred_rows,
                                               KNOBTAB_MSG_PLAN, plan_predictions, given);

void plan_predict(plan_t *p, const void *field)
{
    const knobtab_row *r = knobtab_row_of(&plan_predictions_table, &p->pred, field);
    if (r) p->pred.given |= UINT64_C(1) << (r - pred_rows);
}

int plan_predicted(const plan_t *p, const void *field)
{
    return knobtab_given(&plan_predictions_table, &p->pred, field);
}

plan_t *plan_new(const char *policy, const char *allocator)
{
    if (!policy) policy = "";
    if (!allocator) allocator = "";
    plan_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    /* An unusable name fails here rather than being cut short silently. */
    if (!valid_name(policy, sizeof p->policy) || !valid_name(allocator, sizeof p->allocator)) {
        free(p);
        return NULL;
    }
    strcpy(p->policy, policy);
    strcpy(p->lowering, "tensor");
    strcpy(p->allocator, allocator);
    alloc_config_default(&p->alloc_cfg);
    p->default_decision = PD_KEEP;
    knobtab_defaults(&plan_predictions_table, &p->pred);
    return p;
}

void plan_free(plan_t *p)
{
    if (!p) return;
    free(p->tensors);
    free(p->layers);
    free(p->offsets);
    free(p->knobs);
    free(p);
}

/* Appends; plan_sort keeps the last entry of each id. */
ms_status plan_set_tensor(plan_t *p, uint64_t id, plan_decision d, double alpha)
{
    if ((unsigned)d >= PD_COUNT || !(alpha >= 0 && alpha <= 1)) return MS_ERR_INVALID;
    if (ms_grow((void **)&p->tensors, &p->cap_tensors, p->n_tensors + 1, sizeof *p->tensors))
        return MS_ERR_NOMEM;
    p->tensors[p->n_tensors++] = (plan_tensor){id, d, alpha};
    return MS_OK;
}

ms_status plan_set_layer(plan_t *p, int32_t layer, plan_pmode m, int grad_on_host)
{
    if ((unsigned)m >= PM_COUNT || layer < -1) return MS_ERR_INVALID;
    for (size_t i = 0; i < p->n_layers; i++)
        if (p->layers[i].layer == layer) {
            p->layers[i].pmode = m;
            p->layers[i].grad_on_host = grad_on_host != 0;
            return MS_OK;
        }
    if (ms_grow((void **)&p->layers, &p->cap_layers, p->n_layers + 1, sizeof *p->layers))
        return MS_ERR_NOMEM;
    p->layers[p->n_layers++] = (plan_layer){layer, m, grad_on_host != 0};
    return MS_OK;
}

ms_status plan_set_offset(plan_t *p, uint64_t id, uint64_t offset_bytes)
{
    if (ms_grow((void **)&p->offsets, &p->cap_offsets, p->n_offsets + 1, sizeof *p->offsets))
        return MS_ERR_NOMEM;
    p->offsets[p->n_offsets++] = (plan_offset){id, offset_bytes, 0};
    return MS_OK;
}

/* Knob values: non-empty, no newline, no blanks at either end (they would not read back). */
static int valid_knob_value(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n >= sizeof(((plan_knob *)0)->value) || strchr(v, '\n')) return 0;
    return !is_blank(v[0]) && !is_blank(v[n - 1]);
}

ms_status plan_set_knob(plan_t *p, const char *key, const char *value)
{
    if (!valid_token(key, sizeof(((plan_knob *)0)->key)) || !valid_knob_value(value))
        return MS_ERR_INVALID;
    for (size_t i = 0; i < p->n_knobs; i++)
        if (strcmp(p->knobs[i].key, key) == 0) {
            strcpy(p->knobs[i].value, value);
            return MS_OK;
        }
    if (ms_grow((void **)&p->knobs, &p->cap_knobs, p->n_knobs + 1, sizeof *p->knobs))
        return MS_ERR_NOMEM;
    plan_knob *k = &p->knobs[p->n_knobs++];
    strcpy(k->key, key);
    strcpy(k->value, value);
    return MS_OK;
}

ms_status plan_set_lowering(plan_t *p, const char *name)
{
    if (!name || !name[0] || !valid_name(name, sizeof p->lowering)) return MS_ERR_INVALID;
    strcpy(p->lowering, name);
    return MS_OK;
}

const char *plan_get_knob(const plan_t *p, const char *key)
{
    for (size_t i = 0; i < p->n_knobs; i++)
        if (strcmp(p->knobs[i].key, key) == 0) return p->knobs[i].value;
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* sorting and lookup */

/* Sorting key with the original position, so the last of equal ids can be kept. */
typedef struct idpos { uint64_t id; size_t pos; } idpos;

static int cmp_idpos(const void *a, const void *b)
{
    const idpos *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

_Static_assert(offsetof(plan_tensor, id) == 0 && offsetof(plan_offset, id) == 0,
               "sorted_last reads the id at the start of each element");

/* Fills perm with the positions of the last entry for each id, in id order; returns the count
 * or (size_t)-1 when out of memory. ids(i) reads the id of entry i. */
static size_t sorted_last(const void *arr, size_t n, size_t elem, size_t **perm)
{
    *perm = NULL;
    if (n == 0) return 0;
    idpos *v = malloc(n * sizeof *v);
    size_t *out = malloc(n * sizeof *out);
    if (!v || !out) { free(v); free(out); return (size_t)-1; }
    for (size_t i = 0; i < n; i++) {
        memcpy(&v[i].id, (const char *)arr + i * elem, sizeof(uint64_t)); /* id comes first */
        v[i].pos = i;
    }
    qsort(v, n, sizeof *v, cmp_idpos);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (i + 1 == n || v[i + 1].id != v[i].id) out[k++] = v[i].pos;
    free(v);
    *perm = out;
    return k;
}

static int cmp_layer(const void *a, const void *b)
{
    const plan_layer *x = a, *y = b;
    return (x->layer > y->layer) - (x->layer < y->layer);
}

static int cmp_knob(const void *a, const void *b)
{
    return strcmp(((const plan_knob *)a)->key, ((const plan_knob *)b)->key);
}

static int cmp_leading_id(const void *a, const void *b)
{
    uint64_t x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    return (x > y) - (x < y);
}

/* Sorts an id-keyed array in place, keeping the last entry of each id. Out of memory, it
 * falls back to a plain sort (duplicates stay, lookups still work). */
static void sort_dedup(void *arr, size_t *n, size_t elem)
{
    if (*n == 0) return;
    /* a policy that lists the trace's tensors in order leaves nothing to do */
    uint64_t prev, id;
    memcpy(&prev, arr, sizeof prev);
    size_t j = 1;
    for (; j < *n; j++) {
        memcpy(&id, (const char *)arr + j * elem, sizeof id);
        if (id <= prev) break;
        prev = id;
    }
    if (j == *n) return;
    size_t *perm;
    size_t k = sorted_last(arr, *n, elem, &perm);
    char *tmp = k == (size_t)-1 ? NULL : malloc(k * elem);
    if (!tmp) {
        if (k != (size_t)-1) free(perm);
        qsort(arr, *n, elem, cmp_leading_id);
        return;
    }
    for (size_t i = 0; i < k; i++) memcpy(tmp + i * elem, (char *)arr + perm[i] * elem, elem);
    memcpy(arr, tmp, k * elem);
    *n = k;
    free(tmp);
    free(perm);
}

void plan_sort(plan_t *p)
{
    sort_dedup(p->tensors, &p->n_tensors, sizeof *p->tensors);
    sort_dedup(p->offsets, &p->n_offsets, sizeof *p->offsets);
    if (p->n_layers) qsort(p->layers, p->n_layers, sizeof *p->layers, cmp_layer);
    if (p->n_knobs) qsort(p->knobs, p->n_knobs, sizeof *p->knobs, cmp_knob);
}

/* Binary search over an id-sorted array whose elements start with a uint64_t id. */
static const void *find_id(const void *arr, size_t n, size_t elem, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t v;
        memcpy(&v, (const char *)arr + mid * elem, sizeof v);
        if (v == id) return (const char *)arr + mid * elem;
        if (v < id) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const plan_tensor *plan_find_tensor(const plan_t *p, uint64_t id)
{
    return find_id(p->tensors, p->n_tensors, sizeof *p->tensors, id);
}

plan_decision plan_decision_for(const plan_t *p, uint64_t id, double *alpha)
{
    const plan_tensor *t = plan_find_tensor(p, id);
    if (alpha) *alpha = t ? t->alpha : 0;
    return t ? t->decision : p->default_decision;
}

const plan_layer *plan_find_layer(const plan_t *p, int32_t layer)
{
    for (size_t i = 0; i < p->n_layers; i++)
        if (p->layers[i].layer == layer) return &p->layers[i];
    return NULL;
}

int plan_find_offset(const plan_t *p, uint64_t id, uint64_t *offset_bytes)
{
    const plan_offset *o = find_id(p->offsets, p->n_offsets, sizeof *p->offsets, id);
    if (!o) return 0;
    if (offset_bytes) *offset_bytes = o->offset_bytes;
    return 1;
}

uint64_t plan_offset_line(const plan_t *p, uint64_t id)
{
    const plan_offset *o = find_id(p->offsets, p->n_offsets, sizeof *p->offsets, id);
    return o ? o->line : 0;
}

/* ------------------------------------------------------------------------------------ */
/* reader */

typedef struct pload {
    const char *path;
    ms_lines *lr;
    plan_t *p;
    u64map *tensor_line, *offset_line;  /* id -> line, to name duplicates */
    uint64_t policy_line, allocator_line, lowering_line, default_line, arena_line, cfg_line[5];
    uint64_t pred_line[KNOBTAB_MAX_ROWS]; /* the line of each prediction read, 0: none yet */
} pload;

#define PL_FAIL(L, ...) \
    ms_fail_at(err, MS_ERR_PARSE, (L)->path, ms_lines_lineno((L)->lr), __VA_ARGS__)

static ms_status pl_once(pload *L, uint64_t *seen, const char *what, ms_error *err)
{
    if (*seen)
        return PL_FAIL(L, "duplicate '%s' line (first at line %llu)", what,
                       (unsigned long long)*seen);
    *seen = ms_lines_lineno(L->lr);
    return MS_OK;
}

static ms_status pl_nargs(pload *L, const char *what, int n, int want, ms_error *err)
{
    if (n != want)
        return PL_FAIL(L, "%s: expected %d field%s, got %s", what, want - 1, want == 2 ? "" : "s",
                       n > want ? "more" : n == 1 ? "none" : "fewer");
    return MS_OK;
}

/* A byte count with optional suffix, or "unlimited" (UINT64_MAX) where allowed. */
static ms_status pl_bytes(pload *L, const char *what, const char *s, int unlimited_ok,
                          uint64_t *v, ms_error *err)
{
    if (unlimited_ok && strcmp(s, "unlimited") == 0) { *v = UINT64_MAX; return MS_OK; }
    if (!ms_parse_u64(s, v) && !ms_parse_bytes(s, v))
        return PL_FAIL(L, "%s: bad byte count '%s'%s", what, s,
                       unlimited_ok ? " (a number or 'unlimited')" : "");
    if (*v == UINT64_MAX && !unlimited_ok) return PL_FAIL(L, "%s: value too large", what);
    return MS_OK;
}

static ms_status pl_alloc_key(pload *L, char **tok, int n, ms_error *err)
{
    static const char *const keys[5] = {
        "alloc.max_split_size_bytes", "alloc.roundup_power2_divisions", "alloc.frag_limit_bytes",
        "alloc.stitch_limit_bytes", "alloc.expandable_va_factor"};
    int k = 0;
    while (k < 5 && strcmp(tok[0], keys[k]) != 0) k++;
    if (k == 5)
        return PL_FAIL(L, "unknown allocator knob '%.60s' (alloc.max_split_size_bytes "
                       "alloc.roundup_power2_divisions alloc.frag_limit_bytes "
                       "alloc.stitch_limit_bytes alloc.expandable_va_factor)", tok[0]);
    ms_status st = pl_nargs(L, keys[k], n, 2, err);
    if (st == MS_OK) st = pl_once(L, &L->cfg_line[k], keys[k], err);
    if (st != MS_OK) return st;
    alloc_config *c = &L->p->alloc_cfg;
    uint64_t u;
    switch (k) {
    case 0: return pl_bytes(L, keys[k], tok[1], 1, &c->max_split_size_bytes, err);
    case 1:
        if (!ms_parse_u64(tok[1], &u) || u > UINT32_MAX)
            return PL_FAIL(L, "%s: bad count '%s'", keys[k], tok[1]);
        c->roundup_power2_divisions = (unsigned)u;
        return MS_OK;
    case 2: return pl_bytes(L, keys[k], tok[1], 0, &c->frag_limit_bytes, err);
    case 3: return pl_bytes(L, keys[k], tok[1], 1, &c->stitch_limit_bytes, err);
    default:
        if (!ms_parse_double(tok[1], &c->expandable_va_factor) || c->expandable_va_factor <= 0)
            return PL_FAIL(L, "%s: bad factor '%s' (a number > 0)", keys[k], tok[1]);
        return MS_OK;
    }
}

static ms_status pl_tensor(pload *L, char **tok, int n, ms_error *err)
{
    if (n != 3 && n != 4)
        return PL_FAIL(L, "tensor: expected 'tensor ID DECISION [ALPHA]'");
    uint64_t id, prev;
    plan_decision d;
    double alpha;
    if (!ms_parse_u64(tok[1], &id)) return PL_FAIL(L, "tensor: bad ID '%s'", tok[1]);
    if (!plan_decision_parse(tok[2], &d))
        return PL_FAIL(L, "tensor: unknown DECISION '%.40s' (keep swap recompute dha)", tok[2]);
    if (n == 4) {
        if (!ms_parse_double(tok[3], &alpha)) return PL_FAIL(L, "tensor: bad ALPHA '%s'", tok[3]);
        if (alpha < 0 || alpha > 1)
            return PL_FAIL(L, "tensor: ALPHA %s outside [0,1]", tok[3]);
    } else {
        alpha = d == PD_SWAP ? 1.0 : 0.0; /* swap without a fraction swaps every token */
    }
    if (u64map_get(L->tensor_line, id, &prev))
        return PL_FAIL(L, "duplicate tensor %llu (first at line %llu)", (unsigned long long)id,
                       (unsigned long long)prev);
    if (u64map_put(L->tensor_line, id, ms_lines_lineno(L->lr)) ||
        plan_set_tensor(L->p, id, d, alpha) != MS_OK)
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    return MS_OK;
}

static ms_status pl_layer(pload *L, char **tok, int n, ms_error *err)
{
    ms_status st = pl_nargs(L, "layer", n, 4, err);
    if (st != MS_OK) return st;
    int64_t layer;
    plan_pmode m;
    if (!ms_parse_i64(tok[1], &layer) || layer < -1 || layer > INT32_MAX)
        return PL_FAIL(L, "layer: bad layer '%s' (an integer >= -1)", tok[1]);
    if (!plan_pmode_parse(tok[2], &m))
        return PL_FAIL(L, "layer: unknown PMODE '%.40s' (gfgb dha dfgb)", tok[2]);
    int host;
    if (strcmp(tok[3], "grad=gpu") == 0) host = 0;
    else if (strcmp(tok[3], "grad=host") == 0) host = 1;
    else return PL_FAIL(L, "layer: expected grad=gpu or grad=host, not '%.40s'", tok[3]);
    if (plan_find_layer(L->p, (int32_t)layer))
        return PL_FAIL(L, "duplicate layer %lld", (long long)layer);
    if (plan_set_layer(L->p, (int32_t)layer, m, host) != MS_OK)
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    return MS_OK;
}

static ms_status pl_offset(pload *L, char **tok, int n, ms_error *err)
{
    ms_status st = pl_nargs(L, "offset", n, 3, err);
    if (st != MS_OK) return st;
    uint64_t id, off, prev;
    if (!ms_parse_u64(tok[1], &id)) return PL_FAIL(L, "offset: bad ID '%s'", tok[1]);
    if (!ms_parse_u64(tok[2], &off)) return PL_FAIL(L, "offset: bad BYTES '%s'", tok[2]);
    if (u64map_get(L->offset_line, id, &prev))
        return PL_FAIL(L, "duplicate offset for tensor %llu (first at line %llu)",
                       (unsigned long long)id, (unsigned long long)prev);
    if (u64map_put(L->offset_line, id, ms_lines_lineno(L->lr)) ||
        plan_set_offset(L->p, id, off) != MS_OK)
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    L->p->offsets[L->p->n_offsets - 1].line = ms_lines_lineno(L->lr);
    return MS_OK;
}

/* Prediction `key` = `v` from this line (a `predict` line, or an old plan's `knob` line of a
 * prediction's key). */
static ms_status pl_set_pred(pload *L, const knobtab_row *r, const char *v, ms_error *err)
{
    size_t i = (size_t)(r - pred_rows);
    char form[128];
    if (L->pred_line[i])
        return PL_FAIL(L, "duplicate prediction '%s' (first at line %llu)", r->key,
                       (unsigned long long)L->pred_line[i]);
    ms_error e;
    if (knobtab_set(&plan_predictions_table, r, v, &L->p->pred, &e) != MS_OK)
        return PL_FAIL(L, "predict %s: '%.40s' is not %s", r->key, v,
                       knobtab_value_form(r, form, sizeof form));
    L->pred_line[i] = ms_lines_lineno(L->lr);
    return MS_OK;
}

/* "predict KEY VALUE": one of plan_predictions_table's keys. */
static ms_status pl_predict(pload *L, char **tok, int n, ms_error *err)
{
    if (n != 3) return PL_FAIL(L, "predict: expected 'predict KEY VALUE'");
    const knobtab_row *r = knobtab_find(&plan_predictions_table, tok[1]);
    if (!r) {
        const knobtab *t = &plan_predictions_table;
        const char *near = knobtab_closest(&t, 1, tok[1]);
        char keys[512];
        knobtab_key_list(&t, 1, keys, sizeof keys);
        return PL_FAIL(L, "predict: unknown prediction '%.48s'%s%s%s (%s)", tok[1],
                       near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", keys);
    }
    return pl_set_pred(L, r, tok[2], err);
}

/* "knob KEY VALUE": VALUE is the rest of the line, trimmed. */
static ms_status pl_knob(pload *L, char *line, ms_error *err)
{
    char *p = line;
    while (is_blank(*p)) p++;
    p += 4;
    while (is_blank(*p)) p++;
    char *key = p;
    while (*p && !is_blank(*p)) p++;
    if (*p) *p++ = '\0';
    while (is_blank(*p)) p++;
    char *end = p + strlen(p);
    while (end > p && is_blank(end[-1])) *--end = '\0';
    if (!*key || !*p) return PL_FAIL(L, "knob: expected 'knob KEY VALUE'");
    if (strlen(key) >= sizeof(((plan_knob *)0)->key))
        return PL_FAIL(L, "knob: KEY longer than %zu characters",
                       sizeof(((plan_knob *)0)->key) - 1);
    if (strlen(p) >= sizeof(((plan_knob *)0)->value))
        return PL_FAIL(L, "knob: VALUE longer than %zu characters",
                       sizeof(((plan_knob *)0)->value) - 1);
    /* a plan written before the `predict` lines carried its predictions as knobs */
    const knobtab_row *pr = knobtab_find(&plan_predictions_table, key);
    if (pr) return pl_set_pred(L, pr, p, err);
    if (plan_get_knob(L->p, key)) return PL_FAIL(L, "duplicate knob '%s'", key);
    if (plan_set_knob(L->p, key, p) != MS_OK) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    return MS_OK;
}

/* "policy NAME" / "allocator NAME"; "-" is the empty name. */
static ms_status pl_name(pload *L, char **tok, int n, char *dst, size_t max, uint64_t *seen,
                         ms_error *err)
{
    ms_status st = pl_nargs(L, tok[0], n, 2, err);
    if (st == MS_OK) st = pl_once(L, seen, tok[0], err);
    if (st != MS_OK) return st;
    if (strlen(tok[1]) >= max)
        return PL_FAIL(L, "%s: NAME longer than %zu characters", tok[0], max - 1);
    strcpy(dst, strcmp(tok[1], "-") == 0 ? "" : tok[1]);
    return MS_OK;
}

/* "lowering NAME": a name, never "-" (every plan has a lowering). */
static ms_status pl_lowering(pload *L, char **tok, int n, ms_error *err)
{
    ms_status st = pl_name(L, tok, n, L->p->lowering, sizeof L->p->lowering, &L->lowering_line,
                           err);
    if (st == MS_OK && !L->p->lowering[0])
        return PL_FAIL(L, "lowering: expected a NAME (tensor, chunks, dha)");
    return st;
}

ms_status plan_markers_check(const plan_t *p, ms_error *err)
{
    static const char *const markers[] = { "chunks", "host_params" };
    for (size_t i = 0; i < sizeof markers / sizeof *markers; i++) {
        const char *v = plan_get_knob(p, markers[i]);
        if (v && strcmp(v, "0") && strcmp(v, "1"))
            return ms_fail(err, MS_ERR_INVALID, "plan knob %s=%s: expected 0 or 1", markers[i], v);
    }
    return MS_OK;
}

/* The lowering a plan file without a `lowering` line meant: the markers lower_schedule chose
 * by before plans named their lowering (plan_load, plan.h). */
static const char *legacy_lowering(const plan_t *p)
{
    const char *hp = plan_get_knob(p, "host_params"), *ck = plan_get_knob(p, "chunks");
    if (hp && !strcmp(hp, "1")) return "dha";
    for (size_t i = 0; i < p->n_knobs; i++)
        if (!strncmp(p->knobs[i].key, "grad_host.", 10)) return "dha";
    for (size_t i = 0; i < p->n_layers; i++)
        if (p->layers[i].pmode != PM_GFGB || p->layers[i].grad_on_host) return "dha";
    return ck && !strcmp(ck, "1") ? "chunks" : "tensor";
}

static ms_status pl_header(pload *L, char *line, ms_error *err)
{
    char *tok[3];
    int n = ms_split(line, tok, 2);
    if (n < 1 || strcmp(tok[0], "memsim-plan") != 0)
        return PL_FAIL(L, "not a plan: expected the header 'memsim-plan %d'", PLAN_FORMAT_VERSION);
    char *dot = n == 2 ? strchr(tok[1], '.') : NULL;
    uint64_t major, minor;
    if (dot) *dot = '\0';
    if (n != 2 || !ms_parse_u64(tok[1], &major) || major == 0 ||
        (dot && !ms_parse_u64(dot + 1, &minor)))
        return PL_FAIL(L, "header: expected 'memsim-plan VERSION'");
    if (major > PLAN_FORMAT_VERSION)
        return PL_FAIL(L, "plan format version %llu is newer than this reader (version %d)",
                       (unsigned long long)major, PLAN_FORMAT_VERSION);
    return MS_OK;
}

static ms_status pl_line(pload *L, char *line, ms_error *err)
{
    const char *q = line;
    while (is_blank(*q)) q++;
    if (strncmp(q, "knob", 4) == 0 && (q[4] == '\0' || is_blank(q[4])))
        return pl_knob(L, line, err);
    char *tok[6];
    int n = ms_split(line, tok, 5);
    const char *k = tok[0];
    if (strcmp(k, "policy") == 0)
        return pl_name(L, tok, n, L->p->policy, sizeof L->p->policy, &L->policy_line, err);
    if (strcmp(k, "allocator") == 0)
        return pl_name(L, tok, n, L->p->allocator, sizeof L->p->allocator, &L->allocator_line,
                       err);
    if (strcmp(k, "lowering") == 0) return pl_lowering(L, tok, n, err);
    if (strcmp(k, "predict") == 0) return pl_predict(L, tok, n, err);
    if (strncmp(k, "alloc.", 6) == 0) return pl_alloc_key(L, tok, n, err);
    if (strcmp(k, "default") == 0) {
        ms_status st = pl_nargs(L, "default", n, 2, err);
        if (st == MS_OK) st = pl_once(L, &L->default_line, "default", err);
        if (st != MS_OK) return st;
        if (!plan_decision_parse(tok[1], &L->p->default_decision))
            return PL_FAIL(L, "default: unknown DECISION '%.40s' (keep swap recompute dha)",
                           tok[1]);
        return MS_OK;
    }
    if (strcmp(k, "arena") == 0) {
        ms_status st = pl_nargs(L, "arena", n, 2, err);
        if (st == MS_OK) st = pl_once(L, &L->arena_line, "arena", err);
        if (st == MS_OK) st = pl_bytes(L, "arena", tok[1], 0, &L->p->arena_bytes, err);
        return st;
    }
    if (strcmp(k, "tensor") == 0) return pl_tensor(L, tok, n, err);
    if (strcmp(k, "layer") == 0) return pl_layer(L, tok, n, err);
    if (strcmp(k, "offset") == 0) return pl_offset(L, tok, n, err);
    return PL_FAIL(L, "unknown line '%.40s' (policy lowering allocator alloc.* default knob "
                   "predict tensor layer offset arena)", k);
}

static ms_status pl_run(pload *L, ms_error *err)
{
    int have_header = 0;
    for (;;) {
        char *line;
        ms_status st = ms_lines_next_content(L->lr, &line, err);
        if (st == MS_ERR_LIMIT) break;
        if (st != MS_OK) return st;
        st = have_header ? pl_line(L, line, err) : pl_header(L, line, err);
        if (st != MS_OK) return st;
        have_header = 1;
    }
    if (!have_header)
        return ms_fail_at(err, MS_ERR_PARSE, L->path, 0,
                          "empty file: expected the header 'memsim-plan %d'", PLAN_FORMAT_VERSION);
    if (!L->policy_line) return ms_fail_at(err, MS_ERR_PARSE, L->path, 0, "missing 'policy' line");
    if (!L->allocator_line)
        return ms_fail_at(err, MS_ERR_PARSE, L->path, 0, "missing 'allocator' line");
    if (!L->lowering_line) strcpy(L->p->lowering, legacy_lowering(L->p));
    return MS_OK;
}

ms_status plan_load(const char *path, plan_t **out, ms_error *err)
{
    *out = NULL;
    pload L;
    memset(&L, 0, sizeof L);
    L.path = path;
    L.p = plan_new("", "");
    L.tensor_line = u64map_new(64);
    L.offset_line = u64map_new(64);
    ms_status st = MS_OK;
    if (!L.p || !L.tensor_line || !L.offset_line) st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
    if (st == MS_OK) st = ms_lines_open(path, &L.lr, err);
    if (st == MS_OK) st = pl_run(&L, err);
    ms_lines_free(L.lr);
    u64map_free(L.tensor_line);
    u64map_free(L.offset_line);
    if (st != MS_OK) { plan_free(L.p); return st; }
    plan_sort(L.p);
    *out = L.p;
    return MS_OK;
}

/* ------------------------------------------------------------------------------------ */
/* writer: fixed order, every list sorted, so equal plans give equal files */

typedef int (*plan_emit)(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit_bytes(plan_emit out, void *ctx, const char *key, uint64_t v)
{
    if (v == UINT64_MAX) out(ctx, "%s unlimited\n", key);
    else out(ctx, "%s %llu\n", key, (unsigned long long)v);
}

/* The predictions made, in table order; doubles exactly (ms_fmt_double). */
static void write_predictions(const plan_t *p, plan_emit out, void *ctx)
{
    for (size_t i = 0; i < plan_predictions_table.n; i++) {
        const knobtab_row *r = &pred_rows[i];
        char v[64];
        if (!((p->pred.given >> i) & 1)) continue;
        if (r->type == KNOBTAB_DBL)
            ms_fmt_double(*(const double *)((const char *)&p->pred + r->off), v, sizeof v);
        else if (!knobtab_format_row(r, &p->pred, v, sizeof v))
            continue;
        out(ctx, "predict %s %s\n", r->key, v);
    }
}

/* 1 when every prediction made is one the reader takes back (a finite number in range). */
static int predictions_valid(const plan_t *p)
{
    for (size_t i = 0; i < plan_predictions_table.n; i++) {
        const knobtab_row *r = &pred_rows[i];
        if (!((p->pred.given >> i) & 1) || r->type != KNOBTAB_DBL) continue;
        double x = *(const double *)((const char *)&p->pred + r->off);
        if (!isfinite(x) || x < r->lo || x > r->hi) return 0;
    }
    return 1;
}

static ms_status write_plan(const plan_t *p, plan_emit out, void *ctx)
{
    if (!predictions_valid(p)) return MS_ERR_INVALID;
    if (!valid_name(p->policy, sizeof p->policy) || !valid_name(p->allocator, sizeof p->allocator) ||
        !memchr(p->lowering, 0, sizeof p->lowering) || !p->lowering[0] ||
        !valid_name(p->lowering, sizeof p->lowering) || (unsigned)p->default_decision >= PD_COUNT || !isfinite(p->alloc_cfg.expandable_va_factor) ||
        p->alloc_cfg.expandable_va_factor <= 0 || p->alloc_cfg.frag_limit_bytes == UINT64_MAX ||
        p->arena_bytes == UINT64_MAX)
        return MS_ERR_INVALID;
    /* The struct is public, so check what plan_set_* would have refused. */
    for (size_t i = 0; i < p->n_tensors; i++)
        if ((unsigned)p->tensors[i].decision >= PD_COUNT ||
            !(p->tensors[i].alpha >= 0 && p->tensors[i].alpha <= 1))
            return MS_ERR_INVALID;
    for (size_t i = 0; i < p->n_layers; i++)
        if ((unsigned)p->layers[i].pmode >= PM_COUNT || p->layers[i].layer < -1)
            return MS_ERR_INVALID;
    for (size_t i = 0; i < p->n_knobs; i++)
        if (!memchr(p->knobs[i].key, 0, sizeof p->knobs[i].key) ||
            !memchr(p->knobs[i].value, 0, sizeof p->knobs[i].value) ||
            !valid_token(p->knobs[i].key, sizeof p->knobs[i].key) ||
            !valid_knob_value(p->knobs[i].value))
            return MS_ERR_INVALID;
    size_t *tp, *op;
    size_t nt = sorted_last(p->tensors, p->n_tensors, sizeof *p->tensors, &tp);
    size_t no = sorted_last(p->offsets, p->n_offsets, sizeof *p->offsets, &op);
    plan_layer *layers = malloc((p->n_layers + 1) * sizeof *layers);
    plan_knob *knobs = malloc((p->n_knobs + 1) * sizeof *knobs);
    ms_status st = MS_OK;
    if (nt == (size_t)-1 || no == (size_t)-1 || !layers || !knobs) { st = MS_ERR_NOMEM; goto done; }
    if (p->n_layers) memcpy(layers, p->layers, p->n_layers * sizeof *layers);
    if (p->n_knobs) memcpy(knobs, p->knobs, p->n_knobs * sizeof *knobs);
    qsort(layers, p->n_layers, sizeof *layers, cmp_layer);
    qsort(knobs, p->n_knobs, sizeof *knobs, cmp_knob);

    char d[40];
    const alloc_config *c = &p->alloc_cfg;
    out(ctx, "memsim-plan %d\n", PLAN_FORMAT_VERSION);
    out(ctx, "policy %s\n", p->policy[0] ? p->policy : "-");
    out(ctx, "lowering %s\n", p->lowering);
    out(ctx, "allocator %s\n", p->allocator[0] ? p->allocator : "-");
    emit_bytes(out, ctx, "alloc.max_split_size_bytes", c->max_split_size_bytes);
    out(ctx, "alloc.roundup_power2_divisions %u\n", c->roundup_power2_divisions);
    emit_bytes(out, ctx, "alloc.frag_limit_bytes", c->frag_limit_bytes);
    emit_bytes(out, ctx, "alloc.stitch_limit_bytes", c->stitch_limit_bytes);
    out(ctx, "alloc.expandable_va_factor %s\n", ms_fmt_double(c->expandable_va_factor, d, sizeof d));
    out(ctx, "default %s\n", plan_decision_name(p->default_decision));
    out(ctx, "arena %llu\n", (unsigned long long)p->arena_bytes);
    for (size_t i = 0; i < p->n_knobs; i++)
        if (i == 0 || strcmp(knobs[i].key, knobs[i - 1].key) != 0)
            out(ctx, "knob %s %s\n", knobs[i].key, knobs[i].value);
    write_predictions(p, out, ctx);
    for (size_t i = 0; i < p->n_layers; i++)
        out(ctx, "layer %d %s grad=%s\n", (int)layers[i].layer, plan_pmode_name(layers[i].pmode),
            layers[i].grad_on_host ? "host" : "gpu");
    for (size_t i = 0; i < nt; i++) {
        const plan_tensor *t = &p->tensors[tp[i]];
        out(ctx, "tensor %llu %s", (unsigned long long)t->id, plan_decision_name(t->decision));
        if (t->decision == PD_SWAP || t->alpha != 0) out(ctx, " %s", ms_fmt_double(t->alpha, d, sizeof d));
        out(ctx, "\n");
    }
    for (size_t i = 0; i < no; i++) {
        const plan_offset *o = &p->offsets[op[i]];
        out(ctx, "offset %llu %llu\n", (unsigned long long)o->id,
            (unsigned long long)o->offset_bytes);
    }
done:
    free(tp);
    free(op);
    free(layers);
    free(knobs);
    return st;
}

static int emit_fp(void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(ctx, fmt, ap);
    va_end(ap);
    return r;
}

/* Plan lines are short (names and knobs have fixed maximum sizes), so one buffer holds any. */
static int emit_out(void *ctx, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) return -1;
    return ms_out_write(ctx, buf, (size_t)n);
}

ms_status plan_write_fp(const plan_t *p, FILE *fp)
{
    ms_status st = write_plan(p, emit_fp, fp);
    if (st == MS_OK && ferror(fp)) st = MS_ERR_IO;
    return st;
}

ms_status plan_write(const plan_t *p, const char *path, ms_error *err)
{
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) return st;
    st = write_plan(p, emit_out, o);
    if (st != MS_OK) {
        ms_out_abort(o);
        return ms_fail_at(err, st, path, 0, "cannot write plan: %s", ms_status_str(st));
    }
    return ms_out_commit(o, err);
}

ms_status plan_alloc_config(const plan_t *p, alloc_config *cfg, uint64_t **ids, uint64_t **offs)
{
    *cfg = p->alloc_cfg;
    *ids = *offs = NULL;
    if (!p->n_offsets) return MS_OK;
    *ids = malloc(p->n_offsets * sizeof **ids);
    *offs = malloc(p->n_offsets * sizeof **offs);
    if (!*ids || !*offs) {
        free(*ids);
        free(*offs);
        *ids = *offs = NULL;
        return MS_ERR_NOMEM;
    }
    for (size_t i = 0; i < p->n_offsets; i++) {
        (*ids)[i] = p->offsets[i].id;
        (*offs)[i] = p->offsets[i].offset_bytes;
    }
    cfg->static_ids = *ids;
    cfg->static_offsets = *offs;
    cfg->static_n = p->n_offsets;
    cfg->static_arena_bytes = p->arena_bytes;
    return MS_OK;
}

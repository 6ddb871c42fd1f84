/* policy.c — the policy registry of policy.h and the helpers every policy shares: plan
 * creation with the common options, knob parsing, and the layer view of a trace (skeletal
 * activations per layer, which one is the layer input). Used by the memsim command,
 * experiments and the policies in planners/policy_*.c. */
#include "planners/policy.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/policy_baseline.h"
#include "planners/policy_memferry.h"
#include "planners/policy_memo.h"
#include "planners/policy_offload_baselines.h"
#include "planners/policy_protrain.h"
#include "planners/policy_zero_offload.h"
#include "traces/u64map.h"
#include "traces/util.h"

/* The registry: X(its pol_policy object), defined in its own planners/policy_NAME.c (the
 * other places a new policy touches: docs/POLICIES.md, "Adding a policy"). The list's order
 * is the order `memsim list` prints. */
#define POL_LIST(X)        \
    X(pol_keep_all)        \
    X(pol_full_recompute)  \
    X(pol_full_swap)       \
    X(pol_full_recompute_plan) \
    X(pol_full_swap_plan)  \
    X(pol_memo)            \
    X(pol_zero_offload)    \
    X(pol_memferry)        \
    X(pol_go_memferry)     \
    X(pol_protrain)        \
    X(pol_zero3_offload)   \
    X(pol_gemini_static)   \
    X(pol_fsdp_offload)

#define POL_DECLARE(p) extern const pol_policy p;
#define POL_ENTRY(p) &p,
POL_LIST(POL_DECLARE)
static const pol_policy *const registry[] = { POL_LIST(POL_ENTRY) };

const pol_policy *const *pol_registry(size_t *n)
{
    *n = sizeof registry / sizeof *registry;
    return registry;
}

const pol_policy *pol_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

pol_form pol_form_of(const char *name)
{
    const pol_policy *p = pol_find(name);
    return p ? p->form : POL_FORM_PLAIN;
}

pol_form pol_form_for(const char *policy, const char *plan_path)
{
    if (!plan_path) return pol_form_of(policy);
    plan_t *plan;
    ms_error err;
    if (plan_load(plan_path, &plan, &err) != MS_OK) return POL_FORM_PLAIN;
    pol_form k = pol_form_of(plan->policy);
    plan_free(plan);
    return k;
}

/* ---- knob names ---- */

const char *const pol_common_knob_names[] = {
    "memory_plan", "plan_l1_s", "plan_l2_s", "strict_layers", NULL,
};

static int name_covers(const char *name, const char *key)
{
    size_t n = strlen(name);
    if (n && name[n - 1] == '.') return strncmp(name, key, n) == 0 && key[n];
    return strcmp(name, key) == 0;
}

enum { KNOB_NAMES_MAX = 256 };

/* p's names, its groups flattened in order (repeats kept); at most cap. */
static size_t knob_names(const pol_policy *p, const char **v, size_t cap)
{
    size_t n = 0;
    for (const char *const *const *g = p ? p->knob_names : NULL; g && *g; g++)
        for (const char *const *k = *g; *k && n < cap; k++) v[n++] = *k;
    return n;
}

int pol_knob_known(const pol_policy *p, const char *key)
{
    const char *v[KNOB_NAMES_MAX];
    size_t n = key ? knob_names(p, v, KNOB_NAMES_MAX) : 0;
    for (size_t i = 0; i < n; i++)
        if (name_covers(v[i], key)) return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* p's names, sorted, repeats dropped; at most cap kept. */
static size_t knob_names_sorted(const pol_policy *p, const char **v, size_t cap)
{
    size_t n = knob_names(p, v, cap);
    qsort(v, n, sizeof *v, cmp_str);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!m || strcmp(v[m - 1], v[i])) v[m++] = v[i];
    return m;
}

size_t pol_knob_list(const pol_policy *p, char *buf, size_t size)
{
    const char *v[KNOB_NAMES_MAX];
    size_t n = knob_names_sorted(p, v, KNOB_NAMES_MAX), len = 0;
    if (size) buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf && len < size ? buf + len : NULL, len < size ? size - len : 0,
                         "%s%s%s", i ? " " : "", v[i],
                         v[i][strlen(v[i]) - 1] == '.' ? "N" : "");
        if (w > 0) len += (size_t)w;
    }
    return len;
}

/* The known name closest to key among the named policies' (NULL when none is within a
 * third of key's length; ties: the first met). */
static const char *closest_knob(const char *const *policies, size_t n, const char *key)
{
    const char *best = NULL;
    size_t bd = strlen(key) / 3 + 1;
    for (size_t i = 0; i < n; i++) {
        const char *v[KNOB_NAMES_MAX];
        size_t m = knob_names(pol_find(policies[i]), v, KNOB_NAMES_MAX);
        for (size_t j = 0; j < m; j++) {
            size_t d = ms_edit_distance(v[j], key);
            if (d < bd) {
                bd = d;
                best = v[j];
            }
        }
    }
    return best;
}

ms_status pol_knobs_check(const char *const *policies, size_t n, const pol_opts *o,
                          ms_error *err)
{
    for (size_t i = 0; o && i < o->n_knobs; i++) {
        const char *key = o->knobs[i].key;
        if (!key || !key[0]) return ms_fail(err, MS_ERR_INVALID, "a knob without a key");
        int known = 0, listed = 0;
        for (size_t j = 0; j < n && !known; j++) {
            const pol_policy *p = pol_find(policies[j]);
            listed |= p != NULL;
            known = !p || pol_knob_known(p, key);
        }
        if (known || !listed) continue;
        if (!strcmp(key, "alpha"))
            return ms_fail(err, MS_ERR_INVALID, "knob 'alpha': the swapped fraction is an option "
                           "of its own (pol_opts.alpha; memsim --alpha X), not a knob");
        const char *near = closest_knob(policies, n, key);
        char list[2048] = "memsim list shows each policy's knobs";
        if (n == 1) pol_knob_list(pol_find(policies[0]), list, sizeof list);
        return ms_fail(err, MS_ERR_INVALID, "knob '%s' is not read by %s%s%s%s%s (%s%s)",
                       key, n > 1 ? "any of these policies" : "policy ",
                       n > 1 ? "" : policies[0], near ? "; did you mean '" : "",
                       near ? near : "", near ? "'?" : "", n == 1 ? "its knobs: " : "",
                       list[0] ? list : "none");
    }
    return MS_OK;
}

void pol_opts_default(pol_opts *o)
{
    memset(o, 0, sizeof *o);
    o->allocator = NULL;
    o->alloc_cfg = NULL;
    o->alpha = -1.0;
}

/* The common knobs are checked for every policy, also where the policy never reads them
 * (plan_l1_s without memory_plan=1): a typed-in value that nothing parses is a mistake. */
ms_status pol_common_knobs_check(const pol_opts *o, ms_error *err)
{
    static const char *const flags[] = { "memory_plan", "strict_layers" };
    for (size_t i = 0; i < 2; i++) {
        const char *v = pol_knob_get(o, flags[i]);
        if (v && strcmp(v, "0") && strcmp(v, "1"))
            return ms_fail(err, MS_ERR_INVALID, "knob %s: '%s' is not 0 or 1", flags[i], v);
    }
    static const char *const limits[] = { "plan_l1_s", "plan_l2_s" };
    for (size_t i = 0; i < 2; i++) {
        double x;
        ms_status st = pol_knob_double(o, limits[i], 1, &x, err);
        if (st) return st;
        if (!(x > 0 && x < 3600))
            return ms_fail(err, MS_ERR_INVALID, "knob %s: effort limits must lie in (0, 3600) "
                           "seconds", limits[i]);
    }
    return MS_OK;
}

static ms_status unknown_policy(const char *name, ms_error *err)
{
    const char *names[64];
    size_t n = 0;
    for (size_t i = 0; i < sizeof registry / sizeof *registry && n < 64; i++)
        names[n++] = registry[i]->name;
    const char *near = name ? ms_closest(name, names, n) : NULL;
    return ms_fail(err, MS_ERR_NOTFOUND, "unknown policy '%s'%s%s%s (memsim list)",
                   name ? name : "(null)", near ? "; did you mean '" : "", near ? near : "",
                   near ? "'?" : "");
}

ms_status pol_names_check(const char *const *policies, size_t n, ms_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (!pol_find(policies[i])) return unknown_policy(policies[i], err);
    return MS_OK;
}

ms_status pol_alpha_check(const char *const *policies, size_t n, const pol_opts *o,
                          ms_error *err)
{
    if (!o || !(o->alpha >= 0)) return MS_OK;
    int listed = 0;
    for (size_t i = 0; i < n; i++) {
        const pol_policy *p = pol_find(policies[i]);
        if (p && p->reads_alpha) return MS_OK;
        listed |= p != NULL;
    }
    if (!listed) return MS_OK;
    char readers[256] = "";
    size_t k = 0, nr = 0;
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        nr += registry[i]->reads_alpha != 0;
    for (size_t i = 0, j = 0; i < sizeof registry / sizeof *registry; i++) {
        if (!registry[i]->reads_alpha) continue;
        j++;
        k += (size_t)snprintf(readers + k, k < sizeof readers ? sizeof readers - k : 0, "%s%s",
                              j == 1 ? "" : j == nr ? " and " : ", ", registry[i]->name);
        if (k >= sizeof readers) break;
    }
    if (n > 1)
        return ms_fail(err, MS_ERR_INVALID, "--alpha is read only by %s; none of these "
                       "policies reads it", readers);
    return ms_fail(err, MS_ERR_INVALID, "--alpha is read only by %s; policy %s does not read "
                   "it", readers, policies[0]);
}

ms_status pol_plan(const char *name, const trace_t *t, const machine_t *m, const pol_opts *o,
                   plan_t **out, ms_error *err)
{
    *out = NULL;
    const pol_policy *p = pol_find(name);
    if (!p) return unknown_policy(name, err);
    if (!t) return ms_fail(err, MS_ERR_INVALID, "policy %s: no trace", name);
    pol_opts def;
    if (!o) {
        pol_opts_default(&def);
        o = &def;
    }
    if (o->alpha > 1.0 || o->alpha != o->alpha)
        return ms_fail(err, MS_ERR_INVALID, "policy %s: alpha %g is not in [0,1]", name,
                       o->alpha);
    ms_status st = pol_common_knobs_check(o, err);
    if (st) return st;
    st = p->plan(t, m, o, out, err);
    /* the plan knob memory_plan=1 asks any policy for a static memory plan (docs/MEMO.md) */
    const char *mp = (st == MS_OK && *out) ? plan_get_knob(*out, "memory_plan") : NULL;
    if (mp && !strcmp(mp, "1") && (*out)->n_offsets == 0) {
        st = memo_apply_memory_plan(t, m, o, *out, err);
        if (st != MS_OK) {
            plan_free(*out);
            *out = NULL;
        }
    }
    if (st == MS_OK && *out) plan_sort(*out);
    return st;
}

ms_status pol_plan_new(const char *name, const pol_opts *o, plan_t **out, ms_error *err)
{
    const char *alloc_name = (o && o->allocator) ? o->allocator : "caching";
    plan_t *p = plan_new(name, alloc_name);
    if (!p) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    if (o && o->alloc_cfg) p->alloc_cfg = *o->alloc_cfg;
    else alloc_config_default(&p->alloc_cfg);
    /* A plan file cannot carry the static arena's offset arrays this way; offsets are
     * plan entries of their own (plan_set_offset). */
    p->alloc_cfg.static_ids = NULL;
    p->alloc_cfg.static_offsets = NULL;
    p->alloc_cfg.static_n = 0;
    p->default_decision = PD_KEEP;
    ms_status st = MS_OK;
    if (o && o->alpha >= 0) {
        char buf[40];
        st = plan_set_knob(p, "alpha", ms_fmt_double(o->alpha, buf, sizeof buf));
    }
    for (size_t i = 0; st == MS_OK && o && i < o->n_knobs; i++) {
        st = plan_set_knob(p, o->knobs[i].key, o->knobs[i].value);
        if (st != MS_OK)
            st = ms_fail(err, st, "policy %s: cannot record knob '%s=%s' in the plan", name,
                         o->knobs[i].key, o->knobs[i].value);
    }
    if (st != MS_OK) {
        if (st == MS_ERR_NOMEM) ms_fail(err, st, "out of memory");
        plan_free(p);
        return st;
    }
    *out = p;
    return MS_OK;
}

const char *pol_knob_get(const pol_opts *o, const char *key)
{
    const char *v = NULL;
    for (size_t i = 0; o && i < o->n_knobs; i++)
        if (o->knobs[i].key && strcmp(o->knobs[i].key, key) == 0) v = o->knobs[i].value;
    return v;
}

ms_status pol_knob_double(const pol_opts *o, const char *key, double def, double *out,
                          ms_error *err)
{
    const char *v = pol_knob_get(o, key);
    *out = def;
    if (!v) return MS_OK;
    if (!ms_parse_double(v, out))
        return ms_fail(err, MS_ERR_INVALID, "knob %s: '%s' is not a number", key, v);
    return MS_OK;
}

ms_status pol_knob_bytes(const pol_opts *o, const char *key, uint64_t def, uint64_t *out,
                         ms_error *err)
{
    const char *v = pol_knob_get(o, key);
    *out = def;
    if (!v) return MS_OK;
    if (!ms_parse_bytes(v, out))
        return ms_fail(err, MS_ERR_INVALID, "knob %s: '%s' is not a byte size", key, v);
    return MS_OK;
}

/* ---- layer view ---- */

static uint64_t group_key(uint32_t pass, int32_t layer)
{
    return ((uint64_t)pass << 32) | (uint32_t)layer;
}

/* Whether the tensor's producer op lies outside layer L's forward (the fallback rule). */
static int produced_outside(const trace_t *t, const trace_tensor *x)
{
    if (x->producer < 0) return 1;
    const trace_op *op = trace_find_op(t, (uint64_t)x->producer);
    return !op || op->layer != x->layer || op->phase != TP_FWD;
}

/* Collects skeletal tensors of forward passes; a trace without phase marks counts as one
 * forward pass (phase "none"). */
static ms_status collect(const trace_t *t, pol_skel **out, size_t *n, size_t *cap,
                         u64map *named)
{
    trace_phase phase = TP_NONE;
    uint32_t pass = 0;
    int seen_fwd = 0;
    for (size_t i = 0; i < trace_count(t); i++) {
        const trace_rec *r = trace_get(t, i);
        if (r->type == TR_MARK && r->u.mark.kind == TM_PHASE) {
            phase = (trace_phase)r->u.mark.value;
            if (phase == TP_FWD) {
                if (seen_fwd) pass++;
                seen_fwd = 1;
            }
            continue;
        }
        if (r->type != TR_ALLOC) continue;
        const trace_tensor *x = &r->u.alloc;
        if (x->cls != TC_ACT_SKEL || x->layer < 0) continue;
        if (phase != TP_FWD && phase != TP_NONE) continue;
        if (ms_grow((void **)out, cap, *n + 1, sizeof **out) != MS_OK) return MS_ERR_NOMEM;
        pol_skel *s = &(*out)[(*n)++];
        memset(s, 0, sizeof *s);
        s->id = x->id;
        s->layer = x->layer;
        s->pass = pass;
        s->t = x;
        s->is_input = ms_ends_with(x->name, ".input");
        /* the attention kernel's outputs: its output and, when saved apart, its log-sum-exp
         * (MEMO offloads "the FlashAttention output" whole; the backward needs both) */
        s->is_attn_out = ms_ends_with(x->name, ".attn_out") || ms_ends_with(x->name, ".attn_lse");
        if (s->is_input && u64map_put(named, group_key(pass, x->layer), 1)) return MS_ERR_NOMEM;
    }
    return MS_OK;
}

int32_t pol_declared_layers(const trace_t *t)
{
    uint64_t v = trace_meta_u64(t, "layers", 0);
    return v <= INT32_MAX ? (int32_t)v : 0;
}

ms_status pol_check_layer(const trace_t *t, int32_t layer, int32_t limit, const char *what,
                          ms_error *err)
{
    int32_t declared = pol_declared_layers(t);
    if (declared > 0 && layer >= declared)
        return ms_fail(err, MS_ERR_INVALID, "%s: layer %d is beyond the %d layers the trace "
                       "declares (meta layers %d: layers 0..%d)", what, (int)layer, (int)declared,
                       (int)declared, (int)declared - 1);
    if (declared == 0 && layer >= limit)
        return ms_fail(err, MS_ERR_INVALID, "%s: layer %d is out of range (the trace declares "
                       "no layer count (meta layers); layers 0..%d are accepted here)", what,
                       (int)layer, (int)limit - 1);
    return MS_OK;
}

ms_status pol_skeletal(const trace_t *t, pol_skel **out, size_t *n, ms_error *err)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    u64map *named = u64map_new(256);
    if (!named) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_status st = collect(t, out, n, &cap, named);
    for (size_t i = 0; st == MS_OK && i < *n; i++) {
        pol_skel *s = &(*out)[i];
        if (!u64map_get(named, group_key(s->pass, s->layer), NULL))
            s->is_input = produced_outside(t, s->t);
    }
    u64map_free(named);
    if (st != MS_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
        return ms_fail(err, st, "out of memory");
    }
    return MS_OK;
}

ms_status pol_no_skeletal(const char *policy, ms_error *err)
{
    return ms_fail(err, MS_ERR_INVALID, "policy %s: the trace has no skeletal activations of "
                   "layers (act_skel tensors with a layer, made in a forward phase): nothing "
                   "to recompute or swap; an allocator-only trace (memsim trace import) runs "
                   "under keep-all or memsim replay", policy);
}

ms_status pol_need_skeletal(const char *policy, const trace_t *t, ms_error *err)
{
    pol_skel *sk;
    size_t n;
    ms_status st = pol_skeletal(t, &sk, &n, err);
    if (st != MS_OK) return st;
    free(sk);
    return n ? MS_OK : pol_no_skeletal(policy, err);
}

/* policy.c — the policy registry of policy.h: the policies by name, their knob tables
 * checked against a command's knobs, and a plan made through them with the common options.
 * Used by the memsim command, experiments and the policies in planners/FAMILY/policy_*.c;
 * the layer view the policies plan from is planners/pol_layers.c. */
#include "planners/policy.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planners/knob.h"
#include "base/u64map.h"
#include "base/util.h"

/* The registry: the rows of every family folder's policies.def (POL_ROW(ORDER, its
 * pol_policy object)), which make sorts by ORDER into planners/policy_rows.h; a policy is
 * registered by one row in its own folder. The rows are declared here, not through the
 * policies' headers, so that the registry depends on no policy (they all include policy.h).
 * A build that registers other policies too (a test's) names its own rows header. */
#ifndef POL_ROWS_HEADER
#define POL_ROWS_HEADER "planners/policy_rows.h"
#endif
#define POL_ROW(order, p) extern const pol_policy p;
#include POL_ROWS_HEADER
#undef POL_ROW
#define POL_ROW(order, p) &p,
static const pol_policy *const registry[] = {
#include POL_ROWS_HEADER
};
#undef POL_ROW

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

/* ---- knob tables ---- */

static const knobtab_row common_rows[] = {
    KNOB_FLAG("memory_plan", pol_common_knobs, memory_plan, "0",
              "1: MEMO's bi-level static memory plan after the policy (docs/MEMO.md)",
              "MEMO §4.2"),
    KNOB_DBL("plan_l1_s", pol_common_knobs, plan_l1_s, "1", -HUGE_VAL, HUGE_VAL,
             "the memory plan's level-1 effort limit, seconds in (0, 3600)", ""),
    KNOB_DBL("plan_l2_s", pol_common_knobs, plan_l2_s, "1", -HUGE_VAL, HUGE_VAL,
             "the memory plan's level-2 effort limit, seconds in (0, 3600)", ""),
    KNOB_FLAG("strict_layers", pol_common_knobs, strict_layers, "0",
              "1: the memory plan fails where a layer's blocks cannot be placed apart", ""),
};
const knobtab pol_common_knob_table = KNOBTAB("memory plan", common_rows, KNOBTAB_MSG_OPT,
                                              pol_common_knobs, given);

/* p's tables and their count. */
static size_t tables_of(const pol_policy *p, const knobtab *const **out)
{
    size_t n = 0;
    *out = p ? p->knob_tables : NULL;
    while (*out && (*out)[n]) n++;
    return n;
}

int pol_knob_known(const pol_policy *p, const char *key)
{
    const knobtab *const *v;
    size_t n = key ? tables_of(p, &v) : 0;
    for (size_t i = 0; i < n; i++)
        if (knobtab_find(v[i], key)) return 1;
    return 0;
}

size_t pol_knob_list(const pol_policy *p, char *buf, size_t size)
{
    const knobtab *const *v;
    size_t n = tables_of(p, &v);
    return knobtab_key_list(v, n, buf, size);
}

/* The known key closest to key among the named policies' (NULL when none is within a
 * third of key's length; ties: the first met). */
static const char *closest_knob(const char *const *policies, size_t n, const char *key)
{
    const knobtab *all[64];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const knobtab *const *v;
        size_t k = tables_of(pol_find(policies[i]), &v);
        for (size_t j = 0; j < k && m < 64; j++) all[m++] = v[j];
    }
    return knobtab_closest(all, m, key);
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
ms_status pol_common_knobs_check(const pol_opts *o, pol_common_knobs *out, ms_error *err)
{
    pol_common_knobs k;
    ms_status st = knob_from_opts(&pol_common_knob_table, o, &k, err);
    if (st) return st;
    const double *lim[] = { &k.plan_l1_s, &k.plan_l2_s };
    for (size_t i = 0; i < 2; i++)
        if (!(*lim[i] > 0 && *lim[i] < 3600))
            return ms_fail(err, MS_ERR_INVALID, "knob %s: effort limits must lie in (0, 3600) "
                           "seconds", common_rows[1 + i].key);
    if (out) *out = k;
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

/* 1 when some table of p reads key as a byte size. */
static int reads_as_size(const pol_policy *p, const char *key)
{
    for (const knobtab *const *t = p->knob_tables; t && *t; t++) {
        const knobtab_row *r = knobtab_find(*t, key);
        if (r && r->type == KNOBTAB_BYTES) return 1;
    }
    return 0;
}

const pol_knob *pol_knob_bad_size(const char *const *policies, size_t n, const pol_opts *o)
{
    for (size_t i = 0; o && i < o->n_knobs; i++) {
        uint64_t x;
        if (!o->knobs[i].value || ms_parse_bytes(o->knobs[i].value, &x)) continue;
        for (size_t j = 0; j < n; j++) {
            const pol_policy *p = pol_find(policies[j]);
            if (p && reads_as_size(p, o->knobs[i].key)) return &o->knobs[i];
        }
    }
    return NULL;
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
    ms_status st = pol_common_knobs_check(o, NULL, err);
    if (st) return st;
    st = p->plan(t, m, o, out, err);
    if (st == MS_OK && *out && p->post_plan) {
        st = p->post_plan(t, m, o, *out, err);
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
    const pol_policy *row = pol_find(name);
    ms_status st = plan_set_lowering(p, row && row->lowering ? row->lowering : "tensor");
    if (st == MS_OK && o && o->alpha >= 0) {
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

/* policy.h — the registry of memory policies: each turns a workload trace and a machine into
 * a plan (planners/plan.h) and is known by name, a one-line description and the paper or
 * system it follows. Options common to all policies (allocator, alpha override, free-form
 * knobs) travel in pol_opts. Used by the memsim command (plan, list), experiments and tests;
 * the policies themselves live in planners/policy_*.c. */
#ifndef MEMSIM_POLICY_H
#define MEMSIM_POLICY_H

#include "base/knobtab.h"
#include "traces/machine.h"
#include "traces/trace.h"
#include "memory/alloc.h"
#include "planners/plan.h"
#include "planners/pol_layers.h"
#include "planners/pol_opts.h"

void pol_opts_default(pol_opts *o);

typedef ms_status (*pol_plan_fn)(const trace_t *t, const machine_t *m, const pol_opts *o,
                                 plan_t **out, ms_error *err);
/* A pass pol_plan runs on the plan a policy made (e.g. MEMO's bi-level memory plan when the
 * knob memory_plan=1 asks for it): it may add to or change plan p. */
typedef ms_status (*pol_post_plan_fn)(const trace_t *t, const machine_t *m, const pol_opts *o,
                                      plan_t *p, ms_error *err);

/* The form of workload trace a policy plans. A generated workload takes its policy's form
 * (pipe_trace_for, `memsim run`) unless the user sets the generator's offload knob; a trace
 * file is taken as it is. */
typedef enum pol_form {
    POL_FORM_PLAIN = 0,  /* everything on the GPU as the framework allocates it (the chunk
                            policies shard and offload the model states themselves) */
    POL_FORM_OFFLOAD     /* ZeRO-Offload's: optimizer states and Adam on the host (traces/gen.h
                            offload=1), which the shadow-model lowering needs */
} pol_form;

typedef struct pol_policy {
    const char *name;     /* registry name, e.g. "full-swap" */
    const char *desc;     /* one line */
    const char *source;   /* the paper or system it follows */
    const knobtab *own_knobs; /* its own knob table (also one of knob_tables), whose rows
                             `memsim list policies` summarizes on its line; NULL: none */
    pol_plan_fn plan;
    /* the knob tables of it, its lowering and the memory plan, NULL-terminated: every key
     * --knob accepts for it is a row of one (a family row KEY. covers every key it starts);
     * a key none names is a typo to the knob check below, not a silent no-op */
    const knobtab *const *knob_tables;
    pol_form form;        /* the workload form it plans (POL_FORM_PLAIN when not given) */
    int reads_alpha;      /* 1: it reads pol_opts.alpha (memsim --alpha); else --alpha is refused */
    const char *lowering; /* the lowering its plans name (planners/lower.h lower_find), which
                             pol_plan_new writes into them; NULL: "tensor" */
    pol_post_plan_fn post_plan; /* run by pol_plan on every plan it makes; NULL: none */
} pol_policy;

const pol_policy *const *pol_registry(size_t *n);
const pol_policy *pol_find(const char *name); /* NULL if unknown */
/* The form policy `name` plans; POL_FORM_PLAIN for an unknown name (running it reports it). */
pol_form pol_form_of(const char *name);
/* The form of the policy a run plans: the one plan_path names when given (POL_FORM_PLAIN
 * when the file cannot be read: loading it for the run reports why), else `policy`'s. */
pol_form pol_form_for(const char *policy, const char *plan_path);

/* Runs policy `name` (MS_ERR_NOTFOUND if unknown), then its post_plan pass. NULL o:
 * defaults. On success *out is a sorted plan the caller frees with plan_free. */
ms_status pol_plan(const char *name, const trace_t *t, const machine_t *m, const pol_opts *o,
                   plan_t **out, ms_error *err);

/* 1 when policy p (or its lowering, or the memory plan) reads knob `key`. */
int pol_knob_known(const pol_policy *p, const char *key);

/* Every knob of o must be read by at least one of the n named policies (several: `memsim
 * compare` gives one set of knobs to all); unknown policy names are skipped (running them
 * reports it). MS_ERR_INVALID naming the first unknown key, the closest known one and the
 * policy's full list otherwise. */
ms_status pol_knobs_check(const char *const *policies, size_t n, const pol_opts *o,
                          ms_error *err);

/* The first knob of o whose value is not a byte size (ms_parse_bytes) where a table of one of
 * the n named policies reads that key as one; NULL when none. A command line refuses it as
 * it refuses a malformed byte-size option (MS_BYTES_EXPECTED, exit MS_EXIT_USAGE), before any
 * policy runs. Unknown policy names are skipped. */
const pol_knob *pol_knob_bad_size(const char *const *policies, size_t n, const pol_opts *o);

/* Every name must be a registered policy: MS_ERR_NOTFOUND naming the first that is not, with
 * the closest known name (the message pol_plan gives), so that a command can refuse a
 * misspelled policy before it runs any. */
ms_status pol_names_check(const char *const *policies, size_t n, ms_error *err);

/* An alpha override (o->alpha >= 0) must be read by at least one of the n named policies
 * (pol_policy.reads_alpha); MS_ERR_INVALID naming the policies that read it otherwise.
 * Unknown names are skipped. */
ms_status pol_alpha_check(const char *const *policies, size_t n, const pol_opts *o,
                          ms_error *err);

/* p's knob keys, sorted and without repeats, separated by single blanks, into buf (always
 * NUL-terminated; truncated to size). Returns the length the whole list needs. */
size_t pol_knob_list(const pol_policy *p, char *buf, size_t size);

/* The knobs pol_plan itself reads for any policy (memory_plan=1: MEMO's bi-level plan). */
typedef struct pol_common_knobs {
    int memory_plan;          /* 1: the bi-level static memory plan after the policy */
    double plan_l1_s, plan_l2_s; /* its effort limits, seconds */
    int strict_layers;        /* 1: a layer the plan cannot place fails it */
    uint64_t given;
} pol_common_knobs;
extern const knobtab pol_common_knob_table;

/* Checks the common knobs' values (0/1 flags, effort limits in (0, 3600) s) whichever policy
 * runs: pol_plan calls it before every policy, MEMO's knob reader too. k (may be NULL) gets
 * them. */
ms_status pol_common_knobs_check(const pol_opts *o, pol_common_knobs *k, ms_error *err);

/* ---- helpers for policy implementations ---- */

/* A new plan for policy `name` carrying o's allocator, allocator knobs and (if given) the
 * alpha override as knob "alpha"; every knob of o is copied into the plan so that the plan
 * file records how it was made. default_decision is PD_KEEP; the lowering is the one the
 * policy's registry row names. */
ms_status pol_plan_new(const char *name, const pol_opts *o, plan_t **out, ms_error *err);

#endif

/* cmd_list.c — `memsim list`: every model, machine, policy and allocator memsim knows, each
 * with a one-line description and the paper or source it comes from, and the knob tables
 * of the policies and the generator as the docs show them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/alloc.h"
#include "planners/policy.h"
#include "sim/auto.h"
#include "sim/cli.h"
#include "sim/cmds.h"
#include "traces/gen.h"
#include "base/knobtab.h"
#include "traces/machine.h"
#include "traces/models.h"

static void list_machines(void)
{
    char **names;
    size_t n;
    ms_error err;
    printf("machines (profiles in %s/machines):\n", machine_data_dir());
    if (machine_list(&names, &n, &err) != MS_OK) {
        printf("  (cannot list: %s)\n", err.msg);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        machine_profile *p;
        if (machine_load_named(names[i], &p, &err) == MS_OK) {
            printf("  %-16s %s, %.0f GiB, %.0f TFLOP/s bf16, link %.1f GB/s — %s\n", names[i],
                   p->m.gpu_name, (double)p->m.gpu_hbm_bytes / MS_GiB,
                   p->m.gpu_peak_bf16_flops / 1e12, p->m.link_h2d_Bps / 1e9,
                   p->description ? p->description : "");
            machine_profile_free(p);
        } else {
            printf("  %-16s (invalid: %s)\n", names[i], err.msg);
        }
        free(names[i]);
    }
    free(names);
}

static void list_policies(void)
{
    size_t n;
    const pol_policy *const *r = pol_registry(&n);
    printf("policies:\n");
    for (size_t i = 0; i < n; i++) {
        char all[2048], own[2048];
        knobtab_summary(r[i]->own_knobs, own, sizeof own);
        printf("  %-16s %s [%s]%s%s%s\n", r[i]->name, r[i]->desc, r[i]->source,
               own[0] ? " knobs: " : "", own, r[i]->reads_alpha ? " (reads --alpha)" : "");
        /* every key --knob accepts for it (its own, its lowering's, the memory plan's) */
        pol_knob_list(r[i], all, sizeof all);
        printf("  %-16s --knob keys: %s\n", "", all[0] ? all : "none");
        if (r[i]->form != POL_FORM_PLAIN)
            printf("  %-16s workload: generated in ZeRO-Offload's form (--gen offload=1) "
                   "unless --trace or --gen offload is given\n", "");
    }
    /* not a registry row: it simulates its candidates (sim/auto.c) */
    printf("  %-16s %s [memsim's search across the families, docs/POLICIES.md]\n", AUTO_POLICY,
           AUTO_DESC);
    printf("  %-16s --knob keys: any of the policies' (given, each candidate runs with it)\n",
           "");
}

/* Every policy's knob tables, each once, in registry order, as one Markdown table (the one
 * docs/POLICIES.md shows; tests/check_cli.sh compares them). */
static void list_knobs(void)
{
    size_t n, m = 0;
    const pol_policy *const *r = pol_registry(&n);
    const knobtab *all[128];
    for (size_t i = 0; i < n; i++)
        for (const knobtab *const *t = r[i]->knob_tables; t && *t; t++) {
            size_t j = 0;
            while (j < m && all[j] != *t) j++;
            if (j == m && m < 128) all[m++] = *t;
        }
    knobtab_write_markdown(stdout, all, m);
}

static void list_allocators(void)
{
    size_t n;
    const alloc_vtable *const *r = alloc_registry(&n);
    printf("allocators:\n");
    for (size_t i = 0; i < n; i++)
        printf("  %-16s %s [%s]\n", r[i]->name, r[i]->desc, r[i]->source);
}

int cmd_list(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    if (!strcmp(what, "--help") || !strcmp(what, "-h")) {
        printf("usage: memsim list [models|machines|policies|allocators|knobs|gen-knobs]\n"
               "Lists what memsim knows, with one-line descriptions and sources; knobs and\n"
               "gen-knobs print the policies' and the generator's knob tables in Markdown.\n"
               "\nexamples (from the source directory, sim/ on the PATH):\n"
               "  memsim list\n"
               "  memsim list machines\n"
               "  memsim list policies\n");
        return MS_EXIT_OK;
    }
    if (argc > 2) {
        fprintf(stderr, "memsim list: unexpected argument '%s'\n", argv[2]);
        return MS_EXIT_USAGE;
    }
    int all = !strcmp(what, "all"), any = 0;
    if (all || !strcmp(what, "models")) {
        printf("models:\n");
        model_list(stdout);
        any = 1;
    }
    if (all || !strcmp(what, "machines")) list_machines(), any = 1;
    if (all || !strcmp(what, "policies")) list_policies(), any = 1;
    if (all || !strcmp(what, "allocators")) list_allocators(), any = 1;
    if (!strcmp(what, "knobs")) list_knobs(), any = 1;
    if (!strcmp(what, "gen-knobs")) {
        const knobtab *g = &gen_knob_table;
        knobtab_write_markdown(stdout, &g, 1);
        any = 1;
    }
    if (!any) {
        fprintf(stderr, "memsim list: unknown category '%s' (models, machines, policies, "
                        "allocators, knobs, gen-knobs)\n", what);
        return MS_EXIT_USAGE;
    }
    return MS_EXIT_OK;
}

/* test_knob.c — unit tests for the typed knob tables: base/knobtab.c (defaults, parsing,
 * the given mask, the closest key, the key list) and planners/knob.c over the policies'
 * tables, the chunk lowering's and the generator's. */
#include <string.h>

#include "planners/knob.h"
#include "planners/protrain/lower_chunks.h"
#include "planners/policy.h"
#include "tests/tap.h"
#include "traces/gen.h"

/* Every row's default is a value its own parser accepts (a table cannot document a default
 * it would refuse). */
static void test_defaults(void)
{
    size_t n;
    const pol_policy *const *r = pol_registry(&n);
    int bad = 0, rows = 0;
    static _Alignas(16) unsigned char scratch[1 << 14];
    for (size_t i = 0; i < n; i++)
        for (const knobtab *const *t = r[i]->knob_tables; t && *t; t++)
            for (size_t j = 0; j < (*t)->n; j++) {
                const knobtab_row *row = &(*t)->rows[j];
                ms_error err;
                rows++;
                if (row->def && knobtab_set(*t, row, row->def, scratch, &err) != MS_OK) {
                    bad++;
                    TAP_NOTE("%s: %s", r[i]->name, err.msg);
                }
                if (row->off >= sizeof scratch - 8) bad++;
            }
    TAP_OK(rows > 100 && bad == 0, "every default of every policy's %d rows parses", rows);
}

static void test_parse(void)
{
    plan_t *p = plan_new("t", "caching");
    lc_knobs k;
    ms_error err;
    TAP_OK(knob_from_plan(&lc_knob_table, p, &k, &err) == MS_OK && k.host_bytes_per_param == 14 &&
           !knobtab_given(&lc_knob_table, &k, &k.n_persist), "absent knobs take their defaults");
    plan_set_knob(p, "n_persist", "3");
    plan_set_knob(p, "coll", "stream");
    TAP_OK(knob_from_plan(&lc_knob_table, p, &k, &err) == MS_OK && k.n_persist == 3 &&
           k.coll == LC_COLL_STREAM && knobtab_given(&lc_knob_table, &k, &k.n_persist) &&
           !knobtab_given(&lc_knob_table, &k, &k.n_buffer), "given knobs parsed and marked");
    plan_set_knob(p, "n_buffer", "abc");
    TAP_OK(knob_from_plan(&lc_knob_table, p, &k, &err) == MS_ERR_INVALID &&
           !strcmp(err.msg, "plan knob n_buffer=abc: expected an integer >= 0"),
           "a malformed value is named with what is expected: %s", err.msg);
    plan_free(p);
    pol_knob kv[] = { { "memory_plan", "2" } };
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = kv;
    o.n_knobs = 1;
    TAP_OK(pol_common_knobs_check(&o, NULL, &err) == MS_ERR_INVALID &&
           !strcmp(err.msg, "knob memory_plan: '2' is not 0 or 1"), "option style: %s", err.msg);
}

static void test_names(void)
{
    const knobtab *t = &lc_knob_table;
    TAP_OK(knobtab_closest(&t, 1, "n_persits") && !strcmp(knobtab_closest(&t, 1, "n_persits"),
                                                           "n_persist"), "the closest key");
    TAP_OK(!knobtab_closest(&t, 1, "zzzzzzzzzz"), "nothing close: no hint");
    char buf[4096];
    knobtab_key_list(&t, 1, buf, sizeof buf);
    TAP_OK(strstr(buf, "chunk_bytes") && strstr(buf, "swap_lead"), "the key list: %s", buf);
    const pol_policy *mf = pol_find("go-memferry");
    TAP_OK(mf && pol_knob_known(mf, "grad_host.3") && !pol_knob_known(mf, "grad_host."),
           "a family row covers its keys");
}

static void test_gen(void)
{
    gen_config c;
    ms_error err;
    gen_config_default(&c);
    TAP_OK(c.lora_rank == 8 && c.attn_dropout == 1 && c.opt_bytes_per_param == 12,
           "the generator's defaults come from its table");
    TAP_OK(gen_config_set(&c, "loss", "megatron-inplace", &err) == MS_OK &&
           strstr(gen_config_keys(), "megatron-inplace"),
           "every loss the parser accepts is in the key list: %s", gen_config_keys());
    TAP_OK(gen_config_set(&c, "lora_rank", "0", &err) == MS_ERR_INVALID &&
           !strcmp(err.msg, "generator knob lora_rank: '0' is not a whole number from 1 to "
                            "1048576"), "generator style: %s", err.msg);
    TAP_OK(gen_config_set(&c, "nosuch", "1", &err) == MS_ERR_INVALID &&
           strstr(err.msg, "unknown generator knob 'nosuch'"), "an unknown key");
}

/* A struct written back into a plan by its table reads back equal; the rows a table records
 * only when not zero, or never, are left out; the one-line summary comes from the rows. */
static void test_write(void)
{
    lc_knobs k, back;
    ms_error err;
    lc_knobs_default(&k);
    k.n_persist = 3;
    k.coll = LC_COLL_STREAM;
    k.persist_gather = LC_PG_NEXT;
    k.coll_link_eff = 0.25;
    k.chunk_bytes = UINT64_C(3) << 30;
    k.chunk_search_bytes = UINT64_C(1) << 20;
    plan_t *p = plan_new("t", "caching");
    TAP_OK(p && lc_knobs_to_plan(&k, p, &err) == MS_OK, "lc_knobs_to_plan writes through the table");
    TAP_OK(p && lc_knobs_from_plan(p, &back, &err) == MS_OK && back.n_persist == 3 &&
           back.coll == LC_COLL_STREAM && back.persist_gather == LC_PG_NEXT &&
           back.coll_link_eff == 0.25 && back.chunk_bytes == (UINT64_C(3) << 30),
           "what it wrote reads back as the same knobs");
    TAP_OK(p && !strcmp(p->lowering, "chunks") && plan_get_knob(p, "chunks") &&
           !strcmp(plan_get_knob(p, "chunks"), "1") && !strcmp(plan_get_knob(p, "coll"), "stream"),
           "the lowering, its marker and an enum by its name");
    TAP_OK(p && !plan_get_knob(p, "chunk_search") && !plan_get_knob(p, "init_device_bytes") &&
           !plan_get_knob(p, "host_pinned_tensors") && plan_get_knob(p, "n_swap"),
           "a never-recorded row and zero not-zero-only rows are left out, the others written");
    k.init_device_bytes = 4096;
    TAP_OK(p && lc_knobs_to_plan(&k, p, &err) == MS_OK && plan_get_knob(p, "init_device_bytes") &&
           !strcmp(plan_get_knob(p, "init_device_bytes"), "4096"),
           "a not-zero-only row is written once it is not zero");
    plan_free(p);
    char sum[1024];
    knobtab_summary(&lc_marker_table, sum, sizeof sum);
    TAP_OK(!strcmp(sum, "chunks=0|1 (default 0)"), "a table's one-line summary: '%s'", sum);
    knobtab_summary(NULL, sum, sizeof sum);
    TAP_OK(sum[0] == 0, "no table, no summary");
}

int main(void)
{
    test_defaults();
    test_parse();
    test_names();
    test_gen();
    test_write();
    return tap_done();
}

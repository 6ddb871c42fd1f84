/* test_plan.c — unit tests of the plan file (planners/plan.c): building, sorting with
 * last-wins duplicates, lookups with the default decision, a deterministic writer whose output
 * reads back to the same bytes, and FILE:LINE errors; the `lowering` line, and the lowering
 * a file without one is given; the policy registry's knob check (planners/policy.h), which
 * refuses keys the plan's readers never look at, and the lowering each policy's plans name.
 * Run by make check. */
#define _POSIX_C_SOURCE 200809L
#include "tests/tap.h"
#include "planners/lower.h"
#include "planners/plan.h"
#include "planners/policy.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tpath(const char *name)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 16);
    size_t n = b ? fread(b, 1, (1 << 16) - 1, f) : 0;
    (void)n;
    fclose(f);
    return b;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(99); }
    fputs(text, f);
    fclose(f);
}

static plan_t *build(void)
{
    plan_t *p = plan_new("memo", "static");
    p->default_decision = PD_RECOMPUTE;
    p->alloc_cfg.max_split_size_bytes = 256ULL << 20;
    p->alloc_cfg.roundup_power2_divisions = 4;
    p->alloc_cfg.expandable_va_factor = 0.1 + 0.2;
    p->arena_bytes = 3ULL << 30;
    /* out of order, with a duplicate that the later entry wins */
    plan_set_tensor(p, 30, PD_SWAP, 0.25);
    plan_set_tensor(p, 10, PD_KEEP, 0);
    plan_set_tensor(p, 20, PD_DHA, 0);
    plan_set_tensor(p, 30, PD_SWAP, 1.0 / 3.0);
    plan_set_layer(p, 2, PM_DFGB, 1);
    plan_set_layer(p, 0, PM_GFGB, 0);
    plan_set_layer(p, 1, PM_DHA, 0);
    plan_set_layer(p, 1, PM_DHA, 1); /* replaces */
    plan_set_offset(p, 20, 4096);
    plan_set_offset(p, 10, 0);
    plan_set_knob(p, "zeta", "last");
    plan_set_knob(p, "alpha.sweep", "0.1 0.2 0.5");
    plan_set_knob(p, "zeta", "replaced");
    return p;
}

static void test_build_and_roundtrip(void)
{
    ms_error err;
    plan_t *p = build();
    TAP_OK(p != NULL, "plan_new");
    const char *a = tpath("a.plan"), *b = tpath("b.plan");
    TAP_OK(plan_write(p, a, &err) == MS_OK, "plan_write before sorting");
    plan_sort(p);
    TAP_OK(p->n_tensors == 3 && p->tensors[0].id == 10 && p->tensors[2].id == 30 &&
               p->tensors[2].alpha == 1.0 / 3.0,
           "plan_sort orders by id and keeps the last entry of a duplicate");
    double alpha = -1;
    TAP_OK(plan_decision_for(p, 30, &alpha) == PD_SWAP && alpha == 1.0 / 3.0 &&
               plan_decision_for(p, 99, &alpha) == PD_RECOMPUTE && alpha == 0 &&
               plan_find_tensor(p, 99) == NULL,
           "lookups: listed tensors and the default decision");
    uint64_t off = 1;
    TAP_OK(plan_find_offset(p, 20, &off) && off == 4096 && plan_find_offset(p, 10, &off) &&
               off == 0 && !plan_find_offset(p, 30, &off),
           "offsets");
    const plan_layer *l1 = plan_find_layer(p, 1);
    TAP_OK(p->n_layers == 3 && l1 && l1->pmode == PM_DHA && l1->grad_on_host == 1 &&
               plan_find_layer(p, 7) == NULL,
           "layers: set_layer replaces");
    TAP_OK(plan_get_knob(p, "zeta") && strcmp(plan_get_knob(p, "zeta"), "replaced") == 0 &&
               plan_get_knob(p, "nope") == NULL,
           "knobs");
    TAP_OK(plan_write(p, b, &err) == MS_OK, "plan_write after sorting");
    char *ta = slurp(a), *tb = slurp(b);
    TAP_OK(ta && tb && strcmp(ta, tb) == 0, "the writer sorts: same file before and after plan_sort");

    plan_t *q = NULL;
    ms_status st = plan_load(a, &q, &err);
    TAP_OK(st == MS_OK, "plan_load (%s)", st ? err.msg : "ok");
    if (q) {
        const char *c = tpath("c.plan");
        char *tc = NULL;
        TAP_OK(plan_write(q, c, &err) == MS_OK && (tc = slurp(c)) && strcmp(ta, tc) == 0,
               "write -> read -> write is byte-identical");
        free(tc);
        TAP_OK(strcmp(q->policy, "memo") == 0 && strcmp(q->allocator, "static") == 0 &&
                   q->alloc_cfg.max_split_size_bytes == 256ULL << 20 &&
                   q->alloc_cfg.roundup_power2_divisions == 4 &&
                   q->alloc_cfg.expandable_va_factor == 0.1 + 0.2 &&
                   q->alloc_cfg.stitch_limit_bytes == UINT64_MAX &&
                   q->alloc_cfg.frag_limit_bytes == 128ULL << 20 && q->arena_bytes == 3ULL << 30 &&
                   q->default_decision == PD_RECOMPUTE,
               "every setting reads back, 'unlimited' included");
        TAP_OK(plan_get_knob(q, "alpha.sweep") &&
                   strcmp(plan_get_knob(q, "alpha.sweep"), "0.1 0.2 0.5") == 0,
               "a knob value with blanks reads back");
        plan_free(q);
    }
    free(ta);
    free(tb);

    FILE *fp = tmpfile();
    TAP_OK(fp && plan_write_fp(p, fp) == MS_OK && ftell(fp) > 0, "plan_write_fp");
    if (fp) fclose(fp);

    TAP_OK(plan_set_tensor(p, 1, PD_SWAP, 1.5) == MS_ERR_INVALID &&
               plan_set_knob(p, "two words", "x") == MS_ERR_INVALID &&
               plan_set_knob(p, "k", "") == MS_ERR_INVALID && plan_new("bad name", "x") == NULL,
           "setters refuse what would not read back");
    plan_free(p);
    plan_free(NULL);
}

/* Loads text and checks the error is exactly "PATH:LINE: start-of-message...". */
static void expect_err(const char *text, int line, const char *msg, const char *desc)
{
    const char *p = tpath("bad.plan");
    put(p, text);
    plan_t *q = NULL;
    ms_error err;
    ms_status st = plan_load(p, &q, &err);
    char want[600];
    if (line) snprintf(want, sizeof want, "%s:%d: %s", p, line, msg);
    else snprintf(want, sizeof want, "%s: %s", p, msg);
    TAP_OK(st == MS_ERR_PARSE && q == NULL && strncmp(err.msg, want, strlen(want)) == 0,
           "%s: %s", desc, st ? err.msg : "(loaded)");
    plan_free(q);
}

#define HDR "memsim-plan 1\npolicy p\nallocator caching\n"

static void test_errors(void)
{
    expect_err(HDR "tensor 5 swap 1.5\n", 4, "tensor: ALPHA 1.5 outside [0,1]", "alpha above 1");
    expect_err(HDR "tensor 5 swap -0.1\n", 4, "tensor: ALPHA -0.1 outside [0,1]", "alpha below 0");
    expect_err(HDR "tensor 5 keep\n# c\ntensor 5 swap\n", 6,
               "duplicate tensor 5 (first at line 4)", "duplicate tensor");
    expect_err(HDR "tensor 5 evict\n", 4, "tensor: unknown DECISION 'evict'", "unknown decision");
    expect_err(HDR "layer 0 gfgb grad=disk\n", 4, "layer: expected grad=gpu or grad=host",
               "bad gradient placement");
    expect_err(HDR "layer 0 xyz grad=gpu\n", 4, "layer: unknown PMODE 'xyz'", "unknown pmode");
    expect_err(HDR "alloc.max_split_size_bytes lots\n", 4,
               "alloc.max_split_size_bytes: bad byte count 'lots'", "bad byte count");
    expect_err(HDR "alloc.bogus 1\n", 4, "unknown allocator knob 'alloc.bogus'", "unknown alloc key");
    expect_err(HDR "policy q\n", 4, "duplicate 'policy' line (first at line 2)", "duplicate policy");
    expect_err("memsim-plan 1\npolicy p\n", 0, "missing 'allocator' line", "missing allocator");
    expect_err("memsim-plan 3\n", 1, "plan format version 3 is newer than this reader",
               "newer major version");
    expect_err(HDR "offset 1 x\n", 4, "offset: bad BYTES 'x'", "bad offset");
    expect_err(HDR "knob only\n", 4, "knob: expected 'knob KEY VALUE'", "knob without value");
    expect_err(HDR "frobnicate\n", 4, "unknown line 'frobnicate'", "unknown line");
    expect_err(HDR "default keep extra\n", 4, "default: expected 1 field, got more",
               "wrong field count");

    /* accepted variants: suffixes, comments, swap without alpha means alpha 1 */
    const char *p = tpath("ok.plan");
    put(p, "# hand-written\n" HDR "alloc.frag_limit_bytes 64MiB\narena 2GiB\n"
           "tensor 9 swap\n  # indented comment\ntensor 8 recompute 0\n");
    plan_t *q = NULL;
    ms_error err;
    ms_status st = plan_load(p, &q, &err);
    double alpha = 0;
    TAP_OK(st == MS_OK && q->alloc_cfg.frag_limit_bytes == 64ULL << 20 &&
               q->arena_bytes == 2ULL << 30 && plan_decision_for(q, 9, &alpha) == PD_SWAP &&
               alpha == 1.0 && plan_decision_for(q, 8, &alpha) == PD_RECOMPUTE,
           "suffixes, comments, and swap without ALPHA (= 1) are accepted");
    plan_free(q);
}

static ms_status check1(const char *policy, const char *key, ms_error *err)
{
    pol_knob k = { key, "1" };
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = &k;
    o.n_knobs = 1;
    return pol_knobs_check(&policy, 1, &o, err);
}

static void test_knob_check(void)
{
    ms_error err;
    TAP_OK(pol_knob_known(pol_find("memo"), "host_round") &&
           pol_knob_known(pol_find("memo"), "record_stream") &&
           !pol_knob_known(pol_find("memo"), "reserve"),
           "memo reads its own knobs and plain lowering's, not go-memferry's");
    TAP_OK(pol_knob_known(pol_find("go-memferry"), "grad_host.3") &&
           !pol_knob_known(pol_find("go-memferry"), "grad_host.") &&
           !pol_knob_known(pol_find("memferry"), "reserve"),
           "a prefix name covers grad_host.N but not the bare prefix; reserve is GO-MemFerry's");
    TAP_OK(check1("protrain", "tie_tol", &err) == MS_OK &&
           check1("zero3-offload", "max_live_params", &err) == MS_OK,
           "known keys pass");
    TAP_OK(check1("protrain", "tie_tl", &err) == MS_ERR_INVALID &&
           strstr(err.msg, "did you mean 'tie_tol'"), "a typo fails with the closest key: %s",
           err.msg);
    TAP_OK(check1("keep-all", "zzzzzzzz", &err) == MS_ERR_INVALID &&
           !strstr(err.msg, "did you mean"), "no suggestion when nothing is close");
    TAP_OK(check1("no-such-policy", "foo", &err) == MS_OK,
           "an unknown policy is left to the planner's own error");
    const char *two[] = { "full-recompute", "memo" };
    pol_knob k = { "keep_last", "3" };
    pol_opts o;
    pol_opts_default(&o);
    o.knobs = &k;
    o.n_knobs = 1;
    TAP_OK(pol_knobs_check(two, 2, &o, &err) == MS_OK &&
           pol_knobs_check(two, 1, &o, &err) == MS_ERR_INVALID,
           "several policies: a key one of them reads is accepted");
    char list[4096];
    size_t need = pol_knob_list(pol_find("memo"), list, sizeof list), small = 0;
    char tiny[8];
    small = pol_knob_list(pol_find("memo"), tiny, sizeof tiny);
    TAP_OK(need == strlen(list) && small == need && strlen(tiny) == 7 &&
           strstr(list, "alpha_step drop_at host_bytes") == list,
           "the key list is sorted, says its length and truncates safely");
}

/* The lowering plan_load gives text (NULL when it does not load), in a static buffer. */
static const char *lowering_of(const char *text)
{
    static char name[sizeof(((plan_t *)0)->lowering)];
    const char *p = tpath("ok.plan");
    put(p, text);
    plan_t *q = NULL;
    ms_error err;
    if (plan_load(p, &q, &err) != MS_OK) return NULL;
    snprintf(name, sizeof name, "%s", q->lowering);
    plan_free(q);
    return name;
}

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* A plan names its lowering; a file from before the `lowering` line gets the one its markers
 * chose then; lower_schedule refuses a name no lowering has. */
static void test_lowering(void)
{
    plan_t *p = plan_new("x", "caching");
    ms_error err;
    const char *a = tpath("a.plan");
    TAP_OK(p && same(p->lowering, "tensor") && plan_set_lowering(p, "chunks") == MS_OK &&
               plan_set_lowering(p, "") == MS_ERR_INVALID &&
               plan_set_lowering(p, "two words") == MS_ERR_INVALID &&
               plan_set_lowering(p, "a-name-too-long-to-fit") == MS_ERR_INVALID &&
               same(p->lowering, "chunks"),
           "plan_new names tensor; plan_set_lowering takes a short token, refuses the rest");
    char *text = p && plan_write(p, a, &err) == MS_OK ? slurp(a) : NULL;
    TAP_OK(text && strstr(text, "\npolicy x\nlowering chunks\nallocator caching\n"),
           "the writer puts the lowering line after the policy line");
    TAP_OK(same(lowering_of(text ? text : ""), "chunks"), "the lowering line reads back");
    free(text);
    plan_free(p);
    TAP_OK(same(lowering_of(HDR), "tensor") &&
               same(lowering_of(HDR "knob chunks 1\n"), "chunks") &&
               same(lowering_of(HDR "knob chunks 0\n"), "tensor") &&
               same(lowering_of(HDR "knob host_params 1\n"), "dha") &&
               same(lowering_of(HDR "knob grad_host.3 17 18\n"), "dha") &&
               same(lowering_of(HDR "layer 0 dfgb grad=gpu\n"), "dha") &&
               same(lowering_of(HDR "layer 0 gfgb grad=host\n"), "dha") &&
               same(lowering_of(HDR "layer 0 gfgb grad=gpu\nknob chunks 1\n"), "chunks") &&
               same(lowering_of(HDR "knob chunks 1\nknob host_params 1\n"), "dha"),
           "without a lowering line: dha for host_params=1, grad_host.N or a DHA layer, "
           "chunks for chunks=1, tensor otherwise (the markers of older files)");
    TAP_OK(same(lowering_of(HDR "knob host_params 1\nlowering tensor\n"), "tensor"),
           "a lowering line wins over the old markers");
    expect_err(HDR "lowering -\n", 4, "lowering: expected a NAME", "lowering without a name");
    expect_err(HDR "lowering dha\nlowering dha\n", 5, "duplicate 'lowering' line (first at line 4)",
               "duplicate lowering line");
    trace_t *t = trace_new();
    p = plan_new("x", "caching");
    schedule_t *s = NULL;
    ms_status st = p && t ? plan_set_lowering(p, "warp") : MS_ERR_NOMEM;
    if (st == MS_OK) st = lower_schedule(t, p, NULL, NULL, &s, &err);
    TAP_OK(st == MS_ERR_INVALID && !s && strstr(err.msg, "lowering 'warp'") &&
               strstr(err.msg, "tensor, chunks, dha"),
           "lower_schedule refuses a lowering no row names: %s", st ? err.msg : "(lowered)");
    size_t n = 0;
    const lower_backend *const *reg = lower_registry(&n);
    int found = n == 3;
    for (size_t i = 0; found && i < n; i++) found = lower_find(reg[i]->name) == reg[i];
    TAP_OK(found && same(reg[0]->name, "tensor") && reg[0] == &lower_backend_tensor &&
               !lower_find("warp"),
           "the table: tensor, chunks, dha, each found by its name");
    plan_free(p);
    trace_free(t);
}

/* Every policy's plans name the lowering its registry row does, through pol_plan_new. */
static void test_policy_lowerings(void)
{
    size_t n = 0;
    const pol_policy *const *reg = pol_registry(&n);
    int right = n > 0, chunks = 0, dha = 0;
    for (size_t i = 0; i < n; i++) {
        plan_t *p = NULL;
        ms_error err;
        const char *want = reg[i]->lowering ? reg[i]->lowering : "tensor";
        right &= pol_plan_new(reg[i]->name, NULL, &p, &err) == MS_OK && same(p->lowering, want) &&
                 lower_find(want) != NULL;
        chunks += same(want, "chunks");
        dha += same(want, "dha");
        plan_free(p);
    }
    TAP_OK(right && chunks == 4 && dha == 3, "each policy's plans name its row's lowering "
           "(%d chunk policies, %d DHA policies)", chunks, dha);
    TAP_OK(pol_find("memo")->post_plan && pol_find("keep-all")->post_plan &&
               pol_find("protrain")->post_plan && !pol_find("memferry")->post_plan,
           "the memory-plan pass is declared by the rows that take memory_plan=1");
}

/* The plan files experiments/validate keeps were written before plans named their lowering:
 * each loads with the lowering its policy's row names now. Returns files checked, wrong. */
static void stored_plans_in(const char *dir, int *files, int *wrong)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".plan")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        plan_t *p = NULL;
        ms_error err;
        const pol_policy *row = NULL;
        int ok = plan_load(path, &p, &err) == MS_OK && (row = pol_find(p->policy)) &&
                 same(p->lowering, row->lowering ? row->lowering : "tensor");
        if (!ok) TAP_NOTE("%s: %s", path, p ? p->lowering : err.msg);
        (*files)++;
        *wrong += !ok;
        plan_free(p);
    }
    if (d) closedir(d);
}

static void test_stored_plans(void)
{
    const char *src = getenv("srcdir");
    static const char *const machines[] = { "h100-sxm", "h200-sxm" };
    int files = 0, wrong = 0;
    for (size_t i = 0; i < 2; i++) {
        char dir[768];
        snprintf(dir, sizeof dir, "%s/experiments/validate/plans/%s", src && *src ? src : ".",
                 machines[i]);
        stored_plans_in(dir, &files, &wrong);
    }
    TAP_OK(files > 0 && wrong == 0, "the %d stored validation plans (no lowering line) load "
           "with their policy's lowering (%d do not)", files, wrong);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-test-plan-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 99; }
    test_build_and_roundtrip();
    test_errors();
    test_knob_check();
    test_lowering();
    test_policy_lowerings();
    test_stored_plans();
    const char *files[] = {"a.plan", "b.plan", "c.plan", "bad.plan", "ok.plan"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) remove(tpath(files[i]));
    if (rmdir(tmpdir) != 0) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

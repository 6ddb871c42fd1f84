/* test_machine.c — unit tests of machine profiles (traces/machine.c): every shipped profile
 * loads, has a source for every number and round-trips byte-identically; every error names
 * file and line; the data directory and name lookup; FORMAT.md lists every key. Finds the
 * shipped profiles through $MEMSIM_DATADIR (or $srcdir/traces). Run by make check. */
#define _POSIX_C_SOURCE 200809L
#include "tests/tap.h"
#include "traces/machine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, r;
    char *b = malloc(cap + 1);
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) b[n] = '\0';
    if (len) *len = n;
    return b;
}

static int files_equal(const char *a, const char *b)
{
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static const char *const shipped[] = {"a100-80g-pcie3", "a100-80g-pcie4", "a800-8gpu",
                                      "h100-sxm",       "h200-sxm",       "rtx3090-pcie3",
                                      "v100-32g-pcie3"};
#define NSHIPPED (sizeof shipped / sizeof *shipped)

static void test_shipped(void)
{
    ms_error err;
    char **names = NULL;
    size_t n = 0;
    ms_status st = machine_list(&names, &n, &err);
    int all = st == MS_OK && n >= NSHIPPED;
    for (size_t i = 0; all && i < NSHIPPED; i++) {
        int found = 0;
        for (size_t j = 0; j < n; j++) found |= strcmp(names[j], shipped[i]) == 0;
        all &= found;
    }
    TAP_OK(all, "machine_list finds the %zu shipped profiles in %s", NSHIPPED, machine_data_dir());
    int sorted = 1;
    for (size_t j = 1; j < n; j++) sorted &= strcmp(names[j - 1], names[j]) < 0;
    TAP_OK(st == MS_OK && sorted, "machine_list is sorted");
    for (size_t j = 0; j < n; j++) free(names[j]);
    free(names);

    size_t nf;
    machine_fields(&nf);
    for (size_t i = 0; i < NSHIPPED; i++) {
        machine_profile *p = NULL;
        st = machine_load_named(shipped[i], &p, &err);
        TAP_OK(st == MS_OK && strcmp(p->m.name, shipped[i]) == 0, "%s loads (%s)", shipped[i],
               st ? err.msg : "ok");
        if (!p) continue;
        size_t unsourced = 0;
        const machine_field *mf = machine_fields(&nf);
        for (size_t k = 0; k < nf; k++) unsourced += mf[k].required && p->sources[k] == NULL;
        TAP_OK(unsourced == 0 && p->description, "%s: every field has a source note", shipped[i]);
        const char *a = tpath("a.machine"), *b = tpath("b.machine");
        machine_profile *q = NULL;
        int ok = machine_write(p, a, &err) == MS_OK && machine_load(a, &q, &err) == MS_OK &&
                 machine_write(q, b, &err) == MS_OK && files_equal(a, b) &&
                 memcmp(&p->m, &q->m, sizeof p->m) == 0;
        TAP_OK(ok, "%s: write -> read -> write is byte-identical and keeps every value",
               shipped[i]);
        machine_profile_free(q);
        machine_profile_free(p);
    }
    machine_profile_free(NULL);
}

static void test_values(void)
{
    ms_error err;
    machine_profile *p = NULL;
    ms_status st = machine_load_named("a800-8gpu", &p, &err);
    if (st != MS_OK) { TAP_OK(0, "a800-8gpu: %s", err.msg); return; }
    TAP_OK(p->m.gpu_hbm_bytes == 80ULL << 30 && p->m.host_mem_bytes == 2ULL << 40 &&
               p->m.vmm_granularity_bytes == 2u << 20 && p->m.gpu_peak_bf16_flops == 312e12 &&
               p->m.node_gpus == 8,
           "suffixed sizes (80GiB, 2TiB, 2MiB) and 1e12-style rates parse");
    TAP_OK(machine_usable_bytes(&p->m) == (80ULL << 30) - (3ULL << 29),
           "machine_usable_bytes = hbm - reserved");
    TAP_OK(fabs(machine_malloc_us(&p->m, 1ULL << 30) - (37 + 192)) < 1e-9 &&
               fabs(machine_free_us(&p->m, 2u << 20) - (37 + 192.0 / 512)) < 1e-9,
           "malloc/free latency = base + per_gib * GiB");
    machine_profile_free(p);
}

/* Writes the a800 profile with the line of `key` replaced by `repl` (NULL: dropped, or, with
 * dup set, repeated), loads it and returns the error and the 1-based line of the change. */
static ms_status load_variant(const char *key, const char *repl, int dup, ms_error *err,
                              int *line_out)
{
    char src[1024];
    snprintf(src, sizeof src, "%s/machines/a800-8gpu.machine", machine_data_dir());
    char *text = slurp(src, NULL);
    const char *out = tpath("v.machine");
    FILE *f = fopen(out, "w");
    int line = 0, changed = 0;
    for (char *s = text, *nl; s && *s; s = nl + 1) {
        nl = strchr(s, '\n');
        if (!nl) break;
        *nl = '\0';
        line++;
        size_t kl = strlen(key);
        int hit = strncmp(s, key, kl) == 0 && (s[kl] == ' ' || s[kl] == '\t');
        if (hit && !changed) {
            changed = line;
            if (dup) fprintf(f, "%s\n%s\n", s, s), changed++;
            else if (repl) fprintf(f, "%s\n", repl);
        } else {
            fprintf(f, "%s\n", s);
        }
    }
    fclose(f);
    free(text);
    *line_out = changed;
    machine_profile *p = NULL;
    ms_status st = machine_load(out, &p, err);
    machine_profile_free(p);
    return st;
}

static void expect(const char *key, const char *repl, int dup, const char *msg_fmt,
                   const char *desc)
{
    ms_error err;
    int line;
    ms_status st = load_variant(key, repl, dup, &err, &line);
    char want[1024], tail[512];
    snprintf(tail, sizeof tail, msg_fmt, line - 1); /* only the duplicate test has a %d */
    if (strncmp(tail, ": ", 2) == 0) snprintf(want, sizeof want, "%s%s", tpath("v.machine"), tail);
    else snprintf(want, sizeof want, "%s:%d: %s", tpath("v.machine"), line, tail);
    TAP_OK(st == MS_ERR_PARSE && strncmp(err.msg, want, strlen(want)) == 0, "%s: %s", desc,
           st ? err.msg : "(loaded)");
}

static void test_errors(void)
{
    expect("gpu.hbm_bytes", "gpu.hbm_byte 80GiB", 0,
           "unknown key 'gpu.hbm_byte' (did you mean 'gpu.hbm_bytes'?)", "unknown key suggests");
    expect("gpu.name", NULL, 1, "duplicate key 'gpu.name' (first at line %d)", "duplicate key");
    expect("node.net_lat_us", NULL, 0, ": missing required key 'node.net_lat_us'",
           "missing required key");
    expect("link.h2d_Bps", "link.h2d_Bps -5e9  # x", 0,
           "link.h2d_Bps: bad value '-5e9': a negative number", "negative number");
    expect("link.d2h_Bps", "link.d2h_Bps inf", 0,
           "link.d2h_Bps: bad value 'inf': not a finite number", "non-finite number");
    expect("gpu.gemm_eff", "gpu.gemm_eff 1.5", 0,
           "gpu.gemm_eff: bad value '1.5': an efficiency outside (0,1]", "efficiency above 1");
    expect("dha.other_eff", "dha.other_eff 0", 0,
           "dha.other_eff: bad value '0': an efficiency outside (0,1]", "efficiency 0");
    expect("gpu.reserved_bytes", "gpu.reserved_bytes 90GiB", 0,
           "gpu.reserved_bytes must be less than gpu.hbm_bytes", "reserved above hbm");
    expect("node.gpus", "node.gpus 0", 0, "node.gpus: bad value '0': less than 1",
           "zero GPUs per node");
    expect("memsim-machine", "memsim-machine 2", 0,
           "machine profile version 2 is newer than this reader", "newer major version");
    expect("gpu.hbm_bytes", "gpu.hbm_bytes 80XB", 0, "gpu.hbm_bytes: bad value '80XB': not a byte count",
           "bad size suffix");
}

static void test_names_and_dirs(void)
{
    ms_error err;
    machine_profile *p = NULL;
    ms_status st = machine_load_named("no-such-gpu", &p, &err);
    TAP_OK(st == MS_ERR_NOTFOUND && strstr(err.msg, "unknown machine 'no-such-gpu'") &&
               strstr(err.msg, "h200-sxm"),
           "an unknown name lists the known ones: %s", err.msg);
    char src[1024];
    snprintf(src, sizeof src, "%s/machines/h100-sxm.machine", machine_data_dir());
    st = machine_load_named(src, &p, &err);
    TAP_OK(st == MS_OK && strcmp(p->m.name, "h100-sxm") == 0, "a path is loaded as a path");
    /* a data directory of our own */
    char *old = getenv("MEMSIM_DATADIR") ? strdup(getenv("MEMSIM_DATADIR")) : NULL;
    char mdir[600];
    snprintf(mdir, sizeof mdir, "%s/machines", tmpdir);
    if (mkdir(mdir, 0700) != 0) perror(mdir);
    snprintf(p->m.name, sizeof p->m.name, "mybox");
    char mine[700];
    snprintf(mine, sizeof mine, "%s/mybox.machine", mdir);
    TAP_OK(machine_write(p, mine, &err) == MS_OK, "write a profile into a private data dir");
    machine_profile_free(p);
    p = NULL;
    setenv("MEMSIM_DATADIR", tmpdir, 1);
    char **names = NULL;
    size_t n = 0;
    st = machine_list(&names, &n, &err);
    TAP_OK(strcmp(machine_data_dir(), tmpdir) == 0 && st == MS_OK && n == 1 &&
               strcmp(names[0], "mybox") == 0 && machine_load_named("mybox", &p, &err) == MS_OK,
           "$MEMSIM_DATADIR selects the data directory");
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    machine_profile_free(p);
    remove(mine);
    rmdir(mdir);
    if (old) setenv("MEMSIM_DATADIR", old, 1);
    else unsetenv("MEMSIM_DATADIR");
    free(old);

    machine_profile *z = machine_profile_new();
    TAP_OK(z && machine_write(z, tpath("z.machine"), &err) == MS_ERR_INVALID,
           "machine_write refuses a profile that would not read back (%s)", err.msg);
    machine_profile_free(z);

    machine_profile *q = machine_profile_new();
    int known = q ? machine_set_source(q, "gpu.peak_bf16_flops", "probe, 2026") : -1;
    int again = q ? machine_set_source(q, "gpu.peak_bf16_flops", "datasheet") : -1;
    int unknown = q ? machine_set_source(q, "gpu.no_such_key", "x") : 0;
    size_t nk;
    const machine_field *fk = machine_fields(&nk);
    const char *note = NULL;
    for (size_t i = 0; q && i < nk; i++)
        if (!strcmp(fk[i].key, "gpu.peak_bf16_flops")) note = q->sources[i];
    TAP_OK(known == 0 && again == 0 && unknown == -1 && note && !strcmp(note, "datasheet"),
           "machine_set_source sets a key's note, replaces it, refuses an unknown key");
    machine_profile_free(q);
}

static void test_format_doc(void)
{
    const char *srcdir = getenv("srcdir");
    char path[1024];
    if (srcdir && *srcdir) snprintf(path, sizeof path, "%s/traces/FORMAT.md", srcdir);
    else snprintf(path, sizeof path, "%s/FORMAT.md", machine_data_dir());
    char *doc = slurp(path, NULL);
    FILE *t = tmpfile();
    machine_write_key_table(t);
    long n = ftell(t);
    char *table = calloc(1, (size_t)n + 1);
    rewind(t);
    if (fread(table, 1, (size_t)n, t) != (size_t)n) table[0] = '\0';
    fclose(t);
    size_t missing = 0, rows = 0;
    for (char *s = table, *nl; doc && (nl = strchr(s, '\n')); s = nl + 1) {
        *nl = '\0';
        rows++;
        if (!strstr(doc, s)) {
            missing++;
            TAP_NOTE("not in FORMAT.md: %s", s);
        }
    }
    size_t nf;
    machine_fields(&nf);
    TAP_OK(doc && rows == nf + 2 && missing == 0,
           "FORMAT.md has the generated key table (%zu rows, %zu missing)", rows, missing);
    free(table);
    free(doc);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-test-machine-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 99; }
    const char *srcdir = getenv("srcdir");
    if (!getenv("MEMSIM_DATADIR") && srcdir && *srcdir) {
        char d[1024];
        snprintf(d, sizeof d, "%s/traces", srcdir);
        setenv("MEMSIM_DATADIR", d, 1);
    }
    test_shipped();
    test_values();
    test_errors();
    test_names_and_dirs();
    test_format_doc();
    const char *files[] = {"a.machine", "b.machine", "v.machine", "z.machine"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) remove(tpath(files[i]));
    if (rmdir(tmpdir) != 0) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

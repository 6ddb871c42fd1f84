/* fuzz_readers.c — a deterministic mutational fuzzer for the trace, machine-profile, plan,
 * snapshot, DSA and config.json readers. It writes one valid seed file of each kind, then
 * applies seeded random byte flips, truncations, insertions and line duplications/deletions
 * (sometimes gzip-compressing the result, sometimes corrupting the compressed bytes) and runs
 * every reader on it. It checks that nothing crashes, that every failure comes with a
 * "FILE:..." message, that whatever loads round-trips byte-identically (a config.json: has a
 * parameter count), and that trace_load, trace_check_file and trace_stats_file agree. The
 * trace's binary form is fuzzed from the same seed converted.
 * Usage: fuzz_readers [ITERATIONS_PER_READER [SEED]]  (defaults 3000 and 1). Run by make check. */
#define _POSIX_C_SOURCE 200809L
#include "tests/fuzz_util.h"
#include "tests/tap.h"
#include "memory/dsa.h"
#include "planners/plan.h"
#include "traces/hfconfig.h"
#include "traces/import_pytorch.h"
#include "traces/machine.h"
#include "traces/models.h"
#include "traces/trace.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>


typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void buf_reserve(buf *b, size_t need)
{
    if (need <= b->cap) return;
    size_t c = b->cap ? b->cap : 4096;
    while (c < need) c *= 2;
    b->p = realloc(b->p, c);
    if (!b->p) { fprintf(stderr, "out of memory\n"); exit(99); }
    b->cap = c;
}

static void buf_insert(buf *b, size_t at, const char *s, size_t n)
{
    buf_reserve(b, b->n + n);
    memmove(b->p + at + n, b->p + at, b->n - at);
    memcpy(b->p + at, s, n);
    b->n += n;
}

static void buf_erase(buf *b, size_t at, size_t n)
{
    memmove(b->p + at, b->p + at + n, b->n - at - n);
    b->n -= n;
}

static buf slurp(const char *path)
{
    buf b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(99); }
    char tmp[4096];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, f)) > 0) buf_insert(&b, b.n, tmp, r);
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b)
{
    buf x = slurp(a), y = slurp(b);
    int eq = x.n == y.n && (x.n == 0 || memcmp(x.p, y.p, x.n) == 0);
    free(x.p);
    free(y.p);
    return eq;
}

/* Start and length of a random line. */
static void pick_line(const buf *b, size_t *start, size_t *len)
{
    size_t at = rnd_below(b->n);
    size_t s = at, e = at;
    while (s > 0 && b->p[s - 1] != '\n') s--;
    while (e < b->n && b->p[e] != '\n') e++;
    if (e < b->n) e++; /* include the newline */
    *start = s;
    *len = e - s;
}

static const char *const tokens[] = {
    " ", "\n", "\t", "#", ",", "-", "-1", "0", "1", "1.5", "1e308", "-0", "inf", "nan", "4096",
    "18446744073709551615", "18446744073709551616", "9223372036854775808", "alloc", "free",
    "op", "mark", "meta", "iter", "phase", "layer", "tensor", "knob", "swap", "unlimited",
    "description", "gpu.hbm_bytes", "80GiB", "1.5K", "memsim-trace 2", "memsim-plan 1",
    "\r", "\x01", "\xff", "1,2,3", "grad=host", ".", "e", "x"};

static void mutate(buf *b)
{
    int steps = 1 + (int)rnd_below(4);
    for (int s = 0; s < steps; s++) {
        size_t start, len;
        switch (rnd_below(8)) {
        case 0: /* flip one bit */
            if (b->n) b->p[rnd_below(b->n)] ^= (char)(1u << rnd_below(8));
            break;
        case 1: /* overwrite a byte */
            if (b->n) b->p[rnd_below(b->n)] = (char)rnd_below(256);
            break;
        case 2: /* truncate */
            b->n = rnd_below(b->n + 1);
            break;
        case 3: { /* insert a token */
            const char *t = tokens[rnd_below(sizeof tokens / sizeof *tokens)];
            buf_insert(b, rnd_below(b->n + 1), t, strlen(t));
            break;
        }
        case 4: /* insert random bytes */
        {
            char r[8];
            size_t n = 1 + rnd_below(sizeof r);
            for (size_t i = 0; i < n; i++) r[i] = (char)rnd_below(256);
            buf_insert(b, rnd_below(b->n + 1), r, n);
            break;
        }
        case 5: /* duplicate a line */
            if (b->n) {
                pick_line(b, &start, &len);
                char *copy = malloc(len + 1);
                memcpy(copy, b->p + start, len);
                buf_insert(b, start, copy, len);
                free(copy);
            }
            break;
        case 6: /* delete a line */
            if (b->n) {
                pick_line(b, &start, &len);
                buf_erase(b, start, len);
            }
            break;
        default: /* delete a few bytes */
            if (b->n) {
                size_t at = rnd_below(b->n);
                size_t n = 1 + rnd_below(4);
                if (at + n > b->n) n = b->n - at;
                buf_erase(b, at, n);
            }
            break;
        }
    }
}

/* Writes the mutated bytes, sometimes gzip-compressed (and then sometimes with the
 * compressed bytes damaged). Returns the path. */
static const char *write_case(const buf *b, const char *name)
{
    const char *path = tpath(name);
    unsigned mode = (unsigned)rnd_below(10);
    if (mode == 0 || mode == 1) {
        gzFile g = gzopen(path, "wb");
        if (!g) { perror(path); exit(99); }
        if (b->n) gzwrite(g, b->p, (unsigned)b->n);
        gzclose(g);
        if (mode == 1) {
            buf z = slurp(path);
            if (z.n) z.p[rnd_below(z.n)] ^= (char)(1u << rnd_below(8));
            if (z.n > 12 && rnd_below(2)) z.n -= 1 + rnd_below(8);
            FILE *f = fopen(path, "wb");
            fwrite(z.p, 1, z.n, f);
            fclose(f);
            free(z.p);
        }
        return path;
    }
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(99); }
    fwrite(b->p, 1, b->n, f);
    fclose(f);
    return path;
}

/* A failure message must name the file: "PATH:" at its start. */
static int names_file(const ms_error *e, const char *path)
{
    size_t n = strlen(path);
    return e->msg[0] && strncmp(e->msg, path, n) == 0 && e->msg[n] == ':';
}

typedef struct tally {
    size_t accepted, rejected, bad_msg, bad_roundtrip, disagree;
} tally;

static void report_bad(const char *what, size_t it, const ms_error *e)
{
    TAP_NOTE("%s: iteration %zu: bad failure message '%s'", what, it, e->msg);
}

/* ---- seeds ---- */

static void seed_trace(const char *path)
{
    trace_t *t = trace_new();
    trace_set_meta(t, "model", "tiny");
    trace_set_meta(t, "note", "seed for fuzzing");
    trace_rec r;
    uint64_t in[2], out[1];
    memset(&r, 0, sizeof r);
    r.type = TR_MARK; r.u.mark.kind = TM_ITER; r.u.mark.value = 0; trace_append(t, &r);
    r.u.mark.kind = TM_PHASE; r.u.mark.value = TP_FWD; trace_append(t, &r);
    for (uint64_t l = 0; l < 3; l++) {
        memset(&r, 0, sizeof r);
        r.type = TR_MARK; r.u.mark.kind = TM_LAYER; r.u.mark.value = (int64_t)l;
        trace_append(t, &r);
        for (uint64_t k = 0; k < 2; k++) {
            memset(&r, 0, sizeof r);
            r.type = TR_ALLOC;
            r.u.alloc.id = 10 * l + k;
            r.u.alloc.bytes = 4096 * (k + 1);
            r.u.alloc.cls = k ? TC_ACT_SKEL : TC_PARAM;
            r.u.alloc.layer = (int32_t)l;
            r.u.alloc.tok_scaled = (uint8_t)k;
            r.u.alloc.producer = k ? (int64_t)(100 + l) : -1;
            snprintf(r.u.alloc.name, sizeof r.u.alloc.name, "t%llu", (unsigned long long)k);
            trace_append(t, &r);
        }
        memset(&r, 0, sizeof r);
        r.type = TR_OP;
        r.u.op.id = 100 + l;
        r.u.op.kind = TK_GEMM;
        r.u.op.phase = TP_FWD;
        r.u.op.layer = (int32_t)l;
        r.u.op.flops = 1.5e9 / 7;
        r.u.op.bytes_read = 8192;
        r.u.op.bytes_written = 4096;
        r.u.op.dur_us = l == 1 ? -1 : 3.25;
        in[0] = 10 * l;
        in[1] = 10 * l + 1;
        out[0] = 10 * l + 1;
        r.u.op.in = in;
        r.u.op.n_in = 2;
        r.u.op.out = out;
        r.u.op.n_out = 1;
        snprintf(r.u.op.name, sizeof r.u.op.name, "mm%llu", (unsigned long long)l);
        trace_append(t, &r);
        memset(&r, 0, sizeof r);
        r.type = TR_FREE;
        r.u.free_id = 10 * l;
        trace_append(t, &r);
    }
    ms_error err;
    if (trace_write(t, path, &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); exit(99); }
    trace_free(t);
}

static void seed_machine(const char *path)
{
    machine_profile *p = machine_profile_new();
    size_t nf;
    const machine_field *f = machine_fields(&nf);
    for (size_t i = 0; i < nf; i++) {
        char *dst = (char *)&p->m + f[i].offset;
        double d = 0.5 + (double)(i % 40) / 100; /* below 1: some keys are efficiencies */
        size_t kl = strlen(f[i].key);   /* rates are at least 1 per second */
        if (strstr(f[i].key, "_Bps") || strstr(f[i].key, "_flops") ||
            (kl > 6 && !strcmp(f[i].key + kl - 6, "_per_s")))
            d = 1e9 + (double)i;
        uint64_t u = (uint64_t)(i + 1) << 30;
        int64_t v = 8;
        switch (f[i].type) {
        case MF_STR: snprintf(dst, MACHINE_NAME_MAX, i ? "GPU model %zu" : "seed", i); break;
        case MF_U64: memcpy(dst, &u, sizeof u); break;
        case MF_I64: memcpy(dst, &v, sizeof v); break;
        case MF_DBL: memcpy(dst, &d, sizeof d); break;
        }
        char note[64];
        snprintf(note, sizeof note, "source %zu # with a hash", i);
        p->sources[i] = strdup(note);
    }
    p->m.gpu_reserved_bytes = 1; /* below hbm */
    p->m.vmm_granularity_bytes = 2ULL << 20; /* a power of two */
    p->m.malloc_top_down = 1; /* a flag: 0 or 1 */
    p->description = strdup("a seed profile # for fuzzing");
    ms_error err;
    if (machine_write(p, path, &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); exit(99); }
    machine_profile_free(p);
}

static void seed_plan(const char *path)
{
    plan_t *p = plan_new("fuzz", "caching");
    plan_set_tensor(p, 1, PD_SWAP, 0.5);
    plan_set_tensor(p, 2, PD_RECOMPUTE, 0);
    plan_set_tensor(p, 3, PD_DHA, 0);
    plan_set_layer(p, 0, PM_DFGB, 1);
    plan_set_layer(p, 1, PM_GFGB, 0);
    plan_set_offset(p, 1, 0);
    plan_set_offset(p, 2, 2 << 20);
    plan_set_knob(p, "budget", "12 GiB");
    p->arena_bytes = 64 << 20;
    ms_error err;
    if (plan_write(p, path, &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); exit(99); }
    plan_free(p);
}

/* ---- one case per reader ---- */

static void run_trace(const char *path, size_t it, tally *t)
{
    ms_error err;
    trace_t *tr = NULL;
    ms_status st = trace_load(path, &tr, &err);
    int loaded = st == MS_OK;
    if (!loaded && !names_file(&err, path)) { t->bad_msg++; report_bad("trace_load", it, &err); }
    if (loaded) {
        t->accepted++;
        const char *a = tpath("rt1.trace"), *b = tpath("rt2.trace");
        trace_t *u = NULL;
        if (trace_write(tr, a, &err) != MS_OK || trace_load(a, &u, &err) != MS_OK ||
            trace_write(u, b, &err) != MS_OK || !same_file(a, b)) {
            t->bad_roundtrip++;
            TAP_NOTE("trace iteration %zu does not round-trip: %s", it, err.msg);
        }
        trace_free(u);
    } else {
        t->rejected++;
    }
    trace_free(tr);

    /* the checker: every printed line names the file; it agrees with trace_load */
    FILE *diag = tmpfile();
    trace_check_report rep;
    st = trace_check_file(path, diag, 50, &rep, &err);
    if (st != MS_OK && !names_file(&err, path)) { t->bad_msg++; report_bad("check", it, &err); }
    long n = ftell(diag);
    rewind(diag);
    char line[2048];
    int bad_line = 0;
    size_t plen = strlen(path);
    int mid_line = 0;
    while (n > 0 && fgets(line, sizeof line, diag)) {
        /* each problem line starts with "PATH:"; long lines come back in pieces, so only
         * pieces that begin a line are checked */
        if (!mid_line && (strncmp(line, path, plen) != 0 || line[plen] != ':')) bad_line = 1;
        mid_line = strchr(line, '\n') == NULL;
    }
    fclose(diag);
    if (bad_line) { t->bad_msg++; TAP_NOTE("check iteration %zu printed a line without FILE:", it); }
    int check_clean = st == MS_OK && rep.errors == 0;
    if (check_clean != loaded) {
        t->disagree++;
        TAP_NOTE("iteration %zu: trace_load %s but the checker found %llu problems (st %d)", it,
                 loaded ? "succeeded" : "failed", (unsigned long long)rep.errors, (int)st);
    }

    trace_stats s;
    st = trace_stats_file(path, &s, &err);
    if (st != MS_OK && !names_file(&err, path)) { t->bad_msg++; report_bad("stats", it, &err); }
    if ((st == MS_OK) != loaded) {
        t->disagree++;
        TAP_NOTE("iteration %zu: trace_stats_file and trace_load disagree", it);
    }

    /* the bare streaming reader: read to the end or the first error */
    trace_reader *r;
    st = trace_reader_open(path, &r, &err);
    if (st == MS_OK) {
        trace_rec rec;
        while ((st = trace_reader_next(r, &rec, &err)) == MS_OK) {}
        if (st != MS_ERR_LIMIT && !names_file(&err, path)) {
            t->bad_msg++;
            report_bad("reader_next", it, &err);
        }
        trace_reader_free(r);
    } else if (!names_file(&err, path)) {
        t->bad_msg++;
        report_bad("reader_open", it, &err);
    }
}

/* The binary form: the same checks as the text form's, and what loads also round-trips
 * through the binary writer byte for byte. */
static void run_bin_trace(const char *path, size_t it, tally *t)
{
    run_trace(path, it, t);
    ms_error err;
    trace_t *tr = NULL, *u = NULL;
    if (trace_load(path, &tr, &err) != MS_OK) return;
    const char *a = tpath("rt1.btrace"), *b = tpath("rt2.btrace");
    if (trace_write_form(tr, a, TRACE_FORM_BINARY, &err) != MS_OK ||
        trace_load(a, &u, &err) != MS_OK ||
        trace_write_form(u, b, TRACE_FORM_BINARY, &err) != MS_OK || !same_file(a, b)) {
        t->bad_roundtrip++;
        TAP_NOTE("binary trace iteration %zu does not round-trip: %s", it, err.msg);
    }
    trace_free(u);
    trace_free(tr);
}

static void run_machine(const char *path, size_t it, tally *t)
{
    ms_error err;
    machine_profile *p = NULL;
    ms_status st = machine_load(path, &p, &err);
    if (st != MS_OK) {
        t->rejected++;
        if (!names_file(&err, path)) { t->bad_msg++; report_bad("machine_load", it, &err); }
        return;
    }
    t->accepted++;
    const char *a = tpath("rt1.machine"), *b = tpath("rt2.machine");
    machine_profile *q = NULL;
    if (machine_write(p, a, &err) != MS_OK || machine_load(a, &q, &err) != MS_OK ||
        machine_write(q, b, &err) != MS_OK || !same_file(a, b)) {
        t->bad_roundtrip++;
        TAP_NOTE("machine iteration %zu does not round-trip: %s", it, err.msg);
    }
    machine_profile_free(q);
    machine_profile_free(p);
}

static void run_plan(const char *path, size_t it, tally *t)
{
    ms_error err;
    plan_t *p = NULL;
    ms_status st = plan_load(path, &p, &err);
    if (st != MS_OK) {
        t->rejected++;
        if (!names_file(&err, path)) { t->bad_msg++; report_bad("plan_load", it, &err); }
        return;
    }
    t->accepted++;
    const char *a = tpath("rt1.plan"), *b = tpath("rt2.plan");
    plan_t *q = NULL;
    if (plan_write(p, a, &err) != MS_OK || plan_load(a, &q, &err) != MS_OK ||
        plan_write(q, b, &err) != MS_OK || !same_file(a, b)) {
        t->bad_roundtrip++;
        TAP_NOTE("plan iteration %zu does not round-trip: %s", it, err.msg);
    }
    plan_free(q);
    plan_free(p);
}

/* The PyTorch snapshot importer: a rejection names the file; an accepted mutant imports. */
static void run_snapshot(const char *path, size_t it, tally *t)
{
    ms_error err;
    trace_t *tr = NULL;
    imp_result res;
    memset(&res, 0, sizeof res);
    ms_status st = imp_pytorch_load(path, NULL, &tr, &res, &err);
    if (st != MS_OK) {
        t->rejected++;
        if (!names_file(&err, path)) { t->bad_msg++; report_bad("imp_pytorch_load", it, &err); }
    } else {
        t->accepted++;
    }
    imp_result_release(&res);
    trace_free(tr);
}

/* The DSA instance reader: an accepted mutant must also solve and check. */
static void run_dsa(const char *path, size_t it, tally *t)
{
    ms_error err;
    dsa_instance *in = NULL;
    ms_status st = dsa_read_csv(path, &in, &err);
    if (st != MS_OK) {
        t->rejected++;
        if (!names_file(&err, path)) { t->bad_msg++; report_bad("dsa_read_csv", it, &err); }
        return;
    }
    t->accepted++;
    size_t n = dsa_instance_count(in);
    const dsa_buffer *b = dsa_instance_buffers(in);
    uint64_t *off = calloc(n ? n : 1, sizeof *off), top = 0, peak;
    for (size_t i = 0; off && i < n; i++) { off[i] = top; top += b[i].size_bytes; }
    if (!off || dsa_check(in, off, 0, &peak, &err) != MS_OK) t->bad_roundtrip++;
    free(off);
    dsa_instance_free(in);
}

/* The config.json reader: a rejection names the file; an accepted mutant has a count. */
static void run_hfconfig(const char *path, size_t it, tally *t)
{
    ms_error err;
    model_t m;
    if (hfc_load(path, &m, &err) != MS_OK) {
        t->rejected++;
        if (!names_file(&err, path)) { t->bad_msg++; report_bad("hfc_load", it, &err); }
        return;
    }
    t->accepted++;
    if (model_params(&m) == 0 || model_param_tensors(&m, NULL) == 0) t->bad_roundtrip++;
}

static void seed_hfconfig(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("{\"model_type\": \"qwen2_moe\", \"num_hidden_layers\": 4, \"hidden_size\": 256,\n"
          " \"intermediate_size\": 1024, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
          " \"vocab_size\": 1000, \"num_experts\": 8, \"num_experts_per_tok\": 2,\n"
          " \"moe_intermediate_size\": 128, \"shared_expert_intermediate_size\": 512,\n"
          " \"decoder_sparse_step\": 2, \"mlp_only_layers\": [], \"tie_word_embeddings\": false}\n",
          f);
    fclose(f);
}

static void seed_snapshot(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("{\"segments\": [], \"device_traces\": [[\n"
          " {\"action\": \"segment_alloc\", \"addr\": 1048576, \"size\": 2097152, \"stream\": 0},\n"
          " {\"action\": \"alloc\", \"addr\": 1048576, \"size\": 4096, \"stream\": 0},\n"
          " {\"action\": \"alloc\", \"addr\": 1052672, \"size\": 512, \"stream\": 7},\n"
          " {\"action\": \"free_requested\", \"addr\": 1048576, \"size\": 4096, \"stream\": 0},\n"
          " {\"action\": \"free_completed\", \"addr\": 1048576, \"size\": 4096, \"stream\": 0}\n"
          "]]}\n", f);
    fclose(f);
}

static void seed_dsa(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("id,lower,upper,size\n0,0,10,100\n1,5,15,200\n2,12,20,50\n3,0,3,64\n", f);
    fclose(f);
}

static void fuzz(const char *what, const char *seed_name, const char *case_name, size_t iters,
                 void (*run)(const char *, size_t, tally *), int has_agreement)
{
    buf seed = slurp(tpath(seed_name));
    tally t = {0};
    /* the unmutated seed must load */
    run(tpath(seed_name), 0, &t);
    TAP_OK(t.accepted == 1, "%s: the seed file loads", what);
    memset(&t, 0, sizeof t);
    for (size_t it = 1; it <= iters; it++) {
        buf b = {0};
        buf_insert(&b, 0, seed.p, seed.n);
        mutate(&b);
        run(write_case(&b, case_name), it, &t);
        free(b.p);
    }
    TAP_NOTE("%s: %zu cases, %zu accepted, %zu rejected", what, iters, t.accepted, t.rejected);
    TAP_OK(t.bad_msg == 0 && t.rejected > 0,
           "%s: every one of %zu rejections has a FILE: message", what, t.rejected);
    TAP_OK(t.bad_roundtrip == 0 && t.accepted > 0,
           "%s: every one of %zu accepted mutants round-trips byte-identically", what, t.accepted);
    if (has_agreement)
        TAP_OK(t.disagree == 0, "%s: trace_load, trace_check_file and trace_stats_file agree", what);
    free(seed.p);
}

int main(int argc, char **argv)
{
    size_t iters = 3000;
    uint64_t seed = 1;
    if (argc > 1) iters = (size_t)strtoull(argv[1], NULL, 10);
    if (argc > 2) seed = strtoull(argv[2], NULL, 10);
    rng_state = seed;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-fuzz-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 99; }
    TAP_NOTE("%zu iterations per reader, seed %llu", iters, (unsigned long long)seed);
    seed_trace(tpath("seed.trace"));
    seed_machine(tpath("seed.machine"));
    seed_plan(tpath("seed.plan"));
    fuzz("trace", "seed.trace", "case.trace", iters, run_trace, 1);
    {
        ms_error err;
        uint64_t n;
        if (trace_convert(tpath("seed.trace"), tpath("seed.btrace"), TRACE_FORM_BINARY, &n,
                          &err) != MS_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 99;
        }
    }
    fuzz("binary trace", "seed.btrace", "case.btrace", iters, run_bin_trace, 1);
    fuzz("machine", "seed.machine", "case.machine", iters, run_machine, 0);
    fuzz("plan", "seed.plan", "case.plan", iters, run_plan, 0);
    seed_snapshot(tpath("seed.json"));
    seed_dsa(tpath("seed.csv"));
    fuzz("pytorch snapshot", "seed.json", "case.json", iters, run_snapshot, 0);
    fuzz("dsa csv", "seed.csv", "case.csv", iters, run_dsa, 0);
    seed_hfconfig(tpath("seed.config.json"));
    fuzz("config.json", "seed.config.json", "case.config.json", iters, run_hfconfig, 0);
    const char *files[] = {"seed.trace", "seed.machine", "seed.plan", "case.trace",
                           "case.machine", "case.plan", "rt1.trace", "rt2.trace",
                           "rt1.machine", "rt2.machine", "rt1.plan", "rt2.plan",
                           "seed.json", "case.json", "seed.csv", "case.csv",
                           "seed.config.json", "case.config.json", "seed.btrace",
                           "case.btrace", "rt1.btrace", "rt2.btrace"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) remove(tpath(files[i]));
    if (rmdir(tmpdir) != 0) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

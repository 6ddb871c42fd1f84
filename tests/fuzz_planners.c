/* fuzz_planners.c — a deterministic record-level fuzzer for the policies and the lowering.
 * It generates small valid traces (traces/gen.h: two or three layers, small hidden, generic,
 * megatron and hf profiles with a llama-family model, ZeRO-Offload's form), mutates them
 * record by record (integers of tensors, ops and marks set to 0, huge or negative values;
 * class, phase and kind changed; op input/output lists edited; records dropped, duplicated,
 * swapped and moved; meta values changed), keeps the mutants that the trace checker accepts
 * (trace_check_file, then trace_load) and runs every policy of the registry on each, then
 * lowers every plan made. A crash, a sanitizer report or a failure without a message fails;
 * a clean refusal (non-MS_OK status with a message) is fine. Planners and traces only: the
 * simulator's executor is not linked here.
 * Usage: fuzz_planners [MUTANTS [SEED]] (defaults 2000 and 1); MEMSIM_FUZZ_PLANNERS_ITERS
 * sets MUTANTS too, MEMSIM_FUZZ_PLANNERS_SECONDS the time cap (default 8; 0: none) after
 * which it stops early with a note; MEMSIM_FUZZ_PLANNERS_VERBOSE=1 notes every refusal. Run by
 * make check. */
#define _POSIX_C_SOURCE 200809L
#include "tests/fuzz_util.h"
#include "tests/tap.h"
#include "planners/lower.h"
#include "planners/plan.h"
#include "planners/policy.h"
#include "planners/schedule.h"
#include "traces/gen.h"
#include "traces/machine.h"
#include "traces/models.h"
#include "traces/trace.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int verbose; /* MEMSIM_FUZZ_PLANNERS_VERBOSE=1: every refusal as a note */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- seeds ---- */

typedef struct seed {
    const char *what;
    trace_t *t;
} seed;

/* A registry model shrunk to a few layers of small width (family and architecture kept). */
static model_t shrink(const char *name, uint64_t layers)
{
    const model_t *r = model_find(name);
    if (!r) { fprintf(stderr, "no model %s\n", name); exit(99); }
    model_t m = *r;
    m.layers = layers;
    m.hidden = 64;
    m.heads = 4;
    m.kv_heads = m.kv_heads < m.heads ? 2 : 4;
    m.head_dim = 0;
    m.ffn_hidden = 128;
    m.vocab = 256;
    m.default_seq = 64;
    if (m.pos_rows) m.pos_rows = 128;
    if (m.max_seq) m.max_seq = 128;
    return m;
}

static trace_t *make_seed(const model_t *model, const char *const *kv, size_t n_kv, uint64_t seq,
                          int iterations, const machine_t *m)
{
    gen_config c;
    gen_config_default(&c);
    c.model = *model;
    c.seq = seq;
    c.micro_batch = 2;
    c.iterations = iterations;
    ms_error err;
    for (size_t i = 0; i + 1 < n_kv; i += 2)
        if (gen_config_set(&c, kv[i], kv[i + 1], &err) != MS_OK) {
            fprintf(stderr, "gen %s=%s: %s\n", kv[i], kv[i + 1], err.msg);
            exit(99);
        }
    trace_t *t = NULL;
    if (gen_trace(&c, m, &t, &err) != MS_OK) {
        fprintf(stderr, "gen %s: %s\n", model->name, err.msg);
        exit(99);
    }
    return t;
}

/* ---- mutable copy of a trace ---- */

typedef struct mrec {
    trace_rec r;
    uint64_t *in, *out; /* owned copies of the op's lists */
} mrec;

typedef struct mtrace {
    mrec *v;
    size_t n, cap;
    char **meta; /* key, value pairs, owned */
    size_t n_meta;
    /* ids seen in the seed, to pick plausible replacements */
    uint64_t *tids, *oids;
    size_t n_tids, n_oids;
    int32_t layers;
} mtrace;

static uint64_t *dup_ids(const uint64_t *p, uint32_t n)
{
    uint64_t *q = malloc((n + 1) * sizeof *q);
    if (!q) exit(99);
    if (n) memcpy(q, p, n * sizeof *q);
    return q;
}

static void mt_push(mtrace *mt, const trace_rec *r)
{
    if (mt->n == mt->cap) {
        mt->cap = mt->cap ? 2 * mt->cap : 1024;
        mt->v = realloc(mt->v, mt->cap * sizeof *mt->v);
        if (!mt->v) exit(99);
    }
    mrec *m = &mt->v[mt->n++];
    m->r = *r;
    m->in = m->out = NULL;
    if (r->type == TR_OP) {
        m->in = dup_ids(r->u.op.in, r->u.op.n_in);
        m->out = dup_ids(r->u.op.out, r->u.op.n_out);
        m->r.u.op.in = m->in;
        m->r.u.op.out = m->out;
    }
}

static void mt_from(mtrace *mt, const trace_t *t)
{
    memset(mt, 0, sizeof *mt);
    size_t n = trace_count(t);
    mt->tids = malloc((n + 1) * sizeof *mt->tids);
    mt->oids = malloc((n + 1) * sizeof *mt->oids);
    if (!mt->tids || !mt->oids) exit(99);
    for (size_t i = 0; i < n; i++) {
        const trace_rec *r = trace_get(t, i);
        mt_push(mt, r);
        if (r->type == TR_ALLOC) mt->tids[mt->n_tids++] = r->u.alloc.id;
        if (r->type == TR_OP) mt->oids[mt->n_oids++] = r->u.op.id;
    }
    mt->n_meta = trace_meta_count(t);
    mt->meta = calloc(2 * mt->n_meta + 2, sizeof *mt->meta);
    if (!mt->meta) exit(99);
    for (size_t i = 0; i < mt->n_meta; i++) {
        mt->meta[2 * i] = strdup(trace_meta_key(t, i));
        mt->meta[2 * i + 1] = strdup(trace_meta_value(t, i));
    }
    mt->layers = (int32_t)trace_meta_u64(t, "layers", 2);
}

static void mrec_release(mrec *m)
{
    free(m->in);
    free(m->out);
}

static void mt_free(mtrace *mt)
{
    for (size_t i = 0; i < mt->n; i++) mrec_release(&mt->v[i]);
    free(mt->v);
    for (size_t i = 0; i < 2 * mt->n_meta; i++) free(mt->meta[i]);
    free(mt->meta);
    free(mt->tids);
    free(mt->oids);
}

/* The mutant as an in-memory trace; NULL when trace_append refuses a record (a mutant the
 * in-memory form cannot hold, e.g. an id made live twice, counts as refused). */
static trace_t *mt_build(const mtrace *mt)
{
    trace_t *t = trace_new();
    if (!t) exit(99);
    for (size_t i = 0; i < mt->n_meta; i++)
        if (mt->meta[2 * i + 1]) trace_set_meta(t, mt->meta[2 * i], mt->meta[2 * i + 1]);
    for (size_t i = 0; i < mt->n; i++)
        if (trace_append(t, &mt->v[i].r) != MS_OK) {
            trace_free(t);
            return NULL;
        }
    return t;
}

/* ---- mutations ---- */

static int32_t pick_layer(const mtrace *mt)
{
    static const int32_t fixed[] = {-1, -2, 0, 1, INT32_MAX, INT32_MIN, INT32_MAX - 1, 1 << 20};
    switch (rnd_below(4)) {
    case 0: return fixed[rnd_below(sizeof fixed / sizeof *fixed)];
    case 1: return mt->layers + (int32_t)rnd_below(3) - 1; /* L-1, L, L+1 */
    case 2: return (int32_t)rnd();
    default: return (int32_t)rnd_below((size_t)mt->layers + 2) - 1;
    }
}

static uint64_t pick_u64(uint64_t cur)
{
    static const uint64_t fixed[] = {0, 1, 2, 4096, UINT64_MAX, UINT64_MAX / 2, INT64_MAX,
                                     (uint64_t)INT64_MAX + 1, 1ULL << 40, 1ULL << 50,
                                     1ULL << 62, UINT32_MAX, (uint64_t)UINT32_MAX + 1};
    switch (rnd_below(4)) {
    case 0: return fixed[rnd_below(sizeof fixed / sizeof *fixed)];
    case 1: return cur * 2 + 1;
    case 2: return cur / 2;
    default: return rnd() >> rnd_below(64);
    }
}

static uint64_t pick_tid(const mtrace *mt)
{
    if (rnd_below(6) == 0) return pick_u64(0);
    return mt->n_tids ? mt->tids[rnd_below(mt->n_tids)] : 0;
}

static int64_t pick_producer(const mtrace *mt)
{
    static const int64_t fixed[] = {-1, -2, 0, INT64_MAX, INT64_MIN, INT32_MAX, (int64_t)1 << 40};
    if (rnd_below(3) == 0) return fixed[rnd_below(sizeof fixed / sizeof *fixed)];
    return mt->n_oids ? (int64_t)mt->oids[rnd_below(mt->n_oids)] : -1;
}

static double pick_double(double cur)
{
    static const double fixed[] = {0, -1, 1, 1e300, 1e-300, 1e18, -0.5};
    if (rnd_below(3) == 0) return cur * 1e6;
    return fixed[rnd_below(sizeof fixed / sizeof *fixed)];
}

/* A random record of type `type` (-1: any); SIZE_MAX when none is found. */
static size_t pick_rec(const mtrace *mt, int type)
{
    if (!mt->n) return SIZE_MAX;
    for (int tries = 0; tries < 64; tries++) {
        size_t i = rnd_below(mt->n);
        if (type < 0 || (int)mt->v[i].r.type == type) return i;
    }
    return SIZE_MAX;
}

static void edit_list(mtrace *mt, uint64_t **list, uint32_t *n)
{
    switch (rnd_below(4)) {
    case 0: /* drop one */
        if (*n) {
            size_t k = rnd_below(*n);
            memmove(*list + k, *list + k + 1, (*n - k - 1) * sizeof **list);
            (*n)--;
        }
        break;
    case 1: /* replace one */
        if (*n) (*list)[rnd_below(*n)] = pick_tid(mt);
        break;
    case 2: /* add one (a duplicate or another tensor) */
    {
        uint64_t *q = realloc(*list, (*n + 2) * sizeof *q);
        if (!q) exit(99);
        *list = q;
        q[*n] = *n && rnd_below(2) ? q[rnd_below(*n)] : pick_tid(mt);
        (*n)++;
        break;
    }
    default: /* empty */
        *n = 0;
        break;
    }
}

static void mutate_meta(mtrace *mt)
{
    static const char *const keys[] = {"layers", "layers", "layers", "hidden", "seq", "batch",
                                       "tp", "cp", "dp", "params", "heads", "iterations",
                                       "host_opt_bytes", "vocab"};
    static const char *const vals[] = {"0", "1", "3", "2147483647", "2147483648",
                                       "4294967296", "18446744073709551615", "-1", "x", ""};
    const char *key = keys[rnd_below(sizeof keys / sizeof *keys)];
    for (size_t i = 0; i < mt->n_meta; i++) {
        if (strcmp(mt->meta[2 * i], key) != 0) continue;
        free(mt->meta[2 * i + 1]);
        /* a value, a removal (NULL: not written) or the value plus one */
        if (rnd_below(6) == 0) mt->meta[2 * i + 1] = NULL;
        else mt->meta[2 * i + 1] = strdup(vals[rnd_below(sizeof vals / sizeof *vals)]);
        return;
    }
}

static void mutate(mtrace *mt)
{
    int steps = 1 + (int)rnd_below(3);
    for (int s = 0; s < steps; s++) {
        size_t i, j;
        switch (rnd_below(16)) {
        case 0: /* tensor bytes */
            if ((i = pick_rec(mt, TR_ALLOC)) != SIZE_MAX)
                mt->v[i].r.u.alloc.bytes = pick_u64(mt->v[i].r.u.alloc.bytes);
            break;
        case 1: /* tensor layer */
            if ((i = pick_rec(mt, TR_ALLOC)) != SIZE_MAX) mt->v[i].r.u.alloc.layer = pick_layer(mt);
            break;
        case 2: /* tensor class, token scaling, stream */
            if ((i = pick_rec(mt, TR_ALLOC)) != SIZE_MAX) {
                trace_tensor *a = &mt->v[i].r.u.alloc;
                switch (rnd_below(3)) {
                case 0: a->cls = (trace_class)rnd_below(TC_COUNT); break;
                case 1: a->tok_scaled = !a->tok_scaled; break;
                default: a->stream = (int32_t)rnd_below(3); break;
                }
            }
            break;
        case 3: /* producer */
            if ((i = pick_rec(mt, TR_ALLOC)) != SIZE_MAX)
                mt->v[i].r.u.alloc.producer = pick_producer(mt);
            break;
        case 4: /* tensor id of an alloc or a free */
            if ((i = pick_rec(mt, rnd_below(2) ? TR_ALLOC : TR_FREE)) != SIZE_MAX) {
                if (mt->v[i].r.type == TR_ALLOC) mt->v[i].r.u.alloc.id = pick_tid(mt);
                else mt->v[i].r.u.free_id = pick_tid(mt);
            }
            break;
        case 5: /* op layer, phase, kind */
            if ((i = pick_rec(mt, TR_OP)) != SIZE_MAX) {
                trace_op *o = &mt->v[i].r.u.op;
                switch (rnd_below(3)) {
                case 0: o->layer = pick_layer(mt); break;
                case 1: o->phase = (trace_phase)rnd_below(TP_COUNT); break;
                default: o->kind = (trace_opkind)rnd_below(TK_COUNT); break;
                }
            }
            break;
        case 6: /* op inputs or outputs */
            if ((i = pick_rec(mt, TR_OP)) != SIZE_MAX) {
                mrec *m = &mt->v[i];
                if (rnd_below(2)) edit_list(mt, &m->in, &m->r.u.op.n_in);
                else edit_list(mt, &m->out, &m->r.u.op.n_out);
                m->r.u.op.in = m->in;
                m->r.u.op.out = m->out;
            }
            break;
        case 7: /* op numbers */
            if ((i = pick_rec(mt, TR_OP)) != SIZE_MAX) {
                trace_op *o = &mt->v[i].r.u.op;
                switch (rnd_below(5)) {
                case 0: o->flops = pick_double(o->flops); break;
                case 1: o->dur_us = pick_double(o->dur_us); break;
                case 2: o->bytes_read = pick_u64(o->bytes_read); break;
                case 3: o->bytes_written = pick_u64(o->bytes_written); break;
                default: o->id = rnd_below(2) ? pick_u64(o->id) : (uint64_t)pick_producer(mt); break;
                }
            }
            break;
        case 8: /* mark value */
            if ((i = pick_rec(mt, TR_MARK)) != SIZE_MAX) {
                trace_mark *k = &mt->v[i].r.u.mark;
                if (k->kind == TM_LAYER) k->value = pick_layer(mt);
                else if (k->kind == TM_PHASE) k->value = (int64_t)rnd_below(TP_COUNT + 1);
                else k->value = rnd_below(2) ? k->value + 1 : (int64_t)pick_u64(0);
            }
            break;
        case 9: /* drop a record */
            if ((i = pick_rec(mt, -1)) != SIZE_MAX) {
                mrec_release(&mt->v[i]);
                memmove(mt->v + i, mt->v + i + 1, (mt->n - i - 1) * sizeof *mt->v);
                mt->n--;
            }
            break;
        case 10: /* duplicate a record */
            if ((i = pick_rec(mt, -1)) != SIZE_MAX) {
                trace_rec r = mt->v[i].r;
                mt_push(mt, &r); /* copies the lists */
                mrec m = mt->v[mt->n - 1];
                memmove(mt->v + i + 1, mt->v + i, (mt->n - 1 - i) * sizeof *mt->v);
                mt->v[i] = m;
            }
            break;
        case 11: /* swap two neighbouring records */
        case 12: /* swap two records anywhere */
            if ((i = pick_rec(mt, -1)) != SIZE_MAX) {
                j = rnd_below(2) && i + 1 < mt->n ? i + 1 : rnd_below(mt->n);
                mrec m = mt->v[i];
                mt->v[i] = mt->v[j];
                mt->v[j] = m;
            }
            break;
        case 13: /* move a record a few places */
            if ((i = pick_rec(mt, -1)) != SIZE_MAX) {
                size_t d = 1 + rnd_below(8);
                j = rnd_below(2) ? (i + d < mt->n ? i + d : mt->n - 1) : (i >= d ? i - d : 0);
                mrec m = mt->v[i];
                if (j > i) memmove(mt->v + i, mt->v + i + 1, (j - i) * sizeof *mt->v);
                else memmove(mt->v + j + 1, mt->v + j, (i - j) * sizeof *mt->v);
                mt->v[j] = m;
            }
            break;
        default: /* meta */
            mutate_meta(mt);
            break;
        }
    }
}

/* ---- the run ---- */

typedef struct tally {
    size_t mutants, accepted, rejected, plans, plan_refused, lowered, lower_refused, bad;
} tally;

/* A failure must be one of the statuses a planner reports and come with a message. */
static int clean_failure(ms_status st, const ms_error *e)
{
    return st != MS_OK && st != MS_ERR_NOMEM && e->msg[0] != '\0';
}

static void run_policies(const trace_t *t, const machine_t *m, size_t it, const char *what,
                         tally *ty)
{
    size_t np;
    const pol_policy *const *reg = pol_registry(&np);
    for (size_t k = 0; k < np; k++) {
        plan_t *p = NULL;
        ms_error err;
        memset(&err, 0, sizeof err);
        ms_status st = pol_plan(reg[k]->name, t, m, NULL, &p, &err);
        if (st != MS_OK) {
            if (p) { TAP_NOTE("%s #%zu %s: a plan left on failure", what, it, reg[k]->name); ty->bad++; }
            if (!clean_failure(st, &err)) {
                TAP_NOTE("%s #%zu %s: plan failed with %s and message '%s'", what, it,
                         reg[k]->name, ms_status_str(st), err.msg);
                ty->bad++;
            }
            ty->plan_refused++;
            if (verbose) TAP_NOTE("%s #%zu %s refuses: %s", what, it, reg[k]->name, err.msg);
            plan_free(p);
            continue;
        }
        ty->plans++;
        schedule_t *s = NULL;
        memset(&err, 0, sizeof err);
        st = lower_schedule(t, p, m, NULL, &s, &err);
        if (st == MS_OK) {
            ty->lowered++;
        } else {
            ty->lower_refused++;
            if (verbose) TAP_NOTE("%s #%zu %s: lowering refuses: %s", what, it, reg[k]->name, err.msg);
            if (!clean_failure(st, &err)) {
                TAP_NOTE("%s #%zu %s: lowering failed with %s and message '%s'", what, it,
                         reg[k]->name, ms_status_str(st), err.msg);
                ty->bad++;
            }
        }
        if (s) sched_free(s);
        plan_free(p);
    }
}

int main(int argc, char **argv)
{
    size_t iters = 2000;
    uint64_t seedv = 1;
    double cap_s = 8;
    const char *e = getenv("MEMSIM_FUZZ_PLANNERS_ITERS");
    if (e && *e) iters = (size_t)strtoull(e, NULL, 10);
    e = getenv("MEMSIM_FUZZ_PLANNERS_VERBOSE");
    verbose = e && *e && strcmp(e, "0") != 0;
    e = getenv("MEMSIM_FUZZ_PLANNERS_SECONDS");
    if (e && *e) cap_s = strtod(e, NULL);
    if (argc > 1) iters = (size_t)strtoull(argv[1], NULL, 10);
    if (argc > 2) seedv = strtoull(argv[2], NULL, 10);
    rng_state = seedv;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-fuzzp-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 99; }

    machine_profile *mp = NULL;
    ms_error err;
    if (machine_load_named("h200-sxm", &mp, &err) != MS_OK) {
        printf("# %s\n", err.msg);
        TAP_SKIP_ALL("no machine profile h200-sxm");
    }
    const machine_t *m = &mp->m;

    model_t dims;
    if (model_from_dims(2, 64, 4, 256, 512, &dims, &err) != MS_OK) { printf("# %s\n", err.msg); return 99; }
    model_t llama = shrink("llama2-7b", 2), llama3 = shrink("llama3-8b", 3);
    static const char *const kv_none[] = {NULL};
    static const char *const kv_meg[] = {"framework", "megatron"};
    static const char *const kv_hf[] = {"framework", "hf"};
    static const char *const kv_hf_bf16[] = {"framework", "hf", "precision", "bf16"};
    static const char *const kv_off[] = {"offload", "1"};
    static const char *const kv_small[] = {"save_small", "1"};
    seed seeds[] = {
        {"generic dims", make_seed(&dims, kv_none, 0, 64, 1, m)},
        {"generic save_small", make_seed(&dims, kv_small, 2, 128, 2, m)},
        {"generic offload", make_seed(&dims, kv_off, 2, 64, 1, m)},
        {"megatron llama", make_seed(&llama, kv_meg, 2, 64, 1, m)},
        {"hf llama", make_seed(&llama, kv_hf, 2, 64, 1, m)},
        {"hf llama3 bf16", make_seed(&llama3, kv_hf_bf16, 4, 64, 2, m)},
    };
    size_t n_seeds = sizeof seeds / sizeof *seeds;
    TAP_NOTE("%zu mutants, seed %llu, time cap %g s, %zu seed traces, cases in %s", iters,
             (unsigned long long)seedv, cap_s, n_seeds, tmpdir);

    /* The seeds themselves: every policy plans or refuses them cleanly. */
    tally ty = {0};
    for (size_t i = 0; i < n_seeds; i++) {
        size_t bad0 = ty.bad;
        run_policies(seeds[i].t, m, 0, seeds[i].what, &ty);
        TAP_OK(ty.bad == bad0, "seed %s (%zu records): every policy plans and lowers it or "
               "refuses it with a message", seeds[i].what, trace_count(seeds[i].t));
    }

    const char *casep = tpath("case.trace");
    double t0 = now_s();
    size_t done = 0;
    int stopped = 0;
    memset(&ty, 0, sizeof ty);
    for (size_t it = 0; it < iters; it++) {
        if (cap_s > 0 && now_s() - t0 > cap_s) { stopped = 1; break; }
        const seed *sd = &seeds[rnd_below(n_seeds)];
        mtrace mt;
        mt_from(&mt, sd->t);
        mutate(&mt);
        trace_t *mut = mt_build(&mt);
        mt_free(&mt);
        done++;
        ty.mutants++;
        if (!mut) {
            ty.rejected++;
            continue;
        }
        if (trace_write(mut, casep, &err) != MS_OK) {
            TAP_NOTE("#%zu: write: %s", it, err.msg);
            ty.bad++;
            trace_free(mut);
            continue;
        }
        trace_free(mut);
        trace_check_report rep;
        memset(&rep, 0, sizeof rep);
        trace_t *t = NULL;
        if (trace_check_file(casep, NULL, 1, &rep, &err) != MS_OK || rep.errors ||
            trace_load(casep, &t, &err) != MS_OK) {
            ty.rejected++;
            continue;
        }
        ty.accepted++;
        /* the case file stays behind if this crashes: name it */
        printf("# case %zu (%s)\n", it, sd->what);
        fflush(stdout);
        run_policies(t, m, it, sd->what, &ty);
        trace_free(t);
    }
    double el = now_s() - t0;
    if (stopped) TAP_NOTE("time cap reached after %zu of %zu mutants", done, iters);
    TAP_NOTE("%zu mutants in %.1f s: %zu accepted by the checker, %zu refused; %zu plans made, "
             "%zu refused; %zu lowered, %zu refused", ty.mutants, el, ty.accepted, ty.rejected,
             ty.plans, ty.plan_refused, ty.lowered, ty.lower_refused);
    TAP_OK(ty.accepted > 0, "some mutants pass the trace checker (%zu)", ty.accepted);
    TAP_OK(ty.bad == 0, "no policy or lowering fails without a message on an accepted mutant "
           "(%zu bad)", ty.bad);

    for (size_t i = 0; i < n_seeds; i++) trace_free(seeds[i].t);
    machine_profile_free(mp);
    if (ty.bad == 0) remove(casep);
    else TAP_NOTE("last case kept in %s", casep);
    if (ty.bad == 0 && rmdir(tmpdir) != 0) TAP_NOTE("could not remove %s", tmpdir);
    return tap_done();
}

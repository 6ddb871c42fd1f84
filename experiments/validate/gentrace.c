/* gentrace.c — writes the workload trace that `memsim run --math real` generates for itself
 * (the generator with fp32 gradients and the small saved tensors: grad_bytes 4, save_small 1,
 * as runtime/rt_run.c's make_trace sets them), so that experiments/validate/run.sh can hand the
 * very same trace file to `memsim run --math real --trace` and to `memsim simulate --trace`.
 * `memsim trace gen` has no option for these generator knobs; once it has (gen_config_set's
 * "--gen KEY=VALUE"), run.sh can call it instead. Built and called by run.sh only.
 *
 *   gentrace --machine NAME|FILE --dims L,H,A,F,V --seq N --iters N [--gen KEY=VALUE]... -o FILE
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "traces/gen.h"
#include "traces/machine.h"
#include "traces/models.h"
#include "traces/trace.h"
#include "base/util.h"

static int usage(void)
{
    fprintf(stderr, "usage: gentrace --machine NAME|FILE --dims L,H,A,F,V --seq N --iters N "
                    "[--gen KEY=VALUE]... -o FILE\n");
    return 2;
}

static int fail(const char *what, const ms_error *err)
{
    fprintf(stderr, "gentrace: %s: %s\n", what, err->msg);
    return 3;
}

int main(int argc, char **argv)
{
    const char *machine = NULL, *out = NULL;
    char model[128] = "";
    uint64_t seq = 0, iters = 0;
    gen_config c;
    gen_config_default(&c);
    c.grad_bytes = 4;   /* as memsim run --math real: fp32 gradients */
    c.save_small = 1;   /* and the norm statistics and attention log-sum-exp saved */
    ms_error err;
    ms_error_clear(&err);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        i++;
        if (!strcmp(o, "--machine")) machine = v;
        else if (!strcmp(o, "--dims")) snprintf(model, sizeof model, "dims:%s", v);
        else if (!strcmp(o, "--seq")) { if (!ms_parse_count(v, &seq) || !seq) return usage(); }
        else if (!strcmp(o, "--iters")) { if (!ms_parse_u64(v, &iters) || !iters) return usage(); }
        else if (!strcmp(o, "-o")) out = v;
        else if (!strcmp(o, "--gen")) {
            char key[64];
            const char *eq = strchr(v, '=');
            if (!eq || (size_t)(eq - v) >= sizeof key) return usage();
            memcpy(key, v, (size_t)(eq - v));
            key[eq - v] = '\0';
            if (gen_config_set(&c, key, eq + 1, &err) != MS_OK) return fail(v, &err);
        } else return usage();
    }
    if (!machine || !model[0] || !seq || !iters || !out) return usage();
    machine_profile *mp = NULL;
    trace_t *t = NULL;
    if (machine_load_named(machine, &mp, &err) != MS_OK) return fail(machine, &err);
    int rc = 0;
    if (model_lookup(model, &c.model, &err) != MS_OK) rc = fail(model, &err);
    c.seq = seq;
    c.micro_batch = 1;
    c.iterations = (int)iters;
    if (!rc && gen_validate(&c, &err) != MS_OK) rc = fail("generator", &err);
    if (!rc && gen_trace(&c, &mp->m, &t, &err) != MS_OK) rc = fail("generator", &err);
    if (!rc && trace_write(t, out, &err) != MS_OK) rc = fail(out, &err);
    trace_free(t);
    machine_profile_free(mp);
    return rc;
}

/* trace_names.c — the names of the workload trace's enums as the file format spells them
 * (traces/FORMAT.md, "Workload trace": tensor classes, phases, op kinds, mark kinds) and
 * their parsers. Implements those functions of trace.h; used by the trace reader and writer,
 * the generator, the importers and every tool that prints a trace's fields. */
#include "traces/trace_int.h"

#include <string.h>


const char *const trace_class_names[TC_COUNT] = {
    "param", "grad", "optstate", "act_skel", "act_trans", "workspace", "other"};
static const char *const phase_names[TP_COUNT] = {"none", "fwd", "bwd", "opt"};
static const char *const kind_names[TK_COUNT] = {"gemm", "attn", "norm", "act", "elem",
                                                 "embed", "loss", "optim", "comm", "other"};
static const char *const mark_names[TM_COUNT] = {"iter", "phase", "layer"};

const char *trace_class_name(trace_class c)
{
    return (unsigned)c < TC_COUNT ? trace_class_names[c] : "?";
}

const char *trace_phase_name(trace_phase p)
{
    return (unsigned)p < TP_COUNT ? phase_names[p] : "?";
}

const char *trace_opkind_name(trace_opkind k)
{
    return (unsigned)k < TK_COUNT ? kind_names[k] : "?";
}

const char *trace_markkind_name(trace_markkind k)
{
    return (unsigned)k < TM_COUNT ? mark_names[k] : "?";
}

static int find_name(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (s[0] == names[i][0] && strcmp(s, names[i]) == 0) return i;
    return -1;
}

int trace_class_parse(const char *s, trace_class *out)
{
    int i = find_name(s, trace_class_names, TC_COUNT);
    if (i < 0) return 0;
    *out = (trace_class)i;
    return 1;
}

int trace_phase_parse(const char *s, trace_phase *out)
{
    int i = find_name(s, phase_names, TP_COUNT);
    if (i < 0) return 0;
    *out = (trace_phase)i;
    return 1;
}

int trace_opkind_parse(const char *s, trace_opkind *out)
{
    int i = find_name(s, kind_names, TK_COUNT);
    if (i < 0) return 0;
    *out = (trace_opkind)i;
    return 1;
}

/* lower_dha_int.h — internal to the shadow-model lowering: the unit analysis's state
 * (struct dha_model) and the helpers that planners/memferry/lower_dha_model.c (the analysis)
 * shares with planners/memferry/lower_dha.c (the lowering). Not an interface: callers use
 * lower_dha_model.h and lower_dha.h. */
#ifndef MEMSIM_LOWER_DHA_INT_H
#define MEMSIM_LOWER_DHA_INT_H

#include "planners/memferry/lower_dha_model.h"

#include "traces/roofline.h"
#include "base/u64map.h"

#include <stddef.h>
#include <stdint.h>

#define EV_NONE UINT32_MAX

/* What the lowering does with a trace op. */
enum { RR_NORMAL = 0, RR_ADAM, RR_PARAM_H2D, RR_GRAD_D2H };

typedef struct dtens {
    uint64_t id, bytes;
    trace_class cls;
    int32_t layer;   /* the tensor's own layer field */
    int owner;       /* unit index; -1 until known */
} dtens;

/* One parameter read: unit index -> tensor index (deduplicated). */
typedef struct duse {
    int unit;
    size_t tens;
} duse;

struct dha_model {
    const trace_t *t;
    const machine_t *m;
    roof_params roof;
    int32_t L;
    size_t nu;
    dha_unit *u;
    int64_t *adam_op;       /* per unit: a *.optim.host op id (names), -1 if none */
    dtens *tens;
    size_t nt, cap_t;
    u64map *tix;            /* tensor id -> index */
    duse *uses;
    size_t nuses, cap_uses;
    size_t nrec;
    int32_t *unit;          /* per record: unit index of an op, -1 otherwise */
    uint8_t *role;          /* per record: RR_* */
    double *dur;            /* per record: op duration, microseconds */
    size_t setup_end;       /* index of the first "mark iter" (nrec if none) */
    double grad_ratio;      /* gradient element bytes / parameter element bytes */
    double param_elem_bytes; /* bytes per parameter element (the trace's dtype_bytes) */
    dha_module *mod;        /* modules (lower_dha_model.h) */
    size_t nmod;
    size_t *mod_g;          /* per module: tensor index of its gradient buffer */
    long *tmod;             /* per tensor: its module (a parameter of a split buffer, or a
                               gradient buffer that is one module), -1 otherwise */
    size_t *g_first, *g_count; /* per tensor (gradient buffers): their modules */
    size_t *scratch;        /* nmod entries: the modules one op makes */
    uint8_t *dense_grad;    /* per tensor: a gradient buffer whose last backward writer reads
                               no parameter (an embedding's dense table gradient): earlier
                               contributions are the same leaf's (a tied LM head) and wait
                               for it in AccumulateGrad's input buffer */
};

/* planners/memferry/lower_dha_model.c */
int dha_uidx(const dha_model *d, int32_t layer);
const dtens *dha_tens_of(const dha_model *d, uint64_t id, size_t *ix);
int dha_is_param(const dha_model *d, uint64_t id, size_t *ix);
int dha_is_grad(const dha_model *d, uint64_t id, size_t *ix);
double dha_rereads(const dha_model *d, const trace_op *op);
uint64_t dha_read_bytes(const trace_op *op, uint64_t pbytes, double rereads);
uint64_t dha_write_bytes(const dha_model *d, const trace_op *op, uint64_t gbytes);
uint64_t dha_acc_bytes(const dha_model *d, const trace_op *op, uint64_t gbytes);
uint64_t dha_acc_one_way_bytes(const machine_t *m, uint64_t b);
double dha_eff_of(const machine_t *m, const trace_op *op, int reads);
size_t dha_op_modules(const dha_model *d, const trace_op *op, size_t g);

#endif

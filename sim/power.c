/* power.c — the power limit's clock over windows of a simulated schedule (power.h).
 *
 * Model (docs/SIMULATOR.md, "Power limit"). The board draws power.idle_w, and each kernel
 * class k (GEMM, memsim's attention forward and backward, the vendor's, memory-bound) draws
 * above it the energy of its op's work (FLOPs; device-memory bytes for the memory-bound
 * class) times the class's energy per unit at the maximum SM clock (power.K_j), spread over
 * the op's time.
 * An op of class k whose trace time t holds at the class's probed clock x_ref
 * (power.K_ref_clock) takes t (x_ref / x)^s_k at clock x (s_k = power.K_time_exp) and draws
 * its maximum-clock power times x^e_k (e_k = power.K_clock_exp). The driver holds each
 * window of power.window_ms of the schedule to an average of power.limit_w: a window whose
 * average at the maximum clock is above the limit runs at the largest x at which it is
 * not, its idle time kept (idle gaps are waits for copies and the host, not for the clock);
 * one below the limit runs at the maximum clock. Every figure is a kernel's, from `memsim
 * probe --power`; nothing is fitted to a step. Deterministic: the passes are the pipeline's,
 * in simulated time. */
#include "sim/power.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PW_WINDOW_MS_DEFAULT 20.0
#define PW_EXP_DEFAULT 3.0
#define PW_FLOOR_DEFAULT 0.5
#define PW_MAX_WINDOWS (1u << 22)

enum { PW_GEMM = 0, PW_ATTN_FWD, PW_ATTN_BWD, PW_VATTN_FWD, PW_VATTN_BWD, PW_MEM, PW_NCLS };

/* A class's figures from the profile. */
typedef struct pw_class {
    double j_per_work, time_exp, clock_exp, ref_clock;
} pw_class;

struct pw_model {
    size_t n;
    double *scale, *start; /* per action: duration multiplier of the last pass, start (us) */
    double *t1;            /* per action: its time at the maximum clock, us */
    double *p1;            /* per action: its power above idle at the maximum clock, W */
    int8_t *cls;           /* per action: its class, -1 for no GPU compute */
    pw_class c[PW_NCLS];
    double limit_w, idle_w, exp, window_us, floor;
    double clock_ratio, peak_w;
};

/* Per window: per class, the time at the maximum clock and the energy there. */
typedef struct pw_win {
    double t1[PW_NCLS], e1[PW_NCLS], busy_us;
} pw_win;

/* Op times of the op-time model: a generated trace (meta machine) whose durations were not
 * replaced by measured ones (meta op_times measured). */
static int trace_modelled_times(const trace_t *t)
{
    const char *m = trace_get_meta(t, "machine"), *o = trace_get_meta(t, "op_times");
    return m && !(o && strcmp(o, "measured") == 0);
}

static int trace_runtime_kernels(const trace_t *t)
{
    const char *k = trace_get_meta(t, "kernels");
    return k && strcmp(k, "runtime") == 0;
}

/* A trace with an attention op (which needs its kernel set's figures). */
static int trace_has_attn(const trace_t *t)
{
    size_t n;
    const trace_rec *r = trace_records(t, &n);
    for (size_t i = 0; i < n; i++)
        if (r[i].type == TR_OP && r[i].u.op.kind == TK_ATTN) return 1;
    return 0;
}

/* The class of one op (pw_new has refused vendor attention without its figures). */
static int op_class(const trace_op *op, int rt)
{
    if (!op) return PW_MEM;
    if (op->kind == TK_GEMM) return PW_GEMM;
    if (op->kind == TK_ATTN) {
        int bwd = op->phase == TP_BWD;
        if (rt) return bwd ? PW_ATTN_BWD : PW_ATTN_FWD;
        return bwd ? PW_VATTN_BWD : PW_VATTN_FWD;
    }
    return PW_MEM; /* norms, activations, element-wise, loss, optimizer, collectives */
}

static double op_work(const trace_op *op, int cls)
{
    if (!op) return 0;
    if (cls == PW_MEM) return op->kind == TK_COMM ? 0 : (double)(op->bytes_read + op->bytes_written);
    return op->flops > 0 ? op->flops : 0;
}

static ms_status pw_alloc(pw_model *p, size_t n)
{
    size_t k = n ? n : 1;
    p->n = n;
    p->scale = malloc(k * sizeof *p->scale);
    p->start = malloc(k * sizeof *p->start);
    p->t1 = calloc(k, sizeof *p->t1);
    p->p1 = calloc(k, sizeof *p->p1);
    p->cls = malloc(k);
    if (!p->scale || !p->start || !p->t1 || !p->p1 || !p->cls) return MS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        p->scale[i] = 1.0;
        p->start[i] = NAN;
        p->cls[i] = -1;
    }
    return MS_OK;
}

static void pw_knobs(pw_model *p, const machine_t *m)
{
    p->limit_w = m->power_limit_w;
    p->idle_w = m->power_idle_w;
    p->exp = m->power_clock_exp > 0 ? m->power_clock_exp : PW_EXP_DEFAULT;
    p->window_us = 1e3 * (m->power_window_ms > 0 ? m->power_window_ms : PW_WINDOW_MS_DEFAULT);
    p->floor = m->power_clock_floor > 0 && m->power_clock_floor <= 1 ? m->power_clock_floor
                                                                     : PW_FLOOR_DEFAULT;
    const double f[PW_NCLS][4] = {
        {m->power_gemm_j, m->power_gemm_time_exp, m->power_gemm_clock_exp,
         m->power_gemm_ref_clock},
        {m->power_rt_attn_fwd_j, m->power_rt_attn_fwd_time_exp, m->power_rt_attn_fwd_clock_exp,
         m->power_rt_attn_fwd_ref_clock},
        {m->power_rt_attn_bwd_j, m->power_rt_attn_bwd_time_exp, m->power_rt_attn_bwd_clock_exp,
         m->power_rt_attn_bwd_ref_clock},
        {m->power_attn_fwd_j, m->power_attn_fwd_time_exp, m->power_attn_fwd_clock_exp,
         m->power_attn_fwd_ref_clock},
        {m->power_attn_bwd_j, m->power_attn_bwd_time_exp, m->power_attn_bwd_clock_exp,
         m->power_attn_bwd_ref_clock},
        {m->power_mem_j, m->power_mem_time_exp, m->power_mem_clock_exp, m->power_mem_ref_clock},
    };
    for (int k = 0; k < PW_NCLS; k++) {
        p->c[k].j_per_work = f[k][0];
        p->c[k].time_exp = f[k][1];
        p->c[k].clock_exp = f[k][2] > 0 ? f[k][2] : p->exp;
        p->c[k].ref_clock = f[k][3] > 0 && f[k][3] <= 1 ? f[k][3] : 1.0;
    }
    p->clock_ratio = 1.0;
    p->peak_w = 0;
}

/* An action's multiplier of its trace time at clock x. */
static double act_mult(const pw_model *p, int k, double x)
{
    return pow(p->c[k].ref_clock / x, p->c[k].time_exp);
}

/* Fills action i's time and power at the maximum clock, and its first multiplier (the
 * maximum clock's: the first pass assumes no window is held back). */
static void act_init(pw_model *p, size_t i, const sched_action *a, const trace_op *op, int k)
{
    const pw_class *c = &p->c[k];
    double t = a->dur_us > 0 ? a->dur_us : 0;
    p->cls[i] = (int8_t)k;
    p->scale[i] = act_mult(p, k, 1.0);
    p->t1[i] = t * p->scale[i];
    double e_j = c->j_per_work * op_work(op, k);
    p->p1[i] = p->t1[i] > 0 ? e_j / (p->t1[i] * 1e-6) : 0;
}

static int has_figures(const machine_t *m)
{
    return m && m->power_limit_w > 0 && m->power_gemm_j > 0;
}

ms_status pw_new(const machine_t *m, const schedule_t *s, const trace_t *t, pw_model **out,
                 pw_why *why, ms_error *err)
{
    *out = NULL;
    *why = PW_ON;
    if (!has_figures(m)) {
        *why = PW_NO_LIMIT;
        return MS_OK;
    }
    if (!t) {
        *why = PW_NO_TRACE;
        return MS_OK;
    }
    if (!trace_modelled_times(t)) {
        *why = PW_MEASURED;
        return MS_OK;
    }
    int rt = trace_runtime_kernels(t);
    int attn_ok = rt ? m->power_rt_attn_fwd_j > 0 && m->power_rt_attn_bwd_j > 0
                     : m->power_attn_fwd_j > 0 && m->power_attn_bwd_j > 0;
    if (!attn_ok && trace_has_attn(t)) { /* before any allocation: the common case */
        *why = PW_NO_ATTN_FIG;
        return MS_OK;
    }
    size_t n;
    const sched_action *a = sched_actions(s, &n);
    pw_model *p = calloc(1, sizeof *p);
    if (!p || pw_alloc(p, n) != MS_OK) {
        pw_free(p);
        return ms_fail(err, MS_ERR_NOMEM, "out of memory for the power model");
    }
    pw_knobs(p, m);
    for (size_t i = 0; i < n; i++) {
        if (a[i].kind != SA_COMPUTE) continue;
        const trace_op *op = a[i].op >= 0 ? trace_find_op(t, (uint64_t)a[i].op) : NULL;
        act_init(p, i, &a[i], op, op_class(op, rt));
    }
    *out = p;
    return MS_OK;
}

void pw_free(pw_model *p)
{
    if (!p) return;
    free(p->scale);
    free(p->start);
    free(p->t1);
    free(p->p1);
    free(p->cls);
    free(p);
}

const double *pw_scales(const pw_model *p) { return p->scale; }
double *pw_starts(pw_model *p) { return p->start; }
double pw_clock_ratio(const pw_model *p) { return p->clock_ratio; }
double pw_peak_window_w(const pw_model *p) { return p->peak_w; }

/* Average power of window w at clock x: each class's time t1 x^-s and energy at the
 * maximum clock e1, its power going as x^e (so its energy as x^(e - s)), the idle part as
 * it was. */
static double win_power(const pw_model *p, const pw_win *w, double idle_us, double x)
{
    double t = idle_us, e = 0;
    for (int k = 0; k < PW_NCLS; k++) {
        if (w->t1[k] <= 0) continue;
        double tx = pow(x, -p->c[k].time_exp);
        t += w->t1[k] * tx;
        e += w->e1[k] * pow(x, p->c[k].clock_exp) * tx;
    }
    if (t <= 0) return p->idle_w;
    return p->idle_w + e / t;
}

/* The largest clock in [floor, 1] at which the window's average stays at the limit: its
 * average power rises with the clock (e > s for every class the probe measured), so a
 * bisection finds it. */
static double win_clock(const pw_model *p, const pw_win *w, double span_us)
{
    double idle = span_us - w->busy_us;
    if (idle < 0) idle = 0;
    if (win_power(p, w, idle, 1.0) <= p->limit_w) return 1.0;
    if (win_power(p, w, idle, p->floor) >= p->limit_w) return p->floor;
    double lo = p->floor, hi = 1.0;
    for (int k = 0; k < 50; k++) {
        double mid = 0.5 * (lo + hi);
        if (win_power(p, w, idle, mid) > p->limit_w) hi = mid;
        else lo = mid;
    }
    return lo;
}

/* The part of [s0, s1) in window k of wus. */
static double overlap(double s0, double s1, size_t k, double wus)
{
    double a = s0 > k * wus ? s0 : k * wus, b = s1 < (k + 1) * wus ? s1 : (k + 1) * wus;
    return b > a ? b - a : 0;
}

/* Adds action i's share of each window it overlapped in the last pass: of its time there
 * (d = its trace time x its multiplier), the fraction o / d of its maximum-clock time and
 * energy. */
static void win_add(const pw_model *p, size_t i, double dur_us, pw_win *win, size_t nw,
                    double wus)
{
    double d = dur_us * p->scale[i], s0 = p->start[i], s1 = s0 + d;
    if (d <= 0) return;
    int k = p->cls[i];
    for (size_t w = (size_t)(s0 / wus); w < nw && w * wus < s1; w++) {
        double o = overlap(s0, s1, w, wus);
        if (o <= 0) continue;
        double f = o / d;
        win[w].busy_us += o;
        win[w].t1[k] += f * p->t1[i];
        win[w].e1[k] += f * p->t1[i] * p->p1[i];
    }
}

/* Action i's new multiplier: the overlap-weighted mean of its class's multiplier at each
 * window's clock. */
static double act_scale(const pw_model *p, size_t i, double dur_us, const double *clock,
                        size_t nw, double wus)
{
    double d = dur_us * p->scale[i], s0 = p->start[i], s1 = s0 + d, sum = 0, wsum = 0;
    for (size_t w = (size_t)(s0 / wus); w < nw && w * wus < s1; w++) {
        double o = overlap(s0, s1, w, wus);
        sum += o * act_mult(p, p->cls[i], clock[w]);
        wsum += o;
    }
    return wsum > 0 ? sum / wsum : p->scale[i];
}

/* An action's trace time, from its maximum-clock time and the class's multiplier at 1. */
static double trace_us(const pw_model *p, size_t i)
{
    return p->t1[i] / act_mult(p, p->cls[i], 1.0);
}

static double span_end_us(const pw_model *p)
{
    double end = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->cls[i] >= 0 && isfinite(p->start[i])) {
            double e = p->start[i] + trace_us(p, i) * p->scale[i];
            if (e > end) end = e;
        }
    return end;
}

double pw_update(pw_model *p)
{
    double end = span_end_us(p), wus = p->window_us;
    if (end <= 0) return 0;
    if (end / wus > PW_MAX_WINDOWS) wus = end / PW_MAX_WINDOWS; /* bounded memory */
    size_t nw = (size_t)ceil(end / wus);
    pw_win *win = calloc(nw, sizeof *win);
    double *clock = malloc(nw * sizeof *clock);
    if (!win || !clock) {
        free(win);
        free(clock);
        return 0; /* keeps the multipliers it has: the run goes on at the last pass's clock */
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->cls[i] >= 0 && isfinite(p->start[i])) win_add(p, i, trace_us(p, i), win, nw, wus);
    p->peak_w = 0;
    for (size_t w = 0; w < nw; w++) {
        double span = (w + 1 == nw) ? end - w * wus : wus;
        clock[w] = win_clock(p, &win[w], span);
        double idle = span - win[w].busy_us;
        double pw = win_power(p, &win[w], idle > 0 ? idle : 0, clock[w]);
        if (pw > p->peak_w) p->peak_w = pw;
    }
    double change = 0, num = 0, den = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (p->cls[i] < 0 || !isfinite(p->start[i])) continue;
        double s = act_scale(p, i, trace_us(p, i), clock, nw, wus);
        if (fabs(s - p->scale[i]) > change) change = fabs(s - p->scale[i]);
        p->scale[i] = s;
        if (p->cls[i] == PW_MEM) continue;
        /* the clock of a compute-bound action, from its multiplier: x = ref / m^(1/s) */
        const pw_class *c = &p->c[p->cls[i]];
        double x = c->time_exp > 0 ? c->ref_clock / pow(s, 1.0 / c->time_exp) : 1.0;
        num += p->t1[i] * x;
        den += p->t1[i];
    }
    p->clock_ratio = den > 0 ? num / den : 1.0;
    free(win);
    free(clock);
    return change;
}

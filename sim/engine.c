/* engine.c — the discrete-event engine (see engine.h): a binary min-heap keyed by (time_us, seq)
 * and a slot table for lazy cancellation, which events posted without an id (eng_post) skip.
 * Used by sim/link.c, sim/exec.c. */
#include "sim/engine.h"

#include <stdlib.h>

typedef struct ev {
    double t;          /* time_us */
    uint64_t seq;      /* insertion order: the tie-breaker at equal times */
    uint32_t slot, gen;
    eng_fn fn;
    void *ctx;
    uint64_t arg;
} ev;

/* A slot is live while its event is pending; its generation changes whenever the event
 * runs or is cancelled, so a stale heap entry (or a stale id) no longer matches. */
typedef struct slot {
    uint32_t gen;
    uint32_t next_free;
    uint8_t live;
} slot;

#define NO_SLOT UINT32_MAX

struct eng {
    ev *heap;
    size_t n, cap;
    slot *slots;
    size_t nslots, capslots;
    uint32_t free_head;
    size_t live, stale;
    uint64_t seq, ran;
    double now;
    int stop;
};

eng_t *eng_new(void)
{
    eng_t *e = calloc(1, sizeof *e);
    if (e) e->free_head = NO_SLOT;
    return e;
}

void eng_free(eng_t *e)
{
    if (!e) return;
    free(e->heap);
    free(e->slots);
    free(e);
}

double eng_now(const eng_t *e) { return e->now; }
size_t eng_pending(const eng_t *e) { return e->live; }
uint64_t eng_events_run(const eng_t *e) { return e->ran; }
void eng_stop(eng_t *e) { e->stop = 1; }

static int before(const ev *a, const ev *b)
{
    if (a->t != b->t) return a->t < b->t;
    return a->seq < b->seq;
}

/* The heap's moves take the moving event by value and store it once, at its place, instead
 * of storing it into the hole (the root, the new leaf) and reading it straight back: two
 * 48-byte copies less an event (BENCHMARKS.md, issue 34).
 *
 * sift_up: puts x into the hole at i (the heap below i is valid), moving parents down. */
static void sift_up(ev *h, size_t i, ev x)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

/* Puts x into the hole at i of the n entries, moving the lesser children up. */
static void sift_down(ev *h, size_t n, size_t i, ev x)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static int entry_valid(const eng_t *e, const ev *x)
{
    if (x->slot == NO_SLOT) return 1; /* posted (eng_post): never cancelled */
    const slot *s = &e->slots[x->slot];
    return s->live && s->gen == x->gen;
}

/* Drops stale entries when they outnumber live ones, so a model that reschedules often
 * (the link recomputes its next completion on every flow change) keeps the heap small. */
static void compact(eng_t *e)
{
    size_t k = 0;
    for (size_t i = 0; i < e->n; i++)
        if (entry_valid(e, &e->heap[i])) e->heap[k++] = e->heap[i];
    e->n = k;
    e->stale = 0;
    for (size_t i = k / 2; i-- > 0;) sift_down(e->heap, e->n, i, e->heap[i]);
}

static uint32_t take_slot(eng_t *e)
{
    if (e->free_head != NO_SLOT) {
        uint32_t i = e->free_head;
        e->free_head = e->slots[i].next_free;
        return i;
    }
    if (e->nslots >= NO_SLOT - 1) return NO_SLOT;
    if (ms_grow((void **)&e->slots, &e->capslots, e->nslots + 1, sizeof *e->slots) != MS_OK)
        return NO_SLOT;
    e->slots[e->nslots].gen = 1;
    e->slots[e->nslots].live = 0;
    return (uint32_t)e->nslots++;
}

static void release_slot(eng_t *e, uint32_t i)
{
    e->slots[i].live = 0;
    e->slots[i].gen++;
    if (e->slots[i].gen == 0) e->slots[i].gen = 1; /* ids are never 0 */
    e->slots[i].next_free = e->free_head;
    e->free_head = i;
    e->live--;
}

eng_id eng_at(eng_t *e, double time_us, eng_fn fn, void *ctx, uint64_t arg)
{
    if (!(time_us >= e->now)) time_us = e->now; /* also catches NaN */
    if (e->stale > 1024 && e->stale > e->live) compact(e);
    if (ms_grow((void **)&e->heap, &e->cap, e->n + 1, sizeof *e->heap) != MS_OK) return 0;
    uint32_t s = take_slot(e);
    if (s == NO_SLOT) return 0;
    e->slots[s].live = 1;
    e->live++;
    ev x = { time_us, e->seq++, s, e->slots[s].gen, fn, ctx, arg };
    sift_up(e->heap, e->n++, x);
    return ((uint64_t)(s + 1) << 32) | x.gen;
}

eng_id eng_after(eng_t *e, double delay_us, eng_fn fn, void *ctx, uint64_t arg)
{
    return eng_at(e, e->now + (delay_us > 0 ? delay_us : 0), fn, ctx, arg);
}

int eng_post(eng_t *e, double time_us, eng_fn fn, void *ctx, uint64_t arg)
{
    if (!(time_us >= e->now)) time_us = e->now; /* also catches NaN */
    if (e->stale > 1024 && e->stale > e->live) compact(e);
    if (ms_grow((void **)&e->heap, &e->cap, e->n + 1, sizeof *e->heap) != MS_OK) return 0;
    e->live++;
    ev x = { time_us, e->seq++, NO_SLOT, 0, fn, ctx, arg };
    sift_up(e->heap, e->n++, x);
    return 1;
}

int eng_post_after(eng_t *e, double delay_us, eng_fn fn, void *ctx, uint64_t arg)
{
    return eng_post(e, e->now + (delay_us > 0 ? delay_us : 0), fn, ctx, arg);
}

static int id_slot(const eng_t *e, eng_id id, uint32_t *s)
{
    if (id == 0) return 0;
    uint64_t hi = id >> 32;
    if (hi == 0 || hi > e->nslots) return 0;
    *s = (uint32_t)(hi - 1);
    const slot *sl = &e->slots[*s];
    return sl->live && sl->gen == (uint32_t)id;
}

int eng_pending_id(const eng_t *e, eng_id id)
{
    uint32_t s;
    return id_slot(e, id, &s);
}

int eng_cancel(eng_t *e, eng_id id)
{
    uint32_t s;
    if (!id_slot(e, id, &s)) return 0;
    release_slot(e, s);
    e->stale++;
    return 1;
}

int eng_step(eng_t *e)
{
    while (e->n > 0) {
        ev x = e->heap[0];
        if (--e->n > 0) sift_down(e->heap, e->n, 0, e->heap[e->n]);
        if (!entry_valid(e, &x)) {
            e->stale--;
            continue; /* cancelled: time does not advance for it */
        }
        if (x.slot != NO_SLOT) release_slot(e, x.slot);
        else e->live--;
        e->now = x.t;
        e->ran++;
        x.fn(e, x.ctx, x.arg);
        return 1;
    }
    return 0;
}

uint64_t eng_run(eng_t *e)
{
    uint64_t k = 0;
    e->stop = 0;
    while (!e->stop && eng_step(e)) k++;
    e->stop = 0;
    return k;
}

/* test_schedule.c — unit tests of planners/schedule.c: the action container, events, names,
 * each error sched_validate must catch, and the dump format (docs/POLICIES.md). TAP output
 * for `make check`. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "planners/schedule.h"
#include "tests/tap.h"

static sched_action mk(sched_kind k, sched_stream s, uint64_t tensor, uint64_t bytes)
{
    sched_action a;
    memset(&a, 0, sizeof a);
    a.kind = k;
    a.stream = s;
    a.tensor = tensor;
    a.bytes = bytes;
    a.op = -1;
    a.layer = -1;
    a.dha_eff = 1;
    return a;
}

static sched_action ev(sched_kind k, sched_stream s, uint32_t e)
{
    sched_action a = mk(k, s, 0, 0);
    a.event = e;
    return a;
}

/* Builds a schedule from n actions and returns sched_validate's status; the message in err. */
static ms_status check(const sched_action *acts, size_t n, uint32_t events, ms_error *err)
{
    schedule_t *s = sched_new();
    for (uint32_t i = 0; i < events; i++) sched_new_event(s);
    for (size_t i = 0; i < n; i++) sched_add(s, &acts[i]);
    ms_error_clear(err);
    ms_status st = sched_validate(s, err);
    sched_free(s);
    return st;
}

static void test_container(void)
{
    schedule_t *s = sched_new();
    TAP_OK(s && sched_count(s) == 0 && sched_event_count(s) == 0, "new schedule is empty");
    uint32_t e0 = sched_new_event(s), e1 = sched_new_event(s);
    TAP_OK(e0 == 0 && e1 == 1 && sched_event_count(s) == 2, "events are numbered from 0");
    int ok = 1;
    for (uint64_t i = 0; i < 1000; i++) {
        sched_action a = mk(SA_ALLOC, SS_COMPUTE, i, 100 + i);
        ok &= sched_add(s, &a) == MS_OK;
    }
    TAP_OK(ok && sched_count(s) == 1000, "1000 actions added (the array grows)");
    const sched_action *a = sched_get(s, 999);
    TAP_OK(a && a->tensor == 999 && a->bytes == 1099, "actions keep their fields and order");
    TAP_OK(sched_get(s, 1000) == NULL, "sched_get past the end is NULL");
    sched_free(s);
    sched_free(NULL);
    TAP_OK(strcmp(sched_kind_name(SA_COPY_H2D), "copy_h2d") == 0 &&
           strcmp(sched_stream_name(SS_D2H), "d2h") == 0 &&
           strcmp(sched_kind_name((sched_kind)99), "?") == 0,
           "kind and stream names");
}

static void test_validate_ok(void)
{
    ms_error err;
    sched_action ok[] = {
        mk(SA_ALLOC, SS_COMPUTE, 1, 1000), ev(SA_RECORD, SS_COMPUTE, 0),
        ev(SA_WAIT, SS_D2H, 0), mk(SA_HOST_ALLOC, SS_D2H, 1, 500),
        mk(SA_COPY_D2H, SS_D2H, 1, 500), mk(SA_FREE, SS_D2H, 1, 0), ev(SA_RECORD, SS_D2H, 1),
        ev(SA_WAIT, SS_H2D, 1), mk(SA_ALLOC, SS_H2D, 1, 1000), mk(SA_COPY_H2D, SS_H2D, 1, 500),
        mk(SA_HOST_FREE, SS_H2D, 1, 0), ev(SA_RECORD, SS_H2D, 2), ev(SA_WAIT, SS_COMPUTE, 2),
        ev(SA_WAIT, SS_COMPUTE, 2), mk(SA_FREE, SS_COMPUTE, 1, 0), mk(SA_ALLOC, SS_COMPUTE, 1, 8),
    };
    TAP_OK(check(ok, sizeof ok / sizeof *ok, 3, &err) == MS_OK,
           "a well-formed swap round trip validates (%s)", err.msg);
}

typedef struct bad_case {
    const char *what;
    const char *expect;   /* substring of the error */
    sched_action a[4];
    size_t n;
    uint32_t events;
} bad_case;

static void test_validate_errors(void)
{
    bad_case cases[] = {
        { "WAIT before its RECORD", "before any RECORD",
          { ev(SA_WAIT, SS_COMPUTE, 0), ev(SA_RECORD, SS_D2H, 0) }, 2, 1 },
        { "event recorded twice", "second time",
          { ev(SA_RECORD, SS_COMPUTE, 0), ev(SA_RECORD, SS_D2H, 0) }, 2, 1 },
        { "event never created", "never created", { ev(SA_RECORD, SS_COMPUTE, 5) }, 1, 1 },
        { "FREE of a never-allocated tensor", "holds no device block",
          { mk(SA_FREE, SS_COMPUTE, 7, 0) }, 1, 0 },
        { "double FREE (across streams)", "holds no device block",
          { mk(SA_ALLOC, SS_COMPUTE, 7, 10), mk(SA_FREE, SS_D2H, 7, 0),
            mk(SA_FREE, SS_COMPUTE, 7, 0) }, 3, 0 },
        { "ALLOC of a live tensor", "allocated again",
          { mk(SA_ALLOC, SS_COMPUTE, 7, 10), mk(SA_ALLOC, SS_H2D, 7, 10) }, 2, 0 },
        { "D2H copy of a missing tensor", "holds no device block",
          { mk(SA_HOST_ALLOC, SS_D2H, 3, 10), mk(SA_COPY_D2H, SS_D2H, 3, 10) }, 2, 0 },
        { "H2D copy without a host copy", "no host copy",
          { mk(SA_ALLOC, SS_H2D, 3, 10), mk(SA_COPY_H2D, SS_H2D, 3, 10) }, 2, 0 },
        { "copy larger than the block", "whose block has",
          { mk(SA_ALLOC, SS_COMPUTE, 3, 10), mk(SA_HOST_ALLOC, SS_D2H, 3, 20),
            mk(SA_COPY_D2H, SS_D2H, 3, 20) }, 3, 0 },
        { "HOST_FREE without HOST_ALLOC", "holds no host memory",
          { mk(SA_HOST_FREE, SS_H2D, 3, 0) }, 1, 0 },
        { "HOST_ALLOC twice", "already holds host memory",
          { mk(SA_HOST_ALLOC, SS_D2H, 3, 5), mk(SA_HOST_ALLOC, SS_D2H, 3, 5) }, 2, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ms_error err;
        ms_status st = check(cases[i].a, cases[i].n, cases[i].events, &err);
        TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, cases[i].expect),
               "validate catches %s: %s", cases[i].what, err.msg);
    }
    sched_action neg = mk(SA_COMPUTE, SS_COMPUTE, 0, 0);
    neg.dur_us = -1;
    ms_error err;
    TAP_OK(check(&neg, 1, 0, &err) == MS_ERR_INVALID && strstr(err.msg, "action 0"),
           "validate catches a negative duration and names the action: %s", err.msg);
    sched_action badk = mk((sched_kind)42, SS_COMPUTE, 0, 0);
    TAP_OK(check(&badk, 1, 0, &err) == MS_ERR_INVALID, "validate rejects an unknown kind");
    TAP_OK(sched_validate(NULL, &err) == MS_ERR_INVALID, "validate rejects NULL");
}

static char *dump_str(const schedule_t *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sched_dump(s, f);
    fclose(f);
    return buf;
}

static void test_dump(void)
{
    schedule_t *s = sched_new();
    sched_action m = mk(SA_MARK, SS_COMPUTE, 0, 0);
    m.mark = TM_PHASE;
    m.mark_value = TP_BWD;
    m.phase = TP_BWD;
    sched_add(s, &m);
    sched_action c = mk(SA_COMPUTE, SS_COMPUTE, 0, 0);
    c.op = 12;
    c.dur_us = 2.5;
    c.recompute = 1;
    c.layer = 3;
    c.phase = TP_BWD;
    sched_add(s, &c);
    sched_action a = mk(SA_COPY_D2H, SS_D2H, 77, 4096);
    a.layer = 3;
    a.phase = TP_FWD;
    sched_add(s, &a);
    sched_new_event(s);
    sched_add(s, &(sched_action){ .kind = SA_WAIT, .stream = SS_H2D, .event = 0, .op = -1,
                                  .layer = -1 });
    char *d = dump_str(s);
    const char *want =
        "0 compute mark kind=phase value=bwd layer=-1 phase=bwd\n"
        "1 compute compute op=12 dur_us=2.5 recompute=1 layer=3 phase=bwd\n"
        "2 d2h copy_d2h t=77 bytes=4096 layer=3 phase=fwd\n"
        "3 h2d wait e=0 layer=-1 phase=none\n";
    TAP_OK(d && strcmp(d, want) == 0, "dump format is the documented one");
    if (!d || strcmp(d, want) != 0) printf("# got:\n%s", d ? d : "(null)\n");
    char *d2 = dump_str(s);
    TAP_OK(d && d2 && strcmp(d, d2) == 0, "dump is deterministic");
    free(d);
    free(d2);
    sched_free(s);
}

/* The stream index: each stream's actions and the timed ones in program order, the largest
 * ALLOC id; none for a schedule an executor would refuse; dropped when an action is added. */
static void test_index(void)
{
    schedule_t *s = sched_new();
    sched_action acts[] = {
        mk(SA_ALLOC, SS_COMPUTE, 7, 4096), mk(SA_COMPUTE, SS_COMPUTE, 0, 0),
        mk(SA_COPY_D2H, SS_D2H, 7, 4096),  mk(SA_HOST_COMPUTE, SS_HOST, 0, 0),
        mk(SA_ALLOC, SS_H2D, 3, 512),      mk(SA_FREE, SS_COMPUTE, 7, 0),
    };
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) sched_add(s, &acts[i]);
    TAP_OK(!sched_get_index(s), "no index before it is built");
    TAP_OK(sched_index_build(s) == MS_OK, "a schedule indexes");
    const sched_index *ix = sched_get_index(s);
    TAP_OK(ix && ix->n[SS_COMPUTE] == 3 && ix->q[SS_COMPUTE][0] == 0 &&
               ix->q[SS_COMPUTE][1] == 1 && ix->q[SS_COMPUTE][2] == 5 && ix->n[SS_D2H] == 1 &&
               ix->q[SS_D2H][0] == 2 && ix->n[SS_H2D] == 1 && ix->q[SS_H2D][0] == 4 &&
               ix->n[SS_HOST] == 1 && ix->q[SS_HOST][0] == 3,
           "each stream's actions in program order");
    TAP_OK(ix && ix->n_timed == 2 && ix->timed[0] == 1 && ix->timed[1] == 3 &&
               ix->any_alloc && ix->top_alloc == 7,
           "the timed actions, and the largest ALLOC id");
    TAP_OK(ix && ix->brief[0].kind == SA_ALLOC && ix->brief[0].id == 7 &&
               ix->brief[2].kind == SA_COPY_D2H && ix->brief[2].id == 7 &&
               ix->brief[4].id == 3 && ix->brief[5].kind == SA_FREE && ix->brief[5].id == 7,
           "each action's brief: its kind and tensor");
    sched_action ev = mk(SA_WAIT, SS_D2H, 0, 0), mark = mk(SA_MARK, SS_COMPUTE, 0, 0),
                 al = mk(SA_ALLOC, SS_COMPUTE, 9, 64), rc = mk(SA_COMPUTE, SS_COMPUTE, 0, 0);
    ev.event = 4;
    mark.mark = TM_ITER;
    al.pool = 2;
    al.block = SB_ACT_SKEL;
    rc.recompute = 1;
    sched_brief be, bm, ba, br;
    sched_brief_put(&be, &ev);
    sched_brief_put(&bm, &mark);
    sched_brief_put(&ba, &al);
    sched_brief_put(&br, &rc);
    TAP_OK(be.kind == SA_WAIT && be.id == 4 && bm.iter == 1 && ba.pool == 2 &&
               ba.block == SB_ACT_SKEL && ba.id == 9 && br.recompute == 1 && br.iter == 0,
           "a brief names a WAIT's event, an iteration mark, an ALLOC's pool and block, a "
           "recomputation");
    sched_action dh = mk(SA_COMPUTE, SS_COMPUTE, 0, 0);
    dh.host_write_bytes = 8;
    sched_brief bd;
    sched_brief_put(&bd, &dh);
    TAP_OK(bd.dha == 1 && br.dha == 0, "a brief says which kernels move bytes across the link");
    size_t n;
    sched_actions_edit(s, &n)[1].dur_us = 5;
    TAP_OK(sched_get_index(s) == ix, "an edit of numbers keeps the index");
    TAP_OK(ix->num[0].bytes == 4096 && ix->num[1].dur_us == 5 && ix->num[2].bytes == 4096 &&
               ix->num[4].bytes == 512 && ix->num[5].bytes == 0,
           "the index's numbers follow the actions' edit");
    sched_num *num = sched_nums_edit(s, &n);
    TAP_OK(num && n == 6, "the index's numbers to edit");
    num[0].bytes = 8192;
    num[3].dur_us = 2.5;
    TAP_OK(sched_actions_unbound(s, &n)[0].bytes == 4096, "the unbound actions keep theirs");
    TAP_OK(sched_get(s, 0)->bytes == 8192 && sched_actions(s, &n)[3].dur_us == 2.5 &&
               sched_get(s, 1)->dur_us == 5 && sched_get(s, 5)->bytes == 0,
           "the actions take the edited numbers when read");
    sched_actions_edit(s, &n)[4].bytes = 1024;
    num = sched_nums_edit(s, &n);
    TAP_OK(num && num[4].bytes == 1024 && num[0].bytes == 8192,
           "numbers edited in the actions reach the index");
    sched_add(s, &acts[1]);
    TAP_OK(!sched_get_index(s), "an added action drops it");
    sched_action bad = mk(SA_COMPUTE, SS_D2H, 0, 0);
    sched_add(s, &bad);
    TAP_OK(sched_index_build(s) == MS_ERR_INVALID && !sched_get_index(s),
           "no index with a compute off the compute stream");
    sched_free(s);
    s = sched_new();
    bad = mk(SA_FREE, SS_COUNT, 1, 0);
    sched_add(s, &bad);
    TAP_OK(sched_index_build(s) == MS_ERR_INVALID && !sched_get_index(s),
           "nor with a stream out of range");
    sched_free(s);
}

int main(void)
{
    test_container();
    test_index();
    test_validate_ok();
    test_validate_errors();
    test_dump();
    return tap_done();
}

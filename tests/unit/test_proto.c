/* Unit tests: control-plane framing, validation of malformed messages, incremental receive. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ftrt.h"
#include "base/clock.h"
#include "base/proto.h"

static void header_checks(void **state)
{
    (void)state;
    ftrt__msghdr h = {FTRT__MAGIC, FTRT__MSG_HEARTBEAT, sizeof(ftrt__heartbeat), 0};
    assert_int_equal(ftrt__msg_check(&h), 0);
    h.len = sizeof(ftrt__heartbeat) + 1;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO); /* wrong size for the type */
    h.len = sizeof(ftrt__heartbeat);
    h.magic = 0xdeadbeef;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.magic = FTRT__MAGIC;
    h.type = FTRT__MSG_TYPE_END;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.type = 0;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.type = FTRT__MSG_PLAN;
    for (int n = 0; n <= 9; n++) { /* every count, odd ones included */
        h.len = (uint32_t)ftrt__plan_msg_size(n, n ? 2 * n : 0);
        assert_int_equal(ftrt__msg_check(&h), 0);
    }
    h.len = (uint32_t)ftrt__plan_msg_size(4, 0) + 2; /* not a whole entry */
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.len = sizeof(ftrt__plan_msg) - 4; /* shorter than the fixed part */
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.type = FTRT__MSG_REPORT;
    h.len = FTRT__MSG_MAX + 4; /* oversized */
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    /* the standby coordinator's messages */
    h.type = FTRT__MSG_NEXT_COORD;
    h.len = sizeof(ftrt__coord_at);
    assert_int_equal(ftrt__msg_check(&h), 0);
    h.len = sizeof(ftrt__coord_at) - 1;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.type = FTRT__MSG_SYNC_ACK;
    h.len = sizeof(ftrt__epoch_msg);
    assert_int_equal(ftrt__msg_check(&h), 0);
    h.type = FTRT__MSG_SYNC; /* any size up to FTRT__SYNC_MAX, beyond FTRT__MSG_MAX */
    h.len = (uint32_t)(FTRT__MSG_MAX * 4);
    assert_int_equal(ftrt__msg_check(&h), 0);
    h.len = (uint32_t)FTRT__SYNC_MAX + 1;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    /* RESUMED carries the member's phases: the bare epoch message of before is refused */
    h.type = FTRT__MSG_RESUMED;
    h.len = sizeof(ftrt__resumed_msg);
    assert_int_equal(ftrt__msg_check(&h), 0);
    h.len = sizeof(ftrt__epoch_msg);
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
}

/* A RESUMED goes through with its phases intact, its epoch where an ftrt__epoch_msg has it. */
static void resumed_phases(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ftrt__resumed_msg m = {.epoch = 3, .rebuild_s = 0.25, .transfer_s = 1.5, .span_s = 2.0};
    assert_int_equal(ftrt__msg_send(sv[0], FTRT__MSG_RESUMED, &m, sizeof m), 0);
    ftrt__rxbuf rx = {0};
    assert_true(ftrt__rx_fill(&rx, sv[1]) > 0);
    ftrt__msghdr h;
    const void *payload;
    assert_int_equal(ftrt__rx_next(&rx, &h, &payload), 1);
    assert_int_equal(h.type, FTRT__MSG_RESUMED);
    assert_int_equal(h.len, sizeof m);
    ftrt__resumed_msg back;
    memcpy(&back, payload, sizeof back);
    assert_int_equal(back.epoch, 3);
    assert_true(back.rebuild_s == 0.25 && back.transfer_s == 1.5 && back.span_s == 2.0);
    ftrt__epoch_msg em;
    memcpy(&em, payload, sizeof em);
    assert_int_equal(em.epoch, 3);
    ftrt__rx_free(&rx);
    close(sv[0]);
    close(sv[1]);
}

/* The heartbeat period the coordinator asks for grows with the world, within the timeout. */
static void heartbeat_period(void **state)
{
    (void)state;
    assert_int_equal(ftrt__heartbeat_period_ms(100, 1000, 6), 100);      /* small jobs: as set */
    assert_int_equal(ftrt__heartbeat_period_ms(100, 1000, 4000), 100);   /* 40,000/s: as set */
    assert_int_equal(ftrt__heartbeat_period_ms(100, 1000, 6000), 150);   /* within the budget */
    assert_int_equal(ftrt__heartbeat_period_ms(100, 1000, 16393), 250);  /* a quarter of 1 s */
    assert_int_equal(ftrt__heartbeat_period_ms(100, 300, 16393), 100);   /* never below the set */
    assert_int_equal(ftrt__heartbeat_period_ms(500, 10000, 16393), 500); /* 32,786/s: as set */
}

static void plan_checks(void **state)
{
    (void)state;
    size_t len = ftrt__plan_size(3);
    ftrt__plan *p = calloc(1, len);
    p->ntrainers = 3;
    p->source = 1;
    p->logical_rank = 2;
    p->resume_step = 10;
    p->members[0] = 1, p->members[1] = 5, p->members[2] = 3;
    p->ckpt_step = p->mem_step = -1;
    int32_t *ss = ftrt__plan_shard_src(p), *role = ftrt__plan_roles(p);
    ss[0] = ss[1] = ss[2] = -1;
    assert_int_equal(ftrt__plan_check(p, len), 0);
    /* sharded images: only in a memory plan, from a survivor to a member that needs state */
    ss[2] = 0;
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO); /* no mem_step */
    p->mem_step = 10;
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO); /* rank 2 is up to date */
    role[2] = FTRT__PLAN_NEEDS_STATE;
    assert_int_equal(ftrt__plan_check(p, len), 0);
    ss[2] = 2; /* its own holder */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    ss[2] = 3; /* no such rank */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    ss[2] = FTRT__SHARD_SRC_ERASURE; /* rebuilt by its erasure group */
    assert_int_equal(ftrt__plan_check(p, len), 0);
    role[2] = FTRT__PLAN_UP_TO_DATE; /* ... only a member that needs state */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    role[2] = FTRT__PLAN_NEEDS_STATE, p->mem_step = -1; /* ... only in a memory plan */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    p->mem_step = 10, ss[2] = -3; /* no such source */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    ss[2] = 0;
    p->ckpt_step = 10; /* memory and checkpoint at once */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    p->ckpt_step = -1;
    p->mem_step = 9; /* not the resume step */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    p->mem_step = -1, ss[2] = -1, role[2] = FTRT__PLAN_UP_TO_DATE;
    assert_int_equal(ftrt__plan_check(p, len), 0);
    assert_int_equal(ftrt__plan_check(p, len - 4), FTRT_EPROTO);
    p->members[2] = 5; /* duplicate member */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    p->members[2] = 0; /* the coordinator is never a member */
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    p->members[2] = 3;
    p->source = 3;
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    p->source = 0;
    p->resume_step = -1;
    assert_int_equal(ftrt__plan_check(p, len), FTRT_EPROTO);
    free(p);
}

/* A survivor's PLAN is the membership delta: O(replaced) bytes whatever the number of
 * trainers and of survivors behind (counted, not listed); expanded against the membership it
 * knew, it gives every member's world rank, role and sharded-image source, the survivors behind
 * once their set is applied (ftrt__plan_behind_apply, learned on the data plane). The cases
 * plan_delta* below share this PLAN (delta_msg) and each change what they test in it. */

/* The peers plan of the plan_delta cases, of *len bytes (ftrt__plan_msg_size(2, 0)): logical 1
 * -> world 7, 4 -> 8, one survivor behind; prev gets the membership it replaces (world 1..6).
 * The caller frees it. */
static ftrt__plan_msg *delta_msg(size_t *len, int32_t prev[6])
{
    ftrt__plan_initial_members(prev, 6);
    *len = ftrt__plan_msg_size(2, 0);
    ftrt__plan_msg *m = calloc(1, *len);
    *m = (ftrt__plan_msg){.resume_step = 30, .ckpt_step = -1, .mem_step = -1, .epoch = 2,
                          .ntrainers = 6, .source = 0, .logical_rank = -1, .nrepl = 2,
                          .nbehind = 1};
    int32_t d[] = {1, 7, -1, 4, 8, -1}; /* logical 1 -> world 7, 4 -> 8; one survivor behind */
    memcpy(m->data, d, sizeof d);
    return m;
}

static void plan_delta(void **state)
{
    (void)state;
    int32_t prev[6];
    size_t len;
    ftrt__plan_msg *m = delta_msg(&len, prev);
    for (int l = 0; l < 6; l++) assert_int_equal(prev[l], l + 1);
    assert_int_equal(len, sizeof(ftrt__plan_msg) + 24); /* no N and no survivor behind in it */
    ftrt__plan *p = NULL;
    size_t plen = 0;
    assert_int_equal(ftrt__plan_expand(m, len, prev, 6, 3, &p, &plen), 0);
    int32_t want_w[6] = {1, 7, 3, 4, 8, 6}, want_role[6] = {0, 1, 0, 0, 1, 0};
    for (int l = 0; l < 6; l++) {
        assert_int_equal(p->members[l], want_w[l]);
        assert_int_equal(ftrt__plan_roles(p)[l], want_role[l]);
        assert_int_equal(ftrt__plan_shard_src(p)[l], -1);
    }
    assert_int_equal(p->logical_rank, 3);
    assert_int_equal(p->resume_step, 30);
    assert_int_equal(p->epoch, 2);
    assert_int_equal(p->nbehind, 1);
    /* who is behind: a survivor that reported fewer steps; a replaced rank never */
    assert_int_equal(ftrt__plan_behind_mine(p, 30, 0), 0);
    assert_int_equal(ftrt__plan_behind_mine(p, 29, 0), 1);
    p->logical_rank = 1;
    assert_int_equal(ftrt__plan_behind_mine(p, 29, 0), 0);
    p->logical_rank = 3;
    assert_int_equal(ftrt__plan_behind_words(6), 1);
    assert_int_equal(ftrt__plan_behind_words(64), 1);
    assert_int_equal(ftrt__plan_behind_words(65), 2);
    int64_t bits[1] = {1 << 5}; /* logical 5 said it is behind */
    assert_int_equal(ftrt__plan_behind_apply(p, plen, bits, 1), 0);
    want_role[5] = 1;
    for (int l = 0; l < 6; l++) assert_int_equal(ftrt__plan_roles(p)[l], want_role[l]);
    free(p);
    free(m);
}

/* The set of survivors behind refused, the plan left as it was: a count other than nbehind, a
 * replaced rank, a bit past ntrainers, the source (it is up to date), a set of the wrong size. */
static void plan_delta_behind_refused(void **state)
{
    (void)state;
    int32_t prev[6];
    size_t len, plen = 0;
    ftrt__plan_msg *m = delta_msg(&len, prev);
    ftrt__plan *p = NULL;
    assert_int_equal(ftrt__plan_expand(m, len, prev, 6, 3, &p, &plen), 0);
    int64_t bits[1] = {1 << 5}; /* logical 5 */
    int64_t bad[] = {(1 << 5) | (1 << 3), 1 << 4, 1 << 6, 1 << 0, 0};
    for (int i = 0; i < 5; i++) assert_int_equal(ftrt__plan_behind_apply(p, plen, &bad[i], 1),
                                                 FTRT_EPROTO);
    assert_int_equal(ftrt__plan_behind_apply(p, plen, bits, 2), FTRT_EPROTO);
    for (int l = 0; l < 6; l++) assert_int_equal(ftrt__plan_roles(p)[l], l == 1 || l == 4);
    free(p);
    free(m);
}

/* Survivors behind only in a peers plan, fewer than the survivors. */
static void plan_delta_nbehind(void **state)
{
    (void)state;
    int32_t prev[6];
    size_t len;
    ftrt__plan_msg *m = delta_msg(&len, prev);
    m->nbehind = 4; /* 4 survivors, all behind: the source would be too */
    assert_int_equal(ftrt__plan_msg_check(m, len), FTRT_EPROTO);
    m->nbehind = 3;
    assert_int_equal(ftrt__plan_msg_check(m, len), 0);
    m->nbehind = -1;
    assert_int_equal(ftrt__plan_msg_check(m, len), FTRT_EPROTO);
    m->nbehind = 1, m->ckpt_step = 20;
    assert_int_equal(ftrt__plan_msg_check(m, len), FTRT_EPROTO);
    free(m);
}

/* A checkpoint plan: every member reloads it, nobody needs state from peers. */
static void plan_delta_ckpt(void **state)
{
    (void)state;
    int32_t prev[6];
    size_t len, plen = 0;
    ftrt__plan_msg *m = delta_msg(&len, prev);
    ftrt__plan *p = NULL;
    m->ckpt_step = 20, m->resume_step = 20, m->nbehind = 0;
    size_t len2 = ftrt__plan_msg_size(2, 0);
    assert_int_equal(ftrt__plan_expand(m, len2, prev, 6, 3, &p, &plen), 0);
    for (int l = 0; l < 6; l++) assert_int_equal(ftrt__plan_roles(p)[l], FTRT__PLAN_UP_TO_DATE);
    assert_int_equal(ftrt__plan_behind_mine(p, 19, 0), 0);
    free(p);
    free(m);
}

/* A memory plan: the replaced ranks receive their sharded image from the named holder; and
 * the delta refused: another membership size, a sharded-image source that is itself replaced,
 * bad counts, ranks and lengths, a logical rank with no table. */
static void plan_delta_memory(void **state)
{
    (void)state;
    int32_t prev[6];
    size_t len, plen = 0;
    ftrt__plan_msg *m = delta_msg(&len, prev);
    ftrt__plan *p = NULL;
    m->resume_step = 20, m->nbehind = 0; /* resumed at step 20, nobody behind */
    size_t len2 = ftrt__plan_msg_size(2, 0);
    m->ckpt_step = -1, m->mem_step = 20;
    m->data[2] = 2, m->data[5] = 5;
    assert_int_equal(ftrt__plan_expand(m, len2, prev, 6, 3, &p, &plen), 0);
    assert_int_equal(ftrt__plan_shard_src(p)[1], 2);
    assert_int_equal(ftrt__plan_shard_src(p)[4], 5);
    assert_int_equal(ftrt__plan_roles(p)[4], FTRT__PLAN_NEEDS_STATE);
    free(p);
    /* a survivor behind in a memory plan: one whose own image is shard-only (it restores its
     * sharded regions itself and receives the replicated ones), here logical 5, which also
     * holds logical 4's sharded image: it still sends it */
    m->nbehind = 1;
    assert_int_equal(ftrt__plan_expand(m, len2, prev, 6, 3, &p, &plen), 0);
    assert_int_equal(ftrt__plan_behind_mine(p, 20, 0), 0);
    assert_int_equal(ftrt__plan_behind_mine(p, 19, 0), 0); /* (steps do not count here) */
    p->logical_rank = 5;
    assert_int_equal(ftrt__plan_behind_mine(p, 20, 1), 1);
    p->logical_rank = 4; /* a replaced rank is never behind */
    assert_int_equal(ftrt__plan_behind_mine(p, 20, 1), 0);
    int64_t bits[1] = {1 << 5};
    assert_int_equal(ftrt__plan_behind_apply(p, plen, bits, 1), 0);
    assert_int_equal(ftrt__plan_roles(p)[5], FTRT__PLAN_NEEDS_STATE);
    assert_int_equal(ftrt__plan_shard_src(p)[4], 5);
    free(p);
    p = NULL;
    m->nbehind = 0;
    assert_int_equal(ftrt__plan_expand(m, len2, prev, 5, 3, &p, &plen), FTRT_EPROTO);
    assert_int_equal(ftrt__plan_expand(m, len2, NULL, 0, 3, &p, &plen), FTRT_EPROTO);
    m->data[5] = 1; /* logical 1 is replaced too: it holds no image */
    assert_int_equal(ftrt__plan_expand(m, len2, prev, 6, 3, &p, &plen), FTRT_EPROTO);
    m->data[5] = 5;
    assert_null(p);
    assert_int_equal(ftrt__plan_msg_check(m, len2), 0);
    assert_int_equal(ftrt__plan_msg_check(m, len2 + 4), FTRT_EPROTO);
    m->data[0] = 6; /* logical rank out of range */
    assert_int_equal(ftrt__plan_msg_check(m, len2), FTRT_EPROTO);
    m->data[0] = 1, m->data[1] = 0; /* the coordinator is never a member */
    assert_int_equal(ftrt__plan_msg_check(m, len2), FTRT_EPROTO);
    m->data[1] = 7, m->data[2] = -3;
    assert_int_equal(ftrt__plan_msg_check(m, len2), FTRT_EPROTO);
    m->data[2] = FTRT__SHARD_SRC_ERASURE; /* rebuilt by its erasure group: a valid source */
    assert_int_equal(ftrt__plan_msg_check(m, len2), 0);
    m->data[2] = 2, m->logical_rank = 1; /* a logical rank only with the whole table */
    assert_int_equal(ftrt__plan_msg_check(m, len2), FTRT_EPROTO);
    m->logical_rank = -1, m->nrepl = 7; /* more replaced ranks than trainers */
    assert_int_equal(ftrt__plan_msg_check(m, ftrt__plan_msg_size(7, 0)), FTRT_EPROTO);
    m->nrepl = 2, m->nmembers = 5; /* a table of another size */
    assert_int_equal(ftrt__plan_msg_check(m, ftrt__plan_msg_size(2, 5)), FTRT_EPROTO);
    m->nmembers = 0, m->ntrainers = 0;
    assert_int_equal(ftrt__plan_msg_check(m, len2), FTRT_EPROTO);
    free(m);
}

/* The PLAN a promoted spare gets in a job of 16,384 trainers carries the whole membership
 * (64 KiB and more than FTRT__MSG_MAX): it passes the header check, goes through
 * ftrt__msg_send and the receive buffer whole, and expands in O(n); a duplicate member is found
 * without an O(n^2) scan; a header announcing more than 4 x FTRT__MAX_WORLD entries is refused,
 * and other types stay bounded by FTRT__MSG_MAX. */
/* The PLAN of an epoch a shrink or fold renumbered (FTRT_NO_SPARE): the whole, smaller
 * membership to every member with its new logical rank, and the holder table (data rank ->
 * logical rank, -1: skipped), which the agent keeps (a delta has none: ndata 0); a table with
 * a holder out of [-1, ntrainers), or without the membership, is refused. */
static void plan_shrink(void **state)
{
    (void)state;
    size_t len = ftrt__plan_msg_size(0, 3 + 4);
    ftrt__plan_msg *m = calloc(1, len);
    *m = (ftrt__plan_msg){.resume_step = 40, .ckpt_step = -1, .mem_step = -1, .epoch = 3,
                          .ntrainers = 3, .source = 0, .logical_rank = 1, .nmembers = 3,
                          .ndata = 4}; /* 4 trainers, logical 1 lost: old logical 2 is 1 */
    int32_t table[7] = {1, 3, 4, /* holders: */ 0, -1, 1, 2};
    memcpy(m->data, table, sizeof table);
    assert_int_equal(ftrt__plan_msg_check(m, len), 0);
    assert_int_equal(ftrt__plan_msg_holder(m)[1], -1);
    assert_int_equal(ftrt__plan_msg_holder(m)[3], 2);
    int32_t prev[4] = {1, 2, 3, 4};
    ftrt__plan *p = NULL;
    size_t plen = 0;
    assert_int_equal(ftrt__plan_expand(m, len, prev, 4, 2, &p, &plen), 0);
    assert_int_equal(p->ntrainers, 3);
    assert_int_equal(p->logical_rank, 1);
    assert_int_equal(p->ndata, 4);
    assert_int_equal(p->members[1], 3);
    for (int l = 0; l < 3; l++) assert_int_equal(ftrt__plan_roles(p)[l], FTRT__PLAN_UP_TO_DATE);
    free(p);
    m->data[3 + 1] = 3; /* a holder past the trainers */
    assert_int_equal(ftrt__plan_msg_check(m, len), FTRT_EPROTO);
    m->data[3 + 1] = -2;
    assert_int_equal(ftrt__plan_msg_check(m, len), FTRT_EPROTO);
    m->data[3 + 1] = 0;                          /* fold: logical 0 holds data ranks 0 and 1 */
    assert_int_equal(ftrt__plan_msg_check(m, len), 0);
    assert_int_equal(ftrt__plan_msg_check(m, len - 4), FTRT_EPROTO); /* the table cut short */
    free(m);
    int32_t prev6[6];
    ftrt__plan_msg *d = delta_msg(&len, prev6);
    assert_int_equal(ftrt__plan_expand(d, len, prev6, 6, 3, &p, &plen), 0);
    assert_int_equal(p->ndata, 0); /* a delta: the data ranks unchanged */
    free(p);
    d->ndata = 3; /* a table without the membership */
    assert_int_equal(ftrt__plan_msg_check(d, ftrt__plan_msg_size(2, 3)), FTRT_EPROTO);
    free(d);
}

static void large_plan(void **state)
{
    (void)state;
    const int n = 16384;
    size_t len = ftrt__plan_msg_size(1, n + n); /* the members and the holder table */
    assert_true(len > FTRT__MSG_MAX);
    ftrt__plan_msg *p = calloc(1, len);
    assert_non_null(p);
    p->ntrainers = n;
    p->resume_step = 7;
    p->logical_rank = n - 1;
    p->ckpt_step = p->mem_step = -1;
    p->nrepl = 1, p->nmembers = n, p->ndata = n;
    p->data[0] = n - 1, p->data[1] = 1, p->data[2] = -1; /* logical n - 1 is world rank 1 now */
    int32_t *table = p->data + 3;
    for (int i = 0; i < n; i++) table[i] = n - i; /* world ranks n..1 */
    for (int i = 0; i < n; i++) table[n + i] = i;  /* data rank i on logical rank i */
    ftrt__plan *x = NULL;
    size_t xlen = 0;
    assert_int_equal(ftrt__plan_expand(p, len, NULL, 0, -1, &x, &xlen), 0);
    assert_int_equal(xlen, ftrt__plan_size(n));
    assert_int_equal(x->members[0], n);
    assert_int_equal(x->members[n - 1], 1);
    assert_int_equal(x->logical_rank, n - 1);
    assert_int_equal(ftrt__plan_roles(x)[n - 1], FTRT__PLAN_NEEDS_STATE);
    free(x);
    table[n / 2] = table[n / 3]; /* a duplicate member */
    assert_int_equal(ftrt__plan_expand(p, len, NULL, 0, -1, &x, &xlen), FTRT_EPROTO);
    assert_null(x);
    table[n / 2] = n - n / 2;
    ftrt__msghdr h = {FTRT__MAGIC, FTRT__MSG_PLAN, (uint32_t)len, 0};
    assert_int_equal(ftrt__msg_check(&h), 0);
    h.len = (uint32_t)(sizeof(ftrt__plan_msg) + (4 * (size_t)FTRT__MAX_WORLD + 1) * 4);
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.type = FTRT__MSG_LEDGER;
    h.len = (uint32_t)ftrt__ledger_msg_size((int)((len - sizeof(ftrt__ledger_msg)) /
                                                   sizeof(ftrt__interval)));
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO); /* only a PLAN may be that large */

    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int big = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) { /* the sender: one sendmsg of header + payload */
        close(sv[1]);
        _exit(ftrt__msg_send(sv[0], FTRT__MSG_PLAN, p, (uint32_t)len) ? 1 : 0);
    }
    close(sv[0]);
    ftrt__rxbuf rx = {0};
    ftrt__msghdr got;
    const void *payload = NULL;
    int r = 0;
    while (r == 0) {
        ssize_t k = ftrt__rx_fill(&rx, sv[1]);
        if (k == -EAGAIN) {
            struct pollfd pf = {.fd = sv[1], .events = POLLIN};
            poll(&pf, 1, 1000);
            continue;
        }
        assert_true(k > 0);
        r = ftrt__rx_next(&rx, &got, &payload);
    }
    assert_int_equal(r, 1);
    assert_int_equal(got.len, len);
    assert_memory_equal(payload, p, len);
    int status = -1;
    waitpid(child, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ftrt__rx_free(&rx);
    close(sv[1]);
    free(p);
}

/* Messages written a byte at a time arrive whole and in order. */
static void incremental_receive(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int wfd = sv[0], rfd = sv[1];
    uint8_t frame[256];
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        ftrt__msghdr h = {FTRT__MAGIC, FTRT__MSG_HEARTBEAT, sizeof(ftrt__heartbeat), 0};
        ftrt__heartbeat hb = {.steps_done = 100 + i, .kept_s = 0.5 * i, .epoch = i};
        memcpy(frame + n, &h, sizeof h);
        memcpy(frame + n + sizeof h, &hb, sizeof hb);
        n += sizeof h + sizeof hb;
    }
    ftrt__rxbuf rx = {0};
    int got_msgs = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(write(wfd, frame + i, 1), 1);
        assert_int_equal(ftrt__rx_fill(&rx, rfd), 1);
        ftrt__msghdr h;
        const void *payload;
        int r;
        while ((r = ftrt__rx_next(&rx, &h, &payload)) == 1) {
            ftrt__heartbeat hb;
            memcpy(&hb, payload, sizeof hb);
            assert_int_equal(hb.steps_done, 100 + got_msgs);
            assert_int_equal(hb.epoch, got_msgs);
            got_msgs++;
        }
        assert_int_equal(r, 0);
    }
    assert_int_equal(got_msgs, 3);
    assert_int_equal(ftrt__rx_fill(&rx, rfd), -EAGAIN);
    close(wfd);
    assert_int_equal(ftrt__rx_fill(&rx, rfd), 0); /* EOF */
    ftrt__rx_free(&rx);
    close(rfd);
}

static void send_and_malformed(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ftrt__epoch_msg m = {.epoch = 7, .value = FTRT_ENOSPARE};
    assert_int_equal(ftrt__msg_send(sv[0], FTRT__MSG_ABORT, &m, sizeof m), 0);
    ftrt__rxbuf rx = {0};
    assert_true(ftrt__rx_fill(&rx, sv[1]) > 0);
    ftrt__msghdr h;
    const void *payload;
    assert_int_equal(ftrt__rx_next(&rx, &h, &payload), 1);
    assert_int_equal(h.type, FTRT__MSG_ABORT);
    ftrt__epoch_msg back;
    memcpy(&back, payload, sizeof back);
    assert_int_equal(back.epoch, 7);
    assert_int_equal(back.value, FTRT_ENOSPARE);
    assert_int_equal(h.term, 0); /* no term set on this thread */
    /* the term this thread set goes in every header it builds, a relay's inner one too */
    ftrt__msg_set_term(3);
    ftrt__relay pre = {.world_rank = 5};
    assert_int_equal(ftrt__msg_send2(sv[0], FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_ABORT,
                                     &m, sizeof m), 0);
    ftrt__msg_set_term(0);
    assert_true(ftrt__rx_fill(&rx, sv[1]) > 0);
    assert_int_equal(ftrt__rx_next(&rx, &h, &payload), 1);
    assert_int_equal(h.type, FTRT__MSG_RELAY);
    assert_int_equal(h.term, 3);
    int32_t w;
    ftrt__msghdr ih;
    const void *inner;
    assert_int_equal(ftrt__relay_open(payload, h.len, &w, &ih, &inner), 0);
    assert_int_equal(w, 5);
    assert_int_equal(ih.type, FTRT__MSG_ABORT);
    assert_int_equal(ih.term, 3);
    /* a drain's messages go through host agents both ways: DRAIN to a rank, DRAIN_ME from one */
    const uint32_t drains[] = {FTRT__MSG_DRAIN, FTRT__MSG_DRAIN_ME};
    ftrt__drain_msg dm = {.epoch = 7, .value = 1, .boundary_step = 5000000000LL};
    const void *drain_payload[] = {&dm, &m};
    const size_t drain_len[] = {sizeof dm, sizeof m};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ftrt__msg_send2(sv[0], FTRT__MSG_RELAY, &pre, sizeof pre, drains[k],
                                         drain_payload[k], drain_len[k]), 0);
        assert_true(ftrt__rx_fill(&rx, sv[1]) > 0);
        assert_int_equal(ftrt__rx_next(&rx, &h, &payload), 1);
        assert_int_equal(ftrt__relay_open(payload, h.len, &w, &ih, &inner), 0);
        assert_int_equal(ih.type, drains[k]);
        assert_int_equal(ih.len, drain_len[k]);
    }
    /* (a DRAIN of an epoch_msg's size is malformed now: the boundary step is part of it) */
    assert_int_equal(ftrt__msg_send2(sv[0], FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_DRAIN,
                                     &m, sizeof m), 0);
    assert_true(ftrt__rx_fill(&rx, sv[1]) > 0);
    assert_int_equal(ftrt__rx_next(&rx, &h, &payload), 1);
    assert_true(ftrt__relay_open(payload, h.len, &w, &ih, &inner) != 0);
    /* garbage: a header with the wrong magic is rejected, not waited on */
    uint8_t junk[sizeof h] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    assert_int_equal(write(sv[0], junk, sizeof junk), (ssize_t)sizeof junk);
    assert_true(ftrt__rx_fill(&rx, sv[1]) > 0);
    assert_int_equal(ftrt__rx_next(&rx, &h, &payload), FTRT_EPROTO);
    ftrt__rx_free(&rx);
    close(sv[0]);
    close(sv[1]);
}

/* FANOUT (relay groups): a well-formed payload opens and its parts walk in order, each a
 * MULTI prefix; a bad count, agent, rank or a short part is refused; a relay-group message is
 * never wrapped inside a RELAY, MULTI or FANOUT. */
static void fanout_parts(void **state)
{
    (void)state;
    uint8_t buf[256];
    int32_t parts[] = {2, 0, 2, 4, 5, 6, 1, 77, 80};
    ftrt__msghdr ih = {FTRT__MAGIC, FTRT__MSG_FAILURE, sizeof(ftrt__failure_msg), 0};
    ftrt__failure_msg fm = {.epoch = 9};
    memcpy(buf, parts, sizeof parts);
    memcpy(buf + sizeof parts, &ih, sizeof ih);
    memcpy(buf + sizeof parts + sizeof ih, &fm, sizeof fm);
    size_t len = sizeof parts + sizeof ih + sizeof fm;
    ftrt__msghdr h = {FTRT__MAGIC, FTRT__MSG_FANOUT, (uint32_t)len, 0};
    assert_int_equal(ftrt__msg_check(&h), 0);
    int32_t np, w, n;
    const uint8_t *cur;
    const int32_t *ranks;
    uint32_t plen;
    ftrt__msghdr got;
    const void *inner;
    assert_int_equal(ftrt__fanout_open(buf, len, &np, &cur, &got, &inner), 0);
    assert_int_equal(np, 2);
    assert_int_equal(got.type, FTRT__MSG_FAILURE);
    ftrt__fanout_part(&cur, &w, &n, &ranks, &plen);
    assert_int_equal(w, 4);
    assert_int_equal(n, 2);
    assert_int_equal(plen, 16);
    int32_t mn;
    const int32_t *mws;
    ftrt__msghdr mih;
    const void *minner;
    uint8_t multi[64]; /* the part and the whole message: a MULTI as the relay sends it on */
    memcpy(multi, cur - plen, plen);
    memcpy(multi + plen, &ih, sizeof ih);
    memcpy(multi + plen + sizeof ih, &fm, sizeof fm);
    assert_int_equal(ftrt__multi_open(multi, plen + sizeof ih + sizeof fm, &mn, &mws, &mih, &minner), 0);
    assert_int_equal(mn, 2);
    ftrt__fanout_part(&cur, &w, &n, &ranks, &plen);
    assert_int_equal(w, 77);
    assert_int_equal(n, 1);
    assert_int_equal(ranks[0], 80);
    assert_ptr_equal(cur, buf + sizeof parts);
    /* malformed: no part, a part's count past the end, a bad agent, a bad rank */
    int32_t bad[][9] = {{0, 0, 2, 4, 5, 6, 1, 77, 80}, {2, 0, 2, 4, 5, 6, 9, 77, 80},
                        {2, 0, 2, 0, 5, 6, 1, 77, 80}, {2, 0, 2, 4, 5, 6, 1, 77, 0}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(buf, bad[k], sizeof parts);
        assert_int_equal(ftrt__fanout_open(buf, len, &np, &cur, &got, &inner), FTRT_EPROTO);
    }
    assert_int_equal(ftrt__fanout_open(buf, 4, &np, &cur, &got, &inner), FTRT_EPROTO);
    /* a FANOUT or RELAY_VIA inside a MULTI is refused */
    int32_t pre[3] = {1, 0, 5};
    ftrt__coord_at at = {.port = 1};
    ftrt__msghdr via = {FTRT__MAGIC, FTRT__MSG_RELAY_VIA, sizeof at, 0};
    uint8_t big[512];
    memcpy(big, pre, sizeof pre);
    memcpy(big + sizeof pre, &via, sizeof via);
    memcpy(big + sizeof pre + sizeof via, &at, sizeof at);
    assert_int_equal(ftrt__multi_open(big, sizeof pre + sizeof via + sizeof at, &mn, &mws, &mih,
                                      &minner), FTRT_EPROTO);
    /* fixed sizes */
    ftrt__msghdr rp = {FTRT__MAGIC, FTRT__MSG_RELAY_PEER, sizeof(ftrt__relay_peer), 0};
    assert_int_equal(ftrt__msg_check(&rp), 0);
    rp.len++;
    assert_int_equal(ftrt__msg_check(&rp), FTRT_EPROTO);
    ftrt__msghdr ph = {FTRT__MAGIC, FTRT__MSG_PEER_HELLO, sizeof(ftrt__hello), 0};
    assert_int_equal(ftrt__msg_check(&ph), 0);
}

/* JOIN, JOIN_OK, JOIN_REFUSED have their fixed sizes; a job secret's text (FTRT_JOB_SECRET,
 * FTRT_JOIN_SECRET) is exactly 16 hex digits. */
static void join_messages(void **state)
{
    (void)state;
    const struct { uint32_t type, len; } fixed[] = {
        {FTRT__MSG_JOIN, sizeof(ftrt__join)}, {FTRT__MSG_JOIN_OK, sizeof(ftrt__join_ok)},
        {FTRT__MSG_JOIN_REFUSED, sizeof(ftrt__join_refused)}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        ftrt__msghdr h = {FTRT__MAGIC, fixed[i].type, fixed[i].len, 0};
        assert_int_equal(ftrt__msg_check(&h), 0);
        h.len--;
        assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    }
    uint64_t v = 7;
    assert_int_equal(ftrt__secret_parse("0123456789abcDEF", &v), 0);
    assert_true(v == 0x0123456789abcdefull);
    const char *bad[] = {"", "0123456789abcde", "0123456789abcdef0", " 123456789abcdef",
                         "-123456789abcdef", "0x23456789abcdef", "0123456789abcdeg", NULL};
    for (int i = 0; i < 8; i++) {
        v = 7;
        assert_int_equal(ftrt__secret_parse(bad[i], &v), -EINVAL);
        assert_true(v == 7);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(join_messages),
        cmocka_unit_test(header_checks), cmocka_unit_test(plan_checks), cmocka_unit_test(heartbeat_period),
        cmocka_unit_test(plan_delta), cmocka_unit_test(plan_delta_behind_refused),
        cmocka_unit_test(plan_delta_nbehind), cmocka_unit_test(plan_delta_ckpt),
        cmocka_unit_test(plan_delta_memory), cmocka_unit_test(plan_shrink),
        cmocka_unit_test(large_plan),
        cmocka_unit_test(incremental_receive), cmocka_unit_test(send_and_malformed),
        cmocka_unit_test(resumed_phases), cmocka_unit_test(fanout_parts)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

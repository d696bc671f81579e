/*
 * Unit tests: the coordinator's index of hosts, spares and the most steps
 * (runtime/coordinator/rankidx.c), against the scans of the world it replaced in failure.c
 * and job.c (kept here as the reference): after every step of a random sequence of HELLOs (host
 * names, some changed), role changes, incidents, heartbeats that go forward and back
 * (rollbacks), BYEs, members replaced and rebuilds, each answer of the index equals the scan's,
 * for every rank.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "runtime/coordinator/coord.h"

/* ---- the scans of the world, as failure.c had them -------------------------------------- */

static int64_t scan_most(const ftrt__coord *c)
{
    int64_t most = 0;
    for (int x = 1; x < c->W; x++)
        if (c->r[x].steps_done > most) most = c->r[x].steps_done;
    return most;
}

static int scan_host_has_failed(const ftrt__coord *c, const char *h)
{
    for (int i = 0; i < c->ninc; i++) {
        int x = c->inc[i].world_rank;
        if (x >= 1 && c->r[x].role == FTRT__ROLE_FAILED && !strcmp(c->r[x].host, h)) return 1;
    }
    return 0;
}

static int scan_all_failed(const ftrt__coord *c, int w)
{
    const char *h = c->r[w].host;
    int n = 0;
    for (int x = 0; x < c->W; x++) {
        if (strcmp(c->r[x].host, h) != 0) continue;
        if (c->r[x].role != FTRT__ROLE_FAILED) return 0;
        n++;
    }
    return n;
}

static int scan_pick_spare(const ftrt__coord *c, const char *h)
{
    int best = -1, best_score = -1;
    for (int x = 1; x < c->W; x++) {
        if (c->r[x].role != FTRT__ROLE_SPARE) continue;
        int score = (strcmp(c->r[x].host, h) != 0) * 2 + !scan_host_has_failed(c, c->r[x].host) +
                    (x != c->sb_w) * 4;
        if (score > best_score) {
            best = x;
            best_score = score;
        }
    }
    return best;
}

static int scan_finishing(const ftrt__coord *c)
{
    for (int l = 0; l < c->N; l++)
        if (c->r[c->members[l]].said_bye) return 1;
    return 0;
}

/* pick_spare as failure.c has it now, over the index. */
static int index_pick_spare(const ftrt__coord *c, int w)
{
    int best = -1, best_score = -1, h = c->r[w].ix_host;
    for (int x = ftrt__spare_first(c); x; x = ftrt__spare_next(c, x)) {
        int score = (c->r[x].ix_host != h) * 2 + !ftrt__host_has_failed(c, x) +
                    (x != c->sb_w) * 4;
        if (score > best_score) {
            best = x;
            best_score = score;
        }
    }
    return best;
}

/* ---- the world -------------------------------------------------------------------------- */

static void world_open(ftrt__coord *c, int W)
{
    memset(c, 0, sizeof *c);
    c->W = W;
    c->Wused = c->Wworld = c->W;
    c->N = c->N0 = W / 2;
    c->r = calloc((size_t)W, sizeof *c->r);
    c->members = calloc((size_t)(c->N > 0 ? c->N : 1), sizeof *c->members);
    c->holder = calloc((size_t)(c->N > 0 ? c->N : 1), sizeof *c->holder);
    assert_non_null(c->r);
    assert_non_null(c->members);
    assert_non_null(c->holder);
    assert_int_equal(ftrt__rankidx_alloc(c), 0);
}

static void world_close(ftrt__coord *c)
{
    ftrt__rankidx_free(c);
    free(c->r);
    free(c->members);
    free(c->holder);
    ftrt__membership_free(c);
    free(c->inc);
}

static void add_incident(ftrt__coord *c, int w)
{
    c->inc = realloc(c->inc, (size_t)(c->ninc + 1) * sizeof *c->inc);
    assert_non_null(c->inc);
    memset(&c->inc[c->ninc], 0, sizeof *c->inc);
    c->inc[c->ninc++].world_rank = w;
    ftrt__rank_named(c, w);
}

/* Every answer of the index against the scans, for every rank. */
static void check_all(ftrt__coord *c)
{
    assert_int_equal(ftrt__steps_most(c), scan_most(c));
    assert_int_equal(ftrt__job_finishing(c), scan_finishing(c));
    int spares = 0;
    for (int x = 1; x < c->W; x++) spares += c->r[x].role == FTRT__ROLE_SPARE;
    assert_int_equal(ftrt__live_spares(c), spares);
    int prev = 0, listed = 0;
    for (int x = ftrt__spare_first(c); x; x = ftrt__spare_next(c, x), listed++) {
        assert_true(x > prev); /* ascending */
        assert_int_equal(c->r[x].role, FTRT__ROLE_SPARE);
        prev = x;
    }
    assert_int_equal(listed, spares);
    for (int w = 0; w < c->W; w++) {
        assert_int_equal(ftrt__host_has_failed(c, w), scan_host_has_failed(c, c->r[w].host));
        assert_int_equal(ftrt__host_all_failed(c, w), scan_all_failed(c, w));
        assert_int_equal(index_pick_spare(c, w), scan_pick_spare(c, c->r[w].host));
    }
}

static const int roles[] = {FTRT__ROLE_TRAINER, FTRT__ROLE_SPARE, FTRT__ROLE_FAILED};

/* One random change: a HELLO (a host of a few, sometimes a new name), a role, an incident, a
 * heartbeat forward, a rollback of several ranks, a member replaced, a BYE, the standby, or a
 * rebuild. */
static void random_step(ftrt__coord *c, unsigned *seed)
{
    int w = 1 + rand_r(seed) % (c->W - 1), op = rand_r(seed) % 100;
    char host[FTRT__HOST_MAX];
    if (op < 20) {
        snprintf(host, sizeof host, "node-%d", rand_r(seed) % (op < 2 ? 1000 : 6));
        ftrt__rank_set_host(c, w, host);
    } else if (op < 45) {
        ftrt__rank_set_role(c, w, roles[rand_r(seed) % 3]);
    } else if (op < 52) {
        add_incident(c, rand_r(seed) % 4 ? w : -1);
    } else if (op < 85) {
        ftrt__rank_set_steps(c, w, c->r[w].steps_done + rand_r(seed) % 3);
    } else if (op < 88 && c->N > 0) {
        ftrt__member_set(c, rand_r(seed) % c->N, w, FTRT__MEMBER_FAILURE);
    } else if (op < 89) {
        ftrt__rank_said_bye(c, w);
    } else if (op < 95) {
        int64_t back = rand_r(seed) % 5;
        for (int x = 1; x < c->W; x++)
            if (rand_r(seed) % 2) ftrt__rank_set_steps(c, x, c->r[x].steps_done > back ? back : 0);
    } else if (op < 98) {
        c->sb_w = rand_r(seed) % 3 ? w : 0;
    } else {
        ftrt__rankidx_rebuild(c);
    }
}

static void random_worlds(void **state)
{
    (void)state;
    for (unsigned run = 0; run < 40; run++) {
        unsigned seed = 1000 + run;
        ftrt__coord c;
        world_open(&c, 2 + (int)(run % 23));
        ftrt__rank_set_role(&c, 0, FTRT__ROLE_COORD);
        ftrt__rank_set_host(&c, 0, "node-0");
        check_all(&c); /* (every other rank on host "": no HELLO yet) */
        for (int step = 0; step < 400; step++) {
            random_step(&c, &seed);
            check_all(&c);
        }
        world_close(&c);
    }
}

/* A host's name changes more often than the table has room for hosts: the table starts over
 * (the hosts left empty are dropped) and the answers stay right. */
static void table_full_starts_over(void **state)
{
    (void)state;
    ftrt__coord c;
    world_open(&c, 5);
    char host[FTRT__HOST_MAX];
    for (int i = 0; i < 50; i++) {
        snprintf(host, sizeof host, "moving-%d", i);
        ftrt__rank_set_host(&c, 1 + i % 4, host);
        ftrt__rank_set_role(&c, 1 + i % 4, i % 3 ? FTRT__ROLE_SPARE : FTRT__ROLE_FAILED);
        if (i % 5 == 0) add_incident(&c, 1 + i % 4);
        assert_true(c.ix.nhosts <= c.ix.cap);
        check_all(&c);
    }
    world_close(&c);
}

/* A host name of FTRT__HOST_MAX bytes with no NUL (a HELLO's field) is cut to the longest that
 * fits, as the rank table keeps it. */
static void long_host_name(void **state)
{
    (void)state;
    ftrt__coord c;
    world_open(&c, 3);
    char host[FTRT__HOST_MAX];
    memset(host, 'h', sizeof host);
    ftrt__rank_set_host(&c, 1, host);
    ftrt__rank_set_host(&c, 2, host);
    assert_int_equal(strlen(c.r[1].host), FTRT__HOST_MAX - 1);
    ftrt__rank_set_role(&c, 1, FTRT__ROLE_FAILED);
    ftrt__rank_set_role(&c, 2, FTRT__ROLE_FAILED);
    assert_int_equal(ftrt__host_all_failed(&c, 1), 2);
    check_all(&c);
    world_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_worlds),
        cmocka_unit_test(table_full_starts_over),
        cmocka_unit_test(long_host_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

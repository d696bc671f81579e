/*
 * Unit tests: the coordinator's timelines within FTRT_TIMELINE_BUDGET_MB (issue 22: it kept
 * every rank's whole timeline, O(ranks x steps): ~63 GB at 131,072 ranks x 10,000 steps, and
 * the report wrote all of it). The messages go through ftrt__ledger_take(), as from the ranks.
 *
 * - share_bounds: ftrt__timeline_share() holds world ranks 1..FTRT_TIMELINE_RANKS and every
 *   hot spare, leaves the rest out, and the held ranks' shares together stay within the
 *   budget, for worlds from 2 to 131,073 processes;
 * - large_world_within_budget: 16,384 trainers and 64 hot spares each send 256 intervals
 *   (64 a LEDGER message; a start-up straddling the job's start, compute and exposed
 *   communication, teardown; one left-out trainer failed after its last report) to a
 *   coordinator with a 4 MiB budget and FTRT_TIMELINE_RANKS 64: the intervals it holds stay
 *   within 4 MiB (all of them would be 96 MiB), the report lists the 128 ranks held (world
 *   ranks 1..64 and the spares, with every interval) and the others in "left_out", and every
 *   rank's rank-seconds by kind, held or not, equal those of the intervals it sent (to 1 us);
 *   the report stays under 400 bytes a rank left out (and 120 an interval held; each rank
 *   would take ~100 bytes an interval);
 * - small_world_all_held: 256 ranks under the same settings are all held, intervals and all,
 *   as before the budget;
 * - share_spent: a held rank whose intervals outgrow its share is cut short ("truncated":
 *   true): the intervals that fit are held, the rest of its totals laid end to end after them,
 *   its rank-seconds still exact;
 * - rank_cut_short: a rank past its own FTRT_TIMELINE_MAX sends its last intervals flagged
 *   `sparse` 2: they are held, the timeline is cut short, its rank-seconds still exact;
 * - spare_not_needed: a hot spare that sent only its start-up (when it joined) and was sent
 *   SHUTDOWN 1 s before the job's end: start-up, spare idle until the SHUTDOWN, teardown
 *   after it (the report had it spare idle to the end); its agent's tick built before that
 *   message and taken after it (an older open interval) does not undo it.
 */
#include <json-c/json.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "runtime/coordinator/coord.h"
#include "tests/unit/helpers.h"

enum { IV = 256, PER_MSG = 64 };

static const double J0 = 1790000000.0, WALL = 40.0, DT = 0.125;

typedef struct world {
    ftrt_config cfg;
    ftrt__coord_args a;
    ftrt__coord c;
    double (*want)[FTRT__IV_KINDS]; /* per slot: rank-seconds its intervals give */
} world;

/* Interval i of world rank w: start-up from 10 ms before the job's start (the part before it
 * is not the job's), then compute and exposed communication (a spare: idle), then teardown. */
static ftrt__interval interval(const ftrt__crank *r, int w, int i)
{
    double a = J0 + 0.3 + 1e-3 * (w % 7);
    ftrt__interval v = {.t0 = a + DT * (i - 1), .t1 = a + DT * i};
    if (i == 0) {
        v.t0 = J0 - 0.01;
        v.kind = FTRT__IV_STARTUP;
    } else if (i == IV - 1) {
        v.kind = FTRT__IV_TEARDOWN;
    } else {
        v.kind = r->role == FTRT__ROLE_SPARE ? FTRT__IV_SPARE_IDLE
                 : i % 3                     ? FTRT__IV_COMPUTE
                                             : FTRT__IV_COMM;
    }
    return v;
}

/* Sends world rank w's IV intervals in LEDGER messages of PER_MSG, the totals exact in each,
 * and notes in want what its slot's rank-seconds must be. A failed rank stops after `upto`. */
static void send_rank(world *wd, int w, int upto, ftrt__ledger_msg *m)
{
    ftrt__crank *r = &wd->c.r[w];
    double *want = wd->want[w - 1], tot[FTRT__IV_KINDS] = {0};
    for (int i0 = 0; i0 < upto; i0 += PER_MSG) {
        int n = upto - i0 < PER_MSG ? upto - i0 : PER_MSG;
        memset(m, 0, sizeof *m);
        for (int i = 0; i < n; i++) {
            m->iv[i] = interval(r, w, i0 + i);
            tot[m->iv[i].kind] += m->iv[i].t1 - m->iv[i].t0;
        }
        memcpy(m->totals, tot, sizeof tot);
        m->n = n;
        m->kind_open = m->iv[n - 1].kind;
        m->t_open = m->iv[n - 1].t1;
        m->kept_steps = i0 + n;
        m->final = i0 + n == IV;
        assert_int_equal(ftrt__ledger_take(&wd->c, w, m, ftrt__ledger_msg_size(n)), 0);
    }
    memcpy(want, tot, sizeof tot);
    want[FTRT__IV_STARTUP] -= 0.01; /* before the job's start */
    double last = interval(r, w, upto - 1).t1;
    if (upto == IV) {
        want[FTRT__IV_TEARDOWN] += J0 + WALL - last; /* after its last interval */
    } else { /* failed 1 s after its last report: its step in flight is compute, then down */
        r->role = FTRT__ROLE_FAILED;
        r->t_fail_wall = last + 1.0;
        want[FTRT__IV_COMPUTE] += 1.0;
        want[FTRT__IV_DOWN] += J0 + WALL - r->t_fail_wall;
    }
}

/* A finished job of `trainers` trainers and `spares` hot spares, WALL s long, whose ranks sent
 * their intervals to a coordinator with FTRT_TIMELINE_BUDGET_MB budget_mb and
 * FTRT_TIMELINE_RANKS ranks; world rank `failed` (0: none) failed half way. */
static void world_open(world *wd, int trainers, int spares, int budget_mb, int ranks, int failed)
{
    memset(wd, 0, sizeof *wd);
    ftrt_config_init(&wd->cfg, sizeof wd->cfg);
    wd->cfg.timeline_budget_mb = budget_mb;
    wd->cfg.timeline_ranks = ranks;
    ftrt__coord *c = &wd->c;
    c->a = &wd->a;
    wd->a.cfg = &wd->cfg;
    wd->a.addr = "127.0.0.1";
    wd->a.port = 29500;
    c->N = c->N0 = trainers;
    c->W = 1 + trainers + spares;
    c->Wused = c->Wworld = c->W;
    c->t_start = 100.0;
    c->t_end = 100.0 + WALL;
    c->t_start_wall = J0;
    c->result = FTRT_DONE;
    c->r = calloc((size_t)c->W, sizeof *c->r);
    wd->want = calloc((size_t)c->W, sizeof *wd->want);
    ftrt__ledger_msg *m = malloc(ftrt__ledger_msg_size(PER_MSG));
    assert_true(c->r && wd->want && m);
    for (int w = 0; w < c->W; w++) {
        ftrt__crank *r = &c->r[w];
        snprintf(r->host, sizeof r->host, "node%05d", w / 8);
        r->fd = r->link = -1;
        r->role = w == 0 ? FTRT__ROLE_COORD : w <= trainers ? FTRT__ROLE_TRAINER
                                                             : FTRT__ROLE_SPARE;
        r->logical = w >= 1 && w <= trainers ? w - 1 : -1;
        if (w) send_rank(wd, w, w == failed ? IV / 2 : IV, m);
    }
    free(m);
}

static void world_close(world *wd)
{
    for (int w = 0; w < wd->c.W; w++) free(wd->c.r[w].tl);
    free(wd->c.r);
    free(wd->want);
}

/* Bytes of intervals the coordinator holds (their arrays' capacity). */
static long long held_bytes(const world *wd)
{
    long long b = 0;
    for (int w = 1; w < wd->c.W; w++) b += (long long)(wd->c.r[w].tl_cap * sizeof(ftrt__interval));
    return b;
}

/* Every slot's rank-seconds by kind, as the ledger computes them, equal what its intervals
 * give (to 1 us). */
static void check_totals(world *wd)
{
    int slots = wd->c.W - 1;
    double (*t)[FTRT__IV_KINDS] = calloc((size_t)slots, sizeof *t);
    assert_non_null(t);
    ftrt__goodput g;
    double useful, peak;
    assert_int_equal(ftrt__ledger_figures(&wd->c, J0 + WALL, t, &g, &useful, &peak), 0);
    for (int s = 0; s < slots; s++)
        for (int k = 0; k < FTRT__IV_KINDS; k++)
            if (fabs(t[s][k] - wd->want[s][k]) > 1e-6)
                fail_msg("world rank %d, %s: %.9f rank-s, its intervals give %.9f", s + 1,
                         ftrt__iv_name(k), t[s][k], wd->want[s][k]);
    assert_true(fabs(g.accounted_s - g.allocated_s) < 1e-6 * g.allocated_s);
    free(t);
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v)) fail_msg("no \"%s\" in the report", key);
    return v;
}

static char tmpdir[512];

static int setup(void **state)
{
    (void)state;
    return t_tmpdir(tmpdir, sizeof tmpdir, "tlbudget") ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    t_rmtree(tmpdir);
    return 0;
}

/* The held set and the shares' sum, against the budget, for many world shapes. */
static void share_bounds(void **state)
{
    (void)state;
    /* 16,384 trainers, 64 spares, 64 ranks and 4 MiB: 128 held, 1,365 intervals each */
    int W = 1 + 16384 + 64;
    assert_int_equal(ftrt__timeline_share(1, W, 64, 64, 4, 200000), (4 << 20) / (128 * 24));
    assert_int_equal(ftrt__timeline_share(64, W, 64, 64, 4, 200000), 1365);
    assert_int_equal(ftrt__timeline_share(65, W, 64, 64, 4, 200000), 0);
    assert_int_equal(ftrt__timeline_share(W - 65, W, 64, 64, 4, 200000), 0);
    assert_int_equal(ftrt__timeline_share(W - 64, W, 64, 64, 4, 200000), 1365);
    assert_int_equal(ftrt__timeline_share(0, W, 64, 64, 4, 200000), 0);      /* coordinator */
    assert_int_equal(ftrt__timeline_share(W, W, 64, 64, 4, 200000), 0);      /* outside */
    assert_int_equal(ftrt__timeline_share(1, W, 64, 64, 0, 200000), 0);      /* no budget */
    assert_int_equal(ftrt__timeline_share(1, 9, 2, 1024, 256, 200000), 200000); /* small */
    static const int worlds[] = {2, 3, 9, 300, 1025, 4097, 16385, 131073};
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++)
        for (int spares = 0; spares < 3000 && spares < worlds[i] - 1; spares = 2 * spares + 1)
            for (int ranks = 0; ranks <= 4096; ranks = ranks ? 4 * ranks : 1) {
                int W2 = worlds[i];
                long long sum = 0, held = 0;
                for (int w = 0; w <= W2; w++) {
                    size_t s = ftrt__timeline_share(w, W2, spares, ranks, 256, 200000);
                    sum += (long long)s;
                    held += s > 0;
                    int want = w >= 1 && w < W2 && (w <= ranks || w >= W2 - spares);
                    if ((s > 0) != want)
                        fail_msg("W %d spares %d ranks %d: world rank %d %s", W2, spares, ranks,
                                 w, want ? "not held" : "held");
                }
                assert_true(sum * (long long)sizeof(ftrt__interval) <= 256LL << 20);
            }
}

static void large_world_within_budget(void **state)
{
    (void)state;
    enum { T = 16384, S = 64, K = 64, MB = 4 };
    world wd;
    world_open(&wd, T, S, MB, K, 1000); /* world rank 1000, left out, failed half way */
    long long held = held_bytes(&wd), all = (long long)(T + S) * IV * 24;
    printf("%d ranks x %d intervals (%lld bytes in all): %lld bytes held, budget %d MiB\n",
           T + S, IV, all, held, MB);
    assert_true(held > 0 && held <= (long long)MB << 20);
    check_totals(&wd);
    char path[600];
    snprintf(path, sizeof path, "%s/report.json", tmpdir);
    snprintf(wd.cfg.report_file, sizeof wd.cfg.report_file, "%s", path);
    assert_int_equal(ftrt__report_write(&wd.c), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    printf("report: %lld bytes\n", (long long)st.st_size);
    assert_true(st.st_size < 400LL * (T - K) + 120LL * (IV + 1) * (K + S) + (1 << 20));
    json_object *o = json_object_from_file(path), *tl, *ranks, *out;
    assert_non_null(o);
    tl = get(o, "timeline");
    assert_int_equal(json_object_get_int(get(tl, "budget_mib")), MB);
    assert_int_equal(json_object_get_int(get(tl, "held_ranks")), K + S);
    assert_int_equal(json_object_get_int(get(tl, "left_out_ranks")), T - K);
    assert_int_equal(json_object_get_int64(get(tl, "held_bytes")), held);
    ranks = get(tl, "ranks");
    out = get(tl, "left_out");
    assert_int_equal(json_object_array_length(ranks), K + S);
    assert_int_equal(json_object_array_length(out), T - K);
    for (int i = 0; i < K + S; i++) { /* world ranks 1..K, then the spares, all intervals */
        json_object *x = json_object_array_get_idx(ranks, (size_t)i);
        assert_int_equal(json_object_get_int(get(x, "world_rank")), i < K ? i + 1 : T + 1 + i - K);
        assert_false(json_object_get_boolean(get(x, "truncated")));
        assert_int_equal(json_object_array_length(get(x, "intervals")), IV + 1);
    }
    for (int i = 0; i < T - K; i++) { /* world ranks K+1..T: their rank-seconds by kind */
        json_object *x = json_object_array_get_idx(out, (size_t)i), *rs;
        int w = json_object_get_int(get(x, "world_rank"));
        assert_int_equal(w, K + 1 + i);
        rs = get(x, "rank_s");
        assert_int_equal(json_object_array_length(rs), FTRT__IV_KINDS);
        for (int k = 0; k < FTRT__IV_KINDS; k++)
            assert_true(fabs(json_object_get_double(json_object_array_get_idx(rs, (size_t)k)) -
                             wd.want[w - 1][k]) < 2e-6);
    }
    json_object_put(o);
    world_close(&wd);
}

static void small_world_all_held(void **state)
{
    (void)state;
    world wd;
    world_open(&wd, 248, 8, 4, 1024, 7); /* world rank 7 failed half way */
    for (int w = 1; w < wd.c.W; w++) {
        assert_false(wd.c.r[w].tl_left_out || wd.c.r[w].tl_truncated);
        assert_int_equal(wd.c.r[w].tl_n, w == 7 ? IV / 2 : IV);
    }
    check_totals(&wd);
    world_close(&wd);
}

static void share_spent(void **state)
{
    (void)state;
    world wd;
    /* 1 MiB over 8,192 + 8 held ranks: 5 intervals each, fewer than the 256 sent */
    world_open(&wd, 8192, 8, 1, 8192, 0);
    assert_int_equal(ftrt__timeline_share(1, wd.c.W, 8, 8192, 1, 200000), 5);
    for (int w = 1; w < wd.c.W; w++) { /* its first 5 intervals held, as sent */
        const ftrt__crank *r = &wd.c.r[w];
        assert_true(r->tl_truncated && !r->tl_left_out);
        assert_int_equal(r->tl_n, 5);
        assert_true(r->tl[4].t1 == interval(r, w, 4).t1);
    }
    assert_true(held_bytes(&wd) <= 1 << 20);
    check_totals(&wd);
    world_close(&wd);
}

/* A rank past its own FTRT_TIMELINE_MAX sends what it kept and says no more will come
 * (`sparse` 2): those intervals are held, the timeline cut short, its totals still exact. */
static void rank_cut_short(void **state)
{
    (void)state;
    world wd;
    world_open(&wd, 4, 0, 256, 1024, 0);
    ftrt__crank *r = &wd.c.r[2];
    free(r->tl);
    r->tl = NULL;
    r->tl_n = r->tl_cap = 0;
    r->tl_first = r->tl_last = 0;
    ftrt__ledger_msg *m = calloc(1, ftrt__ledger_msg_size(10));
    assert_non_null(m);
    for (int i = 0; i < IV; i++) { /* the totals of all IV, the first 10 intervals */
        ftrt__interval v = interval(r, 2, i);
        m->totals[v.kind] += v.t1 - v.t0;
        if (i < 10) m->iv[i] = v;
    }
    m->n = 10;
    m->kind_open = FTRT__IV_TEARDOWN;
    m->t_open = interval(r, 2, IV - 1).t1;
    m->final = 1;
    m->sparse = 2;
    assert_int_equal(ftrt__ledger_take(&wd.c, 2, m, ftrt__ledger_msg_size(10)), 0);
    assert_true(r->tl_truncated && r->tl_n == 10);
    check_totals(&wd);
    free(m);
    world_close(&wd);
}

/* A hot spare never needed: its one LEDGER (sent when it joined: its start-up, spare idle
 * open), then its SHUTDOWN 1 s before the job's end: start-up (from the job's start), spare
 * idle until the SHUTDOWN, teardown after it. */
static void spare_not_needed(void **state)
{
    (void)state;
    world wd;
    world_open(&wd, 2, 1, 256, 1024, 0);
    ftrt__crank *r = &wd.c.r[3];
    free(r->tl);
    r->tl = NULL;
    r->tl_n = r->tl_cap = 0;
    r->tl_first = r->tl_last = r->tl_t_open = 0;
    r->tl_final = r->tl_seen = 0; /* (world_open's messages forgotten) */
    ftrt__ledger_msg *m = calloc(1, ftrt__ledger_msg_size(1));
    assert_non_null(m);
    m->iv[0] = (ftrt__interval){.t0 = J0 - 0.01, .t1 = J0 + 0.5, .kind = FTRT__IV_STARTUP};
    m->totals[FTRT__IV_STARTUP] = 0.51;
    m->n = 1;
    m->kind_open = FTRT__IV_SPARE_IDLE;
    m->t_open = J0 + 0.5;
    assert_int_equal(ftrt__ledger_take(&wd.c, 3, m, ftrt__ledger_msg_size(1)), 0);
    memset(m, 0, sizeof *m); /* its agent's tick, built before that and taken after: stale */
    m->kind_open = FTRT__IV_STARTUP;
    m->t_open = J0 - 0.01;
    assert_int_equal(ftrt__ledger_take(&wd.c, 3, m, ftrt__ledger_msg_size(0)), 0);
    assert_int_equal(r->tl_kind_open, FTRT__IV_SPARE_IDLE);
    r->t_released_wall = J0 + WALL - 1.0;
    memset(wd.want[2], 0, sizeof wd.want[2]);
    wd.want[2][FTRT__IV_STARTUP] = 0.5;
    wd.want[2][FTRT__IV_SPARE_IDLE] = WALL - 1.5;
    wd.want[2][FTRT__IV_TEARDOWN] = 1.0;
    check_totals(&wd);
    free(m);
    world_close(&wd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(share_bounds),
        cmocka_unit_test(large_world_within_budget),
        cmocka_unit_test(small_world_all_held),
        cmocka_unit_test(share_spent),
        cmocka_unit_test(rank_cut_short),
        cmocka_unit_test(spare_not_needed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* Unit tests: the ledger's timeline arithmetic and the job's figures on synthetic timelines
 * with known answers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/ledger.h"

#define near(a, b) assert_true(fabs((a) - (b)) < 1e-9)

static void switch_and_totals(void **state)
{
    (void)state;
    ftrt__ledger l;
    assert_int_equal(ftrt__ledger_init(&l, FTRT__IV_STARTUP, 100.0, 1000), 0);
    ftrt__ledger_switch(&l, FTRT__IV_COMPUTE, 102.0);
    ftrt__ledger_switch(&l, FTRT__IV_COMM, 103.5);
    ftrt__ledger_switch(&l, FTRT__IV_COMM, 103.7); /* same kind: nothing */
    ftrt__ledger_switch(&l, FTRT__IV_COMPUTE, 104.0);
    ftrt__ledger_close(&l, 105.0);
    near(l.totals[FTRT__IV_STARTUP], 2.0);
    near(l.totals[FTRT__IV_COMPUTE], 2.5);
    near(l.totals[FTRT__IV_COMM], 0.5);
    assert_int_equal(l.n, 4);
    assert_int_equal(l.iv[2].kind, FTRT__IV_COMM);
    near(l.iv[2].t0, 103.5);
    near(l.iv[2].t1, 104.0);
    /* a switch back in time is clamped: intervals never have negative length */
    ftrt__ledger_switch(&l, FTRT__IV_CKPT, 90.0);
    assert_true(l.t_open >= 105.0);
    ftrt__ledger_free(&l);
}

/* A failure: the partial step since the last step end becomes rework, and the time after the
 * failure detection wait; finished steps keep their kinds. */
static void failure_reclassification(void **state)
{
    (void)state;
    ftrt__ledger l;
    ftrt__ledger_init(&l, FTRT__IV_COMPUTE, 0.0, 1000);
    ftrt__ledger_switch(&l, FTRT__IV_COMM, 1.0); /* step 0: compute 1, comm 0.5 */
    ftrt__ledger_switch(&l, FTRT__IV_COMPUTE, 1.5);
    ftrt__ledger_step_end(&l);                   /* step 0 done at 1.5 */
    ftrt__ledger_switch(&l, FTRT__IV_COMM, 2.5); /* step 1: compute 1, then waits */
    /* the failure happened at 2.8; the wait returns at 4.0 */
    double moved = ftrt__ledger_reclass_since_step(&l, FTRT__IV_REWORK);
    near(moved, 1.0); /* the closed compute of step 1 */
    ftrt__ledger_split_open(&l, 2.8, FTRT__IV_DETECT);
    ftrt__ledger_switch(&l, FTRT__IV_RECOVERY, 4.0);
    ftrt__ledger_switch(&l, FTRT__IV_COMPUTE, 4.25);
    ftrt__ledger_close(&l, 5.0);
    near(l.totals[FTRT__IV_COMPUTE], 1.0 + 0.75); /* step 0's compute and after recovery */
    near(l.totals[FTRT__IV_COMM], 0.5);           /* step 0's wait */
    near(l.totals[FTRT__IV_REWORK], 1.0 + 0.3);   /* step 1's compute and wait before 2.8 */
    near(l.totals[FTRT__IV_DETECT], 1.2);
    near(l.totals[FTRT__IV_RECOVERY], 0.25);
    double sum = 0;
    for (int k = 0; k < FTRT__IV_KINDS; k++) sum += l.totals[k];
    near(sum, 5.0);
    ftrt__ledger_free(&l);
}

static void interval_cap_keeps_totals(void **state)
{
    (void)state;
    ftrt__ledger l;
    ftrt__ledger_init(&l, FTRT__IV_COMPUTE, 0.0, 3);
    for (int i = 1; i <= 10; i++) {
        ftrt__ledger_switch(&l, i % 2 ? FTRT__IV_COMM : FTRT__IV_COMPUTE, i);
        ftrt__ledger_step_end(&l); /* no merging across steps */
    }
    assert_int_equal(l.n, 3);
    assert_int_equal(l.truncated, 1);
    near(l.totals[FTRT__IV_COMPUTE] + l.totals[FTRT__IV_COMM], 10.0);
    ftrt__ledger_free(&l);
}

/* 2 trainers + 1 spare for 10 s; trainer 1 dies at 6 s and the spare takes over at 6.5 s. */
static void figures_known_answer(void **state)
{
    (void)state;
    double t[3][FTRT__IV_KINDS] = {{0}};
    t[0][FTRT__IV_STARTUP] = 1, t[0][FTRT__IV_COMPUTE] = 7, t[0][FTRT__IV_COMM] = 1,
    t[0][FTRT__IV_DETECT] = 0.2, t[0][FTRT__IV_RECOVERY] = 0.3, t[0][FTRT__IV_REWORK] = 0.5;
    t[1][FTRT__IV_STARTUP] = 1, t[1][FTRT__IV_COMPUTE] = 4.5, t[1][FTRT__IV_COMM] = 0.5,
    t[1][FTRT__IV_DOWN] = 4;
    t[2][FTRT__IV_STARTUP] = 1, t[2][FTRT__IV_SPARE_IDLE] = 5.5, t[2][FTRT__IV_RECOVERY] = 0.5,
    t[2][FTRT__IV_COMPUTE] = 2.5, t[2][FTRT__IV_COMM] = 0.5;
    ftrt__goodput_in in = {.slots = 3, .wall_s = 10, .totals = (const double (*)[FTRT__IV_KINDS])t,
                           .kept_step_s = 15, .useful_flops = 14e9, .peak_flops = 2e9};
    ftrt__goodput g;
    assert_int_equal(ftrt__goodput_compute(&in, &g), 0);
    near(g.allocated_s, 30);
    near(g.accounted_s, 30);
    near(g.trainer_s, 30 - 4 - 5.5); /* down and spare idle are not trainer time */
    near(g.compute_s, 7 + 4.5 + 2.5 + 0.5);
    near(g.useful_s, 14);
    near(g.gau, 20.5 / 30);
    near(g.ectr, 14.5 / 20.5);
    near(g.emfu, 14e9 / (2e9 * 14.5));
    near(g.effective, 14e9 / (2e9 * 30)); /* GAU x ECTR x eMFU = useful / (peak x allocated) */
    near(g.goodput, 0.5);
    /* the waterfall: losses largest first, and losses + useful = allocated */
    assert_int_equal(g.order[0], FTRT__IV_SPARE_IDLE);
    assert_int_equal(g.order[1], FTRT__IV_DOWN);
    double losses = 0;
    for (int i = 0; i < g.nlosses; i++) {
        if (i) assert_true(g.by_kind[g.order[i - 1]] >= g.by_kind[g.order[i]]);
        losses += g.by_kind[g.order[i]];
    }
    near(losses + g.useful_s, g.allocated_s);
    in.peak_flops = 0; /* unknown peak: eMFU not reported */
    assert_int_equal(ftrt__goodput_compute(&in, &g), 0);
    assert_true(g.emfu < 0 && g.effective < 0);
    in.slots = 0;
    assert_int_equal(ftrt__goodput_compute(&in, &g), -22);
}

/* 2 trainers for 10 s and a process that joined at 6 s (docs/join.md): its slot is allocated
 * 4 s, not 10; GAU and goodput over 24 rank-seconds. */
static void figures_joined_slot(void **state)
{
    (void)state;
    double t[3][FTRT__IV_KINDS] = {{0}};
    t[0][FTRT__IV_STARTUP] = 1, t[0][FTRT__IV_COMPUTE] = 9;
    t[1][FTRT__IV_STARTUP] = 1, t[1][FTRT__IV_COMPUTE] = 9;
    t[2][FTRT__IV_STARTUP] = 0.5, t[2][FTRT__IV_SPARE_IDLE] = 3.5;
    ftrt__goodput_in in = {.slots = 3, .wall_s = 10, .allocated_s = 10 + 10 + 4,
                           .totals = (const double (*)[FTRT__IV_KINDS])t, .kept_step_s = 18};
    ftrt__goodput g;
    assert_int_equal(ftrt__goodput_compute(&in, &g), 0);
    near(g.allocated_s, 24);
    near(g.accounted_s, 24);
    near(g.wall_s, 10);
    near(g.gau, 20.5 / 24); /* (start-up counts as trainer time; spare idle does not) */
    near(g.goodput, 18.0 / 24);
    in.allocated_s = 0; /* as if it had been there from the start */
    assert_int_equal(ftrt__goodput_compute(&in, &g), 0);
    near(g.allocated_s, 30);
    in.allocated_s = -1;
    assert_int_equal(ftrt__goodput_compute(&in, &g), -22);
}

/* Young/Daly: sqrt(2CM) with Daly's correction, and the first-order goodput model. */
static void checkpoint_interval_advice(void **state)
{
    (void)state;
    double c = 10, m = 3600;
    double young = sqrt(2 * c * m); /* 268.33 s */
    double x = c / (2 * m);
    near(ftrt__daly_interval(c, m), young * (1 + sqrt(x) / 3 + x / 9) - c);
    assert_true(fabs(ftrt__daly_interval(c, m) - 261.703) < 0.001); /* by hand: 261.7029 */
    near(ftrt__daly_interval(8000, 3600), 3600); /* C >= 2M: checkpoint every M */
    assert_true(ftrt__daly_interval(0, 10) < 0);
    near(ftrt__model_goodput(100, 10, 0, 1000), 1 - 0.1 - 0.05);
    near(ftrt__model_goodput(1, 10, 0, 1000), 0); /* clamped */
    /* the optimum beats intervals on either side of it */
    double opt = ftrt__daly_interval(c, m);
    assert_true(ftrt__model_goodput(opt, c, 30, m) > ftrt__model_goodput(opt / 3, c, 30, m));
    assert_true(ftrt__model_goodput(opt, c, 30, m) > ftrt__model_goodput(opt * 3, c, 30, m));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(switch_and_totals), cmocka_unit_test(failure_reclassification),
        cmocka_unit_test(interval_cap_keeps_totals), cmocka_unit_test(figures_known_answer),
        cmocka_unit_test(figures_joined_slot),
        cmocka_unit_test(checkpoint_interval_advice)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

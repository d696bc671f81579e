/* Unit tests: the recovery plan's resume step and state source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ftrt.h"
#include "runtime/coordinator/coord.h"
#include "runtime/internal.h"

static void most_advanced_survivor(void **state)
{
    (void)state;
    /* rank 2 failed; rank 3 is ahead by one step (it finished the step in flight) */
    int64_t steps[4] = {151, 151, 152, 152};
    int surv[4] = {1, 1, 0, 1};
    int64_t resume = -1, ckpt = -2;
    int src = -1;
    assert_int_equal(ftrt__plan_compute(steps, surv, 4, 0, 100, &resume, &src, &ckpt), 0);
    assert_int_equal(resume, 152);
    assert_int_equal(src, 3);
    assert_int_equal(ckpt, -1); /* replicated state: no checkpoint reload */
}

static void ties_pick_lowest_rank(void **state)
{
    (void)state;
    int64_t steps[3] = {40, 40, 40};
    int surv[3] = {0, 1, 1};
    int64_t resume, ckpt;
    int src;
    assert_int_equal(ftrt__plan_compute(steps, surv, 3, 0, -1, &resume, &src, &ckpt), 0);
    assert_int_equal(src, 1);
    assert_int_equal(resume, 40);
}

static void sharded_uses_checkpoint(void **state)
{
    (void)state;
    int64_t steps[2] = {77, 77};
    int surv[2] = {1, 0};
    int64_t resume, ckpt;
    int src;
    assert_int_equal(ftrt__plan_compute(steps, surv, 2, 1, 75, &resume, &src, &ckpt), 0);
    assert_int_equal(resume, 75);
    assert_int_equal(ckpt, 75);
    assert_int_equal(ftrt__plan_compute(steps, surv, 2, 1, -1, &resume, &src, &ckpt),
                     FTRT_ENOCKPT);
}

static void no_survivor(void **state)
{
    (void)state;
    int64_t steps[2] = {5, 5};
    int surv[2] = {0, 0};
    int64_t resume, ckpt;
    int src;
    assert_int_equal(ftrt__plan_compute(steps, surv, 2, 0, -1, &resume, &src, &ckpt),
                     FTRT_EABORT);
}

/* The progress detector's timeout: configured, or adaptive with a 5 s floor, or unarmed. */
static void progress_timeout(void **state)
{
    (void)state;
    assert_true(ftrt__progress_timeout(2000, 0.0) == 2.0);      /* configured wins */
    assert_true(ftrt__progress_timeout(2000, 10.0) == 2.0);
    assert_true(ftrt__progress_timeout(0, 0.0) == 0.0);         /* no step time yet: unarmed */
    assert_true(ftrt__progress_timeout(0, 0.010) == 5.0);       /* floor */
    assert_true(ftrt__progress_timeout(0, 2.0) == 20.0);        /* 10 x the median step */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(most_advanced_survivor), cmocka_unit_test(ties_pick_lowest_rank),
        cmocka_unit_test(sharded_uses_checkpoint), cmocka_unit_test(no_survivor),
        cmocka_unit_test(progress_timeout)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_ckpt_track.c - the coordinator's table of checkpoints in flight
 * (runtime/coordinator/track.c): a checkpoint is decided only when every trainer reported; interleaved steps (asynchronous
 * persists, a skip reported before an older write finishes); errors win over skips; duplicate
 * reports ignored; an epoch change abandons older entries; overflow drops the oldest.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "runtime/coordinator/track.h"
#include "ftrt.h"

static int report(struct ftrt__ckpt_track **t, int n, int epoch, int64_t step, int rank,
                  int result, int *decided, int *abandoned)
{
    return ftrt__track_report(t, n, epoch, step, rank, result, decided, abandoned);
}

static void all_ranks_needed(void **st)
{
    (void)st;
    struct ftrt__ckpt_track *t = NULL;
    int d, a;
    assert_int_equal(report(&t, 3, 0, 100, 0, 0, &d, &a), 0);
    assert_int_equal(d, 0);
    assert_int_equal(report(&t, 3, 0, 100, 2, 0, &d, &a), 0);
    assert_int_equal(d, 0);
    assert_int_equal(report(&t, 3, 0, 100, 2, 0, &d, &a), 0); /* duplicate: ignored */
    assert_int_equal(d, 0);
    assert_int_equal(ftrt__track_pending(t), 1);
    assert_int_equal(report(&t, 3, 0, 100, 1, 0, &d, &a), 0);
    assert_int_equal(d, 1);
    assert_int_equal(a, 0);
    assert_int_equal(ftrt__track_pending(t), 0);
    ftrt__track_free(t);
}

static void interleaved_steps(void **st)
{
    (void)st;
    struct ftrt__ckpt_track *t = NULL;
    int d, a;
    /* Rank 0 is still writing 100 when it skips 200; rank 1 wrote both. */
    assert_int_equal(report(&t, 2, 0, 200, 0, FTRT_SKIPPED, &d, &a), 0);
    assert_int_equal(report(&t, 2, 0, 100, 1, 0, &d, &a), 0);
    assert_int_equal(d, 0);
    assert_int_equal(report(&t, 2, 0, 200, 1, 0, &d, &a), FTRT_SKIPPED);
    assert_int_equal(d, 1);
    assert_int_equal(report(&t, 2, 0, 100, 0, 0, &d, &a), 0);
    assert_int_equal(d, 1); /* 100 still commits */
    /* An error wins over a skip, whatever the order. */
    assert_int_equal(report(&t, 2, 0, 300, 0, FTRT_SKIPPED, &d, &a), 0);
    assert_int_equal(report(&t, 2, 0, 300, 1, -28, &d, &a), -28);
    assert_int_equal(d, 1);
    assert_int_equal(report(&t, 2, 0, 400, 0, -5, &d, &a), 0);
    assert_int_equal(report(&t, 2, 0, 400, 1, FTRT_SKIPPED, &d, &a), -5);
    assert_int_equal(report(&t, 2, 0, 500, 0, -5, &d, &a), 0);
    assert_int_equal(report(&t, 2, 0, 500, 1, -28, &d, &a), -5); /* the first error */
    ftrt__track_free(t);
}

static void epoch_change_abandons(void **st)
{
    (void)st;
    struct ftrt__ckpt_track *t = NULL;
    int d, a;
    assert_int_equal(report(&t, 2, 0, 100, 0, 0, &d, &a), 0);
    assert_int_equal(report(&t, 2, 0, 125, 0, 0, &d, &a), 0);
    assert_int_equal(ftrt__track_pending(t), 2);
    /* Epoch 1: the same step again, from the new membership. */
    assert_int_equal(report(&t, 2, 1, 125, 1, 0, &d, &a), 0);
    assert_int_equal(a, 2);
    assert_int_equal(d, 0);
    assert_int_equal(report(&t, 2, 1, 125, 0, 0, &d, &a), 0);
    assert_int_equal(d, 1);
    assert_int_equal(a, 0);
    ftrt__track_free(t);
}

static void overflow_and_bad_input(void **st)
{
    (void)st;
    struct ftrt__ckpt_track *t = NULL;
    int d, a, dropped = 0;
    for (int s = 0; s < 100; s++) {
        assert_int_equal(report(&t, 2, 0, s, 0, 0, &d, &a), 0);
        dropped += a;
    }
    assert_int_equal(dropped, 100 - 64);
    assert_int_equal(ftrt__track_pending(t), 64);
    assert_int_equal(report(&t, 2, 0, 99, 1, 0, &d, &a), 0);
    assert_int_equal(d, 1); /* the newest is still there */
    assert_int_equal(report(&t, 2, 0, 0, 1, 0, &d, &a), 0);
    assert_int_equal(d, 0); /* the oldest was dropped: a new entry waits for rank 0 again */
    assert_int_equal(report(&t, 2, 0, 1, 5, 0, &d, &a), FTRT_EINVAL);
    assert_int_equal(report(&t, 0, 0, 1, 0, 0, &d, &a), FTRT_EINVAL);
    assert_int_equal(report(&t, 2, 0, 1, -1, 0, &d, &a), FTRT_EINVAL);
    assert_int_equal(d, 0);
    ftrt__track_free(t);
    ftrt__track_free(NULL);
    assert_int_equal(ftrt__track_pending(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(all_ranks_needed),
        cmocka_unit_test(interleaved_steps),
        cmocka_unit_test(epoch_change_abandons),
        cmocka_unit_test(overflow_and_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

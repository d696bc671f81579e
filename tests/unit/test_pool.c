/*
 * test_pool.c - the data plane's staging buffers (comm/pool.c): best-fit reuse, the two
 * policies of a full pool (keep the largest: the CPU engine; drop the newcomer: the NCCL
 * plane), clearing, and the graveyard (buried buffers held, freed only when asked).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "comm/pool.h"

/* A release function that counts what it frees. */
static int released;
static void count_free(void *p)
{
    released++;
    free(p);
}

static void takes_the_smallest_that_fits(void **state)
{
    (void)state;
    ftrt__pool p;
    ftrt__pool_init(&p, 8, 1, count_free);
    size_t caps[] = {64, 16, 256, 32};
    void *bufs[4];
    for (int i = 0; i < 4; i++) ftrt__pool_put(&p, bufs[i] = malloc(caps[i]), caps[i]);
    ftrt__pool_put(&p, NULL, 99); /* ignored */
    assert_int_equal(p.n, 4);
    size_t cap = 0;
    assert_ptr_equal(ftrt__pool_take(&p, 20, &cap), bufs[3]);
    assert_int_equal(cap, 32);
    assert_ptr_equal(ftrt__pool_take(&p, 16, &cap), bufs[1]);
    assert_int_equal(cap, 16);
    cap = 7;
    assert_null(ftrt__pool_take(&p, 257, &cap));
    assert_int_equal(cap, 7); /* untouched */
    assert_int_equal(p.n, 2);
    free(bufs[1]);
    free(bufs[3]);
    released = 0;
    ftrt__pool_clear(&p);
    assert_int_equal(released, 2);
    assert_int_equal(p.n, 0);
    assert_null(ftrt__pool_take(&p, 1, &cap));
}

static void full_pool_keeps_the_largest(void **state)
{
    (void)state;
    ftrt__pool p;
    ftrt__pool_init(&p, 2, 1, count_free);
    void *a = malloc(8), *b = malloc(32), *c = malloc(16), *d = malloc(4);
    ftrt__pool_put(&p, a, 8);
    ftrt__pool_put(&p, b, 32);
    released = 0;
    ftrt__pool_put(&p, c, 16); /* evicts a (8), takes its place */
    assert_int_equal(released, 1);
    ftrt__pool_put(&p, d, 4); /* smaller than all held: d goes */
    assert_int_equal(released, 2);
    assert_int_equal(p.n, 2);
    size_t cap;
    assert_ptr_equal(ftrt__pool_take(&p, 1, &cap), c);
    assert_ptr_equal(ftrt__pool_take(&p, 1, &cap), b);
    free(b);
    free(c);
}

static void full_pool_drops_the_newcomer(void **state)
{
    (void)state;
    ftrt__pool p;
    ftrt__pool_init(&p, 1, 0, count_free);
    void *a = malloc(8), *b = malloc(64);
    ftrt__pool_put(&p, a, 8);
    released = 0;
    ftrt__pool_put(&p, b, 64); /* larger, but this pool keeps what it has */
    assert_int_equal(released, 1);
    size_t cap;
    assert_ptr_equal(ftrt__pool_take(&p, 1, &cap), a);
    assert_int_equal(cap, 8);
    free(a);
    ftrt__pool_init(&p, 1000, 0, count_free);
    assert_int_equal(p.max, FTRT__POOL_CAP);
}

static void graveyard_holds_until_cleared(void **state)
{
    (void)state;
    ftrt__grave g = {0};
    void *a = malloc(8), *b = malloc(8);
    assert_int_equal(ftrt__grave_put(&g, a), 0);
    assert_int_equal(ftrt__grave_put(&g, NULL), 0); /* ignored */
    assert_int_equal(ftrt__grave_put(&g, b), 0);
    assert_int_equal(g.n, 2);
    assert_ptr_equal(g.p[0], a);
    assert_ptr_equal(g.p[1], b);
    ftrt__grave_clear(&g, NULL); /* the list only: the buffers stay allocated */
    assert_int_equal(g.n, 0);
    assert_null(g.p);
    assert_int_equal(ftrt__grave_put(&g, a), 0);
    assert_int_equal(ftrt__grave_put(&g, b), 0);
    released = 0;
    ftrt__grave_clear(&g, count_free);
    assert_int_equal(released, 2);
    assert_int_equal(g.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(takes_the_smallest_that_fits),
        cmocka_unit_test(full_pool_keeps_the_largest),
        cmocka_unit_test(full_pool_drops_the_newcomer),
        cmocka_unit_test(graveyard_holds_until_cleared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests: the bucketer's hand-over between threads (ftrt_bucketer_ready_from_any_thread,
 * ftrt_bucketer_drain; comm/bucketer.c). Several poster threads, as autograd's device threads
 * run CUDA backward hooks, write their gradients and post them while the owning thread drains
 * and reduces; the results are compared bit for bit with the single-thread path (ftrt_bucketer_
 * ready on the owner) over the same data:
 *  - through the real request engine and its progress thread (comm/async.c) over a fake
 *    transport (this test's "allreduce" maps every element x to 3x + 1, as if a second rank
 *    held 2x + 1, then the bucketer's mean scales by 1/2);
 *  - with the gradients in simulated device memory (kernels/loc_sim.c, a test arrangement that
 *    traps any host access outside the backend's calls) and a bucket backend that reduces
 *    through the device interface, as the NCCL plane's bucketer does with device pointers.
 * And the errors: a tensor posted twice (racing threads: exactly one wins), posted and marked
 * by ready(), bad arguments, a post that arrives after its step ended (dropped, not counted in
 * the next step), an epoch change met by the owner reaching the posters (FTRT_ERECOVER).
 * The direct backends' hand-over (the posters start the buckets) is test_bucket_direct.c's;
 * the arrangement both share is bucket_fixture.h.
 * Run under ThreadSanitizer by tests/run.sh.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bucket_fixture.h"
#include "comm/async.h"
#include "comm/bucketer.h"
#include "comm/plane.h"
#include "ftrt.h"
#include "helpers.h"
#include "kernels/location.h"

/* ---- the fake transport of the request engine: x -> 3x + 1, on the progress thread ---- */

static int x_bind(void *arg, ftrt__areq *r) { (void)arg, (void)r; return 0; }
static int x_ready(void *arg, ftrt__areq *r) { (void)arg, (void)r; return 1; }
static int x_start(void *arg, ftrt__areq *r, int chunk, void *buf, void *rbuf, size_t count)
{
    (void)rbuf; /* allreduces only */
    (void)arg, (void)r, (void)chunk;
    float *x = buf;
    for (size_t i = 0; i < count; i++) x[i] = 3.0f * x[i] + 1.0f;
    return 0;
}
static int x_test(void *arg, ftrt__areq *r, int chunk)
{
    (void)arg, (void)r, (void)chunk;
    return 1;
}
static const ftrt__xport fake_xport = {x_bind, x_ready, x_start, x_test};

/* ---- poster threads: the owner drains ---- */

/* One step: the posters post every tensor while this thread drains; then wait_all. Returns
 * wait_all's code; *drained gets the number of gradients marked by the drains. */
static int posters_step(posters *ps, int step, int *drained)
{
    atomic_store(&ps->done, 0);
    atomic_store(&ps->step, step);
    pthread_barrier_wait(&ps->start);
    *drained = 0;
    while (atomic_load_explicit(&ps->done, memory_order_acquire) < NPOST) {
        int n = ftrt_bucketer_drain(ps->b);
        assert_true(n >= 0);
        *drained += n;
        if (!n) sched_yield();
    }
    int n = ftrt_bucketer_drain(ps->b);
    assert_true(n >= 0);
    *drained += n;
    return ftrt_bucketer_wait_all(ps->b);
}

/* ---- through the request engine and its progress thread ---- */

/* The single-thread reference of a step: ready() on this thread, last tensor first. */
static void reference_step(ftrt_bucketer *b, float **ref, int step)
{
    for (int t = NT - 1; t >= 0; t--) {
        size_t c = count_of(t);
        for (size_t i = 0; i < c; i++) ref[t][i] = grad_of(step, t, i);
        assert_int_equal(ftrt_bucketer_ready(b, t, c ? ref[t] : NULL), 0);
    }
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
}

static void engine_posters_match_single_thread(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 2);
    ftrt__engine *e;
    assert_int_equal(ftrt__engine_create_x(&fake_xport, NULL, &f.w, 1, &e), 0);
    e->chunk_bytes = 48; /* collectives in chunks that straddle tensors */
    f.p.async = e;       /* the bucketers' CPU backend submits here */
    ftrt_bucket_config c;
    cfg_small(&c);
    ftrt_bucketer *mt, *st;
    size_t counts[NT];
    float *x[NT], *ref[NT];
    for (int t = 0; t < NT; t++) {
        counts[t] = count_of(t);
        x[t] = malloc(128 * sizeof(float));
        ref[t] = malloc(128 * sizeof(float));
    }
    assert_int_equal(ftrt__bucketer_create(&f.p, counts, NT, FTRT_FLOAT32, &c, &mt), 0);
    assert_int_equal(ftrt__bucketer_create(&f.p, counts, NT, FTRT_FLOAT32, &c, &st), 0);
    assert_true(ftrt_bucketer_pieces(mt) > 8);
    posters ps;
    posters_start(&ps, mt, x, 0);
    long drained_total = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int t = 0; t < NT; t++) memset(x[t], 0xff, 128 * sizeof(float)); /* NaN poison */
        int drained;
        assert_int_equal(posters_step(&ps, step, &drained), 0);
        drained_total += drained;
        reference_step(st, ref, step);
        for (int t = 0; t < NT; t++) {
            assert_memory_equal(x[t], ref[t], counts[t] * sizeof(float));
            /* the reference itself is the fake allreduce's mean: (3g + 1) / 2 */
            for (size_t i = 0; i < counts[t]; i++)
                assert_true(ref[t][i] == (3.0f * grad_of(step, t, i) + 1.0f) * 0.5f);
        }
    }
    posters_stop(&ps);
    assert_int_equal(atomic_load(&ps.bad), 0);
    assert_int_equal(drained_total, (long)STEPS * NT); /* every post marked by a drain */
    assert_int_equal(ftrt__bucketer_stale_posts(mt), 0);
    assert_int_equal(f.th.wait_ends, 2 * STEPS);
    assert_int_equal(ftrt_bucketer_free(mt), 0);
    assert_int_equal(ftrt_bucketer_free(st), 0);
    ftrt__engine_free(e, 1);
    for (int t = 0; t < NT; t++) {
        free(x[t]);
        free(ref[t]);
    }
    t_host_destroy(&f.th);
}

static const ftrt__bucket_backend sim_backend = {sim_submit, sr_wait, NULL, 0, NULL};

static void device_posters_match_host_reference(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 2);
    const ftrt__loc_ops *dev = ftrt__loc_sim();
    ftrt_bucket_config c;
    cfg_small(&c);
    size_t counts[NT];
    float *d[NT];
    for (int t = 0; t < NT; t++) {
        counts[t] = count_of(t);
        d[t] = counts[t] ? ftrt__sim_alloc(counts[t] * sizeof(float)) : NULL;
        assert_true(!counts[t] || d[t]);
    }
    ftrt_bucketer *b;
    assert_int_equal(ftrt__bucketer_create_be(&f.p, counts, NT, FTRT_FLOAT32, &c, &sim_backend,
                                              (void *)dev, &b), 0);
    posters ps;
    posters_start(&ps, b, d, 1);
    for (int step = 0; step < 6; step++) {
        int drained;
        assert_int_equal(posters_step(&ps, step, &drained), 0);
        for (int t = 0; t < NT; t++) {
            float h[128];
            if (!counts[t]) continue;
            assert_int_equal(ftrt__sim_read(h, d[t], counts[t] * sizeof(float)), 0);
            for (size_t i = 0; i < counts[t]; i++)
                assert_true(h[i] == (3.0f * grad_of(step, t, i) + 1.0f) * 0.5f);
        }
    }
    posters_stop(&ps);
    assert_int_equal(atomic_load(&ps.bad), 0);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    for (int t = 0; t < NT; t++) ftrt__sim_free(d[t]);
    t_host_destroy(&f.th);
}

/* ---- errors ---- */

typedef struct race {
    ftrt_bucketer *b;
    int tensor;
    float *buf;
    pthread_barrier_t *go; /* NULL: post at once */
    int rc;
} race;

static void *racer(void *arg)
{
    race *r = arg;
    if (r->go) pthread_barrier_wait(r->go);
    r->rc = ftrt_bucketer_ready_from_any_thread(r->b, r->tensor, r->buf);
    return NULL;
}

/* Posts tensor from a thread of its own; returns what the post returned. */
static int post_from_thread(ftrt_bucketer *b, int tensor, float *buf)
{
    race r = {b, tensor, buf, NULL, 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, racer, &r), 0);
    pthread_join(th, NULL);
    return r.rc;
}

/* The arrangement of the cases below (cmocka setup and teardown): three()'s bucketer on a
 * plane of 2 trainers with fake ports, its submissions logged, the tensors' data. */
typedef struct tri {
    fx f;
    rec log;
    ftrt_bucketer *b;
    float t[3][4];
} tri;

static int tri_setup(void **state)
{
    tri *x = calloc(1, sizeof *x);
    if (!x) return -1;
    fx_init(&x->f, 2);
    x->b = three(&x->f, &x->log);
    *state = x;
    return 0;
}

static int tri_teardown(void **state)
{
    tri *x = *state;
    assert_int_equal(ftrt_bucketer_free(x->b), 0);
    t_host_destroy(&x->f.th);
    free(x);
    return 0;
}

/* A whole step on the owner's thread: every tensor ready, the last first, and wait_all. */
static void full_step(tri *x)
{
    for (int i = 2; i >= 0; i--) assert_int_equal(ftrt_bucketer_ready(x->b, i, x->t[i]), 0);
    assert_int_equal(ftrt_bucketer_wait_all(x->b), 0);
}

static void double_posts(void **state)
{
    tri *x = *state;
    ftrt_bucketer *b = x->b;
    float(*t)[4] = x->t;
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    for (int round = 0; round < 20; round++) { /* two threads post tensor 1: one wins */
        race r[2] = {{b, 1, t[1], &go, 1}, {b, 1, t[1], &go, 1}};
        pthread_t th[2];
        for (int k = 0; k < 2; k++) assert_int_equal(pthread_create(&th[k], NULL, racer, &r[k]), 0);
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        assert_true((r[0].rc == 0 && r[1].rc == FTRT_EINVAL) ||
                    (r[1].rc == 0 && r[0].rc == FTRT_EINVAL));
        assert_int_equal(ftrt_bucketer_ready(b, 1, t[1]), FTRT_EINVAL); /* the post came first */
        assert_int_equal(ftrt_bucketer_ready(b, 2, t[2]), 0);
        assert_int_equal(post_from_thread(b, 2, t[2]), FTRT_EINVAL); /* marked by ready() */
        assert_int_equal(post_from_thread(b, 0, t[0]), 0);
        assert_int_equal(ftrt_bucketer_wait_all(b), 0); /* applies the post of tensor 0 */
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(x->log.nsub, 20 * 3);
    /* Bad arguments: nothing posted. */
    assert_int_equal(ftrt_bucketer_ready_from_any_thread(NULL, 0, t[0]), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_ready_from_any_thread(b, 3, t[0]), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_ready_from_any_thread(b, -1, t[0]), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_ready_from_any_thread(b, 0, NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_drain(NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_drain(b), 0);
    assert_int_equal(x->log.nsub, 20 * 3);
}

/* A post and a ready() of the same tensor that cross: the post claimed the tensor's mark, then
 * ready() marked it before the post was queued. Caught when the owner applies the post: the
 * step's error, FTRT_EINVAL, from the drain, the posts after it and wait_all (after waiting). */
static void crossing_post_and_ready(void **state)
{
    tri *x = *state;
    ftrt_bucketer *b = x->b;
    float(*t)[4] = x->t;
    unsigned gen = ftrt__bucketer_gen(b);
    assert_int_equal(ftrt_bucketer_ready(b, 2, t[2]), 0);
    assert_int_equal(ftrt__bucketer_enqueue(b, 2, t[2], gen), 0);
    assert_int_equal(ftrt_bucketer_drain(b), FTRT_EINVAL);
    assert_int_equal(post_from_thread(b, 1, t[1]), FTRT_EINVAL); /* posted; the step failed */
    assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), FTRT_EINVAL);
    assert_int_equal(x->log.nsub, 3); /* the data is reduced all the same */
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_EINVAL);
    full_step(x); /* the next step is clean */
}

static void late_posts_are_dropped(void **state)
{
    tri *x = *state;
    ftrt_bucketer *b = x->b;
    float(*t)[4] = x->t;
    /* Posted, then the step is abandoned before the owner looked: dropped by reset(). */
    assert_int_equal(post_from_thread(b, 0, t[0]), 0);
    assert_int_equal(ftrt_bucketer_reset(b), 0);
    assert_int_equal(x->log.nsub, 0);
    assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), 0); /* not ready in the new step */
    assert_int_equal(ftrt_bucketer_reset(b), 0);
    /* A poster that read the generation before the step ended and queued after: dropped when
     * the owner looks, and counted; the step goes on without it. */
    unsigned old = ftrt__bucketer_gen(b);
    full_step(x);
    assert_int_equal(x->log.nsub, 3);
    assert_int_equal(ftrt__bucketer_enqueue(b, 0, t[0], old), 0);
    assert_int_equal(ftrt_bucketer_drain(b), 0);
    assert_int_equal(ftrt__bucketer_stale_posts(b), 1);
    assert_int_equal(x->log.nsub, 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ESTATE); /* tensor 0 is not ready */
    full_step(x);
}

/* An epoch change that the owner meets while applying posts is the step's error: the posts
 * after it return FTRT_ERECOVER to their threads, and wait_all returns it to the owner. */
static void epoch_change_reaches_posters(void **state)
{
    tri *x = *state;
    ftrt_bucketer *b = x->b;
    float(*t)[4] = x->t;
    assert_int_equal(post_from_thread(b, 2, t[2]), 0);
    assert_int_equal(ftrt_bucketer_drain(b), 1);
    assert_int_equal(x->log.nsub, 1);
    t_watch_announce(&x->f.w, 1); /* a rank failed */
    assert_int_equal(post_from_thread(b, 1, t[1]), 0); /* the owner has not looked yet */
    assert_int_equal(ftrt_bucketer_drain(b), FTRT_ERECOVER); /* bucket 1 cannot start */
    assert_int_equal(x->log.nsub, 1);
    assert_int_equal(post_from_thread(b, 0, t[0]), FTRT_ERECOVER);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ERECOVER);
    assert_int_equal(x->f.w.needs_recover, 1);
    /* The next step starts clean for the posters. */
    assert_int_equal(ftrt_bucketer_reset(b), 0);
    x->f.w.epoch = 1;
    x->f.w.needs_recover = 0;
    for (int i = 2; i >= 0; i--) assert_int_equal(post_from_thread(b, i, t[i]), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(x->log.nsub, 4);
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(engine_posters_match_single_thread),
        cmocka_unit_test(device_posters_match_host_reference),
        cmocka_unit_test_setup_teardown(double_posts, tri_setup, tri_teardown),
        cmocka_unit_test_setup_teardown(crossing_post_and_ready, tri_setup, tri_teardown),
        cmocka_unit_test_setup_teardown(late_posts_are_dropped, tri_setup, tri_teardown),
        cmocka_unit_test_setup_teardown(epoch_change_reaches_posters, tri_setup, tri_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

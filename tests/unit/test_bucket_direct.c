/*
 * Unit tests: the bucketer's hand-over between threads with a direct backend (the NCCL
 * plane's hand-over, ftrt_gpu_bucketer_ready_from_any_thread, ftrt__bucketer_post_direct and
 * the any-thread order ftrt__bucketer_order; comm/bucketer.c; the real one runs on a GPU in
 * unit.nccl): the posters start the buckets themselves, under the bucketer's step lock,
 * while the owner is blocked as in a CUDA backward() and drains nothing;
 * a backend that defers off its owner (no NCCL communicator yet) leaves them to the owner's
 * wait_all or drain; double posts, stale posts, an epoch change and a failed collective met on
 * a poster reach the owner at wait_all. On the simulated device, bit for bit against the
 * owner's single-thread path through the same backend.
 * The any-thread order of a consumer after every bucket, from a thread racing the posters:
 * every request of the step once all started, nothing (FTRT_ESTATE) before that or while the
 * buckets wait for the owner, nothing and the step's error after a failure.
 * The queueing hand-over (ftrt_bucketer_ready_from_any_thread) is test_bucket_threads.c's; the
 * arrangement both share is bucket_fixture.h.
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
#include "comm/bucketer.h"
#include "comm/plane.h"
#include "ftrt.h"
#include "helpers.h"
#include "kernels/location.h"

/* A finished request that did nothing (a direct backend's collective without data). */
static int rec_submit_any(struct ftrt_request **req)
{
    sim_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->base.ops = &sr_ops;
    *req = &r->base;
    return 0;
}

/* ---- a direct backend: the posters start the buckets (the NCCL plane's hand-over) ---- */

/* The NCCL plane's threading, without a GPU: submit checks the watch itself, defers off the
 * owner until "connected" (the plane's communicator exists), serializes its work under its own
 * lock (the plane's) and reduces through the simulated device as sim_submit does (or only
 * counts, dev == NULL). */
typedef struct direct_be {
    ftrt__watch *w;
    const ftrt__loc_ops *dev;
    pthread_t owner;
    atomic_int connected;  /* 0: off the owner, every submit defers */
    atomic_int fail_with;  /* != 0: the next submit fails with it (a failed collective) */
    atomic_int by_posters; /* pieces started on posting threads */
    atomic_int by_owner;   /* pieces started on the owner */
    pthread_mutex_t lock;
    /* the order op (ftrt__bucketer_order): what it was asked to order, under `lock` */
    int nordered;
    void *consumer;                 /* the consumer of the last order */
    struct ftrt_request *ordered[64]; /* the requests ordered, in call order (the first 64) */
} direct_be;

static int direct_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                         size_t count, double scale, int in_place,
                       struct ftrt_request **req)
{
    (void)in_place;
    direct_be *d = arg;
    int rc = ftrt__watch_check(d->w);
    if (rc) return rc;
    int owner = pthread_equal(pthread_self(), d->owner);
    if (!owner && !atomic_load(&d->connected)) return FTRT__BUCKET_DEFER;
    if ((rc = atomic_exchange(&d->fail_with, 0)) != 0) return rc;
    pthread_mutex_lock(&d->lock);
    if (d->dev) rc = sim_submit((void *)d->dev, bucket, tensors, segs, n, count, scale, in_place,
                                     req);
    else rc = rec_submit_any(req);
    pthread_mutex_unlock(&d->lock);
    atomic_fetch_add(owner ? &d->by_owner : &d->by_posters, 1);
    return rc;
}
/* The plane's order op (cudaStreamWaitEvent of the consumer on each request's end event):
 * records what the consumer was ordered after. */
static int direct_order(void *arg, struct ftrt_request *req, void *consumer)
{
    direct_be *d = arg;
    pthread_mutex_lock(&d->lock);
    if (d->nordered < 64) d->ordered[d->nordered] = req;
    d->nordered++;
    d->consumer = consumer;
    pthread_mutex_unlock(&d->lock);
    return 0;
}

static const ftrt__bucket_backend direct_backend = {direct_submit, sr_wait, NULL, 1, direct_order};

/* How many requests d has ordered so far (any thread). */
static int nordered(direct_be *d)
{
    pthread_mutex_lock(&d->lock);
    int n = d->nordered;
    pthread_mutex_unlock(&d->lock);
    return n;
}

/* The end-of-backward callback's call, from a thread of its own that races the posters
 * (autograd may run the callback on its device thread): tries the any-thread order until it
 * no longer answers FTRT_ESTATE or the posters are done (then once more). */
typedef struct orderer {
    ftrt_bucketer *b;
    posters *ps;
    void *consumer;
    int rc, estate; /* the last answer; how many times it was FTRT_ESTATE */
} orderer;

static void *orderer_main(void *arg)
{
    orderer *o = arg;
    for (;;) {
        int fin = atomic_load_explicit(&o->ps->done, memory_order_acquire) == NPOST;
        o->rc = ftrt__bucketer_order(o->b, o->consumer, 1);
        if (o->rc != FTRT_ESTATE || fin) break;
        o->estate++;
        sched_yield();
    }
    return NULL;
}

static void direct_init(direct_be *d, ftrt__watch *w, const ftrt__loc_ops *dev, int connected)
{
    memset(d, 0, sizeof *d);
    d->w = w;
    d->dev = dev;
    d->owner = pthread_self();
    atomic_init(&d->connected, connected);
    atomic_init(&d->fail_with, 0);
    atomic_init(&d->by_posters, 0);
    atomic_init(&d->by_owner, 0);
    pthread_mutex_init(&d->lock, NULL);
}

/* One step with the owner blocked (as in backward()): it only waits for the posters to return,
 * then checks who started the pieces and ends the step. A thread of its own orders a consumer
 * after the step's pieces meanwhile (the any-thread order): all of them once every piece went
 * out on the posters, none while the pieces wait for the owner (not connected). */
static void blocked_owner_step(posters *ps, direct_be *d, int step, int np, int connected)
{
    int p0 = atomic_load(&d->by_posters), o0 = atomic_load(&d->by_owner);
    assert_true(np <= 64);
    d->nordered = 0; /* no other thread runs now */
    int n0 = 0;
    orderer o = {ps->b, ps, &o, 1, 0};
    pthread_t oth;
    atomic_store(&d->connected, connected);
    atomic_store(&ps->done, 0);
    atomic_store(&ps->step, step);
    assert_int_equal(pthread_create(&oth, NULL, orderer_main, &o), 0);
    pthread_barrier_wait(&ps->start);
    while (atomic_load_explicit(&ps->done, memory_order_acquire) < NPOST) sched_yield();
    pthread_join(oth, NULL);
    /* every piece went out before the owner made a single bucketer call, or none did */
    assert_int_equal(atomic_load(&d->by_posters) - p0, connected ? np : 0);
    assert_int_equal(atomic_load(&d->by_owner) - o0, 0);
    assert_int_equal(o.rc, connected ? 0 : FTRT_ESTATE);
    assert_int_equal(nordered(d) - n0, connected ? np : 0);
    if (connected) { /* the consumer waits for exactly this step's requests, in piece order */
        assert_ptr_equal(d->consumer, &o);
        for (int k = 0; k < np && n0 + k < 64; k++)
            assert_ptr_equal(d->ordered[n0 + k], ftrt__bucketer_request(ps->b, k));
    }
    assert_int_equal(ftrt_bucketer_wait_all(ps->b), 0);
    assert_int_equal(atomic_load(&d->by_owner) - o0, connected ? 0 : np);
}

static void direct_posters_start_buckets(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 2);
    const ftrt__loc_ops *dev = ftrt__loc_sim();
    direct_be d;
    direct_init(&d, &f.w, dev, 1);
    ftrt_bucket_config c;
    cfg_small(&c);
    size_t counts[NT];
    float *x[NT], *ref[NT];
    for (int t = 0; t < NT; t++) {
        counts[t] = count_of(t);
        x[t] = counts[t] ? ftrt__sim_alloc(counts[t] * sizeof(float)) : NULL;
        ref[t] = counts[t] ? ftrt__sim_alloc(counts[t] * sizeof(float)) : NULL;
    }
    ftrt_bucketer *mt, *st;
    assert_int_equal(ftrt__bucketer_create_be(&f.p, counts, NT, FTRT_FLOAT32, &c, &direct_backend,
                                              &d, &mt), 0);
    assert_int_equal(ftrt__bucketer_create_be(&f.p, counts, NT, FTRT_FLOAT32, &c, &direct_backend,
                                              &d, &st), 0);
    int np = ftrt_bucketer_pieces(mt);
    assert_true(np > 8);
    posters ps;
    posters_start(&ps, mt, x, 1);
    ps.direct = 1;
    for (int step = 0; step < 12; step++) {
        /* steps 4..7: no communicator off the owner yet, so the owner's wait_all starts all */
        blocked_owner_step(&ps, &d, step, np, step < 4 || step >= 8);
        int o0 = atomic_load(&d.by_owner);
        for (int t = NT - 1; t >= 0; t--) { /* the single-thread path: ready() on the owner */
            float h[128];
            for (size_t i = 0; i < counts[t]; i++) h[i] = grad_of(step, t, i);
            if (counts[t]) assert_int_equal(ftrt__sim_write(ref[t], h, counts[t] * sizeof(float)), 0);
            assert_int_equal(ftrt_bucketer_ready(st, t, ref[t]), 0);
        }
        assert_int_equal(atomic_load(&d.by_owner) - o0, np);
        assert_int_equal(ftrt_bucketer_wait_all(st), 0);
        for (int t = 0; t < NT; t++) {
            float a[128], b[128];
            if (!counts[t]) continue;
            assert_int_equal(ftrt__sim_read(a, x[t], counts[t] * sizeof(float)), 0);
            assert_int_equal(ftrt__sim_read(b, ref[t], counts[t] * sizeof(float)), 0);
            assert_memory_equal(a, b, counts[t] * sizeof(float));
            for (size_t i = 0; i < counts[t]; i++)
                assert_true(b[i] == (3.0f * grad_of(step, t, i) + 1.0f) * 0.5f);
        }
    }
    posters_stop(&ps);
    assert_int_equal(atomic_load(&ps.bad), 0);
    assert_int_equal(ftrt__bucketer_stale_posts(mt), 0);
    assert_int_equal(f.th.wait_ends, 2 * 12);
    assert_int_equal(ftrt_bucketer_free(mt), 0);
    assert_int_equal(ftrt_bucketer_free(st), 0);
    for (int t = 0; t < NT; t++) {
        ftrt__sim_free(x[t]);
        ftrt__sim_free(ref[t]);
    }
    pthread_mutex_destroy(&d.lock);
    t_host_destroy(&f.th);
}

/* A post from a thread of its own to a direct bucketer; returns what it returned. */
typedef struct dpost {
    ftrt_bucketer *b;
    int tensor;
    float *buf;
    unsigned gen; /* 0: read it on the thread, as ftrt_gpu_bucketer_ready_from_any_thread does */
    pthread_barrier_t *go;
    int rc;
} dpost;

static void *dposter(void *arg)
{
    dpost *p = arg;
    if (p->go) pthread_barrier_wait(p->go);
    p->rc = ftrt__bucketer_post_direct(p->b, p->tensor, p->buf,
                                       p->gen ? p->gen : ftrt__bucketer_gen(p->b));
    return NULL;
}

static int dpost_from_thread(ftrt_bucketer *b, int tensor, float *buf, unsigned gen)
{
    dpost p = {b, tensor, buf, gen, NULL, 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, dposter, &p), 0);
    pthread_join(th, NULL);
    return p.rc;
}

/* three_on() over a counting direct backend. */
static ftrt_bucketer *direct_three(fx *f, direct_be *d)
{
    return three_on(f, &direct_backend, d);
}

/* The arrangement of direct_errors and direct_order_any_thread (cmocka setup and teardown):
 * direct_three()'s bucketer on a plane of 2 trainers with fake ports, its backend connected and
 * counting only (no device), the tensors' data. */
typedef struct duo {
    fx f;
    direct_be d;
    ftrt_bucketer *b;
    float t[3][4];
} duo;

static int duo_setup(void **state)
{
    duo *x = calloc(1, sizeof *x);
    if (!x) return -1;
    fx_init(&x->f, 2);
    direct_init(&x->d, &x->f.w, NULL, 1);
    x->b = direct_three(&x->f, &x->d);
    *state = x;
    return 0;
}

static int duo_teardown(void **state)
{
    duo *x = *state;
    assert_int_equal(ftrt_bucketer_free(x->b), 0);
    pthread_mutex_destroy(&x->d.lock);
    t_host_destroy(&x->f.th);
    free(x);
    return 0;
}

static void direct_errors(void **state)
{
    duo *x = *state;
    ftrt_bucketer *b = x->b;
    direct_be *d = &x->d;
    float(*t)[4] = x->t;
    /* the queueing variant refuses a direct bucketer (the GPU one must record an event) */
    assert_int_equal(ftrt_bucketer_ready_from_any_thread(b, 0, t[0]), FTRT_EINVAL);
    assert_int_equal(ftrt__bucketer_post_direct(b, 3, t[0], ftrt__bucketer_gen(b)), FTRT_EINVAL);
    assert_int_equal(ftrt__bucketer_post_direct(b, 0, NULL, ftrt__bucketer_gen(b)), FTRT_EINVAL);
    assert_int_equal(ftrt__bucketer_post_direct(NULL, 0, t[0], 1), FTRT_EINVAL);
    /* two threads post tensor 1: exactly one wins, the step is unharmed */
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    for (int round = 0; round < 20; round++) {
        dpost p[2] = {{b, 1, t[1], 0, &go, 1}, {b, 1, t[1], 0, &go, 1}};
        pthread_t th[2];
        for (int k = 0; k < 2; k++) assert_int_equal(pthread_create(&th[k], NULL, dposter, &p[k]), 0);
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        assert_true((p[0].rc == 0 && p[1].rc == FTRT_EINVAL) ||
                    (p[1].rc == 0 && p[0].rc == FTRT_EINVAL));
        assert_int_equal(ftrt_bucketer_ready(b, 1, t[1]), FTRT_EINVAL);
        assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
        assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), 0);
        assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(atomic_load(&d->by_posters), 20 * 2);
    assert_int_equal(atomic_load(&d->by_owner), 20);
    /* a post that read the generation before its step ended: dropped, counted, harmless */
    unsigned old = ftrt__bucketer_gen(b);
    for (int i = 2; i >= 0; i--) assert_int_equal(ftrt_bucketer_ready(b, i, t[i]), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(dpost_from_thread(b, 2, t[2], old), 0);
    assert_int_equal(ftrt__bucketer_stale_posts(b), 1);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ESTATE); /* tensor 2 is not ready */
    /* a deferred bucket (no communicator off the owner) is started by the owner's drain */
    atomic_store(&d->connected, 0);
    int o0 = atomic_load(&d->by_owner), p0 = atomic_load(&d->by_posters);
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    assert_int_equal(atomic_load(&d->by_owner) - o0, 0);
    assert_int_equal(ftrt_bucketer_drain(b), 0);
    assert_int_equal(atomic_load(&d->by_owner) - o0, 1);
    atomic_store(&d->connected, 1);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), 0);
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), 0);
    assert_int_equal(atomic_load(&d->by_posters) - p0, 2);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    /* a collective that fails on a poster: the step's error, for later posters and the owner */
    atomic_store(&d->fail_with, FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), FTRT_ENCCL);
    assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), FTRT_ENCCL);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ENCCL);
    /* an epoch change met by a poster's submit: FTRT_ERECOVER to it, the owner, the watch */
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    t_watch_announce(&x->f.w, 1);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), FTRT_ERECOVER);
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), FTRT_ERECOVER);
    assert_int_equal(x->f.w.needs_recover, 0); /* posters never write the owner's field */
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ERECOVER);
    assert_int_equal(x->f.w.needs_recover, 1);
    assert_int_equal(ftrt_bucketer_reset(b), 0);
    x->f.w.epoch = 1; /* the recovery */
    x->f.w.needs_recover = 0;
    for (int i = 2; i >= 0; i--) assert_int_equal(dpost_from_thread(b, i, t[i], 0), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
}

/* The any-thread order (ftrt_gpu_bucketer_order_from_any_thread's core) from threads of their
 * own: nothing ordered until every bucket started (FTRT_ESTATE), every request once they have,
 * nothing for a step whose buckets wait for the owner or that failed (its error), and only
 * through a backend that can order. */
typedef struct dorder {
    ftrt_bucketer *b;
    void *consumer;
    int rc;
} dorder;

static void *dorder_main(void *arg)
{
    dorder *o = arg;
    o->rc = ftrt__bucketer_order(o->b, o->consumer, 1);
    return NULL;
}

static int order_from_thread(ftrt_bucketer *b, void *consumer)
{
    dorder o = {b, consumer, 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, dorder_main, &o), 0);
    pthread_join(th, NULL);
    return o.rc;
}

static void direct_order_any_thread(void **state)
{
    duo *x = *state;
    ftrt_bucketer *b = x->b;
    direct_be *d = &x->d;
    float(*t)[4] = x->t;
    int consumer;
    /* two of three buckets started: nothing ordered */
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), 0);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ESTATE);
    assert_int_equal(nordered(d), 0);
    /* all three: the consumer is ordered after each request of the step, once */
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), 0);
    assert_int_equal(order_from_thread(b, &consumer), 0);
    assert_int_equal(nordered(d), 3);
    assert_ptr_equal(d->consumer, &consumer);
    for (int k = 0; k < 3; k++) assert_ptr_equal(d->ordered[k], ftrt__bucketer_request(b, k));
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ESTATE); /* the next step: nothing */
    assert_int_equal(nordered(d), 3);
    /* every tensor posted but no communicator off the owner: the buckets wait for the owner,
     * nothing is ordered, and the owner's wait_all starts them */
    atomic_store(&d->connected, 0);
    for (int i = 2; i >= 0; i--) assert_int_equal(dpost_from_thread(b, i, t[i], 0), 0);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ESTATE);
    assert_int_equal(nordered(d), 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(atomic_load(&d->by_owner), 3);
    atomic_store(&d->connected, 1);
    /* a step whose collective failed on a poster: its error, nothing ordered */
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    atomic_store(&d->fail_with, FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), FTRT_ENCCL);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ENCCL);
    assert_int_equal(nordered(d), 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ENCCL);
    /* an epoch change met by a poster: FTRT_ERECOVER, nothing ordered */
    t_watch_announce(&x->f.w, 1);
    for (int i = 2; i >= 0; i--) assert_int_equal(dpost_from_thread(b, i, t[i], 0), FTRT_ERECOVER);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ERECOVER);
    assert_int_equal(nordered(d), 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ERECOVER);
    assert_int_equal(ftrt_bucketer_reset(b), 0);
    x->f.w.epoch = 1;
    x->f.w.needs_recover = 0;
    /* a backend without an order op, and no bucketer */
    rec log = {0};
    ftrt_bucketer *r = three(&x->f, &log);
    assert_int_equal(ftrt__bucketer_order(r, &consumer, 1), FTRT_EINVAL);
    assert_int_equal(ftrt__bucketer_order(NULL, &consumer, 1), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_free(r), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(direct_posters_start_buckets),
        cmocka_unit_test_setup_teardown(direct_errors, duo_setup, duo_teardown),
        cmocka_unit_test_setup_teardown(direct_order_any_thread, duo_setup, duo_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

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
 *
 * Direct backends (the NCCL plane's hand-over, ftrt_gpu_bucketer_ready_from_any_thread; the
 * real one runs on a GPU in unit.nccl): the posters start the buckets themselves, under the
 * bucketer's step lock, while the owner is blocked as in a CUDA backward() and drains nothing;
 * a backend that defers off its owner (no NCCL communicator yet) leaves them to the owner's
 * wait_all or drain; double posts, stale posts, an epoch change and a failed collective met on
 * a poster reach the owner at wait_all. On the simulated device, bit for bit against the
 * owner's single-thread path through the same backend.
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

#include "base/crc32c.h"
#include "comm/async.h"
#include "comm/bucketer.h"
#include "comm/plane.h"
#include "ftrt.h"
#include "helpers.h"
#include "kernels/location.h"

#define NT 41      /* tensors */
#define NPOST 4    /* poster threads */
#define STEPS 100

/* ---- the data of a step ---- */

static size_t count_of(int t) { return t == 7 ? 0 : (size_t)(1 + (t * 37) % 97); }

/* The local gradient of tensor t, element i, at `step`: exact in float, varied in sign. */
static float grad_of(int step, int t, size_t i)
{
    return (float)((int)((step * 131 + t * 17 + (int)i * 7) % 201) - 100) * 0.0625f;
}

/* The arrangement: a plane with fake ports (helpers.h) of `size` trainers. */
typedef struct fx {
    ftrt__plane p;
    ftrt__watch w;
    t_host th;
} fx;

static void fx_init(fx *f, int size)
{
    memset(f, 0, sizeof *f);
    t_watch_init(&f->w);
    ftrt__plane_init(&f->p, &f->w, t_host_init(&f->th), 1, 50);
    f->p.size = size;
}

static void cfg_small(ftrt_bucket_config *c)
{
    ftrt_bucket_config_init(c, sizeof *c);
    c->first_bucket_bytes = 256;
    c->bucket_bytes = 1024;
    c->piece_bytes = 200; /* pieces that split tensors */
}

/* ---- the fake transport of the request engine: x -> 3x + 1, on the progress thread ---- */

static int x_bind(void *arg, ftrt__areq *r) { (void)arg, (void)r; return 0; }
static int x_ready(void *arg, ftrt__areq *r) { (void)arg, (void)r; return 1; }
static int x_start(void *arg, ftrt__areq *r, int chunk, void *buf, size_t count)
{
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

/* ---- poster threads ---- */

typedef struct posters {
    ftrt_bucketer *b;
    float **dst;             /* where each tensor's gradient is written (host or device) */
    int device;              /* 1: dst is simulated device memory (written by ftrt__sim_write) */
    int direct;              /* 1: b has a direct backend (ftrt__bucketer_post_direct) */
    pthread_barrier_t start; /* owner + posters, once per step */
    atomic_int step;         /* the step to post; -1: exit */
    atomic_int done;         /* posters finished with this step */
    atomic_long bad;         /* posts that did not return 0 */
    pthread_t thr[NPOST];
    int id[NPOST];
} posters;

typedef struct poster_arg {
    posters *ps;
    int k;
} poster_arg;

/* Poster k takes the tensors n-1-k, n-1-k-NPOST, ... (autograd produces the last first),
 * writes each gradient, then posts it. */
static void post_step(posters *ps, int k, int step)
{
    float tmp[128];
    for (int t = NT - 1 - k; t >= 0; t -= NPOST) {
        size_t c = count_of(t);
        for (size_t i = 0; i < c; i++) tmp[i] = grad_of(step, t, i);
        if (c && ps->device) {
            if (ftrt__sim_write(ps->dst[t], tmp, c * sizeof(float))) atomic_fetch_add(&ps->bad, 1);
        } else if (c) {
            memcpy(ps->dst[t], tmp, c * sizeof(float));
        }
        int rc = ps->direct ? ftrt__bucketer_post_direct(ps->b, t, c ? ps->dst[t] : NULL,
                                                         ftrt__bucketer_gen(ps->b))
                            : ftrt_bucketer_ready_from_any_thread(ps->b, t, c ? ps->dst[t] : NULL);
        if (rc != 0) atomic_fetch_add(&ps->bad, 1);
    }
}

static void *poster_main(void *arg)
{
    poster_arg *a = arg;
    for (;;) {
        pthread_barrier_wait(&a->ps->start);
        int step = atomic_load(&a->ps->step);
        if (step < 0) return NULL;
        post_step(a->ps, a->k, step);
        atomic_fetch_add_explicit(&a->ps->done, 1, memory_order_release);
    }
}

static poster_arg g_args[NPOST];

static void posters_start(posters *ps, ftrt_bucketer *b, float **dst, int device)
{
    ps->b = b;
    ps->dst = dst;
    ps->device = device;
    ps->direct = 0;
    atomic_init(&ps->step, 0);
    atomic_init(&ps->done, 0);
    atomic_init(&ps->bad, 0);
    pthread_barrier_init(&ps->start, NULL, NPOST + 1);
    for (int k = 0; k < NPOST; k++) {
        g_args[k] = (poster_arg){ps, k};
        assert_int_equal(pthread_create(&ps->thr[k], NULL, poster_main, &g_args[k]), 0);
    }
}

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

static void posters_stop(posters *ps)
{
    atomic_store(&ps->step, -1);
    pthread_barrier_wait(&ps->start);
    for (int k = 0; k < NPOST; k++) pthread_join(ps->thr[k], NULL);
    pthread_barrier_destroy(&ps->start);
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

/* ---- with the gradients in simulated device memory ---- */

typedef struct sim_req {
    struct ftrt_request base;
    int result;
} sim_req;

static int sr_test(struct ftrt_request *r)
{
    return ((sim_req *)r)->result ? ((sim_req *)r)->result : 1;
}
static int sr_wait(struct ftrt_request *r) { return ((sim_req *)r)->result; }
static int sr_free(struct ftrt_request *r)
{
    free(r);
    return 0;
}
static const ftrt__req_ops sr_ops = {sr_test, sr_wait, sr_free};

/* The device bucket backend: each segment is a device range; it is read through the device
 * interface, reduced (3x + 1, times scale) and written back, on the submitting thread. */
static int sim_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                      size_t count, double scale, int in_place,
                       struct ftrt_request **req)
{
    (void)in_place;
    const ftrt__loc_ops *dev = arg;
    (void)bucket, (void)tensors, (void)count;
    int rc = 0;
    for (int j = 0; !rc && j < n; j++) {
        size_t m = segs[j].bytes / sizeof(float);
        float h[128];
        uint32_t crc;
        if (!m) continue;
        rc = dev->to_host(h, segs[j].ptr, segs[j].bytes, &crc);
        for (size_t i = 0; !rc && i < m; i++) h[i] = (3.0f * h[i] + 1.0f) * (float)scale;
        if (!rc)
            rc = dev->from_host(segs[j].ptr, h, segs[j].bytes, ftrt__crc32c(0, h, segs[j].bytes));
    }
    sim_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->base.ops = &sr_ops;
    r->result = rc;
    *req = &r->base;
    return 0;
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

/* A fake backend that records its submissions (owner thread only). */
typedef struct rec {
    int nsub;
} rec;

static int rec_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                      size_t count, double scale, int in_place,
                       struct ftrt_request **req)
{
    (void)in_place;
    (void)bucket, (void)tensors, (void)segs, (void)n, (void)count, (void)scale;
    ((rec *)arg)->nsub++;
    sim_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->base.ops = &sr_ops;
    *req = &r->base;
    return 0;
}
static const ftrt__bucket_backend rec_backend = {rec_submit, sr_wait, NULL, 0, NULL};

/* A finished request that did nothing (a direct backend's collective without data). */
static int rec_submit_any(struct ftrt_request **req)
{
    sim_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->base.ops = &sr_ops;
    *req = &r->base;
    return 0;
}

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

/* One tensor per bucket: 3 tensors of 4 floats, whole buckets, over backend be (arg). */
static ftrt_bucketer *three_on(fx *f, const ftrt__bucket_backend *be, void *arg)
{
    size_t counts[3] = {4, 4, 4};
    ftrt_bucket_config c;
    ftrt_bucket_config_init(&c, sizeof c);
    c.first_bucket_bytes = c.bucket_bytes = 16;
    c.piece_bytes = 0;
    ftrt_bucketer *b;
    assert_int_equal(ftrt__bucketer_create_be(&f->p, counts, 3, FTRT_FLOAT32, &c, be, arg, &b),
                     0);
    return b;
}

/* three_on() over the logging backend. */
static ftrt_bucketer *three(fx *f, rec *log) { return three_on(f, &rec_backend, log); }

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

static void direct_errors(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 2);
    direct_be d;
    direct_init(&d, &f.w, NULL, 1);
    ftrt_bucketer *b = direct_three(&f, &d);
    float t[3][4] = {{0}};
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
    assert_int_equal(atomic_load(&d.by_posters), 20 * 2);
    assert_int_equal(atomic_load(&d.by_owner), 20);
    /* a post that read the generation before its step ended: dropped, counted, harmless */
    unsigned old = ftrt__bucketer_gen(b);
    for (int i = 2; i >= 0; i--) assert_int_equal(ftrt_bucketer_ready(b, i, t[i]), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(dpost_from_thread(b, 2, t[2], old), 0);
    assert_int_equal(ftrt__bucketer_stale_posts(b), 1);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ESTATE); /* tensor 2 is not ready */
    /* a deferred bucket (no communicator off the owner) is started by the owner's drain */
    atomic_store(&d.connected, 0);
    int o0 = atomic_load(&d.by_owner), p0 = atomic_load(&d.by_posters);
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    assert_int_equal(atomic_load(&d.by_owner) - o0, 0);
    assert_int_equal(ftrt_bucketer_drain(b), 0);
    assert_int_equal(atomic_load(&d.by_owner) - o0, 1);
    atomic_store(&d.connected, 1);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), 0);
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), 0);
    assert_int_equal(atomic_load(&d.by_posters) - p0, 2);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    /* a collective that fails on a poster: the step's error, for later posters and the owner */
    atomic_store(&d.fail_with, FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), FTRT_ENCCL);
    assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), FTRT_ENCCL);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ENCCL);
    /* an epoch change met by a poster's submit: FTRT_ERECOVER to it, the owner, the watch */
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    t_watch_announce(&f.w, 1);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), FTRT_ERECOVER);
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), FTRT_ERECOVER);
    assert_int_equal(f.w.needs_recover, 0); /* posters never write the owner's field */
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ERECOVER);
    assert_int_equal(f.w.needs_recover, 1);
    assert_int_equal(ftrt_bucketer_reset(b), 0);
    f.w.epoch = 1; /* the recovery */
    f.w.needs_recover = 0;
    for (int i = 2; i >= 0; i--) assert_int_equal(dpost_from_thread(b, i, t[i], 0), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    pthread_mutex_destroy(&d.lock);
    t_host_destroy(&f.th);
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
    (void)state;
    fx f;
    fx_init(&f, 2);
    direct_be d;
    direct_init(&d, &f.w, NULL, 1);
    ftrt_bucketer *b = direct_three(&f, &d);
    float t[3][4] = {{0}};
    int consumer;
    /* two of three buckets started: nothing ordered */
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), 0);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ESTATE);
    assert_int_equal(nordered(&d), 0);
    /* all three: the consumer is ordered after each request of the step, once */
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), 0);
    assert_int_equal(order_from_thread(b, &consumer), 0);
    assert_int_equal(nordered(&d), 3);
    assert_ptr_equal(d.consumer, &consumer);
    for (int k = 0; k < 3; k++) assert_ptr_equal(d.ordered[k], ftrt__bucketer_request(b, k));
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ESTATE); /* the next step: nothing */
    assert_int_equal(nordered(&d), 3);
    /* every tensor posted but no communicator off the owner: the buckets wait for the owner,
     * nothing is ordered, and the owner's wait_all starts them */
    atomic_store(&d.connected, 0);
    for (int i = 2; i >= 0; i--) assert_int_equal(dpost_from_thread(b, i, t[i], 0), 0);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ESTATE);
    assert_int_equal(nordered(&d), 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(atomic_load(&d.by_owner), 3);
    atomic_store(&d.connected, 1);
    /* a step whose collective failed on a poster: its error, nothing ordered */
    assert_int_equal(dpost_from_thread(b, 2, t[2], 0), 0);
    atomic_store(&d.fail_with, FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 1, t[1], 0), FTRT_ENCCL);
    assert_int_equal(dpost_from_thread(b, 0, t[0], 0), FTRT_ENCCL);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ENCCL);
    assert_int_equal(nordered(&d), 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ENCCL);
    /* an epoch change met by a poster: FTRT_ERECOVER, nothing ordered */
    t_watch_announce(&f.w, 1);
    for (int i = 2; i >= 0; i--) assert_int_equal(dpost_from_thread(b, i, t[i], 0), FTRT_ERECOVER);
    assert_int_equal(order_from_thread(b, &consumer), FTRT_ERECOVER);
    assert_int_equal(nordered(&d), 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ERECOVER);
    assert_int_equal(ftrt_bucketer_reset(b), 0);
    f.w.epoch = 1;
    f.w.needs_recover = 0;
    /* a backend without an order op, and no bucketer */
    rec log = {0};
    ftrt_bucketer *r = three(&f, &log);
    assert_int_equal(ftrt__bucketer_order(r, &consumer, 1), FTRT_EINVAL);
    assert_int_equal(ftrt__bucketer_order(NULL, &consumer, 1), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_free(r), 0);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    pthread_mutex_destroy(&d.lock);
    t_host_destroy(&f.th);
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
        cmocka_unit_test(direct_posters_start_buckets),
        cmocka_unit_test(direct_errors),
        cmocka_unit_test(direct_order_any_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

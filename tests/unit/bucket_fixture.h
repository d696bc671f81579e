/*
 * bucket_fixture.h - the arrangement shared by the bucketer's thread tests (test_bucket_threads.c,
 * test_bucket_direct.c): the data of a step (NT tensors, their sizes and exact gradients), a
 * plane with fake ports, poster threads that write and post every tensor of a step (NPOST of
 * them, as autograd's device threads), a bucket backend that reduces (x -> 3x + 1, times the
 * scale) through the simulated device (kernels/loc_sim.c), and a logging backend with a
 * bucketer of three one-tensor buckets. Private to those tests; the functions are static
 * inline so that a program using only some of them is not warned about the others. Include
 * after <cmocka.h>.
 */
#ifndef FTRT_TEST_BUCKET_FIXTURE_H
#define FTRT_TEST_BUCKET_FIXTURE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "comm/bucketer.h"
#include "comm/plane.h"
#include "ftrt.h"
#include "helpers.h"
#include "kernels/location.h"

#define NT 41      /* tensors */
#define NPOST 4    /* poster threads */
#define STEPS 100

/* ---- the data of a step ---- */

static inline size_t count_of(int t) { return t == 7 ? 0 : (size_t)(1 + (t * 37) % 97); }

/* The local gradient of tensor t, element i, at `step`: exact in float, varied in sign. */
static inline float grad_of(int step, int t, size_t i)
{
    return (float)((int)((step * 131 + t * 17 + (int)i * 7) % 201) - 100) * 0.0625f;
}

/* The arrangement: a plane with fake ports (helpers.h) of `size` trainers. */
typedef struct fx {
    ftrt__plane p;
    ftrt__watch w;
    t_host th;
} fx;

static inline void fx_init(fx *f, int size)
{
    memset(f, 0, sizeof *f);
    t_watch_init(&f->w);
    ftrt__plane_init(&f->p, &f->w, t_host_init(&f->th), 1, 50);
    f->p.size = size;
}

static inline void cfg_small(ftrt_bucket_config *c)
{
    ftrt_bucket_config_init(c, sizeof *c);
    c->first_bucket_bytes = 256;
    c->bucket_bytes = 1024;
    c->piece_bytes = 200; /* pieces that split tensors */
}

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
static inline void post_step(posters *ps, int k, int step)
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

static inline void *poster_main(void *arg)
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

static inline void posters_start(posters *ps, ftrt_bucketer *b, float **dst, int device)
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

static inline void posters_stop(posters *ps)
{
    atomic_store(&ps->step, -1);
    pthread_barrier_wait(&ps->start);
    for (int k = 0; k < NPOST; k++) pthread_join(ps->thr[k], NULL);
    pthread_barrier_destroy(&ps->start);
}

/* ---- a bucket backend on the simulated device ---- */

typedef struct sim_req {
    struct ftrt_request base;
    int result;
} sim_req;

static inline int sr_test(struct ftrt_request *r)
{
    return ((sim_req *)r)->result ? ((sim_req *)r)->result : 1;
}
static inline int sr_wait(struct ftrt_request *r) { return ((sim_req *)r)->result; }
static inline int sr_free(struct ftrt_request *r)
{
    free(r);
    return 0;
}
static const ftrt__req_ops sr_ops = {sr_test, sr_wait, sr_free};

/* The device bucket backend: each segment is a device range; it is read through the device
 * interface, reduced (3x + 1, times scale) and written back, on the submitting thread. */
static inline int sim_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs,
                             int n, size_t count, double scale, int in_place,
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

/* ---- a logging backend, and three one-tensor buckets ---- */

/* A fake backend that records its submissions (owner thread only). */
typedef struct rec {
    int nsub;
} rec;

static inline int rec_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs,
                             int n, size_t count, double scale, int in_place,
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

/* One tensor per bucket: 3 tensors of 4 floats, whole buckets, over backend be (arg). */
static inline ftrt_bucketer *three_on(fx *f, const ftrt__bucket_backend *be, void *arg)
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
static inline ftrt_bucketer *three(fx *f, rec *log) { return three_on(f, &rec_backend, log); }

#endif

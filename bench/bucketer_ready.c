/*
 * bucketer_ready.c - what the bucketer's calls cost the application thread, apart from
 * communication: a model of NT gradients (sizes of a small MLP's layers, repeated), marked ready
 * every step from the last to the first, then wait_all, over a backend that starts nothing
 * (each submit hands back a completed request from a pool), so the time is the bucketer's own
 * bookkeeping. Prints ns per gradient for:
 *   ready       ftrt_bucketer_ready() on the owning thread (the single-thread path);
 *   post+drain  ftrt_bucketer_ready_from_any_thread() on the owning thread itself, with one
 *               ftrt_bucketer_drain() per gradient (the hand-over's own cost, no contention);
 *   4 posters   four threads post every gradient while the owning thread drains (per gradient,
 *               the step's wall time over NT: contention included).
 * Built with -DREADY_ONLY it measures `ready` only, and links with the comm/bucketer.c of a
 * commit before the hand-over existed: bench/bucketer_ready.sh compares the single-thread path
 * before and after in the same run. Usage: bucketer_ready [steps]
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/bucketer.h"
#include "comm/plane.h"

#define NT 256
#define NPOST 4
#define POOL 4096

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- a backend that starts nothing: completed requests from a pool ---- */

typedef struct done_req {
    struct ftrt_request base;
    int used;
} done_req;

static done_req pool[POOL];
static int pool_next;

static int dr_test(struct ftrt_request *r) { (void)r; return 1; }
static int dr_wait(struct ftrt_request *r) { (void)r; return 0; }
static int dr_free(struct ftrt_request *r)
{
    ((done_req *)r)->used = 0;
    return 0;
}
static const ftrt__req_ops dr_ops = {dr_test, dr_wait, dr_free};

static int none_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                       size_t count, double scale, int in_place,
                       struct ftrt_request **req)
{
    (void)in_place;
    (void)arg, (void)bucket, (void)tensors, (void)segs, (void)n, (void)count, (void)scale;
    done_req *r = &pool[pool_next++ % POOL];
    r->base.ops = &dr_ops;
    r->used = 1;
    *req = &r->base;
    return 0;
}
static const ftrt__bucket_backend none_backend = {none_submit, dr_wait, NULL, 0, NULL};

static float *grads[NT];
static size_t counts[NT];

static ftrt_bucketer *make(ftrt__plane *p)
{
    ftrt_bucket_config c;
    ftrt_bucket_config_init(&c, sizeof c);
    c.first_bucket_bytes = 4096; /* many buckets and pieces, so submits are part of the cost */
    c.bucket_bytes = 16384;
    c.piece_bytes = 8192;
    ftrt_bucketer *b;
    if (ftrt__bucketer_create_be(p, counts, NT, FTRT_FLOAT32, &c, &none_backend, NULL, &b)) {
        fprintf(stderr, "bucketer_ready: cannot create the bucketer\n");
        exit(1);
    }
    return b;
}

static double bench_ready(ftrt_bucketer *b, long steps)
{
    double t0 = now();
    for (long s = 0; s < steps; s++) {
        for (int t = NT - 1; t >= 0; t--) ftrt_bucketer_ready(b, t, grads[t]);
        if (ftrt_bucketer_wait_all(b)) exit(1);
    }
    return (now() - t0) / ((double)steps * NT) * 1e9;
}

#ifndef READY_ONLY
static double bench_post_drain(ftrt_bucketer *b, long steps)
{
    double t0 = now();
    for (long s = 0; s < steps; s++) {
        for (int t = NT - 1; t >= 0; t--) {
            ftrt_bucketer_ready_from_any_thread(b, t, grads[t]);
            ftrt_bucketer_drain(b);
        }
        if (ftrt_bucketer_wait_all(b)) exit(1);
    }
    return (now() - t0) / ((double)steps * NT) * 1e9;
}

typedef struct posters {
    ftrt_bucketer *b;
    pthread_barrier_t go;
    atomic_int stop, done;
} posters;

static posters ps;

static void *poster(void *arg)
{
    int k = (int)(long)arg;
    for (;;) {
        pthread_barrier_wait(&ps.go);
        if (atomic_load(&ps.stop)) return NULL;
        for (int t = NT - 1 - k; t >= 0; t -= NPOST)
            ftrt_bucketer_ready_from_any_thread(ps.b, t, grads[t]);
        atomic_fetch_add_explicit(&ps.done, 1, memory_order_release);
    }
}

static double bench_posters(ftrt_bucketer *b, long steps)
{
    pthread_t th[NPOST];
    ps.b = b;
    pthread_barrier_init(&ps.go, NULL, NPOST + 1);
    for (long k = 0; k < NPOST; k++) pthread_create(&th[k], NULL, poster, (void *)k);
    double t0 = now();
    for (long s = 0; s < steps; s++) {
        atomic_store(&ps.done, 0);
        pthread_barrier_wait(&ps.go);
        while (atomic_load_explicit(&ps.done, memory_order_acquire) < NPOST)
            if (ftrt_bucketer_drain(b) == 0) sched_yield();
        if (ftrt_bucketer_wait_all(b)) exit(1);
    }
    double dt = now() - t0;
    atomic_store(&ps.stop, 1);
    pthread_barrier_wait(&ps.go);
    for (int k = 0; k < NPOST; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&ps.go);
    return dt / ((double)steps * NT) * 1e9;
}
#endif

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 20000;
    static ftrt__watch w;
    static ftrt__plane p;
    ftrt__plane_init(&p, &w, (ftrt__host){NULL, NULL}, 0, 50);
    p.size = 4;
    static const size_t layer[4] = {784 * 64, 64, 64 * 10, 10}; /* weight, bias, ... */
    for (int t = 0; t < NT; t++) {
        counts[t] = layer[t % 4] / 16 + 1;
        grads[t] = calloc(counts[t], sizeof(float));
    }
    ftrt_bucketer *b = make(&p);
    bench_ready(b, steps / 10); /* warm up */
    printf("ready: %.1f ns per gradient (%d gradients, %d pieces, %ld steps)\n",
           bench_ready(b, steps), NT, ftrt_bucketer_pieces(b), steps);
#ifndef READY_ONLY
    printf("post+drain: %.1f ns per gradient\n", bench_post_drain(b, steps));
    printf("4 posters: %.1f ns per gradient\n", bench_posters(b, steps / 4));
#endif
    ftrt_bucketer_free(b);
    return 0;
}

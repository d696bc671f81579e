/*
 * GPU unit test: the NCCL plane on one rank (MPI_COMM_SELF, no mpirun needed). A communicator
 * is created (nonblocking init, unique id sent over the MPI communicator), used (an allreduce
 * and a bucketed step, ordered after a producer stream and before a consumer stream), revoked
 * on an epoch change (the request in flight fails with FTRT_ERECOVER, the plane refuses work
 * until the recovery), and recreated for the new epoch (used again, results correct). And the
 * hand-over from other threads (ftrt_gpu_bucketer_ready_from_any_thread, issue 21): 4 poster
 * threads, as autograd's device threads, write their gradients on producer streams of their
 * own and post them while the owner is blocked; once the epoch's communicator exists every
 * bucket starts on the posters before the owner makes a bucketer call, the results are bit for
 * bit those of the single-thread path (ftrt_gpu_bucketer_ready on the owner), the pack waits
 * for each producer (the tensors are NaN until the producer's copy lands), the posters' current
 * device is given back (the plane on device 1 where there are 2 GPUs), and an epoch change met
 * on a poster reaches the owner at wait_all. Another thread (the end-of-backward callback on
 * autograd's device thread) orders a consumer stream with
 * ftrt_gpu_bucketer_order_from_any_thread: FTRT_ESTATE while the buckets wait for the owner
 * (no communicator yet), else 0, and a copy queued on the consumer before the owner's wait_all
 * reads the reduced data; its current device is given back. The 16-bit dtypes (issue 21):
 * bfloat16 and fp16 allreduces and a bfloat16 bucketer with the mean on one rank give the data
 * back bit for bit (ncclBfloat16 / ncclFloat16 accepted, sizes of 2 bytes), and an unknown
 * dtype is refused with FTRT_EINVAL. The agent thread's interrupt (nccl_plane.c "Interrupts"):
 * an epoch change fired from another thread aborts the communicator with a collective in
 * flight, the request fails with FTRT_ERECOVER, recovery builds the next one; a late call
 * leaves a rebuilt communicator alone. Requests and their events are pooled: sequential
 * allreduces create one `done` event in all (ftrt__gpu_events_created). In-place buckets
 * (ftrt_bucket_config.in_place): views of one buffer reduced with nothing packed, and a scaled
 * in-place collective bit-identical to the copy path. The broadcast (ftrt_gpu_broadcast_start)
 * gives the root's bytes back, NaN payloads included. Exits 77 when no CUDA
 * device is usable.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ftrt_gpu.h"
#include "comm/bucketer.h"
#include "comm/nccl_plane.h"
#include "comm/plane.h"
#include "helpers.h"
#include "kernels/kernels_gpu.h"

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

/* The plane of one trainer, as the runtime hands it over: a watch, a fake host, an MPI
 * communicator of one rank (COMM_SELF). */
typedef struct one_rank {
    ftrt__plane plane;
    ftrt__watch watch;
    t_host th;
} one_rank;

static one_rank *one_rank_ctx(void)
{
    one_rank *ctx = calloc(1, sizeof *ctx);
    t_watch_init(&ctx->watch);
    ftrt__plane_init(&ctx->plane, &ctx->watch, t_host_init(&ctx->th), 1, 50);
    MPI_Comm c;
    assert_int_equal(MPI_Comm_dup(MPI_COMM_SELF, &c), MPI_SUCCESS);
    ftrt__plane_set(&ctx->plane, c);
    return ctx;
}

/* Allreduce of n floats (i * 0.5) on one rank: the data comes back unchanged. */
static void allreduce_once(ftrt_gpu *g, float *d, size_t n, cudaStream_t producer,
                           cudaStream_t consumer)
{
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)i * 0.5f;
    CK(cudaMemcpyAsync(d, h, n * sizeof *h, cudaMemcpyHostToDevice, producer));
    ftrt_request *r;
    assert_int_equal(ftrt_gpu_allreduce_start(g, d, n, FTRT_FLOAT32, FTRT_SUM, producer, &r), 0);
    assert_int_equal(ftrt_gpu_request_order(r, consumer), 0);
    assert_int_equal(ftrt_request_wait(r), 0);
    assert_int_equal(ftrt_request_test(r), 1);
    assert_int_equal(ftrt_request_free(r), 0);
    CK(cudaMemcpyAsync(back, d, n * sizeof *h, cudaMemcpyDeviceToHost, consumer));
    CK(cudaStreamSynchronize(consumer));
    assert_memory_equal(back, h, n * sizeof *h);
    free(h);
    free(back);
}

static void create_use_revoke_recreate(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, 0, &g), 0);
    assert_non_null(ftrt_gpu_stream(g));
    cudaStream_t producer, consumer;
    CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
    size_t n = (16u << 20) / 4;
    float *d;
    CK(cudaMalloc((void **)&d, n * sizeof *d));

    /* created and used */
    allreduce_once(g, d, n, producer, consumer);

    /* a bucketed step: 5 tensors, mean over 1 rank = the data */
    size_t counts[5] = {1000, 1, 250000, 77, 4096};
    float *t[5];
    float *h = malloc(250000 * sizeof *h);
    for (size_t i = 0; i < 250000; i++) h[i] = (float)i;
    for (int i = 0; i < 5; i++) {
        CK(cudaMalloc((void **)&t[i], counts[i] * sizeof(float)));
        CK(cudaMemcpy(t[i], h, counts[i] * sizeof(float), cudaMemcpyHostToDevice));
    }
    ftrt_bucket_config bc;
    ftrt_bucket_config_init(&bc, sizeof bc);
    bc.first_bucket_bytes = 4096;
    bc.bucket_bytes = 65536;
    ftrt_bucketer *b;
    assert_int_equal(ftrt_gpu_bucketer_create(g, counts, 5, FTRT_FLOAT32, &bc, &b), 0);
    assert_true(ftrt_bucketer_buckets(b) >= 2);
    for (int i = 4; i >= 0; i--) assert_int_equal(ftrt_gpu_bucketer_ready(b, i, t[i], producer), 0);
    assert_int_equal(ftrt_gpu_bucketer_order(b, consumer), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    float *back = malloc(250000 * sizeof *back);
    for (int i = 0; i < 5; i++) {
        CK(cudaMemcpy(back, t[i], counts[i] * sizeof(float), cudaMemcpyDeviceToHost));
        assert_memory_equal(back, h, counts[i] * sizeof(float));
    }
    assert_int_equal(ftrt_gpu_free(g), FTRT_ESTATE); /* the bucketer is alive */

    /* an epoch change with a collective in flight: revoked, the request fails */
    ftrt_request *r;
    assert_int_equal(ftrt_gpu_allreduce_start(g, d, n, FTRT_FLOAT32, FTRT_SUM, producer, &r), 0);
    t_watch_announce(&ctx->watch, 1);
    int rc = ftrt_request_wait(r);
    assert_true(rc == FTRT_ERECOVER || rc == 0); /* it may have finished before the change */
    assert_int_equal(ftrt_request_free(r), 0);
    assert_int_equal(ftrt_gpu_allreduce_start(g, d, n, FTRT_FLOAT32, FTRT_SUM, producer, &r),
                     FTRT_ERECOVER);
    /* the recovery: the plane's MPI communicator is replaced (ftrt__apply_plan does this) */
    assert_int_equal(ftrt__plane_abandon(&ctx->plane), 0);
    MPI_Comm c;
    assert_int_equal(MPI_Comm_dup(MPI_COMM_SELF, &c), MPI_SUCCESS);
    ftrt__plane_set(&ctx->plane, c);
    ctx->watch.epoch = 1;
    ctx->watch.needs_recover = 0;

    /* recreated: a fresh communicator for epoch 1 */
    allreduce_once(g, d, n, producer, consumer);
    for (int i = 4; i >= 0; i--) assert_int_equal(ftrt_gpu_bucketer_ready(b, i, t[i], producer), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);

    assert_int_equal(ftrt_bucketer_free(b), 0);
    assert_int_equal(ftrt_gpu_free(g), 0);
    for (int i = 0; i < 5; i++) cudaFree(t[i]);
    cudaFree(d);
    free(h);
    free(back);
    cudaStreamDestroy(producer);
    cudaStreamDestroy(consumer);
}

/* Requests and their `done` events are pooled (issue 21): 20 sequential allreduces, each freed
 * before the next, create one event in all; 4 in flight at once create at most 4, and 20 more
 * sequential ones then create none; a request abandoned in flight by an epoch change is freed
 * (its event pooled if it fired, else destroyed) and the plane works after the recovery, with
 * results checked, from the pool. */
static void requests_pooled(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, 0, &g), 0);
    cudaStream_t producer, consumer;
    CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
    size_t n = 1u << 16;
    float *d;
    CK(cudaMalloc((void **)&d, 4 * n * sizeof *d));
    assert_int_equal(ftrt__gpu_events_created(g), 0);
    for (int i = 0; i < 20; i++) allreduce_once(g, d, n, producer, consumer);
    assert_int_equal(ftrt__gpu_events_created(g), 1);

    ftrt_request *r[4];
    for (int k = 0; k < 4; k++)
        assert_int_equal(ftrt_gpu_allreduce_start(g, d + k * n, n, FTRT_FLOAT32, FTRT_SUM,
                                                  producer, &r[k]), 0);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(ftrt_request_wait(r[k]), 0);
        assert_int_equal(ftrt_request_free(r[k]), 0);
    }
    long four = ftrt__gpu_events_created(g);
    assert_int_equal(four, 4); /* the first from the pool, 3 new */
    for (int i = 0; i < 20; i++) allreduce_once(g, d, n, producer, consumer);
    assert_int_equal(ftrt__gpu_events_created(g), four);

    /* abandoned in flight by an epoch change, then freed; the recovery's communicator works */
    ftrt_request *a;
    assert_int_equal(ftrt_gpu_allreduce_start(g, d, 4 * n, FTRT_FLOAT32, FTRT_SUM, producer, &a),
                     0);
    t_watch_announce(&ctx->watch, 1);
    int rc = ftrt_request_wait(a);
    assert_true(rc == FTRT_ERECOVER || rc == 0);
    assert_int_equal(ftrt_request_free(a), 0);
    assert_int_equal(ftrt__plane_abandon(&ctx->plane), 0);
    MPI_Comm c;
    assert_int_equal(MPI_Comm_dup(MPI_COMM_SELF, &c), MPI_SUCCESS);
    ftrt__plane_set(&ctx->plane, c);
    ctx->watch.epoch = 1;
    ctx->watch.needs_recover = 0;
    for (int i = 0; i < 5; i++) allreduce_once(g, d, n, producer, consumer);
    assert_int_equal(ftrt__gpu_events_created(g), four); /* the pool still had 3 */

    assert_int_equal(ftrt_gpu_free(g), 0);
    cudaFree(d);
    cudaStreamDestroy(producer);
    cudaStreamDestroy(consumer);
}

/* ---- the agent thread's interrupt (nccl_plane.c "Interrupts") ---- */

static void *fire_elsewhere(void *w)
{
    ftrt__watch_fire(w);
    return NULL;
}

/* Calls the watch's listeners from another thread, as the agent thread does. */
static void fire_from_thread(ftrt__watch *w)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fire_elsewhere, w), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* The recovery's part of the plane: a new MPI communicator, the new epoch (ftrt__apply_plan). */
static void recover_to(one_rank *ctx, int epoch)
{
    assert_int_equal(ftrt__plane_abandon(&ctx->plane), 0); /* (after the agent's abort: none) */
    MPI_Comm c;
    assert_int_equal(MPI_Comm_dup(MPI_COMM_SELF, &c), MPI_SUCCESS);
    ftrt__plane_set(&ctx->plane, c);
    ctx->watch.epoch = epoch;
    ctx->watch.needs_recover = 0;
}

/* An epoch change fired from another thread (as the agent's) has the plane's interrupt thread
 * abort the communicator: the stream's work ends, the request in flight fails with
 * FTRT_ERECOVER (even if its allreduce had finished: it was live), recovery owed; the
 * application's abandon then retires nothing twice and the next epoch's communicator works. A
 * late call about an epoch whose communicator was already rebuilt leaves that communicator
 * alone. */
static void interrupt_from_agent(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, 0, &g), 0);
    cudaStream_t producer, consumer;
    CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
    size_t n = (4u << 20) / 4;
    float *d;
    CK(cudaMalloc((void **)&d, n * sizeof *d));
    allreduce_once(g, d, n, producer, consumer); /* epoch 0's communicator */
    ftrt_request *r;
    assert_int_equal(ftrt_gpu_allreduce_start(g, d, n, FTRT_FLOAT32, FTRT_SUM, producer, &r), 0);
    t_watch_announce(&ctx->watch, 1);
    fire_from_thread(&ctx->watch);
    int aborts = -1;
    assert_int_equal(ftrt__gpu_interrupt_wait(g, 1, 5000, &aborts), 1);
    assert_int_equal(aborts, 1); /* by the plane's interrupt thread, before any ftrt call */
    CK(cudaStreamSynchronize(ftrt_gpu_stream(g))); /* (a host sync outside ftrt returns) */
    assert_int_equal(ftrt_request_test(r), FTRT_ERECOVER);
    assert_int_equal(ctx->watch.needs_recover, 1);
    assert_int_equal(ftrt_request_free(r), 0);
    recover_to(ctx, 1);
    allreduce_once(g, d, n, producer, consumer); /* epoch 1's communicator */

    t_watch_announce(&ctx->watch, 2); /* recovered before the agent's call comes */
    recover_to(ctx, 2);
    allreduce_once(g, d, n, producer, consumer); /* epoch 2's communicator */
    fire_from_thread(&ctx->watch);                /* late: about epoch 2 */
    assert_int_equal(ftrt__gpu_interrupt_wait(g, 2, 5000, &aborts), 2);
    assert_int_equal(aborts, 1);                 /* epoch 2's communicator left alone */
    allreduce_once(g, d, n, producer, consumer); /* and it works */

    assert_int_equal(ftrt_gpu_free(g), 0);
    cudaFree(d);
    cudaStreamDestroy(producer);
    cudaStreamDestroy(consumer);
}

/* ---- 16-bit dtypes ---- */

/* Starts one ftrt__gpu_submit of the n segs (the caller's lock taken, as the bucketer does),
 * with scale and in_place, and waits for it. */
static void submit_wait(ftrt_gpu *g, const ftrt__seg *segs, int n, size_t count, double scale,
                        int in_place)
{
    ftrt_request *r = NULL;
    pthread_mutex_lock(&g->lock);
    int rc = ftrt__gpu_submit(g, segs, n, count, FTRT_FLOAT32, FTRT_SUM, scale, in_place, &r);
    pthread_mutex_unlock(&g->lock);
    assert_int_equal(rc, 0);
    assert_int_equal(ftrt_request_wait(r), 0);
    assert_int_equal(ftrt_request_free(r), 0);
}

/* In place (ftrt_bucket_config.in_place): gradients as views of one device buffer at the
 * offsets ftrt_bucketer_layout() gives are reduced with nothing packed, the bytes past the
 * bucket untouched; ftrt__gpu_submit in place with a scale (the guarded unpack kernel scaling
 * the bucket where it lies) gives the copy path's bits. */
static void in_place_bucket_views(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, 0, &g), 0);
    enum { N = 300007 };
    size_t counts[3] = {1000, 250000, 49007};
    float *h = malloc((N + 1) * 4), *back = malloc((N + 1) * 4), *ref = malloc((N + 1) * 4);
    for (size_t i = 0; i < N; i++) h[i] = (float)i * 0.37f + 1e-3f;
    h[N] = -1.5f; /* past the bucket: must stay */
    float *d, *e;
    CK(cudaMalloc((void **)&d, (N + 1) * 4));
    CK(cudaMalloc((void **)&e, (N + 1) * 4));
    CK(cudaMemcpy(d, h, (N + 1) * 4, cudaMemcpyHostToDevice));
    ftrt_bucket_config bc;
    ftrt_bucket_config_init(&bc, sizeof bc);
    bc.first_bucket_bytes = (size_t)1 << 30; /* one bucket */
    bc.in_place = 1;
    ftrt_bucketer *b;
    assert_int_equal(ftrt_gpu_bucketer_create(g, counts, 3, FTRT_FLOAT32, &bc, &b), 0);
    size_t off[3];
    for (int t = 0; t < 3; t++) assert_int_equal(ftrt_bucketer_layout(b, t, &off[t]), 0);
    for (int step = 0; step < 2; step++) {
        for (int t = 2; t >= 0; t--)
            assert_int_equal(ftrt_gpu_bucketer_ready(b, t, (char *)d + off[t], 0), 0);
        assert_int_equal(ftrt_gpu_bucketer_order(b, 0), 0);
        assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    }
    assert_int_equal(ftrt_bucketer_packed_bytes(b), 0);
    CK(cudaMemcpy(back, d, (N + 1) * 4, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, (N + 1) * 4); /* the sum over one rank, the sentinel intact */
    assert_int_equal(ftrt_bucketer_free(b), 0);
    CK(cudaMemcpy(e, h, (N + 1) * 4, cudaMemcpyHostToDevice));
    ftrt__seg sd[3] = {{d, 4000}, {d + 1000, 1000000}, {d + 251000, 196028}};
    ftrt__seg se[3] = {{e, 4000}, {e + 1000, 1000000}, {e + 251000, 196028}};
    submit_wait(g, sd, 3, N, 1.0 / 3.0, 1);
    submit_wait(g, se, 3, N, 1.0 / 3.0, 0);
    CK(cudaMemcpy(back, d, (N + 1) * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ref, e, (N + 1) * 4, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, ref, (N + 1) * 4);
    assert_true(back[7] == h[7] * (float)(1.0 / 3.0) && back[N] == -1.5f);
    assert_int_equal(ftrt_gpu_free(g), 0);
    cudaFree(d);
    cudaFree(e);
    free(h);
    free(back);
    free(ref);
}

static void h16_one_rank(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, 0, &g), 0);
    enum { N = 100003 };
    uint16_t *h = malloc(N * 2), *back = malloc(N * 2 + 2);
    for (size_t i = 0; i < N; i++) h[i] = (uint16_t)(0x3C00 + i % 0x3000); /* finite in both */
    uint16_t *d;
    CK(cudaMalloc((void **)&d, N * 2 + 2));
    const ftrt_dtype dts[2] = {FTRT_BFLOAT16, FTRT_FLOAT16};
    for (int k = 0; k < 2; k++) {
        CK(cudaMemcpy(d, h, N * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(d + N, 0x5A, 2)); /* past the end: must stay */
        ftrt_request *r;
        assert_int_equal(ftrt_gpu_allreduce_start(g, d, N, dts[k], FTRT_SUM, 0, &r), 0);
        assert_int_equal(ftrt_request_wait(r), 0);
        assert_int_equal(ftrt_request_free(r), 0);
        CK(cudaMemcpy(back, d, N * 2 + 2, cudaMemcpyDeviceToHost));
        assert_memory_equal(back, h, N * 2);
        assert_int_equal(back[N] & 0xFFFF, 0x5A5A);
    }
    ftrt_request *r = NULL;
    assert_int_equal(ftrt_gpu_allreduce_start(g, d, N, (ftrt_dtype)5, FTRT_SUM, 0, &r),
                     FTRT_EINVAL);
    assert_null(r);
    /* a bfloat16 bucketer with the mean (x 1.0 on one rank) */
    size_t counts[3] = {7, N - 100, 93};
    ftrt_bucketer *b;
    assert_int_equal(ftrt_gpu_bucketer_create(g, counts, 3, (ftrt_dtype)5, NULL, &b), FTRT_EINVAL);
    assert_int_equal(ftrt_gpu_bucketer_create(g, counts, 3, FTRT_BFLOAT16, NULL, &b), 0);
    CK(cudaMemcpy(d, h, N * 2, cudaMemcpyHostToDevice));
    assert_int_equal(ftrt_gpu_bucketer_ready(b, 2, d + 7 + N - 100, 0), 0);
    assert_int_equal(ftrt_gpu_bucketer_ready(b, 1, d + 7, 0), 0);
    assert_int_equal(ftrt_gpu_bucketer_ready(b, 0, d, 0), 0);
    assert_int_equal(ftrt_gpu_bucketer_order(b, 0), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    CK(cudaMemcpy(back, d, N * 2, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, N * 2);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    assert_int_equal(ftrt_gpu_free(g), 0);
    cudaFree(d);
    free(h);
    free(back);
}

/* The broadcast (ftrt_gpu_broadcast_start) on one rank: the root's data comes back bit for bit
 * (a bfloat16 NaN payload included, nothing written past the end), ordered after its
 * producer; a root outside [0, 1) and an unknown dtype are refused with nothing started. */
static void broadcast_one_rank(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, 0, &g), 0);
    enum { N = 70001 };
    uint16_t *h = malloc(N * 2), *back = malloc(N * 2 + 2);
    for (size_t i = 0; i < N; i++) h[i] = (uint16_t)(0x3C00 + i % 0x3000);
    h[5] = 0x7F81; /* a signalling NaN with payload 1: a conversion would change it */
    uint16_t *d;
    CK(cudaMalloc((void **)&d, N * 2 + 2));
    cudaStream_t producer;
    CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CK(cudaMemsetAsync(d + N, 0x5A, 2, producer));
    CK(cudaMemcpyAsync(d, h, N * 2, cudaMemcpyHostToDevice, producer));
    ftrt_request *r = NULL;
    assert_int_equal(ftrt_gpu_broadcast_start(g, d, N, FTRT_BFLOAT16, 0, producer, &r), 0);
    assert_int_equal(ftrt_request_wait(r), 0);
    assert_int_equal(ftrt_request_free(r), 0);
    CK(cudaMemcpy(back, d, N * 2 + 2, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, N * 2);
    assert_int_equal(back[N] & 0xFFFF, 0x5A5A);
    r = NULL;
    assert_int_equal(ftrt_gpu_broadcast_start(g, d, N, FTRT_BFLOAT16, 1, producer, &r),
                     FTRT_EINVAL);
    assert_null(r);
    assert_int_equal(ftrt_gpu_broadcast_start(g, d, N, (ftrt_dtype)5, 0, producer, &r),
                     FTRT_EINVAL);
    assert_null(r);
    CK(cudaStreamDestroy(producer));
    assert_int_equal(ftrt_gpu_free(g), 0);
    cudaFree(d);
    free(h);
    free(back);
}

/* Reduce-scatter and all-gather (ftrt_gpu_reduce_scatter_start, ftrt_gpu_allgather_start) on
 * one rank: each gives back the send buffer's values (float32 sum over one member; int64 bytes
 * gathered), nothing written past recv's end; the all-gather in place (send = recv's block 0);
 * a misaligned overlap, NULL buffers and an unknown dtype refused with nothing started. */
static void rsag_one_rank(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, 0, &g), 0);
    enum { N = 50001 };
    float *h = malloc(N * 4), *back = malloc(N * 4 + 4);
    for (size_t i = 0; i < N; i++) h[i] = (float)i * 0.25f - 7.0f;
    float *s, *d;
    CK(cudaMalloc((void **)&s, N * 4));
    CK(cudaMalloc((void **)&d, N * 4 + 4));
    cudaStream_t producer;
    CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CK(cudaMemsetAsync(d, 0x5A, N * 4 + 4, producer));
    CK(cudaMemcpyAsync(s, h, N * 4, cudaMemcpyHostToDevice, producer));
    ftrt_request *r = NULL;
    assert_int_equal(ftrt_gpu_reduce_scatter_start(g, s, d, N, FTRT_FLOAT32, FTRT_SUM, producer,
                                                   &r), 0);
    assert_int_equal(ftrt_request_wait(r), 0);
    assert_int_equal(ftrt_request_free(r), 0);
    CK(cudaMemcpy(back, d, N * 4 + 4, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, N * 4);
    uint32_t tail;
    memcpy(&tail, back + N, 4);
    assert_int_equal(tail, 0x5A5A5A5Au);
    CK(cudaMemsetAsync(d, 0, N * 4, producer));
    assert_int_equal(ftrt_gpu_allgather_start(g, s, d, N / 2, FTRT_INT64, producer, &r), 0);
    assert_int_equal(ftrt_request_wait(r), 0);
    assert_int_equal(ftrt_request_free(r), 0);
    CK(cudaMemcpy(back, d, N * 4 + 4, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, (N / 2) * 8);
    assert_int_equal(ftrt_gpu_allgather_start(g, d, d, N, FTRT_FLOAT32, producer, &r), 0);
    assert_int_equal(ftrt_request_wait(r), 0); /* in place: recv's block 0 is send */
    assert_int_equal(ftrt_request_free(r), 0);
    r = NULL;
    assert_int_equal(ftrt_gpu_allgather_start(g, d + 1, d, 4, FTRT_FLOAT32, producer, &r),
                     FTRT_EINVAL);
    assert_null(r);
    assert_int_equal(ftrt_gpu_reduce_scatter_start(g, NULL, d, 4, FTRT_FLOAT32, FTRT_SUM,
                                                   producer, &r), FTRT_EINVAL);
    assert_int_equal(ftrt_gpu_allgather_start(g, s, d, 4, (ftrt_dtype)5, producer, &r),
                     FTRT_EINVAL);
    assert_null(r);
    CK(cudaStreamDestroy(producer));
    assert_int_equal(ftrt_gpu_free(g), 0);
    cudaFree(s);
    cudaFree(d);
    free(h);
    free(back);
}

/* ---- the hand-over from poster threads ---- */

#define HT 24   /* tensors */
#define HPOST 4 /* poster threads */

static size_t h_count(int t) { return t == 5 ? 0 : (size_t)(1 + (t * 7919) % 60000); }

/* Tensor t's gradient at `step`, element i: exact in float. */
static float h_val(int step, int t, size_t i)
{
    return (float)((int)((step * 131 + t * 17 + (int)(i % 4099) * 7) % 201) - 100) * 0.0625f;
}

typedef struct hand {
    ftrt_bucketer *b;
    float **d;             /* device tensors */
    float **h;             /* pinned host copies of this step's gradients */
    cudaStream_t prod[HPOST];
    int plane_dev, other_dev;
    int step;
    atomic_int bad;        /* CUDA calls or posts that failed, devices not given back */
    atomic_int recover;    /* posts that returned FTRT_ERECOVER */
} hand;

typedef struct hand_arg {
    hand *hd;
    int k;
} hand_arg;

/* Poster k: tensors HT-1-k, HT-1-k-HPOST, ... (the last first, as autograd): NaN, then the
 * gradient copied on its own producer stream (not waited for), then posted. */
static void *hand_poster(void *arg)
{
    hand_arg *a = arg;
    hand *hd = a->hd;
    cudaStream_t s = hd->prod[a->k];
    for (int t = HT - 1 - a->k; t >= 0; t -= HPOST) {
        size_t c = h_count(t);
        if (cudaSetDevice(hd->plane_dev) != cudaSuccess) atomic_fetch_add(&hd->bad, 1);
        if (c && (cudaMemsetAsync(hd->d[t], 0xff, c * sizeof(float), s) != cudaSuccess ||
                  cudaMemcpyAsync(hd->d[t], hd->h[t], c * sizeof(float), cudaMemcpyHostToDevice,
                                  s) != cudaSuccess))
            atomic_fetch_add(&hd->bad, 1);
        if (cudaSetDevice(hd->other_dev) != cudaSuccess) atomic_fetch_add(&hd->bad, 1);
        int rc = ftrt_gpu_bucketer_ready_from_any_thread(hd->b, t, c ? hd->d[t] : NULL, s);
        if (rc == FTRT_ERECOVER) atomic_fetch_add(&hd->recover, 1);
        else if (rc) atomic_fetch_add(&hd->bad, 1);
        int now = -1;
        if (cudaGetDevice(&now) != cudaSuccess || now != hd->other_dev) atomic_fetch_add(&hd->bad, 1);
    }
    return NULL;
}

/* Fills the host copies with step's gradients and runs the posters to the end (the owner is
 * "blocked in backward()": it only joins them). */
static void hand_post_step(hand *hd, int step)
{
    for (int t = 0; t < HT; t++)
        for (size_t i = 0; i < h_count(t); i++) hd->h[t][i] = h_val(step, t, i);
    pthread_t th[HPOST];
    hand_arg args[HPOST];
    for (int k = 0; k < HPOST; k++) {
        args[k] = (hand_arg){hd, k};
        assert_int_equal(pthread_create(&th[k], NULL, hand_poster, &args[k]), 0);
    }
    for (int k = 0; k < HPOST; k++) pthread_join(th[k], NULL);
}

/* The single-thread path over tensors r[]: the same data, ftrt_gpu_bucketer_ready on the owner. */
static void hand_reference_step(ftrt_bucketer *st, float **r, float **h, cudaStream_t s)
{
    for (int t = HT - 1; t >= 0; t--) {
        size_t c = h_count(t);
        if (c) CK(cudaMemcpyAsync(r[t], h[t], c * sizeof(float), cudaMemcpyHostToDevice, s));
        assert_int_equal(ftrt_gpu_bucketer_ready(st, t, c ? r[t] : NULL, s), 0);
    }
    assert_int_equal(ftrt_bucketer_wait_all(st), 0);
}

/* Device tensors x and r hold the same bytes, and those are h (the mean over one rank). */
static void hand_check(float **x, float **r, float **h)
{
    float *a = malloc(60000 * sizeof *a), *b = malloc(60000 * sizeof *b);
    for (int t = 0; t < HT; t++) {
        size_t c = h_count(t);
        if (!c) continue;
        CK(cudaMemcpy(a, x[t], c * sizeof(float), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b, r[t], c * sizeof(float), cudaMemcpyDeviceToHost));
        assert_memory_equal(a, b, c * sizeof(float));
        assert_memory_equal(a, h[t], c * sizeof(float));
    }
    free(a);
    free(b);
}

static int all_submitted(ftrt_bucketer *b)
{
    ftrt__bucketer_lock(b);
    int r = ftrt__bucketer_all_submitted(b);
    ftrt__bucketer_unlock(b);
    return r;
}

static void *connect_elsewhere(void *g) { return (void *)(intptr_t)ftrt_gpu_connect(g); }

/* The end-of-backward callback's call on autograd's device thread: another thread, whose own
 * current device is hd->other_dev (given back by the call), orders `consumer`. */
typedef struct order_arg {
    hand *hd;
    cudaStream_t consumer;
    int rc, dev_after;
} order_arg;

static void *order_elsewhere(void *arg)
{
    order_arg *o = arg;
    o->dev_after = -1;
    if (cudaSetDevice(o->hd->other_dev) != cudaSuccess) return NULL;
    o->rc = ftrt_gpu_bucketer_order_from_any_thread(o->hd->b, o->consumer);
    if (cudaGetDevice(&o->dev_after) != cudaSuccess) o->dev_after = -1;
    return NULL;
}

static int order_from_thread(hand *hd, cudaStream_t consumer)
{
    order_arg o = {hd, consumer, 1, -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, order_elsewhere, &o), 0);
    pthread_join(th, NULL);
    assert_int_equal(o.dev_after, hd->other_dev);
    return o.rc;
}

static void posters_match_single_thread(void **state)
{
    (void)state;
    one_rank *ctx = one_rank_ctx();
    int ndev = ftrt__kgpu_device_count();
    hand hd = {.plane_dev = ndev > 1 ? 1 : 0, .other_dev = 0};
    printf("plane on device %d, posters' own device %d (%d usable)\n", hd.plane_dev,
           hd.other_dev, ndev);
    ftrt_gpu *g;
    assert_int_equal(ftrt__gpu_create(&ctx->plane, hd.plane_dev, &g), 0);
    size_t counts[HT];
    float *x[HT], *r[HT], *h[HT];
    for (int t = 0; t < HT; t++) {
        counts[t] = h_count(t);
        CK(cudaMalloc((void **)&x[t], (counts[t] ? counts[t] : 1) * sizeof(float)));
        CK(cudaMalloc((void **)&r[t], (counts[t] ? counts[t] : 1) * sizeof(float)));
        CK(cudaMallocHost((void **)&h[t], (counts[t] ? counts[t] : 1) * sizeof(float)));
    }
    cudaStream_t own, consumer;
    CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
    for (int k = 0; k < HPOST; k++) CK(cudaStreamCreateWithFlags(&hd.prod[k], cudaStreamNonBlocking));
    ftrt_bucket_config bc;
    ftrt_bucket_config_init(&bc, sizeof bc);
    bc.first_bucket_bytes = 8192;
    bc.bucket_bytes = 96 << 10;
    ftrt_bucketer *mt, *st;
    assert_int_equal(ftrt_gpu_bucketer_create(g, counts, HT, FTRT_FLOAT32, &bc, &mt), 0);
    assert_int_equal(ftrt_gpu_bucketer_create(g, counts, HT, FTRT_FLOAT32, &bc, &st), 0);
    int nb = ftrt_bucketer_buckets(mt);
    printf("%d tensors in %d buckets, %d poster threads\n", HT, nb, HPOST);
    assert_true(nb >= 6);
    hd.b = mt;
    hd.d = x;
    hd.h = h;
    /* bad arguments; ftrt_gpu_connect belongs to the plane's thread */
    assert_int_equal(ftrt_gpu_bucketer_ready_from_any_thread(NULL, 0, x[0], own), FTRT_EINVAL);
    assert_int_equal(ftrt_gpu_bucketer_ready_from_any_thread(mt, HT, x[0], own), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_ready_from_any_thread(mt, 0, x[0]), FTRT_EINVAL);
    pthread_t th;
    void *crc;
    assert_int_equal(pthread_create(&th, NULL, connect_elsewhere, g), 0);
    pthread_join(th, &crc);
    assert_int_equal((int)(intptr_t)crc, FTRT_EINVAL);

    float *snap[HT]; /* the consumer stream's copy of x, queued before the owner's wait_all */
    for (int t = 0; t < HT; t++)
        CK(cudaMallocHost((void **)&snap[t], (counts[t] ? counts[t] : 1) * sizeof(float)));
    for (int step = 0; step < 6; step++) {
        hand_post_step(&hd, step);
        assert_int_equal(atomic_load(&hd.bad), 0);
        /* step 0: no communicator yet, the posters left every bucket to the owner; then the
         * owner's first wait_all built it and the posters start them all themselves */
        assert_int_equal(all_submitted(mt), step > 0);
        /* another thread orders the consumer: only once every bucket started (steps > 0) */
        int orc = order_from_thread(&hd, consumer);
        assert_int_equal(orc, step > 0 ? 0 : FTRT_ESTATE);
        if (orc == 0) {
            for (int t = 0; t < HT; t++)
                if (counts[t])
                    CK(cudaMemcpyAsync(snap[t], x[t], counts[t] * sizeof(float),
                                       cudaMemcpyDeviceToHost, consumer));
        } else {
            assert_int_equal(ftrt_gpu_bucketer_order(mt, consumer), 0);
        }
        assert_int_equal(ftrt_bucketer_wait_all(mt), 0);
        CK(cudaStreamSynchronize(consumer));
        for (int t = 0; orc == 0 && t < HT; t++) /* what the consumer read: the reduced data */
            if (counts[t]) assert_memory_equal(snap[t], h[t], counts[t] * sizeof(float));
        hand_reference_step(st, r, h, own);
        CK(cudaStreamSynchronize(own));
        hand_check(x, r, h);
    }

    /* an epoch change met by the posters' submits: FTRT_ERECOVER to them and to the owner */
    t_watch_announce(&ctx->watch, 1);
    hand_post_step(&hd, 6);
    assert_int_equal(atomic_load(&hd.bad), 0); /* every post marked: 0 or the step's error */
    assert_true(atomic_load(&hd.recover) >= 1);   /* at least the one whose bucket met it */
    assert_int_equal(ftrt_bucketer_wait_all(mt), FTRT_ERECOVER);
    assert_int_equal(ctx->watch.needs_recover, 1);
    assert_int_equal(ftrt_gpu_connect(g), FTRT_ERECOVER);
    assert_int_equal(ftrt__plane_abandon(&ctx->plane), 0); /* the recovery */
    MPI_Comm c;
    assert_int_equal(MPI_Comm_dup(MPI_COMM_SELF, &c), MPI_SUCCESS);
    ftrt__plane_set(&ctx->plane, c);
    ctx->watch.epoch = 1;
    ctx->watch.needs_recover = 0;
    assert_int_equal(ftrt_gpu_connect(g), 0); /* epoch 1's communicator, before the posts */
    hand_post_step(&hd, 7);
    assert_int_equal(atomic_load(&hd.bad), 0);
    assert_true(all_submitted(mt));
    assert_int_equal(ftrt_gpu_bucketer_order(mt, consumer), 0);
    assert_int_equal(ftrt_bucketer_wait_all(mt), 0);
    CK(cudaStreamSynchronize(consumer));
    hand_reference_step(st, r, h, own);
    CK(cudaStreamSynchronize(own));
    hand_check(x, r, h);

    assert_int_equal(ftrt_bucketer_free(mt), 0);
    assert_int_equal(ftrt_bucketer_free(st), 0);
    assert_int_equal(ftrt_gpu_free(g), 0);
    for (int t = 0; t < HT; t++) {
        cudaFree(x[t]);
        cudaFree(r[t]);
        cudaFreeHost(h[t]);
        cudaFreeHost(snap[t]);
    }
    for (int k = 0; k < HPOST; k++) cudaStreamDestroy(hd.prod[k]);
    cudaStreamDestroy(own);
    cudaStreamDestroy(consumer);
}

int main(int argc, char **argv)
{
    if (ftrt__kgpu_device_count() == 0) {
        printf("no usable CUDA device (no GPU or no driver): skipped\n");
        return 77;
    }
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const struct CMUnitTest tests[] = {cmocka_unit_test(create_use_revoke_recreate),
                                       cmocka_unit_test(requests_pooled),
                                       cmocka_unit_test(interrupt_from_agent),
                                       cmocka_unit_test(h16_one_rank),
                                       cmocka_unit_test(broadcast_one_rank),
                                       cmocka_unit_test(rsag_one_rank),
                                       cmocka_unit_test(in_place_bucket_views),
                                       cmocka_unit_test(posters_match_single_thread)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return rc;
}

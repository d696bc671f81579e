/*
 * GPU unit test: the NCCL plane on one rank (MPI_COMM_SELF, no mpirun needed). A communicator
 * is created (nonblocking init, unique id sent over the MPI communicator), used (an allreduce
 * and a bucketed step, ordered after a producer stream and before a consumer stream), revoked
 * on an epoch change (the request in flight fails with FTRT_ERECOVER, the plane refuses work
 * until the recovery), and recreated for the new epoch (used again, results correct). Exits 77
 * when no CUDA device is usable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ftrt_gpu.h"
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

int main(int argc, char **argv)
{
    if (ftrt__kgpu_device_count() == 0) {
        printf("no usable CUDA device (no GPU or no driver): skipped\n");
        return 77;
    }
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const struct CMUnitTest tests[] = {cmocka_unit_test(create_use_revoke_recreate)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return rc;
}

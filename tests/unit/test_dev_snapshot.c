/*
 * GPU unit tests: the GPU checkpoint path. A device region snapshotted into pinned staging on a
 * side stream holds exactly the bytes of a host copy and the CRC32C of ftrt__crc32c; it sees
 * the state at the point it was ordered after (a write queued on the compute stream after
 * ftrt__dev_snapshot_order does not leak into it); the checkpoint engine's device hook
 * (ckpt_device.c) snapshots and restores the same way; and on a thread the application never
 * set a device on (as the engine's snapshot and persist threads), every call of that hook runs
 * with the region's GPU current (device 1 where there are 2 GPUs: issue 19's multi-GPU hosts)
 * and gives the thread its own device back. Prints the copy bandwidth (information only).
 * Exits 77 when no CUDA device is usable.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "base/crc32c.h"
#include "checkpoint/ckpt_device.h"
#include "checkpoint/engine.h"
#include "ftrt.h"
#include "kernels/device_snapshot.h"
#include "kernels/kernels_gpu.h"
#include "kernels/location.h"

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        c[i] = (unsigned char)(seed >> 16);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void snapshot_matches_host_copy(void **state)
{
    (void)state;
    size_t sizes[4] = {0, 17, 4096, (8u << 20) + 17};
    cudaStream_t side, compute;
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        unsigned char *h = malloc(n + 1), *dst;
        fill(h, n + 1, (unsigned)k + 3);
        unsigned char *d;
        CK(cudaMalloc((void **)&d, n + 1));
        CK(cudaMemcpy(d, h, n + 1, cudaMemcpyHostToDevice));
        assert_int_equal(ftrt__dev_pinned_alloc((void **)&dst, n + 1), 0);
        ftrt__dev_snap s;
        assert_int_equal(ftrt__dev_snapshot_start(&s, dst, d, n, side, compute, 1), 0);
        /* The compute stream overwrites the region right after the snapshot point. */
        assert_int_equal(ftrt__dev_snapshot_order(&s, compute), 0);
        CK(cudaMemsetAsync(d, 0xEE, n + 1, compute));
        uint32_t crc = 1;
        assert_int_equal(ftrt__dev_snapshot_wait(&s, &crc), 0);
        assert_int_equal(ftrt__dev_snapshot_test(&s), 1);
        if (n) assert_memory_equal(dst, h, n);
        assert_int_equal(crc, ftrt__crc32c(0, h, n));
        ftrt__dev_snapshot_release(&s);
        CK(cudaStreamSynchronize(compute));
        ftrt__dev_pinned_free(dst);
        cudaFree(d);
        free(h);
    }
    assert_int_equal(ftrt__dev_snapshot_start(NULL, NULL, NULL, 0, side, NULL, 0), FTRT_EINVAL);
    cudaStreamDestroy(side);
    cudaStreamDestroy(compute);
}

static void engine_hook(void **state)
{
    (void)state;
    ftrt__ckpt_device_install();
    const ftrt__loc_ops *dev = ftrt__loc_device();
    assert_non_null(dev);
    size_t n = (64u << 20) + 5;
    unsigned char *h = malloc(n), *staging = malloc(n), *back = malloc(n);
    fill(h, n, 77);
    unsigned char *d;
    CK(cudaMalloc((void **)&d, n));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    assert_int_equal(dev->pin(staging, n), 0);
    uint32_t crc = 0;
    double t0 = now();
    assert_int_equal(dev->to_host(staging, d, n, &crc), 0);
    double t = now() - t0;
    printf("device snapshot of %.0f MiB with device CRC32C: %.2f ms (%.1f GB/s)\n",
           n / 1048576.0, t * 1e3, n / t / 1e9);
    assert_memory_equal(staging, h, n);
    assert_int_equal(crc, ftrt__crc32c(0, h, n));
    CK(cudaMemset(d, 0, n));
    assert_int_equal(dev->from_host(d, staging, n, crc), 0);
    uint32_t dcrc = 0;
    assert_int_equal(dev->crc(d, n, &dcrc), 0);
    assert_int_equal(dcrc, crc);
    CK(cudaMemset(d, 0, n));
    assert_int_equal(dev->from_host(d, staging, n, crc ^ 1u), FTRT_ECORRUPT);
    CK(cudaMemset(d, 0, n));
    assert_int_equal(dev->from_host(d, staging, n, crc), 0);
    CK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, n);
    dev->unpin(staging);
    cudaFree(d);
    free(h);
    free(staging);
    free(back);
}

/* What the backend's test hook saw, and what an engine-like thread got. */
typedef struct seen {
    pthread_mutex_t lock;
    int calls, wrong; /* calls observed; calls whose current device was not `want` */
    int want;
    int rc[4];        /* to_host, crc, from_host, d2d */
    uint32_t crc, dcrc;
    int after;        /* the thread's current device once the calls returned */
    unsigned char *d, *d2, *staging;
    size_t n;
} seen;

static void observe(int device, void *arg)
{
    seen *s = arg;
    int cur = -1;
    cudaGetDevice(&cur);
    pthread_mutex_lock(&s->lock);
    s->calls++;
    if (device != s->want || cur != s->want) s->wrong++;
    pthread_mutex_unlock(&s->lock);
}

/* An engine-like thread: device 0 current (the default), then the hook's calls on the region. */
static void *engine_like(void *arg)
{
    seen *s = arg;
    const ftrt__loc_ops *dev = ftrt__loc_device();
    s->rc[0] = cudaSetDevice(0) == cudaSuccess ? dev->to_host(s->staging, s->d, s->n, &s->crc) : -1;
    s->rc[1] = dev->crc(s->d, s->n, &s->dcrc);
    s->rc[2] = dev->from_host(s->d2, s->staging, s->n, s->crc);
    s->rc[3] = dev->d2d(s->d, s->d2, s->n);
    if (cudaGetDevice(&s->after) != cudaSuccess) s->after = -1;
    return NULL;
}

static void region_device_on_engine_threads(void **state)
{
    (void)state;
    ftrt__ckpt_device_install();
    int ndev = ftrt__kgpu_device_count();
    seen s = {.want = ndev > 1 ? 1 : 0, .n = (8u << 20) + 3, .after = -1};
    pthread_mutex_init(&s.lock, NULL);
    printf("region on device %d of %d; the engine-like thread starts on device 0\n", s.want,
           ndev);
    unsigned char *h = malloc(s.n), *back = malloc(s.n);
    fill(h, s.n, 19);
    s.staging = malloc(s.n);
    CK(cudaSetDevice(s.want));
    CK(cudaMalloc((void **)&s.d, s.n));
    CK(cudaMalloc((void **)&s.d2, s.n));
    CK(cudaMemcpy(s.d, h, s.n, cudaMemcpyHostToDevice));
    CK(cudaSetDevice(0));
    ftrt__ckpt_device_observe(observe, &s);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, engine_like, &s), 0);
    pthread_join(th, NULL);
    ftrt__ckpt_device_observe(NULL, NULL);
    for (int i = 0; i < 4; i++) assert_int_equal(s.rc[i], 0);
    assert_int_equal(s.calls, 4); /* from_host checks its CRC32C inside the same call */
    assert_int_equal(s.wrong, 0);
    assert_int_equal(s.after, 0); /* the thread's own device given back */
    assert_memory_equal(s.staging, h, s.n);
    assert_int_equal(s.crc, ftrt__crc32c(0, h, s.n));
    assert_int_equal(s.dcrc, s.crc);
    CK(cudaSetDevice(s.want));
    CK(cudaMemcpy(back, s.d, s.n, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, s.n);
    cudaFree(s.d);
    cudaFree(s.d2);
    CK(cudaSetDevice(0));
    free(h);
    free(back);
    free(s.staging);
    pthread_mutex_destroy(&s.lock);
}

int main(void)
{
    if (ftrt__kgpu_device_count() == 0) {
        printf("no usable CUDA device (no GPU or no driver): skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(snapshot_matches_host_copy),
                                       cmocka_unit_test(engine_hook),
                                       cmocka_unit_test(region_device_on_engine_threads)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * GPU unit tests: the GPU checkpoint path. A device region snapshotted into pinned staging on a
 * side stream holds exactly the bytes of a host copy and the CRC32C of ftrt__crc32c; it sees
 * the state at the point it was ordered after (a write queued on the compute stream after
 * ftrt__dev_snapshot_order does not leak into it); the checkpoint engine's device hook
 * (ckpt_device.c) snapshots and restores the same way. Prints the copy bandwidth (information
 * only). Exits 77 when no CUDA device is usable.
 */
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

int main(void)
{
    if (ftrt__kgpu_device_count() == 0) {
        printf("no usable CUDA device (no GPU or no driver): skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(snapshot_matches_host_copy),
                                       cmocka_unit_test(engine_hook)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

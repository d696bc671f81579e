/*
 * GPU unit tests: every CUDA kernel of kernels/kernels.cu against its CPU reference
 * (kernels_ref.c), bit for bit: bucket pack and unpack (aligned and unaligned tensors), the
 * scaled unpack in float32, float64, bfloat16 and fp16 (every finite and infinite 16-bit
 * pattern, subnormals included; issue 21), the abort guard of the unpack, in-place scaling, and
 * per-chunk CRC32C with and without the fused copy (to device and to mapped host memory).
 * Exits 77 when no CUDA device is usable (no GPU, or no driver).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/crc32c.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/kernels_gpu.h"

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        c[i] = (unsigned char)(seed >> 16);
    }
}

/* Random float data that is finite: bytes would give NaNs, whose payloads may differ. */
static void fill_floats(float *f, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        f[i] = ((float)(seed >> 8) - 8388608.0f) / 1024.0f;
    }
}

enum { NT = 7 };

typedef struct set {
    size_t bytes[NT];
    void *host[NT], *dev[NT];
    ftrt__seg hseg[NT], dseg[NT];
    ftrt__kdesc *desc; /* mapped pinned */
    size_t total, maxb;
} set;

/* Tensors of float32 with odd element counts (offsets 4-aligned, not 16) and one empty. */
static void set_make(set *s, int dtype)
{
    size_t counts[NT] = {1, 1000, 0, 33, 4096, 7, 100003};
    size_t es = dtype == FTRT__K_F32 ? 4 : 8;
    s->total = 0;
    for (int i = 0; i < NT; i++) {
        s->bytes[i] = counts[i] * es;
        s->host[i] = malloc(s->bytes[i] + 8);
        if (dtype == FTRT__K_F32) fill_floats(s->host[i], counts[i], (unsigned)i * 7 + 1);
        else for (size_t k = 0; k < counts[i]; k++) ((double *)s->host[i])[k] = (double)k / 7.0 - (double)i;
        CK(cudaMalloc(&s->dev[i], s->bytes[i] + 8));
        CK(cudaMemcpy(s->dev[i], s->host[i], s->bytes[i], cudaMemcpyHostToDevice));
        s->hseg[i] = (ftrt__seg){s->host[i], s->bytes[i]};
        s->dseg[i] = (ftrt__seg){s->dev[i], s->bytes[i]};
        s->total += s->bytes[i];
    }
    CK(cudaHostAlloc((void **)&s->desc, NT * sizeof *s->desc, cudaHostAllocMapped));
    assert_int_equal(ftrt__kdesc_fill(s->desc, s->dseg, NT, &s->maxb), s->total);
}

static void set_free(set *s)
{
    for (int i = 0; i < NT; i++) {
        free(s->host[i]);
        cudaFree(s->dev[i]);
    }
    cudaFreeHost(s->desc);
}

static void pack_matches_reference(void **state)
{
    (void)state;
    set s;
    set_make(&s, FTRT__K_F32);
    unsigned char *ref = malloc(s.total), *got = malloc(s.total);
    char *dbucket;
    CK(cudaMalloc((void **)&dbucket, s.total + 1));
    ftrt__k_pack(ref, s.hseg, NT);
    CK(ftrt__kgpu_pack(dbucket, s.desc, NT, s.maxb, 0));
    CK(cudaMemcpy(got, dbucket, s.total, cudaMemcpyDeviceToHost));
    assert_memory_equal(got, ref, s.total);
    /* an odd bucket address: the byte path */
    CK(cudaMemset(dbucket, 0, s.total + 1));
    CK(ftrt__kgpu_pack(dbucket + 1, s.desc, NT, s.maxb, 0));
    CK(cudaMemcpy(got, dbucket + 1, s.total, cudaMemcpyDeviceToHost));
    assert_memory_equal(got, ref, s.total);
    cudaFree(dbucket);
    free(ref);
    free(got);
    set_free(&s);
}

static void unpack_scale_matches_reference(void **state)
{
    (void)state;
    for (int dtype = FTRT__K_F32; dtype <= FTRT__K_F64; dtype++) {
        double scales[3] = {1.0, 0.25, 1.0 / 3.0};
        for (int k = 0; k < 3; k++) {
            set s;
            set_make(&s, dtype);
            unsigned char *bucket = malloc(s.total);
            fill(bucket, s.total, 42);
            if (dtype == FTRT__K_F32) fill_floats((float *)bucket, s.total / 4, 42);
            else for (size_t i = 0; i < s.total / 8; i++) ((double *)bucket)[i] = (double)i * 1.1 - 5e5;
            void *dbucket;
            CK(cudaMalloc(&dbucket, s.total));
            CK(cudaMemcpy(dbucket, bucket, s.total, cudaMemcpyHostToDevice));
            ftrt__k_unpack_scale(bucket, s.hseg, NT, dtype, scales[k]);
            CK(ftrt__kgpu_unpack_scale(dbucket, s.desc, NT, s.maxb, dtype, scales[k], NULL, 0, 0));
            for (int i = 0; i < NT; i++) {
                unsigned char *got = malloc(s.bytes[i] + 1);
                CK(cudaMemcpy(got, s.dev[i], s.bytes[i], cudaMemcpyDeviceToHost));
                if (s.bytes[i]) assert_memory_equal(got, s.host[i], s.bytes[i]);
                free(got);
            }
            cudaFree(dbucket);
            free(bucket);
            set_free(&s);
        }
    }
}

static void unpack_guard(void **state)
{
    (void)state;
    set s;
    set_make(&s, FTRT__K_F32);
    volatile uint32_t *guard;
    CK(cudaHostAlloc((void **)&guard, sizeof *guard, cudaHostAllocMapped));
    *guard = 5;
    void *dbucket;
    CK(cudaMalloc(&dbucket, s.total));
    CK(cudaMemset(dbucket, 0, s.total));
    CK(ftrt__kgpu_unpack_scale(dbucket, s.desc, NT, s.maxb, FTRT__K_F32, 1.0, guard, 4, 0));
    CK(cudaDeviceSynchronize());
    unsigned char *got = malloc(s.bytes[6]);
    CK(cudaMemcpy(got, s.dev[6], s.bytes[6], cudaMemcpyDeviceToHost));
    assert_memory_equal(got, s.host[6], s.bytes[6]); /* disarmed: untouched */
    CK(ftrt__kgpu_unpack_scale(dbucket, s.desc, NT, s.maxb, FTRT__K_F32, 1.0, guard, 5, 0));
    CK(cudaMemcpy(got, s.dev[6], s.bytes[6], cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < s.bytes[6]; i++) assert_int_equal(got[i], 0); /* armed: written */
    free(got);
    cudaFree(dbucket);
    cudaFreeHost((void *)guard);
    set_free(&s);
}

static void scale_matches_reference(void **state)
{
    (void)state;
    enum { N = 300001 };
    float *h = malloc(N * sizeof *h), *got = malloc(N * sizeof *got);
    fill_floats(h, N, 3);
    float *d;
    CK(cudaMalloc((void **)&d, N * sizeof *d));
    CK(cudaMemcpy(d, h, N * sizeof *d, cudaMemcpyHostToDevice));
    CK(ftrt__kgpu_scale(d, N, FTRT__K_F32, 1.0 / 6.0, 0));
    ftrt__k_scale(h, N, FTRT__K_F32, 1.0 / 6.0);
    CK(cudaMemcpy(got, d, N * sizeof *d, cudaMemcpyDeviceToHost));
    assert_memory_equal(got, h, N * sizeof *h);
    cudaFree(d);
    free(h);
    free(got);
}

/* All 65,536 patterns of a 16-bit dtype but the NaNs (whose sign a device multiply may not
 * keep), repeated to n elements. */
static void fill_h16(uint16_t *x, size_t n, int dtype)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(i * 40503u);
        uint16_t mag = h & 0x7FFF;
        int nan = dtype == FTRT__K_BF16 ? mag > 0x7F80 : mag > 0x7C00;
        x[i] = nan ? (uint16_t)(h & 0x83FF) : h;
    }
}

/* The 16-bit unpack with scaling and the in-place scaling: widened, multiplied in float32,
 * narrowed to nearest even, bit for bit as on the CPU. */
static void h16_scale_matches_reference(void **state)
{
    (void)state;
    enum { N = 65536 * 3 + 5 };
    const int dts[2] = {FTRT__K_BF16, FTRT__K_F16};
    const double scales[3] = {0.25, 1.0 / 3.0, 1.0 / 6.0};
    uint16_t *h = malloc(N * 2), *ref = malloc(N * 2), *got = malloc(N * 2);
    uint16_t *d, *dbucket;
    CK(cudaMalloc((void **)&d, N * 2));
    CK(cudaMalloc((void **)&dbucket, N * 2));
    ftrt__kdesc *desc;
    CK(cudaHostAlloc((void **)&desc, 2 * sizeof *desc, cudaHostAllocMapped));
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++) {
            fill_h16(h, N, dts[k]);
            memcpy(ref, h, N * 2);
            ftrt__k_scale(ref, N, dts[k], scales[j]);
            CK(cudaMemcpy(d, h, N * 2, cudaMemcpyHostToDevice));
            CK(ftrt__kgpu_scale(d, N, dts[k], scales[j], 0));
            CK(cudaMemcpy(got, d, N * 2, cudaMemcpyDeviceToHost));
            assert_memory_equal(got, ref, N * 2);
            /* the unpack: two tensors (the second at an odd element offset) */
            ftrt__seg seg[2] = {{d, 2 * 1001}, {d + 1001, 2 * (N - 1001)}};
            size_t maxb;
            ftrt__kdesc_fill(desc, seg, 2, &maxb);
            CK(cudaMemcpy(dbucket, h, N * 2, cudaMemcpyHostToDevice));
            CK(cudaMemset(d, 0, N * 2));
            CK(ftrt__kgpu_unpack_scale(dbucket, desc, 2, maxb, dts[k], scales[j], NULL, 0, 0));
            CK(cudaMemcpy(got, d, N * 2, cudaMemcpyDeviceToHost));
            assert_memory_equal(got, ref, N * 2);
        }
    cudaFreeHost(desc);
    cudaFree(d);
    cudaFree(dbucket);
    free(h);
    free(ref);
    free(got);
}

static void crc_chunks_match_reference(void **state)
{
    (void)state;
    size_t len = (1 << 20) + 123;
    unsigned char *h = malloc(len + 1), *back = malloc(len + 1), *mapped;
    fill(h, len + 1, 11);
    unsigned char *d, *ddst;
    CK(cudaMalloc((void **)&d, len + 1));
    CK(cudaMalloc((void **)&ddst, len + 1));
    CK(cudaHostAlloc((void **)&mapped, len + 1, cudaHostAllocMapped));
    CK(cudaMemcpy(d, h, len + 1, cudaMemcpyHostToDevice));
    size_t chunks[3] = {64, 100, 4096};
    for (int c = 0; c < 3; c++)
        for (int off = 0; off < 2; off++) { /* aligned and unaligned sources */
            size_t ch = chunks[c], n = len - (size_t)off, nchunks = (n + ch - 1) / ch;
            uint32_t *ref = malloc(nchunks * 4), *got, *dcrcs;
            CK(cudaHostAlloc((void **)&got, nchunks * 4, cudaHostAllocMapped));
            CK(cudaMalloc((void **)&dcrcs, nchunks * 4));
            ftrt__k_crc32c_chunks(h + off, n, ch, ref);
            CK(ftrt__kgpu_copy_crc32c_chunks(NULL, d + off, n, ch, dcrcs, 0));
            CK(cudaMemcpy(got, dcrcs, nchunks * 4, cudaMemcpyDeviceToHost));
            assert_memory_equal(got, ref, nchunks * 4);
            assert_int_equal(ftrt__k_crc32c_merge(0, got, n, ch), ftrt__crc32c(0, h + off, n));
            /* fused copy to device memory, CRCs straight into mapped memory */
            CK(ftrt__kgpu_copy_crc32c_chunks(ddst + off, d + off, n, ch, got, 0));
            CK(cudaDeviceSynchronize());
            assert_memory_equal(got, ref, nchunks * 4);
            CK(cudaMemcpy(back, ddst + off, n, cudaMemcpyDeviceToHost));
            assert_memory_equal(back, h + off, n);
            /* fused copy to mapped host memory */
            CK(ftrt__kgpu_copy_crc32c_chunks(mapped + off, d + off, n, ch, dcrcs, 0));
            CK(cudaDeviceSynchronize());
            assert_memory_equal(mapped + off, h + off, n);
            cudaFreeHost(got);
            cudaFree(dcrcs);
            free(ref);
        }
    assert_int_equal((int)ftrt__kgpu_copy_crc32c_chunks(NULL, d, len, 30, NULL, 0),
                     (int)cudaErrorInvalidValue);
    cudaFree(d);
    cudaFree(ddst);
    cudaFreeHost(mapped);
    free(h);
    free(back);
}

int main(void)
{
    int n = ftrt__kgpu_device_count();
    if (n == 0) {
        printf("no usable CUDA device (no GPU or no driver): skipped\n");
        return 77;
    }
    printf("%d CUDA device(s)\n", n);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pack_matches_reference), cmocka_unit_test(unpack_scale_matches_reference),
        cmocka_unit_test(unpack_guard), cmocka_unit_test(scale_matches_reference),
        cmocka_unit_test(h16_scale_matches_reference),
        cmocka_unit_test(crc_chunks_match_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests: the CPU reference kernels (kernels/kernels_ref.c), which the CPU data plane runs
 * and the CUDA kernels are compared with: pack/unpack round trips (odd sizes, empty tensors),
 * scaling rounded once per element in the element type, and per-chunk CRC32C merged back into
 * the CRC of the whole for every chunk boundary case.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/crc32c.h"
#include "kernels/kernels.h"

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        c[i] = (unsigned char)(seed >> 16);
    }
}

static void pack_unpack_round_trip(void **state)
{
    (void)state;
    size_t sizes[6] = {13, 0, 4096, 1, 777, 64};
    ftrt__seg src[6], dst[6];
    size_t total = 0;
    for (int i = 0; i < 6; i++) {
        src[i].bytes = dst[i].bytes = sizes[i];
        src[i].ptr = malloc(sizes[i] + 1);
        dst[i].ptr = calloc(1, sizes[i] + 1);
        fill(src[i].ptr, sizes[i], (unsigned)i + 1);
        total += sizes[i];
    }
    unsigned char *bucket = malloc(total + 8);
    memset(bucket, 0xAB, total + 8);
    ftrt__k_pack(bucket, src, 6);
    size_t off = 0;
    for (int i = 0; i < 6; i++) { /* back to back, in descriptor order */
        if (sizes[i]) assert_memory_equal(bucket + off, src[i].ptr, sizes[i]);
        off += sizes[i];
    }
    assert_int_equal(bucket[total], 0xAB); /* nothing written past the end */
    ftrt__k_unpack(bucket, dst, 6);
    for (int i = 0; i < 6; i++) {
        if (sizes[i]) assert_memory_equal(dst[i].ptr, src[i].ptr, sizes[i]);
        free(src[i].ptr);
        free(dst[i].ptr);
    }
    free(bucket);
}

static void unpack_scale_rounds_once(void **state)
{
    (void)state;
    enum { N = 1000 };
    float xf[N], yf[N];
    double xd[N], yd[N];
    for (int i = 0; i < N; i++) {
        xf[i] = (float)(i * 0.37 - 100.0) / 3.0f;
        xd[i] = (i * 0.37 - 100.0) / 3.0;
    }
    ftrt__seg sf[2] = {{yf, 400 * sizeof(float)}, {yf + 400, 600 * sizeof(float)}};
    ftrt__k_unpack_scale(xf, sf, 2, FTRT__K_F32, 1.0 / 3.0);
    const float s = (float)(1.0 / 3.0);
    for (int i = 0; i < N; i++) assert_true(yf[i] == xf[i] * s);
    ftrt__seg sd[1] = {{yd, sizeof yd}};
    ftrt__k_unpack_scale(xd, sd, 1, FTRT__K_F64, 0.25);
    for (int i = 0; i < N; i++) assert_true(yd[i] == xd[i] * 0.25);
    /* scale 1 and int64 copy bit for bit */
    int64_t xi[3] = {INT64_MIN, -1, 12345}, yi[3];
    ftrt__seg si[1] = {{yi, sizeof yi}};
    ftrt__k_unpack_scale(xi, si, 1, FTRT__K_I64, 0.5);
    assert_memory_equal(xi, yi, sizeof xi);
    ftrt__k_unpack_scale(xd, sd, 1, FTRT__K_F64, 1.0);
    assert_memory_equal(xd, yd, sizeof xd);
    /* in place */
    memcpy(yf, xf, sizeof xf);
    ftrt__k_scale(yf, N, FTRT__K_F32, 0.125);
    for (int i = 0; i < N; i++) assert_true(yf[i] == xf[i] * 0.125f);
    memcpy(yi, xi, sizeof xi);
    ftrt__k_scale(yi, 3, FTRT__K_I64, 0.5);
    assert_memory_equal(xi, yi, sizeof xi);
}

/* Packing / unpacking a bucket by ranges (any partition, across tensor boundaries) gives the
 * bytes of the whole-bucket kernels. */
static void ranges_equal_whole(void **state)
{
    (void)state;
    size_t counts[5] = {3, 0, 1000, 1, 257};
    float *src[5], *dst[5], *ref[5];
    ftrt__seg s[5], d[5], r[5];
    size_t total = 0;
    for (int i = 0; i < 5; i++) {
        src[i] = malloc(counts[i] * 4 + 4);
        dst[i] = malloc(counts[i] * 4 + 4);
        ref[i] = malloc(counts[i] * 4 + 4);
        for (size_t k = 0; k < counts[i]; k++) src[i][k] = (float)(k * 7 + (size_t)i) / 3.0f;
        s[i] = (ftrt__seg){src[i], counts[i] * 4};
        d[i] = (ftrt__seg){dst[i], counts[i] * 4};
        r[i] = (ftrt__seg){ref[i], counts[i] * 4};
        total += counts[i] * 4;
    }
    unsigned char *whole = malloc(total), *parts = malloc(total);
    ftrt__k_pack(whole, s, 5);
    size_t steps[4] = {4, 12, 400, 4096};
    for (int k = 0; k < 4; k++) {
        memset(parts, 0, total);
        for (size_t off = 0; off < total; off += steps[k])
            ftrt__k_pack_range(parts, s, 5, off, total - off < steps[k] ? total - off : steps[k]);
        assert_memory_equal(parts, whole, total);
        ftrt__k_unpack_scale(whole, r, 5, FTRT__K_F32, 0.25);
        for (size_t off = 0; off < total; off += steps[k])
            ftrt__k_unpack_scale_range(parts, d, 5, off, total - off < steps[k] ? total - off
                                                                                 : steps[k],
                                       FTRT__K_F32, 0.25);
        for (int i = 0; i < 5; i++)
            if (counts[i]) assert_memory_equal(dst[i], ref[i], counts[i] * 4);
    }
    for (int i = 0; i < 5; i++) {
        free(src[i]);
        free(dst[i]);
        free(ref[i]);
    }
    free(whole);
    free(parts);
}

static void crc_chunks_merge(void **state)
{
    (void)state;
    size_t len = 3 * 65536 + 123;
    unsigned char *buf = malloc(len);
    fill(buf, len, 99);
    size_t chunks[5] = {64, 100, 4096, 65536, 1 << 20};
    size_t lens[8] = {0, 1, 63, 64, 65, 4096, 4097, len};
    uint32_t *crcs = malloc(sizeof(uint32_t) * (len / 64 + 2));
    for (int c = 0; c < 5; c++)
        for (int l = 0; l < 8; l++) {
            size_t n = lens[l], ch = chunks[c];
            ftrt__k_crc32c_chunks(buf, n, ch, crcs);
            for (size_t i = 0; i * ch < n; i++)
                assert_int_equal(crcs[i], ftrt__crc32c(0, buf + i * ch, n - i * ch < ch ? n - i * ch : ch));
            assert_int_equal(ftrt__k_crc32c_merge(0, crcs, n, ch), ftrt__crc32c(0, buf, n));
            /* continued from a previous CRC */
            uint32_t prev = ftrt__crc32c(0, "prefix", 6);
            assert_int_equal(ftrt__k_crc32c_merge(prev, crcs, n, ch), ftrt__crc32c(prev, buf, n));
        }
    /* A flipped bit changes the merged CRC. */
    ftrt__k_crc32c_chunks(buf, len, 4096, crcs);
    uint32_t good = ftrt__k_crc32c_merge(0, crcs, len, 4096);
    buf[len / 2] ^= 4;
    ftrt__k_crc32c_chunks(buf, len, 4096, crcs);
    assert_int_not_equal(ftrt__k_crc32c_merge(0, crcs, len, 4096), good);
    free(crcs);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(pack_unpack_round_trip),
                                       cmocka_unit_test(unpack_scale_rounds_once),
                                       cmocka_unit_test(ranges_equal_whole),
                                       cmocka_unit_test(crc_chunks_merge)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

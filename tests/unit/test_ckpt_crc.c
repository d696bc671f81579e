/*
 * test_ckpt_crc.c - the large-buffer CRC32C paths of the checkpoint engine: the 3-way
 * interleaved CRC and fused copy (with streaming stores above 1 MiB) against the bitwise
 * reference for lengths around every block boundary and every alignment of source and
 * destination, and ftrt__crc32c_combine() (what joins the CRCs of snapshot pieces and restore
 * chunks) for every split of buffers of many sizes.
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

static uint64_t rng = 0x1234567887654321ull;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

/* Lengths near the 3 x 8 KiB block, the 1 MiB streaming threshold and beyond. */
static void large_copies(void **st)
{
    (void)st;
    enum { MAX = (3 << 20) + 100000 };
    unsigned char *src = malloc(MAX + 64), *dst = malloc(MAX + 64);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < MAX + 64; i++) src[i] = (unsigned char)rnd();
    static const size_t lens[] = {24575, 24576, 24577, 24576 + 15, 49152, 49153 + 7,
                                  (1u << 20) - 1, 1u << 20, (1u << 20) + 1, (1u << 20) + 24576 + 3,
                                  3u << 20, MAX};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (int a = 0; a < 4; a++) {
            size_t len = lens[k];
            size_t sa = a == 0 ? 0 : (size_t)(rnd() % 32), da = a < 2 ? 0 : (size_t)(rnd() % 32);
            if (sa + len > MAX + 64) sa = 0;
            if (da + len > MAX + 64) da = 0;
            uint32_t seed = a == 3 ? (uint32_t)rnd() : 0;
            uint32_t want = ftrt__crc32c_sw(seed, src + sa, len);
            assert_int_equal(ftrt__crc32c(seed, src + sa, len), want);
            memset(dst, 0x5A, MAX + 64);
            assert_int_equal(ftrt__copy_crc32c(dst + da, src + sa, len, seed), want);
            assert_memory_equal(dst + da, src + sa, len);
            if (da > 0) assert_int_equal(dst[da - 1], 0x5A); /* nothing written around it */
            if (da + len < MAX + 64) assert_int_equal(dst[da + len], 0x5A);
        }
    free(src);
    free(dst);
}

/* crc(A || B) == combine(crc(A), crc(B), |B|) for splits anywhere, including empty parts, and
 * a chain of pieces joined in order gives the CRC of the whole. */
static void combine(void **st)
{
    (void)st;
    enum { MAX = 70000 };
    unsigned char *b = malloc(MAX);
    assert_non_null(b);
    for (size_t i = 0; i < MAX; i++) b[i] = (unsigned char)rnd();
    for (int it = 0; it < 2000; it++) {
        size_t len = it < 64 ? (size_t)it : (size_t)(rnd() % MAX);
        size_t cut = len ? (size_t)(rnd() % (len + 1)) : 0;
        uint32_t whole = ftrt__crc32c_sw(0, b, len);
        uint32_t ca = ftrt__crc32c(0, b, cut), cb = ftrt__crc32c(0, b + cut, len - cut);
        assert_int_equal(ftrt__crc32c_combine(ca, cb, len - cut), whole);
    }
    /* Pieces of random sizes, joined left to right. */
    uint32_t c = 0;
    size_t pos = 0;
    while (pos < MAX) {
        size_t n = 1 + (size_t)(rnd() % 9000);
        if (n > MAX - pos) n = MAX - pos;
        c = ftrt__crc32c_combine(c, ftrt__crc32c(0, b + pos, n), n);
        pos += n;
    }
    assert_int_equal(c, ftrt__crc32c_sw(0, b, MAX));
    /* Lengths past 4 GiB exercise the high bits of the length: crc("abc" || 2^33 zero bytes)
     * built from the CRC of 2^33 zeros (by doubling) and from two halves of 2^32 must agree. */
    unsigned char zero[4096] = {0};
    uint32_t z = ftrt__crc32c(0, zero, sizeof zero), zh = 0;
    uint64_t zl = sizeof zero;
    while (zl < (1ull << 33)) {
        if (zl == (1ull << 32)) zh = z;
        z = ftrt__crc32c_combine(z, z, zl);
        zl *= 2;
    }
    uint32_t x = ftrt__crc32c(0, "abc", 3);
    uint32_t way1 = ftrt__crc32c_combine(x, z, 1ull << 33);
    uint32_t way2 = ftrt__crc32c_combine(ftrt__crc32c_combine(x, zh, 1ull << 32), zh, 1ull << 32);
    assert_int_equal(way1, way2);
    assert_int_equal(ftrt__crc32c_combine(x, 0, 0), x); /* nothing appended */
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(large_copies),
        cmocka_unit_test(combine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

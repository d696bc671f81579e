/*
 * test_crc32c.c - CRC32C: known vectors (RFC 3720 B.4), hardware vs software for random
 * lengths and alignments, continuation, the fused copy + CRC, and the folding path of large
 * buffers (a bit flipped anywhere in each of its lanes changes the CRC, as the reference's).
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
#include "ftrt.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static void check_vector(const void *buf, size_t len, uint32_t want)
{
    unsigned char dst[64];
    assert_int_equal(ftrt__crc32c(0, buf, len), want);
    assert_int_equal(ftrt__crc32c_sw(0, buf, len), want);
    memset(dst, 0xA5, sizeof dst);
    assert_int_equal(ftrt__copy_crc32c(dst, buf, len, 0), want);
    assert_memory_equal(dst, buf, len);
}

static void test_rfc3720_vectors(void **state)
{
    (void)state;
    unsigned char b[32];
    memset(b, 0, sizeof b);
    check_vector(b, 32, 0x8A9136AAu);
    memset(b, 0xFF, sizeof b);
    check_vector(b, 32, 0x62A8AB43u);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    check_vector(b, 32, 0x46DD794Eu);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)(31 - i);
    check_vector(b, 32, 0x113FDB5Cu);
    check_vector("123456789", 9, 0xE3069283u);
    check_vector("", 0, 0);
    /* Vector that is not all one byte, checked at every misalignment. */
    char buf[16 + 9];
    for (int a = 0; a < 16; a++) {
        memcpy(buf + a, "123456789", 9);
        assert_int_equal(ftrt__crc32c(0, buf + a, 9), 0xE3069283u);
    }
}

static void test_hw_matches_sw(void **state)
{
    (void)state;
    enum { MAX = 70000 };
    unsigned char *src = malloc(MAX + 64), *dst = malloc(MAX + 64), *zero = calloc(1, MAX + 64);
    assert_non_null(src);
    assert_non_null(zero);
    assert_non_null(dst);
    for (size_t i = 0; i < MAX + 64; i++) src[i] = (unsigned char)rnd();
    if (!ftrt__crc32c_hw())
        print_message("note: no CRC32C instruction on this CPU; comparing the fallback only\n");
    for (int it = 0; it < 3000; it++) {
        size_t len = it < 200 ? (size_t)it : (size_t)(rnd() % MAX);
        size_t sa = (size_t)(rnd() % 64), da = (size_t)(rnd() % 64);
        if (sa + len > MAX + 64) len = MAX + 64 - sa;
        if (da + len > MAX + 64) len = MAX + 64 - da;
        uint32_t seed = (it % 3 == 0) ? 0 : (uint32_t)rnd();
        uint32_t want = ftrt__crc32c_sw(seed, src + sa, len);
        assert_int_equal(ftrt__crc32c(seed, src + sa, len), want);
        memset(dst, 0, MAX + 64);
        assert_int_equal(ftrt__copy_crc32c(dst + da, src + sa, len, seed), want);
        assert_memory_equal(dst + da, src + sa, len);
        /* Nothing outside the destination range was written. */
        assert_memory_equal(dst, zero, da);
        assert_memory_equal(dst + da + len, zero, MAX + 64 - da - len);
    }
    free(src);
    free(dst);
    free(zero);
}

static void test_continuation(void **state)
{
    (void)state;
    unsigned char buf[4099];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)rnd();
    uint32_t whole = ftrt__crc32c(0, buf, sizeof buf);
    for (size_t cut = 0; cut <= sizeof buf; cut += 37) {
        uint32_t c = ftrt__crc32c(0, buf, cut);
        assert_int_equal(ftrt__crc32c(c, buf + cut, sizeof buf - cut), whole);
        unsigned char out[sizeof buf];
        c = ftrt__copy_crc32c(out, buf, cut, 0);
        assert_int_equal(ftrt__copy_crc32c(out + cut, buf + cut, sizeof buf - cut, c), whole);
        assert_memory_equal(out, buf, sizeof buf);
    }
    /* A single flipped bit changes the CRC. */
    buf[1234] ^= 0x10;
    assert_int_not_equal(ftrt__crc32c(0, buf, sizeof buf), whole);
}

/* Buffers large enough for the folding path (crc32c.c: crc_fold, 1 KiB and more where the CPU
 * has VPCLMULQDQ; the 3-way path elsewhere): equal to the reference for lengths around the
 * 256-byte blocks, and a single bit flipped at any of 16 places of each 64-byte stretch, and in
 * the tail, changes the CRC exactly as it changes the reference's. */
static void test_large_fold(void **state)
{
    (void)state;
    enum { MAX = 300000 };
    unsigned char *buf = malloc(MAX);
    assert_non_null(buf);
    for (size_t i = 0; i < MAX; i++) buf[i] = (unsigned char)rnd();
    static const size_t lens[] = {1023, 1024, 1279, 1280, 1536, 2047, 4096 + 255, 65536, MAX};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        uint32_t seed = (uint32_t)rnd();
        assert_int_equal(ftrt__crc32c(seed, buf, lens[i]), ftrt__crc32c_sw(seed, buf, lens[i]));
    }
    uint32_t whole = ftrt__crc32c(0, buf, 8192 + 100);
    for (size_t at = 0; at < 8192 + 100; at += 61) {
        buf[at] ^= (unsigned char)(1u << (at % 8));
        uint32_t got = ftrt__crc32c(0, buf, 8192 + 100);
        assert_int_not_equal(got, whole);
        assert_int_equal(got, ftrt__crc32c_sw(0, buf, 8192 + 100));
        buf[at] ^= (unsigned char)(1u << (at % 8));
    }
    free(buf);
}

/* ftrt_crc32c(), the public entry point of ftrt.h: the same CRC, continued through *crc, and
 * FTRT_EINVAL without touching *crc for a NULL crc or a NULL buffer of non-zero length. */
static void test_public_entry_point(void **state)
{
    (void)state;
    uint32_t crc = 0;
    assert_int_equal(ftrt_crc32c("12345", 5, &crc), 0);
    assert_int_equal(ftrt_crc32c("6789", 4, &crc), 0);
    assert_int_equal(crc, 0xE3069283u);
    assert_int_equal(ftrt_crc32c(NULL, 0, &crc), 0);
    assert_int_equal(crc, 0xE3069283u);
    assert_int_equal(ftrt_crc32c(NULL, 1, &crc), FTRT_EINVAL);
    assert_int_equal(crc, 0xE3069283u);
    assert_int_equal(ftrt_crc32c("1", 1, NULL), FTRT_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc3720_vectors),
        cmocka_unit_test(test_public_entry_point),
        cmocka_unit_test(test_hw_matches_sw),
        cmocka_unit_test(test_continuation),
        cmocka_unit_test(test_large_fold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

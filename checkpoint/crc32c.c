/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78), plain and fused with a copy.
 *
 * x86-64 uses the SSE4.2 crc32 instruction (checked at run time with __builtin_cpu_supports),
 * aarch64 the ARMv8 CRC32 instructions when the compiler targets them (-march=armv8-a+crc or
 * newer; __ARM_FEATURE_CRC32). Other CPUs get a small bitwise loop: correct, slow, rare.
 * The CRC convention is zlib's: crc32c(crc32c(0, a), b) == crc32c(0, a || b).
 */
#include <stdint.h>
#include <string.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/format.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define FTRT__CRC_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define FTRT__CRC_ARM 1
#endif

#define CRC32C_POLY 0x82F63B78u

uint32_t ftrt__crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
    }
    return ~c;
}

/* Copy + bitwise CRC, for CPUs without the instruction. */
static uint32_t copy_crc_sw(void *dst, const void *src, size_t len, uint32_t crc)
{
    memcpy(dst, src, len);
    return ftrt__crc32c_sw(crc, src, len);
}

#if defined(FTRT__CRC_X86)

int ftrt__crc32c_hw(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *buf,
                                                          size_t len)
{
    const unsigned char *p = buf;
    uint64_t c = ~crc;
    /* Byte steps up to 8-byte alignment, then 8 bytes per instruction. */
    while (len > 0 && ((uintptr_t)p & 7u) != 0) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
#if defined(__x86_64__)
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
#endif
    while (len > 0) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    return ~(uint32_t)c;
}

__attribute__((target("sse4.2"))) static uint32_t copy_crc_hw(void *dst, const void *src,
                                                               size_t len, uint32_t crc)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    uint64_t c = ~crc;
#if defined(__x86_64__)
    /* One pass: load 8 bytes, fold them into the CRC, store them. */
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        c = _mm_crc32_u64(c, v);
        memcpy(d, &v, 8);
        s += 8;
        d += 8;
        len -= 8;
    }
#endif
    while (len > 0) {
        c = _mm_crc32_u8((uint32_t)c, *s);
        *d++ = *s++;
        len--;
    }
    return ~(uint32_t)c;
}

#elif defined(FTRT__CRC_ARM)

int ftrt__crc32c_hw(void)
{
    return 1;
}

static uint32_t crc_hw(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __crc32cd(c, v);
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = __crc32cb(c, *p++);
        len--;
    }
    return ~c;
}

static uint32_t copy_crc_hw(void *dst, const void *src, size_t len, uint32_t crc)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    uint32_t c = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        c = __crc32cd(c, v);
        memcpy(d, &v, 8);
        s += 8;
        d += 8;
        len -= 8;
    }
    while (len > 0) {
        c = __crc32cb(c, *s);
        *d++ = *s++;
        len--;
    }
    return ~c;
}

#else

int ftrt__crc32c_hw(void)
{
    return 0;
}

static uint32_t crc_hw(uint32_t crc, const void *buf, size_t len)
{
    return ftrt__crc32c_sw(crc, buf, len);
}

static uint32_t copy_crc_hw(void *dst, const void *src, size_t len, uint32_t crc)
{
    return copy_crc_sw(dst, src, len, crc);
}

#endif

uint32_t ftrt__crc32c(uint32_t crc, const void *buf, size_t len)
{
    if (len == 0) return crc;
    return ftrt__crc32c_hw() ? crc_hw(crc, buf, len) : ftrt__crc32c_sw(crc, buf, len);
}

uint32_t ftrt__copy_crc32c(void *dst, const void *src, size_t len, uint32_t crc)
{
    if (len == 0) return crc;
    return ftrt__crc32c_hw() ? copy_crc_hw(dst, src, len, crc) : copy_crc_sw(dst, src, len, crc);
}

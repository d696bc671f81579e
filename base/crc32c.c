/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78), plain and fused with a copy.
 *
 * x86-64 uses the SSE4.2 crc32 instruction (checked at run time with __builtin_cpu_supports),
 * aarch64 the ARMv8 CRC32 instructions when the compiler targets them (-march=armv8-a+crc or
 * newer; __ARM_FEATURE_CRC32). Other CPUs get a small bitwise loop: correct, slow, rare.
 * The CRC convention is zlib's: crc32c(crc32c(0, a), b) == crc32c(0, a || b).
 *
 * Large buffers (x86-64): one crc32 instruction has a latency of 3 cycles but a throughput of
 * one per cycle, so a single dependency chain runs at a third of the instruction's speed. The
 * large-buffer paths split each 3 x 8 KiB block into three streams whose CRCs are computed in
 * parallel and joined with a table-driven "shift by 8 KiB of zeros" (the CRC of A || B equals
 * shift(crc(A), |B|) xor crc(B) on the raw register). The fused copy writes the destination with
 * non-temporal stores when the copy is large (the staging buffer is read by the kernel's I/O, not
 * by this core), so a 1 GiB snapshot moves at about memcpy speed instead of half of it.
 * ftrt__crc32c_combine() joins CRCs of adjacent pieces of any length (zlib's method), so several
 * threads can checksum parts of one region. Where the CPU has AVX-512 VPCLMULQDQ, buffers of
 * 1 KiB or more are folded with carry-less multiplications instead (crc_fold, below): 1.5x the
 * 3-way path from memory, 2x and more from the cache.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/crc32c.h"
#include "ftrt.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <nmmintrin.h>
#define FTRT__CRC_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define FTRT__CRC_ARM 1
#endif

#define CRC32C_POLY 0x82F63B78u

/* ---- GF(2) arithmetic modulo the CRC polynomial (reflected: x^0 is bit 31) ---------------- */

/* a * b mod P. */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

#define SHIFT_K 8192u /* stream length of the 3-way paths, bytes */

static uint32_t x2n_table[32];     /* x^(2^k) mod P */
static uint32_t shift_tab[4][256]; /* raw register -> register after SHIFT_K zero bytes */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static int fold_cpu; /* the CPU folds with VPCLMULQDQ (x86-64; set with the tables) */
static int fold_ok(void);

/* x^(n * 2^k) mod P. */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
    uint32_t p = 1u << 31;
    while (n) {
        if (n & 1) p = multmodp(x2n_table[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

static void init_tables(void)
{
    uint32_t p = 1u << 30; /* x^1 */
    x2n_table[0] = p;
    for (int n = 1; n < 32; n++) x2n_table[n] = p = multmodp(p, p);
    uint32_t op = x2nmodp(SHIFT_K, 3); /* x^(8 * SHIFT_K) */
    for (int j = 0; j < 4; j++)
        for (uint32_t b = 0; b < 256; b++) shift_tab[j][b] = multmodp(op, b << (8 * j));
    fold_cpu = fold_ok();
}

uint32_t ftrt__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    pthread_once(&tables_once, init_tables);
    return multmodp(x2nmodp(len2, 3), crc1) ^ crc2;
}

/* The raw CRC register r advanced over SHIFT_K zero bytes (a linear map: four lookups). */
static inline uint32_t shift_k(uint32_t r)
{
    return shift_tab[0][r & 0xff] ^ shift_tab[1][(r >> 8) & 0xff] ^ shift_tab[2][(r >> 16) & 0xff] ^
           shift_tab[3][r >> 24];
}

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

/* Single dependency chain over 8-byte words of raw register c; returns the register. */
__attribute__((target("sse4.2"))) static uint64_t crc_1way(uint64_t c, const unsigned char *p,
                                                           size_t len)
{
    while (len > 0 && ((uintptr_t)p & 7u) != 0) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    return c;
}

/* ---- Folding with carry-less multiplication (x86-64 with AVX-512 VPCLMULQDQ) ------------------
 * The crc32 instruction retires 8 bytes a cycle at best; a cache-hot chunk (the transfer's
 * receiver checks each chunk as it lands) can be read much faster. Large buffers are folded
 * instead, after Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ": 16
 * lanes of 128 bits (four 512-bit registers) each hold a polynomial congruent to the bytes read
 * so far in their place; a lane moves forward by F bits as lo * (x^(F+63) mod P) xor
 * hi * (x^(F-1) mod P) (the -1 is the bit that a carry-less product of two reflected operands is
 * shifted by), and the next 256 bytes are xored in. At the end the lanes are folded into one,
 * whose 16 bytes the crc32 instruction turns into the raw register (the lane is congruent mod P
 * to every byte before it in its place). The initial register is xored into the first 4 bytes. */

/* The folding constants of a move by F bits, as the 64-bit reflected operands clmul takes. */
static uint64_t fold_lo(unsigned f) { return (uint64_t)x2nmodp(f + 63, 0) << 32; }
static uint64_t fold_hi(unsigned f) { return (uint64_t)x2nmodp(f - 1, 0) << 32; }

static int fold_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
           __builtin_cpu_supports("pclmul");
}

#define FOLD_TARGET __attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq")))

FOLD_TARGET static __m512i fold512(__m512i x, __m512i k, __m512i next)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96);
}

FOLD_TARGET static __m128i fold128(__m128i x, unsigned f, __m128i next)
{
    __m128i k = _mm_set_epi64x((long long)fold_hi(f), (long long)fold_lo(f));
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                       _mm_clmulepi64_si128(x, k, 0x11)), next);
}

/* Raw register after len bytes (a multiple of 256, at least 512) from raw register c. */
FOLD_TARGET static uint64_t crc_fold(uint64_t c, const unsigned char *p, size_t len)
{
    __m512i z[4];
    for (int i = 0; i < 4; i++) z[i] = _mm512_loadu_si512((const void *)(p + 64 * i));
    z[0] = _mm512_xor_si512(z[0], _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, (long long)c));
    uint64_t lo = fold_lo(2048), hi = fold_hi(2048);
    __m512i k = _mm512_set_epi64((long long)hi, (long long)lo, (long long)hi, (long long)lo,
                                 (long long)hi, (long long)lo, (long long)hi, (long long)lo);
    for (p += 256, len -= 256; len >= 256; p += 256, len -= 256)
        for (int i = 0; i < 4; i++)
            z[i] = fold512(z[i], k, _mm512_loadu_si512((const void *)(p + 64 * i)));
    for (int i = 0; i < 3; i++) { /* z[i] moves (3 - i) x 512 bits, onto z[3] */
        lo = fold_lo(512u * (unsigned)(3 - i)), hi = fold_hi(512u * (unsigned)(3 - i));
        k = _mm512_set_epi64((long long)hi, (long long)lo, (long long)hi, (long long)lo,
                             (long long)hi, (long long)lo, (long long)hi, (long long)lo);
        z[3] = fold512(z[i], k, z[3]);
    }
    __m128i l[4];
    memcpy(l, &z[3], sizeof l);
    __m128i x = l[3];
    for (int i = 0; i < 3; i++) x = fold128(l[i], 128u * (unsigned)(3 - i), x);
    uint64_t w[2];
    memcpy(w, &x, sizeof w);
    return _mm_crc32_u64(_mm_crc32_u64(0, w[0]), w[1]);
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *buf,
                                                          size_t len)
{
    const unsigned char *p = buf;
    uint64_t c = (uint32_t)~crc;
    if (len >= 1024) pthread_once(&tables_once, init_tables);
    if (len >= 1024 && fold_cpu) {
        size_t n = len & ~(size_t)255;
        c = crc_fold(c, p, n);
        p += n;
        len -= n;
    }
    if (len >= 3 * SHIFT_K) {
        pthread_once(&tables_once, init_tables);
        while (len >= 3 * SHIFT_K) {
            uint64_t c1 = 0, c2 = 0;
            const unsigned char *a = p, *b = p + SHIFT_K, *d = p + 2 * SHIFT_K;
            for (size_t i = 0; i < SHIFT_K; i += 8) {
                uint64_t x, y, z;
                memcpy(&x, a + i, 8);
                memcpy(&y, b + i, 8);
                memcpy(&z, d + i, 8);
                c = _mm_crc32_u64(c, x);
                c1 = _mm_crc32_u64(c1, y);
                c2 = _mm_crc32_u64(c2, z);
            }
            c = shift_k(shift_k((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
            p += 3 * SHIFT_K;
            len -= 3 * SHIFT_K;
        }
    }
    return ~(uint32_t)crc_1way(c, p, len);
}

/* Copies and checksums len bytes with a single chain and ordinary stores; returns the raw
 * register. */
__attribute__((target("sse4.2"))) static uint64_t copy_1way(uint64_t c, unsigned char *d,
                                                            const unsigned char *s, size_t len)
{
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        c = _mm_crc32_u64(c, v);
        memcpy(d, &v, 8);
        s += 8;
        d += 8;
        len -= 8;
    }
    while (len > 0) {
        c = _mm_crc32_u8((uint32_t)c, *s);
        *d++ = *s++;
        len--;
    }
    return c;
}

/* Non-temporal stores pay off only for copies much larger than the caches. */
#define NT_MIN_BYTES (1u << 20)

__attribute__((target("sse4.2"))) static uint32_t copy_crc_hw(void *dst, const void *src,
                                                               size_t len, uint32_t crc)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    uint64_t c = (uint32_t)~crc;
    if (len >= 3 * SHIFT_K + 16) {
        int nt = len >= NT_MIN_BYTES;
        size_t head = (16u - ((uintptr_t)d & 15u)) & 15u; /* streaming stores need 16-byte dst */
        c = copy_1way(c, d, s, head);
        d += head;
        s += head;
        len -= head;
        pthread_once(&tables_once, init_tables);
        while (len >= 3 * SHIFT_K) {
            uint64_t c1 = 0, c2 = 0;
            const unsigned char *a = s, *b = s + SHIFT_K, *e = s + 2 * SHIFT_K;
            unsigned char *da = d, *db = d + SHIFT_K, *de = d + 2 * SHIFT_K;
            for (size_t i = 0; i < SHIFT_K; i += 16) {
                uint64_t x0, x1, y0, y1, z0, z1;
                memcpy(&x0, a + i, 8);
                memcpy(&x1, a + i + 8, 8);
                memcpy(&y0, b + i, 8);
                memcpy(&y1, b + i + 8, 8);
                memcpy(&z0, e + i, 8);
                memcpy(&z1, e + i + 8, 8);
                c = _mm_crc32_u64(c, x0);
                c1 = _mm_crc32_u64(c1, y0);
                c2 = _mm_crc32_u64(c2, z0);
                c = _mm_crc32_u64(c, x1);
                c1 = _mm_crc32_u64(c1, y1);
                c2 = _mm_crc32_u64(c2, z1);
                __m128i va = _mm_loadu_si128((const __m128i *)(const void *)(a + i));
                __m128i vb = _mm_loadu_si128((const __m128i *)(const void *)(b + i));
                __m128i ve = _mm_loadu_si128((const __m128i *)(const void *)(e + i));
                if (nt) {
                    _mm_stream_si128((__m128i *)(void *)(da + i), va);
                    _mm_stream_si128((__m128i *)(void *)(db + i), vb);
                    _mm_stream_si128((__m128i *)(void *)(de + i), ve);
                } else {
                    _mm_store_si128((__m128i *)(void *)(da + i), va);
                    _mm_store_si128((__m128i *)(void *)(db + i), vb);
                    _mm_store_si128((__m128i *)(void *)(de + i), ve);
                }
            }
            c = shift_k(shift_k((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
            s += 3 * SHIFT_K;
            d += 3 * SHIFT_K;
            len -= 3 * SHIFT_K;
        }
        /* Streaming stores are weakly ordered: make them globally visible before whatever
         * publishes the copy (a release store, a system call) can be observed. */
        if (nt) _mm_sfence();
    }
    return ~(uint32_t)copy_1way(c, d, s, len);
}

#elif defined(FTRT__CRC_ARM)

static int fold_ok(void)
{
    return 0;
}

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

static int fold_ok(void)
{
    return 0;
}

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

/* The public entry point (ftrt.h): the same CRC, for tools that check shards from outside. */
int ftrt_crc32c(const void *buf, size_t len, uint32_t *crc)
{
    if (!crc || (!buf && len > 0)) return FTRT_EINVAL;
    *crc = ftrt__crc32c(*crc, buf, len);
    return 0;
}

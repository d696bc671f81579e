/*
 * half.h - the 16-bit floating-point formats of ftrt's data plane (internal): bfloat16 and IEEE
 * 754 binary16 ("half", fp16) to and from float32, and the element-wise arithmetic the planes
 * reduce and scale them with. Header-only, so the CPU references (kernels_ref.c), the CPU plane's
 * MPI reductions (comm/mpi_plane.c) and the CUDA kernels (kernels.cu, where every function is
 * __host__ __device__) compute exactly the same bits.
 *
 * Formats (bit 15 is the sign in both):
 *   bfloat16: 8 exponent bits (bias 127), 7 mantissa bits: the upper half of a float32, so the
 *     same range (subnormals included) with 8 significant bits.
 *   fp16: 5 exponent bits (bias 15), 10 mantissa bits; largest finite 65504, smallest normal
 *     2^-14, smallest subnormal 2^-24.
 * Widening (to float32) is exact for every bit pattern; a NaN stays a NaN with its sign and
 * payload (shifted; fp16 NaNs become quiet).
 * Narrowing rounds to nearest, ties to even, as PyTorch does (c10/util/BFloat16.h
 * round_to_nearest_even; c10/util/Half.h fp16_ieee_from_fp32_value): values past the largest
 * finite round to infinity, tiny ones to subnormals or signed zero; every NaN becomes the
 * canonical quiet NaN PyTorch produces (bfloat16 0x7FC0, whatever the sign; fp16 sign | 0x7E00).
 *
 * Arithmetic: a + b is computed in float32 and narrowed once (PyTorch's c10::BFloat16 and
 * c10::Half operators do the same). Since float32 has at least 2p + 2 significant bits for
 * both formats (p = 8, 11), the float32 sum rounded to 16 bits equals the correctly rounded
 * 16-bit sum (double rounding is innocuous then; Figueroa, "When is double rounding
 * innocuous?", 1995), so it also equals what NCCL's native bf16 / fp16 sums give pair by pair.
 * A NaN sum is the canonical positive NaN (ftrt__h16_nan). Min / max compare the widened
 * values; a NaN operand gives NaN (as fminf would not): a NaN anywhere in a reduction yields
 * NaN. x * s (the mean's 1 / world
 * scaling) is float32(x) * (float)s rounded to float32, then narrowed: for a power-of-two world
 * size the product is exact and rounded once.
 */
#ifndef FTRT_KERNELS_HALF_H
#define FTRT_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

FTRT__HD float ftrt__f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

FTRT__HD uint32_t ftrt__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* bfloat16 bits -> float32 (exact). */
FTRT__HD float ftrt__bf16_to_f32(uint16_t h) { return ftrt__f32_from_bits((uint32_t)h << 16); }

/* float32 -> bfloat16 bits, round to nearest even; NaN -> 0x7FC0. */
FTRT__HD uint16_t ftrt__f32_to_bf16(float f)
{
    uint32_t u = ftrt__f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    /* adding 0x7FFF plus the kept lsb rounds the 16 dropped bits to nearest even; a carry out of
     * the mantissa steps the exponent (to infinity past the largest finite) */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* fp16 bits -> float32 (exact; subnormals normalized). */
FTRT__HD float ftrt__fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return ftrt__f32_from_bits(sign | 0x7F800000u | (man << 13)); /* inf/NaN */
    if (exp != 0) return ftrt__f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return ftrt__f32_from_bits(sign); /* +-0 */
    int e = 113; /* subnormal: man * 2^-24; normalize */
    while (!(man & 0x400u)) {
        man <<= 1;
        e--;
    }
    return ftrt__f32_from_bits(sign | ((uint32_t)e << 23) | ((man & 0x3FFu) << 13));
}

/* float32 -> fp16 bits, round to nearest even; overflow -> infinity; NaN -> sign | 0x7E00. */
FTRT__HD uint16_t ftrt__f32_to_fp16(float f)
{
    uint32_t u = ftrt__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520: rounds past 65504 */
    int e = (int)(a >> 23) - 127; /* unbiased exponent of the float */
    if (e >= -14) {               /* normal fp16: drop 13 mantissa bits, nearest even */
        uint32_t r = a - ((uint32_t)(127 - 15) << 23);
        r += 0xFFFu + ((r >> 13) & 1u); /* a carry steps the exponent, exactly right */
        return (uint16_t)(sign | (r >> 13));
    }
    if (e < -25) return sign; /* below half the smallest subnormal (2^-25): zero */
    /* subnormal fp16: value = m * 2^-24 with m = mant24 >> (-e - 1) ... rounded to even */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u; /* 24-bit significand, value m * 2^(e-23) */
    int shift = -e - 1;                        /* 14..24: m * 2^(e-23) / 2^-24 = m >> shift */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++; /* q may become 0x400: the smallest normal */
    return (uint16_t)(sign | q);
}

/* 16-bit bits -> float32 / float32 -> 16-bit bits for dtype (FTRT__K_BF16 or FTRT__K_F16, kernels.h). */
FTRT__HD float ftrt__h16_to_f32(int dtype, uint16_t h)
{
    return dtype == FTRT__K_BF16 ? ftrt__bf16_to_f32(h) : ftrt__fp16_to_f32(h);
}

FTRT__HD uint16_t ftrt__f32_to_h16(int dtype, float f)
{
    return dtype == FTRT__K_BF16 ? ftrt__f32_to_bf16(f) : ftrt__f32_to_fp16(f);
}

/* Reduction ops on 16-bit elements (values of ftrt_op). */
enum { FTRT__H_SUM = 0, FTRT__H_MIN = 1, FTRT__H_MAX = 2 };

/* The quiet NaN a 16-bit reduction yields when its result is NaN (positive, canonical). */
FTRT__HD uint16_t ftrt__h16_nan(int dtype) { return dtype == FTRT__K_BF16 ? 0x7FC0 : 0x7E00; }

/* a op b for 16-bit elements of dtype (see the file comment). Bitwise commutative, as MPI's
 * commutative operations must be for every rank to get the same bits: a NaN result is the
 * canonical ftrt__h16_nan whatever the operands' signs and payloads, and min / max order -0
 * below +0. */
FTRT__HD uint16_t ftrt__h16_op(int dtype, int op, uint16_t a, uint16_t b)
{
    float x = ftrt__h16_to_f32(dtype, a), y = ftrt__h16_to_f32(dtype, b);
    if (op == FTRT__H_SUM) {
        float z = x + y;
        return z != z ? ftrt__h16_nan(dtype) : ftrt__f32_to_h16(dtype, z);
    }
    if (x != x || y != y) return ftrt__h16_nan(dtype);
    if (x == y) /* the same bits, or +0 and -0: min takes -0 (0x8000 > 0), max +0 */
        return op == FTRT__H_MIN ? (a > b ? a : b) : (a < b ? a : b);
    int take_b = op == FTRT__H_MIN ? y < x : y > x;
    return take_b ? b : a;
}

#endif

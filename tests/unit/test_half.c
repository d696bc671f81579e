/*
 * Unit tests: the 16-bit float formats of the data plane (kernels/half.h) and the CPU plane's
 * MPI reduction functions over them (ftrt__h16_reduce, comm/mpi_plane.c), checked without MPI.
 *
 * Widening is checked for all 65,536 bit patterns of each format against the formats'
 * definitions (ldexp of the fields); narrowing for every pair of neighbouring finite 16-bit
 * values (their midpoint rounds to the even one, one float32 ulp either side to the nearer),
 * at the overflow threshold, for subnormals and below the smallest subnormal, and for 2^20
 * random float32 bit patterns against a nearest-even search over the sorted 16-bit values.
 * The reductions: sums equal the correctly rounded 16-bit sum (the exact sum in double,
 * narrowed through that search), specials (inf - inf, overflow, NaN, signed zeros), min / max,
 * and bitwise commutativity over random pairs (MPI needs it of a commutative operation). The
 * 16-bit scaling of the CPU reference kernels (kernels_ref.c) is checked too.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "comm/plane.h"
#include "ftrt.h"
#include "kernels/half.h"
#include "kernels/kernels.h"

static const int DTS[2] = {FTRT__K_BF16, FTRT__K_F16};

static uint32_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

/* The value of 16-bit pattern h by the format's definition (NaN for NaNs). */
static double def_value(int dt, uint16_t h)
{
    int neg = h >> 15;
    int ebits = dt == FTRT__K_BF16 ? 8 : 5, mbits = dt == FTRT__K_BF16 ? 7 : 10;
    int bias = (1 << (ebits - 1)) - 1;
    int e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
    double v;
    if (e == (1 << ebits) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, 1 - bias - mbits);
    else v = ldexp(m + (1 << mbits), e - bias - mbits);
    return neg ? -v : v;
}

static int is_nan16(int dt, uint16_t h)
{
    return dt == FTRT__K_BF16 ? (h & 0x7FFF) > 0x7F80 : (h & 0x7FFF) > 0x7C00;
}

static uint16_t inf16(int dt) { return dt == FTRT__K_BF16 ? 0x7F80 : 0x7C00; }

/* Nearest-even narrowing of a finite |v| (a double) by search over the positive patterns:
 * the reference the conversions and sums are compared with. */
static uint16_t ref_narrow(int dt, double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    unsigned lo = 0, hi = inf16(dt); /* value(lo) <= a, looking below hi */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (def_value(dt, (uint16_t)mid) <= a) lo = mid;
        else hi = mid;
    }
    /* the next value above lo: the pattern hi, whose value as a normal past the largest
     * finite is 2^(emax+1) (ties there round to infinity, as IEEE's rounding does) */
    double vlo = def_value(dt, (uint16_t)lo);
    double vhi = hi == inf16(dt) ? (dt == FTRT__K_BF16 ? ldexp(1, 128) : 65536.0)
                                 : def_value(dt, (uint16_t)hi);
    if (a >= vhi) return (uint16_t)(sign | inf16(dt));
    double dl = a - vlo, dh = vhi - a;
    unsigned r = dl < dh ? lo : dh < dl ? hi : (lo & 1 ? hi : lo);
    return (uint16_t)(sign | r);
}

static void widen_all_patterns(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++)
        for (unsigned h = 0; h < 65536; h++) {
            double want = def_value(DTS[d], (uint16_t)h);
            float got = ftrt__h16_to_f32(DTS[d], (uint16_t)h);
            if (isnan(want)) {
                assert_true(isnan(got));
                assert_int_equal(!!signbit(got), h >> 15);
                assert_true(is_nan16(DTS[d], ftrt__f32_to_h16(DTS[d], got)));
                continue;
            }
            assert_true((double)got == want);
            assert_int_equal(!!signbit(got), h >> 15); /* -0 stays -0 */
            assert_int_equal(ftrt__f32_to_h16(DTS[d], got), h); /* round trip */
        }
    /* PyTorch's NaNs: bfloat16 0x7FC0 whatever the sign, fp16 sign | 0x7E00 */
    assert_int_equal(ftrt__f32_to_bf16(-NAN), 0x7FC0);
    assert_int_equal(ftrt__f32_to_fp16(NAN), 0x7E00);
    assert_int_equal(ftrt__f32_to_fp16(-NAN), 0xFE00);
}

static void narrow_neighbours(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        int dt = DTS[d];
        for (unsigned h = 0; h < inf16(dt); h++) { /* h and h + 1: neighbours (h+1 may be inf) */
            double lo = def_value(dt, (uint16_t)h);
            double hi = h + 1 == inf16(dt) ? (dt == FTRT__K_BF16 ? ldexp(1, 128) : 65536.0)
                                           : def_value(dt, (uint16_t)(h + 1));
            float mid = (float)((lo + hi) / 2); /* exact: 16-bit midpoints fit in float32 */
            assert_true((double)mid == (lo + hi) / 2);
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            assert_int_equal(ftrt__f32_to_h16(dt, mid), even);
            assert_int_equal(ftrt__f32_to_h16(dt, -mid), even | 0x8000);
            assert_int_equal(ftrt__f32_to_h16(dt, nextafterf(mid, 0.0f)), h);
            assert_int_equal(ftrt__f32_to_h16(dt, nextafterf(mid, INFINITY)), h + 1);
        }
        assert_int_equal(ftrt__f32_to_h16(dt, INFINITY), inf16(dt));
        assert_int_equal(ftrt__f32_to_h16(dt, -INFINITY), inf16(dt) | 0x8000);
        assert_int_equal(ftrt__f32_to_h16(dt, 3.0e38f), dt == FTRT__K_BF16 ? 0x7F62 : 0x7C00);
        assert_int_equal(ftrt__f32_to_h16(dt, 1e-45f), 0x0000); /* 2^-149: below both */
        assert_int_equal(ftrt__f32_to_h16(dt, -0.0f), 0x8000);
    }
    assert_int_equal(ftrt__f32_to_fp16(65519.0f), 0x7BFF);
    assert_int_equal(ftrt__f32_to_fp16(65520.0f), 0x7C00); /* the tie past 65504 */
    assert_int_equal(ftrt__f32_to_fp16(ldexpf(1, -25)), 0x0000); /* tie: to even zero */
    assert_int_equal(ftrt__f32_to_fp16(nextafterf(ldexpf(1, -25), 1)), 0x0001);
    assert_int_equal(ftrt__f32_to_fp16(ldexpf(1023, -24) + ldexpf(1, -25)), 0x0400); /* ->normal */
}

static void narrow_random_floats(void **state)
{
    (void)state;
    uint64_t s = 42;
    for (int i = 0; i < (1 << 20); i++) {
        uint32_t u = rnd(&s);
        float f;
        memcpy(&f, &u, sizeof f);
        for (int d = 0; d < 2; d++) {
            uint16_t got = ftrt__f32_to_h16(DTS[d], f);
            if (isnan(f)) assert_true(is_nan16(DTS[d], got));
            else assert_int_equal(got, ref_narrow(DTS[d], (double)f));
        }
    }
}

static uint16_t reduce1(int dt, int op, uint16_t a, uint16_t b)
{
    ftrt__h16_reduce(dt, op, &a, &b, 1);
    return b;
}

static void reductions(void **state)
{
    (void)state;
    uint64_t s = 7;
    for (int d = 0; d < 2; d++) {
        int dt = DTS[d];
        uint16_t in[4096], io[4096], io2[4096];
        for (int i = 0; i < 4096; i++) {
            in[i] = (uint16_t)rnd(&s);
            io[i] = io2[i] = (uint16_t)rnd(&s);
        }
        for (int op = 0; op < 3; op++) {
            memcpy(io, io2, sizeof io);
            ftrt__h16_reduce(dt, op, in, io, 4096);
            for (int i = 0; i < 4096; i++) {
                double x = def_value(dt, in[i]), y = def_value(dt, io2[i]);
                /* commutative bit for bit */
                assert_int_equal(io[i], reduce1(dt, op, io2[i], in[i]));
                if (isnan(x) || isnan(y) || (op == 0 && isinf(x) && isinf(y) && x != y)) {
                    assert_int_equal(io[i], ftrt__h16_nan(dt));
                } else if (op == 0) {
                    double sum = x + y; /* exact in double unless far apart: then x or y wins */
                    if (isinf(sum)) assert_int_equal(io[i] & 0x7FFF, inf16(dt));
                    else if (!(x == 0 && y == 0)) assert_int_equal(io[i], ref_narrow(dt, sum));
                } else {
                    double want = op == 1 ? fmin(x, y) : fmax(x, y);
                    assert_true(def_value(dt, io[i]) == want);
                }
            }
        }
        uint16_t one = ftrt__f32_to_h16(dt, 1.0f), mx = dt == FTRT__K_BF16 ? 0x7F7F : 0x7BFF;
        assert_int_equal(reduce1(dt, 0, one, one), ftrt__f32_to_h16(dt, 2.0f));
        assert_int_equal(reduce1(dt, 0, mx, mx), inf16(dt));                  /* overflow */
        assert_int_equal(reduce1(dt, 0, inf16(dt), inf16(dt) | 0x8000), ftrt__h16_nan(dt));
        assert_int_equal(reduce1(dt, 0, 0x8000, 0x8000), 0x8000);              /* -0 + -0 */
        assert_int_equal(reduce1(dt, 0, 0x0000, 0x8000), 0x0000);              /* +0 + -0 */
        assert_int_equal(reduce1(dt, 1, 0x0000, 0x8000), 0x8000);              /* min: -0 */
        assert_int_equal(reduce1(dt, 1, 0x8000, 0x0000), 0x8000);
        assert_int_equal(reduce1(dt, 2, 0x8000, 0x0000), 0x0000);              /* max: +0 */
        assert_int_equal(reduce1(dt, 2, 0xFFFF, one), ftrt__h16_nan(dt));      /* -NaN wins */
        assert_int_equal(reduce1(dt, 1, one, 0xFFFF), ftrt__h16_nan(dt));
    }
    /* a sum that needs rounding: 256 + 1 in bfloat16 (8 significant bits) ties to even 256;
     * 2049 in fp16 (11 bits) ties to 2048, 2051 to 2052 */
    assert_int_equal(reduce1(FTRT__K_BF16, 0, 0x4380, 0x3F80), 0x4380);
    assert_int_equal(reduce1(FTRT__K_F16, 0, ftrt__f32_to_fp16(2048), ftrt__f32_to_fp16(1)),
                     ftrt__f32_to_fp16(2048));
    assert_int_equal(reduce1(FTRT__K_F16, 0, ftrt__f32_to_fp16(2050), ftrt__f32_to_fp16(1)),
                     ftrt__f32_to_fp16(2052));
}

static void reference_scaling(void **state)
{
    (void)state;
    uint64_t s = 3;
    for (int d = 0; d < 2; d++) {
        int dt = DTS[d];
        uint16_t src[1001], a[1001], b[1001];
        for (int i = 0; i < 1001; i++) src[i] = (uint16_t)rnd(&s);
        memcpy(a, src, sizeof a);
        ftrt__k_scale(a, 1001, dt, 1.0 / 3.0);
        ftrt__seg segs[2] = {{b, 2 * 500}, {b + 500, 2 * 501}};
        for (size_t off = 0; off < sizeof src; off += 2 * 99) { /* ranges of 99 elements */
            size_t len = sizeof src - off < 2 * 99 ? sizeof src - off : 2 * 99;
            ftrt__k_unpack_scale_range(src, segs, 2, off, len, dt, 1.0 / 3.0);
        }
        for (int i = 0; i < 1001; i++) {
            float want = ftrt__h16_to_f32(dt, src[i]) * (float)(1.0 / 3.0);
            if (want != want) {
                assert_true(is_nan16(dt, a[i]));
            } else {
                assert_int_equal(a[i], ftrt__f32_to_h16(dt, want));
                assert_int_equal(a[i], ref_narrow(dt, (double)want));
            }
            assert_int_equal(b[i], a[i]);
        }
        assert_int_equal(ftrt__k_esize(dt), 2);
        assert_true(ftrt__k_scalable(dt));
    }
    assert_int_equal(ftrt__k_esize(5), 0);
    assert_false(ftrt__k_scalable(FTRT__K_I64));
}

/* The plane's dtype table: the 16-bit types travel as MPI_UINT16_T with ftrt's own
 * operations; unknown dtypes and ops are refused (no MPI call is made for the others). */
static void mpi_reduction_table(void **state)
{
    (void)state;
    MPI_Datatype t;
    MPI_Op o;
    size_t es = 99;
    assert_int_equal(ftrt__mpi_reduction(FTRT_FLOAT32, FTRT_SUM, &t, &o, &es), 0);
    assert_true(t == MPI_FLOAT && o == MPI_SUM && es == 4);
    assert_int_equal(ftrt__mpi_reduction(FTRT_INT64, FTRT_MIN, &t, &o, &es), 0);
    assert_true(t == MPI_INT64_T && o == MPI_MIN && es == 8);
    assert_int_equal(ftrt__mpi_reduction(5, FTRT_SUM, &t, &o, &es), FTRT_EINVAL);
    assert_true(t == MPI_DATATYPE_NULL && o == MPI_OP_NULL && es == 0);
    assert_int_equal(ftrt__mpi_reduction(FTRT_BFLOAT16, 3, &t, &o, &es), FTRT_EINVAL);
    assert_int_equal(ftrt__mpi_reduction(-1, FTRT_MAX, &t, &o, &es), FTRT_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(widen_all_patterns),
                                       cmocka_unit_test(narrow_neighbours),
                                       cmocka_unit_test(narrow_random_floats),
                                       cmocka_unit_test(reductions),
                                       cmocka_unit_test(reference_scaling),
                                       cmocka_unit_test(mpi_reduction_table)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: the CPU's peak FLOP/s for eMFU (base/cpu_peak.c): the table's row for made-up
 * /proc/cpuinfo texts of known CPUs and dtypes, the clock, the cores and SMT siblings, the
 * split among ranks and the affinity mask, the refusals, the count of the trainers on a host,
 * and the public ftrt_cpu_peak_flops() on this machine. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/cpu_peak.h"

#define near(a, b) assert_true(fabs((a) - (b)) <= 1e-9 * fabs(b))

/* Two processors of a made-up Intel Xeon with AMX (Sapphire Rapids' flags), 56 cores and 112
 * threads per package, at 2100 MHz. */
static const char spr[] =
    "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
    "cpu MHz\t\t: 2100.000\nsiblings\t: 112\ncpu cores\t: 56\n"
    "flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile "
    "amx_int8\n\n"
    "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\ncpu MHz\t\t: 800.000\n"
    "flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16\n";

/* This kind of VM: AMD EPYC (family 25 = 19h, Zen 4), 2 vCPUs, no cpufreq, no siblings lines. */
static const char zen4[] =
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
    "model name\t: AMD EPYC\ncpu MHz\t\t: 2596.152\n"
    "flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512_bf16 avx512_vnni\n";

/* Haswell: AVX2 and FMA, no AVX-512, no bf16 unit. */
static const char hsw[] =
    "vendor_id\t: GenuineIntel\ncpu family\t: 6\ncpu MHz\t\t: 2300.0\n"
    "flags\t\t: fpu sse sse2 avx fma avx2\n";

/* An AMD part with FMA4 only (Bulldozer): "fma4" is not "fma", so the AVX row. */
static const char fma4[] =
    "vendor_id\t: AuthenticAMD\ncpu family\t: 21\ncpu MHz\t\t: 3000.0\n"
    "flags\t\t: fpu sse sse2 avx fma4\n";

static const char arm[] = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm\n";

static double peak(const char *text, double cpufreq, int online, int affinity, ftrt_dtype d,
                   int ranks, char *src, size_t cap)
{
    ftrt__cpu_host h = {.cpuinfo = text, .cpufreq_max_mhz = cpufreq, .online = online,
                        .affinity = affinity};
    double f = -1;
    assert_int_equal(ftrt__cpu_peak(&h, d, ranks, &f, src, cap), 0);
    return f;
}

static void intel_amx_table(void **state)
{
    (void)state;
    char src[512];
    /* 224 online CPUs, 2 threads per core: 112 cores */
    near(peak(spr, 0, 224, 224, FTRT_BFLOAT16, 1, src, sizeof src), 112 * 2100e6 * 1024);
    assert_non_null(strstr(src, "amx_bf16"));
    assert_non_null(strstr(src, "SMT siblings counted once"));
    /* no amx_fp16 (Granite Rapids has it): AVX512-FP16 */
    near(peak(spr, 0, 224, 224, FTRT_FLOAT16, 1, NULL, 0), 112 * 2100e6 * 128);
    near(peak(spr, 0, 224, 224, FTRT_FLOAT32, 1, NULL, 0), 112 * 2100e6 * 64);
    near(peak(spr, 0, 224, 224, FTRT_FLOAT64, 1, NULL, 0), 112 * 2100e6 * 32);
    /* split among 4 ranks; the highest "cpu MHz" is the clock, not the first (800) */
    near(peak(spr, 0, 224, 224, FTRT_FLOAT32, 4, src, sizeof src), 28 * 2100e6 * 64);
    assert_non_null(strstr(src, "4 rank(s) sharing"));
    /* cpufreq's max (boost) wins over cpuinfo's clock */
    near(peak(spr, 3800, 224, 224, FTRT_FLOAT32, 1, src, sizeof src), 112 * 3800e6 * 64);
    assert_non_null(strstr(src, "cpufreq max"));
}

static void zen4_is_halved(void **state)
{
    (void)state;
    char src[512];
    /* 6 processes on 2 cores, 4 of them trainers: half a core each */
    near(peak(zen4, 0, 2, 2, FTRT_FLOAT32, 4, src, sizeof src), 0.5 * 2596.152e6 * 32);
    assert_non_null(strstr(src, "AMD family 19h"));
    assert_non_null(strstr(src, "/proc/cpuinfo, no cpufreq"));
    near(peak(zen4, 0, 2, 2, FTRT_BFLOAT16, 4, NULL, 0), 0.5 * 2596.152e6 * 64);
    near(peak(zen4, 0, 2, 2, FTRT_FLOAT64, 1, NULL, 0), 2 * 2596.152e6 * 16);
    /* no fp16 unit: the fp32 rate, and the source says so */
    near(peak(zen4, 0, 2, 2, FTRT_FLOAT16, 1, src, sizeof src), 2 * 2596.152e6 * 32);
    assert_non_null(strstr(src, "at the fp32 rate"));
}

static void older_units(void **state)
{
    (void)state;
    near(peak(hsw, 0, 8, 8, FTRT_FLOAT32, 1, NULL, 0), 8 * 2300e6 * 32);
    near(peak(hsw, 0, 8, 8, FTRT_FLOAT64, 2, NULL, 0), 4 * 2300e6 * 16);
    near(peak(hsw, 0, 8, 8, FTRT_BFLOAT16, 1, NULL, 0), 8 * 2300e6 * 32); /* as fp32 */
    near(peak(fma4, 0, 4, 4, FTRT_FLOAT32, 1, NULL, 0), 4 * 3000e6 * 16);
}

static void affinity_and_ranks(void **state)
{
    (void)state;
    char src[512];
    /* 8 cores for 2 ranks is 4 each, but a mask of 1 CPU holds the rank to 1 core */
    near(peak(hsw, 0, 8, 1, FTRT_FLOAT32, 2, src, sizeof src), 1 * 2300e6 * 32);
    assert_non_null(strstr(src, "affinity"));
    /* more ranks than cores: fractions of a core */
    near(peak(hsw, 0, 2, 2, FTRT_FLOAT32, 6, NULL, 0), 2.0 / 6 * 2300e6 * 32);
    /* unknown affinity (0): no limit */
    near(peak(hsw, 0, 8, 0, FTRT_FLOAT32, 1, NULL, 0), 8 * 2300e6 * 32);
}

static void refusals(void **state)
{
    (void)state;
    char src[256];
    double f = 1;
    ftrt__cpu_host h = {.cpuinfo = arm, .online = 4, .affinity = 4};
    assert_int_equal(ftrt__cpu_peak(&h, FTRT_FLOAT32, 1, &f, src, sizeof src), FTRT_ENOTSUP);
    assert_true(f == 0 && strstr(src, "not an x86"));
    h.cpuinfo = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse sse2 avx fma\n"; /* no clock */
    assert_int_equal(ftrt__cpu_peak(&h, FTRT_FLOAT32, 1, &f, src, sizeof src), FTRT_ENOTSUP);
    assert_non_null(strstr(src, "no clock"));
    h.cpuinfo = hsw;
    h.online = 0;
    assert_int_equal(ftrt__cpu_peak(&h, FTRT_FLOAT32, 1, &f, src, sizeof src), FTRT_ENOTSUP);
    h.online = 4;
    assert_int_equal(ftrt__cpu_peak(&h, FTRT_INT64, 1, &f, NULL, 0), FTRT_EINVAL);
    assert_int_equal(ftrt__cpu_peak(&h, (ftrt_dtype)7, 1, &f, NULL, 0), FTRT_EINVAL);
    assert_int_equal(ftrt__cpu_peak(&h, FTRT_FLOAT32, 0, &f, NULL, 0), FTRT_EINVAL);
    assert_int_equal(ftrt__cpu_peak(&h, FTRT_FLOAT32, 1, NULL, NULL, 0), FTRT_EINVAL);
    assert_int_equal(ftrt_cpu_peak_flops(FTRT_FLOAT32, 0, &f, NULL, 0), FTRT_EINVAL);
    assert_int_equal(ftrt_cpu_peak_flops(FTRT_FLOAT32, 1, &f, src, 0), FTRT_EINVAL);
    assert_int_equal(ftrt_cpu_peak_flops(FTRT_INT64, 1, &f, NULL, 0), FTRT_EINVAL);
}

static void host_trainers(void **state)
{
    (void)state;
    assert_int_equal(ftrt__host_trainers_of(6, 6, 4), 4); /* one host: exact */
    assert_int_equal(ftrt__host_trainers_of(3, 6, 4), 1); /* 2 hosts x 3: a lower bound */
    assert_int_equal(ftrt__host_trainers_of(0, 6, 4), 1); /* the launcher did not say */
    assert_int_equal(ftrt__host_trainers_of(7, 9, 6), 4);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "5", 1);
    assert_int_equal(ftrt__launcher_local_size(), 5);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "5x", 1);
    setenv("MPI_LOCALNRANKS", "3", 1);
    assert_int_equal(ftrt__launcher_local_size(), 3);
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    unsetenv("MPI_LOCALNRANKS");
    assert_int_equal(ftrt__launcher_local_size(), 0);
    assert_int_equal(ftrt_host_trainers(NULL), FTRT_EINVAL);
}

/* This machine: a figure and its source on x86, else FTRT_ENOTSUP; a short buffer is cut and
 * still NUL-terminated. */
static void this_machine(void **state)
{
    (void)state;
    char src[512], small[16];
    double f = -1, g = -1;
    int rc = ftrt_cpu_peak_flops(FTRT_FLOAT32, 1, &f, src, sizeof src);
#if defined(__x86_64__) || defined(__i386__)
    assert_int_equal(rc, 0);
    assert_true(f > 1e8 && f < 1e16);
    assert_non_null(strstr(src, "GFLOP/s"));
    assert_int_equal(ftrt_cpu_peak_flops(FTRT_FLOAT32, 2, &g, small, sizeof small), 0);
    assert_true(g <= f && g >= f / 2 * (1 - 1e-12)); /* f / 2 unless the affinity mask binds */
    assert_int_equal(strlen(small), sizeof small - 1);
#else
    assert_true(rc == 0 || rc == FTRT_ENOTSUP);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(intel_amx_table), cmocka_unit_test(zen4_is_halved),
        cmocka_unit_test(older_units),     cmocka_unit_test(affinity_and_ranks),
        cmocka_unit_test(refusals),        cmocka_unit_test(host_trainers),
        cmocka_unit_test(this_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

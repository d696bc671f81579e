/*
 * cpu_peak.c - the peak FLOP/s of a rank on the CPU, for eMFU: an upper bound of what the
 * hardware can do, split among the ranks that share the host's cores (ftrt_cpu_peak_flops(),
 * ftrt_host_trainers(); docs/goodput-ledger.md "Peak FLOP/s of CPUs").
 *
 * peak = cores of the rank x clock x dense FLOPs per cycle of one core's widest vector or
 * matrix unit for the dtype (a fused multiply-add is 2 FLOPs), where
 *   - FLOPs per cycle come from the table below, chosen by the flags of /proc/cpuinfo (the
 *     first processor's; x86 only). Its figures are the issue widths of Intel's 64 and IA-32
 *     Architectures Optimization Reference Manual (2 FMA ports for AVX2 and AVX-512 since
 *     Haswell and Skylake-SP; AMX: TDPBF16PS / TDPFP16PS, a 16x16x32 tile product every 16
 *     cycles, 1024 FLOP/cycle) and of AMD's Software Optimization Guides (families 17h and 19h:
 *     two FMA pipes; 19h (Zen 4) runs a 512-bit operation as two 256-bit halves on them, so
 *     its AVX-512 rows are halved; family 1Ah (Zen 5) has 512-bit pipes). Where cpuinfo cannot
 *     tell how many FMA units a core has (Xeon Bronze and some Silver parts have one 512-bit
 *     FMA unit, Zen 1 two 128-bit ones) the table takes the larger count, so the figure stays
 *     an upper bound. bf16 or fp16 without a unit of their own is converted to fp32 and
 *     computed at the fp32 rate.
 *   - the clock is the highest that cpufreq reports (cpuinfo_max_freq, boost included), else
 *     the highest "cpu MHz" of /proc/cpuinfo (in a VM without cpufreq: the clock the
 *     hypervisor reports, which a boost clock of the host may exceed).
 *   - the cores: the host's online logical CPUs over the threads per core ("siblings" / "cpu
 *     cores"), split evenly among the ranks that share them, and never more than the logical
 *     CPUs of the caller's affinity mask.
 * Counting the ranks (ftrt_host_trainers()): the launcher's processes on this host less the
 * job's processes that are not trainers, a lower bound of the trainers here, since a smaller
 * count only raises each rank's peak.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu_peak.h"

/* One row: a core with cpuinfo flag `flag` does `fpc` dense FLOPs per cycle of `dtype`. */
typedef struct peak_row {
    ftrt_dtype dtype;
    const char *flag;
    int wide512;      /* a 512-bit unit: halved on AMD family 19h */
    double fpc;       /* FLOPs per cycle per core */
    const char *unit; /* how fpc is made up */
} peak_row;

/* Widest first: the first row of the dtype whose flag the CPU has is used. */
static const peak_row rows[] = {
    {FTRT_BFLOAT16, "amx_bf16", 0, 1024,
     "AMX-BF16 (amx_bf16): TDPBF16PS, 16x16x32 products every 16 cycles"},
    {FTRT_BFLOAT16, "avx512_bf16", 1, 128,
     "AVX512_BF16 (avx512_bf16): 2 units x VDPBF16PS 32 products x 2"},
    {FTRT_FLOAT16, "amx_fp16", 0, 1024,
     "AMX-FP16 (amx_fp16): TDPFP16PS, 16x16x32 products every 16 cycles"},
    {FTRT_FLOAT16, "avx512_fp16", 1, 128, "AVX512-FP16 (avx512_fp16): 2 FMA units x 32 lanes x 2"},
    {FTRT_FLOAT32, "avx512f", 1, 64, "AVX-512 (avx512f): 2 FMA units x 16 fp32 lanes x 2"},
    {FTRT_FLOAT32, "fma", 0, 32, "AVX2 (fma): 2 FMA units x 8 fp32 lanes x 2"},
    {FTRT_FLOAT32, "avx", 0, 16, "AVX (avx, no fma): 1 add + 1 multiply unit x 8 fp32 lanes"},
    {FTRT_FLOAT32, "sse2", 0, 8, "SSE2 (sse2): 1 add + 1 multiply unit x 4 fp32 lanes"},
    {FTRT_FLOAT64, "avx512f", 1, 32, "AVX-512 (avx512f): 2 FMA units x 8 fp64 lanes x 2"},
    {FTRT_FLOAT64, "fma", 0, 16, "AVX2 (fma): 2 FMA units x 4 fp64 lanes x 2"},
    {FTRT_FLOAT64, "avx", 0, 8, "AVX (avx, no fma): 1 add + 1 multiply unit x 4 fp64 lanes"},
    {FTRT_FLOAT64, "sse2", 0, 4, "SSE2 (sse2): 1 add + 1 multiply unit x 2 fp64 lanes"},
};

/* What the peak reads of /proc/cpuinfo. */
typedef struct cpuinfo {
    char flags[4096];  /* the first "flags" line's value, space-padded at both ends */
    char vendor[32];
    int family, siblings, cores;
    double mhz;        /* the highest "cpu MHz" */
} cpuinfo;

/* The value of line `line` ("key<tabs>: value") when its key is `key`, else NULL. */
static const char *value_of(const char *line, const char *key)
{
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0) return NULL;
    const char *p = line + n;
    while (*p == ' ' || *p == '\t') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static void parse_line(cpuinfo *ci, const char *line, size_t len)
{
    const char *v;
    char buf[4096];
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = 0;
    if ((v = value_of(buf, "flags")) && !ci->flags[0])
        snprintf(ci->flags, sizeof ci->flags, " %s ", v);
    else if ((v = value_of(buf, "vendor_id")) && !ci->vendor[0])
        snprintf(ci->vendor, sizeof ci->vendor, "%s", v);
    else if ((v = value_of(buf, "cpu family")) && ci->family < 0)
        ci->family = atoi(v);
    else if ((v = value_of(buf, "siblings")) && ci->siblings <= 0)
        ci->siblings = atoi(v);
    else if ((v = value_of(buf, "cpu cores")) && ci->cores <= 0)
        ci->cores = atoi(v);
    else if ((v = value_of(buf, "cpu MHz")) && atof(v) > ci->mhz)
        ci->mhz = atof(v);
}

static void parse(const char *text, cpuinfo *ci)
{
    memset(ci, 0, sizeof *ci);
    ci->family = -1;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        parse_line(ci, p, len);
        p += len + (e != NULL);
    }
}

static int has_flag(const cpuinfo *ci, const char *flag)
{
    char word[64];
    snprintf(word, sizeof word, " %s ", flag);
    return strstr(ci->flags, word) != NULL;
}

static const char *dtype_name(ftrt_dtype d)
{
    switch (d) {
    case FTRT_FLOAT32: return "fp32";
    case FTRT_FLOAT64: return "fp64";
    case FTRT_BFLOAT16: return "bf16";
    case FTRT_FLOAT16: return "fp16";
    default: return "?";
    }
}

/* The table's row for `d` on this CPU, or NULL; *as_fp32 = 1 when a 16-bit dtype without a
 * unit of its own takes the fp32 row. */
static const peak_row *pick(const cpuinfo *ci, ftrt_dtype d, int *as_fp32)
{
    *as_fp32 = 0;
    for (int pass = 0; pass < 2; pass++) {
        ftrt_dtype want = pass == 0 ? d : FTRT_FLOAT32;
        if (pass == 1 && d != FTRT_BFLOAT16 && d != FTRT_FLOAT16) break;
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            if (rows[i].dtype == want && has_flag(ci, rows[i].flag)) {
                *as_fp32 = pass;
                return &rows[i];
            }
    }
    return NULL;
}

/* Appends to src (cap bytes, always NUL-terminated when cap > 0). */
static void say(char *src, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *src, size_t cap, const char *fmt, ...)
{
    if (!src || cap == 0) return;
    size_t n = strnlen(src, cap - 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(src + n, cap - n, fmt, ap);
    va_end(ap);
}

int ftrt__cpu_peak(const ftrt__cpu_host *h, ftrt_dtype dtype, int ranks, double *flops,
                   char *src, size_t cap)
{
    if (src && cap) src[0] = 0;
    if (flops) *flops = 0;
    if (!flops || !h || !h->cpuinfo || ranks < 1 ||
        (dtype != FTRT_FLOAT32 && dtype != FTRT_FLOAT64 && dtype != FTRT_BFLOAT16 &&
         dtype != FTRT_FLOAT16))
        return FTRT_EINVAL;
    cpuinfo *ci = malloc(sizeof *ci);
    if (!ci) return -ENOMEM;
    parse(h->cpuinfo, ci);
    int as_fp32, rc = 0;
    const peak_row *r = pick(ci, dtype, &as_fp32);
    double mhz = h->cpufreq_max_mhz > ci->mhz ? h->cpufreq_max_mhz : ci->mhz;
    int tpc = ci->cores > 0 && ci->siblings >= ci->cores ? ci->siblings / ci->cores : 1;
    double cores = h->online > 0 ? (double)h->online / tpc : 0;
    double share = cores / ranks;
    if (h->affinity > 0 && h->affinity < share) share = h->affinity;
    if (!r) {
        say(src, cap, "%s: no row of ftrt's CPU table fits this CPU (%s)", dtype_name(dtype),
            ci->flags[0] ? "no x86 vector flag in /proc/cpuinfo" : "not an x86 /proc/cpuinfo");
        rc = FTRT_ENOTSUP;
    } else if (!(mhz > 0) || !(share > 0)) {
        say(src, cap, "%s: %s", dtype_name(dtype),
            mhz > 0 ? "no online CPU counted" : "no clock in /proc/cpuinfo or cpufreq");
        rc = FTRT_ENOTSUP;
    }
    if (rc) {
        free(ci);
        return rc;
    }
    int amd19 = !strcmp(ci->vendor, "AuthenticAMD") && ci->family == 0x19 && r->wide512;
    double fpc = amd19 ? r->fpc / 2 : r->fpc;
    *flops = share * mhz * 1e6 * fpc;
    say(src, cap, "%s%s: %s = %g FLOP/cycle/core", dtype_name(dtype),
        as_fp32 ? " (no unit of its own in cpuinfo: converted, at the fp32 rate)" : "",
        r->unit, r->fpc);
    if (amd19) say(src, cap, ", halved: %g (AMD family 19h: 512-bit as two 256-bit halves)", fpc);
    say(src, cap, " x %.0f MHz (%s) x %.4g core(s) (%d online CPU(s)%s / %d rank(s) sharing%s)"
        " = %.4g GFLOP/s, an upper bound (ftrt's CPU table)", mhz,
        h->cpufreq_max_mhz >= ci->mhz ? "cpufreq max" : "/proc/cpuinfo, no cpufreq", share,
        h->online, tpc > 1 ? ", SMT siblings counted once" : "", ranks,
        h->affinity > 0 && h->affinity < cores / ranks ? "; the affinity mask's CPUs" : "",
        *flops / 1e9);
    free(ci);
    return 0;
}

int ftrt__host_trainers_of(int local, int world_size, int trainers)
{
    int others = world_size - trainers;
    if (local <= 0) return 1;
    if (others < 0) others = 0;
    return local - others > 1 ? local - others : 1;
}

int ftrt__launcher_local_size(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long n = v ? strtol(v, &end, 10) : 0;
        if (v && *v && !*end && n > 0 && n < 1 << 20) return (int)n;
    }
    return 0;
}

/* The whole of /proc/cpuinfo (a malloc'd, NUL-terminated string) or NULL with *rc = -errno. */
static char *read_cpuinfo(int *rc)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) {
        *rc = -errno;
        return NULL;
    }
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - 1 - len, f);
        if (len < cap - 1) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    *rc = buf ? (ferror(f) ? -EIO : 0) : -ENOMEM;
    fclose(f);
    if (buf) buf[len] = 0;
    if (*rc) free(buf);
    return *rc ? NULL : buf;
}

/* The highest cpuinfo_max_freq of cpufreq over the online CPUs, MHz; 0 when none is there. */
static double cpufreq_max_mhz(int online)
{
    double best = 0;
    for (int c = 0; c < online && c < 4096; c++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq", c);
        FILE *f = fopen(path, "r");
        double khz = 0;
        if (!f) continue;
        if (fscanf(f, "%lf", &khz) == 1 && khz / 1000 > best) best = khz / 1000;
        fclose(f);
    }
    return best;
}

int ftrt_cpu_peak_flops(ftrt_dtype dtype, int ranks_sharing, double *flops, char *source,
                        size_t cap)
{
    if (source && cap) source[0] = 0;
    if (flops) *flops = 0;
    if (!flops || ranks_sharing < 1 || (source && cap == 0)) return FTRT_EINVAL;
    int rc;
    char *text = read_cpuinfo(&rc);
    if (!text) {
        say(source, cap, "cannot read /proc/cpuinfo: %s", strerror(-rc));
        return rc;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    ftrt__cpu_host h = {.cpuinfo = text, .online = online > 0 ? (int)online : 0,
                        .affinity = sched_getaffinity(0, sizeof set, &set) == 0
                                        ? CPU_COUNT(&set) : 0};
    h.cpufreq_max_mhz = cpufreq_max_mhz(h.online);
    rc = ftrt__cpu_peak(&h, dtype, ranks_sharing, flops, source, cap);
    free(text);
    return rc;
}

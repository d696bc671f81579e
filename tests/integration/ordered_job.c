/*
 * ordered_job.c - the MPI job of the fixed-order allreduce's tests (ordered_itest.py;
 * ftrt_allreduce_ordered, comm/ordered.c): N = 4 logical ranks held by however many trainers
 * the job has, in the layout given on the command line, contributions generated from (seed,
 * logical rank, element), so that every trainer can compute the logical-order reference itself.
 *
 * Usage: ordered_job --layout L [--seed S] [--digest FILE] [--loop STEPS]
 *   L: the held lists of trainer 0, 1, ... separated by '|', each a comma-separated ascending
 *      list of logical ranks, e.g. "0|1|2|3" (4 trainers), "0,1|2,3" (2), "0|1,2|3" (3),
 *      "0,1,2,3" (1), "0,1||2,3" (3, one holding none); the lists must be a partition of
 *      [0, N) and there must be one per trainer.
 * For every dtype (float32, float64, int64, bfloat16, float16) and several counts (1, 3, 1001,
 * and counts of several pipelined windows), every trainer checks that the result's bytes are
 * those of out = (((c_0 + c_1) + c_2) + c_3) computed here in the dtype's own arithmetic,
 * written independently of libftrt (bfloat16 rounded by hand, float16 through the compiler's
 * _Float16), and writes nothing else; logical rank 0's trainer writes one line "dtype count
 * fnv1a64" per result to FILE, which the test compares across layouts. The values mix signs and
 * magnitudes (exponents over about 2^-20..2^20) so that another summation order changes the
 * last bits; for float32 and float64 the job also reports (never asserts) in how many elements
 * ftrt_allreduce (MPI_Iallreduce) of the same contributions differs from the logical order.
 * Before and after that, bad arguments must give FTRT_EINVAL on every trainer with `out`
 * unchanged: count 0, a NULL ctx, a NULL out on one trainer only, held not ascending or out of
 * range on one trainer, a logical rank held by two trainers, nlogical or counts that disagree,
 * held lists that do not add up, an unknown dtype. Last, each trainer holds the next trainer's
 * list for one call (another partition: the layout kept from the call before must not be used)
 * and its own again. Exit 0 when every check passed, else 1.
 * --loop STEPS runs STEPS ordered allreduces of 2,000,003 float32 instead (loop(): the test
 * kills a trainer meanwhile; an interrupted call must return FTRT_ERECOVER with out unchanged).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftrt.h"

#define N 4
#define MAXC 4500001 /* float32: 5 windows of 1 Mi elements at one held rank per trainer */

static int failures;
#define CHECK(c, ...)                                                                           \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            fprintf(stderr, "ordered_job: FAIL: " __VA_ARGS__);                                \
            fputc('\n', stderr);                                                               \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

static const ftrt_dtype dtypes[] = {FTRT_FLOAT32, FTRT_FLOAT64, FTRT_INT64, FTRT_BFLOAT16,
                                    FTRT_FLOAT16};
static const char *const dnames[] = {"float32", "float64", "int64", "bfloat16", "float16"};

static size_t esize(ftrt_dtype d)
{
    return d == FTRT_FLOAT32 ? 4 : d == FTRT_FLOAT64 || d == FTRT_INT64 ? 8 : 2;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Logical rank l's element k of dtype d: random sign and mantissa, exponent in a range that
 * keeps every sum finite (bits built directly, so no rounding in the generator). */
static void gen(void *dst, ftrt_dtype d, uint64_t seed, int l, size_t k)
{
    uint64_t r = mix(seed ^ mix((uint64_t)l * 0x100000001B3ull ^ mix(k + 1000003ull * d)));
    uint64_t s = r >> 63, e = (r >> 40) & 0x1F;
    if (d == FTRT_FLOAT32) {
        uint32_t u = (uint32_t)(s << 31 | (107 + e + (r >> 45 & 7)) << 23 | (r & 0x7FFFFF));
        memcpy(dst, &u, 4);
    } else if (d == FTRT_FLOAT64) {
        uint64_t u = s << 63 | (1003 + e + (r >> 45 & 7)) << 52 | (mix(r) & 0xFFFFFFFFFFFFFull);
        memcpy(dst, &u, 8);
    } else if (d == FTRT_INT64) {
        memcpy(dst, &r, 8); /* wrapping sums */
    } else if (d == FTRT_BFLOAT16) {
        uint16_t u = (uint16_t)(s << 15 | (117 + (e & 15)) << 7 | (r & 0x7F));
        memcpy(dst, &u, 2);
    } else {
        uint16_t u = (uint16_t)(s << 15 | (4 + (e & 15)) << 10 | (r & 0x3FF));
        memcpy(dst, &u, 2);
    }
}

/* bfloat16 bits -> float and float -> bfloat16 rounded to nearest even (no NaN arises here). */
static float bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* acc[k] = acc[k] + x[k] in dtype d's arithmetic (the reference, independent of libftrt). */
static void add(ftrt_dtype d, void *acc, const void *x, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (d == FTRT_FLOAT32) {
            ((float *)acc)[k] = ((float *)acc)[k] + ((const float *)x)[k];
        } else if (d == FTRT_FLOAT64) {
            ((double *)acc)[k] = ((double *)acc)[k] + ((const double *)x)[k];
        } else if (d == FTRT_INT64) {
            ((uint64_t *)acc)[k] = ((uint64_t *)acc)[k] + ((const uint64_t *)x)[k];
        } else if (d == FTRT_BFLOAT16) {
            uint16_t *a = acc;
            a[k] = f2bf(bf2f(a[k]) + bf2f(((const uint16_t *)x)[k]));
        } else {
            _Float16 *a = acc;
            a[k] = (_Float16)((float)a[k] + (float)((const _Float16 *)x)[k]);
        }
    }
}

typedef struct job {
    ftrt_ctx *ctx;
    int me, P;          /* trainer rank and count */
    int held[N], nheld; /* this trainer's logical ranks */
    int owner0;         /* the first logical rank of trainer 0 */
    uint64_t seed;
    void *c[N];         /* contributions of the held ranks (MAXC elements of 8 bytes each) */
    void *all[N];       /* every logical rank's contribution (the reference's input) */
    void *out, *ref;
    FILE *digest;
    int64_t steps_done;  /* --loop: the replicated region a promoted spare receives */
} job;

/* Reads layout s: this trainer holds group `mine` (its own: J->me). 0, or -1 when s is not one
 * list per trainer. */
static int parse_layout(job *J, const char *s, int mine)
{
    int group = 0;
    J->nheld = 0;
    for (const char *p = s; *p;) {
        if (*p == '|') { /* an empty list: that trainer holds no logical rank */
            group++;
            p++;
            continue;
        }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= N) return -1;
        if (group == 0 && p == s) J->owner0 = (int)v;
        if (group == mine) J->held[J->nheld++] = (int)v;
        p = end;
        if (*p == '|') group++;
        if (*p == ',' || *p == '|') p++;
        else if (*p) return -1;
    }
    return group + 1 == J->P && J->nheld <= N ? 0 : -1;
}

/* Generates every logical rank's count elements of d and the logical-order reference. */
static void prepare(job *J, ftrt_dtype d, size_t count)
{
    size_t es = esize(d);
    for (int l = 0; l < N; l++)
        for (size_t k = 0; k < count; k++) gen((char *)J->all[l] + k * es, d, J->seed, l, k);
    memcpy(J->ref, J->all[0], count * es);
    for (int l = 1; l < N; l++) add(d, J->ref, J->all[l], count);
    for (int i = 0; i < J->nheld; i++) memcpy(J->c[i], J->all[J->held[i]], count * es);
}

/* For float32 / float64: how many elements ftrt_allreduce (MPI_Iallreduce over the trainers)
 * of the same contributions gets otherwise than the logical order. Reported, not asserted. */
static void report_mpi(job *J, ftrt_dtype d, size_t count)
{
    size_t es = esize(d), diff = 0;
    if (J->nheld) memcpy(J->out, J->c[0], count * es);
    else memset(J->out, 0, count * es);
    for (int i = 1; i < J->nheld; i++) add(d, J->out, J->c[i], count);
    int rc = ftrt_allreduce(J->ctx, J->out, count, d, FTRT_SUM);
    CHECK(rc == 0, "ftrt_allreduce: %s", ftrt_strerror(rc));
    for (size_t k = 0; k < count; k++)
        diff += memcmp((char *)J->out + k * es, (char *)J->ref + k * es, es) != 0;
    if (J->me == 0)
        printf("ordered_job: %d trainers: ftrt_allreduce (MPI_Iallreduce) of %s, count %zu, "
               "differs from the logical-order sum in %zu elements (reported, not checked)\n",
               J->P, dnames[d], count, diff);
}

/* One ordered allreduce of dtype d, count elements (in place at c[0] when inplace): the bytes
 * must be the reference's; trainer 0 writes the digest line. */
static void one(job *J, ftrt_dtype d, size_t count, int inplace)
{
    size_t es = esize(d);
    prepare(J, d, count);
    void *out = inplace && J->nheld ? J->c[0] : J->out;
    int rc = ftrt_allreduce_ordered(J->ctx, N, J->held, J->nheld, J->c, out, count, d);
    CHECK(rc == 0, "%s count %zu: %s", dnames[d], count, ftrt_strerror(rc));
    size_t bad = 0, first = count;
    for (size_t k = 0; k < count; k++)
        if (memcmp((char *)out + k * es, (char *)J->ref + k * es, es)) {
            if (!bad) first = k;
            bad++;
        }
    CHECK(!bad, "%s count %zu%s: %zu elements differ from the logical-order reference (first %zu)",
          dnames[d], count, inplace ? " in place" : "", bad, first);
    if (J->digest && !inplace)
        fprintf(J->digest, "%s %zu %016llx\n", dnames[d], count,
                (unsigned long long)fnv1a(out, count * es));
}

/* An ordered allreduce with these arguments must be FTRT_EINVAL with out unchanged. */
static void refused(job *J, const char *what, ftrt_ctx *ctx, int n, const int *held, int nheld,
                    void *out, size_t count, ftrt_dtype d)
{
    if (out) memset(out, 0x5A, 64);
    int rc = ftrt_allreduce_ordered(ctx, n, held, nheld, J->c, out, count, d);
    CHECK(rc == FTRT_EINVAL, "%s: expected FTRT_EINVAL, got %d (%s)", what, rc,
          ftrt_strerror(rc));
    unsigned char *o = out;
    int same = 1;
    for (int i = 0; o && i < 64; i++) same &= o[i] == 0x5A;
    CHECK(same, "%s: out changed", what);
}

static void bad_arguments(job *J)
{
    int h[N];
    memcpy(h, J->held, sizeof h);
    prepare(J, FTRT_FLOAT32, 16);
    refused(J, "count 0", J->ctx, N, J->held, J->nheld, J->out, 0, FTRT_FLOAT32);
    refused(J, "NULL ctx", NULL, N, J->held, J->nheld, J->out, 16, FTRT_FLOAT32);
    refused(J, "NULL out on trainer 1", J->ctx, N, J->held, J->nheld,
            J->me == 1 % J->P ? NULL : J->out, 16, FTRT_FLOAT32);
    if (J->me == 0 && J->nheld >= 2) { /* not ascending */
        h[0] = J->held[1];
        h[1] = J->held[0];
    } else if (J->me == 0) {
        h[0] = N; /* out of range */
    }
    refused(J, "held not ascending / out of range on trainer 0", J->ctx, N, h, J->nheld, J->out,
            16, FTRT_FLOAT32);
    memcpy(h, J->held, sizeof h);
    if (J->P > 1 && J->me == J->P - 1 && J->nheld) h[0] = J->owner0; /* held twice */
    if (J->P > 1)
        refused(J, "a logical rank held by two trainers", J->ctx, N, h, J->nheld, J->out, 16,
                FTRT_FLOAT32);
    memcpy(h, J->held, sizeof h);
    refused(J, "nlogical disagrees", J->ctx, J->me == 0 ? N + 1 : N, J->held, J->nheld, J->out,
            16, FTRT_FLOAT32);
    if (J->P > 1)
        refused(J, "count disagrees", J->ctx, N, J->held, J->nheld, J->out,
                J->me == 0 ? 15 : 16, FTRT_FLOAT32);
    refused(J, "held lists short of nlogical", J->ctx, N, J->held,
            J->me == 0 && J->nheld ? J->nheld - 1 : J->nheld, J->out, 16, FTRT_FLOAT32);
    refused(J, "unknown dtype", J->ctx, N, J->held, J->nheld, J->out, 16, (ftrt_dtype)99);
    refused(J, "nlogical 0", J->ctx, 0, J->held, J->nheld, J->out, 16, FTRT_FLOAT32);
}

static void run(job *J, const char *layout)
{
    static const size_t small[] = {1, 3, 1001};
    bad_arguments(J);
    for (int t = 0; t < 5; t++) {
        ftrt_dtype d = dtypes[t];
        for (int i = 0; i < 3; i++) one(J, d, small[i], 0);
        one(J, d, d == FTRT_FLOAT32 ? MAXC : 1300001, 0); /* several windows */
        if (d == FTRT_FLOAT32 || d == FTRT_FLOAT64) report_mpi(J, d, 1001);
    }
    one(J, FTRT_FLOAT32, 1001, 1);
    one(J, FTRT_BFLOAT16, 1300001, 1);
    bad_arguments(J); /* nothing of the refused calls is left over */
    one(J, FTRT_FLOAT64, 1001, 0);
    if (J->P > 1) { /* another partition between two calls: the kept layout must not be used */
        FILE *f = J->digest;
        J->digest = NULL;
        parse_layout(J, layout, (J->me + 1) % J->P);
        one(J, FTRT_FLOAT32, 1001, 0);
        parse_layout(J, layout, J->me);
        one(J, FTRT_FLOAT32, 1001, 0);
        J->digest = f;
    }
}

/* --loop: `steps` ordered allreduces of the same LOOPC float32 contributions, each checked
 * against the reference; one that returns FTRT_ERECOVER must have left out unchanged, and the
 * job recovers and goes on (a promoted spare joins through ftrt_restore). 0 or an ftrt error. */
static int loop(job *J, int64_t steps)
{
    enum { LOOPC = 2000003 };
    int64_t step = 0;
    int interrupted = 0;
    int rc = ftrt_register(J->ctx, "step", &J->steps_done, sizeof J->steps_done,
                           FTRT_REGION_REPLICATED);
    if (rc >= 0) rc = ftrt_restore(J->ctx, &step);
    if (rc < 0) return rc;
    prepare(J, FTRT_FLOAT32, LOOPC);
    while (step < steps) {
        memset(J->out, 0x5A, (size_t)LOOPC * 4);
        rc = ftrt_allreduce_ordered(J->ctx, N, J->held, J->nheld, J->c, J->out, LOOPC,
                                    FTRT_FLOAT32);
        if (rc == FTRT_ERECOVER) {
            const unsigned char *o = J->out;
            size_t changed = 0;
            for (size_t k = 0; k < (size_t)LOOPC * 4; k++) changed += o[k] != 0x5A;
            CHECK(!changed, "step %lld: FTRT_ERECOVER but %zu bytes of out changed",
                  (long long)step, changed);
            interrupted++;
            if ((rc = ftrt_recover(J->ctx, &step)) != 0) return rc;
            continue;
        }
        if (rc) return rc;
        CHECK(!memcmp(J->out, J->ref, (size_t)LOOPC * 4), "step %lld: result differs from the "
              "logical-order reference", (long long)step);
        J->steps_done = ++step;
        ftrt_step_done(J->ctx, step - 1);
    }
    printf("ordered_job: trainer %d: %d ordered allreduce(s) returned FTRT_ERECOVER, out "
           "unchanged: %s\n", J->me, interrupted, failures ? "no" : "yes");
    return 0;
}

int main(int argc, char **argv)
{
    const char *layout = NULL, *digest = NULL;
    job J = {0};
    J.seed = 35;
    long long steps = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--layout")) layout = argv[i + 1];
        else if (!strcmp(argv[i], "--seed")) J.seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--digest")) digest = argv[i + 1];
        else if (!strcmp(argv[i], "--loop")) steps = atoll(argv[i + 1]);
    }
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    int rc = ftrt_init(&cfg, &J.ctx);
    if (rc == FTRT_DONE) return ftrt_finalize(J.ctx), 0;
    if (rc < 0) {
        fprintf(stderr, "ordered_job: ftrt_init: %s\n", ftrt_strerror(rc));
        return 1;
    }
    J.me = ftrt_rank(J.ctx);
    J.P = ftrt_size(J.ctx);
    if (!layout || parse_layout(&J, layout, J.me)) {
        fprintf(stderr, "ordered_job: --layout missing or not one list per trainer (%d)\n", J.P);
        ftrt_set_exit_code(J.ctx, FTRT_EINVAL);
        ftrt_finalize(J.ctx);
        return 2;
    }
    for (int l = 0; l < N; l++) J.all[l] = malloc((size_t)MAXC * 8);
    for (int l = 0; l < N; l++) J.c[l] = malloc((size_t)MAXC * 8);
    J.out = malloc((size_t)MAXC * 8);
    J.ref = malloc((size_t)MAXC * 8);
    if (J.me == 0 && digest) J.digest = fopen(digest, "w");
    if (steps > 0) {
        rc = loop(&J, steps);
        CHECK(rc == 0, "loop: %s", ftrt_strerror(rc));
    } else {
        run(&J, layout);
    }
    if (J.digest) fclose(J.digest);
    printf("ordered_job: trainer %d of %d (held %d): %s\n", J.me, J.P, J.nheld,
           failures ? "FAIL" : "all checks passed");
    for (int l = 0; l < N; l++) free(J.all[l]), free(J.c[l]);
    free(J.out);
    free(J.ref);
    if (failures) ftrt_set_exit_code(J.ctx, FTRT_EINVAL);
    ftrt_finalize(J.ctx);
    return failures ? 1 : 0;
}

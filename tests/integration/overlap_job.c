/*
 * overlap_job.c - a deterministic synthetic training job on the overlapped data plane, for the
 * MPI integration tests (overlap_itest.py): several parameter tensors of very different sizes,
 * a "backward pass" that produces their gradients last tensor first and marks each ready in a
 * bucketer (small buckets, so a step has several in flight), the mean applied as SGD, and every
 * few steps a raw ftrt_allreduce_start of a statistics vector folded into the parameters. The
 * gradients mix magnitudes so that a different summation order would change the last bits: the
 * final parameters are byte-identical across runs only if every reduction is.
 *
 * Usage: overlap_job --steps N --ckpt-dir D [--params-out F] [--step-sleep-ms M]
 *                    [--ckpt-every K] [--mpi-funneled]
 * --mpi-funneled: the job initializes MPI itself at MPI_THREAD_FUNNELED before ftrt_init(), so
 * overlapped collectives fall back to progress inside ftrt calls.
 * Logical rank 0 writes the final parameters (raw float32, tensor after tensor) to F and prints
 * their FNV-1a hash.
 *
 * Before the first step (epoch 0) every trainer also checks the 16-bit dtypes on the CPU plane
 * (issue 21): FTRT_BFLOAT16 and FTRT_FLOAT16 through ftrt_allreduce (SUM, MIN, MAX) and
 * ftrt_allreduce_start (SUM) of small integers, whose sums are exact in any order, and of
 * infinities and NaNs (an integer sum of the bit patterns, or a wrong MPI datatype, fails it);
 * so the MPI user operations run in every overlap job, under ASan/UBSan too. An unknown dtype
 * must be refused with FTRT_EINVAL and an error naming it, which libftrt logs at ERROR: that
 * deliberate line is kept out of the job's log (unknown_dtype_refused()).
 *
 * The broadcast (ftrt_broadcast, ftrt_broadcast_start) is checked the same way before the first
 * step (bcast_selftest(): from every root, in three dtypes, every trainer ends with the root's
 * bytes, NaN payloads included; a root outside [0, size) is refused), and runs in the training
 * as DDP's broadcast_buffers does: every 5th step (step % 5 == 2) each trainer computes a
 * "running statistic" of its own gradients and the trainer of logical rank step % size
 * broadcasts its one, overlapped with the update (ftrt_broadcast_start) or before it
 * (ftrt_broadcast, step % 10 == 7), and everyone folds it into the parameters. A broadcast that
 * delivered anything but that root's bytes, or one of a dead epoch that landed, changes the
 * final parameters.
 *
 * Reduce-scatter and all-gather (ftrt_reduce_scatter, ftrt_allgather and their _start forms)
 * are checked before the first step too (rsag_selftest(): every dtype, blocking and
 * overlapped, small counts and counts of several pipelined chunks, SUM / MIN / MAX, against
 * values computed here; the buffers aliased at a block as MPI_IN_PLACE; NULL buffers and a
 * misaligned overlap refused), and run in the training as ZeRO does: every third step
 * (step % 3 == 1, before the update) each trainer reduce-scatters a vector made of its
 * gradients, "updates" its shard, all-gathers the shards and folds the gathered vector into
 * tensor 2 in the update (sharded_step(); blocking on odd steps / 3, overlapped on even ones).
 * A block reduced or placed wrong, or a collective of a dead epoch that landed, changes the
 * final parameters.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "ftrt.h"

#define T 7
/* tensor 2 (4.8 MB) is above the engine's 4 MiB chunk: its bucket is pipelined in 2 chunks */
static const size_t counts[T] = {1000, 1, 1200000, 77, 40000, 3, 120000};

static void sleep_ms(double ms)
{
    if (ms <= 0) return;
    long ns = (long)(ms * 1e6);
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Bits of the small integer v (|v| < 2048) as bfloat16 or fp16 (exact). */
static uint16_t h16_int(ftrt_dtype dt, int v)
{
    if (dt == FTRT_BFLOAT16) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        return (uint16_t)(u >> 16);
    }
    if (v == 0) return 0;
    unsigned a = (unsigned)(v < 0 ? -v : v);
    int e = 31 - __builtin_clz(a);
    return (uint16_t)((v < 0 ? 0x8000u : 0u) | (unsigned)(e + 15) << 10 |
                      ((a << (10 - e)) & 0x3FFu));
}

enum { H16N = 3001 };

/* Rank r's element k: an integer in [-8, 8] + r; elements 0..3 special (see h16_want). */
static void h16_fill(uint16_t *x, ftrt_dtype dt, int r)
{
    uint16_t inf = dt == FTRT_BFLOAT16 ? 0x7F80 : 0x7C00, nan = dt == FTRT_BFLOAT16 ? 0x7FC1 : 0x7E01;
    uint16_t big = dt == FTRT_BFLOAT16 ? 0x7F7F : 0x7BFF; /* the largest finite */
    for (int k = 0; k < H16N; k++) x[k] = h16_int(dt, (k % 17) - 8 + r);
    x[0] = r == 0 ? inf : h16_int(dt, 1);
    x[1] = r == 0 ? nan : h16_int(dt, 1);
    x[2] = r == 0 ? inf : r == 1 ? (uint16_t)(inf | 0x8000) : h16_int(dt, 2);
    x[3] = big;
}

static int h16_is_nan(ftrt_dtype dt, uint16_t h)
{
    return (h & 0x7FFF) > (dt == FTRT_BFLOAT16 ? 0x7F80 : 0x7C00);
}

/* 0 when x is the SUM (op 0), MIN or MAX over n ranks of h16_fill's data. */
static int h16_check(const uint16_t *x, ftrt_dtype dt, ftrt_op op, int n)
{
    uint16_t inf = dt == FTRT_BFLOAT16 ? 0x7F80 : 0x7C00;
    for (int k = 4; k < H16N; k++) {
        int b = (k % 17) - 8, want = op == FTRT_SUM ? n * b + n * (n - 1) / 2
                                   : op == FTRT_MIN ? b : b + n - 1;
        if (x[k] != h16_int(dt, want)) return k;
    }
    if (op == FTRT_SUM)
        return x[0] != inf ? 1 : !h16_is_nan(dt, x[1]) ? 2 : (n > 1 && !h16_is_nan(dt, x[2])) ? 3
             : (n > 1 && x[3] != inf) ? 4 : 0;
    return !h16_is_nan(dt, x[1]) ? 2 : 0; /* a NaN operand gives NaN */
}

/* Copies what the file `cap` holds to stderr, but for the lines that contain `drop`. */
static void replay_stderr(FILE *cap, const char *drop)
{
    char line[1024];
    rewind(cap);
    while (fgets(line, sizeof line, cap))
        if (!strstr(line, drop)) fputs(line, stderr);
}

/* ftrt_allreduce refuses dtype 9 with FTRT_EINVAL and an error (ftrt_last_error()) naming it.
 * libftrt logs that error at ERROR level on stderr, where it would read as a fault in the
 * job's log (and tools/ftrt-run names the first ERROR line of a failed job), so stderr goes to
 * a temporary file for the call and comes back without that line (whatever else reached it
 * then, another thread's line, is written back). Returns 0 or 1 (printed). */
static int unknown_dtype_refused(ftrt_ctx *ctx, uint16_t *x)
{
    char why[256];
    fflush(stderr);
    FILE *cap = tmpfile();
    int saved = cap ? dup(STDERR_FILENO) : -1;
    int quiet = saved >= 0 && dup2(fileno(cap), STDERR_FILENO) == STDERR_FILENO;
    int rc = ftrt_allreduce(ctx, x, 1, (ftrt_dtype)9, FTRT_SUM);
    snprintf(why, sizeof why, "%s", ftrt_last_error());
    if (quiet) {
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        replay_stderr(cap, "unknown dtype 9 (");
    }
    if (saved >= 0) close(saved);
    if (cap) fclose(cap);
    if (rc != FTRT_EINVAL || !strstr(why, "unknown dtype 9 (")) {
        fprintf(stderr, "overlap_job: 16-bit check: an unknown dtype was not refused (%s: %s)\n",
                ftrt_err_name(rc), why);
        return 1;
    }
    return 0;
}

/* The 16-bit check of the file comment; 0, 1 (a wrong result, printed) or an ftrt error. */
static int h16_selftest(ftrt_ctx *ctx)
{
    static uint16_t x[H16N];
    const ftrt_dtype dts[2] = {FTRT_BFLOAT16, FTRT_FLOAT16};
    for (int d = 0; d < 2; d++)
        for (int op = 0; op < 4; op++) { /* SUM, MIN, MAX blocking; 3: SUM overlapped */
            ftrt_op o = op == 3 ? FTRT_SUM : (ftrt_op)op;
            h16_fill(x, dts[d], ftrt_rank(ctx));
            int rc;
            if (op < 3) {
                rc = ftrt_allreduce(ctx, x, H16N, dts[d], o);
            } else {
                ftrt_request *req;
                rc = ftrt_allreduce_start(ctx, x, H16N, dts[d], o, &req);
                if (!rc) rc = ftrt_request_wait(req);
                if (!rc) ftrt_request_free(req);
            }
            if (rc) return rc;
            int bad = h16_check(x, dts[d], o, ftrt_size(ctx));
            if (bad) {
                fprintf(stderr, "overlap_job: 16-bit check: dtype %d op %d: element %d wrong\n",
                        (int)dts[d], op, bad);
                return 1;
            }
        }
    return unknown_dtype_refused(ctx, x);
}

enum { BCN = 1501 };

/* Rank r's broadcast test data in dtype dt (es bytes an element): distinct per rank, with a
 * NaN payload in 16-bit types that a conversion would lose. */
static void bc_fill(unsigned char *x, size_t es, int r)
{
    for (size_t k = 0; k < BCN * es; k++) x[k] = (unsigned char)(k * 7 + (size_t)r * 31 + 1);
    if (es == 2) {
        x[0] = 0x01; /* 0x7F81: a bfloat16 signalling NaN with payload 1 */
        x[1] = 0x7F;
    }
}

/* Every trainer broadcasts once from each root, blocking and overlapped, in float32, bfloat16
 * and float64, and checks it holds the root's bytes; roots -1 and size are refused with
 * FTRT_EINVAL. 0, 1 (a wrong result, printed) or an ftrt error. */
static int bcast_selftest(ftrt_ctx *ctx)
{
    static unsigned char x[BCN * 8], want[BCN * 8];
    const ftrt_dtype dts[3] = {FTRT_FLOAT32, FTRT_BFLOAT16, FTRT_FLOAT64};
    const size_t es[3] = {4, 2, 8};
    int n = ftrt_size(ctx), r = ftrt_rank(ctx);
    for (int d = 0; d < 3; d++)
        for (int root = 0; root < n; root++)
            for (int nb = 0; nb < 2; nb++) {
                bc_fill(x, es[d], r);
                bc_fill(want, es[d], root);
                ftrt_request *req = NULL;
                int rc = nb ? ftrt_broadcast_start(ctx, x, BCN, dts[d], root, &req)
                            : ftrt_broadcast(ctx, x, BCN, dts[d], root);
                if (!rc && nb) rc = ftrt_request_wait(req);
                ftrt_request_free(req);
                if (rc) return rc;
                if (memcmp(x, want, BCN * es[d])) {
                    fprintf(stderr, "overlap_job: broadcast check: dtype %d root %d %s: not the "
                            "root's bytes\n", (int)dts[d], root, nb ? "overlapped" : "blocking");
                    return 1;
                }
            }
    ftrt_request *req = NULL;
    if (ftrt_broadcast(ctx, x, 1, FTRT_FLOAT32, n) != FTRT_EINVAL ||
        ftrt_broadcast_start(ctx, x, 1, FTRT_FLOAT32, -1, &req) != FTRT_EINVAL || req) {
        fprintf(stderr, "overlap_job: broadcast check: a root outside [0, %d) was accepted\n", n);
        return 1;
    }
    return 0;
}

/* ---- reduce-scatter and all-gather ---- */

/* Element k of trainer q's test data: a small integer, exact in every dtype and every sum. */
static int rv(int q, size_t k) { return (int)((k * 7 + (size_t)q * 3) % 17) - 8; }

/* Stores the integer v as element k of x in dt. */
static void rput(void *x, ftrt_dtype dt, size_t k, int v)
{
    switch (dt) {
    case FTRT_FLOAT32: ((float *)x)[k] = (float)v; break;
    case FTRT_FLOAT64: ((double *)x)[k] = (double)v; break;
    case FTRT_INT64: ((int64_t *)x)[k] = v; break;
    default: ((uint16_t *)x)[k] = h16_int(dt, v); break;
    }
}

static int rop(ftrt_op op, int a, int b)
{
    return op == FTRT_SUM ? a + b : op == FTRT_MIN ? (a < b ? a : b) : (a > b ? a : b);
}

/* Fills the expected results: a reduce-scatter's (rs) of rank r, count elements, or an
 * all-gather's, n * count. */
static void rsag_want(void *want, ftrt_dtype dt, ftrt_op op, int rs, int r, int n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (rs) {
            int acc = rv(0, (size_t)r * count + i);
            for (int q = 1; q < n; q++) acc = rop(op, acc, rv(q, (size_t)r * count + i));
            rput(want, dt, i, acc);
        } else {
            for (int q = 0; q < n; q++) rput(want, dt, (size_t)q * count + i, rv(q, i));
        }
    }
}

/* One reduce-scatter (rs) or all-gather of count elements per rank, blocking or overlapped
 * (nb), optionally with the buffers aliased at this rank's block (in_place), checked against
 * rsag_want. 0, 1 (a wrong result, printed) or an ftrt error. */
static int rsag_one(ftrt_ctx *ctx, ftrt_dtype dt, ftrt_op op, int rs, int nb, int in_place,
                    size_t count, unsigned char *send, unsigned char *recv, unsigned char *want)
{
    int n = ftrt_size(ctx), r = ftrt_rank(ctx);
    size_t es = dt == FTRT_FLOAT32 ? 4 : dt == FTRT_FLOAT64 || dt == FTRT_INT64 ? 8 : 2;
    size_t nsend = rs ? (size_t)n * count : count, nrecv = rs ? count : (size_t)n * count;
    memset(recv, 0xA5, nrecv * es);
    unsigned char *s = send, *d = recv;
    if (in_place && rs) d = send + (size_t)r * count * es; /* the result lands in own block */
    if (in_place && !rs) s = recv + (size_t)r * count * es; /* own block sent from recv */
    for (size_t k = 0; k < nsend; k++) rput(s, dt, k, rv(r, k));
    rsag_want(want, dt, op, rs, r, n, count);
    ftrt_request *req = NULL;
    int rc = rs ? (nb ? ftrt_reduce_scatter_start(ctx, s, d, count, dt, op, &req)
                      : ftrt_reduce_scatter(ctx, s, d, count, dt, op))
                : (nb ? ftrt_allgather_start(ctx, s, d, count, dt, &req)
                      : ftrt_allgather(ctx, s, d, count, dt));
    if (!rc && nb) rc = ftrt_request_wait(req);
    ftrt_request_free(req);
    if (rc) return rc;
    if (memcmp(d, want, nrecv * es)) {
        fprintf(stderr, "overlap_job: %s check: dtype %d op %d count %zu %s%s: wrong result\n",
                rs ? "reduce-scatter" : "all-gather", (int)dt, (int)op, count,
                nb ? "overlapped" : "blocking", in_place ? " in place" : "");
        return 1;
    }
    return 0;
}

/* Bad arguments refused with FTRT_EINVAL and no request: NULL buffers with count > 0, and
 * buffers overlapping other than at a whole block. 0 or 1 (printed). */
static int rsag_refusals(ftrt_ctx *ctx, unsigned char *buf)
{
    ftrt_request *req = NULL;
    int n = ftrt_size(ctx), bad = 0;
    bad |= ftrt_reduce_scatter(ctx, NULL, buf, 4, FTRT_FLOAT32, FTRT_SUM) != FTRT_EINVAL;
    bad |= ftrt_allgather(ctx, buf, NULL, 4, FTRT_FLOAT32) != FTRT_EINVAL;
    bad |= ftrt_reduce_scatter(ctx, buf, buf + 4, 4, FTRT_FLOAT32, FTRT_SUM) != FTRT_EINVAL;
    bad |= ftrt_allgather_start(ctx, buf + 4 * (size_t)n + 6, buf, 4, FTRT_FLOAT32, &req) !=
           FTRT_EINVAL || req;
    bad |= ftrt_reduce_scatter_start(ctx, buf, buf + 8, 4, FTRT_FLOAT32, FTRT_SUM, &req) !=
           FTRT_EINVAL || req;
    if (bad) fprintf(stderr, "overlap_job: reduce-scatter / all-gather: bad arguments accepted\n");
    return bad;
}

/* Every dtype, reduce-scatter and all-gather, blocking and overlapped, a small odd count and
 * one of several pipelined chunks (float32 and bfloat16), SUM and (float32, bfloat16, int64)
 * MIN and MAX, in place at the end; then the refusals. 0, 1 (printed) or an ftrt error. */
static int rsag_selftest(ftrt_ctx *ctx)
{
    const ftrt_dtype dts[5] = {FTRT_FLOAT32, FTRT_FLOAT64, FTRT_INT64, FTRT_BFLOAT16,
                               FTRT_FLOAT16};
    const size_t big = 1500000; /* per rank: several 4 MiB chunks in float32 and bfloat16 */
    size_t n = (size_t)ftrt_size(ctx), cap = n * big * 8;
    unsigned char *send = malloc(cap), *recv = malloc(cap), *want = malloc(cap);
    int rc = send && recv && want ? 0 : -12; /* -ENOMEM */
    for (int d = 0; d < 5 && !rc; d++)
        for (int v = 0; v < 8 && !rc; v++) { /* v: rs, nb, big */
            int rs = v & 1, nb = v >> 1 & 1, large = v >> 2;
            if (large && dts[d] != FTRT_FLOAT32 && dts[d] != FTRT_BFLOAT16) continue;
            rc = rsag_one(ctx, dts[d], FTRT_SUM, rs, nb, 0, large ? big : 1501, send, recv,
                          want);
            if (!rc && rs && (d == 0 || d == 2 || d == 3))
                for (int op = FTRT_MIN; op <= FTRT_MAX && !rc; op++)
                    rc = rsag_one(ctx, dts[d], (ftrt_op)op, rs, nb, 0, 1501, send, recv, want);
        }
    for (int v = 0; v < 4 && !rc; v++)
        rc = rsag_one(ctx, FTRT_FLOAT32, FTRT_SUM, v & 1, v >> 1, 1, big, send, recv, want);
    if (!rc) rc = rsag_refusals(ctx, send);
    free(send);
    free(recv);
    free(want);
    return rc;
}

/* The command line of the file comment. */
struct opts {
    int64_t steps, ckpt_every;
    double sleep;
    const char *out, *dir;
    int funneled;
};

/* The job's parameters, gradients and the copy kept while an update may be undone. */
struct job {
    struct opts o;
    ftrt_ctx *ctx;
    ftrt_bucketer *b;
    float *w[T], *g[T], *w0[T];
    float *z, *shard, *full; /* sharded_step(): size * ZC, ZC, size * ZC */
    int have_full;           /* full holds this step's gathered vector (sharded_step) */
    int64_t step;
};

/* Elements per trainer of sharded_step's vector: several pipelined chunks each. */
#define ZC ((size_t)700000)

/* 0, or the exit status (2) of a bad command line (printed). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){60, 20, 0, NULL, "overlap-ckpt", 0};
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--mpi-funneled")) { /* the application initializes MPI itself */
            o->funneled = 1;
            i--;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "overlap_job: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--steps")) o->steps = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--ckpt-dir")) o->dir = argv[i + 1];
        else if (!strcmp(argv[i], "--params-out")) o->out = argv[i + 1];
        else if (!strcmp(argv[i], "--step-sleep-ms")) o->sleep = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--ckpt-every")) o->ckpt_every = atoll(argv[i + 1]);
        else {
            fprintf(stderr, "overlap_job: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    return 0;
}

/* ftrt_finalize(), and MPI_Finalize() where the job initialized MPI and libftrt leaves it. */
static void finish(ftrt_ctx *ctx, int funneled)
{
    if (ftrt_finalize(ctx) != FTRT_SKIP_MPI_FINALIZE && funneled) MPI_Finalize();
}

/* The parameters allocated, initialized and registered; the bucketer created. 0 or an ftrt
 * error. */
static int setup_params(struct job *jb)
{
    char name[32];
    int rc;
    for (int j = 0; j < T; j++) {
        jb->w[j] = malloc(counts[j] * sizeof(float));
        jb->g[j] = malloc(counts[j] * sizeof(float));
        jb->w0[j] = malloc(counts[j] * sizeof(float));
        for (size_t k = 0; k < counts[j]; k++)
            jb->w[j][k] = (float)((k * 2654435761u + (size_t)j * 97u) % 1000u) * 1e-3f - 0.5f;
        snprintf(name, sizeof name, "w%d", j);
        if ((rc = ftrt_register(jb->ctx, name, jb->w[j], counts[j] * sizeof(float),
                                FTRT_REGION_REPLICATED)) < 0)
            return rc;
    }
    size_t n = (size_t)ftrt_size(jb->ctx);
    jb->z = malloc(n * ZC * sizeof(float));
    jb->shard = malloc(ZC * sizeof(float));
    jb->full = malloc(n * ZC * sizeof(float));
    if (!jb->z || !jb->shard || !jb->full) return -12; /* -ENOMEM */
    ftrt_bucket_config bc;
    ftrt_bucket_config_init(&bc, sizeof bc);
    bc.first_bucket_bytes = 4096;
    bc.bucket_bytes = 256 * 1024;
    return ftrt_bucketer_create(jb->ctx, counts, T, FTRT_FLOAT32, &bc, &jb->b);
}

/* backward: gradients of the last tensor first, each marked ready at once; then the wait for
 * every bucket. 0, FTRT_ERECOVER (the bucketer reset) or another ftrt error. */
static int backward(struct job *jb)
{
    int r = ftrt_rank(jb->ctx), rc = 0;
    for (int j = T - 1; j >= 0; j--) {
        for (size_t k = 0; k < counts[j]; k++) {
            float x = jb->w[j][k] * 1.3f + (float)jb->step * 0.01f + (float)r * 0.7f;
            jb->g[j][k] = sinf(x) * (float)(1 + (k % 13) * (k % 7)) * 1e-3f;
        }
        rc = ftrt_bucketer_ready(jb->b, j, jb->g[j]);
        if (rc == FTRT_ERECOVER) break;
        if (rc) return rc;
        sleep_ms(jb->o.sleep / T);
    }
    if (rc == FTRT_ERECOVER) ftrt_bucketer_reset(jb->b); /* the backward was cut short */
    else rc = ftrt_bucketer_wait_all(jb->b);
    return rc;
}

/* ZeRO's pattern on every third step (file comment): the gradients' vector reduce-scattered,
 * this trainer's shard "updated", the shards all-gathered into jb->full (update() folds it into
 * tensor 2). Blocking or overlapped by step; the overlapped all-gather sends from its own
 * block of jb->full (MPI_IN_PLACE's layout). 0 or an ftrt error; the parameters untouched. */
static int sharded_step(struct job *jb)
{
    jb->have_full = 0;
    if (jb->step % 3 != 1) return 0;
    int r = ftrt_rank(jb->ctx), nb = (int)(jb->step / 3 % 2);
    size_t total = (size_t)ftrt_size(jb->ctx) * ZC;
    for (size_t k = 0; k < total; k++)
        jb->z[k] = jb->g[2][k % counts[2]] * (float)(1 + (k + (size_t)r) % 5);
    ftrt_request *req = NULL;
    int rc = nb ? ftrt_reduce_scatter_start(jb->ctx, jb->z, jb->shard, ZC, FTRT_FLOAT32,
                                            FTRT_SUM, &req)
                : ftrt_reduce_scatter(jb->ctx, jb->z, jb->shard, ZC, FTRT_FLOAT32, FTRT_SUM);
    if (!rc && nb) rc = ftrt_request_wait(req);
    ftrt_request_free(req);
    req = NULL;
    if (rc) return rc;
    float *mine = nb ? jb->full + (size_t)r * ZC : jb->shard;
    for (size_t k = 0; k < ZC; k++)
        mine[k] = jb->shard[k] * 1e-2f + (float)(((size_t)r * ZC + k) % 7) * 1e-6f;
    rc = nb ? ftrt_allgather_start(jb->ctx, mine, jb->full, ZC, FTRT_FLOAT32, &req)
            : ftrt_allgather(jb->ctx, mine, jb->full, ZC, FTRT_FLOAT32);
    if (!rc && nb) rc = ftrt_request_wait(req);
    ftrt_request_free(req);
    jb->have_full = rc == 0;
    return rc;
}

/* The collective of this step that overlaps the update (file comment): a raw allreduce of
 * statistics (step % 5 == 4) or the broadcast of logical rank step % size's (step % 5 == 2,
 * blocking and already done when step % 10 == 7). *req is NULL when there is none in flight.
 * 0 or an ftrt error. */
static int side_collective(struct job *jb, float *stats, ftrt_request **req)
{
    int r = ftrt_rank(jb->ctx), n = ftrt_size(jb->ctx);
    *req = NULL;
    if (jb->step % 5 != 4 && jb->step % 5 != 2) return 0;
    for (int j = 0; j < T; j++) stats[j] = jb->g[j][0] * (float)(r + 1);
    if (jb->step % 5 == 4)
        return ftrt_allreduce_start(jb->ctx, stats, 8, FTRT_FLOAT32, FTRT_SUM, req);
    int root = (int)(jb->step % n);
    if (jb->step % 10 == 7) return ftrt_broadcast(jb->ctx, stats, 8, FTRT_FLOAT32, root);
    return ftrt_broadcast_start(jb->ctx, stats, 8, FTRT_FLOAT32, root, req);
}

/* The SGD update, on some steps overlapping a collective of statistics folded in after it
 * (side_collective); a failed collective undoes the update. 0 or an ftrt error. */
static int update(struct job *jb)
{
    float stats[8] = {0};
    ftrt_request *req = NULL;
    int rc = side_collective(jb, stats, &req);
    if (!rc && req) /* the update below overlaps the collective: kept to be undone */
        for (int j = 0; j < T; j++) memcpy(jb->w0[j], jb->w[j], counts[j] * sizeof(float));
    if (!rc)
        for (int j = 0; j < T; j++)
            for (size_t k = 0; k < counts[j]; k++) jb->w[j][k] -= 0.5f * jb->g[j][k];
    if (!rc && req) {
        rc = ftrt_request_wait(req);
        if (rc) /* the step is abandoned: its update too (ftrt_recover() keeps a survivor's
                 * registered state as it is, so it must be the last completed step's) */
            for (int j = 0; j < T; j++) memcpy(jb->w[j], jb->w0[j], counts[j] * sizeof(float));
    }
    if (!rc && jb->step % 5 == 4)
        for (int j = 0; j < T; j++) jb->w[j][0] += 1e-3f * stats[j];
    if (!rc && jb->step % 5 == 2) /* the broadcast "running statistic" */
        for (int j = 0; j < T; j++) jb->w[j][counts[j] - 1] += 1e-2f * stats[j];
    if (!rc && jb->have_full) /* sharded_step's gathered vector */
        for (size_t k = 0; k < (size_t)ftrt_size(jb->ctx) * ZC; k++)
            jb->w[2][k % counts[2]] -= 0.1f * jb->full[k];
    ftrt_request_free(req);
    return rc;
}

/* A checkpoint every ckpt_every steps; a failure other than FTRT_ERECOVER is printed and the
 * job goes on. 0 or the error of ftrt_recover(). */
static int maybe_checkpoint(struct job *jb)
{
    if (jb->o.ckpt_every <= 0 || jb->step % jb->o.ckpt_every != 0) return 0;
    int rc = ftrt_checkpoint(jb->ctx, jb->step);
    if (rc == FTRT_ERECOVER) return ftrt_recover(jb->ctx, &jb->step);
    if (rc && rc != FTRT_SKIPPED)
        fprintf(stderr, "overlap_job: checkpoint at step %lld: %s\n", (long long)jb->step,
                ftrt_strerror(rc));
    return 0;
}

/* The training loop up to --steps, recovering where a step fails with FTRT_ERECOVER. 0 or an
 * ftrt error. */
static int train(struct job *jb)
{
    int rc;
    while (jb->step < jb->o.steps) {
        rc = backward(jb);
        if (!rc) rc = sharded_step(jb);
        if (!rc) rc = update(jb);
        if (rc == FTRT_ERECOVER) {
            if ((rc = ftrt_recover(jb->ctx, &jb->step)) != 0) return rc;
            continue;
        }
        if (rc) return rc;
        ftrt_step_done(jb->ctx, jb->step++);
        if ((rc = maybe_checkpoint(jb)) != 0) return rc;
    }
    return 0;
}

/* On logical rank 0: the final parameters' hash printed, and written to --params-out. */
static void report_params(const struct job *jb)
{
    if (ftrt_rank(jb->ctx) != 0) return;
    uint64_t h = 1469598103934665603ull;
    FILE *f = jb->o.out ? fopen(jb->o.out, "wb") : NULL;
    for (int j = 0; j < T; j++) {
        h = fnv1a(h, jb->w[j], counts[j] * sizeof(float));
        if (f) fwrite(jb->w[j], sizeof(float), counts[j], f);
    }
    if (f) fclose(f);
    printf("overlap_job: done, params fnv1a64 %016llx\n", (unsigned long long)h);
}

/* A failed job: the error printed and set as the job's outcome. Returns the exit status 1. */
static int fail(ftrt_ctx *ctx, int rc)
{
    fprintf(stderr, "overlap_job (logical rank %d): %s\n", ftrt_rank(ctx), ftrt_strerror(rc));
    /* the job's outcome must say so: the BYE carries it (a process's own exit status after
     * ftrt_finalize() is not the job's) */
    ftrt_set_exit_code(ctx, rc < 0 ? rc : FTRT_EINVAL);
    ftrt_finalize(ctx);
    return 1;
}

int main(int argc, char **argv)
{
    static struct job jb;
    int rc = parse_args(argc, argv, &jb.o);
    if (rc) return rc;
    if (jb.o.funneled) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    }
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s", jb.o.dir);
    rc = ftrt_init(&cfg, &jb.ctx);
    if (rc == FTRT_DONE) return finish(jb.ctx, jb.o.funneled), 0;
    if (rc < 0) {
        fprintf(stderr, "overlap_job: ftrt_init: %s\n", ftrt_strerror(rc));
        if (jb.ctx) ftrt_finalize(jb.ctx);
        return 1;
    }
    if ((rc = setup_params(&jb)) != 0 || (rc = ftrt_restore(jb.ctx, &jb.step)) < 0)
        return fail(jb.ctx, rc);
    if (ftrt_epoch(jb.ctx) == 0 &&
        ((rc = h16_selftest(jb.ctx)) != 0 || (rc = bcast_selftest(jb.ctx)) != 0 ||
         (rc = rsag_selftest(jb.ctx)) != 0)) {
        if (rc < 0) return fail(jb.ctx, rc);
        ftrt_finalize(jb.ctx);
        return 1;
    }
    if (ftrt_rank(jb.ctx) == 0 && ftrt_epoch(jb.ctx) == 0)
        printf("overlap_job: %d trainers, %d tensors in %d buckets, %lld steps\n",
               ftrt_size(jb.ctx), T, ftrt_bucketer_buckets(jb.b), (long long)jb.o.steps);
    if ((rc = train(&jb)) != 0) return fail(jb.ctx, rc);
    report_params(&jb);
    ftrt_bucketer_free(jb.b);
    for (int j = 0; j < T; j++) {
        free(jb.w[j]);
        free(jb.g[j]);
        free(jb.w0[j]);
    }
    free(jb.z);
    free(jb.shard);
    free(jb.full);
    finish(jb.ctx, jb.o.funneled);
    return 0;
}

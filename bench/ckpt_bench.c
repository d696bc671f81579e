/*
 * ckpt_bench.c - the measuring half of ftrt-bench-ckpt (bench/ftrt-bench-ckpt drives it and
 * compares with fio and torch.save). Run under mpirun -np 2 (coordinator + one trainer):
 *
 *   mpirun -np 2 ftrt_bench_ckpt --dir DIR --bytes N [--reps R] [--compute-x X]
 *
 * The trainer registers N bytes of state (one REPLICATED region, huge-page backed, filled with
 * pseudo-random bytes) and measures, in this order:
 *   prepare   ftrt_checkpoint_prepare(): staging mapped, faulted in and registered;
 *   floor     memcpy of the N bytes into a buffer allocated like the engine's staging (median of
 *             R, after a warm-up);
 *   blocking  ftrt_checkpoint(): the time the call blocks (snapshot by the engine's thread and
 *             the caller), R checkpoints after one warm-up that allocates staging; between two,
 *             ftrt_checkpoint_wait_commit() (not timed) so that the disk is idle again;
 *   overlap   ftrt_checkpoint_start(), a compute phase of X times the floor (a cache-resident
 *             arithmetic loop standing in for forward/backward), ftrt_checkpoint_wait_snapshot():
 *             the time spent inside the two calls;
 *   persist   from the engine's statistics: shard image -> written (write_s) and -> durable,
 *             renamed and reported (persist_s), for each checkpoint;
 *   plain     open + write() of the N bytes + fsync + close, into DIR;
 *   restore   state scribbled, then ftrt_restore() of the newest checkpoint (io_uring, O_DIRECT,
 *             every CRC32C verified), checked bit-exact against the state at that checkpoint;
 *             reps times (restore_s: the median of the engine's restore times).
 * and prints one JSON object on stdout (medians and all samples). Errors go to stderr, exit 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ftrt.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void *big_alloc(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, n, MADV_HUGEPAGE);
    memset(p, 0, n); /* fault it in */
    return p;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t v = x * 0x2545F4914F6CDD1Dull;
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (unsigned char)i;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_d);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

static void print_arr(const char *name, const double *v, int n)
{
    printf("\"%s\": [", name);
    for (int i = 0; i < n; i++) printf("%s%.6f", i ? ", " : "", v[i]);
    printf("], ");
}

/* A stand-in for forward/backward: arithmetic on a 64 KiB array (cache-resident, so it does
 * not compete with the snapshot for memory bandwidth... much) for `secs` seconds. */
static double compute_for(double secs)
{
    static float a[16384];
    float acc = 0;
    double t0 = now();
    while (now() - t0 < secs)
        for (int k = 0; k < 16384; k++) {
            a[k] = a[k] * 0.999f + 0.5f;
            acc += a[k];
        }
    return acc;
}

static int die(const char *what, int rc)
{
    fprintf(stderr, "ftrt_bench_ckpt: %s: %s (%s)\n", what, ftrt_strerror(rc), ftrt_err_name(rc));
    return 1;
}

/* The command line (see the file comment); the bench's figures as they are measured. */
struct opts {
    const char *dir;
    size_t bytes;
    int reps;
    double compute_x;
};

struct bench {
    struct opts o;
    ftrt_ctx *ctx;
    unsigned char *state, *floor_dst;
    int64_t step;
    double prepare_s, floor_s, first_s, plain_s, restore_call_s;
    double *t_floor, *t_block, *t_snap, *t_ovl, *t_ovl_snap; /* reps each */
    double *t_write, *t_persist;                            /* np of 2 * reps each */
    double *t_restore;                                      /* reps: the engine's restore time */
    uint64_t restore_bytes;
    int np;
    ftrt_ckpt_stats st; /* the engine's statistics as last read */
    uint64_t shard_bytes, staging;
    uint32_t flags;
    int slots, exact;
};

enum { ROLE_ENDED = -1 }; /* bench_start() on a rank that must not train */

/* 0, or the exit status (2) of a bad command line. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){NULL, (size_t)1 << 30, 3, 3.0};
    static const struct option opts[] = {{"dir", required_argument, NULL, 'd'},
                                         {"bytes", required_argument, NULL, 'b'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"compute-x", required_argument, NULL, 'x'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd') o->dir = optarg;
        else if (c == 'b') o->bytes = (size_t)strtoull(optarg, NULL, 10);
        else if (c == 'r') o->reps = atoi(optarg);
        else if (c == 'x') o->compute_x = atof(optarg);
        else return 2;
    }
    if (!o->dir || o->bytes < 4096 || o->reps < 1 || o->reps > 100 || o->compute_x < 1.0) {
        fprintf(stderr, "usage: ftrt_bench_ckpt --dir DIR --bytes N [--reps R] [--compute-x X]\n");
        return 2;
    }
    return 0;
}

/* ftrt_init, the state registered and restored, staging prepared (timed). 0, 1 (printed), or
 * ROLE_ENDED on the coordinator's rank, whose job has ended (finalized here). */
static int bench_start(struct bench *b)
{
    size_t bytes = b->o.bytes;
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    cfg.spares = 0;
    if (strlen(b->o.dir) + 16 >= sizeof cfg.ckpt_dir) return die("--dir", FTRT_EINVAL);
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s/ckpt", b->o.dir);
    int rc = ftrt_init(&cfg, &b->ctx);
    if (rc == FTRT_DONE) return ftrt_finalize(b->ctx), ROLE_ENDED;
    if (rc < 0) return die("ftrt_init", rc);

    b->state = big_alloc(bytes);
    b->floor_dst = big_alloc(bytes);
    if (!b->state || !b->floor_dst) return die("allocating the state", -ENOMEM);
    fill(b->state, bytes, 1);
    if ((rc = ftrt_register(b->ctx, "state", b->state, bytes, FTRT_REGION_REPLICATED)) < 0)
        return die("ftrt_register", rc);
    b->step = 0;
    if ((rc = ftrt_restore(b->ctx, &b->step)) < 0) return die("ftrt_restore", rc);
    double t_prep = now();
    if ((rc = ftrt_checkpoint_prepare(b->ctx)) < 0) return die("ftrt_checkpoint_prepare", rc);
    b->prepare_s = now() - t_prep;
    return 0;
}

/* memcpy floor: R copies of the state after a warm-up; their median in floor_s. */
static void measure_floor(struct bench *b)
{
    int reps = b->o.reps;
    b->t_floor = calloc((size_t)reps, sizeof(double));
    memcpy(b->floor_dst, b->state, b->o.bytes);
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        memcpy(b->floor_dst, b->state, b->o.bytes);
        b->t_floor[i] = now() - t0;
    }
    b->floor_s = median(b->t_floor, reps);
}

/* Waits for checkpoint `step` to commit, then reads the engine's statistics and keeps the
 * write and persist times. 0 or 1 (printed). */
static int commit_and_record(struct bench *b)
{
    int rc = ftrt_checkpoint_wait_commit(b->ctx, b->step, -1);
    if (rc != 0) return die("commit", rc);
    ftrt_checkpoint_stats(b->ctx, &b->st, sizeof b->st);
    b->t_write[b->np] = b->st.last_write_s;
    b->t_persist[b->np++] = b->st.last_persist_s;
    return 0;
}

/* blocking checkpoints: one warm-up (first_s), then R timed calls. 0 or 1 (printed). */
static int measure_blocking(struct bench *b)
{
    int reps = b->o.reps, rc;
    b->t_block = calloc((size_t)reps, sizeof(double));
    b->t_write = calloc((size_t)reps * 2, sizeof(double));
    b->t_persist = calloc((size_t)reps * 2, sizeof(double));
    b->t_snap = calloc((size_t)reps, sizeof(double));
    double t0 = now();
    if ((rc = ftrt_checkpoint(b->ctx, ++b->step)) != 0) return die("ftrt_checkpoint (warm-up)", rc);
    b->first_s = now() - t0;
    if ((rc = ftrt_checkpoint_wait_commit(b->ctx, b->step, -1)) != 0)
        return die("commit (warm-up)", rc);
    for (int i = 0; i < reps; i++) {
        b->state[i * 4096 % b->o.bytes] ^= 1; /* a step happened */
        t0 = now();
        if ((rc = ftrt_checkpoint(b->ctx, ++b->step)) != 0) return die("ftrt_checkpoint", rc);
        b->t_block[i] = now() - t0;
        if (commit_and_record(b)) return 1;
        b->t_snap[i] = b->st.last_snapshot_s;
    }
    return 0;
}

/* overlapped checkpoints: the snapshot runs during "forward/backward". 0 or 1 (printed). */
static int measure_overlap(struct bench *b)
{
    int reps = b->o.reps, rc;
    b->t_ovl = calloc((size_t)reps, sizeof(double));
    b->t_ovl_snap = calloc((size_t)reps, sizeof(double));
    for (int i = 0; i < reps; i++) {
        b->state[i * 8192 % b->o.bytes] ^= 2;
        double t0 = now();
        if ((rc = ftrt_checkpoint_start(b->ctx, ++b->step)) != 0)
            return die("ftrt_checkpoint_start", rc);
        double stall = now() - t0;
        compute_for(b->o.compute_x * b->floor_s);
        t0 = now();
        ftrt_checkpoint_wait_snapshot(b->ctx);
        stall += now() - t0;
        b->t_ovl[i] = stall;
        if (commit_and_record(b)) return 1;
        b->t_ovl_snap[i] = b->st.last_snapshot_s;
    }
    b->shard_bytes = b->st.last_bytes;
    b->flags = b->st.flags;
    b->slots = b->st.staging_slots;
    b->staging = b->st.staging_bytes;
    return 0;
}

/* plain buffered write + fsync of the same bytes. 0 or 1 (printed). */
static int measure_plain(struct bench *b)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plain.dat", b->o.dir);
    double t0 = now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return die("open plain.dat", -errno);
    for (size_t off = 0; off < b->o.bytes;) {
        size_t n = b->o.bytes - off < (1u << 30) ? b->o.bytes - off : (1u << 30);
        ssize_t w = write(fd, b->state + off, n);
        if (w <= 0) return die("write plain.dat", w < 0 ? -errno : -EIO);
        off += (size_t)w;
    }
    if (fsync(fd) != 0) return die("fsync plain.dat", -errno);
    close(fd);
    b->plain_s = now() - t0;
    unlink(path);
    return 0;
}

/* restore of the newest checkpoint into scribbled state, reps times, each verified against its
 * contents. 0 or 1 (printed); a restore that is not bit-exact is 0 with exact = 0. */
static int measure_restore(struct bench *b)
{
    memcpy(b->floor_dst, b->state, b->o.bytes); /* the state at the newest checkpoint */
    b->t_restore = calloc((size_t)b->o.reps, sizeof(double));
    if (!b->t_restore) return die("calloc", -ENOMEM);
    b->exact = 1;
    for (int i = 0; i < b->o.reps; i++) {
        memset(b->state, 0x5A, b->o.bytes);
        int64_t got = -1;
        double t0 = now();
        int rc = ftrt_restore(b->ctx, &got);
        b->restore_call_s = now() - t0;
        if (rc != 1 || got != b->step)
            return die("ftrt_restore (bench)", rc < 0 ? rc : FTRT_ENOCKPT);
        b->exact = b->exact && memcmp(b->state, b->floor_dst, b->o.bytes) == 0;
        ftrt_checkpoint_stats(b->ctx, &b->st, sizeof b->st);
        b->t_restore[i] = b->st.last_restore_s;
        b->restore_bytes = b->st.last_restore_bytes;
    }
    return 0;
}

/* The one JSON object on stdout (the keys bench/ftrt-bench-ckpt reads). */
static void print_results(const struct bench *b)
{
    int reps = b->o.reps, np = b->np;
    printf("{\"bytes\": %zu, \"shard_bytes\": %" PRIu64 ", \"reps\": %d, \"compute_x\": %.2f, ",
           b->o.bytes, b->shard_bytes, reps, b->o.compute_x);
    printf("\"o_direct\": %s, \"fixed_buffers\": %s, \"staging_slots\": %d, "
           "\"staging_bytes\": %" PRIu64 ", ",
           b->flags & FTRT_CKPT_STAT_DIRECT ? "true" : "false",
           b->flags & FTRT_CKPT_STAT_FIXED ? "true" : "false", b->slots, b->staging);
    print_arr("memcpy_s", b->t_floor, reps);
    print_arr("blocking_stall_s", b->t_block, reps);
    print_arr("blocking_snapshot_s", b->t_snap, reps);
    print_arr("overlap_stall_s", b->t_ovl, reps);
    print_arr("overlap_snapshot_s", b->t_ovl_snap, reps);
    print_arr("write_s", b->t_write, np);
    print_arr("persist_s", b->t_persist, np);
    print_arr("restore_samples_s", b->t_restore, reps);
    printf("\"memcpy_median_s\": %.6f, \"blocking_stall_median_s\": %.6f, "
           "\"overlap_stall_median_s\": %.6f, \"write_median_s\": %.6f, "
           "\"persist_median_s\": %.6f, \"prepare_s\": %.6f, \"first_checkpoint_s\": %.6f, "
           "\"plain_write_fsync_s\": %.6f, "
           "\"restore_s\": %.6f, \"restore_call_s\": %.6f, \"restore_bytes\": %" PRIu64 ", "
           "\"restore_exact\": %s}\n",
           b->floor_s, median(b->t_block, reps), median(b->t_ovl, reps),
           median(b->t_write, np), median(b->t_persist, np), b->prepare_s, b->first_s,
           b->plain_s, median(b->t_restore, reps), b->restore_call_s, b->restore_bytes,
           b->exact ? "true" : "false");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    static struct bench b;
    int rc = parse_args(argc, argv, &b.o);
    if (rc) return rc;
    if ((rc = bench_start(&b)) != 0) return rc == ROLE_ENDED ? 0 : rc;
    measure_floor(&b);
    if (measure_blocking(&b) || measure_overlap(&b) || measure_plain(&b) || measure_restore(&b))
        return 1;
    print_results(&b);
    ftrt_finalize(b.ctx);
    return b.exact ? 0 : 1;
}

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
 *             every CRC32C verified), checked bit-exact against the state at that checkpoint.
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

int main(int argc, char **argv)
{
    const char *dir = NULL;
    size_t bytes = (size_t)1 << 30;
    int reps = 3;
    double compute_x = 3.0;
    static const struct option opts[] = {{"dir", required_argument, NULL, 'd'},
                                         {"bytes", required_argument, NULL, 'b'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"compute-x", required_argument, NULL, 'x'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd') dir = optarg;
        else if (c == 'b') bytes = (size_t)strtoull(optarg, NULL, 10);
        else if (c == 'r') reps = atoi(optarg);
        else if (c == 'x') compute_x = atof(optarg);
        else return 2;
    }
    if (!dir || bytes < 4096 || reps < 1 || reps > 100 || compute_x < 1.0) {
        fprintf(stderr, "usage: ftrt_bench_ckpt --dir DIR --bytes N [--reps R] [--compute-x X]\n");
        return 2;
    }
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    cfg.spares = 0;
    if (strlen(dir) + 16 >= sizeof cfg.ckpt_dir) return die("--dir", FTRT_EINVAL);
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s/ckpt", dir);
    ftrt_ctx *ctx;
    int rc = ftrt_init(&cfg, &ctx);
    if (rc == FTRT_DONE) return ftrt_finalize(ctx), 0;
    if (rc < 0) return die("ftrt_init", rc);

    unsigned char *state = big_alloc(bytes), *floor_dst = big_alloc(bytes);
    if (!state || !floor_dst) return die("allocating the state", -ENOMEM);
    fill(state, bytes, 1);
    if ((rc = ftrt_register(ctx, "state", state, bytes, FTRT_REGION_REPLICATED)) < 0)
        return die("ftrt_register", rc);
    int64_t step = 0;
    if ((rc = ftrt_restore(ctx, &step)) < 0) return die("ftrt_restore", rc);
    double t_prep = now();
    if ((rc = ftrt_checkpoint_prepare(ctx)) < 0) return die("ftrt_checkpoint_prepare", rc);
    double prepare_s = now() - t_prep;

    /* memcpy floor */
    double *t_floor = calloc((size_t)reps, sizeof(double));
    memcpy(floor_dst, state, bytes);
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        memcpy(floor_dst, state, bytes);
        t_floor[i] = now() - t0;
    }
    double floor_s = median(t_floor, reps);

    /* blocking checkpoints */
    double *t_block = calloc((size_t)reps, sizeof(double)), *t_write = calloc((size_t)reps * 2, sizeof(double));
    double *t_persist = calloc((size_t)reps * 2, sizeof(double)), *t_snap = calloc((size_t)reps, sizeof(double));
    int np = 0;
    ftrt_ckpt_stats st;
    double t0 = now();
    if ((rc = ftrt_checkpoint(ctx, ++step)) != 0) return die("ftrt_checkpoint (warm-up)", rc);
    double first_s = now() - t0;
    if ((rc = ftrt_checkpoint_wait_commit(ctx, step, -1)) != 0) return die("commit (warm-up)", rc);
    for (int i = 0; i < reps; i++) {
        state[i * 4096 % bytes] ^= 1; /* a step happened */
        t0 = now();
        if ((rc = ftrt_checkpoint(ctx, ++step)) != 0) return die("ftrt_checkpoint", rc);
        t_block[i] = now() - t0;
        if ((rc = ftrt_checkpoint_wait_commit(ctx, step, -1)) != 0) return die("commit", rc);
        ftrt_checkpoint_stats(ctx, &st, sizeof st);
        t_snap[i] = st.last_snapshot_s;
        t_write[np] = st.last_write_s;
        t_persist[np++] = st.last_persist_s;
    }

    /* overlapped checkpoints: the snapshot runs during "forward/backward" */
    double *t_ovl = calloc((size_t)reps, sizeof(double)), *t_ovl_snap = calloc((size_t)reps, sizeof(double));
    for (int i = 0; i < reps; i++) {
        state[i * 8192 % bytes] ^= 2;
        t0 = now();
        if ((rc = ftrt_checkpoint_start(ctx, ++step)) != 0) return die("ftrt_checkpoint_start", rc);
        double stall = now() - t0;
        compute_for(compute_x * floor_s);
        t0 = now();
        ftrt_checkpoint_wait_snapshot(ctx);
        stall += now() - t0;
        t_ovl[i] = stall;
        if ((rc = ftrt_checkpoint_wait_commit(ctx, step, -1)) != 0) return die("commit", rc);
        ftrt_checkpoint_stats(ctx, &st, sizeof st);
        t_ovl_snap[i] = st.last_snapshot_s;
        t_write[np] = st.last_write_s;
        t_persist[np++] = st.last_persist_s;
    }
    uint64_t shard_bytes = st.last_bytes;
    uint32_t flags = st.flags;
    int slots = st.staging_slots;
    uint64_t staging = st.staging_bytes;

    /* plain buffered write + fsync of the same bytes */
    char path[4200];
    snprintf(path, sizeof path, "%s/plain.dat", dir);
    t0 = now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return die("open plain.dat", -errno);
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < (1u << 30) ? bytes - off : (1u << 30);
        ssize_t w = write(fd, state + off, n);
        if (w <= 0) return die("write plain.dat", w < 0 ? -errno : -EIO);
        off += (size_t)w;
    }
    if (fsync(fd) != 0) return die("fsync plain.dat", -errno);
    close(fd);
    double plain_s = now() - t0;
    unlink(path);

    /* restore of the newest checkpoint into scribbled state, verified against its contents */
    memcpy(floor_dst, state, bytes); /* the state at the newest checkpoint */
    memset(state, 0x5A, bytes);
    int64_t got = -1;
    t0 = now();
    rc = ftrt_restore(ctx, &got);
    double restore_call_s = now() - t0;
    if (rc != 1 || got != step) return die("ftrt_restore (bench)", rc < 0 ? rc : FTRT_ENOCKPT);
    int exact = memcmp(state, floor_dst, bytes) == 0;
    ftrt_checkpoint_stats(ctx, &st, sizeof st);

    printf("{\"bytes\": %zu, \"shard_bytes\": %" PRIu64 ", \"reps\": %d, \"compute_x\": %.2f, ",
           bytes, shard_bytes, reps, compute_x);
    printf("\"o_direct\": %s, \"fixed_buffers\": %s, \"staging_slots\": %d, "
           "\"staging_bytes\": %" PRIu64 ", ",
           flags & FTRT_CKPT_STAT_DIRECT ? "true" : "false",
           flags & FTRT_CKPT_STAT_FIXED ? "true" : "false", slots, staging);
    print_arr("memcpy_s", t_floor, reps);
    print_arr("blocking_stall_s", t_block, reps);
    print_arr("blocking_snapshot_s", t_snap, reps);
    print_arr("overlap_stall_s", t_ovl, reps);
    print_arr("overlap_snapshot_s", t_ovl_snap, reps);
    print_arr("write_s", t_write, np);
    print_arr("persist_s", t_persist, np);
    printf("\"memcpy_median_s\": %.6f, \"blocking_stall_median_s\": %.6f, "
           "\"overlap_stall_median_s\": %.6f, \"write_median_s\": %.6f, "
           "\"persist_median_s\": %.6f, \"prepare_s\": %.6f, \"first_checkpoint_s\": %.6f, "
           "\"plain_write_fsync_s\": %.6f, "
           "\"restore_s\": %.6f, \"restore_call_s\": %.6f, \"restore_bytes\": %" PRIu64 ", "
           "\"restore_exact\": %s}\n",
           floor_s, median(t_block, reps), median(t_ovl, reps), median(t_write, np),
           median(t_persist, np), prepare_s, first_s, plain_s, st.last_restore_s, restore_call_s,
           st.last_restore_bytes, exact ? "true" : "false");
    fflush(stdout);
    rc = ftrt_finalize(ctx);
    return exact ? 0 : 1;
}

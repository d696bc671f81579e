/*
 * dev_snapshot_bench.c - what a checkpoint of device state costs the training thread
 * (scripts/gpu-run.sh step snapshot-gpu; issue 38). Run under mpirun -np 2 (the coordinator and
 * one trainer):
 *
 *   mpirun -np 2 dev_snapshot_bench --dir DIR [--mib 1024] [--reps 5]
 *
 * The trainer allocates MiB of CUDA memory, fills it with pseudo-random bytes, registers it as
 * one REPLICATED | DEVICE region, and measures in the same run:
 *   floor     cudaMemcpyAsync of the same bytes from the device into pinned host memory
 *             (cudaHostAlloc) on a stream of its own, then cudaStreamSynchronize: the copy that
 *             no snapshot of device memory avoids (median of R after a warm-up);
 *   blocking  ftrt_checkpoint(): the time the call blocks while the engine copies the region into
 *             its pinned staging (R checkpoints after a warm-up that sets the staging up; each
 *             committed, not timed, before the next);
 *   restore   the region overwritten, ftrt_restore() of the newest checkpoint, and the bytes read
 *             back compared with those checkpointed (bit-exact or the run fails).
 * It prints one line, "RESULT bench=dev_snapshot device=... mib=... floor_ms=... blocking_ms=...
 * ratio=... target=1.10 restore_exact=1", the ratio being blocking over floor (medians).
 *
 * With FTRT_TEST_SIM_DEVICE=1 the region is the simulated device's (ftrt_sim.h, a test
 * arrangement, no GPU: every access pays two mprotect calls) and the floor is ftrt_sim_read() of
 * the same bytes: a rehearsal of this program on a machine without a GPU, not a figure.
 * Exit 0; 1 on an error (printed) or a restore that is not bit-exact; 2 on a bad command line;
 * 77 where there is no usable CUDA device (and no simulated one).
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftrt.h"
#include "ftrt_sim.h"

typedef struct opts {
    const char *dir;
    size_t bytes;
    int reps;
} opts;

typedef struct dev {
    int sim;              /* the simulated device (FTRT_TEST_SIM_DEVICE=1) */
    void *mem;            /* the device region */
    unsigned char *host;  /* pinned (CUDA) or plain (sim): the floor's destination */
    unsigned char *truth; /* the bytes at the newest checkpoint */
    cudaStream_t stream;
} dev;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int die(const char *what, int rc)
{
    fprintf(stderr, "dev_snapshot_bench: %s: %s (%d)\n", what, ftrt_strerror(rc), rc);
    return 1;
}

static int cuda_die(const char *what, cudaError_t e)
{
    fprintf(stderr, "dev_snapshot_bench: %s: %s\n", what, cudaGetErrorString(e));
    return 1;
}

/* 0, or 2 after a usage line. */
static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){NULL, (size_t)1 << 30, 5};
    static const struct option lo[] = {{"dir", required_argument, NULL, 'd'},
                                       {"mib", required_argument, NULL, 'm'},
                                       {"reps", required_argument, NULL, 'r'},
                                       {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 'd') o->dir = optarg;
        else if (c == 'm') o->bytes = (size_t)strtoull(optarg, NULL, 10) << 20;
        else if (c == 'r') o->reps = atoi(optarg);
        else o->dir = NULL, o->reps = 0;
    }
    if (!o->dir || o->bytes == 0 || o->reps < 1 || o->reps > 100) {
        fprintf(stderr, "usage: dev_snapshot_bench --dir DIR [--mib N (1024)] [--reps R (5)]\n");
        return 2;
    }
    return 0;
}

/* Copies n bytes of the device region into host memory h (the floor's copy). 0 or 1. */
static int to_host(dev *d, void *h, size_t n)
{
    if (d->sim) {
        int rc = ftrt_sim_read(h, d->mem, n);
        return rc ? die("ftrt_sim_read", rc) : 0;
    }
    cudaError_t e = cudaMemcpyAsync(h, d->mem, n, cudaMemcpyDeviceToHost, d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    return e == cudaSuccess ? 0 : cuda_die("cudaMemcpyAsync D2H", e);
}

/* Writes n bytes of host memory h into the device region. 0 or 1. */
static int to_dev(dev *d, const void *h, size_t n)
{
    if (d->sim) {
        int rc = ftrt_sim_write(d->mem, h, n);
        return rc ? die("ftrt_sim_write", rc) : 0;
    }
    cudaError_t e = cudaMemcpy(d->mem, h, n, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : cuda_die("cudaMemcpy H2D", e);
}

/* The region and the host buffers, the region filled with pseudo-random bytes (kept in truth).
 * 0 or 1. */
static int dev_open(dev *d, size_t n)
{
    const char *k = getenv("FTRT_TEST_SIM_DEVICE");
    d->sim = k && strcmp(k, "1") == 0;
    d->truth = malloc(n);
    if (!d->truth) return die("malloc", -12);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        d->truth[i] = (unsigned char)x;
    }
    if (d->sim) {
        d->host = malloc(n);
        int rc = d->host ? ftrt_sim_alloc(n, &d->mem) : -12;
        if (rc) return die("ftrt_sim_alloc", rc);
    } else {
        cudaError_t e = cudaMalloc(&d->mem, n);
        if (e == cudaSuccess) e = cudaHostAlloc((void **)&d->host, n, cudaHostAllocDefault);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) return cuda_die("cudaMalloc / cudaHostAlloc", e);
    }
    return to_dev(d, d->truth, n);
}

/* floor: R device-to-host copies after a warm-up; their median (seconds), or -1 on an error. */
static double measure_floor(dev *d, size_t n, int reps)
{
    double t[100];
    if (to_host(d, d->host, n)) return -1;
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        if (to_host(d, d->host, n)) return -1;
        t[i] = now() - t0;
    }
    return median(t, reps);
}

/* blocking: a warm-up checkpoint, then R timed ones, each committed before the next; the
 * median (seconds), or -1 on an error. *step: the newest checkpoint's. */
static double measure_blocking(ftrt_ctx *ctx, int reps, int64_t *step)
{
    double t[100];
    for (int i = -1; i < reps; i++) {
        double t0 = now();
        int rc = ftrt_checkpoint(ctx, ++*step);
        if (rc != 0) return die("ftrt_checkpoint", rc), -1;
        if (i >= 0) t[i] = now() - t0;
        if ((rc = ftrt_checkpoint_wait_commit(ctx, *step, -1)) != 0)
            return die("ftrt_checkpoint_wait_commit", rc), -1;
    }
    return median(t, reps);
}

/* restore: the region overwritten, the newest checkpoint restored and read back. 1 when the
 * bytes are those checkpointed, 0 when not, -1 on an error. */
static int check_restore(ftrt_ctx *ctx, dev *d, size_t n, int64_t step)
{
    memset(d->host, 0x5A, n);
    if (to_dev(d, d->host, n)) return -1;
    int64_t got = -1;
    int rc = ftrt_restore(ctx, &got);
    if (rc != 1 || got != step) return die("ftrt_restore", rc < 0 ? rc : FTRT_ENOCKPT), -1;
    if (to_host(d, d->host, n)) return -1;
    return memcmp(d->host, d->truth, n) == 0;
}

/* The trainer's part: the region registered, the three measurements, the RESULT line. */
static int run_trainer(ftrt_ctx *ctx, dev *d, const opts *o)
{
    int rc = ftrt_register(ctx, "state", d->mem, o->bytes,
                           FTRT_REGION_REPLICATED | FTRT_REGION_DEVICE);
    if (rc < 0) return die("ftrt_register", rc);
    int64_t step = 0;
    if ((rc = ftrt_restore(ctx, &step)) < 0) return die("ftrt_restore (start)", rc);
    double floor_s = measure_floor(d, o->bytes, o->reps);
    double block_s = floor_s < 0 ? -1 : measure_blocking(ctx, o->reps, &step);
    if (floor_s < 0 || block_s < 0) return 1;
    int exact = check_restore(ctx, d, o->bytes, step);
    if (exact < 0) return 1;
    printf("RESULT bench=dev_snapshot device=%s mib=%zu reps=%d floor_ms=%.3f blocking_ms=%.3f "
           "ratio=%.3f target=1.10 restore_exact=%d\n",
           d->sim ? "sim" : "cuda", o->bytes >> 20, o->reps, floor_s * 1e3, block_s * 1e3,
           block_s / floor_s, exact);
    fflush(stdout);
    return exact ? 0 : 1;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    const char *k = getenv("FTRT_TEST_SIM_DEVICE");
    int ndev = 0;
    if (!(k && strcmp(k, "1") == 0) && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)) {
        printf("skipped: no usable CUDA device\n");
        return 77;
    }
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    cfg.spares = 0;
    if (strlen(o.dir) + 16 >= sizeof cfg.ckpt_dir) return die("--dir", FTRT_EINVAL);
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s/ckpt", o.dir);
    ftrt_ctx *ctx = NULL;
    rc = ftrt_init(&cfg, &ctx);
    if (rc == FTRT_DONE) return ftrt_finalize(ctx), 0; /* the coordinator: the job is over */
    if (rc < 0) return die("ftrt_init", rc);
    static dev d;
    rc = dev_open(&d, o.bytes) ? 1 : run_trainer(ctx, &d, &o);
    ftrt_finalize(ctx);
    return rc;
}

/*
 * overlap_gpu_bench.c - the GPU version of overlap_bench.c: exposed communication of the NCCL
 * plane's bucketed allreduces (ftrt_gpu_bucketer_*) behind a synthetic backward pass on the
 * device.
 *
 * Each "backward" slice is a spin kernel on the compute stream (--busy-blocks blocks of one
 * warp, default one per SM, so that NCCL's kernels can run beside it), each producing one
 * gradient tensor that is marked ready with an event on that stream. Modes as in the CPU bench:
 * comm (no compute), none (no communication), after (every tensor ready after the compute),
 * overlap (each tensor ready as soon as its slice is queued). Every step ends with the optimizer
 * stream ordered after the buckets (ftrt_gpu_bucketer_order), a host synchronization and
 * ftrt_bucketer_wait_all(). Prints communication = T(after) - T(none), exposed =
 * T(overlap) - T(none) and their ratio, medians over steps of the slowest trainer.
 *
 * NCCL allows one rank per GPU: with one GPU run one trainer (the allreduce is then NCCL's
 * one-rank copy; the figure shows the stream/event overlap, not a network), with G GPUs up to G
 * trainers (trainer r uses device r % G):
 *   FTRT_SPARES=0 mpirun -np 2 build/bench/overlap_gpu_bench --grad-mib 400
 * --cta-policy / --min-ctas / --max-ctas set the plane's NCCL communicator settings
 * (FTRT_NCCL_CTA_POLICY, FTRT_NCCL_MIN_CTAS, FTRT_NCCL_MAX_CTAS; the environment's otherwise);
 * the RESULT line names the values in use (0 / unset: NCCL's own).
 * --in-place sets the bucketer's ftrt_bucket_config.in_place and allocates each bucket as one
 * device buffer with every gradient a view at its ftrt_bucketer_layout() offset (DDP's
 * gradient_as_bucket_view), so that the plane reduces the buckets where they lie with no pack
 * or unpack kernel; the run fails if any byte went through a staging copy
 * (ftrt_bucketer_packed_bytes), and the RESULT line says in_place=1 and the bytes packed.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftrt_gpu.h"
#include "kernels/kernels_gpu.h"

typedef struct opts {
    double grad_mib, bucket_mib, first_mib, compute_ms, compute_ratio;
    int tensors, steps, warmup, busy_blocks, in_place;
    int cta_policy, min_ctas, max_ctas; /* -1: as FTRT_NCCL_* (the environment) has it */
} opts;

static const char *const cta_names[] = {"unset", "default", "efficiency", "zero"};

/* FTRT_NCCL_CTA_* for a name of cta_names, or -2 for none. */
static int cta_policy_of(const char *v)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(v, cta_names[i])) return i;
    return -2;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench {
    ftrt_ctx *ctx;
    ftrt_gpu *g;
    ftrt_bucketer *b;
    cudaStream_t compute;
    opts o;
    float **t;
    void **bufs; /* --in-place: one device buffer per bucket, t[j] views into them */
    size_t *counts;
    long long slice_cycles;
} bench;

enum { M_COMM, M_NONE, M_AFTER, M_OVERLAP };
static const char *mode_name[] = {"comm", "none", "after", "overlap"};

static int step(bench *B, int mode)
{
    int T = B->o.tensors, rc = 0;
    for (int j = T - 1; j >= 0; j--) {
        if (mode != M_COMM && ftrt__kgpu_busy(B->slice_cycles, B->o.busy_blocks, B->compute))
            return FTRT_ECUDA;
        if (mode == M_OVERLAP && (rc = ftrt_gpu_bucketer_ready(B->b, j, B->t[j], B->compute)))
            return rc;
    }
    if (mode == M_COMM || mode == M_AFTER)
        for (int j = T - 1; j >= 0; j--)
            if ((rc = ftrt_gpu_bucketer_ready(B->b, j, B->t[j], B->compute)) != 0) return rc;
    if (mode != M_NONE && (rc = ftrt_gpu_bucketer_order(B->b, B->compute)) != 0) return rc;
    if (cudaStreamSynchronize(B->compute) != cudaSuccess) return FTRT_ECUDA;
    if (mode != M_NONE) rc = ftrt_bucketer_wait_all(B->b);
    return rc;
}

static int run_mode(bench *B, int mode, double *out)
{
    int n = B->o.steps, rc = 0;
    double *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < B->o.warmup && !rc; i++) rc = step(B, mode);
    for (int i = 0; i < n && !rc; i++) {
        double sync = 0;
        if ((rc = ftrt_allreduce(B->ctx, &sync, 1, FTRT_FLOAT64, FTRT_SUM)) != 0) break;
        double t0 = now();
        rc = step(B, mode);
        t[i] = now() - t0;
    }
    if (!rc) rc = ftrt_allreduce(B->ctx, t, (size_t)n, FTRT_FLOAT64, FTRT_MAX);
    if (!rc) {
        qsort(t, (size_t)n, sizeof *t, cmp_double);
        *out = t[n / 2];
    }
    free(t);
    return rc;
}

/* SM cycles per millisecond of the busy kernel, timed with events (the slowest trainer's). */
static int calibrate(bench *B, double *cycles_per_ms)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const long long cyc = 20000000;
    ftrt__kgpu_busy(cyc, B->o.busy_blocks, B->compute); /* warm up */
    cudaEventRecord(a, B->compute);
    ftrt__kgpu_busy(cyc, B->o.busy_blocks, B->compute);
    cudaEventRecord(b, B->compute);
    float ms = 0;
    int rc = cudaEventSynchronize(b) == cudaSuccess && cudaEventElapsedTime(&ms, a, b) == cudaSuccess
                 ? 0 : FTRT_ECUDA;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    double r[1] = {ms > 0 ? cyc / (double)ms : 1e6};
    if (!rc) rc = ftrt_allreduce(B->ctx, r, 1, FTRT_FLOAT64, FTRT_MIN);
    *cycles_per_ms = r[0];
    return rc;
}

/* The gradients: a device buffer each, or (--in-place) one buffer per bucket with each
 * gradient at its ftrt_bucketer_layout() offset. Zeroed. 0, -ENOMEM or FTRT_EINVAL. */
static int alloc_grads(bench *B)
{
    int T = B->o.tensors, nb = ftrt_bucketer_buckets(B->b);
    if (!B->o.in_place) {
        for (int j = 0; j < T; j++) {
            if (cudaMalloc((void **)&B->t[j], B->counts[j] * 4 + 4) != cudaSuccess) return -12;
            cudaMemset(B->t[j], 0, B->counts[j] * 4);
        }
        return 0;
    }
    size_t *off = calloc((size_t)T, sizeof *off), *size = calloc((size_t)nb, sizeof *size);
    int *bk = calloc((size_t)T, sizeof *bk), rc = off && size && bk && nb > 0 ? 0 : -12;
    for (int j = 0; !rc && j < T; j++) {
        if ((bk[j] = ftrt_bucketer_layout(B->b, j, &off[j])) < 0 || bk[j] >= nb) rc = FTRT_EINVAL;
        else if (off[j] + B->counts[j] * 4 > size[bk[j]]) size[bk[j]] = off[j] + B->counts[j] * 4;
    }
    if (!rc && !(B->bufs = calloc((size_t)nb, sizeof *B->bufs))) rc = -12;
    for (int k = 0; !rc && k < nb; k++)
        if (cudaMalloc(&B->bufs[k], size[k] + 4) != cudaSuccess ||
            cudaMemset(B->bufs[k], 0, size[k]) != cudaSuccess)
            rc = -12;
    for (int j = 0; !rc && j < T; j++) B->t[j] = (float *)((char *)B->bufs[bk[j]] + off[j]);
    free(off);
    free(size);
    free(bk);
    return rc;
}

static void free_grads(bench *B)
{
    int nb = ftrt_bucketer_buckets(B->b);
    if (B->bufs) {
        for (int k = 0; k < nb; k++) cudaFree(B->bufs[k]);
        free(B->bufs);
    } else if (B->t) {
        for (int j = 0; j < B->o.tensors; j++) cudaFree(B->t[j]);
    }
    free(B->t);
    free(B->counts);
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.grad_mib = 400, .bucket_mib = 25, .first_mib = 1, .compute_ms = -1,
                .compute_ratio = 1.0, .tensors = 100, .steps = 20, .warmup = 3, .busy_blocks = 0,
                .cta_policy = -1, .min_ctas = -1, .max_ctas = -1};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--in-place")) {
            o->in_place = 1;
            i--; /* (a flag: no value) */
            continue;
        }
        if (!v) return 1;
        if (!strcmp(a, "--grad-mib")) o->grad_mib = atof(v);
        else if (!strcmp(a, "--bucket-mib")) o->bucket_mib = atof(v);
        else if (!strcmp(a, "--first-bucket-mib")) o->first_mib = atof(v);
        else if (!strcmp(a, "--compute-ms")) o->compute_ms = atof(v);
        else if (!strcmp(a, "--compute-ratio")) o->compute_ratio = atof(v);
        else if (!strcmp(a, "--tensors")) o->tensors = atoi(v);
        else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--busy-blocks")) o->busy_blocks = atoi(v);
        else if (!strcmp(a, "--cta-policy")) o->cta_policy = cta_policy_of(v);
        else if (!strcmp(a, "--min-ctas")) o->min_ctas = atoi(v);
        else if (!strcmp(a, "--max-ctas")) o->max_ctas = atoi(v);
        else return 1;
    }
    return !(o->grad_mib > 0 && o->tensors > 0 && o->steps > 0 && o->bucket_mib > 0 &&
             o->cta_policy >= -1);
}

int main(int argc, char **argv)
{
    bench B = {0};
    if (parse(argc, argv, &B.o)) {
        fprintf(stderr, "usage: overlap_gpu_bench [--grad-mib M] [--tensors T] [--bucket-mib B] "
                        "[--first-bucket-mib F] [--compute-ms C | --compute-ratio R] "
                        "[--busy-blocks K] [--steps S] [--warmup W] "
                        "[--cta-policy unset|default|efficiency|zero] [--min-ctas N] "
                        "[--max-ctas N] [--in-place]\n");
        return 2;
    }
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "/tmp/ftrt-overlap-gpu-bench");
    if (B.o.cta_policy >= 0) cfg.nccl_cta_policy = B.o.cta_policy; /* (ftrt_init checks them) */
    if (B.o.min_ctas >= 0) cfg.nccl_min_ctas = B.o.min_ctas;
    if (B.o.max_ctas >= 0) cfg.nccl_max_ctas = B.o.max_ctas;
    int rc = ftrt_init(&cfg, &B.ctx);
    if (rc == FTRT_DONE) return ftrt_finalize(B.ctx), 0;
    if (rc < 0) return fprintf(stderr, "ftrt_init: %s\n", ftrt_strerror(rc)), 1;
    int rank = ftrt_rank(B.ctx), N = ftrt_size(B.ctx), T = B.o.tensors;
    int ndev = ftrt__kgpu_device_count();
    if (ndev == 0) {
        if (rank == 0) printf("overlap_gpu_bench: no usable CUDA device: nothing to measure\n");
        ftrt_finalize(B.ctx);
        return 0;
    }
    int dev = rank % ndev;
    if ((rc = ftrt_gpu_create(B.ctx, dev, &B.g)) != 0) goto fail;
    if (B.o.busy_blocks <= 0) cudaDeviceGetAttribute(&B.o.busy_blocks, cudaDevAttrMultiProcessorCount, dev);
    cudaStreamCreateWithFlags(&B.compute, cudaStreamNonBlocking);
    size_t total = (size_t)(B.o.grad_mib * 1048576.0 / 4);
    B.t = calloc((size_t)T, sizeof *B.t);
    B.counts = calloc((size_t)T, sizeof *B.counts);
    for (int j = 0; j < T; j++) B.counts[j] = total / (size_t)T + (j < (int)(total % (size_t)T));
    ftrt_bucket_config bc;
    ftrt_bucket_config_init(&bc, sizeof bc);
    bc.bucket_bytes = (size_t)(B.o.bucket_mib * 1048576.0);
    bc.first_bucket_bytes = (size_t)(B.o.first_mib * 1048576.0);
    bc.in_place = B.o.in_place;
    if ((rc = ftrt_gpu_bucketer_create(B.g, B.counts, T, FTRT_FLOAT32, &bc, &B.b)) != 0) goto fail;
    if ((rc = alloc_grads(&B)) != 0) goto fail;
    double cyc_per_ms;
    if ((rc = calibrate(&B, &cyc_per_ms)) != 0) goto fail;
    double tm[4] = {0};
    if ((rc = run_mode(&B, M_COMM, &tm[M_COMM])) != 0) goto fail;
    double compute_ms = B.o.compute_ms >= 0 ? B.o.compute_ms : B.o.compute_ratio * tm[M_COMM] * 1e3;
    B.slice_cycles = (long long)(compute_ms / T * cyc_per_ms);
    for (int m = M_NONE; m <= M_OVERLAP; m++)
        if ((rc = run_mode(&B, m, &tm[m])) != 0) goto fail;
    long long packed = ftrt_bucketer_packed_bytes(B.b);
    if (B.o.in_place && packed != 0) {
        fprintf(stderr, "overlap_gpu_bench (rank %d): --in-place, but %lld bytes went through "
                        "the staging copy: the in-place path was not taken\n", rank, packed);
        rc = FTRT_ESTATE;
        goto fail;
    }
    if (rank == 0) {
        double comm = tm[M_AFTER] - tm[M_NONE], exposed = tm[M_OVERLAP] - tm[M_NONE];
        printf("overlap_gpu_bench: %d trainers on %d GPU(s), %.1f MiB of float32 gradients in %d "
               "tensors, %d buckets%s, compute %.2f ms per step (%d busy blocks)\n", N, ndev,
               B.o.grad_mib, T, ftrt_bucketer_buckets(B.b),
               B.o.in_place ? " (in place: gradients as bucket views)" : "", compute_ms,
               B.o.busy_blocks);
        for (int m = 0; m < 4; m++) printf("  %-8s %8.3f ms/step\n", mode_name[m], tm[m] * 1e3);
        printf("RESULT plane=nccl trainers=%d compute_ms=%.3f comm_ms=%.3f after_ms=%.3f "
               "exposed_ms=%.3f ratio=%.3f cta_policy=%s min_ctas=%d max_ctas=%d in_place=%d "
               "packed_bytes=%lld\n", N, compute_ms, tm[M_COMM] * 1e3, comm * 1e3,
               exposed * 1e3, comm > 0 ? exposed / comm : NAN,
               cta_names[cfg.nccl_cta_policy & 3], cfg.nccl_min_ctas, cfg.nccl_max_ctas,
               B.o.in_place, packed);
    }
    free_grads(&B);
    ftrt_bucketer_free(B.b);
    ftrt_gpu_free(B.g);
    ftrt_finalize(B.ctx);
    return 0;
fail:
    fprintf(stderr, "overlap_gpu_bench (rank %d): %s\n", rank, ftrt_strerror(rc));
    ftrt_finalize(B.ctx);
    return 1;
}

/*
 * overlap_bench.c - how much gradient communication stays exposed when the buckets' allreduces
 * overlap the backward pass (the CPU data plane: ftrt bucketer + progress thread).
 *
 * A synthetic step: a "backward pass" of --tensors slices of compute (--compute-ms in all, or
 * --compute-ratio times the measured communication time), each slice producing one gradient
 * tensor (--grad-mib MiB of float32 in all), with the bucketer's defaults unless --bucket-mib /
 * --first-bucket-mib / --piece-mib say otherwise (--piece-mib 0: whole buckets, as DDP). Run
 * four ways, --steps timed steps each (after --warmup):
 *   comm     no compute: the buckets' allreduces alone (the communication time C)
 *   none     compute only, no communication (T0)
 *   after    compute, then every tensor ready and wait (communication after compute, T1)
 *   overlap  each tensor marked ready as soon as its slice is done, wait at the end (T2)
 * and prints communication = T1 - T0, exposed = T2 - T0 and exposed / communication. The
 * compute is --compute spin (a calibrated amount of arithmetic: stolen CPU time makes it longer,
 * as it would a real CPU backward pass) or sleep (the host CPU is free, as when the backward
 * pass runs on an accelerator). Step times are the maximum over trainers, median over steps.
 *
 * Usage (one coordinator + N trainers, no spare):
 *   FTRT_SPARES=0 mpirun --oversubscribe --bind-to none -np 3 build/bench/overlap_bench \
 *       --grad-mib 100 --tensors 50 --compute-ratio 1.5
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftrt.h"

typedef struct opts {
    double grad_mib, bucket_mib, first_mib, piece_mib, compute_ms, compute_ratio;
    int tensors, steps, warmup, sleep_mode;
} opts;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One unit of spin compute: a dependent chain of multiply-adds on registers (no memory
 * traffic, so it measures stolen CPU time, not bandwidth contention). */
static volatile double sink;
static void spin_units(long units)
{
    double a = 1.0000001, x = 1.0;
    for (long u = 0; u < units; u++)
        for (int i = 0; i < 1000; i++) x = x * a + 1e-9;
    sink = x;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench {
    ftrt_ctx *ctx;
    ftrt_bucketer *b;
    opts o;
    float **grads;
    size_t *counts;
    long units_per_ms; /* spin calibration, the same on every trainer */
    double wait_s;     /* time inside ftrt_bucketer_wait_all, summed over a mode's steps */
    double cpu_s;      /* process CPU time per step of the last mode run (all threads) */
    double slice_ms;
} bench;

static void compute_slice(bench *B)
{
    if (B->slice_ms <= 0) return;
    if (B->o.sleep_mode) {
        long ns = (long)(B->slice_ms * 1e6);
        struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
        nanosleep(&ts, NULL);
    } else {
        spin_units((long)(B->slice_ms * (double)B->units_per_ms + 0.5));
    }
}

enum { M_COMM, M_NONE, M_AFTER, M_OVERLAP };
static const char *mode_name[] = {"comm", "none", "after", "overlap"};

/* One step in `mode`. Returns 0 or an ftrt error. */
static int step(bench *B, int mode)
{
    int T = B->o.tensors, rc = 0;
    for (int j = T - 1; j >= 0; j--) { /* backward: the last tensor's gradient comes first */
        if (mode != M_COMM) compute_slice(B);
        if (mode == M_OVERLAP && (rc = ftrt_bucketer_ready(B->b, j, B->grads[j])) != 0) return rc;
    }
    if (mode == M_COMM || mode == M_AFTER)
        for (int j = T - 1; j >= 0; j--)
            if ((rc = ftrt_bucketer_ready(B->b, j, B->grads[j])) != 0) return rc;
    if (mode != M_NONE) {
        double t0 = now();
        rc = ftrt_bucketer_wait_all(B->b);
        B->wait_s += now() - t0;
    }
    return rc;
}

/* Median over steps of the slowest trainer's step time, seconds. */
static int run_mode(bench *B, int mode, double *out)
{
    int n = B->o.steps, rc;
    double *t = calloc((size_t)n, sizeof *t);
    if (!t) return -1;
    for (int i = 0; i < B->o.warmup; i++)
        if ((rc = step(B, mode)) != 0) goto out;
    B->wait_s = 0;
    double cpu0 = cpu_now();
    for (int i = 0; i < n; i++) {
        double sync = 0;
        if ((rc = ftrt_allreduce(B->ctx, &sync, 1, FTRT_FLOAT64, FTRT_SUM)) != 0) goto out;
        double t0 = now();
        if ((rc = step(B, mode)) != 0) goto out;
        t[i] = now() - t0;
    }
    if ((rc = ftrt_allreduce(B->ctx, t, (size_t)n, FTRT_FLOAT64, FTRT_MAX)) != 0) goto out;
    B->cpu_s = (cpu_now() - cpu0) / n;
    if ((rc = ftrt_allreduce(B->ctx, &B->cpu_s, 1, FTRT_FLOAT64, FTRT_MAX)) != 0) goto out;
    B->wait_s /= n; /* per step, this trainer */
    if ((rc = ftrt_allreduce(B->ctx, &B->wait_s, 1, FTRT_FLOAT64, FTRT_MAX)) != 0) goto out;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *out = t[n / 2];
out:
    free(t);
    return rc;
}

static long calibrate(bench *B)
{
    spin_units(50); /* warm up */
    double t0 = now();
    long units = 0;
    while (now() - t0 < 0.2) {
        spin_units(20);
        units += 20;
    }
    double rate = units / ((now() - t0) * 1e3);
    int64_t r[1] = {(int64_t)rate}; /* the slowest trainer's rate: equal work everywhere */
    if (ftrt_allreduce(B->ctx, r, 1, FTRT_INT64, FTRT_MIN)) return -1;
    return r[0] > 0 ? r[0] : 1;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.grad_mib = 100, .bucket_mib = 25, .first_mib = 1, .piece_mib = 4,
                .compute_ms = -1, .compute_ratio = 1.5, .tensors = 50, .steps = 15, .warmup = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sleep")) { o->sleep_mode = 1; continue; }
        if (!v) goto bad;
        if (!strcmp(a, "--grad-mib")) o->grad_mib = atof(v);
        else if (!strcmp(a, "--bucket-mib")) o->bucket_mib = atof(v);
        else if (!strcmp(a, "--first-bucket-mib")) o->first_mib = atof(v);
        else if (!strcmp(a, "--piece-mib")) o->piece_mib = atof(v);
        else if (!strcmp(a, "--compute-ms")) o->compute_ms = atof(v);
        else if (!strcmp(a, "--compute-ratio")) o->compute_ratio = atof(v);
        else if (!strcmp(a, "--tensors")) o->tensors = atoi(v);
        else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--compute")) o->sleep_mode = !strcmp(v, "sleep");
        else goto bad;
        i++;
    }
    if (o->grad_mib > 0 && o->tensors > 0 && o->steps > 0 && o->bucket_mib > 0 && o->first_mib > 0 &&
        o->piece_mib >= 0)
        return 0;
bad:
    fprintf(stderr, "usage: overlap_bench [--grad-mib M] [--tensors T] [--bucket-mib B] "
                    "[--first-bucket-mib F] [--piece-mib P (0: whole buckets)] "
                    "[--compute-ms C | --compute-ratio R] "
                    "[--compute spin|sleep] [--steps S] [--warmup W]\n");
    return 1;
}

int main(int argc, char **argv)
{
    bench B = {0};
    if (parse(argc, argv, &B.o)) return 2;
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "/tmp/ftrt-overlap-bench");
    int rc = ftrt_init(&cfg, &B.ctx);
    if (rc == FTRT_DONE) return ftrt_finalize(B.ctx), 0;
    if (rc < 0) {
        fprintf(stderr, "ftrt_init: %s\n", ftrt_strerror(rc));
        return 1;
    }
    int T = B.o.tensors, rank = ftrt_rank(B.ctx), N = ftrt_size(B.ctx);
    size_t total = (size_t)(B.o.grad_mib * 1048576.0 / 4);
    B.grads = calloc((size_t)T, sizeof *B.grads);
    B.counts = calloc((size_t)T, sizeof *B.counts);
    for (int j = 0; j < T; j++) {
        B.counts[j] = total / (size_t)T + (j < (int)(total % (size_t)T));
        B.grads[j] = malloc(B.counts[j] * 4 + 4);
        for (size_t k = 0; k < B.counts[j]; k++) B.grads[j][k] = (float)((k + j + rank) % 97) * 0.01f;
    }
    ftrt_bucket_config bc;
    ftrt_bucket_config_init(&bc, sizeof bc);
    bc.bucket_bytes = (size_t)(B.o.bucket_mib * 1048576.0);
    bc.first_bucket_bytes = (size_t)(B.o.first_mib * 1048576.0);
    bc.piece_bytes = (size_t)(B.o.piece_mib * 1048576.0);
    if ((rc = ftrt_bucketer_create(B.ctx, B.counts, T, FTRT_FLOAT32, &bc, &B.b)) != 0) goto fail;
    if ((B.units_per_ms = calibrate(&B)) < 0) {
        rc = FTRT_EMPI;
        goto fail;
    }

    double tm[4] = {0};
    if ((rc = run_mode(&B, M_COMM, &tm[M_COMM])) != 0) goto fail;
    double comm_cpu = B.cpu_s; /* CPU time the communication alone takes per step */
    double compute_ms = B.o.compute_ms >= 0 ? B.o.compute_ms : B.o.compute_ratio * tm[M_COMM] * 1e3;
    B.slice_ms = compute_ms / T;
    for (int m = M_NONE; m <= M_OVERLAP; m++)
        if ((rc = run_mode(&B, m, &tm[m])) != 0) goto fail;
    double wait_overlap = B.wait_s; /* the last mode run */
    if (rank == 0) {
        double comm = tm[M_AFTER] - tm[M_NONE], exposed = tm[M_OVERLAP] - tm[M_NONE];
        const char *prog = getenv("FTRT_ASYNC_PROGRESS");
        printf("overlap_bench: %d trainers, %.1f MiB of float32 gradients in %d tensors, %d "
               "buckets (first %.2f MiB, then %.2f MiB) in %d pieces, compute %.1f ms per step "
               "(%s), %s\n",
               N, B.o.grad_mib, T, ftrt_bucketer_buckets(B.b), B.o.first_mib, B.o.bucket_mib,
               ftrt_bucketer_pieces(B.b), compute_ms, B.o.sleep_mode ? "sleep" : "spin",
               prog && !strcmp(prog, "0") ? "progress inside ftrt calls" : "progress thread");
        for (int m = 0; m < 4; m++)
            printf("  %-8s %8.2f ms/step\n", mode_name[m], tm[m] * 1e3);
        printf("  communication alone %.2f ms; after compute %.2f ms; exposed when overlapped "
               "%.2f ms; exposed/communication = %.3f\n",
               tm[M_COMM] * 1e3, comm * 1e3, exposed * 1e3, comm > 0 ? exposed / comm : NAN);
        printf("  communication alone uses %.2f ms of CPU per step (all threads of a trainer): "
               "%.0f%% of its wall time\n", comm_cpu * 1e3, 100 * comm_cpu / tm[M_COMM]);
        printf("  waiting in ftrt_bucketer_wait_all when overlapped: %.2f ms per step (the rest "
               "of the exposed time is compute slowed down by the communication's CPU work)\n",
               wait_overlap * 1e3);
        printf("RESULT trainers=%d compute=%s compute_ms=%.2f comm_ms=%.2f after_ms=%.2f "
               "exposed_ms=%.2f ratio=%.3f wait_ms=%.2f comm_cpu_ms=%.2f\n", N, B.o.sleep_mode ? "sleep" : "spin",
               compute_ms, tm[M_COMM] * 1e3, comm * 1e3, exposed * 1e3,
               comm > 0 ? exposed / comm : NAN, wait_overlap * 1e3, comm_cpu * 1e3);
    }
    ftrt_bucketer_free(B.b);
    for (int j = 0; j < T; j++) free(B.grads[j]);
    free(B.grads);
    free(B.counts);
    ftrt_finalize(B.ctx);
    return 0;
fail:
    fprintf(stderr, "overlap_bench (rank %d): %s\n", rank, ftrt_strerror(rc));
    ftrt_finalize(B.ctx);
    return 1;
}

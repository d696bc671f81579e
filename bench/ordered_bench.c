/*
 * ordered_bench.c - the price of the fixed-order allreduce (ftrt_allreduce_ordered, comm/
 * ordered.c; issue 35): it against Open MPI's MPI_Iallreduce (started and waited with
 * MPI_Wait) and against ftrt_allreduce (MPI_Iallreduce on ftrt's staging, polled with the
 * epoch flag) in the same job, on the same trainers in the same (logical rank) order, float32
 * SUM (docs/collectives.md "Fixed-order allreduce"; docs/benchmarks.md has the figures).
 *
 * Every trainer holds its own logical rank (N = the number of trainers), the layout of a job
 * before any fold; with --nlogical N (at most 64 per trainer) trainer r holds the logical ranks
 * [r * N / P, (r + 1) * N / P) of P trainers (N = 4 on 3 trainers: a folded job, the last one
 * holding two; MPI_Iallreduce and ftrt_allreduce still reduce one vector per trainer).
 * Each repetition runs every variant once, in turn (ordered, MPI_Iallreduce, ftrt_allreduce),
 * so that a change of load on the machine hits all alike; a time is the slowest trainer's,
 * and the figure the median over --reps (after one warm-up run of each).
 * The MPI reference runs on a communicator of the same trainers in logical rank order
 * (MPI_Comm_create_group over MPI_COMM_WORLD, the world ranks exchanged with an
 * ftrt_allreduce), the group, order and transport of ftrt's own plane communicator.
 *
 * Usage (one coordinator + N trainers, no spare):
 *   FTRT_SPARES=0 mpirun --oversubscribe --mca mpi_yield_when_idle 1 -np 5 \
 *       build/bench/ordered_bench [--kib 4,1024,16384,65536] [--reps 7] [--nlogical N]
 * Prints one "RESULT" line per size (bench/ordered_bench.sh makes the table).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftrt.h"
#include "trainer_comm.h"

typedef struct bench {
    ftrt_ctx *ctx;
    MPI_Comm comm;
    float *in, *out;
    int nlogical, held[64], nheld; /* logical ranks; this trainer's [r*N/P, (r+1)*N/P) */
    void *contrib[64];             /* each held rank's contribution: `in` (the same bytes) */
} bench;

/* One run of variant v (0 ordered, 1 MPI_Iallreduce, 2 ftrt_allreduce) over count float32; the
 * slowest trainer's seconds, or < 0. The input is refreshed before the clock starts (the
 * in-place variants overwrite it). */
static double run_one(bench *B, int v, size_t count)
{
    int rc = 0;
    if (v != 0) memcpy(B->out, B->in, count * sizeof(float));
    MPI_Barrier(B->comm);
    double t = now();
    if (v == 0) {
        rc = ftrt_allreduce_ordered(B->ctx, B->nlogical, B->held, B->nheld, B->contrib, B->out,
                                    count, FTRT_FLOAT32);
    } else if (v == 1) {
        MPI_Request rq;
        rc = MPI_Iallreduce(MPI_IN_PLACE, B->out, (int)count, MPI_FLOAT, MPI_SUM, B->comm, &rq);
        if (!rc) rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
    } else {
        rc = ftrt_allreduce(B->ctx, B->out, count, FTRT_FLOAT32, FTRT_SUM);
    }
    t = now() - t;
    if (rc) {
        fprintf(stderr, "ordered_bench: variant %d: error %d (%s)\n", v, rc,
                v == 1 ? "MPI" : ftrt_strerror(rc));
        return -1.0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, B->comm);
    return t;
}

/* Every variant at `kib` KiB of float32, reps times (after one warm-up run each); prints the
 * RESULT line on logical rank 0. 0 or -1. */
static int measure(bench *B, double kib, int reps)
{
    size_t count = (size_t)(kib * 1024.0) / sizeof(float);
    double *t[3];
    for (int v = 0; v < 3; v++) t[v] = malloc((size_t)reps * sizeof(double));
    int err = 0;
    for (int k = -1; k < reps && !err; k++)
        for (int v = 0; v < 3 && !err; v++) {
            double s = run_one(B, v, count);
            if (s < 0) err = -1;
            else if (k >= 0) t[v][k] = s;
        }
    if (!err && ftrt_rank(B->ctx) == 0) {
        for (int v = 0; v < 3; v++) qsort(t[v], (size_t)reps, sizeof(double), cmp_double);
        double m[3];
        for (int v = 0; v < 3; v++) m[v] = t[v][reps / 2];
        printf("RESULT ranks=%d nlogical=%d kib=%g ordered_ms=%.3f mpi_ms=%.3f ftrt_ms=%.3f "
               "ordered_over_mpi=%.2f ordered_over_ftrt=%.2f ordered_min_ms=%.3f "
               "mpi_min_ms=%.3f\n",
               ftrt_size(B->ctx), B->nlogical, kib, m[0] * 1e3, m[1] * 1e3, m[2] * 1e3, m[0] / m[1],
               m[0] / m[2], t[0][0] * 1e3, t[1][0] * 1e3);
        fflush(stdout);
    }
    for (int v = 0; v < 3; v++) free(t[v]);
    return err;
}

int main(int argc, char **argv)
{
    const char *kibs = "4,1024,16384,65536";
    int reps = 7, nlogical = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--kib")) kibs = argv[i + 1];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--nlogical")) nlogical = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "ordered_bench: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    bench B = {0};
    int rc = ftrt_init(&cfg, &B.ctx);
    if (rc == FTRT_DONE) return ftrt_finalize(B.ctx), 0;
    if (rc < 0) {
        fprintf(stderr, "ordered_bench: ftrt_init: %s\n", ftrt_strerror(rc));
        return 1;
    }
    int P = ftrt_size(B.ctx), r = ftrt_rank(B.ctx);
    B.nlogical = nlogical > 0 ? nlogical : P;
    for (int l = r * B.nlogical / P; l < (r + 1) * B.nlogical / P && B.nheld < 64; l++)
        B.held[B.nheld++] = l;
    double maxkib = 0;
    for (const char *p = kibs; *p;) {
        double m = strtod(p, (char **)&p);
        if (m > maxkib) maxkib = m;
        if (*p == ',') p++;
        else if (*p) break;
    }
    size_t bytes = (size_t)(maxkib * 1024.0) + 64;
    B.in = malloc(bytes);
    B.out = malloc(bytes);
    int err = !B.in || !B.out || trainer_comm(B.ctx, 78, &B.comm) != 0;
    for (int i = 0; i < B.nheld; i++) B.contrib[i] = B.in;
    for (size_t i = 0; !err && i < bytes / sizeof(float); i++) {
        B.in[i] = (float)(i % 1000) * 1e-3f + (float)ftrt_rank(B.ctx);
        B.out[i] = 0.0f;
    }
    for (const char *p = kibs; *p && !err;) {
        double m = strtod(p, (char **)&p);
        err = measure(&B, m, reps) != 0;
        if (*p == ',') p++;
        else if (*p) break;
    }
    free(B.in);
    free(B.out);
    if (err) ftrt_set_exit_code(B.ctx, FTRT_EINVAL);
    ftrt_finalize(B.ctx);
    return err;
}

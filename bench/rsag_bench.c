/*
 * rsag_bench.c - ftrt_reduce_scatter / ftrt_allgather (blocking, and their _start forms waited
 * at once) against Open MPI's MPI_Reduce_scatter_block / MPI_Allgather in the same job, on
 * the same trainers in the same (logical rank) order: the CPU plane's cost of staging both
 * sides and polling against the epoch flag (docs/collectives.md "Reduce-scatter and
 * all-gather"; docs/benchmarks.md has the figures).
 *
 * Sizes are MiB per rank of the full vector: a reduce-scatter's send buffer (each trainer
 * receives 1/N of it, reduced) and an all-gather's receive buffer (each trainer sends 1/N), as
 * ZeRO reduce-scatters a gradient vector and all-gathers a parameter vector; float32, SUM.
 * Throughput = full-vector bytes / time. Each repetition runs every variant once, in turn
 * (ftrt, MPI, ftrt _start), so that a change of load on the machine hits all alike; a time is
 * the slowest trainer's, and the figure the median over --reps. The MPI reference runs on a
 * communicator of the same trainers in logical rank order (MPI_Comm_create_group over
 * MPI_COMM_WORLD, the world ranks exchanged with an ftrt_allreduce): the group, order, sizes
 * and transport of ftrt's own plane communicator, which the API does not expose.
 *
 * Usage (one coordinator + N trainers, no spare):
 *   FTRT_SPARES=0 mpirun --oversubscribe --mca mpi_yield_when_idle 1 -np 5 \
 *       build/bench/rsag_bench [--mib 4,16,64,256] [--reps 7]
 * Prints one "RESULT" line per collective and size (bench/rsag_bench.sh makes the table).
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
    float *send, *recv;
} bench;

/* One run of variant v (0 ftrt blocking, 1 MPI, 2 ftrt _start + wait) of collective rs (1) or
 * all-gather (0) with count elements per rank; the slowest trainer's seconds, or < 0. */
static double run_one(bench *B, int rs, int v, size_t count)
{
    ftrt_request *req = NULL;
    int rc = 0;
    MPI_Barrier(B->comm);
    double t = now();
    if (v == 1 && rs)
        rc = MPI_Reduce_scatter_block(B->send, B->recv, (int)count, MPI_FLOAT, MPI_SUM, B->comm);
    else if (v == 1)
        rc = MPI_Allgather(B->send, (int)count, MPI_FLOAT, B->recv, (int)count, MPI_FLOAT,
                           B->comm);
    else if (rs)
        rc = v == 0 ? ftrt_reduce_scatter(B->ctx, B->send, B->recv, count, FTRT_FLOAT32, FTRT_SUM)
                    : ftrt_reduce_scatter_start(B->ctx, B->send, B->recv, count, FTRT_FLOAT32,
                                                FTRT_SUM, &req);
    else
        rc = v == 0 ? ftrt_allgather(B->ctx, B->send, B->recv, count, FTRT_FLOAT32)
                    : ftrt_allgather_start(B->ctx, B->send, B->recv, count, FTRT_FLOAT32, &req);
    if (!rc && req) rc = ftrt_request_wait(req);
    ftrt_request_free(req);
    t = now() - t;
    if (rc) {
        fprintf(stderr, "rsag_bench: variant %d: error %d (%s)\n", v, rc,
                v == 1 ? "MPI" : ftrt_strerror(rc));
        return -1.0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, B->comm);
    return t;
}

/* Every variant of one collective at `mib` MiB per rank, reps times (after one warm-up run
 * each); prints the RESULT line on logical rank 0. 0 or -1. */
static int measure(bench *B, int rs, double mib, int reps)
{
    int n = ftrt_size(B->ctx);
    size_t full = (size_t)(mib * 1048576.0) / sizeof(float) / (size_t)n * (size_t)n;
    size_t count = full / (size_t)n;
    double *t[3];
    for (int v = 0; v < 3; v++) t[v] = malloc((size_t)reps * sizeof(double));
    int err = 0;
    for (int k = -1; k < reps && !err; k++)
        for (int v = 0; v < 3 && !err; v++) {
            double s = run_one(B, rs, v, count);
            if (s < 0) err = -1;
            else if (k >= 0) t[v][k] = s;
        }
    if (!err && ftrt_rank(B->ctx) == 0) {
        for (int v = 0; v < 3; v++) qsort(t[v], (size_t)reps, sizeof(double), cmp_double);
        double bytes = (double)full * sizeof(float), m[3];
        for (int v = 0; v < 3; v++) m[v] = t[v][reps / 2];
        printf("RESULT coll=%s ranks=%d mib=%g ftrt_ms=%.2f mpi_ms=%.2f start_ms=%.2f "
               "ftrt_gbs=%.3f mpi_gbs=%.3f start_gbs=%.3f ratio=%.3f start_ratio=%.3f "
               "ftrt_min_ms=%.2f mpi_min_ms=%.2f\n",
               rs ? "reduce_scatter" : "allgather", n, mib, m[0] * 1e3, m[1] * 1e3, m[2] * 1e3,
               bytes / m[0] / 1e9, bytes / m[1] / 1e9, bytes / m[2] / 1e9, m[1] / m[0],
               m[1] / m[2], t[0][0] * 1e3, t[1][0] * 1e3);
        fflush(stdout);
    }
    for (int v = 0; v < 3; v++) free(t[v]);
    return err;
}

int main(int argc, char **argv)
{
    const char *mibs = "4,16,64,256";
    int reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mib")) mibs = argv[i + 1];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "rsag_bench: unknown flag %s\n", argv[i]);
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
        fprintf(stderr, "rsag_bench: ftrt_init: %s\n", ftrt_strerror(rc));
        return 1;
    }
    double maxmib = 0;
    for (const char *p = mibs; *p;) {
        double m = strtod(p, (char **)&p);
        if (m > maxmib) maxmib = m;
        if (*p == ',') p++;
        else if (*p) break;
    }
    size_t bytes = (size_t)(maxmib * 1048576.0) + 64;
    B.send = malloc(bytes);
    B.recv = malloc(bytes);
    int err = !B.send || !B.recv || trainer_comm(B.ctx, 77, &B.comm) != 0;
    for (size_t i = 0; !err && i < bytes / sizeof(float); i++) {
        B.send[i] = (float)(i % 1000) * 1e-3f + (float)ftrt_rank(B.ctx);
        B.recv[i] = 0.0f;
    }
    for (int rs = 1; rs >= 0 && !err; rs--)
        for (const char *p = mibs; *p && !err;) {
            double m = strtod(p, (char **)&p);
            err = measure(&B, rs, m, reps) != 0;
            if (*p == ',') p++;
            else if (*p) break;
        }
    free(B.send);
    free(B.recv);
    if (err) ftrt_set_exit_code(B.ctx, FTRT_EINVAL);
    ftrt_finalize(B.ctx);
    return err;
}

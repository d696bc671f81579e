/*
 * trainer_comm.h - pieces shared by the MPI benchmarks that compare an ftrt collective with
 * Open MPI's in one job (bench/rsag_bench.c, bench/ordered_bench.c): a monotonic clock, a
 * comparison for qsort's medians, and the trainers in logical rank order as an MPI
 * communicator of their own, for the MPI side of the comparison. Header-only (static
 * functions): each benchmark is one translation unit.
 */
#ifndef FTRT_BENCH_TRAINER_COMM_H
#define FTRT_BENCH_TRAINER_COMM_H

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "ftrt.h"

/* Monotonic seconds. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* qsort order of doubles, ascending. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* *out: the trainers ordered by logical rank, built with MPI_Comm_create_group (tag: its
 * tag). Collective over the trainers. Returns 0, or -1 (no memory, an MPI failure) or the
 * allreduce's ftrt code. */
static int trainer_comm(ftrt_ctx *ctx, int tag, MPI_Comm *out)
{
    int n = ftrt_size(ctx), me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int64_t *w = calloc((size_t)n, sizeof *w);
    int *ranks = malloc((size_t)n * sizeof *ranks);
    if (!w || !ranks) {
        free(w);
        free(ranks);
        return -1;
    }
    w[ftrt_rank(ctx)] = me;
    int rc = ftrt_allreduce(ctx, w, (size_t)n, FTRT_INT64, FTRT_SUM);
    for (int i = 0; i < n; i++) ranks[i] = (int)w[i];
    MPI_Group world, g;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, n, ranks, &g);
    if (!rc && MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, out) != MPI_SUCCESS) rc = -1;
    MPI_Group_free(&g);
    MPI_Group_free(&world);
    free(w);
    free(ranks);
    return rc;
}

#endif

/*
 * comm_group.c - what a recovery's communicator costs: MPI_Comm_create_group over
 * MPI_COMM_WORLD for a group of every process but one (what runtime/recovery.c does after a
 * death: the members build the new communicator, the dead process is left out and never
 * called), against an MPI_Barrier and an MPI_Allreduce of one int over the world in the same
 * run (docs/benchmarks.md "MPI_Comm_create_group at scale"; bench/comm_group.sh runs it at
 * several sizes).
 *
 * Each repetition: a world barrier; every member of the group (world ranks 0..P-2) times
 * MPI_Comm_create_group(MPI_COMM_WORLD, group, tag = repetition) and frees the communicator;
 * the last process only waits. A repetition's time is the slowest member's; the program prints
 * the median and the maximum over the repetitions, the same for a barrier and an allreduce,
 * and their ratios. Rank 0 prints; a "RESULT key=value ..." line ends the output.
 *
 * Usage: mpirun -n P comm_group [reps]   (P >= 2; reps default 50)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The slowest rank's time of each repetition (on rank 0), sorted. */
static void slowest(double *t, int reps)
{
    double *m = malloc((size_t)reps * sizeof *m);
    MPI_Reduce(t, m, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me == 0) {
        qsort(m, (size_t)reps, sizeof *m, cmp_d);
        for (int i = 0; i < reps; i++) t[i] = m[i];
    }
    free(m);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, p, reps = argc > 1 ? atoi(argv[1]) : 50;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (p < 2 || reps < 1) {
        if (me == 0) fprintf(stderr, "comm_group: needs 2+ processes and reps >= 1\n");
        MPI_Finalize();
        return 2;
    }
    MPI_Group world, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int last = p - 1;
    MPI_Group_excl(world, 1, &last, &group); /* every process but the last: a recovery's */
    double *tc = calloc((size_t)reps, sizeof *tc), *tb = calloc((size_t)reps, sizeof *tb);
    double *ta = calloc((size_t)reps, sizeof *ta);
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (me != last) {
            MPI_Comm c;
            double t0 = MPI_Wtime();
            MPI_Comm_create_group(MPI_COMM_WORLD, group, i, &c);
            tc[i] = MPI_Wtime() - t0;
            MPI_Comm_free(&c);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        tb[i] = MPI_Wtime() - t0;
        int x = me, y;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        ta[i] = MPI_Wtime() - t0;
    }
    slowest(tc, reps);
    slowest(tb, reps);
    slowest(ta, reps);
    if (me == 0) {
        double c50 = tc[(reps - 1) / 2], b50 = tb[(reps - 1) / 2], a50 = ta[(reps - 1) / 2];
        printf("P=%d, %d repetitions (slowest rank each): MPI_Comm_create_group of %d: median "
               "%.3f ms, max %.3f ms; MPI_Barrier: median %.3f ms; MPI_Allreduce(1 int): median "
               "%.3f ms; create_group / barrier %.1f, / allreduce %.1f\n",
               p, reps, p - 1, c50 * 1e3, tc[reps - 1] * 1e3, b50 * 1e3, a50 * 1e3, c50 / b50,
               c50 / a50);
        printf("RESULT p=%d reps=%d create_ms=%.4f create_max_ms=%.4f barrier_ms=%.4f "
               "allreduce_ms=%.4f create_per_barrier=%.2f create_per_allreduce=%.2f\n",
               p, reps, c50 * 1e3, tc[reps - 1] * 1e3, b50 * 1e3, a50 * 1e3, c50 / b50,
               c50 / a50);
    }
    free(tc);
    free(tb);
    free(ta);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    MPI_Finalize();
    return 0;
}

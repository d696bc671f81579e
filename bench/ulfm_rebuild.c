/*
 * ulfm_rebuild.c - what a recovery's communicator rebuild costs under ULFM (Open MPI 5 with
 * `mpirun --with-ft ulfm`), and the two facts behind how comm/ulfm.c rebuilds (comm/ulfm.h).
 *
 *   mpirun --with-ft ulfm --oversubscribe -np N ulfm_rebuild [--reps R] [--pool]
 *   mpirun --with-ft ulfm --oversubscribe -np 6 ulfm_rebuild --revoke
 *
 * Timing mode (N >= 4): world ranks 0..N-2 are the trainers, N-1 the hot spare. The trainers
 * build their communicator with MPI_Comm_create_from_group (and every rank a "pool"
 * communicator of trainers + spare); trainer N-2 then SIGKILLs itself and the others see their
 * MPI_Iallreduce fail (ULFM). The survivors try MPI_Comm_create_group over MPI_COMM_WORLD
 * (ftrt's rebuild under Open MPI 4.1): under ULFM it fails, its error is printed. Then, R
 * times, in an order that turns each round, with the survivors and the spare:
 *   create_from_group  MPI_Comm_create_from_group of survivors + spare (ftrt's rebuild under
 *                      ULFM, comm/ulfm.c)
 *   shrink             MPIX_Comm_shrink of the trainers' communicator (survivors only: it
 *                      cannot add the spare)
 *   pool shrink+split  (--pool) MPIX_Comm_shrink of the pool by every survivor and the spare,
 *                      then MPI_Comm_split into the new order: a rebuild with shrink that adds
 *                      the spare, if every idle spare took part in every recovery. Open MPI
 *                      5.0.11 aborts a live rank in it within a few rounds ("I have been
 *                      reported dead by someone else") or hangs
 * Each call's time is the slowest participant's (the maximum over them, gathered afterwards).
 * Rank 0 prints the median, minimum and maximum over the R rounds and the ratios of medians.
 *
 * --revoke (N = 6; trainers 0-3, spares 4 and 5): the recovery sequence twice, with the
 * survivors revoking the old communicator (MPIX_Comm_revoke) after the failure, as ULFM
 * programs do: trainer 3 dies, the spare 4 joins (create_from_group), trainer 2 dies, spare 5
 * joins. Prints "survived" when every rank gets through; Open MPI 5.0.11 crashes in some runs
 * (SIGSEGV in ompi_comm_revoke_local inside MPI_Comm_create_from_group), which is why ftrt
 * does not revoke.
 *
 * Needs an MPI with ULFM and MPI-4 (Open MPI 5); built by bench/ulfm.cmake only then.
 */
#define _GNU_SOURCE /* usleep */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXREPS 1000

static MPI_Comm from_group(const int *ranks, int n, const char *tag)
{
    MPI_Group world, g;
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, n, ranks, &g);
    int rc = MPI_Comm_create_from_group(g, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &c);
    MPI_Group_free(&g);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "ulfm_rebuild: MPI_Comm_create_from_group(%s) failed (%d)\n", tag, rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return c;
}

/* Allreduces on c, polled, until one fails (a member died: returns 1) or `rounds` passed
 * (returns 0); the member `victim` (rank in c, -1: none) SIGKILLs itself at round 20. */
static int train_until_failure(MPI_Comm c, int victim, int rounds)
{
    int me, x = 1;
    MPI_Comm_rank(c, &me);
    for (int it = 0; it < rounds; it++) {
        if (me == victim && it == 20) raise(SIGKILL);
        MPI_Request q;
        int done = 0, e = MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, c, &q);
        while (e == MPI_SUCCESS && !done) e = MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS) return 1;
        usleep(1000);
    }
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_row(const char *what, double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("%-18s median %8.3f ms  min %8.3f  max %8.3f  (%d rounds)\n", what,
           t[n / 2] * 1e3, t[0] * 1e3, t[n - 1] * 1e3, n);
}

/* The rebuilds of one round (fills the slowest participant's times, ms per method). */
enum { FROM_GROUP, SHRINK, POOL, NMETHODS };
static const char *const method_name[NMETHODS] = {"create_from_group", "shrink",
                                                  "pool shrink+split"};

typedef struct setup {
    MPI_Comm trainers, pool; /* before the death: the trainers; trainers + spare */
    MPI_Group next;          /* survivors + spare, in world rank order */
    int am_trainer, logical; /* logical: rank in the next communicator */
} setup;

static double method(const setup *su, int m, int k)
{
    MPI_Comm c = MPI_COMM_NULL, sh = MPI_COMM_NULL;
    char tag[32];
    double t = MPI_Wtime();
    if (m == FROM_GROUP) {
        snprintf(tag, sizeof tag, "bench.%d", k);
        MPI_Comm_create_from_group(su->next, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &c);
    } else if (m == SHRINK) {
        if (!su->am_trainer) return 0; /* the spare is not in it: shrink cannot add it */
        MPIX_Comm_shrink(su->trainers, &c);
    } else {
        MPIX_Comm_shrink(su->pool, &sh); /* every survivor, spare included */
        MPI_Comm_split(sh, 0, su->logical, &c);
    }
    return MPI_Wtime() - t;
    /* not freed: MPI_Comm_free of these can hang in Open MPI 5.0.11 once a process died */
}

static void round_once(const setup *su, int k, int nmethods, double worst[NMETHODS])
{
    double mine[NMETHODS] = {0};
    for (int i = 0; i < nmethods; i++) { /* a different order each round */
        int m = (i + k) % nmethods;
        mine[m] = method(su, m, k);
    }
    MPI_Comm all;
    char tag[32];
    snprintf(tag, sizeof tag, "bench.max.%d", k);
    MPI_Comm_create_from_group(su->next, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &all);
    MPI_Allreduce(mine, worst, NMETHODS, MPI_DOUBLE, MPI_MAX, all);
}

static int timing(int n, int reps, int nmethods)
{
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int nt = n - 1, spare = n - 1, victim = n - 2;
    int *ranks = malloc((size_t)n * sizeof *ranks), *members = malloc((size_t)n * sizeof *ranks);
    for (int i = 0; i < n; i++) ranks[i] = i;
    setup su = {.trainers = MPI_COMM_NULL, .am_trainer = me < nt};
    su.pool = from_group(ranks, n, "bench.pool");
    int cg_err = MPI_SUCCESS;
    int nm = 0;
    for (int i = 0; i < n; i++)
        if (i != victim) members[nm++] = i;
    for (int i = 0; i < nm; i++)
        if (members[i] == me) su.logical = i;
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, nm, members, &su.next);
    if (su.am_trainer) {
        su.trainers = from_group(ranks, nt, "bench.trainers");
        if (!train_until_failure(su.trainers, victim, 100000)) return 1;
        /* MPI_Comm_create_group over the world (ftrt's rebuild under 4.1), survivors only: the
         * spare may not have heard of the death yet and would then wait in the collective for
         * peers that already left it with the error */
        MPI_Comm cg = MPI_COMM_NULL;
        cg_err = MPI_Comm_create_group(MPI_COMM_WORLD, su.next, 99, &cg);
        if (me == 0) MPI_Send(&me, 1, MPI_INT, spare, 7, MPI_COMM_WORLD); /* wake the spare */
    } else {
        int wake;
        MPI_Recv(&wake, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    static double t[NMETHODS][MAXREPS];
    for (int k = 0; k < reps; k++) {
        double worst[NMETHODS];
        round_once(&su, k, nmethods, worst);
        for (int m = 0; m < NMETHODS; m++) t[m][k] = worst[m];
    }
    if (me == 0) {
        char msg[MPI_MAX_ERROR_STRING] = "MPI_SUCCESS";
        int len = 0;
        if (cg_err != MPI_SUCCESS) MPI_Error_string(cg_err, msg, &len);
        printf("ulfm_rebuild: %d ranks (%d trainers, 1 hot spare), trainer %d killed\n", n, nt,
               victim);
        printf("%-18s fails: %s\n", "create_group", msg);
        for (int m = 0; m < nmethods; m++) print_row(method_name[m], t[m], reps);
        printf("shrink / create_from_group (medians): %.2f\n",
               t[SHRINK][reps / 2] / t[FROM_GROUP][reps / 2]);
        if (nmethods > POOL)
            printf("pool shrink+split / create_from_group (medians): %.2f\n",
                   t[POOL][reps / 2] / t[FROM_GROUP][reps / 2]);
    }
    free(ranks);
    free(members);
    return 0;
}

/* --revoke: two failures, each followed by MPIX_Comm_revoke of the old communicator. */
static int revoke_twice(int n)
{
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (n != 6) {
        if (me == 0) fprintf(stderr, "ulfm_rebuild --revoke: needs -np 6\n");
        return 2;
    }
    int e0[] = {0, 1, 2, 3}, e1[] = {0, 1, 2, 4}, e2[] = {0, 1, 4, 5};
    if (me <= 3) {
        MPI_Comm c = from_group(e0, 4, "revoke.e0");
        train_until_failure(c, 3, 100000);
        MPIX_Comm_revoke(c);
    }
    if (me == 5) {
        sleep(3); /* joins at the second recovery */
    } else {
        MPI_Comm c = from_group(e1, 4, "revoke.e1");
        train_until_failure(c, 2, 100000); /* world rank 2 is rank 2 of e1 */
        MPIX_Comm_revoke(c);
    }
    MPI_Comm c = from_group(e2, 4, "revoke.e2");
    int x = 1;
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, c);
    if (me == 0) printf("ulfm_rebuild --revoke: survived (allreduce over the new members: %d)\n", x);
    return x == 4 ? 0 : 1;
}

int main(int argc, char **argv)
{
    int reps = 20, revoke = 0, nmethods = POOL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--revoke")) {
            revoke = 1;
        } else if (!strcmp(argv[i], "--pool")) {
            nmethods = NMETHODS;
        } else {
            int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
            fprintf(help ? stdout : stderr, "%susage: mpirun --with-ft ulfm -np N %s [--reps R] "
                    "[--pool] [--revoke]\n", help ? "" : "ulfm_rebuild: bad argument; ", argv[0]);
            return help ? 0 : 2;
        }
    }
    if (reps < 1 || reps > MAXREPS) {
        fprintf(stderr, "ulfm_rebuild: --reps: 1..%d\n", MAXREPS);
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (!revoke && n < 4) {
        fprintf(stderr, "ulfm_rebuild: needs at least 4 ranks\n");
        return 2;
    }
    int rc = revoke ? revoke_twice(n) : timing(n, reps, nmethods);
    /* A process died: MPI_Finalize could wait on it (as ftrt, skip it). */
    fflush(stdout);
    _exit(rc);
}

/*
 * nccl_rebuild_bench.c - how long the survivors of a failure take to get a working NCCL
 * communicator without the dead rank: ncclCommShrink of the old one (NCCL_SHRINK_ABORT) against
 * today's full re-init (what comm/nccl_plane.c does: abort the old one, a fresh ncclUniqueId
 * from rank 0 broadcast over MPI, ncclCommInitRankConfig), measured in the same run.
 *
 * Every round builds a parent communicator of all N MPI ranks (nonblocking, as the plane's), has
 * the last rank play the dead one (it aborts its parent at once and takes no further part), and
 * times on each survivor, from a barrier of the survivors:
 *   shrink: ncclCommShrink(parent, copy of {N-1}, 1, &child, cfg, NCCL_SHRINK_ABORT), polled to
 *           ncclSuccess, then ncclCommAbort(parent) (the parent is released with abort, never
 *           destroyed or finalized, and shrink gets a copy of the exclude list: it sorts it in
 *           place; issue 21);
 *   init:   ncclCommAbort(parent), ncclGetUniqueId on survivor 0, MPI_Bcast over the survivors,
 *           ncclCommInitRankConfig of N-1 ranks, polled to ncclSuccess.
 * Each new communicator then reduces one float (the sum must be N-1) before it is destroyed, so
 * that a broken rebuild fails the bench (exit 1) instead of being timed. Per round the slowest
 * survivor counts; the medians over --rounds (after --warmup) are printed with their ratio:
 *   RESULT nccl_rebuild ranks=N survivors=N-1 shrink_ms=... init_ms=... init_over_shrink=...
 *
 * The rebuild ftrt needs after a failure adds a hot spare, which shrink alone cannot do
 * (ncclCommGrow, NCCL 2.29.2, can): this measures the survivors' part only (docs/collectives.md).
 * Exit 77 where nccl.h has no ncclCommShrink (NCCL < 2.27) or no GPU is visible. NCCL allows one
 * rank per GPU of a host: on one GPU give each rank a host of its own (NCCL_HOSTID) and sockets,
 * as scripts/gpu-run.sh's step nccl-rebuild does:
 *   NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 mpirun -np 4 \
 *     bash -c 'export NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK; exec "$@"' _ \
 *     build-gpu/bench/nccl_rebuild_bench --rounds 5
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#if defined(NCCL_SHRINK_ABORT)

static int rank, size;

static int fail(const char *what, ncclResult_t r)
{
    fprintf(stderr, "nccl_rebuild_bench: rank %d: %s: %s\n", rank, what, ncclGetErrorString(r));
    return 1;
}

/* Polls a nonblocking communicator until it leaves ncclInProgress (at most 120 s). */
static ncclResult_t settle(ncclComm_t c)
{
    ncclResult_t st = ncclInProgress;
    for (double end = now() + 120; st == ncclInProgress && now() < end;)
        if (ncclCommGetAsyncError(c, &st) != ncclSuccess) return ncclInternalError;
    return st;
}

/* A nonblocking communicator of the ranks of mpi (size n, this one `me`), id from its rank 0. */
static int build(MPI_Comm mpi, int n, int me, ncclComm_t *out)
{
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (me == 0) r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return fail("ncclGetUniqueId", r);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(out, n, id, me, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) return fail("ncclCommInitRankConfig", r);
    return (r = settle(*out)) == ncclSuccess ? 0 : fail("ncclCommInitRankConfig (async)", r);
}

/* One float summed over c (n ranks) must come out as n. Then c is destroyed. */
static int check_and_free(ncclComm_t c, int n, cudaStream_t s, float *dev)
{
    float one = 1, got = 0;
    cudaMemcpy(dev, &one, sizeof one, cudaMemcpyHostToDevice);
    ncclResult_t r = ncclAllReduce(dev, dev, 1, ncclFloat, ncclSum, c, s);
    if (r == ncclInProgress) r = settle(c);
    if (r != ncclSuccess) return fail("ncclAllReduce", r);
    cudaStreamSynchronize(s);
    cudaMemcpy(&got, dev, sizeof got, cudaMemcpyDeviceToHost);
    if (got != (float)n) {
        fprintf(stderr, "nccl_rebuild_bench: rank %d: allreduce gave %g, not %d\n", rank, got, n);
        return 1;
    }
    ncclCommDestroy(c);
    return 0;
}

/* One round of `how` (0 shrink, 1 init); *ms: this survivor's time. */
static int round_of(int how, MPI_Comm surv, cudaStream_t s, float *dev, double *ms)
{
    ncclComm_t parent = NULL, child = NULL;
    if (build(MPI_COMM_WORLD, size, rank, &parent)) return 1;
    if (rank == size - 1) { /* the dead rank */
        ncclCommAbort(parent);
        return 0;
    }
    MPI_Barrier(surv);
    double t0 = now();
    ncclResult_t r;
    if (how == 0) {
        int excl[1] = {size - 1}; /* a copy per call: shrink sorts it in place */
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        r = ncclCommShrink(parent, excl, 1, &child, &cfg, NCCL_SHRINK_ABORT);
        if (r != ncclSuccess && r != ncclInProgress) return fail("ncclCommShrink", r);
        if ((r = settle(child)) != ncclSuccess) return fail("ncclCommShrink (async)", r);
        ncclCommAbort(parent);
    } else {
        ncclCommAbort(parent);
        int me;
        MPI_Comm_rank(surv, &me);
        if (build(surv, size - 1, me, &child)) return 1;
    }
    *ms = (now() - t0) * 1e3;
    return check_and_free(child, size - 1, s, dev);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(int rounds, int warmup)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        if (rank == 0) printf("skipped: no CUDA device\n");
        return 77;
    }
    cudaSetDevice(rank % ndev);
    cudaStream_t s;
    float *dev;
    cudaStreamCreate(&s);
    cudaMalloc((void **)&dev, sizeof *dev);
    MPI_Comm surv;
    MPI_Comm_split(MPI_COMM_WORLD, rank == size - 1 ? MPI_UNDEFINED : 0, rank, &surv);
    double *t[2] = {calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double))};
    int rc = 0;
    for (int i = 0; i < warmup + rounds && !rc; i++)
        for (int how = 0; how < 2 && !rc; how++) {
            double ms = 0, worst = 0;
            rc = round_of(how, surv, s, dev, &ms);
            MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (i >= warmup) t[how][i - warmup] = worst;
        }
    if (!rc && rank == 0) {
        qsort(t[0], (size_t)rounds, sizeof(double), cmp_double);
        qsort(t[1], (size_t)rounds, sizeof(double), cmp_double);
        double sh = t[0][rounds / 2], in = t[1][rounds / 2];
        int v = 0;
        ncclGetVersion(&v);
        printf("RESULT nccl_rebuild ranks=%d survivors=%d rounds=%d nccl=%d shrink_ms=%.1f "
               "init_ms=%.1f init_over_shrink=%.2f\n", size, size - 1, rounds, v, sh, in,
               sh > 0 ? in / sh : 0);
    }
    if (surv != MPI_COMM_NULL) MPI_Comm_free(&surv);
    free(t[0]);
    free(t[1]);
    cudaFree(dev);
    cudaStreamDestroy(s);
    return rc ? 1 : 0;
}

#endif

int main(int argc, char **argv)
{
    int rounds = 5, warmup = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: nccl_rebuild_bench [--rounds N (5)] [--warmup N (1)]\n");
            return 2;
        }
    }
    if (rounds < 1 || warmup < 0) {
        fprintf(stderr, "nccl_rebuild_bench: --rounds must be >= 1, --warmup >= 0\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
#if defined(NCCL_SHRINK_ABORT)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rc = 2;
    if (size < 3) {
        if (rank == 0) fprintf(stderr, "nccl_rebuild_bench: needs at least 3 ranks\n");
    } else {
        rc = run(rounds, warmup);
    }
#else
    int rc = 77;
    printf("skipped: nccl.h (NCCL %d) has no ncclCommShrink (NCCL 2.27 and later)\n",
           NCCL_VERSION_CODE);
#endif
    MPI_Finalize();
    return rc;
}

/*
 * xfer_bench.c - the recovery's state transfer (comm/transfer.c) against its floor on one host,
 * broken into its parts, in one run (issue 36).
 *
 * Run as `mpirun -np N xfer_bench [--mib S] [--reps R]`: logical ranks 0..N-2 are up to date
 * (the survivors), rank N-1 needs the state (the promoted spare), as in a recovery of 4
 * trainers of which one was killed (N = 4: 3 sources). Each row is the median over R reps of
 * the receiver's time, from a barrier to the end of the row's work:
 *
 *   floor        one local ftrt__copy_crc32c of S MiB into memory already faulted in (the
 *                library's fused copy + CRC32C; the floor of a transfer on one host);
 *   copy / crc   memcpy alone, ftrt__crc32c alone, of the same bytes;
 *   fault        the floor's copy into fresh memory (every page faulted on first touch);
 *   xfer         ftrt__xfer_replicated as a recovery calls it (one region of S MiB, chunk C,
 *                every chunk's CRC32C computed at its source and checked at the receiver);
 *                "fresh" rows receive into memory never touched (a spare that never wrote its
 *                region), the others into memory faulted in; on one host the sources write
 *                the chunks into the receiver themselves (comm/cma.h);
 *   xfer as messages  the same with every chunk an MPI message (the test knob
 *                FTRT_TEST_XFER_NO_CMA, as between hosts: the receiver copies every byte);
 *   mpi          the same bytes as plain MPI messages, no CRC: the stripes of the sources in
 *                chunks of C (MPI's shared-memory path alone); "1 src" from one source only;
 *   mapped       the transfer into a receiver's memory from ftrt_alloc(), a memory file of huge
 *                pages that each source maps and writes with the fused copy + CRC32C (only
 *                where the host has huge pages free: vm.nr_hugepages), and for reference the
 *                floor into such memory ("floor into huge pages").
 *
 * Prints one line per row: ms, GB/s, and the ratio to the floor. --quick: the floor, the transfer
 * with the recovery's 4 MiB chunks (--chunk-mib C: C MiB; written by the sources, and as
 * messages) and the plain MPI stripes only, their reps interleaved (bench/mttr_size.py runs it
 * so, beside the MTTR it measures). Not a test: figures only.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/knobs.h"
#include "base/ports.h"
#include "base/proto.h"
#include "comm/cma.h"
#include "comm/plane.h"
#include "comm/transfer.h"

static int me, np;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fresh anonymous memory, never touched (NULL on failure). */
static unsigned char *fresh(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static long minflt(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

typedef struct bctx {
    ftrt__plane *p;
    size_t n;
    unsigned char *src, *dst; /* dst faulted in */
    unsigned char *huge;      /* the receiver's ftrt_alloc() memory of huge pages, or NULL */
    int32_t *role;
} bctx;

enum kind { FLOOR, COPY, CRC, FAULT, XFER, XFER_FRESH, XFER_MSG, MPI_STRIPES, MPI_ONE,
            XFER_HUGE, FLOOR_HUGE };

/* Plain MPI: the sources' stripes (chunk g from source g mod nsrc; nsrc = np-1 or 1) into dst,
 * no CRC. */
static void mpi_stripes(const bctx *c, unsigned char *dst, size_t chunk, int nsrc)
{
    size_t nk = (c->n + chunk - 1) / chunk;
    MPI_Request *rq = malloc((nk + 1) * sizeof *rq);
    int q = 0;
    for (size_t g = 0; g < nk; g++) {
        size_t off = g * chunk, len = c->n - off < chunk ? c->n - off : chunk;
        int o = (int)(g % (size_t)nsrc);
        if (me == np - 1)
            MPI_Irecv(dst + off, (int)len, MPI_BYTE, o, 1, MPI_COMM_WORLD, &rq[q++]);
        else if (me == o)
            MPI_Isend(c->src + off, (int)len, MPI_BYTE, np - 1, 1, MPI_COMM_WORLD, &rq[q++]);
    }
    MPI_Waitall(q, rq, MPI_STATUSES_IGNORE);
    free(rq);
}

/* One rep of row k; returns the receiver's seconds (0 elsewhere), *flt its minor faults. */
static double one(const bctx *c, enum kind k, size_t chunk, long *flt)
{
    unsigned char *d = (k == FAULT || k == XFER_FRESH) ? fresh(c->n)
                       : (k == XFER_HUGE || k == FLOOR_HUGE) && c->huge ? c->huge : c->dst;
    volatile uint32_t sink = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    long f0 = minflt();
    double t0 = ftrt__now();
    int local = me == np - 1;
    if ((k == FLOOR || k == FLOOR_HUGE) && local) sink = ftrt__copy_crc32c(d, c->src, c->n, 0);
    if (k == FAULT && local) sink = ftrt__copy_crc32c(d, c->src, c->n, 0);
    if (k == COPY && local) memcpy(d, c->src, c->n);
    if (k == CRC && local) sink = ftrt__crc32c(0, c->src, c->n);
    if (k == XFER || k == XFER_FRESH || k == XFER_MSG || k == XFER_HUGE) {
        ftrt__xfer_region r = {"state", me == np - 1 ? d : c->src, c->n, NULL};
        ftrt__xfer_stat st;
        ftrt__knobs.xfer_no_cma = k == XFER_MSG;
        int rc = ftrt__xfer_replicated(c->p, &r, 1, c->role, chunk, -1, 0, &st);
        ftrt__knobs.xfer_no_cma = 0;
        if (rc) fprintf(stderr, "xfer_bench: rank %d: transfer failed: %d\n", me, rc);
        if (!rc && st.single_copy != (k != XFER_MSG) && local)
            fprintf(stderr, "xfer_bench: single copy %d in a row of kind %d\n", st.single_copy,
                    (int)k);
        if (!rc && (st.mapped > 0) != (k == XFER_HUGE) && local)
            fprintf(stderr, "xfer_bench: %d mapped in a row of kind %d\n", st.mapped, (int)k);
    }
    if (k == MPI_STRIPES) mpi_stripes(c, d, chunk, np - 1);
    if (k == MPI_ONE) mpi_stripes(c, d, chunk, 1);
    double t = ftrt__now() - t0;
    *flt = minflt() - f0;
    (void)sink;
    if (d != c->dst && d != c->huge) munmap(d, c->n);
    return local ? t : 0.0;
}

/* Prints one row from its reps samples t (sorted here); returns the median. */
static double print_row(const bctx *c, const char *name, double *t, int reps, long flt,
                        double floor_s)
{
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double m = t[reps / 2];
    if (me == np - 1) {
        printf("  %-34s %9.2f ms %7.2f GB/s", name, m * 1e3, (double)c->n / m / 1e9);
        if (floor_s > 0) printf(" %6.2fx floor", m / floor_s);
        printf("  (min %.2f, max %.2f ms; %ld minor faults)\n", t[0] * 1e3, t[reps - 1] * 1e3,
               flt);
        fflush(stdout);
    }
    return m;
}

static double row(const bctx *c, const char *name, enum kind k, size_t chunk, int reps,
                  double floor_s)
{
    double *t = calloc((size_t)reps, sizeof *t);
    long flt = 0;
    for (int i = 0; i < reps; i++) t[i] = one(c, k, chunk, &flt);
    double m = print_row(c, name, t, reps, flt, floor_s);
    free(t);
    return m;
}

/* --quick: the floor, the transfer (written by the sources, and as messages) and plain MPI,
 * their reps interleaved (floor, xfer, messages, MPI, floor, ...), so that a machine whose load
 * drifts during the run loads the floor and the rows it is compared with alike. */
static void quick_rows(const bctx *c, size_t chunk, int reps)
{
    enum { NQ = 6 };
    static const enum kind kinds[NQ] = {FLOOR, XFER, XFER_MSG, MPI_STRIPES, XFER_HUGE, FLOOR_HUGE};
    int nq = c->huge ? NQ : NQ - 2; /* the mapped rows where huge pages were had */
    double *t = calloc((size_t)reps * NQ, sizeof *t);
    long flt[NQ] = {0};
    for (int i = 0; i < reps; i++)
        for (int j = 0; j < nq; j++)
            t[(size_t)j * (size_t)reps + (size_t)i] = one(c, kinds[j], chunk, &flt[j]);
    double mib = (double)chunk / 1048576.0;
    char nm[NQ][64];
    snprintf(nm[0], sizeof nm[0], "floor: local copy+CRC32C (fused)");
    snprintf(nm[1], sizeof nm[1], "xfer, %g MiB chunks", mib);
    snprintf(nm[2], sizeof nm[2], "xfer as messages, %g MiB chunks", mib);
    snprintf(nm[3], sizeof nm[3], "mpi stripes, %g MiB, no CRC", mib);
    snprintf(nm[4], sizeof nm[4], "mapped: xfer into huge pages, %g MiB", mib);
    snprintf(nm[5], sizeof nm[5], "floor into huge pages");
    double fl = print_row(c, nm[0], t, reps, flt[0], 0);
    for (int j = 1; j < nq; j++)
        print_row(c, nm[j], t + (size_t)j * (size_t)reps, reps, flt[j], fl);
    free(t);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    double mib = 256;
    int reps = 5, quick = 0;
    size_t qchunk = (size_t)4 << 20; /* the recovery's (FTRT__XFER_CHUNK) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        if (i + 1 < argc && !strcmp(argv[i], "--mib")) mib = atof(argv[i + 1]);
        if (i + 1 < argc && !strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        if (i + 1 < argc && !strcmp(argv[i], "--chunk-mib"))
            qchunk = (size_t)(atof(argv[i + 1]) * 1048576.0);
    }
    if (np < 2 || mib <= 0 || reps < 1 || qchunk == 0) {
        if (me == 0) fprintf(stderr, "usage: mpirun -np N>=2 xfer_bench [--mib S] [--reps R]\n");
        MPI_Finalize();
        return 2;
    }
    static ftrt__watch w;
    ftrt__plane p;
    ftrt__plane_init(&p, &w, (ftrt__host){0}, 0, 50);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    ftrt__plane_set(&p, comm);
    bctx c = {.p = &p, .n = (size_t)(mib * 1048576.0)};
    c.src = fresh(c.n);
    c.dst = fresh(c.n);
    c.role = malloc((size_t)np * sizeof *c.role);
    for (int l = 0; l < np; l++)
        c.role[l] = l == np - 1 ? FTRT__PLAN_NEEDS_STATE : FTRT__PLAN_UP_TO_DATE;
    for (size_t i = 0; i < c.n; i++) c.src[i] = (unsigned char)(i * 2654435761u >> 13);
    memset(c.dst, 0, c.n);
    void *hm = NULL; /* the receiver's: huge pages, or none (then no mapped rows anywhere) */
    int huge = me == np - 1 && ftrt_alloc(c.n, &hm) == 0 &&
               ftrt__cma_file_of(hm, c.n).fd >= 0;
    MPI_Allreduce(MPI_IN_PLACE, &huge, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (huge && me == np - 1) memset(hm, 0, c.n);
    c.huge = huge ? (me == np - 1 ? hm : c.dst) : NULL; /* (sources: not used) */
    if (me == np - 1)
        printf("xfer_bench: %.0f MiB, %d source(s) -> 1 receiver, medians of %d; crc32c %s; "
               "huge pages for the mapped rows: %s\n", mib, np - 1, reps,
               ftrt__crc32c_hw() ? "hardware" : "software",
               huge ? "yes" : "none free (vm.nr_hugepages)");
    if (quick) {
        quick_rows(&c, qchunk, reps);
        ftrt_free(hm);
        MPI_Comm_free(&comm);
        MPI_Finalize();
        return 0;
    }
    double fl = row(&c, "floor: local copy+CRC32C (fused)", FLOOR, 0, reps, 0);
    row(&c, "memcpy alone", COPY, 0, reps, fl);
    row(&c, "CRC32C alone", CRC, 0, reps, fl);
    row(&c, "copy+CRC32C into fresh pages", FAULT, 0, reps, fl);
    static const size_t chunks[] = {(size_t)1 << 20, (size_t)4 << 20, (size_t)16 << 20,
                                    (size_t)64 << 20};
    for (int i = 0; i < 4; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "xfer, %zu MiB chunks", chunks[i] >> 20);
        row(&c, nm, XFER, chunks[i], reps, fl);
        snprintf(nm, sizeof nm, "xfer, %zu MiB chunks, fresh pages", chunks[i] >> 20);
        row(&c, nm, XFER_FRESH, chunks[i], reps, fl);
        snprintf(nm, sizeof nm, "xfer as messages, %zu MiB chunks", chunks[i] >> 20);
        row(&c, nm, XFER_MSG, chunks[i], reps, fl);
        snprintf(nm, sizeof nm, "mpi stripes, %zu MiB, no CRC", chunks[i] >> 20);
        row(&c, nm, MPI_STRIPES, chunks[i], reps, fl);
    }
    row(&c, "mpi, 1 source, 4 MiB, no CRC", MPI_ONE, (size_t)4 << 20, reps, fl);
    row(&c, "mpi, 1 source, 64 MiB, no CRC", MPI_ONE, (size_t)64 << 20, reps, fl);
    if (c.huge) {
        row(&c, "floor into huge pages", FLOOR_HUGE, 0, reps, fl);
        row(&c, "mapped: xfer into huge pages, 4 MiB", XFER_HUGE, (size_t)4 << 20, reps, fl);
    }
    ftrt_free(hm);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}

/*
 * xfer_job.c - the recovery's state transfer (comm/transfer.c) between real MPI processes:
 * run as `mpirun -np 4 xfer_job`, with the data plane over MPI_COMM_WORLD and port fakes for
 * the rest (no coordinator: the transfer is the data plane's alone). Cases, in order:
 *  1. two receivers, two sources, regions of odd sizes (a zero-byte one too): every receiver
 *     ends with the sources' bytes; each source sent half; nobody else moved a byte;
 *  2. a bit flipped in chunk 3 on the way (the test knob): the CRC32C catches it, the chunk
 *     comes again from the other source, the bytes end right, every member counts 1 retry;
 *  3. chunk 0 corrupted from every source: FTRT_ECORRUPT on every member; with a lone source
 *     corrupted once, its second try repairs it;
 *  4. nobody needs state: nothing moves.
 * The host cases run twice: the sources writing into the receivers (one host, comm/cma.h:
 * st.single_copy must say so), then as MPI messages (the test knob FTRT_TEST_XFER_NO_CMA).
 * Then the host cases with the regions in ftrt_alloc() memory of huge pages, which the sources
 * map and write with the fused copy (st.mapped must count every source's mapping of every
 * receiver's non-empty region); required under tests/integration/with-huge-pages.sh
 * (FTRT_TEST_HUGE_PAGES=1), skipped, saying so, where no huge pages are free.
 * Then the same cases with the regions in device memory of the simulated device
 * (kernels/loc_sim.c, a test arrangement: PROT_NONE outside its calls, so a host access to
 * them would kill the process) and 256 KiB chunks, so that the device regions go through the
 * host staging in several windows of chunks.
 * Exit 0 when every rank passed (the result is agreed with an allreduce), 1 otherwise.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "base/ports.h"
#include "base/proto.h"
#include "comm/cma.h"
#include "comm/plane.h"
#include "comm/transfer.h"
#include "kernels/location.h"

static int fails, me;
#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "xfer_job rank %d: FAIL %s:%d: ", me, __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

/* The regions' memory: host (malloc, or ftrt_alloc's huge pages: huge) or simulated device
 * memory (dev). */
typedef struct mem {
    int dev, huge;
    unsigned char *p[3];
} mem;

static void mem_set(const mem *m, int i, const unsigned char *src, size_t n)
{
    if (m->dev)
        ftrt__sim_write(m->p[i], src, n);
    else
        memcpy(m->p[i], src, n);
}

static void mem_fill(const mem *m, int i, int byte, size_t n)
{
    unsigned char *b = malloc(n + 1);
    memset(b, byte, n);
    mem_set(m, i, b, n);
    free(b);
}

/* 1 when region i holds want[0..n). */
static int mem_equals(const mem *m, int i, const unsigned char *want, size_t n)
{
    if (!m->dev) return memcmp(m->p[i], want, n) == 0;
    unsigned char *b = malloc(n + 1);
    int ok = ftrt__sim_read(b, m->p[i], n) == 0 && memcmp(b, want, n) == 0;
    free(b);
    return ok;
}

/* What the cases over one kind of memory share: the plane, the regions, their sizes and the
 * bytes every member must end with. */
typedef struct xcase {
    ftrt__plane *p;
    const mem *m;
    const char *where;
    size_t chunk, sizes[3];
    unsigned char *want[3];
    ftrt__xfer_region regs[3];
    uint64_t total;
    int mom_chunk; /* the global index of momentum's only chunk */
} xcase;

/* The regions of a receiver (under `role`) filled with `junk`; a source's left as they are.
 * Returns 1 on a receiver. */
static int scribble_receivers(const xcase *c, const int32_t role[4], int junk)
{
    int receiver = role[me] == FTRT__PLAN_NEEDS_STATE;
    for (int i = 0; i < 3; i++)
        if (receiver) mem_fill(c->m, i, junk, c->sizes[i]);
    return receiver;
}

/* As scribble_receivers, and a source's regions given the bytes wanted. */
static int stage(const xcase *c, const int32_t role[4], int junk)
{
    int receiver = scribble_receivers(c, role, junk);
    for (int i = 0; i < 3; i++)
        if (!receiver) mem_set(c->m, i, c->want[i], c->sizes[i]);
    return receiver;
}

/* Every region of c holds the bytes wanted. */
static void check_regions(const xcase *c)
{
    for (int i = 0; i < 3; i++)
        CHECK(mem_equals(c->m, i, c->want[i], c->sizes[i]), "region %d differs", i);
}

/* 1. logical ranks 1 and 3 need state; 0 and 2 hold it */
static const int32_t role2[4] = {FTRT__PLAN_UP_TO_DATE, FTRT__PLAN_NEEDS_STATE,
                                 FTRT__PLAN_UP_TO_DATE, FTRT__PLAN_NEEDS_STATE};

static void case_striped(const xcase *c)
{
    int receiver = stage(c, role2, 0xAB);
    ftrt__xfer_stat st;
    int rc = ftrt__xfer_replicated(c->p, c->regs, 3, role2, c->chunk, -1, 0, &st);
    CHECK(rc == 0, "%s: transfer returned %d", c->where, rc);
    check_regions(c);
    CHECK(st.sources == 2 && st.receivers == 2, "%d sources, %d receivers", st.sources,
          st.receivers);
    CHECK(st.chunks_retried == 0, "%d retries", st.chunks_retried);
    /* one host: the sources write into the receivers, unless the knob forces messages */
    int single = !c->m->dev && !ftrt__knobs.xfer_no_cma;
    CHECK(st.single_copy == single, "%s: single_copy %d, want %d", c->where, st.single_copy,
          single);
    /* huge pages: 2 sources x 2 receivers x 2 non-empty regions mapped */
    int mapped = single && c->m->huge ? 8 : 0;
    CHECK(st.mapped == mapped, "%s: mapped %d, want %d", c->where, st.mapped, mapped);
    if (receiver)
        CHECK(st.bytes_received == c->total && st.bytes_sent == 0, "received %llu sent %llu",
              (unsigned long long)st.bytes_received, (unsigned long long)st.bytes_sent);
    else /* each source sends its stripe (chunks g, g+2, ...) to both receivers */
        CHECK(st.bytes_sent > 0 && st.bytes_sent < 2 * c->total && st.bytes_received == 0,
              "sent %llu of %llu", (unsigned long long)st.bytes_sent,
              (unsigned long long)(2 * c->total));
    uint64_t sent = st.bytes_sent, all = 0;
    MPI_Allreduce(&sent, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(all == 2 * c->total, "all sent %llu, want %llu", (unsigned long long)all,
          (unsigned long long)(2 * c->total));
    if (me == 0)
        printf("%s, case 1: %.1f MiB to 2 receivers from 2 sources in %.1f ms (%s)\n", c->where,
               (double)c->total / 1048576.0, st.seconds * 1e3,
               st.mapped        ? "written by the sources, mapped"
               : st.single_copy ? "written by the sources"
                                : "messages");
}

/* 2. the "momentum" region's only chunk corrupted on the way once */
static void case_corrupted_once(const xcase *c)
{
    scribble_receivers(c, role2, 0xCD);
    ftrt__xfer_stat st;
    int rc = ftrt__xfer_replicated(c->p, c->regs, 3, role2, c->chunk, c->mom_chunk, 1, &st);
    CHECK(rc == 0, "%s: transfer returned %d", c->where, rc);
    check_regions(c);
    CHECK(st.chunks_retried == 2, "%d retries (want 2: the chunk at each receiver)",
          st.chunks_retried);
    if (me == 0)
        printf("%s, case 2: corrupted chunk caught and resent (%d retries)\n", c->where,
               st.chunks_retried);
}

/* 3. chunk 0 arrives corrupted from every source (the knob on every attempt): every
 * member fails with FTRT_ECORRUPT, none uses the bad bytes silently */
static void case_corrupted_everywhere(const xcase *c)
{
    scribble_receivers(c, role2, 0xEF);
    ftrt__xfer_stat st;
    int rc = ftrt__xfer_replicated(c->p, c->regs, 3, role2, c->chunk, 0, 1000, &st);
    CHECK(rc == FTRT_ECORRUPT, "every source bad: transfer returned %d, want FTRT_ECORRUPT", rc);
    CHECK(st.chunks_retried == 4, "%d retries (want 2 attempts x 2 receivers)", st.chunks_retried);
    if (me == 0)
        printf("%s, case 3: a chunk corrupted from every source: FTRT_ECORRUPT\n", c->where);
}

/* 3b. a lone source, chunk 0 corrupted on the first attempt: the second try repairs it */
static void case_lone_source(const xcase *c)
{
    const int32_t role1[4] = {FTRT__PLAN_UP_TO_DATE, FTRT__PLAN_NEEDS_STATE,
                              FTRT__PLAN_NEEDS_STATE, FTRT__PLAN_NEEDS_STATE};
    stage(c, role1, 0xEF);
    ftrt__xfer_stat st;
    int rc = ftrt__xfer_replicated(c->p, c->regs, 3, role1, c->chunk, 0, 1, &st);
    CHECK(rc == 0, "%s: lone source: transfer returned %d", c->where, rc);
    check_regions(c);
    CHECK(st.chunks_retried == 3, "%d retries (want 3)", st.chunks_retried);
    int mapped = c->m->huge && !ftrt__knobs.xfer_no_cma ? 6 : 0; /* 1 x 3 x 2 */
    CHECK(st.mapped == mapped, "%s: lone source: mapped %d, want %d", c->where, st.mapped, mapped);
}

/* 4. nobody needs state */
static void case_idle(const xcase *c)
{
    const int32_t none[4] = {0, 0, 0, 0};
    ftrt__xfer_stat st;
    int rc = ftrt__xfer_replicated(c->p, c->regs, 3, none, c->chunk, -1, 0, &st);
    CHECK(rc == 0 && st.bytes_sent == 0 && st.bytes_received == 0, "idle transfer moved bytes");
}

static void run_cases(ftrt__plane *p, const mem *m, size_t chunk);

/* The host cases with every rank's regions in ftrt_alloc() memory of huge pages, when every
 * rank had them (required under with-huge-pages.sh: FTRT_TEST_HUGE_PAGES=1). */
static void run_huge_cases(ftrt__plane *p, const size_t sizes[3])
{
    mem huge = {.huge = 1};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        void *q = NULL;
        ok &= ftrt_alloc(sizes[i] + 1, &q) == 0 && ftrt__cma_file_of(q, sizes[i] + 1).fd >= 0;
        huge.p[i] = q;
    }
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    const char *req = getenv("FTRT_TEST_HUGE_PAGES");
    CHECK(ok || !req || strcmp(req, "1") != 0, "huge pages were reserved, yet ftrt_alloc() "
          "gave a rank none");
    if (ok)
        run_cases(p, &huge, (size_t)4 << 20);
    else if (me == 0)
        printf("host, huge pages: skipped (no huge pages free on this host: vm.nr_hugepages)\n");
    for (int i = 0; i < 3; i++) CHECK(ftrt_free(huge.p[i]) == 0, "ftrt_free of region %d", i);
}

/* Every case over the regions of m, in chunks of `chunk` bytes. */
static void run_cases(ftrt__plane *p, const mem *m, size_t chunk)
{
    xcase c = {.p = p, .m = m, .chunk = chunk,
               .where = m->dev ? "device (simulated)" : m->huge ? "host, huge pages" : "host",
               .sizes = {(size_t)9 << 20 | 4321, 0, 77777}}; /* 3 chunks of 4 MiB, ..., 1 */
    for (int i = 0; i < 3; i++) {
        c.want[i] = malloc(c.sizes[i] + 1);
        fill(c.want[i], c.sizes[i], 100u + (unsigned)i);
    }
    const ftrt__loc_ops *loc = m->dev ? ftrt__loc_sim() : NULL;
    c.regs[0] = (ftrt__xfer_region){"params", m->p[0], c.sizes[0], loc};
    c.regs[1] = (ftrt__xfer_region){"empty", m->p[1], 0, loc};
    c.regs[2] = (ftrt__xfer_region){"momentum", m->p[2], c.sizes[2], loc};
    c.total = c.sizes[0] + c.sizes[2];
    c.mom_chunk = (int)((c.sizes[0] + chunk - 1) / chunk);
    case_striped(&c);
    case_corrupted_once(&c);
    case_corrupted_everywhere(&c);
    case_lone_source(&c);
    case_idle(&c);
    for (int i = 0; i < 3; i++) free(c.want[i]);
}

int main(int argc, char **argv)
{
    int provided, n;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 4) {
        if (me == 0) fprintf(stderr, "xfer_job: run with 4 processes\n");
        MPI_Finalize();
        return 2;
    }
    static ftrt__watch w; /* epoch 0, nothing pending */
    ftrt__plane p;
    ftrt__plane_init(&p, &w, (ftrt__host){0}, 0, 50);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    ftrt__plane_set(&p, comm);

    size_t sizes[3] = {(size_t)9 << 20 | 4321, 1, 77777};
    mem host = {.dev = 0}, dev = {.dev = 1};
    for (int i = 0; i < 3; i++) {
        host.p[i] = malloc(sizes[i] + 1);
        dev.p[i] = ftrt__sim_alloc(sizes[i]); /* (the empty region gets a byte of its own) */
    }
    run_cases(&p, &host, (size_t)4 << 20); /* the sources write into the receivers */
    ftrt__knobs.xfer_no_cma = 1;
    run_cases(&p, &host, (size_t)4 << 20); /* MPI messages, as between hosts */
    ftrt__knobs.xfer_no_cma = 0;
    run_huge_cases(&p, sizes);
    run_cases(&p, &dev, (size_t)256 << 10);

    int bad = fails, anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0) printf("xfer_job: %s\n", anybad ? "FAILED" : "passed");
    for (int i = 0; i < 3; i++) free(host.p[i]), ftrt__sim_free(dev.p[i]);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return anybad ? 1 : 0;
}

/*
 * ordered.c - the fixed-order allreduce of the CPU plane (ftrt_allreduce_ordered, include/
 * ftrt.h): the SUM of the contributions of N logical ranks computed as
 * (((c_0 + c_1) + c_2) + ... + c_{N-1}) elementwise, strictly in logical rank order, so that
 * its bytes do not depend on which process holds which logical rank nor on how many processes
 * there are (issue 35, policy `fold`: a survivor computing a lost rank's micro-batches too must
 * produce the bytes of an undisturbed run). MPI_Iallreduce cannot give that: its algorithm and
 * summation order change with the number of processes.
 *
 * A process may hold several logical ranks (`held`, ascending; contrib[i] is held[i]'s buffer).
 * The call runs in three stages on the plane's communicator, every MPI call nonblocking and
 * polled together with the epoch watch (a failure elsewhere returns FTRT_ERECOVER and leaves
 * `out` unchanged, as every collective of comm/mpi_plane.c):
 *  1. the layout: an MPI_Iallgather of a small header (N, how many ranks each process holds,
 *     count, dtype, whether its own arguments are sane, a hash of its held list and of the
 *     layout it kept from its last call), then, unless every process kept the same layout and
 *     holds what it held then, an MPI_Iallgatherv of the held lists. Every process sees the
 *     same data and so reaches the same verdict: a bad argument anywhere, disagreeing
 *     arguments, or held lists that are not a partition of [0, N) are FTRT_EINVAL on every
 *     process (no process is left waiting for the others).
 *  2. a reduce-scatter in logical order: the vector is cut into windows (WINDOW_BYTES of
 *     contributions per process) and each window over the P processes (owner
 *     p gets [lo_p, lo_p + len_p)); every process packs, for each owner, the pieces of its held
 *     contributions side by side and sends them (MPI_Isend / MPI_Irecv, one message per pair
 *     and window, MPI's non-overtaking order matches them); the owner then has the window's N
 *     pieces of its chunk and sums them in logical rank order (ordered_sum()).
 *  3. an MPI_Iallgatherv of the reduced chunks, in place in an ftrt-owned result buffer.
 * Up to WINDOWS_IN_FLIGHT windows are in flight at once, their all-gathers started in window
 * order (the same sequence of collectives on every process). `out` is written only after every
 * window completed, and every contribution was read (packed) before that, so out may be one of
 * the contributions. The split is that of Rabenseifner's allreduce (reduce-scatter, then
 * all-gather: Thakur, Rabenseifner, Gropp, "Optimization of Collective Communication
 * Operations in MPICH", 2005), except that a chunk's owner receives every contribution and
 * reduces them itself, in logical order, instead of in halving rounds whose pairing depends on
 * P. What travels is what MPI_Ireduce_scatter_block + MPI_Iallgather move
 * (each process sends its held pieces of the other owners' chunks and receives the gathered
 * result), plus the layout exchange: one small collective per call, two when the layout
 * changed.
 *
 * Every buffer a started request reads or writes (the headers, the held lists, the layout's
 * counts, the windows' all-gather counts; the windows themselves are the plane's staging) stays
 * valid until the request completes: when a wait is abandoned (an epoch change), MPI may still
 * progress it later, inside the next epoch's calls, so such buffers go to the plane's graveyard
 * (ftrt__plane_bury), never back to malloc (mpi.fold_long under ASan found the headers freed
 * under an abandoned all-gather).
 *
 * The call is blocking; an overlapped form through the request engine (comm/async.c) does not
 * exist yet: a window is three dependent steps (messages, local sum, all-gather), where the
 * engine's transport starts one MPI request per chunk (docs/collectives.md says more).
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/plane.h"
#include "comm/ulfm.h"
#include "kernels/half.h"
#include "kernels/kernels.h"

#define WINDOWS_IN_FLIGHT 4
/* A window holds WINDOW_BYTES / maxheld of the vector: a process sends each owner about
 * WINDOW_BYTES / P bytes per window. 1 MiB beat 4 MiB (FTRT__CHUNK_BYTES, the request engine's
 * chunk) at 16 and 64 MiB on the 2-core VM, through noise of 2x between runs, and keeps the
 * staging of the windows in flight small (docs/benchmarks.md). */
#define WINDOW_BYTES ((size_t)1 << 20)
#define TAG_ORDERED 7201
#define BLOCK 2048 /* elements summed per pass over the N pieces (stays in L1) */

/* The layout every process agreed on: one malloc'd block, kept in the plane (p->ordered) for
 * the next call and freed with free() by ftrt__plane_free. The layout cache: a call whose
 * header shows that every process holds what it held at the previous exchange, and that every
 * process kept the same layout (the same hash), skips the held lists' all-gather; every
 * process reads the same headers and, its layout being the same, decides alike. A process
 * without one (a promoted spare, after a refusal) sends hash 0, and everyone exchanges. */
typedef struct layout {
    uint64_t hash;      /* of n, nprocs, own[] and all[]: the layout's identity */
    int n, nprocs, maxheld; /* logical ranks, processes, most ranks one process holds */
    uint64_t *own;      /* [nprocs]: each process's held-list hash (held_hash) */
    int *nheld;         /* [nprocs]: how many logical ranks each holds */
    int *displ;         /* [nprocs]: where its held list starts in `all` */
    int *all;           /* [n]: the held lists side by side, process after process */
    int *gpos;          /* [n]: logical rank l's place in `all` */
} layout;

enum { HDR = 7 }; /* header: n, nheld, dtype, ok, count, held_hash, the layout's hash or 0 */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static uint64_t held_hash(const int *held, int nheld)
{
    uint64_t h = fnv(1469598103934665603ull, &nheld, sizeof nheld);
    return nheld ? fnv(h, held, (size_t)nheld * sizeof *held) : h;
}

/* A layout block for n logical ranks over P processes (uninitialized arrays), or NULL. */
static layout *layout_new(int n, int P)
{
    size_t np = (size_t)P, nn = (size_t)n;
    layout *L = malloc(sizeof *L + np * sizeof(uint64_t) + (2 * np + 2 * nn) * sizeof(int));
    if (!L) return NULL;
    L->n = n;
    L->nprocs = P;
    L->own = (uint64_t *)(L + 1);
    L->nheld = (int *)(L->own + np);
    L->displ = L->nheld + np;
    L->all = L->displ + np;
    L->gpos = L->all + nn;
    return L;
}

/* 1 when this process's own arguments are sane (checked before the layout exchange, so that a
 * bad one is every process's FTRT_EINVAL). */
static int local_ok(int n, const int *held, int nheld, void *const *contrib, const void *out,
                    size_t count, ftrt_dtype dtype)
{
    size_t es = ftrt__k_esize((int)dtype);
    if (n < 1 || nheld < 0 || nheld > n || (nheld && (!held || !contrib)) || !out || !count || !es)
        return 0;
    if (count > SIZE_MAX / es / 4) return 0;
    for (int i = 0; i < nheld; i++)
        if (held[i] < 0 || held[i] >= n || (i && held[i] <= held[i - 1]) || !contrib[i]) return 0;
    return 1;
}

/* The headers of every process (P * HDR values) checked alike everywhere: 0, or FTRT_EINVAL
 * (logged) for a bad argument anywhere, a disagreement, or held counts that miss n. */
static int check_headers(const int64_t *hdr, int P, int ok)
{
    int64_t total = 0;
    for (int q = 0; q < P; q++) {
        const int64_t *h = hdr + HDR * q;
        if (!h[3] || h[0] != hdr[0] || h[2] != hdr[2] || h[4] != hdr[4]) {
            ftrt_log_warn("ftrt_allreduce_ordered: %s: refused", !ok ? "a bad argument here"
                          : "a bad or disagreeing argument on another process");
            return FTRT_EINVAL;
        }
        total += h[1];
    }
    if (total == hdr[0]) return 0;
    ftrt_log_warn("ftrt_allreduce_ordered: the held ranks (%lld) are not nlogical (%lld): "
                  "refused", (long long)total, (long long)hdr[0]);
    return FTRT_EINVAL;
}

/* 1 when the kept layout L is every process's and matches the headers (file comment above). */
static int cache_hit(const layout *L, const int64_t *hdr, int P)
{
    if (!L || L->nprocs != P || L->n != hdr[0]) return 0;
    for (int q = 0; q < P; q++) {
        const int64_t *h = hdr + HDR * q;
        if ((uint64_t)h[6] != L->hash || (uint64_t)h[5] != L->own[q] || h[1] != L->nheld[q])
            return 0;
    }
    return 1;
}

/* The held lists' all-gather into a new layout (the headers known), checked for a logical
 * rank held twice. 0 with *out, FTRT_EINVAL (logged), -ENOMEM, or an MPI / watch code (the
 * all-gather abandoned: the layout and the copy of held it sends from are buried). */
static int gather_held(ftrt__plane *p, const int64_t *hdr, const int *held, int nheld,
                       layout **out)
{
    int P = p->size, n = (int)hdr[0];
    layout *L = layout_new(n, P);
    int *mine = malloc((size_t)(nheld > 0 ? nheld : 1) * sizeof *mine); /* (the caller's may go) */
    if (!L || !mine) return free(L), free(mine), -ENOMEM;
    if (nheld > 0) memcpy(mine, held, (size_t)nheld * sizeof *mine);
    int total = 0;
    L->maxheld = 0;
    for (int q = 0; q < P; q++) {
        L->own[q] = (uint64_t)hdr[HDR * q + 5];
        L->nheld[q] = (int)hdr[HDR * q + 1];
        L->displ[q] = total;
        total += L->nheld[q];
        L->maxheld = L->nheld[q] > L->maxheld ? L->nheld[q] : L->maxheld;
    }
    MPI_Request rq;
    int e = MPI_Iallgatherv(mine, nheld, MPI_INT, L->all, L->nheld, L->displ, MPI_INT, p->comm,
                            &rq);
    int rc = e == MPI_SUCCESS ? ftrt__plane_waitall(p, 1, &rq) : ftrt__plane_mpi_error(p, e);
    if (rc && e == MPI_SUCCESS) { /* abandoned: MPI may still read and write both */
        ftrt__plane_bury(p, mine);
        ftrt__plane_bury(p, L);
        return rc;
    }
    free(mine);
    for (int l = 0; !rc && l < n; l++) L->gpos[l] = -1;
    for (int g = 0; !rc && g < n; g++) {
        if (L->gpos[L->all[g]] >= 0) {
            ftrt_log_warn("ftrt_allreduce_ordered: logical rank %d is held by two processes: "
                          "refused", L->all[g]);
            rc = FTRT_EINVAL;
        }
        L->gpos[L->all[g]] = g;
    }
    if (rc) return free(L), rc;
    uint64_t h = fnv(1469598103934665603ull, &L->n, 2 * sizeof(int));
    h = fnv(h, L->own, (size_t)P * sizeof *L->own);
    L->hash = fnv(h, L->all, (size_t)n * sizeof *L->all) | 1; /* never 0 ("none") */
    *out = L;
    return 0;
}

/* Stage 1 (file comment): the headers, then the held lists unless the kept layout is every
 * process's (cache_hit). 0 with *out (owned by p->ordered), FTRT_EINVAL (logged), -ENOMEM, or
 * an MPI / watch code. */
static int exchange_layout(ftrt__plane *p, int ok, int n, const int *held, int nheld,
                           size_t count, ftrt_dtype dtype, const layout **out)
{
    int P = p->size;
    layout *kept = p->ordered;
    int64_t *buf = malloc(((size_t)P + 1) * HDR * sizeof *buf); /* this one's, then all */
    if (!buf) return -ENOMEM;
    int64_t *mine = buf, *hdr = buf + HDR;
    int64_t m[HDR] = {n, ok ? nheld : 0, (int64_t)dtype, ok, (int64_t)count,
                      (int64_t)held_hash(held, ok ? nheld : 0), kept ? (int64_t)kept->hash : 0};
    memcpy(mine, m, sizeof m);
    MPI_Request rq;
    int e = MPI_Iallgather(mine, HDR, MPI_INT64_T, hdr, HDR, MPI_INT64_T, p->comm, &rq);
    int rc = e == MPI_SUCCESS ? ftrt__plane_waitall(p, 1, &rq) : ftrt__plane_mpi_error(p, e);
    if (rc && e == MPI_SUCCESS) { /* abandoned: MPI may still write the headers */
        ftrt__plane_bury(p, buf);
        return rc;
    }
    if (!rc) rc = check_headers(hdr, P, ok);
    if (!rc && cache_hit(kept, hdr, P)) {
        *out = kept;
    } else if (!rc) {
        free(p->ordered); /* every process exchanges: the new layout replaces the kept one */
        p->ordered = NULL;
        layout *L = NULL;
        rc = gather_held(p, hdr, held, nheld, &L);
        p->ordered = L;
        *out = L;
    }
    free(buf);
    return rc;
}

/* ---- the sum in logical rank order ---- */

/* dst[k] = (((src[0][k] + src[1][k]) + src[2][k]) + ...) for k < cnt, n sources, in blocks of
 * BLOCK elements so that dst stays in cache across the n passes. Float sums in the dtype (no
 * contraction: additions only), int64 wrapping, 16-bit ones widened to float32 and rounded once
 * per pairwise sum (ftrt__h16_op, as the MPI plane's own operation). */
static void ordered_sum(int dtype, void *dst, const void *const *src, int n, size_t cnt)
{
    for (size_t b = 0; b < cnt; b += BLOCK) {
        size_t m = cnt - b < BLOCK ? cnt - b : BLOCK;
        size_t es = ftrt__k_esize(dtype);
        memcpy((char *)dst + b * es, (const char *)src[0] + b * es, m * es);
        for (int l = 1; l < n; l++) {
            if (dtype == FTRT_FLOAT32) {
                float *d = (float *)dst + b;
                const float *s = (const float *)src[l] + b;
                for (size_t k = 0; k < m; k++) d[k] = d[k] + s[k];
            } else if (dtype == FTRT_FLOAT64) {
                double *d = (double *)dst + b;
                const double *s = (const double *)src[l] + b;
                for (size_t k = 0; k < m; k++) d[k] = d[k] + s[k];
            } else if (dtype == FTRT_INT64) {
                uint64_t *d = (uint64_t *)dst + b;
                const uint64_t *s = (const uint64_t *)src[l] + b;
                for (size_t k = 0; k < m; k++) d[k] = d[k] + s[k];
            } else {
                uint16_t *d = (uint16_t *)dst + b;
                const uint16_t *s = (const uint16_t *)src[l] + b;
                for (size_t k = 0; k < m; k++) d[k] = ftrt__h16_op(dtype, FTRT__H_SUM, d[k], s[k]);
            }
        }
    }
}

/* ---- the windows ---- */

/* One window in flight: its slot's staging and requests. */
typedef struct window {
    size_t off, len;     /* elements [off, off + len) of the vector */
    int state;           /* 0 free, 1 messages in flight, 2 all-gather in flight, 3 done */
    MPI_Request *reqs;   /* [2 * nprocs]: receives and sends; then [0]: the all-gather */
    char *send, *recv;   /* maxheld * wmax and n * (wmax / nprocs + 1) elements */
} window;

typedef struct run {
    ftrt__plane *p;
    const layout *L;
    int me, dtype;       /* this process (rank in the plane's communicator), the element type */
    size_t count, es;    /* elements of the vector, bytes of one */
    void *const *contrib; /* the held contributions (the caller's, only read) */
    char *res;           /* count elements: the result, written by the all-gathers */
    size_t wmax;         /* elements per window */
    window w[WINDOWS_IN_FLIGHT];
    int *rcount, *rdispl; /* [nprocs] byte counts and displacements of a window's all-gather */
    const void **src;    /* [n] the pieces of this process's chunk, in logical order */
} run;

/* Owner q's chunk of a window of len elements: [*lo, *lo + *ln). */
static void owner_range(size_t len, int P, int q, size_t *lo, size_t *ln)
{
    size_t base = len / (size_t)P, extra = len % (size_t)P;
    *lo = (size_t)q * base + ((size_t)q < extra ? (size_t)q : extra);
    *ln = base + ((size_t)q < extra);
}

/* Packs window w's pieces (for each owner, this process's held pieces side by side) and starts
 * its messages; this process's own block is packed straight into its receive place. 0 or an MPI
 * code. */
static int window_start(run *R, window *w)
{
    const layout *L = R->L;
    int P = L->nprocs, me = R->me, mine = L->nheld[me];
    size_t es = R->es, lo, ln, mylo, myln;
    owner_range(w->len, P, me, &mylo, &myln);
    for (int q = 0; q < 2 * P; q++) w->reqs[q] = MPI_REQUEST_NULL;
    for (int q = 0; q < P; q++) {
        owner_range(w->len, P, q, &lo, &ln);
        char *rat = w->recv + (size_t)L->displ[q] * myln * es;
        char *blk = q == me ? rat : w->send + (size_t)mine * lo * es;
        for (int i = 0; i < mine; i++)
            memcpy(blk + (size_t)i * ln * es, (const char *)R->contrib[i] + (w->off + lo) * es,
                   ln * es);
        if (q == me) continue;
        size_t sb = (size_t)mine * ln * es, rb = (size_t)L->nheld[q] * myln * es;
        int e = MPI_SUCCESS;
        if (rb) e = MPI_Irecv(rat, (int)rb, MPI_BYTE, q, TAG_ORDERED, R->p->comm, &w->reqs[2 * q]);
        if (e == MPI_SUCCESS && sb)
            e = MPI_Isend(blk, (int)sb, MPI_BYTE, q, TAG_ORDERED, R->p->comm, &w->reqs[2 * q + 1]);
        if (e != MPI_SUCCESS) return e;
    }
    w->state = 1;
    return MPI_SUCCESS;
}

/* Window w's messages arrived: sums this process's chunk in logical order into the result and
 * starts the window's all-gather in place there. 0 or an MPI code. */
static int window_gather(run *R, window *w)
{
    const layout *L = R->L;
    int P = L->nprocs;
    size_t es = R->es, lo, ln;
    owner_range(w->len, P, R->me, &lo, &ln);
    for (int l = 0; l < L->n; l++) R->src[l] = w->recv + (size_t)L->gpos[l] * ln * es;
    char *at = R->res + w->off * es;
    ordered_sum(R->dtype, at + lo * es, R->src, L->n, ln);
    for (int q = 0; q < P; q++) {
        size_t qlo, qln;
        owner_range(w->len, P, q, &qlo, &qln);
        R->rcount[q] = (int)(qln * es);
        R->rdispl[q] = (int)(qlo * es);
    }
    w->reqs[0] = MPI_REQUEST_NULL;
    int e = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, at, R->rcount, R->rdispl, MPI_BYTE,
                            R->p->comm, &w->reqs[0]);
    if (e == MPI_SUCCESS) w->state = 2;
    return e;
}

/* 1 when window w's current requests (messages or all-gather) are complete, 0 if not, or a
 * negative code. */
static int window_test(run *R, window *w)
{
    int done = 0, n = w->state == 1 ? 2 * R->L->nprocs : 1;
    int e = MPI_Testall(n, w->reqs, &done, MPI_STATUSES_IGNORE);
    if (e != MPI_SUCCESS) return ftrt__plane_mpi_error(R->p, e);
    return done;
}

/* One pass: start windows while slots are free, move the oldest window whose messages are in to
 * its all-gather (in window order), retire finished all-gathers. Counts events in *ev. */
static int pass(run *R, size_t nwin, size_t *started, size_t *gathered, size_t *finished, int *ev)
{
    while (*started < nwin && *started - *finished < WINDOWS_IN_FLIGHT) {
        window *w = &R->w[*started % WINDOWS_IN_FLIGHT];
        w->off = *started * R->wmax;
        w->len = R->count - w->off < R->wmax ? R->count - w->off : R->wmax;
        int e = window_start(R, w);
        if (e != MPI_SUCCESS) return ftrt__plane_mpi_error(R->p, e);
        ++*started, ++*ev;
    }
    if (*gathered < *started) {
        window *w = &R->w[*gathered % WINDOWS_IN_FLIGHT];
        int t = window_test(R, w);
        if (t < 0) return t;
        if (t) {
            int e = window_gather(R, w);
            if (e != MPI_SUCCESS) return ftrt__plane_mpi_error(R->p, e);
            ++*gathered, ++*ev;
        }
    }
    while (*finished < *gathered) { /* all-gathers complete in the order they started */
        window *w = &R->w[*finished % WINDOWS_IN_FLIGHT];
        int t = window_test(R, w);
        if (t <= 0) return t;
        w->state = 3;
        ++*finished, ++*ev;
    }
    return 0;
}

/* Stage 2 and 3 (file comment): every window, polled with the watch. 0 or a code. */
static int run_windows(run *R)
{
    size_t nwin = (R->count + R->wmax - 1) / R->wmax;
    size_t started = 0, gathered = 0, finished = 0;
    for (long i = 0; finished < nwin;) {
        int ev = 0;
        int rc = pass(R, nwin, &started, &gathered, &finished, &ev);
        if (!rc) rc = ftrt__watch_check(R->p->watch);
        if (rc) return rc;
        if (ev) i = 0;
        else if (++i >= 64) ftrt__polite(i, 1024, 50 * 1000L);
    }
    return 0;
}

/* The staging of a run in the plane's buffer (abandoned with it after an epoch change, as the
 * blocking collectives' own): the result, then each slot's send and receive side, then the
 * request and count arrays. 0 or -ENOMEM / FTRT_EINVAL (too large). */
static int run_setup(ftrt__plane *p, const layout *L, void *const *contrib, size_t count,
                     ftrt_dtype dtype, run *R)
{
    int P = L->nprocs;
    R->p = p;
    R->L = L;
    R->contrib = contrib;
    R->me = p->rank;
    R->dtype = (int)dtype;
    R->count = count;
    R->es = ftrt__k_esize((int)dtype);
    size_t per = WINDOW_BYTES / R->es / (size_t)(L->maxheld ? L->maxheld : 1);
    R->wmax = per > (size_t)P ? per : (size_t)P;
    size_t sendb = (size_t)L->maxheld * R->wmax * R->es;
    size_t recvb = (size_t)L->n * (R->wmax / (size_t)P + 1) * R->es;
    if (sendb > INT_MAX) return FTRT_EINVAL; /* a message's bytes are an int (every one <= sendb) */
    size_t resb = (count * R->es + 63) / 64 * 64;
    size_t slotb = (sendb + recvb + 63) / 64 * 64;
    size_t bytes = resb + WINDOWS_IN_FLIGHT * slotb;
    if (bytes > p->buf_cap) {
        void *nb = realloc(p->buf, bytes);
        if (!nb) return -ENOMEM;
        p->buf = nb;
        p->buf_cap = bytes;
    }
    R->res = p->buf;
    size_t nreq = WINDOWS_IN_FLIGHT * 2 * (size_t)P;
    MPI_Request *reqs = malloc(nreq * sizeof *reqs);
    R->rcount = malloc((size_t)P * sizeof(int));
    R->rdispl = malloc((size_t)P * sizeof(int));
    R->src = malloc((size_t)L->n * sizeof *R->src);
    if (!reqs || !R->rcount || !R->rdispl || !R->src) return free(reqs), -ENOMEM;
    for (int s = 0; s < WINDOWS_IN_FLIGHT; s++) {
        R->w[s].send = (char *)p->buf + resb + (size_t)s * slotb;
        R->w[s].recv = R->w[s].send + sendb;
        R->w[s].reqs = reqs + (size_t)s * 2 * (size_t)P;
    }
    return 0;
}

/* Frees the run's arrays; after an abandoned run (rc != 0) the all-gathers' counts and
 * displacements, which a started MPI_Iallgatherv may still read, are buried instead. (The
 * request handles and src are only ever read by this file.) */
static void run_free(run *R, int rc)
{
    free(R->w[0].reqs); /* the one array of every slot's requests (run_setup) */
    if (rc && R->p) { /* (R->p: run_setup reached) */
        ftrt__plane_bury(R->p, R->rcount);
        ftrt__plane_bury(R->p, R->rdispl);
    } else {
        free(R->rcount);
        free(R->rdispl);
    }
    free(R->src);
}

int ftrt__plane_allreduce_ordered(ftrt__plane *p, int nlogical, const int *held, int nheld,
                                  void *const *contrib, void *out, size_t count,
                                  ftrt_dtype dtype)
{
    if (p->comm == MPI_COMM_NULL) return FTRT_ESTATE;
    int rc = ftrt__watch_check(p->watch);
    if (rc) return ftrt__watch_note(p->watch, rc);
    if (p->watch->needs_recover) return FTRT_ESTATE;
    int ok = local_ok(nlogical, held, nheld, contrib, out, count, dtype);
    const layout *L = NULL;
    run R = {0};
    ftrt__host_wait_begin(&p->host);
    rc = exchange_layout(p, ok, nlogical, held, nheld, count, dtype, &L);
    if (!rc) rc = run_setup(p, L, contrib, count, dtype, &R);
    if (!rc) rc = run_windows(&R);
    ftrt__host_wait_end(&p->host, rc);
    if (!rc) memcpy(out, R.res, count * R.es);
    run_free(&R, rc);
    return ftrt__watch_note(p->watch, rc);
}

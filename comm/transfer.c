/*
 * transfer.c - checksummed, targeted, striped state transfer of replicated regions for a
 * recovery (transfer.h has the contract).
 *
 * Per region and attempt, every member derives the same schedule from the same inputs (the
 * roles, the region sizes, the chunk size and the agreed set of chunks still pending): chunk k
 * of the region (global index g) goes to each receiver that still needs it, from source
 * sources[(g + attempt) mod ns]. A source computes the CRC32C of each chunk it sends, sends the
 * chunks straight from region memory, then one array of CRCs per receiver; a receiver posts
 * its receives straight into region memory and checks each chunk against its source's CRC.
 * Once every region had the attempt, every member adds the receivers' mismatch flags of all
 * regions (one allreduce), so that all agree on what the next attempt resends. Within one
 * (source, receiver) pair messages are matched in posting order (MPI's non-overtaking rule),
 * so one data tag and one CRC tag suffice, even when a source has gone on to the next region
 * while its receiver still waits for the last chunks of this one: both post the same messages
 * in the same order.
 *
 * On one host the sources may write the chunks of host regions into the receivers themselves
 * (comm/cma.h; agreed once per transfer, cma_agree): then only each chunk's CRC32C travels as a
 * message, sent once the chunk was written, and the receiver checks the chunk when it arrives.
 * A receiver's region in a memory file of huge pages (ftrt_alloc) is mapped by each source for
 * the transfer and written with a fused copy and CRC32C (non-temporal stores); any other with
 * the kernel's copy (process_vm_writev).
 *
 * A device region (ftrt__xfer_region.loc set) is never read or written on the host: it goes
 * through host staging of at most STAGE_CHUNKS chunks per member (page-locked where the backend
 * can pin), window after window of chunks: a source copies each chunk it sends into the staging
 * with the backend's to_host (which gives the chunk's CRC32C in the same pass), a receiver
 * receives into the staging and copies each chunk into device memory with from_host, which
 * checks it against the source's CRC32C. The same schedule, the same retries; the CRC arrays
 * travel per window. A host region is one window, sent from and received into its memory.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/knobs.h"
#include "base/proto.h"
#include "comm/cma.h"
#include "comm/transfer.h"
#include "comm/ulfm.h"
#include "ftrt.h"

enum { TAG_DATA = 7101, TAG_CRC = 7102, TAG_CMA = 7103 };

/* A source's single-copy write of a chunk goes in pieces of this many bytes, each CRC'd right
 * after it was written, while it is still in the source's cache. */
#define CMA_PIECE ((size_t)256 << 10)

/* Chunks of a device region staged in host memory at once, per member: the window. */
#define STAGE_CHUNKS 8

typedef struct sched {
    int ns, nr;
    int *src, *rcv;  /* logical ranks of the sources and of the receivers, ascending */
    int si, ri;      /* this member's index in src / rcv, or -1 */
    int cma;         /* the sources write host regions into the receivers (cma_agree) */
    int nreg;        /* regions of the transfer */
    ftrt__cma_ident *peer; /* a source's: peer[j], receiver j's process */
    uint64_t *addr;  /* a source's: addr[j * nreg + i], region i in receiver j (0: device) */
    unsigned char **map; /* a source's: map[j * nreg + i], region i of receiver j mapped here
                            (its memory file of huge pages, ftrt__cma_map), or NULL */
    void **mbase;        /* a source's: what ftrt__cma_unmap needs for map[...] */
    size_t *mlen;
} sched;

/* One attempt's view of region r: chunks [0, nk) of `chunk` bytes, global index g0 + k; the
 * window [k0, k1) is in flight; stage (device regions) holds chunk k at (k - k0) * chunk. */
typedef struct win {
    const ftrt__xfer_region *r;
    size_t chunk;
    int64_t nk, g0, k0, k1;
    int attempt;
    int reg;              /* r's index in the transfer's table */
    int cma;              /* the sources write the chunks into the receivers (host region) */
    unsigned char *stage; /* NULL: host memory, sent from and received into r->ptr */
} win;

static int owner(const sched *s, int64_t g, int attempt) { return (int)((g + attempt) % s->ns); }

static size_t chunk_len(const win *w, int64_t k)
{
    size_t off = (size_t)k * w->chunk;
    return w->r->bytes - off < w->chunk ? w->r->bytes - off : w->chunk;
}

/* Where chunk k travels from or to: region memory (host) or its staging slot (device). */
static unsigned char *chunk_buf(const win *w, int64_t k)
{
    return w->stage ? w->stage + (size_t)(k - w->k0) * w->chunk
                    : (unsigned char *)w->r->ptr + (size_t)k * w->chunk;
}

/* The source's side of chunk k: its CRC32C, and for a device region the chunk staged into host
 * memory with it (to_host). Returns 0 or the backend's code. */
static int source_stage(const win *w, int64_t k, uint32_t *crc)
{
    if (!w->stage) {
        *crc = ftrt__crc32c(0, chunk_buf(w, k), chunk_len(w, k));
        return 0;
    }
    const unsigned char *dev = (const unsigned char *)w->r->ptr + (size_t)k * w->chunk;
    return w->r->loc->to_host(chunk_buf(w, k), dev, chunk_len(w, k), crc);
}

/* The receiver's side of chunk k once it arrived: checked against want (a device region's
 * chunk copied into device memory with from_host, which checks it). *bad = 1 on a mismatch.
 * Returns 0 or the backend's code (other than the mismatch). */
static int receiver_land(const win *w, int64_t k, uint32_t want, int64_t *bad)
{
    size_t len = chunk_len(w, k);
    int rc = 0;
    if (!w->stage) {
        if (ftrt__crc32c(0, chunk_buf(w, k), len) != want) *bad = 1;
    } else {
        unsigned char *dev = (unsigned char *)w->r->ptr + (size_t)k * w->chunk;
        rc = w->r->loc->from_host(dev, chunk_buf(w, k), len, want);
        if (rc == FTRT_ECORRUPT) *bad = 1, rc = 0;
    }
    return rc;
}

/* Chunk k of a host window written into receiver j's copy of the region (single copy,
 * comm/cma.h) in pieces, with the CRC32C of the source's bytes into *crc when do_crc (each piece
 * CRC'd right after it was written, from the cache). Nothing is written unless receiver j's
 * pid still names the process that said hello (ftrt__cma_alive: not a pid reused after it
 * died). A chunk that could not be written all is announced with the complement of its CRC32C,
 * which the receiver's bytes cannot match: the chunk fails its check there and comes again
 * from the next source. */
static void cma_put(const sched *s, const win *w, int j, int64_t k, int do_crc, uint32_t *crc)
{
    const unsigned char *b = chunk_buf(w, k);
    size_t len = chunk_len(w, k);
    size_t cell = (size_t)j * (size_t)s->nreg + (size_t)w->reg;
    uint64_t dst = s->addr[cell] + (uint64_t)k * w->chunk;
    uint32_t c = 0;
    int rc = ftrt__cma_alive(&s->peer[j]) ? 0 : -ESRCH;
    if (!rc && s->map && s->map[cell]) { /* mapped: the floor's own fused copy */
        c = ftrt__copy_crc32c(s->map[cell] + (size_t)k * w->chunk, b, len, 0);
        if (do_crc) *crc = c;
        return;
    }
    for (size_t off = 0; off < len; off += CMA_PIECE) {
        size_t m = len - off < CMA_PIECE ? len - off : CMA_PIECE;
        if (!rc) rc = ftrt__cma_write(s->peer[j].pid, dst + off, b + off, m);
        if (do_crc) c = ftrt__crc32c(c, b + off, m);
    }
    if (do_crc) *crc = c;
    if (rc) {
        ftrt_log_warn("state transfer: writing chunk %lld of region \"%s\" into logical rank %d "
                      "failed (%s); it will come from another source", (long long)(w->g0 + k),
                      w->r->name, s->rcv[j], strerror(-rc));
        *crc = ~*crc;
    }
}

/* A receiver's posts of window w: for each pending chunk, its data (MPI) and one CRC array per
 * sending source; or, when the sources write the chunks themselves (w->cma), one CRC per chunk,
 * sent once the chunk was written. kof[i] = the chunk whose arrival request i tells. */
static int post_receiver(ftrt__plane *p, const sched *s, const win *w, const int64_t *pend,
                         MPI_Request *req, int64_t *kof, int *q, uint32_t *crc_in, int *from)
{
    size_t wn = (size_t)(w->k1 - w->k0);
    for (int64_t k = w->k0; k < w->k1; k++) {
        if (!pend[(int64_t)s->ri * w->nk + k]) continue;
        int o = owner(s, w->g0 + k, w->attempt), e;
        from[o] = 1;
        kof[*q] = k;
        if (w->cma)
            e = MPI_Irecv(crc_in + (size_t)o * wn + (size_t)(k - w->k0), 1, MPI_UINT32_T,
                          s->src[o], TAG_CRC, p->comm, &req[(*q)++]);
        else
            e = MPI_Irecv(chunk_buf(w, k), (int)chunk_len(w, k), MPI_BYTE, s->src[o], TAG_DATA,
                          p->comm, &req[(*q)++]);
        if (e != MPI_SUCCESS) return FTRT_EMPI;
    }
    for (int o = 0; !w->cma && o < s->ns; o++)
        if (from[o] && MPI_Irecv(crc_in + (size_t)o * wn, (int)wn, MPI_UINT32_T, s->src[o],
                                 TAG_CRC, p->comm, &req[(*q)++]) != MPI_SUCCESS)
            return FTRT_EMPI;
    return 0;
}

/* A source's posts of window w: each chunk it owns for each receiver that still needs it,
 * staged and CRC'd once (at its first receiver); sent as a message and then one CRC array per
 * receiver, or (w->cma) written into the receiver and then its CRC sent alone. Between two
 * written chunks the watch is checked: a source stops writing into a receiver once a failure
 * was announced. */
static int post_source(ftrt__plane *p, const sched *s, const win *w, const int64_t *pend,
                       MPI_Request *req, int *q, uint32_t *crc_out, ftrt__xfer_stat *st)
{
    int64_t nk = w->nk;
    size_t wn = (size_t)(w->k1 - w->k0);
    int rc = 0;
    for (int j = 0; j < s->nr && !rc; j++) {
        int any = 0;
        for (int64_t k = w->k0; k < w->k1 && !rc; k++) {
            if (!pend[(int64_t)j * nk + k] || owner(s, w->g0 + k, w->attempt) != s->si) continue;
            int64_t first = 0;
            while (first < j && !pend[first * nk + k]) first++;
            uint32_t *c = &crc_out[(size_t)j * wn + (size_t)(k - w->k0)];
            if (first < j) *c = crc_out[(size_t)first * wn + (size_t)(k - w->k0)];
            if (w->cma && !(rc = ftrt__watch_check(p->watch))) {
                cma_put(s, w, j, k, first == j, c);
                if (MPI_Isend(c, 1, MPI_UINT32_T, s->rcv[j], TAG_CRC, p->comm, &req[(*q)++]) !=
                    MPI_SUCCESS)
                    rc = FTRT_EMPI;
            } else if (!w->cma) {
                if (first == j) rc = source_stage(w, k, c);
                if (!rc && MPI_Isend(chunk_buf(w, k), (int)chunk_len(w, k), MPI_BYTE,
                                     s->rcv[j], TAG_DATA, p->comm, &req[(*q)++]) != MPI_SUCCESS)
                    rc = FTRT_EMPI;
            }
            if (st) st->bytes_sent += chunk_len(w, k);
            any = 1;
        }
        if (any && !rc && !w->cma &&
            MPI_Isend(crc_out + (size_t)j * wn, (int)wn, MPI_UINT32_T, s->rcv[j], TAG_CRC,
                      p->comm, &req[(*q)++]) != MPI_SUCCESS)
            rc = FTRT_EMPI;
    }
    return rc;
}

/* Posts this member's receives and sends of window w for the (receiver, chunk) pairs with
 * pend[j * nk + k] != 0 (post_receiver, post_source). Returns 0 or the code; *q counts the
 * requests posted. */
static int post_window(ftrt__plane *p, const sched *s, const win *w, const int64_t *pend,
                       MPI_Request *req, int64_t *kof, int *q, uint32_t *crc_in,
                       uint32_t *crc_out, int *from, ftrt__xfer_stat *st)
{
    int rc = 0;
    if (s->ri >= 0) rc = post_receiver(p, s, w, pend, req, kof, q, crc_in, from);
    if (!rc && s->si >= 0) rc = post_source(p, s, w, pend, req, q, crc_out, st);
    return rc;
}

/* A receiver's CRC32C of each chunk of a host window as it lands, on a helper thread, while
 * the receiving thread goes on driving MPI: with Open MPI's single-copy shared memory (CMA) the
 * receiver's own thread does the copy, so checking the chunks after the last one landed would
 * add a whole pass over the bytes to the transfer. The helper only reads chunks that completed
 * (never a buffer MPI may still write), never calls MPI, and is joined before the window ends,
 * on success and on failure alike. Where no thread can be started, each chunk is CRC'd by the
 * receiving thread as it lands. */
typedef struct verifier {
    const win *w;
    uint32_t *got;     /* got[k - k0]: the chunk's CRC32C as it arrived */
    int64_t *queue;    /* chunk indices, in the order they landed */
    size_t nq, done;   /* queued; CRC'd (the helper's, under mu) */
    int stop, running; /* no more chunks; the helper was started */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
} verifier;

static void *verifier_main(void *arg)
{
    verifier *v = arg;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        while (v->done == v->nq && !v->stop) pthread_cond_wait(&v->cv, &v->mu);
        if (v->done == v->nq) break; /* stopped, and nothing left */
        int64_t k = v->queue[v->done];
        pthread_mutex_unlock(&v->mu);
        uint32_t c = ftrt__crc32c(0, chunk_buf(v->w, k), chunk_len(v->w, k));
        pthread_mutex_lock(&v->mu);
        v->got[k - v->w->k0] = c;
        v->done++;
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

/* Starts the helper when `thread` (or not: then verifier_push CRCs inline). queue and got hold
 * wn entries. When the sources write the chunks (w->cma) the receiving thread has no copy to
 * do, and CRCs each chunk itself as its CRC arrives: a helper would only add a runnable thread
 * beside the sources' on a host's cores. */
static void verifier_start(verifier *v, const win *w, int64_t *queue, uint32_t *got, int thread)
{
    *v = (verifier){.w = w, .got = got, .queue = queue};
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cv, NULL);
    v->running = thread && pthread_create(&v->th, NULL, verifier_main, v) == 0;
}

/* Chunk k landed (complete: MPI will not write it again). */
static void verifier_push(verifier *v, int64_t k)
{
    if (!v->running) {
        v->got[k - v->w->k0] = ftrt__crc32c(0, chunk_buf(v->w, k), chunk_len(v->w, k));
        return;
    }
    pthread_mutex_lock(&v->mu);
    v->queue[v->nq++] = k;
    pthread_cond_signal(&v->cv);
    pthread_mutex_unlock(&v->mu);
}

/* Waits until every chunk pushed is CRC'd, then ends the helper. */
static void verifier_finish(verifier *v)
{
    if (v->running) {
        pthread_mutex_lock(&v->mu);
        v->stop = 1;
        pthread_cond_signal(&v->cv);
        pthread_mutex_unlock(&v->mu);
        pthread_join(v->th, NULL);
    }
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->cv);
}

/* A receiver's wait for the q requests of a host window: polled with the watch like
 * ftrt__plane_waitall, each data chunk handed to the verifier as soon as it completed (after the
 * test knob's bit flip, when it applies), so that its CRC32C overlaps the chunks still landing.
 * Returns 0, FTRT_EMPI or the watch's code (the requests left are then abandoned). */
static int land_host(ftrt__plane *p, const win *w, int q, MPI_Request *req, const int64_t *kof,
                     int corrupt, int corrupt_attempts, verifier *v)
{
    int *idx = malloc((size_t)(q > 0 ? q : 1) * sizeof *idx);
    if (!idx) return -ENOMEM;
    int rc = 0;
    for (long i = 0;; i++) {
        int out = 0;
        int e = MPI_Testsome(q, req, &out, idx, MPI_STATUSES_IGNORE);
        if (e != MPI_SUCCESS) {
            rc = ftrt__plane_mpi_error(p, e);
            break;
        }
        if (out == MPI_UNDEFINED) break; /* every request complete */
        for (int j = 0; j < out; j++) {
            int64_t k = kof[idx[j]];
            if (k < 0) continue; /* a CRC array */
            if (w->attempt < corrupt_attempts && corrupt >= 0 && w->g0 + k == corrupt &&
                chunk_len(w, k) > 0)
                chunk_buf(w, k)[0] ^= 0x10; /* test knob: a bit flipped on the way */
            verifier_push(v, k);
        }
        if (out > 0) {
            i = -1; /* progress: keep polling at full speed */
            continue;
        }
        rc = ftrt__watch_check(p->watch);
        if (rc) break;
        if (i >= 64) ftrt__polite(i, 1024, 50 * 1000L);
    }
    free(idx);
    verifier_finish(v);
    return rc;
}

/* The receiver's check of window w once every request completed: each pending chunk against
 * its source's CRC32C (a host window: the CRC the verifier took as it landed; a device window:
 * landed now, through from_host). bad[] receives the mismatches. Returns 0 or the backend's
 * code. */
static int check_window(const sched *s, const win *w, const int64_t *pend, int64_t *bad,
                        const uint32_t *crc_in, const uint32_t *got, int corrupt,
                        int corrupt_attempts, ftrt__xfer_stat *st)
{
    size_t wn = (size_t)(w->k1 - w->k0);
    int rc = 0;
    for (int64_t k = w->k0; !rc && k < w->k1; k++) {
        if (!pend[(int64_t)s->ri * w->nk + k]) continue;
        size_t len = chunk_len(w, k);
        uint32_t want = crc_in[(size_t)owner(s, w->g0 + k, w->attempt) * wn + (size_t)(k - w->k0)];
        if (got) {
            if (got[k - w->k0] != want) bad[(int64_t)s->ri * w->nk + k] = 1;
        } else {
            if (w->attempt < corrupt_attempts && corrupt >= 0 && w->g0 + k == corrupt && len > 0)
                chunk_buf(w, k)[0] ^= 0x10; /* test knob: a bit flipped on the way */
            rc = receiver_land(w, k, want, &bad[(int64_t)s->ri * w->nk + k]);
        }
        if (st) st->bytes_received += len;
    }
    return rc;
}

/* One window of one attempt: post, wait (a receiver of a host window CRCs each chunk as it
 * lands: land_host), then (receivers) check each chunk that arrived. bad[] receives this
 * member's mismatches. On an error or an interruption the requests are abandoned (the recovery
 * fails) and *abandoned is set: buffers MPI may still write into (the staging, the CRC arrays)
 * must then be buried, never freed. */
static int attempt_window(ftrt__plane *p, const sched *s, const win *w, const int64_t *pend,
                          int64_t *bad, int corrupt, int corrupt_attempts, ftrt__xfer_stat *st,
                          int *abandoned)
{
    size_t wn = (size_t)(w->k1 - w->k0); /* >= 1 */
    if (wn == 0 || wn > (size_t)INT_MAX || s->ns < 0 || s->nr < 0) return FTRT_EINVAL;
    size_t nreq = (s->ri >= 0 ? wn + (size_t)s->ns : 0) + (s->si >= 0 ? (wn + 1) * (size_t)s->nr : 0);
    int host_rcv = s->ri >= 0 && !w->stage;
    MPI_Request *req = malloc((nreq ? nreq : 1) * sizeof *req);
    int64_t *kof = malloc((nreq ? nreq : 1) * sizeof *kof), *queue = NULL;
    uint32_t *crc_in = s->ri >= 0 ? calloc((size_t)s->ns * wn, 4) : NULL;
    uint32_t *crc_out = s->si >= 0 ? calloc((size_t)s->nr * wn, 4) : NULL, *got = NULL;
    int *from = s->ri >= 0 ? calloc((size_t)s->ns, sizeof *from) : NULL;
    if (host_rcv) queue = malloc(wn * sizeof *queue), got = calloc(wn, sizeof *got);
    int rc = 0, q = 0;
    if (!req || !kof || (s->ri >= 0 && (!crc_in || !from)) || (s->si >= 0 && !crc_out) ||
        (host_rcv && (!queue || !got)))
        rc = -ENOMEM;
    for (size_t i = 0; !rc && i < nreq; i++) kof[i] = -1;
    if (!rc) rc = post_window(p, s, w, pend, req, kof, &q, crc_in, crc_out, from, st);
    verifier v;
    if (!rc && host_rcv) verifier_start(&v, w, queue, got, !w->cma);
    if (!rc) rc = host_rcv ? land_host(p, w, q, req, kof, corrupt, corrupt_attempts, &v)
                           : ftrt__plane_waitall(p, q, req);
    if (rc && q > 0) { /* MPI may still complete what was posted */
        *abandoned = 1;
        ftrt__plane_bury(p, crc_in);
        ftrt__plane_bury(p, crc_out);
        crc_in = crc_out = NULL;
    }
    if (!rc && s->ri >= 0)
        rc = check_window(s, w, pend, bad, crc_in, got, corrupt, corrupt_attempts, st);
    free(req);
    free(kof);
    free(queue);
    free(got);
    free(crc_in);
    free(crc_out);
    free(from);
    return rc;
}

/* Host staging for the windows of a device region: STAGE_CHUNKS chunks at most (fewer when the
 * region is smaller), page-locked through the backend's pin where it has one. NULL for a host
 * region; *rc = -ENOMEM when it cannot be had. */
static unsigned char *stage_new(const ftrt__xfer_region *r, size_t chunk, int64_t nk, int *rc)
{
    *rc = 0;
    if (!r->loc) return NULL;
    size_t n = (size_t)(nk < STAGE_CHUNKS ? nk : STAGE_CHUNKS) * chunk;
    void *b = NULL;
    if (posix_memalign(&b, 4096, n) != 0) {
        *rc = -ENOMEM;
        return NULL;
    }
    if (r->loc->pin && r->loc->pin(b, n) != 0)
        ftrt_log_debug("state transfer: staging of %zu bytes not page-locked", n);
    return b;
}

/* Releases the staging: unpinned, and freed, or buried when MPI may still write into it. */
static void stage_free(ftrt__plane *p, const ftrt__xfer_region *r, unsigned char *b,
                       int abandoned)
{
    if (!b) return;
    if (r->loc->unpin) r->loc->unpin(b);
    if (abandoned)
        ftrt__plane_bury(p, b);
    else
        free(b);
}

/* One attempt over region r: its windows in order (a host region is one window). */
static int attempt_once(ftrt__plane *p, const sched *s, win *w, const int64_t *pend,
                        int64_t *bad, int corrupt, int corrupt_attempts, ftrt__xfer_stat *st,
                        int *abandoned)
{
    int64_t step = w->stage ? STAGE_CHUNKS : w->nk;
    int rc = 0;
    for (w->k0 = 0; w->k0 < w->nk && !rc; w->k0 += step) {
        w->k1 = w->nk - w->k0 < step ? w->nk : w->k0 + step;
        rc = attempt_window(p, s, w, pend, bad, corrupt, corrupt_attempts, st, abandoned);
    }
    return rc;
}

/* One region's part of the transfer: its view of the schedule, and per (receiver, chunk) cell
 * whether the chunk is still pending and whether this attempt's copy failed its check (both
 * point into the transfer's arrays, so that one allreduce agrees on every region at once). */
typedef struct rpart {
    win w;
    int64_t *pend, *bad;
    size_t cells;
} rpart;

static int64_t count_set(const int64_t *v, size_t n)
{
    int64_t c = 0;
    for (size_t i = 0; i < n; i++) c += v[i] != 0;
    return c;
}

/* Attempt a of one region's pending chunks, with its staging (device regions) for the attempt:
 * freed after it, or buried when the attempt was abandoned with requests in flight. */
static int part_attempt(ftrt__plane *p, const sched *s, rpart *x, int a, int corrupt,
                        int corrupt_attempts, ftrt__xfer_stat *st)
{
    int rc = 0, abandoned = 0;
    x->w.attempt = a;
    x->w.stage = NULL;
    if (s->si >= 0 || s->ri >= 0) x->w.stage = stage_new(x->w.r, x->w.chunk, x->w.nk, &rc);
    if (rc) return rc;
    rc = attempt_once(p, s, &x->w, x->pend, x->bad, corrupt, corrupt_attempts, st, &abandoned);
    stage_free(p, x->w.r, x->w.stage, abandoned);
    x->w.stage = NULL;
    if (rc && rc != FTRT_ERECOVER && x->w.r->loc)
        ftrt_log_error("state transfer of device region \"%s\" failed: %s", x->w.r->name,
                       ftrt_strerror(rc));
    return rc;
}

/* After attempt a's agreement: says which regions had chunks fail their check (and, after the
 * last attempt, that the transfer failed). Returns the number of such chunks. */
static int64_t report_bad(const rpart *x, int n, int a, int attempts)
{
    int64_t all = 0;
    for (int i = 0; i < n; i++) {
        int64_t nbad = count_set(x[i].bad, x[i].cells);
        if (nbad == 0) continue;
        all += nbad;
        ftrt_log_warn("state transfer: %lld chunk(s) of region \"%s\" failed their CRC32C at the "
                      "receiver; %s", (long long)nbad, x[i].w.r->name,
                      a + 1 < attempts ? "sending them again from another source"
                                       : "no source left to try");
        if (a + 1 == attempts)
            ftrt_log_error("state transfer of region \"%s\" failed: chunks arrived corrupted "
                           "from every source (silent data corruption on a source, or on the "
                           "way)", x[i].w.r->name);
    }
    return all;
}

/* Every region over every attempt. An attempt moves the pending chunks of every region, one
 * region after the other, and then one allreduce of all their mismatch flags makes every member
 * agree on what the next attempt sends again: one agreement per attempt, not per region, so that
 * a source goes on to the next region while the receivers still check the last one.
 * st->chunks_retried counts the chunks sent again. */
static int transfer_all(ftrt__plane *p, const sched *s, const ftrt__xfer_region *regs, int n,
                        size_t chunk, int corrupt, int corrupt_attempts, ftrt__xfer_stat *st)
{
    rpart *x = calloc(n > 0 ? (size_t)n : 1, sizeof *x);
    size_t total = 0;
    int64_t g0 = 0;
    for (int i = 0; x && i < n; i++) {
        int64_t nk = (int64_t)((regs[i].bytes + chunk - 1) / chunk);
        x[i].w = (win){.r = &regs[i], .chunk = chunk, .nk = nk, .g0 = g0, .reg = i,
                       .cma = s->cma && !regs[i].loc};
        x[i].cells = (size_t)s->nr * (size_t)nk;
        total += x[i].cells;
        g0 += nk;
    }
    int64_t *pend = malloc((total ? total : 1) * sizeof *pend);
    int64_t *bad = calloc(total ? total : 1, sizeof *bad);
    if (!x || !pend || !bad) {
        free(x), free(pend), free(bad);
        return -ENOMEM;
    }
    for (size_t i = 0; i < total; i++) pend[i] = 1;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        x[i].pend = pend + off, x[i].bad = bad + off;
        off += x[i].cells;
        if (st && x[i].w.cma && x[i].cells) st->single_copy = 1;
    }
    /* Every source once; a lone source gets a second try (a transient corruption). */
    int attempts = s->ns > 1 ? s->ns : 2, rc = 0;
    for (int a = 0; a < attempts && !rc && total > 0; a++) {
        memset(bad, 0, total * sizeof *bad);
        for (int i = 0; i < n && !rc; i++)
            if (count_set(x[i].pend, x[i].cells) > 0)
                rc = part_attempt(p, s, &x[i], a, corrupt, corrupt_attempts, st);
        if (!rc) rc = ftrt__plane_allreduce(p, bad, total, FTRT_INT64, FTRT_SUM); /* all agree */
        int64_t nbad = rc ? 0 : report_bad(x, n, a, attempts);
        if (nbad == 0) break;
        if (st) st->chunks_retried += (int)nbad;
        memcpy(pend, bad, total * sizeof *pend);
        if (a + 1 == attempts) rc = FTRT_ECORRUPT;
    }
    free(x);
    free(pend);
    free(bad);
    return rc;
}

/* Where one of a receiver's regions is: its address (0 for a device region, never written so)
 * and, for one in a memory file of huge pages (ftrt_alloc), that file. */
typedef struct cma_where {
    uint64_t addr;
    ftrt__cma_file file;
} cma_where;

/* What a receiver tells each source for the single-copy path: who it is, and where its host
 * regions are. */
typedef struct cma_hello {
    ftrt__cma_ident id;
    cma_where at[]; /* one per region */
} cma_hello;

/* A source's mappings of receiver j's regions that lie in memory files of huge pages (s->map:
 * NULL where a region is not, or cannot be mapped). Returns how many it mapped. */
static int64_t cma_map_receiver(sched *s, const ftrt__xfer_region *regs, int n, int j,
                                const cma_hello *x)
{
    int64_t mapped = 0;
    for (int i = 0; i < n; i++) {
        size_t cell = (size_t)j * (size_t)n + (size_t)i;
        if (regs[i].loc || regs[i].bytes == 0 || !x->at[i].addr || x->at[i].file.fd < 0) continue;
        s->map[cell] = ftrt__cma_map(&x->id, &x->at[i].file, regs[i].bytes, &s->mbase[cell],
                                     &s->mlen[cell]);
        if (s->map[cell]) mapped++;
        else
            ftrt_log_debug("state transfer: region \"%s\" of logical rank %d is in huge pages "
                           "but cannot be mapped here; written by the kernel's copy",
                           regs[i].name, s->rcv[j]);
    }
    return mapped;
}

/* A source's check that it can write into every receiver (same host, and the kernel lets it):
 * one byte of the first non-empty host region, the byte the transfer writes there anyway; then
 * its mappings of the receivers' memory files (cma_map_receiver; counted into *mapped).
 * Returns the number of receivers it cannot reach. */
static int64_t cma_probe(sched *s, const ftrt__xfer_region *regs, int n, const cma_hello *h,
                         size_t hsz, int64_t *mapped)
{
    int64_t fail = 0;
    for (int j = 0; j < s->nr; j++) {
        const cma_hello *x = (const cma_hello *)((const char *)h + (size_t)j * hsz);
        s->peer[j] = x->id;
        for (int i = 0; i < n; i++) s->addr[(size_t)j * (size_t)n + (size_t)i] = x->at[i].addr;
        if (!ftrt__cma_same_host(&x->id) || !ftrt__cma_alive(&x->id)) {
            fail++;
            continue;
        }
        int bad = 0;
        for (int i = 0; i < n; i++) {
            if (regs[i].loc || regs[i].bytes == 0 || !x->at[i].addr) continue;
            int rc = ftrt__cma_write(x->id.pid, x->at[i].addr, regs[i].ptr, 1);
            if (rc) {
                ftrt_log_debug("state transfer: no single-copy write into logical rank %d (%s); "
                               "chunks go as messages", s->rcv[j], strerror(-rc));
                bad = 1;
            }
            break;
        }
        fail += bad;
        if (!bad) *mapped += cma_map_receiver(s, regs, n, j, x);
    }
    return fail;
}

/* A source's mappings of the receivers' regions released (the end of the transfer). */
static void cma_unmap_all(sched *s)
{
    for (size_t c = 0; s->mbase && c < (size_t)s->nr * (size_t)s->nreg; c++)
        ftrt__cma_unmap(s->mbase[c], s->mlen[c]);
    free(s->map);
    free(s->mbase);
    free(s->mlen);
    s->map = NULL, s->mbase = NULL, s->mlen = NULL;
}

/* The single-copy path's agreement (comm/cma.h), once per transfer: each receiver sends every
 * source a cma_hello, each source probes every receiver (cma_probe, which maps the receivers'
 * memory files of huge pages), and all members agree (an allreduce) to use the path only when
 * every source reaches every receiver and the test knob FTRT_TEST_XFER_NO_CMA is off; s->cma =
 * 1 then, and *mapped the number of (receiver, region) mappings of all sources (0 when the path
 * is not used: the mappings are then released). Returns 0, -ENOMEM or the plane's code (the
 * hellos are then buried: MPI may still write into them). Collective over p's communicator. */
static int cma_agree(ftrt__plane *p, sched *s, const ftrt__xfer_region *regs, int n,
                     int64_t *mapped)
{
    size_t hsz = sizeof(cma_hello) + (size_t)n * sizeof(cma_where);
    size_t cells = (size_t)s->nr * (size_t)(n > 0 ? n : 1);
    int peers = s->ri >= 0 ? s->ns : s->si >= 0 ? s->nr : 0;
    cma_hello *h = calloc(peers > 0 ? (size_t)peers : 1, hsz);
    MPI_Request *req = malloc((size_t)(peers + 1) * sizeof *req);
    s->nreg = n;
    if (s->si >= 0) {
        s->peer = calloc((size_t)s->nr, sizeof *s->peer);
        s->addr = calloc(cells, sizeof *s->addr);
        s->map = calloc(cells, sizeof *s->map);
        s->mbase = calloc(cells, sizeof *s->mbase);
        s->mlen = calloc(cells, sizeof *s->mlen);
    }
    if (!h || !req || (s->si >= 0 && (!s->peer || !s->addr || !s->map || !s->mbase || !s->mlen))) {
        free(h);
        free(req);
        return -ENOMEM;
    }
    if (s->ri >= 0) {
        ftrt__cma_self(&h->id);
        for (int i = 0; i < n; i++) {
            h->at[i].addr = regs[i].loc ? 0 : (uint64_t)(uintptr_t)regs[i].ptr;
            h->at[i].file = regs[i].loc ? (ftrt__cma_file){-1, 0}
                                        : ftrt__cma_file_of(regs[i].ptr, regs[i].bytes);
        }
    }
    int rc = 0, q = 0;
    for (int o = 0; s->ri >= 0 && o < s->ns && !rc; o++)
        if (MPI_Isend(h, (int)hsz, MPI_BYTE, s->src[o], TAG_CMA, p->comm, &req[q++]) != MPI_SUCCESS)
            rc = FTRT_EMPI;
    for (int j = 0; s->si >= 0 && j < s->nr && !rc; j++)
        if (MPI_Irecv((char *)h + (size_t)j * hsz, (int)hsz, MPI_BYTE, s->rcv[j], TAG_CMA,
                      p->comm, &req[q++]) != MPI_SUCCESS)
            rc = FTRT_EMPI;
    if (!rc) rc = ftrt__plane_waitall(p, q, req);
    free(req);
    if (rc && q > 0) {
        ftrt__plane_bury(p, h);
        return rc;
    }
    int64_t agree[2] = {ftrt__knobs.xfer_no_cma ? 1 : 0, 0}; /* unreachable, mapped */
    if (!rc && s->si >= 0 && !ftrt__knobs.xfer_no_cma) agree[0] += cma_probe(s, regs, n, h, hsz,
                                                                             &agree[1]);
    free(h);
    if (!rc) rc = ftrt__plane_allreduce(p, agree, 2, FTRT_INT64, FTRT_SUM);
    s->cma = !rc && agree[0] == 0;
    *mapped = s->cma ? agree[1] : 0;
    if (!s->cma) cma_unmap_all(s);
    return rc;
}

int ftrt__xfer_replicated(ftrt__plane *p, const ftrt__xfer_region *regs, int n,
                          const int32_t *role, size_t chunk, int corrupt_chunk,
                          int corrupt_attempts, ftrt__xfer_stat *st)
{
    double t0 = ftrt__now();
    if (st) memset(st, 0, sizeof *st);
    if (!p || (!regs && n) || !role || chunk == 0 || chunk > (size_t)1 << 30) return FTRT_EINVAL;
    if (p->comm == MPI_COMM_NULL || p->rank < 0) return FTRT_ESTATE;
    sched s = {.si = -1, .ri = -1};
    s.src = malloc((size_t)p->size * sizeof *s.src);
    s.rcv = malloc((size_t)p->size * sizeof *s.rcv);
    if (!s.src || !s.rcv) {
        free(s.src);
        free(s.rcv);
        return -ENOMEM;
    }
    for (int l = 0; l < p->size; l++) {
        if (role[l] == FTRT__PLAN_NEEDS_STATE) {
            if (l == p->rank) s.ri = s.nr;
            s.rcv[s.nr++] = l;
        } else if (role[l] == FTRT__PLAN_UP_TO_DATE) {
            if (l == p->rank) s.si = s.ns;
            s.src[s.ns++] = l;
        } /* FTRT__PLAN_BYSTANDER: only in the agreement on what to resend */
    }
    if (st) st->sources = s.ns, st->receivers = s.nr;
    int rc = 0;
    int64_t mapped = 0;
    if (s.nr > 0 && s.ns == 0) rc = FTRT_EINVAL;
    if (!rc && s.nr > 0) rc = cma_agree(p, &s, regs, n, &mapped);
    if (st) st->mapped = (int)(mapped > INT_MAX ? INT_MAX : mapped);
    if (!rc && s.nr > 0) rc = transfer_all(p, &s, regs, n, chunk, corrupt_chunk,
                                           corrupt_attempts, st);
    cma_unmap_all(&s);
    free(s.src);
    free(s.rcv);
    free(s.peer);
    free(s.addr);
    if (st) st->seconds = ftrt__now() - t0;
    return rc;
}

/*
 * mpi_plane.c - the CPU data plane on Open MPI: failure-aware, polled collectives.
 *
 * Blocking MPI calls on a communicator that may hold a dead process would hang forever, so
 * every collective is nonblocking (MPI_Iallreduce, MPI_Ibcast, MPI_Ireduce_scatter_block,
 * MPI_Iallgather) and polled with MPI_Test
 * together with the epoch flag that the agent thread raises. When the epoch changes the request
 * is abandoned together with its communicator and staging buffer, which go to a graveyard and
 * are never reused: a late write from the dead epoch cannot land in live state.
 *
 * Under ULFM (Open MPI 5, comm/ulfm.h) a process failure reported by MPI (MPIX_ERR_PROC_FAILED
 * at the start of a collective or at its completion) waits for the coordinator's epoch change
 * and returns FTRT_ERECOVER, as if the watch had interrupted the wait.
 *
 * Determinism: the reduction runs on a communicator whose rank order is the logical rank
 * order, with the same count and datatype, so Open MPI's algorithm choice and summation order
 * are the same whichever process holds a logical rank; the sums are bitwise those a fault-free
 * run computes.
 *
 * 16-bit floats (bfloat16, fp16) are reduced by ftrt's own MPI operations (comm/mpi_types.c);
 * Open MPI applies a user operation in the same order as a predefined one, so the determinism
 * above holds for them too.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/async.h"
#include "comm/plane.h"
#include "comm/ulfm.h"

void ftrt__plane_init(ftrt__plane *p, ftrt__watch *w, ftrt__host host, int async_progress,
                      int progress_poll_us)
{
    memset(p, 0, sizeof *p);
    p->comm = MPI_COMM_NULL;
    p->rank = -1;
    p->watch = w;
    p->host = host;
    p->async_progress = async_progress;
    p->progress_poll_us = progress_poll_us;
}

void ftrt__plane_set(ftrt__plane *p, MPI_Comm comm)
{
    p->comm = comm;
    p->rank = -1;
    p->size = 0;
    if (comm != MPI_COMM_NULL) {
        MPI_Comm_rank(comm, &p->rank);
        MPI_Comm_size(comm, &p->size);
    }
    p->gen++; /* overlapped collectives duplicate each new communicator once (comm/async.c) */
    if (comm != MPI_COMM_NULL) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
}

int ftrt__plane_abandon(ftrt__plane *p)
{
    /* Overlapped collectives of the old epoch fail promptly now; once every one is final
     * (their started staging buffers in the engine's graveyard), nothing of the old epoch can
     * write application memory. Then the listeners (the NCCL plane) retire theirs. */
    ftrt__engine_quiesce(p->async);
    for (ftrt__plane_hook *h = p->hooks; h; h = h->next) h->abandon(h->arg);
    if (ftrt__grave_put(&p->graveyard, p->buf)) return -ENOMEM;
    p->buf = NULL;
    p->buf_cap = 0;
    p->comm = MPI_COMM_NULL; /* never freed: MPI_Comm_free could wait on the dead rank */
    return 0;
}

void ftrt__plane_bury(ftrt__plane *p, void *buf)
{
    /* on -ENOMEM leaked rather than freed under a request MPI may still complete */
    (void)ftrt__grave_put(&p->graveyard, buf);
}

void ftrt__plane_stop(ftrt__plane *p) { ftrt__engine_stop(p->async); }

void ftrt__plane_free(ftrt__plane *p)
{
    /* Buffers of abandoned overlapped collectives are freed only once MPI is finalized. */
    int finalized = 0;
    MPI_Finalized(&finalized);
    ftrt__engine_free(p->async, finalized);
    ftrt__grave_clear(&p->graveyard, free);
    free(p->buf);
    free(p->ordered);
    p->ordered = NULL;
    p->async = NULL;
    p->buf = NULL;
    p->buf_cap = 0;
    p->comm = MPI_COMM_NULL;
}

int ftrt__plane_wait(ftrt__plane *p, MPI_Request *req)
{
    ftrt__host_wait_begin(&p->host);
    int rc = ftrt__plane_waitall(p, 1, req);
    ftrt__host_wait_end(&p->host, rc);
    return rc;
}

int ftrt__plane_waitall(ftrt__plane *p, int n, MPI_Request *reqs)
{
    /* Spin briefly (low latency when peers are ready), then yield, then sleep 50 us per poll
     * so oversubscribed ranks leave the CPU to the peers they wait on. */
    for (long i = 0;; i++) {
        int done = 0;
        int e = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (e != MPI_SUCCESS) return ftrt__plane_mpi_error(p, e);
        if (done) return 0;
        int rc = ftrt__watch_check(p->watch);
        if (rc) return rc;
        if (i >= 64) ftrt__polite(i, 1024, 50 * 1000L);
    }
}

/* ---- collectives ---- */

int ftrt__plane_coll_check(ftrt__plane *p, const void *buf, size_t count, ftrt_dtype dtype,
                           ftrt_op op, MPI_Datatype *t, MPI_Op *o, size_t *es)
{
    if ((!buf && count) || count > SIZE_MAX / 8) return FTRT_EINVAL;
    int rc = ftrt__mpi_reduction((int)dtype, (int)op, t, o, es);
    if (rc) return rc;
    if (p->comm == MPI_COMM_NULL) return FTRT_ESTATE;
    rc = ftrt__watch_check(p->watch);
    if (rc) return rc;
    return p->watch->needs_recover ? FTRT_ESTATE : 0;
}

/* The blocking collectives: buf is copied into the plane's staging buffer, the collective
 * (coll: FTRT__COLL_*) runs there in calls of at most 2^28 elements, each polled, and the result
 * is copied back only when every call completed, so an error leaves buf unchanged. */
static int staged(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op,
                  ftrt__coll coll, int root)
{
    size_t es = 0;
    MPI_Datatype t;
    MPI_Op o;
    int rc = ftrt__plane_coll_check(p, buf, count, dtype, op, &t, &o, &es);
    if (rc) return rc;
    if (coll == FTRT__COLL_BCAST && (root < 0 || root >= p->size)) return FTRT_EINVAL;
    size_t bytes = count * es;
    if (bytes > p->buf_cap) {
        void *n = realloc(p->buf, bytes);
        if (!n) return -ENOMEM;
        p->buf = n;
        p->buf_cap = bytes;
    }
    if (bytes) memcpy(p->buf, buf, bytes);
    const size_t chunk = (size_t)1 << 28; /* elements per MPI call: stays below INT_MAX */
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        void *at = (char *)p->buf + off * es;
        MPI_Request req;
        int e = coll == FTRT__COLL_BCAST
                    ? MPI_Ibcast(at, (int)n, t, root, p->comm, &req)
                    : MPI_Iallreduce(MPI_IN_PLACE, at, (int)n, t, o, p->comm, &req);
        if (e != MPI_SUCCESS) return ftrt__plane_mpi_error(p, e);
        rc = ftrt__plane_wait(p, &req);
        if (rc) return ftrt__watch_note(p->watch, rc);
    }
    if (bytes) memcpy(buf, p->buf, bytes);
    return 0;
}

int ftrt__plane_allreduce(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op)
{
    return staged(p, buf, count, dtype, op, FTRT__COLL_ALLREDUCE, 0);
}

int ftrt__plane_broadcast(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype, int root)
{
    return staged(p, buf, count, dtype, FTRT_SUM, FTRT__COLL_BCAST, root);
}

/* The checks of a reduce-scatter or an all-gather: those of every collective (both buffers),
 * count * (size + 1) elements within size_t, and recv overlapping send only where one is a
 * whole block of the other (ftrt__rsag_alias_ok), the one aliasing the chunked pipeline keeps
 * exact: a chunk never writes what a later chunk reads. */
static int rsag_check(ftrt__plane *p, ftrt__coll coll, const void *send, const void *recv,
                      size_t count, ftrt_dtype dtype, ftrt_op op, MPI_Datatype *t, MPI_Op *o,
                      size_t *es)
{
    if ((!send || !recv) && count) return FTRT_EINVAL;
    int rc = ftrt__plane_coll_check(p, send, count, dtype, op, t, o, es);
    if (rc) return rc;
    size_t n = (size_t)p->size;
    if (count > SIZE_MAX / 8 / (n + 1)) return FTRT_EINVAL;
    if (ftrt__rsag_alias_ok(coll, send, recv, count, *es, p->size)) return 0;
    ftrt_log_warn("%s: the buffers overlap other than at a whole block: refused",
                  coll == FTRT__COLL_RSCATTER ? "ftrt_reduce_scatter" : "ftrt_allgather");
    return FTRT_EINVAL;
}

/* Starts chunk after chunk of a staged reduce-scatter or all-gather on the plane's
 * communicator (the layout of comm/async.h in p->buf, chunks of about FTRT__CHUNK_BYTES in all,
 * each packed just before it starts), then waits for them all inside the host's wait bracket.
 * 0, or FTRT_EMPI / the watch's code (requests still in flight on p->buf are then waited for
 * or, after an epoch change, abandoned with it: ftrt__plane_abandon buries p->buf). */
static int rsag_chunks(ftrt__plane *p, ftrt__coll coll, const void *send, size_t count,
                       size_t es, MPI_Datatype t, MPI_Op o, size_t chunk, int nchunks)
{
    size_t m = (size_t)(nchunks ? nchunks : 1);
    MPI_Request *reqs = malloc(m * sizeof *reqs);
    int *idx = malloc(m * sizeof *idx);
    int started = 0, rc = reqs && idx ? 0 : -ENOMEM;
    while (!rc && started < nchunks) {
        size_t off = (size_t)started * chunk, n = count - off < chunk ? count - off : chunk;
        void *sbuf, *rbuf;
        ftrt__rsag_pack(coll, p->size, count, es, send, p->buf, off, n, &sbuf, &rbuf);
        int e = ftrt__mpi_icoll(coll, sbuf, rbuf, (int)n, t, o, 0, p->comm, &reqs[started]);
        if (e == MPI_SUCCESS) { /* progress the chunks in flight before packing the next */
            int done = 0;
            started++;
            e = MPI_Testsome(started, reqs, &done, idx, MPI_STATUSES_IGNORE);
        }
        if (e != MPI_SUCCESS) rc = ftrt__plane_mpi_error(p, e);
    }
    ftrt__host_wait_begin(&p->host);
    int w = reqs ? ftrt__plane_waitall(p, started, reqs) : 0;
    ftrt__host_wait_end(&p->host, rc ? rc : w);
    free(reqs);
    free(idx);
    return rc ? rc : w;
}

/* The blocking reduce-scatter or all-gather: send is staged in the plane's buffer (the layout
 * of comm/async.h), the collective runs there in pipelined chunks of about FTRT__CHUNK_BYTES
 * in all (rsag_chunks: the chunk's pieces stay in cache, which measured faster than one call
 * on the whole vector; docs/benchmarks.md), and recv is written only once every chunk
 * completed, so an error leaves it unchanged (recv may alias send at a whole block: every read
 * precedes every write). */
static int staged_rsag(ftrt__plane *p, ftrt__coll coll, const void *send, void *recv,
                       size_t count, ftrt_dtype dtype, ftrt_op op)
{
    size_t es = 0;
    MPI_Datatype t;
    MPI_Op o;
    int rc = rsag_check(p, coll, send, recv, count, dtype, op, &t, &o, &es);
    if (rc) return rc;
    size_t bytes = ((size_t)p->size + 1) * count * es;
    if (bytes > p->buf_cap) {
        void *n = realloc(p->buf, bytes);
        if (!n) return -ENOMEM;
        p->buf = n;
        p->buf_cap = bytes;
    }
    size_t unit = es * (size_t)p->size, chunk = FTRT__CHUNK_BYTES / unit;
    if (!chunk) chunk = 1;
    if (count / chunk >= INT_MAX - 1) return FTRT_EINVAL;
    int nchunks = (int)((count + chunk - 1) / chunk);
    rc = rsag_chunks(p, coll, send, count, es, t, o, chunk, nchunks);
    if (rc) return ftrt__watch_note(p->watch, rc);
    for (size_t off = 0; off < count; off += chunk)
        ftrt__rsag_unpack(coll, p->size, count, es, recv, p->buf, off,
                          count - off < chunk ? count - off : chunk);
    return 0;
}

int ftrt__plane_reduce_scatter(ftrt__plane *p, const void *send, void *recv, size_t count,
                               ftrt_dtype dtype, ftrt_op op)
{
    return staged_rsag(p, FTRT__COLL_RSCATTER, send, recv, count, dtype, op);
}

int ftrt__plane_allgather(ftrt__plane *p, const void *send, void *recv, size_t count,
                          ftrt_dtype dtype)
{
    return staged_rsag(p, FTRT__COLL_ALLGATHER, send, recv, count, dtype, FTRT_SUM);
}

int ftrt__plane_bcast(ftrt__plane *p, void *buf, size_t bytes, int root)
{
    const size_t chunk = (size_t)1 << 30;
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        MPI_Request req;
        int e = MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, p->comm, &req);
        if (e != MPI_SUCCESS) return ftrt__plane_mpi_error(p, e);
        int rc = ftrt__plane_wait(p, &req);
        if (rc) return rc;
    }
    return 0;
}

/* ---- overlapped collectives: submitted to the plane's request engine (comm/async.c) ---- */

/* Checks and submits one overlapped collective (coll, with op or root) of buf to the plane's
 * engine; *req receives its request. The returns of ftrt__plane_allreduce_start. */
static int start_coll(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op,
                      ftrt__coll coll, int root, ftrt_request **req)
{
    if (!req) return FTRT_EINVAL;
    *req = NULL;
    size_t es = 0;
    MPI_Datatype t;
    MPI_Op o;
    int rc = ftrt__plane_coll_check(p, buf, count, dtype, op, &t, &o, &es);
    if (rc) return rc;
    if (coll == FTRT__COLL_BCAST && (root < 0 || root >= p->size)) return FTRT_EINVAL;
    ftrt__engine *e = ftrt__engine_get(p, &rc);
    if (!e) return rc;
    ftrt__seg seg = {buf, count * es};
    ftrt__areq *r;
    rc = coll == FTRT__COLL_BCAST
             ? ftrt__engine_submit_bcast(e, p->watch->epoch, seg, count, dtype, root, &r)
             : ftrt__engine_submit(e, p->watch->epoch, &seg, 1, count, dtype, op, 1.0, 0, &r);
    if (rc) return rc;
    *req = &r->base;
    return 0;
}

int ftrt__plane_allreduce_start(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype,
                                ftrt_op op, ftrt_request **req)
{
    return start_coll(p, buf, count, dtype, op, FTRT__COLL_ALLREDUCE, 0, req);
}

int ftrt__plane_broadcast_start(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype,
                                int root, ftrt_request **req)
{
    return start_coll(p, buf, count, dtype, FTRT_SUM, FTRT__COLL_BCAST, root, req);
}

/* Checks and submits one overlapped reduce-scatter or all-gather (coll) to the plane's engine;
 * *req receives its request. The checks of the blocking forms. */
static int start_rsag(ftrt__plane *p, ftrt__coll coll, const void *send, void *recv,
                      size_t count, ftrt_dtype dtype, ftrt_op op, ftrt_request **req)
{
    if (!req) return FTRT_EINVAL;
    *req = NULL;
    size_t es = 0;
    MPI_Datatype t;
    MPI_Op o;
    int rc = rsag_check(p, coll, send, recv, count, dtype, op, &t, &o, &es);
    if (rc) return rc;
    ftrt__engine *e = ftrt__engine_get(p, &rc);
    if (!e) return rc;
    ftrt__areq *r;
    rc = ftrt__engine_submit_rsag(e, p->watch->epoch, coll, send, recv, count, (int)dtype,
                                  (int)op, p->size, &r);
    if (rc) return rc;
    *req = &r->base;
    return 0;
}

int ftrt__plane_reduce_scatter_start(ftrt__plane *p, const void *send, void *recv, size_t count,
                                     ftrt_dtype dtype, ftrt_op op, ftrt_request **req)
{
    return start_rsag(p, FTRT__COLL_RSCATTER, send, recv, count, dtype, op, req);
}

int ftrt__plane_allgather_start(ftrt__plane *p, const void *send, void *recv, size_t count,
                                ftrt_dtype dtype, ftrt_request **req)
{
    return start_rsag(p, FTRT__COLL_ALLGATHER, send, recv, count, dtype, FTRT_SUM, req);
}

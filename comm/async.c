/*
 * async.c - overlapped collectives: the request engine, its progress thread, the MPI
 * transport, and the public request API (ftrt_request_*; the plane's ftrt__plane_*_start in
 * comm/mpi_plane.c submit to it).
 *
 * See async.h for the model. The engine's state is split by owner:
 *  - the submission queue, the live count, the staging pool and the graveyard (comm/pool.h)
 *    are guarded by e->lock;
 *  - the active list and each request's progress fields (packed, started, MPI requests) belong
 *    to the progress side: the progress thread, or in inline mode the application thread;
 *  - a request's state is an atomic that hands the request back to the application: once it
 *    reads DONE or FAILED (acquire), the engine never touches the request again.
 * Under ULFM (comm/ulfm.h) an MPI error that is a process failure fails the request with the
 * coordinator's epoch change (FTRT_ERECOVER), not FTRT_EMPI, once that change arrives.
 * Open MPI 4.1 has no asynchronous progress of its own ("OMPI progress: no" in ompi_info):
 * a nonblocking collective advances only inside MPI calls, which is why a thread makes them.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/async.h"
#include "comm/plane.h"
#include "comm/ulfm.h"

#define POOL_MAX 64            /* staging buffers kept for reuse */
#define SPIN_POLLS 16          /* polls with sched_yield before sleeping between polls */
#define DEFAULT_POLL_US 50

/* ---- progress side ---- */

/* Hands r back to the application with result rc. r must be unlinked from the lists. */
static void finish(ftrt__engine *e, ftrt__areq *r, int rc)
{
    pthread_mutex_lock(&e->lock);
    if (r->in_place)
        ; /* the application's memory: neither ours to pool nor to bury */
    else if (rc && r->nstarted > 0)
        (void)ftrt__grave_put(&e->grave, r->staging); /* MPI may still write it (else leaked) */
    else
        ftrt__pool_put(&e->pool, r->staging, r->staging_cap);
    r->staging = NULL;
    free(r->mreqs); /* handles only: never passed to MPI again */
    r->mreqs = NULL;
    free(r->cdone);
    r->cdone = NULL;
    r->result = rc;
    e->live--;
    if (rc) e->failed++; else e->completed++;
    atomic_store_explicit(&r->state, rc ? FTRT__AREQ_FAILED : FTRT__AREQ_DONE,
                          memory_order_release);
    pthread_cond_broadcast(&e->done);
    pthread_mutex_unlock(&e->lock);
}

static int req_interrupted(const ftrt__engine *e, const ftrt__areq *r)
{
    int f = atomic_load_explicit(&e->watch->fatal, memory_order_acquire);
    if (f) return f;
    if (atomic_load_explicit(&e->watch->pending_epoch, memory_order_acquire) != r->epoch)
        return FTRT_ERECOVER;
    return 0;
}

/* Chunk i of r: elements [*off, *off + *cnt) (of every rank's block for a reduce-scatter or an
 * all-gather). */
static void chunk_range(const ftrt__areq *r, int i, size_t *off, size_t *cnt)
{
    *off = (size_t)i * r->chunk_count;
    *cnt = r->count - *off < r->chunk_count ? r->count - *off : r->chunk_count;
}

static int is_rsag(const ftrt__areq *r)
{
    return r->coll == FTRT__COLL_RSCATTER || r->coll == FTRT__COLL_ALLGATHER;
}

/* Packs chunk i of r into its staging (nothing in place) and starts its collective. */
static int start_chunk(ftrt__engine *e, ftrt__areq *r, int i)
{
    size_t off, cnt;
    chunk_range(r, i, &off, &cnt);
    void *sbuf, *rbuf = NULL;
    if (is_rsag(r)) {
        ftrt__rsag_pack(r->coll, r->nranks, r->count, r->esize, r->segs[0].ptr, r->staging, off,
                        cnt, &sbuf, &rbuf);
    } else {
        if (!r->in_place)
            ftrt__k_pack_range(r->staging, r->segs, r->nsegs, off * r->esize, cnt * r->esize);
        sbuf = (char *)r->staging + off * r->esize;
    }
    return e->xp->start(e->xarg, r, i, sbuf, rbuf, cnt);
}

/* Chunk i of r completed: its result goes to the application's memory (scaled). */
static void chunk_done(ftrt__areq *r, int i)
{
    size_t off, cnt;
    chunk_range(r, i, &off, &cnt);
    if (is_rsag(r))
        ftrt__rsag_unpack(r->coll, r->nranks, r->count, r->esize, r->rbuf, r->staging, off, cnt);
    else if (r->in_place) /* the same rounding as the unpack's */
        ftrt__k_scale((char *)r->staging + off * r->esize, cnt, r->dtype, r->scale);
    else
        ftrt__k_unpack_scale_range(r->staging, r->segs, r->nsegs, off * r->esize,
                                   cnt * r->esize, r->dtype, r->scale);
}

/* One pass over the active requests, in submission order: fail interrupted ones; start the
 * next chunk of the first request that has chunks left to start (packing it just before), so
 * that chunks start in the same order on every trainer; test the started chunks and unpack each
 * one that completed. Returns the number of events (chunks started or completed, requests
 * failed): 0 means the pass found nothing to do. */
static int progress(ftrt__engine *e)
{
    pthread_mutex_lock(&e->lock);
    if (e->qhead) {
        if (e->atail) e->atail->next = e->qhead;
        else e->ahead = e->qhead;
        e->atail = e->qtail;
        e->qhead = e->qtail = NULL;
    }
    pthread_mutex_unlock(&e->lock);

    int events = 0, blocked = 0; /* blocked: an earlier request has chunks left to start */
    ftrt__areq *prev = NULL, *r = e->ahead;
    while (r) {
        ftrt__areq *next = r->next;
        int rc = req_interrupted(e, r);
        if (!rc && !blocked && !r->ready) {
            int s = e->xp->ready(e->xarg, r);
            if (s < 0) rc = s;
            else if (s == 1) r->ready = 1;
            if (s == 1) atomic_store_explicit(&r->state, FTRT__AREQ_ACTIVE, memory_order_relaxed);
        }
        if (!rc && !blocked && r->ready && r->nstarted < r->nchunks) {
            rc = start_chunk(e, r, r->nstarted);
            if (!rc) {
                r->nstarted++;
                events++;
            }
        }
        if (r->nstarted < r->nchunks) blocked = 1;
        for (int i = 0; !rc && i < r->nstarted; i++) {
            if (r->cdone[i]) continue;
            int t = e->xp->test(e->xarg, r, i);
            if (t < 0) {
                rc = t;
            } else if (t == 1) {
                chunk_done(r, i);
                r->cdone[i] = 1;
                r->ndone++;
                events++;
            }
        }
        if (rc || r->ndone == r->nchunks) {
            if (prev) prev->next = next;
            else e->ahead = next;
            if (e->atail == r) e->atail = prev;
            r->next = NULL;
            finish(e, r, rc); /* r belongs to the application from here on */
            events++;
        } else {
            prev = r;
        }
        r = next;
    }
    return events;
}

/* Between polls that found nothing: yield a few times, then sleep e->poll_ns. */
static void polite(const ftrt__engine *e, long i) { ftrt__polite(i, SPIN_POLLS, e->poll_ns); }

/* Waits on e->done for at most 20 ms (e->lock held): the progress thread signals it when a
 * request finishes; the timeout covers a signal sent before the wait began. */
static void wait_done_briefly(ftrt__engine *e)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&e->done, &e->lock, &ts);
}

static void *progress_main(void *arg)
{
    ftrt__engine *e = arg;
    prctl(PR_SET_TIMERSLACK, 1000UL); /* 1 us: keep the short sleeps short */
    long idle_polls = 0;
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        if (!e->qhead && !e->ahead) {
            e->idle = 1;
            pthread_cond_wait(&e->work, &e->lock);
            e->idle = 0;
            idle_polls = 0;
            continue;
        }
        pthread_mutex_unlock(&e->lock);
        if (progress(e)) idle_polls = 0;
        else polite(e, idle_polls++);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- engine lifecycle ---- */

int ftrt__engine_create_x(const ftrt__xport *xp, void *xarg, ftrt__watch *watch, int threaded,
                          ftrt__engine **out)
{
    ftrt__engine *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    ftrt__pool_init(&e->pool, POOL_MAX, 1, free);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->done, NULL);
    e->xp = xp;
    e->xarg = xarg ? xarg : e;
    e->watch = watch;
    e->threaded = threaded;
    e->poll_ns = DEFAULT_POLL_US * 1000L;
    e->chunk_bytes = FTRT__CHUNK_BYTES;
    *out = e;
    return 0;
}

void ftrt__engine_stop(ftrt__engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->stop = 1;
    pthread_cond_broadcast(&e->work);
    int started = e->thread_started;
    e->thread_started = 0;
    pthread_mutex_unlock(&e->lock);
    if (started) pthread_join(e->thread, NULL);
}

void ftrt__engine_quiesce(ftrt__engine *e)
{
    if (!e) return;
    long i = 0;
    pthread_mutex_lock(&e->lock);
    while (e->live > 0) {
        if (e->threaded && e->thread_started && !e->stop) {
            wait_done_briefly(e);
        } else {
            pthread_mutex_unlock(&e->lock);
            if (!progress(e)) polite(e, i++);
            pthread_mutex_lock(&e->lock);
        }
    }
    pthread_mutex_unlock(&e->lock);
}

void ftrt__engine_free(ftrt__engine *e, int free_graveyard)
{
    if (!e) return;
    ftrt__engine_stop(e);
    ftrt__pool_clear(&e->pool);
    ftrt__grave_clear(&e->grave, free_graveyard ? free : NULL);
    while (e->gens) { /* the communicators themselves are never freed (see ftrt__agen) */
        ftrt__agen *g = e->gens;
        e->gens = g->next;
        free(g);
    }
    pthread_cond_destroy(&e->done);
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* ---- submission and completion (application thread) ---- */

static const ftrt__req_ops areq_ops;

/* Gives r its staging buffer: the segments' own memory in place, else one from the pool or
 * malloc. 0 or -ENOMEM. */
static int take_staging(ftrt__engine *e, ftrt__areq *r, int in_place)
{
    if (in_place) {
        r->in_place = 1;
        r->staging = r->segs[0].ptr;
        r->staging_cap = r->bytes;
        return 0;
    }
    pthread_mutex_lock(&e->lock);
    r->staging = ftrt__pool_take(&e->pool, r->bytes, &r->staging_cap);
    pthread_mutex_unlock(&e->lock);
    if (!r->staging) {
        r->staging_cap = r->bytes ? r->bytes : 1;
        r->staging = malloc(r->staging_cap);
    }
    return r->staging ? 0 : -ENOMEM;
}

/* Gives back a staging buffer that nothing was started on. */
static void put_staging(ftrt__engine *e, ftrt__areq *r)
{
    if (r->in_place) return;
    pthread_mutex_lock(&e->lock);
    ftrt__pool_put(&e->pool, r->staging, r->staging_cap);
    pthread_mutex_unlock(&e->lock);
}

/* What a submission asks for beyond its memory: the collective and its parameters. */
typedef struct submit_args {
    size_t count;
    int dtype, op;
    ftrt__coll coll;
    int root;
    double scale;
    int in_place;
    void *rbuf;   /* reduce-scatter / all-gather: the receive buffer */
    int nranks;   /* reduce-scatter / all-gather: the communicator's size */
} submit_args;

static int submit(ftrt__engine *e, int epoch, const ftrt__seg *segs, int n, const submit_args *a,
                  ftrt__areq **out);

int ftrt__engine_submit(ftrt__engine *e, int epoch, const ftrt__seg *segs, int n, size_t count,
                        int dtype, int op, double scale, int in_place, ftrt__areq **out)
{
    submit_args a = {count, dtype, op, FTRT__COLL_ALLREDUCE, 0, scale, in_place, NULL, 0};
    return submit(e, epoch, segs, n, &a, out);
}

int ftrt__engine_submit_bcast(ftrt__engine *e, int epoch, ftrt__seg seg, size_t count, int dtype,
                              int root, ftrt__areq **out)
{
    submit_args a = {count, dtype, FTRT_SUM, FTRT__COLL_BCAST, root, 1.0, 0, NULL, 0};
    return submit(e, epoch, &seg, 1, &a, out);
}

int ftrt__engine_submit_rsag(ftrt__engine *e, int epoch, ftrt__coll coll, const void *send,
                             void *recv, size_t count, int dtype, int op, int nranks,
                             ftrt__areq **out)
{
    *out = NULL;
    size_t es = ftrt__k_esize(dtype);
    if ((coll != FTRT__COLL_RSCATTER && coll != FTRT__COLL_ALLGATHER) || nranks < 1 || !es)
        return FTRT_EINVAL;
    if (count > SIZE_MAX / es / ((size_t)nranks + 1)) return FTRT_EINVAL;
    size_t n = coll == FTRT__COLL_RSCATTER ? (size_t)nranks * count : count;
    ftrt__seg seg = {(void *)(uintptr_t)send, n * es}; /* only read (ftrt__rsag_pack) */
    submit_args a = {count, dtype, op, coll, 0, 1.0, 0, recv, nranks};
    return submit(e, epoch, &seg, 1, &a, out);
}

/* A new request for segs[0..n) and a's collective, its chunks counted; 0 or a negative code. */
static int req_new(ftrt__engine *e, const ftrt__seg *segs, int n, const submit_args *a,
                   ftrt__areq **out)
{
    if (n < 1 || !ftrt__k_esize(a->dtype)) return FTRT_EINVAL;
    ftrt__areq *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    if (n == 1) {
        r->seg1 = segs[0];
        r->segs = &r->seg1;
    } else {
        r->segs = malloc((size_t)n * sizeof *r->segs);
        if (!r->segs) {
            free(r);
            return -ENOMEM;
        }
        memcpy(r->segs, segs, (size_t)n * sizeof *segs);
    }
    r->nsegs = n;
    r->esize = ftrt__k_esize(a->dtype);
    /* a reduce-scatter's or all-gather's chunk moves about chunk_bytes in all: cnt elements of
     * each of the nranks blocks */
    size_t unit = r->esize * (a->nranks > 1 ? (size_t)a->nranks : 1);
    r->chunk_count = e->chunk_bytes / unit ? e->chunk_bytes / unit : 1;
    int err = a->count / r->chunk_count >= INT_MAX - 1 ? FTRT_EINVAL : 0;
    if (!err) {
        r->nchunks = a->count ? (int)((a->count + r->chunk_count - 1) / r->chunk_count) : 1;
        r->cdone = calloc((size_t)r->nchunks, 1);
        if (!r->cdone) err = -ENOMEM;
    }
    if (err) {
        if (r->segs != &r->seg1) free(r->segs);
        free(r);
        return err;
    }
    *out = r;
    return 0;
}

static int submit(ftrt__engine *e, int epoch, const ftrt__seg *segs, int n, const submit_args *a,
                  ftrt__areq **out)
{
    *out = NULL;
    ftrt__areq *r;
    int rc = req_new(e, segs, n, a, &r);
    if (rc) return rc;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += segs[i].bytes;
    if (a->coll == FTRT__COLL_RSCATTER || a->coll == FTRT__COLL_ALLGATHER)
        bytes = ((size_t)a->nranks + 1) * a->count * r->esize; /* both sides staged */
    r->base.ops = &areq_ops;
    r->eng = e;
    r->epoch = epoch;
    r->bytes = bytes;
    r->count = a->count;
    r->dtype = a->dtype;
    r->op = a->op;
    r->coll = a->coll;
    r->root = a->root;
    r->rbuf = a->rbuf;
    r->nranks = a->nranks;
    r->scale = a->scale;
    atomic_init(&r->state, FTRT__AREQ_QUEUED);
    rc = take_staging(e, r, a->in_place);
    if (!rc && e->xp->bind) rc = e->xp->bind(e->xarg, r);
    if (rc) {
        put_staging(e, r);
        if (r->segs != &r->seg1) free(r->segs);
        free(r->cdone);
        free(r);
        return rc;
    }
    pthread_mutex_lock(&e->lock);
    if (e->qtail) e->qtail->next = r;
    else e->qhead = r;
    e->qtail = r;
    e->live++;
    e->submitted++;
    if (e->threaded && !e->thread_started && !e->stop) {
        if (pthread_create(&e->thread, NULL, progress_main, e) == 0) {
            e->thread_started = 1;
        } else {
            ftrt_log_warn("cannot start the progress thread: collectives progress inside ftrt "
                          "calls only");
            e->threaded = 0;
        }
    }
    if (e->threaded) pthread_cond_signal(&e->work);
    int inline_mode = !e->threaded;
    pthread_mutex_unlock(&e->lock);
    if (inline_mode) progress(e); /* start it now */
    *out = r;
    return 0;
}

static int areq_final(ftrt__areq *r)
{
    int s = atomic_load_explicit(&r->state, memory_order_acquire);
    return s == FTRT__AREQ_DONE || s == FTRT__AREQ_FAILED;
}

/* 1 done, 0 in flight, <0 failed. */
static int areq_test_raw(ftrt__areq *r)
{
    if (!r->eng->threaded) progress(r->eng);
    if (!areq_final(r)) return 0;
    return r->result ? r->result : 1;
}

/* Waits until r is final; returns its result. No bookkeeping (see ftrt_request_wait). */
int ftrt__areq_wait(ftrt__areq *r)
{
    ftrt__engine *e = r->eng;
    long i = 0;
    while (!areq_final(r)) {
        pthread_mutex_lock(&e->lock);
        int threaded = e->threaded && e->thread_started && !e->stop;
        if (threaded && !areq_final(r)) {
            wait_done_briefly(e);
        }
        pthread_mutex_unlock(&e->lock);
        if (!threaded && !progress(e)) polite(e, i++);
    }
    return r->result;
}

/* Frees a final request; FTRT_ESTATE while it is in flight. */
int ftrt__areq_free(ftrt__areq *r)
{
    if (!areq_final(r)) return FTRT_ESTATE;
    if (r->segs != &r->seg1) free(r->segs);
    free(r);
    return 0;
}

/* ---- reduce-scatter and all-gather staging (the layout: async.h) ---- */

void ftrt__rsag_pack(ftrt__coll coll, int nranks, size_t count, size_t es, const void *send,
                     void *staging, size_t off, size_t cnt, void **sbuf, void **rbuf)
{
    const char *s = send;
    char *st = staging;
    size_t n = (size_t)nranks;
    if (coll == FTRT__COLL_RSCATTER) {
        char *at = st + n * off * es;
        for (size_t j = 0; j < n && cnt; j++)
            memcpy(at + j * cnt * es, s + (j * count + off) * es, cnt * es);
        *sbuf = at;
        *rbuf = st + (n * count + off) * es;
    } else {
        if (cnt) memcpy(st + off * es, s + off * es, cnt * es);
        *sbuf = st + off * es;
        *rbuf = st + (count + n * off) * es;
    }
}

void ftrt__rsag_unpack(ftrt__coll coll, int nranks, size_t count, size_t es, void *recv,
                       const void *staging, size_t off, size_t cnt)
{
    char *d = recv;
    const char *st = staging;
    size_t n = (size_t)nranks;
    if (!cnt) return;
    if (coll == FTRT__COLL_RSCATTER) {
        memcpy(d + off * es, st + (n * count + off) * es, cnt * es);
    } else {
        const char *at = st + (count + n * off) * es;
        for (size_t j = 0; j < n; j++)
            memcpy(d + (j * count + off) * es, at + j * cnt * es, cnt * es);
    }
}

int ftrt__rsag_alias_ok(ftrt__coll coll, const void *send, const void *recv, size_t count,
                        size_t es, int nranks)
{
    int rs = coll == FTRT__COLL_RSCATTER;
    uintptr_t big = (uintptr_t)(rs ? send : recv), small = (uintptr_t)(rs ? recv : send);
    size_t block = count * es;
    if (!block || small + block <= big || big + (size_t)nranks * block <= small) return 1;
    return small >= big && (small - big) % block == 0;
}

/* ---- the MPI transport ---- */

/* Application thread: the request runs on the duplicate of the plane's current communicator,
 * started here (MPI_Comm_idup, collective and nonblocking) for the first request of a
 * communicator generation. Every trainer submits in the same order, so every trainer issues
 * the idup at the same point of its sequence of collectives on the plane's communicator. */
static int mpi_bind(void *arg, ftrt__areq *r)
{
    ftrt__engine *e = arg;
    ftrt__plane *p = e->plane;
    if (!p || p->comm == MPI_COMM_NULL) return FTRT_ESTATE;
    ftrt__agen *g = e->gens;
    if (!g || g->plane_gen != p->gen) {
        g = calloc(1, sizeof *g);
        if (!g) return -ENOMEM;
        g->comm = MPI_COMM_NULL;
        g->plane_gen = p->gen;
        int err = MPI_Comm_idup(p->comm, &g->comm, &g->idup);
        if (err != MPI_SUCCESS) {
            free(g);
            return ftrt__ulfm_error(err, p->comm, p->watch, p->watch->epoch);
        }
        g->next = e->gens;
        e->gens = g;
    }
    r->gen = g;
    return 0;
}

/* The code for MPI error err of request r on comm: FTRT_EMPI, or under ULFM, for a process
 * failure, the epoch change once it arrives (comm/ulfm.h; the progress thread may wait here). */
static int mpi_error(ftrt__areq *r, int err, MPI_Comm comm)
{
    return ftrt__ulfm_error(err, comm, r->eng->watch, r->epoch);
}

static int mpi_ready(void *arg, ftrt__areq *r)
{
    (void)arg;
    ftrt__agen *g = r->gen;
    if (!g->ready) {
        int done = 0;
        int err = MPI_Test(&g->idup, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) return mpi_error(r, err, g->comm);
        if (!done) return 0;
        MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
        g->ready = 1;
    }
    if (!r->mreqs && !(r->mreqs = calloc((size_t)r->nchunks, sizeof *r->mreqs))) return -ENOMEM;
    return 1;
}

int ftrt__mpi_icoll(ftrt__coll coll, void *sbuf, void *rbuf, int count, MPI_Datatype t, MPI_Op o,
                    int root, MPI_Comm comm, MPI_Request *req)
{
    switch (coll) {
    case FTRT__COLL_BCAST:
        return MPI_Ibcast(sbuf, count, t, root, comm, req);
    case FTRT__COLL_RSCATTER:
        return MPI_Ireduce_scatter_block(sbuf, rbuf, count, t, o, comm, req);
    case FTRT__COLL_ALLGATHER:
        return MPI_Iallgather(sbuf, count, t, rbuf, count, t, comm, req);
    default:
        return MPI_Iallreduce(MPI_IN_PLACE, sbuf, count, t, o, comm, req);
    }
}

static int mpi_start(void *arg, ftrt__areq *r, int chunk, void *buf, void *rbuf,
                     size_t count)
{
    (void)arg;
    size_t es;
    MPI_Datatype t;
    MPI_Op o;
    int rc = ftrt__mpi_reduction(r->dtype, r->op, &t, &o, &es); /* checked at submit */
    if (rc) return rc;
    int err = ftrt__mpi_icoll(r->coll, buf, rbuf, (int)count, t, o, r->root, r->gen->comm,
                              &r->mreqs[chunk]);
    return err == MPI_SUCCESS ? 0 : mpi_error(r, err, r->gen->comm);
}

static int mpi_test(void *arg, ftrt__areq *r, int chunk)
{
    (void)arg;
    int flag = 0;
    int err = MPI_Test(&r->mreqs[chunk], &flag, MPI_STATUS_IGNORE);
    if (err != MPI_SUCCESS) return mpi_error(r, err, r->gen->comm);
    return flag ? 1 : 0;
}

static const ftrt__xport mpi_xport = {mpi_bind, mpi_ready, mpi_start, mpi_test};

int ftrt__engine_create(ftrt__plane *p, ftrt__engine **out)
{
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    int want = p->async_progress;
    int threaded = want && level == MPI_THREAD_MULTIPLE;
    int rc = ftrt__engine_create_x(&mpi_xport, NULL, p->watch, threaded, out);
    if (rc) return rc;
    (*out)->poll_ns = (long)p->progress_poll_us * 1000L;
    (*out)->plane = p;
    if (threaded)
        ftrt_log_info("overlapped collectives: progress thread (MPI_THREAD_MULTIPLE), polls "
                      "every %ld us while a collective is in flight", (*out)->poll_ns / 1000);
    else if (want)
        ftrt_log_warn("MPI provides thread level %d, below MPI_THREAD_MULTIPLE (initialize MPI "
                      "with MPI_Init_thread(MPI_THREAD_MULTIPLE) or let ftrt_init() do it): "
                      "overlapped collectives progress only inside ftrt calls", level);
    else
        ftrt_log_info("FTRT_ASYNC_PROGRESS=0: overlapped collectives progress only inside ftrt "
                      "calls");
    return 0;
}

ftrt__engine *ftrt__engine_get(ftrt__plane *p, int *err)
{
    *err = 0;
    if (!p->async) *err = ftrt__engine_create(p, &p->async);
    return p->async;
}

/* ---- public request API ---- */

static int areq_test(struct ftrt_request *base)
{
    ftrt__areq *r = (ftrt__areq *)base;
    int rc = areq_test_raw(r);
    return ftrt__watch_note(r->eng->watch, rc);
}

/* The application's view of a wait: counted for the progress detector and the ledger. */
static int areq_wait(struct ftrt_request *base)
{
    ftrt__areq *r = (ftrt__areq *)base;
    const ftrt__host *h = r->eng->plane ? &r->eng->plane->host : NULL; /* NULL: a test engine */
    ftrt__host_wait_begin(h); /* counted even when already final: every trainer counts alike */
    int rc = ftrt__areq_wait(r);
    ftrt__host_wait_end(h, rc);
    return ftrt__watch_note(r->eng->watch, rc);
}

static int areq_free(struct ftrt_request *base) { return ftrt__areq_free((ftrt__areq *)base); }

static const ftrt__req_ops areq_ops = {areq_test, areq_wait, areq_free};

int ftrt_request_test(ftrt_request *req)
{
    if (!req || !req->ops) return FTRT_EINVAL;
    return req->ops->test(req);
}

int ftrt_request_wait(ftrt_request *req)
{
    if (!req || !req->ops) return FTRT_EINVAL;
    return req->ops->wait(req);
}

int ftrt_request_free(ftrt_request *req)
{
    if (!req) return 0;
    if (!req->ops) return FTRT_EINVAL;
    return req->ops->free(req);
}

/* ---- plane hooks ---- */

void ftrt__plane_hook_add(ftrt__plane *p, ftrt__plane_hook *h)
{
    h->next = p->hooks;
    p->hooks = h;
}

void ftrt__plane_hook_remove(ftrt__plane *p, ftrt__plane_hook *h)
{
    for (ftrt__plane_hook **pp = &p->hooks; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            return;
        }
}

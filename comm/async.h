/*
 * async.h - overlapped collectives: the request engine of the data plane (internal).
 *
 * An engine belongs to a context's data plane (ftrt__plane.async). The application thread
 * submits requests (an allreduce of one buffer, or of a bucket of tensors) in the same order on
 * every trainer; the engine packs each into a staging buffer it owns, starts the collective on
 * a duplicate of the plane's communicator (so that it never races the blocking collectives the
 * application thread issues on the plane's own communicator), polls it, and unpacks (and
 * scales) the result into the application's memory. Who does that work:
 *  - threaded mode (MPI_THREAD_MULTIPLE): a progress thread, so collectives advance while the
 *    application computes. It sleeps on a condition variable while nothing is in flight, and
 *    polls politely (sched_yield, then nanosleep) while something is.
 *  - inline mode (MPI initialized below MPI_THREAD_MULTIPLE by the application, or
 *    FTRT_ASYNC_PROGRESS=0): the application thread, inside ftrt calls only.
 *
 * Failure awareness: every request carries the epoch it was submitted in; once the agent
 * raises a newer epoch (or a fatal code) the engine fails it with FTRT_ERECOVER (or that code)
 * without touching application memory, and a request whose collective had started gives its
 * staging buffer to the graveyard: never reused, never freed before MPI_Finalize, so a late
 * write of the dead epoch cannot land anywhere live. ftrt__plane_abandon() waits until every
 * request of the old epoch is final, so after ftrt_recover() nothing of the old epoch writes
 * application memory. The exception is a request submitted in place (ftrt__engine_submit's
 * in_place, the bucketer's ftrt_bucket_config.in_place): its collective runs on application
 * memory, which then takes the graveyard's role: the application must give it up after a
 * failure (include/ftrt.h says so at the option).
 *
 * The collective itself is behind a small transport interface: MPI in the library, a fake in
 * the unit tests (tests/unit/test_async.c).
 */
#ifndef FTRT_COMM_ASYNC_H
#define FTRT_COMM_ASYNC_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

#include "base/ports.h"
#include "comm/pool.h"
#include "ftrt.h"
#include "kernels/kernels.h"

struct ftrt__plane;

/* Every public request starts with this header; ftrt_request_test/wait/free dispatch on it
 * (the CPU engine here, the NCCL plane in libftrt_gpu). */
typedef struct ftrt__req_ops {
    int (*test)(struct ftrt_request *r);
    int (*wait)(struct ftrt_request *r);
    int (*free)(struct ftrt_request *r);
} ftrt__req_ops;

struct ftrt_request {
    const ftrt__req_ops *ops;
};

enum { FTRT__AREQ_QUEUED = 0, FTRT__AREQ_ACTIVE = 1, FTRT__AREQ_DONE = 2, FTRT__AREQ_FAILED = 3 };

/* The collective a request runs (the same request and plane interface for each; include/ftrt.h
 * has their contracts): an allreduce of op over the packed tensors, a broadcast of them from
 * logical rank `root`, a reduce-scatter (op; rank r gets the reduction of block r of every
 * member's send buffer) or an all-gather (every member gets every member's block, in rank
 * order). */
typedef enum ftrt__coll {
    FTRT__COLL_ALLREDUCE = 0,
    FTRT__COLL_BCAST = 1,
    FTRT__COLL_RSCATTER = 2,
    FTRT__COLL_ALLGATHER = 3
} ftrt__coll;

/* Reduce-scatter and all-gather stage both sides: a request's (or the blocking plane call's)
 * staging buffer holds (nranks + 1) * count elements, the send side first, then the receive
 * side. Chunk [off, off + cnt) of every rank's block is one collective call:
 *  - reduce-scatter: the send side holds, at element nranks * off, the nranks pieces
 *    send[j * count + off, + cnt) back to back (what MPI_Ireduce_scatter_block reads); its
 *    result, cnt elements, lands at nranks * count + off and is unpacked to recv[off, + cnt).
 *  - all-gather: the send side holds send[off, + cnt) at element off; the nranks received
 *    pieces land back to back at count + nranks * off and piece j is unpacked to
 *    recv[j * count + off, + cnt).
 * Chunks are disjoint on both sides, so any number may be in flight at once.
 * ftrt__rsag_pack copies chunk [off, off + cnt) of `send` into `staging` and sets *sbuf and
 * *rbuf to the chunk's send and receive places there; ftrt__rsag_unpack copies the chunk's
 * received elements to `recv`. es: the element size in bytes. */
void ftrt__rsag_pack(ftrt__coll coll, int nranks, size_t count, size_t es, const void *send,
                     void *staging, size_t off, size_t cnt, void **sbuf, void **rbuf);
void ftrt__rsag_unpack(ftrt__coll coll, int nranks, size_t count, size_t es, void *recv,
                       const void *staging, size_t off, size_t cnt);
/* 1 when a reduce-scatter's (coll) or all-gather's buffers over nranks members may be used
 * together: disjoint, or the one-block side exactly one whole block of the other
 * (reduce-scatter: recv == send + k * count elements, all-gather: send == recv + k * count,
 * 0 <= k < nranks), the only overlap the chunked pipeline keeps exact; else 0. */
int ftrt__rsag_alias_ok(ftrt__coll coll, const void *send, const void *recv, size_t count,
                        size_t es, int nranks);
/* Starts collective coll of `count` elements (per rank for reduce-scatter and all-gather) of
 * MPI type t (op o, root for a broadcast) on comm: MPI_Iallreduce in place at sbuf,
 * MPI_Ibcast at sbuf, MPI_Ireduce_scatter_block(sbuf -> rbuf) or MPI_Iallgather(sbuf ->
 * rbuf). count must fit an int. Returns MPI's error code. */
int ftrt__mpi_icoll(ftrt__coll coll, void *sbuf, void *rbuf, int count, MPI_Datatype t, MPI_Op o,
                    int root, MPI_Comm comm, MPI_Request *req);

/* The communicator of one plane generation, duplicated with MPI_Comm_idup when the first
 * request of that generation is submitted (application thread) and completed by the progress
 * side. Never freed before MPI_Finalize (an abandoned one may hold a dead rank). */
typedef struct ftrt__agen {
    MPI_Comm comm;
    MPI_Request idup;
    int ready;         /* progress side only */
    unsigned plane_gen;
    struct ftrt__agen *next;
} ftrt__agen;

typedef struct ftrt__areq {
    struct ftrt_request base;
    struct ftrt__engine *eng;
    int epoch;            /* epoch at submission */
    _Atomic int state;    /* FTRT__AREQ_* */
    int result;           /* 0 or the error, once DONE/FAILED */
    ftrt__seg *segs;      /* application tensors, in bucket order (points at seg1 for one) */
    int nsegs;
    ftrt__seg seg1;
    void *staging;        /* engine-owned; NULL once given to the graveyard (in place: the
                             application's memory, segs[0].ptr, never pooled nor buried) */
    int in_place;         /* ftrt__engine_submit's in_place: no pack, unpack or staging */
    size_t staging_cap;
    size_t bytes, count, esize;
    int dtype, op;
    ftrt__coll coll;      /* FTRT__COLL_*: what the transport starts on each chunk */
    int root;             /* FTRT__COLL_BCAST: the sender's rank in the plane's communicator */
    void *rbuf;           /* reduce-scatter / all-gather: the application's receive buffer
                             (segs[0] is the send buffer, only read) */
    int nranks;           /* reduce-scatter / all-gather: the communicator's size */
    double scale;         /* applied at unpack (1.0 = none) */
    /* the collective runs in chunks of chunk_count elements (the last one shorter), started in
     * order, each packed just before it starts and unpacked as soon as it completes */
    size_t chunk_count;
    int nchunks, nstarted, ndone; /* progress side */
    unsigned char *cdone;
    int ready;            /* progress side: the transport's communicator is ready */
    ftrt__agen *gen;      /* MPI transport */
    MPI_Request *mreqs;   /* MPI transport: one per chunk */
    long fake;            /* for fake transports (tests) */
    struct ftrt__areq *next;
} ftrt__areq;

/* The collective behind the engine. bind: application thread, at submission (may start
 * communicator setup). The others run on the progress side. ready: 1 when r can start, 0 not
 * yet (retried later; later requests wait behind it), or a negative code. start: starts chunk
 * `chunk` of r, `count` elements at buf (packed; in place for an allreduce or a broadcast,
 * rbuf NULL), or for a reduce-scatter / all-gather `count` elements per rank from buf into
 * rbuf (the staging layout above); 0 or a negative code. test: 1 when that chunk is done, 0
 * while in flight, or a negative code. */
typedef struct ftrt__xport {
    int (*bind)(void *arg, ftrt__areq *r);
    int (*ready)(void *arg, ftrt__areq *r);
    int (*start)(void *arg, ftrt__areq *r, int chunk, void *buf, void *rbuf, size_t count);
    int (*test)(void *arg, ftrt__areq *r, int chunk);
} ftrt__xport;

typedef struct ftrt__engine {
    pthread_mutex_t lock;
    pthread_cond_t work;  /* progress thread: something was queued, or stop */
    pthread_cond_t done;  /* waiters: a request became final */
    pthread_t thread;
    int threaded, thread_started, stop; /* stop: guarded by lock */
    int idle;             /* progress thread sleeps on `work` (guarded by lock) */
    ftrt__areq *qhead, *qtail; /* submitted, not yet taken by the progress side (lock) */
    ftrt__areq *ahead, *atail; /* the progress side's list, in submission order */
    int live;             /* requests not yet final (lock) */
    const ftrt__xport *xp;
    void *xarg;
    ftrt__watch *watch;   /* the runtime's epoch watch (base/ports.h) */
    long poll_ns;         /* sleep between polls once spinning stopped */
    size_t chunk_bytes;   /* pipelining unit of a request (FTRT__CHUNK_BYTES; tests set less).
                             Must be the same on every trainer: it sets the counts. */
    /* staging buffers (comm/pool.h): a free pool (reused, so steady-state steps never
     * page-fault) and the graveyard of abandoned ones (lock) */
    ftrt__pool pool;
    ftrt__grave grave;
    /* MPI transport (application thread) */
    struct ftrt__plane *plane; /* NULL for engines over a test transport */
    ftrt__agen *gens;
    /* statistics (lock) */
    long submitted, completed, failed;
} ftrt__engine;

#define FTRT__CHUNK_BYTES ((size_t)4 << 20)

/* Creates an engine for plane p with the MPI transport. Threaded when MPI provides
 * MPI_THREAD_MULTIPLE and p->async_progress is 1 (the thread starts at the first submission);
 * polls every p->progress_poll_us while a collective is in flight. Returns 0 or -ENOMEM. */
int ftrt__engine_create(struct ftrt__plane *p, ftrt__engine **out);
/* Creates an engine over another transport (unit tests): requests fail once `watch` says their
 * epoch is over. Returns 0 or -ENOMEM. */
int ftrt__engine_create_x(const ftrt__xport *xp, void *xarg, ftrt__watch *watch, int threaded,
                          ftrt__engine **out);
/* The plane's engine, created on first use. Returns it or NULL (*err set). */
ftrt__engine *ftrt__engine_get(struct ftrt__plane *p, int *err);

/* Submits an allreduce (op over `count` elements of dtype) of the tensors segs[0..n) packed
 * back to back, results multiplied by `scale`. in_place: 1 when segs are one run of memory
 * (the caller checked: each starts where the one before ends) that the collective may run on
 * directly: no staging buffer, no pack, the scale applied there (ftrt__k_scale, the unpack's
 * rounding). An in-place request gives up this engine's guarantee for that memory: abandoned
 * after its collective started, MPI may still write it after ftrt__plane_abandon() (the
 * caller must not reuse it; ftrt_bucket_config.in_place). Application thread; `epoch` is its
 * current epoch. segs is copied. Returns 0 with *out, or a negative code (no request then). */
int ftrt__engine_submit(ftrt__engine *e, int epoch, const ftrt__seg *segs, int n, size_t count,
                        int dtype, int op, double scale, int in_place, ftrt__areq **out);
/* Submits a broadcast of `count` elements of dtype at seg from the member of rank `root` (the
 * plane's communicator, logical rank order) to every other member: staged like an allreduce
 * (packed into an engine-owned buffer, the collective on it, unpacked when a chunk is done), so
 * that a broadcast of a dead epoch never writes seg. The root's seg is unpacked onto itself
 * (unchanged). Application thread; root is not checked here (the caller knows the size).
 * Returns 0 with *out, or a negative code (no request then). */
int ftrt__engine_submit_bcast(ftrt__engine *e, int epoch, ftrt__seg seg, size_t count, int dtype,
                              int root, ftrt__areq **out);
/* Submits a reduce-scatter (coll FTRT__COLL_RSCATTER, op) or an all-gather
 * (FTRT__COLL_ALLGATHER; op unused) of `count` elements of dtype per rank over a communicator
 * of `nranks` members (the plane's, logical rank order): send holds nranks * count elements
 * (reduce-scatter) or count (all-gather), recv count or nranks * count. Both sides are staged
 * (the layout above; chunks of about chunk_bytes in all, count per rank split alike on every
 * trainer), so that a request of a dead epoch never writes recv, and send is read only while
 * a chunk is packed. recv may alias send only at a whole block (the caller checks: the
 * chunks then never write what a later chunk reads). Application thread. Returns 0 with *out,
 * or a negative code (no request then). */
int ftrt__engine_submit_rsag(ftrt__engine *e, int epoch, ftrt__coll coll, const void *send,
                             void *recv, size_t count, int dtype, int op, int nranks,
                             ftrt__areq **out);
/* Stops and joins the progress thread (requests still in flight stay unfinished). Call before
 * MPI_Finalize. Idempotent. */
void ftrt__engine_stop(ftrt__engine *e);
/* Waits until every request is final (after an epoch change they fail promptly). */
void ftrt__engine_quiesce(ftrt__engine *e);
/* Frees the engine, its pool and, when `free_graveyard`, the graveyard (only once MPI cannot
 * write them any more). Stops the thread first. */
void ftrt__engine_free(ftrt__engine *e, int free_graveyard);
/* Waits until r is final and returns its result (0 or the error); no wait bookkeeping.
 * Application thread. */
int ftrt__areq_wait(ftrt__areq *r);
/* Frees a final request: 0, or FTRT_ESTATE while it is in flight (nothing freed). */
int ftrt__areq_free(ftrt__areq *r);

/* Abandon listeners of the plane: the NCCL plane registers one so that ftrt__plane_abandon()
 * (called by recovery) revokes its communicator and retires its buffers. */
typedef struct ftrt__plane_hook {
    void (*abandon)(void *arg);
    void *arg;
    struct ftrt__plane_hook *next;
} ftrt__plane_hook;
/* Registers / removes h (caller-owned, must stay valid while registered). App thread. */
void ftrt__plane_hook_add(struct ftrt__plane *p, ftrt__plane_hook *h);
void ftrt__plane_hook_remove(struct ftrt__plane *p, ftrt__plane_hook *h);

#endif

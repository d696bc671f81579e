/*
 * ports.h - what the runtime hands to the engines below it (internal to libftrt; base layer).
 *
 * checkpoint/ and comm/ never see the runtime's context (ftrt_ctx, runtime/internal.h). The
 * runtime gives each engine, when it creates it, the few things it needs from above:
 *
 *   - an epoch watch (ftrt__watch): what "interrupted" means. The agent thread raises
 *     pending_epoch when the coordinator announces a failure and sets fatal when the job is
 *     over; the application thread trains in `epoch` and sets needs_recover once an operation
 *     returned FTRT_ERECOVER. Engines poll it; they never write pending_epoch or fatal.
 *     An engine whose work the application thread may wait on outside ftrt (a CUDA stream the
 *     host synchronizes with) also registers a listener, which the agent thread calls when the
 *     epoch changes or the job ends (ftrt__watch_fire, base/watch.c), so that it can stop that
 *     work from there.
 *   - a host interface (ftrt__host): send a control message to the coordinator, switch this
 *     rank's ledger timeline, and the bracket around every data-plane wait (the progress
 *     detector's wait count, straggler time, exposed communication in the ledger).
 *   - a commit callback (ftrt__commit_fn): how the agent thread hands the coordinator's COMMIT
 *     decision to whoever waits for it (the checkpoint engine), without the agent knowing it.
 *
 * Unit tests build these from fakes (tests/unit/helpers.h) instead of a hand-made context.
 * The pattern is libuv's: a private base header below the subsystems (src/uv-common.h).
 */
#ifndef FTRT_BASE_PORTS_H
#define FTRT_BASE_PORTS_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ftrt.h"

/* ---- the epoch watch --------------------------------------------------------------------- */

/* Called on the agent thread (ftrt__watch_fire) once per change of the watch: `epoch` is the
 * newly announced pending epoch, `fatal` the job's fatal code or 0. It runs with the watch's
 * listener lock held and no lock of the agent's: it may take its engine's own locks, must not
 * call back into the watch's listener functions, and should return promptly (the agent's
 * heartbeats wait for it). */
typedef void (*ftrt__watch_fn)(void *arg, int epoch, int fatal);

typedef struct ftrt__watch_listener {
    ftrt__watch_fn fn;
    void *arg;
    struct ftrt__watch_listener *next; /* (the watch's) */
} ftrt__watch_listener;

typedef struct ftrt__watch {
    _Atomic int pending_epoch; /* newest epoch the coordinator announced (agent thread writes) */
    _Atomic int fatal;         /* 0 or FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT (job over) */
    int epoch;                 /* the epoch the application trains in (application thread) */
    int needs_recover;         /* an operation returned FTRT_ERECOVER: ftrt_recover() is owed
                                  (application thread) */
    /* listeners (base/watch.c): ftrt__watch_init sets these up; a watch that never has a
     * listener (a zeroed one in a test or a bench) needs no init and fires nothing */
    pthread_mutex_t lis_lock;
    ftrt__watch_listener *listeners; /* under lis_lock */
    int lis_init;                    /* 1 once ftrt__watch_init ran */
    int fired_epoch, fired_fatal;    /* what the last fire told the listeners (under lis_lock) */
} ftrt__watch;

/* Sets w to epoch 0, nothing pending, no listeners. Call once before w is shared with another
 * thread; ftrt__watch_destroy releases it. */
void ftrt__watch_init(ftrt__watch *w);
void ftrt__watch_destroy(ftrt__watch *w);
/* Registers l (caller-owned, valid until unlisten returns) / removes it. Any thread but the
 * agent's, and not from inside a listener; after ftrt__watch_unlisten returns, l is not being
 * called and will not be. Both need ftrt__watch_init to have run (else they do nothing and
 * unlisten is trivially true). */
void ftrt__watch_listen(ftrt__watch *w, ftrt__watch_listener *l);
void ftrt__watch_unlisten(ftrt__watch *w, ftrt__watch_listener *l);
/* Tells the listeners, once per change, that pending_epoch rose or fatal was set since the last
 * fire: each is called with the new pending epoch and fatal code. The writer of the watch (the
 * agent thread) calls it after each write, holding none of its own locks. Cheap when nothing
 * changed (a lock and two atomic loads). */
void ftrt__watch_fire(ftrt__watch *w);

/* FTRT_ERECOVER when the epoch changed, the fatal code when the job is over, else 0. Cheap
 * (two atomic loads); application thread (reads `epoch`). */
static inline int ftrt__watch_check(const ftrt__watch *w)
{
    int f = atomic_load_explicit(&w->fatal, memory_order_acquire);
    if (f) return f;
    if (atomic_load_explicit(&w->pending_epoch, memory_order_acquire) != w->epoch)
        return FTRT_ERECOVER;
    return 0;
}

/* 1 when work begun in `epoch` is stale: the epoch changed or the job is over. Any thread
 * (atomics only). */
static inline int ftrt__watch_stale(const ftrt__watch *w, int epoch)
{
    return atomic_load(&w->pending_epoch) != epoch || atomic_load(&w->fatal) != 0;
}

/* Records that an operation of the application thread returned rc: FTRT_ERECOVER means the
 * caller owes ftrt_recover() (other calls are refused with FTRT_ESTATE until then). Returns
 * rc. Application thread. */
static inline int ftrt__watch_note(ftrt__watch *w, int rc)
{
    if (rc == FTRT_ERECOVER) w->needs_recover = 1;
    return rc;
}

/* ---- the host interface ------------------------------------------------------------------ */

/* Ledger interval kinds are base/ledger.h's FTRT__IV_*. FTRT__HOST_APP is not a kind: it asks
 * the host for "application time", which it books as compute or rework (after a rollback). */
enum { FTRT__HOST_APP = -1 };

typedef struct ftrt__host_ops {
    /* Sends a control message (base/proto.h type and payload) to the coordinator. Any thread.
     * Returns 0 or -errno (-ENOTCONN without a control connection). */
    int (*send)(void *arg, uint32_t type, const void *payload, uint32_t len);
    /* Switches this rank's ledger timeline to `kind` (FTRT__IV_* or FTRT__HOST_APP) now.
     * Application thread. */
    void (*mark)(void *arg, int kind);
    /* Brackets a data-plane wait of the application thread: begin counts the wait and books
     * what follows as exposed communication; end(rc) books what follows as application time,
     * or, when rc is FTRT_ERECOVER, turns the partial step into rework and the time since the
     * failure into detection. */
    void (*wait_begin)(void *arg);
    void (*wait_end)(void *arg, int rc);
} ftrt__host_ops;

/* A host: ops (NULL: every call below is a no-op and send returns -ENOTCONN) and its arg. */
typedef struct ftrt__host {
    const ftrt__host_ops *ops;
    void *arg;
} ftrt__host;

static inline int ftrt__host_send(const ftrt__host *h, uint32_t type, const void *payload,
                                  uint32_t len)
{
    return h && h->ops && h->ops->send ? h->ops->send(h->arg, type, payload, len) : -ENOTCONN;
}
static inline void ftrt__host_mark(const ftrt__host *h, int kind)
{
    if (h && h->ops && h->ops->mark) h->ops->mark(h->arg, kind);
}
static inline void ftrt__host_wait_begin(const ftrt__host *h)
{
    if (h && h->ops && h->ops->wait_begin) h->ops->wait_begin(h->arg);
}
static inline void ftrt__host_wait_end(const ftrt__host *h, int rc)
{
    if (h && h->ops && h->ops->wait_end) h->ops->wait_end(h->arg, rc);
}

/* ---- the commit callback ----------------------------------------------------------------- */

/* The coordinator decided checkpoint (step, epoch): result 0 (committed), FTRT_SKIPPED or a
 * negative code. Called on the agent thread with the agent's lock held: it must not call back
 * into the agent (no send) and must not block. */
typedef void (*ftrt__commit_fn)(void *arg, int64_t step, int epoch, int result);

#endif

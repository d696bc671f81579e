/*
 * persist.c - the checkpoint engine's persist thread (engine_internal.h): it takes snapshotted
 * jobs off the persist queue in order and makes each one durable, then tells the coordinator.
 *
 * The thread owns an io_uring (io.h) with every staging slot registered as fixed buffers
 * (re-registered after staging was reallocated); it writes the slot's image with
 * ftrt__shard_write_image (shard.c: O_DIRECT or buffered where refused, several writes in
 * flight, fdatasync through the ring, rename into place), then records the outcome, frees the
 * slot and sends SHARD_DONE {step, epoch, result} to the coordinator. A job whose epoch ended
 * (or that the engine abandoned) stops between requests, removes its partial file and sends
 * nothing. The same file holds the streaming path, where staging cannot hold one shard and the
 * application thread writes the whole checkpoint with ftrt__shard_write instead.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/proto.h"
#include "checkpoint/engine_internal.h"
#include "checkpoint/shard.h"

#define REG_PIECE (256u << 20) /* registered buffer size (io_uring takes at most 1 GiB) */

static int job_abandoned_cb(void *arg) { return ftrt__ckpt_job_stale(arg); }

/* Registers the current slots with the ring (persist thread; slots are stable while a job is
 * queued). */
static void register_slots(struct ftrt__ckpt_engine *e)
{
    struct iovec iov[FTRT__CKPT_MAX_SLOTS * 64];
    unsigned n = 0;
    pthread_mutex_lock(&e->lock);
    uint64_t gen = e->gen;
    for (int s = 0; s < e->nslots; s++)
        for (size_t off = 0; off < e->slots[s].cap && n < sizeof iov / sizeof iov[0];
             off += REG_PIECE) {
            size_t len = e->slots[s].cap - off < REG_PIECE ? e->slots[s].cap - off : REG_PIECE;
            iov[n++] = (struct iovec){.iov_base = e->slots[s].mem + off, .iov_len = len};
        }
    pthread_mutex_unlock(&e->lock);
    if (e->io.have_ring) {
        static atomic_int warned;
        int rc = ftrt__io_register(&e->io, iov, n);
        if (rc < 0 && rc != -ENOMEM && !atomic_exchange(&warned, 1))
            ftrt_log_warn("checkpoint: cannot register the staging buffers with io_uring (%s; "
                          "RLIMIT_MEMLOCK?): using unregistered writes",
                          strerror(-rc));
    }
    e->reg_gen = gen;
}

void ftrt__ckpt_send_done(struct ftrt__ckpt_engine *e, int64_t step, int epoch, int result)
{
    ftrt__ckpt_msg m = {.step = step, .epoch = epoch, .result = result};
    int rc = ftrt__host_send(&e->host, FTRT__MSG_SHARD_DONE, &m, sizeof m);
    if (rc) ftrt_log_warn("checkpoint of step %lld: cannot report to the coordinator: %s",
                          (long long)step, ftrt_strerror(rc));
}

/* Test knob o.hold_first: the first persist waits (bounded) until that many more
 * checkpoints were requested, or the job moved on (stop, abandon, epoch change). */
static void hold_first_persist(struct ftrt__ckpt_engine *e, ftrt__ckpt_job *j)
{
    pthread_mutex_lock(&e->lock);
    if (e->o.hold_first > 0 && e->st.persisted + e->st.failed == 0) {
        const int64_t want = 1 + (int64_t)e->o.hold_first;
        double deadline = ftrt__now() + 30.0;
        while (!e->stop && !ftrt__ckpt_job_stale(j) && e->st.started + e->st.skipped < want &&
               ftrt__now() < deadline)
            ftrt__ckpt_wait(e, 10);
    }
    pthread_mutex_unlock(&e->lock);
}

static void persist_one(struct ftrt__ckpt_engine *e, ftrt__ckpt_job *j)
{
    hold_first_persist(e, j);
    if (e->reg_gen != e->gen) register_slots(e); /* gen changes only while idle */
    pthread_mutex_lock(&e->lock); /* the settings as they are now (set_opts may change them) */
    ftrt__ckpt_opts eo = e->o;
    pthread_mutex_unlock(&e->lock);
    ftrt__wopts o = {.qd = (unsigned)eo.qd, .chunk = (size_t)eo.chunk_kb << 10,
                     .direct = eo.direct, .delay_ms = eo.write_delay_ms,
                     .abandoned = job_abandoned_cb, .arg = j};
    ftrt__wstat ws = {0};
    double t0 = ftrt__now();
    int rc = atomic_load(&j->snap_err);
    if (!rc && ftrt__ckpt_job_stale(j)) rc = FTRT_ERECOVER;
    if (!rc)
        rc = ftrt__shard_write_image(&e->io, eo.dir, j->step, j->rank,
                               e->slots[j->slot].mem, j->bytes, &o, &ws);
    /* Published, but nobody will commit it. */
    if (rc == 0 && ftrt__ckpt_job_stale(j)) rc = FTRT_ERECOVER;
    if (rc && rc != FTRT_ERECOVER)
        ftrt_log_warn("checkpoint of step %lld: this rank's shard failed: %s; the previous "
                      "committed checkpoint stays",
                      (long long)j->step, ftrt_strerror(rc));
    int64_t step = j->step;
    int epoch = j->epoch;
    /* Bookkeeping first, so that whoever sees the COMMIT also sees these statistics. */
    pthread_mutex_lock(&e->lock);
    ftrt__ckpt_rec *r = &e->recs[j->rec];
    if (r->step == j->step && r->epoch == j->epoch && r->state == FTRT__REC_ACTIVE) {
        r->local = rc;
        r->state = rc == FTRT_ERECOVER ? FTRT__REC_DECIDED : FTRT__REC_PERSISTED;
        if (rc == FTRT_ERECOVER) r->commit = FTRT_ERECOVER;
    }
    if (rc == 0) {
        e->st.persisted++;
        e->st.last_persist_s = ftrt__now() - t0;
        e->st.last_write_s = ws.write_s;
        e->st.last_bytes = ws.bytes;
        e->st.flags = (e->st.flags & ~(uint32_t)(FTRT_CKPT_STAT_DIRECT | FTRT_CKPT_STAT_FIXED)) |
                      (ws.direct ? FTRT_CKPT_STAT_DIRECT : 0) | (ws.fixed ? FTRT_CKPT_STAT_FIXED : 0);
    } else if (rc == FTRT_ERECOVER) {
        e->st.abandoned++;
    } else {
        e->st.failed++;
    }
    e->slots[j->slot].busy = 0;
    e->persisting = NULL;
    ftrt__ckpt_job_put(j);
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    if (rc != FTRT_ERECOVER) ftrt__ckpt_send_done(e, step, epoch, rc);
}

void *ftrt__ckpt_persist_main(void *arg)
{
    struct ftrt__ckpt_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    unsigned qd = (unsigned)e->o.qd;
    pthread_mutex_unlock(&e->lock);
    ftrt__io_init(&e->io, qd + 4);
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->stop && !e->qhead) pthread_cond_wait(&e->cond, &e->lock);
        if (!e->qhead) break; /* stopping and nothing queued */
        ftrt__ckpt_job *j = e->qhead;
        e->qhead = j->qnext;
        if (!e->qhead) e->qtail = NULL;
        e->persisting = j;
        if (e->stop) atomic_store(&j->abandon, 1);
        pthread_mutex_unlock(&e->lock);
        persist_one(e, j);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    ftrt__io_exit(&e->io);
    return NULL;
}

/* ---- streaming --------------------------------------------------------------------------- */

int ftrt__ckpt_write_streaming(struct ftrt__ckpt_engine *e, int64_t step,
                               const ftrt__region *regs, int n, int rank, int nranks)
{
    int epoch = e->watch->epoch;
    pthread_mutex_lock(&e->lock);
    ftrt__ckpt_rec *r = ftrt__ckpt_rec_new(e, step, epoch);
    e->st.started++;
    pthread_mutex_unlock(&e->lock);
    double t0 = ftrt__now();
    int wr = ftrt__shard_write(e->o.dir, step, rank, nranks, regs, n);
    ftrt__ckpt_send_done(e, step, epoch, wr);
    pthread_mutex_lock(&e->lock);
    r->local = wr;
    r->state = FTRT__REC_PERSISTED;
    if (wr == 0) {
        e->st.persisted++;
        e->st.last_persist_s = e->st.last_snapshot_s = ftrt__now() - t0;
        e->st.flags |= FTRT_CKPT_STAT_STREAMING;
    } else {
        e->st.failed++;
    }
    pthread_mutex_unlock(&e->lock);
    return 0; /* like the asynchronous path, the outcome comes with the commit */
}

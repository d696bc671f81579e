/*
 * engine.c - the asynchronous checkpoint engine's life cycle and API (engine.h): creating and
 * stopping it, starting a checkpoint, waiting for its snapshot and for the coordinator's
 * decision, the records of recent checkpoints, statistics, quiesce and drain
 * (docs/ARCHITECTURE.md "Checkpoints"; the region registry and ftrt_restore are
 * runtime/regions.c, the loading itself restore.c).
 *
 * A checkpoint of step S on a trainer goes through three stages:
 *
 *  1. Snapshot (stage.c). ftrt_checkpoint_start() lays out this rank's shard (format.h), takes
 *     a free staging slot holding the exact file image, and the snapshot thread, helped by
 *     whoever calls ftrt_checkpoint_wait_snapshot(), copies the regions into it; the thread
 *     that completes the last piece queues the job for the persist thread.
 *  2. Persist (persist.c). The persist thread writes the slot image through its io_uring,
 *     makes it durable and renames it into place, then sends SHARD_DONE {step, epoch, result}
 *     to the coordinator and frees the slot.
 *  3. Commit. The coordinator commits once every trainer's shard of (step, epoch) is durable
 *     (runtime/coordinator/track.c) and answers COMMIT; the agent thread hands it to
 *     ftrt__ckpt_on_commit(), which resolves the waiters of ftrt_checkpoint_wait_commit().
 *
 * When no slot is free the next checkpoint waits for the oldest persist (FTRT_CKPT_POLICY=wait)
 * or is skipped (skip: SHARD_DONE carries FTRT_SKIPPED so the coordinator counts it and never
 * commits that step). When not even one shard fits the staging budget, every checkpoint is
 * written synchronously with bounded chunk buffers (persist.c's streaming path).
 *
 * An epoch change abandons every checkpoint of the old epoch: the persist thread stops between
 * requests, removes its partial file and sends nothing; waiters get FTRT_ERECOVER; the previous
 * committed step stays. ftrt_recover() first lets a running snapshot finish (it reads state the
 * recovery is about to overwrite). ftrt_finalize() drains: persists finish and their commits are
 * awaited (bounded), or are abandoned when the job is failing.
 *
 * Threads and locks: the application thread, the snapshot thread, the persist thread and the
 * agent thread (ftrt__ckpt_on_commit) share struct ftrt__ckpt_engine (engine_internal.h) under
 * eng->lock; pieces are claimed and completed with atomics. The agent calls in with cp.lock
 * held, so the engine never takes cp.lock while holding eng->lock. eng->lock is never held
 * across I/O, a copy or an allocation. No engine thread calls MPI.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/log.h"
#include "checkpoint/engine_internal.h"

#define DRAIN_COMMIT_S 30.0 /* finalize: longest wait for the coordinator's COMMITs */

/* ---- small helpers ----------------------------------------------------------------------- */

/* The newest record of step (any step when step < 0), or NULL. eng->lock held. */
static ftrt__ckpt_rec *rec_find(struct ftrt__ckpt_engine *e, int64_t step)
{
    unsigned n = e->nrec < FTRT__CKPT_NREC ? e->nrec : FTRT__CKPT_NREC;
    for (unsigned k = 1; k <= n; k++) {
        ftrt__ckpt_rec *r = &e->recs[(e->nrec - k) % FTRT__CKPT_NREC];
        if (r->state != FTRT__REC_FREE && (step < 0 || r->step == step)) return r;
    }
    return NULL;
}

static int start_threads(struct ftrt__ckpt_engine *e)
{
    if (e->threads) return 0;
    int rc = pthread_create(&e->persist_thr, NULL, ftrt__ckpt_persist_main, e);
    if (rc) return -rc;
    rc = pthread_create(&e->snap_thr, NULL, ftrt__ckpt_snap_main, e);
    if (rc) {
        pthread_mutex_lock(&e->lock);
        e->stop = 1;
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->persist_thr, NULL);
        e->stop = 0;
        return -rc;
    }
    e->threads = 1;
    return 0;
}

/* ---- life cycle -------------------------------------------------------------------------- */

int ftrt__ckpt_engine_new(const ftrt__ckpt_opts *o, ftrt__watch *watch, ftrt__host host,
                          struct ftrt__ckpt_engine **out)
{
    *out = NULL;
    struct ftrt__ckpt_engine *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    e->o = *o;
    e->watch = watch;
    e->host = host;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    e->st.size = sizeof e->st;
    e->st.last_committed_step = -1;
    *out = e;
    return 0;
}

void ftrt__ckpt_engine_set_opts(struct ftrt__ckpt_engine *e, const ftrt__ckpt_opts *o)
{
    pthread_mutex_lock(&e->lock);
    e->o = *o;
    pthread_mutex_unlock(&e->lock);
}

void ftrt__ckpt_engine_free(struct ftrt__ckpt_engine *e)
{
    if (!e) return;
    if (e->threads) {
        pthread_mutex_lock(&e->lock);
        e->stop = 1;
        for (ftrt__ckpt_job *j = e->qhead; j; j = j->qnext) atomic_store(&j->abandon, 1);
        if (e->persisting) atomic_store(&e->persisting->abandon, 1);
        if (e->snap) atomic_store(&e->snap->abandon, 1);
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);
        /* A snapshot in progress still completes (abandoned pieces are not copied). */
        pthread_mutex_lock(&e->lock);
        ftrt__ckpt_job *s = e->snap;
        if (s) s->refs++;
        pthread_mutex_unlock(&e->lock);
        if (s) {
            ftrt__ckpt_snapshot_work(s);
            pthread_mutex_lock(&e->lock);
            while (!s->snapped) ftrt__ckpt_wait(e, 10);
            ftrt__ckpt_job_put(s);
            pthread_mutex_unlock(&e->lock);
        }
        pthread_join(e->snap_thr, NULL);
        pthread_join(e->persist_thr, NULL);
    }
    ftrt__ckpt_staging_free(e);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    free(e);
}

/* ---- the agent's side -------------------------------------------------------------------- */

void ftrt__ckpt_on_commit(void *arg, int64_t step, int epoch, int result)
{
    struct ftrt__ckpt_engine *e = arg;
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    unsigned n = e->nrec < FTRT__CKPT_NREC ? e->nrec : FTRT__CKPT_NREC;
    for (unsigned k = 1; k <= n; k++) {
        ftrt__ckpt_rec *r = &e->recs[(e->nrec - k) % FTRT__CKPT_NREC];
        if (r->step != step || r->epoch != epoch || r->state == FTRT__REC_DECIDED) continue;
        r->commit = result;
        r->state = FTRT__REC_DECIDED;
        break;
    }
    if (result == 0) {
        e->st.committed++;
        e->st.last_committed_step = step;
    }
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

void ftrt__ckpt_bye(struct ftrt__ckpt_engine *e, double *stall_s, int64_t *skipped)
{
    *stall_s = 0;
    *skipped = 0;
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    *stall_s = e->st.stall_s;
    *skipped = e->st.skipped;
    pthread_mutex_unlock(&e->lock);
}

/* ---- the application's side -------------------------------------------------------------- */

/* Helps the running snapshot to completion. Returns once registered memory may be modified. */
void ftrt__ckpt_finish_snapshot(struct ftrt__ckpt_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    ftrt__ckpt_job *j = e->snap;
    if (!j) {
        pthread_mutex_unlock(&e->lock);
        return;
    }
    j->refs++;
    pthread_mutex_unlock(&e->lock);
    ftrt__ckpt_snapshot_work(j);
    pthread_mutex_lock(&e->lock);
    while (!j->snapped) pthread_cond_wait(&e->cond, &e->lock);
    ftrt__ckpt_job_put(j);
    pthread_mutex_unlock(&e->lock);
}

void ftrt__ckpt_quiesce(struct ftrt__ckpt_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    /* Checkpoints of the old epoch are abandoned; the persist thread also sees the epoch. */
    int pending = atomic_load(&e->watch->pending_epoch);
    if (e->snap && e->snap->epoch != pending) atomic_store(&e->snap->abandon, 1);
    if (e->persisting && e->persisting->epoch != pending)
        atomic_store(&e->persisting->abandon, 1);
    for (ftrt__ckpt_job *j = e->qhead; j; j = j->qnext)
        if (j->epoch != pending) atomic_store(&j->abandon, 1);
    pthread_mutex_unlock(&e->lock);
    ftrt__ckpt_finish_snapshot(e);
}

void ftrt__ckpt_add_stall(struct ftrt__ckpt_engine *e, double s, int last)
{
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->st.stall_s += s;
    if (last) e->st.last_stall_s = s;
    pthread_mutex_unlock(&e->lock);
}

void ftrt__ckpt_set_last_stall(struct ftrt__ckpt_engine *e, double s)
{
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->st.last_stall_s = s;
    pthread_mutex_unlock(&e->lock);
}

int ftrt__ckpt_snapshot_busy(struct ftrt__ckpt_engine *e)
{
    if (!e) return 0;
    pthread_mutex_lock(&e->lock);
    int busy = e->snap != NULL;
    pthread_mutex_unlock(&e->lock);
    return busy;
}

/* A checkpoint of this step that the coordinator has not decided yet, in this epoch? */
static int step_in_flight(struct ftrt__ckpt_engine *e, int64_t step, int epoch)
{
    unsigned n = e->nrec < FTRT__CKPT_NREC ? e->nrec : FTRT__CKPT_NREC;
    for (unsigned k = 1; k <= n; k++) {
        const ftrt__ckpt_rec *r = &e->recs[(e->nrec - k) % FTRT__CKPT_NREC];
        if (r->step == step && r->epoch == epoch && r->state != FTRT__REC_DECIDED) return 1;
    }
    return 0;
}

static int step_committed(const struct ftrt__ckpt_engine *e, int64_t step)
{
    char p[4200];
    struct stat st;
    if (ftrt__path(p, sizeof p, "%s/step-%lld/MANIFEST", e->o.dir, (long long)step))
        return 0;
    return stat(p, &st) == 0;
}

/* May checkpoint `step` of this epoch begin? Returns 0, the watch's code, FTRT_EINVAL (already
 * in flight) or -EEXIST (already committed). */
static int start_allowed(struct ftrt__ckpt_engine *e, int64_t step, int epoch)
{
    int rc = ftrt__watch_check(e->watch);
    if (rc) return rc;
    pthread_mutex_lock(&e->lock);
    int dup = step_in_flight(e, step, epoch);
    pthread_mutex_unlock(&e->lock);
    if (dup) {
        ftrt_log_error("ftrt_checkpoint: a checkpoint of step %lld is already in flight",
                       (long long)step);
        return FTRT_EINVAL;
    }
    if (step_committed(e, step)) {
        ftrt_log_warn("ftrt_checkpoint: step %lld is already committed in %s: not rewritten",
                      (long long)step, e->o.dir);
        return -EEXIST;
    }
    return 0;
}

/* Takes a free staging slot for j, waiting for one; eng->lock held (released while waiting).
 * Returns 0 with j->slot set, 1 when none is free and the policy is skip, or the watch's
 * code. */
static int take_slot(struct ftrt__ckpt_engine *e, ftrt__ckpt_job *j)
{
    for (;;) {
        j->slot = -1;
        for (int s = 0; s < e->nslots && j->slot < 0; s++)
            if (!e->slots[s].busy) j->slot = s;
        if (j->slot >= 0 && !e->resizing) return 0;
        if (e->o.policy == FTRT_CKPT_SKIP) return 1;
        int rc = ftrt__watch_check(e->watch);
        if (rc) return rc;
        ftrt__ckpt_wait(e, 10);
    }
}

/* FTRT_CKPT_POLICY=skip found no free slot: checkpoint j is recorded as skipped, reported to
 * the coordinator and freed. Called with eng->lock held; releases it. Returns FTRT_SKIPPED. */
static int skip(struct ftrt__ckpt_engine *e, ftrt__ckpt_job *j)
{
    int64_t step = j->step;
    int epoch = j->epoch;
    ftrt__ckpt_rec *r = ftrt__ckpt_rec_new(e, step, epoch);
    r->local = FTRT_SKIPPED;
    r->state = FTRT__REC_PERSISTED;
    e->st.skipped++;
    pthread_mutex_unlock(&e->lock);
    ftrt__ckpt_job_free(j);
    ftrt_log_info("checkpoint of step %lld skipped: the previous one is still being "
                  "written (FTRT_CKPT_POLICY=skip)",
                  (long long)step);
    ftrt__ckpt_send_done(e, step, epoch, FTRT_SKIPPED);
    return FTRT_SKIPPED;
}

/* Hands j, which holds a slot, to the snapshot: records it and makes it the running snapshot
 * (finished at once when it has no piece). Called with eng->lock held; releases it. */
static void begin_snapshot(struct ftrt__ckpt_engine *e, ftrt__ckpt_job *j)
{
    e->slots[j->slot].busy = 1;
    ftrt__ckpt_rec *r = ftrt__ckpt_rec_new(e, j->step, j->epoch);
    j->rec = (int)(r - e->recs);
    j->refs = 1; /* the pipeline's; dropped by the persist thread */
    e->snap = j;
    if (j->npieces == 0) {
        pthread_mutex_unlock(&e->lock);
        ftrt__ckpt_snapshot_done(j);
        pthread_mutex_lock(&e->lock);
    }
    e->st.started++;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

int ftrt__ckpt_start(struct ftrt__ckpt_engine *e, int64_t step, const ftrt__region *regs,
                     int nregs, int rank, int nranks)
{
    int epoch = e->watch->epoch;
    ftrt__ckpt_finish_snapshot(e); /* one snapshot at a time (also when interrupted) */
    int rc = start_allowed(e, step, epoch);
    if (rc) return rc;
    ftrt__ckpt_job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->eng = e;
    j->step = step;
    j->epoch = epoch;
    j->rank = rank;
    j->nranks = nranks;
    j->t_start = ftrt__now();
    rc = ftrt__ckpt_job_build(regs, nregs, j);
    if (rc == 0) rc = ftrt__ckpt_staging_fit(e, (size_t)j->bytes);
    if (rc == 0 && e->streaming) {
        ftrt__ckpt_job_free(j);
        return ftrt__ckpt_write_streaming(e, step, regs, nregs, rank, nranks);
    }
    if (rc == 0) rc = start_threads(e);
    if (rc) {
        ftrt__ckpt_job_free(j);
        if (rc != FTRT_EINVAL) ftrt_log_warn("ftrt_checkpoint of step %lld: %s", (long long)step,
                                             ftrt_strerror(rc));
        return rc;
    }
    pthread_mutex_lock(&e->lock);
    rc = take_slot(e, j);
    if (rc == 1) return skip(e, j);
    if (rc) {
        pthread_mutex_unlock(&e->lock);
        ftrt__ckpt_job_free(j);
        return rc;
    }
    begin_snapshot(e, j);
    return 0;
}

int ftrt__ckpt_prepare(struct ftrt__ckpt_engine *e, const ftrt__region *regs, int nregs,
                       int rank, int nranks)
{
    ftrt__ckpt_job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->rank = rank;
    j->nranks = nranks;
    int rc = ftrt__ckpt_job_build(regs, nregs, j); /* the layout of a checkpoint taken now */
    if (rc == 0) rc = ftrt__ckpt_staging_fit(e, (size_t)j->bytes);
    if (rc == 0 && !e->streaming) rc = start_threads(e);
    ftrt__ckpt_job_free(j);
    return rc;
}

int ftrt__ckpt_wait_commit(struct ftrt__ckpt_engine *e, int64_t step, int timeout_ms)
{
    double deadline = timeout_ms < 0 ? 0 : ftrt__now() + timeout_ms / 1000.0;
    int rc;
    pthread_mutex_lock(&e->lock);
    ftrt__ckpt_rec *r = rec_find(e, step);
    if (!r) {
        pthread_mutex_unlock(&e->lock);
        return FTRT_EINVAL;
    }
    int64_t want = r->step;
    int epoch = r->epoch;
    for (;;) {
        /* The record may be recycled while we wait: look it up again each time. */
        r = NULL;
        unsigned n = e->nrec < FTRT__CKPT_NREC ? e->nrec : FTRT__CKPT_NREC;
        for (unsigned k = 1; k <= n && !r; k++) {
            ftrt__ckpt_rec *x = &e->recs[(e->nrec - k) % FTRT__CKPT_NREC];
            if (x->step == want && x->epoch == epoch && x->state != FTRT__REC_FREE) r = x;
        }
        if (!r) {
            rc = FTRT_EINVAL;
            break;
        }
        if (r->state == FTRT__REC_DECIDED) {
            rc = r->commit;
            break;
        }
        int f = atomic_load(&e->watch->fatal);
        if (f) {
            rc = f;
            break;
        }
        if (atomic_load(&e->watch->pending_epoch) != epoch) {
            rc = FTRT_ERECOVER;
            break;
        }
        if (timeout_ms >= 0 && ftrt__now() >= deadline) {
            rc = FTRT_ETIMEDOUT;
            break;
        }
        ftrt__ckpt_wait(e, 10);
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

void ftrt__ckpt_stats(struct ftrt__ckpt_engine *e, ftrt_ckpt_stats *out, size_t size)
{
    if (size < sizeof(uint32_t)) return;
    ftrt_ckpt_stats s;
    if (e) {
        pthread_mutex_lock(&e->lock);
        s = e->st;
        pthread_mutex_unlock(&e->lock);
    } else {
        memset(&s, 0, sizeof s);
        s.last_committed_step = -1;
    }
    s.size = (uint32_t)(size < sizeof s ? size : sizeof s);
    memcpy(out, &s, s.size);
}

void ftrt__ckpt_drain(struct ftrt__ckpt_engine *e, int wait_commits)
{
    if (!e) return;
    const ftrt__watch *w = e->watch;
    ftrt__ckpt_finish_snapshot(e);
    double t0 = ftrt__now();
    pthread_mutex_lock(&e->lock);
    /* Every persist finishes (an abandoned one stops at its next request). */
    while (e->qhead || e->persisting) {
        if (atomic_load(&e->watch->fatal)) {
            for (ftrt__ckpt_job *j = e->qhead; j; j = j->qnext) atomic_store(&j->abandon, 1);
            if (e->persisting) atomic_store(&e->persisting->abandon, 1);
        }
        ftrt__ckpt_wait(e, 10);
    }
    /* Then the commits of this epoch's durable shards, for a bounded time. */
    while (wait_commits) {
        int open = 0;
        unsigned n = e->nrec < FTRT__CKPT_NREC ? e->nrec : FTRT__CKPT_NREC;
        for (unsigned k = 1; k <= n; k++) {
            const ftrt__ckpt_rec *r = &e->recs[(e->nrec - k) % FTRT__CKPT_NREC];
            if (r->state == FTRT__REC_PERSISTED && r->epoch == w->epoch) open++;
        }
        if (!open || ftrt__watch_check(w) || ftrt__now() - t0 > DRAIN_COMMIT_S) {
            if (open && !ftrt__watch_check(w))
                ftrt_log_warn("finalize: %d checkpoint(s) still uncommitted after %.0f s; "
                              "leaving them", open, DRAIN_COMMIT_S);
            break;
        }
        ftrt__ckpt_wait(e, 10);
    }
    pthread_mutex_unlock(&e->lock);
}

void ftrt__ckpt_note_restore(struct ftrt__ckpt_engine *e, double seconds, uint64_t bytes)
{
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->st.last_restore_s = seconds;
    e->st.last_restore_bytes = bytes;
    pthread_mutex_unlock(&e->lock);
}

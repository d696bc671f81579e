/*
 * engine.c - the asynchronous checkpoint engine: snapshot, background persist and the
 * commit bookkeeping (docs/ARCHITECTURE.md "Checkpoints"; the region registry and restore are
 * runtime/regions.c).
 *
 * A checkpoint of step S on a trainer goes through three stages:
 *
 *  1. Snapshot. ftrt_checkpoint_start() lays out this rank's shard (format.h), takes a free
 *     staging slot (a 4 KiB-aligned, huge-page backed buffer holding the exact file image) and
 *     cuts the regions into pieces of at most 8 MiB. The engine's snapshot thread copies pieces
 *     into the slot with the fused copy + CRC32C while the application computes; whoever calls
 *     ftrt_checkpoint_wait_snapshot() helps with the remaining pieces, so a blocking checkpoint
 *     runs on two threads. The thread that completes the last piece joins the piece CRCs
 *     (ftrt__crc32c_combine), writes header and table into the slot and queues the job for the
 *     persist thread. Registered memory is only read, and only until the snapshot completes.
 *  2. Persist. The persist thread owns an io_uring with every staging slot registered as fixed
 *     buffers; it writes the slot image with O_DIRECT (or buffered where refused), several
 *     writes in flight, fdatasyncs through the ring, renames the shard into place, then sends
 *     SHARD_DONE {step, epoch, result} to the coordinator and frees the slot.
 *  3. Commit. The coordinator commits once every trainer's shard of (step, epoch) is durable
 *     (checkpoint/track.c) and answers COMMIT; the agent thread hands it to
 *     ftrt__ckpt_on_commit(), which resolves the waiters of ftrt_checkpoint_wait_commit().
 *
 * Staging is bounded by FTRT_CKPT_STAGING_MB: two slots (one persisting while the next snapshot
 * is taken) when they fit, one otherwise. When no slot is free the next checkpoint waits for the
 * oldest persist (FTRT_CKPT_POLICY=wait) or is skipped (skip: SHARD_DONE carries FTRT_SKIPPED so
 * the coordinator counts it and never commits that step). When not even one shard fits, every
 * checkpoint is written synchronously with bounded chunk buffers (said once at warn level).
 *
 * An epoch change abandons every checkpoint of the old epoch: the persist thread stops between
 * requests, removes its partial file and sends nothing; waiters get FTRT_ERECOVER; the previous
 * committed step stays. ftrt_recover() first lets a running snapshot finish (it reads state the
 * recovery is about to overwrite). ftrt_finalize() drains: persists finish and their commits are
 * awaited (bounded), or are abandoned when the job is failing.
 *
 * Threads and locks: the application thread, the snapshot thread, the persist thread and the
 * agent thread (ftrt__ckpt_on_commit) share struct ftrt__ckpt_engine under eng->lock; pieces are
 * claimed and completed with atomics. The agent calls in with cp.lock held, so the engine never
 * takes cp.lock while holding eng->lock. eng->lock is never held across I/O, a copy or an
 * allocation. No engine thread calls MPI.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/proto.h"
#include "checkpoint/ckpt.h"
#include "checkpoint/engine.h"
#include "checkpoint/format.h"

#define PIECE_BYTES (8u << 20)   /* snapshot work unit */
#define REG_PIECE (256u << 20)   /* registered buffer size (io_uring takes at most 1 GiB) */
#define MAX_SLOTS 2
#define NREC 64                  /* recent checkpoints remembered for wait_commit */
#define DRAIN_COMMIT_S 30.0      /* finalize: longest wait for the coordinator's COMMITs */

const ftrt__ckpt_device_ops *ftrt__ckpt_device;

typedef struct piece {
    int reg;      /* region index in the job */
    uint64_t off; /* offset in the region's slice */
    uint64_t len;
    uint32_t crc;
} piece;

typedef struct job {
    struct ftrt__ckpt_engine *eng;
    int64_t step;
    int epoch, rank, nranks;
    int slot;
    uint64_t bytes;       /* file image size */
    uint32_t tb;          /* header + table bytes */
    int nregs;
    ftrt__shard_ent *ents;
    const unsigned char **src; /* region base pointers */
    unsigned char *dev;        /* per region: device memory (FTRT_REGION_DEVICE) */
    piece *pieces;
    size_t npieces;
    _Atomic size_t next, done;
    _Atomic int abandon;
    _Atomic int snap_err;      /* first device-copy error */
    int snapped;               /* guarded by eng->lock */
    int refs;                  /* guarded by eng->lock */
    int rec;                   /* index in eng->recs */
    double t_start, t_snap;
    struct job *qnext;
} job;

enum { REC_FREE = 0, REC_ACTIVE, REC_PERSISTED, REC_DECIDED };

typedef struct rec {
    int64_t step;
    int epoch;
    int state;
    int local;  /* this rank's result: 0, FTRT_SKIPPED or an error */
    int commit; /* the coordinator's decision once DECIDED */
} rec;

typedef struct slot {
    unsigned char *mem;
    size_t cap;
    int busy;
} slot;

struct ftrt__ckpt_engine {
    ftrt__ckpt_opts o;   /* settings, copied at creation */
    ftrt__watch *watch;  /* the runtime's epoch watch (not owned) */
    ftrt__host host;     /* SHARD_DONE goes to the coordinator through host.send */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t snap_thr, persist_thr;
    int threads;   /* 1 once both threads run */
    int stop;
    slot slots[MAX_SLOTS];
    int nslots;
    size_t slot_cap;
    int resizing;
    int streaming;         /* staging cannot hold one shard: synchronous writes */
    uint64_t gen;          /* +1 per slot (re)allocation; persist thread re-registers */
    job *snap;             /* the job being snapshotted, or NULL */
    job *qhead, *qtail;    /* persist queue */
    job *persisting;
    rec recs[NREC];
    unsigned nrec;         /* records ever made; recs[nrec % NREC] is the next */
    ftrt_ckpt_stats st;
    /* persist thread only */
    ftrt__wring wring;
    uint64_t reg_gen;
};

/* ---- small helpers ----------------------------------------------------------------------- */

static unsigned kind_of(unsigned flags) { return flags & FTRT_REGION_SHARDED; }

/* Epoch changed or job over since the job began (read by engine threads: atomics only). */
static int job_stale(job *j)
{
    return atomic_load(&j->abandon) || ftrt__watch_stale(j->eng->watch, j->epoch);
}

static int job_abandoned_cb(void *arg) { return job_stale(arg); }

static void job_free(job *j)
{
    if (!j) return;
    free(j->ents);
    free(j->src);
    free(j->dev);
    free(j->pieces);
    free(j);
}

/* Drops a reference; eng->lock held. */
static void job_put(job *j)
{
    if (--j->refs == 0) job_free(j);
}

static rec *rec_new(struct ftrt__ckpt_engine *e, int64_t step, int epoch)
{
    int idx = (int)(e->nrec++ % NREC);
    rec *r = &e->recs[idx];
    *r = (rec){.step = step, .epoch = epoch, .state = REC_ACTIVE};
    return r;
}

/* The newest record of step (any step when step < 0), or NULL. eng->lock held. */
static rec *rec_find(struct ftrt__ckpt_engine *e, int64_t step)
{
    unsigned n = e->nrec < NREC ? e->nrec : NREC;
    for (unsigned k = 1; k <= n; k++) {
        rec *r = &e->recs[(e->nrec - k) % NREC];
        if (r->state != REC_FREE && (step < 0 || r->step == step)) return r;
    }
    return NULL;
}

/* Waits on the engine's condition for at most ms milliseconds; eng->lock held. */
static void eng_wait(struct ftrt__ckpt_engine *e, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&e->cond, &e->lock, &ts);
}

/* ---- staging memory ---------------------------------------------------------------------- */

static void slot_unmap(slot *s)
{
    if (s->mem) {
        if (ftrt__ckpt_device && ftrt__ckpt_device->unpin) ftrt__ckpt_device->unpin(s->mem);
        ftrt__unmap_huge(s->mem, s->cap);
    }
    s->mem = NULL;
    s->cap = 0;
    s->busy = 0;
}

/* Maps cap bytes of staging backed by huge pages where possible and faults them in now, so
 * that snapshots never pay page faults. Returns NULL on failure. */
static unsigned char *staging_map(size_t cap)
{
    void *p = ftrt__map_huge(cap);
    if (!p) return NULL;
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, cap, MADV_POPULATE_WRITE) == 0) return p;
#endif
    for (size_t off = 0; off < cap; off += 4096) ((volatile unsigned char *)p)[off] = 0;
    return p;
}

/* How many slots of `need` bytes the staging budget allows (0: stream synchronously). */
static int slots_for(const struct ftrt__ckpt_engine *e, size_t need)
{
    uint64_t budget;
    if (e->o.staging_mb > 0) {
        budget = (uint64_t)e->o.staging_mb << 20;
    } else {
        /* Automatic: double buffering, within half of physical memory. */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        uint64_t half = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : UINT64_MAX;
        budget = (uint64_t)need * MAX_SLOTS <= half ? (uint64_t)need * MAX_SLOTS : half;
    }
    uint64_t n = need ? budget / need : MAX_SLOTS;
    return n > MAX_SLOTS ? MAX_SLOTS : (int)n;
}

/* Makes staging fit a shard of `need` bytes: reallocates (after every slot went idle) when the
 * slots are too small. Sets e->streaming when even one slot does not fit the budget. Called by
 * the application thread without eng->lock. Returns 0 or -ENOMEM. */
static int staging_fit(struct ftrt__ckpt_engine *e, size_t need)
{
    int want = slots_for(e, need);
    pthread_mutex_lock(&e->lock);
    int ok = want == 0 ? e->streaming : (!e->streaming && e->nslots == want && e->slot_cap >= need);
    if (ok) {
        pthread_mutex_unlock(&e->lock);
        return 0;
    }
    /* Wait for every slot to go idle: nothing may be writing from the old ones. */
    while (e->snap || e->qhead || e->persisting) eng_wait(e, 10);
    e->resizing = 1;
    slot old[MAX_SLOTS];
    memcpy(old, e->slots, sizeof old);
    memset(e->slots, 0, sizeof e->slots);
    e->nslots = 0;
    e->slot_cap = 0;
    pthread_mutex_unlock(&e->lock);

    for (int i = 0; i < MAX_SLOTS; i++) slot_unmap(&old[i]);
    int rc = 0, got = 0;
    size_t cap = (need + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    slot fresh[MAX_SLOTS] = {0};
    if (want == 0) {
        static int warned;
        if (!warned++)
            ftrt_log_warn("checkpoint: staging budget FTRT_CKPT_STAGING_MB=%d is smaller than "
                          "this rank's shard (%.1f MiB): checkpoints are written synchronously "
                          "(training waits for the write)",
                          e->o.staging_mb, (double)need / 1048576.0);
    }
    for (; got < want; got++) {
        fresh[got].mem = staging_map(cap);
        if (!fresh[got].mem) break;
        fresh[got].cap = cap;
        if (ftrt__ckpt_device && ftrt__ckpt_device->pin)
            ftrt__ckpt_device->pin(fresh[got].mem, cap); /* faster device copies; optional */
    }
    if (want > 0 && got == 0) rc = -ENOMEM;
    if (got > 0 && got < want)
        ftrt_log_warn("checkpoint: could map only %d of %d staging buffers of %.1f MiB", got,
                      want, (double)cap / 1048576.0);
    pthread_mutex_lock(&e->lock);
    memcpy(e->slots, fresh, sizeof fresh);
    e->nslots = got;
    e->slot_cap = got ? cap : 0;
    e->streaming = want == 0;
    e->gen++;
    e->resizing = 0;
    e->st.staging_bytes = (uint64_t)got * cap;
    e->st.staging_slots = got;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    if (got > 0)
        ftrt_log_info("checkpoint: %d staging buffer(s) of %.1f MiB", got,
                      (double)cap / 1048576.0);
    return rc;
}

/* ---- snapshot ---------------------------------------------------------------------------- */

static void copy_piece(job *j, size_t i)
{
    piece *p = &j->pieces[i];
    const ftrt__shard_ent *x = &j->ents[p->reg];
    unsigned char *dst = j->eng->slots[j->slot].mem + x->file_offset + p->off;
    if (atomic_load(&j->abandon)) return; /* the image will not be written */
    if (j->dev[p->reg]) {
        int rc = ftrt__ckpt_device->snapshot(dst, j->src[p->reg] + x->slice_offset + p->off,
                                             (size_t)p->len, &p->crc);
        if (rc) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->snap_err, &zero, rc);
        }
    } else {
        p->crc = ftrt__copy_crc32c(dst, j->src[p->reg] + x->slice_offset + p->off,
                                   (size_t)p->len, 0);
    }
    uint64_t end = p->off + p->len;
    if (end == x->slice_bytes) /* zero the padding up to the next 4 KiB boundary */
        memset(dst + p->len, 0, (size_t)(ftrt__align4k(end) - end));
}

/* Completes a snapshot: region CRCs from the pieces, header and table into the slot, then the
 * job goes to the persist queue. Run by the thread that finished the last piece. */
static void finish_snapshot(job *j)
{
    struct ftrt__ckpt_engine *e = j->eng;
    unsigned char *img = e->slots[j->slot].mem;
    size_t k = 0;
    for (int r = 0; r < j->nregs; r++) {
        uint32_t c = 0;
        for (; k < j->npieces && j->pieces[k].reg == r; k++)
            c = ftrt__crc32c_combine(c, j->pieces[k].crc, j->pieces[k].len);
        j->ents[r].data_crc = c;
    }
    ftrt__shard_hdr h = {.table_bytes = j->tb, .step = j->step, .rank = (uint32_t)j->rank,
                         .nranks = (uint32_t)j->nranks, .nregions = (uint32_t)j->nregs};
    ftrt__shard_encode(img, &h, j->ents);
    memset(img + j->tb, 0, (size_t)(ftrt__align4k(j->tb) - j->tb));
    pthread_mutex_lock(&e->lock);
    j->snapped = 1;
    j->t_snap = ftrt__now();
    e->st.last_snapshot_s = j->t_snap - j->t_start;
    if (e->snap == j) e->snap = NULL;
    j->qnext = NULL;
    if (e->qtail)
        e->qtail->qnext = j;
    else
        e->qhead = j;
    e->qtail = j;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

/* Claims and copies pieces of j until none is left. */
static void snapshot_work(job *j)
{
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->npieces) return;
        copy_piece(j, i);
        if (atomic_fetch_add_explicit(&j->done, 1, memory_order_acq_rel) + 1 == j->npieces)
            finish_snapshot(j);
    }
}

static void *snap_main(void *arg)
{
    struct ftrt__ckpt_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->stop && !(e->snap && atomic_load(&e->snap->next) < e->snap->npieces))
            pthread_cond_wait(&e->cond, &e->lock);
        if (e->stop) break;
        job *j = e->snap;
        j->refs++;
        pthread_mutex_unlock(&e->lock);
        snapshot_work(j);
        pthread_mutex_lock(&e->lock);
        job_put(j);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- persist ----------------------------------------------------------------------------- */

/* Registers the current slots with the ring (persist thread; slots are stable while a job is
 * queued). */
static void register_slots(struct ftrt__ckpt_engine *e)
{
    struct iovec iov[MAX_SLOTS * 64];
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
    if (e->wring.have_ring) ftrt__wring_register(&e->wring, iov, n);
    e->reg_gen = gen;
}

static void send_shard_done(struct ftrt__ckpt_engine *e, int64_t step, int epoch, int result)
{
    ftrt__ckpt_msg m = {.step = step, .epoch = epoch, .result = result};
    int rc = ftrt__host_send(&e->host, FTRT__MSG_SHARD_DONE, &m, sizeof m);
    if (rc) ftrt_log_warn("checkpoint of step %lld: cannot report to the coordinator: %s",
                          (long long)step, ftrt_strerror(rc));
}

/* Test knob o.hold_first: the first persist waits (bounded) until that many more
 * checkpoints were requested, or the job moved on (stop, abandon, epoch change). */
static void hold_first_persist(struct ftrt__ckpt_engine *e, job *j)
{
    pthread_mutex_lock(&e->lock);
    if (e->o.hold_first > 0 && e->st.persisted + e->st.failed == 0) {
        const int64_t want = 1 + (int64_t)e->o.hold_first;
        double deadline = ftrt__now() + 30.0;
        while (!e->stop && !job_stale(j) && e->st.started + e->st.skipped < want &&
               ftrt__now() < deadline)
            eng_wait(e, 10);
    }
    pthread_mutex_unlock(&e->lock);
}

static void persist_one(struct ftrt__ckpt_engine *e, job *j)
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
    if (!rc && job_stale(j)) rc = FTRT_ERECOVER;
    if (!rc)
        rc = ftrt__image_write(&e->wring, eo.dir, j->step, j->rank,
                               e->slots[j->slot].mem, j->bytes, &o, &ws);
    if (rc == 0 && job_stale(j)) rc = FTRT_ERECOVER; /* published, but nobody will commit it */
    if (rc && rc != FTRT_ERECOVER)
        ftrt_log_warn("checkpoint of step %lld: this rank's shard failed: %s; the previous "
                      "committed checkpoint stays",
                      (long long)j->step, ftrt_strerror(rc));
    int64_t step = j->step;
    int epoch = j->epoch;
    /* Bookkeeping first, so that whoever sees the COMMIT also sees these statistics. */
    pthread_mutex_lock(&e->lock);
    rec *r = &e->recs[j->rec];
    if (r->step == j->step && r->epoch == j->epoch && r->state == REC_ACTIVE) {
        r->local = rc;
        r->state = rc == FTRT_ERECOVER ? REC_DECIDED : REC_PERSISTED;
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
    job_put(j);
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    if (rc != FTRT_ERECOVER) send_shard_done(e, step, epoch, rc);
}

static void *persist_main(void *arg)
{
    struct ftrt__ckpt_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    unsigned qd = (unsigned)e->o.qd;
    pthread_mutex_unlock(&e->lock);
    ftrt__wring_init(&e->wring, qd);
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->stop && !e->qhead) pthread_cond_wait(&e->cond, &e->lock);
        if (!e->qhead) break; /* stopping and nothing queued */
        job *j = e->qhead;
        e->qhead = j->qnext;
        if (!e->qhead) e->qtail = NULL;
        e->persisting = j;
        if (e->stop) atomic_store(&j->abandon, 1);
        pthread_mutex_unlock(&e->lock);
        persist_one(e, j);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    ftrt__wring_exit(&e->wring);
    return NULL;
}

static int start_threads(struct ftrt__ckpt_engine *e)
{
    if (e->threads) return 0;
    int rc = pthread_create(&e->persist_thr, NULL, persist_main, e);
    if (rc) return -rc;
    rc = pthread_create(&e->snap_thr, NULL, snap_main, e);
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
        for (job *j = e->qhead; j; j = j->qnext) atomic_store(&j->abandon, 1);
        if (e->persisting) atomic_store(&e->persisting->abandon, 1);
        if (e->snap) atomic_store(&e->snap->abandon, 1);
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);
        /* A snapshot in progress still completes (abandoned pieces are not copied). */
        pthread_mutex_lock(&e->lock);
        job *s = e->snap;
        if (s) s->refs++;
        pthread_mutex_unlock(&e->lock);
        if (s) {
            snapshot_work(s);
            pthread_mutex_lock(&e->lock);
            while (!s->snapped) eng_wait(e, 10);
            job_put(s);
            pthread_mutex_unlock(&e->lock);
        }
        pthread_join(e->snap_thr, NULL);
        pthread_join(e->persist_thr, NULL);
    }
    for (int i = 0; i < MAX_SLOTS; i++) slot_unmap(&e->slots[i]);
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
    unsigned n = e->nrec < NREC ? e->nrec : NREC;
    for (unsigned k = 1; k <= n; k++) {
        rec *r = &e->recs[(e->nrec - k) % NREC];
        if (r->step != step || r->epoch != epoch || r->state == REC_DECIDED) continue;
        r->commit = result;
        r->state = REC_DECIDED;
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
    job *j = e->snap;
    if (!j) {
        pthread_mutex_unlock(&e->lock);
        return;
    }
    j->refs++;
    pthread_mutex_unlock(&e->lock);
    snapshot_work(j);
    pthread_mutex_lock(&e->lock);
    while (!j->snapped) pthread_cond_wait(&e->cond, &e->lock);
    job_put(j);
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
    for (job *j = e->qhead; j; j = j->qnext)
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
    unsigned n = e->nrec < NREC ? e->nrec : NREC;
    for (unsigned k = 1; k <= n; k++) {
        const rec *r = &e->recs[(e->nrec - k) % NREC];
        if (r->step == step && r->epoch == epoch && r->state != REC_DECIDED) return 1;
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

/* Builds the job's layout and pieces from the registry. Returns 0 or -errno/FTRT_E*. */
static int job_build(const ftrt__region *regs, int n, job *j)
{
    ftrt__region *kr = calloc(n > 0 ? (size_t)n : 1, sizeof *kr);
    j->ents = calloc(n > 0 ? (size_t)n : 1, sizeof *j->ents);
    j->src = calloc(n > 0 ? (size_t)n : 1, sizeof *j->src);
    j->dev = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!kr || !j->ents || !j->src || !j->dev) {
        free(kr);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        kr[i] = regs[i];
        kr[i].flags = kind_of(regs[i].flags);
        j->src[i] = regs[i].ptr;
        j->dev[i] = (regs[i].flags & FTRT_REGION_DEVICE) != 0;
    }
    int rc = ftrt__regions_check(kr, n);
    j->tb = FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * (uint32_t)n;
    if (rc == 0) {
        j->bytes = ftrt__shard_layout(kr, n, j->rank, j->nranks, j->ents, j->tb);
        if (j->bytes == 0) rc = -EFBIG;
    }
    free(kr);
    if (rc) return rc;
    j->nregs = n;
    size_t np = 0;
    for (int i = 0; i < n; i++) np += (size_t)((j->ents[i].slice_bytes + PIECE_BYTES - 1) / PIECE_BYTES);
    j->pieces = calloc(np ? np : 1, sizeof *j->pieces);
    if (!j->pieces) return -ENOMEM;
    for (int i = 0; i < n; i++)
        for (uint64_t off = 0; off < j->ents[i].slice_bytes; off += PIECE_BYTES) {
            uint64_t len = j->ents[i].slice_bytes - off;
            j->pieces[j->npieces++] = (piece){.reg = i, .off = off,
                                              .len = len < PIECE_BYTES ? len : PIECE_BYTES};
        }
    return 0;
}

/* Streaming mode: the whole checkpoint, synchronously, with bounded buffers. */
static int checkpoint_streaming(struct ftrt__ckpt_engine *e, int64_t step,
                                const ftrt__region *regs, int n, int rank, int nranks)
{
    int epoch = e->watch->epoch;
    ftrt__region *kr = calloc(n > 0 ? (size_t)n : 1, sizeof *kr);
    if (!kr) return -ENOMEM;
    for (int i = 0; i < n; i++) {
        kr[i] = regs[i];
        kr[i].flags = kind_of(regs[i].flags);
    }
    pthread_mutex_lock(&e->lock);
    rec *r = rec_new(e, step, epoch);
    e->st.started++;
    pthread_mutex_unlock(&e->lock);
    double t0 = ftrt__now();
    int wr = ftrt__shard_write(e->o.dir, step, rank, nranks, kr, n);
    free(kr);
    send_shard_done(e, step, epoch, wr);
    pthread_mutex_lock(&e->lock);
    r->local = wr;
    r->state = REC_PERSISTED;
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

int ftrt__ckpt_start(struct ftrt__ckpt_engine *e, int64_t step, const ftrt__region *regs,
                     int nregs, int rank, int nranks)
{
    int epoch = e->watch->epoch;
    ftrt__ckpt_finish_snapshot(e); /* one snapshot at a time (also when interrupted) */
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
    job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->eng = e;
    j->step = step;
    j->epoch = epoch;
    j->rank = rank;
    j->nranks = nranks;
    j->t_start = ftrt__now();
    rc = job_build(regs, nregs, j);
    if (rc == 0) rc = staging_fit(e, (size_t)j->bytes);
    if (rc == 0 && e->streaming) {
        job_free(j);
        return checkpoint_streaming(e, step, regs, nregs, rank, nranks);
    }
    if (rc == 0) rc = start_threads(e);
    if (rc) {
        job_free(j);
        if (rc != FTRT_EINVAL) ftrt_log_warn("ftrt_checkpoint of step %lld: %s", (long long)step,
                                             ftrt_strerror(rc));
        return rc;
    }
    pthread_mutex_lock(&e->lock);
    for (;;) {
        j->slot = -1;
        for (int s = 0; s < e->nslots && j->slot < 0; s++)
            if (!e->slots[s].busy) j->slot = s;
        if (j->slot >= 0 && !e->resizing) break;
        if (e->o.policy == FTRT_CKPT_SKIP) {
            rec *r = rec_new(e, step, epoch);
            r->local = FTRT_SKIPPED;
            r->state = REC_PERSISTED;
            e->st.skipped++;
            pthread_mutex_unlock(&e->lock);
            job_free(j);
            ftrt_log_info("checkpoint of step %lld skipped: the previous one is still being "
                          "written (FTRT_CKPT_POLICY=skip)",
                          (long long)step);
            send_shard_done(e, step, epoch, FTRT_SKIPPED);
            return FTRT_SKIPPED;
        }
        if ((rc = ftrt__watch_check(e->watch)) != 0) {
            pthread_mutex_unlock(&e->lock);
            job_free(j);
            return rc;
        }
        eng_wait(e, 10);
    }
    e->slots[j->slot].busy = 1;
    rec *r = rec_new(e, step, epoch);
    j->rec = (int)(r - e->recs);
    j->refs = 1; /* the pipeline's; dropped by the persist thread */
    if (j->npieces == 0) {
        e->snap = j;
        pthread_mutex_unlock(&e->lock);
        finish_snapshot(j);
        pthread_mutex_lock(&e->lock);
    } else {
        e->snap = j;
    }
    e->st.started++;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int ftrt__ckpt_prepare(struct ftrt__ckpt_engine *e, const ftrt__region *regs, int nregs,
                       int rank, int nranks)
{
    job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->rank = rank;
    j->nranks = nranks;
    int rc = job_build(regs, nregs, j); /* the layout of a checkpoint taken now */
    if (rc == 0) rc = staging_fit(e, (size_t)j->bytes);
    if (rc == 0 && !e->streaming) rc = start_threads(e);
    job_free(j);
    return rc;
}

int ftrt__ckpt_wait_commit(struct ftrt__ckpt_engine *e, int64_t step, int timeout_ms)
{
    double deadline = timeout_ms < 0 ? 0 : ftrt__now() + timeout_ms / 1000.0;
    int rc;
    pthread_mutex_lock(&e->lock);
    rec *r = rec_find(e, step);
    if (!r) {
        pthread_mutex_unlock(&e->lock);
        return FTRT_EINVAL;
    }
    int64_t want = r->step;
    int epoch = r->epoch;
    for (;;) {
        /* The record may be recycled while we wait: look it up again each time. */
        r = NULL;
        unsigned n = e->nrec < NREC ? e->nrec : NREC;
        for (unsigned k = 1; k <= n && !r; k++) {
            rec *x = &e->recs[(e->nrec - k) % NREC];
            if (x->step == want && x->epoch == epoch && x->state != REC_FREE) r = x;
        }
        if (!r) {
            rc = FTRT_EINVAL;
            break;
        }
        if (r->state == REC_DECIDED) {
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
        eng_wait(e, 10);
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

void ftrt__ckpt_drain(struct ftrt__ckpt_engine *e)
{
    if (!e) return;
    const ftrt__watch *w = e->watch;
    ftrt__ckpt_finish_snapshot(e);
    double t0 = ftrt__now();
    pthread_mutex_lock(&e->lock);
    /* Every persist finishes (an abandoned one stops at its next request). */
    while (e->qhead || e->persisting) {
        if (atomic_load(&e->watch->fatal)) {
            for (job *j = e->qhead; j; j = j->qnext) atomic_store(&j->abandon, 1);
            if (e->persisting) atomic_store(&e->persisting->abandon, 1);
        }
        eng_wait(e, 10);
    }
    /* Then the commits of this epoch's durable shards, for a bounded time. */
    for (;;) {
        int open = 0;
        unsigned n = e->nrec < NREC ? e->nrec : NREC;
        for (unsigned k = 1; k <= n; k++) {
            const rec *r = &e->recs[(e->nrec - k) % NREC];
            if (r->state == REC_PERSISTED && r->epoch == w->epoch) open++;
        }
        if (!open || ftrt__watch_check(w) || ftrt__now() - t0 > DRAIN_COMMIT_S) {
            if (open && !ftrt__watch_check(w))
                ftrt_log_warn("finalize: %d checkpoint(s) still uncommitted after %.0f s; "
                              "leaving them", open, DRAIN_COMMIT_S);
            break;
        }
        eng_wait(e, 10);
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

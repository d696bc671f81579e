/*
 * engine_internal.h - what the four files of the checkpoint engine share (private to
 * engine.c, stage.c, persist.c; nothing outside checkpoint/ includes it): the engine's state,
 * a checkpoint in flight (job) and its snapshot pieces, the records of recent checkpoints,
 * the staging slots, and the functions each file offers the others. The object files depend
 * one way (engine.c on stage.c and persist.c; tools/check-layers checks it), so the small
 * helpers all three use are inline here.
 *
 * Locking (engine.c says it in full): eng->lock guards every field not marked otherwise;
 * pieces are claimed and completed with atomics; eng->lock is never held across I/O, a copy or
 * an allocation, and never while taking the agent's cp.lock.
 */
#ifndef FTRT_CKPT_ENGINE_INTERNAL_H
#define FTRT_CKPT_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "base/ports.h"
#include "checkpoint/engine.h"
#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "checkpoint/region.h"
#include "ftrt.h"

#define FTRT__CKPT_MAX_SLOTS 2 /* staging slots: one persisting while the next is snapshotted */
#define FTRT__CKPT_NREC 64     /* recent checkpoints remembered for wait_commit */

/* A snapshot work unit: at most 8 MiB of one region's slice. */
typedef struct ftrt__ckpt_piece {
    int reg;      /* region index in the job */
    uint64_t off; /* offset in the region's slice */
    uint64_t len;
    uint32_t crc;
} ftrt__ckpt_piece;

/* A checkpoint in flight: snapshot, then persist. */
typedef struct ftrt__ckpt_job {
    struct ftrt__ckpt_engine *eng;
    int64_t step;
    int epoch, rank, nranks;
    int slot;
    uint64_t bytes;       /* file image size */
    uint32_t tb;          /* header + table bytes */
    int nregs;
    ftrt__shard_ent *ents;
    const unsigned char **src; /* region base pointers */
    unsigned char *dev;        /* per region: device memory (FTRT__LOC_DEVICE) */
    ftrt__ckpt_piece *pieces;
    size_t npieces;
    _Atomic size_t next, done;
    _Atomic int abandon;
    _Atomic int snap_err;      /* first device-copy error */
    int snapped;               /* guarded by eng->lock */
    int refs;                  /* guarded by eng->lock */
    int rec;                   /* index in eng->recs */
    double t_start, t_snap;
    struct ftrt__ckpt_job *qnext;
} ftrt__ckpt_job;

enum { FTRT__REC_FREE = 0, FTRT__REC_ACTIVE, FTRT__REC_PERSISTED, FTRT__REC_DECIDED };

/* What this rank knows of a recent checkpoint. */
typedef struct ftrt__ckpt_rec {
    int64_t step;
    int epoch;
    int state;
    int local;  /* this rank's result: 0, FTRT_SKIPPED or an error */
    int commit; /* the coordinator's decision once DECIDED */
} ftrt__ckpt_rec;

/* A staging buffer: holds one shard's exact file image. */
typedef struct ftrt__ckpt_slot {
    unsigned char *mem;
    size_t cap;
    int busy;
} ftrt__ckpt_slot;

struct ftrt__ckpt_engine {
    ftrt__ckpt_opts o;   /* settings, copied at creation */
    ftrt__watch *watch;  /* the runtime's epoch watch (not owned) */
    ftrt__host host;     /* SHARD_DONE goes to the coordinator through host.send */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t snap_thr, persist_thr;
    int threads;   /* 1 once both threads run */
    int stop;
    ftrt__ckpt_slot slots[FTRT__CKPT_MAX_SLOTS];
    int nslots;
    size_t slot_cap;
    int resizing;
    int streaming;         /* staging cannot hold one shard: synchronous writes */
    uint64_t gen;          /* +1 per slot (re)allocation; persist thread re-registers */
    ftrt__ckpt_job *snap;  /* the job being snapshotted, or NULL */
    ftrt__ckpt_job *qhead, *qtail; /* persist queue */
    ftrt__ckpt_job *persisting;
    ftrt__ckpt_rec recs[FTRT__CKPT_NREC];
    unsigned nrec;         /* records ever made; recs[nrec % NREC] is the next */
    ftrt_ckpt_stats st;
    /* persist thread only */
    ftrt__io io;           /* its ring, with the slots registered as fixed buffers */
    uint64_t reg_gen;
};

/* ---- jobs and records (inline: every file of the engine uses them) ----------------- */

/* Epoch changed or job over since the job began (read by engine threads: atomics only). */
static inline int ftrt__ckpt_job_stale(ftrt__ckpt_job *j)
{
    return atomic_load(&j->abandon) || ftrt__watch_stale(j->eng->watch, j->epoch);
}

static inline void ftrt__ckpt_job_free(ftrt__ckpt_job *j)
{
    if (!j) return;
    free(j->ents);
    free(j->src);
    free(j->dev);
    free(j->pieces);
    free(j);
}

/* Drops a reference; eng->lock held. */
static inline void ftrt__ckpt_job_put(ftrt__ckpt_job *j)
{
    if (--j->refs == 0) ftrt__ckpt_job_free(j);
}

/* A new record of (step, epoch), ACTIVE, in the ring of recent ones; eng->lock held. */
static inline ftrt__ckpt_rec *ftrt__ckpt_rec_new(struct ftrt__ckpt_engine *e, int64_t step,
                                                 int epoch)
{
    int idx = (int)(e->nrec++ % FTRT__CKPT_NREC);
    ftrt__ckpt_rec *r = &e->recs[idx];
    *r = (ftrt__ckpt_rec){.step = step, .epoch = epoch, .state = FTRT__REC_ACTIVE};
    return r;
}

/* Waits on the engine's condition for at most ms milliseconds; eng->lock held. */
static inline void ftrt__ckpt_wait(struct ftrt__ckpt_engine *e, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&e->cond, &e->lock, &ts);
}

/* ---- stage.c: staging buffers and snapshots ---------------------------------------------- */

/* Makes staging fit a shard of `need` bytes: reallocates (after every slot went idle) when the
 * slots are too small. Sets e->streaming when even one slot does not fit the budget. Called by
 * the application thread without eng->lock. Returns 0 or -ENOMEM. */
int ftrt__ckpt_staging_fit(struct ftrt__ckpt_engine *e, size_t need);
/* Unmaps every slot (the engine is stopped). */
void ftrt__ckpt_staging_free(struct ftrt__ckpt_engine *e);
/* Builds j's layout and pieces from regs[0..n) (j->rank, j->nranks set). Returns 0 or
 * -errno/FTRT_E*. */
int ftrt__ckpt_job_build(const ftrt__region *regs, int n, ftrt__ckpt_job *j);
/* Claims and copies pieces of j until none is left; whoever completes the last one finishes
 * the snapshot (ftrt__ckpt_snapshot_done). */
void ftrt__ckpt_snapshot_work(ftrt__ckpt_job *j);
/* Completes j's snapshot: header and table into the slot, the job onto the persist queue. */
void ftrt__ckpt_snapshot_done(ftrt__ckpt_job *j);
/* The snapshot thread (arg = the engine). */
void *ftrt__ckpt_snap_main(void *arg);

/* ---- persist.c: the persist thread ------------------------------------------------------- */

/* The persist thread (arg = the engine). */
void *ftrt__ckpt_persist_main(void *arg);
/* Sends SHARD_DONE {step, epoch, result} to the coordinator (logged when it cannot). */
void ftrt__ckpt_send_done(struct ftrt__ckpt_engine *e, int64_t step, int epoch, int result);
/* Streaming mode (staging cannot hold one shard): the whole checkpoint, synchronously, with
 * bounded buffers, on the application thread. Returns 0 (the outcome comes with the commit)
 * or -ENOMEM. */
int ftrt__ckpt_write_streaming(struct ftrt__ckpt_engine *e, int64_t step,
                               const ftrt__region *regs, int n, int rank, int nranks);

#endif

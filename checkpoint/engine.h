/*
 * engine.h - the asynchronous checkpoint engine (internal to libftrt; checkpoint/ and the
 * runtime that creates it).
 *
 * The runtime creates one engine per trainer and hands it, at creation, its settings, the epoch
 * watch (a checkpoint begun in an epoch is abandoned once the watch says the epoch is over) and
 * the host interface (SHARD_DONE goes to the coordinator through host.send). The coordinator's
 * COMMIT decision comes back through ftrt__ckpt_on_commit, which the runtime registers with
 * its agent as the commit callback (base/ports.h). The engine never sees the runtime's context;
 * the region table it snapshots is passed in by the caller at each checkpoint.
 *
 * Threads: the application thread calls everything but ftrt__ckpt_on_commit (agent thread);
 * the engine runs a snapshot thread and a persist thread of its own. See engine.c (life cycle
 * and API), stage.c (staging and snapshots) and persist.c (the persist thread).
 */
#ifndef FTRT_CKPT_ENGINE_H
#define FTRT_CKPT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/ports.h"
#include "checkpoint/region.h"
#include "ftrt.h"

/* Device regions (FTRT__LOC_DEVICE) are read and written through the active device backend of
 * the location interface (kernels/location.h, ftrt__loc_device()): the snapshot copies them
 * into staging with to_host (CRC32C included), so does the synchronous writer (shard.c) into its
 * bounded buffers, the restore (restore.c) writes them with
 * from_host (CRC32C checked), staging is pinned with pin / unpin when the backend has them.
 * With no backend (the CPU-only libftrt without FTRT_TEST_SIM_DEVICE) device regions are
 * refused with FTRT_ENOTSUP. Backend calls come from the engine's snapshot threads and from the
 * application thread. */

/* The engine's settings (the ftrt_config fields of the same names, validated there). */
typedef struct ftrt__ckpt_opts {
    char dir[1024];      /* checkpoint directory (FTRT_CKPT_DIR) */
    int qd;              /* writes in flight (FTRT_CKPT_QD) */
    int chunk_kb;        /* bytes per write request, KiB (FTRT_CKPT_CHUNK_KB) */
    int direct;          /* O_DIRECT where the file system accepts it (FTRT_CKPT_DIRECT) */
    int staging_mb;      /* staging budget, MiB; 0 = automatic (FTRT_CKPT_STAGING_MB) */
    int policy;          /* FTRT_CKPT_WAIT or FTRT_CKPT_SKIP (FTRT_CKPT_POLICY) */
    int write_delay_ms;  /* test knob: sleep after each completed write request */
    int hold_first;      /* test knob: the first persist waits until this many more
                            checkpoints were requested (started or skipped; 30 s at most), so
                            that staging is full when they come */
} ftrt__ckpt_opts;

struct ftrt__ckpt_engine;

/* Creates an engine (no threads, no staging until the first checkpoint). o is copied; watch
 * must outlive the engine; host is copied. Returns 0 with *out, or -ENOMEM. */
int ftrt__ckpt_engine_new(const ftrt__ckpt_opts *o, ftrt__watch *watch, ftrt__host host,
                          struct ftrt__ckpt_engine **out);
/* Replaces the settings (tests; the runtime's do not change after ftrt_init). Takes effect
 * for work that starts afterwards: the persist thread copies them under the engine's lock at
 * each write. Application thread. */
void ftrt__ckpt_engine_set_opts(struct ftrt__ckpt_engine *e, const ftrt__ckpt_opts *o);
/* Stops the engine's threads (abandoning what is in flight), frees staging and e. Call after
 * the agent thread is stopped (it may call ftrt__ckpt_on_commit). NULL: no-op. */
void ftrt__ckpt_engine_free(struct ftrt__ckpt_engine *e);

/* Starts checkpoint `step` of this rank (logical rank `rank` of `nranks`) of the regions
 * regs[0..nregs) in the watch's current epoch: lays out the shard, takes a staging slot (waits
 * for one, or skips under FTRT_CKPT_POLICY=skip) and returns once the snapshot is under way;
 * the region memory must not change until ftrt__ckpt_finish_snapshot() returns (or the next
 * start). Returns 0, FTRT_SKIPPED (reported to the coordinator), FTRT_EINVAL (step already in
 * flight, bad regions), -EEXIST (step already committed), FTRT_ERECOVER or a fatal code (the
 * watch), -ENOMEM, -EFBIG, -errno. */
int ftrt__ckpt_start(struct ftrt__ckpt_engine *e, int64_t step, const ftrt__region *regs,
                     int nregs, int rank, int nranks);
/* Sizes the staging for a checkpoint of regs now and starts the threads, so that the first
 * checkpoint pays no allocation. Returns 0, -ENOMEM, or the layout's error. */
int ftrt__ckpt_prepare(struct ftrt__ckpt_engine *e, const ftrt__region *regs, int nregs,
                       int rank, int nranks);
/* 1 while a snapshot is running, else 0. NULL: 0. */
int ftrt__ckpt_snapshot_busy(struct ftrt__ckpt_engine *e);
/* Helps the running snapshot to completion; returns once registered memory may be modified.
 * NULL: no-op. */
void ftrt__ckpt_finish_snapshot(struct ftrt__ckpt_engine *e);
/* Adds s seconds of application-thread stall to the statistics (last != 0: also the last
 * checkpoint's stall). */
void ftrt__ckpt_add_stall(struct ftrt__ckpt_engine *e, double s, int last);
/* Sets the last checkpoint's stall (a blocking ftrt_checkpoint: start + snapshot), seconds. */
void ftrt__ckpt_set_last_stall(struct ftrt__ckpt_engine *e, double s);
/* Waits for the coordinator's decision on checkpoint `step` (the newest one when step < 0) of
 * this epoch, at most timeout_ms (< 0: no limit). Returns 0 (committed), the checkpoint's error
 * or FTRT_SKIPPED, FTRT_EINVAL (no such checkpoint), FTRT_ETIMEDOUT, FTRT_ERECOVER or a fatal
 * code. */
int ftrt__ckpt_wait_commit(struct ftrt__ckpt_engine *e, int64_t step, int timeout_ms);
/* Copies min(size, sizeof) bytes of the statistics to out (out->size says how many). NULL e:
 * zeros, last_committed_step -1. */
void ftrt__ckpt_stats(struct ftrt__ckpt_engine *e, ftrt_ckpt_stats *out, size_t size);
/* Records the last restore's figures in the statistics. */
void ftrt__ckpt_note_restore(struct ftrt__ckpt_engine *e, double seconds, uint64_t bytes);
/* The commit callback (base/ports.h ftrt__commit_fn, arg = the engine): the coordinator
 * decided checkpoint (step, epoch). Agent thread, with its lock held; never blocks. */
void ftrt__ckpt_on_commit(void *arg, int64_t step, int epoch, int result);
/* Before state is overwritten by a recovery or a restore: abandons the checkpoints of epochs
 * older than the watch's pending one and lets a running snapshot finish. NULL: no-op. */
void ftrt__ckpt_quiesce(struct ftrt__ckpt_engine *e);
/* ftrt_finalize(): lets the running snapshot and the persists finish (abandoning them when the
 * job is failing) and, with wait_commits, waits at most 30 s for the coordinator's decisions on
 * them (0: a drain's epoch is pending, in which the coordinator decides none before this
 * trainer's BYE; runtime/drain.c). */
void ftrt__ckpt_drain(struct ftrt__ckpt_engine *e, int wait_commits);
/* For the BYE message: seconds the application thread was blocked in checkpoint calls, and
 * checkpoints skipped here. NULL e: zeros. */
void ftrt__ckpt_bye(struct ftrt__ckpt_engine *e, double *stall_s, int64_t *skipped);

#endif

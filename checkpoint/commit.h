/*
 * commit.h - the coordinator's side of a checkpoint directory (commit.c): committing a step
 * (MANIFEST, LATEST, then retention.h's clean-up) and un-committing steps after silent data
 * corruption. The listing of committed steps is steps.h's. Internal to libftrt.
 */
#ifndef FTRT_CKPT_COMMIT_H
#define FTRT_CKPT_COMMIT_H

#include <stdint.h>

/* Coordinator side of the commit: checks that every shard rank-0..nranks-1 of `step` exists
 * and has a valid header for (step, rank, nranks), writes and fsyncs <dir>/step-<step>/MANIFEST,
 * atomically replaces <dir>/LATEST, then deletes committed step directories older than the
 * newest `keep` (never the one LATEST names) and uncommitted step directories older than step.
 * Returns 0, FTRT_ECORRUPT (a shard header is bad), -ENOENT (a shard is missing), -errno. */
int ftrt__ckpt_commit(const char *dir, int64_t step, int nranks, int keep);

/* ftrt__ckpt_commit, and with background != 0 the files of the steps that retention removes
 * are deleted by a background thread (their MANIFEST is unlinked before this returns, so they
 * stop counting at once): the coordinator's loop must not wait for the deletion of large files.
 * Same returns. */
int ftrt__ckpt_commit_ex(const char *dir, int64_t step, int nranks, int keep, int background);

/* Where a commit's time went (seconds), for benchmarks (bench/commit_scale.c). */
typedef struct ftrt__commit_times {
    double check_s;    /* open and check every shard's header */
    double manifest_s; /* build, write and fsync the MANIFEST, fsync the checkpoint directory */
    double latest_s;   /* replace LATEST */
    int threads;       /* threads that checked the headers */
} ftrt__commit_times;
/* (For benchmarks built against older trees: this one has ftrt__ckpt_commit_run.) */
#define FTRT__CKPT_COMMIT_RUN 1

/* ftrt__ckpt_commit_ex, with the shard headers checked by `threads` threads (<= 0: the
 * default, one per 256 shards, at most 16; the calling thread is one of them; fewer when a
 * thread cannot be started) and, when t is not NULL, the time of each part in *t. Every
 * shard is checked as ftrt__ckpt_commit says; the first error found is returned (with several
 * bad shards, which one is reported may differ between runs). Same returns; thread-safe
 * against commits in other directories. */
int ftrt__ckpt_commit_run(const char *dir, int64_t step, int nranks, int keep, int background,
                          int threads, ftrt__commit_times *t);

/* Un-commits every committed step >= from: first points LATEST at the newest committed step
 * below `from` (or removes LATEST when there is none), then unlinks the MANIFEST of each step
 * >= from, so that a crash half-way leaves LATEST naming a step that stays committed. The step
 * directories stay (uncommitted: a later checkpoint of the same step rewrites them, retention
 * removes them). For the coordinator after silent data corruption: checkpoints taken after the
 * last step at which every replica agreed are not trusted. *latest receives the step LATEST
 * names afterwards, or -1. Returns the number of steps un-committed (0 when none, LATEST then
 * untouched), -EINVAL, or -errno (logged). Not thread-safe against a concurrent commit in dir. */
int ftrt__ckpt_uncommit_from(const char *dir, int64_t from, int64_t *latest);

#endif

/*
 * committer.h - the coordinator's commit thread (private to runtime/coordinator/).
 *
 * Committing a checkpoint (ftrt__ckpt_commit_ex: open and check every shard's header, write
 * and fsync the MANIFEST of N shards, replace LATEST) takes time proportional to the number of
 * trainers and to the file system's latency (docs/benchmarks.md "Checkpoint commit at scale":
 * 0.17 s warm and 0.36 s cold at 16,384 shards on the 2-core VM's disk, more on a parallel file
 * system). The coordinator's loop must not stop for it (heartbeats, detection,
 * the PINGs that tell every rank the coordinator is alive), so the commits run on this thread,
 * one at a time in the order they were decided, and the loop takes their results through an
 * eventfd it polls.
 */
#ifndef FTRT_COMMITTER_H
#define FTRT_COMMITTER_H

#include <stdint.h>

struct ftrt__committer;

/* Starts the thread that commits into checkpoint directory dir (copied), keeping `keep`
 * committed checkpoints. Returns 0 and *out, or -errno (thread, eventfd, memory). */
int ftrt__committer_start(struct ftrt__committer **out, const char *dir, int keep);

/* The eventfd that is readable while results are waiting (for the coordinator's epoll). */
int ftrt__committer_fd(const struct ftrt__committer *k);

/* Queues the commit of `step` (nranks shards), decided in `epoch`. Returns 0, or -EAGAIN when
 * 64 commits are already queued (the caller treats the checkpoint as failed). Called by the
 * coordinator's thread only. */
int ftrt__committer_submit(struct ftrt__committer *k, int64_t step, int nranks, int epoch);

/* Takes the oldest finished commit: returns 1 with its step, epoch and result (0 or what
 * ftrt__ckpt_commit_ex returned), 0 when none is finished. Coordinator's thread only. */
int ftrt__committer_take(struct ftrt__committer *k, int64_t *step, int *epoch, int *result);

/* Commits queued or running (not yet taken). Coordinator's thread only. */
int ftrt__committer_busy(const struct ftrt__committer *k);

/* Blocks until no commit is queued or running (their results stay to be taken): before the
 * coordinator touches the checkpoint directory itself (un-commit) and at the end of the job. */
void ftrt__committer_wait_idle(struct ftrt__committer *k);

/* Stops and joins the thread after the queued commits, frees everything. NULL is a no-op. */
void ftrt__committer_stop(struct ftrt__committer *k);

#endif

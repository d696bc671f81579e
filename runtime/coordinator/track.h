/*
 * track.h - the coordinator's table of checkpoints in flight (private to runtime/coordinator/).
 *
 * Each trainer reports SHARD_DONE {step, epoch, result} once its shard of a checkpoint is
 * durable (or failed, or skipped); the coordinator commits a checkpoint once every trainer of
 * the epoch has reported success. Coordinator thread only.
 */
#ifndef FTRT_COORD_TRACK_H
#define FTRT_COORD_TRACK_H

#include <stdint.h>

struct ftrt__ckpt_track;
/* Records SHARD_DONE(step, epoch, result) from logical rank `rank` of n; *tp is created on first
 * use. Entries of epochs older than `epoch` are dropped first (+1 to *abandoned each). When
 * every rank of (step, epoch) has reported, *decided is set to 1, the entry is removed and the
 * decision is returned: 0 (commit it), the first negative result (failed), or FTRT_SKIPPED (a
 * rank skipped it, none failed). Otherwise returns 0 with *decided = 0. A second report from a
 * rank is ignored. Returns FTRT_EINVAL / -ENOMEM (with *decided = 0) on bad input. */
int ftrt__track_report(struct ftrt__ckpt_track **tp, int n, int epoch, int64_t step, int rank,
                       int result, int *decided, int *abandoned);
/* Entries still waiting for reports. */
int ftrt__track_pending(const struct ftrt__ckpt_track *t);
void ftrt__track_free(struct ftrt__ckpt_track *t);

#endif

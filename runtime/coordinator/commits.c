/*
 * commits.c - the coordinator's side of a checkpoint: SHARD_DONE from every trainer goes into
 * the table of checkpoints in flight (track.c); once all are in, the checkpoint is committed on
 * the commit thread (committer.c: shard headers, MANIFEST, LATEST), or failed, or skipped, and
 * every member gets the COMMIT with the result (docs/checkpoint.md).
 */
#include <errno.h>
#include <string.h>

#include "base/log.h"
#include "checkpoint/commit.h"
#include "runtime/coordinator/committer.h"
#include "runtime/coordinator/coord.h"

/* The decision on the checkpoint of `step` (taken in `epoch`) is known: result 0 (committed),
 * FTRT_SKIPPED or an error. The counters and the last committed step follow it, and every
 * member gets the COMMIT. */
static void commit_done(ftrt__coord *c, int64_t step, int epoch, int result)
{
    if (result < 0) {
        c->nckpt_failed++;
        ftrt_log_warn("checkpoint of step %lld failed: %s; step %lld stays the last committed",
                      (long long)step, ftrt_strerror(result), (long long)c->last_committed);
    } else if (result == 0) {
        c->ncommitted++;
        if (step > c->last_committed) c->last_committed = step;
        c->last_commit_wall = ftrt__wallclock();
        if (c->ncommitted == 1) c->first_commit_wall = c->last_commit_wall;
        c->status_dirty |= 1;
    }
    c->last_commit = (ftrt__ckpt_msg){.step = step, .epoch = epoch, .result = result};
    ftrt__standby_sync(c); /* the standby counts it before the members learn of it */
    ftrt__coord_multicast(c, c->members, c->N, FTRT__MSG_COMMIT, &c->last_commit,
                          sizeof c->last_commit);
}

void ftrt__commits_take(ftrt__coord *c)
{
    int64_t step;
    int epoch, result;
    while (c->committer && ftrt__committer_take(c->committer, &step, &epoch, &result))
        commit_done(c, step, epoch, result);
}

/* (Before the coordinator touches the checkpoint directory itself, and at the end of the
 * job.) */
void ftrt__commits_drain(ftrt__coord *c)
{
    if (!c->committer) return;
    ftrt__committer_wait_idle(c->committer);
    ftrt__commits_take(c);
}

/* A checkpoint that may be committed now (the standby, if any, holds a state that knows of it):
 * on the commit thread, or here when it could not be queued. A coordinator that a standby
 * took over from commits nothing (the term file says so). */
static void commit_go(ftrt__coord *c, int64_t step, int epoch)
{
    int result = 0;
    if (epoch != c->epoch) { /* the epoch changed while it waited: abandoned */
        c->nckpt_abandoned++;
        return;
    }
    if (ftrt__standby_deposed(c)) return;
    if (c->committer) {
        if (ftrt__committer_submit(c->committer, step, c->N, c->epoch) == 0) {
            c->commit_submitted = step;
            return; /* commit_done() when the commit thread is through */
        }
        result = -EAGAIN; /* 64 commits queued: the file system cannot keep up */
    }
    if (!result) /* old steps' files are deleted in the background */
        result = ftrt__ckpt_commit_ex(c->a->cfg->ckpt_dir, step, c->N, c->a->cfg->ckpt_keep, 1);
    commit_done(c, step, c->epoch, result);
}

void ftrt__commits_release(ftrt__coord *c, int all)
{
    int k = 0;
    while (k < c->nheld && (all || ftrt__standby_acked(c, c->held[k].seq))) k++;
    int n = k;
    for (int i = 0; i < n; i++) commit_go(c, c->held[i].step, c->held[i].epoch);
    memmove(c->held, c->held + n, (size_t)(c->nheld - n) * sizeof c->held[0]);
    c->nheld -= n;
}

/* A decided checkpoint that every trainer wrote: committed (commit_go) once the standby
 * acknowledged a SYNC that holds it in flight, at once without a standby; never moving LATEST
 * backwards within a run. */
static void commit_start(ftrt__coord *c, int64_t step, int result)
{
    if (result == FTRT_SKIPPED) {
        c->nckpt_skipped++;
        ftrt_log_info("checkpoint of step %lld skipped by a trainer (FTRT_CKPT_POLICY=skip)",
                      (long long)step);
    } else if (!result && (step < c->last_committed || step < c->commit_submitted)) {
        result = FTRT_ESTATE;
        ftrt_log_warn("checkpoint of step %lld is older than the committed step %lld: not "
                      "committed", (long long)step,
                      (long long)(c->commit_submitted > c->last_committed ? c->commit_submitted
                                                                         : c->last_committed));
    }
    if (result) {
        commit_done(c, step, c->epoch, result);
        return;
    }
    c->commit_submitted = step > c->commit_submitted ? step : c->commit_submitted;
    uint64_t seq = c->nheld < 64 ? ftrt__standby_sync(c) : 0;
    if (seq == 0 && c->nheld == 0 && !c->claim_pending) {
        commit_go(c, step, c->epoch);
        return;
    }
    if (c->nheld == 64) ftrt__commits_release(c, 1); /* (64 waiting: the standby is late) */
    c->held[c->nheld].step = step;
    c->held[c->nheld].epoch = c->epoch;
    c->held[c->nheld++].seq = seq;
    ftrt__commits_release(c, 0); /* (in order: after those still waiting) */
}

void ftrt__commit_shard_done(ftrt__coord *c, int w, const ftrt__ckpt_msg *cm)
{
    int l = c->r[w].logical, decided = 0, dropped = 0;
    if (l < 0 || l >= c->N || c->members[l] != w) return;
    if (cm->step <= c->last_committed) return; /* sent again after a takeover: committed */
    int result = ftrt__track_report(&c->ckpt_track, c->N, c->epoch, cm->step, l, cm->result,
                                    &decided, &dropped);
    c->nckpt_abandoned += dropped;
    if (decided) commit_start(c, cm->step, result);
}

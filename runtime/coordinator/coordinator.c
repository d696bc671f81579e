/*
 * coordinator.c - world rank 0: membership, failure detection, recovery plans, checkpoint
 * commit and the end-of-job report.
 *
 * One thread, one epoll loop over every rank's TCP connection (no MPI inside the loop). A rank
 * is declared failed on connection EOF/reset (the process died) or when nothing arrived from it
 * for heartbeat_timeout_ms (frozen process or lost host); a failed rank that may still be alive
 * on this host is fenced with SIGKILL so it can never rejoin a communicator or a checkpoint.
 *
 * At scale (README "The coordinator at scale", bench/coord_load.c): the work per message is
 * O(1) (epoll hands over only the ready connections; the silence watch is a list ordered by
 * the time each rank was last heard, so only its head is looked at; REPORTs, RESUMEDs and
 * fingerprints are counted, and the O(N) check runs once, when the last one arrives); the
 * PINGs of a heartbeat period are spread over it in batches (at most every 2 ms), and long
 * fan-outs (FAILURE, PLAN, COMMIT to every member) keep them going; checkpoint commits run on
 * a thread of their own (committer.c); periodic O(N) work (the progress detector, stragglers)
 * runs at most 10 times a second, and a status file that costs more than 2.5 ms to write is
 * rewritten at most once per 20 times its cost.
 * A trainer failure starts an epoch change (docs/ARCHITECTURE.md "Recovery"): FAILURE(E+1) to the
 * survivors, their REPORTs, a PLAN with the resume step and the state source, RESUMED from every
 * member; failures before the PLAN is sent are folded into a newer epoch, later ones abort.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "checkpoint/commit.h"
#include "checkpoint/retention.h"
#include "checkpoint/steps.h"
#include "runtime/coordinator/coord.h"
#include "runtime/coordinator/committer.h"
#include "base/log.h"

/* epoll keys: kind << 32 | index */
enum { KEY_LISTEN = 1, KEY_PENDING = 2, KEY_RANK = 3, KEY_COMMIT = 4 };
#define KEY(kind, i) (((uint64_t)(kind) << 32) | (uint32_t)(i))

static void ping_due(ftrt__coord *c, double now);

/* Called every message of a fan-out to every rank (k: its index): every 256 messages, the
 * PINGs that fell due go out, so that a fan-out of seconds (a PLAN to 16,384 members) never
 * leaves a rank without a message for its coordinator-silence timeout. */
static void fanout_pump(ftrt__coord *c, int k)
{
    if ((k & 255) == 255) ping_due(c, ftrt__now());
}

/* ---- the silence watch: connected ranks ordered by last_heard, oldest first -------------- */

static void watch_remove(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    if (!r->watched) return;
    if (r->watch_prev) c->r[r->watch_prev].watch_next = r->watch_next;
    else c->watch_head = r->watch_next;
    if (r->watch_next) c->r[r->watch_next].watch_prev = r->watch_prev;
    else c->watch_tail = r->watch_prev;
    r->watch_prev = r->watch_next = 0;
    r->watched = 0;
}

/* World rank w was just heard (last_heard = now, the newest): it moves to the tail. O(1). */
static void watch_touch(ftrt__coord *c, int w)
{
    watch_remove(c, w);
    ftrt__crank *r = &c->r[w];
    r->watch_prev = c->watch_tail;
    r->watch_next = 0;
    if (c->watch_tail) c->r[c->watch_tail].watch_next = w;
    else c->watch_head = w;
    c->watch_tail = w;
    r->watched = 1;
}


static void send_to(ftrt__coord *c, int w, uint32_t type, const void *p, uint32_t len)
{
    if (c->r[w].fd < 0) return;
    int rc = ftrt__msg_send(c->r[w].fd, type, p, len);
    if (rc) ftrt_log_debug("send to world rank %d failed: %s", w, ftrt_strerror(rc));
}

static void drop(ftrt__coord *c, int w)
{
    watch_remove(c, w);
    if (c->r[w].fd >= 0) close(c->r[w].fd); /* (which also takes it out of the epoll set) */
    c->r[w].fd = -1;
    ftrt__rx_free(&c->r[w].rx);
}

/* Ranks declared failed so far (fail() counts them). */
static int ranks_lost(const ftrt__coord *c) { return c->nfailed; }

static int live_spares(const ftrt__coord *c)
{
    int n = 0;
    for (int w = 1; w < c->W; w++) n += c->r[w].role == FTRT__ROLE_SPARE;
    return n;
}

/* Ends the job with `code`: members get ABORT, spares SHUTDOWN with the code (< 0: the job
 * failed); ranks still connected at the deadline are fenced. No process of an aborted job calls
 * MPI_Finalize (a member that gets ABORT may be stuck in a collective): Open MPI 4.1's
 * MPI_Finalize can hang in its PMIx fence when some processes of the world call it and others
 * exit without it, so the spares and the coordinator skip it too (a->aborted). */
static void job_abort(ftrt__coord *c, int code, const char *why)
{
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) return;
    ftrt_log_error("aborting the job: %s (%s)", why, ftrt_err_name(code));
    c->result = code;
    c->aborted = 1;
    c->phase = PH_ABORTING;
    c->abort_deadline = ftrt__now() + 2.0 + 3.0 * c->a->cfg->heartbeat_timeout_ms / 1000.0;
    ftrt__epoch_msg m = {.epoch = c->epoch, .value = code};
    for (int w = 1; w < c->W; w++) {
        int spare = c->r[w].role == FTRT__ROLE_SPARE;
        send_to(c, w, spare ? FTRT__MSG_SHUTDOWN : FTRT__MSG_ABORT, &m, sizeof m);
        fanout_pump(c, w);
    }
    c->status_dirty |= 2; /* membership: write now */
}

static void fence(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    if (r->pid > 0 && !strcmp(r->host, c->a->host)) {
        ftrt_log_warn("fencing world rank %d (pid %d) with SIGKILL", w, r->pid);
        kill(r->pid, SIGKILL);
    }
}

static ftrt__incident *add_incident(ftrt__coord *c, int w, int kind)
{
    ftrt__incident *n = realloc(c->inc, (size_t)(c->ninc + 1) * sizeof *n);
    if (!n) return NULL;
    c->inc = n;
    ftrt__incident *i = &c->inc[c->ninc++];
    memset(i, 0, sizeof *i);
    i->world_rank = w; /* -1: silent data corruption with no rank named */
    i->logical_rank = w > 0 ? c->r[w].logical : -1;
    i->pid = w > 0 ? c->r[w].pid : -1;
    i->kind = kind;
    i->t_detect = ftrt__now();
    i->t_detect_wall = ftrt__wallclock();
    i->t_last_heard = w > 0 ? c->r[w].last_heard : i->t_detect;
    i->spare_world_rank = -1;
    i->resume_step = -1;
    i->sdc_step = i->sdc_agreed_step = i->sdc_ckpt = -1;
    if (kind == FK_SDC) { /* what is known of the corruption: sdc_describe() filled sdc_cur */
        i->sdc_step = c->sdc_cur.sdc_step;
        i->sdc_agreed_step = c->sdc_cur.sdc_agreed_step;
        i->sdc_ckpt = c->sdc_cur.sdc_ckpt;
        i->sdc_majority = c->sdc_cur.sdc_majority;
        i->sdc_uncommitted = c->sdc_cur.sdc_uncommitted;
        i->t_last_heard = w > 0 && c->r[w].sdc_agreed_t > 0 ? c->r[w].sdc_agreed_t
                                                             : c->sdc_cur.t_last_heard;
    }
    /* The best known failure time: the injection time when a fault injector logged one, the
     * detection itself for a connection loss (the kernel closes a dead process's sockets at
     * once), else the last message heard (refined for stalls by the caller); for silent data
     * corruption, the arrival of the rank's last fingerprint that agreed. */
    double inj = ftrt__incident_injected_at(c, i);
    i->t_fail_wall = inj > 0 ? inj
                     : kind == FK_CONNECTION_LOST ? i->t_detect_wall
                                                  : i->t_detect_wall - (i->t_detect - i->t_last_heard);
    /* The slot's ledger counts the rank as down from its failure; a corrupted rank computed
     * (and was paid for) until it was fenced. */
    if (w > 0) c->r[w].t_fail_wall = kind == FK_SDC ? i->t_detect_wall : i->t_fail_wall;
    int64_t most = 0;
    for (int x = 1; x < c->W; x++)
        if (c->r[x].steps_done > most) most = c->r[x].steps_done;
    i->steps_at_failure = most;
    return i;
}

static void check_reports(ftrt__coord *c);
static void sdc_try_all(ftrt__coord *c);
static int job_finishing(const ftrt__coord *c);

/* 1 when a rank of world rank >= 1 on host h has failed in this job. */
static int host_has_failed(const ftrt__coord *c, const char *h)
{
    for (int x = 1; x < c->W; x++)
        if (c->r[x].role == FTRT__ROLE_FAILED && !strcmp(c->r[x].host, h)) return 1;
    return 0;
}

/* The hot spare to promote for a rank that failed on host h: one on another host where the
 * choice exists (a host that lost a rank may be losing the rest), and among those one on a
 * host that lost none; ties go to the lowest world rank. -1 when no spare is left. */
static int pick_spare(const ftrt__coord *c, const char *h)
{
    int best = -1, best_score = -1;
    for (int x = 1; x < c->W; x++) {
        if (c->r[x].role != FTRT__ROLE_SPARE) continue;
        int score = (strcmp(c->r[x].host, h) != 0) * 2 + !host_has_failed(c, c->r[x].host);
        if (score > best_score) {
            best = x;
            best_score = score;
        }
    }
    return best;
}

/* After world rank w failed: when every rank on its host has now failed (and the host held
 * two or more, so that a process crash is not mistaken for a host), the host is lost: its
 * ranks' incidents are marked so, and the log says it once. */
static void check_host_lost(ftrt__coord *c, int w)
{
    const char *h = c->r[w].host;
    int n = 0;
    for (int x = 0; x < c->W; x++) {
        if (strcmp(c->r[x].host, h) != 0) continue;
        if (c->r[x].role != FTRT__ROLE_FAILED) return; /* the coordinator's host is never lost */
        n++;
    }
    if (n < 2) return;
    int marked = 0;
    for (int i = 0; i < c->ninc; i++)
        if (!strcmp(c->r[c->inc[i].world_rank].host, h) && !c->inc[i].host_lost) {
            c->inc[i].host_lost = 1;
            marked++;
        }
    if (marked) ftrt_log_warn("host %s lost: all %d of its ranks failed", h, n);
}

static void fail(ftrt__coord *c, int w, int kind)
{
    ftrt__crank *r = &c->r[w];
    if (r->role == FTRT__ROLE_FAILED || r->role == FTRT__ROLE_COORD) return;
    int old_role = r->role;
    r->role = FTRT__ROLE_FAILED;
    c->nfailed++;
    c->maybe_done = 1;
    drop(c, w);
    if (kind != FK_CONNECTION_LOST) fence(c, w);
    c->status_dirty |= 2; /* membership: write now */
    if (c->phase == PH_INIT) {
        job_abort(c, FTRT_EABORT, "a rank failed during initialization");
        return;
    }
    if (old_role == FTRT__ROLE_SPARE) {
        ftrt__incident *si = add_incident(c, w, kind);
        if (si) si->was_spare = 1;
        check_host_lost(c, w);
        ftrt_log_warn("hot spare world rank %d failed (%s) and leaves the pool; %d spare(s) left",
                      w, ftrt__failure_kind_name(kind), live_spares(c));
        return;
    }
    ftrt__incident *inc = add_incident(c, w, kind);
    check_host_lost(c, w);
    /* A stalled rank kept sending heartbeats: what is known is when it last made progress. */
    if (inc && kind == FK_PROGRESS_STALL) {
        inc->t_last_heard = r->last_change;
        inc->t_fail_wall = r->t_fail_wall = inc->t_detect_wall - (inc->t_detect - r->last_change);
    }
    ftrt_log_warn("trainer logical rank %d (world rank %d, pid %d) failed: %s", r->logical, w,
                  r->pid, ftrt__failure_kind_name(kind));
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) return;
    for (int l = 0; l < c->N; l++)
        if (c->r[c->members[l]].said_bye) {
            ftrt_log_warn("the job is finishing; no recovery for world rank %d", w);
            return;
        }
    if (c->phase == PH_RESUMING) {
        job_abort(c, FTRT_EABORT, "a member failed while the recovery plan was being applied");
        return;
    }
    int spare = pick_spare(c, r->host);
    if (spare < 0) {
        job_abort(c, FTRT_ENOSPARE, "a trainer failed and no hot spare is left");
        return;
    }
    int l = r->logical;
    c->members[l] = spare;
    c->r[spare].role = FTRT__ROLE_TRAINER;
    c->r[spare].logical = l;
    c->r[spare].promoting = 1;
    c->npromoting++;
    if (inc) inc->spare_world_rank = spare;
    if (c->phase == PH_COLLECT) {
        /* The announced epoch's plan is not out yet: this failure joins it, so that a lost
         * host takes as many spares as it held trainers in one epoch. */
        ftrt_log_warn("epoch %d: hot spare world rank %d (%s) also takes logical rank %d",
                      c->epoch, spare, c->r[spare].host, l);
        check_reports(c);
        return;
    }
    c->epoch++;
    c->nreports = c->nresumed = 0;
    c->phase = PH_COLLECT;
    ftrt_log_warn("epoch %d: hot spare world rank %d (%s) takes logical rank %d", c->epoch, spare,
                  c->r[spare].host, l);
    /* (The trainers learn of silent data corruption at its detection: their ledger's detection
     * wait starts there.) */
    ftrt__failure_msg m = {.epoch = c->epoch,
                           .t_fail_wall = !inc ? ftrt__wallclock()
                                          : kind == FK_SDC ? inc->t_detect_wall : inc->t_fail_wall};
    for (int k = 0; k < c->N; k++) {
        if (!c->r[c->members[k]].promoting) send_to(c, c->members[k], FTRT__MSG_FAILURE, &m, sizeof m);
        fanout_pump(c, k);
    }
}

static void send_plan(ftrt__coord *c)
{
    int64_t resume, ckpt, most = 0, mem_step = -1;
    int source, sharded = 0;
    size_t n = (size_t)(c->N > 0 ? c->N : 1), len = ftrt__plan_size(c->N);
    /* scratch: per logical rank, its REPORT (steps, own image, held image) and survival */
    int64_t *steps = calloc(3 * n, sizeof *steps);
    int64_t *own = steps ? steps + n : NULL, *held = steps ? steps + 2 * n : NULL;
    int *survivor = calloc(n, sizeof *survivor);
    int32_t *held_of = calloc(n, sizeof *held_of);
    ftrt__plan *p = calloc(1, len);
    if (!steps || !survivor || !held_of || !p) {
        job_abort(c, -ENOMEM, "out of memory building the recovery plan");
        goto out;
    }
    p->ntrainers = c->N;
    int32_t *role = ftrt__plan_roles(p), *shard_src = ftrt__plan_shard_src(p);
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        survivor[l] = !r->promoting;
        steps[l] = r->report_steps;
        own[l] = r->own_step;
        held[l] = r->held_step;
        held_of[l] = r->held_of;
        shard_src[l] = -1;
        if (survivor[l]) {
            sharded |= r->has_sharded;
            if (r->report_steps > most) most = r->report_steps;
        }
    }
    int rc = ftrt__plan_compute(steps, survivor, c->N, sharded, c->last_committed, &resume,
                                &source, &ckpt);
    /* Sharded state: from the partner replicas in memory where they cover every replaced
     * rank at a step no older than the committed checkpoint, else from the checkpoint. */
    int miss = FTRT__RMISS_NONE;
    if (sharded && c->sdc_rollback < 0 &&
        ftrt__plan_replica(survivor, own, held, held_of, c->N, c->last_committed, &mem_step,
                           shard_src) == 1) {
        rc = 0;
        resume = mem_step;
        ckpt = -1;
    } else if (sharded) {
        miss = c->sdc_rollback >= 0 ? FTRT__RMISS_SDC_ROLLBACK
                                    : ftrt__plan_replica_miss(survivor, own, held, held_of, c->N,
                                                              c->last_committed);
        ftrt_log_info("epoch %d: partner replicas not used (%s)", c->epoch,
                      ftrt__replica_miss_name(miss));
    }
    if (rc) {
        job_abort(c, rc, rc == FTRT_ENOCKPT ? "sharded state needs a committed checkpoint (or "
                                              "partner replicas in memory) and none exists"
                                            : "no survivor holds the state");
        goto out;
    }
    if (c->sdc_rollback >= 0) { /* silent data corruption: back to verified state (sdc_majority/sdc_split) */
        resume = ckpt = c->sdc_rollback;
        c->sdc_verified_below = c->sdc_rollback + 1; /* what every member reloads is verified */
        c->sdc_rollback = -1;
    }
    for (int i = 0; i < c->ninc; i++)
        if (!c->inc[i].recovered && c->inc[i].resume_step < 0 && !c->inc[i].was_spare) {
            c->inc[i].t_plan_wall = ftrt__wallclock();
            c->inc[i].resume_step = resume;
            int64_t before = c->inc[i].steps_at_failure > most ? c->inc[i].steps_at_failure : most;
            c->inc[i].rework_steps = before > resume ? before - resume : 0;
            c->inc[i].epoch = c->epoch;
            c->inc[i].state_from = ckpt >= 0 ? FTRT__FROM_CHECKPOINT
                                   : mem_step >= 0 ? FTRT__FROM_REPLICA : FTRT__FROM_PEERS;
            c->inc[i].replica_miss = ckpt >= 0 ? miss : FTRT__RMISS_NONE;
        }
    p->resume_step = resume;
    p->ckpt_step = ckpt;
    p->mem_step = mem_step;
    p->rework_until = most > resume ? most : resume;
    p->epoch = c->epoch;
    p->source = source; /* the most advanced survivor: up to date in every kind of plan */
    memcpy(p->members, c->members, (size_t)c->N * sizeof(int32_t));
    for (int l = 0; l < c->N; l++) { /* who receives state: spares, and survivors behind */
        const ftrt__crank *r = &c->r[c->members[l]];
        if (mem_step >= 0) /* every survivor restores its own image of mem_step */
            role[l] = r->promoting ? FTRT__PLAN_NEEDS_STATE : FTRT__PLAN_UP_TO_DATE;
        else
            role[l] = ckpt < 0 && (r->promoting || r->report_steps != resume)
                          ? FTRT__PLAN_NEEDS_STATE
                          : FTRT__PLAN_UP_TO_DATE;
    }
    for (int l = 0; l < c->N; l++) {
        p->logical_rank = l;
        send_to(c, c->members[l], FTRT__MSG_PLAN, p, (uint32_t)len);
        fanout_pump(c, l);
    }
    ftrt_log_info("epoch %d plan: resume at step %lld, state from logical rank %d%s", c->epoch,
                  (long long)resume, source,
                  ckpt >= 0 ? " (checkpoint)" : mem_step >= 0 ? " (partner replicas in memory)" : "");
    c->phase = PH_RESUMING;
    c->status_dirty |= 2; /* membership: write now */
out:
    free(steps);
    free(survivor);
    free(held_of);
    free(p);
}

static void check_reports(ftrt__coord *c)
{
    if (c->phase != PH_COLLECT) return;
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        if (!r->promoting && r->reported_epoch != c->epoch) return;
    }
    send_plan(c);
}

static void check_resumed(ftrt__coord *c)
{
    if (c->phase != PH_RESUMING) return;
    for (int l = 0; l < c->N; l++)
        if (c->r[c->members[l]].resumed_epoch != c->epoch) return;
    double now = ftrt__now();
    for (int i = 0; i < c->ninc; i++)
        if (!c->inc[i].recovered && c->inc[i].resume_step >= 0) {
            c->inc[i].recovered = 1;
            c->inc[i].t_resumed = now;
        }
    c->npromoting = 0;
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        r->promoting = 0;
        r->waits = 0; /* members count collectives from the start of the epoch */
        r->last_change = now;
        r->win_t = 0;
    }
    c->phase = PH_RUNNING;
    c->status_dirty |= 2; /* membership: write now */
    ftrt_log_warn("epoch %d: every member is back in the training loop", c->epoch);
    sdc_try_all(c); /* fingerprints of the new epoch that arrived before the last RESUMED */
}

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
    ftrt__ckpt_msg m = {.step = step, .epoch = epoch, .result = result};
    for (int k = 0; k < c->N; k++) {
        send_to(c, c->members[k], FTRT__MSG_COMMIT, &m, sizeof m);
        fanout_pump(c, k);
    }
}

/* Takes the results of the commits the commit thread finished. */
static void commits_take(ftrt__coord *c)
{
    int64_t step;
    int epoch, result;
    while (c->committer && ftrt__committer_take(c->committer, &step, &epoch, &result))
        commit_done(c, step, epoch, result);
}

/* Waits for the commits in flight and takes their results (before the coordinator touches the
 * checkpoint directory itself, and at the end of the job). */
static void commits_drain(ftrt__coord *c)
{
    if (!c->committer) return;
    ftrt__committer_wait_idle(c->committer);
    commits_take(c);
}

/* SHARD_DONE from world rank w: the checkpoint's table entry (track.c) takes the report; once
 * every trainer reported, the checkpoint is committed (on the commit thread, or here when it
 * could not be started), failed or skipped, and every trainer gets the COMMIT. */
static void try_commit(ftrt__coord *c, int w, const ftrt__ckpt_msg *cm)
{
    int64_t step = cm->step;
    int l = c->r[w].logical, decided = 0, dropped = 0;
    if (l < 0 || l >= c->N || c->members[l] != w) return;
    int result = ftrt__track_report(&c->ckpt_track, c->N, c->epoch, step, l, cm->result,
                                    &decided, &dropped);
    c->nckpt_abandoned += dropped;
    if (!decided) return;
    if (result == FTRT_SKIPPED) {
        c->nckpt_skipped++;
        ftrt_log_info("checkpoint of step %lld skipped by a trainer (FTRT_CKPT_POLICY=skip)",
                      (long long)step);
    } else if (!result && (step < c->last_committed || step < c->commit_submitted)) {
        result = FTRT_ESTATE; /* never move LATEST backwards within a run */
        ftrt_log_warn("checkpoint of step %lld is older than the committed step %lld: not "
                      "committed", (long long)step,
                      (long long)(c->commit_submitted > c->last_committed ? c->commit_submitted
                                                                         : c->last_committed));
    }
    if (!result && c->committer) {
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

/* ---- silent data corruption (FINGERPRINT; docs/detection-and-recovery.md) ---------------- */

/* World rank w's fingerprint of `step` in the current epoch, or NULL. */
static const ftrt__sdc_fp *sdc_find(const ftrt__coord *c, int w, int64_t step)
{
    const ftrt__crank *r = &c->r[w];
    for (int k = 0; k < FTRT__SDC_KEEP; k++)
        if (r->sdc[k].step == step && r->sdc[k].epoch == c->epoch) return &r->sdc[k];
    return NULL;
}

/* Un-commits the checkpoints that cannot be trusted and returns the newest committed step
 * left, which holds verified state, or -1 when none is left; -2 when the un-commit failed
 * (logged). A checkpoint is trusted when its step is below the last step at which every
 * replica's fingerprint agreed (sdc_verified_below): the snapshot of step S is copied after
 * step S's fingerprint was taken, so only a later agreement proves it clean; one taken since
 * may hold the corruption (in the bad rank's slice of a replicated region). */
static int64_t sdc_distrust(ftrt__coord *c)
{
    int64_t latest = -1;
    commits_drain(c); /* no commit may run while checkpoints are un-committed */
    int n = ftrt__ckpt_uncommit_from(c->a->cfg->ckpt_dir, c->sdc_verified_below, &latest);
    if (n < 0) return -2;
    c->sdc_uncommitted = n;
    c->last_committed = latest;
    c->status_dirty |= 1;
    return latest;
}

/* Fills sdc_cur, what add_incident() records of the corruption found at `step`. */
static void sdc_describe(ftrt__coord *c, int64_t step, int64_t ckpt, int majority)
{
    memset(&c->sdc_cur, 0, sizeof c->sdc_cur);
    c->sdc_cur.sdc_step = step;
    c->sdc_cur.sdc_agreed_step = c->sdc_agreed_step;
    c->sdc_cur.sdc_ckpt = ckpt;
    c->sdc_cur.sdc_majority = majority;
    c->sdc_cur.sdc_uncommitted = c->sdc_uncommitted;
    c->sdc_cur.t_last_heard = c->sdc_agreed_t > 0 ? c->sdc_agreed_t : c->t_start;
}

/* A majority of the replicas agreed at `step` and the members with bad[l] = 1 did not: each is
 * declared failed (FK_SDC), fenced and replaced by a spare through fail(). The state every
 * member continues from is the newest verified checkpoint, reloaded by all: the majority's
 * memory is not clean any more, since the corrupted rank's gradients went into the average of
 * every step since the corruption. Only when no verified checkpoint is left does the majority's
 * state in memory go on (the usual state transfer), and the log says that results then differ
 * from a fault-free run. While the job is finishing nothing can be recovered: the corruption is
 * recorded and the job fails with FTRT_ECORRUPT. */
static void sdc_majority(ftrt__coord *c, int64_t step, const unsigned char *bad)
{
    int *wbad = c->s_int, nbad = 0;
    char who[512] = "";
    size_t used = 0;
    for (int l = 0; l < c->N; l++)
        if (bad[l]) {
            wbad[nbad++] = c->members[l];
            if (used < sizeof who)
                used += (size_t)snprintf(who + used, sizeof who - used, "%slogical rank %d "
                                         "(world rank %d)", nbad > 1 ? ", " : "", l, c->members[l]);
        }
    ftrt_log_error("silent data corruption at step %lld: %s disagree%s with the majority of %d "
                   "replicas (last agreement at step %lld)", (long long)step, who,
                   nbad > 1 ? "" : "s", c->N, (long long)c->sdc_agreed_step);
    int finishing = job_finishing(c);
    c->sdc_uncommitted = 0;
    int64_t ck = finishing ? -1 : sdc_distrust(c);
    sdc_describe(c, step, ck < 0 ? -1 : ck, 1);
    if (ck == -2) {
        for (int i = 0; i < nbad; i++) add_incident(c, wbad[i], FK_SDC);
        job_abort(c, FTRT_ECORRUPT, "silent data corruption, and the checkpoints taken since the "
                                    "last agreement cannot be un-committed");
        return;
    }
    if (finishing) {
        for (int i = 0; i < nbad; i++) add_incident(c, wbad[i], FK_SDC);
        c->sdc_unresolved = 1;
        ftrt_log_error("the job is finishing: nothing can be recovered; it ends as failed "
                       "(FTRT_ECORRUPT)");
        return;
    }
    if (ck >= 0)
        ftrt_log_warn("silent data corruption: fencing and replacing %s; every member reloads "
                      "checkpoint step %lld (the newest taken before the last agreement)", who,
                      (long long)ck);
    else
        ftrt_log_warn("silent data corruption: fencing and replacing %s; no verified checkpoint "
                      "is left (FTRT_CKPT_KEEP, checkpoint interval vs FTRT_SDC_EVERY), so the "
                      "majority's state in memory goes on: it took in the corrupted rank's "
                      "gradients, and results will differ from a fault-free run", who);
    c->sdc_rollback = ck;
    for (int i = 0; i < nbad; i++) fail(c, wbad[i], FK_SDC);
}

/* The replicas disagreed at `step` and no value holds a majority (two replicas, a 2-2 split):
 * no rank can be blamed, so none is fenced. Every member rolls back to the newest verified
 * checkpoint in a new epoch without replacement (FAILURE to all, REPORT, PLAN reloading it);
 * with none left the job fails with FTRT_ECORRUPT. The incident names world rank -1. */
static void sdc_split(ftrt__coord *c, int64_t step)
{
    ftrt_log_error("silent data corruption at step %lld: the %d replicas disagree and no "
                   "majority names a bad one (last agreement at step %lld)", (long long)step,
                   c->N, (long long)c->sdc_agreed_step);
    int finishing = job_finishing(c);
    c->sdc_uncommitted = 0;
    int64_t ck = finishing ? -1 : sdc_distrust(c);
    sdc_describe(c, step, ck < 0 ? -1 : ck, 0);
    ftrt__incident *inc = add_incident(c, -1, FK_SDC);
    if (finishing) {
        c->sdc_unresolved = 1;
        ftrt_log_error("the job is finishing: nothing can be recovered; it ends as failed "
                       "(FTRT_ECORRUPT)");
        return;
    }
    if (ck < 0) {
        job_abort(c, FTRT_ECORRUPT, ck == -2 ? "silent data corruption, and the checkpoints "
                                               "taken since the last agreement cannot be "
                                               "un-committed"
                                             : "silent data corruption with no majority, and no "
                                               "verified checkpoint to roll back to");
        return;
    }
    ftrt_log_warn("epoch %d: every member rolls back to checkpoint step %lld (the newest taken "
                  "before the last agreement); no rank is fenced", c->epoch + 1, (long long)ck);
    c->sdc_rollback = ck;
    c->epoch++;
    c->nreports = c->nresumed = 0;
    c->phase = PH_COLLECT;
    c->status_dirty |= 2; /* membership: write now */
    ftrt__failure_msg m = {.epoch = c->epoch, .t_fail_wall = inc ? inc->t_detect_wall
                                                                 : ftrt__wallclock()};
    for (int l = 0; l < c->N; l++) {
        send_to(c, c->members[l], FTRT__MSG_FAILURE, &m, sizeof m);
        fanout_pump(c, l);
    }
}

/* Compares the members' fingerprints of `step` once every member of the epoch sent one (and
 * the job runs; each step once per epoch). */
static void sdc_try(ftrt__coord *c, int64_t step)
{
    if (c->phase != PH_RUNNING || c->N < 2) return;
    if (c->sdc_judged_epoch == c->epoch && step <= c->sdc_judged_step) return;
    uint64_t *fp = c->s_u64;
    unsigned char *bad = c->s_b;
    double first = 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__sdc_fp *f = sdc_find(c, c->members[l], step);
        if (!f) return;
        fp[l] = f->fp;
        if (first == 0 || f->t < first) first = f->t;
    }
    c->sdc_judged_epoch = c->epoch;
    c->sdc_judged_step = step;
    c->sdc_checks++;
    int v = ftrt__sdc_judge(fp, c->N, bad);
    if (v == FTRT__SDC_AGREE) {
        c->sdc_agreed_step = step;
        c->sdc_agreed_t = first;
        if (step > c->sdc_verified_below) c->sdc_verified_below = step;
        for (int l = 0; l < c->N; l++)
            c->r[c->members[l]].sdc_agreed_t = sdc_find(c, c->members[l], step)->t;
    } else if (v == FTRT__SDC_MAJORITY) {
        sdc_majority(c, step, bad);
    } else if (v == FTRT__SDC_SPLIT) {
        sdc_split(c, step);
    }
}

/* Compares every step the members have all sent, oldest first (after an epoch change). */
static void sdc_try_all(ftrt__coord *c)
{
    if (c->N < 1) return;
    const ftrt__crank *r0 = &c->r[c->members[0]];
    int64_t done = -1;
    for (;;) { /* ascending over logical rank 0's fingerprints of this epoch */
        int64_t next = -1;
        for (int k = 0; k < FTRT__SDC_KEEP; k++)
            if (r0->sdc[k].epoch == c->epoch && r0->sdc[k].step > done &&
                (next < 0 || r0->sdc[k].step < next))
                next = r0->sdc[k].step;
        if (next <= 0 || c->phase != PH_RUNNING) return;
        sdc_try(c, next);
        done = next;
    }
}

/* Which counting slot sdc_take() reuses first: an empty one or one of another epoch, then the
 * oldest step. */
static int64_t sdc_reuse_rank(const ftrt__sdc_count *x, int epoch)
{
    return x->count == 0 || x->epoch != epoch ? INT64_MIN : x->step;
}

/* FINGERPRINT from world rank w: kept (for the current epoch's members only: a fenced rank's
 * or an older epoch's are stale) and compared once the step is complete. */
static void sdc_take(ftrt__coord *c, int w, const ftrt__fingerprint_msg *m)
{
    ftrt__crank *r = &c->r[w];
    if (m->step <= 0 || m->epoch != c->epoch || r->role != FTRT__ROLE_TRAINER ||
        r->logical < 0 || r->logical >= c->N || c->members[r->logical] != w)
        return;
    if (isfinite(m->seconds) && m->seconds >= 0) c->sdc_fp_s += m->seconds;
    c->sdc_nfp++;
    int dup = sdc_find(c, w, m->step) != NULL;
    r->sdc[r->sdc_n++ % FTRT__SDC_KEEP] =
        (ftrt__sdc_fp){.step = m->step, .fp = m->fp, .epoch = m->epoch, .t = ftrt__now()};
    /* Count the step's fingerprints: the O(N) comparison runs once, when the last member's
     * arrives. A slot of another epoch (or an empty one) is reused first, else the oldest step. */
    ftrt__sdc_count *slot = NULL, *reuse = &c->sdc_count[0];
    for (int k = 0; k < 2 * FTRT__SDC_KEEP && !slot; k++) {
        ftrt__sdc_count *x = &c->sdc_count[k];
        if (x->count > 0 && x->epoch == m->epoch && x->step == m->step) slot = x;
        else if (sdc_reuse_rank(x, m->epoch) < sdc_reuse_rank(reuse, m->epoch)) reuse = x;
    }
    if (!slot) {
        slot = reuse;
        *slot = (ftrt__sdc_count){.step = m->step, .epoch = m->epoch, .count = 0};
    }
    if (!dup) slot->count++;
    if (slot->count >= c->N) sdc_try(c, m->step);
}

/* Takes a LEDGER message: the rank's totals and open interval, and intervals to append. */
static int take_ledger(ftrt__coord *c, int w, const void *payload, size_t len)
{
    ftrt__ledger_msg *m = malloc(len);
    if (!m) return 0; /* a lost ledger update is not a protocol error */
    memcpy(m, payload, len);
    if (ftrt__ledger_msg_check(m, len)) {
        free(m);
        return FTRT_EPROTO;
    }
    ftrt__crank *r = &c->r[w];
    memcpy(r->tl_totals, m->totals, sizeof r->tl_totals);
    r->tl_t_open = m->t_open;
    r->tl_kind_open = m->kind_open;
    r->kept_steps = m->kept_steps;
    r->flops_per_step = m->flops_per_step;
    r->peak_flops = m->peak_flops;
    r->total_steps = m->total_steps;
    r->tl_final |= m->final;
    r->tl_seen = 1;
    size_t max = (size_t)c->a->cfg->timeline_max;
    if (r->tl_n + (size_t)m->n > max) {
        r->tl_truncated = 1;
    } else if (m->n > 0) {
        if (r->tl_n + (size_t)m->n > r->tl_cap) {
            size_t ncap = r->tl_cap ? r->tl_cap : 1024;
            while (ncap < r->tl_n + (size_t)m->n) ncap *= 2;
            ftrt__interval *n = realloc(r->tl, ncap * sizeof *n);
            if (!n) {
                r->tl_truncated = 1;
                free(m);
                return 0;
            }
            r->tl = n;
            r->tl_cap = ncap;
        }
        memcpy(r->tl + r->tl_n, m->iv, (size_t)m->n * sizeof *m->iv);
        r->tl_n += (size_t)m->n;
    }
    free(m);
    return 0;
}

/* Handles one message from identified world rank w. Returns 0 or FTRT_EPROTO. */
static int handle(ftrt__coord *c, int w, const ftrt__msghdr *h, const void *payload)
{
    ftrt__crank *r = &c->r[w];
    if (h->type == FTRT__MSG_LEDGER) return take_ledger(c, w, payload, h->len);
    union {
        ftrt__heartbeat hb;
        ftrt__report rep;
        ftrt__epoch_msg em;
        ftrt__ckpt_msg cm;
        ftrt__bye bye;
        ftrt__fingerprint_msg fpm;
    } u;
    if (h->len > sizeof u) return FTRT_EPROTO;
    memcpy(&u, payload, h->len);
    switch (h->type) {
    case FTRT__MSG_HEARTBEAT:
        if (u.hb.steps_done != r->steps_done) c->status_dirty |= 1;
        if (u.hb.steps_done != r->steps_done || u.hb.waits != r->waits) r->last_change = ftrt__now();
        r->steps_done = u.hb.steps_done;
        r->waits = u.hb.waits;
        r->kept_s = u.hb.kept_s;
        r->compute_s = u.hb.compute_s;
        return 0;
    case FTRT__MSG_REPORT:
        if (u.rep.epoch != c->epoch || r->role != FTRT__ROLE_TRAINER) return 0; /* stale */
        if (r->reported_epoch != u.rep.epoch) c->nreports++;
        r->reported_epoch = u.rep.epoch;
        r->report_steps = u.rep.steps_done;
        r->has_sharded = u.rep.has_sharded;
        r->own_step = u.rep.own_step;
        r->held_step = u.rep.held_step;
        r->held_of = u.rep.held_of;
        /* (the O(N) check once every survivor may have reported; a member that reported and
         * then failed makes this an overestimate, which the check itself corrects) */
        if (c->nreports + c->npromoting >= c->N) check_reports(c);
        return 0;
    case FTRT__MSG_RESUMED:
        if (u.em.epoch != c->epoch) return 0;
        if (r->resumed_epoch != u.em.epoch && r->role == FTRT__ROLE_TRAINER) c->nresumed++;
        r->resumed_epoch = u.em.epoch;
        if (c->nresumed >= c->N) check_resumed(c);
        return 0;
    case FTRT__MSG_SHARD_DONE:
        if (u.cm.epoch != c->epoch || c->phase != PH_RUNNING) return 0; /* abandoned */
        try_commit(c, w, &u.cm);
        return 0;
    case FTRT__MSG_FINGERPRINT:
        sdc_take(c, w, &u.fpm);
        return 0;
    case FTRT__MSG_BYE:
        r->said_bye = 1;
        watch_remove(c, w); /* a rank that said goodbye is not watched for silence */
        c->maybe_done = 1;
        r->bye = u.bye;
        r->kept_s = u.bye.kept_s;
        r->steps_done = u.bye.steps_done;
        c->status_dirty |= 1;
        /* Its FAREWELL waits for the job's end (all_done(): every trainer said goodbye), so
         * that every process of the world takes the same MPI_Finalize decision; an abort
         * meanwhile reaches it as ABORT. */
        if (r->role == FTRT__ROLE_TRAINER) {
            /* A trainer that stops with an error, or before its loop's end (the job's total
             * steps, when ftrt_set_job_info() gave them), or in the middle of a recovery, ends
             * the job as failed: the others cannot finish without it, and a spare would meet
             * the same error. */
            char why[300];
            int code = 0;
            if (r->bye.exit_code < 0) {
                code = r->bye.exit_code;
                snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left with an "
                         "error: %s", r->logical, w, ftrt_strerror(code));
            } else if (r->total_steps > 0 && r->bye.steps_done < r->total_steps) {
                code = FTRT_EABORT;
                snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left after "
                         "%lld of %lld steps", r->logical, w, (long long)r->bye.steps_done,
                         (long long)r->total_steps);
            } else if (c->phase == PH_COLLECT || c->phase == PH_RESUMING) {
                code = FTRT_EABORT;
                snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left during "
                         "the recovery of epoch %d", r->logical, w, c->epoch);
            }
            if (code) job_abort(c, code, why);
        }
        return 0;
    default: return FTRT_EPROTO;
    }
}

/* Reads and handles everything available from world rank w. */
static void service(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    ssize_t got = ftrt__rx_fill(&r->rx, r->fd);
    if (got == -EAGAIN) return;
    if (got <= 0) {
        if (r->said_bye || c->phase == PH_ABORTING) {
            drop(c, w);
            return;
        }
        fail(c, w, FK_CONNECTION_LOST);
        return;
    }
    r->last_heard = ftrt__now();
    if (!r->said_bye) watch_touch(c, w);
    ftrt__msghdr h;
    const void *payload;
    int rc;
    while (r->fd >= 0 && (rc = ftrt__rx_next(&r->rx, &h, &payload)) == 1)
        if (handle(c, w, &h, payload)) {
            rc = FTRT_EPROTO;
            break;
        }
    if (r->fd >= 0 && rc < 0) {
        c->protocol_errors++;
        ftrt_log_error("malformed message from world rank %d", w);
        fail(c, w, FK_PROTOCOL);
    }
}

/* Pending connections that have not said a valid HELLO yet. */
typedef struct pending {
    int fd;
    ftrt__rxbuf rx;
    double since;
} pending;

static void identify(ftrt__coord *c, pending *p, uint64_t secret)
{
    ssize_t got = ftrt__rx_fill(&p->rx, p->fd);
    if (got == -EAGAIN) return;
    if (got == 0 && p->rx.used == 0) {
        /* Closed without a byte: a rank's other connection attempt that lost the race to the
         * first answering address (ftrt__connect_any), not an intruder. */
        close(p->fd);
        ftrt__rx_free(&p->rx);
        p->fd = -1;
        return;
    }
    ftrt__msghdr h;
    const void *payload;
    ftrt__hello hello;
    if (got > 0 && p->rx.used >= sizeof h) { /* anything but a HELLO first: rejected at once */
        memcpy(&h, p->rx.buf, sizeof h);
        if (h.type != FTRT__MSG_HELLO) got = -EPROTO;
    }
    if (got > 0 && ftrt__rx_next(&p->rx, &h, &payload) == 0) return; /* need more bytes */
    if (got > 0 && h.type == FTRT__MSG_HELLO && h.len == sizeof hello) {
        memcpy(&hello, payload, sizeof hello);
        hello.host[FTRT__HOST_MAX - 1] = 0;
        int w = hello.world_rank;
        if (hello.secret == secret && w > 0 && w < c->W && !c->r[w].hello) {
            ftrt__crank *r = &c->r[w];
            r->fd = p->fd;
            r->rx = p->rx;
            r->hello = 1;
            r->pid = hello.pid;
            memcpy(r->host, hello.host, sizeof r->host);
            r->last_heard = ftrt__now();
            c->nhello++;
            watch_touch(c, w);
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = KEY(KEY_RANK, w)};
            if (epoll_ctl(c->ep, EPOLL_CTL_MOD, r->fd, &ev))
                ftrt_log_error("epoll_ctl: %s", strerror(errno));
            p->fd = -1;
            memset(&p->rx, 0, sizeof p->rx);
            /* Bytes after the HELLO stay in r->rx for service(). */
            return;
        }
    }
    c->rejected_connections++;
    ftrt_log_warn("rejected a control-plane connection (bad hello, secret or world rank); %d so far",
                  c->rejected_connections);
    close(p->fd);
    ftrt__rx_free(&p->rx);
    p->fd = -1;
}

static void start_job(ftrt__coord *c)
{
    for (int w = 1; w < c->W; w++) {
        ftrt__crank *r = &c->r[w];
        r->role = w <= c->N ? FTRT__ROLE_TRAINER : FTRT__ROLE_SPARE;
        r->logical = w <= c->N ? w - 1 : -1;
        ftrt__welcome m = {.role = r->role, .logical_rank = r->logical, .ntrainers = c->N,
                           .heartbeat_ms = ftrt__heartbeat_period_ms(
                               c->a->cfg->heartbeat_ms, c->a->cfg->heartbeat_timeout_ms, c->W)};
        send_to(c, w, FTRT__MSG_WELCOME, &m, sizeof m);
        fanout_pump(c, w);
    }
    for (int l = 0; l < c->N; l++) {
        c->members[l] = l + 1;
        c->r[l + 1].last_change = ftrt__now();
    }
    c->phase = PH_RUNNING;
    c->status_dirty |= 2; /* membership: write now */
    ftrt_log_info("job started: %d trainers, %d spare(s)", c->N, c->W - 1 - c->N);
}

static int all_done(const ftrt__coord *c)
{
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (!r->said_bye && r->role != FTRT__ROLE_FAILED) return 0;
    }
    return 1;
}

static int any_connected(const ftrt__coord *c)
{
    for (int w = 1; w < c->W; w++)
        if (c->r[w].fd >= 0 && c->r[w].role != FTRT__ROLE_SPARE) return 1;
    return 0;
}

/* Declares failed every watched rank silent for longer than the heartbeat timeout: the head
 * of the watch, oldest first, O(1) per rank looked at. Bytes that arrived while the loop was
 * busy (a long fan-out) are not silence: a rank with something to read is read first. */
static void check_timeouts(ftrt__coord *c, double now)
{
    double limit = c->a->cfg->heartbeat_timeout_ms / 1000.0;
    while (c->watch_head && c->phase != PH_ABORTING && c->phase != PH_DONE) {
        int w = c->watch_head;
        ftrt__crank *r = &c->r[w];
        if (now - r->last_heard <= limit) break;
        struct pollfd pf = {.fd = r->fd, .events = POLLIN};
        if (r->fd >= 0 && poll(&pf, 1, 0) > 0) {
            service(c, w);
            if (c->watch_head != w || now - r->last_heard <= limit) continue;
        }
        if (c->watch_head == w) fail(c, w, FK_HEARTBEAT_TIMEOUT);
        if (c->watch_head == w) watch_remove(c, w); /* (not failed: the coordinator itself) */
    }
}

double ftrt__progress_timeout(int configured_ms, double median_step_s)
{
    if (configured_ms > 0) return configured_ms / 1000.0;
    if (!(median_step_s > 0)) return 0;
    double t = 10.0 * median_step_s;
    return t > 5.0 ? t : 5.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int job_finishing(const ftrt__coord *c)
{
    for (int l = 0; l < c->N; l++)
        if (c->r[c->members[l]].said_bye) return 1;
    return 0;
}

/* Every second: each trainer's step time and compute time per step over the last window; the
 * median step time arms the progress detector, and a trainer whose compute per step exceeds
 * straggler_ratio x the median is reported as a straggler (never declared failed). */
static void measure_window(ftrt__coord *c, double now)
{
    double *steps_t = c->s_d1, *comp = c->s_d2;
    int ns = 0, nc = 0;
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        int64_t ds = r->steps_done - r->win_steps;
        if (r->win_t > 0 && ds > 0 && !r->promoting) {
            r->step_s = (now - r->win_t) / (double)ds;
            steps_t[ns++] = r->step_s;
            comp[nc++] = (r->compute_s - r->win_compute) / (double)ds;
        }
    }
    if (ns > 0) {
        qsort(steps_t, (size_t)ns, sizeof *steps_t, cmp_double);
        c->median_step_s = steps_t[ns / 2];
    }
    if (nc >= 3) { /* a median of compute needs a few trainers to mean anything */
        double *sorted = c->s_d3;
        memcpy(sorted, comp, (size_t)nc * sizeof *comp);
        qsort(sorted, (size_t)nc, sizeof *sorted, cmp_double);
        double med = sorted[nc / 2];
        int k = 0;
        for (int l = 0; l < c->N && med > 0; l++) {
            ftrt__crank *r = &c->r[c->members[l]];
            int64_t ds = r->steps_done - r->win_steps;
            if (!(r->win_t > 0 && ds > 0 && !r->promoting)) continue;
            double ratio = comp[k++] / med;
            if (ratio > c->a->cfg->straggler_ratio && ratio > r->straggler_max) {
                if (r->straggler_max == 0)
                    ftrt_log_warn("straggler: logical rank %d at step %lld computes %.2fx the "
                                  "median per step", l, (long long)r->steps_done, ratio);
                r->straggler_max = ratio;
                r->straggler_step = r->steps_done;
            }
        }
    }
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        r->win_t = now;
        r->win_steps = r->steps_done;
        r->win_compute = r->compute_s;
    }
}

/* Stalled progress: a trainer whose collective count lags behind another trainer's, with
 * neither its steps nor its collectives moving for the progress timeout, is stuck in its own
 * code or in a collective the others finished; it is declared failed (and fenced). A hang
 * with nobody behind (every trainer waiting in the same collective) is reported, not acted on. */
static void check_progress(ftrt__coord *c, double now)
{
    if (c->phase != PH_RUNNING || job_finishing(c)) return;
    double limit = ftrt__progress_timeout(c->a->cfg->progress_timeout_ms, c->median_step_s);
    if (limit <= 0) return;
    int64_t most = 0;
    double newest = 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (r->waits > most) most = r->waits;
        if (r->last_change > newest) newest = r->last_change;
    }
    for (int l = 0; l < c->N && c->phase == PH_RUNNING; l++) {
        int w = c->members[l];
        ftrt__crank *r = &c->r[w];
        if (r->role == FTRT__ROLE_TRAINER && r->waits < most && now - r->last_change > limit) {
            ftrt_log_error("logical rank %d made no progress for %.1f s while others waited in "
                           "a later collective (FTRT_PROGRESS_TIMEOUT_MS)", l, now - r->last_change);
            fail(c, w, FK_PROGRESS_STALL);
        }
    }
    if (c->phase == PH_RUNNING && newest > 0 && now - newest > limit && c->stall_reports == 0) {
        c->stall_reports++;
        ftrt_log_warn("no trainer made progress for %.1f s and none is behind: a collective hang "
                      "across the job", now - newest);
    }
}

/* Seconds between two PINGs to one rank: a quarter of the heartbeat timeout (a rank declares
 * the coordinator lost after that much silence, so three PINGs may be late before it would),
 * and never less than the heartbeat period. Each PING costs a send (on loopback also the
 * receiver's TCP processing, about 3 us): at 16,384 ranks a PING every 100 ms was a third of a
 * core by itself. */
static double ping_period(const ftrt__coord *c)
{
    double p = c->a->cfg->heartbeat_timeout_ms / 4000.0,
           hb = ftrt__heartbeat_period_ms(c->a->cfg->heartbeat_ms, c->a->cfg->heartbeat_timeout_ms,
                                          c->W) / 1000.0;
    return p > hb ? p : hb;
}

/* The PINGs that fell due: every rank gets one per ping_period(), rank w at the fraction
 * (w - 1) / (W - 1) of the round, so that they are spread over the period instead of going out
 * W at once (which at 16,384 ranks held the loop for tens of ms). */
static void ping_due(ftrt__coord *c, double now)
{
    double period = ping_period(c);
    if (c->ping_round == 0) {
        c->ping_round = now;
        c->ping_next = 1;
    }
    ftrt__epoch_msg m = {.epoch = c->epoch};
    for (;;) {
        double frac = (now - c->ping_round) / period;
        int upto = frac >= 1 ? c->W : 1 + (int)((c->W - 1) * frac);
        for (; c->ping_next < upto; c->ping_next++)
            if (c->r[c->ping_next].fd >= 0)
                send_to(c, c->ping_next, FTRT__MSG_PING, &m, sizeof m);
        if (frac < 1) return;
        c->ping_round += period;
        if (now - c->ping_round >= period) c->ping_round = now; /* fell behind: start again */
        c->ping_next = 1;
    }
}

/* Milliseconds epoll may wait: until the next PINGs fall due (in batches at least 2 ms apart),
 * the head of the silence watch expires, or 10 ms (the periodic work). */
static int wait_ms(const ftrt__coord *c, double now)
{
    double period = ping_period(c), t = now + 0.010;
    double tp = c->ping_next < c->W
                    ? c->ping_round + period * (c->ping_next - 1) / (c->W > 1 ? c->W - 1 : 1)
                    : c->ping_round + period;
    if (tp < now + 0.002) tp = now + 0.002;
    if (tp < t) t = tp;
    if (c->watch_head && c->phase != PH_INIT && c->phase != PH_ABORTING) {
        double tw = c->r[c->watch_head].last_heard + c->a->cfg->heartbeat_timeout_ms / 1000.0;
        if (tw < t) t = tw;
    }
    double ms = ceil((t - now) * 1000.0);
    return ms < 0 ? 0 : (int)ms;
}

/* Accepts the connections waiting on the (nonblocking) listener into free pending slots
 * (TCP_NODELAY: the coordinator's messages are small and latency-bound). */
static void accept_all(ftrt__coord *c, int listen_fd, pending *pend, int *pfree, int *nfree,
                       int *npend_open)
{
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN: none left (or an error the next readiness retries) */
        if (*nfree == 0) {
            close(fd);
            c->rejected_connections++;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int slot = pfree[--*nfree];
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = KEY(KEY_PENDING, slot)};
        if (epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev)) {
            close(fd);
            pfree[(*nfree)++] = slot;
            continue;
        }
        pend[slot].fd = fd;
        pend[slot].since = ftrt__now();
        (*npend_open)++;
    }
}

int ftrt__coordinator_run(ftrt__coord_args *a, int listen_fd, uint64_t secret)
{
    ftrt__coord c = {.a = a, .W = a->world_size, .N = a->ntrainers, .phase = PH_INIT,
                     .last_committed = -1, .t_start = a->t_start,
                     .t_start_wall = a->t_start_wall, .sdc_agreed_step = -1,
                     .sdc_judged_step = -1, .sdc_rollback = -1, .ep = -1,
                     .commit_submitted = -1};
    c.r = calloc((size_t)c.W, sizeof *c.r);
    c.members = calloc((size_t)c.N, sizeof *c.members);
    /* Each rank tries every offered address at once (ftrt__connect_any) and keeps the first
     * that answers: up to one pending connection per rank and address. */
    int naddr = 0;
    for (const char *q = a->addr; *q;) {
        size_t l = strcspn(q, " ");
        naddr += l > 0;
        q += l;
        q += strspn(q, " ");
    }
    const int npend = c.W * (naddr > 0 ? naddr : 1);
    enum { MAXEV = 512 };
    pending *pend = calloc((size_t)npend, sizeof *pend);
    int *pfree = calloc((size_t)npend, sizeof *pfree);
    struct epoll_event *evs = calloc(MAXEV, sizeof *evs);
    size_t nw = (size_t)c.W;
    c.s_i64 = calloc(nw, sizeof *c.s_i64);
    c.s_int = calloc(nw, sizeof *c.s_int);
    c.s_d1 = calloc(nw, sizeof *c.s_d1);
    c.s_d2 = calloc(nw, sizeof *c.s_d2);
    c.s_d3 = calloc(nw, sizeof *c.s_d3);
    c.s_u64 = calloc(nw, sizeof *c.s_u64);
    c.s_b = calloc(nw, 1);
    c.ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.u64 = KEY(KEY_LISTEN, 0)};
    int fl = fcntl(listen_fd, F_GETFL);
    if (!c.r || !c.members || !pend || !pfree || !evs || !c.s_i64 || !c.s_int || !c.s_d1 ||
        !c.s_d2 || !c.s_d3 || !c.s_u64 || !c.s_b || c.ep < 0 || fl < 0 ||
        fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) ||
        epoll_ctl(c.ep, EPOLL_CTL_ADD, listen_fd, &lev)) {
        int e = c.ep < 0 || fl < 0 ? -errno : -ENOMEM;
        free(c.r); free(c.members); free(pend); free(pfree); free(evs);
        free(c.s_i64); free(c.s_int); free(c.s_d1); free(c.s_d2); free(c.s_d3); free(c.s_u64);
        free(c.s_b);
        if (c.ep >= 0) close(c.ep);
        close(listen_fd);
        return e;
    }
    for (int w = 0; w < c.W; w++) {
        c.r[w].fd = -1;
        c.r[w].logical = -1;
        c.r[w].resumed_epoch = -1;
        c.r[w].reported_epoch = -1;
    }
    int nfree = 0, npend_open = 0;
    for (int k = npend - 1; k >= 0; k--) {
        pend[k].fd = -1;
        pfree[nfree++] = k;
    }
    c.r[0].role = FTRT__ROLE_COORD;
    c.r[0].hello = 1;
    c.r[0].pid = (int)getpid();
    snprintf(c.r[0].host, sizeof c.r[0].host, "%s", a->host);
    int64_t steps[1];
    if (ftrt__ckpt_list(a->cfg->ckpt_dir, steps, 1) > 0) c.last_committed = steps[0];
    int crc = ftrt__committer_start(&c.committer, a->cfg->ckpt_dir, a->cfg->ckpt_keep);
    if (crc) {
        ftrt_log_warn("cannot start the commit thread (%s): checkpoints are committed inside the "
                      "coordinator's loop", strerror(-crc));
        c.committer = NULL;
    } else {
        struct epoll_event cev = {.events = EPOLLIN, .data.u64 = KEY(KEY_COMMIT, 0)};
        epoll_ctl(c.ep, EPOLL_CTL_ADD, ftrt__committer_fd(c.committer), &cev);
    }

    double init_deadline = ftrt__now() + a->cfg->init_timeout_ms / 1000.0;
    double next_periodic = 0, last_progress_check = 0, last_pending_check = 0;
    while (c.phase != PH_DONE) {
        int ne = epoll_wait(c.ep, evs, MAXEV, wait_ms(&c, ftrt__now()));
        if (ne < 0 && errno != EINTR) {
            job_abort(&c, -errno, "epoll_wait failed");
            break;
        }
        for (int i = 0; i < ne; i++) {
            uint32_t kind = (uint32_t)(evs[i].data.u64 >> 32), idx = (uint32_t)evs[i].data.u64;
            if (kind == KEY_LISTEN) {
                /* The listener stays open for the whole job: later connections can never join
                 * (every world rank has said hello), but they are read, rejected and counted. */
                accept_all(&c, listen_fd, pend, pfree, &nfree, &npend_open);
            } else if (kind == KEY_PENDING) {
                if (pend[idx].fd < 0) continue;
                identify(&c, &pend[idx], secret);
                if (pend[idx].fd < 0) { /* identified (now a rank's) or closed */
                    pfree[nfree++] = (int)idx;
                    npend_open--;
                }
            } else if (kind == KEY_RANK) {
                if (c.r[idx].fd >= 0) service(&c, (int)idx);
            } else if (kind == KEY_COMMIT) {
                commits_take(&c);
            }
        }
        double now = ftrt__now();
        if (c.phase == PH_INIT) {
            if (c.nhello == c.W - 1) {
                start_job(&c);
            } else if (now > init_deadline) {
                ftrt_log_error("only %d of %d ranks connected within %d ms (FTRT_INIT_TIMEOUT_MS)",
                               c.nhello, c.W - 1, a->cfg->init_timeout_ms);
                job_abort(&c, FTRT_ETIMEDOUT, "ranks missing at start");
            }
        }
        ping_due(&c, now);
        if (c.phase != PH_INIT && c.phase != PH_ABORTING) check_timeouts(&c, now);
        if (now < next_periodic) continue;
        /* ---- periodic work, at most every 10 ms ---- */
        next_periodic = now + 0.010;
        if (npend_open > 0 && now - last_pending_check >= 0.1) {
            last_pending_check = now;
            for (int k = 0; k < npend; k++)
                if (pend[k].fd >= 0 && now - pend[k].since > 5.0) { /* no valid hello in time */
                    close(pend[k].fd);
                    ftrt__rx_free(&pend[k].rx);
                    pend[k].fd = -1;
                    pfree[nfree++] = k;
                    npend_open--;
                    c.rejected_connections++;
                }
        }
        if (c.phase == PH_RUNNING && now - c.last_window >= 1.0) {
            measure_window(&c, now);
            c.last_window = now;
        }
        if (now - last_progress_check >= 0.1) { /* O(N): ten times a second */
            check_progress(&c, now);
            last_progress_check = now;
        }
        if (c.phase != PH_INIT && now - c.metrics_written >= 2.0) {
            if (a->cfg->metrics_file[0]) ftrt__metrics_write(&c, ftrt__wallclock());
            c.metrics_written = now;
        }
        if (c.phase != PH_INIT && now - c.progress_printed >= 1.0) {
            ftrt__progress_line(&c, 0);
            c.progress_printed = now;
        }
        if (c.phase == PH_RUNNING && c.maybe_done) {
            c.maybe_done = 0;
            if (all_done(&c)) {
                /* The job's end, to every process at once: the trainers' FAREWELL and the
                 * spares' SHUTDOWN say how many processes died (0: all call MPI_Finalize). */
                ftrt__epoch_msg m = {.epoch = c.epoch, .value = ranks_lost(&c)};
                for (int w = 1; w < c.W; w++) {
                    if (c.r[w].role == FTRT__ROLE_SPARE) send_to(&c, w, FTRT__MSG_SHUTDOWN, &m, sizeof m);
                    if (c.r[w].role == FTRT__ROLE_TRAINER && c.r[w].said_bye)
                        send_to(&c, w, FTRT__MSG_FAREWELL, &m, sizeof m);
                }
                c.phase = PH_DONE;
                c.result = c.sdc_unresolved ? FTRT_ECORRUPT : FTRT_DONE;
            }
        }
        if (c.phase == PH_ABORTING && (!any_connected(&c) || now > c.abort_deadline)) {
            for (int w = 1; w < c.W; w++)
                if (c.r[w].fd >= 0 && c.r[w].role != FTRT__ROLE_SPARE) {
                    ftrt_log_warn("world rank %d did not leave after the abort", w);
                    fence(&c, w);
                }
            c.phase = PH_DONE;
        }
        /* The status file: membership changes at once, progress at most 4 times a second;
         * once a write costs more than 2.5 ms (thousands of ranks), never more often than once
         * per 20 times what the last one cost, so that the loop spends at most 5% of its time
         * on it. (Fault injectors time detections by this file: a small job's membership
         * change is never held back: the rule applies above 1,024 processes only, where a
         * write costs milliseconds by itself; below, a write slowed by a busy machine made
         * chaos.ledger see a recovery end 71 ms late.) */
        double gap = c.W > 1024 && c.status_cost > 0.0025 ? 20.0 * c.status_cost : 0;
        if (c.status_dirty && (now - c.status_written >= gap || c.phase == PH_DONE) &&
            ((c.status_dirty & 2) || now - c.status_written > 0.25 || c.phase == PH_DONE)) {
            ftrt__status_write(&c);
            double after = ftrt__now();
            c.status_cost = after - now;
            c.status_written = after;
            c.status_dirty = 0;
        }
    }
    commits_drain(&c); /* commits still in flight: their outcome goes into the report */
    c.t_end = ftrt__now();
    c.phase = PH_DONE;
    ftrt__progress_line(&c, 1);
    ftrt__status_write(&c);
    ftrt__report_write(&c);
    if (a->cfg->metrics_file[0]) ftrt__metrics_write(&c, c.t_start_wall + (c.t_end - c.t_start));
    c.final_written = 1; /* the launcher may end mpirun once it reads this */
    ftrt__status_write(&c);
    if (ftrt__ckpt_retention_flush(10.0) > 0) /* old checkpoints' files, deleted in background */
        ftrt_log_warn("checkpoint retention: old step directories are still being deleted; "
                      "the next commit finishes the job (they are no longer committed)");
    int result = c.result;
    /* Ranks that never joined count as lost too: after an abort at start-up they never reach
     * MPI_Finalize, so the coordinator must not wait for them there. */
    a->ranks_lost = ranks_lost(&c);
    a->aborted = c.aborted;
    for (int w = 1; w < c.W; w++) a->ranks_lost += !c.r[w].hello && c.r[w].role != FTRT__ROLE_FAILED;
    for (int w = 1; w < c.W; w++) {
        drop(&c, w);
        free(c.r[w].tl);
    }
    for (int k = 0; k < npend; k++)
        if (pend[k].fd >= 0) {
            close(pend[k].fd);
            ftrt__rx_free(&pend[k].rx);
        }
    if (listen_fd >= 0) close(listen_fd);
    ftrt__committer_stop(c.committer);
    close(c.ep);
    ftrt__track_free(c.ckpt_track);
    free(c.r);
    free(c.members);
    free(c.inc);
    free(pend);
    free(pfree);
    free(evs);
    free(c.s_i64);
    free(c.s_int);
    free(c.s_d1);
    free(c.s_d2);
    free(c.s_d3);
    free(c.s_u64);
    free(c.s_b);
    return result;
}

/*
 * agent.c - the per-rank control-plane agent thread (trainers and spares).
 *
 * It connects to the coordinator, says hello with the job secret, sends a heartbeat every
 * heartbeat_ms carrying the rank's progress, and turns the coordinator's messages into shared
 * state that the application thread polls (two atomics) or waits on (cp.cond). It never calls
 * MPI. Losing the coordinator sets watch.fatal = FTRT_ECOORD. After each change of the watch it
 * calls the watch's listeners (base/watch.c) outside its own locks: the NCCL plane's wakes the
 * thread that aborts its communicator (comm/interrupt.c), which frees an application thread
 * blocked on the GPU outside ftrt.
 *
 * With host agents (FTRT_HOST_AGENTS=1, docs/detection-and-recovery.md "Host agents") the
 * connection goes to this host's local socket: the first rank of the host to bind it runs the
 * host agent (runtime/hostagent.c) in a thread of its process, and every rank of the host, that
 * one included, talks to it as it would to the coordinator (on the coordinator's own host, which
 * the coordinator marks, ranks connect to it directly). A rank that learns it is served by a host agent (HOSTED) and
 * then loses it (the socket closes: the agent's process died; or silence for half the
 * heartbeat timeout: it froze) connects to the coordinator directly and says HELLO again (the
 * agent's socket closed only once the coordinator answered: leave_agent); the
 * messages it may have lost with the agent (its newest REPORT, RESUMED, FINGERPRINT, BYE,
 * SHARD_DONEs) go again, and the coordinator sends again what this rank may have missed.
 * Later it elects a new host agent and moves back to it (agent_move.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/knobs.h"
#include "base/log.h"
#include "base/sigterm.h"
#include "runtime/internal.h"

/* Where kept[] holds the newest FINGERPRINT (after the SHARD_DONEs). */
#define KEPT_FP (3 + FTRT__KEPT_SHARD)

/* The messages a rank sends again after losing its host agent or the coordinator: the newest
 * REPORT, RESUMED, BYE and FINGERPRINT, and the FTRT__KEPT_SHARD newest SHARD_DONEs (the
 * coordinator takes a repeat as it took the first, ignores one of a step already committed,
 * and counts a fingerprint's vote once: sdc_vote.c). send_lock held. */
static void keep_sent(ftrt__cp *cp, uint32_t type, const void *payload, uint32_t len)
{
    int k = type == FTRT__MSG_REPORT ? 0 : type == FTRT__MSG_RESUMED ? 1
          : type == FTRT__MSG_BYE    ? 2 : type == FTRT__MSG_SHARD_DONE ? 3
          : type == FTRT__MSG_FINGERPRINT ? KEPT_FP : -1;
    if (k < 0 || len > sizeof cp->kept[0].payload) return;
    if (k == 3) /* newest first */
        memmove(&cp->kept[4], &cp->kept[3], (FTRT__KEPT_SHARD - 1) * sizeof cp->kept[0]);
    cp->kept[k].type = type;
    cp->kept[k].len = len;
    memcpy(cp->kept[k].payload, payload, len);
}

int ftrt__agent_send(struct ftrt_ctx *ctx, uint32_t type, const void *payload, uint32_t len)
{
    pthread_mutex_lock(&ctx->cp.send_lock);
    int rc = ctx->cp.fd >= 0 ? ftrt__msg_send(ctx->cp.fd, type, payload, len) : -ENOTCONN;
    keep_sent(&ctx->cp, type, payload, len); /* (sent again to a host agent's successor or to
                                                a standby coordinator that takes over) */
    /* (sent to a host agent that just died: it goes again on the new connection) */
    if (rc && ctx->cp.hosted && !ctx->cp.fell_back) rc = 0;
    pthread_mutex_unlock(&ctx->cp.send_lock);
    return rc;
}

void ftrt__cp_wait(struct ftrt_ctx *ctx, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&ctx->cp.cond, &ctx->cp.lock, &ts);
}

static void set_fatal(ftrt_ctx *ctx, int code)
{
    int zero = 0;
    atomic_compare_exchange_strong(&ctx->watch.fatal, &zero, code);
}

/* WELCOME: a trainer starts from the initial membership (base/proto.h), which the PLANs'
 * deltas then change. cp.lock held. Returns 0 or -ENOMEM. */
static int take_welcome(ftrt__cp *cp, const void *payload)
{
    if (cp->welcomed) return 0; /* sent again after this rank came back: nothing new */
    memcpy(&cp->welcome, payload, sizeof cp->welcome);
    cp->welcomed = 1;
    cp->logical = cp->welcome.logical_rank;
    if (cp->welcome.role != FTRT__ROLE_TRAINER || cp->welcome.ntrainers < 1) return 0;
    int32_t *m = malloc((size_t)cp->welcome.ntrainers * sizeof *m);
    if (!m) return -ENOMEM;
    ftrt__plan_initial_members(m, cp->welcome.ntrainers);
    free(cp->members);
    cp->members = m;
    cp->nmembers = cp->welcome.ntrainers;
    return 0;
}

/* The holder table of a PLAN that carries one (m->ndata > 0), kept in cp->holder for the
 * recovery (ftrt__apply_plan): this rank's logical rank must hold a data rank. cp.lock held.
 * Returns 0, FTRT_EPROTO or -ENOMEM. */
static int take_holder(ftrt__cp *cp, const ftrt__plan_msg *m, int logical)
{
    if (m->ndata == 0) return 0;
    const int32_t *t = ftrt__plan_msg_holder(m);
    int mine = 0;
    for (int d = 0; d < m->ndata; d++) mine += t[d] == logical;
    if (!mine) return FTRT_EPROTO;
    int32_t *h = realloc(cp->holder, (size_t)m->ndata * sizeof *h);
    if (!h) return -ENOMEM;
    memcpy(h, t, (size_t)m->ndata * sizeof *h);
    cp->holder = h;
    cp->nholder = m->ndata;
    return 0;
}

/* PLAN: expanded against the membership this rank knows (base/proto.h ftrt__plan_expand); it
 * must name this rank where it says this rank is. cp.lock held. Returns 0 or FTRT_EPROTO
 * (-ENOMEM is not a protocol error: the plan is lost, and the recovery waits for it). */
static int take_plan(struct ftrt_ctx *ctx, const void *payload, size_t len)
{
    ftrt__cp *cp = &ctx->cp;
    ftrt__plan_msg *m = malloc(len);
    if (!m) return 0;
    memcpy(m, payload, len);
    ftrt__plan *p = NULL;
    size_t plen = 0;
    int rc = ftrt__plan_expand(m, len, cp->members, cp->nmembers, cp->logical, &p, &plen);
    if (!rc && p->members[p->logical_rank] != ctx->world_rank) rc = FTRT_EPROTO;
    if (!rc) rc = take_holder(cp, m, p->logical_rank);
    free(m);
    if (rc == -ENOMEM) {
        free(p);
        return 0;
    }
    if (rc) {
        free(p);
        return FTRT_EPROTO;
    }
    int32_t *members = realloc(cp->members, (size_t)p->ntrainers * sizeof *members);
    if (!members) {
        free(p);
        return 0;
    }
    memcpy(members, p->members, (size_t)p->ntrainers * sizeof *members);
    cp->members = members;
    cp->nmembers = p->ntrainers;
    cp->logical = p->logical_rank;
    free(cp->plan);
    cp->plan = p;
    cp->plan_len = plen;
    cp->plan_t = ftrt__now();
    if (p->epoch > atomic_load(&ctx->watch.pending_epoch))
        atomic_store(&ctx->watch.pending_epoch, p->epoch);
    return 0;
}

/* STANDBY (cp.lock held): value >= 0 appoints this spare the standby coordinator of that term:
 * it opens a listener on every interface (once) and says where (STANDBY_AT); value < 0
 * dismisses it (the listener closes). A listener that cannot be opened is logged and not
 * announced: the coordinator then has no standby. */
static void take_standby(struct ftrt_ctx *ctx, const ftrt__epoch_msg *m)
{
    ftrt__cp *cp = &ctx->cp;
    pthread_mutex_lock(&cp->send_lock);
    if (m->value < 0) {
        if (cp->sb_fd >= 0) close(cp->sb_fd);
        cp->sb_fd = -1;
        pthread_mutex_unlock(&cp->send_lock);
        return;
    }
    if (cp->sb_fd < 0) {
        memset(&cp->sb_at, 0, sizeof cp->sb_at);
        int port = 0, fd = ftrt__listen("", cp->sb_at.addrs, sizeof cp->sb_at.addrs, &port);
        if (fd < 0) {
            pthread_mutex_unlock(&cp->send_lock);
            ftrt_log_warn("cannot listen as the standby coordinator: %s", ftrt_strerror(fd));
            return;
        }
        cp->sb_fd = fd;
        cp->sb_at.port = port;
        cp->sb_at.world_rank = ctx->world_rank;
        ftrt_log_info("standby coordinator (term %d): listening at %s port %d", m->value,
                      cp->sb_at.addrs, port);
    }
    cp->sb_at.term = m->value;
    ftrt__coord_at at = cp->sb_at;
    int fd = cp->fd;
    int rc = fd >= 0 ? ftrt__msg_send(fd, FTRT__MSG_STANDBY_AT, &at, sizeof at) : -ENOTCONN;
    pthread_mutex_unlock(&cp->send_lock);
    if (rc) ftrt_log_debug("STANDBY_AT not sent: %s", ftrt_strerror(rc));
}

/* SYNC (cp.lock held): the standby keeps the newest state and acknowledges it. */
static void take_sync(struct ftrt_ctx *ctx, const void *payload, size_t len)
{
    ftrt__cp *cp = &ctx->cp;
    ftrt__sync_head head;
    if (len < sizeof head || cp->sb_fd < 0) return; /* not (or no longer) the standby */
    memcpy(&head, payload, sizeof head);
    void *copy = realloc(cp->sync, len);
    if (!copy) return; /* not acknowledged: the coordinator dismisses this standby */
    memcpy(copy, payload, len);
    cp->sync = copy;
    cp->sync_len = len;
    ftrt__epoch_msg ack = {.epoch = head.term, .value = (int32_t)head.seq};
    pthread_mutex_lock(&cp->send_lock);
    if (cp->fd >= 0) ftrt__msg_send(cp->fd, FTRT__MSG_SYNC_ACK, &ack, sizeof ack);
    pthread_mutex_unlock(&cp->send_lock);
}

/* 1 when h is a coordinator's message of an older term than this rank follows (a deposed
 * coordinator's): refused. A newer term is followed from then on. The host agent's own
 * messages (HOSTED, PING, COORD_LOST) are not the coordinator's. Agent thread only. */
static int stale_term(ftrt__cp *cp, const ftrt__msghdr *h)
{
    if (h->type == FTRT__MSG_HOSTED || h->type == FTRT__MSG_PING || h->type == FTRT__MSG_COORD_LOST)
        return 0;
    if (h->term < cp->term) {
        ftrt_log_warn("refused a coordinator's message (type %u) of term %d: this rank follows "
                      "term %d", h->type, h->term, cp->term);
        return 1;
    }
    if (h->term > cp->term) {
        cp->term = h->term;
        ftrt__msg_set_term(cp->term);
    }
    return 0;
}

/* FTRT_TEST_DRAIN_LATE_RANKS names this rank: it ignores a drain's step-boundary
 * announcement (logged). */
static int late_for_drain(const struct ftrt_ctx *ctx)
{
    int late = ctx->world_rank < 30 && (ftrt__knobs.drain_late_ranks >> ctx->world_rank & 1);
    if (late) ftrt_log_warn("a drain's step-boundary announcement ignored "
                            "(FTRT_TEST_DRAIN_LATE_RANKS)");
    return late;
}

/* FAILURE: the epoch it announces becomes pending (the trainer's waits and ftrt_check() see
 * it). Under cp->lock. */
static void take_failure(struct ftrt_ctx *ctx, const void *payload)
{
    ftrt__failure_msg fm;
    memcpy(&fm, payload, sizeof fm);
    atomic_store(&ctx->cp.t_fail_wall, fm.t_fail_wall); /* before the epoch: waits read both */
    if (fm.boundary && late_for_drain(ctx)) return;
    if (fm.boundary) { /* a drain: entered at the step boundary the coordinator picked */
        if (fm.epoch > atomic_load(&ctx->cp.boundary_epoch)) {
            atomic_store(&ctx->cp.boundary_step, fm.boundary_step);
            atomic_store(&ctx->cp.boundary_epoch, fm.epoch);
        }
        ftrt_log_info("epoch %d announced for the step boundary after %lld steps (%lld done): "
                      "a rank is drained", fm.epoch, (long long)fm.boundary_step,
                      (long long)atomic_load(&ctx->cp.steps_done));
        return;
    }
    if (fm.epoch > atomic_load(&ctx->watch.pending_epoch))
        atomic_store(&ctx->watch.pending_epoch, fm.epoch);
    ftrt_log_info("epoch %d announced: a rank failed", fm.epoch);
}

/* DRAIN: this trainer's logical rank went to a hot spare. value 1: it leaves at the drain's
 * step boundary (ftrt_step_done() returns FTRT_EDRAINED once boundary_step steps are done), so
 * that the others finish the same steps with it; 0: now (every call returns FTRT_EDRAINED).
 * Under cp->lock. */
static void take_drain(struct ftrt_ctx *ctx, const ftrt__drain_msg *m)
{
    if (m->value && late_for_drain(ctx)) return;
    if (m->value) {
        atomic_store(&ctx->cp.boundary_step, m->boundary_step);
        atomic_store(&ctx->cp.drained, 1);
        ftrt_log_warn("drained: this process leaves the job at the step boundary after %lld "
                      "steps (epoch %d)", (long long)m->boundary_step, m->epoch);
        return;
    }
    set_fatal(ctx, FTRT_EDRAINED);
    ftrt_log_warn("drained: this process leaves the job now (epoch %d)", m->epoch);
}

/* COMMIT: the newest committed step, and the application's callback. Under cp->lock. */
static void take_commit(ftrt__cp *cp, const void *payload)
{
    ftrt__ckpt_msg cm;
    memcpy(&cm, payload, sizeof cm);
    cp->commit_step = cm.step;
    cp->commit_result = cm.result;
    cp->commit_seen++;
    if (cp->on_commit) cp->on_commit(cp->on_commit_arg, cm.step, cm.epoch, cm.result);
}

/* COORD_LOST from this host's agent: the agent goes to the standby (2: the coordinator fell
 * silent) or gives up (1: its connection closed; agent_main). Under cp->lock. */
static void take_coord_lost(ftrt__cp *cp, const void *payload)
{
    if (cp->stop || cp->shutdown || cp->farewell) return; /* the job is over for us */
    ftrt__epoch_msg em;
    memcpy(&em, payload, sizeof em);
    ftrt_log_warn("this host's agent lost the coordinator (%s)",
                  em.epoch == 2 ? "silent" : "connection closed");
    cp->coord_lost = em.epoch == 2 ? 2 : 1;
}

/* Handles one message from the coordinator. Returns 0, or FTRT_EPROTO for a bad one. */
static int handle(struct ftrt_ctx *ctx, const ftrt__msghdr *h, const void *payload)
{
    ftrt__cp *cp = &ctx->cp;
    ftrt__epoch_msg em;
    if (stale_term(cp, h)) return 0;
    if (h->type == FTRT__MSG_FAILURE && ftrt__knobs.epoch_delay_ms > 0) { /* test knob */
        struct timespec ts = {ftrt__knobs.epoch_delay_ms / 1000,
                              (ftrt__knobs.epoch_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&cp->lock);
    switch (h->type) {
    case FTRT__MSG_WELCOME:
        if (take_welcome(cp, payload)) set_fatal(ctx, -ENOMEM);
        break;
    case FTRT__MSG_FAILURE:
        take_failure(ctx, payload);
        break;
    case FTRT__MSG_PLAN:
        if (take_plan(ctx, payload, h->len)) {
            pthread_mutex_unlock(&cp->lock);
            return FTRT_EPROTO;
        }
        break;
    case FTRT__MSG_COMMIT:
        take_commit(cp, payload);
        break;
    case FTRT__MSG_SHUTDOWN:
    case FTRT__MSG_FAREWELL:
        memcpy(&em, payload, sizeof em);
        cp->job_end = em.value;
        if (h->type == FTRT__MSG_SHUTDOWN)
            cp->shutdown = 1;
        else
            cp->farewell = 1;
        break;
    case FTRT__MSG_PING:
        break;
    case FTRT__MSG_HOSTED:
        pthread_mutex_lock(&cp->send_lock);
        cp->hosted = 1;
        pthread_mutex_unlock(&cp->send_lock);
        break;
    case FTRT__MSG_COORD_LOST:
        take_coord_lost(cp, payload);
        break;
    case FTRT__MSG_STANDBY:
        memcpy(&em, payload, sizeof em);
        take_standby(ctx, &em);
        break;
    case FTRT__MSG_MOVE:
        memcpy(&em, payload, sizeof em);
        ftrt__move_take(ctx, &em);
        break;
    case FTRT__MSG_NEXT_COORD:
        pthread_mutex_lock(&cp->send_lock);
        memcpy(&cp->next, payload, sizeof cp->next);
        cp->next.addrs[sizeof cp->next.addrs - 1] = 0;
        pthread_mutex_unlock(&cp->send_lock);
        break;
    case FTRT__MSG_SYNC:
        take_sync(ctx, payload, h->len);
        break;
    case FTRT__MSG_DRAIN: {
        ftrt__drain_msg dm;
        memcpy(&dm, payload, sizeof dm);
        take_drain(ctx, &dm);
        break;
    }
    case FTRT__MSG_ABORT:
        memcpy(&em, payload, sizeof em);
        ftrt_log_warn("the coordinator aborted the job: %s", ftrt_strerror(em.value));
        set_fatal(ctx, em.value < 0 ? em.value : FTRT_EABORT);
        break;
    default:
        pthread_mutex_unlock(&cp->lock);
        return FTRT_EPROTO;
    }
    pthread_cond_broadcast(&cp->cond);
    pthread_mutex_unlock(&cp->lock);
    ftrt__watch_fire(&ctx->watch); /* FAILURE, PLAN, ABORT: the engines' listeners (ports.h) */
    return 0;
}

/* The heartbeat period, seconds: the coordinator's (WELCOME; longer in large worlds), else
 * FTRT_HEARTBEAT_MS. Agent thread only (it writes cp.welcome). */
static double hb_period(const ftrt_ctx *ctx)
{
    int ms = ctx->cp.welcomed && ctx->cp.welcome.heartbeat_ms > 0 ? ctx->cp.welcome.heartbeat_ms
                                                                  : ctx->cfg.heartbeat_ms;
    return ms / 1000.0;
}

/* Sends the HEARTBEAT and, once a second, the ledger when due. Returns 0, or -1 when the
 * heartbeat could not be sent (the connection is gone). */
static int agent_tick(struct ftrt_ctx *ctx, double now, double *next_hb, double *next_ledger)
{
    ftrt__cp *cp = &ctx->cp;
    if (now >= *next_hb) {
        ftrt__heartbeat hb = {.steps_done = atomic_load(&cp->steps_done),
                              .waits = atomic_load(&cp->waits),
                              .kept_s = atomic_load(&cp->kept_s),
                              .compute_s = atomic_load(&cp->compute_s),
                              .epoch = atomic_load(&ctx->watch.pending_epoch)};
        pthread_mutex_lock(&cp->send_lock);
        int rc = cp->fd >= 0 ? ftrt__msg_send(cp->fd, FTRT__MSG_HEARTBEAT, &hb, sizeof hb) : -1;
        pthread_mutex_unlock(&cp->send_lock);
        ftrt__move_beat(ctx, &hb);
        if (rc && !cp->stop) return -1;
        *next_hb = now + hb_period(ctx);
    }
    if (!cp->drain_asked && ftrt__sigterm_count() > 0) { /* FTRT_SIGTERM=drain */
        cp->drain_asked = 1;
        ftrt__epoch_msg m = {.epoch = atomic_load(&ctx->watch.pending_epoch)};
        pthread_mutex_lock(&cp->send_lock);
        int rc = cp->fd >= 0 ? ftrt__msg_send(cp->fd, FTRT__MSG_DRAIN_ME, &m, sizeof m) : -1;
        pthread_mutex_unlock(&cp->send_lock);
        ftrt_log_warn("SIGTERM received: asked the coordinator to drain this rank%s",
                      rc ? " (not sent: no connection)" : "");
    }
    if (now >= *next_ledger) { /* the finished part of this rank's timeline, once a second */
        if (cp->on_tick) cp->on_tick(ctx);
        *next_ledger = now + (hb_period(ctx) > 1.0 ? hb_period(ctx) : 1.0);
    }
    return 0;
}

/* Closes the socket of the host agent this rank fell back from, kept until now (leave_agent).
 * Agent thread only. */
static void left_close(ftrt__cp *cp)
{
    if (cp->left_fd >= 0) close(cp->left_fd);
    cp->left_fd = -1;
}

/* Reads and handles what the upstream sent. Returns 1 to go on, 0 when the connection closed
 * (EOF or error), -1 on a malformed message. */
static int agent_read(struct ftrt_ctx *ctx, ftrt__rxbuf *rx)
{
    ftrt__cp *cp = &ctx->cp;
    ssize_t got = ftrt__rx_fill(rx, cp->mv.state == FTRT__MV_MOVING ? cp->mv.fd : cp->fd);
    if (got == -EAGAIN) return 1;
    left_close(cp); /* the coordinator answered on the new connection (or ended it) */
    if (got <= 0) return 0;
    cp->last_from_coord = ftrt__now();
    ftrt__msghdr h;
    const void *payload;
    int r;
    while ((r = ftrt__rx_next(rx, &h, &payload)) == 1)
        if (handle(ctx, &h, payload)) return -1;
    if (cp->coord_lost) return 0; /* (its host agent then closes this rank's socket) */
    return r < 0 ? -1 : 1;
}

/* 1 when the job is over for this rank (an EOF then is no loss). */
static int agent_done(ftrt__cp *cp)
{
    pthread_mutex_lock(&cp->lock);
    int done = cp->stop || cp->shutdown || cp->farewell;
    pthread_mutex_unlock(&cp->lock);
    return done;
}

/* The upstream connection (fd) is replaced. A host agent's socket is not closed yet: it is
 * kept, unread, until the coordinator answers on the new connection (left_close, at the first
 * bytes there: the coordinator sends nothing on a connection before it took its HELLO, and
 * from then on counts this rank as no agent's). Closed at once, a host agent that was merely
 * stalled (and resumes, or is this very process, stopped and continued) could see it close
 * and report this rank RANK_LOST, "its socket closed: it died", before the coordinator read
 * the HELLO, and the coordinator would declare a live rank failed. Kept, the agent can see it
 * close only once the coordinator ignores what that agent says about this rank
 * (docs/detection-and-recovery.md "Host agents", Its death). Any other connection (the
 * coordinator's own) is closed at once. send_lock held. */
static void leave_agent(ftrt__cp *cp)
{
    left_close(cp);
    if (cp->fd >= 0 && cp->hosted && !cp->fell_back) cp->left_fd = cp->fd;
    else if (cp->fd >= 0) close(cp->fd);
    cp->fd = -1;
}

/* Connects to the control plane at addrs:port (the coordinator, or the standby coordinator that
 * takes over), says HELLO and sends again the newest REPORT, RESUMED, FINGERPRINT, BYE and
 * SHARD_DONEs (they may have been lost with the host agent, or with the coordinator). Returns 0
 * or -errno. */
static int reconnect(struct ftrt_ctx *ctx, ftrt__rxbuf *rx, const char *addrs, int port)
{
    ftrt__cp *cp = &ctx->cp;
    int fd = ftrt__connect_any(addrs, port, ctx->cfg.heartbeat_timeout_ms, NULL, 0);
    if (fd < 0) return fd;
    ftrt__hello hello = {.secret = cp->secret, .world_rank = ctx->world_rank,
                         .pid = (int32_t)getpid()};
    memcpy(hello.host, ctx->host, sizeof hello.host);
    pthread_mutex_lock(&cp->send_lock);
    leave_agent(cp);
    cp->fd = fd;
    cp->fell_back = 1;
    ftrt__move_reset(ctx, 1); /* (a move under way: its other socket) */
    int rc = ftrt__msg_send(fd, FTRT__MSG_HELLO, &hello, sizeof hello);
    /* REPORT, RESUMED, FINGERPRINT, the SHARD_DONEs oldest first (the coordinator decides them
     * in order), BYE last */
    static const int order[] = {0, 1, KEPT_FP, 10, 9, 8, 7, 6, 5, 4, 3, 2};
    _Static_assert(sizeof order / sizeof order[0] == 4 + FTRT__KEPT_SHARD, "kept's order");
    for (int i = 0; i < 4 + FTRT__KEPT_SHARD && !rc; i++) {
        int k = order[i];
        if (cp->kept[k].type) rc = ftrt__msg_send(fd, cp->kept[k].type, cp->kept[k].payload,
                                                  cp->kept[k].len);
    }
    pthread_mutex_unlock(&cp->send_lock);
    ftrt__rx_free(rx);
    cp->last_from_coord = ftrt__now();
    return rc;
}

/* The host agent serving this rank is lost: connects to the coordinator directly. */
static int fall_back(struct ftrt_ctx *ctx, ftrt__rxbuf *rx, const char *why)
{
    ftrt_log_warn("this host's agent is lost (%s): connecting to the coordinator directly", why);
    int rc = reconnect(ctx, rx, ctx->coord_addr, ctx->coord_port);
    if (rc == 0) ftrt__move_arm(ctx); /* a new host agent, later */
    return rc;
}

/* The standby taking over tells the old coordinator, where it can still be reached (a frozen
 * one that resumes reads it first): a SYNC_ACK of the next term, which it takes as its
 * deposition (runtime/coordinator/standby.c). Best effort. */
static void refuse_old(struct ftrt_ctx *ctx)
{
    ftrt__cp *cp = &ctx->cp;
    pthread_mutex_lock(&cp->send_lock);
    ftrt__epoch_msg m = {.epoch = cp->sb_at.term + 1, .value = -1};
    if (cp->fd >= 0) (void)ftrt__msg_send(cp->fd, FTRT__MSG_SYNC_ACK, &m, sizeof m);
    pthread_mutex_unlock(&cp->send_lock);
}

/* The coordinator is lost. This rank is the standby: it takes over (cp.takeover; the
 * application thread, waiting in spare_wait, runs the coordinator) and the agent ends: 1.
 * Else, with a standby known, this rank connects to it, which takes over, and sends its whole
 * timeline again (the standby holds the ledger's totals, not the intervals): 0. -errno when
 * there is no standby, or it cannot be reached. */
static int to_standby(struct ftrt_ctx *ctx, ftrt__rxbuf *rx, const char *why)
{
    ftrt__cp *cp = &ctx->cp;
    pthread_mutex_lock(&cp->send_lock);
    int standby = cp->sb_fd >= 0;
    ftrt__coord_at at = cp->next;
    cp->next.port = 0; /* used once: the new coordinator names its own standby */
    pthread_mutex_unlock(&cp->send_lock);
    if (standby) {
        ftrt_log_warn("lost the coordinator (%s): this standby takes over", why);
        refuse_old(ctx);
        pthread_mutex_lock(&cp->lock);
        cp->takeover = !strcmp(why, "silent") || cp->coord_lost == 2 ? 2 : 1;
        cp->takeover_heard = cp->last_from_coord;
        pthread_mutex_unlock(&cp->lock);
        return 1;
    }
    if (at.port <= 0 || at.world_rank == ctx->world_rank) return -ENOENT;
    ftrt_log_warn("lost the coordinator (%s): connecting to the standby coordinator (world rank "
                  "%d at %s port %d)", why, at.world_rank, at.addrs, at.port);
    int rc = reconnect(ctx, rx, at.addrs, at.port);
    if (rc) return rc;
    if (cp->term < at.term + 1) { /* the old coordinator's term is refused from now on */
        cp->term = at.term + 1;
        ftrt__msg_set_term(cp->term);
    }
    snprintf(ctx->coord_addr, sizeof ctx->coord_addr, "%s", at.addrs); /* agent thread's now */
    ctx->coord_port = at.port;
    cp->coord_lost = 0;
    ftrt__move_reset(ctx, 0);
    ftrt__move_arm(ctx); /* new host agents, later, served by the new coordinator */
    pthread_mutex_lock(&ctx->ledger_lock);
    ctx->ledger_sent = 0;
    pthread_mutex_unlock(&ctx->ledger_lock);
    return 0;
}

/* Seconds of silence after which the upstream is lost: the heartbeat timeout for the
 * coordinator; half of it for a host agent (then the coordinator is reached directly before
 * it would declare this rank's host silent). */
static double silence_limit(const ftrt_ctx *ctx)
{
    double t = ctx->cfg.heartbeat_timeout_ms / 1000.0;
    return ctx->cp.hosted && !ctx->cp.fell_back ? t / 2 : t;
}

/* One poll round over the upstream (MOVING: the old connection, read to its end first), the
 * wake pipe and, while ASKED, the new host agent. Returns 0 to go on, 1 to end the thread
 * (asked to stop, a poll error, a malformed message), or 2 with *lost saying why the upstream
 * is lost. */
static int agent_wait(struct ftrt_ctx *ctx, ftrt__rxbuf *rx, double next_hb, const char **lost)
{
    ftrt__cp *cp = &ctx->cp;
    int moving = cp->mv.state == FTRT__MV_MOVING, asked = cp->mv.state == FTRT__MV_ASKED;
    struct pollfd pf[3] = {{.fd = moving ? cp->mv.fd : cp->fd, .events = POLLIN},
                           {.fd = cp->wake[0], .events = POLLIN},
                           {.fd = asked ? cp->mv.fd : -1, .events = POLLIN}};
    int ms = (int)((next_hb - ftrt__now()) * 1000.0) + 1;
    int n = poll(pf, 3, ms < 0 ? 0 : ms);
    if (n < 0 && errno != EINTR) return 1;
    if (n > 0 && pf[1].revents) return 1; /* asked to stop */
    if (n > 0 && pf[2].revents && cp->mv.state == FTRT__MV_ASKED) ftrt__move_read(ctx);
    if (n > 0 && pf[0].revents) {
        int r = agent_read(ctx, rx);
        if (r < 0) {
            ftrt_log_error("malformed message from the coordinator; closing the control plane");
            return 1;
        }
        if (r == 0 && moving && !cp->coord_lost) { /* the old connection's end: moved */
            ftrt__move_end(ctx, rx);
            return 0;
        }
        *lost = r == 0 ? "connection closed" : NULL;
    } else if (ftrt__now() - cp->last_from_coord > silence_limit(ctx)) {
        /* A coordinator (or host agent) that is alive sends something every heartbeat
         * period; one that is frozen (or whose host is gone) is detected by silence. */
        *lost = "silent";
    }
    return *lost ? 2 : 0;
}

static void *agent_main(void *arg)
{
    struct ftrt_ctx *ctx = arg;
    ftrt__cp *cp = &ctx->cp;
    ftrt__rxbuf rx = {0};
    double next_hb = 0, next_ledger = 0;
    for (;;) {
        const char *lost = NULL;
        if (agent_tick(ctx, ftrt__now(), &next_hb, &next_ledger)) lost = "heartbeat send failed";
        ftrt__move_tick(ctx, ftrt__now());
        if (!lost && agent_wait(ctx, &rx, next_hb, &lost) == 1) break;
        if (!lost) continue;
        if (cp->hosted && !cp->fell_back && !cp->coord_lost && cp->fd >= 0)
            (void)agent_read(ctx, &rx); /* a COORD_LOST its host agent sent before it closed */
        if (agent_done(cp)) break; /* the job is over for us */
        int fatal = atomic_load(&ctx->watch.fatal) != 0;
        /* (a move under way, or left lately: the coordinator may have closed this rank's own
         * connection for it to come back on a new one) */
        int direct = (cp->hosted && !cp->fell_back) || ftrt__move_unsure(ctx, ftrt__now());
        if (direct && !cp->coord_lost && !fatal && fall_back(ctx, &rx, lost) == 0) continue;
        int sb = fatal ? -1 : to_standby(ctx, &rx, cp->coord_lost ? "its host agent lost it" : lost);
        if (sb == 0) continue;
        if (sb == 1) break;
        if (!strcmp(lost, "silent"))
            ftrt_log_error("no message from the coordinator for %d ms (FTRT_HEARTBEAT_TIMEOUT_MS)",
                           ctx->cfg.heartbeat_timeout_ms);
        else
            ftrt_log_warn("lost the coordinator (%s)", lost);
        break;
    }
    ftrt__rx_free(&rx);
    pthread_mutex_lock(&cp->lock);
    if (!cp->stop && !cp->shutdown && !cp->farewell && !cp->takeover) set_fatal(ctx, FTRT_ECOORD);
    pthread_cond_broadcast(&cp->cond);
    pthread_mutex_unlock(&cp->lock);
    ftrt__watch_fire(&ctx->watch);
    return NULL;
}

int ftrt__agent_start(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret)
{
    ftrt__cp *cp = &ctx->cp;
    cp->left_fd = -1;
    char used[64] = "this host's agent";
    int fd = ctx->cfg.host_agents
                 ? ftrt__local_upstream(ctx, addr, port, secret, ctx->cfg.init_timeout_ms, 0)
                 : -1;
    if (fd < 0) fd = ftrt__connect_any(addr, port, ctx->cfg.init_timeout_ms, used, sizeof used);
    if (fd < 0) {
        ftrt_log_error("cannot reach the coordinator at any of [%s] port %d within %d ms: %s "
                       "(set FTRT_COORD_ADDR to an address of the coordinator's host that every "
                       "host can reach)",
                       addr, port, ctx->cfg.init_timeout_ms, strerror(-fd));
        return fd;
    }
    ftrt_log_info("control plane: connected to the coordinator at %s (port %d)", used, port);
    cp->fd = fd;
    ftrt__hello hello = {.secret = secret, .world_rank = ctx->world_rank, .pid = (int32_t)getpid()};
    memcpy(hello.host, ctx->host, sizeof hello.host);
    int rc = ftrt__agent_send(ctx, FTRT__MSG_HELLO, &hello, sizeof hello);
    if (rc) return rc;
    return ftrt__agent_run(ctx, fd, secret);
}

int ftrt__agent_run(struct ftrt_ctx *ctx, int fd, uint64_t secret)
{
    ftrt__cp *cp = &ctx->cp;
    cp->fd = fd;
    cp->secret = secret;
    int rc;
    if (pipe2(cp->wake, O_CLOEXEC)) return -errno;
    cp->last_from_coord = ftrt__now();
    rc = pthread_create(&cp->thread, NULL, agent_main, ctx);
    if (rc) return -rc;
    cp->thread_started = 1;
    return 0;
}

void ftrt__agent_stop(struct ftrt_ctx *ctx)
{
    ftrt__cp *cp = &ctx->cp;
    pthread_mutex_lock(&cp->lock);
    cp->stop = 1;
    pthread_mutex_unlock(&cp->lock);
    if (cp->thread_started) {
        char c = 1;
        if (write(cp->wake[1], &c, 1) < 0) { /* the thread also ends on its own at EOF */ }
        pthread_join(cp->thread, NULL);
        cp->thread_started = 0;
    }
    ftrt__move_reset(ctx, 0);
    left_close(cp);
    free(cp->sync);
    cp->sync = NULL;
    if (cp->sb_fd >= 0) close(cp->sb_fd);
    cp->sb_fd = -1;
    if (cp->wake[0] >= 0) close(cp->wake[0]);
    if (cp->wake[1] >= 0) close(cp->wake[1]);
    cp->wake[0] = cp->wake[1] = -1;
    pthread_mutex_lock(&cp->send_lock);
    if (cp->fd >= 0) close(cp->fd);
    cp->fd = -1;
    pthread_mutex_unlock(&cp->send_lock);
    /* This process's host agent serves the host's other ranks until they are done too (each
     * closes its socket after its FAREWELL or SHUTDOWN), for a bounded time. */
    double wait_s = 2.0 * ctx->cfg.heartbeat_timeout_ms / 1000.0;
    ftrt__hostagent_stop(ctx->ha, wait_s > 2.0 ? wait_s : 2.0);
    ctx->ha = NULL;
}

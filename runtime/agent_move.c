/*
 * agent_move.c - a new host agent after one was lost, seen from a rank's agent thread
 * (docs/detection-and-recovery.md "Host agents", Its death).
 *
 * A rank whose host agent was lost fell back to its own connection to the coordinator
 * (agent.c). One heartbeat timeout later (FTRT_TEST_REELECT_MS), when the coordinator has long
 * taken the agent's loss, it elects a new host agent the way the first was chosen: the first
 * rank of the host to bind the host's local socket starts the host agent in its process, and
 * every rank connects to it and says HELLO (ASKED), while it keeps sending on its own
 * connection. The coordinator, seeing that HELLO relayed, answers MOVE on the rank's own
 * connection once no recovery is in flight; the rank then sends through the new agent only and
 * closes its own connection's sending side (MOVING), and reads that connection to its end
 * before it reads anything the coordinator relays through the agent: the coordinator's
 * messages keep their order, and its own are handled in order too (the coordinator holds what
 * the agent relays until it read the end of the rank's own connection:
 * runtime/coordinator/service.c "moves"). Nothing is sent twice, nothing is lost.
 *
 * When the new agent is lost on the way, the rank falls back again (a new connection of its
 * own, HELLO, the newest REPORT, RESUMED, BYE and SHARD_DONEs again), as after any agent's loss.
 *
 * After a standby coordinator's takeover the ranks that reached it directly elect the same way
 * (agent.c to_standby arms it): the standby marks its host as the coordinator's (context.c
 * take_over), so that host's ranks find the mark and stay direct.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/knobs.h"
#include "base/log.h"
#include "runtime/internal.h"

/* 1 when this rank may bind the host's local socket in this election (reelect: one after a
 * host agent was lost): always, unless a test's FTRT_TEST_AGENT_LATE_RANKS says otherwise. */
static int may_bind(const struct ftrt_ctx *ctx, int reelect)
{
    int32_t late = ftrt__knobs.agent_late_ranks;
    if (late <= 0 || ctx->world_rank < 0 || ctx->world_rank >= 30) return 1;
    return ((late >> ctx->world_rank) & 1) == reelect;
}

int ftrt__local_upstream(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret,
                         int init_timeout_ms, int reelect)
{
    uint64_t tag = ctx->local_tag; /* (the local sockets' names: base/net.h) */
    if (ftrt__local_marked(tag)) return -EEXIST;
    if (!may_bind(ctx, reelect)) /* (a test's choice: another rank of the host binds it; in an
                                  * election, one try: the agent thread does not wait) */
        return ftrt__local_connect(tag, reelect ? 0 : init_timeout_ms > 1000 ? init_timeout_ms
                                                                                 : 1000);
    int lfd = ftrt__local_listen(tag);
    if (lfd >= 0 && ctx->ha) { /* this process's earlier host agent: it has ended (an agent
                                * frees the host's socket only when it lost the coordinator) */
        ftrt__hostagent_stop(ctx->ha, 0);
        ctx->ha = NULL;
    }
    if (lfd >= 0) {
        ftrt__hostagent_args ha = {.secret = secret, .addrs = addr, .port = port,
                                   .world_rank = ctx->world_rank, .host = ctx->host,
                                   .heartbeat_ms = ctx->cfg.heartbeat_ms,
                                   .heartbeat_timeout_ms = ctx->cfg.heartbeat_timeout_ms,
                                   .init_timeout_ms = init_timeout_ms};
        int rc = ftrt__hostagent_start(&ctx->ha, lfd, &ha);
        if (rc) {
            ftrt_log_warn("cannot start this host's agent: %s", ftrt_strerror(rc));
            return rc;
        }
    } else if (lfd != -EADDRINUSE) {
        return lfd;
    }
    return ftrt__local_connect(tag, 1000);
}

/* Seconds from a fallback to the election, and between two attempts. */
static double reelect_delay(const struct ftrt_ctx *ctx)
{
    int ms = ftrt__knobs.reelect_ms > 0 ? ftrt__knobs.reelect_ms : ctx->cfg.heartbeat_timeout_ms;
    return ms / 1000.0;
}

void ftrt__move_arm(struct ftrt_ctx *ctx)
{
    ctx->cp.mv.reelect = ctx->cfg.host_agents;
    ctx->cp.mv.at = ftrt__now() + reelect_delay(ctx);
}

void ftrt__move_reset(struct ftrt_ctx *ctx, int reelect)
{
    ftrt__cp *cp = &ctx->cp;
    if (cp->mv.state != FTRT__MV_NONE) close(cp->mv.fd);
    cp->mv.fd = -1;
    ftrt__rx_free(&cp->mv.rx);
    cp->mv.state = FTRT__MV_NONE;
    cp->mv.agent_w = 0;
    cp->mv.left_until = 0;
    if (!reelect) cp->mv.reelect = 0;
}

/* Leaves an ASKED attempt (the new host agent is gone or never answered): the rank stays on
 * its own connection and tries again later. */
static void leave(struct ftrt_ctx *ctx, const char *why)
{
    ftrt__cp *cp = &ctx->cp;
    ftrt_log_info("no move to a new host agent: %s; staying on this rank's own connection", why);
    ftrt__move_reset(ctx, 1);
    double now = ftrt__now();
    cp->mv.left_until = now + 2.0 * ctx->cfg.heartbeat_timeout_ms / 1000.0;
    cp->mv.at = now + reelect_delay(ctx);
}

/* 1 when this rank may elect now: it fell back, it has not said BYE, and the job goes on for
 * it. */
static int may_elect(struct ftrt_ctx *ctx, double now)
{
    ftrt__cp *cp = &ctx->cp;
    if (!cp->mv.reelect || cp->mv.state != FTRT__MV_NONE || now < cp->mv.at) return 0;
    if (atomic_load(&ctx->watch.fatal) || cp->coord_lost) return 0;
    pthread_mutex_lock(&cp->send_lock);
    int bye = cp->kept[2].type != 0;
    pthread_mutex_unlock(&cp->send_lock);
    pthread_mutex_lock(&cp->lock);
    int over = cp->stop || cp->shutdown || cp->farewell || cp->takeover;
    pthread_mutex_unlock(&cp->lock);
    return !bye && !over;
}

/* The election: this host's local socket bound (the host agent started here) or found, and
 * HELLO sent to it. */
static void elect(struct ftrt_ctx *ctx, double now)
{
    ftrt__cp *cp = &ctx->cp;
    cp->mv.at = now + reelect_delay(ctx);
    int fd = ftrt__local_upstream(ctx, ctx->coord_addr, ctx->coord_port, cp->secret,
                                  ctx->cfg.heartbeat_timeout_ms / 2, 1);
    if (fd == -EEXIST) cp->mv.reelect = 0; /* the coordinator's host: no host agent here */
    if (fd < 0) return;
    ftrt__hello hello = {.secret = cp->secret, .world_rank = ctx->world_rank,
                         .pid = (int32_t)getpid()};
    memcpy(hello.host, ctx->host, sizeof hello.host);
    if (ftrt__msg_send(fd, FTRT__MSG_HELLO, &hello, sizeof hello)) {
        close(fd);
        return;
    }
    cp->mv.fd = fd;
    cp->mv.state = FTRT__MV_ASKED;
    cp->mv.since = now;
    cp->mv.agent_w = 0;
    ftrt_log_info("asked %s's host agent to serve this rank again", ctx->host);
}

void ftrt__move_tick(struct ftrt_ctx *ctx, double now)
{
    ftrt__cp *cp = &ctx->cp;
    if (may_elect(ctx, now)) elect(ctx, now);
    if (cp->mv.state == FTRT__MV_ASKED && !cp->mv.agent_w &&
        now - cp->mv.since > ctx->cfg.heartbeat_timeout_ms / 2000.0) {
        /* (this thread may be the late one: an answer that waits is read first) */
        struct pollfd pf = {.fd = cp->mv.fd, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) ftrt__move_read(ctx);
        if (cp->mv.state == FTRT__MV_ASKED && !cp->mv.agent_w)
            leave(ctx, "the host agent did not answer");
    }
}

void ftrt__move_beat(struct ftrt_ctx *ctx, const ftrt__heartbeat *hb)
{
    ftrt__cp *cp = &ctx->cp;
    if (cp->mv.state == FTRT__MV_ASKED && cp->mv.agent_w)
        (void)ftrt__msg_send(cp->mv.fd, FTRT__MSG_HEARTBEAT, hb, sizeof *hb); /* (a loss: read) */
}

void ftrt__move_read(struct ftrt_ctx *ctx)
{
    ftrt__cp *cp = &ctx->cp;
    ssize_t got = ftrt__rx_fill(&cp->mv.rx, cp->mv.fd);
    if (got == -EAGAIN) return;
    if (got <= 0) {
        leave(ctx, "the new host agent closed its socket");
        return;
    }
    ftrt__msghdr h;
    const void *p;
    int r;
    while ((r = ftrt__rx_next(&cp->mv.rx, &h, &p)) == 1) {
        if (h.type == FTRT__MSG_PING) continue;
        if (h.type != FTRT__MSG_HOSTED) { /* COORD_LOST: that agent ends; nothing else comes */
            leave(ctx, "the new host agent lost the coordinator");
            return;
        }
        ftrt__epoch_msg m;
        memcpy(&m, p, sizeof m);
        cp->mv.agent_w = m.value > 0 ? m.value : -1;
    }
    if (r < 0) leave(ctx, "a malformed message from the new host agent");
}

void ftrt__move_take(struct ftrt_ctx *ctx, const ftrt__epoch_msg *m)
{
    ftrt__cp *cp = &ctx->cp;
    if (cp->mv.state == FTRT__MV_ASKED && !cp->mv.agent_w) {
        /* its HOSTED went out before it relayed this rank's HELLO: it is here to read */
        struct pollfd pf = {.fd = cp->mv.fd, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) ftrt__move_read(ctx);
    }
    if (cp->mv.state != FTRT__MV_ASKED || m->value != cp->mv.agent_w) {
        ftrt_log_debug("a MOVE toward world rank %d's host agent ignored", m->value);
        return;
    }
    pthread_mutex_lock(&cp->send_lock);
    int own = cp->fd;
    cp->fd = cp->mv.fd;
    cp->mv.fd = own;
    cp->hosted = 1;
    cp->fell_back = 0;
    shutdown(own, SHUT_WR); /* the end of what this rank says there */
    pthread_mutex_unlock(&cp->send_lock);
    cp->mv.state = FTRT__MV_MOVING;
    cp->mv.reelect = 0;
}

void ftrt__move_end(struct ftrt_ctx *ctx, ftrt__rxbuf *rx)
{
    ftrt__cp *cp = &ctx->cp;
    close(cp->mv.fd);
    cp->mv.fd = -1;
    ftrt__rx_free(rx);
    *rx = cp->mv.rx;
    memset(&cp->mv.rx, 0, sizeof cp->mv.rx);
    cp->mv.state = FTRT__MV_NONE;
    cp->last_from_coord = ftrt__now();
    ftrt_log_info("served by %s's host agent in world rank %d again", ctx->host, cp->mv.agent_w);
}

int ftrt__move_unsure(const struct ftrt_ctx *ctx, double now)
{
    return ctx->cp.mv.state != FTRT__MV_NONE || now < ctx->cp.mv.left_until;
}

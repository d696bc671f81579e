/*
 * agent.c - the per-rank control-plane agent thread (trainers and spares).
 *
 * It connects to the coordinator, says hello with the job secret, sends a heartbeat every
 * heartbeat_ms carrying the rank's progress, and turns the coordinator's messages into shared
 * state that the application thread polls (two atomics) or waits on (cp.cond). It never calls
 * MPI. Losing the coordinator sets watch.fatal = FTRT_ECOORD.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/internal.h"

int ftrt__agent_send(struct ftrt_ctx *ctx, uint32_t type, const void *payload, uint32_t len)
{
    pthread_mutex_lock(&ctx->cp.send_lock);
    int rc = ctx->cp.fd >= 0 ? ftrt__msg_send(ctx->cp.fd, type, payload, len) : -ENOTCONN;
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
    free(m);
    if (rc == -ENOMEM) return 0;
    if (rc || p->members[p->logical_rank] != ctx->world_rank) {
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
    if (p->epoch > atomic_load(&ctx->watch.pending_epoch))
        atomic_store(&ctx->watch.pending_epoch, p->epoch);
    return 0;
}

/* Handles one message from the coordinator. Returns 0, or FTRT_EPROTO for a bad one. */
static int handle(struct ftrt_ctx *ctx, const ftrt__msghdr *h, const void *payload)
{
    ftrt__cp *cp = &ctx->cp;
    ftrt__epoch_msg em;
    ftrt__ckpt_msg cm;
    pthread_mutex_lock(&cp->lock);
    switch (h->type) {
    case FTRT__MSG_WELCOME:
        if (take_welcome(cp, payload)) set_fatal(ctx, -ENOMEM);
        break;
    case FTRT__MSG_FAILURE: {
        ftrt__failure_msg fm;
        memcpy(&fm, payload, sizeof fm);
        atomic_store(&cp->t_fail_wall, fm.t_fail_wall); /* before the epoch: waits read both */
        if (fm.epoch > atomic_load(&ctx->watch.pending_epoch))
            atomic_store(&ctx->watch.pending_epoch, fm.epoch);
        ftrt_log_info("epoch %d announced: a rank failed", fm.epoch);
        break;
    }
    case FTRT__MSG_PLAN:
        if (take_plan(ctx, payload, h->len)) {
            pthread_mutex_unlock(&cp->lock);
            return FTRT_EPROTO;
        }
        break;
    case FTRT__MSG_COMMIT:
        memcpy(&cm, payload, sizeof cm);
        cp->commit_step = cm.step;
        cp->commit_result = cm.result;
        cp->commit_seen++;
        if (cp->on_commit) cp->on_commit(cp->on_commit_arg, cm.step, cm.epoch, cm.result);
        break;
    case FTRT__MSG_SHUTDOWN:
    case FTRT__MSG_FAREWELL:
        memcpy(&em, payload, sizeof em);
        cp->ranks_lost = em.value;
        if (h->type == FTRT__MSG_SHUTDOWN)
            cp->shutdown = 1;
        else
            cp->farewell = 1;
        break;
    case FTRT__MSG_PING:
        break;
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

static void *agent_main(void *arg)
{
    struct ftrt_ctx *ctx = arg;
    ftrt__cp *cp = &ctx->cp;
    ftrt__rxbuf rx = {0};
    double next_hb = 0, next_ledger = 0;
    for (;;) {
        double now = ftrt__now();
        if (now >= next_hb) {
            ftrt__heartbeat hb = {.steps_done = atomic_load(&cp->steps_done),
                                  .waits = atomic_load(&cp->waits),
                                  .kept_s = atomic_load(&cp->kept_s),
                                  .compute_s = atomic_load(&cp->compute_s),
                                  .epoch = atomic_load(&ctx->watch.pending_epoch)};
            if (ftrt__agent_send(ctx, FTRT__MSG_HEARTBEAT, &hb, sizeof hb) && !cp->stop) {
                ftrt_log_warn("lost the coordinator (heartbeat send failed)");
                break;
            }
            next_hb = now + hb_period(ctx);
        }
        if (now >= next_ledger) { /* the finished part of this rank's timeline, once a second */
            if (cp->on_tick) cp->on_tick(ctx);
            next_ledger = now + (hb_period(ctx) > 1.0 ? hb_period(ctx) : 1.0);
        }
        struct pollfd pf[2] = {{.fd = cp->fd, .events = POLLIN}, {.fd = cp->wake[0], .events = POLLIN}};
        int ms = (int)((next_hb - ftrt__now()) * 1000.0) + 1;
        int n = poll(pf, 2, ms < 0 ? 0 : ms);
        if (n < 0 && errno != EINTR) break;
        if (pf[1].revents) break; /* asked to stop */
        if (n <= 0 || !pf[0].revents) {
            /* A coordinator that is alive sends something every heartbeat period; one that is
             * frozen (or whose host is gone) is detected by silence, like any rank. */
            if (ftrt__now() - cp->last_from_coord > ctx->cfg.heartbeat_timeout_ms / 1000.0) {
                ftrt_log_error("no message from the coordinator for %d ms (FTRT_HEARTBEAT_TIMEOUT_MS)",
                               ctx->cfg.heartbeat_timeout_ms);
                break;
            }
            continue;
        }
        ssize_t got = ftrt__rx_fill(&rx, cp->fd);
        if (got == -EAGAIN) continue;
        if (got <= 0) {
            pthread_mutex_lock(&cp->lock);
            int benign = cp->stop || cp->shutdown || cp->farewell; /* the job is over for us */
            pthread_mutex_unlock(&cp->lock);
            if (!benign) ftrt_log_warn("lost the coordinator (connection closed)");
            break;
        }
        cp->last_from_coord = ftrt__now();
        ftrt__msghdr h;
        const void *payload;
        int r;
        while ((r = ftrt__rx_next(&rx, &h, &payload)) == 1)
            if (handle(ctx, &h, payload)) {
                r = FTRT_EPROTO;
                break;
            }
        if (r < 0) {
            ftrt_log_error("malformed message from the coordinator; closing the control plane");
            break;
        }
    }
    ftrt__rx_free(&rx);
    pthread_mutex_lock(&cp->lock);
    if (!cp->stop && !cp->shutdown && !cp->farewell) set_fatal(ctx, FTRT_ECOORD);
    pthread_cond_broadcast(&cp->cond);
    pthread_mutex_unlock(&cp->lock);
    return NULL;
}

int ftrt__agent_start(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret)
{
    ftrt__cp *cp = &ctx->cp;
    char used[64];
    int fd = ftrt__connect_any(addr, port, ctx->cfg.init_timeout_ms, used, sizeof used);
    if (fd < 0) {
        ftrt_log_error("cannot reach the coordinator at any of [%s] port %d within %d ms: %s "
                       "(set FTRT_COORD_ADDR to an address of the coordinator's host that every "
                       "host can reach)",
                       addr, port, ctx->cfg.init_timeout_ms, strerror(-fd));
        return fd;
    }
    ftrt_log_info("control plane: connected to the coordinator at %s:%d", used, port);
    cp->fd = fd;
    ftrt__hello hello = {.secret = secret, .world_rank = ctx->world_rank, .pid = (int32_t)getpid()};
    memcpy(hello.host, ctx->host, sizeof hello.host);
    int rc = ftrt__agent_send(ctx, FTRT__MSG_HELLO, &hello, sizeof hello);
    if (rc) return rc;
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
    if (cp->wake[0] >= 0) close(cp->wake[0]);
    if (cp->wake[1] >= 0) close(cp->wake[1]);
    cp->wake[0] = cp->wake[1] = -1;
    pthread_mutex_lock(&cp->send_lock);
    if (cp->fd >= 0) close(cp->fd);
    cp->fd = -1;
    pthread_mutex_unlock(&cp->send_lock);
}

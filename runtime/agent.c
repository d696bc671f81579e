/*
 * agent.c - the per-rank control-plane agent thread (trainers and spares).
 *
 * It connects to the coordinator, says hello with the job secret, sends a heartbeat every
 * heartbeat_ms carrying the rank's progress, and turns the coordinator's messages into shared
 * state that the application thread polls (two atomics) or waits on (cp.cond). It never calls
 * MPI. Losing the coordinator sets watch.fatal = FTRT_ECOORD.
 *
 * With host agents (FTRT_HOST_AGENTS=1, docs/detection-and-recovery.md "Host agents") the
 * connection goes to this host's local socket: the first rank of the host to bind it runs the
 * host agent (runtime/hostagent.c) in a thread of its process, and every rank of the host, that
 * one included, talks to it as it would to the coordinator (on the coordinator's own host, which
 * the coordinator marks, ranks connect to it directly). A rank that learns it is served by a host agent (HOSTED) and
 * then loses it (the socket closes: the agent's process died; or silence for half the
 * heartbeat timeout: it froze) connects to the coordinator directly and says HELLO again; the
 * messages it may have lost with the agent (its newest REPORT, RESUMED, BYE, SHARD_DONEs) go
 * again, and the coordinator sends again what this rank may have missed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/knobs.h"
#include "base/log.h"
#include "runtime/internal.h"

/* The messages a rank sends again after losing its host agent: the newest of each kind (the
 * coordinator takes a repeat as it took the first). send_lock held. */
static void keep_sent(ftrt__cp *cp, uint32_t type, const void *payload, uint32_t len)
{
    int k = type == FTRT__MSG_REPORT ? 0 : type == FTRT__MSG_RESUMED ? 1
          : type == FTRT__MSG_BYE    ? 2 : type == FTRT__MSG_SHARD_DONE ? 3 : -1;
    if (k < 0 || len > sizeof cp->kept[0].payload) return;
    if (k == 3) { /* the two newest SHARD_DONEs: a checkpoint may be written while one commits */
        cp->kept[4] = cp->kept[3];
    }
    cp->kept[k].type = type;
    cp->kept[k].len = len;
    memcpy(cp->kept[k].payload, payload, len);
}

int ftrt__agent_send(struct ftrt_ctx *ctx, uint32_t type, const void *payload, uint32_t len)
{
    pthread_mutex_lock(&ctx->cp.send_lock);
    int rc = ctx->cp.fd >= 0 ? ftrt__msg_send(ctx->cp.fd, type, payload, len) : -ENOTCONN;
    if (ctx->cp.hosted) keep_sent(&ctx->cp, type, payload, len);
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
    cp->plan_t = ftrt__now();
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
        if (cp->stop || cp->shutdown || cp->farewell) break; /* the job is over for us */
        ftrt_log_warn("this host's agent lost the coordinator");
        set_fatal(ctx, FTRT_ECOORD);
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
        if (rc && !cp->stop) return -1;
        *next_hb = now + hb_period(ctx);
    }
    if (now >= *next_ledger) { /* the finished part of this rank's timeline, once a second */
        if (cp->on_tick) cp->on_tick(ctx);
        *next_ledger = now + (hb_period(ctx) > 1.0 ? hb_period(ctx) : 1.0);
    }
    return 0;
}

/* Reads and handles what the upstream sent. Returns 1 to go on, 0 when the connection closed
 * (EOF or error), -1 on a malformed message. */
static int agent_read(struct ftrt_ctx *ctx, ftrt__rxbuf *rx)
{
    ftrt__cp *cp = &ctx->cp;
    ssize_t got = ftrt__rx_fill(rx, cp->fd);
    if (got == -EAGAIN) return 1;
    if (got <= 0) return 0;
    cp->last_from_coord = ftrt__now();
    ftrt__msghdr h;
    const void *payload;
    int r;
    while ((r = ftrt__rx_next(rx, &h, &payload)) == 1)
        if (handle(ctx, &h, payload)) return -1;
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

/* The host agent serving this rank is lost: connects to the coordinator directly, says HELLO
 * and sends again what may have been lost with the agent. Returns 0 or -errno. */
static int fall_back(struct ftrt_ctx *ctx, ftrt__rxbuf *rx, const char *why)
{
    ftrt__cp *cp = &ctx->cp;
    ftrt_log_warn("this host's agent is lost (%s): connecting to the coordinator directly", why);
    int fd = ftrt__connect_any(ctx->coord_addr, ctx->coord_port, ctx->cfg.heartbeat_timeout_ms,
                               NULL, 0);
    if (fd < 0) return fd;
    ftrt__hello hello = {.secret = cp->secret, .world_rank = ctx->world_rank,
                         .pid = (int32_t)getpid()};
    memcpy(hello.host, ctx->host, sizeof hello.host);
    pthread_mutex_lock(&cp->send_lock);
    if (cp->fd >= 0) close(cp->fd);
    cp->fd = fd;
    cp->fell_back = 1;
    int rc = ftrt__msg_send(fd, FTRT__MSG_HELLO, &hello, sizeof hello);
    for (int k = 0; k < 5 && !rc; k++)
        if (cp->kept[k].type) rc = ftrt__msg_send(fd, cp->kept[k].type, cp->kept[k].payload,
                                                  cp->kept[k].len);
    pthread_mutex_unlock(&cp->send_lock);
    ftrt__rx_free(rx);
    cp->last_from_coord = ftrt__now();
    return rc;
}

/* Seconds of silence after which the upstream is lost: the heartbeat timeout for the
 * coordinator; half of it for a host agent (then the coordinator is reached directly before
 * it would declare this rank's host silent). */
static double silence_limit(const ftrt_ctx *ctx)
{
    double t = ctx->cfg.heartbeat_timeout_ms / 1000.0;
    return ctx->cp.hosted && !ctx->cp.fell_back ? t / 2 : t;
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
        struct pollfd pf[2] = {{.fd = cp->fd, .events = POLLIN}, {.fd = cp->wake[0], .events = POLLIN}};
        int ms = (int)((next_hb - ftrt__now()) * 1000.0) + 1;
        int n = lost ? 0 : poll(pf, 2, ms < 0 ? 0 : ms);
        if (n < 0 && errno != EINTR) break;
        if (pf[1].revents) break; /* asked to stop */
        if (!lost && n > 0 && pf[0].revents) {
            int r = agent_read(ctx, &rx);
            if (r < 0) {
                ftrt_log_error("malformed message from the coordinator; closing the control plane");
                break;
            }
            if (r == 0) lost = "connection closed";
        } else if (!lost && ftrt__now() - cp->last_from_coord > silence_limit(ctx)) {
            /* A coordinator (or host agent) that is alive sends something every heartbeat
             * period; one that is frozen (or whose host is gone) is detected by silence. */
            lost = "silent";
        }
        if (!lost) continue;
        if (agent_done(cp)) break; /* the job is over for us */
        if (cp->hosted && !cp->fell_back && !atomic_load(&ctx->watch.fatal) &&
            fall_back(ctx, &rx, lost) == 0)
            continue;
        if (!strcmp(lost, "silent"))
            ftrt_log_error("no message from the coordinator for %d ms (FTRT_HEARTBEAT_TIMEOUT_MS)",
                           ctx->cfg.heartbeat_timeout_ms);
        else
            ftrt_log_warn("lost the coordinator (%s)", lost);
        break;
    }
    ftrt__rx_free(&rx);
    pthread_mutex_lock(&cp->lock);
    if (!cp->stop && !cp->shutdown && !cp->farewell) set_fatal(ctx, FTRT_ECOORD);
    pthread_cond_broadcast(&cp->cond);
    pthread_mutex_unlock(&cp->lock);
    return NULL;
}

/* This host's local socket: binds it (and starts the host agent in this process) when no
 * process of the host holds it yet, then connects to it. Returns the fd, or -errno: the rank
 * then connects to the coordinator directly (as it does on the coordinator's host, which the
 * coordinator marks). */
static int local_upstream(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret)
{
    if (ftrt__local_marked(secret)) return -EEXIST;
    int lfd = ftrt__local_listen(secret);
    if (lfd >= 0) {
        ftrt__hostagent_args ha = {.secret = secret, .addrs = addr, .port = port,
                                   .world_rank = ctx->world_rank, .host = ctx->host,
                                   .heartbeat_ms = ctx->cfg.heartbeat_ms,
                                   .heartbeat_timeout_ms = ctx->cfg.heartbeat_timeout_ms,
                                   .init_timeout_ms = ctx->cfg.init_timeout_ms};
        int rc = ftrt__hostagent_start(&ctx->ha, lfd, &ha);
        if (rc) {
            ftrt_log_warn("cannot start this host's agent: %s", ftrt_strerror(rc));
            return rc;
        }
    } else if (lfd != -EADDRINUSE) {
        return lfd;
    }
    return ftrt__local_connect(secret, 1000);
}

int ftrt__agent_start(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret)
{
    ftrt__cp *cp = &ctx->cp;
    char used[64] = "this host's agent";
    int fd = ctx->cfg.host_agents ? local_upstream(ctx, addr, port, secret) : -1;
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
    cp->secret = secret;
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
    /* This process's host agent serves the host's other ranks until they are done too (each
     * closes its socket after its FAREWELL or SHUTDOWN), for a bounded time. */
    double wait_s = 2.0 * ctx->cfg.heartbeat_timeout_ms / 1000.0;
    ftrt__hostagent_stop(ctx->ha, wait_s > 2.0 ? wait_s : 2.0);
    ctx->ha = NULL;
}

/*
 * hostagent.c - the host agent: one per host, a thread in the process of the first rank of the
 * host that bound the host's local socket (runtime/agent.c; docs/detection-and-recovery.md
 * "Host agents" says why a thread and not a process of its own).
 *
 * It holds the host's one connection to the coordinator and serves the host's ranks over the
 * local socket, which speak to it exactly as they would to the coordinator:
 *   - a rank's HELLO is answered with HOSTED and relayed (RELAY); its HEARTBEATs are kept, and
 *     once per heartbeat period one HOST_BEAT carries the newest of every rank, so that the
 *     coordinator reads one message per host per period instead of one per rank; LEDGERs wait
 *     for that batch; every other message is relayed at once (a rank's messages keep their
 *     order);
 *   - the coordinator's RELAY (one rank) and MULTI (several) are delivered; a PING goes to each
 *     rank every period, the agent's own sign of life;
 *   - a rank whose socket closes without BYE (or a send to it finds it closed) died (the kernel
 *     closes a dead process's sockets at once; a rank that leaves this agent closes it only once
 *     the coordinator no longer counts it as this agent's): RANK_LOST goes out without waiting, with no coordinator in the detection's path;
 *     one silent for the heartbeat timeout is reported too, and cut off;
 *   - a rank the coordinator declared failed (CUT) has its socket closed: it learns it as it
 *     would from the coordinator's own connection; a CUT with fence also SIGKILLs its process
 *     through the pidfd taken when it connected (base/fence.h), which is how a failed rank of
 *     another host than the coordinator's is fenced; one the agent reported silent or
 *     malformed keeps its pidfd until the coordinator's CUT says whether to fence it. The
 *     agent's own process is never fenced from inside;
 *   - a coordinator lost (EOF, silence for the heartbeat timeout) is told to every rank
 *     (COORD_LOST), and the agent ends;
 *   - in the coordinator's relay groups (hostrelay.c) it listens for its group's host agents,
 *     and as a relay delivers a FANOUT's part for its host and sends the others on, as a
 *     member takes the MULTIs its relay sends as the coordinator's.
 * Its own death (its process died) closes the local socket under every rank of the host: each
 * connects to the coordinator directly (agent.c), which waits a short grace for them before it
 * calls them failed (runtime/coordinator/failure.c). It never calls MPI.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/fence.h"
#include "base/log.h"
#include "runtime/internal.h"

typedef struct local {
    int fd;
    ftrt__rxbuf rx;
    int w;             /* world rank once it said HELLO, else 0 */
    int bye;           /* it said BYE: its socket closing is no loss */
    int has_hb;
    double last_heard; /* monotonic */
    ftrt__heartbeat hb;
    pid_t pid;         /* its process (SO_PEERCRED), 0 if unknown */
    int pidfd;         /* a pidfd for it, or -1 (base/fence.h) */
} local;

/* A rank reported lost while it may still be alive (silent, malformed): its socket is closed,
 * its process kept until the coordinator's CUT says whether to fence it. */
typedef struct unjudged {
    int w;
    pid_t pid;
    int pidfd;
} unjudged;

struct ftrt__hostagent {
    ftrt__hostagent_args a;
    char addrs[FTRT__ADDRS_MAX], host[FTRT__HOST_MAX];
    int lfd, up, wake[2];
    ftrt__rxbuf up_rx;
    ftrt__txbuf urgent, lazy; /* to the coordinator: now / with the next HOST_BEAT */
    local *loc;
    int nloc, cap;
    unjudged *uj;             /* reported lost, awaiting their CUT */
    int nuj, ujcap;
    int hb_ms;                /* the period the coordinator's WELCOMEs ask for */
    int term;                 /* the newest coordinator term seen: older ones are refused */
    int lost_by_silence;      /* the coordinator was lost by silence, not EOF */
    double last_from_coord, next_beat;
    ftrt__hrelay relay;       /* the relay groups (hostrelay.c) */
    pthread_t th;
    int started;
    _Atomic int draining;
    _Atomic double drain_until;
};

/* ---- toward the coordinator ---------------------------------------------------------------- */

/* Queues a rank's message for the coordinator (RELAY): urgent ones after everything lazy
 * buffered so far (a rank's messages keep their order). Returns 0 or -ENOMEM. */
static int relay_up(struct ftrt__hostagent *ha, int w, const ftrt__msghdr *h, const void *p,
                    int lazy)
{
    ftrt__relay pre = {.world_rank = w};
    if (lazy) return ftrt__tx_put(&ha->lazy, FTRT__MSG_RELAY, &pre, sizeof pre, h->type, p, h->len);
    if (ftrt__tx_move(&ha->urgent, &ha->lazy)) return -ENOMEM;
    return ftrt__tx_put(&ha->urgent, FTRT__MSG_RELAY, &pre, sizeof pre, h->type, p, h->len);
}

static void rank_lost(struct ftrt__hostagent *ha, int w, int why)
{
    ftrt__rank_lost m = {.world_rank = w, .why = why, .t_wall = ftrt__wallclock()};
    ftrt__tx_put(&ha->urgent, FTRT__MSG_RANK_LOST, &m, sizeof m, 0, NULL, 0);
}

/* One HOST_BEAT with the newest heartbeat of every rank served (none yet: an empty one, the
 * agent's own sign of life), after the LEDGERs that waited for it. */
static void beat(struct ftrt__hostagent *ha)
{
    size_t len = sizeof(ftrt__host_beat) + (size_t)ha->nloc * sizeof(ftrt__beat);
    ftrt__host_beat *b = calloc(1, len);
    if (!b) return; /* the next period's */
    for (int i = 0; i < ha->nloc; i++) {
        const local *l = &ha->loc[i];
        if (l->w > 0 && !l->bye && l->has_hb)
            b->e[b->n++] = (ftrt__beat){.world_rank = l->w, .hb = l->hb};
    }
    if (ftrt__tx_move(&ha->urgent, &ha->lazy) == 0)
        ftrt__tx_put(&ha->urgent, FTRT__MSG_HOST_BEAT, b,
                 (uint32_t)(sizeof *b + (size_t)b->n * sizeof(ftrt__beat)), 0, NULL, 0);
    free(b);
}

/* ---- the ranks of the host ----------------------------------------------------------------- */

/* Closes rank slot i (the last slot moves into it). */
static void drop_local(struct ftrt__hostagent *ha, int i)
{
    close(ha->loc[i].fd);
    if (ha->loc[i].pidfd >= 0) close(ha->loc[i].pidfd);
    ftrt__rx_free(&ha->loc[i].rx);
    ha->loc[i] = ha->loc[--ha->nloc];
}

/* Keeps rank slot l's process (its pidfd moves out of the slot) until the coordinator's CUT
 * for it. Without room it is forgotten: the rank is then not fenced (logged). */
static void await_cut(struct ftrt__hostagent *ha, local *l)
{
    if (ha->nuj == ha->ujcap) {
        int nc = ha->ujcap ? 2 * ha->ujcap : 4;
        unjudged *n = realloc(ha->uj, (size_t)nc * sizeof *n);
        if (!n) {
            ftrt_log_warn("host agent: out of memory: world rank %d will not be fenced", l->w);
            return;
        }
        ha->uj = n;
        ha->ujcap = nc;
    }
    ha->uj[ha->nuj++] = (unjudged){.w = l->w, .pid = l->pid, .pidfd = l->pidfd};
    l->pidfd = -1;
}

/* Rank slot i is gone: its socket closed, a send to it failed, or it was silent or malformed.
 * Reported unless it said BYE (or never said HELLO); one that may still be alive (not a closed
 * socket: its process died) awaits the coordinator's CUT. */
static void lose_local(struct ftrt__hostagent *ha, int i, int why)
{
    local *l = &ha->loc[i];
    if (l->w > 0 && !l->bye) {
        rank_lost(ha, l->w, why);
        ftrt_log_warn("host agent: world rank %d %s", l->w,
                      why == FTRT__LOST_CLOSED   ? "closed its socket without BYE (it died)"
                      : why == FTRT__LOST_SILENT ? "fell silent"
                                                 : "sent a malformed message");
        if (why != FTRT__LOST_CLOSED) await_cut(ha, l);
    }
    drop_local(ha, i);
}

/* The coordinator's CUT for world rank w: its socket closed (if still open) and, with fence,
 * its process SIGKILLed (never this process: ftrt__fence refuses). */
static void cut_local(struct ftrt__hostagent *ha, int w, int fence)
{
    for (int i = 0; i < ha->nloc; i++)
        if (ha->loc[i].w == w) { /* declared failed: no report of its close */
            if (fence) ftrt__fence(w, ha->loc[i].pid, ha->loc[i].pidfd, "host agent");
            drop_local(ha, i);
            return;
        }
    for (int j = 0; j < ha->nuj; j++)
        if (ha->uj[j].w == w) {
            if (fence) ftrt__fence(w, ha->uj[j].pid, ha->uj[j].pidfd, "host agent");
            if (ha->uj[j].pidfd >= 0) close(ha->uj[j].pidfd);
            ha->uj[j] = ha->uj[--ha->nuj];
            return;
        }
}

static void accept_locals(struct ftrt__hostagent *ha)
{
    for (;;) {
        int fd = accept4(ha->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) return;
        /* Blocking sends, bounded: a rank that does not read for this long is frozen (reads
         * never block: ftrt__rx_fill uses MSG_DONTWAIT). */
        struct timeval tv = {0, 500000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (ha->nloc == ha->cap) {
            int nc = ha->cap ? 2 * ha->cap : 16;
            local *n = realloc(ha->loc, (size_t)nc * sizeof *n);
            if (!n) {
                close(fd);
                continue;
            }
            ha->loc = n;
            ha->cap = nc;
        }
        local *l = &ha->loc[ha->nloc++];
        *l = (local){.fd = fd, .last_heard = ftrt__now()};
        ftrt__peer_process(fd, &l->pid, &l->pidfd); /* (unknown: such a rank is not fenced) */
    }
}

/* Sends one message to a rank (within its socket's send timeout). Returns 0 or -errno. */
static int to_local(local *l, uint32_t type, const void *p, uint32_t len)
{
    return ftrt__msg_send(l->fd, type, p, len);
}

/* Why a rank is lost when a send to it failed with rc: its socket closed (-EPIPE, -ECONNRESET:
 * its process died, or it left this agent: never fenced), else the send timed out on a full
 * socket (a rank that does not read: frozen, reported silent and kept for its CUT). */
static int send_lost_why(int rc)
{
    return rc == -EPIPE || rc == -ECONNRESET ? FTRT__LOST_CLOSED : FTRT__LOST_SILENT;
}

/* A rank's HELLO: it must carry the job's secret. Returns 0 or FTRT_EPROTO. */
static int local_hello(struct ftrt__hostagent *ha, local *l, const ftrt__msghdr *h, const void *p)
{
    ftrt__hello hello;
    if (h->type != FTRT__MSG_HELLO || h->len != sizeof hello) return FTRT_EPROTO;
    memcpy(&hello, p, sizeof hello);
    if (hello.secret != ha->a.secret || hello.world_rank < 1 || hello.world_rank >= FTRT__MAX_WORLD)
        return FTRT_EPROTO;
    l->w = hello.world_rank;
    ftrt__epoch_msg m = {.value = ha->a.world_rank};
    if (to_local(l, FTRT__MSG_HOSTED, &m, sizeof m)) return FTRT_EPROTO;
    return relay_up(ha, l->w, h, p, 0) ? FTRT_EPROTO : 0;
}

/* One message from rank slot l. Returns 0 or FTRT_EPROTO. */
static int local_msg(struct ftrt__hostagent *ha, local *l, const ftrt__msghdr *h, const void *p)
{
    if (l->w == 0) return local_hello(ha, l, h, p);
    switch (h->type) {
    case FTRT__MSG_HEARTBEAT:
        memcpy(&l->hb, p, sizeof l->hb);
        l->has_hb = 1;
        return 0;
    case FTRT__MSG_LEDGER: return relay_up(ha, l->w, h, p, 1) ? FTRT_EPROTO : 0;
    case FTRT__MSG_BYE: l->bye = 1; /* fall through */
    case FTRT__MSG_REPORT:
    case FTRT__MSG_RESUMED:
    case FTRT__MSG_SHARD_DONE:
    case FTRT__MSG_STANDBY_AT:
    case FTRT__MSG_SYNC_ACK:
    case FTRT__MSG_FINGERPRINT: return relay_up(ha, l->w, h, p, 0) ? FTRT_EPROTO : 0;
    default: return FTRT_EPROTO;
    }
}

/* Reads rank slot i. Returns 0, or 1 when the slot was dropped. */
static int local_read(struct ftrt__hostagent *ha, int i)
{
    local *l = &ha->loc[i];
    ssize_t got = ftrt__rx_fill(&l->rx, l->fd);
    if (got == -EAGAIN) return 0;
    if (got <= 0) {
        lose_local(ha, i, FTRT__LOST_CLOSED);
        return 1;
    }
    l->last_heard = ftrt__now();
    ftrt__msghdr h;
    const void *p;
    int r;
    while ((r = ftrt__rx_next(&l->rx, &h, &p)) == 1)
        if (local_msg(ha, l, &h, p)) {
            r = -1;
            break;
        }
    if (r < 0) {
        lose_local(ha, i, FTRT__LOST_PROTOCOL);
        return 1;
    }
    return 0;
}

/* ---- from the coordinator ------------------------------------------------------------------ */

/* Delivers one message to world rank w of this host (a WELCOME also tells the period). */
static void deliver(struct ftrt__hostagent *ha, int w, const ftrt__msghdr *h, const void *p)
{
    if (h->type == FTRT__MSG_WELCOME) {
        ftrt__welcome wm;
        memcpy(&wm, p, sizeof wm);
        if (wm.heartbeat_ms > 0) ha->hb_ms = wm.heartbeat_ms;
    }
    for (int i = 0; i < ha->nloc; i++)
        if (ha->loc[i].w == w) {
            int rc = to_local(&ha->loc[i], h->type, p, h->len);
            if (rc) lose_local(ha, i, send_lost_why(rc));
            return;
        }
}

/* A MULTI's (or a FANOUT part's) message to n world ranks of this host (unaligned list). */
static void deliver_multi(void *arg, int n, const int32_t *ws, const ftrt__msghdr *h,
                          const void *p)
{
    for (int i = 0; i < n; i++) {
        int32_t w;
        memcpy(&w, ws + i, sizeof w);
        deliver(arg, w, h, p);
    }
}

/* One message from the coordinator. A message of an older term than one seen is refused
 * (dropped: a deposed coordinator's); this thread's messages carry the newest. Returns 0 or
 * FTRT_EPROTO. */
static int up_msg(struct ftrt__hostagent *ha, const ftrt__msghdr *h, const void *p)
{
    int32_t w, n;
    const int32_t *ws;
    ftrt__msghdr ih;
    const void *inner;
    if (h->term < ha->term) {
        ftrt_log_warn("host agent: refused a coordinator's message (type %u) of term %d (term "
                      "%d seen)", h->type, h->term, ha->term);
        return 0;
    }
    if (h->term > ha->term) ftrt__msg_set_term(ha->term = h->term);
    switch (h->type) {
    case FTRT__MSG_PING: return 0;
    case FTRT__MSG_CUT: {
        ftrt__cut cut;
        memcpy(&cut, p, sizeof cut);
        cut_local(ha, cut.world_rank, cut.fence);
        return 0;
    }
    case FTRT__MSG_RELAY:
        if (ftrt__relay_open(p, h->len, &w, &ih, &inner)) return FTRT_EPROTO;
        deliver(ha, w, &ih, inner);
        return 0;
    case FTRT__MSG_MULTI:
        if (ftrt__multi_open(p, h->len, &n, &ws, &ih, &inner)) return FTRT_EPROTO;
        deliver_multi(ha, n, ws, &ih, inner);
        return 0;
    case FTRT__MSG_FANOUT: return ftrt__hrelay_fanout(&ha->relay, p, h->len, deliver_multi, ha);
    case FTRT__MSG_RELAY_VIA: {
        ftrt__coord_at at;
        memcpy(&at, p, sizeof at);
        ftrt__hrelay_via(&ha->relay, &at, ha->host);
        return 0;
    }
    default: return FTRT_EPROTO;
    }
}

/* A MULTI from this agent's relay: taken as the coordinator's (its term checked). */
static int from_relay(void *arg, const ftrt__msghdr *h, const void *p)
{
    return up_msg(arg, h, p);
}

/* Reads the coordinator's connection. Returns 0, or -1 when the coordinator is lost. */
static int up_read(struct ftrt__hostagent *ha)
{
    ssize_t got = ftrt__rx_fill(&ha->up_rx, ha->up);
    if (got == -EAGAIN) return 0;
    if (got <= 0) return -1;
    ha->last_from_coord = ftrt__now();
    ftrt__msghdr h;
    const void *p;
    int r;
    while ((r = ftrt__rx_next(&ha->up_rx, &h, &p)) == 1)
        if (up_msg(ha, &h, p)) return -1;
    return r < 0 ? -1 : 0;
}

/* ---- the thread ---------------------------------------------------------------------------- */

/* Once per heartbeat period: the HOST_BEAT, a PING to each rank, the silent ranks. */
static void periodic(struct ftrt__hostagent *ha, double now)
{
    if (now < ha->next_beat) return;
    double period = ha->hb_ms / 1000.0, limit = ha->a.heartbeat_timeout_ms / 1000.0;
    ha->next_beat = now + period;
    beat(ha);
    ftrt__epoch_msg ping = {0};
    for (int i = 0; i < ha->nloc; i++) {
        local *l = &ha->loc[i];
        int silent = l->w > 0 && !l->bye && now - l->last_heard > limit;
        int rc = silent ? 0 : to_local(l, FTRT__MSG_PING, &ping, sizeof ping);
        if (silent || rc) lose_local(ha, i--, silent ? FTRT__LOST_SILENT : send_lost_why(rc));
    }
}

/* One round of poll over the wake pipe, the local socket, the coordinator and the ranks.
 * Returns 0, or -1 when the coordinator is lost. */
static int serve_once(struct ftrt__hostagent *ha, struct pollfd *pf)
{
    int draining = atomic_load(&ha->draining);
    int nr = ftrt__hrelay_pollfds(&ha->relay, pf + 3), nfix = 3 + nr, n = nfix + ha->nloc;
    pf[0] = (struct pollfd){.fd = ha->wake[0], .events = POLLIN};
    pf[1] = (struct pollfd){.fd = draining ? -1 : ha->lfd, .events = POLLIN};
    pf[2] = (struct pollfd){.fd = ha->up, .events = POLLIN};
    for (int i = 0; i < ha->nloc; i++) pf[nfix + i] = (struct pollfd){.fd = ha->loc[i].fd, .events = POLLIN};
    int ms = (int)((ha->next_beat - ftrt__now()) * 1000.0) + 1;
    if (poll(pf, (nfds_t)n, ms < 0 ? 0 : ms) < 0 && errno != EINTR) return -1;
    if (pf[0].revents) {
        char buf[16];
        if (read(ha->wake[0], buf, sizeof buf) < 0) { /* drained below either way */ }
    }
    if (pf[1].revents) accept_locals(ha);
    /* (slots accepted just now are read next round; a dropped slot's successor moved into
     * it, so slots are visited from the end) */
    for (int i = (n - nfix < ha->nloc ? n - nfix : ha->nloc) - 1; i >= 0; i--)
        if (pf[nfix + i].revents) local_read(ha, i);
    if (pf[2].revents && up_read(ha)) return -1;
    ftrt__hrelay_serve(&ha->relay, pf + 3, nr, ha->a.heartbeat_timeout_ms / 1000.0, from_relay, ha);
    double now = ftrt__now();
    periodic(ha, now);
    if (now - ha->last_from_coord > ha->a.heartbeat_timeout_ms / 1000.0) {
        ha->lost_by_silence = 1;
        return -1;
    }
    return ftrt__tx_flush(ha->up, &ha->urgent) ? -1 : 0;
}

/* The coordinator is lost: every rank is told (COORD_LOST: epoch 2 when by silence, else 1)
 * and its socket closed. */
static void coord_lost(struct ftrt__hostagent *ha)
{
    ftrt__epoch_msg m = {.epoch = ha->lost_by_silence ? 2 : 1, .value = FTRT_ECOORD};
    for (int i = 0; i < ha->nloc; i++) to_local(&ha->loc[i], FTRT__MSG_COORD_LOST, &m, sizeof m);
}

static void *hostagent_main(void *arg)
{
    struct ftrt__hostagent *ha = arg;
    struct pollfd *pf = NULL;
    int lost = 0;
    for (;;) {
        if (atomic_load(&ha->draining) &&
            (ha->nloc == 0 || ftrt__now() > atomic_load(&ha->drain_until)))
            break;
        struct pollfd *np = realloc(pf, (size_t)(5 + ha->relay.npeer + ha->nloc) * sizeof *pf);
        if (!np) break;
        pf = np;
        if (serve_once(ha, pf)) {
            lost = 1;
            break;
        }
    }
    if (lost && !atomic_load(&ha->draining)) {
        ftrt_log_warn("host agent: lost the coordinator; telling this host's %d rank(s)", ha->nloc);
        coord_lost(ha);
    }
    free(pf);
    while (ha->nloc > 0) drop_local(ha, ha->nloc - 1);
    if (lost) { /* the host's local socket and relay listener free for an election's agent */
        if (ha->lfd >= 0) close(ha->lfd);
        ha->lfd = -1;
        ftrt__hrelay_close(&ha->relay);
    }
    return NULL;
}

/* Connects to the coordinator and says HOST_HELLO. Returns 0 or -errno. */
static int connect_up(struct ftrt__hostagent *ha)
{
    ha->up = ftrt__connect_any(ha->addrs, ha->a.port, ha->a.init_timeout_ms, NULL, 0);
    if (ha->up < 0) return ha->up;
    ftrt__hello hello = {.secret = ha->a.secret, .world_rank = ha->a.world_rank,
                         .pid = (int32_t)getpid()};
    memcpy(hello.host, ha->host, sizeof hello.host);
    ha->last_from_coord = ftrt__now();
    return ftrt__msg_send(ha->up, FTRT__MSG_HOST_HELLO, &hello, sizeof hello);
}

static void hostagent_free(struct ftrt__hostagent *ha)
{
    if (ha->lfd >= 0) close(ha->lfd);
    if (ha->up >= 0) close(ha->up);
    ftrt__hrelay_close(&ha->relay);
    for (int i = 0; i < 2; i++)
        if (ha->wake[i] >= 0) close(ha->wake[i]);
    while (ha->nloc > 0) drop_local(ha, ha->nloc - 1);
    free(ha->loc);
    for (int j = 0; j < ha->nuj; j++)
        if (ha->uj[j].pidfd >= 0) close(ha->uj[j].pidfd);
    free(ha->uj);
    ftrt__rx_free(&ha->up_rx);
    ftrt__tx_free(&ha->urgent);
    ftrt__tx_free(&ha->lazy);
    free(ha);
}

int ftrt__hostagent_start(struct ftrt__hostagent **out, int lfd, const ftrt__hostagent_args *a)
{
    *out = NULL;
    struct ftrt__hostagent *ha = calloc(1, sizeof *ha);
    if (!ha) {
        close(lfd);
        return -ENOMEM;
    }
    ha->a = *a;
    snprintf(ha->addrs, sizeof ha->addrs, "%s", a->addrs);
    snprintf(ha->host, sizeof ha->host, "%s", a->host);
    ha->a.addrs = ha->addrs;
    ha->a.host = ha->host;
    ha->lfd = lfd;
    ha->up = ha->wake[0] = ha->wake[1] = -1;
    ha->relay.lfd = ha->relay.via_fd = -1;
    ha->hb_ms = a->heartbeat_ms > 0 ? a->heartbeat_ms : 100;
    int rc = fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK) || pipe2(ha->wake, O_CLOEXEC)
                 ? -errno
                 : connect_up(ha);
    if (!rc && ftrt__hrelay_open(&ha->relay, a->secret, a->world_rank, &ha->urgent))
        ftrt_log_info("host agent: no relay listener; fan-outs to this host stay direct");
    if (!rc) rc = -pthread_create(&ha->th, NULL, hostagent_main, ha);
    if (rc) {
        ftrt_log_error("host agent: cannot start: %s", ftrt_strerror(rc));
        hostagent_free(ha);
        return rc;
    }
    ha->started = 1;
    ftrt_log_info("host agent of %s runs in world rank %d", ha->host, a->world_rank);
    *out = ha;
    return 0;
}

void ftrt__hostagent_stop(struct ftrt__hostagent *ha, double wait_s)
{
    if (!ha) return;
    atomic_store(&ha->drain_until, ftrt__now() + wait_s);
    atomic_store(&ha->draining, 1);
    char c = 1;
    if (write(ha->wake[1], &c, 1) < 0) { /* the thread also ends at its next period */ }
    if (ha->started) pthread_join(ha->th, NULL);
    hostagent_free(ha);
}

/*
 * conn.c - the coordinator's connections: sends, the silence watch, the PINGs that tell every
 * rank the coordinator is alive, and the listener with the connections that have not said a
 * valid HELLO yet.
 *
 * At scale (docs/detection-and-recovery.md "Control plane", bench/coord_load.c) every piece is
 * O(1) per message: the silence watch is a list of the connected ranks ordered by the time each
 * was last heard, so only its head is ever compared with the timeout; the PINGs of a period are
 * spread over it in batches at most 2 ms apart, and long fan-outs keep them going
 * (ftrt__fanout_pump).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/coordinator/coord.h"

void ftrt__coord_send(ftrt__coord *c, int w, uint32_t type, const void *p, uint32_t len)
{
    if (c->r[w].fd < 0) return;
    int rc = ftrt__msg_send(c->r[w].fd, type, p, len);
    if (rc) ftrt_log_debug("send to world rank %d failed: %s", w, ftrt_strerror(rc));
}

void ftrt__coord_drop(ftrt__coord *c, int w)
{
    ftrt__silence_remove(c, w);
    if (c->r[w].fd >= 0) close(c->r[w].fd); /* (which also takes it out of the epoll set) */
    c->r[w].fd = -1;
    ftrt__rx_free(&c->r[w].rx);
}

/* ---- the silence watch: connected ranks ordered by last_heard, oldest first -------------- */

void ftrt__silence_remove(ftrt__coord *c, int w)
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

void ftrt__silence_touch(ftrt__coord *c, int w)
{
    ftrt__silence_remove(c, w);
    ftrt__crank *r = &c->r[w];
    r->watch_prev = c->watch_tail;
    r->watch_next = 0;
    if (c->watch_tail) c->r[c->watch_tail].watch_next = w;
    else c->watch_head = w;
    c->watch_tail = w;
    r->watched = 1;
}

/* ---- PINGs ------------------------------------------------------------------------------- */

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

/* Rank w gets its PING at the fraction (w - 1) / (W - 1) of the round, so that they are spread
 * over the period instead of going out W at once (which at 16,384 ranks held the loop for tens
 * of ms). */
void ftrt__ping_due(ftrt__coord *c, double now)
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
                ftrt__coord_send(c, c->ping_next, FTRT__MSG_PING, &m, sizeof m);
        if (frac < 1) return;
        c->ping_round += period;
        if (now - c->ping_round >= period) c->ping_round = now; /* fell behind: start again */
        c->ping_next = 1;
    }
}

void ftrt__fanout_pump(ftrt__coord *c, int k)
{
    if ((k & 255) == 255) ftrt__ping_due(c, ftrt__now());
}

int ftrt__coord_wait_ms(const ftrt__coord *c, double now)
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

/* ---- the listener and the connections without a hello yet ------------------------------- */

typedef struct pending {
    int fd;
    ftrt__rxbuf rx;
    double since;
} pending;

typedef struct ftrt__listener {
    int fd;
    uint64_t secret;
    pending *pend;      /* npend slots */
    int *pfree;         /* free slot indices, nfree of them */
    int npend, nfree, nopen;
    double last_check;  /* monotonic: the last expiry scan */
} ftrt__listener;

int ftrt__listener_open(ftrt__coord *c, int listen_fd, int naddr, uint64_t secret)
{
    ftrt__listener *l = calloc(1, sizeof *l);
    if (!l) {
        close(listen_fd);
        return -ENOMEM;
    }
    c->lis = l;
    l->fd = listen_fd;
    l->secret = secret;
    l->npend = c->W * (naddr > 0 ? naddr : 1);
    l->pend = calloc((size_t)l->npend, sizeof *l->pend);
    l->pfree = calloc((size_t)l->npend, sizeof *l->pfree);
    if (!l->pend || !l->pfree) return -ENOMEM;
    for (int k = l->npend - 1; k >= 0; k--) {
        l->pend[k].fd = -1;
        l->pfree[l->nfree++] = k;
    }
    int fl = fcntl(listen_fd, F_GETFL);
    if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK)) return -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = FTRT__KEY(FTRT__KEY_LISTEN, 0)};
    if (epoll_ctl(c->ep, EPOLL_CTL_ADD, listen_fd, &ev)) return -errno;
    return 0;
}

/* Frees pending slot k (its connection already closed or handed over). */
static void pending_free(ftrt__listener *l, int k)
{
    l->pend[k].fd = -1;
    l->pfree[l->nfree++] = k;
    l->nopen--;
}

/* Accepts the connections waiting on the (nonblocking) listener into free pending slots
 * (TCP_NODELAY: the coordinator's messages are small and latency-bound). The listener stays
 * open for the whole job: later connections can never join (every world rank has said hello),
 * but they are read, rejected and counted. */
void ftrt__listener_accept(ftrt__coord *c)
{
    ftrt__listener *l = c->lis;
    for (;;) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN: none left (or an error the next readiness retries) */
        if (l->nfree == 0) {
            close(fd);
            c->rejected_connections++;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int slot = l->pfree[--l->nfree];
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = FTRT__KEY(FTRT__KEY_PENDING, slot)};
        if (epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev)) {
            close(fd);
            l->pfree[l->nfree++] = slot;
            continue;
        }
        l->pend[slot].fd = fd;
        l->pend[slot].since = ftrt__now();
        l->nopen++;
    }
}

/* A valid HELLO from world rank w on pending connection p: it becomes w's connection. */
static void adopt(ftrt__coord *c, pending *p, const ftrt__hello *hello)
{
    int w = hello->world_rank;
    ftrt__crank *r = &c->r[w];
    r->fd = p->fd;
    r->rx = p->rx; /* bytes after the HELLO stay in r->rx for ftrt__service() */
    r->hello = 1;
    r->pid = hello->pid;
    memcpy(r->host, hello->host, sizeof r->host);
    r->last_heard = ftrt__now();
    c->nhello++;
    ftrt__silence_touch(c, w);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = FTRT__KEY(FTRT__KEY_RANK, w)};
    if (epoll_ctl(c->ep, EPOLL_CTL_MOD, r->fd, &ev)) ftrt_log_error("epoll_ctl: %s", strerror(errno));
    p->fd = -1;
    memset(&p->rx, 0, sizeof p->rx);
}

/* Reads pending connection p: 1 when it is done with (adopted or closed), 0 when it needs more
 * bytes. */
static int identify(ftrt__coord *c, pending *p)
{
    ssize_t got = ftrt__rx_fill(&p->rx, p->fd);
    if (got == -EAGAIN) return 0;
    if (got == 0 && p->rx.used == 0) {
        /* Closed without a byte: a rank's other connection attempt that lost the race to the
         * first answering address (ftrt__connect_any), not an intruder. */
        close(p->fd);
        ftrt__rx_free(&p->rx);
        return 1;
    }
    ftrt__msghdr h;
    const void *payload;
    ftrt__hello hello;
    if (got > 0 && p->rx.used >= sizeof h) { /* anything but a HELLO first: rejected at once */
        memcpy(&h, p->rx.buf, sizeof h);
        if (h.type != FTRT__MSG_HELLO) got = -EPROTO;
    }
    if (got > 0 && ftrt__rx_next(&p->rx, &h, &payload) == 0) return 0; /* need more bytes */
    if (got > 0 && h.type == FTRT__MSG_HELLO && h.len == sizeof hello) {
        memcpy(&hello, payload, sizeof hello);
        hello.host[FTRT__HOST_MAX - 1] = 0;
        int w = hello.world_rank;
        if (hello.secret == c->lis->secret && w > 0 && w < c->W && !c->r[w].hello) {
            adopt(c, p, &hello);
            return 1;
        }
    }
    c->rejected_connections++;
    ftrt_log_warn("rejected a control-plane connection (bad hello, secret or world rank); %d so far",
                  c->rejected_connections);
    close(p->fd);
    ftrt__rx_free(&p->rx);
    return 1;
}

void ftrt__listener_identify(ftrt__coord *c, int idx)
{
    ftrt__listener *l = c->lis;
    if (l->pend[idx].fd < 0) return;
    if (identify(c, &l->pend[idx])) pending_free(l, idx);
}

void ftrt__listener_expire(ftrt__coord *c, double now)
{
    ftrt__listener *l = c->lis;
    if (l->nopen == 0 || now - l->last_check < 0.1) return;
    l->last_check = now;
    for (int k = 0; k < l->npend; k++)
        if (l->pend[k].fd >= 0 && now - l->pend[k].since > 5.0) { /* no valid hello in time */
            close(l->pend[k].fd);
            ftrt__rx_free(&l->pend[k].rx);
            pending_free(l, k);
            c->rejected_connections++;
        }
}

void ftrt__listener_close(ftrt__coord *c)
{
    ftrt__listener *l = c->lis;
    if (!l) return;
    for (int k = 0; l->pend && k < l->npend; k++)
        if (l->pend[k].fd >= 0) {
            close(l->pend[k].fd);
            ftrt__rx_free(&l->pend[k].rx);
        }
    if (l->fd >= 0) close(l->fd);
    free(l->pend);
    free(l->pfree);
    free(l);
    c->lis = NULL;
}

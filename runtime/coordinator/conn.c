/*
 * conn.c - the coordinator's connections: sends (to a rank's own connection, or through its
 * host agent: RELAY, and MULTI for a fan-out), the silence watch, the PINGs that tell every
 * rank the coordinator is alive, and the listener with the connections that have not said a
 * valid HELLO yet (a rank's, or a host agent's).
 *
 * (The fan-outs, MULTI and the relay groups' FANOUT, are fanout.c's.)
 *
 * At scale (docs/detection-and-recovery.md "Control plane", bench/coord_load.c) every piece is
 * O(1) per message: the silence watch is a list of the connected ranks ordered by the time each
 * was last heard, so only its head is ever compared with the timeout; the PINGs of a period are
 * spread over it in batches at most 2 ms apart, and long fan-outs keep them going
 * (ftrt__fanout_pump).
 *
 * Sends never block ("the send queues"): the connections are nonblocking, and what a socket
 * does not take now waits in that connection's send queue, written out in order when epoll
 * says the socket is writable (EPOLLOUT, watched only while the queue holds bytes), as an
 * event-loop server keeps its clients' output (Redis's client output buffers, libuv's write
 * queue). A peer that stops reading (a frozen rank or host agent, whose socket filled up) so
 * stalls only its own connection, never the loop. Each queue is bounded: by time, the bytes
 * queued more than the heartbeat timeout ago and still not out (a send watch, ordered like the
 * silence watch), and by size (TX_SLACK); past either, the peer is declared lost as silent
 * (ftrt__tx_due; service.c ftrt__tx_check declares it), as its heartbeats' silence would.
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/knobs.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

/* ---- the send queues --------------------------------------------------------------------- */

/* A queue may hold this many bytes beyond its largest message (a PLAN to a promoted spare, a
 * relay's FANOUT, a SYNC to the standby: up to tens of MiB in the largest worlds) when the next
 * message comes; more, and its peer is declared lost. FTRT_TEST_COORD_TX_SLACK lowers it. */
#define TX_SLACK                                                                                 \
    (ftrt__knobs.coord_tx_slack > 0 ? (size_t)ftrt__knobs.coord_tx_slack : (size_t)8 << 20)

static ftrt__txq *txq(ftrt__coord *c, int id)
{
    return id < c->W ? &c->r[id].tx : &c->hl[id - c->W].tx;
}

static int conn_fd(const ftrt__coord *c, int id)
{
    return id < c->W ? c->r[id].fd : c->hl[id - c->W].fd;
}

static ftrt__wnode *tnode(ftrt__coord *c, int id) { return &txq(c, id)->wn; }

/* Connection id's peer in words, for the log. */
static const char *conn_name(const ftrt__coord *c, int id, char *buf, size_t cap)
{
    if (id < c->W) snprintf(buf, cap, "world rank %d (%s)", id, c->r[id].host);
    else snprintf(buf, cap, "the host agent of %s (in world rank %d)", c->hl[id - c->W].host,
                  c->hl[id - c->W].agent_w);
    return buf;
}

/* The two watches are the same list (ids linked through a node each): the silence watch's
 * nodes and ends, or the send watch's. */
typedef struct wlist {
    int *head, *tail;
    ftrt__wnode *(*node)(ftrt__coord *, int);
} wlist;

static void wl_remove(ftrt__coord *c, wlist l, int id)
{
    ftrt__wnode *n = l.node(c, id);
    if (!n->on) return;
    if (n->prev) l.node(c, n->prev)->next = n->next;
    else *l.head = n->next;
    if (n->next) l.node(c, n->next)->prev = n->prev;
    else *l.tail = n->prev;
    n->prev = n->next = 0;
    n->on = 0;
}

/* id to the list's tail (front: to its head). */
static void wl_put(ftrt__coord *c, wlist l, int id, int front)
{
    wl_remove(c, l, id);
    ftrt__wnode *n = l.node(c, id);
    n->on = 1;
    if (front) {
        n->prev = 0;
        n->next = *l.head;
        if (*l.head) l.node(c, *l.head)->prev = id;
        else *l.tail = id;
        *l.head = id;
        return;
    }
    n->prev = *l.tail;
    n->next = 0;
    if (*l.tail) l.node(c, *l.tail)->next = id;
    else *l.head = id;
    *l.tail = id;
}

static wlist send_watch(ftrt__coord *c) { return (wlist){&c->txw_head, &c->txw_tail, tnode}; }

/* EPOLLOUT on id's connection watched (on) or not, EPOLLIN always. */
static void tx_epoll(ftrt__coord *c, int id, int on)
{
    uint64_t key = id < c->W ? FTRT__KEY(FTRT__KEY_RANK, id) : FTRT__KEY(FTRT__KEY_HOST, id - c->W);
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.u64 = key};
    if (epoll_ctl(c->ep, EPOLL_CTL_MOD, conn_fd(c, id), &ev))
        ftrt_log_error("epoll_ctl: %s", strerror(errno));
}

size_t ftrt__tx_close(ftrt__coord *c, int id)
{
    ftrt__txq *q = txq(c, id);
    size_t left = ftrt__tx_pending(&q->b);
    wl_remove(c, send_watch(c), id);
    ftrt__tx_free(&q->b);
    *q = (ftrt__txq){0};
    return left;
}

/* id's queue is past its bound: dropped, and id goes to the head of the send watch, where
 * ftrt__tx_check declares it lost. */
static void tx_over(ftrt__coord *c, int id, const char *why)
{
    ftrt__txq *q = txq(c, id);
    size_t left = ftrt__tx_pending(&q->b);
    char name[FTRT__HOST_MAX + 64];
    ftrt_log_warn("%s: %zu bytes wait to be sent to it (%s): it is declared lost",
                  conn_name(c, id, name, sizeof name), left, why);
    if (left) tx_epoll(c, id, 0);
    ftrt__tx_free(&q->b);
    q->over = 1;
    q->mark_t = 0;
    wl_put(c, send_watch(c), id, 1);
}

/* One message to connection id, or into its queue. 0 or -errno (ftrt__link_send). */
static int conn_tx(ftrt__coord *c, int id, uint32_t type, const void *prefix, uint32_t plen,
                   uint32_t inner_type, const void *payload, uint32_t len)
{
    int fd = conn_fd(c, id);
    ftrt__txq *q = txq(c, id);
    if (fd < 0) return -ENOTCONN;
    if (q->over) return -ENOBUFS;
    size_t before = ftrt__tx_pending(&q->b);
    if (before > TX_SLACK + q->big) {
        tx_over(c, id, "more than its bound");
        return -ENOBUFS;
    }
    ssize_t k = ftrt__tx_send(fd, &q->b, type, prefix, plen, inner_type, payload, len);
    if (k == -ENOMEM) tx_over(c, id, "no memory to queue more"); /* (a message may be cut) */
    if (k <= 0) return (int)k;
    size_t msg = sizeof(ftrt__msghdr) + plen + (inner_type ? sizeof(ftrt__msghdr) + len : 0);
    if (msg > q->big) q->big = msg;
    q->in += (uint64_t)k;
    if (before == 0) { /* it starts waiting now */
        q->mark = q->in;
        q->mark_t = ftrt__now();
        wl_put(c, send_watch(c), id, 0);
        tx_epoll(c, id, 1);
    }
    return 0;
}

/* Writes what id's queue holds as far as the socket takes it; once the bytes of its mark are
 * out, the mark moves to what is queued now (the send watch's tail). An emptied queue leaves
 * the watch and EPOLLOUT; a broken connection's queue is dropped (its EOF or reset is read by
 * the service functions). */
static void tx_progress(ftrt__coord *c, int id, double now)
{
    ftrt__txq *q = txq(c, id);
    int fd = conn_fd(c, id);
    if (fd < 0 || q->over || ftrt__tx_pending(&q->b) == 0) return;
    ssize_t k = ftrt__tx_write(fd, &q->b);
    if (k < 0) {
        ftrt_log_debug("send to connection %d failed: %s", id, ftrt_strerror((int)k));
        tx_epoll(c, id, 0);
        ftrt__tx_close(c, id);
        return;
    }
    q->out += (uint64_t)k;
    if (ftrt__tx_pending(&q->b) == 0) {
        tx_epoll(c, id, 0);
        wl_remove(c, send_watch(c), id);
        q->big = 0;
    } else if (q->out >= q->mark) {
        q->mark = q->in;
        q->mark_t = now;
        wl_put(c, send_watch(c), id, 0);
    }
}

void ftrt__tx_ready(ftrt__coord *c, int id) { tx_progress(c, id, ftrt__now()); }

int ftrt__tx_due(ftrt__coord *c, double now)
{
    double limit = c->a->cfg->heartbeat_timeout_ms / 1000.0;
    while (c->txw_head) {
        int id = c->txw_head;
        ftrt__txq *q = txq(c, id);
        if (q->over) return id; /* (logged by tx_over) */
        if (now - q->mark_t <= limit) return 0;
        tx_progress(c, id, now); /* (writable meanwhile, its EPOLLOUT not handled yet) */
        if (c->txw_head != id || now - q->mark_t <= limit) continue;
        char name[FTRT__HOST_MAX + 64];
        ftrt_log_warn("%s: %zu bytes to it wait for more than the heartbeat timeout (it does not "
                      "read): it is declared lost", conn_name(c, id, name, sizeof name),
                      ftrt__tx_pending(&q->b));
        return id;
    }
    return 0;
}

void ftrt__tx_drain(ftrt__coord *c, double idle_s, double until)
{
    struct pollfd pf[64];
    int ids[64];
    double quiet = ftrt__now() + idle_s; /* (moved on by every byte that goes out) */
    for (double now = ftrt__now(); c->txw_head && now < until && now < quiet; now = ftrt__now()) {
        int n = 0;
        for (int id = c->txw_head; id && n < 64; id = tnode(c, id)->next) {
            if (txq(c, id)->over) continue;
            pf[n] = (struct pollfd){.fd = conn_fd(c, id), .events = POLLOUT};
            ids[n++] = id;
        }
        if (n == 0) return;
        int ms = (int)ceil(((quiet < until ? quiet : until) - now) * 1000.0);
        if (poll(pf, (nfds_t)n, ms > 0 ? ms : 0) <= 0) return;
        now = ftrt__now();
        for (int i = 0; i < n; i++) {
            if (!pf[i].revents) continue;
            uint64_t out = txq(c, ids[i])->out;
            tx_progress(c, ids[i], now);
            if (txq(c, ids[i])->out > out) quiet = now + idle_s;
        }
    }
}

/* ---- sends ------------------------------------------------------------------------------- */

int ftrt__link_send(ftrt__coord *c, int h, uint32_t type, const void *prefix, uint32_t plen,
                    uint32_t inner_type, const void *payload, uint32_t len)
{
    return conn_tx(c, c->W + h, type, prefix, plen, inner_type, payload, len);
}

void ftrt__coord_send(ftrt__coord *c, int w, uint32_t type, const void *p, uint32_t len)
{
    const ftrt__crank *r = &c->r[w];
    int rc = 0;
    if (r->fd >= 0) {
        rc = conn_tx(c, w, type, p, len, 0, NULL, 0);
    } else if (r->link >= 0 && c->hl[r->link].fd >= 0) {
        ftrt__relay pre = {.world_rank = w};
        rc = ftrt__link_send(c, r->link, FTRT__MSG_RELAY, &pre, sizeof pre, type, p, len);
    }
    if (rc) ftrt_log_debug("send to world rank %d failed: %s", w, ftrt_strerror(rc));
}

int ftrt__rank_connected(const ftrt__coord *c, int w)
{
    return c->r[w].fd >= 0 || c->r[w].link >= 0;
}

void ftrt__rank_identify(ftrt__coord *c, int w, const ftrt__hello *hello)
{
    ftrt__crank *r = &c->r[w];
    r->hello = 1;
    r->lost_t = 0;
    r->pid = hello->pid;
    ftrt__rank_set_host(c, w, hello->host);
    r->remote = strcmp(r->host, c->a->host) != 0;
    r->last_heard = ftrt__now();
}

void ftrt__coord_drop(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    ftrt__silence_remove(c, w);
    ftrt__tx_close(c, w);
    if (r->fd >= 0) close(r->fd); /* (which also takes it out of the epoll set) */
    r->fd = -1;
    ftrt__rx_free(&r->rx);
    if (r->link >= 0) { /* its host agent closes its socket (it may still be alive) */
        if (!r->cut) ftrt__host_cut(c, w, 0);
        c->hl[r->link].nranks--;
    }
    r->link = -1;
    r->cut = 0;
    if (r->move_to >= 0 && !r->move_sent) c->nmoving--;
    r->move_to = -1;
    r->move_sent = 0;
    ftrt__tx_free(&r->held);
    if (r->orphan_until > 0) c->norphans--;
    r->orphan_until = 0;
    r->orphan_coord = 0;
}

int ftrt__host_cut(ftrt__coord *c, int w, int fence)
{
    ftrt__crank *r = &c->r[w];
    if (r->link < 0 || c->hl[r->link].fd < 0) return 0;
    ftrt__cut cut = {.world_rank = w, .fence = fence};
    ftrt__link_send(c, r->link, FTRT__MSG_CUT, &cut, sizeof cut, 0, NULL, 0);
    r->cut |= fence;
    return 1;
}

void ftrt__host_drop(ftrt__coord *c, int h)
{
    ftrt__hlink *l = &c->hl[h];
    ftrt__silence_remove(c, c->W + h);
    ftrt__tx_close(c, c->W + h);
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    ftrt__rx_free(&l->rx);
}

/* ---- the silence watch: connections ordered by when they were last heard, oldest first -- */

static ftrt__wnode *node(ftrt__coord *c, int id)
{
    return id < c->W ? &c->r[id].wn : &c->hl[id - c->W].wn;
}

static wlist silence_watch(ftrt__coord *c)
{
    return (wlist){&c->watch_head, &c->watch_tail, node};
}

double ftrt__silence_last(const ftrt__coord *c, int id)
{
    return id < c->W ? c->r[id].last_heard : c->hl[id - c->W].last_heard;
}

void ftrt__silence_remove(ftrt__coord *c, int id) { wl_remove(c, silence_watch(c), id); }

void ftrt__silence_touch(ftrt__coord *c, int id) { wl_put(c, silence_watch(c), id, 0); }

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

/* Connection id (a rank's own, or W + h for host agent h) gets its PING at the fraction
 * (id - 1) / (ids - 1) of the round, so that they are spread over the period instead of going
 * out all at once (which at 16,384 ranks held the loop for tens of ms). */
void ftrt__ping_due(ftrt__coord *c, double now)
{
    double period = ping_period(c);
    int ids = c->W + c->nhl;
    if (c->ping_round == 0) {
        c->ping_round = now;
        c->ping_next = 1;
    }
    ftrt__epoch_msg m = {.epoch = c->epoch};
    for (;;) {
        double frac = (now - c->ping_round) / period;
        int upto = frac >= 1 ? ids : 1 + (int)((ids - 1) * frac);
        for (; c->ping_next < upto; c->ping_next++) {
            int id = c->ping_next;
            if (id < c->W && c->r[id].fd >= 0)
                ftrt__coord_send(c, id, FTRT__MSG_PING, &m, sizeof m);
            else if (id >= c->W && c->hl[id - c->W].fd >= 0)
                ftrt__link_send(c, id - c->W, FTRT__MSG_PING, &m, sizeof m, 0, NULL, 0);
        }
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
    int ids = c->W + c->nhl;
    double tp = c->ping_next < ids
                    ? c->ping_round + period * (c->ping_next - 1) / (ids > 1 ? ids - 1 : 1)
                    : c->ping_round + period;
    if (tp < now + 0.002) tp = now + 0.002;
    if (tp < t) t = tp;
    if (c->watch_head && c->phase != PH_INIT && c->phase != PH_ABORTING) {
        double tw = ftrt__silence_last(c, c->watch_head) + c->a->cfg->heartbeat_timeout_ms / 1000.0;
        if (tw < t) t = tw;
    }
    if (c->txw_head && c->phase != PH_INIT && c->phase != PH_ABORTING) { /* (ftrt__tx_check) */
        int id = c->txw_head;
        double tw = (id < c->W ? c->r[id].tx.mark_t : c->hl[id - c->W].tx.mark_t) +
                    c->a->cfg->heartbeat_timeout_ms / 1000.0;
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
 * open for the whole job: later connections are read, and join only as a rank coming back or
 * a host agent, else they are rejected and counted. */
void ftrt__listener_accept(ftrt__coord *c)
{
    ftrt__listener *l = c->lis;
    for (;;) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK); /* (sends queue) */
        if (fd < 0) return; /* EAGAIN: none left (or an error the next readiness retries) */
        if (l->nfree == 0) {
            close(fd);
            c->rejected_connections++;
            continue;
        }
        int one = 1, sndbuf = ftrt__knobs.coord_sndbuf;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        int slot = l->pfree[--l->nfree];
        struct epoll_event ev = {.events = ftrt__knobs.hello_unread ? 0 : EPOLLIN,
                                 .data.u64 = FTRT__KEY(FTRT__KEY_PENDING, slot)};
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

/* Hands pending connection p over to id's epoll key; its buffered bytes go with it. */
static void hand_over(ftrt__coord *c, pending *p, uint64_t key, int *fd, ftrt__rxbuf *rx)
{
    *fd = p->fd;
    *rx = p->rx; /* bytes after the HELLO stay for the service functions */
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = key};
    if (epoll_ctl(c->ep, EPOLL_CTL_MOD, p->fd, &ev)) ftrt_log_error("epoll_ctl: %s", strerror(errno));
    p->fd = -1;
    memset(&p->rx, 0, sizeof p->rx);
}

/* A valid HELLO from world rank w on pending connection p: it becomes w's connection. A rank
 * that joined before may come back (its host agent was lost, or froze) unless it was declared
 * failed or has its own connection already (but for one moving to a new host agent, which
 * lost it on the way: service.c "moves"). Returns 1 when adopted. */
static int adopt(ftrt__coord *c, pending *p, const ftrt__hello *hello, int *rejoined)
{
    int w = hello->world_rank;
    ftrt__crank *r = &c->r[w];
    if (r->hello && (r->role == FTRT__ROLE_FAILED || (r->fd >= 0 && r->move_to < 0))) return 0;
    *rejoined = r->hello ? w : 0;
    r->back_takeover = r->orphan_coord && r->orphan_until > 0; /* (ftrt__rank_rejoined) */
    if (r->hello) {
        if (r->back_takeover) {
            ftrt_log_info("world rank %d (%s) is back with the new coordinator", w, r->host);
            c->takeover_back_t = ftrt__now();
        } else {
            ftrt_log_warn("world rank %d (%s) is back on its own connection: its host agent "
                          "was lost", w, r->host);
        }
        ftrt__coord_drop(c, w); /* off its host agent, or no longer an orphan */
    } else {
        c->nhello++;
    }
    hand_over(c, p, FTRT__KEY(FTRT__KEY_RANK, w), &r->fd, &r->rx);
    ftrt__rank_identify(c, w, hello);
    ftrt__silence_touch(c, w);
    return 1;
}

/* A valid HOST_HELLO on pending connection p: a host agent, serving no rank yet. */
static int adopt_host(ftrt__coord *c, pending *p, const ftrt__hello *hello)
{
    if (c->nhl >= c->W) return 0;
    int h = c->nhl++;
    ftrt__hlink *l = &c->hl[h];
    memset(l, 0, sizeof *l);
    hand_over(c, p, FTRT__KEY(FTRT__KEY_HOST, h), &l->fd, &l->rx);
    l->agent_w = hello->world_rank;
    l->via = -1;
    l->pid = hello->pid;
    memcpy(l->host, hello->host, sizeof l->host);
    l->remote = strncmp(l->host, c->a->host, sizeof l->host) != 0;
    l->last_heard = ftrt__now();
    ftrt__silence_touch(c, c->W + h);
    ftrt_log_info("host agent of %s joined (in world rank %d, pid %d)", l->host, l->agent_w, l->pid);
    return 1;
}

/* JOIN (whole, checked for its size) on pending connection p: admitted (join.c), p becomes the
 * joiner's connection and JOIN_OK goes out; refused, JOIN_REFUSED goes out and p is closed.
 * Returns 1 (done with p either way). */
static int join(ftrt__coord *c, pending *p, const void *payload)
{
    ftrt__join j;
    memcpy(&j, payload, sizeof j);
    j.host[FTRT__HOST_MAX - 1] = 0;
    ftrt__join_refused no = {0};
    int w = ftrt__join_admit(c, &j, no.why, sizeof no.why);
    if (w > 0) {
        ftrt__hello h = {.secret = j.secret, .world_rank = w, .pid = j.pid};
        memcpy(h.host, j.host, sizeof h.host);
        hand_over(c, p, FTRT__KEY(FTRT__KEY_RANK, w), &c->r[w].fd, &c->r[w].rx);
        ftrt__rank_identify(c, w, &h);
        ftrt__silence_touch(c, w);
        return 1; /* (its JOIN_OK: the loop's, coordinator.c dispatch) */
    }
    no.code = w;
    (void)ftrt__msg_send(p->fd, FTRT__MSG_JOIN_REFUSED, &no, sizeof no); /* (a fresh socket) */
    close(p->fd);
    ftrt__rx_free(&p->rx);
    return 1;
}

/* Reads pending connection p: 1 when it is done with (adopted or closed), 0 when it needs more
 * bytes. *rejoined: the world rank of a rank that had joined before and came back, else 0; or
 * -(h + 1) when it became host agent h's connection. */
static int identify(ftrt__coord *c, pending *p, int *rejoined)
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
        if (h.type != FTRT__MSG_HELLO && h.type != FTRT__MSG_HOST_HELLO &&
            h.type != FTRT__MSG_JOIN)
            got = -EPROTO;
    }
    int whole = got > 0 ? ftrt__rx_next(&p->rx, &h, &payload) : -1;
    if (whole == 0) return 0; /* need more bytes */
    if (whole == 1 && h.type == FTRT__MSG_JOIN && h.len == sizeof(ftrt__join))
        return join(c, p, payload);
    if (got > 0 && h.len == sizeof hello) {
        memcpy(&hello, payload, sizeof hello);
        hello.host[FTRT__HOST_MAX - 1] = 0;
        int w = hello.world_rank;
        if (hello.secret == c->lis->secret && w > 0 && w < c->Wused &&
            (h.type == FTRT__MSG_HELLO ? adopt(c, p, &hello, rejoined) : adopt_host(c, p, &hello))) {
            if (h.type == FTRT__MSG_HOST_HELLO) *rejoined = -c->nhl; /* -(h + 1) */
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

int ftrt__listener_identify(ftrt__coord *c, int idx)
{
    ftrt__listener *l = c->lis;
    pending *p = &l->pend[idx];
    if (p->fd < 0) return 0;
    int rejoined = 0;
    if (!identify(c, p, &rejoined)) return 0;
    pending_free(l, idx);
    return rejoined;
}

int ftrt__listener_stale(ftrt__coord *c, double now, int from)
{
    ftrt__listener *l = c->lis;
    if (from == 0) { /* a new scan: at most every 0.1 s, and only when some are open */
        if (l->nopen == 0 || now - l->last_check < 0.1) return -1;
        l->last_check = now;
    }
    for (int k = from; k < l->npend; k++)
        if (l->pend[k].fd >= 0 && now - l->pend[k].since > 5.0) return k;
    return -1;
}

void ftrt__listener_reject_stale(ftrt__coord *c, int idx)
{
    ftrt__listener *l = c->lis;
    pending *p = &l->pend[idx];
    if (p->fd < 0) return; /* its HELLO was there after all: read and adopted */
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char peer[64] = "?";
    if (getpeername(p->fd, (struct sockaddr *)&sa, &sl) == 0 && sa.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(peer, sizeof peer, "%s:%u", ip, (unsigned)ntohs(in->sin_port));
    }
    c->rejected_connections++;
    ftrt_log_warn("closed a control-plane connection from %s: no complete HELLO within 5 s of "
                  "its accept (%zu bytes of one); %d rejected so far", peer, p->rx.used,
                  c->rejected_connections);
    close(p->fd);
    ftrt__rx_free(&p->rx);
    pending_free(l, idx);
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

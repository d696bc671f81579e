/*
 * hostrelay.c - a host agent's part in the coordinator's relay groups (docs/detection-and-
 * recovery.md "Relay groups"; the coordinator's side is runtime/coordinator/fanout.c).
 *
 * Every host agent listens on TCP for the host agents of its relay group and says where
 * (RELAY_AT). The coordinator makes one host agent of each group (the first live one that
 * listens) its relay and tells the others (RELAY_VIA): each connects to the relay and says PEER_HELLO with the job's secret; the
 * relay confirms it to the coordinator (RELAY_PEER up 1), which from then on sends the group's
 * fan-outs to the relay only (FANOUT: each host's rank list, the message once). The relay
 * delivers its own host's part and sends every other part on as the MULTI the coordinator
 * would have sent; a member reads it from its relay as it reads the coordinator's (the term
 * check included: a deposed coordinator's message relayed is refused all the same). A member's
 * connection that closes is reported (RELAY_PEER up 0) and that member goes direct again; a
 * relay that is lost is the coordinator's to notice (its own connection), and RELAY_VIA with
 * port 0 tells a member to close its connection to it; a new RELAY_VIA then names the group's
 * next relay (any host agent can be one: every one listens). A member that cannot connect to
 * its relay at all tries again itself, FTRT__RELAY_CONNECT_RETRIES times with backoff (0.25,
 * 0.5, 1 s): the coordinator never learns of a connect that failed (only of one that closed),
 * so a retry on its side would need a timer per member told; on the member's side it costs
 * the coordinator nothing, and a later RELAY_VIA (port 0, or the group's next relay) ends it.
 *
 * Runs on the host agent's thread only (no locking); the host agent polls the descriptors
 * ftrt__hrelay_pollfds gives it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/knobs.h"
#include "base/log.h"
#include "base/net.h"
#include "runtime/internal.h"

/* Blocking sends to a member, bounded (as to a local rank): one that does not read for this
 * long is frozen, and dropped. */
static void peer_tune(int fd)
{
    struct timeval tv = {0, 500000};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* The addresses without loopback ones (a relay and its members are on different hosts), unless
 * loopback is all there is. */
static void strip_loopback(char *addrs, size_t cap)
{
    char out[FTRT__COORD_AT_ADDRS] = "";
    size_t len = 0;
    char *save = NULL;
    for (char *tok = strtok_r(addrs, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (!strncmp(tok, "127.", 4)) continue;
        size_t tl = strlen(tok);
        if (len + tl + 2 > sizeof out) break;
        len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", len ? " " : "", tok);
    }
    if (len > 0) snprintf(addrs, cap, "%s", out);
    else snprintf(addrs, cap, "127.0.0.1");
}

int ftrt__hrelay_open(ftrt__hrelay *r, uint64_t secret, int self_w, ftrt__txbuf *up)
{
    memset(r, 0, sizeof *r);
    r->secret = secret;
    r->self_w = self_w;
    r->up = up;
    r->via_fd = -1;
    int port = 0;
    ftrt__coord_at at = {.world_rank = self_w};
    r->lfd = ftrt__listen(NULL, at.addrs, sizeof at.addrs, &port);
    if (r->lfd < 0) return r->lfd; /* (no relay here; it may still be a member) */
    if (fcntl(r->lfd, F_SETFL, fcntl(r->lfd, F_GETFL) | O_NONBLOCK)) {
        int e = -errno;
        close(r->lfd);
        r->lfd = -1;
        return e;
    }
    strip_loopback(at.addrs, sizeof at.addrs);
    at.port = port;
    return ftrt__tx_put(up, FTRT__MSG_RELAY_AT, &at, sizeof at, 0, NULL, 0);
}

/* Tells the coordinator that member w is connected (up 1) or gone (up 0). */
static void peer_says(ftrt__hrelay *r, int w, int up)
{
    ftrt__relay_peer m = {.world_rank = w, .up = up};
    ftrt__tx_put(r->up, FTRT__MSG_RELAY_PEER, &m, sizeof m, 0, NULL, 0);
}

static void peer_drop(ftrt__hrelay *r, int i)
{
    ftrt__hpeer *p = &r->peer[i];
    if (p->w > 0) peer_says(r, p->w, 0);
    close(p->fd);
    ftrt__rx_free(&p->rx);
    r->peer[i] = r->peer[--r->npeer];
}

static void peers_accept(ftrt__hrelay *r)
{
    for (;;) {
        int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) return;
        if (r->npeer == r->cap) {
            int nc = r->cap ? 2 * r->cap : 16;
            ftrt__hpeer *n = realloc(r->peer, (size_t)nc * sizeof *n);
            if (!n) {
                close(fd);
                continue;
            }
            r->peer = n;
            r->cap = nc;
        }
        peer_tune(fd);
        r->peer[r->npeer++] = (ftrt__hpeer){.fd = fd, .since = ftrt__now()};
    }
}

/* Reads member slot i: its PEER_HELLO, then nothing (EOF: it is gone). 1 when dropped. */
static int peer_read(ftrt__hrelay *r, int i)
{
    ftrt__hpeer *p = &r->peer[i];
    ssize_t got = ftrt__rx_fill(&p->rx, p->fd);
    if (got == -EAGAIN) return 0;
    ftrt__msghdr h;
    const void *pl;
    int k = got > 0 && p->w == 0 ? ftrt__rx_next(&p->rx, &h, &pl) : -1;
    if (k == 0) return 0; /* (the rest of its hello to come) */
    if (k == 1 && h.type == FTRT__MSG_PEER_HELLO) {
        ftrt__hello hello;
        memcpy(&hello, pl, sizeof hello);
        if (hello.secret == r->secret && hello.world_rank > 0 && hello.world_rank < FTRT__MAX_WORLD) {
            p->w = hello.world_rank;
            peer_says(r, p->w, 1);
            return 0;
        }
    }
    peer_drop(r, i); /* EOF, a bad hello, or anything after it */
    return 1;
}

int ftrt__hrelay_pollfds(const ftrt__hrelay *r, struct pollfd *pf)
{
    pf[0] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
    pf[1] = (struct pollfd){.fd = r->via_fd, .events = POLLIN};
    for (int i = 0; i < r->npeer; i++) pf[2 + i] = (struct pollfd){.fd = r->peer[i].fd, .events = POLLIN};
    return 2 + r->npeer;
}

/* Reads the connection to this host agent's relay: MULTIs for on_msg. */
static void via_read(ftrt__hrelay *r, ftrt__hrelay_msg_fn on_msg, void *arg)
{
    ssize_t got = ftrt__rx_fill(&r->via_rx, r->via_fd);
    if (got == -EAGAIN) return;
    ftrt__msghdr h;
    const void *p;
    int rc = got > 0 ? 0 : -1;
    while (rc == 0 && (rc = ftrt__rx_next(&r->via_rx, &h, &p)) == 1)
        rc = h.type == FTRT__MSG_MULTI && on_msg(arg, &h, p) == 0 ? 0 : -1;
    if (rc < 0) { /* EOF, or not a MULTI: its fan-outs come directly (the relay reports it) */
        ftrt_log_info("host agent: the connection to its relay closed");
        close(r->via_fd);
        r->via_fd = -1;
        ftrt__rx_free(&r->via_rx);
    }
}

/* Connects to the relay in r->via_at and says PEER_HELLO; one that fails is tried again later
 * (r->via_retry, backoff 0.25 s doubling), FTRT__RELAY_CONNECT_RETRIES times, then given up:
 * the fan-outs stay direct. (A retry is the member's own: the coordinator is not told of a
 * connect that failed, and keeps no timer per member.) */
static void via_connect(ftrt__hrelay *r)
{
    ftrt__coord_at *at = &r->via_at;
    char addrs[FTRT__COORD_AT_ADDRS];
    memcpy(addrs, at->addrs, sizeof addrs);
    addrs[sizeof addrs - 1] = 0;
    int fd = -ECONNREFUSED;
    if (r->via_forced < ftrt__knobs.relay_connect_fails) r->via_forced++; /* (test knob) */
    else fd = ftrt__connect_any(addrs, at->port, 250, NULL, 0); /* (one round, at most) */
    ftrt__hello hello = {.secret = r->secret, .world_rank = r->self_w, .pid = (int32_t)getpid()};
    memcpy(hello.host, r->host, sizeof hello.host);
    r->via_retry = 0;
    if (fd >= 0 && ftrt__msg_send(fd, FTRT__MSG_PEER_HELLO, &hello, sizeof hello) == 0) {
        r->via_fd = fd;
        ftrt_log_info("host agent: fan-outs through the relay in world rank %d", at->world_rank);
        return;
    }
    if (fd >= 0) close(fd);
    if (r->via_tries++ < FTRT__RELAY_CONNECT_RETRIES) {
        r->via_retry = ftrt__now() + 0.25 * (double)(1 << (r->via_tries - 1));
        ftrt_log_info("host agent: cannot reach the relay in world rank %d (%s port %d): trying "
                      "again (%d of %d)", at->world_rank, addrs, at->port, r->via_tries,
                      FTRT__RELAY_CONNECT_RETRIES);
        return;
    }
    ftrt_log_warn("host agent: cannot reach the relay in world rank %d (%s port %d, %d tries): "
                  "fan-outs stay direct", at->world_rank, addrs, at->port, r->via_tries);
}

void ftrt__hrelay_via(ftrt__hrelay *r, const ftrt__coord_at *at, const char *host)
{
    if (r->via_fd >= 0) {
        close(r->via_fd);
        r->via_fd = -1;
        ftrt__rx_free(&r->via_rx);
    }
    r->via_retry = 0; /* (a relay still being tried: forgotten) */
    if (at->port <= 0) return;
    r->via_at = *at;
    r->via_tries = 0;
    snprintf(r->host, sizeof r->host, "%s", host);
    via_connect(r);
}

void ftrt__hrelay_serve(ftrt__hrelay *r, const struct pollfd *pf, int n, double timeout_s,
                        ftrt__hrelay_msg_fn on_msg, void *arg)
{
    int np = n - 2 < r->npeer ? n - 2 : r->npeer; /* (the slots polled) */
    if (pf[1].revents && r->via_fd >= 0) via_read(r, on_msg, arg);
    for (int i = np - 1; i >= 0; i--) /* (a dropped slot's successor moved into it) */
        if (pf[2 + i].revents) peer_read(r, i);
    if (pf[0].revents && r->lfd >= 0) peers_accept(r);
    double now = ftrt__now();
    if (r->via_retry > 0 && now >= r->via_retry && r->via_fd < 0) via_connect(r);
    for (int i = r->npeer - 1; i >= 0; i--) /* no PEER_HELLO in time */
        if (r->peer[i].w == 0 && now - r->peer[i].since > timeout_s) peer_drop(r, i);
}

int ftrt__hrelay_fanout(ftrt__hrelay *r, const void *payload, size_t len,
                        ftrt__hrelay_local_fn local, void *arg)
{
    int32_t nparts, w, n;
    const uint8_t *cur;
    const int32_t *ranks;
    uint32_t plen;
    ftrt__msghdr ih;
    const void *inner;
    if (ftrt__fanout_open(payload, len, &nparts, &cur, &ih, &inner)) return FTRT_EPROTO;
    for (int k = 0; k < nparts; k++) {
        const uint8_t *part = cur;
        ftrt__fanout_part(&cur, &w, &n, &ranks, &plen);
        if (w == r->self_w) {
            local(arg, n, ranks, &ih, inner);
            continue;
        }
        for (int i = 0; i < r->npeer; i++) {
            if (r->peer[i].w != w) continue;
            /* (the part is a MULTI's prefix: {n, pad}, the pad holding w, and the ranks) */
            if (ftrt__msg_send2(r->peer[i].fd, FTRT__MSG_MULTI, part, plen, ih.type, inner, ih.len))
                peer_drop(r, i);
            break;
        }
    }
    return 0;
}

void ftrt__hrelay_close(ftrt__hrelay *r)
{
    if (r->lfd >= 0) close(r->lfd);
    if (r->via_fd >= 0) close(r->via_fd);
    r->lfd = r->via_fd = -1;
    ftrt__rx_free(&r->via_rx);
    for (int i = 0; i < r->npeer; i++) {
        close(r->peer[i].fd);
        ftrt__rx_free(&r->peer[i].rx);
    }
    free(r->peer);
    r->peer = NULL;
    r->npeer = r->cap = 0;
}

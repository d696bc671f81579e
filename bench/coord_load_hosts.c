/*
 * coord_load_hosts.c - bench/coord_load's simulated host agents (--per-host; see coord_load.c's
 * header): each holds one connection to the coordinator for its ranks as runtime/hostagent.c
 * does (HOST_HELLO, a HOST_BEAT per period with its ranks' heartbeats, their other messages
 * wrapped in RELAY, RANK_LOST when one of them dies or falls silent) and delivers the
 * coordinator's RELAY and MULTI to its simulated ranks (coord_load_gen.c). With the relay
 * groups (runtime/coordinator/fanout.c) each also listens and takes part as
 * runtime/hostrelay.c does: RELAY_AT, a member connects to its relay on RELAY_VIA, a relay
 * sends a FANOUT's parts on to its members. The worker threads call these functions for the
 * hosts they carry.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/net.h"
#include "base/proto.h"
#include "coord_load.h"

#ifdef FTRT__PROTO_HOST_AGENTS
/* ---- --per-host: simulated host agents ------------------------------------------------------ */

static void host_gone(worker *k, hostsim *hs, int expected)
{
    if (hs->fd >= 0) {
        epoll_ctl(k->ep, EPOLL_CTL_DEL, hs->fd, NULL);
        close(hs->fd);
    }
    hs->fd = -1;
    for (int i = 0; i < hs->n; i++) {
        agent *a = &agents[hs->first_w + i];
        if (!expected && atomic_load(&a->state) == ST_ALIVE &&
            atomic_fetch_add(&unexpected_eof, 1) < 5)
            fprintf(stderr, "coord_load: the coordinator closed the connection of world rank "
                            "%d's host agent (a false positive unless the job ended)\n", a->w);
        atomic_store(&a->state, ST_GONE);
    }
    atomic_store(&hs->state, ST_GONE);
}

#ifdef FTRT__PROTO_RELAYS
/* ---- --per-host: the relay groups (runtime/hostrelay.c) ------------------------------------- */

/* epoll keys: host h's listener, its connection to its relay, its member slot i */

static void host_take(worker *k, hostsim *hs, const ftrt__msghdr *h, const uint8_t *p, double now);

/* FANOUT to relay hs: its own part to its ranks, every other part on to its member (MULTI). */
static void relay_fanout(worker *k, hostsim *hs, const uint8_t *p, size_t len, double now)
{
    int32_t np, w, n;
    const uint8_t *cur;
    const int32_t *ranks;
    uint32_t plen;
    ftrt__msghdr ih;
    const void *inner;
    if (ftrt__fanout_open(p, len, &np, &cur, &ih, &inner)) {
        fprintf(stderr, "coord_load: malformed FANOUT\n");
        return;
    }
    for (int j = 0; j < np; j++) {
        const uint8_t *part = cur;
        ftrt__fanout_part(&cur, &w, &n, &ranks, &plen);
        for (int i = 0; i < n && w == hs->first_w; i++) {
            int32_t x;
            memcpy(&x, ranks + i, sizeof x);
            if (x >= hs->first_w && x < hs->first_w + hs->n) take(k, &agents[x], &ih, inner, now);
        }
        for (int i = 0; w != hs->first_w && i < hs->npeer; i++)
            if (hs->peer[i].w == w && hs->peer[i].fd >= 0) {
                if (ftrt__msg_send2(hs->peer[i].fd, FTRT__MSG_MULTI, part, plen, ih.type, inner, ih.len))
                    atomic_fetch_add(&tx_blocked, 1);
                break;
            }
    }
}

/* RELAY_VIA to member hs: connect to its relay, PEER_HELLO. */
static void relay_via(worker *k, hostsim *hs, const uint8_t *p)
{
    ftrt__coord_at at;
    memcpy(&at, p, sizeof at);
    if (hs->via_fd >= 0) {
        epoll_ctl(k->ep, EPOLL_CTL_DEL, hs->via_fd, NULL);
        close(hs->via_fd);
        hs->via_fd = -1;
    }
    if (at.port <= 0) return;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)at.port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    ftrt__hello hello = {.secret = the_secret, .world_rank = hs->first_w};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) ||
        connect(fd, (struct sockaddr *)&sa, sizeof sa) ||
        ftrt__msg_send(fd, FTRT__MSG_PEER_HELLO, &hello, sizeof hello)) {
        fprintf(stderr, "coord_load: host %d cannot reach its relay: %s\n", hs->h, strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    hs->via_fd = fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = VIA_ID(hs->h)};
    epoll_ctl(k->ep, EPOLL_CTL_ADD, fd, &ev);
}

/* Relay hs's listener: its members connect. */
static void relay_accept(worker *k, hostsim *hs)
{
    for (;;) {
        int fd = accept4(hs->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;
        if (hs->npeer >= 255) {
            close(fd);
            continue;
        }
        relpeer *np = realloc(hs->peer, (size_t)(hs->npeer + 1) * sizeof *np);
        if (!np) abort();
        hs->peer = np;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        hs->peer[hs->npeer] = (relpeer){.fd = fd};
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = PEER_ID(hs->h, hs->npeer)};
        epoll_ctl(k->ep, EPOLL_CTL_ADD, fd, &ev);
        hs->npeer++;
    }
}

/* Member slot i of relay hs: its PEER_HELLO (RELAY_PEER up 1), or EOF (up 0). */
static void relay_peer_read(worker *k, hostsim *hs, int i)
{
    relpeer *m = &hs->peer[i];
    ssize_t got = recv(m->fd, m->buf + m->used, sizeof m->buf - m->used, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    ftrt__msghdr h;
    ftrt__hello hello;
    size_t need = sizeof h + sizeof hello;
    if (got > 0 && m->w == 0 && (m->used += (size_t)got) < need) return;
    ftrt__relay_peer rp = {.up = 0};
    if (got > 0 && m->w == 0 && m->used == need) {
        memcpy(&h, m->buf, sizeof h);
        memcpy(&hello, m->buf + sizeof h, sizeof hello);
        if (h.type == FTRT__MSG_PEER_HELLO && hello.secret == the_secret) {
            m->w = rp.world_rank = hello.world_rank;
            rp.up = 1;
            atomic_store(&hs->is_relay, 1);
        }
    }
    if (!rp.up) { /* EOF, or anything else */
        rp.world_rank = m->w;
        epoll_ctl(k->ep, EPOLL_CTL_DEL, m->fd, NULL);
        close(m->fd);
        m->fd = -1;
        if (!m->w) return;
        m->w = 0;
    }
    size_t off = 0;
    put(k, &off, FTRT__MSG_RELAY_PEER, &rp, sizeof rp);
    flush_to(k, hs->fd, HOST_ID(hs->h), &hs->tx, &hs->tx_used, &hs->tx_cap, k->buf, off);
}

/* Member hs's connection to its relay: MULTIs, taken as the coordinator's. */
static void relay_via_read(worker *k, hostsim *hs, double now)
{
    if (hs->vrx_cap - hs->vrx_used < 65536) {
        size_t nc = hs->vrx_cap ? hs->vrx_cap * 2 : 65536 * 2;
        uint8_t *b = realloc(hs->vrx, nc);
        if (!b) abort();
        hs->vrx = b;
        hs->vrx_cap = nc;
    }
    ssize_t got = recv_ts(hs->via_fd, hs->vrx + hs->vrx_used, hs->vrx_cap - hs->vrx_used);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) {
        epoll_ctl(k->ep, EPOLL_CTL_DEL, hs->via_fd, NULL);
        close(hs->via_fd);
        hs->via_fd = -1;
        return;
    }
    hs->vrx_used += (size_t)got;
    size_t off = 0;
    ftrt__msghdr h;
    while (hs->vrx_used - off >= sizeof h) {
        memcpy(&h, hs->vrx + off, sizeof h);
        if (hs->vrx_used - off < sizeof h + h.len) break;
        if (h.type == FTRT__MSG_MULTI) host_take(k, hs, &h, hs->vrx + off + sizeof h, now);
        off += sizeof h + h.len;
    }
    memmove(hs->vrx, hs->vrx + off, hs->vrx_used - off);
    hs->vrx_used -= off;
}

/* An epoll key of the relay groups: handled (1), or not one (0). */
int relay_event(worker *k, uint32_t id, double now)
{
    if (id & 0x40000000u) relay_accept(k, &hosts[id & 0xfffffffu]);
    else if (id & 0x20000000u) {
        hostsim *hs = &hosts[id & 0xfffffffu];
        if (hs->via_fd >= 0) relay_via_read(k, hs, now);
    } else if (id & 0x10000000u) {
        hostsim *hs = &hosts[(id & 0xfffffffu) >> 8];
        if (hs->peer[id & 0xffu].fd >= 0) relay_peer_read(k, hs, (int)(id & 0xffu));
    } else {
        return 0;
    }
    return 1;
}

/* Host u's listener for its relay group, its RELAY_AT sent on fd (before the loop reads it). */
int relay_listen(int fd, int u)
{
    hostsim *hs = &hosts[u];
    hs->lfd = hs->via_fd = -1;
    if (opt_no_relays) return 0;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 256) ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl))
        return -1;
    hs->lfd = lfd;
    ftrt__coord_at at = {.world_rank = hs->first_w, .port = ntohs(sa.sin_port)};
    snprintf(at.addrs, sizeof at.addrs, "127.0.0.1");
    return ftrt__msg_send(fd, FTRT__MSG_RELAY_AT, &at, sizeof at) ? -1 : 0;
}
#endif

/* One message from the coordinator to host hs: RELAY and MULTI go to their ranks. */
static void host_take(worker *k, hostsim *hs, const ftrt__msghdr *h, const uint8_t *p, double now)
{
    int32_t w, n;
    const int32_t *ws;
    ftrt__msghdr ih;
    const void *inner;
    if (h->type == FTRT__MSG_RELAY && !ftrt__relay_open(p, h->len, &w, &ih, &inner)) {
        if (w >= hs->first_w && w < hs->first_w + hs->n) take(k, &agents[w], &ih, inner, now);
    } else if (h->type == FTRT__MSG_MULTI && !ftrt__multi_open(p, h->len, &n, &ws, &ih, &inner)) {
        for (int i = 0; i < n; i++) {
            memcpy(&w, ws + i, sizeof w);
            if (w >= hs->first_w && w < hs->first_w + hs->n) take(k, &agents[w], &ih, inner, now);
        }
#ifdef FTRT__PROTO_RELAYS
    } else if (h->type == FTRT__MSG_FANOUT) {
        relay_fanout(k, hs, p, h->len, now);
    } else if (h->type == FTRT__MSG_RELAY_VIA) {
        relay_via(k, hs, p);
#endif
    } else if (h->type != FTRT__MSG_PING && h->type != FTRT__MSG_CUT) {
        /* (CUT: a rank the coordinator declared failed; the trial's rank is gone already) */
        fprintf(stderr, "coord_load: unexpected message type %u to a host agent\n", h->type);
    }
}

void host_readable(worker *k, hostsim *hs, double now)
{
    if (hs->rx_cap - hs->rx_used < 65536) {
        size_t nc = hs->rx_cap ? hs->rx_cap * 2 : 65536 * 2;
        uint8_t *b = realloc(hs->rx, nc);
        if (!b) abort();
        hs->rx = b;
        hs->rx_cap = nc;
    }
    ssize_t got = recv_ts(hs->fd, hs->rx + hs->rx_used, hs->rx_cap - hs->rx_used);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) {
        host_gone(k, hs, atomic_load(&hs->state) != ST_ALIVE);
        return;
    }
    if (atomic_load(&k->measure_gaps) && hs->last_rx > 0 && now - hs->last_rx > k->gap_max &&
        atomic_load(&hs->state) == ST_ALIVE)
        k->gap_max = now - hs->last_rx;
    hs->last_rx = now;
    hs->rx_used += (size_t)got;
    size_t off = 0;
    while (hs->rx_used - off >= sizeof(ftrt__msghdr)) {
        ftrt__msghdr h;
        memcpy(&h, hs->rx + off, sizeof h);
        if (h.magic != FTRT__MAGIC) {
            fprintf(stderr, "coord_load: bad magic from the coordinator to host %d\n", hs->h);
            host_gone(k, hs, 1);
            return;
        }
        if (hs->rx_used - off < sizeof h + h.len) break;
        host_take(k, hs, &h, hs->rx + off + sizeof h, now);
        off += sizeof h + h.len;
    }
    memmove(hs->rx, hs->rx + off, hs->rx_used - off);
    hs->rx_used -= off;
}

/* RANK_LOST for agent a, from its host agent (appended at *off). */
static void put_lost(worker *k, size_t *off, agent *a, int why)
{
    ftrt__rank_lost m = {.world_rank = a->w, .why = why, .t_wall = ftrt__wallclock()};
    put(k, off, FTRT__MSG_RANK_LOST, &m, sizeof m);
    a->lost_sent = 1;
}

/* Host hs's heartbeat period, in one write: the HOST_BEAT with the heartbeats of its live
 * ranks, their LEDGERs and FINGERPRINTs, and RANK_LOST for a rank silent for the timeout. */
void host_beat(worker *k, hostsim *hs, double now)
{
    size_t off = 0, len = sizeof(ftrt__host_beat) + (size_t)hs->n * sizeof(ftrt__beat);
    if (len > k->beat_cap) { /* (aligned: the worker's buffer is not) */
        free(k->beat);
        k->beat = malloc(len);
        if (!k->beat) abort();
        k->beat_cap = len;
    }
    ftrt__host_beat *b = k->beat;
    b->n = 0;
    b->pad = 0;
    for (int i = 0; i < hs->n; i++) {
        agent *a = &agents[hs->first_w + i];
        if (atomic_load(&a->state) == ST_ALIVE)
            b->e[b->n++] = (ftrt__beat){.world_rank = a->w, .hb = hb_of(a, now)};
    }
    put(k, &off, FTRT__MSG_HOST_BEAT, b, (uint32_t)(sizeof *b + (size_t)b->n * sizeof(ftrt__beat)));
    double limit = opt_timeout_ms / 1000.0;
    for (int i = 0; i < hs->n; i++) {
        agent *a = &agents[hs->first_w + i];
        int st = atomic_load(&a->state);
        if (st == ST_ALIVE) heartbeat(k, a, now, 0, &off);
        else if (st == ST_SILENT && !a->lost_sent && now - a->last_send > limit)
            put_lost(k, &off, a, FTRT__LOST_SILENT); /* the agent times a rank's silence */
    }
    flush_to(k, hs->fd, HOST_ID(hs->h), &hs->tx, &hs->tx_used, &hs->tx_cap, k->buf, off);
    hs->last_send = now;
}

/* Host commands: a rank dies (its agent reports it at once), a host is killed (its
 * connection closes) or cut off (it falls silent). Returns 1 when c was one. */
int host_cmd(worker *k, const cmd *c)
{
    agent *a = &agents[c->w];
    hostsim *hs = a->host >= 0 ? &hosts[a->host] : NULL;
    if (!hs) return 0;
    double now = ftrt__now();
    if (c->op == CMD_KILL) {
        size_t off = 0;
        atomic_store(&a->state, ST_KILLED);
        a->last_send = now; /* (taken before the send: the coordinator may answer first) */
        put_lost(k, &off, a, FTRT__LOST_CLOSED);
        flush_to(k, hs->fd, HOST_ID(hs->h), &hs->tx, &hs->tx_used, &hs->tx_cap, k->buf, off);
    } else if (c->op == CMD_SILENCE) {
        atomic_store(&a->state, ST_SILENT);
    } else if (c->op == CMD_KILL_HOST || c->op == CMD_SILENCE_HOST) {
        for (int i = 0; i < hs->n; i++)
            atomic_store(&agents[hs->first_w + i].state, c->op == CMD_KILL_HOST ? ST_KILLED : ST_SILENT);
        atomic_store(&hs->state, c->op == CMD_KILL_HOST ? ST_KILLED : ST_SILENT);
        if (c->op == CMD_KILL_HOST && hs->fd >= 0) {
            epoll_ctl(k->ep, EPOLL_CTL_DEL, hs->fd, NULL);
            close(hs->fd); /* what the kernel does when every process of the host dies */
            hs->fd = -1;
        }
        a->last_send = c->op == CMD_KILL_HOST ? now : hs->last_send;
    } else {
        return 0;
    }
    pthread_mutex_lock(&ev_lock);
    trial_t_ref = a->last_send;
    pthread_mutex_unlock(&ev_lock);
    return 1;
}
#endif

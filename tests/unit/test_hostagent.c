/*
 * Unit tests: the host agent (runtime/hostagent.c) with its real thread, between a fake
 * coordinator (a TCP listener the test reads and writes) and fake ranks (connections to the
 * host's local socket speaking the rank's side of the protocol): joining, heartbeats batched
 * into one HOST_BEAT per period, LEDGER held for the batch but never overtaken, RELAY and MULTI
 * delivered, a rank's death reported at once and a goodbye not, CUT, COORD_LOST; fencing: a
 * CUT with fence SIGKILLs a rank's process (forked children play ranks of their own process),
 * never the agent's own; and its part in the relay groups (hostrelay.c: the relay's FANOUT
 * delivered here and sent on to a member, a member's MULTIs read from its relay, RELAY_VIA port
 * 0, a wrong PEER_HELLO, a member's connects to its relay failed and tried again). The host
 * agent thread and the test thread meet here, so the suite also runs it under
 * ThreadSanitizer.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ftrt.h"
#include "base/fence.h"
#include "base/knobs.h"
#include "runtime/internal.h"

typedef struct peer { /* one end the test holds: the coordinator's, or a rank's */
    int fd;
    ftrt__rxbuf rx;
} peer;

typedef struct fixture {
    struct ftrt__hostagent *ha;
    int listen_fd;
    uint64_t secret;
    peer coord;
    peer rank[2]; /* world ranks 5 and 6 */
    pid_t kids[4]; /* forked ranks not yet reaped (teardown kills them) */
    int nkids;
    ftrt__coord_at relay_at; /* where the agent listens for its relay group (RELAY_AT) */
} fixture;

/* The next message on p (skipping PINGs, and HOST_BEATs unless asked for) within 5 s, into *h
 * and buf (at most cap bytes). Returns 1, or 0 on timeout or EOF. */
static int next_msg(peer *p, uint32_t want, ftrt__msghdr *h, void *buf, size_t cap)
{
    double deadline = ftrt__now() + 5;
    while (ftrt__now() < deadline) {
        const void *payload;
        int r;
        while ((r = ftrt__rx_next(&p->rx, h, &payload)) == 1) {
            if (h->type == FTRT__MSG_PING || (h->type == FTRT__MSG_HOST_BEAT && want != h->type))
                continue;
            assert_true(h->len <= cap);
            memcpy(buf, payload, h->len);
            return 1;
        }
        struct pollfd pf = {.fd = p->fd, .events = POLLIN};
        if (poll(&pf, 1, 100) > 0 && ftrt__rx_fill(&p->rx, p->fd) == 0) return 0;
    }
    return 0;
}

/* 1 when p sees EOF within 5 s (messages before it are skipped). */
static int sees_eof(peer *p)
{
    double deadline = ftrt__now() + 5;
    while (ftrt__now() < deadline) {
        struct pollfd pf = {.fd = p->fd, .events = POLLIN};
        if (poll(&pf, 1, 100) > 0) {
            ssize_t n = ftrt__rx_fill(&p->rx, p->fd);
            if (n == 0 || (n < 0 && n != -EAGAIN)) return 1;
            ftrt__msghdr h;
            const void *x;
            while (ftrt__rx_next(&p->rx, &h, &x) == 1) {}
        }
    }
    return 0;
}

/* A relayed message from the host agent: *w and the inner type; the inner payload into buf. */
static uint32_t relayed(const uint8_t *payload, size_t len, int32_t *w, void *buf, size_t cap)
{
    ftrt__msghdr ih;
    const void *inner;
    assert_int_equal(ftrt__relay_open(payload, len, w, &ih, &inner), 0);
    assert_true(ih.len <= cap);
    memcpy(buf, inner, ih.len);
    return ih.type;
}

/* Rank slot i (world rank 5 + i) connects to the local socket and says HELLO; the host agent
 * answers HOSTED and relays the HELLO. */
static void rank_join(fixture *f, int i)
{
    peer *p = &f->rank[i];
    p->fd = ftrt__local_connect(f->secret, 2000);
    assert_true(p->fd >= 0);
    ftrt__hello hello = {.secret = f->secret, .world_rank = 5 + i, .pid = 100 + i};
    snprintf(hello.host, sizeof hello.host, "h");
    assert_int_equal(ftrt__msg_send(p->fd, FTRT__MSG_HELLO, &hello, sizeof hello), 0);
    ftrt__msghdr h;
    ftrt__epoch_msg hosted;
    assert_true(next_msg(p, 0, &h, &hosted, sizeof hosted));
    assert_int_equal(h.type, FTRT__MSG_HOSTED);
    assert_int_equal(hosted.value, 4); /* the agent's world rank */
    uint8_t buf[256];
    int32_t w;
    ftrt__hello got;
    assert_true(next_msg(&f->coord, 0, &h, buf, sizeof buf));
    assert_int_equal(h.type, FTRT__MSG_RELAY);
    assert_int_equal(relayed(buf, h.len, &w, &got, sizeof got), FTRT__MSG_HELLO);
    assert_int_equal(w, 5 + i);
    assert_int_equal(got.secret, f->secret);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char addr[64];
    int port;
    f->listen_fd = ftrt__listen("127.0.0.1", addr, sizeof addr, &port);
    assert_true(f->listen_fd >= 0);
    f->secret = 0x4a6e7ull ^ (uint64_t)getpid() << 20;
    int lfd = ftrt__local_listen(f->secret);
    assert_true(lfd >= 0);
    ftrt__hostagent_args a = {.secret = f->secret, .addrs = addr, .port = port, .world_rank = 4,
                              .host = "h", .heartbeat_ms = 20, .heartbeat_timeout_ms = 1000,
                              .init_timeout_ms = 2000};
    assert_int_equal(ftrt__hostagent_start(&f->ha, lfd, &a), 0);
    f->coord.fd = accept(f->listen_fd, NULL, NULL);
    assert_true(f->coord.fd >= 0);
    ftrt__msghdr h;
    ftrt__hello hello;
    assert_true(next_msg(&f->coord, 0, &h, &hello, sizeof hello));
    assert_int_equal(h.type, FTRT__MSG_HOST_HELLO);
    assert_int_equal(hello.world_rank, 4);
    assert_int_equal(hello.secret, f->secret);
    assert_true(next_msg(&f->coord, 0, &h, &f->relay_at, sizeof f->relay_at));
    assert_int_equal(h.type, FTRT__MSG_RELAY_AT);
    assert_int_equal(f->relay_at.world_rank, 4);
    assert_true(f->relay_at.port > 0 && f->relay_at.addrs[0]);
    f->rank[0].fd = f->rank[1].fd = -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    for (int i = 0; i < 2; i++)
        if (f->rank[i].fd >= 0) close(f->rank[i].fd);
    for (int i = 0; i < f->nkids; i++)
        if (f->kids[i] > 0) {
            kill(f->kids[i], SIGKILL);
            waitpid(f->kids[i], NULL, 0);
        }
    ftrt__hostagent_stop(f->ha, 0.5);
    close(f->coord.fd);
    close(f->listen_fd);
    ftrt__rx_free(&f->coord.rx);
    for (int i = 0; i < 2; i++) ftrt__rx_free(&f->rank[i].rx);
    free(f);
    return 0;
}

/* Both ranks' heartbeats reach the coordinator in one HOST_BEAT per period, the newest of
 * each; a LEDGER waits for the batch, a REPORT does not, and a LEDGER sent before a REPORT is
 * relayed before it. */
static void heartbeats_batched(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    rank_join(f, 1);
    for (int i = 0; i < 2; i++) {
        ftrt__heartbeat hb = {.steps_done = 10 + i};
        assert_int_equal(ftrt__msg_send(f->rank[i].fd, FTRT__MSG_HEARTBEAT, &hb, sizeof hb), 0);
        hb.steps_done = 20 + i; /* the newest one is what counts */
        assert_int_equal(ftrt__msg_send(f->rank[i].fd, FTRT__MSG_HEARTBEAT, &hb, sizeof hb), 0);
    }
    union {
        ftrt__host_beat b;
        uint8_t bytes[sizeof(ftrt__host_beat) + 4 * sizeof(ftrt__beat)];
    } u;
    ftrt__msghdr h;
    int seen = 0;
    for (int tries = 0; tries < 50 && seen != 2; tries++) {
        assert_true(next_msg(&f->coord, FTRT__MSG_HOST_BEAT, &h, &u, sizeof u));
        if (h.type != FTRT__MSG_HOST_BEAT) continue;
        assert_int_equal(ftrt__host_beat_check(&u.b, h.len), 0);
        seen = 0;
        for (int i = 0; i < u.b.n; i++)
            seen += u.b.e[i].hb.steps_done == 20 + (u.b.e[i].world_rank - 5);
    }
    assert_int_equal(seen, 2);
    /* LEDGER then REPORT from rank 5: the REPORT goes at once, the LEDGER before it */
    ftrt__ledger_msg lm = {.n = 0};
    assert_int_equal(ftrt__msg_send(f->rank[0].fd, FTRT__MSG_LEDGER, &lm, sizeof lm), 0);
    ftrt__report rep = {.steps_done = 33, .epoch = 1};
    assert_int_equal(ftrt__msg_send(f->rank[0].fd, FTRT__MSG_REPORT, &rep, sizeof rep), 0);
    uint8_t buf[512];
    int32_t w;
    uint8_t inner[256];
    assert_true(next_msg(&f->coord, 0, &h, buf, sizeof buf));
    assert_int_equal(relayed(buf, h.len, &w, inner, sizeof inner), FTRT__MSG_LEDGER);
    assert_true(next_msg(&f->coord, 0, &h, buf, sizeof buf));
    assert_int_equal(relayed(buf, h.len, &w, inner, sizeof inner), FTRT__MSG_REPORT);
    assert_int_equal(w, 5);
}

/* RELAY goes to its rank only; MULTI to each rank it lists. */
static void relay_and_multi(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    rank_join(f, 1);
    ftrt__relay pre = {.world_rank = 6};
    ftrt__ckpt_msg cm = {.step = 7, .epoch = 0, .result = 0};
    assert_int_equal(ftrt__msg_send2(f->coord.fd, FTRT__MSG_RELAY, &pre, sizeof pre,
                                     FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    ftrt__msghdr h;
    ftrt__ckpt_msg got;
    assert_true(next_msg(&f->rank[1], 0, &h, &got, sizeof got));
    assert_int_equal(h.type, FTRT__MSG_COMMIT);
    assert_int_equal(got.step, 7);
    int32_t list[4] = {2, 0, 5, 6};
    ftrt__failure_msg fm = {.epoch = 3};
    assert_int_equal(ftrt__msg_send2(f->coord.fd, FTRT__MSG_MULTI, list, sizeof list,
                                     FTRT__MSG_FAILURE, &fm, sizeof fm), 0);
    for (int i = 0; i < 2; i++) {
        ftrt__failure_msg x;
        assert_true(next_msg(&f->rank[i], 0, &h, &x, sizeof x));
        assert_int_equal(h.type, FTRT__MSG_FAILURE); /* (rank 5 never saw the COMMIT) */
        assert_int_equal(x.epoch, 3);
    }
}

/* A coordinator's message of an older term than one the agent saw (a deposed coordinator's)
 * is refused: not delivered; what the agent passes on carries the term. */
static void stale_term_refused(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    ftrt__relay pre = {.world_rank = 5};
    ftrt__ckpt_msg cm = {.step = 7, .epoch = 0, .result = 0};
    ftrt__msg_set_term(2);
    assert_int_equal(ftrt__msg_send2(f->coord.fd, FTRT__MSG_RELAY, &pre, sizeof pre,
                                     FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    ftrt__msg_set_term(1); /* the deposed one */
    cm.step = 8;
    assert_int_equal(ftrt__msg_send2(f->coord.fd, FTRT__MSG_RELAY, &pre, sizeof pre,
                                     FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    ftrt__msg_set_term(2);
    cm.step = 9;
    assert_int_equal(ftrt__msg_send2(f->coord.fd, FTRT__MSG_RELAY, &pre, sizeof pre,
                                     FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    ftrt__msg_set_term(0);
    ftrt__msghdr h;
    ftrt__ckpt_msg got;
    assert_true(next_msg(&f->rank[0], 0, &h, &got, sizeof got));
    assert_int_equal(got.step, 7);
    assert_int_equal(h.term, 2);
    assert_true(next_msg(&f->rank[0], 0, &h, &got, sizeof got));
    assert_int_equal(got.step, 9); /* step 8 (term 1) refused */
    assert_int_equal(h.term, 2);
}

/* The next RELAY_PEER at the coordinator: *up for world rank w (asserted). */
static void relay_peer_says(fixture *f, int w, int up)
{
    ftrt__msghdr h;
    ftrt__relay_peer rp;
    assert_true(next_msg(&f->coord, 0, &h, &rp, sizeof rp));
    assert_int_equal(h.type, FTRT__MSG_RELAY_PEER);
    assert_int_equal(rp.world_rank, w);
    assert_int_equal(rp.up, up);
}

/* As a relay: a member (world rank 77's host agent, played by the test) connects with the
 * secret and is confirmed (RELAY_PEER up 1); a FANOUT's part for this host reaches its ranks,
 * the member's part reaches the member as a MULTI with its ranks; a part for a host agent not
 * connected is skipped; the member's close is reported (up 0). A PEER_HELLO with a wrong
 * secret is dropped and never reported. */
static void relay_fans_out(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    rank_join(f, 1);
    peer bad = {.fd = ftrt__connect_any(f->relay_at.addrs, f->relay_at.port, 2000, NULL, 0)};
    assert_true(bad.fd >= 0);
    ftrt__hello hello = {.secret = f->secret ^ 1, .world_rank = 78};
    assert_int_equal(ftrt__msg_send(bad.fd, FTRT__MSG_PEER_HELLO, &hello, sizeof hello), 0);
    assert_true(sees_eof(&bad));
    close(bad.fd);
    ftrt__rx_free(&bad.rx);
    peer m = {.fd = ftrt__connect_any(f->relay_at.addrs, f->relay_at.port, 2000, NULL, 0)};
    assert_true(m.fd >= 0);
    hello = (ftrt__hello){.secret = f->secret, .world_rank = 77};
    assert_int_equal(ftrt__msg_send(m.fd, FTRT__MSG_PEER_HELLO, &hello, sizeof hello), 0);
    relay_peer_says(f, 77, 1); /* (not 78's: it was never confirmed) */
    /* {nparts, pad}, {n, agent_w, ranks}: this host's 5 and 6, member 77's 80 and 81, 99's 90 */
    int32_t parts[] = {3, 0, 2, 4, 5, 6, 2, 77, 80, 81, 1, 99, 90};
    ftrt__failure_msg fm = {.epoch = 4};
    assert_int_equal(ftrt__msg_send2(f->coord.fd, FTRT__MSG_FANOUT, parts, sizeof parts,
                                     FTRT__MSG_FAILURE, &fm, sizeof fm), 0);
    ftrt__msghdr h;
    for (int i = 0; i < 2; i++) {
        ftrt__failure_msg x;
        assert_true(next_msg(&f->rank[i], 0, &h, &x, sizeof x));
        assert_int_equal(h.type, FTRT__MSG_FAILURE);
        assert_int_equal(x.epoch, 4);
    }
    uint8_t buf[256];
    assert_true(next_msg(&m, 0, &h, buf, sizeof buf));
    assert_int_equal(h.type, FTRT__MSG_MULTI);
    int32_t n;
    const int32_t *ws;
    ftrt__msghdr ih;
    const void *inner;
    assert_int_equal(ftrt__multi_open(buf, h.len, &n, &ws, &ih, &inner), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ws[0], 80);
    assert_int_equal(ws[1], 81);
    assert_int_equal(ih.type, FTRT__MSG_FAILURE);
    close(m.fd);
    ftrt__rx_free(&m.rx);
    relay_peer_says(f, 77, 0);
}

/* The host agent's connection to the relay on lfd within timeout_s (its PEER_HELLO checked:
 * world rank 4, the job's secret), or -1 when none comes. The coordinator PINGs it meanwhile (it would fall silent after 1 s). */
static int relay_accepts(fixture *f, int lfd, double timeout_s)
{
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    ftrt__epoch_msg ping = {0};
    for (double end = ftrt__now() + timeout_s; poll(&pf, 1, 100) <= 0;) {
        if (ftrt__now() > end) return -1;
        assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_PING, &ping, sizeof ping), 0);
    }
    peer r = {.fd = accept(lfd, NULL, NULL)};
    assert_true(r.fd >= 0);
    ftrt__msghdr h;
    ftrt__hello hello;
    assert_true(next_msg(&r, 0, &h, &hello, sizeof hello));
    assert_int_equal(h.type, FTRT__MSG_PEER_HELLO);
    assert_int_equal(hello.world_rank, 4);
    assert_int_equal(hello.secret, f->secret);
    ftrt__rx_free(&r.rx);
    return r.fd;
}

/* As a member: told RELAY_VIA (a relay played by the test), it connects and says PEER_HELLO;
 * the relay's MULTIs reach its ranks, one of an older term than seen is refused; RELAY_VIA
 * with port 0 closes the connection to the relay. */
static void member_reads_relay(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    ftrt__coord_at at = {.world_rank = 40};
    int port;
    int lfd = ftrt__listen("127.0.0.1", at.addrs, sizeof at.addrs, &port);
    assert_true(lfd >= 0);
    at.port = port;
    assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_RELAY_VIA, &at, sizeof at), 0);
    peer r = {.fd = relay_accepts(f, lfd, 5)};
    assert_true(r.fd >= 0);
    ftrt__msghdr h;
    int32_t list[3] = {1, 4, 5}; /* (a relayed MULTI's pad holds the member's agent) */
    ftrt__ckpt_msg cm = {.step = 11};
    ftrt__msg_set_term(3);
    assert_int_equal(ftrt__msg_send2(r.fd, FTRT__MSG_MULTI, list, sizeof list, FTRT__MSG_COMMIT,
                                     &cm, sizeof cm), 0);
    ftrt__msg_set_term(2); /* a deposed coordinator's, relayed */
    cm.step = 12;
    assert_int_equal(ftrt__msg_send2(r.fd, FTRT__MSG_MULTI, list, sizeof list, FTRT__MSG_COMMIT,
                                     &cm, sizeof cm), 0);
    ftrt__msg_set_term(3);
    cm.step = 13;
    assert_int_equal(ftrt__msg_send2(r.fd, FTRT__MSG_MULTI, list, sizeof list, FTRT__MSG_COMMIT,
                                     &cm, sizeof cm), 0);
    ftrt__msg_set_term(0);
    ftrt__ckpt_msg got;
    assert_true(next_msg(&f->rank[0], 0, &h, &got, sizeof got));
    assert_int_equal(got.step, 11);
    assert_true(next_msg(&f->rank[0], 0, &h, &got, sizeof got));
    assert_int_equal(got.step, 13); /* step 12 (term 2) refused */
    ftrt__msg_set_term(3);
    ftrt__coord_at none = {.world_rank = -1};
    assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_RELAY_VIA, &none, sizeof none), 0);
    ftrt__msg_set_term(0);
    assert_true(sees_eof(&r));
    close(r.fd);
    close(lfd);
    ftrt__rx_free(&r.rx);
}

/* setup, with the host agent's first FTRT__RELAY_CONNECT_RETRIES connects to its relay failed
 * (FTRT_TEST_RELAY_CONNECT_FAILS; set before its thread starts). */
static int setup_connect_fails(void **state)
{
    ftrt__knobs.relay_connect_fails = FTRT__RELAY_CONNECT_RETRIES;
    return setup(state);
}

static int setup_all_connects_fail(void **state)
{
    ftrt__knobs.relay_connect_fails = FTRT__RELAY_CONNECT_RETRIES + 1;
    return setup(state);
}

static int teardown_knobs(void **state)
{
    int rc = teardown(state);
    ftrt__knobs.relay_connect_fails = 0;
    return rc;
}

/* A relay played by the test (world rank 40): listens on loopback, its address in *at.
 * Returns the listener. */
static int relay_listen(ftrt__coord_at *at)
{
    int port;
    *at = (ftrt__coord_at){.world_rank = 40};
    int lfd = ftrt__listen("127.0.0.1", at->addrs, sizeof at->addrs, &port);
    assert_true(lfd >= 0);
    at->port = port;
    return lfd;
}

/* Tells the host agent RELAY_VIA to the relay at *at. */
static void via_to(fixture *f, const ftrt__coord_at *at)
{
    assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_RELAY_VIA, at, sizeof *at), 0);
}

/* As a member that cannot connect to its relay (its first FTRT__RELAY_CONNECT_RETRIES connects
 * failed by the knob): it tries again with backoff, and its last retry (0.25 + 0.5 + 1 s after
 * the first) connects and says PEER_HELLO. */
static void member_retries_relay(void **state)
{
    fixture *f = *state;
    ftrt__coord_at at;
    int lfd = relay_listen(&at);
    double t0 = ftrt__now();
    via_to(f, &at);
    int fd = relay_accepts(f, lfd, 5);
    assert_true(fd >= 0);
    assert_true(ftrt__now() - t0 >= 1.7); /* (not before its third retry was due) */
    close(fd);
    close(lfd);
}

/* A member whose every try fails (the first connect and FTRT__RELAY_CONNECT_RETRIES retries)
 * gives up: no connection within 3 s (the retries were due within 1.75 s); told the relay
 * again (RELAY_VIA), it tries anew, and connects (the knob spent). */
static void member_gives_up(void **state)
{
    fixture *f = *state;
    ftrt__coord_at at;
    int lfd = relay_listen(&at);
    via_to(f, &at);
    assert_int_equal(relay_accepts(f, lfd, 3), -1);
    via_to(f, &at);
    int fd = relay_accepts(f, lfd, 5);
    assert_true(fd >= 0);
    close(fd);
    close(lfd);
}

/* A rank whose socket closes without BYE died: RANK_LOST at once; one that said BYE left. */
static void death_and_goodbye(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    rank_join(f, 1);
    ftrt__bye bye = {.steps_done = 5};
    assert_int_equal(ftrt__msg_send(f->rank[1].fd, FTRT__MSG_BYE, &bye, sizeof bye), 0);
    uint8_t buf[256], inner[128];
    int32_t w;
    ftrt__msghdr h;
    assert_true(next_msg(&f->coord, 0, &h, buf, sizeof buf));
    assert_int_equal(relayed(buf, h.len, &w, inner, sizeof inner), FTRT__MSG_BYE);
    close(f->rank[1].fd); /* after its BYE: no loss */
    f->rank[1].fd = -1;
    double t0 = ftrt__now();
    close(f->rank[0].fd); /* rank 5 dies */
    f->rank[0].fd = -1;
    ftrt__rank_lost m;
    assert_true(next_msg(&f->coord, 0, &h, &m, sizeof m));
    assert_int_equal(h.type, FTRT__MSG_RANK_LOST);
    assert_int_equal(m.world_rank, 5);
    assert_int_equal(m.why, FTRT__LOST_CLOSED);
    assert_true(ftrt__now() - t0 < 0.2); /* at once, not at the next period */
    /* and nothing about rank 6 follows */
    struct pollfd pf = {.fd = f->coord.fd, .events = POLLIN};
    for (int i = 0; i < 5; i++) {
        if (poll(&pf, 1, 50) > 0) ftrt__rx_fill(&f->coord.rx, f->coord.fd);
        const void *x;
        while (ftrt__rx_next(&f->coord.rx, &h, &x) == 1) assert_int_not_equal(h.type, FTRT__MSG_RANK_LOST);
    }
}

/* A rank silent for the heartbeat timeout is reported and cut off; CUT closes a rank's socket
 * without a report. */
static void silence_and_cut(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    rank_join(f, 1);
    ftrt__cut cut = {.world_rank = 6};
    assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_CUT, &cut, sizeof cut), 0);
    assert_true(sees_eof(&f->rank[1]));
    /* rank 5 never sends a heartbeat; the coordinator PINGs, as it does, so that only the rank
     * is silent */
    ftrt__msghdr h;
    ftrt__rank_lost m = {0};
    double t0 = ftrt__now();
    while (ftrt__now() - t0 < 3 && m.world_rank == 0) {
        ftrt__epoch_msg ping = {0};
        assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_PING, &ping, sizeof ping), 0);
        struct pollfd pf = {.fd = f->coord.fd, .events = POLLIN};
        if (poll(&pf, 1, 100) > 0) assert_true(ftrt__rx_fill(&f->coord.rx, f->coord.fd) > 0);
        const void *x;
        while (ftrt__rx_next(&f->coord.rx, &h, &x) == 1)
            if (h.type == FTRT__MSG_RANK_LOST) memcpy(&m, x, sizeof m);
    }
    assert_int_equal(m.world_rank, 5);
    assert_int_equal(m.why, FTRT__LOST_SILENT);
    assert_true(ftrt__now() - t0 >= 0.8); /* after the heartbeat timeout, not before */
    assert_true(sees_eof(&f->rank[0]));
}

/* A rank of its own process: a forked child that joins as world rank w (the coordinator's side
 * sees its HELLO relayed), then reads its socket until EOF, when it exits 3 if eof_exits, else
 * waits forever (a frozen rank cut off). */
static pid_t fork_rank(fixture *f, int w, int eof_exits)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = ftrt__local_connect(f->secret, 2000);
        ftrt__hello hello = {.secret = f->secret, .world_rank = w, .pid = (int32_t)getpid()};
        if (fd < 0 || ftrt__msg_send(fd, FTRT__MSG_HELLO, &hello, sizeof hello)) _exit(2);
        char buf[512];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {}
        if (eof_exits) _exit(3);
        for (;;) pause();
    }
    f->kids[f->nkids++] = pid;
    ftrt__msghdr h;
    uint8_t buf[256];
    int32_t rw = 0;
    ftrt__hello got;
    while (rw != w) {
        assert_true(next_msg(&f->coord, 0, &h, buf, sizeof buf));
        if (h.type == FTRT__MSG_RELAY &&
            relayed(buf, h.len, &rw, &got, sizeof got) != FTRT__MSG_HELLO)
            rw = 0;
    }
    return pid;
}

/* Reaps child pid within 5 s: its wait status, or -1 (it is still alive). */
static int reaped(fixture *f, pid_t pid)
{
    int st;
    for (int i = 0; i < 500; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            for (int k = 0; k < f->nkids; k++)
                if (f->kids[k] == pid) f->kids[k] = 0;
            return st;
        }
        usleep(10000);
    }
    return -1;
}

static void send_cut(fixture *f, int w, int fence)
{
    ftrt__cut cut = {.world_rank = w, .fence = fence};
    assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_CUT, &cut, sizeof cut), 0);
}

/* The coordinator's PINGs until the host agent reports world rank w lost (within 3 s): its
 * RANK_LOST's why. */
static int await_rank_lost(fixture *f, int w)
{
    ftrt__msghdr h;
    ftrt__rank_lost m = {0};
    double t0 = ftrt__now();
    while (ftrt__now() - t0 < 3 && m.world_rank != w) {
        ftrt__epoch_msg ping = {0};
        assert_int_equal(ftrt__msg_send(f->coord.fd, FTRT__MSG_PING, &ping, sizeof ping), 0);
        struct pollfd pf = {.fd = f->coord.fd, .events = POLLIN};
        if (poll(&pf, 1, 100) > 0) assert_true(ftrt__rx_fill(&f->coord.rx, f->coord.fd) > 0);
        const void *x;
        while (ftrt__rx_next(&f->coord.rx, &h, &x) == 1)
            if (h.type == FTRT__MSG_RANK_LOST) memcpy(&m, x, sizeof m);
    }
    assert_int_equal(m.world_rank, w);
    return m.why;
}

/* CUT with fence SIGKILLs the rank's process; without fence it only closes the rank's socket;
 * a rank in the agent's own process is cut off but never fenced (this test would die); a rank
 * the agent reported silent is not killed by the agent on its own, but its process is kept
 * for the coordinator's CUT, which fences it. */
static void cut_fences(void **state)
{
    fixture *f = *state;
    rank_join(f, 0); /* world rank 5, in this process: the agent's own */
    pid_t a = fork_rank(f, 7, 0), b = fork_rank(f, 8, 1);
    send_cut(f, 7, 1);
    int st = reaped(f, a);
    assert_true(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    send_cut(f, 8, 0);
    st = reaped(f, b);
    assert_true(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 3); /* saw EOF, not killed */
    send_cut(f, 5, 1);
    assert_true(sees_eof(&f->rank[0])); /* cut off, and this process lives on */
    pid_t c = fork_rank(f, 9, 0);       /* never sends a heartbeat */
    assert_int_equal(await_rank_lost(f, 9), FTRT__LOST_SILENT);
    assert_int_equal(waitpid(c, &st, WNOHANG), 0); /* the coordinator decides, not the agent */
    send_cut(f, 9, 1);
    st = reaped(f, c);
    assert_true(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* ftrt__fence by pid (the coordinator's way, and the agent's without pidfd_open) kills; the
 * calling process itself is refused. */
static void fence_by_pid(void **state)
{
    fixture *f = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        for (;;) pause();
    f->kids[f->nkids++] = pid;
    assert_int_equal(ftrt__fence(3, pid, -1, "test"), 0);
    int st = reaped(f, pid);
    assert_true(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(ftrt__fence(3, getpid(), -1, "test"), -EDEADLK);
    assert_int_equal(ftrt__fence(3, 0, -1, "test"), -EINVAL);
}

/* A coordinator lost: every rank gets COORD_LOST (FTRT_ECOORD), then its socket closes. */
static void coordinator_lost(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    close(f->coord.fd);
    f->coord.fd = socket(AF_INET, SOCK_STREAM, 0); /* (closed by teardown) */
    ftrt__msghdr h;
    ftrt__epoch_msg m;
    assert_true(next_msg(&f->rank[0], 0, &h, &m, sizeof m));
    assert_int_equal(h.type, FTRT__MSG_COORD_LOST);
    assert_int_equal(m.value, FTRT_ECOORD);
    assert_true(sees_eof(&f->rank[0]));
}

/* A send to a rank whose socket is closed for reading (EPIPE: the process died, or the rank
 * left this agent) reports it as closed, not silent: a rank reported silent is kept for the
 * coordinator's CUT and fenced by it, and a rank that left must never be. (shutdown SHUT_RD:
 * the agent's sends fail while its reads see no EOF, so only a send can find it.) */
static void send_to_closed_rank(void **state)
{
    fixture *f = *state;
    rank_join(f, 0);
    assert_int_equal(shutdown(f->rank[0].fd, SHUT_RD), 0);
    ftrt__relay pre = {.world_rank = 5};
    ftrt__ckpt_msg cm = {.step = 7, .epoch = 0, .result = 0};
    assert_int_equal(ftrt__msg_send2(f->coord.fd, FTRT__MSG_RELAY, &pre, sizeof pre,
                                     FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    assert_int_equal(await_rank_lost(f, 5), FTRT__LOST_CLOSED); /* (a RELAY or a PING found it) */
}

/* A HELLO with another job's secret is refused: the socket closes, nothing is relayed. */
static void wrong_secret(void **state)
{
    fixture *f = *state;
    int fd = ftrt__local_connect(f->secret, 2000);
    assert_true(fd >= 0);
    ftrt__hello hello = {.secret = f->secret ^ 1, .world_rank = 5};
    assert_int_equal(ftrt__msg_send(fd, FTRT__MSG_HELLO, &hello, sizeof hello), 0);
    peer p = {.fd = fd};
    assert_true(sees_eof(&p));
    ftrt__rx_free(&p.rx);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(heartbeats_batched, setup, teardown),
        cmocka_unit_test_setup_teardown(relay_and_multi, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_term_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(death_and_goodbye, setup, teardown),
        cmocka_unit_test_setup_teardown(silence_and_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(cut_fences, setup, teardown),
        cmocka_unit_test_setup_teardown(fence_by_pid, setup, teardown),
        cmocka_unit_test_setup_teardown(coordinator_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_secret, setup, teardown),
        cmocka_unit_test_setup_teardown(relay_fans_out, setup, teardown),
        cmocka_unit_test_setup_teardown(member_reads_relay, setup, teardown),
        cmocka_unit_test_setup_teardown(member_retries_relay, setup_connect_fails, teardown_knobs),
        cmocka_unit_test_setup_teardown(member_gives_up, setup_all_connects_fail, teardown_knobs),
        cmocka_unit_test_setup_teardown(send_to_closed_rank, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

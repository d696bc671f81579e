/*
 * Unit tests: the real coordinator (ftrt__coordinator_run, in a child process) with fake host
 * agents on loopback, around a relay group whose relay is lost (runtime/coordinator/fanout.c;
 * docs/detection-and-recovery.md "Relay groups", A relay lost): the group must get a new relay
 * and a later fan-out go through it.
 *
 * The world: coordinator 0 (host h0), trainers 1 (h1), 2 (h2) and 3 (h3), each served by a
 * host agent in its own process, the three one relay group, and spare 4 on its own connection
 * (FTRT_TEST_RELAY_GROUP=3); no standby. The agents join in that order (h1's connects and says
 * all before h2's connects, each next one once told where the relay listens), so the agent of
 * h1 is the relay. The
 * fake agents listen nowhere: the test reads what the coordinator tells them (RELAY_VIA) and
 * answers for them (RELAY_PEER, relayed HELLOs and REPORTs).
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/knobs.h"
#include "base/log.h"
#include "base/net.h"
#include "base/proto.h"
#include "ftrt.h"
#include "helpers.h"
#include "runtime/coordinator/coord.h" /* (FTRT__RELAY_REJOINS) */
#include "runtime/coordinator/coordinator.h"

enum { W = 5, N = 3, A = 4, SPARE = 4, PORT0 = 41000 };

typedef struct fixture {
    char dir[512];
    pid_t coord;
    int agent[A]; /* the host agent in world rank w's process (agent[0] unused) */
    ftrt__rxbuf rx[A];
    int spare;    /* spare 4's own connection */
    ftrt__rxbuf spare_rx;
    uint64_t secret;
} fixture;

/* Waits up to timeout_s for the next message of `type` on agent w's connection (others
 * skipped); with inner_w > 0, a RELAY to that world rank whose inner message is of `type`.
 * Returns 1 with the payload copied to out (len bytes; len 0: any length, nothing copied), 0
 * on timeout, -1 on EOF. */
static int agent_recv(fixture *f, int w, uint32_t type, int inner_w, void *out, size_t len,
                      double timeout_s)
{
    double deadline = ftrt__now() + timeout_s;
    for (;;) {
        ftrt__msghdr h;
        const void *p;
        while (ftrt__rx_next(&f->rx[w], &h, &p) == 1) {
            int32_t rw = 0;
            if (inner_w > 0 && (h.type != FTRT__MSG_RELAY ||
                                ftrt__relay_open(p, h.len, &rw, &h, &p) || rw != inner_w))
                continue;
            if (h.type != type) continue;
            if (len) {
                assert_int_equal(h.len, len);
                memcpy(out, p, len);
            }
            return 1;
        }
        int ms = (int)((deadline - ftrt__now()) * 1000.0);
        if (ms <= 0) return 0;
        struct pollfd pf = {.fd = f->agent[w], .events = POLLIN};
        if (poll(&pf, 1, ms) > 0) {
            ssize_t got = ftrt__rx_fill(&f->rx[w], f->agent[w]);
            if (got == 0 || (got < 0 && got != -EAGAIN)) return -1;
        }
    }
}

/* A message relayed for world rank w by its host agent (RELAY). */
static void relay_for(fixture *f, int w, uint32_t type, const void *p, uint32_t len)
{
    ftrt__relay pre = {.world_rank = w};
    assert_int_equal(ftrt__msg_send2(f->agent[w], FTRT__MSG_RELAY, &pre, sizeof pre, type, p, len),
                     0);
}

static void relay_peer_up(fixture *f, int relay, int member_w, int up)
{
    ftrt__relay_peer rp = {.world_rank = member_w, .up = up};
    assert_int_equal(ftrt__msg_send(f->agent[relay], FTRT__MSG_RELAY_PEER, &rp, sizeof rp), 0);
}

static void relay_peer(fixture *f, int relay, int member_w)
{
    relay_peer_up(f, relay, member_w, 1);
}

/* Waits up to 5 s for the status file to name `relay` as world rank w's relay (-1: null). */
static void wait_relay(fixture *f, int w, int relay)
{
    char path[600], want[64], key[32], buf[8192];
    snprintf(path, sizeof path, "%s/status.json", f->dir);
    snprintf(key, sizeof key, "{\"world_rank\": %d,", w);
    if (relay >= 0) snprintf(want, sizeof want, "\"relay\": %d}", relay);
    else snprintf(want, sizeof want, "\"relay\": null}");
    for (double end = ftrt__now() + 5; ftrt__now() < end; usleep(10000)) {
        FILE *fp = fopen(path, "r");
        if (!fp) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        buf[n] = 0;
        char *at = strstr(buf, key), *eol = at ? strchr(at, '\n') : NULL;
        if (eol) *eol = 0;
        if (at && strstr(at, want)) return;
    }
    fail_msg("the status file never gave world rank %d the relay %d", w, relay);
}

/* The next RELAY_VIA to agent w: its port (0: close the connection to the relay). */
static int via_port(fixture *f, int w)
{
    ftrt__coord_at at;
    assert_int_equal(agent_recv(f, w, FTRT__MSG_RELAY_VIA, 0, &at, sizeof at, 5), 1);
    return at.port;
}

/* The coordinator forked off; the host agents of h1, h2, h3 joined in that order, each saying
 * where it listens (RELAY_AT: port PORT0 + w) and relaying its rank's HELLO; the members told
 * where the relay (h1) listens and confirmed by it (RELAY_PEER up 1); every rank WELCOMEd. */
static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(t_tmpdir(f->dir, sizeof f->dir, "coord_relay"), 0);
    assert_int_equal(ftrt__random(&f->secret, sizeof f->secret), 0);
    char addrs[FTRT__ADDRS_MAX];
    int port = 0;
    int lfd = ftrt__listen("127.0.0.1", addrs, sizeof addrs, &port);
    assert_true(lfd >= 0);
    ftrt__knobs.relay_group = 3; /* (read by the coordinator, forked below) */
    f->coord = fork();
    assert_true(f->coord >= 0);
    if (f->coord == 0) t_coordinator_child(f->dir, lfd, addrs, port, f->secret, W, N, 100, 20000);
    close(lfd);
    for (int w = 1; w < A; w++) {
        f->agent[w] = ftrt__connect_any(addrs, port, 5000, NULL, 0);
        assert_true(f->agent[w] >= 0);
        ftrt__hello h = {.secret = f->secret, .world_rank = w};
        snprintf(h.host, sizeof h.host, "h%d", w);
        assert_int_equal(ftrt__msg_send(f->agent[w], FTRT__MSG_HOST_HELLO, &h, sizeof h), 0);
        h.pid = 0;
        ftrt__coord_at at = {.world_rank = w, .port = PORT0 + w};
        snprintf(at.addrs, sizeof at.addrs, "127.0.0.1");
        assert_int_equal(ftrt__msg_send(f->agent[w], FTRT__MSG_RELAY_AT, &at, sizeof at), 0);
        /* (the next joins after it: h1's agent, first, is the relay, and tells the others) */
        if (w > 1) assert_int_equal(via_port(f, w), PORT0 + 1);
        relay_for(f, w, FTRT__MSG_HELLO, &h, sizeof h); /* (its rank's HELLO: the same) */
    }
    for (int w = 2; w < A; w++) relay_peer(f, 1, w);
    f->spare = ftrt__connect_any(addrs, port, 5000, NULL, 0);
    assert_true(f->spare >= 0);
    ftrt__hello sh = {.secret = f->secret, .world_rank = SPARE};
    snprintf(sh.host, sizeof sh.host, "h0");
    assert_int_equal(ftrt__msg_send(f->spare, FTRT__MSG_HELLO, &sh, sizeof sh), 0);
    for (int w = 1; w < A; w++) {
        ftrt__welcome wm;
        assert_int_equal(agent_recv(f, w, FTRT__MSG_WELCOME, w, &wm, sizeof wm, 10), 1);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kill(f->coord, SIGKILL);
    waitpid(f->coord, NULL, 0);
    for (int w = 1; w < A; w++) {
        if (f->agent[w] >= 0) close(f->agent[w]);
        ftrt__rx_free(&f->rx[w]);
    }
    if (f->spare >= 0) close(f->spare);
    ftrt__rx_free(&f->spare_rx);
    t_rmtree(f->dir);
    free(f);
    ftrt__knobs.relay_group = 0;
    return 0;
}

/* The next FANOUT to agent w carrying a message of `type`: 1 with its parts' agents (world
 * ranks) in parts[0..*nparts), 0 if none within timeout_s. */
static int fanout_of(fixture *f, int w, uint32_t type, int32_t *parts, int *nparts,
                     double timeout_s)
{
    double deadline = ftrt__now() + timeout_s;
    for (;;) {
        ftrt__msghdr h;
        const void *p;
        while (ftrt__rx_next(&f->rx[w], &h, &p) == 1) {
            int32_t np, aw, n;
            const uint8_t *cur;
            const int32_t *ranks;
            uint32_t plen;
            ftrt__msghdr ih;
            const void *inner;
            if (h.type != FTRT__MSG_FANOUT) continue;
            assert_int_equal(ftrt__fanout_open(p, h.len, &np, &cur, &ih, &inner), 0);
            if (ih.type != type) continue;
            for (int k = 0; k < np && k < A; k++) {
                ftrt__fanout_part(&cur, &aw, &n, &ranks, &plen);
                parts[k] = aw;
            }
            *nparts = np;
            return 1;
        }
        int ms = (int)((deadline - ftrt__now()) * 1000.0);
        if (ms <= 0) return 0;
        struct pollfd pf = {.fd = f->agent[w], .events = POLLIN};
        if (poll(&pf, 1, ms) > 0) assert_true(ftrt__rx_fill(&f->rx[w], f->agent[w]) > 0);
    }
}

/* The relay (the host agent of h1, in trainer 1's process) is lost: its members fall back
 * (RELAY_VIA port 0), and the agent of h2, the first left that listens, becomes the relay: the
 * agent of h3 is told where it listens. Once it confirms h3's agent, the recovery's PLAN to
 * the surviving trainers 2 and 3 (spare 4 replaces trainer 1) goes as one FANOUT to it, with
 * h3's part. */
static void relay_replaced(void **state)
{
    fixture *f = *state;
    close(f->agent[1]);
    f->agent[1] = -1;
    assert_int_equal(via_port(f, 2), 0);
    assert_int_equal(via_port(f, 3), 0);
    assert_int_equal(via_port(f, 3), PORT0 + 2); /* the new relay */
    ftrt__coord_at none;
    assert_int_equal(agent_recv(f, 2, FTRT__MSG_RELAY_VIA, 0, &none, sizeof none, 0.3), 0);
    relay_peer(f, 2, 3);
    ftrt__report rep = {.steps_done = 0, .epoch = 1, .own_step = -1, .held_step = -1};
    relay_for(f, 2, FTRT__MSG_REPORT, &rep, sizeof rep);
    relay_for(f, 3, FTRT__MSG_REPORT, &rep, sizeof rep);
    int32_t parts[A];
    int np = 0;
    assert_int_equal(fanout_of(f, 2, FTRT__MSG_PLAN, parts, &np, 5), 1);
    assert_int_equal(np, 2);
    assert_true((parts[0] == 2 && parts[1] == 3) || (parts[0] == 3 && parts[1] == 2));
}

/* The relay (h1's agent) says h3's connection to it closed (RELAY_PEER up 0) while it lives:
 * h3 falls back (RELAY_VIA port 0) and is told the relay again (RELAY_VIA, its port); once the
 * relay confirms it, h3's fan-outs go through it again: the FAILURE of trainer 2 (its host
 * agent lost) is one FANOUT to the relay with the parts of h1 and h3. After
 * FTRT__RELAY_REJOINS such closes, a next one leaves h3 direct. */
static void member_rejoins(void **state)
{
    fixture *f = *state;
    for (int k = 0; k < FTRT__RELAY_REJOINS; k++) {
        relay_peer_up(f, 1, 3, 0);
        assert_int_equal(via_port(f, 3), 0);
        assert_int_equal(via_port(f, 3), PORT0 + 1); /* the same relay, again */
        wait_relay(f, 3, -1);
        relay_peer(f, 1, 3);
        wait_relay(f, 3, 1);
    }
    close(f->agent[2]); /* trainer 2's process, its host's agent */
    f->agent[2] = -1;
    int32_t parts[A];
    int np = 0;
    assert_int_equal(fanout_of(f, 1, FTRT__MSG_FAILURE, parts, &np, 5), 1);
    assert_int_equal(np, 2);
    assert_true((parts[0] == 1 && parts[1] == 3) || (parts[0] == 3 && parts[1] == 1));
    relay_peer_up(f, 1, 3, 0); /* one time too many: direct from now on */
    assert_int_equal(via_port(f, 3), 0);
    ftrt__coord_at at;
    assert_int_equal(agent_recv(f, 3, FTRT__MSG_RELAY_VIA, 0, &at, sizeof at, 0.3), 0);
    wait_relay(f, 3, -1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(relay_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(member_rejoins, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests: the real coordinator (ftrt__coordinator_run, in a child process) with fake ranks
 * and a fake host agent on loopback, around a rank's move to a newly elected host agent
 * (runtime/coordinator/service.c "moves"; docs/detection-and-recovery.md "Host agents", Its
 * death): what the coordinator does when that agent reports the rank lost (RANK_LOST) after
 * it sent MOVE.
 *
 * The world: coordinator 0 (host h0), trainers 1 (h1) and 2 (h2), spare 3 (h2); no standby
 * (FTRT_STANDBY=0). Trainer 2 says HELLO on its own connection (it fell back), then the host
 * agent of h2 (in world rank 3's process) joins and relays its HELLO: the coordinator answers
 * MOVE on 2's own connection. The orphan grace is 2 s here (FTRT_TEST_ORPHAN_GRACE_MS), so a
 * rank declared failed only when a grace ends is told apart from one declared at once.
 *
 * With setup_served instead, trainer 2 and spare 3 join through that host agent from the
 * start, and trainer 2 then leaves a stalled agent (agent.c: silent for half the heartbeat
 * timeout) for its own connection: what the agent says about it when it resumes.
 *
 * With setup_unread, the ranks' HELLOs wait unread until their connections' 5 s deadline
 * (FTRT_TEST_HELLO_UNREAD): they are read then, not closed.
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
#include "base/net.h"
#include "base/proto.h"
#include "ftrt.h"
#include "helpers.h"
#include "runtime/coordinator/coordinator.h"

enum { W = 4, N = 2, MOVER = 2, AGENT_W = 3 };

typedef struct fixture {
    char dir[512];
    pid_t coord;
    int fd[W];      /* the ranks' own connections (fd[0] unused) */
    ftrt__rxbuf rx[W];
    int agent;      /* the host agent of h2's connection */
    ftrt__rxbuf agent_rx;
    uint64_t secret;
    char addrs[FTRT__ADDRS_MAX]; /* setup_served: the coordinator's */
    int port;
} fixture;

/* Waits up to timeout_s for the next message of `type` on fd (the others skipped). Returns 1
 * with the payload copied to out (len bytes), 0 on timeout, -1 on EOF. */
static int recv_type(int fd, ftrt__rxbuf *rx, uint32_t type, void *out, size_t len,
                     double timeout_s)
{
    double deadline = ftrt__now() + timeout_s;
    for (;;) {
        ftrt__msghdr h;
        const void *p;
        while (ftrt__rx_next(rx, &h, &p) == 1)
            if (h.type == type) {
                assert_int_equal(h.len, len);
                memcpy(out, p, len);
                return 1;
            }
        int ms = (int)((deadline - ftrt__now()) * 1000.0);
        if (ms <= 0) return 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, ms) > 0) {
            ssize_t got = ftrt__rx_fill(rx, fd);
            if (got == 0 || (got < 0 && got != -EAGAIN)) return -1;
        }
    }
}

static int say_hello(int fd, uint32_t type, int w, const char *host, uint64_t secret)
{
    ftrt__hello h = {.secret = secret, .world_rank = w, .pid = 0};
    snprintf(h.host, sizeof h.host, "%s", host);
    if (type == FTRT__MSG_RELAY) {
        ftrt__relay pre = {.world_rank = w};
        return ftrt__msg_send2(fd, FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_HELLO, &h,
                               sizeof h);
    }
    return ftrt__msg_send(fd, type, &h, sizeof h);
}

/* The MOVE on the mover's own connection after the agent relayed its HELLO (again). */
static void relay_hello_and_move(fixture *f)
{
    assert_int_equal(say_hello(f->agent, FTRT__MSG_RELAY, MOVER, "h2", f->secret), 0);
    ftrt__epoch_msg m;
    assert_int_equal(recv_type(f->fd[MOVER], &f->rx[MOVER], FTRT__MSG_MOVE, &m, sizeof m, 5), 1);
    assert_int_equal(m.value, AGENT_W);
}

/* A fixture with the real coordinator forked off (its orphan grace 2 s), listening at
 * addrs:*port; the connections are the caller's to make. */
static fixture *start_coordinator(const char *name, char *addrs, int *port)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(t_tmpdir(f->dir, sizeof f->dir, name), 0);
    ftrt__knobs.orphan_grace_ms = 2000;
    assert_int_equal(ftrt__random(&f->secret, sizeof f->secret), 0);
    *port = 0;
    int lfd = ftrt__listen("127.0.0.1", addrs, FTRT__ADDRS_MAX, port);
    assert_true(lfd >= 0);
    f->coord = fork();
    assert_true(f->coord >= 0);
    if (f->coord == 0) t_coordinator_child(f->dir, lfd, addrs, *port, f->secret, W, N, 100, 20000);
    close(lfd);
    return f;
}

static int setup(void **state)
{
    char addrs[FTRT__ADDRS_MAX];
    int port;
    fixture *f = start_coordinator("coord_move", addrs, &port);
    static const char *host[W] = {"h0", "h1", "h2", "h2"};
    for (int w = 1; w < W; w++) {
        f->fd[w] = ftrt__connect_any(addrs, port, 5000, NULL, 0);
        assert_true(f->fd[w] >= 0);
        assert_int_equal(say_hello(f->fd[w], FTRT__MSG_HELLO, w, host[w], f->secret), 0);
    }
    for (int w = 1; w < W; w++) {
        ftrt__welcome wm;
        assert_int_equal(recv_type(f->fd[w], &f->rx[w], FTRT__MSG_WELCOME, &wm, sizeof wm, 10), 1);
    }
    f->agent = ftrt__connect_any(addrs, port, 5000, NULL, 0);
    assert_true(f->agent >= 0);
    assert_int_equal(say_hello(f->agent, FTRT__MSG_HOST_HELLO, AGENT_W, "h2", f->secret), 0);
    relay_hello_and_move(f);
    *state = f;
    return 0;
}

/* Trainer 1 on its own connection; trainer 2 and spare 3 through the host agent of h2. */
static int setup_served(void **state)
{
    char addrs[FTRT__ADDRS_MAX];
    int port;
    fixture *f = start_coordinator("coord_stall", addrs, &port);
    f->fd[2] = f->fd[3] = -1;
    f->fd[1] = ftrt__connect_any(addrs, port, 5000, NULL, 0);
    assert_true(f->fd[1] >= 0);
    assert_int_equal(say_hello(f->fd[1], FTRT__MSG_HELLO, 1, "h1", f->secret), 0);
    f->agent = ftrt__connect_any(addrs, port, 5000, NULL, 0);
    assert_true(f->agent >= 0);
    assert_int_equal(say_hello(f->agent, FTRT__MSG_HOST_HELLO, AGENT_W, "h2", f->secret), 0);
    for (int w = 2; w < W; w++)
        assert_int_equal(say_hello(f->agent, FTRT__MSG_RELAY, w, "h2", f->secret), 0);
    ftrt__welcome wm; /* (everyone's HELLO read: the WELCOMEs go out together) */
    assert_int_equal(recv_type(f->fd[1], &f->rx[1], FTRT__MSG_WELCOME, &wm, sizeof wm, 10), 1);
    snprintf(f->addrs, sizeof f->addrs, "%s", addrs);
    f->port = port;
    *state = f;
    return 0;
}

/* Trainer 2 leaves the (stalled) host agent: its own connection, HELLO. */
static void mover_back_direct(fixture *f)
{
    f->fd[MOVER] = ftrt__connect_any(f->addrs, f->port, 5000, NULL, 0);
    assert_true(f->fd[MOVER] >= 0);
    assert_int_equal(say_hello(f->fd[MOVER], FTRT__MSG_HELLO, MOVER, "h2", f->secret), 0);
}

/* Every rank's HELLO waits unread until its connection's HELLO deadline (5 s; knob
 * FTRT_TEST_HELLO_UNREAD, as behind a loop busy for that long at 131,072 ranks): the
 * coordinator reads it then and welcomes the rank, rather than closing a connection whose
 * HELLO had come in time (it did, without a word in its log, before). */
static int setup_unread(void **state)
{
    char addrs[FTRT__ADDRS_MAX];
    int port;
    ftrt__knobs.hello_unread = 1;
    fixture *f = start_coordinator("coord_unread", addrs, &port);
    ftrt__knobs.hello_unread = 0;
    for (int w = 1; w < W; w++) {
        f->fd[w] = ftrt__connect_any(addrs, port, 5000, NULL, 0);
        assert_true(f->fd[w] >= 0);
        assert_int_equal(say_hello(f->fd[w], FTRT__MSG_HELLO, w, "h1", f->secret), 0);
    }
    f->agent = -1;
    *state = f;
    return 0;
}

static void hello_read_at_deadline(void **state)
{
    fixture *f = *state;
    double t0 = ftrt__now();
    for (int w = 1; w < W; w++) {
        ftrt__welcome wm;
        assert_int_equal(recv_type(f->fd[w], &f->rx[w], FTRT__MSG_WELCOME, &wm, sizeof wm, 15), 1);
    }
    assert_true(ftrt__now() - t0 > 4.0); /* (read at the deadline, not before: the knob held) */
}

static int teardown(void **state)
{
    fixture *f = *state;
    kill(f->coord, SIGKILL);
    waitpid(f->coord, NULL, 0);
    for (int w = 1; w < W; w++) {
        if (f->fd[w] >= 0) close(f->fd[w]);
        ftrt__rx_free(&f->rx[w]);
    }
    close(f->agent);
    ftrt__rx_free(&f->agent_rx);
    t_rmtree(f->dir);
    free(f);
    ftrt__knobs.orphan_grace_ms = 0;
    return 0;
}

static void rank_lost(fixture *f, int why)
{
    ftrt__rank_lost m = {.world_rank = MOVER, .why = why, .t_wall = ftrt__wallclock()};
    assert_int_equal(ftrt__msg_send(f->agent, FTRT__MSG_RANK_LOST, &m, sizeof m), 0);
}

/* Seconds until trainer 1 is told of a failure (FAILURE), at most `within`; -1 if it is not. */
static double failure_in(fixture *f, double within)
{
    double t0 = ftrt__now();
    ftrt__failure_msg fm;
    int r = recv_type(f->fd[1], &f->rx[1], FTRT__MSG_FAILURE, &fm, sizeof fm, within);
    return r == 1 ? ftrt__now() - t0 : -1;
}

/* The mover died after its MOVE went out: its new agent reports it (its socket closed) before
 * its own connection's end reaches the coordinator. It is declared failed when that end comes,
 * at once, not when an orphan's grace (2 s) ends. */
static void died_mid_move(void **state)
{
    fixture *f = *state;
    rank_lost(f, FTRT__LOST_CLOSED);
    usleep(100 * 1000); /* (the RANK_LOST is read first) */
    close(f->fd[MOVER]);
    f->fd[MOVER] = -1;
    double t = failure_in(f, 1.0); /* (within half the grace: ms in fact) */
    assert_true(t >= 0 && t < 1.0);
}

/* The mover left its new agent alive (it did not answer in time) and goes on on its own
 * connection: that connection stays (no EOF from the coordinator), nothing is declared failed,
 * and its next election's HELLO, relayed, brings a new MOVE. */
static void left_alive_mid_move(void **state)
{
    fixture *f = *state;
    rank_lost(f, FTRT__LOST_CLOSED);
    ftrt__hello never; /* (no coordinator sends one: a timeout, or -1 at an EOF) */
    assert_int_equal(recv_type(f->fd[MOVER], &f->rx[MOVER], FTRT__MSG_HELLO, &never,
                               sizeof never, 0.5), 0);
    assert_true(failure_in(f, 0.3) < 0);
    relay_hello_and_move(f);
}

/* The mover fell silent to its new agent: it is declared failed at once (heartbeat timeout),
 * and the agent, which holds its pidfd, is told to fence it (CUT with fence). */
static void silent_mid_move(void **state)
{
    fixture *f = *state;
    rank_lost(f, FTRT__LOST_SILENT);
    ftrt__cut cut;
    assert_int_equal(recv_type(f->agent, &f->agent_rx, FTRT__MSG_CUT, &cut, sizeof cut, 2.0), 1);
    assert_int_equal(cut.world_rank, MOVER);
    assert_int_equal(cut.fence, 1);
    double t = failure_in(f, 1.0); /* (within half the grace: ms in fact) */
    assert_true(t >= 0 && t < 1.0);
}

/* 1 when, within timeout_s, the host agent is told to fence world rank w (CUT with fence);
 * a CUT without fence is let by. */
static int agent_fences(fixture *f, int w, double timeout_s)
{
    double deadline = ftrt__now() + timeout_s;
    ftrt__cut cut;
    int r;
    while ((r = recv_type(f->agent, &f->agent_rx, FTRT__MSG_CUT, &cut, sizeof cut,
                          deadline - ftrt__now())) == 1)
        if (cut.world_rank == w && cut.fence) return 1;
    assert_int_equal(r, 0); /* (no EOF: the agent's connection stays) */
    return 0;
}

/* Trainer 2 left its stalled host agent: back on its own connection, and answered there
 * (WELCOME: where the rank closes the agent's socket, agent.c leave_agent). The agent, resuming,
 * reports it lost (its socket closed; or silent), relays a message it held for it and beats:
 * all of it stale, ignored. Nothing is declared failed, the agent is never told to fence it,
 * and its own connection stays. */
static void left_stalled_agent(void **state)
{
    fixture *f = *state;
    mover_back_direct(f);
    ftrt__welcome wm;
    assert_int_equal(recv_type(f->fd[MOVER], &f->rx[MOVER], FTRT__MSG_WELCOME, &wm, sizeof wm, 5),
                     1);
    rank_lost(f, FTRT__LOST_CLOSED);
    rank_lost(f, FTRT__LOST_SILENT);
    ftrt__relay pre = {.world_rank = MOVER};
    ftrt__bye bye = {.steps_done = 1, .exit_code = FTRT_EABORT}; /* (taken: it would abort) */
    assert_int_equal(ftrt__msg_send2(f->agent, FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_BYE,
                                     &bye, sizeof bye), 0);
    assert_false(agent_fences(f, MOVER, 0.5));
    double until = ftrt__now() + 0.3; /* trainer 1 hears of no failure and no abort */
    ftrt__msghdr h;
    const void *p;
    while (ftrt__now() < until) {
        struct pollfd pf = {.fd = f->fd[1], .events = POLLIN};
        if (poll(&pf, 1, 50) > 0) assert_true(ftrt__rx_fill(&f->rx[1], f->fd[1]) > 0);
        while (ftrt__rx_next(&f->rx[1], &h, &p) == 1)
            assert_true(h.type != FTRT__MSG_FAILURE && h.type != FTRT__MSG_ABORT);
    }
    ftrt__hello never; /* (no coordinator sends one: a timeout, or -1 at an EOF) */
    assert_int_equal(recv_type(f->fd[MOVER], &f->rx[MOVER], FTRT__MSG_HELLO, &never,
                               sizeof never, 0.3), 0);
}

/* The contract leave_agent keeps: a rank its agent reports lost (its socket closed: died)
 * before the coordinator read its HELLO on its own connection is declared failed at once, and
 * that HELLO is refused (its connection closed). A rank that closed the agent's socket before
 * the coordinator answered it would be this: a live rank declared failed. */
static void lost_before_back(void **state)
{
    fixture *f = *state;
    rank_lost(f, FTRT__LOST_CLOSED);
    double t = failure_in(f, 1.0); /* (at once: no orphan grace) */
    assert_true(t >= 0 && t < 1.0);
    mover_back_direct(f);
    ftrt__welcome wm;
    assert_int_equal(recv_type(f->fd[MOVER], &f->rx[MOVER], FTRT__MSG_WELCOME, &wm, sizeof wm, 2),
                     -1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(died_mid_move, setup, teardown),
        cmocka_unit_test_setup_teardown(left_alive_mid_move, setup, teardown),
        cmocka_unit_test_setup_teardown(silent_mid_move, setup, teardown),
        cmocka_unit_test_setup_teardown(left_stalled_agent, setup_served, teardown),
        cmocka_unit_test_setup_teardown(lost_before_back, setup_served, teardown),
        cmocka_unit_test_setup_teardown(hello_read_at_deadline, setup_unread, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

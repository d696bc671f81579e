/*
 * Unit tests: the real coordinator (ftrt__coordinator_run, in a child process) with fake ranks
 * and fake host agents on loopback, around its sends to a peer that stops reading
 * (runtime/coordinator/conn.c "the send queues"; docs/detection-and-recovery.md "Control
 * plane"): the coordinator must never block on one connection. Its accepted sockets get the
 * smallest send buffer (FTRT_TEST_COORD_SNDBUF) and the peer that does not read the smallest
 * receive buffer (SO_RCVBUF). That peer keeps sending its heartbeats all along, so that nothing
 * but its unread messages can have it declared lost. What fills its socket: a rank's HELLO
 * relayed by two fake host agents in turn ("bounces"), which makes the coordinator send, each
 * time, MOVE on the rank's own connection (service.c "moves": it is to move to that agent), or,
 * for a rank served by host agents, a CUT to the agent it leaves and its WELCOME again through
 * the one it joins (ftrt__rank_rejoined).
 *
 * rank_not_reading: trainer 1 never reads, its HELLO bounces. Trainer 2 must go on getting its
 * PINGs (a coordinator blocked in a send to trainer 1 sends it none), and trainer 1 must be
 * declared failed as silent (heartbeat_timeout: its messages waited unsent for the heartbeat
 * timeout); with no hot spare the job then aborts, trainer 2 is told (ABORT), and the report
 * says so.
 *
 * agent_not_reading: host agent A (in spare 3's process, serving it) never reads; trainer 2
 * bounces between it and host agent B (in trainer 2's process). Trainer 1, on its own
 * connection, must go on getting its PINGs, and A must be lost as a silent host agent is (its
 * connection closed, the process it lives in declared failed: heartbeat_timeout); trainer 2
 * goes on through B and the job ends normally.
 *
 * slow_reader_kept: trainer 1 stops reading, its HELLO bouncing, until 0.25 x the heartbeat
 * timeout (SLOW_TIMEOUT_MS) after its socket stopped taking bytes, then reads again: merely
 * slow, it is not declared failed, and every MOVE the coordinator queued for it arrives, whole
 * and in order. The margin (0.75 x the timeout, 2.25 s; 0.4 x, 1.2 s, when the bounces below
 * run late) absorbs a loaded machine's stalls of either process (under AddressSanitizer, next
 * to another build, 0.6 x a 1 s timeout once was not enough: the reader was declared lost).
 * It reads again only once 1,000 more HELLOs bounced after its buffer filled (up to 0.6 x the
 * timeout): on a loaded machine 0.25 x the timeout once bounced too few to pass the queue's
 * premise (CI, 2026-12-06). Then it reads until no MOVE came for 1 s (read_until_quiet).
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "base/clock.h"
#include "base/knobs.h"
#include "base/net.h"
#include "base/proto.h"
#include "ftrt.h"
#include "helpers.h"
#include "runtime/coordinator/coordinator.h"

enum { MAXW = 4, HB_MS = 50, TIMEOUT_MS = 1000 };
#define PING_S (TIMEOUT_MS / 4000.0) /* the coordinator's PING period (conn.c ping_period) */

typedef struct fixture {
    char dir[512];
    pid_t coord;  /* -1 once reaped */
    int W, N;
    int fd[MAXW]; /* the ranks' own connections (fd[0] unused; -1: none) */
    ftrt__rxbuf rx[MAXW];
    int ag[2];    /* fake host agents A and B, or -1 */
    int ag_reads[2]; /* it reads (and drops) what it gets */
    uint64_t secret;
    int port;
} fixture;

/* A connection to the coordinator on loopback; small_rcvbuf: the smallest receive buffer (set
 * before connect, so that the window it offers is small too). */
static int dial(const fixture *f, int small_rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int one = 1;
    if (small_rcvbuf) assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &one, sizeof one), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* World rank w's HELLO on fd: its own (type HELLO), a host agent's (HOST_HELLO) or relayed by
 * a host agent (RELAY). Returns 0 or -errno. */
static int hello(const fixture *f, int fd, uint32_t type, int w, const char *host)
{
    ftrt__hello h = {.secret = f->secret, .world_rank = w, .pid = 0};
    snprintf(h.host, sizeof h.host, "%s", host);
    if (type != FTRT__MSG_RELAY) return ftrt__msg_send(fd, type, &h, sizeof h);
    ftrt__relay pre = {.world_rank = w};
    return ftrt__msg_send2(fd, FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_HELLO, &h, sizeof h);
}

/* The coordinator forked off with W processes (N trainers), the smallest send buffers on its
 * connections; no connection made yet. */
static fixture *start_coordinator_t(const char *name, int W, int N, int timeout_ms);

static fixture *start_coordinator(const char *name, int W, int N)
{
    return start_coordinator_t(name, W, N, TIMEOUT_MS);
}

/* start_coordinator with a heartbeat timeout of timeout_ms. */
static fixture *start_coordinator_t(const char *name, int W, int N, int timeout_ms)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->W = W;
    f->N = N;
    f->ag[0] = f->ag[1] = -1;
    for (int w = 0; w < MAXW; w++) f->fd[w] = -1;
    assert_int_equal(t_tmpdir(f->dir, sizeof f->dir, name), 0);
    assert_int_equal(ftrt__random(&f->secret, sizeof f->secret), 0);
    char addrs[FTRT__ADDRS_MAX];
    int lfd = ftrt__listen("127.0.0.1", addrs, FTRT__ADDRS_MAX, &f->port);
    assert_true(lfd >= 0);
    ftrt__knobs.coord_sndbuf = 1; /* (the kernel's smallest) */
    f->coord = fork();
    assert_true(f->coord >= 0);
    if (f->coord == 0)
        t_coordinator_child(f->dir, lfd, addrs, f->port, f->secret, f->W, f->N, HB_MS, timeout_ms);
    ftrt__knobs.coord_sndbuf = 0;
    close(lfd);
    return f;
}

/* What world rank w (its own connection) heard: PINGs and the largest gap between two of them
 * (or since last_ping's start), MOVEs, whether it was told of a failure or the abort, EOF. */
typedef struct heard {
    int pings, moves, welcomed, failure, aborted, eof;
    int last_move, move_repeated; /* the last MOVE's value; two in a row named the same agent */
    double last_ping, max_gap;
} heard;

/* Reads everything waiting on w's connection into *hd (wait: for 10 s at most until something
 * is there). */
static void take(fixture *f, int w, heard *hd, int wait)
{
    struct pollfd pf = {.fd = f->fd[w], .events = POLLIN};
    if (wait) assert_int_equal(poll(&pf, 1, 10000), 1);
    ssize_t got;
    while ((got = ftrt__rx_fill(&f->rx[w], f->fd[w])) > 0) {}
    if (got == 0) hd->eof = 1;
    ftrt__msghdr h;
    const void *p;
    int r;
    double now = ftrt__now();
    while ((r = ftrt__rx_next(&f->rx[w], &h, &p)) == 1) {
        if (h.type == FTRT__MSG_PING) {
            if (now - hd->last_ping > hd->max_gap) hd->max_gap = now - hd->last_ping;
            hd->last_ping = now;
            hd->pings++;
        }
        if (h.type == FTRT__MSG_MOVE) {
            ftrt__epoch_msg m;
            memcpy(&m, p, sizeof m);
            hd->move_repeated |= hd->moves > 0 && m.value == hd->last_move;
            hd->last_move = m.value;
            hd->moves++;
        }
        hd->welcomed += h.type == FTRT__MSG_WELCOME;
        hd->failure |= h.type == FTRT__MSG_FAILURE;
        hd->aborted |= h.type == FTRT__MSG_ABORT;
    }
    assert_int_equal(r, 0); /* (whole, well-formed messages only) */
}

/* Host agent k (A: 0, B: 1) joins, living in world rank agent_w's process; it reads unless
 * it is the one that does not (small_rcvbuf). */
static void agent_join(fixture *f, int k, int agent_w, int small_rcvbuf)
{
    f->ag[k] = dial(f, small_rcvbuf);
    f->ag_reads[k] = !small_rcvbuf;
    assert_int_equal(hello(f, f->ag[k], FTRT__MSG_HOST_HELLO, agent_w, "h2"), 0);
}

/* Trainers 1 and 2 on their own connections (1 with the smallest receive buffer), no spare;
 * host agents A (in trainer 2's process) and B (in trainer 1's) serve no rank: they bounce
 * trainer 1's HELLO, and each MOVE names the agent of its bounce (A: 2, B: 1). */
/* Time-outs and bounds of the fixtures below: LONG_TIMEOUT_MS is a heartbeat timeout no send
 * queue waits for in these tests; SLACK bounds a queue past its largest message
 * (FTRT_TEST_COORD_TX_SLACK). */
enum { LONG_TIMEOUT_MS = 60000, SLACK = 16384 };

/* The coordinator (heartbeat timeout timeout_ms; queues bounded at `slack` bytes past their
 * largest message, 0: the default) with trainers 1 and 2 joined, on their own connections. */
static int setup_with(void **state, const char *name, int timeout_ms, int slack)
{
    ftrt__knobs.coord_tx_slack = slack; /* (read by the coordinator, forked below) */
    fixture *f = start_coordinator_t(name, 3, 2, timeout_ms);
    ftrt__knobs.coord_tx_slack = 0;
    f->fd[1] = dial(f, 1);
    f->fd[2] = dial(f, 0);
    assert_int_equal(hello(f, f->fd[1], FTRT__MSG_HELLO, 1, "h1"), 0);
    assert_int_equal(hello(f, f->fd[2], FTRT__MSG_HELLO, 2, "h2"), 0);
    heard hd = {0}; /* (the job started: the listener's W pending slots are free again) */
    while (hd.welcomed == 0) take(f, 2, &hd, 1);
    agent_join(f, 0, 2, 0);
    agent_join(f, 1, 1, 0);
    *state = f;
    return 0;
}

static int setup_ranks(void **state) { return setup_with(state, "coord_tx", TIMEOUT_MS, 0); }

/* As setup_ranks, with a heartbeat timeout of SLOW_TIMEOUT_MS (slow_reader_kept). */
enum { SLOW_TIMEOUT_MS = 3000 };
static int setup_slow(void **state)
{
    return setup_with(state, "coord_tx_slow", SLOW_TIMEOUT_MS, 0);
}

/* As setup_ranks, with a heartbeat timeout of DRAIN_TIMEOUT_MS: the end's drain then gives up
 * only after that long with no byte taken, far more than a slow socket's pause (the smallest
 * buffers' zero-window probes back off to seconds). */
enum { DRAIN_TIMEOUT_MS = 5000 };
static int setup_drain(void **state)
{
    return setup_with(state, "coord_tx_drain", DRAIN_TIMEOUT_MS, 0);
}

/* As setup_ranks, with a heartbeat timeout of LONG_TIMEOUT_MS and queues bounded at SLACK. */
static int setup_bound(void **state)
{
    return setup_with(state, "coord_tx_bound", LONG_TIMEOUT_MS, SLACK);
}

/* Trainer 1 on its own connection; host agent A (in spare 3's process; the smallest receive
 * buffer) serves spare 3 and trainer 2; host agent B lives in trainer 2's process. */
static int setup_agent(void **state)
{
    fixture *f = start_coordinator("coord_tx_agent", 4, 2);
    f->fd[1] = dial(f, 0);
    assert_int_equal(hello(f, f->fd[1], FTRT__MSG_HELLO, 1, "h1"), 0);
    agent_join(f, 0, 3, 1);
    agent_join(f, 1, 2, 0);
    assert_int_equal(hello(f, f->ag[0], FTRT__MSG_RELAY, 2, "h2"), 0);
    assert_int_equal(hello(f, f->ag[0], FTRT__MSG_RELAY, 3, "h2"), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->coord > 0) {
        kill(f->coord, SIGKILL);
        waitpid(f->coord, NULL, 0);
    }
    for (int w = 1; w < MAXW; w++) {
        if (f->fd[w] >= 0) close(f->fd[w]);
        ftrt__rx_free(&f->rx[w]);
    }
    for (int k = 0; k < 2; k++)
        if (f->ag[k] >= 0) close(f->ag[k]);
    t_rmtree(f->dir);
    free(f);
    return 0;
}

static void heartbeat(int fd)
{
    ftrt__heartbeat hb = {0};
    assert_int_equal(ftrt__msg_send(fd, FTRT__MSG_HEARTBEAT, &hb, sizeof hb), 0);
}

/* Host agent k's HOST_BEAT for world ranks 2 and 3 (the coordinator takes a rank's beat from
 * the agent that serves it only). Returns 0 or -errno (A may be closed). */
static int host_beat(fixture *f, int k)
{
    struct {
        ftrt__host_beat b;
        ftrt__beat e[2];
    } m = {.b = {.n = 2}, .e = {{.world_rank = 2}, {.world_rank = 3}}};
    return ftrt__msg_send(f->ag[k], FTRT__MSG_HOST_BEAT, &m, sizeof m);
}

/* One heartbeat period's beats: every rank with its own connection, every host agent; the
 * agents that read drop what they got. */
static void beat_all(fixture *f)
{
    for (int w = 1; w < f->W; w++)
        if (f->fd[w] >= 0) heartbeat(f->fd[w]);
    char junk[65536];
    for (int k = 0; k < 2; k++) {
        if (f->ag[k] < 0) continue;
        (void)host_beat(f, k);
        while (f->ag_reads[k] && recv(f->ag[k], junk, sizeof junk, MSG_DONTWAIT) > 0) {}
    }
}

/* n bounces of world rank w's HELLO: relayed by A, then B, then A... (*turn: whose next).
 * Returns how many were sent (a send to a closed agent fails). */
static int bounce(fixture *f, int w, int n, int *turn)
{
    int sent = 0;
    for (int i = 0; i < n; i++, *turn ^= 1)
        sent += hello(f, f->ag[*turn], FTRT__MSG_RELAY, w, "h2") == 0;
    return sent;
}

/* 1 once host agent k's connection was closed by the coordinator (read nothing). */
static int agent_closed(fixture *f, int k)
{
    struct pollfd pf = {.fd = f->ag[k], .events = POLLRDHUP};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Runs the job for at most `for_s` seconds, world rank `reader` reading everything (into *hd),
 * every connection beating each heartbeat period, world rank `bw`'s HELLO bouncing (bw 0:
 * none) 10 times every 10 ms. Stops once `reader` is told of the abort, or stop(f) says so. */
static void run_job(fixture *f, int reader, int bw, heard *hd, double for_s,
                    int (*stop)(fixture *))
{
    double t0 = ftrt__now(), end = t0 + for_s, next = t0;
    int turn = 0;
    hd->last_ping = t0;
    while (ftrt__now() < end && !hd->aborted && !hd->eof && !(stop && stop(f))) {
        if (ftrt__now() >= next) {
            beat_all(f);
            next += HB_MS / 1000.0;
        }
        if (bw) bounce(f, bw, 10, &turn);
        struct pollfd pf = {.fd = f->fd[reader], .events = POLLIN};
        if (poll(&pf, 1, 10) > 0) take(f, reader, hd, 0);
    }
}

/* Waits (10 s at most) for the coordinator to exit; returns 1 when the report lists world rank
 * w's failure of this kind. */
static int reported(fixture *f, int w, const char *kind)
{
    int st = -1;
    for (int i = 0; i < 1000 && waitpid(f->coord, &st, WNOHANG) == 0; i++) usleep(10 * 1000);
    assert_true(WIFEXITED(st));
    f->coord = -1;
    char path[600];
    snprintf(path, sizeof path, "%s/report.json", f->dir);
    json_object *o = json_object_from_file(path), *fl;
    assert_non_null(o);
    assert_true(json_object_object_get_ex(o, "failures", &fl));
    int found = 0;
    for (size_t i = 0; i < json_object_array_length(fl); i++) {
        json_object *x = json_object_array_get_idx(fl, i), *jw, *jk;
        if (json_object_object_get_ex(x, "world_rank", &jw) && json_object_get_int(jw) == w &&
            json_object_object_get_ex(x, "kind", &jk) && !strcmp(json_object_get_string(jk), kind))
            found = 1;
    }
    json_object_put(o);
    return found;
}

/* Every connection closed: the coordinator ends an aborting job. */
static void leave_all(fixture *f)
{
    for (int w = 1; w < f->W; w++)
        if (f->fd[w] >= 0) {
            close(f->fd[w]);
            f->fd[w] = -1;
        }
    for (int k = 0; k < 2; k++) {
        if (f->ag[k] >= 0) close(f->ag[k]);
        f->ag[k] = -1;
    }
}

static void rank_not_reading(void **state)
{
    fixture *f = *state;
    heard hd = {0};
    run_job(f, 2, 1, &hd, 10.0, NULL);
    /* a coordinator blocked in a send to trainer 1 sends trainer 2 no PING from then on, and
     * never declares anyone failed: no abort */
    assert_true(hd.aborted);
    assert_true(hd.pings >= 3); /* (the heartbeat timeout at least, at 4 PINGs per timeout) */
    assert_true(hd.max_gap < 4 * PING_S);
    leave_all(f);
    assert_true(reported(f, 1, "heartbeat_timeout"));
}

static int a_closed(fixture *f) { return agent_closed(f, 0); }

static void agent_not_reading(void **state)
{
    fixture *f = *state;
    heard hd = {0};
    run_job(f, 1, 2, &hd, 10.0, a_closed);
    assert_true(agent_closed(f, 0));
    assert_false(hd.aborted || hd.eof);
    assert_true(hd.pings >= 3);
    assert_true(hd.max_gap < 4 * PING_S);
    /* trainer 2 on B (again, if it was on A), then both trainers finish: the job ends */
    close(f->ag[0]);
    f->ag[0] = -1;
    assert_int_equal(hello(f, f->ag[1], FTRT__MSG_RELAY, 2, "h2"), 0);
    run_job(f, 1, 0, &hd, 0.5, NULL);
    ftrt__bye bye = {0};
    assert_int_equal(ftrt__msg_send(f->fd[1], FTRT__MSG_BYE, &bye, sizeof bye), 0);
    ftrt__relay pre = {.world_rank = 2};
    assert_int_equal(ftrt__msg_send2(f->ag[1], FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_BYE,
                                     &bye, sizeof bye), 0);
    assert_true(reported(f, 3, "heartbeat_timeout")); /* the process A lived in */
}

/* Bytes waiting unread in fd's receive buffer. */
static int unread(int fd)
{
    int n = 0;
    assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
    return n;
}

/* World rank w reads (every connection beating meanwhile) until no MOVE came for QUIET_S,
 * 10 s at most; returns when the last MOVE came, in seconds after it began. Not a fixed read
 * time: once a reader with the smallest receive buffer resumes, the bytes may come only with
 * the sender's zero-window probes, whose period backs off (CI, 2026-12-07: 0.5 s of reading
 * took too few MOVEs for the premise below, the rest were still queued). */
static double read_until_quiet(fixture *f, int w, heard *hd)
{
    const double QUIET_S = 1.0;
    double t0 = ftrt__now(), last = t0, next = t0;
    while (ftrt__now() < t0 + 10.0 && ftrt__now() - last < QUIET_S) {
        if (ftrt__now() >= next) {
            beat_all(f);
            next += HB_MS / 1000.0;
        }
        struct pollfd pf = {.fd = f->fd[w], .events = POLLIN};
        if (poll(&pf, 1, 10) <= 0) continue;
        int before = hd->moves;
        take(f, w, hd, 0);
        if (hd->moves != before) last = ftrt__now();
    }
    return last - t0;
}

static void slow_reader_kept(void **state)
{
    fixture *f = *state;
    heard h2 = {0}, h1 = {0};
    /* trainer 1 does not read until its receive buffer stopped growing for 0.5 s (what the
     * coordinator sends it then waits in its socket, then in its queue), and 0.25 x the
     * heartbeat timeout after that: the queue waited 0.25 x the timeout, and a little more;
     * and not before AFTER_FULL more HELLOs bounced (each a MOVE to it: more than the
     * coordinator's send buffer and the 8 KiB the premise below asks for, whatever a loaded
     * machine's bounce rate), up to 0.6 x the timeout after its buffer stopped growing */
    enum { AFTER_FULL = 1000 };
    double t0 = ftrt__now(), grew = t0, resume = 0, cap = 0, next = t0;
    int last = -1, turn = 0, full = 0, after = 0;
    h2.last_ping = t0;
    while (ftrt__now() < t0 + 10.0 &&
           (resume == 0 || ftrt__now() < resume || (after < AFTER_FULL && ftrt__now() < cap))) {
        double now = ftrt__now();
        if (now >= next) {
            beat_all(f);
            next += HB_MS / 1000.0;
        }
        int sent = bounce(f, 1, 10, &turn);
        if (resume > 0) after += sent;
        int n = unread(f->fd[1]);
        if (n != last) grew = now;
        last = n;
        if (resume == 0 && n > 0 && now - grew > 0.5) { /* (n 0: nothing sent to it yet) */
            resume = grew + 0.25 * SLOW_TIMEOUT_MS / 1000.0;
            cap = grew + 0.6 * SLOW_TIMEOUT_MS / 1000.0;
            full = n;
        }
        struct pollfd pf = {.fd = f->fd[2], .events = POLLIN};
        if (poll(&pf, 1, 1) > 0) take(f, 2, &h2, 0);
    }
    assert_true(resume > 0);
    printf("slow_reader_kept: %d byte(s) unread when full, %d HELLO(s) bounced after, reading "
           "again %.2f s after it stopped growing\n", full, after, ftrt__now() - grew);
    /* the last bounce goes to B: the last MOVE must name it */
    usleep(50 * 1000);
    turn = 0;
    bounce(f, 1, 1, &turn);
    usleep(50 * 1000);
    bounce(f, 1, 1, &turn);
    /* it reads again: every MOVE arrives, in order (each names the other agent than the one
     * before), the last one B; nobody is declared failed */
    double quiet = read_until_quiet(f, 1, &h1);
    printf("slow_reader_kept: %d MOVE(s) read, the last %.2f s after it began reading\n",
           h1.moves, quiet);
    run_job(f, 2, 0, &h2, SLOW_TIMEOUT_MS / 1000.0 + 0.2, NULL); /* (past the timeout) */
    take(f, 1, &h1, 0);
    /* more than both sockets' buffers held (its receive buffer when full, the coordinator's
     * send buffer: 4,608 bytes at most): the rest waited in the coordinator's queue */
    assert_true(h1.moves * (int)(sizeof(ftrt__msghdr) + sizeof(ftrt__epoch_msg)) > full + 8192);
    assert_false(h1.move_repeated);
    assert_int_equal(h1.last_move, 1);
    assert_false(h1.failure || h1.aborted || h1.eof || h2.failure || h2.aborted || h2.eof);
    assert_true(h1.pings >= 1);
}

/* queue_bound: trainer 1 never reads (beating all along), its HELLO bounces; the heartbeat
 * timeout (60 s) is far off, so only the queue's size bound (SLACK past its largest message)
 * can have it declared lost: within 20 s, after at least SLACK bytes of MOVEs were sent to it;
 * with no spare the job aborts and trainer 2 is told. */
static void queue_bound(void **state)
{
    fixture *f = *state;
    heard hd = {0};
    double t0 = ftrt__now(), next = t0;
    int turn = 0, bounced = 0;
    while (ftrt__now() < t0 + 20.0 && !hd.aborted) {
        if (ftrt__now() >= next) {
            beat_all(f);
            next += HB_MS / 1000.0;
        }
        bounced += bounce(f, 1, 50, &turn);
        struct pollfd pf = {.fd = f->fd[2], .events = POLLIN};
        if (poll(&pf, 1, 1) > 0) take(f, 2, &hd, 0);
    }
    print_message("queue_bound: trainer 2 told of the abort %.2f s on, after %d bounces\n",
                  ftrt__now() - t0, bounced);
    assert_true(hd.aborted);
    assert_true(bounced * (int)(sizeof(ftrt__msghdr) + sizeof(ftrt__epoch_msg)) > SLACK);
    leave_all(f);
    assert_true(reported(f, 1, "heartbeat_timeout"));
}

/* Trainer 1 stops reading, its HELLO bouncing until its receive buffer stopped growing for
 * 0.3 s (the rest waits in the coordinator's queue); both trainers say BYE: the job's end.
 * Returns the bytes unread in trainer 1's receive buffer then. */
static int end_with_queue(fixture *f)
{
    double t0 = ftrt__now(), grew = t0, next = t0;
    int last = -1, turn = 0;
    heard h2 = {0};
    while (ftrt__now() < t0 + 10.0 && ftrt__now() - grew < 0.3) {
        if (ftrt__now() >= next) {
            beat_all(f);
            next += HB_MS / 1000.0;
        }
        bounce(f, 1, 10, &turn);
        int n = unread(f->fd[1]);
        if (n != last) grew = ftrt__now();
        last = n;
        struct pollfd pf = {.fd = f->fd[2], .events = POLLIN};
        if (poll(&pf, 1, 1) > 0) take(f, 2, &h2, 0);
    }
    ftrt__bye bye = {0};
    for (int w = 1; w <= 2; w++)
        assert_int_equal(ftrt__msg_send(f->fd[w], FTRT__MSG_BYE, &bye, sizeof bye), 0);
    return last;
}

/* Whether the coordinator exited (status 0) within timeout_s. */
static int coord_exited(fixture *f, double timeout_s)
{
    int st = -1;
    for (double end = ftrt__now() + timeout_s; ftrt__now() < end; usleep(10 * 1000))
        if (waitpid(f->coord, &st, WNOHANG) == f->coord) {
            f->coord = -1;
            return WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
    return 0;
}

/* drain_at_end: the job ends with MOVEs queued for trainer 1, which reads again 0.3 x the
 * heartbeat timeout later: the coordinator has not closed its connection meanwhile (it drains
 * its queues first), and trainer 1 gets every MOVE and then its FAREWELL, the last message
 * before EOF; the coordinator then exits. Its smallest buffers and delayed ACKs make the drain
 * slow (40 ms and more a round of about 2 KB): the drain lasts while bytes go out (it gave up
 * one heartbeat timeout after the end before: 1 run of 8 on one loaded core under ASan, 191
 * MOVEs of some 1,000 read, no FAREWELL). A 5 s heartbeat timeout (setup_drain): the drain's
 * bound on a pause, far above the pauses seen. */
static void drain_at_end(void **state)
{
    fixture *f = *state;
    int full = end_with_queue(f);
    usleep((useconds_t)(0.3 * TIMEOUT_MS * 1000));
    assert_int_equal(waitpid(f->coord, NULL, WNOHANG), 0); /* (still draining) */
    int farewell_last = 0, eof = 0, moves = 0, err = 0;
    double t0 = ftrt__now(), last_got = t0, gap = 0;
    for (double end = ftrt__now() + 30; !eof && !err && ftrt__now() < end;) {
        struct pollfd pf = {.fd = f->fd[1], .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t got;
        while ((got = ftrt__rx_fill(&f->rx[1], f->fd[1])) > 0) {
            if (ftrt__now() - last_got > gap) gap = ftrt__now() - last_got;
            last_got = ftrt__now();
        }
        eof = got == 0;
        if (got < 0 && got != -EAGAIN) err = (int)-got;
        ftrt__msghdr h;
        const void *p;
        while (ftrt__rx_next(&f->rx[1], &h, &p) == 1) {
            moves += h.type == FTRT__MSG_MOVE;
            farewell_last = h.type == FTRT__MSG_FAREWELL;
        }
    }
    print_message("drain_at_end: %d MOVEs, then FAREWELL %d, EOF %d, error %d, last bytes %.3f s "
                  "after reading began, longest pause %.3f s\n", moves, farewell_last, eof, err,
                  last_got - t0, gap);
    assert_true(eof && farewell_last);
    /* more than both sockets' buffers held (the coordinator's send buffer: 4,608 bytes at
     * most): the rest waited in its queue, drained at the end */
    assert_true(moves * (int)(sizeof(ftrt__msghdr) + sizeof(ftrt__epoch_msg)) > full + 8192);
    assert_true(coord_exited(f, 5));
}

/* drain_bounded: the job ends with MOVEs queued for trainer 1 (end_with_queue), which never
 * reads again: the coordinator gives up draining after the heartbeat timeout and exits
 * (status 0: the job itself finished). */
static void drain_bounded(void **state)
{
    fixture *f = *state;
    double t0 = ftrt__now();
    (void)end_with_queue(f);
    assert_true(coord_exited(f, 5 * TIMEOUT_MS / 1000.0));
    double took = ftrt__now() - t0;
    print_message("drain_bounded: the coordinator exited %.2f s after the BYEs\n", took);
    assert_true(took >= 0.9 * TIMEOUT_MS / 1000.0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(rank_not_reading, setup_ranks, teardown),
        cmocka_unit_test_setup_teardown(agent_not_reading, setup_agent, teardown),
        cmocka_unit_test_setup_teardown(slow_reader_kept, setup_slow, teardown),
        cmocka_unit_test_setup_teardown(queue_bound, setup_bound, teardown),
        cmocka_unit_test_setup_teardown(drain_at_end, setup_drain, teardown),
        cmocka_unit_test_setup_teardown(drain_bounded, setup_ranks, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

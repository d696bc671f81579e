/*
 * Unit tests: the control-plane agent thread against an in-process fake coordinator on a
 * loopback socket. This is where the agent thread and the application thread meet, so the test
 * suite also runs it under ThreadSanitizer.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/knobs.h"
#include "ftrt.h"
#include "runtime/internal.h"

typedef struct fixture {
    struct ftrt_ctx *ctx;
    int listen_fd, coord_fd;
    int local_fd; /* setup_hosted: the host's local socket, held by the test as a host agent */
    ftrt__rxbuf rx;
    int up_fd;    /* host_agent_reelected: the new host agent's connection to the coordinator */
    ftrt__rxbuf up_rx;
} fixture;

/* Receives the next message of `type` on fd (skipping the others), within 5 s; with relayed,
 * the next RELAY of world rank 3 whose inner message is of `type`. Returns 1 and copies the
 * payload, or 0 on timeout/EOF. */
static int recv_on(int fd, ftrt__rxbuf *rx, uint32_t type, int relayed, void *out, size_t len)
{
    double deadline = ftrt__now() + 5;
    while (ftrt__now() < deadline) {
        ftrt__msghdr h;
        const void *payload;
        int r;
        while ((r = ftrt__rx_next(rx, &h, &payload)) == 1) {
            int32_t w = 0;
            if (relayed && (h.type != FTRT__MSG_RELAY ||
                            ftrt__relay_open(payload, h.len, &w, &h, &payload) || w != 3))
                continue;
            if (h.type == type) {
                assert_int_equal(h.len, len);
                memcpy(out, payload, len);
                return 1;
            }
        }
        assert_int_equal(r, 0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0 && ftrt__rx_fill(rx, fd) == 0) return 0;
    }
    return 0;
}

/* recv_on the fake coordinator's connection from the rank (its own, or its host agent's). */
static int coord_recv(fixture *f, uint32_t type, void *out, size_t len)
{
    return recv_on(f->coord_fd, &f->rx, type, 0, out, len);
}

/* The agent of world rank 3 against a fake coordinator on TCP. hosted: the test holds this
 * host's local socket first, so the agent reaches it there, as it would a host agent (the TCP
 * listener is then where it falls back to). */
static int setup_with(void **state, int hosted, int hb_timeout_ms)
{
    fixture *f = calloc(1, sizeof *f);
    f->up_fd = -1;
    struct ftrt_ctx *ctx = calloc(1, sizeof *ctx);
    ftrt_config_init(&ctx->cfg, sizeof ctx->cfg);
    ctx->cfg.heartbeat_ms = 10;
    ctx->cfg.init_timeout_ms = 5000;
    ctx->cfg.host_agents = hosted;
    if (hb_timeout_ms > 0) ctx->cfg.heartbeat_timeout_ms = hb_timeout_ms;
    ctx->world_rank = 3;
    ctx->cp.logical = -1;
    snprintf(ctx->host, sizeof ctx->host, "testhost");
    ctx->cp.fd = -1;
    ctx->cp.sb_fd = -1;
    pthread_mutex_init(&ctx->ledger_lock, NULL);
    ctx->cp.wake[0] = ctx->cp.wake[1] = -1;
    pthread_mutex_init(&ctx->cp.lock, NULL);
    pthread_mutex_init(&ctx->cp.send_lock, NULL);
    pthread_cond_init(&ctx->cp.cond, NULL);
    ftrt__watch_init(&ctx->watch);
    char addr[64];
    int port;
    f->listen_fd = ftrt__listen("127.0.0.1", addr, sizeof addr, &port);
    assert_true(f->listen_fd >= 0);
    snprintf(ctx->coord_addr, sizeof ctx->coord_addr, "%s", addr);
    ctx->coord_port = port;
    uint64_t secret = 0x5ec2e7ull ^ (uint64_t)getpid() << 24; /* (one job per test process) */
    ctx->local_tag = secret ^ 0x7a9; /* the local socket's name: not the secret (base/net.h) */
    f->local_fd = hosted ? ftrt__local_listen(ctx->local_tag) : -1;
    if (hosted) assert_true(f->local_fd >= 0);
    assert_int_equal(ftrt__agent_start(ctx, addr, port, secret), 0);
    f->coord_fd = accept(hosted ? f->local_fd : f->listen_fd, NULL, NULL);
    assert_true(f->coord_fd >= 0);
    f->ctx = ctx;
    *state = f;
    ftrt__hello hello;
    assert_true(coord_recv(f, FTRT__MSG_HELLO, &hello, sizeof hello));
    assert_int_equal(hello.secret, secret);
    assert_int_equal(hello.world_rank, 3);
    assert_int_equal(hello.pid, getpid());
    assert_string_equal(hello.host, "testhost");
    return 0;
}

static int setup(void **state) { return setup_with(state, 0, 0); }
static int setup_hosted(void **state) { return setup_with(state, 1, 0); }
static int setup_reelect(void **state)
{
    ftrt__knobs.reelect_ms = 50; /* (before the agent thread starts: it reads it) */
    return setup_with(state, 1, 0);
}
static int setup_stall(void **state) { return setup_with(state, 1, 400); }

static int teardown(void **state)
{
    fixture *f = *state;
    ftrt__agent_stop(f->ctx);
    ftrt__knobs.reelect_ms = 0;
    if (f->up_fd >= 0) close(f->up_fd);
    ftrt__rx_free(&f->up_rx);
    if (f->coord_fd >= 0) close(f->coord_fd);
    close(f->listen_fd);
    if (f->local_fd >= 0) close(f->local_fd);
    ftrt__rx_free(&f->rx);
    free(f->ctx->cp.plan);
    free(f->ctx->cp.members);
    pthread_mutex_destroy(&f->ctx->cp.lock);
    pthread_mutex_destroy(&f->ctx->cp.send_lock);
    pthread_cond_destroy(&f->ctx->cp.cond);
    pthread_mutex_destroy(&f->ctx->ledger_lock);
    ftrt__watch_destroy(&f->ctx->watch);
    free(f->ctx);
    free(f);
    return 0;
}

/* Heartbeats carry the progress the application thread publishes. */
static void heartbeats_carry_progress(void **state)
{
    fixture *f = *state;
    atomic_store(&f->ctx->cp.steps_done, 42);
    ftrt__heartbeat hb = {0};
    double deadline = ftrt__now() + 5;
    while (hb.steps_done != 42 && ftrt__now() < deadline)
        assert_true(coord_recv(f, FTRT__MSG_HEARTBEAT, &hb, sizeof hb));
    assert_int_equal(hb.steps_done, 42);
}

/* WELCOME, FAILURE and PLAN become shared state; the epoch flag interrupts the data plane. */
static void failure_and_plan(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__welcome w = {.role = FTRT__ROLE_TRAINER, .logical_rank = 2, .ntrainers = 4};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_WELCOME, &w, sizeof w), 0);
    pthread_mutex_lock(&ctx->cp.lock);
    for (int i = 0; i < 500 && !ctx->cp.welcomed; i++) ftrt__cp_wait(ctx, 10);
    assert_int_equal(ctx->cp.welcomed, 1);
    assert_int_equal(ctx->cp.welcome.logical_rank, 2);
    pthread_mutex_unlock(&ctx->cp.lock);

    assert_int_equal(ftrt__interrupted(ctx), 0);
    ftrt__failure_msg fm = {.epoch = 1, .t_fail_wall = 1234.5};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_FAILURE, &fm, sizeof fm), 0);
    for (int i = 0; i < 500 && ftrt__interrupted(ctx) == 0; i++) usleep(10000);
    assert_int_equal(ftrt__interrupted(ctx), FTRT_ERECOVER);
    assert_true(atomic_load(&ctx->cp.t_fail_wall) == 1234.5);

    /* the delta from the initial membership (world ranks 1..4): logical rank 1 is now world
     * rank 5, which needs state; this rank keeps logical rank 2 */
    size_t len = ftrt__plan_msg_size(1, 0);
    ftrt__plan_msg *p = calloc(1, len);
    p->epoch = 1, p->ntrainers = 4, p->source = 0, p->logical_rank = -1, p->resume_step = 9;
    p->ckpt_step = p->mem_step = -1;
    p->nrepl = 1;
    p->data[0] = 1, p->data[1] = 5, p->data[2] = -1;
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_PLAN, p, (uint32_t)len), 0);
    free(p);
    pthread_mutex_lock(&ctx->cp.lock);
    for (int i = 0; i < 500 && !ctx->cp.plan; i++) ftrt__cp_wait(ctx, 10);
    assert_non_null(ctx->cp.plan);
    assert_int_equal(ctx->cp.plan->resume_step, 9);
    assert_int_equal(ctx->cp.plan->logical_rank, 2);
    int32_t want[4] = {1, 5, 3, 4};
    for (int l = 0; l < 4; l++) {
        assert_int_equal(ctx->cp.plan->members[l], want[l]);
        assert_int_equal(ftrt__plan_roles(ctx->cp.plan)[l],
                         l == 1 ? FTRT__PLAN_NEEDS_STATE : FTRT__PLAN_UP_TO_DATE);
        assert_int_equal(ctx->cp.members[l], want[l]); /* the next delta applies to this */
    }
    pthread_mutex_unlock(&ctx->cp.lock);
    ctx->watch.epoch = 1;
    assert_int_equal(ftrt__interrupted(ctx), 0);
}

/* FAREWELL (after BYE) and SHUTDOWN tell how the job ended: how many processes of the world
 * died, or the code of an abort (< 0). */
static void farewell_and_shutdown(void **state)
{
    fixture *f = *state;
    ftrt__epoch_msg m = {.epoch = 2, .value = 3};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_FAREWELL, &m, sizeof m), 0);
    pthread_mutex_lock(&f->ctx->cp.lock);
    for (int i = 0; i < 500 && !f->ctx->cp.farewell; i++) ftrt__cp_wait(f->ctx, 10);
    assert_int_equal(f->ctx->cp.farewell, 1);
    assert_int_equal(f->ctx->cp.job_end, 3);
    assert_int_equal(f->ctx->cp.shutdown, 0);
    pthread_mutex_unlock(&f->ctx->cp.lock);
    m.value = FTRT_ENOCKPT; /* a spare's SHUTDOWN after an abort */
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_SHUTDOWN, &m, sizeof m), 0);
    pthread_mutex_lock(&f->ctx->cp.lock);
    for (int i = 0; i < 500 && !f->ctx->cp.shutdown; i++) ftrt__cp_wait(f->ctx, 10);
    assert_int_equal(f->ctx->cp.shutdown, 1);
    assert_int_equal(f->ctx->cp.job_end, FTRT_ENOCKPT);
    pthread_mutex_unlock(&f->ctx->cp.lock);
    /* the coordinator closing after SHUTDOWN is not a failure */
    close(f->coord_fd);
    f->coord_fd = -1;
    usleep(50000);
    assert_int_equal(ftrt__interrupted(f->ctx), 0);
}

/* A fake engine listening on the watch (as the NCCL plane does): what the agent thread told it,
 * and a gate the application thread blocks on, outside any ftrt call, until the listener
 * opens it (the PyTorch user's loss.item() on a stream that only an abort frees). */
typedef struct fake_listener {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls, epoch, fatal, open, on_app_thread;
    pthread_t app;
} fake_listener;

static void fake_interrupt(void *arg, int epoch, int fatal)
{
    fake_listener *l = arg;
    pthread_mutex_lock(&l->lock);
    l->calls++;
    l->epoch = epoch;
    l->fatal = fatal;
    l->on_app_thread |= pthread_equal(pthread_self(), l->app);
    l->open = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

/* Blocks until the listener opened the gate (then closes it again) or 5 s passed; returns the
 * listener's call count. Application thread. */
static int blocked_until_opened(fake_listener *l)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&l->lock);
    while (!l->open && pthread_cond_timedwait(&l->cond, &l->lock, &ts) == 0) {}
    int calls = l->open ? l->calls : -1;
    l->open = 0;
    pthread_mutex_unlock(&l->lock);
    return calls;
}

/* The agent thread calls the watch's listeners once per change (FAILURE announces the epoch,
 * the PLAN of the same epoch is no second change, ABORT is), on its own thread, while the
 * application thread is blocked outside ftrt; after unlisten nothing is called. */
static void watch_listener_fires_once(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    fake_listener l = {.app = pthread_self()};
    pthread_mutex_init(&l.lock, NULL);
    pthread_cond_init(&l.cond, NULL);
    ftrt__watch_listener wl = {.fn = fake_interrupt, .arg = &l};
    ftrt__watch_listen(&ctx->watch, &wl);
    ftrt__welcome w = {.role = FTRT__ROLE_TRAINER, .logical_rank = 2, .ntrainers = 4};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_WELCOME, &w, sizeof w), 0);
    ftrt__failure_msg fm = {.epoch = 1, .t_fail_wall = 1.0};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_FAILURE, &fm, sizeof fm), 0);
    assert_int_equal(blocked_until_opened(&l), 1);
    assert_int_equal(l.epoch, 1);
    assert_int_equal(l.fatal, 0);
    size_t len = ftrt__plan_msg_size(0, 0);
    ftrt__plan_msg *p = calloc(1, len);
    p->epoch = 1, p->ntrainers = 4, p->source = 0, p->logical_rank = -1, p->resume_step = 3;
    p->ckpt_step = p->mem_step = -1;
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_PLAN, p, (uint32_t)len), 0);
    free(p);
    pthread_mutex_lock(&ctx->cp.lock);
    for (int i = 0; i < 500 && !ctx->cp.plan; i++) ftrt__cp_wait(ctx, 10);
    assert_non_null(ctx->cp.plan);
    pthread_mutex_unlock(&ctx->cp.lock);
    ftrt__epoch_msg m = {.value = FTRT_ENOSPARE};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_ABORT, &m, sizeof m), 0);
    assert_int_equal(blocked_until_opened(&l), 2); /* (the PLAN between called nothing) */
    assert_int_equal(l.fatal, FTRT_ENOSPARE);
    assert_int_equal(l.epoch, 1);
    assert_int_equal(l.on_app_thread, 0);
    ftrt__watch_unlisten(&ctx->watch, &wl);
    close(f->coord_fd); /* FTRT_ECOORD: no change for the fatal code set; and no listener */
    f->coord_fd = -1;
    usleep(50000);
    pthread_mutex_lock(&l.lock);
    assert_int_equal(l.calls, 2);
    pthread_mutex_unlock(&l.lock);
    pthread_mutex_destroy(&l.lock);
    pthread_cond_destroy(&l.cond);
}

/* ABORT from the coordinator becomes the fatal code every ftrt call returns. */
static void abort_is_fatal(void **state)
{
    fixture *f = *state;
    ftrt__epoch_msg m = {.value = FTRT_ENOSPARE};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_ABORT, &m, sizeof m), 0);
    for (int i = 0; i < 500 && ftrt__interrupted(f->ctx) == 0; i++) usleep(10000);
    assert_int_equal(ftrt__interrupted(f->ctx), FTRT_ENOSPARE);
}

/* Losing the coordinator, or a malformed message from it, ends the job for this rank. */
static void coordinator_loss(void **state)
{
    fixture *f = *state;
    close(f->coord_fd);
    f->coord_fd = -1;
    for (int i = 0; i < 500 && ftrt__interrupted(f->ctx) == 0; i++) usleep(10000);
    assert_int_equal(ftrt__interrupted(f->ctx), FTRT_ECOORD);
}

/* Sends PLAN p (len bytes; freed here) to the agent and expects it refused: the agent closes
 * the control plane (FTRT_ECOORD) and never adopts a plan or a holder table. */
static void expect_plan_refused(fixture *f, ftrt__plan_msg *p, size_t len)
{
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_PLAN, p, (uint32_t)len), 0);
    free(p);
    for (int i = 0; i < 500 && ftrt__interrupted(f->ctx) == 0; i++) usleep(10000);
    assert_int_equal(ftrt__interrupted(f->ctx), FTRT_ECOORD);
    pthread_mutex_lock(&f->ctx->cp.lock);
    assert_null(f->ctx->cp.plan); /* the bad plan was never adopted */
    assert_null(f->ctx->cp.holder);
    pthread_mutex_unlock(&f->ctx->cp.lock);
}

static void malformed_plan(void **state)
{
    fixture *f = *state;
    size_t len = ftrt__plan_msg_size(0, 2 + 2); /* the members, then the holder table */
    ftrt__plan_msg *p = calloc(1, len);
    p->epoch = 1, p->ntrainers = 2, p->nmembers = 2, p->logical_rank = 0, p->ndata = 2;
    p->data[2] = 0, p->data[3] = 1;
    p->data[0] = 3, p->data[1] = 3; /* duplicate member */
    expect_plan_refused(f, p, len);
}

/* A well-formed plan that puts another world rank where it says this rank is, or a delta for a
 * rank that knows no membership (it was never welcomed as a trainer), is refused the same way. */
static void plan_for_another_rank(void **state)
{
    fixture *f = *state;
    size_t len = ftrt__plan_msg_size(0, 2 + 2); /* the members, then the holder table */
    ftrt__plan_msg *p = calloc(1, len);
    p->epoch = 1, p->ntrainers = 2, p->nmembers = 2, p->logical_rank = 0, p->ndata = 2;
    p->data[2] = 0, p->data[3] = 1;
    p->data[0] = 4, p->data[1] = 3; /* this rank (world 3) is logical rank 1, not 0 */
    expect_plan_refused(f, p, len);
}

/* A whole PLAN (a shrink's or fold's) whose holder table gives this rank's logical rank no
 * data rank is refused the same way (it would train on nothing). */
static void plan_without_data_for_rank(void **state)
{
    fixture *f = *state;
    size_t len = ftrt__plan_msg_size(0, 2 + 3);
    ftrt__plan_msg *p = calloc(1, len);
    p->epoch = 1, p->ntrainers = 2, p->nmembers = 2, p->logical_rank = 1, p->ndata = 3;
    p->data[0] = 4, p->data[1] = 3;                  /* this rank (world 3) is logical rank 1 */
    p->data[2] = 0, p->data[3] = -1, p->data[4] = 0; /* ...which holds no data rank */
    expect_plan_refused(f, p, len);
}

static void delta_without_membership(void **state)
{
    fixture *f = *state;
    size_t len = ftrt__plan_msg_size(0, 0);
    ftrt__plan_msg *p = calloc(1, len);
    p->epoch = 1, p->ntrainers = 2, p->logical_rank = -1;
    expect_plan_refused(f, p, len);
}

/* The fake coordinator's end of the rank's connection closes (the process at the other end
 * died); the rank must connect again to listener lfd (the coordinator's, or a standby's), say
 * HELLO as world rank 3 and send its newest REPORT again, received into *got. */
static void reconnects(fixture *f, int lfd, ftrt__report *got)
{
    close(f->coord_fd);
    ftrt__rx_free(&f->rx);
    f->coord_fd = accept(lfd, NULL, NULL);
    assert_true(f->coord_fd >= 0);
    ftrt__hello hello;
    assert_true(coord_recv(f, FTRT__MSG_HELLO, &hello, sizeof hello));
    assert_int_equal(hello.world_rank, 3);
    assert_true(coord_recv(f, FTRT__MSG_REPORT, got, sizeof *got));
}

/* Served by a host agent (HOSTED) that dies with a REPORT in flight: the rank connects to the
 * coordinator directly, says HELLO again and sends its REPORT again; the job goes on (no fatal
 * code, the epoch change still pending). */
static void host_agent_lost(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__epoch_msg hosted = {.value = 7};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_HOSTED, &hosted, sizeof hosted), 0);
    ftrt__failure_msg fm = {.epoch = 1, .t_fail_wall = 1.0};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_FAILURE, &fm, sizeof fm), 0);
    for (int i = 0; i < 500 && ftrt__interrupted(ctx) == 0; i++) usleep(10000);
    assert_int_equal(ftrt__interrupted(ctx), FTRT_ERECOVER);
    ftrt__report rep = {.steps_done = 41, .epoch = 1, .own_step = -1, .held_step = -1};
    assert_int_equal(ftrt__agent_send(ctx, FTRT__MSG_REPORT, &rep, sizeof rep), 0);
    ftrt__report got;
    assert_true(coord_recv(f, FTRT__MSG_REPORT, &got, sizeof got));
    reconnects(f, f->listen_fd, &got); /* the host agent's process died */
    assert_int_equal(got.steps_done, 41);
    assert_int_equal(got.epoch, 1);
    assert_int_equal(ftrt__interrupted(ctx), FTRT_ERECOVER); /* not FTRT_ECOORD */
    ftrt__heartbeat hb;
    assert_true(coord_recv(f, FTRT__MSG_HEARTBEAT, &hb, sizeof hb)); /* alive, direct now */
}

/* Served by a host agent that holds (frozen) the rank's REPORT and FINGERPRINT and then dies:
 * the rank, back on its own connection, sends both again, so that the vote on that step's
 * fingerprints does not miss its (the coordinator counts a repeat once: unit.sdc). */
static void host_agent_lost_fingerprint(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__epoch_msg hosted = {.value = 7};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_HOSTED, &hosted, sizeof hosted), 0);
    int is_hosted = 0; /* (its HOSTED read: the close below is the host agent's loss) */
    for (int i = 0; i < 500 && !is_hosted; i++) {
        pthread_mutex_lock(&ctx->cp.send_lock);
        is_hosted = ctx->cp.hosted;
        pthread_mutex_unlock(&ctx->cp.send_lock);
        if (!is_hosted) usleep(10000);
    }
    assert_true(is_hosted);
    ftrt__report rep = {.steps_done = 12, .epoch = 0, .own_step = -1, .held_step = -1};
    assert_int_equal(ftrt__agent_send(ctx, FTRT__MSG_REPORT, &rep, sizeof rep), 0);
    ftrt__fingerprint_msg old = {.step = 10, .fp = 0x1234, .epoch = 0, .nregions = 1};
    assert_int_equal(ftrt__agent_send(ctx, FTRT__MSG_FINGERPRINT, &old, sizeof old), 0);
    ftrt__fingerprint_msg fp = {.step = 12, .fp = 0xfeedf00dull, .seconds = 0.25, .epoch = 0,
                                .nregions = 2};
    assert_int_equal(ftrt__agent_send(ctx, FTRT__MSG_FINGERPRINT, &fp, sizeof fp), 0);
    ftrt__report got;
    reconnects(f, f->listen_fd, &got); /* the host agent's process died, the three unforwarded */
    assert_int_equal(got.steps_done, 12);
    ftrt__fingerprint_msg fgot;
    assert_true(coord_recv(f, FTRT__MSG_FINGERPRINT, &fgot, sizeof fgot)); /* the newest */
    assert_int_equal(fgot.step, 12);
    assert_int_equal(fgot.fp, 0xfeedf00dull);
    assert_int_equal(fgot.nregions, 2);
    assert_int_equal(ftrt__interrupted(ctx), 0);
}

/* 1 when fd shows EOF within timeout_s (the messages before it read and dropped), else 0. */
static int eof_within(int fd, ftrt__rxbuf *rx, double timeout_s)
{
    double deadline = ftrt__now() + timeout_s;
    for (;;) {
        ssize_t got = ftrt__rx_fill(rx, fd);
        if (got == 0 || (got < 0 && got != -EAGAIN)) return 1;
        ftrt__msghdr h;
        const void *x;
        while (ftrt__rx_next(rx, &h, &x) == 1) {}
        int ms = (int)((deadline - ftrt__now()) * 1000.0);
        if (ms <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, ms);
    }
}

/* Served by a host agent that stalls (alive, but silent for more than half the heartbeat
 * timeout: 400 ms here), the rank falls back: it connects to the coordinator directly and
 * says HELLO, and keeps the agent's socket open, unread, until the coordinator answers there;
 * only then does it close it. (Closed at once, a stalled agent that resumes could report the
 * rank's socket closed, RANK_LOST "it died", before the coordinator read the HELLO, and a live
 * rank would be declared failed: unit.coord_move's lost_before_back.) */
static void host_agent_stalled(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__epoch_msg m = {.value = 7};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_HOSTED, &m, sizeof m), 0);
    /* the agent falls silent: the rank falls back after 200 ms */
    int direct = accept(f->listen_fd, NULL, NULL);
    assert_true(direct >= 0);
    ftrt__rxbuf drx = {0};
    ftrt__hello hello;
    assert_true(recv_on(direct, &drx, FTRT__MSG_HELLO, 0, &hello, sizeof hello));
    assert_int_equal(hello.world_rank, 3);
    assert_false(eof_within(f->coord_fd, &f->rx, 0.2)); /* the agent's socket: still open */
    ftrt__epoch_msg ping = {0};
    assert_int_equal(ftrt__msg_send(direct, FTRT__MSG_PING, &ping, sizeof ping), 0);
    assert_true(eof_within(f->coord_fd, &f->rx, 2.0)); /* closed once the coordinator answered */
    ftrt__heartbeat hb;
    assert_true(recv_on(direct, &drx, FTRT__MSG_HEARTBEAT, 0, &hb, sizeof hb)); /* direct now */
    assert_int_equal(ftrt__interrupted(ctx), 0);
    close(f->coord_fd);
    f->coord_fd = direct; /* (closed by teardown) */
    ftrt__rx_free(&drx);
}

/* COMMIT step `step` from the fake coordinator: through the new host agent (relayed), else on
 * the rank's own connection. */
static void send_commit(fixture *f, int64_t step, int relayed)
{
    ftrt__ckpt_msg cm = {.step = step};
    ftrt__relay pre = {.world_rank = 3};
    if (relayed)
        assert_int_equal(ftrt__msg_send2(f->up_fd, FTRT__MSG_RELAY, &pre, sizeof pre,
                                         FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    else
        assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
}

/* The rank's own connection ends (it closed its sending side after MOVE) with no REPORT on it
 * after the one of steps 11. */
static void own_connection_ends(fixture *f)
{
    ftrt__report got;
    assert_true(coord_recv(f, FTRT__MSG_REPORT, &got, sizeof got));
    assert_int_equal(got.steps_done, 11);
    assert_false(coord_recv(f, FTRT__MSG_REPORT, &got, sizeof got)); /* (EOF, not timeout) */
}

/* Its host agent lost (the process died), the rank falls back to its own connection, then
 * (FTRT_TEST_REELECT_MS later) elects a new host agent: this process binds the host's socket
 * and starts it, which joins the coordinator (HOST_HELLO) and relays the rank's HELLO. Before
 * MOVE its REPORT goes on its own connection; after MOVE it closes that connection's sending
 * side, and its next REPORT comes relayed, once. The coordinator's messages keep their order:
 * a COMMIT relayed before the last one sent on the old connection is taken after it (the rank
 * reads the old connection to its end first). Nothing is fatal. */
static void host_agent_reelected(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__epoch_msg m = {.value = 7};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_HOSTED, &m, sizeof m), 0);
    int hosted = 0;
    for (int i = 0; i < 500 && !hosted; i++) {
        usleep(10000);
        pthread_mutex_lock(&ctx->cp.send_lock);
        hosted = ctx->cp.hosted;
        pthread_mutex_unlock(&ctx->cp.send_lock);
    }
    assert_true(hosted);
    close(f->coord_fd); /* the host agent's process died, and the host's socket with it */
    close(f->local_fd);
    f->local_fd = -1;
    ftrt__rx_free(&f->rx);
    f->coord_fd = accept(f->listen_fd, NULL, NULL);
    ftrt__hello hello;
    assert_true(coord_recv(f, FTRT__MSG_HELLO, &hello, sizeof hello)); /* fell back */
    f->up_fd = accept(f->listen_fd, NULL, NULL); /* the new host agent, in this process */
    assert_true(recv_on(f->up_fd, &f->up_rx, FTRT__MSG_HOST_HELLO, 0, &hello, sizeof hello));
    assert_int_equal(hello.world_rank, 3);
    assert_true(recv_on(f->up_fd, &f->up_rx, FTRT__MSG_HELLO, 1, &hello, sizeof hello));
    ftrt__report rep = {.steps_done = 11, .epoch = 0, .own_step = -1, .held_step = -1};
    assert_int_equal(ftrt__agent_send(ctx, FTRT__MSG_REPORT, &rep, sizeof rep), 0);
    m.value = 3; /* the new host agent's process: this one */
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_MOVE, &m, sizeof m), 0);
    own_connection_ends(f);
    send_commit(f, 10, 1); /* arrives first, is newer */
    send_commit(f, 5, 0);
    close(f->coord_fd);
    f->coord_fd = -1;
    rep.steps_done = 12;
    assert_int_equal(ftrt__agent_send(ctx, FTRT__MSG_REPORT, &rep, sizeof rep), 0);
    ftrt__report got;
    assert_true(recv_on(f->up_fd, &f->up_rx, FTRT__MSG_REPORT, 1, &got, sizeof got));
    assert_int_equal(got.steps_done, 12); /* (11 went once, on its own connection) */
    int64_t step = 0;
    for (int i = 0; i < 500 && step != 10; i++) {
        usleep(10000);
        pthread_mutex_lock(&ctx->cp.lock);
        step = ctx->cp.commit_seen == 2 ? ctx->cp.commit_step : 0;
        pthread_mutex_unlock(&ctx->cp.lock);
    }
    assert_int_equal(step, 10);
    assert_int_equal(ftrt__interrupted(ctx), 0);
}

/* A host agent that lost the coordinator says so: every ftrt call returns FTRT_ECOORD. */
static void host_agent_says_coord_lost(void **state)
{
    fixture *f = *state;
    ftrt__epoch_msg m = {.value = 7};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_HOSTED, &m, sizeof m), 0);
    m.value = FTRT_ECOORD;
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_COORD_LOST, &m, sizeof m), 0);
    for (int i = 0; i < 500 && ftrt__interrupted(f->ctx) == 0; i++) usleep(10000);
    assert_int_equal(ftrt__interrupted(f->ctx), FTRT_ECOORD);
}

/* Told where the standby coordinator listens (NEXT_COORD), a rank that loses the coordinator
 * connects to the standby, says HELLO and sends its newest REPORT again; no fatal code. */
static void coordinator_lost_to_standby(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__coord_at at = {.world_rank = 6, .term = 0};
    int sfd = ftrt__listen("127.0.0.1", at.addrs, sizeof at.addrs, &at.port);
    assert_true(sfd >= 0);
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_NEXT_COORD, &at, sizeof at), 0);
    ftrt__report rep = {.steps_done = 17, .epoch = 0, .own_step = -1, .held_step = -1};
    assert_int_equal(ftrt__agent_send(ctx, FTRT__MSG_REPORT, &rep, sizeof rep), 0);
    ftrt__report got;
    assert_true(coord_recv(f, FTRT__MSG_REPORT, &got, sizeof got)); /* (NEXT_COORD read first) */
    reconnects(f, sfd, &got); /* the coordinator died */
    assert_int_equal(got.steps_done, 17);
    assert_int_equal(ftrt__interrupted(ctx), 0); /* not FTRT_ECOORD */
    close(sfd);
}

/* Appointed standby (STANDBY), a spare listens and says where (STANDBY_AT), acknowledges each
 * SYNC with its number, and takes over when the coordinator is lost (cp.takeover, by EOF), with
 * no fatal code. */
static void standby_takes_over(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__epoch_msg m = {.value = 0};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_STANDBY, &m, sizeof m), 0);
    ftrt__coord_at at;
    assert_true(coord_recv(f, FTRT__MSG_STANDBY_AT, &at, sizeof at));
    assert_true(at.port > 0);
    assert_int_equal(at.world_rank, 3);
    unsigned char sync[sizeof(ftrt__sync_head) + 40] = {0};
    ftrt__sync_head head = {.seq = 5, .term = 0, .version = 1};
    memcpy(sync, &head, sizeof head);
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_SYNC, sync, sizeof sync), 0);
    ftrt__epoch_msg ack;
    assert_true(coord_recv(f, FTRT__MSG_SYNC_ACK, &ack, sizeof ack));
    assert_int_equal(ack.value, 5);
    close(f->coord_fd);
    f->coord_fd = -1;
    int took = 0;
    for (int i = 0; i < 500 && !took; i++) {
        pthread_mutex_lock(&ctx->cp.lock);
        took = ctx->cp.takeover;
        pthread_mutex_unlock(&ctx->cp.lock);
        if (!took) usleep(10000);
    }
    assert_int_equal(took, 1);
    pthread_mutex_lock(&ctx->cp.lock);
    assert_int_equal(ctx->cp.sync_len, sizeof sync);
    pthread_mutex_unlock(&ctx->cp.lock);
    assert_int_equal(ftrt__interrupted(ctx), 0);
}

/* A coordinator's message of an older term than this rank follows (a deposed coordinator's)
 * is refused; a newer term is followed. */
static void stale_term_refused(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt__ckpt_msg cm = {.step = 10, .epoch = 0, .result = 0};
    ftrt__msg_set_term(1);
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    ftrt__msg_set_term(0); /* the deposed coordinator */
    cm.step = 20;
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    ftrt__failure_msg fm = {.epoch = 1};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_FAILURE, &fm, sizeof fm), 0);
    ftrt__epoch_msg ab = {.value = FTRT_EABORT};
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_ABORT, &ab, sizeof ab), 0);
    ftrt__msg_set_term(1);
    cm.step = 30;
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_COMMIT, &cm, sizeof cm), 0);
    ftrt__msg_set_term(0);
    int seen = 0;
    for (int i = 0; i < 500 && seen < 2; i++) {
        pthread_mutex_lock(&ctx->cp.lock);
        seen = ctx->cp.commit_seen;
        pthread_mutex_unlock(&ctx->cp.lock);
        if (seen < 2) usleep(10000);
    }
    pthread_mutex_lock(&ctx->cp.lock);
    assert_int_equal(ctx->cp.commit_seen, 2); /* steps 10 and 30 */
    assert_int_equal(ctx->cp.commit_step, 30);
    pthread_mutex_unlock(&ctx->cp.lock);
    assert_int_equal(atomic_load(&ctx->watch.pending_epoch), 0); /* FAILURE refused */
    assert_int_equal(ftrt__interrupted(ctx), 0);                 /* ABORT refused */
}

/* A standby that takes over tells the old coordinator, where it can still read (here: the
 * coordinator closed its sending side only): a SYNC_ACK of the next term, value -1. */
static void standby_refuses_old_coordinator(void **state)
{
    fixture *f = *state;
    ftrt__epoch_msg m = {.value = 4}; /* appointed by a coordinator of term 4 */
    assert_int_equal(ftrt__msg_send(f->coord_fd, FTRT__MSG_STANDBY, &m, sizeof m), 0);
    ftrt__coord_at at;
    assert_true(coord_recv(f, FTRT__MSG_STANDBY_AT, &at, sizeof at));
    assert_int_equal(shutdown(f->coord_fd, SHUT_WR), 0); /* the agent reads EOF */
    ftrt__epoch_msg ack;
    assert_true(coord_recv(f, FTRT__MSG_SYNC_ACK, &ack, sizeof ack));
    assert_int_equal(ack.epoch, 5);
    assert_int_equal(ack.value, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(heartbeats_carry_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(failure_and_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(farewell_and_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(abort_is_fatal, setup, teardown),
        cmocka_unit_test_setup_teardown(watch_listener_fires_once, setup, teardown),
        cmocka_unit_test_setup_teardown(coordinator_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(plan_for_another_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(plan_without_data_for_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(delta_without_membership, setup, teardown),
        cmocka_unit_test_setup_teardown(host_agent_lost, setup_hosted, teardown),
        cmocka_unit_test_setup_teardown(host_agent_lost_fingerprint, setup_hosted, teardown),
        cmocka_unit_test_setup_teardown(host_agent_says_coord_lost, setup_hosted, teardown),
        cmocka_unit_test_setup_teardown(host_agent_reelected, setup_reelect, teardown),
        cmocka_unit_test_setup_teardown(host_agent_stalled, setup_stall, teardown),
        cmocka_unit_test_setup_teardown(coordinator_lost_to_standby, setup, teardown),
        cmocka_unit_test_setup_teardown(standby_takes_over, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_term_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(standby_refuses_old_coordinator, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * coord_load.c - load generator for the coordinator at scale (README "The coordinator at
 * scale"; bench/coord_scale.py runs it over several sizes).
 *
 * Starts the real coordinator (ftrt__coordinator_run, runtime/coordinator/coordinator.h) in a
 * forked child process, so that its CPU time (/proc/<pid>/stat) and memory (/proc/<pid>/status)
 * are its own, and drives it with N simulated trainers and S hot spares on loopback TCP that
 * speak ftrt's wire protocol (base/proto.h) as runtime/agent.c and runtime/timeline.c do: HELLO
 * with the job secret; from then on, every heartbeat period, a HEARTBEAT (steps, collective
 * waits, kept and compute seconds) and a LEDGER (the intervals of the steps finished since the
 * last one: compute then exposed communication, 2 per step), each its own send() as in a real
 * agent; a FINGERPRINT every --sdc-every steps; REPORT on FAILURE, RESUMED on PLAN, SHARD_DONE
 * for checkpoints, LEDGER(final) and BYE at the end. A few worker threads (epoll) carry the
 * agents; the main thread runs the scenario:
 *
 *   1. start-up: every agent connects and says hello; time until the last WELCOME;
 *   2. steady state (--steady s): the coordinator's CPU (fraction of one core), its RSS, the
 *      loop latency (a probe connection sends a HELLO with a wrong secret every 50 ms and
 *      times the coordinator's close: the time a message waits before the loop reads it, plus
 *      one accept), the gaps between the coordinator's messages at the agents (a real agent
 *      declares the coordinator dead after the heartbeat timeout of silence);
 *   3. checkpoint commits (--commits): every trainer sends SHARD_DONE for a step whose N shard
 *      files were written beforehand (tmpfs by default); time from the last SHARD_DONE sent to
 *      the first and the last COMMIT received (the coordinator checks every shard's header and
 *      writes the MANIFEST of N shards in between);
 *   4. crash trials (--kills): a trainer's connection is closed (what the kernel does when a
 *      process dies); time from the close to the first FAILURE received by a survivor (the
 *      coordinator's detection, MTTD) and to the last (the fan-out to N-1 survivors); then every
 *      survivor REPORTs and the time from the last REPORT sent to the first and last PLAN
 *      received is the plan's computation and fan-out;
 *   5. silence trials (--silents): a trainer stops sending (its socket stays open); time from
 *      the expiry of its timeout (its last message sent + the heartbeat timeout) to the first
 *      FAILURE received;
 *   6. the end: LEDGER(final) and BYE from every trainer; time until the coordinator exits
 *      (the report is written in between).
 *
 * False positives: a connection the coordinator closed, or a FAILURE or PLAN, that no trial
 * caused. The generator's own lag (heartbeats sent late) is printed too: at the largest sizes
 * on a small machine the generator, not the coordinator, may be what falls behind.
 *
 * Output: human lines, then one "RESULT key=value ..." line (bench/coord_scale.py reads it).
 * Exit status 0 when the run completed with no false positive and every trial observed, 1
 * otherwise, 2 on a usage or setup error. Each of its two processes needs RLIMIT_NOFILE for about
 * N + S + 64 files: it raises the limit (beyond the hard limit with CAP_SYS_RESOURCE).
 *
 * Usage: coord_load [-n trainers] [-s spares] [--steady s] [--kills k] [--silents q]
 *                   [--commits c] [--threads t] [--hb-ms ms] [--timeout-ms ms] [--step-ms ms]
 *                   [--sdc-every k] [--dir path] [--seed x] [--keep]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftrt.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/net.h"
#include "base/proto.h"
#include "checkpoint/shard.h"
#include "runtime/coordinator/coordinator.h"

/* ---- settings ------------------------------------------------------------------------------ */

static int opt_n = 256, opt_s = 8, opt_kills = 5, opt_silents = 3, opt_commits = 3;
static int opt_threads = 2, opt_hb_ms = 100, opt_timeout_ms = 1000, opt_step_ms = 500;
static int opt_sdc_every = 10, opt_keep = 0;
static double opt_steady = 10.0;
static unsigned opt_seed = 1;
static char opt_dir[512];

/* ---- agents -------------------------------------------------------------------------------- */

enum { ST_ALIVE, ST_KILLED, ST_SILENT, ST_GONE };

typedef struct agent {
    int fd, w;
    _Atomic int role, state, logical;
    _Atomic int up;         /* connected and said hello (set by the main thread after fd) */
    int epoch;
    int recovering;         /* between FAILURE and PLAN: steps frozen */
    int64_t step_base;      /* steps_done = step_base + (now - t_base) / step while running */
    double t_base, t_wall_base;
    int64_t frozen, epoch_step0; /* steps at FAILURE; steps at the epoch's start (waits) */
    int64_t ledger_steps;   /* steps whose intervals were sent */
    int64_t fp_step;        /* last fingerprinted step */
    double totals[FTRT__IV_KINDS];
    double next_hb, last_send, last_rx;
    double hb_s;            /* heartbeat period: hb_s, then the WELCOME's */
    double next_ledger;     /* LEDGER once a second, as agent.c sends it */
    uint8_t *rx;            /* receive buffer: used bytes */
    size_t rx_used, rx_cap;
    uint8_t *tx;            /* bytes a full socket did not take yet */
    size_t tx_used, tx_cap;
} agent;

/* Events whose first and last times (monotonic s) and counts a trial watches. */
enum { EV_WELCOME, EV_FAILURE, EV_PLAN, EV_COMMIT, EV_REPORT_SENT, EV_RESUMED_SENT,
       EV_SHARD_SENT, EV_BYE_SENT, EV_END, EV_N };

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static double ev_first[EV_N], ev_last[EV_N];
static int ev_count[EV_N];
static int expect_epoch;           /* FAILURE/PLAN of this epoch belong to the trial */
static int64_t commit_result_bad;  /* COMMIT with a nonzero result */
static _Atomic int unexpected_eof, unexpected_failure, aborts, tx_blocked;
static _Atomic int trial_open;     /* 1 while a kill or silence trial expects a failure */
static _Atomic long long plan_bytes; /* PLAN bytes received by all agents (header included) */
static _Atomic long long plan_msg_max; /* the largest PLAN message received, bytes */
static double trial_t_ref;         /* the trial's close time, or the silent agent's last send */

static void ev_reset(void)
{
    pthread_mutex_lock(&ev_lock);
    for (int i = 0; i < EV_N; i++) {
        ev_first[i] = ev_last[i] = 0;
        ev_count[i] = 0;
    }
    pthread_mutex_unlock(&ev_lock);
}

static void ev_note(int e, double t)
{
    pthread_mutex_lock(&ev_lock);
    if (ev_count[e]++ == 0 || t < ev_first[e]) ev_first[e] = t;
    if (t > ev_last[e]) ev_last[e] = t;
    pthread_mutex_unlock(&ev_lock);
}

static int ev_get(int e, double *first, double *last)
{
    pthread_mutex_lock(&ev_lock);
    int n = ev_count[e];
    if (first) *first = ev_first[e];
    if (last) *last = ev_last[e];
    pthread_mutex_unlock(&ev_lock);
    return n;
}

/* Waits until event e was seen n times or timeout_s passes. Returns 1 when it was. */
static int ev_wait(int e, int n, double timeout_s)
{
    double end = ftrt__now() + timeout_s;
    while (ftrt__now() < end) {
        if (ev_get(e, NULL, NULL) >= n) return 1;
        usleep(500);
    }
    return ev_get(e, NULL, NULL) >= n;
}

/* ---- workers ------------------------------------------------------------------------------- */

enum { CMD_KILL = 1, CMD_SILENCE, CMD_SHARD, CMD_BYE };
typedef struct cmd {
    int op, w;
    int64_t arg;
} cmd;

typedef struct worker {
    int id, ep, evfd;
    agent **a; /* its agents, in heartbeat phase order */
    int n, cursor;
    pthread_t th;
    pthread_mutex_t lock;
    cmd q[64];
    int qn;
    _Atomic int stop;
    /* statistics (the worker writes them; the main thread reads them while they are still) */
    _Atomic long hb_sent;
    double hb_late_max;       /* a heartbeat sent this late after its due time, s */
    double gap_max;           /* the longest silence of the coordinator seen by an agent, s */
    _Atomic int measure_gaps; /* 0 before every agent is welcomed */
    uint8_t *buf;             /* one agent's outgoing messages of one heartbeat */
    size_t cap;
} worker;

static worker *workers;
static agent *agents; /* index = world rank; [0] unused */
static int W, N;
static double step_s, hb_s, t_job0, t_job0_wall;
static _Atomic int job_started;
static uint64_t the_secret;

static int64_t steps_now(const agent *a, double now)
{
    if (a->role != FTRT__ROLE_TRAINER) return 0;
    if (a->recovering) return a->frozen;
    if (!atomic_load(&job_started)) return 0;
    double dt = now - a->t_base;
    return a->step_base + (dt > 0 ? (int64_t)(dt / step_s) : 0);
}

/* Appends one framed message to the worker's buffer at *off. */
static void put(worker *k, size_t *off, uint32_t type, const void *p, uint32_t len)
{
    size_t need = *off + sizeof(ftrt__msghdr) + len;
    if (need > k->cap) {
        size_t nc = k->cap ? k->cap : 4096;
        while (nc < need) nc *= 2;
        uint8_t *b = realloc(k->buf, nc);
        if (!b) abort();
        k->buf = b;
        k->cap = nc;
    }
    ftrt__msghdr h = {FTRT__MAGIC, type, len};
    memcpy(k->buf + *off, &h, sizeof h);
    if (len) memcpy(k->buf + *off + sizeof h, p, len);
    *off = need;
}

/* Sends what is buffered for agent a, keeping order: what the socket does not take now is kept
 * and sent when it is writable again. */
static void flush(worker *k, agent *a, const uint8_t *p, size_t len)
{
    if (a->fd < 0) return;
    if (a->tx_used == 0) {
        ssize_t s = send(a->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (s < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return; /* EOF is read later */
        if (s < 0) s = 0;
        p += s;
        len -= (size_t)s;
        if (len == 0) return;
        atomic_fetch_add(&tx_blocked, 1);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)a->w};
        epoll_ctl(k->ep, EPOLL_CTL_MOD, a->fd, &ev);
    }
    if (a->tx_used + len > a->tx_cap) {
        size_t nc = a->tx_cap ? a->tx_cap : 4096;
        while (nc < a->tx_used + len) nc *= 2;
        uint8_t *b = realloc(a->tx, nc);
        if (!b) abort();
        a->tx = b;
        a->tx_cap = nc;
    }
    memcpy(a->tx + a->tx_used, p, len);
    a->tx_used += len;
}

static void send_one(worker *k, agent *a, uint32_t type, const void *p, uint32_t len)
{
    size_t off = 0;
    put(k, &off, type, p, len);
    flush(k, a, k->buf, off);
    a->last_send = ftrt__now();
}

/* The heartbeat period's messages of agent a: HEARTBEAT, LEDGER, maybe FINGERPRINT. */
static void heartbeat(worker *k, agent *a, double now, int final)
{
    int64_t steps = steps_now(a, now);
    size_t off = 0;
    ftrt__heartbeat hb = {.steps_done = steps,
                          .waits = 2 * (steps - a->epoch_step0 > 0 ? steps - a->epoch_step0 : 0),
                          .kept_s = (double)steps * step_s,
                          .compute_s = (double)steps * step_s * 0.8,
                          .epoch = a->epoch};
    put(k, &off, FTRT__MSG_HEARTBEAT, &hb, sizeof hb);
    /* A real agent sends the HEARTBEAT and the LEDGER in two send()s (agent.c, timeline.c):
     * two segments, which the coordinator may read in one recv() or two. */
    flush(k, a, k->buf, off);
    off = 0;
    if (!final && now < a->next_ledger) goto fingerprint; /* LEDGER once a second (agent.c) */
    a->next_ledger = now + 1.0;
    enum { CHUNK = 512 };
    static _Thread_local union {
        ftrt__ledger_msg m;
        uint8_t bytes[sizeof(ftrt__ledger_msg) + CHUNK * sizeof(ftrt__interval)];
    } lb;
    ftrt__ledger_msg *m = &lb.m;
    memset(m, 0, sizeof *m);
    int n = 0;
    int trainer = a->role == FTRT__ROLE_TRAINER;
    if (trainer && steps < a->ledger_steps) a->ledger_steps = steps; /* resumed behind */
    while (trainer && a->ledger_steps < steps && n + 2 <= CHUNK) {
        double t0 = a->t_wall_base + (double)(a->ledger_steps - a->step_base) * step_s;
        if (!(t0 > 0)) t0 = t_job0_wall;
        double tc = t0 + 0.8 * step_s, t1 = t0 + step_s;
        m->iv[n++] = (ftrt__interval){t0, tc, FTRT__IV_COMPUTE, 0};
        m->iv[n++] = (ftrt__interval){tc, t1, FTRT__IV_COMM, 0};
        a->totals[FTRT__IV_COMPUTE] += tc - t0;
        a->totals[FTRT__IV_COMM] += t1 - tc;
        a->ledger_steps++;
    }
    memcpy(m->totals, a->totals, sizeof m->totals);
    m->t_open = ftrt__wallclock();
    m->kind_open = trainer ? FTRT__IV_COMPUTE : FTRT__IV_SPARE_IDLE;
    m->kept_steps = steps;
    m->n = n;
    m->final = final;
    put(k, &off, FTRT__MSG_LEDGER, m, (uint32_t)ftrt__ledger_msg_size(n));
fingerprint:
    if (a->role == FTRT__ROLE_TRAINER && opt_sdc_every > 0 && !a->recovering) {
        int64_t s = steps / opt_sdc_every * opt_sdc_every;
        if (s > 0 && s > a->fp_step) {
            ftrt__fingerprint_msg fp = {.step = s, .fp = 0x5eedf00dULL, .seconds = 1e-5,
                                        .epoch = a->epoch, .nregions = 1};
            flush(k, a, k->buf, off); /* (the application thread sends it, separately) */
            off = 0;
            put(k, &off, FTRT__MSG_FINGERPRINT, &fp, sizeof fp);
            a->fp_step = s;
        }
    }
    flush(k, a, k->buf, off);
    a->last_send = now;
}

/* Heartbeats per second the coordinator asked the W - 1 ranks for (its WELCOME's period). */
static double hb_expected(int W)
{
    return (W - 1) * 1000.0 / ftrt__heartbeat_period_ms(opt_hb_ms, opt_timeout_ms, W);
}

static void agent_gone(worker *k, agent *a, int expected)
{
    if (a->fd >= 0) {
        epoll_ctl(k->ep, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
    }
    a->fd = -1;
    if (!expected && atomic_load(&a->state) == ST_ALIVE) {
        if (atomic_fetch_add(&unexpected_eof, 1) < 5)
            fprintf(stderr, "coord_load: the coordinator closed world rank %d's connection (a "
                            "false positive unless the job ended)\n", a->w);
    }
    atomic_store(&a->state, ST_GONE);
}

/* One message from the coordinator to agent a. */
static void take(worker *k, agent *a, const ftrt__msghdr *h, const uint8_t *p, double now)
{
    switch (h->type) {
    case FTRT__MSG_WELCOME: {
        ftrt__welcome wm;
        memcpy(&wm, p, sizeof wm);
        if (wm.heartbeat_ms > 0) a->hb_s = wm.heartbeat_ms / 1000.0; /* the coordinator's period */
        atomic_store(&a->role, wm.role);
        atomic_store(&a->logical, wm.logical_rank);
        a->epoch = wm.epoch;
        ev_note(EV_WELCOME, now);
        break;
    }
    case FTRT__MSG_PING:
        break;
    case FTRT__MSG_FAILURE: {
        ftrt__failure_msg fm;
        memcpy(&fm, p, sizeof fm);
        pthread_mutex_lock(&ev_lock);
        int ours = atomic_load(&trial_open) && fm.epoch == expect_epoch;
        pthread_mutex_unlock(&ev_lock);
        if (ours) ev_note(EV_FAILURE, now);
        else atomic_fetch_add(&unexpected_failure, 1);
        if (fm.epoch > a->epoch) a->epoch = fm.epoch;
        if (a->role == FTRT__ROLE_TRAINER && !a->recovering) {
            a->frozen = steps_now(a, now);
            a->recovering = 1;
        }
        ftrt__report rep = {.steps_done = a->frozen, .epoch = fm.epoch, .has_sharded = 0,
                            .own_step = -1, .held_step = -1, .held_of = -1}; /* no replicas */
        send_one(k, a, FTRT__MSG_REPORT, &rep, sizeof rep);
        ev_note(EV_REPORT_SENT, ftrt__now());
        break;
    }
    case FTRT__MSG_PLAN: {
        ftrt__plan pl;
        memcpy(&pl, p, sizeof pl);
        pthread_mutex_lock(&ev_lock);
        int ours = pl.epoch == expect_epoch;
        pthread_mutex_unlock(&ev_lock);
        if (ours) ev_note(EV_PLAN, now);
        else atomic_fetch_add(&unexpected_failure, 1);
        long long bytes = (long long)(sizeof *h + h->len);
        atomic_fetch_add(&plan_bytes, bytes);
        long long mx = atomic_load(&plan_msg_max);
        while (bytes > mx && !atomic_compare_exchange_weak(&plan_msg_max, &mx, bytes)) {}
        a->epoch = pl.epoch;
        atomic_store(&a->role, FTRT__ROLE_TRAINER);
        if (pl.logical_rank >= 0) /* (a survivor's PLAN may leave it out: it keeps its own) */
            atomic_store(&a->logical, pl.logical_rank);
        a->recovering = 0;
        a->step_base = a->epoch_step0 = pl.resume_step;
        a->t_base = now;
        a->t_wall_base = ftrt__wallclock();
        a->ledger_steps = pl.resume_step;
        a->fp_step = pl.resume_step;
        ftrt__epoch_msg em = {.epoch = pl.epoch};
        send_one(k, a, FTRT__MSG_RESUMED, &em, sizeof em);
        ev_note(EV_RESUMED_SENT, ftrt__now());
        break;
    }
    case FTRT__MSG_COMMIT: {
        ftrt__ckpt_msg cm;
        memcpy(&cm, p, sizeof cm);
        if (cm.result != 0) {
            pthread_mutex_lock(&ev_lock);
            commit_result_bad = cm.result;
            pthread_mutex_unlock(&ev_lock);
        }
        ev_note(EV_COMMIT, now);
        break;
    }
    case FTRT__MSG_FAREWELL:
    case FTRT__MSG_SHUTDOWN:
        ev_note(EV_END, now);
        atomic_store(&a->state, ST_GONE);
        break;
    case FTRT__MSG_ABORT:
        atomic_fetch_add(&aborts, 1);
        break;
    default:
        break;
    }
}

static void on_readable(worker *k, agent *a, double now)
{
    if (a->rx_cap - a->rx_used < 65536) {
        size_t nc = a->rx_cap ? a->rx_cap * 2 : 65536 * 2;
        uint8_t *b = realloc(a->rx, nc);
        if (!b) abort();
        a->rx = b;
        a->rx_cap = nc;
    }
    ssize_t got = recv(a->fd, a->rx + a->rx_used, a->rx_cap - a->rx_used, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) {
        int st = atomic_load(&a->state);
        agent_gone(k, a, st != ST_ALIVE);
        return;
    }
    if (atomic_load(&k->measure_gaps) && a->last_rx > 0 && now - a->last_rx > k->gap_max &&
        atomic_load(&a->state) == ST_ALIVE)
        k->gap_max = now - a->last_rx;
    a->last_rx = now;
    a->rx_used += (size_t)got;
    size_t off = 0;
    while (a->rx_used - off >= sizeof(ftrt__msghdr)) {
        ftrt__msghdr h;
        memcpy(&h, a->rx + off, sizeof h);
        if (h.magic != FTRT__MAGIC) {
            fprintf(stderr, "coord_load: bad magic from the coordinator to world rank %d\n", a->w);
            agent_gone(k, a, 1);
            return;
        }
        if (a->rx_used - off < sizeof h + h.len) break;
        take(k, a, &h, a->rx + off + sizeof h, now);
        off += sizeof h + h.len;
    }
    memmove(a->rx, a->rx + off, a->rx_used - off);
    a->rx_used -= off;
}

static void run_cmd(worker *k, const cmd *c)
{
    double now = ftrt__now();
    if (c->op == CMD_KILL || c->op == CMD_SILENCE) {
        agent *a = &agents[c->w];
        if (c->op == CMD_KILL) {
            atomic_store(&a->state, ST_KILLED);
            a->last_send = ftrt__now(); /* the close's time, for the trial (taken before it:
                                           the coordinator may answer before close returns) */
            if (a->fd >= 0) {
                epoll_ctl(k->ep, EPOLL_CTL_DEL, a->fd, NULL);
                close(a->fd); /* what the kernel does for a process that died */
                a->fd = -1;
            }
        } else {
            atomic_store(&a->state, ST_SILENT); /* its last message was its last heartbeat */
        }
        pthread_mutex_lock(&ev_lock);
        trial_t_ref = a->last_send;
        pthread_mutex_unlock(&ev_lock);
        return;
    }
    for (int i = 0; i < k->n; i++) {
        agent *a = k->a[i];
        if (atomic_load(&a->state) != ST_ALIVE || a->role != FTRT__ROLE_TRAINER) continue;
        if (c->op == CMD_SHARD) {
            ftrt__ckpt_msg cm = {.step = c->arg, .epoch = a->epoch, .result = 0};
            send_one(k, a, FTRT__MSG_SHARD_DONE, &cm, sizeof cm);
            ev_note(EV_SHARD_SENT, ftrt__now());
        } else if (c->op == CMD_BYE) {
            heartbeat(k, a, now, 1);
            int64_t steps = steps_now(a, now);
            ftrt__bye b = {.steps_done = steps, .kept_s = (double)steps * step_s};
            send_one(k, a, FTRT__MSG_BYE, &b, sizeof b);
            ev_note(EV_BYE_SENT, ftrt__now());
        }
    }
}

static void *worker_main(void *arg)
{
    worker *k = arg;
    struct epoll_event evs[256];
    while (!atomic_load(&k->stop)) {
        double now = ftrt__now();
        /* Heartbeats due: the agents are in phase order, each due once per period; like a
         * real agent thread, an agent heartbeats from its hello on (before its WELCOME). */
        for (int guard = 0; guard < k->n; guard++) {
            agent *a = k->a[k->cursor];
            if (a->next_hb > now) break;
            double late = now - a->next_hb;
            if (atomic_load(&a->up) && atomic_load(&a->state) == ST_ALIVE && a->fd >= 0) {
                if (late > k->hb_late_max && atomic_load(&k->measure_gaps)) k->hb_late_max = late;
                heartbeat(k, a, now, 0);
                atomic_fetch_add(&k->hb_sent, 1);
            }
            double p = a->hb_s > 0 ? a->hb_s : hb_s;
            a->next_hb += p;
            if (a->next_hb < now) a->next_hb = now + p * 0.5; /* fell behind: catch up */
            k->cursor = (k->cursor + 1) % k->n;
        }
        int ms = 1;
        if (k->n) {
            double d = k->a[k->cursor]->next_hb - ftrt__now();
            ms = d <= 0 ? 0 : (int)(d * 1000.0) + 1;
            if (ms > 20) ms = 20;
        }
        int ne = epoll_wait(k->ep, evs, 256, ms);
        now = ftrt__now();
        for (int i = 0; i < ne; i++) {
            uint32_t id = evs[i].data.u32;
            if (id == 0) { /* commands */
                uint64_t v;
                if (read(k->evfd, &v, sizeof v) < 0) { /* spurious */ }
                cmd q[64];
                pthread_mutex_lock(&k->lock);
                int qn = k->qn;
                memcpy(q, k->q, (size_t)qn * sizeof *q);
                k->qn = 0;
                pthread_mutex_unlock(&k->lock);
                for (int j = 0; j < qn; j++) run_cmd(k, &q[j]);
                continue;
            }
            agent *a = &agents[id];
            if (a->fd < 0) continue;
            if ((evs[i].events & EPOLLOUT) && a->tx_used) {
                ssize_t s = send(a->fd, a->tx, a->tx_used, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (s > 0) {
                    memmove(a->tx, a->tx + s, a->tx_used - (size_t)s);
                    a->tx_used -= (size_t)s;
                }
                if (a->tx_used == 0) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = id};
                    epoll_ctl(k->ep, EPOLL_CTL_MOD, a->fd, &ev);
                }
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(k, a, now);
        }
    }
    return NULL;
}

static void post(int op, int w, int64_t arg)
{
    for (int i = 0; i < opt_threads; i++) {
        worker *k = &workers[i];
        if (w > 0 && (w - 1) % opt_threads != i) continue;
        pthread_mutex_lock(&k->lock);
        if (k->qn < 64) k->q[k->qn++] = (cmd){op, w, arg};
        pthread_mutex_unlock(&k->lock);
        uint64_t one = 1;
        if (write(k->evfd, &one, sizeof one) < 0) { /* the counter cannot overflow here */ }
    }
}

/* ---- the coordinator's process --------------------------------------------------------------- */

static pid_t coord_pid;

static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long long ut = 0, st = 0;
    /* fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* VmRSS or VmHWM (name) of pid in MiB, or -1. */
static double proc_mem_mib(pid_t pid, const char *name)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double v = -1;
    size_t l = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, l) && line[l] == ':') {
            v = atof(line + l + 1) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* ---- statistics ---------------------------------------------------------------------------- */

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The q-quantile (nearest rank) of v[0..n), sorted in place; NAN when n == 0. */
static double quant(double *v, int n, double q)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(q * n) - 1;
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
    return v[i];
}

/* One loop-latency probe: a connection that sends a HELLO with a wrong secret; the time until
 * the coordinator closes it, in seconds, or -1. */
static double probe(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    struct {
        ftrt__msghdr h;
        ftrt__hello hello;
    } m = {{FTRT__MAGIC, FTRT__MSG_HELLO, sizeof(ftrt__hello)}, {.secret = the_secret ^ 1,
                                                                   .world_rank = 1}};
    double t0 = ftrt__now();
    if (send(fd, &m, sizeof m, MSG_NOSIGNAL) != (ssize_t)sizeof m) {
        close(fd);
        return -1;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    double dt = -1;
    if (poll(&pf, 1, 5000) == 1) {
        char b[16];
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r <= 0) dt = ftrt__now() - t0;
    }
    close(fd);
    return dt;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: coord_load [-n trainers] [-s spares] [--steady s] [--kills k] [--silents q]\n"
            "                  [--commits c] [--threads t] [--hb-ms ms] [--timeout-ms ms]\n"
            "                  [--step-ms ms] [--sdc-every k] [--dir path] [--seed x] [--keep]\n");
}

static int parse(int argc, char **argv)
{
    static const struct option lo[] = {
        {"steady", 1, 0, 'd'},     {"kills", 1, 0, 'k'},      {"silents", 1, 0, 'q'},
        {"commits", 1, 0, 'c'},    {"threads", 1, 0, 't'},    {"hb-ms", 1, 0, 'H'},
        {"timeout-ms", 1, 0, 'T'}, {"step-ms", 1, 0, 'S'},    {"sdc-every", 1, 0, 'F'},
        {"dir", 1, 0, 'D'},        {"seed", 1, 0, 'r'},       {"keep", 0, 0, 'K'},
        {"help", 0, 0, 'h'},       {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "n:s:h", lo, NULL)) != -1) {
        switch (o) {
        case 'n': opt_n = atoi(optarg); break;
        case 's': opt_s = atoi(optarg); break;
        case 'd': opt_steady = atof(optarg); break;
        case 'k': opt_kills = atoi(optarg); break;
        case 'q': opt_silents = atoi(optarg); break;
        case 'c': opt_commits = atoi(optarg); break;
        case 't': opt_threads = atoi(optarg); break;
        case 'H': opt_hb_ms = atoi(optarg); break;
        case 'T': opt_timeout_ms = atoi(optarg); break;
        case 'S': opt_step_ms = atoi(optarg); break;
        case 'F': opt_sdc_every = atoi(optarg); break;
        case 'D': snprintf(opt_dir, sizeof opt_dir, "%s", optarg); break;
        case 'r': opt_seed = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'K': opt_keep = 1; break;
        default: usage(); return -1;
        }
    }
    if (opt_n < 2 || opt_s < opt_kills + opt_silents || opt_threads < 1 || opt_threads > 64 ||
        opt_hb_ms < 1 || opt_timeout_ms <= opt_hb_ms || opt_step_ms < 1 || opt_steady < 0) {
        fprintf(stderr, "coord_load: need n >= 2, spares >= kills + silents, 1..64 threads, "
                        "timeout > heartbeat\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (parse(argc, argv)) return 2;
    N = opt_n;
    W = 1 + opt_n + opt_s;
    step_s = opt_step_ms / 1000.0;
    hb_s = opt_hb_ms / 1000.0;
    signal(SIGPIPE, SIG_IGN);

    /* Each process (this one, the coordinator's) holds about W connections. */
    struct rlimit cur;
    getrlimit(RLIMIT_NOFILE, &cur);
    rlim_t want = (rlim_t)W + 512;
    if (cur.rlim_cur < want) {
        struct rlimit rl = {want, cur.rlim_max > want ? cur.rlim_max : want};
        if (setrlimit(RLIMIT_NOFILE, &rl)) { /* without CAP_SYS_RESOURCE: up to the hard limit */
            rl.rlim_cur = rl.rlim_max = cur.rlim_max;
            if (cur.rlim_max < (rlim_t)W + 64 || setrlimit(RLIMIT_NOFILE, &rl)) {
                fprintf(stderr, "coord_load: cannot raise RLIMIT_NOFILE to %llu (hard limit "
                        "%llu): %s\n", (unsigned long long)want,
                        (unsigned long long)cur.rlim_max, strerror(errno));
                return 2;
            }
        }
    }

    /* The job's files: checkpoints (the shards of the commit trials), status file, report. */
    char dir[600], ckdir[700], status[700], report[700], clog[700];
    if (opt_dir[0])
        snprintf(dir, sizeof dir, "%s", opt_dir);
    else
        snprintf(dir, sizeof dir, "/dev/shm/ftrt-coord-load.%d", (int)getpid());
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);
    snprintf(status, sizeof status, "%s/status.json", dir);
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(clog, sizeof clog, "%s/coordinator.log", dir);
    mkdir(dir, 0755);
    mkdir(ckdir, 0755);
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    cfg.heartbeat_ms = opt_hb_ms;
    cfg.heartbeat_timeout_ms = opt_timeout_ms;
    cfg.init_timeout_ms = 600000;
    cfg.ckpt_keep = opt_commits + 2; /* no deletion during the run: commits are timed alone */
    cfg.progress = 0;
    cfg.sdc_every = opt_sdc_every;
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s", ckdir);
    snprintf(cfg.status_file, sizeof cfg.status_file, "%s", status);
    snprintf(cfg.report_file, sizeof cfg.report_file, "%s", report);
    ftrt__log_level = cfg.log_level;

    double t = ftrt__now();
    char region_bytes[64] = "coord_load";
    ftrt__region reg = {.name = "w", .ptr = region_bytes, .bytes = sizeof region_bytes,
                        .kind = FTRT__KIND_SHARDED};
    for (int c = 0; c < opt_commits; c++)
        for (int r = 0; r < N; r++) {
            int rc = ftrt__shard_write(ckdir, 1000 * (c + 1), r, N, &reg, 1);
            if (rc) {
                fprintf(stderr, "coord_load: shard write failed: %s\n", strerror(-rc));
                return 2;
            }
        }
    if (opt_commits)
        printf("wrote %d x %d shards in %.1f s (%s)\n", opt_commits, N, ftrt__now() - t, ckdir);

    char addrs[FTRT__ADDRS_MAX];
    int port = 0;
    int lfd = ftrt__listen("127.0.0.1", addrs, sizeof addrs, &port);
    if (lfd < 0 || ftrt__random(&the_secret, sizeof the_secret)) {
        fprintf(stderr, "coord_load: cannot listen\n");
        return 2;
    }
    fflush(stdout);
    coord_pid = fork();
    if (coord_pid < 0) return 2;
    if (coord_pid == 0) { /* the coordinator, as world rank 0 runs it inside ftrt_init() */
        int lf = open(clog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (lf >= 0) {
            dup2(lf, 1);
            dup2(lf, 2);
            close(lf);
        }
        ftrt__log_rank = 0;
        ftrt__coord_args ca = {.cfg = &cfg, .world_size = W, .ntrainers = N,
                               .t_start = ftrt__now(), .t_start_wall = ftrt__wallclock(),
                               .status_file = status, .host = "coordhost", .addr = addrs,
                               .port = port};
        int rc = ftrt__coordinator_run(&ca, lfd, the_secret);
        fflush(NULL);
        _exit(rc == FTRT_DONE ? 0 : 1);
    }
    close(lfd);

    /* Agents and workers. */
    agents = calloc((size_t)W, sizeof *agents);
    workers = calloc((size_t)opt_threads, sizeof *workers);
    if (!agents || !workers) return 2;
    for (int i = 0; i < opt_threads; i++) {
        worker *k = &workers[i];
        k->id = i;
        k->ep = epoll_create1(EPOLL_CLOEXEC);
        k->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        pthread_mutex_init(&k->lock, NULL);
        k->a = calloc((size_t)(W / opt_threads + 2), sizeof *k->a);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
        epoll_ctl(k->ep, EPOLL_CTL_ADD, k->evfd, &ev);
    }
    for (int w = 1; w < W; w++) {
        agent *a = &agents[w];
        a->fd = -1;
        a->w = w;
        a->role = FTRT__ROLE_SPARE;
        a->logical = -1;
        worker *k = &workers[(w - 1) % opt_threads];
        k->a[k->n++] = a;
    }
    t = ftrt__now();
    double t_connect0 = t;
    for (int i = 0; i < opt_threads; i++) { /* heartbeat phases spread over the period */
        worker *k = &workers[i];
        for (int j = 0; j < k->n; j++) {
            k->a[j]->next_hb = t + hb_s * (1.0 + (double)j / k->n);
            k->a[j]->last_rx = t;
        }
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < opt_threads; i++) pthread_create(&workers[i].th, NULL, worker_main, &workers[i]);
    for (int w = 1; w < W; w++) {
        agent *a = &agents[w];
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) ||
            connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
            fprintf(stderr, "coord_load: connect of world rank %d failed: %s\n", w, strerror(errno));
            kill(coord_pid, SIGKILL);
            return 2;
        }
        ftrt__hello h = {.secret = the_secret, .world_rank = w, .pid = 0};
        if (w <= N)
            snprintf(h.host, sizeof h.host, "sim-%d", (w - 1) / 8);
        else
            snprintf(h.host, sizeof h.host, "spare-%d", w - N);
        if (ftrt__msg_send(fd, FTRT__MSG_HELLO, &h, sizeof h)) {
            kill(coord_pid, SIGKILL);
            return 2;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        a->fd = fd;
        worker *k = &workers[(w - 1) % opt_threads];
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)w};
        epoll_ctl(k->ep, EPOLL_CTL_ADD, fd, &ev);
        atomic_store(&a->up, 1);
        if (w % 4096 == 0)
            fprintf(stderr, "coord_load: %d connected after %.2f s\n", w, ftrt__now() - t_connect0);
        /* (The coordinator accepts while this loop runs; a full backlog slows connect() down.) */
    }
    int ok = ev_wait(EV_WELCOME, W - 1, 600.0);
    double tw;
    ev_get(EV_WELCOME, NULL, &tw);
    double startup = tw - t_connect0;
    printf("N=%d trainers + %d spares (world %d), %d worker threads, heartbeat %d ms, timeout %d "
           "ms, step %d ms: start-up (connect + hello of all, until the last WELCOME) %.2f s\n",
           N, opt_s, W, opt_threads, opt_hb_ms, opt_timeout_ms, opt_step_ms, startup);
    if (!ok) {
        fprintf(stderr, "coord_load: not every rank was welcomed\n");
        kill(coord_pid, SIGKILL);
        return 1;
    }
    /* The job starts: heartbeats in phase order, spread over the period. */
    t_job0 = ftrt__now();
    t_job0_wall = ftrt__wallclock();
    for (int i = 0; i < opt_threads; i++) {
        worker *k = &workers[i];
        pthread_mutex_lock(&k->lock); /* (the worker reads them once job_started is set) */
        for (int j = 0; j < k->n; j++) {
            agent *a = k->a[j];
            a->t_base = t_job0;
            a->t_wall_base = t_job0_wall;
        }
        pthread_mutex_unlock(&k->lock);
    }
    atomic_store(&job_started, 1);
    for (int i = 0; i < opt_threads; i++) atomic_store(&workers[i].measure_gaps, 1);

    /* Steady state. */
    usleep(2000000); /* warm-up: the first LEDGERs, the first median step time */
    for (int i = 0; i < opt_threads; i++) {
        workers[i].gap_max = 0;
        workers[i].hb_late_max = 0;
    }
    long hb0 = 0;
    for (int i = 0; i < opt_threads; i++) hb0 += atomic_load(&workers[i].hb_sent);
    double c0 = proc_cpu_s(coord_pid), s0 = self_cpu_s(), t0 = ftrt__now();
    int nprobe_max = (int)(opt_steady / 0.05) + 1, nprobe = 0, probe_fail = 0;
    double *pr = calloc((size_t)nprobe_max, sizeof *pr);
    double rss_max = 0;
    while (ftrt__now() - t0 < opt_steady) {
        double t1 = ftrt__now();
        double d = probe(port);
        if (d >= 0 && nprobe < nprobe_max) pr[nprobe++] = d;
        else if (d < 0) probe_fail++;
        double r = proc_mem_mib(coord_pid, "VmRSS");
        if (r > rss_max) rss_max = r;
        double sl = 0.05 - (ftrt__now() - t1);
        if (sl > 0) usleep((useconds_t)(sl * 1e6));
    }
    double dt = ftrt__now() - t0;
    double cpu = (proc_cpu_s(coord_pid) - c0) / dt, gen_cpu = (self_cpu_s() - s0) / dt;
    long hb1 = 0;
    double gap_steady = 0, late_steady = 0;
    for (int i = 0; i < opt_threads; i++) {
        hb1 += atomic_load(&workers[i].hb_sent);
        if (workers[i].gap_max > gap_steady) gap_steady = workers[i].gap_max;
        if (workers[i].hb_late_max > late_steady) late_steady = workers[i].hb_late_max;
    }
    double rss_steady = proc_mem_mib(coord_pid, "VmRSS");
    double p50 = quant(pr, nprobe, 0.5), p99 = quant(pr, nprobe, 0.99),
           pmax = nprobe ? pr[nprobe - 1] : NAN;
    printf("steady %.1f s: coordinator CPU %.3f of a core, RSS %.1f MiB; loop latency (probe) "
           "p50 %.2f ms p99 %.2f ms max %.2f ms (%d probes, %d failed); coordinator silence at "
           "the agents max %.0f ms; heartbeats sent %.0f/s (expected %.0f/s), sent late by up to "
           "%.1f ms; generator CPU %.2f cores\n",
           dt, cpu, rss_steady, p50 * 1e3, p99 * 1e3, pmax * 1e3, nprobe, probe_fail,
           gap_steady * 1e3, (hb1 - hb0) / dt, hb_expected(W), late_steady * 1e3, gen_cpu);
    free(pr);

    /* Checkpoint commits. */
    double *cm_first = calloc((size_t)opt_commits + 1, sizeof(double));
    double *cm_last = calloc((size_t)opt_commits + 1, sizeof(double));
    int ncm = 0, fails = 0;
    for (int c = 0; c < opt_commits; c++) {
        ev_reset();
        post(CMD_SHARD, 0, 1000 * (c + 1));
        if (!ev_wait(EV_SHARD_SENT, N, 30) || !ev_wait(EV_COMMIT, N, 60)) {
            fprintf(stderr, "coord_load: commit %d: %d SHARD_DONE sent, %d COMMIT received\n", c,
                    ev_get(EV_SHARD_SENT, NULL, NULL), ev_get(EV_COMMIT, NULL, NULL));
            fails++;
            continue;
        }
        double sl, cf, cl;
        ev_get(EV_SHARD_SENT, NULL, &sl);
        ev_get(EV_COMMIT, &cf, &cl);
        cm_first[ncm] = cf - sl;
        cm_last[ncm++] = cl - sl;
        usleep(300000);
    }
    if (commit_result_bad) {
        fprintf(stderr, "coord_load: a COMMIT carried result %lld\n", (long long)commit_result_bad);
        fails++;
    }

    /* Crash and silence trials. */
    srand(opt_seed);
    int ntrial = opt_kills + opt_silents;
    double *mttd = calloc((size_t)ntrial + 1, sizeof(double));
    double *fan = calloc((size_t)ntrial + 1, sizeof(double));
    double *plan_f = calloc((size_t)ntrial + 1, sizeof(double));
    double *plan_l = calloc((size_t)ntrial + 1, sizeof(double));
    double *sil = calloc((size_t)ntrial + 1, sizeof(double));
    double *plan_b = calloc((size_t)ntrial + 1, sizeof(double));
    int nk = 0, ns = 0, np = 0, epoch = 0;
    for (int tr = 0; tr < ntrial; tr++) {
        int silent = tr >= opt_kills;
        int victim = -1;
        for (int tries = 0; tries < 100000 && victim < 0; tries++) {
            int w = 1 + rand() % (W - 1);
            if (atomic_load(&agents[w].role) == FTRT__ROLE_TRAINER &&
                atomic_load(&agents[w].state) == ST_ALIVE)
                victim = w;
        }
        if (victim < 0) break;
        ev_reset();
        atomic_store(&plan_bytes, 0);
        pthread_mutex_lock(&ev_lock);
        expect_epoch = ++epoch;
        pthread_mutex_unlock(&ev_lock);
        atomic_store(&trial_open, 1);
        post(silent ? CMD_SILENCE : CMD_KILL, victim, 0);
        /* Survivors: every trainer but the victim gets the FAILURE (the spare does not). */
        int got = ev_wait(EV_FAILURE, N - 1, opt_timeout_ms / 1000.0 + 30);
        double ff, fl;
        ev_get(EV_FAILURE, &ff, &fl);
        pthread_mutex_lock(&ev_lock);
        double t_ref = trial_t_ref; /* close time, or the last message sent */
        pthread_mutex_unlock(&ev_lock);
        if (!got) {
            fprintf(stderr, "coord_load: trial %d: %d of %d FAILURE received\n", tr,
                    ev_get(EV_FAILURE, NULL, NULL), N - 1);
            fails++;
            atomic_store(&trial_open, 0);
            break;
        }
        if (silent) {
            sil[ns++] = ff - (t_ref + opt_timeout_ms / 1000.0);
        } else {
            mttd[nk] = ff - t_ref;
            fan[nk++] = fl - t_ref;
        }
        /* Every survivor REPORTs; the PLAN goes to N members (the spare included). */
        if (!ev_wait(EV_PLAN, N, 120) || !ev_wait(EV_RESUMED_SENT, N, 30)) {
            fprintf(stderr, "coord_load: trial %d: %d of %d PLAN received\n", tr,
                    ev_get(EV_PLAN, NULL, NULL), N);
            fails++;
            atomic_store(&trial_open, 0);
            break;
        }
        double rl, pf, pl;
        ev_get(EV_REPORT_SENT, NULL, &rl);
        ev_get(EV_PLAN, &pf, &pl);
        plan_b[np] = (double)atomic_load(&plan_bytes);
        plan_f[np] = pf - rl;
        plan_l[np++] = pl - rl;
        atomic_store(&trial_open, 0);
        usleep(500000); /* the coordinator takes the RESUMEDs and is back to running */
    }
    double rss_end = proc_mem_mib(coord_pid, "VmRSS"), hwm = proc_mem_mib(coord_pid, "VmHWM");
    double gap_all = 0;
    for (int i = 0; i < opt_threads; i++)
        if (workers[i].gap_max > gap_all) gap_all = workers[i].gap_max;

    /* The end: BYE from every trainer; the coordinator writes the report and exits. */
    ev_reset();
    double cpu_before_end = proc_cpu_s(coord_pid);
    post(CMD_BYE, 0, 0);
    int status_code = -1;
    double t_bye_wait = ftrt__now(), t_exit = -1;
    while (ftrt__now() - t_bye_wait < 120) {
        pid_t r = waitpid(coord_pid, &status_code, WNOHANG);
        if (r == coord_pid) {
            t_exit = ftrt__now();
            break;
        }
        usleep(1000);
    }
    double t_last_bye;
    ev_get(EV_BYE_SENT, NULL, &t_last_bye);
    double end_s = t_exit > 0 ? t_exit - t_last_bye : NAN;
    (void)cpu_before_end;
    if (t_exit < 0) {
        fprintf(stderr, "coord_load: the coordinator did not exit\n");
        kill(coord_pid, SIGKILL);
        waitpid(coord_pid, NULL, 0);
        fails++;
    } else if (!WIFEXITED(status_code) || WEXITSTATUS(status_code) != 0) {
        fprintf(stderr, "coord_load: the coordinator ended with status 0x%x; the end of its log "
                        "(%s):\n", status_code, clog);
        char cmdl[800];
        snprintf(cmdl, sizeof cmdl, "tail -n 40 '%s' >&2", clog);
        if (system(cmdl) != 0) fprintf(stderr, "coord_load: cannot show %s\n", clog);
        fails++;
    }
    for (int i = 0; i < opt_threads; i++) atomic_store(&workers[i].stop, 1);
    for (int i = 0; i < opt_threads; i++) pthread_join(workers[i].th, NULL);

    double cmf50 = quant(cm_first, ncm, 0.5), cml50 = quant(cm_last, ncm, 0.5),
           cmlmax = ncm ? cm_last[ncm - 1] : NAN;
    double mttd50 = quant(mttd, nk, 0.5), mttdmax = nk ? mttd[nk - 1] : NAN;
    double fan50 = quant(fan, nk, 0.5), fanmax = nk ? fan[nk - 1] : NAN;
    double sil50 = quant(sil, ns, 0.5), silmax = ns ? sil[ns - 1] : NAN;
    double pf50 = quant(plan_f, np, 0.5), pl50 = quant(plan_l, np, 0.5),
           plmax = np ? plan_l[np - 1] : NAN, pb50 = quant(plan_b, np, 0.5);
    int fp = atomic_load(&unexpected_eof) + atomic_load(&unexpected_failure);
    printf("commit (last SHARD_DONE -> COMMIT, %d): first p50 %.1f ms, last p50 %.1f ms max "
           "%.1f ms\n", ncm, cmf50 * 1e3, cml50 * 1e3, cmlmax * 1e3);
    printf("crash (close -> FAILURE, %d): first p50 %.2f ms max %.2f ms; last survivor p50 %.1f "
           "ms max %.1f ms\n", nk, mttd50 * 1e3, mttdmax * 1e3, fan50 * 1e3, fanmax * 1e3);
    printf("silence (timeout expiry -> FAILURE, %d): p50 %.2f ms max %.2f ms\n", ns, sil50 * 1e3,
           silmax * 1e3);
    printf("plan (last REPORT -> PLAN, %d): first p50 %.1f ms, last p50 %.1f ms max %.1f ms; "
           "PLAN bytes to all members per recovery p50 %.0f, largest message %lld\n",
           np, pf50 * 1e3, pl50 * 1e3, plmax * 1e3, pb50, (long long)atomic_load(&plan_msg_max));
    printf("false positives %d (connections closed %d, failures %d); aborts %d; sends that "
           "found a full socket %d; coordinator silence at the agents over the whole run max "
           "%.0f ms; RSS at the end %.1f MiB (peak %.1f); end (last BYE -> exit) %.2f s\n",
           fp, atomic_load(&unexpected_eof), atomic_load(&unexpected_failure),
           atomic_load(&aborts), atomic_load(&tx_blocked), gap_all * 1e3, rss_end, hwm, end_s);
    printf("RESULT n=%d spares=%d world=%d startup_s=%.3f cpu=%.4f gen_cpu=%.3f rss_mib=%.1f "
           "rss_end_mib=%.1f hwm_mib=%.1f probe_p50_ms=%.3f probe_p99_ms=%.3f probe_max_ms=%.3f "
           "gap_steady_ms=%.1f gap_all_ms=%.1f hb_rate=%.0f hb_expected=%.0f hb_late_ms=%.1f "
           "commit_first_ms=%.2f commit_last_ms=%.2f commit_max_ms=%.2f mttd_p50_ms=%.3f "
           "mttd_max_ms=%.3f fanout_p50_ms=%.2f fanout_max_ms=%.2f silent_p50_ms=%.2f "
           "silent_max_ms=%.2f plan_first_ms=%.2f plan_last_ms=%.2f plan_max_ms=%.2f "
           "plan_bytes=%.0f plan_msg_max=%lld "
           "false_pos=%d aborts=%d tx_blocked=%d end_s=%.3f kills=%d silents=%d commits=%d "
           "fails=%d\n",
           N, opt_s, W, startup, cpu, gen_cpu, rss_steady, rss_end, hwm, p50 * 1e3, p99 * 1e3,
           pmax * 1e3, gap_steady * 1e3, gap_all * 1e3, (hb1 - hb0) / dt, hb_expected(W),
           late_steady * 1e3, cmf50 * 1e3, cml50 * 1e3, cmlmax * 1e3, mttd50 * 1e3,
           mttdmax * 1e3, fan50 * 1e3, fanmax * 1e3, sil50 * 1e3, silmax * 1e3, pf50 * 1e3,
           pl50 * 1e3, plmax * 1e3, pb50, (long long)atomic_load(&plan_msg_max), fp,
           atomic_load(&aborts), atomic_load(&tx_blocked), end_s,
           nk, ns, ncm, fails);
    fflush(stdout);
    if (!opt_keep && !opt_dir[0]) {
        char cmdl[800];
        snprintf(cmdl, sizeof cmdl, "rm -rf '%s'", dir);
        if (system(cmdl) != 0) fprintf(stderr, "coord_load: could not remove %s\n", dir);
    }
    int complete = nk == opt_kills && ns == opt_silents && ncm == opt_commits;
    free(cm_first);
    free(cm_last);
    free(mttd);
    free(fan);
    free(plan_f);
    free(plan_l);
    free(plan_b);
    free(sil);
    for (int w = 1; w < W; w++) {
        if (agents[w].fd >= 0) close(agents[w].fd);
        free(agents[w].rx);
        free(agents[w].tx);
    }
    for (int i = 0; i < opt_threads; i++) {
        close(workers[i].ep);
        close(workers[i].evfd);
        free(workers[i].a);
        free(workers[i].buf);
        pthread_mutex_destroy(&workers[i].lock);
    }
    free(workers);
    free(agents);
    return fails == 0 && fp == 0 && atomic_load(&aborts) == 0 && complete ? 0 : 1;
}

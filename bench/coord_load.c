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
 *      (the report is written in between); the coordinator's peak RSS over its whole life
 *      (wait4's ru_maxrss), how far it rose above the peak before the last BYEs (the final
 *      ledgers and the report: issue 22, the report at 131,072 ranks) and the report's size.
 *
 * False positives: a connection the coordinator closed, or a FAILURE or PLAN, that no trial
 * caused. The generator's own lag (heartbeats sent late) is printed too: at the largest sizes
 * on a small machine the generator, not the coordinator, may be what falls behind.
 *
 * Output: human lines, then one "RESULT key=value ..." line (bench/coord_scale.py reads it).
 * Exit status 0 when the run completed with no false positive and every trial observed, 1
 * otherwise, 2 on a usage or setup error. Each of its two processes needs RLIMIT_NOFILE for about
 * N + S + 512 files, with --per-host 4 per simulated host + 512 (the host agent's connection,
 * its relay listener, both ends of its connection to its relay; 1 per host with --no-relays):
 * it raises the limit (beyond the hard limit with CAP_SYS_RESOURCE).
 *
 * Usage: coord_load [-n trainers] [-s spares] [--steady s] [--kills k] [--silents q]
 *                   [--commits c] [--threads t] [--hb-ms ms] [--timeout-ms ms] [--step-ms ms]
 *                   [--sdc-every k] [--dir path] [--seed x] [--keep]
 *                   [--per-host k [--host-kills h] [--host-silents g] [--no-relays]
 *                    [--relay-group g] [--kill-relays]] [--behind k] [--verbose]
 * --behind k: at each FAILURE the trainers of logical rank % k == 1 report one step fewer than
 * they have done, as survivors that had not finished the step in flight when the failure came
 * (a peers plan with about 1/k of the survivors behind its resume step: the PLAN's worst case
 * before FTRT__PROTO_PLAN 2, issue 22).
 * With --per-host the simulated host agents take part in the coordinator's relay groups
 * (runtime/coordinator/fanout.c) as runtime/hostrelay.c does: each listens and says RELAY_AT, a
 * member connects to its relay on RELAY_VIA, a relay sends a FANOUT's parts on to its members;
 * --no-relays offers none (every fan-out one MULTI per host, the coordinator unchanged),
 * --relay-group g forces groups of g host agents (the knob FTRT_TEST_RELAY_GROUP), and
 * --kill-relays makes the host trials kill or cut off relays (their members fall back to direct
 * fan-outs and are caught up).
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
#include "base/knobs.h"
#include "base/log.h"
#include "base/net.h"
#include "base/proto.h"
#include "checkpoint/shard.h"
#include "runtime/coordinator/coordinator.h"

/* ---- settings ------------------------------------------------------------------------------ */

static int opt_n = 256, opt_s = 8, opt_kills = 5, opt_silents = 3, opt_commits = 3;
static int opt_threads = 2, opt_hb_ms = 100, opt_timeout_ms = 1000, opt_step_ms = 500;
static int opt_sdc_every = 10, opt_keep = 0, opt_verbose = 0;
static int opt_per_host = 0;               /* > 0: host agents, this many ranks per host */
static int opt_no_relays = 0;              /* --no-relays: the host agents offer no relay */
static int opt_relay_group = 0;            /* --relay-group G: FTRT_TEST_RELAY_GROUP's knob */
static int opt_kill_relays = 0;            /* --kill-relays: host trials take relays' hosts */
static int opt_behind = 0;                 /* --behind K: survivors of logical rank % K == 1
                                              report a step fewer (a failure mid-step) */
static int opt_host_kills = 0, opt_host_silents = 0;
static double opt_steady = 10.0;
static unsigned opt_seed = 1;
static char opt_dir[512];

/* ---- agents -------------------------------------------------------------------------------- */

enum { ST_ALIVE, ST_KILLED, ST_SILENT, ST_GONE };

typedef struct agent {
    int fd, w;
    int host;               /* --per-host: its simulated host (index into hosts), else -1 */
    int lost_sent;          /* --per-host: its host agent reported it (RANK_LOST) */
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

/* --per-host: a simulated host agent (runtime/hostagent.c): one connection for the ranks
 * first_w .. first_w + n - 1, a HOST_BEAT per period with their heartbeats, their other
 * messages relayed (RELAY), the coordinator's RELAY and MULTI delivered to them, RANK_LOST when
 * one of them dies (a kill trial: what the real agent sends when the rank's socket closes) or
 * falls silent (a silence trial, after the heartbeat timeout). */
typedef struct relpeer { /* --per-host, relay groups: a member connected to this relay */
    int fd, w;             /* w: its agent's world rank once it said PEER_HELLO */
    uint8_t buf[128];
    size_t used;
} relpeer;

typedef struct hostsim {
    int fd, h, first_w, n;
    int lfd;                /* relay groups: its listener for its group's host agents, or -1 */
    int via_fd;             /* its connection to its relay, or -1 */
    uint8_t *vrx;           /* what came from the relay */
    size_t vrx_used, vrx_cap;
    relpeer *peer;          /* as a relay: its members */
    int npeer;
    _Atomic int is_relay;   /* a member said PEER_HELLO to it */
    _Atomic int state;      /* ST_ALIVE, ST_KILLED (connection closed), ST_SILENT, ST_GONE */
    double next_hb, last_send, last_rx;
    uint8_t *rx;
    size_t rx_used, rx_cap;
    uint8_t *tx;
    size_t tx_used, tx_cap;
} hostsim;

static hostsim *hosts;
static int nhosts;

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

/* The kernel's receive time (monotonic s) of the bytes being parsed by this thread, 0 when
 * unknown, and the earliest one of a trial's FAILUREs (SO_TIMESTAMPNS: when the coordinator's
 * message reached the survivor's socket, before the generator's thread read it). */
static _Thread_local double rx_kts;
static double failure_kts;

static void ev_reset(void)
{
    pthread_mutex_lock(&ev_lock);
    failure_kts = 0;
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

enum { CMD_KILL = 1, CMD_SILENCE, CMD_SHARD, CMD_BYE, CMD_KILL_HOST, CMD_SILENCE_HOST };
typedef struct cmd {
    int op, w;
    int64_t arg;
} cmd;

typedef struct worker {
    int id, ep, evfd;
    agent **a; /* its agents, in heartbeat phase order (direct) */
    hostsim **hs; /* --per-host: its hosts, in heartbeat phase order */
    int na;       /* its agents */
    int n, cursor; /* its heartbeat units (agents, or hosts with --per-host) */
    pthread_t th;
    _Atomic int tid;          /* its thread id (schedstat) */
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
    void *beat;               /* --per-host: one HOST_BEAT being built */
    size_t beat_cap;
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

/* Makes room for need bytes in the worker's buffer. */
static void room(worker *k, size_t need)
{
    if (need <= k->cap) return;
    size_t nc = k->cap ? k->cap : 4096;
    while (nc < need) nc *= 2;
    uint8_t *b = realloc(k->buf, nc);
    if (!b) abort();
    k->buf = b;
    k->cap = nc;
}

/* Appends one framed message to the worker's buffer at *off; with relay_w > 0 wrapped in a
 * RELAY from that rank, as a host agent forwards it (--per-host). */
static void put_r(worker *k, size_t *off, int relay_w, uint32_t type, const void *p, uint32_t len)
{
    size_t pre = relay_w > 0 ? sizeof(ftrt__msghdr) + 8 : 0;
    size_t need = *off + pre + sizeof(ftrt__msghdr) + len;
    room(k, need);
    if (pre) {
#ifdef FTRT__PROTO_HOST_AGENTS
        ftrt__msghdr rh = {FTRT__MAGIC, FTRT__MSG_RELAY, (uint32_t)(8 + sizeof rh + len), 0};
        int32_t rw[2] = {relay_w, 0};
        memcpy(k->buf + *off, &rh, sizeof rh);
        memcpy(k->buf + *off + sizeof rh, rw, sizeof rw);
#else
        abort(); /* (--per-host is refused without host agents) */
#endif
    }
    ftrt__msghdr h = {FTRT__MAGIC, type, len, 0};
    memcpy(k->buf + *off + pre, &h, sizeof h);
    if (len) memcpy(k->buf + *off + pre + sizeof h, p, len);
    *off = need;
}

static void put(worker *k, size_t *off, uint32_t type, const void *p, uint32_t len)
{
    put_r(k, off, 0, type, p, len);
}

/* The rank a message of agent a is relayed for (--per-host), else 0. */
static int relay_of(const agent *a) { return a->host >= 0 ? a->w : 0; }

/* Sends len bytes at p on fd, keeping order: what the socket does not take now is kept in
 * *tx and sent when it is writable again (epoll key id). */
static void flush_to(worker *k, int fd, uint32_t id, uint8_t **tx, size_t *used, size_t *cap,
                     const uint8_t *p, size_t len)
{
    if (fd < 0) return;
    if (*used == 0) {
        ssize_t s = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (s < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return; /* EOF is read later */
        if (s < 0) s = 0;
        p += s;
        len -= (size_t)s;
        if (len == 0) return;
        atomic_fetch_add(&tx_blocked, 1);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = id};
        epoll_ctl(k->ep, EPOLL_CTL_MOD, fd, &ev);
    }
    if (*used + len > *cap) {
        size_t nc = *cap ? *cap : 4096;
        while (nc < *used + len) nc *= 2;
        uint8_t *b = realloc(*tx, nc);
        if (!b) abort();
        *tx = b;
        *cap = nc;
    }
    memcpy(*tx + *used, p, len);
    *used += len;
}

/* The socket fd (epoll key id) is writable again: sends what waited in tx. */
static void drain_tx(worker *k, int fd, uint32_t id, uint8_t *tx, size_t *used)
{
    ssize_t n = send(fd, tx, *used, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
        memmove(tx, tx + n, *used - (size_t)n);
        *used -= (size_t)n;
    }
    if (*used == 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = id};
        epoll_ctl(k->ep, EPOLL_CTL_MOD, fd, &ev);
    }
}

/* The epoll key of host h's connection (agents use their world rank; 0 is the command queue). */
#define HOST_ID(h) (0x80000000u | (uint32_t)(h))

/* Sends what is buffered for agent a (through its host agent's connection with --per-host). */
static void flush(worker *k, agent *a, const uint8_t *p, size_t len)
{
    if (a->host >= 0) {
        hostsim *hs = &hosts[a->host];
        flush_to(k, hs->fd, HOST_ID(hs->h), &hs->tx, &hs->tx_used, &hs->tx_cap, p, len);
        hs->last_send = ftrt__now();
        return;
    }
    flush_to(k, a->fd, (uint32_t)a->w, &a->tx, &a->tx_used, &a->tx_cap, p, len);
}

static void send_one(worker *k, agent *a, uint32_t type, const void *p, uint32_t len)
{
    size_t off = 0;
    put_r(k, &off, relay_of(a), type, p, len);
    flush(k, a, k->buf, off);
    a->last_send = ftrt__now();
}

/* The heartbeat period's messages of agent a: HEARTBEAT, LEDGER, maybe FINGERPRINT. */
/* Agent a's HEARTBEAT now. */
static ftrt__heartbeat hb_of(const agent *a, double now)
{
    int64_t steps = steps_now(a, now);
    return (ftrt__heartbeat){.steps_done = steps,
                             .waits = 2 * (steps - a->epoch_step0 > 0 ? steps - a->epoch_step0 : 0),
                             .kept_s = (double)steps * step_s,
                             .compute_s = (double)steps * step_s * 0.8,
                             .epoch = a->epoch};
}

/* The heartbeat period's messages of agent a: HEARTBEAT, LEDGER, maybe FINGERPRINT, each its
 * own send(). With --per-host (a->host >= 0) they are appended at *hoff for its host agent's one
 * write instead, without the HEARTBEAT, which the host's HOST_BEAT carries. */
static void heartbeat(worker *k, agent *a, double now, int final, size_t *hoff)
{
    int hosted = a->host >= 0;
    size_t off0 = 0, *off = hosted ? hoff : &off0;
    int64_t steps = steps_now(a, now);
    if (!hosted) {
        ftrt__heartbeat hb = hb_of(a, now);
        put(k, off, FTRT__MSG_HEARTBEAT, &hb, sizeof hb);
        /* A real agent sends the HEARTBEAT and the LEDGER in two send()s (agent.c,
         * timeline.c): two segments, which the coordinator may read in one recv() or two. */
        flush(k, a, k->buf, *off);
        *off = 0;
    }
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
    put_r(k, off, relay_of(a), FTRT__MSG_LEDGER, m, (uint32_t)ftrt__ledger_msg_size(n));
fingerprint:
    if (a->role == FTRT__ROLE_TRAINER && opt_sdc_every > 0 && !a->recovering) {
        int64_t s = steps / opt_sdc_every * opt_sdc_every;
        if (s > 0 && s > a->fp_step) {
            ftrt__fingerprint_msg fp = {.step = s, .fp = 0x5eedf00dULL, .seconds = 1e-5,
                                        .epoch = a->epoch, .nregions = 1};
            if (!hosted) { /* (the application thread sends it, separately) */
                flush(k, a, k->buf, *off);
                *off = 0;
            }
            put_r(k, off, relay_of(a), FTRT__MSG_FINGERPRINT, &fp, sizeof fp);
            a->fp_step = s;
        }
    }
    if (!hosted) flush(k, a, k->buf, *off);
    a->last_send = now;
}

/* Heartbeats per second the coordinator asked for: from the W - 1 ranks (its WELCOME's period
 * for W connections), or with --per-host one HOST_BEAT per host per period. */
static double hb_expected(int W)
{
    int links = opt_per_host > 0 ? nhosts + 1 : W;
    return (opt_per_host > 0 ? nhosts : W - 1) * 1000.0 /
           ftrt__heartbeat_period_ms(opt_hb_ms, opt_timeout_ms, links);
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
        if (ours) {
            ev_note(EV_FAILURE, now);
            pthread_mutex_lock(&ev_lock);
            if (rx_kts > 0 && (failure_kts == 0 || rx_kts < failure_kts)) failure_kts = rx_kts;
            pthread_mutex_unlock(&ev_lock);
        }
        else atomic_fetch_add(&unexpected_failure, 1);
        if (fm.epoch > a->epoch) a->epoch = fm.epoch;
        if (a->role == FTRT__ROLE_TRAINER && !a->recovering) {
            a->frozen = steps_now(a, now);
            a->recovering = 1;
        }
        ftrt__report rep = {.steps_done = a->frozen, .epoch = fm.epoch, .has_sharded = 0,
                            .own_step = -1, .held_step = -1, .held_of = -1}; /* no replicas */
        int lg = atomic_load(&a->logical);
        if (opt_behind > 1 && lg % opt_behind == 1 && rep.steps_done > 0)
            rep.steps_done--; /* --behind: it had not finished the step the others had */
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
#ifdef FTRT__PROTO_RESUMED_PHASES
        ftrt__resumed_msg em = {.epoch = pl.epoch}; /* (phases: none, a simulated rank) */
#else
        ftrt__epoch_msg em = {.epoch = pl.epoch};
#endif
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

/* recv() that also sets rx_kts from the socket's SO_TIMESTAMPNS (the receive time of the last
 * segment read, CLOCK_REALTIME, taken to the monotonic clock). */
static ssize_t recv_ts(int fd, void *buf, size_t len)
{
    char ctl[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                        .msg_controllen = sizeof ctl};
    ssize_t got = recvmsg(fd, &mh, MSG_DONTWAIT);
    rx_kts = 0;
    for (struct cmsghdr *c = got > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            rx_kts = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - (ftrt__wallclock() - ftrt__now());
        }
    return got;
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
    ssize_t got = recv_ts(a->fd, a->rx + a->rx_used, a->rx_cap - a->rx_used);
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
#define LIS_ID(h) (0x40000000u | (uint32_t)(h))
#define VIA_ID(h) (0x20000000u | (uint32_t)(h))
#define PEER_ID(h, i) (0x10000000u | (uint32_t)(h) << 8 | (uint32_t)(i))

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
static int relay_event(worker *k, uint32_t id, double now)
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
static int relay_listen(int fd, int u)
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

static void host_readable(worker *k, hostsim *hs, double now)
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
static void host_beat(worker *k, hostsim *hs, double now)
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
static int host_cmd(worker *k, const cmd *c)
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

static void run_cmd(worker *k, const cmd *c)
{
    double now = ftrt__now();
#ifdef FTRT__PROTO_HOST_AGENTS
    if (c->w > 0 && host_cmd(k, c)) return;
#endif
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
    for (int i = 0; i < k->na; i++) {
        agent *a = k->a[i];
        if (atomic_load(&a->state) != ST_ALIVE || a->role != FTRT__ROLE_TRAINER) continue;
        if (c->op == CMD_SHARD) {
            ftrt__ckpt_msg cm = {.step = c->arg, .epoch = a->epoch, .result = 0};
            send_one(k, a, FTRT__MSG_SHARD_DONE, &cm, sizeof cm);
            ev_note(EV_SHARD_SENT, ftrt__now());
        } else if (c->op == CMD_BYE) {
            size_t off = 0;
            heartbeat(k, a, now, 1, &off);
            if (off) flush(k, a, k->buf, off);
            int64_t steps = steps_now(a, now);
            ftrt__bye b = {.steps_done = steps, .kept_s = (double)steps * step_s};
            send_one(k, a, FTRT__MSG_BYE, &b, sizeof b);
            ev_note(EV_BYE_SENT, ftrt__now());
        }
    }
}

/* The next unit's (agent's, or host's with --per-host) due time. */
static double next_due(const worker *k)
{
    if (!k->n) return ftrt__now() + 0.02;
    return opt_per_host ? k->hs[k->cursor]->next_hb : k->a[k->cursor]->next_hb;
}

/* Heartbeats due: the units are in phase order, each due once per period; like a real agent
 * thread, an agent heartbeats from its hello on (before its WELCOME). Returns the ms epoll may
 * wait. */
static int beats_due(worker *k, double now)
{
    for (int guard = 0; guard < k->n; guard++) {
        double *next = opt_per_host ? &k->hs[k->cursor]->next_hb : &k->a[k->cursor]->next_hb;
        if (*next > now) break;
        double late = now - *next;
        agent *a = opt_per_host ? &agents[k->hs[k->cursor]->first_w] : k->a[k->cursor];
        int live = opt_per_host ? atomic_load(&k->hs[k->cursor]->state) == ST_ALIVE &&
                                      k->hs[k->cursor]->fd >= 0
                                : atomic_load(&a->state) == ST_ALIVE && a->fd >= 0;
        if (atomic_load(&a->up) && live) {
            if (late > k->hb_late_max && atomic_load(&k->measure_gaps)) k->hb_late_max = late;
#ifdef FTRT__PROTO_HOST_AGENTS
            if (opt_per_host) host_beat(k, k->hs[k->cursor], now);
            else
#endif
                heartbeat(k, a, now, 0, NULL);
            atomic_fetch_add(&k->hb_sent, 1);
        }
        double p = a->hb_s > 0 ? a->hb_s : hb_s;
        *next += p;
        if (*next < now) *next = now + p * 0.5; /* fell behind: catch up */
        k->cursor = (k->cursor + 1) % k->n;
    }
    double d = next_due(k) - ftrt__now();
    int ms = d <= 0 ? 0 : (int)(d * 1000.0) + 1;
    return ms > 20 ? 20 : ms;
}

static void *worker_main(void *arg)
{
    worker *k = arg;
    atomic_store(&k->tid, (int)gettid());
    struct epoll_event evs[256];
    while (!atomic_load(&k->stop)) {
        double now = ftrt__now();
        int ms = beats_due(k, now);
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
#ifdef FTRT__PROTO_RELAYS
            if (!(id & 0x80000000u) && relay_event(k, id, now)) continue;
#endif
#ifdef FTRT__PROTO_HOST_AGENTS
            if (id & 0x80000000u) {
                hostsim *hs = &hosts[id & 0x7fffffffu];
                if (hs->fd < 0) continue;
                if ((evs[i].events & EPOLLOUT) && hs->tx_used)
                    drain_tx(k, hs->fd, id, hs->tx, &hs->tx_used);
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) host_readable(k, hs, now);
                continue;
            }
#endif
            agent *a = &agents[id];
            if (a->fd < 0) continue;
            if ((evs[i].events & EPOLLOUT) && a->tx_used) drain_tx(k, a->fd, id, a->tx, &a->tx_used);
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(k, a, now);
        }
    }
    return NULL;
}

/* The simulated host of world rank w with --per-host (trainers fill the first hosts, spares
 * their own), else -1. */
static int host_of(int w)
{
    if (opt_per_host <= 0) return -1;
    int th = (N + opt_per_host - 1) / opt_per_host;
    return w <= N ? (w - 1) / opt_per_host : th + (w - 1 - N) / opt_per_host;
}

/* The worker thread that carries world rank w. */
static int worker_of(int w)
{
    return opt_per_host > 0 ? host_of(w) % opt_threads : (w - 1) % opt_threads;
}

static void post(int op, int w, int64_t arg)
{
    for (int i = 0; i < opt_threads; i++) {
        worker *k = &workers[i];
        if (w > 0 && worker_of(w) != i) continue;
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

/* Time on a CPU and time runnable but waiting for one (the run queue) of thread tid of process
 * pid, seconds (/proc/<pid>/task/<tid>/schedstat). Returns 0, or -1 when unreadable. */
static int schedstat(int pid, int tid, double *run, double *wait)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", pid, tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long r = 0, w = 0;
    int ok = fscanf(f, "%llu %llu", &r, &w) == 2;
    fclose(f);
    *run = r * 1e-9;
    *wait = w * 1e-9;
    return ok ? 0 : -1;
}

/* The coordinator's loop thread's and the workers' run and wait times summed (see schedstat):
 * c_* of the coordinator's main thread, w_wait_max of the worker that waited longest. */
typedef struct sched_snap {
    double c_run, c_wait, w_wait[64];
} sched_snap;

static void sched_take(sched_snap *s)
{
    memset(s, 0, sizeof *s);
    schedstat(coord_pid, coord_pid, &s->c_run, &s->c_wait);
    for (int i = 0; i < opt_threads && i < 64; i++) {
        double r;
        schedstat(getpid(), atomic_load(&workers[i].tid), &r, &s->w_wait[i]);
    }
}

/* The largest run-queue wait of a worker between a and b, seconds. */
static double sched_worker_wait(const sched_snap *a, const sched_snap *b)
{
    double m = 0;
    for (int i = 0; i < opt_threads && i < 64; i++)
        if (b->w_wait[i] - a->w_wait[i] > m) m = b->w_wait[i] - a->w_wait[i];
    return m;
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
    } m = {{FTRT__MAGIC, FTRT__MSG_HELLO, sizeof(ftrt__hello), 0}, {.secret = the_secret ^ 1,
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
            "                  [--step-ms ms] [--sdc-every k] [--dir path] [--seed x] [--keep]\n"
            "                  [--per-host k [--host-kills h] [--host-silents g] [--no-relays]\n"
            "                  [--relay-group g] [--kill-relays]] [--behind k]\n");
}

static int parse(int argc, char **argv)
{
    static const struct option lo[] = {
        {"steady", 1, 0, 'd'},     {"kills", 1, 0, 'k'},      {"silents", 1, 0, 'q'},
        {"commits", 1, 0, 'c'},    {"threads", 1, 0, 't'},    {"hb-ms", 1, 0, 'H'},
        {"timeout-ms", 1, 0, 'T'}, {"step-ms", 1, 0, 'S'},    {"sdc-every", 1, 0, 'F'},
        {"dir", 1, 0, 'D'},        {"seed", 1, 0, 'r'},       {"keep", 0, 0, 'K'},
        {"per-host", 1, 0, 'P'},   {"host-kills", 1, 0, 'X'}, {"host-silents", 1, 0, 'Y'},
        {"verbose", 0, 0, 'V'},    {"help", 0, 0, 'h'},       {"no-relays", 0, 0, 'R'},
        {"relay-group", 1, 0, 'G'}, {"kill-relays", 0, 0, 'L'}, {"behind", 1, 0, 'B'},
        {0, 0, 0, 0}};
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
        case 'P': opt_per_host = atoi(optarg); break;
        case 'X': opt_host_kills = atoi(optarg); break;
        case 'Y': opt_host_silents = atoi(optarg); break;
        case 'V': opt_verbose = 1; break;
        case 'R': opt_no_relays = 1; break;
        case 'G': opt_relay_group = atoi(optarg); break;
        case 'L': opt_kill_relays = 1; break;
        case 'B': opt_behind = atoi(optarg); break;
        default: usage(); return -1;
        }
    }
    int host_trials = opt_per_host > 0 ? opt_host_kills + opt_host_silents : 0;
    if (opt_n < 2 || opt_s < opt_kills + opt_silents + host_trials * opt_per_host ||
        opt_threads < 1 || opt_threads > 64 || opt_hb_ms < 1 || opt_timeout_ms <= opt_hb_ms ||
        opt_step_ms < 1 || opt_steady < 0 || opt_per_host < 0 || opt_behind == 1 ||
        opt_behind < 0 ||
        (opt_per_host > 0 && opt_n < 2 * opt_per_host)) {
        fprintf(stderr, "coord_load: need n >= 2 (2 hosts' worth with --per-host), spares >= "
                        "kills + silents + per-host x (host-kills + host-silents), 1..64 threads, "
                        "timeout > heartbeat, --behind 0 or >= 2\n");
        return -1;
    }
#ifndef FTRT__PROTO_HOST_AGENTS
    if (opt_per_host > 0) {
        fprintf(stderr, "coord_load: --per-host: this build's protocol has no host agents\n");
        return -1;
    }
#endif
    return 0;
}

/* A trainer that is alive (with --per-host not the one its host agent's process is: that is
 * a host agent's loss, not a rank's), at random; -1 when none is. */
static int pick_rank(void)
{
    for (int tries = 0; tries < 100000; tries++) {
        int w = 1 + rand() % (W - 1);
        if (atomic_load(&agents[w].role) == FTRT__ROLE_TRAINER &&
            atomic_load(&agents[w].state) == ST_ALIVE &&
            (agents[w].host < 0 || hosts[agents[w].host].first_w != w))
            return w;
    }
    return -1;
}

/* The first rank of a host whose ranks are all live trainers, at random; -1 when none is. */
static int pick_host(void)
{
    for (int tries = 0; tries < 100000 && nhosts > 0; tries++) {
        hostsim *hs = &hosts[rand() % nhosts];
        int ok = atomic_load(&hs->state) == ST_ALIVE && (!opt_kill_relays || atomic_load(&hs->is_relay));
        for (int i = 0; i < hs->n && ok; i++) {
            agent *a = &agents[hs->first_w + i];
            ok = atomic_load(&a->role) == FTRT__ROLE_TRAINER && atomic_load(&a->state) == ST_ALIVE;
        }
        if (ok) return hs->first_w;
    }
    return -1;
}

/* The hello of connection u: world rank u + 1's HELLO; with --per-host, host u's HOST_HELLO
 * (from its first rank's process) and the HELLO of each of its ranks, relayed. Returns 0 or -1. */
static int say_hello(int fd, int u)
{
    ftrt__hello h = {.secret = the_secret, .pid = 0};
    if (opt_per_host <= 0) {
        int w = u + 1;
        h.world_rank = w;
        if (w <= N) snprintf(h.host, sizeof h.host, "sim-%d", (w - 1) / 8);
        else snprintf(h.host, sizeof h.host, "spare-%d", w - N);
        return ftrt__msg_send(fd, FTRT__MSG_HELLO, &h, sizeof h) ? -1 : 0;
    }
#ifdef FTRT__PROTO_HOST_AGENTS
    hostsim *hs = &hosts[u];
    snprintf(h.host, sizeof h.host, "host-%d", u);
    h.world_rank = hs->first_w;
    if (ftrt__msg_send(fd, FTRT__MSG_HOST_HELLO, &h, sizeof h)) return -1;
    for (int i = 0; i < hs->n; i++) {
        ftrt__relay pre = {.world_rank = hs->first_w + i};
        h.world_rank = hs->first_w + i;
        if (ftrt__msg_send2(fd, FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_HELLO, &h, sizeof h))
            return -1;
    }
    return 0;
#else
    return -1;
#endif
}

/* Waits up to timeout_s for the status file at path to say the job is running (the next trial
 * must not find a recovery in flight: a failure then aborts the job). Returns 1 once it does,
 * 0 on timeout or a job that ended. */
static int status_running(const char *path, double timeout_s)
{
    double deadline = ftrt__now() + timeout_s;
    do {
        char head[256] = "";
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(head, 1, sizeof head - 1, f);
            head[n] = 0;
            fclose(f);
        }
        if (strstr(head, "\"job\": \"running\"")) return 1;
        if (strstr(head, "\"job\": \"failed\"") || strstr(head, "\"job\": \"finished\"")) return 0;
        usleep(20000);
    } while (ftrt__now() < deadline);
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

    /* Each process (this one, the coordinator's) holds about W connections, or 4 per host (1
     * without relays: see the file's header). */
    struct rlimit cur;
    getrlimit(RLIMIT_NOFILE, &cur);
    rlim_t need = opt_per_host > 0 ? (rlim_t)(host_of(W - 1) + 1) * (opt_no_relays ? 1 : 4) + 64
                                   : (rlim_t)W + 64, want = need + 448;
    if (cur.rlim_cur < want) {
        struct rlimit rl = {want, cur.rlim_max > want ? cur.rlim_max : want};
        if (setrlimit(RLIMIT_NOFILE, &rl)) { /* without CAP_SYS_RESOURCE: up to the hard limit */
            rl.rlim_cur = rl.rlim_max = cur.rlim_max;
            if (cur.rlim_max < need || setrlimit(RLIMIT_NOFILE, &rl)) {
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
#ifdef FTRT__PROTO_RELAYS
    ftrt__knobs.relay_group = opt_relay_group; /* (the coordinator's, in the child) */
#endif
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
                               .port = port,
#ifdef FTRT__PROTO_HOST_AGENTS
                               .mark_fd = -1
#endif
        };
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
        k->a = calloc((size_t)W, sizeof *k->a);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
        epoll_ctl(k->ep, EPOLL_CTL_ADD, k->evfd, &ev);
    }
    nhosts = opt_per_host > 0 ? host_of(W - 1) + 1 : 0;
    hosts = calloc((size_t)(nhosts ? nhosts : 1), sizeof *hosts);
    if (!hosts) return 2;
    for (int i = 0; i < opt_threads; i++)
        workers[i].hs = calloc((size_t)(nhosts / opt_threads + 2), sizeof(hostsim *));
    for (int w = 1; w < W; w++) {
        agent *a = &agents[w];
        a->fd = -1;
        a->w = w;
        a->host = host_of(w);
        a->role = FTRT__ROLE_SPARE;
        a->logical = -1;
        worker *k = &workers[worker_of(w)];
        k->a[k->na++] = a;
        if (a->host < 0) {
            k->a[k->n++] = a; /* (the same slot: units are the agents) */
            continue;
        }
        hostsim *hs = &hosts[a->host];
        if (hs->n++ == 0) {
            hs->fd = -1;
            hs->h = a->host;
            hs->first_w = w;
            k->hs[k->n++] = hs;
        }
    }
    t = ftrt__now();
    double t_connect0 = t;
    for (int i = 0; i < opt_threads; i++) { /* heartbeat phases spread over the period */
        worker *k = &workers[i];
        for (int j = 0; j < k->n; j++) {
            double *next = opt_per_host ? &k->hs[j]->next_hb : &k->a[j]->next_hb;
            *next = t + hb_s * (1.0 + (double)j / k->n);
            if (opt_per_host) k->hs[j]->last_rx = t;
            else k->a[j]->last_rx = t;
        }
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < opt_threads; i++) pthread_create(&workers[i].th, NULL, worker_main, &workers[i]);
    int units = opt_per_host ? nhosts : W - 1;
    for (int u = 0; u < units; u++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) ||
            setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) ||
            connect(fd, (struct sockaddr *)&sa, sizeof sa) || say_hello(fd, u)
#ifdef FTRT__PROTO_RELAYS
            || (opt_per_host && relay_listen(fd, u))
#endif
        ) {
            fprintf(stderr, "coord_load: connect of %s %d failed: %s\n",
                    opt_per_host ? "host" : "world rank", opt_per_host ? u : u + 1, strerror(errno));
            kill(coord_pid, SIGKILL);
            return 2;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int w0 = opt_per_host ? hosts[u].first_w : u + 1;
        worker *k = &workers[worker_of(w0)];
        struct epoll_event ev = {.events = EPOLLIN,
                                 .data.u32 = opt_per_host ? HOST_ID(u) : (uint32_t)w0};
        if (opt_per_host) hosts[u].fd = fd;
        else agents[w0].fd = fd;
        epoll_ctl(k->ep, EPOLL_CTL_ADD, fd, &ev);
#ifdef FTRT__PROTO_RELAYS
        if (opt_per_host && hosts[u].lfd >= 0) {
            struct epoll_event lev = {.events = EPOLLIN, .data.u32 = LIS_ID(u)};
            epoll_ctl(k->ep, EPOLL_CTL_ADD, hosts[u].lfd, &lev);
        }
#endif
        for (int i = 0; i < (opt_per_host ? hosts[u].n : 1); i++)
            atomic_store(&agents[w0 + i].up, 1);
        int w1 = w0 + (opt_per_host ? hosts[u].n : 1) - 1; /* (every 4,096 ranks) */
        if (w1 / 4096 != (w0 - 1) / 4096)
            fprintf(stderr, "coord_load: %d connected after %.2f s\n", w1, ftrt__now() - t_connect0);
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
        for (int j = 0; j < k->na; j++) {
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
    sched_snap ss0, ss1;
    sched_take(&ss0);
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
    sched_take(&ss1);
    double runq = (ss1.c_wait - ss0.c_wait) / dt; /* the loop thread's wait for a CPU, s/s */
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
           "%.1f ms; generator CPU %.2f cores; the coordinator's loop waited for a CPU %.1f ms a "
           "second\n",
           dt, cpu, rss_steady, p50 * 1e3, p99 * 1e3, pmax * 1e3, nprobe, probe_fail,
           gap_steady * 1e3, (hb1 - hb0) / dt, hb_expected(W), late_steady * 1e3, gen_cpu, runq * 1e3);
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
    int nrank_trials = opt_kills + opt_silents;
    int ntrial = nrank_trials + (opt_per_host > 0 ? opt_host_kills + opt_host_silents : 0);
    double *hk_first = calloc((size_t)ntrial + 1, sizeof(double));
    double *hk_plan = calloc((size_t)ntrial + 1, sizeof(double));
    double *hq_first = calloc((size_t)ntrial + 1, sizeof(double));
    double *hq_plan = calloc((size_t)ntrial + 1, sizeof(double));
    int nhk = 0, nhq = 0;
    double *mttd = calloc((size_t)ntrial + 1, sizeof(double));
    double *fan = calloc((size_t)ntrial + 1, sizeof(double));
    double *plan_f = calloc((size_t)ntrial + 1, sizeof(double));
    double *plan_l = calloc((size_t)ntrial + 1, sizeof(double));
    double *sil = calloc((size_t)ntrial + 1, sizeof(double));
    double *plan_b = calloc((size_t)ntrial + 1, sizeof(double));
    int nk = 0, ns = 0, np = 0, epoch = 0;
    for (int tr = 0; tr < ntrial; tr++) {
        int silent = tr >= opt_kills && tr < nrank_trials;
        int host_trial = tr >= nrank_trials, host_silent = tr >= nrank_trials + opt_host_kills;
        int victim = host_trial ? pick_host() : pick_rank();
        if (victim < 0) break;
        ev_reset();
        atomic_store(&plan_bytes, 0);
        pthread_mutex_lock(&ev_lock);
        expect_epoch = ++epoch;
        pthread_mutex_unlock(&ev_lock);
        atomic_store(&trial_open, 1);
        sched_snap s0, s1;
        sched_take(&s0);
        post(host_trial ? (host_silent ? CMD_SILENCE_HOST : CMD_KILL_HOST)
                        : (silent ? CMD_SILENCE : CMD_KILL),
             victim, 0);
        /* Survivors: every trainer but the victims gets the FAILURE (the spares do not; a lost
         * host's ranks cannot). */
        int lost = host_trial ? hosts[agents[victim].host].n : 1;
        ev_wait(EV_FAILURE, 1, opt_timeout_ms / 1000.0 + 30);
        sched_take(&s1); /* (up to 0.5 ms after the first FAILURE) */
        int got = ev_wait(EV_FAILURE, N - lost, opt_timeout_ms / 1000.0 + 30);
        double ff, fl;
        ev_get(EV_FAILURE, &ff, &fl);
        pthread_mutex_lock(&ev_lock);
        double fk = failure_kts; /* the first FAILURE in a survivor's socket (0: unknown) */
        pthread_mutex_unlock(&ev_lock);
        pthread_mutex_lock(&ev_lock);
        double t_ref = trial_t_ref; /* close time, or the last message sent */
        pthread_mutex_unlock(&ev_lock);
        if (!got) {
            fprintf(stderr, "coord_load: trial %d: %d of %d FAILURE received\n", tr,
                    ev_get(EV_FAILURE, NULL, NULL), N - lost);
            fails++;
            atomic_store(&trial_open, 0);
            break;
        }
        double t_exp = t_ref + (silent || host_silent ? opt_timeout_ms / 1000.0 : 0);
        if (host_trial) {
            /* (the PLAN goes out once every rank of the host was declared and replaced) */
        } else if (silent) {
            sil[ns++] = ff - t_exp;
        } else {
            mttd[nk] = ff - t_ref;
            fan[nk++] = fl - t_ref;
            if (opt_verbose) /* where the time went: who was waiting for a CPU meanwhile */
                printf("crash %d: world rank %d lost at %.6f (wall), first FAILURE %.2f ms later "
                       "(in a survivor's socket after %.2f ms, read %.2f ms after that); "
                       "meanwhile the coordinator's loop ran %.2f ms and waited for a CPU %.2f "
                       "ms, a generator thread waited for a CPU up to %.2f ms (from the command "
                       "to the first FAILURE seen)\n",
                       nk, victim, t_ref + (ftrt__wallclock() - ftrt__now()), (ff - t_ref) * 1e3,
                       fk > 0 ? (fk - t_ref) * 1e3 : NAN, fk > 0 ? (ff - fk) * 1e3 : NAN,
                       (s1.c_run - s0.c_run) * 1e3, (s1.c_wait - s0.c_wait) * 1e3,
                       sched_worker_wait(&s0, &s1) * 1e3);
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
        if (host_trial && host_silent) {
            hq_first[nhq] = ff - t_exp;
            hq_plan[nhq++] = pf - t_exp;
        } else if (host_trial) {
            hk_first[nhk] = ff - t_exp;
            hk_plan[nhk++] = pf - t_exp;
        } else {
            plan_b[np] = (double)atomic_load(&plan_bytes);
            plan_f[np] = pf - rl;
            plan_l[np++] = pl - rl;
        }
        atomic_store(&trial_open, 0);
        usleep(500000); /* the coordinator takes the RESUMEDs and is back to running */
        if (!status_running(status, 60.0)) { /* (131,072 RESUMEDs take longer on 2 cores) */
            fprintf(stderr, "coord_load: trial %d: the coordinator is not back to running\n", tr);
            fails++;
            break;
        }
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
    double t_bye_wait = ftrt__now(), t_exit = -1, hwm_exit = NAN;
    while (ftrt__now() - t_bye_wait < 120) {
        struct rusage ru; /* its peak RSS over its whole life, the report's writing included */
        pid_t r = wait4(coord_pid, &status_code, WNOHANG, &ru);
        if (r == coord_pid) {
            t_exit = ftrt__now();
            hwm_exit = (double)ru.ru_maxrss / 1024.0;
            break;
        }
        usleep(1000);
    }
    struct stat rst;
    long long report_bytes = stat(report, &rst) == 0 ? (long long)rst.st_size : -1;
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
    double mttd50 = quant(mttd, nk, 0.5), mttd99 = quant(mttd, nk, 0.99),
           mttdmax = nk ? mttd[nk - 1] : NAN;
    double hk50 = quant(hk_first, nhk, 0.5), hkmax = nhk ? hk_first[nhk - 1] : NAN;
    double hkp50 = quant(hk_plan, nhk, 0.5), hkpmax = nhk ? hk_plan[nhk - 1] : NAN;
    double hq50 = quant(hq_first, nhq, 0.5), hqmax = nhq ? hq_first[nhq - 1] : NAN;
    double hqpmax = quant(hq_plan, nhq, 1.0);
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
    if (opt_per_host > 0)
        printf("host lost (%d ranks per host agent; kill: close -> first FAILURE, %d: p50 %.2f ms "
               "max %.2f ms; -> PLAN with every rank of the host replaced p50 %.1f ms max %.1f ms; "
               "cut: timeout expiry -> first FAILURE, %d: p50 %.2f ms max %.2f ms, -> PLAN max "
               "%.1f ms)\n", opt_per_host, nhk, hk50 * 1e3, hkmax * 1e3, hkp50 * 1e3,
               hkpmax * 1e3, nhq, hq50 * 1e3, hqmax * 1e3, hqpmax * 1e3);
    printf("plan (last REPORT -> PLAN, %d): first p50 %.1f ms, last p50 %.1f ms max %.1f ms; "
           "PLAN bytes to all members per recovery p50 %.0f, largest message %lld\n",
           np, pf50 * 1e3, pl50 * 1e3, plmax * 1e3, pb50, (long long)atomic_load(&plan_msg_max));
    printf("false positives %d (connections closed %d, failures %d); aborts %d; sends that "
           "found a full socket %d; coordinator silence at the agents over the whole run max "
           "%.0f ms; RSS at the end %.1f MiB (peak %.1f); end (last BYE -> exit) %.2f s\n",
           fp, atomic_load(&unexpected_eof), atomic_load(&unexpected_failure),
           atomic_load(&aborts), atomic_load(&tx_blocked), gap_all * 1e3, rss_end, hwm, end_s);
    printf("report: peak RSS over the coordinator's life %.1f MiB (%.1f MiB above the peak "
           "before the last BYEs: the final ledgers and the report), report file %lld bytes\n",
           hwm_exit, hwm_exit - hwm, report_bytes);
    printf("RESULT n=%d spares=%d world=%d startup_s=%.3f cpu=%.4f gen_cpu=%.3f rss_mib=%.1f "
           "rss_end_mib=%.1f hwm_mib=%.1f probe_p50_ms=%.3f probe_p99_ms=%.3f probe_max_ms=%.3f "
           "gap_steady_ms=%.1f gap_all_ms=%.1f hb_rate=%.0f hb_expected=%.0f hb_late_ms=%.1f "
           "commit_first_ms=%.2f commit_last_ms=%.2f commit_max_ms=%.2f mttd_p50_ms=%.3f "
           "mttd_max_ms=%.3f fanout_p50_ms=%.2f fanout_max_ms=%.2f silent_p50_ms=%.2f "
           "silent_max_ms=%.2f plan_first_ms=%.2f plan_last_ms=%.2f plan_max_ms=%.2f "
           "plan_bytes=%.0f plan_msg_max=%lld "
           "false_pos=%d aborts=%d tx_blocked=%d end_s=%.3f kills=%d silents=%d commits=%d "
           "fails=%d per_host=%d hosts=%d mttd_p99_ms=%.3f hostkill_p50_ms=%.3f "
           "hostkill_max_ms=%.3f hostkill_plan_p50_ms=%.2f hostkill_plan_max_ms=%.2f "
           "hostcut_p50_ms=%.3f hostcut_max_ms=%.3f hostcut_plan_max_ms=%.2f runq_ms_per_s=%.2f "
           "hwm_exit_mib=%.1f report_rise_mib=%.1f report_bytes=%lld\n",
           N, opt_s, W, startup, cpu, gen_cpu, rss_steady, rss_end, hwm, p50 * 1e3, p99 * 1e3,
           pmax * 1e3, gap_steady * 1e3, gap_all * 1e3, (hb1 - hb0) / dt, hb_expected(W),
           late_steady * 1e3, cmf50 * 1e3, cml50 * 1e3, cmlmax * 1e3, mttd50 * 1e3,
           mttdmax * 1e3, fan50 * 1e3, fanmax * 1e3, sil50 * 1e3, silmax * 1e3, pf50 * 1e3,
           pl50 * 1e3, plmax * 1e3, pb50, (long long)atomic_load(&plan_msg_max), fp,
           atomic_load(&aborts), atomic_load(&tx_blocked), end_s,
           nk, ns, ncm, fails, opt_per_host, nhosts, mttd99 * 1e3, hk50 * 1e3, hkmax * 1e3,
           hkp50 * 1e3, hkpmax * 1e3, hq50 * 1e3, hqmax * 1e3, hqpmax * 1e3, runq * 1e3,
           hwm_exit, hwm_exit - hwm, report_bytes);
    fflush(stdout);
    if (!opt_keep && !opt_dir[0]) {
        char cmdl[800];
        snprintf(cmdl, sizeof cmdl, "rm -rf '%s'", dir);
        if (system(cmdl) != 0) fprintf(stderr, "coord_load: could not remove %s\n", dir);
    }
    int complete = nk == opt_kills && ns == opt_silents && ncm == opt_commits &&
                   (opt_per_host <= 0 || (nhk == opt_host_kills && nhq == opt_host_silents));
    free(cm_first);
    free(cm_last);
    free(mttd);
    free(fan);
    free(plan_f);
    free(plan_l);
    free(plan_b);
    free(sil);
    free(hk_first);
    free(hk_plan);
    free(hq_first);
    free(hq_plan);
    for (int w = 1; w < W; w++) {
        if (agents[w].fd >= 0) close(agents[w].fd);
        free(agents[w].rx);
        free(agents[w].tx);
    }
    for (int h = 0; h < nhosts; h++) {
        if (hosts[h].fd >= 0) close(hosts[h].fd);
        free(hosts[h].rx);
        free(hosts[h].tx);
#ifdef FTRT__PROTO_RELAYS
        if (hosts[h].lfd >= 0) close(hosts[h].lfd);
        if (hosts[h].via_fd >= 0) close(hosts[h].via_fd);
        for (int i = 0; i < hosts[h].npeer; i++)
            if (hosts[h].peer[i].fd >= 0) close(hosts[h].peer[i].fd);
        free(hosts[h].vrx);
        free(hosts[h].peer);
#endif
    }
    free(hosts);
    for (int i = 0; i < opt_threads; i++) {
        close(workers[i].ep);
        close(workers[i].evfd);
        free(workers[i].hs);
        free(workers[i].beat);
        free(workers[i].a);
        free(workers[i].buf);
        pthread_mutex_destroy(&workers[i].lock);
    }
    free(workers);
    free(agents);
    return fails == 0 && fp == 0 && atomic_load(&aborts) == 0 && complete ? 0 : 1;
}

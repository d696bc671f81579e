/*
 * coord_load_gen.c - the simulated ranks of bench/coord_load (see coord_load.c's header for
 * the scenario): each agent speaks ftrt's wire protocol (base/proto.h) as runtime/agent.c and
 * runtime/timeline.c do (HELLO, HEARTBEAT, LEDGER, FINGERPRINT, REPORT, RESUMED, SHARD_DONE,
 * BYE) and takes the coordinator's messages (WELCOME, FAILURE, PLAN, COMMIT, FAREWELL), noting
 * the events a trial watches (ev_*). A few worker threads (epoll) carry the agents, or with
 * --per-host the simulated host agents (coord_load_hosts.c); the main thread posts them
 * commands (a kill, a silence, SHARD_DONE, BYE).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/proto.h"
#include "coord_load.h"

hostsim *hosts;
int nhosts;

pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static double ev_first[EV_N], ev_last[EV_N];
static int ev_count[EV_N];
int expect_epoch;           /* FAILURE/PLAN of this epoch belong to the trial */
int64_t commit_result_bad;  /* COMMIT with a nonzero result */
_Atomic int unexpected_eof, unexpected_failure, aborts, tx_blocked;
_Atomic int trial_open;     /* 1 while a kill or silence trial expects a failure */
_Atomic long long plan_bytes; /* PLAN bytes received by all agents (header included) */
_Atomic long long plan_msg_max; /* the largest PLAN message received, bytes */
double trial_t_ref;         /* the trial's close time, or the silent agent's last send */

/* The kernel's receive time (monotonic s) of the bytes being parsed by this thread, 0 when
 * unknown, and the earliest one of a trial's FAILUREs (SO_TIMESTAMPNS: when the coordinator's
 * message reached the survivor's socket, before the generator's thread read it). */
static _Thread_local double rx_kts;
double failure_kts;

void ev_reset(void)
{
    pthread_mutex_lock(&ev_lock);
    failure_kts = 0;
    for (int i = 0; i < EV_N; i++) {
        ev_first[i] = ev_last[i] = 0;
        ev_count[i] = 0;
    }
    pthread_mutex_unlock(&ev_lock);
}

void ev_note(int e, double t)
{
    pthread_mutex_lock(&ev_lock);
    if (ev_count[e]++ == 0 || t < ev_first[e]) ev_first[e] = t;
    if (t > ev_last[e]) ev_last[e] = t;
    pthread_mutex_unlock(&ev_lock);
}

int ev_get(int e, double *first, double *last)
{
    pthread_mutex_lock(&ev_lock);
    int n = ev_count[e];
    if (first) *first = ev_first[e];
    if (last) *last = ev_last[e];
    pthread_mutex_unlock(&ev_lock);
    return n;
}

/* Waits until event e was seen n times or timeout_s passes. Returns 1 when it was. */
int ev_wait(int e, int n, double timeout_s)
{
    double end = ftrt__now() + timeout_s;
    while (ftrt__now() < end) {
        if (ev_get(e, NULL, NULL) >= n) return 1;
        usleep(500);
    }
    return ev_get(e, NULL, NULL) >= n;
}

/* ---- workers ------------------------------------------------------------------------------- */

worker *workers;
agent *agents; /* index = world rank; [0] unused */
int W, N;
double step_s, hb_s, t_job0, t_job0_wall;
_Atomic int job_started;
uint64_t the_secret;

int64_t steps_now(const agent *a, double now)
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
void put_r(worker *k, size_t *off, int relay_w, uint32_t type, const void *p, uint32_t len)
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

void put(worker *k, size_t *off, uint32_t type, const void *p, uint32_t len)
{
    put_r(k, off, 0, type, p, len);
}

/* The rank a message of agent a is relayed for (--per-host), else 0. */
static int relay_of(const agent *a) { return a->host >= 0 ? a->w : 0; }

/* Sends len bytes at p on fd, keeping order: what the socket does not take now is kept in
 * *tx and sent when it is writable again (epoll key id). */
void flush_to(worker *k, int fd, uint32_t id, uint8_t **tx, size_t *used, size_t *cap,
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

/* Agent a's HEARTBEAT now. */
ftrt__heartbeat hb_of(const agent *a, double now)
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
void heartbeat(worker *k, agent *a, double now, int final, size_t *hoff)
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

/* FAILURE to agent a: notes it (the trial's, or a false positive), freezes its steps and
 * REPORTs. */
static void take_failure(worker *k, agent *a, const uint8_t *p, double now)
{
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
}

/* PLAN to agent a (h: its header): notes it and its size, resumes a's steps at the plan's
 * step and sends RESUMED. */
static void take_plan(worker *k, agent *a, const ftrt__msghdr *h, const uint8_t *p, double now)
{
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
}

/* One message from the coordinator to agent a. */
void take(worker *k, agent *a, const ftrt__msghdr *h, const uint8_t *p, double now)
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
    case FTRT__MSG_FAILURE:
        take_failure(k, a, p, now);
        break;
    case FTRT__MSG_PLAN:
        take_plan(k, a, h, p, now);
        break;
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
ssize_t recv_ts(int fd, void *buf, size_t len)
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

void *worker_main(void *arg)
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
int host_of(int w)
{
    if (opt_per_host <= 0) return -1;
    int th = (N + opt_per_host - 1) / opt_per_host;
    return w <= N ? (w - 1) / opt_per_host : th + (w - 1 - N) / opt_per_host;
}

/* The worker thread that carries world rank w. */
int worker_of(int w)
{
    return opt_per_host > 0 ? host_of(w) % opt_threads : (w - 1) % opt_threads;
}

void post(int op, int w, int64_t arg)
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

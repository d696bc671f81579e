/*
 * coord_load.h - the parts of bench/coord_load (the coordinator's load generator: see
 * coord_load.c's header) that its files share; private to it, not an ftrt header.
 *
 * coord_load.c parses the options and runs the scenario's steps; coord_load_gen.c holds the
 * simulated ranks (agents) and the worker threads that carry them; coord_load_hosts.c the
 * simulated host agents and relay groups (--per-host); coord_load_phases.c the commit, crash
 * and silence trials and the job's end; coord_load_measure.c the readings of the coordinator's
 * process, the steady-state phase and the figures (the human lines and the RESULT line).
 *
 * Threads: the options are set before any worker starts and read-only after; the event
 * counters (ev_*) take ev_lock; an agent's or host's fields belong to its worker thread except
 * the _Atomic ones; a worker's statistics are read by the main thread while they are still.
 */
#ifndef FTRT_BENCH_COORD_LOAD_H
#define FTRT_BENCH_COORD_LOAD_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ftrt.h"
#include "base/proto.h"

/* ---- settings (coord_load.c) ----------------------------------------------------------------- */

extern int opt_n, opt_s, opt_kills, opt_silents, opt_commits;
extern int opt_threads, opt_hb_ms, opt_timeout_ms, opt_step_ms;
extern int opt_sdc_every, opt_keep, opt_verbose;
extern int opt_per_host;    /* > 0: host agents, this many ranks per host */
extern int opt_no_relays;   /* --no-relays: the host agents offer no relay */
extern int opt_relay_group; /* --relay-group G: FTRT_TEST_RELAY_GROUP's knob */
extern int opt_kill_relays; /* --kill-relays: host trials take relays' hosts */
extern int opt_behind;      /* --behind K: survivors of logical rank % K == 1 report a step
                               fewer (a failure mid-step) */
extern int opt_host_kills, opt_host_silents;
extern double opt_steady;
extern unsigned opt_seed;
extern char opt_dir[512];

/* ---- agents (coord_load_gen.c) ------------------------------------------------------------- */

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

extern hostsim *hosts;
extern int nhosts;

/* Events whose first and last times (monotonic s) and counts a trial watches. */
enum { EV_WELCOME, EV_FAILURE, EV_PLAN, EV_COMMIT, EV_REPORT_SENT, EV_RESUMED_SENT,
       EV_SHARD_SENT, EV_BYE_SENT, EV_END, EV_N };

extern pthread_mutex_t ev_lock;
extern int expect_epoch;           /* FAILURE/PLAN of this epoch belong to the trial */
extern int64_t commit_result_bad;  /* COMMIT with a nonzero result */
extern _Atomic int unexpected_eof, unexpected_failure, aborts, tx_blocked;
extern _Atomic int trial_open;     /* 1 while a kill or silence trial expects a failure */
extern _Atomic long long plan_bytes; /* PLAN bytes received by all agents (header included) */
extern _Atomic long long plan_msg_max; /* the largest PLAN message received, bytes */
extern double trial_t_ref;         /* the trial's close time, or the silent agent's last send */
extern double failure_kts;         /* the earliest kernel receive time of a trial's FAILUREs */

/* Clears every event's count and times (and failure_kts). */
void ev_reset(void);
/* Notes event e at time t (monotonic s). */
void ev_note(int e, double t);
/* Event e's count; its first and last times in *first and *last (either may be NULL). */
int ev_get(int e, double *first, double *last);
/* Waits until event e was seen n times or timeout_s passes. Returns 1 when it was. */
int ev_wait(int e, int n, double timeout_s);

/* ---- workers (coord_load_gen.c) ------------------------------------------------------------ */

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

extern worker *workers;
extern agent *agents; /* index = world rank; [0] unused */
extern int W, N;
extern double step_s, hb_s, t_job0, t_job0_wall;
extern _Atomic int job_started;
extern uint64_t the_secret;

/* The epoll key of host h's connection (agents use their world rank; 0 is the command queue). */
#define HOST_ID(h) (0x80000000u | (uint32_t)(h))

/* Agent a's steps done at now (monotonic s). */
int64_t steps_now(const agent *a, double now);
/* Appends one framed message to the worker's buffer at *off; with relay_w > 0 wrapped in a
 * RELAY from that rank, as a host agent forwards it (--per-host). */
void put_r(worker *k, size_t *off, int relay_w, uint32_t type, const void *p, uint32_t len);
/* put_r without the RELAY. */
void put(worker *k, size_t *off, uint32_t type, const void *p, uint32_t len);
/* Sends len bytes at p on fd, keeping order: what the socket does not take now is kept in
 * *tx and sent when it is writable again (epoll key id). */
void flush_to(worker *k, int fd, uint32_t id, uint8_t **tx, size_t *used, size_t *cap,
              const uint8_t *p, size_t len);
/* Agent a's HEARTBEAT now. */
ftrt__heartbeat hb_of(const agent *a, double now);
/* The heartbeat period's messages of agent a (see coord_load_gen.c). */
void heartbeat(worker *k, agent *a, double now, int final, size_t *hoff);
/* One message from the coordinator to agent a. */
void take(worker *k, agent *a, const ftrt__msghdr *h, const uint8_t *p, double now);
/* recv() that also notes the kernel's receive time of the bytes (SO_TIMESTAMPNS). */
ssize_t recv_ts(int fd, void *buf, size_t len);
/* A worker thread's loop (pthread_create's start routine; arg: its worker). */
void *worker_main(void *arg);
/* The simulated host of world rank w with --per-host, else -1. */
int host_of(int w);
/* The worker thread that carries world rank w. */
int worker_of(int w);
/* Queues command op (CMD_*) for world rank w (0: every worker's agents) with arg. */
void post(int op, int w, int64_t arg);

/* ---- --per-host: simulated host agents and relay groups (coord_load_hosts.c) ---------------- */

#ifdef FTRT__PROTO_HOST_AGENTS
/* Host hs's connection is readable: its messages from the coordinator. */
void host_readable(worker *k, hostsim *hs, double now);
/* Host hs's heartbeat period, in one write. */
void host_beat(worker *k, hostsim *hs, double now);
/* Host commands (a rank or a host killed or silenced). Returns 1 when c was one. */
int host_cmd(worker *k, const cmd *c);
#endif
#ifdef FTRT__PROTO_RELAYS
/* epoll keys: host h's listener, its connection to its relay, its member slot i */
#define LIS_ID(h) (0x40000000u | (uint32_t)(h))
#define VIA_ID(h) (0x20000000u | (uint32_t)(h))
#define PEER_ID(h, i) (0x10000000u | (uint32_t)(h) << 8 | (uint32_t)(i))
/* An epoll key of the relay groups: handled (1), or not one (0). */
int relay_event(worker *k, uint32_t id, double now);
/* Host u's listener for its relay group, its RELAY_AT sent on fd. Returns 0 or -1. */
int relay_listen(int fd, int u);
#endif

/* ---- the coordinator's process and the figures (coord_load_measure.c) ---------------------- */

extern pid_t coord_pid;

/* The coordinator's loop thread's and the workers' run and wait times summed (see schedstat):
 * c_* of the coordinator's main thread, w_wait_max of the worker that waited longest. */
typedef struct sched_snap {
    double c_run, c_wait, w_wait[64];
} sched_snap;

/* Everything the run measured, for the report (the human lines and the RESULT line). Times in
 * seconds; the arrays hold one figure per commit or trial (n* of them). */
typedef struct results {
    int fails;
    double startup;
    /* steady state */
    double dt, cpu, gen_cpu, runq, rss_steady, gap_steady, late_steady, p50, p99, pmax;
    long hb0, hb1;
    /* commits */
    double *cm_first, *cm_last;
    int ncm;
    /* crash, silence and host trials */
    double *mttd, *fan, *plan_f, *plan_l, *sil, *plan_b, *hk_first, *hk_plan, *hq_first, *hq_plan;
    int nk, ns, np, nhk, nhq;
    /* the end */
    double rss_end, hwm, gap_all, hwm_exit, end_s;
    long long report_bytes;
} results;

/* User + system CPU seconds of process pid, or -1. */
double proc_cpu_s(pid_t pid);
/* VmRSS or VmHWM (name) of pid in MiB, or -1. */
double proc_mem_mib(pid_t pid, const char *name);
/* Snapshot of the coordinator's loop thread's and the workers' run and wait times. */
void sched_take(sched_snap *s);
/* The largest run-queue wait of a worker between a and b, seconds. */
double sched_worker_wait(const sched_snap *a, const sched_snap *b);
/* Steady state: opt_steady seconds of loop-latency probes on port; prints its line. */
void steady_phase(results *r, int port);
/* The human lines of the commits, trials and end, and the RESULT line. Returns the false
 * positives counted. */
int report(results *r);

/* ---- the phases after the steady state (coord_load_phases.c) -------------------------------- */

/* Checkpoint commits (--commits). */
void commit_phase(results *r);
/* Crash and silence trials (--kills, --silents, --host-kills, --host-silents); status: the
 * job's status file. */
void trial_phase(results *r, const char *status);
/* The end: the coordinator's RSS, then BYE from every trainer and the coordinator's exit (its
 * report at report_path, its log at clog); stops the workers. */
void end_phase(results *r, const char *report_path, const char *clog);

#endif

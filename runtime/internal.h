/*
 * internal.h - the runtime's context and the interfaces between the runtime's own files.
 *
 * This file is private to runtime/ (and runtime/coordinator/): checkpoint/, comm/ and
 * kernels/ never include it. They receive ports (base/ports.h) when the runtime creates them,
 * never the context. (libuv's src/uv-common.h is the model.)
 *
 * Threads: the application thread owns everything in ftrt_ctx except `cp`, the control-plane
 * state shared with the agent thread, which is guarded by cp.lock, and `watch`, whose two
 * atomics the agent thread raises and the data plane polls. The agent thread never calls MPI.
 */
#ifndef FTRT_INTERNAL_H
#define FTRT_INTERNAL_H

#include <mpi.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/ledger.h"
#include "base/net.h"
#include "base/ports.h"
#include "base/proto.h"
#include "checkpoint/engine.h"
#include "checkpoint/region.h"
#include "comm/plane.h"
#include "ftrt.h"

/* ---- control-plane state shared with the agent thread ---- */
/* SHARD_DONEs a rank keeps to send again on a new connection: checkpoints may be written while
 * older ones commit, and a takeover of a frozen coordinator (a heartbeat timeout) may find
 * several in flight. */
#define FTRT__KEPT_SHARD 8
typedef struct ftrt__cp {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_mutex_t send_lock; /* serializes writers of fd; guards fd, hosted, fell_back, kept */
    int fd;
    int hosted;    /* a host agent serves this rank (it said HOSTED) */
    int fell_back; /* the host agent was lost: fd is the coordinator's own connection now */
    int left_fd;   /* the socket of the host agent this rank fell back from, kept open (unread)
                      until the coordinator answers on the new connection, else -1 (agent.c,
                      leave_agent). Agent thread only (and ftrt__agent_stop after it ended) */
    uint64_t secret;
    struct {       /* the newest REPORT, RESUMED, BYE, then the FTRT__KEPT_SHARD newest
                      SHARD_DONEs sent, newest first, then the newest FINGERPRINT (agent.c) */
        uint32_t type, len;
        unsigned char payload[128];
    } kept[4 + FTRT__KEPT_SHARD];
    /* the standby coordinator (agent.c; docs/detection-and-recovery.md "Standby coordinator"),
     * guarded by send_lock: where the standby listens (next.port 0: no standby known) */
    ftrt__coord_at next;
    int sb_fd;        /* this rank is the standby: its listener (else -1) */
    ftrt__coord_at sb_at; /* and where it listens */
    /* a move to a newly elected host agent after this rank's fell back (agent_move.c;
     * docs/detection-and-recovery.md "Host agents", Its death). Agent thread only, but for the
     * swap of fd and mv.fd at MOVE, under send_lock. */
    struct {
        int state;         /* FTRT__MV_NONE, _ASKED, _MOVING */
        int fd;            /* ASKED: the new host agent's socket; MOVING: the old connection,
                              read to its end; else -1 */
        ftrt__rxbuf rx;    /* the new host agent's bytes, until they are the upstream's */
        int agent_w;       /* the world rank its HOSTED named (0: not yet) */
        int reelect;       /* fell back from a lost host agent: elects a new one at `at` */
        double at, since;  /* monotonic: the next attempt; this attempt's start */
        double left_until; /* an attempt left while ASKED: until then, a loss of the
                              connection is answered by falling back again first */
    } mv;
    int wake[2]; /* pipe: wakes the agent to stop */
    pthread_t thread;
    int thread_started;
    _Atomic int64_t steps_done; /* heartbeat payload, written by the app thread */
    _Atomic double kept_s;
    _Atomic int64_t waits;      /* heartbeat payload: collective waits entered */
    _Atomic double compute_s;   /* heartbeat payload: time outside data-plane waits */
    double last_from_coord;     /* agent thread only: monotonic time of the last message */
    _Atomic double t_fail_wall; /* failure time of the newest FAILURE (wall seconds) */
    /* a drain (docs/detection-and-recovery.md "Drain"): the newest epoch announced for a step
     * boundary (a FAILURE with boundary set: ftrt_step_done() makes it pending once steps_done
     * reaches boundary_step, stored before it), and whether this trainer is the one drained
     * (1: it leaves at that step boundary; the hard DRAIN sets the watch's fatal FTRT_EDRAINED
     * at once) */
    _Atomic int64_t boundary_step;
    _Atomic int boundary_epoch;
    _Atomic int drained;
    int drain_asked; /* FTRT_SIGTERM=drain: DRAIN_ME sent (agent thread only) */
    _Atomic int stop;
    /* guarded by lock */
    int welcomed;
    ftrt__welcome welcome;
    ftrt__plan *plan; /* newest PLAN received, expanded (malloc'd; base/proto.h) */
    size_t plan_len;
    double plan_t;    /* monotonic: when the newest PLAN arrived (RESUMED's span_s starts here) */
    int32_t *members; /* the membership as of the newest plan (WELCOME: the initial one), by
                         logical rank, nmembers entries (malloc'd; NULL for a spare) */
    int nmembers;
    int32_t *holder;  /* the holder table of the newest PLAN that carried one (data rank -> the
                         logical rank holding it, -1: none), nholder entries (malloc'd; NULL
                         until a shrink, a fold or a promotion: base/proto.h) */
    int nholder;
    int logical;      /* this rank's logical rank in it (-1: a spare) */
    int64_t commit_step;
    int commit_result;
    int commit_seen;
    ftrt__commit_fn on_commit; /* called with each COMMIT (the checkpoint engine's) */
    void *on_commit_arg;
    void (*on_tick)(struct ftrt_ctx *ctx); /* agent thread, every heartbeat period (the
                                              ledger's periodic send, timeline.c) */
    void *sync;       /* the standby: the newest SYNC (malloc'd, sync_len bytes), or NULL */
    size_t sync_len;
    int takeover;     /* the standby lost the coordinator and takes over: 1 by EOF, 2 by
                         silence (the agent thread has ended) */
    double takeover_heard; /* then: monotonic time of the old coordinator's last message */
    int coord_lost;   /* the host agent said COORD_LOST (agent thread only): 1 by EOF, 2 by
                         silence */
    int term;         /* agent thread only: the newest coordinator term seen (ftrt__msghdr);
                         a coordinator's message of an older one is refused */
    int shutdown; /* SHUTDOWN received */
    int farewell; /* FAREWELL received (after our BYE) */
    int job_end; /* from SHUTDOWN/FAREWELL: 0 (every process of the world finalizes MPI),
                    > 0 (that many died) or < 0 (the job was aborted with that code) */
} ftrt__cp;

/* ---- in-memory partner replicas of sharded state (replica.c) ---- */
typedef struct ftrt__replica {
    unsigned char *own; /* this rank's image: sharded regions, then the others */
    size_t own_cap, own_bytes, own_shard;
    int64_t own_step;   /* the step it holds, -1 = none (or being refreshed) */
    uint32_t own_crc_all; /* CRC32C of the whole image */
    int own_shard_only; /* the image holds the sharded regions only (own_bytes == own_shard):
                           a rank whose state came by a transfer (ftrt__replica_adopt); a
                           recovery gives it the replicated ones from the peers */
    unsigned char *held; /* the partner's sharded image */
    size_t held_cap, held_bytes;
    int64_t held_step;  /* -1 = none */
    int32_t held_of;    /* whose (logical rank) */
    uint32_t held_crc;
    uint64_t held_sig;
    int shift, shift_epoch; /* partner = logical rank + shift (mod size), for that epoch */
    /* The device backend that page-locked own / held (pinned host memory, so that copies of
     * device regions run at DMA speed), or NULL: not pinned. */
    const struct ftrt__loc_ops *own_pin, *held_pin;
} ftrt__replica;

/* Erasure-group state of a trainer (ecgroup.c; FTRT_SHARD_REDUNDANCY=erasure). */
typedef struct ftrt__ecgroup {
    int64_t step;          /* the step of the parity held, -1 = none (or being refreshed) */
    int n;                 /* the trainers the parity was made for */
    int g, kg, idx;        /* this rank's group, its size, this rank's member index */
    size_t chunk;          /* bytes per chunk of the group's stripes (C) */
    unsigned char *parity; /* FTRT__EC_PARITY chunks: row r of stripe (idx - (kg - 2) - r) mod kg */
    size_t parity_cap;
    uint32_t crc_parity;   /* CRC32C of the 2 * chunk parity bytes */
    int64_t bytes[32];     /* by member index: its sharded image's bytes (-1: none) */
    uint32_t crc[32];      /* ... and their CRC32C, agreed at the refresh */
    struct ftrt__ec *codec; /* kernels/erasure.h, for kg members */
    int warned;
} ftrt__ecgroup;

/* ---- the context ---- */
struct ftrt_ctx {
    ftrt_config cfg;
    /* world_rank: this process's place in the job's tables (the coordinator's, the PLAN's):
     * its MPI_COMM_WORLD rank, or for a joined process (joined = 1) the slot JOIN_OK gave,
     * >= world_size, in no MPI_COMM_WORLD of the job; world_size: the job's MPI_COMM_WORLD's */
    int world_rank, world_size, joined;
    char join_port[MPI_MAX_PORT_NAME]; /* a joined process's open port (runtime/join.c) */
    int role; /* enum ftrt__role */
    int rank, size;
    int *data_ranks; /* the data ranks it trains on, ascending (ftrt_data_ranks(): the logical
                        ranks at the start whose data; a shrink or fold renumbers rank, not
                        these), ndata of them (malloc'd; NULL with ndata 0 for non-trainers) */
    int ndata;
    int data_size;   /* data ranks held by the trainers now (ftrt_data_size()) */
    ftrt__watch watch; /* epoch, pending epoch, fatal code, recovery owed (base/ports.h) */
    ftrt__host hostif; /* what the engines below may ask of the runtime (timeline.c) */
    int ntrainers_initial, nspares;
    int mpi_initialized_by_us;
    int promoted;   /* spare promoted and ftrt_restore() owes the state transfer */
    ftrt__plan *plan; /* the plan being applied (app thread's copy) */
    double plan_t, rebuild_s; /* its PLAN's arrival (monotonic) and ftrt__apply_plan's seconds:
                                 the phases RESUMED carries (recovery.c) */
    int64_t reported_steps; /* the step count of this trainer's latest REPORT: whether it is a
                               survivor behind a plan's resume step (recovery.c) */
    int reported_shard_only; /* that REPORT offered a shard-only own image: a survivor behind in
                                a memory plan (recovery.c) */
    char status_file[1100];
    char host[FTRT__HOST_MAX];
    char coord_addr[FTRT__ADDRS_MAX]; /* the control plane's addresses (a list) and port */
    int coord_port;
    uint64_t local_tag; /* names this job's local sockets (base/net.h), from world rank 0 */

    ftrt__region *regs;
    int nregs, regs_cap;
    struct ftrt__ckpt_engine *ckpt; /* checkpoint engine (checkpoint/engine.h); created before
                                       the agent thread starts, which calls its commit callback */

    ftrt__plane plane;
    ftrt__cp cp;
    struct ftrt__hostagent *ha; /* this host's agent when it lives in this process (hostagent.c) */
    ftrt__replica rep; /* application thread only */
    ftrt__ecgroup ec;  /* application thread only */

    /* step timing for the report */
    double t_start;     /* ftrt_init entry */
    double t_mark;      /* end of the previous step, or resume time */
    double t_wait_end;  /* when the app thread last left a data-plane wait */
    double *step_s;     /* seconds of step i on this rank (0 when not done here) */
    int64_t step_cap;
    double kept_s, rework_s, lost_s;
    int64_t rework_steps;

    /* the goodput ledger of this rank (ledger.h); ledger_lock guards it against the agent
     * thread, which sends the finished part every second */
    ftrt__ledger ledger;
    pthread_mutex_t ledger_lock;
    size_t ledger_sent; /* intervals already sent to the coordinator */
    int64_t kept_steps; /* steps completed here and kept (for useful FLOPs) */
    double flops_per_step, peak_flops;
    int64_t total_steps;

    int exit_code;    /* trainer: the error it leaves with (ftrt_set_exit_code), or 0 */
    int coord_result; /* coordinator: the job's outcome */
    int ranks_lost;   /* coordinator: processes of the world that died */
    int coord_aborted; /* coordinator: the job was aborted (no process finalizes MPI) */
};

/* FTRT_ERECOVER when the epoch changed, the fatal code when the job is over, else 0. */
static inline int ftrt__interrupted(struct ftrt_ctx *ctx) { return ftrt__watch_check(&ctx->watch); }

/* An entry point that ends training (ftrt_restore, ftrt_recover) returned rc: a real error
 * (not FTRT_ERECOVER, not a misuse: FTRT_EINVAL, FTRT_ESTATE) becomes the trainer's exit
 * code, which its BYE carries (ftrt_set_exit_code). */
static inline void ftrt__note_exit(struct ftrt_ctx *ctx, int rc)
{
    if (ctx && rc < 0 && rc != FTRT_ERECOVER && rc != FTRT_EINVAL && rc != FTRT_ESTATE &&
        ctx->role == FTRT__ROLE_TRAINER && !ctx->exit_code)
        ctx->exit_code = rc;
}

/* ---- the ledger of this rank (timeline.c) ---- */
/* The host interface (base/ports.h) the runtime hands to the engines: send through the agent,
 * ledger marks, the wait bracket. */
ftrt__host ftrt__host_of(struct ftrt_ctx *ctx);
/* Step bookkeeping of ftrt_step_done(). Returns 0 or -ENOMEM. */
int ftrt__timeline_step_done(struct ftrt_ctx *ctx, int64_t step);
/* Switches this rank's timeline to `kind` now (thread-safe against the agent). */
void ftrt__ledger_mark(struct ftrt_ctx *ctx, int kind);
/* The kind of application time now: REWORK while redoing steps after a rollback, else
 * COMPUTE. */
int ftrt__compute_kind(const struct ftrt_ctx *ctx);
/* A wait ended with FTRT_ERECOVER: the partial step since the last step end becomes rework,
 * and the time since the failure (cp.t_fail_wall) detection wait. Idempotent. */
void ftrt__ledger_failure(struct ftrt_ctx *ctx);
/* Sends the finished part of the timeline (all of it when final) to the coordinator. Called
 * by the agent every heartbeat period (through ftrt__ledger_tick) and by ftrt_finalize().
 * Returns 0 or -errno. */
int ftrt__ledger_send(struct ftrt_ctx *ctx, int final);
/* This rank's timeline from its first interval, as one LEDGER payload (malloc'ed, the
 * caller's to free; *len its bytes): every closed interval up to its share of the
 * coordinator's budget (more, or its own FTRT_TIMELINE_MAX reached: sparse 2, cut short after
 * them), the totals, not final. For a standby that takes over: its coordinator side holds its
 * intervals as a LEDGER would have brought them. Thread-safe (ledger_lock). NULL on -ENOMEM. */
ftrt__ledger_msg *ftrt__ledger_whole(struct ftrt_ctx *ctx, size_t *len);
/* A hot spare's switch to `kind` (SPARE_IDLE once it has joined, RECOVERY at its promotion):
 * the intervals closed so far are final (a spare has no step in flight that a failure could
 * turn into rework), and go to the coordinator now. Without this a spare's ticks, which send
 * only finished steps' intervals, send none until it finishes a step: never for a spare not
 * needed, whose slot the report then showed spare idle from the job's start. A lost send is
 * not an error (as a tick's). Called by the application thread. */
void ftrt__ledger_spare_mark(struct ftrt_ctx *ctx, int kind);
/* The agent's periodic callback (cp.on_tick): ftrt__ledger_send(ctx, 0). */
void ftrt__ledger_tick(struct ftrt_ctx *ctx);

/* ---- agent (agent.c) ---- */
/* Connects to the coordinator at the first of `addrs` (space-separated IPv4) that answers,
 * sends HELLO and starts the agent thread. Returns 0 or -errno (-ETIMEDOUT after
 * cfg.init_timeout_ms). */
int ftrt__agent_start(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret);
/* Starts the agent thread on fd, a connection to the coordinator that said this process is
 * in (after HELLO, or JOIN and its JOIN_OK: runtime/join.c); fd is owned from here on, closed
 * by ftrt__agent_stop. Returns 0 or -errno. */
int ftrt__agent_run(struct ftrt_ctx *ctx, int fd, uint64_t secret);

/* ---- a process that joins a running job (join.c) ---- */
/* 1 when this process was started to join a running job (FTRT_JOIN_ADDRS is set: tools/ftrt-run
 * --join). */
int ftrt__join_mode(void);
/* The joiner's start in place of the world's bootstrap: reads FTRT_JOIN_ADDRS, FTRT_JOIN_PORT
 * and FTRT_JOIN_SECRET, opens an MPI port, asks the job's coordinator (JOIN, again every 0.5 s
 * while the job starts or recovers, for cfg.init_timeout_ms at most), and on JOIN_OK sets
 * world_rank (its slot), world_size, joined, local_tag and cp.welcome/welcomed, publishes its
 * port (ftrt__join_service) and starts the agent thread. *secret: the job's. Returns 0,
 * FTRT_ECONFIG (a variable missing or malformed), FTRT_EJOIN (refused: the line logged),
 * FTRT_EMPI, FTRT_ETIMEDOUT or -errno. Application thread, once, from ftrt_init(). */
int ftrt__joiner_start(struct ftrt_ctx *ctx, uint64_t *secret);
/* Sends a message on the control connection (thread-safe). Returns 0 or -errno. */
int ftrt__agent_send(struct ftrt_ctx *ctx, uint32_t type, const void *payload, uint32_t len);
/* Stops and joins the agent thread and closes the connection. Idempotent. */
void ftrt__agent_stop(struct ftrt_ctx *ctx);
/* Waits (cp.lock held by the caller) on cp.cond for at most ms milliseconds. */
void ftrt__cp_wait(struct ftrt_ctx *ctx, int ms);

/* ---- a new host agent after one was lost (agent_move.c, the agent thread's) ---- */
enum { FTRT__MV_NONE, FTRT__MV_ASKED, FTRT__MV_MOVING };
/* This host's local socket (named after ctx->local_tag; secret: the hellos' that the host agent
 * started here checks): binds it and starts the host agent in this process (ctx->ha) when
 * no process of the host holds it, then connects to it (within 1 s). init_timeout_ms bounds the
 * new host agent's connection to the coordinator at addr:port. reelect: 0 at ftrt_init(), 1 in
 * an election after a host agent was lost (FTRT_TEST_AGENT_LATE_RANKS may keep this rank from
 * binding in one or the other: it then waits up to max(1 s, init_timeout_ms) at ftrt_init(), or
 * tries once in an election, for another rank of the host to bind it). Returns the fd, or -EEXIST on the coordinator's host (its mark), -errno
 * otherwise. Agent thread (or ftrt__agent_start). */
int ftrt__local_upstream(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret,
                         int init_timeout_ms, int reelect);
/* A rank fell back to its own connection (its host agent was lost): it elects a new one after
 * FTRT_TEST_REELECT_MS, else one heartbeat timeout. */
void ftrt__move_arm(struct ftrt_ctx *ctx);
/* Forgets the move under way, if any, and any further election (the coordinator was lost, or
 * the rank reconnects): closes mv.fd. */
void ftrt__move_reset(struct ftrt_ctx *ctx, int reelect);
/* Once per agent loop: an election when due (ASKED: HELLO sent to the new host agent, the rank
 * still on its own connection); an ASKED attempt the new host agent never answered (HOSTED)
 * within half the heartbeat timeout is left. */
void ftrt__move_tick(struct ftrt_ctx *ctx, double now);
/* The heartbeat hb also goes to the new host agent while ASKED (it would call the rank silent). */
void ftrt__move_beat(struct ftrt_ctx *ctx, const ftrt__heartbeat *hb);
/* The new host agent's socket is readable while ASKED: its HOSTED and PINGs; anything else, or
 * its end, leaves the attempt. */
void ftrt__move_read(struct ftrt_ctx *ctx);
/* MOVE from the coordinator (cp.lock held): when it names the new host agent this rank asked,
 * the rank sends through it from now on and closes its own connection's sending side
 * (MOVING); else it is ignored. */
void ftrt__move_take(struct ftrt_ctx *ctx, const ftrt__epoch_msg *m);
/* MOVING: the old connection ended (the coordinator read all of it): the new host agent's
 * socket becomes the upstream, its bytes read so far move into rx. */
void ftrt__move_end(struct ftrt_ctx *ctx, ftrt__rxbuf *rx);
/* 1 when the loss of the upstream should be answered by connecting to the coordinator directly
 * first (a move under way, or one left lately: the coordinator may have closed the rank's own
 * connection to make it come back on a new one). */
int ftrt__move_unsure(const struct ftrt_ctx *ctx, double now);

/* ---- host agent (hostagent.c; docs/detection-and-recovery.md "Host agents") ---- */
typedef struct ftrt__hostagent_args {
    uint64_t secret;          /* the job's hello secret */
    const char *addrs;        /* the coordinator's addresses (ftrt__connect_any) and port */
    int port;
    int world_rank;           /* of the process the agent runs in */
    const char *host;         /* this host's name */
    int heartbeat_ms, heartbeat_timeout_ms, init_timeout_ms; /* the job's settings */
} ftrt__hostagent_args;
struct ftrt__hostagent;
/* Starts this host's agent on lfd, the host's local socket, listening (owned): a thread that
 * connects to the coordinator (HOST_HELLO), serves the ranks that connect to lfd (their HELLO
 * answered with HOSTED and relayed, their HEARTBEATs batched into one HOST_BEAT per period,
 * their other messages relayed, the coordinator's RELAY and MULTI delivered, a PING to each
 * every period), reports a rank whose socket closes without BYE or that falls silent
 * (RANK_LOST), and tells every rank when the coordinator is lost (COORD_LOST). *out receives
 * it. a's strings are copied. Returns 0 or -errno (thread, memory; lfd closed). */
int ftrt__hostagent_start(struct ftrt__hostagent **out, int lfd, const ftrt__hostagent_args *a);
/* Stops taking new ranks and, once the ranks it serves have all closed their sockets or
 * wait_s seconds passed, closes the coordinator's connection and joins the thread; frees it.
 * NULL is a no-op. */
void ftrt__hostagent_stop(struct ftrt__hostagent *ha, double wait_s);

/* ---- a host agent in the relay groups (hostrelay.c; its thread only) ---- */
typedef struct ftrt__hpeer { /* a host agent of this relay's group */
    int fd;
    ftrt__rxbuf rx;
    int w;        /* the world rank its agent lives in, once it said PEER_HELLO; else 0 */
    double since; /* monotonic: accepted */
} ftrt__hpeer;
typedef struct ftrt__hrelay {
    uint64_t secret;
    int self_w;         /* the world rank this host agent lives in */
    ftrt__txbuf *up;    /* the host agent's queue to the coordinator (RELAY_AT, RELAY_PEER) */
    int lfd;            /* listens for the group's host agents (TCP), or -1 */
    ftrt__hpeer *peer;  /* as a relay: the group's host agents connected to it */
    int npeer, cap;
    int via_fd;         /* as a member: the connection to its relay, or -1 */
    ftrt__rxbuf via_rx;
    ftrt__coord_at via_at; /* as a member: the relay it was told (RELAY_VIA) and could not reach */
    int via_tries;      /* connects to via_at that failed (the first included) */
    double via_retry;   /* monotonic: when to connect to via_at again; 0: not to */
    int via_forced;     /* connects failed by FTRT_TEST_RELAY_CONNECT_FAILS so far */
    char host[FTRT__HOST_MAX]; /* this host's name (PEER_HELLO) */
} ftrt__hrelay;
/* A member that cannot connect to its relay tries again this many times, 0.25 s after the
 * first attempt, then 0.5 s and 1 s after each next (ftrt__hrelay_via); then its fan-outs stay
 * direct. */
#define FTRT__RELAY_CONNECT_RETRIES 3
/* Messages read from the relay (MULTIs), for the host agent to take as the coordinator's.
 * Returns 0, or nonzero to close the connection to the relay. */
typedef int (*ftrt__hrelay_msg_fn)(void *arg, const ftrt__msghdr *h, const void *p);
/* A FANOUT's part for this host: n world ranks at ranks (unaligned int32s), the message. */
typedef void (*ftrt__hrelay_local_fn)(void *arg, int n, const int32_t *ranks,
                                      const ftrt__msghdr *h, const void *p);
/* Listens on TCP (every interface) for the host agents of a relay group and queues RELAY_AT
 * (its non-loopback addresses and port) on up, for the coordinator. *r is reset first (always
 * safe to close). self_w: the world rank of this agent's process. Returns 0, or -errno (no
 * listener: this agent cannot be a relay, and says nothing; it can still be a member). */
int ftrt__hrelay_open(ftrt__hrelay *r, uint64_t secret, int self_w, ftrt__txbuf *up);
/* Fills pf with the descriptors to poll for POLLIN (fd -1 where there is none); returns how
 * many: 2 + the members connected, at most 2 + r->npeer. */
int ftrt__hrelay_pollfds(const ftrt__hrelay *r, struct pollfd *pf);
/* After poll over the n entries that ftrt__hrelay_pollfds filled: accepts members, reads their
 * PEER_HELLO (RELAY_PEER up 1 queued) or EOF (up 0), drops one without a PEER_HELLO after
 * timeout_s, hands each MULTI read from this agent's relay to on_msg(arg, ...), and connects
 * to a relay not reached yet once its retry is due (ftrt__hrelay_via; called at least once a
 * heartbeat period, which bounds how late a retry is). */
void ftrt__hrelay_serve(ftrt__hrelay *r, const struct pollfd *pf, int n, double timeout_s,
                        ftrt__hrelay_msg_fn on_msg, void *arg);
/* RELAY_VIA: closes the connection to this agent's relay, if any (and forgets a relay it was
 * still trying to reach), and with at->port > 0 connects to the relay at at->addrs (one 250 ms
 * round at most) and says PEER_HELLO (host: this host's name). A relay out of reach is tried
 * again FTRT__RELAY_CONNECT_RETRIES times, with backoff (ftrt__hrelay_serve does), then
 * logged: the fan-outs stay direct. */
void ftrt__hrelay_via(ftrt__hrelay *r, const ftrt__coord_at *at, const char *host);
/* FANOUT (payload of len bytes): this host's part to local(arg, ...), every other part on to
 * its member as a MULTI (a member not connected: skipped; a failed send drops it, RELAY_PEER
 * up 0). Returns 0 or FTRT_EPROTO (malformed). */
int ftrt__hrelay_fanout(ftrt__hrelay *r, const void *payload, size_t len,
                        ftrt__hrelay_local_fn local, void *arg);
/* Closes every connection and the listener, frees the table. */
void ftrt__hrelay_close(ftrt__hrelay *r);

/* ---- recovery (recovery.c) ---- */
/* Bytes per chunk of the recovery's state transfer (comm/transfer.h). */
#define FTRT__XFER_CHUNK ((size_t)4 << 20)
/* Builds the communicator and applies ctx->cp.plan (logical rank, size, epoch). Called by
 * survivors in ftrt_recover() and by a promoted spare in ftrt_init(). Returns 0 or FTRT_EMPI. */
int ftrt__apply_plan(struct ftrt_ctx *ctx);
/* The handoff into the applied plan, for a survivor (ftrt_recover) and a promoted spare
 * (ftrt_restore) alike: state transfer (broadcast of replicated regions from the source, or a
 * reload of the plan's checkpoint), step bookkeeping for the resume step, RESUMED to the
 * coordinator. *step receives the resume step. Returns 0 or an error code. */
int ftrt__resume_plan(struct ftrt_ctx *ctx, int64_t *step);
/* Step-time bookkeeping after resuming at step R (rework of steps >= R). */
void ftrt__ledger_resume(struct ftrt_ctx *ctx, int64_t resume_step);

/* ---- silent data corruption check (sdc.c) ---- */
/* Into *fp, the fingerprint of the REPLICATED regions among regs[0..nregs) (SHARDED ones differ
 * by design and are not compared), in registration order: each region's CRC32C mixed with the
 * CRC32C of its name and its size into one 64-bit value. Equal regions give equal values; any
 * change of up to 32 adjacent bits of one region changes it (CRC32C detects every such burst).
 * *covered (may be NULL) receives the number of regions covered. A device region's CRC32C is
 * taken by the device backend's crc (on the device; ftrt__loc_device()). Returns 0, or
 * FTRT_ENOTSUP (a REPLICATED device region and no device backend) or the backend's code, each
 * logged naming the region (*fp and *covered then untouched). Pure but for that log;
 * thread-safe for regions nobody writes meanwhile. */
int ftrt__sdc_fingerprint(const ftrt__region *regs, int nregs, uint64_t *fp, int *covered);
/* ftrt_step_done()'s check: when cfg.sdc_every > 0, steps_done is a multiple of it, there are
 * two or more trainers and a REPLICATED region, fingerprints the regions now and sends
 * FINGERPRINT {steps_done, epoch, value, seconds} to the coordinator. Returns 1 when a
 * fingerprint was taken, else 0, or ftrt__sdc_fingerprint's error (a REPLICATED device region
 * and no device backend: ftrt_register() refuses one; a device backend's failure); a failed send is not an error here
 * (a lost coordinator reaches the application through its next ftrt call). Application
 * thread. */
int ftrt__sdc_step(struct ftrt_ctx *ctx, int64_t steps_done);

/* ---- drains (drain.c; docs/detection-and-recovery.md "Drain") ---- */
/* ftrt_step_done()'s part, at a step boundary: 0 when no drain's epoch is announced for it;
 * FTRT_ERECOVER (a member that stays: the drain's epoch is now pending, ftrt_recover() is
 * owed) or FTRT_EDRAINED (this trainer is the one drained: the watch's fatal code is set), after
 * a refresh of the partner replicas where sharded regions have them. Application thread. */
int ftrt__drain_boundary(struct ftrt_ctx *ctx);
/* 1 when a drain's epoch is announced for a step boundary this trainer has not reached (or it
 * is the one drained and still here): ftrt_finalize() then does not wait for the commits of
 * its last checkpoints, which the coordinator decides only once the drain is withdrawn on the
 * BYE (the loop ended first). Application thread. */
int ftrt__drain_pending(const struct ftrt_ctx *ctx);

/* ---- partner replicas (replica.c; docs/detection-and-recovery.md "Partner replicas") ---- */
/* 1 when this trainer keeps replicas: FTRT_SHARD_REPLICA_EVERY >= 0, two or more trainers, a
 * SHARDED region. The images are host memory (pinned where the device backend can pin);
 * device regions are copied into and out of them through the device backend. */
int ftrt__replica_enabled(const struct ftrt_ctx *ctx);
/* Collective over the trainers (all call it with the same step, the state being that of
 * `step` steps done): copies every region into this rank's image with its CRC32C, sends the
 * sharded part to the partner and keeps the image the partner sends, checked against its CRC
 * (a mismatch is logged and the image dropped). Both images are invalid while this runs.
 * Returns 0 (also when replicas are off), FTRT_ERECOVER (a failure meanwhile: watch set) or the
 * fatal code, FTRT_EMPI, FTRT_EMISMATCH (the partner sent another step), -ENOMEM, FTRT_ENOTSUP
 * (a device region and no device backend: logged naming it; on every member alike, before any
 * exchange). A device backend's error while copying a device region into the image leaves
 * this rank without an image of the step (logged), as -ENOMEM does. */
int ftrt__replica_refresh(struct ftrt_ctx *ctx, int64_t step);
/* ftrt_step_done()'s part: every FTRT_SHARD_REPLICA_EVERY > 0 steps, a refresh (charged to the
 * ledger as checkpoint time). Returns what ftrt__replica_refresh returns, 0 when not due. */
int ftrt__replica_step(struct ftrt_ctx *ctx, int64_t steps_done);
/* For the REPORT: the steps of the images this rank holds that verify against their CRC32C
 * now (-1 where none, or where one fails: logged as memory corruption), and whether its own
 * image holds the sharded regions only (*own_shard_only 1: ftrt__replica_adopt's). */
void ftrt__replica_offer(struct ftrt_ctx *ctx, int64_t *own_step, int64_t *held_step,
                         int32_t *held_of, int32_t *own_shard_only);
/* Applies a plan with mem_step >= 0 (collective over the new communicator): a survivor copies
 * its own image back into its regions (the sharded ones only from a shard-only image: the
 * replicated ones are then the caller's transfer's, the plan's survivors behind); each replaced
 * rank receives its sharded image from the
 * plan's holder (CRC32C per chunk, comm/transfer.c) into its regions. Replicated regions of the
 * replaced ranks are left to the caller's transfer. st (may be NULL) sums the transfers.
 * Device regions are written through the device backend, each piece checked against the
 * CRC32C of the image bytes it came from. Returns 0, FTRT_EMISMATCH (no image of the step, or a
 * region table that differs), the transfer's errors (FTRT_ECORRUPT, FTRT_ERECOVER, ...),
 * -ENOMEM, FTRT_ENOTSUP (a device region and no device backend), a device backend's code
 * (FTRT_ECORRUPT: a piece changed on its way into device memory). */
struct ftrt__xfer_stat;
int ftrt__replica_restore(struct ftrt_ctx *ctx, struct ftrt__xfer_stat *st);
/* After this rank's state was restored at `step` by a transfer, its sharded image of `step`
 * already in its own image buffer (ftrt__replica_restore): keeps that as its own image,
 * shard-only (its replicated regions, the same bytes on every survivor, come from the peers in
 * a later recovery), so that a later recovery of another rank finds one here without a copy of
 * every region on the recovery's path. Only its CRC32C is taken (O(sharded bytes)). */
void ftrt__replica_adopt(struct ftrt_ctx *ctx, int64_t step);
/* Forgets the images (buffers kept): after a rollback to a checkpoint, images of later steps
 * belong to a timeline that was abandoned (after silent data corruption, a polluted one). */
void ftrt__replica_drop(struct ftrt_ctx *ctx);
/* Frees the images (finalize). */
void ftrt__replica_free(struct ftrt_ctx *ctx);

/* ---- erasure groups (ecgroup.c; docs/detection-and-recovery.md "Erasure groups") ---- */
/* The erasure part of a refresh (called by ftrt__replica_refresh under
 * FTRT_SHARD_REDUNDANCY=erasure, collective over the trainers, every one with the same step,
 * right after it took its own image: have 1 when it did, crc_shard the CRC32C of that image's
 * sharded part). Agrees on the images' sizes and CRC32Cs and reduces this rank's group's parity
 * (kernels/erasure.h layout) into its parity buffer, with its CRC32C; the parity is invalid
 * while this runs. Returns 0 (also with fewer than 3 trainers, logged once, or when a member of
 * the group kept no image, or without memory for the parity: no parity then), FTRT_ERECOVER
 * (watch set), a fatal code, FTRT_EMPI. */
int ftrt__ec_refresh(struct ftrt_ctx *ctx, int64_t step, int have, uint32_t crc_shard);
/* For the REPORT: the step of the parity this rank holds if it verifies against its CRC32C
 * now (-1: none, or failed: logged as memory corruption), the trainers it was made for, and
 * the group size setting (0 when erasure groups are not in use). */
void ftrt__ec_offer(struct ftrt_ctx *ctx, int64_t *ec_step, int32_t *ec_n, int32_t *ec_k);
/* Rebuilds the sharded image of every rank the plan marks FTRT__SHARD_SRC_ERASURE, of `step`,
 * into that rank's own image buffer (grown by the caller to its regions' size): collective over
 * the new communicator (survivors send fragments, each rebuilt rank decodes its chunks and
 * checks the result against the CRC32C agreed at the refresh). st (may be NULL) counts what was
 * received and the time. Returns 0, FTRT_ECORRUPT (too few fragments, or a rebuilt image that
 * fails its CRC32C: logged), FTRT_EMISMATCH (no group for this membership, or another size
 * than the regions'), FTRT_EMPI, -ENOMEM, the plane's wait's code. */
int ftrt__ec_restore(struct ftrt_ctx *ctx, int64_t step, struct ftrt__xfer_stat *st);
/* Forgets the parity (after a rollback: a later step's) / frees it (finalize). */
void ftrt__ec_drop(struct ftrt_ctx *ctx);
void ftrt__ec_free(struct ftrt_ctx *ctx);

/* ---- regions (regions.c) ---- */
/* The checkpoint engine's settings from the configuration. */
void ftrt__ckpt_opts_from(const ftrt_config *cfg, ftrt__ckpt_opts *o);

#endif

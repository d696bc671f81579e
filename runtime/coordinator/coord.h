/*
 * coord.h - the coordinator's state and the interfaces between its files (private to
 * runtime/coordinator/).
 *
 * The files, each calling only those listed before it (tools/check-layers refuses object cycles):
 * rankidx.c (the hosts, the spares, the most steps and the members' BYEs, kept up to date), conn.c
 * (connections, sends and their queues, the silence and send watches, PINGs, the listener), job.c
 * (the job's start, end and abort, fencing), standby.c (the standby coordinator: appointment, SYNC,
 * the term file), commits.c (checkpoint commits), epoch.c (the epoch change: FAILURE out, REPORTs
 * in, PLAN out, RESUMEDs in), failure.c (a rank declared failed: the incident, host loss, the
 * spare), sdc_vote.c (silent data corruption: the vote on fingerprints), progress.c (stalled
 * progress and stragglers), service.c (reading a rank's messages, silence timeouts and the peers
 * that do not read), takeover.c (a standby taking over) and coordinator.c (the loop: open, iterate,
 * periodic work, close). plan.c holds their pure decisions (plan.h); names.c, status.c, report.c
 * and goodput.c the outputs. Only one thread touches it: world rank 0's, or the standby's that took
 * over.
 */
#ifndef FTRT_COORD_H
#define FTRT_COORD_H

#include <json-c/json.h>

#include <stdio.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/ledger.h"
#include "base/proto.h"
#include "runtime/coordinator/coordinator.h"
#include "runtime/coordinator/plan.h"
#include "runtime/coordinator/track.h"

enum ftrt__phase { PH_INIT, PH_RUNNING, PH_COLLECT, PH_RESUMING, PH_ABORTING, PH_DONE };
/* How a failure was detected. FK_SDC: silent data corruption, the rank's replicated regions
 * disagreed with the majority's (or, with no majority, world rank -1: no rank is named). */
enum ftrt__failure_kind {
    FK_CONNECTION_LOST, FK_HEARTBEAT_TIMEOUT, FK_PROTOCOL, FK_PROGRESS_STALL, FK_SDC,
    FK_DRAIN, /* not a failure: a planned move out of the job (drain.c); the report lists it
                 under "drains", the ledger and the MTBF do not count it */
    FK_KINDS /* count */
};

/* Fingerprints kept per trainer (FINGERPRINT messages), newest last, to compare a step once
 * every member has sent it. */
#define FTRT__SDC_KEEP 8
/* Times a member host agent is told its live relay again after its connection to it closed
 * (fanout.c relay_rejoin). */
#define FTRT__RELAY_REJOINS 3
typedef struct ftrt__sdc_fp {
    int64_t step; /* steps done; 0 = empty (fingerprints are taken at steps >= 1) */
    uint64_t fp;
    int epoch;
    double t; /* monotonic: when it arrived */
} ftrt__sdc_fp;

/* A node of the silence watch (conn.c "ftrt__silence_"): a list of the connections ordered by
 * the time each was last heard, oldest first. Ids: world rank w for a rank's own connection,
 * W + h for host agent h's; 0 = none. */
typedef struct ftrt__wnode {
    int prev, next, on;
} ftrt__wnode;

/* A connection's send queue (conn.c "the send queues"): the bytes its socket did not take yet,
 * in order, and since when they wait. Bytes are counted since the connection opened. */
typedef struct ftrt__txq {
    ftrt__txbuf b;    /* b.buf[b.off, b.used): still to go */
    uint64_t in, out; /* bytes queued, bytes written from the queue */
    uint64_t mark;    /* `in` at mark_t: these bytes are not all out yet */
    double mark_t;    /* monotonic; the queue's key in the send watch */
    size_t big;       /* the largest message queued since the queue was last empty */
    int over;         /* past its bound: the peer is to be declared lost, nothing more is queued */
    ftrt__wnode wn;   /* in the send watch while it holds bytes (ids: the silence watch's) */
} ftrt__txq;

/* A host agent's connection (runtime/hostagent.c): it carries the ranks of one host. */
typedef struct ftrt__hlink {
    int fd;             /* -1 once lost */
    ftrt__rxbuf rx;
    ftrt__txq tx;       /* what its socket did not take yet (conn.c) */
    double last_heard;  /* monotonic */
    ftrt__wnode wn;
    int agent_w, pid;   /* the process the agent lives in */
    char host[FTRT__HOST_MAX];
    int nranks;         /* ranks it serves now */
    int remote;         /* on another host than the coordinator's */
    /* relay groups (fanout.c) */
    ftrt__coord_at *relay_at; /* where it listens for its group (RELAY_AT), else NULL */
    int via;            /* the relay (link) its fan-outs go through, or -1: directly */
    int nvia;           /* a relay: links whose fan-outs go through it */
    int catch_up;       /* its ranks are to be caught up (its relay was lost; fanout.c) */
    int via_told;       /* a member: told where its relay listens (RELAY_VIA), once */
    int rejoins;        /* a member: times told its live relay again after its connection to
                         * it closed (RELAY_PEER up 0), at most FTRT__RELAY_REJOINS; fanout.c */
} ftrt__hlink;

typedef struct ftrt__crank {
    int fd;             /* its own connection (TCP, or Unix on the coordinator's host), or -1 */
    int link;           /* else the host agent serving it (index into c->hl), or -1 */
    int cut;            /* its host agent was sent a CUT with fence (ftrt__job_fence): the
                           drop sends no second one */
    ftrt__rxbuf rx;
    ftrt__txq tx;      /* its own connection's: what its socket did not take yet (conn.c) */
    int hello, pid, role, logical;
    char host[FTRT__HOST_MAX];
    double last_heard; /* monotonic */
    ftrt__wnode wn;    /* its own connection in the silence watch */
    double orphan_until; /* > 0: its host agent was lost; it may come back until then */
    double lost_t;       /* monotonic: when its host agent was lost (0: never) */
    int orphan_kind;     /* the failure kind if it does not */
    int remote;          /* on another host than the coordinator's (its own connection) */
    int orphan_coord;    /* an orphan because the coordinator was lost (a takeover), not its
                            host agent */
    int back_takeover;   /* its last return was to this coordinator after a takeover (set when
                            it came back, read by ftrt__rank_rejoined) */
    double suspect_until; /* monotonic: its host agent was lost; until then the recovery plan
                             waits for it to die with its host too (epoch.c) */
    /* its move from its own connection to a newly elected host agent (service.c "moves"):
     * move_to, the host agent that relayed its HELLO (-1: none); move_sent, MOVE went out on
     * its own connection, whose EOF then completes the move; held, what that agent relayed for
     * it meanwhile (whole messages, handled after the last one of its own connection) */
    int move_to, move_sent;
    double move_t; /* monotonic: when its MOVE went out */
    ftrt__txbuf held;
    int64_t steps_done;
    int64_t waits;      /* collective waits entered (heartbeat) */
    double compute_s;   /* time outside collective waits (heartbeat) */
    double last_change; /* monotonic: when steps_done or waits last changed */
    double kept_s;
    double win_t, win_compute; /* straggler window start: time, compute_s, steps_done */
    int64_t win_steps;
    double step_s;       /* step time measured over the last window (0 = unknown) */
    double straggler_max; /* largest compute-per-step ratio to the median seen */
    int64_t straggler_step;
    int promoting;      /* spare assigned in the current recovery */
    int drained;        /* it was drained (drain.c): role FAILED, but it leaves by itself */
    int drain_epoch;    /* the epoch its drain opened or joined */
    int drain_asked;    /* it asked for its own drain (DRAIN_ME: SIGTERM), not done yet */
    int reported_epoch; /* REPORT received for this epoch */
    int64_t report_steps;
    int has_sharded;
    int64_t own_step, held_step; /* REPORT: in-memory images held (runtime/replica.c), -1 none */
    int32_t held_of;
    int64_t ec_step; /* REPORT: erasure parity held (runtime/ecgroup.c), -1 none */
    int32_t ec_n, ec_k;
    int32_t own_shard_only; /* REPORT: its own image holds the sharded regions only */
    int resumed_epoch;
    ftrt__resumed_msg resumed; /* its RESUMED of resumed_epoch: the phases it timed */
    double resumed_t;          /* monotonic: that RESUMED's arrival */
    int said_bye;
    ftrt__bye bye;
    /* ledger (LEDGER messages): intervals received (up to its share of the timeline budget,
     * ftrt__timeline_share(); none for a rank left out), latest totals and open interval; the
     * earliest start and newest end received and that newest interval's kind, which with the
     * totals rebuild a timeline not held (goodput.c) */
    ftrt__interval *tl;
    size_t tl_n, tl_cap;
    int tl_truncated, tl_final, tl_seen;
    int tl_left_out;          /* its timeline not held: the report has its totals only */
    int tl_resend;            /* restored by a standby that took over (totals, no intervals):
                               * the rank sends its whole timeline again once it is back
                               * (agent.c to_standby); still 1 at the end: it did not, and its
                               * timeline is rebuilt from the totals (cut short) */
    double tl_first, tl_last; /* wall s; 0 = no interval received */
    int tl_last_kind;
    double tl_totals[FTRT__IV_KINDS];
    double tl_t_open;
    int tl_kind_open;
    int64_t kept_steps;
    double flops_per_step, peak_flops;
    int64_t total_steps;
    double t_fail_wall; /* failed ranks: best known failure time */
    double t_joined_wall;   /* a joined process (slot >= Wworld): when JOIN admitted it (wall
                             * clock; the ledger allocates its slot from there), else 0 */
    double t_released_wall; /* a spare: when its SHUTDOWN went out (the job window's wall
                             * clock; 0: not yet): its teardown in the report starts there */
    ftrt__sdc_fp sdc[FTRT__SDC_KEEP]; /* latest fingerprints (ring, sdc_n written so far) */
    int sdc_n;
    double sdc_agreed_t; /* monotonic: arrival of its fingerprint of the last agreed step */
    /* its place in the index (rankidx.c): its host (index into c->ix.hosts, -1: none yet), its
     * neighbours in the spare list (0: none), whether an incident names it, and what it adds
     * to its host's counters now; the logical ranks whose member it is (c->members) */
    int ix_host, ix_prev, ix_next, ix_member;
    unsigned char ix_spare, ix_named, ix_failed, ix_cnamed;
} ftrt__crank;

/* A host in the coordinator's index (rankidx.c): the ranks whose HELLO named it, how many of
 * them have failed, and how many of those (world ranks >= 1) an incident names. */
typedef struct ftrt__rankidx_host {
    char name[FTRT__HOST_MAX];
    int nranks, nfailed, nnamed;
} ftrt__rankidx_host;

/* The index itself: the hosts (cap = W + 1 of them) behind a hash table of nslot slots (host
 * ids, -1 empty), the spare list (world ranks, ascending; 0 = none), the running maximum of
 * the ranks' steps (steps_at_most ranks at it; steps_ok 0: stale, recomputed when asked) and
 * the members (logical ranks) whose world rank said BYE. */
typedef struct ftrt__rankidx {
    ftrt__rankidx_host *hosts;
    int nhosts, cap;
    int *slot;
    int nslot;
    int spare_head, spare_tail, nspares;
    int64_t steps_most;
    int steps_at_most, steps_ok;
    int nbye_members;
} ftrt__rankidx;

/* Where a recovery took the resume step's state from (the report's "state_from"). */
enum { FTRT__FROM_PEERS = 0, FTRT__FROM_REPLICA = 1, FTRT__FROM_CHECKPOINT = 2,
       FTRT__FROM_ERASURE = 3 };

typedef struct ftrt__incident {
    int world_rank, logical_rank, pid, kind, epoch, spare_world_rank;
    int was_spare; /* an unused hot spare: removed from the pool, nothing to recover */
    int shrunk;    /* no hot spare was left: the job shrank (FTRT_NO_SPARE=shrink) */
    int folded_onto; /* no hot spare was left: the world rank its data folded onto, else -1 */
    double t_detect, t_detect_wall, t_last_heard, t_resumed; /* monotonic, except _wall */
    double t_fail_wall;   /* best known failure time: fault log, EOF, or last message heard */
    double t_plan_wall;   /* recovery plan sent */
    /* MTTR's phases (report.c): the last REPORT (every survivor at the recovery point) and the
     * PLAN sent (monotonic), and the RESUMED of the member that resumed last (world rank
     * phase_w), which timed its rebuild, transfer and span since the PLAN's arrival. */
    double t_ready, t_plan;
    ftrt__resumed_msg phase;
    int phase_w;
    int64_t steps_at_failure; /* the most steps any rank had done (heartbeats/reports) */
    int64_t resume_step, rework_steps;
    int state_from; /* where the resume step's state came from: FTRT__FROM_* */
    int replica_miss; /* sharded state from the checkpoint: why not from the partner replicas
                         (FTRT__RMISS_*, plan.h); FTRT__RMISS_NONE otherwise */
    int recovered;
    int withdrawn; /* FK_DRAIN: the job's loop ended before the drain's step boundary; the rank
                      stayed, nothing moved (drain.c ftrt__drain_withdraw) */
    int host_lost; /* every rank of this rank's host failed (check_host_lost) */
    int coord_lost; /* the coordinator was lost and this standby took over (takeover.c) */
    /* FK_SDC only: the step whose fingerprints disagreed, the last step at which they all
     * agreed (-1: none yet), whether a majority named the rank, the verified checkpoint every
     * member reloads (-1: none, the majority's state in memory is kept), the checkpoints
     * un-committed as untrusted */
    int64_t sdc_step, sdc_agreed_step, sdc_ckpt;
    int sdc_majority, sdc_uncommitted;
} ftrt__incident;

/* Fingerprints of one (epoch, step) received so far, to compare the step once, when the last
 * member's arrives (sdc_vote.c ftrt__sdc_vote_take). */
typedef struct ftrt__sdc_count {
    int64_t step;
    int epoch, count;
} ftrt__sdc_count;

/* Scratch arrays of W entries each (no O(W) arrays on the stack), allocated once by
 * coordinator.c. */
typedef struct ftrt__coord_scratch {
    int *i;               /* sdc_vote.c: world ranks of the replicas voted bad */
    double *d1, *d2, *d3; /* progress.c: step times, compute per step, a sorted copy */
    uint64_t *u64;        /* sdc_vote.c: the members' fingerprints of one step */
    unsigned char *b;     /* sdc_vote.c: the verdict per member */
    int *fan;             /* job.c, epoch.c: the world ranks of one fan-out */
} ftrt__coord_scratch;

/* One change of the membership (membership.c). */
typedef struct ftrt__member_change {
    int epoch, logical, from, to, why; /* from/to: world ranks (to -1: a shrink); why:
                                          FTRT__MEMBER_* */
    int data_rank, ndata;              /* logical rank l's lowest data rank and how many it held
                                          (ftrt_data_ranks()) */
    double t_wall;
} ftrt__member_change;

typedef struct ftrt__coord {
    ftrt__coord_args *a; /* what the runtime gave (coordinator.h) */
    ftrt__crank *r; /* indexed by world rank; r[self] is the coordinator itself */
    /* W: the rank table's slots, the world's ranks then FTRT_JOINABLE slots for processes that
     * join (join.c), fixed (connection id W + h is host agent h); Wused: the slots in use, the
     * world's (Wworld) then one per process joined so far: a joined process's "world rank" in
     * these tables is its slot, >= Wworld, in no MPI_COMM_WORLD of the job */
    int W, Wused, Wworld;
    int N;        /* the trainers now (a shrink lowers it; N0 at the start) */
    int N0;
    int *members; /* logical rank -> world rank (written by membership.c only) */
    int *holder;  /* data rank (a logical rank at the start, whose data) -> the logical rank that
                     trains on it now, -1: nobody (shrunk); N0 entries (membership.c only; the
                     identity until a shrink or a fold) */
    int renumber_epoch; /* the last epoch a shrink or fold took effect in (its PLAN is whole to
                           everyone) */
    int nshrinks, nfolds;
    ftrt__member_change *mhist; /* its changes since the start (membership.c) */
    int nmhist, mhist_cap;
    /* the map as it was before the current drain's epoch (membership.c ftrt__members_save),
     * put back if the drain is withdrawn: members and holder (N0 entries each), N, the
     * counters and the history's length; saved_epoch: the epoch it was saved for (0: none) */
    int *saved_members, *saved_holder;
    int saved_epoch, saved_N, saved_nshrinks, saved_nfolds, saved_renumber, saved_nmhist;
    int epoch, phase, result;
    int aborted; /* job_abort() ended the job: no process of the world calls MPI_Finalize */
    ftrt__incident *inc;
    int ninc;
    int64_t last_committed;
    int ncommitted, nckpt_failed;
    int nckpt_skipped;   /* a trainer skipped it (FTRT_CKPT_POLICY=skip, staging busy) */
    int nckpt_abandoned; /* in flight when the epoch changed */
    struct ftrt__ckpt_track *ckpt_track; /* checkpoints in flight (track.c) */
    double t_start, t_end, abort_deadline;
    double status_written;
    int status_dirty; /* 1: progress (written at most every 0.25 s), 2: membership (now) */
    double last_ping, last_window;
    int nwindows;              /* progress windows measured (progress.c) */
    double t_running;          /* monotonic: when the job started running (job.c) */
    double median_step_s;      /* median over trainers of the last window's step time */
    int rejected_connections;  /* bad hello, wrong secret, duplicate rank, no hello in time */
    int protocol_errors;       /* malformed or oversized messages from identified ranks */
    int njoined;               /* processes admitted by JOIN (join.c) */
    int join_welcome;          /* the slot admitted by the JOIN just read, whose JOIN_OK the loop
                                  sends (coordinator.c), else 0 */
    int join_refused;          /* JOINs refused (join.c; those with a bad secret or version
                                  count as rejected connections too) */
    int stall_reports;         /* collective hangs with no rank behind (reported only) */
    char listen_addr[64];
    int listen_port;
    double t_start_wall;       /* job window start (the coordinator's ftrt_init entry) */
    double metrics_written, progress_printed;
    double first_commit_wall, last_commit_wall;
    int64_t progress_steps;
    double progress_t;
    int final_written; /* the report is written: the status file's last write says "final" */
    /* silent data corruption check (FINGERPRINT messages; sdc_vote.c) */
    int sdc_checks;            /* steps whose fingerprints were compared */
    int64_t sdc_agreed_step;   /* last step at which every member's fingerprint agreed, or -1 */
    double sdc_agreed_t;       /* monotonic: the first arrival of that step's fingerprints */
    int64_t sdc_verified_below; /* committed checkpoints of steps below this hold verified state */
    int64_t sdc_judged_step;   /* last step compared in epoch sdc_judged_epoch */
    int sdc_judged_epoch;
    int64_t sdc_rollback;      /* >= 0: the next plan reloads this verified checkpoint */
    int sdc_unresolved;        /* corruption found while the job was finishing: it fails */
    double sdc_fp_s;           /* seconds trainers spent fingerprinting (sum over ranks) */
    int64_t sdc_nfp;           /* fingerprints received */
    int sdc_uncommitted;       /* checkpoints the last sdc_distrust() un-committed */
    ftrt__incident sdc_cur;    /* the SDC being reported: add_incident() copies its sdc_ fields */
    ftrt__sdc_count sdc_count[2 * FTRT__SDC_KEEP];
    /* the loop at scale (docs/detection-and-recovery.md "Control plane") */
    int ep;                    /* epoll instance: listeners, pending connections, ranks, host
                                  agents, commits (keys: FTRT__KEY) */
    int watch_head, watch_tail; /* the silence watch (ids, 0 = empty) */
    int txw_head, txw_tail;    /* the send watch: connections whose send queue holds bytes,
                                  oldest mark first (conn.c; ids, 0 = empty) */
    ftrt__hlink *hl;           /* host agents' connections, nhl of them (capacity W) */
    int nhl;
    int norphans;              /* ranks whose host agent was lost, not back yet */
    int nmoving;               /* ranks moving to a new host agent whose MOVE waits */
    int *mc_list, *mc_cnt, *mc_off; /* ftrt__coord_multicast's scratch (4W, W, W entries) */
    int *mc_grp;               /* its relay groups' starts (W entries) */
    int *relay_of;             /* each relay group's relay (a link), or -1 (W entries; fanout.c) */
    int relay_g;               /* host agents per relay group (1: no relay groups; fanout.c) */
    int catch_up_due;          /* some link's catch_up is set (ftrt__links_catch_up) */
    double epoch_t_fail;       /* the current epoch's FAILURE: its failure time (wall) */
    /* drains (drain.c): the current epoch is a drain's, entered at the trainers' next step
     * boundary (its FAILURE's boundary flag) until made urgent; when it was opened and when its
     * first REPORT was seen (monotonic, 0: none); the control directory's last read */
    int epoch_soft;
    int drain_urgent; /* a failure joined the drain's epoch: it is made urgent at once */
    double drain_t, drain_first_report, control_polled;
    int64_t drain_step;  /* the drain's step boundary: steps done when trainers enter it */
    double drain_wait_s; /* how long the epoch waits for that boundary before made urgent */
    int ndrain_asked;   /* ranks with drain_asked set */
    /* SHARD_DONEs of the epoch before a drain's that arrived while it waited for its step
     * boundary (the trainers still train in it; drain.c): replayed if the drain is withdrawn */
    struct ftrt__held_sd {
        int w;
        ftrt__ckpt_msg cm;
    } held_sd[64];
    int nheld_sd;
    int sigterm_init, sigterm_seen; /* this process's SIGTERMs when the loop began / handled */
    int mark_fd;               /* the coordinator's mark on its host (ftrt__local_mark), or -1 */
    uint64_t secret;           /* the job's hello secret */
    int hb_ms;                 /* the heartbeat period the WELCOME asks for */
    ftrt__plan_msg *plan_delta, *plan_full; /* the current epoch's PLANs (until resumed) */
    size_t plan_delta_len, plan_full_len;
    double plan_t_ready, plan_t_sent; /* monotonic: the current epoch's last REPORT, PLAN out */
    double plan_hold_until; /* monotonic: the latest suspect_until of any rank (0: none) */
    ftrt__ckpt_msg last_commit; /* the newest COMMIT sent (step -1: none) */
    int nhello;                /* ranks that said a valid hello */
    int nfailed;               /* ranks declared failed (role FTRT__ROLE_FAILED) */
    int nreports, nresumed;    /* REPORTs / RESUMEDs of the current epoch's members so far */
    int npromoting;            /* spares promoted in the current recovery */
    int maybe_done;            /* a BYE or a failure since all_done() last said no */
    int ping_next;             /* next world rank to PING in this round */
    double ping_round;         /* monotonic start of the current PING round */
    double status_cost;        /* seconds the last status file write took */
    struct ftrt__committer *committer; /* commits run off the loop (committer.h) */
    int64_t commit_submitted;  /* highest step handed to the committer, or -1 */
    ftrt__coord_scratch s;     /* scratch arrays of W entries */
    ftrt__rankidx ix;          /* hosts, spares, the most steps, BYEs (rankidx.c) */
    /* the standby coordinator (standby.c, takeover.c; docs/detection-and-recovery.md
     * "Standby coordinator") */
    int self;                  /* this coordinator's world rank: 0, or the standby that took over */
    int term;                  /* takeovers before this coordinator's (0: world rank 0's) */
    int sb_w;                  /* the standby's world rank, 0: none */
    int sb_ready;              /* its STANDBY_AT arrived and every rank was told (NEXT_COORD) */
    ftrt__coord_at sb_at;      /* where it listens */
    uint64_t sb_seq, sb_acked; /* SYNCs sent to it / acknowledged by it */
    double sb_sent_t;          /* monotonic: the oldest SYNC not acknowledged yet was sent */
    double sb_next_sync, sb_next_try; /* the next lazy SYNC; the next appointment attempt */
    int sb_logged;             /* "no standby" logged */
    int sb_remote;             /* the standby is on another host than this coordinator's */
    double offhost_heard;      /* monotonic: the last message from a host other than this one */
    struct { int64_t step; int epoch; uint64_t seq; } held[64]; /* commits waiting for the
                                  standby's acknowledgement (commits.c), oldest first */
    int nheld;
    int takeover_inc;          /* the takeover's incident (index into inc), or -1 */
    int takeover_old;          /* the world rank of the coordinator taken over from */
    uint64_t failure_seq, plan_seq; /* the SYNCs of the epoch's FAILURE and PLAN (epoch.c) */
    int failure_due, plan_due; /* sent once the standby acknowledged them */
    int failure_sent_epoch, plan_sent_epoch; /* the newest epoch whose FAILURE / PLAN this
                                  coordinator sent (0: none; the status file shows them) */
    int reports_in_epoch;      /* the newest epoch whose survivors' REPORTs this coordinator
                                  all had (0: none; the status file shows it) */
    double plan_test_until;    /* monotonic: FTRT_TEST_PLAN_DELAY_MS holds the PLAN until (0) */
    double takeover_back_t;    /* monotonic: the last rank back during the takeover (0: none) */
    int deposed;               /* a standby took over from this coordinator: it gives up */
    int claim_pending;         /* took over, the term not claimed until a rank of a third host
                                  is back (takeover.c): nothing is decided or written before */
    double claim_deadline;     /* monotonic: else it gives up then (it is the one cut off) */
    struct ftrt__listener *lis; /* the listening socket and the connections without a hello */
} ftrt__coord;

/* epoll keys of c->ep: kind << 32 | index. */
enum { FTRT__KEY_LISTEN = 1, FTRT__KEY_PENDING = 2, FTRT__KEY_RANK = 3, FTRT__KEY_COMMIT = 4,
       FTRT__KEY_HOST = 5 };
#define FTRT__KEY(kind, i) (((uint64_t)(kind) << 32) | (uint32_t)(i))

/* ---- rankidx.c: the hosts, the spares, the most steps and the members' BYEs, kept up to date */
/* Allocates the index for c->W ranks (c->r allocated, every host "") and builds it. Returns 0
 * or -ENOMEM (ftrt__rankidx_free frees what was made). */
int ftrt__rankidx_alloc(ftrt__coord *c);
void ftrt__rankidx_free(ftrt__coord *c);
/* Builds the index again from c->r[] and c->inc (after a bulk change: a standby's restored
 * state). O(W + incidents). */
void ftrt__rankidx_rebuild(ftrt__coord *c);
/* Writes world rank w's host name (at most FTRT__HOST_MAX - 1 bytes of `host`, which need not
 * end in NUL within them) and moves it to that host. O(1) expected. */
void ftrt__rank_set_host(ftrt__coord *c, int w, const char *host);
/* Writes world rank w's role (FTRT__ROLE_*), its host's failed counters and the spare list
 * following. O(1), or O(spares) for a spare that joins out of ascending order. */
void ftrt__rank_set_role(ftrt__coord *c, int w, int role);
/* An incident names world rank w (>= 1; others ignored). O(1). */
void ftrt__rank_named(ftrt__coord *c, int w);
/* 1 when a rank of world rank >= 1 on world rank w's host has failed and an incident names
 * it, else 0. O(1). */
int ftrt__host_has_failed(const ftrt__coord *c, int w);
/* The number of ranks on world rank w's host (world rank 0 included) when every one of them
 * has failed, else 0. O(1). */
int ftrt__host_all_failed(const ftrt__coord *c, int w);
/* The hot spares (world ranks >= 1 of role spare) in ascending order: the first, and the one
 * after spare w; 0 at the end. O(1). */
int ftrt__spare_first(const ftrt__coord *c);
int ftrt__spare_next(const ftrt__coord *c, int w);
/* Writes world rank w's steps done (heartbeat, BYE) and keeps the maximum. O(1). */
void ftrt__rank_set_steps(ftrt__coord *c, int w, int64_t steps);
/* The most steps any world rank >= 1 reported (0 when none is above 0): O(1), O(W) once after
 * the ranks at the maximum all went back (a rollback). */
int64_t ftrt__steps_most(ftrt__coord *c);
/* 1 while that maximum is stale (the periodic work then recomputes it off a failure's path). */
int ftrt__rankidx_stale(const ftrt__coord *c);
/* ---- membership.c: the map from logical rank to process and its history ---- */
/* Why logical rank l changed process: the job's start, a failure, a drain, a standby's
 * restore of the map it was sent. */
enum {
    FTRT__MEMBER_START = 0,
    FTRT__MEMBER_FAILURE,
    FTRT__MEMBER_DRAIN,
    FTRT__MEMBER_TAKEOVER,
    FTRT__MEMBER_SHRINK,
    FTRT__MEMBER_FOLD
};
/* Logical rank l's member is world rank w from now on (c->members[l] = w), for `why`
 * (FTRT__MEMBER_*), kept in the history with the epoch it takes effect in (the next one while
 * running, the one collecting REPORTs when it joins it; not the start's). The only
 * writer of c->members (tools/check-layers). O(1) amortized. */
void ftrt__member_set(ftrt__coord *c, int l, int w, int why);
/* Logical rank l leaves the membership with no process in its place (its member failed and no
 * hot spare is left; docs/detection-and-recovery.md "No spare left"): its data ranks go to
 * logical rank `to` (FTRT_NO_SPARE=fold: a survivor trains on them as well) or to nobody (to
 * -1, FTRT_NO_SPARE=shrink: skipped); the logical ranks above l move down by one (members,
 * holders and each member's r[].logical), N falls by one, the change is kept in the history
 * (to_world_rank: to's process, or -1) and the epoch it takes effect in is remembered
 * (c->renumber_epoch: its PLAN goes whole to every member, each learning its new logical rank
 * and data ranks). Needs N >= 2 and to != l. O(N + N0). */
void ftrt__member_remove(ftrt__coord *c, int l, int to);
/* What a silent data corruption vote among the trainers present can decide (sdc_vote.c):
 * "majority" (3 or more: the corrupted one named and replaced), "detect_only" (2: a
 * disagreement rolls every member back to a verified checkpoint), "none" (1, or the check
 * off). failure.c logs it once the job is down to 2 or 1 (a shrink or fold). */
const char *ftrt__sdc_vote_kind(const ftrt__coord *c);
/* No hot spare is left for trainer w (failed or drained; docs/detection-and-recovery.md "No
 * spare left"): under FTRT_NO_SPARE=shrink or fold its logical rank leaves the membership
 * (ftrt__member_remove), its data ranks skipped or given to the survivor holding the fewest,
 * recorded in inc (shrunk, folded_onto; may be NULL) and logged. Returns 1, 0 (nothing done)
 * under stop or when w is the last trainer, or -1 (nothing done) under fold when no survivor
 * has room for its data ranks (FTRT_FOLD_MAX). O(N x N0). (failure.c) */
int ftrt__no_spare_remove(ftrt__coord *c, int w, ftrt__incident *inc);
/* The survivor to fold logical rank l onto: the logical rank other than l holding the fewest
 * data ranks, the lowest on a tie, among those that would then hold at most max (0: no
 * limit; FTRT_FOLD_MAX). -1 when none has room. O(N x N0). */
int ftrt__fold_target(const ftrt__coord *c, int l, int max);
/* A standby's map from its SYNC: n (at most c->N0) int32 world ranks at p, then c->N0 int32
 * holders (unaligned); sets c->N = n. Returns 0 or FTRT_EPROTO (a world rank out of [1, W), a
 * holder out of [-1, n), n out of [1, N0]). The caller rebuilds the index after. */
int ftrt__members_restore(ftrt__coord *c, const unsigned char *p, int n);
/* Saves the map (members, holders, N, the shrink and fold counters, the history's length)
 * before drains change it for epoch `epoch` (a drain's epoch about to open), for
 * ftrt__members_withdraw. O(N0). */
void ftrt__members_save(ftrt__coord *c, int epoch);
/* Puts back the map saved for the current epoch (a withdrawn drain: the job's loop ended before
 * its step boundary), each member's r[].logical with it; the history forgets the changes made
 * since. Returns 0, or -1 (nothing done) when none was saved for c->epoch. The caller sets the
 * roles and rebuilds the index after. O(N0). */
int ftrt__members_withdraw(ftrt__coord *c);
/* The report's "membership": each change of the history (docs/report-schema.md). */
struct ftrt__jw;
void ftrt__membership_json(struct ftrt__jw *w, const ftrt__coord *c);
void ftrt__membership_free(ftrt__coord *c);
/* World rank w said BYE (r[w].said_bye = 1). O(1). */
void ftrt__rank_said_bye(ftrt__coord *c, int w);

/* ---- conn.c: connections, sends, the silence watch, PINGs, the listener ---- */
/* Sends one message to world rank w: on its own connection, or through its host agent (a
 * RELAY, ftrt__link_send); nothing when it has neither. Never blocks: what the socket does not
 * take now waits in the connection's send queue (conn.c "the send queues"), in order. A failed
 * send is logged (debug) and left to the connection's EOF; a queue past its bound is left to
 * ftrt__tx_check. */
void ftrt__coord_send(ftrt__coord *c, int w, uint32_t type, const void *p, uint32_t len);
/* Sends one message to host agent h: `type` with payload prefix (plen bytes), followed, when
 * inner_type != 0, by the whole message {inner_type, len} and its payload (RELAY, MULTI,
 * FANOUT; ftrt__msg_send2's layout). Never blocks, as ftrt__coord_send. Returns 0, -ENOTCONN
 * (h is lost), -ENOBUFS (its queue is past its bound: h is about to be declared lost, the
 * message is dropped), or another -errno (the connection is broken: its EOF follows). */
int ftrt__link_send(ftrt__coord *c, int h, uint32_t type, const void *prefix, uint32_t plen,
                    uint32_t inner_type, const void *payload, uint32_t len);
/* Connection id (world rank w's own, or W + h for host agent h's) is writable (EPOLLOUT):
 * its send queue goes out as far as the socket takes it. */
void ftrt__tx_ready(ftrt__coord *c, int id);
/* The connection (id: world rank w, or W + h for host agent h) at the send watch's head when
 * its peer is to be declared lost by `now`: its send queue went past its byte bound, or holds
 * bytes queued more than the heartbeat timeout ago (its peer stopped reading; one that became
 * writable meanwhile is written first, and may no longer be); why is logged. Else 0. The
 * caller declares it (ftrt__tx_check) or closes its queue, or the same id comes again. O(1)
 * per connection written. */
int ftrt__tx_due(ftrt__coord *c, double now);
/* At the job's end: writes the send queues out, waiting for the sockets as long as bytes go
 * out: until no queue took a byte for idle_s seconds, and until `until` (monotonic) at most;
 * what is left then is dropped when the connections close. A peer that reads slowly (a small
 * window, delayed ACKs) thus still gets its FAREWELL; one that stopped reading holds the exit
 * idle_s. */
void ftrt__tx_drain(ftrt__coord *c, double idle_s, double until);
/* Empties connection id's send queue (it closes, or changes hands) and returns the bytes that
 * were still to go (0: none was lost). */
size_t ftrt__tx_close(ftrt__coord *c, int id);
/* ---- fanout.c: fan-outs and relay groups (docs/detection-and-recovery.md "Relay groups") */
/* Sends one message to each of the n world ranks ws[] (the order is not kept): one send per
 * rank with its own connection; for the ranks behind host agents one FANOUT per relay group
 * (FAILURE, PLAN, COMMIT, ABORT, NEXT_COORD) and one MULTI per host agent not behind a relay
 * (O(groups + direct hosts) sends); then the PINGs that fell due. */
void ftrt__coord_multicast(ftrt__coord *c, const int *ws, int n, uint32_t type, const void *p,
                           uint32_t len);
/* The relay groups' size from the world's (or FTRT_TEST_RELAY_GROUP), no relay chosen yet.
 * Call once W is set and relay_of allocated. */
void ftrt__relay_init(ftrt__coord *c);
/* Host agent h's RELAY_AT (payload: ftrt__coord_at): where it listens is kept; the first of
 * its group to say it, with no relay there, becomes the group's relay and the group's other
 * host agents are told (RELAY_VIA); a member is told where its relay listens (once per relay).
 * Returns 0 or FTRT_EPROTO (a bad port). */
int ftrt__relay_on_at(ftrt__coord *c, int h, const void *payload);
/* Relay h's RELAY_PEER (payload: ftrt__relay_peer): a member's fan-outs go through h from now
 * on (up 1), or directly again (up 0: RELAY_VIA port 0 and its ranks caught up). Returns 0 or
 * FTRT_EPROTO (h is not a relay). */
int ftrt__relay_on_peer(ftrt__coord *c, int h, const void *payload);
/* Host agent h's connection is lost: if it was a relay, its members fall back to direct
 * fan-outs (caught up, ftrt__rank_catch_up) and the group's first live host agent that
 * listens becomes its relay (its members told: RELAY_VIA). */
void ftrt__relay_link_lost(ftrt__coord *c, int h);
/* 1 when world rank w can be reached: its own connection or a host agent. */
int ftrt__rank_connected(const ftrt__coord *c, int w);
/* World rank w said a valid HELLO (on its own connection or through a host agent): it is
 * known from now on (pid, host, heard now). */
void ftrt__rank_identify(ftrt__coord *c, int w, const ftrt__hello *hello);
/* Takes world rank w off the control plane: closes its own connection (which takes it out of
 * the epoll set) or detaches it from its host agent (CUT: the agent closes its socket), and
 * takes it out of the watch. */
void ftrt__coord_drop(ftrt__coord *c, int w);
/* Sends world rank w's host agent a CUT (fence 1: the agent also SIGKILLs w's process) and
 * returns 1, or returns 0 when no live host agent serves w. w stays attached: the caller
 * drops it. */
int ftrt__host_cut(ftrt__coord *c, int w, int fence);
/* Closes host agent h's connection and takes it out of the watch (its ranks stay attached:
 * the caller decides what becomes of them). */
void ftrt__host_drop(ftrt__coord *c, int h);
/* The silence watch over ids (world rank w, or W + h for host agent h). touch: id was just
 * heard and moves to the tail; remove: it leaves the watch. O(1). */
void ftrt__silence_touch(ftrt__coord *c, int id);
void ftrt__silence_remove(ftrt__coord *c, int id);
/* When id was last heard (monotonic). */
double ftrt__silence_last(const ftrt__coord *c, int id);
/* Sends the PINGs that fell due by `now`: every connection (a rank's own, or a host agent's)
 * one per PING period, spread over it. */
void ftrt__ping_due(ftrt__coord *c, double now);
/* Called with the index k of every message of a fan-out to every rank: every 256 messages the
 * PINGs that fell due go out, so that a long fan-out never starves a rank of messages. */
void ftrt__fanout_pump(ftrt__coord *c, int k);
/* Milliseconds epoll may wait: until the next PINGs fall due (batches at least 2 ms apart), the
 * silence watch's or the send watch's head expires, or 10 ms (the periodic work). */
int ftrt__coord_wait_ms(const ftrt__coord *c, double now);
/* The listener: listen_fd (nonblocking from here on, owned: closed by ftrt__listener_close,
 * or here when nothing could be allocated) joins c->ep; each rank may have one pending
 * connection per address it was offered (naddr). Returns 0 or -errno / -ENOMEM (then call
 * ftrt__listener_close). */
int ftrt__listener_open(ftrt__coord *c, int listen_fd, int naddr, uint64_t secret);
/* Accepts every waiting connection (KEY_LISTEN readable). */
void ftrt__listener_accept(ftrt__coord *c);
/* Reads pending connection idx (KEY_PENDING readable): a valid HELLO makes it world rank w's
 * connection (KEY_RANK), a valid HOST_HELLO a host agent's (KEY_HOST); anything else closes it
 * and counts it as rejected. Returns w when a rank that had joined before came back on its own
 * connection (its host agent was lost: the caller catches it up), -(h + 1) when host agent h
 * joined (the caller handles what came with its HOST_HELLO), else 0. */
int ftrt__listener_identify(ftrt__coord *c, int idx);
/* The index of the first pending connection at or after slot `from` accepted more than 5 s
 * ago without a complete HELLO, or -1. A scan starts with from = 0 (at most every 0.1 s, else
 * -1) and goes on with the index returned + 1. The caller reads the connection once more
 * (ftrt__listener_identify: its HELLO may be waiting unread behind a busy loop) before
 * ftrt__listener_reject_stale. */
int ftrt__listener_stale(ftrt__coord *c, double now, int from);
/* Closes pending connection idx when it is still pending (no valid HELLO in time), counts it
 * rejected and logs a warning naming the peer's address. */
void ftrt__listener_reject_stale(ftrt__coord *c, int idx);
/* Closes the listener and every pending connection, frees it. */
void ftrt__listener_close(ftrt__coord *c);

/* ---- standby.c: the standby coordinator, seen from the coordinator ---- */
/* Once per loop's periodic work: appoints a standby when none is (a hot spare on another host
 * than this coordinator's; on a one-host job any spare), dismisses one that is no longer a
 * spare (promoted, failed), sends the lazy SYNC once a second, and dismisses a standby that
 * did not acknowledge a SYNC within half the heartbeat timeout. Returns 1 when the standby
 * was dismissed (the caller releases the commits that waited for it), else 0. */
int ftrt__standby_tick(ftrt__coord *c, double now);
/* Dismisses the standby (STANDBY -1 to it, NEXT_COORD "none" to every rank), with why
 * logged. No-op without one. */
void ftrt__standby_dismiss(ftrt__coord *c, const char *why);
/* Sends the standby the state to go on from (SYNC, O(W + incidents) bytes). Returns its
 * sequence number, or 0 when there is no standby ready. */
uint64_t ftrt__standby_sync(ftrt__coord *c);
/* 1 when SYNC seq is acknowledged, or there is no standby (seq 0 or none ready). */
int ftrt__standby_acked(const ftrt__coord *c, uint64_t seq);
/* STANDBY_AT from world rank w: the standby's address; every rank is told (NEXT_COORD) and
 * the first SYNC goes out. */
void ftrt__standby_at(ftrt__coord *c, int w, const ftrt__coord_at *at);
/* SYNC_ACK from world rank w. */
void ftrt__standby_ack(ftrt__coord *c, int w, const ftrt__epoch_msg *m);
/* NEXT_COORD to world rank w (a rank that came back on a new connection). */
void ftrt__standby_tell(ftrt__coord *c, int w);

/* ---- joins (join.c) ------------------------------------------------------------------------ */

/* JOIN j (its first message on a new connection, whole) asks for a hot spare's place. Admitted:
 * the next join slot w (>= Wworld) is a SPARE now, c->join_welcome = w, and w is returned; the
 * caller hands it the connection, identifies it by j's pid and host (ftrt__rank_identify), and
 * the loop then calls ftrt__join_welcome. Else the
 * refusal's code, one line in why[n] (NUL-terminated) for JOIN_REFUSED, counted and logged:
 * FTRT_EJOIN (wrong secret, another join protocol, a job that takes no joins, has ended, or has
 * no join slot left) or FTRT_ESTATE (starting or recovering: the joiner may try again).
 * Coordinator loop only. O(log W) (the spare list). */
int ftrt__join_admit(ftrt__coord *c, const ftrt__join *j, char *why, size_t n);
/* JOIN_OK to the joiner just admitted in slot w (its connection handed over), and where the
 * standby coordinator listens. (service.c) */
void ftrt__join_welcome(ftrt__coord *c, int w);
/* 1 when a standby took over from this coordinator (the checkpoint directory's
 * `coordinator.term` names this job's secret and a later term; a file of an earlier launch
 * names another secret): c->deposed is set, the caller writes nothing more. Reads one small
 * file. */
int ftrt__standby_deposed(ftrt__coord *c);
/* 1 when this coordinator is cut off from the job and gives up (c->deposed is set): it has a
 * standby on another host, which takes over when it hears nothing for the heartbeat timeout,
 * and it has heard nothing from any other host for half of it (at least 2 heartbeat
 * periods), i.e. before its own silence detection would declare their ranks failed. Called
 * before the silence checks; O(1). */
int ftrt__standby_cut_off(ftrt__coord *c, double now);
/* Writes the term file: the job's secret (hex) and c->term (temp file, fsync, rename).
 * Returns 0 or -errno. */
int ftrt__standby_claim(ftrt__coord *c);
/* Restores the coordinator's state from a SYNC payload (len bytes) taken by the standby.
 * Returns 0, FTRT_EPROTO (malformed, or another world) or -ENOMEM. */
int ftrt__standby_restore(ftrt__coord *c, const void *p, size_t len);

/* ---- takeover.c: a standby taking over (called by coordinator.c only) ---- */
/* Restores the state from t's SYNC, claims the next term, records the takeover's incident and
 * expects every other rank back within the heartbeat timeout. Returns 0, FTRT_EPROTO or
 * -ENOMEM. */
int ftrt__takeover_begin(ftrt__coord *c, const ftrt__takeover_args *t);
/* Once every rank expected is back or declared failed, the takeover is recovered (MTTR). */
void ftrt__takeover_check(ftrt__coord *c);
/* World rank w came back after the takeover: a rank of another host than this one's and the
 * old coordinator's proves this standby is not the side cut off, and the term is claimed (the
 * term file) if it was not yet. */
void ftrt__takeover_reached(ftrt__coord *c, int w);
/* 1 when world rank w, back after the takeover, is a suspect of its host's loss (the plan then
 * waits the orphan grace for it, epoch.c): it runs on the old coordinator's host, which is not
 * this one's (the process lost there was its host's link to the coordinator, as a host agent is
 * elsewhere, and the host may be going down process by process). Every other rank is not: its
 * host lost no process, and a takeover in PH_COLLECT plans without waiting. O(1). */
int ftrt__takeover_suspect(const ftrt__coord *c, int w);
/* A claim still pending at its deadline (no rank of a third host came back within 0.9 x the
 * heartbeat timeout): this standby is the one cut off and gives up without claiming the term
 * (c->deposed). Returns 1 then. O(1). */
int ftrt__takeover_cut_off(ftrt__coord *c, double now);

/* ---- job.c: the job's start, end and abort ---- */
/* Every rank said hello: WELCOME to each (role, logical rank, heartbeat period), PH_RUNNING. */
void ftrt__job_start(ftrt__coord *c);
/* Ends the job with `code` (logged with why): members get ABORT, spares SHUTDOWN with the code
 * (< 0: the job failed); ranks still connected at the deadline are fenced (ftrt__job_check_end).
 * No process of an aborted job calls MPI_Finalize (a member that gets ABORT may be stuck in a
 * collective): Open MPI 4.1's MPI_Finalize can hang in its PMIx fence when some processes of the
 * world call it and others exit without it, so the spares and the coordinator skip it too
 * (c->aborted, a->aborted). No-op once aborting or done. */
void ftrt__job_abort(ftrt__coord *c, int code, const char *why);
/* Fences world rank w, a rank declared failed that may still be alive (it must never rejoin,
 * write or hold its GPU): SIGKILL when it runs on the coordinator's host (by pid,
 * ftrt__fence), else a CUT with fence to the host agent that serves it, which SIGKILLs it
 * through the pidfd it took when w connected (runtime/hostagent.c). A rank on another host
 * with its own connection (its host agent was lost) cannot be fenced from here. Called before
 * w is dropped (the drop forgets its host agent). */
void ftrt__job_fence(ftrt__coord *c, int w);
/* 1 once a member said BYE (the job is finishing: no recovery is possible any more). O(1). */
int ftrt__job_finishing(const ftrt__coord *c);
/* Hot spares still in the pool (world ranks >= 1 of role spare). O(1). */
int ftrt__live_spares(const ftrt__coord *c);
/* The end of the job, checked by the periodic work: every member said BYE or failed (the
 * trainers that said BYE get their FAREWELL, the spares SHUTDOWN, PH_DONE), or an abort whose
 * ranks all left or whose deadline passed (the others are fenced, PH_DONE). */
void ftrt__job_check_end(ftrt__coord *c, double now);

/* ---- commits.c: checkpoint commits ---- */
/* SHARD_DONE from world rank w: once every trainer reported, the checkpoint is committed (on
 * the commit thread), failed or skipped, and every member gets the COMMIT. */
void ftrt__commit_shard_done(ftrt__coord *c, int w, const ftrt__ckpt_msg *cm);
/* Takes the results of the commits the commit thread finished (KEY_COMMIT readable). */
void ftrt__commits_take(ftrt__coord *c);
/* Waits for the commits in flight and takes their results. */
void ftrt__commits_drain(ftrt__coord *c);
/* Starts the commits that waited for the standby's acknowledgement: those acknowledged, or all
 * when `all` (the standby was dismissed). */
void ftrt__commits_release(ftrt__coord *c, int all);

/* ---- epoch.c: the epoch change ---- */
/* Opens epoch c->epoch + 1: PH_COLLECT, FAILURE {epoch, t_fail_wall} to every member not being
 * promoted. */
void ftrt__epoch_open(ftrt__coord *c, double t_fail_wall);
/* Sends world rank w the current epoch's PLAN again (it came back after its host agent was
 * lost before it said RESUMED). */
void ftrt__epoch_resend_plan(ftrt__coord *c, int w);
/* The epoch's FAILURE, then its PLAN, go out once the standby acknowledged the SYNC that
 * carries them (at once without a standby; a standby that does not acknowledge within half the
 * heartbeat timeout is dismissed, which releases them too). Called when a SYNC_ACK arrives,
 * by the epoch change itself and once per loop iteration (O(1)). */
void ftrt__epoch_release(ftrt__coord *c);
/* In PH_COLLECT: once every surviving member reported for this epoch, the PLAN goes out
 * (PH_RESUMING), or the job aborts when no plan exists; unless a member of a host whose agent
 * was lost is still within its grace (suspect_until): the plan then waits for the grace's end
 * (coordinator.c calls again) or for that member's failure, which joins this epoch. O(N). */
void ftrt__epoch_check_reports(ftrt__coord *c);
/* In PH_RESUMING: once every member said RESUMED, the incidents are recovered and the job runs
 * again (PH_RUNNING). Returns 1 when it did (the caller then compares the fingerprints that
 * arrived meanwhile), else 0. O(N). */
int ftrt__epoch_check_resumed(ftrt__coord *c);

/* ---- failure.c: a rank declared failed ---- */
/* Records incident kind for world rank w (-1: silent data corruption with no rank named) with
 * its detection and best known failure time. Returns it, or NULL without memory. */
ftrt__incident *ftrt__incident_add(ftrt__coord *c, int w, int kind);
/* ---- drain.c: drains (docs/detection-and-recovery.md "Drain") ---- */
/* Drains world rank w: a trainer's logical rank goes to a hot spare in an epoch entered at one
 * step boundary a few steps ahead of the trainers; a hot spare leaves the pool. Returns 0
 * (done; why says what was done), 1 (refused; why says why: the coordinator, a failed or
 * drained rank, no spare left, the job finishing or over) or 2 (not now: a recovery or the
 * start is in progress; ask again). why: n bytes, NUL-terminated. Coordinator loop only. */
int ftrt__drain_rank(ftrt__coord *c, int w, char *why, size_t n);
/* Makes the current drain's epoch urgent (a plain FAILURE to the members that have not
 * stopped, DRAIN "now" to a drained trainer still there); nothing when it is not a drain's
 * boundary epoch. reason: for the log. */
void ftrt__drain_harden(ftrt__coord *c, const char *reason);
/* The periodic part: the urgent epoch when due, the control directory every second, the
 * drains ranks asked for that had to wait, and this process's SIGTERM (FTRT_SIGTERM=drain:
 * the job is aborted). */
void ftrt__drain_periodic(ftrt__coord *c, double now);
/* DRAIN_ME from world rank w (it received SIGTERM): drained now, or once the recovery in
 * progress is over; a refusal is logged (the rank keeps training). */
void ftrt__drain_asked(ftrt__coord *c, int w);
/* A trainer (world rank w, a member or the drained one) said BYE (*bye) while the current
 * drain's epoch still waits for its step boundary: when nobody has reached the boundary
 * (no REPORT, bye->steps_done below it, no failure joined) its loop ended first, and so will
 * every trainer's (they take each step's collective together), so the drain is withdrawn:
 * the drained trainers are members again, the promoted spares back in the pool, the shrunk or
 * folded logical ranks back (the saved map), the incidents marked withdrawn, the phase
 * running; the job then ends as it would have without the drain. Returns 1 (withdrawn), 0
 * (not a withdraw: judged as any BYE). Coordinator loop only. O(W + incidents + N0). */
int ftrt__drain_withdraw(ftrt__coord *c, int w, const ftrt__bye *bye);
/* SHARD_DONE *cm from world rank w that the current epoch does not take: kept when it is of
 * the epoch before a drain's that still waits for its step boundary (for a withdraw to
 * decide), else dropped (abandoned). O(1). */
void ftrt__drain_hold_shard_done(ftrt__coord *c, int w, const ftrt__ckpt_msg *cm);
/* The incidents of kind FK_DRAIN. O(incidents). */
int ftrt__drains(const ftrt__coord *c);
/* The hot spare for world rank w, leaving (failed or drained): failure.c; -1 when none is
 * left. */
int ftrt__pick_spare(const ftrt__coord *c, int w);
/* Hot spare `spare` takes logical rank l in the recovery being planned (failure.c): the
 * standby dismissed when it is that spare, the membership changed for `why`
 * (FTRT__MEMBER_*), the spare a promoted trainer, named in inc (may be NULL). */
void ftrt__promote_spare(ftrt__coord *c, int l, int spare, int why, ftrt__incident *inc);
/* A plain FAILURE of the current epoch to its members that are not promoted spares (the
 * drain's epoch made urgent): epoch.c. */
void ftrt__epoch_failure_urgent(ftrt__coord *c);

/* Declares world rank w failed (kind: FK_*): dropped, fenced unless its connection was lost,
 * its host checked for loss; a trainer is replaced by a hot spare in a new epoch (or joins the
 * announced one), or the job aborts (no spare, during init or a plan being applied). */
void ftrt__fail(ftrt__coord *c, int w, int kind);
/* World rank w's host agent was lost (or it came back on its own connection before the
 * coordinator saw that loss): until `until` (monotonic; <= 0: the orphan grace from now) a
 * recovery plan waits for it to die with its host (epoch.c). */
void ftrt__host_suspect(ftrt__coord *c, int w, double until);
/* Host agent h is lost (kind: FK_CONNECTION_LOST on EOF, FK_HEARTBEAT_TIMEOUT on silence,
 * FK_PROTOCOL): the process it lived in is declared failed, and every other rank it served
 * becomes an orphan that may come back on its own connection within the orphan grace; ranks
 * that said BYE are simply detached. */
void ftrt__host_lost(ftrt__coord *c, int h, int kind);
/* World rank w's move to a new host agent (service.c "moves") cannot complete (that agent was
 * lost, or lost w's socket): before MOVE went out w simply stays on its own connection; after
 * it, that connection is closed and w becomes an orphan (it comes back on a new connection
 * within the orphan grace, or is declared failed with `kind`). No-op when w is not moving. */
void ftrt__move_cancel(ftrt__coord *c, int w, int kind);
/* Declares failed (with the kind their host agent was lost by) the orphans whose grace is
 * over. O(W) while there are orphans, else O(1). */
void ftrt__orphans_expire(ftrt__coord *c, double now);

/* ---- sdc_vote.c: the vote on the replicas' fingerprints ---- */
/* FINGERPRINT from world rank w: kept, and the step compared once every member sent it. A
 * repeat (the same rank, epoch and step, sent again after a host agent's loss) is ignored. */
void ftrt__sdc_vote_take(ftrt__coord *c, int w, const ftrt__fingerprint_msg *m);
/* Compares every step of this epoch that every member sent, oldest first (after a RESUMED). */
void ftrt__sdc_vote_all(ftrt__coord *c);

/* ---- progress.c: stalled progress and stragglers ---- */
/* Every second: step times over the last window (the median arms the progress detector) and
 * stragglers (compute per step above FTRT_STRAGGLER_RATIO x the median; reported only). */
void ftrt__progress_window(ftrt__coord *c, double now);
/* Declares failed a trainer whose collectives lag behind another's with no progress for the
 * progress timeout; reports a hang with nobody behind once. O(N). */
void ftrt__progress_check(ftrt__coord *c, double now);

/* ---- service.c: reading the ranks and the host agents ---- */
/* A LEDGER message of len bytes from identified world rank w: its totals, open interval and
 * FLOPs taken; its intervals appended to its timeline up to its share of
 * FTRT_TIMELINE_BUDGET_MB (ftrt__timeline_share(); none for a rank left out, whose totals
 * rebuild it). Returns 0 (also when memory ran short: that update is lost) or FTRT_EPROTO for a
 * malformed message. Event-loop thread. */
int ftrt__ledger_take(ftrt__coord *c, int w, const void *payload, size_t len);
/* Reads and handles everything available from world rank w's own connection (KEY_RANK
 * readable); EOF or a malformed message declares it failed. */
void ftrt__service(ftrt__coord *c, int w);
/* Reads and handles everything available from host agent h (KEY_HOST readable): its ranks'
 * relayed messages and HELLOs, its HOST_BEATs, its RANK_LOSTs; EOF or a malformed message loses
 * the host agent (ftrt__host_lost). */
void ftrt__service_host(ftrt__coord *c, int h);
/* World rank w came back after its host agent was lost, or after a takeover: what it may have
 * missed (WELCOME, the epoch's FAILURE or PLAN, the newest COMMIT, the abort) is sent again, and
 * it is a suspect of its host's loss for the orphan grace (ftrt__host_suspect): after a
 * takeover only where ftrt__takeover_suspect says so. */
void ftrt__rank_rejoined(ftrt__coord *c, int w);
/* Sends the MOVEs that waited for a quiet moment (no recovery in flight, no orphan, no plan
 * held). O(W) when it sends, O(1) otherwise; called by the periodic work while any waits. */
void ftrt__moves_due(ftrt__coord *c);

/* What a fan-out may have carried to world rank w is sent to it again: the abort (ABORT or
 * SHUTDOWN) while the job aborts, else the standby's address, and to a trainer the epoch's
 * FAILURE or its PLAN and the newest COMMIT (a rank takes a repeat as it took the first). */
void ftrt__rank_catch_up(ftrt__coord *c, int w);
/* Catches up every rank of the links marked catch_up (their relay lost), then clears the marks
 * and catch_up_due. O(W); the loop calls it at the end of a turn that set catch_up_due. */
void ftrt__links_catch_up(ftrt__coord *c);
/* Declares failed every watched connection silent for longer than the heartbeat timeout: a
 * rank's own, or a host agent's (ftrt__host_lost); one with unread bytes is read first. */
void ftrt__check_timeouts(ftrt__coord *c, double now);
/* Declares lost, as silent, every connection ftrt__tx_due names (its peer does not take the
 * coordinator's messages: conn.c "the send queues"): a rank as ftrt__fail with
 * FK_HEARTBEAT_TIMEOUT, a host agent as ftrt__host_lost with it. No-op while aborting or
 * done. O(1) when none is due. */
void ftrt__tx_check(ftrt__coord *c, double now);

/* ---- names.c ---- */
/* Latest injection time (unix s) for pid / world rank w at or before t_wall in the JSON-lines
 * fault log (FTRT_FAULT_LOG), or -1. */
double ftrt__fault_injected_at(const char *log, int pid, int w, double t_wall);
/* The injection time (unix s) of incident x from the fault log, or -1: the latest injection
 * into its rank at or before its detection; for silent data corruption with no rank named
 * (world rank -1), the latest injection into any rank between the last agreement of the
 * replicas (x's t_last_heard) and the detection. Reads the fault log (once per rank). */
double ftrt__incident_injected_at(const ftrt__coord *c, const ftrt__incident *x);

/* ---- goodput.c: the ledger on the coordinator ---- */
/* Per-slot totals over the job window [t_start_wall, t_end_wall] (slots = world ranks 1..W-1)
 * rebuilt from the timelines received (gaps: start-up before, teardown after, rework between a
 * failed rank's last report and its failure, down after it; a joined slot from its join),
 * and the job's figures. totals must hold W-1 rows. Returns 0 or -EINVAL. */
/* The slots' (world ranks 1..Wused-1) seconds in a job that started at j0 (wall clock) and
 * lasted wall seconds: each world slot the whole wall, a joined slot from its admission
 * (docs/join.md). The report's allocated_rank_s and the ledger's. */
double ftrt__allocated_s(const ftrt__coord *c, double j0, double wall);

int ftrt__ledger_figures(const ftrt__coord *c, double t_end_wall, double (*totals)[FTRT__IV_KINDS],
                         ftrt__goodput *g, double *useful_flops, double *peak_flops);
/* Writes "ledger", "waterfall", "advice" and "timeline" into the JSON report being streamed by w
 * (members of its object open now; the timeline rank by rank, nothing per rank held) and
 * prints the waterfall and the checkpoint-interval advice. Writes nothing when the ledger's
 * figures cannot be computed (no memory for W-1 rows of totals). Errors stay in w (ftrt__jw_close
 * returns them). */
struct ftrt__jw;
void ftrt__ledger_report(ftrt__coord *c, struct ftrt__jw *w);
/* Rewrites FTRT_METRICS_FILE (OpenMetrics text, atomically). Returns 0 or -errno. */
int ftrt__metrics_write(ftrt__coord *c, double t_wall);
/* Prints the live progress line (stderr) when enabled. */
void ftrt__progress_line(ftrt__coord *c, int final);

/* Writes the status file atomically (temp + rename). Returns 0 or -errno (logged once). */
int ftrt__status_write(ftrt__coord *c);
/* Writes the JSON report (when configured; streamed to its file, base/jsonw.h) and prints the
 * human summary on stdout. A report that cannot be written is logged, and an older report at
 * its path is removed (never taken for this job's). Returns 0 or -errno from writing the file
 * (-ENOMEM, -EOVERFLOW, -EINVAL from the writer). */
int ftrt__report_write(ftrt__coord *c);
const char *ftrt__role_name(int role);
const char *ftrt__failure_kind_name(int kind);

#endif

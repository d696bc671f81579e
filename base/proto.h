/*
 * proto.h - control-plane wire protocol (internal).
 *
 * Every message is a 12-byte header {magic, type, payload length} followed by a fixed-layout
 * payload. Fields are fixed-width and in host byte order: all ranks of one job share an
 * architecture (mpirun launches one binary). Payloads larger than FTRT__MSG_MAX, unknown types,
 * a wrong magic or a payload size that does not match its type are protocol errors: the
 * connection is dropped.
 */
#ifndef FTRT_PROTO_H
#define FTRT_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/ledger.h"

#define FTRT__MAGIC 0x46545254u /* "FTRT" */
/* This protocol has host agents (HOST_HELLO, RELAY, MULTI, HOST_BEAT, RANK_LOST): a program
 * built against more than one version of this header can test it (bench/coord_load.c). */
#define FTRT__PROTO_HOST_AGENTS 2
/* This protocol has relay groups (RELAY_AT, RELAY_VIA, PEER_HELLO, RELAY_PEER, FANOUT). */
#define FTRT__PROTO_RELAYS 1
/* RESUMED carries the member's phases (ftrt__resumed_msg), not an ftrt__epoch_msg. */
#define FTRT__PROTO_RESUMED_PHASES 1
/* PLAN version 2: its nbehind is a count, no list; each survivor knows from its own REPORT
 * whether it is behind, and the members learn who is on the data plane (ftrt__plan_behind_*).
 * Version 1 listed the survivors behind to every member. */
#define FTRT__PROTO_PLAN 2
/* This protocol has drains (DRAIN; FAILURE's boundary; docs/detection-and-recovery.md
 * "Drain"). */
#define FTRT__PROTO_DRAIN 1
/* Largest payload of any message but a PLAN, bytes. A PLAN (ftrt__plan_msg) carries the
 * membership delta, and the whole membership only to a promoted spare: it may be up to
 * ftrt__plan_msg_size(FTRT__MAX_WORLD, FTRT__MAX_WORLD) bytes; it only goes from
 * the coordinator to a rank, and the coordinator refuses one from a rank. */
#define FTRT__MSG_MAX 65536u
/* Most processes in one job's world (coordinator + trainers + spares). */
#define FTRT__MAX_WORLD 262144
#define FTRT__HOST_MAX 64

enum ftrt__msg_type {
    FTRT__MSG_HELLO = 1,      /* rank -> coord: join, with the job secret */
    FTRT__MSG_WELCOME,        /* coord -> rank: role and logical rank */
    FTRT__MSG_HEARTBEAT,      /* rank -> coord: liveness and progress */
    FTRT__MSG_FAILURE,        /* coord -> trainers: epoch changed */
    FTRT__MSG_REPORT,         /* trainer -> coord: progress for the recovery plan */
    FTRT__MSG_PLAN,           /* coord -> members: membership delta and resume step */
    FTRT__MSG_RESUMED,        /* member -> coord: back in the training loop */
    FTRT__MSG_SHARD_DONE,     /* trainer -> coord: shard durable (or failed) */
    FTRT__MSG_COMMIT,         /* coord -> trainers: checkpoint committed (or failed) */
    FTRT__MSG_BYE,            /* trainer -> coord: finished, with statistics */
    FTRT__MSG_SHUTDOWN,       /* coord -> spares: job over */
    FTRT__MSG_ABORT,          /* coord -> all: job failed, with the code */
    FTRT__MSG_FAREWELL,       /* coord -> trainer after BYE, at the job's end: ranks lost */
    FTRT__MSG_PING,           /* coord -> every rank, each heartbeat period: coordinator alive */
    FTRT__MSG_LEDGER,         /* rank -> coord, every second and at the end: timeline */
    FTRT__MSG_FINGERPRINT,    /* trainer -> coord, every FTRT_SDC_EVERY steps: fingerprint of
                                 the replicated regions (silent data corruption check) */
    /* host agents (runtime/hostagent.c; docs/detection-and-recovery.md "Host agents") */
    FTRT__MSG_HOST_HELLO,     /* host agent -> coord: joins, with the job secret (ftrt__hello:
                                 world_rank and pid are the agent's process's) */
    FTRT__MSG_RELAY,          /* host agent <-> coord: one message from / to one rank of its
                                 host (ftrt__relay, then the whole message) */
    FTRT__MSG_MULTI,          /* coord -> host agent: one message to several ranks of its host
                                 (ftrt__multi, then the whole message) */
    FTRT__MSG_HOST_BEAT,      /* host agent -> coord, every heartbeat period: the newest
                                 HEARTBEAT of each rank it serves (ftrt__host_beat) */
    FTRT__MSG_RANK_LOST,      /* host agent -> coord: a rank of its host closed its socket
                                 without BYE (died) or fell silent (ftrt__rank_lost) */
    FTRT__MSG_HOSTED,         /* host agent -> rank, after its HELLO: the rank is served by a
                                 host agent (value: the agent's world rank) */
    FTRT__MSG_COORD_LOST,     /* host agent -> rank: the coordinator is lost (epoch_msg: value
                                 FTRT_ECOORD; epoch 2 by silence, 1 by EOF) */
    FTRT__MSG_CUT,            /* coord -> host agent: close this rank's socket, the coordinator
                                 declared it failed or it left the agent; with fence, SIGKILL
                                 its process too (ftrt__cut) */
    /* the standby coordinator (runtime/coordinator/standby.c; docs/detection-and-recovery.md
     * "Standby coordinator") */
    FTRT__MSG_STANDBY,        /* coord -> spare: be the standby (epoch_msg: value = the
                                 coordinator's term); the spare listens and answers STANDBY_AT */
    FTRT__MSG_STANDBY_AT,     /* standby -> coord: where it listens (ftrt__coord_at) */
    FTRT__MSG_NEXT_COORD,     /* coord -> every rank: where the standby listens (ftrt__coord_at;
                                 port 0: no standby) */
    FTRT__MSG_SYNC,           /* coord -> standby: the state to go on from (opaque to the
                                 rank, at most FTRT__SYNC_MAX bytes) */
    FTRT__MSG_SYNC_ACK,       /* standby -> coord: SYNC number `value` is held (epoch_msg:
                                 epoch = term) */
    FTRT__MSG_MOVE,           /* coord -> rank, on the rank's own connection, after the rank's
                                 HELLO came relayed by a newly elected host agent: the rank sends
                                 through that agent from now on and closes its sending side here;
                                 the coordinator closes this connection once it read that end,
                                 and reaches the rank through the agent after it (value = the
                                 world rank of that agent's process, as its HOSTED said;
                                 docs/detection-and-recovery.md "Host agents", Its death) */
    /* relay groups: fan-outs through the host agents (runtime/hostagent.c;
     * docs/detection-and-recovery.md "Relay groups") */
    FTRT__MSG_RELAY_AT,       /* host agent -> coord: where it listens for the host agents of
                                 its relay group (ftrt__coord_at: world_rank = the agent's) */
    FTRT__MSG_RELAY_VIA,      /* coord -> host agent: connect to the relay at (ftrt__coord_at;
                                 port 0: no relay, close the connection to it) */
    FTRT__MSG_PEER_HELLO,     /* host agent -> its relay: joins, with the job secret
                                 (ftrt__hello: world_rank and pid are the agent's process's) */
    FTRT__MSG_RELAY_PEER,     /* relay -> coord: a host agent of its group is connected to it,
                                 or no longer (ftrt__relay_peer) */
    FTRT__MSG_FANOUT,         /* coord -> relay: one message to ranks of several hosts of its
                                 group (ftrt__fanout, its parts, then the whole message); the
                                 relay delivers its own part and sends each other one on as a
                                 MULTI */
    /* drains (runtime/coordinator/drain.c; docs/detection-and-recovery.md "Drain") */
    FTRT__MSG_DRAIN,          /* coord -> a trainer being drained: its logical rank went to a
                                 hot spare (ftrt__drain_msg: leave at the drain's step boundary,
                                 or now) */
    FTRT__MSG_DRAIN_ME,       /* trainer or spare -> coord: it received SIGTERM under
                                 FTRT_SIGTERM=drain: drain it (epoch_msg, value unused) */
    /* joins (runtime/coordinator/join.c; docs/join.md) */
    FTRT__MSG_JOIN,           /* a process started after the job -> coord, first on its own TCP
                                 connection: it asks to be a hot spare (ftrt__join) */
    FTRT__MSG_JOIN_OK,        /* coord -> joiner: it is one, in slot `slot` (ftrt__join_ok) */
    FTRT__MSG_JOIN_REFUSED,   /* coord -> joiner: it is not, and why (ftrt__join_refused); the
                                 coordinator closes the connection after it */
    FTRT__MSG_TYPE_END
};

/* Largest SYNC payload, bytes (a world of FTRT__MAX_WORLD processes and its incidents). */
#define FTRT__SYNC_MAX ((size_t)48 << 20)
/* Bytes of the address list in ftrt__coord_at (FTRT__ADDRS_MAX of base/net.h). */
#define FTRT__COORD_AT_ADDRS 256

/* STANDBY_AT and NEXT_COORD: a standby coordinator's listening port and addresses. */
typedef struct ftrt__coord_at {
    int32_t world_rank; /* the standby's (NEXT_COORD: -1 with port 0: none) */
    int32_t port;
    int32_t term;       /* the coordinator's term that appointed it (takeovers so far) */
    int32_t pad;
    char addrs[FTRT__COORD_AT_ADDRS]; /* space-separated IPv4, NUL-terminated */
} ftrt__coord_at;

/* SYNC's payload begins with this (the rest is the coordinator's, runtime/coordinator/standby.c):
 * the standby acknowledges seq (SYNC_ACK value, truncated to 32 bits) in term. */
typedef struct ftrt__sync_head {
    uint64_t seq;
    int32_t term;
    int32_t version;
} ftrt__sync_head;

enum ftrt__role { FTRT__ROLE_COORD = 0, FTRT__ROLE_TRAINER, FTRT__ROLE_SPARE, FTRT__ROLE_FAILED };

typedef struct ftrt__msghdr {
    uint32_t magic;
    uint32_t type;
    uint32_t len; /* payload bytes */
    int32_t term; /* the coordinator's term the message was issued in (0: world rank 0's, +1
                     per takeover); ranks and host agents refuse a coordinator's message of a
                     term older than one they saw (docs/detection-and-recovery.md "Standby
                     coordinator", Fencing). A rank's or host agent's own messages carry the
                     newest term its thread saw; the coordinator does not check them. */
} ftrt__msghdr;

typedef struct ftrt__hello {
    uint64_t secret;
    int32_t world_rank;
    int32_t pid;
    char host[FTRT__HOST_MAX];
} ftrt__hello;

/* The version of JOIN's layout and meaning: a joiner of another one is refused. */
#define FTRT__PROTO_JOIN 1

/* JOIN: a joiner's hello. The secret is the job's (tools/ftrt-run --join hands it over). */
typedef struct ftrt__join {
    uint64_t secret;
    int32_t version; /* FTRT__PROTO_JOIN */
    int32_t pid;
    char host[FTRT__HOST_MAX];
} ftrt__join;

/* JOIN_REFUSED: an ftrt error code and one line saying why (NUL-terminated). */
typedef struct ftrt__join_refused {
    int32_t code;
    int32_t pad;
    char why[192];
} ftrt__join_refused;

typedef struct ftrt__welcome {
    int32_t role;
    int32_t logical_rank;
    int32_t ntrainers;
    int32_t epoch;
    int32_t heartbeat_ms; /* the period the coordinator asks for (ftrt__heartbeat_period_ms);
                             0 = FTRT_HEARTBEAT_MS */
    int32_t pad;
} ftrt__welcome;

/* Heartbeats per second the coordinator plans for: above FTRT__HB_BUDGET_PER_S / 1000 ranks per
 * ms of FTRT_HEARTBEAT_MS, it asks for a longer period (README "The coordinator at scale"). */
#define FTRT__HB_BUDGET_PER_S 40000
/* The heartbeat period, ms, for a world of `world` processes: FTRT_HEARTBEAT_MS (cfg_ms) while
 * world x 1000 / cfg_ms heartbeats per second stay within FTRT__HB_BUDGET_PER_S, else the period
 * that keeps them there, but never more than a quarter of the heartbeat timeout (timeout_ms),
 * so that a frozen rank is still declared failed after timeout_ms and 3 late heartbeats are no
 * false positive; never less than cfg_ms. Crash detection (connection loss) does not depend on
 * it. Pure. */
static inline int ftrt__heartbeat_period_ms(int cfg_ms, int timeout_ms, int world)
{
    long want = ((long)world * 1000 + FTRT__HB_BUDGET_PER_S - 1) / FTRT__HB_BUDGET_PER_S;
    long cap = timeout_ms / 4;
    if (want > cap) want = cap;
    return want > cfg_ms ? (int)want : cfg_ms;
}

typedef struct ftrt__heartbeat {
    int64_t steps_done;
    int64_t waits;    /* data-plane collective waits entered so far (progress detector) */
    double kept_s;    /* seconds of this rank's steps that are kept so far */
    double compute_s; /* seconds spent outside data-plane waits since init (stragglers) */
    int32_t epoch;
    int32_t pad;
} ftrt__heartbeat;

typedef struct ftrt__epoch_msg { /* ABORT (value: code), SHUTDOWN and
                                   FAREWELL (value: the job's end: 0 every process of the world
                                   calls MPI_Finalize, > 0 that many processes died, < 0 the
                                   job was aborted with that code: none calls it) */
    int32_t epoch;
    int32_t value;
} ftrt__epoch_msg;

/* RESUMED: the epoch (laid out as ftrt__epoch_msg's, value unused), then how long this member
 * took, on its own monotonic clock, from the PLAN's arrival (its agent thread) to sending this
 * message (span_s), and the two phases of it the member times itself: the communicator rebuild
 * (ftrt__apply_plan: the old one abandoned, the new one built) and the state transfer (or the
 * checkpoint reload). The coordinator splits MTTR into phases with them (report.c). Seconds,
 * each >= 0, rebuild_s + transfer_s <= span_s. */
typedef struct ftrt__resumed_msg {
    int32_t epoch;
    int32_t value;
    double rebuild_s, transfer_s, span_s;
} ftrt__resumed_msg;

typedef struct ftrt__failure_msg { /* FAILURE */
    int32_t epoch;
    int32_t boundary;   /* 1: a drain's epoch, entered at the step boundary boundary_step
                           (ftrt_step_done); 0: now (a failure, or the drain's made urgent) */
    double t_fail_wall; /* best known failure time (fault log, EOF, or last message heard) */
    int64_t boundary_step; /* with boundary: the steps done (ftrt_step_done's step + 1) at
                              which every trainer enters the epoch, the same for all of them
                              (runtime/coordinator/drain.c picks it ahead of every trainer);
                              unused otherwise */
} ftrt__failure_msg;

typedef struct ftrt__drain_msg { /* DRAIN */
    int32_t epoch;         /* the drain's epoch */
    int32_t value;         /* 1: leave at the step boundary boundary_step, 0: leave now */
    int64_t boundary_step; /* with value 1: as ftrt__failure_msg's */
} ftrt__drain_msg;

typedef struct ftrt__ledger_msg { /* LEDGER: totals and the intervals not sent yet */
    double t_open;                  /* start of the open interval (wall) */
    double totals[FTRT__IV_KINDS];  /* closed intervals, seconds */
    double flops_per_step;          /* per trainer, from ftrt_set_job_info(); 0 = unknown */
    double peak_flops;              /* per rank, FLOP/s; 0 = unknown */
    int64_t total_steps;            /* of the job; 0 = unknown */
    int32_t kind_open;
    int32_t n;                      /* intervals that follow */
    int32_t final;                  /* 1 on the last message (before BYE) */
    int32_t sparse;                 /* 0: intervals as they come; 1: past its share
                                       (ftrt__timeline_share()) or its FTRT_TIMELINE_MAX, only
                                       its first and newest intervals (not contiguous); 2: these
                                       intervals, then no more (its FTRT_TIMELINE_MAX reached):
                                       the timeline is cut short after them */
    int64_t kept_steps;             /* steps this rank completed that were kept */
    ftrt__interval iv[];
} ftrt__ledger_msg;

/* Size of a LEDGER payload carrying n intervals. */
size_t ftrt__ledger_msg_size(int n);
/* Checks a LEDGER payload: n matches len, kinds in range, times finite. 0 or FTRT_EPROTO. */
int ftrt__ledger_msg_check(const ftrt__ledger_msg *m, size_t len);

typedef struct ftrt__report {
    int64_t steps_done;
    int32_t epoch;
    int32_t has_sharded;
    /* In-memory partner replicas (runtime/replica.c), each CRC32C-verified just before this
     * report, -1 where none is held: */
    int64_t own_step;  /* this trainer's own image (all its regions) holds step own_step */
    int64_t held_step; /* the image of logical rank held_of's sharded regions it holds */
    int32_t held_of;
    int32_t own_shard_only; /* 1: the own image holds the sharded regions only (a rank whose
                               state came by a transfer, replica.c ftrt__replica_adopt): in a
                               memory plan it is a survivor behind for the replicated ones */
    /* Erasure groups (runtime/ecgroup.c, FTRT_SHARD_REDUNDANCY=erasure): the step of the
     * parity fragments it holds (CRC32C-verified just before this report; -1: none), and the
     * layout they were made for (ec_n trainers, group size setting ec_k; 0 without). */
    int64_t ec_step;
    int32_t ec_n, ec_k;
} ftrt__report;

/* A sharded-image source (ftrt__plan_shard_src) that is no single survivor: the replaced
 * rank's sharded image is rebuilt from its erasure group's survivors (runtime/ecgroup.c). */
#define FTRT__SHARD_SRC_ERASURE (-2)

/* JOIN_OK: the joiner's WELCOME (role SPARE, logical rank -1) and where it stands: its slot
 * (its world rank in the job's tables, numbered after MPI_COMM_WORLD's ranks), the job's world
 * size, and the tag naming its published port (ftrt__join_service, comm/join.h). */
typedef struct ftrt__join_ok {
    ftrt__welcome welcome;
    int32_t slot;
    int32_t world_size;
    uint64_t tag;
} ftrt__join_ok;

/* A recovery plan as a member applies it (runtime/recovery.c, runtime/replica.c): the whole
 * membership, every member's role and the sharded-image sources. Built at the member from the
 * PLAN it receives (ftrt__plan_expand), never sent as such. */
typedef struct ftrt__plan {
    int64_t resume_step;
    int64_t ckpt_step; /* >= 0: every member reloads this committed checkpoint */
    int64_t rework_until; /* steps below this that are redone after the resume are rework */
    int64_t mem_step;  /* >= 0 (then ckpt_step < 0): every survivor restores its own in-memory
                          image of this step, each replaced logical rank receives its sharded
                          regions from the member ftrt__plan_shard_src names, replicated ones
                          from the survivors (runtime/replica.c) */
    int32_t epoch;
    int32_t ntrainers;
    int32_t source;       /* an up-to-date logical rank (the lowest): checks the region table */
    int32_t logical_rank; /* the recipient's */
    int32_t nbehind;      /* survivors behind the resume step (a peers plan) or holding a
                             shard-only image (a memory plan): their roles are
                             FTRT__PLAN_UP_TO_DATE here until ftrt__plan_behind_apply sets them */
    int32_t ndata;        /* 0 (a delta PLAN: the data ranks unchanged), or the size of the
                             holder table the PLAN carried (the agent keeps it: cp.holder) */
    int32_t members[];    /* 3 x ntrainers: the world ranks, index = logical rank, then each
                             logical rank's state role (FTRT__PLAN_*; ftrt__plan_roles), then
                             the logical rank holding its sharded image, or -1
                             (ftrt__plan_shard_src) */
} ftrt__plan;

/* A member's part in the state transfer of a plan: it holds the resume step's replicated state
 * (a source), or it lacks it and receives it (a promoted spare, a survivor behind). */
enum { FTRT__PLAN_UP_TO_DATE = 0, FTRT__PLAN_NEEDS_STATE = 1, FTRT__PLAN_BYSTANDER = 2 };
/* (BYSTANDER: neither; used by the transfer of one rank's sharded image, never in a plan.) */

/* The roles array of a plan (ntrainers entries after the members). */
static inline int32_t *ftrt__plan_roles(ftrt__plan *p) { return p->members + p->ntrainers; }
static inline const int32_t *ftrt__plan_roles_c(const ftrt__plan *p)
{
    return p->members + p->ntrainers;
}
/* The sharded-image sources of a plan (ntrainers entries after the roles): for logical rank l,
 * the logical rank whose memory holds l's sharded regions at mem_step, or -1. */
static inline int32_t *ftrt__plan_shard_src(ftrt__plan *p) { return p->members + 2 * p->ntrainers; }
static inline const int32_t *ftrt__plan_shard_src_c(const ftrt__plan *p)
{
    return p->members + 2 * p->ntrainers;
}

/* PLAN on the wire (version FTRT__PROTO_PLAN): O(k) bytes for a survivor, k the logical ranks
 * replaced since the previous plan (the membership delta), whatever N and however many
 * survivors are behind, instead of the whole N-entry table to each of N members (O(N^2) in
 * all). Every survivor gets the same message (logical_rank -1: it keeps its own; the initial
 * membership is world ranks 1..N in logical order, ftrt__plan_initial_members), so the
 * coordinator builds it once; a promoted spare, which knows no membership, gets the whole table
 * as well (nmembers = ntrainers) and its logical rank. The first 48 bytes are laid out as
 * ftrt__plan's. Roles follow from the rest: a replaced rank needs state unless the plan reloads
 * a checkpoint (ckpt_step >= 0); in a peers plan (ckpt_step < 0, mem_step < 0) a survivor
 * whose REPORT gave a step count other than resume_step is behind and needs state, and in a
 * memory plan (mem_step >= 0) so is a survivor whose REPORT offered a shard-only own image
 * (own_shard_only: it restores its sharded regions itself, the replicated ones from the peers):
 * nbehind says how many there are, and each knows whether it is one from its own REPORT (the list
 * itself, version 1's, made the bytes O(N^2) again when many survivors were a step behind);
 * the members learn the whole set on the data plane (ftrt__plan_behind_*, runtime/recovery.c).
 * Every other member is up to date. */
typedef struct ftrt__plan_msg {
    int64_t resume_step, ckpt_step, rework_until, mem_step; /* as in ftrt__plan */
    int32_t epoch;
    int32_t ntrainers;
    int32_t source;
    int32_t logical_rank; /* the recipient's when nmembers > 0, else -1 */
    int32_t nrepl;        /* replaced logical ranks: {logical, world, sharded-image source} */
    int32_t nbehind;      /* how many survivors are behind (peers and memory plans) */
    int32_t nmembers;     /* 0, or ntrainers: the world ranks of the whole membership follow */
    int32_t ndata;        /* 0, or N at the start when nmembers > 0: the holder table follows
                             the members (data rank -> the logical rank holding it, -1: none;
                             ftrt_data_ranks(); changed by a shrink or a fold) */
    int32_t data[];       /* 3 x nrepl, then nmembers int32, then ndata int32 */
} ftrt__plan_msg;

/* Size of a PLAN payload with nrepl replaced ranks and nmembers int32 entries after them (the
 * members and the holder table: nmembers + ndata), bytes. */
size_t ftrt__plan_msg_size(int nrepl, int nmembers);

/* Checks a received PLAN payload of len bytes: the counts match len (nrepl at most ntrainers,
 * nmembers 0 or ntrainers, ntrainers in [1, FTRT__MAX_WORLD)), nbehind 0 in a checkpoint plan
 * and below the number of survivors (the source is up to date), logical ranks and sources in
 * [0, ntrainers) (a sharded-image source may be -1, or
 * FTRT__SHARD_SRC_ERASURE), world ranks in [1, FTRT__MAX_WORLD),
 * logical_rank -1 and ndata 0 exactly when nmembers is 0, holder entries in [-1, ntrainers).
 * The membership itself is checked once expanded (ftrt__plan_check). Returns 0 or FTRT_EPROTO.
 * O(len). Thread-safe. */
int ftrt__plan_msg_check(const ftrt__plan_msg *m, size_t len);
/* The holder table of a checked PLAN (m->ndata entries; none when 0). */
static inline const int32_t *ftrt__plan_msg_holder(const ftrt__plan_msg *m)
{
    return m->data + 3 * (size_t)m->nrepl + (size_t)m->nmembers;
}

/* Fills members[0..n) with the membership a job starts with: logical rank l is world rank l + 1
 * (the coordinator is world rank 0, spares follow the trainers). */
void ftrt__plan_initial_members(int32_t *members, int n);

/* Builds the plan a member applies from a PLAN payload m (len bytes, checked here) and the
 * membership it knew before (prev: prev_n world ranks by logical rank; unused when m carries
 * the whole table, may then be NULL), for the member of logical rank `logical` (unused when m
 * names the recipient's). *out (malloc'd, the caller frees it) receives the plan and *out_len
 * its size (ftrt__plan_size(ntrainers)); it passed ftrt__plan_check. The survivors behind
 * (p->nbehind of them) are not known yet: their roles read up to date until
 * ftrt__plan_behind_apply. Returns 0, FTRT_EPROTO (a malformed message, prev_n != ntrainers
 * without a table, or a plan that fails its check), or -ENOMEM. O(ntrainers). Thread-safe. */
int ftrt__plan_expand(const ftrt__plan_msg *m, size_t len, const int32_t *prev, int prev_n,
                      int logical, ftrt__plan **out, size_t *out_len);

/* The survivors behind of a peers plan, learned on the data plane: a bit set of ntrainers bits
 * in ftrt__plan_behind_words(ntrainers) int64 words (bit l % 64 of word l / 64 for logical rank
 * l), each member setting only its own bit, so that a SUM allreduce of the members' sets is
 * their union (no carry: each bit has one contributor). Words of a set for n members. */
size_t ftrt__plan_behind_words(int n);

/* Whether this member (p->logical_rank) is a survivor behind of the expanded plan p: p->nbehind
 * > 0, this member not replaced (its role up to date before ftrt__plan_behind_apply), and in a
 * peers plan the step count of its own REPORT for this epoch (reported_steps) other than
 * resume_step, in a memory plan its REPORT's own_shard_only (reported_shard_only) set: the
 * coordinator's rules (epoch.c). 1 or 0. Pure. */
int ftrt__plan_behind_mine(const ftrt__plan *p, int64_t reported_steps, int reported_shard_only);

/* Sets the role FTRT__PLAN_NEEDS_STATE for every logical rank whose bit is set in bits (the
 * union of the members' sets, words = ftrt__plan_behind_words(p->ntrainers)) and checks the
 * plan again (ftrt__plan_check): exactly p->nbehind bits, none on a replaced rank or past
 * ntrainers. p (len bytes) is changed only on success. Returns 0, FTRT_EPROTO (the members and
 * the coordinator disagree on who is behind; every member sees the same union, so all refuse
 * it) or -ENOMEM. O(ntrainers). Thread-safe on distinct plans. */
int ftrt__plan_behind_apply(ftrt__plan *p, size_t len, const int64_t *bits, size_t words);

/* RELAY: this prefix, then one whole message (header and payload) from or to world_rank. */
typedef struct ftrt__relay {
    int32_t world_rank;
    int32_t pad;
} ftrt__relay;

/* CUT: the rank whose socket the host agent closes; fence 1: the coordinator fences it (it
 * was declared failed and may still be alive), and the agent sends its process SIGKILL
 * (base/fence.h). The same size as ftrt__relay, whose pad was 0. */
typedef struct ftrt__cut {
    int32_t world_rank;
    int32_t fence;
} ftrt__cut;

/* MULTI: this prefix with n world ranks (all of the receiving host agent), then one whole
 * message for each of them. */
typedef struct ftrt__multi {
    int32_t n;
    int32_t pad;
    int32_t world_ranks[];
} ftrt__multi;

/* FANOUT: this prefix, then nparts parts, each {int32 n, int32 agent_w, int32 world_ranks[n]}
 * (the ranks of the host whose host agent lives in world rank agent_w; a part is a MULTI's
 * prefix, its pad holding agent_w), then one whole message for all of them. */
typedef struct ftrt__fanout {
    int32_t nparts;
    int32_t pad;
} ftrt__fanout;

/* RELAY_PEER: the host agent living in world rank `world_rank` connected to the relay (up 1)
 * or its connection closed (up 0). */
typedef struct ftrt__relay_peer {
    int32_t world_rank;
    int32_t up;
} ftrt__relay_peer;

/* HOST_BEAT: n of these, after {int32 n, int32 pad}. */
typedef struct ftrt__beat {
    int32_t world_rank;
    int32_t pad;
    ftrt__heartbeat hb;
} ftrt__beat;

typedef struct ftrt__host_beat {
    int32_t n;
    int32_t pad;
    ftrt__beat e[];
} ftrt__host_beat;

/* Why a host agent reports a rank lost (RANK_LOST). */
enum { FTRT__LOST_CLOSED = 0, FTRT__LOST_SILENT = 1, FTRT__LOST_PROTOCOL = 2 };

typedef struct ftrt__rank_lost {
    int32_t world_rank;
    int32_t why;   /* FTRT__LOST_* */
    double t_wall; /* when the agent saw it (wall seconds) */
} ftrt__rank_lost;

/* Opens a RELAY payload of len bytes: *w, the inner header *h (checked with ftrt__msg_check; a
 * host-agent type inside is refused) and *inner, its payload (inside `payload`). Returns 0 or
 * FTRT_EPROTO. Pure, thread-safe. */
int ftrt__relay_open(const void *payload, size_t len, int32_t *w, ftrt__msghdr *h,
                     const void **inner);

/* Opens a MULTI payload of len bytes: *n world ranks at *ranks (inside `payload`, each in
 * [1, FTRT__MAX_WORLD)), the inner header *h and *inner as ftrt__relay_open. Returns 0 or
 * FTRT_EPROTO. Pure, thread-safe. */
int ftrt__multi_open(const void *payload, size_t len, int32_t *n, const int32_t **ranks,
                     ftrt__msghdr *h, const void **inner);

/* Opens a FANOUT payload of len bytes: *nparts parts starting at *parts (inside `payload`; each
 * checked: n in [1, FTRT__MAX_WORLD], agent_w and every rank in [1, FTRT__MAX_WORLD); walk them
 * with ftrt__fanout_part), the inner header *h and *inner as ftrt__relay_open. Returns 0 or
 * FTRT_EPROTO. Pure, thread-safe. */
int ftrt__fanout_open(const void *payload, size_t len, int32_t *nparts, const uint8_t **parts,
                      ftrt__msghdr *h, const void **inner);

/* The part at *cur of a FANOUT that ftrt__fanout_open accepted: *agent_w, *n ranks at *ranks,
 * and *plen, the bytes of the part ({n, agent_w, ranks}: a MULTI prefix as it is); *cur moves
 * to the next part. Pure, thread-safe. */
void ftrt__fanout_part(const uint8_t **cur, int32_t *agent_w, int32_t *n, const int32_t **ranks,
                       uint32_t *plen);

/* Checks a HOST_BEAT payload of len bytes: n matches len. Returns 0 or FTRT_EPROTO. */
int ftrt__host_beat_check(const ftrt__host_beat *b, size_t len);

/* Sends one message whose payload is prefix (plen bytes) followed, when inner_type != 0, by a
 * whole inner message {inner_type, len} and its payload, in one sendmsg() (RELAY, MULTI). With
 * inner_type 0 it is ftrt__msg_send of prefix. Returns 0 or -errno. The caller serializes
 * senders. */
int ftrt__msg_send2(int fd, uint32_t type, const void *prefix, uint32_t plen, uint32_t inner_type,
                    const void *payload, uint32_t len);

/* An outgoing byte buffer: whole messages appended, then written in one go (ftrt__tx_flush), or
 * as the socket takes them (ftrt__tx_send, ftrt__tx_write: buf[off, used) is still to go). */
typedef struct ftrt__txbuf {
    uint8_t *buf;
    size_t used, cap;
    size_t off; /* bytes of buf already written (nonblocking writes); 0 otherwise */
} ftrt__txbuf;

/* Appends the message ftrt__msg_send2 would send to tx. Returns 0 or -ENOMEM. */
int ftrt__tx_put(ftrt__txbuf *tx, uint32_t type, const void *prefix, uint32_t plen,
                 uint32_t inner_type, const void *payload, uint32_t len);
/* Appends everything buffered in src to dst and empties src. Returns 0 or -ENOMEM (both
 * unchanged). */
int ftrt__tx_move(ftrt__txbuf *dst, ftrt__txbuf *src);
/* Writes everything buffered on fd (blocking, retrying EINTR and short writes) and empties tx.
 * Returns 0 or -errno (tx emptied either way). */
int ftrt__tx_flush(int fd, ftrt__txbuf *tx);
/* Bytes of tx not written yet. */
static inline size_t ftrt__tx_pending(const ftrt__txbuf *tx) { return tx->used - tx->off; }
/* Sends the message ftrt__msg_send2 would send on fd without ever blocking (a send queue, as
 * an event loop keeps one per connection: libuv's write queue, Redis's client output buffer):
 * when tx holds nothing, as much of it as the socket takes now (MSG_DONTWAIT, MSG_NOSIGNAL,
 * retrying EINTR) and the rest appended to tx; else all of it appended to tx, after what tx
 * holds, so that the connection's order is kept. The caller writes tx out (ftrt__tx_write)
 * once fd is writable. Returns the bytes appended to tx (0: all of it went out), or -errno: a
 * send error other than EAGAIN (the connection is broken; nothing appended), -ENOMEM. The
 * caller serializes the users of fd and tx. */
ssize_t ftrt__tx_send(int fd, ftrt__txbuf *tx, uint32_t type, const void *prefix, uint32_t plen,
                      uint32_t inner_type, const void *payload, uint32_t len);
/* Writes as much of tx's pending bytes as fd takes now without blocking (MSG_DONTWAIT,
 * MSG_NOSIGNAL, retrying EINTR). A buffer that empties is reset (off = used = 0), and freed
 * when it had grown past 1 MiB. Returns the bytes written (0: none, the socket is full), or
 * -errno (the connection is broken; tx unchanged). */
ssize_t ftrt__tx_write(int fd, ftrt__txbuf *tx);
/* Frees tx's buffer. */
void ftrt__tx_free(ftrt__txbuf *tx);

typedef struct ftrt__ckpt_msg { /* SHARD_DONE and COMMIT */
    int64_t step;
    int32_t epoch;
    int32_t result; /* 0 or a negative code */
} ftrt__ckpt_msg;

typedef struct ftrt__fingerprint_msg { /* FINGERPRINT */
    int64_t step;    /* steps done when it was taken (the numbering checkpoints use) */
    uint64_t fp;     /* ftrt__sdc_fingerprint() of the replicated host regions */
    double seconds;  /* time this rank spent computing it */
    int32_t epoch;   /* the epoch the rank trains in */
    int32_t nregions; /* replicated host regions covered */
} ftrt__fingerprint_msg;

typedef struct ftrt__bye {
    int64_t steps_done;
    int64_t rework_steps;
    double kept_s;
    double rework_s;
    double lost_s; /* partial steps abandoned at failures */
    double ckpt_stall_s;  /* seconds blocked in checkpoint calls (snapshot, staging waits) */
    int64_t ckpt_skipped; /* checkpoints this trainer skipped (FTRT_CKPT_POLICY=skip) */
    int32_t exit_code;    /* 0, or the error the trainer leaves with (ftrt_set_exit_code) */
    int32_t pad;
} ftrt__bye;

/* Checks a received header: magic, known type, payload within FTRT__MSG_MAX and of the size the
 * type requires (PLAN: at least the fixed part of ftrt__plan_msg and a whole number of int32,
 * at most 5 x FTRT__MAX_WORLD of them, which may exceed FTRT__MSG_MAX). Returns 0 or
 * FTRT_EPROTO. Pure function, thread-safe. */
int ftrt__msg_check(const ftrt__msghdr *h);

/* Checks an expanded plan of len bytes: ntrainers matches len, source and logical_rank in
 * range, member world ranks in [1, FTRT__MAX_WORLD) and distinct, roles and sharded-image
 * sources consistent. Returns 0 or FTRT_EPROTO (-ENOMEM when the scratch bitmap of
 * FTRT__MAX_WORLD bits cannot be allocated). O(ntrainers). Thread-safe. */
int ftrt__plan_check(const ftrt__plan *p, size_t len);

/* Size of an expanded plan of n members. */
size_t ftrt__plan_size(int n);

/* Sends one message (header + len payload bytes) on a blocking socket in one sendmsg() (so
 * that Nagle's algorithm never holds the payload back behind the header), retrying on EINTR
 * and short writes, with MSG_NOSIGNAL. Returns 0 or -errno. The caller serializes senders. */
int ftrt__msg_send(int fd, uint32_t type, const void *payload, uint32_t len);

/* The term (ftrt__msghdr.term) that every header the calling thread builds from now on
 * carries: ftrt__msg_send, ftrt__msg_send2 (outer and inner header), ftrt__tx_put. 0 until
 * set. Thread-local: the coordinator's loop thread sets its term, a host agent's thread the
 * newest term it saw, a rank's agent thread the newest term it follows. Never fails. */
void ftrt__msg_set_term(int32_t term);

/* Incremental receiver for one connection: feed it bytes, take out whole messages. */
typedef struct ftrt__rxbuf {
    uint8_t *buf;
    size_t used, cap;
    size_t consumed; /* bytes of the message handed out last, dropped on the next call */
} ftrt__rxbuf;

/* Reads what is available on fd (non-blocking or after poll) into rx. The buffer grows to
 * 2 x (FTRT__MSG_MAX + header), or to what a buffered PLAN header announces when that is more.
 * Returns bytes read (> 0), 0 on EOF, -EAGAIN when nothing was there, -ENOBUFS when the buffer
 * is full, or -errno. */
ssize_t ftrt__rx_fill(ftrt__rxbuf *rx, int fd);

/* Takes the next whole message out of rx: returns 1 and sets *h and *payload (valid until the
 * next rx call), 0 when no whole message is buffered, or FTRT_EPROTO for a malformed one. */
int ftrt__rx_next(ftrt__rxbuf *rx, ftrt__msghdr *h, const void **payload);

/* Frees rx's buffer. */
void ftrt__rx_free(ftrt__rxbuf *rx);

#endif

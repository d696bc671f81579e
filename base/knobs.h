/*
 * knobs.h - libftrt's test knobs (internal, test-only; not part of the API or of ftrt_config).
 *
 * A knob makes a test able to provoke a timing or an I/O path that production never picks on
 * its own: slow writes, a widened recovery window, the synchronous I/O fallback, buffered I/O,
 * no fallocate. Production leaves them all 0 (off). They live in one struct, ftrt__knobs,
 * and nowhere else:
 *  - jobs (integration and chaos tests) set them through the environment variables below,
 *    read once per process by the first ftrt_init() (ftrt__knobs_load(), base/config.c);
 *  - unit tests, which run without ftrt_init(), assign the fields directly.
 * Every knob is an int32_t in [0, max]; a bad environment value is logged and ignored.
 * Threads: written before ftrt_init() starts any thread (or by a unit test), then only read.
 * Self-contained: depends on <stdint.h> only.
 *
 * X(field, environment variable, max, what it does)
 */
#ifndef FTRT_KNOBS_H
#define FTRT_KNOBS_H

#include <stdint.h>

#define FTRT__KNOBS(X)                                                                         \
    X(recovery_delay_ms, "FTRT_DEBUG_RECOVERY_DELAY_MS", 600000,                               \
      "survivors sleep this long (ms) after receiving a recovery plan, widening the window "   \
      "for fault injection during a recovery")                                                 \
    X(ckpt_write_delay_ms, "FTRT_DEBUG_CKPT_WRITE_DELAY_MS", 600000,                           \
      "the checkpoint persist thread sleeps this long (ms) after each completed write request") \
    X(ckpt_hold_first, "FTRT_DEBUG_CKPT_HOLD_FIRST", 1000,                                     \
      "N > 0: the first checkpoint write waits (30 s at most) until N more checkpoints were "  \
      "requested, so that the staging buffers are full when they come (FTRT_CKPT_POLICY tests)") \
    X(io_force_sync, "FTRT_TEST_IO_FORCE_SYNC", 1,                                             \
      "1: never set up an io_uring; checkpoint reads and writes use the synchronous fallback")  \
    X(ckpt_force_buffered, "FTRT_TEST_CKPT_FORCE_BUFFERED", 1,                                 \
      "1: never open checkpoint files with O_DIRECT")                                          \
    X(ckpt_no_fallocate, "FTRT_TEST_CKPT_NO_FALLOCATE", 1,                                     \
      "1: skip the fallocate before a shard is written, so that a full file system fails in "  \
      "the middle of the writes")                                                              \
    X(xfer_corrupt_chunk, "FTRT_TEST_XFER_CORRUPT_CHUNK", 1 << 30,                             \
      "N > 0: a receiver of the recovery's state transfer flips a bit of chunk N - 1 on the "   \
      "first attempt (its CRC32C check must catch it and the chunk come again)")                \
    X(xfer_corrupt_times, "FTRT_TEST_XFER_CORRUPT_TIMES", 1000,                                \
      "with FTRT_TEST_XFER_CORRUPT_CHUNK: on this many attempts (default 1; more than the "     \
      "sources: the transfer must fail with FTRT_ECORRUPT)")                                  \
    X(xfer_no_cma, "FTRT_TEST_XFER_NO_CMA", 1,                                                \
      "1: the recovery's state transfer never writes into a receiver's memory from its sources " \
      "(single copy, comm/cma.h) and sends every chunk as an MPI message, as between hosts")    \
    X(replica_corrupt, "FTRT_TEST_REPLICA_CORRUPT", 1,                                         \
      "1: a trainer flips a bit of the partner replica it holds right after it arrived and was " \
      "checked (memory corrupted while held: the recovery must not use it)")                    \
    X(ec_corrupt, "FTRT_TEST_EC_CORRUPT", 1 << 20,                                             \
      "N > 0: the trainer of logical rank N - 1 flips a bit of its erasure-group parity right "  \
      "after each refresh (memory corrupted while held: its REPORT must not offer it)")          \
    X(ec_die_rank, "FTRT_TEST_EC_DIE_RANK", 1 << 20,                                            \
      "N > 0: the trainer of logical rank N - 1 SIGKILLs itself (in epoch 0) in the erasure "   \
      "refresh of step FTRT_TEST_EC_DIE_STEP, mid-refresh: its image taken, no contribution "  \
      "sent")                                                                                   \
    X(ec_die_step, "FTRT_TEST_EC_DIE_STEP", 1 << 30,                                            \
      "the step of the refresh in which FTRT_TEST_EC_DIE_RANK dies")                            \
    X(sim_device, "FTRT_TEST_SIM_DEVICE", 1,                                                   \
      "1: ftrt_init() installs the simulated device (kernels/loc_sim.c, a test arrangement) as " \
      "the device backend: FTRT_REGION_DEVICE regions live in ftrt__sim_alloc memory")          \
    X(epoch_delay_ms, "FTRT_TEST_EPOCH_DELAY_MS", 60000,                                       \
      "ranks take the coordinator's failure announcement this long (ms) late, so that MPI "    \
      "reports a dead process first (ULFM, comm/ulfm.h: the collective must wait for the "     \
      "epoch change, not fail)")                                                               \
    X(orphan_grace_ms, "FTRT_TEST_ORPHAN_GRACE_MS", 60000,                                     \
      "N > 0: the coordinator's grace after a host agent's loss is N ms instead of "           \
      "min(heartbeat timeout / 2, 250 ms): how long its host's other ranks may take to come "  \
      "back on their own connection, and how long the recovery plan waits for those that did " \
      "to die with their host (a host lost process by process, slowly)")                      \
    X(plan_delay_ms, "FTRT_TEST_PLAN_DELAY_MS", 60000,                                         \
      "the coordinator holds a recovery's PLAN until this long (ms) after its FAILURE went "   \
      "out, so that a test can kill it with a recovery in flight (the status file's "          \
      "failure_sent_epoch says when; a standby that takes over sends its PLAN at once)")         \
    X(reelect_ms, "FTRT_TEST_REELECT_MS", 600000,                                              \
      "N > 0: a rank that fell back to its own connection after its host agent was lost tries " \
      "to elect a new host agent N ms later (and again every N ms until one serves it) "        \
      "instead of one heartbeat timeout later")                                                \
    X(agent_late_ranks, "FTRT_TEST_AGENT_LATE_RANKS", 1 << 30,                                 \
      "N > 0: a bit mask of world ranks (bit w: world rank w < 30): these never start a host "  \
      "agent at ftrt_init() and are the only ones that start one in an election after a host " \
      "agent was lost; the others connect to the one started (waiting for it), so that a test " \
      "decides in which process of a host each host agent lives")                              \
    X(drain_late_ranks, "FTRT_TEST_DRAIN_LATE_RANKS", 1 << 30,                                 \
      "N > 0: a bit mask of world ranks (bit w: world rank w < 30) that ignore a drain's "      \
      "step-boundary announcement (the FAILURE with its boundary flag, a DRAIN for the "        \
      "drain's boundary) and go on past it, so that the coordinator must make the drain's "     \
      "epoch urgent (runtime/coordinator/drain.c)")                                             \
    X(drain_step, "FTRT_TEST_DRAIN_STEP", 1 << 30,                                             \
      "N > 0: a drain's step boundary is after N steps done (at most the job's total steps, "  \
      "where known; one past the newest heartbeat's count at least) instead of just ahead of " \
      "the trainers, so that a test puts it at the job's last step")                           \
    X(relay_group, "FTRT_TEST_RELAY_GROUP", 1 << 20,                                           \
      "N >= 2: the coordinator's relay groups hold N host agents whatever the world's size "   \
      "(by default ceil(sqrt(W / 8)), none below 16): fan-outs go through a relay on small "   \
      "jobs too; 1: no relay groups")                                                         \
    X(relay_connect_fails, "FTRT_TEST_RELAY_CONNECT_FAILS", 1000,                            \
      "N > 0: a host agent's first N connects to the relay it is told (RELAY_VIA) fail at "    \
      "once, without a connection tried, as a relay out of reach would: it tries again with "  \
      "backoff (FTRT__RELAY_CONNECT_RETRIES times), then its fan-outs stay direct")            \
    X(hello_unread, "FTRT_TEST_HELLO_UNREAD", 1,                                               \
      "1: the coordinator does not watch connections it accepted until their HELLO deadline "  \
      "(5 s), as a loop too busy to read them would not; they are read only then")             \
    X(coord_sndbuf, "FTRT_TEST_COORD_SNDBUF", 1 << 24,                                         \
      "N > 0: the coordinator's accepted connections get SO_SNDBUF N bytes (the kernel doubles " \
      "it; 4,608 at least), so that a peer that stops reading fills its socket after a few "   \
      "small messages and the coordinator's send queue for it takes the rest")                 \
    X(coord_tx_slack, "FTRT_TEST_COORD_TX_SLACK", 1 << 23,                                     \
      "N > 0: a coordinator's send queue may hold N bytes beyond its largest message (instead " \
      "of 8 MiB) before its peer is declared lost, so that a test reaches that bound with a "  \
      "few thousand small messages")                                                          \
    X(join_version, "FTRT_TEST_JOIN_VERSION", 1000,                                            \
      "N > 0: a joining process (runtime/join.c) says join protocol version N instead of its "  \
      "own, as another version of ftrt would: the coordinator must refuse it")                  \
    X(join_die_before_accept, "FTRT_TEST_JOIN_DIE_BEFORE_ACCEPT", 1,                           \
      "1: a joined process promoted by a recovery exits (status 9) just before its "            \
      "MPI_Comm_accept (comm/join.c), as one lost inside the join's window would")

struct ftrt__knobs {
#define FTRT__KNOB_FIELD(field, env, max, doc) int32_t field;
    FTRT__KNOBS(FTRT__KNOB_FIELD)
#undef FTRT__KNOB_FIELD
};

/* The process's knobs (base/config.c); all 0 until set. */
extern struct ftrt__knobs ftrt__knobs;

/* Sets the fields of *k whose environment variable is set and valid; leaves the others alone.
 * Returns 0, or -1 when a variable held a bad value (logged at error level; that field is left
 * alone). Thread-safe (reads the environment only). */
int ftrt__knobs_read(struct ftrt__knobs *k);

/* ftrt__knobs_read(&ftrt__knobs), once per process (later calls do nothing). Called by
 * ftrt_init() before it starts any thread. */
void ftrt__knobs_load(void);

#endif

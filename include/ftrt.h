/*
 * ftrt.h - the public API of ftrt, a fault-tolerant distributed training runtime.
 *
 * An mpirun-launched data-parallel job links to libftrt (or loads it through ctypes). World
 * rank 0 becomes the coordinator (control plane, failure detection, checkpoint commit, report),
 * world ranks 1..N are trainers (logical ranks 0..N-1), and the last S world ranks are hot
 * spares that wait inside ftrt_init() and take a failed trainer's place without restarting the
 * job. See docs/detection-and-recovery.md ("Control plane") for the protocol.
 *
 * Conventions (after liburing and NCCL):
 *  - Every function returns int: 0 (or a count) on success, a negative code on failure:
 *    either -errno for system errors, or one of the FTRT_E* codes below, which lie outside the
 *    errno range. ftrt_strerror() and ftrt_err_name() name every code.
 *  - The library never prints on the success path (only through FTRT_LOG) and never calls
 *    exit() or abort(); a failure is returned to the caller.
 *  - Handles are opaque. Configuration is a struct with a size field, filled in by
 *    ftrt_config_init() so that ctypes callers need no macros.
 *  - Unless stated otherwise, a context is used from one application thread at a time
 *    (the thread that called ftrt_init()). ftrt_strerror()/ftrt_err_name() are thread-safe.
 */
#ifndef FTRT_H
#define FTRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FTRT_BUILDING_LIBRARY)
#define FTRT_API __attribute__((visibility("default")))
#else
#define FTRT_API
#endif

#define FTRT_VERSION_MAJOR 0
#define FTRT_VERSION_MINOR 1
#define FTRT_VERSION_PATCH 0

/*
 * Error codes. X(name, value, message). Values sit below -1000, outside the errno range, so a
 * caller can tell them from -errno results.
 */
#define FTRT_ERROR_MAP(X)                                                                          \
    X(FTRT_ERECOVER, -1001,                                                                        \
      "a rank failed and the epoch changed: call ftrt_recover() and resume at the step it returns") \
    X(FTRT_ENOSPARE, -1002,                                                                        \
      "a trainer failed and no hot spare is left: the job must stop; relaunch it to resume from "   \
      "the last committed checkpoint")                                                              \
    X(FTRT_ECOORD, -1003, "the coordinator (world rank 0) is gone: the job cannot continue")       \
    X(FTRT_EABORT, -1004, "the coordinator aborted the job (see its log for the reason)")          \
    X(FTRT_ECONFIG, -1005, "invalid configuration (the log names the variable and value)")         \
    X(FTRT_ECORRUPT, -1006, "checkpoint data failed its integrity check (CRC32C or format)")       \
    X(FTRT_ENOCKPT, -1007, "no usable committed checkpoint was found")                             \
    X(FTRT_EMISMATCH, -1008,                                                                       \
      "registered regions differ from the checkpoint or from the other ranks (name, size or "      \
      "number of trainers)")                                                                        \
    X(FTRT_EPROTO, -1009, "control-plane protocol error (malformed or unexpected message)")        \
    X(FTRT_EMPI, -1010, "an MPI call failed (run with FTRT_LOG=debug for the MPI error string)")  \
    X(FTRT_EINVAL, -1011, "invalid argument")                                                      \
    X(FTRT_ESTATE, -1012, "call not valid in this state or role")                                  \
    X(FTRT_ETIMEDOUT, -1013, "timed out waiting on the control plane")                           \
    X(FTRT_ENODEV, -1014, "no usable CUDA device (no GPU, or no driver: libcuda.so is missing)")   \
    X(FTRT_ECUDA, -1015, "a CUDA runtime call failed (the log names the call and the error)")     \
    X(FTRT_ENCCL, -1016,                                                                           \
      "an NCCL call failed (the log has ncclGetLastError(); run with NCCL_DEBUG=WARN for more)")   \
    X(FTRT_ENOTSUP, -1017,                                                                         \
      "not supported by this build of libftrt (e.g. a device-memory region without CUDA)")

enum ftrt_error {
#define FTRT__ENUM(name, value, msg) name = value,
    FTRT_ERROR_MAP(FTRT__ENUM)
#undef FTRT__ENUM
};

/* Positive return of ftrt_init() for ranks that must not train (coordinator, unused spare). */
#define FTRT_DONE 1
/* Positive return of ftrt_finalize(): a process of the world died during the job, so the
 * caller, which initialized MPI itself, must exit without calling MPI_Finalize (Open MPI 4.1's
 * MPI_Finalize can hang in its PMIx fence after a process died). */
#define FTRT_SKIP_MPI_FINALIZE 2
/* Positive return of ftrt_checkpoint()/ftrt_checkpoint_start() under FTRT_CKPT_POLICY=skip:
 * the previous checkpoint is still being written, so this one was not taken (the coordinator
 * counts it as skipped); of ftrt_checkpoint_wait_commit() for such a checkpoint. */
#define FTRT_SKIPPED 3

/* Returns a static, human-readable message for any ftrt return code (0, FTRT_DONE, FTRT_E*,
 * or -errno). Never NULL. Thread-safe. */
FTRT_API const char *ftrt_strerror(int code);
/* Returns the symbolic name ("FTRT_ERECOVER", "ENOSPC", "OK", ...) of a return code, or
 * "UNKNOWN". Never NULL. Thread-safe. */
FTRT_API const char *ftrt_err_name(int code);

/* ------------------------------------------------------------------------------------------ */
/* Configuration                                                                               */
/* ------------------------------------------------------------------------------------------ */

/*
 * Job configuration. Fill it with ftrt_config_init(), then override fields the application sets
 * itself (command-line flags win over the environment, which wins over the defaults).
 * String fields are NUL-terminated and copied by ftrt_init(); the caller keeps ownership.
 */
typedef struct ftrt_config {
    uint32_t size;            /* sizeof(ftrt_config), set by ftrt_config_init() */
    uint32_t version;         /* FTRT_VERSION_MAJOR at build time */
    int spares;               /* FTRT_SPARES: hot spares; -1 = 1 if world >= 3, else 0 */
    int heartbeat_ms;         /* FTRT_HEARTBEAT_MS: heartbeat period, ms (default 100) */
    int heartbeat_timeout_ms; /* FTRT_HEARTBEAT_TIMEOUT_MS: silence before a rank is declared
                                 failed, ms (default 1000) */
    int init_timeout_ms;      /* FTRT_INIT_TIMEOUT_MS: wait for all ranks to connect, ms
                                 (default 60000) */
    int ckpt_keep;            /* FTRT_CKPT_KEEP: committed checkpoints kept (default 2, min 1) */
    int log_level;            /* FTRT_LOG: 0 = error, 1 = warn (default), 2 = info, 3 = debug */
    char ckpt_dir[1024];      /* FTRT_CKPT_DIR: checkpoint directory (default "ftrt-ckpt") */
    char status_file[1024];   /* FTRT_STATUS_FILE: default "<ckpt_dir>/status.json" when empty */
    char report_file[1024];   /* FTRT_REPORT: JSON report path; empty = no JSON report */
    char fault_log[1024];     /* FTRT_FAULT_LOG: ground-truth fault log (JSON lines) written by a
                                 fault injector; empty = none */
    char coord_addr[256];     /* FTRT_COORD_ADDR: address the coordinator listens on; empty =
                                 the host's first non-loopback IPv4 address (127.0.0.1 if none) */
    int progress_timeout_ms;  /* FTRT_PROGRESS_TIMEOUT_MS: a trainer whose collectives lag behind
                                 another's without progress for this long is declared failed;
                                 0 (default) = adaptive: max(5000, 10 x median step time), armed
                                 once a step time has been measured */
    double straggler_ratio;   /* FTRT_STRAGGLER_RATIO: compute time per step above this multiple
                                 of the trainers' median is reported as a straggler (default 1.5) */
    int debug_recovery_delay_ms; /* FTRT_DEBUG_RECOVERY_DELAY_MS: test knob: survivors sleep this
                                 long after receiving a recovery plan (default 0) */
    double peak_flops;        /* FTRT_PEAK_FLOPS: peak FLOP/s of one rank, for eMFU (0 = unknown
                                 unless ftrt_set_job_info() gives it) */
    double mtbf_s;            /* FTRT_MTBF_S: expected mean time between failures, seconds, for
                                 the checkpoint-interval advice (0 = use the observed one) */
    char metrics_file[1024];  /* FTRT_METRICS_FILE: OpenMetrics text file rewritten every 2 s by
                                 the coordinator (for a node exporter's textfile collector);
                                 empty = none */
    int progress;             /* FTRT_PROGRESS: live progress line on the coordinator's stderr:
                                 -1 (default) = when stderr is a terminal, 0 = off, 1 = on */
    int timeline_max;         /* FTRT_TIMELINE_MAX: ledger intervals kept per rank for the
                                 report's timeline (default 200000; totals stay exact) */
    int ckpt_qd;              /* FTRT_CKPT_QD: checkpoint I/O requests in flight per shard
                                 (default 8, 1..256) */
    int ckpt_chunk_kb;        /* FTRT_CKPT_CHUNK_KB: bytes per checkpoint I/O request, KiB; a power
                                 of two in [64, 65536] (default 4096) */
    int ckpt_staging_mb;      /* FTRT_CKPT_STAGING_MB: staging memory for snapshots, MiB; room for
                                 two shards gives double buffering, one shard a single buffer, less
                                 a synchronous write; 0 (default) = two shards, within half of the
                                 physical memory */
    int ckpt_policy;          /* FTRT_CKPT_POLICY: what a checkpoint does while staging is busy
                                 with earlier ones: FTRT_CKPT_WAIT (default, "wait") or
                                 FTRT_CKPT_SKIP ("skip") */
    int ckpt_direct;          /* FTRT_CKPT_DIRECT: 1 (default) = O_DIRECT where the file system
                                 accepts it, else buffered (said once); 0 = always buffered */
    int debug_ckpt_write_delay_ms; /* FTRT_DEBUG_CKPT_WRITE_DELAY_MS: test knob: the persist thread
                                 sleeps this long after each completed write (default 0) */
    int async_progress;       /* FTRT_ASYNC_PROGRESS: 1 (default) = a progress thread drives the
                                 overlapped collectives when MPI provides MPI_THREAD_MULTIPLE;
                                 0 = progress only inside ftrt calls */
    int progress_poll_us;     /* FTRT_PROGRESS_POLL_US: the progress thread's polling period while
                                 a collective is in flight, microseconds (default 50, 0..100000) */
} ftrt_config;

/* FTRT_CKPT_POLICY values. */
#define FTRT_CKPT_WAIT 0
#define FTRT_CKPT_SKIP 1

/*
 * Fills *cfg with defaults, then applies FTRT_* environment variables.
 *   cfg:  caller-owned struct; size: sizeof(ftrt_config) as the caller knows it (ABI check).
 * Returns 0, FTRT_EINVAL (NULL cfg or size too small), or FTRT_ECONFIG when an environment
 * variable holds a bad value (the log names it; the field keeps its default).
 * Thread-safe (reads the environment only).
 */
FTRT_API int ftrt_config_init(ftrt_config *cfg, size_t size);

/* ------------------------------------------------------------------------------------------ */
/* Lifecycle                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct ftrt_ctx ftrt_ctx;

/*
 * Joins the job. Collective over MPI_COMM_WORLD at start. If MPI is not initialized, ftrt
 * initializes it (MPI_THREAD_MULTIPLE, so that overlapped collectives get a progress thread;
 * see ftrt_allreduce_start()) and ftrt_finalize() finalizes it.
 *   cfg:  configuration (NULL = ftrt_config_init() defaults); copied.
 *   out:  receives the context, owned by the caller until ftrt_finalize().
 * Returns:
 *   0           a trainer: train as ftrt_rank() of ftrt_size(). A promoted hot spare also
 *               returns 0, later in the job; it must register its regions and call
 *               ftrt_restore(), which hands it the replaced rank's state and resume step.
 *   FTRT_DONE   the coordinator, or a spare that was never needed, after the job ended
 *               successfully: call ftrt_finalize() and exit 0 without training.
 *   FTRT_ENOSPARE / FTRT_EABORT  (coordinator) the job failed; the report says why. *out is set:
 *               call ftrt_finalize() and exit non-zero.
 *   FTRT_ECONFIG bad configuration (e.g. world < 2); FTRT_EMPI; FTRT_ETIMEDOUT (a rank never
 *               connected); FTRT_ECOORD (a non-coordinator, or a waiting spare, lost the
 *               coordinator); -errno.
 *               *out is NULL on these errors.
 * Not thread-safe: call once per process, from the thread that will use the context.
 */
FTRT_API int ftrt_init(const ftrt_config *cfg, ftrt_ctx **out);

/*
 * Leaves the job: a trainer reports its statistics to the coordinator and waits (at most the
 * heartbeat timeout + 1 s) for its farewell, which says whether any process of the world died
 * during the job; then the control plane is closed and memory is freed. If ftrt_init()
 * initialized MPI, MPI is finalized here, except after a process died: then MPI_Finalize is
 * skipped, because Open MPI 4.1's MPI_Finalize can hang in its PMIx fence after a process died
 * under `mpirun --enable-recovery`; the process simply exits. NULL is accepted.
 * Returns 0, or FTRT_SKIP_MPI_FINALIZE when the caller initialized MPI itself and must not call
 * MPI_Finalize. The context is freed in every case. Call from the thread that called ftrt_init().
 */
FTRT_API int ftrt_finalize(ftrt_ctx *ctx);

/* Logical rank of this trainer in [0, ftrt_size()), or FTRT_ESTATE for non-trainers. */
FTRT_API int ftrt_rank(const ftrt_ctx *ctx);
/* Number of trainers N (the data-parallel world), or FTRT_ESTATE for a NULL ctx. */
FTRT_API int ftrt_size(const ftrt_ctx *ctx);
/* World rank of this process in MPI_COMM_WORLD. */
FTRT_API int ftrt_world_rank(const ftrt_ctx *ctx);
/* Current epoch (0 at start, +1 per membership change). */
FTRT_API int ftrt_epoch(const ftrt_ctx *ctx);

/* ------------------------------------------------------------------------------------------ */
/* State regions and checkpoints                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Region flags. REPLICATED: identical on every trainer (parameters, optimizer state of data
 * parallel training); recovered in memory from a survivor and, in checkpoints, written as 1/N
 * slices by each trainer. SHARDED: different on each trainer; recovered from the newest
 * committed checkpoint and only restorable to the same number of trainers. */
#define FTRT_REGION_REPLICATED 0u
#define FTRT_REGION_SHARDED 1u
/* Or'ed with one of the above: the region is CUDA device memory. Snapshots copy it into pinned
 * staging on a side stream. Needs a libftrt built with CUDA; otherwise ftrt_register() refuses
 * it with FTRT_ENOTSUP. */
#define FTRT_REGION_DEVICE 2u

/*
 * Registers `bytes` bytes of memory at `ptr` as checkpointed and recovered state.
 *   name:  1..63 bytes, unique per context; copied.
 *   ptr:   stays owned by the caller, at the same address, while registered. ftrt reads it
 *          during a snapshot (from ftrt_checkpoint_start() until ftrt_checkpoint_wait_snapshot()
 *          or ftrt_checkpoint() returns) and writes it in ftrt_restore() and ftrt_recover();
 *          at no other time.
 *   flags: FTRT_REGION_REPLICATED or FTRT_REGION_SHARDED, optionally | FTRT_REGION_DEVICE.
 * Every trainer registers the same regions in the same order (sizes of SHARDED regions may
 * differ). Regions may be added and removed (ftrt_unregister()) between checkpoints; the next
 * checkpoint holds the regions registered when it starts.
 * Returns the region's current index (>= 0; indices shift when an earlier region is
 * unregistered), FTRT_EINVAL (bad name/ptr/flags, duplicate name), FTRT_ENOTSUP (a device
 * region without CUDA support), FTRT_ESTATE (not a trainer), or -ENOMEM.
 */
FTRT_API int ftrt_register(ftrt_ctx *ctx, const char *name, void *ptr, size_t bytes,
                           unsigned flags);

/*
 * Removes region `name` from the registry. Waits for a snapshot in progress to finish first
 * (it may be reading the region); afterwards ftrt never touches the memory again. Checkpoints
 * already taken keep the region's bytes. Returns 0, FTRT_EINVAL (NULL, or no such region), or
 * FTRT_ESTATE (not a trainer).
 */
FTRT_API int ftrt_unregister(ftrt_ctx *ctx, const char *name);

/*
 * Loads the registered regions at start. Collective over trainers.
 *  - A promoted hot spare receives the replaced rank's state from the most advanced survivor
 *    (or from the checkpoint the recovery plan names) and gets the step to resume at.
 *  - Otherwise, when <ckpt_dir>/LATEST exists, every trainer loads the newest committed
 *    checkpoint whose shards all verify (CRC32C), falling back to older committed ones and
 *    logging why each was skipped.
 *   step: receives the step to resume at (the number of steps already done; 0 for a fresh
 *         start).
 * Returns 1 when state was restored, 0 when there is nothing to restore (fresh start),
 * FTRT_ENOCKPT (checkpoints exist but none is usable), FTRT_EMISMATCH (regions differ from the
 * checkpoint, or SHARDED regions with a different number of trainers), FTRT_ERECOVER (a rank
 * failed meanwhile: call ftrt_recover()), FTRT_ESTATE, -errno.
 */
FTRT_API int ftrt_restore(ftrt_ctx *ctx, int64_t *step);

/*
 * Checkpoints are asynchronous. A checkpoint of step S (the state after S steps) is a snapshot
 * (the registered regions copied into ftrt-owned staging memory with their CRC32C), then a
 * persist on a background thread (<ckpt_dir>/step-<S>/rank-<r>.ftrt written through io_uring,
 * O_DIRECT where the file system accepts it, fdatasync'ed), then a commit by the coordinator
 * once every trainer's shard of S is durable (MANIFEST, LATEST replaced atomically, checkpoints
 * beyond FTRT_CKPT_KEEP removed). Every trainer checkpoints the same steps. The application
 * waits only for the snapshot, and can overlap even that with the next step's computation:
 *
 *     ftrt_checkpoint_start(ctx, step);       // after the update of step-1
 *     forward_backward();  allreduce();       // may read the regions, must not write them
 *     ftrt_checkpoint_wait_snapshot(ctx);     // helps copy the rest; then state is free
 *     optimizer_update();
 *
 * ftrt_checkpoint() is start + wait_snapshot. A failed persist or commit does not stop
 * training: the previous committed checkpoint stays, the coordinator logs and reports it, and
 * ftrt_checkpoint_wait_commit() returns the reason.
 */

/*
 * Starts checkpoint `step` (>= 0): lays out this rank's shard, takes a staging buffer and
 * starts the snapshot on the engine's snapshot thread, then returns. The registered regions may
 * be read but not modified, freed or unregistered until ftrt_checkpoint_wait_snapshot()
 * returns. A snapshot still running from an earlier start is finished first. When every staging
 * buffer is still being written: FTRT_CKPT_POLICY=wait blocks until the oldest is written,
 * skip returns FTRT_SKIPPED at once (nothing taken; the coordinator counts it). When staging
 * cannot hold one shard, the checkpoint is written here, synchronously.
 * Returns 0 (snapshot started), FTRT_SKIPPED, FTRT_ERECOVER (the epoch changed: call
 * ftrt_recover(); nothing taken), FTRT_ENOSPARE/FTRT_ECOORD/FTRT_EABORT, FTRT_EINVAL (NULL ctx,
 * step < 0, or a checkpoint of this step still undecided), FTRT_ESTATE (not a trainer, or
 * ftrt_recover() is owed), -EEXIST (step already committed: not rewritten), -EFBIG, -ENOMEM
 * (staging), -errno (synchronous write). Application thread only.
 */
FTRT_API int ftrt_checkpoint_start(ftrt_ctx *ctx, int64_t step);

/*
 * Optional: maps, faults in and (in the background) registers the staging memory for the
 * regions registered now, and starts the engine's threads, so that the first checkpoint does
 * not pay for it (about 0.6 s per GiB of staging on a 2-core VM). Call after registering the
 * regions, e.g. after ftrt_restore(). Returns 0, FTRT_EINVAL, FTRT_ESTATE (not a trainer),
 * -EFBIG, -ENOMEM. Application thread only.
 */
FTRT_API int ftrt_checkpoint_prepare(ftrt_ctx *ctx);

/*
 * Returns once the snapshot started by ftrt_checkpoint_start() is complete, the calling thread
 * helping with the copy; the registered regions may then be modified. Returns 0 (also when no
 * snapshot is running) or FTRT_EINVAL (NULL). Application thread only.
 */
FTRT_API int ftrt_checkpoint_wait_snapshot(ftrt_ctx *ctx);

/*
 * ftrt_checkpoint_start(ctx, step) followed by ftrt_checkpoint_wait_snapshot(ctx): returns once
 * the state may be modified again; the write and the commit continue in the background.
 * Returns what ftrt_checkpoint_start() returns.
 */
FTRT_API int ftrt_checkpoint(ftrt_ctx *ctx, int64_t step);

/*
 * Waits until the coordinator has decided checkpoint `step` (-1: the newest one started on
 * this rank), for at most timeout_ms milliseconds (-1: no limit).
 * Returns 0 (committed), FTRT_SKIPPED (a trainer skipped it), the first failure of a trainer
 * (-errno such as -ENOSPC or -EIO, or FTRT_ECORRUPT from the coordinator's check), FTRT_ERECOVER
 * (abandoned by an epoch change: the previous committed checkpoint stays), FTRT_ETIMEDOUT,
 * FTRT_ENOSPARE/FTRT_ECOORD/FTRT_EABORT, FTRT_EINVAL (no such checkpoint among the last 64
 * started here), FTRT_ESTATE (not a trainer). Application thread only.
 */
FTRT_API int ftrt_checkpoint_wait_commit(ftrt_ctx *ctx, int64_t step, int timeout_ms);

/* Checkpoint statistics of this rank (ftrt_checkpoint_stats()). */
#define FTRT_CKPT_STAT_DIRECT 1u    /* the last persist used O_DIRECT */
#define FTRT_CKPT_STAT_FIXED 2u     /* the last persist wrote from registered (fixed) buffers */
#define FTRT_CKPT_STAT_STREAMING 4u /* staging below one shard: checkpoints written synchronously */
typedef struct ftrt_ckpt_stats {
    uint32_t size;               /* bytes of this struct that were filled in */
    uint32_t flags;              /* FTRT_CKPT_STAT_* */
    int64_t started;             /* snapshots taken */
    int64_t skipped;             /* not taken: staging busy under FTRT_CKPT_POLICY=skip */
    int64_t persisted;           /* shards made durable */
    int64_t failed;              /* shards that failed to write */
    int64_t abandoned;           /* persists abandoned by an epoch change or shutdown */
    int64_t committed;           /* checkpoints the coordinator committed */
    int64_t last_committed_step; /* -1 when none */
    double stall_s;              /* seconds the application was blocked in checkpoint calls */
    double last_stall_s;         /* of the last ftrt_checkpoint() (or start) */
    double last_snapshot_s;      /* start -> snapshot complete */
    double last_persist_s;       /* persist thread: image -> durable, renamed, reported */
    double last_write_s;         /* of which the writes (before fdatasync) */
    uint64_t last_bytes;         /* size of the last shard file */
    uint64_t staging_bytes;      /* staging memory held */
    int32_t staging_slots;       /* staging buffers (0, 1 or 2) */
    int32_t pad;
    double last_restore_s;       /* the last ftrt_restore() from disk: load + verification */
    uint64_t last_restore_bytes; /* region bytes it read and verified */
} ftrt_ckpt_stats;

/* Copies this rank's checkpoint statistics into *out (size: sizeof(ftrt_ckpt_stats) as the
 * caller knows it; a smaller struct gets the leading fields). Returns 0 or FTRT_EINVAL. Any
 * thread. */
FTRT_API int ftrt_checkpoint_stats(const ftrt_ctx *ctx, ftrt_ckpt_stats *out, size_t size);

/* ------------------------------------------------------------------------------------------ */
/* Training loop                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef enum ftrt_dtype { FTRT_FLOAT32 = 0, FTRT_FLOAT64 = 1, FTRT_INT64 = 2 } ftrt_dtype;
typedef enum ftrt_op { FTRT_SUM = 0, FTRT_MIN = 1, FTRT_MAX = 2 } ftrt_op;

/*
 * In-place allreduce of `count` elements of `dtype` at `buf` over the trainers. The reduction
 * runs on ftrt-owned buffers with MPI_Iallreduce, polled together with the epoch flag, so a
 * failure elsewhere returns FTRT_ERECOVER promptly and `buf` is left unchanged. For a fixed
 * number of trainers the result is bitwise deterministic and identical on every trainer,
 * whichever process holds each logical rank.
 * Returns 0; FTRT_ERECOVER; FTRT_ENOSPARE/FTRT_ECOORD/FTRT_EABORT; FTRT_EINVAL; FTRT_EMPI;
 * -ENOMEM; FTRT_ESTATE (not a trainer, or ftrt_recover() is owed).
 */
FTRT_API int ftrt_allreduce(ftrt_ctx *ctx, void *buf, size_t count, ftrt_dtype dtype,
                            ftrt_op op);

/* ------------------------------------------------------------------------------------------ */
/* Overlapped collectives                                                                      */
/* ------------------------------------------------------------------------------------------ */

/*
 * A request is one collective in flight: started by ftrt_allreduce_start() or by a bucketer
 * (or the NCCL plane, ftrt_gpu.h), finished by ftrt_request_test() / ftrt_request_wait(),
 * released by ftrt_request_free(). Owned by the caller; release every request before
 * ftrt_finalize(). As with MPI requests, every trainer starts the same requests in the same
 * order.
 *
 * Progress: when MPI runs at MPI_THREAD_MULTIPLE (ftrt_init() asks for it when it initializes
 * MPI) a progress thread per context packs, starts, polls and unpacks the collectives while the
 * application computes. It sleeps while nothing is in flight and polls every
 * FTRT_PROGRESS_POLL_US microseconds (default 50) while something is. When the application
 * initialized MPI below MPI_THREAD_MULTIPLE, or FTRT_ASYNC_PROGRESS=0, collectives progress only
 * inside ftrt calls (start, test, wait, ready); a warning says so once.
 *
 * Failures: a request of an epoch that ended completes with FTRT_ERECOVER promptly and leaves
 * the application's memory untouched; the staging buffer of its collective is never reused.
 * ftrt_recover() returns only once every request of the old epoch is final, so nothing of the
 * old epoch writes application memory afterwards.
 *
 * All request and bucketer functions: application thread only (the thread that called
 * ftrt_init()).
 */
typedef struct ftrt_request ftrt_request;

/*
 * Starts an in-place allreduce of `count` elements of `dtype` at `buf` over the trainers and
 * returns at once. The data is copied into an ftrt-owned staging buffer when the collective
 * starts and the result copied back into buf when it completes: buf must stay valid and must not
 * be read or written until ftrt_request_test() returns 1 or ftrt_request_wait() returns.
 * For a fixed number of trainers the result is bitwise deterministic whichever process holds
 * each logical rank (it runs on a duplicate of the logical-rank-ordered communicator, with the
 * same counts); it may differ in the last bits from ftrt_allreduce() of the same data.
 *   req: receives the request (NULL on error).
 * Returns 0; FTRT_ERECOVER / FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT (nothing started);
 * FTRT_EINVAL (NULL ctx or req, NULL buf with count > 0, bad dtype or op); FTRT_ESTATE (not a
 * trainer, or ftrt_recover() is owed); FTRT_EMPI; -ENOMEM.
 */
FTRT_API int ftrt_allreduce_start(ftrt_ctx *ctx, void *buf, size_t count, ftrt_dtype dtype,
                                  ftrt_op op, ftrt_request **req);

/*
 * Returns 1 once req completed (the result is in its buffer), 0 while it is in flight, or its
 * error once it failed: FTRT_ERECOVER (the epoch changed; the buffer is unchanged: call
 * ftrt_recover()), FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT, FTRT_EMPI, -ENOMEM, FTRT_ECUDA /
 * FTRT_ENCCL (NCCL plane); FTRT_EINVAL for NULL. Never blocks. A final request keeps its answer.
 */
FTRT_API int ftrt_request_test(ftrt_request *req);

/*
 * Blocks until req is final and returns 0 or its error (the codes of ftrt_request_test()). The
 * time spent here counts as exposed communication. After an epoch change it returns
 * FTRT_ERECOVER promptly.
 */
FTRT_API int ftrt_request_wait(ftrt_request *req);

/* Releases a final request. Returns 0 (also for NULL), or FTRT_ESTATE while req is still in
 * flight (nothing is released: wait for it first). */
FTRT_API int ftrt_request_free(ftrt_request *req);

/*
 * Gradient bucketing, after PyTorch DDP's Reducer (torch/csrc/distributed/c10d/reducer.cpp):
 * the tensors of a model are assigned once to buckets of about bucket_bytes, walked in the
 * order their gradients become ready (with reverse = 1, from the last tensor to the first, the
 * order a backward pass produces them in, as DDP's bucket rebuild learns it); a bucket is closed
 * once it holds at least its limit, the first one's limit being first_bucket_bytes so that
 * communication starts early. Buckets are reduced in bucket order, in pieces of at most
 * piece_bytes (consecutive byte ranges of the bucket, which may split a tensor): a piece's
 * allreduce starts as soon as the tensors it covers are ready and every earlier piece has
 * started. piece_bytes = 0 reduces whole buckets, each as soon as its last tensor is ready, as
 * DDP does; the default 4 MiB pieces let the last bucket of a step communicate while the
 * backward pass still produces it (the NCCL plane always reduces whole buckets).
 */
typedef struct ftrt_bucket_config {
    uint32_t size;             /* sizeof(ftrt_bucket_config), set by ftrt_bucket_config_init() */
    uint32_t version;          /* FTRT_VERSION_MAJOR at build time */
    size_t bucket_bytes;       /* bucket limit, bytes (default 25 MiB, DDP's bucket_cap_mb) */
    size_t first_bucket_bytes; /* limit of the first bucket (default 1 MiB, DDP's
                                  _DEFAULT_FIRST_BUCKET_BYTES) */
    int reverse;               /* 1 (default): gradients become ready from tensor n-1 down to 0;
                                  0: from 0 up */
    int average;               /* 1 (default): results are the mean over the trainers (the sum
                                  multiplied by (dtype)(1.0 / N), as DDP averages gradients);
                                  0: the sum. Not for FTRT_INT64. */
    size_t piece_bytes;        /* largest allreduce, bytes (default 4 MiB; 0 = whole buckets).
                                  The same on every trainer: it sets the collectives' counts. */
} ftrt_bucket_config;

/* Fills *cfg with the defaults above. size: sizeof(ftrt_bucket_config) as the caller knows it.
 * Returns 0 or FTRT_EINVAL (NULL, or size too small). Thread-safe. */
FTRT_API int ftrt_bucket_config_init(ftrt_bucket_config *cfg, size_t size);

typedef struct ftrt_bucketer ftrt_bucketer;

/*
 * Creates a bucketer for `ntensors` gradient tensors of `dtype`, counts[i] elements each, in
 * registration (forward) order. The assignment depends only on the counts, dtype and cfg, so it
 * is the same on every trainer. Host memory; the NCCL plane has its own (ftrt_gpu.h).
 *   cfg: NULL = defaults; copied.  out: receives the bucketer, owned by the caller.
 * Returns 0; FTRT_EINVAL (NULL ctx/counts/out, ntensors < 1, bad dtype, a zero limit, average
 * with FTRT_INT64, absurd counts); FTRT_ESTATE (not a trainer); -ENOMEM.
 */
FTRT_API int ftrt_bucketer_create(ftrt_ctx *ctx, const size_t *counts, int ntensors,
                                  ftrt_dtype dtype, const ftrt_bucket_config *cfg,
                                  ftrt_bucketer **out);

/*
 * Marks gradient `tensor` (0 <= tensor < ntensors) of this step ready at `ptr` (counts[tensor]
 * elements). Every piece this completes (see ftrt_bucket_config) starts its allreduce, in piece
 * order; the result (the sum, or the mean) is written back into each tensor. ptr
 * must stay valid and unmodified, and must not be read, until ftrt_bucketer_wait_all() returns.
 * Returns 0; FTRT_EINVAL (bad index, NULL ptr, tensor already ready this step); or the first
 * error of this step so far (FTRT_ERECOVER etc., as ftrt_bucketer_wait_all(): the application
 * may cut its backward pass short and call ftrt_bucketer_reset() or ftrt_bucketer_wait_all()).
 */
FTRT_API int ftrt_bucketer_ready(ftrt_bucketer *b, int tensor, void *ptr);

/*
 * Ends the step: waits for every bucket's allreduce, then clears the readiness for the next
 * step. Counted as one data-plane wait (exposed communication).
 * Returns 0 (every tensor holds its result); FTRT_ESTATE (a tensor was not marked ready: the
 * log names it; nothing was waited for or cleared) or ftrt_recover() is owed; FTRT_ERECOVER
 * (a rank failed: some tensors may hold reduced and others local values; call ftrt_recover()
 * and redo the step); FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT; FTRT_EMPI; -ENOMEM;
 * FTRT_ECUDA / FTRT_ENCCL (NCCL plane); FTRT_EINVAL (NULL).
 */
FTRT_API int ftrt_bucketer_wait_all(ftrt_bucketer *b);

/* Abandons this step: waits for the buckets already started (after an epoch change they fail
 * promptly) and clears the readiness. Returns 0 or FTRT_EINVAL (NULL). */
FTRT_API int ftrt_bucketer_reset(ftrt_bucketer *b);

/* Number of buckets (>= 1), or FTRT_EINVAL for NULL. */
FTRT_API int ftrt_bucketer_buckets(const ftrt_bucketer *b);

/* Number of pieces, the allreduces of a step (>= the number of buckets), or FTRT_EINVAL. */
FTRT_API int ftrt_bucketer_pieces(const ftrt_bucketer *b);

/* The bucket of `tensor` (buckets are numbered in the order they start), or FTRT_EINVAL. */
FTRT_API int ftrt_bucketer_bucket_of(const ftrt_bucketer *b, int tensor);

/* Frees the bucketer. Returns 0 (also for NULL), or FTRT_ESTATE while a bucket of an unfinished
 * step is in flight (call ftrt_bucketer_wait_all() or ftrt_bucketer_reset() first). */
FTRT_API int ftrt_bucketer_free(ftrt_bucketer *b);

/*
 * Records that step `step` (0-based) is complete on this trainer and that registered state now
 * reflects `step + 1` steps done. Sent to the coordinator with the next heartbeat; used for
 * progress, the resume step of a recovery and the report's timing. Cheap (no I/O, no locks).
 * Returns 0 or FTRT_EINVAL (step decreasing by more than a recovery allows).
 */
FTRT_API int ftrt_step_done(ftrt_ctx *ctx, int64_t step);

/*
 * Tells the runtime about the job, for the goodput ledger and the progress line:
 *   total_steps:    steps the job will run (for the ETA; 0 = unknown);
 *   flops_per_step: model FLOPs one trainer performs per step (forward + backward + update;
 *                   0 = unknown, then eMFU is not reported);
 *   peak_flops:     peak FLOP/s of one rank (0 = keep FTRT_PEAK_FLOPS).
 * Any trainer may call it, any number of times; the latest values are sent to the coordinator
 * within a second. Returns 0 or FTRT_EINVAL (negative or NaN values). Thread-safe.
 */
FTRT_API int ftrt_set_job_info(ftrt_ctx *ctx, int64_t total_steps, double flops_per_step,
                               double peak_flops);

/*
 * After FTRT_ERECOVER: reports this trainer's progress, waits for the coordinator's recovery
 * plan, builds the new communicator (MPI_Comm_create_group over the survivors plus the spare,
 * ordered by logical rank), sends replicated state from the most advanced survivor to the
 * others (or reloads the plan's committed checkpoint when SHARDED regions exist), and returns.
 *   step: receives the step to resume at.
 * Returns 0; FTRT_ENOSPARE (no spare left: exit non-zero, a relaunch resumes from the last
 * committed checkpoint); FTRT_ECOORD; FTRT_EABORT; FTRT_ERECOVER again (another failure during
 * this recovery that the coordinator folded into a newer epoch: call again); FTRT_EMPI.
 */
FTRT_API int ftrt_recover(ftrt_ctx *ctx, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif /* FTRT_H */

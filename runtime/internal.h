/*
 * internal.h - the context and the interfaces between libftrt's subsystems (internal).
 *
 * Threads: the application thread owns everything in ftrt_ctx except `cp`, the control-plane
 * state shared with the agent thread, which is guarded by cp.lock (atomics for the two flags
 * the data plane polls). The agent thread never calls MPI.
 */
#ifndef FTRT_INTERNAL_H
#define FTRT_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "checkpoint/ckpt.h"
#include "ftrt.h"
#include "runtime/ledger.h"
#include "runtime/proto.h"

/* ---- time ---- */
double ftrt__now(void);      /* CLOCK_MONOTONIC seconds */
double ftrt__wallclock(void); /* CLOCK_REALTIME seconds since the epoch */

/* ---- config ---- */
/* Validates cfg for a world of `world` processes (its size and version, every setting's range,
 * the spares and the heartbeat timeout against the world and the period) and resolves the
 * number of spares. Returns 0 or FTRT_ECONFIG (logged). */
int ftrt__config_check(const ftrt_config *cfg, int world, int *spares_out);
/* Copies the caller's config into dst (a full-size struct): the first src->size bytes as they
 * are, the settings past them (a caller built against an older, smaller ftrt_config) from their
 * defaults and environment variables. A src->size outside [8, sizeof(ftrt_config)] copies only
 * size and version (every setting from its default), for ftrt__config_check() to refuse. */
void ftrt__config_adopt(ftrt_config *dst, const ftrt_config *src);

/* One setting of ftrt_config as the table in config.c describes it (see there). */
enum { FTRT__SET_INT, FTRT__SET_POW2, FTRT__SET_DBL, FTRT__SET_ENUM, FTRT__SET_STR };
typedef struct ftrt__setting {
    const char *field;   /* the ftrt_config field */
    const char *env;     /* its FTRT_* environment variable */
    int kind;            /* FTRT__SET_*: int (INT, POW2, ENUM), double (DBL) or char[] (STR) */
    size_t offset, size; /* of the field in ftrt_config, bytes */
    double def;          /* the default (numeric kinds) */
    const char *def_str; /* the default (STR) */
    double lo, hi;       /* the range (STR: lo = minimum length) */
    const char *names;   /* ENUM: the environment's names, "a|b|c", index = value; else NULL */
    const char *doc;     /* one line for README.md's table */
} ftrt__setting;
/* The settings in struct order; *n receives their number. Static, thread-safe. */
const ftrt__setting *ftrt__settings(int *n);

/* ---- network helpers (net.c) ---- */
/* Opens a listening TCP socket on addr (empty: first non-loopback IPv4, else 127.0.0.1), port
 * chosen by the kernel. Writes the address actually used to addr_out[cap] and the port. Returns
 * the fd or -errno. */
int ftrt__listen(const char *addr, char *addr_out, size_t cap, int *port);
/* Connects to addr:port with a timeout in ms. Returns the fd or -errno. */
int ftrt__connect(const char *addr, int port, int timeout_ms);
/* Fills buf with len random bytes (getrandom). Returns 0 or -errno. */
int ftrt__random(void *buf, size_t len);

/* ---- data plane (comm/mpi_plane.c) ---- */
typedef struct ftrt__plane {
    MPI_Comm comm;   /* MPI_COMM_NULL when none */
    void *buf;       /* staging buffer for collectives (never reused once abandoned) */
    size_t buf_cap;
    void **graveyard; /* buffers of abandoned collectives, freed after MPI_Finalize */
    int ngraveyard;
    unsigned gen;     /* +1 per communicator adopted (comm/async.c dups each one once) */
    struct ftrt__engine *async;     /* overlapped collectives (comm/async.h); NULL until used */
    struct ftrt__plane_hook *hooks; /* abandon listeners (the NCCL plane, comm/async.h) */
} ftrt__plane;

struct ftrt_ctx;
/* Adopts comm (errors set to return). */
void ftrt__plane_set(ftrt__plane *p, MPI_Comm comm);
/* Abandons the current communicator and staging buffer (a collective may still be in flight on
 * them after a failure): neither is touched again. Returns 0 or -ENOMEM. */
int ftrt__plane_abandon(ftrt__plane *p);
/* Frees staging and graveyard buffers; call only after MPI_Finalize or when no collective was
 * ever abandoned. */
void ftrt__plane_free(ftrt__plane *p);
/* Stops the data plane's progress thread (comm/async.c), if any; call before MPI_Finalize.
 * Idempotent. */
void ftrt__plane_stop(ftrt__plane *p);
/* Polled broadcast of `bytes` at buf from `root` over the plane; returns 0, FTRT_ERECOVER or a
 * fatal code (see ftrt__interrupted), FTRT_EMPI. */
int ftrt__plane_bcast(struct ftrt_ctx *ctx, void *buf, size_t bytes, int root);

/* ---- control-plane state shared with the agent thread ---- */
typedef struct ftrt__cp {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_mutex_t send_lock; /* serializes writers of fd */
    int fd;
    int wake[2]; /* pipe: wakes the agent to stop */
    pthread_t thread;
    int thread_started;
    _Atomic int pending_epoch; /* newest epoch the coordinator announced */
    _Atomic int fatal;         /* 0 or FTRT_ENOSPARE/FTRT_ECOORD/FTRT_EABORT */
    _Atomic int64_t steps_done; /* heartbeat payload, written by the app thread */
    _Atomic double kept_s;
    _Atomic int64_t waits;      /* heartbeat payload: collective waits entered */
    _Atomic double compute_s;   /* heartbeat payload: time outside data-plane waits */
    double last_from_coord;     /* agent thread only: monotonic time of the last message */
    _Atomic double t_fail_wall; /* failure time of the newest FAILURE (wall seconds) */
    _Atomic int stop;
    /* guarded by lock */
    int welcomed;
    ftrt__welcome welcome;
    ftrt__plan *plan; /* newest PLAN received (malloc'd) */
    size_t plan_len;
    int64_t commit_step;
    int commit_result;
    int commit_seen;
    int shutdown; /* SHUTDOWN received */
    int farewell; /* FAREWELL received (after our BYE) */
    int ranks_lost; /* from SHUTDOWN/FAREWELL: processes of the world that died */
} ftrt__cp;

/* ---- the context ---- */
struct ftrt_ctx {
    ftrt_config cfg;
    int world_rank, world_size;
    int role; /* enum ftrt__role */
    int rank, size, epoch;
    int ntrainers_initial, nspares;
    int mpi_initialized_by_us;
    int promoted;   /* spare promoted and ftrt_restore() owes the state transfer */
    int needs_recover;
    ftrt__plan *plan; /* the plan being applied (app thread's copy) */
    char status_file[1100];
    char host[FTRT__HOST_MAX];
    char coord_addr[64]; /* the control plane's address and port */
    int coord_port;

    ftrt__region *regs;
    int nregs, regs_cap;
    struct ftrt__ckpt_engine *ckpt; /* checkpoint engine (checkpoint/engine.c); set before the
                                       agent thread starts, which reads it */

    ftrt__plane plane;
    ftrt__cp cp;

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

    int coord_result; /* coordinator: the job's outcome */
    int ranks_lost;   /* coordinator: processes of the world that died */
};

/* Returns FTRT_ERECOVER when the epoch changed, the fatal code when the job is over, else 0.
 * Cheap: two atomic loads. */
static inline int ftrt__interrupted(struct ftrt_ctx *ctx)
{
    int f = atomic_load_explicit(&ctx->cp.fatal, memory_order_acquire);
    if (f) return f;
    if (atomic_load_explicit(&ctx->cp.pending_epoch, memory_order_acquire) != ctx->epoch)
        return FTRT_ERECOVER;
    return 0;
}

/* ---- the ledger of this rank (context.c) ---- */
/* Switches this rank's timeline to `kind` now (thread-safe against the agent). */
void ftrt__ledger_mark(struct ftrt_ctx *ctx, int kind);
/* The kind of application time now: REWORK while redoing steps after a rollback, else
 * COMPUTE. */
int ftrt__compute_kind(const struct ftrt_ctx *ctx);
/* A wait ended with FTRT_ERECOVER: the partial step since the last step end becomes rework,
 * and the time since the failure (cp.t_fail_wall) detection wait. Idempotent. */
void ftrt__ledger_failure(struct ftrt_ctx *ctx);
/* Sends the finished part of the timeline (all of it when final) to the coordinator. Called
 * by the agent every second and by ftrt_finalize(). Returns 0 or -errno. */
int ftrt__ledger_send(struct ftrt_ctx *ctx, int final);

/* Progress bookkeeping around every data-plane wait of the application thread: counts the
 * waits (the coordinator's progress detector compares the counts of the trainers),
 * accumulates the time spent outside them (straggler detection) and records the wait in the
 * ledger as exposed communication. */
static inline void ftrt__wait_begin(struct ftrt_ctx *ctx)
{
    double now = ftrt__now();
    if (ctx->t_wait_end > 0)
        atomic_store(&ctx->cp.compute_s, atomic_load(&ctx->cp.compute_s) + (now - ctx->t_wait_end));
    atomic_fetch_add(&ctx->cp.waits, 1);
    ftrt__ledger_mark(ctx, FTRT__IV_COMM);
}
static inline void ftrt__wait_end(struct ftrt_ctx *ctx, int rc)
{
    ctx->t_wait_end = ftrt__now();
    if (rc == FTRT_ERECOVER)
        ftrt__ledger_failure(ctx);
    else
        ftrt__ledger_mark(ctx, ftrt__compute_kind(ctx));
}

/* Waits for MPI request *req, polling it with the interrupt flags and yielding the CPU politely.
 * Returns 0 when complete, else the interrupt code (the request is then abandoned). */
int ftrt__wait(struct ftrt_ctx *ctx, MPI_Request *req);

/* ---- agent (agent.c) ---- */
/* Connects to the coordinator, sends HELLO and starts the agent thread. Returns 0 or -errno /
 * FTRT_ETIMEDOUT. */
int ftrt__agent_start(struct ftrt_ctx *ctx, const char *addr, int port, uint64_t secret);
/* Sends a message on the control connection (thread-safe). Returns 0 or -errno. */
int ftrt__agent_send(struct ftrt_ctx *ctx, uint32_t type, const void *payload, uint32_t len);
/* Stops and joins the agent thread and closes the connection. Idempotent. */
void ftrt__agent_stop(struct ftrt_ctx *ctx);
/* Waits (cp.lock held by the caller) on cp.cond for at most ms milliseconds. */
void ftrt__cp_wait(struct ftrt_ctx *ctx, int ms);

/* ---- coordinator (coordinator.c) ---- */
/* Runs the coordinator on world rank 0 until the job ends. listen_fd is owned and closed.
 * Returns FTRT_DONE on success or the job's failure code. */
int ftrt__coordinator_run(struct ftrt_ctx *ctx, int listen_fd, uint64_t secret);

/* ---- recovery plan (plan.c) ---- */
/* Chooses where a recovery resumes. steps_done[l] is what logical rank l reported, survivor[l]
 * is 0 for a rank being replaced. Replicated state only: resume at the most advanced survivor's
 * step, with that survivor (lowest logical rank on ties) as the broadcast source, so no completed
 * step is redone. With sharded state: resume at last_committed and reload it (*ckpt). Returns 0,
 * FTRT_EABORT (no survivor) or FTRT_ENOCKPT (sharded state and nothing committed). */
int ftrt__plan_compute(const int64_t *steps_done, const int *survivor, int n, int has_sharded,
                       int64_t last_committed, int64_t *resume, int *source, int64_t *ckpt);

/* ---- recovery (recovery.c) ---- */
/* Builds the communicator and applies ctx->cp.plan (logical rank, size, epoch). Called by
 * survivors in ftrt_recover() and by a promoted spare in ftrt_init(). Returns 0 or FTRT_EMPI. */
int ftrt__apply_plan(struct ftrt_ctx *ctx);
/* State transfer of the plan: broadcast of replicated regions from the source, or a reload of
 * the plan's checkpoint. Returns 0 or an error code. */
int ftrt__transfer_state(struct ftrt_ctx *ctx);
/* Step-time bookkeeping after resuming at step R (rework of steps >= R). */
void ftrt__ledger_resume(struct ftrt_ctx *ctx, int64_t resume_step);

#endif

/*
 * context.c - ftrt_init/ftrt_finalize, roles, job info, rank queries and step bookkeeping (the
 * region registry and the checkpoint and restore entry points are runtime/regions.c; the
 * collectives runtime/data.c; ftrt_recover runtime/recovery.c).
 *
 * Start-up (docs/ARCHITECTURE.md "Roles"): world rank 0 opens the control-plane socket and
 * broadcasts {address, port, secret, local tag} with MPI_Bcast; every other rank connects, says
 * hello and waits for its WELCOME. Trainers build the training communicator with
 * MPI_Comm_create_group over world ranks 1..N; spares block in ftrt_init() until promoted or
 * shut down; the coordinator runs its loop inside ftrt_init() (the "head process" pattern of
 * FTI). After ftrt_finalize(), a non-zero exit status of the process is recorded for
 * tools/ftrt-run (record_exit()).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/cpu_peak.h"
#include "base/knobs.h"
#include "base/sigterm.h"
#include "base/log.h"
#include "kernels/erasure.h"
#include "comm/ulfm.h"
#include "kernels/location.h"
#include "runtime/coordinator/coordinator.h"
#include "runtime/internal.h"

int ftrt_set_job_info(ftrt_ctx *ctx, int64_t total_steps, double flops_per_step,
                      double peak_flops)
{
    if (!ctx || total_steps < 0 || !(flops_per_step >= 0) || !(peak_flops >= 0))
        return FTRT_EINVAL;
    pthread_mutex_lock(&ctx->ledger_lock);
    ctx->total_steps = total_steps;
    ctx->flops_per_step = flops_per_step;
    if (peak_flops > 0) ctx->peak_flops = peak_flops; /* else FTRT_PEAK_FLOPS, if set */
    pthread_mutex_unlock(&ctx->ledger_lock);
    return 0;
}

typedef struct bootstrap {
    char addrs[FTRT__ADDRS_MAX]; /* the coordinator's addresses, to try in order */
    int32_t port;
    int32_t rc;
    uint64_t secret;    /* every hello on the control plane carries it */
    uint64_t local_tag; /* names the job's local sockets (base/net.h): never the secret */
} bootstrap;

static void ctx_free(ftrt_ctx *ctx)
{
    if (!ctx) return;
    ftrt__agent_stop(ctx);
    ftrt__ckpt_engine_free(ctx->ckpt); /* after the agent: it calls into the engine */
    free(ctx->cp.plan);
    free(ctx->cp.members);
    free(ctx->cp.holder);
    free(ctx->data_ranks);
    free(ctx->plan);
    free(ctx->regs);
    free(ctx->step_s);
    ftrt__replica_free(ctx);
    ftrt__ledger_free(&ctx->ledger);
    pthread_mutex_destroy(&ctx->ledger_lock);
    pthread_mutex_destroy(&ctx->cp.lock);
    pthread_mutex_destroy(&ctx->cp.send_lock);
    pthread_cond_destroy(&ctx->cp.cond);
    ftrt__watch_destroy(&ctx->watch);
    free(ctx);
}

/* Waits for the WELCOME; returns 0 or the fatal code. */
static int wait_welcome(ftrt_ctx *ctx)
{
    int rc = 0;
    pthread_mutex_lock(&ctx->cp.lock);
    while (!ctx->cp.welcomed && !(rc = atomic_load(&ctx->watch.fatal)) && !ctx->cp.shutdown)
        ftrt__cp_wait(ctx, 100);
    if (!rc && !ctx->cp.welcomed) rc = FTRT_EABORT;
    pthread_mutex_unlock(&ctx->cp.lock);
    return rc;
}

/* spare_wait's answer when this spare, the standby coordinator, lost the coordinator. */
enum { TAKE_OVER = 0x7ffffff0 }; /* (no ftrt code: FTRT_DONE is 1) */

/* A spare waits here until it is promoted (returns 0) or the job ends: FTRT_DONE, or the code
 * of an aborted job (*ended set: SHUTDOWN said so), or the fatal code of a lost coordinator;
 * or, the standby coordinator, until it takes over (TAKE_OVER). */
static int spare_wait(ftrt_ctx *ctx, int *ended)
{
    *ended = 0;
    pthread_mutex_lock(&ctx->cp.lock);
    for (;;) {
        if (ctx->cp.takeover) {
            pthread_mutex_unlock(&ctx->cp.lock);
            return TAKE_OVER;
        }
        if (ctx->cp.plan) break;
        int fatal = atomic_load(&ctx->watch.fatal);
        if (ctx->cp.shutdown || fatal) {
            *ended = ctx->cp.shutdown;
            int end = ctx->cp.job_end;
            pthread_mutex_unlock(&ctx->cp.lock);
            /* SHUTDOWN: the job is over, failed when it carries the abort's code (< 0); a lost
             * coordinator is an error this spare reports itself. */
            if (!*ended) return fatal;
            return end < 0 ? end : FTRT_DONE;
        }
        ftrt__cp_wait(ctx, 1000);
    }
    pthread_mutex_unlock(&ctx->cp.lock);
    ftrt_log_warn("promoted from hot spare");
    pthread_mutex_lock(&ctx->cp.send_lock); /* no longer a standby coordinator, if it was */
    if (ctx->cp.sb_fd >= 0) close(ctx->cp.sb_fd);
    ctx->cp.sb_fd = -1;
    pthread_mutex_unlock(&ctx->cp.send_lock);
    ftrt__ledger_spare_mark(ctx, FTRT__IV_RECOVERY); /* its time as a spare, sent now */
    int rc = ftrt__apply_plan(ctx);
    if (rc) return rc;
    ctx->role = FTRT__ROLE_TRAINER;
    ctx->promoted = 1;
    ctx->t_wait_end = ftrt__now();
    return 0;
}

static int trainer_comm(ftrt_ctx *ctx)
{
    MPI_Group world, grp;
    int range[1][3] = {{1, ctx->size, 1}};
    MPI_Comm comm = MPI_COMM_NULL;
    if (MPI_Comm_group(MPI_COMM_WORLD, &world) != MPI_SUCCESS) return FTRT_EMPI;
    int rc = MPI_Group_range_incl(world, 1, range, &grp);
    if (rc == MPI_SUCCESS) rc = ftrt__comm_create(grp, 0, &comm); /* comm/ulfm.h */
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) return FTRT_EMPI;
    MPI_Group_free(&grp);
    ftrt__plane_set(&ctx->plane, comm);
    return 0;
}

static int init_ctx(ftrt_ctx *ctx, const ftrt_config *cfg)
{
    ftrt__knobs_load(); /* test knobs: before any thread starts */
    if (ftrt__knobs.sim_device) /* a test arrangement (kernels/loc_sim.c): wins over CUDA's */
        ftrt__loc_set_device(ftrt__loc_sim());
    if (cfg)
        ftrt__config_adopt(&ctx->cfg, cfg); /* a smaller (older) struct: defaults past its size */
    else
        ftrt_config_init(&ctx->cfg, sizeof ctx->cfg);
    ftrt__log_level = ctx->cfg.log_level;
    ctx->t_start = ftrt__now();
    ftrt__replica_free(ctx); /* no partner replicas yet (steps -1) */
    ctx->cp.fd = -1;
    ctx->cp.left_fd = -1;
    ctx->cp.sb_fd = -1;
    ctx->cp.logical = -1;
    ctx->cp.wake[0] = ctx->cp.wake[1] = -1;
    ctx->hostif = ftrt__host_of(ctx);
    ftrt__watch_init(&ctx->watch); /* (its listeners: the NCCL plane's, base/watch.c) */
    ftrt__plane_init(&ctx->plane, &ctx->watch, ctx->hostif, ctx->cfg.async_progress,
                     ctx->cfg.progress_poll_us);
    pthread_mutex_init(&ctx->cp.lock, NULL);
    pthread_mutex_init(&ctx->cp.send_lock, NULL);
    pthread_cond_init(&ctx->cp.cond, NULL);
    pthread_mutex_init(&ctx->ledger_lock, NULL);
    ctx->peak_flops = ctx->cfg.peak_flops;
    if (ftrt__ledger_init(&ctx->ledger, FTRT__IV_STARTUP, ftrt__wallclock(),
                          (size_t)ctx->cfg.timeline_max))
        return -ENOMEM;
    ftrt__ckpt_opts o;
    ftrt__ckpt_opts_from(&ctx->cfg, &o);
    if (ftrt__ckpt_engine_new(&o, &ctx->watch, ctx->hostif, &ctx->ckpt)) return -ENOMEM;
    ctx->cp.on_commit = ftrt__ckpt_on_commit; /* before the agent thread starts */
    ctx->cp.on_commit_arg = ctx->ckpt;
    ctx->cp.on_tick = ftrt__ledger_tick;
    if (gethostname(ctx->host, sizeof ctx->host)) snprintf(ctx->host, sizeof ctx->host, "?");
    ctx->host[sizeof ctx->host - 1] = 0;
    if (ctx->cfg.status_file[0])
        snprintf(ctx->status_file, sizeof ctx->status_file, "%s", ctx->cfg.status_file);
    else
        snprintf(ctx->status_file, sizeof ctx->status_file, "%s/status.json", ctx->cfg.ckpt_dir);
    return 0;
}

/* The standby coordinator lost the coordinator: its agent thread has ended; it runs the
 * coordinator loop from the newest SYNC on its own listener, in place of world rank 0, until
 * the job ends (docs/detection-and-recovery.md "Standby coordinator"). Returns what
 * ftrt__coordinator_run returns. */
static int take_over(ftrt_ctx *ctx, uint64_t secret)
{
    ftrt__cp *cp = &ctx->cp;
    pthread_mutex_lock(&cp->send_lock);
    int lfd = cp->sb_fd;
    cp->sb_fd = -1; /* the coordinator owns it now */
    ftrt__coord_at at = cp->sb_at;
    pthread_mutex_unlock(&cp->send_lock);
    pthread_mutex_lock(&cp->lock);
    ftrt__takeover_args t = {.self = ctx->world_rank, .sync = cp->sync, .sync_len = cp->sync_len,
                             .by_silence = cp->takeover == 2, .last_heard = cp->takeover_heard};
    pthread_mutex_unlock(&cp->lock);
    if (!t.sync) {
        ftrt_log_error("standby coordinator: no state received from the coordinator; cannot "
                       "take over");
        close(lfd);
        return FTRT_ECOORD;
    }
    int cap = ftrt__sync_capacity(t.sync, t.sync_len);
    if (cap >= ctx->world_size) ctx->cfg.joinable = cap - ctx->world_size; /* (a joiner: 0) */
    ctx->role = FTRT__ROLE_COORD;
    ctx->rank = -1;
    snprintf(ctx->coord_addr, sizeof ctx->coord_addr, "%s", at.addrs);
    ctx->coord_port = at.port;
    ftrt__coord_args ca = {.cfg = &ctx->cfg, .world_size = ctx->world_size,
                           .ntrainers = ctx->ntrainers_initial, .t_start = ctx->t_start,
                           .t_start_wall = ctx->ledger.t_open, .status_file = ctx->status_file,
                           .host = ctx->host, .addr = ctx->coord_addr, .port = ctx->coord_port,
                           .mark_fd = -1, .join_tag = ctx->local_tag};
    /* The coordinator's mark on this host, as world rank 0 holds it: the ranks of this host
     * stay on their own connections when the others elect new host agents (agent_move.c). */
    if (ctx->cfg.host_agents) ca.mark_fd = ftrt__local_mark(ctx->local_tag);
    if (ca.mark_fd < 0 && ctx->cfg.host_agents)
        ftrt_log_warn("standby coordinator: cannot mark this host as the coordinator's (%s); "
                      "its ranks may elect a host agent", ftrt_strerror(ca.mark_fd));
    ftrt__ledger_msg *own = ftrt__ledger_whole(ctx, &t.own_tl_len); /* (NULL: totals only) */
    t.own_tl = own;
    int res = ftrt__coordinator_takeover(&ca, lfd, secret, &t);
    free(own);
    ctx->ranks_lost = ca.ranks_lost;
    ctx->coord_aborted = ca.aborted || res < 0;
    ctx->coord_result = res;
    return res;
}

/* MPI initialized (MULTIPLE when ftrt does it), errors returned, the world's rank and size.
 * Returns 0 or FTRT_EMPI. */
static int init_mpi(ftrt_ctx *ctx)
{
    int inited = 0, provided;
    MPI_Initialized(&inited);
    if (!inited) {
        /* MULTIPLE: overlapped collectives run a progress thread (comm/async.c); with a lower
         * level (an application that initialized MPI itself) they progress inside ftrt calls. */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return FTRT_EMPI;
        ctx->mpi_initialized_by_us = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &ctx->world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ctx->world_size);
    ftrt__log_rank = ctx->world_rank;
    if (ctx->world_rank == 0 && ftrt__ulfm_built() && !ftrt__ulfm_active())
        ftrt_log_warn("libftrt is built against an Open MPI with ULFM, which is off in this "
                      "job: a dead rank ends it. Launch with `mpirun --with-ft ulfm` "
                      "(tools/ftrt-run adds it)");
    return 0;
}

/* The job's secret: FTRT_JOB_SECRET (16 hex digits: tools/ftrt-run --joinable draws it and
 * hands it to the processes that join, runtime/join.c) when set, else 64 random bits. Returns 0,
 * FTRT_ECONFIG (malformed, logged) or -errno. */
static int job_secret(uint64_t *secret)
{
    const char *s = getenv("FTRT_JOB_SECRET");
    if (!s || !*s) return ftrt__random(secret, sizeof *secret);
    if (ftrt__secret_parse(s, secret)) {
        ftrt_log_error("FTRT_JOB_SECRET: expected 16 hex digits (the job's secret)");
        return FTRT_ECONFIG;
    }
    return 0;
}

/* World rank 0 opens the control plane (listener, secret, the coordinator's mark on its host,
 * the checkpoint directory) into *b, *listen_fd and *local_fd; b->rc says what failed. */
static void open_control_plane(ftrt_ctx *ctx, bootstrap *b, int *listen_fd, int *local_fd)
{
    *listen_fd = ftrt__listen(ctx->cfg.coord_addr, b->addrs, sizeof b->addrs, &b->port);
    if (*listen_fd < 0) b->rc = *listen_fd;
    else if ((b->rc = job_secret(&b->secret)) != 0 ||
             (b->rc = ftrt__random(&b->local_tag, sizeof b->local_tag)) != 0)
        close(*listen_fd);
    /* The coordinator's mark on this host, before any other rank learns the tag: the
     * ranks of this host connect to the coordinator directly, not through a host agent. */
    if (!b->rc && ctx->cfg.host_agents) *local_fd = ftrt__local_mark(b->local_tag);
    if (b->rc) return;
    /* Every rank learns it at once: a job that cannot checkpoint (nor write its status file,
     * which lives there by default) does not start. */
    int mk = ftrt__mkdir_p(ctx->cfg.ckpt_dir);
    if (mk) {
        ftrt_log_error("cannot create the checkpoint directory %s (FTRT_CKPT_DIR): %s",
                       ctx->cfg.ckpt_dir, strerror(-mk));
        b->rc = mk;
        close(*listen_fd);
        *listen_fd = -1;
    }
}

/* World rank 0: runs the coordinator until the job ends. Returns its result. */
static int run_coordinator(ftrt_ctx *ctx, const bootstrap *b, int listen_fd, int local_fd)
{
    ctx->role = FTRT__ROLE_COORD;
    ctx->rank = -1;
    ctx->size = ctx->ntrainers_initial;
    ftrt__coord_args ca = {.cfg = &ctx->cfg, .world_size = ctx->world_size,
                           .ntrainers = ctx->ntrainers_initial, .t_start = ctx->t_start,
                           .t_start_wall = ctx->ledger.t_open,
                           .status_file = ctx->status_file, .host = ctx->host,
                           .addr = ctx->coord_addr, .port = ctx->coord_port,
                           .mark_fd = local_fd, .join_tag = b->local_tag};
    int res = ftrt__coordinator_run(&ca, listen_fd, b->secret);
    ctx->ranks_lost = ca.ranks_lost;
    ctx->coord_aborted = ca.aborted;
    ctx->coord_result = res;
    return res;
}

/* Every other world rank: joins the control plane, learns its role, and waits as a hot spare
 * or builds the training communicator. *out is set as ftrt_init() documents. */
static int take_role(ftrt_ctx *ctx, uint64_t secret, ftrt_ctx **out);

static int join_job(ftrt_ctx *ctx, const bootstrap *b, ftrt_ctx **out)
{
    int rc = ftrt__agent_start(ctx, b->addrs, b->port, b->secret);
    if (!rc) rc = wait_welcome(ctx);
    if (rc) {
        ftrt_log_error("cannot join the job: %s", ftrt_strerror(rc));
        ctx_free(ctx);
        return rc == FTRT_EABORT ? FTRT_EABORT : rc;
    }
    return take_role(ctx, b->secret, out);
}

/* A process started to join a running job (runtime/join.c): admitted, it is a hot spare;
 * refused, ftrt_init() returns the refusal (FTRT_EJOIN, logged in one line). MPI stays
 * initialised for the caller's own world either way. */
static void arm_joiner_exit_record(void);

static int join_running_job(ftrt_ctx *ctx, ftrt_ctx **out)
{
    arm_joiner_exit_record(); /* (a refusal's status is recorded too) */
    uint64_t secret = 0;
    int rc = ftrt__joiner_start(ctx, &secret);
    if (rc) {
        ctx_free(ctx);
        return rc;
    }
    return take_role(ctx, secret, out);
}

/* Welcomed: the role it was given; a spare waits here (spare_wait), a trainer builds the
 * training communicator. *out as ftrt_init() documents. */
static int take_role(ftrt_ctx *ctx, uint64_t secret, ftrt_ctx **out)
{
    int rc;
    ctx->role = ctx->cp.welcome.role;
    ctx->size = ctx->cp.welcome.ntrainers;
    ctx->rank = ctx->cp.welcome.logical_rank;
    ctx->data_size = ctx->size;
    if (ctx->role == FTRT__ROLE_TRAINER) { /* (a spare learns its data ranks from its PLAN) */
        ctx->data_ranks = malloc(sizeof *ctx->data_ranks);
        if (!ctx->data_ranks) {
            ctx_free(ctx);
            *out = NULL;
            return -ENOMEM;
        }
        ctx->data_ranks[0] = ctx->rank;
        ctx->ndata = 1;
    }
    *out = ctx;
    if (ctx->role == FTRT__ROLE_SPARE) {
        ftrt__ledger_spare_mark(ctx, FTRT__IV_SPARE_IDLE); /* its start-up, sent now */
        int ended;
        rc = spare_wait(ctx, &ended);
        if (rc == TAKE_OVER) return take_over(ctx, secret);
        if (rc < 0 && ended) { /* the job failed: *out stays set, ftrt_finalize() follows */
            ftrt_log_info("the job failed (%s); this hot spare was not needed", ftrt_err_name(rc));
        } else if (rc < 0) {
            ftrt_log_error("hot spare leaves the job: %s", ftrt_strerror(rc));
            ctx_free(ctx);
            *out = NULL;
        }
        return rc;
    }
    rc = trainer_comm(ctx);
    ctx->t_mark = ctx->t_wait_end = ftrt__now();
    return rc;
}

/* ---- the process's exit status after ftrt_finalize (docs/running.md "Exit status") -------- */

/* Once ftrt_finalize() returned, the job's outcome is written (the status file, the report),
 * but the process may still exit non-zero (main() returning 3 after its last write failed,
 * without ftrt_set_exit_code()). Under `mpirun --enable-recovery` that status is lost (Open
 * MPI 4.1's mpirun exits 0 whatever its ranks' statuses), so the process records it for
 * tools/ftrt-run: when ftrt-run set FTRT_RUN_EXIT_DIR, a non-zero status goes to
 * <dir>/rank.<world rank> as "<status>\n", written by an on_exit() handler (glibc: it gets
 * the status exit() was given; a process killed by a signal or ended by _exit() writes
 * nothing). Armed by an ftrt_finalize() whose process took part in the job's end (a trainer's
 * farewell, a spare's shutdown, the coordinator's own end, none of them an abort), disarmed by
 * ftrt_init(): a process's exit before its ftrt_finalize() is a rank failure, which the
 * coordinator sees and handles, and a rank declared failed, cut off or left without its
 * coordinator is no longer the job's; an aborted job is failed whatever its processes do. */
static atomic_int exit_world_rank = -1; /* world rank of the last ftrt_finalize, -1 = disarmed */
static atomic_int exit_always = 0;      /* a joiner's (runtime/join.c): every status, 0 too, from
                                           its ftrt_init() on: ftrt-run --join's mpirun is the
                                           joiner's alone, and none written means it was killed */
static pthread_once_t exit_hook_once = PTHREAD_ONCE_INIT;

static void record_exit(int status, void *arg)
{
    (void)arg;
    int rank = atomic_load(&exit_world_rank);
    const char *dir = getenv("FTRT_RUN_EXIT_DIR");
    status &= 0xff; /* what the parent sees */
    if ((!status && !atomic_load(&exit_always)) || rank < 0 || !dir || !*dir) return;
    char path[4096], line[16];
    if (ftrt__path(path, sizeof path, "%s/rank.%d", dir, rank)) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return; /* nothing to tell: ftrt-run then gives the job's outcome alone */
    int n = snprintf(line, sizeof line, "%d\n", status);
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

static void exit_hook_register(void)
{
#ifdef __GLIBC__
    on_exit(record_exit, NULL);
#endif
}

/* Arms the exit-status record for this process as world rank `world_rank`. */
static void arm_exit_record(int world_rank)
{
    pthread_once(&exit_hook_once, exit_hook_register);
    atomic_store(&exit_world_rank, world_rank);
}

/* A joiner's record: armed from its ftrt_init() on, every status (exit_always). */
static void arm_joiner_exit_record(void)
{
    atomic_store(&exit_always, 1);
    arm_exit_record(0); /* (its own MPI_COMM_WORLD's rank; ftrt_finalize() re-arms with its slot) */
}

int ftrt_init(const ftrt_config *cfg, ftrt_ctx **out)
{
    if (!out) return FTRT_EINVAL;
    *out = NULL;
    atomic_store(&exit_world_rank, -1); /* an exit before this job's ftrt_finalize is a failure */
    ftrt_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return -ENOMEM;
    if (init_ctx(ctx, cfg)) {
        ctx_free(ctx);
        return -ENOMEM;
    }
    if (init_mpi(ctx)) {
        ctx_free(ctx);
        return FTRT_EMPI;
    }
    if (ftrt__join_mode()) return join_running_job(ctx, out);
    int rc = ftrt__config_check(&ctx->cfg, ctx->world_size, &ctx->nspares);
    if (!rc && ctx->cfg.shard_redundancy == FTRT_SHARD_ERASURE && !ftrt__ec_available()) {
        ftrt_log_error("FTRT_SHARD_REDUNDANCY=erasure needs the erasure code of ISA-L, and this "
                       "libftrt was built without it (install libisal-dev and rebuild, or use "
                       "FTRT_SHARD_REDUNDANCY=replica)");
        rc = FTRT_ENOTSUP;
    }
    if (!rc && ctx->cfg.joinable > 0 && ftrt__ulfm_active()) {
        ftrt_log_error("FTRT_JOINABLE=%d: joins need Open MPI 4.1's ompi-server; a second mpirun "
                       "cannot join an Open MPI 5 job (docs/join.md)", ctx->cfg.joinable);
        rc = FTRT_ECONFIG;
    }
    ctx->ntrainers_initial = ctx->world_size - 1 - ctx->nspares;

    /* World rank 0 opens the control plane and broadcasts where it is (or its error). */
    bootstrap b = {.rc = rc};
    int listen_fd = -1, local_fd = -1;
    if (ctx->world_rank == 0 && !rc) open_control_plane(ctx, &b, &listen_fd, &local_fd);
    if (MPI_Bcast(&b, sizeof b, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) b.rc = FTRT_EMPI;
    if (b.rc && local_fd >= 0) close(local_fd);
    if (b.rc) {
        if (ctx->mpi_initialized_by_us) MPI_Finalize();
        ctx_free(ctx);
        return b.rc;
    }
    ftrt_log_info("world rank %d of %d: coordinator at %s:%d, %d trainers, %d spare(s)",
                  ctx->world_rank, ctx->world_size, b.addrs, b.port, ctx->ntrainers_initial,
                  ctx->nspares);
    snprintf(ctx->coord_addr, sizeof ctx->coord_addr, "%s", b.addrs);
    ctx->coord_port = b.port;
    ctx->local_tag = b.local_tag;
    if (ctx->cfg.sigterm == FTRT_SIGTERM_DRAIN && (rc = ftrt__sigterm_install()) != 0)
        ftrt_log_warn("FTRT_SIGTERM=drain: cannot install the SIGTERM handler: %s; SIGTERM "
                      "kills this process", ftrt_strerror(rc));
    if (ctx->world_rank == 0) {
        *out = ctx;
        return run_coordinator(ctx, &b, listen_fd, local_fd);
    }
    return join_job(ctx, &b, out);
}

/* Says goodbye (a trainer) and learns how the job ended, which decides MPI_Finalize: every
 * process of the world calls it, or none does (Open MPI 4.1's MPI_Finalize can hang in its
 * PMIx fence when some call it and others exit without it, and after a process died).
 * Returns 0 (every process calls it), > 0 (that many processes died) or < 0 (the job was
 * aborted with that code, or this rank lost the coordinator: none calls it). A trainer waits
 * for its FAREWELL, which the coordinator sends once every trainer said goodbye, for as long
 * as the coordinator is alive (the agent declares it lost after the heartbeat timeout). */
static int job_end(ftrt_ctx *ctx)
{
    if (ctx->role == FTRT__ROLE_COORD) {
        if (!ctx->coord_aborted) return ctx->ranks_lost;
        return ctx->coord_result < 0 ? ctx->coord_result : FTRT_EABORT;
    }
    pthread_mutex_lock(&ctx->cp.lock);
    if (ctx->role == FTRT__ROLE_TRAINER && ctx->cp.fd >= 0 && !atomic_load(&ctx->watch.fatal)) {
        pthread_mutex_unlock(&ctx->cp.lock);
        ftrt__ledger_mark(ctx, FTRT__IV_TEARDOWN);
        pthread_mutex_lock(&ctx->ledger_lock);
        ftrt__ledger_close(&ctx->ledger, ftrt__wallclock());
        pthread_mutex_unlock(&ctx->ledger_lock);
        ftrt__ledger_send(ctx, 1);
        pthread_mutex_lock(&ctx->cp.lock);
        ftrt__bye bye = {.steps_done = atomic_load(&ctx->cp.steps_done),
                         .rework_steps = ctx->rework_steps, .kept_s = ctx->kept_s,
                         .rework_s = ctx->rework_s, .lost_s = ctx->lost_s};
        ftrt__ckpt_bye(ctx->ckpt, &bye.ckpt_stall_s, &bye.ckpt_skipped);
        bye.exit_code = ctx->exit_code;
        pthread_mutex_unlock(&ctx->cp.lock);
        int rc = ftrt__agent_send(ctx, FTRT__MSG_BYE, &bye, sizeof bye);
        pthread_mutex_lock(&ctx->cp.lock);
        while (!rc && !ctx->cp.farewell && !atomic_load(&ctx->watch.fatal))
            ftrt__cp_wait(ctx, 10);
    }
    int fatal = atomic_load(&ctx->watch.fatal), end = FTRT_ECOORD; /* no answer: assume the worst */
    if ((ctx->cp.farewell || ctx->cp.shutdown) && !fatal) end = ctx->cp.job_end;
    else if (fatal) end = fatal;
    pthread_mutex_unlock(&ctx->cp.lock);
    return end;
}

int ftrt_finalize(ftrt_ctx *ctx)
{
    if (!ctx) return 0;
    if (ctx->role == FTRT__ROLE_TRAINER) {
        ftrt__ledger_mark(ctx, FTRT__IV_TEARDOWN); /* after the last step: not a training stall */
        /* checkpoints finish (or are abandoned) before the BYE */
        ftrt__ckpt_drain(ctx->ckpt, !ftrt__drain_pending(ctx));
    }
    int end = job_end(ctx);
    if (end >= 0 || end == FTRT_EDRAINED) /* this process's part ended normally */
        arm_exit_record(ctx->world_rank);
    ftrt__agent_stop(ctx);
    ftrt__plane_stop(&ctx->plane); /* the progress thread makes MPI calls: stop it first */
    int by_us = ctx->mpi_initialized_by_us;
    if (by_us && !end) MPI_Finalize();
    if (by_us || ctx->plane.graveyard.n == 0) ftrt__plane_free(&ctx->plane);
    if (end > 0)
        ftrt_log_info("%d process(es) died or joined during the job: not calling "
                      "MPI_Finalize", end);
    else if (end < 0)
        ftrt_log_info("the job ended with %s: not calling MPI_Finalize", ftrt_err_name(end));
    ctx_free(ctx);
    ftrt__sigterm_restore(); /* (FTRT_SIGTERM=drain) */
    return end && !by_us ? FTRT_SKIP_MPI_FINALIZE : 0;
}

int ftrt_set_exit_code(ftrt_ctx *ctx, int code)
{
    if (!ctx || code >= 0) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    if (!ctx->exit_code) ctx->exit_code = code;
    return 0;
}

int ftrt_rank(const ftrt_ctx *ctx)
{
    return ctx && ctx->role == FTRT__ROLE_TRAINER ? ctx->rank : FTRT_ESTATE;
}
int ftrt_size(const ftrt_ctx *ctx) { return ctx ? ctx->size : FTRT_ESTATE; }
int ftrt_data_rank(const ftrt_ctx *ctx)
{
    return ctx && ctx->role == FTRT__ROLE_TRAINER && ctx->ndata > 0 ? ctx->data_ranks[0]
                                                                     : FTRT_ESTATE;
}

int ftrt_data_ranks(const ftrt_ctx *ctx, int *out, int max)
{
    if (!ctx || max < 0 || (max > 0 && !out)) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER || ctx->ndata < 1) return FTRT_ESTATE;
    for (int i = 0; i < ctx->ndata && i < max; i++) out[i] = ctx->data_ranks[i];
    return ctx->ndata;
}

int ftrt_data_size(const ftrt_ctx *ctx)
{
    return ctx && ctx->role == FTRT__ROLE_TRAINER ? ctx->data_size : FTRT_ESTATE;
}
int ftrt_world_rank(const ftrt_ctx *ctx) { return ctx ? ctx->world_rank : FTRT_ESTATE; }
int ftrt_epoch(const ftrt_ctx *ctx) { return ctx ? ctx->watch.epoch : FTRT_ESTATE; }

int ftrt_host_trainers(const ftrt_ctx *ctx)
{
    if (!ctx) return FTRT_EINVAL;
    return ftrt__host_trainers_of(ftrt__launcher_local_size(), ctx->world_size, ctx->size);
}

/* ftrt_register/ftrt_unregister, ftrt_checkpoint* and ftrt_restore: runtime/regions.c. */

int ftrt_step_done(ftrt_ctx *ctx, int64_t step)
{
    if (!ctx || step < 0 || ctx->role != FTRT__ROLE_TRAINER) return FTRT_EINVAL;
    int rc = ftrt__timeline_step_done(ctx, step);
    if (!rc && (rc = ftrt__drain_boundary(ctx)) != 0) return rc; /* a drain's epoch */
    if (!rc && (rc = ftrt__sdc_step(ctx, step + 1)) > 0) /* every FTRT_SDC_EVERY steps */
        rc = 0;
    if (!rc) /* every FTRT_SHARD_REPLICA_EVERY steps; ULFM: a dead partner is an epoch change */
        rc = ftrt__plane_recheck(&ctx->plane, ftrt__replica_step(ctx, step + 1));
    return rc;
}

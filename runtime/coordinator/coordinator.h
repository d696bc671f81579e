/*
 * coordinator.h - the coordinator as the runtime starts it (runtime/ includes this, never
 * coord.h). World rank 0 runs the coordinator inside ftrt_init(); it is given what it needs
 * here, not the runtime's context.
 */
#ifndef FTRT_COORDINATOR_H
#define FTRT_COORDINATOR_H

#include <stddef.h>
#include <stdint.h>

#include "ftrt.h"

typedef struct ftrt__coord_args {
    const ftrt_config *cfg;  /* the job's validated settings (not owned) */
    int world_size;          /* processes of MPI_COMM_WORLD: coordinator + trainers + spares */
    int ntrainers;           /* trainers at start */
    double t_start;          /* monotonic seconds of the ftrt_init() entry */
    double t_start_wall;     /* the same instant, wall seconds (the job window's start) */
    const char *status_file; /* where the status JSON is rewritten */
    const char *host;        /* this host's name */
    const char *addr;        /* the control plane's address and port */
    int port;
    int mark_fd;             /* the coordinator's mark on its host (ftrt__local_mark): held for
                                the job, closed at its end (owned; -1: none) */
    uint64_t join_tag;       /* names the ports joined processes publish (JOIN_OK's tag; the
                                job's local tag, base/net.h) */
    int ranks_lost;          /* out: processes of the world that died during the job, plus
                                those that joined it (join.c): > 0, no process calls
                                MPI_Finalize */
    int aborted;             /* out: 1 when the job was aborted (every member got ABORT, the
                                spares a SHUTDOWN with the code): no process of the world
                                calls MPI_Finalize then, the coordinator included */
} ftrt__coord_args;

/* Runs the coordinator on world rank 0 until the job ends. listen_fd (the control plane's
 * listening socket) is owned and closed; secret is the job's hello secret. Returns FTRT_DONE
 * on success or the job's failure code (FTRT_ENOSPARE, FTRT_EABORT, FTRT_ENOCKPT, ...). */
int ftrt__coordinator_run(ftrt__coord_args *a, int listen_fd, uint64_t secret);

/* What a standby coordinator takes over with (runtime/coordinator/takeover.c). */
typedef struct ftrt__takeover_args {
    int self;             /* the standby's world rank */
    const void *sync;     /* the newest SYNC it holds (not owned), sync_len bytes */
    size_t sync_len;
    int by_silence;       /* the old coordinator was detected by silence (else EOF) */
    double last_heard;    /* monotonic: the old coordinator's last message */
    const void *own_tl;   /* the standby's own timeline as a LEDGER payload (not owned;
                           * own_tl_len bytes), or NULL: its entry in the report is rebuilt
                           * from the SYNC's totals */
    size_t own_tl_len;
} ftrt__takeover_args;

/* The job's slots (its world and its join slots, FTRT_JOINABLE) as the SYNC payload `sync`
 * (len bytes, not owned) gives them, or -1 when it is not a SYNC of this version. A joined
 * process, whose configuration lacks FTRT_JOINABLE, sets its own from it before a takeover.
 * Thread-safe (reads only). */
int ftrt__sync_capacity(const void *sync, size_t len);

/* Runs the coordinator on the standby (a hot spare) that lost the coordinator: the state from
 * its newest SYNC, the next term, every rank expected back on listen_fd (the standby's
 * listener, owned and closed) within the heartbeat timeout (else declared failed and, a
 * trainer, replaced); the takeover is an incident of its own. Returns what
 * ftrt__coordinator_run returns; FTRT_EPROTO / -ENOMEM when the SYNC cannot be used. */
int ftrt__coordinator_takeover(ftrt__coord_args *a, int listen_fd, uint64_t secret,
                               const ftrt__takeover_args *t);

#endif

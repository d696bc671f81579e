/*
 * ulfm.h - the data plane under User-Level Failure Mitigation (ULFM, the MPIX_* extension of
 * Open MPI 5's <mpi-ext.h>), and the communicator rebuild of a recovery (internal to libftrt;
 * comm/ and the runtime above it).
 *
 * Under ULFM (Open MPI 5 launched with `mpirun --with-ft ulfm`) an MPI operation that a dead
 * process prevents returns MPIX_ERR_PROC_FAILED (or _PENDING) instead of blocking, and a
 * collective on a communicator with a known dead member fails at once. In ftrt the coordinator
 * owns failures: it detects them on its control plane and announces the epoch change. So such
 * an error means "a failure the coordinator is about to announce": the member that sees it
 * waits for the announcement, then returns FTRT_ERECOVER like any interrupted operation, not
 * FTRT_EMPI. No member can stay in an operation on the old communicator meanwhile: ftrt never
 * blocks in MPI (every operation is nonblocking and polled together with the epoch watch), so
 * the epoch change ends every wait.
 *
 * What ftrt does not use, and why (measured with bench/ulfm_rebuild.c, docs/benchmarks.md
 * "Open MPI 5 with ULFM"):
 *  - MPIX_Comm_revoke: Open MPI 5.0.11 crashes (SIGSEGV in ompi_comm_revoke_local) when a
 *    revocation is processed while the process builds a communicator with
 *    MPI_Comm_create_from_group, which every recovery does; and the epoch watch already ends
 *    every wait on the old communicator.
 *  - MPIX_Comm_shrink: faster than the rebuild below, but it only removes the dead; a
 *    recovery also adds a hot spare (the world of trainers keeps its size, so that the sums
 *    stay bitwise those of a fault-free run).
 *  - MPIX_Comm_agree: the coordinator's plan is the recovery's agreement (who leaves, who
 *    joins, the resume step).
 *
 * The rebuild: under ULFM, MPI_Comm_create_group over MPI_COMM_WORLD fails with
 * MPIX_ERR_PROC_FAILED as soon as any process of the world is known dead (Open MPI disables
 * the collectives of every communicator holding a dead member, MPI_COMM_WORLD included), so
 * ftrt__comm_create() uses MPI-4's MPI_Comm_create_from_group there, which has no parent
 * communicator. Without ULFM (Debian's Open MPI 4.1) it is MPI_Comm_create_group over
 * MPI_COMM_WORLD, as before, and the other functions change nothing: no failure is reported
 * this way.
 *
 * Source: ULFM, Bland et al., "Post-failure recovery of MPI communication capability: Design
 * and rationale", IJHPCA 27(3), 2013; Open MPI 5's docs/features/ulfm.rst.
 */
#ifndef FTRT_COMM_ULFM_H
#define FTRT_COMM_ULFM_H

#include <mpi.h>
#include <stdint.h>

#include "base/ports.h"
#include "comm/plane.h"

/* How long a member that saw a process failure waits for the coordinator's epoch change
 * before it gives up with FTRT_EMPI (the coordinator sees a dead process's connection close
 * within milliseconds; this bounds a wait that should never come near it). */
#define FTRT__ULFM_EPOCH_WAIT_S 60.0

/* 1 when libftrt was built against an MPI with ULFM (Open MPI 5: OMPI_HAVE_MPI_EXT_FTMPI), else
 * 0. Any thread. */
int ftrt__ulfm_built(void);

/* 1 when ULFM is on at run time: built with it and the launcher enabled it (mpi_ft_enable,
 * which `mpirun --with-ft ulfm` sets; without it a dead process ends the job). Any thread;
 * reads the environment. */
int ftrt__ulfm_active(void);

/* 1 when MPI error code mpi_rc, returned by an operation on comm (MPI_COMM_NULL: look at the
 * code only), means a process failure: its class is MPIX_ERR_PROC_FAILED,
 * MPIX_ERR_PROC_FAILED_PENDING or MPIX_ERR_REVOKED, or comm is revoked or has a known dead
 * member (for codes such as MPI_ERR_IN_STATUS). 0 for MPI_SUCCESS and always without ULFM.
 * Thread-safe as MPI is (MPI_THREAD_MULTIPLE). */
int ftrt__ulfm_is_failure(int mpi_rc, MPI_Comm comm);

/* Waits (sleeping politely) until w shows work begun in `epoch` to be stale: a newer epoch
 * announced (returns FTRT_ERECOVER) or the job over (returns w's fatal code). After
 * FTRT__ULFM_EPOCH_WAIT_S without either, logs an error and returns FTRT_EMPI. Any thread
 * (reads the watch's atomics only). */
int ftrt__ulfm_await_epoch(const ftrt__watch *w, int epoch);

/* The ftrt code for MPI error mpi_rc of an operation on comm during work of `epoch`: for a
 * process failure (ftrt__ulfm_is_failure), logged once per epoch, ftrt__ulfm_await_epoch(w,
 * epoch); for any other error FTRT_EMPI. Any thread. */
int ftrt__ulfm_error(int mpi_rc, MPI_Comm comm, const ftrt__watch *w, int epoch);

/* ftrt__ulfm_error() for an operation on the plane's communicator in the epoch the
 * application trains in (application thread); FTRT_ERECOVER also sets
 * p->watch->needs_recover. */
int ftrt__plane_mpi_error(ftrt__plane *p, int mpi_rc);

/* For code that returned FTRT_EMPI without the MPI code (state transfer, partner replicas):
 * when ULFM shows a process failure on the plane's communicator, the result of
 * ftrt__plane_mpi_error() for it; else rc unchanged. Application thread. */
int ftrt__plane_recheck(ftrt__plane *p, int rc);

/* Builds the communicator of the world ranks of grp (a group of MPI_COMM_WORLD's, in the new
 * communicator's rank order) for `epoch` (>= 0; the same on every member): MPI_Comm_create_group
 * over MPI_COMM_WORLD without ULFM; MPI_Comm_create_from_group (string tag "ftrt.epoch.<epoch>")
 * with it. Collective over grp's members only. Returns the MPI code (MPI_SUCCESS with *out
 * set, errors returned, not raised). Application thread. */
int ftrt__comm_create(MPI_Group grp, int epoch, MPI_Comm *out);

/* ftrt__comm_create over the n world ranks ranks[0..n) (in the new communicator's rank order):
 * their group of MPI_COMM_WORLD's, built and freed here. Collective over those ranks only.
 * Returns the MPI code of the first call that failed, or MPI_SUCCESS with *out set.
 * Application thread. (runtime/recovery.c, comm/join.c) */
int ftrt__world_comm_create(const int32_t *ranks, int n, int epoch, MPI_Comm *out);

#endif

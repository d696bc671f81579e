/*
 * ulfm.c - process failures reported by ULFM (Open MPI 5's MPIX_* extension) turned into
 * ftrt's epoch change, and the communicator rebuild that works after a failure (ulfm.h has the
 * contract and the reasons).
 *
 * Compiled against any MPI: the ULFM parts exist only where <mpi-ext.h> declares the ftmpi
 * extension (OMPI_HAVE_MPI_EXT_FTMPI, Open MPI 5); elsewhere (Debian's Open MPI 4.1) every
 * function keeps the behaviour ftrt had before.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/ulfm.h"

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && OMPI_HAVE_MPI_EXT_FTMPI
#define FTRT__ULFM 1
#else
#define FTRT__ULFM 0
#endif

int ftrt__ulfm_built(void) { return FTRT__ULFM; }

int ftrt__ulfm_active(void)
{
    const char *v = getenv("OMPI_MCA_mpi_ft_enable");
    return FTRT__ULFM && v &&
           (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"));
}

/* mpi_rc's class is one of ULFM's process-failure classes (never without ULFM). */
static int failure_class(int mpi_rc)
{
#if FTRT__ULFM
    int cls = MPI_SUCCESS;
    if (MPI_Error_class(mpi_rc, &cls) != MPI_SUCCESS) return 0;
    return cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_PROC_FAILED_PENDING ||
           cls == MPIX_ERR_REVOKED;
#else
    (void)mpi_rc;
    return 0;
#endif
}

#if FTRT__ULFM

/* comm is revoked, or has a member this process knows to be dead. */
static int comm_failed(MPI_Comm comm)
{
    if (comm == MPI_COMM_NULL) return 0;
    int revoked = 0, dead = 0;
    if (MPIX_Comm_is_revoked(comm, &revoked) == MPI_SUCCESS && revoked) return 1;
    MPI_Group g = MPI_GROUP_NULL;
    if (MPIX_Comm_get_failed(comm, &g) != MPI_SUCCESS) return 0;
    if (g != MPI_GROUP_NULL) {
        MPI_Group_size(g, &dead);
        if (g != MPI_GROUP_EMPTY) MPI_Group_free(&g);
    }
    return dead > 0;
}
#endif

int ftrt__ulfm_is_failure(int mpi_rc, MPI_Comm comm)
{
#if FTRT__ULFM
    if (mpi_rc == MPI_SUCCESS) return 0;
    return failure_class(mpi_rc) || comm_failed(comm);
#else
    (void)mpi_rc;
    (void)comm;
    return 0;
#endif
}

int ftrt__ulfm_await_epoch(const ftrt__watch *w, int epoch)
{
    double t0 = ftrt__now();
    for (long i = 0;; i++) {
        if (ftrt__watch_stale(w, epoch)) {
            int f = atomic_load(&w->fatal);
            return f ? f : FTRT_ERECOVER;
        }
        if (ftrt__now() - t0 > FTRT__ULFM_EPOCH_WAIT_S) {
            ftrt_log_error("MPI reported a process failure in epoch %d, but the coordinator "
                           "announced no epoch change within %.0f s", epoch,
                           FTRT__ULFM_EPOCH_WAIT_S);
            return FTRT_EMPI;
        }
        ftrt__polite(i, 64, 200 * 1000L);
    }
}

/* A process failure in `epoch`: say so once per epoch and process (any thread may get here;
 * a lost race logs twice), wait for the epoch change. */
static int on_failure(const ftrt__watch *w, int epoch, const char *what)
{
    static _Atomic int logged = -1;
    if (atomic_exchange(&logged, epoch) != epoch)
        ftrt_log_info("MPI reports a process failure (%s) in epoch %d: waiting for the "
                      "coordinator's epoch change", what, epoch);
    return ftrt__ulfm_await_epoch(w, epoch);
}

int ftrt__ulfm_error(int mpi_rc, MPI_Comm comm, const ftrt__watch *w, int epoch)
{
    if (!ftrt__ulfm_is_failure(mpi_rc, comm)) return FTRT_EMPI;
    char msg[MPI_MAX_ERROR_STRING] = "a dead member of the communicator";
    int len = 0;
    if (failure_class(mpi_rc)) MPI_Error_string(mpi_rc, msg, &len);
    return on_failure(w, epoch, msg);
}

int ftrt__plane_mpi_error(ftrt__plane *p, int mpi_rc)
{
    int rc = ftrt__ulfm_error(mpi_rc, p->comm, p->watch, p->watch->epoch);
    return ftrt__watch_note(p->watch, rc);
}

int ftrt__plane_recheck(ftrt__plane *p, int rc)
{
    if (rc != FTRT_EMPI || !ftrt__ulfm_is_failure(MPI_ERR_OTHER, p->comm)) return rc;
    rc = on_failure(p->watch, p->watch->epoch, "a dead member of the communicator");
    return ftrt__watch_note(p->watch, rc);
}

int ftrt__world_comm_create(const int32_t *ranks, int n, int epoch, MPI_Comm *out)
{
    *out = MPI_COMM_NULL;
    MPI_Group world, grp;
    int rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Group_incl(world, n, ranks, &grp);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) return rc;
    rc = ftrt__comm_create(grp, epoch, out);
    MPI_Group_free(&grp);
    return rc;
}

int ftrt__comm_create(MPI_Group grp, int epoch, MPI_Comm *out)
{
    *out = MPI_COMM_NULL;
#if FTRT__ULFM
    char tag[48];
    snprintf(tag, sizeof tag, "ftrt.epoch.%d", epoch);
    return MPI_Comm_create_from_group(grp, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, out);
#else
    return MPI_Comm_create_group(MPI_COMM_WORLD, grp, epoch, out);
#endif
}

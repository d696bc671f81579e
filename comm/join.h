/*
 * join.h - the communicator of an epoch that holds joined processes: members started by another
 * `mpirun` after the job began (tools/ftrt-run --join; runtime/join.c), in no MPI_COMM_WORLD of
 * the job (docs/join.md "How a join works"). Open MPI 4.1 under `ompi-server` only.
 */
#ifndef FTRT_COMM_JOIN_H
#define FTRT_COMM_JOIN_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* The name joined slot `slot` publishes its port under (MPI_Publish_name through the job's
 * ompi-server) and the members look it up by: "ftrt-<tag, 16 hex>-<slot>", into out[n]
 * (n >= 40). tag: the job's (JOIN_OK's; ftrt_ctx.local_tag). Thread-safe. */
void ftrt__join_service(char *out, size_t n, uint64_t tag, int slot);

/* ftrt__join_comm_create's result when the root could not reach a joined member (it was lost
 * before its accept, or its port is gone): every member returns it, none is left in an MPI
 * call; the caller waits for the epoch change that the member's loss brings. */
#define FTRT__JOIN_UNREACHED (-2)
/* (The coordinator aborts the job then, as for any member lost while a plan is applied:
 * docs/join.md "Limits".) */

/* Builds the communicator of `epoch`'s members[0..n) (slots in logical order; a slot >=
 * world_size is a joined process) with this process's rank = its logical rank `me`, into *out.
 * Collective over the members: each calls it with the same members, world_size, tag and epoch.
 * How (docs/join.md): the members of MPI_COMM_WORLD build theirs with ftrt__comm_create
 * (comm/ulfm.h); then each joined member in logical order: the lowest logical member of
 * MPI_COMM_WORLD (the root) looks its port up (MPI_Lookup_name) and probes it, a connect over
 * MPI_COMM_SELF while the joined member accepts over MPI_COMM_SELF on `port` (its own open port;
 * "" for a member of MPI_COMM_WORLD); on the root's word (a broadcast) the members merged so
 * far connect to it together, it accepts again, and they merge (it last); a final
 * MPI_Comm_split orders the ranks by logical rank. Connect and accept cannot be interrupted by
 * an epoch change; only the root is in the probe: under `mpirun --mca
 * pmix_base_exchange_timeout S` (ftrt-run --joinable sets it) a joined member lost before its
 * accept returns an error at the root after about S s, which the root broadcasts before the
 * others enter the connect (the spike's e8): all return FTRT__JOIN_UNREACHED. (Not the root
 * alone and MPI_Intercomm_create, the spike's e7: with members of two joined job families it
 * blocks in Open MPI 4.1.) Every
 * intermediate communicator is freed. Returns MPI_SUCCESS, FTRT__JOIN_UNREACHED, or an MPI
 * error code (logged, naming the step); MPI_ERR_OTHER when no member is of MPI_COMM_WORLD (a
 * root is needed). Application thread. */
int ftrt__join_comm_create(const int32_t *members, int n, int world_size, int me,
                           const char *port, uint64_t tag, int epoch, MPI_Comm *out);

#endif

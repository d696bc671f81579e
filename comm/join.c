/*
 * join.c - builds an epoch's communicator when joined processes are among its members (see
 * join.h; docs/join.md "How a join works"). The joined members are reached one by one through
 * a probe of the root alone (a connect/accept of two processes) before the connect of all the
 * members: those waits cannot be interrupted, and a joined member lost before its accept then
 * costs the root alone a bounded error (the spike's e8, tests/spike/join).
 */
#include "comm/join.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/knobs.h"
#include "base/log.h"
#include "comm/ulfm.h"

void ftrt__join_service(char *out, size_t n, uint64_t tag, int slot)
{
    snprintf(out, n, "ftrt-%016" PRIx64 "-%d", tag, slot);
}

/* Logs MPI error rc of `step` (for joined slot `slot`) and returns it. */
static int failed(int rc, const char *step, int slot)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = 0;
    ftrt_log_error("building the communicator with joined slot %d: %s failed: %s", slot, step,
                   msg);
    return rc;
}

static void comm_free(MPI_Comm *c)
{
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

/* The members of MPI_COMM_WORLD (slots < world_size), in logical order, build theirs into *c. */
static int world_part(const int32_t *members, int n, int world_size, int epoch, MPI_Comm *c)
{
    int32_t *ranks = malloc((size_t)n * sizeof *ranks);
    int k = 0;
    if (!ranks) return MPI_ERR_NO_MEM;
    for (int l = 0; l < n; l++)
        if (members[l] < world_size) ranks[k++] = members[l];
    int rc = ftrt__world_comm_create(ranks, k, epoch, c);
    free(ranks);
    return rc == MPI_SUCCESS ? rc : failed(rc, "the communicator of MPI_COMM_WORLD's members", -1);
}

/* The root's probe of joined slot `slot`: looks its port up into port[MPI_MAX_PORT_NAME],
 * connects over MPI_COMM_SELF and lets go: the joined member is alive and accepting. */
static int root_probe(uint64_t tag, int slot, char *port)
{
    char name[64];
    ftrt__join_service(name, sizeof name, tag, slot);
    int rc = MPI_Lookup_name(name, MPI_INFO_NULL, port);
    if (rc != MPI_SUCCESS) return failed(rc, "MPI_Lookup_name of its port", slot);
    MPI_Comm inter;
    rc = MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    if (rc != MPI_SUCCESS) return failed(rc, "MPI_Comm_connect to it", slot);
    MPI_Comm_free(&inter);
    return MPI_SUCCESS;
}

/* The joined member's side: the root's probe, then the members' connect, both accepted on port
 * over MPI_COMM_SELF; *inter: the second. */
static int joiner_accept(const char *port, int slot, MPI_Comm *inter)
{
    if (ftrt__knobs.join_die_before_accept) _exit(9); /* (a test: lost inside the window) */
    MPI_Comm probe;
    int rc = MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &probe);
    if (rc != MPI_SUCCESS) return failed(rc, "MPI_Comm_accept of the root's probe", slot);
    MPI_Comm_free(&probe);
    rc = MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, inter);
    return rc == MPI_SUCCESS ? rc : failed(rc, "MPI_Comm_accept of the members", slot);
}

/* The members merged so far (*c; root = its rank 0): the root's probe (gated, below), then a
 * connect of all of them to the joined member; *inter. */
static int members_connect(MPI_Comm c, uint64_t tag, int slot, MPI_Comm *inter)
{
    /* the others enter the connect only on the root's word that the joined member is alive and
     * accepting (the spike's e8): one lost before its accept costs the root an error after
     * pmix_base_exchange_timeout, and nobody is left in a call that cannot end */
    char port[MPI_MAX_PORT_NAME] = "";
    int r, ok = 1, rc = MPI_SUCCESS;
    MPI_Comm_rank(c, &r);
    if (r == 0) ok = (rc = root_probe(tag, slot, port)) == MPI_SUCCESS;
    int brc = MPI_Bcast(&ok, 1, MPI_INT, 0, c);
    if (brc != MPI_SUCCESS) return failed(brc, "MPI_Bcast of the root's probe", slot);
    if (!ok) return FTRT__JOIN_UNREACHED;
    /* all of them, not the root alone and MPI_Intercomm_create: members of other job families
     * (earlier joiners) must learn the new one's, which Open MPI 4.1 does in a connect only
     * (MPI_Intercomm_create across three families blocks) */
    rc = MPI_Comm_connect(port, MPI_INFO_NULL, 0, c, inter);
    return rc == MPI_SUCCESS ? rc : failed(rc, "MPI_Comm_connect of the members", slot);
}

/* One joined member (slot) into *c: the members merged so far (*c, not NULL) and the joined
 * one (*c NULL, is_joiner) connect and merge (the joined one high, last). */
static int take_in(MPI_Comm *c, int is_joiner, const char *port, uint64_t tag, int slot)
{
    MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    int rc = is_joiner ? joiner_accept(port, slot, &inter)
                       : members_connect(*c, tag, slot, &inter);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    rc = MPI_Intercomm_merge(inter, is_joiner, &merged);
    MPI_Comm_free(&inter);
    if (rc != MPI_SUCCESS) return failed(rc, "MPI_Intercomm_merge", slot);
    comm_free(c);
    *c = merged;
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    return MPI_SUCCESS;
}

int ftrt__join_comm_create(const int32_t *members, int n, int world_size, int me,
                           const char *port, uint64_t tag, int epoch, MPI_Comm *out)
{
    *out = MPI_COMM_NULL;
    int nworld = 0;
    for (int l = 0; l < n; l++) nworld += members[l] < world_size;
    if (nworld == 0) {
        ftrt_log_error("epoch %d: every member is a joined process; a communicator with joined "
                       "members needs a member of the job's MPI_COMM_WORLD to reach them", epoch);
        return MPI_ERR_OTHER;
    }
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN); /* (connect/accept's errors) */
    int mine_joined = members[me] >= world_size, rc = MPI_SUCCESS;
    MPI_Comm c = MPI_COMM_NULL;
    if (!mine_joined) rc = world_part(members, n, world_size, epoch, &c);
    for (int l = 0; l < n && rc == MPI_SUCCESS; l++) {
        if (members[l] < world_size) continue;
        if (l == me) rc = take_in(&c, 1, port, tag, members[l]);
        else if (c != MPI_COMM_NULL) rc = take_in(&c, 0, port, tag, members[l]);
        /* (a joined member after this one in logical order is not in yet: it waits) */
    }
    if (rc == MPI_SUCCESS && (rc = MPI_Comm_split(c, 0, me, out)) != MPI_SUCCESS)
        failed(rc, "MPI_Comm_split into logical order", -1);
    comm_free(&c);
    if (*out != MPI_COMM_NULL) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return rc;
}

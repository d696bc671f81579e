/*
 * join.c - a process started after the job (tools/ftrt-run --join: a second `mpirun`) asks the
 * coordinator to be one of its hot spares (docs/join.md "How a join works"). Its first message on
 * its own TCP connection is JOIN (base/proto.h ftrt__join); the coordinator checks it here, in
 * this order: the job's secret, the join protocol's version, that the job takes joins
 * (FTRT_JOINABLE > 0), that it has not ended, that the job and the joiner are on one node under
 * their mpiruns (Open MPI 4.1's limit, one_node), that a join slot is left, and that it is
 * running (not starting or recovering). A refusal is one JOIN_REFUSED line and a closed
 * connection: nothing else of the job changes. An admitted joiner takes the next slot of the
 * rank table (slots W_world .. W - 1: its "world rank" in every table, the PLAN's membership
 * included, and in no MPI_COMM_WORLD of the job), is a hot spare like those of the job's own
 * mpirun (promoted after them: the spare list is ascending by slot), and gets JOIN_OK. It becomes an MPI member only
 * when a recovery promotes it (comm/join.c): the job's trainers and the coordinator make no MPI
 * call for a join itself.
 */
#include <stdio.h>
#include <string.h>

#include "base/fence.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

/* Open MPI 4.1 connects a second mpirun to a job only where every process of both runs on
 * its own mpirun's node: each mpirun publishes its job's daemons' contact URIs for the other's
 * connect and leaves those of its other nodes' daemons (orted) NULL, and a daemon that reads such
 * a NULL one crashes (SIGSEGV in orte_rml_base_parse_uris; docs/join.md "Limits", with the
 * evidence), ending the job. So a join is refused unless this coordinator runs under its mpirun
 * (not an orted), every rank said HELLO from its host, and the joiner is on that host too (its
 * own parent is checked by the joiner, runtime/join.c). 1 (why[n] says which) or 0. */
static int one_node(const ftrt__coord *c, const ftrt__join *j, char *why, size_t n)
{
    const char *me = c->a->host;
    int nhosts = 0; /* (the index also keeps hosts left empty, and "" for no HELLO yet) */
    for (int h = 0; h < c->ix.nhosts; h++)
        nhosts += c->ix.hosts[h].nranks > 0 && c->ix.hosts[h].name[0];
    const char *rule = "an Open MPI 4.1 join needs the job and the joiner on the job's "
                       "mpirun's node (docs/join.md \"Limits\")";
    if (nhosts > 1)
        snprintf(why, n, "the job runs on %d hosts: %s", nhosts, rule);
    else if (ftrt__parent_is("orted"))
        snprintf(why, n, "the job runs under an Open MPI daemon (orted): %s", rule);
    else if (strncmp(j->host, me, FTRT__HOST_MAX) != 0)
        snprintf(why, n, "the joiner is on %.*s, the job on %s: %s", FTRT__HOST_MAX, j->host,
                 me, rule);
    else
        return 0;
    return 1;
}

/* Why JOIN j cannot be admitted now, as an ftrt code and one line in why[n]; 0 when it can.
 * FTRT_ESTATE: not now (starting or recovering), the joiner may try again. */
static int refusal(const ftrt__coord *c, const ftrt__join *j, char *why, size_t n)
{
    if (j->secret != c->secret) {
        snprintf(why, n, "wrong job secret");
        return FTRT_EJOIN;
    }
    if (j->version != FTRT__PROTO_JOIN) {
        snprintf(why, n, "another version of ftrt (join protocol %d, the job's %d)", j->version,
                 FTRT__PROTO_JOIN);
        return FTRT_EJOIN;
    }
    if (c->W == c->Wworld) {
        snprintf(why, n, "the job takes no joins (FTRT_JOINABLE=0: start it with ftrt-run "
                         "--joinable)");
        return FTRT_EJOIN;
    }
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) {
        snprintf(why, n, "the job has ended");
        return FTRT_EJOIN;
    }
    if (one_node(c, j, why, n)) return FTRT_EJOIN;
    if (c->Wused == c->W) {
        snprintf(why, n, "all %d join slots of the job are used (FTRT_JOINABLE)",
                 c->W - c->Wworld);
        return FTRT_EJOIN;
    }
    if (c->phase != PH_RUNNING) {
        snprintf(why, n, "the job is %s: try again", c->phase == PH_INIT ? "starting" : "recovering");
        return FTRT_ESTATE;
    }
    return 0;
}

int ftrt__join_admit(ftrt__coord *c, const ftrt__join *j, char *why, size_t n)
{
    int rc = refusal(c, j, why, n);
    if (rc) {
        c->join_refused++;
        if (rc != FTRT_ESTATE) c->rejected_connections++;
        ftrt_log_warn("refused a join from pid %d on %.*s: %s", j->pid, FTRT__HOST_MAX, j->host,
                      why);
        c->status_dirty |= 1;
        return rc;
    }
    int w = c->Wused++;
    c->nhello++;
    c->njoined++;
    ftrt__crank *r = &c->r[w];
    ftrt__rank_set_role(c, w, FTRT__ROLE_SPARE);
    r->logical = -1;
    r->t_joined_wall = ftrt__wallclock();
    ftrt_log_warn("pid %d on %.*s joined the job as a hot spare (slot %d; %d join slot(s) left)",
                  j->pid, FTRT__HOST_MAX, j->host, w, c->W - c->Wused);
    c->status_dirty |= 2; /* membership: write now */
    c->join_welcome = w;  /* (JOIN_OK: service.c ftrt__join_welcome, once it is connected) */
    return w;
}

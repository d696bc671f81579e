/*
 * status.c - the coordinator's status file (FTRT_STATUS_FILE, default <ckpt_dir>/status.json).
 *
 * Rewritten atomically (temp file + rename) on every membership change and, at most four times a
 * second, when progress changes, so fault injectors and people can see who is who:
 * {"schema":1, "job": "starting|running|recovering|failing|finished|failed", "epoch": E,
 *  "updated": unix seconds, "trainers": N, "spares_left": k, "last_committed_step": S|-1,
 *  "ranks": [{"world_rank", "pid", "host", "role", "logical_rank" (or null), "steps_done",
 *             "last_step", "state": "coordinator|joining|running|left|dead|stuck"}],
 *  "accounted": every non-coordinator rank left, dead or stuck, "final": the last write,
 *  after the report}
 * A launcher ends mpirun once "final" (or "accounted" with a finished/failed job) is seen.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/coordinator/coord.h"
#include "base/log.h"

/* Where world rank w stands, for a launcher deciding whether the job can be ended: "left"
 * (said goodbye, or a spare told the job is over), "dead" (declared failed), "stuck" (did not
 * leave after the abort, on a host the coordinator cannot fence), "running" or "joining". */
static const char *rank_state(const ftrt__coord *c, int w)
{
    const ftrt__crank *r = &c->r[w];
    if (w == 0) return "coordinator";
    if (r->role == FTRT__ROLE_FAILED) return "dead";
    if (r->said_bye || (r->hello && !ftrt__rank_connected(c, w) && r->orphan_until <= 0))
        return "left";
    if (c->phase == PH_DONE && ftrt__rank_connected(c, w) && c->result != FTRT_DONE) return "stuck";
    if (c->phase == PH_DONE && r->role == FTRT__ROLE_SPARE) return "left"; /* SHUTDOWN sent */
    return r->hello ? "running" : "joining";
}

static const char *job_state(const ftrt__coord *c)
{
    switch (c->phase) {
    case PH_INIT: return "starting";
    case PH_RUNNING: return "running";
    case PH_COLLECT:
    case PH_RESUMING: return "recovering";
    case PH_ABORTING: return "failing";
    default: return c->result == FTRT_DONE ? "finished" : "failed";
    }
}

int ftrt__status_write(ftrt__coord *c)
{
    static int warned;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "schema", json_object_new_int(1));
    json_object_object_add(o, "job", json_object_new_string(job_state(c)));
    json_object_object_add(o, "epoch", json_object_new_int(c->epoch));
    json_object_object_add(o, "updated", json_object_new_double(ftrt__wallclock()));
    json_object_object_add(o, "trainers", json_object_new_int(c->N));
    int spares = 0;
    for (int w = 1; w < c->W; w++) spares += c->r[w].role == FTRT__ROLE_SPARE;
    json_object_object_add(o, "spares_left", json_object_new_int(spares));
    json_object_object_add(o, "last_committed_step", json_object_new_int64(c->last_committed));
    char cp[320];
    /* "<first address>:<port>", and every address offered to the ranks, in the order they try */
    size_t first = strcspn(c->a->addr, " ");
    snprintf(cp, sizeof cp, "%.*s:%d", (int)first, c->a->addr, c->a->port);
    json_object_object_add(o, "control_plane", json_object_new_string(cp));
    json_object *addrs = json_object_new_array();
    for (const char *p = c->a->addr; *p;) {
        size_t l = strcspn(p, " ");
        if (l) json_object_array_add(addrs, json_object_new_string_len(p, (int)l));
        p += l;
        p += strspn(p, " ");
    }
    json_object_object_add(o, "control_plane_addresses", addrs);
    json_object_object_add(o, "rejected_connections", json_object_new_int(c->rejected_connections));
    int nsdc = 0;
    for (int i = 0; i < c->ninc; i++) nsdc += c->inc[i].kind == FK_SDC;
    json_object *sdc = json_object_new_object();
    json_object_object_add(sdc, "every", json_object_new_int(c->a->cfg->sdc_every));
    json_object_object_add(sdc, "checks", json_object_new_int(c->sdc_checks));
    json_object_object_add(sdc, "last_agreed_step", json_object_new_int64(c->sdc_agreed_step));
    json_object_object_add(sdc, "incidents", json_object_new_int(nsdc));
    json_object_object_add(o, "sdc", sdc);
    json_object *ranks = json_object_new_array();
    int accounted = 1;
    for (int w = 0; w < c->W; w++) {
        const ftrt__crank *r = &c->r[w];
        json_object *x = json_object_new_object();
        json_object_object_add(x, "world_rank", json_object_new_int(w));
        json_object_object_add(x, "pid", json_object_new_int(r->pid));
        json_object_object_add(x, "host", json_object_new_string(r->host));
        json_object_object_add(x, "role", json_object_new_string(ftrt__role_name(r->role)));
        json_object_object_add(x, "logical_rank",
                               r->logical >= 0 ? json_object_new_int(r->logical) : NULL);
        json_object_object_add(x, "steps_done", json_object_new_int64(r->steps_done));
        json_object_object_add(x, "last_step", json_object_new_int64(r->steps_done - 1));
        const char *st = rank_state(c, w);
        json_object_object_add(x, "state", json_object_new_string(st));
        /* the world rank of the process its host agent lives in; null: its own connection */
        json_object_object_add(x, "host_agent", r->link >= 0 && w > 0
                                                    ? json_object_new_int(c->hl[r->link].agent_w)
                                                    : NULL);
        if (w > 0 && (!strcmp(st, "running") || !strcmp(st, "joining"))) accounted = 0;
        json_object_array_add(ranks, x);
    }
    json_object_object_add(o, "ranks", ranks);
    json_object_object_add(o, "accounted", json_object_new_boolean(accounted));
    json_object_object_add(o, "final", json_object_new_boolean(c->final_written));
    int rc = ftrt__write_json_atomic(c->a->status_file, o);
    json_object_put(o);
    if (rc && !warned) {
        warned = 1;
        ftrt_log_warn("cannot write the status file %s: %s", c->a->status_file, strerror(-rc));
    }
    return rc;
}

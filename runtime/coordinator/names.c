/*
 * names.c - names the coordinator's outputs share (report, status, metrics, log lines), and
 * the fault log lookup (FTRT_FAULT_LOG) that gives the report its ground truth.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coordinator/coord.h"

const char *ftrt__role_name(int role)
{
    switch (role) {
    case FTRT__ROLE_COORD: return "coordinator";
    case FTRT__ROLE_TRAINER: return "trainer";
    case FTRT__ROLE_SPARE: return "spare";
    default: return "failed";
    }
}

const char *ftrt__failure_kind_name(int kind)
{
    switch (kind) {
    case FK_CONNECTION_LOST: return "connection_lost";
    case FK_HEARTBEAT_TIMEOUT: return "heartbeat_timeout";
    case FK_PROGRESS_STALL: return "progress_stall";
    case FK_SDC: return "silent_data_corruption";
    case FK_DRAIN: return "drain";
    default: return "protocol_error";
    }
}

double ftrt__fault_injected_at(const char *log, int pid, int w, double t_detect_wall)
{
    if (!log || !*log) return -1;
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    char line[4096];
    double best = -1;
    while (fgets(line, sizeof line, f)) {
        json_object *o = json_tokener_parse(line), *v;
        if (!o) continue;
        double t = json_object_object_get_ex(o, "time", &v) ? json_object_get_double(v) : -1;
        int p = json_object_object_get_ex(o, "pid", &v) ? json_object_get_int(v) : -1;
        int wr = json_object_object_get_ex(o, "world_rank", &v) ? json_object_get_int(v) : -1;
        if ((p == pid || (p < 0 && wr == w)) && t > 0 && t <= t_detect_wall + 1e-3 && t > best)
            best = t;
        json_object_put(o);
    }
    fclose(f);
    return best;
}

double ftrt__incident_injected_at(const ftrt__coord *c, const ftrt__incident *x)
{
    const char *log = c->a->cfg->fault_log;
    if (x->world_rank >= 0) /* (0: the coordinator, lost and taken over from) */
        return ftrt__fault_injected_at(log, x->pid, x->world_rank, x->t_detect_wall);
    double since = x->t_detect_wall - (x->t_detect - x->t_last_heard), best = -1;
    for (int w = 1; w < c->Wused; w++) {
        double t = ftrt__fault_injected_at(log, c->r[w].pid, w, x->t_detect_wall);
        if (t >= since && t > best) best = t;
    }
    return best;
}

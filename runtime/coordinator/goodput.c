/*
 * goodput.c - the goodput ledger on the coordinator: every slot's timeline over the job window,
 * the GAU x ECTR x eMFU figures, the "where the rank-hours went" waterfall, the Young/Daly
 * checkpoint-interval advice, the OpenMetrics file and the live progress line.
 *
 * Slots are world ranks 1..W-1 (trainers and hot spares: what the job pays for); the
 * coordinator is not a slot. A slot's timeline comes from the LEDGER messages of the process
 * that held it (sent every heartbeat period); what those do not cover is filled in: start-up
 * before the first interval, teardown after a finished rank's last one, and for a rank that
 * failed, its last reported activity from its last report to the failure (under a heartbeat
 * period plus one step; its step in flight is counted as compute, not rework) and "down" from
 * then to the end.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/coordinator/coord.h"
#include "base/log.h"

typedef void (*emit_fn)(void *arg, int kind, double t0, double t1);

static int cmp_iv(const void *a, const void *b)
{
    const ftrt__interval *x = a, *y = b;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* Walks slot w's timeline over [j0, j1], emitting contiguous pieces that cover it exactly. */
static void rebuild_slot(ftrt__coord *c, int w, double j0, double j1, emit_fn emit, void *arg)
{
    ftrt__crank *r = &c->r[w];
    double cur = j0;
    if (r->tl_n > 1) qsort(r->tl, r->tl_n, sizeof *r->tl, cmp_iv); /* arrival order may differ */
    int dead = r->role == FTRT__ROLE_FAILED && r->t_fail_wall > 0;
    double stop = dead ? fmin(fmax(r->t_fail_wall, j0), j1) : j1;
    if (!r->tl_truncated) {
        for (size_t i = 0; i < r->tl_n && cur < stop; i++) {
            double t0 = fmax(r->tl[i].t0, cur), t1 = fmin(r->tl[i].t1, stop);
            if (t1 <= t0) continue;
            if (t0 > cur) emit(arg, cur == j0 ? FTRT__IV_STARTUP : r->tl[i].kind, cur, t0);
            emit(arg, r->tl[i].kind, t0, t1);
            cur = t1;
        }
    } else { /* timeline cut short: the exact totals, laid end to end from the start */
        for (int k = 0; k < FTRT__IV_KINDS && cur < stop; k++) {
            double t1 = fmin(cur + r->tl_totals[k], stop);
            if (t1 > cur) emit(arg, k, cur, t1);
            cur = t1;
        }
    }
    if (cur < stop) {
        int kind;
        if (!r->tl_seen)
            kind = FTRT__IV_STARTUP;
        else if (dead) /* its last unreported moments (< a heartbeat period and a step) */
            kind = r->tl_kind_open == FTRT__IV_SPARE_IDLE ? FTRT__IV_SPARE_IDLE : FTRT__IV_COMPUTE;
        else if (r->tl_final)
            kind = FTRT__IV_TEARDOWN;
        else
            kind = r->tl_kind_open;
        emit(arg, kind, cur, stop);
        cur = stop;
    }
    if (cur < j1) emit(arg, FTRT__IV_DOWN, cur, j1);
}

static void add_total(void *arg, int kind, double t0, double t1)
{
    double *t = arg;
    t[kind] += t1 - t0;
}

int ftrt__ledger_figures(const ftrt__coord *cc, double j1, double (*totals)[FTRT__IV_KINDS],
                         ftrt__goodput *g, double *useful_flops, double *peak_flops)
{
    ftrt__coord *c = (ftrt__coord *)cc; /* rebuild_slot sorts the received intervals */
    double j0 = c->t_start_wall, kept = 0, useful = 0, peak = c->a->cfg->peak_flops;
    for (int w = 1; w < c->W; w++) {
        memset(totals[w - 1], 0, sizeof totals[w - 1]);
        rebuild_slot(c, w, j0, j1, add_total, totals[w - 1]);
        kept += c->r[w].kept_s;
        useful += (double)c->r[w].kept_steps * c->r[w].flops_per_step;
        if (c->r[w].peak_flops > peak) peak = c->r[w].peak_flops;
    }
    ftrt__goodput_in in = {.slots = c->W - 1, .wall_s = j1 - j0,
                           .totals = (const double (*)[FTRT__IV_KINDS])totals,
                           .kept_step_s = kept, .useful_flops = useful, .peak_flops = peak};
    *useful_flops = useful;
    *peak_flops = peak;
    return ftrt__goodput_compute(&in, g);
}

/* ---- report ---- */

typedef struct tl_arg {
    json_object *arr;
    double j0;
} tl_arg;

static void add_json(void *arg, int kind, double t0, double t1)
{
    tl_arg *a = arg;
    json_object *x = json_object_new_array();
    json_object_array_add(x, json_object_new_int(kind));
    json_object_array_add(x, json_object_new_double(round((t0 - a->j0) * 1e6) / 1e6));
    json_object_array_add(x, json_object_new_double(round((t1 - a->j0) * 1e6) / 1e6));
    json_object_array_add(a->arr, x);
}

static void add_event(json_object *ev, double j0, double t, const char *what,
                      const ftrt__incident *x)
{
    if (!(t > 0)) return;
    json_object *e = json_object_new_object();
    json_object_object_add(e, "t", json_object_new_double(t - j0));
    json_object_object_add(e, "event", json_object_new_string(what));
    json_object_object_add(e, "world_rank", json_object_new_int(x->world_rank));
    json_object_object_add(e, "kind", json_object_new_string(ftrt__failure_kind_name(x->kind)));
    json_object_array_add(ev, e);
}

static json_object *num_or_null(double v) { return v >= 0 ? json_object_new_double(v) : NULL; }

static void advice(ftrt__coord *c, const ftrt__goodput *g, json_object *o)
{
    const ftrt_config *cfg = c->a->cfg;
    int nck = c->ncommitted + c->nckpt_failed, trainer_failures = 0;
    for (int i = 0; i < c->ninc; i++) trainer_failures += !c->inc[i].was_spare;
    double wall = g->allocated_s / (c->W - 1);
    double cost = nck > 0 ? g->by_kind[FTRT__IV_CKPT] / ((double)c->N * nck) : -1;
    double mtbf = cfg->mtbf_s > 0 ? cfg->mtbf_s : (trainer_failures ? wall / trainer_failures : -1);
    double restart = g->by_kind[FTRT__IV_STARTUP] / (c->W - 1);
    double tau = c->ncommitted > 1 ? (c->last_commit_wall - c->first_commit_wall) /
                                         (c->ncommitted - 1)
                                   : -1;
    double young = cost > 0 && mtbf > 0 ? sqrt(2 * cost * mtbf) : -1;
    double daly = ftrt__daly_interval(cost, mtbf);
    json_object *a = json_object_new_object();
    json_object_object_add(a, "checkpoint_cost_s", num_or_null(cost));
    json_object_object_add(a, "mtbf_s", num_or_null(mtbf));
    json_object_object_add(a, "mtbf_source", json_object_new_string(
        cfg->mtbf_s > 0 ? "configured" : (trainer_failures ? "observed" : "none")));
    json_object_object_add(a, "restart_cost_s", json_object_new_double(restart));
    json_object_object_add(a, "interval_in_use_s", num_or_null(tau));
    json_object_object_add(a, "young_interval_s", num_or_null(young));
    json_object_object_add(a, "daly_interval_s", num_or_null(daly));
    double g_use = tau > 0 ? ftrt__model_goodput(tau, fmax(cost, 0), restart, mtbf) : -1;
    double g_daly = daly > 0 ? ftrt__model_goodput(daly, cost, restart, mtbf) : -1;
    json_object_object_add(a, "model_goodput_in_use", num_or_null(g_use));
    json_object_object_add(a, "model_goodput_daly", num_or_null(g_daly));
    json_object_object_add(a, "model", json_object_new_string(
        "1 - C/tau - (tau/2 + R)/M: every failure rolls back to the last checkpoint (a job-level "
        "restart); hot-spare recovery from a survivor's memory avoids that rollback"));
    json_object_object_add(o, "advice", a);
    if (daly > 0 && tau > 0)
        printf("  checkpoint interval: %.2f s in use, Young/Daly optimum %.2f s (C %.3f s, M %.1f s "
               "%s): model goodput %.3f in use, %.3f at the optimum\n",
               tau, daly, cost, mtbf, cfg->mtbf_s > 0 ? "configured" : "observed", g_use, g_daly);
    else
        printf("  checkpoint interval advice: needs a measured checkpoint cost and a failure rate "
               "(failures observed or FTRT_MTBF_S)\n");
}

/* The ledger's totals and figures as the report's "ledger" object. */
static void ledger_json(const ftrt__goodput *g, double useful_flops, double peak, json_object *o)
{
    json_object *l = json_object_new_object();
    json_object_object_add(l, "allocated_rank_s", json_object_new_double(g->allocated_s));
    json_object_object_add(l, "accounted_rank_s", json_object_new_double(g->accounted_s));
    json_object *bk = json_object_new_object();
    for (int k = 0; k < FTRT__IV_KINDS; k++)
        json_object_object_add(bk, ftrt__iv_name(k), json_object_new_double(g->by_kind[k]));
    json_object_object_add(l, "rank_s_by_kind", bk);
    json_object_object_add(l, "trainer_rank_s", json_object_new_double(g->trainer_s));
    json_object_object_add(l, "compute_rank_s", json_object_new_double(g->compute_s));
    json_object_object_add(l, "useful_compute_rank_s", json_object_new_double(g->useful_s));
    json_object_object_add(l, "useful_flops", json_object_new_double(useful_flops));
    json_object_object_add(l, "peak_flops_per_rank", num_or_null(peak > 0 ? peak : -1));
    json_object_object_add(l, "gau", json_object_new_double(g->gau));
    json_object_object_add(l, "ectr", json_object_new_double(g->ectr));
    json_object_object_add(l, "emfu", num_or_null(g->emfu));
    json_object_object_add(l, "effective_utilization", num_or_null(g->effective));
    json_object_object_add(l, "goodput", json_object_new_double(g->goodput));
    json_object_object_add(o, "ledger", l);
}

/* Where the rank-hours went: the text waterfall and the report's "waterfall" array, then the
 * GAU x ECTR x eMFU line. */
static void waterfall(const ftrt__goodput *g, int slots, json_object *o)
{
    double a = g->allocated_s;
    printf("  where the rank-hours went (%d ranks x %.3f s):\n", slots, a / slots);
    printf("    %-22s %12.6f rank-h %9.3f rank-s %6.1f%%\n", "allocated", a / 3600, a, 100.0);
    json_object *wf = json_object_new_array();
    for (int i = 0; i < g->nlosses; i++) {
        int k = g->order[i];
        if (g->by_kind[k] <= 0) continue;
        printf("    - %-20s %12.6f rank-h %9.3f rank-s %6.1f%%\n", ftrt__iv_name(k),
               g->by_kind[k] / 3600, g->by_kind[k], 100 * g->by_kind[k] / a);
        json_object *x = json_object_new_object();
        json_object_object_add(x, "cause", json_object_new_string(ftrt__iv_name(k)));
        json_object_object_add(x, "rank_s", json_object_new_double(g->by_kind[k]));
        json_object_object_add(x, "percent", json_object_new_double(100 * g->by_kind[k] / a));
        json_object_array_add(wf, x);
    }
    printf("    = %-20s %12.6f rank-h %9.3f rank-s %6.1f%%\n", "useful compute",
           g->useful_s / 3600, g->useful_s, 100 * g->useful_s / a);
    json_object_object_add(o, "waterfall", wf);
    if (g->emfu >= 0)
        printf("  GAU %.3f x ECTR %.3f x eMFU %.4f = effective utilization %.4f; goodput %.3f\n",
               g->gau, g->ectr, g->emfu, g->effective, g->goodput);
    else
        printf("  GAU %.3f x ECTR %.3f (eMFU unknown: no FLOPs per step or peak FLOP/s given); "
               "goodput %.3f\n", g->gau, g->ectr, g->goodput);
}

/* The report's "timeline": every rank's intervals from j0 to j1 and the incidents' events. */
static void timeline_json(ftrt__coord *c, double j0, double j1, json_object *o)
{
    json_object *tl = json_object_new_object();
    json_object_object_add(tl, "t0", json_object_new_double(j0));
    json_object_object_add(tl, "wall_s", json_object_new_double(j1 - j0));
    json_object *kinds = json_object_new_array();
    for (int k = 0; k < FTRT__IV_KINDS; k++)
        json_object_array_add(kinds, json_object_new_string(ftrt__iv_name(k)));
    json_object_object_add(tl, "kinds", kinds);
    json_object *ranks = json_object_new_array();
    for (int w = 1; w < c->W; w++) {
        json_object *x = json_object_new_object();
        json_object_object_add(x, "world_rank", json_object_new_int(w));
        json_object_object_add(x, "role", json_object_new_string(ftrt__role_name(c->r[w].role)));
        json_object_object_add(x, "logical_rank",
                               c->r[w].logical >= 0 ? json_object_new_int(c->r[w].logical) : NULL);
        json_object_object_add(x, "truncated", json_object_new_boolean(c->r[w].tl_truncated));
        tl_arg ta = {json_object_new_array(), j0};
        rebuild_slot(c, w, j0, j1, add_json, &ta);
        json_object_object_add(x, "intervals", ta.arr);
        json_object_array_add(ranks, x);
    }
    json_object_object_add(tl, "ranks", ranks);
    json_object *ev = json_object_new_array();
    for (int i = 0; i < c->ninc; i++) {
        const ftrt__incident *x = &c->inc[i];
        add_event(ev, j0, x->t_fail_wall, "failure", x);
        add_event(ev, j0, x->t_detect_wall, "detected", x);
        add_event(ev, j0, x->t_plan_wall, "plan", x);
        if (x->recovered) add_event(ev, j0, x->t_detect_wall + (x->t_resumed - x->t_detect), "resumed", x);
    }
    json_object_object_add(tl, "events", ev);
    json_object_object_add(o, "timeline", tl);
}

void ftrt__ledger_report(ftrt__coord *c, json_object *o)
{
    int slots = c->W - 1;
    double j0 = c->t_start_wall, j1 = j0 + (c->t_end - c->t_start);
    double (*totals)[FTRT__IV_KINDS] = calloc((size_t)slots, sizeof *totals);
    if (!totals) return;
    ftrt__goodput g;
    double useful_flops, peak;
    if (ftrt__ledger_figures(c, j1, totals, &g, &useful_flops, &peak)) {
        free(totals);
        return;
    }
    ledger_json(&g, useful_flops, peak, o);
    waterfall(&g, slots, o);
    advice(c, &g, o);
    timeline_json(c, j0, j1, o);
    free(totals);
}

/* ---- OpenMetrics ---- */

static void metric(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# TYPE %s %s\n# HELP %s %s\n", name, type, name, help);
}

/* The job's gauges and counters: running, epoch, steps, trainers, spares, checkpoints. */
static void metrics_job(FILE *f, const ftrt__coord *c)
{
    int64_t steps = 0;
    int spares = 0;
    for (int w = 1; w < c->W; w++) {
        if (c->r[w].steps_done > steps) steps = c->r[w].steps_done;
        spares += c->r[w].role == FTRT__ROLE_SPARE;
    }
    metric(f, "ftrt_job_running", "gauge", "1 while the job runs, 0 once it ended.");
    fprintf(f, "ftrt_job_running %d\n", c->phase != PH_DONE);
    metric(f, "ftrt_epoch", "gauge", "Membership epoch (one more per recovery).");
    fprintf(f, "ftrt_epoch %d\n", c->epoch);
    metric(f, "ftrt_steps_done", "gauge", "Training steps done by the most advanced trainer.");
    fprintf(f, "ftrt_steps_done %lld\n", (long long)steps);
    metric(f, "ftrt_trainers", "gauge", "Trainers in the data-parallel world.");
    fprintf(f, "ftrt_trainers %d\n", c->N);
    metric(f, "ftrt_spares_available", "gauge", "Hot spares left in the pool.");
    fprintf(f, "ftrt_spares_available %d\n", spares);
    metric(f, "ftrt_last_committed_step", "gauge", "Step of the newest committed checkpoint.");
    fprintf(f, "ftrt_last_committed_step %lld\n", (long long)c->last_committed);
    metric(f, "ftrt_checkpoints_committed", "counter", "Checkpoints committed.");
    fprintf(f, "ftrt_checkpoints_committed_total %d\n", c->ncommitted);
    metric(f, "ftrt_checkpoints_failed", "counter", "Checkpoints that failed.");
    fprintf(f, "ftrt_checkpoints_failed_total %d\n", c->nckpt_failed);
    metric(f, "ftrt_rejected_connections", "counter", "Control-plane connections rejected.");
    fprintf(f, "ftrt_rejected_connections_total %d\n", c->rejected_connections);
}

/* The incidents: failures by kind, SDC checks, rework, each incident's MTTD and MTTR. */
static void metrics_incidents(FILE *f, ftrt__coord *c)
{
    metric(f, "ftrt_failures", "counter", "Ranks declared failed, by detection kind.");
    int nk[FK_KINDS] = {0};
    int64_t rework = 0;
    for (int i = 0; i < c->ninc; i++) {
        nk[c->inc[i].kind]++;
        rework += c->inc[i].rework_steps;
    }
    for (int k = 0; k < FK_KINDS; k++)
        fprintf(f, "ftrt_failures_total{kind=\"%s\"} %d\n", ftrt__failure_kind_name(k), nk[k]);
    metric(f, "ftrt_sdc_checks", "counter",
           "Steps whose replicas' fingerprints were compared (silent data corruption check).");
    fprintf(f, "ftrt_sdc_checks_total %d\n", c->sdc_checks);
    metric(f, "ftrt_rework_steps", "counter", "Completed steps computed again after rollbacks.");
    fprintf(f, "ftrt_rework_steps_total %lld\n", (long long)rework);
    metric(f, "ftrt_mttd_seconds", "gauge", "Time to detect each failure (fault log or bound).");
    for (int i = 0; i < c->ninc; i++) {
        const ftrt__incident *x = &c->inc[i];
        double inj = ftrt__incident_injected_at(c, x);
        fprintf(f, "ftrt_mttd_seconds{incident=\"%d\",kind=\"%s\"} %.6f\n", i + 1,
                ftrt__failure_kind_name(x->kind),
                inj > 0 ? x->t_detect_wall - inj : x->t_detect - x->t_last_heard);
    }
    metric(f, "ftrt_mttr_seconds", "gauge", "Detection to every member back in the loop.");
    for (int i = 0; i < c->ninc; i++)
        if (c->inc[i].recovered)
            fprintf(f, "ftrt_mttr_seconds{incident=\"%d\"} %.6f\n", i + 1,
                    c->inc[i].t_resumed - c->inc[i].t_detect);
}

/* The ledger so far: rank-seconds by kind, goodput, GAU, ECTR, eMFU. */
static void metrics_ledger(FILE *f, const ftrt__goodput *g)
{
    metric(f, "ftrt_rank_seconds", "counter", "Rank-seconds of the job by ledger kind.");
    for (int k = 0; k < FTRT__IV_KINDS; k++)
        fprintf(f, "ftrt_rank_seconds_total{kind=\"%s\"} %.6f\n", ftrt__iv_name(k),
                g->by_kind[k]);
    metric(f, "ftrt_goodput_ratio", "gauge", "Kept step rank-seconds over allocated, so far.");
    fprintf(f, "ftrt_goodput_ratio %.6f\n", g->goodput);
    metric(f, "ftrt_gau_ratio", "gauge", "Allocation utilization: trainer time / allocated.");
    fprintf(f, "ftrt_gau_ratio %.6f\n", g->gau);
    metric(f, "ftrt_ectr_ratio", "gauge", "Effective compute time ratio.");
    fprintf(f, "ftrt_ectr_ratio %.6f\n", g->ectr);
    if (g->emfu >= 0) {
        metric(f, "ftrt_emfu_ratio", "gauge", "Effective model FLOPs utilization.");
        fprintf(f, "ftrt_emfu_ratio %.6f\n", g->emfu);
        metric(f, "ftrt_effective_utilization_ratio", "gauge", "GAU x ECTR x eMFU.");
        fprintf(f, "ftrt_effective_utilization_ratio %.6f\n", g->effective);
    }
}

int ftrt__metrics_write(ftrt__coord *c, double t_wall)
{
    int slots = c->W - 1;
    double (*totals)[FTRT__IV_KINDS] = calloc((size_t)slots, sizeof *totals);
    if (!totals) return -ENOMEM;
    ftrt__goodput g;
    double useful, peak;
    int have = t_wall > c->t_start_wall &&
               ftrt__ledger_figures(c, t_wall, totals, &g, &useful, &peak) == 0;
    free(totals);
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", c->a->cfg->metrics_file, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -errno;
    metrics_job(f, c);
    metrics_incidents(f, c);
    if (have) metrics_ledger(f, &g);
    fprintf(f, "# EOF\n");
    int ok = fflush(f) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, c->a->cfg->metrics_file)) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

void ftrt__progress_line(ftrt__coord *c, int final)
{
    int on = c->a->cfg->progress;
    if (on < 0) on = isatty(2);
    if (!on) return;
    int64_t steps = 0, total = 0;
    for (int w = 1; w < c->W; w++) {
        if (c->r[w].steps_done > steps) steps = c->r[w].steps_done;
        if (c->r[w].total_steps > total) total = c->r[w].total_steps;
    }
    double now = ftrt__now();
    double rate = c->progress_t > 0 && now > c->progress_t
                      ? (double)(steps - c->progress_steps) / (now - c->progress_t)
                      : 0;
    c->progress_steps = steps;
    c->progress_t = now;
    char eta[32] = "?";
    if (total > steps && rate > 0) {
        long s = (long)((double)(total - steps) / rate);
        snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    }
    char of[32] = "";
    if (total) snprintf(of, sizeof of, "/%lld", (long long)total);
    fprintf(stderr, "\rftrt: step %lld%s  %.1f steps/s  ETA %s  failures %d  epoch %d   %s",
            (long long)steps, of, rate, eta, c->ninc, c->epoch, final ? "\n" : "");
    fflush(stderr);
}

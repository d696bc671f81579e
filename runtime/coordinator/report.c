/*
 * report.c - the end-of-job report: JSON (FTRT_REPORT / --report) and a short human summary on
 * the coordinator's stdout.
 *
 * Every figure is measured: MTTD from the coordinator's clock (detection) and, when a fault
 * injector wrote FTRT_FAULT_LOG, its injection time (wall clock, same host); otherwise the
 * bound detection - last message heard. MTTR is detection -> the last member's RESUMED. Goodput
 * is the rank-seconds of kept steps (each trainer times its own steps; a dead rank's figure
 * comes from its last heartbeat) over allocated = (trainers + spares) x wall time.
 * JSON schema (version 1): see docs/report-schema.md "Report".
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "runtime/coordinator/coord.h"
#include "base/log.h"

/* The job's totals, computed once for the JSON and the text. */
typedef struct totals {
    double wall, allocated, kept, rework_s, lost_s, ck_stall;
    int64_t steps, rework_steps;
    int nspares, ok, ck_abandoned;
} totals;

/* MTTR's phases, seconds (docs/report-schema.md "phases_ms"), in order: the survivors reaching
 * the recovery point (detection -> the last REPORT), the plan (-> PLAN sent), then, as the
 * member that resumed last timed them, the communicator rebuild, the state transfer and the
 * rest of its part until its RESUMED (resume). */
enum { PH_REACH, PH_PLAN, PH_REBUILD, PH_TRANSFER, PH_RESUME, PH_N };
static const char *const phase_names[PH_N] = {"reach", "plan", "rebuild", "transfer", "resume"};

/* One failure's measured times: injection (fault log, or -1), detection bound, MTTD, MTTR, and
 * MTTR's phases with what they leave out of it (the PLAN's and the last RESUMED's time in
 * flight: the coordinator's span minus the member's). */
typedef struct measured {
    double inj, bound, mttd, mttr;
    double phase[PH_N], unaccounted;
} measured;

/* Splits x's MTTR into phases: the coordinator's clock up to the PLAN, the member's after it
 * (two clocks, never compared: each phase is a difference on one clock). */
static void measure_phases(const ftrt__incident *x, measured *m)
{
    double ready = x->t_ready > x->t_detect ? x->t_ready : x->t_detect; /* (a failure folded into
                                                               a plan whose REPORTs were in) */
    m->phase[PH_REACH] = ready - x->t_detect;
    m->phase[PH_PLAN] = x->t_plan - ready;
    m->phase[PH_REBUILD] = x->phase.rebuild_s;
    m->phase[PH_TRANSFER] = x->phase.transfer_s;
    m->phase[PH_RESUME] = x->phase.span_s - x->phase.rebuild_s - x->phase.transfer_s;
    double sum = 0;
    for (int k = 0; k < PH_N; k++) sum += m->phase[k];
    m->unaccounted = m->mttr - sum;
}

static void totals_of(const ftrt__coord *c, totals *t)
{
    memset(t, 0, sizeof *t);
    t->wall = c->t_end - c->t_start;
    t->nspares = c->W - 1 - c->N;
    t->allocated = (double)(c->N + t->nspares) * t->wall;
    for (int w = 1; w < c->W; w++) {
        const ftrt__crank *r = &c->r[w];
        t->kept += r->kept_s;
        if (r->said_bye) {
            t->rework_s += r->bye.rework_s;
            t->lost_s += r->bye.lost_s;
            t->ck_stall += r->bye.ckpt_stall_s; /* time blocked in checkpoint calls */
        }
        if (r->steps_done > t->steps) t->steps = r->steps_done;
    }
    for (int i = 0; i < c->ninc; i++) t->rework_steps += c->inc[i].rework_steps;
    t->ok = c->result == FTRT_DONE;
    /* abandoned: in flight at an epoch change or at the end */
    t->ck_abandoned = c->nckpt_abandoned + ftrt__track_pending(c->ckpt_track);
}

/* Whether x's MTTR has phases: a recovery through an epoch's PLAN. A standby's takeover (the
 * coordinator lost) has none: no REPORT, no PLAN, the ranks only come back. */
static int has_phases(const ftrt__incident *x)
{
    return x->recovered && !x->coord_lost;
}

static measured measure(const ftrt__coord *c, const ftrt__incident *x)
{
    measured m;
    m.inj = ftrt__incident_injected_at(c, x);
    m.bound = x->t_detect - x->t_last_heard;
    m.mttd = m.inj > 0 ? x->t_detect_wall - m.inj : m.bound;
    m.mttr = x->recovered ? x->t_resumed - x->t_detect : -1;
    if (has_phases(x)) measure_phases(x, &m);
    return m;
}

/* ---- JSON sections (docs/report-schema.md "Report") ---- */

/* The coordinator that wrote the report (as in the status file): world rank 0, or the standby
 * that took over last, with its host, pid and term (the takeovers before it). */
static json_object *coordinator_json(const ftrt__coord *c)
{
    const ftrt__crank *me = &c->r[c->self];
    json_object *co = json_object_new_object();
    json_object_object_add(co, "world_rank", json_object_new_int(c->self));
    json_object_object_add(co, "host", json_object_new_string(me->host));
    json_object_object_add(co, "pid", json_object_new_int(me->pid));
    json_object_object_add(co, "term", json_object_new_int(c->term));
    return co;
}

static void summary_json(json_object *o, const ftrt__coord *c, const totals *t)
{
    json_object_object_add(o, "schema", json_object_new_int(1));
    json_object_object_add(o, "status", json_object_new_string(t->ok ? "finished" : "failed"));
    json_object_object_add(o, "error",
                           t->ok ? NULL : json_object_new_string(ftrt_err_name(c->result)));
    json_object_object_add(o, "steps", json_object_new_int64(t->steps));
    json_object_object_add(o, "wall_s", json_object_new_double(t->wall));
    json_object_object_add(o, "trainers", json_object_new_int(c->N));
    json_object_object_add(o, "spares", json_object_new_int(t->nspares));
    json_object_object_add(o, "epoch", json_object_new_int(c->epoch));
    json_object_object_add(o, "coordinator", coordinator_json(c));
    json_object_object_add(o, "allocated_rank_s", json_object_new_double(t->allocated));
    json_object_object_add(o, "kept_step_rank_s", json_object_new_double(t->kept));
    json_object_object_add(o, "rework_rank_s", json_object_new_double(t->rework_s));
    json_object_object_add(o, "lost_partial_step_rank_s", json_object_new_double(t->lost_s));
    json_object_object_add(o, "goodput",
                           json_object_new_double(t->allocated > 0 ? t->kept / t->allocated : 0));
}

/* Checkpoints: committed, failed, skipped (staging busy under FTRT_CKPT_POLICY=skip),
 * abandoned (totals_of), and stall_s, the trainers' time blocked in checkpoint calls. */
static json_object *checkpoints_json(const ftrt__coord *c, int abandoned, double stall_s)
{
    json_object *ck = json_object_new_object();
    json_object_object_add(ck, "committed", json_object_new_int(c->ncommitted));
    json_object_object_add(ck, "failed", json_object_new_int(c->nckpt_failed));
    json_object_object_add(ck, "skipped", json_object_new_int(c->nckpt_skipped));
    json_object_object_add(ck, "abandoned", json_object_new_int(abandoned));
    json_object_object_add(ck, "stall_rank_s", json_object_new_double(stall_s));
    json_object_object_add(ck, "last_committed_step", json_object_new_int64(c->last_committed));
    return ck;
}

/* A failure's who and detection: ranks, pid, kind, hosts, role, MTTD. */
static void failure_detection_json(json_object *f, const ftrt__coord *c, const ftrt__incident *x,
                                   const measured *m)
{
    const char *host = x->world_rank >= 0 ? c->r[x->world_rank].host : NULL;
    json_object_object_add(f, "world_rank",
                           x->world_rank >= 0 ? json_object_new_int(x->world_rank) : NULL);
    json_object_object_add(f, "logical_rank", json_object_new_int(x->logical_rank));
    json_object_object_add(f, "pid", json_object_new_int(x->pid));
    json_object_object_add(f, "kind", json_object_new_string(ftrt__failure_kind_name(x->kind)));
    json_object_object_add(f, "host", host ? json_object_new_string(host) : NULL);
    json_object_object_add(f, "cause",
                           json_object_new_string(x->coord_lost  ? "coordinator_lost"
                                                  : x->host_lost ? "host_lost"
                                                                 : "rank"));
    json_object_object_add(f, "spare_host",
                           x->spare_world_rank >= 0
                               ? json_object_new_string(c->r[x->spare_world_rank].host)
                               : NULL);
    json_object_object_add(f, "role", json_object_new_string(x->coord_lost  ? "coordinator"
                                                             : x->was_spare ? "spare"
                                                                            : "trainer"));
    json_object_object_add(f, "detected_at", json_object_new_double(x->t_detect_wall));
    json_object_object_add(f, "mttd_s", json_object_new_double(m->mttd));
    json_object_object_add(f, "mttd_source",
                           json_object_new_string(m->inj > 0 ? "fault_log" : "bound"));
    json_object_object_add(f, "mttd_bound_s", json_object_new_double(m->bound));
}

/* A failure's recovery: MTTR, spare, epoch, resume step, rework, where the state came from. */
static void failure_recovery_json(json_object *f, const ftrt__incident *x, const measured *m)
{
    static const char *const from[] = {"peers", "replica", "checkpoint"};
    int resumed = x->resume_step >= 0;
    json_object_object_add(f, "recovered", json_object_new_boolean(x->recovered));
    json_object_object_add(f, "mttr_s", x->recovered ? json_object_new_double(m->mttr) : NULL);
    json_object_object_add(f, "spare_world_rank",
                           x->spare_world_rank >= 0 ? json_object_new_int(x->spare_world_rank)
                                                    : NULL);
    json_object_object_add(f, "epoch", json_object_new_int(x->epoch));
    json_object_object_add(f, "resume_step",
                           resumed ? json_object_new_int64(x->resume_step) : NULL);
    json_object_object_add(f, "rework_steps", json_object_new_int64(x->rework_steps));
    json_object_object_add(f, "state_from",
                           resumed && x->state_from >= 0 && x->state_from < 3
                               ? json_object_new_string(from[x->state_from])
                               : NULL);
    const char *miss = resumed ? ftrt__replica_miss_name(x->replica_miss) : NULL;
    json_object_object_add(f, "replica_miss", miss ? json_object_new_string(miss) : NULL);
    json_object *ph = NULL;
    if (has_phases(x)) {
        ph = json_object_new_object();
        for (int k = 0; k < PH_N; k++)
            json_object_object_add(ph, phase_names[k], json_object_new_double(m->phase[k] * 1e3));
    }
    json_object_object_add(f, "phases_ms", ph);
    json_object_object_add(f, "phases_unaccounted_ms",
                           has_phases(x) ? json_object_new_double(m->unaccounted * 1e3) : NULL);
    json_object_object_add(f, "phases_world_rank",
                           has_phases(x) ? json_object_new_int(x->phase_w) : NULL);
}

/* A silent data corruption's details (NULL for other kinds of failure). */
static json_object *failure_sdc_json(const ftrt__incident *x)
{
    if (x->kind != FK_SDC) return NULL;
    json_object *sd = json_object_new_object();
    json_object_object_add(sd, "step_detected", json_object_new_int64(x->sdc_step));
    json_object_object_add(sd, "last_agreed_step",
                           x->sdc_agreed_step >= 0 ? json_object_new_int64(x->sdc_agreed_step)
                                                   : NULL);
    json_object_object_add(sd, "majority", json_object_new_boolean(x->sdc_majority));
    json_object_object_add(sd, "rollback_checkpoint_step",
                           x->sdc_ckpt >= 0 ? json_object_new_int64(x->sdc_ckpt) : NULL);
    json_object_object_add(sd, "uncommitted_checkpoints", json_object_new_int(x->sdc_uncommitted));
    return sd;
}

static json_object *failure_json(const ftrt__coord *c, const ftrt__incident *x,
                                 const measured *m)
{
    json_object *f = json_object_new_object();
    failure_detection_json(f, c, x, m);
    failure_recovery_json(f, x, m);
    json_object_object_add(f, "sdc", failure_sdc_json(x));
    return f;
}

/* Silent data corruption check: how often replicas were compared and what the fingerprints
 * cost the trainers (their seconds over the seconds of their kept steps). */
static json_object *sdc_json(const ftrt__coord *c, const totals *t)
{
    json_object *sdc = json_object_new_object();
    json_object_object_add(sdc, "every", json_object_new_int(c->a->cfg->sdc_every));
    json_object_object_add(sdc, "checks", json_object_new_int(c->sdc_checks));
    json_object_object_add(sdc, "fingerprints", json_object_new_int64(c->sdc_nfp));
    json_object_object_add(sdc, "last_agreed_step", c->sdc_agreed_step >= 0
                                                        ? json_object_new_int64(c->sdc_agreed_step)
                                                        : NULL);
    json_object_object_add(sdc, "fingerprint_rank_s", json_object_new_double(c->sdc_fp_s));
    json_object_object_add(sdc, "fingerprint_share_of_steps",
                           json_object_new_double(t->kept > 0 ? c->sdc_fp_s / t->kept : 0));
    return sdc;
}

static json_object *stragglers_json(const ftrt__coord *c)
{
    json_object *sl = json_object_new_array();
    for (int w = 1; w < c->W; w++) {
        const ftrt__crank *r = &c->r[w];
        if (r->straggler_max <= 0) continue;
        json_object *s = json_object_new_object();
        json_object_object_add(s, "world_rank", json_object_new_int(w));
        json_object_object_add(s, "logical_rank", json_object_new_int(r->logical));
        json_object_object_add(s, "step", json_object_new_int64(r->straggler_step));
        json_object_object_add(s, "ratio_to_median", json_object_new_double(r->straggler_max));
        json_object_array_add(sl, s);
    }
    return sl;
}

static json_object *control_plane_json(const ftrt__coord *c)
{
    json_object *cpo = json_object_new_object();
    json_object_object_add(cpo, "rejected_connections",
                           json_object_new_int(c->rejected_connections));
    json_object_object_add(cpo, "protocol_errors", json_object_new_int(c->protocol_errors));
    json_object_object_add(cpo, "collective_hang_reports", json_object_new_int(c->stall_reports));
    return cpo;
}

/* ---- the human summary (stdout), in the same order ---- */

static void header_text(const ftrt__coord *c, const totals *t)
{
    printf("ftrt report: job %s%s%s after %lld steps, %d trainers + %d spare(s), wall %.3f s\n",
           t->ok ? "finished" : "FAILED", t->ok ? "" : ": ", t->ok ? "" : ftrt_err_name(c->result),
           (long long)t->steps, c->N, t->nspares, t->wall);
    if (c->self != 0)
        printf("  coordinator: world rank %d (%s, pid %d), term %d: a standby that took over\n",
               c->self, c->r[c->self].host, c->r[c->self].pid, c->term);
    printf("  failures: %d\n", c->ninc);
}

/* Failure #i+1, on one line (after a line naming its lost host, if any). */
static void failure_text(const ftrt__coord *c, const ftrt__incident *x, int i, const measured *m)
{
    const char *src = m->inj > 0 ? "from the fault log" : "upper bound";
    const char *kind = ftrt__failure_kind_name(x->kind);
    if (x->host_lost) printf("    (host %s lost)\n", c->r[x->world_rank].host);
    if (x->kind == FK_SDC && x->world_rank < 0)
        printf("    #%d silent data corruption at step %lld, no majority: every member rolled "
               "back to checkpoint step %lld, MTTD %.1f ms (%s), %s%.1f ms, rework %lld "
               "steps\n", i + 1, (long long)x->sdc_step, (long long)x->sdc_ckpt, m->mttd * 1e3,
               src, x->recovered ? "MTTR " : "not recovered ", x->recovered ? m->mttr * 1e3 : 0.0,
               (long long)x->rework_steps);
    else if (x->coord_lost)
        printf("    #%d coordinator (world rank %d, pid %d): %s, MTTD %.1f ms (%s), %s%.1f ms: "
               "standby took over in place\n", i + 1, x->world_rank, x->pid, kind, m->mttd * 1e3, src,
               x->recovered ? "MTTR " : "not recovered ", x->recovered ? m->mttr * 1e3 : 0.0);
    else if (x->was_spare)
        printf("    #%d hot spare (world rank %d, pid %d): %s, MTTD %.1f ms (%s), removed from "
               "the pool\n", i + 1, x->world_rank, x->pid, kind, m->mttd * 1e3, src);
    else if (x->recovered)
        printf("    #%d logical rank %d (world rank %d, pid %d): %s, MTTD %.1f ms (%s), MTTR "
               "%.1f ms, hot spare world rank %d, resumed at step %lld (state from %s), "
               "rework %lld steps\n",
               i + 1, x->logical_rank, x->world_rank, x->pid, kind, m->mttd * 1e3, src,
               m->mttr * 1e3, x->spare_world_rank, (long long)x->resume_step,
               x->state_from == FTRT__FROM_REPLICA      ? "partner replicas in memory"
               : x->state_from == FTRT__FROM_CHECKPOINT ? "the checkpoint"
                                                        : "the survivors",
               (long long)x->rework_steps);
    else
        printf("    #%d logical rank %d (world rank %d, pid %d): %s, MTTD %.1f ms (%s), not "
               "recovered\n", i + 1, x->logical_rank, x->world_rank, x->pid, kind,
               m->mttd * 1e3, src);
}

/* A recovered failure's MTTR in phases, on the line after it. */
static void phases_text(const ftrt__incident *x, const measured *m)
{
    if (!has_phases(x)) return;
    const double *p = m->phase;
    printf("       MTTR phases: survivors at the recovery point %.1f ms, plan %.1f, communicator "
           "rebuild %.1f, state transfer %.1f, resume %.1f (world rank %d): %.1f of %.1f ms "
           "(%.1f ms in flight)\n", p[PH_REACH] * 1e3, p[PH_PLAN] * 1e3, p[PH_REBUILD] * 1e3,
           p[PH_TRANSFER] * 1e3, p[PH_RESUME] * 1e3, x->phase_w, (m->mttr - m->unaccounted) * 1e3,
           m->mttr * 1e3, m->unaccounted * 1e3);
}

static void sdc_text(const ftrt__coord *c, const totals *t)
{
    int every = c->a->cfg->sdc_every;
    double share = t->kept > 0 ? c->sdc_fp_s / t->kept : 0; /* only printed when kept > 0 */
    if (every > 0 && c->sdc_nfp > 0)
        printf("  silent data corruption check: every %d steps, %d comparison(s), fingerprints "
               "%.4f%% of the trainers' step time\n", every, c->sdc_checks,
               t->kept > 0 ? 100.0 * c->sdc_fp_s / t->kept : 0.0);
    if (every > 0 && t->kept > 0 && share > 0.01)
        printf("  (above 1%%: FTRT_SDC_EVERY=%d would bring it to 1%%)\n",
               (int)(every * share / 0.01) + 1);
}

static void stragglers_text(const ftrt__coord *c)
{
    for (int w = 1; w < c->W; w++) {
        const ftrt__crank *r = &c->r[w];
        if (r->straggler_max > 0)
            printf("  straggler: logical rank %d (world rank %d) at step %lld: %.2fx the median "
                   "compute time per step\n", r->logical, w, (long long)r->straggler_step,
                   r->straggler_max);
    }
}

/* The control plane's trouble (if any), rework and checkpoints. */
static void closing_text(const ftrt__coord *c, const totals *t)
{
    if (c->rejected_connections || c->protocol_errors)
        printf("  control plane: %d connection(s) rejected, %d protocol error(s)\n",
               c->rejected_connections, c->protocol_errors);
    printf("  rework: %lld completed step(s) computed again\n", (long long)t->rework_steps);
    printf("  checkpoints: %d committed, %d failed, %d skipped, %d abandoned, last committed "
           "step %lld; training blocked %.3f rank-s in checkpoint calls\n",
           c->ncommitted, c->nckpt_failed, c->nckpt_skipped, t->ck_abandoned,
           (long long)c->last_committed, t->ck_stall);
}

/* ---- the report ---- */

int ftrt__report_write(ftrt__coord *c)
{
    const ftrt_config *cfg = c->a->cfg;
    totals t;
    totals_of(c, &t);
    json_object *o = json_object_new_object();
    summary_json(o, c, &t);
    json_object_object_add(o, "checkpoints", checkpoints_json(c, t.ck_abandoned, t.ck_stall));
    header_text(c, &t);
    json_object *fl = json_object_new_array();
    for (int i = 0; i < c->ninc; i++) {
        measured m = measure(c, &c->inc[i]); /* reads the fault log: once per failure */
        json_object_array_add(fl, failure_json(c, &c->inc[i], &m));
        failure_text(c, &c->inc[i], i, &m);
        phases_text(&c->inc[i], &m);
    }
    json_object_object_add(o, "failures", fl);
    json_object_object_add(o, "sdc", sdc_json(c, &t));
    sdc_text(c, &t);
    json_object_object_add(o, "stragglers", stragglers_json(c));
    stragglers_text(c);
    json_object_object_add(o, "control_plane", control_plane_json(c));
    json_object_object_add(o, "rework_steps", json_object_new_int64(t.rework_steps));
    closing_text(c, &t);
    ftrt__ledger_report(c, o);
    fflush(stdout);

    int rc = 0;
    if (cfg->report_file[0]) {
        rc = ftrt__write_json_atomic(cfg->report_file, o);
        if (rc) ftrt_log_error("cannot write the report %s: %s", cfg->report_file, strerror(-rc));
    }
    json_object_put(o);
    return rc;
}

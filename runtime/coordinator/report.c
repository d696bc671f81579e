/*
 * report.c - the end-of-job report: JSON (FTRT_REPORT / --report) and a short human summary on
 * the coordinator's stdout.
 *
 * Every figure is measured: MTTD from the coordinator's clock (detection) and, when a fault
 * injector wrote FTRT_FAULT_LOG, its injection time (wall clock, same host); otherwise the
 * bound detection - last message heard. MTTR is detection -> the last member's RESUMED. Goodput
 * is the rank-seconds of kept steps (each trainer times its own steps; a dead rank's figure
 * comes from its last heartbeat) over allocated = (trainers + spares) x wall time, plus each
 * joined process's time from its join.
 * JSON schema (version 2): see docs/report-schema.md "Report". The JSON is streamed to the file
 * as it is produced (base/jsonw.h), never held whole: at 131,072 ranks its json-c tree and
 * text took 13.2 GiB of the coordinator (issue 22); what it holds now is one rank's part.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/coordinator/coord.h"
#include "base/jsonw.h"
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
    t->nspares = c->Wworld - 1 - c->N0; /* (at the start) */
    t->allocated = ftrt__allocated_s(c, c->t_start_wall, t->wall); /* (joined: from its join) */
    for (int w = 1; w < c->Wused; w++) {
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

/* Where a planned recovery's state came from (FTRT__FROM_*), or NULL before a plan. */
static const char *state_from_name(const ftrt__incident *x)
{
    static const char *const from[] = {"peers", "replica", "checkpoint", "erasure"};
    return x->resume_step >= 0 && x->state_from >= 0 && x->state_from < 4 ? from[x->state_from]
                                                                           : NULL;
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

/* ---- JSON sections (docs/report-schema.md "Report"), streamed to the file (base/jsonw.h) ---- */

/* key: v, or null when !has. */
static void opt_int(ftrt__jw *w, const char *key, int has, int64_t v)
{
    if (has)
        ftrt__jw_int(w, key, v);
    else
        ftrt__jw_null(w, key);
}

static void opt_double(ftrt__jw *w, const char *key, int has, double v)
{
    if (has)
        ftrt__jw_double(w, key, v);
    else
        ftrt__jw_null(w, key);
}

/* The coordinator that wrote the report (as in the status file): world rank 0, or the standby
 * that took over last, with its host, pid and term (the takeovers before it). */
static void coordinator_json(ftrt__jw *w, const ftrt__coord *c)
{
    const ftrt__crank *me = &c->r[c->self];
    ftrt__jw_object(w, "coordinator");
    ftrt__jw_int(w, "world_rank", c->self);
    ftrt__jw_string(w, "host", me->host);
    ftrt__jw_int(w, "pid", me->pid);
    ftrt__jw_int(w, "term", c->term);
    ftrt__jw_end(w);
}

static void summary_json(ftrt__jw *w, const ftrt__coord *c, const totals *t)
{
    ftrt__jw_int(w, "schema", 2);
    ftrt__jw_string(w, "status", t->ok ? "finished" : "failed");
    ftrt__jw_string(w, "error", t->ok ? NULL : ftrt_err_name(c->result));
    ftrt__jw_int(w, "steps", t->steps);
    ftrt__jw_double(w, "wall_s", t->wall);
    ftrt__jw_int(w, "trainers", c->N0);
    ftrt__jw_int(w, "trainers_at_end", c->N);
    ftrt__jw_int(w, "shrinks", c->nshrinks);
    ftrt__jw_int(w, "folds", c->nfolds);
    ftrt__jw_int(w, "spares", t->nspares);
    ftrt__jw_int(w, "epoch", c->epoch);
    coordinator_json(w, c);
    ftrt__jw_double(w, "allocated_rank_s", t->allocated);
    ftrt__jw_double(w, "kept_step_rank_s", t->kept);
    ftrt__jw_double(w, "rework_rank_s", t->rework_s);
    ftrt__jw_double(w, "lost_partial_step_rank_s", t->lost_s);
    ftrt__jw_double(w, "goodput", t->allocated > 0 ? t->kept / t->allocated : 0);
}

/* Checkpoints: committed, failed, skipped (staging busy under FTRT_CKPT_POLICY=skip),
 * abandoned (totals_of), and stall_s, the trainers' time blocked in checkpoint calls. */
static void checkpoints_json(ftrt__jw *w, const ftrt__coord *c, int abandoned, double stall_s)
{
    ftrt__jw_object(w, "checkpoints");
    ftrt__jw_int(w, "committed", c->ncommitted);
    ftrt__jw_int(w, "failed", c->nckpt_failed);
    ftrt__jw_int(w, "skipped", c->nckpt_skipped);
    ftrt__jw_int(w, "abandoned", abandoned);
    ftrt__jw_double(w, "stall_rank_s", stall_s);
    ftrt__jw_int(w, "last_committed_step", c->last_committed);
    ftrt__jw_end(w);
}

/* A failure's who and detection: ranks, pid, kind, hosts, role, MTTD. */
static void failure_detection_json(ftrt__jw *w, const ftrt__coord *c, const ftrt__incident *x,
                                   const measured *m)
{
    opt_int(w, "world_rank", x->world_rank >= 0, x->world_rank);
    ftrt__jw_int(w, "logical_rank", x->logical_rank);
    ftrt__jw_int(w, "pid", x->pid);
    ftrt__jw_string(w, "kind", ftrt__failure_kind_name(x->kind));
    ftrt__jw_string(w, "host", x->world_rank >= 0 ? c->r[x->world_rank].host : NULL);
    ftrt__jw_string(w, "cause", x->coord_lost  ? "coordinator_lost"
                                : x->host_lost ? "host_lost"
                                               : "rank");
    ftrt__jw_string(w, "spare_host",
                    x->spare_world_rank >= 0 ? c->r[x->spare_world_rank].host : NULL);
    ftrt__jw_string(w, "role", x->coord_lost  ? "coordinator"
                               : x->was_spare ? "spare"
                                              : "trainer");
    ftrt__jw_double(w, "detected_at", x->t_detect_wall);
    ftrt__jw_double(w, "mttd_s", m->mttd);
    ftrt__jw_string(w, "mttd_source", m->inj > 0 ? "fault_log" : "bound");
    ftrt__jw_double(w, "mttd_bound_s", m->bound);
}

/* A failure's recovery: MTTR, spare, epoch, resume step, rework, where the state came from,
 * MTTR's phases. */
static void failure_recovery_json(ftrt__jw *w, const ftrt__incident *x, const measured *m)
{
    int resumed = x->resume_step >= 0;
    ftrt__jw_bool(w, "recovered", x->recovered);
    opt_double(w, "mttr_s", x->recovered, m->mttr);
    opt_int(w, "spare_world_rank", x->spare_world_rank >= 0, x->spare_world_rank);
    ftrt__jw_bool(w, "shrunk", x->shrunk);
    opt_int(w, "folded_onto_world_rank", x->folded_onto >= 0, x->folded_onto);
    ftrt__jw_int(w, "epoch", x->epoch);
    opt_int(w, "resume_step", resumed, x->resume_step);
    ftrt__jw_int(w, "rework_steps", x->rework_steps);
    ftrt__jw_string(w, "state_from", state_from_name(x));
    ftrt__jw_string(w, "replica_miss", resumed ? ftrt__replica_miss_name(x->replica_miss) : NULL);
    if (has_phases(x)) {
        ftrt__jw_object(w, "phases_ms");
        for (int k = 0; k < PH_N; k++) ftrt__jw_double(w, phase_names[k], m->phase[k] * 1e3);
        ftrt__jw_end(w);
    } else {
        ftrt__jw_null(w, "phases_ms");
    }
    opt_double(w, "phases_unaccounted_ms", has_phases(x), m->unaccounted * 1e3);
    opt_int(w, "phases_world_rank", has_phases(x), x->phase_w);
}

/* A silent data corruption's details (null for other kinds of failure). */
static void failure_sdc_json(ftrt__jw *w, const ftrt__incident *x)
{
    if (x->kind != FK_SDC) {
        ftrt__jw_null(w, "sdc");
        return;
    }
    ftrt__jw_object(w, "sdc");
    ftrt__jw_int(w, "step_detected", x->sdc_step);
    opt_int(w, "last_agreed_step", x->sdc_agreed_step >= 0, x->sdc_agreed_step);
    ftrt__jw_bool(w, "majority", x->sdc_majority);
    opt_int(w, "rollback_checkpoint_step", x->sdc_ckpt >= 0, x->sdc_ckpt);
    ftrt__jw_int(w, "uncommitted_checkpoints", x->sdc_uncommitted);
    ftrt__jw_end(w);
}

/* One element of "failures". */
static void failure_json(ftrt__jw *w, const ftrt__coord *c, const ftrt__incident *x,
                         const measured *m)
{
    ftrt__jw_object(w, NULL);
    failure_detection_json(w, c, x, m);
    failure_recovery_json(w, x, m);
    failure_sdc_json(w, x);
    ftrt__jw_end(w);
}

/* Silent data corruption check: how often replicas were compared and what the fingerprints
 * cost the trainers (their seconds over the seconds of their kept steps). */
static void sdc_json(ftrt__jw *w, const ftrt__coord *c, const totals *t)
{
    ftrt__jw_object(w, "sdc");
    ftrt__jw_int(w, "every", c->a->cfg->sdc_every);
    ftrt__jw_int(w, "checks", c->sdc_checks);
    ftrt__jw_int(w, "fingerprints", c->sdc_nfp);
    opt_int(w, "last_agreed_step", c->sdc_agreed_step >= 0, c->sdc_agreed_step);
    ftrt__jw_double(w, "fingerprint_rank_s", c->sdc_fp_s);
    ftrt__jw_double(w, "fingerprint_share_of_steps", t->kept > 0 ? c->sdc_fp_s / t->kept : 0);
    ftrt__jw_string(w, "vote_at_end", ftrt__sdc_vote_kind(c));
    ftrt__jw_end(w);
}

static void stragglers_json(ftrt__jw *w, const ftrt__coord *c)
{
    ftrt__jw_array(w, "stragglers");
    for (int x = 1; x < c->Wused; x++) {
        const ftrt__crank *r = &c->r[x];
        if (r->straggler_max <= 0) continue;
        ftrt__jw_object(w, NULL);
        ftrt__jw_int(w, "world_rank", x);
        ftrt__jw_int(w, "logical_rank", r->logical);
        ftrt__jw_int(w, "step", r->straggler_step);
        ftrt__jw_double(w, "ratio_to_median", r->straggler_max);
        ftrt__jw_end(w);
    }
    ftrt__jw_end(w);
}

static void control_plane_json(ftrt__jw *w, const ftrt__coord *c)
{
    ftrt__jw_object(w, "control_plane");
    ftrt__jw_int(w, "rejected_connections", c->rejected_connections);
    ftrt__jw_int(w, "protocol_errors", c->protocol_errors);
    ftrt__jw_int(w, "collective_hang_reports", c->stall_reports);
    ftrt__jw_int(w, "joins", c->njoined);
    ftrt__jw_int(w, "join_refused", c->join_refused);
    ftrt__jw_end(w);
}

/* ---- the human summary (stdout), in the same order ---- */

static void header_text(const ftrt__coord *c, const totals *t)
{
    printf("ftrt report: job %s%s%s after %lld steps, %d trainers + %d spare(s), wall %.3f s\n",
           t->ok ? "finished" : "FAILED", t->ok ? "" : ": ", t->ok ? "" : ftrt_err_name(c->result),
           (long long)t->steps, c->N0, t->nspares, t->wall);
    if (c->nshrinks || c->nfolds)
        printf("  no spare left: shrunk %d time(s), folded %d time(s) (FTRT_NO_SPARE): %d "
               "trainer(s) at the end\n", c->nshrinks, c->nfolds, c->N);
    if (c->self != 0)
        printf("  coordinator: world rank %d (%s, pid %d), term %d: a standby that took over\n",
               c->self, c->r[c->self].host, c->r[c->self].pid, c->term);
    int drains = ftrt__drains(c);
    printf("  failures: %d%s", c->ninc - drains, drains ? "" : "\n");
    if (drains) printf(", drains: %d\n", drains);
}

/* One element of "drains" (docs/report-schema.md): who left, for which spare, the time to
 * move (the drain's request to every member back in the loop: no detection), resume step,
 * rework and where the state came from; and its line of the summary. */
static void drain_json(ftrt__jw *w, const ftrt__coord *c, const ftrt__incident *x, int i)
{
    int resumed = x->resume_step >= 0;
    double move = x->recovered ? x->t_resumed - x->t_detect : -1;
    ftrt__jw_object(w, NULL);
    ftrt__jw_int(w, "world_rank", x->world_rank);
    ftrt__jw_int(w, "logical_rank", x->logical_rank);
    ftrt__jw_int(w, "pid", x->pid);
    ftrt__jw_string(w, "host", c->r[x->world_rank].host);
    ftrt__jw_string(w, "role", x->was_spare ? "spare" : "trainer");
    ftrt__jw_double(w, "requested_at", x->t_detect_wall);
    opt_int(w, "spare_world_rank", x->spare_world_rank >= 0, x->spare_world_rank);
    ftrt__jw_string(w, "spare_host",
                    x->spare_world_rank >= 0 ? c->r[x->spare_world_rank].host : NULL);
    ftrt__jw_bool(w, "shrunk", x->shrunk);
    opt_int(w, "folded_onto_world_rank", x->folded_onto >= 0, x->folded_onto);
    ftrt__jw_bool(w, "moved", x->recovered);
    ftrt__jw_bool(w, "withdrawn", x->withdrawn);
    opt_double(w, "time_to_move_s", x->recovered, move);
    ftrt__jw_int(w, "epoch", x->epoch);
    opt_int(w, "resume_step", resumed, x->resume_step);
    ftrt__jw_int(w, "rework_steps", x->rework_steps);
    ftrt__jw_string(w, "state_from", state_from_name(x));
    ftrt__jw_end(w);
    if (x->was_spare)
        printf("    drain %d: hot spare world rank %d (%s, pid %d) left the pool\n", i + 1,
               x->world_rank, c->r[x->world_rank].host, x->pid);
    else if (x->withdrawn)
        printf("    drain %d: logical rank %d (world rank %d, %s, pid %d) withdrawn: the job's "
               "loop ended before the drain's step boundary; the rank stayed, nothing moved\n",
               i + 1, x->logical_rank, x->world_rank, c->r[x->world_rank].host, x->pid);
    else if (x->spare_world_rank < 0)
        printf("    drain %d: logical rank %d (world rank %d, %s, pid %d) left with no hot spare "
               "(%s) %s%.1f ms, resumed at step %lld, rework %lld steps\n", i + 1,
               x->logical_rank, x->world_rank, c->r[x->world_rank].host, x->pid,
               x->shrunk ? "the job shrank" : "its data folded", x->recovered ? "in " : "(not done) ",
               x->recovered ? move * 1e3 : 0.0, (long long)x->resume_step,
               (long long)x->rework_steps);
    else
        printf("    drain %d: logical rank %d (world rank %d, %s, pid %d) moved to hot spare "
               "world rank %d %s%.1f ms, resumed at step %lld, rework %lld steps\n", i + 1,
               x->logical_rank, x->world_rank, c->r[x->world_rank].host, x->pid,
               x->spare_world_rank, x->recovered ? "in " : "(not done) ",
               x->recovered ? move * 1e3 : 0.0, (long long)x->resume_step,
               (long long)x->rework_steps);
}

static void drains_report(ftrt__jw *w, const ftrt__coord *c)
{
    ftrt__jw_array(w, "drains");
    for (int i = 0, k = 0; i < c->ninc; i++)
        if (c->inc[i].kind == FK_DRAIN) drain_json(w, c, &c->inc[i], k++);
    ftrt__jw_end(w);
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
    else if (x->recovered && (x->shrunk || x->folded_onto >= 0)) {
        char how[64];
        if (x->shrunk) snprintf(how, sizeof how, "the job shrank");
        else snprintf(how, sizeof how, "its data folded onto world rank %d", x->folded_onto);
        printf("    #%d logical rank %d (world rank %d, pid %d): %s, MTTD %.1f ms (%s), MTTR "
               "%.1f ms, no hot spare: %s, resumed at step %lld, rework %lld steps\n", i + 1,
               x->logical_rank, x->world_rank, x->pid, kind, m->mttd * 1e3, src, m->mttr * 1e3,
               how, (long long)x->resume_step, (long long)x->rework_steps);
    }
    else if (x->recovered)
        printf("    #%d logical rank %d (world rank %d, pid %d): %s, MTTD %.1f ms (%s), MTTR "
               "%.1f ms, hot spare world rank %d, resumed at step %lld (state from %s), "
               "rework %lld steps\n",
               i + 1, x->logical_rank, x->world_rank, x->pid, kind, m->mttd * 1e3, src,
               m->mttr * 1e3, x->spare_world_rank, (long long)x->resume_step,
               x->state_from == FTRT__FROM_REPLICA      ? "partner replicas in memory"
               : x->state_from == FTRT__FROM_ERASURE    ? "erasure groups in memory"
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
    if (every > 0 && c->N < 3)
        printf("  silent data corruption vote at the end: %s (%d trainer(s))\n",
               ftrt__sdc_vote_kind(c), c->N);
}

static void stragglers_text(const ftrt__coord *c)
{
    for (int w = 1; w < c->Wused; w++) {
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
    if (c->njoined || c->join_refused)
        printf("  joins: %d process(es) joined as hot spares, %d join(s) refused\n", c->njoined,
               c->join_refused);
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

/* The report could not be written (rc): said in the log, and an older report at its path (a
 * previous job's, or a previous launch's) removed, so that none is taken for this job's. */
static void report_failed(const char *path, int rc)
{
    struct stat st; /* (a regular file only: never /dev/null or a FIFO given as the path) */
    int stale = stat(path, &st) == 0 && S_ISREG(st.st_mode) && unlink(path) == 0;
    ftrt_log_error("cannot write the report %s: %s; no report of this job%s (its outcome is in "
                   "the summary above and in its exit status)", path, strerror(-rc),
                   stale ? ", and the older report there removed" : "");
}

int ftrt__report_write(ftrt__coord *c)
{
    const char *path = c->a->cfg->report_file;
    totals t;
    totals_of(c, &t);
    ftrt__jw w; /* path "": the text only (every write below is a no-op) */
    ftrt__jw_open(&w, path);
    ftrt__jw_object(&w, NULL);
    summary_json(&w, c, &t);
    checkpoints_json(&w, c, t.ck_abandoned, t.ck_stall);
    header_text(c, &t);
    ftrt__jw_array(&w, "failures");
    for (int i = 0, k = 0; i < c->ninc; i++) {
        if (c->inc[i].kind == FK_DRAIN) continue; /* (under "drains") */
        measured m = measure(c, &c->inc[i]); /* reads the fault log: once per failure */
        failure_json(&w, c, &c->inc[i], &m);
        failure_text(c, &c->inc[i], k++, &m);
        phases_text(&c->inc[i], &m);
    }
    ftrt__jw_end(&w);
    drains_report(&w, c);
    ftrt__membership_json(&w, c);
    sdc_json(&w, c, &t);
    sdc_text(c, &t);
    stragglers_json(&w, c);
    stragglers_text(c);
    control_plane_json(&w, c);
    ftrt__jw_int(&w, "rework_steps", t.rework_steps);
    closing_text(c, &t);
    ftrt__ledger_report(c, &w);
    ftrt__jw_end(&w);
    fflush(stdout);
    int rc = ftrt__jw_close(&w);
    if (rc) report_failed(path, rc);
    return rc;
}

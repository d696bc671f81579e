/*
 * drain.c - drains (docs/detection-and-recovery.md "Drain"): a planned move of a rank out of
 * the job, asked for ahead of a node's maintenance or reclamation, which is not a failure.
 *
 * A request comes through the control directory (`<status file>.control/`, written by
 * tools/ftrt-ctl): "rank W" or "host H". A trainer's logical rank goes to a hot spare in a new
 * epoch entered at one step boundary, the same step count for every trainer, picked ahead of
 * them all (pick_boundary; the FAILURE's boundary flag and step; the trainer side is
 * runtime/drain.c): every trainer stops after that step, the drained one included, the
 * recovery resumes there with the state from the members that stay (replicated regions) or
 * from the partner replicas refreshed at the boundary (sharded ones: a collective, hence the
 * same step for all), and the drained process leaves with FTRT_EDRAINED. Nothing is detected,
 * nothing is redone. A trainer already past the boundary when the epoch was announced waits in
 * its next step's collective for the others: once every trainer that has not reported is that
 * far (or after drain_wait_s), the epoch is made urgent, a plain FAILURE, and that partial
 * step is abandoned. A hot spare that is drained just leaves the pool. The drained
 * process counts among those that leave without MPI_Finalize (as a failed one): at the end
 * nobody calls it. The incident is of kind FK_DRAIN: the report lists it under "drains" with
 * its time to move, the ledger does not count it as a failure.
 *
 * With no hot spare left a trainer's drain follows the no-spare policy (FTRT_NO_SPARE): under
 * shrink or fold its logical rank leaves the membership at the same step boundary (its data
 * skipped or folded onto a survivor), under stop it is refused (the rank keeps training). A
 * drain of the coordinator's host is refused, so is one while the job is finishing, and a
 * malformed request. A drain whose trainers end their loops before its step boundary (a job
 * that did not give its total steps) is withdrawn on their first goodbye
 * (ftrt__drain_withdraw): the membership saved before its epoch is put back and the job ends
 * as it would have without it. Each request
 * gets one line of result beside it (`<request>.result`: "accepted: ..." or "refused: ...").
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/knobs.h"
#include "base/log.h"
#include "base/sigterm.h"
#include "runtime/coordinator/coord.h"

/* How often the control directory is read, seconds. */
#define CONTROL_POLL_S 1.0
/* A request file's largest useful size, bytes. */
#define REQUEST_MAX 512

enum { DRAIN_DONE = 0, DRAIN_REFUSED = 1, DRAIN_LATER = 2 };

/* World rank w leaves the job: out of the membership as a failed rank is (its process will
 * not call MPI_Finalize), but marked drained, with an incident of kind FK_DRAIN. */
static ftrt__incident *mark_drained(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    ftrt__rank_set_role(c, w, FTRT__ROLE_FAILED);
    c->nfailed++;
    c->maybe_done = 1;
    c->status_dirty |= 2;
    r->drained = 1;
    ftrt__incident *i = ftrt__incident_add(c, w, FK_DRAIN);
    double wall = ftrt__wallclock();
    r->t_fail_wall = wall; /* (its slot of the ledger ends here) */
    if (i) {
        i->t_fail_wall = wall;
        i->t_last_heard = i->t_detect;
        i->steps_at_failure = -1; /* (rework: what the survivors had done and redo) */
    }
    return i;
}

/* Hot spare w leaves the pool; told the job is over for it (SHUTDOWN, value 1: it does not
 * call MPI_Finalize). */
static int drain_spare(ftrt__coord *c, int w, char *why, size_t n)
{
    if (w == c->sb_w) ftrt__standby_dismiss(c, "it is drained");
    ftrt__incident *i = mark_drained(c, w);
    if (i) i->was_spare = 1;
    ftrt__epoch_msg m = {.epoch = c->epoch, .value = 1};
    ftrt__coord_send(c, w, FTRT__MSG_SHUTDOWN, &m, sizeof m);
    snprintf(why, n, "hot spare world rank %d leaves the pool; %d spare(s) left", w,
             ftrt__live_spares(c));
    return DRAIN_DONE;
}

/* The step time a drain's margin is sized with, the shorter of two: the trainers' median over
 * the last progress window (0 before the first is measured, in a job's first seconds; too long
 * while it still holds the slow first steps), and half the time since the job started running
 * (the trainers' welcome, not ftrt_init's start-up) per step done (that time holds the
 * application's set-up and the slow first steps too, so a step may be shorter). A step too
 * long leaves a margin of too few steps: every trainer may pass the boundary before the
 * announcement arrives, each stops at its own next step, and a collective at the boundary
 * cannot match. 0 when nothing is known. */
static double step_estimate(const ftrt__coord *c, int64_t most)
{
    double est = most > 0 && c->t_running > 0
                     ? (ftrt__now() - c->t_running) / (double)most / 2.0 : 0;
    double med = c->median_step_s;
    return med > 0 && (est <= 0 || med < est) ? med : est;
}

/* The drain's step boundary, as steps done, and how long to wait for it: ahead of every
 * trainer's last heartbeat (the members' and the drained one's) by what a trainer may have
 * done since (two heartbeat periods and 100 ms for the announcement to arrive, in steps of
 * step_estimate) plus 2, so that no trainer has passed it when the announcement arrives and
 * all of them stop after the same step (at most the job's total steps, where known).
 * O(N + W). */
static void pick_boundary(ftrt__coord *c, int drained)
{
    int64_t most = c->r[drained].steps_done, total = 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (!r->promoting && r->steps_done > most) most = r->steps_done;
    }
    for (int w = 1; w < c->Wused; w++)
        if (c->r[w].total_steps > total) total = c->r[w].total_steps;
    int64_t ahead = 2;
    double step = step_estimate(c, most);
    if (step > 0) {
        double k = ceil((2.0 * c->hb_ms / 1000.0 + 0.1) / step); /* (a heartbeat may be a period
                                                                  old, and late under load) */
        ahead += k < 1000 ? (int64_t)k : 1000;
    }
    c->drain_step = most + ahead;
    if (ftrt__knobs.drain_step > 0) { /* test knob */
        c->drain_step = ftrt__knobs.drain_step > most ? ftrt__knobs.drain_step : most + 1;
        ftrt_log_warn("a drain's step boundary after %lld steps (FTRT_TEST_DRAIN_STEP)",
                      (long long)c->drain_step);
    }
    if (total > 0 && c->drain_step > total) c->drain_step = total > most ? total : most + 1;
    c->drain_wait_s = 2.0 * (double)(c->drain_step - most + 5) * step; /* (slower steps) */
    if (c->drain_wait_s < 2.0) c->drain_wait_s = 2.0;
    ftrt_log_info("epoch %d: the drain's step boundary is after %lld steps (the trainers' "
                  "newest heartbeat: %lld done; a step %s %.1f ms)", c->epoch + 1,
                  (long long)c->drain_step, (long long)most,
                  step == c->median_step_s ? "takes" : "may take as little as", step * 1e3);
}

/* Trainer w hands its logical rank to a hot spare at the drain's step boundary. */
static int drain_trainer(ftrt__coord *c, int w, char *why, size_t n)
{
    ftrt__crank *r = &c->r[w];
    int joining = c->phase == PH_COLLECT && c->epoch_soft; /* a drain's epoch not planned yet */
    if (c->phase != PH_RUNNING && !joining) return DRAIN_LATER; /* (after this recovery) */
    if (ftrt__job_finishing(c)) {
        snprintf(why, n, "the job is finishing");
        return DRAIN_REFUSED;
    }
    int spare = ftrt__pick_spare(c, w), l = r->logical;
    if (spare < 0 && (c->a->cfg->no_spare == FTRT_NO_SPARE_STOP || c->N < 2)) {
        snprintf(why, n, "no hot spare is left: world rank %d keeps training%s", w,
                 c->N < 2 ? " (the last trainer)" : " (FTRT_NO_SPARE=stop)");
        return DRAIN_REFUSED;
    }
    if (spare < 0 && c->a->cfg->no_spare == FTRT_NO_SPARE_FOLD &&
        ftrt__fold_target(c, l, c->a->cfg->fold_max) < 0) {
        snprintf(why, n, "no hot spare is left and no other trainer has room for world rank %d's "
                 "data ranks (FTRT_FOLD_MAX=%d): it keeps training", w, c->a->cfg->fold_max);
        return DRAIN_REFUSED;
    }
    if (!joining) { /* (for a withdraw: the map before the epoch it opens, and what arrives) */
        ftrt__members_save(c, c->epoch + 1);
        c->nheld_sd = 0;
    }
    ftrt__incident *inc = mark_drained(c, w);
    if (spare >= 0) ftrt__promote_spare(c, l, spare, FTRT__MEMBER_DRAIN, inc);
    else ftrt__no_spare_remove(c, w, inc);
    if (!joining) {
        c->epoch_soft = 1;
        c->drain_t = ftrt__now();
        c->drain_first_report = 0;
        c->drain_urgent = 0;
        pick_boundary(c, w); /* (before the FAILURE can go out: ftrt__epoch_open) */
        ftrt__epoch_open(c, ftrt__wallclock());
    }
    r->drain_epoch = c->epoch;
    ftrt__drain_msg m = {.epoch = c->epoch, .value = c->epoch_soft,
                         .boundary_step = c->drain_step};
    ftrt__coord_send(c, w, FTRT__MSG_DRAIN, &m, sizeof m);
    if (spare >= 0)
        snprintf(why, n, "world rank %d (logical rank %d) moves to hot spare world rank %d (%s) "
                 "in epoch %d", w, l, spare, c->r[spare].host, c->epoch);
    else if (inc && inc->folded_onto >= 0)
        snprintf(why, n, "world rank %d (logical rank %d) leaves with no hot spare left: its "
                 "data folds onto world rank %d in epoch %d", w, l, inc->folded_onto, c->epoch);
    else
        snprintf(why, n, "world rank %d (logical rank %d) leaves with no hot spare left: the job "
                 "shrinks to %d trainer(s) in epoch %d", w, l, c->N, c->epoch);
    return DRAIN_DONE;
}

int ftrt__drain_rank(ftrt__coord *c, int w, char *why, size_t n)
{
    if (c->phase == PH_INIT) return DRAIN_LATER;
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) {
        snprintf(why, n, "the job is over");
        return DRAIN_REFUSED;
    }
    if (w < 1 || w >= c->Wused) {
        snprintf(why, n, w == 0 ? "world rank 0 is the coordinator" :
                 "no world rank %d in this job (world size %d)", w, c->Wused);
        return DRAIN_REFUSED;
    }
    if (w == c->self) {
        snprintf(why, n, "world rank %d is the coordinator", w);
        return DRAIN_REFUSED;
    }
    const ftrt__crank *r = &c->r[w];
    if (r->role == FTRT__ROLE_FAILED) {
        snprintf(why, n, "world rank %d has already %s", w, r->drained ? "been drained" : "failed");
        return DRAIN_REFUSED;
    }
    if (r->role == FTRT__ROLE_SPARE) return drain_spare(c, w, why, n);
    if (r->promoting) return DRAIN_LATER; /* (a spare being promoted: once it is a member) */
    return drain_trainer(c, w, why, n);
}

/* Every rank of host `host` (trainers first, then spares), in one epoch; refused as a whole
 * when the spares elsewhere are fewer than its trainers (under FTRT_NO_SPARE=stop; under
 * shrink or fold when no trainer would be left elsewhere). */
static int drain_host(ftrt__coord *c, const char *host, char *why, size_t n)
{
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) {
        snprintf(why, n, "the job is over");
        return DRAIN_REFUSED;
    }
    if (c->phase != PH_RUNNING) return DRAIN_LATER;
    if (!strcmp(host, c->r[c->self].host)) {
        snprintf(why, n, "host %s holds the coordinator (world rank %d)", host, c->self);
        return DRAIN_REFUSED;
    }
    int trainers = 0, ranks = 0, spares_elsewhere = 0;
    for (int w = 1; w < c->Wused; w++) {
        const ftrt__crank *r = &c->r[w];
        int here = !strcmp(r->host, host);
        if (r->role == FTRT__ROLE_FAILED) continue;
        ranks += here;
        trainers += here && r->role == FTRT__ROLE_TRAINER;
        spares_elsewhere += !here && r->role == FTRT__ROLE_SPARE;
    }
    if (!ranks) {
        snprintf(why, n, "no live rank on host %s", host);
        return DRAIN_REFUSED;
    }
    /* (with too few spares, under shrink or fold the rest leave with nobody in their place:
     * some trainer must stay elsewhere) */
    if (spares_elsewhere < trainers &&
        (c->a->cfg->no_spare == FTRT_NO_SPARE_STOP || trainers >= c->N)) {
        snprintf(why, n, "host %s has %d trainer(s) and only %d hot spare(s) are elsewhere%s",
                 host, trainers, spares_elsewhere,
                 c->a->cfg->no_spare == FTRT_NO_SPARE_STOP ? "" : ", and no trainer elsewhere");
        return DRAIN_REFUSED;
    }
    char one[256];
    for (int pass = 0; pass < 2; pass++)
        for (int w = 1; w < c->Wused; w++)
            if (!strcmp(c->r[w].host, host) &&
                c->r[w].role == (pass ? FTRT__ROLE_SPARE : FTRT__ROLE_TRAINER))
                ftrt__drain_rank(c, w, one, sizeof one);
    snprintf(why, n, "host %s: %d rank(s) leave, %d trainer(s) move to hot spares in epoch %d",
             host, ranks, trainers, c->epoch);
    return DRAIN_DONE;
}

/* ---- the withdraw: the job's end came first --------------------------------------------- */

/* Whether the BYE of world rank w (a member, or a trainer drained in this epoch) says the
 * trainers' loop ended before the drain's step boundary: the epoch still soft, nobody at the
 * boundary, no failure joined, a clean goodbye below the boundary. */
static int loop_ended_first(const ftrt__coord *c, int w, const ftrt__bye *bye)
{
    const ftrt__crank *r = &c->r[w];
    if (c->phase != PH_COLLECT || !c->epoch_soft || c->drain_urgent || c->nreports > 0)
        return 0;
    if (r->role != FTRT__ROLE_TRAINER && !(r->drained && r->drain_epoch == c->epoch)) return 0;
    if (r->promoting) return 0;
    /* (a map saved for this epoch as well: ftrt__members_withdraw checks it) */
    return bye->exit_code >= 0 && bye->steps_done < c->drain_step;
}

int ftrt__drain_withdraw(ftrt__coord *c, int w, const ftrt__bye *bye)
{
    if (!loop_ended_first(c, w, bye) || ftrt__members_withdraw(c)) return 0;
    int n = 0;
    for (int i = 0; i < c->ninc; i++) { /* the drained trainers: members again */
        ftrt__incident *x = &c->inc[i];
        ftrt__crank *r = x->world_rank > 0 ? &c->r[x->world_rank] : NULL;
        if (x->kind != FK_DRAIN || x->was_spare || x->recovered || !r || !r->drained ||
            r->drain_epoch != c->epoch)
            continue;
        x->withdrawn = 1;
        x->epoch = c->epoch;
        x->spare_world_rank = x->folded_onto = -1; /* (nobody took its place) */
        x->shrunk = 0;
        r->drained = 0;
        r->t_fail_wall = 0; /* (its slot of the ledger runs to the end again) */
        ftrt__rank_set_role(c, x->world_rank, FTRT__ROLE_TRAINER);
        c->nfailed--;
        n++;
    }
    for (int x = 1; x < c->Wused; x++) /* the promoted spares: back in the pool */
        if (c->r[x].promoting) {
            c->r[x].promoting = 0;
            c->r[x].logical = -1;
            ftrt__rank_set_role(c, x, FTRT__ROLE_SPARE);
        }
    c->npromoting = 0;
    c->epoch_soft = 0;
    c->failure_due = 0;
    c->epoch--; /* (never entered: every trainer is still in the one before) */
    c->phase = PH_RUNNING;
    c->maybe_done = 1;
    c->status_dirty |= 2;
    ftrt__rankidx_rebuild(c);
    ftrt__standby_sync(c);
    ftrt_log_warn("epoch %d: %d drain(s) withdrawn: world rank %d ended its loop after %lld "
                  "steps, before the drain's step boundary (%lld); nothing moved; epoch %d goes "
                  "on", c->epoch + 1, n, w, (long long)bye->steps_done,
                  (long long)c->drain_step, c->epoch);
    for (int i = 0; i < c->nheld_sd; i++) /* (their checkpoints decided now) */
        if (c->held_sd[i].cm.epoch == c->epoch)
            ftrt__commit_shard_done(c, c->held_sd[i].w, &c->held_sd[i].cm);
    c->nheld_sd = 0;
    return 1;
}

void ftrt__drain_hold_shard_done(ftrt__coord *c, int w, const ftrt__ckpt_msg *cm)
{
    if (c->phase != PH_COLLECT || !c->epoch_soft || cm->epoch != c->epoch - 1 ||
        c->saved_epoch != c->epoch)
        return;
    if (c->nheld_sd == (int)(sizeof c->held_sd / sizeof c->held_sd[0])) {
        ftrt_log_warn("checkpoint of step %lld: its SHARD_DONE from world rank %d is not kept "
                      "during the drain's epoch (%d kept already)", (long long)cm->step, w,
                      c->nheld_sd);
        return;
    }
    c->held_sd[c->nheld_sd++] = (struct ftrt__held_sd){.w = w, .cm = *cm};
}

int ftrt__drains(const ftrt__coord *c)
{
    int n = 0;
    for (int i = 0; i < c->ninc; i++) n += c->inc[i].kind == FK_DRAIN;
    return n;
}

/* ---- the urgent epoch ---------------------------------------------------------------------- */

void ftrt__drain_harden(ftrt__coord *c, const char *reason)
{
    if (!c->epoch_soft) return;
    c->epoch_soft = 0;
    if (c->phase == PH_COLLECT) {
        ftrt_log_info("epoch %d: the drain's epoch is entered now (%s)", c->epoch, reason);
        ftrt__epoch_failure_urgent(c);
    }
    ftrt__drain_msg m = {.epoch = c->epoch, .value = 0};
    for (int w = 1; w < c->Wused; w++) /* (O(W), once per drain) */
        if (c->r[w].drained && c->r[w].drain_epoch == c->epoch && ftrt__rank_connected(c, w))
            ftrt__coord_send(c, w, FTRT__MSG_DRAIN, &m, sizeof m);
}

/* 1 when every trainer of the drain's epoch that has not reported (and every drained one
 * still connected) has done as many steps as the most advanced REPORT: it is past the
 * boundary, waiting in the next step's collective for those that stopped. O(N + W). */
static int all_past_boundary(ftrt__coord *c)
{
    int64_t most = -1;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (!r->promoting && r->reported_epoch == c->epoch && r->report_steps > most)
            most = r->report_steps;
    }
    if (most < 0) return 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (!r->promoting && r->reported_epoch != c->epoch && r->steps_done < most) return 0;
    }
    for (int w = 1; w < c->Wused; w++) {
        const ftrt__crank *r = &c->r[w];
        if (r->drained && r->drain_epoch == c->epoch && ftrt__rank_connected(c, w) &&
            r->steps_done < most)
            return 0;
    }
    return 1;
}

/* The drain's epoch is made urgent when it no longer waits for a step boundary (above), the
 * plan is out (a drained trainer still there leaves now), or nobody reached a boundary in
 * time. */
static void harden_due(ftrt__coord *c, double now)
{
    if (!c->epoch_soft) return;
    if (c->drain_urgent) {
        c->drain_urgent = 0;
        ftrt__drain_harden(c, "a rank failed");
        return;
    }
    if (c->phase != PH_COLLECT) {
        ftrt__drain_harden(c, "the plan is out");
        return;
    }
    if (now - c->drain_t > c->drain_wait_s) {
        ftrt__drain_harden(c, "no step boundary in time");
        return;
    }
    if (c->nreports > 0 && !c->drain_first_report) c->drain_first_report = now;
    if (c->drain_first_report > 0 && now - c->drain_first_report > 0.25 && all_past_boundary(c))
        ftrt__drain_harden(c, "a trainer is already in the next step");
}

/* ---- the control directory ----------------------------------------------------------------- */

/* Parses "rank W" or "host H" (one line; H at most FTRT__HOST_MAX - 1 bytes). Returns 0, or -1
 * with why set. */
static int parse_request(const char *text, int *w, char *host, char *why, size_t n)
{
    char word[16], arg[FTRT__HOST_MAX + 1], extra[2];
    int k = sscanf(text, "%15s %64s %1s", word, arg, extra);
    if (k == 2 && !strcmp(word, "rank")) {
        char *end;
        long v = strtol(arg, &end, 10);
        if (*end == 0 && v >= 0 && v < FTRT__MAX_WORLD) {
            *w = (int)v;
            return 0;
        }
    }
    if (k == 2 && !strcmp(word, "host") && strlen(arg) < FTRT__HOST_MAX) {
        memcpy(host, arg, strlen(arg) + 1); /* (fits: checked just above) */
        *w = -1;
        return 0;
    }
    snprintf(why, n, "malformed request (expected \"rank <world rank>\" or \"host <name>\")");
    return -1;
}

/* Writes `line` to <dir>/<name>.result (replacing it atomically). */
static void write_result(const char *dir, const char *name, const char *line)
{
    char path[1600], tmp[1700];
    snprintf(path, sizeof path, "%s/%s.result", dir, name);
    FILE *f = ftrt__atomic_open(path, tmp, sizeof tmp);
    if (!f) return;
    fprintf(f, "%s\n", line);
    if (ftrt__atomic_finish(f, tmp, path, 0))
        ftrt_log_warn("cannot write the drain result %s", path);
}

/* One request file: read, carried out (or left for later), answered, removed. */
static void take_request(ftrt__coord *c, const char *dir, const char *name)
{
    char path[1600], text[REQUEST_MAX + 1], why[512] = "", line[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t got = read(fd, text, REQUEST_MAX);
    close(fd);
    text[got > 0 ? got : 0] = 0;
    int w = -1, rc = DRAIN_REFUSED;
    char host[FTRT__HOST_MAX] = "";
    if (!parse_request(text, &w, host, why, sizeof why))
        rc = w >= 0 ? ftrt__drain_rank(c, w, why, sizeof why) : drain_host(c, host, why, sizeof why);
    if (rc == DRAIN_LATER) return; /* (read again at the next poll) */
    snprintf(line, sizeof line, "%s: %s", rc == DRAIN_DONE ? "accepted" : "refused", why);
    if (rc == DRAIN_DONE) ftrt_log_warn("drain (%s): %s", name, why);
    else ftrt_log_warn("drain (%s) refused: %s", name, why);
    write_result(dir, name, line);
    unlink(path);
}

static void control_poll(ftrt__coord *c)
{
    char dir[1200];
    if (snprintf(dir, sizeof dir, "%s.control", c->a->status_file) >= (int)sizeof dir) return;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return; /* (nobody asked: no directory) */
    DIR *d = opendir(dir);
    if (!d) return; /* (none: nobody asked for anything) */
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "drain-", 6) && !strchr(e->d_name, '.'))
            take_request(c, dir, e->d_name);
    closedir(d);
}

/* A rank's own request (SIGTERM), carried out now or left for later. */
static void try_asked(ftrt__coord *c, int w)
{
    char why[256];
    int rc = ftrt__drain_rank(c, w, why, sizeof why);
    if (rc == DRAIN_LATER) return;
    c->r[w].drain_asked = 0;
    c->ndrain_asked--;
    if (rc == DRAIN_DONE) ftrt_log_warn("drain (SIGTERM to world rank %d): %s", w, why);
    else ftrt_log_warn("drain (SIGTERM to world rank %d) refused: %s", w, why);
}

void ftrt__drain_asked(ftrt__coord *c, int w)
{
    if (c->r[w].drain_asked) return;
    c->r[w].drain_asked = 1;
    c->ndrain_asked++;
    try_asked(c, w);
}

/* FTRT_SIGTERM=drain: a SIGTERM to the coordinator's process ends the job (the launcher's
 * SIGTERM to the whole job keeps its meaning); counted from the loop's start, so that a
 * standby that took over after its own drain was asked for does not take that for it. */
static void sigterm_due(ftrt__coord *c)
{
    int n = ftrt__sigterm_count();
    if (!c->sigterm_init) {
        c->sigterm_init = 1;
        c->sigterm_seen = n;
    }
    if (n <= c->sigterm_seen) return;
    c->sigterm_seen = n;
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) return;
    ftrt__job_abort(c, FTRT_EABORT, "the coordinator received SIGTERM (FTRT_SIGTERM=drain): the "
                                    "whole job stops");
}

void ftrt__drain_periodic(ftrt__coord *c, double now)
{
    sigterm_due(c);
    harden_due(c, now);
    for (int w = 1; w < c->Wused && c->ndrain_asked > 0; w++) /* (O(W) only while one waits) */
        if (c->r[w].drain_asked) try_asked(c, w);
    if (now - c->control_polled < CONTROL_POLL_S) return;
    c->control_polled = now; /* (the deposed check reads a file: at this pace only) */
    if (c->deposed || c->claim_pending || ftrt__standby_deposed(c)) return;
    control_poll(c);
}

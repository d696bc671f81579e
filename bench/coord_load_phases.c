/*
 * coord_load_phases.c - the phases of bench/coord_load after the steady state (see
 * coord_load.c's header, steps 3 to 6): checkpoint commits (SHARD_DONE from every trainer,
 * timed to the COMMITs), the crash and silence trials of ranks and, with --per-host, of whole
 * hosts (a victim picked at random, timed to the survivors' FAILUREs and PLANs), and the job's
 * end (BYE from every trainer, timed to the coordinator's exit, its peak RSS and report size).
 * Each phase fills its part of the results (coord_load.h) and counts what went wrong in fails.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/proto.h"
#include "coord_load.h"

/* ---- victims and the job's state ---------------------------------------------------------- */

/* A trainer that is alive (with --per-host not the one its host agent's process is: that is
 * a host agent's loss, not a rank's), at random; -1 when none is. */
static int pick_rank(void)
{
    for (int tries = 0; tries < 100000; tries++) {
        int w = 1 + rand() % (W - 1);
        if (atomic_load(&agents[w].role) == FTRT__ROLE_TRAINER &&
            atomic_load(&agents[w].state) == ST_ALIVE &&
            (agents[w].host < 0 || hosts[agents[w].host].first_w != w))
            return w;
    }
    return -1;
}

/* The first rank of a host whose ranks are all live trainers, at random; -1 when none is. */
static int pick_host(void)
{
    for (int tries = 0; tries < 100000 && nhosts > 0; tries++) {
        hostsim *hs = &hosts[rand() % nhosts];
        int ok = atomic_load(&hs->state) == ST_ALIVE && (!opt_kill_relays || atomic_load(&hs->is_relay));
        for (int i = 0; i < hs->n && ok; i++) {
            agent *a = &agents[hs->first_w + i];
            ok = atomic_load(&a->role) == FTRT__ROLE_TRAINER && atomic_load(&a->state) == ST_ALIVE;
        }
        if (ok) return hs->first_w;
    }
    return -1;
}

/* Waits up to timeout_s for the status file at path to say the job is running (the next trial
 * must not find a recovery in flight: a failure then aborts the job). Returns 1 once it does,
 * 0 on timeout or a job that ended. */
static int status_running(const char *path, double timeout_s)
{
    double deadline = ftrt__now() + timeout_s;
    do {
        char head[256] = "";
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(head, 1, sizeof head - 1, f);
            head[n] = 0;
            fclose(f);
        }
        if (strstr(head, "\"job\": \"running\"")) return 1;
        if (strstr(head, "\"job\": \"failed\"") || strstr(head, "\"job\": \"finished\"")) return 0;
        usleep(20000);
    } while (ftrt__now() < deadline);
    return 0;
}

/* ---- the phases --------------------------------------------------------------------------- */

void commit_phase(results *r)
{
    r->cm_first = calloc((size_t)opt_commits + 1, sizeof(double));
    r->cm_last = calloc((size_t)opt_commits + 1, sizeof(double));
    r->ncm = 0;
    for (int c = 0; c < opt_commits; c++) {
        ev_reset();
        post(CMD_SHARD, 0, 1000 * (c + 1));
        if (!ev_wait(EV_SHARD_SENT, N, 30) || !ev_wait(EV_COMMIT, N, 60)) {
            fprintf(stderr, "coord_load: commit %d: %d SHARD_DONE sent, %d COMMIT received\n", c,
                    ev_get(EV_SHARD_SENT, NULL, NULL), ev_get(EV_COMMIT, NULL, NULL));
            r->fails++;
            continue;
        }
        double sl, cf, cl;
        ev_get(EV_SHARD_SENT, NULL, &sl);
        ev_get(EV_COMMIT, &cf, &cl);
        r->cm_first[r->ncm] = cf - sl;
        r->cm_last[r->ncm++] = cl - sl;
        usleep(300000);
    }
    if (commit_result_bad) {
        fprintf(stderr, "coord_load: a COMMIT carried result %lld\n", (long long)commit_result_bad);
        r->fails++;
    }
}

/* One crash or silence trial: what it is, its victim, and what it saw (monotonic s). */
typedef struct trial {
    int tr, silent, host_trial, host_silent, victim;
    sched_snap s0, s1;  /* before the command, and at the first FAILURE */
    double ff, fl;      /* the first and last FAILURE received */
    double fk;          /* the first FAILURE in a survivor's socket (0: unknown) */
    double t_ref;       /* close time, or the last message sent */
    double t_exp;       /* t_ref, or the expiry of the victim's timeout for a silence */
} trial;

/* Picks trial t's victim and kills or silences it. Returns 0, or -1 when no victim is left. */
static int trial_start(trial *t, int *epoch)
{
    int nrank_trials = opt_kills + opt_silents;
    t->silent = t->tr >= opt_kills && t->tr < nrank_trials;
    t->host_trial = t->tr >= nrank_trials;
    t->host_silent = t->tr >= nrank_trials + opt_host_kills;
    t->victim = t->host_trial ? pick_host() : pick_rank();
    if (t->victim < 0) return -1;
    ev_reset();
    atomic_store(&plan_bytes, 0);
    pthread_mutex_lock(&ev_lock);
    expect_epoch = ++*epoch;
    pthread_mutex_unlock(&ev_lock);
    atomic_store(&trial_open, 1);
    sched_take(&t->s0);
    post(t->host_trial ? (t->host_silent ? CMD_SILENCE_HOST : CMD_KILL_HOST)
                       : (t->silent ? CMD_SILENCE : CMD_KILL),
         t->victim, 0);
    return 0;
}

/* Waits for trial t's FAILUREs: every trainer but the victims gets one (the spares do not; a
 * lost host's ranks cannot). Returns 0, or -1 when not every survivor got one. */
static int trial_failures(results *r, trial *t)
{
    int lost = t->host_trial ? hosts[agents[t->victim].host].n : 1;
    ev_wait(EV_FAILURE, 1, opt_timeout_ms / 1000.0 + 30);
    sched_take(&t->s1); /* (up to 0.5 ms after the first FAILURE) */
    int got = ev_wait(EV_FAILURE, N - lost, opt_timeout_ms / 1000.0 + 30);
    ev_get(EV_FAILURE, &t->ff, &t->fl);
    pthread_mutex_lock(&ev_lock);
    t->fk = failure_kts;
    pthread_mutex_unlock(&ev_lock);
    pthread_mutex_lock(&ev_lock);
    t->t_ref = trial_t_ref;
    pthread_mutex_unlock(&ev_lock);
    if (!got) {
        fprintf(stderr, "coord_load: trial %d: %d of %d FAILURE received\n", t->tr,
                ev_get(EV_FAILURE, NULL, NULL), N - lost);
        r->fails++;
        atomic_store(&trial_open, 0);
        return -1;
    }
    t->t_exp = t->t_ref + (t->silent || t->host_silent ? opt_timeout_ms / 1000.0 : 0);
    return 0;
}

/* --verbose: where crash trial t's time went: who was waiting for a CPU meanwhile. */
static void trial_verbose(const results *r, const trial *t)
{
    printf("crash %d: world rank %d lost at %.6f (wall), first FAILURE %.2f ms later "
           "(in a survivor's socket after %.2f ms, read %.2f ms after that); "
           "meanwhile the coordinator's loop ran %.2f ms and waited for a CPU %.2f "
           "ms, a generator thread waited for a CPU up to %.2f ms (from the command "
           "to the first FAILURE seen)\n",
           r->nk, t->victim, t->t_ref + (ftrt__wallclock() - ftrt__now()),
           (t->ff - t->t_ref) * 1e3, t->fk > 0 ? (t->fk - t->t_ref) * 1e3 : NAN,
           t->fk > 0 ? (t->ff - t->fk) * 1e3 : NAN, (t->s1.c_run - t->s0.c_run) * 1e3,
           (t->s1.c_wait - t->s0.c_wait) * 1e3, sched_worker_wait(&t->s0, &t->s1) * 1e3);
}

/* Trial t's detection figures: MTTD and fan-out of a crash, the delay of a silence's. */
static void trial_detection(results *r, const trial *t)
{
    if (t->host_trial) {
        /* (the PLAN goes out once every rank of the host was declared and replaced) */
    } else if (t->silent) {
        r->sil[r->ns++] = t->ff - t->t_exp;
    } else {
        r->mttd[r->nk] = t->ff - t->t_ref;
        r->fan[r->nk++] = t->fl - t->t_ref;
        if (opt_verbose) trial_verbose(r, t);
    }
}

/* Waits for trial t's PLAN at every member and their RESUMEDs; notes its figures. Returns 0,
 * or -1 when the PLAN did not reach them all. */
static int trial_plan(results *r, const trial *t)
{
    /* Every survivor REPORTs; the PLAN goes to N members (the spare included). */
    if (!ev_wait(EV_PLAN, N, 120) || !ev_wait(EV_RESUMED_SENT, N, 30)) {
        fprintf(stderr, "coord_load: trial %d: %d of %d PLAN received\n", t->tr,
                ev_get(EV_PLAN, NULL, NULL), N);
        r->fails++;
        atomic_store(&trial_open, 0);
        return -1;
    }
    double rl, pf, pl;
    ev_get(EV_REPORT_SENT, NULL, &rl);
    ev_get(EV_PLAN, &pf, &pl);
    if (t->host_trial && t->host_silent) {
        r->hq_first[r->nhq] = t->ff - t->t_exp;
        r->hq_plan[r->nhq++] = pf - t->t_exp;
    } else if (t->host_trial) {
        r->hk_first[r->nhk] = t->ff - t->t_exp;
        r->hk_plan[r->nhk++] = pf - t->t_exp;
    } else {
        r->plan_b[r->np] = (double)atomic_load(&plan_bytes);
        r->plan_f[r->np] = pf - rl;
        r->plan_l[r->np++] = pl - rl;
    }
    atomic_store(&trial_open, 0);
    return 0;
}

/* One trial, tr. Returns 0, or -1 to end the trials (no victim, or a trial not observed). */
static int run_trial(results *r, int tr, int *epoch, const char *status)
{
    trial t = {.tr = tr};
    if (trial_start(&t, epoch) || trial_failures(r, &t)) return -1;
    trial_detection(r, &t);
    if (trial_plan(r, &t)) return -1;
    usleep(500000); /* the coordinator takes the RESUMEDs and is back to running */
    if (!status_running(status, 60.0)) { /* (131,072 RESUMEDs take longer on 2 cores) */
        fprintf(stderr, "coord_load: trial %d: the coordinator is not back to running\n", tr);
        r->fails++;
        return -1;
    }
    return 0;
}

void trial_phase(results *r, const char *status)
{
    srand(opt_seed);
    int nrank_trials = opt_kills + opt_silents;
    int ntrial = nrank_trials + (opt_per_host > 0 ? opt_host_kills + opt_host_silents : 0);
    double **arrays[] = {&r->hk_first, &r->hk_plan, &r->hq_first, &r->hq_plan, &r->mttd,
                         &r->fan, &r->plan_f, &r->plan_l, &r->sil, &r->plan_b};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        *arrays[i] = calloc((size_t)ntrial + 1, sizeof(double));
    r->nhk = r->nhq = r->nk = r->ns = r->np = 0;
    int epoch = 0;
    for (int tr = 0; tr < ntrial; tr++)
        if (run_trial(r, tr, &epoch, status)) break;
}

/* Waits up to 120 s for the coordinator to exit: its exit time (monotonic s) in *t_exit (-1:
 * it did not), its status in *status_code, its peak RSS over its whole life in *hwm_exit. */
static void wait_exit(int *status_code, double *t_exit, double *hwm_exit)
{
    double t_bye_wait = ftrt__now();
    while (ftrt__now() - t_bye_wait < 120) {
        struct rusage ru; /* its peak RSS over its whole life, the report's writing included */
        pid_t p = wait4(coord_pid, status_code, WNOHANG, &ru);
        if (p == coord_pid) {
            *t_exit = ftrt__now();
            *hwm_exit = (double)ru.ru_maxrss / 1024.0;
            break;
        }
        usleep(1000);
    }
}

void end_phase(results *r, const char *report_path, const char *clog)
{
    r->rss_end = proc_mem_mib(coord_pid, "VmRSS");
    r->hwm = proc_mem_mib(coord_pid, "VmHWM");
    r->gap_all = 0;
    for (int i = 0; i < opt_threads; i++)
        if (workers[i].gap_max > r->gap_all) r->gap_all = workers[i].gap_max;
    /* BYE from every trainer; the coordinator writes the report and exits. */
    ev_reset();
    double cpu_before_end = proc_cpu_s(coord_pid);
    post(CMD_BYE, 0, 0);
    int status_code = -1;
    double t_exit = -1;
    r->hwm_exit = NAN;
    wait_exit(&status_code, &t_exit, &r->hwm_exit);
    struct stat rst;
    r->report_bytes = stat(report_path, &rst) == 0 ? (long long)rst.st_size : -1;
    double t_last_bye;
    ev_get(EV_BYE_SENT, NULL, &t_last_bye);
    r->end_s = t_exit > 0 ? t_exit - t_last_bye : NAN;
    (void)cpu_before_end;
    if (t_exit < 0) {
        fprintf(stderr, "coord_load: the coordinator did not exit\n");
        kill(coord_pid, SIGKILL);
        waitpid(coord_pid, NULL, 0);
        r->fails++;
    } else if (!WIFEXITED(status_code) || WEXITSTATUS(status_code) != 0) {
        fprintf(stderr, "coord_load: the coordinator ended with status 0x%x; the end of its log "
                        "(%s):\n", status_code, clog);
        char cmdl[800];
        snprintf(cmdl, sizeof cmdl, "tail -n 40 '%s' >&2", clog);
        if (system(cmdl) != 0) fprintf(stderr, "coord_load: cannot show %s\n", clog);
        r->fails++;
    }
    for (int i = 0; i < opt_threads; i++) atomic_store(&workers[i].stop, 1);
    for (int i = 0; i < opt_threads; i++) pthread_join(workers[i].th, NULL);
}

/*
 * coord_load_measure.c - what bench/coord_load measures and how it says it (see coord_load.c's
 * header for the scenario): readings of the coordinator's process (its CPU time and memory from
 * /proc, the run-queue waits of its loop thread and of the generator's workers from schedstat),
 * the loop-latency probe, the steady-state phase, and the report at the end: one human line per
 * phase and the "RESULT key=value ..." line that bench/coord_scale.py and
 * tests/python/test_project.py parse (its keys are an interface: keep them).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/proto.h"
#include "coord_load.h"

/* ---- the coordinator's process --------------------------------------------------------------- */

pid_t coord_pid;

/* User + system CPU seconds of process pid (/proc/<pid>/stat), or -1. */
double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long long ut = 0, st = 0;
    /* fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* VmRSS or VmHWM (name) of pid in MiB, or -1. */
double proc_mem_mib(pid_t pid, const char *name)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double v = -1;
    size_t l = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, l) && line[l] == ':') {
            v = atof(line + l + 1) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* Time on a CPU and time runnable but waiting for one (the run queue) of thread tid of process
 * pid, seconds (/proc/<pid>/task/<tid>/schedstat). Returns 0, or -1 when unreadable. */
static int schedstat(int pid, int tid, double *run, double *wait)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", pid, tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long r = 0, w = 0;
    int ok = fscanf(f, "%llu %llu", &r, &w) == 2;
    fclose(f);
    *run = r * 1e-9;
    *wait = w * 1e-9;
    return ok ? 0 : -1;
}

/* The coordinator's loop thread's and the workers' run and wait times (sched_snap): takes
 * one now. */
void sched_take(sched_snap *s)
{
    memset(s, 0, sizeof *s);
    schedstat(coord_pid, coord_pid, &s->c_run, &s->c_wait);
    for (int i = 0; i < opt_threads && i < 64; i++) {
        double r;
        schedstat(getpid(), atomic_load(&workers[i].tid), &r, &s->w_wait[i]);
    }
}

/* The largest run-queue wait of a worker between a and b, seconds. */
double sched_worker_wait(const sched_snap *a, const sched_snap *b)
{
    double m = 0;
    for (int i = 0; i < opt_threads && i < 64; i++)
        if (b->w_wait[i] - a->w_wait[i] > m) m = b->w_wait[i] - a->w_wait[i];
    return m;
}

/* ---- statistics ---------------------------------------------------------------------------- */

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The q-quantile (nearest rank) of v[0..n), sorted in place; NAN when n == 0. */
static double quant(double *v, int n, double q)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(q * n) - 1;
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
    return v[i];
}

/* One loop-latency probe: a connection that sends a HELLO with a wrong secret; the time until
 * the coordinator closes it, in seconds, or -1. */
static double probe(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    struct {
        ftrt__msghdr h;
        ftrt__hello hello;
    } m = {{FTRT__MAGIC, FTRT__MSG_HELLO, sizeof(ftrt__hello), 0}, {.secret = the_secret ^ 1,
                                                                   .world_rank = 1}};
    double t0 = ftrt__now();
    if (send(fd, &m, sizeof m, MSG_NOSIGNAL) != (ssize_t)sizeof m) {
        close(fd);
        return -1;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    double dt = -1;
    if (poll(&pf, 1, 5000) == 1) {
        char b[16];
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r <= 0) dt = ftrt__now() - t0;
    }
    close(fd);
    return dt;
}

/* Heartbeats per second the coordinator asked for: from the W - 1 ranks (its WELCOME's period
 * for W connections), or with --per-host one HOST_BEAT per host per period. */
static double hb_expected(int W)
{
    int links = opt_per_host > 0 ? nhosts + 1 : W;
    return (opt_per_host > 0 ? nhosts : W - 1) * 1000.0 /
           ftrt__heartbeat_period_ms(opt_hb_ms, opt_timeout_ms, links);
}

/* The loop-latency probes of the steady state: one every 50 ms for opt_steady seconds from
 * t0, their times in pr[0..*nprobe) (room for nprobe_max), failures counted in *probe_fail. */
static void probe_loop(int port, double t0, double *pr, int nprobe_max, int *nprobe,
                       int *probe_fail)
{
    double rss_max = 0;
    while (ftrt__now() - t0 < opt_steady) {
        double t1 = ftrt__now();
        double d = probe(port);
        if (d >= 0 && *nprobe < nprobe_max) pr[(*nprobe)++] = d;
        else if (d < 0) (*probe_fail)++;
        double r = proc_mem_mib(coord_pid, "VmRSS");
        if (r > rss_max) rss_max = r;
        double sl = 0.05 - (ftrt__now() - t1);
        if (sl > 0) usleep((useconds_t)(sl * 1e6));
    }
}

/* The workers' statistics over the steady state: heartbeats sent, the longest coordinator
 * silence, the latest heartbeat. */
static void steady_workers(results *r)
{
    r->hb1 = 0;
    r->gap_steady = 0;
    r->late_steady = 0;
    for (int i = 0; i < opt_threads; i++) {
        r->hb1 += atomic_load(&workers[i].hb_sent);
        if (workers[i].gap_max > r->gap_steady) r->gap_steady = workers[i].gap_max;
        if (workers[i].hb_late_max > r->late_steady) r->late_steady = workers[i].hb_late_max;
    }
}

void steady_phase(results *r, int port)
{
    usleep(2000000); /* warm-up: the first LEDGERs, the first median step time */
    for (int i = 0; i < opt_threads; i++) {
        workers[i].gap_max = 0;
        workers[i].hb_late_max = 0;
    }
    r->hb0 = 0;
    for (int i = 0; i < opt_threads; i++) r->hb0 += atomic_load(&workers[i].hb_sent);
    sched_snap ss0, ss1;
    sched_take(&ss0);
    double c0 = proc_cpu_s(coord_pid), s0 = self_cpu_s(), t0 = ftrt__now();
    int nprobe_max = (int)(opt_steady / 0.05) + 1, nprobe = 0, probe_fail = 0;
    double *pr = calloc((size_t)nprobe_max, sizeof *pr);
    probe_loop(port, t0, pr, nprobe_max, &nprobe, &probe_fail);
    double dt = r->dt = ftrt__now() - t0;
    r->cpu = (proc_cpu_s(coord_pid) - c0) / dt;
    r->gen_cpu = (self_cpu_s() - s0) / dt;
    sched_take(&ss1);
    r->runq = (ss1.c_wait - ss0.c_wait) / dt; /* the loop thread's wait for a CPU, s/s */
    steady_workers(r);
    r->rss_steady = proc_mem_mib(coord_pid, "VmRSS");
    r->p50 = quant(pr, nprobe, 0.5);
    r->p99 = quant(pr, nprobe, 0.99);
    r->pmax = nprobe ? pr[nprobe - 1] : NAN;
    printf("steady %.1f s: coordinator CPU %.3f of a core, RSS %.1f MiB; loop latency (probe) "
           "p50 %.2f ms p99 %.2f ms max %.2f ms (%d probes, %d failed); coordinator silence at "
           "the agents max %.0f ms; heartbeats sent %.0f/s (expected %.0f/s), sent late by up to "
           "%.1f ms; generator CPU %.2f cores; the coordinator's loop waited for a CPU %.1f ms a "
           "second\n",
           dt, r->cpu, r->rss_steady, r->p50 * 1e3, r->p99 * 1e3, r->pmax * 1e3, nprobe,
           probe_fail, r->gap_steady * 1e3, (r->hb1 - r->hb0) / dt, hb_expected(W),
           r->late_steady * 1e3, r->gen_cpu, r->runq * 1e3);
    free(pr);
}

/* The figures of the report: quantiles of the commits' and trials' times (each array sorted
 * in place), seconds; NAN where there was none. */
typedef struct figures {
    double cmf50, cml50, cmlmax, mttd50, mttd99, mttdmax, hk50, hkmax, hkp50, hkpmax, hq50, hqmax,
        hqpmax, fan50, fanmax, sil50, silmax, pf50, pl50, plmax, pb50;
} figures;

static figures figures_of(results *r)
{
    figures f;
    int ncm = r->ncm, nk = r->nk, nhk = r->nhk, nhq = r->nhq, ns = r->ns, np = r->np;
    f.cmf50 = quant(r->cm_first, ncm, 0.5);
    f.cml50 = quant(r->cm_last, ncm, 0.5);
    f.cmlmax = ncm ? r->cm_last[ncm - 1] : NAN;
    f.mttd50 = quant(r->mttd, nk, 0.5);
    f.mttd99 = quant(r->mttd, nk, 0.99);
    f.mttdmax = nk ? r->mttd[nk - 1] : NAN;
    f.hk50 = quant(r->hk_first, nhk, 0.5);
    f.hkmax = nhk ? r->hk_first[nhk - 1] : NAN;
    f.hkp50 = quant(r->hk_plan, nhk, 0.5);
    f.hkpmax = nhk ? r->hk_plan[nhk - 1] : NAN;
    f.hq50 = quant(r->hq_first, nhq, 0.5);
    f.hqmax = nhq ? r->hq_first[nhq - 1] : NAN;
    f.hqpmax = quant(r->hq_plan, nhq, 1.0);
    f.fan50 = quant(r->fan, nk, 0.5);
    f.fanmax = nk ? r->fan[nk - 1] : NAN;
    f.sil50 = quant(r->sil, ns, 0.5);
    f.silmax = ns ? r->sil[ns - 1] : NAN;
    f.pf50 = quant(r->plan_f, np, 0.5);
    f.pl50 = quant(r->plan_l, np, 0.5);
    f.plmax = np ? r->plan_l[np - 1] : NAN;
    f.pb50 = quant(r->plan_b, np, 0.5);
    return f;
}

/* The human lines of the commits, trials and the end. */
static void report_lines(const results *r, const figures *f, int fp)
{
    printf("commit (last SHARD_DONE -> COMMIT, %d): first p50 %.1f ms, last p50 %.1f ms max "
           "%.1f ms\n", r->ncm, f->cmf50 * 1e3, f->cml50 * 1e3, f->cmlmax * 1e3);
    printf("crash (close -> FAILURE, %d): first p50 %.2f ms max %.2f ms; last survivor p50 %.1f "
           "ms max %.1f ms\n", r->nk, f->mttd50 * 1e3, f->mttdmax * 1e3, f->fan50 * 1e3,
           f->fanmax * 1e3);
    printf("silence (timeout expiry -> FAILURE, %d): p50 %.2f ms max %.2f ms\n", r->ns,
           f->sil50 * 1e3, f->silmax * 1e3);
    if (opt_per_host > 0)
        printf("host lost (%d ranks per host agent; kill: close -> first FAILURE, %d: p50 %.2f ms "
               "max %.2f ms; -> PLAN with every rank of the host replaced p50 %.1f ms max %.1f ms; "
               "cut: timeout expiry -> first FAILURE, %d: p50 %.2f ms max %.2f ms, -> PLAN max "
               "%.1f ms)\n", opt_per_host, r->nhk, f->hk50 * 1e3, f->hkmax * 1e3, f->hkp50 * 1e3,
               f->hkpmax * 1e3, r->nhq, f->hq50 * 1e3, f->hqmax * 1e3, f->hqpmax * 1e3);
    printf("plan (last REPORT -> PLAN, %d): first p50 %.1f ms, last p50 %.1f ms max %.1f ms; "
           "PLAN bytes to all members per recovery p50 %.0f, largest message %lld\n",
           r->np, f->pf50 * 1e3, f->pl50 * 1e3, f->plmax * 1e3, f->pb50,
           (long long)atomic_load(&plan_msg_max));
    printf("false positives %d (connections closed %d, failures %d); aborts %d; sends that "
           "found a full socket %d; coordinator silence at the agents over the whole run max "
           "%.0f ms; RSS at the end %.1f MiB (peak %.1f); end (last BYE -> exit) %.2f s\n",
           fp, atomic_load(&unexpected_eof), atomic_load(&unexpected_failure),
           atomic_load(&aborts), atomic_load(&tx_blocked), r->gap_all * 1e3, r->rss_end, r->hwm,
           r->end_s);
    printf("report: peak RSS over the coordinator's life %.1f MiB (%.1f MiB above the peak "
           "before the last BYEs: the final ledgers and the report), report file %lld bytes\n",
           r->hwm_exit, r->hwm_exit - r->hwm, r->report_bytes);
}

/* The RESULT line (bench/coord_scale.py and tests/python/test_project.py parse its keys). */
static void result_line(const results *r, const figures *f, int fp)
{
    printf("RESULT n=%d spares=%d world=%d startup_s=%.3f cpu=%.4f gen_cpu=%.3f rss_mib=%.1f "
           "rss_end_mib=%.1f hwm_mib=%.1f probe_p50_ms=%.3f probe_p99_ms=%.3f probe_max_ms=%.3f "
           "gap_steady_ms=%.1f gap_all_ms=%.1f hb_rate=%.0f hb_expected=%.0f hb_late_ms=%.1f "
           "commit_first_ms=%.2f commit_last_ms=%.2f commit_max_ms=%.2f mttd_p50_ms=%.3f "
           "mttd_max_ms=%.3f fanout_p50_ms=%.2f fanout_max_ms=%.2f silent_p50_ms=%.2f "
           "silent_max_ms=%.2f plan_first_ms=%.2f plan_last_ms=%.2f plan_max_ms=%.2f "
           "plan_bytes=%.0f plan_msg_max=%lld "
           "false_pos=%d aborts=%d tx_blocked=%d end_s=%.3f kills=%d silents=%d commits=%d "
           "fails=%d per_host=%d hosts=%d mttd_p99_ms=%.3f hostkill_p50_ms=%.3f "
           "hostkill_max_ms=%.3f hostkill_plan_p50_ms=%.2f hostkill_plan_max_ms=%.2f "
           "hostcut_p50_ms=%.3f hostcut_max_ms=%.3f hostcut_plan_max_ms=%.2f runq_ms_per_s=%.2f "
           "hwm_exit_mib=%.1f report_rise_mib=%.1f report_bytes=%lld\n",
           N, opt_s, W, r->startup, r->cpu, r->gen_cpu, r->rss_steady, r->rss_end, r->hwm,
           r->p50 * 1e3, r->p99 * 1e3, r->pmax * 1e3, r->gap_steady * 1e3, r->gap_all * 1e3,
           (r->hb1 - r->hb0) / r->dt, hb_expected(W), r->late_steady * 1e3, f->cmf50 * 1e3,
           f->cml50 * 1e3, f->cmlmax * 1e3, f->mttd50 * 1e3, f->mttdmax * 1e3, f->fan50 * 1e3,
           f->fanmax * 1e3, f->sil50 * 1e3, f->silmax * 1e3, f->pf50 * 1e3, f->pl50 * 1e3,
           f->plmax * 1e3, f->pb50, (long long)atomic_load(&plan_msg_max), fp,
           atomic_load(&aborts), atomic_load(&tx_blocked), r->end_s, r->nk, r->ns, r->ncm,
           r->fails, opt_per_host, nhosts, f->mttd99 * 1e3, f->hk50 * 1e3, f->hkmax * 1e3,
           f->hkp50 * 1e3, f->hkpmax * 1e3, f->hq50 * 1e3, f->hqmax * 1e3, f->hqpmax * 1e3,
           r->runq * 1e3, r->hwm_exit, r->hwm_exit - r->hwm, r->report_bytes);
}

int report(results *r)
{
    figures f = figures_of(r);
    int fp = atomic_load(&unexpected_eof) + atomic_load(&unexpected_failure);
    report_lines(r, &f, fp);
    result_line(r, &f, fp);
    fflush(stdout);
    return fp;
}

/*
 * coord_load.c - load generator for the coordinator at scale (README "The coordinator at
 * scale"; bench/coord_scale.py runs it over several sizes).
 *
 * Starts the real coordinator (ftrt__coordinator_run, runtime/coordinator/coordinator.h) in a
 * forked child process, so that its CPU time (/proc/<pid>/stat) and memory (/proc/<pid>/status)
 * are its own, and drives it with N simulated trainers and S hot spares on loopback TCP that
 * speak ftrt's wire protocol (base/proto.h) as runtime/agent.c and runtime/timeline.c do: HELLO
 * with the job secret; from then on, every heartbeat period, a HEARTBEAT (steps, collective
 * waits, kept and compute seconds) and a LEDGER (the intervals of the steps finished since the
 * last one: compute then exposed communication, 2 per step), each its own send() as in a real
 * agent; a FINGERPRINT every --sdc-every steps; REPORT on FAILURE, RESUMED on PLAN, SHARD_DONE
 * for checkpoints, LEDGER(final) and BYE at the end. A few worker threads (epoll) carry the
 * agents; the main thread runs the scenario:
 *
 *   1. start-up: every agent connects and says hello; time until the last WELCOME;
 *   2. steady state (--steady s): the coordinator's CPU (fraction of one core), its RSS, the
 *      loop latency (a probe connection sends a HELLO with a wrong secret every 50 ms and
 *      times the coordinator's close: the time a message waits before the loop reads it, plus
 *      one accept), the gaps between the coordinator's messages at the agents (a real agent
 *      declares the coordinator dead after the heartbeat timeout of silence);
 *   3. checkpoint commits (--commits): every trainer sends SHARD_DONE for a step whose N shard
 *      files were written beforehand (tmpfs by default); time from the last SHARD_DONE sent to
 *      the first and the last COMMIT received (the coordinator checks every shard's header and
 *      writes the MANIFEST of N shards in between);
 *   4. crash trials (--kills): a trainer's connection is closed (what the kernel does when a
 *      process dies); time from the close to the first FAILURE received by a survivor (the
 *      coordinator's detection, MTTD) and to the last (the fan-out to N-1 survivors); then every
 *      survivor REPORTs and the time from the last REPORT sent to the first and last PLAN
 *      received is the plan's computation and fan-out;
 *   5. silence trials (--silents): a trainer stops sending (its socket stays open); time from
 *      the expiry of its timeout (its last message sent + the heartbeat timeout) to the first
 *      FAILURE received;
 *   6. the end: LEDGER(final) and BYE from every trainer; time until the coordinator exits
 *      (the report is written in between); the coordinator's peak RSS over its whole life
 *      (wait4's ru_maxrss), how far it rose above the peak before the last BYEs (the final
 *      ledgers and the report: issue 22, the report at 131,072 ranks) and the report's size.
 *
 * False positives: a connection the coordinator closed, or a FAILURE or PLAN, that no trial
 * caused. The generator's own lag (heartbeats sent late) is printed too: at the largest sizes
 * on a small machine the generator, not the coordinator, may be what falls behind.
 *
 * Output: human lines, then one "RESULT key=value ..." line (bench/coord_scale.py reads it).
 * Exit status 0 when the run completed with no false positive and every trial observed, 1
 * otherwise, 2 on a usage or setup error. Each of its two processes needs RLIMIT_NOFILE for about
 * N + S + 512 files, with --per-host 4 per simulated host + 512 (the host agent's connection,
 * its relay listener, both ends of its connection to its relay; 1 per host with --no-relays):
 * it raises the limit (beyond the hard limit with CAP_SYS_RESOURCE).
 *
 * Usage: coord_load [-n trainers] [-s spares] [--steady s] [--kills k] [--silents q]
 *                   [--commits c] [--threads t] [--hb-ms ms] [--timeout-ms ms] [--step-ms ms]
 *                   [--sdc-every k] [--dir path] [--seed x] [--keep]
 *                   [--per-host k [--host-kills h] [--host-silents g] [--no-relays]
 *                    [--relay-group g] [--kill-relays]] [--behind k] [--verbose]
 * --behind k: at each FAILURE the trainers of logical rank % k == 1 report one step fewer than
 * they have done, as survivors that had not finished the step in flight when the failure came
 * (a peers plan with about 1/k of the survivors behind its resume step: the PLAN's worst case
 * before FTRT__PROTO_PLAN 2, issue 22).
 * With --per-host the simulated host agents take part in the coordinator's relay groups
 * (runtime/coordinator/fanout.c) as runtime/hostrelay.c does: each listens and says RELAY_AT, a
 * member connects to its relay on RELAY_VIA, a relay sends a FANOUT's parts on to its members;
 * --no-relays offers none (every fan-out one MULTI per host, the coordinator unchanged),
 * --relay-group g forces groups of g host agents (the knob FTRT_TEST_RELAY_GROUP), and
 * --kill-relays makes the host trials kill or cut off relays (their members fall back to direct
 * fan-outs and are caught up).
 *
 * Files: this one parses the options and runs the steps above in order (main); the simulated
 * ranks and the worker threads are coord_load_gen.c, the simulated host agents and relay
 * groups coord_load_hosts.c, the commit and crash/silence trials and the end
 * coord_load_phases.c, the coordinator's readings, the steady state and the report
 * coord_load_measure.c; coord_load.h is what they share.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ftrt.h"
#include "base/clock.h"
#include "base/knobs.h"
#include "base/log.h"
#include "base/net.h"
#include "base/proto.h"
#include "checkpoint/shard.h"
#include "runtime/coordinator/coordinator.h"
#include "coord_load.h"

/* ---- settings ------------------------------------------------------------------------------ */

int opt_n = 256, opt_s = 8, opt_kills = 5, opt_silents = 3, opt_commits = 3;
int opt_threads = 2, opt_hb_ms = 100, opt_timeout_ms = 1000, opt_step_ms = 500;
int opt_sdc_every = 10, opt_keep = 0, opt_verbose = 0;
int opt_per_host = 0;               /* > 0: host agents, this many ranks per host */
int opt_no_relays = 0;              /* --no-relays: the host agents offer no relay */
int opt_relay_group = 0;            /* --relay-group G: FTRT_TEST_RELAY_GROUP's knob */
int opt_kill_relays = 0;            /* --kill-relays: host trials take relays' hosts */
int opt_behind = 0;                 /* --behind K: survivors of logical rank % K == 1
                                              report a step fewer (a failure mid-step) */
int opt_host_kills = 0, opt_host_silents = 0;
double opt_steady = 10.0;
unsigned opt_seed = 1;
char opt_dir[512];

static void usage(void)
{
    fprintf(stderr,
            "usage: coord_load [-n trainers] [-s spares] [--steady s] [--kills k] [--silents q]\n"
            "                  [--commits c] [--threads t] [--hb-ms ms] [--timeout-ms ms]\n"
            "                  [--step-ms ms] [--sdc-every k] [--dir path] [--seed x] [--keep]\n"
            "                  [--per-host k [--host-kills h] [--host-silents g] [--no-relays]\n"
            "                  [--relay-group g] [--kill-relays]] [--behind k]\n");
}

static int parse(int argc, char **argv)
{
    static const struct option lo[] = {
        {"steady", 1, 0, 'd'},     {"kills", 1, 0, 'k'},      {"silents", 1, 0, 'q'},
        {"commits", 1, 0, 'c'},    {"threads", 1, 0, 't'},    {"hb-ms", 1, 0, 'H'},
        {"timeout-ms", 1, 0, 'T'}, {"step-ms", 1, 0, 'S'},    {"sdc-every", 1, 0, 'F'},
        {"dir", 1, 0, 'D'},        {"seed", 1, 0, 'r'},       {"keep", 0, 0, 'K'},
        {"per-host", 1, 0, 'P'},   {"host-kills", 1, 0, 'X'}, {"host-silents", 1, 0, 'Y'},
        {"verbose", 0, 0, 'V'},    {"help", 0, 0, 'h'},       {"no-relays", 0, 0, 'R'},
        {"relay-group", 1, 0, 'G'}, {"kill-relays", 0, 0, 'L'}, {"behind", 1, 0, 'B'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "n:s:h", lo, NULL)) != -1) {
        switch (o) {
        case 'n': opt_n = atoi(optarg); break;
        case 's': opt_s = atoi(optarg); break;
        case 'd': opt_steady = atof(optarg); break;
        case 'k': opt_kills = atoi(optarg); break;
        case 'q': opt_silents = atoi(optarg); break;
        case 'c': opt_commits = atoi(optarg); break;
        case 't': opt_threads = atoi(optarg); break;
        case 'H': opt_hb_ms = atoi(optarg); break;
        case 'T': opt_timeout_ms = atoi(optarg); break;
        case 'S': opt_step_ms = atoi(optarg); break;
        case 'F': opt_sdc_every = atoi(optarg); break;
        case 'D': snprintf(opt_dir, sizeof opt_dir, "%s", optarg); break;
        case 'r': opt_seed = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'K': opt_keep = 1; break;
        case 'P': opt_per_host = atoi(optarg); break;
        case 'X': opt_host_kills = atoi(optarg); break;
        case 'Y': opt_host_silents = atoi(optarg); break;
        case 'V': opt_verbose = 1; break;
        case 'R': opt_no_relays = 1; break;
        case 'G': opt_relay_group = atoi(optarg); break;
        case 'L': opt_kill_relays = 1; break;
        case 'B': opt_behind = atoi(optarg); break;
        default: usage(); return -1;
        }
    }
    int host_trials = opt_per_host > 0 ? opt_host_kills + opt_host_silents : 0;
    if (opt_n < 2 || opt_s < opt_kills + opt_silents + host_trials * opt_per_host ||
        opt_threads < 1 || opt_threads > 64 || opt_hb_ms < 1 || opt_timeout_ms <= opt_hb_ms ||
        opt_step_ms < 1 || opt_steady < 0 || opt_per_host < 0 || opt_behind == 1 ||
        opt_behind < 0 ||
        (opt_per_host > 0 && opt_n < 2 * opt_per_host)) {
        fprintf(stderr, "coord_load: need n >= 2 (2 hosts' worth with --per-host), spares >= "
                        "kills + silents + per-host x (host-kills + host-silents), 1..64 threads, "
                        "timeout > heartbeat, --behind 0 or >= 2\n");
        return -1;
    }
#ifndef FTRT__PROTO_HOST_AGENTS
    if (opt_per_host > 0) {
        fprintf(stderr, "coord_load: --per-host: this build's protocol has no host agents\n");
        return -1;
    }
#endif
    return 0;
}

/* The hello of connection u: world rank u + 1's HELLO; with --per-host, host u's HOST_HELLO
 * (from its first rank's process) and the HELLO of each of its ranks, relayed. Returns 0 or -1. */
static int say_hello(int fd, int u)
{
    ftrt__hello h = {.secret = the_secret, .pid = 0};
    if (opt_per_host <= 0) {
        int w = u + 1;
        h.world_rank = w;
        if (w <= N) snprintf(h.host, sizeof h.host, "sim-%d", (w - 1) / 8);
        else snprintf(h.host, sizeof h.host, "spare-%d", w - N);
        return ftrt__msg_send(fd, FTRT__MSG_HELLO, &h, sizeof h) ? -1 : 0;
    }
#ifdef FTRT__PROTO_HOST_AGENTS
    hostsim *hs = &hosts[u];
    snprintf(h.host, sizeof h.host, "host-%d", u);
    h.world_rank = hs->first_w;
    if (ftrt__msg_send(fd, FTRT__MSG_HOST_HELLO, &h, sizeof h)) return -1;
    for (int i = 0; i < hs->n; i++) {
        ftrt__relay pre = {.world_rank = hs->first_w + i};
        h.world_rank = hs->first_w + i;
        if (ftrt__msg_send2(fd, FTRT__MSG_RELAY, &pre, sizeof pre, FTRT__MSG_HELLO, &h, sizeof h))
            return -1;
    }
    return 0;
#else
    return -1;
#endif
}

/* ---- the steps of main --------------------------------------------------------------------- */

/* The job's files (checkpoints: the shards of the commit trials, status file, report, the
 * coordinator's log), its configuration and the coordinator's address. */
typedef struct job {
    char dir[600], ckdir[700], status[700], report[700], clog[700];
    ftrt_config cfg;
    char addrs[FTRT__ADDRS_MAX];
    int port;
} job;

/* Each process (this one, the coordinator's) holds about W connections, or 4 per host (1
 * without relays: see the file's header): raises RLIMIT_NOFILE. Returns 0, or -1 (said). */
static int raise_nofile(void)
{
    struct rlimit cur;
    getrlimit(RLIMIT_NOFILE, &cur);
    rlim_t need = opt_per_host > 0 ? (rlim_t)(host_of(W - 1) + 1) * (opt_no_relays ? 1 : 4) + 64
                                   : (rlim_t)W + 64, want = need + 448;
    if (cur.rlim_cur < want) {
        struct rlimit rl = {want, cur.rlim_max > want ? cur.rlim_max : want};
        if (setrlimit(RLIMIT_NOFILE, &rl)) { /* without CAP_SYS_RESOURCE: up to the hard limit */
            rl.rlim_cur = rl.rlim_max = cur.rlim_max;
            if (cur.rlim_max < need || setrlimit(RLIMIT_NOFILE, &rl)) {
                fprintf(stderr, "coord_load: cannot raise RLIMIT_NOFILE to %llu (hard limit "
                        "%llu): %s\n", (unsigned long long)want,
                        (unsigned long long)cur.rlim_max, strerror(errno));
                return -1;
            }
        }
    }
    return 0;
}

/* The job's files (made under --dir, or /dev/shm) and the coordinator's configuration. */
static void job_files(job *j)
{
    if (opt_dir[0])
        snprintf(j->dir, sizeof j->dir, "%s", opt_dir);
    else
        snprintf(j->dir, sizeof j->dir, "/dev/shm/ftrt-coord-load.%d", (int)getpid());
    snprintf(j->ckdir, sizeof j->ckdir, "%s/ckpt", j->dir);
    snprintf(j->status, sizeof j->status, "%s/status.json", j->dir);
    snprintf(j->report, sizeof j->report, "%s/report.json", j->dir);
    snprintf(j->clog, sizeof j->clog, "%s/coordinator.log", j->dir);
    mkdir(j->dir, 0755);
    mkdir(j->ckdir, 0755);
    ftrt_config *cfg = &j->cfg;
    ftrt_config_init(cfg, sizeof *cfg);
    cfg->heartbeat_ms = opt_hb_ms;
    cfg->heartbeat_timeout_ms = opt_timeout_ms;
    cfg->init_timeout_ms = 600000;
    cfg->ckpt_keep = opt_commits + 2; /* no deletion during the run: commits are timed alone */
    cfg->progress = 0;
    cfg->sdc_every = opt_sdc_every;
    snprintf(cfg->ckpt_dir, sizeof cfg->ckpt_dir, "%s", j->ckdir);
    snprintf(cfg->status_file, sizeof cfg->status_file, "%s", j->status);
    snprintf(cfg->report_file, sizeof cfg->report_file, "%s", j->report);
    ftrt__log_level = cfg->log_level;
}

/* The N shard files of each commit trial, written beforehand. Returns 0, or -1 (said). */
static int write_shards(const job *j)
{
    double t = ftrt__now();
    char region_bytes[64] = "coord_load";
    ftrt__region reg = {.name = "w", .ptr = region_bytes, .bytes = sizeof region_bytes,
                        .kind = FTRT__KIND_SHARDED};
    for (int c = 0; c < opt_commits; c++)
        for (int r = 0; r < N; r++) {
            int rc = ftrt__shard_write(j->ckdir, 1000 * (c + 1), r, N, &reg, 1);
            if (rc) {
                fprintf(stderr, "coord_load: shard write failed: %s\n", strerror(-rc));
                return -1;
            }
        }
    if (opt_commits)
        printf("wrote %d x %d shards in %.1f s (%s)\n", opt_commits, N, ftrt__now() - t, j->ckdir);
    return 0;
}

/* The forked child: the coordinator, as world rank 0 runs it inside ftrt_init(), on listener
 * lfd, its output to the job's coordinator.log. Does not return. */
static void coordinator_child(job *j, int lfd)
{
    int lf = open(j->clog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (lf >= 0) {
        dup2(lf, 1);
        dup2(lf, 2);
        close(lf);
    }
    ftrt__log_rank = 0;
    ftrt__coord_args ca = {.cfg = &j->cfg, .world_size = W, .ntrainers = N,
                           .t_start = ftrt__now(), .t_start_wall = ftrt__wallclock(),
                           .status_file = j->status, .host = "coordhost", .addr = j->addrs,
                           .port = j->port,
#ifdef FTRT__PROTO_HOST_AGENTS
                           .mark_fd = -1
#endif
    };
    int rc = ftrt__coordinator_run(&ca, lfd, the_secret);
    fflush(NULL);
    _exit(rc == FTRT_DONE ? 0 : 1);
}

/* Listens on loopback, draws the job secret and forks the coordinator (coord_pid). Returns 0,
 * or -1. */
static int start_coordinator(job *j)
{
    j->port = 0;
    int lfd = ftrt__listen("127.0.0.1", j->addrs, sizeof j->addrs, &j->port);
    if (lfd < 0 || ftrt__random(&the_secret, sizeof the_secret)) {
        fprintf(stderr, "coord_load: cannot listen\n");
        return -1;
    }
    fflush(stdout);
#ifdef FTRT__PROTO_RELAYS
    ftrt__knobs.relay_group = opt_relay_group; /* (the coordinator's, in the child) */
#endif
    coord_pid = fork();
    if (coord_pid < 0) return -1;
    if (coord_pid == 0) coordinator_child(j, lfd);
    close(lfd);
    return 0;
}

/* The worker threads' state: epoll, command queue (not started yet). Returns 0, or -1. */
static int make_workers(void)
{
    agents = calloc((size_t)W, sizeof *agents);
    workers = calloc((size_t)opt_threads, sizeof *workers);
    if (!agents || !workers) return -1;
    for (int i = 0; i < opt_threads; i++) {
        worker *k = &workers[i];
        k->id = i;
        k->ep = epoll_create1(EPOLL_CLOEXEC);
        k->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        pthread_mutex_init(&k->lock, NULL);
        k->a = calloc((size_t)W, sizeof *k->a);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
        epoll_ctl(k->ep, EPOLL_CTL_ADD, k->evfd, &ev);
    }
    return 0;
}

/* The agents (world ranks 1 .. W - 1) and with --per-host their hosts, each given to its
 * worker. Returns 0, or -1. */
static int make_agents(void)
{
    nhosts = opt_per_host > 0 ? host_of(W - 1) + 1 : 0;
    hosts = calloc((size_t)(nhosts ? nhosts : 1), sizeof *hosts);
    if (!hosts) return -1;
    for (int i = 0; i < opt_threads; i++)
        workers[i].hs = calloc((size_t)(nhosts / opt_threads + 2), sizeof(hostsim *));
    for (int w = 1; w < W; w++) {
        agent *a = &agents[w];
        a->fd = -1;
        a->w = w;
        a->host = host_of(w);
        a->role = FTRT__ROLE_SPARE;
        a->logical = -1;
        worker *k = &workers[worker_of(w)];
        k->a[k->na++] = a;
        if (a->host < 0) {
            k->a[k->n++] = a; /* (the same slot: units are the agents) */
            continue;
        }
        hostsim *hs = &hosts[a->host];
        if (hs->n++ == 0) {
            hs->fd = -1;
            hs->h = a->host;
            hs->first_w = w;
            k->hs[k->n++] = hs;
        }
    }
    return 0;
}

/* Heartbeat phases spread over the period from t. */
static void spread_phases(double t)
{
    for (int i = 0; i < opt_threads; i++) {
        worker *k = &workers[i];
        for (int j = 0; j < k->n; j++) {
            double *next = opt_per_host ? &k->hs[j]->next_hb : &k->a[j]->next_hb;
            *next = t + hb_s * (1.0 + (double)j / k->n);
            if (opt_per_host) k->hs[j]->last_rx = t;
            else k->a[j]->last_rx = t;
        }
    }
}

/* Connects unit u (world rank u + 1, or host u with --per-host) to sa, says its hello and
 * hands it to its worker. Returns 0, or -1 (said; the coordinator killed). */
static int connect_unit(const struct sockaddr_in *sa, int u, double t_connect0)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) ||
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) ||
        connect(fd, (const struct sockaddr *)sa, sizeof *sa) || say_hello(fd, u)
#ifdef FTRT__PROTO_RELAYS
        || (opt_per_host && relay_listen(fd, u))
#endif
    ) {
        fprintf(stderr, "coord_load: connect of %s %d failed: %s\n",
                opt_per_host ? "host" : "world rank", opt_per_host ? u : u + 1, strerror(errno));
        kill(coord_pid, SIGKILL);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int w0 = opt_per_host ? hosts[u].first_w : u + 1;
    worker *k = &workers[worker_of(w0)];
    struct epoll_event ev = {.events = EPOLLIN,
                             .data.u32 = opt_per_host ? HOST_ID(u) : (uint32_t)w0};
    if (opt_per_host) hosts[u].fd = fd;
    else agents[w0].fd = fd;
    epoll_ctl(k->ep, EPOLL_CTL_ADD, fd, &ev);
#ifdef FTRT__PROTO_RELAYS
    if (opt_per_host && hosts[u].lfd >= 0) {
        struct epoll_event lev = {.events = EPOLLIN, .data.u32 = LIS_ID(u)};
        epoll_ctl(k->ep, EPOLL_CTL_ADD, hosts[u].lfd, &lev);
    }
#endif
    for (int i = 0; i < (opt_per_host ? hosts[u].n : 1); i++)
        atomic_store(&agents[w0 + i].up, 1);
    int w1 = w0 + (opt_per_host ? hosts[u].n : 1) - 1; /* (every 4,096 ranks) */
    if (w1 / 4096 != (w0 - 1) / 4096)
        fprintf(stderr, "coord_load: %d connected after %.2f s\n", w1, ftrt__now() - t_connect0);
    /* (The coordinator accepts while the caller's loop runs; a full backlog slows connect().) */
    return 0;
}

/* Start-up: starts the workers, connects every unit to the coordinator on port and waits for
 * every WELCOME; prints the start-up line. Returns 0, 1 when not every rank was welcomed, 2
 * when a connect failed (the coordinator killed in both cases). */
static int start_up(int port, results *r)
{
    double t_connect0 = ftrt__now();
    spread_phases(t_connect0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < opt_threads; i++) pthread_create(&workers[i].th, NULL, worker_main, &workers[i]);
    int units = opt_per_host ? nhosts : W - 1;
    for (int u = 0; u < units; u++)
        if (connect_unit(&sa, u, t_connect0)) return 2;
    int ok = ev_wait(EV_WELCOME, W - 1, 600.0);
    double tw;
    ev_get(EV_WELCOME, NULL, &tw);
    r->startup = tw - t_connect0;
    printf("N=%d trainers + %d spares (world %d), %d worker threads, heartbeat %d ms, timeout %d "
           "ms, step %d ms: start-up (connect + hello of all, until the last WELCOME) %.2f s\n",
           N, opt_s, W, opt_threads, opt_hb_ms, opt_timeout_ms, opt_step_ms, r->startup);
    if (!ok) {
        fprintf(stderr, "coord_load: not every rank was welcomed\n");
        kill(coord_pid, SIGKILL);
        return 1;
    }
    return 0;
}

/* The job starts: every agent's steps count from now (heartbeats in phase order, spread over
 * the period); the workers measure gaps from now on. */
static void start_job(void)
{
    t_job0 = ftrt__now();
    t_job0_wall = ftrt__wallclock();
    for (int i = 0; i < opt_threads; i++) {
        worker *k = &workers[i];
        pthread_mutex_lock(&k->lock); /* (the worker reads them once job_started is set) */
        for (int j = 0; j < k->na; j++) {
            agent *a = k->a[j];
            a->t_base = t_job0;
            a->t_wall_base = t_job0_wall;
        }
        pthread_mutex_unlock(&k->lock);
    }
    atomic_store(&job_started, 1);
    for (int i = 0; i < opt_threads; i++) atomic_store(&workers[i].measure_gaps, 1);
}

/* Frees the results' arrays, the agents', hosts' and workers' state (the workers stopped). */
static void free_all(results *r)
{
    double *arrays[] = {r->cm_first, r->cm_last, r->mttd, r->fan, r->plan_f, r->plan_l,
                        r->plan_b, r->sil, r->hk_first, r->hk_plan, r->hq_first, r->hq_plan};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) free(arrays[i]);
    for (int w = 1; w < W; w++) {
        if (agents[w].fd >= 0) close(agents[w].fd);
        free(agents[w].rx);
        free(agents[w].tx);
    }
    for (int h = 0; h < nhosts; h++) {
        if (hosts[h].fd >= 0) close(hosts[h].fd);
        free(hosts[h].rx);
        free(hosts[h].tx);
#ifdef FTRT__PROTO_RELAYS
        if (hosts[h].lfd >= 0) close(hosts[h].lfd);
        if (hosts[h].via_fd >= 0) close(hosts[h].via_fd);
        for (int i = 0; i < hosts[h].npeer; i++)
            if (hosts[h].peer[i].fd >= 0) close(hosts[h].peer[i].fd);
        free(hosts[h].vrx);
        free(hosts[h].peer);
#endif
    }
    free(hosts);
    for (int i = 0; i < opt_threads; i++) {
        close(workers[i].ep);
        close(workers[i].evfd);
        free(workers[i].hs);
        free(workers[i].beat);
        free(workers[i].a);
        free(workers[i].buf);
        pthread_mutex_destroy(&workers[i].lock);
    }
    free(workers);
    free(agents);
}

/* Removes the job's files unless --keep or --dir. */
static void remove_files(const job *j)
{
    if (!opt_keep && !opt_dir[0]) {
        char cmdl[800];
        snprintf(cmdl, sizeof cmdl, "rm -rf '%s'", j->dir);
        if (system(cmdl) != 0) fprintf(stderr, "coord_load: could not remove %s\n", j->dir);
    }
}

/* Exit status 0 when the run completed with no false positive and every trial observed, 1
 * otherwise, 2 on a usage or setup error (see the file's header). */
int main(int argc, char **argv)
{
    if (parse(argc, argv)) return 2;
    N = opt_n;
    W = 1 + opt_n + opt_s;
    step_s = opt_step_ms / 1000.0;
    hb_s = opt_hb_ms / 1000.0;
    signal(SIGPIPE, SIG_IGN);
    job j;
    if (raise_nofile()) return 2;
    job_files(&j);
    if (write_shards(&j) || start_coordinator(&j)) return 2;
    if (make_workers() || make_agents()) return 2;
    results r = {0};
    int rc = start_up(j.port, &r);
    if (rc) return rc;
    start_job();
    steady_phase(&r, j.port);
    commit_phase(&r);
    trial_phase(&r, j.status);
    end_phase(&r, j.report, j.clog);
    int fp = report(&r);
    remove_files(&j);
    int complete = r.nk == opt_kills && r.ns == opt_silents && r.ncm == opt_commits &&
                   (opt_per_host <= 0 || (r.nhk == opt_host_kills && r.nhq == opt_host_silents));
    free_all(&r);
    return r.fails == 0 && fp == 0 && atomic_load(&aborts) == 0 && complete ? 0 : 1;
}

/*
 * helpers.h - what the unit test programs share (liburing's test/helpers.h is the model):
 * exit codes, scratch directories, deterministic data, and fakes of the ports the runtime
 * hands to the engines below it (base/ports.h), so that checkpoint/ and comm/ are tested
 * without MPI init tricks or a hand-assembled ftrt_ctx.
 */
#ifndef FTRT_TEST_HELPERS_H
#define FTRT_TEST_HELPERS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/ports.h"
#include "base/proto.h"

struct ftrt__ckpt_engine;

/* Exit codes of a test program (ctest: SKIP_RETURN_CODE 77). */
enum { T_EXIT_PASS = 0, T_EXIT_FAIL = 1, T_EXIT_SKIP = 77 };

/* Makes a fresh directory "<FTRT_TEST_TMP or /tmp>/<tag>-XXXXXX" into buf[cap]. Returns 0 or
 * -errno. */
int t_tmpdir(char *buf, size_t cap, const char *tag);
/* Removes path and everything under it (no error when it is missing). Returns 0 or -1. */
int t_rmtree(const char *path);
/* 1 when the path printf(fmt, ...) names exists, else 0. */
int t_exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Number of paths matching the glob(3) pattern printf(fmt, ...). */
int t_glob_count(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Fills n bytes at p with a deterministic pseudo-random pattern of `seed` (xorshift64*). */
void t_fill(void *p, size_t n, uint64_t seed);

/* ---- a fake host (base/ports.h ftrt__host) ---- */

enum { T_HOST_MAXMSG = 256, T_HOST_PAYLOAD = 64 };

typedef struct t_msg {
    uint32_t type, len;
    unsigned char payload[T_HOST_PAYLOAD]; /* the first T_HOST_PAYLOAD bytes */
} t_msg;

typedef struct t_host {
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;  /* broadcast on every message */
    t_msg msgs[T_HOST_MAXMSG];
    int nmsgs;
    int send_rc;          /* what send returns (0: accepted) */
    int marks[16];        /* marks per ledger kind (index kind + 1; FTRT__HOST_APP at 0) */
    int last_mark;
    int wait_begins, wait_ends, wait_recovers; /* brackets, and ends with FTRT_ERECOVER */
    /* called (without lock) after a message is recorded, e.g. a fake coordinator's queue */
    void (*on_send)(void *arg, uint32_t type, const void *payload, uint32_t len);
    void *on_send_arg;
} t_host;

/* Initializes h (no messages, send returns 0) and returns the ftrt__host that reports to it. */
ftrt__host t_host_init(t_host *h);
void t_host_destroy(t_host *h);
/* Messages of `type` recorded so far. */
int t_host_count(t_host *h, uint32_t type);
/* Copies the i-th message of `type` into *out; returns 1, or 0 when there is none. */
int t_host_get(t_host *h, uint32_t type, int i, t_msg *out);

/* ---- the epoch watch ---- */

/* A watch at epoch 0, nothing pending, not fatal. */
void t_watch_init(ftrt__watch *w);
/* What the agent thread does on a FAILURE message: announces `epoch`. */
void t_watch_announce(ftrt__watch *w, int epoch);

/* ---- a fake coordinator of the checkpoint engine ---- */

enum { T_COORD_MAX = 64 };

/* A thread of its own (as the agent is) that takes each SHARD_DONE the engine sends through a
 * t_host, commits that step with ftrt__ckpt_commit(dir, step, 1, keep) when the shard was
 * written (result 0), and hands the decision to ftrt__ckpt_on_commit(). Records every
 * SHARD_DONE (done[], at most T_COORD_MAX). */
typedef struct t_coord {
    struct ftrt__ckpt_engine *e;
    const char *dir;      /* the checkpoint directory (not copied: must outlive the coordinator) */
    int keep;             /* retention passed to the commit */
    pthread_t thr;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;
    int stop;
    int auto_commit;      /* 1 (the default): queue each SHARD_DONE for a commit; 0: record only */
    ftrt__ckpt_msg queue[T_COORD_MAX];
    int qhead, qtail;
    ftrt__ckpt_msg done[T_COORD_MAX];
    int ndone;
} t_coord;

/* Starts c for engine e, made with the host of h (h's on_send is taken). Returns 0 or the
 * pthread_create error. */
int t_coord_start(t_coord *c, t_host *h, struct ftrt__ckpt_engine *e, const char *dir, int keep);
/* Stops and joins the thread (before the engine is freed, as ftrt_finalize() stops the agent
 * first). The engine may still send to c until t_coord_destroy(). */
void t_coord_stop(t_coord *c);
/* After the engine is freed: releases the lock and condition. */
void t_coord_destroy(t_coord *c);
/* Turns the commits of later SHARD_DONEs on or off. */
void t_coord_auto_commit(t_coord *c, int on);
/* SHARD_DONEs recorded so far, and the i-th of them (i < that count). */
int t_coord_ndone(t_coord *c);
ftrt__ckpt_msg t_coord_done(t_coord *c, int i);

/* ---- the real coordinator in a forked child ---- */

/* Runs the real coordinator (ftrt__coordinator_run) on listener lfd (addrs:port, job secret
 * `secret`) for a world of W processes, N of them trainers, on host "h0": heartbeat hb_ms,
 * timeout timeout_ms, no standby, no progress detector, its checkpoints, status file and report
 * in dir (ckpt/, status.json, report.json). Never returns: the process exits 0 when the job
 * ended FTRT_DONE, else 1. For a child of fork(). */
_Noreturn void t_coordinator_child(const char *dir, int lfd, const char *addrs, int port,
                                   uint64_t secret, int W, int N, int hb_ms, int timeout_ms);

#endif

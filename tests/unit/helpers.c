/* helpers.c - the unit tests' shared helpers and port fakes (helpers.h). */
#include <errno.h>
#include <ftw.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fs.h"
#include "checkpoint/commit.h"
#include "checkpoint/engine.h"
#include "ftrt.h"
#include "helpers.h"
#include "runtime/coordinator/coordinator.h"

int t_tmpdir(char *buf, size_t cap, const char *tag)
{
    const char *base = getenv("FTRT_TEST_TMP");
    if (!base || !*base) base = "/tmp";
    int rc = ftrt__mkdir_p(base);
    if (rc) return rc;
    if (ftrt__path(buf, cap, "%s/%s-XXXXXX", base, tag)) return -ENAMETOOLONG;
    return mkdtemp(buf) ? 0 : -errno;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int t_rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int t_exists(const char *fmt, ...)
{
    char p[4200];
    struct stat st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof p, fmt, ap);
    va_end(ap);
    return stat(p, &st) == 0;
}

int t_glob_count(const char *fmt, ...)
{
    char p[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof p, fmt, ap);
    va_end(ap);
    glob_t g;
    int n = glob(p, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

void t_fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        b[i] = (unsigned char)((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
}

/* ---- the fake host ---- */

static int h_send(void *arg, uint32_t type, const void *payload, uint32_t len)
{
    t_host *h = arg;
    pthread_mutex_lock(&h->lock);
    int rc = h->send_rc;
    if (!rc && h->nmsgs < T_HOST_MAXMSG) {
        t_msg *m = &h->msgs[h->nmsgs++];
        m->type = type;
        m->len = len;
        memcpy(m->payload, payload, len < T_HOST_PAYLOAD ? len : T_HOST_PAYLOAD);
    }
    void (*cb)(void *, uint32_t, const void *, uint32_t) = h->on_send;
    void *cb_arg = h->on_send_arg;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    if (!rc && cb) cb(cb_arg, type, payload, len);
    return rc;
}

static void h_mark(void *arg, int kind)
{
    t_host *h = arg;
    pthread_mutex_lock(&h->lock);
    if (kind + 1 >= 0 && kind + 1 < 16) h->marks[kind + 1]++;
    h->last_mark = kind;
    pthread_mutex_unlock(&h->lock);
}

static void h_wait_begin(void *arg)
{
    t_host *h = arg;
    pthread_mutex_lock(&h->lock);
    h->wait_begins++;
    pthread_mutex_unlock(&h->lock);
}

static void h_wait_end(void *arg, int rc)
{
    t_host *h = arg;
    pthread_mutex_lock(&h->lock);
    h->wait_ends++;
    if (rc == FTRT_ERECOVER) h->wait_recovers++;
    pthread_mutex_unlock(&h->lock);
}

static const ftrt__host_ops t_host_ops = {h_send, h_mark, h_wait_begin, h_wait_end};

ftrt__host t_host_init(t_host *h)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    return (ftrt__host){&t_host_ops, h};
}

void t_host_destroy(t_host *h)
{
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
}

int t_host_count(t_host *h, uint32_t type)
{
    pthread_mutex_lock(&h->lock);
    int n = 0;
    for (int i = 0; i < h->nmsgs; i++) n += h->msgs[i].type == type;
    pthread_mutex_unlock(&h->lock);
    return n;
}

int t_host_get(t_host *h, uint32_t type, int i, t_msg *out)
{
    int found = 0;
    pthread_mutex_lock(&h->lock);
    for (int k = 0; k < h->nmsgs && !found; k++)
        if (h->msgs[k].type == type && i-- == 0) {
            *out = h->msgs[k];
            found = 1;
        }
    pthread_mutex_unlock(&h->lock);
    return found;
}

void t_watch_init(ftrt__watch *w) { ftrt__watch_init(w); }

void t_watch_announce(ftrt__watch *w, int epoch) { atomic_store(&w->pending_epoch, epoch); }

/* ---- a fake coordinator of the checkpoint engine ---- */

static void coord_on_send(void *arg, uint32_t type, const void *payload, uint32_t len)
{
    t_coord *c = arg;
    if (type != FTRT__MSG_SHARD_DONE || len != sizeof(ftrt__ckpt_msg)) return;
    ftrt__ckpt_msg m;
    memcpy(&m, payload, sizeof m);
    pthread_mutex_lock(&c->lock);
    if (c->ndone < T_COORD_MAX) c->done[c->ndone++] = m;
    if (c->auto_commit && c->qtail - c->qhead < T_COORD_MAX) c->queue[c->qtail++ % T_COORD_MAX] = m;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void *coord_main(void *arg)
{
    t_coord *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->stop && c->qhead == c->qtail) pthread_cond_wait(&c->cond, &c->lock);
        if (c->stop) break;
        ftrt__ckpt_msg m = c->queue[c->qhead++ % T_COORD_MAX];
        pthread_mutex_unlock(&c->lock);
        if (m.result == 0) m.result = ftrt__ckpt_commit(c->dir, m.step, 1, c->keep);
        ftrt__ckpt_on_commit(c->e, m.step, m.epoch, m.result);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int t_coord_start(t_coord *c, t_host *h, struct ftrt__ckpt_engine *e, const char *dir, int keep)
{
    memset(c, 0, sizeof *c);
    c->e = e;
    c->dir = dir;
    c->keep = keep;
    c->auto_commit = 1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    h->on_send = coord_on_send;
    h->on_send_arg = c;
    return pthread_create(&c->thr, NULL, coord_main, c);
}

void t_coord_stop(t_coord *c)
{
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thr, NULL);
}

void t_coord_destroy(t_coord *c)
{
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
}

void t_coord_auto_commit(t_coord *c, int on)
{
    pthread_mutex_lock(&c->lock);
    c->auto_commit = on;
    pthread_mutex_unlock(&c->lock);
}

int t_coord_ndone(t_coord *c)
{
    pthread_mutex_lock(&c->lock);
    int n = c->ndone;
    pthread_mutex_unlock(&c->lock);
    return n;
}

ftrt__ckpt_msg t_coord_done(t_coord *c, int i)
{
    pthread_mutex_lock(&c->lock);
    ftrt__ckpt_msg m = c->done[i];
    pthread_mutex_unlock(&c->lock);
    return m;
}

_Noreturn void t_coordinator_child(const char *dir, int lfd, const char *addrs, int port,
                                   uint64_t secret, int W, int N, int hb_ms, int timeout_ms)
{
    ftrt_config cfg;
    ftrt_config_init(&cfg, sizeof cfg);
    cfg.heartbeat_ms = hb_ms;
    cfg.heartbeat_timeout_ms = timeout_ms;
    cfg.init_timeout_ms = 20000;
    cfg.standby = 0;
    cfg.progress = 0;
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s/ckpt", dir);
    snprintf(cfg.status_file, sizeof cfg.status_file, "%s/status.json", dir);
    snprintf(cfg.report_file, sizeof cfg.report_file, "%s/report.json", dir);
    ftrt__coord_args ca = {.cfg = &cfg, .world_size = W, .ntrainers = N,
                           .t_start = ftrt__now(), .t_start_wall = ftrt__wallclock(),
                           .status_file = cfg.status_file, .host = "h0", .addr = addrs,
                           .port = port, .mark_fd = -1};
    int rc = ftrt__coordinator_run(&ca, lfd, secret);
    _exit(rc == FTRT_DONE ? 0 : 1);
}

/*
 * standby.c - the standby coordinator as the coordinator sees it (docs/detection-and-recovery.md
 * "Standby coordinator"): which hot spare holds the duty (on another host than the
 * coordinator's), telling every rank where it listens (NEXT_COORD), and the state it is sent to
 * go on from (SYNC): the epoch and membership, every rank's role, the checkpoint commit log, the
 * incidents and the ledger's totals. A commit waits for the standby's acknowledgement of a SYNC
 * sent after its decision (commits.c), so that a coordinator cut off from a standby that took
 * over can never write LATEST; an epoch change's FAILURE and PLAN wait for the acknowledgement
 * of their SYNC (epoch.c); the rest lags by at most a second. The term file
 * (`coordinator.term` in the checkpoint directory) fences an old coordinator's outputs: a
 * standby that takes over writes its term there before it decides anything (takeover.c), and
 * a coordinator that finds a later term gives up without writing anything more; so does one
 * that its standby tells it took over (a SYNC_ACK of a later term), and one cut off from
 * every other host (ftrt__standby_cut_off).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

enum { SYNC_VERSION = 5 }; /* 2: a rank's drain; 3: N may fall (shrink, fold), the holders;
                              4: W is the slots in use (joined processes', join.c), the
                              join counters; 5: cap, the slots of the job (FTRT_JOINABLE's
                              included), which a joined standby does not know otherwise, and
                              each joined process's join time (the ledger's) */

/* The fixed part of a SYNC, after ftrt__sync_head. Times are wall seconds. */
typedef struct sync_state {
    ftrt__sync_head head;
    int32_t W, N, epoch, phase, ninc, hb_ms;
    int32_t ncommitted, nckpt_failed, nckpt_skipped, nckpt_abandoned, nfailed;
    int32_t rejected, protocol_errors, stall_reports, sdc_checks, coord_pid, coord_w;
    int32_t renumber_epoch, nshrinks, nfolds, njoined, join_refused, cap, pad;
    int64_t last_committed, plan_delta_len, plan_full_len;
    ftrt__ckpt_msg last_commit;
    double t_start_wall, first_commit_wall, last_commit_wall, epoch_t_fail, mono_to_wall;
    double plan_t_ready, plan_t_sent; /* monotonic, the sender's clock (shifted on restore) */
    char coord_host[FTRT__HOST_MAX];
} sync_state;

/* One rank's entry. */
typedef struct sync_rank {
    int32_t role, logical, promoting, reported_epoch, resumed_epoch, said_bye, pid, tl_seen;
    int32_t tl_kind_open, has_sharded, drained, drain_epoch;
    int64_t steps_done, kept_steps, total_steps, report_steps;
    double kept_s, t_fail_wall, flops_per_step, peak_flops, tl_t_open, t_joined_wall;
    double tl_totals[FTRT__IV_KINDS];
    ftrt__bye bye;
    char host[FTRT__HOST_MAX];
} sync_rank;

/* ---- appointment ------------------------------------------------------------------------- */

/* The spare to appoint: the highest world rank among the connected spares on another host
 * than this coordinator's (the recovery promotes the lowest first); on a job of one host, any
 * spare. A spare of the job's own mpirun first; a joined process (join.c) only when none is
 * left: the coordinator makes no MPI call, so one in no MPI_COMM_WORLD of the job can take over
 * (it learns the job's slots from the SYNC, ftrt__sync_capacity; its ftrt-run gave it the
 * job's status file). 0 when none. O(W). */
static int pick_standby(const ftrt__coord *c)
{
    const char *me = c->a->host;
    int one_host = 1, any[2] = {0, 0}, other[2] = {0, 0};
    for (int w = 1; w < c->Wused; w++) {
        const ftrt__crank *r = &c->r[w];
        if (r->hello && r->role != FTRT__ROLE_COORD && strcmp(r->host, me) != 0) one_host = 0;
        if (r->role != FTRT__ROLE_SPARE || r->promoting || !ftrt__rank_connected(c, w))
            continue;
        int joined = w >= c->Wworld;
        any[joined] = w;
        if (strcmp(r->host, me) != 0) other[joined] = w;
    }
    for (int j = 0; j < 2; j++) {
        int w = other[j] ? other[j] : one_host ? any[j] : 0;
        if (w) return w;
    }
    return 0;
}

/* Whether a hot spare is left at all (for the message when none can be the standby). */
static int spares_left(const ftrt__coord *c)
{
    for (int w = 1; w < c->Wused; w++)
        if (c->r[w].role == FTRT__ROLE_SPARE) return 1;
    return 0;
}

static void tell_all(ftrt__coord *c, const ftrt__coord_at *at)
{
    int n = 0;
    for (int w = 1; w < c->Wused; w++)
        if (w != c->self && c->r[w].role != FTRT__ROLE_FAILED && ftrt__rank_connected(c, w))
            c->s.fan[n++] = w;
    ftrt__coord_multicast(c, c->s.fan, n, FTRT__MSG_NEXT_COORD, at, sizeof *at);
}

void ftrt__standby_dismiss(ftrt__coord *c, const char *why)
{
    if (!c->sb_w) return;
    ftrt_log_warn("standby coordinator world rank %d dismissed: %s", c->sb_w, why);
    ftrt__epoch_msg m = {.epoch = c->epoch, .value = -1};
    if (c->r[c->sb_w].role != FTRT__ROLE_FAILED)
        ftrt__coord_send(c, c->sb_w, FTRT__MSG_STANDBY, &m, sizeof m);
    ftrt__coord_at none = {.world_rank = -1, .term = c->term};
    if (c->sb_ready) tell_all(c, &none);
    c->sb_w = c->sb_ready = 0;
    c->sb_logged = 0;
    c->status_dirty |= 1;
    c->sb_next_try = 0;
}

static void appoint(ftrt__coord *c, double now)
{
    if (now < c->sb_next_try || c->phase != PH_RUNNING || c->claim_pending || c->norphans > 0)
        return; /* (ranks still expected back: none is connected yet) */
    if (!c->a->cfg->standby) { /* FTRT_STANDBY=0 */
        if (!c->sb_logged)
            ftrt_log_info("no standby coordinator (FTRT_STANDBY=0): the loss of this "
                          "coordinator ends the job (relaunch from the last committed "
                          "checkpoint)");
        c->sb_logged = 1;
        return;
    }
    c->sb_next_try = now + 1.0;
    int w = pick_standby(c);
    if (!w) {
        if (!c->sb_logged)
            ftrt_log_warn("no standby coordinator: %s%s; the loss of this coordinator ends the "
                          "job (relaunch from the last committed checkpoint)",
                          spares_left(c) ? "no hot spare on another host than " :
                                           "no hot spare left", spares_left(c) ? c->a->host : "");
        c->sb_logged = 1;
        return;
    }
    c->sb_w = w;
    c->sb_ready = 0;
    c->sb_remote = strcmp(c->r[w].host, c->a->host) != 0;
    c->sb_seq = c->sb_acked = 0;
    ftrt__epoch_msg m = {.epoch = c->epoch, .value = c->term};
    ftrt__coord_send(c, w, FTRT__MSG_STANDBY, &m, sizeof m);
    ftrt_log_info("hot spare world rank %d (%s) appointed standby coordinator", w, c->r[w].host);
}

void ftrt__standby_at(ftrt__coord *c, int w, const ftrt__coord_at *at)
{
    if (w != c->sb_w || at->term != c->term || at->port <= 0) return; /* stale */
    c->sb_at = *at;
    c->sb_at.addrs[sizeof c->sb_at.addrs - 1] = 0;
    c->sb_at.world_rank = w;
    c->sb_ready = 1;
    double now = ftrt__now();
    if (c->offhost_heard < now) c->offhost_heard = now;
    tell_all(c, &c->sb_at);
    ftrt__standby_sync(c);
}

void ftrt__standby_tell(ftrt__coord *c, int w)
{
    if (c->sb_ready && w != c->sb_w) ftrt__coord_send(c, w, FTRT__MSG_NEXT_COORD, &c->sb_at,
                                                      sizeof c->sb_at);
}

void ftrt__standby_ack(ftrt__coord *c, int w, const ftrt__epoch_msg *m)
{
    if (w == c->sb_w && m->epoch > c->term && !c->deposed) { /* it took over (agent.c) */
        ftrt_log_error("the standby coordinator (world rank %d) took over (term %d, this "
                       "coordinator's: %d): this coordinator gives up and writes nothing more",
                       w, m->epoch, c->term);
        c->deposed = 1;
        return;
    }
    if (w != c->sb_w || m->epoch != c->term) return;
    uint64_t seq = (c->sb_seq & ~(uint64_t)0xffffffffu) | (uint32_t)m->value;
    if (seq > c->sb_seq) seq -= (uint64_t)1 << 32;
    if (c->sb_acked == 0 && seq > 0) c->status_dirty |= 1; /* its "standby" (status.c) */
    if (seq > c->sb_acked) c->sb_acked = seq;
}

int ftrt__standby_acked(const ftrt__coord *c, uint64_t seq)
{
    if (c->claim_pending) return 0; /* a takeover's term not claimed yet (takeover.c) */
    return !c->sb_ready || seq == 0 || c->sb_acked >= seq;
}

int ftrt__standby_tick(ftrt__coord *c, double now)
{
    if (c->sb_w && c->r[c->sb_w].role != FTRT__ROLE_SPARE) {
        ftrt__standby_dismiss(c, c->r[c->sb_w].role == FTRT__ROLE_FAILED ? "it failed"
                                                                          : "it was promoted");
        return 1;
    }
    if (c->sb_ready && c->sb_acked < c->sb_seq &&
        now - c->sb_sent_t > c->a->cfg->heartbeat_timeout_ms / 2000.0) {
        ftrt__standby_dismiss(c, "it did not acknowledge the coordinator's state in time");
        return 1;
    }
    if (!c->sb_w) appoint(c, now);
    if (c->sb_ready && now >= c->sb_next_sync) ftrt__standby_sync(c); /* the lazy part */
    return 0;
}

/* ---- the state ----------------------------------------------------------------------------- */

static size_t sync_size(const ftrt__coord *c)
{
    return sizeof(sync_state) + (size_t)c->Wused * sizeof(sync_rank) +
           ((size_t)c->N + (size_t)c->N0) * sizeof(int32_t) +
           (size_t)c->ninc * sizeof(ftrt__incident) + c->plan_delta_len + c->plan_full_len;
}

static void put_rank(sync_rank *s, const ftrt__crank *r)
{
    *s = (sync_rank){.role = r->role, .logical = r->logical, .promoting = r->promoting,
                     .reported_epoch = r->reported_epoch, .resumed_epoch = r->resumed_epoch,
                     .said_bye = r->said_bye, .pid = r->pid, .tl_seen = r->tl_seen,
                     .tl_kind_open = r->tl_kind_open, .has_sharded = r->has_sharded,
                     .drained = r->drained, .drain_epoch = r->drain_epoch,
                     .steps_done = r->steps_done, .kept_steps = r->kept_steps,
                     .total_steps = r->total_steps, .report_steps = r->report_steps,
                     .kept_s = r->kept_s, .t_fail_wall = r->t_fail_wall,
                     .t_joined_wall = r->t_joined_wall,
                     .flops_per_step = r->flops_per_step, .peak_flops = r->peak_flops,
                     .tl_t_open = r->tl_t_open, .bye = r->bye};
    memcpy(s->tl_totals, r->tl_totals, sizeof s->tl_totals);
    memcpy(s->host, r->host, sizeof s->host);
}

static void put_state(const ftrt__coord *c, sync_state *s)
{
    double off = ftrt__wallclock() - ftrt__now();
    *s = (sync_state){.head = {.seq = c->sb_seq, .term = c->term, .version = SYNC_VERSION},
                      .W = c->Wused, .N = c->N, .epoch = c->epoch, .phase = c->phase,
                      .ninc = c->ninc, .hb_ms = c->hb_ms, .ncommitted = c->ncommitted,
                      .nckpt_failed = c->nckpt_failed, .nckpt_skipped = c->nckpt_skipped,
                      .nckpt_abandoned = c->nckpt_abandoned, .nfailed = c->nfailed,
                      .rejected = c->rejected_connections, .protocol_errors = c->protocol_errors,
                      .stall_reports = c->stall_reports, .sdc_checks = c->sdc_checks,
                      .coord_pid = c->r[c->self].pid, .coord_w = c->self,
                      .renumber_epoch = c->renumber_epoch, .nshrinks = c->nshrinks,
                      .nfolds = c->nfolds, .njoined = c->njoined,
                      .join_refused = c->join_refused, .cap = c->W,
                      .last_committed = c->last_committed,
                      .plan_delta_len = (int64_t)c->plan_delta_len,
                      .plan_full_len = (int64_t)c->plan_full_len, .last_commit = c->last_commit,
                      .t_start_wall = c->t_start_wall, .first_commit_wall = c->first_commit_wall,
                      .last_commit_wall = c->last_commit_wall, .epoch_t_fail = c->epoch_t_fail,
                      .mono_to_wall = off, .plan_t_ready = c->plan_t_ready,
                      .plan_t_sent = c->plan_t_sent};
    memcpy(s->coord_host, c->a->host, strnlen(c->a->host, sizeof s->coord_host - 1));
}

uint64_t ftrt__standby_sync(ftrt__coord *c)
{
    if (!c->sb_ready) return 0;
    size_t len = sync_size(c);
    if (len > FTRT__SYNC_MAX) {
        ftrt__standby_dismiss(c, "the state is larger than a SYNC may be");
        return 0;
    }
    unsigned char *b = malloc(len), *p = b;
    if (!b) return 0; /* the next one (the commit waits for it) */
    if (c->sb_acked >= c->sb_seq) c->sb_sent_t = ftrt__now();
    c->sb_seq++;
    put_state(c, (sync_state *)(void *)p);
    p += sizeof(sync_state);
    for (int w = 0; w < c->Wused; w++, p += sizeof(sync_rank)) {
        sync_rank s;
        put_rank(&s, &c->r[w]);
        memcpy(p, &s, sizeof s);
    }
    for (int l = 0; l < c->N; l++, p += sizeof(int32_t)) {
        int32_t m = c->members[l];
        memcpy(p, &m, sizeof m);
    }
    for (int d = 0; d < c->N0; d++, p += sizeof(int32_t)) {
        int32_t h = c->holder[d];
        memcpy(p, &h, sizeof h);
    }
    if (c->ninc) memcpy(p, c->inc, (size_t)c->ninc * sizeof *c->inc);
    p += (size_t)c->ninc * sizeof *c->inc;
    if (c->plan_delta_len) memcpy(p, c->plan_delta, c->plan_delta_len);
    p += c->plan_delta_len;
    if (c->plan_full_len) memcpy(p, c->plan_full, c->plan_full_len);
    ftrt__coord_send(c, c->sb_w, FTRT__MSG_SYNC, b, (uint32_t)len);
    free(b);
    c->sb_next_sync = ftrt__now() + 1.0;
    return c->sb_seq;
}

/* ---- restoring it (the standby that takes over) ---------------------------------------- */

static void get_rank(ftrt__crank *r, const sync_rank *s)
{
    r->role = s->role;
    r->logical = s->logical;
    r->promoting = s->promoting;
    r->reported_epoch = s->reported_epoch;
    r->resumed_epoch = s->resumed_epoch;
    r->said_bye = s->said_bye;
    r->pid = s->pid;
    r->tl_seen = s->tl_seen;
    r->tl_kind_open = s->tl_kind_open;
    r->has_sharded = s->has_sharded;
    r->drained = s->drained;
    r->drain_epoch = s->drain_epoch;
    r->steps_done = s->steps_done;
    r->kept_steps = s->kept_steps;
    r->total_steps = s->total_steps;
    r->report_steps = s->report_steps;
    r->kept_s = s->kept_s;
    r->t_fail_wall = s->t_fail_wall;
    r->t_joined_wall = s->t_joined_wall;
    r->flops_per_step = s->flops_per_step;
    r->peak_flops = s->peak_flops;
    r->tl_t_open = s->tl_t_open;
    r->bye = s->bye;
    memcpy(r->tl_totals, s->tl_totals, sizeof r->tl_totals);
    memcpy(r->host, s->host, sizeof r->host);
    r->host[FTRT__HOST_MAX - 1] = 0;
    /* Its intervals stay with the rank, which sends them all again from its first once back
     * (agent.c to_standby: the first LEDGER here starts the timeline anew); a rank that does
     * not come back is accounted by these totals (goodput.c, "timeline cut short"). */
    r->tl_resend = r->tl_seen;
}

/* The incidents, their monotonic times moved from the old coordinator's clock to this one's. */
static int get_incidents(ftrt__coord *c, const unsigned char *p, int n, double shift)
{
    if (n == 0) return 0;
    c->inc = malloc((size_t)n * sizeof *c->inc);
    if (!c->inc) return -ENOMEM;
    memcpy(c->inc, p, (size_t)n * sizeof *c->inc);
    c->ninc = n;
    for (int i = 0; i < n; i++) {
        ftrt__incident *x = &c->inc[i];
        x->t_detect += shift;
        x->t_last_heard += shift;
        if (x->t_resumed > 0) x->t_resumed += shift;
    }
    return 0;
}

static int get_plans(ftrt__coord *c, const unsigned char *p, size_t dl, size_t fl)
{
    c->plan_delta = dl ? malloc(dl) : NULL;
    c->plan_full = fl ? malloc(fl) : NULL;
    if ((dl && !c->plan_delta) || (fl && !c->plan_full)) return -ENOMEM;
    if (dl) memcpy(c->plan_delta, p, dl);
    if (fl) memcpy(c->plan_full, p + dl, fl);
    c->plan_delta_len = dl;
    c->plan_full_len = fl;
    return 0;
}

static void get_state(ftrt__coord *c, const sync_state *s)
{
    c->term = s->head.term + 1;
    c->epoch = s->epoch;
    c->phase = s->phase;
    c->hb_ms = s->hb_ms;
    c->ncommitted = s->ncommitted;
    c->nckpt_failed = s->nckpt_failed;
    c->nckpt_skipped = s->nckpt_skipped;
    c->nckpt_abandoned = s->nckpt_abandoned;
    c->nfailed = s->nfailed;
    c->rejected_connections = s->rejected;
    c->njoined = s->njoined;
    c->join_refused = s->join_refused;
    c->protocol_errors = s->protocol_errors;
    c->stall_reports = s->stall_reports;
    c->sdc_checks = s->sdc_checks;
    c->renumber_epoch = s->renumber_epoch;
    c->nshrinks = s->nshrinks;
    c->nfolds = s->nfolds;
    if (s->last_committed > c->last_committed) c->last_committed = s->last_committed;
    c->last_commit = s->last_commit;
    c->t_start_wall = s->t_start_wall;
    c->t_start = s->t_start_wall - (ftrt__wallclock() - ftrt__now());
    c->first_commit_wall = s->first_commit_wall;
    c->last_commit_wall = s->last_commit_wall;
    c->epoch_t_fail = s->epoch_t_fail;
}

int ftrt__sync_capacity(const void *sync, size_t len)
{
    sync_state s;
    if (!sync || len < sizeof s) return -1;
    memcpy(&s, sync, sizeof s);
    return s.head.version == SYNC_VERSION && s.cap >= s.W ? s.cap : -1;
}

int ftrt__standby_restore(ftrt__coord *c, const void *payload, size_t len)
{
    sync_state s;
    if (len < sizeof s) return FTRT_EPROTO;
    memcpy(&s, payload, sizeof s);
    size_t want = sizeof s + (size_t)s.W * sizeof(sync_rank) +
                  ((size_t)s.N + (size_t)c->N0) * sizeof(int32_t) +
                  (size_t)s.ninc * sizeof(ftrt__incident) + (size_t)s.plan_delta_len +
                  (size_t)s.plan_full_len;
    /* (s.W: the slots in use, the world's and the joined processes', join.c) */
    if (s.head.version != SYNC_VERSION || s.W < c->Wworld || s.W > c->W || s.N < 1 ||
        s.N > c->N0 || s.ninc < 0 || s.plan_delta_len < 0 || s.plan_full_len < 0 ||
        want != len || s.phase < PH_RUNNING || s.phase > PH_RESUMING)
        return FTRT_EPROTO;
    get_state(c, &s);
    c->Wused = s.W;
    const unsigned char *p = (const unsigned char *)payload + sizeof s;
    for (int w = 0; w < c->Wused; w++, p += sizeof(sync_rank)) {
        sync_rank r;
        memcpy(&r, p, sizeof r);
        get_rank(&c->r[w], &r);
    }
    if (s.coord_w < 0 || s.coord_w >= c->Wused) return FTRT_EPROTO;
    c->self = s.coord_w; /* the coordinator that sent it, until the caller takes its place */
    ftrt__crank *old = &c->r[s.coord_w];
    old->pid = s.coord_pid;
    memcpy(old->host, s.coord_host, sizeof old->host);
    old->host[FTRT__HOST_MAX - 1] = 0;
    if (ftrt__members_restore(c, p, s.N)) return FTRT_EPROTO;
    p += ((size_t)c->N + (size_t)c->N0) * sizeof(int32_t);
    double shift = (ftrt__wallclock() - ftrt__now()) - s.mono_to_wall;
    if (s.plan_t_ready > 0) c->plan_t_ready = s.plan_t_ready - shift; /* a PLAN out: the MTTR */
    if (s.plan_t_sent > 0) c->plan_t_sent = s.plan_t_sent - shift;    /* phases go on from it */
    if (get_incidents(c, p, s.ninc, -shift)) return -ENOMEM;
    p += (size_t)s.ninc * sizeof(ftrt__incident);
    int rc = get_plans(c, p, (size_t)s.plan_delta_len, (size_t)s.plan_full_len);
    ftrt__rankidx_rebuild(c); /* (the roles, hosts, steps and incidents written above) */
    return rc;
}

/* ---- the term file: fencing an old coordinator's outputs --------------------------------- */

static void term_path(const ftrt__coord *c, char *out, size_t cap)
{
    snprintf(out, cap, "%s/coordinator.term", c->a->cfg->ckpt_dir);
}

int ftrt__standby_deposed(ftrt__coord *c)
{
    if (c->deposed) return 1;
    char path[1200], buf[64] = {0};
    term_path(c, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long secret = 0;
    int term = 0;
    /* (a file of an earlier launch of the job names another secret: not this job's term) */
    if (n <= 0 || sscanf(buf, "%llx %d", &secret, &term) != 2 || secret != c->secret ||
        term <= c->term)
        return 0;
    ftrt_log_error("a standby coordinator took over (term %d, this coordinator's: %d): this "
                   "coordinator gives up and writes nothing more", term, c->term);
    c->deposed = 1;
    return 1;
}

int ftrt__standby_cut_off(ftrt__coord *c, double now)
{
    if (c->deposed) return 1;
    if (!c->sb_ready || !c->sb_remote || c->phase == PH_INIT || c->phase == PH_ABORTING ||
        c->phase == PH_DONE)
        return 0;
    double limit = c->a->cfg->heartbeat_timeout_ms / 2000.0, period = 2 * c->hb_ms / 1000.0;
    if (limit < period) limit = period;
    if (now - c->offhost_heard <= limit) return 0;
    ftrt_log_error("cut off from the job: no message from any other host than %s for %.0f ms, "
                   "and the standby coordinator (world rank %d, %s) takes over when it hears "
                   "nothing: this coordinator gives up without committing, planning or "
                   "writing anything more", c->a->host, (now - c->offhost_heard) * 1e3, c->sb_w,
                   c->r[c->sb_w].host);
    c->deposed = 1;
    return 1;
}

int ftrt__standby_claim(ftrt__coord *c)
{
    char path[1200], tmp[1300], buf[64];
    term_path(c, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int n = snprintf(buf, sizeof buf, "%llx %d\n", (unsigned long long)c->secret, c->term);
    /* 0600: it holds the job's secret (the job's user only; a file left by an earlier job with
     * wider permissions is replaced by the rename, never written through) */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    int rc = write(fd, buf, (size_t)n) == n && fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    if (!rc && rename(tmp, path)) rc = -errno;
    if (rc) unlink(tmp);
    return rc;
}

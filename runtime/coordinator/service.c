/*
 * service.c - reading the ranks: everything that arrives on an identified rank's connection is
 * handled here, one function per message type (HEARTBEAT, LEDGER, REPORT, RESUMED,
 * SHARD_DONE, FINGERPRINT, BYE), and a connection's EOF or a malformed message declares the
 * rank failed; the silence timeouts (the head of the silence watch) are checked here too, since
 * a rank with unread bytes is read before it is called silent.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/coordinator/coord.h"

/* Appends n intervals to rank r's timeline (up to timeline_max; beyond, it is truncated). */
static void timeline_append(ftrt__coord *c, ftrt__crank *r, const ftrt__interval *iv, size_t n)
{
    if (r->tl_n + n > (size_t)c->a->cfg->timeline_max) {
        r->tl_truncated = 1;
        return;
    }
    if (n == 0) return;
    if (r->tl_n + n > r->tl_cap) {
        size_t ncap = r->tl_cap ? r->tl_cap : 1024;
        while (ncap < r->tl_n + n) ncap *= 2;
        ftrt__interval *grown = realloc(r->tl, ncap * sizeof *grown);
        if (!grown) {
            r->tl_truncated = 1; /* a lost ledger update is not a protocol error */
            return;
        }
        r->tl = grown;
        r->tl_cap = ncap;
    }
    memcpy(r->tl + r->tl_n, iv, n * sizeof *iv);
    r->tl_n += n;
}

/* A LEDGER message: the rank's totals and open interval, and intervals to append. */
static int take_ledger(ftrt__coord *c, int w, const void *payload, size_t len)
{
    ftrt__ledger_msg *m = malloc(len);
    if (!m) return 0; /* a lost ledger update is not a protocol error */
    memcpy(m, payload, len);
    if (ftrt__ledger_msg_check(m, len)) {
        free(m);
        return FTRT_EPROTO;
    }
    ftrt__crank *r = &c->r[w];
    memcpy(r->tl_totals, m->totals, sizeof r->tl_totals);
    r->tl_t_open = m->t_open;
    r->tl_kind_open = m->kind_open;
    r->kept_steps = m->kept_steps;
    r->flops_per_step = m->flops_per_step;
    r->peak_flops = m->peak_flops;
    r->total_steps = m->total_steps;
    r->tl_final |= m->final;
    r->tl_seen = 1;
    timeline_append(c, r, m->iv, (size_t)m->n);
    free(m);
    return 0;
}

static void take_heartbeat(ftrt__coord *c, ftrt__crank *r, const ftrt__heartbeat *hb)
{
    if (hb->steps_done != r->steps_done) c->status_dirty |= 1;
    if (hb->steps_done != r->steps_done || hb->waits != r->waits) r->last_change = ftrt__now();
    r->steps_done = hb->steps_done;
    r->waits = hb->waits;
    r->kept_s = hb->kept_s;
    r->compute_s = hb->compute_s;
}

static void take_report(ftrt__coord *c, ftrt__crank *r, const ftrt__report *rep)
{
    if (rep->epoch != c->epoch || r->role != FTRT__ROLE_TRAINER) return; /* stale */
    if (r->reported_epoch != rep->epoch) c->nreports++;
    r->reported_epoch = rep->epoch;
    r->report_steps = rep->steps_done;
    r->has_sharded = rep->has_sharded;
    r->own_step = rep->own_step;
    r->held_step = rep->held_step;
    r->held_of = rep->held_of;
    /* (the O(N) check once every survivor may have reported; a member that reported and then
     * failed makes this an overestimate, which the check itself corrects) */
    if (c->nreports + c->npromoting >= c->N) ftrt__epoch_check_reports(c);
}

static void take_resumed(ftrt__coord *c, ftrt__crank *r, const ftrt__epoch_msg *em)
{
    if (em->epoch != c->epoch) return;
    if (r->resumed_epoch != em->epoch && r->role == FTRT__ROLE_TRAINER) c->nresumed++;
    r->resumed_epoch = em->epoch;
    /* then the fingerprints of the new epoch that arrived before the last RESUMED */
    if (c->nresumed >= c->N && ftrt__epoch_check_resumed(c)) ftrt__sdc_vote_all(c);
}

/* A trainer that stops with an error, or before its loop's end (the job's total steps, when
 * ftrt_set_job_info() gave them), or in the middle of a recovery, ends the job as failed: the
 * others cannot finish without it, and a spare would meet the same error. */
static void judge_bye(ftrt__coord *c, int w, const ftrt__crank *r)
{
    char why[200];
    int code = 0;
    if (r->bye.exit_code < 0) {
        code = r->bye.exit_code;
        snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left with %s",
                 r->logical, w, ftrt_err_name(code));
    } else if (r->total_steps > 0 && r->bye.steps_done < r->total_steps) {
        code = FTRT_EABORT;
        snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left after %lld of "
                 "%lld steps", r->logical, w, (long long)r->bye.steps_done,
                 (long long)r->total_steps);
    } else if (c->phase == PH_COLLECT || c->phase == PH_RESUMING) {
        code = FTRT_EABORT;
        snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left during the "
                 "recovery of epoch %d", r->logical, w, c->epoch);
    }
    if (code) ftrt__job_abort(c, code, why);
}

static void take_bye(ftrt__coord *c, int w, const ftrt__bye *bye)
{
    ftrt__crank *r = &c->r[w];
    r->said_bye = 1;
    ftrt__silence_remove(c, w); /* a rank that said goodbye is not watched for silence */
    c->maybe_done = 1;
    r->bye = *bye;
    r->kept_s = bye->kept_s;
    r->steps_done = bye->steps_done;
    c->status_dirty |= 1;
    ftrt__epoch_msg em = {.epoch = c->epoch, .value = c->nfailed};
    ftrt__coord_send(c, w, FTRT__MSG_FAREWELL, &em, sizeof em);
    if (r->role == FTRT__ROLE_TRAINER) judge_bye(c, w, r);
}

/* Handles one message from identified world rank w. Returns 0 or FTRT_EPROTO. */
static int handle(ftrt__coord *c, int w, const ftrt__msghdr *h, const void *payload)
{
    ftrt__crank *r = &c->r[w];
    if (h->type == FTRT__MSG_LEDGER) return take_ledger(c, w, payload, h->len);
    union {
        ftrt__heartbeat hb;
        ftrt__report rep;
        ftrt__epoch_msg em;
        ftrt__ckpt_msg cm;
        ftrt__bye bye;
        ftrt__fingerprint_msg fpm;
    } u;
    if (h->len > sizeof u) return FTRT_EPROTO;
    memcpy(&u, payload, h->len);
    switch (h->type) {
    case FTRT__MSG_HEARTBEAT: take_heartbeat(c, r, &u.hb); return 0;
    case FTRT__MSG_REPORT: take_report(c, r, &u.rep); return 0;
    case FTRT__MSG_RESUMED: take_resumed(c, r, &u.em); return 0;
    case FTRT__MSG_SHARD_DONE:
        if (u.cm.epoch == c->epoch && c->phase == PH_RUNNING) /* else abandoned */
            ftrt__commit_shard_done(c, w, &u.cm);
        return 0;
    case FTRT__MSG_FINGERPRINT: ftrt__sdc_vote_take(c, w, &u.fpm); return 0;
    case FTRT__MSG_BYE: take_bye(c, w, &u.bye); return 0;
    default: return FTRT_EPROTO;
    }
}

void ftrt__service(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    ssize_t got = ftrt__rx_fill(&r->rx, r->fd);
    if (got == -EAGAIN) return;
    if (got <= 0) {
        if (r->said_bye || c->phase == PH_ABORTING) ftrt__coord_drop(c, w);
        else ftrt__fail(c, w, FK_CONNECTION_LOST);
        return;
    }
    r->last_heard = ftrt__now();
    if (!r->said_bye) ftrt__silence_touch(c, w);
    ftrt__msghdr h;
    const void *payload;
    int rc;
    while (r->fd >= 0 && (rc = ftrt__rx_next(&r->rx, &h, &payload)) == 1)
        if (handle(c, w, &h, payload)) {
            rc = FTRT_EPROTO;
            break;
        }
    if (r->fd >= 0 && rc < 0) {
        c->protocol_errors++;
        ftrt_log_error("malformed message from world rank %d", w);
        ftrt__fail(c, w, FK_PROTOCOL);
    }
}

/* The head of the watch, oldest first, O(1) per rank looked at. Bytes that arrived while the
 * loop was busy (a long fan-out) are not silence: a rank with something to read is read first. */
void ftrt__check_timeouts(ftrt__coord *c, double now)
{
    double limit = c->a->cfg->heartbeat_timeout_ms / 1000.0;
    while (c->watch_head && c->phase != PH_ABORTING && c->phase != PH_DONE) {
        int w = c->watch_head;
        ftrt__crank *r = &c->r[w];
        if (now - r->last_heard <= limit) break;
        struct pollfd pf = {.fd = r->fd, .events = POLLIN};
        if (r->fd >= 0 && poll(&pf, 1, 0) > 0) {
            ftrt__service(c, w);
            if (c->watch_head != w || now - r->last_heard <= limit) continue;
        }
        if (c->watch_head == w) ftrt__fail(c, w, FK_HEARTBEAT_TIMEOUT);
        if (c->watch_head == w) ftrt__silence_remove(c, w); /* (not failed: the coordinator) */
    }
}

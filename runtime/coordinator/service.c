/*
 * service.c - reading the ranks and the host agents: everything that arrives from an identified
 * rank, on its own connection or relayed by its host agent, is handled here, one function per
 * message type (HEARTBEAT, LEDGER, REPORT, RESUMED, SHARD_DONE, FINGERPRINT, BYE), and what a
 * host agent says for its host (its ranks' HELLOs, HOST_BEAT, RANK_LOST); a connection's EOF or
 * a malformed message declares the rank (or loses the host agent) failed; a rank that comes
 * back after its host agent was lost is caught up, and one moves from its own connection to a
 * newly elected host agent ("moves"); the silence timeouts (the head of the
 * silence watch) are checked here too, since a connection with unread bytes is read before it
 * is called silent, and so are the peers that do not take the coordinator's messages (the
 * send watch's head: conn.c "the send queues").
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/coordinator/coord.h"

static void take_heartbeat(ftrt__coord *c, int w, const ftrt__heartbeat *hb)
{
    ftrt__crank *r = &c->r[w];
    if (hb->steps_done != r->steps_done) c->status_dirty |= 1;
    if (hb->steps_done != r->steps_done || hb->waits != r->waits) r->last_change = ftrt__now();
    ftrt__rank_set_steps(c, w, hb->steps_done);
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
    r->own_shard_only = rep->own_shard_only;
    r->ec_step = rep->ec_step;
    r->ec_n = rep->ec_n;
    r->ec_k = rep->ec_k;
    /* (the O(N) check once every survivor may have reported; a member that reported and then
     * failed makes this an overestimate, which the check itself corrects) */
    if (c->nreports + c->npromoting >= c->N) ftrt__epoch_check_reports(c);
}

static void take_resumed(ftrt__coord *c, ftrt__crank *r, const ftrt__resumed_msg *em)
{
    if (em->epoch != c->epoch) return;
    if (r->resumed_epoch != em->epoch && r->role == FTRT__ROLE_TRAINER) c->nresumed++;
    if (r->resumed_epoch != em->epoch) { /* (a repeat after a lost host agent keeps the first) */
        r->resumed = *em;
        r->resumed_t = ftrt__now();
    }
    r->resumed_epoch = em->epoch;
    /* then the fingerprints of the new epoch that arrived before the last RESUMED */
    if (c->nresumed >= c->N && ftrt__epoch_check_resumed(c)) ftrt__sdc_vote_all(c);
}

/* A trainer that stops with an error, or before its loop's end (the job's total steps, when
 * ftrt_set_job_info() gave them), or in the middle of its recovery, ends the job as failed: the
 * others cannot finish without it, and a spare would meet the same error. One that has
 * resumed in this epoch and then ended its loop (a recovery that resumed at the job's last
 * step: nothing was left to do) is done, while the others may still be resuming. */
static void judge_bye(ftrt__coord *c, int w, const ftrt__crank *r)
{
    char why[300];
    int code = 0;
    if (r->bye.exit_code < 0) {
        code = r->bye.exit_code;
        snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left with an error: %s",
                 r->logical, w, ftrt_strerror(code));
    } else if (r->total_steps > 0 && r->bye.steps_done < r->total_steps) {
        code = FTRT_EABORT;
        snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left after %lld of "
                 "%lld steps", r->logical, w, (long long)r->bye.steps_done,
                 (long long)r->total_steps);
    } else if ((c->phase == PH_COLLECT || c->phase == PH_RESUMING) &&
               r->resumed_epoch != c->epoch) {
        code = FTRT_EABORT;
        snprintf(why, sizeof why, "trainer logical rank %d (world rank %d) left during the "
                 "recovery of epoch %d", r->logical, w, c->epoch);
    }
    if (code) ftrt__job_abort(c, code, why);
}

static void take_bye(ftrt__coord *c, int w, const ftrt__bye *bye)
{
    ftrt__crank *r = &c->r[w];
    ftrt__drain_withdraw(c, w, bye); /* (the job's end before a drain's step boundary) */
    ftrt__rank_said_bye(c, w);
    ftrt__silence_remove(c, w); /* a rank that said goodbye is not watched for silence */
    c->maybe_done = 1;
    r->bye = *bye;
    r->kept_s = bye->kept_s;
    ftrt__rank_set_steps(c, w, bye->steps_done);
    c->status_dirty |= 1;
    /* Its FAREWELL waits for the job's end (ftrt__job_check_end: every trainer said goodbye),
     * so that every process of the world takes the same MPI_Finalize decision; an abort
     * meanwhile reaches it as ABORT. */
    if (r->role == FTRT__ROLE_TRAINER) judge_bye(c, w, r);
}

/* Handles one message from identified world rank w. Returns 0 or FTRT_EPROTO. */
static int handle(ftrt__coord *c, int w, const ftrt__msghdr *h, const void *payload)
{
    ftrt__crank *r = &c->r[w];
    if (h->type == FTRT__MSG_LEDGER) return ftrt__ledger_take(c, w, payload, h->len);
    union {
        ftrt__heartbeat hb;
        ftrt__report rep;
        ftrt__resumed_msg rm;
        ftrt__epoch_msg em;
        ftrt__ckpt_msg cm;
        ftrt__bye bye;
        ftrt__fingerprint_msg fpm;
        ftrt__coord_at at;
    } u;
    if (h->len > sizeof u) return FTRT_EPROTO;
    memcpy(&u, payload, h->len);
    switch (h->type) {
    case FTRT__MSG_HEARTBEAT: take_heartbeat(c, w, &u.hb); return 0;
    case FTRT__MSG_REPORT: take_report(c, r, &u.rep); return 0;
    case FTRT__MSG_RESUMED: take_resumed(c, r, &u.rm); return 0;
    case FTRT__MSG_SHARD_DONE:
        if (u.cm.epoch == c->epoch && c->phase == PH_RUNNING)
            ftrt__commit_shard_done(c, w, &u.cm);
        else ftrt__drain_hold_shard_done(c, w, &u.cm); /* (else abandoned) */
        return 0;
    case FTRT__MSG_FINGERPRINT: ftrt__sdc_vote_take(c, w, &u.fpm); return 0;
    case FTRT__MSG_BYE: take_bye(c, w, &u.bye); return 0;
    case FTRT__MSG_DRAIN_ME: ftrt__drain_asked(c, w); return 0;
    case FTRT__MSG_STANDBY_AT: ftrt__standby_at(c, w, &u.at); return 0;
    case FTRT__MSG_SYNC_ACK:
        ftrt__standby_ack(c, w, &u.em);
        ftrt__commits_release(c, 0); /* the commits that waited for it */
        ftrt__epoch_release(c);      /* the FAILURE or PLAN that waited for it */
        return 0;
    default: return FTRT_EPROTO;
    }
}

/* Handles every whole message buffered in rx as world rank w's. Returns 0, or FTRT_EPROTO on a
 * malformed one (w is then failed by the caller). */
static int handle_all(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    ftrt__msghdr h;
    const void *payload;
    int rc;
    while (r->fd >= 0 && (rc = ftrt__rx_next(&r->rx, &h, &payload)) == 1)
        if (handle(c, w, &h, payload)) return FTRT_EPROTO;
    return r->fd >= 0 && rc < 0 ? FTRT_EPROTO : 0;
}

/* ---- moves: a rank from its own connection to a newly elected host agent ----------------- */
/* (docs/detection-and-recovery.md "Host agents", Its death.) Its HELLO relayed by host agent h
 * starts the move; MOVE goes out on its own connection once no recovery is in flight; the rank
 * then sends through h only and closes its sending side, and the EOF of its own connection
 * completes the move: everything it sent there has been handled by then, and what h relayed
 * for it meanwhile (held) is handled after it, in order. Nothing is sent twice, nothing is
 * lost, nothing is declared failed. */

/* Sends MOVE to world rank w now if no recovery is in flight (PH_RUNNING, no orphan, no plan
 * held) and it did not say BYE (then it finishes on its own connection). */
static void move_send(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    if (r->move_sent || r->said_bye || c->phase != PH_RUNNING || c->norphans > 0 ||
        c->plan_hold_until > 0)
        return;
    ftrt__epoch_msg m = {.epoch = c->epoch, .value = c->hl[r->move_to].agent_w};
    r->move_sent = 1;
    r->move_t = ftrt__now();
    c->nmoving--;
    ftrt__coord_send(c, w, FTRT__MSG_MOVE, &m, sizeof m);
}

/* World rank w, on its own connection, said HELLO through host agent h: a move begins. */
static void move_begin(ftrt__coord *c, int h, int w)
{
    ftrt__crank *r = &c->r[w];
    if (r->move_to == h) return; /* (again: nothing new) */
    if (r->move_to < 0 || r->move_sent) c->nmoving++;
    r->move_to = h;
    r->move_sent = 0; /* (a MOVE toward another agent before: the rank ignores it) */
    ftrt__tx_free(&r->held);
    ftrt_log_info("world rank %d (%s) moves to the host agent in world rank %d", w, r->host,
                  c->hl[h].agent_w);
    move_send(c, w);
}

void ftrt__moves_due(ftrt__coord *c)
{
    if (c->phase != PH_RUNNING || c->norphans > 0 || c->plan_hold_until > 0) return;
    for (int w = 1; w < c->Wused && c->nmoving > 0; w++)
        if (c->r[w].move_to >= 0 && !c->r[w].move_sent) move_send(c, w);
}

/* The EOF of moving world rank w's own connection, after its MOVE: w is served by its new host
 * agent from now on, and what that agent relayed for it meanwhile is handled. lost: that agent
 * reported w silent or malformed (move_lost): w is its rank, to be declared failed. */
static void move_done(ftrt__coord *c, int w, int lost)
{
    ftrt__crank *r = &c->r[w];
    int h = r->move_to;
    ftrt__rxbuf held = {.buf = r->held.buf, .used = r->held.used, .cap = r->held.cap};
    r->held = (ftrt__txbuf){0};
    r->move_to = -1;
    r->move_sent = 0;
    ftrt__silence_remove(c, w);
    size_t unsent = ftrt__tx_close(c, w); /* (w read its MOVE: rarely anything after it) */
    close(r->fd);
    r->fd = -1;
    ftrt__rx_free(&r->rx);
    r->link = h;
    c->hl[h].nranks++;
    r->last_heard = ftrt__now();
    c->status_dirty |= 2;
    if (lost)
        ftrt_log_warn("world rank %d (%s), moving to the host agent in world rank %d, is lost "
                      "to it: that agent's rank now, to be fenced", w, r->host, c->hl[h].agent_w);
    else
        ftrt_log_warn("world rank %d (%s) moved to the host agent in world rank %d (%.1f ms "
                      "after its MOVE)", w, r->host, c->hl[h].agent_w,
                      (r->last_heard - r->move_t) * 1e3);
    ftrt__msghdr m;
    const void *p;
    int rc;
    while (r->link == h && (rc = ftrt__rx_next(&held, &m, &p)) == 1)
        if (handle(c, w, &m, p)) {
            rc = -1;
            break;
        }
    ftrt__rx_free(&held);
    if (r->link == h && rc < 0) {
        c->protocol_errors++;
        ftrt_log_error("malformed message from world rank %d", w);
        ftrt__fail(c, w, FK_PROTOCOL);
    }
    if (r->link == h && unsent) ftrt__rank_catch_up(c, w); /* what its own connection lost */
}

/* What host agent h relayed for world rank w while w moves to it and its own connection is
 * still open: kept until that connection's end (move_done). Returns 0 or FTRT_EPROTO. */
static int move_hold(ftrt__coord *c, int w, const ftrt__msghdr *ih, const void *inner)
{
    if (ih->type == FTRT__MSG_HELLO) return 0;
    return ftrt__tx_put(&c->r[w].held, ih->type, inner, ih->len, 0, NULL, 0) ? FTRT_EPROTO : 0;
}

void ftrt__service(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    ssize_t got = ftrt__rx_fill(&r->rx, r->fd);
    if (got == -EAGAIN) return;
    if (got == 0 && r->move_to >= 0 && r->move_sent) {
        move_done(c, w, 0);
        return;
    }
    if (got <= 0) {
        if (r->said_bye || c->phase == PH_ABORTING) ftrt__coord_drop(c, w);
        else ftrt__fail(c, w, FK_CONNECTION_LOST);
        return;
    }
    r->last_heard = ftrt__now();
    if (r->remote) c->offhost_heard = r->last_heard;
    if (!r->said_bye) ftrt__silence_touch(c, w);
    if (handle_all(c, w)) {
        c->protocol_errors++;
        ftrt_log_error("malformed message from world rank %d", w);
        ftrt__fail(c, w, FK_PROTOCOL);
    }
}

/* ---- host agents ------------------------------------------------------------------------- */

/* A rank's HELLO relayed by host agent h: the rank joins through it (or comes back through it
 * after its own agent was lost). Returns 0, or FTRT_EPROTO for a HELLO that can never be
 * right (a wrong secret: the agent let it through). */
static int host_attach(ftrt__coord *c, int h, int w, const ftrt__hello *hello)
{
    ftrt__crank *r = &c->r[w];
    if (hello->secret != c->secret) return FTRT_EPROTO;
    if (r->link == h) return 0;                       /* again: nothing new */
    if (r->hello && r->role == FTRT__ROLE_FAILED) return 0; /* too late */
    if (r->hello && r->fd >= 0) { /* on its own connection: it moves to this agent */
        move_begin(c, h, w);
        return 0;
    }
    int rejoined = r->hello;
    r->back_takeover = r->orphan_coord && r->orphan_until > 0;
    if (rejoined) ftrt__coord_drop(c, w);
    else c->nhello++;
    r->link = h;
    c->hl[h].nranks++;
    ftrt__rank_identify(c, w, hello);
    if (rejoined) ftrt__rank_rejoined(c, w);
    return 0;
}

/* One RELAY from host agent h. Messages of a rank it does not serve (one that left it for its
 * own connection, or was declared failed) are stale and dropped. */
static int host_relay(ftrt__coord *c, int h, const void *payload, size_t len)
{
    int32_t w;
    ftrt__msghdr ih;
    const void *inner;
    if (ftrt__relay_open(payload, len, &w, &ih, &inner) || w >= c->Wused) return FTRT_EPROTO;
    if (ih.type == FTRT__MSG_HELLO) {
        ftrt__hello hello;
        if (ih.len != sizeof hello) return FTRT_EPROTO;
        memcpy(&hello, inner, sizeof hello);
        if (hello.world_rank != w) return FTRT_EPROTO;
        return host_attach(c, h, w, &hello);
    }
    if (c->r[w].move_to == h && c->r[w].fd >= 0) return move_hold(c, w, &ih, inner);
    if (c->r[w].link != h) return 0;
    c->r[w].last_heard = ftrt__now();
    if (handle(c, w, &ih, inner)) {
        c->protocol_errors++;
        ftrt_log_error("malformed message from world rank %d (through the host agent of %s)", w,
                       c->hl[h].host);
        ftrt__fail(c, w, FK_PROTOCOL);
    }
    return 0;
}

/* HOST_BEAT: the newest heartbeat of each rank host agent h serves. */
static int host_beat(ftrt__coord *c, int h, const void *payload, size_t len)
{
    ftrt__host_beat *b = malloc(len);
    if (!b) return 0; /* a lost beat is not a protocol error: the next one follows */
    memcpy(b, payload, len);
    int rc = ftrt__host_beat_check(b, len);
    double now = ftrt__now();
    for (int i = 0; !rc && i < b->n; i++) {
        int w = b->e[i].world_rank;
        if (w < 1 || w >= c->Wused || c->r[w].link != h) continue;
        c->r[w].last_heard = now;
        take_heartbeat(c, w, &b->e[i].hb);
    }
    free(b);
    return rc;
}

/* Host agent h lost world rank w (RANK_LOST, why: FTRT__LOST_*) while w moves to it. What w's
 * own connection holds is read first: its end after MOVE completes the move, and w is then h's
 * rank, declared failed by the caller at once. A rank silent to h, or malformed, is made h's
 * rank here (so that h fences it, CUT with fence) and declared failed by the caller at once
 * too. A rank whose socket to h closed (why CLOSED) otherwise stays on its own connection, the
 * move called off: one that died ends that connection too within moments, which declares it
 * failed at once (connection_lost, ftrt__service), not after an orphan's grace; one that left
 * h alive (h did not answer it in time: runtime/agent_move.c) goes on there and tries another
 * election later. Meanwhile a recovery's plan waits for it (ftrt__host_suspect). */
static void move_lost(ftrt__coord *c, int h, int w, int why)
{
    ftrt__crank *r = &c->r[w];
    struct pollfd pf = {.fd = r->fd, .events = POLLIN};
    while (r->fd >= 0 && r->move_to == h && poll(&pf, 1, 0) > 0) ftrt__service(c, w);
    if (r->move_to != h || r->link == h || r->fd < 0) return; /* moved, or failed */
    if (!r->move_sent) c->nmoving--;
    if (why != FTRT__LOST_CLOSED) {
        move_done(c, w, 1);
        return;
    }
    if (r->move_sent) ftrt__host_suspect(c, w, 0);
    r->move_to = -1;
    r->move_sent = 0;
    ftrt__tx_free(&r->held);
    ftrt_log_warn("world rank %d (%s) left the host agent in world rank %d before its move "
                  "ended: it stays on its own connection, whose end declares it failed", w,
                  r->host, c->hl[h].agent_w);
}

/* RANK_LOST: a rank of host agent h's host died (its socket closed without BYE) or fell
 * silent for the heartbeat timeout; the agent saw it first. */
static int host_rank_lost(ftrt__coord *c, int h, const void *payload)
{
    ftrt__rank_lost m;
    memcpy(&m, payload, sizeof m);
    int w = m.world_rank;
    if (w >= 1 && w < c->Wused && c->r[w].move_to == h && c->r[w].link != h)
        move_lost(c, h, w, m.why); /* (then h's rank, failed below; or on its own connection) */
    if (w < 1 || w >= c->Wused || c->r[w].link != h) return 0; /* not (or no longer) its rank */
    if (c->r[w].said_bye || c->phase == PH_ABORTING) {
        ftrt__coord_drop(c, w);
        return 0;
    }
    ftrt__fail(c, w, m.why == FTRT__LOST_SILENT     ? FK_HEARTBEAT_TIMEOUT
                     : m.why == FTRT__LOST_PROTOCOL ? FK_PROTOCOL
                                                    : FK_CONNECTION_LOST);
    return 0;
}

/* One message from host agent h. Returns 0 or FTRT_EPROTO. */
static int host_handle(ftrt__coord *c, int h, const ftrt__msghdr *m, const void *payload)
{
    switch (m->type) {
    case FTRT__MSG_RELAY: return host_relay(c, h, payload, m->len);
    case FTRT__MSG_HOST_BEAT: return host_beat(c, h, payload, m->len);
    case FTRT__MSG_RANK_LOST: return host_rank_lost(c, h, payload);
    case FTRT__MSG_RELAY_AT: return ftrt__relay_on_at(c, h, payload);
    case FTRT__MSG_RELAY_PEER: return ftrt__relay_on_peer(c, h, payload);
    default: return FTRT_EPROTO;
    }
}

void ftrt__service_host(ftrt__coord *c, int h)
{
    ftrt__hlink *l = &c->hl[h];
    ssize_t got = ftrt__rx_fill(&l->rx, l->fd);
    if (got == -EAGAIN && l->rx.used == 0) return; /* (bytes may be buffered: at its adoption) */
    if (got == 0 || (got < 0 && got != -EAGAIN)) {
        ftrt__host_lost(c, h, FK_CONNECTION_LOST);
        return;
    }
    if (got > 0) {
        l->last_heard = ftrt__now();
        if (l->remote) c->offhost_heard = l->last_heard;
        ftrt__silence_touch(c, c->W + h);
    }
    ftrt__msghdr m;
    const void *payload;
    int rc;
    while (l->fd >= 0 && (rc = ftrt__rx_next(&l->rx, &m, &payload)) == 1)
        if (host_handle(c, h, &m, payload)) {
            rc = FTRT_EPROTO;
            break;
        }
    if (l->fd >= 0 && rc < 0) {
        c->protocol_errors++;
        ftrt_log_error("malformed message from the host agent of %s", l->host);
        ftrt__host_lost(c, h, FK_PROTOCOL);
    }
}

/* ---- a rank that came back --------------------------------------------------------------- */

/* What job_abort() sent it: ABORT to a member, SHUTDOWN with the code to a spare. */
static void resend_abort(ftrt__coord *c, int w)
{
    int spare = c->r[w].role == FTRT__ROLE_SPARE;
    ftrt__epoch_msg m = {.epoch = c->epoch, .value = c->result};
    ftrt__coord_send(c, w, spare ? FTRT__MSG_SHUTDOWN : FTRT__MSG_ABORT, &m, sizeof m);
}

void ftrt__rank_rejoined(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    ftrt__takeover_reached(c, w); /* (a takeover's claim of the term) */
    if (c->phase == PH_INIT) return; /* its WELCOME comes with everyone's */
    /* Its host agent was lost, perhaps with its host: the coordinator may not have read that
     * loss yet (this rank was quicker), so the plan's wait for the host starts here too. Back
     * after a takeover, no host agent was lost: only the old coordinator's host is suspect. */
    if (!r->back_takeover || ftrt__takeover_suspect(c, w)) ftrt__host_suspect(c, w, 0);
    if (c->phase != PH_ABORTING && c->phase != PH_DONE) {
        ftrt__welcome wm = {.role = r->role, .logical_rank = r->logical, .ntrainers = c->N,
                            .heartbeat_ms = c->hb_ms};
        ftrt__coord_send(c, w, FTRT__MSG_WELCOME, &wm, sizeof wm); /* (a repeat is ignored) */
    }
    ftrt__rank_catch_up(c, w);
}

void ftrt__join_welcome(ftrt__coord *c, int w)
{
    ftrt__join_ok ok = {.welcome = {.role = FTRT__ROLE_SPARE, .logical_rank = -1,
                                    .ntrainers = c->N, .epoch = c->epoch,
                                    .heartbeat_ms = c->hb_ms},
                        .slot = w, .world_size = c->Wworld, .tag = c->a->join_tag};
    ftrt__coord_send(c, w, FTRT__MSG_JOIN_OK, &ok, sizeof ok);
    ftrt__standby_tell(c, w); /* (where the standby coordinator listens, if there is one) */
}

void ftrt__rank_catch_up(ftrt__coord *c, int w)
{
    const ftrt__crank *r = &c->r[w];
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) {
        resend_abort(c, w);
        return;
    }
    ftrt__standby_tell(c, w);
    if (r->said_bye) return; /* its FAREWELL comes at the job's end, on its new connection */
    if (r->role != FTRT__ROLE_TRAINER) return;
    if (c->phase == PH_COLLECT && !r->promoting && !c->failure_due) {
        ftrt__failure_msg fm = {.epoch = c->epoch, .t_fail_wall = c->epoch_t_fail};
        ftrt__coord_send(c, w, FTRT__MSG_FAILURE, &fm, sizeof fm);
    } else if (c->phase == PH_RESUMING && r->resumed_epoch != c->epoch) {
        ftrt__epoch_resend_plan(c, w);
    }
    if (c->last_commit.step >= 0)
        ftrt__coord_send(c, w, FTRT__MSG_COMMIT, &c->last_commit, sizeof c->last_commit);
}

/* Every rank of a link marked catch_up (its relay lost: fanout.c) is caught up, one pass over
 * the world, marks cleared. Called by the loop at the end of its turn (coordinator.c), not by
 * fanout.c itself, so that the fan-out stays below what it would resend (epoch.c, standby.c). */
void ftrt__links_catch_up(ftrt__coord *c)
{
    c->catch_up_due = 0;
    for (int w = 1; w < c->Wused; w++) {
        int h = c->r[w].link;
        if (h >= 0 && c->hl[h].catch_up) ftrt__rank_catch_up(c, w);
    }
    for (int h = 0; h < c->nhl; h++) c->hl[h].catch_up = 0;
}

/* The head of the watch, oldest first, O(1) per connection looked at. Bytes that arrived while
 * the loop was busy (a long fan-out) are not silence: a connection with something to read is
 * read first. */
void ftrt__tx_check(ftrt__coord *c, double now)
{
    int id;
    while (c->phase != PH_ABORTING && c->phase != PH_DONE && (id = ftrt__tx_due(c, now)) > 0) {
        if (id < c->W) ftrt__fail(c, id, FK_HEARTBEAT_TIMEOUT);
        else ftrt__host_lost(c, id - c->W, FK_HEARTBEAT_TIMEOUT);
        if (c->txw_head == id) ftrt__tx_close(c, id); /* (not dropped: the coordinator's own) */
    }
}

void ftrt__check_timeouts(ftrt__coord *c, double now)
{
    double limit = c->a->cfg->heartbeat_timeout_ms / 1000.0;
    while (c->watch_head && c->phase != PH_ABORTING && c->phase != PH_DONE) {
        int id = c->watch_head;
        if (now - ftrt__silence_last(c, id) <= limit) break;
        int fd = id < c->W ? c->r[id].fd : c->hl[id - c->W].fd;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (fd >= 0 && poll(&pf, 1, 0) > 0) {
            if (id < c->W) ftrt__service(c, id);
            else ftrt__service_host(c, id - c->W);
            if (c->watch_head != id || now - ftrt__silence_last(c, id) <= limit) continue;
        }
        if (c->watch_head == id && id < c->W) ftrt__fail(c, id, FK_HEARTBEAT_TIMEOUT);
        else if (c->watch_head == id) ftrt__host_lost(c, id - c->W, FK_HEARTBEAT_TIMEOUT);
        if (c->watch_head == id) ftrt__silence_remove(c, id); /* (not failed: the coordinator) */
    }
}

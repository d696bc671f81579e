/*
 * fanout.c - the coordinator's fan-outs (one message to many ranks: FAILURE, PLAN, COMMIT,
 * ABORT, NEXT_COORD, the job's end) and the relay groups they go through at scale
 * (docs/detection-and-recovery.md "Relay groups").
 *
 * A fan-out to ranks with their own connection is one send each; to ranks behind host agents
 * it is one MULTI per host agent, or, with relay groups, one FANOUT per group: the host agents
 * (links, in the order they joined) form groups of G consecutive links, and one link of each
 * group is its relay (relay_of: the group's first live link that listens, RELAY_AT), which
 * every other host agent of the group connects to (RELAY_VIA, PEER_HELLO; the relay confirms
 * each with RELAY_PEER). A group's FANOUT carries each of its hosts' rank list and the message
 * once; the relay delivers its own part and sends every other part on as a MULTI. The
 * coordinator's sends per fan-out fall from H (the host agents) to about H / G + the links not
 * (yet) behind a relay; G = ceil(sqrt(W / 8)), about sqrt(H) at 8 ranks a host, so the relays'
 * sends are about as many as the coordinator's.
 *
 * A relay lost (its host agent's connection: host_lost), or a member's connection to it closed
 * (RELAY_PEER up 0), sends that member's fan-outs directly: it is told to close its connection
 * to the relay (RELAY_VIA, port 0) and each of its ranks is caught up with what a relayed
 * fan-out may have carried (ftrt__rank_catch_up: the epoch's FAILURE or PLAN, the newest
 * COMMIT, the abort, the standby), as a rank that comes back after its host agent was lost is.
 * A member whose connection closed while its relay lives is told that relay again at once
 * (RELAY_VIA), up to FTRT__RELAY_REJOINS times a job (a member that keeps losing it, say one
 * too slow to read what the relay sends on, stays direct): once the relay confirms it again
 * (RELAY_PEER up 1) its fan-outs go through the relay as before.
 * A lost relay's group then gets a new relay by the same rule (the first live link left that
 * listens): its other members are told where it listens (RELAY_VIA) and, once it confirms
 * each (RELAY_PEER up 1), their fan-outs go through it again; until then they go directly. A
 * fan-out to a link goes one way only, so the change neither duplicates one nor loses one
 * (what the lost relay held is what the catch-up sends again; a rank takes a repeat of it as
 * the first).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

void ftrt__relay_init(ftrt__coord *c)
{
    int g = ftrt__knobs.relay_group;
    if (g <= 0) { /* about sqrt(hosts) at 8 ranks a host; none below 16 a group */
        g = (int)ceil(sqrt((c->W - 1) / 8.0));
        if (g < 16) g = 1;
    }
    c->relay_g = g;
    for (int x = 0; c->relay_of && x < c->W; x++) c->relay_of[x] = -1;
}

/* The relay of link h's group (relay_of), or -1: none (yet). */
static int leader(const ftrt__coord *c, int h)
{
    return c->relay_of[h / c->relay_g];
}

/* Whether relay `lead` is alive and listening. */
static int relay_ready(const ftrt__coord *c, int lead)
{
    return lead >= 0 && lead < c->nhl && c->hl[lead].fd >= 0 && c->hl[lead].relay_at != NULL;
}

static void send_via(ftrt__coord *c, int h, const ftrt__coord_at *at)
{
    if (c->hl[h].fd < 0) return;
    if (at->port > 0) { /* once: a second RELAY_VIA would make it reconnect, and its first
                         * connection's close, reported by the relay, end its membership */
        if (c->hl[h].via_told) return;
        c->hl[h].via_told = 1;
    }
    int rc = ftrt__link_send(c, h, FTRT__MSG_RELAY_VIA, at, sizeof *at, 0, NULL, 0);
    if (rc) ftrt_log_debug("RELAY_VIA to host agent %d failed: %s", h, ftrt_strerror(rc));
}

/* Tells every other live link of relay lead's group where lead listens (RELAY_VIA). */
static void tell_members(ftrt__coord *c, int lead)
{
    int first = lead - lead % c->relay_g;
    for (int m = first; m < first + c->relay_g && m < c->nhl; m++)
        if (m != lead && c->hl[m].fd >= 0) send_via(c, m, c->hl[lead].relay_at);
}

/* Group g's relay from now on: its first live link that listens (said RELAY_AT), else none
 * (-1: the next link of the group to say RELAY_AT becomes it). Returns it. */
static int appoint(ftrt__coord *c, int g)
{
    int first = g * c->relay_g, lead = -1;
    for (int m = first; m < first + c->relay_g && m < c->nhl && lead < 0; m++)
        if (relay_ready(c, m)) lead = m;
    c->relay_of[g] = lead;
    return lead;
}

int ftrt__relay_on_at(ftrt__coord *c, int h, const void *payload)
{
    ftrt__hlink *l = &c->hl[h];
    if (c->relay_g < 2 || l->relay_at) return 0; /* (no groups; a repeat is ignored) */
    ftrt__coord_at at;
    memcpy(&at, payload, sizeof at);
    at.addrs[sizeof at.addrs - 1] = 0;
    if (at.port <= 0 || at.port > 65535) return FTRT_EPROTO;
    l->relay_at = malloc(sizeof *l->relay_at);
    if (l->relay_at) { /* (else it can be no relay, only a member) */
        *l->relay_at = at;
        l->relay_at->world_rank = l->agent_w;
    }
    int lead = leader(c, h) >= 0 ? leader(c, h) : appoint(c, h / c->relay_g);
    if (h != lead) { /* a member: to its relay, once that one listens */
        if (relay_ready(c, lead)) send_via(c, h, c->hl[lead].relay_at);
        return 0;
    }
    tell_members(c, h);
    return 0;
}

/* Link m's fan-outs go directly from now on (its relay is lost, or its connection to it): it
 * closes its connection to the relay (RELAY_VIA port 0). Returns 1 when its ranks are to be
 * caught up (ftrt__links_catch_up). */
static int relay_fall_back(ftrt__coord *c, int m)
{
    ftrt__hlink *l = &c->hl[m];
    if (l->via < 0) return 0;
    c->hl[l->via].nvia--;
    l->via = -1;
    if (l->fd < 0) return 0;
    ftrt__coord_at none = {.world_rank = -1, .term = c->term};
    send_via(c, m, &none);
    if (c->phase == PH_INIT || c->phase == PH_DONE) return 0; /* nothing relayed to catch up on */
    ftrt_log_warn("host agent of %s: fan-outs go to it directly from now on (its relay is lost)",
                  l->host);
    l->catch_up = 1;
    return 1;
}

/* Member m's connection to live relay `lead` closed (it fell back): it is told the relay again
 * (RELAY_VIA), at most FTRT__RELAY_REJOINS times a job. */
static void relay_rejoin(ftrt__coord *c, int m, int lead)
{
    ftrt__hlink *l = &c->hl[m];
    if (c->phase == PH_DONE || l->fd < 0 || !relay_ready(c, lead)) return;
    if (l->rejoins >= FTRT__RELAY_REJOINS) {
        ftrt_log_warn("host agent of %s: its connection to the relay of %s closed %d times: its "
                      "fan-outs stay direct", l->host, c->hl[lead].host, l->rejoins + 1);
        return;
    }
    l->rejoins++;
    l->via_told = 0;
    ftrt_log_info("host agent of %s: its connection to the relay of %s closed; told that relay "
                  "again (%d of %d)", l->host, c->hl[lead].host, l->rejoins, FTRT__RELAY_REJOINS);
    send_via(c, m, c->hl[lead].relay_at);
}

int ftrt__relay_on_peer(ftrt__coord *c, int h, const void *payload)
{
    ftrt__relay_peer rp;
    memcpy(&rp, payload, sizeof rp);
    if (h != leader(c, h) || !c->hl[h].relay_at) return FTRT_EPROTO; /* not a relay */
    int first = h - h % c->relay_g;
    for (int m = first; m < first + c->relay_g && m < c->nhl; m++) {
        ftrt__hlink *l = &c->hl[m];
        if (m == h || l->agent_w != rp.world_rank || l->fd < 0) continue;
        if (rp.up && l->via < 0) {
            l->via = h;
            c->hl[h].nvia++;
            c->status_dirty |= 2; /* (the status file names each rank's relay) */
            ftrt_log_info("host agent of %s (in world rank %d): fan-outs through the relay of %s "
                          "(in world rank %d)", l->host, l->agent_w, c->hl[h].host,
                          c->hl[h].agent_w);
        } else if (!rp.up && l->via == h) {
            c->status_dirty |= 2;
            if (relay_fall_back(c, m))
                c->catch_up_due = 1; /* (ftrt__links_catch_up, at the end of the loop's turn) */
            relay_rejoin(c, m, h);
        }
        return 0;
    }
    return 0; /* (a host agent lost meanwhile) */
}

/* Relay h of group g is lost: its members fall back (caught up), and the group gets a new
 * relay, which the others are told of. The new one closes any connection it has to the old
 * (RELAY_VIA port 0); every other member may be told where a relay listens once more. */
static void relay_replace(ftrt__coord *c, int h, int g)
{
    int any = 0, first = g * c->relay_g;
    for (int m = first; c->hl[h].nvia > 0 && m < first + c->relay_g && m < c->nhl; m++)
        if (c->hl[m].via == h) {
            any |= relay_fall_back(c, m);
            c->hl[m].via_told = 0; /* (told to close its connection to it: RELAY_VIA port 0) */
        }
    if (any) c->catch_up_due = 1; /* (ftrt__links_catch_up, at the end of the loop's turn) */
    c->relay_of[g] = -1;
    free(c->hl[h].relay_at);
    c->hl[h].relay_at = NULL;
    int lead = c->phase == PH_DONE ? -1 : appoint(c, g);
    if (lead < 0) return;
    ftrt__coord_at none = {.world_rank = -1, .term = c->term};
    if (c->hl[lead].via_told) send_via(c, lead, &none); /* (told, not yet confirmed) */
    for (int m = first; m < first + c->relay_g && m < c->nhl; m++) c->hl[m].via_told = 0;
    ftrt_log_info("host agent of %s (in world rank %d): the relay of its group from now on (the "
                  "relay of %s is lost)", c->hl[lead].host, c->hl[lead].agent_w, c->hl[h].host);
    tell_members(c, lead);
}

void ftrt__relay_link_lost(ftrt__coord *c, int h)
{
    ftrt__hlink *l = &c->hl[h];
    if (c->relay_g < 2) return;
    if (l->via >= 0) { /* a member */
        c->hl[l->via].nvia--;
        l->via = -1;
    }
    if (leader(c, h) == h) {
        relay_replace(c, h, h / c->relay_g);
        return;
    }
    free(l->relay_at);
    l->relay_at = NULL;
}

/* ---- the fan-out ------------------------------------------------------------------------ */

/* Whether this fan-out may go through the relays: the messages a relay lost can be caught up
 * on (ftrt__rank_catch_up), not the job's normal end (FAREWELL, its SHUTDOWN). */
static int relayable(const ftrt__coord *c, uint32_t type)
{
    if (c->relay_g < 2) return 0;
    return type == FTRT__MSG_FAILURE || type == FTRT__MSG_PLAN || type == FTRT__MSG_COMMIT ||
           type == FTRT__MSG_ABORT || type == FTRT__MSG_NEXT_COORD ||
           (type == FTRT__MSG_SHUTDOWN && c->phase == PH_ABORTING);
}

/* Link h's fan-outs go through relay `lead` (h may be the relay itself; -1: no relay). */
static int relayed(const ftrt__coord *c, int h, int lead)
{
    return lead >= 0 && c->hl[lead].nvia > 0 && c->hl[lead].fd >= 0 &&
           (h == lead || c->hl[h].via == lead);
}

/* Lays out the per-link rank lists in mc_list: each relayed group's parts together after 2
 * free entries (the FANOUT prefix), each part after 2 (its {n, agent_w} or MULTI prefix); the
 * direct links' runs after. mc_cnt[h] holds the counts; mc_off[h] receives each run's start;
 * grp_off[g] each group's (-1: none). */
static void layout(ftrt__coord *c, int relay, int *grp_off)
{
    int *cnt = c->mc_cnt, *off = c->mc_off, at = 0;
    for (int first = 0; relay && first < c->nhl; first += c->relay_g) {
        int g = first / c->relay_g, lead = c->relay_of[g];
        grp_off[g] = -1;
        for (int h = first; h < first + c->relay_g && h < c->nhl; h++) {
            off[h] = -1;
            if (!cnt[h] || !relayed(c, h, lead)) continue;
            if (grp_off[g] < 0) {
                grp_off[g] = at;
                at += 2;
            }
            off[h] = at + 2;
            at += cnt[h] + 2;
        }
    }
    for (int h = 0; h < c->nhl; h++) {
        if (relay && off[h] >= 0) continue;
        off[h] = at + 2;
        at += cnt[h] ? cnt[h] + 2 : 0;
    }
}

/* One MULTI to host agent h for its cnt world ranks at list (2 free entries before it). */
static void multi_send(ftrt__coord *c, int h, int *list, int cnt, uint32_t type, const void *p,
                       uint32_t len)
{
    if (c->hl[h].fd < 0 || cnt == 0) return;
    int32_t *pre = (int32_t *)list - 2;
    pre[0] = cnt;
    pre[1] = 0;
    int rc = ftrt__link_send(c, h, FTRT__MSG_MULTI, pre,
                             (uint32_t)((size_t)(cnt + 2) * sizeof(int32_t)), type, p, len);
    if (rc) ftrt_log_debug("multicast to host agent %d failed: %s", h, ftrt_strerror(rc));
}

/* One FANOUT to relay `lead` with its group's parts (laid out from grp_off). */
static void fanout_send(ftrt__coord *c, int lead, int grp_off, uint32_t type, const void *p,
                        uint32_t len)
{
    int *list = c->mc_list, nparts = 0, end = grp_off + 2, first = lead - lead % c->relay_g;
    for (int h = first; h < first + c->relay_g && h < c->nhl; h++) {
        if (!c->mc_cnt[h] || c->mc_off[h] < 0 || !relayed(c, h, lead)) continue;
        list[c->mc_off[h] - 2] = c->mc_cnt[h];
        list[c->mc_off[h] - 1] = c->hl[h].agent_w;
        end = c->mc_off[h] + c->mc_cnt[h];
        nparts++;
    }
    list[grp_off] = nparts;
    list[grp_off + 1] = 0;
    int rc = ftrt__link_send(c, lead, FTRT__MSG_FANOUT, list + grp_off,
                             (uint32_t)((size_t)(end - grp_off) * sizeof(int32_t)), type, p, len);
    if (rc) ftrt_log_debug("fan-out to relay %d failed: %s", lead, ftrt_strerror(rc));
}

void ftrt__coord_multicast(ftrt__coord *c, const int *ws, int n, uint32_t type, const void *p,
                           uint32_t len)
{
    int *cnt = c->mc_cnt, *off = c->mc_off, *list = c->mc_list;
    int relay = relayable(c, type), *grp_off = c->mc_grp;
    for (int h = 0; h < c->nhl; h++) cnt[h] = 0;
    for (int i = 0; i < n; i++) {
        const ftrt__crank *r = &c->r[ws[i]];
        if (r->fd >= 0) ftrt__coord_send(c, ws[i], type, p, len);
        else if (r->link >= 0) cnt[r->link]++;
    }
    layout(c, relay, grp_off);
    for (int h = 0; h < c->nhl; h++) cnt[h] = 0;
    for (int i = 0; i < n; i++) {
        const ftrt__crank *r = &c->r[ws[i]];
        if (r->fd < 0 && r->link >= 0) list[off[r->link] + cnt[r->link]++] = ws[i];
    }
    /* the relays first (each reaches a group), then the hosts sent to directly */
    for (int g = 0; relay && g * c->relay_g < c->nhl; g++)
        if (grp_off[g] >= 0) fanout_send(c, c->relay_of[g], grp_off[g], type, p, len);
    for (int h = 0; h < c->nhl; h++) {
        if (!relay || !relayed(c, h, leader(c, h))) multi_send(c, h, list + off[h], cnt[h], type, p, len);
        if ((h & 255) == 255) ftrt__ping_due(c, ftrt__now());
    }
    ftrt__ping_due(c, ftrt__now());
}

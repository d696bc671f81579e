/* proto.c - control-plane message framing and validation; see proto.h. */
#include "base/proto.h"

#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ftrt.h"

size_t ftrt__plan_size(int n) { return sizeof(ftrt__plan) + 3 * (size_t)n * sizeof(int32_t); }

static size_t fixed_size(uint32_t type)
{
    switch (type) {
    case FTRT__MSG_HELLO: return sizeof(ftrt__hello);
    case FTRT__MSG_WELCOME: return sizeof(ftrt__welcome);
    case FTRT__MSG_HEARTBEAT: return sizeof(ftrt__heartbeat);
    case FTRT__MSG_FAILURE: return sizeof(ftrt__failure_msg);
    case FTRT__MSG_HOST_HELLO: return sizeof(ftrt__hello);
    case FTRT__MSG_RANK_LOST: return sizeof(ftrt__rank_lost);
    case FTRT__MSG_CUT: return sizeof(ftrt__cut);
    case FTRT__MSG_STANDBY_AT:
    case FTRT__MSG_RELAY_AT:
    case FTRT__MSG_RELAY_VIA:
    case FTRT__MSG_NEXT_COORD: return sizeof(ftrt__coord_at);
    case FTRT__MSG_PEER_HELLO: return sizeof(ftrt__hello);
    case FTRT__MSG_RELAY_PEER: return sizeof(ftrt__relay_peer);
    case FTRT__MSG_STANDBY:
    case FTRT__MSG_SYNC_ACK:
    case FTRT__MSG_MOVE:
    case FTRT__MSG_HOSTED:
    case FTRT__MSG_COORD_LOST:
    case FTRT__MSG_SHUTDOWN:
    case FTRT__MSG_FAREWELL:
    case FTRT__MSG_PING:
    case FTRT__MSG_DRAIN_ME:
    case FTRT__MSG_ABORT: return sizeof(ftrt__epoch_msg);
    case FTRT__MSG_DRAIN: return sizeof(ftrt__drain_msg);
    case FTRT__MSG_RESUMED: return sizeof(ftrt__resumed_msg);
    case FTRT__MSG_REPORT: return sizeof(ftrt__report);
    case FTRT__MSG_SHARD_DONE:
    case FTRT__MSG_COMMIT: return sizeof(ftrt__ckpt_msg);
    case FTRT__MSG_BYE: return sizeof(ftrt__bye);
    case FTRT__MSG_FINGERPRINT: return sizeof(ftrt__fingerprint_msg);
    case FTRT__MSG_JOIN: return sizeof(ftrt__join);
    case FTRT__MSG_JOIN_OK: return sizeof(ftrt__join_ok);
    case FTRT__MSG_JOIN_REFUSED: return sizeof(ftrt__join_refused);
    default: return 0;
    }
}

/* The largest PLAN payload (ftrt__plan_msg with every count at FTRT__MAX_WORLD), and the most a
 * RELAY or MULTI may wrap around one (a MULTI's list holds at most FTRT__MAX_WORLD ranks). */
#define PLAN_MAX (sizeof(ftrt__plan_msg) + 4 * (size_t)FTRT__MAX_WORLD * sizeof(int32_t))
#define WRAP_MAX (sizeof(ftrt__multi) + (size_t)FTRT__MAX_WORLD * 4 + sizeof(ftrt__msghdr) + \
                  (PLAN_MAX > FTRT__SYNC_MAX ? PLAN_MAX : FTRT__SYNC_MAX))

/* The types whose payload may exceed FTRT__MSG_MAX, and their limit. */
static size_t big_limit(uint32_t type)
{
    if (type == FTRT__MSG_PLAN) return PLAN_MAX;
    if (type == FTRT__MSG_SYNC) return FTRT__SYNC_MAX;
    if (type == FTRT__MSG_RELAY || type == FTRT__MSG_MULTI) return WRAP_MAX;
    if (type == FTRT__MSG_FANOUT) return WRAP_MAX + (size_t)FTRT__MAX_WORLD * 8; /* part heads */
    return FTRT__MSG_MAX;
}

int ftrt__msg_check(const ftrt__msghdr *h)
{
    if (h->magic != FTRT__MAGIC || h->type == 0 || h->type >= FTRT__MSG_TYPE_END ||
        h->len > big_limit(h->type))
        return FTRT_EPROTO;
    if (h->type == FTRT__MSG_RELAY)
        return h->len >= sizeof(ftrt__relay) + sizeof(ftrt__msghdr) ? 0 : FTRT_EPROTO;
    if (h->type == FTRT__MSG_MULTI)
        return h->len >= sizeof(ftrt__multi) + sizeof(ftrt__msghdr) ? 0 : FTRT_EPROTO;
    if (h->type == FTRT__MSG_FANOUT)
        return h->len >= sizeof(ftrt__fanout) + sizeof(ftrt__msghdr) ? 0 : FTRT_EPROTO;
    if (h->type == FTRT__MSG_HOST_BEAT)
        return h->len >= sizeof(ftrt__host_beat) &&
                       (h->len - sizeof(ftrt__host_beat)) % sizeof(ftrt__beat) == 0
                   ? 0
                   : FTRT_EPROTO;
    if (h->type == FTRT__MSG_LEDGER)
        return h->len >= sizeof(ftrt__ledger_msg) &&
                       (h->len - sizeof(ftrt__ledger_msg)) % sizeof(ftrt__interval) == 0
                   ? 0
                   : FTRT_EPROTO;
    if (h->type == FTRT__MSG_SYNC) return 0; /* any size within FTRT__SYNC_MAX */
    if (h->type == FTRT__MSG_PLAN) {
        /* int32 entries: 3 per replaced rank, 1 per member (whole table), each count at most
         * FTRT__MAX_WORLD (ftrt__plan_msg_size) */
        if (h->len < sizeof(ftrt__plan_msg) || (h->len - sizeof(ftrt__plan_msg)) % sizeof(int32_t) ||
            h->len > PLAN_MAX)
            return FTRT_EPROTO;
        return 0;
    }
    return h->len == fixed_size(h->type) ? 0 : FTRT_EPROTO;
}

size_t ftrt__ledger_msg_size(int n)
{
    return sizeof(ftrt__ledger_msg) + (size_t)n * sizeof(ftrt__interval);
}

int ftrt__ledger_msg_check(const ftrt__ledger_msg *m, size_t len)
{
    if (len < sizeof *m || m->n < 0 || len != ftrt__ledger_msg_size(m->n) || m->kind_open < 0 ||
        m->kind_open >= FTRT__IV_KINDS || !isfinite(m->t_open))
        return FTRT_EPROTO;
    for (int k = 0; k < FTRT__IV_KINDS; k++)
        if (!isfinite(m->totals[k]) || m->totals[k] < 0) return FTRT_EPROTO;
    for (int i = 0; i < m->n; i++)
        if (m->iv[i].kind < 0 || m->iv[i].kind >= FTRT__IV_KINDS || !isfinite(m->iv[i].t0) ||
            !isfinite(m->iv[i].t1) || m->iv[i].t1 < m->iv[i].t0)
            return FTRT_EPROTO;
    return 0;
}

int ftrt__plan_check(const ftrt__plan *p, size_t len)
{
    if (len < sizeof *p || p->ntrainers < 1 || p->ntrainers > FTRT__MAX_WORLD ||
        len != ftrt__plan_size(p->ntrainers))
        return FTRT_EPROTO;
    if (p->source < 0 || p->source >= p->ntrainers || p->logical_rank < 0 ||
        p->logical_rank >= p->ntrainers || p->resume_step < 0 || p->nbehind < 0 ||
        p->ndata < 0 || p->ndata >= FTRT__MAX_WORLD ||
        p->nbehind >= p->ntrainers || (p->nbehind > 0 && p->ckpt_step >= 0))
        return FTRT_EPROTO;
    const int32_t *role = ftrt__plan_roles_c(p);
    uint8_t *seen = calloc(FTRT__MAX_WORLD / 8, 1); /* one bit per world rank: duplicates */
    if (!seen) return -ENOMEM;
    int rc = 0;
    for (int i = 0; i < p->ntrainers && !rc; i++) {
        int32_t m = p->members[i];
        if (m < 1 || m >= FTRT__MAX_WORLD || (seen[m / 8] & (1u << (m % 8))) ||
            (role[i] != FTRT__PLAN_UP_TO_DATE && role[i] != FTRT__PLAN_NEEDS_STATE))
            rc = FTRT_EPROTO;
        else
            seen[m / 8] |= (uint8_t)(1u << (m % 8));
    }
    free(seen);
    if (rc) return rc;
    if (role[p->source] != FTRT__PLAN_UP_TO_DATE) return FTRT_EPROTO; /* the source has it */
    const int32_t *ss = ftrt__plan_shard_src_c(p);
    if (p->mem_step >= 0 && (p->ckpt_step >= 0 || p->mem_step != p->resume_step)) return FTRT_EPROTO;
    for (int i = 0; i < p->ntrainers; i++) {
        if (ss[i] == FTRT__SHARD_SRC_ERASURE) { /* rebuilt by its group, in a memory plan */
            if (p->mem_step < 0 || role[i] != FTRT__PLAN_NEEDS_STATE) return FTRT_EPROTO;
            continue;
        }
        if (ss[i] < -1 || ss[i] >= p->ntrainers || ss[i] == i) return FTRT_EPROTO;
        /* an image is sent from a survivor (not a replaced rank: those have a source; it may
         * be behind, with a shard-only image of its own) to a member that needs state, in a
         * memory plan */
        if (ss[i] >= 0 && (p->mem_step < 0 || role[i] != FTRT__PLAN_NEEDS_STATE ||
                           ss[ss[i]] >= 0))
            return FTRT_EPROTO;
    }
    return 0;
}

size_t ftrt__plan_msg_size(int nrepl, int nmembers)
{
    return sizeof(ftrt__plan_msg) + (3 * (size_t)nrepl + (size_t)nmembers) * sizeof(int32_t);
}

int ftrt__plan_msg_check(const ftrt__plan_msg *m, size_t len)
{
    if (len < sizeof *m) return FTRT_EPROTO;
    int n = m->ntrainers;
    if (n < 1 || n >= FTRT__MAX_WORLD || m->nrepl < 0 || m->nrepl > n ||
        (m->nmembers != 0 && m->nmembers != n) ||
        len != ftrt__plan_msg_size(m->nrepl, m->nmembers + (m->nmembers ? m->ndata : 0)) ||
        (m->nmembers == 0) != (m->logical_rank == -1) || m->logical_rank < -1 ||
        m->logical_rank >= n || (m->nmembers == 0) != (m->ndata == 0) || m->ndata < 0 ||
        m->ndata >= FTRT__MAX_WORLD)
        return FTRT_EPROTO;
    /* survivors behind: a peers or memory plan's, fewer than the survivors (the source is up
     * to date) */
    if (m->nbehind < 0 || (m->nbehind > 0 && (m->ckpt_step >= 0 || m->nbehind >= n - m->nrepl)))
        return FTRT_EPROTO;
    const int32_t *d = m->data;
    for (int i = 0; i < m->nrepl; i++, d += 3)
        if (d[0] < 0 || d[0] >= n || d[1] < 1 || d[1] >= FTRT__MAX_WORLD ||
            (d[2] < -1 && d[2] != FTRT__SHARD_SRC_ERASURE) || d[2] >= n)
            return FTRT_EPROTO;
    for (int i = 0; i < m->nmembers; i++, d++)
        if (*d < 1 || *d >= FTRT__MAX_WORLD) return FTRT_EPROTO;
    for (int i = 0; i < m->ndata; i++, d++)
        if (*d < -1 || *d >= n) return FTRT_EPROTO;
    return 0;
}

void ftrt__plan_initial_members(int32_t *members, int n)
{
    for (int l = 0; l < n; l++) members[l] = l + 1;
}

int ftrt__plan_expand(const ftrt__plan_msg *m, size_t len, const int32_t *prev, int prev_n,
                      int logical, ftrt__plan **out, size_t *out_len)
{
    *out = NULL;
    if (ftrt__plan_msg_check(m, len)) return FTRT_EPROTO;
    int n = m->ntrainers;
    const int32_t *repl = m->data, *table = repl + 3 * m->nrepl;
    if (m->nmembers == 0 && (!prev || prev_n != n)) return FTRT_EPROTO;
    size_t plen = ftrt__plan_size(n);
    ftrt__plan *p = malloc(plen);
    if (!p) return -ENOMEM;
    memcpy(p, m, offsetof(ftrt__plan, nbehind)); /* the fixed part: the same layout */
    p->logical_rank = m->nmembers ? m->logical_rank : logical;
    p->nbehind = m->nbehind; /* (who they are: ftrt__plan_behind_apply) */
    p->ndata = m->ndata;
    int32_t *role = ftrt__plan_roles(p), *ss = ftrt__plan_shard_src(p);
    memcpy(p->members, m->nmembers ? table : prev, (size_t)n * sizeof(int32_t));
    for (int l = 0; l < n; l++) {
        role[l] = FTRT__PLAN_UP_TO_DATE;
        ss[l] = -1;
    }
    for (int i = 0; i < m->nrepl; i++) {
        const int32_t *e = repl + 3 * i;
        p->members[e[0]] = e[1];
        ss[e[0]] = e[2];
        if (m->ckpt_step < 0) role[e[0]] = FTRT__PLAN_NEEDS_STATE;
    }
    int rc = ftrt__plan_check(p, plen);
    if (rc) {
        free(p);
        return rc == -ENOMEM ? rc : FTRT_EPROTO;
    }
    *out = p;
    *out_len = plen;
    return 0;
}

size_t ftrt__plan_behind_words(int n) { return n > 0 ? ((size_t)n + 63) / 64 : 0; }

int ftrt__plan_behind_mine(const ftrt__plan *p, int64_t reported_steps, int reported_shard_only)
{
    if (p->nbehind <= 0 || p->ckpt_step >= 0 ||
        ftrt__plan_roles_c(p)[p->logical_rank] != FTRT__PLAN_UP_TO_DATE)
        return 0;
    return p->mem_step >= 0 ? reported_shard_only != 0 : reported_steps != p->resume_step;
}

int ftrt__plan_behind_apply(ftrt__plan *p, size_t len, const int64_t *bits, size_t words)
{
    int n = p->ntrainers;
    if (!bits || words != ftrt__plan_behind_words(n)) return FTRT_EPROTO;
    const int32_t *role = ftrt__plan_roles_c(p);
    int count = 0;
    for (size_t w = 0; w < words; w++) {
        uint64_t b = (uint64_t)bits[w];
        for (int i = 0; b && i < 64; i++, b >>= 1) {
            if (!(b & 1)) continue;
            int64_t l = (int64_t)w * 64 + i;
            if (l >= n || role[l] != FTRT__PLAN_UP_TO_DATE) return FTRT_EPROTO;
            count++;
        }
    }
    if (count != p->nbehind) return FTRT_EPROTO;
    int32_t *r = ftrt__plan_roles(p);
    for (int l = 0; l < n; l++)
        if (((uint64_t)bits[l / 64] >> (l % 64)) & 1) r[l] = FTRT__PLAN_NEEDS_STATE;
    int rc = ftrt__plan_check(p, len);
    if (rc) /* p as it was */
        for (int l = 0; l < n; l++)
            if (((uint64_t)bits[l / 64] >> (l % 64)) & 1) r[l] = FTRT__PLAN_UP_TO_DATE;
    return rc == -ENOMEM ? rc : rc ? FTRT_EPROTO : 0;
}

/* Whether a message of this type may travel inside a RELAY or MULTI: a rank's own messages,
 * not the host agents'. */
static int wrappable(uint32_t type)
{
    return type < FTRT__MSG_HOST_HELLO || type == FTRT__MSG_HOSTED ||
           type == FTRT__MSG_COORD_LOST || (type >= FTRT__MSG_STANDBY && type <= FTRT__MSG_SYNC_ACK) ||
           type == FTRT__MSG_DRAIN || type == FTRT__MSG_DRAIN_ME;
}

static int inner_open(const uint8_t *p, size_t len, ftrt__msghdr *h, const void **inner)
{
    if (len < sizeof *h) return FTRT_EPROTO;
    memcpy(h, p, sizeof *h);
    if (ftrt__msg_check(h) || !wrappable(h->type) || h->len != len - sizeof *h) return FTRT_EPROTO;
    *inner = p + sizeof *h;
    return 0;
}

int ftrt__relay_open(const void *payload, size_t len, int32_t *w, ftrt__msghdr *h,
                     const void **inner)
{
    if (len < sizeof(ftrt__relay)) return FTRT_EPROTO;
    ftrt__relay r;
    memcpy(&r, payload, sizeof r);
    if (r.world_rank < 1 || r.world_rank >= FTRT__MAX_WORLD) return FTRT_EPROTO;
    *w = r.world_rank;
    return inner_open((const uint8_t *)payload + sizeof r, len - sizeof r, h, inner);
}

int ftrt__multi_open(const void *payload, size_t len, int32_t *n, const int32_t **ranks,
                     ftrt__msghdr *h, const void **inner)
{
    if (len < sizeof(ftrt__multi)) return FTRT_EPROTO;
    ftrt__multi m;
    memcpy(&m, payload, sizeof m);
    if (m.n < 1 || m.n > FTRT__MAX_WORLD || (size_t)m.n * 4 > len - sizeof m) return FTRT_EPROTO;
    const int32_t *list = (const int32_t *)((const uint8_t *)payload + sizeof m);
    for (int i = 0; i < m.n; i++) {
        int32_t x;
        memcpy(&x, list + i, sizeof x);
        if (x < 1 || x >= FTRT__MAX_WORLD) return FTRT_EPROTO;
    }
    *n = m.n;
    *ranks = list;
    size_t off = sizeof m + (size_t)m.n * 4;
    return inner_open((const uint8_t *)payload + off, len - off, h, inner);
}

int ftrt__fanout_open(const void *payload, size_t len, int32_t *nparts, const uint8_t **parts,
                      ftrt__msghdr *h, const void **inner)
{
    if (len < sizeof(ftrt__fanout)) return FTRT_EPROTO;
    ftrt__fanout f;
    memcpy(&f, payload, sizeof f);
    if (f.nparts < 1 || f.nparts > FTRT__MAX_WORLD) return FTRT_EPROTO;
    const uint8_t *p = (const uint8_t *)payload + sizeof f, *end = (const uint8_t *)payload + len;
    *parts = p;
    for (int k = 0; k < f.nparts; k++) {
        int32_t head[2]; /* {n, agent_w} */
        if ((size_t)(end - p) < sizeof head) return FTRT_EPROTO;
        memcpy(head, p, sizeof head);
        if (head[0] < 1 || head[0] > FTRT__MAX_WORLD || head[1] < 1 || head[1] >= FTRT__MAX_WORLD ||
            (size_t)(end - p) - sizeof head < (size_t)head[0] * 4)
            return FTRT_EPROTO;
        p += sizeof head;
        for (int i = 0; i < head[0]; i++, p += 4) {
            int32_t x;
            memcpy(&x, p, sizeof x);
            if (x < 1 || x >= FTRT__MAX_WORLD) return FTRT_EPROTO;
        }
    }
    *nparts = f.nparts;
    return inner_open(p, (size_t)(end - p), h, inner);
}

void ftrt__fanout_part(const uint8_t **cur, int32_t *agent_w, int32_t *n, const int32_t **ranks,
                       uint32_t *plen)
{
    int32_t head[2];
    memcpy(head, *cur, sizeof head);
    *n = head[0];
    *agent_w = head[1];
    *ranks = (const int32_t *)(*cur + sizeof head);
    *plen = (uint32_t)(sizeof head + (size_t)head[0] * 4);
    *cur += *plen;
}

int ftrt__host_beat_check(const ftrt__host_beat *b, size_t len)
{
    if (len < sizeof *b || b->n < 0 || len != sizeof *b + (size_t)b->n * sizeof(ftrt__beat))
        return FTRT_EPROTO;
    return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Sends every byte that mh's iovecs (left bytes in all) describe, resuming after a partial
 * sendmsg() and EINTR; mh's iovecs are advanced past what was sent. 0, or -errno. */
static int sendmsg_all(int fd, struct msghdr *mh, size_t left)
{
    while (left > 0) {
        ssize_t n = sendmsg(fd, mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        left -= (size_t)n;
        while (n > 0 && mh->msg_iovlen > 0) { /* skip what was sent */
            size_t k = (size_t)n < mh->msg_iov[0].iov_len ? (size_t)n : mh->msg_iov[0].iov_len;
            mh->msg_iov[0].iov_base = (uint8_t *)mh->msg_iov[0].iov_base + k;
            mh->msg_iov[0].iov_len -= k;
            n -= (ssize_t)k;
            if (mh->msg_iov[0].iov_len == 0) {
                mh->msg_iov++;
                mh->msg_iovlen--;
            }
        }
    }
    return 0;
}

/* The term of the headers this thread builds (ftrt__msg_set_term). */
static _Thread_local int32_t send_term;

void ftrt__msg_set_term(int32_t term)
{
    send_term = term;
}

int ftrt__msg_send(int fd, uint32_t type, const void *payload, uint32_t len)
{
    uint8_t frame[sizeof(ftrt__msghdr) + 512];
    ftrt__msghdr h = {FTRT__MAGIC, type, len, send_term};
    if (len <= sizeof frame - sizeof h) { /* one send() for the common small message */
        memcpy(frame, &h, sizeof h);
        if (len) memcpy(frame + sizeof h, payload, len);
        return write_all(fd, frame, sizeof h + len);
    }
    /* Header and payload in one sendmsg(): sent as two send()s, the payload waited behind the
     * header for its ACK (Nagle) on sockets without TCP_NODELAY, up to the peer's delayed-ACK
     * time (40 ms on Linux). */
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)payload, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    size_t left = sizeof h + len;
    return sendmsg_all(fd, &mh, left);
}

int ftrt__msg_send2(int fd, uint32_t type, const void *prefix, uint32_t plen, uint32_t inner_type,
                    const void *payload, uint32_t len)
{
    if (!inner_type) return ftrt__msg_send(fd, type, prefix, plen);
    ftrt__msghdr h = {FTRT__MAGIC, type, plen + (uint32_t)sizeof(ftrt__msghdr) + len, send_term};
    ftrt__msghdr ih = {FTRT__MAGIC, inner_type, len, send_term};
    struct iovec iov[4] = {{&h, sizeof h}, {(void *)prefix, plen}, {&ih, sizeof ih},
                           {(void *)payload, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 4};
    size_t left = sizeof h + plen + sizeof ih + len;
    return sendmsg_all(fd, &mh, left);
}

/* Room for `more` bytes after tx's pending ones: the written bytes before them are dropped
 * first when the buffer would have to grow, then it grows (doubling). 0 or -ENOMEM. */
static int tx_room(ftrt__txbuf *tx, size_t more)
{
    if (tx->off > 0 && tx->used + more > tx->cap) {
        memmove(tx->buf, tx->buf + tx->off, tx->used - tx->off);
        tx->used -= tx->off;
        tx->off = 0;
    }
    size_t need = tx->used + more;
    if (need <= tx->cap) return 0;
    size_t nc = tx->cap ? tx->cap : 4096;
    while (nc < need) nc *= 2;
    uint8_t *nb = realloc(tx->buf, nc);
    if (!nb) return -ENOMEM;
    tx->buf = nb;
    tx->cap = nc;
    return 0;
}

int ftrt__tx_put(ftrt__txbuf *tx, uint32_t type, const void *prefix, uint32_t plen,
                 uint32_t inner_type, const void *payload, uint32_t len)
{
    size_t body = plen + (inner_type ? sizeof(ftrt__msghdr) + len : 0);
    if (tx_room(tx, sizeof(ftrt__msghdr) + body)) return -ENOMEM;
    size_t need = tx->used + sizeof(ftrt__msghdr) + body;
    ftrt__msghdr h = {FTRT__MAGIC, type, (uint32_t)body, send_term};
    uint8_t *p = tx->buf + tx->used;
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    if (plen) memcpy(p, prefix, plen);
    p += plen;
    if (inner_type) {
        ftrt__msghdr ih = {FTRT__MAGIC, inner_type, len, send_term};
        memcpy(p, &ih, sizeof ih);
        if (len) memcpy(p + sizeof ih, payload, len);
    }
    tx->used = need;
    return 0;
}

int ftrt__tx_move(ftrt__txbuf *dst, ftrt__txbuf *src)
{
    size_t n = ftrt__tx_pending(src);
    if (n == 0) return 0;
    if (tx_room(dst, n)) return -ENOMEM;
    memcpy(dst->buf + dst->used, src->buf + src->off, n);
    dst->used += n;
    src->used = src->off = 0;
    return 0;
}

int ftrt__tx_flush(int fd, ftrt__txbuf *tx)
{
    int rc = ftrt__tx_pending(tx) ? write_all(fd, tx->buf + tx->off, ftrt__tx_pending(tx)) : 0;
    tx->used = tx->off = 0;
    return rc;
}

/* Appends what is left of iov[0..n) after its first `skip` bytes to tx. 0 or -ENOMEM. */
static int tx_append_iov(ftrt__txbuf *tx, const struct iovec *iov, int n, size_t skip,
                         size_t total)
{
    if (tx_room(tx, total - skip)) return -ENOMEM;
    for (int i = 0; i < n; i++) {
        size_t k = skip < iov[i].iov_len ? skip : iov[i].iov_len;
        skip -= k;
        if (iov[i].iov_len > k) memcpy(tx->buf + tx->used, (const uint8_t *)iov[i].iov_base + k,
                                       iov[i].iov_len - k);
        tx->used += iov[i].iov_len - k;
    }
    return 0;
}

ssize_t ftrt__tx_send(int fd, ftrt__txbuf *tx, uint32_t type, const void *prefix, uint32_t plen,
                      uint32_t inner_type, const void *payload, uint32_t len)
{
    size_t body = plen + (inner_type ? sizeof(ftrt__msghdr) + len : 0);
    size_t total = sizeof(ftrt__msghdr) + body;
    if (ftrt__tx_pending(tx)) /* behind what waits: in order */
        return ftrt__tx_put(tx, type, prefix, plen, inner_type, payload, len) ? -ENOMEM
                                                                               : (ssize_t)total;
    ftrt__msghdr h = {FTRT__MAGIC, type, (uint32_t)body, send_term};
    ftrt__msghdr ih = {FTRT__MAGIC, inner_type, len, send_term};
    struct iovec iov[4] = {{&h, sizeof h}, {(void *)prefix, plen}, {&ih, sizeof ih},
                           {(void *)payload, len}};
    int n = inner_type ? 4 : 2;
    uint8_t frame[sizeof(ftrt__msghdr) + 512];
    if (!inner_type && plen <= sizeof frame - sizeof h) { /* one buffer, as ftrt__msg_send */
        memcpy(frame, &h, sizeof h);
        if (plen) memcpy(frame + sizeof h, prefix, plen);
        iov[0] = (struct iovec){frame, total};
        n = 1;
    }
    size_t sent = 0;
    while (sent < total) {
        struct iovec cur[4];
        int nc = 0;
        size_t skip = sent;
        for (int i = 0; i < n; i++) { /* the iovecs past what went out */
            if (skip >= iov[i].iov_len) {
                skip -= iov[i].iov_len;
                continue;
            }
            cur[nc].iov_base = (uint8_t *)iov[i].iov_base + skip;
            cur[nc++].iov_len = iov[i].iov_len - skip;
            skip = 0;
        }
        struct msghdr mh = {.msg_iov = cur, .msg_iovlen = (size_t)nc};
        ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (k < 0) return -errno;
        sent += (size_t)k;
    }
    if (sent == total) return 0;
    return tx_append_iov(tx, iov, n, sent, total) ? -ENOMEM : (ssize_t)(total - sent);
}

ssize_t ftrt__tx_write(int fd, ftrt__txbuf *tx)
{
    size_t done = 0;
    while (ftrt__tx_pending(tx) > 0) {
        ssize_t k = send(fd, tx->buf + tx->off, ftrt__tx_pending(tx), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (k < 0) return -errno;
        tx->off += (size_t)k;
        done += (size_t)k;
    }
    if (ftrt__tx_pending(tx) == 0) {
        tx->used = tx->off = 0;
        if (tx->cap > ((size_t)1 << 20)) ftrt__tx_free(tx); /* (a large PLAN or SYNC went out) */
    }
    return (ssize_t)done;
}

void ftrt__tx_free(ftrt__txbuf *tx)
{
    free(tx->buf);
    memset(tx, 0, sizeof *tx);
}

static void rx_compact(ftrt__rxbuf *rx)
{
    if (rx->consumed) {
        memmove(rx->buf, rx->buf + rx->consumed, rx->used - rx->consumed);
        rx->used -= rx->consumed;
        rx->consumed = 0;
    }
}

ssize_t ftrt__rx_fill(ftrt__rxbuf *rx, int fd)
{
    rx_compact(rx);
    if (rx->cap - rx->used < 4096) {
        size_t ncap = rx->cap ? rx->cap * 2 : 8192;
        size_t limit = 2 * (FTRT__MSG_MAX + sizeof(ftrt__msghdr));
        ftrt__msghdr h;
        if (rx->used >= sizeof h) { /* a PLAN may be larger: room for the one announced */
            memcpy(&h, rx->buf, sizeof h);
            if (big_limit(h.type) > FTRT__MSG_MAX && ftrt__msg_check(&h) == 0 &&
                sizeof h + h.len + 4096 > limit)
                limit = sizeof h + h.len + 4096;
        }
        if (ncap > limit) ncap = limit;
        if (ncap <= rx->used) return -ENOBUFS;
        uint8_t *nb = realloc(rx->buf, ncap);
        if (!nb) return -ENOMEM;
        rx->buf = nb;
        rx->cap = ncap;
    }
    for (;;) {
        ssize_t n = recv(fd, rx->buf + rx->used, rx->cap - rx->used, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return (errno == EWOULDBLOCK) ? -EAGAIN : -errno;
        rx->used += (size_t)n;
        return n;
    }
}

int ftrt__rx_next(ftrt__rxbuf *rx, ftrt__msghdr *h, const void **payload)
{
    rx_compact(rx);
    if (rx->used < sizeof *h) return 0;
    memcpy(h, rx->buf, sizeof *h);
    if (ftrt__msg_check(h)) return FTRT_EPROTO;
    if (rx->used < sizeof *h + h->len) return 0;
    *payload = rx->buf + sizeof *h;
    rx->consumed = sizeof *h + h->len;
    return 1;
}

void ftrt__rx_free(ftrt__rxbuf *rx)
{
    free(rx->buf);
    memset(rx, 0, sizeof *rx);
}

/*
 * fuzz_proto.c - libFuzzer target for the control-plane parser: arbitrary bytes are fed to the
 * incremental receiver in random-sized pieces (the first byte picks the piece size), every
 * whole message is validated (ftrt__msg_check; ftrt__plan_expand and ftrt__plan_behind_apply
 * for PLAN, ftrt__ledger_msg_check for LEDGER) and decoded the way the coordinator and agent
 * decode it (copy into the fixed-layout struct, or the checked variable-size one).
 *
 * Built two ways: with clang -fsanitize=fuzzer (bench/fuzz_proto.sh, a bounded fuzzing run),
 * and linked with replay_main.c as a plain program that replays a corpus directory (ctest
 * unit.fuzz_proto_corpus), so every input that ever mattered stays a regression test.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftrt.h"
#include "base/proto.h"

/* The survivors behind of an expanded plan p (plen bytes), their set's first word taken from
 * the input (the message's rework_until): applied as the data plane's union would be, an
 * accepted set marks exactly p->nbehind survivors and leaves the source up to date. */
static void behind(ftrt__plan *p, size_t plen, uint64_t word0)
{
    size_t words = ftrt__plan_behind_words(p->ntrainers);
    int64_t *bits = calloc(words, sizeof *bits);
    if (!bits) return;
    bits[0] = (int64_t)word0;
    int before = 0, after = 0;
    for (int l = 0; l < p->ntrainers; l++) before += ftrt__plan_roles_c(p)[l];
    if (ftrt__plan_behind_apply(p, plen, bits, words) == 0) {
        for (int l = 0; l < p->ntrainers; l++) after += ftrt__plan_roles_c(p)[l];
        if (after - before != p->nbehind ||
            ftrt__plan_roles_c(p)[p->source] != FTRT__PLAN_UP_TO_DATE)
            abort();
    }
    free(bits);
}

static void decode(const ftrt__msghdr *h, const void *payload);

/* A RELAY, MULTI or FANOUT (host agents) opened as the host agent and the coordinator open it,
 * a FANOUT's parts walked, and the message inside decoded in turn (it is never a wrapper). */
static void decode_wrapper(const ftrt__msghdr *h, const void *payload)
{
    ftrt__msghdr ih;
    const void *inner = NULL;
    int32_t w, n;
    const int32_t *ranks;
    const uint8_t *parts;
    int rc = h->type == FTRT__MSG_RELAY ? ftrt__relay_open(payload, h->len, &w, &ih, &inner)
             : h->type == FTRT__MSG_MULTI
                 ? ftrt__multi_open(payload, h->len, &n, &ranks, &ih, &inner)
                 : ftrt__fanout_open(payload, h->len, &n, &parts, &ih, &inner);
    if (rc) return;
    if (ih.type == FTRT__MSG_RELAY || ih.type == FTRT__MSG_MULTI || ih.type == FTRT__MSG_FANOUT)
        abort(); /* the openers refuse a host-agent type inside */
    volatile int64_t sum = 0;
    for (int32_t i = 0; h->type == FTRT__MSG_FANOUT && i < n; i++) {
        int32_t agent_w, k;
        uint32_t plen;
        ftrt__fanout_part(&parts, &agent_w, &k, &ranks, &plen);
        for (int32_t j = 0; j < k; j++) sum += ranks[j];
    }
    (void)sum;
    decode(&ih, inner);
}

static void decode(const ftrt__msghdr *h, const void *payload)
{
    union {
        ftrt__hello hello;
        ftrt__welcome welcome;
        ftrt__heartbeat hb;
        ftrt__epoch_msg em;
        ftrt__resumed_msg rm;
        ftrt__report rep;
        ftrt__ckpt_msg cm;
        ftrt__bye bye;
        ftrt__fingerprint_msg fpm;
        ftrt__coord_at at;
        ftrt__rank_lost lost;
        ftrt__relay_peer peer;
        ftrt__cut cut;
    } u;
    if (h->type == FTRT__MSG_PLAN) { /* expanded as a survivor of a 4-trainer job would */
        ftrt__plan_msg *m = malloc(h->len ? h->len : 1);
        if (!m) return;
        memcpy(m, payload, h->len);
        static const int32_t prev[4] = {1, 2, 3, 4};
        ftrt__plan *p = NULL;
        size_t plen = 0;
        if (ftrt__plan_expand(m, h->len, prev, 4, 1, &p, &plen) == 0) {
            /* a valid plan's members are in range: touch them all */
            if (plen != ftrt__plan_size(p->ntrainers)) abort();
            volatile int32_t sum = 0;
            for (int i = 0; i < p->ntrainers; i++) sum += p->members[i];
            (void)sum;
            behind(p, plen, (uint64_t)m->rework_until);
        }
        free(p);
        free(m);
    } else if (h->type == FTRT__MSG_LEDGER) { /* variable size, checked as take_ledger() does */
        ftrt__ledger_msg *m = malloc(h->len);
        if (!m) return;
        memcpy(m, payload, h->len);
        if (ftrt__ledger_msg_check(m, h->len) == 0) {
            /* a valid message's intervals are all there and of a known kind */
            volatile double sum = 0;
            for (int i = 0; i < m->n; i++) {
                if (m->iv[i].kind < 0 || m->iv[i].kind >= FTRT__IV_KINDS) abort();
                sum += m->iv[i].t1 - m->iv[i].t0;
            }
            (void)sum;
        }
        free(m);
    } else if (h->type == FTRT__MSG_RELAY || h->type == FTRT__MSG_MULTI ||
               h->type == FTRT__MSG_FANOUT) {
        decode_wrapper(h, payload);
    } else if (h->type == FTRT__MSG_HOST_BEAT) { /* variable size, checked as the coordinator */
        ftrt__host_beat *b = malloc(h->len);
        if (!b) return;
        memcpy(b, payload, h->len);
        (void)ftrt__host_beat_check(b, h->len);
        free(b);
    } else if (h->type == FTRT__MSG_SYNC) {
        /* the standby's state, any size within FTRT__SYNC_MAX: parsed by standby.c, not here */
    } else if (h->len <= sizeof u) {
        memcpy(&u, payload, h->len);
    } else {
        abort(); /* ftrt__msg_check must have refused a payload larger than any fixed type */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t piece = (size_t)data[0] % 64 + 1;
    data++, size--;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 0;
    ftrt__rxbuf rx = {0};
    int dead = 0;
    for (size_t off = 0; off < size && !dead; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        if (write(sv[0], data + off, n) != (ssize_t)n) break;
        if (ftrt__rx_fill(&rx, sv[1]) <= 0) break;
        ftrt__msghdr h;
        const void *payload;
        int r;
        while ((r = ftrt__rx_next(&rx, &h, &payload)) == 1) decode(&h, payload);
        if (r < 0) dead = 1; /* a malformed message ends the connection, as in the runtime */
    }
    ftrt__rx_free(&rx);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

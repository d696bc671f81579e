/*
 * transfer.c - checksummed, targeted, striped state transfer of replicated regions for a
 * recovery (transfer.h has the contract).
 *
 * Per region and attempt, every member derives the same schedule from the same inputs (the
 * roles, the region sizes, the chunk size and the agreed set of chunks still pending): chunk k
 * of the region (global index g) goes to each receiver that still needs it, from source
 * sources[(g + attempt) mod ns]. A source computes the CRC32C of each chunk it sends, sends the
 * chunks straight from region memory, then one array of CRCs per receiver; a receiver posts
 * its receives straight into region memory and checks each chunk against its source's CRC.
 * Every member then adds the receivers' mismatch flags (an allreduce), so that all agree on
 * what the next attempt resends. Within one (source, receiver) pair messages are matched in
 * posting order (MPI's non-overtaking rule), so one data tag and one CRC tag suffice.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/proto.h"
#include "comm/transfer.h"

enum { TAG_DATA = 7101, TAG_CRC = 7102 };

typedef struct sched {
    int ns, nr;
    int *src, *rcv;  /* logical ranks of the sources and of the receivers, ascending */
    int si, ri;      /* this member's index in src / rcv, or -1 */
} sched;

static int owner(const sched *s, int64_t g, int attempt) { return (int)((g + attempt) % s->ns); }

/* One attempt over region r (chunks [0, nk) of `chunk` bytes, global index g0 + k) for the
 * (receiver, chunk) pairs with pend[j * nk + k] != 0. bad[] receives this member's
 * mismatches (receivers only). */
static int attempt_once(ftrt__plane *p, const sched *s, const ftrt__xfer_region *r, size_t chunk,
                        int64_t nk, int64_t g0, int attempt, const int64_t *pend, int64_t *bad,
                        int corrupt, int corrupt_attempts, ftrt__xfer_stat *st)
{
    MPI_Comm comm = p->comm;
    size_t nreq = (size_t)(s->ri >= 0 ? nk + s->ns : 0) +
                  (size_t)(s->si >= 0 ? (nk + 1) * s->nr : 0);
    MPI_Request *req = malloc((nreq ? nreq : 1) * sizeof *req);
    uint32_t *crc_in = s->ri >= 0 ? calloc((size_t)s->ns * (size_t)(nk ? nk : 1), 4) : NULL;
    uint32_t *crc_out = s->si >= 0 ? calloc((size_t)s->nr * (size_t)(nk ? nk : 1), 4) : NULL;
    int *from = s->ri >= 0 ? calloc((size_t)s->ns, sizeof *from) : NULL;
    int rc = 0, q = 0;
    if (!req || (s->ri >= 0 && (!crc_in || !from)) || (s->si >= 0 && !crc_out)) {
        rc = -ENOMEM;
        goto out;
    }
    unsigned char *base = r->ptr;
    /* receiver: data straight into region memory, then each sending source's CRC array */
    if (s->ri >= 0) {
        for (int64_t k = 0; k < nk && !rc; k++) {
            if (!pend[(int64_t)s->ri * nk + k]) continue;
            size_t off = (size_t)k * chunk, len = r->bytes - off < chunk ? r->bytes - off : chunk;
            int o = owner(s, g0 + k, attempt);
            from[o] = 1;
            if (MPI_Irecv(base + off, (int)len, MPI_BYTE, s->src[o], TAG_DATA, comm, &req[q++]) !=
                MPI_SUCCESS)
                rc = FTRT_EMPI;
        }
        for (int o = 0; o < s->ns && !rc; o++)
            if (from[o] && MPI_Irecv(crc_in + (size_t)o * (size_t)nk, (int)nk, MPI_UINT32_T,
                                     s->src[o], TAG_CRC, comm, &req[q++]) != MPI_SUCCESS)
                rc = FTRT_EMPI;
    }
    /* source: the chunks it owns this attempt, to each receiver still needing them (each
     * chunk's CRC32C computed once, at its first receiver) */
    if (s->si >= 0) {
        for (int j = 0; j < s->nr && !rc; j++) {
            int any = 0;
            for (int64_t k = 0; k < nk && !rc; k++) {
                if (!pend[(int64_t)j * nk + k] || owner(s, g0 + k, attempt) != s->si) continue;
                size_t off = (size_t)k * chunk, len = r->bytes - off < chunk ? r->bytes - off : chunk;
                int64_t first = 0;
                while (first < j && !pend[first * nk + k]) first++;
                crc_out[(size_t)j * (size_t)nk + (size_t)k] =
                    first < j ? crc_out[(size_t)first * (size_t)nk + (size_t)k]
                              : ftrt__crc32c(0, base + off, len);
                if (MPI_Isend(base + off, (int)len, MPI_BYTE, s->rcv[j], TAG_DATA, comm,
                              &req[q++]) != MPI_SUCCESS)
                    rc = FTRT_EMPI;
                if (st) st->bytes_sent += len;
                any = 1;
            }
            if (any && !rc &&
                MPI_Isend(crc_out + (size_t)j * (size_t)nk, (int)nk, MPI_UINT32_T, s->rcv[j],
                          TAG_CRC, comm, &req[q++]) != MPI_SUCCESS)
                rc = FTRT_EMPI;
        }
    }
    /* On an error or an interruption the requests are abandoned (the recovery fails). */
    if (!rc) rc = ftrt__plane_waitall(p, q, req);
    if (!rc && s->ri >= 0) {
        for (int64_t k = 0; k < nk; k++) {
            if (!pend[(int64_t)s->ri * nk + k]) continue;
            size_t off = (size_t)k * chunk, len = r->bytes - off < chunk ? r->bytes - off : chunk;
            if (attempt < corrupt_attempts && corrupt >= 0 && g0 + k == corrupt && len > 0)
                base[off] ^= 0x10; /* test knob: a bit flipped on the way */
            uint32_t want = crc_in[(size_t)owner(s, g0 + k, attempt) * (size_t)nk + (size_t)k];
            if (ftrt__crc32c(0, base + off, len) != want) bad[(int64_t)s->ri * nk + k] = 1;
            if (st) st->bytes_received += len;
        }
    }
out:
    free(req);
    free(crc_in);
    free(crc_out);
    free(from);
    return rc;
}

/* Region r over every attempt; *retried counts the chunks sent again. */
static int transfer_region(ftrt__plane *p, const sched *s, const ftrt__xfer_region *r,
                           size_t chunk, int64_t g0, int corrupt, int corrupt_attempts,
                           ftrt__xfer_stat *st)
{
    int64_t nk = (int64_t)((r->bytes + chunk - 1) / chunk);
    if (nk == 0) return 0;
    size_t cells = (size_t)s->nr * (size_t)nk;
    int64_t *pend = malloc(cells * sizeof *pend), *bad = calloc(cells, sizeof *bad);
    if (!pend || !bad) {
        free(pend);
        free(bad);
        return -ENOMEM;
    }
    for (size_t i = 0; i < cells; i++) pend[i] = 1;
    /* Every source once; a lone source gets a second try (a transient corruption). */
    int attempts = s->ns > 1 ? s->ns : 2, rc = 0;
    for (int a = 0; a < attempts; a++) {
        memset(bad, 0, cells * sizeof *bad);
        rc = attempt_once(p, s, r, chunk, nk, g0, a, pend, bad, corrupt, corrupt_attempts, st);
        if (rc) break;
        rc = ftrt__plane_allreduce(p, bad, cells, FTRT_INT64, FTRT_SUM); /* all agree */
        if (rc) break;
        int64_t nbad = 0;
        for (size_t i = 0; i < cells; i++) nbad += bad[i] != 0;
        if (nbad == 0) break;
        if (st) st->chunks_retried += (int)nbad;
        ftrt_log_warn("state transfer: %lld chunk(s) of region \"%s\" failed their CRC32C at the "
                      "receiver; %s", (long long)nbad, r->name,
                      a + 1 < attempts ? "sending them again from another source"
                                       : "no source left to try");
        memcpy(pend, bad, cells * sizeof *pend);
        if (a + 1 == attempts) rc = FTRT_ECORRUPT;
    }
    if (rc == FTRT_ECORRUPT)
        ftrt_log_error("state transfer of region \"%s\" failed: chunks arrived corrupted from "
                       "every source (silent data corruption on a source, or on the way)",
                       r->name);
    free(pend);
    free(bad);
    return rc;
}

int ftrt__xfer_replicated(ftrt__plane *p, const ftrt__xfer_region *regs, int n,
                          const int32_t *role, size_t chunk, int corrupt_chunk,
                          int corrupt_attempts, ftrt__xfer_stat *st)
{
    double t0 = ftrt__now();
    if (st) memset(st, 0, sizeof *st);
    if (!p || (!regs && n) || !role || chunk == 0 || chunk > (size_t)1 << 30) return FTRT_EINVAL;
    if (p->comm == MPI_COMM_NULL || p->rank < 0) return FTRT_ESTATE;
    sched s = {.si = -1, .ri = -1};
    s.src = malloc((size_t)p->size * sizeof *s.src);
    s.rcv = malloc((size_t)p->size * sizeof *s.rcv);
    if (!s.src || !s.rcv) {
        free(s.src);
        free(s.rcv);
        return -ENOMEM;
    }
    for (int l = 0; l < p->size; l++) {
        if (role[l] == FTRT__PLAN_NEEDS_STATE) {
            if (l == p->rank) s.ri = s.nr;
            s.rcv[s.nr++] = l;
        } else if (role[l] == FTRT__PLAN_UP_TO_DATE) {
            if (l == p->rank) s.si = s.ns;
            s.src[s.ns++] = l;
        } /* FTRT__PLAN_BYSTANDER: only in the agreement on what to resend */
    }
    if (st) st->sources = s.ns, st->receivers = s.nr;
    int rc = 0;
    if (s.nr > 0 && s.ns == 0) rc = FTRT_EINVAL;
    int64_t g0 = 0;
    for (int i = 0; i < n && s.nr > 0 && !rc; i++) {
        rc = transfer_region(p, &s, &regs[i], chunk, g0, corrupt_chunk, corrupt_attempts, st);
        g0 += (int64_t)((regs[i].bytes + chunk - 1) / chunk);
    }
    free(s.src);
    free(s.rcv);
    if (st) st->seconds = ftrt__now() - t0;
    return rc;
}

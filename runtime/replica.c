/*
 * replica.c - in-memory partner replicas of sharded state (docs/detection-and-recovery.md
 * "Partner replicas").
 *
 * Sharded regions exist on one trainer only, so a lost trainer's shard used to come back from
 * the last committed checkpoint, and every member redid the steps since. Here, at each refresh
 * (each checkpoint snapshot, or every FTRT_SHARD_REPLICA_EVERY steps), every trainer copies all
 * its host regions into an image of its own (sharded ones first) and sends the sharded part to
 * its partner, which keeps it: Gemini's checkpoints in peers' CPU memory (Wang et al., SOSP'23)
 * and SCR's PARTNER level (Moody et al., SC'10). The partner of logical rank r is r + s (mod
 * n), with s the smallest shift that puts every trainer's partner on another host, when one
 * does (hostnames agreed per epoch), else s = 1: a cyclic shift, so every trainer holds exactly
 * one image and a lost host never takes a rank and its replica together when s exists.
 *
 * The images are host memory, page-locked where the device backend can pin (CUDA): device
 * regions, SHARDED or REPLICATED, are copied into them with the backend's to_host (which gives
 * the CRC32C in the same pass) and back with its from_host (checked against the image's CRC32C
 * on the way in), never read on the host.
 *
 * Each image carries the CRC32C of its bytes, taken at the copy; the partner checks it on
 * arrival and, like the owner for its own image, again just before it offers the image to a
 * recovery (REPORT). The coordinator resumes from memory only when every survivor holds its own
 * image of one step T (no older than the committed checkpoint) and every lost rank's sharded
 * image of T is held by a survivor (plan.c); else the checkpoint is reloaded, as before. One
 * generation is kept: an image is invalid while it is being refreshed, so a failure during a
 * refresh falls back to the checkpoint. A rank whose state came by a transfer (a promoted spare)
 * keeps the sharded image it received as its own, shard-only (ftrt__replica_adopt): copying
 * every region into a fresh image cost a 256 MiB spare 264 ms of its MTTR; until the next
 * refresh a recovery gives it the replicated regions from the peers (a survivor behind).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "base/knobs.h"
#include "base/log.h"
#include "comm/transfer.h"
#include "kernels/location.h"
#include "runtime/internal.h"

enum { TAG_HDR = 7201, TAG_IMG = 7202 };
#define PIECE ((size_t)1 << 30) /* bytes per MPI message (int counts) */

/* What travels ahead of an image. */
typedef struct img_hdr {
    int64_t step;
    uint64_t bytes;
    uint64_t sig;
    uint32_t crc;
    int32_t from; /* logical rank */
} img_hdr;

/* FNV-1a over the sharded part of the region table (names, sizes), in registration order. */
static uint64_t shard_sig(const ftrt_ctx *ctx)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ctx->nregs; i++) {
        const ftrt__region *r = &ctx->regs[i];
        if (r->kind != FTRT__KIND_SHARDED) continue;
        uint64_t b = r->bytes;
        for (const char *c = r->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        for (size_t j = 0; j < sizeof b; j++) h = (h ^ ((b >> (8 * j)) & 0xff)) * 1099511628211ull;
    }
    return h;
}

int ftrt__replica_enabled(const ftrt_ctx *ctx)
{
    if (ctx->cfg.shard_replica_every < 0 || ctx->size < 2) return 0;
    int sharded = 0;
    for (int i = 0; i < ctx->nregs; i++) sharded |= ctx->regs[i].kind == FTRT__KIND_SHARDED;
    return sharded;
}

/* The device backend of this rank's device regions: NULL when it has none. A device region
 * with no backend is refused (FTRT_ENOTSUP, logged naming it; ftrt_register() refuses it
 * already, this is the backstop). Every member has the same table and backend, so a collective
 * caller returns on every member alike. */
static int device_of(const ftrt_ctx *ctx, const char *what, const ftrt__loc_ops **dev)
{
    *dev = NULL;
    for (int i = 0; i < ctx->nregs; i++)
        if (ctx->regs[i].loc == FTRT__LOC_DEVICE) {
            *dev = ftrt__loc_device();
            if (*dev) return 0;
            ftrt_log_error("partner replica %s: region \"%s\" is in device memory, and there is "
                           "no device backend to copy it through", what, ctx->regs[i].name);
            return FTRT_ENOTSUP;
        }
    return 0;
}

/* The image's bytes: sharded regions, then the others, each in registration order. */
static void layout(const ftrt_ctx *ctx, size_t *total, size_t *shard)
{
    *total = *shard = 0;
    for (int i = 0; i < ctx->nregs; i++) {
        *total += ctx->regs[i].bytes;
        if (ctx->regs[i].kind == FTRT__KIND_SHARDED) *shard += ctx->regs[i].bytes;
    }
}

/* One piece of region r (len bytes at offset o) into the image at img (to_image, its CRC32C
 * continued into *crc) or back. Host regions with memcpy, the CRC taken right after the copy,
 * from the cache; device regions through the backend: to_host gives the piece's CRC32C in the
 * same pass, from_host checks it against the image's bytes. Returns 0 or the backend's code. */
static int copy_piece(const ftrt__region *r, const ftrt__loc_ops *dev, unsigned char *img,
                      size_t o, size_t len, int to_image, uint32_t *crc)
{
    unsigned char *reg = (unsigned char *)r->ptr + o;
    uint32_t c;
    int rc = 0;
    if (r->loc == FTRT__LOC_HOST) {
        memcpy(to_image ? img : reg, to_image ? reg : img, len);
        if (to_image) *crc = ftrt__crc32c(*crc, img, len);
    } else if (to_image) {
        rc = dev->to_host(img, reg, len, &c);
        if (rc == 0) *crc = ftrt__crc32c_combine(*crc, c, len);
    } else {
        rc = dev->from_host(reg, img, len, ftrt__crc32c(0, img, len));
    }
    if (rc) ftrt_log_error("partner replica: copying device region \"%s\" %s the image failed: %s",
                           r->name, to_image ? "into" : "out of", ftrt_strerror(rc));
    return rc;
}

/* Copies the regions into img (to_image) or back, sharded ones first; with passes = 1 only the
 * sharded ones, in pieces of 1 MiB. When to_image, *crc_all (may be NULL) receives the CRC32C of
 * the whole image and *crc_shard (may be NULL) that of its sharded part (the sharded regions
 * come first: the running CRC at the end of the first pass). Returns 0 or a device backend's
 * code (the image, or the regions, then hold part of the bytes). */
static int copy_regions(ftrt_ctx *ctx, const ftrt__loc_ops *dev, unsigned char *img,
                        int to_image, int passes, uint32_t *crc_all, uint32_t *crc_shard)
{
    const size_t piece = (size_t)1 << 20;
    size_t off = 0;
    uint32_t crc = 0;
    int rc = 0;
    for (int pass = 0; pass < passes && !rc; pass++) {
        for (int i = 0; i < ctx->nregs && !rc; i++) {
            ftrt__region *r = &ctx->regs[i];
            if ((r->kind == FTRT__KIND_SHARDED) != (pass == 0)) continue;
            for (size_t o = 0; o < r->bytes && !rc; o += piece) {
                size_t len = r->bytes - o < piece ? r->bytes - o : piece;
                rc = copy_piece(r, dev, img + off + o, o, len, to_image, &crc);
            }
            off += r->bytes;
        }
        if (pass == 0 && crc_shard) *crc_shard = crc;
    }
    if (crc_all) *crc_all = crc;
    return rc;
}

/* A buffer of ftrt_alloc() of want bytes (at least 1) holding the first `keep` bytes of old,
 * which is released; NULL when none can be had (old is then kept). */
static unsigned char *realloc_shared(unsigned char *old, size_t keep, size_t want)
{
    void *p = NULL;
    if (ftrt_alloc(want ? want : 1, &p) != 0) return NULL;
    if (old) {
        memcpy(p, old, keep);
        ftrt_free(old);
    }
    return p;
}

/* Makes *buf hold at least `want` bytes; shared: from ftrt_alloc() (the image of this rank's
 * own: a promoted spare receives its sharded image into it, and the partner that sends it maps
 * it where it is a memory file of huge pages, comm/cma.h), else from realloc. With a device
 * backend that can pin (dev->pin), the buffer is page-locked (*pinned: by whom), re-pinned after
 * it moved; without, or when pinning fails, it is ordinary memory (the copies work, slower).
 * Returns 0 or -ENOMEM. */
static int grow(unsigned char **buf, size_t *cap, size_t want, const ftrt__loc_ops *dev,
                const ftrt__loc_ops **pinned, int shared)
{
    if (*cap >= want && (*pinned || !dev || !dev->pin)) return 0;
    if (*pinned) (*pinned)->unpin(*buf);
    *pinned = NULL;
    if (*cap < want) {
        unsigned char *p = shared ? realloc_shared(*buf, *cap, want) : realloc(*buf, want ? want : 1);
        if (!p) return -ENOMEM;
        *buf = p;
        *cap = want;
    }
    if (dev && dev->pin && dev->unpin && dev->pin(*buf, *cap) == 0) *pinned = dev;
    return 0;
}

/* The partner shift of this epoch: the smallest s in [1, n) with host(r + s) != host(r) for
 * every r, else 1. The hostnames are gathered over the plane (polled). */
static int partner_shift(ftrt_ctx *ctx)
{
    ftrt__replica *rp = &ctx->rep;
    if (rp->shift_epoch == ctx->watch.epoch && rp->shift > 0) return 0;
    int n = ctx->size;
    char *hosts = calloc((size_t)n, FTRT__HOST_MAX);
    if (!hosts) return -ENOMEM;
    char mine[FTRT__HOST_MAX] = {0};
    snprintf(mine, sizeof mine, "%s", ctx->host);
    MPI_Request req;
    int rc = 0;
    if (MPI_Iallgather(mine, FTRT__HOST_MAX, MPI_CHAR, hosts, FTRT__HOST_MAX, MPI_CHAR,
                       ctx->plane.comm, &req) != MPI_SUCCESS)
        rc = FTRT_EMPI;
    if (!rc) rc = ftrt__plane_waitall(&ctx->plane, 1, &req);
    if (rc) {
        if (rc == FTRT_ERECOVER) ctx->watch.needs_recover = 1;
        ftrt__plane_bury(&ctx->plane, hosts); /* MPI may still complete the request */
        return rc;
    }
    int shift = 1;
    for (int s = 1; s < n; s++) {
        int ok = 1;
        for (int r = 0; r < n && ok; r++)
            ok = strncmp(hosts + (size_t)r * FTRT__HOST_MAX,
                         hosts + (size_t)((r + s) % n) * FTRT__HOST_MAX, FTRT__HOST_MAX) != 0;
        if (ok) {
            shift = s;
            break;
        }
    }
    free(hosts);
    rp->shift = shift;
    rp->shift_epoch = ctx->watch.epoch;
    return 0;
}

/* Takes this rank's own image of `step` (all its regions, one pass for the copy and both CRCs);
 * *crc_shard receives the CRC32C of its sharded part. Returns 0, -ENOMEM or a device backend's
 * code (no image kept). */
static int take_image(ftrt_ctx *ctx, const ftrt__loc_ops *dev, int64_t step, uint32_t *crc_shard)
{
    ftrt__replica *rp = &ctx->rep;
    size_t total, shard;
    layout(ctx, &total, &shard);
    rp->own_step = -1; /* invalid until the copy is complete */
    if (grow(&rp->own, &rp->own_cap, total, dev, &rp->own_pin, 1)) return -ENOMEM;
    int rc = copy_regions(ctx, dev, rp->own, 1, 2, &rp->own_crc_all, crc_shard);
    if (rc) return rc;
    rp->own_bytes = total;
    rp->own_shard = shard;
    rp->own_shard_only = 0;
    rp->own_step = step;
    return 0;
}

/* The headers of this refresh: *out to the partner dst, *in from src. Returns 0, FTRT_EMPI,
 * -ENOMEM, FTRT_ERECOVER (an epoch change meanwhile), or what the plane's wait returns. */
static int exchange_headers(ftrt_ctx *ctx, const img_hdr *out, int src, int dst, img_hdr *in)
{
    MPI_Comm comm = ctx->plane.comm;
    img_hdr *inp = malloc(sizeof *inp); /* heap: buried if the exchange is abandoned */
    if (!inp) return -ENOMEM;
    MPI_Request hr[2];
    if (MPI_Irecv(inp, (int)sizeof *inp, MPI_BYTE, src, TAG_HDR, comm, &hr[0]) != MPI_SUCCESS ||
        MPI_Isend(out, (int)sizeof *out, MPI_BYTE, dst, TAG_HDR, comm, &hr[1]) != MPI_SUCCESS) {
        ftrt__plane_bury(&ctx->plane, inp);
        return FTRT_EMPI;
    }
    int rc = ftrt__plane_waitall(&ctx->plane, 2, hr);
    if (rc) {
        ftrt__plane_bury(&ctx->plane, inp);
        return rc;
    }
    *in = *inp;
    free(inp);
    return 0;
}

/* The images: in->bytes from src into rp->held (grown to fit), out->bytes of rp->own to dst,
 * in PIECE-sized messages. On an interrupted exchange the held buffer is buried (receives into
 * it may still complete). Returns 0, -ENOMEM, FTRT_EMPI, or what the plane's wait returns. */
static int exchange_images(ftrt_ctx *ctx, const ftrt__loc_ops *dev, const img_hdr *in,
                           const img_hdr *out, int src, int dst)
{
    ftrt__replica *rp = &ctx->rep;
    MPI_Comm comm = ctx->plane.comm;
    int rc = grow(&rp->held, &rp->held_cap, (size_t)in->bytes, dev, &rp->held_pin, 0);
    if (rc) return rc; /* (the partner's send is left unmatched: it waits until a detector
                          fences a rank; rare, and logged by the caller) */
    size_t npieces_in = ((size_t)in->bytes + PIECE - 1) / PIECE;
    size_t npieces_out = ((size_t)out->bytes + PIECE - 1) / PIECE;
    MPI_Request *req = malloc((npieces_in + npieces_out + 1) * sizeof *req);
    if (!req) return -ENOMEM;
    int q = 0;
    for (size_t o = 0; o < in->bytes && !rc; o += PIECE) {
        size_t len = in->bytes - o < PIECE ? in->bytes - o : PIECE;
        if (MPI_Irecv(rp->held + o, (int)len, MPI_BYTE, src, TAG_IMG, comm, &req[q++]) != MPI_SUCCESS)
            rc = FTRT_EMPI;
    }
    for (size_t o = 0; o < out->bytes && !rc; o += PIECE) {
        size_t len = out->bytes - o < PIECE ? out->bytes - o : PIECE;
        if (MPI_Isend(rp->own + o, (int)len, MPI_BYTE, dst, TAG_IMG, comm, &req[q++]) != MPI_SUCCESS)
            rc = FTRT_EMPI;
    }
    if (!rc) rc = ftrt__plane_waitall(&ctx->plane, q, req);
    free(req);
    if (rc) { /* receives into held may still complete: that buffer is never reused */
        if (rp->held_pin) rp->held_pin->unpin(rp->held);
        rp->held_pin = NULL;
        ftrt__plane_bury(&ctx->plane, rp->held);
        rp->held = NULL;
        rp->held_cap = 0;
    }
    return rc;
}

/* Keeps the partner's image just received if its CRC32C matches the source's (else logs it:
 * a recovery of that rank uses the checkpoint). */
static void keep_image(ftrt_ctx *ctx, const img_hdr *in, int src, int64_t step)
{
    ftrt__replica *rp = &ctx->rep;
    uint32_t got = ftrt__crc32c(0, rp->held, (size_t)in->bytes);
    if (got != in->crc) {
        ftrt_log_error("partner replica of logical rank %d, step %lld: CRC32C %08x on arrival, "
                       "%08x at the source; not kept (a recovery of that rank will use the "
                       "checkpoint)", src, (long long)step, got, in->crc);
        return;
    }
    rp->held_bytes = (size_t)in->bytes;
    rp->held_crc = in->crc;
    rp->held_sig = in->sig;
    rp->held_of = src;
    rp->held_step = step;
    if (ftrt__knobs.replica_corrupt && in->bytes > 0) rp->held[in->bytes / 2] ^= 0x04;
}

int ftrt__replica_refresh(ftrt_ctx *ctx, int64_t step)
{
    ftrt__replica *rp = &ctx->rep;
    if (!ftrt__replica_enabled(ctx)) return 0;
    const ftrt__loc_ops *dev;
    int rc = device_of(ctx, "refresh", &dev);
    if (rc) return rc;
    rc = ftrt__interrupted(ctx);
    if (rc) return rc;
    if (ctx->cfg.shard_redundancy == FTRT_SHARD_ERASURE) { /* parity instead (ecgroup.c) */
        uint32_t crc = 0;
        int trc = take_image(ctx, dev, step, &crc);
        if (trc)
            ftrt_log_warn("erasure group of step %lld: no image (%s); this rank's group keeps no "
                          "parity (a recovery of it uses the checkpoint)", (long long)step,
                          ftrt_strerror(trc));
        return ftrt__ec_refresh(ctx, step, trc == 0, crc);
    }
    rc = partner_shift(ctx);
    if (rc) return rc;
    size_t total, shard;
    layout(ctx, &total, &shard);
    img_hdr out = {.step = step, .bytes = shard, .sig = shard_sig(ctx), .from = ctx->rank};
    int trc = take_image(ctx, dev, step, &out.crc);
    if (trc) {
        /* No image this time; the partner still gets a header (step -1: nothing follows), so
         * that its exchange completes, and recoveries meanwhile use the checkpoint. */
        ftrt_log_warn("partner replica of step %lld: no %zu-byte image (%s); this rank keeps "
                      "none (a recovery of it uses the checkpoint)", (long long)step, total,
                      ftrt_strerror(trc));
        out.step = -1;
        out.bytes = 0;
    }
    int n = ctx->size, dst = (ctx->rank + rp->shift) % n, src = (ctx->rank - rp->shift + n) % n;
    rp->held_step = -1; /* the partner's image is replaced */
    img_hdr in;
    rc = exchange_headers(ctx, &out, src, dst, &in);
    if (rc) goto interrupted;
    int none = in.from == src && in.step == -1 && in.bytes == 0; /* the partner kept no image */
    if (!none && (in.from != src || in.step != step)) {
        ftrt_log_error("partner replica: logical rank %d sent the image of rank %d, step %lld "
                       "(expected rank %d, step %lld)", src, in.from, (long long)in.step, src,
                       (long long)step);
        return FTRT_EMISMATCH;
    }
    rc = exchange_images(ctx, dev, &in, &out, src, dst);
    if (rc) goto interrupted;
    if (!none) keep_image(ctx, &in, src, step);
    return 0;
interrupted: /* (an epoch change meanwhile: the trainer's next call recovers) */
    if (rc == FTRT_ERECOVER) ctx->watch.needs_recover = 1;
    return rc;
}

int ftrt__replica_step(ftrt_ctx *ctx, int64_t steps_done)
{
    int k = ctx->cfg.shard_replica_every;
    if (k <= 0 || steps_done <= 0 || steps_done % k != 0) return 0;
    ftrt__ledger_mark(ctx, FTRT__IV_CKPT);
    int rc = ftrt__replica_refresh(ctx, steps_done);
    if (rc == FTRT_ERECOVER)
        ftrt__ledger_failure(ctx);
    else
        ftrt__ledger_mark(ctx, ftrt__compute_kind(ctx));
    return rc;
}

void ftrt__replica_offer(ftrt_ctx *ctx, int64_t *own_step, int64_t *held_step, int32_t *held_of,
                         int32_t *own_shard_only)
{
    ftrt__replica *rp = &ctx->rep;
    *own_step = *held_step = -1;
    *held_of = -1;
    *own_shard_only = 0;
    if (rp->own_step >= 0) {
        if (ftrt__crc32c(0, rp->own, rp->own_bytes) == rp->own_crc_all) {
            *own_step = rp->own_step;
            *own_shard_only = rp->own_shard_only;
        } else {
            ftrt_log_error("partner replica: this rank's own image of step %lld fails its CRC32C "
                           "(memory corrupted since it was taken); not offered",
                           (long long)rp->own_step);
        }
    }
    if (rp->held_step >= 0) {
        if (ftrt__crc32c(0, rp->held, rp->held_bytes) == rp->held_crc) {
            *held_step = rp->held_step;
            *held_of = rp->held_of;
        } else {
            ftrt_log_error("partner replica: the image of logical rank %d, step %lld, fails its "
                           "CRC32C (memory corrupted since it arrived); not offered",
                           rp->held_of, (long long)rp->held_step);
        }
    }
}

static int from_partners(ftrt_ctx *ctx, ftrt__xfer_stat *st);

int ftrt__replica_restore(ftrt_ctx *ctx, ftrt__xfer_stat *st)
{
    ftrt__replica *rp = &ctx->rep;
    const ftrt__plan *p = ctx->plan;
    const int32_t *role = ftrt__plan_roles_c(p);
    int needs = role[ctx->rank] == FTRT__PLAN_NEEDS_STATE;
    size_t total, shard;
    layout(ctx, &total, &shard);
    if (st) memset(st, 0, sizeof *st);
    const ftrt__loc_ops *dev;
    int rc = device_of(ctx, "restore", &dev);
    if (rc) return rc;
    if (!needs) { /* a survivor: its own image of mem_step (offered in its REPORT) */
        size_t want = rp->own_shard_only ? shard : total;
        if (rp->own_step != p->mem_step || rp->own_bytes != want || rp->own_shard != shard) {
            ftrt_log_error("recovery: no image of step %lld of this rank's regions in memory "
                           "(have step %lld)", (long long)p->mem_step, (long long)rp->own_step);
            return FTRT_EMISMATCH;
        }
        /* (a shard-only image: the replicated regions come from the peers, the plan's
         * survivors behind; learned after this, recovery.c) */
        rc = copy_regions(ctx, dev, rp->own, 0, rp->own_shard_only ? 1 : 2, NULL, NULL);
    } else {
        rc = grow(&rp->own, &rp->own_cap, total, dev, &rp->own_pin, 1);
        rp->own_step = -1;
        rp->own_shard = shard; /* (the sharded part arrives into it) */
    }
    if (rc) return rc;
    if (ctx->cfg.shard_redundancy == FTRT_SHARD_ERASURE) /* rebuilt by their groups */
        rc = ftrt__ec_restore(ctx, p->mem_step, st);
    else
        rc = from_partners(ctx, st);
    if (rc) return rc;
    if (needs) /* the sharded part arrived into its image */
        rc = copy_regions(ctx, dev, rp->own, 0, 1, NULL, NULL);
    return rc;
}

/* Each replaced rank's sharded image, from the survivor holding it, CRC-checked per chunk
 * (comm/transfer.c with one source, one receiver, the others bystanders), into its own image.
 * Returns 0, FTRT_EMISMATCH, -ENOMEM or the transfer's code. */
static int from_partners(ftrt_ctx *ctx, ftrt__xfer_stat *st)
{
    ftrt__replica *rp = &ctx->rep;
    const ftrt__plan *p = ctx->plan;
    const int32_t *ss = ftrt__plan_shard_src_c(p);
    int me = ctx->rank, rc = 0;
    size_t total, shard;
    layout(ctx, &total, &shard);
    int32_t *r2 = malloc((size_t)p->ntrainers * sizeof *r2);
    if (!r2) return -ENOMEM;
    for (int l = 0; l < p->ntrainers && !rc; l++) {
        if (ss[l] < 0) continue;
        /* every member learns the image's size from its holder and receiver */
        int64_t sz[4] = {me == ss[l] ? (int64_t)rp->held_bytes : 0, me == l ? (int64_t)shard : 0,
                         me == ss[l] ? (int64_t)rp->held_sig : 0, me == l ? (int64_t)shard_sig(ctx) : 0};
        rc = ftrt__plane_allreduce(&ctx->plane, sz, 4, FTRT_INT64, FTRT_SUM);
        if (rc) break;
        if (sz[0] != sz[1] || sz[2] != sz[3]) {
            ftrt_log_error("recovery: logical rank %d's sharded regions (%lld bytes) differ from "
                           "its image held by rank %d (%lld bytes)", l, (long long)sz[1], ss[l],
                           (long long)sz[0]);
            rc = FTRT_EMISMATCH;
            break;
        }
        if (me == ss[l] && rp->held_of != l) {
            rc = FTRT_EMISMATCH; /* (the plan follows this rank's REPORT: not expected) */
            break;
        }
        for (int k = 0; k < p->ntrainers; k++)
            r2[k] = k == ss[l] ? FTRT__PLAN_UP_TO_DATE
                    : k == l   ? FTRT__PLAN_NEEDS_STATE
                               : FTRT__PLAN_BYSTANDER;
        char name[64];
        snprintf(name, sizeof name, "sharded image of logical rank %d", l);
        ftrt__xfer_region xr = {name, me == ss[l] ? rp->held : me == l ? rp->own : NULL,
                                (size_t)sz[0], NULL}; /* the images are host memory */
        ftrt__xfer_stat one;
        rc = ftrt__xfer_replicated(&ctx->plane, &xr, 1, r2, FTRT__XFER_CHUNK,
                                   ftrt__knobs.xfer_corrupt_chunk - 1,
                                   ftrt__knobs.xfer_corrupt_times ? ftrt__knobs.xfer_corrupt_times : 1,
                                   &one);
        if (st && !rc) {
            st->bytes_sent += one.bytes_sent;
            st->bytes_received += one.bytes_received;
            st->chunks_retried += one.chunks_retried;
            st->seconds += one.seconds;
            st->receivers++;
        }
    }
    free(r2);
    return rc;
}

void ftrt__replica_adopt(ftrt_ctx *ctx, int64_t step)
{
    ftrt__replica *rp = &ctx->rep;
    size_t total, shard;
    layout(ctx, &total, &shard);
    if (!ftrt__replica_enabled(ctx) || !rp->own || rp->own_cap < shard) return;
    if (rp->own_shard_only && rp->own_step == step) return; /* a survivor behind: kept, CRC'd */
    /* (the sharded image that arrived into it, of `step`) */
    rp->own_bytes = rp->own_shard = shard;
    rp->own_crc_all = ftrt__crc32c(0, rp->own, shard);
    rp->own_shard_only = 1;
    rp->own_step = step;
}

void ftrt__replica_drop(ftrt_ctx *ctx)
{
    ftrt__ec_drop(ctx);
    ctx->rep.own_step = ctx->rep.held_step = -1;
    ctx->rep.held_of = -1;
}

void ftrt__replica_free(ftrt_ctx *ctx)
{
    if (ctx->rep.own_pin) ctx->rep.own_pin->unpin(ctx->rep.own);
    if (ctx->rep.held_pin) ctx->rep.held_pin->unpin(ctx->rep.held);
    ftrt_free(ctx->rep.own);
    free(ctx->rep.held);
    ftrt__ec_free(ctx);
    memset(&ctx->rep, 0, sizeof ctx->rep);
    ctx->rep.own_step = ctx->rep.held_step = -1;
    ctx->rep.held_of = -1;
}

/*
 * shard.c - shard files: the header/table codec (format in format.h), the io_uring transfer
 * engine shared by writer and reader, and ftrt__shard_write().
 *
 * Writing: the data of every region (a REPLICATED region's 1/N slice, a SHARDED region whole)
 * is copied into a few 4 KiB-aligned staging buffers of at most 8 MiB with the fused
 * copy + CRC32C, and written through io_uring with up to FTRT__IO_DEPTH writes in flight, to
 * rank-<r>.ftrt.tmp.<pid> (unique to the writer: a rank cut off from the job and its
 * replacement may write the same shard at once); then the header and table (which carry the CRCs) are written at offset 0,
 * the file is fdatasync'ed through the ring, renamed to rank-<r>.ftrt and the step directory is
 * fsync'ed. A committed shard of the same name is only ever replaced atomically.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/format.h"
#include "ftrt.h"
#include "base/log.h"

/* ---- little-endian codec ----------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void ftrt__slice(uint64_t total, uint32_t r, uint32_t n, uint64_t *off, uint64_t *len)
{
    /* B*r/n == (B/n)*r + (B%n)*r/n exactly; (B%n)*r < n*n < 2^64. */
    uint64_t q = total / n, m = total % n;
    uint64_t lo = q * r + (m * r) / n;
    uint64_t hi = q * (r + 1u) + (m * (r + 1u)) / n;
    *off = lo;
    *len = hi - lo;
}

static uint32_t table_crc(const unsigned char *buf, uint32_t table_bytes)
{
    static const unsigned char zero[4];
    uint32_t c = ftrt__crc32c(0, buf, 36);
    c = ftrt__crc32c(c, zero, 4);
    return ftrt__crc32c(c, buf + FTRT__SHARD_HDR_BYTES, table_bytes - FTRT__SHARD_HDR_BYTES);
}

void ftrt__shard_encode(void *buf, ftrt__shard_hdr *hdr, const ftrt__shard_ent *ents)
{
    unsigned char *p = buf;
    memset(p, 0, hdr->table_bytes);
    memcpy(p, FTRT__SHARD_MAGIC, 8);
    put_u32(p + 8, FTRT__SHARD_VERSION);
    put_u32(p + 12, hdr->table_bytes);
    put_u64(p + 16, (uint64_t)hdr->step);
    put_u32(p + 24, hdr->rank);
    put_u32(p + 28, hdr->nranks);
    put_u32(p + 32, hdr->nregions);
    for (uint32_t i = 0; i < hdr->nregions; i++) {
        unsigned char *e = p + FTRT__SHARD_HDR_BYTES + (size_t)i * FTRT__SHARD_ENT_BYTES;
        size_t nl = strnlen(ents[i].name, FTRT__NAME_MAX - 1);
        memcpy(e, ents[i].name, nl);
        put_u32(e + 64, ents[i].flags);
        put_u64(e + 72, ents[i].total_bytes);
        put_u64(e + 80, ents[i].slice_offset);
        put_u64(e + 88, ents[i].slice_bytes);
        put_u64(e + 96, ents[i].file_offset);
        put_u32(e + 104, ents[i].data_crc);
    }
    hdr->version = FTRT__SHARD_VERSION;
    hdr->header_crc = table_crc(p, hdr->table_bytes);
    put_u32(p + 36, hdr->header_crc);
}

#define BAD(msg)                                                                               \
    do {                                                                                       \
        if (why) *why = (msg);                                                                 \
        return FTRT_ECORRUPT;                                                                  \
    } while (0)

int ftrt__shard_peek(const void *buf, size_t len, uint32_t *table_bytes, const char **why)
{
    const unsigned char *p = buf;
    if (len < FTRT__SHARD_HDR_BYTES) BAD("file shorter than the 40-byte header");
    if (memcmp(p, FTRT__SHARD_MAGIC, 8) != 0) BAD("bad magic (not an ftrt shard)");
    if (get_u32(p + 8) != FTRT__SHARD_VERSION) BAD("unsupported format version");
    uint32_t n = get_u32(p + 32), tb = get_u32(p + 12);
    if (n > FTRT__SHARD_MAX_REGIONS) BAD("region count above the limit of 4096");
    if (tb != FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * n)
        BAD("header size field disagrees with the region count");
    *table_bytes = tb;
    return 0;
}

/* Checks one decoded entry against the header and the previous entry's data end. */
static const char *check_ent(const ftrt__shard_hdr *h, const ftrt__shard_ent *e,
                             uint64_t prev_end, uint64_t file_size)
{
    if (e->name[0] == '\0') return "empty region name";
    if (e->flags == FTRT_REGION_SHARDED) {
        if (e->slice_offset != 0 || e->slice_bytes != e->total_bytes)
            return "SHARDED region entry is not stored whole";
    } else if (e->flags == FTRT_REGION_REPLICATED) {
        uint64_t off, len;
        ftrt__slice(e->total_bytes, h->rank, h->nranks, &off, &len);
        if (e->slice_offset != off || e->slice_bytes != len)
            return "REPLICATED slice is not this rank's share";
    } else {
        return "unknown region flags";
    }
    if (e->file_offset % FTRT__SHARD_ALIGN != 0) return "region data offset not 4 KiB-aligned";
    if (e->file_offset < prev_end) return "region data overlaps the table or previous region";
    if (e->file_offset > file_size || e->slice_bytes > file_size - e->file_offset)
        return "region data extends beyond the end of the file (truncated?)";
    return NULL;
}

int ftrt__shard_parse(const void *buf, size_t len, uint64_t file_size, ftrt__shard_hdr *hdr,
                      ftrt__shard_ent **ents, const char **why)
{
    const unsigned char *p = buf;
    uint32_t tb;
    *ents = NULL;
    int rc = ftrt__shard_peek(buf, len, &tb, why);
    if (rc < 0) return rc;
    if (len < tb) BAD("region table truncated");
    if (file_size < tb) BAD("file shorter than its region table");
    ftrt__shard_hdr h = {
        .version = get_u32(p + 8),
        .table_bytes = tb,
        .step = (int64_t)get_u64(p + 16),
        .rank = get_u32(p + 24),
        .nranks = get_u32(p + 28),
        .nregions = get_u32(p + 32),
        .header_crc = get_u32(p + 36),
    };
    if (table_crc(p, tb) != h.header_crc) BAD("header/table CRC32C mismatch");
    if (h.step < 0) BAD("negative step");
    if (h.nranks == 0 || h.nranks > FTRT__MAX_RANKS || h.rank >= h.nranks)
        BAD("rank/nranks out of range");

    ftrt__shard_ent *e = NULL;
    if (h.nregions > 0) {
        e = calloc(h.nregions, sizeof *e);
        if (!e) return -ENOMEM;
    }
    uint64_t prev_end = tb;
    for (uint32_t i = 0; i < h.nregions; i++) {
        const unsigned char *q = p + FTRT__SHARD_HDR_BYTES + (size_t)i * FTRT__SHARD_ENT_BYTES;
        const char *bad = NULL;
        if (!memchr(q, '\0', FTRT__NAME_MAX))
            bad = "region name not NUL-terminated";
        else if (get_u32(q + 68) != 0 || get_u32(q + 108) != 0)
            bad = "reserved field not zero";
        if (!bad) {
            memcpy(e[i].name, q, FTRT__NAME_MAX);
            e[i].flags = get_u32(q + 64);
            e[i].total_bytes = get_u64(q + 72);
            e[i].slice_offset = get_u64(q + 80);
            e[i].slice_bytes = get_u64(q + 88);
            e[i].file_offset = get_u64(q + 96);
            e[i].data_crc = get_u32(q + 104);
            bad = check_ent(&h, &e[i], prev_end, file_size);
        }
        for (uint32_t j = 0; !bad && j < i; j++)
            if (strcmp(e[j].name, e[i].name) == 0) bad = "duplicate region name";
        if (bad) {
            free(e);
            BAD(bad);
        }
        prev_end = e[i].file_offset + e[i].slice_bytes; /* <= file_size: no overflow */
    }
    *hdr = h;
    *ents = e;
    return 0;
}

#undef BAD

/* ---- I/O engine -------------------------------------------------------------------------- */

void ftrt__io_init(ftrt__io *io)
{
    static atomic_int warned;
    memset(io, 0, sizeof *io);
    if (ftrt__knobs.io_force_sync) return;
    int rc = io_uring_queue_init(64, &io->ring, 0);
    if (rc == 0) {
        io->have_ring = 1;
        return;
    }
    if (!atomic_exchange(&warned, 1))
        ftrt_log_warn("io_uring unavailable (io_uring_queue_init: %s): checkpoint I/O falls back "
                      "to pread/pwrite + fdatasync",
                      strerror(-rc));
}

void ftrt__io_exit(ftrt__io *io)
{
    if (io->have_ring) io_uring_queue_exit(&io->ring);
    io->have_ring = 0;
}

/* One request: len bytes between buf and file offset off, done of them transferred. */
typedef struct req {
    unsigned char *buf;
    unsigned char *stage; /* writer: this slot's staging buffer */
    uint64_t off;
    size_t len;
    size_t done;
    int busy;
    int retries;
} req;

typedef struct xfer {
    ftrt__io *io;
    int fd;
    int write;
    req slot[FTRT__IO_DEPTH];
    unsigned nslots;   /* slots in use (0 = FTRT__IO_DEPTH) */
    unsigned inflight; /* requests queued or submitted, not yet completed */
    unsigned pending;  /* of those, prepared but not yet submitted */
    int err;
} xfer;

/* Produces the next request into r (buf, off, len); returns 1, 0 when done, or -errno. */
typedef int (*xfer_next_fn)(void *arg, req *r);

static int sync_io(xfer *x, req *r)
{
    while (r->done < r->len) {
        ssize_t n = x->write ? pwrite(x->fd, r->buf + r->done, r->len - r->done,
                                      (off_t)(r->off + r->done))
                             : pread(x->fd, r->buf + r->done, r->len - r->done,
                                     (off_t)(r->off + r->done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return x->write ? -EIO : -ENODATA;
        r->done += (size_t)n;
    }
    return 0;
}

static int ring_queue(xfer *x, req *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&x->io->ring);
    if (!sqe) {
        int rc = io_uring_submit(&x->io->ring);
        if (rc < 0) return rc;
        x->pending -= (unsigned)rc < x->pending ? (unsigned)rc : x->pending;
        sqe = io_uring_get_sqe(&x->io->ring);
        if (!sqe) return -EBUSY;
    }
    unsigned n = (unsigned)(r->len - r->done);
    if (x->write)
        io_uring_prep_write(sqe, x->fd, r->buf + r->done, n, r->off + r->done);
    else
        io_uring_prep_read(sqe, x->fd, r->buf + r->done, n, r->off + r->done);
    io_uring_sqe_set_data(sqe, r);
    x->pending++;
    return 0;
}

/* Submits what is prepared. A hard failure leaves SQEs the kernel never saw: the ring is then
 * torn down after the submitted requests drain (see xfer_run). */
static int ring_submit(xfer *x)
{
    int tries = 0;
    while (x->pending > 0) {
        int rc = io_uring_submit(&x->io->ring);
        if (rc >= 0) {
            x->pending -= (unsigned)rc < x->pending ? (unsigned)rc : x->pending;
            if (rc == 0 && ++tries > 1000) return -EAGAIN;
            continue;
        }
        if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && ++tries <= 1000) continue;
        return rc;
    }
    return 0;
}

/* Waits for one completion and accounts for it (requeueing short transfers). */
static void ring_reap(xfer *x)
{
    struct io_uring_cqe *cqe;
    int rc;
    do rc = io_uring_wait_cqe(&x->io->ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) {
        /* Cannot learn which request this was: give up on the ring entirely. */
        if (!x->err) x->err = rc;
        x->inflight = x->pending; /* forget the rest; the ring is torn down by the caller */
        return;
    }
    req *r = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&x->io->ring, cqe);
    x->inflight--;
    if (res == -EINTR || res == -EAGAIN) {
        if (!x->err && ++r->retries <= 100 && ring_queue(x, r) == 0) {
            x->inflight++;
            return;
        }
        if (!x->err) x->err = res;
    } else if (res < 0) {
        if (!x->err) x->err = res;
    } else if (res == 0) {
        if (!x->err) x->err = x->write ? -EIO : -ENODATA;
    } else {
        r->done += (size_t)res;
        if (r->done < r->len && !x->err) {
            int qrc = ring_queue(x, r);
            if (qrc == 0) {
                x->inflight++;
                return;
            }
            x->err = qrc;
        }
    }
    r->busy = 0;
}

/* Runs requests from next() until it has no more, keeping up to FTRT__IO_DEPTH in flight.
 * Always waits for every submitted request before returning (buffers stay owned by the
 * kernel until then). Returns 0 or the first error. */
static int xfer_run(xfer *x, xfer_next_fn next, void *arg)
{
    int more = 1;
    unsigned nslots = x->nslots ? x->nslots : FTRT__IO_DEPTH;
    for (;;) {
        while (!x->err && more) {
            req *r = NULL;
            for (unsigned i = 0; i < nslots; i++)
                if (!x->slot[i].busy) {
                    r = &x->slot[i];
                    break;
                }
            if (!r) break;
            int rc = next(arg, r);
            if (rc <= 0) {
                more = 0;
                if (rc < 0) x->err = rc;
                break;
            }
            r->done = 0;
            r->retries = 0;
            if (!x->io->have_ring) {
                rc = sync_io(x, r);
                if (rc < 0) x->err = rc;
                continue;
            }
            rc = ring_queue(x, r);
            if (rc < 0) {
                x->err = rc;
                break;
            }
            r->busy = 1;
            x->inflight++;
        }
        if (x->inflight == 0) break;
        int rc = ring_submit(x);
        if (rc < 0) {
            if (!x->err) x->err = rc;
            if (x->inflight == x->pending) break; /* nothing the kernel holds */
        }
        if (x->inflight > x->pending) ring_reap(x);
        else if (x->err) break;
    }
    if (x->pending > 0 || x->inflight > 0) {
        /* SQEs the kernel never took (or an unusable ring): drop the ring, go synchronous. */
        ftrt__io_exit(x->io);
        x->pending = x->inflight = 0;
    }
    for (unsigned i = 0; i < FTRT__IO_DEPTH; i++) x->slot[i].busy = 0;
    return x->err;
}

/* ---- reading ----------------------------------------------------------------------------- */

typedef struct range_src {
    unsigned char *buf;
    size_t len;
    uint64_t off;
    size_t pos;
} range_src;

static int range_next(void *arg, req *r)
{
    range_src *s = arg;
    if (s->pos >= s->len) return 0;
    size_t n = s->len - s->pos;
    if (n > FTRT__IO_CHUNK) n = FTRT__IO_CHUNK;
    r->buf = s->buf + s->pos;
    r->off = s->off + s->pos;
    r->len = n;
    s->pos += n;
    return 1;
}

int ftrt__io_read(ftrt__io *io, int fd, void *buf, size_t len, uint64_t off)
{
    xfer x = {.io = io, .fd = fd, .write = 0};
    range_src s = {.buf = buf, .len = len, .off = off};
    return xfer_run(&x, range_next, &s);
}

int ftrt__shard_open(ftrt__io *io, const char *path, uint64_t *size, ftrt__shard_hdr *hdr,
                     ftrt__shard_ent **ents)
{
    unsigned char head[FTRT__SHARD_HDR_BYTES];
    const char *why = NULL;
    unsigned char *table = NULL;
    struct stat st;
    uint32_t tb;
    *ents = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        ftrt_log_warn("checkpoint shard %s: cannot open: %s", path, strerror(e));
        return -e;
    }
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc == 0 && !S_ISREG(st.st_mode)) {
        why = "not a regular file";
        rc = FTRT_ECORRUPT;
    }
    if (rc == 0 && (uint64_t)st.st_size < FTRT__SHARD_HDR_BYTES) {
        why = "file shorter than the 40-byte header (truncated?)";
        rc = FTRT_ECORRUPT;
    }
    if (rc == 0) rc = ftrt__io_read(io, fd, head, sizeof head, 0);
    if (rc == 0) rc = ftrt__shard_peek(head, sizeof head, &tb, &why);
    if (rc == 0 && tb > (uint64_t)st.st_size) {
        why = "file shorter than its region table (truncated?)";
        rc = FTRT_ECORRUPT;
    }
    if (rc == 0 && !(table = malloc(tb))) rc = -ENOMEM;
    if (rc == 0) rc = ftrt__io_read(io, fd, table, tb, 0);
    if (rc == 0) rc = ftrt__shard_parse(table, tb, (uint64_t)st.st_size, hdr, ents, &why);
    free(table);
    if (rc == -ENODATA) {
        why = "file shrank while being read (truncated?)";
        rc = FTRT_ECORRUPT;
    }
    if (rc == FTRT_ECORRUPT)
        ftrt_log_warn("checkpoint shard %s is corrupt: %s", path, why ? why : "?");
    else if (rc < 0)
        ftrt_log_warn("checkpoint shard %s: read failed: %s", path, strerror(-rc));
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

/* ---- writing ----------------------------------------------------------------------------- */

typedef struct data_src {
    const ftrt__region *regs;
    ftrt__shard_ent *ents;
    int nregs;
    int idx;      /* first region whose slice may still lie at or after pos */
    uint64_t pos; /* next file offset to produce */
    uint64_t end; /* file size */
    size_t chunk; /* staging buffer size */
} data_src;

/* Fills the slot's staging buffer with the file bytes [pos, pos + n): slice data (copied with
 * its CRC folded into ents[i].data_crc) and zero padding. */
static int data_next(void *arg, req *r)
{
    data_src *s = arg;
    if (s->pos >= s->end) return 0;
    uint64_t n = s->end - s->pos;
    if (n > s->chunk) n = s->chunk;
    uint64_t stop = s->pos + n, cur = s->pos;
    unsigned char *dst = r->stage;
    while (cur < stop) {
        while (s->idx < s->nregs &&
               s->ents[s->idx].file_offset + s->ents[s->idx].slice_bytes <= cur)
            s->idx++;
        ftrt__shard_ent *e = s->idx < s->nregs ? &s->ents[s->idx] : NULL;
        if (e && cur >= e->file_offset) {
            uint64_t seg = e->file_offset + e->slice_bytes - cur;
            if (seg > stop - cur) seg = stop - cur;
            const unsigned char *src = (const unsigned char *)s->regs[s->idx].ptr +
                                       e->slice_offset + (cur - e->file_offset);
            e->data_crc = ftrt__copy_crc32c(dst + (cur - s->pos), src, seg, e->data_crc);
            cur += seg;
        } else {
            uint64_t gap_end = e && e->file_offset < stop ? e->file_offset : stop;
            memset(dst + (cur - s->pos), 0, gap_end - cur);
            cur = gap_end;
        }
    }
    r->buf = r->stage;
    r->off = s->pos;
    r->len = n;
    s->pos = stop;
    return 1;
}

static unsigned char *aligned_alloc4k(size_t len)
{
    void *p = NULL;
    return posix_memalign(&p, FTRT__SHARD_ALIGN, len) == 0 ? p : NULL;
}

int ftrt__regions_check(const ftrt__region *regs, int nregs)
{
    if (nregs < 0 || (unsigned)nregs > FTRT__SHARD_MAX_REGIONS || (nregs > 0 && !regs))
        return -EINVAL;
    for (int i = 0; i < nregs; i++) {
        size_t nl = strnlen(regs[i].name, FTRT__NAME_MAX);
        if (nl == 0 || nl >= FTRT__NAME_MAX) return -EINVAL;
        if (regs[i].flags != FTRT_REGION_REPLICATED && regs[i].flags != FTRT_REGION_SHARDED)
            return -EINVAL;
        if (regs[i].bytes > 0 && !regs[i].ptr) return -EINVAL;
        for (int j = 0; j < i; j++)
            if (strcmp(regs[i].name, regs[j].name) == 0) return -EINVAL;
    }
    return 0;
}

uint64_t ftrt__shard_layout(const ftrt__region *regs, int nregs, int rank, int nranks,
                            ftrt__shard_ent *ents, uint32_t table_bytes)
{
    const uint64_t limit = (uint64_t)INT64_MAX - 2 * FTRT__SHARD_ALIGN;
    uint64_t off = ftrt__align4k(table_bytes);
    for (int i = 0; i < nregs; i++) {
        ftrt__shard_ent *e = &ents[i];
        memcpy(e->name, regs[i].name, strnlen(regs[i].name, FTRT__NAME_MAX - 1));
        e->flags = regs[i].flags;
        e->total_bytes = regs[i].bytes;
        if (e->flags == FTRT_REGION_SHARDED) {
            e->slice_offset = 0;
            e->slice_bytes = e->total_bytes;
        } else {
            ftrt__slice(e->total_bytes, (uint32_t)rank, (uint32_t)nranks, &e->slice_offset,
                        &e->slice_bytes);
        }
        e->file_offset = off;
        e->data_crc = 0;
        if (e->slice_bytes > limit - off) return 0;
        off = ftrt__align4k(off + e->slice_bytes);
    }
    return off;
}

int ftrt__shard_write(const char *dir, int64_t step, int rank, int nranks,
                      const ftrt__region *regs, int nregs)
{
    char sdir[4096], tmp[4096], fin[4096];
    if (!dir || step < 0 || nranks < 1 || nranks > FTRT__MAX_RANKS || rank < 0 || rank >= nranks)
        return -EINVAL;
    int rc = ftrt__regions_check(regs, nregs);
    if (rc < 0) return rc;
    if ((rc = ftrt__path(sdir, sizeof sdir, "%s/step-%lld", dir, (long long)step)) < 0 ||
        (rc = ftrt__path(fin, sizeof fin, "%s/rank-%d.ftrt", sdir, rank)) < 0 ||
        (rc = ftrt__path(tmp, sizeof tmp, "%s/rank-%d.ftrt.tmp.%d", sdir, rank, (int)getpid())) < 0)
        return rc;
    rc = ftrt__mkdir_p(sdir);
    if (rc < 0) {
        ftrt_log_warn("checkpoint: cannot create %s: %s", sdir, strerror(-rc));
        return rc;
    }

    uint32_t tb = FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * (uint32_t)nregs;
    ftrt__shard_ent *ents = calloc(nregs > 0 ? (size_t)nregs : 1, sizeof *ents);
    unsigned char *stage = NULL, *head = NULL;
    ftrt__io io;
    int fd = -1, have_io = 0, renamed = 0;
    if (!ents) return -ENOMEM;
    uint64_t end = ftrt__shard_layout(regs, nregs, rank, nranks, ents, tb);
    uint64_t data_start = ftrt__align4k(tb);
    if (end == 0) {
        rc = -EFBIG;
        goto out;
    }

    /* Staging: up to FTRT__IO_DEPTH buffers of at most 8 MiB each, never the whole state. */
    uint64_t data_len = end - data_start;
    size_t chunk = data_len < FTRT__IO_CHUNK ? (size_t)data_len : FTRT__IO_CHUNK;
    unsigned nbuf = 0;
    if (data_len > 0) {
        uint64_t nchunks = (data_len + chunk - 1) / chunk;
        nbuf = nchunks < FTRT__IO_DEPTH ? (unsigned)nchunks : FTRT__IO_DEPTH;
        if (!(stage = aligned_alloc4k((size_t)nbuf * chunk))) {
            rc = -ENOMEM;
            goto out;
        }
    }
    if (!(head = aligned_alloc4k((size_t)data_start))) {
        rc = -ENOMEM;
        goto out;
    }

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    ftrt__io_init(&io);
    have_io = 1;

    xfer x = {.io = &io, .fd = fd, .write = 1, .nslots = nbuf};
    for (unsigned i = 0; i < nbuf; i++) x.slot[i].stage = stage + (size_t)i * chunk;
    data_src src = {.regs = regs, .ents = ents, .nregs = nregs, .pos = data_start, .end = end,
                    .chunk = chunk};
    if (data_len > 0 && (rc = xfer_run(&x, data_next, &src)) < 0) goto out;

    /* Header + table last: it carries the data CRCs. */
    ftrt__shard_hdr hdr = {.table_bytes = tb, .step = step, .rank = (uint32_t)rank,
                           .nranks = (uint32_t)nranks, .nregions = (uint32_t)nregs};
    memset(head, 0, (size_t)data_start);
    ftrt__shard_encode(head, &hdr, ents);
    x = (xfer){.io = &io, .fd = fd, .write = 1};
    range_src hs = {.buf = head, .len = (size_t)data_start, .off = 0};
    if ((rc = xfer_run(&x, range_next, &hs)) < 0) goto out;

    /* Durability: fdatasync through the ring (or directly), then publish the name. */
    if (io.have_ring) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io.ring);
        struct io_uring_cqe *cqe;
        if (!sqe) {
            rc = -EBUSY;
            goto out;
        }
        io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
        rc = io_uring_submit(&io.ring);
        if (rc >= 0) {
            do rc = io_uring_wait_cqe(&io.ring, &cqe);
            while (rc == -EINTR);
            if (rc == 0) {
                rc = cqe->res;
                io_uring_cqe_seen(&io.ring, cqe);
            }
        }
        if (rc > 0) rc = 0;
        if (rc < 0) goto out;
    } else if (fdatasync(fd) < 0) {
        rc = -errno;
        goto out;
    }
    rc = close(fd) < 0 ? -errno : 0;
    fd = -1;
    if (rc < 0) goto out;
    if (rename(tmp, fin) < 0) {
        rc = -errno;
        goto out;
    }
    renamed = 1;
    rc = ftrt__fsync_dir(sdir);
    if (rc == 0)
        ftrt_log_debug("checkpoint: wrote %s (%llu bytes, %d regions)", fin,
                       (unsigned long long)end, nregs);

out:
    if (fd >= 0) close(fd);
    if (have_io) ftrt__io_exit(&io);
    if (rc < 0) {
        ftrt_log_warn("checkpoint: writing %s failed: %s", fin, strerror(-rc));
        unlink(renamed ? fin : tmp);
    }
    free(stage);
    free(head);
    free(ents);
    return rc;
}

/*
 * uring.c - the io_uring paths of the checkpoint engine: writing a staged shard image and
 * reading region data back with verification.
 *
 * Writing (the persist thread): the staging slot already holds the exact file image (header,
 * table and 4 KiB-aligned region data, see format.h), so the file is written front to back in
 * `chunk`-byte requests straight from the slot, `qd` of them in flight, as fixed-buffer writes
 * (io_uring_prep_write_fixed) when the slot is registered with the ring, and with O_DIRECT
 * when the file system accepts it (else through the page cache, said once at warn level). The
 * file is fallocate'd to its size first, so a full disk fails at once and the direct writes are
 * overwrites of allocated blocks. Then fdatasync through the ring, rename of the .tmp into
 * place and an fsync of the step directory. A request that fails is never retried blindly:
 * -EAGAIN/-EINTR are re-queued a bounded number of times, any other error fails the shard and
 * removes the partial file.
 *
 * Reading (restore): a region slice is read in `chunk`-byte, 4 KiB-aligned requests into
 * aligned bounce buffers (O_DIRECT where possible, fixed buffers when registration works),
 * `qd` in flight, and each completed chunk is copied into region memory with the fused copy +
 * CRC32C while the next reads are in flight; the chunk CRCs are joined with
 * ftrt__crc32c_combine() and compared with the table's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/format.h"
#include "ftrt.h"
#include "base/log.h"

/* Says once per process that a file system refused O_DIRECT. */
static void warn_buffered(const char *path, int err)
{
    static atomic_int warned;
    if (!atomic_exchange(&warned, 1))
        ftrt_log_warn("checkpoint: %s does not accept O_DIRECT (%s): checkpoint I/O goes through "
                      "the page cache (buffered) instead",
                      path, strerror(err));
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- huge-page buffers ------------------------------------------------------------------- */

void *ftrt__map_huge(size_t len)
{
    const size_t huge = 2u << 20;
    len = (len + 4095) & ~(size_t)4095;
    size_t span = len + huge;
    unsigned char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    unsigned char *a = (unsigned char *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
    if (a > p) munmap(p, (size_t)(a - p));
    if (a + len < p + span) munmap(a + len, (size_t)(p + span - (a + len)));
#ifdef MADV_HUGEPAGE
    madvise(a, len, MADV_HUGEPAGE);
#endif
    return a;
}

void ftrt__unmap_huge(void *p, size_t len)
{
    if (p) munmap(p, (len + 4095) & ~(size_t)4095);
}

/* ---- the writer's ring ------------------------------------------------------------------- */

int ftrt__wring_init(ftrt__wring *w, unsigned qd)
{
    memset(w, 0, sizeof *w);
    if (ftrt__knobs.io_force_sync) return 0;
    int rc = io_uring_queue_init(qd + 4, &w->ring, 0);
    if (rc == 0) {
        w->have_ring = 1;
        return 0;
    }
    static atomic_int warned;
    if (!atomic_exchange(&warned, 1))
        ftrt_log_warn("io_uring unavailable (io_uring_queue_init: %s): checkpoint writes fall "
                      "back to pwrite + fdatasync",
                      strerror(-rc));
    return 0;
}

void ftrt__wring_exit(ftrt__wring *w)
{
    if (w->have_ring) {
        if (w->nfixed) io_uring_unregister_buffers(&w->ring);
        io_uring_queue_exit(&w->ring);
    }
    free(w->iov);
    memset(w, 0, sizeof *w);
}

int ftrt__wring_register(ftrt__wring *w, const struct iovec *iov, unsigned n)
{
    if (!w->have_ring) return -ENOSYS;
    if (w->nfixed) {
        io_uring_unregister_buffers(&w->ring);
        w->nfixed = 0;
    }
    free(w->iov);
    w->iov = NULL;
    if (n == 0) return 0;
    struct iovec *copy = malloc(n * sizeof *copy);
    if (!copy) return -ENOMEM;
    memcpy(copy, iov, n * sizeof *copy);
    int rc = io_uring_register_buffers(&w->ring, copy, n);
    if (rc < 0) {
        static atomic_int warned;
        free(copy);
        if (!atomic_exchange(&warned, 1))
            ftrt_log_warn("checkpoint: cannot register the staging buffers with io_uring (%s; "
                          "RLIMIT_MEMLOCK?): using unregistered writes",
                          strerror(-rc));
        return rc;
    }
    w->iov = copy;
    w->nfixed = n;
    return 0;
}

/* Index of the registered buffer holding [p, p + len), or -1. */
static int fixed_index(const ftrt__wring *w, const unsigned char *p, size_t len)
{
    for (unsigned i = 0; i < w->nfixed; i++) {
        const unsigned char *b = w->iov[i].iov_base;
        if (p >= b && p + len <= b + w->iov[i].iov_len) return (int)i;
    }
    return -1;
}

/* ---- writing a staged image -------------------------------------------------------------- */

typedef struct wreq {
    uint64_t off;
    size_t len, done;
    int busy, retries;
} wreq;

typedef struct wjob {
    ftrt__wring *w;
    int fd, direct;
    const unsigned char *img;
    uint64_t bytes;
    const ftrt__wopts *o;
} wjob;

static int abandoned(const ftrt__wopts *o)
{
    return o->abandoned && o->abandoned(o->arg);
}

/* Synchronous pwrite loop (no ring). */
static int write_sync(wjob *j)
{
    uint64_t pos = 0;
    while (pos < j->bytes) {
        if (abandoned(j->o)) return FTRT_ERECOVER;
        size_t n = j->bytes - pos < j->o->chunk ? (size_t)(j->bytes - pos) : j->o->chunk;
        ssize_t k = pwrite(j->fd, j->img + pos, n, (off_t)pos);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -errno;
        if (k == 0) return -EIO;
        pos += (uint64_t)k;
        if (j->o->delay_ms > 0) sleep_ms(j->o->delay_ms);
    }
    return 0;
}

static int queue_write(wjob *j, wreq *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&j->w->ring);
    if (!sqe) return -EBUSY; /* cannot happen: the ring holds qd + 4 entries */
    const unsigned char *p = j->img + r->off + r->done;
    unsigned n = (unsigned)(r->len - r->done);
    int idx = fixed_index(j->w, p, n);
    if (idx >= 0)
        io_uring_prep_write_fixed(sqe, j->fd, p, n, r->off + r->done, idx);
    else
        io_uring_prep_write(sqe, j->fd, p, n, r->off + r->done);
    io_uring_sqe_set_data(sqe, r);
    return 0;
}

/* Submits what is queued; returns 0 or a hard error (the SQEs the kernel did not take stay in
 * the ring, so the caller must drop the ring: see write_ring). */
static int submit_all(struct io_uring *ring)
{
    for (int tries = 0; io_uring_sq_ready(ring) > 0; tries++) {
        int rc = io_uring_submit(ring);
        if (rc >= 0 && tries < 1000) continue;
        if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && tries < 1000) continue;
        return rc < 0 ? rc : -EAGAIN;
    }
    return 0;
}

/* The ring write loop. *einval_direct is set when the very first direct write is refused with
 * EINVAL (the file system does not do O_DIRECT for this file). Returns 0 or the first error;
 * never returns with a request in flight. */
static int write_ring(wjob *j, int *einval_direct)
{
    const ftrt__wopts *o = j->o;
    wreq *reqs = calloc(o->qd, sizeof *reqs);
    if (!reqs) return -ENOMEM;
    struct io_uring *ring = &j->w->ring;
    uint64_t next = 0, written = 0;
    unsigned inflight = 0;
    int err = 0, broken = 0;
    for (;;) {
        while (!err && next < j->bytes && inflight < o->qd) {
            if (abandoned(o)) {
                err = FTRT_ERECOVER;
                break;
            }
            wreq *r = NULL;
            for (unsigned i = 0; i < o->qd && !r; i++)
                if (!reqs[i].busy) r = &reqs[i];
            r->off = next;
            r->len = j->bytes - next < o->chunk ? (size_t)(j->bytes - next) : o->chunk;
            r->done = 0;
            r->retries = 0;
            r->busy = 1;
            next += r->len;
            if ((err = queue_write(j, r)) < 0) {
                r->busy = 0;
                break;
            }
            inflight++;
        }
        int src = submit_all(ring);
        if (src < 0) {
            if (!err) err = src;
            unsigned lost = io_uring_sq_ready(ring);
            inflight -= lost < inflight ? lost : inflight;
            broken = 1;
        }
        if (inflight == 0) break;
        struct io_uring_cqe *cqe;
        int rc;
        do rc = io_uring_wait_cqe(ring, &cqe);
        while (rc == -EINTR);
        if (rc < 0) { /* cannot tell which request ended: give the ring up */
            if (!err) err = rc;
            broken = 1;
            break;
        }
        wreq *r = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        inflight--;
        if ((res == -EAGAIN || res == -EINTR) && !err && ++r->retries <= 100) {
            if (queue_write(j, r) == 0) {
                inflight++;
                continue;
            }
        }
        if (res < 0) {
            if (res == -EINVAL && j->direct && written == 0 && r->off == 0 && einval_direct)
                *einval_direct = 1;
            if (!err) err = res;
        } else if (res == 0) {
            if (!err) err = -EIO;
        } else {
            r->done += (size_t)res;
            written += (uint64_t)res;
            if (r->done < r->len && !err) {
                if ((err = queue_write(j, r)) == 0) {
                    inflight++;
                    continue;
                }
            }
        }
        r->busy = 0;
        if (o->delay_ms > 0) sleep_ms(o->delay_ms);
    }
    free(reqs);
    if (broken) {
        /* SQEs the kernel never took, or a lost completion: the ring cannot be trusted again. */
        ftrt_log_warn("checkpoint: io_uring failed (%s): further writes use pwrite",
                      strerror(-err));
        ftrt__wring_exit(j->w);
    }
    return err;
}

static int fsync_ring(ftrt__wring *w, int fd)
{
    if (!w->have_ring) return fdatasync(fd) < 0 ? -errno : 0;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    struct io_uring_cqe *cqe;
    if (!sqe) return fdatasync(fd) < 0 ? -errno : 0;
    io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data(sqe, NULL);
    int rc = submit_all(&w->ring);
    if (rc < 0) return rc;
    do rc = io_uring_wait_cqe(&w->ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) return rc;
    rc = cqe->res;
    io_uring_cqe_seen(&w->ring, cqe);
    return rc > 0 ? 0 : rc;
}

static int open_tmp(const char *tmp, int direct)
{
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0);
    int fd = open(tmp, flags, 0644);
    return fd < 0 ? -errno : fd;
}

int ftrt__image_write(ftrt__wring *w, const char *dir, int64_t step, int rank,
                      const unsigned char *img, uint64_t bytes, const ftrt__wopts *o,
                      ftrt__wstat *st)
{
    char sdir[4096], tmp[4096], fin[4096];
    int rc, fd = -1, renamed = 0;
    int direct = o->direct && !ftrt__knobs.ckpt_force_buffered;
    if (st) memset(st, 0, sizeof *st);
    if ((rc = ftrt__path(sdir, sizeof sdir, "%s/step-%lld", dir, (long long)step)) < 0 ||
        (rc = ftrt__path(fin, sizeof fin, "%s/rank-%d.ftrt", sdir, rank)) < 0 ||
        (rc = ftrt__path(tmp, sizeof tmp, "%s/rank-%d.ftrt.tmp.%d", sdir, rank, (int)getpid())) < 0)
        return rc;
    double t0 = ftrt__now();
    rc = ftrt__mkdir_p(sdir);
    if (rc < 0) {
        ftrt_log_warn("checkpoint: cannot create %s: %s", sdir, strerror(-rc));
        return rc;
    }
    fd = open_tmp(tmp, direct);
    if (fd == -EINVAL && direct) {
        warn_buffered(sdir, EINVAL);
        direct = 0;
        fd = open_tmp(tmp, 0);
    }
    if (fd < 0) {
        rc = fd;
        fd = -1;
        goto out;
    }
    if (!ftrt__knobs.ckpt_no_fallocate && bytes > 0 &&
        (rc = posix_fallocate(fd, 0, (off_t)bytes)) != 0) {
        if (rc != EOPNOTSUPP && rc != ENOSYS && rc != EINVAL) {
            rc = -rc;
            goto out;
        }
    }
    rc = 0;
    wjob j = {.w = w, .fd = fd, .direct = direct, .img = img, .bytes = bytes, .o = o};
    if (bytes > 0) {
        int einval = 0;
        rc = w->have_ring ? write_ring(&j, &einval) : write_sync(&j);
        if (rc == -EINVAL && direct && (einval || !w->have_ring)) {
            /* The file system took the open but not the direct write: go buffered. */
            warn_buffered(sdir, EINVAL);
            close(fd);
            direct = 0;
            fd = open_tmp(tmp, 0);
            if (fd < 0) {
                rc = fd;
                fd = -1;
                goto out;
            }
            j.fd = fd;
            j.direct = 0;
            rc = w->have_ring ? write_ring(&j, NULL) : write_sync(&j);
        }
        if (rc < 0) goto out;
    }
    double t1 = ftrt__now();
    if ((rc = fsync_ring(w, fd)) < 0) goto out;
    rc = close(fd) < 0 ? -errno : 0;
    fd = -1;
    if (rc < 0) goto out;
    if (abandoned(o)) {
        rc = FTRT_ERECOVER;
        goto out;
    }
    if (rename(tmp, fin) < 0) {
        rc = -errno;
        goto out;
    }
    renamed = 1;
    rc = ftrt__fsync_dir(sdir);
    if (st) {
        st->bytes = bytes;
        st->direct = direct;
        st->fixed = w->nfixed > 0;
        st->write_s = t1 - t0;
        st->total_s = ftrt__now() - t0;
    }
out:
    if (fd >= 0) close(fd);
    if (rc < 0) {
        if (rc != FTRT_ERECOVER)
            ftrt_log_warn("checkpoint: writing %s failed: %s", fin, ftrt_strerror(rc));
        unlink(renamed ? fin : tmp);
    }
    return rc;
}

/* ---- verified reads ---------------------------------------------------------------------- */

int ftrt__reader_init(ftrt__reader *r, ftrt__io *io, unsigned qd, size_t chunk)
{
    memset(r, 0, sizeof *r);
    r->io = io;
    r->qd = qd < 1 ? 1 : qd;
    r->chunk = chunk;
    /* Huge pages: a 4 MiB request over 4 KiB pages is 1024 DMA segments, which the block layer
     * splits into many requests; over 2 MiB pages it is two (measured: half the read speed). */
    size_t len = (size_t)r->qd * chunk;
    void *p = ftrt__map_huge(len);
    if (!p) return -ENOMEM;
    r->bounce = p;
    r->len = len;
    if (io->have_ring) {
        struct iovec iov = {.iov_base = r->bounce, .iov_len = len};
        r->fixed = io_uring_register_buffers(&io->ring, &iov, 1) == 0;
    }
    return 0;
}

void ftrt__reader_free(ftrt__reader *r)
{
    if (r->fixed && r->io->have_ring) io_uring_unregister_buffers(&r->io->ring);
    ftrt__unmap_huge(r->bounce, r->len);
    memset(r, 0, sizeof *r);
}

typedef struct rreq {
    uint64_t off; /* file offset of the chunk */
    size_t len;   /* bytes requested (4 KiB multiple) */
    size_t done;
    size_t idx;   /* chunk index */
    unsigned char *buf;
    int busy, retries;
} rreq;

/* Copies what chunk q holds of the wanted range into dst and records its CRC. Returns 0 or
 * -ENODATA when the file ended before the wanted bytes. */
static int consume(rreq *q, uint64_t off, size_t len, unsigned char *dst, uint32_t *crcs,
                   size_t *lens)
{
    uint64_t start = q->off - off; /* offset of the chunk in the wanted range */
    size_t want = len - start < q->len ? (size_t)(len - start) : q->len;
    if (q->done < want) return -ENODATA;
    crcs[q->idx] = ftrt__copy_crc32c(dst + start, q->buf, want, 0);
    lens[q->idx] = want;
    return 0;
}

static int queue_read(ftrt__reader *r, int fd, rreq *q)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->io->ring);
    if (!sqe) {
        int rc = io_uring_submit(&r->io->ring);
        if (rc < 0) return rc;
        if (!(sqe = io_uring_get_sqe(&r->io->ring))) return -EBUSY;
    }
    if (r->fixed)
        io_uring_prep_read_fixed(sqe, fd, q->buf + q->done, (unsigned)(q->len - q->done),
                                 q->off + q->done, 0);
    else
        io_uring_prep_read(sqe, fd, q->buf + q->done, (unsigned)(q->len - q->done),
                           q->off + q->done);
    io_uring_sqe_set_data(sqe, q);
    return 0;
}

/* Sequential fallback: pread into one bounce buffer at a time. */
static int read_sync(ftrt__reader *r, int fd, uint64_t off, unsigned char *dst, size_t len,
                     uint32_t *crcs, size_t *lens, size_t nchunks)
{
    rreq q = {.buf = r->bounce};
    for (size_t i = 0; i < nchunks; i++) {
        q.idx = i;
        q.off = off + (uint64_t)i * r->chunk;
        size_t remain = len - (size_t)i * r->chunk;
        q.len = remain < r->chunk ? (size_t)ftrt__align4k(remain) : r->chunk;
        q.done = 0;
        while (q.done < q.len) {
            ssize_t n = pread(fd, q.buf + q.done, q.len - q.done, (off_t)(q.off + q.done));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return -errno;
            if (n == 0) break;
            q.done += (size_t)n;
        }
        int rc = consume(&q, off, len, dst, crcs, lens);
        if (rc < 0) return rc;
    }
    return 0;
}

static int read_ring(ftrt__reader *r, int fd, uint64_t off, unsigned char *dst, size_t len,
                     uint32_t *crcs, size_t *lens, size_t nchunks)
{
    rreq *reqs = calloc(r->qd, sizeof *reqs);
    if (!reqs) return -ENOMEM;
    for (unsigned i = 0; i < r->qd; i++) reqs[i].buf = r->bounce + (size_t)i * r->chunk;
    size_t next = 0;
    unsigned inflight = 0;
    int err = 0;
    for (;;) {
        while (!err && next < nchunks && inflight < r->qd) {
            rreq *q = NULL;
            for (unsigned i = 0; i < r->qd && !q; i++)
                if (!reqs[i].busy) q = &reqs[i];
            q->idx = next;
            q->off = off + (uint64_t)next * r->chunk;
            size_t remain = len - next * r->chunk;
            q->len = remain < r->chunk ? (size_t)ftrt__align4k(remain) : r->chunk;
            q->done = 0;
            q->retries = 0;
            q->busy = 1;
            next++;
            if ((err = queue_read(r, fd, q)) < 0) {
                q->busy = 0;
                break;
            }
            inflight++;
        }
        int src = submit_all(&r->io->ring);
        if (src < 0) {
            if (!err) err = src;
            unsigned lost = io_uring_sq_ready(&r->io->ring);
            inflight -= lost < inflight ? lost : inflight;
        }
        if (inflight == 0) break;
        struct io_uring_cqe *cqe;
        int rc;
        do rc = io_uring_wait_cqe(&r->io->ring, &cqe);
        while (rc == -EINTR);
        if (rc < 0) {
            if (!err) err = rc;
            ftrt__io_exit(r->io); /* a lost completion: the ring cannot be trusted again */
            r->fixed = 0;
            break;
        }
        rreq *q = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->io->ring, cqe);
        inflight--;
        if ((res == -EAGAIN || res == -EINTR) && !err && ++q->retries <= 100 &&
            queue_read(r, fd, q) == 0) {
            inflight++;
            continue;
        }
        if (res > 0) {
            q->done += (size_t)res;
            if (q->done < q->len && !err) { /* short read: continue, or end of file */
                if (queue_read(r, fd, q) == 0) {
                    inflight++;
                    continue;
                }
            }
        } else if (res < 0 && !err) {
            err = res;
        }
        if (!err) err = consume(q, off, len, dst, crcs, lens);
        q->busy = 0;
    }
    free(reqs);
    return err;
}

int ftrt__reader_read(ftrt__reader *r, int fd, uint64_t off, void *dst, size_t len,
                      uint32_t *crc)
{
    *crc = 0;
    if (len == 0) return 0;
    size_t nchunks = (len + r->chunk - 1) / r->chunk;
    uint32_t *crcs = malloc(nchunks * sizeof *crcs);
    size_t *lens = malloc(nchunks * sizeof *lens);
    if (!crcs || !lens) {
        free(crcs);
        free(lens);
        return -ENOMEM;
    }
    int rc = r->io->have_ring ? read_ring(r, fd, off, dst, len, crcs, lens, nchunks)
                              : read_sync(r, fd, off, dst, len, crcs, lens, nchunks);
    if (rc == 0) {
        uint32_t c = crcs[0];
        for (size_t i = 1; i < nchunks; i++) c = ftrt__crc32c_combine(c, crcs[i], lens[i]);
        *crc = c;
    }
    free(crcs);
    free(lens);
    return rc;
}

int ftrt__open_direct(const char *path, int direct)
{
    if (!direct || ftrt__knobs.ckpt_force_buffered) return -EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) {
        int e = errno;
        if (e == EINVAL) warn_buffered(path, e);
        return -e;
    }
    return fd;
}

/*
 * io.c - the checkpoint's file I/O engine (io.h): an io_uring with a synchronous fallback,
 * the request loop every checkpoint read and write goes through, fdatasync through the ring,
 * O_DIRECT opens, huge-page I/O buffers and the restore's verified reads.
 *
 * The request loop (ftrt__io_run) keeps up to `depth` requests in flight: it asks the
 * caller's next() for a request whenever a slot is free, submits, and waits for one
 * completion at a time. A short transfer is continued from where it stopped; -EAGAIN/-EINTR
 * are re-queued at most 100 times; any other error (and a write that makes no progress: -EIO,
 * a read that ends early: -ENODATA) stops new requests and is returned once the submitted ones
 * have completed. When the kernel refuses a submission outright or a completion cannot be
 * waited for, the ring can no longer be trusted: it is torn down (said at warn level) and the
 * transfers that follow on it use pread/pwrite. Registered (fixed) buffers are used for every
 * request whose memory lies in one.
 *
 * Verified reads (the restore): a region slice is read in `chunk`-byte, 4 KiB-aligned requests
 * into aligned bounce buffers (O_DIRECT where possible, fixed buffers when registration works),
 * `qd` in flight, and each completed chunk is copied into region memory with the fused copy +
 * CRC32C while the next reads are in flight; the chunk CRCs are joined with
 * ftrt__crc32c_combine() for the caller to compare with the table's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/knobs.h"
#include "base/log.h"
#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "ftrt.h"

/* Re-queues of one request after -EAGAIN/-EINTR before its error is returned. */
#define MAX_RETRIES 100
/* Submission attempts of what is queued before the ring is given up. */
#define MAX_SUBMITS 1000

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void ftrt__io_warn_buffered(const char *path, int err)
{
    static atomic_int warned;
    if (!atomic_exchange(&warned, 1))
        ftrt_log_warn("checkpoint: %s does not accept O_DIRECT (%s): checkpoint I/O goes through "
                      "the page cache (buffered) instead",
                      path, strerror(err));
}

/* ---- the ring ---------------------------------------------------------------------------- */

void ftrt__io_init(ftrt__io *io, unsigned entries)
{
    static atomic_int warned;
    memset(io, 0, sizeof *io);
    if (ftrt__knobs.io_force_sync) return;
    int rc = io_uring_queue_init(entries, &io->ring, 0);
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
    if (io->have_ring) {
        if (io->nfixed) io_uring_unregister_buffers(&io->ring);
        io_uring_queue_exit(&io->ring);
    }
    free(io->iov);
    memset(io, 0, sizeof *io);
}

int ftrt__io_register(ftrt__io *io, const struct iovec *iov, unsigned n)
{
    if (!io->have_ring) return -ENOSYS;
    if (io->nfixed) {
        io_uring_unregister_buffers(&io->ring);
        io->nfixed = 0;
    }
    free(io->iov);
    io->iov = NULL;
    if (n == 0) return 0;
    struct iovec *copy = malloc(n * sizeof *copy);
    if (!copy) return -ENOMEM;
    memcpy(copy, iov, n * sizeof *copy);
    int rc = io_uring_register_buffers(&io->ring, copy, n);
    if (rc < 0) {
        free(copy);
        return rc;
    }
    io->iov = copy;
    io->nfixed = n;
    return 0;
}

/* Index of the registered buffer holding [p, p + len), or -1. */
static int fixed_index(const ftrt__io *io, const unsigned char *p, size_t len)
{
    for (unsigned i = 0; i < io->nfixed; i++) {
        const unsigned char *b = io->iov[i].iov_base;
        if (p >= b && p + len <= b + io->iov[i].iov_len) return (int)i;
    }
    return -1;
}

/* Submits what is queued. Returns 0 or a hard error (the SQEs the kernel did not take stay in
 * the ring, which must then be given up). */
static int submit_all(struct io_uring *ring)
{
    for (int tries = 0; io_uring_sq_ready(ring) > 0; tries++) {
        int rc = io_uring_submit(ring);
        if (rc >= 0 && tries < MAX_SUBMITS) continue;
        if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && tries < MAX_SUBMITS) continue;
        return rc < 0 ? rc : -EAGAIN;
    }
    return 0;
}

/* Waits for one completion; returns 0 with *res and the request's data, or -errno. */
static int wait_one(struct io_uring *ring, int *res, void **data)
{
    struct io_uring_cqe *cqe;
    int rc;
    do rc = io_uring_wait_cqe(ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) return rc;
    *res = cqe->res;
    *data = io_uring_cqe_get_data(cqe);
    io_uring_cqe_seen(ring, cqe);
    return 0;
}

int ftrt__io_fdatasync(ftrt__io *io, int fd)
{
    struct io_uring_sqe *sqe = io->have_ring ? io_uring_get_sqe(&io->ring) : NULL;
    if (!sqe) return fdatasync(fd) < 0 ? -errno : 0;
    io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data(sqe, NULL);
    int rc = submit_all(&io->ring), res;
    void *data;
    if (rc == 0) rc = wait_one(&io->ring, &res, &data);
    if (rc < 0) return rc;
    return res > 0 ? 0 : res;
}

/* ---- the request loop -------------------------------------------------------------------- */

static int abandoned(const ftrt__io_job *j)
{
    return j->abandoned && j->abandoned(j->arg);
}

/* The synchronous fallback: requests one at a time in slot 0. */
static int run_sync(ftrt__io_job *j)
{
    ftrt__io_req *r = &j->reqs[0];
    for (;;) {
        if (abandoned(j)) return FTRT_ERECOVER;
        r->need = 0;
        int rc = j->next(j->arg, r);
        if (rc <= 0) return rc;
        if (r->need == 0) r->need = r->len;
        for (r->done = 0; r->done < r->len;) {
            ssize_t n = j->write ? pwrite(j->fd, r->buf + r->done, r->len - r->done,
                                          (off_t)(r->off + r->done))
                                 : pread(j->fd, r->buf + r->done, r->len - r->done,
                                         (off_t)(r->off + r->done));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return -errno;
            if (n == 0 && j->write) return -EIO;
            if (n == 0) break; /* end of file: enough when the needed bytes are there */
            r->done += (size_t)n;
        }
        if (r->done < r->need) return -ENODATA;
        if (j->done && (rc = j->done(j->arg, r)) < 0) return rc;
        if (j->delay_ms > 0) sleep_ms(j->delay_ms);
    }
}

/* State of one ring transfer. */
typedef struct run {
    ftrt__io *io;
    ftrt__io_job *j;
    unsigned inflight; /* queued or submitted, not completed */
    uint64_t moved;    /* bytes transferred */
    int more;          /* next() may have more */
    int err;           /* the first error */
    int broken;        /* the ring cannot be trusted again */
} run;

static void fail(run *x, int rc)
{
    if (!x->err) x->err = rc;
}

/* Prepares the SQE of what is left of r. Returns 0 or -errno. */
static int queue(run *x, ftrt__io_req *r)
{
    struct io_uring *ring = &x->io->ring;
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        int rc = io_uring_submit(ring);
        if (rc < 0) return rc;
        if (!(sqe = io_uring_get_sqe(ring))) return -EBUSY;
    }
    unsigned char *p = r->buf + r->done;
    unsigned n = (unsigned)(r->len - r->done);
    uint64_t off = r->off + r->done;
    int idx = fixed_index(x->io, p, n);
    if (x->j->write && idx >= 0)
        io_uring_prep_write_fixed(sqe, x->j->fd, p, n, off, idx);
    else if (x->j->write)
        io_uring_prep_write(sqe, x->j->fd, p, n, off);
    else if (idx >= 0)
        io_uring_prep_read_fixed(sqe, x->j->fd, p, n, off, idx);
    else
        io_uring_prep_read(sqe, x->j->fd, p, n, off);
    io_uring_sqe_set_data(sqe, r);
    return 0;
}

/* Queues new requests while slots are free and nothing failed. */
static void fill(run *x)
{
    ftrt__io_job *j = x->j;
    while (!x->err && x->more && x->inflight < j->depth) {
        if (abandoned(j)) {
            fail(x, FTRT_ERECOVER);
            return;
        }
        ftrt__io_req *r = NULL;
        for (unsigned i = 0; i < j->depth && !r; i++)
            if (!j->reqs[i].busy) r = &j->reqs[i];
        r->need = 0;
        int rc = j->next(j->arg, r);
        if (rc <= 0) {
            x->more = 0;
            if (rc < 0) fail(x, rc);
            return;
        }
        if (r->need == 0) r->need = r->len;
        r->done = 0;
        r->retries = 0;
        if ((rc = queue(x, r)) < 0) {
            fail(x, rc);
            return;
        }
        r->busy = 1;
        x->inflight++;
    }
}

/* Continues r after a partial or retryable completion. Returns 1 when re-queued. */
static int requeue(run *x, ftrt__io_req *r)
{
    int rc = queue(x, r);
    if (rc < 0) {
        fail(x, rc);
        return 0;
    }
    x->inflight++;
    return 1;
}

/* Waits for one completion and accounts for it. */
static void reap(run *x)
{
    int res;
    void *data;
    int rc = wait_one(&x->io->ring, &res, &data);
    if (rc < 0) { /* cannot tell which request ended: give the ring up */
        fail(x, rc);
        x->broken = 1;
        x->inflight = 0;
        return;
    }
    ftrt__io_req *r = data;
    x->inflight--;
    if ((res == -EAGAIN || res == -EINTR) && !x->err && ++r->retries <= MAX_RETRIES &&
        requeue(x, r))
        return;
    if (res < 0) {
        if (res == -EINVAL && x->moved == 0 && r->off == 0) x->j->einval_first = 1;
        fail(x, res);
    } else if (res == 0) { /* end of file, or a write that makes no progress */
        if (x->j->write) fail(x, -EIO);
        else if (r->done < r->need) fail(x, -ENODATA);
    } else {
        r->done += (size_t)res;
        x->moved += (uint64_t)res;
        if (r->done < r->len && !x->err && requeue(x, r)) return;
    }
    if (!x->err && x->j->done && r->done >= r->need) {
        int drc = x->j->done(x->j->arg, r);
        if (drc < 0) fail(x, drc);
    }
    r->busy = 0;
    if (x->j->delay_ms > 0) sleep_ms(x->j->delay_ms);
}

static int run_ring(ftrt__io *io, ftrt__io_job *j)
{
    run x = {.io = io, .j = j, .more = 1};
    for (;;) {
        fill(&x);
        if (!x.broken) {
            int rc = submit_all(&io->ring);
            if (rc < 0) { /* what the kernel never took will never complete */
                unsigned lost = io_uring_sq_ready(&io->ring);
                fail(&x, rc);
                x.broken = 1;
                x.inflight -= lost < x.inflight ? lost : x.inflight;
            }
        }
        if (x.inflight == 0) break;
        reap(&x);
    }
    for (unsigned i = 0; i < j->depth; i++) j->reqs[i].busy = 0;
    if (x.broken) {
        ftrt_log_warn("checkpoint: io_uring failed (%s): further checkpoint I/O on this ring "
                      "uses pread/pwrite",
                      ftrt_strerror(x.err));
        ftrt__io_exit(io);
    }
    return x.err;
}

int ftrt__io_run(ftrt__io *io, ftrt__io_job *j)
{
    j->einval_first = 0;
    return io->have_ring ? run_ring(io, j) : run_sync(j);
}

/* ---- plain transfers of a buffer --------------------------------------------------------- */

typedef struct range {
    unsigned char *buf;
    size_t len;
    uint64_t off;
    size_t pos;
} range;

static int range_next(void *arg, ftrt__io_req *r)
{
    range *s = arg;
    if (s->pos >= s->len) return 0;
    size_t n = s->len - s->pos;
    if (n > FTRT__IO_CHUNK) n = FTRT__IO_CHUNK;
    r->buf = s->buf + s->pos;
    r->off = s->off + s->pos;
    r->len = n;
    s->pos += n;
    return 1;
}

static int range_run(ftrt__io *io, int fd, int write, void *buf, size_t len, uint64_t off)
{
    ftrt__io_req reqs[FTRT__IO_DEPTH] = {{0}};
    range s = {.buf = buf, .len = len, .off = off};
    ftrt__io_job j = {.fd = fd, .write = write, .reqs = reqs, .depth = FTRT__IO_DEPTH,
                      .next = range_next, .arg = &s};
    return ftrt__io_run(io, &j);
}

int ftrt__io_read(ftrt__io *io, int fd, void *buf, size_t len, uint64_t off)
{
    return range_run(io, fd, 0, buf, len, off);
}

int ftrt__io_write(ftrt__io *io, int fd, const void *buf, size_t len, uint64_t off)
{
    return range_run(io, fd, 1, (void *)buf, len, off);
}

int ftrt__io_open_direct(const char *path, int direct)
{
    if (!direct || ftrt__knobs.ckpt_force_buffered) return -EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) {
        int e = errno;
        if (e == EINVAL) ftrt__io_warn_buffered(path, e);
        return -e;
    }
    return fd;
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
    struct iovec iov = {.iov_base = r->bounce, .iov_len = len};
    r->fixed = ftrt__io_register(io, &iov, 1) == 0;
    return 0;
}

void ftrt__reader_free(ftrt__reader *r)
{
    if (r->fixed && r->io->have_ring) ftrt__io_register(r->io, NULL, 0);
    ftrt__unmap_huge(r->bounce, r->len);
    memset(r, 0, sizeof *r);
}

/* One verified read: chunk i of the wanted range [off, off + len) goes to dst + i * chunk. */
typedef struct vread {
    size_t chunk;
    uint64_t off;
    size_t len;
    unsigned char *dst;
    size_t nchunks, next;
    uint32_t *crcs; /* per chunk */
    size_t *lens;   /* per chunk: bytes wanted */
} vread;

static int vread_next(void *arg, ftrt__io_req *r)
{
    vread *v = arg;
    if (v->next >= v->nchunks) return 0;
    size_t remain = v->len - v->next * v->chunk;
    r->idx = v->next++;
    r->buf = r->stage;
    r->off = v->off + (uint64_t)r->idx * v->chunk;
    r->len = remain < v->chunk ? (size_t)ftrt__align4k(remain) : v->chunk;
    r->need = remain < v->chunk ? remain : v->chunk;
    return 1;
}

/* Copies the wanted part of a completed chunk into dst and records its CRC. */
static int vread_done(void *arg, ftrt__io_req *r)
{
    vread *v = arg;
    v->crcs[r->idx] = ftrt__copy_crc32c(v->dst + r->idx * v->chunk, r->buf, r->need, 0);
    v->lens[r->idx] = r->need;
    return 0;
}

int ftrt__reader_read(ftrt__reader *r, int fd, uint64_t off, void *dst, size_t len,
                      uint32_t *crc)
{
    *crc = 0;
    if (len == 0) return 0;
    vread v = {.chunk = r->chunk, .off = off, .len = len, .dst = dst,
               .nchunks = (len + r->chunk - 1) / r->chunk};
    v.crcs = malloc(v.nchunks * sizeof *v.crcs);
    v.lens = malloc(v.nchunks * sizeof *v.lens);
    ftrt__io_req *reqs = calloc(r->qd, sizeof *reqs);
    int rc = -ENOMEM;
    if (v.crcs && v.lens && reqs) {
        for (unsigned i = 0; i < r->qd; i++) reqs[i].stage = r->bounce + (size_t)i * r->chunk;
        ftrt__io_job j = {.fd = fd, .reqs = reqs, .depth = r->qd, .next = vread_next,
                          .done = vread_done, .arg = &v};
        rc = ftrt__io_run(r->io, &j);
    }
    if (rc == 0) {
        uint32_t c = v.crcs[0];
        for (size_t i = 1; i < v.nchunks; i++) c = ftrt__crc32c_combine(c, v.crcs[i], v.lens[i]);
        *crc = c;
    }
    free(reqs);
    free(v.crcs);
    free(v.lens);
    return rc;
}

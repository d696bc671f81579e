/*
 * shard.c - shard files (shard.h): the two writers, the layout and the checked open.
 *
 * Both writers write rank-<r>.ftrt.tmp.<pid> in the step directory (unique to the writer: a
 * rank cut off from the job and its replacement may write the same shard at once), fdatasync
 * it through the ring, rename it to rank-<r>.ftrt and fsync the step directory, so a committed
 * shard of the same name is only ever replaced atomically; on failure the partial file is
 * removed. All I/O goes through io.c.
 *
 * ftrt__shard_write (streaming: the engine when staging cannot hold a shard, tests, benches):
 * the data of every region (a REPLICATED region's 1/N slice, a SHARDED region whole) is copied
 * into a few 4 KiB-aligned staging buffers of at most 8 MiB with the fused copy + CRC32C (a
 * device region through the device backend's to_host, kernels/location.h) and written with up to FTRT__IO_DEPTH writes in flight; then the header and table (which carry
 * the CRCs) are written at offset 0.
 *
 * ftrt__shard_write_image (the engine's persist thread): the staging slot already holds the
 * exact file image (header, table and 4 KiB-aligned region data), so the file is written front
 * to back in `chunk`-byte requests straight from the slot, `qd` of them in flight, as
 * fixed-buffer writes when the slot is registered with the ring, and with O_DIRECT when the
 * file system accepts it (else through the page cache, said once at warn level). The file is
 * fallocate'd to its size first, so a full disk fails at once and the direct writes are
 * overwrites of allocated blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/fs.h"
#include "base/knobs.h"
#include "base/log.h"
#include "checkpoint/shard.h"
#include "ftrt.h"
#include "kernels/location.h"

/* ---- layout ------------------------------------------------------------------------------ */

int ftrt__regions_check(const ftrt__region *regs, int nregs)
{
    if (nregs < 0 || (unsigned)nregs > FTRT__SHARD_MAX_REGIONS || (nregs > 0 && !regs))
        return -EINVAL;
    for (int i = 0; i < nregs; i++) {
        size_t nl = strnlen(regs[i].name, FTRT__NAME_MAX);
        if (nl == 0 || nl >= FTRT__NAME_MAX) return -EINVAL;
        if (regs[i].kind != FTRT__KIND_REPLICATED && regs[i].kind != FTRT__KIND_SHARDED)
            return -EINVAL;
        if (regs[i].loc == FTRT__LOC_DEVICE && !ftrt__loc_device()) {
            ftrt_log_error("checkpoint: region \"%s\" is in device memory, and this process "
                           "has no device backend to read it through",
                           regs[i].name);
            return FTRT_ENOTSUP;
        }
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
        e->kind = regs[i].kind; /* the format stores the kind alone (format.h) */
        e->total_bytes = regs[i].bytes;
        if (e->kind == FTRT__KIND_SHARDED) {
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

/* ---- the file of a shard being written --------------------------------------------------- */

/* Its step directory, final name and the writer's temporary file. */
typedef struct shard_file {
    char sdir[4096], fin[4096], tmp[4096];
    int fd;      /* the temporary file, or -1 */
    int renamed; /* the temporary file has its final name */
} shard_file;

/* Names the files of rank's shard of step under dir and creates the step directory. Returns 0
 * or -errno (nothing to clean up). */
static int file_begin(shard_file *f, const char *dir, int64_t step, int rank)
{
    int rc;
    f->fd = -1;
    f->renamed = 0;
    if ((rc = ftrt__path(f->sdir, sizeof f->sdir, "%s/step-%lld", dir, (long long)step)) < 0 ||
        (rc = ftrt__path(f->fin, sizeof f->fin, "%s/rank-%d.ftrt", f->sdir, rank)) < 0 ||
        (rc = ftrt__path(f->tmp, sizeof f->tmp, "%s/rank-%d.ftrt.tmp.%d", f->sdir, rank,
                         (int)getpid())) < 0)
        return rc;
    rc = ftrt__mkdir_p(f->sdir);
    if (rc < 0) ftrt_log_warn("checkpoint: cannot create %s: %s", f->sdir, strerror(-rc));
    return rc;
}

/* Creates the temporary file, with O_DIRECT when *direct (cleared, and said once, when the file
 * system refuses it). Returns 0 or -errno. */
static int file_open(shard_file *f, int *direct)
{
    const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    int fd = open(f->tmp, flags | (*direct ? O_DIRECT : 0), 0644);
    if (fd < 0 && errno == EINVAL && *direct) {
        ftrt__io_warn_buffered(f->sdir, EINVAL);
        *direct = 0;
        fd = open(f->tmp, flags, 0644);
    }
    if (fd < 0) return -errno;
    f->fd = fd;
    return 0;
}

/* Makes the written file durable and gives it its name: fdatasync through io's ring, close,
 * rename into place, fsync of the step directory. o (may be NULL): its abandoned() is asked
 * once more before the rename. Returns 0, FTRT_ERECOVER or -errno. */
static int file_publish(shard_file *f, ftrt__io *io, const ftrt__wopts *o)
{
    int rc = ftrt__io_fdatasync(io, f->fd);
    if (rc < 0) return rc;
    rc = close(f->fd) < 0 ? -errno : 0;
    f->fd = -1;
    if (rc < 0) return rc;
    if (o && o->abandoned && o->abandoned(o->arg)) return FTRT_ERECOVER;
    if (rename(f->tmp, f->fin) < 0) return -errno;
    f->renamed = 1;
    return ftrt__fsync_dir(f->sdir);
}

/* Ends a write with result rc: closes the file and, on failure, says so (not when abandoned)
 * and removes the partial or published file. Returns rc. */
static int file_end(shard_file *f, int rc)
{
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (rc < 0) {
        if (rc != FTRT_ERECOVER)
            ftrt_log_warn("checkpoint: writing %s failed: %s", f->fin, ftrt_strerror(rc));
        unlink(f->renamed ? f->fin : f->tmp);
    }
    return rc;
}

/* ---- streaming from region memory -------------------------------------------------------- */

typedef struct data_src {
    const ftrt__region *regs;
    ftrt__shard_ent *ents;
    int nregs;
    int idx;      /* first region whose slice may still lie at or after pos */
    uint64_t pos; /* next file offset to produce */
    uint64_t end; /* file size */
    size_t chunk; /* staging buffer size */
} data_src;

/* Copies seg bytes of region data into dst and folds their CRC32C into *crc: host memory with
 * the fused copy + CRC32C, device memory through the device backend's to_host (kernels/
 * location.h). Returns 0 or the backend's code. */
static int copy_slice(unsigned char *dst, const unsigned char *src, uint64_t seg,
                      ftrt__region_loc loc, uint32_t *crc)
{
    if (loc == FTRT__LOC_HOST) {
        *crc = ftrt__copy_crc32c(dst, src, seg, *crc);
        return 0;
    }
    const ftrt__loc_ops *dev = ftrt__loc_device();
    uint32_t c = 0;
    int rc = dev ? dev->to_host(dst, src, seg, &c) : FTRT_ENOTSUP;
    if (rc == 0) *crc = ftrt__crc32c_combine(*crc, c, seg);
    return rc;
}

/* Fills the slot's staging buffer with the file bytes [pos, pos + n): slice data (copied with
 * its CRC folded into ents[i].data_crc) and zero padding. Returns 1, 0 at the end, or a
 * device backend's error code. */
static int data_next(void *arg, ftrt__io_req *r)
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
            int rc = copy_slice(dst + (cur - s->pos), src, seg, s->regs[s->idx].loc, &e->data_crc);
            if (rc < 0) {
                ftrt_log_error("checkpoint: reading device region \"%s\" failed: %s",
                               s->regs[s->idx].name, ftrt_strerror(rc));
                return rc;
            }
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

/* Writes the data through bounded staging, then the header and table, and publishes f. */
static int stream_shard(shard_file *f, const ftrt__region *regs, ftrt__shard_ent *ents,
                        ftrt__shard_hdr *hdr, uint64_t end)
{
    /* Staging: up to FTRT__IO_DEPTH buffers of at most 8 MiB each, never the whole state. */
    uint64_t data_start = ftrt__align4k(hdr->table_bytes), data_len = end - data_start;
    size_t chunk = data_len < FTRT__IO_CHUNK ? (size_t)data_len : FTRT__IO_CHUNK;
    unsigned nbuf = 0;
    if (data_len > 0) {
        uint64_t nchunks = (data_len + chunk - 1) / chunk;
        nbuf = nchunks < FTRT__IO_DEPTH ? (unsigned)nchunks : FTRT__IO_DEPTH;
    }
    unsigned char *stage = nbuf ? aligned_alloc4k((size_t)nbuf * chunk) : NULL;
    unsigned char *head = aligned_alloc4k((size_t)data_start);
    int rc = (nbuf && !stage) || !head ? -ENOMEM : 0, direct = 0;
    if (rc == 0) rc = file_open(f, &direct);
    if (rc == 0) {
        ftrt__io io;
        ftrt__io_req reqs[FTRT__IO_DEPTH] = {{0}};
        for (unsigned i = 0; i < nbuf; i++) reqs[i].stage = stage + (size_t)i * chunk;
        data_src src = {.regs = regs, .ents = ents, .nregs = (int)hdr->nregions,
                        .pos = data_start, .end = end, .chunk = chunk};
        ftrt__io_job j = {.fd = f->fd, .write = 1, .reqs = reqs, .depth = nbuf,
                          .next = data_next, .arg = &src};
        ftrt__io_init(&io, FTRT__IO_ENTRIES);
        if (data_len > 0) rc = ftrt__io_run(&io, &j);
        if (rc == 0) { /* header + table last: it carries the data CRCs */
            memset(head, 0, (size_t)data_start);
            ftrt__shard_encode(head, hdr, ents);
            rc = ftrt__io_write(&io, f->fd, head, (size_t)data_start, 0);
        }
        if (rc == 0) rc = file_publish(f, &io, NULL);
        ftrt__io_exit(&io);
    }
    free(stage);
    free(head);
    return rc;
}

int ftrt__shard_write(const char *dir, int64_t step, int rank, int nranks,
                      const ftrt__region *regs, int nregs)
{
    shard_file f;
    if (!dir || step < 0 || nranks < 1 || nranks > FTRT__MAX_RANKS || rank < 0 || rank >= nranks)
        return -EINVAL;
    int rc = ftrt__regions_check(regs, nregs);
    if (rc < 0 || (rc = file_begin(&f, dir, step, rank)) < 0) return rc;
    uint32_t tb = FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * (uint32_t)nregs;
    ftrt__shard_ent *ents = calloc(nregs > 0 ? (size_t)nregs : 1, sizeof *ents);
    if (!ents) return -ENOMEM;
    ftrt__shard_hdr hdr = {.table_bytes = tb, .step = step, .rank = (uint32_t)rank,
                           .nranks = (uint32_t)nranks, .nregions = (uint32_t)nregs};
    uint64_t end = ftrt__shard_layout(regs, nregs, rank, nranks, ents, tb);
    rc = end == 0 ? -EFBIG : stream_shard(&f, regs, ents, &hdr, end);
    free(ents);
    if (rc == 0)
        ftrt_log_debug("checkpoint: wrote %s (%llu bytes, %d regions)", f.fin,
                       (unsigned long long)end, nregs);
    return file_end(&f, rc);
}

/* ---- writing a staged image -------------------------------------------------------------- */

typedef struct image_src {
    const unsigned char *img;
    uint64_t bytes, pos;
    const ftrt__wopts *o;
} image_src;

static int image_next(void *arg, ftrt__io_req *r)
{
    image_src *s = arg;
    if (s->pos >= s->bytes) return 0;
    uint64_t n = s->bytes - s->pos;
    r->buf = (unsigned char *)s->img + s->pos;
    r->off = s->pos;
    r->len = n < s->o->chunk ? (size_t)n : s->o->chunk;
    s->pos += r->len;
    return 1;
}

static int image_abandoned(void *arg)
{
    const ftrt__wopts *o = ((image_src *)arg)->o;
    return o->abandoned && o->abandoned(o->arg);
}

/* Allocates the file's blocks up front (a full disk fails here, and direct writes overwrite
 * allocated blocks); file systems without fallocate are let through. */
static int preallocate(int fd, uint64_t bytes)
{
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    return rc == 0 || rc == EOPNOTSUPP || rc == ENOSYS || rc == EINVAL ? 0 : -rc;
}

/* Writes img into f's file; when the file system took the O_DIRECT open but refuses the direct
 * writes, said once, the file is opened again buffered (*direct cleared) and written again. */
static int write_image(shard_file *f, ftrt__io *io, const unsigned char *img, uint64_t bytes,
                       const ftrt__wopts *o, int *direct)
{
    ftrt__io_req *reqs = calloc(o->qd, sizeof *reqs);
    if (!reqs) return -ENOMEM;
    image_src s = {.img = img, .bytes = bytes, .o = o};
    ftrt__io_job j = {.fd = f->fd, .write = 1, .reqs = reqs, .depth = o->qd,
                      .next = image_next, .abandoned = image_abandoned, .arg = &s,
                      .delay_ms = o->delay_ms};
    int rc = ftrt__io_run(io, &j);
    if (rc == -EINVAL && *direct && (j.einval_first || !io->have_ring)) {
        ftrt__io_warn_buffered(f->sdir, EINVAL);
        close(f->fd);
        f->fd = -1;
        *direct = 0;
        rc = file_open(f, direct);
        if (rc == 0) {
            j.fd = f->fd;
            s.pos = 0;
            rc = ftrt__io_run(io, &j);
        }
    }
    free(reqs);
    return rc;
}

int ftrt__shard_write_image(ftrt__io *io, const char *dir, int64_t step, int rank,
                            const unsigned char *img, uint64_t bytes, const ftrt__wopts *o,
                            ftrt__wstat *st)
{
    shard_file f;
    int direct = o->direct && !ftrt__knobs.ckpt_force_buffered;
    if (st) memset(st, 0, sizeof *st);
    double t0 = ftrt__now();
    int rc = file_begin(&f, dir, step, rank);
    if (rc < 0) return rc;
    rc = file_open(&f, &direct);
    if (rc == 0 && bytes > 0 && !ftrt__knobs.ckpt_no_fallocate) rc = preallocate(f.fd, bytes);
    if (rc == 0 && bytes > 0) rc = write_image(&f, io, img, bytes, o, &direct);
    double t1 = ftrt__now();
    if (rc == 0) rc = file_publish(&f, io, o);
    if (rc == 0 && st)
        *st = (ftrt__wstat){.bytes = bytes, .direct = direct, .fixed = io->nfixed > 0,
                            .write_s = t1 - t0, .total_s = ftrt__now() - t0};
    return file_end(&f, rc);
}

/* ---- reading ----------------------------------------------------------------------------- */

/* Reads up to len bytes at offset 0 of fd with pread (a page of a file in the page cache: one
 * system call, where a request through the ring may be handed to one of io_uring's worker
 * threads, about 80 us a shard on tmpfs here). Returns the bytes read (short only at the end of
 * the file) or -errno. */
static ssize_t read_head(int fd, unsigned char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int ftrt__shard_open(ftrt__io *io, const char *path, uint64_t *size, ftrt__shard_hdr *hdr,
                     ftrt__shard_ent **ents)
{
    unsigned char head[FTRT__SHARD_ALIGN]; /* the header and a table of up to 36 regions */
    const char *why = NULL;
    unsigned char *table = NULL;
    struct stat st;
    uint32_t tb = 0;
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
    ssize_t got = 0;
    if (rc == 0)
        got = read_head(fd, head, (uint64_t)st.st_size < sizeof head ? (size_t)st.st_size
                                                                     : sizeof head);
    if (rc == 0 && got < 0) rc = (int)got;
    else if (rc == 0 && (size_t)got < FTRT__SHARD_HDR_BYTES) rc = -ENODATA;
    if (rc == 0) rc = ftrt__shard_peek(head, (size_t)got, &tb, &why);
    if (rc == 0 && tb > (uint64_t)st.st_size) {
        why = "file shorter than its region table (truncated?)";
        rc = FTRT_ECORRUPT;
    }
    if (rc == 0 && tb > (size_t)got) { /* a table past the first page: read it whole */
        if (!(table = malloc(tb))) rc = -ENOMEM;
        if (rc == 0) rc = ftrt__io_read(io, fd, table, tb, 0);
    }
    if (rc == 0)
        rc = ftrt__shard_parse(table ? table : head, tb, (uint64_t)st.st_size, hdr, ents, &why);
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

/*
 * restore.c - loading a committed checkpoint into registered regions (restore.h).
 *
 * The MANIFEST is parsed and validated first (format.c), then each needed shard is opened, its
 * size and header CRC are checked against the MANIFEST, its region table is matched against
 * the registered regions (by name; size and flags must agree), and the data is read through
 * io_uring straight into region memory and verified with CRC32C; device regions are read into
 * a host bounce buffer and written with the device backend's from_host (kernels/location.h),
 * which checks the CRC32C of what landed. REPLICATED regions are
 * gathered from every shard's slice, so they restore to any number of trainers; SHARDED
 * regions come from the rank's own shard and need the checkpoint's number of trainers.
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
#include "base/log.h"
#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "checkpoint/restore.h"
#include "checkpoint/shard.h"
#include "ftrt.h"
#include "kernels/location.h"

/* The restore's read requests are at most this long (checkpoint writes keep the configured
 * FTRT_CKPT_CHUNK_KB). Each completed request is copied out of its bounce buffer while the
 * next ones are in flight: a request of 1 MiB is still in the cache when it is copied, one of
 * 4 MiB (8 in flight: 32 MiB, the whole L3 of the VM measured) is read back from memory, and
 * on a disk as fast as memory's share of the copy that halves the restore (measured on a
 * 2-core VM, O_DIRECT reads at 7-8 GB/s: 4 MiB x 8 with the copy + CRC32C at 4 GB/s, 1 MiB x 8
 * at 7 GB/s, the reads alone at 7-8 GB/s either way; docs/benchmarks.md, checkpoint engine). */
#define READ_CHUNK ((size_t)1 << 20)

static int read_manifest(const char *sdir, int64_t step, ftrt__manifest *m)
{
    char path[4096];
    struct stat st;
    int rc = ftrt__path(path, sizeof path, "%s/MANIFEST", sdir);
    if (rc < 0) return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        ftrt_log_warn("checkpoint: cannot open %s: %s", path, strerror(-rc));
        return rc;
    }
    char *buf = NULL;
    const char *why = NULL;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
    } else if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
               (uint64_t)st.st_size > FTRT__MANIFEST_MAX) {
        why = "empty, too large or not a regular file";
    } else if (!(buf = malloc((size_t)st.st_size))) {
        rc = -ENOMEM;
    } else {
        size_t len = (size_t)st.st_size, done = 0;
        while (done < len) {
            ssize_t n = pread(fd, buf + done, len - done, (off_t)done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) rc = -errno;
            if (n <= 0) break;
            done += (size_t)n;
        }
        if (rc == 0 && done < len) why = "shrank while being read";
        if (rc == 0 && !why) {
            rc = ftrt__manifest_parse(buf, len, step, m, &why);
            if (rc == FTRT_ECORRUPT) rc = 0; /* reported below with why */
            else why = NULL;
        }
    }
    free(buf);
    close(fd);
    if (rc == 0 && why) {
        ftrt_log_warn("checkpoint: %s is corrupt: %s", path, why);
        rc = FTRT_ECORRUPT;
    } else if (rc < 0) {
        ftrt_log_warn("checkpoint: cannot read %s: %s", path, strerror(-rc));
    }
    return rc;
}

static const ftrt__shard_ent *find_ent(const ftrt__shard_ent *e, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0) return &e[i];
    return NULL;
}

/* 1 when registered region g is optional and this shard's entry x cannot fill it (absent, of
 * another kind, or of another size where sizes must agree): it is then left as it is. */
static int optional_skipped(const ftrt__shard_ent *x, const ftrt__region *g, int own)
{
    if (!g->optional) return 0;
    if (!x || x->kind != (uint32_t)g->kind) return 1;
    return (own || x->kind == FTRT__KIND_REPLICATED) && x->total_bytes != (uint64_t)g->bytes;
}

/* Matches the registered regions against a shard's table: every one must be there (an
 * optional one may be missing or differ: left as it is) with the same kind; sizes must agree
 * for REPLICATED regions and, in this rank's own shard, for SHARDED ones (other ranks'
 * SHARDED regions may have other sizes). */
static int match_table(const char *path, const ftrt__shard_ent *e, uint32_t n,
                       const ftrt__region *regs, int nregs, int own, int log_extra)
{
    for (int i = 0; i < nregs; i++) {
        const ftrt__shard_ent *x = find_ent(e, n, regs[i].name);
        if (optional_skipped(x, &regs[i], own)) {
            if (log_extra)
                ftrt_log_info("checkpoint %s: optional region \"%s\" %s: left as it is", path,
                              regs[i].name, x ? "differs in kind or size" : "is not there");
            continue;
        }
        if (!x) {
            ftrt_log_warn("checkpoint %s has no region \"%s\"", path, regs[i].name);
            return FTRT_EMISMATCH;
        }
        if (x->kind != (uint32_t)regs[i].kind) { /* parsed: x->kind is a valid kind */
            ftrt_log_warn("checkpoint %s: region \"%s\" is %s there but registered %s (in %s "
                          "memory)",
                          path, regs[i].name, ftrt__kind_name((ftrt__region_kind)x->kind),
                          ftrt__kind_name(regs[i].kind), ftrt__loc_name(regs[i].loc));
            return FTRT_EMISMATCH;
        }
        if ((own || x->kind == FTRT__KIND_REPLICATED) &&
            x->total_bytes != (uint64_t)regs[i].bytes) {
            ftrt_log_warn("checkpoint %s: region \"%s\" has %llu bytes there but %zu registered",
                          path, regs[i].name, (unsigned long long)x->total_bytes, regs[i].bytes);
            return FTRT_EMISMATCH;
        }
    }
    if (log_extra)
        for (uint32_t j = 0; j < n; j++) {
            int found = 0;
            for (int i = 0; i < nregs && !found; i++) found = strcmp(regs[i].name, e[j].name) == 0;
            if (!found)
                ftrt_log_info("checkpoint %s: region \"%s\" is not registered: ignored", path,
                              e[j].name);
        }
    return 0;
}

/* Per-load reading state: the ring, the bounce buffers and the options. */
typedef struct loader {
    ftrt__io io;
    ftrt__reader rd;
    const ftrt__load_opts *o;
    ftrt__load_stat *st;
} loader;

/* Reads len bytes at file offset off into host memory dst, with their CRC32C (the direct
 * descriptor first when there is one). */
static int read_range(loader *L, int fd, int dfd, uint64_t off, void *dst, size_t len,
                      uint32_t *crc)
{
    int rc = -EINVAL;
    if (dfd >= 0) rc = ftrt__reader_read(&L->rd, dfd, off, dst, len, crc);
    if (dfd < 0 || rc == -EINVAL) rc = ftrt__reader_read(&L->rd, fd, off, dst, len, crc);
    return rc;
}

/* A device region's slice: read in pieces of qd * chunk bytes into a host bounce buffer, each
 * written to device memory by the device backend's from_host, which checks that the piece's
 * CRC32C (as read from the file) is what landed; *crc receives the CRC32C of the whole slice. */
static int read_dev_slice(loader *L, int fd, int dfd, const ftrt__loc_ops *dev,
                          const ftrt__shard_ent *x, unsigned char *dst, uint32_t *crc)
{
    size_t len = (size_t)x->slice_bytes, piece = L->o->chunk * L->o->qd;
    if (piece > len) piece = len;
    unsigned char *buf = malloc(piece);
    if (!buf) return -ENOMEM;
    int rc = 0;
    *crc = 0;
    for (size_t off = 0; off < len && rc == 0; off += piece) {
        size_t n = len - off < piece ? len - off : piece;
        uint32_t pcrc = 0;
        rc = read_range(L, fd, dfd, x->file_offset + off, buf, n, &pcrc);
        if (rc == 0) rc = dev->from_host(dst + off, buf, n, pcrc);
        if (rc == FTRT_ECORRUPT)
            ftrt_log_warn("checkpoint: region \"%s\": the %zu bytes at offset %zu did not reach "
                          "%s device memory intact (CRC32C check after the copy)",
                          x->name, n, off, dev->name);
        *crc = ftrt__crc32c_combine(*crc, pcrc, n);
    }
    free(buf);
    return rc;
}

/* Reads one slice into dst (host memory, or device memory through dev when dev is not NULL)
 * and verifies its CRC. */
static int read_slice(loader *L, int fd, int dfd, const char *path, const ftrt__shard_ent *x,
                      void *dst, const ftrt__loc_ops *dev)
{
    if (x->slice_bytes > SIZE_MAX) return -EFBIG;
    uint32_t crc = 0;
    int rc = dev ? read_dev_slice(L, fd, dfd, dev, x, dst, &crc)
                 : read_range(L, fd, dfd, x->file_offset, dst, (size_t)x->slice_bytes, &crc);
    if (rc == -ENODATA) {
        ftrt_log_warn("checkpoint shard %s is corrupt: region \"%s\" truncated", path, x->name);
        return FTRT_ECORRUPT;
    }
    if (rc == FTRT_ECORRUPT) return rc; /* logged */
    if (rc < 0) {
        ftrt_log_warn("checkpoint shard %s: reading region \"%s\" failed: %s", path, x->name,
                      ftrt_strerror(rc));
        return rc;
    }
    if (crc != x->data_crc) {
        ftrt_log_warn("checkpoint shard %s is corrupt: region \"%s\" data CRC32C 0x%08x, table "
                      "says 0x%08x",
                      path, x->name, crc, x->data_crc);
        return FTRT_ECORRUPT;
    }
    if (L->st) L->st->bytes += x->slice_bytes;
    return 0;
}

/* Verifies shard r of the checkpoint and loads what this rank needs from it. */
static int load_shard(loader *L, const char *sdir, const ftrt__manifest *m, int64_t step, int r,
                      int rank, const ftrt__region *regs, int nregs, int first)
{
    char path[4096];
    ftrt__shard_hdr h;
    ftrt__shard_ent *e = NULL;
    uint64_t size;
    int rc = ftrt__path(path, sizeof path, "%s/rank-%d.ftrt", sdir, r);
    if (rc < 0) return rc;
    int fd = ftrt__shard_open(&L->io, path, &size, &h, &e);
    if (fd < 0) return fd;
    int dfd = ftrt__io_open_direct(path, L->o->direct);
    if (size != m->bytes[r]) {
        ftrt_log_warn("checkpoint shard %s is corrupt: %llu bytes, MANIFEST says %llu "
                      "(truncated?)",
                      path, (unsigned long long)size, (unsigned long long)m->bytes[r]);
        rc = FTRT_ECORRUPT;
    } else if (h.header_crc != m->hcrc[r]) {
        ftrt_log_warn("checkpoint shard %s is corrupt: header CRC32C 0x%08x, MANIFEST says "
                      "0x%08x (replaced after the commit?)",
                      path, h.header_crc, m->hcrc[r]);
        rc = FTRT_ECORRUPT;
    } else if (h.step != step || h.rank != (uint32_t)r || h.nranks != (uint32_t)m->nranks) {
        ftrt_log_warn("checkpoint shard %s is corrupt: header says step %lld rank %u of %u",
                      path, (long long)h.step, h.rank, h.nranks);
        rc = FTRT_ECORRUPT;
    } else {
        rc = match_table(path, e, h.nregions, regs, nregs, r == rank, first);
    }
    for (int i = 0; i < nregs && rc == 0; i++) {
        const ftrt__shard_ent *x = find_ent(e, h.nregions, regs[i].name);
        if (optional_skipped(x, &regs[i], r == rank)) continue; /* match_table let it be */
        if (regs[i].kind == FTRT__KIND_SHARDED && r != rank) continue;
        if (x->slice_bytes == 0) {
            if (x->data_crc != 0) {
                ftrt_log_warn("checkpoint shard %s is corrupt: empty region \"%s\" has a CRC",
                              path, x->name);
                rc = FTRT_ECORRUPT;
            }
            continue;
        }
        rc = read_slice(L, fd, dfd, path, x, (unsigned char *)regs[i].ptr + x->slice_offset,
                        regs[i].loc == FTRT__LOC_DEVICE ? ftrt__loc_device() : NULL);
    }
    free(e);
    if (dfd >= 0) close(dfd);
    close(fd);
    return rc;
}

int ftrt__ckpt_load(const char *dir, int64_t step, int rank, int nranks,
                    const ftrt__region *regs, int nregs)
{
    ftrt__load_opts o = {.qd = 8, .chunk = 4u << 20, .direct = 1};
    return ftrt__ckpt_load_ex(dir, step, rank, nranks, regs, nregs, &o, NULL);
}

int ftrt__ckpt_load_ex(const char *dir, int64_t step, int rank, int nranks,
                       const ftrt__region *regs, int nregs, const ftrt__load_opts *o,
                       ftrt__load_stat *st)
{
    char sdir[4096];
    ftrt__manifest m = {0};
    double t0 = ftrt__now();
    if (st) memset(st, 0, sizeof *st);
    if (!o || o->qd < 1 || o->chunk < FTRT__SHARD_ALIGN || o->chunk % FTRT__SHARD_ALIGN) return -EINVAL;
    int any_repl = 0, any_sharded = 0, rc;
    if (!dir || step < 0 || nranks < 1 || rank < 0 || rank >= nranks || nregs < 0 ||
        (nregs > 0 && !regs))
        return -EINVAL;
    for (int i = 0; i < nregs; i++) {
        if (strnlen(regs[i].name, FTRT__NAME_MAX) >= FTRT__NAME_MAX ||
            (regs[i].bytes > 0 && !regs[i].ptr))
            return -EINVAL;
        if (regs[i].kind == FTRT__KIND_SHARDED) any_sharded = 1;
        else if (regs[i].kind == FTRT__KIND_REPLICATED) any_repl = 1;
        else return -EINVAL;
        if (regs[i].loc == FTRT__LOC_DEVICE && !ftrt__loc_device()) {
            ftrt_log_error("checkpoint: cannot restore region \"%s\" of step %lld: it is in "
                           "device memory and this process has no device backend",
                           regs[i].name, (long long)step);
            return FTRT_ENOTSUP;
        }
    }
    if ((rc = ftrt__path(sdir, sizeof sdir, "%s/step-%lld", dir, (long long)step)) < 0) return rc;
    if ((rc = read_manifest(sdir, step, &m)) < 0) goto out;
    if (any_sharded && nranks != m.nranks) {
        ftrt_log_warn("checkpoint %s was written by %d trainers and holds SHARDED regions: it "
                      "cannot be restored to %d trainers",
                      sdir, m.nranks, nranks);
        rc = FTRT_EMISMATCH;
        goto out;
    }
    loader L = {.o = o, .st = st};
    ftrt__io_init(&L.io, FTRT__IO_ENTRIES);
    size_t rchunk = o->chunk < READ_CHUNK ? o->chunk : READ_CHUNK;
    if ((rc = ftrt__reader_init(&L.rd, &L.io, o->qd, rchunk)) < 0) {
        ftrt__io_exit(&L.io);
        goto out;
    }
    /* REPLICATED regions need every shard; SHARDED ones only this rank's. With neither, this
     * rank's shard (or shard 0) is still checked against the MANIFEST. */
    int own = rank < m.nranks ? rank : 0, first = 1;
    for (int r = 0; r < m.nranks && rc == 0; r++) {
        if (!any_repl && r != own) continue;
        rc = load_shard(&L, sdir, &m, step, r, rank, regs, nregs, first);
        first = 0;
    }
    ftrt__reader_free(&L.rd);
    ftrt__io_exit(&L.io);
    if (rc == 0) {
        if (st) st->seconds = ftrt__now() - t0;
        ftrt_log_info("checkpoint: loaded step %lld (written by %d trainers) as rank %d of %d",
                      (long long)step, m.nranks, rank, nranks);
    }
out:
    ftrt__manifest_free(&m);
    return rc;
}

/*
 * shard.h - shard files (shard.c): writing one, from region memory (streaming, bounded
 * buffers) or from a staged file image (the engine's persist thread), laying one out, and
 * opening one for reading with its header and table checked. The bytes are format.h's; the
 * I/O goes through io.h. Internal to libftrt.
 */
#ifndef FTRT_CKPT_SHARD_H
#define FTRT_CKPT_SHARD_H

#include <stdint.h>

#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "checkpoint/region.h"

/* Lays out the region table of rank's shard of nranks for regs[0..nregs) into ents (data_crc
 * zeroed); table_bytes = 40 + 112 * nregs. Returns the file size (a multiple of 4096), or 0
 * when it would not fit an off_t. */
uint64_t ftrt__shard_layout(const ftrt__region *regs, int nregs, int rank, int nranks,
                            ftrt__shard_ent *ents, uint32_t table_bytes);

/* Checks a region array for the writer: count, names (1..63 bytes, unique), kinds, pointers,
 * and a device backend for device regions (the writer reads them through its to_host,
 * kernels/location.h). Returns 0, -EINVAL, or FTRT_ENOTSUP for a device region when there is no
 * device backend (logged, naming it). */
int ftrt__regions_check(const ftrt__region *regs, int nregs);

/* Writes the shard of logical rank `rank` of `nranks` for checkpoint `step` into
 * <dir>/step-<step>/rank-<rank>.ftrt (creating the directories), through io_uring, and
 * fdatasyncs it before returning. Device regions are read through the device backend in
 * chunks of the staging buffers (never whole on the host). Returns 0 or -errno (ENOSPC, EIO,
 * EACCES, ...), FTRT_ENOTSUP for a device region without a device backend
 * (ftrt__regions_check), or the backend's error code (logged, naming the region). On failure
 * the partial file is removed; nothing committed is touched. */
int ftrt__shard_write(const char *dir, int64_t step, int rank, int nranks,
                      const ftrt__region *regs, int nregs);

/* How ftrt__shard_write_image writes. */
typedef struct ftrt__wopts {
    unsigned qd;     /* requests in flight, >= 1 */
    size_t chunk;    /* bytes per request, a multiple of 4096 */
    int direct;      /* try O_DIRECT */
    int delay_ms;    /* test knob: sleep after each completed request */
    int (*abandoned)(void *arg); /* polled between requests: non-zero stops the write */
    void *arg;
} ftrt__wopts;

/* What ftrt__shard_write_image did. */
typedef struct ftrt__wstat {
    uint64_t bytes;
    int direct, fixed; /* O_DIRECT used; registered buffers used */
    double write_s;    /* open .. last write completed, seconds */
    double total_s;    /* open .. directory fsync'ed (durable and published), seconds */
} ftrt__wstat;

/* Writes the shard image img[0..bytes) (bytes a multiple of 4096, img 4096-aligned) of rank to
 * <dir>/step-<step>/rank-<rank>.ftrt: creates the directories, writes <file>.tmp (fallocate,
 * then o->qd o->chunk-sized writes in flight, fixed-buffer writes where img lies in a buffer
 * registered with io, O_DIRECT where accepted), fdatasyncs it through the ring, renames it
 * into place and fsyncs the directory. Returns 0, FTRT_ERECOVER when o->abandoned() said stop
 * (the partial file is removed), or -errno (ENOSPC, EIO, ...; logged, partial file removed).
 * *st (may be NULL) receives timings on success. Called by one thread per io. */
int ftrt__shard_write_image(ftrt__io *io, const char *dir, int64_t step, int rank,
                            const unsigned char *img, uint64_t bytes, const ftrt__wopts *o,
                            ftrt__wstat *st);

/* Opens <path> (a shard), checks its size and reads and validates its header + table (the
 * first 4 KiB with one pread, a larger table through io).
 *   size: receives the file size; hdr/ents: as ftrt__shard_parse().
 * Returns an fd (>= 0; the caller closes it), -ENOENT (logged at warn), FTRT_ECORRUPT (logged
 * at warn with the path and the problem), -ENOMEM, or -errno. */
int ftrt__shard_open(ftrt__io *io, const char *path, uint64_t *size, ftrt__shard_hdr *hdr,
                     ftrt__shard_ent **ents);

#endif

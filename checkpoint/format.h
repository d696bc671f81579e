/*
 * format.h - the on-disk shard format, its encoder/decoder and the shared I/O helpers of the
 * checkpoint module (internal to checkpoint/; the rest of libftrt uses ckpt.h).
 *
 * Shard file <dir>/step-<S>/rank-<r>.ftrt, all integers little-endian:
 *
 *   offset  size  header (FTRT__SHARD_HDR_BYTES = 40 bytes)
 *        0     8  magic "FTRTSHRD"
 *        8     4  u32 format version (FTRT__SHARD_VERSION = 1)
 *       12     4  u32 header + table bytes = 40 + 112 * nregions
 *       16     8  i64 step (>= 0)
 *       24     4  u32 logical rank r (< nranks)
 *       28     4  u32 nranks N (>= 1)
 *       32     4  u32 nregions (<= FTRT__SHARD_MAX_REGIONS)
 *       36     4  u32 header_crc32c: CRC32C of header + table with these 4 bytes zeroed
 *
 *   then nregions table entries (FTRT__SHARD_ENT_BYTES = 112 bytes each):
 *        0    64  name, NUL-terminated, 1..63 bytes, unique in the table
 *       64     4  u32 flags (FTRT_REGION_REPLICATED or FTRT_REGION_SHARDED)
 *       68     4  u32 reserved (0)
 *       72     8  u64 total_bytes B of the region
 *       80     8  u64 slice_offset: REPLICATED: B*r/N; SHARDED: 0
 *       88     8  u64 slice_bytes:  REPLICATED: B*(r+1)/N - B*r/N; SHARDED: B
 *       96     8  u64 file_offset of the slice's data: 4096-aligned, after the table and after
 *                 the previous entry's data (entries are laid out in table order)
 *      104     4  u32 data_crc32c of the slice's bytes
 *      108     4  u32 reserved (0)
 *
 * Data: the header + table are padded with zeros to 4096 bytes; each slice starts at its
 * 4 KiB-aligned file_offset and is padded with zeros to the next 4 KiB boundary, so the file
 * size is a multiple of 4096 (the writer never leaves holes).
 */
#ifndef FTRT_CKPT_FORMAT_H
#define FTRT_CKPT_FORMAT_H

#include <liburing.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/fs.h"
#include "checkpoint/ckpt.h"
#include "base/knobs.h" /* test knobs of the I/O paths */

#define FTRT__SHARD_MAGIC "FTRTSHRD"
#define FTRT__SHARD_VERSION 1u
#define FTRT__SHARD_HDR_BYTES 40u
#define FTRT__SHARD_ENT_BYTES 112u
#define FTRT__SHARD_MAX_REGIONS 4096u
#define FTRT__SHARD_ALIGN 4096u
/* Largest header + table: 40 + 112 * 4096 bytes. */
#define FTRT__SHARD_MAX_TABLE                                                                  \
    (FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * FTRT__SHARD_MAX_REGIONS)
/* Largest I/O request and staging chunk of the synchronous (streaming) writer. */
#define FTRT__IO_CHUNK (8u << 20)
/* Requests kept in flight per file. */
#define FTRT__IO_DEPTH 4u
/* Sanity bound on the number of trainers a MANIFEST may name. */
#define FTRT__MAX_RANKS (1 << 20)

/* Decoded shard header. */
typedef struct ftrt__shard_hdr {
    uint32_t version;
    uint32_t table_bytes; /* header + table */
    int64_t step;
    uint32_t rank;
    uint32_t nranks;
    uint32_t nregions;
    uint32_t header_crc;
} ftrt__shard_hdr;

/* Decoded region table entry. */
typedef struct ftrt__shard_ent {
    char name[FTRT__NAME_MAX];
    uint32_t flags;
    uint64_t total_bytes;
    uint64_t slice_offset;
    uint64_t slice_bytes;
    uint64_t file_offset;
    uint32_t data_crc;
} ftrt__shard_ent;

/* Rounds x up to a multiple of 4096; x must be <= UINT64_MAX - 4095. */
static inline uint64_t ftrt__align4k(uint64_t x)
{
    return (x + (FTRT__SHARD_ALIGN - 1)) & ~(uint64_t)(FTRT__SHARD_ALIGN - 1);
}

/* The slice [*off, *off + *len) of a REPLICATED region of `total` bytes that rank r of n
 * stores: [B*r/n, B*(r+1)/n), computed without overflow (requires 0 <= r < n). */
void ftrt__slice(uint64_t total, uint32_t r, uint32_t n, uint64_t *off, uint64_t *len);

/* Encodes hdr and ents[0..hdr->nregions) into buf (hdr->table_bytes bytes), computing and
 * storing header_crc (also written back to hdr->header_crc). hdr->table_bytes must be
 * 40 + 112 * nregions. */
void ftrt__shard_encode(void *buf, ftrt__shard_hdr *hdr, const ftrt__shard_ent *ents);

/* Reads the header+table size from the first len bytes of a shard (len >= 40 needed) after
 * checking the magic, version and size fields. Returns 0 with *table_bytes set, or
 * FTRT_ECORRUPT with *why naming the problem. Robust against arbitrary bytes. */
int ftrt__shard_peek(const void *buf, size_t len, uint32_t *table_bytes, const char **why);

/* Decodes and validates the header + table in buf[0..len) of a shard whose file is file_size
 * bytes long: magic, version, sizes, counts, header CRC, names (terminated, non-empty,
 * unique), flags, slice geometry (REPLICATED slices must be exactly rank's 1/N share), data
 * offsets (aligned, ordered, non-overlapping, within file_size, no overflow).
 *   hdr:  receives the header.
 *   ents: receives a malloc'd array of hdr->nregions entries (NULL when 0); caller frees.
 *   why:  receives a static description of the first problem found (may be NULL).
 * Returns 0, FTRT_ECORRUPT, or -ENOMEM. Robust against arbitrary bytes (fuzz entry point);
 * never reads outside buf[0..len). Thread-safe. */
int ftrt__shard_parse(const void *buf, size_t len, uint64_t file_size, ftrt__shard_hdr *hdr,
                      ftrt__shard_ent **ents, const char **why);

/* ---- I/O helpers (shard.c) ---------------------------------------------------------------- */

/* An io_uring, or the synchronous fallback (pread/pwrite/fdatasync) when the kernel refuses
 * one (ENOSYS, EPERM in a sandbox, ...); the fallback is logged once at warn level. */
typedef struct ftrt__io ftrt__io;
struct ftrt__io {
    struct io_uring ring;
    int have_ring;
};

/* Sets up io; never fails (falls back to synchronous I/O). */
void ftrt__io_init(ftrt__io *io);
void ftrt__io_exit(ftrt__io *io);

/* Reads exactly len bytes at file offset off into buf, up to FTRT__IO_DEPTH chunks in flight.
 * Returns 0, -ENODATA when the file ends first, or -errno. */
int ftrt__io_read(ftrt__io *io, int fd, void *buf, size_t len, uint64_t off);

/* Opens <path> (a shard), checks its size and reads and validates its header + table.
 *   size: receives the file size; hdr/ents: as ftrt__shard_parse().
 * Returns an fd (>= 0; the caller closes it), -ENOENT (logged at warn), FTRT_ECORRUPT (logged
 * at warn with the path and the problem), -ENOMEM, or -errno. */
int ftrt__shard_open(ftrt__io *io, const char *path, uint64_t *size, ftrt__shard_hdr *hdr,
                     ftrt__shard_ent **ents);

/* Lays out the region table of rank's shard of nranks for regs[0..nregs) into ents (data_crc
 * zeroed); table_bytes = 40 + 112 * nregs. Returns the file size (a multiple of 4096), or 0
 * when it would not fit an off_t. */
uint64_t ftrt__shard_layout(const ftrt__region *regs, int nregs, int rank, int nranks,
                            ftrt__shard_ent *ents, uint32_t table_bytes);

/* Checks a region array for the writer: count, names (1..63 bytes, unique), flags, pointers.
 * Returns 0 or -EINVAL. */
int ftrt__regions_check(const ftrt__region *regs, int nregs);

/* ---- io_uring paths of the engine (uring.c) ---------------------------------------------- */

/* The persist thread's ring, with the staging slots registered as fixed buffers. */
typedef struct ftrt__wring {
    struct io_uring ring;
    int have_ring;
    unsigned nfixed;    /* registered buffers (0: plain writes) */
    struct iovec *iov;  /* the registered buffers */
} ftrt__wring;

/* Sets up w with room for qd requests in flight. Never fails: without io_uring (refused by the
 * kernel or the io_force_sync test knob) writes use pwrite, said once at warn level. Returns 0. */
int ftrt__wring_init(ftrt__wring *w, unsigned qd);
/* Unregisters the buffers and tears the ring down. Idempotent. */
void ftrt__wring_exit(ftrt__wring *w);
/* Replaces the registered buffers with iov[0..n) (each at most 1 GiB). Returns 0, -ENOSYS (no
 * ring) or -errno (registration refused, e.g. RLIMIT_MEMLOCK; said once; writes then use
 * unregistered buffers). */
int ftrt__wring_register(ftrt__wring *w, const struct iovec *iov, unsigned n);

typedef struct ftrt__wopts {
    unsigned qd;     /* requests in flight, >= 1 */
    size_t chunk;    /* bytes per request, a multiple of 4096 */
    int direct;      /* try O_DIRECT */
    int delay_ms;    /* test knob: sleep after each completed request */
    int (*abandoned)(void *arg); /* polled between requests: non-zero stops the write */
    void *arg;
} ftrt__wopts;

typedef struct ftrt__wstat {
    uint64_t bytes;
    int direct, fixed; /* O_DIRECT used; registered buffers used */
    double write_s;    /* open .. last write completed, seconds */
    double total_s;    /* open .. directory fsync'ed (durable and published), seconds */
} ftrt__wstat;

/* Writes the shard image img[0..bytes) (bytes a multiple of 4096, img 4096-aligned) of rank to
 * <dir>/step-<step>/rank-<rank>.ftrt: creates the directories, writes <file>.tmp (fallocate,
 * then qd chunk-sized writes in flight, fixed-buffer writes where img lies in a registered
 * buffer, O_DIRECT where accepted), fdatasyncs it through the ring, renames it into place and
 * fsyncs the directory. Returns 0, FTRT_ERECOVER when o->abandoned() said stop (the partial
 * file is removed), or -errno (ENOSPC, EIO, ...; logged, partial file removed). *st (may be
 * NULL) receives timings on success. Called by one thread per w. */
int ftrt__image_write(ftrt__wring *w, const char *dir, int64_t step, int rank,
                      const unsigned char *img, uint64_t bytes, const ftrt__wopts *o,
                      ftrt__wstat *st);

/* Maps len bytes of anonymous memory aligned to 2 MiB and advised for transparent huge pages
 * (I/O over 2 MiB pages needs far fewer DMA segments than over 4 KiB ones). Returns NULL on
 * failure; release with ftrt__unmap_huge(p, len). */
void *ftrt__map_huge(size_t len);
void ftrt__unmap_huge(void *p, size_t len);

/* Bounce buffers for verified reads on io's ring. */
typedef struct ftrt__reader {
    ftrt__io *io;
    unsigned char *bounce; /* qd x chunk bytes, mapped (huge pages where possible) */
    size_t len;            /* bytes mapped at bounce */
    size_t chunk;
    unsigned qd;
    int fixed; /* bounce registered with io's ring */
} ftrt__reader;

/* Allocates qd bounce buffers of chunk bytes (a multiple of 4096) and registers them with io's
 * ring when it can. Returns 0 or -ENOMEM. */
int ftrt__reader_init(ftrt__reader *r, ftrt__io *io, unsigned qd, size_t chunk);
void ftrt__reader_free(ftrt__reader *r);
/* Reads len bytes at file offset off (4096-aligned) of fd into dst, qd chunks in flight, each
 * copied into dst with the fused copy + CRC32C as it completes; *crc receives the CRC32C of
 * the len bytes. fd may be an O_DIRECT descriptor (reads are 4 KiB-aligned and sized). Returns
 * 0, -ENODATA (the file ends first), or -errno (-EINVAL from a file system that refuses the
 * direct read: retry with a buffered descriptor). */
int ftrt__reader_read(ftrt__reader *r, int fd, uint64_t off, void *dst, size_t len,
                      uint32_t *crc);
/* Opens path read-only with O_DIRECT. Returns the fd, or -errno (-EINVAL: not supported here,
 * said once; also when direct is 0 or the ckpt_force_buffered test knob is set). */
int ftrt__open_direct(const char *path, int direct);

/* ---- paths and files (commit.c) ---------------------------------------------------------- */

/* Parses a canonical step directory name "step-<S>" (decimal, no sign, no leading zeros
 * except "step-0", S <= INT64_MAX). Returns 1 with *step set, or 0. */
int ftrt__parse_step_name(const char *name, int64_t *step);

/* Parses the contents of a LATEST file, buf[0..len): "step-<S>" (canonical, see above) with an
 * optional trailing newline and nothing else. Returns 1 with *step set, or 0 (garbage). Robust
 * against arbitrary bytes (fuzz entry point). */
int ftrt__latest_parse(const char *buf, size_t len, int64_t *step);

#endif

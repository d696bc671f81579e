/*
 * format.h - the checkpoint's on-disk format: the directory layout, the shard file (header,
 * region table, data), MANIFEST and LATEST, their constants, and the codec of format.c that
 * encodes and decodes them (internal to checkpoint/ and its tests; the fuzz targets call the
 * decoders). Nothing here does I/O.
 *
 * Directory layout (see docs/checkpoint.md "Shard format"):
 *   <dir>/step-<S>/rank-<r>.ftrt   one shard per logical rank r of N trainers
 *   <dir>/step-<S>/MANIFEST        JSON, written by the coordinator once every shard is durable
 *   <dir>/LATEST                   "step-<S>\n", replaced atomically (temp, fsync, rename,
 *                                  fsync the directory)
 * A step directory without a MANIFEST never existed. A REPLICATED region of B bytes is stored
 * as slices: rank r of N stores bytes [B*r/N, B*(r+1)/N); a SHARDED region is stored whole by
 * every rank.
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
 *       64     4  u32 kind: 0 REPLICATED, 1 SHARDED (the values of FTRT_REGION_REPLICATED and
 *                 FTRT_REGION_SHARDED; a device region is stored as its kind, like a host one)
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
 *
 * MANIFEST (JSON, one line; written by commit.c, parsed by ftrt__manifest_parse):
 *   {"format":1,"step":S,"nranks":N,
 *    "shards":[{"rank":r,"file":"rank-r.ftrt","bytes":<file size>,"header_crc32c":<u32>},...]}
 */
#ifndef FTRT_CKPT_FORMAT_H
#define FTRT_CKPT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define FTRT__SHARD_MAGIC "FTRTSHRD"
#define FTRT__SHARD_VERSION 1u
#define FTRT__SHARD_HDR_BYTES 40u
#define FTRT__SHARD_ENT_BYTES 112u
#define FTRT__SHARD_MAX_REGIONS 4096u
#define FTRT__SHARD_ALIGN 4096u
/* Largest header + table: 40 + 112 * 4096 bytes. */
#define FTRT__SHARD_MAX_TABLE                                                                  \
    (FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * FTRT__SHARD_MAX_REGIONS)
/* A region table entry's name field, including the NUL (names are 1..63 bytes). */
#define FTRT__NAME_MAX 64
/* Sanity bound on the number of trainers a shard header or a MANIFEST may name. */
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
    uint32_t kind; /* FTRT__KIND_REPLICATED or FTRT__KIND_SHARDED (region.h) once parsed */
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

/* ---- shard header and region table ------------------------------------------------------- */

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
 * unique), kind, slice geometry (REPLICATED slices must be exactly rank's 1/N share), data
 * offsets (aligned, ordered, non-overlapping, within file_size, no overflow).
 *   hdr:  receives the header.
 *   ents: receives a malloc'd array of hdr->nregions entries (NULL when 0); caller frees.
 *   why:  receives a static description of the first problem found (may be NULL).
 * Returns 0, FTRT_ECORRUPT, or -ENOMEM. Robust against arbitrary bytes (fuzz entry point);
 * never reads outside buf[0..len). Thread-safe. */
int ftrt__shard_parse(const void *buf, size_t len, uint64_t file_size, ftrt__shard_hdr *hdr,
                      ftrt__shard_ent **ents, const char **why);

/* ---- MANIFEST ---------------------------------------------------------------------------- */

/* A decoded MANIFEST. */
typedef struct ftrt__manifest {
    int nranks;
    uint64_t *bytes; /* per rank: shard file size */
    uint32_t *hcrc;  /* per rank: header_crc32c */
} ftrt__manifest;

/* Largest MANIFEST accepted, bytes. */
#define FTRT__MANIFEST_MAX (64u << 20)

/* Parses and validates MANIFEST text buf[0..len) of step `step` (JSON object; format 1; step;
 * nranks in [1, 2^20]; one shard entry per rank named rank-<r>.ftrt with a size and a header
 * CRC; nothing but whitespace after the object). On success m owns two arrays (free with
 * ftrt__manifest_free). Returns 0, FTRT_ECORRUPT with *why naming the problem, or -ENOMEM.
 * Robust against arbitrary bytes (fuzz entry point). Thread-safe. */
int ftrt__manifest_parse(const char *buf, size_t len, int64_t step, ftrt__manifest *m,
                         const char **why);
void ftrt__manifest_free(ftrt__manifest *m);

/* ---- step names and LATEST --------------------------------------------------------------- */

/* Parses a canonical step directory name "step-<S>" (decimal, no sign, no leading zeros
 * except "step-0", S <= INT64_MAX). Returns 1 with *step set, or 0. */
int ftrt__parse_step_name(const char *name, int64_t *step);

/* Parses the contents of a LATEST file, buf[0..len): "step-<S>" (canonical, see above) with an
 * optional trailing newline and nothing else. Returns 1 with *step set, or 0 (garbage). Robust
 * against arbitrary bytes (fuzz entry point). */
int ftrt__latest_parse(const char *buf, size_t len, int64_t *step);

#endif

/*
 * ckpt.h - checkpoint format, io_uring shard I/O, commit and restore (internal to libftrt).
 *
 * On-disk layout (see README "Checkpoint format"):
 *   <dir>/step-<S>/rank-<r>.ftrt   one shard per logical rank r of N trainers
 *   <dir>/step-<S>/MANIFEST        JSON, written by the coordinator once every shard is durable
 *   <dir>/LATEST                   "step-<S>\n", replaced atomically (temp, fsync, rename, fsync dir)
 * A step directory without a MANIFEST never existed.
 *
 * Shard file: a fixed header + region table (little-endian, CRC32C over header and table), then
 * each region's data at a 4 KiB-aligned offset with its own CRC32C. A REPLICATED region of B
 * bytes is stored as slices: rank r of N stores bytes [B*r/N, B*(r+1)/N); a SHARDED region is
 * stored whole by every rank.
 */
#ifndef FTRT_CKPT_H
#define FTRT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define FTRT__NAME_MAX 64 /* region name buffer, including the NUL */

/* A registered region (host memory, owned by the application). */
typedef struct ftrt__region {
    char name[FTRT__NAME_MAX];
    void *ptr;
    size_t bytes;
    unsigned flags; /* FTRT_REGION_REPLICATED or FTRT_REGION_SHARDED (ftrt.h) */
} ftrt__region;

/* CRC32C (Castagnoli) of len bytes at buf, continuing from crc (start with 0). Uses the
 * SSE4.2 / ARMv8 CRC instruction when the CPU has it. Thread-safe. */
uint32_t ftrt__crc32c(uint32_t crc, const void *buf, size_t len);

/* Copies len bytes from src to dst and returns the CRC32C of them continued from crc, in one
 * pass over the data. dst and src must not overlap. Thread-safe. */
uint32_t ftrt__copy_crc32c(void *dst, const void *src, size_t len, uint32_t crc);

/* Writes the shard of logical rank `rank` of `nranks` for checkpoint `step` into
 * <dir>/step-<step>/rank-<rank>.ftrt (creating the directories), through io_uring, and
 * fdatasyncs it before returning. Returns 0 or -errno (ENOSPC, EIO, EACCES, ...). On failure the
 * partial file is removed; nothing committed is touched. */
int ftrt__shard_write(const char *dir, int64_t step, int rank, int nranks,
                      const ftrt__region *regs, int nregs);

/* Coordinator side of the commit: checks that every shard rank-0..nranks-1 of `step` exists
 * and has a valid header for (step, rank, nranks), writes and fsyncs <dir>/step-<step>/MANIFEST,
 * atomically replaces <dir>/LATEST, then deletes committed step directories older than the
 * newest `keep` (never the one LATEST names) and uncommitted step directories older than step.
 * Returns 0, FTRT_ECORRUPT (a shard header is bad), -ENOENT (a shard is missing), -errno. */
int ftrt__ckpt_commit(const char *dir, int64_t step, int nranks, int keep);

/* Lists committed steps (those with a MANIFEST) newest first into steps[0..max), with the step
 * LATEST names first when LATEST is valid (a garbage LATEST is logged and ignored).
 * Returns the count (0 when none), or -errno when dir exists but cannot be read. */
int ftrt__ckpt_list(const char *dir, int64_t *steps, int max);

/* Loads checkpoint `step` into regs for logical rank `rank` of `nranks`: verifies the MANIFEST,
 * each needed shard's header and every region CRC32C, reading through io_uring. REPLICATED
 * regions are reassembled from all shards' slices (works for any nranks); SHARDED regions come
 * from this rank's shard and need nranks equal to the checkpoint's.
 * Returns 0, FTRT_ECORRUPT, FTRT_EMISMATCH (region missing/size differs, or SHARDED with another
 * nranks), -ENOENT, -errno. The reason is logged at warn level. On failure region memory may
 * hold partial data. */
int ftrt__ckpt_load(const char *dir, int64_t step, int rank, int nranks,
                    const ftrt__region *regs, int nregs);

#endif

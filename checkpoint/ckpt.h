/*
 * ckpt.h - checkpoint format, io_uring shard I/O, commit and restore (internal to libftrt).
 *
 * On-disk layout (see docs/checkpoint.md "Shard format"):
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

/* A registered region (memory owned by the application). */
typedef struct ftrt__region {
    char name[FTRT__NAME_MAX];
    void *ptr;
    size_t bytes;
    unsigned flags; /* FTRT_REGION_REPLICATED or FTRT_REGION_SHARDED (ftrt.h), plus
                       FTRT_REGION_DEVICE for device memory (engine only; the shard writer and
                       loader below take host regions with the kind bit alone) */
} ftrt__region;

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

/* ftrt__ckpt_commit, and with background != 0 the files of the steps that retention removes
 * are deleted by a background thread (their MANIFEST is unlinked before this returns, so they
 * stop counting at once): the coordinator's loop must not wait for the deletion of large files.
 * Same returns. */
int ftrt__ckpt_commit_ex(const char *dir, int64_t step, int nranks, int keep, int background);

/* Un-commits every committed step >= from: first points LATEST at the newest committed step
 * below `from` (or removes LATEST when there is none), then unlinks the MANIFEST of each step
 * >= from, so that a crash half-way leaves LATEST naming a step that stays committed. The step
 * directories stay (uncommitted: a later checkpoint of the same step rewrites them, retention
 * removes them). For the coordinator after silent data corruption: checkpoints taken after the
 * last step at which every replica agreed are not trusted. *latest receives the step LATEST
 * names afterwards, or -1. Returns the number of steps un-committed (0 when none, LATEST then
 * untouched), -EINVAL, or -errno (logged). Not thread-safe against a concurrent commit in dir. */
int ftrt__ckpt_uncommit_from(const char *dir, int64_t from, int64_t *latest);

/* Waits at most timeout_s seconds for the background deletions to finish. Returns how many are
 * still pending. Thread-safe. */
int ftrt__ckpt_retention_flush(double timeout_s);

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

/* Reading options of ftrt__ckpt_load_ex (ftrt__ckpt_load uses qd 8, 4 MiB, direct). */
typedef struct ftrt__load_opts {
    unsigned qd;  /* reads in flight, >= 1 */
    size_t chunk; /* bytes per read, a multiple of 4096 */
    int direct;   /* read data with O_DIRECT where the file system accepts it */
} ftrt__load_opts;

typedef struct ftrt__load_stat {
    uint64_t bytes; /* region bytes read and verified */
    double seconds; /* whole load: MANIFEST, headers, data, CRCs */
} ftrt__load_stat;

/* ftrt__ckpt_load with options; *st (may be NULL) receives what was read. Region data is read
 * in o->chunk requests, o->qd in flight, into bounce buffers (O_DIRECT where possible) and
 * copied into region memory with the fused copy + CRC32C. Same returns as ftrt__ckpt_load, and
 * -EINVAL for bad options. */
int ftrt__ckpt_load_ex(const char *dir, int64_t step, int rank, int nranks,
                       const ftrt__region *regs, int nregs, const ftrt__load_opts *o,
                       ftrt__load_stat *st);

/* A decoded MANIFEST. */
typedef struct ftrt__manifest {
    int nranks;
    uint64_t *bytes; /* per rank: shard file size */
    uint32_t *hcrc;  /* per rank: header_crc32c */
} ftrt__manifest;

/* Parses and validates MANIFEST text buf[0..len) of step `step` (JSON object; format 1; step;
 * nranks in [1, 2^20]; one shard entry per rank named rank-<r>.ftrt with a size and a header
 * CRC; nothing but whitespace after the object). On success m owns two arrays (free with
 * ftrt__manifest_free). Returns 0, FTRT_ECORRUPT with *why naming the problem, or -ENOMEM.
 * Robust against arbitrary bytes (fuzz entry point). Thread-safe. */
int ftrt__manifest_parse(const char *buf, size_t len, int64_t step, ftrt__manifest *m,
                         const char **why);
void ftrt__manifest_free(ftrt__manifest *m);

#endif

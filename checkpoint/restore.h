/*
 * restore.h - loading a committed checkpoint into registered regions (restore.c). Internal to
 * libftrt: the runtime's ftrt_restore and recovery call it.
 */
#ifndef FTRT_CKPT_RESTORE_H
#define FTRT_CKPT_RESTORE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/region.h"

/* Loads checkpoint `step` into regs for logical rank `rank` of `nranks`: verifies the MANIFEST,
 * each needed shard's header and every region CRC32C, reading through io_uring. REPLICATED
 * regions are reassembled from all shards' slices (works for any nranks); SHARDED regions come
 * from this rank's shard and need nranks equal to the checkpoint's.
 * Returns 0, FTRT_ECORRUPT, FTRT_EMISMATCH (region missing, kind or size differs, or SHARDED with
 * another nranks), -ENOENT, -errno, FTRT_ENOTSUP (a device region and no device backend,
 * kernels/location.h; logged at error level naming it). Device regions are written through the
 * backend's from_host, CRC32C checked on arrival. The reason is logged at warn level. On failure region memory may
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

#endif

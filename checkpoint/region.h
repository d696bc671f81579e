/*
 * region.h - ftrt__region, a registered region of application memory: the unit that a
 * checkpoint stores and restores (internal to libftrt). The runtime's registry (runtime/
 * regions.c) holds them; the shard writers (shard.h), the restore (restore.h) and the engine
 * (engine.h) take arrays of them. A type only: there is no region.c.
 */
#ifndef FTRT_CKPT_REGION_H
#define FTRT_CKPT_REGION_H

#include <stddef.h>

#include "checkpoint/format.h" /* FTRT__NAME_MAX */

/* A registered region (memory owned by the application). */
typedef struct ftrt__region {
    char name[FTRT__NAME_MAX];
    void *ptr;
    size_t bytes;
    unsigned flags; /* FTRT_REGION_REPLICATED or FTRT_REGION_SHARDED (ftrt.h), plus
                       FTRT_REGION_DEVICE for device memory (engine only; the shard writers and
                       the restore take host regions with the kind bit alone) */
} ftrt__region;

#endif
